/* Creating contexts: device selection, the caller's own cl_context, forced
 * tiles, the log callback and destruction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

START_TEST(default_device)
{
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(NULL, &ctx));
    ck_assert_ptr_nonnull(flashcl_context_cl_context(ctx));
    ck_assert_ptr_nonnull(flashcl_context_device(ctx));
    ck_assert_uint_gt(strlen(flashcl_context_device_name(ctx)), 0);
    flashcl_context_destroy(&ctx);
    ck_assert_ptr_null(ctx);
    flashcl_context_destroy(&ctx);  /* &NULL is accepted */
    flashcl_context_destroy(NULL);
}
END_TEST

START_TEST(select_by_index_and_name)
{
    struct test_env *e = test_env_get();
    const char *name = flashcl_context_device_name(e->ctx);
    struct flashcl_context_params p = {0};
    p.device_select = name;  /* the whole name is a substring of itself */
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    ck_assert_str_eq(flashcl_context_device_name(ctx), name);
    flashcl_context_destroy(&ctx);

    p.device_select = "0:0";
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    flashcl_context_destroy(&ctx);

    p.device_select = "99:0";
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_ERROR_INVALID_ENV);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "\"99:0\""));
}
END_TEST

START_TEST(select_by_environment)
{
    const char *saved = getenv("FLASHCL_DEVICE");
    char *copy = saved ? strdup(saved) : NULL;
    flashcl_context *ctx = NULL;

    setenv("FLASHCL_DEVICE", "no-such-device-anywhere", 1);
    ck_assert_status(flashcl_context_create(NULL, &ctx), FLASHCL_ERROR_INVALID_ENV);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "no-such-device-anywhere"));

    /* params.device_select wins over the environment. */
    struct flashcl_context_params p = {0};
    p.device_select = "0:0";
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    flashcl_context_destroy(&ctx);

    setenv("FLASHCL_DEVICE", flashcl_context_device_name(test_env_get()->ctx), 1);
    ck_assert_flashcl_ok(flashcl_context_create(NULL, &ctx));
    flashcl_context_destroy(&ctx);

    if (copy)
        setenv("FLASHCL_DEVICE", copy, 1);
    else
        unsetenv("FLASHCL_DEVICE");
    free(copy);
}
END_TEST

START_TEST(callers_context)
{
    struct test_env *e = test_env_get();
    cl_int err;
    cl_context mine = clCreateContext(NULL, 1, &e->device, NULL, NULL, &err);
    ck_assert_ptr_nonnull(mine);
    struct flashcl_context_params p = {0};
    p.context = mine;
    p.device = e->device;
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    ck_assert_ptr_eq(flashcl_context_cl_context(ctx), mine);
    ck_assert_ptr_eq(flashcl_context_device(ctx), e->device);
    flashcl_context_destroy(&ctx);
    /* Still the caller's: one reference left, and usable. */
    cl_uint refs = 0;
    ck_assert_cl(clGetContextInfo(mine, CL_CONTEXT_REFERENCE_COUNT, sizeof(refs), &refs, NULL));
    ck_assert_uint_eq(refs, 1);
    ck_assert_cl(clReleaseContext(mine));

    p.context = NULL;  /* device without context */
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_null(ctx);
}
END_TEST

START_TEST(bad_params)
{
    flashcl_context *ctx = NULL;
    struct flashcl_context_params p = {0};
    p.block_m = 300;
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_ERROR_INVALID_CONFIG);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "block_m = 300"));
    p.block_m = 0;
    p.block_n = -2;
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_ERROR_INVALID_CONFIG);
    ck_assert_status(flashcl_context_create(NULL, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    p.block_n = 0;
    p.log_level = (enum flashcl_log_level)9;
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_null(ctx);
    p.log_level = 0;
    p.fma_variant = FLASHCL_VARIANT_TENSOR_CORE;  /* tensor-core variants cannot be forced */
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_ERROR_INVALID_CONFIG);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "params.fma_variant = 2"));
    ck_assert_ptr_null(ctx);
}
END_TEST

struct log_record {
    int infos, debugs;
    char first[256];
};

static void record_log(void *user, enum flashcl_log_level level, const char *message)
{
    struct log_record *r = user;
    if (level == FLASHCL_LOG_INFO && r->infos++ == 0)
        snprintf(r->first, sizeof(r->first), "%s", message);
    if (level == FLASHCL_LOG_DEBUG)
        r->debugs++;
}

START_TEST(log_callback)
{
    struct log_record rec = {0};
    struct flashcl_context_params p = {0};
    p.log = record_log;
    p.log_user = &rec;
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    ck_assert_int_ge(rec.infos, 1);  /* the device chosen (and, on NVIDIA, the tensor-core probe) */
    ck_assert_ptr_nonnull(strstr(rec.first, flashcl_context_device_name(ctx)));
    ck_assert_int_eq(rec.debugs, 0);  /* INFO is the default level */
    flashcl_context_destroy(&ctx);
}
END_TEST

START_TEST(forced_tile_that_cannot_fit)
{
    /* 256x256 with d = 256 needs about 1 MB of local memory. */
    flashcl_context *ctx = test_context_with_blocks(256, 256);
    cl_ulong local = 0;
    ck_assert_cl(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_LOCAL_MEM_SIZE, sizeof(local),
                                 &local, NULL));
    struct flashcl_tile tile;
    const flashcl_status st = flashcl_forward_tile(ctx, 256, FLASHCL_F32, &tile);
    if (local < 1000000) {
        ck_assert_int_eq(st, FLASHCL_ERROR_INVALID_CONFIG);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "256x256"));
    } else {
        ck_assert_int_eq(st, FLASHCL_SUCCESS);
        ck_assert_int_eq(tile.block_m, 256);
        ck_assert_uint_le(tile.local_bytes, local);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tcase_create("context");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, default_device);
    tcase_add_test(tc, select_by_index_and_name);
    tcase_add_test(tc, select_by_environment);
    tcase_add_test(tc, callers_context);
    tcase_add_test(tc, bad_params);
    tcase_add_test(tc, log_callback);
    tcase_add_test(tc, forced_tile_that_cannot_fit);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
