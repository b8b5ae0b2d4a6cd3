/* flashcl-bench's decode mode: few queries against a long KV cache. */
#ifndef FLASHCL_BENCH_DECODE_H
#define FLASHCL_BENCH_DECODE_H

#include "bench_paths.h"

/* batch:heads_q:heads_kv:seq_q:seq_kv */
struct decode_shape {
    int batch, heads_q, heads_kv, seq_q, seq_kv;
};

struct decode_result {
    struct decode_shape shape;
    int d;
    flashcl_dtype dtype;
    int page_size;  /* 0: a dense cache; else a paged one of pages this large */
    flashcl_status status;
    const char *kernel;
    int splits;
    double median_ms, min_ms, kv_gb_s, err_ref;
};

/* "B:Hq:Hkv:Nq:Nk,..." into out; the count, or -1 on a malformed item. */
int bench_parse_decode(const char *list, struct decode_shape *out, int max);

/* Times flashcl_forward on one decode shape (causal when seq_q > 1) and
 * checks sampled rows; K+V GB/s counts K and V read once. page_size > 0:
 * the keys in a paged cache instead (shuffled pages, device lengths and
 * block table, as a serving loop keeps them), flashcl_forward_kv_cache. */
flashcl_status bench_decode(struct bench_env *env, const struct decode_shape *s, int d, flashcl_dtype dtype,
                            int page_size, int warmup, int reps, struct decode_result *r);

#endif
