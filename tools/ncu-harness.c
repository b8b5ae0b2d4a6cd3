/*
 * ncu-harness.c: one flashcl forward kernel launched through CUDA's driver API, so that Nsight Compute,
 * which does not see NVIDIA OpenCL's launches, can read its counters. The kernel is the PTX NVIDIA's
 * OpenCL produced (flashcl's program cache keeps it), its static __local arrays turned into one dynamic
 * shared-memory block by tools/ncu-of-cache.sh, which builds and runs this. Same grid, work-group, layout
 * ([batch][seq][heads][d], as flashcl-bench lays it out) and arguments as src/forward.c gives the
 * tensor-core kernels (cl/flash_forward_mma.cl: no varlen, no split); random inputs in [-1, 1].
 *
 *   ncu-harness KERNEL.ptx SHARED_BYTES N HEADS D BLOCK_M WG DTYPE(1 f16, 2 bf16) [REPS]
 *
 * Prints the median time of REPS (10) launches after 2 warm-up ones, and the TFLOP/s at 4·B·H·N²·d
 * (batch B = 16384 / N, as the bench's tables); causal kernels do half of that work.
 */
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                                  \
    do {                                                                                                             \
        CUresult r_ = (call);                                                                                        \
        if (r_ != CUDA_SUCCESS) {                                                                                    \
            const char *s_ = NULL;                                                                                   \
            cuGetErrorString(r_, &s_);                                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_ ? s_ : "?");                           \
            exit(1);                                                                                                 \
        }                                                                                                            \
    } while (0)

static unsigned short to_half(float f)
{
    unsigned int x;
    memcpy(&x, &f, 4);
    const unsigned int sign = (x >> 16) & 0x8000u;
    const int e = (int)((x >> 23) & 0xff) - 127 + 15;
    if (e <= 0)
        return (unsigned short)sign;  /* |f| < 2^-14: zero is close enough for timing inputs */
    const unsigned int m = x & 0x7fffffu, half = (unsigned int)e << 10 | m >> 13;
    return (unsigned short)(sign | (half + ((m >> 12) & 1u)));  /* round half up: inputs, not results */
}

static int by_value(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 9) {
        fprintf(stderr, "usage: %s KERNEL.ptx SHARED_BYTES N HEADS D BLOCK_M WG DTYPE [REPS]\n", argv[0]);
        return 2;
    }
    const int shared = atoi(argv[2]), n = atoi(argv[3]), heads = atoi(argv[4]), d = atoi(argv[5]);
    const int block_m = atoi(argv[6]), wg = atoi(argv[7]), dtype = atoi(argv[8]);
    const int reps = argc > 9 ? atoi(argv[9]) : 10, batch = 16384 / n > 0 ? 16384 / n : 1;

    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *ptx = calloc((size_t)size + 1, 1);
    if (fread(ptx, 1, (size_t)size, f) != (size_t)size) {
        perror(argv[1]);
        return 1;
    }
    fclose(f);

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    char log[8192] = "";
    CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(size_t)sizeof(log)};
    if (cuModuleLoadDataEx(&mod, ptx, 2, opts, vals) != CUDA_SUCCESS) {
        fprintf(stderr, "JIT failed: %s\n", log);
        return 1;
    }
    CHECK(cuModuleGetFunction(&fn, mod, "flash_forward_mma"));
    CHECK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared));

    const size_t elems = (size_t)batch * n * heads * d;
    unsigned short *host = malloc(elems * 2);
    unsigned int seed = 12345u;
    CUdeviceptr buf[4];
    for (int i = 0; i < 4; i++) {
        for (size_t e = 0; e < elems; e++) {
            seed = seed * 1664525u + 1013904223u;
            const float v = (float)(seed >> 8) / 8388608.0f - 1.0f;
            unsigned int bits;
            memcpy(&bits, &v, 4);
            host[e] = dtype == 2 ? (unsigned short)(bits >> 16) : to_half(v);
        }
        CHECK(cuMemAlloc(&buf[i], elems * 2));
        CHECK(cuMemcpyHtoD(buf[i], host, elems * 2));
    }
    CUdeviceptr lse;
    CHECK(cuMemAlloc(&lse, (size_t)batch * heads * n * 4));

    /* flash_forward_mma's arguments (cl/flash_forward_mma.cl): q, k, v, o and lse, each with offset and
     * batch, seq and head strides in elements; has_lse, seq_q, seq_kv, group, scale_log2. */
    unsigned long long strides[4] = {0, (unsigned long long)n * heads * d, (unsigned long long)heads * d,
                                     (unsigned long long)d};
    unsigned long long lse_strides[4] = {0, (unsigned long long)heads * n, 1, (unsigned long long)n};
    int has_lse = 0, seq = n, group = 1;
    float scale_log2 = (float)(1.0 / sqrt((double)d) * 1.4426950408889634);
    void *args[30];
    int a = 0;
    for (int i = 0; i < 5; i++) {
        args[a++] = i < 4 ? &buf[i] : &lse;
        for (int j = 0; j < 4; j++)
            args[a++] = i < 4 ? &strides[j] : &lse_strides[j];
    }
    args[a++] = &has_lse;
    args[a++] = &seq;
    args[a++] = &seq;
    args[a++] = &group;
    args[a++] = &scale_log2;

    const unsigned int grid_x = (unsigned int)((n + block_m - 1) / block_m);
    CUevent start, stop;
    CHECK(cuEventCreate(&start, 0));
    CHECK(cuEventCreate(&stop, 0));
    float *ms = calloc((size_t)reps, sizeof(float));
    for (int r = -2; r < reps; r++) {
        CHECK(cuEventRecord(start, 0));
        CHECK(cuLaunchKernel(fn, grid_x, (unsigned int)heads, (unsigned int)batch, (unsigned int)wg, 1, 1,
                             (unsigned int)shared, 0, args, NULL));
        CHECK(cuEventRecord(stop, 0));
        CHECK(cuEventSynchronize(stop));
        if (r >= 0)
            CHECK(cuEventElapsedTime(&ms[r], start, stop));
    }
    qsort(ms, (size_t)reps, sizeof(float), by_value);
    const double median = ms[reps / 2], flops = 4.0 * batch * heads * (double)n * n * d;
    printf("ncu-harness: B=%d H=%d N=%d d=%d grid %u x %d x %d, %d threads, %d bytes shared: %.4f ms, "
           "%.1f TFLOP/s (%.1f if causal)\n",
           batch, heads, n, d, grid_x, heads, batch, wg, shared, median, flops / median * 1e-9,
           flops / 2 / median * 1e-9);
    return 0;
}
