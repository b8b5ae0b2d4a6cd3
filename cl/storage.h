/*
 * storage.h: how a kernel reads and writes its tensors' storage type.
 * DTYPE 0 f32, 1 f16 (vload_half/vstore_half: core OpenCL, no cl_khr_fp16),
 * 2 bf16 (a float's high half). Arithmetic is always f32. DTYPE 3 is E4M3
 * inputs, which only cl/flash_forward_mma.cl's FP8 wgmma reads (itself):
 * there storage_t, LOAD and STORE are O's, O_DTYPE (0, 1 or 2).
 * Included by the kernels; tools/embed_cl.py inlines it at build time.
 */
#ifndef FLASHCL_STORAGE_H
#define FLASHCL_STORAGE_H

#ifndef DTYPE
#define DTYPE 0
#endif

#if DTYPE == 3
#ifndef O_DTYPE
#define O_DTYPE 1
#endif
#define STORAGE_DTYPE O_DTYPE
#else
#define STORAGE_DTYPE DTYPE
#endif

#if STORAGE_DTYPE == 0
typedef float storage_t;
#define LOAD(p, i) ((p)[(i)])
#define STORE(p, i, x) ((p)[(i)] = (x))
#elif STORAGE_DTYPE == 1
typedef half storage_t;                   /* pointer use only */
#define LOAD(p, i) vload_half((size_t)(i), (p))
#define STORE(p, i, x) vstore_half_rte((x), (size_t)(i), (p))
#elif STORAGE_DTYPE == 2
typedef ushort storage_t;
#define LOAD(p, i) as_float((uint)(p)[(i)] << 16)
#define STORE(p, i, x) ((p)[(i)] = float_to_bf16(x))
static ushort float_to_bf16(float x)
{
    uint u = as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u);       /* keep NaN a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);              /* round to nearest even */
    return (ushort)(u >> 16);
}
#else
#error "DTYPE must be 0 (f32), 1 (f16), 2 (bf16) or 3 (e4m3, with O_DTYPE 0, 1 or 2)"
#endif

#endif
