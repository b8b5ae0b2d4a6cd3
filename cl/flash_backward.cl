/*
 * flash_backward.cl: exact attention backward, portable OpenCL C 1.2.
 *
 * Three kernels, enqueued in this order by src/backward.c:
 *   flash_backward_dot   D_i = sum_c dO_ic O_ic, into an f32 workspace [batch, heads_q, seq_q];
 *   flash_backward_dkdv  one work-group per (K/V block, kv head, batch): dK, dV of its keys,
 *                        summed over the group's query heads in a fixed order;
 *   flash_backward_dq    one work-group per (Q block, query head, batch): dQ of its rows.
 * Both block kernels recompute P_ij = exp(scale q_i.k_j - LSE_i) from Q, K and
 * the forward's LSE, so no N x N matrix exists. dQ gets its own pass (two more
 * block products) instead of float atomics: every output element is summed by
 * one work-item in a fixed order, so the result is the same bits every run.
 *
 * Scores are in base 2 (scale_log2 = scale * log2(e), LSE times log2(e)).
 * A key is visible to query row i when it exists and the mask shows it
 * (cl/mask.h: causal, bottom-right aligned, or a sliding window); a row whose
 * LSE is -inf sees no key. Invisible pairs have P = dS = 0.
 *
 * Work-items own tile elements by linear index (idx = lid + WG * t), so any
 * HEAD_DIM (1..256) and any block size down to 1 works. HEAD_DIM_V (default
 * HEAD_DIM) is V's, O's, dO's and dV's: Q, K, dQ, dK have HEAD_DIM columns. Every tunable has a
 * default so the file compiles standalone. Keep backward_local_bytes() in
 * src/backward.c in step with the __local arrays below.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64          /* d, exact (1..256) */
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM  /* dv: V's and O's (1..256) */
#endif
#ifndef BLOCK_M
#define BLOCK_M 32           /* query rows per block */
#endif
#ifndef BLOCK_N
#define BLOCK_N 32           /* keys per block */
#endif
#ifndef WG
#define WG 256               /* work-items per work-group */
#endif

#define LD (HEAD_DIM | 1)                               /* odd row pitch: no bank conflicts across rows */
#define LDV (HEAD_DIM_V | 1)                            /* of dO's and V's tiles */
#define WIDE_DIM (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V)
#define ACC_N ((BLOCK_N * HEAD_DIM + WG - 1) / WG)      /* dK elements per work-item */
#define ACC_NV ((BLOCK_N * HEAD_DIM_V + WG - 1) / WG)   /* dV elements per work-item */
#define ACC_M ((BLOCK_M * HEAD_DIM + WG - 1) / WG)      /* dQ elements per work-item */

#include "storage.h"   /* DTYPE (default 0 = f32), storage_t, LOAD, STORE */
#include "mask.h"      /* CAUSAL, WINDOW_LEFT / WINDOW_RIGHT: which keys a row sees */
#include "score_mod.h" /* SOFTCAP2: logit softcapping */

/* rows [first, first + n_rows) of one (batch, head) of a view, `width` columns, into a tile of pitch
 * `pitch`; 0 past `limit` */
static void load_rows_of(__local float *tile, int width, int pitch, __global const storage_t *src, ulong base,
                         ulong row_stride, int first, int n_rows, int limit, int lid)
{
    for (int idx = lid; idx < n_rows * width; idx += WG) {
        const int r = idx / width, c = idx % width;
        const int row = first + r;
        tile[r * pitch + c] = row < limit ? LOAD(src, base + (ulong)row * row_stride + c) : 0.0f;
    }
}
/* Q's and K's rows (HEAD_DIM), dO's and V's (HEAD_DIM_V). Every argument named: OpenCL C 1.2 has no variadic
 * macros (s6.9), and NVIDIA's compiler refuses them. */
#define load_rows(tile, src, base, stride, first, n, limit, lid) \
    load_rows_of(tile, HEAD_DIM, LD, src, base, stride, first, n, limit, lid)
#define load_rows_v(tile, src, base, stride, first, n, limit, lid) \
    load_rows_of(tile, HEAD_DIM_V, LDV, src, base, stride, first, n, limit, lid)

/* The query block's LSE (base 2; -inf past seq_q, which hides the row) and D. */
static void load_row_terms(__local float *row_lse2, __local float *row_delta, __global const float *lse,
                           ulong lse_base, ulong lse_ss, __global const float *delta, ulong delta_base,
                           int q0, int seq_q, int lid)
{
    for (int i = lid; i < BLOCK_M; i += WG) {
        const int row = q0 + i;
        row_lse2[i] = row < seq_q ? lse[lse_base + (ulong)row * lse_ss] * M_LOG2E_F : -INFINITY;
        row_delta[i] = row < seq_q ? delta[delta_base + (ulong)row] : 0.0f;
    }
}

/* P and dS of one (query block, key block) pair: P_ij = exp2(scale_log2 q_i.k_j - lse2_i) where
 * key j is visible to row i, else 0 (capped and biased by the head's ALiBi slope alibi2: score_mod.h); dS_ij = P_ij (dO_i.v_j - D_i). The dQ pass passes ds_tile as
 * p_tile too (it needs no P): each element's P is written before its dS by the same work-item. */
static void block_p_ds(__local const float *q_tile, __local const float *do_tile, __local const float *k_tile,
                       __local const float *v_tile, __local const float *row_lse2, __local const float *row_delta,
                       int q0, int k0, int seq_q, int seq_kv, float scale_log2, float alibi2,
                       __local float *p_tile, __local float *ds_tile, int lid)
{
    const int diag = seq_kv - seq_q;
    for (int idx = lid; idx < BLOCK_M * BLOCK_N; idx += WG) {
        const int i = idx / BLOCK_N, j = idx % BLOCK_N;
        const int row = q0 + i, key = k0 + j;
        bool visible = row < seq_q && key < seq_kv && row_lse2[i] > -INFINITY;
#if MASKED
        visible = visible && mask_visible(row, key, diag);
#endif
        float p = 0.0f, ds = 0.0f;
        if (visible) {
            float s = 0.0f, dp = 0.0f;
            /* One loop over both dots (each guard a constant true where the head dims match): as two loops, Intel's
             * CPU compiler (oneAPI OpenCL 2026.2) gave rows of a windowed dQ exact zeros. */
            for (int e = 0; e < WIDE_DIM; e++) {
                if (e < HEAD_DIM)
                    s = fma(q_tile[i * LD + e], k_tile[j * LD + e], s);
                if (e < HEAD_DIM_V)
                    dp = fma(do_tile[i * LDV + e], v_tile[j * LDV + e], dp);
            }
            float slope = 1.0f;  /* of the softcap, where there is one */
            p = SCORE_P(s, scale_log2, SCORE_LSE2(row_lse2[i], alibi2, row, key, diag), slope);
            ds = p * (dp - row_delta[i]) * slope;
        }
        p_tile[idx] = p;
        ds_tile[idx] = ds;
    }
}

#include "backward_dot.h"  /* flash_backward_dot */

/* Launched as (ceil(seq_kv / BLOCK_N) * WG, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_dkdv(__global const storage_t *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
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
    __local float q_tile[BLOCK_M * LD];
    __local float do_tile[BLOCK_M * LDV];
    __local float k_tile[BLOCK_N * LD];
    __local float v_tile[BLOCK_N * LDV];
    __local float p_tile[BLOCK_M * BLOCK_N];
    __local float ds_tile[BLOCK_M * BLOCK_N];
    __local float row_lse2[BLOCK_M];
    __local float row_delta[BLOCK_M];

    const int lid = (int)get_local_id(0);
    const int k0 = (int)get_group_id(0) * BLOCK_N;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int heads_q = (int)get_num_groups(1) * group;

    load_rows(k_tile, k, k_off + (ulong)b * k_sb + (ulong)hk * k_sh, k_ss, k0, BLOCK_N, seq_kv, lid);
    load_rows_v(v_tile, v, v_off + (ulong)b * v_sb + (ulong)hk * v_sh, v_ss, k0, BLOCK_N, seq_kv, lid);

    float dk_acc[ACC_N], dv_acc[ACC_NV];
    for (int t = 0; t < ACC_N; t++)
        dk_acc[t] = 0.0f;
    for (int t = 0; t < ACC_NV; t++)
        dv_acc[t] = 0.0f;

    /* The query rows that see some key of this block (the mask trims both ends); blocks outside are
     * skipped. Keys no row sees run no block at all and get exact zeros. */
    const int q_begin = mask_row_begin(k0, seq_q, seq_kv) / BLOCK_M * BLOCK_M;
    const int q_end = mask_row_end(k0, BLOCK_N, seq_q, seq_kv);

    for (int g = 0; g < group; g++) {  /* fixed order: the GQA sum is the same every run */
        const int h = hk * group + g;
        const ulong q_base = q_off + (ulong)b * q_sb + (ulong)h * q_sh;
        const ulong do_base = do_off + (ulong)b * do_sb + (ulong)h * do_sh;
        const ulong lse_base = l_off + (ulong)b * l_sb + (ulong)h * l_sh;
        const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q;
        for (int q0 = q_begin; q0 < q_end; q0 += BLOCK_M) {
            barrier(CLK_LOCAL_MEM_FENCE);  /* the previous block's tiles are no longer read */
            load_rows(q_tile, q, q_base, q_ss, q0, BLOCK_M, seq_q, lid);
            load_rows_v(do_tile, d_o, do_base, do_ss, q0, BLOCK_M, seq_q, lid);
            load_row_terms(row_lse2, row_delta, lse, lse_base, l_ss, delta, delta_base, q0, seq_q, lid);
            barrier(CLK_LOCAL_MEM_FENCE);
            block_p_ds(q_tile, do_tile, k_tile, v_tile, row_lse2, row_delta, q0, k0, seq_q, seq_kv, scale_log2,
                       HEAD_ALIBI2(h), p_tile, ds_tile, lid);
            barrier(CLK_LOCAL_MEM_FENCE);
            /* dV_j += sum_i P_ij dO_i; dK_j += sum_i dS_ij Q_i (scaled once at the end). */
            for (int t = 0; t < ACC_NV; t++) {
                const int idx = lid + WG * t;
                if (idx >= BLOCK_N * HEAD_DIM_V)
                    break;
                const int j = idx / HEAD_DIM_V, c = idx % HEAD_DIM_V;
                float dv = dv_acc[t];
                for (int i = 0; i < BLOCK_M; i++)
                    dv = fma(p_tile[i * BLOCK_N + j], do_tile[i * LDV + c], dv);
                dv_acc[t] = dv;
            }
            for (int t = 0; t < ACC_N; t++) {
                const int idx = lid + WG * t;
                if (idx >= BLOCK_N * HEAD_DIM)
                    break;
                const int j = idx / HEAD_DIM, c = idx % HEAD_DIM;
                float dk = dk_acc[t];
                for (int i = 0; i < BLOCK_M; i++)
                    dk = fma(ds_tile[i * BLOCK_N + j], q_tile[i * LD + c], dk);
                dk_acc[t] = dk;
            }
        }
    }

    const ulong dk_base = dk_off + (ulong)b * dk_sb + (ulong)hk * dk_sh;
    const ulong dv_base = dv_off + (ulong)b * dv_sb + (ulong)hk * dv_sh;
    for (int t = 0; t < ACC_N; t++) {
        const int idx = lid + WG * t;
        const int j = idx / HEAD_DIM, c = idx % HEAD_DIM;
        const int key = k0 + j;
        if (idx >= BLOCK_N * HEAD_DIM || key >= seq_kv)
            break;
        STORE(d_k, dk_base + (ulong)key * dk_ss + c, dk_acc[t] * scale);
    }
    for (int t = 0; t < ACC_NV; t++) {
        const int idx = lid + WG * t;
        const int j = idx / HEAD_DIM_V, c = idx % HEAD_DIM_V;
        const int key = k0 + j;
        if (idx >= BLOCK_N * HEAD_DIM_V || key >= seq_kv)
            break;
        STORE(d_v, dv_base + (ulong)key * dv_ss + c, dv_acc[t]);
    }
}

/* Launched as (ceil(seq_q / BLOCK_M) * WG, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_dq(__global const storage_t *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
                       __global const storage_t *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,
                       __global const storage_t *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,
                       __global const storage_t *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                       __global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                       __global const float *delta,
                       __global storage_t *d_q, ulong dq_off, ulong dq_sb, ulong dq_ss, ulong dq_sh,
                       int seq_q, int seq_kv, int group, float scale_log2, float scale,
                         __global const float *alibi, ulong alibi_off)
{
    __local float q_tile[BLOCK_M * LD];
    __local float do_tile[BLOCK_M * LDV];
    __local float k_tile[BLOCK_N * LD];
    __local float v_tile[BLOCK_N * LDV];
    __local float ds_tile[BLOCK_M * BLOCK_N];
    __local float row_lse2[BLOCK_M];
    __local float row_delta[BLOCK_M];

    const int lid = (int)get_local_id(0);
    const int q0 = (int)get_group_id(0) * BLOCK_M;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const int hk = h / group;
    const int heads_q = (int)get_num_groups(1);

    load_rows(q_tile, q, q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, q0, BLOCK_M, seq_q, lid);
    load_rows_v(do_tile, d_o, do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, q0, BLOCK_M, seq_q, lid);
    load_row_terms(row_lse2, row_delta, lse, l_off + (ulong)b * l_sb + (ulong)h * l_sh, l_ss, delta,
                   ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q, q0, seq_q, lid);

    float dq_acc[ACC_M];
    for (int t = 0; t < ACC_M; t++)
        dq_acc[t] = 0.0f;

    const ulong k_base = k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    const ulong v_base = v_off + (ulong)b * v_sb + (ulong)hk * v_sh;
    const int kv_end = mask_key_end(q0, BLOCK_M, seq_q, seq_kv);
    for (int k0 = mask_key_begin(q0, seq_q, seq_kv) / BLOCK_N * BLOCK_N; k0 < kv_end; k0 += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the previous block's tiles are no longer read */
        load_rows(k_tile, k, k_base, k_ss, k0, BLOCK_N, seq_kv, lid);
        load_rows_v(v_tile, v, v_base, v_ss, k0, BLOCK_N, seq_kv, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        block_p_ds(q_tile, do_tile, k_tile, v_tile, row_lse2, row_delta, q0, k0, seq_q, seq_kv, scale_log2,
                   HEAD_ALIBI2(h), ds_tile, ds_tile, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* dQ_i += sum_j dS_ij K_j (scaled once at the end). */
        for (int t = 0; t < ACC_M; t++) {
            const int idx = lid + WG * t;
            if (idx >= BLOCK_M * HEAD_DIM)
                break;
            const int i = idx / HEAD_DIM, c = idx % HEAD_DIM;
            float dq = dq_acc[t];
            for (int j = 0; j < BLOCK_N; j++)
                dq = fma(ds_tile[i * BLOCK_N + j], k_tile[j * LD + c], dq);
            dq_acc[t] = dq;
        }
    }

    const ulong dq_base = dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh;
    for (int t = 0; t < ACC_M; t++) {
        const int idx = lid + WG * t;
        const int i = idx / HEAD_DIM, c = idx % HEAD_DIM;
        const int row = q0 + i;
        if (idx >= BLOCK_M * HEAD_DIM || row >= seq_q)
            break;
        STORE(d_q, dq_base + (ulong)row * dq_ss + c, dq_acc[t] * scale);
    }
}
