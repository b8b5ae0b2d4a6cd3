/*
 * nv_mma.h: what the two tensor-core kernels share (flash_forward_mma.cl for
 * f16/bf16, flash_forward_tf32.cl for f32): inline-PTX helpers and the
 * online softmax on m16n8 accumulator fragments.
 *
 * The includer defines S_TILES (8-key n-tiles of S per warp) and O_TILES
 * (8-column n-tiles of O) and its mask (CAUSAL or the windows of mask.h). Fragment layout
 * of an m16n8 f32 accumulator (g = lane/4, t = lane%4): c0, c1 = C[g][2t..2t+1],
 * c2, c3 = C[g+8][2t..2t+1] (PTX ISA, "Matrix fragments for mma.m16n8k16").
 */
#ifndef FLASHCL_NV_MMA_H
#define FLASHCL_NV_MMA_H

#include "nv_async.h"  /* local_address, cp.async */
#include "mask.h"      /* which keys a row sees */
#include "exp2_poly.h" /* exponents on the FMA units */
#define SCORE_CAP_MUFU 1     /* a tensor-core kernel: score_mod.h's softcap on MUFU (natively) */
#include "score_mod.h" /* row_finish: a row's normaliser, its sink included */

#if !NV_EMULATE
static inline float quad_xor(float v, int mask)
{
    float r;
    __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
    return r;
}
#endif

/* The row max of scale·s sits at the row's largest raw score when the scale
 * is positive and at its smallest when it is negative (the host defines
 * NEGATIVE_SCALE then): the softmax below finds that extreme on the raw
 * scores and applies the scale inside one fma per element, as
 * FlashAttention-2 does. HIDDEN is the raw score of a masked key. */
#ifndef NEGATIVE_SCALE
#define NEGATIVE_SCALE 0
#endif
/* Capped or biased scores are scaled first (softmax_block): their extreme is the max. */
#if NEGATIVE_SCALE && !defined(SOFTCAP2) && !ALIBI
#define ROW_EXTREME fmin
#define HIDDEN INFINITY
#else
#define ROW_EXTREME fmax
#define HIDDEN (-INFINITY)
#endif

/* Independent chains the softmax's row reductions run in: 1, 2 or 4, at most S_TILES and SOFTMAX_CHAINS
 * (-DSOFTMAX_CHAINS=1 is one chain, as before 2026-12-01). */
#ifndef SOFTMAX_CHAINS
#define SOFTMAX_CHAINS 4
#endif
#define SOFTMAX_CHAINS_CAP (SOFTMAX_CHAINS < S_TILES ? SOFTMAX_CHAINS : S_TILES)
#define ROW_CHAINS (SOFTMAX_CHAINS_CAP >= 4 ? 4 : SOFTMAX_CHAINS_CAP >= 2 ? 2 : 1)

/* -DEXP2_POLY=k (0-8): k of every 8 n-tiles of S take their exponents from exp2_poly (FMA and integer
 * units, 11 instructions) instead of the exponent unit (one MUFU.EX2, 8 clocks of its pipe a warp), to
 * share a block's 64-128 exponents a thread between the two; src/kernels.c says where it paid (wgmma at
 * d = 128 with turns and skips) and where it lost. Spread over the tiles (n k mod 8 < k), so ptxas can
 * interleave the two kinds. */
#ifndef EXP2_POLY
#define EXP2_POLY 0
#endif
#if EXP2_POLY < 0 || EXP2_POLY > 8
#error "EXP2_POLY must be 0..8 (tiles of every 8)"
#endif
#define SCORE_EXP2(n, x) (((n) * EXP2_POLY) % 8 < EXP2_POLY ? exp2_poly(x) : exp2_ftz(x))

/* ALiBi (score_mod.h): the base-2 slopes of the tile's two rows (g and g + 8; one head's, but the decode
 * kernel's rows are heads of a group) travel as two more arguments of the softmax, only where ALIBI. */
#if ALIBI
#define ALIBI_PARAM , float slope2_lo, float slope2_hi
#define ALIBI_ARG(lo, hi) , (lo), (hi)
#else
#define ALIBI_PARAM
#define ALIBI_ARG(lo, hi)
#endif

/*
 * Folds one block of raw scores s (one 16-row mma tile: this thread's rows
 * g and g + 8, whose query positions for the mask are row_lo and row_hi,
 * keys kb + 8n + 2t + {0,1}) into the running max
 * m (of scale·s, in base 2), the per-thread partial sum l and, where
 * `rescale` (a constant), the accumulator acc; on return s holds the
 * unnormalised probabilities P and alpha the factors 2^(m_old - m_new) of
 * O's two rows. online_softmax and softmax_scores below are its two uses:
 * the overlapped wgmma loop rescales O itself (rescale_rows), once the
 * product still adding into O has finished. O's rows are rescaled each
 * right after its row's work (not both at the end: at the end, the wgmma
 * kernel's registers at d = 128 spilled more and it ran 4-5% slower, H200).
 * `edge`: some key of this block may be absent or (masked) hidden from some
 * row of the tile, so masks are applied; elsewhere none is computed.
 */
static inline void softmax_block(float s[S_TILES][4], float acc[O_TILES][4], bool rescale, float alpha[2],
                                 float m_row[2], float l_row[2], bool edge, int kb, int row_lo, int row_hi, int t,
                                 int seq_kv, int diag, float scale_log2 ALIBI_PARAM NV_SCRATCH_PARAM)
{
#if defined(SOFTCAP2) || ALIBI
    /* Logit softcapping and ALiBi (score_mod.h): scaled, capped and biased here, in base 2, before the mask (a
     * hidden key must stay hidden, and tanh would bring -inf back to -cap); the rest then runs with a scale of 1.
     * ALiBi's distance key - row - diag of element e of tile n is dist[e] + 8 n (dist converted once). */
#if ALIBI
    float dist[4];
NV_UNROLL
    for (int e = 0; e < 4; e++)
        dist[e] = (float)(kb + 2 * t + (e & 1) - (e >> 1 ? row_hi : row_lo) - diag);
#endif
NV_UNROLL
    for (int n = 0; n < S_TILES; n++)
NV_UNROLL
        for (int e = 0; e < 4; e++)
            s[n][e] = SCORE_BIAS_AT(SCORE_CAP(s[n][e] * scale_log2), e >> 1 ? slope2_hi : slope2_lo,
                                    dist[e] + (float)(8 * n));
    scale_log2 = 1.0f;
#endif
    if (edge) {
NV_UNROLL
        for (int n = 0; n < S_TILES; n++)
NV_UNROLL
            for (int e = 0; e < 4; e++) {
                const int key = kb + n * 8 + 2 * t + (e & 1);
                bool visible = key < seq_kv;
#if MASKED
                visible = visible && mask_visible(e >> 1 ? row_hi : row_lo, key, diag);
#endif
                s[n][e] = visible ? s[n][e] : HIDDEN;
            }
    }
NV_UNROLL
    for (int r = 0; r < 2; r++) {
        /* The thread's extreme in ROW_CHAINS interleaved chains, not one: fewer dependent steps (6 at 128 keys
         * instead of 16) for 3 more live registers (a whole tree spilled wgmma's 168 at d = 128). */
        float part[ROW_CHAINS];
NV_UNROLL
        for (int c = 0; c < ROW_CHAINS; c++)
            part[c] = ROW_EXTREME(s[c][2 * r], s[c][2 * r + 1]);
NV_UNROLL
        for (int n = ROW_CHAINS; n < S_TILES; n++)
            part[n % ROW_CHAINS] = ROW_EXTREME(part[n % ROW_CHAINS], ROW_EXTREME(s[n][2 * r], s[n][2 * r + 1]));
NV_UNROLL
        for (int w = 1; w < ROW_CHAINS; w *= 2)
NV_UNROLL
            for (int c = 0; c + w < ROW_CHAINS; c += 2 * w)
                part[c] = ROW_EXTREME(part[c], part[c + w]);
        float ext = part[0];
        ext = ROW_EXTREME(ext, quad_xor(ext, 1));
        ext = ROW_EXTREME(ext, quad_xor(ext, 2));
        const float m_new = fmax(m_row[r], ext * scale_log2);  /* -inf when every key is hidden */
        /* A row with no visible key so far keeps m = -inf: p = 0, nothing to rescale. */
        const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
        const float rescale_by = exp2_ftz(m_row[r] - m_ref);
NV_UNROLL
        for (int n = 0; n < S_TILES; n++) {  /* the sum in chains too, each started by its first pair (not 0 +) */
            s[n][2 * r] = SCORE_EXP2(n, fma(s[n][2 * r], scale_log2, -m_ref));
            s[n][2 * r + 1] = SCORE_EXP2(n, fma(s[n][2 * r + 1], scale_log2, -m_ref));
            const float pair = s[n][2 * r] + s[n][2 * r + 1];
            part[n % ROW_CHAINS] = n < ROW_CHAINS ? pair : part[n % ROW_CHAINS] + pair;
        }
NV_UNROLL
        for (int w = 1; w < ROW_CHAINS; w *= 2)
NV_UNROLL
            for (int c = 0; c + w < ROW_CHAINS; c += 2 * w)
                part[c] += part[c + w];
        l_row[r] = l_row[r] * rescale_by + part[0];
        m_row[r] = m_new;
        if (rescale) {
NV_UNROLL
            for (int n = 0; n < O_TILES; n++) {
                acc[n][2 * r] *= rescale_by;
                acc[n][2 * r + 1] *= rescale_by;
            }
        }
        alpha[r] = rescale_by;  /* stored last: stored where computed, the driver's PTX computed it earlier (2026-12-02) */
    }
}

/* O's rows rescaled to the new running max (alpha from softmax_scores). */
static inline void rescale_rows(float acc[O_TILES][4], const float alpha[2])
{
NV_UNROLL
    for (int n = 0; n < O_TILES; n++) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
    }
}

/* The block folded into m, l and O at once. */
static inline void online_softmax(float s[S_TILES][4], float acc[O_TILES][4], float m_row[2], float l_row[2],
                                  bool edge, int kb, int row_lo, int row_hi, int t, int seq_kv, int diag,
                                  float scale_log2 ALIBI_PARAM NV_SCRATCH_PARAM)
{
    float alpha[2];
    softmax_block(s, acc, true, alpha, m_row, l_row, edge, kb, row_lo, row_hi, t, seq_kv, diag,
                  scale_log2 ALIBI_ARG(slope2_lo, slope2_hi) NV_SCRATCH_ARG);
}

/* Into m and l only: O's rescale by alpha left to the caller (rescale_rows); O is not touched. */
static inline void softmax_scores(float s[S_TILES][4], float alpha[2], float m_row[2], float l_row[2], bool edge,
                                  int kb, int row_lo, int row_hi, int t, int seq_kv, int diag,
                                  float scale_log2 ALIBI_PARAM NV_SCRATCH_PARAM)
{
    softmax_block(s, (float(*)[4])0, false, alpha, m_row, l_row, edge, kb, row_lo, row_hi, t, seq_kv, diag,
                  scale_log2 ALIBI_ARG(slope2_lo, slope2_hi) NV_SCRATCH_ARG);
}

/* The quad's four partial sums of l, then the accumulator's factor (1/l, 0 for a row that saw no key;
 * with the head's sink, score_mod.h's row_finish) and the row's LSE in natural log. */
static inline float finish_row(float m, float l_partial, float sink, float *lse_out NV_SCRATCH_PARAM)
{
    float l = l_partial;
    l += quad_xor(l, 1);
    l += quad_xor(l, 2);
    return row_finish(m, l, sink, lse_out);
}

#endif /* FLASHCL_NV_MMA_H */
