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
 * per-head order, which measured faster for them (docs/perf.md, v0.5).
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

/* A persistent kernel's tiles (cl/flash_forward_mma.cl's PERSISTENT): the grid of n_q x n_h x n_b query blocks,
 * walked by get_num_groups(0) work-groups, fewer than n_q x n_h x n_b (at most 2^31 - 1: src/planner.c).
 * Tile id has the coordinates block_coordinates gives the launched grid's work-group of linear id `id`
 * (32-bit arithmetic: a persistent kernel works them out in its key loop, at each tile its copies reach). */
static inline void persistent_coordinates(int causal, int across_pairs, uint id, uint n_q, uint n_h, uint n_b,
                                          int *qb, int *h, int *b)
{
    if (!causal || !across_pairs) {
        const uint in_q = id % n_q, rest = id / n_q;
        *qb = (int)(causal ? n_q - 1 - in_q : in_q);
        *h = (int)(rest % n_h);
        *b = (int)(rest / n_h);
        return;
    }
    const uint heads = n_h * n_b;
    const uint pair = id % heads;
    *qb = (int)(n_q - 1 - id / heads);
    *h = (int)(pair % n_h);
    *b = (int)(pair / n_h);
}

/* The tile a persistent work-group takes in its round r of get_num_groups(0) tiles, the rounds walked forth
 * and back: the work-group that took a round's heaviest tile takes the next round's lightest (with the order
 * above, heaviest first when causal, the work-groups' sums stay within about one query block's work of each
 * other). The grid's tiles are under 2^31 and the work-groups at most 65536, so no round wraps. */
static inline uint persistent_tile(uint round)
{
    const uint groups = (uint)get_num_groups(0), g = (uint)get_group_id(0);
    return round * groups + (round & 1 ? groups - 1 - g : g);
}

/* One past the last key any row of the query block starting at q0 sees:
 * with the bottom-right causal mask (row i sees keys <= i + seq_kv - seq_q),
 * blocks past it are skipped, not computed and masked. */
static inline int block_key_end(int causal, int q0, int block_m, int seq_q, int seq_kv)
{
    return causal ? min(seq_kv, q0 + block_m + seq_kv - seq_q) : seq_kv;
}

#endif
