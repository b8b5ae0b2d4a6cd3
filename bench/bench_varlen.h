/* flashcl-bench's varlen mode: a packed batch of sequences of different
 * lengths (self-attention prefill), next to one dense call of the same tokens. */
#ifndef FLASHCL_BENCH_VARLEN_H
#define FLASHCL_BENCH_VARLEN_H

#include "bench_paths.h"

/* The sequences of one packed batch: queries = keys = lengths[i] for sequence i. */
struct varlen_batch {
    int *lengths;  /* count entries, each >= 1 (from bench_parse_lengths; free() it) */
    int count;
    int heads_q, heads_kv;
};

struct varlen_result {
    int d, causal;
    flashcl_dtype dtype;
    enum flashcl_precision precision;
    int total_tokens, shortest, longest;
    /* The flashcl_forward_varlen call. */
    flashcl_status status;
    const char *kernel;
    double median_ms, min_ms, tflops;
    /* One dense flashcl_forward of about the same tokens: batch = the sequence
     * count, N = the mean length rounded, same heads, d, dtype and mask. */
    int dense_batch, dense_n;
    flashcl_status dense_status;
    const char *dense_kernel;
    double dense_ms, dense_min_ms, dense_tflops;
    char error[256];  /* flashcl_last_error() of the first call that failed */
};

/* "L1,L2,..." into a malloc'd array (*lengths); the count, or -1 with *why
 * saying what is wrong (an empty item or list, a length outside 1..INT_MAX,
 * more than INT_MAX tokens in all, no memory). */
int bench_parse_lengths(const char *list, int **lengths, const char **why);
/* "Hq:Hkv" (or "H" for Hq = Hkv = H): 0, or -1 with *why. */
int bench_parse_heads(const char *arg, int *heads_q, int *heads_kv, const char **why);

/* FlashAttention's FLOP count of a packed batch: 4·L²·d·Hq summed over the
 * sequences, halved when causal. */
double bench_varlen_flops(const int *lengths, int count, int d, int heads_q, int causal);

/* Times flashcl_forward_varlen on the packed batch (Q, K, V random in
 * [-1, 1), never all zeros; host cu_seqlens) with bench_time (warm-up, then
 * the median of reps runs), then the dense call of the same tokens on the
 * same data. Not a correctness check: tests/test_varlen is. Returns the
 * varlen call's status. */
flashcl_status bench_varlen(struct bench_env *env, const struct varlen_batch *batch, int d, flashcl_dtype dtype,
                            enum flashcl_precision precision, int causal, int warmup, int reps,
                            struct varlen_result *r);

#endif
