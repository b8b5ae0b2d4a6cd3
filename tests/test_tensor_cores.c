/* The tensor-core kernels (f16/bf16 mma.sync and TF32, forward; the f16/bf16
 * and TF32 backward) on the cases that qualify for them: the kernel must be
 * the one that runs, and its output meets its bound. Where the device has no
 * tensor cores every check here would be vacuous, so the suite reports
 * itself skipped (exit 77) — unless FLASHCL_TEST_EMULATE_TENSOR_CORES=1: then
 * the f16/bf16 forward and decode cases, the TF32 forward's lighter cases
 * and the TF32 backward's run on the kernels' plain-OpenCL emulation (a test
 * hook: -DNV_EMULATE=1, cl/nv_emulate.h), on PoCL too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_common.h"
#include "test_hooks.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

extern const char flashcl_source_flash_backward_mma[];  /* src/internal.h */
extern const char flashcl_source_flash_backward_tf32[];

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

/* Eligible for the tensor-core kernel (f16/bf16, d a multiple of 16 up to
 * 256, 16-byte rows): it must run. Odd lengths, both causal alignments,
 * GQA, N = 1 and several K/V blocks. */
static const struct test_case tensor_core_cases[] = {
    {2, 200, 200, 4, 4, 64, F16, 0, 0, LAYOUT_BNHD, 1},
    {2, 200, 200, 4, 4, 64, F16, 1, 0, LAYOUT_BNHD, 1},
    {1, 130, 257, 8, 2, 128, F16, 1, 0, LAYOUT_BHND, 1},   /* Nq < Nk, GQA */
    {1, 257, 130, 2, 2, 128, F16, 1, 0, LAYOUT_BNHD, 1},   /* Nq > Nk: rows with no key */
    {1, 1, 77, 2, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1},
    {1, 77, 1, 2, 2, 64, F16, 1, 0, LAYOUT_BNHD, 1},
    {1, 96, 96, 2, 2, 16, F16, 0, 0, LAYOUT_BNHD, 1},
    {1, 96, 96, 2, 2, 32, F16, 1, 0.25f, LAYOUT_BNHD, 1},
    {1, 96, 96, 2, 2, 96, F16, 0, 0, LAYOUT_FUSED_QKV, 1},
    {2, 150, 150, 4, 1, 64, BF16, 1, 0, LAYOUT_BNHD, 1},   /* MQA */
    {1, 100, 300, 2, 2, 128, BF16, 0, 0, LAYOUT_BHND, 1},
    {1, 300, 100, 2, 2, 128, BF16, 1, 0, LAYOUT_FUSED_QKV, 0},
    {1, 150, 200, 2, 2, 64, F16, 1, -0.2f, LAYOUT_BNHD, 1},  /* negative scale: the row max is */
    {1, 200, 200, 2, 1, 128, BF16, 0, -0.1f, LAYOUT_BNHD, 1}, /* at the smallest raw score */
    {2, 300, 300, 4, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 40, 0},    /* sliding window */
    {1, 150, 330, 2, 2, 128, BF16, 0, 0, LAYOUT_BHND, 1, 0, 0, 1, 64, 16},  /* window both sides, Nq < Nk */
    {1, 257, 100, 2, 1, 64, F16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, -1, 20},    /* right window only, Nq > Nk */
    {1, 150, 170, 2, 2, 160, F16, 1, 0, LAYOUT_BNHD, 1},   /* past d = 128: Q read from local memory */
    {1, 97, 200, 4, 2, 192, BF16, 1, 0, LAYOUT_BHND, 1},
    {1, 130, 100, 2, 1, 256, F16, 0, 0, LAYOUT_BNHD, 1},
};

/* f32 calls that allow TF32 (or 3xTF32): the TF32 kernel (d a multiple of
 * 8 up to 128, 16-byte rows), checked against the double reference with
 * that precision's bound. */
#define TF32 FLASHCL_PRECISION_TF32
#define TF32X3 FLASHCL_PRECISION_TF32X3
static const struct test_case tf32_cases[] = {
    {2, 200, 200, 4, 4, 64, F32, 0, 0, LAYOUT_BNHD, 1, 0, TF32},
    {2, 200, 200, 4, 4, 64, F32, 1, 0, LAYOUT_BNHD, 1, 0, TF32X3},
    {1, 130, 257, 8, 2, 128, F32, 1, 0, LAYOUT_BHND, 1, 0, TF32},    /* Nq < Nk, GQA */
    {1, 257, 130, 2, 2, 128, F32, 1, 0, LAYOUT_BNHD, 1, 0, TF32X3},  /* rows with no key */
    {1, 1, 77, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1, 0, TF32},
    {1, 77, 1, 2, 2, 64, F32, 1, 0, LAYOUT_BNHD, 1, 0, TF32X3},
    {1, 96, 96, 2, 2, 8, F32, 0, 0, LAYOUT_BNHD, 1, 0, TF32},
    {1, 96, 96, 2, 2, 40, F32, 1, 0.25f, LAYOUT_BNHD, 1, 0, TF32X3},
    {1, 96, 96, 2, 2, 96, F32, 0, 0, LAYOUT_FUSED_QKV, 1, 0, TF32},
    {2, 150, 150, 4, 1, 64, F32, 1, 0, LAYOUT_BNHD, 1, 0, TF32X3},  /* MQA */
    {1, 300, 100, 2, 2, 128, F32, 1, 0, LAYOUT_FUSED_QKV, 0, 0, TF32},
    {1, 150, 200, 2, 2, 64, F32, 1, -0.2f, LAYOUT_BNHD, 1, 0, TF32X3},  /* negative scale */
    {2, 300, 300, 4, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1, 0, TF32, 1, 40, 0},    /* sliding window */
    {1, 150, 330, 2, 2, 128, F32, 0, 0, LAYOUT_BHND, 1, 0, TF32X3, 1, 64, 16},
};

/* Decode-shaped calls (group x seq_q <= 16 rows a KV head) that the
 * tensor-core decode kernel takes: GQA, MQA and MHA, 1..16 rows, causal
 * with several positions and Nq > Nk, a window, one key, a negative scale,
 * more keys than one block, split counts from 1 to one a key block. */
static const struct test_case decode_cases[] = {
    {8, 1, 1000, 32, 8, 128, F16, 0, 0, LAYOUT_BNHD, 1},            /* GQA 4:1, 4 rows */
    {2, 1, 3000, 16, 16, 64, BF16, 0, 0, LAYOUT_BHND, 1},           /* MHA, 1 row */
    {3, 4, 517, 8, 2, 64, F16, 1, 0, LAYOUT_BNHD, 1},               /* 16 rows, causal */
    {1, 3, 200, 4, 1, 128, BF16, 1, 0, LAYOUT_BNHD, 1},             /* MQA, 12 rows */
    {2, 2, 333, 6, 2, 96, F16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 50, 0}, /* a window, 6 rows */
    {1, 1, 1, 2, 2, 16, F16, 0, 0, LAYOUT_BNHD, 1},                 /* one key */
    {1, 16, 10, 1, 1, 32, F16, 1, 0, LAYOUT_BNHD, 1},               /* Nq > Nk: rows with no key */
    {1, 1, 400, 4, 2, 64, BF16, 0, -0.3f, LAYOUT_BNHD, 1},          /* negative scale */
    {2, 1, 700, 14, 2, 256, F16, 0, 0, LAYOUT_BNHD, 1},             /* d = 256 (Q read at each k-step), GQA 7:1 */
    {1, 2, 300, 10, 2, 192, BF16, 1, 0, LAYOUT_BHND, 1},            /* d = 192, group 5, 10 rows, causal */
};

/* The decode cases on the planner's choice and on forced shapes and splits (in turn). */
static const char *const decode_contexts[] = {
    "",
    "decode-tensor-core:warps=2,block_n=32,splits=5",
    "decode-tensor-core:warps=4,block_n=64,splits=1",
    "decode-tensor-core:warps=2,block_n=64,splits=3",  /* 32 keys a warp; at most 37 KB at d = 128, so
                                                          every tensor-core part's local memory holds it */
    "decode-tensor-core:warps=1,block_n=16,splits=64",  /* 16-key blocks: capped at one split a block */
};

/* Emulated tensor cores (no real ones here): contexts of these kernel options with the test hook, cached. */
static bool emulated;
#define MAX_EMULATED 32
static struct {
    const char *options;
    bool sm90;
    flashcl_context *ctx;
} emulated_contexts[MAX_EMULATED];
static int n_emulated;

/* sm90: emulated as compute capability 9.0 with the wgmma kernel (its probe assumed passed). */
static flashcl_context *emulated_context(const char *options, bool sm90)
{
    for (int i = 0; i < n_emulated; i++)
        if (strcmp(emulated_contexts[i].options, options) == 0 && emulated_contexts[i].sm90 == sm90)
            return emulated_contexts[i].ctx;
    ck_assert_int_lt(n_emulated, MAX_EMULATED);
    flashcl_context *ctx = test_emulated_context(options, sm90 ? 90 : 80, sm90);
    emulated_contexts[n_emulated].options = options;
    emulated_contexts[n_emulated].sm90 = sm90;
    emulated_contexts[n_emulated++].ctx = ctx;
    return ctx;
}

static flashcl_context *context_with_options(const char *options)
{
    return emulated ? emulated_context(options, false) : test_context_with_options(options);
}

/* Runs a case that qualifies for a tensor-core kernel on a context of these
 * kernel options: `expected` must run (the decode kernel, which would take
 * the one-query cases first, off). */
static void run_case_on(flashcl_context *ctx, const struct test_case *c, uint64_t seed, const char *label,
                        const char *expected)
{
    struct case_result r;
    rng_seed(seed);
    test_run_case(ctx, c, &r);
    printf("%-14s %s: max|err| %.2e, rel L2 %.2e, LSE %.2e\n", r.kernel, label,
           r.max_abs_err, r.rel_l2_err, r.max_lse_err);
    ck_assert_str_eq(r.kernel, expected);
}

static void run_tensor_core_case(const char *options, const struct test_case *c, uint64_t seed, const char *label,
                                 const char *expected)
{
    run_case_on(context_with_options(options), c, seed, label, expected);
}

START_TEST(tf32)
{
    char label[32];
    snprintf(label, sizeof(label), "%s case %2d", tf32_cases[_i].precision == TF32 ? "tf32  " : "tf32x3", _i);
    run_tensor_core_case("decode:off;decode-tensor-core:off", &tf32_cases[_i], (uint64_t)_i + 200, label, "tf32");
}
END_TEST

START_TEST(tensor_core)
{
    char label[32];
    snprintf(label, sizeof(label), "tensor-core case %2d", _i);
    run_tensor_core_case("decode:off;decode-tensor-core:off;tensor-core-wgmma:off", &tensor_core_cases[_i], (uint64_t)_i + 100,
                         label, "tensor-core");
}
END_TEST

START_TEST(tf32_split)
{
    char label[32];
    snprintf(label, sizeof(label), "tf32 split 3 case %2d", _i);
    run_tensor_core_case("decode:off;decode-tensor-core:off;tf32:block_n=16,splits=3", &tf32_cases[_i], (uint64_t)_i + 250, label,
                         "tf32");
}
END_TEST

START_TEST(decode_tensor_core)
{
    const size_t n = sizeof(decode_contexts) / sizeof(decode_contexts[0]);
    for (size_t i = 0; i < n; i++) {
        char label[80];
        snprintf(label, sizeof(label), "decode case %d %s", _i, decode_contexts[i]);
        run_tensor_core_case(decode_contexts[i], &decode_cases[_i], (uint64_t)_i * 7 + i + 300, label,
                             "decode-tensor-core");
    }
}
END_TEST

/* The warps' partial results merge in a fixed order: the same bits twice, split or not. */
START_TEST(decode_tensor_core_repeatable)
{
    const char *const options[] = {"", "decode-tensor-core:warps=4,block_n=64,splits=7"};
    for (int i = 0; i < 2; i++) {
        struct case_result a, b;
        rng_seed(77);
        test_run_case(context_with_options(options[i]), &decode_cases[0], &a);
        rng_seed(77);
        test_run_case(context_with_options(options[i]), &decode_cases[0], &b);
        ck_assert_str_eq(a.kernel, "decode-tensor-core");
        ck_assert_msg(a.output_hash == b.output_hash, "two runs of the same decode call differ (%s)", options[i]);
    }
}
END_TEST

/* The same cases split over the keys (three partials merged by their LSE; fewer where a query block
 * sees fewer key blocks), with 16-key blocks so the splits cut mid-sequence. */
START_TEST(tensor_core_split)
{
    char label[32];
    snprintf(label, sizeof(label), "split 3 case %2d", _i);
    run_tensor_core_case("decode:off;decode-tensor-core:off;tensor-core-wgmma:off;tensor-core:block_n=16,splits=3",
                         &tensor_core_cases[_i], (uint64_t)_i + 150,
                         label, "tensor-core");
}
END_TEST

/* ---- Hopper's wgmma forward (the sm_90a route): "tensor-core-wgmma" ---- */

/* The wgmma tests' contexts: emulated, as sm_90 with its plain-OpenCL wgmma. */
static flashcl_context *wgmma_context(const char *options)
{
    return emulated ? emulated_context(options, true) : test_context_with_options(options);
}

/* The route's kernels are planned on compute capability 9.0 only; there its probe must have passed. */
static bool wgmma_expected(void)
{
    flashcl_context *ctx = wgmma_context("");
    const char *why = NULL;
    if (flashcl_context_has_wgmma(ctx, &why))
        return true;
    ck_assert_msg(strstr(why, "needs compute capability 9.0") != NULL, "wgmma off on an sm_90 device: %s", why);
    printf("wgmma: %s: not run here\n", why);
    return false;
}

/* The tensor-core cases (every one: the wgmma kernel takes d a multiple of 16 up to 256) on it, the default
 * shape and a forced one split three ways (64-key blocks, so splits cut mid-sequence). */
static void run_wgmma_case(const char *options, int i, uint64_t seed, const char *what)
{
    const struct test_case *c = &tensor_core_cases[i];
    if (!wgmma_expected() || !test_wgmma_takes(wgmma_context(""), c->dtype, c->head_dim))
        return;
    char label[40];
    snprintf(label, sizeof(label), "wgmma %s case %2d", what, i);
    run_case_on(wgmma_context(options), c, seed, label, "tensor-core-wgmma");
}

START_TEST(tensor_core_wgmma)
{
    run_wgmma_case("decode:off;decode-tensor-core:off", _i, (uint64_t)_i + 400, "");
}
END_TEST

START_TEST(tensor_core_wgmma_split)
{
    run_wgmma_case("decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=4,block_n=64,splits=3", _i,
                   (uint64_t)_i + 450, "4x64 split 3");
}
END_TEST

/* 192-key blocks (12 warps, up to d = 64: past it the tile outgrows local memory), whole and split in two (splits
 * of whole blocks, 192 apart), every mask: the default at d <= 64 without a mask, forced with one. */
START_TEST(tensor_core_wgmma_192)
{
    if (tensor_core_cases[_i].head_dim > 64)
        return;
    /* Q's 192 rows and three buffers of K and V (128-byte rows), the emulator's scratch for 12 warps and some
     * slack: a device with less local memory cannot take the forced shape (every sm_90 part's 227 KB does). */
    const cl_ulong needs = (192 + 6 * 192) * 128 + (emulated ? 12 * 192 * 4 : 0) + 1024;
    const cl_ulong usable = flashcl_context_local_mem_bytes(wgmma_context(""));
    if (usable < needs) {
        printf("wgmma 12x192 case %2d: skipped (%llu bytes of local memory, %llu needed)\n", _i,
               (unsigned long long)usable, (unsigned long long)needs);
        return;
    }
    run_wgmma_case("decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=12,block_n=192", _i,
                   (uint64_t)_i + 490, "12x192");
    run_wgmma_case("decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=12,block_n=192,splits=2", _i,
                   (uint64_t)_i + 510, "12x192 split 2");
}
END_TEST

/* Split three ways on three warpgroups at the head dims where they issue in turns (WGMMA_PINGPONG, src/kernels.c's
 * wgmma_pingpong: 65-192): the turns with split-KV's key ranges, which the 4 x 64 split (one warpgroup) does not
 * take. On the GPU only: emulated, the turns are no-ops. */
START_TEST(tensor_core_wgmma_split_turns)
{
    if (tensor_core_cases[_i].head_dim <= 64 || tensor_core_cases[_i].head_dim > 192)
        return;
    run_wgmma_case("decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=12,block_n=64,splits=3", _i,
                   (uint64_t)_i + 470, "12x64 split 3");
}
END_TEST

/* ---- the backward pass: "backward-tensor-core"(_FUSED) ---- */

/* batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, own_workspace.
 * Lengths that are no multiple of any block, both causal alignments, GQA and
 * MQA, a query or a key alone, several key and query blocks. The padded view
 * (rows not on 16 bytes) must take the register-tiled FMA backward instead. */
static const struct bwd_case backward_cases[] = {
    {2, 200, 200, 4, 4, 64, F16, 0, 0, LAYOUT_BNHD, 0},
    {2, 200, 200, 4, 4, 64, F16, 1, 0, LAYOUT_BNHD, 1},
    {1, 130, 257, 8, 2, 128, F16, 1, 0, LAYOUT_BHND, 0},    /* Nq < Nk, GQA */
    {1, 257, 130, 2, 2, 128, F16, 1, 0, LAYOUT_BNHD, 0},    /* Nq > Nk: rows with no key */
    {1, 96, 77, 2, 2, 16, F16, 0, 0, LAYOUT_BNHD, 0},
    {1, 77, 150, 2, 2, 16, BF16, 1, 0.25f, LAYOUT_BNHD, 0},
    {2, 150, 150, 4, 1, 64, BF16, 1, 0, LAYOUT_BNHD, 1},    /* MQA */
    {1, 100, 300, 2, 2, 128, BF16, 0, 0, LAYOUT_BHND, 0},
    {1, 300, 100, 4, 2, 128, BF16, 1, 0, LAYOUT_BNHD, 0},   /* Nq > Nk, GQA */
    {1, 150, 200, 2, 2, 64, F16, 1, -0.2f, LAYOUT_BNHD, 0}, /* negative scale */
    {1, 1, 77, 2, 2, 64, F16, 1, 0, LAYOUT_BNHD, 0},        /* one query sees every key */
    {1, 77, 1, 2, 2, 128, BF16, 1, 0, LAYOUT_BNHD, 0},      /* one key: 76 rows see none */
    {1, 70, 90, 2, 1, 32, BF16, 0, 0, LAYOUT_BNHD, 0},
    {1, 333, 333, 2, 2, 96, F16, 1, 0, LAYOUT_BHND, 0},
    {1, 40, 56, 4, 2, 64, F16, 1, 0, LAYOUT_PADDED, 0},     /* not 16-byte rows: FMA units */
};

/* The two-pass kernel (measured faster than the fused one) under the given kernel options. */
static void check_backward_two_pass(int i, const char *options)
{
    const struct bwd_case *c = &backward_cases[i];
    char label[32];
    snprintf(label, sizeof(label), "backward %2d", i);
    struct bwd_result r;
    run_case(context_with_options(options), label, c, 1000 + (uint64_t)i, &r);
    ck_assert_str_eq(r.kernel, c->layout == LAYOUT_PADDED ? "backward-tiled"
                                                           : "backward-tensor-core");
}

/* The default plan without wgmma, and one warp with two tiles of each: two 16-key tiles in the dK/dV pass (its
 * innermost loop; the sm_90 built-in up to d = 64 has two), two 16-row tiles in the dQ pass (Q's and dO's
 * fragments held in registers at d = 16, read at every block at d = 128: DQ_HOLD_Q). */
static const char *const backward_default = "backward-wgmma:off";
static const char *const backward_two_key_tiles = "backward-wgmma:off;backward-tensor-core:warps=1,block_m=32,block_n=32";

START_TEST(backward)
{
    check_backward_two_pass(_i, backward_default);
    check_backward_two_pass(_i, backward_two_key_tiles);
}
END_TEST

/* ---- past d = 128: the dK/dV pass's warp pairs split dK's and dV's columns (SPLIT_D) ---- */

/* backward_wide_cases (below) through the mma.sync kernel: the default plan and 2 warps x 32 x 16. */
static const char *const backward_split_shapes[] = {
    "backward-wgmma:off",
    "backward-wgmma:off;backward-tensor-core:warps=2,block_m=32,block_n=16",
};

/* SPLIT_D forced at small head dims (-DSPLIT_D=1): d = 48's three column blocks leave the odd warp one fewer;
 * GQA with Nq < Nk, and Nq > Nk (rows with no key). One pair, then two, with two key tiles each (shapes the host
 * takes without the split, which knows of it past d = 128 only; one tile a pair is the built-in shapes' there). */
static const struct bwd_case split_d_cases[] = {
    {1, 45, 70, 2, 1, 48, F16, 1, 0, LAYOUT_BNHD, 0},
    {1, 70, 45, 2, 2, 32, BF16, 1, 0.3f, LAYOUT_BNHD, 0},
};
static const char *const split_d_shapes[] = {
    "backward-wgmma:off;backward-tensor-core:warps=2,block_m=32,block_n=32",
    "backward-wgmma:off;backward-tensor-core:warps=4,block_m=64,block_n=64",
};

static void check_backward_split(const struct bwd_case *c, const char *options, const char *build_options,
                                 const char *label, uint64_t seed)
{
    flashcl_context *ctx = test_context_built_with(options, build_options, emulated ? 80 : 0, false);
    struct bwd_result r;
    run_case(ctx, label, c, seed, &r);
    ck_assert_str_eq(r.kernel, "backward-tensor-core");
    flashcl_context_destroy(&ctx);
}

START_TEST(backward_split_d)
{
    for (int i = 0; i < (int)COUNT(split_d_shapes); i++) {
        char label[48];
        snprintf(label, sizeof(label), "split-d backward %d/%d", _i, i);
        check_backward_split(&split_d_cases[_i], split_d_shapes[i], "-DSPLIT_D=1", label, 1300 + (uint64_t)_i);
    }
}
END_TEST

/* The same cases through the fused kernel (dQ added up by the dK/dV pass in key-block order): its
 * built-in shape and two small forced ones (several K/V blocks take turns on each chunk; one chunk a
 * query block, so the two dS buffers alternate across blocks; two key tiles a warp). */
static const char *const backward_fused = "backward-tensor-core-fused:on";
static void check_backward_fused(int index)
{
    const struct bwd_case *c = &backward_cases[index];
    static const char *const options[] = {"backward-tensor-core-fused:on",
                                          "backward-tensor-core-fused:warps=2,block_m=32,block_n=32",
                                          "backward-tensor-core-fused:warps=1,block_m=16,block_n=32"};
    for (int i = 0; i < 3; i++) {
        char label[48];
        snprintf(label, sizeof(label), "backward %2d/%d", index, i);
        struct bwd_result r;
        run_case(context_with_options(options[i]), label, c, 1000 + (uint64_t)index, &r);
        ck_assert_str_eq(r.kernel, c->layout == LAYOUT_PADDED ? "backward-tiled"
                                                               : "backward-tensor-core-fused");
    }
}

START_TEST(backward_other_shapes)
{
    check_backward_fused(_i);
}
END_TEST

/* ---- the backward on Hopper's wgmma: "backward-wgmma" ---- */

/* Its built-in shape, then one and two warpgroups a work-group with the other block sizes: 64 queries (keys)
 * a streamed block against 128 keys (rows) a work-group, and 128 against 128 (S's product split in halves at
 * d = 128). */
static const char *const backward_wgmma_shapes[] = {
    "",
    "backward-wgmma:warps=8,block_m=64,block_n=64",
    "backward-wgmma:warps=4,block_m=128,block_n=128",
};

static void check_backward_wgmma(int index, int shapes)
{
    const struct bwd_case *c = &backward_cases[index];
    if (!wgmma_expected())
        return;
    for (int i = 0; i < shapes; i++) {
        char label[48];
        snprintf(label, sizeof(label), "wgmma backward %2d/%d", index, i);
        struct bwd_result r;
        run_case(wgmma_context(backward_wgmma_shapes[i]), label, c, 1000 + (uint64_t)index, &r);
        ck_assert_str_eq(r.kernel, c->layout == LAYOUT_PADDED ? "backward-tiled" : "backward-wgmma");
    }
}

START_TEST(backward_wgmma)
{
    check_backward_wgmma(_i, (int)COUNT(backward_wgmma_shapes));
}
END_TEST

/* Past d = 128: two warpgroups split dK's and dV's columns (128 + the rest) and dQ streams 64- or 32-key
 * blocks. batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, own_workspace. */
static const struct bwd_case backward_wide_cases[] = {
    {1, 100, 90, 4, 2, 256, F16, 1, 0, LAYOUT_BNHD, 0},     /* GQA, Nq > Nk, 32-key dQ blocks, 128 + 128 */
    {1, 70, 130, 2, 2, 192, BF16, 0, 0, LAYOUT_BHND, 0},    /* 128 + 64 columns */
    {1, 90, 90, 2, 1, 144, F16, 1, -0.3f, LAYOUT_BNHD, 1},  /* 128 + 16 columns, MQA, a negative scale */
};

START_TEST(backward_mma_wide)
{
    const struct bwd_case *c = &backward_wide_cases[_i];
    for (int i = 0; i < (int)COUNT(backward_split_shapes); i++) {
        char label[48];
        snprintf(label, sizeof(label), "mma.sync backward d = %d/%d", c->head_dim, i);
        check_backward_split(c, backward_split_shapes[i], "", label, 1100 + (uint64_t)_i);
    }
}
END_TEST

/* Emulated: d = 144 (128 + 16 columns), MQA, a negative scale, its smaller shape only. */
START_TEST(backward_mma_wide_emulated)
{
    check_backward_split(&backward_wide_cases[2], backward_split_shapes[1], "", "mma.sync backward d = 144", 1102);
}
END_TEST

/* Their default plan, and d = 192 with 32-key dQ blocks too. */
START_TEST(backward_wgmma_wide)
{
    const struct bwd_case *c = &backward_wide_cases[_i];
    if (!wgmma_expected())
        return;
    static const char *const options[] = {"", "backward-wgmma:warps=8,block_m=64,block_n=32"};
    for (int i = 0; i < (c->head_dim == 192 ? 2 : 1); i++) {
        char label[48];
        snprintf(label, sizeof(label), "wgmma backward d = %d/%d", c->head_dim, i);
        struct bwd_result r;
        run_case(wgmma_context(options[i]), label, c, 1100 + (uint64_t)_i, &r);
        ck_assert_str_eq(r.kernel, "backward-wgmma");
    }
}
END_TEST

/* The atomic variant (dQ added up by the dK/dV pass, opt-in) on the same cases: head dims of 32s up to 128 run it,
 * the others the two-pass kernel, the padded view the FMA units. */
static void check_backward_wgmma_atomic(int index)
{
    const struct bwd_case *c = &backward_cases[index];
    if (!wgmma_expected())
        return;
    char label[48];
    snprintf(label, sizeof(label), "wgmma atomic backward %2d", index);
    struct bwd_result r;
    run_case(wgmma_context("backward-wgmma-atomic:on"), label, c, 1200 + (uint64_t)index, &r);
    const bool takes = c->head_dim % 32 == 0 && c->head_dim <= 128;
    ck_assert_str_eq(r.kernel, c->layout == LAYOUT_PADDED ? "backward-tiled"
                               : takes                    ? "backward-wgmma-atomic"
                                                          : "backward-wgmma");
}

START_TEST(backward_wgmma_atomic)
{
    check_backward_wgmma_atomic(_i);
}
END_TEST

/* Emulated: d = 128 GQA Nq < Nk and Nq > Nk (rows with no key), d = 32 bf16, one query row at d = 64. */
static const int emulated_wgmma_atomic_cases[] = {2, 3, 12, 10};
START_TEST(backward_wgmma_atomic_emulated)
{
    check_backward_wgmma_atomic(emulated_wgmma_atomic_cases[_i]);
}
END_TEST

/* Emulated: Nq > Nk at d = 128 (rows with no key), d = 16 bf16 with a scale, d = 96 causal over 333 rows. */
static const int emulated_wgmma_backward_cases[] = {3, 5, 13};
START_TEST(backward_wgmma_emulated)
{
    check_backward_wgmma(emulated_wgmma_backward_cases[_i], _i == 1 ? (int)COUNT(backward_wgmma_shapes) : 1);
}
END_TEST

/* Emulated (slow: about 2 minutes a case on 2 cores): Nq > Nk (rows with no key) at d = 128, d = 16 bf16, one key;
 * two key tiles a warp (the built-in plans' one tile runs natively and in kernel_check). */
static const int emulated_backward_cases[] = {3, 5, 11};
START_TEST(backward_emulated)
{
    check_backward_two_pass(emulated_backward_cases[_i], backward_two_key_tiles);
    check_backward_fused(emulated_backward_cases[_i]);
}
END_TEST

/* Same bits every run: dK, dV summed over 4 query heads, several blocks each way; dQ's partials added
 * in key-block order (fused) or in one chain (two-pass, wgmma's too); the atomic kernel's dK and dV. */
START_TEST(backward_deterministic)
{
    struct test_env *e = test_env_get();
    const struct bwd_case c = {1, 300, 280, 4, 1, 64, BF16, 1, 0, LAYOUT_BNHD, 0};
    /* The fused kernel at 32 x 32 blocks: 9 K/V blocks add to every chunk, so an unordered sum would show. */
    static const char *const options[] = {"backward-wgmma:off", "backward-tensor-core-fused:warps=2,block_m=32,block_n=32",
                                          "backward-wgmma:warps=8,block_m=64,block_n=64", "backward-wgmma-atomic:on"};
    static const char *const expected[] = {"backward-tensor-core", "backward-tensor-core-fused", "backward-wgmma",
                                           "backward-wgmma-atomic"};
    /* The atomic kernel's dQ may differ in its last bits (it adds in any order): dK and dV alone compared. */
    const int first_compared = _i == 3 ? 1 : 0;
    if (_i >= 2 && !wgmma_expected())
        return;
    flashcl_context *ctx = _i >= 2 ? wgmma_context(options[_i]) : context_with_options(options[_i]);
    struct problem p;
    problem_create(&p, &c, 1500);
    problem_forward(&p, ctx);
    problem_backward(&p, ctx, e->queue);
    ck_assert_str_eq(p.kernel, expected[_i]);
    unsigned char *first[3];
    for (int o = 0; o < 3; o++)
        first[o] = read_back(&p, T_DQ + o);
    /* The second run on an out-of-order queue where the device has one (the library's events order
     * the steps there; the fused kernel's turns do not depend on which work-group starts first). */
    bool out_of_order;
    cl_command_queue other = test_second_queue(&out_of_order);
    for (int run = 0; run < 2; run++) {
        for (int o = 0; o < 3; o++) {  /* poisoned again: a run that wrote nothing cannot compare equal */
            const cl_uchar poison = 0xff;
            ck_assert_cl(clEnqueueFillBuffer(e->queue, p.mem[T_DQ + o], &poison, 1, 0, p.count[T_DQ + o] * p.esize, 0,
                                             NULL, NULL));
        }
        ck_assert_cl(clFinish(e->queue));
        problem_backward(&p, ctx, run == 1 ? other : e->queue);
        for (int o = first_compared; o < 3; o++) {
            unsigned char *again = read_back(&p, T_DQ + o);
            ck_assert_msg(memcmp(again, first[o], p.count[T_DQ + o] * p.esize) == 0, "run %d gave other %s bits",
                          run, tensor_names[T_DQ + o]);
            free(again);
        }
    }
    struct bwd_result r;
    problem_check(&p, &r);
    printf("backward deterministic (%s): 3 runs bit-identical%s; max err / max|ref| dQ %.2e dK %.2e dV %.2e\n",
           p.kernel, first_compared ? " in dK and dV" : "", r.max_err[0], r.max_err[1], r.max_err[2]);
    for (int o = 0; o < 3; o++)
        free(first[o]);
    clReleaseCommandQueue(other);
    problem_free(&p);
}
END_TEST

/* Builds `source` with `options` on the test device, prints the build log (NVIDIA's -cl-nv-verbose puts
 * ptxas's registers and spills there) beside the table's footprint, and asserts it built; the log into
 * *log (the caller frees it and releases the program). */
static cl_program build_with_log(const char *source, const char *options, const char *what, size_t table_bytes,
                                 char **log)
{
    struct test_env *e = test_env_get();
    cl_int err;
    cl_program prog = clCreateProgramWithSource(e->cl, 1, &source, NULL, &err);
    ck_assert_cl(err);
    const cl_int built = clBuildProgram(prog, 1, &e->device, options, NULL, NULL);
    size_t size = 0;
    clGetProgramBuildInfo(prog, e->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
    *log = calloc(size + 1, 1);
    ck_assert_ptr_nonnull(*log);
    clGetProgramBuildInfo(prog, e->device, CL_PROGRAM_BUILD_LOG, size, *log, NULL);
    printf("%s build (%s, %zu bytes local in the table): %s\n%s\n", what, options, table_bytes,
           built == CL_SUCCESS ? "built" : "FAILED", *log);
    ck_assert_cl(built);
    return prog;
}

/* The compiler's report (registers, spills, local memory) for the built-in
 * shapes at d = 64 and 128, causal or not: the plan's own options plus
 * -cl-nv-verbose (NVIDIA's), built here so the whole log prints. */
START_TEST(backward_ptxas_report)
{
    const int dims[] = {64, 128};
    for (int i = 0; i < 8; i++) {
        const bool fused = i >= 4;
        const struct bwd_case c = {1, 64, 64, 2, 2, dims[i / 2 % 2], F16, i % 2, 0, LAYOUT_BNHD, 0};
        struct problem p;
        problem_create(&p, &c, 1);
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_backward_config(context_with_options(fused ? backward_fused : "backward-wgmma:off"),
                                                     &p.a, &p.g, &t));
        problem_free(&p);
        ck_assert_str_eq(t.kernel, fused ? "backward-tensor-core-fused"
                                          : "backward-tensor-core");
        char options[256];
        snprintf(options, sizeof(options), "-cl-std=CL1.2 -DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d -DWARPS=%d -DWG=%d "
                 "-DDTYPE=1 -DCAUSAL=%d -DFUSED_DQ=%d -cl-nv-verbose", c.head_dim, t.block_m, t.block_n, t.warps,
                 t.workgroup_size, c.causal, fused);
        char *log;
        cl_program prog = build_with_log(flashcl_source_flash_backward_mma, options, "backward tensor-core",
                                         t.local_bytes, &log);
        free(log);
        clReleaseProgram(prog);
    }
}
END_TEST

/* ---- the f32 backward on TF32 tensor cores: "backward-tf32" ---- */

#define BWD_TF32(b, nq, nk, hq, hk, d, causal, scale, layout, ws, precision)                                       \
    {b, nq, nk, hq, hk, d, F32, causal, scale, layout, ws, 0, 0, 0, 0, precision}

/* f32 calls that allow TF32 or 3xTF32 (both calls, the forward on the TF32 kernel too where it runs):
 * head dims 16, 64, 80, 128, lengths 1, 17, 100, 129 (no multiple of a block), causal with Nq < Nk
 * and Nq > Nk (rows with no key), GQA 4:2 and 6:1, a negative scale, several blocks each way. The
 * padded view (rows not on 16 bytes) must take the register-tiled FMA backward, exact. */
static const struct bwd_case tf32_backward_cases[] = {
    BWD_TF32(1, 100, 129, 4, 2, 64, 1, 0, LAYOUT_BNHD, 0, TF32),       /* Nq < Nk, GQA 4:2 */
    BWD_TF32(1, 129, 17, 2, 2, 80, 1, 0, LAYOUT_BHND, 1, TF32X3),      /* Nq > Nk: 112 rows see no key */
    BWD_TF32(1, 100, 100, 6, 1, 16, 0, 0, LAYOUT_BNHD, 0, TF32X3),     /* GQA 6:1 */
    BWD_TF32(1, 17, 100, 2, 2, 128, 0, 0, LAYOUT_BNHD, 0, TF32),
    BWD_TF32(1, 1, 100, 2, 2, 128, 1, 0, LAYOUT_BNHD, 0, TF32X3),      /* one query sees every key */
    BWD_TF32(1, 17, 1, 2, 1, 64, 1, 0, LAYOUT_BNHD, 0, TF32),          /* one key: 16 rows see none */
    BWD_TF32(2, 129, 100, 2, 2, 128, 1, 0, LAYOUT_BNHD, 0, TF32X3),    /* Nq > Nk, two batches */
    BWD_TF32(1, 100, 64, 2, 2, 64, 1, -0.2f, LAYOUT_BNHD, 0, TF32),    /* negative scale */
    BWD_TF32(1, 40, 56, 4, 2, 64, 1, 0, LAYOUT_PADDED, 0, TF32),       /* not 16-byte rows: FMA units */
};

/* The cases again on forced shapes: several 16-key (16-row) tiles a warp, 16- and 32-query chunks.
 * Emulated, the first shape on the first two cases only: each new head dim, mask, precision and shape
 * is a program PoCL compiles for several seconds. */
static const char *const tf32_backward_shapes[] = {
    "decode:off;decode-tensor-core:off;backward-tf32:warps=1,block_m=32,block_n=32",
    "decode:off;decode-tensor-core:off;backward-tf32:warps=2,block_m=32,block_n=64",
};

static void run_tf32_backward(const char *options, const struct bwd_case *c, uint64_t seed, const char *label)
{
    struct bwd_result r;
    run_case(context_with_options(options), label, c, seed, &r);
    ck_assert_str_eq(r.kernel, c->layout == LAYOUT_PADDED ? "backward-tiled"
                                                           : "backward-tf32");
}

START_TEST(backward_tf32)
{
    char label[32];
    snprintf(label, sizeof(label), "bwd %s %d", tf32_backward_cases[_i].precision == TF32 ? "tf32" : "tf32x3", _i);
    run_tf32_backward("decode:off;decode-tensor-core:off", &tf32_backward_cases[_i], 2000 + (uint64_t)_i, label);
}
END_TEST

START_TEST(backward_tf32_shapes)
{
    const size_t n = emulated ? 1 : sizeof(tf32_backward_shapes) / sizeof(tf32_backward_shapes[0]);
    for (size_t i = 0; i < n; i++) {
        char label[32];
        snprintf(label, sizeof(label), "bwd shape %zu %d", i, _i);
        run_tf32_backward(tf32_backward_shapes[i], &tf32_backward_cases[_i], 2100 + 10 * (uint64_t)_i + i, label);
    }
}
END_TEST

/* Exact f32 (the default precision) never takes the TF32 backward, here on the same context. */
START_TEST(backward_tf32_not_exact)
{
    const struct bwd_case c = BWD_TF32(1, 100, 129, 4, 2, 64, 1, 0, LAYOUT_BNHD, 0, FLASHCL_PRECISION_EXACT);
    struct bwd_result r;
    run_case(context_with_options("decode:off;decode-tensor-core:off"), "bwd exact f32", &c, 2200, &r);
    ck_assert_str_eq(r.kernel, "backward-tiled");
}
END_TEST

/* Same bits every run: dK, dV summed over 4 query heads, three blocks each way, both precisions (the
 * head dims, mask and shape of backward_tf32's first two cases: the same programs). */
START_TEST(backward_tf32_deterministic)
{
    struct bwd_case c = BWD_TF32(1, 150, 140, 4, 1, _i ? 80 : 64, 1, 0, LAYOUT_BNHD, 0, _i ? TF32X3 : TF32);
    flashcl_context *ctx = context_with_options("decode:off;decode-tensor-core:off");
    struct problem p;
    problem_create(&p, &c, 2300 + (uint64_t)_i);
    problem_forward(&p, ctx);
    problem_backward(&p, ctx, test_env_get()->queue);
    ck_assert_str_eq(p.kernel, "backward-tf32");
    unsigned char *first[3];
    for (int o = 0; o < 3; o++)
        first[o] = read_back(&p, T_DQ + o);
    problem_backward(&p, ctx, test_env_get()->queue);
    for (int o = 0; o < 3; o++) {
        unsigned char *again = read_back(&p, T_DQ + o);
        ck_assert_msg(memcmp(again, first[o], p.count[T_DQ + o] * p.esize) == 0, "a second run gave other %s bits",
                      tensor_names[T_DQ + o]);
        free(again);
        free(first[o]);
    }
    struct bwd_result r;
    problem_check(&p, &r);
    printf("backward-tf32 deterministic (%s): 2 runs bit-identical; max err / max|ref| dQ %.2e dK %.2e dV %.2e\n",
           _i ? "tf32x3" : "tf32", r.max_err[0], r.max_err[1], r.max_err[2]);
    problem_free(&p);
}
END_TEST

#define LOCAL_SLACK 64  /* src/kernel_table.h's FCL_LOCAL_SLACK: what a compiler may add to the arrays */

/* Builds the TF32 backward with the options the plan of tile t gives (src/kernels.c's
 * backward_tf32_options, the planner's -cl-std and -DNV_EMULATE) plus `extra`; the build log into log. */
static cl_program build_backward_tf32(const struct flashcl_tile *t, int head_dim, int causal, int passes,
                                      const char *extra, char **log)
{
    char options[320];
    snprintf(options, sizeof(options), "-cl-std=CL1.2 -DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d -DWARPS=%d -DWG=%d "
             "-DCAUSAL=%d -DPASSES=%d%s %s", head_dim, t->block_m, t->block_n, t->warps, t->workgroup_size, causal,
             passes, emulated ? " -DNV_EMULATE=1" : "", extra);
    return build_with_log(flashcl_source_flash_backward_tf32, options, "backward-tf32", t->local_bytes, log);
}

/* The table's footprint is what the larger of the two built block kernels declares, on the planner's
 * shape and a forced one (with the emulation's scratch where emulated); natively also the compiler's
 * report (registers, spills) of the planner's shapes at d = 64 and 128, both precisions. */
START_TEST(backward_tf32_footprint)
{
    struct test_env *e = test_env_get();
    const struct { const char *options; int head_dim, causal; enum flashcl_precision precision; } builds[] = {
        {"decode:off;decode-tensor-core:off", 128, 1, TF32X3},
        {"decode:off;decode-tensor-core:off;backward-tf32:warps=2,block_m=32,block_n=64", 80, 0, TF32X3},
        {"decode:off;decode-tensor-core:off", 64, 0, TF32X3},
        {"decode:off;decode-tensor-core:off", 128, 0, TF32X3},
    };
    for (int i = 0; i < (emulated ? 1 : 4); i++) {  /* emulated: one (PoCL's compile is slow) */
        const struct bwd_case c = BWD_TF32(1, 64, 64, 2, 2, builds[i].head_dim, builds[i].causal, 0, LAYOUT_BNHD, 0,
                                           builds[i].precision);
        struct problem p;
        problem_create(&p, &c, 1);
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_backward_config(context_with_options(builds[i].options), &p.a, &p.g, &t));
        problem_free(&p);
        ck_assert_str_eq(t.kernel, "backward-tf32");
        char *log;
        cl_program prog = build_backward_tf32(&t, c.head_dim, c.causal, c.precision == TF32X3 ? 3 : 1,
                                              emulated ? "" : "-cl-nv-verbose", &log);
        free(log);
        cl_ulong largest = 0;
        const char *const steps[] = {"flash_backward_tf32_dkdv", "flash_backward_tf32_dq"};
        for (int step = 0; step < 2; step++) {
            cl_int err;
            cl_kernel kernel = clCreateKernel(prog, steps[step], &err);
            ck_assert_cl(err);
            cl_ulong declared = 0;
            ck_assert_cl(clGetKernelWorkGroupInfo(kernel, e->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof(declared),
                                                  &declared, NULL));
            printf("  %s: %llu bytes local\n", steps[step], (unsigned long long)declared);
            largest = declared > largest ? declared : largest;
            clReleaseKernel(kernel);
        }
        clReleaseProgram(prog);
        ck_assert_msg(largest + LOCAL_SLACK >= t.local_bytes && largest <= t.local_bytes + LOCAL_SLACK,
                      "%dx%dx%d at d = %d: the kernels declare at most %llu bytes, the table says %zu", t.warps,
                      t.block_m, t.block_n, c.head_dim, (unsigned long long)largest, t.local_bytes);
    }
}
END_TEST

/* Which backward a TF32 call plans where tensor cores are assumed (nothing launched): backward-tf32 with
 * the shapes of src/kernels.c's list that fit an H200's 227 KB and a 99 KB part; exact f32 never. */
START_TEST(backward_tf32_planned)
{
    struct test_env *e = test_env_get();
    const struct {
        size_t local;
        int compute_capability, head_dim;
        enum flashcl_precision precision;
        const char *kernel;
        int warps, block_m, block_n;
    } plans[] = {
        {232448, 90, 64, TF32, "backward-tf32", 4, 64, 64},     /* 112 KB */
        {232448, 90, 128, TF32X3, "backward-tf32", 4, 64, 64},  /* 210 KB */
        {101376, 86, 64, TF32X3, "backward-tf32", 2, 32, 32},   /* 56 KB */
        {101376, 86, 112, TF32, "backward-tf32", 2, 32, 32},    /* 93 KB */
        {101376, 86, 128, TF32, "backward-tf32", 1, 16, 16},    /* 53 KB */
        {232448, 90, 64, FLASHCL_PRECISION_EXACT, "backward-tiled", 0, 64, 64},
        {232448, 90, 72, TF32, "backward-tiled", 0, 64, 64},    /* not a multiple of 16 */
    };
    for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
        struct flashcl_context_params params = {0};
        params.context = e->cl;
        params.device = e->device;
        params.local_mem_bytes = plans[i].local;
        params.tuning_file = "";
        const struct fcl_test_hooks hooks = {.assume_tensor_cores = true,
                                             .assume_compute_capability = plans[i].compute_capability};
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(fcl_context_create(&params, &hooks, &ctx));
        const struct bwd_case c = BWD_TF32(1, 64, 64, 2, 2, plans[i].head_dim, 1, 0, LAYOUT_BNHD, 0,
                                           plans[i].precision);
        struct problem p;
        problem_create(&p, &c, 1);
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_backward_config(ctx, &p.a, &p.g, &t));
        problem_free(&p);
        flashcl_context_destroy(&ctx);
        printf("backward planned with %zu bytes local, d = %d, precision %d: %s %dx%dx%d, %zu bytes\n",
               plans[i].local, plans[i].head_dim, (int)plans[i].precision, t.kernel, t.warps,
               t.block_m, t.block_n, t.local_bytes);
        ck_assert_str_eq(t.kernel, plans[i].kernel);
        if (kernel_is(t.kernel, "backward-tf32")) {
            ck_assert_int_eq(t.warps, plans[i].warps);
            ck_assert_int_eq(t.block_m, plans[i].block_m);
            ck_assert_int_eq(t.block_n, plans[i].block_n);
            ck_assert_uint_le(t.local_bytes + LOCAL_SLACK, plans[i].local);
        }
    }
}
END_TEST


/* The TF32 backward's tests, natively and emulated (the same cases, small enough for the emulation;
 * fewer forced shapes and builds there). */
static TCase *backward_tf32_tcase(void)
{
    TCase *tc = tcase_create("backward-tf32");
    tcase_set_timeout(tc, 1800);
    tcase_add_test(tc, backward_tf32_planned);
    tcase_add_test(tc, backward_tf32_footprint);
    tcase_add_loop_test(tc, backward_tf32, 0, COUNT(tf32_backward_cases));
    tcase_add_loop_test(tc, backward_tf32_shapes, 0, emulated ? 2 : COUNT(tf32_backward_cases));
    tcase_add_test(tc, backward_tf32_not_exact);
    tcase_add_loop_test(tc, backward_tf32_deterministic, 0, 2);
    return tc;
}

int main(void)
{
    const char *why = NULL;
    flashcl_context *probe = NULL;
    if (flashcl_context_create(NULL, &probe) != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s\n", flashcl_last_error());
        return EXIT_FAILURE;
    }
    const int has = flashcl_context_has_tensor_cores(probe, &why);
    printf("tensor cores on \"%s\": %s\n", flashcl_context_device_name(probe), why);
    flashcl_context_destroy(&probe);
    const char *emulate = getenv("FLASHCL_TEST_EMULATE_TENSOR_CORES");
    emulated = !has && emulate && strcmp(emulate, "1") == 0;
    if (!has && !emulated)
        return 77;  /* skipped */
    Suite *s = suite_create("tensor_cores");
    if (emulated) {
        /* Every tensor-core kernel has an emulation: run a subset of each kernel's cases. */
        printf("tensor cores emulated (FLASHCL_TEST_EMULATE_TENSOR_CORES=1): f16/bf16 forward, decode and "
               "backward, TF32 forward and backward\n");
        TCase *tc = tcase_create("emulated tensor-core kernels against the double reference");
        tcase_set_timeout(tc, 1800);
        tcase_add_loop_test(tc, tensor_core, 0, COUNT(tensor_core_cases));
        tcase_add_loop_test(tc, tensor_core_split, 0, COUNT(tensor_core_cases));
        tcase_add_loop_test(tc, decode_tensor_core, 0, COUNT(decode_cases));
        tcase_add_test(tc, decode_tensor_core_repeatable);
        suite_add_tcase(s, tc);
        TCase *tf = tcase_create("emulated TF32 forward");
        tcase_set_timeout(tf, 1800);
        tcase_add_loop_test(tf, tf32, 0, COUNT(tf32_cases));  /* not split: the f16 cases cover split.h */
        suite_add_tcase(s, tf);
        suite_add_tcase(s, backward_tf32_tcase());
        TCase *wg = tcase_create("emulated wgmma forward against the double reference");
        tcase_set_timeout(wg, 1800);
        tcase_add_loop_test(wg, tensor_core_wgmma, 0, COUNT(tensor_core_cases));
        tcase_add_loop_test(wg, tensor_core_wgmma_split, 0, COUNT(tensor_core_cases));
        suite_add_tcase(s, wg);
        TCase *wg192 = tcase_create("emulated wgmma forward on 192-key blocks");
        tcase_set_timeout(wg192, 1800);
        tcase_add_loop_test(wg192, tensor_core_wgmma_192, 0, COUNT(tensor_core_cases));
        suite_add_tcase(s, wg192);
        TCase *bw = tcase_create("emulated backward (two-pass and fused)");
        tcase_set_timeout(bw, 1800);
        tcase_add_loop_test(bw, backward_emulated, 0, COUNT(emulated_backward_cases));
        tcase_add_loop_test(bw, backward_split_d, 0, COUNT(split_d_cases));
        tcase_add_test(bw, backward_mma_wide_emulated);
        tcase_add_loop_test(bw, backward_deterministic, 0, 2);
        suite_add_tcase(s, bw);
        TCase *bwg = tcase_create("emulated wgmma backward");
        tcase_set_timeout(bwg, 1800);
        tcase_add_loop_test(bwg, backward_wgmma_emulated, 0, COUNT(emulated_wgmma_backward_cases));
        tcase_add_loop_test(bwg, backward_deterministic, 2, 4);
        suite_add_tcase(s, bwg);
        TCase *bwa = tcase_create("emulated wgmma atomic backward");
        tcase_set_timeout(bwa, 1800);
        tcase_add_loop_test(bwa, backward_wgmma_atomic_emulated, 0, COUNT(emulated_wgmma_atomic_cases));
        suite_add_tcase(s, bwa);
        TCase *bww = tcase_create("emulated wgmma backward past d = 128");
        tcase_set_timeout(bww, 1800);
        tcase_add_loop_test(bww, backward_wgmma_wide, 0, COUNT(backward_wide_cases));
        suite_add_tcase(s, bww);
        const int rc = test_run_suite(s);
        for (int i = 0; i < n_emulated; i++)
            flashcl_context_destroy(&emulated_contexts[i].ctx);
        return rc;
    }
    TCase *tc = tcase_create("tensor-core kernels against the double reference");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, tf32, 0, COUNT(tf32_cases));
    tcase_add_loop_test(tc, tensor_core, 0, COUNT(tensor_core_cases));
    tcase_add_loop_test(tc, tensor_core_split, 0, COUNT(tensor_core_cases));
    tcase_add_loop_test(tc, tf32_split, 0, COUNT(tf32_cases));
    tcase_add_loop_test(tc, decode_tensor_core, 0, COUNT(decode_cases));
    tcase_add_test(tc, decode_tensor_core_repeatable);
    suite_add_tcase(s, tc);
    TCase *wg = tcase_create("wgmma forward against the double reference");
    tcase_set_timeout(wg, 600);
    tcase_add_loop_test(wg, tensor_core_wgmma, 0, COUNT(tensor_core_cases));
    tcase_add_loop_test(wg, tensor_core_wgmma_split, 0, COUNT(tensor_core_cases));
    tcase_add_loop_test(wg, tensor_core_wgmma_split_turns, 0, COUNT(tensor_core_cases));
    tcase_add_loop_test(wg, tensor_core_wgmma_192, 0, COUNT(tensor_core_cases));
    suite_add_tcase(s, wg);
    TCase *bw = tcase_create("backward");
    tcase_set_timeout(bw, 600);
    tcase_add_test(bw, backward_ptxas_report);
    tcase_add_loop_test(bw, backward, 0, COUNT(backward_cases));
    tcase_add_loop_test(bw, backward_other_shapes, 0, COUNT(backward_cases));
    tcase_add_loop_test(bw, backward_deterministic, 0, 2);
    tcase_add_loop_test(bw, backward_split_d, 0, COUNT(split_d_cases));
    tcase_add_loop_test(bw, backward_mma_wide, 0, COUNT(backward_wide_cases));
    suite_add_tcase(s, bw);
    TCase *bwg = tcase_create("backward wgmma");
    tcase_set_timeout(bwg, 600);
    tcase_add_loop_test(bwg, backward_wgmma, 0, COUNT(backward_cases));
    tcase_add_loop_test(bwg, backward_wgmma_wide, 0, COUNT(backward_wide_cases));
    tcase_add_loop_test(bwg, backward_wgmma_atomic, 0, COUNT(backward_cases));
    tcase_add_loop_test(bwg, backward_deterministic, 2, 4);
    suite_add_tcase(s, bwg);
    suite_add_tcase(s, backward_tf32_tcase());
    return test_run_suite(s);
}
