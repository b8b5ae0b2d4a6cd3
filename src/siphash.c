/* SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit MAC, here the
 * program cache's check that an entry was written by a flashcl process that
 * holds the folder's secret key. Checked against the reference vectors in
 * tests/test_cache.c. */
#include "internal.h"

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void sip_round(uint64_t v[4])
{
    v[0] += v[1];
    v[1] = ROTL(v[1], 13);
    v[1] ^= v[0];
    v[0] = ROTL(v[0], 32);
    v[2] += v[3];
    v[3] = ROTL(v[3], 16);
    v[3] ^= v[2];
    v[0] += v[3];
    v[3] = ROTL(v[3], 21);
    v[3] ^= v[0];
    v[2] += v[1];
    v[1] = ROTL(v[1], 17);
    v[1] ^= v[2];
    v[2] = ROTL(v[2], 32);
}

uint64_t fcl_siphash24(const unsigned char key[FCL_SIPHASH_KEY_BYTES], const void *data, size_t n)
{
    const uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    uint64_t v[4] = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
                     k1 ^ 0x7465646279746573ull};
    const unsigned char *p = data;
    const size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8) {
        const uint64_t m = load_le64(p + i);
        v[3] ^= m;
        sip_round(v);
        sip_round(v);
        v[0] ^= m;
    }
    /* The last block: the remaining bytes, the length's low byte on top. */
    unsigned char tail[8] = {0};
    for (size_t i = whole; i < n; i++)
        tail[i - whole] = p[i];
    tail[7] = (unsigned char)n;
    const uint64_t m = load_le64(tail);
    v[3] ^= m;
    sip_round(v);
    sip_round(v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}
