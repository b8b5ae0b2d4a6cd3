/* The forward kernel against the double-precision reference on random
 * inputs: shapes, masks, head groups, head dims, layouts and dtypes. Every
 * output starts poisoned, and bytes outside the output view must survive. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "flashcl_tools.h"  /* flashcl_kernel_describe: which kernels take sinks */
#include "test_hooks.h"

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

static void run_and_report(flashcl_context *ctx, const char *what, const struct test_case *c)
{
    struct case_result r;
    rng_seed((uint64_t)(c->seq_q * 7919 + c->seq_kv * 104729 + c->head_dim * 31 + c->heads_q));
    test_run_case(ctx, c, &r);
    printf("%-12s %-22s", r.kernel, what);
    printf(" B=%d Nq=%-4d Nk=%-4d Hq=%d Hkv=%d d=%-3d dtype=%d causal=%d layout=%d: "
           "max|err| %.2e, rel L2 %.2e, LSE %.2e\n", c->batch, c->seq_q, c->seq_kv, c->heads_q,
           c->heads_kv, c->head_dim, (int)c->dtype, c->causal, (int)c->layout, r.max_abs_err,
           r.rel_l2_err, r.max_lse_err);
}

/* batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, lse */
static const struct test_case shape_cases[] = {
    {2, 64, 64, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1},
    {1, 37, 131, 2, 2, 32, F32, 0, 0, LAYOUT_BNHD, 1},   /* Nq != Nk */
    {1, 131, 37, 2, 2, 32, F32, 0, 0, LAYOUT_BNHD, 1},
    {1, 77, 77, 1, 1, 64, F32, 0, 0, LAYOUT_BNHD, 1},    /* N not a multiple of any block */
    {1, 300, 300, 1, 1, 16, F32, 0, 0, LAYOUT_BNHD, 1},  /* several K/V blocks */
    {3, 1, 1, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1},      /* N = 1 */
    {1, 1, 100, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1},
    {1, 100, 1, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1},
    {2, 97, 97, 2, 2, 64, F32, 1, 0, LAYOUT_BNHD, 1},    /* causal */
    {1, 40, 150, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1},   /* causal, Nq < Nk: bottom-right */
    {1, 150, 40, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1},   /* causal, Nq > Nk: first rows see nothing */
    {1, 1, 50, 1, 1, 32, F32, 1, 0, LAYOUT_BNHD, 1},     /* causal single query sees every key */
    {2, 60, 60, 8, 2, 32, F32, 0, 0, LAYOUT_BNHD, 1},    /* GQA 4:1 */
    {1, 60, 90, 8, 2, 32, F32, 1, 0, LAYOUT_BHND, 1},
    {2, 50, 70, 4, 1, 64, F32, 0, 0, LAYOUT_BNHD, 1},    /* MQA */
    {1, 64, 64, 2, 2, 64, F32, 0, 0.5f, LAYOUT_BNHD, 1}, /* explicit scale */
    {1, 64, 64, 2, 2, 64, F32, 0, -0.3f, LAYOUT_BNHD, 1},
    {1, 64, 64, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 0},    /* no LSE */
};

START_TEST(shapes)
{
    run_and_report(NULL, "shape", &shape_cases[_i]);
}
END_TEST

static const int head_dims[] = {1, 16, 32, 64, 80, 96, 128, 256};

START_TEST(head_dim)
{
    struct test_case c = {2, 70, 90, 2, 1, head_dims[_i], F32, 0, 0, LAYOUT_BNHD, 1};
    run_and_report(NULL, "head_dim", &c);
    c.causal = 1;
    c.seq_q = 90;
    c.seq_kv = 70;
    run_and_report(NULL, "head_dim causal", &c);
}
END_TEST

static const struct test_case layout_cases[] = {
    {2, 50, 50, 3, 3, 64, F32, 0, 0, LAYOUT_BNHD, 1},
    {2, 50, 50, 3, 3, 64, F32, 0, 0, LAYOUT_BHND, 1},
    {2, 50, 70, 4, 2, 48, F32, 1, 0, LAYOUT_PADDED, 1},
    {2, 50, 50, 3, 3, 64, F32, 1, 0, LAYOUT_FUSED_QKV, 1},
};

START_TEST(layouts)
{
    run_and_report(NULL, "layout", &layout_cases[_i]);
}
END_TEST

static const struct test_case dtype_cases[] = {
    {2, 64, 80, 4, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1},
    {1, 90, 90, 2, 2, 128, F16, 1, 0, LAYOUT_BHND, 1},
    {2, 33, 65, 2, 1, 80, F16, 1, 0, LAYOUT_PADDED, 1},
    {1, 40, 40, 2, 2, 256, F16, 0, 0, LAYOUT_FUSED_QKV, 1},
    {2, 64, 80, 4, 2, 64, BF16, 0, 0, LAYOUT_BNHD, 1},
    {1, 90, 90, 2, 2, 128, BF16, 1, 0, LAYOUT_BHND, 1},
    {2, 33, 65, 2, 1, 96, BF16, 1, 0, LAYOUT_PADDED, 1},
    {1, 40, 40, 2, 2, 16, BF16, 0, 0, LAYOUT_FUSED_QKV, 1},
};

START_TEST(dtypes)
{
    run_and_report(NULL, "dtype", &dtype_cases[_i]);
}
END_TEST

/* Sliding windows (FLASHCL_MASK_WINDOW): causal-local, both sides, one side
 * only, the diagonal alone, unlimited on both sides (= no mask), Nq < Nk and
 * Nq > Nk (rows that see no key), GQA, windows wider than the sequence. */
#define WINDOW(l, r) .windowed = 1, .window_left = (l), .window_right = (r)
static const struct test_case window_cases[] = {
    {1, 100, 100, 2, 2, 32, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(16, 0)},
    {1, 70, 130, 4, 2, 24, F16, 0, 0, LAYOUT_BHND, 1, WINDOW(20, 5)},
    {2, 130, 70, 2, 1, 64, BF16, 0, 0, LAYOUT_PADDED, 1, WINDOW(-1, 3)},
    {1, 90, 90, 2, 2, 40, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(0, 0)},
    {1, 90, 90, 2, 2, 16, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(-1, -1)},
    {1, 64, 200, 2, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(10, -1)},
    {1, 50, 50, 2, 2, 12, F32, 0, 0.5f, LAYOUT_FUSED_QKV, 1, WINDOW(500, 500)},
    {1, 200, 40, 2, 2, 32, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(7, 2)},
    {1, 60, 90, 2, 2, 16, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(2147483647, 0)},            /* windows past any */
    {1, 90, 60, 2, 2, 16, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(2147483647, 2147483627)},  /* int's range */
};

/* On the default kernels, on the portable kernel with small odd tiles (the
 * window trims blocks at both ends), and on the standard path. */
static const char *const window_contexts[] = {NULL, "tensor-core:off;tf32:off;register-tiled:off;portable:block_m=5,block_n=3"};

START_TEST(windows)
{
    /* The default is the register-tiled kernel here (every head_dim is a multiple of 4), then the portable one. */
    for (int i = 0; i < 2; i++) {
        flashcl_context *ctx = window_contexts[i] ? test_context_with_options(window_contexts[i]) : NULL;
        run_and_report(ctx, i == 0 ? "window" : "window, 5x3 tile", &window_cases[_i]);
    }
    struct test_case standard = window_cases[_i];
    standard.standard = 1;
    run_and_report(NULL, "window, standard path", &standard);
}
END_TEST

/* Where the tensor cores exist (assumed here: nothing is launched), causal
 * and window calls of 16-byte rows plan the tensor-core kernels (f16, and
 * f32 that allows TF32); an f32 window call that asks for exact f32, an FMA
 * kernel. */
START_TEST(window_plans_tensor_core_kernels)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .assume_compute_capability = 90};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
    cl_mem buf = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * 2 * 64 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(buf);
    struct flashcl_attention a = {0};
    a.batch = 1;
    a.seq_q = a.seq_kv = 64;
    a.heads_q = a.heads_kv = 2;
    a.head_dim = 64;
    a.q = a.k = a.v = flashcl_tensor_bnhd(buf, F16, 64, 2, 64);
    a.o = a.q;
    a.o.offset = 64 * 2 * 64 * 2;
    a.mask = FLASHCL_MASK_CAUSAL;
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_str_eq(t.kernel, "tensor-core");
    a.mask = FLASHCL_MASK_WINDOW;
    a.window_left = 16;
    a.window_right = 0;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_str_eq(t.kernel, "tensor-core");
    a.q = a.k = a.v = flashcl_tensor_bnhd(buf, F32, 64, 2, 64);
    a.o = a.q;
    a.o.offset = 64 * 2 * 64 * 4;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_str_eq(t.kernel, "register-tiled");
    a.precision = FLASHCL_PRECISION_TF32;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_str_eq(t.kernel, "tf32");
    clReleaseMemObject(buf);
    flashcl_context_destroy(&ctx);
}
END_TEST

/* Split-KV forced on both FMA kernels (and off): decode-like, causal, GQA,
 * a window, rows with no key; the partials merge to the same function, and
 * the config query reports the splits (at most one per key block). */
static const struct test_case split_cases[] = {
    {2, 1, 300, 4, 2, 64, F32, 0, 0, LAYOUT_BNHD, 1},
    {1, 64, 200, 2, 1, 32, F16, 1, 0, LAYOUT_BHND, 1},
    {1, 100, 40, 2, 2, 24, BF16, 1, 0, LAYOUT_PADDED, 1},
    {1, 50, 120, 2, 2, 16, F32, 0, 0, LAYOUT_BNHD, 1, WINDOW(20, 3)},
};
static const struct { const char *options; int splits; } split_contexts[] = {
    {"decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;register-tiled:splits=3", 3},
    {"decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;register-tiled:off;portable:splits=5,block_m=5,block_n=3", 5},
    {"decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;register-tiled:splits=1;portable:splits=1", 1},
};

START_TEST(split_kv_forced)
{
    for (int i = 0; i < 3; i++) {
        flashcl_context *ctx = test_context_with_options(split_contexts[i].options);
        char what[32];
        snprintf(what, sizeof(what), "%d split(s)", split_contexts[i].splits);
        run_and_report(ctx, what, &split_cases[_i]);
    }
    /* The config query says how many (a 300-key decode has enough key blocks for 3). */
    if (_i == 0) {
        struct test_env *e = test_env_get();
        cl_mem buf = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 300 * 4 * 64 * 4, NULL, NULL);
        ck_assert_ptr_nonnull(buf);
        struct flashcl_attention a = {0};
        a.batch = 1;
        a.seq_q = 1;
        a.seq_kv = 300;
        a.heads_q = a.heads_kv = 2;
        a.head_dim = 64;
        a.q = a.k = a.v = flashcl_tensor_bnhd(buf, F32, 300, 2, 64);
        a.o = flashcl_tensor_bnhd(buf, F32, 1, 2, 64);
        a.o.offset = 300 * 2 * 64 * 4;
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_forward_config(test_context_with_options(split_contexts[0].options), &a, &t));
        ck_assert_int_eq(t.splits, 3);
        clReleaseMemObject(buf);
    }
}
END_TEST

/* Logit softcapping on every kernel that computes it: the register-tiled kernel (the default here), the
 * portable one, split-KV on each, the decode kernel; caps small against the scores (scale 1 or 2, inputs in
 * [-1, 1]: |s| up to d) so tanh bends them, with masks, windows, GQA, Nq != Nk, a negative scale. batch, seq_q,
 * seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, lse, standard, precision, windowed,
 * window_left, window_right, softcap. */
static const struct test_case softcap_cases[] = {
    {1, 70, 90, 4, 2, 64, F32, 1, 1.0f, LAYOUT_BNHD, 1, 0, 0, 0, 0, 0, 2.0f},
    {2, 33, 47, 2, 2, 32, F16, 0, 2.0f, LAYOUT_BHND, 1, 0, 0, 0, 0, 0, 1.0f},
    {1, 50, 50, 2, 1, 16, BF16, 0, 1.0f, LAYOUT_BNHD, 1, 0, 0, 1, 8, 3, 3.0f},
    {1, 40, 150, 2, 2, 30, F32, 1, -1.5f, LAYOUT_BNHD, 1, 0, 0, 0, 0, 0, 0.5f},
    {2, 1, 300, 8, 2, 64, F16, 0, 1.0f, LAYOUT_BNHD, 1, 0, 0, 0, 0, 0, 5.0f},  /* decode */
};
static const char *const softcap_contexts[] = {
    "",
    "decode:off;register-tiled:off",
    "decode:off;register-tiled:splits=3;portable:splits=3",
};

enum variant { VARIANT_SOFTCAP, VARIANT_SINKS, VARIANT_ALIBI };
static const char *const variant_names[] = {"softcap", "sinks", "ALiBi"};

/* Whether the table says this kernel computes the variant; on a GPU these cases may plan the tensor cores. */
static bool kernel_takes(const char *name, enum variant variant)
{
    for (int i = 0; i < flashcl_kernel_count(); i++) {
        struct flashcl_kernel_info k;
        ck_assert_flashcl_ok(flashcl_kernel_describe(i, &k));
        if (kernel_is(name, k.name))
            return (variant == VARIANT_SOFTCAP ? k.softcap : variant == VARIANT_SINKS ? k.sinks : k.alibi) != 0;
    }
    return false;
}

/* A variant's case on each of softcap_contexts against the reference, on a kernel whose table entry computes
 * the variant, and its plain twin from the same seed, whose outputs must differ: a kernel that ignored the
 * variant would fail the reference, and this shows the case could tell. */
static void run_variant(const struct test_case *c, const struct test_case *plain, uint64_t seed, enum variant variant)
{
    for (int i = 0; i < 3; i++) {
        flashcl_context *ctx = test_context_with_options(softcap_contexts[i]);
        struct case_result r, u;
        rng_seed(seed);
        test_run_case(ctx, c, &r);
        printf("%-14s %s/%d Nq=%d Nk=%d d=%d: max|err| %.2e, LSE %.2e\n", r.kernel, variant_names[variant], i,
               c->seq_q, c->seq_kv, c->head_dim, r.max_abs_err, r.max_lse_err);
        ck_assert_msg(kernel_takes(r.kernel, variant), "%s ran %s, whose table entry does not compute it",
                      variant_names[variant], r.kernel);
        rng_seed(seed);
        test_run_case(ctx, plain, &u);
        ck_assert_uint_ne(r.output_hash, u.output_hash);
    }
}

/* Attention sinks on every kernel that computes them (the same kernels and contexts as the cap, split-KV
 * merging the sink in once), with masks, windows, rows that see no key (Nq > Nk causal: O = 0, LSE = sink),
 * GQA, a head without a sink (-inf), a cap too. */
static const struct test_case sink_cases[] = {
    {1, 70, 90, 4, 2, 64, F32, 1, 0, LAYOUT_BNHD, 1, .sinks = 1},
    {2, 33, 47, 2, 2, 32, F16, 0, 0, LAYOUT_BHND, 1, .sinks = 1},
    {1, 50, 50, 3, 1, 16, BF16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 8, 3, .sinks = 1},
    {1, 60, 20, 2, 2, 24, F32, 1, 0, LAYOUT_BNHD, 1, .sinks = 1},  /* 40 rows see no key */
    {1, 40, 150, 2, 2, 32, F32, 1, -1.5f, LAYOUT_BNHD, 1, 0, 0, 0, 0, 0, 0.5f, 1},  /* negative scale, a cap */
    {2, 1, 300, 8, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1, .sinks = 1},  /* decode */
    {1, 3, 200, 6, 2, 16, F32, 1, 0, LAYOUT_BNHD, 1, .sinks = 1},  /* decode, 9 rows */
};

START_TEST(sinks)
{
    struct test_case plain = sink_cases[_i];
    plain.sinks = 0;
    run_variant(&sink_cases[_i], &plain, 800 + (uint64_t)_i, VARIANT_SINKS);
}
END_TEST

/* ALiBi on every kernel that computes it (the cap's kernels and contexts, split-KV among them), with masks,
 * windows, Nq != Nk (the distance counts from the bottom-right diagonal), GQA (the decode kernel's rows are the
 * heads of a group, each with its slope), a head whose slope is 0, a negative scale, with a cap and sinks. */
static const struct test_case alibi_cases[] = {
    {1, 70, 90, 4, 2, 64, F32, 1, 0, LAYOUT_BNHD, 1, .alibi = 1},
    {2, 33, 47, 2, 2, 32, F16, 0, 0, LAYOUT_BHND, 1, .alibi = 1},
    {1, 50, 50, 3, 1, 16, BF16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 8, 3, .alibi = 1},
    {1, 90, 40, 2, 2, 24, F32, 0, 0, LAYOUT_BNHD, 1, .alibi = 1},  /* rows past the keys' end: diagonals < 0 */
    {1, 40, 150, 2, 2, 32, F32, 1, -1.5f, LAYOUT_BNHD, 1, 0, 0, 0, 0, 0, 0.5f, 1, 1},  /* negative scale, cap, sinks */
    {2, 1, 300, 8, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1, .alibi = 1},  /* decode */
    {1, 3, 200, 6, 2, 16, F32, 1, 0, LAYOUT_BNHD, 1, .alibi = 1},  /* decode, 9 rows */
};

START_TEST(alibi)
{
    struct test_case plain = alibi_cases[_i];
    plain.alibi = 0;
    run_variant(&alibi_cases[_i], &plain, 900 + (uint64_t)_i, VARIANT_ALIBI);
}
END_TEST

/* The tensor-core kernels with sinks (nv_mma.h's finish_row, the decode kernel's warp merge) and with the cap
 * (nv_mma.h's softmax_block), on their plain-OpenCL emulation: f16/bf16 on mma.sync (sm_80) and wgmma (sm_90),
 * the decode kernel, f32 on TF32x3; a negative scale (the cap then runs on scaled scores), windows, rows that see
 * no key. The cap's cases run at scale 1 or 2 against caps that bend the scores. */
static const struct {
    struct test_case c;
    int cc;
    bool wgmma;
    const char *expect;
} tensor_core_variant_cases[] = {
    {{1, 70, 90, 4, 2, 64, F16, 1, 0, LAYOUT_BNHD, 1, .sinks = 1}, 80, false, "tensor-core"},
    {{1, 60, 20, 2, 2, 32, BF16, 1, 0, LAYOUT_BNHD, 1, .sinks = 1}, 80, false, "tensor-core"},  /* rows with no key */
    {{1, 50, 77, 3, 1, 16, F16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 8, 3, .sinks = 1}, 90, true, "tensor-core-wgmma"},
    {{2, 1, 300, 8, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1, .sinks = 1}, 80, false, "decode-tensor-core"},
    {{1, 40, 70, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1, 0, FLASHCL_PRECISION_TF32X3, .sinks = 1}, 80, false, "tf32"},
    {{1, 70, 90, 4, 2, 64, F16, 1, 1.0f, LAYOUT_BNHD, 1, .softcap = 2.0f}, 80, false, "tensor-core"},
    {{1, 40, 150, 2, 2, 32, BF16, 1, -1.5f, LAYOUT_BNHD, 1, .softcap = 0.5f}, 80, false, "tensor-core"},
    {{1, 50, 77, 3, 1, 16, F16, 0, 2.0f, LAYOUT_BNHD, 1, 0, 0, 1, 8, 3, .softcap = 3.0f, .sinks = 1}, 90, true,
     "tensor-core-wgmma"},
    {{2, 1, 300, 8, 2, 64, F16, 0, 1.0f, LAYOUT_BNHD, 1, .softcap = 5.0f}, 80, false, "decode-tensor-core"},
    {{1, 40, 70, 2, 2, 32, F32, 1, -1.0f, LAYOUT_BNHD, 1, 0, FLASHCL_PRECISION_TF32X3, .softcap = 1.0f}, 80, false,
     "tf32"},
    {{1, 70, 90, 4, 2, 64, F16, 1, 0, LAYOUT_BNHD, 1, .alibi = 1}, 80, false, "tensor-core"},
    {{1, 90, 40, 2, 2, 32, BF16, 0, -1.0f, LAYOUT_BNHD, 1, .alibi = 1}, 80, false, "tensor-core"},
    {{1, 50, 77, 3, 1, 16, F16, 0, 0, LAYOUT_BNHD, 1, 0, 0, 1, 8, 3, .alibi = 1}, 90, true, "tensor-core-wgmma"},
    {{1, 50, 77, 3, 1, 16, F16, 1, 2.0f, LAYOUT_BNHD, 1, .softcap = 3.0f, .sinks = 1, .alibi = 1}, 90, true,
     "tensor-core-wgmma"},
    {{2, 1, 300, 8, 2, 64, F16, 0, 0, LAYOUT_BNHD, 1, .alibi = 1}, 80, false, "decode-tensor-core"},  /* 4 slopes a tile */
    {{1, 3, 200, 8, 2, 32, F16, 1, 0, LAYOUT_BNHD, 1, .alibi = 1}, 80, false, "decode-tensor-core"},  /* 12 rows */
    {{1, 40, 70, 2, 2, 32, F32, 1, -1.0f, LAYOUT_BNHD, 1, 0, FLASHCL_PRECISION_TF32X3, .alibi = 1}, 80, false, "tf32"},
};

START_TEST(variants_on_tensor_cores)
{
    const struct test_case *c = &tensor_core_variant_cases[_i].c;
    flashcl_context *ctx = test_emulated_context("", tensor_core_variant_cases[_i].cc, tensor_core_variant_cases[_i].wgmma);
    struct case_result r;
    rng_seed(850 + (uint64_t)_i);
    test_run_case(ctx, c, &r);
    printf("%-18s sinks %d, softcap %g, ALiBi %d, emulated: max|err| %.2e, LSE %.2e\n", r.kernel, c->sinks,
           (double)c->softcap, c->alibi, r.max_abs_err, r.max_lse_err);
    ck_assert_msg(kernel_is(r.kernel, tensor_core_variant_cases[_i].expect), "ran %s", r.kernel);
    if (c->softcap > 0.0f || c->alibi) {  /* the cap or the bias bends these scores: without, other outputs */
        struct test_case plain = *c;
        plain.softcap = 0.0f;
        plain.alibi = 0;
        struct case_result u;
        rng_seed(850 + (uint64_t)_i);
        test_run_case(ctx, &plain, &u);
        ck_assert_uint_ne(r.output_hash, u.output_hash);
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

/* A value head dim (attn.head_dim_v) problem: random inputs on the device, O poisoned with a guard row after
 * it, and the double reference per (batch, head, row). */
struct dv_case {
    int batch, seq_q, seq_kv, heads_q, heads_kv, d, dv;
    flashcl_dtype dtype;
    int causal, alibi;
};

struct dv_problem {
    const struct dv_case *c;
    size_t no, nl, es;  /* O's elements (without the guard row), the LSE's, an element's bytes */
    cl_mem qm, km, vm, om, lm, slope_mem;
    double *ref, *ref_lse;
    struct flashcl_attention a;
};

static void dv_create(struct dv_problem *p, const struct dv_case *c, uint64_t seed)
{
    struct test_env *e = test_env_get();
    const flashcl_dtype dt = c->dtype;
    const size_t B = (size_t)c->batch, Nq = (size_t)c->seq_q, Nk = (size_t)c->seq_kv;
    const size_t Hq = (size_t)c->heads_q, Hk = (size_t)c->heads_kv, d = (size_t)c->d, dv = (size_t)c->dv;
    const size_t es = flashcl_dtype_size(dt);
    const size_t nq = B * Nq * Hq * d, nk = B * Nk * Hk * d, nv = B * Nk * Hk * dv, no = B * Nq * Hq * dv;
    memset(p, 0, sizeof(*p));
    p->c = c;
    p->no = no;
    p->nl = B * Hq * Nq;
    p->es = es;
    rng_seed(seed);
    unsigned char *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nv * es);
    ck_assert(q && k && v);
    for (size_t x = 0; x < nq; x++)
        hostref_store(q, dt, x, (float)rng_uniform(-1.0, 1.0));
    for (size_t x = 0; x < nk; x++)
        hostref_store(k, dt, x, (float)rng_uniform(-1.0, 1.0));
    for (size_t x = 0; x < nv; x++)
        hostref_store(v, dt, x, (float)rng_uniform(-1.0, 1.0));
    double slopes[8] = {0};
    if (c->alibi)
        test_make_alibi_slopes((int)Hq, slopes, &p->slope_mem);
    cl_int err;
    p->qm = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nq * es, q, &err);
    p->km = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nk * es, k, &err);
    p->vm = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nv * es, v, &err);
    p->om = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, (no + Hq * dv) * es, NULL, &err);  /* a guard row after */
    p->lm = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, p->nl * sizeof(float), NULL, &err);
    ck_assert(p->qm && p->km && p->vm && p->om && p->lm);
    struct flashcl_attention *a = &p->a;
    a->batch = (int)B;
    a->seq_q = (int)Nq;
    a->seq_kv = (int)Nk;
    a->heads_q = (int)Hq;
    a->heads_kv = (int)Hk;
    a->head_dim = (int)d;
    a->head_dim_v = (int)dv;
    a->q = flashcl_tensor_bnhd(p->qm, dt, Nq, Hq, d);
    a->k = flashcl_tensor_bnhd(p->km, dt, Nk, Hk, d);
    a->v = flashcl_tensor_bnhd(p->vm, dt, Nk, Hk, dv);
    a->o = flashcl_tensor_bnhd(p->om, dt, Nq, Hq, dv);
    a->lse = flashcl_tensor_lse(p->lm, Nq, Hq);
    a->mask = c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    if (p->slope_mem)
        a->alibi_slopes = (flashcl_vector){p->slope_mem, 4 * sizeof(float)};

    const double scale = 1.0 / sqrt((double)d);
    p->ref = malloc(no * sizeof(double));
    p->ref_lse = malloc(p->nl * sizeof(double));
    double *qd = malloc(d * sizeof(double)), *kd = malloc(Nk * d * sizeof(double));
    double *vd = malloc(Nk * dv * sizeof(double)), *scratch = malloc(Nk * sizeof(double));
    ck_assert(p->ref && p->ref_lse && qd && kd && vd && scratch);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            const size_t hk = h / (Hq / Hk);
            for (size_t j = 0; j < Nk; j++) {
                for (size_t x = 0; x < d; x++)
                    kd[j * d + x] = hostref_load(k, dt, ((b * Nk + j) * Hk + hk) * d + x);
                for (size_t x = 0; x < dv; x++)
                    vd[j * dv + x] = hostref_load(v, dt, ((b * Nk + j) * Hk + hk) * dv + x);
            }
            for (size_t i = 0; i < Nq; i++) {
                for (size_t x = 0; x < d; x++)
                    qd[x] = hostref_load(q, dt, ((b * Nq + i) * Hq + h) * d + x);
                size_t first, end;
                hostref_visible_keys(i, Nq, Nk, -1, c->causal ? 0 : -1, &first, &end);
                const struct hostref_mods mods = {0.0, -INFINITY, slopes[h]};
                hostref_attention_row_dv(qd, kd, vd, first, end, d, dv, scale, &mods,
                                         (long long)i + (long long)Nk - (long long)Nq,
                                         &p->ref[((b * Nq + i) * Hq + h) * dv], &p->ref_lse[(b * Hq + h) * Nq + i],
                                         scratch);
            }
        }
    free(q);
    free(k);
    free(v);
    free(qd);
    free(kd);
    free(vd);
    free(scratch);
}

/* Runs the problem on ctx (poisoned O and LSE first) and checks every element of O, the guard row and the LSE; the kernel
 * that ran must be `expect` where given. The tolerance covers the tensor-core kernels' P rounded to the input type
 * (half an ulp times max|V| = 1). */
static void dv_check(struct dv_problem *p, flashcl_context *ctx, const char *label, const char *expect)
{
    struct test_env *e = test_env_get();
    const flashcl_dtype dt = p->c->dtype;
    const size_t guard = (size_t)p->c->heads_q * (size_t)p->c->dv, es = p->es;
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &p->a, &t));
    if (expect)
        ck_assert_msg(kernel_is(t.kernel, expect), "%s: planned %s", label, t.kernel);
    unsigned char *o = malloc((p->no + guard) * es);
    float *lse = malloc(p->nl * sizeof(float));
    ck_assert(o && lse);
    memset(o, 0xff, (p->no + guard) * es);
    memset(lse, 0xff, p->nl * sizeof(float));  /* NaN: an earlier run's LSE cannot pass for this one's */
    ck_assert_cl(clEnqueueWriteBuffer(e->queue, p->om, CL_TRUE, 0, (p->no + guard) * es, o, 0, NULL, NULL));
    ck_assert_cl(clEnqueueWriteBuffer(e->queue, p->lm, CL_TRUE, 0, p->nl * sizeof(float), lse, 0, NULL, NULL));
    ck_assert_flashcl_ok(flashcl_forward(ctx, &p->a, e->queue, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, p->om, CL_TRUE, 0, (p->no + guard) * es, o, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, p->lm, CL_TRUE, 0, p->nl * sizeof(float), lse, 0, NULL, NULL));
    const double atol = dt == F32 ? 1e-5 : dt == F16 ? 2e-3 : 1.6e-2;
    double max_err = 0, max_lse = 0;
    for (size_t x = 0; x < p->no; x++) {
        const double got = hostref_load(o, dt, x), err_x = isnan(got) ? INFINITY : fabs(got - p->ref[x]);
        ck_assert_msg(err_x <= atol + 1e-2 * fabs(p->ref[x]), "%s: O[%zu] = %.9g, reference %.9g", label, x, got,
                      p->ref[x]);
        max_err = fmax(max_err, err_x);
    }
    for (size_t x = p->no; x < p->no + guard; x++)
        ck_assert_msg(isnan(hostref_load(o, dt, x)), "%s: the guard row's element %zu was written", label, x - p->no);
    for (size_t x = 0; x < p->nl; x++) {
        const double err_x = p->ref_lse[x] == -INFINITY ? (lse[x] == -INFINITY ? 0 : INFINITY)
                                                         : fabs((double)lse[x] - p->ref_lse[x]);
        ck_assert_msg(err_x <= 1e-4 + 1e-5 * fabs(p->ref_lse[x]), "%s: LSE[%zu] = %.9g, reference %.9g", label, x,
                      (double)lse[x], p->ref_lse[x]);
        max_lse = fmax(max_lse, err_x);
    }
    printf("%-17s d=%d dv=%d %s (%d x %d): max|err| %.2e, LSE %.2e\n", t.kernel, p->c->d, p->c->dv, label, t.block_m,
           t.block_n, max_err, max_lse);
    free(o);
    free(lse);
}

static void dv_free(struct dv_problem *p)
{
    cl_mem all[] = {p->qm, p->km, p->vm, p->om, p->lm, p->slope_mem};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(p->ref);
    free(p->ref_lse);
}

/* A value head dim other than head_dim (attn.head_dim_v; MLA prefill's 192/128 among them), on the portable
 * kernel whole, split-KV and with small odd tiles, against the double reference: every element of O (dv
 * columns, poisoned first, a guard row after) and the LSE; causal and not, GQA, Nq != Nk, dv above and below
 * d; a ALiBi case too. The contexts that name the portable kernel turn the tensor-core and decode ones off (which take the
 * f16/bf16 cases with multiples of 16 where tensor cores are); the backward and the standard path refuse the call
 * with a message. */
static const struct dv_case dv_cases[] = {
    {1, 70, 90, 4, 2, 32, 16, F32, 1, 0}, {2, 33, 47, 2, 2, 24, 40, F16, 0, 0}, {1, 3, 300, 8, 2, 64, 48, BF16, 0, 0},
    {1, 40, 40, 2, 1, 192, 128, F16, 1, 0}, {1, 50, 20, 2, 2, 8, 12, F32, 1, 1},
};
static const char *const dv_contexts[] = {"", "decode:off;decode-tensor-core:off;tensor-core:off;portable:splits=3",
                                          "decode:off;decode-tensor-core:off;tensor-core:off;portable:block_m=3,block_n=5"};

START_TEST(value_head_dim)
{
    struct test_env *e = test_env_get();
    struct dv_problem p;
    dv_create(&p, &dv_cases[_i], 950 + (uint64_t)_i);
    for (int ci = 0; ci < 3; ci++)
        dv_check(&p, test_context_with_options(dv_contexts[ci]), dv_contexts[ci], ci > 0 ? "portable" : NULL);
    /* The standard path refuses it, naming head_dim_v (the backward takes it: tests/test_backward.c). */
    size_t bytes;
    ck_assert_int_eq(flashcl_standard_workspace_size(e->ctx, &p.a, &bytes), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "head_dim_v"));
    dv_free(&p);
}
END_TEST

/* The same on the f16/bf16 tensor-core kernels' plain-OpenCL emulation, mma.sync (sm_80) and wgmma (sm_90): S over
 * d, P V, O and V's tiles over dv. MLA's d = 192 with dv = 128 (mma.sync's built-in 8 x 1 x 64 for the wider 192;
 * wgmma's softmax beside the previous block's PV, Q from local memory) causal with GQA; d = 64 with dv = 128 split
 * over the keys (mma.sync's 4 x 2 x 64; wgmma's 128-key blocks, S in halves since PV's N is 128); odd lengths
 * throughout. tests/test_varlen.c runs a paged cache of dv > d. */
static const struct {
    struct dv_case c;
    int cc;
    const char *options, *expect;
    int kb;  /* the shape's local memory, emulated */
} dv_tensor_core_cases[] = {
    {{1, 67, 83, 4, 2, 192, 128, F16, 1, 0}, 80, "", "tensor-core", 134},
    {{1, 50, 77, 2, 1, 64, 128, BF16, 0, 0}, 80, "tensor-core:splits=2", "tensor-core", 67},
    {{1, 67, 83, 4, 2, 192, 128, F16, 1, 0}, 90, "tensor-core-wgmma:warps=4,block_n=64", "tensor-core-wgmma", 107},
    {{1, 50, 150, 2, 1, 64, 128, BF16, 0, 0}, 90, "tensor-core-wgmma:warps=4,block_n=128,splits=2", "tensor-core-wgmma",
     155},
};

START_TEST(value_head_dim_tensor_cores)
{
    struct dv_problem p;
    dv_create(&p, &dv_tensor_core_cases[_i].c, 970 + (uint64_t)_i);
    const int cc = dv_tensor_core_cases[_i].cc;
    flashcl_context *ctx = test_emulated_context(dv_tensor_core_cases[_i].options, cc, cc >= 90);
    char label[160];
    snprintf(label, sizeof(label), "emulated sm_%d \"%s\"", cc, dv_tensor_core_cases[_i].options);
    if (test_local_mem_holds(ctx, dv_tensor_core_cases[_i].kb, label))
        dv_check(&p, ctx, label, dv_tensor_core_cases[_i].expect);
    flashcl_context_destroy(&ctx);
    dv_free(&p);
}
END_TEST

/* The FMA decode kernel (cl/flash_decode.cl) with dv != d: V's tiles, the teams' P·V columns and O over dv;
 * absorbed-MLA-like dv < d and dv > d, GQA groups of 4 and 3 (a chunk of 2 positions, causal), f32/f16/bf16,
 * whole and split (the merge step over dv + 1 floats a row), a paged-free dense cache. */
static const struct dv_case dv_decode_cases[] = {
    {2, 1, 260, 8, 2, 64, 128, F16, 0, 0}, {1, 2, 300, 6, 2, 36, 20, F32, 1, 0}, {3, 1, 150, 4, 1, 96, 64, BF16, 0, 1},
};
static const char *const dv_decode_contexts[] = {"decode-tensor-core:off", "decode-tensor-core:off;decode:splits=3",
                                                 "decode-tensor-core:off;decode:block_n=32,splits=2"};

START_TEST(value_head_dim_decode)
{
    struct dv_problem p;
    dv_create(&p, &dv_decode_cases[_i], 990 + (uint64_t)_i);
    for (int ci = 0; ci < 3; ci++)
        dv_check(&p, test_context_with_options(dv_decode_contexts[ci]), dv_decode_contexts[ci], "decode");
    dv_free(&p);
}
END_TEST

START_TEST(softcap)
{
    /* The cap bends these scores, so the uncapped twin gives other outputs. */
    struct test_case uncapped = softcap_cases[_i];
    uncapped.softcap = 0.0f;
    run_variant(&softcap_cases[_i], &uncapped, 700 + (uint64_t)_i, VARIANT_SOFTCAP);
}
END_TEST

/* Odd forced tiles exercise the portable kernel's strided ownership: blocks
 * smaller than the work-group, not multiples of it, and with more rows than
 * keys. Multiples of 16 run the register-tiled kernel with that tile: one
 * row and one key per work-item (16 x 16), and 3 rows x 5 keys, not powers
 * of two (48 x 80). */
static const int forced_tiles[][2] = {{3, 5}, {1, 7}, {40, 24}, {16, 16}, {48, 80}};

START_TEST(forced_tiles_match)
{
    const int bm = forced_tiles[_i][0], bn = forced_tiles[_i][1];
    flashcl_context *ctx = test_context_with_blocks(bm, bn);
    const struct test_case c1 = {1, 45, 61, 4, 2, 24, F32, 1, 0, LAYOUT_BNHD, 1};
    const struct test_case c2 = {1, 61, 45, 2, 2, 40, BF16, 1, 0, LAYOUT_BNHD, 1};
    const struct test_case c3 = {1, 300, 290, 2, 1, 64, F32, 0, 0, LAYOUT_BHND, 1};
    const char *const want = bm % 16 == 0 && bn % 16 == 0 ? "register-tiled"
                                                                     : "portable";
    const struct test_case *cases[] = {&c1, &c2, &c3};
    for (int i = 0; i < (kernel_is(want, "register-tiled") ? 3 : 2); i++) {
        struct flashcl_tile t;
        run_and_report(ctx, "forced tile", cases[i]);
        ck_assert_flashcl_ok(test_fma_tile(ctx, cases[i]->head_dim, cases[i]->dtype, &t));
        ck_assert_str_eq(t.kernel, cases[i]->head_dim % 4 == 0 ? want : "portable");
    }
}
END_TEST

/* A context on the shared device that never uses tensor cores; "portable":
 * nor the register-tiled and decode kernels. */
static flashcl_context *fma_only_context(const char *kernel)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.portable_only = 1;
    if (kernel && kernel_is(kernel, "portable"))
        p.kernel_options = "register-tiled:off;decode:off;decode-tensor-core:off";
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    return ctx;
}

/* The portable kernel (every call that runs on the register-tiled kernel by
 * default runs on it when asked) on the shape cases. */
START_TEST(portable_kernel)
{
    flashcl_context *ctx = fma_only_context("portable");
    struct case_result r;
    rng_seed((uint64_t)_i + 300);
    test_run_case(ctx, &shape_cases[_i], &r);
    printf("%-12s shape case %2d: max|err| %.2e, rel L2 %.2e, LSE %.2e\n", r.kernel, _i,
           r.max_abs_err, r.rel_l2_err, r.max_lse_err);
    ck_assert_str_eq(r.kernel, "portable");
    flashcl_context_destroy(&ctx);
}
END_TEST

/* f32 with d a multiple of 4 runs the register-tiled kernel unless told otherwise. */
START_TEST(register_tiled_default)
{
    flashcl_context *ctx = fma_only_context(NULL);
    const struct test_case c = {1, 130, 130, 2, 2, 64, F32, 1, 0, LAYOUT_BNHD, 1};
    struct case_result r;
    rng_seed(77);
    test_run_case(ctx, &c, &r);
    ck_assert_str_eq(r.kernel, "register-tiled");
    struct flashcl_tile t;
    ck_assert_flashcl_ok(test_fma_tile(ctx, 64, F32, &t));
    ck_assert_str_eq(t.kernel, "register-tiled");
    ck_assert_int_eq(t.block_m % 16, 0);
    ck_assert_int_eq(t.block_n % 16, 0);
    ck_assert_flashcl_ok(test_fma_tile(ctx, 30, F32, &t));  /* d % 4 != 0 */
    ck_assert_str_eq(t.kernel, "portable");
    flashcl_context_destroy(&ctx);
}
END_TEST

/* The same call twice gives bit-identical output (the bytes of O and LSE
 * hash the same): no race between work-items. */
START_TEST(repeatable)
{
    const struct test_case cases[] = {
        {1, 130, 130, 2, 2, 64, F32, 1, 0, LAYOUT_BNHD, 1},
        {1, 77, 150, 4, 2, 30, F16, 0, 0, LAYOUT_BHND, 1},
    };
    for (int i = 0; i < 2; i++) {
        struct case_result a, b;
        rng_seed(42);
        test_run_case(NULL, &cases[i], &a);
        rng_seed(42);
        test_run_case(NULL, &cases[i], &b);
        ck_assert_uint_eq(a.output_hash, b.output_hash);
    }
}
END_TEST

/* Each kernel of the table forced through kernel_options (every other one
 * off) on the cases it runs: the suite's kernel-by-kernel check wherever it
 * runs (on a device without tensor cores the tensor-core kernels' contexts
 * plan nothing and are reported, not run). */
static const struct {
    const char *options;
    const char *kernel;
    struct test_case c;
} forced_kernels[] = {
    {"tensor-core:off;tf32:off;register-tiled:off", "portable",
     {2, 70, 90, 4, 2, 24, F32, 1, 0, LAYOUT_PADDED, 1}},
    {"tensor-core:off;tf32:off;register-tiled:off;portable:block_m=5,block_n=3", "portable",
     {1, 40, 33, 2, 2, 7, BF16, 0, 0, LAYOUT_BNHD, 1}},
    {"tensor-core:off;tf32:off", "register-tiled", {2, 70, 90, 4, 2, 32, F16, 1, 0, LAYOUT_BHND, 1}},
    {"tensor-core:off;tf32:off;register-tiled:block_m=16,block_n=48", "register-tiled",
     {1, 100, 61, 2, 1, 64, F32, 1, 0, LAYOUT_BNHD, 1}},
    {"tf32:off;tensor-core-wgmma:off", "tensor-core", {1, 150, 130, 4, 2, 64, F16, 1, 0, LAYOUT_BNHD, 1}},
    {"tensor-core-wgmma:off;tensor-core:warps=2,m_tiles=1,block_n=32", "tensor-core",
     {1, 150, 130, 2, 2, 128, BF16, 0, 0, LAYOUT_BHND, 1}},
    {"tf32:warps=4,m_tiles=1,block_n=16", "tf32",
     {1, 150, 130, 2, 2, 64, F32, 1, 0, LAYOUT_BNHD, 1, 0, FLASHCL_PRECISION_TF32X3}},
};

START_TEST(each_kernel_forced)
{
    flashcl_context *ctx = test_context_with_options(forced_kernels[_i].options);
    const struct test_case *c = &forced_kernels[_i].c;
    const char *const want = forced_kernels[_i].kernel;
    const char *why = NULL;
    const bool tensor = kernel_is(want, "tensor-core") || kernel_is(want, "tf32");
    if (tensor && !flashcl_context_has_tensor_cores(ctx, &why)) {
        printf("forced %-44s not run here: %s\n", forced_kernels[_i].options, why);
        return;
    }
    struct case_result r;
    rng_seed((uint64_t)_i + 900);
    test_run_case(ctx, c, &r);
    printf("forced %-44s %-14s max|err| %.2e\n", forced_kernels[_i].options, r.kernel,
           r.max_abs_err);
    ck_assert_str_eq(r.kernel, want);
}
END_TEST

/* f32 calls that allow TF32 but land on an FMA kernel (the tensor-core
 * kernels off here, as on a device without them) stay exact: f32's bound. */
START_TEST(tf32_request_on_fma_kernels_stays_exact)
{
    flashcl_context *ctx = test_context_with_options("tf32:off;tensor-core:off");
    const struct test_case cases[] = {
        {1, 96, 96, 2, 2, 40, F32, 1, 0.25f, LAYOUT_BNHD, 1, 0, FLASHCL_PRECISION_TF32X3},
        {1, 130, 77, 4, 2, 64, F32, 0, 0, LAYOUT_BHND, 1, 0, FLASHCL_PRECISION_TF32},
    };
    for (int i = 0; i < 2; i++) {
        struct case_result r;
        rng_seed(210 + (uint64_t)i);
        test_run_case(ctx, &cases[i], &r);
        ck_assert(kernel_is(r.kernel, "register-tiled") || kernel_is(r.kernel, "portable"));
        double atol, rtol, lse_tol, atol_exact, rtol_exact, lse_exact;
        test_tolerance(F32, r.kernel, cases[i].precision, &atol, &rtol, &lse_tol);
        test_tolerance(F32, r.kernel, FLASHCL_PRECISION_EXACT, &atol_exact, &rtol_exact, &lse_exact);
        ck_assert_double_eq(atol, atol_exact);  /* judged by the exact bound */
        ck_assert_double_eq(rtol, rtol_exact);
    }
}
END_TEST

/* portable_only (and FLASHCL_PORTABLE=1) keep the FMA kernels, and so do
 * views whose rows are not 16-byte aligned. */
START_TEST(portable_fallback)
{
    flashcl_context *ctx = fma_only_context(NULL);
    const char *why = NULL;
    ck_assert_int_eq(flashcl_context_has_tensor_cores(ctx, &why), 0);
    ck_assert_ptr_nonnull(strstr(why, "portable_only"));
    struct case_result r;
    rng_seed(5);
    const struct test_case eligible = {2, 200, 200, 4, 4, 64, F16, 1, 0, LAYOUT_BNHD, 1};
    test_run_case(ctx, &eligible, &r);
    ck_assert_str_eq(r.kernel, "register-tiled");
    flashcl_context_destroy(&ctx);

    const struct test_case padded = {1, 64, 64, 2, 2, 64, F16, 0, 0, LAYOUT_PADDED, 1};
    test_run_case(NULL, &padded, &r);
    ck_assert_str_ne(r.kernel, "tensor-core");
}
END_TEST

/* Hopper's wgmma forward on its plain-OpenCL emulation (cl/nv_wgmma.h with -DNV_EMULATE=1; a test hook
 * assumes an sm_90 whose probe passed), so its tiles, descriptors and split S run in CI too: one warpgroup
 * with 64-key blocks at d = 64 (S in two halves), at d = 96 (a half-used second panel) and at d = 192 (S
 * with Q read from local memory), split over the keys; two warpgroups with 128-key blocks at d = 128 (Q
 * from local memory there too: src/kernels.c's wgmma_options); past d = 96 on 64-key blocks the softmax beside
 * the previous block's PV (WGMMA_OVERLAP): d = 128 causal with GQA, d = 160 with a window and a negative scale,
 * d = 192; GQA, causal and a window, both dtypes; the built-in plans up to d = 64 (4 x 128 without a mask, 8 x 64
 * causal: test_tuning checks the plans) and 192-key blocks forced (tests/test_tensor_cores.c runs every case there
 * and on the H200). */
START_TEST(emulated_wgmma_forward)
{
    enum { N_OPTIONS = 4 };
    static const char *const options[N_OPTIONS] = {
        "decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=4,block_n=64,splits=2",
        "decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=8,block_n=128",
        "decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=12,block_n=192",
        "decode:off;decode-tensor-core:off",  /* the built-in plans */
    };
    static const struct {
        int options, warps, block_n;
        struct test_case c;
    } cases[] = {
        {0, 4, 64, {1, 150, 130, 4, 2, 64, F16, 1, 0, LAYOUT_BNHD, 1}},
        {0, 4, 64, {1, 70, 140, 2, 1, 64, BF16, 0, 0, LAYOUT_BHND, 1, 0, 0, 1, 40, 8}},
        {0, 4, 64, {1, 90, 150, 2, 1, 96, BF16, 1, 0, LAYOUT_BNHD, 1}},
        {0, 4, 64, {1, 100, 77, 2, 2, 192, F16, 0, 0, LAYOUT_BHND, 1}},
        {0, 4, 64, {1, 70, 200, 4, 2, 128, F16, 1, 0, LAYOUT_BNHD, 1}},
        {0, 4, 64, {1, 90, 170, 2, 1, 160, BF16, 0, -0.15f, LAYOUT_BHND, 1, 0, 0, 1, 60, 5}},
        {1, 8, 128, {1, 200, 300, 2, 1, 128, F16, 1, 0, LAYOUT_BNHD, 1}},
        /* 192-key blocks, the last one ragged; at d = 48 Q from local memory in a part-used panel (one case:
         * PoCL takes about 50 s to build each of these emulated 12-warp kernels; the GPU's tests run more) */
        {2, 12, 192, {1, 50, 200, 1, 1, 48, F16, 0, 0, LAYOUT_BHND, 1}},
        /* the built-ins up to d = 64: 4 x 128 (last key block ragged), 8 x 64 causal with GQA */
        {3, 4, 128, {1, 150, 300, 2, 1, 64, BF16, 0, 0, LAYOUT_BNHD, 1}},
        {3, 8, 64, {1, 130, 130, 4, 2, 32, F16, 1, 0, LAYOUT_BHND, 1}},
    };
    flashcl_context *ctx[N_OPTIONS] = {NULL};
    for (int i = 0; i < N_OPTIONS; i++)
        ctx[i] = test_emulated_context(options[i], 90, true);
    const cl_ulong usable = flashcl_context_local_mem_bytes(ctx[0]);
    for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
        /* The shape's tiles (its query rows and up to three K and V buffers, in 128-byte rows a 64-column
         * panel), the emulator's scratch and a little slack: 60 KB at d = 64, 172 KB at d = 192, 231 KB for
         * the 8 x 128 shape at d = 128, 178 KB for 12 x 192. */
        const struct test_case *c = &cases[i].c;
        const cl_ulong panels = (cl_ulong)(c->head_dim + 63) / 64;
        const cl_ulong needs = (16 * (cl_ulong)cases[i].warps + 6 * (cl_ulong)cases[i].block_n) * 128 * panels +
                               (cl_ulong)cases[i].warps * 192 * 4 + 1024;
        if (usable < needs) {
            printf("emulated wgmma case %d: skipped (%llu bytes of local memory, %llu needed)\n", i,
                   (unsigned long long)usable, (unsigned long long)needs);
            continue;
        }
        struct case_result r;
        rng_seed(90 + (uint64_t)i);
        test_run_case(ctx[cases[i].options], c, &r);
        printf("emulated wgmma case %d: max|err| %.2e, LSE %.2e\n", i, r.max_abs_err, r.max_lse_err);
        ck_assert_str_eq(r.kernel, "tensor-core-wgmma");
    }
    for (int i = 0; i < N_OPTIONS; i++)
        flashcl_context_destroy(&ctx[i]);
}
END_TEST

/* mma.sync's built-in up to d = 64 without a mask on dense batches (4 x 2 x 64 with Q's fragments in registers, two
 * tiles a warp: src/kernels.c's mma_q_registers) on its plain-OpenCL emulation, as sm_90 with the wgmma kernel not
 * assumed (test_tuning checks that plan): the last key and query blocks ragged, GQA, both dtypes, a negative scale.
 * The GPU's tests (tests/test_tensor_cores.c) run it on every non-causal case up to d = 64. */
START_TEST(emulated_mma_sm90_builtin)
{
    static const struct test_case cases[] = {
        {1, 150, 300, 2, 1, 64, BF16, 0, 0, LAYOUT_BNHD, 1},
        {2, 70, 45, 4, 2, 32, F16, 0, -0.3f, LAYOUT_BHND, 1},
    };
    flashcl_context *ctx = test_emulated_context("decode:off;decode-tensor-core:off", 90, false);
    /* 48 KiB of tiles at d = 64 and the emulator's scratch (3 KiB), with the planner's slack. */
    if (flashcl_context_local_mem_bytes(ctx) < 53 * 1024) {
        printf("emulated mma.sync 4 x 2 x 64: skipped (%llu bytes of local memory)\n",
               (unsigned long long)flashcl_context_local_mem_bytes(ctx));
    } else {
        for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
            struct case_result r;
            rng_seed(120 + (uint64_t)i);
            test_run_case(ctx, &cases[i], &r);
            printf("emulated mma.sync 4 x 2 x 64 case %d: max|err| %.2e, LSE %.2e\n", i, r.max_abs_err, r.max_lse_err);
            ck_assert_str_eq(r.kernel, "tensor-core");
        }
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

/* If a tensor-core kernel cannot build or launch although the probe passed,
 * the call still succeeds on an FMA kernel, says why once, and that kernel
 * alone is off for this context. A device without tensor cores is told to
 * assume them (a test hook), so the fallback really runs there; on one with
 * them, the kernel simply works. */
START_TEST(tensor_core_failure_falls_back)
{
    struct test_env *e = test_env_get();
    const bool real = flashcl_context_has_tensor_cores(e->ctx, NULL);
    struct test_warn_log w = {0};
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.log = test_record_warnings;
    p.log_user = &w;
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
    ck_assert(flashcl_context_has_tensor_cores(ctx, NULL));
    const struct test_case eligible = {2, 200, 200, 4, 4, 64, F16, 0, 0, LAYOUT_BNHD, 1};
    const struct test_case tf32 = {1, 96, 96, 2, 2, 40, F32, 1, 0, LAYOUT_BNHD, 1, 0, FLASHCL_PRECISION_TF32};
    struct case_result r;
    for (int i = 0; i < 2; i++) {  /* the second call goes straight to an FMA kernel */
        rng_seed(60 + (uint64_t)i);
        test_run_case(ctx, &eligible, &r);  /* checked against the reference */
    }
    if (real) {
        ck_assert_int_eq(w.warnings, 0);
        ck_assert_str_eq(r.kernel, "tensor-core");
    } else {
        ck_assert_int_eq(w.warnings, 1);
        ck_assert_ptr_nonnull(strstr(w.last, "tensor-core"));
        ck_assert_str_eq(r.kernel, "register-tiled");
        /* Only that kernel is off: a TF32 call still plans the TF32 kernel
         * (and falls back on its own failure, with its own WARN). */
        rng_seed(62);
        test_run_case(ctx, &tf32, &r);
        ck_assert_int_eq(w.warnings, 2);
        ck_assert_ptr_nonnull(strstr(w.last, "tf32"));
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

/* A kernel that fails to build (an extra -DBLOCK_N=8 the register-tiled
 * kernel refuses) is set aside for that shape and the call runs on the next
 * kernel, with one WARN; where no kernel is left, the call returns the build
 * failure itself, with its log. */
START_TEST(build_failure_falls_back_or_reports)
{
    struct test_env *e = test_env_get();
    struct test_warn_log w = {0};
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.log = test_record_warnings;
    p.log_user = &w;
    p.cache_dir = "";
    p.kernel_options = "tensor-core:off;tf32:off";
    setenv("FLASHCL_BUILD_OPTIONS", "-DBLOCK_N=8", 1);
    flashcl_context *ctx = NULL, *alone = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    p.kernel_options = "tensor-core:off;tf32:off;portable:off";
    ck_assert_flashcl_ok(flashcl_context_create(&p, &alone));
    unsetenv("FLASHCL_BUILD_OPTIONS");

    const struct test_case c = {1, 40, 50, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1};
    struct case_result r;
    rng_seed(71);
    test_run_case(ctx, &c, &r);  /* correct, on the portable kernel (any BLOCK_N works there) */
    ck_assert_int_eq(w.warnings, 1);
    ck_assert_ptr_nonnull(strstr(w.last, "register-tiled"));

    cl_mem buf = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 40 * 2 * 32 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(buf);
    struct flashcl_attention a = {0};
    a.batch = 1;
    a.seq_q = a.seq_kv = 40;
    a.heads_q = a.heads_kv = 2;
    a.head_dim = 32;
    a.q = a.k = a.v = flashcl_tensor_bnhd(buf, F32, 40, 2, 32);
    a.o = a.q;
    a.o.offset = 40 * 2 * 32 * 4;
    ck_assert_status(flashcl_forward(alone, &a, e->queue, 0, NULL, NULL), FLASHCL_BUILD_PROGRAM_FAILURE);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "build log"));
    clReleaseMemObject(buf);
    flashcl_context_destroy(&ctx);
    flashcl_context_destroy(&alone);
}
END_TEST

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

int main(void)
{
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("against the double reference");
    tcase_set_timeout(tc, 1200);
    tcase_add_loop_test(tc, shapes, 0, COUNT(shape_cases));
    tcase_add_loop_test(tc, head_dim, 0, COUNT(head_dims));
    tcase_add_loop_test(tc, layouts, 0, COUNT(layout_cases));
    tcase_add_loop_test(tc, dtypes, 0, COUNT(dtype_cases));
    tcase_add_loop_test(tc, forced_tiles_match, 0, COUNT(forced_tiles));
    tcase_add_test(tc, repeatable);
    tcase_add_loop_test(tc, portable_kernel, 0, COUNT(shape_cases));
    tcase_add_test(tc, register_tiled_default);
    tcase_add_test(tc, tf32_request_on_fma_kernels_stays_exact);
    tcase_add_loop_test(tc, each_kernel_forced, 0, COUNT(forced_kernels));
    tcase_add_test(tc, portable_fallback);
    tcase_add_test(tc, tensor_core_failure_falls_back);
    tcase_add_test(tc, emulated_wgmma_forward);
    tcase_add_test(tc, emulated_mma_sm90_builtin);
    tcase_add_test(tc, build_failure_falls_back_or_reports);
    tcase_add_loop_test(tc, windows, 0, COUNT(window_cases));
    tcase_add_test(tc, window_plans_tensor_core_kernels);
    tcase_add_loop_test(tc, split_kv_forced, 0, COUNT(split_cases));
    suite_add_tcase(s, tc);
    TCase *sc = tcase_create("softcap");
    tcase_set_timeout(sc, 600);
    tcase_add_loop_test(sc, softcap, 0, COUNT(softcap_cases));
    suite_add_tcase(s, sc);
    TCase *sk = tcase_create("sinks");
    tcase_set_timeout(sk, 600);
    tcase_add_loop_test(sk, sinks, 0, COUNT(sink_cases));
    tcase_add_loop_test(sk, variants_on_tensor_cores, 0, COUNT(tensor_core_variant_cases));
    suite_add_tcase(s, sk);
    TCase *dvc = tcase_create("value head dim");
    tcase_set_timeout(dvc, 600);
    tcase_add_loop_test(dvc, value_head_dim, 0, COUNT(dv_cases));
    tcase_add_loop_test(dvc, value_head_dim_tensor_cores, 0, COUNT(dv_tensor_core_cases));
    tcase_add_loop_test(dvc, value_head_dim_decode, 0, COUNT(dv_decode_cases));
    suite_add_tcase(s, dvc);
    TCase *al = tcase_create("alibi");
    tcase_set_timeout(al, 600);
    tcase_add_loop_test(al, alibi, 0, COUNT(alibi_cases));
    suite_add_tcase(s, al);
    return test_run_suite(s);
}
