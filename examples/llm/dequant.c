/* Q4_1: blocks of 32 as {f16 d, f16 m, 16 bytes of nibbles}: x = q·d + m, the
 * low nibbles being elements 0..15 and the high ones 16..31. Q8_0: blocks of
 * 32 as {f16 d, 32 int8}: x = q·d. (ggml's block_q4_1 and block_q8_0.) */
#include "dequant.h"

#include <math.h>
#include <string.h>

#include "gguf.h"

float half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0) {
        /* Zero or subnormal: the value is mantissa · 2^-24 exactly. */
        float f = ldexpf((float)mantissa, -24);
        return sign ? -f : f;
    }
    if (exponent == 31)
        bits = sign | 0x7f800000u | (mantissa << 13);
    else
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t load_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

int dequant_supported(uint32_t type)
{
    return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q8_0;
}

int dequantise(uint32_t type, const uint8_t *data, uint64_t elements, float *out)
{
    switch (type) {
    case GGML_TYPE_F32:
        memcpy(out, data, (size_t)elements * 4);  /* little-endian host assumed, as ggml does */
        return 0;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < elements; i++)
            out[i] = half_to_float(load_u16(data + 2 * i));
        return 0;
    case GGML_TYPE_Q4_1:
        for (uint64_t b = 0; b < elements / 32; b++) {
            const uint8_t *block = data + b * 20;
            const float d = half_to_float(load_u16(block)), m = half_to_float(load_u16(block + 2));
            for (int j = 0; j < 16; j++) {
                out[b * 32 + j] = (float)(block[4 + j] & 0x0f) * d + m;
                out[b * 32 + j + 16] = (float)(block[4 + j] >> 4) * d + m;
            }
        }
        return 0;
    case GGML_TYPE_Q8_0:
        for (uint64_t b = 0; b < elements / 32; b++) {
            const uint8_t *block = data + b * 34;
            const float d = half_to_float(load_u16(block));
            for (int j = 0; j < 32; j++)
                out[b * 32 + j] = (float)(int8_t)block[2 + j] * d;
        }
        return 0;
    default:
        return -1;
    }
}
