/* The tensor-core kernels (f16/bf16 mma.sync and TF32) on the cases that
 * qualify for them: the kernel must be the one that runs, and its output
 * meets its bound. Where the device has no tensor cores every check here
 * would be vacuous, so the suite reports itself skipped (exit 77). */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

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
};

/* Runs a case that qualifies for a tensor-core kernel: `expected` must run. */
static void run_tensor_core_case(const struct test_case *c, uint64_t seed, const char *label,
                                 enum flashcl_variant expected)
{
    struct case_result r;
    rng_seed(seed);
    test_run_case(NULL, c, &r);
    printf("%-14s %s: max|err| %.2e, rel L2 %.2e, LSE %.2e\n", flashcl_variant_name(r.variant), label,
           r.max_abs_err, r.rel_l2_err, r.max_lse_err);
    ck_assert_int_eq(r.variant, expected);
}

START_TEST(tf32)
{
    char label[32];
    snprintf(label, sizeof(label), "%s case %2d", tf32_cases[_i].precision == TF32 ? "tf32  " : "tf32x3", _i);
    run_tensor_core_case(&tf32_cases[_i], (uint64_t)_i + 200, label, FLASHCL_VARIANT_TF32);
}
END_TEST

START_TEST(tensor_core)
{
    char label[32];
    snprintf(label, sizeof(label), "tensor-core case %2d", _i);
    run_tensor_core_case(&tensor_core_cases[_i], (uint64_t)_i + 100, label, FLASHCL_VARIANT_TENSOR_CORE);
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
    if (!has)
        return 77;  /* skipped */
    Suite *s = suite_create("tensor_cores");
    TCase *tc = tcase_create("tensor-core kernels against the double reference");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, tf32, 0, COUNT(tf32_cases));
    tcase_add_loop_test(tc, tensor_core, 0, COUNT(tensor_core_cases));
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
