/*
 * split.h: split-KV (flash-decoding) for the kernels that take it.
 *
 * With SPLIT, grid dimension 0 holds query blocks x n_splits work-groups:
 * each takes an even share of its rows' key blocks and writes, instead of O
 * and the LSE, its partial result normalised over its own keys and that
 * share's LSE (natural log; -inf where it saw no key) to an f32 workspace,
 * [split][batch][head][row][OUT_DIM + 1], OUT_DIM O's columns (HEAD_DIM_V where
 * the includer defines it, else HEAD_DIM). flash_forward_combine then merges the
 * partials of a row by their LSE — exactly the same function:
 *     lse = log sum_s exp(lse_s),  O = sum_s exp(lse_s - lse) O_s.
 * That fills the device when batch x heads x query blocks cannot (decode).
 *
 * The workspace starts with SPLIT_COUNTERS ints, zero whenever no call is
 * running (src/workspace.c zeroes a new buffer; each call leaves them zero),
 * then the partials. With merge_here (kernels that define
 * SPLIT_MERGE_IN_PLACE, where the host finds the merge fits), there is no
 * second step: the last work-group of a (KV head, sequence) to finish counts
 * the others in and merges every split's partials itself
 * (split_combine.h's split_merge_last), in the same order and arithmetic
 * as flash_forward_combine, so the result does not depend on which is last.
 */
#ifndef FLASHCL_SPLIT_H
#define FLASHCL_SPLIT_H

#ifndef SPLIT
#define SPLIT 0
#endif
#ifdef HEAD_DIM_V
#define OUT_DIM HEAD_DIM_V
#else
#define OUT_DIM HEAD_DIM
#endif

/* Arrival counters before the partials: one per (sequence, KV head) of a call whose merge runs in place
 * (src/kernel_table.h's FCL_SPLIT_COUNTERS, the same number). */
#define SPLIT_COUNTERS 4096

#if SPLIT
#define SPLIT_ARGS , __global float *part, int n_splits, int merge_here

/* Query block, split, head and batch of this work-group (heaviest query
 * blocks first when causal, as block_coordinates orders them). */
static inline void split_coordinates(int causal, int n_splits, int *qb, int *split, int *h, int *b)
{
    const int n_q = (int)get_num_groups(0) / n_splits;
    const int id = (int)get_group_id(0);
    *split = id / n_q;
    *qb = causal ? n_q - 1 - id % n_q : id % n_q;
    *h = (int)get_group_id(1);
    *b = (int)get_group_id(2);
}

/* Narrows [*begin, *end) to this split's share of its BLOCK_N key blocks.
 * The share starts on a block boundary (keys before *begin are hidden by
 * the mask) so no tile reaches into the next split's keys, which would
 * count them twice. */
static inline void split_keys(int split, int n_splits, int *begin, int *end)
{
    const int first = *begin / BLOCK_N, last = (*end + BLOCK_N - 1) / BLOCK_N;
    const int per = (last - first + n_splits - 1) / n_splits;
    const int lo = (first + split * per) * BLOCK_N, hi = (first + (split + 1) * per) * BLOCK_N;
    *begin = lo;
    *end = max(lo, min(*end, hi));
}

/* Element offset of (split, b, query head h, row) in the workspace (past the counters): OUT_DIM + 1
 * floats a row (O's columns, then the LSE); `heads` the query heads (grid dimension 1 holds them for the
 * kernels with query blocks, KV heads x group for decode's). */
static inline ulong split_part(int split, int b, int h, int row, int rows, ulong heads)
{
    const ulong batch = get_num_groups(2);
    return SPLIT_COUNTERS +
           ((((ulong)split * batch + (ulong)b) * heads + (ulong)h) * (ulong)rows + (ulong)row) * (OUT_DIM + 1);
}
#else
#define SPLIT_ARGS
#endif

#endif
