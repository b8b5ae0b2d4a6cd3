/*
 * flash_forward_mma.cl: the forward pass on NVIDIA tensor cores (sm_80+),
 * from OpenCL C through inline PTX. f16 or bf16 storage, f32 accumulation.
 *
 * Same algorithm and same results contract as flash_forward.cl; the host
 * only picks this file on an NVIDIA device of compute capability >= 8.0
 * whose compiler passed the probe (src/variant.c), for 16-byte-aligned
 * views and a head dim this file supports (HEAD_DIM a multiple of 16, <= 256).
 *
 * A work-group is WARPS warps; warp w owns M_TILES x 16 consecutive query
 * rows of the block. With M_TILES = 2 every K/V fragment loaded with ldmatrix
 * feeds two mma (half the local-memory traffic per mma), and Q fragments are
 * re-read from local memory each k-step to leave registers for the second
 * tile, except where Q_REGS keeps them (up to d = 64); with M_TILES = 1 Q
 * stays in registers. K and V are double-buffered
 * in local memory (or triple: KV_STAGES): while a block's S = QKᵀ, softmax
 * and P·V run, cp.async streams the next BLOCK_N keys of K and V into the
 * other buffer, so one barrier per block suffices (it both publishes the
 * landed block and frees the buffer the previous block used); with
 * WGMMA_OVERLAP V streams a block behind K (below). Per block:
 *     S = Q Kᵀ      mma.sync m16n8k16
 *     online softmax on the S fragments (quad shuffles for row max / sum)
 *     O += P V      P repacked from the S accumulators, never stored
 * Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16" (g = lane/4, t = lane%4).
 * Masks (causal, sliding windows: mask.h), packed varlen batches and KV
 * caches, paged too (varlen.h), and split-KV partials (split.h) as the FMA
 * kernels take them, so prefill chunks against a cache run here.
 * -DHEAD_DIM_V (V's and O's columns, a multiple of 16 up to 256; default
 * HEAD_DIM): S = QKᵀ runs over HEAD_DIM, P·V, O and V's tiles over HEAD_DIM_V.
 * Local tiles are [row][HEAD_DIM] in 16-byte chunks laid out so ldmatrix's
 * eight row addresses hit distinct banks (nv_mma16.h: the chunk index XORed
 * with row % 8, or an odd row stride where a row is not 8k chunks).
 *
 * -DWGMMA=1 (Hopper, built through the sm_90a route: nv_wgmma.h) computes
 * both products with wgmma instead: each group of 4 warps (a warpgroup) issues
 * S = QKᵀ as 64 x BLOCK_N products and O += PV as 64 x HEAD_DIM_V ones, B read
 * from local memory by the tensor cores themselves (no ldmatrix), K and V
 * tiles in wgmma's panel layout (nv_mma16.h's tile_index). The fragments of S
 * and O are the same as mma.sync's, so the softmax and the stores are shared.
 * Q's fragments stay in registers (A from registers) or, past d = 128 and
 * where Q_SMEM asks, the tensor cores read Q from q_tile too (A from local
 * memory). It needs BLOCK_N 64, 128 or 192, WARPS a multiple of 4, M_TILES 1; any
 * HEAD_DIM (PV is one product of N = HEAD_DIM_V). S's wgmma is split where it
 * would have PV's shape (S_PART below).
 *
 * -DDTYPE=3 (E4M3 inputs, wgmma only, 128-key blocks; O_DTYPE O's storage: 0 f32, 1 f16, 2 bf16): both
 * products on FP8 tensor cores, 32 values a k-step. PTX has no transposed 8-bit B, so PV reads Vᵀ, which
 * fp8_transpose_v (below) writes once a call into the workspace: V's columns as rows of keys, in an order
 * that lets P pack from S's accumulators without exchanges. P (in [0, 1] against the row's running max) goes
 * to E4M3 times P_SCALE, which keeps the small probabilities out of E4M3's subnormals; l sums the unrounded P.
 * The descales: Q's and K's are in scale_log2 (the host's), V's (v_descale) and 1 / P_SCALE multiply O at the end.
 *
 * -DKV_E4M3=1 (2 where the device converts E4M3 itself: compute capability 8.9+; mma.sync, and wgmma without
 * WGMMA_OVERLAP): K and V are an E4M3 KV cache's bytes (Q and O f16 or bf16), chunked prefill against an FP8
 * cache. The bytes stream through KV_STAGES stages of their own; after each block lands, the work-group converts
 * it into one K and one V tile of Q's type (cl/kv8_tiles.h: exact, every E4M3 value is an f16 and a bf16; in
 * wgmma's panels there) behind a second barrier, and the products run unchanged. K's descale is in scale_log2
 * (the host's), V's (v_descale) multiplies O.
 *
 * -DNV_EMULATE=1 runs it anywhere (PoCL in CI) on cl/nv_emulate.h's plain
 * OpenCL C primitives, whose lane exchanges are work-group barriers: every
 * work-item must reach every ldmatrix, mma and quad_xor together, as they
 * do here (the key loop's bounds are the work-group's, each warp's edge
 * test only masks values, a block a warp skips is processed and undone
 * instead, and finish_row runs before a row past seq_q is skipped). Keep it so.
 */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM  /* V's and O's (attn.head_dim_v) */
#endif
#ifndef CAUSAL
#define CAUSAL 0
#endif
#ifndef DTYPE
#define DTYPE 1              /* 1 f16, 2 bf16 */
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef BLOCK_N
#define BLOCK_N 64           /* keys per streamed block */
#endif
#ifndef M_TILES
#define M_TILES 1            /* 16-row mma tiles per warp: 1 or 2 */
#endif

#define WARP_ROWS (16 * M_TILES)
#define BLOCK_M (WARP_ROWS * WARPS)
#define WG (32 * WARPS)
#define FP8 (DTYPE == 3)
#define OPERAND_K (FP8 ? 32 : 16)      /* values a k-step of a product: 32 bytes either way */
#define KSTEPS (HEAD_DIM / OPERAND_K)  /* k-steps of S = QKᵀ */
#define P_STEPS (BLOCK_N / OPERAND_K)  /* k-steps of PV, P's registers 4 each */
#define S_TILES (BLOCK_N / 8)          /* n-tiles of S per warp */
#define O_TILES (HEAD_DIM_V / 8)       /* n-tiles of O per warp */

#if HEAD_DIM % 16 != 0 || HEAD_DIM > 256
#error "HEAD_DIM must be a multiple of 16, at most 256"
#endif
#if HEAD_DIM_V % 16 != 0 || HEAD_DIM_V > 256
#error "HEAD_DIM_V must be a multiple of 16, at most 256"
#endif
/* Q's fragments held in registers for the whole key loop: one 16-row tile up to d = 128, two where Q_REGS asks
 * (src/kernels.c's mma_q_registers: up to d = 64); past d = 128 (O's accumulator alone is HEAD_DIM / 2
 * registers), with two tiles otherwise and where Q_SMEM asks they are read from local memory at each k-step.
 * With HEAD_DIM_V: where Q's (HEAD_DIM / 4) and O's (HEAD_DIM_V / 2) fit what d = 128 takes of both, 96. */
#ifndef Q_SMEM
#define Q_SMEM 0         /* 1: Q read from local memory where registers could hold it (src/kernels.c's wgmma_options) */
#endif
#ifndef Q_REGS
#define Q_REGS 0         /* 1: with two tiles a warp (mma.sync) Q's fragments kept in registers too (2 x d / 4) */
#endif
#define Q_IN_REGISTERS                                                                                               \
    ((M_TILES == 1 || Q_REGS) && HEAD_DIM <= 128 && HEAD_DIM + 2 * HEAD_DIM_V <= 384 && !Q_SMEM)
#if BLOCK_N % 16 != 0
#error "BLOCK_N must be a multiple of 16"
#endif
#if M_TILES != 1 && M_TILES != 2
#error "M_TILES must be 1 or 2"
#endif
#ifndef WGMMA
#define WGMMA 0
#endif
#if WGMMA && (M_TILES != 1 || WARPS % 4 != 0 || (BLOCK_N != 64 && BLOCK_N != 128 && BLOCK_N != 192))
#error "WGMMA needs M_TILES 1, WARPS a multiple of 4, BLOCK_N 64, 128 or 192"
#endif
#if FP8 && (!WGMMA || BLOCK_N != 128 || HEAD_DIM % 32 != 0 || VARLEN > 1)
#error "E4M3 (DTYPE 3) runs on wgmma, dense or packed (no KV cache), with 128-key blocks (one 128-byte panel of Vᵀ a row) and HEAD_DIM % 32 == 0"
#endif
#ifndef KV_E4M3
#define KV_E4M3 0
#endif
#if KV_E4M3 && FP8
#error "an E4M3 KV cache (KV_E4M3) is read with f16/bf16 Q (DTYPE 1 or 2)"
#endif
#define P_SCALE 256.0f  /* FP8: P's factor before rounding (a power of two: exact either way) */
/* -DWGMMA_OVERLAP=1 (wgmma only): a block's softmax runs while the tensor cores still add the previous
 * block's PV into O, as FlashAttention-3's intra-warpgroup pipelining does. Per block kb: issue S = QKᵀ of kb;
 * rescale O to the previous block's max and issue O += P V of the previous block; wait for S alone; softmax of
 * kb in S's registers; wait for PV; pack kb's P into the registers PV has finished reading. V streams a
 * block behind K (block kb's V beside the next block's K), so two buffers of each still suffice with one
 * barrier a block. */
#ifndef WGMMA_OVERLAP
#define WGMMA_OVERLAP 0
#endif
#define OVERLAP (WGMMA && WGMMA_OVERLAP)
/* -DWGMMA_PINGPONG=1 (wgmma, two or more warpgroups): the warpgroups issue their products in turn, as
 * FlashAttention-3's ping-pong schedule does. All of them leave a block's barrier together; issued at once, their
 * S = QKᵀ may share the tensor cores and end together, every softmax then running at once. In turns (0, 1, .. and
 * back to 0: nv_wgmma.h's named barriers), warpgroup 0's S is queued first, its softmax can run while the others'
 * products do, and so on; the next block's barrier lines them up again (measured: -0.6..+2.2% at d = 65-192,
 * -2..-5% at d = 64; docs/perf-history.md, 2026-12-02, so src/kernels.c takes it at 65-192 only). A turn covers a block's S (with the
 * overlap, S and the previous block's PV); the last warpgroup passes no turn after the last block, so no
 * barrier is left half arrived at. Every warpgroup runs the work-group's blocks (kb's bounds are its), so each
 * takes the same number of turns. */
#ifndef WGMMA_PINGPONG
#define WGMMA_PINGPONG 0
#endif
/* -DBLOCK_SKIP=1: a warp (with wgmma a warpgroup) skips the blocks none of its rows sees, while the work-group's
 * loop runs over the blocks any of its rows does: past the causal diagonal or the window for its rows, and every
 * block for the rows past the sequence's end in its last query block (src/kernels.c says where it is on, and
 * what it measured). Not with the overlap, whose PV of a block is issued with the next block's S. */
#ifndef BLOCK_SKIP
#define BLOCK_SKIP 0
#endif
#if BLOCK_SKIP && OVERLAP
#error "BLOCK_SKIP does not go with WGMMA_OVERLAP"
#endif
/* -DREST_PAST_END=0 turns off the rest of the warpgroups whose rows are all past the sequence's end (below, before
 * the key loop, where BLOCK_SKIP is off; an A/B switch). */
#ifndef REST_PAST_END
#define REST_PAST_END 1
#endif
#define PINGPONG (WGMMA && WGMMA_PINGPONG)
#if PINGPONG && WARPS < 8
#error "WGMMA_PINGPONG takes turns between two or more warpgroups: WARPS >= 8"
#endif
/* K/V buffers: 2 (block kb + 1 streams in while kb computes) or 3 (kb + 2: twice the time for a block's
 * copies to land; src/kernels.c gives the wgmma kernel 3 where they fit). The overlap takes 2. */
#ifndef KV_STAGES
#define KV_STAGES 2
#endif
#if KV_STAGES != 2 && KV_STAGES != 3
#error "KV_STAGES must be 2 or 3"
#endif
#if OVERLAP && KV_STAGES != 2
#error "WGMMA_OVERLAP streams V a block behind K in two buffers: KV_STAGES 2"
#endif
#if OVERLAP && VARLEN == 3
#error "WGMMA_OVERLAP loads K and V of different blocks: not on a paged cache (one lookup serves both there)"
#endif
#if OVERLAP && FP8
#error "WGMMA_OVERLAP is not written for E4M3's P"
#endif
#if OVERLAP && KV_E4M3
#error "WGMMA_OVERLAP reads the previous block's V, which an E4M3 cache's one converted V tile no longer holds"
#endif
#if KV_STAGES == 3
#define WAIT_BLOCK_LANDED() COPY_ASYNC_WAIT(1)  /* all but the newest group: the block after stays in flight */
#define LOAD_STAGE(st) ((st) == 0 ? 2 : (st) - 1)  /* the buffer the previous block used */
#define NEXT_STAGE(st) ((st) == 2 ? 0 : (st) + 1)
#else
#define WAIT_BLOCK_LANDED() COPY_ASYNC_WAIT(0)
#define LOAD_STAGE(st) ((st) ^ 1)
#define NEXT_STAGE(st) ((st) ^ 1)
#endif
/* wgmma's local tiles start on 1024 bytes (its swizzle's atoms); mma.sync's on 16. */
#define TILE_ALIGN (WGMMA ? 1024 : 16)
/* A stage's V tile: BLOCK_N rows of V; FP8, HEAD_DIM_V rows of Vᵀ, BLOCK_N bytes (one panel) each. */
#define V_STAGE_CHUNKS (FP8 ? HEAD_DIM_V * 8 : BLOCK_N * ROW_CHUNKS_V)

#include "storage.h"  /* the split-KV merge's stores */
#include "mask.h"     /* before nv_mma.h: its softmax masks by mask_visible */
#include "varlen.h"
#include "split.h"
#include "nv_mma.h"
#include "block_order.h"
#include "nv_mma16.h"  /* mma, ldmatrix, tiles and their loaders */
#if KV_E4M3
#include "kv8_tiles.h"  /* the stages and their conversion */
/* A block's K and V rows as stored into a stage (row r of K at r CH8, of V at BLOCK_N CH8 + r CH8_V); zeros past
 * the end. A paged cache's rows through its block table (clamped as varlen.h's KV_ROW does), one lookup a key. */
static inline void load_kv8(__local uint4 *stage8, __global const uchar *k_base, __global const uchar *v_base,
                            ulong k_sb, ulong k_ss, ulong v_sb, ulong v_ss, int first_row, int seq, int tid, int b,
                            __global const int *pages, int page_size, int pages_per_seq, int num_pages)
{
    for (int c = tid; c < BLOCK_N * KV8_CHUNKS; c += WG) {
        const int r = c / KV8_CHUNKS, ch = c % KV8_CHUNKS, key = first_row + r;
        const bool valid = key < seq;
#if VARLEN == 3
        const int n = key / page_size;
        const ulong page = valid ? (ulong)clamp(pages[b * pages_per_seq + n], 0, num_pages - 1) : 0;
        const ulong k_row = page * k_sb + (ulong)(key - n * page_size) * k_ss;
        const ulong v_row = page * v_sb + (ulong)(key - n * page_size) * v_ss;
#else
        const ulong k_row = (ulong)key * k_ss, v_row = (ulong)key * v_ss;
#endif
        if (ch < CH8)
            copy_chunk8(&stage8[r * CH8 + ch], k_base + k_row + 16 * ch, valid);
        if (ch < CH8_V)
            copy_chunk8(&stage8[BLOCK_N * CH8 + r * CH8_V + ch], v_base + v_row + 16 * ch, valid);
    }
}
#if VARLEN == 3
#define LOAD_KV8(stage8, first)                                                                                      \
    load_kv8(stage8, k_base, v_base, k_sb, k_ss, v_sb, v_ss, first, seq_kv, tid, b, pages, page_size, pages_per_seq, \
             num_pages)
#else
#define LOAD_KV8(stage8, first) load_kv8(stage8, k_base, v_base, 0, k_ss, 0, v_ss, first, seq_kv, tid, 0, 0, 0, 0, 0)
#endif
#endif
#if FP8
/* The first column of sequence b's keys in a packed batch's Vᵀ (whose rows are the packed keys rounded up to 128
 * plus 256 a sequence): its first packed key row rounded up to a 128-key block, plus 256 b. Sequences in order
 * (offsets that never decrease) then get columns of their own, each rounded up to whole blocks of zeros after
 * its keys, and no sequence's columns reach past the row's end. src/forward.c sizes the rows to match. */
static inline ulong fp8_vt_column(int b, int start_k)
{
    return ((ulong)start_k + 127) / 128 * 128 + 256 * (ulong)b;
}

/* Vᵀ's block of keys `first` ..: its HEAD_DIM_V rows (V's columns, v_ss apart), 128 bytes of keys each, every row
 * whole (fp8_transpose_v pads the keys with zeros to the blocks' end). LOAD_KV reads this LOAD_V. */
#undef LOAD_V
#define LOAD_V(v_dst, first) load_block_of(8, v_dst, HEAD_DIM_V, v_base + (first) / 2, v_ss, 0, HEAD_DIM_V, tid)
#endif
#if WGMMA
#include "nv_wgmma.h"
/* S's wgmma never has PV's shape: with both m64n64k16 (d = 64, 64 keys) or both m64n128k16 (d = 128, 128
 * keys) the H200 (driver 580.159) gave sampled errors of 1e-2, each product right alone and waiting on every
 * wgmma changing nothing; S in two halves of the keys gave the right results (docs/perf-history.md, 2026-12-01).
 * PV's N is HEAD_DIM_V. */
#if BLOCK_N == HEAD_DIM_V && BLOCK_N == 64
#define S_PART 32  /* one token: it names the product (wgmma_n32_kmajor) */
#elif BLOCK_N == HEAD_DIM_V
#define S_PART 64
#else
#define S_PART BLOCK_N
#endif
/* S[64 x S_PART] += Q[64 x 16] Kᵀ[16 x S_PART]: Q's fragments from registers, or (Q_IN_REGISTERS 0) read by
 * the tensor cores from q_tile. */
#if Q_IN_REGISTERS
#define WGMMA_QK(d, kk, desc_k) wgmma_rs_kmajor(S_PART, d, qf[0][kk], desc_k, kk)
#else
/* q_desc: the warpgroup's 64 rows of q_tile's first panel; k-step kk in panel kk / 4, 32 bytes a k-step. */
#define WGMMA_QK(d, kk, desc_k)                                                                                      \
    wgmma_ss_kmajor(S_PART, d, wgmma_desc_plus(q_desc, (kk >> 2) * BLOCK_M * 128 + (kk & 3) * 32), desc_k, kk)
#endif
/* O[64 x HEAD_DIM_V] += P[64 x BLOCK_N] V[BLOCK_N x HEAD_DIM_V], issued (the caller fences before and waits after):
 * 16 keys a wgmma, 2048 bytes of V (two 8-row atoms, 1024 bytes apart); O's columns past 64 in the next
 * panel, BLOCK_N rows of 128 bytes further. Inlined always: called twice, it may otherwise stay a function,
 * and ptxas serializes every wgmma around a call. */
static inline __attribute__((always_inline)) void wgmma_pv(float *acc, uint p[P_STEPS][4],
                                                           __local const uint4 *v_tile NV_SCRATCH_PARAM)
{
#if FP8
    /* Vᵀ's HEAD_DIM_V rows of 128 keys, K-major as K's tile is: k-step kc 32 bytes along each row. */
    const wgmma_desc_t v_desc = wgmma_desc(v_tile, 0, 16, 1024);
NV_UNROLL
    for (int kc = 0; kc < P_STEPS; kc++)
        wgmma_rs_kmajor(HEAD_DIM_V, acc, p[kc], wgmma_desc_plus(v_desc, kc * 32), 1);
#else
    const wgmma_desc_t v_desc = wgmma_desc(v_tile, 0, BLOCK_N * 128, 1024);
NV_UNROLL
    for (int kc = 0; kc < P_STEPS; kc++)
        wgmma_rs_trans(HEAD_DIM_V, acc, p[kc], wgmma_desc_plus(v_desc, kc * 2048), 1);
#endif
}
#endif

/* P of a 16-row tile from its S accumulators (the softmax's exponentials), as PV's A fragments. f16/bf16: k-step kc
 * is S's n-tiles 2 kc and 2 kc + 1, as mma.sync's C and A layouts line up. E4M3 (k-steps of 32 keys, four values a
 * register): register i of k-step kc takes the thread's two values of row g (i even) or g + 8 from n-tiles 4 kc +
 * (i / 2) * 2 and the one after; the keys of a register are then 2t, 2t + 1, 8 + 2t, 8 + 2t + 1 (+ 16 for i >= 2),
 * where A's layout has k = 4t..4t + 3: fp8_transpose_v stores Vᵀ's keys in that order. */
static inline __attribute__((always_inline)) void pack_p(float s[S_TILES][4], uint p[P_STEPS][4])
{
NV_UNROLL
    for (int kc = 0; kc < P_STEPS; kc++) {
#if FP8
NV_UNROLL
        for (int i = 0; i < 4; i++) {
            const int n = 4 * kc + 2 * (i >> 1), e = 2 * (i & 1);
            p[kc][i] = pack_e4m3x4(P_SCALE * s[n][e], P_SCALE * s[n][e + 1], P_SCALE * s[n + 1][e],
                                   P_SCALE * s[n + 1][e + 1]);
        }
#else
        p[kc][0] = pack_pair(s[2 * kc][0], s[2 * kc][1]);
        p[kc][1] = pack_pair(s[2 * kc][2], s[2 * kc][3]);
        p[kc][2] = pack_pair(s[2 * kc + 1][0], s[2 * kc + 1][1]);
        p[kc][3] = pack_pair(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#endif
    }
}

#if BLOCK_SKIP && NV_EMULATE
/* A thread's online-softmax state, copied: kept before a skipped block, put back after it (emulated only). */
static inline void keep_state(float acc[M_TILES][O_TILES][4], float m_row[M_TILES][2], float l_row[M_TILES][2],
                              float acc_to[M_TILES][O_TILES][4], float m_to[M_TILES][2], float l_to[M_TILES][2])
{
    for (int mt = 0; mt < M_TILES; mt++) {
        for (int n = 0; n < O_TILES; n++)
            for (int i = 0; i < 4; i++)
                acc_to[mt][n][i] = acc[mt][n][i];
        for (int r = 0; r < 2; r++) {
            m_to[mt][r] = m_row[mt][r];
            l_to[mt][r] = l_row[mt][r];
        }
    }
}
#endif

/* The work-group's part of block kb (in buffer `stage`): block kb has landed for this thread (with the overlap:
 * its K and the previous block's V); the barrier makes it visible to all, and tells that every warp is done with
 * the previous block's buffer, which the block KV_STAGES - 1 ahead then streams into (with the overlap: the next
 * block's K, and this block's V into the V buffer the PV before the previous one read: every warp is past both). */
#if WGMMA
#define BLOCK_LANDED_FOR_ALL()                                                                                       \
    WAIT_BLOCK_LANDED();                                                                                             \
    fence_proxy_async();                                                                                             \
    barrier(CLK_LOCAL_MEM_FENCE)
#else
#define BLOCK_LANDED_FOR_ALL()                                                                                       \
    WAIT_BLOCK_LANDED();                                                                                             \
    barrier(CLK_LOCAL_MEM_FENCE)
#endif
#if KV_E4M3
/* The stored bytes of the block KV_STAGES - 1 ahead stream into the stage the previous block used; this block's
 * landed stage becomes the K and V tiles (every warp is done with the previous block's: the first barrier), and
 * the second barrier publishes them (with wgmma, after the fence that makes the threads' stores visible to its
 * reads, as cp.async's landed copies are). */
#if WGMMA
#define CONVERTED_FOR_WGMMA() fence_proxy_async()
#else
#define CONVERTED_FOR_WGMMA() ((void)0)
#endif
#define STREAM_BLOCK(kb, stage)                                                                                      \
    BLOCK_LANDED_FOR_ALL();                                                                                          \
    if ((kb) + (KV_STAGES - 1) * BLOCK_N < kv_end)                                                                   \
        LOAD_KV8(kv8_stages + LOAD_STAGE(stage) * STAGE8, (kb) + (KV_STAGES - 1) * BLOCK_N);                        \
    copy_async_commit();                                                                                             \
    convert_kv8(k_tiles, v_tiles, kv8_stages + (stage) * STAGE8, tid);                                               \
    CONVERTED_FOR_WGMMA();                                                                                           \
    barrier(CLK_LOCAL_MEM_FENCE)
#define TILE_STAGE(stage) 0  /* one converted K and V tile */
#elif OVERLAP
#define STREAM_BLOCK(kb, stage)                                                                                      \
    BLOCK_LANDED_FOR_ALL();                                                                                          \
    if ((kb) + BLOCK_N < kv_end)                                                                                     \
        LOAD_K(k_tiles + ((stage) ^ 1) * BLOCK_N * ROW_CHUNKS, (kb) + BLOCK_N);                                      \
    LOAD_V(v_tiles + (stage) * V_STAGE_CHUNKS, (kb));                                                          \
    copy_async_commit()
#else
#define STREAM_BLOCK(kb, stage)                                                                                      \
    BLOCK_LANDED_FOR_ALL();                                                                                          \
    if ((kb) + (KV_STAGES - 1) * BLOCK_N < kv_end)                                                                   \
        LOAD_KV(k_tiles + LOAD_STAGE(stage) * BLOCK_N * ROW_CHUNKS,                                                  \
                v_tiles + LOAD_STAGE(stage) * V_STAGE_CHUNKS, (kb) + (KV_STAGES - 1) * BLOCK_N);            \
    copy_async_commit()
#endif
#ifndef TILE_STAGE
#define TILE_STAGE(stage) (stage)  /* the K and V tiles block kb's products read: its buffer's */
#endif

#include "forward_args.h"

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flash_forward_mma(FORWARD_ARGS(ushort))
{
    __local uint4 q_tile[BLOCK_M * ROW_CHUNKS] __attribute__((aligned(TILE_ALIGN)));
#if KV_E4M3
    __local uint4 kv8_stages[KV_STAGES * STAGE8] __attribute__((aligned(16)));  /* block j's bytes in j % KV_STAGES */
    __local uint4 k_tiles[BLOCK_N * ROW_CHUNKS] __attribute__((aligned(TILE_ALIGN)));  /* converted */
    __local uint4 v_tiles[V_STAGE_CHUNKS] __attribute__((aligned(TILE_ALIGN)));
#else
    __local uint4 k_tiles[KV_STAGES * BLOCK_N * ROW_CHUNKS] __attribute__((aligned(TILE_ALIGN)));
    __local uint4 v_tiles[KV_STAGES * V_STAGE_CHUNKS] __attribute__((aligned(TILE_ALIGN)));
#endif
    NV_SCRATCH_DECL;  /* -DNV_EMULATE: the lanes' exchanges (nv_emulate.h); else nothing */

    const int tid = (int)get_local_id(0);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    int qb, h, b;
#if SPLIT
    int split;
    split_coordinates(WINDOW_RIGHT >= 0, n_splits, &qb, &split, &h, &b);
#else
    block_coordinates(WINDOW_RIGHT >= 0, 1, &qb, &h, &b);  /* heaviest query blocks first when causal */
#endif
    const int rows_grid = seq_q;  /* the grid's rows (the longest sequence's, varlen) */
    const int hk = h / group;
    const int q0 = qb * BLOCK_M;
    SEQUENCE_ROWS(b);  /* start_q, start_k; varlen: seq_q, seq_kv become this sequence's */
    const int diag = seq_kv - seq_q;
    const float slope2 = HEAD_ALIBI2(h);

    __global const ushort *q_base = q + q_off + (ulong)b * q_sb + (ulong)start_q * q_ss + (ulong)h * q_sh;
#if KV_E4M3
    /* An E4M3 cache: its bytes (the views' offsets and strides count bytes). */
    __global const uchar *k_base = (__global const uchar *)k + k_off + KV_BATCH(k_sb) + (ulong)start_k * k_ss +
                                   (ulong)hk * k_sh;
    __global const uchar *v_base = (__global const uchar *)v + v_off + KV_BATCH(v_sb) + (ulong)start_k * v_ss +
                                   (ulong)hk * v_sh;
#else
    __global const ushort *k_base = k + k_off + KV_BATCH(k_sb) + (ulong)start_k * k_ss + (ulong)hk * k_sh;
#if FP8 && VARLEN
    /* Vᵀ of a packed batch: sequence b's keys are its columns from fp8_vt_column (bytes; 2-byte units here). */
    __global const ushort *v_base = v + v_off + fp8_vt_column(b, start_k) / 2 + (ulong)hk * v_sh;
#else
    __global const ushort *v_base = v + v_off + KV_BATCH(v_sb) + (ulong)start_k * v_ss + (ulong)hk * v_sh;
#endif
#endif

    /* The keys this block's rows see; none for a block past its sequence's rows (varlen), which
     * still reaches every barrier, as the whole group must, and stores nothing. */
    int kv_end = q0 < seq_q ? mask_key_end(q0, BLOCK_M, seq_q, seq_kv) : 0;
    int kv_begin = mask_key_begin(q0, seq_q, seq_kv);
#if FP8
    /* Vᵀ's keys are in P's fragment order within each 32 from a 128-key block's start (fp8_transpose_v), so a
     * window's first block starts there too; the keys before the window are masked like any other. */
    kv_begin = kv_begin / BLOCK_N * BLOCK_N;
#endif
#if SPLIT
    split_keys(split, n_splits, &kv_begin, &kv_end);
#endif

    /* Prologue: Q and the first K/V block into buffer 0 (and with three buffers the second into 1). */
    load_tile(q_tile, BLOCK_M, q_base, q_ss, q0, seq_q, tid);
    if (kv_begin < kv_end) {
#if KV_E4M3
        LOAD_KV8(kv8_stages, kv_begin);
#elif OVERLAP
        LOAD_K(k_tiles, kv_begin);  /* its V comes with the next block's K */
#else
        LOAD_KV(k_tiles, v_tiles, kv_begin);
#endif
    }
#if OVERLAP
    /* The first block's loop issues a PV of "the block before" too (one branch-free loop: with the PV under a
     * branch, the compiler merged it with the last block's after the loop, and ptxas then serialized every
     * wgmma): zeros in, with P's registers zero, add exactly nothing. */
    for (int c = tid; c < V_STAGE_CHUNKS; c += WG)
        v_tiles[V_STAGE_CHUNKS + c] = (uint4)(0u);
#endif
    copy_async_commit();
#if KV_STAGES == 3
    if (kv_begin + BLOCK_N < kv_end)
#if KV_E4M3
        LOAD_KV8(kv8_stages + STAGE8, kv_begin + BLOCK_N);
#else
        LOAD_KV(k_tiles + BLOCK_N * ROW_CHUNKS, v_tiles + V_STAGE_CHUNKS, kv_begin + BLOCK_N);
#endif
    copy_async_commit();
#endif
    WAIT_BLOCK_LANDED();
#if WGMMA
    fence_proxy_async();  /* the landed K/V (and zero rows) to wgmma's reads */
#endif
    barrier(CLK_LOCAL_MEM_FENCE);

#if Q_IN_REGISTERS
    /* Q fragments (a0..a3 per k-step) of this warp's rows, from q_tile. */
    const int q_lane_row = 8 * ((lane >> 3) & 1) + (lane & 7), q_lane_chunk = lane >> 4;
    uint qf[M_TILES][KSTEPS][4];
NV_UNROLL
    for (int mt = 0; mt < M_TILES; mt++)
NV_UNROLL
        for (int kk = 0; kk < KSTEPS; kk++)
            ldmatrix_x4(local_address(&q_tile[tile_index(BLOCK_M, warp * WARP_ROWS + 16 * mt + q_lane_row,
                                                         kk * 2 + q_lane_chunk)]),
                        qf[mt][kk]);
#endif

    float acc[M_TILES][O_TILES][4];
    float m_row[M_TILES][2], l_row[M_TILES][2];
NV_UNROLL
    for (int mt = 0; mt < M_TILES; mt++) {
NV_UNROLL
        for (int n = 0; n < O_TILES; n++)
            acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
        m_row[mt][0] = m_row[mt][1] = -INFINITY;
        l_row[mt][0] = l_row[mt][1] = 0.0f;
    }
    const int warp_row0 = q0 + warp * WARP_ROWS;  /* this thread's rows: warp_row0 + 16 mt + g (+8) */
#if !WGMMA
    /* The lanes' ldmatrix offsets (nv_mma16.h): Q's and V's (A operands, and Vᵀ's 8 x 8 blocks; lanes 16-31
     * take the next 8 columns) read rows lane % 16, chunk lane / 16; K's rows 8 (lane / 16) + lane % 8, chunk
     * lane / 8 % 2. V's rows are HEAD_DIM_V's. */
    const struct lane_chunks qv_lanes = lane_chunks(lane & 15, lane >> 4);
    const struct lane_chunks k_lanes = lane_chunks(8 * (lane >> 4) + (lane & 7), (lane >> 3) & 1);
#if HEAD_DIM_V == HEAD_DIM
#define V_LANES qv_lanes
#else
    const struct lane_chunks v_lanes = lane_chunks_of(CHUNKS_V, lane & 15, lane >> 4);
#define V_LANES v_lanes
#endif
#if !Q_IN_REGISTERS
    const local_address_t warp_q = local_address_plus(local_address(q_tile), 16 * warp * WARP_ROWS * ROW_CHUNKS);
#endif
#endif

#if WGMMA && !Q_IN_REGISTERS
    const wgmma_desc_t q_desc = wgmma_desc(q_tile, (warp >> 2) * 64 * 128, 16, 1024);
#endif
#if OVERLAP
    uint p_prev[P_STEPS][4];  /* the previous block's P, read by its PV while this block's softmax runs */
    float alpha[2] = {1.0f, 1.0f}; /* and its rescale of O, applied before that PV */
NV_UNROLL
    for (int kc = 0; kc < P_STEPS; kc++)
        p_prev[kc][0] = p_prev[kc][1] = p_prev[kc][2] = p_prev[kc][3] = 0u;
#endif
#if PINGPONG
    const int warpgroup = warp >> 2, warpgroups = WARPS / 4;
    if (warpgroup == warpgroups - 1 && kv_begin < kv_end)
        wgmma_turn_pass(0);  /* warpgroup 0 has the first block's turn */
/* The turn passed on after block kb, but none by the last warpgroup after the last block. */
#define PASS_TURN(kb)                                                                                                \
    if ((kb) + BLOCK_N < kv_end || warpgroup != warpgroups - 1)                                                     \
        wgmma_turn_pass(warpgroup + 1 == warpgroups ? 0 : warpgroup + 1)
#endif
    const int group_row0 = WGMMA ? q0 + (warp >> 2) * 64 : warp_row0;  /* of the rows that issue products together */
#if BLOCK_SKIP
    /* The keys those rows (a warpgroup's 64 with wgmma, else a warp's) see: none for rows past the sequence's end. */
    const int group_rows = min(WGMMA ? 64 : WARP_ROWS, seq_q - group_row0);
    const int group_kv_begin = mask_key_begin(group_row0, seq_q, seq_kv);
    const int group_kv_end = group_rows > 0 ? mask_key_end(group_row0, group_rows, seq_q, seq_kv) : 0;
#endif
#if REST_PAST_END && !BLOCK_SKIP && !NV_EMULATE
    /* A warpgroup (mma.sync: a warp) whose rows are all past the sequence's end, in its last query block, takes the
     * work-group's copies and barriers only (and its turns), and computes nothing: the loop's own code stays as
     * it is (with BLOCK_SKIP such rows skip each block already, and the rest measured 0.8-3.7% slower beside it:
     * docs/perf-history.md, 2026-12-02). Emulated, the products' lane exchanges are work-group barriers, so there it
     * computes its rows too. */
    if (warp_any(group_row0 >= seq_q)) {
        for (int kb = kv_begin, stage = 0; kb < kv_end; kb += BLOCK_N, stage = NEXT_STAGE(stage)) {
            STREAM_BLOCK(kb, stage);
#if PINGPONG
            wgmma_turn_wait(warpgroup);
            PASS_TURN(kb);
#endif
        }
    } else
#endif
    for (int kb = kv_begin, stage = 0; kb < kv_end; kb += BLOCK_N, stage = NEXT_STAGE(stage)) {  /* kb's buffer */
        STREAM_BLOCK(kb, stage);
        __local const uint4 *k_tile = k_tiles + TILE_STAGE(stage) * BLOCK_N * ROW_CHUNKS;
#if !OVERLAP
        __local const uint4 *v_tile = v_tiles + TILE_STAGE(stage) * V_STAGE_CHUNKS;
#endif

#if BLOCK_SKIP
        /* A block none of these rows sees: processing it would leave m, l and O as they are (every score
         * masked; with finite V: a masked Inf or NaN of V would have made O NaN through 0 x Inf), so it is
         * not processed; the copies and the barrier above are the work-group's and stay. */
        const bool skip = warp_any(kb >= group_kv_end || kb + BLOCK_N <= group_kv_begin);  /* the same in the warp */
#if NV_EMULATE
        /* The emulated products' lane exchanges are work-group barriers, which every work-item must reach:
         * here the block is processed and its effect undone at the end, so a block skipped wrongly still
         * shows as a wrong result. What the emulation cannot check (the branch, its vote, the turns a
         * skipping warpgroup takes) the GPU's tests do. */
        float acc_kept[M_TILES][O_TILES][4], m_kept[M_TILES][2], l_kept[M_TILES][2];
        keep_state(acc, m_row, l_row, acc_kept, m_kept, l_kept);
#else
        if (skip) {
#if PINGPONG
            wgmma_turn_wait(warpgroup);  /* its turn, passed on at once: every warpgroup takes the same turns */
            PASS_TURN(kb);
#endif
            continue;
        }
#endif
#endif

        float s[M_TILES][S_TILES][4];
#if WGMMA
        /* The warpgroup's 64 rows against the block's keys, one k-step of 16 a wgmma; the first
         * overwrites S. K's k-step kk: panel kk / 4, 32 bytes a k-step within its 128-byte rows. */
#if Q_IN_REGISTERS
        WGMMA_HOLD_A(&qf[0][0][0], KSTEPS * 4);
#endif
#if OVERLAP
        rescale_rows(acc[0], alpha);  /* to the previous block's max, before its PV (issued below) */
        WGMMA_HOLD(&acc[0][0][0], O_TILES * 4);
        WGMMA_HOLD_A(&p_prev[0][0], P_STEPS * 4);
#endif
#if PINGPONG
        wgmma_turn_wait(warpgroup);
#endif
        wgmma_fence();
        const wgmma_desc_t k_desc = wgmma_desc(k_tile, 0, 16, 1024);
NV_UNROLL
        for (int kk = 0; kk < KSTEPS; kk++)
NV_UNROLL
            for (int part = 0; part < BLOCK_N / S_PART; part++)
                WGMMA_QK(&s[0][part * S_PART / 8][0], kk,
                         wgmma_desc_plus(k_desc, (kk >> 2) * BLOCK_N * 128 + part * S_PART * 128 + (kk & 3) * 32));
        wgmma_commit();
#if OVERLAP
        /* The previous block's PV behind S, as a second group (zeros at the first block): waiting for all but
         * the newest group waits for S alone. */
        wgmma_pv(&acc[0][0][0], p_prev, v_tiles + (stage ^ 1) * V_STAGE_CHUNKS NV_SCRATCH_ARG);
        wgmma_commit();
#endif
#if PINGPONG
        PASS_TURN(kb);
#endif
#if OVERLAP
        wgmma_wait_one();
#else
        wgmma_wait_all();
#endif
        WGMMA_HOLD(&s[0][0][0], S_TILES * 4);
#if Q_IN_REGISTERS
        WGMMA_HOLD_A(&qf[0][0][0], KSTEPS * 4);
#endif
#else
NV_UNROLL
        for (int mt = 0; mt < M_TILES; mt++)
NV_UNROLL
            for (int n = 0; n < S_TILES; n++)
                s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
        {
            const local_address_t k_at = local_address(k_tile);
NV_UNROLL
            for (int kk = 0; kk < KSTEPS; kk++) {
#if Q_IN_REGISTERS
                const uint *qa[M_TILES];
NV_UNROLL
                for (int mt = 0; mt < M_TILES; mt++)
                    qa[mt] = qf[mt][kk];
#else
                uint qr[M_TILES][4];
                const uint *qa[M_TILES];
NV_UNROLL
                for (int mt = 0; mt < M_TILES; mt++) {
                    ldmatrix_x4(TILE_LANE(warp_q, qv_lanes, 16 * mt, kk * 2), qr[mt]);
                    qa[mt] = qr[mt];
                }
#endif
NV_UNROLL
                for (int np = 0; np < S_TILES / 2; np++) {
                    uint bf[4];
                    ldmatrix_x4(TILE_LANE(k_at, k_lanes, np * 16, kk * 2), bf);
NV_UNROLL
                    for (int mt = 0; mt < M_TILES; mt++) {
                        mma_16x8x16(s[mt][2 * np], qa[mt], bf[0], bf[1]);
                        mma_16x8x16(s[mt][2 * np + 1], qa[mt], bf[2], bf[3]);
                    }
                }
            }
        }
#endif

        /* Online softmax on the fragments, in base 2. Masks only where some key of the block may be
         * absent or hidden from some row of this warp. */
        bool edge = kb + BLOCK_N > seq_kv;
#if WINDOW_RIGHT >= 0
        edge = edge || kb + BLOCK_N - 1 > warp_row0 + diag + WINDOW_RIGHT;
#endif
#if WINDOW_LEFT >= 0
        edge = edge || kb < warp_row0 + WARP_ROWS - 1 + diag - WINDOW_LEFT;
#endif
#if OVERLAP
        softmax_scores(s[0], alpha, m_row[0], l_row[0], edge, kb, warp_row0 + g, warp_row0 + g + 8, t, seq_kv,
                       diag, scale_log2 ALIBI_ARG(slope2, slope2) NV_SCRATCH_ARG);
        /* The softmax's results tied to this point, before the wait: else the compiler may sink its
         * arithmetic past the wait (nothing orders plain arithmetic after a volatile asm); and the softmax
         * ended as a basic block of ptxas's, with P's registers read where it ends (wgmma_keep_a). */
        WGMMA_HOLD(&s[0][0][0], S_TILES * 4);
        WGMMA_HOLD(alpha, 2);
        WGMMA_HOLD(l_row[0], 2);
        wgmma_keep_a(&p_prev[0][0], P_STEPS * 4, (uint)rows_grid >> 31, q_tile);  /* rows_grid >= 0 */
        wgmma_wait_all();
        WGMMA_HOLD(&acc[0][0][0], O_TILES * 4);
        pack_p(s[0], p_prev);
#else
        uint pf[M_TILES][P_STEPS][4];
NV_UNROLL
        for (int mt = 0; mt < M_TILES; mt++) {
            online_softmax(s[mt], acc[mt], m_row[mt], l_row[mt], edge, kb, warp_row0 + 16 * mt + g,
                           warp_row0 + 16 * mt + g + 8, t, seq_kv, diag,
                           scale_log2 ALIBI_ARG(slope2, slope2) NV_SCRATCH_ARG);
            pack_p(s[mt], pf[mt]);
        }

#if WGMMA
        WGMMA_HOLD(&acc[0][0][0], O_TILES * 4);  /* the softmax's rescaling done */
        WGMMA_HOLD_A(&pf[0][0][0], P_STEPS * 4);
        wgmma_fence();
        wgmma_pv(&acc[0][0][0], pf[0], v_tile NV_SCRATCH_ARG);
        wgmma_commit();
        wgmma_wait_all();
        WGMMA_HOLD(&acc[0][0][0], O_TILES * 4);
        WGMMA_HOLD_A(&pf[0][0][0], P_STEPS * 4);  /* P's registers stay P's until the wait */
#else
        {
            const local_address_t v_at = local_address(v_tile);
NV_UNROLL
            for (int kc = 0; kc < BLOCK_N / 16; kc++) {
NV_UNROLL
                for (int np = 0; np < O_TILES / 2; np++) {
                    uint bf[4];
                    ldmatrix_x4_trans(TILE_LANE_OF(CHUNKS_V, v_at, V_LANES, kc * 16, np * 2), bf);
NV_UNROLL
                    for (int mt = 0; mt < M_TILES; mt++) {
                        mma_16x8x16(acc[mt][2 * np], pf[mt][kc], bf[0], bf[1]);
                        mma_16x8x16(acc[mt][2 * np + 1], pf[mt][kc], bf[2], bf[3]);
                    }
                }
            }
        }
#endif
#endif /* OVERLAP */
#if BLOCK_SKIP && NV_EMULATE
        if (skip)
            keep_state(acc_kept, m_kept, l_kept, acc, m_row, l_row);
#endif
    }
    COPY_ASYNC_WAIT(0);
#if OVERLAP
    if (kv_begin < kv_end) {  /* the last block's PV, once its V (in the last block's buffer) has landed */
        const int last_stage = ((kv_end - kv_begin - 1) / BLOCK_N) & 1;
        fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        rescale_rows(acc[0], alpha);
        WGMMA_HOLD(&acc[0][0][0], O_TILES * 4);
        WGMMA_HOLD_A(&p_prev[0][0], P_STEPS * 4);
        wgmma_fence();
        wgmma_pv(&acc[0][0][0], p_prev, v_tiles + last_stage * V_STAGE_CHUNKS NV_SCRATCH_ARG);
        wgmma_commit();
        wgmma_wait_all();
        WGMMA_HOLD(&acc[0][0][0], O_TILES * 4);
        WGMMA_HOLD_A(&p_prev[0][0], P_STEPS * 4);
    }
#endif

#if FP8
    /* O in its own storage (O_DTYPE: storage.h's storage_t), the view in its elements. */
    __global storage_t *o_base = (__global storage_t *)o + o_off + (ulong)b * o_sb + (ulong)start_q * o_ss + (ulong)h * o_sh;
    const float o_factor = v_descale / P_SCALE;
#else
    __global ushort *o_base = o + o_off + (ulong)b * o_sb + (ulong)start_q * o_ss + (ulong)h * o_sh;
#endif
NV_UNROLL
    for (int mt = 0; mt < M_TILES; mt++) {
NV_UNROLL
        for (int r = 0; r < 2; r++) {
            /* Each thread summed l over its own keys: finish_row adds the quad's partials. */
            float lse_row;
#if KV_E4M3
            /* An E4M3 cache's V is its bytes times v_descale (split partials too: the merge is linear). */
            const float inv_l =
                finish_row(m_row[mt][r], l_row[mt][r], HEAD_SINK(h), &lse_row NV_SCRATCH_ARG) * v_descale;
#else
            const float inv_l = finish_row(m_row[mt][r], l_row[mt][r], HEAD_SINK(h), &lse_row NV_SCRATCH_ARG);
#endif
            const int row = warp_row0 + 16 * mt + g + 8 * r;
            if (row >= seq_q)
                continue;
#if SPLIT
            /* This split's partial, normalised over its own keys, and its LSE (cl/split.h). */
            __global float *dst = part + split_part(split, b, h, row, rows_grid, get_num_groups(1));
NV_UNROLL
            for (int n = 0; n < O_TILES; n++)
                vstore2((float2)(acc[mt][n][2 * r] * inv_l, acc[mt][n][2 * r + 1] * inv_l), 0, dst + 8 * n + 2 * t);
            if (t == 0)
                dst[HEAD_DIM_V] = lse_row;
#elif FP8
            __global storage_t *dst = o_base + (ulong)row * o_ss + 2 * t;
            const float f = inv_l * o_factor;
NV_UNROLL
            for (int n = 0; n < O_TILES; n++) {
                STORE(dst, 8 * n, acc[mt][n][2 * r] * f);
                STORE(dst, 8 * n + 1, acc[mt][n][2 * r + 1] * f);
            }
#else
            __global uint *dst = (__global uint *)(o_base + (ulong)row * o_ss + 2 * t);
NV_UNROLL
            for (int n = 0; n < O_TILES; n++)
                dst[n * 4] = pack_pair(acc[mt][n][2 * r] * inv_l, acc[mt][n][2 * r + 1] * inv_l);
#endif
#if !SPLIT
            if (has_lse && t == 0)
                lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + (ulong)(start_q + row) * l_ss] = lse_row;
#endif
        }
    }
}

#if FP8
/* Vᵀ for the E4M3 products (wgmma reads an 8-bit B K-major only): V [keys][HEAD_DIM_V] of KV head hk, sequence b
 * (bytes; strides in bytes) to vt[(b heads_kv + hk) HEAD_DIM_V + c][nk_pad], nk_pad the keys rounded up to BLOCK_N,
 * zeros past seq_kv (a packed batch: below). Within each 32 keys, place p holds key
 * 16 (p / 16) + 8 ((p % 4) / 2) + 2 ((p % 16) / 4) + p % 2: the keys pack_p puts at k = p of P's fragments. A work-group of 256 takes 32 keys through local memory, read
 * along V's rows and written along Vᵀ's. Grid: (the keys rounded up to 128 / 32 x 256, heads_kv, batch); a packed
 * batch (VARLEN) has no batch dimension in Vᵀ: rows [hk HEAD_DIM_V + c], its grid the longest sequence's keys
 * rounded up. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void fp8_transpose_v(__global const uchar *v, ulong v_off, ulong v_sb, ulong v_ss, ulong v_sh, __global uchar *vt,
                     ulong vt_off, int seq_kv, int nk_pad VARLEN_ARGS)
{
    __local uchar keys[32 * HEAD_DIM_V];
    const int tid = (int)get_local_id(0), key0 = 32 * (int)get_group_id(0);
    const int hk = (int)get_group_id(1), b = (int)get_group_id(2);
#if VARLEN
    /* A packed batch: the grid covers the longest sequence's blocks; sequence b writes its own (zeros past its
     * keys) at fp8_vt_column in rows of nk_pad, one row a (KV head, column of V). */
    int start_k;
    varlen_sequence(cu_k, b, total_k, seq_kv, &start_k, &seq_kv);
    if (key0 >= (seq_kv + 127) / 128 * 128)
        return;  /* past this sequence's blocks: the whole work-group, before its barrier */
    __global const uchar *src = v + v_off + (ulong)start_k * v_ss + (ulong)hk * v_sh;
    __global uchar *dst = vt + vt_off + (ulong)hk * HEAD_DIM_V * (ulong)nk_pad + fp8_vt_column(b, start_k) + key0;
#else
    const int heads_kv = (int)get_num_groups(1);
    __global const uchar *src = v + v_off + (ulong)b * v_sb + (ulong)hk * v_sh;
    __global uchar *dst = vt + vt_off + ((ulong)b * heads_kv + hk) * HEAD_DIM_V * (ulong)nk_pad + key0;
#endif
    for (int i = tid; i < 32 * HEAD_DIM_V; i += 256) {
        const int key = key0 + i / HEAD_DIM_V;
        keys[i] = key < seq_kv ? src[(ulong)key * v_ss + i % HEAD_DIM_V] : (uchar)0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = tid; i < 32 * HEAD_DIM_V; i += 256) {
        const int c = i / 32, p = i % 32;
        const int key = 16 * (p >> 4) + 8 * ((p & 3) >> 1) + 2 * ((p & 15) >> 2) + (p & 1);
        dst[(ulong)c * nk_pad + p] = keys[key * HEAD_DIM_V + c];
    }
}
#endif

#include "split_combine.h"
