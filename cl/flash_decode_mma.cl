/*
 * flash_decode_mma.cl: exact attention forward for few query rows against
 * many keys (decode) on NVIDIA tensor cores (sm_80+), f16 or bf16 storage,
 * f32 accumulation, from OpenCL C through inline PTX.
 *
 * The same work-groups as flash_decode.cl: one per (split, KV head,
 * sequence), holding every query row of the KV head's group (group x seq_q
 * of at most 16; row r is query head hk * group + r % group at position
 * r / group), so K and V are read once per KV head; the keys are split
 * across work-groups where batch x KV heads cannot fill the device (split.h,
 * merged by flash_forward_combine). What differs is the arithmetic: the rows
 * are one 16-row mma tile (the rows past group x seq_q are zeros, computed
 * and dropped), and S = Q Kᵀ and O += P V run as mma.sync m16n8k16 with K
 * and V fragments read by ldmatrix, the online softmax on the accumulator
 * fragments (nv_mma.h). The flash_decode.cl kernel reads every K/V element
 * from local memory once per row of the group and is limited by those loads
 * at four rows (docs/perf-history.md, 2026-12-01); here an ldmatrix serves all 16 rows.
 *
 * K and V blocks of BLOCK_N keys stream through STAGES buffers by cp.async
 * (one barrier a block; STAGES - 1 blocks in flight while one is computed:
 * decode is bound by how many bytes each work-group has in flight, as
 * docs/perf-history.md, 2026-12-01 measures); warp w takes keys
 * [w KW, (w + 1) KW) of every block with its own running max, sum and
 * accumulator, and at the end the WARPS partial results are merged through
 * local memory in warp order, rescaled to the common max: no atomics, the
 * same bits every run. Rows that see no key give O = 0 and LSE = -inf.
 * HEAD_DIM_V (default HEAD_DIM) is V's and O's: their tiles, the
 * accumulator and the merge are that wide.
 *
 * KV_E4M3 (1, or 2 where the device converts E4M3 itself: sm_89+): K and V
 * are an E4M3 cache. Their bytes stream through the STAGES buffers as
 * stored (half the bytes of f16), and after each block lands the
 * work-group converts it, exactly (cl/e4m3.h), into one f16/bf16 K and V
 * tile that the products read as above: a second barrier a block. K's
 * descale is in scale_log2 (the host's), V's (v_descale) multiplies O.
 * Keep decode_mma_local_bytes in src/kernels.c in step with the arrays below.
 *
 * -DNV_EMULATE=1 runs it anywhere (PoCL in CI) on cl/nv_emulate.h's plain
 * OpenCL C primitives, whose lane exchanges are work-group barriers: every
 * work-item must reach every ldmatrix, mma and quad_xor together, as they
 * do here (the key loop's bounds are the work-group's; masks change values,
 * never which primitives run). Keep it so.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM  /* V's and O's columns (split.h's OUT_DIM) */
#endif
#ifndef DTYPE
#define DTYPE 1              /* 1 f16, 2 bf16 */
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef BLOCK_N
#define BLOCK_N 64           /* keys per streamed block, WARPS x KW */
#endif
#ifndef STAGES
#define STAGES 2             /* K/V buffers: blocks in flight + 1 */
#endif
#ifndef KV_E4M3
#define KV_E4M3 0            /* 1: K and V E4M3 bytes (converted in local memory); 2: by sm_89's cvt */
#endif

#define ROWS 16                        /* the mma tile's rows: every query row of the group */
#define WG (32 * WARPS)
#define KW (BLOCK_N / WARPS)           /* keys a warp takes of each block */
#define KSTEPS (HEAD_DIM / 16)         /* k-steps of S = QKᵀ */
#define S_TILES (KW / 8)               /* n-tiles of S per warp */
#define O_TILES (HEAD_DIM_V / 8)       /* n-tiles of O per warp */

#if HEAD_DIM % 16 != 0 || HEAD_DIM > 256 || HEAD_DIM_V % 16 != 0 || HEAD_DIM_V > 256
#error "HEAD_DIM and HEAD_DIM_V must be multiples of 16, at most 256"
#endif
/* Q's fragments held in registers for the whole key loop (KSTEPS x 4 a thread), or read from the Q tile by
 * ldmatrix at each k-step: past d = 128 Q's are over 32 registers a thread, and past dv = 128 the accumulator
 * alone is 4 dv / 8 (128 at 256): Q's 64 more would spill. The extra ldmatrix reads local memory, which decode leaves idle. */
#ifndef Q_IN_REGISTERS
#define Q_IN_REGISTERS (HEAD_DIM <= 128 && HEAD_DIM_V <= 128)
#endif
#if BLOCK_N % WARPS != 0 || KW % 16 != 0
#error "BLOCK_N must be WARPS times a multiple of 16"
#endif
/* cp.async groups still pending when the oldest block has landed (wait_group takes a literal). */
#if STAGES == 2
#define WAIT_OLDEST_BLOCK() COPY_ASYNC_WAIT(0)
#elif STAGES == 3
#define WAIT_OLDEST_BLOCK() COPY_ASYNC_WAIT(1)
#elif STAGES == 4
#define WAIT_OLDEST_BLOCK() COPY_ASYNC_WAIT(2)
#else
#error "STAGES must be 2, 3 or 4"
#endif

#define SPLIT_MERGE_IN_PLACE 1  /* split.h: the last work-group of a KV head merges the splits (merge_here) */
#include "storage.h"   /* storage_t, STORE: O and the split merge */
#include "mask.h"      /* before nv_mma.h: its softmax masks by mask_visible */
#include "varlen.h"
#include "split.h"
#include "nv_mma.h"
#include "nv_mma16.h"  /* mma, ldmatrix, tiles and their loaders */

#if KV_E4M3
#include "kv8_tiles.h"  /* the stages, their conversion */
#define TILES8 (BLOCK_N * (ROW_CHUNKS + ROW_CHUNKS_V))  /* the converted K then V tiles */
/* The warps' accumulators merge in the same space after the last block: WARPS x 16 x HEAD_DIM_V floats. */
#if WARPS * 16 * HEAD_DIM_V * 4 > 16 * (STAGES * STAGE8 + TILES8)
#error "the warps' merge does not fit the K/V space"
#endif

/* A block's K and V rows as stored into a stage (row r of K at r CH8, of V at BLOCK_N CH8 + r CH8_V), from
 * their byte offsets (k_rows/v_rows: a paged cache's table, else key times the row stride); zeros past the
 * end. */
static inline void load_kv8(__local uint4 *stage8, __global const uchar *k_base, __global const uchar *v_base,
                            __local const ulong *k_rows, __local const ulong *v_rows, ulong k_ss, ulong v_ss,
                            int first_row, int seq, int tid)
{
    for (int c = tid; c < BLOCK_N * KV8_CHUNKS; c += WG) {
        const int r = c / KV8_CHUNKS, ch = c % KV8_CHUNKS;
        const bool valid = first_row + r < seq;
#if VARLEN == 3
        const ulong k_row = k_rows[r], v_row = v_rows[r];
#else
        const ulong k_row = (ulong)(first_row + r) * k_ss, v_row = (ulong)(first_row + r) * v_ss;
#endif
        if (ch < CH8)
            copy_chunk8(&stage8[r * CH8 + ch], k_base + k_row + 16 * ch, valid);
        if (ch < CH8_V)
            copy_chunk8(&stage8[BLOCK_N * CH8 + r * CH8_V + ch], v_base + v_row + 16 * ch, valid);
    }
}
#endif

#if VARLEN == 3
/* A paged cache: the offsets of K's and V's rows key0 .. key0 + BLOCK_N - 1
 * (the block table and its clamp read once a key, as flash_decode.cl does),
 * written into table j % STAGES an iteration before block j's copies are
 * issued, so the lookups' latency hides behind the blocks in flight. Rows
 * past the end are not read. */
static inline void page_rows(__local ulong *k_rows, __local ulong *v_rows, int key0, int seq_kv, ulong k_sb,
                             ulong k_ss, ulong v_sb, ulong v_ss, int b, __global const int *pages, int page_size,
                             int pages_per_seq, int num_pages, int tid)
{
    for (int r = tid; r < BLOCK_N; r += WG) {
        const int key = min(key0 + r, max(seq_kv - 1, 0));
        const int n = key / page_size;
        const ulong page = (ulong)clamp(pages[b * pages_per_seq + n], 0, num_pages - 1);
        k_rows[r] = page * k_sb + (ulong)(key - n * page_size) * k_ss;
        v_rows[r] = page * v_sb + (ulong)(key - n * page_size) * v_ss;
    }
}

/* One 16-byte chunk by cp.async, or zeros where the row is past the end. */
static inline void copy_row_chunk(__local uint4 *dst, __global const ushort *src, bool valid)
{
    if (valid)
        copy_async_16(local_address(dst), src);
    else
        *dst = (uint4)(0u);
}

/* A block's K and V rows by cp.async from their offsets; zeros past the end. */
static inline void load_kv_rows(__local uint4 *k_tile, __local uint4 *v_tile, __global const ushort *k_base,
                                __global const ushort *v_base, __local const ulong *k_rows,
                                __local const ulong *v_rows, int first_row, int seq, int tid)
{
    for (int c = tid; c < BLOCK_N * KV_CHUNKS; c += WG) {
        const int r = c / KV_CHUNKS, ch = c % KV_CHUNKS;
        const bool valid = first_row + r < seq;
        /* Rows of different widths: the narrower one's chunks past its row copy nothing (both conditions are
         * constant true where the widths match). */
        if (ch < CHUNKS)
            copy_row_chunk(&k_tile[swizzle(r, ch)], k_base + k_rows[r] + ch * 8, valid);
        if (ch < CHUNKS_V)
            copy_row_chunk(&v_tile[swizzle_of(CHUNKS_V, r, ch)], v_base + v_rows[r] + ch * 8, valid);
    }
}
#define PAGE_ROWS(table, key0)                                                                                       \
    page_rows(k_rows + (table) * BLOCK_N, v_rows + (table) * BLOCK_N, key0, seq_kv, k_sb, k_ss, v_sb, v_ss, b,      \
              pages, page_size, pages_per_seq, num_pages, tid)
#define LOAD_BLOCK(k_dst, v_dst, table, first)                                                                       \
    load_kv_rows(k_dst, v_dst, k_base, v_base, k_rows + (table) * BLOCK_N, v_rows + (table) * BLOCK_N, first,       \
                 seq_kv, tid)
#else
#define PAGE_ROWS(table, key0) ((void)0)
#define LOAD_BLOCK(k_dst, v_dst, table, first) LOAD_KV(k_dst, v_dst, first)
#endif
#if KV_E4M3 && VARLEN == 3
#define LOAD_BLOCK8(stage8, table, first)                                                                            \
    load_kv8(stage8, k_base, v_base, k_rows + (table) * BLOCK_N, v_rows + (table) * BLOCK_N, k_ss, v_ss, first,      \
             seq_kv, tid)
#elif KV_E4M3
#define LOAD_BLOCK8(stage8, table, first) load_kv8(stage8, k_base, v_base, 0, 0, k_ss, v_ss, first, seq_kv, tid)
#endif
#if KV_E4M3
typedef uchar kv_elem_t;   /* a stored K or V element */
#else
typedef ushort kv_elem_t;
#endif

#include "forward_args.h"
#include "split_combine.h"  /* flash_forward_combine, and split_merge_last for merge_here */

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_decode_mma(FORWARD_ARGS(storage_t))
{
    __local uint4 q_tile[ROWS * ROW_CHUNKS] __attribute__((aligned(16)));
#if KV_E4M3
    /* STAGES stages of stored bytes (block j in j % STAGES), then the one converted K and V tiles. */
    __local uint4 kv_space[STAGES * STAGE8 + TILES8] __attribute__((aligned(16)));
    __local uint4 *const k_converted = kv_space + STAGES * STAGE8;
    __local uint4 *const v_converted = k_converted + BLOCK_N * ROW_CHUNKS;
    __local float *merged = (__local float *)kv_space;  /* after the last block (checked above) */
    __local uint4 *const k_tiles = kv_space;  /* the merge in place's weights, after the last block */
#else
    __local uint4 k_tiles[STAGES * BLOCK_N * ROW_CHUNKS] __attribute__((aligned(16)));  /* block j in j % STAGES */
    __local uint4 v_tiles[STAGES * BLOCK_N * ROW_CHUNKS_V] __attribute__((aligned(16)));
    /* After the last block: each warp's rescaled accumulator, [warp][row][HEAD_DIM_V] floats, in the V
     * buffers (WARPS x 16 x HEAD_DIM_V x 4 bytes <= STAGES x BLOCK_N x HEAD_DIM_V x 2: KW >= 16). */
    __local float *merged = (__local float *)v_tiles;
#endif
    __local float warp_m[WARPS * ROWS], warp_l[WARPS * ROWS];  /* each warp's running max and sum a row */
#if VARLEN == 3
    __local ulong k_rows[STAGES * BLOCK_N], v_rows[STAGES * BLOCK_N];  /* block j's row offsets: table j % STAGES */
#endif
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
#if SPLIT
    const int split = (int)get_group_id(0);
#endif
    const int rows_grid = seq_q;  /* the grid's query positions (the longest sequence's, varlen) */
    SEQUENCE_ROWS(b);  /* start_q, start_k; varlen: seq_q, seq_kv become this sequence's */
    const int diag = seq_kv - seq_q;
    const int rows_used = group * seq_q;

    __global const kv_elem_t *k_base = (__global const kv_elem_t *)k + k_off + KV_BATCH(k_sb) +
                                       (ulong)start_k * k_ss + (ulong)hk * k_sh;
    __global const kv_elem_t *v_base = (__global const kv_elem_t *)v + v_off + KV_BATCH(v_sb) +
                                       (ulong)start_k * v_ss + (ulong)hk * v_sh;

    /* Q: the group's rows as one tile, zeros past rows_used. */
    for (int c = tid; c < ROWS * CHUNKS; c += WG) {
        const int r = c / CHUNKS, ch = c % CHUNKS;
        __local uint4 *dst = &q_tile[swizzle(r, ch)];
        if (r < rows_used) {
            const int h = hk * group + r % group, pos = r / group;
            copy_async_16(local_address(dst), (__global const ushort *)q + q_off + (ulong)b * q_sb +
                                                  (ulong)(start_q + pos) * q_ss + (ulong)h * q_sh + ch * 8);
        } else {
            *dst = (uint4)(0u);
        }
    }

    /* The keys any row sees (a sequence with no rows, varlen, streams none but reaches every barrier). */
    int kv_end = seq_q > 0 ? mask_key_end(0, seq_q, seq_q, seq_kv) : 0;
    int kv_begin = mask_key_begin(0, seq_q, seq_kv);
#if SPLIT
    split_keys(split, n_splits, &kv_begin, &kv_end);
#endif
    for (int i = 0; i < STAGES; i++)  /* the first STAGES blocks' row offsets */
        if (kv_begin + i * BLOCK_N < kv_end)
            PAGE_ROWS(i, kv_begin + i * BLOCK_N);
#if VARLEN == 3
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    /* Blocks 0 .. STAGES - 2 in flight, one cp.async group each (Q's copies in block 0's; a group is
     * committed where there is no block too, so the counting of wait_group stays the same). */
    for (int i = 0; i < STAGES - 1; i++) {
        if (kv_begin + i * BLOCK_N < kv_end)
#if KV_E4M3
            LOAD_BLOCK8(kv_space + i * STAGE8, i, kv_begin + i * BLOCK_N);
#else
            LOAD_BLOCK(k_tiles + i * BLOCK_N * ROW_CHUNKS, v_tiles + i * BLOCK_N * ROW_CHUNKS_V, i,
                       kv_begin + i * BLOCK_N);
#endif
        copy_async_commit();
    }
    WAIT_OLDEST_BLOCK();  /* Q and block 0 */
    barrier(CLK_LOCAL_MEM_FENCE);

    const int q_lane_row = 8 * ((lane >> 3) & 1) + (lane & 7), q_lane_chunk = lane >> 4;
#define Q_FRAGMENT(kk, dst) ldmatrix_x4(local_address(&q_tile[swizzle(q_lane_row, (kk) * 2 + q_lane_chunk)]), dst)
#if Q_IN_REGISTERS
    uint qf[KSTEPS][4];
NV_UNROLL
    for (int kk = 0; kk < KSTEPS; kk++)
        Q_FRAGMENT(kk, qf[kk]);
#endif

    float acc[O_TILES][4];
NV_UNROLL
    for (int n = 0; n < O_TILES; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};
    const int pos_lo = g / group, pos_hi = (g + 8) / group;  /* this thread's rows' query positions */
    const float slope2_lo = HEAD_ALIBI2(hk * group + g % group), slope2_hi = HEAD_ALIBI2(hk * group + (g + 8) % group);
    const int kw0 = warp * KW;                               /* this warp's keys in a block */

    for (int kb = kv_begin, stage = 0; kb < kv_end; kb += BLOCK_N, stage = stage + 1 == STAGES ? 0 : stage + 1) {
        /* Block kb has landed for this thread; the barrier makes it visible to all and tells that
         * every warp is done with the buffer of the block before, into which the block STAGES - 1
         * ahead then streams. */
        WAIT_OLDEST_BLOCK();
        barrier(CLK_LOCAL_MEM_FENCE);
        const int ahead = stage == 0 ? STAGES - 1 : stage - 1;  /* (block + STAGES - 1) % STAGES */
#if KV_E4M3
        if (kb + (STAGES - 1) * BLOCK_N < kv_end)
            LOAD_BLOCK8(kv_space + ahead * STAGE8, ahead, kb + (STAGES - 1) * BLOCK_N);
        copy_async_commit();
        /* The converted tiles: every warp is done with the block before's (the barrier above). */
        convert_kv8(k_converted, v_converted, kv_space + stage * STAGE8, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        __local const uint4 *k_tile = k_converted, *v_tile = v_converted;
#else
        if (kb + (STAGES - 1) * BLOCK_N < kv_end)
            LOAD_BLOCK(k_tiles + ahead * BLOCK_N * ROW_CHUNKS, v_tiles + ahead * BLOCK_N * ROW_CHUNKS_V, ahead,
                       kb + (STAGES - 1) * BLOCK_N);
        copy_async_commit();
        __local const uint4 *k_tile = k_tiles + stage * BLOCK_N * ROW_CHUNKS;
        __local const uint4 *v_tile = v_tiles + stage * BLOCK_N * ROW_CHUNKS_V;
#endif

        float s[S_TILES][4];
NV_UNROLL
        for (int n = 0; n < S_TILES; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        {
            const int j = lane >> 3, key = 8 * (j >> 1) + (lane & 7);
NV_UNROLL
            for (int kk = 0; kk < KSTEPS; kk++) {
#if Q_IN_REGISTERS
                const uint *a = qf[kk];
#else
                uint a[4];
                Q_FRAGMENT(kk, a);
#endif
NV_UNROLL
                for (int np = 0; np < S_TILES / 2; np++) {
                    uint bf[4];
                    ldmatrix_x4(local_address(&k_tile[swizzle(kw0 + np * 16 + key, kk * 2 + (j & 1))]), bf);
                    mma_16x8x16(s[2 * np], a, bf[0], bf[1]);
                    mma_16x8x16(s[2 * np + 1], a, bf[2], bf[3]);
                }
            }
        }

        /* Masks only where some key of the block may be absent or hidden from some row: position 0
         * sees the fewest keys on the right, position seq_q - 1 the fewest on the left. */
        bool edge = kb + BLOCK_N > seq_kv;
#if WINDOW_RIGHT >= 0
        edge = edge || kb + BLOCK_N - 1 > diag + WINDOW_RIGHT;
#endif
#if WINDOW_LEFT >= 0
        edge = edge || kb < seq_q - 1 + diag - WINDOW_LEFT;
#endif
        online_softmax(s, acc, m_row, l_row, edge, kb + kw0, pos_lo, pos_hi, t, seq_kv, diag,
                       scale_log2 ALIBI_ARG(slope2_lo, slope2_hi) NV_SCRATCH_ARG);
        uint pf[KW / 16][4];
NV_UNROLL
        for (int kc = 0; kc < KW / 16; kc++) {
            pf[kc][0] = pack_pair(s[2 * kc][0], s[2 * kc][1]);
            pf[kc][1] = pack_pair(s[2 * kc][2], s[2 * kc][3]);
            pf[kc][2] = pack_pair(s[2 * kc + 1][0], s[2 * kc + 1][1]);
            pf[kc][3] = pack_pair(s[2 * kc + 1][2], s[2 * kc + 1][3]);
        }
        {
            const int key = lane & 15, upper = lane >> 4;  /* lanes 16-31: the next 8 columns */
NV_UNROLL
            for (int kc = 0; kc < KW / 16; kc++)
NV_UNROLL
                for (int np = 0; np < O_TILES / 2; np++) {
                    uint bf[4];
                    ldmatrix_x4_trans(local_address(&v_tile[swizzle_of(CHUNKS_V, kw0 + kc * 16 + key, np * 2 + upper)]),
                                      bf);
                    mma_16x8x16(acc[2 * np], pf[kc], bf[0], bf[1]);
                    mma_16x8x16(acc[2 * np + 1], pf[kc], bf[2], bf[3]);
                }
        }
        /* Block j + STAGES's row offsets into block j's table: every work-item read it (for block j's
         * copies) an iteration or more ago, before a barrier it has passed, and the next iteration's
         * barrier publishes it before the copies that read it. */
        if (kb + STAGES * BLOCK_N < kv_end)
            PAGE_ROWS(stage, kb + STAGES * BLOCK_N);
    }
    COPY_ASYNC_WAIT(0);

    /* Each warp's row max and (quad-summed) row sum; every warp is done with the tiles after this. */
NV_UNROLL
    for (int r = 0; r < 2; r++) {
        float l = l_row[r];
        l += quad_xor(l, 1);
        l += quad_xor(l, 2);
        if (t == 0) {
            warp_m[warp * ROWS + g + 8 * r] = m_row[r];
            warp_l[warp * ROWS + g + 8 * r] = l;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* This warp's accumulator rescaled to the rows' common max (a warp that saw no key of a row
     * has m = -inf there: weight 0). */
NV_UNROLL
    for (int r = 0; r < 2; r++) {
        const int row = g + 8 * r;
        float m_all = -INFINITY;
NV_UNROLL
        for (int w = 0; w < WARPS; w++)
            m_all = fmax(m_all, warp_m[w * ROWS + row]);
        const float weight = exp2(m_row[r] - (m_all == -INFINITY ? 0.0f : m_all));
        __local float *dst = merged + (warp * ROWS + row) * HEAD_DIM_V + 2 * t;
NV_UNROLL
        for (int n = 0; n < O_TILES; n++)
            vstore2((float2)(acc[n][2 * r] * weight, acc[n][2 * r + 1] * weight), 0, dst + 8 * n);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* The warps' shares added in warp order, normalised, stored (or this split's partial). */
    for (int idx = tid; idx < rows_used * HEAD_DIM_V; idx += WG) {
        const int r = idx / HEAD_DIM_V, c = idx % HEAD_DIM_V;
        float m_all = -INFINITY;
NV_UNROLL
        for (int w = 0; w < WARPS; w++)
            m_all = fmax(m_all, warp_m[w * ROWS + r]);
        const float m_ref = m_all == -INFINITY ? 0.0f : m_all;
        float l_all = 0.0f, sum = 0.0f;
NV_UNROLL
        for (int w = 0; w < WARPS; w++) {
            l_all += warp_l[w * ROWS + r] * exp2(warp_m[w * ROWS + r] - m_ref);
            sum += merged[(w * ROWS + r) * HEAD_DIM_V + c];
        }
        const int h = hk * group + r % group, pos = r / group;
        float lse_row;
        float factor = row_finish(m_all, l_all, HEAD_SINK(h), &lse_row);
#if KV_E4M3
        factor *= v_descale;  /* V's values are its bytes' times this (a split's partials too: the merge is linear) */
#endif
        const float out = factor > 0.0f ? sum * factor : 0.0f;
#if SPLIT
        __global float *dst = part + split_part(split, b, h, pos, rows_grid, get_num_groups(1) * (ulong)group);
        dst[c] = out;
        if (c == 0)
            dst[OUT_DIM] = lse_row;
#else
        STORE(o, o_off + (ulong)b * o_sb + (ulong)(start_q + pos) * o_ss + (ulong)h * o_sh + c, out);
        if (has_lse && c == 0)
            lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + pos) * l_ss] = lse_row;
#endif
    }
#if SPLIT
    /* The K buffers, idle since the last block, hold the merge's weights (the host checks they fit). */
    if (merge_here)
        split_merge_last(part, n_splits, b, hk, group, rows_used, rows_grid, start_q, o, o_off, o_sb, o_ss, o_sh,
                         lse, l_off, l_sb, l_ss, l_sh, has_lse, sinks, sink_off, (__local float *)k_tiles,
                         (__local int *)warp_m, tid, WG);
#endif
}
