/* NVIDIA specifics read once at context creation: the compute capability,
 * whether the inline PTX the tensor-core kernels use builds, and the local
 * memory a work-group may really declare. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* cl_nv_device_attribute_query */
#define DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001

/* The instructions the tensor-core kernel uses, in the smallest kernel that
 * uses them all: if this builds, the compiler takes the inline PTX. */
static const char probe_source[] =
    "__kernel void probe(__global const ushort *src, __global float *dst)\n"
    "{\n"
    "    __local uint4 tile[32] __attribute__((aligned(16)));\n"
    "    const uint lane = get_local_id(0);\n"
    "    const uint addr = (uint)(size_t)&tile[lane];\n"
    "    __asm__ volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"(addr), \"l\"(src + 8 * lane) : \"memory\");\n"
    "    __asm__ volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
    "    __asm__ volatile(\"cp.async.wait_group 0;\" ::: \"memory\");\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    uint a[4], b[4];\n"
    "    __asm__ volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\"\n"
    "                     : \"=r\"(a[0]), \"=r\"(a[1]), \"=r\"(a[2]), \"=r\"(a[3]) : \"r\"(addr) : \"memory\");\n"
    "    __asm__ volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\"\n"
    "                     : \"=r\"(b[0]), \"=r\"(b[1]), \"=r\"(b[2]), \"=r\"(b[3]) : \"r\"(addr) : \"memory\");\n"
    "    float c[4] = {0, 0, 0, 0};\n"
    "    __asm__ volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "                     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "    __asm__ volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "                     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[2]), \"r\"(b[3]));\n"
    "    uint tf[2];\n"
    "    __asm__(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(tf[0]) : \"f\"(c[0]));\n"
    "    __asm__(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(tf[1]) : \"f\"(c[1]));\n"
    "    __asm__ volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "                     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(tf[0]), \"r\"(tf[1]));\n"
    "    uint packed;\n"
    "    __asm__(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(packed) : \"f\"(c[1]), \"f\"(c[0]));\n"
    "    __asm__(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(packed) : \"f\"(c[3]), \"f\"(packed ? c[2] : 0.0f));\n"
    "    float r;\n"
    "    __asm__ volatile(\"shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\" : \"=f\"(r) : \"f\"(c[2]), \"r\"(1));\n"
    "    dst[lane] = r + (float)packed;\n"
    "}\n";

/* Shared memory one block may use on NVIDIA GPUs (CUDA's per-block opt-in
 * maximum). NVIDIA's OpenCL reports 48 KB, but static __local arrays up to
 * this size build and run (227 KB seen on an H200: docs/perf.md). */
static size_t nvidia_local_mem(cl_uint major, cl_uint minor)
{
    if (major == 9 && minor == 0)
        return 232448;  /* sm_90: 227 KB */
    if (major == 8 && (minor == 0 || minor == 7))
        return 166912;  /* sm_80, sm_87: 163 KB */
    return 101376;      /* sm_86, sm_89 and, conservatively, later ones: 99 KB */
}

static bool has_extension(cl_device_id device, const char *name)
{
    size_t size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS || size == 0)
        return false;
    char *ext = malloc(size + 1);
    if (!ext)
        return false;
    bool found = false;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, ext, NULL) == CL_SUCCESS) {
        ext[size] = '\0';
        const size_t n = strlen(name);
        for (const char *p = strstr(ext, name); p && !found; p = strstr(p + 1, name))
            found = (p == ext || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0');
    }
    free(ext);
    return found;
}


/* Small integers -2..2 as f16 bits, pseudo-random by index and matrix: every product exact in f32. */
static cl_ushort probe_value(unsigned i, unsigned matrix, int *value)
{
    static const cl_ushort bits[5] = {0xC000, 0xBC00, 0x0000, 0x3C00, 0x4000};
    const unsigned x = (i * 2654435761u + matrix * 40503u) >> 13;
    *value = (int)(x % 5) - 2;
    return bits[x % 5];
}

/* Whether got[r][c] (row-major, cols wide) is exactly sum_i a[r * a_row + i * a_step] b[c * b_col + i * b_step]
 * everywhere; else the first wrong value into the note. */
static bool exact_product(const char *what, const float *got, const int *a, size_t a_row, size_t a_step, const int *b,
                          size_t b_col, size_t b_step, int rows, int cols, int inner, char *note, size_t note_size)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            int want = 0;
            for (int i = 0; i < inner; i++)
                want += a[r * a_row + i * a_step] * b[c * b_col + i * b_step];
            if (got[r * cols + c] != (float)want) {
                snprintf(note, note_size, "its probe computed %s wrong: [%d][%d] = %g, not %d", what, r, c,
                         got[r * cols + c], want);
                return false;
            }
        }
    return true;
}

/* cl/wgmma_probe.cl built through the sm_90a route, run, and checked against the host's sums; the
 * first wrong value (or what failed) into the note. In a cl_context of its own: a fault of untried
 * instructions cannot spoil the caller's. */
static bool wgmma_probe(cl_device_id device, char *note, size_t note_size)
{
    enum { ROWS = 64, D = 128, KEYS = 64 };
    static const size_t elems[4] = {ROWS * D, KEYS * D, ROWS * KEYS, KEYS * D};  /* q, k, p, v */
    cl_ushort *host[4] = {NULL};
    int *ints[4] = {NULL};
    float *s = malloc(2 * ROWS * KEYS * sizeof(float)), *o = malloc(ROWS * D * sizeof(float));  /* S twice */
    cl_mem bufs[6] = {NULL};
    cl_int err;
    cl_context cl = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    cl_program program = NULL;
    cl_kernel kernel = NULL;
    cl_command_queue queue = NULL;
    bool ok = false;
    snprintf(note, note_size, "out of host memory");
    for (int m = 0; m < 4; m++) {
        host[m] = malloc(elems[m] * sizeof(cl_ushort));
        ints[m] = malloc(elems[m] * sizeof(int));
        if (!host[m] || !ints[m] || !s || !o)
            goto done;
        for (size_t i = 0; i < elems[m]; i++)
            host[m][i] = probe_value((unsigned)i, (unsigned)m, &ints[m][i]);
    }
    if (!cl) {
        snprintf(note, note_size, "its probe's cl_context was not created (%d)", err);
        goto done;
    }
    if (!(program = fcl_program_build_sm90a(cl, device, flashcl_source_wgmma_probe, "-cl-std=CL1.2"))) {
        snprintf(note, note_size, "its probe did not build: %.140s", flashcl_last_error());
        goto done;
    }
    kernel = clCreateKernel(program, "wgmma_probe", &err);
    if (kernel)
        queue = clCreateCommandQueue(cl, device, 0, &err);
    for (int m = 0; m < 4 && queue && err == CL_SUCCESS; m++)
        bufs[m] = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, elems[m] * sizeof(cl_ushort), host[m],
                                 &err);
    if (queue && err == CL_SUCCESS)
        bufs[4] = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, 2 * ROWS * KEYS * sizeof(float), NULL, &err);
    if (queue && err == CL_SUCCESS)
        bufs[5] = clCreateBuffer(cl, CL_MEM_WRITE_ONLY, ROWS * D * sizeof(float), NULL, &err);
    for (cl_uint a = 0; a < 6 && err == CL_SUCCESS; a++)
        err = clSetKernelArg(kernel, a, sizeof(cl_mem), &bufs[a]);
    const size_t global = 128, local = 128;
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, bufs[4], CL_TRUE, 0, 2 * ROWS * KEYS * sizeof(float), s, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(queue, bufs[5], CL_TRUE, 0, ROWS * D * sizeof(float), o, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        snprintf(note, note_size, "its probe did not run (%d)", err);
        goto done;
    }
    if (!exact_product("QK^T", s, ints[0], D, 1, ints[1], D, 1, ROWS, KEYS, D, note, note_size) ||
        !exact_product("QK^T with Q from local memory", s + ROWS * KEYS, ints[0], D, 1, ints[1], D, 1, ROWS, KEYS, D,
                       note, note_size) ||
        !exact_product("PV", o, ints[2], KEYS, 1, ints[3], 1, D, ROWS, D, KEYS, note, note_size))
        goto done;
    ok = true;
done:
    for (int m = 0; m < 6; m++)
        if (bufs[m])
            clReleaseMemObject(bufs[m]);
    if (queue)
        clReleaseCommandQueue(queue);
    if (kernel)
        clReleaseKernel(kernel);
    if (program)
        clReleaseProgram(program);
    if (cl)
        clReleaseContext(cl);
    for (int m = 0; m < 4; m++) {
        free(host[m]);
        free(ints[m]);
    }
    free(s);
    free(o);
    return ok;
}

/* Hopper's wgmma (sm_90a, compute capability 9.0 exactly): planned only where the probe ran right. */
static void probe_sm90a_route(flashcl_context *ctx)
{
    struct device_desc *dev = &ctx->dev;
    char why[200];
    if (dev->nv_major != 9 || dev->nv_minor != 0) {
        snprintf(ctx->wgmma_note, sizeof(ctx->wgmma_note), "off: wgmma needs compute capability 9.0 (sm_90a)");
        return;
    }
    const struct kernel_info *k = fcl_kernel_named("tensor-core-wgmma");
    if (k && ctx->overrides[fcl_kernel_index(k)].off) {
        snprintf(ctx->wgmma_note, sizeof(ctx->wgmma_note), "off: turned off by the kernel options (not probed)");
        return;
    }
    dev->wgmma = wgmma_probe(ctx->device, why, sizeof(why));
    fcl_clear_error();
    snprintf(ctx->wgmma_note, sizeof(ctx->wgmma_note), "%s: %s", dev->wgmma ? "on" : "off",
             dev->wgmma ? "the sm_90a route's probe built and computed its three products exactly" : why);
    fcl_log_msg(ctx, dev->wgmma ? FLASHCL_LOG_INFO : FLASHCL_LOG_WARN, "wgmma %s", ctx->wgmma_note);
}

void fcl_nvidia_probe(flashcl_context *ctx, bool portable_only, const struct fcl_test_hooks *hooks)
{
    struct device_desc *dev = &ctx->dev;
    dev->tensor_cores = false;
    dev->wgmma = false;
    snprintf(ctx->wgmma_note, sizeof(ctx->wgmma_note), "off: no tensor cores");
    if (portable_only) {
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
                 "disabled: portable_only or FLASHCL_PORTABLE=1");
        return;
    }
    if (hooks->assume_tensor_cores) {
        dev->tensor_cores = true;
        dev->nv_major = hooks->assume_compute_capability / 10;
        dev->nv_minor = hooks->assume_compute_capability % 10;
        dev->tensor_cores_emulated = hooks->emulate_tensor_cores;
        dev->wgmma = hooks->assume_wgmma;  /* emulated too: cl/nv_wgmma.h has a plain-OpenCL wgmma */
        snprintf(ctx->wgmma_note, sizeof(ctx->wgmma_note), "%s (a test hook)", dev->wgmma ? "on" : "off");
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note), "%s (a test hook)",
                 hooks->emulate_tensor_cores ? "emulated" : "assumed");
        /* On a real NVIDIA sm_80+ device the emulated programs build as the device's own do: with its local
         * memory past the 48 KB it reports (else the wgmma shapes, which need more, never plan there). Older
         * parts, or a failed query, keep the reported size (nvidia_local_mem knows sm_80 on only). */
        cl_uint major = 0, minor = 0;
        if (has_extension(ctx->device, "cl_nv_device_attribute_query") &&
            clGetDeviceInfo(ctx->device, DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof(major), &major, NULL) ==
                CL_SUCCESS &&
            clGetDeviceInfo(ctx->device, DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof(minor), &minor, NULL) ==
                CL_SUCCESS &&
            major >= 8)
            ctx->arch_local_mem = nvidia_local_mem(major, minor);
        return;
    }
    if (!has_extension(ctx->device, "cl_nv_device_attribute_query")) {
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
                 "not an NVIDIA device (no cl_nv_device_attribute_query)");
        return;
    }
    cl_uint major = 0, minor = 0;
    clGetDeviceInfo(ctx->device, DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof(major), &major, NULL);
    clGetDeviceInfo(ctx->device, DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof(minor), &minor, NULL);
    dev->nv_major = (int)major;
    dev->nv_minor = (int)minor;
    if (major < 8) {
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
                 "compute capability %u.%u; mma.sync m16n8k16 with cp.async needs 8.0", major, minor);
        return;
    }
    const char *src = probe_source;
    cl_int err;
    cl_program program = clCreateProgramWithSource(ctx->cl_ctx, 1, &src, NULL, &err);
    if (program)
        err = clBuildProgram(program, 1, &ctx->device, "-cl-std=CL1.2", NULL, NULL);
    if (program)
        clReleaseProgram(program);
    if (err != CL_SUCCESS) {
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
                 "compute capability %u.%u, but the inline-PTX probe did not build (%d)", major, minor, err);
        fcl_log_msg(ctx, FLASHCL_LOG_WARN, "tensor cores off: %s", ctx->tensor_core_note);
        return;
    }
    dev->tensor_cores = true;
    ctx->arch_local_mem = nvidia_local_mem(major, minor);
    snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
             "compute capability %u.%u, inline-PTX probe built", major, minor);
    fcl_log_msg(ctx, FLASHCL_LOG_INFO, "tensor cores on: %s", ctx->tensor_core_note);
    probe_sm90a_route(ctx);
}

int flashcl_context_has_tensor_cores(const flashcl_context *ctx, const char **why)
{
    if (why)
        *why = ctx ? ctx->tensor_core_note : "ctx is NULL";
    return ctx && ctx->dev.tensor_cores;
}

int flashcl_context_has_wgmma(const flashcl_context *ctx, const char **why)
{
    if (why)
        *why = ctx ? ctx->wgmma_note : "ctx is NULL";
    return ctx && ctx->dev.wgmma;
}
