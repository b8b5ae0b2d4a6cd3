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
    /* a window whose left edge falls inside a 128-key block (its first block starts at the block's start), sinks */
    {1, 64, 257, 2, 1, 128, 128, FLASHCL_BF16, 0, 0.0f, {1.0f, 0.5f, 2.0f}, 1, 20, 20, 0.0f, 1, 0},
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

/* The errors over a call's rows. */
struct fp8_stats {
    double max_err, max_ratio, err2, ref2, max_lse_err;
};

/* One sequence's rows in the host copies: query row i of head h is q[((q_row0 + i) heads_q + h) d] (O alike, dv
 * columns), key j k[((k_row0 + j) heads_kv + g) d] (V alike); its LSE lse[lse_row0 + h lse_stride + i]. */
struct fp8_rows {
    const double *q, *k, *v;
    size_t q_row0, k_row0, seq_q, seq_kv, lse_row0, lse_stride;
};

/* Checks O and the LSE of one sequence against the double reference, row by row: O element by element within the
 * bound of P's rounding (the reference's own attention over |V|), the LSE to 1e-4. */
static void check_sequence(const struct fp8_case *c, const struct fp8_rows *r, const unsigned char *o_host,
                           const unsigned char *l_host, const double *sinks, const double *slopes,
                           struct fp8_stats *st)
{
    const size_t nq = r->seq_q, nk = r->seq_kv, hq = (size_t)c->heads_q, hk = (size_t)c->heads_kv,
                 d = (size_t)c->head_dim, dv = (size_t)c->head_dim_v;
    const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)d);
    int left, right;
    test_case_window(c->causal, c->windowed, c->window_left, c->window_right, &left, &right);
    double *kh = malloc((nk + 1) * d * sizeof(double)), *vh = malloc((nk + 1) * dv * sizeof(double));
    double *vabs = malloc((nk + 1) * dv * sizeof(double)), *scratch = malloc((2 * nk + dv + 16) * sizeof(double));
    double ref[256], weight[256], lse_ref, lse_abs;
    for (size_t h = 0; h < hq; h++) {
        const size_t g = h / (hq / hk);
        for (size_t j = 0; j < nk; j++) {
            for (size_t x = 0; x < d; x++)
                kh[j * d + x] = r->k[((r->k_row0 + j) * hk + g) * d + x];
            for (size_t x = 0; x < dv; x++) {
                vh[j * dv + x] = r->v[((r->k_row0 + j) * hk + g) * dv + x];
                vabs[j * dv + x] = fabs(vh[j * dv + x]);
            }
        }
        const struct hostref_mods mods = {c->softcap, c->sinks ? sinks[h] : -INFINITY, c->alibi ? slopes[h] : 0.0};
        for (size_t i = 0; i < nq; i++) {
            size_t first, end;
            hostref_visible_keys(i, nq, nk, left, right, &first, &end);
            const double *qi = &r->q[((r->q_row0 + i) * hq + h) * d];
            const long long diagonal = (long long)i + (long long)nk - (long long)nq;
            hostref_attention_row_dv(qi, kh, vh, first, end, d, dv, scale, &mods, diagonal, ref, &lse_ref, scratch);
            hostref_attention_row_dv(qi, kh, vabs, first, end, d, dv, scale, &mods, diagonal, weight, &lse_abs,
                                     scratch);
            for (size_t x = 0; x < dv; x++) {
                const size_t at = ((r->q_row0 + i) * hq + h) * dv + x;
                const double got = hostref_load(o_host, c->o_dtype, at);
                const double err = fabs(got - ref[x]);
                const double bound = 0x1p-4 * weight[x] + 0x1p-18 * (double)(end > first ? end - first : 0) +
                                     half_ulp(c->o_dtype) * fabs(ref[x]) + 1e-4;
                ck_assert_msg(err <= bound, "O[row %zu][head %zu][%zu] = %g, reference %g (bound %g)",
                              r->q_row0 + i, h, x, got, ref[x], bound);
                st->max_err = fmax(st->max_err, err);
                st->max_ratio = fmax(st->max_ratio, err / bound);
                st->err2 += err * err;
                st->ref2 += ref[x] * ref[x];
            }
            float lse_got;
            memcpy(&lse_got, l_host + (r->lse_row0 + h * r->lse_stride + i) * sizeof(float), sizeof(float));
            const double lse_err = isinf(lse_ref) ? (lse_got == lse_ref ? 0.0 : INFINITY)
                                                  : fabs(lse_got - lse_ref) / fmax(1.0, fabs(lse_ref));
            ck_assert_msg(lse_err <= 1e-4, "LSE[head %zu][row %zu] = %g, reference %g", h, r->q_row0 + i,
                          (double)lse_got, lse_ref);
            st->max_lse_err = fmax(st->max_lse_err, lse_err);
        }
    }
    free(kh), free(vh), free(vabs), free(scratch);
}

/* Prints a call's errors and asserts the relative L2 error: the bound holds element by element; over the whole O
 * the rounding of P averages out, while a key order or scale gone wrong moves O by its own size. */
static void report(const struct fp8_case *c, const char *kernel, const char *what, const struct fp8_stats *st)
{
    const double rel_l2 = sqrt(st->err2 / fmax(st->ref2, 1e-300));
    printf("%s%s%s d=%d dv=%d %s O: max|err| %.2e (%.0f%% of its bound at most), rel L2 %.2e, LSE %.2e\n", kernel,
           emulated ? " (emulated)" : "", what, c->head_dim, c->head_dim_v, flashcl_dtype_name(c->o_dtype),
           st->max_err, 100.0 * st->max_ratio, rel_l2, st->max_lse_err);
    ck_assert_msg(rel_l2 < 0.05, "rel L2 error %.3g", rel_l2);
}

/* A packed batch (flashcl_forward_varlen; the case's batch, seq_q and seq_kv are then ignored): each sequence's
 * query and key lengths, the offsets on the host or in device buffers, and packed query rows after the last
 * sequence that no sequence owns (their O and LSE must stay poisoned). */
struct fp8_packing {
    int n;
    int q_lens[6], k_lens[6];
    int device_offsets;
    int spare_q;
};

/* One call of case c (dense, or packed as pk says) against the reference: random E4M3 inputs, O and the LSE
 * poisoned, guard bytes after both. */
static void run_fp8_case(const struct fp8_case *c, const struct fp8_packing *pk, uint64_t seed)
{
    struct test_env *e = test_env_get();
    fp8_context();
    rng_seed(seed);
    const size_t hq = (size_t)c->heads_q, hk = (size_t)c->heads_kv, d = (size_t)c->head_dim,
                 dv = (size_t)c->head_dim_v;
    /* Sequence b's rows: queries cu_q[b] .., keys cu_k[b] ..; dense, b·seq_q and b·seq_kv. */
    int cu_q[7] = {0}, cu_k[7] = {0}, batch = c->batch, seq_q = c->seq_q, seq_kv = c->seq_kv;
    if (pk) {
        batch = pk->n;
        seq_q = seq_kv = 1;
        for (int b = 0; b < pk->n; b++) {
            cu_q[b + 1] = cu_q[b] + pk->q_lens[b];
            cu_k[b + 1] = cu_k[b] + pk->k_lens[b];
            seq_q = pk->q_lens[b] > seq_q ? pk->q_lens[b] : seq_q;
            seq_kv = pk->k_lens[b] > seq_kv ? pk->k_lens[b] : seq_kv;
        }
    }
    const size_t rows_q = pk ? (size_t)cu_q[pk->n] + (size_t)pk->spare_q : (size_t)batch * (size_t)seq_q;
    const size_t rows_k = pk ? (size_t)cu_k[pk->n] : (size_t)batch * (size_t)seq_kv;
    const size_t n_q = rows_q * hq * d, n_k = rows_k * hk * d, n_v = rows_k * hk * dv, n_o = rows_q * hq * dv;
    uint8_t *q8 = malloc(n_q), *k8 = malloc(n_k), *v8 = malloc(n_v);
    double *q = malloc(n_q * sizeof(double)), *k = malloc(n_k * sizeof(double)), *v = malloc(n_v * sizeof(double));
    fill_e4m3(q8, q, n_q, c->descale[0]);
    fill_e4m3(k8, k, n_k, c->descale[1]);
    fill_e4m3(v8, v, n_v, c->descale[2]);

    /* O and LSE poisoned (all-ones bytes: NaN in f32, f16 and bf16), each with a guard of 64 bytes after it that
     * must stay as it is. */
    const size_t ob = n_o * o_bytes(c->o_dtype), lb = rows_q * hq * sizeof(float), guard = 64;
    unsigned char *o_host = malloc(ob + guard), *l_host = malloc(lb + guard);
    memset(o_host, 0xff, ob + guard);
    memset(l_host, 0xff, lb + guard);
    cl_mem qm = make_buffer(n_q, q8), km = make_buffer(n_k, k8), vm = make_buffer(n_v, v8);
    cl_mem om = make_buffer(ob + guard, o_host), lm = make_buffer(lb + guard, l_host);

    double sinks[16], slopes[16];
    cl_mem sink_mem = NULL, slope_mem = NULL;
    ck_assert_int_le(c->heads_q, 16);
    if (c->sinks)
        test_make_sinks(c->heads_q, seq_kv, sinks, &sink_mem);
    if (c->alibi)
        test_make_alibi_slopes(c->heads_q, slopes, &slope_mem);

    /* Packed tensors are views of one batch of all their rows (stride_batch unused). */
    const size_t view_q = pk ? rows_q : (size_t)seq_q, view_k = pk ? rows_k : (size_t)seq_kv;
    struct flashcl_attention a = {0};
    a.batch = batch;
    a.seq_q = seq_q;
    a.seq_kv = seq_kv;
    a.heads_q = c->heads_q;
    a.heads_kv = c->heads_kv;
    a.head_dim = c->head_dim;
    a.head_dim_v = c->head_dim_v == c->head_dim ? 0 : c->head_dim_v;
    a.q = flashcl_tensor_bnhd(qm, FLASHCL_E4M3, view_q, hq, d);
    a.k = flashcl_tensor_bnhd(km, FLASHCL_E4M3, view_k, hk, d);
    a.v = flashcl_tensor_bnhd(vm, FLASHCL_E4M3, view_k, hk, dv);
    a.q.descale = c->descale[0];
    a.k.descale = c->descale[1];
    a.v.descale = c->descale[2];
    a.o = flashcl_tensor_bnhd(om, c->o_dtype, view_q, hq, dv);
    a.lse = flashcl_tensor_lse(lm, view_q, hq);
    a.scale = c->scale;
    a.mask = c->windowed ? FLASHCL_MASK_WINDOW : c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    a.window_left = c->windowed ? c->window_left : 0;
    a.window_right = c->windowed ? c->window_right : 0;
    a.softcap = c->softcap;
    if (sink_mem)
        a.sinks = (flashcl_vector){sink_mem, 16};
    if (slope_mem)
        a.alibi_slopes = (flashcl_vector){slope_mem, 16};

    struct flashcl_varlen vl = {0};
    cl_mem cu_mem[2] = {NULL, NULL};
    if (pk) {
        vl.total_q = (int)rows_q;
        vl.total_k = (int)rows_k;
        if (pk->device_offsets) {
            cu_mem[0] = make_buffer(sizeof(cu_q), cu_q);
            cu_mem[1] = make_buffer(sizeof(cu_k), cu_k);
            vl.cu_seqlens_q_mem = cu_mem[0];
            vl.cu_seqlens_k_mem = cu_mem[1];
        } else {
            vl.cu_seqlens_q = cu_q;
            vl.cu_seqlens_k = cu_k;
        }
    }
    struct flashcl_tile tile;
    ck_assert_flashcl_ok(pk ? flashcl_forward_varlen_config(fp8_ctx, &a, &vl, &tile)
                            : flashcl_forward_config(fp8_ctx, &a, &tile));
    ck_assert_str_eq(tile.kernel, "tensor-core-wgmma-fp8");
    cl_event done = NULL;
    ck_assert_flashcl_ok(pk ? flashcl_forward_varlen(fp8_ctx, &a, &vl, e->queue, 0, NULL, &done)
                            : flashcl_forward(fp8_ctx, &a, e->queue, 0, NULL, &done));
    ck_assert_cl(clWaitForEvents(1, &done));
    clReleaseEvent(done);
    ck_assert_cl(clEnqueueReadBuffer(e->queue, om, CL_TRUE, 0, ob + guard, o_host, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, lm, CL_TRUE, 0, lb + guard, l_host, 0, NULL, NULL));
    for (size_t i = 0; i < guard; i++) {
        ck_assert_msg(o_host[ob + i] == 0xff, "O's guard byte %zu changed", i);
        ck_assert_msg(l_host[lb + i] == 0xff, "LSE's guard byte %zu changed", i);
    }

    struct fp8_stats stats = {0};
    for (int b = 0; b < batch; b++) {
        const size_t q0 = pk ? (size_t)cu_q[b] : (size_t)b * (size_t)seq_q;
        const size_t k0 = pk ? (size_t)cu_k[b] : (size_t)b * (size_t)seq_kv;
        const size_t nq_b = pk ? (size_t)pk->q_lens[b] : (size_t)seq_q, nk_b = pk ? (size_t)pk->k_lens[b] : (size_t)seq_kv;
        /* LSE [batch][heads][seq_q] dense; packed [heads][total_q]. */
        const struct fp8_rows rows = {q, k, v, q0, k0, nq_b, nk_b, pk ? q0 : (size_t)b * hq * (size_t)seq_q,
                                      pk ? rows_q : (size_t)seq_q};
        check_sequence(c, &rows, o_host, l_host, sinks, slopes, &stats);
    }
    if (pk) {  /* rows no sequence owns: untouched */
        for (size_t i = (size_t)cu_q[pk->n] * hq * dv * o_bytes(c->o_dtype); i < ob; i++)
            ck_assert_msg(o_host[i] == 0xff, "O's byte %zu, past the last sequence, changed", i);
        for (size_t h = 0; h < hq; h++)
            for (size_t i = (size_t)cu_q[pk->n]; i < rows_q; i++)
                ck_assert_msg(l_host[(h * rows_q + i) * sizeof(float)] == 0xff, "LSE[%zu][%zu], past the last "
                              "sequence, changed", h, i);
    }
    report(c, tile.kernel, pk ? (pk->device_offsets ? " packed, device offsets," : " packed,") : "", &stats);

    clReleaseMemObject(qm);
    clReleaseMemObject(km);
    clReleaseMemObject(vm);
    clReleaseMemObject(om);
    clReleaseMemObject(lm);
    for (int i = 0; i < 2; i++)
        if (cu_mem[i])
            clReleaseMemObject(cu_mem[i]);
    if (sink_mem)
        clReleaseMemObject(sink_mem);
    if (slope_mem)
        clReleaseMemObject(slope_mem);
    free(q8), free(k8), free(v8), free(q), free(k), free(v), free(o_host), free(l_host);
}

START_TEST(fp8_forward)
{
    run_fp8_case(&cases[_i], NULL, 700 + (uint64_t)_i);
}
END_TEST

START_TEST(fp8_smallest)
{
    run_fp8_case(&smallest, NULL, 799);
}
END_TEST

/* Packed batches: sequences of other lengths than their blocks (an empty one, one of a single key, ones past a
 * 128-key block and short of it, more queries than keys), GQA, causal and a window; offsets on the host and on the
 * device. */
static const struct {
    struct fp8_case c;
    struct fp8_packing pk;
} packed_cases[] = {
    {{0, 0, 0, 4, 2, 64, 64, FLASHCL_F16, 1, 0.0f, {0.5f, 2.0f, 0.25f}},
     {4, {100, 0, 37, 150}, {130, 50, 300, 129}, 0, 5}},
    {{0, 0, 0, 2, 1, 128, 128, FLASHCL_BF16, 0, 0.0f, {1.0f, 0.5f, 2.0f}, 1, 20, 20, 0.0f, 1, 0},
     {3, {1, 64, 140}, {1, 257, 140}, 1, 0}},
};

START_TEST(fp8_packed)
{
    run_fp8_case(&packed_cases[_i].c, &packed_cases[_i].pk, 750 + (uint64_t)_i);
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
    bad.k.offset = 8;  /* rows on 16 bytes: the kernel copies 16-byte chunks */
    ck_assert_status(flashcl_forward_config(fp8_ctx, &bad, &tile), FLASHCL_ERROR_MISALIGNED);
    bad = a;
    bad.o.stride_head = 68;  /* f16 O: 136-byte heads */
    bad.o.stride_seq = 68;
    ck_assert_status(flashcl_forward_config(fp8_ctx, &bad, &tile), FLASHCL_ERROR_MISALIGNED);
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
    const int lengths[1] = {32};
    const struct flashcl_kv_lengths cache = {lengths, NULL, {0}};
    ck_assert_status(flashcl_forward_kv_cache(fp8_ctx, &a, &cache, NULL, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_DTYPE);
    ck_assert_msg(strstr(flashcl_last_error(), "flashcl_forward_kv_cache"), "%s", flashcl_last_error());

    /* Packed batches take E4M3, but not so many sequences that Vᵀ's rows (the keys plus 256 a sequence) pass
     * 2^31 (device offsets: the check reads no entry). */
    const int cu[3] = {0, 16, 32};
    struct flashcl_varlen varlen = {0};
    varlen.cu_seqlens_q = varlen.cu_seqlens_k = cu;
    varlen.total_q = varlen.total_k = 32;
    struct flashcl_attention packed = a;
    packed.batch = 2;
    ck_assert_flashcl_ok(flashcl_forward_varlen_config(fp8_ctx, &packed, &varlen, &tile));
    ck_assert_str_eq(tile.kernel, "tensor-core-wgmma-fp8");
    packed.batch = (1 << 23) + 1;  /* 256 (2^23 + 1) > 2^31 */
    cl_mem offsets = make_buffer(((size_t)packed.batch + 1) * sizeof(cl_int), NULL);
    struct flashcl_varlen many = varlen;
    many.cu_seqlens_q = many.cu_seqlens_k = NULL;
    many.cu_seqlens_q_mem = many.cu_seqlens_k_mem = offsets;
    ck_assert_status(flashcl_forward_varlen_config(fp8_ctx, &packed, &many, &tile), FLASHCL_ERROR_INVALID_SHAPE);
    ck_assert_msg(strstr(flashcl_last_error(), "E4M3"), "%s", flashcl_last_error());
    clReleaseMemObject(offsets);

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
    TCase *pack = tcase_create("e4m3 packed batches against the double reference");
    tcase_set_timeout(pack, 1200);
    tcase_add_loop_test(pack, fp8_packed, 0, (int)COUNT(packed_cases));
    suite_add_tcase(s, pack);
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
