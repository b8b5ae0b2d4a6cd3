/*
 * nv_async.h: cp.async, NVIDIA's asynchronous copies from global to shared
 * (local) memory (sm_80+, inline PTX). A work-item starts copies, commits
 * them as a group, and waits for all but the newest n groups; the copies
 * need no registers, so the next block streams in while this one computes.
 * Shared by the tensor-core kernels (nv_mma.h) and the decode kernel. The
 * local arrays they write must be __attribute__((aligned(16))).
 */
#ifndef FLASHCL_NV_ASYNC_H
#define FLASHCL_NV_ASYNC_H

#ifndef NV_EMULATE
#define NV_EMULATE 0
#endif

/* The tensor-core kernels' full unrolls, NV_UNROLL before a loop. Emulated, the loops stay loops:
 * every primitive there holds barriers, and PoCL's compile time grows with the barriers it sees
 * (measured: 61 s to 1.9 s for one forward shape at d = 128, the same results). */
#if NV_EMULATE
#define NV_UNROLL _Pragma("nounroll")
#else
#define NV_UNROLL _Pragma("unroll")
#endif

#if NV_EMULATE
#include "nv_emulate.h"  /* plain OpenCL C for every primitive here, nv_mma.h's, nv_mma16.h's, nv_tf32.h's */
#else
/* The kernel-scope scratch the emulation exchanges lanes' values through: none here. */
#define NV_SCRATCH_DECL
#define NV_SCRATCH_PARAM
#define NV_SCRATCH_ARG

static inline uint local_address(__local const void *p)
{
    return (uint)(size_t)p;
}
typedef uint local_address_t;
#define local_address_plus(a, bytes) ((a) + (bytes))  /* a local_address advanced by `bytes` */

/* 2^x with subnormal inputs and results flushed to zero: one MUFU.EX2. native_exp2 keeps subnormals
 * (OpenCL's default), and for that ptxas wraps each ex2.approx.f32 in a test and two multiplies (measured
 * offline with ptxas 13.0 for sm_90: 3 more instructions an exponent). The softmaxes call this on
 * arguments <= 0; what is flushed is below 2^-126 of the row's largest term, as FlashAttention's
 * fast-math builds flush it. Not volatile: the compiler may schedule it like any arithmetic. */
static inline float exp2_ftz(float x)
{
    float r;
    __asm__("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

static inline void copy_async_16(uint address, __global const void *src)
{
    __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(src) : "memory");
}

/* 8 or 16 bytes of which the first `valid` come from src and the rest are
 * zeros (valid 0: zeros only, src not read). .cg takes 16 bytes only, .ca
 * (through L1) also 4 and 8. */
static inline void copy_async_zfill_8(uint address, __global const void *src, uint valid)
{
    __asm__ volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(address), "l"(src), "r"(valid) : "memory");
}

static inline void copy_async_zfill_16(uint address, __global const void *src, uint valid)
{
    __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(address), "l"(src), "r"(valid) : "memory");
}

static inline void copy_async_commit(void)
{
    __asm__ volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until at most `n` committed groups are still in flight. */
#define COPY_ASYNC_WAIT(n) __asm__ volatile("cp.async.wait_group " #n ";" ::: "memory")
#endif /* NV_EMULATE */

/* Orders this work-item's global memory accesses before and after it for every work-group of the device
 * (PTX fence.acq_rel.gpu): a work-group's stores, then a count other work-groups read atomically (split.h's
 * merge in place). Emulated, OpenCL's global fence (the CPU runtimes run work-groups as threads of one
 * coherent memory). */
static inline void device_fence(void)
{
#if NV_EMULATE
    mem_fence(CLK_GLOBAL_MEM_FENCE);
#else
    __asm__ volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
}

#endif
