/* Which forward kernel a call runs: the tensor-core one where the device,
 * the dtype, the head dim and the views allow it, else the portable one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* cl_nv_device_attribute_query */
#define DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001

struct mma_shape {
    int warps, m_tiles, block_n;
};

/* The tensor-core kernels' built-in shapes, from sweeps at N = 16k on the
 * H200 (2026-11-29, docs/perf.md v0.5). f16/bf16: 4 warps x 2 tiles x
 * 64-key blocks, the best of seven shapes (237-238 TFLOP/s at d = 64, 278
 * causal at d = 128); non-causal d = 128: 8 warps x 1 tile x 128 keys (261
 * vs 255: 244 registers and no spills, against 255 and 68 bytes of spills).
 * TF32: 4 x 2 x 64 up to d = 64 (TF32 113-114 vs 100-101 TFLOP/s for
 * 4 x 2 x 32), 8 x 2 x 32 past it (3xTF32 54 vs 49-50). Smaller shapes
 * follow, for devices whose local memory the first ones do not fit. */
static int mma_builtin_shapes(enum flashcl_variant variant, int head_dim, int causal, struct mma_shape *out)
{
    int n = 0;
    if (variant == FLASHCL_VARIANT_TF32) {
        if (head_dim > 64)
            out[n++] = (struct mma_shape){8, 2, 32};
        out[n++] = (struct mma_shape){4, 2, head_dim <= 64 ? 64 : 32};
    } else {
        if (head_dim == 128 && !causal)
            out[n++] = (struct mma_shape){8, 1, 128};
        out[n++] = (struct mma_shape){4, 2, 64};
    }
    out[n++] = (struct mma_shape){4, 1, 32};
    out[n++] = (struct mma_shape){4, 1, 16};
    return n;
}

static bool valid_mma_shape(int warps, int m_tiles, int block_n)
{
    return warps >= 1 && warps <= 8 && (m_tiles == 1 || m_tiles == 2) && block_n >= 16 && block_n <= 128 &&
           block_n % 16 == 0;
}

/* FLASHCL_MMA_CONFIG="warps,m_tiles,block_n" and FLASHCL_FMA_TILE="block_m,block_n"
 * stand for the context parameters of the same meaning where those are 0:
 * measuring aids (bench/gpu-run.sh sweeps), read once here rather than per call. */
void variant_read_env(flashcl_context *ctx)
{
    const char *mma = getenv("FLASHCL_MMA_CONFIG"), *fma = getenv("FLASHCL_FMA_TILE");
    int a, b, c;
    if (mma && *mma && !ctx->forced_mma_warps && !ctx->forced_mma_m_tiles && !ctx->forced_mma_block_n) {
        if (sscanf(mma, "%d,%d,%d", &a, &b, &c) == 3 && valid_mma_shape(a, b, c)) {
            ctx->forced_mma_warps = a;
            ctx->forced_mma_m_tiles = b;
            ctx->forced_mma_block_n = c;
        } else {
            log_msg(ctx, FLASHCL_LOG_WARN, "FLASHCL_MMA_CONFIG=\"%s\" ignored: want warps (1..8),m_tiles (1 or 2),"
                    "block_n (16..128, a multiple of 16)", mma);
        }
    }
    if (fma && *fma && !ctx->forced_block_m && !ctx->forced_block_n) {
        if (sscanf(fma, "%d,%d", &a, &b) == 2 && a >= 1 && a <= 256 && b >= 1 && b <= 256) {
            ctx->forced_block_m = a;
            ctx->forced_block_n = b;
        } else {
            log_msg(ctx, FLASHCL_LOG_WARN, "FLASHCL_FMA_TILE=\"%s\" ignored: want block_m,block_n (1..256 each)", fma);
        }
    }
}

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
 * this size build and run (227 KB seen on an H200, ../shared/DEVICE.md). */
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

void variant_disable(flashcl_context *ctx, const char *why)
{
    pthread_mutex_lock(&ctx->lock);
    if (atomic_exchange(&ctx->tensor_cores, false)) {
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
                 "fell back to the FMA kernels: a tensor-core kernel failed (%s)", why);
        log_msg(ctx, FLASHCL_LOG_WARN, "tensor cores off: %s; %s", ctx->tensor_core_note, flashcl_last_error());
    }
    pthread_mutex_unlock(&ctx->lock);
}

void variant_probe(flashcl_context *ctx, bool portable_only)
{
    ctx->tensor_cores = false;
    const char *assume = getenv("FLASHCL_TEST_ASSUME_TENSOR_CORES");
    if (!portable_only && assume && strcmp(assume, "1") == 0) {
        /* Tests only: claim tensor cores without the probe, so a device that
         * has none exercises the fallback above. */
        ctx->tensor_cores = true;
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note), "assumed (FLASHCL_TEST_ASSUME_TENSOR_CORES)");
        return;
    }
    if (portable_only) {
        snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
                 "disabled: portable_only or FLASHCL_PORTABLE=1");
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
        log_msg(ctx, FLASHCL_LOG_WARN, "tensor cores off: %s", ctx->tensor_core_note);
        return;
    }
    ctx->tensor_cores = true;
    ctx->arch_local_mem = nvidia_local_mem(major, minor);
    snprintf(ctx->tensor_core_note, sizeof(ctx->tensor_core_note),
             "compute capability %u.%u, inline-PTX probe built", major, minor);
    log_msg(ctx, FLASHCL_LOG_INFO, "tensor cores on: %s", ctx->tensor_core_note);
}

const char *flashcl_variant_name(enum flashcl_variant variant)
{
    return variant == FLASHCL_VARIANT_PORTABLE         ? "portable"
           : variant == FLASHCL_VARIANT_TENSOR_CORE    ? "tensor-core"
           : variant == FLASHCL_VARIANT_REGISTER_TILED ? "register-tiled"
           : variant == FLASHCL_VARIANT_TF32           ? "tf32"
                                                       : NULL;
}

int flashcl_context_has_tensor_cores(const flashcl_context *ctx, const char **why)
{
    if (why)
        *why = ctx ? ctx->tensor_core_note : "ctx is NULL";
    return ctx && ctx->tensor_cores;
}

/* Every view's rows start on 16 bytes (cp.async copies 16-byte chunks). */
static bool rows_aligned(const flashcl_tensor *t)
{
    const size_t esize = flashcl_dtype_size(t->dtype);
    return t->offset % 16 == 0 && (t->stride_batch * esize) % 16 == 0 && (t->stride_seq * esize) % 16 == 0 &&
           (t->stride_head * esize) % 16 == 0;
}

static bool mma_tile(const flashcl_context *ctx, const struct flashcl_attention *a, enum flashcl_variant variant,
                     struct flashcl_tile *out);

flashcl_status variant_choose(flashcl_context *ctx, const struct flashcl_attention *a, struct flashcl_tile *out)
{
    if (ctx->tensor_cores && rows_aligned(&a->q) && rows_aligned(&a->k) && rows_aligned(&a->v) &&
        rows_aligned(&a->o)) {
        if ((a->q.dtype == FLASHCL_F16 || a->q.dtype == FLASHCL_BF16) && a->head_dim % 16 == 0 &&
            a->head_dim <= 128 && mma_tile(ctx, a, FLASHCL_VARIANT_TENSOR_CORE, out))
            return FLASHCL_SUCCESS;
        if (a->q.dtype == FLASHCL_F32 && a->precision != FLASHCL_PRECISION_EXACT && a->head_dim % 8 == 0 &&
            a->head_dim <= 128 && mma_tile(ctx, a, FLASHCL_VARIANT_TF32, out))
            return FLASHCL_SUCCESS;
    }
    return tile_choose(ctx, a->head_dim, a->q.dtype, a->causal, out);
}

static bool mma_fits(const flashcl_context *ctx, enum flashcl_variant variant, struct mma_shape shape, int head_dim)
{
    return variant_mma_local_bytes(variant, 16 * shape.m_tiles * shape.warps, shape.block_n, head_dim) <=
           usable_local_mem(ctx);
}

/* Shape precedence: context parameters (or FLASHCL_MMA_CONFIG, read at
 * context creation; unset ones from the first built-in shape), the tuning
 * file, the first built-in shape whose local memory fits. False (the call
 * runs on the FMA units) when a forced shape, or every built-in one, does
 * not fit. */
static bool mma_tile(const flashcl_context *ctx, const struct flashcl_attention *a, enum flashcl_variant variant,
                     struct flashcl_tile *out)
{
    struct mma_shape builtin[4];
    const int n_builtin = mma_builtin_shapes(variant, a->head_dim, a->causal, builtin);
    const struct flashcl_tuned_config *tuned = tuning_find(ctx, variant, a->q.dtype, a->head_dim, a->causal);
    const struct mma_shape tuned_shape = tuned ? (struct mma_shape){tuned->warps, tuned->m_tiles, tuned->block_n}
                                               : (struct mma_shape){0, 0, 0};
    struct mma_shape shape;
    enum flashcl_tile_source source;
    if (ctx->forced_mma_warps || ctx->forced_mma_m_tiles || ctx->forced_mma_block_n) {
        shape.warps = ctx->forced_mma_warps ? ctx->forced_mma_warps : builtin[0].warps;
        shape.m_tiles = ctx->forced_mma_m_tiles ? ctx->forced_mma_m_tiles : builtin[0].m_tiles;
        shape.block_n = ctx->forced_mma_block_n ? ctx->forced_mma_block_n : builtin[0].block_n;
        source = FLASHCL_TILE_FORCED;
        if (!mma_fits(ctx, variant, shape, a->head_dim))
            return false;
    } else if (tuned && mma_fits(ctx, variant, tuned_shape, a->head_dim)) {
        shape = tuned_shape;
        source = FLASHCL_TILE_TUNED;
    } else {
        int i = 0;
        while (i < n_builtin && !mma_fits(ctx, variant, builtin[i], a->head_dim))
            i++;
        if (i == n_builtin)
            return false;
        shape = builtin[i];
        source = FLASHCL_TILE_DEFAULT;
    }
    memset(out, 0, sizeof(*out));
    out->variant = variant;
    out->source = source;
    out->warps = shape.warps;
    out->m_tiles = shape.m_tiles;
    out->block_m = 16 * shape.m_tiles * shape.warps;
    out->block_n = shape.block_n;
    out->workgroup_size = 32 * shape.warps;
    out->local_bytes = variant_mma_local_bytes(variant, out->block_m, shape.block_n, a->head_dim);
    return true;
}

/* Mirrors the __local arrays of cl/flash_forward_mma.cl and cl/flash_forward_tf32.cl. */
size_t variant_mma_local_bytes(enum flashcl_variant variant, int block_m, int block_n, int head_dim)
{
    const size_t m = (size_t)block_m, n = (size_t)block_n, d = (size_t)head_dim;
    if (variant == FLASHCL_VARIANT_TF32)
        return ((m + n) * (d + 8) + n * (d + 4)) * sizeof(float);
    return (m + 4 * n) * d * 2;  /* Q, and K and V twice (double-buffered) */
}

flashcl_status flashcl_forward_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                      struct flashcl_tile *out)
{
    clear_error();
    if (!ctx || !attn || !out)
        return fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL", !ctx ? "ctx" : !attn ? "attn" : "out");
    flashcl_status st = validate_attention(ctx, attn);
    if (st != FLASHCL_SUCCESS)
        return st;
    return variant_choose(ctx, attn, out);
}
