/*
 * flash_decode.cl: exact attention forward for few query rows against many
 * keys (decode, speculative decode, short chunks), portable OpenCL C 1.2.
 *
 * One work-group per (split, KV head, sequence). Its rows are every query
 * row of the KV head's group: the `group` query heads that share the KV
 * head times the seq_q query positions, ROWS_USED = group * seq_q of at
 * most ROWS. So each K/V block is read once per KV head, not once per
 * query head (packed GQA), and the bytes read are K and V once per call.
 * Where batch x KV heads cannot fill the device the keys are split across
 * work-groups (cl/split.h's partials, merged by flash_forward_combine).
 *
 * Per block of BLOCK_N keys (WG = SPK * BLOCK_N work-items, SPK a key):
 *   stage   K and V rows are copied to local memory as stored (f16/bf16
 *           stay 2 bytes), in 4-element chunks where the rows allow; with
 *           NV_ASYNC (NVIDIA sm_80+) by cp.async into the other of two
 *           buffers while this block computes, so loads stay in flight;
 *   S       the SPK work-items of a key each take every SPK-th chunk of
 *           its row and compute partial scores for all rows, Q read from
 *           local memory (every work-item the same address); the partials
 *           are added in a fixed order where they are read;
 *   max     the block's row max in two steps through local memory;
 *   P       the key's first work-item turns its scores into p = exp2(s - m)
 *           (base 2, Q pre-multiplied by scale·log2 e), keeps its share of l;
 *   PV      teams of TEAM work-items (TEAM 4-column chunks cover a row)
 *           take every NTEAMS-th key: acc[row] += p * V[key].
 * All work-items rescale by the same row max, so the teams' accumulators
 * and the work-items' l partials add up at the end in a fixed order:
 * no atomics, the same bits every run.
 *
 * KV_E4M3 1: K and V are an E4M3 cache (bytes, cl/e4m3.h), converted
 * exactly to Q's storage type as they are staged (so not by cp.async); K's
 * descale is in scale_log2 (the host's), V's (v_descale) multiplies O.
 *
 * A paged cache's block table is read once per key row (into local
 * memory), not once per chunk. Rows that see no key give O = 0 and
 * LSE = -inf, as the other kernels.
 * Keep decode_local_bytes in src/kernels.c in step with the arrays below.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 128        /* a multiple of 4, at most 256 */
#endif
#ifndef ROWS
#define ROWS 4              /* rows a work-group holds: 1, 2, 4, 8 or 16 */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64          /* keys per block */
#endif
#ifndef VEC_ROWS
#define VEC_ROWS 0          /* 1: every K/V row starts on 16 bytes (4-element chunk copies) */
#endif
#ifndef NV_ASYNC
#define NV_ASYNC 0          /* 1: NVIDIA sm_80+ (inline PTX): cp.async, K and V double-buffered */
#endif
#ifndef KV_E4M3
#define KV_E4M3 0           /* 1: K and V E4M3 bytes (an E4M3 KV cache), Q and O DTYPE */
#endif

#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM /* V's and O's columns (split.h's OUT_DIM), a multiple of 4, at most 256 */
#endif
#define D4 (HEAD_DIM / 4)                              /* 4-element chunks of a Q or K row */
#define DV4 (HEAD_DIM_V / 4)                           /* ... of a V or O row */
#define SPK 2                                          /* work-items a key in S (the host's workgroup: 2 x BLOCK_N) */
#define WG (SPK * BLOCK_N)
#define TEAM (DV4 >= 32 ? 32 : DV4 > 8 ? 16 : DV4 > 4 ? 8 : DV4 > 2 ? 4 : DV4 > 1 ? 2 : 1)
#define NTEAMS (WG / TEAM)
#define CPL ((DV4 + TEAM - 1) / TEAM)                  /* chunks a work-item owns in P·V */
#define PITCH (HEAD_DIM + 4)                           /* staged rows: consecutive rows on other banks */
#define PITCH_V (HEAD_DIM_V + 4)
#define MAX_PARTS 8                                    /* the row max's first step: 8 partials a row */
#define STAGES (NV_ASYNC ? 2 : 1)                      /* K/V buffers */

#if HEAD_DIM % 4 != 0 || HEAD_DIM > 256 || HEAD_DIM_V % 4 != 0 || HEAD_DIM_V > 256
#error "HEAD_DIM and HEAD_DIM_V must be multiples of 4, at most 256"
#endif
#if ROWS != 1 && ROWS != 2 && ROWS != 4 && ROWS != 8 && ROWS != 16
#error "ROWS must be 1, 2, 4, 8 or 16"
#endif
#if BLOCK_N % 32 != 0 || BLOCK_N > 256 || BLOCK_N % TEAM != 0
#error "BLOCK_N must be 32, 64, ... 256"
#endif
#if VARLEN == 3
#define PAGED 1             /* rows scattered over pages: their offsets looked up once a block */
#else
#define PAGED 0
#endif
#if NV_ASYNC && !VEC_ROWS
#error "NV_ASYNC copies 4-element chunks: it needs VEC_ROWS"
#endif
#if NV_ASYNC && KV_E4M3
#error "an E4M3 cache is converted as it is staged, not copied by cp.async"
#endif

#include "storage.h"   /* DTYPE (default 0 = f32), storage_t, LOAD, STORE */
#include "e4m3.h"      /* KV_E4M3: the cache's bytes as DTYPE */
#include "mask.h"      /* CAUSAL, WINDOW_LEFT / WINDOW_RIGHT: which keys a row sees */
#include "score_mod.h" /* SOFTCAP2: logit softcapping */
#include "varlen.h"    /* VARLEN: packed sequences, KV caches, pages */
#include "split.h"     /* SPLIT: split-KV partials, merged by flash_forward_combine */
#if NV_ASYNC
#include "nv_async.h"  /* cp.async */
#endif

#if VARLEN == 3  /* what KV_ROW reads of a paged cache */
#define VARLEN_PAGES_PARAMS , __global const int *pages, int page_size, int pages_per_seq, int num_pages
#define VARLEN_PAGES , pages, page_size, pages_per_seq, num_pages
#else
#define VARLEN_PAGES_PARAMS
#define VARLEN_PAGES
#endif

/* Staged rows keep the storage's bits: floats, or the 16-bit halves of f16 / bf16. */
#if DTYPE == 0
typedef float raw_t;
typedef float4 raw4_t;
#else
typedef ushort raw_t;
typedef ushort4 raw4_t;
#endif

/* Four staged elements as floats. */
static inline float4 staged4(__local const raw_t *p)
{
#if DTYPE == 0
    return vload4(0, p);
#elif DTYPE == 1
    return vload_half4(0, (__local const half *)p);
#else
    const ushort4 u = vload4(0, p);
    return as_float4(convert_uint4(u) << 16);
#endif
}

/* Element offset of a block's row r (key `key`) from the view's base: from
 * the block's row table when paged (page_rows), else key * ss. */
#if PAGED
#define ROW_AT(rows, r, key, ss) ((rows)[r])
#else
#define ROW_AT(rows, r, key, ss) ((ulong)(key) * (ss))
#endif

#if PAGED
/* The offsets of K's and V's rows key0 .. key0 + BLOCK_N - 1, one work-item a row: the block table
 * and its clamp read once per row (cl/varlen.h's KV_ROW). The caller puts a barrier after. */
static inline void page_rows(__local ulong *k_rows, __local ulong *v_rows, int key0, int seq_kv, ulong k_sb,
                             ulong k_ss, ulong v_sb, ulong v_ss, int b VARLEN_PAGES_PARAMS, int lid)
{
    if (lid < BLOCK_N) {
        const int key = clamp(key0 + lid, 0, max(seq_kv - 1, 0));  /* rows past the end are not read */
        k_rows[lid] = KV_ROW(key, k_sb, k_ss);
        v_rows[lid] = KV_ROW(key, v_sb, v_ss);
    }
}
#endif

#if KV_E4M3
/* An E4M3 byte as a staged element (Q's storage type). */
static inline raw_t e4m3_raw(uint x)
{
#if DTYPE == 0
    return e4m3_to_float(x);
#elif DTYPE == 1
    return (raw_t)e4m3_to_f16_bits(x);
#else
    return (raw_t)e4m3_to_bf16_bits(x);
#endif
}
#endif

/* Copies rows [key0, key0 + BLOCK_N) of K or V as stored (an E4M3 cache's
 * converted to Q's storage type) into `tile`, `dim` elements a row
 * (HEAD_DIM or HEAD_DIM_V) at pitch dim + 4; zeros past the sequence's end. */
static inline void stage_rows(__local raw_t *tile, __global const storage_t *src, ulong base,
                              __local const ulong *rows, ulong ss, int key0, int seq_kv, int lid, int dim)
{
    const int pitch = dim + 4;
#if KV_E4M3
    __global const uchar *bytes = (__global const uchar *)src;
#if VEC_ROWS  /* rows on 16 bytes: 4 bytes at a time */
    for (int idx = lid; idx < BLOCK_N * (dim / 4); idx += WG) {
        const int r = idx / (dim / 4), c4 = idx % (dim / 4), key = key0 + r;
        const uchar4 chunk = key < seq_kv ? vload4(0, bytes + base + ROW_AT(rows, r, key, ss) + 4 * c4) : (uchar4)(0);
        __local raw_t *dst = tile + r * pitch + 4 * c4;
        dst[0] = e4m3_raw(chunk.x);
        dst[1] = e4m3_raw(chunk.y);
        dst[2] = e4m3_raw(chunk.z);
        dst[3] = e4m3_raw(chunk.w);
    }
#else
    for (int idx = lid; idx < BLOCK_N * dim; idx += WG) {
        const int r = idx / dim, c = idx % dim, key = key0 + r;
        tile[r * pitch + c] = key < seq_kv ? e4m3_raw(bytes[base + ROW_AT(rows, r, key, ss) + c]) : (raw_t)0;
    }
#endif
#else
    __global const raw_t *raw = (__global const raw_t *)src;
#if VEC_ROWS
    for (int idx = lid; idx < BLOCK_N * (dim / 4); idx += WG) {
        const int r = idx / (dim / 4), c4 = idx % (dim / 4), key = key0 + r;
        raw4_t chunk = (raw4_t)(0);
        if (key < seq_kv)
            chunk = *(__global const raw4_t *)(raw + base + ROW_AT(rows, r, key, ss) + 4 * c4);
        *(__local raw4_t *)(tile + r * pitch + 4 * c4) = chunk;
    }
#else
    for (int idx = lid; idx < BLOCK_N * dim; idx += WG) {
        const int r = idx / dim, c = idx % dim, key = key0 + r;
        tile[r * pitch + c] = key < seq_kv ? raw[base + ROW_AT(rows, r, key, ss) + c] : (raw_t)0;
    }
#endif
#endif
}

/* Key j's (kb + j = key) score against row r: its SPK partials added in a
 * fixed order, or -inf where the key is past the end or hidden from the row
 * (row r: position r / group), biased by the row's head's ALiBi slope2. */
static inline float block_score(__local const float *p_tile, int j, int r, int key, int seq_kv, int rows_used,
                                int group, int diag, float slope2)
{
    float s = p_tile[j * ROWS + r];
#pragma unroll
    for (int part = 1; part < SPK; part++)
        s += p_tile[(part * BLOCK_N + j) * ROWS + r];
    bool visible = key < seq_kv && r < rows_used;
#if MASKED
    visible = visible && mask_visible(r / group, key, diag);
#endif
    return visible ? SCORE_BIAS(SCORE_CAP(s), slope2, r / group, key, diag) : -INFINITY;
}

#if NV_ASYNC
/* stage_rows by cp.async: starts the copies (zeros past the end), the caller commits and waits. */
static inline void stage_rows_async(__local raw_t *tile, __global const storage_t *src, ulong base,
                                    __local const ulong *rows, ulong ss, int key0, int seq_kv, int lid, int dim)
{
    __global const raw_t *raw = (__global const raw_t *)src;
    for (int idx = lid; idx < BLOCK_N * (dim / 4); idx += WG) {
        const int r = idx / (dim / 4), c4 = idx % (dim / 4), key = key0 + r;
        const bool inside = key < seq_kv;
        __global const raw_t *from = inside ? raw + base + ROW_AT(rows, r, key, ss) + 4 * c4 : raw;
        const uint address = local_address(tile + r * (dim + 4) + 4 * c4);
#if DTYPE == 0
        copy_async_zfill_16(address, from, inside ? 16u : 0u);
#else
        copy_async_zfill_8(address, from, inside ? 8u : 0u);
#endif
    }
}
#endif

#include "forward_args.h"

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_decode(FORWARD_ARGS(storage_t))
{
    __local raw_t k_tiles[STAGES * BLOCK_N * PITCH] __attribute__((aligned(16)));
    __local raw_t v_tiles[STAGES * BLOCK_N * PITCH_V] __attribute__((aligned(16)));
    __local float q_tile[ROWS * HEAD_DIM] __attribute__((aligned(16)));
    __local float p_tile[SPK * BLOCK_N * ROWS] __attribute__((aligned(16))); /* [part][key][row]: partial
                                                                                  scores, then P, then l */
    __local float row_part[ROWS * MAX_PARTS] __attribute__((aligned(16))); /* the max's partials; l's sums */
#if ALIBI
    __local float row_slope2[ROWS];  /* each row's head's ALiBi slope (base 2), read once, not at every score */
#define ROW_SLOPE2(r) row_slope2[r]
#else
#define ROW_SLOPE2(r) 0.0f
#endif
    /* After the last block, the V buffer holds the teams' accumulators, added (BLOCK_N * PITCH_V raw
     * elements are at least ROWS * HEAD_DIM_V floats for BLOCK_N >= 32). */
    __local float *acc_sum = (__local float *)v_tiles;
#if PAGED
    __local ulong k_rows[BLOCK_N], v_rows[BLOCK_N];  /* the block's row offsets */
#else
    __local const ulong *const k_rows = 0, *const v_rows = 0;  /* not read: rows are key * stride */
#endif

    const int lid = (int)get_local_id(0);
    const int team = lid / TEAM, lane = lid % TEAM;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
#if SPLIT
    const int split = (int)get_group_id(0);
#endif
    const int rows_grid = seq_q;  /* the grid's query positions (the longest sequence's, varlen) */
    SEQUENCE_ROWS(b);  /* start_q, start_k; varlen: seq_q, seq_kv become this sequence's */
    const int diag = seq_kv - seq_q;
    const int rows_used = group * seq_q;  /* row r: query head hk * group + r % group, position r / group */

    const ulong k_base = k_off + KV_BATCH(k_sb) + (ulong)start_k * k_ss + (ulong)hk * k_sh;
    const ulong v_base = v_off + KV_BATCH(v_sb) + (ulong)start_k * v_ss + (ulong)hk * v_sh;

    for (int idx = lid; idx < ROWS * HEAD_DIM; idx += WG) {
        const int r = idx / HEAD_DIM, c = idx % HEAD_DIM;
        const int h = hk * group + r % group, pos = r / group;
        q_tile[idx] = r < rows_used
                          ? LOAD(q, q_off + (ulong)b * q_sb + (ulong)(start_q + pos) * q_ss + (ulong)h * q_sh + c) *
                                scale_log2
                          : 0.0f;
    }
#if ALIBI
    for (int r = lid; r < ROWS; r += WG)  /* seen after the key loop's first barrier */
        row_slope2[r] = r < rows_used ? HEAD_ALIBI2(hk * group + r % group) : 0.0f;
#endif

    float m[ROWS], l[ROWS];
    float4 acc[ROWS][CPL];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < CPL; c++)
            acc[r][c] = (float4)(0.0f);
    }

    /* The keys any row sees (a group past its sequence, varlen, streams none but reaches every barrier). */
    int kv_end = seq_q > 0 ? mask_key_end(0, seq_q, seq_q, seq_kv) : 0;
    int kv_begin = mask_key_begin(0, seq_q, seq_kv);
#if SPLIT
    split_keys(split, n_splits, &kv_begin, &kv_end);
#endif

#if NV_ASYNC
#if PAGED
    page_rows(k_rows, v_rows, kv_begin, seq_kv, k_sb, k_ss, v_sb, v_ss, b VARLEN_PAGES, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    if (kv_begin < kv_end) {  /* the first block into buffer 0 */
        stage_rows_async(k_tiles, k, k_base, k_rows, k_ss, kv_begin, seq_kv, lid, HEAD_DIM);
        stage_rows_async(v_tiles, v, v_base, v_rows, v_ss, kv_begin, seq_kv, lid, HEAD_DIM_V);
    }
    copy_async_commit();
#endif
    int stage = 0;
    for (int kb = kv_begin; kb < kv_end; kb += BLOCK_N, stage = STAGES - 1 - stage) {
        barrier(CLK_LOCAL_MEM_FENCE);  /* the previous block's tiles are no longer read */
        __local const raw_t *k_tile = k_tiles + stage * BLOCK_N * PITCH;
        __local const raw_t *v_tile = v_tiles + stage * BLOCK_N * PITCH_V;
#if NV_ASYNC
        /* The next block into the other buffer (read by the previous block, done with now). */
        if (kb + BLOCK_N < kv_end) {
#if PAGED
            page_rows(k_rows, v_rows, kb + BLOCK_N, seq_kv, k_sb, k_ss, v_sb, v_ss, b VARLEN_PAGES, lid);
#endif
        }
#if PAGED
        barrier(CLK_LOCAL_MEM_FENCE);  /* the row offsets */
#endif
        if (kb + BLOCK_N < kv_end) {
            __local raw_t *next = k_tiles + (1 - stage) * BLOCK_N * PITCH;
            stage_rows_async(next, k, k_base, k_rows, k_ss, kb + BLOCK_N, seq_kv, lid, HEAD_DIM);
            next = v_tiles + (1 - stage) * BLOCK_N * PITCH_V;
            stage_rows_async(next, v, v_base, v_rows, v_ss, kb + BLOCK_N, seq_kv, lid, HEAD_DIM_V);
        }
        copy_async_commit();  /* a group every block, empty or not, so the count below holds */
        COPY_ASYNC_WAIT(1);   /* this work-item's copies of this block are done */
#else
#if PAGED
        page_rows(k_rows, v_rows, kb, seq_kv, k_sb, k_ss, v_sb, v_ss, b VARLEN_PAGES, lid);
        barrier(CLK_LOCAL_MEM_FENCE);  /* the row offsets */
#endif
        stage_rows(k_tiles, k, k_base, k_rows, k_ss, kb, seq_kv, lid, HEAD_DIM);
        stage_rows(v_tiles, v, v_base, v_rows, v_ss, kb, seq_kv, lid, HEAD_DIM_V);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);  /* everyone's */

        /* S: this work-item's part (every SPK-th chunk) of key kb + j's scores against every row. */
        const int j = lid % BLOCK_N, part = lid / BLOCK_N, key = kb + j;
        float s[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            s[r] = 0.0f;
#pragma unroll 4
        for (int c4 = part; c4 < D4; c4 += SPK) {
            const float4 kv = staged4(k_tile + j * PITCH + 4 * c4);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const float4 qv = vload4(0, q_tile + r * HEAD_DIM + 4 * c4);
                s[r] = fma(qv.w, kv.w, fma(qv.z, kv.z, fma(qv.y, kv.y, fma(qv.x, kv.x, s[r]))));
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            p_tile[lid * ROWS + r] = s[r];  /* [part][key][row] */
        barrier(CLK_LOCAL_MEM_FENCE);

        /* The block's row max: MAX_PARTS partials a row, then each work-item reads them all. */
        for (int idx = lid; idx < ROWS * MAX_PARTS; idx += WG) {
            const int r = idx / MAX_PARTS, mp = idx % MAX_PARTS;
            float mx = -INFINITY;
            for (int jj = mp; jj < BLOCK_N; jj += MAX_PARTS)
                mx = fmax(mx, block_score(p_tile, jj, r, kb + jj, seq_kv, rows_used, group, diag, ROW_SLOPE2(r)));
            row_part[idx] = mx;
        }
        /* The key's first work-item: its whole scores, the partials added in order. */
        if (part == 0)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                s[r] = block_score(p_tile, j, r, key, seq_kv, rows_used, group, diag, ROW_SLOPE2(r));
        barrier(CLK_LOCAL_MEM_FENCE);

        float alpha[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float m_new = m[r];
#pragma unroll
            for (int mp = 0; mp < MAX_PARTS; mp++)
                m_new = fmax(m_new, row_part[r * MAX_PARTS + mp]);
            /* A row that has seen no visible key keeps m = -inf: nothing to rescale, every p is 0. */
            const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
            alpha[r] = exp2(m[r] - m_ref);
            m[r] = m_new;
            const float p = part == 0 ? exp2(s[r] - m_ref) : 0.0f;
            l[r] = l[r] * alpha[r] + p;
            if (part == 0)
                p_tile[j * ROWS + r] = p;  /* the row max's reads are behind the barrier above */
#pragma unroll
            for (int c = 0; c < CPL; c++)
                acc[r][c] *= alpha[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* acc += P·V: this team's keys, this work-item's columns. Keys past the end have p = 0, V = 0. */
        for (int kj = team; kj < BLOCK_N; kj += NTEAMS) {
            float p[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                p[r] = p_tile[kj * ROWS + r];
#pragma unroll
            for (int c = 0; c < CPL; c++) {
                const int c4 = lane + TEAM * c;
                if (DV4 % TEAM == 0 || c4 < DV4) {
                    const float4 vv = staged4(v_tile + kj * PITCH_V + 4 * c4);
#pragma unroll
                    for (int r = 0; r < ROWS; r++)
                        acc[r][c] = fma((float4)(p[r]), vv, acc[r][c]);
                }
            }
        }
    }

    /* The teams' accumulators, added team by team (a fixed order), and the work-items' l. */
    for (int t = 0; t < NTEAMS; t++) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (team == t) {
#pragma unroll
            for (int r = 0; r < ROWS; r++)
#pragma unroll
                for (int c = 0; c < CPL; c++) {
                    const int c4 = lane + TEAM * c;
                    if (DV4 % TEAM == 0 || c4 < DV4) {
                        float4 sum = acc[r][c];
                        if (t > 0)
                            sum += vload4(0, acc_sum + r * HEAD_DIM_V + 4 * c4);
                        vstore4(sum, 0, acc_sum + r * HEAD_DIM_V + 4 * c4);
                    }
                }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        p_tile[lid * ROWS + r] = l[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < ROWS) {
        float l_row = 0.0f;
        for (int t = 0; t < WG; t++)  /* only a key's first work-item has a share; the rest add 0 */
            l_row += p_tile[t * ROWS + lid];
        row_part[lid * MAX_PARTS] = l_row;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int idx = lid; idx < rows_used * HEAD_DIM_V; idx += WG) {
        const int r = idx / HEAD_DIM_V, c = idx % HEAD_DIM_V;
        const int h = hk * group + r % group, pos = r / group;
        float lse_row;
        float factor = row_finish(m[r], row_part[r * MAX_PARTS], HEAD_SINK(h), &lse_row);
#if KV_E4M3
        factor *= v_descale;  /* V's values are its bytes' times this (a split's partials too: the merge is linear) */
#endif
        const float out = factor > 0.0f ? acc_sum[idx] * factor : 0.0f;
#if SPLIT
        part[split_part(split, b, h, pos, rows_grid, get_num_groups(1) * (ulong)group) + c] = out;
#else
        STORE(o, o_off + (ulong)b * o_sb + (ulong)(start_q + pos) * o_ss + (ulong)h * o_sh + c, out);
#endif
    }
    /* m of row r is the same in every work-item: the first writes the row's LSE. */
    if (lid == 0) {
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (r >= rows_used)
                continue;
            const int h = hk * group + r % group, pos = r / group;
            float lse_row;
            row_finish(m[r], row_part[r * MAX_PARTS], HEAD_SINK(h), &lse_row);
#if SPLIT
            part[split_part(split, b, h, pos, rows_grid, get_num_groups(1) * (ulong)group) + HEAD_DIM_V] = lse_row;
#else
            if (has_lse)
                lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + pos) * l_ss] = lse_row;
#endif
        }
    }
}

#include "split_combine.h"
