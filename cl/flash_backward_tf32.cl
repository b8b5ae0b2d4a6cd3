/*
 * flash_backward_tf32.cl: the backward pass for f32 storage on NVIDIA tensor
 * cores (sm_80+) with TF32 operands (PASSES 1) or 3xTF32 (PASSES 3), f32
 * accumulation: the operand layer of backward_mma_skeleton.h (the kernels
 * and their design) on mma.sync m16n8k8 .tf32 (nv_tf32.h, whose k order
 * makes an accumulator directly an A operand). Opt-in only
 * (FLASHCL_PRECISION_TF32 / _TF32X3): exact f32 stays on the FMA kernels.
 * Kernels flash_backward_dot, flash_backward_tf32_dkdv,
 * flash_backward_tf32_dq.
 *
 * Local tiles are f32 [row][PITCH], PITCH = HEAD_DIM + 8 (≡ 8 or 24 mod 32
 * for HEAD_DIM a multiple of 16), with column c of row r stored at column
 * c ^ (8 (r / 4 % 2)). Each tile is read two ways (ldmatrix is b16, so plain
 * local loads): as A or as the B of load_b, 8-byte loads of columns 2t,
 * 2t+1 in rows g (16 lanes a phase: rows g = 0..3 or 4..7, one swizzle,
 * banks 8g + 2t distinct by the pitch), and as the B of load_b_trans,
 * 4-byte loads of column g in rows 2t and 2t+1 (rows 0, 2, 4, 6 start at
 * banks 0, 16, 0, 16 by the pitch; the swizzle moves rows 4 and 6 by 8
 * columns: 32 distinct banks). Copies are cp.async 16-byte chunks (the
 * swizzle keeps chunks whole), so rows must start on 16 bytes.
 */

#ifndef PASSES
#define PASSES 1             /* 1: TF32; 3: 3xTF32 */
#endif
#define DTYPE 0              /* f32 storage: the dot step's loads */

#include "backward_mma_options.h"
#include "nv_tf32.h"         /* mma m16n8k8 .tf32, the operand split */

#if HEAD_DIM > 128
#error "the TF32 backward takes HEAD_DIM up to 128 (its f32 tiles past it outgrow an A100's local memory)"
#endif

#define BACKWARD_KERNEL(step) flash_backward_tf32_##step
typedef float elem_t;
typedef float tile_t;
#define PITCH (HEAD_DIM + 8)
#define TILE_ROW PITCH
#define CHUNKS (HEAD_DIM / 4)                      /* 16-byte chunks a row */
typedef operand frag_t;      /* an f32 as TF32 (3xTF32: and its remainder) */
#define FRAG_REGS (PASSES == 3 ? 2 : 1)
#define MMA_K 8
#define B_TILES 1
/* Queries (dkdv) and keys (dq) per inner step: 32 where the accumulators leave room (d <= 64). */
#define Q_CHUNK (HEAD_DIM <= 64 && BLOCK_M % 32 == 0 ? 32 : 16)
#define K_CHUNK (HEAD_DIM <= 64 && BLOCK_N % 32 == 0 ? 32 : 16)
#if PASSES == 3
#define EXP2 exp2            /* P to f32's accuracy where the products have it */
#else
#define EXP2 exp2_ftz
#endif

/* Where column `col` of row `row` lives in a tile (the file's comment says why). */
static inline int tile_index(int row, int col)
{
    return row * PITCH + (col ^ ((row & 4) << 1));
}

/* rows x HEAD_DIM f32 of a [seq, d] slice into a tile: cp.async where the row exists, zeros past the end
 * (plain stores; visible after the barrier). */
static inline void load_rows(__local float *tile, int rows, __global const float *base, ulong row_stride,
                             int first_row, int seq, int tid)
{
    for (int c = tid; c < rows * CHUNKS; c += WG) {
        const int r = c / CHUNKS, ch = c % CHUNKS;
        __local float *dst = tile + tile_index(r, 4 * ch);
        if (first_row + r < seq)
            copy_async_16(local_address(dst), base + (ulong)(first_row + r) * row_stride + 4 * ch);
        else
            *(__local float4 *)dst = (float4)(0.0f);
    }
}

struct lanes {
    int g, t;
};

static inline struct lanes lane_offsets(int lane)
{
    struct lanes l;
    l.g = lane >> 2;
    l.t = lane & 3;
    return l;
}

/* Rows row0 + g, row0 + g + 8 at columns 2t, 2t + 1 of k-step kk (the instruction's k = t, t + 4). */
BACKWARD_INLINE void load_a(frag_t *a, __local const tile_t *tile, int row0, int kk,
                            const struct lanes *l NV_SCRATCH_PARAM)
{
    const int col = kk * 8 + 2 * l->t;
    const float2 upper = vload2(0, tile + tile_index(row0 + l->g, col));
    const float2 lower = vload2(0, tile + tile_index(row0 + l->g + 8, col));
    a[0] = to_operand(upper.x);
    a[1] = to_operand(lower.x);
    a[2] = to_operand(upper.y);
    a[3] = to_operand(lower.y);
}

/* Row row0 + g (n = g) at columns 2t, 2t + 1 of k-step kk. */
BACKWARD_INLINE void load_b(frag_t *b, __local const tile_t *tile, int row0, int kk,
                            const struct lanes *l NV_SCRATCH_PARAM)
{
    const float2 v = vload2(0, tile + tile_index(row0 + l->g, kk * 8 + 2 * l->t));
    b[0] = to_operand(v.x);
    b[1] = to_operand(v.y);
}

/* Rows k0 + 2t, k0 + 2t + 1 (k = t, t + 4) at column 8 nb + g. */
BACKWARD_INLINE void load_b_trans(frag_t *b, __local const tile_t *tile, int k0, int nb,
                                  const struct lanes *l NV_SCRATCH_PARAM)
{
    b[0] = to_operand(tile[tile_index(k0 + 2 * l->t, nb * 8 + l->g)]);
    b[1] = to_operand(tile[tile_index(k0 + 2 * l->t + 1, nb * 8 + l->g)]);
}

BACKWARD_INLINE void mma_b(float (*c)[4], const frag_t *a, const frag_t *b NV_SCRATCH_PARAM)
{
    mma_split(c[0], a, b[0], b[1] NV_SCRATCH_ARG);
}

/* An accumulator tile as the A operand of a product contracting over its 8 columns (nv_tf32.h's k order). */
BACKWARD_INLINE void accumulators_as_a(frag_t *a, float (*c)[4])
{
    a[0] = to_operand(c[0][0]);
    a[1] = to_operand(c[0][2]);
    a[2] = to_operand(c[0][1]);
    a[3] = to_operand(c[0][3]);
}

BACKWARD_INLINE void store_pair(__global elem_t *p, float lo, float hi)
{
    vstore2((float2)(lo, hi), 0, p);
}

#include "backward_mma_skeleton.h"
