/*
 * backward_dot.h: step 0 of both backward kernels (cl/flash_backward.cl,
 * cl/flash_backward_mma.cl): D_i = sum_c dO_ic O_ic, one work-item per query
 * row, into the f32 workspace [batch, heads_q, seq_q]. Needs HEAD_DIM (and
 * HEAD_DIM_V, O's columns, where they differ) and WG defined and storage.h's
 * LOAD (DTYPE); any WG works. With FUSED_DQ it
 * also zeroes the row's dQ accumulator, and with Q_CHUNK the turn counters
 * the fused dK/dV pass orders its adds with (cl/flash_backward_mma.cl).
 * tools/embed_cl.py inlines it into each kernel source.
 */
#ifndef FLASHCL_BACKWARD_DOT_H
#define FLASHCL_BACKWARD_DOT_H

#include "storage.h"

#ifndef FUSED_DQ
#define FUSED_DQ 0
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM  /* O's and dO's columns */
#endif

/* Launched as (ceil(seq_q / WG) * WG, heads_q, batch): one work-item per query row. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_dot(__global const storage_t *o, ulong o_off, ulong o_sb, ulong o_ss, ulong o_sh,
                        __global const storage_t *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                        __global float *delta, int seq_q
#if FUSED_DQ
                        , ulong accum_off, ulong turns_off
#endif
                        )
{
    const int row = (int)get_global_id(0);
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    if (row >= seq_q)
        return;
#if FUSED_DQ
    const ulong head = (ulong)b * get_num_groups(1) + (ulong)h;
    __global float4 *accum = (__global float4 *)(delta + accum_off + (head * (ulong)seq_q + (ulong)row) * HEAD_DIM);
    for (int c = 0; c < HEAD_DIM / 4; c++)
        accum[c] = (float4)(0.0f);
#ifdef Q_CHUNK  /* adds that take turns (backward_mma_skeleton.h); the wgmma kernel's land in any order */
    __global int *turns = (__global int *)(delta + turns_off);  /* [0]: the tickets, then a turn a query block */
    const int q_chunks = (seq_q + Q_CHUNK - 1) / Q_CHUNK;
    if (row % Q_CHUNK == 0)
        turns[1 + head * (ulong)q_chunks + (ulong)(row / Q_CHUNK)] = 0;
    if (row == 0 && head == 0)
        turns[0] = 0;
#endif
#endif
    const ulong o_row = o_off + (ulong)b * o_sb + (ulong)h * o_sh + (ulong)row * o_ss;
    const ulong do_row = do_off + (ulong)b * do_sb + (ulong)h * do_sh + (ulong)row * do_ss;
    float sum = 0.0f;
    for (int c = 0; c < HEAD_DIM_V; c++)
        sum = fma(LOAD(d_o, do_row + c), LOAD(o, o_row + c), sum);
    delta[((ulong)b * get_num_groups(1) + (ulong)h) * (ulong)seq_q + (ulong)row] = sum;
}

/* With attention sinks, after flash_backward_dot: dL/d(sink_h) = -sum over sequences b and rows i of
 * P_sink D = exp(sink_h - LSE_bhi) D_bhi (the sink's dS, its dP being 0: it has no value). Launched as (WG,
 * heads_q, 1): a work-group a query head; each work-item adds its rows in order, then work-item 0 the
 * work-items' sums in order: the same bits every run. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_sink_grad(__global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                              __global const float *delta, __global const float *sinks, ulong sink_off,
                              __global float *d_sinks, ulong d_sink_off, int seq_q, int batch)
{
    __local float sums[WG];
    const int tid = (int)get_local_id(0), h = (int)get_group_id(1);
    const ulong heads = get_num_groups(1);
    const float sink = sinks[sink_off + (ulong)h];
    float sum = 0.0f;
    for (int b = 0; b < batch; b++)
        for (int row = tid; row < seq_q; row += WG) {
            const float l = lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)row * l_ss];
            const float d = delta[((ulong)b * heads + (ulong)h) * (ulong)seq_q + (ulong)row];
            sum = fma(l == -INFINITY ? 0.0f : exp(sink - l), d, sum);  /* -inf: no key and no sink */
        }
    sums[tid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid == 0) {
        float total = 0.0f;
        for (int t = 0; t < WG; t++)
            total += sums[t];
        d_sinks[d_sink_off + (ulong)h] = -total;
    }
}

#endif
