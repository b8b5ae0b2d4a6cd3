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
static inline float row_lse2(__global const float *lse, ulong index, int row, int seq_q)
{
    const float l = row < seq_q ? lse[index] : -INFINITY;
    return l > -INFINITY ? l * M_LOG2E_F : INFINITY;
}

#endif /* FLASHCL_BACKWARD_ARGS_H */
