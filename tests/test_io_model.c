/* The IO model: the seed chapter's block-read count and the byte formulas,
 * checked against hand arithmetic. */
#include "common.h"
#include "flashcl_tools.h"

START_TEST(seed_block_reads)
{
    /* N = 4096, B = 128: 32 Q blocks and 32 K/V blocks. */
    struct flashcl_io_estimate io;
    ck_assert_flashcl_ok(flashcl_io_model(1, 1, 1, 4096, 4096, 64, 4, 128, 128, &io));
    ck_assert_uint_eq(io.q_block_reads_kv_outer, 1024);  /* 32 x 32 */
    ck_assert_uint_eq(io.q_block_reads_q_outer, 32);     /* each Q block once */
    ck_assert_uint_eq(io.kv_block_reads_kv_outer, 32);
    ck_assert_uint_eq(io.kv_block_reads_q_outer, 1024);
    /* Ragged ends round up: 4097 rows in blocks of 128 are 33 blocks. */
    ck_assert_flashcl_ok(flashcl_io_model(1, 1, 1, 4097, 100, 64, 4, 128, 64, &io));
    ck_assert_uint_eq(io.q_block_reads_q_outer, 33);
    ck_assert_uint_eq(io.kv_block_reads_kv_outer, 2);
}
END_TEST

START_TEST(bytes_by_hand)
{
    struct flashcl_io_estimate io;
    /* One head, N = 1024, d = 64, f16, blocks 64: Tr = Tc = 16. */
    ck_assert_flashcl_ok(flashcl_io_model(1, 1, 1, 1024, 1024, 64, 2, 64, 64, &io));
    const double n = 1024, d = 64;
    ck_assert_double_eq(io.flops, 4 * n * n * d);
    ck_assert_double_eq(io.standard_bytes, 2 * d * 4 * n + 16 * n * n);
    ck_assert_double_eq(io.flash_bytes, 2 * d * (2 * n + 2 * n * 16) + 4 * n);
    ck_assert_double_eq(io.flash_kv_outer_bytes, 2 * d * (2 * n + 3 * n * 16) + 16 * n * 16);
    /* At long sequences both grow as N^2, standard by 16 bytes per score and
     * flash by 2·e·d/block_m (K and V re-read per Q block): 8x here. */
    ck_assert_flashcl_ok(flashcl_io_model(1, 32, 32, 16384, 16384, 64, 2, 128, 64, &io));
    ck_assert_double_eq_tol(io.standard_bytes / io.flash_bytes, 16.0 * 128 / (2 * 2 * 64), 0.05);
    /* Heads and batch scale everything linearly. */
    struct flashcl_io_estimate two;
    ck_assert_flashcl_ok(flashcl_io_model(2, 32, 32, 16384, 16384, 64, 2, 128, 64, &two));
    ck_assert_double_eq(two.flash_bytes, 2 * io.flash_bytes);
}
END_TEST

START_TEST(bad_arguments)
{
    struct flashcl_io_estimate io;
    ck_assert_status(flashcl_io_model(1, 1, 1, 16, 16, 64, 4, 16, 16, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_status(flashcl_io_model(1, 3, 2, 16, 16, 64, 4, 16, 16, &io), FLASHCL_ERROR_INVALID_SHAPE);
    ck_assert_status(flashcl_io_model(1, 1, 1, 0, 16, 64, 4, 16, 16, &io), FLASHCL_ERROR_INVALID_SHAPE);
    ck_assert_status(flashcl_io_model(1, 1, 1, 16, 16, 64, 4, 0, 16, &io), FLASHCL_ERROR_INVALID_SHAPE);
    ck_assert_status(flashcl_io_model(1, 1, 1, 16, 16, 64, 3, 16, 16, &io), FLASHCL_INVALID_VALUE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("io_model");
    TCase *tc = tcase_create("io model");
    tcase_add_test(tc, seed_block_reads);
    tcase_add_test(tc, bytes_by_hand);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
