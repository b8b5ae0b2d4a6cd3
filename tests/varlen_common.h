/* Packed (varlen) batches and KV caches for the tests: random inputs, poisoned and guarded outputs, one
 * call through flashcl_forward_varlen or flashcl_forward_kv_cache, and the check against the double
 * reference per sequence. Shared by tests/test_varlen.c and tests/test_kernel_check.c. */
#ifndef FLASHCL_TESTS_VARLEN_COMMON_H
#define FLASHCL_TESTS_VARLEN_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

#define MAX_SEQS 8

struct vl_case {
    int batch;
    int lens_q[MAX_SEQS], lens_k[MAX_SEQS];
    int heads_q, heads_kv, head_dim;
    flashcl_dtype dtype;
    enum flashcl_mask mask;
    int window_left, window_right;
    int device_offsets;  /* cu_seqlens as cl_mem instead of host arrays */
    enum flashcl_precision precision;  /* f32: what the call allows (EXACT by default) */
    float softcap;       /* attn.softcap (0: none) */
    int sinks;           /* attn.sinks (test_make_sinks) */
    int alibi;           /* attn.alibi_slopes (test_make_alibi_slopes) */
};

/* The packed problem on the device, its host images, and the call's structs. */
struct packed {
    const struct vl_case *c;
    int cu_q[MAX_SEQS + 1], cu_k[MAX_SEQS + 1], total_q, total_k, longest_q, longest_k;
    size_t esize, row_q, row_k;  /* elements per packed row */
    unsigned char *q, *k, *v;
    cl_mem q_mem, k_mem, v_mem, o_mem, lse_mem, cu_q_mem, cu_k_mem, sink_mem, slope_mem;
    double sinks[64];  /* with c->sinks: each query head's (at most 64) */
    double slopes[64]; /* with c->alibi: each query head's ALiBi slope (else 0) */
    struct flashcl_attention attn;
    struct flashcl_varlen vl;
};

struct kv_case {
    int batch, seq_q, capacity;
    int lens[MAX_SEQS];
    int heads_q, heads_kv, head_dim;
    flashcl_dtype dtype;
    enum flashcl_mask mask;
    int window_left, window_right;
    int device_lengths;
    int page_size;   /* 0: contiguous; else a paged pool, pages shuffled */
    int host_table;  /* the block table from the host (else a device buffer) */
    enum flashcl_precision precision;
    float softcap;   /* attn.softcap (0: none) */
    int alibi;       /* attn.alibi_slopes (test_make_alibi_slopes) */
    int head_dim_v;  /* attn.head_dim_v: V's and O's columns (0: head_dim) */
};

cl_mem vl_upload(const void *host, size_t bytes);
unsigned char *vl_random_rows(flashcl_dtype dtype, size_t elements);  /* uniform in [-1, 1] */
unsigned char *vl_read_all(cl_mem mem, size_t *bytes);
/* O has one guard row before and after the packed rows; O and LSE start poisoned (0xff bytes). */
void packed_create(struct packed *p, const struct vl_case *c, uint64_t seed);
void packed_free(struct packed *p);
void packed_check(const struct packed *p, const char *variant, double *max_err);
/* Runs a packed case on ctx (NULL: the shared one), checks it, and says which kernel ran. */
const char *varlen_run(flashcl_context *ctx, const struct vl_case *c, uint64_t seed, const char *what);
/* Runs a KV-cache case on ctx (NULL: the shared one; garbage device lengths when `garbage`) and checks it;
 * O has a guard batch on each side. Says which kernel ran. */
const char *kv_cache_run(flashcl_context *ctx, const struct kv_case *c, uint64_t seed, bool garbage);

#endif
