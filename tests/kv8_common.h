/* E4M3 (FP8) KV caches for the tests: one flashcl_forward_kv_cache call with E4M3 K and V (Q and O f32, f16 or
 * bf16) on random inputs, NaN bytes past each sequence's length, poisoned and guarded outputs, checked against the
 * double reference. Shared by tests/test_fp8.c and tests/test_kernel_check.c. */
#ifndef FLASHCL_TESTS_KV8_COMMON_H
#define FLASHCL_TESTS_KV8_COMMON_H

#include <stdint.h>

#include "common.h"

#define KV8_SEQS 4

struct kv8_case {
    flashcl_dtype dtype;  /* Q's and O's */
    int batch, seq_q, capacity;
    int lens[KV8_SEQS];   /* cache_seqlens */
    int heads_q, heads_kv, head_dim, head_dim_v;  /* head_dim_v 0: head_dim */
    float descale[2];     /* K's, V's (0: 1) */
    int causal, windowed, window_left, window_right;
    float softcap;
    int sinks, alibi;
    int device_lengths;   /* cache_seqlens_mem instead of the host array */
    int page_size;        /* 0: contiguous; else a paged pool, its pages shuffled */
    int device_table;     /* the block table in a device buffer (else the host's) */
    int kv_offset;        /* contiguous only: K's and V's views start this many bytes into their buffers */
    const char *options;  /* the context's kernel options */
};

/* Random values in [-1, 1] stored as E4M3 over `descale` (0: 1) into stored[0..n); value[i] what stored[i] means. */
void fill_e4m3(uint8_t *stored, double *value, size_t n, float descale);

/* One E4M3 KV-cache call of case c on ctx (its options are the caller's: c->options is only printed) against the
 * double reference; the kernel that ran in *tile. */
void run_kv8_case(flashcl_context *ctx, const struct kv8_case *c, uint64_t seed, struct flashcl_tile *tile);

#endif /* FLASHCL_TESTS_KV8_COMMON_H */
