/*
 * nv_mma16.h: f16/bf16 tensor-core primitives from OpenCL C through inline
 * PTX, shared by the kernels that stream K/V tiles into local memory
 * (flash_forward_mma.cl, flash_decode_mma.cl): mma.sync m16n8k16, ldmatrix,
 * the f32-pair packing, the bank-conflict-free [row][HEAD_DIM] tile layout and its
 * cp.async loaders (dense, and a paged cache's K and V blocks).
 *
 * The includer defines DTYPE (1 f16, 2 bf16), HEAD_DIM, WG (work-items a
 * work-group) and BLOCK_N (keys a streamed block), and includes varlen.h
 * and nv_async.h first; HEAD_DIM_V (V's columns) where it differs from
 * HEAD_DIM: V's tiles then have their own row length (the _V names below).
 * DTYPE 3 (E4M3, the wgmma forward only) has one-byte values: a row's chunks
 * are HEAD_DIM / 16, and its views come as 2-byte units (src/forward.c
 * halves their offsets and strides), so the loaders copy the same 16-byte
 * chunks.
 */
#ifndef FLASHCL_NV_MMA16_H
#define FLASHCL_NV_MMA16_H

#define ELEM_BYTES (DTYPE == 3 ? 1 : 2)
#define CHUNKS (HEAD_DIM * ELEM_BYTES / 16)  /* 16-byte chunks of a row's data */
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM
#endif
#define CHUNKS_V (HEAD_DIM_V * ELEM_BYTES / 16)  /* of a V row's */
#ifndef WGMMA
#define WGMMA 0
#endif
/* ldmatrix reads one chunk from each of 8 consecutive rows a phase: the 8
 * must fall in different 16-byte bank groups (a row's chunk p in group
 * p % 8). Rows of a multiple of 8 chunks take an XOR swizzle within groups
 * of 8; any other row takes an odd stride, ROW_CHUNKS (CHUNKS | 1): 8
 * consecutive multiples of an odd number are distinct mod 8. (An XOR within
 * groups of 4 or 2, as before, left pairs of rows on the same banks.)
 * src/kernels.c's nv_tile_row_bytes sizes the tiles the same way. With
 * -DWGMMA=1 a row is whole 64-column panels (tile_index below; the columns
 * past HEAD_DIM are never read), src/kernels.c's wgmma_local_bytes.
 * The layout follows from a row's chunks alone (`ch`: CHUNKS, or CHUNKS_V for V's tiles). */
#if WGMMA
#define ROW_CHUNKS_OF(ch) (((ch) + 7) / 8 * 8)
#define SWIZZLE_MASK_OF(ch) 7
#else
#define ROW_CHUNKS_OF(ch) ((ch) % 8 == 0 ? (ch) : ((ch) | 1))
#define SWIZZLE_MASK_OF(ch) ((ch) % 8 == 0 ? 7 : 0)
#endif
#define ROW_CHUNKS ROW_CHUNKS_OF(CHUNKS)
#define SWIZZLE_MASK SWIZZLE_MASK_OF(CHUNKS)
#define ROW_CHUNKS_V ROW_CHUNKS_OF(CHUNKS_V)

#if !NV_EMULATE  /* else nv_emulate.h (through nv_async.h) has them */
#if DTYPE == 1
#define MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#define CVT_PACK "cvt.rn.f16x2.f32 "
#elif DTYPE == 2
#define MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#define CVT_PACK "cvt.rn.bf16x2.f32 "
#elif DTYPE != 3
#error "DTYPE must be 1 (f16), 2 (bf16) or 3 (e4m3)"
#endif

#if DTYPE != 3
static inline void mma_16x8x16(float *c, const uint *a, uint b0, uint b1)
{
    __asm__ volatile(MMA "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

static inline void ldmatrix_x4(uint address, uint *r)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address)
                     : "memory");
}

static inline void ldmatrix_x4_trans(uint address, uint *r)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(address)
                     : "memory");
}

#if DTYPE == 3
/* Four floats as E4M3 in one register, a0 in the low byte (A's order in a wgmma fragment): cvt's first source
 * goes to the upper byte of its pair, the first pair ({lo, hi}) to the low half. */
static inline uint pack_e4m3x4(float a0, float a1, float a2, float a3)
{
    uint r;
    __asm__("{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1; cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3; "
            "mov.b32 %0, {lo, hi}; }"
            : "=r"(r)
            : "f"(a0), "f"(a1), "f"(a2), "f"(a3));
    return r;
}
#else
static inline uint pack_pair(float lo, float hi)
{
    uint r;
    __asm__(CVT_PACK "%0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  /* first source: upper half */
    return r;
}
#endif

/* Whether c holds in any lane of the warp: for a c the same in every lane, c, as a value ptxas knows is the
 * warp's (a uniform predicate): a branch on it is not divergent, and the loop around it keeps its counters in
 * uniform registers. */
static inline bool warp_any(bool c)
{
    uint r;
    __asm__ volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 p, %1, 0;\n\tvote.sync.any.pred q, p, 0xffffffff;\n\t"
                     "selp.u32 %0, 1, 0, q;\n\t}" : "=r"(r) : "r"((uint)c));
    return r != 0;
}
#else
#define warp_any(c) (c)
#endif /* !NV_EMULATE */

/* Position of (row, chunk) in a [rows][ROW_CHUNKS_OF(ch)] tile of uint4. */
static inline int swizzle_of(int ch, int row, int chunk)
{
    return row * ROW_CHUNKS_OF(ch) + (chunk ^ (row & SWIZZLE_MASK_OF(ch)));
}
#define swizzle(row, chunk) swizzle_of(CHUNKS, row, chunk)

/* ldmatrix's addresses in a swizzled tile, split into what the unrolled loops know and what only the lane
 * knows. A lane reads row row0 + lane_row, chunk chunk0 + lane_chunk, where the loops give row0 (a multiple
 * of 8) and chunk0 (even) and the lane its lane_row and lane_chunk (0 or 1). The swizzle then mixes the
 * lane's row bits with chunk0 % 8 alone, which takes four values: a lane keeps the four byte offsets, and
 * each address is a tile's base, one of them and a constant (ldmatrix's [register + immediate]). Computed
 * whole at each ldmatrix, the XOR, scale and add took the driver's code 3 integer instructions an ldmatrix
 * (ptxas 13.0, its PTX for d = 128: 400 integer instructions against 256 mma a block; docs/perf-history.md, 2026-12-01).
 * For the swizzle()'s tiles (mma.sync's), not -DWGMMA=1's panels. */
struct lane_chunks {
    uint at[4];  /* bytes to (lane_row, 2 i + lane_chunk) */
};

static inline struct lane_chunks lane_chunks_of(int ch, int lane_row, int lane_chunk)
{
    struct lane_chunks l;
NV_UNROLL
    for (int i = 0; i < 4; i++)
        l.at[i] = 16 * (lane_row * ROW_CHUNKS_OF(ch) + ((2 * i + lane_chunk) ^ (lane_row & SWIZZLE_MASK_OF(ch))));
    return l;
}
#define lane_chunks(lane_row, lane_chunk) lane_chunks_of(CHUNKS, lane_row, lane_chunk)

/* The local address of (row0 + lane_row, chunk0 + lane_chunk) in the tile at `base` (a local_address) of rows of
 * `ch` chunks. */
#define TILE_LANE_OF(ch, base, lanes, row0, chunk0)                                                                  \
    local_address_plus(base, (lanes).at[((chunk0) & 7) >> 1] + 16 * ((row0) * ROW_CHUNKS_OF(ch) + ((chunk0) & ~7)))
#define TILE_LANE(base, lanes, row0, chunk0) TILE_LANE_OF(CHUNKS, base, lanes, row0, chunk0)

/* Position of (row, chunk) in a tile of `rows` rows. With -DWGMMA=1 (nv_wgmma.h's operands, Q's, K's and
 * V's tiles alike): panels of 64 columns, each [rows][8 chunks] with the 128-byte swizzle, one after
 * another; at HEAD_DIM = 64 the same place as swizzle's. */
#if WGMMA
static inline int tile_index(int rows, int row, int chunk)
{
    return ((chunk >> 3) * rows + row) * 8 + ((chunk & 7) ^ (row & 7));
}
#define tile_index_of(n, rows, row, chunk) tile_index(rows, row, chunk)
#else
#define tile_index_of(n, rows, row, chunk) swizzle_of(n, row, chunk)
#define tile_index(rows, row, chunk) swizzle(row, chunk)
#endif
#define kv_index(row, chunk) tile_index(BLOCK_N, row, chunk)  /* a K tile's (and V's where HEAD_DIM_V = HEAD_DIM) */
#define v_index(row, chunk) tile_index_of(CHUNKS_V, BLOCK_N, row, chunk)

/* rows x n chunks of a [seq, d] slice into a tile: cp.async where the row exists, zeros past the end
 * (plain stores; visible after the barrier). n: CHUNKS, or CHUNKS_V for V's tiles. */
static inline void load_tile_of(const int n, __local uint4 *tile, int rows, __global const ushort *base,
                                ulong row_stride, int first_row, int seq, int tid)
{
    for (int c = tid; c < rows * n; c += WG) {
        const int r = c / n, ch = c % n;
        __local uint4 *dst = &tile[tile_index_of(n, rows, r, ch)];
        if (first_row + r < seq)
            copy_async_16(local_address(dst), base + (ulong)(first_row + r) * row_stride + ch * 8);
        else
            *dst = (uint4)(0u);
    }
}
#define load_tile(tile, rows, base, row_stride, first_row, seq, tid) \
    load_tile_of(CHUNKS, tile, rows, base, row_stride, first_row, seq, tid)

/* A block of `rows` rows (a constant where inlined: BLOCK_N keys of K or V, the backward's BLOCK_M rows of Q and
 * dO) into its tile, as load_tile, where each of a thread's rows takes the same chunk and the same swizzle: WG a
 * multiple of CHUNKS (a pass of WG copies covers PASS_ROWS whole rows) and PASS_ROWS a multiple of 8 (row % 8,
 * which the swizzle mixes in, the same each pass). A thread's copies are then one local address and one global
 * address, each plus a multiple of a pass, worked out once a block; load_tile's division, swizzle and 64-bit
 * product for every chunk took the driver's wgmma code 416 instructions a warp a block at d = 128 (12 x 128),
 * 40% of its key loop (Nsight Compute, docs/perf-history.md, 2026-12-02). A block wholly inside the sequence (all but the last)
 * copies without a test of the sequence's end (a thread whose last pass would run past `rows` still skips it,
 * where `rows` is no multiple of a pass). -DNV_LEAN_COPIES=0 copies as load_tile does (an A/B switch). */
#define PASS_ROWS_OF(n) (WG / (n))  /* n: a row's chunks, as load_tile_of's */
#define KV_ROW_BYTES_OF(n) (16 * (WGMMA ? 8 : ROW_CHUNKS_OF(n)))  /* a row's step in a tile (within a wgmma panel) */
#ifndef NV_LEAN_COPIES
#define NV_LEAN_COPIES 1
#endif
#define LEAN_OF(n) (NV_LEAN_COPIES && WG % (n) == 0 && PASS_ROWS_OF(n) % 8 == 0)
static inline __attribute__((always_inline)) void load_lean(const int n, __local uint4 *tile, const int rows,
                                                            __global const ushort *base, ulong row_stride,
                                                            int first_row, int seq, int tid)
{
    const int passes = (rows + PASS_ROWS_OF(n) - 1) / PASS_ROWS_OF(n);
    const int ch = tid % n, r0 = tid / n;
    const local_address_t dst = local_address(&tile[tile_index_of(n, rows, r0, ch)]);
    __global const ushort *src = base + (ulong)(first_row + r0) * row_stride + ch * 8;
    const ulong pass = (ulong)PASS_ROWS_OF(n) * row_stride;
    if (first_row + rows <= seq) {
NV_UNROLL
        for (int j = 0; j < passes; j++)
            if (rows % PASS_ROWS_OF(n) == 0 || j < passes - 1 || r0 + j * PASS_ROWS_OF(n) < rows)
                copy_async_16(local_address_plus(dst, j * PASS_ROWS_OF(n) * KV_ROW_BYTES_OF(n)), src + j * pass);
    } else {
NV_UNROLL
        for (int j = 0; j < passes; j++) {
            const int r = r0 + j * PASS_ROWS_OF(n);
            if (rows % PASS_ROWS_OF(n) == 0 || j < passes - 1 || r < rows) {
                if (first_row + r < seq)
                    copy_async_16(local_address_plus(dst, j * PASS_ROWS_OF(n) * KV_ROW_BYTES_OF(n)), src + j * pass);
                else
                    tile[tile_index_of(n, rows, r, ch)] = (uint4)(0u);
            }
        }
    }
}
/* Rows of n chunks (a constant), lean where the work-group's shape lets it. */
#define load_block_of(n, tile, rows, base, row_stride, first_row, seq, tid)                                          \
    (LEAN_OF(n) ? load_lean(n, tile, rows, base, row_stride, first_row, seq, tid)                                   \
                : load_tile_of(n, tile, rows, base, row_stride, first_row, seq, tid))
#define load_block(tile, rows, base, row_stride, first_row, seq, tid) \
    load_block_of(CHUNKS, tile, rows, base, row_stride, first_row, seq, tid)
#define load_kv_block(tile, base, row_stride, first_row, seq, tid) \
    load_block(tile, BLOCK_N, base, row_stride, first_row, seq, tid)
#define load_v_block(tile, base, row_stride, first_row, seq, tid) \
    load_block_of(CHUNKS_V, tile, BLOCK_N, base, row_stride, first_row, seq, tid)

#if VARLEN == 3
/* As load_tile for one block of keys of a paged cache, K and V together:
 * row `key` of sequence b lives in its page (varlen.h's KV_ROW clamps the
 * same way); the bases are the head's offsets in page 0. A thread reads
 * all its page numbers first (one lookup serves K and V: the same keys),
 * then issues its copies, so the lookups' latencies overlap instead of each
 * copy waiting on its own (measured: 1.44-1.51x dense with one lookup per
 * copy, 1.19-1.25x with K's and V's batched apart, docs/perf-history.md, 2026-12-01). */
#define KV_CHUNKS (CHUNKS > CHUNKS_V ? CHUNKS : CHUNKS_V)  /* the wider row's: one lookup a key serves both */
#define PAGED_STEPS ((BLOCK_N * KV_CHUNKS + WG - 1) / WG)
/* One 16-byte chunk of a cached row into local memory, or zeros past the sequence. */
static inline void copy_paged_chunk(__local uint4 *dst, __global const ushort *base, int page, int in_page, ulong sb,
                                    ulong ss, int ch, bool valid)
{
    if (valid)
        copy_async_16(local_address(dst), base + (ulong)page * sb + (ulong)in_page * ss + ch * 8);
    else
        *dst = (uint4)(0u);
}
static inline void load_paged_kv(__local uint4 *k_tile, __local uint4 *v_tile, __global const ushort *k_base,
                                 __global const ushort *v_base, ulong k_sb, ulong k_ss, ulong v_sb, ulong v_ss,
                                 int first_row, int seq, int tid, int b, __global const int *pages, int page_size,
                                 int pages_per_seq, int num_pages)
{
    int page[PAGED_STEPS], in_page[PAGED_STEPS];
NV_UNROLL
    for (int i = 0; i < PAGED_STEPS; i++) {
        const int key = first_row + (tid + i * WG) / KV_CHUNKS;
        const int n = key / page_size;
        page[i] = key < seq ? clamp(pages[b * pages_per_seq + n], 0, num_pages - 1) : 0;
        in_page[i] = key - n * page_size;
    }
NV_UNROLL
    for (int i = 0; i < PAGED_STEPS; i++) {
        const int c = tid + i * WG;
        if (c < BLOCK_N * KV_CHUNKS) {
            const int r = c / KV_CHUNKS, ch = c % KV_CHUNKS;
            /* Rows of different widths: the narrower one's chunks past its row copy nothing (both
             * conditions are constant true where the widths match). */
            const bool valid = first_row + r < seq;
            if (ch < CHUNKS)
                copy_paged_chunk(&k_tile[kv_index(r, ch)], k_base, page[i], in_page[i], k_sb, k_ss, ch, valid);
            if (ch < CHUNKS_V)
                copy_paged_chunk(&v_tile[v_index(r, ch)], v_base, page[i], in_page[i], v_sb, v_ss, ch, valid);
        }
    }
}
#define LOAD_KV(k_dst, v_dst, first)                                                                                 \
    load_paged_kv(k_dst, v_dst, k_base, v_base, k_sb, k_ss, v_sb, v_ss, first, seq_kv, tid, b, pages, page_size,   \
                  pages_per_seq, num_pages)
#else
#define LOAD_K(k_dst, first) load_kv_block(k_dst, k_base, k_ss, first, seq_kv, tid)
#define LOAD_V(v_dst, first) load_v_block(v_dst, v_base, v_ss, first, seq_kv, tid)
#define LOAD_KV(k_dst, v_dst, first)                                                                                 \
    do {                                                                                                             \
        LOAD_K(k_dst, first);                                                                                        \
        LOAD_V(v_dst, first);                                                                                        \
    } while (0)
#endif

#endif /* FLASHCL_NV_MMA16_H */
