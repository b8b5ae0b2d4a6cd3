/* The sizing rule's arithmetic (the seed chapter's figures) and the tile the
 * library picks from it on this device. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "flashcl_tools.h"

START_TEST(rule_reproduces_the_seed)
{
    ck_assert_uint_eq(flashcl_block_size_bound(196608, 4, 128), 96);   /* A100 SRAM, d = 128 */
    ck_assert_uint_eq(flashcl_block_size_bound(196608, 4, 64), 192);   /* active recall 4 */
    ck_assert_uint_eq(flashcl_block_size_bound(49152, 4, 128), 24);    /* NVIDIA's reported 48 KB */
    ck_assert_uint_eq(flashcl_block_size_bound(49152, 2, 128), 48);    /* 2-byte elements */
    ck_assert_uint_eq(flashcl_block_size_bound(196608, 0, 128), 0);
    ck_assert_uint_eq(flashcl_block_size_bound(196608, 4, 0), 0);
    ck_assert_uint_eq(flashcl_block_size_bound(100, 4, 128), 0);
}
END_TEST

static const int dims[] = {1, 16, 32, 64, 80, 96, 128, 256};

START_TEST(automatic_tile_fits_and_obeys_the_rule)
{
    struct test_env *e = test_env_get();
    cl_ulong reported = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(reported), &reported, NULL));
    struct flashcl_tile t;
    ck_assert_flashcl_ok(test_fma_tile(e->ctx, dims[_i], FLASHCL_F32, &t));
    /* The portable kernel sizes from the reported local memory, the
     * register-tiled one from what the context knows works. */
    const size_t local = kernel_is(t.kernel, "portable") ? (size_t)reported
                                                                : flashcl_context_local_mem_bytes(e->ctx);
    ck_assert_uint_ge(flashcl_context_local_mem_bytes(e->ctx), (size_t)reported);
    const size_t bound = flashcl_block_size_bound(local, 4, (size_t)dims[_i]);
    ck_assert_int_ge(t.block_m, 1);
    ck_assert_int_ge(t.block_n, 1);
    ck_assert_uint_le((size_t)t.block_m, bound > 0 ? bound : 1);
    ck_assert_uint_le((size_t)t.block_n, bound > 0 ? bound : 1);
    ck_assert_uint_le(t.local_bytes, local);
    ck_assert_int_ge(t.workgroup_size, 64);
}
END_TEST

START_TEST(forced_tile_is_reported)
{
    struct flashcl_tile t;
    ck_assert_flashcl_ok(test_fma_tile(test_context_with_blocks(5, 3), 64, FLASHCL_BF16, &t));
    ck_assert_int_eq(t.block_m, 5);
    ck_assert_int_eq(t.block_n, 3);
    ck_assert_flashcl_ok(test_fma_tile(test_context_with_blocks(0, 7), 64, FLASHCL_F32, &t));
    ck_assert_int_eq(t.block_n, 7);
    ck_assert_int_ge(t.block_m, 1);
}
END_TEST

/* The table as flashcl_kernel_describe lists it: every kernel once, each
 * name one kernel_options accepts, sane fields; bad arguments refused. */
START_TEST(kernels_are_listed)
{
    struct test_env *e = test_env_get();
    const int n = flashcl_kernel_count();
    ck_assert_int_ge(n, 12);
    for (int i = 0; i < n; i++) {
        struct flashcl_kernel_info k;
        memset(&k, 0xA5, sizeof(k));
        ck_assert_flashcl_ok(flashcl_kernel_describe(i, &k));
        ck_assert_ptr_nonnull(k.name);
        ck_assert_ptr_nonnull(k.summary);
        ck_assert_ptr_nonnull(strstr(k.source, "cl/"));
        ck_assert_int_ne(k.dtypes & (1u << FLASHCL_F32 | 1u << FLASHCL_F16 | 1u << FLASHCL_BF16 | 1u << FLASHCL_E4M3), 0);
        ck_assert_int_ge(k.head_dim_step, 1);
        ck_assert_int_le(k.head_dim_max, FLASHCL_MAX_HEAD_DIM);
        for (size_t b = 0; b < sizeof(k.reserved); b++)
            ck_assert_int_eq(k.reserved[b], 0);
        for (int j = 0; j < i; j++) {
            struct flashcl_kernel_info other;
            ck_assert_flashcl_ok(flashcl_kernel_describe(j, &other));
            ck_assert_str_ne(other.name, k.name);
        }
        char options[64];
        snprintf(options, sizeof(options), "%s:off", k.name);
        struct flashcl_context_params p = {.context = e->cl, .device = e->device, .kernel_options = options};
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
        flashcl_context_destroy(&ctx);
    }
    struct flashcl_kernel_info k;
    ck_assert_status(flashcl_kernel_describe(-1, &k), FLASHCL_INVALID_VALUE);
    ck_assert_status(flashcl_kernel_describe(n, &k), FLASHCL_INVALID_VALUE);
    ck_assert_status(flashcl_kernel_describe(0, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tile");
    TCase *tc = tcase_create("sizing rule");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, rule_reproduces_the_seed);
    tcase_add_loop_test(tc, automatic_tile_fits_and_obeys_the_rule, 0, (int)(sizeof(dims) / sizeof(dims[0])));
    tcase_add_test(tc, forced_tile_is_reported);
    tcase_add_test(tc, kernels_are_listed);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
