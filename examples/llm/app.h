/* What flashcl-llm's modes share: the file, the tokenizer and the model on the device. */
#ifndef LLM_APP_H
#define LLM_APP_H

#include <flashcl.h>

#include "gguf.h"
#include "model.h"
#include "session.h"
#include "tokenizer.h"

struct app {
    struct gguf_file file;
    struct tokenizer *tok;
    struct llm_config cfg;
    flashcl_context *fa;
    struct llm_model model;
};

/* Checks against reference data from make-reference.py (tokenizer ids,
 * teacher-forced top-k logits, greedy generations); at most max_positions
 * teacher-forced positions and max_generations generations (-1: all). Passes
 * when every text tokenizes to llama.cpp's ids, the top-1 agreement is at
 * least min_agreement %, and each greedy generation is identical or first
 * differs at a near-tie. Prints a summary; returns 0 on a pass, 1 otherwise,
 * -1 on an error. */
int run_reference_checks(struct app *app, const char *ref_path, int max_positions, int max_generations,
                         float min_agreement, const char *dump_path);

double now_seconds(void);

#endif
