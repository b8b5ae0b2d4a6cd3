/*
 * forward_args.h: the forward kernels' argument list, written once. The
 * order is the one src/forward.c sets: each view as its pointer, offset and
 * batch, sequence and head strides (in elements), Q, K, V, O, then the
 * LSE's, the problem (v_descale: E4M3 V's factor, 1 otherwise, read by the FP8 kernel only), the attention sinks (f32 [heads_q] from sink_off; NULL
 * without them: cl/score_mod.h's SINKS), the ALiBi slopes (likewise; ALIBI), then cl/varlen.h's and cl/split.h's
 * arguments (which must be included first). elem_t is the storage as the kernel addresses it.
 */
#ifndef FLASHCL_FORWARD_ARGS_H
#define FLASHCL_FORWARD_ARGS_H

#define FORWARD_ARGS(elem_t)                                                                                    \
    __global const elem_t *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,                                 \
    __global const elem_t *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,                                 \
    __global const elem_t *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,                                 \
    __global elem_t *o, ulong o_off, ulong o_sb, ulong o_ss, ulong o_sh,                                       \
    __global float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,                                      \
    int has_lse, int seq_q, int seq_kv, int group, float scale_log2, float v_descale,                         \
    __global const float *sinks, ulong sink_off, __global const float *alibi, ulong alibi_off                   \
    VARLEN_ARGS SPLIT_ARGS

#endif
