/* The tensor-core kernels (f16/bf16 mma.sync and TF32, forward; the f16/bf16
 * backward) on the cases that qualify for them: the kernel must be the one
 * that runs, and its output meets its bound. Where the device has no tensor
 * cores every check here would be vacuous, so the suite reports itself
 * skipped (exit 77) — unless FLASHCL_TEST_EMULATE_TENSOR_CORES=1: then the
 * f16/bf16 forward and decode cases run on the kernels' plain-OpenCL
 * emulation (a test hook: -DNV_EMULATE=1, cl/nv_emulate.h), on PoCL too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_common.h"
#include "test_hooks.h"

extern const char flashcl_source_flash_backward_mma[];  /* src/internal.h */

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

/* Eligible for the tensor-core kernel (f16/bf16, d a multiple of 16 up to
 * 128, 16-byte rows): it must run. Odd lengths, both causal alignments,
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
#define MAX_EMULATED 16
static struct {
    const char *options;
    flashcl_context *ctx;
} emulated_contexts[MAX_EMULATED];
static int n_emulated;

static flashcl_context *context_with_options(const char *options)
{
    if (!emulated)
        return test_context_with_options(options);
    for (int i = 0; i < n_emulated; i++)
        if (strcmp(emulated_contexts[i].options, options) == 0)
            return emulated_contexts[i].ctx;
    ck_assert_int_lt(n_emulated, MAX_EMULATED);
    struct test_env *e = test_env_get();
    struct flashcl_context_params params = {0};
    params.context = e->cl;
    params.device = e->device;
    params.kernel_options = options;
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .emulate_tensor_cores = true,
                                         .assume_compute_capability = 80};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&params, &hooks, &ctx));
    emulated_contexts[n_emulated].options = options;
    emulated_contexts[n_emulated++].ctx = ctx;
    return ctx;
}

/* Runs a case that qualifies for a tensor-core kernel on a context of these
 * kernel options: `expected` must run (the decode kernel, which would take
 * the one-query cases first, off). */
static void run_tensor_core_case(const char *options, const struct test_case *c, uint64_t seed, const char *label,
                                 enum flashcl_variant expected)
{
    struct case_result r;
    rng_seed(seed);
    test_run_case(context_with_options(options), c, &r);
    printf("%-14s %s: max|err| %.2e, rel L2 %.2e, LSE %.2e\n", flashcl_variant_name(r.variant), label,
           r.max_abs_err, r.rel_l2_err, r.max_lse_err);
    ck_assert_int_eq(r.variant, expected);
}

START_TEST(tf32)
{
    char label[32];
    snprintf(label, sizeof(label), "%s case %2d", tf32_cases[_i].precision == TF32 ? "tf32  " : "tf32x3", _i);
    run_tensor_core_case("decode:off;decode-tensor-core:off", &tf32_cases[_i], (uint64_t)_i + 200, label, FLASHCL_VARIANT_TF32);
}
END_TEST

START_TEST(tensor_core)
{
    char label[32];
    snprintf(label, sizeof(label), "tensor-core case %2d", _i);
    run_tensor_core_case("decode:off;decode-tensor-core:off", &tensor_core_cases[_i], (uint64_t)_i + 100, label, FLASHCL_VARIANT_TENSOR_CORE);
}
END_TEST

START_TEST(tf32_split)
{
    char label[32];
    snprintf(label, sizeof(label), "tf32 split 3 case %2d", _i);
    run_tensor_core_case("decode:off;decode-tensor-core:off;tf32:block_n=16,splits=3", &tf32_cases[_i], (uint64_t)_i + 250, label,
                         FLASHCL_VARIANT_TF32);
}
END_TEST

START_TEST(decode_tensor_core)
{
    const size_t n = sizeof(decode_contexts) / sizeof(decode_contexts[0]);
    for (size_t i = 0; i < n; i++) {
        char label[80];
        snprintf(label, sizeof(label), "decode case %d %s", _i, decode_contexts[i]);
        run_tensor_core_case(decode_contexts[i], &decode_cases[_i], (uint64_t)_i * 7 + i + 300, label,
                             FLASHCL_VARIANT_DECODE_TENSOR_CORE);
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
        ck_assert_int_eq(a.variant, FLASHCL_VARIANT_DECODE_TENSOR_CORE);
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
    run_tensor_core_case("decode:off;decode-tensor-core:off;tensor-core:block_n=16,splits=3", &tensor_core_cases[_i], (uint64_t)_i + 150,
                         label, FLASHCL_VARIANT_TENSOR_CORE);
}
END_TEST

/* ---- the backward pass: FLASHCL_VARIANT_BACKWARD_TENSOR_CORE(_FUSED) ---- */

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

/* The default plan: the two-pass kernel (measured faster than the fused one, docs/perf.md v0.9). */
START_TEST(backward)
{
    const struct bwd_case *c = &backward_cases[_i];
    char label[32];
    snprintf(label, sizeof(label), "backward %2d", _i);
    struct bwd_result r;
    run_case(NULL, label, c, 1000 + (uint64_t)_i, &r);
    ck_assert_int_eq(r.variant, c->layout == LAYOUT_PADDED ? FLASHCL_VARIANT_BACKWARD_TILED
                                                           : FLASHCL_VARIANT_BACKWARD_TENSOR_CORE);
}
END_TEST

/* The same cases through the fused kernel (dQ added up by the dK/dV pass in key-block order): its
 * built-in shape and two small forced ones (several K/V blocks take turns on each chunk; one chunk a
 * query block, so the two dS buffers alternate across blocks). */
static const char *const backward_fused = "backward-tensor-core:off";
START_TEST(backward_other_shapes)
{
    const struct bwd_case *c = &backward_cases[_i];
    static const char *const options[] = {
        "backward-tensor-core:off", "backward-tensor-core:off;backward-tensor-core-fused:warps=2,block_m=32,block_n=32",
        "backward-tensor-core:off;backward-tensor-core-fused:warps=1,block_m=16,block_n=16"};
    for (int i = 0; i < 3; i++) {
        char label[48];
        snprintf(label, sizeof(label), "backward %2d/%d", _i, i);
        struct bwd_result r;
        run_case(context_with_options(options[i]), label, c, 1000 + (uint64_t)_i, &r);
        ck_assert_int_eq(r.variant, c->layout == LAYOUT_PADDED ? FLASHCL_VARIANT_BACKWARD_TILED
                                                               : FLASHCL_VARIANT_BACKWARD_TENSOR_CORE_FUSED);
    }
}
END_TEST

/* Same bits every run: dK, dV summed over 4 query heads, several blocks each way; dQ's partials added
 * in key-block order (fused) or in one chain (two-pass). */
START_TEST(backward_deterministic)
{
    struct test_env *e = test_env_get();
    const struct bwd_case c = {1, 300, 280, 4, 1, 64, BF16, 1, 0, LAYOUT_BNHD, 0};
    flashcl_context *ctx = _i == 0 ? e->ctx : context_with_options(backward_fused);
    struct problem p;
    problem_create(&p, &c, 1500);
    problem_forward(&p, ctx);
    problem_backward(&p, ctx, e->queue);
    ck_assert_int_eq(p.variant, _i == 0 ? FLASHCL_VARIANT_BACKWARD_TENSOR_CORE
                                        : FLASHCL_VARIANT_BACKWARD_TENSOR_CORE_FUSED);
    unsigned char *first[3];
    for (int o = 0; o < 3; o++)
        first[o] = read_back(&p, T_DQ + o);
    /* The second run on an out-of-order queue where the device has one (the library's events order
     * the steps there; the fused kernel's turns do not depend on which work-group starts first). */
    cl_command_queue_properties supported = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_QUEUE_PROPERTIES, sizeof(supported), &supported, NULL));
    cl_int err;
    cl_command_queue other = clCreateCommandQueue(e->cl, e->device,
                                                  supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    ck_assert_ptr_nonnull(other);
    for (int run = 0; run < 2; run++) {
        problem_backward(&p, ctx, run == 1 ? other : e->queue);
        for (int o = 0; o < 3; o++) {
            unsigned char *again = read_back(&p, T_DQ + o);
            ck_assert_msg(memcmp(again, first[o], p.count[T_DQ + o] * p.esize) == 0, "run %d gave other %s bits",
                          run, tensor_names[T_DQ + o]);
            free(again);
        }
    }
    struct bwd_result r;
    problem_check(&p, &r);
    printf("backward deterministic (%s): 3 runs bit-identical; max err / max|ref| dQ %.2e dK %.2e dV %.2e\n",
           flashcl_variant_name(p.variant), r.max_err[0], r.max_err[1], r.max_err[2]);
    for (int o = 0; o < 3; o++)
        free(first[o]);
    clReleaseCommandQueue(other);
    problem_free(&p);
}
END_TEST

/* The compiler's report (registers, spills, local memory) for the built-in
 * shapes at d = 64 and 128, causal or not: the plan's own options plus
 * -cl-nv-verbose (NVIDIA's), built here so the whole log prints. */
START_TEST(backward_ptxas_report)
{
    struct test_env *e = test_env_get();
    const int dims[] = {64, 128};
    for (int i = 0; i < 8; i++) {
        const bool fused = i >= 4;
        const struct bwd_case c = {1, 64, 64, 2, 2, dims[i / 2 % 2], F16, i % 2, 0, LAYOUT_BNHD, 0};
        struct problem p;
        problem_create(&p, &c, 1);
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_backward_config(fused ? context_with_options(backward_fused) : e->ctx, &p.a,
                                                     &p.g, &t));
        problem_free(&p);
        ck_assert_int_eq(t.variant, fused ? FLASHCL_VARIANT_BACKWARD_TENSOR_CORE_FUSED
                                          : FLASHCL_VARIANT_BACKWARD_TENSOR_CORE);
        char options[256];
        snprintf(options, sizeof(options), "-cl-std=CL1.2 -DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d -DWARPS=%d -DWG=%d "
                 "-DDTYPE=1 -DCAUSAL=%d -DFUSED_DQ=%d -cl-nv-verbose", c.head_dim, t.block_m, t.block_n, t.warps,
                 t.workgroup_size, c.causal, fused);
        const char *src = flashcl_source_flash_backward_mma;
        cl_int err;
        cl_program prog = clCreateProgramWithSource(e->cl, 1, &src, NULL, &err);
        ck_assert_cl(err);
        const cl_int built = clBuildProgram(prog, 1, &e->device, options, NULL, NULL);
        size_t size = 0;
        clGetProgramBuildInfo(prog, e->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
        char *log = calloc(size + 1, 1);
        ck_assert_ptr_nonnull(log);
        clGetProgramBuildInfo(prog, e->device, CL_PROGRAM_BUILD_LOG, size, log, NULL);
        printf("backward tensor-core build (%s, %zu bytes local in the table): %s\n%s\n", options, t.local_bytes,
               built == CL_SUCCESS ? "built" : "FAILED", log);
        free(log);
        clReleaseProgram(prog);
        ck_assert_cl(built);
    }
}
END_TEST

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

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
        /* The kernels with an emulation: the f16/bf16 forward and decode (not TF32, not the backward). */
        printf("tensor cores emulated (FLASHCL_TEST_EMULATE_TENSOR_CORES=1): f16/bf16 forward and decode only\n");
        TCase *tc = tcase_create("emulated tensor-core kernels against the double reference");
        tcase_set_timeout(tc, 1800);
        tcase_add_loop_test(tc, tensor_core, 0, COUNT(tensor_core_cases));
        tcase_add_loop_test(tc, tensor_core_split, 0, COUNT(tensor_core_cases));
        tcase_add_loop_test(tc, decode_tensor_core, 0, COUNT(decode_cases));
        tcase_add_test(tc, decode_tensor_core_repeatable);
        suite_add_tcase(s, tc);
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
    TCase *bw = tcase_create("backward");
    tcase_set_timeout(bw, 600);
    tcase_add_test(bw, backward_ptxas_report);
    tcase_add_loop_test(bw, backward, 0, COUNT(backward_cases));
    tcase_add_loop_test(bw, backward_other_shapes, 0, COUNT(backward_cases));
    tcase_add_loop_test(bw, backward_deterministic, 0, 2);
    suite_add_tcase(s, bw);
    return test_run_suite(s);
}
