/*
 * split_combine.h: flash_forward_combine, the second step of a split-KV
 * call (cl/split.h): one work-item per (row, column, head, sequence)
 * merges its element's n_splits partials by their LSE and writes O (column
 * 0 also the row's LSE). Included by the
 * kernels that take SPLIT, after storage.h, varlen.h and split.h; and, for
 * those that define SPLIT_MERGE_IN_PLACE (after nv_async.h: device_fence),
 * split_merge_last, the same merge run by a call's last work-group.
 */
#if SPLIT
__kernel void flash_forward_combine(__global const float *part, int n_splits,
                                    __global storage_t *o, ulong o_off, ulong o_sb, ulong o_ss, ulong o_sh,
                                    __global float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                                    int has_lse, int rows, int heads, int batch, int seq_kv,
                                    __global const float *sinks, ulong sink_off VARLEN_ARGS)
{
    /* One work-item per (row, column): a row's splits are merged by OUT_DIM work-items side by side
     * (each reads the splits' LSE, cached), so many splits of few rows (decode) stay parallel. */
    const int gid = (int)get_global_id(0), h = (int)get_global_id(1), b = (int)get_global_id(2);
    const int row = gid / OUT_DIM, c = gid % OUT_DIM;
    if (row >= rows)
        return;  /* no barrier in this kernel: work-items may leave alone */
    int start_q = 0, start_k = 0, seq_q = rows;
#if VARLEN
    varlen_rows(cu_q, cu_k, total_q, total_k, b, &start_q, &start_k, &seq_q, &seq_kv);
#endif
    if (row >= seq_q)
        return;
    const ulong stride = (ulong)batch * (ulong)heads * (ulong)rows * (OUT_DIM + 1);
    const ulong first = SPLIT_COUNTERS + (((ulong)b * (ulong)heads + (ulong)h) * (ulong)rows + (ulong)row) * (OUT_DIM + 1);
    /* Loads not behind a branch, four splits an iteration: many splits (decode at long contexts) are
     * then loads in flight together rather than one latency each. A split that saw no key has LSE
     * -inf, so weight 0, and any partial (a NaN too: the portable kernel's 0 x inf), which the select
     * keeps out of the sum. */
    float m = -INFINITY;
#pragma unroll 4
    for (int s = 0; s < n_splits; s++)
        m = fmax(m, part[first + (ulong)s * stride + OUT_DIM]);
#if SINKS
    /* The head's sink joins as one more partial of LSE sink and output 0 (the splits leave it out). */
    const float sink = sinks[sink_off + (ulong)h];
    m = fmax(m, sink);
#endif
    const float m_ref = m == -INFINITY ? 0.0f : m;  /* every split empty: exp(-inf - -inf) would be NaN */
#if SINKS
    float weight_sum = exp(sink - m_ref), acc = 0.0f;
#else
    float weight_sum = 0.0f, acc = 0.0f;
#endif
#pragma unroll 4
    for (int s = 0; s < n_splits; s++) {
        const float l_s = part[first + (ulong)s * stride + OUT_DIM];
        const float p_s = part[first + (ulong)s * stride + (ulong)c];
        const float w = exp(l_s - m_ref);
        weight_sum += w;
        acc = fma(w, w > 0.0f ? p_s : 0.0f, acc);
    }
    const ulong o_base = o_off + (ulong)b * o_sb + (ulong)(start_q + row) * o_ss + (ulong)h * o_sh;
    STORE(o, o_base + (ulong)c, weight_sum > 0.0f ? acc / weight_sum : 0.0f);
    if (has_lse && c == 0)
        lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + row) * l_ss] =
            weight_sum > 0.0f ? m + log(weight_sum) : -INFINITY;
}

#if SPLIT_MERGE_IN_PLACE
/* The merge in place (split.h), called by every work-item of a packed-group work-group (grid: splits, KV
 * heads, sequences) once its partials are stored. The last of the n_splits work-groups of (hk, b) to arrive
 * merges: rows_used rows (row r is query head hk x group + r % group at position r / group of this
 * sequence), with each row's weights, maximum and sum in `scratch` (rows_used x (n_splits + 2) floats; the
 * host plans the merge here only where they fit) and the arithmetic of flash_forward_combine above,
 * split by split in order. The others return. Each work-item fences its partial stores before the
 * barrier that precedes the count (the threadfence-reduction pattern); the last resets the count. */
static void split_merge_last(__global float *part, int n_splits, int b, int hk, int group, int rows_used,
                             int rows_grid, int start_q, __global storage_t *o, ulong o_off, ulong o_sb,
                             ulong o_ss, ulong o_sh, __global float *lse, ulong l_off, ulong l_sb, ulong l_ss,
                             ulong l_sh, int has_lse, __global const float *sinks, ulong sink_off,
                             __local float *scratch, __local int *last, int tid, int wg)
{
    const ulong heads = get_num_groups(1) * (ulong)group;
    volatile __global int *arrivals = (volatile __global int *)part + (ulong)b * get_num_groups(1) + (ulong)hk;
    device_fence();
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (tid == 0) {
        const int before = atomic_inc(arrivals);
        *last = before == n_splits - 1;
        if (before == n_splits - 1)
            atomic_xchg(arrivals, 0);  /* every split has counted in: the next call starts from zero */
        device_fence();
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!*last)
        return;
    device_fence();
    /* Loaded past L1 (volatile): other compute units wrote them. */
    volatile __global const float *parts = part;
    __local float *row_max = scratch + rows_used * n_splits, *row_sum = row_max + rows_used;
    for (int i = tid; i < rows_used * n_splits; i += wg) {
        const int r = i / n_splits, s = i % n_splits;
        scratch[i] = parts[split_part(s, b, hk * group + r % group, r / group, rows_grid, heads) + OUT_DIM];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = tid; r < rows_used; r += wg) {  /* each row's LSEs into weights, as the combine step */
        float m = -INFINITY;
        for (int s = 0; s < n_splits; s++)
            m = fmax(m, scratch[r * n_splits + s]);
#if SINKS
        const float sink = sinks[sink_off + (ulong)(hk * group + r % group)];
        m = fmax(m, sink);
#endif
        const float m_ref = m == -INFINITY ? 0.0f : m;
#if SINKS
        float weight_sum = exp(sink - m_ref);
#else
        float weight_sum = 0.0f;
#endif
        for (int s = 0; s < n_splits; s++) {
            const float w = exp(scratch[r * n_splits + s] - m_ref);
            scratch[r * n_splits + s] = w;
            weight_sum += w;
        }
        row_max[r] = m;
        row_sum[r] = weight_sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int idx = tid; idx < rows_used * OUT_DIM; idx += wg) {
        const int r = idx / OUT_DIM, c = idx % OUT_DIM, h = hk * group + r % group, pos = r / group;
        const ulong first = split_part(0, b, h, pos, rows_grid, heads) + (ulong)c;
        const ulong stride = split_part(1, b, h, pos, rows_grid, heads) + (ulong)c - first;
        float acc = 0.0f;
#pragma unroll 8
        for (int s = 0; s < n_splits; s++) {
            const float w = scratch[r * n_splits + s], p_s = parts[first + (ulong)s * stride];
            acc = fma(w, w > 0.0f ? p_s : 0.0f, acc);
        }
        const float weight_sum = row_sum[r];
        STORE(o, o_off + (ulong)b * o_sb + (ulong)(start_q + pos) * o_ss + (ulong)h * o_sh + (ulong)c,
              weight_sum > 0.0f ? acc / weight_sum : 0.0f);
        if (has_lse && c == 0)
            lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + pos) * l_ss] =
                weight_sum > 0.0f ? row_max[r] + log(weight_sum) : -INFINITY;
    }
}
#endif
#endif
