/* Code point classes the pre-tokenizer needs (llama.cpp's flags: letter,
 * number, whitespace) and UTF-8 decoding. */
#ifndef LLM_UNICODE_H
#define LLM_UNICODE_H

#include <stddef.h>
#include <stdint.h>

struct codepoint_range {
    uint32_t first, last;
};

extern const struct codepoint_range unicode_letters[], unicode_numbers[];
extern const size_t unicode_letters_count, unicode_numbers_count;

enum codepoint_class { CP_OTHER = 0, CP_LETTER, CP_NUMBER, CP_SPACE };

enum codepoint_class codepoint_classify(uint32_t cp);

/* Decodes one code point at s[0..n) and returns its length in bytes (1..4);
 * an invalid or truncated sequence decodes as U+FFFD of length 1. */
int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out (4 bytes of room); returns the length. */
int utf8_encode(uint32_t cp, char *out);

#endif
