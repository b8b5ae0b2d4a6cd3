/*
 * varlen.h: packed variable-length batches for the kernels that take them.
 *
 * With VARLEN, sequence b's rows are rows cu[b] .. cu[b+1] - 1 of a packed
 * [total, heads, d] tensor (FlashAttention's cu_seqlens), for queries and
 * keys alike; the kernel's seq_q / seq_kv arguments are the longest
 * sequence the grid was sized for. The offsets may come from the device,
 * unchecked: every value is clamped so no read or write leaves the packed
 * rows — an offset below 0 or past total counts as 0 or total, a pair that
 * decreases is an empty sequence, a sequence longer than the longest is cut
 * to it (the header documents the same).
 */
#ifndef FLASHCL_VARLEN_H
#define FLASHCL_VARLEN_H

#ifndef VARLEN
#define VARLEN 0
#endif

#if VARLEN
/* The extra trailing kernel arguments. */
#define VARLEN_ARGS , __global const int *cu_q, __global const int *cu_k, int total_q, int total_k

static inline void varlen_sequence(__global const int *cu, int b, int total, int longest, int *start, int *len)
{
    const int s = clamp(cu[b], 0, total);
    const int e = clamp(cu[b + 1], s, total);
    *start = s;
    *len = min(e - s, longest);
}
#else
#define VARLEN_ARGS
#endif

#endif
