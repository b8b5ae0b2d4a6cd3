/* Packed batches and KV caches, run and checked (tests/varlen_common.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "varlen_common.h"

cl_mem vl_upload(const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, &err);
    ck_assert_msg(m != NULL, "clCreateBuffer(%zu) failed (%d)", bytes, err);
    return m;
}

unsigned char *vl_random_rows(flashcl_dtype dtype, size_t elements)
{
    unsigned char *p = malloc(elements * flashcl_dtype_size(dtype));
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < elements; i++)
        hostref_store(p, dtype, i, (float)rng_uniform(-1.0, 1.0));
    return p;
}

/* O has one guard row before and after the packed rows; O and LSE start poisoned (0xff bytes). */
void packed_create(struct packed *p, const struct vl_case *c, uint64_t seed)
{
    memset(p, 0, sizeof(*p));
    p->c = c;
    rng_seed(seed);
    for (int b = 0; b < c->batch; b++) {
        p->cu_q[b + 1] = p->cu_q[b] + c->lens_q[b];
        p->cu_k[b + 1] = p->cu_k[b] + c->lens_k[b];
        p->longest_q = c->lens_q[b] > p->longest_q ? c->lens_q[b] : p->longest_q;
        p->longest_k = c->lens_k[b] > p->longest_k ? c->lens_k[b] : p->longest_k;
    }
    p->total_q = p->cu_q[c->batch];
    p->total_k = p->cu_k[c->batch];
    p->esize = flashcl_dtype_size(c->dtype);
    p->row_q = (size_t)c->heads_q * (size_t)c->head_dim;
    p->row_k = (size_t)c->heads_kv * (size_t)c->head_dim;
    p->q = vl_random_rows(c->dtype, (size_t)p->total_q * p->row_q);
    p->k = vl_random_rows(c->dtype, (size_t)p->total_k * p->row_k);
    p->v = vl_random_rows(c->dtype, (size_t)p->total_k * p->row_k);
    p->q_mem = vl_upload(p->q, (size_t)p->total_q * p->row_q * p->esize);
    p->k_mem = vl_upload(p->k, (size_t)p->total_k * p->row_k * p->esize);
    p->v_mem = vl_upload(p->v, (size_t)p->total_k * p->row_k * p->esize);
    const size_t o_bytes = ((size_t)p->total_q + 2) * p->row_q * p->esize;
    const size_t lse_bytes = (size_t)c->heads_q * (size_t)p->total_q * sizeof(float);
    unsigned char *poison = malloc(o_bytes > lse_bytes ? o_bytes : lse_bytes);
    ck_assert_ptr_nonnull(poison);
    memset(poison, 0xff, o_bytes > lse_bytes ? o_bytes : lse_bytes);
    p->o_mem = vl_upload(poison, o_bytes);
    p->lse_mem = vl_upload(poison, lse_bytes);
    free(poison);

    struct flashcl_attention *a = &p->attn;
    a->batch = c->batch;
    a->seq_q = p->longest_q > 0 ? p->longest_q : 1;
    a->seq_kv = p->longest_k > 0 ? p->longest_k : 1;
    a->heads_q = c->heads_q;
    a->heads_kv = c->heads_kv;
    a->head_dim = c->head_dim;
    a->q = flashcl_tensor_bnhd(p->q_mem, c->dtype, (size_t)p->total_q, (size_t)c->heads_q, (size_t)c->head_dim);
    a->k = flashcl_tensor_bnhd(p->k_mem, c->dtype, (size_t)p->total_k, (size_t)c->heads_kv, (size_t)c->head_dim);
    a->v = flashcl_tensor_bnhd(p->v_mem, c->dtype, (size_t)p->total_k, (size_t)c->heads_kv, (size_t)c->head_dim);
    a->o = flashcl_tensor_bnhd(p->o_mem, c->dtype, (size_t)p->total_q, (size_t)c->heads_q, (size_t)c->head_dim);
    a->o.offset = p->row_q * p->esize;  /* after the guard row */
    a->lse = flashcl_tensor_lse(p->lse_mem, (size_t)p->total_q, (size_t)c->heads_q);  /* [heads, total_q] */
    a->mask = c->mask;
    a->window_left = c->mask == FLASHCL_MASK_WINDOW ? c->window_left : 0;
    a->window_right = c->mask == FLASHCL_MASK_WINDOW ? c->window_right : 0;
    a->precision = c->precision;
    a->softcap = c->softcap;
    p->sink_mem = NULL;
    for (int h = 0; h < 64; h++)
        p->sinks[h] = -INFINITY;
    if (c->sinks) {
        ck_assert_int_le(c->heads_q, 64);
        test_make_sinks(c->heads_q, p->longest_k, p->sinks, &p->sink_mem);
        a->sinks = (flashcl_vector){p->sink_mem, 4 * sizeof(float)};
    }
    p->slope_mem = NULL;
    for (int h = 0; h < 64; h++)
        p->slopes[h] = 0.0;
    if (c->alibi) {
        ck_assert_int_le(c->heads_q, 64);
        test_make_alibi_slopes(c->heads_q, p->slopes, &p->slope_mem);
        a->alibi_slopes = (flashcl_vector){p->slope_mem, 4 * sizeof(float)};
    }

    p->vl.total_q = p->total_q;
    p->vl.total_k = p->total_k;
    if (c->device_offsets) {
        p->cu_q_mem = vl_upload(p->cu_q, (size_t)(c->batch + 1) * sizeof(int));
        p->cu_k_mem = vl_upload(p->cu_k, (size_t)(c->batch + 1) * sizeof(int));
        p->vl.cu_seqlens_q_mem = p->cu_q_mem;
        p->vl.cu_seqlens_k_mem = p->cu_k_mem;
    } else {
        p->vl.cu_seqlens_q = p->cu_q;
        p->vl.cu_seqlens_k = p->cu_k;
    }
}

void packed_free(struct packed *p)
{
    cl_mem all[] = {p->q_mem, p->k_mem, p->v_mem, p->o_mem, p->lse_mem, p->cu_q_mem, p->cu_k_mem, p->sink_mem,
                    p->slope_mem};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(p->q);
    free(p->k);
    free(p->v);
}

unsigned char *vl_read_all(cl_mem mem, size_t *bytes)
{
    ck_assert_cl(clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof(*bytes), bytes, NULL));
    unsigned char *h = malloc(*bytes);
    ck_assert_ptr_nonnull(h);
    ck_assert_cl(clEnqueueReadBuffer(test_env_get()->queue, mem, CL_TRUE, 0, *bytes, h, 0, NULL, NULL));
    return h;
}

/* Every packed row of every sequence against the double reference; guard
 * rows and rows no sequence covers still poisoned. */
void packed_check(const struct packed *p, const char *variant, double *max_err)
{
    const struct vl_case *c = p->c;
    const size_t d = (size_t)c->head_dim, group = (size_t)(c->heads_q / c->heads_kv);
    size_t o_bytes, lse_bytes;
    unsigned char *o = vl_read_all(p->o_mem, &o_bytes), *lse = vl_read_all(p->lse_mem, &lse_bytes);
    const unsigned char *o_rows = o + p->row_q * p->esize;
    double atol, rtol, lse_tol;
    test_tolerance(c->dtype, variant, c->precision, &atol, &rtol, &lse_tol);
    const double scale = 1.0 / sqrt((double)d);
    int left = -1, right = c->mask == FLASHCL_MASK_CAUSAL ? 0 : -1;
    if (c->mask == FLASHCL_MASK_WINDOW) {
        left = c->window_left;
        right = c->window_right;
    }
    double *kd = malloc(((size_t)p->longest_k + 1) * d * sizeof(double));
    double *vd = malloc(((size_t)p->longest_k + 1) * d * sizeof(double));
    double *scores = malloc(((size_t)p->longest_k + 1) * sizeof(double));
    double qd[FLASHCL_MAX_HEAD_DIM], ref[FLASHCL_MAX_HEAD_DIM], ref_lse;
    *max_err = 0;
    for (int b = 0; b < c->batch; b++)
        for (int h = 0; h < c->heads_q; h++) {
            const size_t nq = (size_t)c->lens_q[b], nk = (size_t)c->lens_k[b], hk = (size_t)h / group;
            for (size_t j = 0; j < nk; j++)
                for (size_t e = 0; e < d; e++) {
                    const size_t idx = ((size_t)p->cu_k[b] + j) * p->row_k + hk * d + e;
                    kd[j * d + e] = hostref_load(p->k, c->dtype, idx);
                    vd[j * d + e] = hostref_load(p->v, c->dtype, idx);
                }
            for (size_t i = 0; i < nq; i++) {
                const size_t row = (size_t)p->cu_q[b] + i;
                for (size_t e = 0; e < d; e++)
                    qd[e] = hostref_load(p->q, c->dtype, row * p->row_q + (size_t)h * d + e);
                size_t first, end;
                hostref_visible_keys(i, nq, nk, left, right, &first, &end);
                const struct hostref_mods mods = {c->softcap, p->sinks[h], p->slopes[h]};
                hostref_attention_row_mods(qd, kd, vd, first, end, d, scale, &mods,
                                           (long long)i + (long long)nk - (long long)nq, ref, &ref_lse, scores);
                for (size_t e = 0; e < d; e++) {
                    const double got = hostref_load(o_rows, c->dtype, row * p->row_q + (size_t)h * d + e);
                    const double err = isnan(got) ? INFINITY : fabs(got - ref[e]);
                    ck_assert_msg(err <= atol + rtol * fabs(ref[e]), "sequence %d row %zu head %d [%zu] = %.9g, "
                                  "reference %.9g", b, i, h, e, got, ref[e]);
                    *max_err = fmax(*max_err, err);
                }
                float got_lse;
                memcpy(&got_lse, lse + ((size_t)h * (size_t)p->total_q + row) * sizeof(float), sizeof(float));
                if (isinf(ref_lse))
                    ck_assert_msg(isinf(got_lse) && got_lse < 0, "LSE of a row with no key: %g", got_lse);
                else
                    ck_assert_msg(fabs(got_lse - ref_lse) <= lse_tol * fmax(1.0, fabs(ref_lse)),
                                  "sequence %d row %zu head %d: LSE %.9g, reference %.9g", b, i, h, got_lse, ref_lse);
            }
        }
    /* The guard rows, and rows of the packed tensor no sequence covers, keep their poison. */
    for (size_t x = 0; x < p->row_q * p->esize; x++) {
        ck_assert_msg(o[x] == 0xff, "the guard row before O was written (byte %zu)", x);
        ck_assert_msg(o[o_bytes - 1 - x] == 0xff, "the guard row after O was written");
    }
    for (size_t row = (size_t)p->cu_q[c->batch]; row < (size_t)p->total_q; row++)
        for (size_t x = 0; x < p->row_q * p->esize; x++)
            ck_assert_msg(o_rows[row * p->row_q * p->esize + x] == 0xff, "row %zu is in no sequence but was written",
                          row);
    free(kd);
    free(vd);
    free(scores);
    free(o);
    free(lse);
}

/* Runs a case on ctx (NULL: the shared one), checks it, and says which kernel ran. */
const char *varlen_run(flashcl_context *ctx, const struct vl_case *c, uint64_t seed, const char *what)
{
    struct test_env *e = test_env_get();
    if (!ctx)
        ctx = e->ctx;
    struct packed p;
    packed_create(&p, c, seed);
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_varlen_config(ctx, &p.attn, &p.vl, &t));
    cl_event done = NULL;
    ck_assert_flashcl_ok(flashcl_forward_varlen(ctx, &p.attn, &p.vl, e->queue, 0, NULL, &done));
    ck_assert_cl(clWaitForEvents(1, &done));
    clReleaseEvent(done);
    double max_err;
    packed_check(&p, t.kernel, &max_err);
    printf("%-14s %-22s batch %d total %d/%d d=%d dtype=%d mask=%d: max|err| %.2e\n", t.kernel,
           what, c->batch, p.total_q, p.total_k, c->head_dim, (int)c->dtype, (int)c->mask, max_err);
    packed_free(&p);
    return t.kernel;
}

static int gcd(int a, int b)
{
    return b ? gcd(b, a % b) : a;
}

/* Runs a KV-cache case on ctx (NULL: the shared one; garbage device lengths
 * when `garbage`) and checks it; O has a guard batch on each side. */
const char *kv_cache_run(flashcl_context *ctx, const struct kv_case *c, uint64_t seed, bool garbage)
{
    struct test_env *e = test_env_get();
    rng_seed(seed);
    const size_t esize = flashcl_dtype_size(c->dtype), d = (size_t)c->head_dim;
    const size_t dv = c->head_dim_v ? (size_t)c->head_dim_v : d;  /* V's and O's columns */
    const size_t q_elems = (size_t)c->batch * (size_t)c->seq_q * (size_t)c->heads_q * d;
    const size_t kv_elems = (size_t)c->batch * (size_t)c->capacity * (size_t)c->heads_kv * d;
    const size_t v_elems = kv_elems / d * dv;
    unsigned char *q = vl_random_rows(c->dtype, q_elems), *k = vl_random_rows(c->dtype, kv_elems);
    unsigned char *v = vl_random_rows(c->dtype, v_elems);
    cl_mem q_mem = vl_upload(q, q_elems * esize), k_mem, v_mem;
    /* Paged: the logical [batch, capacity] rows scattered over a pool of pages in shuffled order (one spare page). */
    const int pages_per_seq = c->page_size ? c->capacity / c->page_size : 0, num_pages = c->batch * pages_per_seq + 1;
    int table[MAX_SEQS * 16] = {0};
    if (c->page_size) {
        int step = 7;  /* a step prime to num_pages walks a permutation (skipping one page) */
        while (gcd(step, num_pages) != 1)
            step++;
        for (int entry = 0; entry < c->batch * pages_per_seq; entry++)
            table[entry] = (entry * step + 3) % num_pages;
        const size_t row = (size_t)c->heads_kv * d * esize, page = (size_t)c->page_size * row;
        const size_t row_v = (size_t)c->heads_kv * dv * esize, page_v = (size_t)c->page_size * row_v;
        unsigned char *pk = calloc((size_t)num_pages, page), *pv = calloc((size_t)num_pages, page_v);
        for (int b = 0; b < c->batch; b++)
            for (int j = 0; j < c->capacity; j++) {
                const size_t at = (size_t)table[b * pages_per_seq + j / c->page_size], in_page = (size_t)(j % c->page_size);
                const size_t src = (size_t)b * (size_t)c->capacity + (size_t)j;
                memcpy(pk + at * page + in_page * row, k + src * row, row);
                memcpy(pv + at * page_v + in_page * row_v, v + src * row_v, row_v);
            }
        k_mem = vl_upload(pk, (size_t)num_pages * page);
        v_mem = vl_upload(pv, (size_t)num_pages * page_v);
        free(pk);
        free(pv);
    } else {
        k_mem = vl_upload(k, kv_elems * esize);
        v_mem = vl_upload(v, v_elems * esize);
    }
    const size_t o_batch = (size_t)c->seq_q * (size_t)c->heads_q * dv * esize, o_bytes = o_batch * (size_t)(c->batch + 2);
    unsigned char *poison = malloc(o_bytes);
    memset(poison, 0xff, o_bytes);
    cl_mem o_mem = vl_upload(poison, o_bytes);
    free(poison);
    struct flashcl_attention a = {0};
    a.batch = c->batch;
    a.seq_q = c->seq_q;
    a.seq_kv = c->capacity;
    a.heads_q = c->heads_q;
    a.heads_kv = c->heads_kv;
    a.head_dim = c->head_dim;
    a.head_dim_v = c->head_dim_v;
    a.q = flashcl_tensor_bnhd(q_mem, c->dtype, (size_t)c->seq_q, (size_t)c->heads_q, d);
    const size_t kv_rows = c->page_size ? (size_t)c->page_size : (size_t)c->capacity;  /* a page's, or a sequence's */
    a.k = flashcl_tensor_bnhd(k_mem, c->dtype, kv_rows, (size_t)c->heads_kv, d);
    a.v = flashcl_tensor_bnhd(v_mem, c->dtype, kv_rows, (size_t)c->heads_kv, dv);
    struct flashcl_kv_pages pages = {0};
    cl_mem table_mem = NULL;
    if (c->page_size) {
        pages.page_size = c->page_size;
        pages.pages_per_seq = pages_per_seq;
        pages.num_pages = num_pages;
        if (c->host_table) {
            pages.block_table = table;
        } else {
            table_mem = vl_upload(table, (size_t)(c->batch * pages_per_seq) * sizeof(int));
            pages.block_table_mem = table_mem;
        }
    }
    const struct flashcl_kv_pages *paged = c->page_size ? &pages : NULL;
    a.o = flashcl_tensor_bnhd(o_mem, c->dtype, (size_t)c->seq_q, (size_t)c->heads_q, dv);
    a.o.offset = o_batch;
    a.mask = c->mask;
    a.window_left = c->mask == FLASHCL_MASK_WINDOW ? c->window_left : 0;
    a.window_right = c->mask == FLASHCL_MASK_WINDOW ? c->window_right : 0;
    a.precision = c->precision;
    a.softcap = c->softcap;
    double slopes[64] = {0};
    cl_mem slope_mem = NULL;
    if (c->alibi) {
        ck_assert_int_le(c->heads_q, 64);
        test_make_alibi_slopes(c->heads_q, slopes, &slope_mem);
        a.alibi_slopes = (flashcl_vector){slope_mem, 4 * sizeof(float)};
    }
    struct flashcl_kv_lengths kv = {0};
    cl_mem len_mem = NULL;
    const int garbage_lens[MAX_SEQS] = {-5, 1 << 30, 7, -1, 3, 3, 3, 3};
    if (c->device_lengths || garbage) {
        len_mem = vl_upload(garbage ? garbage_lens : c->lens, MAX_SEQS * sizeof(int));
        kv.cache_seqlens_mem = len_mem;
    } else {
        kv.cache_seqlens = c->lens;
    }
    struct flashcl_tile t;
    if (!ctx)
        ctx = e->ctx;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &a, &kv, paged, &t));
    cl_event done = NULL;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache(ctx, &a, &kv, paged, e->queue, 0, NULL, &done));
    ck_assert_cl(clWaitForEvents(1, &done));
    clReleaseEvent(done);
    size_t got_bytes;
    unsigned char *o = vl_read_all(o_mem, &got_bytes);
    for (size_t x = 0; x < o_batch; x++) {
        ck_assert_msg(o[x] == 0xff, "the guard before O was written");
        ck_assert_msg(o[o_bytes - 1 - x] == 0xff, "the guard after O was written");
    }
    double max_err = 0;
    if (!garbage) {
        double atol, rtol, lse_tol;
        test_tolerance(c->dtype, t.kernel, c->precision, &atol, &rtol, &lse_tol);
        int left = -1, right = c->mask == FLASHCL_MASK_CAUSAL ? 0 : -1;
        if (c->mask == FLASHCL_MASK_WINDOW) {
            left = c->window_left;
            right = c->window_right;
        }
        const size_t group = (size_t)(c->heads_q / c->heads_kv);
        double *kd = malloc((size_t)c->capacity * d * sizeof(double)), *vd = malloc((size_t)c->capacity * dv * sizeof(double));
        double *scores = malloc((size_t)c->capacity * sizeof(double)), qd[FLASHCL_MAX_HEAD_DIM], ref[FLASHCL_MAX_HEAD_DIM];
        for (int b = 0; b < c->batch; b++)
            for (int h = 0; h < c->heads_q; h++) {
                const size_t len = (size_t)c->lens[b], hk = (size_t)h / group;
                for (size_t j = 0; j < len; j++) {
                    const size_t kv_row = ((size_t)b * (size_t)c->capacity + j) * (size_t)c->heads_kv + hk;
                    for (size_t x = 0; x < d; x++)
                        kd[j * d + x] = hostref_load(k, c->dtype, kv_row * d + x);
                    for (size_t x = 0; x < dv; x++)
                        vd[j * dv + x] = hostref_load(v, c->dtype, kv_row * dv + x);
                }
                for (size_t i = 0; i < (size_t)c->seq_q; i++) {
                    const size_t q_row = ((size_t)b * (size_t)c->seq_q + i) * (size_t)c->heads_q + (size_t)h;
                    const size_t base = q_row * dv;  /* O's */
                    for (size_t x = 0; x < d; x++)
                        qd[x] = hostref_load(q, c->dtype, q_row * d + x);
                    size_t first, end;
                    double lse;
                    hostref_visible_keys(i, (size_t)c->seq_q, len, left, right, &first, &end);
                    const struct hostref_mods mods = {c->softcap, -INFINITY, slopes[h]};
                    hostref_attention_row_dv(qd, kd, vd, first, end, d, dv, 1.0 / sqrt((double)d), &mods,
                                             (long long)i + (long long)len - (long long)c->seq_q, ref, &lse, scores);
                    for (size_t x = 0; x < dv; x++) {
                        const double got = hostref_load(o + o_batch, c->dtype, base + x);
                        const double err = isnan(got) ? INFINITY : fabs(got - ref[x]);
                        ck_assert_msg(err <= atol + rtol * fabs(ref[x]), "%s: sequence %d row %zu head %d [%zu] = "
                                      "%.9g, reference %.9g", t.kernel, b, i, h, x, got, ref[x]);
                        max_err = fmax(max_err, err);
                    }
                }
            }
        free(kd);
        free(vd);
        free(scores);
    }
    printf("%-14s kv cache%s%s batch %d Nq %d capacity %d d=%d dtype=%d mask=%d: max|err| %.2e\n",
           t.kernel, c->page_size ? ", paged" : "", garbage ? " (garbage lengths)" : "",
           c->batch, c->seq_q, c->capacity, c->head_dim, (int)c->dtype, (int)c->mask, max_err);
    free(o);
    free(q);
    free(k);
    free(v);
    cl_mem all[] = {q_mem, k_mem, v_mem, o_mem, len_mem, table_mem, slope_mem};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    return t.kernel;
}
