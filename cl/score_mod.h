/*
 * score_mod.h: what a kernel does to a score before the softmax, beyond the
 * scale and the mask. Logit softcapping (Gemma 2, Grok): the scaled score s
 * becomes softcap·tanh(s / softcap). The kernels keep scores in base 2 (s
 * times log2(e)), so the host passes the cap in base 2 too, SOFTCAP2 =
 * softcap·log2(e): cap2·tanh(s2 / cap2) is then log2(e) times the capped
 * natural score, the same function. Without -DSOFTCAP2 every macro here
 * leaves the score as it is, with the kernels' own arithmetic.
 *
 * ALiBi (-DALIBI=1): a bias by distance, -slope_h·|key - (row + diag)| for
 * query head h's slope (natural units), joined to the scaled and capped
 * score; diag = seq_kv - seq_q is the masks' diagonal (mask.h). In base 2 the
 * slope is slope·log2(e) (HEAD_ALIBI2). The backward's P subtracts the same
 * bias from its LSE instead (SCORE_LSE2): exp2(s2 + bias - lse2).
 *
 * Attention sinks (-DSINKS=1): a logit per query head that joins each row's
 * denominator and has no value. A kernel finishes a row with row_finish; a
 * split's partial leaves the sink out, and flash_forward_combine
 * (split_combine.h) adds it once.
 */
#ifndef FLASHCL_SCORE_MOD_H
#define FLASHCL_SCORE_MOD_H

#ifdef SOFTCAP2
#if defined(SCORE_CAP_MUFU) && !NV_EMULATE
/* NVIDIA's tensor-core kernels (SCORE_CAP_MUFU, defined by nv_mma.h and backward_args.h; not emulated):
 * cap2·tanh(s2 / cap2) = cap2 - 2 cap2 r, r = 1 / (2^(CAP_K s2) + 1), CAP_K = 2 log2(e) / cap2: one ex2.approx and one rcp.approx, where OpenCL's tanh
 * and a division by the cap took the capped wgmma forward 43-60% behind the plain one (H100). The exponent is
 * kept below 2^126, so r is never the reciprocal of an infinity; the ends are exact (r = 1: -cap2, r = 0: cap2).
 * Elsewhere OpenCL's tanh: on PoCL this form miscomputed the FMA decode kernel (docs/precision.md). */
#define CAP_K (2.0f * M_LOG2E_F / (float)(SOFTCAP2))
/* Where the cap's two MUFU operations run, when the softmax's own exponent already keeps the MUFU busy:
 * CAP_FMA bit 0, the reciprocal by Newton's iteration on the FMA units (recip_fma); bit 1, the exponent by
 * exp2_poly (FMA and integer units). 0: both on the MUFU. */
#ifndef CAP_FMA
#define CAP_FMA 0
#endif
#if CAP_FMA & 1
#define CAP_RECIP(x) recip_fma(x)
#else
#define CAP_RECIP(x) native_recip(x)
#endif
#if CAP_FMA & 2
#define CAP_EXP2(x) ((x) != (x) ? (x) : exp2_poly(x))  /* NaN kept: exp2_poly alone gives 0 for it */
#else
#define CAP_EXP2(x) exp2_ftz(x)
#endif
#define CAP_R(s2) CAP_RECIP(CAP_EXP2(cap_exponent((s2) * CAP_K)) + 1.0f)
/* At most 64, a NaN kept (fmin would give 64 for it: a capped NaN score, where tanh's form keeps the NaN).
 * Past 2^64 the cap is reached to far below f32's precision (r < 2^-64), and 2^64 + 1 keeps recip_fma's
 * first guess a normal float. */
static inline float cap_exponent(float x)
{
    return x > 64.0f ? 64.0f : x;
}

#define CAP_SLOPE_FROM_R(r) (4.0f * (r) * (1.0f - (r)))  /* 1 - tanh² */
#define SCORE_CAP(s2) fma(-2.0f * (float)(SOFTCAP2), CAP_R(s2), (float)(SOFTCAP2))
static inline float capped_score2(float s2, float *slope)
{
    const float r = CAP_R(s2);
    *slope = CAP_SLOPE_FROM_R(r);
    return fma(-2.0f * (float)(SOFTCAP2), r, (float)(SOFTCAP2));
}
#else
/* The forward's: the capped base-2 score of a base-2 score s2. */
#define SCORE_CAP(s2) ((float)(SOFTCAP2) * tanh((s2) / (float)(SOFTCAP2)))

/* The backward's: the capped base-2 score of a base-2 score s2, and in *slope the cap's derivative there,
 * 1 - tanh², which dS takes on (dS = P (dP - D) slope). */
static inline float capped_score2(float s2, float *slope)
{
    const float t = tanh(s2 / (float)(SOFTCAP2));
    *slope = 1.0f - t * t;
    return (float)(SOFTCAP2) * t;
}
#endif
/* P = EXP(capped score - lse2) of a raw score s (q.k), EXP the caller's base-2 exponent. */
#define SCORE_P_EXP(EXP, s, scale_log2, lse2, slope) EXP(capped_score2((s) * (scale_log2), &(slope)) - (lse2))
#else
#define SCORE_CAP(s2) (s2)
#define SCORE_P_EXP(EXP, s, scale_log2, lse2, slope) EXP(fma((s), (scale_log2), -(lse2)))  /* slope stays 1 */
#endif
#define SCORE_P(s, scale_log2, lse2, slope) SCORE_P_EXP(exp2, s, scale_log2, lse2, slope)

#ifndef ALIBI
#define ALIBI 0
#endif
#if ALIBI
/* Query head h's slope in base 2 (the kernel's alibi, alibi_off arguments). */
#define HEAD_ALIBI2(h) (alibi[alibi_off + (ulong)(h)] * M_LOG2E_F)
/* A base-2 score s2 of row `row` and key `key` with its bias by distance from the diagonal. */
#define SCORE_BIAS(s2, slope2, row, key, diag) fma(-(slope2), (float)abs((key) - (row) - (diag)), (s2))
/* The backward's: lse2 less the bias, so exp2(s2 - SCORE_LSE2(...)) is the biased P. */
#define SCORE_LSE2(lse2, slope2, row, key, diag) fma((slope2), (float)abs((key) - (row) - (diag)), (lse2))
/* The same from a distance key - row - diag already a float (exact: an integer below 2^24), where a kernel
 * steps one thread's keys by a constant from a base it converted once (no int -> float conversion a score:
 * a quarter-rate instruction on NVIDIA's parts, most of what ALiBi cost the tensor-core kernels). */
#define SCORE_BIAS_AT(s2, slope2, dist) fma(-(slope2), fabs(dist), (s2))
#define SCORE_LSE2_AT(lse2, slope2, dist) fma((slope2), fabs(dist), (lse2))
#else
#define SCORE_BIAS_AT(s2, slope2, dist) (s2)
#define SCORE_LSE2_AT(lse2, slope2, dist) (lse2)
#define HEAD_ALIBI2(h) 0.0f
#define SCORE_BIAS(s2, slope2, row, key, diag) (s2)
#define SCORE_LSE2(lse2, slope2, row, key, diag) (lse2)
#endif

#ifndef SINKS
#define SINKS 0
#endif

/* A row's finish from its running max m (base 2) and sum l (of exp2(s2 - m)): the factor its accumulator
 * takes (1 / l, 0 for a row that saw no key) and its natural LSE in *lse. With the head's sink (natural
 * units, read only where SINKS, and not into a split's partial): the denominator gains exp(sink), so a
 * row that saw no key gets O = 0 and LSE = sink; a sink of -inf changes nothing. */
static inline float row_finish(float m, float l, float sink, float *lse)
{
#if SINKS && !SPLIT
    const float sink2 = sink * M_LOG2E_F;
    const float m_new = fmax(l > 0.0f ? m : -INFINITY, sink2);
    if (m_new == -INFINITY) {
        *lse = -INFINITY;
        return 0.0f;
    }
    const float kept = l > 0.0f ? exp2(m - m_new) : 0.0f;  /* the accumulator's rescale to m_new */
    const float total = l * kept + exp2(sink2 - m_new);
    *lse = (m_new + log2(total)) * M_LN2_F;
    return kept / total;
#else
    (void)sink;
    *lse = l > 0.0f ? (m + log2(l)) * M_LN2_F : -INFINITY;
    return l > 0.0f ? 1.0f / l : 0.0f;
#endif
}

/* The sink of query head h, or -inf (none) without SINKS or in a split's partial. */
#if SINKS && !SPLIT
#define HEAD_SINK(h) (sinks[sink_off + (ulong)(h)])
#else
#define HEAD_SINK(h) (-INFINITY)
#endif

#endif
