/* The IO model: bytes each way of computing attention moves through device
 * memory, and how often each block is read. Used by flashcl-probe's roofline
 * report; counts follow the seed chapter's accounting. */
#include "internal.h"

flashcl_status flashcl_io_model(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv, int head_dim,
                                size_t elem_bytes, int block_m, int block_n, struct flashcl_io_estimate *out)
{
    const flashcl_status entry = FCL_ENTER(NULL, out);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    if (batch < 1 || heads_q < 1 || heads_kv < 1 || seq_q < 1 || seq_kv < 1 || head_dim < 1 || block_m < 1 ||
        block_n < 1 || heads_q % heads_kv != 0)
        return fcl_fail(NULL, FLASHCL_ERROR_INVALID_SHAPE,
                    "io model: batch %d, heads %d/%d, seq %d/%d, head_dim %d, blocks %dx%d; all must be >= 1 "
                    "and heads_kv must divide heads_q", batch, heads_q, heads_kv, seq_q, seq_kv, head_dim,
                    block_m, block_n);
    if (elem_bytes != 2 && elem_bytes != 4)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "io model: elem_bytes = %zu; must be 2 or 4", elem_bytes);

    const double e = (double)elem_bytes, d = head_dim, nq = seq_q, nk = seq_kv;
    const double bh = (double)batch * heads_q;           /* query (batch, head) pairs */
    const unsigned long long tr = ((unsigned long long)seq_q + (unsigned)block_m - 1) / (unsigned)block_m;
    const unsigned long long tc = ((unsigned long long)seq_kv + (unsigned)block_n - 1) / (unsigned)block_n;

    out->flops = 4.0 * bh * nq * nk * d;
    /* Standard: each of Q, K, V read once, O written once (K, V shared by a
     * GQA group are still read once per query head: one GEMM per head), and
     * S and P (f32) written once and read once each. */
    out->standard_bytes = bh * (e * d * (2 * nq + 2 * nk) + 4.0 * nq * nk * 4);
    /* Q outer: Q read once, K and V read once per Q block, O written once, LSE. */
    out->flash_bytes = bh * (e * d * (2 * nq + 2 * nk * (double)tr) + 4.0 * nq);
    /* K/V outer: K, V read once; per K/V block every Q block is read and its
     * O accumulator and (m, l) are read and written. */
    out->flash_kv_outer_bytes = bh * (e * d * (2 * nk + 3 * nq * (double)tc) + 16.0 * nq * (double)tc);
    out->q_block_reads_kv_outer = tr * tc;
    out->q_block_reads_q_outer = tr;
    out->kv_block_reads_kv_outer = tc;
    out->kv_block_reads_q_outer = tr * tc;
    return FLASHCL_SUCCESS;
}
