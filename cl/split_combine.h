/*
 * split_combine.h: flash_forward_combine, the second step of a split-KV
 * call (cl/split.h): one work-item per (row, column, head, sequence)
 * merges its element's n_splits partials by their LSE and writes O (column
 * 0 also the row's LSE). Included by the
 * kernels that take SPLIT, after storage.h, varlen.h and split.h.
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
    const ulong first = (((ulong)b * (ulong)heads + (ulong)h) * (ulong)rows + (ulong)row) * (OUT_DIM + 1);
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
#endif
