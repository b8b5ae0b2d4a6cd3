/* Every kernel of the table (src/kernels.c), each of its entry points, on
 * small shapes against the double reference: the forward kernels with a
 * causal mask, a window and an LSE, the decode kernels with split-KV and
 * their merge, the backward kernels' steps, the standard path's kernels, and
 * the tensor-core kernels through their plain-OpenCL emulation (as sm_80 and
 * sm_90). Each case asserts which kernel ran, so a kernel the planner stops
 * choosing here fails instead of silently going unchecked.
 *
 * It is the suite the kernel checker runs under Oclgrind
 * (tools/oclgrind-check.sh: out-of-bounds accesses, data races, barrier
 * divergence and uninitialised reads, zero reports allowed), so its shapes
 * are the smallest that still cross a block edge, a partial block and a mask
 * edge: Oclgrind simulates every work-item. On other devices it runs in the
 * default suite like any other. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_common.h"
#include "common.h"
#include "kv8_common.h"
#include "varlen_common.h"

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

/* The forward kernels in the table; "only:X" options keep every other one off. */
static const char *const forward_kernels[] = {"decode-tensor-core", "decode", "tensor-core-wgmma", "tensor-core", "tf32",
                                              "register-tiled", "portable"};
static const char *const backward_kernels[] = {"backward-wgmma-atomic", "backward-wgmma", "backward-tensor-core-fused",
                                               "backward-tensor-core", "backward-tf32", "backward-tiled", "backward"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Kernel options that leave only `kernel` (with `settings`, e.g. "splits=3", or "on") among the forward or
 * backward kernels. */
static void only_options(char *out, size_t size, const char *kernel, const char *settings)
{
    const bool backward = strncmp(kernel, "backward", 8) == 0;
    const char *const *names = backward ? backward_kernels : forward_kernels;
    const int n = backward ? COUNT(backward_kernels) : COUNT(forward_kernels);
    size_t len = (size_t)snprintf(out, size, "%s:%s", kernel, settings);
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], kernel) != 0)
            len += (size_t)snprintf(out + len, size - len, ";%s:off", names[i]);
    ck_assert_uint_lt(len, size);
}

/* The contexts of this suite, made once per options string (and emulation). */
#define MAX_CONTEXTS 32
static struct {
    char options[512];
    int emulated_cc;  /* 0: the device as it is; 80 or 90: tensor cores emulated as that compute capability */
    const char *build_options;  /* NULL: none of its own */
    flashcl_context *ctx;
} contexts[MAX_CONTEXTS];
static int n_contexts;

static flashcl_context *context_for(const char *kernel, const char *settings, int emulated_cc,
                                    const char *build_options)
{
    char options[512];
    only_options(options, sizeof(options), kernel, settings);
    for (int i = 0; i < n_contexts; i++)
        if (contexts[i].emulated_cc == emulated_cc && strcmp(contexts[i].options, options) == 0 &&
            (contexts[i].build_options == build_options ||
             (contexts[i].build_options && build_options && strcmp(contexts[i].build_options, build_options) == 0)))
            return contexts[i].ctx;
    ck_assert_int_lt(n_contexts, MAX_CONTEXTS);
    flashcl_context *ctx = build_options ? test_context_built_with(options, build_options, emulated_cc, emulated_cc >= 90)
                           : emulated_cc ? test_emulated_context(options, emulated_cc, emulated_cc >= 90)
                                         : test_context_with_options(options);
    snprintf(contexts[n_contexts].options, sizeof(contexts[n_contexts].options), "%s", options);
    contexts[n_contexts].emulated_cc = emulated_cc;
    contexts[n_contexts].build_options = build_options;
    contexts[n_contexts++].ctx = ctx;
    return ctx;
}

static void destroy_contexts(void)
{
    for (int i = 0; i < n_contexts; i++)
        if (contexts[i].emulated_cc || contexts[i].build_options)  /* test_context_with_options' are the helper's */
            flashcl_context_destroy(&contexts[i].ctx);
    n_contexts = 0;
}

/* The cases are numbered forward, backward, varlen, KV cache, standard, E4M3 KV cache. FLASHCL_KERNEL_CHECK_CASE=n runs
 * case n alone (the kernel checker runs each in a process of its own), FLASHCL_KERNEL_CHECK=name only that
 * kernel's cases ("standard": the standard path's). Unset or empty: all. */
static bool selected(int index, const char *kernel)
{
    const char *only_case = getenv("FLASHCL_KERNEL_CHECK_CASE"), *only_kernel = getenv("FLASHCL_KERNEL_CHECK");
    if (only_case && *only_case && atoi(only_case) != index)
        return false;
    return !only_kernel || !*only_kernel || strcmp(only_kernel, kernel) == 0;
}

/* Which kernel a case forces (its settings, e.g. "splits=2" or "on") and must run; emulated_cc 80 or 90: the
 * tensor cores emulated as that compute capability; local_bytes: what the forced shape needs where that is more
 * than the 32 KiB every OpenCL device has (the planner's count; 0: no more); build_options: compile-time switches
 * of its own (test_context_built_with), NULL for none. */
struct kernel_under_check {
    const char *kernel, *settings;
    int emulated_cc;
    const char *expect;
    size_t local_bytes;
    const char *build_options;
};

/* The wgmma kernels' local memory (the emulator's scratch included), in 128-byte panels of 64 columns a row:
 * the forward's smallest (64 query rows, 64-key blocks, K and V buffered) at d <= 64. The backward's larger
 * kernel: dK/dV (its 16 W keys of K and V, two buffers of block_m rows of Q and dO, their LSE and D) or dQ
 * (Q and dO of its 16 W rows, two buffers of block_n keys of K and V). */
#define WGMMA_FORWARD_SMALLEST 44096
#define WGMMA_BACKWARD_4x64x64_D64 53248    /* dK/dV: (128 + 256) rows x 128 + 1,024 + 3,072 scratch */
#define WGMMA_BACKWARD_8x64x128_D64 104448  /* dQ: (256 + 512) rows x 128 + 6,144 scratch */
#define WGMMA_BACKWARD_4x64x64_D128 102400  /* dK/dV: (128 + 256) rows x 256 + 1,024 + 3,072 scratch */
#define WGMMA_BACKWARD_ATOMIC_D32 89088     /* dK/dV: (256 + 256) rows x 128 + 1,024 + dS 16,384 + 6,144 scratch */
/* The mma.sync backward's forced 2 x 64 x 64 at d = 32 (rows of 80 bytes: five 16-byte chunks, an odd stride): dK/dV,
 * K and V once, Q and dO twice, (128 + 256) rows x 80 + 1,024 of LSE and D + 1,536 of the emulator's scratch. */
#define MMA_BACKWARD_2x64x64_D32 33280

/* The context case `index` runs on; NULL where it is not selected or the device's local memory cannot hold
 * its forced shape (said on stdout). */
static flashcl_context *case_context(int index, const struct kernel_under_check *k)
{
    if (!selected(index, k->kernel))
        return NULL;
    flashcl_context *ctx = context_for(k->kernel, k->settings, k->emulated_cc, k->build_options);
    const size_t usable = flashcl_context_local_mem_bytes(ctx), needs = k->local_bytes;
    if (usable < needs) {
        printf("case %d (%s:%s): skipped (%zu bytes of local memory, %zu needed)\n", index, k->kernel, k->settings,
               usable, needs);
        return NULL;
    }
    return ctx;
}

static void check_ran(const struct kernel_under_check *k, const char *ran)
{
    ck_assert_msg(kernel_is(ran, k->expect), "%s:%s ran %s", k->kernel, k->settings, ran);
}

/* ---- forward ---- */

struct forward_check {
    struct kernel_under_check k;
    struct test_case c;
};

/* batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, with_lse, standard, precision,
 * windowed, window_left, window_right. Query and key counts are not multiples of any block: every kernel meets a
 * partial block; GQA everywhere. */
static const struct forward_check forward_checks[] = {
    {{"portable", "block_m=8,block_n=16", 0, "portable"},
     {1, 19, 37, 2, 1, 12, F32, 1, 0, LAYOUT_BNHD, 1}},
    {{"portable", "on", 0, "portable"},
     {1, 21, 30, 2, 2, 5, F16, 0, 0, LAYOUT_PADDED, 1, 0, 0, 1, 6, 2}},
    {{"register-tiled", "block_m=16,block_n=16", 0, "register-tiled"},
     {1, 19, 37, 2, 1, 16, BF16, 1, 0, LAYOUT_BNHD, 1}},
    {{"register-tiled", "on", 0, "register-tiled"},
     {1, 21, 30, 2, 1, 8, F32, 0, 0, LAYOUT_BHND, 1, 0, 0, 1, 6, 2}},
    {{"decode", "splits=3", 0, "decode"},  /* the split-KV merge too */
     {1, 2, 70, 4, 2, 16, F32, 1, 0, LAYOUT_BNHD, 1}},
    {{"decode", "on", 0, "decode"},
     {2, 1, 45, 2, 1, 8, F16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 20, 0}},
    {{"tensor-core", "warps=1,m_tiles=1,block_n=16", 80, "tensor-core"},
     {1, 19, 37, 2, 1, 16, F16, 1, 0, LAYOUT_BNHD, 1}},
    {{"tensor-core", "warps=1,m_tiles=2,block_n=16,splits=2", 80, "tensor-core"},
     {1, 21, 40, 2, 1, 32, BF16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 6, 2}},
    {{"tf32", "warps=1,m_tiles=1,block_n=16", 80, "tf32"},
     {1, 19, 37, 2, 1, 16, F32, 1, 0, LAYOUT_BNHD, 1, 0, FLASHCL_PRECISION_TF32X3}},
    {{"decode-tensor-core", "warps=1,block_n=16,splits=2", 80, "decode-tensor-core"},
     {1, 2, 45, 4, 2, 16, F16, 1, 0, LAYOUT_BNHD, 1}},
    /* Its splits merged in place by the last work-group (split_combine.h's split_merge_last) instead. */
    {{"decode-tensor-core", "warps=1,block_n=16,splits=3,merge=in-place", 80, "decode-tensor-core"},
     {2, 1, 60, 4, 2, 16, F16, 0, 0, LAYOUT_BNHD, 1}},
    {{"tensor-core-wgmma", "warps=4,block_n=64", 90, "tensor-core-wgmma", WGMMA_FORWARD_SMALLEST},
     {1, 19, 37, 2, 1, 16, F16, 1, 0, LAYOUT_BNHD, 1}},
    /* The logit cap (cl/score_mod.h) in each forward kernel that computes it. */
    {{"portable", "block_m=8,block_n=16", 0, "portable"},
     {1, 19, 37, 2, 1, 12, F32, 1, 0, LAYOUT_BNHD, 1, .softcap = 2.0f}},
    {{"register-tiled", "on", 0, "register-tiled"},
     {1, 21, 30, 2, 1, 16, F16, 0, 0, LAYOUT_BHND, 1, 0, 0, 1, 6, 2, .softcap = 3.0f}},
    {{"decode", "splits=3", 0, "decode"},
     {1, 2, 70, 4, 2, 16, BF16, 1, 0, LAYOUT_BNHD, 1, .softcap = 1.0f}},
    /* Attention sinks: the row's finish, and the split-KV merge adding the sink once. */
    {{"register-tiled", "block_m=16,block_n=16", 0, "register-tiled"},
     {1, 30, 19, 2, 1, 16, F32, 1, 0, LAYOUT_BNHD, 1, .sinks = 1}},
    {{"decode", "splits=3", 0, "decode"},
     {1, 2, 70, 4, 2, 16, F16, 1, 0, LAYOUT_BNHD, 1, .sinks = 1}},
    /* The cap, sinks and ALiBi on the tensor cores (nv_mma.h's softmax_block and finish_row, the decode warp
     * merge, whose rows read their heads' slopes). */
    {{"tensor-core", "warps=1,m_tiles=1,block_n=16", 80, "tensor-core"},
     {1, 19, 37, 2, 1, 16, F16, 1, -0.5f, LAYOUT_BNHD, 1, .softcap = 1.0f, .sinks = 1, .alibi = 1}},
    {{"decode-tensor-core", "warps=2,block_n=32,splits=2", 80, "decode-tensor-core"},
     {1, 2, 75, 4, 2, 16, BF16, 1, 0, LAYOUT_BNHD, 1, .softcap = 2.0f, .sinks = 1, .alibi = 1}},
    /* ALiBi's slopes read by the FMA kernels (the decode kernel's a row). */
    {{"portable", "block_m=8,block_n=16", 0, "portable"},
     {1, 23, 37, 2, 1, 12, F32, 1, 0, LAYOUT_BNHD, 1, .alibi = 1}},
    {{"decode", "splits=2", 0, "decode"},
     {1, 2, 70, 4, 2, 16, F16, 0, 0, LAYOUT_BNHD, 1, .alibi = 1}},
};

START_TEST(forward)
{
    const struct forward_check *f = &forward_checks[_i];
    flashcl_context *ctx = case_context(_i, &f->k);
    if (!ctx)
        return;
    struct case_result r;
    test_run_case(ctx, &f->c, &r);
    printf("forward %-20s %-36s: max|err| %.2e, LSE %.2e\n", f->k.kernel, f->k.settings, r.max_abs_err,
           r.max_lse_err);
    check_ran(&f->k, r.kernel);
}
END_TEST

/* ---- backward ---- */

struct backward_check {
    struct kernel_under_check k;
    struct bwd_case c;
};

/* batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, own_workspace, standard,
 * windowed, window_left, window_right, precision */
static const struct backward_check backward_checks[] = {
    {{"backward", "block_m=8,block_n=16", 0, "backward"},
     {1, 19, 37, 2, 1, 12, F32, 1, 0, LAYOUT_BNHD}},
    {{"backward", "on", 0, "backward"},
     {1, 21, 30, 2, 1, 5, F16, 0, 0, LAYOUT_BNHD, 0, 0, 1, 6, 2}},
    {{"backward-tiled", "block_m=16,block_n=16", 0, "backward-tiled"},
     {1, 19, 37, 2, 1, 16, F32, 1, 0, LAYOUT_BNHD}},
    {{"backward-tiled", "on", 0, "backward-tiled"},
     {1, 21, 30, 2, 1, 8, BF16, 0, 0, LAYOUT_BNHD, 1, 0, 1, 6, 2}},
    /* The tensor-core programs with the cap (dS times its slope) and ALiBi on some of their cases; the mma.sync
     * backwards with two 16-key tiles a warp (the dK/dV pass's innermost loop). The two-pass one with its warps
     * paired on the same keys, each keeping half of dK's and dV's columns (SPLIT_D, past d = 128 on its own; the
     * fused and TF32 cases run the unpaired dK/dV pass, and GQA's head loop), four 16-key tiles a pair, d = 32: 16
     * columns a warp, one query head (Oclgrind: 116 s with two). */
    {{"backward-tensor-core", "warps=2,block_m=64,block_n=64", 80, "backward-tensor-core", MMA_BACKWARD_2x64x64_D32,
      "-DSPLIT_D=1"},
     {1, 19, 37, 1, 1, 32, F16, 1, 0, LAYOUT_BNHD, .softcap = 1.0f, .alibi = 1}},
    {{"backward-tensor-core-fused", "warps=2,block_m=64,block_n=64", 80, "backward-tensor-core-fused"},
     {1, 19, 37, 2, 1, 16, BF16, 0, 0, LAYOUT_BNHD, .alibi = 1}},
    {{"backward-tf32", "warps=1,block_m=32,block_n=32", 80, "backward-tf32"},
     {1, 19, 37, 2, 1, 16, F32, 1, 0, LAYOUT_BNHD, 0, 0, 0, 0, 0, FLASHCL_PRECISION_TF32X3, .softcap = 1.5f, .alibi = 1}},
    {{"backward-wgmma", "warps=4,block_m=64,block_n=64", 90, "backward-wgmma", WGMMA_BACKWARD_4x64x64_D64},
     {1, 19, 37, 2, 1, 16, F16, 1, 0, LAYOUT_BNHD, .softcap = 2.0f, .alibi = 1}},
    /* The next three are Oclgrind's slowest (the wgmma emulation, minutes a case): one query head in the two
     * below (GQA's head loop is the case above's), the d = 80 case's keys and the atomic one's queries in
     * one (partial) block. */
    {{"backward-wgmma", "warps=8,block_m=64,block_n=128", 90, "backward-wgmma", WGMMA_BACKWARD_8x64x128_D64},
     {1, 70, 45, 1, 1, 32, BF16, 1, 0, LAYOUT_BNHD}},
    /* Two 64-column panels, the second partly padding; no mask: every key block meets every query block. */
    {{"backward-wgmma", "warps=4,block_m=64,block_n=64", 90, "backward-wgmma", WGMMA_BACKWARD_4x64x64_D128},
     {1, 40, 40, 1, 1, 80, F16, 0, 0, LAYOUT_BNHD}},
    /* dQ added up by the dK/dV pass: dS through local memory to both warpgroups, the float atomics. */
    {{"backward-wgmma-atomic", "on", 90, "backward-wgmma-atomic", WGMMA_BACKWARD_ATOMIC_D32},
     {1, 40, 45, 2, 1, 32, BF16, 1, 0, LAYOUT_BNHD}},
    /* A value head dim other than head_dim (V, O, dO, dV of 7 and 8 columns). */
    {{"backward", "block_m=8,block_n=16", 0, "backward"},
     {1, 19, 37, 2, 1, 12, F32, 1, 0, LAYOUT_BNHD, .head_dim_v = 7}},
    {{"backward-tiled", "block_m=16,block_n=16", 0, "backward-tiled"},
     {1, 19, 37, 2, 1, 16, F16, 1, 0, LAYOUT_BNHD, .head_dim_v = 8}},
    /* The logit cap (dS times 1 - tanh^2) and ALiBi through the backward kernels that compute them. */
    {{"backward-tiled", "block_m=16,block_n=16", 0, "backward-tiled"},
     {1, 19, 37, 2, 1, 16, F32, 1, 0, LAYOUT_BNHD, .softcap = 2.5f, .alibi = 1}},
    {{"backward", "on", 0, "backward"},
     {1, 21, 30, 2, 1, 8, F16, 0, 0, LAYOUT_BNHD, 0, 0, 1, 6, 2, .softcap = 1.5f, .alibi = 1}},
    /* Attention sinks: d(sink)'s per-head reduction (flash_backward_sink_grad). */
    {{"backward-tiled", "block_m=16,block_n=16", 0, "backward-tiled"},
     {1, 30, 19, 2, 1, 16, F32, 1, 0, LAYOUT_BNHD, .sinks = 1}},
};

START_TEST(backward)
{
    const struct backward_check *b = &backward_checks[_i];
    flashcl_context *ctx = case_context(COUNT(forward_checks) + _i, &b->k);
    if (!ctx)
        return;
    struct bwd_result r;
    run_case(ctx, b->k.kernel, &b->c, 900 + (uint64_t)_i, &r);
    check_ran(&b->k, r.kernel);
}
END_TEST

/* ---- packed batches (varlen) and KV caches: the kernels' VARLEN builds ---- */

struct varlen_check {
    struct kernel_under_check k;
    struct vl_case c;
};

/* batch, lens_q, lens_k, heads_q, heads_kv, head_dim, dtype, mask, window_left, window_right, device_offsets,
 * precision. Empty sequences, rows with no key, device offsets. */
static const struct varlen_check varlen_checks[] = {
    {{"portable", "on", 0, "portable"},
     {3, {5, 0, 17}, {9, 0, 20}, 2, 1, 12, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1}},
    {{"register-tiled", "on", 0, "register-tiled"},
     {3, {5, 0, 17}, {9, 3, 20}, 2, 1, 16, F16, FLASHCL_MASK_WINDOW, 4, 1, 1}},
    {{"decode", "splits=2", 0, "decode"},
     {3, {1, 2, 0}, {30, 17, 5}, 4, 2, 16, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1}},
    {{"tensor-core", "warps=1,m_tiles=1,block_n=16", 80, "tensor-core"},
     {2, {17, 9}, {33, 9}, 2, 1, 16, F16, FLASHCL_MASK_CAUSAL, 0, 0, 1}},
    {{"tf32", "warps=1,m_tiles=1,block_n=16", 80, "tf32"},
     {2, {17, 9}, {33, 9}, 2, 1, 16, F32, FLASHCL_MASK_WINDOW, 6, 0, 1, FLASHCL_PRECISION_TF32X3}},
    {{"decode-tensor-core", "warps=1,block_n=16,splits=2", 80, "decode-tensor-core"},
     {2, {1, 2}, {40, 17}, 4, 2, 16, F16, FLASHCL_MASK_NONE, 0, 0, 1}},
    {{"tensor-core-wgmma", "warps=4,block_n=64", 90, "tensor-core-wgmma", WGMMA_FORWARD_SMALLEST},
     {2, {17, 9}, {33, 9}, 2, 1, 16, BF16, FLASHCL_MASK_CAUSAL, 0, 0, 1}},
};

START_TEST(varlen)
{
    const struct varlen_check *v = &varlen_checks[_i];
    flashcl_context *ctx = case_context(COUNT(forward_checks) + COUNT(backward_checks) + _i, &v->k);
    if (ctx)
        check_ran(&v->k, varlen_run(ctx, &v->c, 960 + (uint64_t)_i, "kernel_check"));
}
END_TEST

struct cache_check {
    struct kernel_under_check k;
    struct kv_case c;
};

/* batch, seq_q, capacity, lens, heads_q, heads_kv, head_dim, dtype, mask, window_left, window_right,
 * device_lengths, page_size (0: contiguous), host_table, precision. */
static const struct cache_check cache_checks[] = {
    {{"portable", "on", 0, "portable"},
     {2, 3, 24, {3, 20}, 2, 2, 12, BF16, FLASHCL_MASK_WINDOW, 5, 0, 0, 0}},
    {{"register-tiled", "on", 0, "register-tiled"},
     {2, 5, 32, {5, 30}, 2, 1, 16, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1, 16, 0}},
    {{"decode", "splits=2", 0, "decode"},
     {2, 1, 32, {17, 32}, 4, 2, 16, F16, FLASHCL_MASK_NONE, 0, 0, 1, 16, 0}},
    {{"tensor-core", "warps=1,m_tiles=1,block_n=16", 80, "tensor-core"},
     {2, 20, 32, {20, 32}, 2, 1, 16, F16, FLASHCL_MASK_CAUSAL, 0, 0, 1, 16, 0}},
    {{"decode-tensor-core", "warps=1,block_n=16", 80, "decode-tensor-core"},
     {2, 1, 32, {17, 32}, 4, 2, 16, BF16, FLASHCL_MASK_NONE, 0, 0, 1, 16, 1}},
};

START_TEST(kv_cache)
{
    const struct cache_check *k = &cache_checks[_i];
    flashcl_context *ctx =
        case_context(COUNT(forward_checks) + COUNT(backward_checks) + COUNT(varlen_checks) + _i, &k->k);
    if (ctx)
        check_ran(&k->k, kv_cache_run(ctx, &k->c, 980 + (uint64_t)_i, false));
}
END_TEST

#define N_BASE_CASES (COUNT(forward_checks) + COUNT(backward_checks) + COUNT(varlen_checks) + COUNT(cache_checks))

/* ---- the standard (materialised) path: CLBlast's GEMMs and its own softmax and backward kernels ---- */

START_TEST(standard)
{
    if (!selected(N_BASE_CASES, "standard"))
        return;
    const struct test_case fwd = {1, 19, 37, 2, 1, 12, F16, 1, 0, LAYOUT_BNHD, 1, 1};
    struct case_result r;
    test_run_case(NULL, &fwd, &r);
    printf("standard forward: max|err| %.2e, LSE %.2e\n", r.max_abs_err, r.max_lse_err);
    const struct bwd_case bwd = {1, 19, 37, 2, 1, 12, F32, 1, 0, LAYOUT_BNHD, 0, 1};
    run_case(NULL, "standard", &bwd, 950, NULL);
}
END_TEST

/* ---- E4M3 KV caches: the kernels' KV_E4M3 builds (the stored bytes staged and converted to Q's type) ---- */

struct kv8_check {
    struct kernel_under_check k;
    struct kv8_case c;
};

/* dtype, batch, seq_q, capacity, lens, heads_q, heads_kv, head_dim, head_dim_v, descales, causal, windowed,
 * window_left, window_right, softcap, sinks, alibi, device_lengths, page_size, device_table, kv_offset. Decode
 * and chunked prefill, paged (host and device tables) and contiguous (a view off 16 bytes); the tensor-core ones
 * convert each landed block of bytes into their tiles (mma.sync's; wgmma's panels behind a proxy fence). */
static const struct kv8_check kv8_checks[] = {
    {{"decode", "splits=2", 0, "decode"},
     {FLASHCL_F16, 2, 1, 32, {17, 32}, 4, 2, 16, 0, {0.5f, 0.25f}, 0, 0, 0, 0, 0, 0, 0, 1, 16, 1}},
    /* One split: split partials of decode-tensor-core on a KV cache draw uninitialised-value reports in the
     * combine step, with f16 caches too (docs/reliability.md). */
    {{"decode-tensor-core", "warps=1,block_n=16", 80, "decode-tensor-core"},
     {FLASHCL_BF16, 2, 1, 32, {17, 32}, 4, 2, 16, 0, {0.5f, 0.25f}, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0}},
    {{"register-tiled", "on", 0, "register-tiled"},
     {FLASHCL_F32, 2, 5, 32, {5, 30}, 2, 1, 16, 0, {0.5f, 0.0f}, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16}},
    {{"tensor-core", "warps=1,m_tiles=1,block_n=16", 80, "tensor-core"},
     {FLASHCL_F16, 2, 20, 32, {20, 32}, 2, 1, 16, 0, {0.5f, 0.25f}, 1, 0, 0, 0, 0, 0, 0, 1, 16, 1}},
    {{"tensor-core-wgmma", "warps=4,block_n=64", 90, "tensor-core-wgmma", WGMMA_FORWARD_SMALLEST},
     {FLASHCL_BF16, 1, 20, 70, {70}, 2, 1, 32, 0, {0.5f, 0.25f}, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
};

START_TEST(kv8_cache)
{
    const struct kv8_check *k = &kv8_checks[_i];
    flashcl_context *ctx = case_context(N_BASE_CASES + 1 + _i, &k->k);
    if (!ctx)
        return;
    struct flashcl_tile tile;
    run_kv8_case(ctx, &k->c, 1000 + (uint64_t)_i, &tile);
    check_ran(&k->k, tile.kernel);
}
END_TEST

#define N_CASES (N_BASE_CASES + 1 + COUNT(kv8_checks))

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--count") == 0) {  /* the number of cases, for the kernel checker */
        printf("%d\n", N_CASES);
        return 0;
    }
    Suite *s = suite_create("kernel_check");
    TCase *tc = tcase_create("kernel_check");
    tcase_set_timeout(tc, 1800);
    tcase_add_loop_test(tc, forward, 0, COUNT(forward_checks));
    tcase_add_loop_test(tc, backward, 0, COUNT(backward_checks));
    tcase_add_loop_test(tc, varlen, 0, COUNT(varlen_checks));
    tcase_add_loop_test(tc, kv_cache, 0, COUNT(cache_checks));
    tcase_add_test(tc, standard);
    tcase_add_loop_test(tc, kv8_cache, 0, COUNT(kv8_checks));
    suite_add_tcase(s, tc);
    const int rc = test_run_suite(s);
    destroy_contexts();
    return rc;
}
