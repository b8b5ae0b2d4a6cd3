/*
 * exp2_poly.h: 2^x (and, below, 1/x) on the FMA and integer units instead of the MUFU. Relative error below
 * 2e-7 where the result is at least 2^-126 (1.72e-7 at worst: under 2 ulps, the class of ex2.approx.ftz's
 * own approximation), 2^0 = 1 exactly, and exactly 0 where x <= -126.5 (-inf included); between -126.5
 * and -126 a subnormal. Meant for the softmax's x <= 0; right up to x <= 127.5. Outside that: NaN gives 0
 * (the clamp is fmax; ex2.approx gives NaN), larger x wrong results (+inf gives NaN).
 *
 * Why: the tensor-core softmaxes can take some of their exponents from here (nv_mma.h, EXP2_POLY), to
 * share them between the MUFU pipe (4 exponents a clock a sub-partition) and the FMA pipes, eight times as
 * wide: FlashAttention-4's device. On the H200 it paid only where wgmma's warpgroups take turns and skip
 * blocks at d = 128; elsewhere the softmax was not waiting on the MUFU (docs/perf-history.md, 2026-12-03).
 *
 * How: x = j + f, j = round(x), f in [-0.5, 0.5]. 2^f is 1 + f q(f) with q of degree 4 (a near-minimax
 * fit: relative error 1.1e-7 with its f32 coefficients evaluated exactly, 1.72e-7 in f32 Horner with
 * fma). 2^j is built in a float's exponent field and multiplied in, so j = -127 gives 0 exactly, as
 * ex2.approx.ftz's flush does, and a hidden key (-inf) adds nothing to a row's sum. The rounding adds
 * 1.5 * 2^23 + 127, which leaves j + 127 in the sum's low mantissa bits, one shift from the exponent
 * field: no conversion instruction (those run at the MUFU's rate).
 *
 * Plain OpenCL C, so the emulated kernels (PoCL) run the very same arithmetic; tests/test_exp2_poly.c
 * includes it as C (as_uint, as_float, fma and fmax supplied) and checks it against double exp2. It
 * needs IEEE f32 with round-to-nearest, no excess precision and no reassociation: a build with
 * -cl-fast-relaxed-math or -cl-unsafe-math-optimizations (FLASHCL_BUILD_OPTIONS) breaks it.
 */
#ifndef FLASHCL_EXP2_POLY_H
#define FLASHCL_EXP2_POLY_H

static inline float exp2_poly(float x)
{
    /* 1.5 * 2^23 + 127: x + it rounds x to j and leaves j + 127 in the low 9 bits of its mantissa */
    const float round_shift = 12583039.0f;
    x = fmax(x, -127.0f);                           /* -inf and below: j = -127, so 2^j = 0 */
    const float shifted = x + round_shift;
    const float f = x - (shifted - round_shift);    /* x - j, in [-0.5, 0.5], exact */
    float p = 1.326472731e-03f;
    p = fma(p, f, 9.671512991e-03f);
    p = fma(p, f, 5.550733581e-02f);
    p = fma(p, f, 2.402224243e-01f);
    p = fma(p, f, 6.931470037e-01f);
    p = fma(p, f, 1.0f);                            /* 2^0 is 1 exactly: a row's largest term stays 1 */
    /* 2^j: j + 127 (0 to 254) shifted into the exponent field; 0 is 0.0f. */
    const float two_j = as_float(as_uint(shifted) << 23);
    return p * two_j;
}

/* 1 / x on the FMA units, for x in [1, 2^64 + 1] (score_mod.h's softcap, CAP_FMA): the integer guess
 * (relative error about 5% at most), then three Newton steps, each squaring the error (to 6e-8 measured over
 * the range: within an ulp or two, as rcp.approx). NaN stays NaN. tests/test_exp2_poly.c checks it too. */
static inline float recip_fma(float x)
{
    float y = as_float(0x7EF311C3u - as_uint(x));
    for (int i = 0; i < 3; i++)
        y = fma(y, fma(-x, y, 1.0f), y);
    return y;
}

#endif /* FLASHCL_EXP2_POLY_H */
