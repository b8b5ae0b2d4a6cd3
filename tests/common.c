#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "test_hooks.h"

/* ---- environment ---- */

static struct test_env env;

struct test_env *test_env_get(void)
{
    if (env.ctx)
        return &env;
    ck_assert_flashcl_ok(flashcl_context_create(NULL, &env.ctx));
    env.cl = flashcl_context_cl_context(env.ctx);
    env.device = flashcl_context_device(env.ctx);
    cl_int err;
    env.queue = clCreateCommandQueue(env.cl, env.device, CL_QUEUE_PROFILING_ENABLE, &err);
    ck_assert_msg(env.queue != NULL, "clCreateCommandQueue failed (%d)", err);
    return &env;
}

/* The FMA forward kernels' tile forced (0: that axis automatic): both
 * kernels get it where register-tiled runs that size (16..128 in steps of
 * 16), else register-tiled is off; the decode kernels, which would take
 * decode-shaped calls first, are off. */
flashcl_context *test_context_with_blocks(int block_m, int block_n)
{
    char tile[64] = "";
    if (block_m)
        snprintf(tile, sizeof(tile), "block_m=%d", block_m);
    if (block_n)
        snprintf(tile + strlen(tile), sizeof(tile) - strlen(tile), "%sblock_n=%d", block_m ? "," : "", block_n);
    const bool tiled_runs = (!block_m || (block_m % 16 == 0 && block_m <= 128)) &&
                            (!block_n || (block_n % 16 == 0 && block_n <= 128));
    char options[256];
    snprintf(options, sizeof(options), "decode:off;decode-tensor-core:off;portable:%s;register-tiled:%s",
             tile[0] ? tile : "on", tiled_runs && tile[0] ? tile : tiled_runs ? "on" : "off");
    return test_context_with_options(options);
}

flashcl_status test_fma_tile(flashcl_context *ctx, int head_dim, flashcl_dtype dtype, struct flashcl_tile *out)
{
    const size_t esize = flashcl_dtype_size(dtype ? dtype : FLASHCL_F32);
    const size_t rows = 64, d = head_dim > 0 ? (size_t)head_dim : 1;
    cl_int err;
    /* One element past each view's start: rows off 16 bytes keep the tensor cores out. */
    const size_t bytes = (rows * d + 1) * esize;
    cl_mem in = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    ck_assert_cl(err);
    cl_mem out_mem = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    ck_assert_cl(err);
    struct flashcl_attention a = {0};
    a.batch = 1;
    a.seq_q = a.seq_kv = (int)rows;
    a.heads_q = a.heads_kv = 1;
    a.head_dim = head_dim;
    a.q = flashcl_tensor_bnhd(in, dtype, rows, 1, d);
    a.q.offset = esize;
    a.k = a.v = a.q;
    a.o = a.q;
    a.o.mem = out_mem;
    const flashcl_status st = flashcl_forward_config(ctx, &a, out);
    clReleaseMemObject(in);
    clReleaseMemObject(out_mem);
    return st;
}

#define MAX_OPTIONED 64  /* the tuning suite alone builds more than 16 forced plans on an H200 */
static struct {
    char options[256];
    flashcl_context *ctx;
} optioned[MAX_OPTIONED];
static int n_optioned;

cl_command_queue test_second_queue(bool *out_of_order)
{
    struct test_env *e = test_env_get();
    cl_command_queue_properties supported = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_QUEUE_PROPERTIES, sizeof(supported), &supported, NULL));
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(e->cl, e->device, supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE,
                                                  &err);
    ck_assert_ptr_nonnull(queue);
    *out_of_order = (supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) != 0;
    return queue;
}

flashcl_context *test_context_with_options(const char *kernel_options)
{
    struct test_env *e = test_env_get();
    for (int i = 0; i < n_optioned; i++)
        if (strcmp(optioned[i].options, kernel_options) == 0)
            return optioned[i].ctx;
    ck_assert_int_lt(n_optioned, MAX_OPTIONED);
    struct flashcl_context_params params = {0};
    params.context = e->cl;
    params.device = e->device;
    params.kernel_options = kernel_options;
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&params, &ctx));
    snprintf(optioned[n_optioned].options, sizeof(optioned[n_optioned].options), "%s", kernel_options);
    optioned[n_optioned++].ctx = ctx;
    return ctx;
}

flashcl_context *test_emulated_context(const char *kernel_options, int cc, bool wgmma)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params params = {0};
    params.context = e->cl;
    params.device = e->device;
    params.kernel_options = kernel_options;
    params.tuning_file = "";
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .emulate_tensor_cores = true,
                                         .assume_wgmma = wgmma, .assume_compute_capability = cc};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&params, &hooks, &ctx));
    return ctx;
}

flashcl_context *test_context_built_with(const char *kernel_options, const char *build_options, int cc, bool wgmma)
{
    const char *was = getenv("FLASHCL_BUILD_OPTIONS");
    char *saved = was ? strdup(was) : NULL;
    char joined[512];
    const int n = snprintf(joined, sizeof(joined), "%s %s", saved ? saved : "", build_options);
    ck_assert(n > 0 && (size_t)n < sizeof(joined));
    setenv("FLASHCL_BUILD_OPTIONS", joined, 1);
    flashcl_context *ctx = NULL;
    if (cc) {
        ctx = test_emulated_context(kernel_options, cc, wgmma);
    } else {
        struct test_env *e = test_env_get();
        struct flashcl_context_params params = {0};
        params.context = e->cl;
        params.device = e->device;
        params.kernel_options = kernel_options;
        ck_assert_flashcl_ok(flashcl_context_create(&params, &ctx));
    }
    if (saved)
        setenv("FLASHCL_BUILD_OPTIONS", saved, 1);
    else
        unsetenv("FLASHCL_BUILD_OPTIONS");
    free(saved);
    return ctx;
}

bool test_local_mem_holds(const flashcl_context *ctx, int kb, const char *what)
{
    const size_t usable = flashcl_context_local_mem_bytes(ctx);
    if (usable >= (size_t)kb * 1024)
        return true;
    printf("%s: skipped (%zu bytes of local memory, %d KB needed)\n", what, usable, kb);
    return false;
}

void test_case_window(int causal, int windowed, int window_left, int window_right, int *left, int *right)
{
    *left = windowed ? window_left : -1;
    *right = windowed ? window_right : causal ? 0 : -1;
}

void test_record_warnings(void *user, enum flashcl_log_level level, const char *message)
{
    struct test_warn_log *w = user;
    if (level == FLASHCL_LOG_WARN) {
        w->warnings++;
        snprintf(w->last, sizeof(w->last), "%s", message);
    }
}

int test_run_suite(Suite *s)
{
    SRunner *runner = srunner_create(s);
    /* No fork: OpenCL state does not survive fork(), and one process keeps
     * the built kernels for every test. */
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    for (int i = 0; i < n_optioned; i++)
        flashcl_context_destroy(&optioned[i].ctx);
    if (env.queue)
        clReleaseCommandQueue(env.queue);
    flashcl_context_destroy(&env.ctx);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* ---- tensors on the host ---- */

/* A host image of one cl_mem and the view of a tensor inside it. */
struct host_tensor {
    flashcl_tensor view;
    size_t count[3], dim;
};

static size_t elem_index(const struct host_tensor *t, size_t b, size_t n, size_t h, size_t e)
{
    return t->view.offset / flashcl_dtype_size(t->view.dtype) + b * t->view.stride_batch +
           n * t->view.stride_seq + h * t->view.stride_head + e;
}

void test_tolerance(flashcl_dtype dtype, const char *variant, enum flashcl_precision precision,
                    double *atol, double *rtol, double *lse_tol)
{
    *atol = 2e-6;
    *lse_tol = 2e-5;  /* times max(1, |LSE|) */
    if (kernel_is(variant, "tf32") && precision == FLASHCL_PRECISION_TF32) {
        /* Scores from operands rounded to 10 mantissa bits (2^-11 = 4.9e-4
         * relative each), summed over d terms; P and V rounded the same way. */
        *atol = 4e-3;
        *rtol = 4e-3;
        *lse_tol = 4e-3;
        return;
    }
    if (kernel_is(variant, "tf32")) {
        /* 3xTF32: operands carry about 21 bits (2^-22 relative per part). */
        *atol = 2e-5;
        *rtol = 1e-4;
        *lse_tol = 1e-4;
        return;
    }
    if (kernel_is(variant, "tensor-core") || kernel_is(variant, "decode-tensor-core") ||
        kernel_is(variant, "tensor-core-wgmma")) {
        /* P is rounded to the storage type for the P·V mma: 2 x half an ulp x max|v|. */
        *atol = dtype == FLASHCL_F16 ? 1e-3 : 8e-3;
        *rtol = dtype == FLASHCL_F16 ? 1.2e-3 : 8e-3;
        return;
    }
    switch (dtype) {
    case FLASHCL_F32:
        *rtol = 2e-5;   /* f32 accumulation over <= 256 terms per dot and per row block */
        break;
    case FLASHCL_F16:
        *rtol = 1.2e-3; /* half an ulp of f16 (2^-11 = 4.9e-4) plus f32 arithmetic */
        break;
    default:
        *rtol = 8e-3;   /* half an ulp of bf16 (2^-8 = 3.9e-3) plus f32 arithmetic */
        break;
    }
}

void test_fused_view(enum test_layout layout, flashcl_dtype dtype, size_t seq, size_t heads, size_t dim, int slice,
                     flashcl_tensor *out)
{
    flashcl_tensor t = {0};
    t.dtype = dtype;
    const bool per_head = layout == LAYOUT_FUSED_QKV_HEADS;
    t.stride_head = per_head ? 3 * dim : dim;
    t.stride_seq = 3 * heads * dim;
    t.stride_batch = seq * 3 * heads * dim;
    t.offset = (size_t)slice * (per_head ? dim : heads * dim) * flashcl_dtype_size(dtype);
    *out = t;
}

/* Sets the views of Q, K, V, O for a layout; returns each buffer's size in elements. */
static void make_layout(const struct test_case *c, struct host_tensor *q, struct host_tensor *k,
                        struct host_tensor *v, struct host_tensor *o, size_t sizes[4])
{
    const size_t B = (size_t)c->batch, Nq = (size_t)c->seq_q, Nk = (size_t)c->seq_kv;
    const size_t Hq = (size_t)c->heads_q, Hk = (size_t)c->heads_kv, d = (size_t)c->head_dim;
    const size_t esize = flashcl_dtype_size(c->dtype);
    struct host_tensor *all[4] = {q, k, v, o};
    const size_t ns[4] = {Nq, Nk, Nk, Nq}, hs[4] = {Hq, Hk, Hk, Hq};
    for (int i = 0; i < 4; i++) {
        struct host_tensor *t = all[i];
        memset(t, 0, sizeof(*t));
        t->count[0] = B;
        t->count[1] = ns[i];
        t->count[2] = hs[i];
        t->dim = d;
        t->view.dtype = c->dtype;
        switch (c->layout) {
        case LAYOUT_BHND:
            t->view = flashcl_tensor_bhnd(NULL, c->dtype, ns[i], hs[i], d);
            sizes[i] = B * hs[i] * ns[i] * d;
            break;
        case LAYOUT_PADDED:
            t->view.stride_head = d + 3;
            t->view.stride_seq = hs[i] * (d + 3) + 5;
            t->view.stride_batch = ns[i] * t->view.stride_seq + 7;
            t->view.offset = 9 * esize;
            sizes[i] = 9 + B * t->view.stride_batch + 11;
            break;
        case LAYOUT_FUSED_QKV:
        case LAYOUT_FUSED_QKV_HEADS:
            if (i < 3) {  /* [B, N, 3, H, d] or [B, N, H, 3, d] with H = heads_q = heads_kv */
                test_fused_view(c->layout, c->dtype, Nq, Hq, d, i, &t->view);
                sizes[i] = B * Nq * 3 * Hq * d;
                break;
            }
            /* O is a plain [B, N, H, d] buffer */
            /* fall through */
        case LAYOUT_BNHD:
            t->view = flashcl_tensor_bnhd(NULL, c->dtype, ns[i], hs[i], d);
            sizes[i] = B * ns[i] * hs[i] * d;
            break;
        }
    }
}

static cl_mem upload(struct test_env *e, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, &err);
    ck_assert_msg(mem != NULL, "clCreateBuffer(%zu bytes) failed (%d)", bytes, err);
    return mem;
}

void test_make_sinks(int heads, int seq_kv, double *sinks, cl_mem *mem)
{
    float *img = malloc((size_t)(heads + 4) * sizeof(float));
    ck_assert_ptr_nonnull(img);
    for (int i = 0; i < 4; i++)
        img[i] = NAN;
    for (int h = 0; h < heads; h++) {
        const float sink = h == heads - 1 && heads > 1 ? -INFINITY
                                                       : (float)(log(seq_kv + 1.0) + rng_uniform(-1.0, 1.0));
        img[4 + h] = sink;
        sinks[h] = (double)sink;
    }
    *mem = upload(test_env_get(), img, (size_t)(heads + 4) * sizeof(float));
    free(img);
}

void test_make_alibi_slopes(int heads, double *slopes, cl_mem *mem)
{
    float *img = malloc((size_t)(heads + 4) * sizeof(float));
    ck_assert_ptr_nonnull(img);
    for (int i = 0; i < 4; i++)
        img[i] = NAN;
    for (int h = 0; h < heads; h++) {
        const float slope = h == heads - 1 && heads > 1 ? 0.0f
                                                        : (float)(exp2(-8.0 * (h + 1) / heads) * rng_uniform(0.5, 1.5));
        img[4 + h] = slope;
        slopes[h] = (double)slope;
    }
    *mem = upload(test_env_get(), img, (size_t)(heads + 4) * sizeof(float));
    free(img);
}

void test_run_case(flashcl_context *ctx, const struct test_case *c, struct case_result *result)
{
    struct test_env *e = test_env_get();
    if (!ctx)
        ctx = e->ctx;
    const size_t esize = flashcl_dtype_size(c->dtype);
    const size_t B = (size_t)c->batch, Nq = (size_t)c->seq_q, Nk = (size_t)c->seq_kv;
    const size_t Hq = (size_t)c->heads_q, Hk = (size_t)c->heads_kv, d = (size_t)c->head_dim;
    const size_t group = Hq / Hk;

    struct host_tensor t[4] = {0};
    size_t sizes[4];
    make_layout(c, &t[0], &t[1], &t[2], &t[3], sizes);
    const int fused = c->layout == LAYOUT_FUSED_QKV || c->layout == LAYOUT_FUSED_QKV_HEADS;

    /* Host images: random inputs (also in the gaps, which must not be read
     * into results), poisoned outputs (0xFF bytes: NaN in every dtype). */
    unsigned char *img[4];
    for (int i = 0; i < 4; i++) {
        img[i] = malloc(sizes[i] * esize);
        ck_assert_ptr_nonnull(img[i]);
    }
    for (int i = 0; i < 3; i++) {
        if (fused && i > 0)
            break;
        for (size_t x = 0; x < sizes[i]; x++)
            hostref_store(img[i], c->dtype, x, (float)rng_uniform(-1.0, 1.0));
    }
    memset(img[3], 0xff, sizes[3] * esize);

    double *sinks = malloc(Hq * sizeof(double));
    ck_assert_ptr_nonnull(sinks);
    cl_mem sink_mem = NULL;
    for (size_t h = 0; h < Hq; h++)
        sinks[h] = -INFINITY;
    if (c->sinks)
        test_make_sinks(c->heads_q, c->seq_kv, sinks, &sink_mem);
    double *slopes = calloc(Hq, sizeof(double));
    ck_assert_ptr_nonnull(slopes);
    cl_mem slope_mem = NULL;
    if (c->alibi)
        test_make_alibi_slopes(c->heads_q, slopes, &slope_mem);

    /* The reference reads the stored (rounded) inputs back per (b, head). */
    double *qd = malloc(Nq * d * sizeof(double)), *kd = malloc(Nk * d * sizeof(double));
    double *vd = malloc(Nk * d * sizeof(double)), *scores = malloc(Nk * sizeof(double));
    double *ref = malloc(B * Hq * Nq * d * sizeof(double)), *ref_lse = malloc(B * Hq * Nq * sizeof(double));
    ck_assert(qd && kd && vd && scores && ref && ref_lse);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            const unsigned char *src[3] = {img[0], fused ? img[0] : img[1], fused ? img[0] : img[2]};
            for (size_t n = 0; n < Nq; n++)
                for (size_t x = 0; x < d; x++)
                    qd[n * d + x] = hostref_load(src[0], c->dtype, elem_index(&t[0], b, n, h, x));
            for (size_t n = 0; n < Nk; n++)
                for (size_t x = 0; x < d; x++) {
                    kd[n * d + x] = hostref_load(src[1], c->dtype, elem_index(&t[1], b, n, h / group, x));
                    vd[n * d + x] = hostref_load(src[2], c->dtype, elem_index(&t[2], b, n, h / group, x));
                }
            const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)d);
            for (size_t n = 0; n < Nq; n++) {
                const size_t row = (b * Hq + h) * Nq + n;
                /* Aligned bottom-right: causal is a window of (-1, 0) around j = n + Nk - Nq. */
                int left, right;
                test_case_window(c->causal, c->windowed, c->window_left, c->window_right, &left, &right);
                size_t first, end;
                hostref_visible_keys(n, Nq, Nk, left, right, &first, &end);
                const struct hostref_mods mods = {c->softcap, sinks[h], slopes[h]};
                hostref_attention_row_mods(&qd[n * d], kd, vd, first, end, d, scale, &mods,
                                           (long long)n + (long long)Nk - (long long)Nq, &ref[row * d],
                                           &ref_lse[row], scores);
            }
        }

    cl_mem mem[4];
    mem[0] = upload(e, img[0], sizes[0] * esize);
    mem[1] = fused ? mem[0] : upload(e, img[1], sizes[1] * esize);
    mem[2] = fused ? mem[0] : upload(e, img[2], sizes[2] * esize);
    mem[3] = upload(e, img[3], sizes[3] * esize);
    float *lse_host = NULL;
    cl_mem lse_mem = NULL;
    if (c->with_lse) {
        lse_host = malloc(B * Hq * Nq * sizeof(float));
        ck_assert_ptr_nonnull(lse_host);
        memset(lse_host, 0xff, B * Hq * Nq * sizeof(float));
        lse_mem = upload(e, lse_host, B * Hq * Nq * sizeof(float));
    }

    struct flashcl_attention a = {0};
    a.batch = c->batch;
    a.seq_q = c->seq_q;
    a.seq_kv = c->seq_kv;
    a.heads_q = c->heads_q;
    a.heads_kv = c->heads_kv;
    a.head_dim = c->head_dim;
    a.q = t[0].view;
    a.k = t[1].view;
    a.v = t[2].view;
    a.o = t[3].view;
    a.q.mem = mem[0];
    a.k.mem = mem[1];
    a.v.mem = mem[2];
    a.o.mem = mem[3];
    if (c->with_lse)
        a.lse = flashcl_tensor_lse(lse_mem, Nq, Hq);
    a.scale = c->scale;
    a.mask = c->windowed ? FLASHCL_MASK_WINDOW : c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    if (c->windowed) {
        a.window_left = c->window_left;
        a.window_right = c->window_right;
    }
    a.precision = c->precision;
    a.softcap = c->softcap;
    if (c->sinks)
        a.sinks = (flashcl_vector){sink_mem, 4 * sizeof(float)};
    if (c->alibi)
        a.alibi_slopes = (flashcl_vector){slope_mem, 4 * sizeof(float)};

    struct flashcl_tile config;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &config));
    const char *const variant = c->standard ? "portable" : config.kernel;

    cl_event done = NULL;
    if (c->standard)
        ck_assert_flashcl_ok(flashcl_standard_forward(ctx, &a, NULL, e->queue, 0, NULL, &done));
    else
        ck_assert_flashcl_ok(flashcl_forward(ctx, &a, e->queue, 0, NULL, &done));
    ck_assert_ptr_nonnull(done);
    ck_assert_cl(clWaitForEvents(1, &done));
    cl_int exec_status = 1;
    ck_assert_cl(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec_status), &exec_status, NULL));
    ck_assert_int_eq(exec_status, CL_COMPLETE);
    clReleaseEvent(done);

    unsigned char *out = malloc(sizes[3] * esize);
    ck_assert_ptr_nonnull(out);
    ck_assert_cl(clEnqueueReadBuffer(e->queue, mem[3], CL_TRUE, 0, sizes[3] * esize, out, 0, NULL, NULL));
    if (c->with_lse)
        ck_assert_cl(clEnqueueReadBuffer(e->queue, lse_mem, CL_TRUE, 0, B * Hq * Nq * sizeof(float),
                                         lse_host, 0, NULL, NULL));

    double atol, rtol, lse_tol;
    test_tolerance(c->dtype, variant, c->precision, &atol, &rtol, &lse_tol);
    double max_err = 0, err2 = 0, ref2 = 0, max_lse_err = 0;
    unsigned char *written = calloc(sizes[3] * esize, 1);  /* bytes inside the O view */
    ck_assert_ptr_nonnull(written);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t n = 0; n < Nq; n++) {
                const size_t row = (b * Hq + h) * Nq + n;
                for (size_t x = 0; x < d; x++) {
                    const size_t idx = elem_index(&t[3], b, n, h, x);
                    memset(written + idx * esize, 1, esize);
                    const double got = hostref_load(out, c->dtype, idx), want = ref[row * d + x];
                    const double err = fabs(got - want);
                    ck_assert_msg(err <= atol + rtol * fabs(want),
                                  "O[b=%zu][n=%zu][h=%zu][%zu] = %.9g, reference %.9g (error %.3g, "
                                  "tolerance %.3g)", b, n, h, x, got, want, err, atol + rtol * fabs(want));
                    max_err = fmax(max_err, err);
                    err2 += err * err;
                    ref2 += want * want;
                }
                if (c->with_lse) {
                    const double got = lse_host[row], want = ref_lse[row];
                    if (isinf(want)) {
                        ck_assert_msg(isinf(got) && got < 0, "LSE[%zu] = %g, expected -inf", row, got);
                    } else {
                        const double err = fabs(got - want);
                        ck_assert_msg(err <= lse_tol * fmax(1.0, fabs(want)),
                                      "LSE[b=%zu][h=%zu][n=%zu] = %.9g, reference %.9g", b, h, n, got, want);
                        max_lse_err = fmax(max_lse_err, err);
                    }
                }
            }
    for (size_t x = 0; x < sizes[3] * esize; x++)
        ck_assert_msg(written[x] || out[x] == 0xff, "byte %zu outside the O view was overwritten", x);

    if (result) {
        result->max_abs_err = max_err;
        result->max_lse_err = max_lse_err;
        result->rel_l2_err = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
        result->kernel = variant;
        /* FNV-1a over the bytes of O and LSE as read back. */
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t x = 0; x < sizes[3] * esize; x++)
            h = (h ^ out[x]) * 0x100000001b3ull;
        for (size_t x = 0; c->with_lse && x < B * Hq * Nq * sizeof(float); x++)
            h = (h ^ ((const unsigned char *)lse_host)[x]) * 0x100000001b3ull;
        result->output_hash = h;
    }

    clReleaseMemObject(mem[0]);
    if (!fused) {
        clReleaseMemObject(mem[1]);
        clReleaseMemObject(mem[2]);
    }
    clReleaseMemObject(mem[3]);
    if (lse_mem)
        clReleaseMemObject(lse_mem);
    if (sink_mem)
        clReleaseMemObject(sink_mem);
    free(sinks);
    if (slope_mem)
        clReleaseMemObject(slope_mem);
    free(slopes);
    free(lse_host);
    free(out);
    free(written);
    free(qd);
    free(kd);
    free(vd);
    free(scores);
    free(ref);
    free(ref_lse);
    for (int i = 0; i < 4; i++)
        free(img[i]);
}

bool test_wgmma_takes(const flashcl_context *ctx, flashcl_dtype dtype, int head_dim)
{
    const char *why;
    return dtype != FLASHCL_F32 && head_dim % 16 == 0 && head_dim <= 256 && flashcl_context_has_wgmma(ctx, &why);
}

const char *test_tensor_core_forward(const flashcl_context *ctx, int head_dim)
{
    return test_wgmma_takes(ctx, FLASHCL_F16, head_dim) ? "tensor-core-wgmma"
                                                       : "tensor-core";
}
