/*
 * nv_emulate.h: plain OpenCL C 1.2 stand-ins for the inline-PTX primitives
 * of nv_async.h, nv_mma.h, nv_mma16.h and nv_tf32.h, so the tensor-core
 * kernels run on any device (PoCL in CI) with -DNV_EMULATE=1. Slow by
 * design: faithful to the PTX ISA's fragment layouts, not fast.
 *
 * A warp is 32 consecutive work-items (warp = local id / 32, lane = local id
 * % 32), as on NVIDIA. Whatever a PTX instruction moves between the lanes of
 * a warp (ldmatrix's rows, mma's fragments, shfl.sync's values) goes through
 * a per-warp area of __local scratch with a barrier after the writes and one
 * after the reads. That is legal only where the whole work-group reaches each
 * primitive together: the tensor-core kernels call them in work-group-uniform
 * control flow (their key loops run per work-group; masks change values, not
 * calls).
 *
 * __local variables live at kernel scope in OpenCL C 1.2, so the kernel
 * declares the scratch with NV_SCRATCH_DECL, and the functions that reach a
 * primitive take it through NV_SCRATCH_PARAM / NV_SCRATCH_ARG (both empty
 * without emulation). The primitives keep their PTX names as macros that pass
 * the scratch along, so call sites do not change.
 *
 * local_address(p) is the __local pointer itself (not a 32-bit shared-window
 * address): ldmatrix here reads the 16-byte row at its own lane's address and
 * exchanges the data, not the addresses.
 *
 * Included by nv_async.h (once: embed_cl.py inlines a header at its first
 * include) where NV_EMULATE is set; it includes nothing itself, so the
 * embedded text of a source that does not emulate is unchanged.
 */
#ifndef FLASHCL_NV_EMULATE_H
#define FLASHCL_NV_EMULATE_H

/* Every helper is inlined where it is called: a helper left out of line and always passed the same
 * scratch gets the kernel-scope __local array propagated into its body by the optimiser, where PoCL
 * (3.1, LLVM 15) no longer sees it as the kernel's local and leaves one static copy that concurrent
 * work-groups share (seen: flash_decode_mma.so with the scratch in .bss, wrong results with more than
 * one PoCL thread). */
#define NV_EMU_INLINE static inline __attribute__((always_inline))

/* ---- cp.async: plain copies, visible after the barrier that follows them in the kernels ---- */

#define local_address(p) ((__local void *)(p))
typedef __local void *local_address_t;
#define local_address_plus(a, bytes) ((__local void *)((__local uchar *)(a) + (bytes)))

/* ex2.approx.ftz: 2^x to about 2 ulp (the PTX ISA's bound), subnormal results flushed to zero. Not
 * native_exp2, whose accuracy OpenCL leaves to the implementation: Intel's CPU runtime gives far less than
 * the GPU's instruction, and an emulation must not be less exact than what it emulates. */
NV_EMU_INLINE float exp2_ftz(float x)
{
    const float r = exp2(x);
    return r < FLT_MIN ? 0.0f : r;
}

NV_EMU_INLINE void copy_async_16(__local void *address, __global const void *src)
{
    *(__local uint4 *)address = vload4(0, (__global const uint *)src);
}

NV_EMU_INLINE void copy_async_zfill_bytes(__local void *address, __global const void *src, uint size, uint valid)
{
    __local uchar *dst = (__local uchar *)address;
    __global const uchar *s = (__global const uchar *)src;
    for (uint i = 0; i < size; i++)
        dst[i] = i < valid ? s[i] : (uchar)0;
}
#define copy_async_zfill_8(address, src, valid) copy_async_zfill_bytes(address, src, 8u, valid)
#define copy_async_zfill_16(address, src, valid) copy_async_zfill_bytes(address, src, 16u, valid)

NV_EMU_INLINE void copy_async_commit(void)
{
}
#define COPY_ASYNC_WAIT(n) ((void)0)

/* ---- the per-warp scratch ---- */

/* 32-bit words a warp: mma's A (4) and B (2) registers of 32 lanes; ldmatrix's 32 rows of 16 bytes
 * and a shuffle's 32 values fit in it. */
#define NV_SCRATCH_WORDS 192
#define NV_SCRATCH_DECL                                                                                              \
    __local uint4 nv_scratch_words_[WARPS * NV_SCRATCH_WORDS / 4] __attribute__((aligned(16)));                      \
    __local uint *nv_scratch = (__local uint *)nv_scratch_words_
#define NV_SCRATCH_PARAM , __local uint *nv_scratch
#define NV_SCRATCH_ARG , nv_scratch

NV_EMU_INLINE __local uint *nv_warp_scratch(__local uint *scratch)
{
    return scratch + ((int)get_local_id(0) >> 5) * NV_SCRATCH_WORDS;
}

NV_EMU_INLINE int nv_lane(void)
{
    return (int)get_local_id(0) & 31;
}

/* ---- shfl.sync.bfly within a quad ---- */

NV_EMU_INLINE float nv_emu_quad_xor(__local uint *scratch, float v, int mask)
{
    __local float *w = (__local float *)nv_warp_scratch(scratch);
    const int lane = nv_lane();
    w[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float r = w[lane ^ mask];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
#define quad_xor(v, mask) nv_emu_quad_xor(nv_scratch, (v), (mask))

/* ---- f16 / bf16 ---- */

#if DTYPE == 1 || DTYPE == 2
NV_EMU_INLINE float nv_emu_to_float(uint bits16)
{
#if DTYPE == 1
    const ushort h = (ushort)bits16;
    return vload_half(0, (const half *)&h);  /* exact */
#else
    return as_float(bits16 << 16);
#endif
}

NV_EMU_INLINE uint nv_emu_from_float(float x)
{
#if DTYPE == 1
    ushort h;
    vstore_half_rte(x, 0, (half *)&h);
    return h;
#else
    uint u = as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;                           /* cvt.rn.bf16x2's canonical NaN */
    u += 0x7fffu + ((u >> 16) & 1u);              /* round to nearest even */
    return u >> 16;
#endif
}

/* cvt.rn.{f16,bf16}x2.f32: lo in the low 16 bits. A lane-local operation. */
NV_EMU_INLINE uint pack_pair(float lo, float hi)
{
    return nv_emu_from_float(lo) | (nv_emu_from_float(hi) << 16);
}

/* Element `upper` (0 low, 1 high) of a packed pair. */
NV_EMU_INLINE float nv_emu_half(uint word, int upper)
{
    return nv_emu_to_float(upper ? word >> 16 : word & 0xffffu);
}

/* ---- mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.f32 ----
 * (g = lane / 4, t = lane % 4) a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..];
 * b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]; c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1].
 * Products of two f16 (or bf16) values are exact in f32; they are summed in f32, k in order, onto c. */
NV_EMU_INLINE void nv_emu_mma(__local uint *scratch, float *c, const uint *a, uint b0, uint b1)
{
    __local uint *w = nv_warp_scratch(scratch);
    __local uint *wa = w, *wb = w + 128;  /* wa[lane][4], wb[lane][2] */
    const int lane = nv_lane(), g = lane >> 2, t = lane & 3;
    wa[lane * 4 + 0] = a[0];
    wa[lane * 4 + 1] = a[1];
    wa[lane * 4 + 2] = a[2];
    wa[lane * 4 + 3] = a[3];
    wb[lane * 2 + 0] = b0;
    wb[lane * 2 + 1] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    float d[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float sum = 0.0f;
        for (int k = 0; k < 16; k++) {
            const int src_t = (k & 7) >> 1, hi_k = k >> 3, h = k & 1;
            const float av = nv_emu_half(wa[((row & 7) * 4 + src_t) * 4 + (row >> 3) + 2 * hi_k], h);
            const float bv = nv_emu_half(wb[(col * 4 + src_t) * 2 + hi_k], h);
            sum = fma(av, bv, sum);  /* the product is exact: fma or not, the same sum */
        }
        d[e] = c[e] + sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    c[0] = d[0];
    c[1] = d[1];
    c[2] = d[2];
    c[3] = d[3];
}
#define mma_16x8x16(c, a, b0, b1) nv_emu_mma(nv_scratch, (c), (a), (b0), (b1))

/* A tensor-core operand's elements (nv_wgmma.h's emulated wgmma): NV_EMU_OPERAND_BYTES a value, element i of a
 * 32-bit register, and the element at byte `at` of a tile. */
#define NV_EMU_OPERAND_BYTES 2
NV_EMU_INLINE float nv_emu_operand(uint word, int i)
{
    return nv_emu_half(word, i);
}

NV_EMU_INLINE float nv_emu_operand_at(__local const uchar *tile, uint at)
{
    return nv_emu_to_float(((__local const ushort *)tile)[at >> 1]);
}
#endif /* DTYPE 1 or 2 */

#if DTYPE == 3
/* ---- E4M3 (FP8: 4 exponent bits of bias 7, 3 mantissa bits, no infinities, NaN S.1111.111) ---- */

NV_EMU_INLINE float nv_emu_e4m3(uint byte)
{
    const uint e = (byte >> 3) & 15u, m = byte & 7u;
    const float magnitude = e == 15u && m == 7u ? NAN : e == 0u ? (float)m * 0x1p-9f : ldexp(1.0f + (float)m * 0.125f, (int)e - 7);
    return byte & 0x80u ? -magnitude : magnitude;
}

/* cvt.rn.satfinite.e4m3x2.f32's rounding: to nearest even, magnitudes past 448 (the largest finite) to 448,
 * NaN to 0x7f. A lane-local operation. */
NV_EMU_INLINE uint nv_emu_to_e4m3(float x)
{
    if (isnan(x))
        return 0x7fu;
    const uint sign = (as_uint(x) >> 24) & 0x80u;
    const float a = fabs(x);
    if (a >= 448.0f)
        return sign | 0x7eu;
    if (a < 0x1p-6f)  /* subnormal (or rounding up to the smallest normal, 8 in these bits too) */
        return sign | (uint)rint(a * 0x1p9f);
    uint u = as_uint(a);
    u += 0x7ffffu + ((u >> 20) & 1u);  /* round the 23 mantissa bits to 3, ties to even */
    return sign | (((u >> 23) - 120u) << 3) | ((u >> 20) & 7u);  /* exponent bias 127 -> 7 */
}

/* Four floats as E4M3 in one register, a0 in the low byte (A's order in a wgmma fragment). */
NV_EMU_INLINE uint pack_e4m3x4(float a0, float a1, float a2, float a3)
{
    return nv_emu_to_e4m3(a0) | nv_emu_to_e4m3(a1) << 8 | nv_emu_to_e4m3(a2) << 16 | nv_emu_to_e4m3(a3) << 24;
}

#define NV_EMU_OPERAND_BYTES 1
NV_EMU_INLINE float nv_emu_operand(uint word, int i)
{
    return nv_emu_e4m3((word >> (8 * i)) & 0xffu);
}

NV_EMU_INLINE float nv_emu_operand_at(__local const uchar *tile, uint at)
{
    return nv_emu_e4m3(tile[at]);
}
#endif /* DTYPE 3 */

/* ---- TF32 (nv_tf32.h): cvt.rna.tf32.f32 and mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 ---- */

/* Round to nearest, ties away from zero, to 10 mantissa bits (the low 13 bits zero). A lane-local
 * operation. Sign-magnitude bits: adding half the dropped range rounds the magnitude; Inf stays Inf
 * and NaN stays a NaN. */
NV_EMU_INLINE uint to_tf32(float x)
{
    const uint u = as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u)
        return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fffffffu : u;
    return (u + 0x1000u) & 0xffffe000u;
}

/* (g = lane / 4, t = lane % 4) a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4];
 * b0 = B[t][g], b1 = B[t+4][g]; c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]. The hardware reads
 * an operand's top 19 bits only, so do these; products of two TF32 values are exact in f32, summed in
 * f32, k in order, onto c. */
NV_EMU_INLINE void nv_emu_mma_tf32(__local uint *scratch, float *c, const uint *a, uint b0, uint b1)
{
    __local uint *w = nv_warp_scratch(scratch);
    __local uint *wa = w, *wb = w + 128;  /* wa[lane][4], wb[lane][2] */
    const int lane = nv_lane(), g = lane >> 2, t = lane & 3;
    wa[lane * 4 + 0] = a[0];
    wa[lane * 4 + 1] = a[1];
    wa[lane * 4 + 2] = a[2];
    wa[lane * 4 + 3] = a[3];
    wb[lane * 2 + 0] = b0;
    wb[lane * 2 + 1] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    float d[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float sum = 0.0f;
        for (int k = 0; k < 8; k++) {
            const float av = as_float(wa[((row & 7) * 4 + (k & 3)) * 4 + (row >> 3) + 2 * (k >> 2)] & 0xffffe000u);
            const float bv = as_float(wb[(col * 4 + (k & 3)) * 2 + (k >> 2)] & 0xffffe000u);
            sum = fma(av, bv, sum);  /* the product is exact: fma or not, the same sum */
        }
        d[e] = c[e] + sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    c[0] = d[0];
    c[1] = d[1];
    c[2] = d[2];
    c[3] = d[3];
}
#define mma_16x8x8(c, a, b0, b1) nv_emu_mma_tf32(nv_scratch, (c), (a), (b0), (b1))

/* ---- ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 ----
 * Lanes 8j..8j+7 give the rows of matrix j (16 bytes each); non-transposed, register j of lane (g, t)
 * holds row g, halves 2t, 2t+1 of matrix j; transposed, column g, rows 2t and 2t+1. */
NV_EMU_INLINE void nv_emu_ldmatrix_x4(__local uint *scratch, __local const void *address, uint *r, int trans)
{
    __local uint *w = nv_warp_scratch(scratch);
    const int lane = nv_lane(), g = lane >> 2, t = lane & 3;
    ((__local uint4 *)w)[lane] = *(__local const uint4 *)address;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint v[4];
    for (int j = 0; j < 4; j++) {
        if (trans) {
            __local const ushort *h = (__local const ushort *)w;
            v[j] = (uint)h[(8 * j + 2 * t) * 8 + g] | ((uint)h[(8 * j + 2 * t + 1) * 8 + g] << 16);
        } else {
            v[j] = w[(8 * j + g) * 4 + t];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    r[0] = v[0];
    r[1] = v[1];
    r[2] = v[2];
    r[3] = v[3];
}
#define ldmatrix_x4(address, r) nv_emu_ldmatrix_x4(nv_scratch, (address), (r), 0)
#define ldmatrix_x4_trans(address, r) nv_emu_ldmatrix_x4(nv_scratch, (address), (r), 1)

#endif /* FLASHCL_NV_EMULATE_H */
