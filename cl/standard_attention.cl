/*
 * standard_attention.cl: the pieces of standard (materialised) attention
 * that CLBlast does not do. The host runs
 *
 *     pack Q, K, V -> f32 workspace         (pack_rows)
 *     S = scale · Q Kᵀ                       (CLBlast SGEMM, strided batched)
 *     P = softmax(S) in place, LSE           (row_softmax)
 *     O = P · V                              (CLBlast SGEMM, strided batched)
 *     O -> caller's layout and dtype         (unpack_rows)
 *
 * so S and P round-trip through device memory: the memory wall the flash
 * kernel avoids. The workspace holds, per (batch, kv head), the `group`
 * query heads that share that kv head stacked along the rows:
 * [batch][kv head][group * seq][d], each (batch, kv head) entry `entry`
 * elements apart (padded for sub-buffer alignment). One GEMM batch entry then
 * serves a whole GQA group with uniform strides.
 */

#include "storage.h"   /* DTYPE (default 0 = f32), storage_t, LOAD, STORE */

#ifndef SOFTMAX_WG
#define SOFTMAX_WG 256   /* work-items per row in row_softmax (a power of two) */
#endif

/* Index of element (b, h, n, e) in the packed workspace. */
static ulong packed_index(ulong b, ulong h, ulong n, ulong e, ulong heads, ulong group, ulong seq,
                          ulong d, ulong entry)
{
    const ulong hk = h / group, gi = h % group;
    return (b * (heads / group) + hk) * entry + (gi * seq + n) * d + e;
}

/* Element `id` of a [batch, seq, heads, d] tensor as (b, n, h, e). */
static void element_of(ulong id, int seq, int heads, int d, ulong *b, ulong *n, ulong *h, ulong *e)
{
    *e = id % (ulong)d;
    const ulong t = id / (ulong)d;
    *n = t % (ulong)seq;
    const ulong t2 = t / (ulong)seq;
    *h = t2 % (ulong)heads;
    *b = t2 / (ulong)heads;
}

/* One work-item per element of a [batch, seq, heads, d] view. */
__kernel void pack_rows(__global const storage_t *src, ulong off, ulong sb, ulong ss, ulong sh,
                        __global float *dst, ulong dst_off, ulong entry, ulong total, int seq, int heads,
                        int group, int d)
{
    const ulong id = get_global_id(0);
    if (id >= total)
        return;
    ulong b, n, h, e;
    element_of(id, seq, heads, d, &b, &n, &h, &e);
    dst[dst_off + packed_index(b, h, n, e, heads, group, seq, d, entry)] = LOAD(src, off + b * sb + n * ss + h * sh + e);
}

__kernel void unpack_rows(__global const float *src, ulong src_off, ulong entry, __global storage_t *dst,
                          ulong off, ulong sb, ulong ss, ulong sh, ulong total, int seq, int heads, int group,
                          int d)
{
    const ulong id = get_global_id(0);
    if (id >= total)
        return;
    ulong b, n, h, e;
    element_of(id, seq, heads, d, &b, &n, &h, &e);
    STORE(dst, off + b * sb + n * ss + h * sh + e, src[src_off + packed_index(b, h, n, e, heads, group, seq, d, entry)]);
}

/* One work-group per row of S (already scaled): masked softmax in place,
 * and the row's LSE. Row i sees keys i + diag - window_left ..
 * i + diag + window_right (diag = seq_kv - seq_q; -1: that side unlimited;
 * causal is window_right 0). A row with no visible key becomes 0, LSE -inf. */
__kernel __attribute__((reqd_work_group_size(SOFTMAX_WG, 1, 1)))
void row_softmax(__global float *s, ulong s_off, ulong s_entry, int seq_q, int seq_kv, int heads_q, int group,
                 int window_left, int window_right, __global float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                 int has_lse)
{
    __local float part[SOFTMAX_WG];
    const int lid = (int)get_local_id(0);
    const ulong row = get_group_id(0);                 /* over batch * heads_q * seq_q */
    const ulong rows_per_kv = (ulong)group * (ulong)seq_q;
    const ulong kv_batch = row / rows_per_kv, r = row % rows_per_kv;
    const int i = (int)(r % (ulong)seq_q), gi = (int)(r / (ulong)seq_q);
    const int heads_kv = heads_q / group;
    const ulong b = kv_batch / (ulong)heads_kv;
    const int h = (int)(kv_batch % (ulong)heads_kv) * group + gi;
    const int diag = seq_kv - seq_q;
    const int lo = window_left >= 0 ? clamp(i + diag - window_left, 0, seq_kv) : 0;
    const int hi = window_right >= 0 ? clamp(i + diag + window_right + 1, 0, seq_kv) : seq_kv;
    const int visible = hi > lo ? hi - lo : 0;
    __global float *x = s + s_off + kv_batch * s_entry + r * (ulong)seq_kv;

    float m = -INFINITY;
    for (int j = lo + lid; j < hi; j += SOFTMAX_WG)
        m = fmax(m, x[j]);
    part[lid] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = SOFTMAX_WG / 2; w > 0; w >>= 1) {
        if (lid < w)
            part[lid] = fmax(part[lid], part[lid + w]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = part[0];
    barrier(CLK_LOCAL_MEM_FENCE);

    float l = 0.0f;
    for (int j = lo + lid; j < hi; j += SOFTMAX_WG)
        l += exp(x[j] - m);
    part[lid] = l;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = SOFTMAX_WG / 2; w > 0; w >>= 1) {
        if (lid < w)
            part[lid] += part[lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    l = part[0];

    const float inv_l = visible > 0 ? 1.0f / l : 0.0f;
    for (int j = lid; j < seq_kv; j += SOFTMAX_WG)
        x[j] = j >= lo && j < hi ? exp(x[j] - m) * inv_l : 0.0f;
    if (has_lse && lid == 0)
        lse[l_off + b * l_sb + (ulong)h * l_sh + (ulong)i * l_ss] = visible > 0 ? m + log(l) : -INFINITY;
}
