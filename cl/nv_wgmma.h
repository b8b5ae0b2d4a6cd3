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
 * 16 (w % 4) .. + 15, or (the _ss forms) from local memory through a
 * descriptor as B does; D's registers are mma.sync's m16n8 C fragments of those
 * rows side by side, 4 a block of 8 columns: the online softmax of
 * nv_mma.h runs on them unchanged. B comes from local memory through a
 * descriptor: tiles of rows of 64 two-byte elements (128 bytes), 8-row atoms
 * of 1024 bytes, 16-byte chunk c of row r at c ^ (r % 8) (the 128-byte
 * swizzle; a tile starts 1024-byte aligned).
 *
 * DTYPE 3 (E4M3): k-steps of 32 one-byte values (the same 32 bytes a k-step
 * as f16's 16), A's registers four values each in mma.sync's m16n8k32 8-bit
 * layout, and B K-major only (PTX has no transposed 8-bit B): the _kmajor
 * forms, with N any multiple of 16 up to 256.
 */
#ifndef FLASHCL_NV_WGMMA_H
#define FLASHCL_NV_WGMMA_H

#define SM90A "// @fcl-sm90a "  /* src/program.c's marker: keep the two in step */

#define WGMMA_CAT3_(a, b, c) a##b##c
#define WGMMA_CAT3(a, b, c) WGMMA_CAT3_(a, b, c)  /* its arguments expanded first (HEAD_DIM, S_PART) */

#if DTYPE == 1
#define WGMMA_OP(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.f16.f16"
#elif DTYPE == 2
#define WGMMA_OP(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.bf16.bf16"
#elif DTYPE == 3
#define WGMMA_OP(n) "wgmma.mma_async.sync.aligned.m64n" #n "k32.f32.e4m3.e4m3"
#else
#error "DTYPE must be 1 (f16), 2 (bf16) or 3 (e4m3)"
#endif
#define WGMMA_K (DTYPE == 3 ? 32 : 16)  /* a k-step's values: 32 bytes either way */

#if NV_EMULATE
/* -DNV_EMULATE=1 (nv_emulate.h's plain OpenCL C): the descriptor is the tile and the offsets themselves, as a
 * vector (x the tile's address, y the offset, z leading_bytes, w stride_bytes), not a struct: a struct passed
 * or returned by value is a pointer argument in the compiled code, and an always-inlined function with one
 * leaves llvm.experimental.noalias.scope.decl behind, which Oclgrind cannot run (unoptimised builds). */
typedef ulong4 wgmma_desc_t;
#define nv_emu_desc_tile(d) ((__local const uchar *)(size_t)(d).x)
#define nv_emu_desc_offset(d) ((uint)(d).y)
#define nv_emu_desc_leading(d) ((uint)(d).z)
#define nv_emu_desc_stride(d) ((uint)(d).w)

NV_EMU_INLINE wgmma_desc_t wgmma_desc(__local const uint4 *tile, uint offset, uint leading_bytes, uint stride_bytes)
{
    return (wgmma_desc_t)((ulong)(size_t)tile, offset, leading_bytes, stride_bytes);
}

NV_EMU_INLINE wgmma_desc_t wgmma_desc_plus(wgmma_desc_t d, uint offset)
{
    d.y += offset;
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

/* The descriptor of the matrix `offset` bytes further into the same tile (offset a multiple of 16): one 32-bit
 * add to the start address, the low 14 bits in 16-byte units, which no local address (all under 256 KB) carries
 * out of. wgmma_desc's mask, shifts and ors at every wgmma took the driver's code 6 instructions each (docs/perf.md
 * 2026-12-02); with a tile's descriptor made once, each product's is this add. */
static inline wgmma_desc_t wgmma_desc_plus(wgmma_desc_t d, uint offset)
{
    uint lo;
    __asm__ volatile("add.u32 %0, %1, %2;" : "=r"(lo) : "r"((uint)d), "r"(offset >> 4));
    return (d & 0xFFFFFFFF00000000ul) | lo;
}
#endif

#if NV_EMULATE
/* Emulated, every wgmma completes at once, and there is no compiler to hold back. */
#define wgmma_fence() ((void)0)
#define wgmma_commit() ((void)0)
#define wgmma_wait_all() ((void)0)
#define wgmma_wait_one() ((void)0)
#define WGMMA_HOLD(d, n) ((void)0)
#define WGMMA_HOLD_A(a, n) ((void)0)
#define wgmma_keep_a(a, n, never, at) ((void)0)
#define fence_proxy_async() ((void)0)
#define wgmma_turn_wait(group) ((void)0)  /* an order between warpgroups only: the emulation runs them in step */
#define wgmma_turn_pass(group) ((void)0)
#define wgmma_rs_kmajor(n, d, a, desc_b, accumulate) nv_emu_wgmma(nv_scratch, (d), (a), (desc_b), (accumulate), n, 0)
#define wgmma_rs_trans(n, d, a, desc_b, accumulate) nv_emu_wgmma(nv_scratch, (d), (a), (desc_b), (accumulate), n, 1)
#define wgmma_ss_kmajor(n, d, desc_a, desc_b, accumulate)                                                            \
    nv_emu_wgmma_ss(nv_scratch, (d), (desc_a), (desc_b), (accumulate), n, 0)
#define wgmma_ss_trans(n, d, desc_a, desc_b, accumulate)                                                             \
    nv_emu_wgmma_ss(nv_scratch, (d), (desc_a), (desc_b), (accumulate), n, 1)

/* The byte of an operand's element in its tile: `at` bytes into the descriptor's matrix, the 128-byte swizzle
 * applied (16-byte chunk c of a 128-byte row r at c ^ (r % 8)). K-major: element (row, k), 8-row atoms
 * stride_bytes apart. */
NV_EMU_INLINE uint nv_emu_swizzled(wgmma_desc_t desc, uint at)
{
    at += nv_emu_desc_offset(desc);
    return at ^ (((at >> 7) & 7) << 4);
}

NV_EMU_INLINE uint nv_emu_kmajor_at(wgmma_desc_t desc, int row, int byte)
{
    return nv_emu_swizzled(desc, (uint)((row >> 3) * nv_emu_desc_stride(desc) + (row & 7) * 128 + byte));
}

NV_EMU_INLINE uint nv_emu_kmajor_byte(wgmma_desc_t desc, int row, int k)
{
    return nv_emu_kmajor_at(desc, row, k * NV_EMU_OPERAND_BYTES);
}

/* MN-major (transposed): element (k, mn) of a [k][mn] tile, k's 8-row atoms stride_bytes apart, mn's 64-column
 * panels leading_bytes apart. */
NV_EMU_INLINE uint nv_emu_trans_byte(wgmma_desc_t desc, int k, int mn)
{
    return nv_emu_swizzled(desc, (uint)((k >> 3) * nv_emu_desc_stride(desc) + (k & 7) * 128 +
                                        (mn >> 6) * nv_emu_desc_leading(desc) + (mn & 63) * 2));
}

/* wgmma.mma_async m64nNk16 (E4M3: k32) with A from registers: the warpgroup's 4 warps put their A fragments
 * (mma.sync's A layout, warp w % 4 holding rows 16 (w % 4) + 0..15; a register's values along k) in their scratch; each thread then forms its
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
            const int per_word = 4 / NV_EMU_OPERAND_BYTES, per_lanes = 4 * per_word;  /* k of a register, of a quad */
            for (int k = 0; k < WGMMA_K; k++) {
                const uint word = group[rw * NV_SCRATCH_WORDS + (rg * 4 + (k % per_lanes) / per_word) * 4 + upper +
                                        2 * (k / per_lanes)];
                const float av = nv_emu_operand(word, k % per_word);
                const uint at = trans ? nv_emu_trans_byte(b, k, col) : nv_emu_kmajor_byte(b, col, k);
                const float bv = nv_emu_operand_at(nv_emu_desc_tile(b), at);
                sum = fma(av, bv, sum);  /* the product is exact: fma or not, the same sum */
            }
            d[4 * j + e] = (accumulate ? d[4 * j + e] : 0.0f) + sum;
        }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The same with A from local memory as the descriptor lays it out (see nv_emu_wgmma for B): each thread first
 * reads its own A fragment (mma.sync's A layout) from the tile. trans 0: A K-major, B K-major; trans 1 (both
 * MN-major): A a [k][64 rows] tile, B transposed. */
NV_EMU_INLINE void nv_emu_wgmma_ss(__local uint *scratch, float *d, wgmma_desc_t a_desc, wgmma_desc_t b, int accumulate,
                                   int n, int trans)
{
    const int lane = nv_lane(), row = 16 * (((int)get_local_id(0) >> 5) & 3) + (lane >> 2), k = 2 * (lane & 3);
    __local const ushort *tile = (__local const ushort *)nv_emu_desc_tile(a_desc);
    uint a[4];
    for (int i = 0; i < 4; i++) {
        const int r = row + 8 * (i & 1), c = k + 8 * (i >> 1);
        if (trans)  /* c and c + 1 in two rows of the tile */
            a[i] = (uint)tile[nv_emu_trans_byte(a_desc, c, r) >> 1] |
                   (uint)tile[nv_emu_trans_byte(a_desc, c + 1, r) >> 1] << 16;
        else  /* c and c + 1 in one 16-byte chunk: one word (E4M3: bytes 2c..2c + 3) */
            a[i] = ((__local const uint *)tile)[nv_emu_kmajor_at(a_desc, r, 2 * c) >> 2];
    }
    nv_emu_wgmma(scratch, d, a, b, accumulate, n, trans);
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

/* Waits for every committed wgmma group but the newest. */
static inline void wgmma_wait_one(void)
{
    __asm__ volatile(SM90A "wgmma.wait_group.sync.aligned 1;" ::: "memory");
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

/* Keeps ptxas from undoing an overlap of arithmetic with a wgmma in flight, called where the arithmetic ends,
 * before the wgmma's wait, with `never` 0 at run time (which the compiler cannot know). ptxas 13.0 schedules
 * within a basic block, and there it hoisted the wait over the whole softmax; and it handed the registers of a
 * wgmma's A operand to the softmax's temporaries as soon as the wgmma was issued, so those waited for the
 * wgmma to have read them. The branch never taken ends the block; on its path it reads A's n registers (stores
 * them at `at`, one a 16 bytes), so they stay A's until there. One store a register, none contiguous: with
 * 4 of 16 bytes (or stores it could join into those) ptxas predicated them instead of branching, and the
 * block did not end. */
static inline void wgmma_keep_a(const uint *a, int n, uint never, __local uint4 *at)
{
    if (never) {
NV_UNROLL
        for (int i = 0; i < n; i++)
            __asm__ volatile("st.shared.b32 [%0], %1;" ::"r"(local_address(at + i)), "r"(a[i]) : "memory");
    }
}

/* Writes to local memory by plain stores or cp.async made visible to wgmma's reads (the async proxy):
 * each writer after its writes, before the barrier. */
static inline void fence_proxy_async(void)
{
    __asm__ volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Turns between a work-group's warpgroups (the ping-pong of cl/flash_forward_mma.cl's WGMMA_PINGPONG): named
 * barrier 1 + g is warpgroup g's turn. The warpgroup before it passes the turn (bar.arrive: no wait) once its
 * wgmma are issued, and g waits for it (bar.sync) before issuing its own; each generation counts both
 * warpgroups' 256 threads. OpenCL's barrier() is barrier 0. `group` is uniform within a warpgroup. */
static inline void wgmma_turn_wait(int group)
{
    __asm__ volatile("bar.sync %0, 256;" ::"r"(group + 1) : "memory");
}

static inline void wgmma_turn_pass(int group)
{
    __asm__ volatile("bar.arrive %0, 256;" ::"r"(group + 1) : "memory");
}

/* wgmma.mma_async's operands, N / 2 accumulators a thread (N a multiple of 16, at most 256): WGMMA_REGS{C}
 * lists the C accumulators' placeholders, WGMMA_OUTS{C} their constraints; WGMMA_NEXT{C}(f) gives f the
 * placeholders of the 6 operands after them (the predicate's source, then the descriptors or A's registers). */
#define WGMMA_REGS8 "%0,%1,%2,%3,%4,%5,%6,%7"
#define WGMMA_REGS16 WGMMA_REGS8 ",%8,%9,%10,%11,%12,%13,%14,%15"
#define WGMMA_REGS24 WGMMA_REGS16 ",%16,%17,%18,%19,%20,%21,%22,%23"
#define WGMMA_REGS32 WGMMA_REGS24 ",%24,%25,%26,%27,%28,%29,%30,%31"
#define WGMMA_REGS40 WGMMA_REGS32 ",%32,%33,%34,%35,%36,%37,%38,%39"
#define WGMMA_REGS48 WGMMA_REGS40 ",%40,%41,%42,%43,%44,%45,%46,%47"
#define WGMMA_REGS56 WGMMA_REGS48 ",%48,%49,%50,%51,%52,%53,%54,%55"
#define WGMMA_REGS64 WGMMA_REGS56 ",%56,%57,%58,%59,%60,%61,%62,%63"
#define WGMMA_REGS72 WGMMA_REGS64 ",%64,%65,%66,%67,%68,%69,%70,%71"
#define WGMMA_REGS80 WGMMA_REGS72 ",%72,%73,%74,%75,%76,%77,%78,%79"
#define WGMMA_REGS88 WGMMA_REGS80 ",%80,%81,%82,%83,%84,%85,%86,%87"
#define WGMMA_REGS96 WGMMA_REGS88 ",%88,%89,%90,%91,%92,%93,%94,%95"
#define WGMMA_REGS104 WGMMA_REGS96 ",%96,%97,%98,%99,%100,%101,%102,%103"
#define WGMMA_REGS112 WGMMA_REGS104 ",%104,%105,%106,%107,%108,%109,%110,%111"
#define WGMMA_REGS120 WGMMA_REGS112 ",%112,%113,%114,%115,%116,%117,%118,%119"
#define WGMMA_REGS128 WGMMA_REGS120 ",%120,%121,%122,%123,%124,%125,%126,%127"
#define WGMMA_OUTS8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define WGMMA_OUTS16 WGMMA_OUTS8, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define WGMMA_OUTS24 WGMMA_OUTS16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define WGMMA_OUTS32 WGMMA_OUTS24, "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WGMMA_OUTS40 WGMMA_OUTS32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define WGMMA_OUTS48 WGMMA_OUTS40, "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define WGMMA_OUTS56 WGMMA_OUTS48, "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define WGMMA_OUTS64 WGMMA_OUTS56, "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define WGMMA_OUTS72 WGMMA_OUTS64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define WGMMA_OUTS80 WGMMA_OUTS72, "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define WGMMA_OUTS88 WGMMA_OUTS80, "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define WGMMA_OUTS96 WGMMA_OUTS88, "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define WGMMA_OUTS104 WGMMA_OUTS96, "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define WGMMA_OUTS112 WGMMA_OUTS104, "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define WGMMA_OUTS120 WGMMA_OUTS112, "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define WGMMA_OUTS128 WGMMA_OUTS120, "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define WGMMA_NEXT8(f) f("8", "9", "10", "11", "12", "13")
#define WGMMA_NEXT16(f) f("16", "17", "18", "19", "20", "21")
#define WGMMA_NEXT24(f) f("24", "25", "26", "27", "28", "29")
#define WGMMA_NEXT32(f) f("32", "33", "34", "35", "36", "37")
#define WGMMA_NEXT40(f) f("40", "41", "42", "43", "44", "45")
#define WGMMA_NEXT48(f) f("48", "49", "50", "51", "52", "53")
#define WGMMA_NEXT56(f) f("56", "57", "58", "59", "60", "61")
#define WGMMA_NEXT64(f) f("64", "65", "66", "67", "68", "69")
#define WGMMA_NEXT72(f) f("72", "73", "74", "75", "76", "77")
#define WGMMA_NEXT80(f) f("80", "81", "82", "83", "84", "85")
#define WGMMA_NEXT88(f) f("88", "89", "90", "91", "92", "93")
#define WGMMA_NEXT96(f) f("96", "97", "98", "99", "100", "101")
#define WGMMA_NEXT104(f) f("104", "105", "106", "107", "108", "109")
#define WGMMA_NEXT112(f) f("112", "113", "114", "115", "116", "117")
#define WGMMA_NEXT120(f) f("120", "121", "122", "123", "124", "125")
#define WGMMA_NEXT128(f) f("128", "129", "130", "131", "132", "133")

#define WGMMA_PREDICATE(acc, x1, x2, x3, x4, x5) "setp.ne.b32 p, %" acc ", 0; "
#define WGMMA_RS_OPERANDS(acc, desc_b, a0, a1, a2, a3) "{%" a0 ",%" a1 ",%" a2 ",%" a3 "}, %" desc_b ", p, 1, 1, "
#define WGMMA_SS_OPERANDS(acc, desc_a, desc_b, x3, x4, x5) "%" desc_a ", %" desc_b ", p, 1, 1, 0, "
#define WGMMA_SS_TRANS_OPERANDS(acc, desc_a, desc_b, x3, x4, x5) "%" desc_a ", %" desc_b ", p, 1, 1, 1, "

/* wgmma_n{N}_{kmajor,trans}(d, a, desc_b, accumulate): D[64 x N] (+)= A[64 x 16] (registers) B[16 x N]
 * (local memory through desc_b); kmajor: B's columns contiguous (S = QKᵀ: K's rows), trans: B's rows
 * contiguous, transposed on read (PV: V's rows). wgmma_n{N}_kmajor_ss(d, desc_a, desc_b, accumulate): the
 * same with A from local memory too (Q's rows, K-major, in the same panels); wgmma_n{N}_trans_ss(d, desc_a,
 * desc_b, accumulate): A from local memory MN-major (a [16 k][64 rows] tile: dS stored key-major) and B
 * transposed. accumulate 0 overwrites D. */
#define WGMMA_RS(n, c, layout, trans)                                                                                \
    static inline void wgmma_n##n##_##layout(float *d, const uint *a, ulong desc_b, int accumulate)                \
    {                                                                                                               \
        __asm__ volatile(SM90A "{ .reg .pred p; " WGMMA_NEXT##c(WGMMA_PREDICATE) WGMMA_OP(n) " {" WGMMA_REGS##c    \
                         "}, " WGMMA_NEXT##c(WGMMA_RS_OPERANDS) #trans "; }"                                        \
                         : WGMMA_OUTS##c                                                                            \
                         : "r"(accumulate), "l"(desc_b), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));                \
    }
/* The _ss forms: name_suffix kmajor_ss (A and B K-major) or trans_ss (both MN-major); operands their placeholders
 * (WGMMA_SS_OPERANDS or WGMMA_SS_TRANS_OPERANDS) and trans_b B's transpose bit. */
#define WGMMA_SS_FORM(n, c, name_suffix, operands, trans_b)                                                          \
    static inline void wgmma_n##n##_##name_suffix(float *d, ulong desc_a, ulong desc_b, int accumulate)            \
    {                                                                                                               \
        __asm__ volatile(SM90A "{ .reg .pred p; " WGMMA_NEXT##c(WGMMA_PREDICATE) WGMMA_OP(n) " {" WGMMA_REGS##c    \
                         "}, " WGMMA_NEXT##c(operands) #trans_b "; }"                                               \
                         : WGMMA_OUTS##c                                                                            \
                         : "r"(accumulate), "l"(desc_a), "l"(desc_b));                                              \
    }
#define WGMMA_SS(n, c) WGMMA_SS_FORM(n, c, kmajor_ss, WGMMA_SS_OPERANDS, 0)
#if DTYPE == 3
/* E4M3 has no transpose immediates: the operands end at the scales. */
#define WGMMA_RS8_OPERANDS(acc, desc_b, a0, a1, a2, a3) "{%" a0 ",%" a1 ",%" a2 ",%" a3 "}, %" desc_b ", p, 1, 1"
#define WGMMA_SS8_OPERANDS(acc, desc_a, desc_b, x3, x4, x5) "%" desc_a ", %" desc_b ", p, 1, 1"
#define WGMMA_RS8(n, c)                                                                                              \
    static inline void wgmma_n##n##_kmajor(float *d, const uint *a, ulong desc_b, int accumulate)                  \
    {                                                                                                               \
        __asm__ volatile(SM90A "{ .reg .pred p; " WGMMA_NEXT##c(WGMMA_PREDICATE) WGMMA_OP(n) " {" WGMMA_REGS##c    \
                         "}, " WGMMA_NEXT##c(WGMMA_RS8_OPERANDS) "; }"                                              \
                         : WGMMA_OUTS##c                                                                            \
                         : "r"(accumulate), "l"(desc_b), "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]));                \
    }
#define WGMMA_SS8(n, c)                                                                                              \
    static inline void wgmma_n##n##_kmajor_ss(float *d, ulong desc_a, ulong desc_b, int accumulate)                \
    {                                                                                                               \
        __asm__ volatile(SM90A "{ .reg .pred p; " WGMMA_NEXT##c(WGMMA_PREDICATE) WGMMA_OP(n) " {" WGMMA_REGS##c    \
                         "}, " WGMMA_NEXT##c(WGMMA_SS8_OPERANDS) "; }"                                              \
                         : WGMMA_OUTS##c                                                                            \
                         : "r"(accumulate), "l"(desc_a), "l"(desc_b));                                              \
    }
/* S = QKᵀ (S_PART keys) and O += PV (N = HEAD_DIM_V, from Vᵀ's rows), A from registers; S with Q from local memory. */
WGMMA_RS8(16, 8)
WGMMA_RS8(32, 16)
WGMMA_RS8(48, 24)
WGMMA_RS8(64, 32)
WGMMA_RS8(80, 40)
WGMMA_RS8(96, 48)
WGMMA_RS8(112, 56)
WGMMA_RS8(128, 64)
WGMMA_RS8(144, 72)
WGMMA_RS8(160, 80)
WGMMA_RS8(176, 88)
WGMMA_RS8(192, 96)
WGMMA_RS8(208, 104)
WGMMA_RS8(224, 112)
WGMMA_RS8(240, 120)
WGMMA_RS8(256, 128)
WGMMA_SS8(32, 16)
WGMMA_SS8(64, 32)
WGMMA_SS8(128, 64)
#else
#define WGMMA_SS_TRANS(n, c) WGMMA_SS_FORM(n, c, trans_ss, WGMMA_SS_TRANS_OPERANDS, 1)
/* S = QKᵀ: 32, 64, 128 or 192 keys a product (S_PART in flash_forward_mma.cl); 16 the backward's half of a
 * 32-key block where d = 32 (flash_backward_wgmma.cl's N_PART). */
WGMMA_RS(32, 16, kmajor, 0)
WGMMA_RS(64, 32, kmajor, 0)
WGMMA_RS(128, 64, kmajor, 0)
WGMMA_RS(192, 96, kmajor, 0)
WGMMA_SS(16, 8)
WGMMA_SS(32, 16)
WGMMA_SS(64, 32)
WGMMA_SS(128, 64)
WGMMA_SS(192, 96)
/* dQ += dS K in the backward's dK/dV pass (flash_backward_wgmma.cl's FUSED_DQ, its DQ_PART). */
WGMMA_SS_TRANS(16, 8)
WGMMA_SS_TRANS(64, 32)
/* O += PV: one product the whole head dim. */
WGMMA_RS(16, 8, trans, 1)
WGMMA_RS(32, 16, trans, 1)
WGMMA_RS(48, 24, trans, 1)
WGMMA_RS(64, 32, trans, 1)
WGMMA_RS(80, 40, trans, 1)
WGMMA_RS(96, 48, trans, 1)
WGMMA_RS(112, 56, trans, 1)
WGMMA_RS(128, 64, trans, 1)
WGMMA_RS(144, 72, trans, 1)
WGMMA_RS(160, 80, trans, 1)
WGMMA_RS(176, 88, trans, 1)
WGMMA_RS(192, 96, trans, 1)
WGMMA_RS(208, 104, trans, 1)
WGMMA_RS(224, 112, trans, 1)
WGMMA_RS(240, 120, trans, 1)
WGMMA_RS(256, 128, trans, 1)
#endif /* DTYPE 3 */

#define wgmma_rs_kmajor(n, d, a, desc_b, accumulate) WGMMA_CAT3(wgmma_n, n, _kmajor)(d, a, desc_b, accumulate)
#define wgmma_ss_kmajor(n, d, desc_a, desc_b, accumulate) WGMMA_CAT3(wgmma_n, n, _kmajor_ss)(d, desc_a, desc_b, accumulate)
#define wgmma_rs_trans(n, d, a, desc_b, accumulate) WGMMA_CAT3(wgmma_n, n, _trans)(d, a, desc_b, accumulate)
#define wgmma_ss_trans(n, d, desc_a, desc_b, accumulate)                                                             \
    WGMMA_CAT3(wgmma_n, n, _trans_ss)(d, desc_a, desc_b, accumulate)

#endif /* NV_EMULATE */

#endif /* FLASHCL_NV_WGMMA_H */
