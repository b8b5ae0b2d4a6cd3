/* Random valid forward calls run for real on the device: tiny shapes, every
 * dtype, masks and windows, random padded layouts (either axis order, gaps,
 * offsets, K and V sometimes in one buffer), with and without the LSE, on
 * contexts that force each FMA kernel (portable, odd portable tiles,
 * register-tiled, split-KV both ways) and now and then the standard path.
 * O and the LSE lie inside larger buffers filled with random guard bytes.
 * After each call: every element of O and the LSE matches the double
 * reference (tools/hostref.c) within the suite's tolerances, every byte of
 * the output buffers outside the views is unchanged, and every byte of the
 * input buffers is unchanged.
 *
 * Standalone: FLASHCL_FUZZ_ITERATIONS=N FLASHCL_FUZZ_SEED=S build/tests/test_fuzz_runs
 * (defaults: 8 runs, seed 1; docs/reliability.md has the long run). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

static int pick(int lo, int hi)
{
    return lo + (int)rng_uniform(0, hi - lo + 1 - 1e-9);
}

static long env_long(const char *name, long fallback)
{
    const char *v = getenv(name);
    return v && *v ? atol(v) : fallback;
}

/* The contexts the runs choose from (NULL: the standard path on the shared context). */
static const char *const kernel_options[] = {
    "tensor-core:off;tf32:off;register-tiled:off",
    "tensor-core:off;tf32:off;register-tiled:off;portable:block_m=5,block_n=3",
    "tensor-core:off;tf32:off",
    "tensor-core:off;tf32:off;register-tiled:splits=3",
    "tensor-core:off;tf32:off;register-tiled:off;portable:splits=4",
    NULL,
};
#define N_CONTEXTS (int)(sizeof(kernel_options) / sizeof(kernel_options[0]))

/* A few head dims and windows only: each is a program to build. */
static const int head_dims[] = {1, 3, 8, 16, 24, 32, 64};
static const int windows[][2] = {{3, 0}, {0, 2}, {5, 5}, {-1, 4}};

/* One tensor in its own buffer: a random padded layout of [count0, count1,
 * count2, dim], either seq-major (BNHD) or head-major (BHND), at an offset,
 * with a tail guard. */
struct fuzz_tensor {
    flashcl_tensor view;
    size_t count[3], dim;  /* batch, seq, head; last dim */
    size_t elems;          /* the buffer's size in elements */
};

static void random_layout(struct fuzz_tensor *t, flashcl_dtype dtype, size_t b, size_t n, size_t h, size_t d,
                          size_t base)
{
    t->count[0] = b;
    t->count[1] = n;
    t->count[2] = h;
    t->dim = d;
    t->view.dtype = dtype;
    const size_t row = d + (size_t)(pick(0, 2) == 0 ? pick(1, 3) : 0);
    if (pick(0, 1)) {  /* BNHD */
        t->view.stride_head = row;
        t->view.stride_seq = h * row + (size_t)pick(0, 2) * (size_t)pick(0, 3);
        t->view.stride_batch = n * t->view.stride_seq + (size_t)pick(0, 5);
    } else {  /* BHND */
        t->view.stride_seq = row;
        t->view.stride_head = n * row + (size_t)pick(0, 2) * (size_t)pick(0, 3);
        t->view.stride_batch = h * t->view.stride_head + (size_t)pick(0, 5);
    }
    const size_t offset = base + (size_t)pick(0, 40);
    t->view.offset = offset * flashcl_dtype_size(dtype);
    t->elems = offset + (b - 1) * t->view.stride_batch + (n - 1) * t->view.stride_seq +
               (h - 1) * t->view.stride_head + d + (size_t)pick(0, 40);
}

static size_t elem_at(const struct fuzz_tensor *t, size_t b, size_t n, size_t h, size_t e)
{
    return t->view.offset / flashcl_dtype_size(t->view.dtype) + b * t->view.stride_batch + n * t->view.stride_seq +
           h * t->view.stride_head + e;
}

static cl_mem upload(struct test_env *e, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, &err);
    ck_assert_msg(m != NULL, "clCreateBuffer(%zu) failed (%d)", bytes, err);
    return m;
}

static unsigned char *read_back(struct test_env *e, cl_mem m, size_t bytes)
{
    unsigned char *h = malloc(bytes);
    ck_assert_ptr_nonnull(h);
    ck_assert_cl(clEnqueueReadBuffer(e->queue, m, CL_TRUE, 0, bytes, h, 0, NULL, NULL));
    return h;
}

struct run_counts {
    long runs, standard, with_lse, split;
    long portable, register_tiled;
};

/* One random call, run and checked; fails the test on any mismatch. */
static void one_run(long it, struct run_counts *counts)
{
    struct test_env *e = test_env_get();
    const int which = pick(0, N_CONTEXTS - 1);
    const bool standard = kernel_options[which] == NULL;
    flashcl_context *ctx = standard ? e->ctx : test_context_with_options(kernel_options[which]);
    const flashcl_dtype dtype = (flashcl_dtype)pick(1, 3);
    const size_t esize = flashcl_dtype_size(dtype);
    const size_t B = (size_t)pick(1, 2), Hk = (size_t)pick(1, 2), Hq = Hk * (size_t)pick(1, 2);
    const size_t d = (size_t)head_dims[pick(0, (int)(sizeof(head_dims) / sizeof(head_dims[0])) - 1)];
    const size_t Nq = (size_t)pick(1, pick(0, 3) == 0 ? 70 : 20), Nk = (size_t)pick(1, pick(0, 2) == 0 ? 130 : 24);
    const int mask_kind = pick(0, 2);
    const int *window = windows[pick(0, (int)(sizeof(windows) / sizeof(windows[0])) - 1)];
    const bool with_lse = pick(0, 1);
    const float scale = pick(0, 2) == 0 ? (float)rng_uniform(-0.6, 0.6) : 0.0f;

    /* Q, K, V (K and V sometimes in one buffer, V after K), O, LSE. */
    struct fuzz_tensor t[4] = {0};
    random_layout(&t[0], dtype, B, Nq, Hq, d, 0);
    random_layout(&t[1], dtype, B, Nk, Hk, d, 0);
    const bool kv_shared = pick(0, 3) == 0;
    random_layout(&t[2], dtype, B, Nk, Hk, d, kv_shared ? t[1].elems : 0);
    random_layout(&t[3], dtype, B, Nq, Hq, d, (size_t)pick(0, 30));
    struct fuzz_tensor lse = {0};
    lse.view = flashcl_tensor_lse(NULL, Nq, Hq);
    lse.count[0] = B;
    lse.count[1] = Nq;
    lse.count[2] = Hq;
    lse.dim = 1;
    lse.view.stride_batch += (size_t)pick(0, 3);
    const size_t lse_offset = (size_t)pick(0, 20);
    lse.view.offset = lse_offset * 4;
    lse.elems = lse_offset + B * lse.view.stride_batch + (size_t)pick(0, 20);

    /* Host images: inputs random values everywhere (gaps too), outputs random bytes. */
    const size_t bytes[5] = {t[0].elems * esize, t[1].elems * esize, t[2].elems * esize, t[3].elems * esize,
                             lse.elems * 4};
    unsigned char *img[5];
    for (int i = 0; i < 5; i++) {
        img[i] = malloc(bytes[i]);
        ck_assert_ptr_nonnull(img[i]);
    }
    for (int i = 0; i < 3; i++)
        for (size_t x = 0; x < t[i].elems; x++)
            hostref_store(img[i], dtype, x, (float)rng_uniform(-1, 1));
    for (int i = 3; i < 5; i++)
        for (size_t x = 0; x < bytes[i]; x++)
            img[i][x] = (unsigned char)pick(0, 255);
    if (kv_shared)  /* V's buffer holds K's image below V */
        memcpy(img[2], img[1], bytes[1]);

    struct flashcl_attention a = {0};
    a.batch = (int)B;
    a.seq_q = (int)Nq;
    a.seq_kv = (int)Nk;
    a.heads_q = (int)Hq;
    a.heads_kv = (int)Hk;
    a.head_dim = (int)d;
    a.scale = scale;
    a.mask = mask_kind == 2 ? FLASHCL_MASK_WINDOW : mask_kind == 1 ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    if (a.mask == FLASHCL_MASK_WINDOW) {
        a.window_left = window[0];
        a.window_right = window[1];
    }
    cl_mem mem[5];
    mem[0] = upload(e, img[0], bytes[0]);
    mem[2] = upload(e, img[2], bytes[2]);
    mem[1] = kv_shared ? mem[2] : upload(e, img[1], bytes[1]);
    mem[3] = upload(e, img[3], bytes[3]);
    mem[4] = upload(e, img[4], bytes[4]);
    a.q = t[0].view;
    a.q.mem = mem[0];
    a.k = t[1].view;
    a.k.mem = mem[1];
    a.v = t[2].view;
    a.v.mem = mem[2];
    a.o = t[3].view;
    a.o.mem = mem[3];
    if (with_lse) {
        a.lse = lse.view;
        a.lse.mem = mem[4];
    }

    struct flashcl_tile tile;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &tile));
    if (standard)
        ck_assert_flashcl_ok(flashcl_standard_forward(ctx, &a, NULL, e->queue, 0, NULL, NULL));
    else
        ck_assert_flashcl_ok(flashcl_forward(ctx, &a, e->queue, 0, NULL, NULL));
    unsigned char *out[5];
    for (int i = 0; i < 5; i++)
        out[i] = i == 1 && kv_shared ? NULL : read_back(e, mem[i], bytes[i]);

    /* The reference, row by row, from the stored inputs. */
    double atol, rtol, lse_tol;
    const char *const variant = standard ? "portable" : tile.kernel;
    test_tolerance(dtype, variant, FLASHCL_PRECISION_EXACT, &atol, &rtol, &lse_tol);
    unsigned char *in_o = calloc(bytes[3], 1), *in_lse = calloc(bytes[4], 1);
    double *qd = malloc(d * sizeof(double)), *kd = malloc(Nk * d * sizeof(double));
    double *vd = malloc(Nk * d * sizeof(double)), *ref = malloc(d * sizeof(double));
    double *scratch = malloc(Nk * sizeof(double));
    ck_assert(in_o && in_lse && qd && kd && vd && ref && scratch);
    const double s = scale != 0.0f ? (double)scale : 1.0 / sqrt((double)d);
    int left, right;
    test_case_window(mask_kind == 1, mask_kind == 2, window[0], window[1], &left, &right);
    const unsigned char *k_img = kv_shared ? img[2] : img[1];
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            const size_t hk = h / (Hq / Hk);
            for (size_t n = 0; n < Nk; n++)
                for (size_t x = 0; x < d; x++) {
                    kd[n * d + x] = hostref_load(k_img, dtype, elem_at(&t[1], b, n, hk, x));
                    vd[n * d + x] = hostref_load(img[2], dtype, elem_at(&t[2], b, n, hk, x));
                }
            for (size_t n = 0; n < Nq; n++) {
                for (size_t x = 0; x < d; x++)
                    qd[x] = hostref_load(img[0], dtype, elem_at(&t[0], b, n, h, x));
                size_t first, end;
                hostref_visible_keys(n, Nq, Nk, left, right, &first, &end);
                double ref_lse;
                hostref_attention_row_range(qd, kd, vd, first, end, d, s, ref, &ref_lse, scratch);
                for (size_t x = 0; x < d; x++) {
                    const size_t idx = elem_at(&t[3], b, n, h, x);
                    memset(in_o + idx * esize, 1, esize);
                    const double got = hostref_load(out[3], dtype, idx);
                    ck_assert_msg(fabs(got - ref[x]) <= atol + rtol * fabs(ref[x]),
                                  "run %ld (%s, %s, d %zu, %zu/%zu rows, mask %d): O[%zu][%zu][%zu][%zu] = %.9g, "
                                  "reference %.9g", it, standard ? "standard" : kernel_options[which],
                                  flashcl_dtype_name(dtype), d, Nq, Nk, mask_kind, b, n, h, x, got, ref[x]);
                }
                if (with_lse) {
                    const size_t idx = elem_at(&lse, b, n, h, 0);
                    memset(in_lse + idx * 4, 1, 4);
                    float got;
                    memcpy(&got, out[4] + idx * 4, 4);
                    if (isinf(ref_lse))
                        ck_assert_msg(isinf(got) && got < 0, "run %ld: LSE %g, expected -inf", it, got);
                    else
                        ck_assert_msg(fabs(got - ref_lse) <= lse_tol * fmax(1.0, fabs(ref_lse)),
                                      "run %ld: LSE %.9g, reference %.9g", it, got, ref_lse);
                }
            }
        }
    /* Every other byte: inputs whole, outputs outside their views. */
    for (int i = 0; i < 3; i++)
        if (out[i])
            ck_assert_msg(memcmp(out[i], img[i], bytes[i]) == 0, "run %ld: input buffer %d was written", it, i);
    for (size_t x = 0; x < bytes[3]; x++)
        ck_assert_msg(in_o[x] || out[3][x] == img[3][x], "run %ld: O's buffer byte %zu outside the view changed",
                      it, x);
    for (size_t x = 0; x < bytes[4]; x++)
        ck_assert_msg(in_lse[x] || out[4][x] == img[4][x],
                      "run %ld: the LSE buffer's byte %zu outside the view changed (LSE %s)", it, x,
                      with_lse ? "given" : "not given");

    counts->runs++;
    counts->standard += standard;
    counts->with_lse += with_lse;
    counts->split += tile.splits > 1 && !standard;
    counts->portable += !standard && kernel_is(tile.kernel, "portable");
    counts->register_tiled += !standard && kernel_is(tile.kernel, "register-tiled");
    for (int i = 0; i < 5; i++) {
        if (!(i == 1 && kv_shared))
            clReleaseMemObject(mem[i]);
        free(img[i]);
        free(out[i]);
    }
    free(in_o);
    free(in_lse);
    free(qd);
    free(kd);
    free(vd);
    free(ref);
    free(scratch);
}

START_TEST(random_calls_exact_and_contained)
{
    const long iterations = env_long("FLASHCL_FUZZ_ITERATIONS", 8);
    const long seed = env_long("FLASHCL_FUZZ_SEED", 1);
    rng_seed((uint64_t)seed);
    struct run_counts counts = {0};
    const time_t start = time(NULL);
    for (long it = 0; it < iterations; it++) {
        one_run(it, &counts);
        if (iterations >= 1000 && (it + 1) % 1000 == 0) {
            printf("  %ld runs, %ld s\n", it + 1, (long)(time(NULL) - start));
            fflush(stdout);
        }
    }
    printf("real-run fuzz: %ld runs (seed %ld) in %ld s: %ld standard, %ld split-KV, %ld with LSE; portable %ld, "
           "register-tiled %ld; 0 wrong, 0 bytes changed outside the outputs\n", counts.runs, seed,
           (long)(time(NULL) - start), counts.standard, counts.split, counts.with_lse,
           counts.portable, counts.register_tiled);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fuzz_runs");
    TCase *tc = tcase_create("real runs");
    tcase_set_timeout(tc, 86400);  /* long runs; meson's timeout bounds the short one */
    tcase_add_test(tc, random_calls_exact_and_contained);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
