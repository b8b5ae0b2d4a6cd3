/*
 * flashcl_tools.h: what the bundled tools use besides the call API — the
 * sizing rule, the tuning file's candidates and lines, the IO model. An
 * application that only runs attention needs flashcl.h alone.
 */
#ifndef FLASHCL_TOOLS_H
#define FLASHCL_TOOLS_H

#include "flashcl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* The sizing rule                                                            */
/* ------------------------------------------------------------------------ */

/* The sizing rule: a tile holds about four B×d arrays (Q, K, V blocks and the
 * output accumulator) of elem_bytes each, so
 *     B <= local_mem_bytes / (4 · elem_bytes · head_dim),
 * 16·B·d bytes for 4-byte floats. Returns that bound before any rounding to
 * what a kernel supports (0 if an argument is 0). E.g. 196608 bytes, d = 128,
 * 4-byte floats -> 96. */
FLASHCL_API size_t flashcl_block_size_bound(size_t local_mem_bytes, size_t elem_bytes,
                                            size_t head_dim);

/* ------------------------------------------------------------------------ */
/* The kernels                                                                */
/* ------------------------------------------------------------------------ */

/* What one kernel of the library's table runs, for listings such as
 * `flashcl-probe --kernels` (docs/design.md's table is its output). */
struct flashcl_kernel_info {
    const char *name;        /* as params.kernel_options and struct flashcl_tile name it */
    const char *source;      /* its OpenCL C file, e.g. "cl/flash_forward_mma.cl" */
    const char *summary;     /* one sentence: what it is for */
    int backward;            /* 1: computes dQ, dK, dV; 0: the forward */
    unsigned dtypes;         /* bit 1 << FLASHCL_F32 / F16 / BF16 / E4M3 per storage type it takes */
    int head_dim_step;       /* head dims it takes: multiples of this ... */
    int head_dim_max;        /* ... up to this */
    int tensor_cores;        /* 1: NVIDIA sm_80+ tensor cores (mma.sync); 2: Hopper's wgmma */
    int varlen;              /* takes packed batches (flashcl_forward_varlen) */
    int kv_cache;            /* takes KV caches (flashcl_forward_kv_cache) */
    int split_kv;            /* splits a query block's keys across work-groups */
    int opt_in;              /* planned only where kernel_options name it */
    int softcap;             /* computes logit softcapping (attn.softcap) */
    int sinks;               /* computes attention sinks (attn.sinks; every backward kernel takes them) */
    int alibi;               /* computes ALiBi biases (attn.alibi_slopes) */
    int head_dim_v;          /* takes a value head dim other than head_dim (attn.head_dim_v) */
    int nondeterministic;    /* 1: its results' bits may change from run to run (float atomics: opt-in only) */
    unsigned char reserved[8];
};

/* Kernels in the table, in the planner's order of preference. */
FLASHCL_API int flashcl_kernel_count(void);
/* Kernel `index` (0 .. flashcl_kernel_count() - 1) into *out. */
FLASHCL_API flashcl_status flashcl_kernel_describe(int index, struct flashcl_kernel_info *out);
/* Its shapes as one line of text, for listings: the tunable axes (range and
 * the candidates --tune tries), the built-in shapes preferred first with
 * where each applies, and whether a sizing rule sizes it, e.g.
 * "axes: warps 1..8 {2,4,8}, block_n 16..256 {32,64}; built-in: d 1..128:
 * warps=4,block_n=64". FLASHCL_INVALID_VALUE if it does not fit in size. */
FLASHCL_API flashcl_status flashcl_kernel_shapes(int index, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Tuning                                                                     */
/* ------------------------------------------------------------------------ */

/* One configuration of the tuning file: for (kernel, dtype, head_dim,
 * causal), the tile the library should use. */
struct flashcl_tuned_config {
    const char *kernel;    /* a kernel's name (struct flashcl_tile lists them) */
    flashcl_dtype dtype;
    int head_dim;
    int causal;
    int block_m, block_n;  /* FMA kernels: the tile; tensor-core / TF32: block_n keys per block */
    int warps, m_tiles;    /* tensor-core and TF32 only */
    double ms;             /* what it measured (informational) */
    /* The decode kernel only (0 for the others), each 0 where unset: the
     * query rows of a work-group the entry is for (group x seq_q rounded up
     * to a power of two, 1..16; 0: any), and the split count measured on a
     * grid of `groups` (sequence, KV head) pairs, 1..64 (0: the planner's
     * rule). A call with G pairs runs splits x groups / G splits (at least
     * 1, each split at least two key blocks): the work-groups measured
     * fastest, not more (docs/tuning.md). */
    int rows;
    int splits, groups;
    /* The TF32 kernels only (tf32, backward-tf32; 0 for the others): the
     * precision measured, FLASHCL_PRECISION_TF32 or _TF32X3, and the only
     * one the entry applies to; 0 (EXACT, which those kernels never run):
     * either. */
    enum flashcl_precision precision;
    unsigned char reserved[16];  /* zero */
};

/* Candidate configurations of a kernel for a dtype and head_dim (causal is
 * left 0): every combination of the kernel's candidate values per axis (its
 * table entry, docs/tuning.md) whose local memory fits local_mem_bytes (0:
 * the context's usable local memory) and whose work-group the device can
 * launch; none where the kernel does not run that dtype or head_dim.
 * Writes up to max into out; returns how many exist. */
FLASHCL_API int flashcl_tuning_candidates(const flashcl_context *ctx, const char *kernel,
                                          flashcl_dtype dtype, int head_dim, size_t local_mem_bytes,
                                          struct flashcl_tuned_config *out, int max);

/* The params.kernel_options clause that forces this configuration's kernel
 * and shape, e.g. "tensor-core:warps=4,m_tiles=2,block_n=64" (a decode
 * configuration's split count too: "decode:block_n=64,splits=6"). */
FLASHCL_API flashcl_status flashcl_tuning_override(const struct flashcl_tuned_config *config, char *buf,
                                                   size_t size);

/* One line of the tuning file for this context's device, driver and
 * flashcl version: a configuration, or (config NULL) the local memory the
 * probe found usable. The file is "flashcl-tuning 2" then such lines
 * (docs/tuning.md). */
FLASHCL_API flashcl_status flashcl_tuning_format(const flashcl_context *ctx,
                                                 const struct flashcl_tuned_config *config,
                                                 size_t probed_local_mem, char *line, size_t size);

/* ------------------------------------------------------------------------ */
/* IO model                                                                   */
/* ------------------------------------------------------------------------ */

/* Predicted device-memory traffic of one attention forward (all heads), and
 * block-read counts for the two flash loop orders: K/V blocks outer (the
 * first FlashAttention: each K/V block read once, each Q block once per K/V
 * block) and Q blocks outer (FlashAttention-2: each Q block read once, each
 * K/V block once per Q block). Standard attention writes S and P in f32. */
struct flashcl_io_estimate {
    double flops;                    /* 4·B·Hq·Nq·Nk·d (no causal halving) */
    double standard_bytes;           /* Q, K read; S written, read; P written, read; V read; O written */
    double flash_bytes;              /* Q blocks outer (what flashcl runs) */
    double flash_kv_outer_bytes;     /* K/V blocks outer, O and (m, l) round-trip per K/V block */
    unsigned long long q_block_reads_kv_outer;  /* Tc·Tr per (batch, head) */
    unsigned long long q_block_reads_q_outer;   /* Tr */
    unsigned long long kv_block_reads_kv_outer; /* Tc */
    unsigned long long kv_block_reads_q_outer;  /* Tr·Tc */
};

/* elem_bytes: 4 for f32, 2 for f16/bf16. block_m rows of Q and block_n keys
 * per block (Tr = ceil(seq_q / block_m), Tc = ceil(seq_kv / block_n)). The
 * seed's example: seq 4096, blocks of 128 -> 32 x 32 = 1024 Q-block reads
 * with K/V outer, against 32 with Q outer. */
FLASHCL_API flashcl_status flashcl_io_model(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv,
                                            int head_dim, size_t elem_bytes, int block_m, int block_n,
                                            struct flashcl_io_estimate *out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCL_TOOLS_H */
