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
    p.kernel_options = "portable:block_m=300";
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_ERROR_INVALID_CONFIG);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "block_m"));
    ck_assert_ptr_null(ctx);
    p.kernel_options = "no-such-kernel:off";
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_ERROR_INVALID_CONFIG);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "no-such-kernel"));
    p.kernel_options = NULL;
    ck_assert_status(flashcl_context_create(NULL, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    p.log_level = (enum flashcl_log_level)9;
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_null(ctx);
    p.log_level = 0;
    p.reserved[63] = 1;
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "params.reserved[63]"));
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

/* A forced 256x256 tile at d = 256 needs 1,067,008 bytes of local memory
 * (the portable kernel's footprint): refused with 1,000,000 usable, run with
 * 1,100,000. The usable local memory is set, so both branches run on every
 * device (nothing is launched). */
START_TEST(forced_tile_that_cannot_fit)
{
    struct test_env *e = test_env_get();
    const size_t locals[2] = {1000000, 1100000};
    for (int i = 0; i < 2; i++) {
        struct flashcl_context_params p = {0};
        p.context = e->cl;
        p.device = e->device;
        p.kernel_options = "register-tiled:off;portable:block_m=256,block_n=256";
        p.local_mem_bytes = locals[i];
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
        struct flashcl_tile tile;
        const flashcl_status st = test_fma_tile(ctx, 256, FLASHCL_F32, &tile);
        if (i == 0) {
            ck_assert_int_eq(st, FLASHCL_ERROR_INVALID_CONFIG);
            ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "256x256"));
            ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "1067008"));
        } else {
            ck_assert_int_eq(st, FLASHCL_SUCCESS);
            ck_assert_str_eq(tile.kernel, "portable");
            ck_assert_int_eq(tile.source, FLASHCL_TILE_FORCED);
            ck_assert_int_eq(tile.block_m, 256);
            ck_assert_uint_eq(tile.local_bytes, 1067008);
        }
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

/* kernel_options: what it accepts, what it refuses (naming the clause), and
 * that the deprecated fields still mean what they did. */
START_TEST(kernel_options)
{
    struct test_env *e = test_env_get();
    /* Empty clauses (";;", a ';' leading or trailing) are nothing, so option strings join; inside a clause
     * every setting is written out: an empty one (",,", a ',' leading or trailing) or none is refused. */
    const char *good[] = {"", ";", ";;", "portable:block_m=8", "tensor-core:off;tf32:warps=8,m_tiles=2,block_n=128;",
                          ";register-tiled:block_n=32,block_m=64;;portable:off", "decode:splits=3", "decode:on"};
    const struct { const char *options, *message; } bad[] = {
        {"portable", "no ':'"},
        {"mystery:off", "\"mystery\" is not a kernel"},
        {"portable:warps=4", "portable has no axis \"warps\""},
        {"register-tiled:block_m=20", "register-tiled:block_m=20; must be 16..128 in steps of 16"},
        {"tensor-core:block_n=16x", "tensor-core:block_n=16x"},
        {"portable:block_m=0", "portable:block_m=0"},
        {"tf32:fast", "neither axis=value nor off"},
        {"portable:block_m=+8", "portable:block_m=+8"},
        {"portable:block_m= 8", "portable:block_m= 8"},
        {"portable:splits=0", "portable:splits=0; must be 1..64"},
        {"backward-tiled:splits=2", "backward-tiled does not take split-KV"},
        {"decode:splits=3,", "decode: an empty setting (a ',' leading, trailing or doubled)"},
        {"decode:", "decode: no setting after ':'"},
        {"decode:;portable:off", "decode: no setting after ':'"},
        {"portable:block_m=16,,block_n=16", "portable: an empty setting"},
        {"portable:,block_m=16", "portable: an empty setting"},
        {"portable:off,", "portable: an empty setting"},
        {"register-tiled:off;portable:block_m=16,;tf32:off", "portable: an empty setting"},
        {"portable:,", "portable: an empty setting"},
    };
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        flashcl_context *ctx = NULL;
        p.kernel_options = good[i];
        ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
        flashcl_context_destroy(&ctx);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        flashcl_context *ctx = NULL;
        p.kernel_options = bad[i].options;
        ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_ERROR_INVALID_CONFIG);
        ck_assert_msg(strstr(flashcl_last_error(), bad[i].message) != NULL, "\"%s\": %s", bad[i].options,
                      flashcl_last_error());
        ck_assert_ptr_null(ctx);
    }

    /* Forced through the option. */
    struct flashcl_tile t;
    p.kernel_options = "register-tiled:off;portable:block_m=8,block_n=24";
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    ck_assert_flashcl_ok(test_fma_tile(ctx, 64, FLASHCL_F32, &t));
    ck_assert_str_eq(t.kernel, "portable");
    ck_assert_int_eq(t.source, FLASHCL_TILE_FORCED);
    ck_assert_int_eq(t.block_m, 8);
    ck_assert_int_eq(t.block_n, 24);
    flashcl_context_destroy(&ctx);
    p.kernel_options = "register-tiled:block_m=32,block_n=48";
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    ck_assert_flashcl_ok(test_fma_tile(ctx, 64, FLASHCL_F32, &t));
    ck_assert_str_eq(t.kernel, "register-tiled");
    ck_assert_int_eq(t.source, FLASHCL_TILE_FORCED);
    ck_assert_int_eq(t.block_m, 32);
    ck_assert_int_eq(t.block_n, 48);
    flashcl_context_destroy(&ctx);
}
END_TEST

/* The environment twin is read once, at creation: a malformed value is a
 * WARN and ignored; changing it later changes nothing for that context. */
START_TEST(kernel_options_environment)
{
    struct test_env *e = test_env_get();
    struct test_warn_log rec = {0};
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.log = test_record_warnings;
    p.log_user = &rec;
    flashcl_context *ctx = NULL;
    setenv("FLASHCL_KERNELS", "portable:block_m=99x", 1);
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    ck_assert_int_eq(rec.warnings, 1);
    ck_assert_ptr_nonnull(strstr(rec.last, "FLASHCL_KERNELS"));
    flashcl_context_destroy(&ctx);

    /* Read whole, however long (600 characters of empty clauses first). */
    char long_value[700];
    memset(long_value, ';', 600);
    snprintf(long_value + 600, sizeof(long_value) - 600, "register-tiled:off;portable:block_m=4,block_n=4");
    setenv("FLASHCL_KERNELS", long_value, 1);
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    unsetenv("FLASHCL_KERNELS");
    struct flashcl_tile t;
    ck_assert_flashcl_ok(test_fma_tile(ctx, 32, FLASHCL_F32, &t));  /* after the unset */
    ck_assert_str_eq(t.kernel, "portable");
    ck_assert_int_eq(t.block_m, 4);
    ck_assert_int_eq(t.source, FLASHCL_TILE_FORCED);
    flashcl_context_destroy(&ctx);
    ck_assert_int_eq(rec.warnings, 1);
}
END_TEST

/* Fields of a newer version in the reserved room are refused, not ignored. */
START_TEST(reserved_must_be_zero)
{
    struct flashcl_context_params p = {0};
    p.reserved[7] = 1;
    flashcl_context *ctx = NULL;
    ck_assert_status(flashcl_context_create(&p, &ctx), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "params.reserved"));
    ck_assert_str_eq(flashcl_version(), FLASHCL_VERSION_STRING);
    ck_assert_int_eq(flashcl_api_version(), FLASHCL_API_VERSION);
    char expect[32];
    snprintf(expect, sizeof(expect), "%d.%d.%d", FLASHCL_VERSION_NUMBER / 10000, FLASHCL_VERSION_NUMBER / 100 % 100,
             FLASHCL_VERSION_NUMBER % 100);
    ck_assert_str_eq(flashcl_version(), expect);
    ck_assert_str_eq(flashcl_dtype_name(FLASHCL_BF16), "bf16");
    ck_assert_ptr_null(flashcl_dtype_name((flashcl_dtype)9));
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
    tcase_add_test(tc, kernel_options);
    tcase_add_test(tc, kernel_options_environment);
    tcase_add_test(tc, reserved_must_be_zero);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
