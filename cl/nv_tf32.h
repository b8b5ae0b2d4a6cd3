/*
 * nv_tf32.h: the TF32 tensor-core primitives of the f32 kernels
 * (flash_forward_tf32.cl, flash_backward_tf32.cl): mma.sync m16n8k8 .tf32,
 * the f32 -> TF32 rounding and the operand split of the PASSES 1 / 3 modes.
 *
 *   PASSES 1  every product a·b is tf32(a)·tf32(b): operands keep 10 of
 *             f32's 23 mantissa bits (relative error ~2^-11 per operand).
 *   PASSES 3  the split a = big + small, big = tf32(a), small = tf32(a - big),
 *             a·b ~ big·big + big·small + small·big: three mma per product,
 *             operand error ~2^-21, close to f32 (the "3xTF32" of CUTLASS).
 *
 * mma.sync m16n8k8 .tf32 fragments (g = lane/4, t = lane%4):
 *   A 16×8:  a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
 *   B 8×8:   b0 = B[t][g], b1 = B[t+4][g]
 *   C 16×8:  c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]
 * A contraction may visit its k indices in any order if both operands use
 * the same one. The kernels map the instruction's k = t to column 2t and
 * k = t + 4 to column 2t + 1 of each group of eight: then an accumulator is
 * directly the A operand of a product that contracts over its columns
 * (a0 = c0, a1 = c2, a2 = c1, a3 = c3), no shuffle.
 *
 * The includer defines PASSES and includes nv_async.h (NV_EMULATE) first;
 * with -DNV_EMULATE=1 nv_emulate.h has mma_16x8x8 and to_tf32 instead.
 */
#ifndef FLASHCL_NV_TF32_H
#define FLASHCL_NV_TF32_H

#if PASSES != 1 && PASSES != 3
#error "PASSES must be 1 or 3"
#endif

#if !NV_EMULATE
static inline void mma_16x8x8(float *c, const uint *a, uint b0, uint b1)
{
    __asm__ volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static inline uint to_tf32(float x)
{
    uint r;
    __asm__("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
#define NV_TF32_INLINE static inline
#else
#define NV_TF32_INLINE NV_EMU_INLINE  /* helpers that reach the emulation's scratch: inlined (nv_emulate.h) */
#endif

/* An operand split for the mma: big = tf32(x) and, with three passes,
 * small = tf32(x - big). */
typedef struct {
    uint big;
#if PASSES == 3
    uint small;
#endif
} operand;

static inline operand to_operand(float x)
{
    operand o;
    o.big = to_tf32(x);
#if PASSES == 3
    o.small = to_tf32(x - as_float(o.big));
#endif
    return o;
}

/* c += a·b over one m16n8k8 step, in one or three passes (small terms first,
 * so the large product is added last to the accumulated value). */
NV_TF32_INLINE void mma_split(float *c, const operand *a, operand b0, operand b1 NV_SCRATCH_PARAM)
{
    const uint big[4] = {a[0].big, a[1].big, a[2].big, a[3].big};
#if PASSES == 3
    const uint small[4] = {a[0].small, a[1].small, a[2].small, a[3].small};
    mma_16x8x8(c, small, b0.big, b1.big);
    mma_16x8x8(c, big, b0.small, b1.small);
#endif
    mma_16x8x8(c, big, b0.big, b1.big);
}

#endif /* FLASHCL_NV_TF32_H */
