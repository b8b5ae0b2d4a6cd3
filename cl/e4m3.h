/*
 * e4m3.h: E4M3 bytes (OCP FP8 "FN": a sign, 4 exponent bits of bias 7, 3
 * mantissa bits, no infinities, NaN at 0x7f and 0xff) as the kernels'
 * storage types. Every E4M3 value is exactly an f32, an f16 and a bf16, so
 * none of these round: a kernel that reads an E4M3 KV cache (-DKV_E4M3=1)
 * computes on the cache's own values, times its descale.
 * Integer arithmetic only (OpenCL C 1.2, any device); cl/flash_decode_mma.cl
 * has NVIDIA's conversion instruction where the device has it.
 */
#ifndef FLASHCL_E4M3_H
#define FLASHCL_E4M3_H

#ifndef KV_E4M3
#define KV_E4M3 0  /* 1 (2: by NVIDIA's cvt, cl/flash_decode_mma.cl): K and V are an E4M3 cache's bytes */
#endif

static inline float e4m3_to_float(uint x)
{
    const uint mag = x & 0x7fu, e = mag >> 3, m = x & 7u;
    /* normal: (1 + m/8) 2^(e-7), the f32 of exponent e + 120; subnormal: m 2^-9 */
    const float v = mag == 0x7fu ? NAN : e ? as_float((e + 120u) << 23 | m << 20) : (float)m * 0x1p-9f;
    return x & 0x80u ? -v : v;
}

/* The f16 bits of an E4M3 byte: a normal one's exponent gains 8 (bias 15 against 7); a subnormal one, m 2^-9,
 * is an f16 normal of exponent 6 + p, p the top bit of m. */
static inline uint e4m3_to_f16_bits(uint x)
{
    const uint mag = x & 0x7fu, m = x & 7u;
    uint h;
    if (mag == 0x7fu)
        h = 0x7e00u;
    else if (mag >= 8u)
        h = (mag << 7) + 0x2000u;
    else if (m == 0u)
        h = 0u;
    else {
        const uint p = 31u - clz(m);
        h = (6u + p) << 10 | (m - (1u << p)) << (10u - p);
    }
    return h | (x & 0x80u) << 8;
}

/* The bf16 bits: the f32's high half (its low half is zero: 4 significant bits). */
static inline uint e4m3_to_bf16_bits(uint x)
{
    return as_uint(e4m3_to_float(x)) >> 16;
}

/* Two E4M3 bytes (the low two of w) as a pair of 16-bit storage elements (DTYPE 1 f16, 2 bf16), the first
 * byte in the low half. */
static inline uint e4m3x2_to_pair(uint w)
{
#if DTYPE == 2
    return e4m3_to_bf16_bits(w & 0xffu) | e4m3_to_bf16_bits((w >> 8) & 0xffu) << 16;
#else
    return e4m3_to_f16_bits(w & 0xffu) | e4m3_to_f16_bits((w >> 8) & 0xffu) << 16;
#endif
}

/* Element i of K or V as a float: storage.h's LOAD, or an E4M3 cache's byte (KV_E4M3). */
#if KV_E4M3
#define LOAD_KV(p, i) e4m3_to_float(((__global const uchar *)(p))[(i)])
#else
#define LOAD_KV(p, i) LOAD(p, i)
#endif

#endif /* FLASHCL_E4M3_H */
