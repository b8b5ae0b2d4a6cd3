/* Fault injection (tests/fault/fault.h): for each scenario the library call
 * is made once with nothing failing to count the OpenCL, CLBlast and host
 * allocation calls it makes, then once per k = 1..that count with the k-th
 * call failing. Every run must return a status (never crash or abort); a
 * failed run must leave the outputs untouched; every OpenCL reference the
 * library took must be released by the time its context is destroyed (and
 * none of the caller's released); host memory is checked by LeakSanitizer in
 * CI's ASan build (detect_leaks=1).
 *
 * "Untouched": when the failure comes before the library enqueued anything,
 * every byte of every output buffer is as it was. When it comes after a
 * kernel was enqueued (the split-KV merge, the standard path's later steps,
 * the backward's dK/dV or dQ kernel), the kernels already enqueued run to
 * completion: the bytes of the output views may then hold partial results
 * (the status says the call failed; the views' contents are unspecified),
 * but no byte of an output buffer outside the views changes, and no input
 * byte changes. A run where the library recovered (a kernel that failed to
 * build or launch set aside and the call planned again) must succeed with
 * results within the suite's tolerance of the unfailed run's.
 *
 * Scenarios: context creation (the library's own cl_context, with a tuning
 * file and a fresh cache folder, and on the caller's context), a forward f32
 * (register-tiled) and f16 (portable, split-KV forced) with the LSE, the
 * latter again as a context's second call (its kept split workspace reused;
 * no kept workspace may stay marked in use after any run), a
 * standard forward f32, a backward f32; each forward and backward starts on a
 * fresh context whose programs come from a warm disk cache, so the cache
 * load, build and kernel creation are inside the counted call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fault.h"
#include "flashcl_tools.h"
#include "internal.h"  /* fcl_workspace_busy */

static char cache_dir[256];

static void remove_dir(const char *dir)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void check_balanced(const char *scenario, long k)
{
    const char *what = NULL;
    const int n = fault_unbalanced_objects(&what);
    ck_assert_msg(n == 0, "%s, call %ld failing: %d OpenCL object(s) left unbalanced, e.g. %s", scenario, k, n, what);
    fault_reset_objects();
}

/* ---- context creation ---- */

static void write_tuning_file(const char *path)
{
    struct flashcl_tuned_config portable = {"portable", FLASHCL_F32, 30, 1, 5, 7, 0, 0, 1.5};
    struct flashcl_tuned_config tiled = {"register-tiled", FLASHCL_F32, 32, 0, 32, 48, 0, 0, 1.25};
    char line[512];
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("flashcl-tuning 2\n", f);
    ck_assert_flashcl_ok(flashcl_tuning_format(test_env_get()->ctx, &portable, 0, line, sizeof(line)));
    fprintf(f, "%s\n", line);
    ck_assert_flashcl_ok(flashcl_tuning_format(test_env_get()->ctx, &tiled, 0, line, sizeof(line)));
    fprintf(f, "%s\n", line);
    fclose(f);
}

static cl_uint context_refs(cl_context c)
{
    cl_uint refs = 0;
    ck_assert_cl(clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof(refs), &refs, NULL));
    return refs;
}

START_TEST(context_creation)
{
    struct test_env *e = test_env_get();
    const bool own = _i == 0;
    const char *name = own ? "context creation (own cl_context, tuning file, new cache folder)"
                           : "context creation (caller's cl_context)";
    char tuning[256], dir[300];
    snprintf(tuning, sizeof(tuning), "/tmp/flashcl-faults-%ld-tuning.txt", (long)getpid());
    snprintf(dir, sizeof(dir), "/tmp/flashcl-faults-%ld-new-cache", (long)getpid());
    write_tuning_file(tuning);
    const cl_uint refs_before = context_refs(e->cl);
    long total = 0, refused = 0;
    for (long k = 0; k <= total; k++) {
        remove_dir(dir);
        struct flashcl_context_params p = {0};
        if (!own) {
            p.context = e->cl;
            p.device = e->device;
        }
        p.tuning_file = tuning;
        p.cache_dir = dir;
        p.kernel_options = "portable:block_m=16";
        flashcl_context *ctx = (flashcl_context *)&p;  /* not NULL: a failure must set it to NULL */
        fault_arm(k);
        const flashcl_status st = flashcl_context_create(&p, &ctx);
        const struct fault_report r = fault_disarm();
        if (k == 0) {
            ck_assert_flashcl_ok(st);
            total = r.calls;
        } else {
            ck_assert_msg(r.fired, "%s: call %ld of %ld not reached", name, k, total);
        }
        if (st == FLASHCL_SUCCESS) {
            struct flashcl_tile t;
            ck_assert_flashcl_ok(test_fma_tile(ctx, 64, FLASHCL_F32, &t));  /* a usable context */
        } else {
            ck_assert_msg(ctx == NULL, "%s: a failed creation (%s failing) left *out set", name, r.failed);
            ck_assert_msg(*flashcl_last_error(), "%s: no message after %s failed", name, r.failed);
            refused++;
        }
        flashcl_context_destroy(&ctx);
        check_balanced(name, k);
        ck_assert_msg(context_refs(e->cl) == refs_before, "%s, call %ld (%s) failing: the caller's context has %u "
                      "references, had %u", name, k, r.failed, context_refs(e->cl), refs_before);
    }
    printf("%s: %ld calls, each failed in turn: %ld refused, %ld created anyway (what failed was optional)\n", name,
           total, refused, total - refused);
    remove_dir(dir);
    unlink(tuning);
}
END_TEST

/* ---- attention calls ---- */

enum call_kind { CALL_FORWARD, CALL_STANDARD, CALL_BACKWARD };

struct scenario {
    const char *name;
    enum call_kind kind;
    flashcl_dtype dtype;
    const char *kernel_options;
    bool second_call;  /* armed: the context's second call, a kept split workspace to reuse (src/workspace.c) */
};

static const struct scenario scenarios[] = {
    {"forward f32 (register-tiled)", CALL_FORWARD, FLASHCL_F32, "tensor-core:off;tf32:off"},
    {"forward f16 (portable, 3 splits)", CALL_FORWARD, FLASHCL_F16,
     "tensor-core:off;tf32:off;register-tiled:off;portable:splits=3,block_m=16,block_n=16"},
    {"forward f16 (portable, 3 splits, second call)", CALL_FORWARD, FLASHCL_F16,
     "tensor-core:off;tf32:off;register-tiled:off;portable:splits=3,block_m=16,block_n=16", true},
    {"standard forward f32", CALL_STANDARD, FLASHCL_F32, ""},
    {"backward f32", CALL_BACKWARD, FLASHCL_F32, ""},
};

enum { B = 1, HQ = 2, HK = 1, NQ = 20, NK = 70, D = 16, GUARD = 24 };
enum { T_Q, T_K, T_V, T_O, T_LSE, T_DO, T_DQ, T_DK, T_DV, N_TENSORS };

/* One tensor in a buffer of its own, its view GUARD elements in and GUARD before the end. */
struct buffer {
    cl_mem mem;
    size_t bytes, view_at, view_bytes;
    unsigned char *image;  /* what was written before the armed call */
};

struct fixture {
    flashcl_context *ctx;
    struct flashcl_attention a;
    struct flashcl_attention_grad g;
    struct buffer buf[N_TENSORS];
};

static void fixture_create(struct fixture *f, const struct scenario *s)
{
    struct test_env *e = test_env_get();
    memset(f, 0, sizeof(*f));
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.cache_dir = cache_dir;
    p.tuning_file = "";
    p.kernel_options = s->kernel_options;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &f->ctx));
    const bool backward = s->kind == CALL_BACKWARD;
    rng_seed(99);
    for (int t = 0; t < N_TENSORS; t++) {
        if (t >= T_DO && !backward)
            break;
        const bool lse = t == T_LSE;
        const flashcl_dtype dtype = lse ? FLASHCL_F32 : s->dtype;
        const size_t esize = flashcl_dtype_size(dtype);
        const size_t rows = t == T_K || t == T_V || t == T_DK || t == T_DV ? (size_t)NK : (size_t)NQ;
        const size_t heads = t == T_K || t == T_V || t == T_DK || t == T_DV ? (size_t)HK : (size_t)HQ;
        const size_t elems = B * rows * heads * (lse ? 1 : (size_t)D);
        struct buffer *b = &f->buf[t];
        b->view_at = GUARD * esize;
        b->view_bytes = elems * esize;
        b->bytes = b->view_bytes + 2 * GUARD * esize;
        b->image = malloc(b->bytes);
        ck_assert_ptr_nonnull(b->image);
        const bool output = t == T_O || t == T_LSE || t >= T_DQ;
        for (size_t x = 0; x < b->bytes / esize; x++)
            if (output)
                memset(b->image + x * esize, 0xA5 ^ (int)(x & 0x3f), esize);  /* poison, not a pattern a kernel writes */
            else
                hostref_store(b->image, dtype, x, (float)rng_uniform(-1, 1));
        cl_int err;
        b->mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, b->bytes, b->image, &err);
        ck_assert_ptr_nonnull(b->mem);
    }
    struct flashcl_attention *a = &f->a;
    a->batch = B;
    a->seq_q = NQ;
    a->seq_kv = NK;
    a->heads_q = HQ;
    a->heads_kv = HK;
    a->head_dim = D;
    a->mask = FLASHCL_MASK_CAUSAL;
    flashcl_tensor *views[N_TENSORS] = {&a->q, &a->k, &a->v, &a->o, &a->lse, &f->g.d_o, &f->g.d_q, &f->g.d_k,
                                        &f->g.d_v};
    for (int t = 0; t < N_TENSORS; t++) {
        if (!f->buf[t].mem)
            continue;
        const bool kv = t == T_K || t == T_V || t == T_DK || t == T_DV;
        *views[t] = t == T_LSE ? flashcl_tensor_lse(f->buf[t].mem, NQ, HQ)
                               : flashcl_tensor_bnhd(f->buf[t].mem, s->dtype, kv ? NK : NQ, kv ? HK : HQ, D);
        views[t]->offset = f->buf[t].view_at;
    }
    if (backward) {
        /* The backward reads the forward's O and LSE: computed now, unarmed, and kept as the images. */
        ck_assert_flashcl_ok(flashcl_forward(f->ctx, a, e->queue, 0, NULL, NULL));
        for (int t = T_O; t <= T_LSE; t++)
            ck_assert_cl(clEnqueueReadBuffer(e->queue, f->buf[t].mem, CL_TRUE, 0, f->buf[t].bytes, f->buf[t].image,
                                             0, NULL, NULL));
    }
    ck_assert_cl(clFinish(e->queue));
}

static void fixture_destroy(struct fixture *f)
{
    for (int t = 0; t < N_TENSORS; t++)
        if (f->buf[t].mem) {
            clReleaseMemObject(f->buf[t].mem);
            free(f->buf[t].image);
        }
    flashcl_context_destroy(&f->ctx);
}

static flashcl_status call(struct fixture *f, const struct scenario *s)
{
    struct test_env *e = test_env_get();
    switch (s->kind) {
    case CALL_FORWARD:
        return flashcl_forward(f->ctx, &f->a, e->queue, 0, NULL, NULL);
    case CALL_STANDARD:
        return flashcl_standard_forward(f->ctx, &f->a, NULL, e->queue, 0, NULL, NULL);
    default:
        return flashcl_backward(f->ctx, &f->a, &f->g, NULL, e->queue, 0, NULL, NULL);
    }
}

static bool is_output(const struct scenario *s, int t)
{
    return s->kind == CALL_BACKWARD ? t >= T_DQ : t == T_O || t == T_LSE;
}

static unsigned char *read_buffer(const struct buffer *b)
{
    unsigned char *h = malloc(b->bytes);
    ck_assert_ptr_nonnull(h);
    ck_assert_cl(clEnqueueReadBuffer(test_env_get()->queue, b->mem, CL_TRUE, 0, b->bytes, h, 0, NULL, NULL));
    return h;
}

START_TEST(attention_calls)
{
    struct test_env *e = test_env_get();
    const struct scenario *s = &scenarios[_i];
    unsigned char *expected[N_TENSORS] = {0};
    long total = 0, refused = 0, after_enqueue = 0, recovered = 0;
    /* Once unarmed, so the disk cache holds the programs and every counted run takes the same path. */
    struct fixture f;
    fixture_create(&f, s);
    struct flashcl_tile tile = {0};
    if (s->kind == CALL_FORWARD)
        ck_assert_flashcl_ok(flashcl_forward_config(f.ctx, &f.a, &tile));
    ck_assert_flashcl_ok(call(&f, s));
    fixture_destroy(&f);
    ck_assert_cl(clFinish(e->queue));
    fault_reset_objects();
    for (long k = 0; k <= total; k++) {
        fixture_create(&f, s);
        if (s->second_call) {
            /* Nothing failing (call 0 never comes up) but its references tracked, as the armed call will
             * release some (the kept workspace's last use); its outputs become what the armed call must
             * leave untouched. */
            fault_arm(0);
            ck_assert_flashcl_ok(call(&f, s));
            fault_disarm();
            for (int t = 0; t < N_TENSORS; t++)
                if (f.buf[t].mem)
                    ck_assert_cl(clEnqueueReadBuffer(e->queue, f.buf[t].mem, CL_TRUE, 0, f.buf[t].bytes,
                                                     f.buf[t].image, 0, NULL, NULL));
        }
        fault_arm(k);
        const flashcl_status st = call(&f, s);
        const struct fault_report r = fault_disarm();
        ck_assert_msg(!fcl_workspace_busy(f.ctx), "%s, call %ld (%s) failing: a kept workspace left in use", s->name,
                      k, r.failed);
        ck_assert_cl(clFinish(e->queue));  /* whatever was enqueued has run */
        if (k == 0) {
            ck_assert_flashcl_ok(st);
            total = r.calls;
        } else {
            ck_assert_msg(r.fired, "%s: call %ld of %ld not reached", s->name, k, total);
        }
        for (int t = 0; t < N_TENSORS; t++) {
            const struct buffer *b = &f.buf[t];
            if (!b->mem)
                continue;
            unsigned char *now = read_buffer(b);
            const bool out = is_output(s, t);
            if (!out || st != FLASHCL_SUCCESS) {
                /* Inputs always, outputs of a failed call: unchanged, but for the views of outputs once a kernel ran. */
                const bool views_may_change = out && r.enqueued_before > 0;
                for (size_t x = 0; x < b->bytes; x++)
                    ck_assert_msg(now[x] == b->image[x] || (views_may_change && x >= b->view_at &&
                                                            x < b->view_at + b->view_bytes),
                                  "%s, call %ld (%s) failing, status %s: byte %zu of tensor %d changed (%ld kernels "
                                  "enqueued before)", s->name, k, r.failed, flashcl_status_name(st), x, t,
                                  r.enqueued_before);
            } else if (k == 0) {
                expected[t] = now;
                now = NULL;
            } else {
                /* Succeeded despite the failure (recovered): the same results within tolerance. */
                const flashcl_dtype dtype = t == T_LSE ? FLASHCL_F32 : s->dtype;
                const size_t esize = flashcl_dtype_size(dtype);
                const double tol = dtype == FLASHCL_F32 ? 1e-5 : 2e-3;
                for (size_t x = 0; x < b->bytes / esize; x++) {
                    const double got = hostref_load(now, dtype, x), want = hostref_load(expected[t], dtype, x);
                    ck_assert_msg(got == want || fabs(got - want) <= tol * (1 + fabs(want)),
                                  "%s, call %ld (%s) failing, recovered: element %zu of tensor %d is %g, unfailed %g",
                                  s->name, k, r.failed, x, t, got, want);
                }
            }
            free(now);
        }
        if (k > 0 && st != FLASHCL_SUCCESS) {
            ck_assert_msg(*flashcl_last_error(), "%s: no message after %s failed", s->name, r.failed);
            refused++;
            after_enqueue += r.enqueued_before > 0;
        } else if (k > 0) {
            recovered++;
        }
        fixture_destroy(&f);
        ck_assert_cl(clFinish(e->queue));
        check_balanced(s->name, k);
    }
    printf("%s: %ld calls, each failed in turn: %ld refused (%ld after a kernel was enqueued), %ld succeeded "
           "(recovered, or an optional call)", s->name, total, refused, after_enqueue, recovered);
    if (s->kind == CALL_FORWARD)
        printf("; ran %s with %d split(s)", tile.kernel, tile.splits);
    printf("\n");
    for (int t = 0; t < N_TENSORS; t++)
        free(expected[t]);
}
END_TEST

/* ---- a failing query never lets an unsafe call through ---- */

/* O a sub-buffer over Q's bytes: refused as aliasing. With any one call of
 * the validation failing, the call must still be refused (whatever the
 * status), and Q never written. */
START_TEST(unsafe_call_never_accepted)
{
    struct test_env *e = test_env_get();
    enum { N = 16, DIM = 8 };
    const size_t bytes = N * DIM * sizeof(float);
    float host[N * DIM];
    for (int i = 0; i < N * DIM; i++)
        host[i] = (float)i;
    cl_int err;
    cl_mem big = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    cl_mem kv = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    const cl_buffer_region region = {0, bytes};
    cl_mem sub = clCreateSubBuffer(big, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    ck_assert(big && kv && sub);
    struct flashcl_attention a = {0};
    a.batch = a.heads_q = a.heads_kv = 1;
    a.seq_q = a.seq_kv = N;
    a.head_dim = DIM;
    a.q = flashcl_tensor_bnhd(big, FLASHCL_F32, N, 1, DIM);
    a.k = a.v = flashcl_tensor_bnhd(kv, FLASHCL_F32, N, 1, DIM);
    a.o = flashcl_tensor_bnhd(sub, FLASHCL_F32, N, 1, DIM);
    ck_assert_status(flashcl_forward(e->ctx, &a, e->queue, 0, NULL, NULL), FLASHCL_ERROR_ALIASING);
    long total = 0;
    for (long k = 0; k <= total; k++) {
        fault_arm(k);
        const flashcl_status st = flashcl_forward(e->ctx, &a, e->queue, 0, NULL, NULL);
        const struct fault_report r = fault_disarm();
        if (k == 0)
            total = r.calls;
        ck_assert_msg(st != FLASHCL_SUCCESS, "call %ld (%s) failing: an output aliasing an input was accepted", k,
                      r.failed);
        ck_assert_int_eq(r.enqueued_before, 0);
    }
    ck_assert_cl(clFinish(e->queue));
    float now[N * DIM];
    ck_assert_cl(clEnqueueReadBuffer(e->queue, big, CL_TRUE, 0, bytes, now, 0, NULL, NULL));
    ck_assert_int_eq(memcmp(now, host, bytes), 0);
    printf("aliasing sub-buffer: %ld calls of the validation, each failed in turn: refused every time\n", total);
    clReleaseMemObject(sub);
    clReleaseMemObject(big);
    clReleaseMemObject(kv);
    fault_reset_objects();
}
END_TEST

/* The standard paths need an in-order queue: on an out-of-order one they are
 * refused, with any one call of the check failing too. */
START_TEST(out_of_order_queue_never_accepted)
{
    struct test_env *e = test_env_get();
    cl_command_queue_properties supported = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_QUEUE_PROPERTIES, sizeof(supported), &supported, NULL));
    if (!(supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
        printf("out-of-order queue: not run, the device has none\n");
        return;
    }
    cl_int err;
    cl_command_queue ooo = clCreateCommandQueue(e->cl, e->device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    ck_assert_ptr_nonnull(ooo);
    const struct scenario forward = {"standard forward", CALL_STANDARD, FLASHCL_F32, ""};
    const struct scenario backward = {"standard backward", CALL_BACKWARD, FLASHCL_F32, ""};
    for (int which = 0; which < 2; which++) {
        const struct scenario *s = which ? &backward : &forward;
        struct fixture f;
        fixture_create(&f, s);
        long total = 0;
        for (long k = 0; k <= total; k++) {
            fault_arm(k);
            const flashcl_status st = which ? flashcl_standard_backward(f.ctx, &f.a, &f.g, NULL, ooo, 0, NULL, NULL)
                                            : flashcl_standard_forward(f.ctx, &f.a, NULL, ooo, 0, NULL, NULL);
            const struct fault_report r = fault_disarm();
            if (k == 0) {
                ck_assert_status(st, FLASHCL_INVALID_COMMAND_QUEUE);
                total = r.calls;
            }
            ck_assert_msg(st != FLASHCL_SUCCESS, "%s, call %ld (%s) failing: an out-of-order queue was accepted",
                          s->name, k, r.failed);
            ck_assert_int_eq(r.enqueued_before, 0);
        }
        printf("%s on an out-of-order queue: %ld calls of the checks, each failed in turn: refused every time\n",
               s->name, total);
        fixture_destroy(&f);
    }
    clReleaseCommandQueue(ooo);
    fault_reset_objects();
}
END_TEST

int main(void)
{
    snprintf(cache_dir, sizeof(cache_dir), "/tmp/flashcl-faults-%ld-cache", (long)getpid());
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, context_creation, 0, 2);
    tcase_add_test(tc, unsafe_call_never_accepted);
    tcase_add_test(tc, out_of_order_queue_never_accepted);
    tcase_add_loop_test(tc, attention_calls, 0, (int)(sizeof(scenarios) / sizeof(scenarios[0])));
    suite_add_tcase(s, tc);
    const int rc = test_run_suite(s);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cache_dir);
    return system(cmd) == 0 ? rc : EXIT_FAILURE;
}
