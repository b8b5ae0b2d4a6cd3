/* Code point classes as llama.cpp's pre-tokenizer sees them, and UTF-8. */
#include "unicode.h"

static int in_ranges(const struct codepoint_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].first)
            hi = mid;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

enum codepoint_class codepoint_classify(uint32_t cp)
{
    /* llama.cpp's whitespace set (unicode_set_whitespace): \t..\r, space,
     * NEL, NBSP, and the Unicode space separators and line/paragraph separators. */
    if ((cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
        (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
        cp == 0x3000)
        return CP_SPACE;
    if (in_ranges(unicode_letters, unicode_letters_count, cp))
        return CP_LETTER;
    if (in_ranges(unicode_numbers, unicode_numbers_count, cp))
        return CP_NUMBER;
    return CP_OTHER;
}

int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    /* The same acceptance as llama.cpp's unicode_cpt_from_utf8: the lead byte's
     * length, continuation bytes 10xxxxxx, no check for overlong forms. */
    int len;
    uint32_t v;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2;
        v = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3;
        v = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4;
        v = s[0] & 0x07;
    } else {
        *cp = 0xfffd;
        return 1;
    }
    if ((size_t)len > n) {
        *cp = 0xfffd;
        return 1;
    }
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = 0xfffd;
            return 1;
        }
        v = v << 6 | (s[i] & 0x3f);
    }
    *cp = v;
    return len;
}

int utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18 & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}
