/* A Llama model's hyper-parameters from GGUF metadata (plain C: the fuzzer uses it too). */
#ifndef LLM_CONFIG_H
#define LLM_CONFIG_H

#include <stddef.h>

#include "gguf.h"

#define LLM_MAX_HEAD_DIM 256  /* flashcl's FLASHCL_MAX_HEAD_DIM */

struct llm_config {
    int n_layers, n_embd, n_ff, n_heads, n_heads_kv, head_dim, n_vocab, n_ctx;
    float norm_eps, rope_base;
    int tied_output;  /* logits use token_embd (no output.weight) */
};

/* Reads the config from the file's metadata and checks every tensor the
 * forward pass needs (name, shape, a type dequant_supported knows). 0, or -1
 * with a sentence in err. */
int llm_config_read(const struct gguf_file *file, struct llm_config *cfg, char *err, size_t err_size);

#endif
