/*
 * SmolLM2's tokenizer as the GGUF describes it: "gpt2" byte-level BPE
 * (tokenizer.ggml.tokens, .merges, .token_type) with the "smollm"
 * pre-tokenizer, encoding and decoding the way llama.cpp does. Pure C.
 */
#ifndef LLM_TOKENIZER_H
#define LLM_TOKENIZER_H

#include <stddef.h>

#include "gguf.h"

struct tokenizer;

/* Builds the tokenizer from the file's metadata (which it copies). 0, or -1
 * with a sentence in err. */
int tokenizer_load(const struct gguf_file *file, struct tokenizer **out, char *err, size_t err_size);
void tokenizer_free(struct tokenizer **tok);

/* Appends the token ids of text[0..len) to *ids (a malloc'd array of *count
 * entries, grown as needed). parse_special: control tokens written in the
 * text ("<|im_start|>") become their ids, as llama_tokenize(parse_special =
 * true) does; user-defined tokens always do. No BOS is added here
 * (tokenizer_add_bos says whether the model wants one). 0, or -1 when out of memory. */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, int parse_special, int **ids,
                     size_t *count);

/* The bytes token id stands for (byte-level decoded); control tokens give
 * nothing unless show_special. Returns the length written (at most cap), or
 * 0 for an id out of range. */
size_t tokenizer_decode(const struct tokenizer *tok, int id, int show_special, char *out, size_t cap);

int tokenizer_vocab_size(const struct tokenizer *tok);
int tokenizer_bos(const struct tokenizer *tok);
int tokenizer_eos(const struct tokenizer *tok);
int tokenizer_add_bos(const struct tokenizer *tok);
/* The id of a token given by its text (e.g. "<|im_start|>"), or -1. */
int tokenizer_find(const struct tokenizer *tok, const char *text);

#endif
