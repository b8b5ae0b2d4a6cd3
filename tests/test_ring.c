/* The ring (libflashcl_mpi) under mpirun -n 1..4 (tests/test_ring.sh): the forward against the double
 * reference and bitwise against a one-rank ring of the whole sequence computed in the same run (so
 * every rank count gives the same bits), the backward against the double reference and against
 * flashcl_backward on one device, and failures: a rank with bad input, ranks that disagree, a rank
 * whose work fails mid-ring — an error on every rank, no hang. Every verdict is agreed over the ranks
 * before it is asserted, so a failing check on one rank cannot leave the others in a collective. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl_mpi.h"
#include "hostref.h"

extern int fcl_ring_test_fail_rank, fcl_ring_test_fail_step;  /* src/mpi/ring_internal.h's hook */

static flashcl_context *ctx;
static cl_command_queue queue;
static flashcl_ring *ring, *self_ring;  /* over MPI_COMM_WORLD, and this rank alone */
static int rank, ranks;

/* Every rank's verdict: true only where all passed; the failing ranks' message printed by them. */
static bool all_pass(bool mine, const char *what, const char *detail)
{
    int in = mine ? 1 : 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!mine)
        fprintf(stderr, "rank %d/%d: %s: %s\n", rank, ranks, what, detail);
    return out == 1;
}

#define ck_assert_all(mine, what, detail) ck_assert_msg(all_pass((mine), (what), (detail)), "%s failed on a rank", (what))

/* ---- host images ---- */

struct ring_case {
    int batch, seq, heads_q, heads_kv, dim;
    flashcl_dtype dtype;
    int causal;
};

enum { T_Q, T_K, T_V, T_DO, N_INPUTS };

/* The whole sequence's inputs, [B][N][H][d], the same on every rank (one seed). */
struct problem {
    struct ring_case c;
    size_t esize, count[N_INPUTS];
    unsigned char *img[N_INPUTS];  /* storage */
    double *val[N_INPUTS];         /* the stored values */
    int rows, chunk_rows, chunks;  /* per rank */
};

static int heads_of(const struct ring_case *c, int t)
{
    return t == T_K || t == T_V ? c->heads_kv : c->heads_q;
}

static void problem_create(struct problem *p, const struct ring_case *c, uint64_t seed)
{
    memset(p, 0, sizeof(*p));
    p->c = *c;
    p->esize = flashcl_dtype_size(c->dtype);
    rng_seed(seed);
    for (int t = 0; t < N_INPUTS; t++) {
        p->count[t] = (size_t)c->batch * c->seq * heads_of(c, t) * c->dim;
        p->img[t] = malloc(p->count[t] * p->esize);
        p->val[t] = malloc(p->count[t] * sizeof(double));
        ck_assert_ptr_nonnull(p->img[t]);
        ck_assert_ptr_nonnull(p->val[t]);
        for (size_t i = 0; i < p->count[t]; i++)
            p->val[t][i] = hostref_store(p->img[t], c->dtype, i, (float)rng_uniform(-1.0, 1.0));
    }
    p->chunks = flashcl_ring_chunks(NULL, c->seq);
    p->chunk_rows = c->seq / p->chunks;
    p->rows = c->seq / ranks;
}

static void problem_free(struct problem *p)
{
    for (int t = 0; t < N_INPUTS; t++) {
        free(p->img[t]);
        free(p->val[t]);
    }
}

/* The global row of this rank's local row. */
static int global_row(const struct problem *p, int local)
{
    const int chunk = flashcl_ring_global_chunk(p->chunks, ranks, rank, p->c.causal, local / p->chunk_rows);
    ck_assert_int_ge(chunk, 0);
    return chunk * p->chunk_rows + local % p->chunk_rows;
}

/* This rank's rows of a [B][N][H][d] image (elem bytes an element), as [B][rows][H][d]. */
static unsigned char *shard(const struct problem *p, const unsigned char *whole, int heads, size_t elem)
{
    const size_t row = (size_t)heads * p->c.dim * elem;
    unsigned char *out = malloc((size_t)p->c.batch * p->rows * row);
    ck_assert_ptr_nonnull(out);
    for (int b = 0; b < p->c.batch; b++)
        for (int r = 0; r < p->rows; r++)
            memcpy(out + ((size_t)b * p->rows + r) * row,
                   whole + ((size_t)b * p->c.seq + global_row(p, r)) * row, row);
    return out;
}

static cl_mem buffer_from(const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &err);
    ck_assert_msg(m != NULL, "clCreateBuffer failed: %d", err);
    return m;
}

/* A buffer of 0xFF bytes: NaN in every dtype, so an element left unwritten fails every comparison. */
static cl_mem poisoned(size_t bytes)
{
    unsigned char *junk = malloc(bytes);
    ck_assert_ptr_nonnull(junk);
    memset(junk, 0xFF, bytes);
    cl_mem m = buffer_from(junk, bytes);
    free(junk);
    return m;
}

static unsigned char *read_back(cl_mem m, size_t bytes)
{
    unsigned char *out = malloc(bytes);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, m, CL_TRUE, 0, bytes, out, 0, NULL, NULL), CL_SUCCESS);
    return out;
}

/* Device buffers of one call: inputs, outputs poisoned. */
struct call {
    int rows;
    cl_mem in[N_INPUTS], o, lse, d_q, d_k, d_v;
    struct flashcl_attention a;
    struct flashcl_attention_grad g;
};

static void call_create(struct call *k, const struct problem *p, unsigned char *const img[N_INPUTS], int rows)
{
    const struct ring_case *c = &p->c;
    memset(k, 0, sizeof(*k));
    k->rows = rows;
    size_t bytes[N_INPUTS];
    for (int t = 0; t < N_INPUTS; t++) {
        bytes[t] = (size_t)c->batch * rows * heads_of(c, t) * c->dim * p->esize;
        k->in[t] = buffer_from(img[t], bytes[t]);
    }
    k->o = poisoned(bytes[T_Q]);
    k->lse = poisoned((size_t)c->batch * c->heads_q * rows * sizeof(float));
    k->d_q = poisoned(bytes[T_Q]);
    k->d_k = poisoned(bytes[T_K]);
    k->d_v = poisoned(bytes[T_V]);
    struct flashcl_attention *a = &k->a;
    a->batch = c->batch;
    a->seq_q = a->seq_kv = rows;
    a->heads_q = c->heads_q;
    a->heads_kv = c->heads_kv;
    a->head_dim = c->dim;
    a->q = flashcl_tensor_bnhd(k->in[T_Q], c->dtype, rows, c->heads_q, c->dim);
    a->k = flashcl_tensor_bnhd(k->in[T_K], c->dtype, rows, c->heads_kv, c->dim);
    a->v = flashcl_tensor_bnhd(k->in[T_V], c->dtype, rows, c->heads_kv, c->dim);
    a->o = flashcl_tensor_bnhd(k->o, c->dtype, rows, c->heads_q, c->dim);
    a->lse = flashcl_tensor_lse(k->lse, rows, c->heads_q);
    a->mask = c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    k->g.d_o = flashcl_tensor_bnhd(k->in[T_DO], c->dtype, rows, c->heads_q, c->dim);
    k->g.d_q = flashcl_tensor_bnhd(k->d_q, c->dtype, rows, c->heads_q, c->dim);
    k->g.d_k = flashcl_tensor_bnhd(k->d_k, c->dtype, rows, c->heads_kv, c->dim);
    k->g.d_v = flashcl_tensor_bnhd(k->d_v, c->dtype, rows, c->heads_kv, c->dim);
}

static void call_free(struct call *k)
{
    cl_mem all[] = {k->in[0], k->in[1], k->in[2], k->in[3], k->o, k->lse, k->d_q, k->d_k, k->d_v};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        clReleaseMemObject(all[i]);
}

/* The local call on this rank's shard. */
static void local_call(struct call *k, const struct problem *p)
{
    unsigned char *img[N_INPUTS];
    for (int t = 0; t < N_INPUTS; t++)
        img[t] = shard(p, p->img[t], heads_of(&p->c, t), p->esize);
    call_create(k, p, img, p->rows);
    for (int t = 0; t < N_INPUTS; t++)
        free(img[t]);
}

static const char *status_text(flashcl_status st)
{
    static char text[1400];
    snprintf(text, sizeof(text), "%s: %s", flashcl_ring_status_name(st), flashcl_ring_last_error());
    return text;
}

/* ---- the forward ---- */

/* Bounds of |O - ref| <= atol + rtol |ref|: f32 as the core's; f16/bf16 add the partials' rounding to
 * the storage type before the merge (half an ulp of |partial| <= max|v| = 1). */
static void forward_tolerance(flashcl_dtype dtype, double *atol, double *rtol)
{
    *atol = dtype == FLASHCL_F32 ? 2e-6 : dtype == FLASHCL_F16 ? 1e-3 : 8e-3;
    *rtol = dtype == FLASHCL_F32 ? 2e-5 : dtype == FLASHCL_F16 ? 1.2e-3 : 8e-3;
}

/* O and LSE of every local row against the double reference; false and a message on the first miss. */
static bool check_forward(const struct problem *p, const struct call *k, char *why, size_t why_size, double *worst)
{
    const struct ring_case *c = &p->c;
    const int group = c->heads_q / c->heads_kv, N = c->seq, d = c->dim;
    unsigned char *o = read_back(k->o, (size_t)c->batch * p->rows * c->heads_q * d * p->esize);
    float *lse = (float *)read_back(k->lse, (size_t)c->batch * c->heads_q * p->rows * sizeof(float));
    double *kh = malloc((size_t)N * d * sizeof(double)), *vh = malloc((size_t)N * d * sizeof(double));
    double *scratch = malloc((size_t)N * sizeof(double)), out[256], ref_lse;
    double atol, rtol;
    forward_tolerance(c->dtype, &atol, &rtol);
    bool ok = true;
    *worst = 0.0;
    for (int b = 0; b < c->batch && ok; b++)
        for (int h = 0; h < c->heads_q && ok; h++) {
            const int hk = h / group;
            for (int j = 0; j < N; j++)
                for (int e = 0; e < d; e++) {
                    const size_t src = (((size_t)b * N + j) * c->heads_kv + hk) * d + e;
                    kh[(size_t)j * d + e] = p->val[T_K][src];
                    vh[(size_t)j * d + e] = p->val[T_V][src];
                }
            for (int r = 0; r < p->rows && ok; r++) {
                const int gr = global_row(p, r);
                const double *q = &p->val[T_Q][(((size_t)b * N + gr) * c->heads_q + h) * d];
                hostref_attention_row(q, kh, vh, (size_t)N, (size_t)d, 1.0 / sqrt((double)d),
                                      c->causal ? gr : N - 1, out, &ref_lse, scratch);
                for (int e = 0; e < d && ok; e++) {
                    const double got = hostref_load(o, c->dtype, (((size_t)b * p->rows + r) * c->heads_q + h) * d + e);
                    const double err = fabs(got - out[e]);
                    *worst = err > *worst ? err : *worst;
                    if (!(err <= atol + rtol * fabs(out[e]))) {
                        snprintf(why, why_size, "O[b %d, row %d (global %d), head %d, %d] = %g, reference %g", b, r,
                                 gr, h, e, got, out[e]);
                        ok = false;
                    }
                }
                const double got_lse = lse[((size_t)b * c->heads_q + h) * p->rows + r];
                if (ok && !(fabs(got_lse - ref_lse) <= 2e-5 * fmax(1.0, fabs(ref_lse)))) {
                    snprintf(why, why_size, "LSE[b %d, head %d, row %d] = %.9g, reference %.9g", b, h, r, got_lse,
                             ref_lse);
                    ok = false;
                }
            }
        }
    free(o);
    free(lse);
    free(kh);
    free(vh);
    free(scratch);
    return ok;
}

/* FNV-1a over bytes, folded in. */
static uint64_t fnv(uint64_t h, const unsigned char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

/* The ring's O and LSE rows against the same rows of a one-rank ring over the whole sequence: the same
 * bytes. Also prints the hash of the whole O and LSE, gathered in global row order on rank 0. */
static bool check_bitwise(const struct problem *p, const struct call *k, const struct call *whole, char *why,
                          size_t why_size)
{
    const struct ring_case *c = &p->c;
    const size_t row = (size_t)c->heads_q * c->dim * p->esize;
    unsigned char *o = read_back(k->o, (size_t)c->batch * p->rows * row);
    unsigned char *ow = read_back(whole->o, (size_t)c->batch * c->seq * row);
    float *lse = (float *)read_back(k->lse, (size_t)c->batch * c->heads_q * p->rows * sizeof(float));
    float *lsew = (float *)read_back(whole->lse, (size_t)c->batch * c->heads_q * c->seq * sizeof(float));
    bool ok = true;
    for (int b = 0; b < c->batch && ok; b++)
        for (int r = 0; r < p->rows && ok; r++) {
            const int gr = global_row(p, r);
            if (memcmp(o + ((size_t)b * p->rows + r) * row, ow + ((size_t)b * c->seq + gr) * row, row)) {
                snprintf(why, why_size, "O row %d (global %d) of batch %d differs from the one-rank ring's", r, gr, b);
                ok = false;
            }
            for (int h = 0; h < c->heads_q && ok; h++)
                if (memcmp(&lse[((size_t)b * c->heads_q + h) * p->rows + r],
                           &lsew[((size_t)b * c->heads_q + h) * c->seq + gr], sizeof(float))) {
                    snprintf(why, why_size, "LSE row %d (global %d) differs from the one-rank ring's", r, gr);
                    ok = false;
                }
        }
    /* Rank 0's hash of the whole sequence in global order, from every rank's rows. */
    const size_t local_bytes = (size_t)c->batch * p->rows * row;
    unsigned char *all = rank == 0 ? malloc(local_bytes * (size_t)ranks) : NULL;
    MPI_Gather(o, (int)local_bytes, MPI_BYTE, all, (int)local_bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        uint64_t h = 1469598103934665603ull;
        for (int b = 0; b < c->batch; b++)
            for (int gr = 0; gr < c->seq; gr++) {
                const int chunk = gr / p->chunk_rows;
                int owner = 0, local = 0;
                for (int q = 0; q < ranks; q++)
                    for (int l = 0; l < p->chunks / ranks; l++)
                        if (flashcl_ring_global_chunk(p->chunks, ranks, q, c->causal, l) == chunk) {
                            owner = q;
                            local = l * p->chunk_rows + gr % p->chunk_rows;
                        }
                h = fnv(h, all + (size_t)owner * local_bytes + ((size_t)b * p->rows + local) * row, row);
            }
        printf("ring forward %s %s B=%d N=%d H=%d:%d d=%d on %d rank(s): O hash %016llx\n",
               flashcl_dtype_name(c->dtype), c->causal ? "causal" : "full", c->batch, c->seq, c->heads_q,
               c->heads_kv, c->dim, ranks, (unsigned long long)h);
        free(all);
    }
    free(o);
    free(ow);
    free(lse);
    free(lsew);
    return ok;
}

static void run_forward(const struct ring_case *c, uint64_t seed)
{
    struct problem p;
    problem_create(&p, c, seed);
    struct call k, whole;
    local_call(&k, &p);
    call_create(&whole, &p, p.img, c->seq);
    flashcl_status st = flashcl_ring_forward(ring, &k.a, 0, NULL);
    ck_assert_all(st == FLASHCL_SUCCESS, "flashcl_ring_forward", status_text(st));
    st = flashcl_ring_forward(self_ring, &whole.a, 0, NULL);
    ck_assert_all(st == FLASHCL_SUCCESS, "flashcl_ring_forward on one rank", status_text(st));
    char why[256] = "";
    double worst;
    ck_assert_all(check_forward(&p, &k, why, sizeof(why), &worst), "the forward against the reference", why);
    ck_assert_all(check_bitwise(&p, &k, &whole, why, sizeof(why)), "the forward's bits", why);
    call_free(&k);
    call_free(&whole);
    problem_free(&p);
}

START_TEST(forward_causal_gqa_f32)
{
    run_forward(&(struct ring_case){1, 192, 4, 2, 32, FLASHCL_F32, 1}, 11);
}
END_TEST

START_TEST(forward_full_f16)
{
    run_forward(&(struct ring_case){2, 192, 2, 2, 16, FLASHCL_F16, 0}, 12);
}
END_TEST

START_TEST(forward_causal_bf16_d64)
{
    run_forward(&(struct ring_case){1, 192, 2, 1, 64, FLASHCL_BF16, 1}, 13);
}
END_TEST

START_TEST(forward_full_gqa_f32)
{
    run_forward(&(struct ring_case){1, 96, 4, 2, 24, FLASHCL_F32, 0}, 14);
}
END_TEST

/* ---- the backward ---- */

/* Per gradient tensor, |got - ref| <= bound x max|ref|. f16/bf16: every chunk pair's dQ, dK, dV are
 * rounded to the storage type before their f32 sums. */
static double backward_bound(flashcl_dtype dtype)
{
    return dtype == FLASHCL_F32 ? 2e-5 : dtype == FLASHCL_F16 ? 5e-3 : 4e-2;
}

static bool compare(const char *name, const unsigned char *got, flashcl_dtype dtype, const double *ref, size_t n,
                    double bound, char *why, size_t why_size, double *rel)
{
    double max_ref = 0.0, max_err = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        max_ref = fmax(max_ref, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) {
        const double err = fabs(hostref_load(got, dtype, i) - ref[i]);
        if (!(err <= max_err)) {  /* NaN (an unwritten element) too */
            max_err = isnan(err) ? INFINITY : err;
            at = i;
        }
    }
    *rel = max_err / fmax(max_ref, 1e-30);
    if (*rel <= bound)
        return true;
    snprintf(why, why_size, "%s[%zu]: %g against %g (max error %.3g of max|ref| %.3g, bound %.3g)", name, at,
             hostref_load(got, dtype, at), ref[at], max_err, max_ref, bound);
    return false;
}

/* Double-precision gradients of the whole sequence, [B][N][H][d] each. */
static void reference_gradients(const struct problem *p, double *dq, double *dk, double *dv)
{
    const struct ring_case *c = &p->c;
    const int N = c->seq, d = c->dim, group = c->heads_q / c->heads_kv;
    double *q = malloc((size_t)N * d * sizeof(double)), *d_o = malloc((size_t)N * d * sizeof(double));
    double *k = malloc((size_t)N * d * sizeof(double)), *v = malloc((size_t)N * d * sizeof(double));
    double *gq = malloc((size_t)N * d * sizeof(double)), *gk = calloc((size_t)N * d, sizeof(double));
    double *gv = calloc((size_t)N * d, sizeof(double)), *scratch = malloc((size_t)(N + d) * sizeof(double));
    for (int b = 0; b < c->batch; b++)
        for (int hk = 0; hk < c->heads_kv; hk++) {
            memset(gk, 0, (size_t)N * d * sizeof(double));
            memset(gv, 0, (size_t)N * d * sizeof(double));
            for (int j = 0; j < N; j++)
                for (int e = 0; e < d; e++) {
                    const size_t src = (((size_t)b * N + j) * c->heads_kv + hk) * d + e;
                    k[(size_t)j * d + e] = p->val[T_K][src];
                    v[(size_t)j * d + e] = p->val[T_V][src];
                }
            for (int h = hk * group; h < (hk + 1) * group; h++) {
                for (int i = 0; i < N; i++)
                    for (int e = 0; e < d; e++) {
                        const size_t src = (((size_t)b * N + i) * c->heads_q + h) * d + e;
                        q[(size_t)i * d + e] = p->val[T_Q][src];
                        d_o[(size_t)i * d + e] = p->val[T_DO][src];
                    }
                hostref_attention_backward(q, k, v, d_o, (size_t)N, (size_t)N, (size_t)d, 1.0 / sqrt((double)d),
                                           c->causal, gq, gk, gv, scratch);
                for (int i = 0; i < N; i++)
                    for (int e = 0; e < d; e++)
                        dq[(((size_t)b * N + i) * c->heads_q + h) * d + e] = gq[(size_t)i * d + e];
            }
            for (int j = 0; j < N; j++)
                for (int e = 0; e < d; e++) {
                    dk[(((size_t)b * N + j) * c->heads_kv + hk) * d + e] = gk[(size_t)j * d + e];
                    dv[(((size_t)b * N + j) * c->heads_kv + hk) * d + e] = gv[(size_t)j * d + e];
                }
        }
    free(q);
    free(d_o);
    free(k);
    free(v);
    free(gq);
    free(gk);
    free(gv);
    free(scratch);
}

/* This rank's rows of a double [B][N][H][d] array. */
static double *shard_values(const struct problem *p, const double *whole, int heads)
{
    return (double *)shard(p, (const unsigned char *)whole, heads, sizeof(double));
}

/* The single device's gradients (flashcl_forward, flashcl_backward on the whole sequence) as doubles. */
static double *values_of(cl_mem m, size_t n, flashcl_dtype dtype)
{
    unsigned char *img = read_back(m, n * flashcl_dtype_size(dtype));
    double *out = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        out[i] = hostref_load(img, dtype, i);
    free(img);
    return out;
}

static void run_backward(const struct ring_case *c, uint64_t seed)
{
    struct problem p;
    problem_create(&p, c, seed);
    struct call k, whole;
    local_call(&k, &p);
    call_create(&whole, &p, p.img, c->seq);
    flashcl_status st = flashcl_ring_forward(ring, &k.a, 0, NULL);
    ck_assert_all(st == FLASHCL_SUCCESS, "flashcl_ring_forward", status_text(st));
    st = flashcl_ring_backward(ring, &k.a, &k.g, 0, NULL);
    ck_assert_all(st == FLASHCL_SUCCESS, "flashcl_ring_backward", status_text(st));
    /* One device, the core library alone. */
    cl_event fwd = NULL, bwd = NULL;
    ck_assert_int_eq(flashcl_forward(ctx, &whole.a, queue, 0, NULL, &fwd), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_backward(ctx, &whole.a, &whole.g, NULL, queue, 1, &fwd, &bwd), FLASHCL_SUCCESS);
    clWaitForEvents(1, &bwd);
    clReleaseEvent(fwd);
    clReleaseEvent(bwd);

    const size_t nq = p.count[T_Q], nk = p.count[T_K];
    double *rq = malloc(nq * sizeof(double)), *rk = malloc(nk * sizeof(double)), *rv = malloc(nk * sizeof(double));
    reference_gradients(&p, rq, rk, rv);
    const double *refs[3] = {rq, rk, rv};
    double *single[3] = {values_of(whole.d_q, nq, c->dtype), values_of(whole.d_k, nk, c->dtype),
                         values_of(whole.d_v, nk, c->dtype)};
    const cl_mem got_mem[3] = {k.d_q, k.d_k, k.d_v};
    const char *names[3] = {"dQ", "dK", "dV"};
    char why[512] = "";
    bool ok_ref = true, ok_single = true;
    double rel_ref[3], rel_single[3];
    for (int g = 0; g < 3 && ok_ref && ok_single; g++) {
        const int heads = g == 0 ? c->heads_q : c->heads_kv;
        const size_t n = (size_t)c->batch * p.rows * heads * c->dim;
        unsigned char *got = read_back(got_mem[g], n * p.esize);
        double *ref = shard_values(&p, refs[g], heads), *one = shard_values(&p, single[g], heads);
        ok_ref = compare(names[g], got, c->dtype, ref, n, backward_bound(c->dtype), why, sizeof(why), &rel_ref[g]);
        /* Against one device: both round the same products; the ring's sums add the pairs' rounding. */
        if (ok_ref)
            ok_single = compare(names[g], got, c->dtype, one, n, backward_bound(c->dtype), why, sizeof(why),
                                &rel_single[g]);
        free(got);
        free(ref);
        free(one);
    }
    if (ok_ref && ok_single && rank == 0)
        printf("ring backward %s %s H=%d:%d d=%d on %d rank(s): error / max|ref| dQ %.2g dK %.2g dV %.2g; "
               "against one device %.2g %.2g %.2g\n",
               flashcl_dtype_name(c->dtype), c->causal ? "causal" : "full", c->heads_q, c->heads_kv, c->dim, ranks,
               rel_ref[0], rel_ref[1], rel_ref[2], rel_single[0], rel_single[1], rel_single[2]);
    ck_assert_all(ok_ref, "the backward against the reference", why);
    ck_assert_all(ok_single, "the backward against one device", why);
    for (int g = 0; g < 3; g++)
        free(single[g]);
    free(rq);
    free(rk);
    free(rv);
    call_free(&k);
    call_free(&whole);
    problem_free(&p);
}

START_TEST(backward_causal_gqa_f32)
{
    run_backward(&(struct ring_case){1, 96, 4, 2, 32, FLASHCL_F32, 1}, 21);
}
END_TEST

START_TEST(backward_full_f16)
{
    run_backward(&(struct ring_case){1, 96, 2, 1, 16, FLASHCL_F16, 0}, 22);
}
END_TEST

START_TEST(backward_causal_bf16)
{
    run_backward(&(struct ring_case){2, 96, 2, 2, 16, FLASHCL_BF16, 1}, 23);
}
END_TEST

/* ---- failures: an error on every rank, never a hang ---- */

/* Every rank got an error: `expected` on the ranks in `culprits` (a bit each), FLASHCL_RING_ERROR_PEER
 * naming the first culprit elsewhere. */
static void expect_failure(flashcl_status st, unsigned culprits, flashcl_status expected)
{
    const bool culprit = (culprits >> rank) & 1u;
    char why[1600];
    snprintf(why, sizeof(why), "got %s", status_text(st));
    if (culprits == ~0u)
        ck_assert_all(st == expected, "the same error on every rank", why);
    else if (culprit)
        ck_assert_all(st == expected, "the failing rank's own error", why);
    else
        ck_assert_all(st == FLASHCL_RING_ERROR_PEER && strstr(flashcl_ring_last_error(), "rank "),
                      "FLASHCL_RING_ERROR_PEER on the other ranks", why);
}

/* After any failure the ring still works: no message of the failed call is left over. */
static void expect_ring_works(void)
{
    run_forward(&(struct ring_case){1, 96, 2, 2, 16, FLASHCL_F32, 1}, 31);
}

START_TEST(failing_rank_bad_input)
{
    struct problem p;
    problem_create(&p, &(struct ring_case){1, 96, 2, 2, 16, FLASHCL_F32, 1}, 32);
    struct call k;
    local_call(&k, &p);
    struct flashcl_attention a = k.a;
    const int culprit = ranks - 1;
    if (rank == culprit)
        a.k.mem = NULL;
    expect_failure(flashcl_ring_forward(ring, &a, 0, NULL), 1u << culprit, FLASHCL_ERROR_NULL_ARGUMENT);
    a = k.a;
    if (rank == culprit)
        a.lse.mem = NULL;  /* the backward needs it */
    expect_failure(flashcl_ring_backward(ring, &a, &k.g, 0, NULL), 1u << culprit, FLASHCL_ERROR_NULL_ARGUMENT);
    call_free(&k);
    problem_free(&p);
    expect_ring_works();
}
END_TEST

START_TEST(ranks_disagree)
{
    struct problem p;
    problem_create(&p, &(struct ring_case){1, 96, 2, 2, 16, FLASHCL_F32, 0}, 33);
    struct call k;
    local_call(&k, &p);
    struct flashcl_attention a = k.a;
    if (rank == ranks - 1)
        a.scale = 0.5f;
    const flashcl_status st = flashcl_ring_forward(ring, &a, 0, NULL);
    expect_failure(st, ranks > 1 ? ~0u : 1u, ranks > 1 ? FLASHCL_ERROR_INVALID_SHAPE : FLASHCL_SUCCESS);
    if (ranks > 1)
        ck_assert_all(strstr(flashcl_ring_last_error(), "scale") != NULL, "the message names the field",
                      flashcl_ring_last_error());
    /* A window is refused on the rank that passes it, the others told. */
    a = k.a;
    if (rank == 0) {
        a.mask = FLASHCL_MASK_WINDOW;
        a.window_left = 4;
    }
    expect_failure(flashcl_ring_forward(ring, &a, 0, NULL), 1u, FLASHCL_INVALID_VALUE);
    /* So are ALiBi slopes (a pair's call would count distances from its own diagonal) and a value head
     * dim of its own, on the last rank. */
    a = k.a;
    if (rank == ranks - 1)
        a.alibi_slopes = (flashcl_vector){a.q.mem, 0};
    expect_failure(flashcl_ring_forward(ring, &a, 0, NULL), 1u << (ranks - 1), FLASHCL_INVALID_VALUE);
    a = k.a;
    if (rank == ranks - 1)
        a.head_dim_v = a.head_dim / 2;
    expect_failure(flashcl_ring_forward(ring, &a, 0, NULL), 1u << (ranks - 1), FLASHCL_INVALID_VALUE);
    call_free(&k);
    problem_free(&p);
    expect_ring_works();
}
END_TEST

START_TEST(sequence_not_in_chunks)
{
    /* 20 rows a rank: no chunk count of 24 or 16 divides the sequence on any rank count here. */
    struct problem p;
    problem_create(&p, &(struct ring_case){1, 96, 1, 1, 8, FLASHCL_F32, 0}, 34);
    struct call k;
    unsigned char *img[N_INPUTS] = {p.img[0], p.img[1], p.img[2], p.img[3]};
    call_create(&k, &p, img, 20 + (ranks == 4));  /* 84 rows on 4 ranks: still no 24 or 16 */
    expect_failure(flashcl_ring_forward(ring, &k.a, 0, NULL), ~0u, FLASHCL_ERROR_INVALID_SHAPE);
    call_free(&k);
    problem_free(&p);
}
END_TEST

START_TEST(failing_rank_mid_ring)
{
    struct problem p;
    problem_create(&p, &(struct ring_case){1, 96, 2, 2, 16, FLASHCL_F32, 1}, 35);
    struct call k;
    local_call(&k, &p);
    fcl_ring_test_fail_rank = ranks - 1;
    fcl_ring_test_fail_step = ranks - 1;  /* its last step: the others are past their first messages */
    const unsigned culprit = 1u << (ranks - 1);
    expect_failure(flashcl_ring_forward(ring, &k.a, 0, NULL), culprit, FLASHCL_OUT_OF_RESOURCES);
    fcl_ring_test_fail_rank = fcl_ring_test_fail_step = -1;
    ck_assert_all(flashcl_ring_forward(ring, &k.a, 0, NULL) == FLASHCL_SUCCESS, "a forward for the backward",
                  flashcl_ring_last_error());
    fcl_ring_test_fail_rank = ranks - 1;
    fcl_ring_test_fail_step = ranks > 1 ? 1 : 0;
    expect_failure(flashcl_ring_backward(ring, &k.a, &k.g, 0, NULL), culprit, FLASHCL_OUT_OF_RESOURCES);
    fcl_ring_test_fail_rank = fcl_ring_test_fail_step = -1;
    call_free(&k);
    problem_free(&p);
    expect_ring_works();
}
END_TEST

START_TEST(layout)
{
    /* Zigzag: every chunk held by exactly one rank, and ranks' causal work balanced. */
    const int C = 24;
    for (int R = 1; R <= 4; R++)
        for (int causal = 0; causal <= 1; causal++) {
            int seen[24] = {0};
            long work[4] = {0};
            for (int r = 0; r < R; r++)
                for (int l = 0; l < C / R; l++) {
                    const int g = flashcl_ring_global_chunk(C, R, r, causal, l);
                    ck_assert_int_ge(g, 0);
                    ck_assert_int_lt(g, C);
                    seen[g]++;
                    work[r] += causal ? g + 1 : C;
                }
            for (int g = 0; g < C; g++)
                ck_assert_int_eq(seen[g], 1);
            for (int r = 1; r < R; r++)
                ck_assert_int_eq(work[r], work[0]);
        }
    ck_assert_int_eq(flashcl_ring_global_chunk(24, 4, 0, 1, 6), -1);
    ck_assert_int_eq(flashcl_ring_global_chunk(12, 4, 0, 1, 0), -1);  /* 8 groups do not divide 12 */
    ck_assert_int_eq(flashcl_ring_chunks(NULL, 96), 24);
    ck_assert_int_eq(flashcl_ring_chunks(NULL, 65536), 16);
    ck_assert_int_eq(flashcl_ring_chunks(NULL, 100), 0);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *t = tcase_create("ring");
    tcase_set_timeout(t, 0);
    tcase_add_test(t, layout);
    tcase_add_test(t, forward_causal_gqa_f32);
    tcase_add_test(t, forward_full_f16);
    tcase_add_test(t, forward_causal_bf16_d64);
    tcase_add_test(t, forward_full_gqa_f32);
    tcase_add_test(t, backward_causal_gqa_f32);
    tcase_add_test(t, backward_full_f16);
    tcase_add_test(t, backward_causal_bf16);
    tcase_add_test(t, failing_rank_bad_input);
    tcase_add_test(t, ranks_disagree);
    tcase_add_test(t, sequence_not_in_chunks);
    tcase_add_test(t, failing_rank_mid_ring);
    suite_add_tcase(s, t);
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    int failed = 1;
    flashcl_status st = flashcl_context_create(NULL, &ctx);
    if (st == FLASHCL_SUCCESS) {
        cl_int err;
        queue = clCreateCommandQueue(flashcl_context_cl_context(ctx), flashcl_context_device(ctx), 0, &err);
        st = flashcl_ring_create(ctx, MPI_COMM_WORLD, NULL, &ring);
        if (st == FLASHCL_SUCCESS)
            st = flashcl_ring_create(ctx, MPI_COMM_SELF, NULL, &self_ring);
    }
    if (st != FLASHCL_SUCCESS) {
        fprintf(stderr, "rank %d: set-up failed: %s\n", rank, status_text(st));
    } else {
        if (rank == 0)
            printf("ring tests on %d rank(s), device %s\n", ranks, flashcl_context_device_name(ctx));
        SRunner *runner = srunner_create(ring_suite());
        srunner_set_fork_status(runner, CK_NOFORK);  /* OpenCL and MPI do not survive fork() */
        srunner_run_all(runner, rank == 0 ? CK_NORMAL : CK_SILENT);
        failed = srunner_ntests_failed(runner);
        srunner_free(runner);
    }
    flashcl_ring_destroy(&self_ring);
    flashcl_ring_destroy(&ring);
    if (queue)
        clReleaseCommandQueue(queue);
    flashcl_context_destroy(&ctx);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
