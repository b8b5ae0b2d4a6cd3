/* Standard attention through CLBlast: the same function as the flash
 * forward (checked against the double reference and against flash itself),
 * its workspace contract, and the clear out-of-memory status. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "internal.h"

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

/* batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, lse, standard */
static const struct test_case cases[] = {
    {2, 64, 64, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1, 1},
    {1, 37, 131, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1, 1},   /* causal, Nq < Nk: bottom-right */
    {1, 131, 37, 2, 2, 32, F32, 1, 0, LAYOUT_BHND, 1, 1},   /* causal, Nq > Nk: rows with no key */
    {2, 60, 75, 8, 2, 16, F32, 1, 0, LAYOUT_BNHD, 1, 1},    /* GQA 4:1 */
    {2, 50, 70, 4, 1, 80, F32, 0, 0.3f, LAYOUT_PADDED, 1, 1}, /* MQA, strided, explicit scale */
    {1, 1, 1, 1, 1, 1, F32, 0, 0, LAYOUT_BNHD, 1, 1},
    {1, 48, 48, 3, 3, 128, F16, 1, 0, LAYOUT_FUSED_QKV, 1, 1},
    {2, 33, 65, 2, 1, 256, BF16, 0, 0, LAYOUT_PADDED, 0, 1},
};

START_TEST(against_reference)
{
    struct case_result r;
    rng_seed((uint64_t)_i + 1);
    test_run_case(NULL, &cases[_i], &r);
    printf("standard case %d: max|err| %.2e, rel L2 %.2e, LSE %.2e\n", _i, r.max_abs_err, r.rel_l2_err,
           r.max_lse_err);
}
END_TEST

static cl_mem buffer_from(struct test_env *e, size_t bytes, const void *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    ck_assert_msg(m != NULL, "clCreateBuffer failed (%d)", err);
    return m;
}

/* A small f32 problem with both paths on the same buffers. */
struct pair {
    struct flashcl_attention a;
    cl_mem q, k, v, o_flash, o_std;
    size_t elems;
};

static void pair_create(struct pair *p, int n, int h, int d, int causal)
{
    struct test_env *e = test_env_get();
    p->elems = (size_t)n * (size_t)h * (size_t)d;
    float *host = malloc(p->elems * sizeof(float));
    ck_assert_ptr_nonnull(host);
    cl_mem *in[3] = {&p->q, &p->k, &p->v};
    for (int t = 0; t < 3; t++) {
        for (size_t i = 0; i < p->elems; i++)
            host[i] = (float)rng_uniform(-1, 1);
        *in[t] = buffer_from(e, p->elems * sizeof(float), host);
    }
    memset(host, 0xff, p->elems * sizeof(float));
    p->o_flash = buffer_from(e, p->elems * sizeof(float), host);
    p->o_std = buffer_from(e, p->elems * sizeof(float), host);
    free(host);
    memset(&p->a, 0, sizeof(p->a));
    p->a.batch = 1;
    p->a.seq_q = p->a.seq_kv = n;
    p->a.heads_q = p->a.heads_kv = h;
    p->a.head_dim = d;
    p->a.q = flashcl_tensor_bnhd(p->q, F32, (size_t)n, (size_t)h, (size_t)d);
    p->a.k = flashcl_tensor_bnhd(p->k, F32, (size_t)n, (size_t)h, (size_t)d);
    p->a.v = flashcl_tensor_bnhd(p->v, F32, (size_t)n, (size_t)h, (size_t)d);
    p->a.o = flashcl_tensor_bnhd(p->o_std, F32, (size_t)n, (size_t)h, (size_t)d);
    p->a.mask = causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
}

static void pair_release(struct pair *p)
{
    clReleaseMemObject(p->q);
    clReleaseMemObject(p->k);
    clReleaseMemObject(p->v);
    clReleaseMemObject(p->o_flash);
    clReleaseMemObject(p->o_std);
}

/* The chunked GEMMs (sub-buffers of whole entries), which real sizes take
 * past 2^31 elements, forced here on small problems with a tiny limit. */
START_TEST(chunked_gemms)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    const struct fcl_test_hooks hooks = {.gemm_limit = 20000};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
    const struct test_case c[] = {
        {3, 50, 70, 8, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1, 1},   /* 6 entries of 4x50 rows */
        {2, 33, 65, 2, 2, 64, F16, 0, 0, LAYOUT_BHND, 1, 1},
    };
    for (int i = 0; i < 2; i++) {
        struct case_result r;
        rng_seed(20 + (uint64_t)i);
        test_run_case(ctx, &c[i], &r);
        printf("standard chunked case %d: max|err| %.2e\n", i, r.max_abs_err);
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

/* The outside probe's case: a legal broadcast (all-zero strides) of batch
 * 1,433,294,617 x 1,072,514,048 keys at d = 1. Its workspace (~1.8e19
 * bytes) wraps size_t when summed; it must be refused, not under-sized.
 * The sizes alone are planned (no 2.9 GB buffer needed). */
START_TEST(workspace_size_cannot_wrap)
{
    struct flashcl_attention a = {0};
    a.batch = 1433294617;
    a.seq_q = 1;
    a.seq_kv = 1072514048;
    a.heads_q = a.heads_kv = 1;
    a.head_dim = 1;
    size_t bytes = 12345;
    ck_assert_status(fcl_standard_workspace_bytes(test_env_get()->ctx, &a, &bytes), FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
    ck_assert_uint_eq(bytes, 12345);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "overflows"));
    a.batch = 2;  /* a sane size still plans */
    a.seq_kv = 100;
    ck_assert_flashcl_ok(fcl_standard_workspace_bytes(test_env_get()->ctx, &a, &bytes));
    ck_assert_uint_ge(bytes, 2 * 100 * sizeof(float));
}
END_TEST

START_TEST(agrees_with_flash)
{
    struct test_env *e = test_env_get();
    struct pair p;
    rng_seed(7);
    pair_create(&p, 200, 3, 64, 1);
    ck_assert_flashcl_ok(flashcl_standard_forward(e->ctx, &p.a, NULL, e->queue, 0, NULL, NULL));
    struct flashcl_attention af = p.a;
    af.o.mem = p.o_flash;
    ck_assert_flashcl_ok(flashcl_forward(e->ctx, &af, e->queue, 0, NULL, NULL));
    float *a = malloc(p.elems * sizeof(float)), *b = malloc(p.elems * sizeof(float));
    ck_assert(a && b);
    ck_assert_cl(clEnqueueReadBuffer(e->queue, p.o_std, CL_TRUE, 0, p.elems * sizeof(float), a, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, p.o_flash, CL_TRUE, 0, p.elems * sizeof(float), b, 0, NULL, NULL));
    double max = 0;
    for (size_t i = 0; i < p.elems; i++) {
        const double diff = fabs((double)a[i] - b[i]);
        ck_assert_msg(diff <= 1e-5, "O[%zu]: standard %.9g, flash %.9g", i, a[i], b[i]);
        max = fmax(max, diff);
    }
    printf("standard vs flash: max |difference| %.2e\n", max);
    free(a);
    free(b);
    pair_release(&p);
}
END_TEST

START_TEST(workspace_contract)
{
    struct test_env *e = test_env_get();
    struct pair p;
    rng_seed(8);
    pair_create(&p, 40, 2, 16, 0);
    size_t bytes = 0;
    ck_assert_flashcl_ok(flashcl_standard_workspace_size(e->ctx, &p.a, &bytes));
    /* Packed Q (reused for O), K, V in f32, and the 40x40 scores of each of
     * the 2 heads, each head's entry padded to the sub-buffer alignment. */
    cl_uint align_bits = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(align_bits), &align_bits, NULL));
    const size_t align = (align_bits / 8 > 512 ? align_bits / 8 : 512) / 4;
    const size_t qkv_entry = (40 * 16 + align - 1) / align * align, s_entry = (40 * 40 + align - 1) / align * align;
    ck_assert_uint_eq(bytes, 4 * 2 * (3 * qkv_entry + s_entry));

    cl_mem small = buffer_from(e, bytes - 4, NULL);
    ck_assert_status(flashcl_standard_forward(e->ctx, &p.a, small, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_OUT_OF_BOUNDS);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "workspace"));
    clReleaseMemObject(small);

    cl_mem ws = buffer_from(e, bytes, NULL);
    ck_assert_flashcl_ok(flashcl_standard_forward(e->ctx, &p.a, ws, e->queue, 0, NULL, NULL));
    float out[40 * 2 * 16];
    ck_assert_cl(clEnqueueReadBuffer(e->queue, p.o_std, CL_TRUE, 0, sizeof(out), out, 0, NULL, NULL));
    for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
        ck_assert_msg(isfinite(out[i]) && fabsf(out[i]) <= 1.0f, "O[%zu] = %g", i, out[i]);
    clReleaseMemObject(ws);
    ck_assert_status(flashcl_standard_workspace_size(e->ctx, &p.a, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    pair_release(&p);
}
END_TEST

START_TEST(out_of_device_memory)
{
    /* 2^20 one-dimensional queries and keys: 4 MiB of inputs, 4 TiB of scores. */
    struct test_env *e = test_env_get();
    const int n = 1 << 20;
    struct pair p;
    rng_seed(9);
    pair_create(&p, n, 1, 1, 0);
    size_t bytes = 0;
    ck_assert_flashcl_ok(flashcl_standard_workspace_size(e->ctx, &p.a, &bytes));
    ck_assert_uint_ge(bytes, (size_t)4 << 40);
    ck_assert_status(flashcl_standard_forward(e->ctx, &p.a, NULL, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "4096.01 GiB"));
    /* Nothing was written; the flash path runs the same problem in O(N) memory. */
    float first[4];
    ck_assert_cl(clEnqueueReadBuffer(e->queue, p.o_std, CL_TRUE, 0, sizeof(first), first, 0, NULL, NULL));
    ck_assert(isnan(first[0]) && isnan(first[3]));
    pair_release(&p);
}
END_TEST

START_TEST(needs_in_order_queue)
{
    struct test_env *e = test_env_get();
    cl_int err;
    cl_command_queue ooo = clCreateCommandQueue(e->cl, e->device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (!ooo) {
        ck_assert_int_eq(err, CL_INVALID_QUEUE_PROPERTIES);  /* the device has no such queues */
        return;
    }
    struct pair p;
    rng_seed(10);
    pair_create(&p, 8, 1, 8, 0);
    ck_assert_status(flashcl_standard_forward(e->ctx, &p.a, NULL, ooo, 0, NULL, NULL),
                     FLASHCL_INVALID_COMMAND_QUEUE);
    clReleaseCommandQueue(ooo);
    pair_release(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("standard");
    TCase *tc = tcase_create("standard attention");
    tcase_set_timeout(tc, 1200);
    tcase_add_loop_test(tc, against_reference, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, chunked_gemms);
    tcase_add_test(tc, workspace_size_cannot_wrap);
    tcase_add_test(tc, agrees_with_flash);
    tcase_add_test(tc, workspace_contract);
    tcase_add_test(tc, out_of_device_memory);
    tcase_add_test(tc, needs_in_order_queue);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
