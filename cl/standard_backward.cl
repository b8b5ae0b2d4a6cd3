/*
 * standard_backward.cl: the piece of the standard (materialised) backward
 * that CLBlast does not do. src/standard_backward.c runs
 *
 *     pack Q, K, V, dO -> f32 workspace      (pack_rows, standard_attention.cl)
 *     S = scale · Q Kᵀ;  P = softmax(S)      (SGEMM; row_softmax, in place)
 *     dP = dO Vᵀ;  dV = Pᵀ dO                (SGEMM, SGEMM)
 *     dS = P ∘ (dP − rowsum(P ∘ dP))         (softmax_grad, in place over dP)
 *     dQ = scale · dS K;  dK = scale · dSᵀ Q (SGEMM, SGEMM)
 *     dQ, dK, dV -> caller's layout, dtype   (unpack_rows)
 *
 * rowsum(P ∘ dP) is D = rowsum(dO ∘ O), computed without O. The layout is
 * standard_attention.cl's: per (batch, kv head) entry, the group's query
 * heads stacked along the rows, `entry` elements apart.
 */

#ifndef GRAD_WG
#define GRAD_WG 256   /* work-items per row (a power of two) */
#endif

/* One work-group per row of P and dP (batch * heads_q * seq_q rows); masked
 * entries of P are 0, so they give dS = 0 with no mask here. */
__kernel __attribute__((reqd_work_group_size(GRAD_WG, 1, 1)))
void softmax_grad(__global float *ws, ulong p_off, ulong dp_off, ulong s_entry, int seq_q, int seq_kv,
                  int group)
{
    __local float part[GRAD_WG];
    const int lid = (int)get_local_id(0);
    const ulong row = get_group_id(0);
    const ulong rows_per_kv = (ulong)group * (ulong)seq_q;
    const ulong within = (row / rows_per_kv) * s_entry + (row % rows_per_kv) * (ulong)seq_kv;
    __global const float *p_row = ws + p_off + within;
    __global float *dp_row = ws + dp_off + within;

    float sum = 0.0f;
    for (int j = lid; j < seq_kv; j += GRAD_WG)
        sum = fma(p_row[j], dp_row[j], sum);
    part[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = GRAD_WG / 2; w > 0; w >>= 1) {
        if (lid < w)
            part[lid] += part[lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float delta = part[0];
    for (int j = lid; j < seq_kv; j += GRAD_WG)
        dp_row[j] = p_row[j] * (dp_row[j] - delta);
}
