/*
 * flash_backward_mma.cl: the backward pass on NVIDIA tensor cores (sm_80+),
 * from OpenCL C through inline PTX, for f16 or bf16 storage, f32
 * accumulation: the operand layer of backward_mma_skeleton.h (the kernels
 * and their design) on mma.sync m16n8k16 and ldmatrix (nv_mma16.h). Kernels
 * flash_backward_dot, flash_backward_mma_dkdv, flash_backward_mma_dq and,
 * with FUSED_DQ (the "backward-tensor-core-fused" entry),
 * flash_backward_mma_dq_convert. The host picks this file on an NVIDIA
 * device of compute capability >= 8.0 whose compiler passed the probe, for
 * 16-byte-aligned views and HEAD_DIM a multiple of 16 up to 256.
 *
 * Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16" (g =
 * lane/4, t = lane%4). Local tiles are [row][HEAD_DIM] in 16-byte chunks
 * (ROW_CHUNKS a row) laid out so ldmatrix's eight row addresses hit
 * distinct banks (nv_mma16.h's swizzle: an XOR with the row, or an odd row
 * stride). P and dS become A operands rounded to the storage type, as
 * FlashAttention-2 does.
 */

#ifndef DTYPE
#define DTYPE 1              /* 1 f16, 2 bf16 */
#endif

#include "backward_mma_options.h"
#include "nv_mma16.h"        /* mma, ldmatrix, pack_pair, swizzled tiles and their loader */

#define BACKWARD_KERNEL(step) flash_backward_mma_##step
typedef ushort elem_t;       /* f16 or bf16 bits */
typedef uint4 tile_t;        /* a 16-byte chunk of a row */
#define TILE_ROW ROW_CHUNKS
typedef uint frag_t;         /* two f16 or bf16 values */
#define FRAG_REGS 1
#define MMA_K 16
#define B_TILES 2            /* ldmatrix .x4: B of two 8-column n-tiles */
#define Q_CHUNK (BLOCK_M % 32 == 0 ? 32 : 16)      /* dkdv: queries per inner step */
#define K_CHUNK (BLOCK_N % 32 == 0 ? 32 : 16)      /* dq: keys per inner step */
#define EXP2 exp2_ftz

#define load_rows load_block  /* nv_mma16.h's loader: cp.async, zeros past the end */

/* The rows and chunks a lane gives ldmatrix: for A, for B n-major (rows n, k along the row) and for B
 * k-major (.trans). */
struct lanes {
    int a_row, a_chunk, b_row, b_chunk, tr_row, tr_chunk;
};

static inline struct lanes lane_offsets(int lane)
{
    const int j = lane >> 3;  /* the 8 x 8 matrix whose row this lane addresses */
    struct lanes l;
    l.a_row = 8 * (j & 1) + (lane & 7);
    l.a_chunk = lane >> 4;
    l.b_row = 8 * (j >> 1) + (lane & 7);
    l.b_chunk = j & 1;
    l.tr_row = lane & 15;
    l.tr_chunk = lane >> 4;
    return l;
}

BACKWARD_INLINE void load_a(frag_t *a, __local const tile_t *tile, int row0, int kk,
                            const struct lanes *l NV_SCRATCH_PARAM)
{
    ldmatrix_x4(local_address(&tile[swizzle(row0 + l->a_row, kk * 2 + l->a_chunk)]), a);
}

BACKWARD_INLINE void load_b(frag_t *b, __local const tile_t *tile, int row0, int kk,
                            const struct lanes *l NV_SCRATCH_PARAM)
{
    ldmatrix_x4(local_address(&tile[swizzle(row0 + l->b_row, kk * 2 + l->b_chunk)]), b);
}

BACKWARD_INLINE void load_b_trans(frag_t *b, __local const tile_t *tile, int k0, int nb,
                                  const struct lanes *l NV_SCRATCH_PARAM)
{
    ldmatrix_x4_trans(local_address(&tile[swizzle(k0 + l->tr_row, nb * 2 + l->tr_chunk)]), b);
}

BACKWARD_INLINE void mma_b(float (*c)[4], const frag_t *a, const frag_t *b NV_SCRATCH_PARAM)
{
    mma_16x8x16(c[0], a, b[0], b[1]);
    mma_16x8x16(c[1], a, b[2], b[3]);
}

/* Two accumulator tiles, columns 2t (+1) of each, are the A operand's k = 2t (+1) and 8 + 2t (+1). */
BACKWARD_INLINE void accumulators_as_a(frag_t *a, float (*c)[4])
{
    a[0] = pack_pair(c[0][0], c[0][1]);
    a[1] = pack_pair(c[0][2], c[0][3]);
    a[2] = pack_pair(c[1][0], c[1][1]);
    a[3] = pack_pair(c[1][2], c[1][3]);
}

BACKWARD_INLINE void store_pair(__global elem_t *p, float lo, float hi)
{
    *(__global uint *)p = pack_pair(lo, hi);
}

#if FUSED_DQ
/* A chunk's dS, [key][query] in packed pairs: a row (one key, Q_CHUNK queries) of DS_WORDS words, padded so
 * the warps' stores and ldmatrix's eight 16-byte rows hit distinct banks. */
typedef uint ds_t;
#define DS_WORDS (Q_CHUNK / 2 + 4)

/* The 16 rows of keys key0.. as zeros (a tile the causal skip passes over). */
BACKWARD_INLINE void clear_ds(__local ds_t *ds, int key0, int lane)
{
    for (int i = lane; i < 16 * (Q_CHUNK / 2); i += 32)
        ds[(key0 + i / (Q_CHUNK / 2)) * DS_WORDS + i % (Q_CHUNK / 2)] = 0u;
}

/* dSᵀ's A operand kc: a[r] holds keys key0 + g (+8 for odd r), queries 16 kc + 2t (+8 for r >= 2). */
BACKWARD_INLINE void store_ds(__local ds_t *ds, int key0, int kc, const frag_t *a, int g, int t)
{
    __local ds_t *row_g = ds + (key0 + g) * DS_WORDS + kc * 8 + t;
    row_g[0] = a[0];
    row_g[8 * DS_WORDS] = a[1];
    row_g[4] = a[2];
    row_g[8 * DS_WORDS + 4] = a[3];
}

/* A = dS (queries 16 mt.. x keys 16 ks..) from [key][query]: matrix lane / 8 is keys 8 (lane / 16) on,
 * queries 8 (lane / 8 % 2) on (B's n-major lanes); .trans hands each thread its row's key pairs. */
BACKWARD_INLINE void load_ds_a(frag_t *a, __local const ds_t *ds, int ks, int mt,
                               const struct lanes *l NV_SCRATCH_PARAM)
{
    ldmatrix_x4_trans(local_address(ds + (ks * 16 + l->b_row) * DS_WORDS + mt * 8 + 4 * l->b_chunk), a);
}
#endif

#include "backward_mma_skeleton.h"
