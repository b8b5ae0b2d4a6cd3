/*
 * backward_args.h: what the tensor-core backward kernels (backward_mma_skeleton.h's, flash_backward_wgmma.cl's)
 * share of their interface: their arguments, in the order src/backward.c sets them (the inputs, with the fused
 * kernels the workspace, the step's outputs, the sizes), and each row's LSE as the kernels use it. The includer
 * defines elem_t, the storage element, and FUSED_DQ. A tensor is its buffer, offset and batch, sequence and head
 * strides (in elements).
 */
#ifndef FLASHCL_BACKWARD_ARGS_H
#define FLASHCL_BACKWARD_ARGS_H

#include "nv_async.h"   /* exp2_ftz, for score_mod.h's softcap */
#include "exp2_poly.h"  /* its FMA-unit forms (CAP_FMA) */
#define SCORE_CAP_MUFU 1     /* tensor-core kernels: score_mod.h's softcap on MUFU (natively) */
#include "score_mod.h"  /* the softcap and ALiBi in P (SCORE_P_EXP, SCORE_LSE2, HEAD_ALIBI2) */

#define BACKWARD_TENSOR(type, name, s) __global type *name, ulong s##_off, ulong s##_sb, ulong s##_ss, ulong s##_sh
#define BACKWARD_INPUTS                                                                                     \
    BACKWARD_TENSOR(const elem_t, q, q), BACKWARD_TENSOR(const elem_t, k, k), BACKWARD_TENSOR(const elem_t, v, v), \
        BACKWARD_TENSOR(const elem_t, d_o, do), BACKWARD_TENSOR(const float, lse, l), __global const float *delta
/* A dK/dV kernel that adds up dQ (FUSED_DQ): the workspace, after its inputs (src/backward.c's layout; turns_off
 * the turn counters, where its adds take turns). */
#if FUSED_DQ
#define FUSED_DQ_ARGS __global float *workspace, ulong accum_off, ulong turns_off,
#else
#define FUSED_DQ_ARGS
#endif
/* The sizes, the scales and the ALiBi slopes (f32 [heads_q] from alibi_off; NULL without them: score_mod.h's ALIBI). */
#define BACKWARD_SIZES                                                                                      \
    int seq_q, int seq_kv, int group, float scale_log2, float scale, __global const float *alibi, ulong alibi_off

/* A row's LSE in base 2, +inf for a row that is absent or sees no key (P = 0 there). */
static inline float lse2_of(float l)
{
    return l > -INFINITY ? l * M_LOG2E_F : INFINITY;
}
static inline float row_lse2(__global const float *lse, ulong index, int row, int seq_q)
{
    return lse2_of(row < seq_q ? lse[index] : -INFINITY);
}

/* The dK/dV step's rows: each streamed block of BLOCK_M queries comes with their LSE and D, which a thread loads
 * for rows tid, tid + WG, .. of the block and stores to local memory beside the block's copies. -DROW_TERMS_AHEAD=1
 * (the default) loads them an iteration earlier, into registers, so their latency passes behind a block's products;
 * with 0 they are stored as loaded, and the threads that load them (the first warps) wait for them at every block,
 * and with those warps their warpgroup's products. */
#ifndef ROW_TERMS_AHEAD
#define ROW_TERMS_AHEAD 1
#endif
#define ROW_TERMS ((BLOCK_M + WG - 1) / WG)  /* a thread's rows of a block */
struct row_terms {
    float lse[ROW_TERMS], delta[ROW_TERMS];  /* as loaded: -inf and 0 past seq_q */
};

/* Rows q0 + tid, q0 + tid + WG, .. (< q0 + BLOCK_M) of one query head: lse_base and delta_base its offsets. */
static inline __attribute__((always_inline)) void fetch_row_terms(struct row_terms *t, __global const float *lse,
                                                                  ulong lse_base, ulong l_ss,
                                                                  __global const float *delta, ulong delta_base,
                                                                  int q0, int seq_q, int tid)
{
NV_UNROLL
    for (int i = 0; i < ROW_TERMS; i++) {
        const int r = tid + i * WG, row = q0 + r;
        const bool in = r < BLOCK_M && row < seq_q;
        t->lse[i] = in ? lse[lse_base + (ulong)row * l_ss] : -INFINITY;
        t->delta[i] = in ? delta[delta_base + (ulong)row] : 0.0f;
    }
}

/* Into the block's local arrays, the LSE in base 2 (lse2_of). */
static inline __attribute__((always_inline)) void store_row_terms(const struct row_terms *t, __local float *lse2,
                                                                  __local float *drow, int tid)
{
NV_UNROLL
    for (int i = 0; i < ROW_TERMS; i++) {
        const int r = tid + i * WG;
        if (r < BLOCK_M) {
            lse2[r] = lse2_of(t->lse[i]);
            drow[r] = t->delta[i];
        }
    }
}

#endif /* FLASHCL_BACKWARD_ARGS_H */
