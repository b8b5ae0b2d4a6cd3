/* E4M3 (FP8) inputs: the forward on Hopper's wgmma ("tensor-core-wgmma-fp8") against the double reference, on
 * the device's own tensor cores where it has wgmma, else under cl/nv_emulate.h's emulation (a test hook); and
 * every call that does not take E4M3 refusing it.
 *
 * The reference reads the same rounded inputs (the stored bytes times their descales). What the kernel adds is P
 * rounded to E4M3 before P·V (3 mantissa bits: each p_j off by up to 2^-4 of itself, or 2^-18 where P_SCALE's
 * 256 p_j falls among E4M3's subnormals), f32 sums, and O's own rounding; so element c of a row is bounded by
 * 2^-4 Σ_j P_j |V_jc| + 2^-18 Σ_j |V_jc| + O's half ulp + 1e-4, where the first term is the reference's own
 * attention over |V|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

struct fp8_case {
    int batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, head_dim_v;
    flashcl_dtype o_dtype;
    int causal;
    float scale;          /* 0: 1/sqrt(d) */
    float descale[3];     /* Q's, K's, V's (0: 1) */
    int windowed, window_left, window_right;
    float softcap;
    int sinks, alibi;
};

static const struct fp8_case cases[] = {
    /* GQA, keys not a multiple of the 128-key block, descales on all three, f16 O */
    {1, 130, 300, 4, 2, 64, 64, FLASHCL_F16, 0, 0.0f, {0.5f, 2.0f, 0.25f}},
    /* causal, a sharp softmax (scale 0.3 at d = 128: scores of a few units), bf16 O, two sequences */
    {2, 64, 200, 2, 1, 128, 128, FLASHCL_BF16, 1, 0.3f, {0.0f, 0.0f, 0.0f}},
    /* d 32 with dv 64, f32 O, a window, softcap, sinks and ALiBi */
    {1, 100, 129, 3, 3, 32, 64, FLASHCL_F32, 0, 0.5f, {1.5f, 0.75f, 3.0f}, 1, 40, 8, 5.0f, 1, 1},
    /* MLA's 192 / 128 (Q from local memory), causal with more queries than keys */
    {1, 150, 140, 2, 2, 192, 128, FLASHCL_F16, 1, 0.0f, {0.125f, 1.0f, 1.0f}},
};

/* The kernel checker's (tools/oclgrind-check.sh, CK_RUN_CASE="e4m3 forward, smallest"): Oclgrind simulates every
 * work-item, so one head, one 128-key block and a partial one, a causal edge. */
static const struct fp8_case smallest = {1, 24, 140, 1, 1, 32, 32, FLASHCL_F16, 1, 0.0f, {0.5f, 2.0f, 0.25f}};

static flashcl_context *fp8_ctx;  /* the device's own where it has wgmma, else emulated as compute capability 9.0 */
static bool emulated;

/* Made at the first test (test_env_get asserts, so it runs inside one). */
static void fp8_context(void)
{
    if (!fp8_ctx)
        fp8_ctx = emulated ? test_emulated_context("", 90, true) : test_env_get()->ctx;
}

static size_t o_bytes(flashcl_dtype t)
{
    return flashcl_dtype_size(t);
}

static cl_mem make_buffer(size_t bytes, const void *host)
{
    struct test_env *e = test_env_get();
    cl_int err;
    cl_mem m = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes, (void *)host, &err);
    ck_assert_cl(err);
    return m;
}

/* Random values in [-1, 1] stored as E4M3 over `descale`; *value gets what the stored bytes mean. */
static void fill_e4m3(uint8_t *stored, double *value, size_t n, float descale)
{
    const double f = descale != 0.0f ? descale : 1.0;
    for (size_t i = 0; i < n; i++) {
        stored[i] = f32_to_e4m3((float)(rng_uniform(-1.0, 1.0) / f));
        value[i] = e4m3_to_f32(stored[i]) * f;
    }
}

static double half_ulp(flashcl_dtype t)
{
    return t == FLASHCL_F32 ? 0x1p-24 : t == FLASHCL_F16 ? 0x1p-11 : 0x1p-8;
}

static void run_fp8_case(const struct fp8_case *c, uint64_t seed)
{
    struct test_env *e = test_env_get();
    fp8_context();
    rng_seed(seed);
    const size_t b_n = (size_t)c->batch, nq = (size_t)c->seq_q, nk = (size_t)c->seq_kv, hq = (size_t)c->heads_q,
                 hk = (size_t)c->heads_kv, d = (size_t)c->head_dim, dv = (size_t)c->head_dim_v;
    const size_t n_q = b_n * nq * hq * d, n_k = b_n * nk * hk * d, n_v = b_n * nk * hk * dv, n_o = b_n * nq * hq * dv;
    uint8_t *q8 = malloc(n_q), *k8 = malloc(n_k), *v8 = malloc(n_v);
    double *q = malloc(n_q * sizeof(double)), *k = malloc(n_k * sizeof(double)), *v = malloc(n_v * sizeof(double));
    fill_e4m3(q8, q, n_q, c->descale[0]);
    fill_e4m3(k8, k, n_k, c->descale[1]);
    fill_e4m3(v8, v, n_v, c->descale[2]);

    /* O and LSE poisoned (all-ones bytes: NaN in f32, f16 and bf16), each with a guard of 64 bytes after it that
     * must stay as it is. */
    const size_t ob = n_o * o_bytes(c->o_dtype), lb = b_n * hq * nq * sizeof(float), guard = 64;
    unsigned char *o_host = malloc(ob + guard), *l_host = malloc(lb + guard);
    memset(o_host, 0xff, ob + guard);
    memset(l_host, 0xff, lb + guard);
    cl_mem qm = make_buffer(n_q, q8), km = make_buffer(n_k, k8), vm = make_buffer(n_v, v8);
    cl_mem om = make_buffer(ob + guard, o_host), lm = make_buffer(lb + guard, l_host);

    double sinks[16], slopes[16];
    cl_mem sink_mem = NULL, slope_mem = NULL;
    ck_assert_int_le(c->heads_q, 16);
    if (c->sinks)
        test_make_sinks(c->heads_q, c->seq_kv, sinks, &sink_mem);
    if (c->alibi)
        test_make_alibi_slopes(c->heads_q, slopes, &slope_mem);

    struct flashcl_attention a = {0};
    a.batch = c->batch;
    a.seq_q = c->seq_q;
    a.seq_kv = c->seq_kv;
    a.heads_q = c->heads_q;
    a.heads_kv = c->heads_kv;
    a.head_dim = c->head_dim;
    a.head_dim_v = c->head_dim_v == c->head_dim ? 0 : c->head_dim_v;
    a.q = flashcl_tensor_bnhd(qm, FLASHCL_E4M3, nq, hq, d);
    a.k = flashcl_tensor_bnhd(km, FLASHCL_E4M3, nk, hk, d);
    a.v = flashcl_tensor_bnhd(vm, FLASHCL_E4M3, nk, hk, dv);
    a.q.descale = c->descale[0];
    a.k.descale = c->descale[1];
    a.v.descale = c->descale[2];
    a.o = flashcl_tensor_bnhd(om, c->o_dtype, nq, hq, dv);
    a.lse = flashcl_tensor_lse(lm, nq, hq);
    a.scale = c->scale;
    a.mask = c->windowed ? FLASHCL_MASK_WINDOW : c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    a.window_left = c->windowed ? c->window_left : 0;
    a.window_right = c->windowed ? c->window_right : 0;
    a.softcap = c->softcap;
    if (sink_mem)
        a.sinks = (flashcl_vector){sink_mem, 16};
    if (slope_mem)
        a.alibi_slopes = (flashcl_vector){slope_mem, 16};

    struct flashcl_tile tile;
    ck_assert_flashcl_ok(flashcl_forward_config(fp8_ctx, &a, &tile));
    ck_assert_str_eq(tile.kernel, "tensor-core-wgmma-fp8");
    cl_event done = NULL;
    ck_assert_flashcl_ok(flashcl_forward(fp8_ctx, &a, e->queue, 0, NULL, &done));
    ck_assert_cl(clWaitForEvents(1, &done));
    clReleaseEvent(done);
    ck_assert_cl(clEnqueueReadBuffer(e->queue, om, CL_TRUE, 0, ob + guard, o_host, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, lm, CL_TRUE, 0, lb + guard, l_host, 0, NULL, NULL));
    for (size_t i = 0; i < guard; i++) {
        ck_assert_msg(o_host[ob + i] == 0xff, "O's guard byte %zu changed", i);
        ck_assert_msg(l_host[lb + i] == 0xff, "LSE's guard byte %zu changed", i);
    }

    /* The reference, row by row: O, and the attention over |V| that bounds the rounding of P. */
    const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)d);
    int left, right;
    test_case_window(c->causal, c->windowed, c->window_left, c->window_right, &left, &right);
    double *kh = malloc(nk * d * sizeof(double)), *vh = malloc(nk * dv * sizeof(double));
    double *vabs = malloc(nk * dv * sizeof(double)), *scratch = malloc((2 * nk + dv + 16) * sizeof(double));
    double ref[256], weight[256], lse_ref, lse_abs, max_err = 0.0, max_ratio = 0.0, err2 = 0.0, ref2 = 0.0,
                                                  max_lse_err = 0.0;
    for (size_t b = 0; b < b_n; b++)
        for (size_t h = 0; h < hq; h++) {
            const size_t g = h / (hq / hk);
            for (size_t j = 0; j < nk; j++) {
                for (size_t x = 0; x < d; x++)
                    kh[j * d + x] = k[((b * nk + j) * hk + g) * d + x];
                for (size_t x = 0; x < dv; x++) {
                    vh[j * dv + x] = v[((b * nk + j) * hk + g) * dv + x];
                    vabs[j * dv + x] = fabs(vh[j * dv + x]);
                }
            }
            const struct hostref_mods mods = {c->softcap, c->sinks ? sinks[h] : -INFINITY,
                                              c->alibi ? slopes[h] : 0.0};
            for (size_t i = 0; i < nq; i++) {
                size_t first, end;
                hostref_visible_keys(i, nq, nk, left, right, &first, &end);
                const double *qi = &q[((b * nq + i) * hq + h) * d];
                const long long diagonal = (long long)i + (long long)nk - (long long)nq;
                hostref_attention_row_dv(qi, kh, vh, first, end, d, dv, scale, &mods, diagonal, ref, &lse_ref, scratch);
                hostref_attention_row_dv(qi, kh, vabs, first, end, d, dv, scale, &mods, diagonal, weight, &lse_abs,
                                         scratch);
                for (size_t x = 0; x < dv; x++) {
                    const double got = hostref_load(o_host, c->o_dtype, ((b * nq + i) * hq + h) * dv + x);
                    const double err = fabs(got - ref[x]);
                    const double bound = 0x1p-4 * weight[x] + 0x1p-18 * (double)(end > first ? end - first : 0) +
                                         half_ulp(c->o_dtype) * fabs(ref[x]) + 1e-4;
                    ck_assert_msg(err <= bound, "O[%zu][%zu][%zu][%zu] = %g, reference %g (bound %g)", b, i, h, x,
                                  got, ref[x], bound);
                    max_err = fmax(max_err, err);
                    max_ratio = fmax(max_ratio, err / bound);
                    err2 += err * err;
                    ref2 += ref[x] * ref[x];
                }
                float lse_got;
                memcpy(&lse_got, l_host + ((b * hq + h) * nq + i) * sizeof(float), sizeof(float));
                const double lse_err = isinf(lse_ref) ? (lse_got == lse_ref ? 0.0 : INFINITY)
                                                      : fabs(lse_got - lse_ref) / fmax(1.0, fabs(lse_ref));
                ck_assert_msg(lse_err <= 1e-4, "LSE[%zu][%zu][%zu] = %g, reference %g", b, h, i, (double)lse_got,
                              lse_ref);
                max_lse_err = fmax(max_lse_err, lse_err);
            }
        }
    const double rel_l2 = sqrt(err2 / fmax(ref2, 1e-300));
    printf("%s%s d=%zu dv=%zu %s O: max|err| %.2e (%.0f%% of its bound at most), rel L2 %.2e, LSE %.2e\n",
           tile.kernel, emulated ? " (emulated)" : "", d, dv, flashcl_dtype_name(c->o_dtype), max_err,
           100.0 * max_ratio, rel_l2, max_lse_err);
    /* The bound holds element by element; over the whole O the rounding of P averages out. A key order or
     * scale gone wrong moves O by its own size. */
    ck_assert_msg(rel_l2 < 0.05, "rel L2 error %.3g", rel_l2);

    clReleaseMemObject(qm);
    clReleaseMemObject(km);
    clReleaseMemObject(vm);
    clReleaseMemObject(om);
    clReleaseMemObject(lm);
    if (sink_mem)
        clReleaseMemObject(sink_mem);
    if (slope_mem)
        clReleaseMemObject(slope_mem);
    free(q8), free(k8), free(v8), free(q), free(k), free(v), free(o_host), free(l_host);
    free(kh), free(vh), free(vabs), free(scratch);
}

START_TEST(fp8_forward)
{
    run_fp8_case(&cases[_i], 700 + (uint64_t)_i);
}
END_TEST

START_TEST(fp8_smallest)
{
    run_fp8_case(&smallest, 799);
}
END_TEST

/* A valid E4M3 call's tensors (contents unused: every call below is refused before it runs). */
static struct flashcl_attention refusal_call(cl_mem *mems)
{
    struct flashcl_attention a = {0};
    for (int i = 0; i < 5; i++)
        mems[i] = make_buffer(4096 * 4, NULL);
    a.batch = a.heads_q = a.heads_kv = 1;
    a.seq_q = a.seq_kv = 32;
    a.head_dim = 64;
    a.q = flashcl_tensor_bnhd(mems[0], FLASHCL_E4M3, 32, 1, 64);
    a.k = flashcl_tensor_bnhd(mems[1], FLASHCL_E4M3, 32, 1, 64);
    a.v = flashcl_tensor_bnhd(mems[2], FLASHCL_E4M3, 32, 1, 64);
    a.o = flashcl_tensor_bnhd(mems[3], FLASHCL_F16, 32, 1, 64);
    a.lse = flashcl_tensor_lse(mems[4], 32, 1);
    return a;
}

START_TEST(refusals)
{
    struct test_env *e = test_env_get();
    fp8_context();
    cl_mem mems[5];
    struct flashcl_attention a = refusal_call(mems);
    struct flashcl_tile tile;

    /* The call itself is valid where wgmma is. */
    ck_assert_flashcl_ok(flashcl_forward_config(fp8_ctx, &a, &tile));
    ck_assert_str_eq(tile.kernel, "tensor-core-wgmma-fp8");

    struct flashcl_attention bad = a;
    bad.o.dtype = FLASHCL_E4M3;
    ck_assert_status(flashcl_forward_config(fp8_ctx, &bad, &tile), FLASHCL_ERROR_INVALID_DTYPE);
    bad = a;
    bad.k.dtype = FLASHCL_F16;
    ck_assert_status(flashcl_forward_config(fp8_ctx, &bad, &tile), FLASHCL_ERROR_INVALID_DTYPE);
    const float descales[] = {-1.0f, NAN, INFINITY};
    for (size_t i = 0; i < COUNT(descales); i++) {
        bad = a;
        bad.v.descale = descales[i];
        ck_assert_status(flashcl_forward_config(fp8_ctx, &bad, &tile), FLASHCL_INVALID_VALUE);
    }
    bad = a;
    bad.o.descale = 2.0f;  /* O is f16: no descale */
    ck_assert_status(flashcl_forward_config(fp8_ctx, &bad, &tile), FLASHCL_INVALID_VALUE);
    bad = a;
    bad.head_dim = 48;  /* k-steps of 32 */
    bad.q = flashcl_tensor_bnhd(mems[0], FLASHCL_E4M3, 32, 1, 48);
    bad.k = flashcl_tensor_bnhd(mems[1], FLASHCL_E4M3, 32, 1, 48);
    ck_assert_status(flashcl_forward_config(fp8_ctx, &bad, &tile), FLASHCL_ERROR_INVALID_SHAPE);

    /* Every other call refuses E4M3, naming itself. */
    struct flashcl_attention_grad grad = {0};
    grad.d_o = grad.d_q = grad.d_k = grad.d_v = a.o;
    size_t bytes;
    ck_assert_status(flashcl_backward_workspace_size(fp8_ctx, &a, &grad, &bytes), FLASHCL_ERROR_INVALID_DTYPE);
    ck_assert_msg(strstr(flashcl_last_error(), "flashcl_backward"), "%s", flashcl_last_error());
    ck_assert_status(flashcl_standard_workspace_size(fp8_ctx, &a, &bytes), FLASHCL_ERROR_INVALID_DTYPE);
    const int cu[2] = {0, 32};
    struct flashcl_varlen varlen = {0};
    varlen.cu_seqlens_q = varlen.cu_seqlens_k = cu;
    varlen.total_q = varlen.total_k = 32;
    struct flashcl_attention packed = a;
    packed.q = flashcl_tensor_bnhd(mems[0], FLASHCL_E4M3, 32, 1, 64);
    ck_assert_status(flashcl_forward_varlen(fp8_ctx, &packed, &varlen, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_DTYPE);
    ck_assert_msg(strstr(flashcl_last_error(), "flashcl_forward_varlen"), "%s", flashcl_last_error());

    /* A device without wgmma refuses it with the reason (the shared context, where it has none). */
    const char *why;
    if (!flashcl_context_has_wgmma(e->ctx, &why)) {
        ck_assert_status(flashcl_forward_config(e->ctx, &a, &tile), FLASHCL_ERROR_UNSUPPORTED_DEVICE);
        ck_assert_msg(strstr(flashcl_last_error(), "e4m3"), "%s", flashcl_last_error());
    }
    for (int i = 0; i < 5; i++)
        clReleaseMemObject(mems[i]);
}
END_TEST

int main(void)
{
    flashcl_context *probe = NULL;
    if (flashcl_context_create(NULL, &probe) != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s\n", flashcl_last_error());
        return EXIT_FAILURE;
    }
    const char *why;
    emulated = !flashcl_context_has_wgmma(probe, &why);
    printf("wgmma on \"%s\": %s\n", flashcl_context_device_name(probe), emulated ? "no: emulated" : "yes");
    flashcl_context_destroy(&probe);
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("e4m3 forward against the double reference");
    tcase_set_timeout(tc, 1200);
    tcase_add_loop_test(tc, fp8_forward, 0, (int)COUNT(cases));
    suite_add_tcase(s, tc);
    TCase *small = tcase_create("e4m3 forward, smallest");
    tcase_set_timeout(small, 1200);
    tcase_add_test(small, fp8_smallest);
    suite_add_tcase(s, small);
    TCase *refused = tcase_create("refusals");
    tcase_add_test(refused, refusals);
    suite_add_tcase(s, refused);
    const int rc = test_run_suite(s);
    if (emulated)
        flashcl_context_destroy(&fp8_ctx);
    return rc;
}
