/*
 * block_order.h: which (query block, head, batch) a work-group computes,
 * and how far along the keys that block reaches.
 * The flash kernels' grid is (query blocks, heads, batch), launched as
 * work-groups in order of their linear id (x fastest).
 *
 * Without a causal mask every query block has the same work. With one,
 * query block qb sees about qb + 1 key blocks, so the order matters. Both
 * orders put each (batch, head)'s heaviest query blocks first; with
 * `across_pairs` the linear id is remapped so that the heaviest blocks of
 * *every* (batch, head) go first and the lightest of all go last (longest
 * processing time first): the heaviest block of a late head no longer
 * starts late. The tensor-core kernels use it; the FMA kernels keep the
 * per-head order, which measured faster for them (docs/perf-history.md, 2026-11-29).
 */
#ifndef FLASHCL_BLOCK_ORDER_H
#define FLASHCL_BLOCK_ORDER_H

static inline void block_coordinates(int causal, int across_pairs, int *qb, int *h, int *b)
{
    const ulong n_q = get_num_groups(0), n_h = get_num_groups(1), n_b = get_num_groups(2);
    if (!causal || !across_pairs) {
        *qb = causal ? (int)(n_q - 1 - get_group_id(0)) : (int)get_group_id(0);
        *h = (int)get_group_id(1);
        *b = (int)get_group_id(2);
        return;
    }
    const ulong id = get_group_id(0) + n_q * (get_group_id(1) + n_h * get_group_id(2));
    const ulong heads = n_h * n_b;  /* (batch, head) pairs */
    const ulong pair = id % heads;
    *qb = (int)(n_q - 1 - id / heads);
    *h = (int)(pair % n_h);
    *b = (int)(pair / n_h);
}

#endif
