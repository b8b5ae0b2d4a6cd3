/* One context used from several threads at once: each thread runs its own
 * problems (different head dims, so kernels build concurrently too) on its
 * own queue and checks them against the double reference itself; once as
 * planned, once split over the keys (the context's kept split workspaces
 * shared by the threads). */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

#define THREADS 4
#define CALLS 6

struct worker {
    flashcl_context *ctx;
    cl_context cl;
    cl_device_id device;
    int index;
    int failures;     /* calls that failed or disagreed with the reference */
    double max_err;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(w->cl, w->device, 0, &err);
    if (!queue) {
        w->failures = CALLS;
        return NULL;
    }
    for (int call = 0; call < CALLS; call++) {
        const int n = 40 + 7 * call + w->index, d = 16 * (1 + (w->index + call) % 4), causal = call % 2;
        const size_t elems = (size_t)n * (size_t)d;
        float *q = malloc(elems * 4), *k = malloc(elems * 4), *v = malloc(elems * 4), *o = malloc(elems * 4);
        double *kd = malloc(elems * 8), *vd = malloc(elems * 8), *scratch = malloc((size_t)n * 8);
        uint64_t state = (uint64_t)(w->index * 1000 + call) * 0x9e3779b97f4a7c15ull + 1;
        for (size_t i = 0; i < elems; i++) {
            float *dst[3] = {q, k, v};
            for (int t = 0; t < 3; t++) {  /* a per-thread generator: rng_uniform is not thread-safe */
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                dst[t][i] = (float)((double)((state * 0x2545f4914f6cdd1dull) >> 11) / 4503599627370496.0 - 1.0);
            }
            o[i] = NAN;
            kd[i] = k[i];
            vd[i] = v[i];
        }
        cl_mem mq = clCreateBuffer(w->cl, CL_MEM_COPY_HOST_PTR, elems * 4, q, &err);
        cl_mem mk = clCreateBuffer(w->cl, CL_MEM_COPY_HOST_PTR, elems * 4, k, &err);
        cl_mem mv = clCreateBuffer(w->cl, CL_MEM_COPY_HOST_PTR, elems * 4, v, &err);
        cl_mem mo = clCreateBuffer(w->cl, CL_MEM_COPY_HOST_PTR, elems * 4, o, &err);
        struct flashcl_attention a = {0};
        a.batch = a.heads_q = a.heads_kv = 1;
        a.seq_q = a.seq_kv = n;
        a.head_dim = d;
        a.q = flashcl_tensor_bnhd(mq, FLASHCL_F32, (size_t)n, 1, (size_t)d);
        a.k = flashcl_tensor_bnhd(mk, FLASHCL_F32, (size_t)n, 1, (size_t)d);
        a.v = flashcl_tensor_bnhd(mv, FLASHCL_F32, (size_t)n, 1, (size_t)d);
        a.o = flashcl_tensor_bnhd(mo, FLASHCL_F32, (size_t)n, 1, (size_t)d);
        a.mask = causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
        bool ok = flashcl_forward(w->ctx, &a, queue, 0, NULL, NULL) == FLASHCL_SUCCESS &&
                  clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, elems * 4, o, 0, NULL, NULL) == CL_SUCCESS;
        for (int row = 0; ok && row < n; row++) {
            double qd[64], ref[64], lse;
            for (int e = 0; e < d; e++)
                qd[e] = q[row * d + e];
            hostref_attention_row(qd, kd, vd, (size_t)n, (size_t)d, 1.0 / sqrt((double)d),
                                  causal ? row : n - 1, ref, &lse, scratch);
            for (int e = 0; e < d; e++) {
                const double diff = fabs(o[row * d + e] - ref[e]);
                ok = ok && diff <= 2e-6 + 2e-5 * fabs(ref[e]);
                w->max_err = fmax(w->max_err, diff);
            }
        }
        w->failures += !ok;
        clReleaseMemObject(mq);
        clReleaseMemObject(mk);
        clReleaseMemObject(mv);
        clReleaseMemObject(mo);
        free(q);
        free(k);
        free(v);
        free(o);
        free(kd);
        free(vd);
        free(scratch);
    }
    clReleaseCommandQueue(queue);
    return NULL;
}

/* Each row of kernel options in turn: the planner's own kernels, and the same calls split over their
 * keys (every call has at least three 16-key blocks), so the threads' first split calls reach the
 * context's kept workspaces together (src/workspace.c) and later ones share and replace them. */
static const char *const thread_options[] = {
    NULL,
    "register-tiled:block_n=16,splits=3;portable:block_n=16,splits=3",
};

START_TEST(concurrent_calls)
{
    struct test_env *e = test_env_get();
    /* A context of its own, so every kernel is built under contention. */
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.cache_dir = "";
    p.kernel_options = thread_options[_i];
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (struct worker){ctx, e->cl, e->device, i, 0, 0.0};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, work, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        ck_assert_int_eq(pthread_join(threads[i], NULL), 0);
        printf("%s, thread %d: %d of %d calls failed, max |err| %.2e\n", _i ? "split" : "planned", i,
               workers[i].failures, CALLS, workers[i].max_err);
        ck_assert_int_eq(workers[i].failures, 0);
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("one context, several threads");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, concurrent_calls, 0, (int)(sizeof(thread_options) / sizeof(thread_options[0])));
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
