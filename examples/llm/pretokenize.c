/* The smollm pre-tokenizer: two passes over code points, no regex engine. */
#include "pretokenize.h"

#include "unicode.h"

/* GPT-2's split of cps[begin..end): a hand-written matcher of the regex in
 * pretokenize.h, looking no further than the piece (as llama.cpp's
 * unicode_regex_split_custom_gpt2 does). */
static size_t split_gpt2(const uint32_t *cps, size_t begin, size_t end, size_t *piece_len)
{
    size_t count = 0, pos = begin, prev = begin;
#define CLASS_AT(p) ((p) < end ? codepoint_classify(cps[p]) : (enum codepoint_class)-1)
#define EMIT(to) do { if ((to) > prev) piece_len[count++] = (to) - prev; prev = (to); pos = (to); } while (0)
    while (pos < end) {
        const uint32_t cp = cps[pos];
        if (cp == '\'' && pos + 1 < end) {
            const uint32_t next = cps[pos + 1];
            if (next == 's' || next == 't' || next == 'm' || next == 'd') {
                EMIT(pos + 2);
                continue;
            }
            if (pos + 2 < end) {
                const uint32_t next2 = cps[pos + 2];
                if ((next == 'r' && next2 == 'e') || (next == 'v' && next2 == 'e') || (next == 'l' && next2 == 'l')) {
                    EMIT(pos + 3);
                    continue;
                }
            }
        }
        /* An optional leading space, then a run of one class. */
        const enum codepoint_class here = CLASS_AT(pos);
        const enum codepoint_class run = cp == ' ' ? CLASS_AT(pos + 1) : here;
        if (run == CP_LETTER || run == CP_NUMBER || run == CP_OTHER) {
            size_t p = pos + (cp == ' ');
            while (CLASS_AT(p) == run)
                p++;
            EMIT(p);
            continue;
        }
        size_t spaces = 0;
        while (CLASS_AT(pos + spaces) == CP_SPACE)
            spaces++;
        if (spaces > 1 && pos + spaces < end) {
            /* \s+(?!\S): the last space stays for the next word's " ?" */
            EMIT(pos + spaces - 1);
            continue;
        }
        if (spaces > 0) {
            EMIT(pos + spaces);
            continue;
        }
        EMIT(pos + 1);
    }
#undef CLASS_AT
#undef EMIT
    return count;
}

size_t pretokenize_smollm(const uint32_t *cps, size_t n, size_t *piece_len)
{
    size_t count = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        /* \p{N}: llama.cpp's collapsed-category regex sees ASCII 0-9 and
         * non-ASCII code points of category N. */
        const int number = i < n && codepoint_classify(cps[i]) == CP_NUMBER;
        if (i == n || number) {
            if (i > start)
                count += split_gpt2(cps, start, i, piece_len + count);
            if (number)
                piece_len[count++] = 1;
            start = i + 1;
        }
    }
    return count;
}
