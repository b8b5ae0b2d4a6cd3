/*
 * score_mod.h: what a kernel does to a score before the softmax, beyond the
 * scale and the mask. Logit softcapping (Gemma 2, Grok): the scaled score s
 * becomes softcap·tanh(s / softcap). The kernels keep scores in base 2 (s
 * times log2(e)), so the host passes the cap in base 2 too, SOFTCAP2 =
 * softcap·log2(e): cap2·tanh(s2 / cap2) is then log2(e) times the capped
 * natural score, the same function. Without -DSOFTCAP2 every macro here
 * leaves the score as it is, with the kernels' own arithmetic.
 */
#ifndef FLASHCL_SCORE_MOD_H
#define FLASHCL_SCORE_MOD_H

#ifdef SOFTCAP2
/* The forward's: the capped base-2 score of a base-2 score s2. */
#define SCORE_CAP(s2) ((float)(SOFTCAP2) * tanh((s2) / (float)(SOFTCAP2)))

/* The backward's: P = exp2(capped score - lse2) of a raw score s (q.k), and in *slope the cap's derivative
 * there, 1 - tanh², which dS takes on (dS = P (dP - D) slope). */
static inline float capped_p(float s2, float lse2, float *slope)
{
    const float t = tanh(s2 / (float)(SOFTCAP2));
    *slope = 1.0f - t * t;
    return exp2((float)(SOFTCAP2) * t - lse2);
}
#define SCORE_P(s, scale_log2, lse2, slope) capped_p((s) * (scale_log2), (lse2), &(slope))
#else
#define SCORE_CAP(s2) (s2)
#define SCORE_P(s, scale_log2, lse2, slope) exp2(fma((s), (scale_log2), -(lse2)))  /* slope stays 1 */
#endif

#endif
