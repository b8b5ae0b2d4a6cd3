/* E4M3 (FP8) inputs: the forward on Hopper's wgmma ("tensor-core-wgmma-fp8") against the double reference, on
 * the device's own tensor cores where it has wgmma, else under cl/nv_emulate.h's emulation (a test hook); and
 * every call that does not take E4M3 refusing it.
 *
 * The reference reads the same rounded inputs (the stored bytes times their descales). What the kernel adds is P
 * rounded to E4M3 before P·V (3 mantissa bits: each p_j off by up to 2^-4 of itself, or 2^-18 where P_SCALE's
 * 256 p_j falls among E4M3's subnormals), f32 sums, and O's own rounding; so element c of a row is bounded by
 * 2^-4 Σ_j P_j |V_jc| + 2^-18 Σ_j |V_jc| + O's half ulp + 1e-4, where the first term is the reference's own
 * attention over |V|.
 *
 * Then E4M3 KV caches (flashcl_forward_kv_cache with E4M3 K and V, Q and O f32, f16 or bf16) on the decode kernels,
 * FMA and emulated tensor-core, and what they refuse; their bounds are the ordinary ones (their section says why). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "kv8_common.h"     /* struct kv8_case, run_kv8_case, fill_e4m3 */
#include "varlen_common.h"  /* vl_upload, vl_random_rows, vl_read_all */

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

/* ---- cl/e4m3.h, the kernels' conversions of E4M3 bytes, compiled as C: every one of the 256 codes ---- */

#include "cl_as_c.h"
#define DTYPE 1  /* e4m3x2_to_pair's f16 pairs */
#include "../cl/e4m3.h"
#undef DTYPE

/* Against the host's decoding (tools/hostref.c) and its f16 and bf16 encodings: the same value (every E4M3 value is
 * exact in each, so any difference is a wrong conversion, subnormals and signs included), NaN for 0x7f and 0xff, and
 * pairs with the first byte in the low half. */
START_TEST(e4m3_conversions_every_code)
{
    for (uint x = 0; x < 256; x++) {
        const float want = e4m3_to_f32((uint8_t)x);
        const float got = e4m3_to_float(x);
        if (isnan(want)) {
            ck_assert_msg(isnan(got), "0x%02x: %g, not NaN", x, (double)got);
            ck_assert_msg((e4m3_to_f16_bits(x) & 0x7c00u) == 0x7c00u && (e4m3_to_f16_bits(x) & 0x3ffu),
                          "0x%02x: f16 0x%04x, not NaN", x, e4m3_to_f16_bits(x));
            ck_assert_msg((e4m3_to_bf16_bits(x) & 0x7f80u) == 0x7f80u && (e4m3_to_bf16_bits(x) & 0x7fu),
                          "0x%02x: bf16 0x%04x, not NaN", x, e4m3_to_bf16_bits(x));
            continue;
        }
        ck_assert_msg(as_uint(got) == as_uint(want), "0x%02x: %a, not %a", x, (double)got, (double)want);
        ck_assert_msg(e4m3_to_f16_bits(x) == f32_to_f16(want), "0x%02x: f16 0x%04x, not 0x%04x", x,
                      e4m3_to_f16_bits(x), f32_to_f16(want));
        ck_assert_msg(e4m3_to_bf16_bits(x) == f32_to_bf16(want), "0x%02x: bf16 0x%04x, not 0x%04x", x,
                      e4m3_to_bf16_bits(x), f32_to_bf16(want));
        const uint pair = e4m3x2_to_pair(x | 0x38u << 8);  /* the second byte 0x38: 1.0 */
        ck_assert_uint_eq(pair & 0xffffu, e4m3_to_f16_bits(x));
        ck_assert_uint_eq(pair >> 16, 0x3c00u);
    }
}
END_TEST

/* ---- E4M3 KV caches: flashcl_forward_kv_cache with K and V E4M3, Q and O f32, f16 or bf16 ----
 *
 * The decode kernels take them ("decode" on the FMA units, "decode-tensor-core" where tensor cores are, here
 * emulated): each K and V byte is decoded and times its view's descale, and the rest of the call is the
 * ordinary one of Q's dtype. The reference reads exactly those values (the stored bytes times the descales, and
 * Q as stored), so what is left is the kernel's own f32 arithmetic and O's rounding: the tolerance is
 * test_tolerance's for Q's dtype and the kernel that ran, the one test_decode and test_varlen's caches use. */

/* Contexts for the FMA decode kernel: the tensor-core one off, so the same cases run on "decode" on a device
 * with tensor cores too (PoCL plans "decode" for them anyway); and the same with three splits forced, so the
 * partials of an E4M3 cache go through the merge. */
#define KV8_FMA "decode-tensor-core:off"
#define KV8_FMA_SPLIT "decode-tensor-core:off;decode:splits=3"

/* Lengths that are not multiples of the 64-key block, an empty sequence (O = 0, LSE = -inf), GQA groups 1, 4, 5
 * and 7 (1 to 14 rows: ROWS 1 to 16), one and two queries, both descales set, one of them 0 (1). */
static const struct kv8_case kv8_fma_cases[] = {
    /* f16, GQA 4, one query, host lengths with an empty sequence */
    {FLASHCL_F16, 4, 1, 200, {100, 0, 37, 200}, 8, 2, 64, 0, {0.05f, 0.02f}, .options = KV8_FMA},
    /* bf16, d 128, GQA 1, two causal queries (the length-1 sequence's first query sees no key), device lengths,
     * K's descale 0 */
    {FLASHCL_BF16, 3, 2, 192, {130, 1, 64}, 2, 2, 128, 0, {0.0f, 0.02f}, 1, .device_lengths = 1,
     .options = KV8_FMA},
    /* f32, GQA 5, a paged cache of 16-row pages, host table, V's descale 0 */
    {FLASHCL_F32, 3, 1, 160, {0, 150, 17}, 10, 2, 64, 0, {0.05f, 0.0f}, .page_size = 16, .options = KV8_FMA},
    /* f16, d 64 with dv 32, GQA 4 and two queries (8 rows), a window, paged (32-row pages, device table) */
    {FLASHCL_F16, 3, 2, 128, {77, 128, 5}, 8, 2, 64, 32, {0.05f, 0.02f}, 0, 1, 20, 0, .page_size = 32,
     .device_table = 1, .options = KV8_FMA},
    /* f32, d 128, GQA 7 and two queries (14 rows), softcap, sinks and ALiBi; the empty sequence's rows get O = 0
     * and LSE = their head's sink (-inf for the last head, which has none) */
    {FLASHCL_F32, 3, 2, 150, {150, 3, 0}, 7, 1, 128, 0, {0.05f, 0.02f}, .softcap = 0.4f, .sinks = 1, .alibi = 1,
     .options = KV8_FMA},
    /* bf16, GQA 4, three splits forced, paged (host table), an empty sequence */
    {FLASHCL_BF16, 3, 1, 256, {200, 0, 65}, 8, 2, 64, 0, {0.05f, 0.02f}, .page_size = 64,
     .options = KV8_FMA_SPLIT},
    /* f16, d 128, MHA, three splits, causal with two queries, contiguous, device lengths */
    {FLASHCL_F16, 2, 2, 300, {299, 66}, 2, 2, 128, 0, {0.02f, 0.05f}, 1, .device_lengths = 1,
     .options = KV8_FMA_SPLIT},
    /* bf16, GQA 4, K and V 3 bytes into their buffers: rows off 16 bytes, staged a byte at a time */
    {FLASHCL_BF16, 2, 1, 100, {100, 41}, 8, 2, 64, 0, {0.05f, 0.02f}, .kv_offset = 3, .options = KV8_FMA},
};

/* The tensor-core decode kernel on its plain-OpenCL emulation (compute capability 8.0, as test_decode's
 * emulated_tensor_core_decode_stages): f16 and bf16 Q, GQA 4, d 64 and 128, contiguous and paged, its default
 * plan and three splits forced. Its views' rows are 16-byte multiples (E4M3 rows of d bytes). */
static const struct kv8_case kv8_tc_cases[] = {
    /* f16, d 64, one query, contiguous, an empty sequence */
    {FLASHCL_F16, 3, 1, 200, {100, 0, 200}, 8, 2, 64, 0, {0.05f, 0.02f}, .options = ""},
    /* bf16, d 128, two causal queries (8 rows), paged (32-row pages, host table), three splits */
    {FLASHCL_BF16, 2, 2, 256, {150, 256}, 8, 2, 128, 0, {0.05f, 0.0f}, 1, .page_size = 32,
     .options = "decode-tensor-core:splits=3"},
    /* f16, d 128, one query, paged (64-row pages, device table), device lengths, ALiBi and a softcap */
    {FLASHCL_F16, 2, 1, 192, {65, 191}, 8, 2, 128, 0, {0.0f, 0.02f}, .softcap = 0.4f, .alibi = 1,
     .device_lengths = 1, .page_size = 64, .device_table = 1, .options = ""},
    /* f16, d 64, GQA 4, four splits merged in place by the last work-group (its weights in the E4M3 buffers) */
    {FLASHCL_F16, 2, 1, 256, {256, 130}, 8, 2, 64, 0, {0.05f, 0.02f},
     .options = "decode-tensor-core:splits=4,merge=in-place"},
};

/* Past 16 rows a KV head (chunked prefill against an E4M3 cache): the FMA forward kernels, register-tiled (the
 * default where no tensor core takes it: tensor-core off) and portable (register-tiled off too). Causal with more queries than some sequences' keys (rows that see no
 * key), a window, paged and contiguous, softcap + sinks + ALiBi. */
static const struct kv8_case kv8_prefill_cases[] = {
    /* f16, GQA 4 x 8 queries (32 rows), causal, a sequence of 5 keys, host lengths */
    {FLASHCL_F16, 3, 8, 160, {160, 5, 77}, 8, 2, 64, 0, {0.05f, 0.02f}, 1, .options = "tensor-core:off"},
    /* bf16, GQA 2 x 16 queries, a window, paged (32-row pages, device table), device lengths */
    {FLASHCL_BF16, 2, 16, 128, {128, 50}, 4, 2, 64, 0, {0.05f, 0.0f}, 0, 1, 24, 0, .device_lengths = 1,
     .page_size = 32, .device_table = 1, .options = "tensor-core:off"},
    /* f32 on the portable kernel, d 128, MHA x 20 queries, causal, softcap, sinks and ALiBi */
    {FLASHCL_F32, 2, 20, 100, {100, 33}, 2, 2, 128, 0, {0.05f, 0.02f}, 1, .softcap = 0.4f, .sinks = 1, .alibi = 1,
     .options = "tensor-core:off;register-tiled:off"},
    /* f16 on the portable kernel, GQA 4 x 6 queries, paged (16-row pages, host table), a window */
    {FLASHCL_F16, 2, 6, 96, {96, 40}, 8, 2, 64, 0, {0.02f, 0.05f}, 0, 1, 10, 2, .page_size = 16,
     .options = "tensor-core:off;register-tiled:off"},
};

START_TEST(kv8_prefill)
{
    const struct kv8_case *c = &kv8_prefill_cases[_i];
    struct flashcl_tile tile;
    run_kv8_case(test_context_with_options(c->options), c, 990 + (uint64_t)_i, &tile);
    const char *want = strstr(c->options, "register-tiled:off") ? "portable" : "register-tiled";
    ck_assert_msg(kernel_is(tile.kernel, want), "case %d ran %s, not %s", _i, tile.kernel, want);
}
END_TEST

/* The split count a case's options force ("splits=N"), 0 where they force none. */
static int forced_splits(const char *options)
{
    const char *at = strstr(options, "splits=");
    return at ? atoi(at + strlen("splits=")) : 0;
}

/* Past 16 rows a KV head on the tensor cores: the mma.sync forward (tensor-core) converts each landed block of
 * bytes into f16/bf16 tiles (cl/kv8_tiles.h). Causal with rows that see no key, GQA, a window, paged with both
 * tables, device lengths, dv != d, softcap + sinks + ALiBi, and a forced split (V's descale on the partials). */
static const struct kv8_case kv8_prefill_tc_cases[] = {
    /* f16, GQA 4 x 8 queries (32 rows), causal, a sequence of 5 keys, host lengths */
    {FLASHCL_F16, 3, 8, 160, {160, 5, 77}, 8, 2, 64, 0, {0.05f, 0.02f}, 1, .options = ""},
    /* bf16, GQA 2 x 16 queries, a window, paged (32-row pages, device table), device lengths */
    {FLASHCL_BF16, 2, 16, 128, {128, 50}, 4, 2, 64, 0, {0.05f, 0.0f}, 0, 1, 24, 0, .device_lengths = 1,
     .page_size = 32, .device_table = 1, .options = ""},
    /* f16, d 128 with dv 64, MHA x 20 queries, causal, softcap, sinks and ALiBi, paged (16-row pages, host table),
     * two splits */
    {FLASHCL_F16, 2, 20, 112, {112, 33}, 2, 2, 128, 64, {0.05f, 0.02f}, 1, .softcap = 0.4f, .sinks = 1,
     .alibi = 1, .page_size = 16, .options = "tensor-core:splits=2"},
};

/* Emulated (compute capability 8.0: the integer conversion), a fresh context each case. */
START_TEST(kv8_prefill_tensor_core)
{
    const struct kv8_case *c = &kv8_prefill_tc_cases[_i];
    flashcl_context *ctx = test_emulated_context(c->options, 80, false);
    struct flashcl_tile tile;
    run_kv8_case(ctx, c, 1010 + (uint64_t)_i, &tile);
    ck_assert_msg(kernel_is(tile.kernel, "tensor-core"), "case %d ran %s, not tensor-core", _i, tile.kernel);
    if (forced_splits(c->options))
        ck_assert_int_eq(tile.splits, forced_splits(c->options));
    flashcl_context_destroy(&ctx);
}
END_TEST

/* The same cases on Hopper's wgmma (tensor-core-wgmma converts each block into its 64-column panels), emulated as
 * compute capability 9.0 with its probe taken as passed, a fresh context each case; the forced split as its own. */
static struct kv8_case kv8_wgmma_case(int i)
{
    struct kv8_case c = kv8_prefill_tc_cases[i];
    c.options = forced_splits(c.options) ? "tensor-core-wgmma:warps=4,block_n=64,splits=2" : "";
    return c;
}

START_TEST(kv8_prefill_wgmma)
{
    const struct kv8_case c = kv8_wgmma_case(_i);
    flashcl_context *ctx = test_emulated_context(c.options, 90, true);
    struct flashcl_tile tile;
    run_kv8_case(ctx, &c, 1050 + (uint64_t)_i, &tile);
    ck_assert_msg(kernel_is(tile.kernel, "tensor-core-wgmma"), "case %d ran %s, not tensor-core-wgmma", _i,
                  tile.kernel);
    if (forced_splits(c.options))
        ck_assert_int_eq(tile.splits, forced_splits(c.options));
    flashcl_context_destroy(&ctx);
}
END_TEST

static bool f16_cache_on_tensor_cores(flashcl_context *ctx);

/* The same on the device's own tensor cores where it has them (NVIDIA's cvt on compute capability 8.9+): wgmma's
 * where the device has it (the wgmma cases' options), else mma.sync's; elsewhere the plain context plans an FMA
 * kernel, whose run is still checked, and the case says so. */
START_TEST(kv8_prefill_tensor_core_native)
{
    const bool wgmma = flashcl_context_has_wgmma(test_env_get()->ctx, NULL);
    const struct kv8_case c = wgmma ? kv8_wgmma_case(_i) : kv8_prefill_tc_cases[_i];
    const char *expected = wgmma ? "tensor-core-wgmma" : "tensor-core";
    flashcl_context *ctx = test_context_with_options(c.options);
    const bool tensor_cores = f16_cache_on_tensor_cores(test_env_get()->ctx);
    struct flashcl_tile tile;
    run_kv8_case(ctx, &c, 1030 + (uint64_t)_i, &tile);
    if (!tensor_cores) {
        printf("native e4m3 kv cache prefill case %d: no tensor cores here; ran %s\n", _i, tile.kernel);
        return;
    }
    ck_assert_msg(kernel_is(tile.kernel, expected), "case %d ran %s, not %s", _i, tile.kernel, expected);
    if (forced_splits(c.options))
        ck_assert_int_eq(tile.splits, forced_splits(c.options));
}
END_TEST

/* The FMA decode kernel: every case runs there, split three ways where the case forces it. */
START_TEST(kv8_fma)
{
    const struct kv8_case *c = &kv8_fma_cases[_i];
    struct flashcl_tile tile;
    run_kv8_case(test_context_with_options(c->options), c, 900 + (uint64_t)_i, &tile);
    ck_assert_msg(kernel_is(tile.kernel, "decode"), "case %d ran %s, not decode", _i, tile.kernel);
    if (forced_splits(c->options))
        ck_assert_int_eq(tile.splits, forced_splits(c->options));
}
END_TEST

/* The tensor-core decode kernel, emulated: a fresh context each case (the emulation hook's), destroyed after. */
START_TEST(kv8_tensor_core)
{
    const struct kv8_case *c = &kv8_tc_cases[_i];
    flashcl_context *ctx = test_emulated_context(c->options, 80, false);
    struct flashcl_tile tile;
    run_kv8_case(ctx, c, 950 + (uint64_t)_i, &tile);
    ck_assert_msg(kernel_is(tile.kernel, "decode-tensor-core"), "case %d ran %s, not decode-tensor-core", _i,
                  tile.kernel);
    if (forced_splits(c->options))
        ck_assert_int_eq(tile.splits, forced_splits(c->options));
    flashcl_context_destroy(&ctx);
}
END_TEST

/* The same cases on the device's own tensor cores where it has them (NVIDIA: decode-tensor-core built natively, its
 * conversion NVIDIA's cvt on compute capability 8.9+); elsewhere the plain context plans "decode", whose run is
 * still checked, and the case says so. */
START_TEST(kv8_tensor_core_native)
{
    const struct kv8_case *c = &kv8_tc_cases[_i];
    flashcl_context *ctx = test_context_with_options(c->options);
    const bool tensor_cores = f16_cache_on_tensor_cores(ctx);
    struct flashcl_tile tile;
    run_kv8_case(ctx, c, 970 + (uint64_t)_i, &tile);
    if (!tensor_cores) {
        printf("native e4m3 kv cache case %d: an f16 cache does not plan decode-tensor-core here; ran %s\n", _i,
               tile.kernel);
        return;
    }
    ck_assert_msg(kernel_is(tile.kernel, "decode-tensor-core"), "case %d ran %s, not decode-tensor-core", _i,
                  tile.kernel);
    if (forced_splits(c->options))
        ck_assert_int_eq(tile.splits, forced_splits(c->options));
}
END_TEST

/* A valid E4M3 KV-cache call (f16 Q and O, 4 query heads on one KV head, one query: 4 rows) on buffers
 * mems[0..4]; mems[5..8] for gradients (contents unused: the calls below are refused before anything runs, or only
 * planned). */
enum { KV8_MEMS = 9 };
static struct flashcl_attention kv8_refusal_call(cl_mem *mems)
{
    for (int i = 0; i < KV8_MEMS; i++)
        mems[i] = make_buffer(64 * 1024, NULL);
    struct flashcl_attention a = {0};
    a.batch = a.seq_q = a.heads_kv = 1;
    a.heads_q = 4;
    a.seq_kv = 64;
    a.head_dim = 64;
    a.q = flashcl_tensor_bnhd(mems[0], FLASHCL_F16, 1, 4, 64);
    a.k = flashcl_tensor_bnhd(mems[1], FLASHCL_E4M3, 64, 1, 64);
    a.v = flashcl_tensor_bnhd(mems[2], FLASHCL_E4M3, 64, 1, 64);
    a.k.descale = 0.05f;
    a.v.descale = 0.02f;
    a.o = flashcl_tensor_bnhd(mems[3], FLASHCL_F16, 1, 4, 64);
    a.lse = flashcl_tensor_lse(mems[4], 1, 4);
    return a;
}

/* Whether ctx plans an f16 cache's decode on the tensor cores (the device has them and they built): then an E4M3
 * cache of the same shape must plan there too. */
static bool f16_cache_on_tensor_cores(flashcl_context *ctx)
{
    cl_mem mems[KV8_MEMS];
    struct flashcl_attention a = kv8_refusal_call(mems);
    a.k.dtype = a.v.dtype = FLASHCL_F16;
    a.k.descale = a.v.descale = 0.0f;
    const int lens[1] = {64};
    const struct flashcl_kv_lengths lengths = {.cache_seqlens = lens};
    struct flashcl_tile tile;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &a, &lengths, NULL, &tile));
    for (int i = 0; i < KV8_MEMS; i++)
        clReleaseMemObject(mems[i]);
    return kernel_is(tile.kernel, "decode-tensor-core");
}

/* What E4M3 KV caches refuse, each with its status: K and V not both E4M3, E4M3 Q or O, Q and O of different
 * dtypes, bad descales, every kernel that reads them turned off; and E4M3 K and V with an ordinary Q in every other
 * call (dense, packed, backward, standard). More rows a KV head (group x seq_q) than the decode kernels hold plan
 * the FMA forward; where the rows fit, f32 Q and views off 16 bytes stay on the FMA decode kernel instead of the
 * tensor-core one. */
START_TEST(kv8_refusals)
{
    struct test_env *e = test_env_get();
    flashcl_context *ctx = test_context_with_options(KV8_FMA);
    cl_mem mems[KV8_MEMS];
    const struct flashcl_attention a = kv8_refusal_call(mems);
    const int lens[1] = {64};
    const struct flashcl_kv_lengths lengths = {lens, NULL, {0}};
    struct flashcl_tile tile;

    /* The call itself is valid, with Q and O in each ordinary dtype. */
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &a, &lengths, NULL, &tile));
    ck_assert_str_eq(tile.kernel, "decode");
    const flashcl_dtype ordinary[] = {FLASHCL_F32, FLASHCL_F16, FLASHCL_BF16};
    for (size_t i = 0; i < COUNT(ordinary); i++) {
        struct flashcl_attention ok = a;
        ok.q.dtype = ok.o.dtype = ordinary[i];
        ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &ok, &lengths, NULL, &tile));
        ck_assert_str_eq(tile.kernel, "decode");
    }

#define KV8_REFUSED(call, status)                                                                                 \
    do {                                                                                                          \
        ck_assert_status(flashcl_forward_kv_cache_config(ctx, &(call), &lengths, NULL, &tile), status);           \
        ck_assert_status(flashcl_forward_kv_cache(ctx, &(call), &lengths, NULL, e->queue, 0, NULL, NULL), status); \
    } while (0)

    /* Only one of K and V E4M3 (the other f16, as Q). */
    struct flashcl_attention bad = a;
    bad.k.dtype = FLASHCL_F16;
    bad.k.descale = 0.0f;
    KV8_REFUSED(bad, FLASHCL_ERROR_INVALID_DTYPE);
    bad = a;
    bad.v.dtype = FLASHCL_F16;
    bad.v.descale = 0.0f;
    KV8_REFUSED(bad, FLASHCL_ERROR_INVALID_DTYPE);
    /* E4M3 Q (the dense E4M3 forward's inputs) or E4M3 O. */
    bad = a;
    bad.q.dtype = FLASHCL_E4M3;
    KV8_REFUSED(bad, FLASHCL_ERROR_INVALID_DTYPE);
    bad = a;
    bad.o.dtype = FLASHCL_E4M3;
    KV8_REFUSED(bad, FLASHCL_ERROR_INVALID_DTYPE);
    /* Q and O of different dtypes. */
    bad = a;
    bad.o.dtype = FLASHCL_F32;
    KV8_REFUSED(bad, FLASHCL_ERROR_INVALID_DTYPE);
    /* Descales: K's and V's finite and > 0 (or 0), none on Q or O. */
    const float descales[] = {-1.0f, NAN, INFINITY};
    for (size_t i = 0; i < COUNT(descales); i++) {
        bad = a;
        bad.k.descale = descales[i];
        KV8_REFUSED(bad, FLASHCL_INVALID_VALUE);
        bad = a;
        bad.v.descale = descales[i];
        KV8_REFUSED(bad, FLASHCL_INVALID_VALUE);
    }
    bad = a;
    bad.q.descale = 2.0f;
    KV8_REFUSED(bad, FLASHCL_INVALID_VALUE);
    bad = a;
    bad.o.descale = 2.0f;
    KV8_REFUSED(bad, FLASHCL_INVALID_VALUE);
    /* More than 16 rows a KV head (4 heads x 5 queries, 17 heads x 1 query): past the decode kernels, on the wgmma
     * forward where the device has it, else the mma.sync one where it has tensor cores, else the FMA forward
     * kernels. */
    const bool tensor_cores = f16_cache_on_tensor_cores(e->ctx);
    const char *prefill_kernel = flashcl_context_has_wgmma(ctx, NULL) ? "tensor-core-wgmma"
                                 : tensor_cores                       ? "tensor-core"
                                                                      : "register-tiled";
    const int many_rows[2][2] = {{5, 4}, {1, 17}};  /* queries, query heads */
    for (int i = 0; i < 2; i++) {
        const int nq = many_rows[i][0], hq = many_rows[i][1];
        struct flashcl_attention many = a;
        many.seq_q = nq;
        many.heads_q = hq;
        many.q = flashcl_tensor_bnhd(mems[0], FLASHCL_F16, (size_t)nq, (size_t)hq, 64);
        many.o = flashcl_tensor_bnhd(mems[3], FLASHCL_F16, (size_t)nq, (size_t)hq, 64);
        many.lse = flashcl_tensor_lse(mems[4], (size_t)nq, (size_t)hq);
        ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &many, &lengths, NULL, &tile));
        ck_assert_msg(kernel_is(tile.kernel, prefill_kernel), "%d rows planned %s, not %s", nq * hq, tile.kernel,
                      prefill_kernel);
    }
    /* Every kernel that reads an E4M3 cache off: refused, saying so. */
    flashcl_context *none = test_context_with_options(
        "decode:off;decode-tensor-core:off;tensor-core-wgmma:off;tensor-core:off;register-tiled:off;portable:off");
    ck_assert_status(flashcl_forward_kv_cache_config(none, &a, &lengths, NULL, &tile), FLASHCL_ERROR_INVALID_CONFIG);
    ck_assert_msg(strstr(flashcl_last_error(), "E4M3 KV cache"), "the refusal says: %s", flashcl_last_error());
#undef KV8_REFUSED

    /* E4M3 K and V with an ordinary Q anywhere but a KV cache. */
    for (size_t i = 0; i < COUNT(ordinary); i++) {
        struct flashcl_attention dense = a;
        dense.q.dtype = dense.o.dtype = ordinary[i];
        ck_assert_status(flashcl_forward_config(ctx, &dense, &tile), FLASHCL_ERROR_INVALID_DTYPE);
        ck_assert_status(flashcl_forward(ctx, &dense, e->queue, 0, NULL, NULL), FLASHCL_ERROR_INVALID_DTYPE);
        const int cu_q[2] = {0, 1}, cu_k[2] = {0, 64};
        struct flashcl_varlen vl = {0};
        vl.cu_seqlens_q = cu_q;
        vl.cu_seqlens_k = cu_k;
        vl.total_q = 1;
        vl.total_k = 64;
        ck_assert_status(flashcl_forward_varlen_config(ctx, &dense, &vl, &tile), FLASHCL_ERROR_INVALID_DTYPE);
        ck_assert_status(flashcl_forward_varlen(ctx, &dense, &vl, e->queue, 0, NULL, NULL),
                         FLASHCL_ERROR_INVALID_DTYPE);
        struct flashcl_attention_grad grad = {0};
        grad.d_o = flashcl_tensor_bnhd(mems[5], ordinary[i], 1, 4, 64);
        grad.d_q = flashcl_tensor_bnhd(mems[6], ordinary[i], 1, 4, 64);
        grad.d_k = flashcl_tensor_bnhd(mems[7], ordinary[i], 64, 1, 64);
        grad.d_v = flashcl_tensor_bnhd(mems[8], ordinary[i], 64, 1, 64);
        size_t bytes;
        ck_assert_status(flashcl_backward_workspace_size(ctx, &dense, &grad, &bytes), FLASHCL_ERROR_INVALID_DTYPE);
        ck_assert_status(flashcl_backward_config(ctx, &dense, &grad, &tile), FLASHCL_ERROR_INVALID_DTYPE);
        ck_assert_status(flashcl_standard_workspace_size(ctx, &dense, &bytes), FLASHCL_ERROR_INVALID_DTYPE);
    }

    /* Where the tensor-core decode kernel is (emulated here), f16 Q runs there, while f32 Q, and K or V views
     * whose offsets are not multiples of 16 bytes, stay on the FMA decode kernel. */
    flashcl_context *tc = test_emulated_context("", 80, false);
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(tc, &a, &lengths, NULL, &tile));
    ck_assert_str_eq(tile.kernel, "decode-tensor-core");
    struct flashcl_attention fma = a;
    fma.q.dtype = fma.o.dtype = FLASHCL_F32;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(tc, &fma, &lengths, NULL, &tile));
    ck_assert_str_eq(tile.kernel, "decode");
    fma = a;
    fma.k.offset = 8;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(tc, &fma, &lengths, NULL, &tile));
    ck_assert_str_eq(tile.kernel, "decode");
    fma = a;
    fma.v.offset = 8;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(tc, &fma, &lengths, NULL, &tile));
    ck_assert_str_eq(tile.kernel, "decode");
    flashcl_context_destroy(&tc);
    for (int i = 0; i < KV8_MEMS; i++)
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
    TCase *kv = tcase_create("e4m3 kv caches against the double reference");
    tcase_set_timeout(kv, 1200);
    tcase_add_loop_test(kv, kv8_fma, 0, (int)COUNT(kv8_fma_cases));
    tcase_add_loop_test(kv, kv8_tensor_core, 0, (int)COUNT(kv8_tc_cases));
    tcase_add_loop_test(kv, kv8_tensor_core_native, 0, (int)COUNT(kv8_tc_cases));
    tcase_add_loop_test(kv, kv8_prefill, 0, (int)COUNT(kv8_prefill_cases));
    tcase_add_loop_test(kv, kv8_prefill_tensor_core, 0, (int)COUNT(kv8_prefill_tc_cases));
    tcase_add_loop_test(kv, kv8_prefill_tensor_core_native, 0, (int)COUNT(kv8_prefill_tc_cases));
    tcase_add_loop_test(kv, kv8_prefill_wgmma, 0, (int)COUNT(kv8_prefill_tc_cases));
    tcase_add_test(kv, e4m3_conversions_every_code);
    tcase_add_test(kv, kv8_refusals);
    suite_add_tcase(s, kv);
    TCase *refused = tcase_create("refusals");
    tcase_add_test(refused, refusals);
    suite_add_tcase(s, refused);
    const int rc = test_run_suite(s);
    if (emulated)
        flashcl_context_destroy(&fp8_ctx);
    return rc;
}
