/* The decode kernel (cl/flash_decode.cl: a KV head's query rows in one
 * work-group, keys split across work-groups) against the double reference
 * on random inputs with poisoned outputs: GQA/MQA/MHA, 1..16 rows, causal
 * and windows with several query positions, head dims that leave work-items
 * idle, every dtype, views whose rows do and do not start on 16 bytes,
 * forced split counts from 1 to more than there are key blocks, and block
 * sizes 32..256; which calls the planner gives it; repeatability by bytes.
 * Packed batches and KV caches (contiguous and paged) run it in test_varlen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "internal.h"  /* the context's kept workspaces (split_workspace_kept) */
#include "test_hooks.h"

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16
#define WINDOW(l, r) .windowed = 1, .window_left = (l), .window_right = (r)
/* Kernel options that leave the decode calls to this file's kernel where
 * tensor cores would take them (flash_decode_mma.cl: test_tensor_cores). */
#define FMA_DECODE "decode-tensor-core:off;"

/* batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, lse */
static const struct test_case cases[] = {
    {2, 1, 300, 8, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1},       /* GQA 4:1, one query: 4 rows */
    {1, 1, 1, 4, 4, 4, F32, 0, 0, LAYOUT_BNHD, 1},          /* one key, MHA, the smallest head dim */
    {3, 2, 257, 6, 2, 128, BF16, 1, 0, LAYOUT_PADDED, 1},   /* 6 rows (ROWS 8), rows off 16 bytes */
    {1, 4, 129, 4, 1, 80, F32, 1, 0, LAYOUT_BHND, 1},       /* MQA, 16 rows, d = 80: 20 chunks a row */
    {2, 3, 200, 2, 2, 256, F16, 0, 0, LAYOUT_BNHD, 1, WINDOW(50, 0)},
    {1, 8, 5, 2, 1, 32, F32, 1, 0, LAYOUT_BNHD, 1},         /* Nq > Nk causal: rows that see no key */
    {2, 2, 100, 2, 1, 12, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(17, 3)},  /* d = 12: 3 chunks, teams of 4 */
    {1, 1, 700, 2, 1, 36, BF16, 0, -0.4f, LAYOUT_BNHD, 1},  /* negative scale; d = 36 leaves lanes idle */
    {1, 5, 64, 3, 1, 64, F16, 1, 0, LAYOUT_BNHD, 0},        /* 15 rows, no LSE */
};

/* Decode forced with a block size and a split count (or none: the planner's choice). */
static const char *const contexts[] = {
    FMA_DECODE,
    FMA_DECODE "decode:block_n=32,splits=1",
    FMA_DECODE "decode:block_n=64,splits=7",
    FMA_DECODE "decode:block_n=256,splits=64",  /* more splits than key blocks: one a block */
    FMA_DECODE "decode:block_n=128,splits=2",
};

/* Each case on the default context and on one forced context (in turn, so
 * every forced shape meets several cases; fewer programs to build). */
START_TEST(against_reference)
{
    const size_t n_forced = sizeof(contexts) / sizeof(contexts[0]) - 1;
    for (size_t i = 0; i < sizeof(contexts) / sizeof(contexts[0]); i++) {
        if (i > 0 && i != 1 + (size_t)_i % n_forced)
            continue;
        flashcl_context *ctx = test_context_with_options(contexts[i]);
        struct case_result r;
        rng_seed(4000 + 31 * (uint64_t)_i + (uint64_t)i);
        test_run_case(ctx, &cases[_i], &r);
        ck_assert_msg(kernel_is(r.kernel, "decode"), "case %d ran %s, not decode", _i,
                      r.kernel);
        const struct test_case *c = &cases[_i];
        printf("decode %-30s B=%d Nq=%d Nk=%-4d Hq=%d Hkv=%d d=%-3d dtype=%d: max|err| %.2e, LSE %.2e\n",
               contexts[i] ? contexts[i] : "(default)", c->batch, c->seq_q, c->seq_kv, c->heads_q, c->heads_kv,
               c->head_dim, (int)c->dtype, r.max_abs_err, r.max_lse_err);
    }
}
END_TEST

/* Bit-identical results run to run, with and without splits (the partials merge in a fixed order). */
START_TEST(repeatable)
{
    const struct test_case c = {2, 1, 1000, 8, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1};
    for (int split = 0; split < 2; split++) {
        flashcl_context *ctx = test_context_with_options(split ? FMA_DECODE "decode:splits=9"
                                                               : FMA_DECODE "decode:splits=1");
        struct case_result a, b;
        rng_seed(77);
        test_run_case(ctx, &c, &a);
        rng_seed(77);
        test_run_case(ctx, &c, &b);
        ck_assert_str_eq(a.kernel, "decode");
        ck_assert_msg(a.output_hash == b.output_hash, "two runs gave different bytes (splits %s)",
                      split ? "9" : "1");
    }
}
END_TEST

static struct flashcl_attention problem(cl_mem buf, int seq_q, int heads_q, int heads_kv, int head_dim)
{
    struct flashcl_attention a = {0};
    a.batch = 2;
    a.seq_q = seq_q;
    a.seq_kv = 4096;
    a.heads_q = heads_q;
    a.heads_kv = heads_kv;
    a.head_dim = head_dim;
    a.q = flashcl_tensor_bnhd(buf, F16, (size_t)seq_q, (size_t)heads_q, (size_t)head_dim);
    a.k = a.v = flashcl_tensor_bnhd(buf, F16, 4096, (size_t)heads_kv, (size_t)head_dim);
    a.o = a.q;
    a.o.mem = NULL;  /* set by the caller */
    return a;
}

/* The planner gives decode the calls whose KV head's rows fit a work-group
 * (group x seq_q <= 16) and a head dim of 4s; the rest go to the other
 * kernels. Its split count grows as the grid shrinks, within the key blocks. */
START_TEST(planned_where_rows_fit)
{
    struct test_env *e = test_env_get();
    cl_mem buf = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 4096 * 32 * 128 * 2, NULL, NULL);
    cl_mem out = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * 32 * 128 * 2, NULL, NULL);
    ck_assert(buf && out);
    static const struct { int seq_q, heads_q, heads_kv, head_dim; int decode; } calls[] = {
        {1, 32, 8, 128, 1}, {4, 32, 8, 128, 1}, {5, 32, 8, 128, 0}, {1, 16, 1, 64, 1}, {1, 32, 1, 64, 0},
        {16, 4, 4, 64, 1}, {17, 4, 4, 64, 0}, {1, 8, 8, 30, 0}, {1, 8, 2, 36, 1}, {1, 56, 8, 256, 1},
    };
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        struct flashcl_attention a = problem(buf, calls[i].seq_q, calls[i].heads_q, calls[i].heads_kv,
                                             calls[i].head_dim);
        a.o.mem = out;
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_forward_config(test_context_with_options(FMA_DECODE), &a, &t));
        ck_assert_msg((kernel_is(t.kernel, "decode")) == calls[i].decode, "call %zu: planned %s", i,
                      t.kernel);
        if (kernel_is(t.kernel, "decode")) {
            ck_assert_int_eq(t.block_m, calls[i].seq_q);
            ck_assert_int_ge(t.splits, 1);
            ck_assert_int_le(t.splits, (4096 + t.block_n - 1) / t.block_n);
        }
    }
    /* Forced splits are reported, capped at one a key block. */
    struct flashcl_attention a = problem(buf, 1, 32, 8, 128);
    a.o.mem = out;
    struct flashcl_tile t;
    flashcl_context *forced = test_context_with_options(FMA_DECODE "decode:block_n=128,splits=5");
    ck_assert_flashcl_ok(flashcl_forward_config(forced, &a, &t));
    ck_assert_str_eq(t.kernel, "decode");
    ck_assert_int_eq(t.splits, 5);
    ck_assert_int_eq(t.block_n, 128);
    a.seq_kv = 200;
    a.k = a.v = flashcl_tensor_bnhd(buf, F16, 200, 8, 128);
    ck_assert_flashcl_ok(flashcl_forward_config(forced, &a, &t));
    ck_assert_int_eq(t.splits, 2);
    /* Where tensor cores exist (assumed here: nothing is launched), f16 calls of a head dim they take
     * plan the tensor-core decode kernel; those of another head dim, this one. */
    struct flashcl_context_params params = {0};
    params.context = e->cl;
    params.device = e->device;
    params.local_mem_bytes = 232448;  /* an H200's, whatever this device has */
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .assume_compute_capability = 90};
    flashcl_context *tc = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&params, &hooks, &tc));
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        struct flashcl_attention b = problem(buf, calls[i].seq_q, calls[i].heads_q, calls[i].heads_kv,
                                             calls[i].head_dim);
        b.o.mem = out;
        ck_assert_flashcl_ok(flashcl_forward_config(tc, &b, &t));
        const char *const want = !calls[i].decode ? t.kernel
                                          : calls[i].head_dim % 16 == 0 ? "decode-tensor-core"
                                                                        : "decode";
        ck_assert_msg(kernel_is(t.kernel, want), "call %zu with tensor cores: planned %s", i, t.kernel);
        ck_assert(calls[i].decode || (!kernel_is(t.kernel, "decode") &&
                                      !kernel_is(t.kernel, "decode-tensor-core")));
    }
    flashcl_context_destroy(&tc);
    /* Turned off, the same call runs elsewhere. */
    ck_assert_flashcl_ok(flashcl_forward_config(test_context_with_options("decode:off;decode-tensor-core:off"), &a, &t));
    ck_assert_str_ne(t.kernel, "decode");
    clReleaseMemObject(buf);
    clReleaseMemObject(out);
}
END_TEST

/* One KV head's nk x d random f32 keys and values: buffers, and the double copies the reference reads. */
struct random_kv {
    double *k, *v, *scratch;  /* scratch: nk doubles for hostref_attention_row */
    cl_mem k_mem, v_mem;
};

static void random_kv_make(struct test_env *e, int nk, int d, struct random_kv *kv)
{
    const size_t n = (size_t)nk * (size_t)d;
    float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    kv->k = malloc(n * sizeof(double));
    kv->v = malloc(n * sizeof(double));
    kv->scratch = malloc((size_t)nk * sizeof(double));
    ck_assert(k && v && kv->k && kv->v && kv->scratch);
    for (size_t i = 0; i < n; i++) {
        kv->k[i] = k[i] = (float)rng_uniform(-1.0, 1.0);
        kv->v[i] = v[i] = (float)rng_uniform(-1.0, 1.0);
    }
    cl_int err;
    kv->k_mem = clCreateBuffer(e->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * sizeof(float), k, &err);
    kv->v_mem = clCreateBuffer(e->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * sizeof(float), v, &err);
    ck_assert(kv->k_mem && kv->v_mem);
    free(k);
    free(v);
}

static void random_kv_free(struct random_kv *kv)
{
    clReleaseMemObject(kv->k_mem);
    clReleaseMemObject(kv->v_mem);
    free(kv->k);
    free(kv->v);
    free(kv->scratch);
}

/* Split calls share nothing between them: one whose wait list fails (a user
 * event set to an error) leaves a later one, on another queue with no wait
 * list, to complete and be right. (A workspace kept between calls and ordered
 * by events once made it fail or hang.) */
START_TEST(split_calls_independent)
{
    enum { NK = 1024, D = 64 };
    struct test_env *e = test_env_get();
    flashcl_context *ctx = test_context_with_options(FMA_DECODE "decode:splits=4");
    cl_int err;
    cl_command_queue other = clCreateCommandQueue(e->cl, e->device, 0, &err);
    ck_assert_cl(err);
    float q[D], o[D];
    double qd[D], ref[D], lse;
    rng_seed(99);
    for (int i = 0; i < D; i++)
        qd[i] = q[i] = (float)rng_uniform(-1.0, 1.0);
    struct random_kv kv;
    random_kv_make(e, NK, D, &kv);
    hostref_attention_row(qd, kv.k, kv.v, NK, D, 0.125, NK - 1, ref, &lse, kv.scratch);
    /* Q, the second call's O, and the first call's own O: what runs of a command whose wait list failed is
     * the implementation's (Intel's CPU runtime ran some of them, writing the first call's O late). */
    cl_mem bufs[3] = {clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(q), q, &err),
                      clCreateBuffer(e->cl, CL_MEM_READ_WRITE, sizeof(o), NULL, &err),
                      clCreateBuffer(e->cl, CL_MEM_READ_WRITE, sizeof(o), NULL, &err)};
    ck_assert(bufs[0] && bufs[1] && bufs[2]);
    struct flashcl_attention a = {0};
    a.batch = a.seq_q = a.heads_q = a.heads_kv = 1;
    a.seq_kv = NK;
    a.head_dim = D;
    a.q = flashcl_tensor_bnhd(bufs[0], F32, 1, 1, D);
    a.k = flashcl_tensor_bnhd(kv.k_mem, F32, NK, 1, D);
    a.v = flashcl_tensor_bnhd(kv.v_mem, F32, NK, 1, D);
    a.o = flashcl_tensor_bnhd(bufs[1], F32, 1, 1, D);
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_int_eq(t.splits, 4);

    cl_event gate = clCreateUserEvent(e->cl, &err), first = NULL, second = NULL;
    ck_assert_cl(err);
    struct flashcl_attention gated = a;
    gated.o = flashcl_tensor_bnhd(bufs[2], F32, 1, 1, D);
    ck_assert_flashcl_ok(flashcl_forward(ctx, &gated, e->queue, 1, &gate, &first));
    clFlush(e->queue);
    ck_assert_cl(clSetUserEventStatus(gate, -1));  /* the first call's wait list fails */
    ck_assert_flashcl_ok(flashcl_forward(ctx, &a, other, 0, NULL, &second));
    clFlush(other);
    cl_int status = 1;
    for (int tries = 0; tries < 3000 && status != CL_COMPLETE && status >= 0; tries++) {  /* 30 s at most */
        ck_assert_cl(clGetEventInfo(second, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, NULL));
        if (status != CL_COMPLETE)
            nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    ck_assert_msg(status == CL_COMPLETE, "the second split call did not complete (status %d)", status);
    ck_assert_cl(clEnqueueReadBuffer(other, bufs[1], CL_TRUE, 0, sizeof(o), o, 0, NULL, NULL));
    for (int c = 0; c < D; c++)
        ck_assert_msg(fabs(o[c] - ref[c]) <= 1e-5 + 1e-5 * fabs(ref[c]), "O[%d] = %g, reference %g", c, o[c], ref[c]);
    clWaitForEvents(1, &first);  /* completes with an error status: its wait list failed */
    clReleaseEvent(first);
    clReleaseEvent(second);
    clReleaseEvent(gate);
    for (int i = 0; i < 3; i++)
        clReleaseMemObject(bufs[i]);
    random_kv_free(&kv);
    clReleaseCommandQueue(other);
}
END_TEST

/* One decode call of `heads` (1 or 2) query heads against kv's keys, on a context forcing splits: its
 * random Q, its O poisoned (NaN: an unwritten element fails) and its reference. */
enum { CALL_NK = 777, CALL_D = 32 };
struct split_call {
    cl_mem q, o;
    int heads;
    double ref[2 * CALL_D];
    struct flashcl_attention a;
};

static void split_call_make(struct test_env *e, const struct random_kv *kv, int heads, struct split_call *c)
{
    float q[2 * CALL_D], poison[2 * CALL_D];
    double qd[CALL_D], lse;
    c->heads = heads;
    for (int h = 0; h < heads; h++) {
        for (int i = 0; i < CALL_D; i++)
            qd[i] = q[h * CALL_D + i] = (float)rng_uniform(-1.0, 1.0);
        hostref_attention_row(qd, kv->k, kv->v, CALL_NK, CALL_D, 1.0 / sqrt((double)CALL_D), CALL_NK - 1,
                              c->ref + h * CALL_D, &lse, kv->scratch);
    }
    memset(poison, 0xFF, sizeof(poison));
    cl_int err;
    c->q = clCreateBuffer(e->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(q), q, &err);
    c->o = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(poison), poison, &err);
    ck_assert(c->q && c->o);
    struct flashcl_attention *a = &c->a;
    *a = (struct flashcl_attention){0};
    a->batch = a->seq_q = a->heads_kv = 1;
    a->heads_q = heads;
    a->seq_kv = CALL_NK;
    a->head_dim = CALL_D;
    a->q = flashcl_tensor_bnhd(c->q, F32, 1, (size_t)heads, CALL_D);
    a->k = flashcl_tensor_bnhd(kv->k_mem, F32, CALL_NK, 1, CALL_D);
    a->v = flashcl_tensor_bnhd(kv->v_mem, F32, CALL_NK, 1, CALL_D);
    a->o = flashcl_tensor_bnhd(c->o, F32, 1, (size_t)heads, CALL_D);
}

/* Checks the call's O against its reference, then releases its buffers. */
static void split_call_finish(cl_command_queue queue, struct split_call *c, const char *label)
{
    float o[2 * CALL_D];
    ck_assert_cl(clEnqueueReadBuffer(queue, c->o, CL_TRUE, 0, (size_t)c->heads * CALL_D * sizeof(float), o, 0, NULL,
                                     NULL));
    for (int i = 0; i < c->heads * CALL_D; i++)
        ck_assert_msg(fabs(o[i] - c->ref[i]) <= 1e-5 + 1e-5 * fabs(c->ref[i]), "%s: O[%d] = %g, reference %g", label,
                      i, o[i], c->ref[i]);
    clReleaseMemObject(c->q);
    clReleaseMemObject(c->o);
}

/* Split calls enqueued together behind one user event, with no order between them (an out-of-order
 * queue where the device has one), of two workspace sizes (one and two query heads), each with its own
 * Q: a buffer the context keeps (src/workspace.c) goes to a call only where no command can still use
 * it, so every output is its own reference's. On an in-order queue the calls share kept buffers in
 * queue order instead, which the same check covers. */
START_TEST(split_calls_in_flight)
{
    enum { CALLS = 8 };
    struct test_env *e = test_env_get();
    flashcl_context *ctx = test_context_with_options(FMA_DECODE "decode:splits=5");
    cl_command_queue_properties props = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_QUEUE_PROPERTIES, sizeof(props), &props, NULL));
    if (!(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE))
        printf("split calls in flight: the device has no out-of-order queue; in order\n");
    cl_int err;
    cl_command_queue queue =
        clCreateCommandQueue(e->cl, e->device, props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    ck_assert_cl(err);
    rng_seed(7);
    struct random_kv kv;
    random_kv_make(e, CALL_NK, CALL_D, &kv);
    struct split_call calls[CALLS];
    cl_event gate = clCreateUserEvent(e->cl, &err), done[CALLS];
    ck_assert_cl(err);
    for (int c = 0; c < CALLS; c++) {
        split_call_make(e, &kv, 1 + c % 2, &calls[c]);
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_forward_config(ctx, &calls[c].a, &t));
        ck_assert_int_eq(t.splits, 5);
        ck_assert_flashcl_ok(flashcl_forward(ctx, &calls[c].a, queue, 1, &gate, &done[c]));
    }
    ck_assert_cl(clSetUserEventStatus(gate, CL_COMPLETE));  /* all of them at once */
    ck_assert_cl(clWaitForEvents(CALLS, done));
    for (int c = 0; c < CALLS; c++) {
        char label[32];
        snprintf(label, sizeof(label), "call %d", c);
        split_call_finish(queue, &calls[c], label);
        clReleaseEvent(done[c]);
    }
    clReleaseEvent(gate);
    random_kv_free(&kv);
    clReleaseCommandQueue(queue);
}
END_TEST

/* Which kept buffer a split call gets (src/workspace.c), with the first call held back by a user event
 * so its buffer is in use for certain: the next call on the same in-order queue shares it (the queue
 * runs them in turn), a call on another queue gets a second one, and once all are done a call takes a
 * kept one again instead of making a third. No slot stays in use once a call has returned. */
START_TEST(split_workspace_kept)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params params = {0};
    params.context = e->cl;
    params.device = e->device;
    params.kernel_options = FMA_DECODE "decode:splits=3";
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&params, &ctx));
    cl_int err;
    cl_command_queue first = clCreateCommandQueue(e->cl, e->device, 0, &err), second = NULL;
    ck_assert_cl(err);
    second = clCreateCommandQueue(e->cl, e->device, 0, &err);
    ck_assert_cl(err);
    rng_seed(11);
    struct random_kv kv;
    random_kv_make(e, CALL_NK, CALL_D, &kv);
    struct split_call held, after, other, later;
    split_call_make(e, &kv, 2, &held);
    split_call_make(e, &kv, 1, &after);
    split_call_make(e, &kv, 2, &other);
    split_call_make(e, &kv, 1, &later);
    cl_event gate = clCreateUserEvent(e->cl, &err);
    ck_assert_cl(err);

    ck_assert_flashcl_ok(flashcl_forward(ctx, &held.a, first, 1, &gate, NULL));
    ck_assert(!fcl_workspace_busy(ctx));
    const cl_mem kept = ctx->workspace[0].mem;
    ck_assert_ptr_nonnull(kept);
    ck_assert_flashcl_ok(flashcl_forward(ctx, &after.a, first, 0, NULL, NULL));
    ck_assert_msg(ctx->workspace[0].mem == kept && !ctx->workspace[1].mem,
                  "a call on the same in-order queue did not share the held call's buffer");
    ck_assert_flashcl_ok(flashcl_forward(ctx, &other.a, second, 0, NULL, NULL));
    ck_assert_msg(ctx->workspace[1].mem && ctx->workspace[1].mem != kept,
                  "a call on another queue did not get a buffer of its own while the first was in use");
    ck_assert(!fcl_workspace_busy(ctx));
    ck_assert_cl(clSetUserEventStatus(gate, CL_COMPLETE));
    ck_assert_cl(clFinish(first));
    ck_assert_cl(clFinish(second));
    ck_assert_flashcl_ok(flashcl_forward(ctx, &later.a, second, 0, NULL, NULL));
    ck_assert_msg(!ctx->workspace[2].mem, "a call made a third buffer where two kept ones were free");
    ck_assert_cl(clFinish(second));
    split_call_finish(first, &held, "held call");
    split_call_finish(first, &after, "the call after it");
    split_call_finish(second, &other, "the call on another queue");
    split_call_finish(second, &later, "the later call");
    clReleaseEvent(gate);
    random_kv_free(&kv);
    clReleaseCommandQueue(first);
    clReleaseCommandQueue(second);
    flashcl_context_destroy(&ctx);
}
END_TEST

/* The planner's view of an f16 decode of 2 sequences, GQA 8:2, 300 keys at head dim d (views on mem). */
static struct problem gqa_decode_problem(int d, cl_mem mem)
{
    struct flashcl_attention a = {0};
    a.batch = 2;
    a.seq_q = 1;
    a.seq_kv = 300;
    a.heads_q = 8;
    a.heads_kv = 2;
    a.head_dim = d;
    a.q = a.o = flashcl_tensor_bnhd(mem, F16, 1, 8, (size_t)d);
    a.k = a.v = flashcl_tensor_bnhd(mem, F16, 300, 2, (size_t)d);
    struct problem prob;
    fcl_forward_problem(&a, &prob);
    return prob;
}

/* The tensor-core decode kernel (cl/flash_decode_mma.cl) on its plain-OpenCL emulation, so its K/V
 * buffers run in CI: 2, 3 and 4 of them, as the planner picks by the local memory a context is given
 * (the most K/V in flight a compute unit, docs/perf.md v0.12), over key counts that leave a split fewer
 * blocks than buffers, and forced splits (tests/test_tensor_cores.c runs every case on the H200). */
START_TEST(emulated_tensor_core_decode_stages)
{
    struct test_env *e = test_env_get();
    static const struct {
        size_t local;  /* params.local_mem_bytes */
        int d, stages;
    } configs[] = {{48 * 1024, 64, 2}, {227 * 1024, 128, 3}, {227 * 1024, 64, 4}, {227 * 1024, 256, 3}};
    cl_ulong device_local = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(device_local), &device_local, NULL));
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
        if (device_local < configs[i].local) {
            printf("emulated decode, %d buffers: skipped (%llu bytes of local memory)\n", configs[i].stages,
                   (unsigned long long)device_local);
            continue;
        }
        const int d = configs[i].d;
        const struct test_case runs[] = {
            {2, 1, 300, 8, 2, d, F16, 0, 0, LAYOUT_BNHD, 1},                   /* GQA 4:1: 4 rows, 5 blocks */
            {1, 2, 1000, 4, 1, d, BF16, 1, 0, LAYOUT_BHND, 1, 0, 0, 1, 200, 0}, /* 8 rows, a window */
        };
        for (int split = 0; split < 2; split++) {
            struct flashcl_context_params p = {0};
            p.context = e->cl;
            p.device = e->device;
            p.local_mem_bytes = configs[i].local;
            p.kernel_options = split ? "decode:off;decode-tensor-core:splits=3" : "decode:off";
            const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .emulate_tensor_cores = true,
                                                 .assume_compute_capability = 80};
            flashcl_context *ctx = NULL;
            ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
            for (int c = 0; c < 2; c++) {
                struct case_result r;
                rng_seed(500 + 10 * i + 2 * (uint64_t)split + (uint64_t)c);
                test_run_case(ctx, &runs[c], &r);
                printf("emulated decode, %d buffers, %s, case %d: max|err| %.2e, LSE %.2e\n", configs[i].stages,
                       split ? "3 splits" : "planned splits", c, r.max_abs_err, r.max_lse_err);
                ck_assert_str_eq(r.kernel, "decode-tensor-core");
            }
            /* The buffers the plan built with: the count this context was meant to exercise. */
            cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 1 << 20, NULL, NULL);
            ck_assert_ptr_nonnull(mem);
            struct problem prob = gqa_decode_problem(d, mem);
            struct plan plan;
            ck_assert_flashcl_ok(fcl_plan(ctx, &prob, 1.0f, &plan));
            char want[16];
            snprintf(want, sizeof(want), "-DSTAGES=%d ", configs[i].stages);
            ck_assert_msg(strstr(plan.options, want), "planned %s, not %s", plan.options, want);
            clReleaseMemObject(mem);
            flashcl_context_destroy(&ctx);
        }
    }
}
END_TEST

/* Split-KV merged in place (cl/split_combine.h's split_merge_last: the last work-group of a KV head merges
 * the splits, counting the others in through the workspace's counters) against the combine step: emulated
 * decode-tensor-core, several calls on one context (each must leave the counters zero for the next), an odd
 * group, sinks, a bottom-right chunk; then the planner: in place only where asked, and not past the counters. */
START_TEST(emulated_split_merge_in_place)
{
    struct test_env *e = test_env_get();
    static const struct test_case runs[] = {
        {2, 1, 300, 8, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1},                      /* group 4 */
        {1, 1, 500, 7, 1, 32, BF16, 0, 0, LAYOUT_BHND, 1, .sinks = 1},        /* group 7, sinks */
        {3, 2, 260, 6, 2, 48, F16, 1, 0, LAYOUT_BNHD, 1},                      /* 6 rows, causal chunk */
    };
    for (int separate = 0; separate < 2; separate++) {
        struct flashcl_context_params p = {0};
        p.context = e->cl;
        p.device = e->device;
        p.kernel_options = separate ? "decode:off;decode-tensor-core:warps=2,block_n=32,splits=4"
                                    : "decode:off;decode-tensor-core:warps=2,block_n=32,splits=4,merge=in-place";
        /* New workspaces start as NaN bytes, not the zeros a CPU runtime's fresh buffer usually holds. */
        const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .emulate_tensor_cores = true,
                                             .assume_compute_capability = 80, .poison_workspace = true};
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
        for (int round = 0; round < 2; round++)
            for (size_t c = 0; c < sizeof(runs) / sizeof(runs[0]); c++) {
                struct case_result r;
                rng_seed(900 + 10 * (uint64_t)round + (uint64_t)c);
                test_run_case(ctx, &runs[c], &r);
                printf("emulated decode, 4 splits merged %s, round %d, case %zu: max|err| %.2e, LSE %.2e\n",
                       separate ? "by the combine step" : "in place", round, c, r.max_abs_err, r.max_lse_err);
                ck_assert_str_eq(r.kernel, "decode-tensor-core");
            }
        /* What the plan says: in place only where asked (the default is the combine step), and only where its
         * limits hold. */
        struct problem prob = gqa_decode_problem(64, NULL);
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &prob, 1.0f, &plan));
        ck_assert_int_eq(plan.splits, 4);
        ck_assert(plan.merge_in_place == !separate);
        prob.batch = FCL_SPLIT_COUNTERS / 2 + 1;  /* more (sequence, KV head) pairs than counters */
        ck_assert_flashcl_ok(fcl_plan(ctx, &prob, 1.0f, &plan));
        ck_assert(plan.splits == 4 && !plan.merge_in_place);
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, against_reference, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, repeatable);
    tcase_add_test(tc, planned_where_rows_fit);
    tcase_add_test(tc, split_calls_independent);
    tcase_add_test(tc, split_calls_in_flight);
    tcase_add_test(tc, split_workspace_kept);
    tcase_add_test(tc, emulated_tensor_core_decode_stages);
    tcase_add_test(tc, emulated_split_merge_in_place);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
