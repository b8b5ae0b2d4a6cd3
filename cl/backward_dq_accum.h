/*
 * backward_dq_accum.h: dQ added up by the dK/dV pass in an f32 accumulator of the workspace, for the backward
 * kernels without a dQ pass (backward_mma_skeleton.h's FUSED_DQ, whose adds take turns, and
 * flash_backward_wgmma.cl's -DFUSED_DQ=1, whose adds land in any order): the adds, and the last step, which
 * scales the sum into dQ's storage type. flash_backward_dot (backward_dot.h) zeroes the accumulator, f32
 * [batch, heads_q, seq_q, HEAD_DIM] from accum_off. The includer defines BACKWARD_KERNEL, elem_t, store_pair and
 * HEAD_DIM, and includes backward_args.h first.
 */
#ifndef FLASHCL_BACKWARD_DQ_ACCUM_H
#define FLASHCL_BACKWARD_DQ_ACCUM_H

#if NV_EMULATE
/* A compare-and-swap loop: OpenCL 1.2 has no float atomic add. */
static inline void accumulate(__global float *p, float v)
{
    volatile __global uint *word = (volatile __global uint *)p;
    uint seen = *word, old;
    do {
        old = seen;
        seen = atomic_cmpxchg(word, old, as_uint(as_float(old) + v));
    } while (seen != old);
}
#else
static inline void accumulate(__global float *p, float v)
{
    __asm__ volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
#endif

/* Two adjacent elements. (sm_90's vector red.add.global.v2.f32 would need PTX ISA 8.1, which the PTX a driver
 * emits need not declare.) */
static inline void accumulate_pair(__global float *p, float lo, float hi)
{
    accumulate(p, lo);
    accumulate(p + 1, hi);
}

/* dQ = scale x the accumulator, in the storage type.
 * Launched as (ceil(seq_q * HEAD_DIM / 2 / WG) * WG, heads_q, batch): a work-item per column pair. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void BACKWARD_KERNEL(dq_convert)(__global const float *workspace, ulong accum_off, BACKWARD_TENSOR(elem_t, d_q, dq),
                                 int seq_q, float scale)
{
    const ulong i = get_global_id(0);
    if (i >= (ulong)seq_q * (HEAD_DIM / 2))
        return;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const ulong row = i / (HEAD_DIM / 2), col = 2 * (i % (HEAD_DIM / 2));
    const ulong head = (ulong)b * get_num_groups(1) + (ulong)h;
    const float2 v = vload2(0, workspace + accum_off + (head * (ulong)seq_q + row) * HEAD_DIM + col);
    store_pair(d_q + dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh + row * dq_ss + col, v.x * scale, v.y * scale);
}

#endif /* FLASHCL_BACKWARD_DQ_ACCUM_H */
