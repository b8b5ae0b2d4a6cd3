/*
 * nv_wgmma.h: Hopper's warpgroup matrix multiply (wgmma, sm_90a) from OpenCL
 * C, for the kernels built through src/program.c's sm_90a route.
 *
 * NVIDIA's OpenCL compiler targets sm_90 and refuses sm_90a's instructions,
 * so each one is written as an inline-asm comment that starts with SM90A:
 * the compiler substitutes its operands (registers it allocated) and passes
 * the comment into the PTX; the host then turns the comments into code,
 * retargets the PTX to sm_90a and builds that (fcl_sm90a_patch). Built the
 * plain way, the kernel computes nothing through these: never run it so.
 *
 * A warpgroup is 4 consecutive warps (warp % 4 == 0 first). A operands come
 * from registers in mma.sync's m16n8k16 A layout, warp w % 4 holding rows
 * 16 (w % 4) .. + 15; D's registers are mma.sync's m16n8 C fragments of those
 * rows side by side, 4 a block of 8 columns: the online softmax of
 * nv_mma.h runs on them unchanged. B comes from local memory through a
 * descriptor: tiles of rows of 64 two-byte elements (128 bytes), 8-row atoms
 * of 1024 bytes, 16-byte chunk c of row r at c ^ (r % 8) (the 128-byte
 * swizzle; a tile starts 1024-byte aligned).
 */
#ifndef FLASHCL_NV_WGMMA_H
#define FLASHCL_NV_WGMMA_H

#define SM90A "// @fcl-sm90a "  /* src/program.c's marker: keep the two in step */

#if DTYPE == 1
#define WGMMA_OP(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.f16.f16"
#elif DTYPE == 2
#define WGMMA_OP(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.bf16.bf16"
#else
#error "DTYPE must be 1 (f16) or 2 (bf16)"
#endif

#if NV_EMULATE
/* -DNV_EMULATE=1 (nv_emulate.h's plain OpenCL C): the descriptor is the tile and the offsets themselves. */
typedef struct {
    __local const uchar *tile;
    uint offset, leading_bytes, stride_bytes;
} wgmma_desc_t;

NV_EMU_INLINE wgmma_desc_t wgmma_desc(__local const uint4 *tile, uint offset, uint leading_bytes, uint stride_bytes)
{
    const wgmma_desc_t d = {(__local const uchar *)tile, offset, leading_bytes, stride_bytes};
    return d;
}
#else
typedef ulong wgmma_desc_t;

/* A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") of the matrix `offset` bytes into
 * `tile` (1024-byte aligned): start address, leading and stride byte offsets in 16-byte units, 128-byte
 * swizzle. */
static inline wgmma_desc_t wgmma_desc(__local const uint4 *tile, uint offset, uint leading_bytes, uint stride_bytes)
{
    const uint address = local_address(tile) + offset;
    return (ulong)((address & 0x3FFFFu) >> 4) | ((ulong)(leading_bytes >> 4) << 16) |
           ((ulong)(stride_bytes >> 4) << 32) | (1ul << 62);
}
#endif

#if NV_EMULATE
/* Emulated, every wgmma completes at once, and there is no compiler to hold back. */
#define wgmma_fence() ((void)0)
#define wgmma_commit() ((void)0)
#define wgmma_wait_all() ((void)0)
#define WGMMA_HOLD(d, n) ((void)0)
#define WGMMA_HOLD_A(a, n) ((void)0)
#define fence_proxy_async() ((void)0)
#define wgmma_n32_kmajor(d, a, desc, acc) nv_emu_wgmma(nv_scratch, (d), (a), (desc), (acc), 32, 0)
#define wgmma_n64_kmajor(d, a, desc, acc) nv_emu_wgmma(nv_scratch, (d), (a), (desc), (acc), 64, 0)
#define wgmma_n128_kmajor(d, a, desc, acc) nv_emu_wgmma(nv_scratch, (d), (a), (desc), (acc), 128, 0)
#define wgmma_n64_trans(d, a, desc, acc) nv_emu_wgmma(nv_scratch, (d), (a), (desc), (acc), 64, 1)
#define wgmma_n128_trans(d, a, desc, acc) nv_emu_wgmma(nv_scratch, (d), (a), (desc), (acc), 128, 1)

/* wgmma.mma_async m64nNk16 with A from registers: the warpgroup's 4 warps put their A fragments (mma.sync's
 * A layout, warp w % 4 holding rows 16 (w % 4) + 0..15) in their scratch; each thread then forms its
 * accumulators (mma.sync's m16n8 C fragments of its warp's rows, N / 8 of them) from A and from B in local
 * memory as the descriptor lays it out: 8-row atoms `stride_bytes` apart, 128-byte rows, 16-byte chunk c
 * of row r at c ^ (r % 8) within its atom, and (transposed B) 64-column panels `leading_bytes` apart. */
NV_EMU_INLINE void nv_emu_wgmma(__local uint *scratch, float *d, const uint *a, wgmma_desc_t b, int accumulate, int n,
                                int trans)
{
    const int warp = (int)get_local_id(0) >> 5, lane = nv_lane(), g = lane >> 2, t = lane & 3;
    __local uint *group = scratch + (warp & ~3) * NV_SCRATCH_WORDS;
    __local uint *mine = group + (warp & 3) * NV_SCRATCH_WORDS;
    for (int i = 0; i < 4; i++)
        mine[lane * 4 + i] = a[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < n / 8; j++)
        for (int e = 0; e < 4; e++) {
            const int row = 16 * (warp & 3) + g + 8 * (e >> 1), col = 8 * j + 2 * t + (e & 1);
            const int rw = row >> 4, rg = row & 7, upper = (row >> 3) & 1;
            float sum = 0.0f;
            for (int k = 0; k < 16; k++) {
                const uint word = group[rw * NV_SCRATCH_WORDS + (rg * 4 + ((k & 7) >> 1)) * 4 + upper + 2 * (k >> 3)];
                const float av = nv_emu_half(word, k & 1);
                uint at = trans ? (uint)((k >> 3) * b.stride_bytes + (k & 7) * 128 + (col >> 6) * b.leading_bytes +
                                         (col & 63) * 2)
                                : (uint)((col >> 3) * b.stride_bytes + (col & 7) * 128 + k * 2);
                at += b.offset;
                at ^= ((at >> 7) & 7) << 4;  /* the 128-byte swizzle */
                const float bv = nv_emu_to_float(((__local const ushort *)b.tile)[at >> 1]);
                sum = fma(av, bv, sum);  /* the product is exact: fma or not, the same sum */
            }
            d[4 * j + e] = (accumulate ? d[4 * j + e] : 0.0f) + sum;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#else
/* Orders this thread's register writes (accumulators, A fragments) before the wgmma that reads them. */
static inline void wgmma_fence(void)
{
    __asm__ volatile(SM90A "wgmma.fence.sync.aligned;" ::: "memory");
}

static inline void wgmma_commit(void)
{
    __asm__ volatile(SM90A "wgmma.commit_group.sync.aligned;" ::: "memory");
}

/* Waits for every committed wgmma; the accumulators are readable after it. */
static inline void wgmma_wait_all(void)
{
    __asm__ volatile(SM90A "wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

/* Ties n registers (accumulators: WGMMA_HOLD; A fragments: WGMMA_HOLD_A) to this point, so the compiler
 * neither moves their writes past it nor their reads before it, nor gives their registers to other values
 * across it. Around every wgmma batch: before the fence (what the batch reads is written by then: the
 * fence orders only what precedes it) and after the wait (a wgmma reads its A registers and writes its
 * accumulators asynchronously, until the wait). */
#define WGMMA_HOLD(d, n)                                                                                             \
    do {                                                                                                             \
        NV_UNROLL                                                                                                    \
        for (int hold_ = 0; hold_ < (n); hold_++)                                                                    \
            __asm__ volatile("" : "+f"((d)[hold_])::"memory");                                                      \
    } while (0)
#define WGMMA_HOLD_A(a, n)                                                                                           \
    do {                                                                                                             \
        NV_UNROLL                                                                                                    \
        for (int hold_ = 0; hold_ < (n); hold_++)                                                                    \
            __asm__ volatile("" : "+r"((a)[hold_])::"memory");                                                      \
    } while (0)

/* Writes to local memory by plain stores or cp.async made visible to wgmma's reads (the async proxy):
 * each writer after its writes, before the barrier. */
static inline void fence_proxy_async(void)
{
    __asm__ volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* wgmma.mma_async's operands for N = 32, 64, 128 (N / 2 accumulators a thread): D's registers, A's four
 * and the descriptor, the outputs' constraints, the predicate's source. */
#define WGMMA_D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
#define WGMMA_TAIL32 "{%16,%17,%18,%19}, %21, p, 1, 1, "
#define WGMMA_OUT32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
    "+f"(d[15])
#define WGMMA_ACC32 "%20"

#define WGMMA_D64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
#define WGMMA_TAIL64 "{%32,%33,%34,%35}, %37, p, 1, 1, "
#define WGMMA_OUT64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
    "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
    "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
    "+f"(d[31])
#define WGMMA_ACC64 "%36"

#define WGMMA_D128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
#define WGMMA_TAIL128 "{%64,%65,%66,%67}, %69, p, 1, 1, "
#define WGMMA_OUT128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
    "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
    "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), \
    "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
    "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), \
    "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), \
    "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
    "+f"(d[63])
#define WGMMA_ACC128 "%68"

/* wgmma_n{N}_{kmajor,trans}(d, a, desc_b, accumulate): D[64 x N] (+)= A[64 x 16] (registers) B[16 x N]
 * (local memory through desc_b); kmajor: B's columns contiguous (S = QKᵀ: K's rows), trans: B's rows
 * contiguous, transposed on read (PV: V's rows). accumulate 0 overwrites D. */
#define WGMMA_FUNCTION(n, layout, trans)                                                                            \
    static inline void wgmma_n##n##_##layout(float *d, const uint *a, ulong desc_b, int accumulate)                \
    {                                                                                                               \
        __asm__ volatile(SM90A "{ .reg .pred p; setp.ne.b32 p, " WGMMA_ACC##n ", 0; " WGMMA_OP(n) " " WGMMA_D##n   \
                         WGMMA_TAIL##n #trans "; }"                                                                 \
                         : WGMMA_OUT##n                                                                             \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(desc_b));                \
    }
WGMMA_FUNCTION(32, kmajor, 0)   /* S in two halves at d = 64, 64 keys */
WGMMA_FUNCTION(64, kmajor, 0)
WGMMA_FUNCTION(128, kmajor, 0)
WGMMA_FUNCTION(64, trans, 1)
WGMMA_FUNCTION(128, trans, 1)

#endif /* NV_EMULATE */

#endif /* FLASHCL_NV_WGMMA_H */
