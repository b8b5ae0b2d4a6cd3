/*
 * flash_backward_mma.cl: the backward pass on NVIDIA tensor cores (sm_80+),
 * from OpenCL C through inline PTX. f16 or bf16 storage, f32 accumulation.
 *
 * Same three steps, arguments and results contract as flash_backward.cl
 * (src/backward.c enqueues them in order): flash_backward_dot (D_i = dO_i.O_i,
 * backward_dot.h), flash_backward_mma_dkdv, flash_backward_mma_dq. The host
 * picks this file on an NVIDIA device of compute capability >= 8.0 whose
 * compiler passed the probe, for 16-byte-aligned views and HEAD_DIM a
 * multiple of 16 up to 128.
 *
 * flash_backward_mma_dkdv: one work-group of WARPS warps per BLOCK_N keys of
 * one (kv head, batch). K and V stay in local memory; warp w owns keys
 * [16 KEY_TILES w, 16 KEY_TILES (w + 1)) of the block and keeps their dK and
 * dV as mma accumulators. It walks the group's query heads in order and,
 * per head, the BLOCK_M-row blocks of Q and dO that can see its keys
 * (double-buffered with cp.async, with their rows' LSE and D). Per block,
 * in chunks of Q_CHUNK queries, everything is computed transposed (keys as
 * the mma's rows):
 *     Sᵀ = K Qᵀ, dPᵀ = V dOᵀ           mma.sync, K and V as A (ldmatrix),
 *                                       Q and dO as B (ldmatrix)
 *     Pᵀ = exp2(scale_log2 Sᵀ - lse2)  (0 where hidden), dSᵀ = Pᵀ ∘ (dPᵀ - D)
 *     dV += Pᵀ dO, dK += dSᵀ Q          Pᵀ and dSᵀ repacked from the
 *                                       accumulators as A (rounded to the
 *                                       storage type, as FlashAttention-2
 *                                       does), dO and Q as B (ldmatrix .trans)
 * so P and dS never touch local memory.
 *
 * flash_backward_mma_dq: one work-group per BLOCK_M query rows of one (head,
 * batch); warp w owns 16 ROW_TILES rows. Q and dO stay in local memory, K
 * and V blocks of BLOCK_N keys stream through two buffers. Per block, in
 * chunks of K_CHUNK keys: S = Q Kᵀ, dP = dO Vᵀ, P, dS = P ∘ (dP - D),
 * dQ += dS K (dS repacked as A, K as B by ldmatrix .trans).
 *
 * FUSED_DQ 1 (the "backward-tensor-core-fused" entry) drops the dQ pass:
 * flash_backward_mma_dkdv also writes each chunk's dS to local memory
 * ([key][query], padded rows), computes dQ_chunk = dS K there (dS by
 * ldmatrix .trans as A, K as B) and adds it into an f32 accumulator in the
 * workspace; flash_backward_mma_dq_convert then scales and stores dQ. The
 * adds are ordered: each (batch, head, chunk of Q_CHUNK query rows) has a turn
 * counter, and the K/V blocks that reach the chunk's query block add to it
 * from the last block down: a warp of block kb waits until every warp of the
 * blocks after it has added (the counter reads WARPS x (last - kb)), adds
 * its tiles, and passes its turn (+1) when it comes to its next chunk's adds
 * (a release right after the adds would stall until they are performed). So every dQ element sums its partials
 * in the same order every run. Descending, because causal block kb + 1
 * starts its query blocks one block later than kb: it reaches each one an
 * iteration earlier, and kb finds its turn already there. Work-groups take
 * their K/V block from a ticket counter in the order they start, last block
 * first, so a wait is only ever on work-groups already running: no deadlock,
 * whatever order the device schedules them in. Only the adds hold a turn;
 * each chunk's dQ tiles are computed before the wait. flash_backward_dot
 * zeroes the accumulator and the counters.
 *
 * No float atomics race: every dQ, dK, dV element is summed in a fixed
 * order, so the results are the same bits every run.
 *
 * -DNV_EMULATE=1 runs both kernels anywhere (PoCL) on cl/nv_emulate.h, whose
 * lane exchanges are work-group barriers: every work-item must reach every
 * ldmatrix and mma together, so there the causal skips are the work-group's
 * (a tile or chunk past every query is masked, not skipped) and every warp
 * computes a dQ tile (a warp without one discards it); the turns become
 * OpenCL atomics. Causal masking is
 * bottom-right (query i sees key j iff j <= i + seq_kv - seq_q); a row whose
 * LSE is -inf, or past seq_q, gets lse2 = +inf here, so its P is exactly 0.
 * Keys past seq_kv load as zero rows: they add nothing to dQ (masked), and
 * their own dK/dV rows are never stored.
 *
 * Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16" (g = lane/4,
 * t = lane%4). Local tiles are [row][HEAD_DIM] in 16-byte chunks laid out
 * so ldmatrix's eight row addresses hit distinct banks (nv_mma16.h's
 * swizzle: an XOR with the row, or an odd row stride). Keep backward_mma_local_bytes() in
 * src/kernels.c in step with the __local arrays below.
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
#ifndef DTYPE
#define DTYPE 1              /* 1 f16, 2 bf16 */
#endif
#ifndef FUSED_DQ
#define FUSED_DQ 0           /* 1: dQ accumulated by the dK/dV pass (see above) */
#endif

#if HEAD_DIM % 16 != 0 || HEAD_DIM > 128 || HEAD_DIM < 16
#error "HEAD_DIM must be a multiple of 16, at most 128"
#endif
#if WARPS < 1 || WARPS > 8 || WG != 32 * WARPS
#error "WARPS must be 1..8 and WG 32 * WARPS"
#endif
#if BLOCK_N % 16 != 0 || BLOCK_M % 16 != 0
#error "BLOCK_M and BLOCK_N must be multiples of 16"
#endif
#if BLOCK_N % (16 * WARPS) != 0 || BLOCK_M % (16 * WARPS) != 0
#error "BLOCK_M and BLOCK_N must be multiples of 16 * WARPS (each warp owns whole 16-row tiles)"
#endif

#define KSTEPS (HEAD_DIM / 16)                     /* k-steps of the products over d */
#define D_TILES (HEAD_DIM / 8)                     /* 8-column n-tiles of dQ, dK, dV */
#define KEY_TILES (BLOCK_N / (16 * WARPS))         /* dkdv: 16-key tiles per warp */
#define ROW_TILES (BLOCK_M / (16 * WARPS))         /* dq: 16-row tiles per warp */
#define Q_CHUNK (BLOCK_M % 32 == 0 ? 32 : 16)      /* dkdv: queries per inner step */
#define K_CHUNK (BLOCK_N % 32 == 0 ? 32 : 16)      /* dq: keys per inner step */

#if FUSED_DQ
#define DS_WORDS (Q_CHUNK / 2 + 4)  /* a dS row (one key, Q_CHUNK queries) in 4-byte words, padded: the
                                      warps' stores and ldmatrix's eight 16-byte rows hit distinct banks */
#define DQ_TILES ((Q_CHUNK / 16) * (HEAD_DIM / 16))     /* 16 x 16 tiles of a chunk's dQ */
#define DQ_PER_WARP ((DQ_TILES + WARPS - 1) / WARPS)
#endif

/* nv_mma.h's online softmax (unused here) is sized by these. */
#define S_TILES (K_CHUNK / 8)
#define O_TILES D_TILES

#include "storage.h"       /* storage_t, LOAD for the dot step */
#include "backward_dot.h"  /* step 0: flash_backward_dot */
#include "nv_mma.h"        /* cp.async */
#include "block_order.h"
#include "nv_mma16.h"      /* mma, ldmatrix, swizzled tiles and their loader */

/* A row's LSE in base 2, +inf for a row that is absent or sees no key (P = 0 there). */
static inline float row_lse2(__global const float *lse, ulong index, int row, int seq_q)
{
    const float l = row < seq_q ? lse[index] : -INFINITY;
    return l > -INFINITY ? l * M_LOG2E_F : INFINITY;
}

/* Causal skips: a warp's own, or (emulated) the work-group's, whose primitives must be reached by all. */
#if NV_EMULATE
#define WARP_SKIP(warp_cond, group_cond) (group_cond)
#else
#define WARP_SKIP(warp_cond, group_cond) (warp_cond)
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

static inline void accumulate(__global float *p, float v)
{
    volatile __global uint *word = (volatile __global uint *)p;
    uint seen = *word, old;
    do {
        old = seen;
        seen = atomic_cmpxchg(word, old, as_uint(as_float(old) + v));
    } while (seen != old);
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

/* dQ's accumulator += v; only the work-group holding the turn adds, so the order is fixed. */
static inline void accumulate(__global float *p, float v)
{
    __asm__ volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}
#endif

/* Launched as (ceil(seq_kv / BLOCK_N) * WG, heads_kv, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_mma_dkdv(__global const ushort *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
                             __global const ushort *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,
                             __global const ushort *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,
                             __global const ushort *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                             __global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                             __global const float *delta,
#if FUSED_DQ
                             __global float *workspace, ulong accum_off, ulong turns_off,
#endif
                             __global ushort *d_k, ulong dk_off, ulong dk_sb, ulong dk_ss, ulong dk_sh,
                             __global ushort *d_v, ulong dv_off, ulong dv_sb, ulong dv_ss, ulong dv_sh,
                             int seq_q, int seq_kv, int group, float scale_log2, float scale)
{
    __local uint4 k_tile[BLOCK_N * ROW_CHUNKS] __attribute__((aligned(16)));
    __local uint4 v_tile[BLOCK_N * ROW_CHUNKS] __attribute__((aligned(16)));
    __local uint4 q_tiles[2 * BLOCK_M * ROW_CHUNKS] __attribute__((aligned(16)));   /* two buffers */
    __local uint4 do_tiles[2 * BLOCK_M * ROW_CHUNKS] __attribute__((aligned(16)));
    __local float lse_rows[2 * BLOCK_M];    /* base 2, +inf: hidden row */
    __local float delta_rows[2 * BLOCK_M];
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int heads_q = (int)get_num_groups(1) * group;
#if FUSED_DQ
    __local uint ds_tiles[2 * BLOCK_N * DS_WORDS] __attribute__((aligned(16)));  /* a chunk's dS, two buffers */
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

    __global const ushort *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const ushort *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;

    /* The first query row that sees key k0 (causal: row >= k0 - diag); blocks before it see none of
     * this block's keys and are skipped. Keys no row sees run no block and get exact zeros. */
    const int first_row = CAUSAL ? max(0, k0 - diag) : 0;
    const int q_begin = first_row / BLOCK_M * BLOCK_M;
    const int q_blocks = q_begin < seq_q ? (seq_q - q_begin + BLOCK_M - 1) / BLOCK_M : 0;
    const int total = group * q_blocks;  /* (query head, query block) pairs, head-major: a fixed order */

    load_kv_block(k_tile, k_base, k_ss, k0, seq_kv, tid);
    load_kv_block(v_tile, v_base, v_ss, k0, seq_kv, tid);

    float dk[KEY_TILES][D_TILES][4], dv[KEY_TILES][D_TILES][4];
NV_UNROLL
    for (int kt = 0; kt < KEY_TILES; kt++)
NV_UNROLL
        for (int n = 0; n < D_TILES; n++)
NV_UNROLL
            for (int e = 0; e < 4; e++)
                dk[kt][n][e] = dv[kt][n][e] = 0.0f;

    const int a_row = 8 * ((lane >> 3) & 1) + (lane & 7), a_chunk = lane >> 4;  /* ldmatrix: A rows */
    const int j = lane >> 3, b_row = 8 * (j >> 1) + (lane & 7);                  /* ldmatrix: B (n-major) */
    const int tr_row = lane & 15, tr_chunk = lane >> 4;                          /* ldmatrix .trans: B (k-major) */

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
            __local uint4 *qt = q_tiles + (stage ^ 1) * BLOCK_M * ROW_CHUNKS;
            __local uint4 *ot = do_tiles + (stage ^ 1) * BLOCK_M * ROW_CHUNKS;
            load_block(qt, BLOCK_M, q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, nq0, seq_q, tid);
            load_block(ot, BLOCK_M, d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, nq0, seq_q, tid);
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
        __local const uint4 *q_tile = q_tiles + stage * BLOCK_M * ROW_CHUNKS;
        __local const uint4 *do_tile = do_tiles + stage * BLOCK_M * ROW_CHUNKS;
        __local const float *lse2 = lse_rows + stage * BLOCK_M;
        __local const float *drow = delta_rows + stage * BLOCK_M;
#if FUSED_DQ
        const int h = hk * group + it / q_blocks;
        __global int *head_turns = turns + 1 + ((ulong)b * heads_q + h) * q_chunks_all;
        __global float *accum_head = dq_accum + ((ulong)b * heads_q + h) * (ulong)seq_q * HEAD_DIM;
        /* The last K/V block that reaches this query block (causal: the first row's diagonal). */
        const int last_kb = CAUSAL ? min(kv_blocks - 1, (q0 + BLOCK_M + diag - 1) / BLOCK_N) : kv_blocks - 1;
#endif

        for (int qc = 0; qc < BLOCK_M; qc += Q_CHUNK) {
#if FUSED_DQ
            __local uint *ds = ds_tiles + (chunk_count++ & 1) * BLOCK_N * DS_WORDS;
#endif
NV_UNROLL
            for (int kt = 0; kt < KEY_TILES; kt++) {
                const int key0 = (warp * KEY_TILES + kt) * 16;  /* the tile's first key, in the block */
#if CAUSAL
                /* Every key of the tile (emulated: of the block) after every query of the chunk: nothing to add. */
                if (WARP_SKIP(k0 + key0 > q0 + qc + Q_CHUNK - 1 + diag, k0 > q0 + qc + Q_CHUNK - 1 + diag)) {
#if FUSED_DQ
                    for (int i = lane; i < 16 * (Q_CHUNK / 2); i += 32)  /* its dS rows are zeros */
                        ds[(key0 + i / (Q_CHUNK / 2)) * DS_WORDS + i % (Q_CHUNK / 2)] = 0u;
#endif
                    continue;
                }
                const bool edge = k0 + key0 + 15 > q0 + qc + diag;
#endif
#if FUSED_DQ
                /* Keys past seq_kv are zero rows of K and V, but their P (exp2(-lse2)) is not zero, and
                 * its dS feeds dQ here: mask them. */
                const bool past_end = k0 + key0 + 15 >= seq_kv;
#endif
                float s[Q_CHUNK / 8][4], dp[Q_CHUNK / 8][4];
NV_UNROLL
                for (int n = 0; n < Q_CHUNK / 8; n++)
NV_UNROLL
                    for (int e = 0; e < 4; e++)
                        s[n][e] = dp[n][e] = 0.0f;
                /* Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for 16 keys x Q_CHUNK queries. */
NV_UNROLL
                for (int kk = 0; kk < KSTEPS; kk++) {
                    uint ka[4], va[4];
                    ldmatrix_x4(local_address(&k_tile[swizzle(key0 + a_row, kk * 2 + a_chunk)]), ka);
                    ldmatrix_x4(local_address(&v_tile[swizzle(key0 + a_row, kk * 2 + a_chunk)]), va);
NV_UNROLL
                    for (int np = 0; np < Q_CHUNK / 16; np++) {
                        uint qb[4], ob[4];
                        ldmatrix_x4(local_address(&q_tile[swizzle(qc + np * 16 + b_row, kk * 2 + (j & 1))]), qb);
                        ldmatrix_x4(local_address(&do_tile[swizzle(qc + np * 16 + b_row, kk * 2 + (j & 1))]), ob);
                        mma_16x8x16(s[2 * np], ka, qb[0], qb[1]);
                        mma_16x8x16(s[2 * np + 1], ka, qb[2], qb[3]);
                        mma_16x8x16(dp[2 * np], va, ob[0], ob[1]);
                        mma_16x8x16(dp[2 * np + 1], va, ob[2], ob[3]);
                    }
                }
                /* Pᵀ and dSᵀ: this thread holds keys key0 + g (+8), queries qc + 8n + 2t (+1). */
NV_UNROLL
                for (int n = 0; n < Q_CHUNK / 8; n++)
NV_UNROLL
                    for (int e = 0; e < 4; e++) {
                        const int qi = qc + n * 8 + 2 * t + (e & 1);
                        float p = exp2_ftz(fma(s[n][e], scale_log2, -lse2[qi]));
                        const int key = k0 + key0 + g + 8 * (e >> 1);
#if CAUSAL
                        if (edge)
                            p = key <= q0 + qi + diag ? p : 0.0f;
#endif
#if FUSED_DQ
                        if (past_end)
                            p = key < seq_kv ? p : 0.0f;
#endif
                        s[n][e] = p;
                        dp[n][e] = p * (dp[n][e] - drow[qi]);
                    }
                uint pa[Q_CHUNK / 16][4], dsa[Q_CHUNK / 16][4];
NV_UNROLL
                for (int kc = 0; kc < Q_CHUNK / 16; kc++) {
                    pa[kc][0] = pack_pair(s[2 * kc][0], s[2 * kc][1]);
                    pa[kc][1] = pack_pair(s[2 * kc][2], s[2 * kc][3]);
                    pa[kc][2] = pack_pair(s[2 * kc + 1][0], s[2 * kc + 1][1]);
                    pa[kc][3] = pack_pair(s[2 * kc + 1][2], s[2 * kc + 1][3]);
                    dsa[kc][0] = pack_pair(dp[2 * kc][0], dp[2 * kc][1]);
                    dsa[kc][1] = pack_pair(dp[2 * kc][2], dp[2 * kc][3]);
                    dsa[kc][2] = pack_pair(dp[2 * kc + 1][0], dp[2 * kc + 1][1]);
                    dsa[kc][3] = pack_pair(dp[2 * kc + 1][2], dp[2 * kc + 1][3]);
#if FUSED_DQ
                    /* dS [key][query]: dsa[kc][r] holds keys g (+8 for odd r), queries kc*16 + 2t (+8 for r >= 2). */
                    __local uint *row_g = ds + (key0 + g) * DS_WORDS + kc * 8 + t;
                    row_g[0] = dsa[kc][0];
                    row_g[8 * DS_WORDS] = dsa[kc][1];
                    row_g[4] = dsa[kc][2];
                    row_g[8 * DS_WORDS + 4] = dsa[kc][3];
#endif
                }
                /* dV += Pᵀ dO, dK += dSᵀ Q: dO and Q [query][d] as B (k = query) by ldmatrix .trans. */
NV_UNROLL
                for (int kc = 0; kc < Q_CHUNK / 16; kc++)
NV_UNROLL
                    for (int np = 0; np < D_TILES / 2; np++) {
                        uint ob[4], qb[4];
                        ldmatrix_x4_trans(local_address(&do_tile[swizzle(qc + kc * 16 + tr_row, np * 2 + tr_chunk)]),
                                          ob);
                        ldmatrix_x4_trans(local_address(&q_tile[swizzle(qc + kc * 16 + tr_row, np * 2 + tr_chunk)]),
                                          qb);
                        mma_16x8x16(dv[kt][2 * np], pa[kc], ob[0], ob[1]);
                        mma_16x8x16(dv[kt][2 * np + 1], pa[kc], ob[2], ob[3]);
                        mma_16x8x16(dk[kt][2 * np], dsa[kc], qb[0], qb[1]);
                        mma_16x8x16(dk[kt][2 * np + 1], dsa[kc], qb[2], qb[3]);
                    }
            }
#if FUSED_DQ
            barrier(CLK_LOCAL_MEM_FENCE);  /* the chunk's dS, to every warp */
            if (q0 + qc < seq_q) {
                /* dQ_chunk = dS K over the block's keys: warp w takes 16 x 16 tiles w, w + WARPS, ...,
                 * all computed before the turn. */
#if CAUSAL
                const bool chunk_sees_keys = k0 <= q0 + qc + Q_CHUNK - 1 + diag;
#else
                const bool chunk_sees_keys = true;
#endif
                float acc[DQ_PER_WARP][2][4];
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
                    const int mt = tile / (HEAD_DIM / 16), np = tile % (HEAD_DIM / 16);
NV_UNROLL
                    for (int e = 0; e < 4; e++)
                        acc[i][0][e] = acc[i][1][e] = 0.0f;
                    if (no_tile || !chunk_sees_keys)
                        continue;
NV_UNROLL
                    for (int ks = 0; ks < BLOCK_N / 16; ks++) {
                        uint a[4], kb4[4];
                        /* A = dS (queries x keys) from [key][query]: matrix lane / 8 is keys 8 (lane / 16)
                         * on, queries 8 (lane / 8 % 2) on; .trans hands each thread its row's key pairs. */
                        ldmatrix_x4_trans(local_address(ds + (ks * 16 + (lane & 7) + 8 * (lane >> 4)) * DS_WORDS +
                                                        mt * 8 + 4 * ((lane >> 3) & 1)),
                                          a);
                        ldmatrix_x4_trans(local_address(&k_tile[swizzle(ks * 16 + tr_row, np * 2 + tr_chunk)]), kb4);
                        mma_16x8x16(acc[i][0], a, kb4[0], kb4[1]);
                        mma_16x8x16(acc[i][1], a, kb4[2], kb4[3]);
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
                        const int mt = tile / (HEAD_DIM / 16), np = tile % (HEAD_DIM / 16);
                        if (tile >= DQ_TILES)
                            continue;
NV_UNROLL
                        for (int r = 0; r < 2; r++) {
                            const int row = q0 + qc + mt * 16 + g + 8 * r;
                            if (row >= seq_q)
                                continue;
                            __global float *dst = accum_head + (ulong)row * HEAD_DIM + np * 16 + 2 * t;
NV_UNROLL
                            for (int nt = 0; nt < 2; nt++) {
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

    __global ushort *dk_base = d_k + dk_off + (ulong)b * dk_sb + (ulong)hk * dk_sh;
    __global ushort *dv_base = d_v + dv_off + (ulong)b * dv_sb + (ulong)hk * dv_sh;
NV_UNROLL
    for (int kt = 0; kt < KEY_TILES; kt++)
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            const int key = k0 + (warp * KEY_TILES + kt) * 16 + g + 8 * r;
            if (key >= seq_kv)
                continue;
            __global uint *dk_dst = (__global uint *)(dk_base + (ulong)key * dk_ss + 2 * t);
            __global uint *dv_dst = (__global uint *)(dv_base + (ulong)key * dv_ss + 2 * t);
NV_UNROLL
            for (int n = 0; n < D_TILES; n++) {
                dk_dst[n * 4] = pack_pair(dk[kt][n][2 * r] * scale, dk[kt][n][2 * r + 1] * scale);
                dv_dst[n * 4] = pack_pair(dv[kt][n][2 * r], dv[kt][n][2 * r + 1]);
            }
        }
}

/* Launched as (ceil(seq_q / BLOCK_M) * WG, heads_q, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_mma_dq(__global const ushort *q, ulong q_off, ulong q_sb, ulong q_ss, ulong q_sh,
                           __global const ushort *k, ulong k_off, ulong k_sb, ulong k_ss, ulong k_sh,
                           __global const ushort *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh,
                           __global const ushort *d_o, ulong do_off, ulong do_sb, ulong do_ss, ulong do_sh,
                           __global const float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh,
                           __global const float *delta,
                           __global ushort *d_q, ulong dq_off, ulong dq_sb, ulong dq_ss, ulong dq_sh,
                           int seq_q, int seq_kv, int group, float scale_log2, float scale)
{
    __local uint4 q_tile[BLOCK_M * ROW_CHUNKS] __attribute__((aligned(16)));
    __local uint4 do_tile[BLOCK_M * ROW_CHUNKS] __attribute__((aligned(16)));
    __local uint4 k_tiles[2 * BLOCK_N * ROW_CHUNKS] __attribute__((aligned(16)));  /* two buffers */
    __local uint4 v_tiles[2 * BLOCK_N * ROW_CHUNKS] __attribute__((aligned(16)));
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    int qb, h, b;
    block_coordinates(CAUSAL, 1, &qb, &h, &b);  /* heaviest query blocks first when causal */
    const int hk = h / group;
    const int heads_q = (int)get_num_groups(1);
    const int q0 = qb * BLOCK_M;
    const int diag = seq_kv - seq_q;

    __global const ushort *k_base = k + k_off + (ulong)b * k_sb + (ulong)hk * k_sh;
    __global const ushort *v_base = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;
    const int kv_end = block_key_end(CAUSAL, q0, BLOCK_M, seq_q, seq_kv);

    load_block(q_tile, BLOCK_M, q + q_off + (ulong)b * q_sb + (ulong)h * q_sh, q_ss, q0, seq_q, tid);
    load_block(do_tile, BLOCK_M, d_o + do_off + (ulong)b * do_sb + (ulong)h * do_sh, do_ss, q0, seq_q, tid);
    if (kv_end > 0) {
        load_kv_block(k_tiles, k_base, k_ss, 0, seq_kv, tid);
        load_kv_block(v_tiles, v_base, v_ss, 0, seq_kv, tid);
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

    const int a_row = 8 * ((lane >> 3) & 1) + (lane & 7), a_chunk = lane >> 4;
    const int j = lane >> 3, b_row = 8 * (j >> 1) + (lane & 7);
    const int tr_row = lane & 15, tr_chunk = lane >> 4;
    const int warp_local0 = warp * 16 * ROW_TILES;  /* this warp's first row in the tiles */

    for (int kb = 0, stage = 0; kb < kv_end; kb += BLOCK_N, stage ^= 1) {
        COPY_ASYNC_WAIT(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + BLOCK_N < kv_end) {
            load_kv_block(k_tiles + (stage ^ 1) * BLOCK_N * ROW_CHUNKS, k_base, k_ss, kb + BLOCK_N, seq_kv, tid);
            load_kv_block(v_tiles + (stage ^ 1) * BLOCK_N * ROW_CHUNKS, v_base, v_ss, kb + BLOCK_N, seq_kv, tid);
        }
        copy_async_commit();
        __local const uint4 *k_tile = k_tiles + stage * BLOCK_N * ROW_CHUNKS;
        __local const uint4 *v_tile = v_tiles + stage * BLOCK_N * ROW_CHUNKS;

        for (int kc0 = 0; kc0 < BLOCK_N; kc0 += K_CHUNK) {
            const int key_first = kb + kc0;
            if (key_first >= seq_kv)
                break;
#if CAUSAL
            /* Every key of the chunk after every row of the warp (emulated: of the block): nothing to add. */
            if (WARP_SKIP(key_first > warp_row0 + 16 * ROW_TILES - 1 + diag, key_first > q0 + BLOCK_M - 1 + diag))
                break;
            const bool edge = key_first + K_CHUNK > seq_kv || key_first + K_CHUNK - 1 > warp_row0 + diag;
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
                uint qa[ROW_TILES][4], oa[ROW_TILES][4];
NV_UNROLL
                for (int mt = 0; mt < ROW_TILES; mt++) {
                    ldmatrix_x4(local_address(&q_tile[swizzle(warp_local0 + 16 * mt + a_row, kk * 2 + a_chunk)]),
                                qa[mt]);
                    ldmatrix_x4(local_address(&do_tile[swizzle(warp_local0 + 16 * mt + a_row, kk * 2 + a_chunk)]),
                                oa[mt]);
                }
NV_UNROLL
                for (int np = 0; np < K_CHUNK / 16; np++) {
                    uint kb4[4], vb4[4];
                    ldmatrix_x4(local_address(&k_tile[swizzle(kc0 + np * 16 + b_row, kk * 2 + (j & 1))]), kb4);
                    ldmatrix_x4(local_address(&v_tile[swizzle(kc0 + np * 16 + b_row, kk * 2 + (j & 1))]), vb4);
NV_UNROLL
                    for (int mt = 0; mt < ROW_TILES; mt++) {
                        mma_16x8x16(s[mt][2 * np], qa[mt], kb4[0], kb4[1]);
                        mma_16x8x16(s[mt][2 * np + 1], qa[mt], kb4[2], kb4[3]);
                        mma_16x8x16(dp[mt][2 * np], oa[mt], vb4[0], vb4[1]);
                        mma_16x8x16(dp[mt][2 * np + 1], oa[mt], vb4[2], vb4[3]);
                    }
                }
            }
            /* P, dS: this thread holds rows warp_row0 + 16 mt + g (+8), keys key_first + 8n + 2t (+1). */
            uint dsa[ROW_TILES][K_CHUNK / 16][4];
NV_UNROLL
            for (int mt = 0; mt < ROW_TILES; mt++) {
NV_UNROLL
                for (int n = 0; n < K_CHUNK / 8; n++)
NV_UNROLL
                    for (int e = 0; e < 4; e++) {
                        float p = exp2_ftz(fma(s[mt][n][e], scale_log2, -lse2[mt][e >> 1]));
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
NV_UNROLL
                for (int kc = 0; kc < K_CHUNK / 16; kc++) {
                    dsa[mt][kc][0] = pack_pair(dp[mt][2 * kc][0], dp[mt][2 * kc][1]);
                    dsa[mt][kc][1] = pack_pair(dp[mt][2 * kc][2], dp[mt][2 * kc][3]);
                    dsa[mt][kc][2] = pack_pair(dp[mt][2 * kc + 1][0], dp[mt][2 * kc + 1][1]);
                    dsa[mt][kc][3] = pack_pair(dp[mt][2 * kc + 1][2], dp[mt][2 * kc + 1][3]);
                }
            }
            /* dQ += dS K: K [key][d] as B (k = key) by ldmatrix .trans. */
NV_UNROLL
            for (int kc = 0; kc < K_CHUNK / 16; kc++)
NV_UNROLL
                for (int np = 0; np < D_TILES / 2; np++) {
                    uint kb4[4];
                    ldmatrix_x4_trans(local_address(&k_tile[swizzle(kc0 + kc * 16 + tr_row, np * 2 + tr_chunk)]),
                                      kb4);
NV_UNROLL
                    for (int mt = 0; mt < ROW_TILES; mt++) {
                        mma_16x8x16(dq[mt][2 * np], dsa[mt][kc], kb4[0], kb4[1]);
                        mma_16x8x16(dq[mt][2 * np + 1], dsa[mt][kc], kb4[2], kb4[3]);
                    }
                }
        }
    }
    COPY_ASYNC_WAIT(0);

    __global ushort *dq_base = d_q + dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh;
NV_UNROLL
    for (int mt = 0; mt < ROW_TILES; mt++)
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            const int row = warp_row0 + 16 * mt + g + 8 * r;
            if (row >= seq_q)
                continue;
            __global uint *dst = (__global uint *)(dq_base + (ulong)row * dq_ss + 2 * t);
NV_UNROLL
            for (int n = 0; n < D_TILES; n++)
                dst[n * 4] = pack_pair(dq[mt][n][2 * r] * scale, dq[mt][n][2 * r + 1] * scale);
        }
}

#if FUSED_DQ
/* dQ = scale x the accumulator the fused dK/dV pass added up, in the storage type.
 * Launched as (ceil(seq_q * HEAD_DIM / 2 / WG) * WG, heads_q, batch): a work-item per column pair. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_backward_mma_dq_convert(__global const float *workspace, ulong accum_off,
                                   __global ushort *d_q, ulong dq_off, ulong dq_sb, ulong dq_ss, ulong dq_sh,
                                   int seq_q, float scale)
{
    const ulong i = get_global_id(0);
    if (i >= (ulong)seq_q * (HEAD_DIM / 2))
        return;
    const int h = (int)get_group_id(1), b = (int)get_group_id(2);
    const ulong row = i / (HEAD_DIM / 2), col = 2 * (i % (HEAD_DIM / 2));
    const ulong head = (ulong)b * get_num_groups(1) + (ulong)h;
    const float2 v = vload2(0, workspace + accum_off + (head * (ulong)seq_q + row) * HEAD_DIM + col);
    *(__global uint *)(d_q + dq_off + (ulong)b * dq_sb + (ulong)h * dq_sh + row * dq_ss + col) =
        pack_pair(v.x * scale, v.y * scale);
}
#endif
