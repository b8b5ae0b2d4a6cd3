/*
 * flash_forward.cl: exact attention forward, portable OpenCL C 1.2.
 *
 * One work-group owns BLOCK_M query rows of one (batch, head). It keeps its Q
 * block in local memory, streams K and V through local memory BLOCK_N keys
 * at a time, and folds each block of scores into three running values per
 * row: the running max m, the running sum of exponentials l and the
 * unnormalised output acc (rescaled by exp(m_old - m_new) when m grows).
 * It divides acc by l once at the end and writes LSE = m + log l.
 *
 * The work-group is a TM x TN grid of work-items. Work-item (tm, tn) owns the
 * query rows i = tm + TM*r and, inside a block, the keys j = tn + TN*c and the
 * output columns tn + TN*c: strided ownership, so any block size works
 * (down to 1, which the tests use to force the rescale).
 *
 * Scores are kept in base 2: Q is pre-multiplied by scale*log2(e), so
 * exp(scale*s - m) becomes exp2(s2 - m2). No finite-math flags are used: the
 * running max starts at -INFINITY and fully masked rows are handled
 * explicitly, so they give O = 0 and LSE = -inf, never NaN.
 *
 * Every tunable has a default here so the file compiles standalone; the host
 * passes the chosen values with -D. Keep the local-memory footprint formula
 * in src/tile.c in step with the arrays declared below.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64          /* d, exact (1..256) */
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM  /* V's and O's d (attn.head_dim_v), exact (1..256) */
#endif
#ifndef BLOCK_M
#define BLOCK_M 32           /* query rows per work-group */
#endif
#ifndef BLOCK_N
#define BLOCK_N 32           /* keys per streamed K/V block */
#endif
#ifndef TM
#define TM 16                /* work-group rows */
#endif
#ifndef TN
#define TN 16                /* work-group columns */
#endif

#define WG (TM * TN)
#define RM ((BLOCK_M + TM - 1) / TM)      /* query rows per work-item */
#define CN ((BLOCK_N + TN - 1) / TN)      /* keys per work-item per block */
#define CD ((HEAD_DIM_V + TN - 1) / TN)   /* output columns per work-item */
#define LDQK (HEAD_DIM | 1)               /* odd row pitch: no bank conflicts across rows */

#include "storage.h"   /* DTYPE (default 0 = f32), storage_t, LOAD, STORE */
#include "e4m3.h"      /* LOAD_KV: K and V as stored, or an E4M3 cache's bytes (KV_E4M3) */
#include "block_order.h"
#include "mask.h"      /* CAUSAL, WINDOW_LEFT / WINDOW_RIGHT: which keys a row sees */
#include "score_mod.h" /* SOFTCAP2: logit softcapping */
#include "varlen.h"    /* VARLEN: packed sequences of different lengths */
#include "split.h"     /* SPLIT: split-KV partials, merged by flash_forward_combine */

#include "forward_args.h"

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_forward(FORWARD_ARGS(storage_t))
{
    __local float q_tile[BLOCK_M * LDQK];
    __local float k_tile[BLOCK_N * LDQK];
    __local float v_tile[BLOCK_N * HEAD_DIM_V];
    __local float p_tile[BLOCK_M * BLOCK_N];
    __local float row_part[BLOCK_M * TN];  /* per-row partials: block max, then l */

    const int lid = (int)get_local_id(0);
    const int tm = lid / TN;
    const int tn = lid % TN;
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
    const int diag = seq_kv - seq_q;   /* bottom-right causal alignment */
    const float slope2 = HEAD_ALIBI2(h);

    const ulong q_base = q_off + (ulong)b * q_sb + (ulong)start_q * q_ss + (ulong)h * q_sh;
    const ulong k_base = k_off + KV_BATCH(k_sb) + (ulong)start_k * k_ss + (ulong)hk * k_sh;
    const ulong v_base = v_off + KV_BATCH(v_sb) + (ulong)start_k * v_ss + (ulong)hk * v_sh;
    const ulong o_base = o_off + (ulong)b * o_sb + (ulong)start_q * o_ss + (ulong)h * o_sh;

    for (int idx = lid; idx < BLOCK_M * HEAD_DIM; idx += WG) {
        const int i = idx / HEAD_DIM, c = idx % HEAD_DIM;
        const int row = q0 + i;
        q_tile[i * LDQK + c] = row < seq_q ? LOAD(q, q_base + (ulong)row * q_ss + c) * scale_log2 : 0.0f;
    }

    float m[RM], l[RM], acc[RM][CD];
    for (int r = 0; r < RM; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int c = 0; c < CD; c++)
            acc[r][c] = 0.0f;
    }

    /* A group past its sequence's rows (varlen) streams no keys and stores nothing; it still reaches
     * every barrier, as the whole group must. */
    int kv_end = q0 < seq_q ? mask_key_end(q0, BLOCK_M, seq_q, seq_kv) : 0;
    int kv_begin = mask_key_begin(q0, seq_q, seq_kv);
#if SPLIT
    split_keys(split, n_splits, &kv_begin, &kv_end);
#endif

    for (int kb = kv_begin; kb < kv_end; kb += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* previous block's tiles are no longer read */
        for (int idx = lid; idx < BLOCK_N * HEAD_DIM; idx += WG) {
            const int j = idx / HEAD_DIM, c = idx % HEAD_DIM;
            const int key = kb + j;
            k_tile[j * LDQK + c] = key < seq_kv ? LOAD_KV(k, k_base + KV_ROW(key, k_sb, k_ss) + c) : 0.0f;
        }
        for (int idx = lid; idx < BLOCK_N * HEAD_DIM_V; idx += WG) {
            const int j = idx / HEAD_DIM_V, c = idx % HEAD_DIM_V;
            const int key = kb + j;
            v_tile[j * HEAD_DIM_V + c] = key < seq_kv ? LOAD_KV(v, v_base + KV_ROW(key, v_sb, v_ss) + c) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* This block's scores, masked to -inf where a key is absent or hidden. */
        float s[RM][CN];
        for (int r = 0; r < RM; r++) {
            const int i = tm + TM * r;
            float block_max = -INFINITY;
            for (int c = 0; c < CN; c++) {
                const int j = tn + TN * c;
                const int key = kb + j;
                bool visible = i < BLOCK_M && j < BLOCK_N && key < seq_kv;
#if MASKED
                visible = visible && mask_visible(q0 + i, key, diag);
#endif
                float dot = 0.0f;
                if (visible) {
                    for (int e = 0; e < HEAD_DIM; e++)
                        dot = fma(q_tile[i * LDQK + e], k_tile[j * LDQK + e], dot);
                }
                s[r][c] = visible ? SCORE_BIAS(SCORE_CAP(dot), slope2, q0 + i, key, diag) : -INFINITY;
                block_max = fmax(block_max, s[r][c]);
            }
            if (i < BLOCK_M)
                row_part[i * TN + tn] = block_max;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Online softmax: new running max, rescale old totals, P into local. */
        for (int r = 0; r < RM; r++) {
            const int i = tm + TM * r;
            if (i >= BLOCK_M)
                continue;
            float m_new = m[r];
            for (int t = 0; t < TN; t++)
                m_new = fmax(m_new, row_part[i * TN + t]);
            /* A row that has seen no visible key keeps m = -inf: nothing to
             * rescale (acc and l are 0) and every p is exp2(-inf) = 0. */
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = exp2(m[r] - m_ref);
            float l_part = 0.0f;
            for (int c = 0; c < CN; c++) {
                const int j = tn + TN * c;
                const float p = exp2(s[r][c] - m_ref);
                if (j < BLOCK_N)
                    p_tile[i * BLOCK_N + j] = p;
                l_part += p;
            }
            l[r] = l[r] * alpha + l_part;
            for (int c = 0; c < CD; c++)
                acc[r][c] *= alpha;
            m[r] = m_new;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* acc += P · V for this block. */
        const int n_keys = min(BLOCK_N, kv_end - kb);
        for (int j = 0; j < n_keys; j++) {
            float vj[CD];
            for (int c = 0; c < CD; c++) {
                const int col = tn + TN * c;
                vj[c] = col < HEAD_DIM_V ? v_tile[j * HEAD_DIM_V + col] : 0.0f;
            }
            for (int r = 0; r < RM; r++) {
                const int i = tm + TM * r;
                if (i >= BLOCK_M)
                    continue;
                const float p = p_tile[i * BLOCK_N + j];
                for (int c = 0; c < CD; c++)
                    acc[r][c] = fma(p, vj[c], acc[r][c]);
            }
        }
    }

    /* Each work-item summed l over its own keys; add the TN partials of a row. */
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < RM; r++) {
        const int i = tm + TM * r;
        if (i < BLOCK_M)
            row_part[i * TN + tn] = l[r];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int r = 0; r < RM; r++) {
        const int i = tm + TM * r;
        const int row = q0 + i;
        if (i >= BLOCK_M || row >= seq_q)
            continue;
        float l_row = 0.0f;
        for (int t = 0; t < TN; t++)
            l_row += row_part[i * TN + t];
        float lse_row;
        float inv_l = row_finish(m[r], l_row, HEAD_SINK(h), &lse_row);
#if KV_E4M3
        inv_l *= v_descale;  /* an E4M3 cache's V is its bytes times this (split partials too: the merge is linear) */
#endif
        for (int c = 0; c < CD; c++) {
            const int col = tn + TN * c;
            if (col < HEAD_DIM_V) {
#if SPLIT
                part[split_part(split, b, h, row, rows_grid, get_num_groups(1)) + (ulong)col] = acc[r][c] * inv_l;
#else
                STORE(o, o_base + (ulong)row * o_ss + col, acc[r][c] * inv_l);
#endif
            }
        }
#if SPLIT
        if (tn == 0)
            part[split_part(split, b, h, row, rows_grid, get_num_groups(1)) + OUT_DIM] = lse_row;
#else
        if (has_lse && tn == 0)
            lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + row) * l_ss] = lse_row;
#endif
    }
}

#include "split_combine.h"
