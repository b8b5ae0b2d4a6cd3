/*
 * backward_mma_options.h: the build options (-D) of the tensor-core backward
 * that its operand layers (flash_backward_mma.cl, flash_backward_tf32.cl)
 * and its skeleton (backward_mma_skeleton.h) share: their defaults, the
 * shapes the kernels take, and nv_async.h (cp.async; nv_emulate.h with
 * -DNV_EMULATE=1), which the layers' primitives need first. The includer
 * defines DTYPE before it (nv_emulate.h reads it).
 */
#ifndef FLASHCL_BACKWARD_MMA_OPTIONS_H
#define FLASHCL_BACKWARD_MMA_OPTIONS_H

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
#ifndef FUSED_DQ
#define FUSED_DQ 0           /* 1: dQ accumulated by the dK/dV pass (backward_mma_skeleton.h) */
#endif

/* Past d = 128 a warp's dK and dV of a 16-key tile (16 d floats a thread) no longer fit beside the rest: the
 * dK/dV pass's warps pair up, both of a pair own the same keys and each keeps half of dK's and dV's columns
 * (backward_mma_skeleton.h). -DSPLIT_D=1 forces it at any head dim (the tests run it on small ones). */
#ifndef SPLIT_D
#define SPLIT_D (HEAD_DIM > 128)
#endif
#define KEY_WARPS (SPLIT_D ? WARPS / 2 : WARPS)  /* dkdv: the warps that own distinct keys */

#if HEAD_DIM % 16 != 0 || HEAD_DIM > 256 || HEAD_DIM < 16
#error "HEAD_DIM must be a multiple of 16, at most 256"
#endif
#if WARPS < 1 || WARPS > 8 || WG != 32 * WARPS
#error "WARPS must be 1..8 and WG 32 * WARPS"
#endif
#if SPLIT_D && (WARPS % 2 != 0 || FUSED_DQ)
#error "SPLIT_D (HEAD_DIM past 128) needs an even number of warps and no FUSED_DQ"
#endif
#if BLOCK_N % (16 * KEY_WARPS) != 0 || BLOCK_M % (16 * WARPS) != 0
#error "BLOCK_M must be a multiple of 16 * WARPS and BLOCK_N of 16 * KEY_WARPS (each warp owns whole 16-row tiles)"
#endif

#include "nv_async.h"

/* The layers' fragment helpers: inlined where called, as if written in the loops (emulated, they reach
 * the kernel's scratch, which nv_emulate.h says must be inlined). */
#define BACKWARD_INLINE static inline __attribute__((always_inline))

#endif /* FLASHCL_BACKWARD_MMA_OPTIONS_H */
