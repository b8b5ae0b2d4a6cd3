/*
 * kv8_tiles.h: an E4M3 KV cache's blocks on the tensor cores (-DKV_E4M3 1, or
 * 2 where the device converts E4M3 itself: compute capability 8.9+). The
 * stored bytes stream by cp.async into stages (16 values a chunk, rows
 * unpadded); a landed stage is converted, exactly (cl/e4m3.h), into the f16
 * or bf16 K and V tiles the unchanged products read, swizzled as the 2-byte
 * loaders write them (nv_mma16.h's kv_index, v_index). A stage: BLOCK_N rows
 * of K (CH8 chunks each), then BLOCK_N rows of V (CH8_V). Used by
 * cl/flash_decode_mma.cl and cl/flash_forward_mma.cl (mma.sync); each has
 * its own loader of a stage (their paged caches' row lookups differ).
 */
#ifndef FLASHCL_KV8_TILES_H
#define FLASHCL_KV8_TILES_H

#include "e4m3.h"

#define CH8 (HEAD_DIM / 16)                      /* 16-byte chunks of an E4M3 K row as stored */
#define CH8_V (HEAD_DIM_V / 16)                  /* ... of a V row */
#define KV8_CHUNKS (CH8 > CH8_V ? CH8 : CH8_V)   /* the wider row's: one lookup a key serves both */
#define STAGE8 (BLOCK_N * (CH8 + CH8_V))         /* a stage, in 16-byte chunks */

/* Two E4M3 bytes (the low two of w) as a pair of Q's 16-bit type, the first in the low half. */
static inline uint kv8_pair(uint w)
{
#if KV_E4M3 == 2 && !NV_EMULATE && DTYPE == 1
    uint d;
    __asm__("{ .reg .b16 a; cvt.u16.u32 a, %1; cvt.rn.f16x2.e4m3x2 %0, a; }" : "=r"(d) : "r"(w));
    return d;
#elif KV_E4M3 == 2 && !NV_EMULATE
    uint d;  /* to f16 pairs, then each f16 (exact in f32) to bf16: exact, every E4M3 value is a bf16 */
    __asm__("{ .reg .b16 a, lo, hi; .reg .b32 h; .reg .f32 flo, fhi; cvt.u16.u32 a, %1; "
            "cvt.rn.f16x2.e4m3x2 h, a; mov.b32 {lo, hi}, h; cvt.f32.f16 flo, lo; cvt.f32.f16 fhi, hi; "
            "cvt.rn.bf16x2.f32 %0, fhi, flo; }"
            : "=r"(d) : "r"(w));
    return d;
#else
    return e4m3x2_to_pair(w);
#endif
}

/* Sixteen E4M3 values (a stored chunk) as the two 16-byte chunks of Q's type they become. */
static inline void kv8_chunk(uint4 w, __local uint4 *lo, __local uint4 *hi)
{
    *lo = (uint4)(kv8_pair(w.x), kv8_pair(w.x >> 16), kv8_pair(w.y), kv8_pair(w.y >> 16));
    *hi = (uint4)(kv8_pair(w.z), kv8_pair(w.z >> 16), kv8_pair(w.w), kv8_pair(w.w >> 16));
}

/* One stored 16-byte chunk by cp.async, or zeros past the end. */
static inline void copy_chunk8(__local uint4 *dst, __global const uchar *src, bool valid)
{
    if (valid)
        copy_async_16(local_address(dst), (__global const ushort *)src);
    else
        *dst = (uint4)(0u);
}

/* A landed stage converted into the K and V tiles the products read: stored chunk ch of a row is chunks 2 ch and
 * 2 ch + 1 of the converted row. */
static inline void convert_kv8(__local uint4 *k_tile, __local uint4 *v_tile, __local const uint4 *stage8, int tid)
{
    for (int c = tid; c < BLOCK_N * KV8_CHUNKS; c += WG) {
        const int r = c / KV8_CHUNKS, ch = c % KV8_CHUNKS;
        if (ch < CH8)
            kv8_chunk(stage8[r * CH8 + ch], &k_tile[kv_index(r, 2 * ch)], &k_tile[kv_index(r, 2 * ch + 1)]);
        if (ch < CH8_V)
            kv8_chunk(stage8[BLOCK_N * CH8 + r * CH8_V + ch], &v_tile[v_index(r, 2 * ch)],
                      &v_tile[v_index(r, 2 * ch + 1)]);
    }
}

#endif /* FLASHCL_KV8_TILES_H */
