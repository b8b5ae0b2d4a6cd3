/*
 * flashcl-demo: one long-sequence attention through flashcl on the default
 * OpenCL device, checked against a double-precision reference on the CPU.
 *
 *     flashcl-demo [N] [heads] [head_dim] [causal 0|1] [exact|tf32|tf32x3]
 *                                                  (default 4096 4 64 1 exact)
 *
 * Picks the device like the library does (FLASHCL_DEVICE, else the first GPU,
 * else the first device), prints the time of the forward call (OpenCL
 * profiling events, median of 5 after a warm-up) and the largest error over
 * a sample of query rows of every head.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashcl.h"

#define SAMPLED_ROWS 32  /* per head: the full reference would cost N^2 d per head on the CPU */
#define RUNS 5

#define CHECK_CL(expr)                                                                  \
    do {                                                                                \
        cl_int e_ = (expr);                                                             \
        if (e_ != CL_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #expr, e_);  \
            exit(EXIT_FAILURE);                                                         \
        }                                                                               \
    } while (0)

static void die_flashcl(flashcl_status st, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", what, flashcl_status_name(st), flashcl_last_error());
    exit(EXIT_FAILURE);
}

static float random_uniform(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f;  /* [-1, 1) */
}

/* Double-precision attention for one query row of one head ([N, H, d] layout). */
static void reference_row(const float *q, const float *k, const float *v, int n, int heads, int d,
                          int h, int row, int causal, double *out)
{
    const double scale = 1.0 / sqrt((double)d);
    const int last = causal ? row : n - 1;
    double *s = malloc((size_t)(last + 1) * sizeof(double));
    double max = -INFINITY, sum = 0;
    for (int j = 0; j <= last; j++) {
        double dot = 0;
        for (int e = 0; e < d; e++)
            dot += (double)q[((size_t)row * heads + h) * d + e] * k[((size_t)j * heads + h) * d + e];
        s[j] = dot * scale;
        max = fmax(max, s[j]);
    }
    for (int e = 0; e < d; e++)
        out[e] = 0;
    for (int j = 0; j <= last; j++) {
        const double p = exp(s[j] - max);
        sum += p;
        for (int e = 0; e < d; e++)
            out[e] += p * v[((size_t)j * heads + h) * d + e];
    }
    for (int e = 0; e < d; e++)
        out[e] /= sum;
    free(s);
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 4096;
    const int heads = argc > 2 ? atoi(argv[2]) : 4;
    const int d = argc > 3 ? atoi(argv[3]) : 64;
    const int causal = argc > 4 ? atoi(argv[4]) : 1;
    const char *precision_name = argc > 5 ? argv[5] : "exact";
    const enum flashcl_precision precision = strcmp(precision_name, "tf32") == 0     ? FLASHCL_PRECISION_TF32
                                             : strcmp(precision_name, "tf32x3") == 0 ? FLASHCL_PRECISION_TF32X3
                                                                                     : FLASHCL_PRECISION_EXACT;
    if (n < 1 || heads < 1 || d < 1 || d > FLASHCL_MAX_HEAD_DIM ||
        (precision == FLASHCL_PRECISION_EXACT && strcmp(precision_name, "exact") != 0)) {
        fprintf(stderr, "usage: %s [N] [heads] [head_dim 1..256] [causal 0|1] [exact|tf32|tf32x3]\n", argv[0]);
        return EXIT_FAILURE;
    }

    /* 1. A context on the default device (the library creates the cl_context). */
    flashcl_context *ctx = NULL;
    flashcl_status st = flashcl_context_create(NULL, &ctx);
    if (st != FLASHCL_SUCCESS)
        die_flashcl(st, "flashcl_context_create");
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_device_id device = flashcl_context_device(ctx);
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(cl, device, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK_CL(err);

    /* 2. Q, K, V as [1, N, heads, d] f32 buffers with random values. */
    const size_t elems = (size_t)n * heads * d, bytes = elems * sizeof(float);
    float *q = malloc(bytes), *k = malloc(bytes), *v = malloc(bytes), *o = malloc(bytes);
    if (!q || !k || !v || !o) {
        fprintf(stderr, "out of host memory\n");
        return EXIT_FAILURE;
    }
    unsigned seed = 12345;
    for (size_t i = 0; i < elems; i++) {
        q[i] = random_uniform(&seed);
        k[i] = random_uniform(&seed);
        v[i] = random_uniform(&seed);
    }
    cl_mem mq = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, q, &err);
    CHECK_CL(err);
    cl_mem mk = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, k, &err);
    CHECK_CL(err);
    cl_mem mv = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, v, &err);
    CHECK_CL(err);
    cl_mem mo = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, bytes, NULL, &err);
    CHECK_CL(err);

    /* 3. Describe the problem and enqueue it; nothing N×N is allocated. */
    struct flashcl_attention attn = {0};
    attn.batch = 1;
    attn.seq_q = attn.seq_kv = n;
    attn.heads_q = attn.heads_kv = heads;
    attn.head_dim = d;
    attn.q = flashcl_tensor_bnhd(mq, FLASHCL_F32, (size_t)n, (size_t)heads, (size_t)d);
    attn.k = flashcl_tensor_bnhd(mk, FLASHCL_F32, (size_t)n, (size_t)heads, (size_t)d);
    attn.v = flashcl_tensor_bnhd(mv, FLASHCL_F32, (size_t)n, (size_t)heads, (size_t)d);
    attn.o = flashcl_tensor_bnhd(mo, FLASHCL_F32, (size_t)n, (size_t)heads, (size_t)d);
    attn.mask = causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    attn.precision = precision;  /* TF32 modes take effect only where the TF32 kernel runs */

    double ms[RUNS];
    for (int run = -1; run < RUNS; run++) {  /* run -1 warms up (builds the kernel) */
        cl_event done;
        st = flashcl_forward(ctx, &attn, queue, 0, NULL, &done);
        if (st != FLASHCL_SUCCESS)
            die_flashcl(st, "flashcl_forward");
        CHECK_CL(clWaitForEvents(1, &done));
        cl_ulong start, end;
        CHECK_CL(clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_START, sizeof(start), &start, NULL));
        CHECK_CL(clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL));
        CHECK_CL(clReleaseEvent(done));
        if (run >= 0)
            ms[run] = (double)(end - start) * 1e-6;
    }
    qsort(ms, RUNS, sizeof(double), compare_doubles);
    CHECK_CL(clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, bytes, o, 0, NULL, NULL));

    /* 4. Check sampled rows of every head against the double reference. */
    double max_err = 0, ref[FLASHCL_MAX_HEAD_DIM];
    for (int h = 0; h < heads; h++)
        for (int s = 0; s < SAMPLED_ROWS; s++) {
            const int row = s == 0 ? 0 : s == 1 ? n - 1 : (int)(((unsigned)s * 2654435761u) % (unsigned)n);
            reference_row(q, k, v, n, heads, d, h, row, causal, ref);
            for (int e = 0; e < d; e++) {
                const double got = o[((size_t)row * heads + h) * d + e];
                const double diff = fabs(got - ref[e]);
                max_err = diff > max_err || diff != diff ? diff : max_err;
            }
        }

    const double flops = 4.0 * heads * (double)n * n * d * (causal ? 0.5 : 1.0);
    struct flashcl_tile tile;
    st = flashcl_forward_config(ctx, &attn, &tile);
    if (st != FLASHCL_SUCCESS)
        die_flashcl(st, "flashcl_forward_config");
    printf("device      %s\n", flashcl_context_device_name(ctx));
    printf("problem     N=%d heads=%d d=%d f32 %s, precision %s (%s kernel, tile %dx%d)\n", n, heads, d,
           causal ? "causal" : "full", precision_name, tile.kernel, tile.block_m,
           tile.block_n);
    printf("time        %.3f ms (median of %d), %.2f TFLOP/s\n", ms[RUNS / 2], RUNS,
           flops / (ms[RUNS / 2] * 1e-3) / 1e12);
    printf("device mem  %.1f MiB for Q, K, V, O (an N×N score matrix per head would be %.1f MiB)\n",
           4.0 * bytes / 1048576.0, (double)n * n * 4 * heads / 1048576.0);
    printf("max error   %.3g over %d rows x %d heads vs the double-precision reference\n", max_err,
           SAMPLED_ROWS, heads);

    /* Outputs lie in [-1, 1]; TF32 keeps 10 mantissa bits of every operand. */
    const int ok = max_err <= (strcmp(tile.kernel, "tf32") == 0 && precision == FLASHCL_PRECISION_TF32 ? 5e-3 : 1e-4);
    printf("%s\n", ok ? "PASS" : "FAIL");
    clReleaseMemObject(mq);
    clReleaseMemObject(mk);
    clReleaseMemObject(mv);
    clReleaseMemObject(mo);
    clReleaseCommandQueue(queue);
    flashcl_context_destroy(&ctx);
    free(q);
    free(k);
    free(v);
    free(o);
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
