/*
 * flash_backward_tf32.cl: the backward pass for f32 storage on NVIDIA tensor
 * cores (sm_80+) with TF32 operands (PASSES 1) or 3xTF32 (PASSES 3), f32
 * accumulation (nv_tf32.h). Opt-in only (FLASHCL_PRECISION_TF32 / _TF32X3):
 * exact f32 stays on the FMA kernels.
 *
 * Same three steps, arguments and results contract as flash_backward.cl
 * (src/backward.c enqueues them in order), and the structure of
 * flash_backward_mma.cl (its f16/bf16 twin): flash_backward_dot (D_i =
 * dO_i.O_i, backward_dot.h), flash_backward_tf32_dkdv, flash_backward_tf32_dq.
 *
 * flash_backward_tf32_dkdv: one work-group of WARPS warps per BLOCK_N keys
 * of one (kv head, batch). K and V stay in local memory; warp w owns keys
 * [16 KEY_TILES w, 16 KEY_TILES (w + 1)) of the block and keeps their dK and
 * dV as mma accumulators. It walks the group's query heads in order and,
 * per head, the BLOCK_M-row blocks of Q and dO that can see its keys
 * (double-buffered with cp.async, with their rows' LSE and D). Per block,
 * in chunks of Q_CHUNK queries, keys are the mma's rows:
 *     Sᵀ = K Qᵀ, dPᵀ = V dOᵀ           K, V as A; Q, dO as B
 *     Pᵀ = exp2(scale_log2 Sᵀ - lse2)  (0 where hidden), dSᵀ = Pᵀ ∘ (dPᵀ - D)
 *     dV += Pᵀ dO, dK += dSᵀ Q          Pᵀ, dSᵀ: the accumulators as A
 *                                       (nv_tf32.h's k order); dO, Q as B
 * flash_backward_tf32_dq: one work-group per BLOCK_M query rows of one
 * (head, batch); warp w owns 16 ROW_TILES rows. Q and dO stay, K and V
 * blocks of BLOCK_N keys stream through two buffers. Per block, in chunks of
 * K_CHUNK keys: S = Q Kᵀ, dP = dO Vᵀ, P, dS = P ∘ (dP - D), dQ += dS K (dS
 * the accumulators as A, K as B).
 *
 * No atomics: every dQ, dK, dV element is summed by one thread in a fixed
 * order, so the results are the same bits every run. Causal masking is
 * bottom-right (query i sees key j iff j <= i + seq_kv - seq_q); a row whose
 * LSE is -inf, or past seq_q, gets lse2 = +inf, so its P is exactly 0 (dQ = 0
 * for a row that sees no key). Keys past seq_kv load as zero rows: masked in
 * dQ, and their own dK/dV rows are never stored; a key no row sees runs no
 * block and gets zeros.
 *
 * Local tiles are f32 [row][PITCH], PITCH = HEAD_DIM + 8 (≡ 8 or 24 mod 32
 * for HEAD_DIM a multiple of 16), with column c of row r stored at column
 * c ^ (8 (r / 4 % 2)). Each tile is read two ways (ldmatrix is b16, so plain
 * local loads): as A or as the B of the first products, 8-byte loads of
 * columns 2t, 2t+1 in rows g (16 lanes a phase: rows g = 0..3 or 4..7, one
 * swizzle, banks 8g + 2t distinct by the pitch), and as the B of the second
 * products, 4-byte loads of column g in rows 2t and 2t+1 (rows 0, 2, 4, 6
 * start at banks 0, 16, 0, 16 by the pitch; the swizzle moves rows 4 and 6
 * by 8 columns: 32 distinct banks). Copies are cp.async 16-byte chunks (the
 * swizzle keeps chunks whole), so rows must start on 16 bytes.
 *
 * -DNV_EMULATE=1 runs it anywhere (PoCL in CI) on cl/nv_emulate.h, whose
 * lane exchanges are work-group barriers: every work-item reaches every mma
 * together. The loops' bounds are the work-group's; the causal skips of
 * tiles past the diagonal are per warp natively and per work-group when
 * emulated (the tiles a warp would skip are then computed and masked to 0).
 * Keep it so. Keep backward_tf32_local_bytes() in src/kernels.c in step with
 * the __local arrays below.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BLOCK_M
#define BLOCK_M 64           /* query rows per block */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64           /* keys per block */
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef WG
#define WG (32 * WARPS)
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef PASSES
#define PASSES 1             /* 1: TF32; 3: 3xTF32 */
#endif

#if HEAD_DIM % 16 != 0 || HEAD_DIM > 128 || HEAD_DIM < 16
#error "HEAD_DIM must be a multiple of 16, at most 128"
#endif
#if WARPS < 1 || WARPS > 8 || WG != 32 * WARPS
#error "WARPS must be 1..8 and WG 32 * WARPS"
#endif
#if BLOCK_N % (16 * WARPS) != 0 || BLOCK_M % (16 * WARPS) != 0
#error "BLOCK_M and BLOCK_N must be multiples of 16 * WARPS (each warp owns whole 16-row tiles)"
#endif

#define PITCH (HEAD_DIM + 8)
#define CHUNKS (HEAD_DIM / 4)                      /* 16-byte chunks a row */
#define KSTEPS (HEAD_DIM / 8)                      /* k-steps of the products over d */
#define D_TILES (HEAD_DIM / 8)                     /* 8-column n-tiles of dQ, dK, dV */
#define KEY_TILES (BLOCK_N / (16 * WARPS))         /* dkdv: 16-key tiles per warp */
#define ROW_TILES (BLOCK_M / (16 * WARPS))         /* dq: 16-row tiles per warp */
/* Queries (dkdv) and keys (dq) per inner step: 32 where the accumulators leave room (d <= 64). */
#define Q_CHUNK (HEAD_DIM <= 64 && BLOCK_M % 32 == 0 ? 32 : 16)
#define K_CHUNK (HEAD_DIM <= 64 && BLOCK_N % 32 == 0 ? 32 : 16)

#if PASSES == 3
#define EXP2 exp2            /* P to f32's accuracy where the products have it */
#else
#define EXP2 exp2_ftz
#endif

#define DTYPE 0              /* f32 storage: the dot step's loads */
#include "storage.h"
#include "backward_dot.h"    /* step 0: flash_backward_dot */
#include "nv_async.h"        /* cp.async; nv_emulate.h with -DNV_EMULATE=1 */
#include "block_order.h"
#include "nv_tf32.h"         /* mma m16n8k8 .tf32, the operand split */

/* Where column `col` of row `row` lives in a tile (the file's comment says why). */
static inline int tile_index(int row, int col)
{
    return row * PITCH + (col ^ ((row & 4) << 1));
}

/* rows x HEAD_DIM f32 of a [seq, d] slice into a tile: cp.async where the row exists, zeros past the end
 * (plain stores; visible after the barrier). */
static inline void load_tile(__local float *tile, int rows, __global const float *base, ulong row_stride,
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

/* The A operand of rows `row`, `row` + 8 at columns col, col + 1 (k = t, t + 4). */
static inline void load_a(operand *a, __local const float *tile, int row, int col)
{
    const float2 upper = vload2(0, tile + tile_index(row, col));
    const float2 lower = vload2(0, tile + tile_index(row + 8, col));
    a[0] = to_operand(upper.x);
    a[1] = to_operand(lower.x);
    a[2] = to_operand(upper.y);
    a[3] = to_operand(lower.y);
}

/* An accumulator tile as the A operand of a product contracting over its 8 columns. */
static inline void accumulator_as_a(operand *a, const float *c)
{
    a[0] = to_operand(c[0]);
    a[1] = to_operand(c[2]);
    a[2] = to_operand(c[1]);
    a[3] = to_operand(c[3]);
}

/* A row's LSE in base 2, +inf for a row that is absent or sees no key (P = 0 there). */
static inline float row_lse2(__global const float *lse, ulong index, int row, int seq_q)
{
    const float l = row < seq_q ? lse[index] : -INFINITY;
    return l > -INFINITY ? l * M_LOG2E_F : INFINITY;
}

/* Launched as (ceil(seq_kv / BLOCK_N) * WG, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_tf32_dkdv(__global const float *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
                              __global const float *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,
                              __global const float *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,
                              __global const float *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                              __global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                              __global const float *delta,
                              __global float *d_k, ulong dk_off, ulong dk_sb, ulong dk_ss, ulong dk_sh,
                              __global float *d_v, ulong dv_off, ulong dv_sb, ulong dv_ss, ulong dv_sh,
                              int seq_q, int seq_kv, int group, float scale_log2, float scale)
{
    __local float k_tile[BLOCK_N * PITCH] __attribute__((aligned(16)));
    __local float v_tile[BLOCK_N * PITCH] __attribute__((aligned(16)));
    __local float q_tiles[2 * BLOCK_M * PITCH] __attribute__((aligned(16)));   /* two buffers */
    __local float do_tiles[2 * BLOCK_M * PITCH] __attribute__((aligned(16)));
    __local float lse_rows[2 * BLOCK_M];    /* base 2, +inf: hidden row */
    __local float delta_rows[2 * BLOCK_M];
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int k0 = (int)get_group_id(0) * BLOCK_N;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int heads_q = (int)get_num_groups(1) * group;
    const int diag = seq_kv - seq_q;

    __global const float *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const float *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;

    /* The first query row that sees key k0 (causal: row >= k0 - diag); blocks before it see none of
     * this block's keys and are skipped. */
    const int first_row = CAUSAL ? max(0, k0 - diag) : 0;
    const int q_begin = first_row / BLOCK_M * BLOCK_M;
    const int q_blocks = q_begin < seq_q ? (seq_q - q_begin + BLOCK_M - 1) / BLOCK_M : 0;
    const int total = group * q_blocks;  /* (query head, query block) pairs, head-major: a fixed order */

    load_tile(k_tile, BLOCK_N, k_base, k_ss, k0, seq_kv, tid);
    load_tile(v_tile, BLOCK_N, v_base, v_ss, k0, seq_kv, tid);

    float dk[KEY_TILES][D_TILES][4], dv[KEY_TILES][D_TILES][4];
#pragma unroll
    for (int kt = 0; kt < KEY_TILES; kt++)
#pragma unroll
        for (int n = 0; n < D_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dk[kt][n][e] = dv[kt][n][e] = 0.0f;

    for (int it = -1, stage = 1; it < total; it++, stage ^= 1) {
        /* Block it+1 goes into buffer stage ^ 1 while block it (buffer stage) is computed. The
         * barrier publishes the landed block and frees the buffer the block before it used. */
        if (it >= 0) {
            COPY_ASYNC_WAIT(0);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (it + 1 < total) {
            const int nh = (it + 1) / q_blocks, nq0 = q_begin + (it + 1) % q_blocks * BLOCK_M;
            const int h = hk * group + nh;
            __local float *qt = q_tiles + (stage ^ 1) * BLOCK_M * PITCH;
            __local float *ot = do_tiles + (stage ^ 1) * BLOCK_M * PITCH;
            load_tile(qt, BLOCK_M, q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, nq0, seq_q, tid);
            load_tile(ot, BLOCK_M, d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, nq0, seq_q, tid);
            const ulong lse_base = l_off + (ulong)b * l_sb + (ulong)h * l_sh;
            const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q;
            for (int i = tid; i < BLOCK_M; i += WG) {
                const int row = nq0 + i;
                lse_rows[(stage ^ 1) * BLOCK_M + i] = row_lse2(lse, lse_base + (ulong)row * l_ss, row, seq_q);
                delta_rows[(stage ^ 1) * BLOCK_M + i] = row < seq_q ? delta[delta_base + (ulong)row] : 0.0f;
            }
        }
        copy_async_commit();
        if (it < 0)
            continue;

        const int q0 = q_begin + it % q_blocks * BLOCK_M;
        __local const float *q_tile = q_tiles + stage * BLOCK_M * PITCH;
        __local const float *do_tile = do_tiles + stage * BLOCK_M * PITCH;
        __local const float *lse2 = lse_rows + stage * BLOCK_M;
        __local const float *drow = delta_rows + stage * BLOCK_M;

NV_UNROLL
        for (int kt = 0; kt < KEY_TILES; kt++) {
            const int key0 = (warp * KEY_TILES + kt) * 16;  /* the tile's first key, in the block */
            for (int qc = 0; qc < BLOCK_M; qc += Q_CHUNK) {
#if CAUSAL
                /* Every key of the tile (emulated: of the block) after every query of the chunk. */
#if NV_EMULATE
                if (k0 > q0 + qc + Q_CHUNK - 1 + diag)
#else
                if (k0 + key0 > q0 + qc + Q_CHUNK - 1 + diag)
#endif
                    continue;
                const bool edge = k0 + key0 + 15 > q0 + qc + diag;
#endif
                float s[Q_CHUNK / 8][4], dp[Q_CHUNK / 8][4];
#pragma unroll
                for (int n = 0; n < Q_CHUNK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        s[n][e] = dp[n][e] = 0.0f;
                /* Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for 16 keys x Q_CHUNK queries. */
NV_UNROLL
                for (int kk = 0; kk < KSTEPS; kk++) {
                    const int col = kk * 8 + 2 * t;
                    operand ka[4], va[4];
                    load_a(ka, k_tile, key0 + g, col);
                    load_a(va, v_tile, key0 + g, col);
NV_UNROLL
                    for (int n = 0; n < Q_CHUNK / 8; n++) {
                        const float2 qv = vload2(0, q_tile + tile_index(qc + n * 8 + g, col));
                        const float2 ov = vload2(0, do_tile + tile_index(qc + n * 8 + g, col));
                        mma_split(s[n], ka, to_operand(qv.x), to_operand(qv.y) NV_SCRATCH_ARG);
                        mma_split(dp[n], va, to_operand(ov.x), to_operand(ov.y) NV_SCRATCH_ARG);
                    }
                }
                /* Pᵀ and dSᵀ: this thread holds keys key0 + g (+8), queries qc + 8n + 2t (+1). */
#pragma unroll
                for (int n = 0; n < Q_CHUNK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int qi = qc + n * 8 + 2 * t + (e & 1);
                        float p = EXP2(fma(s[n][e], scale_log2, -lse2[qi]));
#if CAUSAL
                        if (edge)
                            p = k0 + key0 + g + 8 * (e >> 1) <= q0 + qi + diag ? p : 0.0f;
#endif
                        s[n][e] = p;
                        dp[n][e] = p * (dp[n][e] - drow[qi]);
                    }
                /* dV += Pᵀ dO, dK += dSᵀ Q: dO and Q [query][d] as B (k = query: rows 2t, 2t + 1). */
NV_UNROLL
                for (int kc = 0; kc < Q_CHUNK / 8; kc++) {
                    operand pa[4], dsa[4];
                    accumulator_as_a(pa, s[kc]);
                    accumulator_as_a(dsa, dp[kc]);
                    const int row = qc + kc * 8 + 2 * t;
NV_UNROLL
                    for (int n = 0; n < D_TILES; n++) {
                        const int col = n * 8 + g;
                        const operand o0 = to_operand(do_tile[tile_index(row, col)]);
                        const operand o1 = to_operand(do_tile[tile_index(row + 1, col)]);
                        const operand q0v = to_operand(q_tile[tile_index(row, col)]);
                        const operand q1v = to_operand(q_tile[tile_index(row + 1, col)]);
                        mma_split(dv[kt][n], pa, o0, o1 NV_SCRATCH_ARG);
                        mma_split(dk[kt][n], dsa, q0v, q1v NV_SCRATCH_ARG);
                    }
                }
            }
        }
    }
    COPY_ASYNC_WAIT(0);

    __global float *dk_base = d_k + dk_off + (ulong)b * dk_sb + (ulong)hk * dk_sh;
    __global float *dv_base = d_v + dv_off + (ulong)b * dv_sb + (ulong)hk * dv_sh;
#pragma unroll
    for (int kt = 0; kt < KEY_TILES; kt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = k0 + (warp * KEY_TILES + kt) * 16 + g + 8 * r;
            if (key >= seq_kv)
                continue;
            __global float *dk_dst = dk_base + (ulong)key * dk_ss + 2 * t;
            __global float *dv_dst = dv_base + (ulong)key * dv_ss + 2 * t;
#pragma unroll
            for (int n = 0; n < D_TILES; n++) {
                vstore2((float2)(dk[kt][n][2 * r] * scale, dk[kt][n][2 * r + 1] * scale), 0, dk_dst + n * 8);
                vstore2((float2)(dv[kt][n][2 * r], dv[kt][n][2 * r + 1]), 0, dv_dst + n * 8);
            }
        }
}

/* Launched as (ceil(seq_q / BLOCK_M) * WG, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_tf32_dq(__global const float *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
                            __global const float *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,
                            __global const float *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,
                            __global const float *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                            __global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                            __global const float *delta,
                            __global float *d_q, ulong dq_off, ulong dq_sb, ulong dq_ss, ulong dq_sh,
                            int seq_q, int seq_kv, int group, float scale_log2, float scale)
{
    __local float q_tile[BLOCK_M * PITCH] __attribute__((aligned(16)));
    __local float do_tile[BLOCK_M * PITCH] __attribute__((aligned(16)));
    __local float k_tiles[2 * BLOCK_N * PITCH] __attribute__((aligned(16)));  /* two buffers */
    __local float v_tiles[2 * BLOCK_N * PITCH] __attribute__((aligned(16)));
    NV_SCRATCH_DECL;

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    int qb, h, b;
    block_coordinates(CAUSAL, 1, &qb, &h, &b);  /* heaviest query blocks first when causal */
    const int hk = h / group;
    const int heads_q = (int)get_num_groups(1);
    const int q0 = qb * BLOCK_M;
    const int diag = seq_kv - seq_q;

    __global const float *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const float *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;
    const int kv_end = block_key_end(CAUSAL, q0, BLOCK_M, seq_q, seq_kv);

    load_tile(q_tile, BLOCK_M, q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, q0, seq_q, tid);
    load_tile(do_tile, BLOCK_M, d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, q0, seq_q, tid);
    if (kv_end > 0) {
        load_tile(k_tiles, BLOCK_N, k_base, k_ss, 0, seq_kv, tid);
        load_tile(v_tiles, BLOCK_N, v_base, v_ss, 0, seq_kv, tid);
    }
    copy_async_commit();

    /* This thread's rows: warp_row0 + 16 mt + g (+8). */
    const int warp_row0 = q0 + warp * 16 * ROW_TILES;
    float lse2[ROW_TILES][2], drow[ROW_TILES][2];
    {
        const ulong lse_base = l_off + (ulong)b * l_sb + (ulong)h * l_sh;
        const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q;
#pragma unroll
        for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = warp_row0 + 16 * mt + g + 8 * r;
                lse2[mt][r] = row_lse2(lse, lse_base + (ulong)row * l_ss, row, seq_q);
                drow[mt][r] = row < seq_q ? delta[delta_base + (ulong)row] : 0.0f;
            }
    }

    float dq[ROW_TILES][D_TILES][4];
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int n = 0; n < D_TILES; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dq[mt][n][e] = 0.0f;

    const int warp_local0 = warp * 16 * ROW_TILES;  /* this warp's first row in the tiles */
#if NV_EMULATE
    const int last_row = q0 + BLOCK_M - 1;  /* the causal skip per work-group (the file's comment) */
#else
    const int last_row = warp_row0 + 16 * ROW_TILES - 1;
#endif

    for (int kb = 0, stage = 0; kb < kv_end; kb += BLOCK_N, stage ^= 1) {
        COPY_ASYNC_WAIT(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + BLOCK_N < kv_end) {
            load_tile(k_tiles + (stage ^ 1) * BLOCK_N * PITCH, BLOCK_N, k_base, k_ss, kb + BLOCK_N, seq_kv, tid);
            load_tile(v_tiles + (stage ^ 1) * BLOCK_N * PITCH, BLOCK_N, v_base, v_ss, kb + BLOCK_N, seq_kv, tid);
        }
        copy_async_commit();
        __local const float *k_tile = k_tiles + stage * BLOCK_N * PITCH;
        __local const float *v_tile = v_tiles + stage * BLOCK_N * PITCH;

        for (int kc0 = 0; kc0 < BLOCK_N; kc0 += K_CHUNK) {
            const int key_first = kb + kc0;
            if (key_first >= seq_kv)
                break;
#if CAUSAL
            /* Every key of the chunk after every row of the warp (emulated: of the block). */
            if (key_first > last_row + diag)
                break;
            const bool edge = key_first + K_CHUNK > seq_kv || key_first + K_CHUNK - 1 > warp_row0 + diag;
#else
            const bool edge = key_first + K_CHUNK > seq_kv;
#endif
            float s[ROW_TILES][K_CHUNK / 8][4], dp[ROW_TILES][K_CHUNK / 8][4];
#pragma unroll
            for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
                for (int n = 0; n < K_CHUNK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        s[mt][n][e] = dp[mt][n][e] = 0.0f;
            /* S = Q Kᵀ, dP = dO Vᵀ. */
NV_UNROLL
            for (int kk = 0; kk < KSTEPS; kk++) {
                const int col = kk * 8 + 2 * t;
                operand qa[ROW_TILES][4], oa[ROW_TILES][4];
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    load_a(qa[mt], q_tile, warp_local0 + 16 * mt + g, col);
                    load_a(oa[mt], do_tile, warp_local0 + 16 * mt + g, col);
                }
NV_UNROLL
                for (int n = 0; n < K_CHUNK / 8; n++) {
                    const float2 kv = vload2(0, k_tile + tile_index(kc0 + n * 8 + g, col));
                    const float2 vv = vload2(0, v_tile + tile_index(kc0 + n * 8 + g, col));
                    const operand kb0 = to_operand(kv.x), kb1 = to_operand(kv.y);
                    const operand vb0 = to_operand(vv.x), vb1 = to_operand(vv.y);
NV_UNROLL
                    for (int mt = 0; mt < ROW_TILES; mt++) {
                        mma_split(s[mt][n], qa[mt], kb0, kb1 NV_SCRATCH_ARG);
                        mma_split(dp[mt][n], oa[mt], vb0, vb1 NV_SCRATCH_ARG);
                    }
                }
            }
            /* P, dS: this thread holds rows warp_row0 + 16 mt + g (+8), keys key_first + 8n + 2t (+1). */
#pragma unroll
            for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
                for (int n = 0; n < K_CHUNK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = EXP2(fma(s[mt][n][e], scale_log2, -lse2[mt][e >> 1]));
                        if (edge) {
                            const int key = key_first + n * 8 + 2 * t + (e & 1);
                            bool visible = key < seq_kv;
#if CAUSAL
                            visible = visible && key <= warp_row0 + 16 * mt + g + 8 * (e >> 1) + diag;
#endif
                            p = visible ? p : 0.0f;
                        }
                        dp[mt][n][e] = p * (dp[mt][n][e] - drow[mt][e >> 1]);
                    }
            /* dQ += dS K: K [key][d] as B (k = key: rows 2t, 2t + 1). */
NV_UNROLL
            for (int kc = 0; kc < K_CHUNK / 8; kc++) {
                operand dsa[ROW_TILES][4];
#pragma unroll
                for (int mt = 0; mt < ROW_TILES; mt++)
                    accumulator_as_a(dsa[mt], dp[mt][kc]);
                const int row = kc0 + kc * 8 + 2 * t;
NV_UNROLL
                for (int n = 0; n < D_TILES; n++) {
                    const operand k0v = to_operand(k_tile[tile_index(row, n * 8 + g)]);
                    const operand k1v = to_operand(k_tile[tile_index(row + 1, n * 8 + g)]);
NV_UNROLL
                    for (int mt = 0; mt < ROW_TILES; mt++)
                        mma_split(dq[mt][n], dsa[mt], k0v, k1v NV_SCRATCH_ARG);
                }
            }
        }
    }
    COPY_ASYNC_WAIT(0);

    __global float *dq_base = d_q + dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh;
#pragma unroll
    for (int mt = 0; mt < ROW_TILES; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = warp_row0 + 16 * mt + g + 8 * r;
            if (row >= seq_q)
                continue;
            __global float *dst = dq_base + (ulong)row * dq_ss + 2 * t;
#pragma unroll
            for (int n = 0; n < D_TILES; n++)
                vstore2((float2)(dq[mt][n][2 * r] * scale, dq[mt][n][2 * r + 1] * scale), 0, dst + n * 8);
        }
}
