/*
 * flash_backward_wgmma.cl: the backward pass on Hopper's warpgroup matrix
 * multiply (wgmma, sm_90a, built through src/program.c's sm_90a route:
 * nv_wgmma.h), f16 or bf16 storage, f32 accumulation. Same three steps,
 * arguments and results contract as backward_mma_skeleton.h (src/backward.c
 * enqueues them in order): flash_backward_dot (backward_dot.h), then
 * flash_backward_wgmma_dkdv, then flash_backward_wgmma_dq. HEAD_DIM a
 * multiple of 16 up to 256, WARPS 4 or 8 (one or two warpgroups of 4 warps).
 * HEAD_DIM_V (V's, dO's and dV's columns; HEAD_DIM where not given), a
 * multiple of 16 up to 256 too: dP's products run over it, dV's over its
 * columns (DeepSeek's MLA: 192 and 128).
 *
 * A work-group owns OWN = 16 WARPS rows: its keys in dkdv, its query rows
 * in dq; each warpgroup owns 64 of them and issues its products alone.
 * dK and dV stay in registers, d / 2 of each a thread up to d = 128. Past
 * 128 (SPLIT_D: 8 warps, where d or dv passes 128) that is more than a thread
 * has, so in dkdv the two warpgroups own the same 64 keys and split dK's and
 * dV's columns: the first keeps columns 0..127, the second the rest (DK_COL1
 * and DV_COL1 below). Both
 * compute the block's whole Sᵀ and dPᵀ, which costs up to 1.5x dkdv's
 * products (the alternative, P and dS through local memory to the other
 * warpgroup, leaves no room for the tiles at d = 256); dq keeps one
 * warpgroup per 64 rows and streams smaller key blocks past d = 192
 * (BLOCK_N 32) so its tiles fit.
 *
 * dkdv: K and V of the work-group's keys stay in local memory; blocks of
 * BLOCK_M queries (Q, dO, their rows' LSE and D) of every query head of
 * the group stream through two buffers. Per block, each warpgroup:
 *     Sᵀ = K Qᵀ, dPᵀ = V dOᵀ    64 x BLOCK_M, A (K, V) and B (Q, dO) both
 *                              read by the tensor cores from local memory
 *     Pᵀ = exp2(scale_log2 Sᵀ - lse2), dSᵀ = Pᵀ ∘ (dPᵀ - D)
 *     dV += Pᵀ dO, dK += dSᵀ Q  64 x HEAD_DIM, A from registers (the
 *                              accumulators repacked), B transposed on read
 * dq: Q and dO of the work-group's rows stay in local memory; blocks of
 * BLOCK_N keys (K, V) stream through two buffers. Per block:
 *     S = Q Kᵀ, dP = dO Vᵀ, P, dS = P ∘ (dP - D), dQ += dS K.
 *
 * Every dQ, dK, dV element is summed in a fixed order (no atomics): the same
 * bits every run.
 *
 * -DFUSED_DQ=1 (the opt-in "backward-wgmma-atomic"; 8 warps, BLOCK_M 64, d 32,
 * 64, 96 or 128): no dq pass. dkdv also stores each block's dSᵀ (its 128 keys x
 * the block's 64 queries) to local memory, and after a barrier each
 * warpgroup computes dQ's block += dS K over all 128 keys for half of dQ's
 * columns (A the dS tile MN-major, B K's tile transposed, both from local
 * memory) and adds it to an f32 accumulator in the workspace with
 * red.global.add; flash_backward_wgmma_dq_convert then scales it into dQ.
 * The adds of different work-groups land in any order, so dQ's bits may
 * change from run to run (dK and dV stay deterministic). It saves the dq
 * pass's S and dP products, 2 of 7, and adds dQ's traffic to L2.
 *
 * Causal masking is bottom-right as everywhere; a row past seq_q or whose
 * LSE is -inf has lse2 = +inf, so its P is exactly 0. Keys past seq_kv load
 * as zero rows and are masked in dq (and in FUSED_DQ's dkdv); in dkdv their
 * rows are never stored. A warpgroup skips the blocks none of its rows or keys
 * sees (GROUP_SKIP): natively only, see below.
 *
 * S's product never has dV's (dQ's) shape: the H200's driver gave wrong
 * results with an m64nNk16 K-major and an m64nNk16 transposed product of
 * the same N in one kernel (cl/flash_forward_mma.cl's S_PART), so S is
 * split in halves where its block equals HEAD_DIM (S_PART below), and
 * FUSED_DQ's dQ products avoid S's width (DQ_PART).
 *
 * -DNV_EMULATE=1 runs it anywhere (PoCL in CI) on nv_emulate.h's plain
 * OpenCL C, whose wgmma is a work-group barrier: every work-item reaches
 * every product together there, so a warpgroup's skip becomes a mask.
 * The __local arrays are what src/kernels.c's backward_wgmma_local_bytes
 * counts: keep them in step.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#ifndef DTYPE
#define DTYPE 1              /* 1 f16, 2 bf16 */
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef WG
#define WG (32 * WARPS)
#endif
#ifndef BLOCK_M
#define BLOCK_M 64           /* dkdv: queries a streamed block */
#endif
#ifndef BLOCK_N
#define BLOCK_N 64           /* dq: keys a streamed block */
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
/* BWD_OVERLAP 1: P is computed while dP's products run, and (dK/dV) dV's products run while dS is computed;
 * -DBWD_OVERLAP=0: each batch of products waited for before the arithmetic that follows it. H100, f16/bf16,
 * N = 4k/16k, d = 64/128, causal both, against 0: +0.1..+3.4% on all 16 (docs/perf-history.md, 2026-12-05). */
#ifndef BWD_OVERLAP
#define BWD_OVERLAP 1
#endif
#ifndef FUSED_DQ
#define FUSED_DQ 0
#endif
#define WGMMA 1              /* nv_mma16.h's tiles in wgmma's 64-column panels */
#define OWN (16 * WARPS)     /* keys (dkdv) or query rows (dq) a work-group owns: 64 a warpgroup */

#if HEAD_DIM % 16 != 0 || HEAD_DIM < 16 || HEAD_DIM > 256 || HEAD_DIM_V % 16 != 0 || HEAD_DIM_V < 16 || \
    HEAD_DIM_V > 256
#error "HEAD_DIM and HEAD_DIM_V must be multiples of 16, at most 256"
#endif
#if (WARPS != 4 && WARPS != 8) || WG != 32 * WARPS
#error "WARPS must be 4 or 8 and WG 32 * WARPS"
#endif
#if (BLOCK_M != 64 && BLOCK_M != 128) || (BLOCK_N != 32 && BLOCK_N != 64 && BLOCK_N != 128)
#error "BLOCK_M must be 64 or 128, BLOCK_N 32, 64 or 128"
#endif

/* dkdv past 128 columns (above): both warpgroups' products of dK (dV) are DK_COLS (DV_COLS) columns wide, the
 * first's from column 0, the second's from DK_COL1 (DV_COL1); the second stores those from DK_FROM1 (DV_FROM1)
 * on. A dim past 128: 128 wide, the second's from the panel that ends them at or past it, so 256 - dim columns
 * are computed and not stored (up to 192 the second's first 64 repeat the first's and 192 - dim lie past it;
 * beyond, 256 - dim lie past it). A dim of 128 beside one past it: 64 columns each. A narrower one: the whole
 * dim in both, stored by the first (the second's product repeats it: the same N in both warpgroups). Products
 * of one N in both warpgroups: a branch between two Ns made ptxas serialise every wgmma of the kernel (C7520).
 * The widths are tokens (they name the products). */
#if HEAD_DIM > 128 || HEAD_DIM_V > 128
#define SPLIT_D 1
#define OWN_KEYS 64          /* dkdv: keys a work-group owns, both warpgroups' */
#if WARPS != 8
#error "HEAD_DIM or HEAD_DIM_V past 128 needs WARPS 8 (two warpgroups split dK's and dV's columns)"
#endif
#if HEAD_DIM > 128
#define DK_COLS 128
#define DK_COL1 (HEAD_DIM <= 192 ? 64 : 128)
#define DK_FROM1 128
#elif HEAD_DIM == 128
#define DK_COLS 64
#define DK_COL1 64
#define DK_FROM1 64
#else
#define DK_COLS HEAD_DIM
#define DK_COL1 0
#define DK_FROM1 HEAD_DIM
#endif
#if HEAD_DIM_V > 128
#define DV_COLS 128
#define DV_COL1 (HEAD_DIM_V <= 192 ? 64 : 128)
#define DV_FROM1 128
#elif HEAD_DIM_V == 128
#define DV_COLS 64
#define DV_COL1 64
#define DV_FROM1 64
#else
#define DV_COLS HEAD_DIM_V
#define DV_COL1 0
#define DV_FROM1 HEAD_DIM_V
#endif
#else
#define SPLIT_D 0
#define OWN_KEYS OWN
#define DK_COLS HEAD_DIM
#define DK_COL1 0
#define DK_FROM1 0
#define DV_COLS HEAD_DIM_V
#define DV_COL1 0
#define DV_FROM1 0
#endif
#define DK_REGS (DK_COLS / 2)  /* a thread's accumulators of its warpgroup's 64 x DK_COLS dK */
#define DV_REGS (DV_COLS / 2)  /* and of its 64 x DV_COLS dV */

/* FUSED_DQ: each warpgroup's dQ is the block's 64 queries x DQ_COLS = d / 2 columns from dq_col0, summed over
 * the work-group's 128 keys, in products DQ_PART columns wide: none crosses a 64-column panel (a transposed
 * operand must not; at d = 96 the second warpgroup's columns 48..95 do), and none has the N of S's products
 * (M_PART below; the driver bug S_PART avoids). DQ_PART a token: it names the product. */
#if FUSED_DQ
#if WARPS != 8 || BLOCK_M != 64 || HEAD_DIM % 32 != 0 || HEAD_DIM > 128 || HEAD_DIM_V != HEAD_DIM
#error "FUSED_DQ needs WARPS 8, BLOCK_M 64 and HEAD_DIM 32, 64, 96 or 128 (HEAD_DIM_V the same)"
#endif
#define DQ_COLS (HEAD_DIM / 2)
#if HEAD_DIM == 128
#define DQ_PART 64           /* S's then 32 wide (M_PART) */
#else
#define DQ_PART 16           /* d = 64: S's are 32 wide; d = 96: panel 0 ends at column 64 */
#endif
#endif

#include "nv_async.h"
#include "storage.h"
#include "backward_dot.h"  /* step 0: flash_backward_dot */
#include "block_order.h"
#include "mask.h"         /* CAUSAL, WINDOW_LEFT / WINDOW_RIGHT: which keys a row sees */
#if FUSED_DQ && MASKED && !(CAUSAL && WINDOW_LEFT < 0 && WINDOW_RIGHT == 0)
#error "the atomic dQ pass takes no window"
#endif
#include "nv_mma16.h"      /* pack_pair, the panel tiles and their loader */
#include "nv_wgmma.h"

/* The S and dP products' widths: a block in parts where it equals a transposed product's N (above): dkdv's
 * DK_COLS or DV_COLS, dq's HEAD_DIM. One token each: it names the product (wgmma_n32_kmajor_ss). */
#define M_CLASHES(n) ((n) == DK_COLS || (n) == DV_COLS)
#if FUSED_DQ && HEAD_DIM == 128
#define M_PART 32            /* not dQ's 64 (DQ_PART): fewer registers than dQ in halves */
#elif !M_CLASHES(BLOCK_M)
#define M_PART BLOCK_M
#elif BLOCK_M == 128 && !M_CLASHES(64)
#define M_PART 64
#elif !M_CLASHES(32)
#define M_PART 32
#else
#define M_PART 16            /* d and dv 32 and 64 */
#endif
#if M_CLASHES(M_PART)
#error "S's products must not have a transposed product's width"
#endif
#if BLOCK_N == HEAD_DIM && BLOCK_N <= 64
#if BLOCK_N == 64
#define N_PART 32
#else
#define N_PART 16
#endif
#elif BLOCK_N == HEAD_DIM
#define N_PART 64
#else
#define N_PART BLOCK_N
#endif

#define KSTEPS (HEAD_DIM / 16)
#define KSTEPS_V (HEAD_DIM_V / 16)  /* dP's products' k-steps */
#define EXP2 exp2_ftz        /* one MUFU.EX2, subnormals flushed (nv_async.h) */
#define OUT_REGS (HEAD_DIM / 2)  /* a thread's accumulators of a 64 x HEAD_DIM product */

/* D[64 x BLOCK] = A Bᵀ, issued (the caller fences before, commits and waits after): A 64 rows of an [a_rows][c]
 * tile, B a [BLOCK][c] tile, both K-major in local memory (k-step kk in panel kk / 4, 32 bytes a k-step), c =
 * 16 ksteps columns, in PART-wide products (PART a token: it names the product); the first k-step overwrites. */
#define ISSUE_SCORES(d, a_desc, a_rows, b_desc, block, part_n, ksteps)                                               \
    do {                                                                                                             \
        NV_UNROLL                                                                                                    \
        for (int part = 0; part < (block) / (part_n); part++)                                                        \
            NV_UNROLL                                                                                                \
            for (int kk = 0; kk < (ksteps); kk++)                                                                    \
                wgmma_ss_kmajor(part_n, &(d)[part * (part_n) / 2],                                                   \
                                wgmma_desc_plus(a_desc, (kk >> 2) * (a_rows) * 128 + (kk & 3) * 32),                 \
                                wgmma_desc_plus(b_desc, (kk >> 2) * (block) * 128 + part * (part_n) * 128 +          \
                                                            (kk & 3) * 32),                                          \
                                kk);                                                                                 \
    } while (0)

/* D[64 x COLS] += A[64 x BLOCK] B[BLOCK x COLS], issued: A the repacked accumulators, 16 columns an operand;
 * B COLS columns of a [BLOCK][d] tile transposed on read (b_trans: leading bytes BLOCK rows of 128, the next
 * panel), 2048 bytes (16 rows) an operand. COLS a token (it names the product), or emulated any int. */
#define ISSUE_TRANS(cols, d, a, b_trans, block)                                                                      \
    do {                                                                                                             \
        NV_UNROLL                                                                                                    \
        for (int kc = 0; kc < (block) / 16; kc++)                                                                    \
            wgmma_rs_trans(cols, d, (a)[kc], wgmma_desc_plus(b_trans, kc * 2048), 1);                               \
    } while (0)

/* dkdv's dK (dV) product, DK_COLS (DV_COLS) columns from this warpgroup's col0_k (col0_v; its b_trans starts
 * there). Emulated, only the columns that exist (n at run time): the tile's columns past the dim were never
 * written. */
#if NV_EMULATE
#define ISSUE_DK(d, a, b_trans) ISSUE_TRANS(min(DK_COLS, HEAD_DIM - col0_k), d, a, b_trans, BLOCK_M)
#define ISSUE_DV(d, a, b_trans) ISSUE_TRANS(min(DV_COLS, HEAD_DIM_V - col0_v), d, a, b_trans, BLOCK_M)
#else
#define ISSUE_DK(d, a, b_trans) ISSUE_TRANS(DK_COLS, d, a, b_trans, BLOCK_M)
#define ISSUE_DV(d, a, b_trans) ISSUE_TRANS(DV_COLS, d, a, b_trans, BLOCK_M)
#endif

/* A warpgroup's skip of a block its keys (rows) cannot see: natively its own; emulated none (masked instead). */
#if NV_EMULATE
#define GROUP_SKIP(cond) false
#else
#define GROUP_SKIP(cond) (cond)
#endif

typedef ushort elem_t;      /* f16 or bf16 bits */
#include "backward_args.h"  /* the kernels' arguments (BACKWARD_INPUTS, ...), row_lse2 */

#if FUSED_DQ
#define BACKWARD_KERNEL(step) flash_backward_wgmma_##step
static inline void store_pair(__global elem_t *p, float lo, float hi)
{
    *(__global uint *)p = pack_pair(lo, hi);
}
#include "backward_dq_accum.h"  /* accumulate_pair, flash_backward_wgmma_dq_convert */
#endif

/* Accumulators (mma.sync C fragments side by side, 4 an 8-column tile) as wgmma A operands of 16 columns each:
 * tile 2 kc's pairs, then tile 2 kc + 1's. */
static inline __attribute__((always_inline)) void accumulators_as_a(uint (*a)[4], const float *c, int columns)
{
NV_UNROLL
    for (int kc = 0; kc < columns / 16; kc++)
NV_UNROLL
        for (int i = 0; i < 4; i++)
            a[kc][i] = pack_pair(c[8 * kc + 2 * i], c[8 * kc + 2 * i + 1]);
}

/* A 64-row result (d, regs floats a thread: columns col0 ..), scaled, into rows row0 + 16 (warp % 4) + g (+8) of
 * a [seq, width] slice (rows < seq), its columns from `from` on (the columns before it are another's). */
static inline __attribute__((always_inline)) void store_rows(__global ushort *base, ulong row_stride, const float *d,
                                                             const int regs, const int width, int row0, int seq,
                                                             int col0, int from, float scale, int warp, int lane)
{
    const int g = lane >> 2, t = lane & 3;
NV_UNROLL
    for (int r = 0; r < 2; r++) {
        const int row = row0 + 16 * (warp & 3) + g + 8 * r;
        if (row >= seq)
            continue;
        __global ushort *dst = base + (ulong)row * row_stride + col0 + 2 * t;
NV_UNROLL
        for (int j = 0; j < regs / 4; j++)  /* regs: d's length, a constant */
            if (col0 + 8 * j >= from && col0 + 8 * j < width)
                *(__global uint *)(dst + 8 * j) = pack_pair(d[4 * j + 2 * r] * scale, d[4 * j + 2 * r + 1] * scale);
    }
}

/* Launched as (ceil(seq_kv / OWN_KEYS) * WG, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_wgmma_dkdv(BACKWARD_INPUTS, FUSED_DQ_ARGS BACKWARD_TENSOR(ushort, d_k, dk),
                               BACKWARD_TENSOR(ushort, d_v, dv), BACKWARD_SIZES)
{
    __local uint4 k_tile[OWN_KEYS * ROW_CHUNKS] __attribute__((aligned(1024)));
    __local uint4 v_tile[OWN_KEYS * ROW_CHUNKS_V] __attribute__((aligned(1024)));
    __local uint4 q_tiles[2 * BLOCK_M * ROW_CHUNKS] __attribute__((aligned(1024)));  /* two buffers */
    __local uint4 do_tiles[2 * BLOCK_M * ROW_CHUNKS_V] __attribute__((aligned(1024)));
    __local float lse_rows[2 * BLOCK_M];  /* base 2, +inf: hidden row */
    __local float delta_rows[2 * BLOCK_M];
#if FUSED_DQ
    /* The block's dSᵀ, [128 keys][64 queries]: a 128-byte row a key, 16-byte chunk c of row r at c ^ (r % 8). */
    __local uint4 ds_tile[OWN_KEYS * 8] __attribute__((aligned(1024)));
#endif
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int t = lane & 3;
    const int kb = (int)get_group_id(0), hk = (int)get_group_id(1), b = (int)get_group_id(2);
    const int heads_q = (int)get_num_groups(1) * group;
    const int k0 = kb * OWN_KEYS;
    const int group_key0 = k0 + (SPLIT_D ? 0 : (warp >> 2) * 64);  /* the warpgroup's first key */
    /* The warpgroup's dK products' columns, col0_k .. col0_k + DK_COLS - 1 (64-column panels col0_k / 64 on), of
     * which it stores those from from_k on; dV's likewise. */
    const bool second = SPLIT_D && warp >= 4;
    const int col0_k = second ? DK_COL1 : 0, from_k = second ? DK_FROM1 : 0;
    const int col0_v = second ? DV_COL1 : 0, from_v = second ? DV_FROM1 : 0;
    const int diag = seq_kv - seq_q;

    __global const ushort *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const ushort *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;

    /* The query rows that see keys k0 ..: [first_row, q_end) (cl/mask.h); blocks outside are skipped. Keys no
     * row sees run no block and get exact zeros. */
    const int first_row = mask_row_begin(k0, seq_q, seq_kv), q_end = mask_row_end(k0, OWN_KEYS, seq_q, seq_kv);
    const int q_begin = first_row / BLOCK_M * BLOCK_M;
    const int q_blocks = q_begin < q_end ? (q_end - q_begin + BLOCK_M - 1) / BLOCK_M : 0;
    const int total = group * q_blocks;  /* (query head, query block) pairs, head-major: a fixed order */

    load_block(k_tile, OWN_KEYS, k_base, k_ss, k0, seq_kv, tid);
    load_block_of(CHUNKS_V, v_tile, OWN_KEYS, v_base, v_ss, k0, seq_kv, tid);

    float dk[DK_REGS], dv[DV_REGS];
NV_UNROLL
    for (int i = 0; i < DK_REGS; i++)
        dk[i] = 0.0f;
NV_UNROLL
    for (int i = 0; i < DV_REGS; i++)
        dv[i] = 0.0f;

    /* A operands: the warpgroup's 64 keys of K and V (k-step kk: panel kk / 4, 32 bytes a k-step). */
    const wgmma_desc_t k_desc = wgmma_desc(k_tile, (group_key0 - k0) * 128, 16, 1024);
    const wgmma_desc_t v_desc = wgmma_desc(v_tile, (group_key0 - k0) * 128, 16, 1024);
#if FUSED_DQ
    /* dQ += dS K: A the dS tile MN-major (16 keys, 2048 bytes, a k-step), B K's tile transposed from each
     * product's first column on (its panel, then 2 bytes a column within it). */
    const int dq_col0 = (warp >> 2) * DQ_COLS;
    const wgmma_desc_t ds_desc = wgmma_desc(ds_tile, 0, OWN_KEYS * 128, 1024);
    const wgmma_desc_t k_trans = wgmma_desc(k_tile, 0, OWN_KEYS * 128, 1024);
/* Bytes to the product's first column, col (a multiple of 16): its panel, then 2 bytes a column. */
#define K_COLUMN_BYTES(col) ((uint)((col) / 64 * OWN_KEYS * 128 + (col) % 64 * 2))
    __global float *dq_accum = workspace + accum_off + ((ulong)b * heads_q + (ulong)hk * group) * seq_q * HEAD_DIM;
    /* This thread's dS words: key row ds_row (+8) of the tile, chunk j of the row at j ^ (ds_row % 8). */
    const int ds_row = group_key0 - k0 + 16 * (warp & 3) + (lane >> 2);
    __local uint *ds_words = (__local uint *)ds_tile;
    const bool keys_past_end = k0 + OWN_KEYS > seq_kv;
#endif

    for (int it = -1, stage = 1; it < total; it++, stage ^= 1) {
        /* Block it + 1 goes into buffer stage ^ 1 while block it (buffer stage) is computed. The barrier
         * publishes the landed block and frees the buffer the block before it used (every warpgroup has
         * waited for its products by then). */
        if (it >= 0) {
            COPY_ASYNC_WAIT(0);
            fence_proxy_async();  /* the landed rows (and zero rows) to wgmma's reads */
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (it + 1 < total) {
            const int nh = (it + 1) / q_blocks, nq0 = q_begin + (it + 1) % q_blocks * BLOCK_M;
            const int h = hk * group + nh;
            load_block(q_tiles + (stage ^ 1) * BLOCK_M * ROW_CHUNKS, BLOCK_M,
                       q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, nq0, seq_q, tid);
            load_block_of(CHUNKS_V, do_tiles + (stage ^ 1) * BLOCK_M * ROW_CHUNKS_V, BLOCK_M,
                          d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, nq0, seq_q, tid);
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
#if MASKED
        /* No key of the warpgroup seen by a query of the block: nothing to add. FUSED_DQ (causal only): the
         * work-group's (both warpgroups meet at the barrier before dQ's product; where one sees the block, the
         * other's P is 0). */
        if (FUSED_DQ ? k0 > q0 + BLOCK_M - 1 + diag : GROUP_SKIP(mask_tile_hidden(q0, BLOCK_M, group_key0, 64, diag)))
            continue;
        const bool edge = mask_tile_edge(q0, BLOCK_M, group_key0, 64, diag);
#endif
        __local const uint4 *q_tile = q_tiles + stage * BLOCK_M * ROW_CHUNKS;
        __local const uint4 *do_tile = do_tiles + stage * BLOCK_M * ROW_CHUNKS_V;
        __local const float *lse2 = lse_rows + stage * BLOCK_M;
        __local const float *drow = delta_rows + stage * BLOCK_M;
        const float alibi2 = HEAD_ALIBI2(hk * group + it / q_blocks);  /* 0 without ALiBi */

        /* Sᵀ = K Qᵀ, dPᵀ = V dOᵀ: this thread's keys (rows) group_key0 + 16 (warp % 4) + g (+8), its
         * queries (columns) q0 + 8 j + 2 t (+1). */
        float s[BLOCK_M / 2], dp[BLOCK_M / 2];
        uint pa[BLOCK_M / 16][4], dsa[BLOCK_M / 16][4];
        const wgmma_desc_t q_desc = wgmma_desc(q_tile, 0, 16, 1024), do_desc = wgmma_desc(do_tile, 0, 16, 1024);
        const wgmma_desc_t do_trans = wgmma_desc(do_tile, col0_v / 64 * BLOCK_M * 128, BLOCK_M * 128, 1024);
        const wgmma_desc_t q_trans = wgmma_desc(q_tile, col0_k / 64 * BLOCK_M * 128, BLOCK_M * 128, 1024);
        wgmma_fence();
        ISSUE_SCORES(s, k_desc, OWN_KEYS, q_desc, BLOCK_M, M_PART, KSTEPS);
        wgmma_commit();
        ISSUE_SCORES(dp, v_desc, OWN_KEYS, do_desc, BLOCK_M, M_PART, KSTEPS_V);
        wgmma_commit();
#if BWD_OVERLAP
        wgmma_wait_one();  /* Sᵀ's; dPᵀ's still run */
#else
        wgmma_wait_all();
#endif
        WGMMA_HOLD(s, BLOCK_M / 2);
        /* Pᵀ (with the softcap and ALiBi, score_mod.h). */
#ifdef SOFTCAP2
        float cap_slope[BLOCK_M / 2];  /* the cap's derivative at each score, which dS takes on */
#endif
#if ALIBI
        float dist[4];  /* ALiBi's key - row - diag at element e of query tile 0; tile j's is dist[e] - 8 j */
NV_UNROLL
        for (int e = 0; e < 4; e++)
            dist[e] = (float)(group_key0 + 16 * (warp & 3) + (lane >> 2) + 8 * (e >> 1) - q0 - 2 * t - (e & 1) -
                              diag);
#endif
NV_UNROLL
        for (int j = 0; j < BLOCK_M / 8; j++)
NV_UNROLL
            for (int e = 0; e < 4; e++) {
                const int qi = 8 * j + 2 * t + (e & 1);
                const int key = group_key0 + 16 * (warp & 3) + (lane >> 2) + 8 * (e >> 1);
                float slope = 1.0f;
                float p = SCORE_P_EXP(EXP2, s[4 * j + e], scale_log2,
                                      SCORE_LSE2_AT(lse2[qi], alibi2, dist[e] - (float)(8 * j)), slope);
#ifdef SOFTCAP2
                cap_slope[4 * j + e] = slope;
#endif
#if MASKED
                if (edge)
                    p = mask_visible(q0 + qi, key, diag) ? p : 0.0f;
#endif
#if FUSED_DQ
                /* A key past seq_kv (a zero row) adds 0 to dQ only if its P is 0: exp2(-lse2) may be inf in f16. */
                if (keys_past_end)
                    p = key < seq_kv ? p : 0.0f;
#endif
                s[4 * j + e] = p;
            }
        accumulators_as_a(pa, s, BLOCK_M);
#if BWD_OVERLAP
        /* dV += Pᵀ dO while dSᵀ is computed. */
        WGMMA_HOLD(dv, DV_REGS);
        WGMMA_HOLD_A(&pa[0][0], BLOCK_M / 4);
        wgmma_fence();
        ISSUE_DV(dv, pa, do_trans);
        wgmma_commit();
        wgmma_wait_one();  /* dPᵀ's; dV's may still run */
#endif
        WGMMA_HOLD(dp, BLOCK_M / 2);
        /* dSᵀ = Pᵀ ∘ (dPᵀ - D). */
NV_UNROLL
        for (int j = 0; j < BLOCK_M / 8; j++)
NV_UNROLL
            for (int e = 0; e < 4; e++) {
                dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - drow[8 * j + 2 * t + (e & 1)]);
#ifdef SOFTCAP2
                dp[4 * j + e] *= cap_slope[4 * j + e];
#endif
            }
        accumulators_as_a(dsa, dp, BLOCK_M);
#if FUSED_DQ
        /* dSᵀ into the tile for dQ's product: word (key row, query pair t) of query tile j, 8 queries a chunk. */
NV_UNROLL
        for (int j = 0; j < BLOCK_M / 8; j++)
NV_UNROLL
            for (int r = 0; r < 2; r++)
                ds_words[(ds_row + 8 * r) * 32 + ((j ^ (lane >> 2)) << 2) + t] = dsa[j >> 1][2 * (j & 1) + r];
        fence_proxy_async();
#endif

        /* dK += dSᵀ Q (and dV += Pᵀ dO): 16 queries a product. */
        WGMMA_HOLD(dk, DK_REGS);
        WGMMA_HOLD_A(&dsa[0][0], BLOCK_M / 4);
#if !BWD_OVERLAP
        WGMMA_HOLD(dv, DV_REGS);
        WGMMA_HOLD_A(&pa[0][0], BLOCK_M / 4);
#endif
        wgmma_fence();
#if !BWD_OVERLAP
        ISSUE_DV(dv, pa, do_trans);
#endif
        ISSUE_DK(dk, dsa, q_trans);
        wgmma_commit();
#if FUSED_DQ
        /* dQ's block += dS K over the work-group's 128 keys (both warpgroups' dS rows: the barrier), this
         * warpgroup's DQ_COLS columns, while dK's products run. */
        float dq[DQ_COLS / 2];
        barrier(CLK_LOCAL_MEM_FENCE);
        wgmma_fence();
NV_UNROLL
        for (int part = 0; part < DQ_COLS / DQ_PART; part++)
NV_UNROLL
            for (int kc = 0; kc < OWN_KEYS / 16; kc++)
                wgmma_ss_trans(DQ_PART, &dq[part * DQ_PART / 2], wgmma_desc_plus(ds_desc, kc * 2048),
                               wgmma_desc_plus(k_trans, K_COLUMN_BYTES(dq_col0 + part * DQ_PART) + kc * 2048), kc);
        wgmma_commit();
#endif
        wgmma_wait_all();
        WGMMA_HOLD(dv, DV_REGS);
        WGMMA_HOLD(dk, DK_REGS);
        WGMMA_HOLD_A(&pa[0][0], BLOCK_M / 4);  /* A's registers stay A's until the wait */
        WGMMA_HOLD_A(&dsa[0][0], BLOCK_M / 4);
#if FUSED_DQ
        WGMMA_HOLD(dq, DQ_COLS / 2);
        /* Rows q0 + 16 (warp % 4) + g (+8), columns dq_col0 + 8 j + 2 t (+1). */
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            const int row = q0 + 16 * (warp & 3) + (lane >> 2) + 8 * r;
            if (row >= seq_q)
                continue;
            const ulong h_off = (ulong)(it / q_blocks) * seq_q * HEAD_DIM;  /* the block's query head */
            __global float *dst = dq_accum + h_off + (ulong)row * HEAD_DIM + dq_col0 + 2 * t;
NV_UNROLL
            for (int j = 0; j < DQ_COLS / 8; j++)
                accumulate_pair(dst + 8 * j, dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
        }
#endif
    }
    COPY_ASYNC_WAIT(0);

    store_rows(d_k + dk_off + (ulong)b * dk_sb + (ulong)hk * dk_sh, dk_ss, dk, DK_REGS, HEAD_DIM, group_key0, seq_kv,
               col0_k, from_k, scale, warp, lane);
    store_rows(d_v + dv_off + (ulong)b * dv_sb + (ulong)hk * dv_sh, dv_ss, dv, DV_REGS, HEAD_DIM_V, group_key0, seq_kv,
               col0_v, from_v, 1.0f, warp, lane);
}

#if !FUSED_DQ
/* Launched as (ceil(seq_q / OWN) * WG, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_wgmma_dq(BACKWARD_INPUTS, BACKWARD_TENSOR(ushort, d_q, dq), BACKWARD_SIZES)
{
    __local uint4 q_tile[OWN * ROW_CHUNKS] __attribute__((aligned(1024)));
    __local uint4 do_tile[OWN * ROW_CHUNKS_V] __attribute__((aligned(1024)));
    __local uint4 k_tiles[2 * BLOCK_N * ROW_CHUNKS] __attribute__((aligned(1024)));  /* two buffers */
    __local uint4 v_tiles[2 * BLOCK_N * ROW_CHUNKS_V] __attribute__((aligned(1024)));
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int t = lane & 3;
    int qb, h, b;
    block_coordinates(WINDOW_RIGHT >= 0, 1, &qb, &h, &b);  /* heaviest query blocks first when causal */
    const int hk = h / group;
    const int heads_q = (int)get_num_groups(1);
    const int q0 = qb * OWN;
    const int group_row0 = q0 + (warp >> 2) * 64;  /* the warpgroup's first row */
    const int diag = seq_kv - seq_q;

    __global const ushort *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const ushort *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;
    /* The key blocks the block's rows see (cl/mask.h). */
    const int kv_begin = mask_key_begin(q0, seq_q, seq_kv) / BLOCK_N * BLOCK_N;
    const int kv_end = mask_key_end(q0, OWN, seq_q, seq_kv);

    load_block(q_tile, OWN, q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, q0, seq_q, tid);
    load_block_of(CHUNKS_V, do_tile, OWN, d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, q0, seq_q, tid);
    if (kv_begin < kv_end) {
        load_block(k_tiles, BLOCK_N, k_base, k_ss, kv_begin, seq_kv, tid);
        load_v_block(v_tiles, v_base, v_ss, kv_begin, seq_kv, tid);
    }
    copy_async_commit();

    /* This thread's rows: group_row0 + 16 (warp % 4) + g (+8). */
    const int row_first = group_row0 + 16 * (warp & 3) + (lane >> 2);
    const float alibi2 = HEAD_ALIBI2(h);  /* 0 without ALiBi */
    float lse2[2], drow[2];
    {
        const ulong lse_base = l_off + (ulong)b * l_sb + (ulong)h * l_sh;
        const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q;
        for (int r = 0; r < 2; r++) {
            const int row = row_first + 8 * r;
            lse2[r] = row_lse2(lse, lse_base + (ulong)row * l_ss, row, seq_q);
            drow[r] = row < seq_q ? delta[delta_base + (ulong)row] : 0.0f;
        }
    }

    float dq[OUT_REGS];
NV_UNROLL
    for (int i = 0; i < OUT_REGS; i++)
        dq[i] = 0.0f;

    /* A operands: the warpgroup's 64 rows of Q and dO (k-step kk: panel kk / 4, 32 bytes a k-step). */
    const wgmma_desc_t q_desc = wgmma_desc(q_tile, (warp >> 2) * 64 * 128, 16, 1024);
    const wgmma_desc_t do_desc = wgmma_desc(do_tile, (warp >> 2) * 64 * 128, 16, 1024);

    for (int kb = kv_begin, stage = 0; kb < kv_end; kb += BLOCK_N, stage ^= 1) {
        COPY_ASYNC_WAIT(0);
        fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + BLOCK_N < kv_end) {
            load_block(k_tiles + (stage ^ 1) * BLOCK_N * ROW_CHUNKS, BLOCK_N, k_base, k_ss, kb + BLOCK_N, seq_kv, tid);
            load_v_block(v_tiles + (stage ^ 1) * BLOCK_N * ROW_CHUNKS_V, v_base, v_ss, kb + BLOCK_N, seq_kv, tid);
        }
        copy_async_commit();
#if MASKED
        /* No key of the block seen by a row of the warpgroup: nothing to add. */
        if (GROUP_SKIP(mask_tile_hidden(group_row0, 64, kb, BLOCK_N, diag)))
            continue;
        const bool edge = kb + BLOCK_N > seq_kv || mask_tile_edge(group_row0, 64, kb, BLOCK_N, diag);
#else
        const bool edge = kb + BLOCK_N > seq_kv;
#endif
        __local const uint4 *k_tile = k_tiles + stage * BLOCK_N * ROW_CHUNKS;
        __local const uint4 *v_tile = v_tiles + stage * BLOCK_N * ROW_CHUNKS_V;

        /* S = Q Kᵀ, dP = dO Vᵀ: this thread's columns are keys kb + 8 j + 2 t (+1). */
        float s[BLOCK_N / 2], dp[BLOCK_N / 2];
        uint dsa[BLOCK_N / 16][4];
        const wgmma_desc_t k_desc = wgmma_desc(k_tile, 0, 16, 1024), v_desc = wgmma_desc(v_tile, 0, 16, 1024);
        const wgmma_desc_t k_trans = wgmma_desc(k_tile, 0, BLOCK_N * 128, 1024);
        wgmma_fence();
        ISSUE_SCORES(s, q_desc, OWN, k_desc, BLOCK_N, N_PART, KSTEPS);
        wgmma_commit();
        ISSUE_SCORES(dp, do_desc, OWN, v_desc, BLOCK_N, N_PART, KSTEPS_V);
        wgmma_commit();
#if BWD_OVERLAP
        wgmma_wait_one();  /* S's; dP's still run */
#else
        wgmma_wait_all();
#endif
        WGMMA_HOLD(s, BLOCK_N / 2);
#ifdef SOFTCAP2
        float cap_slope[BLOCK_N / 2];  /* the cap's derivative at each score, which dS takes on */
#endif
#if ALIBI
        float dist[4];  /* ALiBi's key - row - diag at element e of key tile 0; tile j's is dist[e] + 8 j */
NV_UNROLL
        for (int e = 0; e < 4; e++)
            dist[e] = (float)(kb + 2 * t + (e & 1) - row_first - 8 * (e >> 1) - diag);
#endif
NV_UNROLL
        for (int j = 0; j < BLOCK_N / 8; j++)
NV_UNROLL
            for (int e = 0; e < 4; e++) {
                const int key = kb + 8 * j + 2 * t + (e & 1);
                float slope = 1.0f;
                float p = SCORE_P_EXP(EXP2, s[4 * j + e], scale_log2,
                                      SCORE_LSE2_AT(lse2[e >> 1], alibi2, dist[e] + (float)(8 * j)), slope);
#ifdef SOFTCAP2
                cap_slope[4 * j + e] = slope;
#endif
                if (edge)
                    p = key < seq_kv && mask_visible(row_first + 8 * (e >> 1), key, diag) ? p : 0.0f;
                s[4 * j + e] = p;
            }
#if BWD_OVERLAP
        wgmma_wait_all();
#endif
        WGMMA_HOLD(dp, BLOCK_N / 2);
NV_UNROLL
        for (int j = 0; j < BLOCK_N / 8; j++)
NV_UNROLL
            for (int e = 0; e < 4; e++) {
                dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - drow[e >> 1]);
#ifdef SOFTCAP2
                dp[4 * j + e] *= cap_slope[4 * j + e];
#endif
            }
        accumulators_as_a(dsa, dp, BLOCK_N);

        /* dQ += dS K: 16 keys a product. */
        WGMMA_HOLD(dq, OUT_REGS);
        WGMMA_HOLD_A(&dsa[0][0], BLOCK_N / 4);
        wgmma_fence();
        ISSUE_TRANS(HEAD_DIM, dq, dsa, k_trans, BLOCK_N);
        wgmma_commit();
        wgmma_wait_all();
        WGMMA_HOLD(dq, OUT_REGS);
        WGMMA_HOLD_A(&dsa[0][0], BLOCK_N / 4);
    }
    COPY_ASYNC_WAIT(0);

    store_rows(d_q + dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh, dq_ss, dq, OUT_REGS, HEAD_DIM, group_row0, seq_q, 0,
               0, scale, warp, lane);
}
#endif /* !FUSED_DQ */
