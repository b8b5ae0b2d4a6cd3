/* E4M3 KV caches for the tests (kv8_common.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostref.h"
#include "kv8_common.h"
#include "varlen_common.h"  /* vl_upload, vl_random_rows, vl_read_all */

#define KV8_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Random values in [-1, 1] stored as E4M3 over `descale`; *value gets what the stored bytes mean. */
void fill_e4m3(uint8_t *stored, double *value, size_t n, float descale)
{
    const double f = descale != 0.0f ? descale : 1.0;
    for (size_t i = 0; i < n; i++) {
        stored[i] = f32_to_e4m3((float)(rng_uniform(-1.0, 1.0) / f));
        value[i] = e4m3_to_f32(stored[i]) * f;
    }
}

static int kv8_gcd(int a, int b)
{
    return b ? kv8_gcd(b, a % b) : a;
}

/* One E4M3 KV-cache call of case c on ctx against the double reference. K and V hold random values over their
 * descales up to each sequence's length and E4M3 NaN (0x7f) past it and in the paged pool's spare page: the
 * kernels read no row past a length (they stage zeros there), and an uninitialised FP8 cache may well hold NaN
 * bytes. O (with a guard batch either side) and the LSE (with 16 guard floats either side) start as 0xff bytes,
 * NaN in every dtype, so an element left unwritten fails. The kernel that ran in *tile. */
void run_kv8_case(flashcl_context *ctx, const struct kv8_case *c, uint64_t seed, struct flashcl_tile *tile)
{
    struct test_env *e = test_env_get();
    rng_seed(seed);
    ck_assert_int_le(c->batch, KV8_SEQS);
    const size_t B = (size_t)c->batch, nq = (size_t)c->seq_q, cap = (size_t)c->capacity, hq = (size_t)c->heads_q,
                 hk = (size_t)c->heads_kv, d = (size_t)c->head_dim,
                 dv = c->head_dim_v ? (size_t)c->head_dim_v : (size_t)c->head_dim;
    const size_t esize = flashcl_dtype_size(c->dtype);

    /* Q as stored, and the logical cache [batch, capacity, heads_kv, d or dv] as bytes and as the values they
     * mean; NaN bytes past each length. */
    const size_t q_elems = B * nq * hq * d, k_elems = B * cap * hk * d, v_elems = B * cap * hk * dv;
    unsigned char *q = vl_random_rows(c->dtype, q_elems);
    uint8_t *k8 = malloc(k_elems), *v8 = malloc(v_elems);
    double *k = malloc(k_elems * sizeof(double)), *v = malloc(v_elems * sizeof(double));
    ck_assert(k8 && v8 && k && v);
    fill_e4m3(k8, k, k_elems, c->descale[0]);
    fill_e4m3(v8, v, v_elems, c->descale[1]);
    for (size_t b = 0; b < B; b++)
        for (size_t j = (size_t)c->lens[b]; j < cap; j++) {
            memset(k8 + (b * cap + j) * hk * d, 0x7f, hk * d);
            memset(v8 + (b * cap + j) * hk * dv, 0x7f, hk * dv);
        }
    cl_mem q_mem = vl_upload(q, q_elems * esize), k_mem, v_mem, table_mem = NULL;

    /* Paged: the logical rows over a pool of pages in shuffled order (a step prime to the page count walks a
     * permutation), one spare page no sequence uses. */
    struct flashcl_kv_pages pages = {0};
    int table[KV8_SEQS * 32];
    const size_t k_row = hk * d, v_row = hk * dv;  /* bytes of one key's row */
    if (c->page_size) {
        const int pps = c->capacity / c->page_size, num_pages = c->batch * pps + 1;
        ck_assert_int_eq(pps * c->page_size, c->capacity);
        ck_assert_int_le(c->batch * pps, (int)KV8_COUNT(table));
        int step = 7;
        while (kv8_gcd(step, num_pages) != 1)
            step++;
        for (int entry = 0; entry < c->batch * pps; entry++)
            table[entry] = (entry * step + 3) % num_pages;
        const size_t ps = (size_t)c->page_size;
        uint8_t *pk = malloc((size_t)num_pages * ps * k_row), *pv = malloc((size_t)num_pages * ps * v_row);
        ck_assert(pk && pv);
        memset(pk, 0x7f, (size_t)num_pages * ps * k_row);
        memset(pv, 0x7f, (size_t)num_pages * ps * v_row);
        for (size_t b = 0; b < B; b++)
            for (size_t j = 0; j < cap; j++) {
                const size_t page = (size_t)table[b * (size_t)pps + j / ps], in_page = j % ps;
                memcpy(pk + (page * ps + in_page) * k_row, k8 + (b * cap + j) * k_row, k_row);
                memcpy(pv + (page * ps + in_page) * v_row, v8 + (b * cap + j) * v_row, v_row);
            }
        k_mem = vl_upload(pk, (size_t)num_pages * ps * k_row);
        v_mem = vl_upload(pv, (size_t)num_pages * ps * v_row);
        free(pk);
        free(pv);
        pages.page_size = c->page_size;
        pages.pages_per_seq = pps;
        pages.num_pages = num_pages;
        if (c->device_table) {
            table_mem = vl_upload(table, (size_t)(c->batch * pps) * sizeof(int));
            pages.block_table_mem = table_mem;
        } else {
            pages.block_table = table;
        }
    } else {
        /* kv_offset bytes of NaN before the cache: a view off 4 or 16 bytes takes the kernels' other loads */
        const size_t off = (size_t)c->kv_offset;
        uint8_t *pk = malloc(off + k_elems), *pv = malloc(off + v_elems);
        ck_assert(pk && pv);
        memset(pk, 0x7f, off);
        memset(pv, 0x7f, off);
        memcpy(pk + off, k8, k_elems);
        memcpy(pv + off, v8, v_elems);
        k_mem = vl_upload(pk, off + k_elems);
        v_mem = vl_upload(pv, off + v_elems);
        free(pk);
        free(pv);
    }

    const size_t o_batch = nq * hq * dv * esize, o_total = o_batch * (B + 2);
    const size_t lse_rows = B * hq * nq, lse_guard = 16, lse_total = (lse_rows + 2 * lse_guard) * sizeof(float);
    unsigned char *poison = malloc(o_total > lse_total ? o_total : lse_total);
    ck_assert_ptr_nonnull(poison);
    memset(poison, 0xff, o_total > lse_total ? o_total : lse_total);
    cl_mem o_mem = vl_upload(poison, o_total), lse_mem = vl_upload(poison, lse_total);
    free(poison);

    struct flashcl_attention a = {0};
    a.batch = c->batch;
    a.seq_q = c->seq_q;
    a.seq_kv = c->capacity;
    a.heads_q = c->heads_q;
    a.heads_kv = c->heads_kv;
    a.head_dim = c->head_dim;
    a.head_dim_v = c->head_dim_v;
    const size_t kv_rows = c->page_size ? (size_t)c->page_size : cap;  /* a page's rows, or a sequence's */
    a.q = flashcl_tensor_bnhd(q_mem, c->dtype, nq, hq, d);
    a.k = flashcl_tensor_bnhd(k_mem, FLASHCL_E4M3, kv_rows, hk, d);
    a.v = flashcl_tensor_bnhd(v_mem, FLASHCL_E4M3, kv_rows, hk, dv);
    a.k.descale = c->descale[0];
    a.v.descale = c->descale[1];
    a.k.offset = a.v.offset = c->page_size ? 0 : (size_t)c->kv_offset;
    a.o = flashcl_tensor_bnhd(o_mem, c->dtype, nq, hq, dv);
    a.o.offset = o_batch;
    a.lse = flashcl_tensor_lse(lse_mem, nq, hq);
    a.lse.offset = lse_guard * sizeof(float);
    a.mask = c->windowed ? FLASHCL_MASK_WINDOW : c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    a.window_left = c->windowed ? c->window_left : 0;
    a.window_right = c->windowed ? c->window_right : 0;
    a.softcap = c->softcap;
    double sinks[16], slopes[16];
    cl_mem sink_mem = NULL, slope_mem = NULL;
    ck_assert_int_le(c->heads_q, 16);
    for (int h = 0; h < 16; h++) {
        sinks[h] = -INFINITY;
        slopes[h] = 0.0;
    }
    if (c->sinks) {
        test_make_sinks(c->heads_q, c->capacity, sinks, &sink_mem);
        a.sinks = (flashcl_vector){sink_mem, 4 * sizeof(float)};
    }
    if (c->alibi) {
        test_make_alibi_slopes(c->heads_q, slopes, &slope_mem);
        a.alibi_slopes = (flashcl_vector){slope_mem, 4 * sizeof(float)};
    }
    struct flashcl_kv_lengths lengths = {0};
    cl_mem len_mem = NULL;
    if (c->device_lengths) {
        len_mem = vl_upload(c->lens, sizeof(c->lens));
        lengths.cache_seqlens_mem = len_mem;
    } else {
        lengths.cache_seqlens = c->lens;
    }
    const struct flashcl_kv_pages *paged = c->page_size ? &pages : NULL;

    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &a, &lengths, paged, tile));
    cl_event done = NULL;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache(ctx, &a, &lengths, paged, e->queue, 0, NULL, &done));
    ck_assert_cl(clWaitForEvents(1, &done));
    clReleaseEvent(done);
    /* Planned again: a kernel that failed to build is not planned twice, so a fallback at run time shows here. */
    struct flashcl_tile after;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &a, &lengths, paged, &after));
    ck_assert_msg(strcmp(after.kernel, tile->kernel) == 0, "planned %s, then %s after the run (a build failed?)",
                  tile->kernel, after.kernel);

    size_t bytes;
    unsigned char *o = vl_read_all(o_mem, &bytes), *lse_bytes = vl_read_all(lse_mem, &bytes);
    for (size_t x = 0; x < o_batch; x++) {
        ck_assert_msg(o[x] == 0xff, "the guard batch before O was written (byte %zu)", x);
        ck_assert_msg(o[o_total - 1 - x] == 0xff, "the guard batch after O was written");
    }
    for (size_t x = 0; x < lse_guard * sizeof(float); x++) {
        ck_assert_msg(lse_bytes[x] == 0xff, "the guard before the LSE was written (byte %zu)", x);
        ck_assert_msg(lse_bytes[lse_total - 1 - x] == 0xff, "the guard after the LSE was written");
    }
    const unsigned char *o_rows = o + o_batch;
    float *lse = malloc(lse_rows * sizeof(float));
    memcpy(lse, lse_bytes + lse_guard * sizeof(float), lse_rows * sizeof(float));

    double atol, rtol, lse_tol;
    test_tolerance(c->dtype, tile->kernel, FLASHCL_PRECISION_EXACT, &atol, &rtol, &lse_tol);
    int left, right;
    test_case_window(c->causal, c->windowed, c->window_left, c->window_right, &left, &right);
    const double scale = 1.0 / sqrt((double)d);
    const size_t group = hq / hk;
    double *kd = malloc(cap * d * sizeof(double)), *vd = malloc(cap * dv * sizeof(double));
    double *scratch = malloc(cap * sizeof(double)), qd[FLASHCL_MAX_HEAD_DIM], ref[FLASHCL_MAX_HEAD_DIM];
    ck_assert(kd && vd && scratch);
    double max_err = 0, max_lse_err = 0;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < hq; h++) {
            const size_t len = (size_t)c->lens[b], g = h / group;
            for (size_t j = 0; j < len; j++) {
                memcpy(kd + j * d, k + ((b * cap + j) * hk + g) * d, d * sizeof(double));
                memcpy(vd + j * dv, v + ((b * cap + j) * hk + g) * dv, dv * sizeof(double));
            }
            const struct hostref_mods mods = {c->softcap, sinks[h], slopes[h]};
            for (size_t i = 0; i < nq; i++) {
                const size_t q_row = (b * nq + i) * hq + h;
                for (size_t x = 0; x < d; x++)
                    qd[x] = hostref_load(q, c->dtype, q_row * d + x);
                size_t first, end;
                double ref_lse;
                hostref_visible_keys(i, nq, len, left, right, &first, &end);
                hostref_attention_row_dv(qd, kd, vd, first, end, d, dv, scale, &mods,
                                         (long long)i + (long long)len - (long long)nq, ref, &ref_lse, scratch);
                for (size_t x = 0; x < dv; x++) {
                    const double got = hostref_load(o_rows, c->dtype, q_row * dv + x);
                    const double err = isnan(got) ? INFINITY : fabs(got - ref[x]);
                    ck_assert_msg(err <= atol + rtol * fabs(ref[x]),
                                  "%s: sequence %zu (length %zu) query %zu head %zu O[%zu] = %.9g, reference %.9g "
                                  "(tolerance %.3g)", tile->kernel, b, len, i, h, x, got, ref[x],
                                  atol + rtol * fabs(ref[x]));
                    max_err = fmax(max_err, err);
                }
                const double got_lse = lse[(b * hq + h) * nq + i];  /* [batch, heads_q, seq_q] */
                if (isinf(ref_lse)) {
                    ck_assert_msg(isinf(got_lse) && got_lse < 0, "%s: sequence %zu query %zu head %zu sees no key: "
                                  "LSE %g, expected -inf", tile->kernel, b, i, h, got_lse);
                } else {
                    const double err = fabs(got_lse - ref_lse) / fmax(1.0, fabs(ref_lse));
                    ck_assert_msg(err <= lse_tol, "%s: sequence %zu query %zu head %zu: LSE %.9g, reference %.9g",
                                  tile->kernel, b, i, h, got_lse, ref_lse);
                    max_lse_err = fmax(max_lse_err, err);
                }
            }
        }
    printf("%s (%s), e4m3 kv cache%s, %s Q, B=%d Nq=%d capacity %d Hq=%d Hkv=%d d=%d dv=%zu descale %g/%g: "
           "max|err| %.2e, LSE %.2e\n", tile->kernel, c->options && c->options[0] ? c->options : "default plan",
           c->page_size ? (c->device_table ? ", paged (device table)" : ", paged") : "",
           flashcl_dtype_name(c->dtype), c->batch, c->seq_q, c->capacity, c->heads_q, c->heads_kv, c->head_dim, dv,
           (double)c->descale[0], (double)c->descale[1], max_err, max_lse_err);

    free(kd), free(vd), free(scratch), free(o), free(lse_bytes), free(lse);
    free(q), free(k8), free(v8), free(k), free(v);
    cl_mem all[] = {q_mem, k_mem, v_mem, o_mem, lse_mem, table_mem, len_mem, sink_mem, slope_mem};
    for (size_t i = 0; i < KV8_COUNT(all); i++)
        if (all[i])
            clReleaseMemObject(all[i]);
}
