/* The kernel table: every kernel flashcl runs, with what it supports, its
 * axes and candidates, its built-in shapes, its local-memory footprint and
 * its build options. Adding a kernel is a .cl file and an entry here.
 *
 * Each footprint function mirrors the __local arrays its .cl file declares;
 * tests/test_tuning.c compares them with CL_KERNEL_LOCAL_MEM_SIZE of the
 * built kernels. The kernels' #error lines are a second guard: every shape
 * the axes and `launchable` admit passes them. Why each built-in shape is
 * what it is: docs/perf.md and docs/tuning.md. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define M AXIS_BLOCK_M
#define N AXIS_BLOCK_N
#define W AXIS_WARPS
#define T AXIS_M_TILES

/* The mask as cl/mask.h reads it, for the kernels that take any window. */
#define WINDOW_OPTIONS "-DWINDOW_LEFT=%d -DWINDOW_RIGHT=%d"

/* K and V an E4M3 cache (-DKV_E4M3: the FMA forward kernels, tensor-core, tensor-core-wgmma and the decode kernels
 * read it), Q and O of the problem's dtype. */
static bool kv_e4m3(const struct problem *p)
{
    return p->kv_dtype == FLASHCL_E4M3 && p->dtype != FLASHCL_E4M3;
}

/* NVIDIA's own E4M3 conversion (cvt.rn.f16x2.e4m3x2: compute capability 8.9 and later), where not emulated. */
static bool nv_native_e4m3(const struct device_desc *dev)
{
    return !dev->tensor_cores_emulated && dev->nv_major * 10 + dev->nv_minor >= 89;
}

/* ---- portable: cl/flash_forward.cl, any device, any head_dim and tile ---- */

#define PORTABLE_MAX_AUTO_BLOCK 128  /* past this the per-work-item register arrays only grow */

/* The work-group is side x side work-items. */
static int portable_side(const struct device_desc *dev)
{
    return dev->max_workgroup >= 256 ? 16 : 8;
}

static size_t portable_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                   const struct problem *p)
{
    const int head_dim = p->head_dim;
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N], d = (size_t)head_dim;
    const size_t dv = p->head_dim_v ? (size_t)p->head_dim_v : d;
    const size_t ldqk = d | 1;
    const size_t floats = m * ldqk + n * ldqk + n * dv + m * n + m * (size_t)portable_side(dev);
    return floats * sizeof(float);
}

/* Rounds the rule's bound down to a block the kernel runs well: a multiple of
 * the work-group's side when it is that large, else a power of two. */
static int portable_round_block(size_t bound, int side)
{
    if (bound >= PORTABLE_MAX_AUTO_BLOCK)
        return PORTABLE_MAX_AUTO_BLOCK;
    if (bound >= (size_t)side)
        return (int)(bound / (size_t)side) * side;
    int b = 1;
    while ((size_t)b * 2 <= bound)
        b *= 2;
    return b;
}

static void portable_rule(const struct device_desc *dev, const struct problem *p, struct kernel_shape *out)
{
    const int dv = p->head_dim_v > p->head_dim ? p->head_dim_v : p->head_dim;  /* the wider of the two */
    const size_t bound = flashcl_block_size_bound(dev->reported_local, sizeof(float), (size_t)dv);
    const int block = portable_round_block(bound, portable_side(dev));
    out->axis[M] = out->axis[N] = block;
}

/* The rule is approximate (the kernel also keeps a P block): the larger
 * free side shrinks by a work-group side, or halves below it. */
static bool portable_shrink(const struct device_desc *dev, struct kernel_shape *s, unsigned fixed)
{
    const int side = portable_side(dev);
    const bool can_m = !(fixed & (1u << M)) && s->axis[M] > 1;
    const bool can_n = !(fixed & (1u << N)) && s->axis[N] > 1;
    if (!can_m && !can_n)
        return false;
    int *axis = can_m && (s->axis[M] >= s->axis[N] || !can_n) ? &s->axis[M] : &s->axis[N];
    *axis = *axis > side ? *axis - side : *axis / 2;
    return true;
}

static void portable_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m,
                              int *workgroup)
{
    *block_m = s->axis[M];
    *workgroup = portable_side(dev) * portable_side(dev);
}

static void portable_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                             float scale_log2, char *buf, size_t size)
{
    const int side = portable_side(dev);
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DHEAD_DIM_V=%d -DBLOCK_M=%d -DBLOCK_N=%d -DDTYPE=%d " WINDOW_OPTIONS
             " -DTM=%d -DTN=%d -DVARLEN=%d -DKV_E4M3=%d",
             p->head_dim, p->head_dim_v ? p->head_dim_v : p->head_dim, s->axis[M], s->axis[N],
             fcl_dtype_define(p->dtype), p->window_left, p->window_right, side, side, p->varlen, kv_e4m3(p));
}

/* ---- register-tiled: cl/flash_forward_tiled.cl, 4 query rows a work-item ---- */

static size_t tiled_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                const struct problem *p)
{
    const int head_dim = p->head_dim;
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N], d = (size_t)head_dim;
    const size_t floats = m * (d + 4) + 2 * n * (d + 4) + n * (m + 4) + 16 * m;
    return floats * sizeof(float);
}

/* The sizing rule on the usable local memory, rounded down to a multiple of
 * 16, capped at 64 rows (32 when causal past d = 64) and 32 keys: the
 * fastest shapes measured (docs/perf-history.md, 2026-11-29). */
static void tiled_rule(const struct device_desc *dev, const struct problem *p, struct kernel_shape *out)
{
    const size_t bound = flashcl_block_size_bound(dev->usable_local, sizeof(float), (size_t)p->head_dim);
    const int rows = p->mask == FLASHCL_MASK_CAUSAL && p->head_dim > 64 ? 32 : 64;
    int block_m = bound >= (size_t)rows ? rows : (int)(bound / 16) * 16;
    int block_n = block_m < 32 ? block_m : 32;
    if (block_m < 16)
        block_m = block_n = 16;
    out->axis[M] = block_m;
    out->axis[N] = block_n;
}

static bool tiled_shrink(const struct device_desc *dev, struct kernel_shape *s, unsigned fixed)
{
    const bool can_n = !(fixed & (1u << N)) && s->axis[N] > 16;
    const bool can_m = !(fixed & (1u << M)) && s->axis[M] > 16;
    if (can_n && (s->axis[N] >= s->axis[M] / 2 || !can_m))
        s->axis[N] -= 16;
    else if (can_m)
        s->axis[M] -= 16;
    else
        return false;
    return true;
}

static bool tiled_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                             const struct problem *p)
{
    return (size_t)(4 * s->axis[M]) <= dev->max_workgroup;
}

static void tiled_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m, int *workgroup)
{
    *block_m = s->axis[M];
    *workgroup = 4 * s->axis[M];
}

static void tiled_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                          float scale_log2, char *buf, size_t size)
{
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d -DDTYPE=%d " WINDOW_OPTIONS " -DVARLEN=%d -DKV_E4M3=%d",
             p->head_dim, s->axis[M], s->axis[N], fcl_dtype_define(p->dtype), p->window_left, p->window_right,
             p->varlen, kv_e4m3(p));
}

/* ---- tensor cores: cl/flash_forward_mma.cl (f16/bf16), cl/flash_forward_tf32.cl ---- */

static void mma_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m, int *workgroup)
{
    *block_m = 16 * s->axis[T] * s->axis[W];
    *workgroup = 32 * s->axis[W];
}

static bool mma_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                           const struct problem *p)
{
    return (size_t)(32 * s->axis[W]) <= dev->max_workgroup;
}

/* Bytes a row of a [rows][HEAD_DIM] tile of 2-byte elements takes (cl/nv_mma16.h's ROW_CHUNKS): a
 * row of a multiple of 8 16-byte chunks as it is, any other CHUNKS | 1 chunks (an odd stride, free
 * of ldmatrix's bank conflicts; one chunk more for these kernels' head dims, multiples of 16). */
static size_t nv_tile_row_bytes(int head_dim)
{
    const size_t chunks = (size_t)head_dim / 8;
    return 16 * (chunks % 8 == 0 ? chunks : (chunks | 1));
}

/* Q, and K and V twice (double-buffered), in 2-byte-element tiles; V's rows of head_dim_v. An E4M3 cache: its
 * bytes twice (cl/kv8_tiles.h's stages, rows unpadded), and one K and V tile they are converted into. */
static size_t mma_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                              const struct problem *p)
{
    const size_t m = 16 * (size_t)s->axis[T] * (size_t)s->axis[W], n = (size_t)s->axis[N];
    const size_t kv_tiles = n * (nv_tile_row_bytes(p->head_dim) + nv_tile_row_bytes(fcl_value_dim(p)));
    const size_t kv = kv_e4m3(p) ? kv_tiles + 2 * n * (size_t)(p->head_dim + fcl_value_dim(p)) : 2 * kv_tiles;
    return m * nv_tile_row_bytes(p->head_dim) + kv +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

/* The softmax finds the row extreme on raw scores: the smallest one when the scale is negative. */
static void forward_mma_options(const struct problem *p, const struct kernel_shape *s, float scale_log2,
                                bool block_skip, int exp2_poly, char *buf, size_t size)
{
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DHEAD_DIM_V=%d -DWARPS=%d -DM_TILES=%d -DBLOCK_N=%d " WINDOW_OPTIONS
             " -DNEGATIVE_SCALE=%d -DDTYPE=%d -DVARLEN=%d -DBLOCK_SKIP=%d -DEXP2_POLY=%d",
             p->head_dim, fcl_value_dim(p), s->axis[W], s->axis[T], s->axis[N], p->window_left, p->window_right,
             scale_log2 < 0.0f, fcl_dtype_define(p->dtype), p->varlen, block_skip, exp2_poly);
}

/* Whether a warp keeps Q's fragments in registers with two tiles (cl/flash_forward_mma.cl's Q_REGS: 2 x d / 4 of
 * them; one-tile shapes always do) instead of reading them from local memory every block: up to d = 64 without a mask
 * on dense and packed batches. 4 x 2 x 64 then takes 248 registers (the driver; 236-247 without), still two
 * work-groups an SM, and a warp's block loads 32 ldmatrix.x4 instead of 40. H200, d = 64, TFLOP/s against 2026-12-03's
 * 4 x 2 x 32 capped for three an SM, f16 / bf16 (docs/perf-history.md, 2026-12-03): non-causal N = 4k 309.0 / 308.3
 * against 277.3 / 278.4, 32k 308.6 / 317.8 against 277.2 / 282.7 (+10.7..+12.4%); 8 x 2 x 64 with it +3.7..+10.1%
 * (255 registers, spilled); 4 x 2 x 32 at 168 registers -9.6..-13.9% (spilled). Causal 4 x 2 x 64 -2.1..+1.9% (even:
 * not taken). Not on a KV cache, whose key lookups these registers were not measured with. With head_dim_v, up to
 * 64 for both (O's accumulators are 2 x head_dim_v / 2). */
static bool mma_q_registers(const struct problem *p, const struct kernel_shape *s)
{
    return s->axis[T] == 2 && fcl_wide_dim(p) <= 64 && p->varlen < 2 && p->window_left < 0 && p->window_right < 0;
}

/* mma.sync: each warp skips the blocks none of its rows sees (cl/flash_forward_mma.cl's BLOCK_SKIP), always.
 * H200, f16, N = 4k / 16k, against none (docs/perf-history.md, 2026-12-02): d = 64 causal +5.1 / +4.5%, non-causal
 * +0.4 / +0.6%; d = 128 causal +1.3 / +1.9%, non-causal +1.5 / +2.3%. Every exponent on the MUFU (EXP2_POLY 0):
 * one tile in 8 on the FMA units lost 1.8-6.9% on 7 of 8 rows (d = 64 and 128; d = 128 N = 16k non-causal +1.5%),
 * two or three tiles 1.3-13.2% on all (2026-12-03). */
static void mma_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                        float scale_log2, char *buf, size_t size)
{
    forward_mma_options(p, s, scale_log2, true, 0, buf, size);
    const size_t used = strlen(buf);
    snprintf(buf + used, size - used, " -DQ_REGS=%d -DKV_E4M3=%d", mma_q_registers(p, s),
             !kv_e4m3(p) ? 0 : nv_native_e4m3(dev) ? 2 : 1);
}

/* Whether the softmax is overlapped with the previous block's PV (cl/flash_forward_mma.cl's WGMMA_OVERLAP) on 64-key
 * blocks past d = 96, where PV (its length grows with d, the softmax's with the keys) is long enough to hide
 * it, and where its registers fit: a thread holds S (BLOCK_N / 2), O (d / 2), the previous block's P
 * (BLOCK_N / 4) and about 40 more (addresses, the rows' m and l), within what a work-group of W warps leaves
 * each (65536 / 32 W registers, at most 255); ptxas 13.0 offline agreed on the built-in shapes (no spills
 * where this fits, spills where not). Q is read from local memory where its fragments (d / 4) would not fit
 * beside them. H200, f16, TFLOP/s without / with it (docs/perf-history.md, 2026-12-02), non-causal / causal:
 * N = 16k d = 128 12 x 64 395.9 / 420.0, 408.2 / 427.2 (the built-in 12 x 128: 428.9 / 427.5); N = 8k d = 160
 * 12 x 64 427.5 / 428.9, 406.3 / 414.8; d = 256 8 x 64 384.4 / 404.4, 378.7 / 394.4; where it lost: d = 64 12 x 64
 * 292.3 / 289.0, 281.3 / 279.9, 16 x 64 302.4 / 276.3, and on 128-key blocks (call 1) d = 64 12 x 128 369.7 /
 * 330.5, d = 128 8 x 128 358.2 / 357.5. Not on a paged cache: there K's and V's page lookups are apart, and ptxas
 * spilled 4-44 bytes at d = 160 and 256 (offline; not measured on the GPU). PV's length and O's registers are
 * head_dim_v's (d = 192 with dv = 128: on at 12 x 64, as d = 128 there; not measured on the GPU). */
static bool wgmma_overlaps(const struct problem *p, const struct kernel_shape *s, int *cap, int *live)
{
    const int per_thread = 65536 / (32 * s->axis[W]) & ~7;  /* registers are allocated 8 at a time */
    *cap = per_thread < 255 ? per_thread : 255;
    *live = s->axis[N] / 2 + fcl_value_dim(p) / 2 + s->axis[N] / 4 + 40;
    return s->axis[N] == 64 && fcl_value_dim(p) > 96 && p->varlen != 3 && !kv_e4m3(p) && *live <= *cap;
}

/* cl/flash_forward_mma.cl with -DWGMMA=1 (Hopper's wgmma, the sm_90a route): Q, and K and V two or three
 * times (KV_STAGES, wgmma_kv_stages), in tiles of whole 64-column panels (128 bytes a row a panel: cl/nv_mma16.h's
 * ROW_CHUNKS; V's of head_dim_v). An E4M3 cache: one K and V tile, and the stored bytes as many times. */
static size_t wgmma_bytes(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p,
                          int stages)
{
    const size_t m = 16 * (size_t)s->axis[W], n = (size_t)s->axis[N], panels = ((size_t)p->head_dim + 63) / 64;
    const size_t v_panels = ((size_t)fcl_value_dim(p) + 63) / 64;
    const size_t tiles = kv_e4m3(p) ? 1 : (size_t)stages;
    const size_t bytes8 = kv_e4m3(p) ? (size_t)stages * n * (size_t)(p->head_dim + fcl_value_dim(p)) : 0;
    return ((m + tiles * n) * panels + tiles * n * v_panels) * 128 + bytes8 +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

/* NVIDIA's ptxas option (cl_nv_compiler_options; the sm_90a route builds its PTX with the same options) that caps a
 * thread's registers so `resident` work-groups of the shape fit an SM's 65,536; none for one, nor in the emulation,
 * whose compilers elsewhere do not take it. */
static void append_register_cap(const struct device_desc *dev, const struct kernel_shape *s, int resident, char *buf,
                                size_t size)
{
    if (resident > 1 && !dev->tensor_cores_emulated) {
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, " -cl-nv-maxrregcount=%d", 65536 / (32 * s->axis[W] * resident) & ~7);
    }
}

/* Work-groups of a wgmma shape an SM holds at once where its build caps a thread's registers to fit them
 * (wgmma_options' -cl-nv-maxrregcount); 0 elsewhere: one by registers at the driver's choice, or as local memory
 * allows. At d <= 64 on dense and packed batches: 4 x 128 three (168 registers a thread), 8 x 64 two (128). Several
 * work-groups an SM fall out of step, where one work-group's warpgroups meet at each block's barrier and run their
 * products, softmaxes and PVs together; and one's first copies and last stores run under the others' loops. H200,
 * d = 64, TFLOP/s against the 12-warp built-ins, f16 / bf16 (docs/perf-history.md, 2026-12-03): non-causal 4 x 128 N = 4k
 * 440.5 / 451.1 against 382.2 / 383.1, 8k 449.5 / 462.7 against 414.2 / 412.7, 16k 430.7 / 449.8 against 421.8 /
 * 420.8 (+2.1..+17.7%; 8 x 64 there +0.0..+6.4%); causal 8 x 64 N = 4k 355.4 / 366.8 against 338.8 / 338.4, 8k
 * 398.1 / 408.5 against 381.8 / 380.0, 16k 424.9 / 428.8 against 403.2 / 402.2 (+4.3..+8.4%; 4 x 128 there
 * -1.2..+7.6%); 8 x 128 at 128 registers (two, spilling 20-32 bytes offline) lost 10-15%. Not on a KV cache, whose
 * key lookups these registers were not measured with. */
static int wgmma_resident(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p)
{
    if (fcl_wide_dim(p) > 64 || p->varlen >= 2)
        return 0;
    const int n = s->axis[W] == 4 && s->axis[N] == 128 ? 3 : s->axis[W] == 8 && s->axis[N] == 64 ? 2 : 0;
    /* Not where local memory holds fewer of them even with two K/V buffers: no registers given up for nothing. */
    return n && fcl_groups_per_unit(dev, wgmma_bytes(dev, s, p, 2) + FCL_LOCAL_SLACK) >= n ? n : 0;
}

/* Three K/V buffers where they fit the device's usable local memory as the planner counts it (so a shape that fits
 * with two still does), as many times as the work-groups an SM the build is made for; not with the overlap. */
static int wgmma_kv_stages(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p)
{
    int cap, live;
    const size_t three = wgmma_bytes(dev, s, p, 3) + FCL_LOCAL_SLACK;
    const int resident = wgmma_resident(dev, s, p);
    return !wgmma_overlaps(p, s, &cap, &live) && three <= dev->usable_local &&
                   (resident < 2 || fcl_groups_per_unit(dev, three) >= resident)
               ? 3 : 2;
}

static size_t wgmma_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                const struct problem *p)
{
    return wgmma_bytes(dev, s, p, wgmma_kv_stages(dev, s, p));
}

/* Whether the work-group's warpgroups issue their products in turns (cl/flash_forward_mma.cl's WGMMA_PINGPONG):
 * where there are two or more, at head dims 65-192. H200, f16, TFLOP/s without / with the turns (docs/perf.md
 * 2026-12-02, calls 1 and 3): d = 128 12 x 128, N = 4k / 16k, non-causal 496.4 / 493.4, 523.9 / 520.8, causal 411.0 /
 * 413.7, 496.3 / 505.8 (call 3: -0.6..+1.9%; call 1, before the lean copies: +0.2..+2.1%); d = 160 12 x 64 N = 8k
 * +2.1 / +2.2% (call 1); where it lost: d = 64 12 x 128 -1.7..-4.9% (both calls), d = 256 8 x 64 -3.7% non-causal
 * (+0.5% causal; call 1). */
static bool wgmma_pingpong(const struct problem *p, const struct kernel_shape *s)
{
    return s->axis[W] >= 8 && fcl_wide_dim(p) > 64 && fcl_wide_dim(p) <= 192;
}

/* Whether wgmma's warpgroups skip the blocks none of their rows sees (BLOCK_SKIP): with a mask past d = 64, not
 * with the overlap, and where the blocks to skip are a fair part of a work-group's keys: a window on the left, or a
 * causal diagonal across at least half the keys (rows >= keys / 2). H200, f16, N = 4k / 8k / 16k, against none
 * (docs/perf-history.md, 2026-12-02): d = 128 causal +4.7 / +1.7 / +1.8%; where it lost: d = 128 non-causal -1.0..-1.4%
 * (there only the last block's rows past the sequence skip), d = 64 causal +0.6 / -3.5 / -3.2%, non-causal +1.3 /
 * -0.7 / -1.0%; chunked prefill (d = 128 GQA 32:8, 512 and 2048 rows against 16k and 64k keys, 2026-12-02, two
 * rounds) 1.7-4.6% slower, the diagonal there 1-12% of the keys. Head dims 65-127 follow d = 128 unmeasured. */
static bool wgmma_skips(const struct problem *p, const struct kernel_shape *s)
{
    int cap, live;
    const bool masked = p->window_left >= 0 || p->window_right >= 0;
    const bool worth_it = p->window_left >= 0 || 2 * (long long)p->seq_q >= p->seq_kv;
    return masked && worth_it && fcl_wide_dim(p) > 64 && !wgmma_overlaps(p, s, &cap, &live);
}

/* The n-tiles in 8 whose exponents cl/nv_mma.h's softmax takes from exp2_poly (FMA units) instead of the MUFU:
 * one where it was measured faster, none elsewhere: where the warpgroups skip blocks (BLOCK_SKIP: a mask past
 * d = 64, with the turns), on 128-key blocks with Q read from local memory, at head dims up to 128 (the
 * built-in 12 x 128 at d = 97-128). H200, TFLOP/s, all on the MUFU against one tile in 8 (docs/perf-history.md, 2026-12-03,
 * calls 1 and 3), d = 128 causal: f16 N = 4k 431.1 / 439.3 and 434.8 / 443.7, 8k 492.4 / 496.1, 16k 516.5 / 526.1
 * and 519.2 / 527.3; bf16 4k 428.4 / 444.1, 8k 490.0 / 500.9, 16k 515.4 / 524.6 (+0.7..+3.7%). Where it did not
 * pay: d = 96 causal -6.6% (12 x 128 with Q's fragments in registers), d = 192 causal -0.3..+0.3% (12 x 64),
 * d = 128 non-causal -0.5..-0.1%, d = 64 -0.2..+0.9%; two tiles in 8 or three lost up to 9%. d = 112 follows
 * d = 128 unmeasured. */
static int wgmma_exp2_poly(const struct problem *p, const struct kernel_shape *s, bool skips, bool q_smem)
{
    return skips && q_smem && s->axis[N] == 128 && fcl_wide_dim(p) <= 128 ? 1 : 0;
}

/* Whether Q's fragments (d / 4 registers) would crowd out S (BLOCK_N / 2) and O (dv / 2) past 128-key blocks,
 * with about 40 more a thread: ptxas 13.0 offline, d = 64, 192 keys: 12 warps (168 registers) with Q in
 * registers 52 bytes of spills and wgmma serialized, from local memory none; 8 warps (255) none either way. */
static bool wgmma_q_crowds(const struct problem *p, const struct kernel_shape *s, int cap)
{
    return s->axis[N] > 128 && s->axis[N] / 2 + fcl_value_dim(p) / 2 + p->head_dim / 4 + 40 > cap;
}

/* The same arguments as mma_options'. S = QKᵀ reads Q from local memory (Q_SMEM) past d = 128, where Q's
 * fragments do not fit in registers beside O's accumulator; without the overlap past d = 96 with 128-key
 * blocks: H200, N = 16k, f16, d = 128, 12 x 128 412.6 / 424.4 TFLOP/s (non-causal / causal) against 12 x 64 with
 * Q in registers 399.9 / 398.1 (docs/perf-history.md, 2026-12-01); at d = 64, 12 x 128, registers ran 345 / 331 and local
 * memory 340 / 326; with the overlap where its estimate leaves no room for Q's d / 4 (wgmma_overlaps). With
 * head_dim_v, where the kernel's Q_IN_REGISTERS would not keep them either (d / 4 + dv / 2 past 96), and past
 * 96 for the wider of the two. */
static void wgmma_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                          float scale_log2, char *buf, size_t size)
{
    int cap, live;
    const bool overlap = wgmma_overlaps(p, s, &cap, &live);
    const bool q_smem = p->head_dim > 128 || p->head_dim + 2 * fcl_value_dim(p) > 384 ||
                        (overlap ? live + p->head_dim / 4 > cap
                                 : (fcl_wide_dim(p) > 96 && s->axis[N] == 128) || wgmma_q_crowds(p, s, cap));
    const bool skips = wgmma_skips(p, s);
    forward_mma_options(p, s, scale_log2, skips, wgmma_exp2_poly(p, s, skips, q_smem), buf, size);
    const size_t used = strlen(buf);
    snprintf(buf + used, size - used,
             " -DWGMMA=1 -DQ_SMEM=%d -DWGMMA_OVERLAP=%d -DKV_STAGES=%d -DWGMMA_PINGPONG=%d -DKV_E4M3=%d", q_smem,
             overlap, wgmma_kv_stages(dev, s, p), wgmma_pingpong(p, s), !kv_e4m3(p) ? 0 : nv_native_e4m3(dev) ? 2 : 1);
    /* The cap's reciprocal on the FMA units (cl/score_mod.h's CAP_FMA): H100, f16, N = 8k, d = 64/128, causal
     * both, +3.2..+8.7% against both on the MUFU; the exponent there too lost 29-38% (docs/perf.md). */
    if (p->softcap > 0.0f) {
        const size_t at = strlen(buf);
        snprintf(buf + at, size - at, " -DCAP_FMA=1");
    }
    append_register_cap(dev, s, wgmma_resident(dev, s, p), buf, size);
}

/* ---- E4M3 on Hopper's wgmma: cl/flash_forward_mma.cl with -DDTYPE=3 ---- */

/* Q, K's stages in 128-byte panels of 128 one-byte values, and V's as Vᵀ: dv rows of the block's 128 keys. */
static size_t wgmma_fp8_bytes(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p,
                              int stages)
{
    const size_t m = 16 * (size_t)s->axis[W], n = (size_t)s->axis[N], panels = ((size_t)p->head_dim + 127) / 128;
    return ((m + (size_t)stages * n) * panels + (size_t)stages * (size_t)fcl_value_dim(p)) * 128 +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

/* Three K/V buffers where they fit (half the bytes of f16's), else two. */
static int wgmma_fp8_stages(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p)
{
    return wgmma_fp8_bytes(dev, s, p, 3) + FCL_LOCAL_SLACK <= dev->usable_local ? 3 : 2;
}

static size_t wgmma_fp8_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                    const struct problem *p)
{
    return wgmma_fp8_bytes(dev, s, p, wgmma_fp8_stages(dev, s, p));
}

/* As wgmma_options, with O's storage. Q's fragments (d / 8 registers) stay in registers up to d = 128 (S 64, O
 * dv / 2 and P 16 beside them); the turns and the block skips by f16's rules; no overlap (64-key blocks only). Not
 * measured on a GPU yet. */
static void wgmma_fp8_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                              float scale_log2, char *buf, size_t size)
{
    const bool q_smem = p->head_dim > 128 || fcl_value_dim(p) > 128;
    const bool skips = wgmma_skips(p, s);
    forward_mma_options(p, s, scale_log2, skips, 0, buf, size);
    const size_t used = strlen(buf);
    const flashcl_dtype o = p->o_dtype ? p->o_dtype : FLASHCL_F16;  /* tuning candidates leave it unset */
    snprintf(buf + used, size - used,
             " -DWGMMA=1 -DQ_SMEM=%d -DWGMMA_OVERLAP=0 -DKV_STAGES=%d -DWGMMA_PINGPONG=%d -DO_DTYPE=%d", q_smem,
             wgmma_fp8_stages(dev, s, p), wgmma_pingpong(p, s), fcl_dtype_define(o));
    if (p->softcap > 0.0f) {
        const size_t at = strlen(buf);
        snprintf(buf + at, size - at, " -DCAP_FMA=1");
    }
}

static size_t tf32_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                               const struct problem *p)
{
    const int head_dim = p->head_dim;
    const size_t m = 16 * (size_t)s->axis[T] * (size_t)s->axis[W], n = (size_t)s->axis[N], d = (size_t)head_dim;
    return ((m + n) * (d + 8) + n * (d + 4)) * sizeof(float) +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

static void tf32_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                         float scale_log2, char *buf, size_t size)
{
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DWARPS=%d -DM_TILES=%d -DBLOCK_N=%d " WINDOW_OPTIONS " -DNEGATIVE_SCALE=%d -DPASSES=%d "
             "-DVARLEN=%d",
             p->head_dim, s->axis[W], s->axis[T], s->axis[N], p->window_left, p->window_right, scale_log2 < 0.0f,
             p->precision == FLASHCL_PRECISION_TF32X3 ? 3 : 1, p->varlen);
}

/* ---- backward: cl/flash_backward.cl, D, then dK/dV per K/V block, then dQ per Q block ---- */

#define BACKWARD_MAX_AUTO_BLOCK 64  /* larger blocks only grow the per-work-item accumulators */

/* The dK/dV kernel's arrays; the dQ kernel declares the same but one P tile. dO's and V's rows are head_dim_v's. */
static size_t backward_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                   const struct problem *p)
{
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N];
    const size_t ld = (size_t)p->head_dim | 1, ldv = (size_t)fcl_value_dim(p) | 1;
    const size_t tiles = (m + n) * ld + (m + n) * ldv;  /* Q, K; dO, V */
    const size_t scores = 2 * m * n;                  /* P, dS */
    return (tiles + scores + 2 * m) * sizeof(float);  /* + the rows' LSE and D */
}

/* Square blocks of 64; `shrink` halves the larger side until they fit (1 x 1
 * needs 4 KB at d = 256, within any OpenCL 1.2 device's 32 KB). */
static void backward_rule(const struct device_desc *dev, const struct problem *p, struct kernel_shape *out)
{
    out->axis[M] = out->axis[N] = BACKWARD_MAX_AUTO_BLOCK;
}

static bool backward_shrink(const struct device_desc *dev, struct kernel_shape *s, unsigned fixed)
{
    const bool can_m = !(fixed & (1u << M)) && s->axis[M] > 1;
    const bool can_n = !(fixed & (1u << N)) && s->axis[N] > 1;
    if (!can_m && !can_n)
        return false;
    int *axis = can_n && (s->axis[N] >= s->axis[M] || !can_m) ? &s->axis[N] : &s->axis[M];
    *axis = (*axis + 1) / 2;
    return true;
}

static void backward_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                             float scale_log2, char *buf, size_t size)
{
    const int side = portable_side(dev);
    snprintf(buf, size, "-DHEAD_DIM=%d -DHEAD_DIM_V=%d -DBLOCK_M=%d -DBLOCK_N=%d -DWG=%d -DDTYPE=%d " WINDOW_OPTIONS,
             p->head_dim, fcl_value_dim(p), s->axis[M], s->axis[N], side * side, fcl_dtype_define(p->dtype),
             p->window_left, p->window_right);
}

/* ---- backward, register-tiled: cl/flash_backward_tiled.cl, 4 keys (dK/dV) or 4 query rows (dQ) a work-item ---- */

/* The larger of the two kernels' arrays, in floats:
 * dK/dV: K, Q tiles of pitch d + 4, V, dO of pitch dv + 4, P and dS [row][key] of pitch n + 4, the rows' LSE and D;
 * dQ: the same four tiles, dSᵀ [key][row] of pitch m + 4, the rows' LSE and D. */
static size_t backward_tiled_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                         const struct problem *p)
{
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N], d = (size_t)p->head_dim;
    const size_t tiles = (m + n) * (d + 4) + (m + n) * ((size_t)fcl_value_dim(p) + 4);  /* Q, K; dO, V */
    const size_t dkdv = tiles + 2 * m * (n + 4) + 2 * m;
    const size_t dq = tiles + n * (m + 4) + 2 * m;
    return (dkdv > dq ? dkdv : dq) * sizeof(float);
}

/* 64 query rows x 64 keys (dK/dV: 105 KB at d = 64, 170 KB at d = 128), shrunk until it fits the usable
 * local memory. Not measured on any GPU yet: a starting point for a sweep (docs/backward.md). */
static void backward_tiled_rule(const struct device_desc *dev, const struct problem *p, struct kernel_shape *out)
{
    out->axis[M] = out->axis[N] = 64;
}

/* The larger free side by 16; on a tie the streamed query block, which keeps dK/dV's work-group. */
static bool backward_tiled_shrink(const struct device_desc *dev, struct kernel_shape *s, unsigned fixed)
{
    const bool can_m = !(fixed & (1u << M)) && s->axis[M] > 16;
    const bool can_n = !(fixed & (1u << N)) && s->axis[N] > 16;
    if (can_m && (s->axis[M] >= s->axis[N] || !can_n))
        s->axis[M] -= 16;
    else if (can_n)
        s->axis[N] -= 16;
    else
        return false;
    return true;
}

/* dK/dV's work-group is 4 work-items per key of its block, dQ's 4 per query row. */
static bool backward_tiled_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                                      const struct problem *p)
{
    const int larger = s->axis[M] > s->axis[N] ? s->axis[M] : s->axis[N];
    return (size_t)(4 * larger) <= dev->max_workgroup;
}

static void backward_tiled_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m,
                                    int *workgroup)
{
    *block_m = s->axis[M];
    *workgroup = 4 * s->axis[N];
}

/* Steps 0 (D) and 1 (dK/dV): 4 work-items per key of a block; step 2 (dQ): 4 per query row. */
static int backward_tiled_step_workgroup(const struct device_desc *dev, const struct kernel_shape *s, int step)
{
    return 4 * (step == 2 ? s->axis[M] : s->axis[N]);
}

static void backward_tiled_options(const struct device_desc *dev, const struct problem *p,
                                   const struct kernel_shape *s, float scale_log2, char *buf, size_t size)
{
    snprintf(buf, size, "-DHEAD_DIM=%d -DHEAD_DIM_V=%d -DBLOCK_M=%d -DBLOCK_N=%d -DDTYPE=%d " WINDOW_OPTIONS,
             p->head_dim, fcl_value_dim(p), s->axis[M], s->axis[N], fcl_dtype_define(p->dtype), p->window_left,
             p->window_right);
}

/* ---- backward on tensor cores: cl/flash_backward_mma.cl (f16/bf16) ---- */

/* Each warp owns whole 16-row tiles of both kernels: its keys in dK/dV, its rows in dQ. Past d = 128 the dK/dV
 * pass's warps pair up on the same keys, each keeping half of dK's and dV's columns (SPLIT_D,
 * cl/backward_mma_options.h): an even count of warps, and 16 keys a pair. */
static bool backward_mma_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                                    const struct problem *p)
{
    const bool split_d = p->head_dim > 128;
    const int rows = 16 * s->axis[W], keys = split_d ? rows / 2 : rows;
    return (size_t)(32 * s->axis[W]) <= dev->max_workgroup && (!split_d || s->axis[W] % 2 == 0) &&
           s->axis[M] % rows == 0 && s->axis[N] % keys == 0;
}

/* The larger of the two kernels' arrays, in 2-byte elements and floats:
 * dK/dV: K, V once, Q and dO twice (double-buffered), the rows' LSE and D twice;
 * dQ: Q, dO once, K and V twice. */
static size_t backward_mma_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                       const struct problem *p)
{
    const int head_dim = p->head_dim;
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N], row = nv_tile_row_bytes(head_dim);
    const size_t dkdv = (2 * n + 4 * m) * row + 4 * m * sizeof(float);
    const size_t dq = (2 * m + 4 * n) * row;
    return (dkdv > dq ? dkdv : dq) + (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

/* backward_mma_local_bytes' dK/dV kernel plus the fused one's two dS buffers (BLOCK_N keys x
 * DS_WORDS words, cl/flash_backward_mma.cl) and its ticket slot; its other steps use none. */
static size_t backward_mma_fused_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                             const struct problem *p)
{
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N], row = nv_tile_row_bytes(p->head_dim);
    const size_t ds_words = (size_t)fcl_backward_mma_chunk(s->axis[M]) / 2 + 4;
    return (2 * n + 4 * m) * row + 4 * m * sizeof(float) + 2 * n * ds_words * 4 + sizeof(cl_int) +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

static void backward_mma_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m,
                                  int *workgroup)
{
    *block_m = s->axis[M];
    *workgroup = 32 * s->axis[W];
}

static void backward_mma_options(const struct device_desc *dev, const struct problem *p,
                                 const struct kernel_shape *s, float scale_log2, char *buf, size_t size)
{
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d -DWARPS=%d -DWG=%d -DDTYPE=%d -DCAUSAL=%d " WINDOW_OPTIONS,
             p->head_dim, s->axis[M], s->axis[N], s->axis[W], 32 * s->axis[W], fcl_dtype_define(p->dtype),
             p->mask == FLASHCL_MASK_CAUSAL, p->window_left, p->window_right);
}

static void backward_mma_fused_options(const struct device_desc *dev, const struct problem *p,
                                       const struct kernel_shape *s, float scale_log2, char *buf, size_t size)
{
    backward_mma_options(dev, p, s, scale_log2, buf, size);
    const size_t used = strlen(buf);
    snprintf(buf + used, size - used, " -DFUSED_DQ=1");
}

/* ---- backward on Hopper's wgmma: cl/flash_backward_wgmma.cl (f16/bf16, the sm_90a route) ---- */

/* A work-group owns 16 W keys (dK/dV) or query rows (dQ), 64 a warpgroup; where d or dv passes 128 both
 * warpgroups of a dK/dV work-group own the same 64 keys and split their columns, which takes 8 warps
 * (cl/flash_backward_wgmma.cl's SPLIT_D). Its shape's block_m and block_n are the blocks of queries and keys it
 * streams, and block_m is what the plan reports. */
static int backward_wgmma_owned_rows(const struct kernel_shape *s, const struct problem *p, int step)
{
    return step == 1 && fcl_wide_dim(p) > 128 ? 64 : 16 * s->axis[W];
}

static bool backward_wgmma_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                                      const struct problem *p)
{
    /* block_n 96 is on the axis's grid of 32s, not among the kernel's blocks (32, 64, 128). 128-query blocks
     * with a softcap: its slopes (block_m / 2 floats a thread) beside S and dP would spill. */
    return (size_t)(32 * s->axis[W]) <= dev->max_workgroup && (fcl_wide_dim(p) <= 128 || s->axis[W] == 8) &&
           s->axis[N] != 96 && !(s->axis[M] == 128 && p->softcap != 0.0f);
}

/* The larger of the two kernels' arrays, in tiles of whole 64-column panels (128 bytes a row a panel; V's and
 * dO's rows of dv columns):
 * dK/dV: K and V of its keys once, Q and dO twice (double-buffered), the rows' LSE and D twice;
 * dQ: Q and dO of its 16 W rows once, K and V twice. */
static size_t backward_wgmma_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                         const struct problem *p)
{
    const size_t keys = (size_t)backward_wgmma_owned_rows(s, p, 1), rows = (size_t)backward_wgmma_owned_rows(s, p, 2);
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N];
    const size_t row = 128 * (((size_t)p->head_dim + 63) / 64) + 128 * (((size_t)fcl_value_dim(p) + 63) / 64);
    const size_t dkdv = (keys + 2 * m) * row + 4 * m * sizeof(float);
    const size_t dq = (rows + 2 * n) * row;
    return (dkdv > dq ? dkdv : dq) + (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

static void backward_wgmma_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m,
                                    int *workgroup)
{
    *block_m = s->axis[M];
    *workgroup = 32 * s->axis[W];
}

/* backward_mma_options, and V's head dim where it differs (-DHEAD_DIM_V: dP's k-steps, dV's columns). */
static void backward_wgmma_options(const struct device_desc *dev, const struct problem *p,
                                   const struct kernel_shape *s, float scale_log2, char *buf, size_t size)
{
    backward_mma_options(dev, p, s, scale_log2, buf, size);
    if (fcl_value_dim(p) != p->head_dim) {
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, " -DHEAD_DIM_V=%d", fcl_value_dim(p));
    }
}

/* The atomic variant (cl/flash_backward_wgmma.cl's FUSED_DQ): 8 warps, 64-query blocks (the table's head dims:
 * multiples of 32 up to 128, half of which is each warpgroup's dQ). */
static bool backward_wgmma_atomic_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                                             const struct problem *p)
{
    return backward_wgmma_launchable(dev, s, p) && s->axis[W] == 8 && s->axis[M] == 64;
}

/* Its one kernel with tiles (no dq pass): backward_wgmma_local_bytes' dK/dV arrays and the block's dSᵀ, 128 keys
 * of 128 bytes. */
static size_t backward_wgmma_atomic_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                                const struct problem *p)
{
    const size_t keys = (size_t)backward_wgmma_owned_rows(s, p, 1), m = (size_t)s->axis[M];
    const size_t row = 128 * (((size_t)p->head_dim + 63) / 64);
    return (2 * keys + 4 * m) * row + 4 * m * sizeof(float) + keys * 128 +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

/* ---- backward on TF32 tensor cores: cl/flash_backward_tf32.cl (f32 data, precision TF32 or TF32X3) ---- */

/* The larger of the two kernels' arrays, in floats (tiles of pitch d + 8):
 * dK/dV: K, V once, Q and dO twice (double-buffered), the rows' LSE and D twice;
 * dQ: Q, dO once, K and V twice. Emulated, each also declares the emulation's scratch. */
static size_t backward_tf32_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                        const struct problem *p)
{
    const size_t m = (size_t)s->axis[M], n = (size_t)s->axis[N], pitch = (size_t)p->head_dim + 8;
    const size_t dkdv = (2 * n + 4 * m) * pitch + 4 * m;
    const size_t dq = (2 * m + 4 * n) * pitch;
    return (dkdv > dq ? dkdv : dq) * sizeof(float) +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

static void backward_tf32_options(const struct device_desc *dev, const struct problem *p,
                                  const struct kernel_shape *s, float scale_log2, char *buf, size_t size)
{
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d -DWARPS=%d -DWG=%d -DCAUSAL=%d " WINDOW_OPTIONS " -DPASSES=%d",
             p->head_dim, s->axis[M], s->axis[N], s->axis[W], 32 * s->axis[W], p->mask == FLASHCL_MASK_CAUSAL,
             p->window_left, p->window_right, p->precision == FLASHCL_PRECISION_TF32X3 ? 3 : 1);
}

/* ---- decode: cl/flash_decode.cl, a KV head's query rows against its keys, split-KV ---- */

/* The kernel's ROWS (kernel_table.h). */
int fcl_group_rows(const struct problem *p)
{
    if (p->heads_kv < 1 || p->seq_q < 1)
        return FCL_DECODE_MAX_ROWS;
    const long long rows = (long long)(p->heads_q / p->heads_kv) * p->seq_q;
    int r = 1;
    while (r < rows && r < FCL_DECODE_MAX_ROWS)
        r *= 2;
    return r;
}

/* cp.async (NVIDIA sm_80+, where the inline-PTX probe passed) needs rows on 16 bytes. Not where the
 * tensor cores are emulated: this kernel has no NV_EMULATE path (its addresses are uints). Not for an E4M3
 * cache, which is converted as it is staged. */
static bool decode_async(const struct device_desc *dev, const struct problem *p)
{
    return dev->tensor_cores && !dev->tensor_cores_emulated && p->rows_16b && !kv_e4m3(p);
}

#define DECODE_ITEMS_PER_KEY 2  /* cl/flash_decode.cl's SPK: the work-group is 2 x block_n */

/* K and V staged as stored, pitch d + 4 and dv + 4 elements (twice with
 * cp.async); Q, the partial scores / P and the row max's partials in floats
 * (and each row's ALiBi slope); a paged cache's row offsets (K's and V's, 8
 * bytes each a key). */
static size_t decode_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                 const struct problem *p)
{
    const size_t n = (size_t)s->axis[N], d = (size_t)p->head_dim, dv = (size_t)fcl_value_dim(p);
    const size_t rows = (size_t)fcl_group_rows(p);
    const size_t esize = p->dtype == FLASHCL_F32 ? 4 : 2, stages = decode_async(dev, p) ? 2 : 1;
    const size_t floats = rows * d + DECODE_ITEMS_PER_KEY * n * rows + rows * 8 + (p->alibi ? rows : 0);
    return stages * n * (d + 4 + dv + 4) * esize + floats * sizeof(float) + (p->varlen == 3 ? 2 * n * 8 : 0);
}

/* 64 keys a block (four warps): small enough that several work-groups share
 * a compute unit and keep its loads in flight; 32 where that does not fit. */
static void decode_rule(const struct device_desc *dev, const struct problem *p, struct kernel_shape *out)
{
    out->axis[N] = 64;
}

static bool decode_shrink(const struct device_desc *dev, struct kernel_shape *s, unsigned fixed)
{
    if ((fixed & (1u << N)) || s->axis[N] <= 32)
        return false;
    s->axis[N] = s->axis[N] / 2 / 32 * 32 > 32 ? s->axis[N] / 2 / 32 * 32 : 32;
    return true;
}

static bool decode_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                              const struct problem *p)
{
    return (size_t)(DECODE_ITEMS_PER_KEY * s->axis[N]) <= dev->max_workgroup;
}

/* Two work-items a key; the query rows per group are the problem's (the planner sets block_m). */
static void decode_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m, int *workgroup)
{
    *block_m = 1;
    *workgroup = DECODE_ITEMS_PER_KEY * s->axis[N];
}

static void decode_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                           float scale_log2, char *buf, size_t size)
{
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DHEAD_DIM_V=%d -DROWS=%d -DBLOCK_N=%d -DDTYPE=%d " WINDOW_OPTIONS
             " -DVARLEN=%d -DVEC_ROWS=%d -DNV_ASYNC=%d -DKV_E4M3=%d",
             p->head_dim, fcl_value_dim(p), fcl_group_rows(p), s->axis[N], fcl_dtype_define(p->dtype), p->window_left,
             p->window_right, p->varlen, p->rows_16b, decode_async(dev, p), kv_e4m3(p));
}

/* ---- decode on tensor cores: cl/flash_decode_mma.cl, the group's rows as one 16-row mma tile ---- */

/* A block's K and V as a stage holds them: 2-byte elements in the products' tiles (V's rows of head_dim_v), or an
 * E4M3 cache's bytes as stored. */
static size_t decode_mma_kv_block_bytes(const struct kernel_shape *s, const struct problem *p)
{
    const size_t n = (size_t)s->axis[N];
    if (kv_e4m3(p))
        return n * (size_t)(p->head_dim + fcl_value_dim(p));
    return n * (nv_tile_row_bytes(p->head_dim) + nv_tile_row_bytes(fcl_value_dim(p)));
}

/* With an E4M3 cache, the one block's K and V converted to 2-byte elements (the products' tiles); else none. */
static size_t decode_mma_converted_bytes(const struct kernel_shape *s, const struct problem *p)
{
    return kv_e4m3(p) ? (size_t)s->axis[N] * (nv_tile_row_bytes(p->head_dim) + nv_tile_row_bytes(fcl_value_dim(p)))
                      : 0;
}

/* Q's 16 rows and each warp's row max and sum (fixed), and with an E4M3 cache the one block's K and V converted
 * (in 2-byte elements); a stage's K and V (decode_mma_kv_block_bytes), and a paged cache's row offsets for it.
 * The warps' accumulators are merged in the V buffers (E4M3: the stages and converted tiles) after the last
 * block. */
static size_t decode_mma_fixed_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                     const struct problem *p)
{
    return 16 * nv_tile_row_bytes(p->head_dim) + 2 * (size_t)s->axis[W] * 16 * sizeof(float) +
           decode_mma_converted_bytes(s, p) +
           (dev->tensor_cores_emulated ? NV_EMULATE_SCRATCH_BYTES(s->axis[W]) : 0);
}

static size_t decode_mma_stage_bytes(const struct kernel_shape *s, const struct problem *p)
{
    const size_t n = (size_t)s->axis[N];
    return decode_mma_kv_block_bytes(s, p) + (p->varlen == 3 ? 2 * n * sizeof(cl_ulong) : 0);
}

/* Decode streams K/V at the rate each work-group's bytes in flight allow (docs/perf-history.md, 2026-12-01): the
 * number of buffers (2..4) that puts the most K and V in flight a compute unit, counting the
 * work-groups a unit holds by local memory, but never fewer than two a unit where two buffers give two
 * (one's barriers and merge then overlap another's streaming). H200, d = 128, 4 warps x 64 keys: three
 * buffers, two work-groups an SM, 128 KB in flight instead of 96 (2-7% faster, measured). */
static int decode_mma_stages(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p)
{
    const size_t fixed = decode_mma_fixed_bytes(dev, s, p), stage = decode_mma_stage_bytes(s, p);
    const size_t kv_block = decode_mma_kv_block_bytes(s, p);  /* K and V of a block */
    const long long two_buffer_groups = fcl_groups_per_unit(dev, fixed + 2 * stage);
    int best = 2;
    long long best_in_flight = two_buffer_groups * (long long)kv_block;
    for (int stages = 3; stages <= 4 && fixed + (size_t)stages * stage <= dev->usable_local; stages++) {
        const long long groups = fcl_groups_per_unit(dev, fixed + (size_t)stages * stage);
        const long long in_flight = groups * (stages - 1) * (long long)kv_block;
        if ((groups >= 2 || two_buffer_groups < 2) && in_flight > best_in_flight) {
            best = stages;
            best_in_flight = in_flight;
        }
    }
    return best;
}

static size_t decode_mma_local_bytes(const struct device_desc *dev, const struct kernel_shape *s,
                                     const struct problem *p)
{
    return decode_mma_fixed_bytes(dev, s, p) + (size_t)decode_mma_stages(dev, s, p) * decode_mma_stage_bytes(s, p);
}

/* The K buffers (an E4M3 cache's: the stages and converted tiles), idle once the last block is computed, hold the
 * merge in place's weights. */
static size_t decode_mma_merge_floats(const struct device_desc *dev, const struct kernel_shape *s,
                                      const struct problem *p)
{
    const size_t stages = (size_t)decode_mma_stages(dev, s, p);
    if (kv_e4m3(p))
        return (stages * decode_mma_kv_block_bytes(s, p) + decode_mma_converted_bytes(s, p)) / sizeof(float);
    return stages * (size_t)s->axis[N] * nv_tile_row_bytes(p->head_dim) / sizeof(float);
}

/* Each warp takes a multiple of 16 keys of a block. */
static bool decode_mma_launchable(const struct device_desc *dev, const struct kernel_shape *s,
                                  const struct problem *p)
{
    return (size_t)(32 * s->axis[W]) <= dev->max_workgroup && s->axis[N] % (16 * s->axis[W]) == 0;
}

static void decode_mma_geometry(const struct device_desc *dev, const struct kernel_shape *s, int *block_m,
                                int *workgroup)
{
    *block_m = 1;
    *workgroup = 32 * s->axis[W];
}

static void decode_mma_options(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                               float scale_log2, char *buf, size_t size)
{
    snprintf(buf, size,
             "-DHEAD_DIM=%d -DHEAD_DIM_V=%d -DWARPS=%d -DBLOCK_N=%d -DSTAGES=%d -DDTYPE=%d " WINDOW_OPTIONS
             " -DNEGATIVE_SCALE=%d -DVARLEN=%d -DKV_E4M3=%d",
             p->head_dim, fcl_value_dim(p), s->axis[W], s->axis[N], decode_mma_stages(dev, s, p),
             fcl_dtype_define(p->dtype), p->window_left, p->window_right, scale_log2 < 0.0f, p->varlen,
             !kv_e4m3(p) ? 0 : nv_native_e4m3(dev) ? 2 : 1);
}

/* Four warps of 16 keys: at d = 128 on an H200 three buffers, about 100 KB, two work-groups an SM
 * (decode_mma_stages); at d = 256 three buffers of 64 KB, one work-group an SM; two warps of 16 where
 * that does not fit. */
static const struct builtin_shape decode_mma_builtin[] = {
    {ARCH_ANY, 1, 256, -1, {.axis = {[W] = 4, [N] = 64}}, ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, {.axis = {[W] = 2, [N] = 32}}, ANY_BATCH},
};

#define BSHAPE(w, m, n) {.axis = {[W] = (w), [M] = (m), [N] = (n)}}

/* warps x block_m x block_n, preferred first. FlashAttention-2's backward
 * blocks (64..128 queries and keys, 4 or 8 warps). H200 (f16, 16k tokens,
 * N = 4k and 16k, TFLOP/s of the backward at 2.5x the forward's FLOPs,
 * non-causal / causal at N = 16k): d = 64: 8 x 128 x 256 184 / 171,
 * 8 x 128 x 128 172 / 162, 4 x 128 x 64 187 / 162, 4 x 64 x 64 158 / 158;
 * d = 128: 8 x 128 x 128 191 / 186, 4 x 64 x 64 173 / 170, 4 x 128 x 64
 * 139 / 149, 2 x 32 x 32 137 / 136, 4 x 64 x 128 101 / 108 (two key tiles a
 * warp: 256 accumulator registers, spilled). The sm_90 shapes need 160 KB
 * (d = 64) and 194 KB (d = 128) of local memory; elsewhere 8 x 128 x 128 up
 * to d = 64 (98 KB) and 4 x 64 x 64 past it (97 KB), then smaller shapes for
 * devices whose local memory those do not fit. Past d = 128 (SPLIT_D: warp
 * pairs, a warp's half of dK's and dV's columns in 128 registers, a dQ row
 * tile's d in as many) one key tile a pair: 4 x 64 x 32 (161 KB at d = 256,
 * within an A100's 163; ptxas offline, sm_80: no spills to d = 192, 16 bytes
 * in dQ at 256), then 2 x 32 x 16 (81 KB, for sm_86/89's 99 KB). Not yet
 * timed on a GPU. */
static const struct builtin_shape backward_mma_builtin[] = {
    {ARCH_NVIDIA_SM90, 1, 64, -1, BSHAPE(8, 128, 256), ANY_BATCH},
    {ARCH_NVIDIA_SM90, 65, 128, -1, BSHAPE(8, 128, 128), ANY_BATCH},
    {ARCH_ANY, 1, 64, -1, BSHAPE(8, 128, 128), ANY_BATCH},
    {ARCH_ANY, 1, 128, -1, BSHAPE(4, 64, 64), ANY_BATCH},
    {ARCH_ANY, 1, 128, -1, BSHAPE(2, 32, 32), ANY_BATCH},
    {ARCH_ANY, 1, 128, -1, BSHAPE(1, 16, 16), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, BSHAPE(4, 64, 32), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, BSHAPE(2, 32, 16), ANY_BATCH},
};

/* wgmma backward, warps x block_m (the queries dK/dV streams) x block_n (the keys dQ streams), preferred first:
 * two warpgroups (128 keys or rows a work-group). Up to d = 64, 128-query blocks (S and dP one m64n128 product
 * each, half the blocks and barriers) and 128-key dQ blocks: 252 registers, no spills; H100, against 8 x 64 x 128,
 * 2 rounds in one call (docs/perf-history.md, 2026-12-07): f16 / bf16, N = 4k / 16k, +21..+27% non-causal,
 * +21..+26% causal. With a softcap its slopes (64 floats more) would spill there: 64-query blocks
 * (backward_wgmma_launchable). Past d = 64 dK's and dV's d accumulators a thread leave no room for 128 queries' S
 * and dP: 64-query blocks. Past d = 128 (split columns, 8 warps only): 64-key dQ blocks to d = 192 (192 KB),
 * 32-key ones past it (192 KB at d = 256; 64 would need 256). */
static const struct builtin_shape backward_wgmma_builtin[] = {
    {ARCH_ANY, 1, 64, -1, BSHAPE(8, 128, 128), ANY_BATCH},
    {ARCH_ANY, 1, 64, -1, BSHAPE(8, 64, 128), ANY_BATCH},
    {ARCH_ANY, 1, 192, -1, BSHAPE(8, 64, 64), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, BSHAPE(8, 64, 32), ANY_BATCH},
    {ARCH_ANY, 1, 128, -1, BSHAPE(4, 64, 64), ANY_BATCH},
};

/* The atomic variant's one shape (its block_n is not used: no dq pass). */
static const struct builtin_shape backward_wgmma_atomic_builtin[] = {
    {ARCH_ANY, 1, 128, -1, BSHAPE(8, 64, 64), ANY_BATCH},
};

/* TF32 backward, warps x block_m x block_n, preferred first. Not measured on a GPU yet: the f16
 * backward's shapes (above) where their f32 tiles (twice the bytes, pitch d + 8) fit. 4 x 64 x 64:
 * 112 KB at d = 64 (two work-groups an H200 SM), 210 KB at d = 128 (one; 227 KB parts only);
 * 2 x 32 x 32: 56 KB at d = 64 (99 KB parts), 105 KB at d = 128; 1 x 16 x 16: 53 KB at d = 128,
 * what a 99 KB part takes there. One 16-key (16-row) tile a warp at d = 128: its dK and dV
 * accumulators are 128 registers a thread already. */
static const struct builtin_shape backward_tf32_builtin[] = {
    {ARCH_ANY, 1, 128, -1, BSHAPE(4, 64, 64), ANY_BATCH},
    {ARCH_ANY, 1, 128, -1, BSHAPE(2, 32, 32), ANY_BATCH},
    {ARCH_ANY, 1, 128, -1, BSHAPE(1, 16, 16), ANY_BATCH},
};

#define SHAPE(w, t, n) {.axis = {[W] = (w), [T] = (t), [N] = (n)}}

/* f16/bf16, preferred first (sweeps on the H200, docs/perf-history.md, 2026-11-29): 4 x 2 x 64 up to d = 128; smaller
 * shapes for devices whose local memory it does not fit. (2026-11-29 to 2026-12-01 took 8 x 1 x 128 for non-causal
 * d = 128 on sm_90; since 2026-12-01's ldmatrix addresses 4 x 2 x 64 runs it 5.7% faster, 298.7 against 282.6
 * TFLOP/s at N = 16k, f16: two work-groups an SM, whose barriers do not meet.) */
static const struct builtin_shape mma_builtin[] = {
    /* Past d = 128: one 16-row tile a warp (O is HEAD_DIM / 2 registers). On the H200 (docs/perf.md,
     * 2026-12-01) 8 warps x 128 keys ran best at d = 160 (210 KB; past d = 160 it does not fit), 8 x 64 at
     * d = 192 and 256 (1.2-1.5x 4 x 1 x 32); 8 x 1 x 32 where 64-key blocks do not fit (f16 d = 256:
     * 192 KB against 128 KB). */
    {ARCH_NVIDIA_SM90, 129, 160, -1, SHAPE(8, 1, 128), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, SHAPE(8, 1, 64), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, SHAPE(8, 1, 32), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, SHAPE(4, 1, 32), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, SHAPE(4, 1, 16), ANY_BATCH},
    {ARCH_ANY, 129, 256, -1, SHAPE(2, 1, 16), ANY_BATCH},
    /* d <= 64 unmasked on sm_90: dense and packed 4 x 2 x 64 with Q's fragments in registers (mma_q_registers:
     * two work-groups an SM, +10.7..+12.4% against 2026-12-03's 4 x 2 x 32 at 168 registers, three an SM, which ran
     * -0.7..+4.3% against 8 x 2 x 64: docs/perf-history.md, 2026-12-03, 2026-12-03 calls 1 and 2). On a KV cache 8 x 2 x 64 (one
     * work-group of 8 warps an SM, 64 KB): it ran 2.6-4.2% above 4 x 2 x 64 with Q in local memory at d = 64,
     * N = 4k-32k, f16 (2026-12-02; smaller d not measured); causal, 8 x 2 x 64 was 1.5% below at 16k. */
    {ARCH_NVIDIA_SM90, 1, 64, FLASHCL_MASK_NONE, SHAPE(4, 2, 64), DENSE_OR_PACKED},
    {ARCH_NVIDIA_SM90, 1, 64, FLASHCL_MASK_NONE, SHAPE(8, 2, 64), ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, SHAPE(4, 2, 64), ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, SHAPE(4, 1, 32), ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, SHAPE(4, 1, 16), ANY_BATCH},
};

/* wgmma (sm_90a): warpgroups of 4 warps, 64 query rows each; d a multiple of 16 up to 256, 64, 128 or 192 keys a
 * block. H200, N = 16k, f16, TFLOP/s non-causal / causal (docs/perf-history.md, 2026-12-01): d = 64: 12 x 128 345 / 337,
 * 8 x 64 303 / 301, 8 x 128 254 / 260, 4 x 64 257 / 258; d = 128: 12 x 64 400 / 400, 12 x 128 361 / 361
 * (spilled), 8 x 128 345 / 351, 8 x 64 284 / 279, 4 x 64 273 / 280. N = 8k, f16 (2026-12-01): d = 96 12 x 128
 * 364 / 352, 12 x 64 321 / 321, 8 x 64 282 / 263; d = 128 12 x 128 with Q read from local memory 413 / 424
 * (wgmma_options); past d = 128 (Q from local memory always) 12 x 64 up to d = 192 (d = 160 405 / 390 against
 * 8 x 64's 326 / 320; d = 192 398 / 384 against 339 / 341), 8 x 64 past it (d = 256 378 / 365, 12 x 64 spills:
 * 252 / 268; 4 x 64 228 / 229). Then smaller ones where those do not fit. Up to d = 64 without a mask, 12 x 192
 * (FlashAttention-3's 192 x 192 there): H200, d = 64, TFLOP/s against 12 x 128, f16 / bf16 (2026-12-03):
 * N = 4k 379.0 / 382.5 against 380.1 / 378.4, 8k 412.6 / 412.1 against 400.6 / 401.3, 32k 417.4 / 430.7
 * against 409.0 / 413.0 (-0.3..+4.3%); causal it lost 0.8-2.6% on 5 of 6 rows (the mask's code spilled) and
 * 8 x 192 10-15% everywhere. Not on a KV cache (VARLEN 2 and 3: their key lookups spilled 52-72 bytes offline,
 * not measured on the GPU); smaller head dims follow d = 64 unmeasured. That was 2026-12-03's built-in; since 2026-12-03 up to
 * d = 64 off a KV cache the built-ins are 4 x 128 without a mask and 8 x 64 causal, several work-groups an SM
 * (wgmma_resident: +5.6..+18.8% at N = 4k-16k on the standard table, even with the 12-warp shapes at 32k:
 * docs/perf-history.md, 2026-12-03, calls 2 and 3). 12 x 192 stays a shape the tuning file and the kernel options can name. */
static const struct builtin_shape wgmma_builtin[] = {
    {ARCH_ANY, 1, 64, FLASHCL_MASK_NONE, SHAPE(4, 1, 128), DENSE_OR_PACKED},
    {ARCH_ANY, 1, 64, FLASHCL_MASK_CAUSAL, SHAPE(8, 1, 64), DENSE_OR_PACKED},
    {ARCH_ANY, 1, 128, -1, SHAPE(12, 1, 128), ANY_BATCH},
    {ARCH_ANY, 97, 192, -1, SHAPE(12, 1, 64), ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, SHAPE(8, 1, 64), ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, SHAPE(4, 1, 64), ANY_BATCH},
};

/* E4M3 on wgmma: 128-key blocks (a row of Vᵀ one 128-byte panel); 8 warps (255 registers a thread: S, O, P and Q's
 * fragments at d = 128 take about 200), 4 where 8 do not fit. 8 x 128 at d = 128 on an H100 (2026-12-07): 474-637
 * TFLOP/s, N = 8k/16k; no other shape was swept. */
static const struct builtin_shape wgmma_fp8_builtin[] = {
    {ARCH_ANY, 1, 256, -1, SHAPE(8, 1, 128), DENSE_OR_PACKED},
    {ARCH_ANY, 1, 256, -1, SHAPE(4, 1, 128), DENSE_OR_PACKED},
};

/* TF32 (H200 sweep, docs/perf-history.md, 2026-11-29): 8 x 2 x 32 past d = 64, 4 x 2 x 64 up to it. */
static const struct builtin_shape tf32_builtin[] = {
    {ARCH_ANY, 65, 256, -1, SHAPE(8, 2, 32), ANY_BATCH},
    {ARCH_ANY, 1, 64, -1, SHAPE(4, 2, 64), ANY_BATCH},
    {ARCH_ANY, 65, 256, -1, SHAPE(4, 2, 32), ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, SHAPE(4, 1, 32), ANY_BATCH},
    {ARCH_ANY, 1, 256, -1, SHAPE(4, 1, 16), ANY_BATCH},
};

#define MMA_AXES                                                                                                   \
    [W] = {1, 8, 1, {4, 8}}, [T] = {1, 2, 1, {1, 2}}, [N] = {16, 128, 16, {32, 48, 64, 128}}

/* What the two f16/bf16 tensor-core backward kernels (two-pass, fused) share: cl/flash_backward_mma.cl's
 * dtypes, masks, head dims, shapes. */
#define BACKWARD_MMA_COMMON                                                                                       \
    .dtypes = DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),                                                  \
    .head_dim_step = 16, .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NV_EMULATES,                            \
    .axes = {[M] = {16, 256, 16, {64, 128}}, [N] = {16, 256, 16, {64, 128, 256}}, [W] = {1, 8, 1, {4, 8}}},     \
    .builtin = backward_mma_builtin, .n_builtin = sizeof(backward_mma_builtin) / sizeof(backward_mma_builtin[0]), \
    .launchable = backward_mma_launchable, .geometry = backward_mma_geometry

/* In order of preference: the planner takes the first that runs a call. */
const struct kernel_info fcl_kernels[] = {
    {
        .name = "decode-tensor-core", .file = "cl/flash_decode_mma.cl",
        .summary = "Decode (a KV head's group x seq_q query rows, at most 16, as one 16-row mma tile) against many keys on NVIDIA sm_80+ tensor cores, keys split across work-groups; reads E4M3 KV caches too.",
        .op = OP_FORWARD, .sinks = true, .softcap = true, .alibi = true, .head_dim_v = true, .kv_e4m3 = true,
        .source = flashcl_source_flash_decode_mma, .entry = "flash_decode_mma",
        .dtypes = DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .varlen = true,
        .combine = "flash_forward_combine",
        .packs_group = true,
        .head_dim_step = 16, .head_dim_max = 256,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NV_EMULATES,
        .axes = {[W] = {1, 8, 1, {2, 4, 8}}, [N] = {16, 256, 16, {32, 64, 128, 256}}},
        .builtin = decode_mma_builtin, .n_builtin = sizeof(decode_mma_builtin) / sizeof(decode_mma_builtin[0]),
        .launchable = decode_mma_launchable, .local_bytes = decode_mma_local_bytes,
        .geometry = decode_mma_geometry, .options = decode_mma_options, .merge_floats = decode_mma_merge_floats,
    },
    {
        .name = "decode", .file = "cl/flash_decode.cl",
        .summary = "Decode on the FMA units of any OpenCL 1.2 device: one work-group per KV head holds its group's query rows (group x seq_q <= 16), keys split across work-groups; reads E4M3 KV caches too.",
        .op = OP_FORWARD, .kv_e4m3 = true,
        .softcap = true, .sinks = true, .alibi = true, .head_dim_v = true,
        .source = flashcl_source_flash_decode, .entry = "flash_decode",
        .dtypes = DTYPE_BIT(FLASHCL_F32) | DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .varlen = true,
        .combine = "flash_forward_combine",
        .packs_group = true,
        .f32_precisions = ~0u,
        .head_dim_step = 4, .head_dim_max = FLASHCL_MAX_HEAD_DIM,
        .axes = {[N] = {32, 256, 32, {32, 64, 128, 256}}},
        .rule = decode_rule, .shrink = decode_shrink,
        .launchable = decode_launchable, .local_bytes = decode_local_bytes, .geometry = decode_geometry,
        .options = decode_options,
    },
    {
        .name = "tensor-core-wgmma", .file = "cl/flash_forward_mma.cl",
        .summary = "The forward on Hopper (compute capability 9.0) through wgmma, built by the sm_90a route where its probe computed right; ahead of tensor-core. Reads E4M3 KV caches (chunked prefill).",
        .op = OP_FORWARD, .sinks = true, .softcap = true, .alibi = true, .head_dim_v = true, .kv_e4m3 = true,
        .source = flashcl_source_flash_forward_mma, .entry = "flash_forward_mma",
        .dtypes = DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .varlen = true,
        .combine = "flash_forward_combine",
        .head_dim_step = 16, .head_dim_max = 256,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NEEDS_SM90A | NV_EMULATES,
        .gives_way_to = "tensor-core",
        .axes = {[W] = {4, 16, 4, {4, 8, 12}}, [T] = {1, 1, 1, {1}}, [N] = {64, 192, 64, {64, 128, 192}}},
        .builtin = wgmma_builtin, .n_builtin = sizeof(wgmma_builtin) / sizeof(wgmma_builtin[0]),
        .launchable = mma_launchable, .local_bytes = wgmma_local_bytes, .geometry = mma_geometry,
        .resident = wgmma_resident, .options = wgmma_options,
    },
    {
        .name = "tensor-core-wgmma-fp8", .file = "cl/flash_forward_mma.cl",
        .summary = "The forward of E4M3 (FP8) Q, K and V on Hopper's wgmma (compute capability 9.0, the sm_90a route), O in f16, bf16 or f32; dense and packed batches (not KV caches), head dims multiples of 32. V is transposed into the workspace first (fp8_transpose_v).",
        .op = OP_FORWARD, .sinks = true, .softcap = true, .alibi = true, .head_dim_v = true,
        .source = flashcl_source_flash_forward_mma, .entry = "flash_forward_mma",
        .dtypes = DTYPE_BIT(FLASHCL_E4M3),
        .masks = ALL_MASKS,
        .varlen = true, .packed_only = true,
        .head_dim_step = 32, .head_dim_max = 256,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NEEDS_SM90A | NV_EMULATES,
        .axes = {[W] = {4, 16, 4, {4, 8, 12}}, [T] = {1, 1, 1, {1}}, [N] = {128, 128, 128, {128}}},
        .builtin = wgmma_fp8_builtin, .n_builtin = sizeof(wgmma_fp8_builtin) / sizeof(wgmma_fp8_builtin[0]),
        .launchable = mma_launchable, .local_bytes = wgmma_fp8_local_bytes, .geometry = mma_geometry,
        .options = wgmma_fp8_options,
    },
    {
        .name = "tensor-core", .file = "cl/flash_forward_mma.cl",
        .summary = "The forward on NVIDIA sm_80+ tensor cores with mma.sync m16n8k16; reads E4M3 KV caches too (chunked prefill), converted in local memory.",
        .op = OP_FORWARD, .sinks = true, .softcap = true, .alibi = true, .head_dim_v = true, .kv_e4m3 = true,
        .source = flashcl_source_flash_forward_mma, .entry = "flash_forward_mma",
        .dtypes = DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .varlen = true,
        .combine = "flash_forward_combine",
        .head_dim_step = 16, .head_dim_max = 256,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NV_EMULATES,
        .axes = {MMA_AXES},
        .builtin = mma_builtin, .n_builtin = sizeof(mma_builtin) / sizeof(mma_builtin[0]),
        .launchable = mma_launchable, .local_bytes = mma_local_bytes, .geometry = mma_geometry,
        .options = mma_options,
    },
    {
        .name = "tf32", .file = "cl/flash_forward_tf32.cl",
        .summary = "The forward for f32 data on NVIDIA sm_80+ tensor cores with TF32 or 3xTF32 operands (attn.precision TF32 / TF32X3 only).",
        .op = OP_FORWARD, .sinks = true, .softcap = true, .alibi = true,
        .source = flashcl_source_flash_forward_tf32, .entry = "flash_forward_tf32",
        .dtypes = DTYPE_BIT(FLASHCL_F32),
        .masks = ALL_MASKS,
        .varlen = true,
        .combine = "flash_forward_combine",
        .f32_precisions = PRECISION_BIT(FLASHCL_PRECISION_TF32) | PRECISION_BIT(FLASHCL_PRECISION_TF32X3),
        .head_dim_step = 8, .head_dim_max = 128,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NV_EMULATES,
        .axes = {MMA_AXES},
        .builtin = tf32_builtin, .n_builtin = sizeof(tf32_builtin) / sizeof(tf32_builtin[0]),
        .launchable = mma_launchable, .local_bytes = tf32_local_bytes, .geometry = mma_geometry,
        .options = tf32_options,
    },
    {
        .name = "register-tiled", .file = "cl/flash_forward_tiled.cl",
        .summary = "The forward on the FMA units of any OpenCL 1.2 device, each work-item holding a register tile of scores; reads E4M3 KV caches too.",
        .op = OP_FORWARD, .kv_e4m3 = true,
        .softcap = true, .sinks = true, .alibi = true,
        .source = flashcl_source_flash_forward_tiled, .entry = "flash_forward_tiled",
        .dtypes = DTYPE_BIT(FLASHCL_F32) | DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .varlen = true,
        .combine = "flash_forward_combine",
        .f32_precisions = ~0u,
        .head_dim_step = 4, .head_dim_max = FLASHCL_MAX_HEAD_DIM,
        .axes = {[M] = {16, 128, 16, {16, 32, 48, 64, 80, 96, 112, 128}},
                 [N] = {16, 128, 16, {16, 32, 48, 64, 80, 96, 112, 128}}},
        .rule = tiled_rule, .shrink = tiled_shrink,
        .launchable = tiled_launchable, .local_bytes = tiled_local_bytes, .geometry = tiled_geometry,
        .options = tiled_options,
    },
    {
        .name = "portable", .file = "cl/flash_forward.cl",
        .summary = "The forward on any OpenCL 1.2 device, any head dim and tile: the fallback every call can run; reads E4M3 KV caches too.",
        .op = OP_FORWARD, .kv_e4m3 = true,
        .softcap = true, .sinks = true, .alibi = true, .head_dim_v = true,
        .source = flashcl_source_flash_forward, .entry = "flash_forward",
        .dtypes = DTYPE_BIT(FLASHCL_F32) | DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .varlen = true,
        .combine = "flash_forward_combine",
        .f32_precisions = ~0u,
        .head_dim_step = 1, .head_dim_max = FLASHCL_MAX_HEAD_DIM,
        .axes = {[M] = {1, 256, 1, {8, 16, 32, 48, 64, 96, 128}}, [N] = {1, 256, 1, {8, 16, 32, 48, 64, 96, 128}}},
        .rule = portable_rule, .rule_reported = true, .shrink = portable_shrink,
        .local_bytes = portable_local_bytes, .geometry = portable_geometry, .options = portable_options,
    },
    {
        .name = "backward-wgmma-atomic", .file = "cl/flash_backward_wgmma.cl",
        .summary = "As backward-wgmma, dQ added up by the dK/dV pass with float atomics (no dQ pass): dQ's bits may change from run to run. Opt-in: slower on the H200.",
        .op = OP_BACKWARD, .softcap = true, .alibi = true,
        .source = flashcl_source_flash_backward_wgmma, .entry = "flash_backward_dot",
        .steps = {"flash_backward_dot", "flash_backward_wgmma_dkdv", "flash_backward_wgmma_dq_convert"},
        .dq_accumulated = true, .dq_unordered = true, .opt_in = true,
        .owned_rows = backward_wgmma_owned_rows,
        .dtypes = DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = MASK_BIT(FLASHCL_MASK_NONE) | MASK_BIT(FLASHCL_MASK_CAUSAL),
        .head_dim_step = 32, .head_dim_max = 128,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NEEDS_SM90A | NV_EMULATES,
        .axes = {[M] = {64, 64, 64, {64}}, [N] = {64, 64, 64, {64}}, [W] = {8, 8, 4, {8}}},
        .builtin = backward_wgmma_atomic_builtin,
        .n_builtin = sizeof(backward_wgmma_atomic_builtin) / sizeof(backward_wgmma_atomic_builtin[0]),
        .launchable = backward_wgmma_atomic_launchable, .local_bytes = backward_wgmma_atomic_local_bytes,
        .geometry = backward_wgmma_geometry, .options = backward_mma_fused_options,
    },
    {
        .name = "backward-wgmma", .file = "cl/flash_backward_wgmma.cl",
        .summary = "The backward on Hopper (compute capability 9.0) through wgmma, built by the sm_90a route where its probe computed right: a dK/dV pass per 64-key warpgroup, a dQ pass per 64-row warpgroup; deterministic.",
        .op = OP_BACKWARD, .softcap = true, .alibi = true, .head_dim_v = true,
        .source = flashcl_source_flash_backward_wgmma, .entry = "flash_backward_dot",
        .steps = {"flash_backward_dot", "flash_backward_wgmma_dkdv", "flash_backward_wgmma_dq"},
        .owned_rows = backward_wgmma_owned_rows,
        .dtypes = DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .head_dim_step = 16, .head_dim_max = 256,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NEEDS_SM90A | NV_EMULATES,
        .gives_way_to = "backward-tensor-core,backward-tensor-core-fused",
        .axes = {[M] = {64, 128, 64, {64, 128}}, [N] = {32, 128, 32, {32, 64, 128}}, [W] = {4, 8, 4, {4, 8}}},
        .builtin = backward_wgmma_builtin,
        .n_builtin = sizeof(backward_wgmma_builtin) / sizeof(backward_wgmma_builtin[0]),
        .launchable = backward_wgmma_launchable, .local_bytes = backward_wgmma_local_bytes,
        .geometry = backward_wgmma_geometry, .options = backward_wgmma_options,
    },
    {
        .name = "backward-tensor-core-fused", .file = "cl/flash_backward_mma.cl",
        .summary = "As backward-tensor-core, dQ added up by the dK/dV pass in key-block order (no second pass; still deterministic). Opt-in: slower on the H200.",
        .op = OP_BACKWARD, .softcap = true, .alibi = true,
        .source = flashcl_source_flash_backward_mma, .entry = "flash_backward_dot",
        .steps = {"flash_backward_dot", "flash_backward_mma_dkdv", "flash_backward_mma_dq_convert"},
        .dq_accumulated = true, .opt_in = true, .head_dim_max = 128,  /* its dQ tiles: no SPLIT_D */
        BACKWARD_MMA_COMMON, .local_bytes = backward_mma_fused_local_bytes, .options = backward_mma_fused_options,
        .masks = MASK_BIT(FLASHCL_MASK_NONE) | MASK_BIT(FLASHCL_MASK_CAUSAL),  /* its turns: no window */
    },
    {
        .name = "backward-tensor-core", .file = "cl/flash_backward_mma.cl",
        .summary = "The backward on NVIDIA sm_80+ tensor cores with mma.sync: a dK/dV pass per key block, a dQ pass per query block; deterministic.",
        .op = OP_BACKWARD, .softcap = true, .alibi = true,
        .source = flashcl_source_flash_backward_mma, .entry = "flash_backward_dot",
        .steps = {"flash_backward_dot", "flash_backward_mma_dkdv", "flash_backward_mma_dq"},
        .head_dim_max = 256, BACKWARD_MMA_COMMON, .local_bytes = backward_mma_local_bytes, .options = backward_mma_options,
        .masks = ALL_MASKS,
    },
    {
        .name = "backward-tf32", .file = "cl/flash_backward_tf32.cl",
        .summary = "The backward for f32 data on NVIDIA sm_80+ tensor cores with TF32 or 3xTF32 operands; deterministic.",
        .op = OP_BACKWARD, .softcap = true, .alibi = true,
        .source = flashcl_source_flash_backward_tf32, .entry = "flash_backward_dot",
        .steps = {"flash_backward_dot", "flash_backward_tf32_dkdv", "flash_backward_tf32_dq"},
        .dtypes = DTYPE_BIT(FLASHCL_F32),
        .masks = ALL_MASKS,
        .f32_precisions = PRECISION_BIT(FLASHCL_PRECISION_TF32) | PRECISION_BIT(FLASHCL_PRECISION_TF32X3),
        .head_dim_step = 16, .head_dim_max = 128,
        .needs = NEEDS_TENSOR_CORES | NEEDS_ROWS_16B | NV_EMULATES,
        .axes = {[M] = {16, 256, 16, {32, 64, 128}}, [N] = {16, 256, 16, {32, 64, 128}}, [W] = {1, 8, 1, {2, 4, 8}}},
        .builtin = backward_tf32_builtin,
        .n_builtin = sizeof(backward_tf32_builtin) / sizeof(backward_tf32_builtin[0]),
        .launchable = backward_mma_launchable, .local_bytes = backward_tf32_local_bytes,
        .geometry = backward_mma_geometry, .options = backward_tf32_options,
    },
    {
        .name = "backward-tiled", .file = "cl/flash_backward_tiled.cl",
        .summary = "The backward on the FMA units of any OpenCL 1.2 device, with register tiles; deterministic.",
        .op = OP_BACKWARD,
        .softcap = true, .alibi = true, .head_dim_v = true,
        .source = flashcl_source_flash_backward_tiled, .entry = "flash_backward_dot",
        .steps = {"flash_backward_dot", "flash_backward_tiled_dkdv", "flash_backward_tiled_dq"},
        .dtypes = DTYPE_BIT(FLASHCL_F32) | DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .f32_precisions = ~0u,
        .head_dim_step = 4, .head_dim_max = FLASHCL_MAX_HEAD_DIM,
        .axes = {[M] = {16, 128, 16, {16, 32, 48, 64, 96, 128}}, [N] = {16, 128, 16, {16, 32, 48, 64, 96, 128}}},
        .rule = backward_tiled_rule, .shrink = backward_tiled_shrink,
        .launchable = backward_tiled_launchable, .local_bytes = backward_tiled_local_bytes,
        .geometry = backward_tiled_geometry, .step_workgroup = backward_tiled_step_workgroup,
        .options = backward_tiled_options,
    },
    {
        .name = "backward", .file = "cl/flash_backward.cl",
        .summary = "The backward on any OpenCL 1.2 device, any head dim and tile: the fallback every backward can run.",
        .op = OP_BACKWARD,
        .softcap = true, .alibi = true, .head_dim_v = true,
        .source = flashcl_source_flash_backward, .entry = "flash_backward_dot",
        .steps = {"flash_backward_dot", "flash_backward_dkdv", "flash_backward_dq"},
        .dtypes = DTYPE_BIT(FLASHCL_F32) | DTYPE_BIT(FLASHCL_F16) | DTYPE_BIT(FLASHCL_BF16),
        .masks = ALL_MASKS,
        .f32_precisions = ~0u,
        .head_dim_step = 1, .head_dim_max = FLASHCL_MAX_HEAD_DIM,
        .axes = {[M] = {1, 256, 1, {8, 16, 32, 64}}, [N] = {1, 256, 1, {8, 16, 32, 64}}},
        .rule = backward_rule, .rule_reported = true, .shrink = backward_shrink,
        .local_bytes = backward_local_bytes, .geometry = portable_geometry, .options = backward_options,
    },
};
const int fcl_kernel_count = sizeof(fcl_kernels) / sizeof(fcl_kernels[0]);

static const char *const axis_names[AXIS_COUNT] = {
    [AXIS_BLOCK_M] = "block_m", [AXIS_BLOCK_N] = "block_n", [AXIS_WARPS] = "warps", [AXIS_M_TILES] = "m_tiles"};

const char *fcl_axis_name(enum axis a)
{
    return a >= 0 && a < AXIS_COUNT ? axis_names[a] : NULL;
}

int fcl_axis_by_name(const char *name, size_t len)
{
    for (int a = 0; a < AXIS_COUNT; a++)
        if (strlen(axis_names[a]) == len && strncmp(axis_names[a], name, len) == 0)
            return a;
    return -1;
}

bool fcl_axis_in_range(const struct kernel_info *k, enum axis a, int value)
{
    const struct axis_spec *s = &k->axes[a];
    return s->lo > 0 && value >= s->lo && value <= s->hi && (value - s->lo) % s->step == 0;
}

const struct kernel_info *fcl_kernel_by_name(const char *name, size_t len)
{
    for (int i = 0; i < fcl_kernel_count; i++)
        if (strlen(fcl_kernels[i].name) == len && strncmp(fcl_kernels[i].name, name, len) == 0)
            return &fcl_kernels[i];
    return NULL;
}

int fcl_kernel_index(const struct kernel_info *k)
{
    return (int)(k - fcl_kernels);
}

const struct kernel_info *fcl_kernel_named(const char *name)
{
    return name ? fcl_kernel_by_name(name, strlen(name)) : NULL;
}

int flashcl_kernel_count(void)
{
    return fcl_kernel_count;
}

flashcl_status flashcl_kernel_describe(int index, struct flashcl_kernel_info *out)
{
    const flashcl_status entry = FCL_ENTER(NULL, out);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    if (index < 0 || index >= fcl_kernel_count)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "index = %d; must be 0..%d", index, fcl_kernel_count - 1);
    const struct kernel_info *k = &fcl_kernels[index];
    memset(out, 0, sizeof(*out));
    out->name = k->name;
    out->source = k->file;
    out->summary = k->summary;
    out->backward = k->op == OP_BACKWARD;
    out->dtypes = k->dtypes;
    out->head_dim_step = k->head_dim_step;
    out->head_dim_max = k->head_dim_max;
    out->tensor_cores = (k->needs & NEEDS_SM90A) ? 2 : (k->needs & NEEDS_TENSOR_CORES) ? 1 : 0;
    out->varlen = k->varlen;
    out->kv_cache = k->varlen && !k->packed_only;
    out->split_kv = k->combine != NULL;
    out->opt_in = k->opt_in;
    out->softcap = k->softcap;
    out->sinks = k->sinks || k->op == OP_BACKWARD;
    out->alibi = k->alibi;
    out->head_dim_v = k->head_dim_v;
    out->nondeterministic = k->dq_unordered;
    return FLASHCL_SUCCESS;
}

/* Appends to buf (used bytes so far in *used); false once it does not fit. */
static bool append(char *buf, size_t size, size_t *used, const char *fmt, ...) FLASHCL_PRINTF(4, 5);
static bool append(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used >= size)
        return false;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - *used) {
        *used = size;
        return false;
    }
    *used += (size_t)n;
    return true;
}

flashcl_status flashcl_kernel_shapes(int index, char *buf, size_t size)
{
    const flashcl_status entry = FCL_ENTER(NULL, buf);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    if (index < 0 || index >= fcl_kernel_count)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "index = %d; must be 0..%d", index, fcl_kernel_count - 1);
    const struct kernel_info *k = &fcl_kernels[index];
    static const char *const mask_names[] = {"no mask", "causal", "window"};
    static const char *const batch_names[] = {"dense", "packed", "KV cache", "paged"};
    size_t used = 0;
    const char *sep = "axes: ";
    for (int a = 0; a < AXIS_COUNT; a++) {
        const struct axis_spec *s = &k->axes[a];
        if (!s->lo)
            continue;
        append(buf, size, &used, "%s%s %d..%d", sep, axis_names[a], s->lo, s->hi);
        if (s->step > 1)
            append(buf, size, &used, " step %d", s->step);
        for (int c = 0; c < 8 && s->candidates[c]; c++)
            append(buf, size, &used, "%s%d", c ? "," : " {", s->candidates[c]);
        append(buf, size, &used, "}");
        sep = ", ";
    }
    sep = "; built-in: ";
    for (int i = 0; i < k->n_builtin; i++) {
        const struct builtin_shape *b = &k->builtin[i];
        append(buf, size, &used, "%s%sd %d..%d", sep, b->arch == ARCH_NVIDIA_SM90 ? "sm_90 " : "", b->head_dim_lo,
               b->head_dim_hi);
        if (b->mask >= 0 && b->mask < 3)
            append(buf, size, &used, " %s", mask_names[b->mask]);
        for (int v = 0, first = 1; b->batches && v < 4; v++)
            if (b->batches & (1u << v)) {
                append(buf, size, &used, "%s%s", first ? " " : "/", batch_names[v]);
                first = 0;
            }
        const char *axis_sep = ": ";
        for (int a = 0; a < AXIS_COUNT; a++)
            if (b->shape.axis[a]) {
                append(buf, size, &used, "%s%s=%d", axis_sep, axis_names[a], b->shape.axis[a]);
                axis_sep = ",";
            }
        sep = "; ";
    }
    if (k->rule)
        append(buf, size, &used, "; rule: sized from the %s local memory", k->rule_reported ? "reported" : "usable");
    if (used >= size)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "buffer of %zu bytes is too small", size);
    if (used == 0)
        buf[0] = '\0';
    return FLASHCL_SUCCESS;
}

const char *fcl_kernel_supports(const struct kernel_info *k, const struct problem *p)
{
    if (k->op != p->op)
        return "another operation";
    if (!(k->dtypes & DTYPE_BIT(p->dtype)))
        return "dtype";
    if (!(k->masks & MASK_BIT(p->mask)))
        return "mask";
    if (p->varlen && !k->varlen)
        return "packed varlen batch";
    if (p->varlen >= 2 && k->packed_only)
        return "KV cache";
    if (p->kv_dtype == FLASHCL_E4M3 && p->dtype != FLASHCL_E4M3 && !k->kv_e4m3)
        return "E4M3 KV cache";
    if (k->packs_group && (p->heads_kv < 1 || p->seq_q < 1))
        return "problem of unknown rows (it takes a KV head's query rows)";
    if (k->packs_group && (long long)(p->heads_q / p->heads_kv) * p->seq_q > FCL_DECODE_MAX_ROWS)
        return "many query rows (it holds group x seq_q of at most 16)";
    if (p->dtype == FLASHCL_F32 && !(k->f32_precisions & PRECISION_BIT(p->precision)))
        return "precision";
    if (p->head_dim % k->head_dim_step != 0 || p->head_dim > k->head_dim_max)
        return "head_dim";
    if ((k->needs & NEEDS_ROWS_16B) && !p->rows_16b)
        return "views whose rows do not start on 16 bytes";
    if (p->softcap != 0.0f && !k->softcap)
        return "logit softcap";
    if (p->sinks && !k->sinks && k->op == OP_FORWARD)  /* every backward kernel takes them (through the LSE) */
        return "attention sinks";
    if (p->alibi && !k->alibi)
        return "ALiBi";
    if (p->head_dim_v != 0 && p->head_dim_v != p->head_dim && !k->head_dim_v)
        return "a value head dim (head_dim_v) other than head_dim";
    if (p->head_dim_v % k->head_dim_step != 0 || p->head_dim_v > k->head_dim_max)
        return "head_dim_v";
    return NULL;
}

size_t flashcl_block_size_bound(size_t local_mem_bytes, size_t elem_bytes, size_t head_dim)
{
    if (elem_bytes == 0 || head_dim == 0)
        return 0;
    /* Four B×d arrays: Q, K, V blocks and the output accumulator. */
    return local_mem_bytes / (4 * elem_bytes * head_dim);
}

void fcl_shape_to_config(const struct device_desc *dev, const struct kernel_info *k, const struct kernel_shape *s,
                         struct flashcl_tuned_config *c)
{
    c->kernel = k->name;
    int block_m = 0, workgroup = 0;
    c->block_n = s->axis[AXIS_BLOCK_N];
    c->warps = s->axis[AXIS_WARPS];
    c->m_tiles = s->axis[AXIS_M_TILES];
    /* block_m is an axis of the FMA kernels and follows from the shape for the others. */
    k->geometry(dev, s, &block_m, &workgroup);
    c->block_m = s->axis[AXIS_BLOCK_M] ? s->axis[AXIS_BLOCK_M] : block_m;
}

void fcl_config_to_shape(const struct kernel_info *k, const struct flashcl_tuned_config *c, struct kernel_shape *s)
{
    memset(s, 0, sizeof(*s));
    const int values[AXIS_COUNT] = {
        [AXIS_BLOCK_M] = c->block_m, [AXIS_BLOCK_N] = c->block_n, [AXIS_WARPS] = c->warps,
        [AXIS_M_TILES] = c->m_tiles};
    for (int a = 0; a < AXIS_COUNT; a++)
        if (k->axes[a].lo)
            s->axis[a] = values[a];
}
