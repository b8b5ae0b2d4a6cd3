/*
 * backward_mma_skeleton.h: the backward pass on NVIDIA tensor cores (sm_80+,
 * mma.sync through inline PTX), f32 accumulation, written once over an
 * operand layer: flash_backward_mma.cl (f16/bf16 storage, m16n8k16,
 * ldmatrix) and flash_backward_tf32.cl (f32 storage, TF32 or 3xTF32 on
 * m16n8k8, plain local loads) each define the storage and tile types, the
 * fragment loads and the mma (the list at the end of this comment), then
 * include this.
 *
 * Same three steps, arguments and results contract as flash_backward.cl
 * (src/backward.c enqueues them in order): flash_backward_dot (D_i =
 * dO_i.O_i, backward_dot.h), then the dkdv and dq kernels below, named by
 * the layer's BACKWARD_KERNEL (flash_backward_mma_dkdv, ..._tf32_dq, ...).
 *
 * dkdv: one work-group of WARPS warps per BLOCK_N keys of one (kv head,
 * batch). K and V stay in local memory; warp w owns keys
 * [16 KEY_TILES w, 16 KEY_TILES (w + 1)) of the block and keeps their dK and
 * dV as mma accumulators. Past d = 128 (SPLIT_D) there is no room for all
 * of dK's and dV's columns in a warp: warps 2w and 2w + 1 own the same keys,
 * both compute their Sᵀ and dPᵀ, and each keeps half of the columns (up to
 * 1.5x the pass's products; P and dS through local memory to the other warp
 * would leave no room for the tiles at d = 256, as in the wgmma backward). It walks the group's query heads in order and,
 * per head, the BLOCK_M-row blocks of Q and dO that can see its keys
 * (double-buffered with cp.async, with their rows' LSE and D). Per block,
 * in chunks of Q_CHUNK queries, everything is computed transposed (keys as
 * the mma's rows), the warp's key tiles the innermost loop so that each Q
 * and dO fragment read from local memory serves all of them (ldmatrix's
 * bandwidth, not the mma's, bounds this pass):
 *     Sᵀ = K Qᵀ, dPᵀ = V dOᵀ           K and V as A, Q and dO as B (load_b)
 *     Pᵀ = exp2(scale_log2 Sᵀ - lse2)  (0 where hidden), dSᵀ = Pᵀ ∘ (dPᵀ - D)
 *     dV += Pᵀ dO, dK += dSᵀ Q          Pᵀ and dSᵀ: the accumulators as A
 *                                       (accumulators_as_a), dO and Q
 *                                       [query][d] as B (k = query:
 *                                       load_b_trans)
 * so P and dS never touch local memory.
 *
 * dq: one work-group per BLOCK_M query rows of one (head, batch); warp w
 * owns 16 ROW_TILES rows. Q and dO stay in local memory, K and V blocks of
 * BLOCK_N keys stream through two buffers. Per block, in chunks of K_CHUNK
 * keys: S = Q Kᵀ, dP = dO Vᵀ, P, dS = P ∘ (dP - D), dQ += dS K (dS the
 * accumulators as A, K [key][d] as B by load_b_trans).
 *
 * FUSED_DQ 1 (the "backward-tensor-core-fused" entry; a layer with a dS
 * tile, flash_backward_mma.cl) drops the dQ pass: dkdv also writes each
 * chunk's dS to local memory ([key][query], padded rows), computes
 * dQ_chunk = dS K there (dS as A by load_ds_a, K as B) and adds it into an
 * f32 accumulator in the workspace; dq_convert then scales and stores dQ.
 * The adds are ordered: each (batch, head, chunk of Q_CHUNK query rows) has
 * a turn counter, and the K/V blocks that reach the chunk's query block add
 * to it from the last block down: a warp of block kb waits until every warp
 * of the blocks after it has added (the counter reads WARPS x (last - kb)),
 * adds its tiles, and passes its turn (+1) when it comes to its next chunk's
 * adds (a release right after the adds would stall until they are
 * performed). So every dQ element sums its partials in the same order every
 * run. Descending, because causal block kb + 1 starts its query blocks one
 * block later than kb: it reaches each one an iteration earlier, and kb
 * finds its turn already there. Work-groups take their K/V block from a
 * ticket counter in the order they start, last block first, so a wait is
 * only ever on work-groups already running: no deadlock, whatever order the
 * device schedules them in. Only the adds hold a turn; each chunk's dQ
 * tiles are computed before the wait. flash_backward_dot zeroes the
 * accumulator and the counters.
 *
 * No float atomics race: every dQ, dK, dV element is summed in a fixed
 * order, so the results are the same bits every run. Causal masking is
 * bottom-right (query i sees key j iff j <= i + seq_kv - seq_q); a row
 * whose LSE is -inf, or past seq_q, gets lse2 = +inf, so its P is exactly 0
 * (dQ = 0 for a row that sees no key). Keys past seq_kv load as zero rows:
 * they add nothing to dQ (masked), and their own dK/dV rows are never
 * stored; a key no row sees runs no block and gets exact zeros.
 *
 * -DNV_EMULATE=1 runs the kernels anywhere (PoCL in CI) on cl/nv_emulate.h,
 * whose lane exchanges are work-group barriers: every work-item must reach
 * every ldmatrix and mma together. So the loops' bounds are the
 * work-group's; the causal skips of tiles and chunks past the diagonal are
 * per warp natively and per work-group emulated (WARP_SKIP: the tiles a
 * warp would skip are then computed and masked to 0); in the fused pass
 * every warp computes a dQ tile (a warp without one discards it), and the
 * turns become OpenCL atomics. Keep it so.
 *
 * The __local arrays below are what src/kernels.c counts
 * (backward_mma_local_bytes, backward_mma_fused_local_bytes,
 * backward_tf32_local_bytes), with a tile row of TILE_ROW tile_t: keep them
 * in step.
 *
 * The operand layer, defined by the includer (after backward_mma_options.h):
 *   BACKWARD_KERNEL(step)  a kernel's name
 *   elem_t             a tensor element in global memory
 *   tile_t, TILE_ROW   a local tile's element and its elements a row
 *   frag_t             an operand register: A is frag_t[4], B frag_t[2 B_TILES]
 *   FRAG_REGS          the 32-bit registers a frag_t takes
 *   MMA_K, B_TILES     the k of one mma; the 8-column n-tiles one B covers
 *   Q_CHUNK, K_CHUNK   queries (dkdv) and keys (dq) an inner step: multiples
 *                      of MMA_K and of 8 B_TILES
 *   EXP2               P's exponent
 *   struct lanes lane_offsets(lane)   what a lane's fragment loads take of it,
 *                      passed to them by pointer (a struct by value to an
 *                      always-inlined function leaves LLVM noalias scope
 *                      intrinsics in -O0 builds, which Oclgrind cannot run)
 *   load_rows(tile, rows, base, row_stride, first_row, seq, tid)   rows of a
 *       [seq, d] slice into a tile by cp.async, zeros past seq
 *   load_a(a, tile, row0, kk, lanes)       A: 16 rows from row0, k-step kk
 *   load_b(b, tile, row0, kk, lanes)       B of an [n][d] tile (k = d):
 *                                          8 B_TILES rows from row0, k-step kk
 *   load_b_trans(b, tile, k0, nb, lanes)   B of a [k][d] tile (n = d): MMA_K
 *                                          rows from k0, n-tiles B_TILES nb..
 *   mma_b(c, a, b)                     c[0 .. B_TILES) += A B
 *   accumulators_as_a(a, c)            MMA_K / 8 accumulator tiles as an A
 *   store_pair(p, lo, hi)              two adjacent results into storage
 *   with FUSED_DQ: ds_t, DS_WORDS (a dS row), clear_ds, store_ds, load_ds_a
 */
#ifndef FLASHCL_BACKWARD_MMA_SKELETON_H
#define FLASHCL_BACKWARD_MMA_SKELETON_H

#if FUSED_DQ && !defined(DS_WORDS)
#error "FUSED_DQ needs an operand layer with a dS tile (flash_backward_mma.cl)"
#endif

#define KSTEPS (HEAD_DIM / MMA_K)                  /* k-steps of the products over d */
#define D_TILES (HEAD_DIM / 8)                     /* 8-column n-tiles of dQ, dK, dV */
#define KEY_TILES (BLOCK_N / (16 * KEY_WARPS))     /* dkdv: 16-key tiles per warp */
#define WARP_KEYS (16 * KEY_TILES)                 /* dkdv: the keys a warp owns */
/* dkdv: dK's and dV's column blocks (a B operand's 8 B_TILES columns each) and those a warp keeps: all, or
 * with SPLIT_D the first half (rounded up) for the even warp of a pair and the rest for the odd one. */
#define COL_BLOCKS (D_TILES / B_TILES)
#define OWN_BLOCKS (SPLIT_D ? (COL_BLOCKS + 1) / 2 : COL_BLOCKS)
#define OWN_TILES (OWN_BLOCKS * B_TILES)
#define ROW_TILES (BLOCK_M / (16 * WARPS))         /* dq: 16-row tiles per warp */
/* dq: the warp's Q and dO A fragments read from local memory once and held in registers for the whole pass
 * (they never change), where they take at most 64 registers a thread: the S and dP products then read only
 * K and V from local memory, whose reads bound the pass. -DDQ_HOLD_Q=0 reads them at every block. */
#ifndef DQ_HOLD_Q
#define DQ_HOLD_Q (ROW_TILES * KSTEPS * 4 * 2 * FRAG_REGS <= 64)
#endif

#include "backward_dot.h"  /* step 0: flash_backward_dot */
#include "block_order.h"
#include "mask.h"           /* CAUSAL, WINDOW_LEFT / WINDOW_RIGHT: which keys a row sees */
#if FUSED_DQ && MASKED && !(CAUSAL && WINDOW_LEFT < 0 && WINDOW_RIGHT == 0)
#error "the fused dQ pass takes no window (its turns count the blocks from the last that reaches a row)"
#endif
#include "backward_args.h"  /* the kernels' arguments (BACKWARD_INPUTS, ...), row_lse2 */

/* Causal skips: a warp's own, or (emulated) the work-group's, whose primitives must be reached by all. */
#if NV_EMULATE
#define WARP_SKIP(warp_cond, group_cond) (group_cond)
#else
#define WARP_SKIP(warp_cond, group_cond) (warp_cond)
#endif

#if FUSED_DQ
#define DQ_TILE_COLS (8 * B_TILES)                           /* a dQ tile: 16 queries x one B's columns */
#define DQ_TILES ((Q_CHUNK / 16) * (HEAD_DIM / DQ_TILE_COLS))  /* dQ tiles of a chunk */
#define DQ_PER_WARP ((DQ_TILES + WARPS - 1) / WARPS)
#endif

#if FUSED_DQ && NV_EMULATE
/* The turns and adds as OpenCL 1.2 atomics; a "warp" sync is the work-group's barrier (reached by all). */
static inline void wait_turn(__global const int *turn, int expected)
{
    while (atomic_add((volatile __global int *)turn, 0) < expected)
        ;
}

static inline void pass_turn(__global int *turn)
{
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    atomic_inc(turn);
}

static inline void warp_sync(void)
{
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
}
#elif FUSED_DQ
/* The turn counters' PTX: an acquire load to wait on, a release add to pass the turn (sm_70+). */
static inline void wait_turn(__global const int *turn, int expected)
{
    int seen;
    do
        __asm__ volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(turn) : "memory");
    while (seen < expected);  /* no pass comes after ours until every warp of ours has seen it: == then */
}

static inline void pass_turn(__global int *turn)
{
    __asm__ volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(turn) : "memory");
}

/* The warp's lanes meet (and their memory operations are ordered) after lane 0's wait, before its pass. */
static inline void warp_sync(void)
{
    __asm__ volatile("bar.warp.sync -1;" ::: "memory");
}
#endif
#if FUSED_DQ
/* accumulate (dQ's accumulator += v: only the work-group holding the turn adds, so the order is fixed) and
 * the dq_convert step. */
#include "backward_dq_accum.h"
#endif

/* Launched as (ceil(seq_kv / BLOCK_N) * WG, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void BACKWARD_KERNEL(dkdv)(BACKWARD_INPUTS, FUSED_DQ_ARGS BACKWARD_TENSOR(elem_t, d_k, dk),
                           BACKWARD_TENSOR(elem_t, d_v, dv), BACKWARD_SIZES)
{
    __local tile_t k_tile[BLOCK_N * TILE_ROW] __attribute__((aligned(16)));
    __local tile_t v_tile[BLOCK_N * TILE_ROW] __attribute__((aligned(16)));
    __local tile_t q_tiles[2 * BLOCK_M * TILE_ROW] __attribute__((aligned(16)));   /* two buffers */
    __local tile_t do_tiles[2 * BLOCK_M * TILE_ROW] __attribute__((aligned(16)));
    __local float lse_rows[2 * BLOCK_M];    /* base 2, +inf: hidden row */
    __local float delta_rows[2 * BLOCK_M];
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int heads_q = (int)get_num_groups(1) * group;
#if FUSED_DQ
    __local ds_t ds_tiles[2 * BLOCK_N * DS_WORDS] __attribute__((aligned(16)));  /* a chunk's dS, two buffers */
    __local int ticket_slot;
    __global float *dq_accum = workspace + accum_off;          /* f32 [batch, heads_q, seq_q, HEAD_DIM] */
    __global int *turns = (__global int *)(workspace + turns_off);  /* [0]: tickets, then the turns */
    if (tid == 0)
        ticket_slot = atomic_inc(turns);
    barrier(CLK_LOCAL_MEM_FENCE);
    /* K/V blocks fastest, a (batch, KV head)'s last block first: the order their turns go in. */
    const int ticket = ticket_slot, kv_blocks = (int)get_num_groups(0);
    const int kb = kv_blocks - 1 - ticket % kv_blocks, hk = ticket / kv_blocks % (int)get_num_groups(1);
    const int b = ticket / kv_blocks / (int)get_num_groups(1);
    const int q_chunks_all = (seq_q + Q_CHUNK - 1) / Q_CHUNK;
    int chunk_count = 0;
    /* The chunk whose turn this warp holds, passed at its next chunk's adds (or at the end): by then
     * its adds are performed, so the release does not stall on them. */
    __global int *held_turn = 0;
#else
    const int kb = (int)get_group_id(0), hk = (int)get_group_id(1), b = (int)get_group_id(2);
#endif
    const int k0 = kb * BLOCK_N;
    const int diag = seq_kv - seq_q;
    const int warp_key0 = (SPLIT_D ? warp >> 1 : warp) * WARP_KEYS;  /* the warp's first key, in the block */
    const int col_block0 = SPLIT_D ? (warp & 1) * OWN_BLOCKS : 0;    /* its first column block of dK, dV */

    __global const elem_t *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const elem_t *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;

    /* The query rows that see keys k0 ..: [first_row, q_end) (cl/mask.h); blocks outside see none of this
     * block's keys and are skipped. Keys no row sees run no block and get exact zeros. */
    const int first_row = mask_row_begin(k0, seq_q, seq_kv), q_end = mask_row_end(k0, BLOCK_N, seq_q, seq_kv);
    const int q_begin = first_row / BLOCK_M * BLOCK_M;
    const int q_blocks = q_begin < q_end ? (q_end - q_begin + BLOCK_M - 1) / BLOCK_M : 0;
    const int total = group * q_blocks;  /* (query head, query block) pairs, head-major: a fixed order */

    load_rows(k_tile, BLOCK_N, k_base, k_ss, k0, seq_kv, tid);
    load_rows(v_tile, BLOCK_N, v_base, v_ss, k0, seq_kv, tid);

    float dk[KEY_TILES][OWN_TILES][4], dv[KEY_TILES][OWN_TILES][4];
NV_UNROLL
    for (int kt = 0; kt < KEY_TILES; kt++)
NV_UNROLL
        for (int n = 0; n < OWN_TILES; n++)
NV_UNROLL
            for (int e = 0; e < 4; e++)
                dk[kt][n][e] = dv[kt][n][e] = 0.0f;

    const struct lanes lanes = lane_offsets(lane);

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
            __local tile_t *qt = q_tiles + (stage ^ 1) * BLOCK_M * TILE_ROW;
            __local tile_t *ot = do_tiles + (stage ^ 1) * BLOCK_M * TILE_ROW;
            load_rows(qt, BLOCK_M, q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, nq0, seq_q, tid);
            load_rows(ot, BLOCK_M, d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, nq0, seq_q, tid);
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
        __local const tile_t *q_tile = q_tiles + stage * BLOCK_M * TILE_ROW;
        __local const tile_t *do_tile = do_tiles + stage * BLOCK_M * TILE_ROW;
        __local const float *lse2 = lse_rows + stage * BLOCK_M;
        __local const float *drow = delta_rows + stage * BLOCK_M;
        const float alibi2 = HEAD_ALIBI2(hk * group + it / q_blocks);  /* 0 without ALiBi */
#if FUSED_DQ
        const int h = hk * group + it / q_blocks;
        __global int *head_turns = turns + 1 + ((ulong)b * heads_q + h) * q_chunks_all;
        __global float *accum_head = dq_accum + ((ulong)b * heads_q + h) * (ulong)seq_q * HEAD_DIM;
        /* The last K/V block that reaches this query block (causal: the first row's diagonal). */
        const int last_kb = CAUSAL ? min(kv_blocks - 1, (q0 + BLOCK_M + diag - 1) / BLOCK_N) : kv_blocks - 1;
#endif

        for (int qc = 0; qc < BLOCK_M; qc += Q_CHUNK) {
#if FUSED_DQ
            __local ds_t *ds = ds_tiles + (chunk_count++ & 1) * BLOCK_N * DS_WORDS;
#endif
#if MASKED
            /* No key of the warp's (emulated: of the block's) seen by a query of the chunk: nothing to add. A
             * warp's key tile hidden beside a visible one is computed and masked (only on the diagonal). */
            const bool warp_hidden = WARP_SKIP(mask_tile_hidden(q0 + qc, Q_CHUNK, k0 + warp_key0, WARP_KEYS, diag),
                                               mask_tile_hidden(q0 + qc, Q_CHUNK, k0, BLOCK_N, diag));
            const bool edge = mask_tile_edge(q0 + qc, Q_CHUNK, k0 + warp_key0, WARP_KEYS, diag);
#else
            const bool warp_hidden = false;
#endif
            if (warp_hidden) {
#if FUSED_DQ
NV_UNROLL
                for (int kt = 0; kt < KEY_TILES; kt++)
                    clear_ds(ds, warp_key0 + 16 * kt, lane);  /* its dS rows are zeros */
#endif
            } else {
#if FUSED_DQ
                /* Keys past seq_kv are zero rows of K and V, but their P (exp2(-lse2)) is not zero, and
                 * its dS feeds dQ here: mask them. */
                const bool past_end = k0 + warp_key0 + WARP_KEYS - 1 >= seq_kv;
#endif
                float s[KEY_TILES][Q_CHUNK / 8][4], dp[KEY_TILES][Q_CHUNK / 8][4];
NV_UNROLL
                for (int kt = 0; kt < KEY_TILES; kt++)
NV_UNROLL
                    for (int n = 0; n < Q_CHUNK / 8; n++)
NV_UNROLL
                        for (int e = 0; e < 4; e++)
                            s[kt][n][e] = dp[kt][n][e] = 0.0f;
                /* Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for the warp's keys x Q_CHUNK queries. The key tiles are the
                 * innermost loop, so each Q and dO fragment read from local memory serves all of them. */
NV_UNROLL
                for (int kk = 0; kk < KSTEPS; kk++) {
                    frag_t ka[KEY_TILES][4], va[KEY_TILES][4];
NV_UNROLL
                    for (int kt = 0; kt < KEY_TILES; kt++) {
                        load_a(ka[kt], k_tile, warp_key0 + 16 * kt, kk, &lanes NV_SCRATCH_ARG);
                        load_a(va[kt], v_tile, warp_key0 + 16 * kt, kk, &lanes NV_SCRATCH_ARG);
                    }
NV_UNROLL
                    for (int nb = 0; nb < Q_CHUNK / (8 * B_TILES); nb++) {
                        frag_t qb[2 * B_TILES], ob[2 * B_TILES];
                        load_b(qb, q_tile, qc + nb * 8 * B_TILES, kk, &lanes NV_SCRATCH_ARG);
                        load_b(ob, do_tile, qc + nb * 8 * B_TILES, kk, &lanes NV_SCRATCH_ARG);
NV_UNROLL
                        for (int kt = 0; kt < KEY_TILES; kt++) {
                            mma_b(&s[kt][nb * B_TILES], ka[kt], qb NV_SCRATCH_ARG);
                            mma_b(&dp[kt][nb * B_TILES], va[kt], ob NV_SCRATCH_ARG);
                        }
                    }
                }
                /* Pᵀ and dSᵀ: this thread holds keys warp_key0 + 16 kt + g (+8), queries qc + 8n + 2t (+1). */
#if ALIBI
                float dist[4];  /* ALiBi's key - row - diag at element e of key tile 0, query tile 0 */
NV_UNROLL
                for (int e = 0; e < 4; e++)
                    dist[e] = (float)(k0 + warp_key0 + g + 8 * (e >> 1) - q0 - qc - 2 * t - (e & 1) - diag);
#endif
NV_UNROLL
                for (int kt = 0; kt < KEY_TILES; kt++)
NV_UNROLL
                    for (int n = 0; n < Q_CHUNK / 8; n++)
NV_UNROLL
                        for (int e = 0; e < 4; e++) {
                            const int qi = qc + n * 8 + 2 * t + (e & 1);
                            const int key = k0 + warp_key0 + 16 * kt + g + 8 * (e >> 1);
                            float slope = 1.0f;  /* the softcap's, where there is one (score_mod.h) */
                            float p = SCORE_P_EXP(EXP2, s[kt][n][e], scale_log2,
                                                  SCORE_LSE2_AT(lse2[qi], alibi2, dist[e] + (float)(16 * kt - 8 * n)),
                                                  slope);
#if MASKED
                            if (edge)
                                p = mask_visible(q0 + qi, key, diag) ? p : 0.0f;
#endif
#if FUSED_DQ
                            if (past_end)
                                p = key < seq_kv ? p : 0.0f;
#endif
                            s[kt][n][e] = p;
                            dp[kt][n][e] = p * (dp[kt][n][e] - drow[qi]) * slope;
                        }
                /* dV += Pᵀ dO, dK += dSᵀ Q: dO and Q [query][d] as B (k = query), each fragment serving all
                 * the warp's key tiles. */
NV_UNROLL
                for (int kc = 0; kc < Q_CHUNK / MMA_K; kc++) {
                    frag_t pa[KEY_TILES][4], dsa[KEY_TILES][4];
NV_UNROLL
                    for (int kt = 0; kt < KEY_TILES; kt++) {
                        accumulators_as_a(pa[kt], &s[kt][kc * (MMA_K / 8)]);
                        accumulators_as_a(dsa[kt], &dp[kt][kc * (MMA_K / 8)]);
#if FUSED_DQ
                        store_ds(ds, warp_key0 + 16 * kt, kc, dsa[kt], g, t);
#endif
                    }
NV_UNROLL
                    for (int i = 0; i < OWN_BLOCKS; i++) {
                        /* With SPLIT_D and an odd count of blocks the odd warp has one fewer: natively it
                         * skips it; emulated (every lane at every mma) it computes the last block again into
                         * a slot it never stores. */
#if NV_EMULATE
                        const int nb = min(col_block0 + i, COL_BLOCKS - 1);
#else
                        const int nb = col_block0 + i;
                        if (!SPLIT_D || nb < COL_BLOCKS)
#endif
                        {
                            frag_t ob[2 * B_TILES], qb[2 * B_TILES];
                            load_b_trans(ob, do_tile, qc + kc * MMA_K, nb, &lanes NV_SCRATCH_ARG);
                            load_b_trans(qb, q_tile, qc + kc * MMA_K, nb, &lanes NV_SCRATCH_ARG);
NV_UNROLL
                            for (int kt = 0; kt < KEY_TILES; kt++) {
                                mma_b(&dv[kt][i * B_TILES], pa[kt], ob NV_SCRATCH_ARG);
                                mma_b(&dk[kt][i * B_TILES], dsa[kt], qb NV_SCRATCH_ARG);
                            }
                        }
                    }
                }
            }
#if FUSED_DQ
            barrier(CLK_LOCAL_MEM_FENCE);  /* the chunk's dS, to every warp */
            if (q0 + qc < seq_q) {
                /* dQ_chunk = dS K over the block's keys: warp w takes tiles w, w + WARPS, ..., all computed
                 * before the turn. */
#if CAUSAL
                const bool chunk_sees_keys = k0 <= q0 + qc + Q_CHUNK - 1 + diag;
#else
                const bool chunk_sees_keys = true;
#endif
                float acc[DQ_PER_WARP][B_TILES][4];
NV_UNROLL
                for (int i = 0; i < DQ_PER_WARP; i++) {
#if NV_EMULATE
                    /* A warp past the last tile computes tile 0's again (all must reach the mma) and discards it. */
                    const int tile = warp + i * WARPS < DQ_TILES ? warp + i * WARPS : 0;
                    const bool no_tile = false;
#else
                    const int tile = warp + i * WARPS;
                    const bool no_tile = tile >= DQ_TILES;
#endif
                    const int mt = tile / (HEAD_DIM / DQ_TILE_COLS), nb = tile % (HEAD_DIM / DQ_TILE_COLS);
NV_UNROLL
                    for (int nt = 0; nt < B_TILES; nt++)
NV_UNROLL
                        for (int e = 0; e < 4; e++)
                            acc[i][nt][e] = 0.0f;
                    if (no_tile || !chunk_sees_keys)
                        continue;
NV_UNROLL
                    for (int ks = 0; ks < BLOCK_N / MMA_K; ks++) {
                        frag_t a[4], kb_frag[2 * B_TILES];
                        load_ds_a(a, ds, ks, mt, &lanes NV_SCRATCH_ARG);
                        load_b_trans(kb_frag, k_tile, ks * MMA_K, nb, &lanes NV_SCRATCH_ARG);
                        mma_b(acc[i], a, kb_frag NV_SCRATCH_ARG);
                    }
                }
                __global int *turn = head_turns + (q0 + qc) / Q_CHUNK;
                if (lane == 0) {
                    if (held_turn)
                        pass_turn(held_turn);
                    wait_turn(turn, (last_kb - kb) * WARPS);
                }
                warp_sync();
                if (chunk_sees_keys) {
NV_UNROLL
                    for (int i = 0; i < DQ_PER_WARP; i++) {
                        const int tile = warp + i * WARPS;
                        const int mt = tile / (HEAD_DIM / DQ_TILE_COLS), nb = tile % (HEAD_DIM / DQ_TILE_COLS);
                        if (tile >= DQ_TILES)
                            continue;
NV_UNROLL
                        for (int r = 0; r < 2; r++) {
                            const int row = q0 + qc + mt * 16 + g + 8 * r;
                            if (row >= seq_q)
                                continue;
                            __global float *dst = accum_head + (ulong)row * HEAD_DIM + nb * DQ_TILE_COLS + 2 * t;
NV_UNROLL
                            for (int nt = 0; nt < B_TILES; nt++) {
                                accumulate(dst + nt * 8, acc[i][nt][2 * r]);
                                accumulate(dst + nt * 8 + 1, acc[i][nt][2 * r + 1]);
                            }
                        }
                    }
                }
                held_turn = turn;
            }
#endif
        }
    }
    COPY_ASYNC_WAIT(0);
#if FUSED_DQ
    /* A work-group barrier, not a warp's: every warp must have seen its last turn before any passes it
     * (inside the loop the next chunk's barrier does this), and it orders all lanes' adds first. */
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (lane == 0 && held_turn)
        pass_turn(held_turn);
#endif

    __global elem_t *dk_base = d_k + dk_off + (ulong)b * dk_sb + (ulong)hk * dk_sh;
    __global elem_t *dv_base = d_v + dv_off + (ulong)b * dv_sb + (ulong)hk * dv_sh;
NV_UNROLL
    for (int kt = 0; kt < KEY_TILES; kt++)
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            const int key = k0 + warp_key0 + 16 * kt + g + 8 * r;
            if (key >= seq_kv)
                continue;
            __global elem_t *dk_dst = dk_base + (ulong)key * dk_ss + col_block0 * B_TILES * 8 + 2 * t;
            __global elem_t *dv_dst = dv_base + (ulong)key * dv_ss + col_block0 * B_TILES * 8 + 2 * t;
NV_UNROLL
            for (int n = 0; n < OWN_TILES; n++) {
                if (SPLIT_D && col_block0 * B_TILES + n >= D_TILES)
                    continue;  /* the odd warp's missing block */
                store_pair(dk_dst + n * 8, dk[kt][n][2 * r] * scale, dk[kt][n][2 * r + 1] * scale);
                store_pair(dv_dst + n * 8, dv[kt][n][2 * r], dv[kt][n][2 * r + 1]);
            }
        }
}

/* Launched as (ceil(seq_q / BLOCK_M) * WG, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void BACKWARD_KERNEL(dq)(BACKWARD_INPUTS, BACKWARD_TENSOR(elem_t, d_q, dq), BACKWARD_SIZES)
{
    __local tile_t q_tile[BLOCK_M * TILE_ROW] __attribute__((aligned(16)));
    __local tile_t do_tile[BLOCK_M * TILE_ROW] __attribute__((aligned(16)));
    __local tile_t k_tiles[2 * BLOCK_N * TILE_ROW] __attribute__((aligned(16)));  /* two buffers */
    __local tile_t v_tiles[2 * BLOCK_N * TILE_ROW] __attribute__((aligned(16)));
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    int qb, h, b;
    block_coordinates(WINDOW_RIGHT >= 0, 1, &qb, &h, &b);  /* heaviest query blocks first when causal */
    const int hk = h / group;
    const int heads_q = (int)get_num_groups(1);
    const int q0 = qb * BLOCK_M;
    const int diag = seq_kv - seq_q;
    const float alibi2 = HEAD_ALIBI2(h);  /* 0 without ALiBi */

    __global const elem_t *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const elem_t *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;
    /* The key blocks the block's rows see (cl/mask.h). */
    const int kv_begin = mask_key_begin(q0, seq_q, seq_kv) / BLOCK_N * BLOCK_N;
    const int kv_end = mask_key_end(q0, BLOCK_M, seq_q, seq_kv);

    load_rows(q_tile, BLOCK_M, q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, q0, seq_q, tid);
    load_rows(do_tile, BLOCK_M, d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, q0, seq_q, tid);
    if (kv_begin < kv_end) {
        load_rows(k_tiles, BLOCK_N, k_base, k_ss, kv_begin, seq_kv, tid);
        load_rows(v_tiles, BLOCK_N, v_base, v_ss, kv_begin, seq_kv, tid);
    }
    copy_async_commit();

    /* This thread's rows: warp_row0 + 16 mt + g (+8). */
    const int warp_row0 = q0 + warp * 16 * ROW_TILES;
    float lse2[ROW_TILES][2], drow[ROW_TILES][2];
    {
        const ulong lse_base = l_off + (ulong)b * l_sb + (ulong)h * l_sh;
        const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seq_q;
NV_UNROLL
        for (int mt = 0; mt < ROW_TILES; mt++)
NV_UNROLL
            for (int r = 0; r < 2; r++) {
                const int row = warp_row0 + 16 * mt + g + 8 * r;
                lse2[mt][r] = row_lse2(lse, lse_base + (ulong)row * l_ss, row, seq_q);
                drow[mt][r] = row < seq_q ? delta[delta_base + (ulong)row] : 0.0f;
            }
    }

    float dq[ROW_TILES][D_TILES][4];
NV_UNROLL
    for (int mt = 0; mt < ROW_TILES; mt++)
NV_UNROLL
        for (int n = 0; n < D_TILES; n++)
NV_UNROLL
            for (int e = 0; e < 4; e++)
                dq[mt][n][e] = 0.0f;

    const struct lanes lanes = lane_offsets(lane);
    const int warp_local0 = warp * 16 * ROW_TILES;  /* this warp's first row in the tiles */
#if DQ_HOLD_Q
    frag_t q_held[KSTEPS][ROW_TILES][4], o_held[KSTEPS][ROW_TILES][4];
    COPY_ASYNC_WAIT(0);  /* Q and dO (and the first K/V block) landed */
    barrier(CLK_LOCAL_MEM_FENCE);
NV_UNROLL
    for (int kk = 0; kk < KSTEPS; kk++)
NV_UNROLL
        for (int mt = 0; mt < ROW_TILES; mt++) {
            load_a(q_held[kk][mt], q_tile, warp_local0 + 16 * mt, kk, &lanes NV_SCRATCH_ARG);
            load_a(o_held[kk][mt], do_tile, warp_local0 + 16 * mt, kk, &lanes NV_SCRATCH_ARG);
        }
#endif

    for (int kb = kv_begin, stage = 0; kb < kv_end; kb += BLOCK_N, stage ^= 1) {
        COPY_ASYNC_WAIT(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + BLOCK_N < kv_end) {
            load_rows(k_tiles + (stage ^ 1) * BLOCK_N * TILE_ROW, BLOCK_N, k_base, k_ss, kb + BLOCK_N, seq_kv, tid);
            load_rows(v_tiles + (stage ^ 1) * BLOCK_N * TILE_ROW, BLOCK_N, v_base, v_ss, kb + BLOCK_N, seq_kv, tid);
        }
        copy_async_commit();
        __local const tile_t *k_tile = k_tiles + stage * BLOCK_N * TILE_ROW;
        __local const tile_t *v_tile = v_tiles + stage * BLOCK_N * TILE_ROW;

        for (int kc0 = 0; kc0 < BLOCK_N; kc0 += K_CHUNK) {
            const int key_first = kb + kc0;
            if (key_first >= seq_kv)
                break;
#if MASKED
            /* No key of the chunk seen by a row of the warp (emulated: of the block): nothing to add. */
            if (WARP_SKIP(mask_tile_hidden(warp_row0, 16 * ROW_TILES, key_first, K_CHUNK, diag),
                          mask_tile_hidden(q0, BLOCK_M, key_first, K_CHUNK, diag)))
                continue;
            const bool edge =
                key_first + K_CHUNK > seq_kv || mask_tile_edge(warp_row0, 16 * ROW_TILES, key_first, K_CHUNK, diag);
#else
            const bool edge = key_first + K_CHUNK > seq_kv;
#endif
            float s[ROW_TILES][K_CHUNK / 8][4], dp[ROW_TILES][K_CHUNK / 8][4];
NV_UNROLL
            for (int mt = 0; mt < ROW_TILES; mt++)
NV_UNROLL
                for (int n = 0; n < K_CHUNK / 8; n++)
NV_UNROLL
                    for (int e = 0; e < 4; e++)
                        s[mt][n][e] = dp[mt][n][e] = 0.0f;
            /* S = Q Kᵀ, dP = dO Vᵀ. */
NV_UNROLL
            for (int kk = 0; kk < KSTEPS; kk++) {
#if DQ_HOLD_Q
                frag_t (*qa)[4] = q_held[kk], (*oa)[4] = o_held[kk];
#else
                frag_t qa[ROW_TILES][4], oa[ROW_TILES][4];
NV_UNROLL
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    load_a(qa[mt], q_tile, warp_local0 + 16 * mt, kk, &lanes NV_SCRATCH_ARG);
                    load_a(oa[mt], do_tile, warp_local0 + 16 * mt, kk, &lanes NV_SCRATCH_ARG);
                }
#endif
NV_UNROLL
                for (int nb = 0; nb < K_CHUNK / (8 * B_TILES); nb++) {
                    frag_t kb_frag[2 * B_TILES], vb_frag[2 * B_TILES];
                    load_b(kb_frag, k_tile, kc0 + nb * 8 * B_TILES, kk, &lanes NV_SCRATCH_ARG);
                    load_b(vb_frag, v_tile, kc0 + nb * 8 * B_TILES, kk, &lanes NV_SCRATCH_ARG);
NV_UNROLL
                    for (int mt = 0; mt < ROW_TILES; mt++) {
                        mma_b(&s[mt][nb * B_TILES], qa[mt], kb_frag NV_SCRATCH_ARG);
                        mma_b(&dp[mt][nb * B_TILES], oa[mt], vb_frag NV_SCRATCH_ARG);
                    }
                }
            }
            /* P, dS: this thread holds rows warp_row0 + 16 mt + g (+8), keys key_first + 8n + 2t (+1). */
#if ALIBI
            float dist[4];  /* ALiBi's key - row - diag at element e of row tile 0, key tile 0: + 8 n - 16 mt */
NV_UNROLL
            for (int e = 0; e < 4; e++)
                dist[e] = (float)(key_first + 2 * t + (e & 1) - warp_row0 - g - 8 * (e >> 1) - diag);
#endif
NV_UNROLL
            for (int mt = 0; mt < ROW_TILES; mt++)
NV_UNROLL
                for (int n = 0; n < K_CHUNK / 8; n++)
NV_UNROLL
                    for (int e = 0; e < 4; e++) {
                        const int row = warp_row0 + 16 * mt + g + 8 * (e >> 1);
                        const int key = key_first + n * 8 + 2 * t + (e & 1);
                        float slope = 1.0f;  /* the softcap's, where there is one (score_mod.h) */
                        float p = SCORE_P_EXP(EXP2, s[mt][n][e], scale_log2,
                                              SCORE_LSE2_AT(lse2[mt][e >> 1], alibi2,
                                                            dist[e] + (float)(8 * n - 16 * mt)), slope);
                        if (edge)
                            p = key < seq_kv && mask_visible(row, key, diag) ? p : 0.0f;
                        dp[mt][n][e] = p * (dp[mt][n][e] - drow[mt][e >> 1]) * slope;
                    }
            /* dQ += dS K: K [key][d] as B (k = key). */
NV_UNROLL
            for (int kc = 0; kc < K_CHUNK / MMA_K; kc++) {
                frag_t dsa[ROW_TILES][4];
NV_UNROLL
                for (int mt = 0; mt < ROW_TILES; mt++)
                    accumulators_as_a(dsa[mt], &dp[mt][kc * (MMA_K / 8)]);
NV_UNROLL
                for (int nb = 0; nb < D_TILES / B_TILES; nb++) {
                    frag_t kb_frag[2 * B_TILES];
                    load_b_trans(kb_frag, k_tile, kc0 + kc * MMA_K, nb, &lanes NV_SCRATCH_ARG);
NV_UNROLL
                    for (int mt = 0; mt < ROW_TILES; mt++)
                        mma_b(&dq[mt][nb * B_TILES], dsa[mt], kb_frag NV_SCRATCH_ARG);
                }
            }
        }
    }
    COPY_ASYNC_WAIT(0);

    __global elem_t *dq_base = d_q + dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh;
NV_UNROLL
    for (int mt = 0; mt < ROW_TILES; mt++)
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            const int row = warp_row0 + 16 * mt + g + 8 * r;
            if (row >= seq_q)
                continue;
            __global elem_t *dst = dq_base + (ulong)row * dq_ss + 2 * t;
NV_UNROLL
            for (int n = 0; n < D_TILES; n++)
                store_pair(dst + n * 8, dq[mt][n][2 * r] * scale, dq[mt][n][2 * r + 1] * scale);
        }
}

#endif /* FLASHCL_BACKWARD_MMA_SKELETON_H */
