/* The backward pass's test helpers (backward_common.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_common.h"

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

const char *const tensor_names[N_TENSORS] = {"q", "k", "v", "o", "d_o", "d_q", "d_k", "d_v"};

bool kv_like(int t)
{
    return t == T_K || t == T_V || t == T_DK || t == T_DV;
}

size_t tensor_columns(const struct bwd_case *c, int t)
{
    const bool value = t == T_V || t == T_O || t == T_DO || t == T_DV;
    return (size_t)(value && c->head_dim_v ? c->head_dim_v : c->head_dim);
}

static cl_mem upload(const void *host, size_t bytes)
{
    cl_int err;
    cl_mem mem = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host,
                                &err);
    ck_assert_msg(mem != NULL, "clCreateBuffer(%zu bytes) failed (%d)", bytes, err);
    return mem;
}

static size_t elem_index(const flashcl_tensor *t, size_t esize, size_t b, size_t n, size_t h, size_t e)
{
    return t->offset / esize + b * t->stride_batch + n * t->stride_seq + h * t->stride_head + e;
}

/* Random inputs (also in the gaps of padded layouts), poisoned O, LSE and gradients. */
void problem_create(struct problem *p, const struct bwd_case *c, uint64_t seed)
{
    memset(p, 0, sizeof(*p));
    p->c = *c;
    p->esize = flashcl_dtype_size(c->dtype);
    const size_t B = (size_t)c->batch;
    rng_seed(seed);
    const bool fused = c->layout == LAYOUT_FUSED_QKV || c->layout == LAYOUT_FUSED_QKV_HEADS;
    if (fused)
        ck_assert(c->seq_q == c->seq_kv && c->heads_q == c->heads_kv && !c->head_dim_v);
    for (int t = 0; t < N_TENSORS; t++) {
        const size_t d = tensor_columns(c, t);
        const size_t n = (size_t)(kv_like(t) ? c->seq_kv : c->seq_q);
        const size_t h = (size_t)(kv_like(t) ? c->heads_kv : c->heads_q);
        flashcl_tensor *v = &p->view[t];
        const int slice = t == T_K || t == T_DK ? 1 : t == T_V || t == T_DV ? 2 : 0;
        if (fused && t != T_O && t != T_DO) {
            /* Q, K, V slices of one buffer, dQ, dK, dV of another (each tensor its own copy of the image) */
            test_fused_view(c->layout, c->dtype, n, h, d, slice, v);
            p->count[t] = B * n * 3 * h * d;
            if (slice > 0) {
                const int first = t - slice;
                p->img[t] = malloc(p->count[t] * p->esize);
                ck_assert_ptr_nonnull(p->img[t]);
                memcpy(p->img[t], p->img[first], p->count[t] * p->esize);
                p->mem[t] = p->mem[first];
                ck_assert_cl(clRetainMemObject(p->mem[t]));
                v->mem = p->mem[t];
                continue;
            }
        } else if (c->layout == LAYOUT_PADDED) {
            v->dtype = c->dtype;
            v->stride_head = d + 3;
            v->stride_seq = h * (d + 3) + 5;
            v->stride_batch = n * v->stride_seq + 7;
            v->offset = 9 * p->esize;
            p->count[t] = 9 + B * v->stride_batch + 11;
        } else {
            *v = c->layout == LAYOUT_BHND ? flashcl_tensor_bhnd(NULL, c->dtype, n, h, d)
                                          : flashcl_tensor_bnhd(NULL, c->dtype, n, h, d);
            p->count[t] = B * n * h * d;
        }
        p->img[t] = malloc(p->count[t] * p->esize);
        ck_assert_ptr_nonnull(p->img[t]);
        if (t == T_Q || t == T_K || t == T_V || t == T_DO)
            for (size_t x = 0; x < p->count[t]; x++)
                hostref_store(p->img[t], c->dtype, x, (float)rng_uniform(-1.0, 1.0));
        else
            memset(p->img[t], 0xff, p->count[t] * p->esize);
        p->mem[t] = upload(p->img[t], p->count[t] * p->esize);
        v->mem = p->mem[t];
    }
    const size_t lse_bytes = B * (size_t)c->heads_q * (size_t)c->seq_q * sizeof(float);
    float *poison = malloc(lse_bytes);
    ck_assert_ptr_nonnull(poison);
    memset(poison, 0xff, lse_bytes);
    p->lse = upload(poison, lse_bytes);
    free(poison);

    struct flashcl_attention *a = &p->a;
    a->batch = c->batch;
    a->seq_q = c->seq_q;
    a->seq_kv = c->seq_kv;
    a->heads_q = c->heads_q;
    a->heads_kv = c->heads_kv;
    a->head_dim = c->head_dim;
    a->head_dim_v = c->head_dim_v;
    a->q = p->view[T_Q];
    a->k = p->view[T_K];
    a->v = p->view[T_V];
    a->o = p->view[T_O];
    a->lse = flashcl_tensor_lse(p->lse, (size_t)c->seq_q, (size_t)c->heads_q);
    a->scale = c->scale;
    a->precision = c->precision;
    a->softcap = c->softcap;
    a->mask = c->windowed ? FLASHCL_MASK_WINDOW : c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    if (c->windowed) {
        a->window_left = c->window_left;
        a->window_right = c->window_right;
    }
    p->g.d_o = p->view[T_DO];
    p->g.d_q = p->view[T_DQ];
    p->g.d_k = p->view[T_DK];
    p->g.d_v = p->view[T_DV];
    p->sinks = NULL;
    p->sink_mem = p->d_sink_mem = NULL;
    if (c->sinks) {
        p->sinks = malloc((size_t)c->heads_q * sizeof(double));
        ck_assert_ptr_nonnull(p->sinks);
        test_make_sinks(c->heads_q, c->seq_kv, p->sinks, &p->sink_mem);
        const size_t bytes = ((size_t)c->heads_q + 4) * sizeof(float);
        unsigned char *img = malloc(bytes);
        ck_assert_ptr_nonnull(img);
        memset(img, 0xff, bytes);
        p->d_sink_mem = upload(img, bytes);
        free(img);
        a->sinks = (flashcl_vector){p->sink_mem, 4 * sizeof(float)};
        p->g.d_sinks = (flashcl_vector){p->d_sink_mem, 4 * sizeof(float)};
    }
    p->slopes = NULL;
    p->slope_mem = NULL;
    if (c->alibi) {
        p->slopes = malloc((size_t)c->heads_q * sizeof(double));
        ck_assert_ptr_nonnull(p->slopes);
        test_make_alibi_slopes(c->heads_q, p->slopes, &p->slope_mem);
        a->alibi_slopes = (flashcl_vector){p->slope_mem, 4 * sizeof(float)};
    }
}

void problem_free(struct problem *p)
{
    for (int t = 0; t < N_TENSORS; t++) {
        clReleaseMemObject(p->mem[t]);
        free(p->img[t]);
    }
    clReleaseMemObject(p->lse);
    if (p->slopes) {
        clReleaseMemObject(p->slope_mem);
        free(p->slopes);
    }
    if (p->sinks) {
        clReleaseMemObject(p->sink_mem);
        clReleaseMemObject(p->d_sink_mem);
        free(p->sinks);
    }
}

void wait_complete(cl_event ev)
{
    ck_assert_ptr_nonnull(ev);
    ck_assert_cl(clWaitForEvents(1, &ev));
    cl_int status = 1;
    ck_assert_cl(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, NULL));
    ck_assert_int_eq(status, CL_COMPLETE);
    clReleaseEvent(ev);
}

void problem_forward(struct problem *p, flashcl_context *ctx)
{
    cl_event done = NULL;
    ck_assert_flashcl_ok(flashcl_forward(ctx, &p->a, test_env_get()->queue, 0, NULL, &done));
    wait_complete(done);
}

/* Runs the backward call on queue, with the case's workspace choice, and waits. */
void problem_backward(struct problem *p, flashcl_context *ctx, cl_command_queue queue)
{
    cl_mem ws = NULL;
    if (p->c.own_workspace && p->c.standard) {
        size_t bytes = 0;
        ck_assert_flashcl_ok(flashcl_standard_backward_workspace_size(ctx, &p->a, &p->g, &bytes));
        cl_int err;
        ws = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        ck_assert_ptr_nonnull(ws);
    } else if (p->c.own_workspace) {
        size_t bytes = 0;
        ck_assert_flashcl_ok(flashcl_backward_workspace_size(ctx, &p->a, &p->g, &bytes));
        /* D, one float a row; the fused kernel also dQ's f32 accumulator and a counter a query block. */
        const size_t rows = (size_t)p->c.batch * (size_t)p->c.heads_q * (size_t)p->c.seq_q;
        struct flashcl_tile tile;
        ck_assert_flashcl_ok(flashcl_backward_config(ctx, &p->a, &p->g, &tile));
        if (kernel_is(tile.kernel, "backward-tensor-core-fused")) {
            ck_assert_uint_ge(bytes, rows * sizeof(float) * (1 + (size_t)p->c.head_dim));
            /* A workspace 4 bytes short is refused before anything is enqueued: dQ keeps its poison. */
            cl_int err;
            cl_mem small = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE, bytes - 4, NULL, &err);
            ck_assert_ptr_nonnull(small);
            unsigned char *before = read_back(p, T_DQ);
            ck_assert_int_eq(flashcl_backward(ctx, &p->a, &p->g, small, queue, 0, NULL, NULL), FLASHCL_INVALID_VALUE);
            ck_assert_cl(clFinish(queue));
            unsigned char *after = read_back(p, T_DQ);
            ck_assert(memcmp(before, after, p->count[T_DQ] * p->esize) == 0);
            free(before);
            free(after);
            clReleaseMemObject(small);
        } else {
            ck_assert_uint_eq(bytes, rows * sizeof(float));
        }
        cl_int err;
        ws = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        ck_assert_ptr_nonnull(ws);
    }
    p->kernel = 0;
    if (!p->c.standard) {
        struct flashcl_tile tile;
        ck_assert_flashcl_ok(flashcl_backward_config(ctx, &p->a, &p->g, &tile));
        p->kernel = tile.kernel;
    }
    cl_event done = NULL;
    if (p->c.standard)
        ck_assert_flashcl_ok(flashcl_standard_backward(ctx, &p->a, &p->g, ws, queue, 0, NULL, &done));
    else
        ck_assert_flashcl_ok(flashcl_backward(ctx, &p->a, &p->g, ws, queue, 0, NULL, &done));
    wait_complete(done);
    if (ws)
        clReleaseMemObject(ws);
}

unsigned char *read_back(const struct problem *p, int t)
{
    unsigned char *out = malloc(p->count[t] * p->esize);
    ck_assert_ptr_nonnull(out);
    ck_assert_cl(clEnqueueReadBuffer(test_env_get()->queue, p->mem[t], CL_TRUE, 0, p->count[t] * p->esize, out, 0,
                                     NULL, NULL));
    return out;
}

/* Marks the bytes of tensor t's view in `written` (its buffer's bytes). */
static void mark_view(const struct problem *p, int t, unsigned char *written)
{
    const size_t B = (size_t)p->c.batch, d = tensor_columns(&p->c, t);
    const size_t N = (size_t)(kv_like(t) ? p->c.seq_kv : p->c.seq_q);
    const size_t H = (size_t)(kv_like(t) ? p->c.heads_kv : p->c.heads_q);
    for (size_t b = 0; b < B; b++)
        for (size_t n = 0; n < N; n++)
            for (size_t h = 0; h < H; h++)
                memset(written + elem_index(&p->view[t], p->esize, b, n, h, 0) * p->esize, 1, d * p->esize);
}

static double load_element(const struct problem *p, int t, size_t b, size_t n, size_t h, size_t e)
{
    return hostref_load(p->img[t], p->c.dtype, elem_index(&p->view[t], p->esize, b, n, h, e));
}

/* Reference dQ [B][Hq][Nq][d], dK and dV [B][Hk][Nk][d] from the stored (rounded) Q, K, V, dO. */
static void problem_reference(const struct problem *p, double *ref[3], double *ref_d_sinks)
{
    const struct bwd_case *c = &p->c;
    const size_t B = (size_t)c->batch, Nq = (size_t)c->seq_q, Nk = (size_t)c->seq_kv, d = (size_t)c->head_dim;
    const size_t dv = tensor_columns(c, T_V);
    const size_t Hq = (size_t)c->heads_q, Hk = (size_t)c->heads_kv, group = Hq / Hk;
    const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)d);
    double *q = malloc(Nq * d * sizeof(double)), *dout = malloc(Nq * dv * sizeof(double));
    double *k = malloc(Nk * d * sizeof(double)), *v = malloc(Nk * dv * sizeof(double));
    double *scratch = malloc((2 * Nk + dv) * sizeof(double));
    ck_assert(q && dout && k && v && scratch);
    ref[0] = malloc(B * Hq * Nq * d * sizeof(double));
    ref[1] = calloc(B * Hk * Nk * d, sizeof(double));
    ref[2] = calloc(B * Hk * Nk * dv, sizeof(double));
    ck_assert(ref[0] && ref[1] && ref[2]);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            const size_t hk = h / group;
            for (size_t n = 0; n < Nq; n++) {
                for (size_t e = 0; e < d; e++)
                    q[n * d + e] = load_element(p, T_Q, b, n, h, e);
                for (size_t e = 0; e < dv; e++)
                    dout[n * dv + e] = load_element(p, T_DO, b, n, h, e);
            }
            for (size_t n = 0; n < Nk; n++) {
                for (size_t e = 0; e < d; e++)
                    k[n * d + e] = load_element(p, T_K, b, n, hk, e);
                for (size_t e = 0; e < dv; e++)
                    v[n * dv + e] = load_element(p, T_V, b, n, hk, e);
            }
            int left, right;
            test_case_window(c->causal, c->windowed, c->window_left, c->window_right, &left, &right);
            const struct hostref_mods mods = {c->softcap, p->sinks ? p->sinks[h] : -INFINITY,
                                              p->slopes ? p->slopes[h] : 0.0};
            hostref_attention_backward_dv(q, k, v, dout, Nq, Nk, d, dv, scale, left, right, &mods,
                                          &ref[0][(b * Hq + h) * Nq * d], &ref[1][(b * Hk + hk) * Nk * d],
                                          &ref[2][(b * Hk + hk) * Nk * dv], p->sinks ? &ref_d_sinks[h] : NULL,
                                          scratch);
        }
    free(q);
    free(dout);
    free(k);
    free(v);
    free(scratch);
}

/*
 * Bounds: |got - ref| <= atol + rtol * max|ref| per output tensor. The
 * reference is the exact gradient of the stored (rounded) inputs, so what is
 * left is
 *  - f32: f32 arithmetic. Each gradient element sums up to Nk (or group x Nq)
 *    terms, each a product of dots over d; P is recomputed from the f32 LSE
 *    (exp2 of an argument near |LSE| ~ 5, ulp 5e-7 absolute, so ~1e-6 relative
 *    per P). Seen: under 1e-6 of max|ref|; bound 2e-5.
 *  - f16: O is stored in f16, so D_i = dO_i.O_i is off by up to d x 2^-11 x
 *    |dO||O| in the worst case (random signs: ~sqrt(d) times less), which every
 *    dS of the row inherits (times P), plus the output's own rounding of half
 *    an ulp (2^-11 = 4.9e-4 of the value). Bound 4e-3 of max|ref|.
 *  - bf16: the same with 8 mantissa bits (2^-8 = 3.9e-3): bound 3e-2.
 * atol (1e-6) covers gradients that are all near 0 (e.g. dQ of a row whose
 * only key gives P = 1, so dS = 0 exactly up to rounding).
 *
 * The tensor-core backward ("backward-tensor-core", and _FUSED,
 * which sums dQ's per-key-block partials in f32 instead of in one chain, and
 * "backward-wgmma", the same products on Hopper's wgmma) also rounds
 * P and dS to the storage type before the second products (dV = Pᵀ dO,
 * dK = dSᵀ Q, dQ = dS K), as FlashAttention-2 does: each term of those sums
 * carries a relative error up to 2^-11 (f16) or 2^-8 (bf16) on top of the
 * above, and dS = P (dP - D) is a difference whose rounding is relative to
 * P |dP|, not to the (smaller) result. Over random signs these roundings
 * mostly cancel: on the H200 the 15 backward cases of
 * tests/test_tensor_cores.c (d = 16..128, N up to 333, GQA, causal both
 * ways) measured at most 5.4e-4 of max|ref| in f16 and 3.7e-3 in bf16 (dQ,
 * dK, dV alike) — no worse than the portable kernel's 2.9e-3 in bf16 on its
 * cases. Bounds, about 9x and 11x those for longer sums than the tests
 * have: 5e-3 (f16) and 4e-2 (bf16) of max|ref|.
 *
 * The TF32 backward ("backward-tf32") rounds every operand of
 * its five products (Q, K, V, dO, and P, dS) to TF32:
 *  - TF32: 2^-11 = 4.9e-4 relative per operand, the f16 backward's unit, but
 *    on all six operands (f16 inputs are exact in f16) and after a TF32
 *    forward whose O (in D) and LSE (in P) carry the same unit (its bound:
 *    4e-3 of |O|). Seen (emulated, exact forward): at most 8.4e-4 of max|ref|;
 *    bound 1e-2. dS = P (dP - D) errs relative to P |dO||V|, not to the
 *    result: a row whose only key has P = 1 has dQ = 0 exactly but dP - D
 *    ~ 2^-11 sqrt(d) |dO||V| / 3 (inputs in [-1, 1]), seen 1.3e-4 in dQ at
 *    d = 64 where max|ref| = 0: atol 1e-3.
 *  - 3xTF32: operands to ~2^-21 (big + small), the products' dropped
 *    small x small term 2^-22: close to f32. Seen (emulated): at most 7.9e-7
 *    of max|ref|, as exact f32; bound 5e-5, 2.5x the exact f32 bound.
 */
void backward_tolerance(flashcl_dtype dtype, const char *variant, enum flashcl_precision precision,
                        double *atol, double *rtol)
{
    *atol = 1e-6;
    if (kernel_is(variant, "backward-tf32") && precision == FLASHCL_PRECISION_TF32) {
        *atol = 1e-3;
        *rtol = 1e-2;
    } else if (kernel_is(variant, "backward-tf32"))
        *rtol = 5e-5;
    else if (kernel_is(variant, "backward-tensor-core") || kernel_is(variant, "backward-tensor-core-fused") ||
             kernel_is(variant, "backward-wgmma") || kernel_is(variant, "backward-wgmma-atomic"))
        *rtol = dtype == F16 ? 5e-3 : 4e-2;
    else
        *rtol = dtype == F32 ? 2e-5 : dtype == F16 ? 4e-3 : 3e-2;
}

/* Compares the outputs with the reference element by element, checks rows
 * that see no key have dQ exactly 0 and that bytes outside the views kept
 * their poison. */
void problem_check(const struct problem *p, struct bwd_result *r)
{
    const struct bwd_case *c = &p->c;
    double *ref[3];
    double *ref_d_sinks = calloc((size_t)c->heads_q, sizeof(double));
    ck_assert_ptr_nonnull(ref_d_sinks);
    problem_reference(p, ref, ref_d_sinks);
    double atol, rtol;
    backward_tolerance(c->dtype, p->kernel, c->precision, &atol, &rtol);
    if (p->sinks) {  /* d_sinks: each head within the gradients' bound, the padding before them untouched */
        const size_t n = (size_t)c->heads_q + 4;
        float *got = malloc(n * sizeof(float));
        ck_assert_ptr_nonnull(got);
        ck_assert_cl(clEnqueueReadBuffer(test_env_get()->queue, p->d_sink_mem, CL_TRUE, 0, n * sizeof(float), got, 0,
                                         NULL, NULL));
        double max_ref = 0;
        for (int h = 0; h < c->heads_q; h++)
            max_ref = fmax(max_ref, fabs(ref_d_sinks[h]));
        ck_assert_msg(max_ref > 0, "the sinks' gradient is 0: the case cannot tell");
        for (size_t i = 0; i < 4; i++) {
            unsigned char bytes[sizeof(float)];
            memcpy(bytes, &got[i], sizeof(bytes));
            ck_assert_msg(bytes[0] == 0xff && bytes[3] == 0xff, "d_sinks' padding float %zu was written", i);
        }
        for (int h = 0; h < c->heads_q; h++) {
            const double err = isnan(got[4 + h]) ? INFINITY : fabs(got[4 + h] - ref_d_sinks[h]);
            ck_assert_msg(err <= atol + rtol * max_ref, "d_sinks[%d] = %.9g, reference %.9g (bound %.3g)", h,
                          (double)got[4 + h], ref_d_sinks[h], atol + rtol * max_ref);
        }
        free(got);
    }
    free(ref_d_sinks);
    const size_t B = (size_t)c->batch;
    for (int o = 0; o < 3; o++) {
        const int t = T_DQ + o;
        const size_t d = tensor_columns(c, t);
        const size_t N = (size_t)(kv_like(t) ? c->seq_kv : c->seq_q);
        const size_t H = (size_t)(kv_like(t) ? c->heads_kv : c->heads_q);
        const size_t total = B * H * N * d;
        double max_ref = 0;
        for (size_t x = 0; x < total; x++)
            max_ref = fmax(max_ref, fabs(ref[o][x]));
        const double bound = atol + rtol * max_ref;
        unsigned char *out = read_back(p, t);
        unsigned char *written = calloc(p->count[t] * p->esize, 1);
        ck_assert_ptr_nonnull(written);
        double max_err = 0;
        char worst[256] = "";
        for (size_t b = 0; b < B; b++)
            for (size_t h = 0; h < H; h++)
                for (size_t n = 0; n < N; n++) {
                    int left, right;
                    size_t first, end;
                    test_case_window(c->causal, c->windowed, c->window_left, c->window_right, &left, &right);
                    hostref_visible_keys(n, (size_t)c->seq_q, (size_t)c->seq_kv, left, right, &first, &end);
                    const bool no_key = t == T_DQ && end <= first;
                    for (size_t e = 0; e < d; e++) {
                        const size_t idx = elem_index(&p->view[t], p->esize, b, n, h, e);
                        memset(written + idx * p->esize, 1, p->esize);
                        const double got = hostref_load(out, c->dtype, idx);
                        const double want = ref[o][((b * H + h) * N + n) * d + e];
                        const double err = isnan(got) ? INFINITY : fabs(got - want);  /* NaN: the worst */
                        if (no_key)
                            ck_assert_msg(got == 0.0, "d_q row %zu sees no key but is %g, not 0", n, got);
                        if (err > max_err || !worst[0]) {
                            max_err = err;
                            snprintf(worst, sizeof(worst), "%s[b=%zu][n=%zu][h=%zu][%zu] = %.9g, reference %.9g",
                                     tensor_names[t], b, n, h, e, got, want);
                        }
                    }
                }
        ck_assert_msg(max_err <= bound, "%s (error %.3g = %.3g of max|ref| %.3g, bound %.3g)", worst, max_err,
                      max_ref > 0 ? max_err / max_ref : max_err, max_ref, bound);
        for (int other = T_DQ; other <= T_DV; other++)  /* gradients sharing the buffer (fused): their rows */
            if (other != t && p->mem[other] == p->mem[t])
                mark_view(p, other, written);
        for (size_t x = 0; x < p->count[t] * p->esize; x++)
            ck_assert_msg(written[x] || out[x] == 0xff, "byte %zu outside the %s view was overwritten", x,
                          tensor_names[t]);
        r->max_err[o] = max_ref > 0 ? max_err / max_ref : max_err;
        r->kernel = p->kernel;
        free(out);
        free(written);
        free(ref[o]);
    }
}

void run_case(flashcl_context *ctx, const char *what, const struct bwd_case *c, uint64_t seed,
              struct bwd_result *out)
{
    struct test_env *e = test_env_get();
    if (!ctx)
        ctx = e->ctx;
    struct problem p;
    problem_create(&p, c, seed);
    problem_forward(&p, ctx);
    problem_backward(&p, ctx, e->queue);
    struct bwd_result r;
    problem_check(&p, &r);
    const char *kernel = c->standard ? "standard" : p.kernel;
    printf("%-16s %-20s B=%d Nq=%-3d Nk=%-3d Hq=%d Hkv=%d d=%-3d dv=%-3zu dtype=%d causal=%d layout=%d precision=%d: "
           "max err / max|ref| dQ %.2e dK %.2e dV %.2e\n", what, kernel ? kernel : "?", c->batch, c->seq_q, c->seq_kv,
           c->heads_q, c->heads_kv, c->head_dim, tensor_columns(c, T_V), (int)c->dtype, c->causal, (int)c->layout,
           (int)c->precision, r.max_err[0], r.max_err[1], r.max_err[2]);
    problem_free(&p);
    if (out)
        *out = r;
}
