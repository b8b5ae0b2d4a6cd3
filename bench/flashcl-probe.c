/*
 * flashcl-probe: what this machine's OpenCL devices can do for attention,
 * and the tuning file that makes flashcl use it.
 *
 *   flashcl-probe [--json] [--n N] [--d D]
 *       Lists every platform and device, then probes the chosen one
 *       (FLASHCL_DEVICE, else the first GPU, else the first device): the
 *       largest static __local array that really builds and runs, copy
 *       bandwidth, fp32 FMA rate, the tensor-core rate where flashcl's
 *       tensor-core kernel runs, the ridge points, and where standard
 *       attention and flashcl sit on the roofline for N and d.
 *   flashcl-probe --tune [--quick] [--out FILE] [--n N] [--tokens T] [--hidden C]
 *       Also tunes: for each pass (forward, backward), dtype, head dim and
 *       mask it tries the candidate tiles under the sizing rule's bound (on
 *       the probed local memory),
 *       discards any that disagree with the double reference, times the rest
 *       on a realistic size, compares the winner with the untuned choice, and
 *       writes the winners to the tuning file the library reads. Decode keys
 *       (one query a sequence against a cache of N keys, GQA and MHA) tune
 *       the decode kernel's key block and split count together.
 *   flashcl-probe --kernels
 *       Prints the library's kernel table as Markdown (docs/design.md's
 *       table is this output); needs no device.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "flashcl_tools.h"

#include "bench_decode.h"
#include "bench_paths.h"
#include "hostref.h"

#define CHECK_N 100  /* tokens of the correctness check of each candidate */

/* Kernel names compared (NULL: no kernel planned, equal to nothing). */
static bool same_kernel(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* The kernel table, one row a kernel in the planner's order, then each kernel's summary. */
static int print_kernels(void)
{

    printf("| kernel | pass | source | dtypes | head dims | needs | takes | axes and built-in shapes |\n"
           "|---|---|---|---|---|---|---|---|\n");
    const int n = flashcl_kernel_count();
    for (int i = 0; i < n; i++) {
        struct flashcl_kernel_info k;
        char shapes[2048];
        if (flashcl_kernel_describe(i, &k) != FLASHCL_SUCCESS ||
            flashcl_kernel_shapes(i, shapes, sizeof(shapes)) != FLASHCL_SUCCESS) {
            fprintf(stderr, "flashcl-probe: %s\n", flashcl_last_error());
            return 1;
        }
        char dtypes[32] = "";
        for (int t = FLASHCL_F32; t <= FLASHCL_E4M3; t++)
            if (k.dtypes & (1u << t))
                snprintf(dtypes + strlen(dtypes), sizeof(dtypes) - strlen(dtypes), "%s%s", dtypes[0] ? ", " : "",
                         flashcl_dtype_name((flashcl_dtype)t));
        char dims[32];
        if (k.head_dim_step == 1)
            snprintf(dims, sizeof(dims), "1..%d", k.head_dim_max);
        else
            snprintf(dims, sizeof(dims), "%d..%d step %d", k.head_dim_step, k.head_dim_max, k.head_dim_step);
        const char *needs = k.tensor_cores == 2   ? "wgmma (compute capability 9.0, its probe), 16-byte rows"
                            : k.tensor_cores == 1 ? "tensor cores (sm_80+), 16-byte rows"
                                                  : "any OpenCL 1.2 device";
        char takes[160];
        snprintf(takes, sizeof(takes), "%s%s%s%s%s%s%s%s%s", k.kv_cache ? "varlen, KV caches" : k.varlen ? "varlen" : "dense",
                 k.split_kv ? ", split-KV" : "", k.softcap ? ", softcap" : "", k.sinks && !k.backward ? ", sinks" : "",
                 k.alibi ? ", ALiBi" : "", k.head_dim_v ? ", head_dim_v" : "", k.opt_in ? ", opt-in" : "",
                 k.nondeterministic ? ", not bitwise deterministic" : "",
                 k.dtypes == (1u << FLASHCL_F32) && k.tensor_cores ? ", precision TF32/TF32X3" : "");
        printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", k.name, k.backward ? "backward" : "forward", k.source,
               dtypes, dims, needs, takes, shapes[0] ? shapes : "—");
    }
    printf("\n");
    for (int i = 0; i < n; i++) {
        struct flashcl_kernel_info k;
        flashcl_kernel_describe(i, &k);
        printf("- **%s**: %s\n", k.name, k.summary);
    }
    return 0;
}

struct options {
    bool json, tune, quick;
    const char *out;
    int n, d;             /* roofline shape; --tune times at N = n */
    long tokens, hidden;  /* batch*N and heads*d of the timed shapes */
};

struct probe {
    char name[256], vendor[256], driver[128], version[128];
    cl_ulong reported_local, global_mem, max_alloc;
    cl_uint compute_units, clock_mhz;
    size_t max_wg;
    bool fp16;
    size_t usable_local;   /* largest static __local that built and ran */
    double copy_gbs;       /* bytes read + written per second */
    double fma_tflops;
    double mma_tflops;     /* 0 where the tensor-core kernel does not run */
    const char *tensor_note;
};

/* ---------------------------------------------------------------- helpers */

static double event_ms(cl_event e)
{
    cl_ulong start = 0, end = 0;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof(start), &start, NULL);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL);
    return (double)(end - start) * 1e-6;
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Builds `source` with `options`; the kernel `name` or NULL. */
static cl_kernel build_kernel(cl_context cl, cl_device_id dev, const char *source, const char *options,
                              const char *name, cl_program *program)
{
    cl_int err;
    *program = clCreateProgramWithSource(cl, 1, &source, NULL, &err);
    if (!*program)
        return NULL;
    if (clBuildProgram(*program, 1, &dev, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(*program);
        *program = NULL;
        return NULL;
    }
    cl_kernel k = clCreateKernel(*program, name, &err);
    if (!k) {
        clReleaseProgram(*program);
        *program = NULL;
    }
    return k;
}

/* Median ms of `reps` launches of kernel (after one warm-up). */
static double time_kernel(cl_command_queue q, cl_kernel k, size_t global, size_t local, int reps)
{
    double ms[16];
    if (reps > 16)
        reps = 16;
    for (int i = -1; i < reps; i++) {
        cl_event e;
        if (clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &e) != CL_SUCCESS)
            return NAN;
        clWaitForEvents(1, &e);
        if (i >= 0)
            ms[i] = event_ms(e);
        clReleaseEvent(e);
    }
    qsort(ms, (size_t)reps, sizeof(double), compare_doubles);
    return ms[reps / 2];
}

/* ------------------------------------------------------- device listing */

static void describe(cl_device_id dev, struct probe *p)
{
    memset(p, 0, sizeof(*p));
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof(p->name), p->name, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof(p->vendor), p->vendor, NULL);
    clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof(p->driver), p->driver, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof(p->version), p->version, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(p->reported_local), &p->reported_local, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(p->global_mem), &p->global_mem, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(p->max_alloc), &p->max_alloc, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(p->compute_units), &p->compute_units, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof(p->clock_mhz), &p->clock_mhz, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(p->max_wg), &p->max_wg, NULL);
    char ext[8192] = "";
    clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sizeof(ext), ext, NULL);
    p->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
}

static void list_devices(bool json)
{
    cl_platform_id platforms[16];
    cl_uint np = 0;
    clGetPlatformIDs(16, platforms, &np);
    if (np > 16)
        np = 16;
    if (json)
        printf("  \"devices\": [\n");
    else
        printf("OpenCL devices (FLASHCL_DEVICE=\"P:D\" or a name picks one):\n");
    bool first = true;
    for (cl_uint p = 0; p < np; p++) {
        char pname[256] = "";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof(pname), pname, NULL);
        cl_device_id devs[32];
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 32, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < 32; d++) {
            struct probe info;
            describe(devs[d], &info);
            if (json)
                printf("%s    {\"index\": \"%u:%u\", \"platform\": \"%s\", \"name\": \"%s\", \"driver\": \"%s\", "
                       "\"compute_units\": %u, \"reported_local_mem\": %llu, \"max_work_group\": %zu, "
                       "\"fp16\": %s}",
                       first ? "" : ",\n", p, d, pname, info.name, info.driver, info.compute_units,
                       (unsigned long long)info.reported_local, info.max_wg, info.fp16 ? "true" : "false");
            else
                printf("  %u:%u  %-40s %s | driver %s | %u CUs | %llu KB local reported | max work-group %zu%s\n",
                       p, d, info.name, pname, info.driver, info.compute_units,
                       (unsigned long long)info.reported_local / 1024, info.max_wg,
                       info.fp16 ? " | cl_khr_fp16" : "");
            first = false;
        }
    }
    if (json)
        printf("\n  ],\n");
}

/* ------------------------------------------------------------ measures */

static const char local_probe_source[] =
    "__kernel void touch(__global uint *errors)\n"
    "{\n"
    "    __local uint buf[WORDS];\n"
    "    const uint lid = get_local_id(0), n = get_local_size(0);\n"
    "    for (uint i = lid; i < WORDS; i += n)\n"
    "        buf[i] = i * 2654435761u + 12345u;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    uint bad = 0;\n"
    "    for (uint i = lid; i < WORDS; i += n) {\n"
    "        const uint j = WORDS - 1 - i;  /* written by another work-item */\n"
    "        bad += buf[j] != j * 2654435761u + 12345u;\n"
    "    }\n"
    "    errors[get_global_id(0)] = bad;\n"
    "}\n";

/* True if a __local array of `bytes` builds and every element round-trips. */
static bool local_works(cl_context cl, cl_device_id dev, cl_command_queue q, size_t bytes)
{
    char options[64];
    snprintf(options, sizeof(options), "-DWORDS=%zu", bytes / 4);
    cl_program prog;
    cl_kernel k = build_kernel(cl, dev, local_probe_source, options, "touch", &prog);
    if (!k)
        return false;
    const size_t local = 128, global = 128 * 4;
    cl_int err;
    cl_mem out = clCreateBuffer(cl, CL_MEM_READ_WRITE, global * 4, NULL, &err);
    bool ok = false;
    cl_uint result[128 * 4];
    if (out && clSetKernelArg(k, 0, sizeof(cl_mem), &out) == CL_SUCCESS &&
        clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL) == CL_SUCCESS &&
        clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof(result), result, 0, NULL, NULL) == CL_SUCCESS) {
        ok = true;
        for (size_t i = 0; i < global; i++)
            ok = ok && result[i] == 0;
    }
    if (out)
        clReleaseMemObject(out);
    clReleaseKernel(k);
    clReleaseProgram(prog);
    return ok;
}

/* Largest working size in 4 KB steps, searched between the reported size
 * and 256 KB (devices lie in both directions). */
static size_t probe_local(cl_context cl, cl_device_id dev, cl_command_queue q, size_t reported)
{
    const size_t step = 4096;
    size_t lo = 0, hi = reported > 262144 ? reported : 262144;
    if (local_works(cl, dev, q, reported - reported % step))
        lo = reported - reported % step;
    else
        hi = reported;
    /* Invariant: lo works (or is 0), hi + step does not need trying. */
    while (hi - lo > step) {
        const size_t mid = (lo + (hi - lo) / 2) / step * step;
        if (mid <= lo)
            break;
        if (local_works(cl, dev, q, mid))
            lo = mid;
        else
            hi = mid;
    }
    if (hi != lo && local_works(cl, dev, q, hi))
        lo = hi;
    return lo;
}

static const char bandwidth_source[] =
    "__kernel void copy(__global const float4 *src, __global float4 *dst) {\n"
    "    dst[get_global_id(0)] = src[get_global_id(0)];\n"
    "}\n"
    "__kernel void fma_rate(__global float *out, float seed) {\n"
    "    float4 a = (float4)(seed, seed + 1, seed + 2, seed + 3), b = a * 0.5f, c = a * 0.25f, d = a * 0.125f;\n"
    "    const float4 x = (float4)(0.999f), y = (float4)(0.001f);\n"
    "    for (int i = 0; i < ITERS; i++) {\n"
    "        a = fma(a, x, y); b = fma(b, x, y); c = fma(c, x, y); d = fma(d, x, y);\n"
    "    }\n"
    "    out[get_global_id(0)] = dot(a + b, c + d);\n"
    "}\n";

static void measure_rates(cl_context cl, cl_device_id dev, cl_command_queue q, struct probe *p, bool gpu)
{
    cl_program prog;
    const int iters = gpu ? 4096 : 256;
    char options[64];
    snprintf(options, sizeof(options), "-DITERS=%d", iters);
    cl_kernel copy = build_kernel(cl, dev, bandwidth_source, options, "copy", &prog);
    if (!copy)
        return;
    cl_int err;
    cl_kernel fma_k = clCreateKernel(prog, "fma_rate", &err);
    size_t bytes = gpu ? (size_t)512 << 20 : (size_t)64 << 20;
    if (bytes > p->max_alloc / 2)
        bytes = (size_t)(p->max_alloc / 2) & ~(size_t)4095;
    float *host = malloc(bytes);
    for (size_t i = 0; host && i < bytes / 4; i++)
        host[i] = (float)(i % 1000) * 0.001f + 0.5f;  /* never zeros */
    cl_mem src = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    cl_mem dst = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    free(host);
    if (src && dst) {
        clSetKernelArg(copy, 0, sizeof(cl_mem), &src);
        clSetKernelArg(copy, 1, sizeof(cl_mem), &dst);
        const double ms = time_kernel(q, copy, bytes / 16, 256, 7);
        p->copy_gbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
        const size_t threads = gpu ? (size_t)p->compute_units * 2048 : (size_t)p->compute_units * 1024;
        const float seed = 1.0f;
        clSetKernelArg(fma_k, 0, sizeof(cl_mem), &dst);
        clSetKernelArg(fma_k, 1, sizeof(float), &seed);
        const double fms = time_kernel(q, fma_k, threads, 256, 5);
        p->fma_tflops = (double)threads * iters * 4 * 4 * 2 / (fms * 1e-3) / 1e12;
    }
    if (src)
        clReleaseMemObject(src);
    if (dst)
        clReleaseMemObject(dst);
    clReleaseKernel(fma_k);
    clReleaseKernel(copy);
    clReleaseProgram(prog);
}

/* mma.sync m16n8k16 f16 -> f32, 8 independent accumulators per warp, no
 * memory traffic: the ceiling the tensor-core kernel works under. */
static const char mma_source[] =
    "__kernel void mma_rate(__global float *out, uint seed) {\n"
    "    uint a0 = seed, a1 = seed + 1, a2 = seed + 2, a3 = seed + 3, b0 = seed ^ 5, b1 = seed ^ 9;\n"
    "    float c[8][4];\n"
    "    for (int j = 0; j < 8; j++) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;\n"
    "    for (int i = 0; i < ITERS; i++) {\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 8; j++)\n"
    "            __asm__ volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "                : \"+f\"(c[j][0]), \"+f\"(c[j][1]), \"+f\"(c[j][2]), \"+f\"(c[j][3])\n"
    "                : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1));\n"
    "    }\n"
    "    float s = 0.0f;\n"
    "    for (int j = 0; j < 8; j++) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];\n"
    "    out[get_global_id(0)] = s;\n"
    "}\n";

static void measure_mma(cl_context cl, cl_device_id dev, cl_command_queue q, struct probe *p)
{
    cl_program prog;
    const int iters = 2048;
    char options[64];
    snprintf(options, sizeof(options), "-DITERS=%d", iters);
    cl_kernel k = build_kernel(cl, dev, mma_source, options, "mma_rate", &prog);
    if (!k)
        return;
    const size_t threads = (size_t)p->compute_units * 1024;
    cl_int err;
    cl_mem out = clCreateBuffer(cl, CL_MEM_READ_WRITE, threads * 4, NULL, &err);
    const cl_uint seed = 0x3c003c00u;  /* f16 pairs of 1.0 */
    clSetKernelArg(k, 0, sizeof(cl_mem), &out);
    clSetKernelArg(k, 1, sizeof(cl_uint), &seed);
    const double ms = time_kernel(q, k, threads, 256, 5);
    p->mma_tflops = (double)(threads / 32) * iters * 8 * (16.0 * 8 * 16 * 2) / (ms * 1e-3) / 1e12;
    clReleaseMemObject(out);
    clReleaseKernel(k);
    clReleaseProgram(prog);
}

/* -------------------------------------------------------------- tuning */

struct tune_key {
    flashcl_dtype dtype;
    int d, causal;
    enum bench_pass pass;  /* forward or backward: which kernels the key tunes */
    int group;             /* > 0: a decode key, one query a sequence and this many query heads a KV head */
    enum flashcl_precision precision;  /* f32 keys: TF32 or TF32X3 tunes the TF32 kernels for that precision */
};

/* A key's dtype as the tables print it: tf32 / tf32x3 for the TF32 keys. */
static const char *key_dtype_name(const struct tune_key *key)
{
    return key->precision == FLASHCL_PRECISION_TF32     ? "tf32"
           : key->precision == FLASHCL_PRECISION_TF32X3 ? "tf32x3"
                                                        : flashcl_dtype_name(key->dtype);
}

/* Whether the variant is one of the TF32 kernels, which a TF32 key tunes. */
static bool tf32_kernel(const char *v)
{
    return same_kernel(v, "tf32") || same_kernel(v, "backward-tf32");
}

#define MAX_SPLITS 64  /* what kernel_options' splits takes (1..64) */

/* A context over the shared cl_context with one candidate forced (NULL: the
 * library's own choice without a tuning file). */
static flashcl_context *candidate_context(cl_context cl, cl_device_id dev, const struct flashcl_tuned_config *c,
                                          size_t usable_local)
{
    struct flashcl_context_params params = {0};
    params.context = cl;
    params.device = dev;
    params.tuning_file = "";
    char options[128];
    if (c) {
        params.local_mem_bytes = usable_local;
        if (flashcl_tuning_override(c, options, sizeof(options)) != FLASHCL_SUCCESS)
            return NULL;
        params.kernel_options = options;
    }
    flashcl_context *ctx = NULL;
    return flashcl_context_create(&params, &ctx) == FLASHCL_SUCCESS ? ctx : NULL;
}

/* One problem of a key: host inputs (dO too for the backward, whose check is
 * on dQ) and their device buffers, made once and shared by every candidate.
 * A decode key's are bench_decode's (decode set, the rest unused). */
struct tune_problem {
    struct bench_case c;
    void *q, *k, *v, *d_o;
    struct bench_buffers bufs;
    struct decode_problem *decode;
};

static void problem_release(struct tune_problem *t)
{
    bench_buffers_release(&t->bufs);
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->d_o);
    t->q = t->k = t->v = t->d_o = NULL;
    if (t->decode)
        bench_decode_release(t->decode);
    free(t->decode);
    t->decode = NULL;
}

/* Random inputs for case c, on the host and in buffers of ctx; false (and
 * nothing held) if they cannot be allocated. */
static bool problem_create(flashcl_context *ctx, cl_command_queue queue, const struct bench_case *c, uint64_t seed,
                           struct tune_problem *t)
{
    memset(t, 0, sizeof(*t));
    t->c = *c;
    const size_t elems = (size_t)c->batch * c->n * c->heads * c->d, bytes = elems * flashcl_dtype_size(c->dtype);
    const bool backward = c->pass != BENCH_PASS_FORWARD;
    t->q = malloc(bytes);
    t->k = malloc(bytes);
    t->v = malloc(bytes);
    t->d_o = backward ? malloc(bytes) : NULL;
    if (!t->q || !t->k || !t->v || (backward && !t->d_o)) {
        problem_release(t);
        return false;
    }
    rng_seed(seed);
    bench_fill_random(t->q, c->dtype, elems);
    bench_fill_random(t->k, c->dtype, elems);
    bench_fill_random(t->v, c->dtype, elems);
    if (backward)
        bench_fill_random(t->d_o, c->dtype, elems);
    struct bench_env env = {.ctx = ctx, .queue = queue};
    flashcl_status st = bench_buffers_create(&env, c, t->q, t->k, t->v, &t->bufs);
    if (st == FLASHCL_SUCCESS && backward)
        st = bench_buffers_add_grads(&env, c, t->d_o, &t->bufs);
    if (st != FLASHCL_SUCCESS) {
        problem_release(t);
        return false;
    }
    return true;
}

/* The small problem every candidate is checked on. */
static struct bench_case check_case(const struct tune_key *key)
{
    const struct bench_case c = {CHECK_N, key->d, 1, 2, key->causal, key->dtype, key->precision, key->pass, 0, false, false, 0.0f, 0, 0};
    return c;
}

/* The realistic problem the candidates are timed on: N = --n, batch*N = --tokens, heads*d = --hidden. */
static struct bench_case timed_case(const struct tune_key *key, const struct options *opt)
{
    const struct bench_case c = {opt->n, key->d, opt->tokens / opt->n > 0 ? (int)(opt->tokens / opt->n) : 1,
                                 opt->hidden / key->d > 0 ? (int)(opt->hidden / key->d) : 1, key->causal,
                                 key->dtype, key->precision, key->pass, 0, false, false, 0.0f, 0, 0};
    return c;
}

/* The rows of the decode kernels a key's group runs on, and its tuning line's rows=: the group rounded up to
 * a power of two (the library's fcl_group_rows, one query a sequence). Groups 5..8 run the kernel of 8
 * rows, so one line serves them all. */
static int key_rows(const struct tune_key *key)
{
    int rows = 1;
    while (rows < key->group && rows < 16)
        rows *= 2;
    return rows;
}

/* A decode key's shape, scaled like timed_case: a cache of N = --n keys, batch*N = --tokens, heads_q*d =
 * --hidden (a whole number of groups, one at least), one query a sequence. The check is one sequence of it:
 * the same cache, so a forced split count (capped by the cache's key blocks alone) runs there too. */
static struct decode_shape decode_shape_of(const struct tune_key *key, const struct options *opt, bool check)
{
    int heads_q = (int)(opt->hidden / key->d) / key->group * key->group;
    heads_q = heads_q > key->group ? heads_q : key->group;
    const int batch = check || opt->tokens / opt->n < 1 ? 1 : (int)(opt->tokens / opt->n);
    const struct decode_shape s = {batch, heads_q, heads_q / key->group, 1, opt->n};
    return s;
}

/* The problem of a key that candidates are checked on (check) or timed on; false (nothing held) if it cannot
 * be made. */
static bool key_problem(flashcl_context *ctx, cl_command_queue queue, const struct tune_key *key,
                        const struct options *opt, bool check, uint64_t seed, struct tune_problem *t)
{
    if (!key->group) {
        const struct bench_case c = check ? check_case(key) : timed_case(key, opt);
        return problem_create(ctx, queue, &c, seed, t);
    }
    memset(t, 0, sizeof(*t));
    t->decode = malloc(sizeof(*t->decode));  /* not moved once made: its buffers point into it */
    struct bench_env env = {.ctx = ctx, .queue = queue};
    const struct decode_shape s = decode_shape_of(key, opt, check);
    if (!t->decode || bench_decode_create(&env, &s, key->d, key->dtype, 0, DECODE_KV_BNHD, t->decode) != FLASHCL_SUCCESS) {
        free(t->decode);
        t->decode = NULL;
        return false;
    }
    t->c = t->decode->c;
    return true;
}

/* The buffers a problem runs on. */
static struct bench_buffers problem_buffers(const struct tune_problem *t)
{
    return t->decode ? t->decode->b : t->bufs;
}

/* The kernel and tile ctx plans for the problem's pass. */
static flashcl_status problem_config(flashcl_context *ctx, const struct tune_problem *t, struct flashcl_tile *tile)
{
    const struct bench_buffers b = problem_buffers(t);
    return t->c.pass == BENCH_PASS_FORWARD ? flashcl_forward_config(ctx, &b.attn, tile)
                                           : flashcl_backward_config(ctx, &b.attn, &b.grad, tile);
}

/* Runs the pass once; its sampled error against the double reference (O
 * for the forward, dQ relative to max|dQ| for the backward), INFINITY if it
 * failed. */
static double check_error(struct bench_env *env, const struct tune_problem *t)
{
    if (t->decode)
        return bench_decode_error(env, t->decode);
    struct bench_buffers b = t->bufs;
    const size_t bytes = (size_t)t->c.batch * t->c.n * t->c.heads * t->c.d * flashcl_dtype_size(t->c.dtype);
    void *out = malloc(bytes);
    size_t device_bytes;
    double err = INFINITY;
    /* prepare runs the backward's forward (O, LSE) and allocates its workspace */
    if (out && bench_prepare_path(env, BENCH_FLASH, &b, &t->c, &device_bytes) == FLASHCL_SUCCESS &&
        bench_run_path(env, BENCH_FLASH, &b, &t->c, NULL) == FLASHCL_SUCCESS &&
        bench_read_output(env, &t->c, &b, out, bytes) == FLASHCL_SUCCESS)
        err = t->d_o ? bench_sampled_dq_error(&t->c, t->q, t->k, t->v, t->d_o, out)
                     : bench_sampled_error(&t->c, t->q, t->k, t->v, out);
    bench_release_path(env, BENCH_FLASH, &b);
    free(out);
    return err;
}

/* Median ms of the pass, its workspace allocated outside the timed runs. */
static flashcl_status time_pass(struct bench_env *env, const struct tune_problem *t, int reps, double *median)
{
    struct bench_buffers b = problem_buffers(t);
    size_t device_bytes;
    double min;
    flashcl_status st = bench_prepare_path(env, BENCH_FLASH, &b, &t->c, &device_bytes);
    if (st == FLASHCL_SUCCESS)
        st = bench_time(env, BENCH_FLASH, &b, &t->c, 1, reps, median, &min, NULL);
    bench_release_path(env, BENCH_FLASH, &b);
    return st;
}

/* Checks a context on the small problem, then times it on the realistic one.
 * Returns the median ms; -1 if it does not plan `expected` (and, splits > 0,
 * that split count), -2 if it disagreed with the reference, -3 if the timing
 * failed. */
static double evaluate(flashcl_context *ctx, cl_command_queue queue, const char *expected, int splits,
                       const struct tune_problem *check, const struct tune_problem *timed, int reps)
{
    struct bench_env env = {.ctx = ctx, .queue = queue};
    struct flashcl_tile t;
    if (problem_config(ctx, check, &t) != FLASHCL_SUCCESS || !same_kernel(t.kernel, expected) || (splits && t.splits != splits))
        return -1;
    if (!(check_error(&env, check) <= bench_tolerance(&check->c)))
        return -2;
    double median = 0;
    if (time_pass(&env, timed, reps, &median) != FLASHCL_SUCCESS)
        return -3;
    return median;
}

/* The kernel the library plans for a key on aligned [B, N, H, d] views
 * (the backward's with the LSE and gradients it needs); 0 where it plans
 * none. */
static const char *planned_kernel(flashcl_context *ctx, cl_command_queue queue, const struct tune_key *key,
                                            const struct options *opt)
{
    struct tune_problem t;
    struct flashcl_tile tile = {0};
    const bool ok = key_problem(ctx, queue, key, opt, true, 1, &t) && problem_config(ctx, &t, &tile) == FLASHCL_SUCCESS;
    problem_release(&t);
    return ok ? tile.kernel : (const char *)NULL;
}

/* A decode key's candidates: each of the decode kernel's block_n candidates
 * with split counts around the planner's choice s for the timed grid (1,
 * s/2, s, 3s/2, 2s), capped as the planner caps a tuned count (each split
 * at least two key blocks, 64 at most), so the tuning file can replay each
 * on this grid. rows, splits and groups filled as the entry records them. */
static int decode_candidates(flashcl_context *base, const char *variant, const struct tune_key *key,
                             const struct tune_problem *timed, int planned_splits, size_t usable_local,
                             struct flashcl_tuned_config *out, int max)
{
    struct flashcl_tuned_config shapes[32];
    int n_shapes = flashcl_tuning_candidates(base, variant, key->dtype, key->d, usable_local, shapes, 32);
    n_shapes = n_shapes < 32 ? n_shapes : 32;
    const struct decode_shape *s = &timed->decode->shape;
    const int p = planned_splits > 0 ? planned_splits : 1, tries[5] = {1, p / 2, p, p + p / 2, 2 * p};
    int count = 0;
    for (int i = 0; i < n_shapes; i++) {
        const int key_blocks = (s->seq_kv + shapes[i].block_n - 1) / shapes[i].block_n;
        const int most = key_blocks / 2 < 1 ? 1 : key_blocks / 2 > MAX_SPLITS ? MAX_SPLITS : key_blocks / 2;
        for (int j = 0, last = 0; j < 5; j++) {  /* tries ascend: capped, repeats are skipped */
            const int splits = tries[j] < 1 ? 1 : tries[j] > most ? most : tries[j];
            if (splits <= last)
                continue;
            last = splits;
            if (count < max) {
                out[count] = shapes[i];
                out[count].rows = key_rows(key);
                out[count].splits = splits;
                out[count].groups = s->batch * s->heads_kv;
            }
            count++;
        }
    }
    return count < max ? count : max;
}

/* mkdir -p of the folder that holds path. */
static bool make_parent_dirs(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return true;
    *slash = '\0';
    for (char *q = dir + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            if (mkdir(dir, 0755) != 0 && errno != EEXIST)
                return false;
            *q = '/';
        }
    return (mkdir(dir, 0755) == 0 || errno == EEXIST);
}

static void progress(int done, int total, const char *what)
{
    const int width = 30, filled = total ? done * width / total : width;
    fprintf(stderr, "\r[%.*s%*s] %d/%d %-40s", filled, "##############################", width - filled, "", done,
            total, what);
}

static int tune(cl_context cl, cl_device_id dev, cl_command_queue queue, const struct probe *p,
                const struct options *opt)
{
    /* dtype, d, causal, pass, decode group, precision (0: exact). Decode keys after the others, f16 at head
     * dims 64, 128 and 256: MHA (1), groups of 4 (Llama 3 8B's 32:8), 8 (Llama 3 70B's 64:8) and 16 (Llama
     * 3.1 405B's 128:8). A group of 5..8 runs the kernel of 8 rows and reads the rows=8 line (key_rows), so
     * at d = 128 that line is measured on a group of 7 (Qwen2.5 7B's 28:4), the odd group's own path; bf16
     * and f32 keys after them; the TF32 keys last. */
    static const struct tune_key full[] = {
        {FLASHCL_F32, 64, 0, BENCH_PASS_FORWARD, 0, 0},   {FLASHCL_F32, 64, 1, BENCH_PASS_FORWARD, 0, 0},
        {FLASHCL_F32, 128, 0, BENCH_PASS_FORWARD, 0, 0},  {FLASHCL_F32, 128, 1, BENCH_PASS_FORWARD, 0, 0},
        {FLASHCL_F16, 64, 0, BENCH_PASS_FORWARD, 0, 0},   {FLASHCL_F16, 64, 1, BENCH_PASS_FORWARD, 0, 0},
        {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 0, 0},  {FLASHCL_F16, 128, 1, BENCH_PASS_FORWARD, 0, 0},
        {FLASHCL_BF16, 64, 0, BENCH_PASS_FORWARD, 0, 0},  {FLASHCL_BF16, 128, 0, BENCH_PASS_FORWARD, 0, 0},
        {FLASHCL_F32, 64, 0, BENCH_PASS_BACKWARD, 0, 0},  {FLASHCL_F32, 64, 1, BENCH_PASS_BACKWARD, 0, 0},
        {FLASHCL_F32, 128, 0, BENCH_PASS_BACKWARD, 0, 0}, {FLASHCL_F16, 64, 0, BENCH_PASS_BACKWARD, 0, 0},
        {FLASHCL_F16, 128, 0, BENCH_PASS_BACKWARD, 0, 0}, {FLASHCL_F16, 128, 1, BENCH_PASS_BACKWARD, 0, 0},
        {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 4, 0},  {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 1, 0},
        {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 7, 0},  {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 16, 0},
        {FLASHCL_F16, 64, 0, BENCH_PASS_FORWARD, 4, 0},   {FLASHCL_F16, 64, 0, BENCH_PASS_FORWARD, 1, 0},
        {FLASHCL_F16, 64, 0, BENCH_PASS_FORWARD, 8, 0},   {FLASHCL_F16, 64, 0, BENCH_PASS_FORWARD, 16, 0},
        {FLASHCL_F16, 256, 0, BENCH_PASS_FORWARD, 4, 0},  {FLASHCL_F16, 256, 0, BENCH_PASS_FORWARD, 1, 0},
        {FLASHCL_F16, 256, 0, BENCH_PASS_FORWARD, 8, 0},  {FLASHCL_F16, 256, 0, BENCH_PASS_FORWARD, 16, 0},
        {FLASHCL_BF16, 128, 0, BENCH_PASS_FORWARD, 4, 0}, {FLASHCL_BF16, 64, 0, BENCH_PASS_FORWARD, 8, 0},
        {FLASHCL_F32, 128, 0, BENCH_PASS_FORWARD, 4, 0},  {FLASHCL_F32, 64, 0, BENCH_PASS_FORWARD, 1, 0},
        /* f32 calls that allow TF32 (the TF32 kernels, tuned apart per precision): */
        {FLASHCL_F32, 64, 0, BENCH_PASS_FORWARD, 0, FLASHCL_PRECISION_TF32},
        {FLASHCL_F32, 128, 0, BENCH_PASS_FORWARD, 0, FLASHCL_PRECISION_TF32},
        {FLASHCL_F32, 64, 0, BENCH_PASS_FORWARD, 0, FLASHCL_PRECISION_TF32X3},
        {FLASHCL_F32, 128, 0, BENCH_PASS_FORWARD, 0, FLASHCL_PRECISION_TF32X3},
        {FLASHCL_F32, 64, 0, BENCH_PASS_BACKWARD, 0, FLASHCL_PRECISION_TF32},
        {FLASHCL_F32, 128, 0, BENCH_PASS_BACKWARD, 0, FLASHCL_PRECISION_TF32},
        {FLASHCL_F32, 64, 0, BENCH_PASS_BACKWARD, 0, FLASHCL_PRECISION_TF32X3},
        {FLASHCL_F32, 128, 0, BENCH_PASS_BACKWARD, 0, FLASHCL_PRECISION_TF32X3},
    };
    static const struct tune_key quick[] = {
        {FLASHCL_F32, 64, 0, BENCH_PASS_FORWARD, 0, 0},  {FLASHCL_F16, 64, 0, BENCH_PASS_FORWARD, 0, 0},
        {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 0, 0}, {FLASHCL_F16, 128, 1, BENCH_PASS_FORWARD, 0, 0},
        {FLASHCL_F32, 64, 0, BENCH_PASS_BACKWARD, 0, 0}, {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 4, 0},
        {FLASHCL_F16, 128, 0, BENCH_PASS_FORWARD, 7, 0},
        {FLASHCL_F32, 64, 0, BENCH_PASS_BACKWARD, 0, FLASHCL_PRECISION_TF32X3},
    };
    enum { MAX_KEYS = sizeof(full) / sizeof(full[0]) };
    const struct tune_key *keys = opt->quick ? quick : full;
    const int n_keys = opt->quick ? (int)(sizeof(quick) / sizeof(quick[0])) : (int)(sizeof(full) / sizeof(full[0]));
    const int reps = opt->quick ? 3 : 7;
    const int max_candidates = opt->quick ? 6 : 32;  /* an evenly spaced subset where a kernel has more */

    flashcl_context *base = candidate_context(cl, dev, NULL, 0);
    if (!base) {
        fprintf(stderr, "flashcl-probe: %s\n", flashcl_last_error());
        return 1;
    }
    struct flashcl_tuned_config winners[MAX_KEYS];
    int n_winners = 0;

    /* Candidates of the kernel the library runs for each key, as its planner
     * says for aligned views (the probe knows no kernel by name); a decode
     * key's, up to five split counts a shape (for the progress bar). */
    struct flashcl_tuned_config cand[128];
    int total = 0, done = 0;
    const char *kernel_of[MAX_KEYS];
    for (int i = 0; i < n_keys; i++) {
        kernel_of[i] = planned_kernel(base, queue, &keys[i], opt);
        if (!kernel_of[i] && !keys[i].group && !keys[i].precision)
            kernel_of[i] = keys[i].pass == BENCH_PASS_FORWARD ? "portable" : "backward";
        if (keys[i].precision && !tf32_kernel(kernel_of[i]))
            continue;  /* skipped below: no TF32 kernel here */
        int n = flashcl_tuning_candidates(base, kernel_of[i], keys[i].dtype, keys[i].d, p->usable_local, NULL, 0);
        n *= keys[i].group ? 5 : 1;
        total += (n < max_candidates ? n : max_candidates) + 1;
    }

    printf("\nTuning \"%s\" (%s): timed at N=%d, batch*N=%ld, heads*d=%ld; median of %d; each candidate\n"
           "first checked against the double reference on N=%d (decode/G: one query a sequence, G query heads a\n"
           "KV head, a cache of N keys, checked on one sequence)\n", p->name, opt->quick ? "quick" : "full", opt->n,
           opt->tokens, opt->hidden, reps, CHECK_N);
    printf("%-8s %-6s %3s %6s  %-40s %10s %10s %8s\n", "pass", "dtype", "d", "causal", "winner (kernel:shape)",
           "tuned ms", "untuned ms", "speedup");
    for (int i = 0; i < n_keys; i++) {
        const struct tune_key *key = &keys[i];
        char pass[16];
        if (key->group)
            snprintf(pass, sizeof(pass), "decode/%d", key->group);
        else
            snprintf(pass, sizeof(pass), "%s", bench_pass_name(key->pass));
        const char *const var = kernel_of[i];
        if (key->group && !same_kernel(var, "decode") && !same_kernel(var, "decode-tensor-core")) {
            printf("%-8s %-6s %3d %6d  not planned on a decode kernel here (%s); skipped\n", pass,
                   flashcl_dtype_name(key->dtype), key->d, key->causal, var ? var : "no plan");
            continue;
        }
        if (key->precision && !tf32_kernel(var)) {  /* the FMA kernels' own keys tune those */
            printf("%-8s %-6s %3d %6d  not planned on a TF32 kernel here (%s); skipped\n", pass, key_dtype_name(key),
                   key->d, key->causal, var ? var : "no plan");
            continue;
        }
        /* Inputs: a small problem to check, a realistic one to time. */
        struct tune_problem check, timed;
        if (!key_problem(base, queue, key, opt, true, 2 * (uint64_t)i + 1, &check) ||
            !key_problem(base, queue, key, opt, false, 2 * (uint64_t)i + 2, &timed)) {
            fprintf(stderr, "flashcl-probe: cannot allocate the tuning inputs\n");
            problem_release(&check);
            flashcl_context_destroy(&base);
            return 1;
        }
        struct flashcl_tile base_tile = {0};
        problem_config(base, &timed, &base_tile);
        const double untuned = evaluate(base, queue, base_tile.kernel, 0, &check, &timed, reps);

        struct flashcl_tuned_config all[128];
        int n_all = key->group ? decode_candidates(base, var, key, &timed, base_tile.splits, p->usable_local, all, 128)
                               : flashcl_tuning_candidates(base, var, key->dtype, key->d, p->usable_local, all, 128);
        n_all = n_all < 128 ? n_all : 128;
        const int n_pick = n_all < max_candidates ? n_all : max_candidates;
        for (int j = 0; j < n_pick; j++)  /* an evenly spaced subset when capped */
            cand[j] = all[(long)j * n_all / n_pick];
        /* The untuned choice is a candidate too, so the winner is never a
         * configuration measured slower than what the library would do. */
        int n_try = n_pick;
        const bool has_baseline = same_kernel(base_tile.kernel, var) && n_try < 128;
        if (has_baseline) {
            struct flashcl_tuned_config *u = &cand[n_try++];
            memset(u, 0, sizeof(*u));
            u->kernel = var;
            u->dtype = key->dtype;
            u->head_dim = key->d;
            u->block_m = base_tile.block_m;
            u->block_n = base_tile.block_n;
            u->warps = base_tile.warps;
            u->m_tiles = base_tile.m_tiles;
            if (key->group) {  /* the rule's split count for this grid, forced like the others' */
                u->rows = key_rows(key);
                u->splits = base_tile.splits;
                u->groups = timed.decode->shape.batch * timed.decode->shape.heads_kv;
            }
        }
        double best = INFINITY;
        int best_j = -1, rejected = 0;
        for (int j = 0; j < n_try; j++) {
            char what[64];
            char shape[96] = "";
            flashcl_tuning_override(&cand[j], shape, sizeof(shape));
            snprintf(what, sizeof(what), "%s %s d=%d %s %s", pass, key_dtype_name(key), key->d,
                     key->causal ? "causal" : "full", shape);
            progress(done++, total, what);
            flashcl_context *ctx = candidate_context(cl, dev, &cand[j], p->usable_local);
            const double ms = ctx ? evaluate(ctx, queue, var, cand[j].splits, &check, &timed, reps) : -1;
            flashcl_context_destroy(&ctx);
            if (ms == -2)
                rejected++;  /* wrong results: never stored */
            if (ms > 0 && ms < best) {
                best = ms;
                best_j = j;
            }
        }
        fprintf(stderr, "\r%*s\r", 100, "");
        double final_tuned = best, final_untuned = untuned;
        if (best_j >= 0 && !(has_baseline && best_j == n_try - 1) && same_kernel(var, base_tile.kernel)) {
            /* Noise can crown the wrong one: winner and untuned choice timed
             * again in alternation; the untuned one stays unless beaten. */
            flashcl_context *wctx = candidate_context(cl, dev, &cand[best_j], p->usable_local);
            struct bench_env we = {.ctx = wctx, .queue = queue}, be = {.ctx = base, .queue = queue};
            double tw[3] = {0}, tb3[3] = {0};
            for (int r = 0; wctx && r < 3; r++) {
                time_pass(&we, &timed, reps, &tw[r]);
                time_pass(&be, &timed, reps, &tb3[r]);
            }
            flashcl_context_destroy(&wctx);
            qsort(tw, 3, sizeof(double), compare_doubles);
            qsort(tb3, 3, sizeof(double), compare_doubles);
            final_tuned = tw[1];
            final_untuned = tb3[1];
            if (!(final_tuned < final_untuned) && has_baseline) {
                best_j = n_try - 1;
                final_tuned = final_untuned;
            }
        }
        if (has_baseline && best_j == n_try - 1)
            final_tuned = final_untuned;  /* the untuned choice won: the same configuration */
        if (best_j >= 0 && same_kernel(var, base_tile.kernel)) {
            struct flashcl_tuned_config w = cand[best_j];
            w.causal = key->causal;
            w.precision = tf32_kernel(var) ? key->precision : FLASHCL_PRECISION_EXACT;
            w.ms = final_tuned;
            winners[n_winners++] = w;
            char shape[96] = "";
            flashcl_tuning_override(&w, shape, sizeof(shape));
            printf("%-8s %-6s %3d %6d  %-40s %10.3f %10.3f %7.2fx%s\n", pass, key_dtype_name(key), key->d,
                   key->causal, shape, final_tuned, final_untuned, final_untuned / final_tuned,
                   rejected ? "  (wrong candidates dropped)" : "");
        } else {
            printf("%-8s %-6s %3d %6d  no candidate ran correctly (%d disagreed with the reference)\n", pass,
                   key_dtype_name(key), key->d, key->causal, rejected);
        }
        problem_release(&check);
        problem_release(&timed);
    }
    progress(total, total, "done");
    fprintf(stderr, "\n");

    /* The tuning file: header, the probed local memory, the winners. */
    char default_path[1024];
    const char *path = opt->out;
    if (!path) {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        snprintf(default_path, sizeof(default_path), "%s%s/flashcl/tuning.txt", xdg && *xdg ? xdg : home ? home : ".",
                 xdg && *xdg ? "" : "/.cache");
        path = default_path;
        if (!make_parent_dirs(default_path))
            fprintf(stderr, "flashcl-probe: cannot create the folder of %s\n", default_path);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        flashcl_context_destroy(&base);
        return 1;
    }
    char line[512];
    fprintf(f, "flashcl-tuning 2\n# written by flashcl-probe --tune%s\n", opt->quick ? " --quick" : "");
    if (flashcl_tuning_format(base, NULL, p->usable_local, line, sizeof(line)) == FLASHCL_SUCCESS)
        fprintf(f, "%s\n", line);
    for (int i = 0; i < n_winners; i++)
        if (flashcl_tuning_format(base, &winners[i], 0, line, sizeof(line)) == FLASHCL_SUCCESS)
            fprintf(f, "%s\n", line);
    fclose(f);
    printf("wrote %d configuration(s) to %s\n", n_winners, path);
    flashcl_context_destroy(&base);
    return 0;
}

/* ---------------------------------------------------------------- main */

static void roofline(const struct probe *p, int n, int d, bool json)
{
    struct flashcl_io_estimate io;
    const int heads = 2048 / d > 0 ? 2048 / d : 1, batch = 16384 / n > 0 ? 16384 / n : 1;  /* FA's convention */
    if (flashcl_io_model(batch, heads, heads, n, n, d, 2, 128, 64, &io) != FLASHCL_SUCCESS)
        return;
    const double bw = p->copy_gbs * 1e9;
    const double ai_std = io.flops / io.standard_bytes, ai_flash = io.flops / io.flash_bytes;
    const double peak_fma = p->fma_tflops * 1e12, peak_mma = p->mma_tflops > 0 ? p->mma_tflops * 1e12 : peak_fma;
    const double attain_std = fmin(peak_fma, ai_std * bw), attain_flash = fmin(peak_mma, ai_flash * bw);
    if (json) {
        printf("  \"roofline\": {\"N\": %d, \"d\": %d, \"batch\": %d, \"heads\": %d, \"flops\": %.4g, "
               "\"standard_bytes\": %.4g, \"flash_bytes\": %.4g, \"standard_intensity\": %.2f, "
               "\"flash_intensity\": %.2f, \"standard_attainable_tflops\": %.2f, \"flash_attainable_tflops\": %.2f},\n",
               n, d, batch, heads, io.flops, io.standard_bytes, io.flash_bytes, ai_std, ai_flash, attain_std / 1e12,
               attain_flash / 1e12);
        return;
    }
    printf("\nRoofline for N=%d, d=%d, f16 (batch %d, heads %d; IO model with Q blocks of 128, K/V of 64):\n", n, d,
           batch, heads);
    printf("  standard attention: %.3g FLOP over %.3g bytes = %.1f FLOP/byte -> at most %.3g TFLOP/s (%s-bound)\n",
           io.flops, io.standard_bytes, ai_std, attain_std / 1e12, ai_std * bw < peak_fma ? "memory" : "compute");
    printf("  flashcl:            %.3g FLOP over %.3g bytes = %.1f FLOP/byte -> at most %.3g TFLOP/s (%s-bound)\n",
           io.flops, io.flash_bytes, ai_flash, attain_flash / 1e12, ai_flash * bw < peak_mma ? "memory" : "compute");
    printf("  K/V-outer loop order would read Q blocks %llu times per head, Q-outer %llu times\n",
           io.q_block_reads_kv_outer, io.q_block_reads_q_outer);
}

int main(int argc, char **argv)
{
    struct options opt = {0};
    opt.n = 16384;
    opt.d = 128;
    opt.tokens = 16384;
    opt.hidden = 2048;
    bool n_given = false;
    static const struct option longopts[] = {
        {"json", no_argument, 0, 'j'}, {"tune", no_argument, 0, 't'},    {"quick", no_argument, 0, 'q'},
        {"out", required_argument, 0, 'o'}, {"n", required_argument, 0, 'n'}, {"d", required_argument, 0, 'd'},
        {"tokens", required_argument, 0, 'T'}, {"hidden", required_argument, 0, 'H'},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {"kernels", no_argument, 0, 'k'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'j': opt.json = true; break;
        case 't': opt.tune = true; break;
        case 'q': opt.quick = true; break;
        case 'o': opt.out = optarg; break;
        case 'n': opt.n = atoi(optarg); n_given = true; break;
        case 'T': opt.tokens = atol(optarg); break;
        case 'H': opt.hidden = atol(optarg); break;
        case 'd': opt.d = atoi(optarg); break;
        case 'k': return print_kernels();
        case 'h':
            printf("usage: flashcl-probe [--json] [--n N] [--d D] [--tokens T] [--hidden C]\n"
                   "                     [--tune [--quick] [--out FILE]]\n"
                   "       flashcl-probe --kernels | --help | --version\n"
                   "Probes the device flashcl would use (FLASHCL_DEVICE, else the first GPU): the local memory\n"
                   "that really builds and runs, copy bandwidth, FMA and tensor-core rates, the roofline.\n"
                   "  --json           the probe's results as JSON on stdout\n"
                   "  --n N, --d D     roofline shape: sequence length and head dim (16384, 128)\n"
                   "  --tune           also time each kernel's candidate tiles per pass, dtype, head dim and\n"
                   "                   mask (each checked against a double-precision reference first) and\n"
                   "                   write the winners to the tuning file the library reads\n"
                   "  --quick          with --tune: fewer candidates and N = 2048\n"
                   "  --out FILE       with --tune: the tuning file (default $FLASHCL_TUNING, else\n"
                   "                   $XDG_CACHE_HOME/flashcl/tuning.txt)\n"
                   "  --tokens T       with --tune: batch*N of the timed calls (16384); N is --n (4096)\n"
                   "  --hidden C       with --tune: heads*d of the timed calls (2048)\n"
                   "  --kernels        print the kernel table as Markdown (docs/design.md's) and exit\n"
                   "  --help           this text\n"
                   "  --version        the library's version\n");
            return 0;
        case 'V': printf("flashcl-probe %s\n", flashcl_version()); return 0;
        default:
            return 2;
        }
    }
    if (opt.tune && !n_given)
        opt.n = opt.quick ? 2048 : 4096;
    if (opt.n < 1 || opt.d < 1 || opt.d > FLASHCL_MAX_HEAD_DIM || opt.tokens < 1 || opt.hidden < 1) {
        fprintf(stderr, "flashcl-probe: --n, --tokens, --hidden must be >= 1 and --d 1..256\n");
        return 2;
    }

    flashcl_context *ctx = NULL;
    if (flashcl_context_create(NULL, &ctx) != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl-probe: %s\n", flashcl_last_error());
        return 1;
    }
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_device_id dev = flashcl_context_device(ctx);
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(cl, dev, CL_QUEUE_PROFILING_ENABLE, &err);

    if (opt.json)
        printf("{\n  \"flashcl_version\": \"%s\",\n", FLASHCL_VERSION_STRING);
    list_devices(opt.json);

    struct probe p;
    describe(dev, &p);
    cl_device_type type = 0;
    clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof(type), &type, NULL);
    const bool gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    if (!opt.json)
        fprintf(stderr, "probing \"%s\" ...\n", p.name);
    p.usable_local = probe_local(cl, dev, queue, (size_t)p.reported_local);
    measure_rates(cl, dev, queue, &p, gpu);
    const int tensor = flashcl_context_has_tensor_cores(ctx, &p.tensor_note);
    const char *wgmma_note = NULL;
    const int wgmma = flashcl_context_has_wgmma(ctx, &wgmma_note);
    if (tensor)
        measure_mma(cl, dev, queue, &p);
    const double ridge_fma = p.fma_tflops * 1e12 / (p.copy_gbs * 1e9);
    const double ridge_mma = p.mma_tflops * 1e12 / (p.copy_gbs * 1e9);

    if (opt.json) {
        printf("  \"probed\": {\"name\": \"%s\", \"vendor\": \"%s\", \"driver\": \"%s\", \"compute_units\": %u, "
               "\"clock_mhz\": %u, \"global_mem\": %llu, \"max_alloc\": %llu, \"reported_local_mem\": %llu, "
               "\"usable_local_mem\": %zu, \"max_work_group\": %zu, \"fp16\": %s, \"bf16_storage\": true, "
               "\"tensor_cores\": %s, \"tensor_core_note\": \"%s\", \"wgmma\": %s, \"wgmma_note\": \"%s\", \"copy_gb_s\": %.4g, \"fma_tflops\": %.4g, "
               "\"mma_tflops\": %.4g, \"ridge_fma\": %.4g, \"ridge_mma\": %.4g},\n",
               p.name, p.vendor, p.driver, p.compute_units, p.clock_mhz, (unsigned long long)p.global_mem,
               (unsigned long long)p.max_alloc, (unsigned long long)p.reported_local, p.usable_local, p.max_wg,
               p.fp16 ? "true" : "false", tensor ? "true" : "false", p.tensor_note, wgmma ? "true" : "false",
               wgmma_note, p.copy_gbs, p.fma_tflops,
               p.mma_tflops, ridge_fma, tensor ? ridge_mma : 0.0);
        roofline(&p, opt.n, opt.d, true);
        printf("  \"sizing_rule_d%d\": {\"reported\": %zu, \"probed\": %zu}\n}\n", opt.d,
               flashcl_block_size_bound((size_t)p.reported_local, 4, (size_t)opt.d),
               flashcl_block_size_bound(p.usable_local, 4, (size_t)opt.d));
    } else {
        printf("\nProbed \"%s\" (%s, driver %s):\n", p.name, p.vendor, p.driver);
        printf("  compute units %u at %u MHz, global memory %.1f GB (largest allocation %.1f GB)\n", p.compute_units,
               p.clock_mhz, p.global_mem / 1e9, p.max_alloc / 1e9);
        printf("  local memory: %llu bytes reported, %zu bytes of static __local built and ran\n",
               (unsigned long long)p.reported_local, p.usable_local);
        printf("  sizing rule at d=%d: B <= %zu on the reported size, %zu on the probed one\n", opt.d,
               flashcl_block_size_bound((size_t)p.reported_local, 4, (size_t)opt.d),
               flashcl_block_size_bound(p.usable_local, 4, (size_t)opt.d));
        printf("  f16: %s; bf16: storage (read and written by shifts, arithmetic in f32)\n",
               p.fp16 ? "cl_khr_fp16" : "storage only (vload_half), no cl_khr_fp16");
        printf("  tensor cores: %s (%s)\n", tensor ? "yes" : "no", p.tensor_note);
        printf("  wgmma (sm_90a route): %s\n", wgmma_note);
        printf("  copy bandwidth %.0f GB/s (read + write), fp32 FMA %.2f TFLOP/s", p.copy_gbs, p.fma_tflops);
        if (tensor)
            printf(", mma.sync f16 %.0f TFLOP/s", p.mma_tflops);
        printf("\n  ridge point: %.1f FLOP/byte on the FMA units", ridge_fma);
        if (tensor)
            printf(", %.1f FLOP/byte on the tensor cores", ridge_mma);
        printf("\n");
        roofline(&p, opt.n, opt.d, false);
    }
    int rc = 0;
    if (opt.tune)
        rc = tune(cl, dev, queue, &p, &opt);
    clReleaseCommandQueue(queue);
    flashcl_context_destroy(&ctx);
    return rc;
}
