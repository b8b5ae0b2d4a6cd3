/* mma_emulate_check: runs the tensor-core kernels (cl/flash_decode_mma.cl,
 * cl/flash_forward_mma.cl) built with -DNV_EMULATE=1 (cl/nv_emulate.h) on the
 * first OpenCL device (PoCL in CI) and compares O and the LSE with the
 * double-precision reference, at the tensor-core tolerance of
 * tests/common.c. A prototype outside the planner: the build options and
 * arguments are the ones src/kernels.c (decode_mma_options, mma_options),
 * src/planner.c (-cl-std, -DSPLIT) and src/forward.c (argument order, grid,
 * flash_forward_combine) use.
 *
 * Usage: mma_emulate_check CL_DIR [decode|forward|all]   (CL_DIR: the cl/ folder, for -I)
 * Exit status 0 when every case passes. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostref.h"

#define LOG2E 1.4426950408889634

static cl_context ctx;
static cl_device_id dev;
static cl_command_queue queue;
static const char *cl_dir;

#define CHECK(expr)                                                                                                  \
    do {                                                                                                             \
        cl_int e_ = (expr);                                                                                          \
        if (e_ != CL_SUCCESS) {                                                                                      \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #expr, e_);                               \
            exit(2);                                                                                                 \
        }                                                                                                            \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    s[n] = 0;
    fclose(f);
    return s;
}

static cl_program build(const char *file, const char *options, double *seconds)
{
    char path[1024], opts[2048];
    snprintf(path, sizeof(path), "%s/%s", cl_dir, file);
    snprintf(opts, sizeof(opts), "%s -I %s", options, cl_dir);
    char *src = read_file(path);
    cl_int err;
    const char *srcs[1] = {src};
    cl_program p = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
    CHECK(err);
    const double t0 = now();
    err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
    *seconds = now() - t0;
    if (err != CL_SUCCESS) {
        size_t n = 0;
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
        char *log = malloc(n + 1);
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
        log[n] = 0;
        fprintf(stderr, "build of %s with \"%s\" failed (%d):\n%.20000s\n", file, opts, err, log);
        exit(2);
    }
    free(src);
    return p;
}

struct shape {
    const char *kernel;  /* "decode" or "forward" */
    flashcl_dtype dtype;
    int batch, seq_q, seq_kv, heads_q, heads_kv, head_dim;
    int window_left, window_right;  /* -1 unlimited; causal: -1, 0 */
    int warps, block_n, m_tiles;    /* the kernel's shape axes (m_tiles: forward only) */
    int splits;
    float scale;                    /* 0: 1/sqrt(d) */
};

static void set_view(cl_kernel k, cl_uint *arg, cl_mem mem, cl_ulong sb, cl_ulong ss, cl_ulong sh)
{
    const cl_ulong v[4] = {0, sb, ss, sh};
    CHECK(clSetKernelArg(k, (*arg)++, sizeof(cl_mem), &mem));
    for (int i = 0; i < 4; i++)
        CHECK(clSetKernelArg(k, (*arg)++, sizeof(cl_ulong), &v[i]));
}

/* Returns the number of elements (O and LSE) outside the tolerance. */
static int run_shape(const struct shape *s)
{
    const int B = s->batch, Nq = s->seq_q, Nk = s->seq_kv, Hq = s->heads_q, Hk = s->heads_kv, d = s->head_dim;
    const int group = Hq / Hk, decode = strcmp(s->kernel, "decode") == 0;
    const double scale = s->scale != 0.0f ? s->scale : 1.0 / sqrt((double)d);
    const float scale_log2 = (float)(scale * LOG2E);
    const int dt = s->dtype == FLASHCL_F16 ? 1 : 2;
    const int split = s->splits > 1;
    char options[1024];
    if (decode)
        snprintf(options, sizeof(options),
                 "-cl-std=CL1.2 -DHEAD_DIM=%d -DWARPS=%d -DBLOCK_N=%d -DDTYPE=%d -DWINDOW_LEFT=%d -DWINDOW_RIGHT=%d "
                 "-DNEGATIVE_SCALE=%d -DVARLEN=0 -DSPLIT=%d -DNV_EMULATE=1",
                 d, s->warps, s->block_n, dt, s->window_left, s->window_right, scale_log2 < 0.0f, split);
    else
        snprintf(options, sizeof(options),
                 "-cl-std=CL1.2 -DHEAD_DIM=%d -DWARPS=%d -DM_TILES=%d -DBLOCK_N=%d -DWINDOW_LEFT=%d -DWINDOW_RIGHT=%d "
                 "-DNEGATIVE_SCALE=%d -DDTYPE=%d -DVARLEN=0 -DSPLIT=%d -DNV_EMULATE=1",
                 d, s->warps, s->m_tiles, s->block_n, s->window_left, s->window_right, scale_log2 < 0.0f, dt, split);
    double build_s;
    cl_program prog = build(decode ? "flash_decode_mma.cl" : "flash_forward_mma.cl", options, &build_s);
    cl_int err;
    cl_kernel kern = clCreateKernel(prog, decode ? "flash_decode_mma" : "flash_forward_mma", &err);
    CHECK(err);
    cl_kernel comb = NULL;
    if (split) {
        comb = clCreateKernel(prog, "flash_forward_combine", &err);
        CHECK(err);
    }

    /* The footprint src/kernels.c's decode_mma_local_bytes / mma_local_bytes give under emulation
     * (cl/nv_emulate.h's scratch: 768 bytes a warp), against what PoCL reports. */
    cl_ulong local_mem = 0;
    CHECK(clGetKernelWorkGroupInfo(kern, dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof(local_mem), &local_mem, NULL));
    const size_t emu_scratch = (size_t)s->warps * 192 * 4;
    const size_t table = decode ? (16 + 4 * (size_t)s->block_n) * d * 2 + 2 * (size_t)s->warps * 16 * 4 + emu_scratch
                                : (16 * (size_t)s->m_tiles * s->warps + 4 * (size_t)s->block_n) * d * 2 + emu_scratch;
    int footprint_bad = local_mem != (cl_ulong)table;
    if (footprint_bad)
        fprintf(stderr, "  CL_KERNEL_LOCAL_MEM_SIZE %llu, the table's footprint %zu\n", (unsigned long long)local_mem,
                table);

    /* [B, N, H, d] contiguous; LSE [B, H, N]. */
    const size_t nq = (size_t)B * Nq * Hq * d, nk = (size_t)B * Nk * Hk * d;
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2), *ho = malloc(nq * 2);
    float *hl = malloc((size_t)B * Hq * Nq * sizeof(float));
    for (size_t i = 0; i < nq; i++)
        hostref_store(hq, s->dtype, i, (float)rng_uniform(-1.0, 1.0));
    for (size_t i = 0; i < nk; i++) {
        hostref_store(hk, s->dtype, i, (float)rng_uniform(-1.0, 1.0));
        hostref_store(hv, s->dtype, i, (float)rng_uniform(-1.0, 1.0));
    }
    memset(ho, 0xff, nq * 2);  /* poison: NaN in f16 and bf16 */
    for (size_t i = 0; i < (size_t)B * Hq * Nq; i++)
        hl[i] = NAN;
    cl_mem mq = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nq * 2, hq, &err);
    CHECK(err);
    cl_mem mk = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 2, hk, &err);
    CHECK(err);
    cl_mem mv = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 2, hv, &err);
    CHECK(err);
    cl_mem mo = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nq * 2, ho, &err);
    CHECK(err);
    cl_mem ml = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, (size_t)B * Hq * Nq * 4, hl, &err);
    CHECK(err);
    cl_mem mpart = NULL;
    if (split) {
        mpart = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)s->splits * B * Hq * Nq * (d + 1) * sizeof(float), NULL,
                               &err);
        CHECK(err);
    }

    const cl_ulong q_sb = (cl_ulong)Nq * Hq * d, q_ss = (cl_ulong)Hq * d, q_sh = (cl_ulong)d;
    const cl_ulong k_sb = (cl_ulong)Nk * Hk * d, k_ss = (cl_ulong)Hk * d, k_sh = (cl_ulong)d;
    const cl_ulong l_sb = (cl_ulong)Hq * Nq, l_ss = 1, l_sh = (cl_ulong)Nq;
    const cl_int has_lse = 1, seq_q = Nq, seq_kv = Nk, grp = group, splits = s->splits;
    cl_uint arg = 0;
    set_view(kern, &arg, mq, q_sb, q_ss, q_sh);
    set_view(kern, &arg, mk, k_sb, k_ss, k_sh);
    set_view(kern, &arg, mv, k_sb, k_ss, k_sh);
    set_view(kern, &arg, mo, q_sb, q_ss, q_sh);
    set_view(kern, &arg, ml, l_sb, l_ss, l_sh);
    CHECK(clSetKernelArg(kern, arg++, sizeof(cl_int), &has_lse));
    CHECK(clSetKernelArg(kern, arg++, sizeof(cl_int), &seq_q));
    CHECK(clSetKernelArg(kern, arg++, sizeof(cl_int), &seq_kv));
    CHECK(clSetKernelArg(kern, arg++, sizeof(cl_int), &grp));
    CHECK(clSetKernelArg(kern, arg++, sizeof(cl_float), &scale_log2));
    if (split) {
        CHECK(clSetKernelArg(kern, arg++, sizeof(cl_mem), &mpart));
        CHECK(clSetKernelArg(kern, arg++, sizeof(cl_int), &splits));
        cl_uint a = 0;
        const cl_int rows = Nq, heads = Hq, batch = B;
        CHECK(clSetKernelArg(comb, a++, sizeof(cl_mem), &mpart));
        CHECK(clSetKernelArg(comb, a++, sizeof(cl_int), &splits));
        set_view(comb, &a, mo, q_sb, q_ss, q_sh);
        set_view(comb, &a, ml, l_sb, l_ss, l_sh);
        CHECK(clSetKernelArg(comb, a++, sizeof(cl_int), &has_lse));
        CHECK(clSetKernelArg(comb, a++, sizeof(cl_int), &rows));
        CHECK(clSetKernelArg(comb, a++, sizeof(cl_int), &heads));
        CHECK(clSetKernelArg(comb, a++, sizeof(cl_int), &batch));
        CHECK(clSetKernelArg(comb, a++, sizeof(cl_int), &seq_kv));
    }
    const size_t wg = 32 * (size_t)s->warps;
    const size_t block_m = 16 * (size_t)(decode ? 1 : s->m_tiles) * s->warps;
    const size_t n_qblocks = decode ? 1 : ((size_t)Nq + block_m - 1) / block_m;
    const size_t local[3] = {wg, 1, 1};
    const size_t global[3] = {n_qblocks * wg * (size_t)s->splits, (size_t)(decode ? Hk : Hq), (size_t)B};
    const size_t combine_global[3] = {((size_t)Nq * d + 63) / 64 * 64, (size_t)Hq, (size_t)B};
    /* Twice: PoCL compiles the work-group function at the first launch (first_s); the second is the run
     * alone (run_s). Both write the same outputs. */
    double first_s = 0.0, run_s = 0.0;
    for (int rep = 0; rep < 2; rep++) {
        const double t0 = now();
        CHECK(clEnqueueNDRangeKernel(queue, kern, 3, NULL, global, local, 0, NULL, NULL));
        if (split)
            CHECK(clEnqueueNDRangeKernel(queue, comb, 3, NULL, combine_global, NULL, 0, NULL, NULL));
        CHECK(clFinish(queue));
        *(rep ? &run_s : &first_s) = now() - t0;
    }
    CHECK(clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, nq * 2, ho, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(queue, ml, CL_TRUE, 0, (size_t)B * Hq * Nq * 4, hl, 0, NULL, NULL));

    /* The reference on the same rounded inputs. */
    const double atol = s->dtype == FLASHCL_F16 ? 1e-3 : 8e-3, rtol = s->dtype == FLASHCL_F16 ? 1.2e-3 : 8e-3;
    const double lse_tol = 2e-5;
    double *qd = malloc(sizeof(double) * d), *kd = malloc(sizeof(double) * Nk * d), *vd = malloc(sizeof(double) * Nk * d);
    double *ref = malloc(sizeof(double) * d), *scratch = malloc(sizeof(double) * (Nk + 1));
    int bad = 0;
    double max_err = 0.0, max_lse_err = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++) {
            const int hkv = h / group;
            for (int n = 0; n < Nk; n++)
                for (int x = 0; x < d; x++) {
                    const size_t i = (size_t)b * k_sb + (size_t)n * k_ss + (size_t)hkv * k_sh + x;
                    kd[n * d + x] = hostref_load(hk, s->dtype, i);
                    vd[n * d + x] = hostref_load(hv, s->dtype, i);
                }
            for (int n = 0; n < Nq; n++) {
                for (int x = 0; x < d; x++)
                    qd[x] = hostref_load(hq, s->dtype, (size_t)b * q_sb + (size_t)n * q_ss + (size_t)h * q_sh + x);
                size_t first, end;
                double lse;
                hostref_visible_keys((size_t)n, (size_t)Nq, (size_t)Nk, s->window_left, s->window_right, &first, &end);
                hostref_attention_row_range(qd, kd, vd, first, end, (size_t)d, scale, ref, &lse, scratch);
                for (int x = 0; x < d; x++) {
                    const double got =
                        hostref_load(ho, s->dtype, (size_t)b * q_sb + (size_t)n * q_ss + (size_t)h * q_sh + x);
                    const double e = fabs(got - ref[x]);
                    if (!(e <= atol + rtol * fabs(ref[x]))) {
                        if (bad < 5 || getenv("EMU_VERBOSE"))
                            fprintf(stderr, "  O[b%d n%d h%d x%d] = %g, want %g\n", b, n, h, x, got, ref[x]);
                        bad++;
                    }
                    if (e > max_err || e != e)
                        max_err = e;
                }
                const double got_l = hl[(size_t)b * l_sb + (size_t)h * l_sh + (size_t)n * l_ss];
                const double el = isinf(lse) && got_l == lse ? 0.0 : fabs(got_l - lse);
                if (!(el <= lse_tol * fmax(1.0, fabs(lse)))) {
                    if (bad < 5)
                        fprintf(stderr, "  LSE[b%d n%d h%d] = %g, want %g\n", b, n, h, got_l, lse);
                    bad++;
                }
                if (el > max_lse_err || el != el)
                    max_lse_err = el;
            }
        }
    bad += footprint_bad;
    printf("%-7s %-4s B%d Nq%-3d Nk%-4d Hq%d Hkv%d d%-3d win(%d,%d) warps%d bn%d mt%d splits%d: %s "
           "max|dO| %.2e max|dLSE| %.2e  build %.1fs first launch %.1fs run %.3fs\n",
           s->kernel, s->dtype == FLASHCL_F16 ? "f16" : "bf16", B, Nq, Nk, Hq, Hk, d, s->window_left,
           s->window_right, s->warps, s->block_n, decode ? 1 : s->m_tiles, s->splits, bad ? "FAIL" : "ok", max_err,
           max_lse_err, build_s, first_s, run_s);
    fflush(stdout);
    free(qd), free(kd), free(vd), free(ref), free(scratch);
    free(hq), free(hk), free(hv), free(ho), free(hl);
    clReleaseMemObject(mq), clReleaseMemObject(mk), clReleaseMemObject(mv), clReleaseMemObject(mo);
    clReleaseMemObject(ml);
    if (mpart)
        clReleaseMemObject(mpart);
    if (comb)
        clReleaseKernel(comb);
    clReleaseKernel(kern);
    clReleaseProgram(prog);
    return bad;
}

#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

static const struct shape shapes[] = {
    /* decode: group x seq_q <= 16 rows. */
    {"decode", F16, 1, 1, 200, 8, 2, 64, -1, -1, 2, 32, 1, 1, 0},     /* group 4, one row each */
    {"decode", BF16, 1, 1, 200, 8, 2, 64, -1, -1, 2, 32, 1, 1, 0},
    {"decode", F16, 2, 4, 300, 8, 2, 128, -1, 0, 4, 64, 1, 1, 0},     /* 16 rows, causal */
    {"decode", BF16, 2, 4, 300, 8, 2, 128, -1, 0, 4, 64, 1, 1, 0},
    {"decode", F16, 1, 3, 257, 4, 1, 64, -1, 0, 2, 32, 1, 3, 0},      /* 12 rows, causal, 3 splits */
    {"decode", BF16, 1, 2, 190, 6, 2, 32, 40, 0, 2, 64, 1, 4, 0},     /* window, 4 splits */
    {"decode", F16, 1, 1, 100, 2, 2, 64, -1, -1, 2, 32, 1, 2, -0.2f}, /* negative scale, 2 splits */
    /* forward */
    {"forward", F16, 1, 70, 70, 2, 1, 64, -1, -1, 2, 32, 1, 1, 0},
    {"forward", BF16, 1, 70, 90, 2, 2, 64, -1, 0, 2, 32, 1, 1, 0},    /* causal, bottom-right */
    {"forward", F16, 1, 100, 100, 1, 1, 128, -1, 0, 2, 32, 2, 1, 0},  /* causal, M_TILES 2 */
    {"forward", BF16, 1, 40, 200, 2, 1, 32, -1, -1, 1, 48, 2, 2, 0},  /* 2 splits */
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CL_DIR [decode|forward|all] [index]\n", argv[0]);
        return 2;
    }
    cl_dir = argv[1];
    const char *which = argc > 2 ? argv[2] : "all";
    const int only = argc > 3 ? atoi(argv[3]) : -1;
    cl_platform_id plat;
    CHECK(clGetPlatformIDs(1, &plat, NULL));
    CHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    cl_int err;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    queue = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    rng_seed(12345);
    int failed = 0, ran = 0;
    /* EMU_SHAPE="decode|forward,f16|bf16,B,Nq,Nk,Hq,Hkv,d,left,right,warps,block_n,m_tiles,splits": that case only. */
    const char *one = getenv("EMU_SHAPE");
    if (one) {
        struct shape s = {0};
        char kernel[16], dtype[8];
        if (sscanf(one, "%15[a-z],%7[a-z0-9],%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", kernel, dtype, &s.batch, &s.seq_q,
                   &s.seq_kv, &s.heads_q, &s.heads_kv, &s.head_dim, &s.window_left, &s.window_right, &s.warps,
                   &s.block_n, &s.m_tiles, &s.splits) != 14) {
            fprintf(stderr, "EMU_SHAPE: 14 fields\n");
            return 2;
        }
        s.kernel = strcmp(kernel, "decode") == 0 ? "decode" : "forward";
        s.dtype = strcmp(dtype, "bf16") == 0 ? FLASHCL_BF16 : FLASHCL_F16;
        return run_shape(&s) != 0;
    }
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        if (strcmp(which, "all") != 0 && strcmp(which, shapes[i].kernel) != 0)
            continue;
        if (only >= 0 && (int)i != only)
            continue;
        failed += run_shape(&shapes[i]) != 0;
        ran++;
    }
    printf("%d of %d cases passed\n", ran - failed, ran);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    return failed != 0;
}
