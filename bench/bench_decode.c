/* flashcl-bench --decode: one or a few new queries per sequence against a
 * long cache (decode, chunked prefill), GQA, timed like the sweep (OpenCL
 * profiling events, warm-up, median) and reported as the K+V bytes read per
 * second — the figure decode is bound by — next to the kernel and its
 * split-KV count; sampled rows checked against the double reference. */
#include "bench_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostref.h"

int bench_parse_decode(const char *list, struct decode_shape *out, int max)
{
    int count = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct decode_shape s;
        char tail;
        if (count == max || sscanf(tok, "%d:%d:%d:%d:%d%c", &s.batch, &s.heads_q, &s.heads_kv, &s.seq_q, &s.seq_kv,
                                   &tail) != 5 ||
            s.batch < 1 || s.heads_kv < 1 || s.heads_q % s.heads_kv || s.seq_q < 1 || s.seq_kv < 1) {
            free(copy);
            return -1;
        }
        out[count++] = s;
    }
    free(copy);
    return count;
}

/* Element (b, key, KV head g, e) of a dense cache in its layout. */
static size_t kv_index(const struct decode_shape *s, enum decode_kv_layout layout, size_t d, size_t b, size_t key,
                       size_t g, size_t e)
{
    const size_t nk = (size_t)s->seq_kv, hk = (size_t)s->heads_kv;
    return (layout == DECODE_KV_BHND ? (b * hk + g) * nk + key : (b * nk + key) * hk + g) * d + e;
}

/* An E4M3 "dtype" is an E4M3 cache with f16 Q and O (no call takes E4M3 queries against a cache). */
static flashcl_dtype q_dtype_of(flashcl_dtype dtype)
{
    return dtype == FLASHCL_E4M3 ? FLASHCL_F16 : dtype;
}

/* Largest |O - reference| over a few sampled (sequence, head, row) of a
 * problem whose Q and O are [B, N, H, d]; causal when more than one query (chunked prefill). */
static double sampled_error(const struct decode_shape *s, enum decode_kv_layout layout, int d, flashcl_dtype kv_dtype,
                            const void *q, const void *k, const void *v, const void *o)
{
    const flashcl_dtype dtype = q_dtype_of(kv_dtype);
    const size_t nk = (size_t)s->seq_kv, dd = (size_t)d;
    double *kd = malloc(nk * dd * sizeof(double)), *vd = malloc(nk * dd * sizeof(double));
    double *scratch = malloc(nk * sizeof(double)), qd[FLASHCL_MAX_HEAD_DIM], ref[FLASHCL_MAX_HEAD_DIM], lse;
    double max_err = kd && vd && scratch ? 0 : NAN;
    for (int sample = 0; sample < 4 && kd && vd && scratch; sample++) {
        const size_t b = (size_t)sample % (size_t)s->batch, h = ((size_t)sample * 7) % (size_t)s->heads_q;
        const size_t row = (size_t)(s->seq_q - 1 - sample % s->seq_q), g = h / (size_t)(s->heads_q / s->heads_kv);
        for (size_t j = 0; j < nk; j++)
            for (size_t e = 0; e < dd; e++) {
                kd[j * dd + e] = hostref_load(k, kv_dtype, kv_index(s, layout, dd, b, j, g, e));
                vd[j * dd + e] = hostref_load(v, kv_dtype, kv_index(s, layout, dd, b, j, g, e));
            }
        const size_t q_at = ((b * (size_t)s->seq_q + row) * (size_t)s->heads_q + h) * dd;
        for (size_t e = 0; e < dd; e++)
            qd[e] = hostref_load(q, dtype, q_at + e);
        const long long last = s->seq_q > 1 ? (long long)row + (long long)nk - s->seq_q : (long long)nk - 1;
        hostref_attention_row(qd, kd, vd, nk, dd, 1.0 / sqrt((double)d), last, ref, &lse, scratch);
        for (size_t e = 0; e < dd; e++) {
            const double err = fabs(hostref_load(o, dtype, q_at + e) - ref[e]);
            max_err = err > max_err || err != err ? err : max_err;
        }
    }
    free(kd);
    free(vd);
    free(scratch);
    return max_err;
}

/* A block table of `pages` pages in no order (Fisher-Yates). */
static void shuffled_table(int *table, int pages)
{
    for (int i = 0; i < pages; i++)
        table[i] = i;
    for (int i = pages - 1; i > 0; i--) {
        int j = (int)rng_uniform(0.0, (double)(i + 1));
        j = j > i ? i : j;
        const int t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
}

/* A pool of pages of page_size keys holding each sequence's keys in the
 * pages the block table names: the paged layout of [B, Nk, Hkv, d]. */
static void *page_pool(const void *dense, flashcl_dtype dtype, const struct decode_shape *s, int d, int page_size,
                       const int *table)
{
    const size_t esize = flashcl_dtype_size(dtype), row = (size_t)s->heads_kv * (size_t)d * esize;
    const int pps = (s->seq_kv + page_size - 1) / page_size, pages = s->batch * pps;
    unsigned char *pool = calloc((size_t)pages * (size_t)page_size, row);
    if (!pool)
        return NULL;
    for (int b = 0; b < s->batch; b++)
        for (int j = 0; j < s->seq_kv; j++) {
            const size_t page = (size_t)table[b * pps + j / page_size];
            memcpy(pool + (page * (size_t)page_size + (size_t)(j % page_size)) * row,
                   (const unsigned char *)dense + ((size_t)b * (size_t)s->seq_kv + (size_t)j) * row, row);
        }
    return pool;
}

flashcl_status bench_decode_create(struct bench_env *env, const struct decode_shape *s, int d, flashcl_dtype dtype,
                                   int page_size, enum decode_kv_layout layout, struct decode_problem *p)
{
    memset(p, 0, sizeof(*p));
    if (page_size > 0 && layout != DECODE_KV_BNHD)
        return FLASHCL_INVALID_VALUE;  /* a paged cache's pages hold [page_size, Hkv, d] */
    p->shape = *s;
    p->d = d;
    p->dtype = dtype;
    p->page_size = page_size;
    p->layout = layout;
    const flashcl_dtype q_dtype = q_dtype_of(dtype);
    const size_t esize = flashcl_dtype_size(q_dtype), kv_esize = flashcl_dtype_size(dtype);
    /* An E4M3 cache is read through flashcl_forward_kv_cache (its lengths all Nk) where dense too. */
    const bool lengths_call = page_size > 0 || dtype == FLASHCL_E4M3;
    const size_t q_elems = (size_t)s->batch * (size_t)s->seq_q * (size_t)s->heads_q * (size_t)d;
    const size_t kv_elems = (size_t)s->batch * (size_t)s->seq_kv * (size_t)s->heads_kv * (size_t)d;
    const int pps = page_size > 0 ? (s->seq_kv + page_size - 1) / page_size : 0, n_pages = s->batch * pps;
    const size_t pool_elems = (size_t)n_pages * (size_t)page_size * (size_t)s->heads_kv * (size_t)d;
    p->q = malloc(q_elems * esize);
    p->k = malloc(kv_elems * kv_esize);
    p->v = malloc(kv_elems * kv_esize);
    p->o = malloc(q_elems * esize);
    /* The paged layout's host copies live only until the buffers hold them. */
    void *k_pool = NULL, *v_pool = NULL;
    int *table = page_size > 0 ? malloc((size_t)n_pages * sizeof(int)) : NULL, *lengths = NULL;
    if (lengths_call)
        lengths = malloc((size_t)s->batch * sizeof(int));
    flashcl_status st = p->q && p->k && p->v && p->o && (!page_size || table) ? FLASHCL_SUCCESS
                                                                              : FLASHCL_OUT_OF_HOST_MEMORY;
    if (st == FLASHCL_SUCCESS) {
        rng_seed((uint64_t)s->seq_kv * 131 + (uint64_t)d);
        bench_fill_random(p->q, q_dtype, q_elems);
        bench_fill_repeated(p->k, dtype, kv_elems);
        bench_fill_repeated(p->v, dtype, kv_elems);
    }
    if (st == FLASHCL_SUCCESS && page_size > 0) {
        shuffled_table(table, n_pages);
        k_pool = page_pool(p->k, dtype, s, d, page_size, table);
        v_pool = page_pool(p->v, dtype, s, d, page_size, table);
        if (!k_pool || !v_pool)
            st = FLASHCL_OUT_OF_HOST_MEMORY;
    }
    if (lengths_call && !lengths)
        st = FLASHCL_OUT_OF_HOST_MEMORY;
    for (int b = 0; lengths && b < s->batch; b++)
        lengths[b] = s->seq_kv;

    cl_context cl = flashcl_context_cl_context(env->ctx);
    cl_int err = CL_SUCCESS;
    struct bench_buffers *b = &p->b;
    const size_t k_bytes = (page_size ? pool_elems : kv_elems) * kv_esize;
    if (st == FLASHCL_SUCCESS)
        b->q = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, q_elems * esize, p->q, &err);
    if (st == FLASHCL_SUCCESS && err == CL_SUCCESS)
        b->k = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, k_bytes, page_size ? k_pool : p->k, &err);
    if (st == FLASHCL_SUCCESS && err == CL_SUCCESS)
        b->v = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, k_bytes, page_size ? v_pool : p->v, &err);
    if (st == FLASHCL_SUCCESS && err == CL_SUCCESS)
        b->o = clCreateBuffer(cl, CL_MEM_READ_WRITE, q_elems * esize, NULL, &err);
    if (st == FLASHCL_SUCCESS && err == CL_SUCCESS && lengths_call) {
        p->lengths = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)s->batch * sizeof(int),
                                    lengths, &err);
        p->kv.cache_seqlens_mem = p->lengths;
        b->kv_lengths = &p->kv;
    }
    if (st == FLASHCL_SUCCESS && err == CL_SUCCESS && page_size) {
        p->table = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n_pages * sizeof(int), table,
                                  &err);
        p->pages.page_size = page_size;
        p->pages.pages_per_seq = pps;
        p->pages.num_pages = n_pages;
        p->pages.block_table_mem = p->table;
        b->kv_pages = &p->pages;
    }
    free(k_pool);
    free(v_pool);
    free(table);
    free(lengths);
    if (st == FLASHCL_SUCCESS)
        st = (flashcl_status)err;
    if (st != FLASHCL_SUCCESS) {
        bench_decode_release(p);
        return st;
    }
    struct flashcl_attention *a = &b->attn;
    a->batch = s->batch;
    a->seq_q = s->seq_q;
    a->seq_kv = page_size ? pps * page_size : s->seq_kv;  /* a paged cache's capacity */
    a->heads_q = s->heads_q;
    a->heads_kv = s->heads_kv;
    a->head_dim = d;
    a->q = flashcl_tensor_bnhd(b->q, q_dtype, (size_t)s->seq_q, (size_t)s->heads_q, (size_t)d);
    const size_t rows = page_size ? (size_t)page_size : (size_t)s->seq_kv;  /* a page is a "batch" of the pool */
    flashcl_tensor (*kv_view)(cl_mem, flashcl_dtype, size_t, size_t, size_t) =
        layout == DECODE_KV_BHND ? flashcl_tensor_bhnd : flashcl_tensor_bnhd;
    a->k = kv_view(b->k, dtype, rows, (size_t)s->heads_kv, (size_t)d);
    a->v = kv_view(b->v, dtype, rows, (size_t)s->heads_kv, (size_t)d);
    a->o = flashcl_tensor_bnhd(b->o, q_dtype, (size_t)s->seq_q, (size_t)s->heads_q, (size_t)d);
    a->mask = s->seq_q > 1 ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    /* bench_time runs flashcl_forward (flashcl_forward_kv_cache when paged or E4M3) on b.attn; an E4M3 cache's
     * results are bounded as f16's (its values are exact in f16). */
    const struct bench_case c = {s->seq_kv, d, s->batch, s->heads_q, s->seq_q > 1, q_dtype, FLASHCL_PRECISION_EXACT,
                                 BENCH_PASS_FORWARD, s->heads_kv, false, false, 0.0f, 0, 0};
    p->c = c;
    return FLASHCL_SUCCESS;
}

void bench_decode_release(struct decode_problem *p)
{
    bench_buffers_release(&p->b);
    if (p->lengths)
        clReleaseMemObject(p->lengths);
    if (p->table)
        clReleaseMemObject(p->table);
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o);
    memset(p, 0, sizeof(*p));
}

flashcl_status bench_decode_config(struct bench_env *env, const struct decode_problem *p, struct flashcl_tile *t)
{
    return p->b.kv_lengths ? flashcl_forward_kv_cache_config(env->ctx, &p->b.attn, &p->kv, p->b.kv_pages, t)
                           : flashcl_forward_config(env->ctx, &p->b.attn, t);
}

/* O of the last run, read back, against the reference; INFINITY if it cannot be read. */
static double read_error(struct bench_env *env, struct decode_problem *p)
{
    const struct decode_shape *s = &p->shape;
    const size_t bytes = (size_t)s->batch * (size_t)s->seq_q * (size_t)s->heads_q * (size_t)p->d *
                         flashcl_dtype_size(q_dtype_of(p->dtype));
    if (clEnqueueReadBuffer(env->queue, p->b.o, CL_TRUE, 0, bytes, p->o, 0, NULL, NULL) != CL_SUCCESS)
        return INFINITY;
    return sampled_error(s, p->layout, p->d, p->dtype, p->q, p->k, p->v, p->o);
}

double bench_decode_error(struct bench_env *env, struct decode_problem *p)
{
    if (bench_run_path(env, BENCH_FLASH, &p->b, &p->c, NULL) != FLASHCL_SUCCESS)
        return INFINITY;
    return read_error(env, p);
}

flashcl_status bench_decode(struct bench_env *env, const struct decode_shape *s, int d, flashcl_dtype dtype,
                            int page_size, enum decode_kv_layout layout, int warmup, int reps,
                            struct decode_result *r)
{
    memset(r, 0, sizeof(*r));
    r->shape = *s;
    r->d = d;
    r->layout = layout;
    r->dtype = dtype;
    r->page_size = page_size;
    r->last_ms = NAN;  /* until a run measures it */
    struct decode_problem p;
    flashcl_status st = bench_decode_create(env, s, d, dtype, page_size, layout, &p);
    struct flashcl_tile t;
    if (st == FLASHCL_SUCCESS)
        st = bench_decode_config(env, &p, &t);
    if (st == FLASHCL_SUCCESS) {
        r->kernel = t.kernel;
        r->splits = t.splits;
        st = bench_time(env, BENCH_FLASH, &p.b, &p.c, warmup, reps, &r->median_ms, &r->min_ms, &r->last_ms);
    }
    if (st == FLASHCL_SUCCESS) {
        const size_t kv_elems = (size_t)s->batch * (size_t)s->seq_kv * (size_t)s->heads_kv * (size_t)d;
        r->kv_gb_s = 2.0 * (double)kv_elems * (double)flashcl_dtype_size(dtype) / (r->median_ms * 1e-3) / 1e9;
        r->err_ref = read_error(env, &p);
    }
    r->status = st;
    bench_decode_release(&p);  /* nothing held (all zero) where create failed */
    return st;
}
