/*
 * varlen.h: batches of different lengths for the kernels that take them.
 *
 * VARLEN 1, packed:
 * With VARLEN, sequence b's rows are rows cu[b] .. cu[b+1] - 1 of a packed
 * [total, heads, d] tensor (FlashAttention's cu_seqlens), for queries and
 * keys alike; the kernel's seq_q / seq_kv arguments are the longest
 * sequence the grid was sized for. The offsets may come from the device,
 * unchecked: every value is clamped so no read or write leaves the packed
 * rows — an offset below 0 or past total counts as 0 or total, a pair that
 * decreases is an empty sequence, a sequence longer than the longest is cut
 * to it (the header documents the same).
 *
 * VARLEN 2, a KV cache: rows are dense ([batch, seq, heads, d] views) and
 * cu_k holds each sequence's number of valid keys (of the cache's seq_kv),
 * clamped to 0 .. seq_kv; the queries align to the end of those keys.
 *
 * VARLEN 3, a paged KV cache: as 2, but K and V are a pool of num_pages
 * pages of page_size rows ([num_pages, page_size, heads, d] views) and key j
 * of sequence b lives in page pages[b * pages_per_seq + j / page_size],
 * clamped to 0 .. num_pages - 1.
 */
#ifndef FLASHCL_VARLEN_H
#define FLASHCL_VARLEN_H

#ifndef VARLEN
#define VARLEN 0
#endif

#if VARLEN
/* The extra trailing kernel arguments (VARLEN 2 reads cu_k only). */
#define VARLEN_ARGS                                                                                                \
    , __global const int *cu_q, __global const int *cu_k, int total_q, int total_k, __global const int *pages,      \
        int page_size, int pages_per_seq, int num_pages

static inline void varlen_sequence(__global const int *cu, int b, int total, int longest, int *start, int *len)
{
    const int s = clamp(cu[b], 0, total);
    const int e = clamp(cu[b + 1], s, total);
    *start = s;
    *len = min(e - s, longest);
}

/* This group's sequence: its first packed rows and its lengths (seq_q and
 * seq_kv come in as the longest, or the cache's capacity, and go out as its own). */
static inline void varlen_rows(__global const int *cu_q, __global const int *cu_k, int total_q, int total_k, int b,
                               int *start_q, int *start_k, int *seq_q, int *seq_kv)
{
#if VARLEN == 1
    varlen_sequence(cu_q, b, total_q, *seq_q, start_q, seq_q);
    varlen_sequence(cu_k, b, total_k, *seq_kv, start_k, seq_kv);
#else  /* 2, 3: a cache's lengths */
    *start_q = *start_k = 0;
    *seq_kv = clamp(cu_k[b], 0, *seq_kv);
#endif
}

/* This work-group's sequence b: declares start_q and start_k, its first
 * packed rows, and sets seq_q / seq_kv to its own lengths. */
#define SEQUENCE_ROWS(b)                                                                                             \
    int start_q, start_k;                                                                                            \
    varlen_rows(cu_q, cu_k, total_q, total_k, (b), &start_q, &start_k, &seq_q, &seq_kv)
#else
#define VARLEN_ARGS
#define SEQUENCE_ROWS(b) const int start_q = 0, start_k = 0
#endif

/* Element offset of key row `key` of sequence b from the view's base (which
 * holds b's batch offset except when paged, where the page's does). */
#if VARLEN == 3
#define KV_ROW(key, sb, ss)                                                                                          \
    ((ulong)clamp(pages[b * pages_per_seq + (key) / page_size], 0, num_pages - 1) * (sb) +                          \
     (ulong)((key) % page_size) * (ss))
#define KV_BATCH(sb) 0
#else
#define KV_ROW(key, sb, ss) ((ulong)(key) * (ss))
#define KV_BATCH(sb) ((ulong)b * (sb))
#endif

#endif
