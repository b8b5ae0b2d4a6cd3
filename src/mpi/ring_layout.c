/* Which chunks of the sequence a rank holds: contiguous, or zigzag when causal. */
#include "ring_internal.h"

int flashcl_ring_global_chunk(int chunks, int ranks, int rank, int causal, int local)
{
    if (ranks < 1 || rank < 0 || rank >= ranks || chunks < 1 || chunks % (causal ? 2 * ranks : ranks))
        return -1;
    const int per_rank = chunks / ranks;
    if (local < 0 || local >= per_rank)
        return -1;
    if (!causal)
        return rank * per_rank + local;
    /* Group r (early rows, little work) and group 2R-1-r (late rows, much): every rank the same share. */
    const int group = per_rank / 2;
    return local < group ? rank * group + local : (2 * ranks - 1 - rank) * group + (local - group);
}

int flashcl_ring_chunks(const struct flashcl_ring_params *params, int seq)
{
    if (params && params->chunks > 0)
        return params->chunks;
    if (seq > 0 && seq % 24 == 0)
        return 24;  /* 1, 2, 3, 4 ranks causal; 6, 8, 12 more non-causal */
    if (seq > 0 && seq % 16 == 0)
        return 16;  /* powers of two: 1, 2, 4, 8 ranks causal */
    return 0;
}
