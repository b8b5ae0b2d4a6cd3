/*
 * flash_forward_tiled.cl: exact attention forward for the FMA units, with
 * register micro-tiles. Portable OpenCL C 1.2 (no extensions); the default
 * for f32 (and for f16/bf16 where tensor cores are not used) when the head
 * dim is a multiple of 4 and the tile fits the device's local memory.
 *
 * Same algorithm and results contract as flash_forward.cl (which stays the
 * kernel for other head dims and for forced tiles). What differs is how the
 * work-items share the two products of a K/V block:
 *   S = QKᵀ  work-item (ty, tx) computes an RM x CN micro-tile of S: rows
 *            ty·RM .. ty·RM+RM-1 and keys tx, tx+16, ...; each step of the
 *            head dim loads RM + CN float4 from local memory for 4·RM·CN FMA.
 *   O += PV  the same work-item owns RM rows x float4 columns tx, tx+16, ...
 *            of O; per key it loads its rows of P (one float4)
 *            and its columns of V for 4·RM FMA per float4.
 * A group is 16·TY work-items, TY = BLOCK_M / 4 (RM = 4 rows each): 2·TY/4
 * warps; a warp covers 4 values of ty and 8 of tx, so a step's Q loads hit 4 addresses and its K loads 8
 * (one 128-byte wavefront each on NVIDIA hardware). Row pitches are
 * HEAD_DIM + 4 floats (and BLOCK_M + 4 for Pᵀ), so the eight K rows a warp
 * reads start on distinct banks.
 *
 * The row max of a block is shared through local memory (16 partials per
 * row); the row sum l is kept per work-item and added up once at the end,
 * since every work-item rescales by the same row max. Scores are in base 2
 * (Q pre-multiplied by scale·log2 e); rows that see no key give O = 0 and
 * LSE = -inf without NaN, as in flash_forward.cl.
 *
 * Keep forward_tiled_local_bytes in src/tile.c in step with the arrays below.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64          /* a multiple of 4, at most 256 */
#endif
#ifndef BLOCK_M
#define BLOCK_M 64           /* query rows per work-group: 4·TY */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64           /* keys per K/V block: 16·CN */
#endif

#define RM 4                              /* rows per work-item */
#define TY (BLOCK_M / RM)                 /* work-item rows of the group */
#define WG (16 * TY)
#define CN (BLOCK_N / 16)                 /* keys per work-item per block */
#define D4 (HEAD_DIM / 4)                 /* float4 columns of a row */
#define CD4 ((D4 + 15) / 16)              /* float4 columns of O per work-item */
#define PITCH (HEAD_DIM + 4)              /* Q, K, V tiles */
#define PITCH_P (BLOCK_M + 4)             /* Pᵀ tile: [key][row] */

#if HEAD_DIM % 4 != 0 || HEAD_DIM > 256
#error "HEAD_DIM must be a multiple of 4, at most 256"
#endif
#if BLOCK_M % 16 != 0 || BLOCK_N % 16 != 0 || BLOCK_M > 128 || BLOCK_N > 128
#error "BLOCK_M and BLOCK_N must be 16, 32, 48, ... 128"
#endif

#include "storage.h"   /* DTYPE (default 0 = f32), storage_t, LOAD, STORE */
#include "e4m3.h"      /* LOAD_KV: K and V as stored, or an E4M3 cache's bytes (KV_E4M3) */
#include "mask.h"      /* CAUSAL, WINDOW_LEFT / WINDOW_RIGHT: which keys a row sees */
#include "score_mod.h" /* SOFTCAP2: logit softcapping */
#include "varlen.h"    /* VARLEN: packed sequences of different lengths */
#include "split.h"     /* SPLIT: split-KV partials, merged by flash_forward_combine */
#include "block_order.h"

/* rows x HEAD_DIM of a [seq, d] slice into a tile of pitch PITCH (times
 * `mul`), zeros past the end of the sequence. */
static inline void load_tile(__local float *tile, int rows, __global const storage_t *src, ulong base,
                             ulong row_stride, int first_row, int seq, float mul, int lid, bool kv)
{
    for (int idx = lid; idx < rows * HEAD_DIM; idx += WG) {
        const int r = idx / HEAD_DIM, c = idx % HEAD_DIM;
        const int row = first_row + r;
        const ulong at = base + (ulong)row * row_stride + c;
        tile[r * PITCH + c] = row < seq ? (kv ? LOAD_KV(src, at) : LOAD(src, at)) * mul : 0.0f;
    }
}

#include "forward_args.h"

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_forward_tiled(FORWARD_ARGS(storage_t))
{
    __local float q_tile[BLOCK_M * PITCH] __attribute__((aligned(16)));
    __local float k_tile[BLOCK_N * PITCH] __attribute__((aligned(16)));
    __local float v_tile[BLOCK_N * PITCH] __attribute__((aligned(16)));
    __local float p_tile[BLOCK_N * PITCH_P] __attribute__((aligned(16)));  /* Pᵀ */
    __local float row_part[16 * BLOCK_M] __attribute__((aligned(16)));    /* [tx][row] partials */

    const int lid = (int)get_local_id(0);
    const int warp = lid >> 5, lane = lid & 31;
    const int ty = (warp >> 1) * 4 + (lane >> 3);   /* 0..TY-1 */
    const int tx = (warp & 1) * 8 + (lane & 7);     /* 0..15 */
    const int row0 = ty * RM;                       /* first of this work-item's rows in the block */
    int qb, h, b;
#if SPLIT
    int split;
    split_coordinates(WINDOW_RIGHT >= 0, n_splits, &qb, &split, &h, &b);
#else
    block_coordinates(WINDOW_RIGHT >= 0, 0, &qb, &h, &b);  /* heaviest query blocks first when causal */
#endif
    const int rows_grid = seq_q;  /* the grid's rows (the longest sequence's, varlen) */
    const int hk = h / group;
    const int q0 = qb * BLOCK_M;
    SEQUENCE_ROWS(b);  /* start_q, start_k; varlen: seq_q, seq_kv become this sequence's */
    const int diag = seq_kv - seq_q;
    const float slope2 = HEAD_ALIBI2(h);

    const ulong q_base = q_off + (ulong)b * q_sb + (ulong)start_q * q_ss + (ulong)h * q_sh;
    const ulong k_base = k_off + KV_BATCH(k_sb) + (ulong)start_k * k_ss + (ulong)hk * k_sh;
    const ulong v_base = v_off + KV_BATCH(v_sb) + (ulong)start_k * v_ss + (ulong)hk * v_sh;
    const ulong o_base = o_off + (ulong)b * o_sb + (ulong)start_q * o_ss + (ulong)h * o_sh;

    load_tile(q_tile, BLOCK_M, q, q_base, q_ss, q0, seq_q, scale_log2, lid, false);

    float m[RM], l[RM];
    float4 acc[RM][CD4];
#pragma unroll
    for (int i = 0; i < RM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < CD4; c++)
            acc[i][c] = (float4)(0.0f);
    }

    /* A group past its sequence's rows (varlen) streams no keys and stores nothing; it still reaches
     * every barrier, as the whole group must. */
    int kv_end = q0 < seq_q ? mask_key_end(q0, BLOCK_M, seq_q, seq_kv) : 0;
    int kv_begin = mask_key_begin(q0, seq_q, seq_kv);
#if SPLIT
    split_keys(split, n_splits, &kv_begin, &kv_end);
#endif

    for (int kb = kv_begin; kb < kv_end; kb += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the previous block's K, V and P are no longer read */
#if VARLEN == 3  /* rows scattered over pages */
        for (int idx = lid; idx < BLOCK_N * HEAD_DIM; idx += WG) {
            const int r = idx / HEAD_DIM, c = idx % HEAD_DIM, key = kb + r;
            k_tile[r * PITCH + c] = key < seq_kv ? LOAD_KV(k, k_base + KV_ROW(key, k_sb, k_ss) + c) : 0.0f;
            v_tile[r * PITCH + c] = key < seq_kv ? LOAD_KV(v, v_base + KV_ROW(key, v_sb, v_ss) + c) : 0.0f;
        }
#else
        load_tile(k_tile, BLOCK_N, k, k_base, k_ss, kb, seq_kv, 1.0f, lid, true);
        load_tile(v_tile, BLOCK_N, v, v_base, v_ss, kb, seq_kv, 1.0f, lid, true);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);

        /* S micro-tile: rows row0 + i, keys kb + tx + 16 j. */
        float s[RM][CN];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < CN; j++)
                s[i][j] = 0.0f;
#pragma unroll 4
        for (int e4 = 0; e4 < D4; e4++) {
            float4 qv[RM], kv[CN];
#pragma unroll
            for (int i = 0; i < RM; i++)
                qv[i] = vload4(0, q_tile + (row0 + i) * PITCH + 4 * e4);
#pragma unroll
            for (int j = 0; j < CN; j++)
                kv[j] = vload4(0, k_tile + (tx + 16 * j) * PITCH + 4 * e4);
#pragma unroll
            for (int i = 0; i < RM; i++)
#pragma unroll
                for (int j = 0; j < CN; j++)
                    s[i][j] = fma(qv[i].w, kv[j].w, fma(qv[i].z, kv[j].z,
                              fma(qv[i].y, kv[j].y, fma(qv[i].x, kv[j].x, s[i][j]))));
        }

        /* Masks only where a key may be absent or hidden from some row. */
        bool edge = kb + BLOCK_N > seq_kv;
#if WINDOW_RIGHT >= 0
        edge = edge || kb + BLOCK_N - 1 > q0 + diag + WINDOW_RIGHT;
#endif
#if WINDOW_LEFT >= 0
        edge = edge || kb < q0 + BLOCK_M - 1 + diag - WINDOW_LEFT;
#endif
#pragma unroll
        for (int i = 0; i < RM; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                const int key = kb + tx + 16 * j;
                s[i][j] = SCORE_BIAS(SCORE_CAP(s[i][j]), slope2, q0 + row0 + i, key, diag);
                if (edge) {
                    bool visible = key < seq_kv;
#if MASKED
                    visible = visible && mask_visible(q0 + row0 + i, key, diag);
#endif
                    s[i][j] = visible ? s[i][j] : -INFINITY;
                }
                mx = fmax(mx, s[i][j]);
            }
            row_part[tx * BLOCK_M + row0 + i] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Online softmax: the row's new max from the 16 partials, rescale,
         * Pᵀ into local memory. */
#pragma unroll
        for (int i = 0; i < RM; i++) {
            float m_new = m[i];
#pragma unroll
            for (int u = 0; u < 16; u++)
                m_new = fmax(m_new, row_part[u * BLOCK_M + row0 + i]);
            /* A row that has seen no visible key keeps m = -inf: nothing to
             * rescale (acc and l are 0) and every p is exp2(-inf) = 0. */
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = exp2(m[i] - m_ref);
            m[i] = m_new;
            float l_part = 0.0f;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                const float p = exp2(s[i][j] - m_ref);
                p_tile[(tx + 16 * j) * PITCH_P + row0 + i] = p;
                l_part += p;
            }
            l[i] = l[i] * alpha + l_part;
#pragma unroll
            for (int c = 0; c < CD4; c++)
                acc[i][c] *= alpha;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* acc += P·V. Keys past the end or hidden have p = 0 and V = 0. */
#pragma unroll 4
        for (int j = 0; j < BLOCK_N; j++) {
            const float4 p4 = vload4(0, p_tile + j * PITCH_P + row0);
            const float p[RM] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
            for (int c = 0; c < CD4; c++) {
                const int c4 = tx + 16 * c;
                if (D4 % 16 == 0 || c4 < D4) {
                    const float4 vv = vload4(0, v_tile + j * PITCH + 4 * c4);
#pragma unroll
                    for (int i = 0; i < RM; i++)
                        acc[i][c] = fma((float4)(p[i]), vv, acc[i][c]);
                }
            }
        }
    }

    /* Each work-item summed l over its own keys; add the 16 partials of a row. */
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < RM; i++)
        row_part[tx * BLOCK_M + row0 + i] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE);

#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int row = q0 + row0 + i;
        if (row >= seq_q)
            continue;
        float l_row = 0.0f;
#pragma unroll
        for (int u = 0; u < 16; u++)
            l_row += row_part[u * BLOCK_M + row0 + i];
        float lse_row;
        float inv_l = row_finish(m[i], l_row, HEAD_SINK(h), &lse_row);
#if KV_E4M3
        inv_l *= v_descale;  /* an E4M3 cache's V is its bytes times this (split partials too: the merge is linear) */
#endif
        const ulong dst = o_base + (ulong)row * o_ss;
#pragma unroll
        for (int c = 0; c < CD4; c++) {
            const int c4 = tx + 16 * c;
            if (D4 % 16 == 0 || c4 < D4) {
                const float4 out = acc[i][c] * inv_l;
#if SPLIT
                vstore4(out, 0, part + split_part(split, b, h, row, rows_grid, get_num_groups(1)) + 4 * c4);
#else
                STORE(o, dst + 4 * c4, out.x);
                STORE(o, dst + 4 * c4 + 1, out.y);
                STORE(o, dst + 4 * c4 + 2, out.z);
                STORE(o, dst + 4 * c4 + 3, out.w);
#endif
            }
        }
#if SPLIT
        if (tx == 0)
            part[split_part(split, b, h, row, rows_grid, get_num_groups(1)) + HEAD_DIM] = lse_row;
#else
        if (has_lse && tx == 0)
            lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + row) * l_ss] = lse_row;
#endif
    }
}

#include "split_combine.h"
