/*
 * flash_backward_tiled.cl: exact attention backward for the FMA units, with
 * register micro-tiles. Portable OpenCL C 1.2 (no extensions); the default
 * backward for head dims that are multiples of 4 where the tensor-core one
 * does not run (f32, or views not on 16 bytes).
 *
 * Same three steps, arguments and results contract as flash_backward.cl
 * (src/backward.c enqueues either): flash_backward_dot (backward_dot.h),
 * flash_backward_tiled_dkdv, flash_backward_tiled_dq. Both block kernels
 * recompute P = exp2(scale_log2 q.k - lse2) from Q, K and the forward's LSE
 * and dS = P (dO.v - D); no atomics, every output element is summed by one
 * work-item in a fixed order, so the result is the same bits every run.
 *
 * What differs from flash_backward.cl is how a group shares the products.
 * Each work-item (ty, tx) owns R = 4 consecutive "outer" rows of its kernel
 * (keys in dK/dV, query rows in dQ) and 16 work-items share them:
 *   flash_backward_tiled_dkdv  one group of 4·BLOCK_N work-items per
 *     (BLOCK_N keys, kv head, batch); K and V stay in local memory, Q and dO
 *     blocks of BLOCK_M rows stream through it (the GQA group's query heads in
 *     order). Per block:
 *       Sᵀ, dPᵀ   keys ty·4 .. ty·4+3 x rows tx, tx+16, ... (4 x BLOCK_M/16
 *                 each): per step of the head dim 4 K (or V) and BLOCK_M/16 Q
 *                 (or dO) float4 from local memory for 4·4·BLOCK_M/16 FMA;
 *       P, dS     into local memory as [row][key];
 *       dV += Pᵀ dO, dK += dSᵀ Q  the same 4 keys x float4 columns tx, tx+16,
 *                 ... of the head dim: per query row one float4 of P, one of
 *                 dS and one of dO and Q per column, for 32 FMA per column.
 *   flash_backward_tiled_dq  one group of 4·BLOCK_M work-items per (BLOCK_M
 *     rows, query head, batch); Q and dO stay, K and V blocks of BLOCK_N
 *     keys stream. S, dP micro-tiles of rows ty·4 .. ty·4+3 x keys tx, tx+16,
 *     ...; dSᵀ into local memory as [key][row]; dQ += dS K over 4 rows x
 *     float4 columns.
 * A warp covers 4 values of ty and 8 of tx, so loads indexed by ty hit 4
 * addresses and those indexed by tx 8 (one 128-byte wavefront each on NVIDIA
 * hardware). Row pitches are HEAD_DIM + 4 floats (BLOCK_N + 4 and BLOCK_M + 4
 * for the score tiles): rows start on distinct banks, float4s stay aligned.
 *
 * Masks (cl/mask.h) as flash_backward.cl: blocks no pair of which is visible
 * are skipped, elements tested only in blocks that cross a mask or sequence
 * edge. A row past seq_q or whose LSE is -inf (it sees no key) gets
 * lse2 = +inf, so its P is exactly 0 for its finite scores: dQ = 0 for it
 * exactly. Keys no row sees run no block or have P = 0: dK = dV = 0.
 *
 * Keep backward_tiled_local_bytes() in src/kernels.c in step with the
 * __local arrays below.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64          /* a multiple of 4, at most 256 */
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM  /* V's, O's, dO's, dV's columns: a multiple of 4, at most 256 */
#endif
#ifndef BLOCK_M
#define BLOCK_M 64           /* query rows per block: streamed by dK/dV, outer in dQ */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64           /* keys per block: outer in dK/dV, streamed by dQ */
#endif

#define R 4                       /* outer rows per work-item */
#define WG (4 * BLOCK_N)          /* dK/dV's work-group (and D's) */
#define WG_DQ (4 * BLOCK_M)       /* dQ's work-group */
#define CM (BLOCK_M / 16)         /* query rows per work-item in dK/dV's micro-tile */
#define CN (BLOCK_N / 16)         /* keys per work-item in dQ's micro-tile */
#define D4 (HEAD_DIM / 4)         /* float4 columns of a row */
#define CD4 ((D4 + 15) / 16)      /* float4 columns of an accumulator row per work-item */
#define PITCH (HEAD_DIM + 4)      /* Q and K tiles */
#define D4V (HEAD_DIM_V / 4)      /* the same for dO's, V's and dV's rows */
#define CD4V ((D4V + 15) / 16)
#define CD4_MAX (CD4 > CD4V ? CD4 : CD4V)
#define PITCH_V (HEAD_DIM_V + 4)  /* dO and V tiles */
#define PITCH_N (BLOCK_N + 4)     /* P, dS in dK/dV: [row][key] */
#define PITCH_M (BLOCK_M + 4)     /* dSᵀ in dQ: [key][row] */

#if HEAD_DIM % 4 != 0 || HEAD_DIM < 4 || HEAD_DIM > 256 || HEAD_DIM_V % 4 != 0 || HEAD_DIM_V < 4 || HEAD_DIM_V > 256
#error "HEAD_DIM and HEAD_DIM_V must be multiples of 4, 4..256"
#endif
#if BLOCK_M % 16 != 0 || BLOCK_N % 16 != 0 || BLOCK_M < 16 || BLOCK_N < 16 || BLOCK_M > 128 || BLOCK_N > 128
#error "BLOCK_M and BLOCK_N must be 16, 32, 48, ... 128"
#endif

#include "storage.h"      /* DTYPE (default 0 = f32), storage_t, LOAD, STORE */
#include "mask.h"         /* CAUSAL, WINDOW_LEFT / WINDOW_RIGHT: which keys a row sees */
#include "score_mod.h"    /* SOFTCAP2: logit softcapping */
#include "block_order.h"  /* dQ's query blocks, heaviest first when causal */

/* Work-item lid of a group as (ty, tx), tx < 16: a warp holds 4 values of ty and 8 of tx. */
static inline void tile_coordinates(int lid, int *ty, int *tx)
{
    const int warp = lid >> 5, lane = lid & 31;
    *ty = (warp >> 1) * 4 + (lane >> 3);
    *tx = (warp & 1) * 8 + (lane & 7);
}

/* rows x width of a [seq, width] slice into a tile of pitch `pitch`, zeros past the end of the sequence. */
static inline void load_tile_of(__local float *tile, int width, int pitch, int rows, __global const storage_t *src,
                                ulong base, ulong row_stride, int first_row, int seq, int lid, int wg)
{
    for (int idx = lid; idx < rows * width; idx += wg) {
        const int r = idx / width, c = idx % width;
        const int row = first_row + r;
        tile[r * pitch + c] = row < seq ? LOAD(src, base + (ulong)row * row_stride + c) : 0.0f;
    }
}
/* Q's and K's tiles (HEAD_DIM), dO's and V's (HEAD_DIM_V). Every argument named: OpenCL C 1.2 has no variadic
 * macros (s6.9), and NVIDIA's compiler refuses them. */
#define load_tile(tile, rows, src, base, stride, first, seq, lid, wg) \
    load_tile_of(tile, HEAD_DIM, PITCH, rows, src, base, stride, first, seq, lid, wg)
#define load_tile_v(tile, rows, src, base, stride, first, seq, lid, wg) \
    load_tile_of(tile, HEAD_DIM_V, PITCH_V, rows, src, base, stride, first, seq, lid, wg)

/* The query block's LSE in base 2 and D; +inf for a row past seq_q or that sees no key (LSE -inf), so that
 * exp2(s - lse2) = 0 for it without a test per element. */
static inline void load_row_terms(__local float *row_lse2, __local float *row_delta, __global const float *lse,
                                  ulong lse_base, ulong lse_ss, __global const float *delta, ulong delta_base,
                                  int q0, int seq_q, int lid, int wg)
{
    for (int i = lid; i < BLOCK_M; i += wg) {
        const int row = q0 + i;
        const float l = row < seq_q ? lse[lse_base + (ulong)row * lse_ss] : -INFINITY;
        row_lse2[i] = l == -INFINITY ? INFINITY : l * M_LOG2E_F;
        row_delta[i] = row < seq_q ? delta[delta_base + (ulong)row] : 0.0f;
    }
}

static inline float dot4(float4 a, float4 b, float acc)
{
    return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, acc))));
}

/* Whether some pair of the block (rows q0 .. q0 + BLOCK_M - 1, keys k0 .. k0 + BLOCK_N - 1) is hidden by the
 * mask or has its key past seq_kv: only such blocks test elements. */
static inline bool block_has_edge(int q0, int k0, int seq_kv, int diag)
{
    bool edge = k0 + BLOCK_N > seq_kv;
#if WINDOW_RIGHT >= 0
    edge = edge || k0 + BLOCK_N - 1 > q0 + diag + WINDOW_RIGHT;
#endif
#if WINDOW_LEFT >= 0
    edge = edge || k0 < q0 + BLOCK_M - 1 + diag - WINDOW_LEFT;
#endif
    return edge;
}

static inline bool pair_visible(int row, int key, int seq_kv, int diag)
{
    bool visible = key < seq_kv;
#if MASKED
    visible = visible && mask_visible(row, key, diag);
#endif
    return visible;
}

#include "backward_dot.h"  /* flash_backward_dot, work-groups of WG */

/* Launched as (ceil(seq_kv / BLOCK_N) * WG, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_tiled_dkdv(__global const storage_t *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
                               __global const storage_t *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,
                               __global const storage_t *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,
                               __global const storage_t *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                               __global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                               __global const float *delta,
                               __global storage_t *d_k, ulong dk_off, ulong dk_sb, ulong dk_ss, ulong dk_sh,
                               __global storage_t *d_v, ulong dv_off, ulong dv_sb, ulong dv_ss, ulong dv_sh,
                               int seq_q, int seq_kv, int group, float scale_log2, float scale,
                               __global const float *alibi, ulong alibi_off)
{
    __local float k_tile[BLOCK_N * PITCH] __attribute__((aligned(16)));
    __local float v_tile[BLOCK_N * PITCH_V] __attribute__((aligned(16)));
    __local float q_tile[BLOCK_M * PITCH] __attribute__((aligned(16)));
    __local float do_tile[BLOCK_M * PITCH_V] __attribute__((aligned(16)));
    __local float p_tile[BLOCK_M * PITCH_N] __attribute__((aligned(16)));   /* P [row][key] */
    __local float ds_tile[BLOCK_M * PITCH_N] __attribute__((aligned(16)));  /* dS [row][key] */
    __local float row_lse2[BLOCK_M];
    __local float row_delta[BLOCK_M];

    const int lid = (int)get_local_id(0);
    int ty, tx;
    tile_coordinates(lid, &ty, &tx);
    const int key0 = ty * R;  /* this work-item's first key in the block */
    const int k0 = (int)get_group_id(0) * BLOCK_N;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int heads_q = (int)get_num_groups(1) * group;
    const int diag = seq_kv - seq_q;

    load_tile(k_tile, BLOCK_N, k, k_off + (ulong)b * k_sb + (ulong)hk * k_sh, k_ss, k0, seq_kv, lid, WG);
    load_tile_v(v_tile, BLOCK_N, v, v_off + (ulong)b * v_sb + (ulong)hk * v_sh, v_ss, k0, seq_kv, lid, WG);

    float4 dk[R][CD4], dv[R][CD4V];
#pragma unroll
    for (int kk = 0; kk < R; kk++)
#pragma unroll
        for (int c = 0; c < CD4_MAX; c++) {
            if (c < CD4)
                dk[kk][c] = (float4)(0.0f);
            if (c < CD4V)
                dv[kk][c] = (float4)(0.0f);
        }

    /* The query blocks that see some key of this block (the mask trims both ends). */
    const int q_begin = mask_row_begin(k0, seq_q, seq_kv) / BLOCK_M * BLOCK_M;
    const int q_end = mask_row_end(k0, BLOCK_N, seq_q, seq_kv);

    for (int g = 0; g < group; g++) {  /* fixed order: the GQA sum is the same every run */
        const int h = hk * group + g;
        const float alibi2 = HEAD_ALIBI2(h);
        const ulong q_base = q_off + (ulong)b * q_sb + (ulong)h * q_sh;
        const ulong do_base = do_off + (ulong)b * do_sb + (ulong)h * do_sh;
        const ulong lse_base = l_off + (ulong)b * l_sb + (ulong)h * l_sh;
        const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q;
        for (int q0 = q_begin; q0 < q_end; q0 += BLOCK_M) {
            barrier(CLK_LOCAL_MEM_FENCE);  /* the previous block's tiles are no longer read */
            load_tile(q_tile, BLOCK_M, q, q_base, q_ss, q0, seq_q, lid, WG);
            load_tile_v(do_tile, BLOCK_M, d_o, do_base, do_ss, q0, seq_q, lid, WG);
            load_row_terms(row_lse2, row_delta, lse, lse_base, l_ss, delta, delta_base, q0, seq_q, lid, WG);
            barrier(CLK_LOCAL_MEM_FENCE);

            /* Sᵀ and dPᵀ micro-tiles: keys key0 + kk, rows tx + 16 j (one product at a time: fewer live
             * registers). */
            float s[R][CM], dp[R][CM];
#pragma unroll
            for (int kk = 0; kk < R; kk++)
#pragma unroll
                for (int j = 0; j < CM; j++)
                    s[kk][j] = dp[kk][j] = 0.0f;
#pragma unroll 4
            for (int e4 = 0; e4 < D4; e4++) {
                float4 kv[R], qv[CM];
#pragma unroll
                for (int kk = 0; kk < R; kk++)
                    kv[kk] = vload4(0, k_tile + (key0 + kk) * PITCH + 4 * e4);
#pragma unroll
                for (int j = 0; j < CM; j++)
                    qv[j] = vload4(0, q_tile + (tx + 16 * j) * PITCH + 4 * e4);
#pragma unroll
                for (int kk = 0; kk < R; kk++)
#pragma unroll
                    for (int j = 0; j < CM; j++)
                        s[kk][j] = dot4(kv[kk], qv[j], s[kk][j]);
            }
#pragma unroll 4
            for (int e4 = 0; e4 < D4V; e4++) {
                float4 vv[R], dov[CM];
#pragma unroll
                for (int kk = 0; kk < R; kk++)
                    vv[kk] = vload4(0, v_tile + (key0 + kk) * PITCH_V + 4 * e4);
#pragma unroll
                for (int j = 0; j < CM; j++)
                    dov[j] = vload4(0, do_tile + (tx + 16 * j) * PITCH_V + 4 * e4);
#pragma unroll
                for (int kk = 0; kk < R; kk++)
#pragma unroll
                    for (int j = 0; j < CM; j++)
                        dp[kk][j] = dot4(vv[kk], dov[j], dp[kk][j]);
            }

            /* P and dS = P (dP - D), into local memory as [row][key]: a float4 of 4 keys per row. */
            const bool edge = block_has_edge(q0, k0, seq_kv, diag);
#pragma unroll
            for (int j = 0; j < CM; j++) {
                const int i = tx + 16 * j;
                const float lse2 = row_lse2[i], d_row = row_delta[i];
                float p[R], ds[R];
#pragma unroll
                for (int kk = 0; kk < R; kk++) {
                    float slope = 1.0f;  /* of the softcap, where there is one */
                    const float lse2_biased = SCORE_LSE2(lse2, alibi2, q0 + i, k0 + key0 + kk, diag);
                    p[kk] = SCORE_P(s[kk][j], scale_log2, lse2_biased, slope);
                    if (edge && !pair_visible(q0 + i, k0 + key0 + kk, seq_kv, diag))
                        p[kk] = 0.0f;
                    ds[kk] = p[kk] * (dp[kk][j] - d_row) * slope;
                }
                vstore4((float4)(p[0], p[1], p[2], p[3]), 0, p_tile + i * PITCH_N + key0);
                vstore4((float4)(ds[0], ds[1], ds[2], ds[3]), 0, ds_tile + i * PITCH_N + key0);
            }
            barrier(CLK_LOCAL_MEM_FENCE);

            /* dV += Pᵀ dO, dK += dSᵀ Q (scaled once at the end). Rows past seq_q have P = dS = 0. */
#pragma unroll 4
            for (int i = 0; i < BLOCK_M; i++) {
                const float4 p4 = vload4(0, p_tile + i * PITCH_N + key0);
                const float4 ds4 = vload4(0, ds_tile + i * PITCH_N + key0);
                const float p[R] = {p4.x, p4.y, p4.z, p4.w}, ds[R] = {ds4.x, ds4.y, ds4.z, ds4.w};
#pragma unroll
                for (int c = 0; c < CD4_MAX; c++) {  /* with HEAD_DIM_V = HEAD_DIM both tests are one */
                    const int c4 = tx + 16 * c;
                    if (c < CD4V && (D4V % 16 == 0 || c4 < D4V)) {
                        const float4 dov = vload4(0, do_tile + i * PITCH_V + 4 * c4);
#pragma unroll
                        for (int kk = 0; kk < R; kk++)
                            dv[kk][c] = fma((float4)(p[kk]), dov, dv[kk][c]);
                    }
                    if (c < CD4 && (D4 % 16 == 0 || c4 < D4)) {
                        const float4 qv = vload4(0, q_tile + i * PITCH + 4 * c4);
#pragma unroll
                        for (int kk = 0; kk < R; kk++)
                            dk[kk][c] = fma((float4)(ds[kk]), qv, dk[kk][c]);
                    }
                }
            }
        }
    }

    const ulong dk_base = dk_off + (ulong)b * dk_sb + (ulong)hk * dk_sh;
    const ulong dv_base = dv_off + (ulong)b * dv_sb + (ulong)hk * dv_sh;
#pragma unroll
    for (int kk = 0; kk < R; kk++) {
        const int key = k0 + key0 + kk;
        if (key >= seq_kv)
            break;
#pragma unroll
        for (int c = 0; c < CD4_MAX; c++) {
            const int c4 = tx + 16 * c;
            if (c < CD4 && (D4 % 16 == 0 || c4 < D4)) {
                const float4 out_k = dk[kk][c] * scale;
                const ulong dst_k = dk_base + (ulong)key * dk_ss + 4 * c4;
                STORE(d_k, dst_k, out_k.x);
                STORE(d_k, dst_k + 1, out_k.y);
                STORE(d_k, dst_k + 2, out_k.z);
                STORE(d_k, dst_k + 3, out_k.w);
            }
            if (c < CD4V && (D4V % 16 == 0 || c4 < D4V)) {
                const float4 out_v = dv[kk][c];
                const ulong dst_v = dv_base + (ulong)key * dv_ss + 4 * c4;
                STORE(d_v, dst_v, out_v.x);
                STORE(d_v, dst_v + 1, out_v.y);
                STORE(d_v, dst_v + 2, out_v.z);
                STORE(d_v, dst_v + 3, out_v.w);
            }
        }
    }
}

/* Launched as (ceil(seq_q / BLOCK_M) * WG_DQ, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG_DQ, 1, 1)))
void flash_backward_tiled_dq(__global const storage_t *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
                             __global const storage_t *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,
                             __global const storage_t *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,
                             __global const storage_t *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                             __global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                             __global const float *delta,
                             __global storage_t *d_q, ulong dq_off, ulong dq_sb, ulong dq_ss, ulong dq_sh,
                             int seq_q, int seq_kv, int group, float scale_log2, float scale,
                               __global const float *alibi, ulong alibi_off)
{
    __local float q_tile[BLOCK_M * PITCH] __attribute__((aligned(16)));
    __local float do_tile[BLOCK_M * PITCH_V] __attribute__((aligned(16)));
    __local float k_tile[BLOCK_N * PITCH] __attribute__((aligned(16)));
    __local float v_tile[BLOCK_N * PITCH_V] __attribute__((aligned(16)));
    __local float ds_tile[BLOCK_N * PITCH_M] __attribute__((aligned(16)));  /* dSᵀ [key][row] */
    __local float row_lse2[BLOCK_M];
    __local float row_delta[BLOCK_M];

    const int lid = (int)get_local_id(0);
    int ty, tx;
    tile_coordinates(lid, &ty, &tx);
    const int row0 = ty * R;  /* this work-item's first row in the block */
    int qb, h, b;
    block_coordinates(WINDOW_RIGHT >= 0, 0, &qb, &h, &b);
    const int q0 = qb * BLOCK_M;
    const int hk = h / group;
    const int heads_q = (int)get_num_groups(1);
    const int diag = seq_kv - seq_q;
    const float alibi2 = HEAD_ALIBI2(h);

    load_tile(q_tile, BLOCK_M, q, q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, q0, seq_q, lid, WG_DQ);
    load_tile_v(do_tile, BLOCK_M, d_o, do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, q0, seq_q, lid, WG_DQ);
    load_row_terms(row_lse2, row_delta, lse, l_off + (ulong)b * l_sb + (ulong)h * l_sh, l_ss, delta,
                   ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q, q0, seq_q, lid, WG_DQ);
    /* The rows' lse2 and D are read from local memory where they are used, as in flash_backward_tiled_dkdv,
     * not copied once into a private array before the key-block loop: Intel's CPU compiler (oneAPI OpenCL
     * 2026.2) gave each work-item another work-item's copy inside the loop (dQ wrong, 0 in a partial
     * block), although the kernel is valid (Oclgrind reports nothing, -cl-opt-disable is right). The first
     * barrier of the loop orders the writes of load_row_terms before these reads. */

    float4 acc[R][CD4];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int c = 0; c < CD4; c++)
            acc[i][c] = (float4)(0.0f);

    const ulong k_base = k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    const ulong v_base = v_off + (ulong)b * v_sb + (ulong)hk * v_sh;
    const int kv_end = mask_key_end(q0, BLOCK_M, seq_q, seq_kv);
    for (int k0 = mask_key_begin(q0, seq_q, seq_kv) / BLOCK_N * BLOCK_N; k0 < kv_end; k0 += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the previous block's tiles are no longer read */
        load_tile(k_tile, BLOCK_N, k, k_base, k_ss, k0, seq_kv, lid, WG_DQ);
        load_tile_v(v_tile, BLOCK_N, v, v_base, v_ss, k0, seq_kv, lid, WG_DQ);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* S and dP micro-tiles: rows row0 + i, keys tx + 16 j. */
        float s[R][CN], dp[R][CN];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int j = 0; j < CN; j++)
                s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
        for (int e4 = 0; e4 < D4; e4++) {
            float4 qv[R], kv[CN];
#pragma unroll
            for (int i = 0; i < R; i++)
                qv[i] = vload4(0, q_tile + (row0 + i) * PITCH + 4 * e4);
#pragma unroll
            for (int j = 0; j < CN; j++)
                kv[j] = vload4(0, k_tile + (tx + 16 * j) * PITCH + 4 * e4);
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int j = 0; j < CN; j++)
                    s[i][j] = dot4(qv[i], kv[j], s[i][j]);
        }
#pragma unroll 4
        for (int e4 = 0; e4 < D4V; e4++) {
            float4 dov[R], vv[CN];
#pragma unroll
            for (int i = 0; i < R; i++)
                dov[i] = vload4(0, do_tile + (row0 + i) * PITCH_V + 4 * e4);
#pragma unroll
            for (int j = 0; j < CN; j++)
                vv[j] = vload4(0, v_tile + (tx + 16 * j) * PITCH_V + 4 * e4);
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int j = 0; j < CN; j++)
                    dp[i][j] = dot4(dov[i], vv[j], dp[i][j]);
        }

        /* dS = P (dP - D), into local memory as [key][row]: a float4 of 4 rows per key. */
        const bool edge = block_has_edge(q0, k0, seq_kv, diag);
#pragma unroll
        for (int j = 0; j < CN; j++) {
            const int key = tx + 16 * j;
            float ds[R];
#pragma unroll
            for (int i = 0; i < R; i++) {
                float slope = 1.0f;  /* of the softcap, where there is one */
                float p = SCORE_P(s[i][j], scale_log2, SCORE_LSE2(row_lse2[row0 + i], alibi2, q0 + row0 + i, k0 + key, diag),
                                  slope);
                if (edge && !pair_visible(q0 + row0 + i, k0 + key, seq_kv, diag))
                    p = 0.0f;
                ds[i] = p * (dp[i][j] - row_delta[row0 + i]) * slope;
            }
            vstore4((float4)(ds[0], ds[1], ds[2], ds[3]), 0, ds_tile + key * PITCH_M + row0);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* dQ += dS K (scaled once at the end). Hidden keys have dS = 0 and keys past seq_kv K = 0. */
#pragma unroll 4
        for (int j = 0; j < BLOCK_N; j++) {
            const float4 ds4 = vload4(0, ds_tile + j * PITCH_M + row0);
            const float ds[R] = {ds4.x, ds4.y, ds4.z, ds4.w};
#pragma unroll
            for (int c = 0; c < CD4; c++) {
                const int c4 = tx + 16 * c;
                if (D4 % 16 == 0 || c4 < D4) {
                    const float4 kv = vload4(0, k_tile + j * PITCH + 4 * c4);
#pragma unroll
                    for (int i = 0; i < R; i++)
                        acc[i][c] = fma((float4)(ds[i]), kv, acc[i][c]);
                }
            }
        }
    }

    const ulong dq_base = dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh;
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int row = q0 + row0 + i;
        if (row >= seq_q)
            break;
#pragma unroll
        for (int c = 0; c < CD4; c++) {
            const int c4 = tx + 16 * c;
            if (D4 % 16 == 0 || c4 < D4) {
                const float4 out = acc[i][c] * scale;
                const ulong dst = dq_base + (ulong)row * dq_ss + 4 * c4;
                STORE(d_q, dst, out.x);
                STORE(d_q, dst + 1, out.y);
                STORE(d_q, dst + 2, out.z);
                STORE(d_q, dst + 3, out.w);
            }
        }
    }
}
