/*
 * The "smollm" pre-tokenizer, as llama.cpp runs it (LLAMA_VOCAB_PRE_TYPE_SMOLLM):
 * first every number code point alone (\p{N}), then on each resulting piece
 * GPT-2's split 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 * (with \s+ for what that leaves). Byte-level BPE then runs on each piece.
 */
#ifndef LLM_PRETOKENIZE_H
#define LLM_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>

/* Splits the code points cps[0..n) into pieces, writing each piece's length
 * (in code points) to piece_len (room for n entries); returns the count. */
size_t pretokenize_smollm(const uint32_t *cps, size_t n, size_t *piece_len);

#endif
