/* flashcl-bench's decode mode: few queries against a long KV cache. */
#ifndef FLASHCL_BENCH_DECODE_H
#define FLASHCL_BENCH_DECODE_H

#include "bench_paths.h"

/* batch:heads_q:heads_kv:seq_q:seq_kv */
struct decode_shape {
    int batch, heads_q, heads_kv, seq_q, seq_kv;
};

/* Where a dense cache's rows lie: [B, Nk, Hkv, d] (flashcl's KV cache, a token's heads together) or
 * [B, Hkv, Nk, d] (a head's keys contiguous, PyTorch's usual). A paged cache is always the first. */
enum decode_kv_layout { DECODE_KV_BNHD, DECODE_KV_BHND };

struct decode_result {
    struct decode_shape shape;
    int d;
    enum decode_kv_layout layout;
    flashcl_dtype dtype;
    int page_size;  /* 0: a dense cache; else a paged one of pages this large */
    flashcl_status status;
    const char *kernel;
    int splits;
    double median_ms, min_ms, kv_gb_s, err_ref;
    double last_ms;  /* the last command's own time: the split merge where splits > 1 */
};

/* "B:Hq:Hkv:Nq:Nk,..." into out; the count, or -1 on a malformed item. */
int bench_parse_decode(const char *list, struct decode_shape *out, int max);

/* Times flashcl_forward on one decode shape (causal when seq_q > 1) and
 * checks sampled rows; K+V GB/s counts K and V read once. page_size > 0:
 * the keys in a paged cache instead (shuffled pages, device lengths and
 * block table, as a serving loop keeps them), flashcl_forward_kv_cache. */
flashcl_status bench_decode(struct bench_env *env, const struct decode_shape *s, int d, flashcl_dtype dtype,
                            int page_size, enum decode_kv_layout layout, int warmup, int reps,
                            struct decode_result *r);

/* One decode shape's inputs, made once and run by any context of the same
 * OpenCL context (flashcl-probe times every candidate on one). Not to be
 * copied: b points into it. */
struct decode_problem {
    struct decode_shape shape;
    int d, page_size;
    enum decode_kv_layout layout;
    flashcl_dtype dtype;
    void *q, *k, *v, *o;     /* host: Q, the dense K and V (the reference's), O read back */
    struct bench_buffers b;  /* b.attn is the call (b.kv_lengths/kv_pages when paged) */
    struct bench_case c;     /* what bench_time and bench_run_path are told of it */
    cl_mem lengths, table;   /* paged only */
    struct flashcl_kv_lengths kv;
    struct flashcl_kv_pages pages;
};

/* Random inputs (seeded by the shape) in buffers of env's OpenCL context;
 * on failure nothing is held (p all zero). */
flashcl_status bench_decode_create(struct bench_env *env, const struct decode_shape *s, int d, flashcl_dtype dtype,
                                   int page_size, enum decode_kv_layout layout, struct decode_problem *p);
/* The kernel and tile env's context plans for it. */
flashcl_status bench_decode_config(struct bench_env *env, const struct decode_problem *p, struct flashcl_tile *t);
/* Runs env's context on it once: the largest sampled |O - reference|
 * (INFINITY if the run failed). */
double bench_decode_error(struct bench_env *env, struct decode_problem *p);
void bench_decode_release(struct decode_problem *p);

#endif
