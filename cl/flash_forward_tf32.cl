/*
 * flash_forward_tf32.cl: the forward pass for f32 inputs on NVIDIA tensor
 * cores (sm_80+) with TF32 operands, from OpenCL C through inline PTX. Opt-in
 * only (FLASHCL_PRECISION_TF32 / _TF32X3): exact f32 stays the default.
 *
 *   PASSES 1  every product a·b is tf32(a)·tf32(b): operands keep 10 of
 *             f32's 23 mantissa bits (relative error ~2^-11 per operand).
 *   PASSES 3  the split a = big + small, big = tf32(a), small = tf32(a - big),
 *             a·b ~ big·big + big·small + small·big: three mma per product,
 *             operand error ~2^-21, close to f32 (the "3xTF32" of CUTLASS).
 * Accumulation is f32 in both; the softmax and the rescale are f32 on the
 * FMA units, as in flash_forward_mma.cl, whose structure this file follows:
 * WARPS warps, M_TILES 16-row mma tiles per warp, K and V streamed BLOCK_N
 * keys at a time with cp.async (V during S = QKᵀ and the softmax, K of the
 * next block during P·V; two barriers per block), P kept in registers,
 * causal blocks past the diagonal skipped.
 *
 * mma.sync m16n8k8 .tf32 fragments (g = lane/4, t = lane%4):
 *   A 16×8:  a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
 *   B 8×8:   b0 = B[t][g], b1 = B[t+4][g]
 *   C 16×8:  c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]
 * A contraction may visit its k indices in any order if both operands use
 * the same one. This file maps the instruction's k = t to column 2t and
 * k = t + 4 to column 2t + 1 of each group of eight, so that
 *   S = QKᵀ:  a0/a2 are Q[g][2t], Q[g][2t+1] and b0/b1 are K[g][2t], K[g][2t+1]:
 *             one 8-byte local load each;
 *   O += PV:  P's A operand is exactly the S accumulator (a0 = c0, a1 = c2,
 *             a2 = c1, a3 = c3): no shuffle; b0/b1 are V[2t][g], V[2t+1][g].
 * Local tiles are f32 [row][pitch]; pitches make those loads conflict-free:
 * Q and K (8-byte loads, 16 lanes a phase) pitch = d + 8; V (4-byte loads of
 * rows 2t) pitch = d + 4. The mma, the rounding and the split: nv_tf32.h.
 *
 * -DNV_EMULATE=1 runs it anywhere (PoCL in CI) on cl/nv_emulate.h's plain
 * OpenCL C primitives, whose lane exchanges are work-group barriers: every
 * work-item reaches every mma and quad_xor together, as in
 * flash_forward_mma.cl (the key loop's bounds are the work-group's, each
 * warp's edge test only masks values, finish_row runs before a row past
 * seq_q is skipped). Keep it so.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef PASSES
#define PASSES 1             /* 1: TF32; 3: 3xTF32 */
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef M_TILES
#define M_TILES 1
#endif

#define WARP_ROWS (16 * M_TILES)
#define BLOCK_M (WARP_ROWS * WARPS)
#define WG (32 * WARPS)
#define KSTEPS (HEAD_DIM / 8)          /* k-steps of S = QKᵀ */
#define S_TILES (BLOCK_N / 8)          /* n-tiles of S per warp */
#define O_TILES (HEAD_DIM / 8)         /* n-tiles of O per warp */
#define PITCH_QK (HEAD_DIM + 8)
#define PITCH_V (HEAD_DIM + 4)
#define CHUNKS (HEAD_DIM / 4)          /* 16-byte chunks per row */

#if HEAD_DIM % 8 != 0 || HEAD_DIM > 128
#error "HEAD_DIM must be a multiple of 8, at most 128"
#endif
#if BLOCK_N % 8 != 0
#error "BLOCK_N must be a multiple of 8"
#endif
#if PASSES != 1 && PASSES != 3
#error "PASSES must be 1 or 3"
#endif

#define DTYPE 0       /* f32 storage: the split-KV merge's stores */
#include "storage.h"
#include "mask.h"     /* causal, sliding windows */
#include "varlen.h"   /* packed batches, KV caches (paged too) */
#include "split.h"    /* split-KV partials */
#include "nv_mma.h"
#include "block_order.h"
#include "nv_tf32.h"  /* mma m16n8k8 .tf32, the operand split */

/* rows x HEAD_DIM f32 of a [seq, d] slice into a tile of pitch `pitch`:
 * cp.async where the row exists, zeros past the end. */
static inline void load_tile(__local float *tile, int pitch, int rows, __global const float *base,
                             ulong row_stride, int first_row, int seq, int tid)
{
    for (int c = tid; c < rows * CHUNKS; c += WG) {
        const int r = c / CHUNKS, ch = c % CHUNKS;
        __local float *dst = tile + r * pitch + ch * 4;
        if (first_row + r < seq)
            copy_async_16(local_address(dst), base + (ulong)(first_row + r) * row_stride + ch * 4);
        else
            *(__local float4 *)dst = (float4)(0.0f);
    }
}

#if VARLEN == 3
/* As load_tile for keys of a paged cache: row `key` of sequence b lives in
 * its page (varlen.h's KV_ROW clamps the same way); base is the head's
 * offset in page 0. A thread's page numbers are all read before its first
 * copy is issued, so their latencies overlap instead of each copy waiting
 * on its own lookup (as in flash_forward_mma.cl). */
#define PAGED_STEPS ((BLOCK_N * CHUNKS + WG - 1) / WG)
static inline void load_paged_tile(__local float *tile, int pitch, int rows, __global const float *base,
                                   ulong page_stride, ulong row_stride, int first_row, int seq, int tid, int b,
                                   __global const int *pages, int page_size, int pages_per_seq, int num_pages)
{
    ulong src[PAGED_STEPS];
#pragma unroll
    for (int i = 0; i < PAGED_STEPS; i++) {
        const int key = first_row + (tid + i * WG) / CHUNKS;
        const int page = key / page_size;
        src[i] = key < seq ? (ulong)clamp(pages[b * pages_per_seq + page], 0, num_pages - 1) * page_stride +
                                 (ulong)(key - page * page_size) * row_stride
                           : 0;
    }
#pragma unroll
    for (int i = 0; i < PAGED_STEPS; i++) {
        const int c = tid + i * WG;
        if (c < rows * CHUNKS) {
            const int r = c / CHUNKS, ch = c % CHUNKS;
            __local float *dst = tile + r * pitch + ch * 4;
            if (first_row + r < seq)
                copy_async_16(local_address(dst), base + src[i] + ch * 4);
            else
                *(__local float4 *)dst = (float4)(0.0f);
        }
    }
}
#define LOAD_KEYS(tile, pitch, base, sb, ss, first, seq)                                                             \
    load_paged_tile(tile, pitch, BLOCK_N, base, sb, ss, first, seq, tid, b, pages, page_size, pages_per_seq,       \
                    num_pages)
#else
#define LOAD_KEYS(tile, pitch, base, sb, ss, first, seq) load_tile(tile, pitch, BLOCK_N, base, ss, first, seq, tid)
#endif

#include "forward_args.h"

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_forward_tf32(FORWARD_ARGS(float))
{
    __local float q_tile[BLOCK_M * PITCH_QK] __attribute__((aligned(16)));
    __local float k_tile[BLOCK_N * PITCH_QK] __attribute__((aligned(16)));
    __local float v_tile[BLOCK_N * PITCH_V] __attribute__((aligned(16)));
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    int qb, h, b;
#if SPLIT
    int split;
    split_coordinates(WINDOW_RIGHT >= 0, n_splits, &qb, &split, &h, &b);
#else
    block_coordinates(WINDOW_RIGHT >= 0, 1, &qb, &h, &b);  /* heaviest query blocks first when causal */
#endif
    const int rows_grid = seq_q;  /* the grid's rows (the longest sequence's, varlen) */
    const int hk = h / group;
    const int q0 = qb * BLOCK_M;
    SEQUENCE_ROWS(b);  /* start_q, start_k; varlen: seq_q, seq_kv become this sequence's */
    const int diag = seq_kv - seq_q;
    const float slope2 = HEAD_ALIBI2(h);

    __global const float *q_base = q + q_off + (ulong)b * q_sb + (ulong)start_q * q_ss + (ulong)h * q_sh;
    __global const float *k_base = k + k_off + KV_BATCH(k_sb) + (ulong)start_k * k_ss + (ulong)hk * k_sh;
    __global const float *v_base = v + v_off + KV_BATCH(v_sb) + (ulong)start_k * v_ss + (ulong)hk * v_sh;

    /* The keys this block's rows see; none for a block past its sequence's rows (varlen), which
     * still reaches every barrier, as the whole group must, and stores nothing. */
    int kv_end = q0 < seq_q ? mask_key_end(q0, BLOCK_M, seq_q, seq_kv) : 0;
    int kv_begin = mask_key_begin(q0, seq_q, seq_kv);
#if SPLIT
    split_keys(split, n_splits, &kv_begin, &kv_end);
#endif

    load_tile(q_tile, PITCH_QK, BLOCK_M, q_base, q_ss, q0, seq_q, tid);
    if (kv_begin < kv_end)
        LOAD_KEYS(k_tile, PITCH_QK, k_base, k_sb, k_ss, kv_begin, seq_kv);
    copy_async_commit();
    COPY_ASYNC_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);

    float acc[M_TILES][O_TILES][4];
    float m_row[M_TILES][2], l_row[M_TILES][2];
#pragma unroll
    for (int mt = 0; mt < M_TILES; mt++) {
#pragma unroll
        for (int n = 0; n < O_TILES; n++)
            acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
        m_row[mt][0] = m_row[mt][1] = -INFINITY;
        l_row[mt][0] = l_row[mt][1] = 0.0f;
    }
    const int warp_row0 = q0 + warp * WARP_ROWS;

    /* Two barriers per block, one buffer each for K and V (a second would
     * cost this kernel its second work-group per SM at d = 128): V of this
     * block loads during S = QKᵀ and the softmax, K of the next during P·V. */
    for (int kb = kv_begin; kb < kv_end; kb += BLOCK_N) {
        /* K of this block is in (prologue or the previous block's P·V phase),
         * and every warp is done with the previous block's V. */
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_KEYS(v_tile, PITCH_V, v_base, v_sb, v_ss, kb, seq_kv);
        copy_async_commit();

        float s[M_TILES][S_TILES][4];
#pragma unroll
        for (int mt = 0; mt < M_TILES; mt++)
#pragma unroll
            for (int n = 0; n < S_TILES; n++)
                s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
NV_UNROLL
        for (int kk = 0; kk < KSTEPS; kk++) {
            const int col = kk * 8 + 2 * t;
            operand qa[M_TILES][4];
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++) {
                const int row = warp * WARP_ROWS + 16 * mt + g;
                const float2 upper = vload2(0, q_tile + row * PITCH_QK + col);
                const float2 lower = vload2(0, q_tile + (row + 8) * PITCH_QK + col);
                qa[mt][0] = to_operand(upper.x);
                qa[mt][1] = to_operand(lower.x);
                qa[mt][2] = to_operand(upper.y);
                qa[mt][3] = to_operand(lower.y);
            }
NV_UNROLL
            for (int n = 0; n < S_TILES; n++) {
                const float2 kv = vload2(0, k_tile + (n * 8 + g) * PITCH_QK + col);
                const operand b0 = to_operand(kv.x), b1 = to_operand(kv.y);
NV_UNROLL
                for (int mt = 0; mt < M_TILES; mt++)
                    mma_split(s[mt][n], qa[mt], b0, b1 NV_SCRATCH_ARG);
            }
        }
        /* Masks only where some key of the block may be absent or hidden from some row of this warp. */
        bool edge = kb + BLOCK_N > seq_kv;
#if WINDOW_RIGHT >= 0
        edge = edge || kb + BLOCK_N - 1 > warp_row0 + diag + WINDOW_RIGHT;
#endif
#if WINDOW_LEFT >= 0
        edge = edge || kb < warp_row0 + WARP_ROWS - 1 + diag - WINDOW_LEFT;
#endif
NV_UNROLL
        for (int mt = 0; mt < M_TILES; mt++)
            online_softmax(s[mt], acc[mt], m_row[mt], l_row[mt], edge, kb, warp_row0 + 16 * mt + g,
                           warp_row0 + 16 * mt + g + 8, t, seq_kv, diag,
                           scale_log2 ALIBI_ARG(slope2, slope2) NV_SCRATCH_ARG);

        COPY_ASYNC_WAIT(0);  /* V has landed */
        barrier(CLK_LOCAL_MEM_FENCE);  /* ... for every warp, and every warp is done with k_tile */
        if (kb + BLOCK_N < kv_end)
            LOAD_KEYS(k_tile, PITCH_QK, k_base, k_sb, k_ss, kb + BLOCK_N, seq_kv);
        copy_async_commit();
NV_UNROLL
        for (int kc = 0; kc < S_TILES; kc++) {
            operand pa[M_TILES][4];
#pragma unroll
            for (int mt = 0; mt < M_TILES; mt++) {
                pa[mt][0] = to_operand(s[mt][kc][0]);
                pa[mt][1] = to_operand(s[mt][kc][2]);
                pa[mt][2] = to_operand(s[mt][kc][1]);
                pa[mt][3] = to_operand(s[mt][kc][3]);
            }
            __local const float *v_rows = v_tile + (kc * 8 + 2 * t) * PITCH_V + g;
NV_UNROLL
            for (int n = 0; n < O_TILES; n++) {
                const operand b0 = to_operand(v_rows[n * 8]), b1 = to_operand(v_rows[PITCH_V + n * 8]);
NV_UNROLL
                for (int mt = 0; mt < M_TILES; mt++)
                    mma_split(acc[mt][n], pa[mt], b0, b1 NV_SCRATCH_ARG);
            }
        }
        COPY_ASYNC_WAIT(0);  /* the next K has landed for this thread (the barrier above publishes it) */
    }
    COPY_ASYNC_WAIT(0);

    __global float *o_base = o + o_off + (ulong)b * o_sb + (ulong)start_q * o_ss + (ulong)h * o_sh;
NV_UNROLL
    for (int mt = 0; mt < M_TILES; mt++) {
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            float lse_row;
            const float inv_l = finish_row(m_row[mt][r], l_row[mt][r], HEAD_SINK(h), &lse_row NV_SCRATCH_ARG);
            const int row = warp_row0 + 16 * mt + g + 8 * r;
            if (row >= seq_q)
                continue;
#if SPLIT
            /* This split's partial, normalised over its own keys, and its LSE (cl/split.h). */
            __global float *dst = part + split_part(split, b, h, row, rows_grid, get_num_groups(1)) + 2 * t;
#else
            __global float *dst = o_base + (ulong)row * o_ss + 2 * t;
#endif
#pragma unroll
            for (int n = 0; n < O_TILES; n++)
                vstore2((float2)(acc[mt][n][2 * r] * inv_l, acc[mt][n][2 * r + 1] * inv_l), 0, dst + n * 8);
#if SPLIT
            if (t == 0)
                dst[HEAD_DIM] = lse_row;
#else
            if (has_lse && t == 0)
                lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + row) * l_ss] = lse_row;
#endif
        }
    }
}

#include "split_combine.h"
