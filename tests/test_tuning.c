/* The tuning file: a round trip through flashcl_tuning_format, entries of
 * other devices or versions ignored, malformed files rejected whole without
 * harm, the tuned tile really used (and correct), the decode kernel's entries
 * (rows, split count) planned as they say, and the candidates the tuner may
 * try staying under the sizing rule's bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "flashcl_tools.h"
#include "internal.h"

static char path[256];

static void write_file(const char *text)
{
    snprintf(path, sizeof(path), "/tmp/flashcl-tuning-test-%ld.txt", (long)getpid());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A tuning file holding one entry, formatted for the shared context's device. */
static void write_one_entry(const struct flashcl_tuned_config *c)
{
    char line[512], text[1024];
    ck_assert_flashcl_ok(flashcl_tuning_format(test_env_get()->ctx, c, 0, line, sizeof(line)));
    snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n", line);
    write_file(text);
}

/* A context reading the tuning file `tuning` ("": none) with these kernel_options (NULL: none). */
static flashcl_context *make_context(const char *tuning, size_t local_mem, const char *options,
                                     struct test_warn_log *w)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.tuning_file = tuning;
    p.local_mem_bytes = local_mem;
    p.kernel_options = options;
    p.log = test_record_warnings;
    p.log_user = w;
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    return ctx;
}

static flashcl_context *context_with_file(struct test_warn_log *w, size_t local_mem)
{
    return make_context(path, local_mem, NULL, w);
}

/* A line for the shared context's device, from the library's formatter. */
static void line_for(const struct flashcl_tuned_config *c, char *line, size_t size)
{
    ck_assert_flashcl_ok(flashcl_tuning_format(test_env_get()->ctx, c, 0, line, size));
}

static struct flashcl_attention shape(int d, flashcl_dtype dtype, int causal, cl_mem mem)
{
    struct flashcl_attention a = {0};
    a.batch = 1;
    a.seq_q = a.seq_kv = 64;
    a.heads_q = a.heads_kv = 1;
    a.head_dim = d;
    a.q = a.k = a.v = flashcl_tensor_bnhd(mem, dtype, 64, 1, (size_t)d);
    a.o = a.q;
    a.o.offset = 64 * (size_t)d * flashcl_dtype_size(dtype);  /* second half of the buffer */
    a.mask = causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    return a;
}

/* Asks which tile a call of this shape would use under ctx. */
static struct flashcl_tile config_of(flashcl_context *ctx, int d, flashcl_dtype dtype, int causal)
{
    struct test_env *e = test_env_get();
    cl_int err;
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * (size_t)d * 4, NULL, &err);
    ck_assert_ptr_nonnull(mem);
    struct flashcl_attention a = shape(d, dtype, causal, mem);
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    clReleaseMemObject(mem);
    return t;
}

START_TEST(round_trip_and_used)
{
    /* d = 30 runs on the portable kernel, d = 32 on the register-tiled one. */
    struct flashcl_tuned_config portable = {"portable", FLASHCL_F32, 30, 1, 5, 7, 0, 0, 1.5};
    struct flashcl_tuned_config tiled = {"register-tiled", FLASHCL_F32, 32, 1, 32, 48, 0, 0, 1.25};
    struct flashcl_tuned_config mma = {"tensor-core", FLASHCL_F16, 64, 0, 0, 32, 8, 1, 0.25};
    char text[2048], line[512];
    snprintf(text, sizeof(text), "# written by a test\nflashcl-tuning 2\n");
    const struct flashcl_tuned_config *entries[] = {&portable, &tiled, &mma};
    for (int i = 0; i < 3; i++) {
        line_for(entries[i], line, sizeof(line));
        strcat(strcat(text, line), "\n");
    }
    write_file(text);

    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, 0);
    ck_assert_int_eq(w.warnings, 0);
    struct flashcl_tile t = config_of(ctx, 30, FLASHCL_F32, 1);
    ck_assert_str_eq(t.kernel, "portable");
    ck_assert_int_eq(t.source, FLASHCL_TILE_TUNED);
    ck_assert_int_eq(t.block_m, 5);
    ck_assert_int_eq(t.block_n, 7);
    t = config_of(ctx, 32, FLASHCL_F32, 1);
    ck_assert_str_eq(t.kernel, "register-tiled");
    ck_assert_int_eq(t.source, FLASHCL_TILE_TUNED);
    ck_assert_int_eq(t.block_m, 32);
    ck_assert_int_eq(t.block_n, 48);
    /* Other keys (causal 0 here) keep the rule. */
    ck_assert_int_eq(config_of(ctx, 30, FLASHCL_F32, 0).source, FLASHCL_TILE_RULE);
    ck_assert_int_eq(config_of(ctx, 32, FLASHCL_F32, 0).source, FLASHCL_TILE_RULE);

    /* The tuned tiles compute the right thing. */
    const struct test_case c = {1, 70, 90, 2, 1, 30, FLASHCL_F32, 1, 0, LAYOUT_BNHD, 1};
    const struct test_case c2 = {1, 70, 90, 2, 1, 32, FLASHCL_F32, 1, 0, LAYOUT_BNHD, 1};
    struct case_result r;
    rng_seed(31);
    test_run_case(ctx, &c, &r);
    test_run_case(ctx, &c2, &r);

    t = config_of(ctx, 64, FLASHCL_F16, 0);
    if (flashcl_context_has_wgmma(ctx, NULL)) {
        /* sm_90: the wgmma kernel, ahead of mma.sync in the table, runs d = 64 on its own built-in shape;
         * the entry is mma.sync's (docs/tuning.md) */
        ck_assert_str_eq(t.kernel, "tensor-core-wgmma");
        ck_assert_int_eq(t.source, FLASHCL_TILE_DEFAULT);
    } else if (flashcl_context_has_tensor_cores(ctx, NULL)) {
        ck_assert_int_eq(t.source, FLASHCL_TILE_TUNED);
        ck_assert_int_eq(t.warps, 8);
        ck_assert_int_eq(t.m_tiles, 1);
        ck_assert_int_eq(t.block_n, 32);
    } else {
        ck_assert_str_eq(t.kernel, "register-tiled");
        ck_assert_int_eq(t.source, FLASHCL_TILE_RULE);
    }
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

struct info_log {
    int fallback_lines;
};

static void record_info(void *user, enum flashcl_log_level level, const char *message)
{
    if (level == FLASHCL_LOG_INFO && strstr(message, "another driver or flashcl version"))
        ((struct info_log *)user)->fallback_lines++;
}

/* The entries below are for d = 30, which runs on the portable kernel, so
 * using them shows as a tuned tile. Another device's line is ignored; a line
 * of this device measured with another driver or flashcl version serves as
 * a fallback (with an INFO line), and loses to a line of this identity. */
START_TEST(other_devices_ignored_other_versions_fall_back)
{
    struct flashcl_tuned_config portable = {"portable", FLASHCL_F32, 30, 0, 5, 7, 0, 0, 1.0};
    struct flashcl_tuned_config exact = portable;
    exact.block_m = 3;
    char line[512], exact_line[512], text[2048];
    line_for(&portable, line, sizeof(line));
    line_for(&exact, exact_line, sizeof(exact_line));
    const char *fields[] = {"device=", "driver=", "flashcl="};
    struct test_env *e = test_env_get();
    for (int i = 0; i < 3; i++) {
        for (int with_exact = 0; with_exact < 2; with_exact++) {
            /* Change the value of one identity field. */
            char changed[512];
            snprintf(changed, sizeof(changed), "%s", line);
            char *value = strstr(changed, fields[i]) + strlen(fields[i]);
            value[0] = value[0] == 'X' ? 'Y' : 'X';
            snprintf(text, sizeof(text), "flashcl-tuning 2\n%s%s%s\n", with_exact ? exact_line : "",
                     with_exact ? "\n" : "", changed);
            write_file(text);
            struct info_log info = {0};
            struct flashcl_context_params p = {0};
            p.context = e->cl;
            p.device = e->device;
            p.tuning_file = path;
            p.log = record_info;
            p.log_user = &info;
            flashcl_context *ctx = NULL;
            ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
            const struct flashcl_tile t = config_of(ctx, 30, FLASHCL_F32, 0);
            if (i == 0) {
                ck_assert_int_eq(info.fallback_lines, 0);
                ck_assert_int_eq(t.source, with_exact ? FLASHCL_TILE_TUNED : FLASHCL_TILE_RULE);
            } else {
                ck_assert_int_eq(info.fallback_lines, 1);
                ck_assert_int_eq(t.source, FLASHCL_TILE_TUNED);
                ck_assert_int_eq(t.block_m, with_exact ? 3 : 5);
            }
            flashcl_context_destroy(&ctx);
        }
    }
    unlink(path);
}
END_TEST

/* A probed local-memory size counts only from this very driver and version:
 * another driver may allow less. Lines of other versions that this version
 * cannot read (a kernel it does not know) are skipped, not fatal. */
START_TEST(fallback_lines_never_raise_local_memory)
{
    char line[512], text[2048];
    ck_assert_flashcl_ok(flashcl_tuning_format(test_env_get()->ctx, NULL, 1 << 29, line, sizeof(line)));
    char *driver = strstr(line, "driver=") + strlen("driver=");
    driver[0] = driver[0] == 'X' ? 'Y' : 'X';
    char unknown[600];
    snprintf(unknown, sizeof(unknown), "%s", line);
    char *kind = strstr(unknown, "kind=");
    snprintf(kind, sizeof(unknown) - (size_t)(kind - unknown), "kind=forward|kernel=from-the-future|dtype=f8|d=64");
    snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n%s\n", line, unknown);
    write_file(text);
    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, 0);
    ck_assert_int_eq(w.warnings, 0);
    ck_assert_uint_lt(flashcl_context_local_mem_bytes(ctx), (size_t)1 << 29);
    flashcl_context_destroy(&ctx);

    /* This driver's own line, but past anything the probe can find: a WARN, not used. */
    ck_assert_flashcl_ok(flashcl_tuning_format(test_env_get()->ctx, NULL, 1 << 29, line, sizeof(line)));
    snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n", line);
    write_file(text);
    ctx = context_with_file(&w, 0);
    ck_assert_int_eq(w.warnings, 1);
    ck_assert_ptr_nonnull(strstr(w.last, "past what flashcl-probe can find"));
    ck_assert_uint_lt(flashcl_context_local_mem_bytes(ctx), (size_t)1 << 29);
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

/* Not a regular file (a device of endless NUL bytes, a FIFO no one writes):
 * refused at once with a WARN, never read or waited on. */
START_TEST(special_files_refused)
{
    char fifo[256];
    snprintf(fifo, sizeof(fifo), "/tmp/flashcl-tuning-fifo-%ld", (long)getpid());
    unlink(fifo);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *paths[] = {"/dev/zero", fifo};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s", paths[i]);
        struct test_warn_log w = {0};
        flashcl_context *ctx = context_with_file(&w, 0);
        ck_assert_int_eq(w.warnings, 1);
        ck_assert_ptr_nonnull(strstr(w.last, "not a regular file"));
        flashcl_context_destroy(&ctx);
    }
    unlink(fifo);
    /* A regular file of NUL bytes: the first line says binary data. */
    write_file("");
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 5000; i++)
        fputc(0, f);
    fclose(f);
    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, 0);
    ck_assert_int_eq(w.warnings, 1);
    ck_assert_ptr_nonnull(strstr(w.last, "NUL"));
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

/* Files of version 1 (variant=, causal=0/1) still read. */
START_TEST(version_1_files_read)
{
    struct flashcl_tuned_config portable = {"portable", FLASHCL_F32, 30, 1, 5, 7, 0, 0, 1.0};
    char line[512], text[1024];
    line_for(&portable, line, sizeof(line));
    char *kind = strstr(line, "kind=");
    ck_assert_ptr_nonnull(kind);
    snprintf(kind, sizeof(line) - (size_t)(kind - line),
             "kind=forward|variant=portable|dtype=f32|d=30|causal=1|block_m=5|block_n=7|ms=1.0");
    snprintf(text, sizeof(text), "flashcl-tuning 1\n%s\n", line);
    write_file(text);
    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, 0);
    ck_assert_int_eq(w.warnings, 0);
    const struct flashcl_tile t = config_of(ctx, 30, FLASHCL_F32, 1);
    ck_assert_int_eq(t.source, FLASHCL_TILE_TUNED);
    ck_assert_int_eq(t.block_m, 5);
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

START_TEST(malformed_files_ignored)
{
    struct flashcl_tuned_config portable = {"portable", FLASHCL_F32, 30, 0, 5, 7, 0, 0, 1.0};
    char good[512];
    line_for(&portable, good, sizeof(good));
    char long_line[2000];
    memset(long_line, 'a', sizeof(long_line) - 1);
    long_line[sizeof(long_line) - 1] = '\0';
    char bad[8][3200];
    snprintf(bad[0], sizeof(bad[0]), "%s\n", good);                                   /* no header */
    snprintf(bad[1], sizeof(bad[1]), "flashcl-tuning 3\n%s\n", good);                 /* unknown version */
    snprintf(bad[2], sizeof(bad[2]), "flashcl-tuning 2\n%s\n%.40s\n", good, good);    /* truncated line */
    snprintf(bad[3], sizeof(bad[3]), "flashcl-tuning 2\n%s|colour=blue\n", good);     /* unknown field */
    snprintf(bad[4], sizeof(bad[4]), "flashcl-tuning 2\n%s\n", good);
    char *bm = strstr(bad[4], "block_m=5");
    memcpy(bm, "block_m=0", 9);                                                       /* out of range */
    snprintf(bad[5], sizeof(bad[5]), "flashcl-tuning 2\n%s\n%s\n", good, long_line);  /* line too long */
    rng_seed(99);
    for (int i = 0; i < 3000; i++)                                                    /* random bytes */
        bad[6][i] = (char)(1 + (int)rng_uniform(0, 254));
    bad[6][2999] = '\0';
    snprintf(bad[7], sizeof(bad[7]), "flashcl-tuning 2\n%s\nkind=forward\n", good);   /* missing identity */
    for (int i = 0; i < 8; i++) {
        write_file(bad[i]);
        struct test_warn_log w = {0};
        flashcl_context *ctx = context_with_file(&w, 0);
        ck_assert_msg(w.warnings == 1, "file %d: %d warnings", i, w.warnings);
        ck_assert_ptr_nonnull(strstr(w.last, "ignoring the file"));
        /* Even the good line in it is not used. */
        ck_assert_int_eq(config_of(ctx, 30, FLASHCL_F32, 0).source, FLASHCL_TILE_RULE);
        flashcl_context_destroy(&ctx);
    }
    unlink(path);
}
END_TEST

/* A NUL byte anywhere makes the file binary data, ignored whole: in the
 * header, in a line, and in the last line with no newline after it (which
 * used to pass, the line read up to the NUL, so "good\0junk" was "good"). */
START_TEST(nul_byte_anywhere)
{
    struct flashcl_tuned_config portable = {"portable", FLASHCL_F32, 30, 0, 5, 7, 0, 0, 1.0};
    char good[512];
    line_for(&portable, good, sizeof(good));
    /* Each file is "flashcl-tuning 2\n<good>\n" with a NUL put in at `at` (and its last newline dropped, a
     * tail appended). */
    char text[1024];
    const size_t n = (size_t)snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n", good);
    const size_t header_len = strlen("flashcl-tuning 2\n");
    const struct { const char *what; size_t at; bool drop_newline; const char *tail; } files[] = {
        {"in the header", 3, false, ""},
        {"inside the entry's line", header_len + 5, false, ""},
        {"before the entry's newline", n - 1, false, ""},
        {"in a last line without a newline, junk after", n - 1, true, "junk"},
        {"ending a last line without a newline", n - 1, true, ""},
        {"alone on the last line", n, false, ""},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char bytes[1100];
        memcpy(bytes, text, files[i].at);
        bytes[files[i].at] = '\0';
        const size_t rest = n - files[i].at - (files[i].drop_newline ? 1 : 0);
        memcpy(bytes + files[i].at + 1, text + files[i].at, rest);
        size_t len = files[i].at + 1 + rest;
        memcpy(bytes + len, files[i].tail, strlen(files[i].tail));
        len += strlen(files[i].tail);
        write_file("");
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
        fclose(f);
        struct test_warn_log w = {0};
        flashcl_context *ctx = context_with_file(&w, 0);
        ck_assert_msg(w.warnings == 1, "NUL %s: %d warnings", files[i].what, w.warnings);
        ck_assert_msg(strstr(w.last, "NUL") != NULL, "NUL %s: %s", files[i].what, w.last);
        ck_assert_msg(config_of(ctx, 30, FLASHCL_F32, 0).source == FLASHCL_TILE_RULE, "NUL %s: the entry was used",
                      files[i].what);
        flashcl_context_destroy(&ctx);
    }
    /* The same file without the NUL is read and its entry used. */
    write_file(text);
    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, 0);
    ck_assert_int_eq(w.warnings, 0);
    ck_assert_int_eq(config_of(ctx, 30, FLASHCL_F32, 0).source, FLASHCL_TILE_TUNED);
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

START_TEST(tuned_tile_must_fit)
{
    /* 128x128 at d = 254 (portable kernel) needs about 470 KB; allowed only where that much works. */
    struct flashcl_tuned_config big = {"portable", FLASHCL_F32, 254, 0, 128, 128, 0, 0, 1.0};
    write_one_entry(&big);
    struct test_warn_log w = {0};
    flashcl_context *small = context_with_file(&w, 100000);
    ck_assert_int_eq(config_of(small, 254, FLASHCL_F32, 0).source, FLASHCL_TILE_RULE);
    flashcl_context_destroy(&small);
    flashcl_context *roomy = context_with_file(&w, 600000);
    struct flashcl_tile t = config_of(roomy, 254, FLASHCL_F32, 0);
    ck_assert_int_eq(t.source, FLASHCL_TILE_TUNED);
    ck_assert_int_eq(t.block_m, 128);
    flashcl_context_destroy(&roomy);
    unlink(path);
}
END_TEST

/* A context told to assume tensor cores (nothing is launched here: only the
 * shape choice is checked), with this much usable local memory, a forced
 * mma shape (0s: none) and the test's tuning file or none. */
static flashcl_context *assumed_tensor_cores(size_t local_mem, int warps, int m_tiles, int block_n, int with_file)
{
    char options[160] = "";
    if (warps || m_tiles || block_n) {  /* the forward mma.sync kernels' shape, which the wgmma one gives way to */
        char shape[64] = "";
        const int values[3] = {warps, m_tiles, block_n};
        const char *const names[3] = {"warps", "m_tiles", "block_n"};
        for (int i = 0; i < 3; i++)
            if (values[i])
                snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%s=%d", shape[0] ? "," : "",
                         names[i], values[i]);
        snprintf(options, sizeof(options), "tensor-core:%s;tf32:%s", shape, shape);
    }
    const int compute_capability = local_mem >= 232448 ? 90 : 80;  /* an H200's local memory, else an A100-class one */
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.local_mem_bytes = local_mem;
    p.kernel_options = options;
    p.tuning_file = with_file ? path : "";
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true,
                                         .assume_compute_capability = compute_capability};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
    ck_assert(flashcl_context_has_tensor_cores(ctx, NULL));
    return ctx;
}

static void check_mma_shape(struct flashcl_tile t, enum flashcl_tile_source source, int warps, int m_tiles,
                            int block_n, size_t local_mem)
{
    ck_assert_int_eq(t.source, source);
    ck_assert_int_eq(t.warps, warps);
    ck_assert_int_eq(t.m_tiles, m_tiles);
    ck_assert_int_eq(t.block_n, block_n);
    ck_assert_int_eq(t.block_m, 16 * warps * m_tiles);
    ck_assert_uint_le(t.local_bytes, local_mem);
}

/* A context on this device as an H200 would plan it: tensor cores and wgmma assumed (compute capability 9.0),
 * 227 KB of local memory, no tuning file, these kernel options. */
static flashcl_context *assumed_h200(const char *options)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.local_mem_bytes = 232448;
    p.kernel_options = options;
    p.tuning_file = "";
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .assume_wgmma = true,
                                         .assume_compute_capability = 90};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
    return ctx;
}

/* Tensor-core shapes, built-in, tuned or forced, are used only where their
 * local memory fits; where none fits, the call runs on the FMA units. */
START_TEST(tensor_core_shapes_must_fit)
{
    const size_t h200 = 232448, a100 = 166912, small = 65536, tiny = 16384;
    /* f16 d = 128: 4x2x64 (96 KB) with or without a mask, then 4x1x32, 4x1x16. */
    flashcl_context *ctx = assumed_tensor_cores(h200, 0, 0, 0, 0);
    struct flashcl_tile t = config_of(ctx, 128, FLASHCL_F16, 0);
    ck_assert_str_eq(t.kernel, "tensor-core");
    check_mma_shape(t, FLASHCL_TILE_DEFAULT, 4, 2, 64, h200);
    check_mma_shape(config_of(ctx, 128, FLASHCL_F16, 1), FLASHCL_TILE_DEFAULT, 4, 2, 64, h200);
    /* d <= 64 on sm_90: 4x2x64 (48 KB; Q's fragments in registers without a mask: mma_build_choices). */
    check_mma_shape(config_of(ctx, 64, FLASHCL_BF16, 0), FLASHCL_TILE_DEFAULT, 4, 2, 64, h200);
    check_mma_shape(config_of(ctx, 64, FLASHCL_F16, 1), FLASHCL_TILE_DEFAULT, 4, 2, 64, h200);
    /* Past d = 128: 8x1x128 up to d = 160 on sm_90, then 8x1x64 where it fits (f16 d = 256: 192 KB),
     * 8x1x32 (128 KB), 4x1x32, 4x1x16, 2x1x16. */
    check_mma_shape(config_of(ctx, 256, FLASHCL_F16, 1), FLASHCL_TILE_DEFAULT, 8, 1, 64, h200);
    check_mma_shape(config_of(ctx, 192, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 8, 1, 64, h200);
    check_mma_shape(config_of(ctx, 160, FLASHCL_BF16, 0), FLASHCL_TILE_DEFAULT, 8, 1, 128, h200);
    flashcl_context_destroy(&ctx);
    ctx = assumed_tensor_cores(a100, 0, 0, 0, 0);
    check_mma_shape(config_of(ctx, 128, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 4, 2, 64, a100);
    check_mma_shape(config_of(ctx, 64, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 4, 2, 64, a100);  /* as on sm_90 (8x2x64 there on a KV cache) */
    check_mma_shape(config_of(ctx, 160, FLASHCL_BF16, 0), FLASHCL_TILE_DEFAULT, 8, 1, 64, a100);
    check_mma_shape(config_of(ctx, 256, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 8, 1, 32, a100);
    check_mma_shape(config_of(ctx, 192, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 8, 1, 64, a100);
    flashcl_context_destroy(&ctx);
    /* One byte under an H200's local memory: sm_80 by assumed_tensor_cores' rule, with room for sm_90's
     * 8x1x128 at d = 160 (210 KB), which is sm_90's alone, so it is not this device's default. */
    ctx = assumed_tensor_cores(h200 - 1, 0, 0, 0, 0);
    check_mma_shape(config_of(ctx, 160, FLASHCL_BF16, 0), FLASHCL_TILE_DEFAULT, 8, 1, 64, h200 - 1);
    flashcl_context_destroy(&ctx);
    ctx = assumed_tensor_cores(small, 0, 0, 0, 0);
    check_mma_shape(config_of(ctx, 128, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 4, 1, 32, small);
    check_mma_shape(config_of(ctx, 256, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 2, 1, 16, small);
    flashcl_context_destroy(&ctx);
    ctx = assumed_tensor_cores(tiny, 0, 0, 0, 0);
    ck_assert_str_ne(config_of(ctx, 128, FLASHCL_F16, 0).kernel, "tensor-core");
    flashcl_context_destroy(&ctx);

    /* TF32 at d = 128: 8x2x32 (170 KB) on an H200, 4x2x32 on an A100's 163 KB; 4x2x64 at d = 64. */
    cl_int err;
    cl_mem mem = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE, 2 * 64 * 128 * 4, NULL, &err);
    ck_assert_ptr_nonnull(mem);
    const size_t locals[2] = {h200, a100};
    for (int i = 0; i < 2; i++) {
        ctx = assumed_tensor_cores(locals[i], 0, 0, 0, 0);
        struct flashcl_attention a = shape(128, FLASHCL_F32, 0, mem);
        a.precision = FLASHCL_PRECISION_TF32X3;
        ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
        ck_assert_str_eq(t.kernel, "tf32");
        check_mma_shape(t, FLASHCL_TILE_DEFAULT, i == 0 ? 8 : 4, 2, 32, locals[i]);
        a = shape(64, FLASHCL_F32, 1, mem);
        a.precision = FLASHCL_PRECISION_TF32;
        ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
        check_mma_shape(t, FLASHCL_TILE_DEFAULT, 4, 2, 64, locals[i]);
        flashcl_context_destroy(&ctx);
    }
    clReleaseMemObject(mem);

    /* Forced: used where it fits, else the FMA units run the call. */
    ctx = assumed_tensor_cores(small, 4, 1, 32, 0);
    check_mma_shape(config_of(ctx, 128, FLASHCL_F16, 0), FLASHCL_TILE_FORCED, 4, 1, 32, small);
    flashcl_context_destroy(&ctx);
    ctx = assumed_tensor_cores(small, 8, 2, 128, 0);
    ck_assert_str_ne(config_of(ctx, 128, FLASHCL_F16, 0).kernel, "tensor-core");
    flashcl_context_destroy(&ctx);

    /* Tuned: 8x2x128 at d = 128 needs 192 KB; used on an H200, not in 64 KB. */
    struct flashcl_tuned_config big = {"tensor-core", FLASHCL_F16, 128, 0, 256, 128, 8, 2, 1.0};
    write_one_entry(&big);
    ctx = assumed_tensor_cores(h200, 0, 0, 0, 1);
    check_mma_shape(config_of(ctx, 128, FLASHCL_F16, 0), FLASHCL_TILE_TUNED, 8, 2, 128, h200);
    flashcl_context_destroy(&ctx);
    ctx = assumed_tensor_cores(small, 0, 0, 0, 1);
    check_mma_shape(config_of(ctx, 128, FLASHCL_F16, 0), FLASHCL_TILE_DEFAULT, 4, 1, 32, small);
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

/* Hopper's wgmma kernel (assumed here, as its probe would find it on sm_90; nothing is launched): planned
 * ahead of mma.sync for f16/bf16 head dims (multiples of 16) with its built-in shapes, smaller ones where
 * those do not fit, mma.sync where none fits, where it is turned off, and where the route is off; the
 * FMA kernels for a head dim it does not take. */
START_TEST(wgmma_planned_where_it_runs)
{
    const size_t h200 = 232448, small = 65536;
    struct test_env *e = test_env_get();
    const char *const options[3] = {"", "tensor-core-wgmma:off", ""};
    const size_t locals[3] = {h200, h200, small};
    for (int i = 0; i < 4; i++) {
        struct flashcl_context_params p = {0};
        p.context = e->cl;
        p.device = e->device;
        p.local_mem_bytes = i < 3 ? locals[i] : h200;
        p.kernel_options = i < 3 ? options[i] : "";
        p.tuning_file = "";
        const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .assume_wgmma = i < 3,
                                             .assume_compute_capability = 90};
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
        const char *why = NULL;
        ck_assert_int_eq(flashcl_context_has_wgmma(ctx, &why), i < 3);
        ck_assert_int_eq(strncmp(why, i < 3 ? "on" : "off", i < 3 ? 2 : 3), 0);
        const struct flashcl_tile d64 = config_of(ctx, 64, FLASHCL_F16, 1), d128 = config_of(ctx, 128, FLASHCL_BF16, 0);
        const struct flashcl_tile d96 = config_of(ctx, 96, FLASHCL_F16, 0), d160 = config_of(ctx, 160, FLASHCL_BF16, 1);
        const struct flashcl_tile d256 = config_of(ctx, 256, FLASHCL_F16, 1), d40 = config_of(ctx, 40, FLASHCL_F16, 0);
        ck_assert_str_ne(d40.kernel, "tensor-core-wgmma");  /* not a multiple of 16 */
        if (i == 0) {  /* causal d = 64: 8 warps x 64 keys, two work-groups an SM (64 KiB each with three
                        * buffers); 12 warps x 128 keys up to d = 128 (176 KiB at 96 and 128: two 64-column
                        * panels), 12 x 64 at d = 160 (168 KiB), 8 x 64 at d = 256 (192 KiB) */
            const struct flashcl_tile *t[5] = {&d64, &d96, &d128, &d160, &d256};
            const int warps[5] = {8, 12, 12, 12, 8}, block_n[5] = {64, 128, 128, 64, 64};
            for (int j = 0; j < 5; j++) {
                ck_assert_str_eq(t[j]->kernel, "tensor-core-wgmma");
                check_mma_shape(*t[j], FLASHCL_TILE_DEFAULT, warps[j], 1, block_n[j], h200);
            }
            ck_assert_uint_eq(d64.local_bytes, 64 * 1024);
            ck_assert_uint_eq(d128.local_bytes, 176 * 1024);
            ck_assert_uint_eq(d256.local_bytes, 192 * 1024);
        } else if (i == 2) {  /* 64 KiB: 8 x 64 at d = 64 (48 KiB); from d = 80 even 4 x 64 (80 KiB) does not fit */
            ck_assert_str_eq(d64.kernel, "tensor-core-wgmma");
            check_mma_shape(d64, FLASHCL_TILE_DEFAULT, 8, 1, 64, small);
            ck_assert_str_eq(d96.kernel, "tensor-core");
            ck_assert_str_eq(d128.kernel, "tensor-core");
        } else {
            ck_assert_str_eq(d64.kernel, "tensor-core");
            ck_assert_str_eq(d96.kernel, "tensor-core");
            ck_assert_str_eq(d128.kernel, "tensor-core");
            ck_assert_str_eq(d256.kernel, "tensor-core");
        }
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

/* Naming tensor-core in the kernel options (a shape, splits) turns the wgmma kernel off, so the shape is
 * mma.sync's (the probe's candidates rely on it), and so does turning it off; naming both keeps each.
 * Assumed as on sm_90 with the probe passed; nothing launched. */
START_TEST(wgmma_gives_way_to_tensor_core)
{
    static const struct {
        const char *options;
        const char *want;
        int warps, m_tiles, block_n;
    } cases[] = {
        {"tensor-core:warps=4,m_tiles=2,block_n=64", "tensor-core", 4, 2, 64},
        {"tensor-core:splits=2", "tensor-core", 0, 0, 0},
        {"tensor-core-wgmma:warps=8,block_n=64;tensor-core:warps=4", "tensor-core-wgmma", 8, 1, 64},
        {"tf32:warps=4", "tensor-core-wgmma", 4, 1, 128},  /* d = 64 unmasked: 4 x 128 */
        {"tensor-core:off", "register-tiled", 0, 0, 0},  /* no tensor-core forward at all */
        {"tensor-core:off;tensor-core-wgmma:on", "tensor-core-wgmma", 4, 1, 128},
        {"tensor-core:on", "tensor-core", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        flashcl_context *ctx = assumed_h200(cases[i].options);
        const struct flashcl_tile t = config_of(ctx, 64, FLASHCL_F16, 0);
        ck_assert_msg(kernel_is(t.kernel, cases[i].want), "\"%s\": %s", cases[i].options, t.kernel);
        if (cases[i].warps)
            ck_assert_int_eq(t.warps, cases[i].warps);
        if (cases[i].m_tiles)
            ck_assert_int_eq(t.m_tiles, cases[i].m_tiles);
        if (cases[i].block_n)
            ck_assert_int_eq(t.block_n, cases[i].block_n);
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

/* A plan's build options hold `want`, or with a leading '!' do not hold the rest of it (case `i` in the message). */
static void check_build_option(const char *options, const char *want, int i)
{
    const bool absent = want[0] == '!';
    ck_assert_msg((strstr(options, want + absent) == NULL) == absent, "case %d: \"%s\" %s \"%s\"", i, want + absent,
                  absent ? "in" : "not in", options);
}

/* The wgmma kernel's build choices on an H200-sized device (src/kernels.c's wgmma_overlaps, wgmma_kv_stages,
 * wgmma_resident): the softmax beside the previous block's PV only on 64-key blocks past d = 96 where its registers
 * fit, never on a paged cache; three K/V buffers where they fit, as many times as the work-groups an SM the build
 * is made for, and the overlap is off; Q read from local memory where its fragments do not fit beside the rest; a
 * register cap for two or three work-groups an SM only on the shapes measured so (d <= 64, 4 x 128 and 8 x 64, not
 * on a KV cache). A want starting with '!' must not be in the options. */
START_TEST(wgmma_build_choices)
{
    struct test_env *e = test_env_get();
    static const struct {
        const char *options;
        int d, varlen, causal;
        const char *want[8];  /* substrings of the plan's build options (up to a NULL) */
    } cases[] = {
        {"", 64, 0, 0, {"-DBLOCK_N=128", "-DKV_STAGES=2", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0", "-DWARPS=4", "-cl-nv-maxrregcount=168"}},  /* 4 x 128, three an SM: 72 KiB each with two, three would take 104 */
        {"", 64, 1, 0, {"-DBLOCK_N=128", "-DKV_STAGES=2", "-DQ_SMEM=0", "-DWARPS=4", "-cl-nv-maxrregcount=168"}},  /* packed varlen too */
        {"", 64, 2, 0, {"-DBLOCK_N=128", "-DKV_STAGES=3", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DWARPS=12", "!-cl-nv-maxrregcount"}},  /* a KV cache: 12 x 128 */
        {"", 64, 3, 0, {"-DBLOCK_N=128", "-DKV_STAGES=3", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DWARPS=12", "!-cl-nv-maxrregcount"}},  /* paged: 12 x 128 */
        {"", 48, 0, 0, {"-DBLOCK_N=128", "-DKV_STAGES=2", "-DQ_SMEM=0", "-DWARPS=4", "-cl-nv-maxrregcount=168"}},
        {"", 32, 0, 1, {"-DBLOCK_N=64", "-DKV_STAGES=3", "-DQ_SMEM=0", "-DWARPS=8", "-cl-nv-maxrregcount=128"}},
        {"", 64, 0, 1, {"-DBLOCK_N=64", "-DKV_STAGES=3", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0", "-DWARPS=8", "-cl-nv-maxrregcount=128"}},  /* 8 x 64, two an SM: 64 KiB each with three; no skip at d = 64 */
        {"", 64, 2, 1, {"-DBLOCK_N=128", "-DWARPS=12", "!-cl-nv-maxrregcount"}},  /* causal on a KV cache: 12 x 128 */
        {"tensor-core-wgmma:warps=4,block_n=128", 64, 2, 0, {"-DKV_STAGES=3", "!-cl-nv-maxrregcount"}},  /* forced, on a KV cache: not measured with the cap */
        {"tensor-core-wgmma:warps=12,block_n=192", 64, 0, 0, {"-DBLOCK_N=192", "-DKV_STAGES=3", "-DQ_SMEM=1", "-DWARPS=12", "!-cl-nv-maxrregcount"}},  /* 168 KiB with three; Q's 16 registers would crowd S's 96 */
        {"tensor-core-wgmma:warps=12,block_n=192", 48, 0, 0, {"-DBLOCK_N=192", "-DQ_SMEM=1", "-DWARPS=12"}},  /* 96 + 24 + 12 + 40 > 168 */
        {"tensor-core-wgmma:warps=12,block_n=192", 32, 0, 0, {"-DBLOCK_N=192", "-DQ_SMEM=0", "-DWARPS=12"}},  /* 96 + 16 + 8 + 40 <= 168 */
        {"tensor-core-wgmma:warps=8,block_n=192", 64, 0, 0, {"-DBLOCK_N=192", "-DKV_STAGES=3", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DWGMMA_OVERLAP=0", "-DWARPS=8", "!-cl-nv-maxrregcount"}},  /* 255 registers leave Q room */
        {"", 128, 0, 0, {"-DWGMMA_OVERLAP=0", "-DKV_STAGES=2", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=1", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0", "!-cl-nv-maxrregcount"}}, /* 12 x 128: three need 240 KB */
        {"", 128, 0, 1, {"-DWGMMA_OVERLAP=0", "-DKV_STAGES=2", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=1", "-DBLOCK_SKIP=1", "-DEXP2_POLY=1"}}, /* masked: the skip */
        {"", 160, 0, 1, {"-DWGMMA_OVERLAP=1", "-DKV_STAGES=2", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=1", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0"}}, /* 12 x 64; overlap, no skip */
        {"", 96, 0, 1, {"-DWGMMA_OVERLAP=0", "-DKV_STAGES=2", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=1", "-DBLOCK_SKIP=1", "-DEXP2_POLY=0"}},  /* 12 x 128; exponents: only 97-128 */
        {"", 192, 0, 1, {"-DWGMMA_OVERLAP=0", "-DKV_STAGES=3", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=1", "-DBLOCK_SKIP=1", "-DEXP2_POLY=0"}}, /* 12 x 64: 184 registers > 168 */
        {"", 256, 0, 0, {"-DWGMMA_OVERLAP=1", "-DKV_STAGES=2", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0"}}, /* 8 x 64 */
        {"", 160, 3, 0, {"-DWGMMA_OVERLAP=0", "-DKV_STAGES=3", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=1", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0"}}, /* paged */
        {"tensor-core-wgmma:warps=12,block_n=64", 128, 0, 0, {"-DWGMMA_OVERLAP=1", "-DKV_STAGES=2", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=1", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0"}},
        {"tensor-core-wgmma:warps=12,block_n=64", 64, 0, 0, {"-DWGMMA_OVERLAP=0", "-DKV_STAGES=3", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0", "!-cl-nv-maxrregcount"}},
        {"tensor-core-wgmma:warps=4,block_n=64", 128, 0, 0, {"-DWGMMA_OVERLAP=1", "-DKV_STAGES=2", "-DQ_SMEM=0", "-DWGMMA_PINGPONG=0", "-DBLOCK_SKIP=0", "-DEXP2_POLY=0"}},
    };
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * 256 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(mem);
    for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
        flashcl_context *ctx = assumed_h200(cases[i].options);
        struct flashcl_attention a = shape(cases[i].d, FLASHCL_F16, cases[i].causal, mem);
        struct problem pr;
        fcl_forward_problem(&a, &pr);
        pr.varlen = cases[i].varlen;
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, "tensor-core-wgmma");
        for (int j = 0; j < 8 && cases[i].want[j]; j++)
            check_build_option(plan.options, cases[i].want[j], i);
        flashcl_context_destroy(&ctx);
    }
    /* At d = 64 a window picks the built-in by the function it computes: none that limits nothing is no mask (4 x 128,
     * three an SM), one ending at the diagonal causal (8 x 64, two), a sliding window the 12-warp shape. */
    static const struct {
        int left, right;
        const char *want[3];
    } windows[] = {
        {-1, -1, {"-DWARPS=4", "-DBLOCK_N=128", "-cl-nv-maxrregcount=168"}},
        {-1, 0, {"-DWARPS=8", "-DBLOCK_N=64", "-cl-nv-maxrregcount=128"}},
        {256, 0, {"-DWARPS=12", "-DBLOCK_N=128", "!-cl-nv-maxrregcount"}},
    };
    for (int i = 0; i < (int)(sizeof(windows) / sizeof(windows[0])); i++) {
        flashcl_context *ctx = assumed_h200("");
        struct flashcl_attention a = shape(64, FLASHCL_F16, 0, mem);
        struct problem pr;
        fcl_forward_problem(&a, &pr);
        pr.mask = FLASHCL_MASK_WINDOW;
        pr.window_left = windows[i].left;
        pr.window_right = windows[i].right;
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, "tensor-core-wgmma");
        for (int j = 0; j < 3; j++)
            check_build_option(plan.options, windows[i].want[j], i);
        flashcl_context_destroy(&ctx);
    }
    /* wgmma skips where the blocks to skip are a fair part of the keys: a causal diagonal across half the keys
     * or more, or a window on the left; not a prefill chunk's diagonal against a long cache. */
    static const struct {
        int seq_q, seq_kv, window_left;  /* causal: window_right 0 */
        const char *want;
    } chunks[] = {
        {512, 16384, -1, "-DBLOCK_SKIP=0"}, {2048, 65536, -1, "-DBLOCK_SKIP=0"}, {8192, 16384, -1, "-DBLOCK_SKIP=1"},
        {4096, 4096, -1, "-DBLOCK_SKIP=1"}, {512, 16384, 256, "-DBLOCK_SKIP=1"},
    };
    for (int i = 0; i < (int)(sizeof(chunks) / sizeof(chunks[0])); i++) {
        flashcl_context *ctx = assumed_h200("");
        struct flashcl_attention a = shape(128, FLASHCL_F16, 1, mem);
        struct problem pr;
        fcl_forward_problem(&a, &pr);
        pr.seq_q = chunks[i].seq_q;
        pr.seq_kv = chunks[i].seq_kv;
        pr.window_left = chunks[i].window_left;
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, "tensor-core-wgmma");
        ck_assert_msg(strstr(plan.options, chunks[i].want) != NULL, "chunk %d: \"%s\" not in \"%s\"", i,
                      chunks[i].want, plan.options);
        flashcl_context_destroy(&ctx);
    }
    /* mma.sync's warps skip always, masked or not; its exponents all on the MUFU (d = 128 causal too). */
    for (int i = 0; i < 4; i++) {
        const int causal = i & 1, d = 64 << (i >> 1);
        flashcl_context *ctx = assumed_h200("tensor-core-wgmma:off");
        struct flashcl_attention a = shape(d, FLASHCL_F16, causal, mem);
        struct problem pr;
        fcl_forward_problem(&a, &pr);
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, "tensor-core");
        ck_assert_msg(strstr(plan.options, "-DBLOCK_SKIP=1") != NULL, "d %d causal %d: \"%s\"", d, causal,
                      plan.options);
        ck_assert_msg(strstr(plan.options, "-DEXP2_POLY=0") != NULL, "d %d causal %d: \"%s\"", d, causal,
                      plan.options);
        flashcl_context_destroy(&ctx);
    }
    clReleaseMemObject(mem);
}
END_TEST

/* Candidates fit the local memory they were asked for, more memory never
 * gives fewer, and the footprint the table computes is what the built
 * kernel declares (CL_KERNEL_LOCAL_MEM_SIZE), for the kernels this device
 * can build: a few candidates each, through the same plan a call makes. */
/* Builds the plan's kernel (its entry) and checks its CL_KERNEL_LOCAL_MEM_SIZE against the table's
 * footprint: the arrays the table counts, give or take what a compiler adds of its own (the planner
 * keeps that slack free). */
/* Returns the built kernel's CL_KERNEL_LOCAL_MEM_SIZE. */
static cl_ulong check_built_footprint(flashcl_context *ctx, const struct plan *plan, const char *label)
{
    cl_kernel kernel;
    pthread_mutex_lock(&ctx->lock);
    const flashcl_status st = fcl_program_get_kernel(ctx, plan->kernel->source, plan->kernel->entry, plan->options,
                                                     (plan->kernel->needs & NEEDS_SM90A) && !ctx->dev.tensor_cores_emulated, &kernel);
    pthread_mutex_unlock(&ctx->lock);
    ck_assert_flashcl_ok(st);
    cl_ulong declared = 0;
    ck_assert_cl(clGetKernelWorkGroupInfo(kernel, test_env_get()->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof(declared),
                                          &declared, NULL));
    /* NVIDIA's driver counts a kilobyte more where the arrays are 1024-aligned (wgmma's tiles): on the H200 a build
     * whose PTX declares 44,032 bytes of arrays reports 45,056 (docs/perf.md v0.19); elsewhere (PoCL) to the byte. */
    char vendor[256] = "";
    ck_assert_cl(clGetDeviceInfo(test_env_get()->device, CL_DEVICE_VENDOR, sizeof(vendor) - 1, vendor, NULL));
    const bool nvidia = strstr(vendor, "NVIDIA") != NULL;
    const cl_ulong aligned_extra = nvidia && kernel_is(plan->kernel->name, "tensor-core-wgmma") ? 1024 : 0;
    ck_assert_msg(declared + FCL_LOCAL_SLACK >= plan->local_bytes &&
                      declared <= plan->local_bytes + FCL_LOCAL_SLACK + aligned_extra,
                  "%s: the kernel declares %llu bytes, the table says %zu", label, (unsigned long long)declared,
                  plan->local_bytes);
    printf("%s: declared %llu, table %zu\n", label, (unsigned long long)declared, plan->local_bytes);
    return declared;
}

/* mma.sync on sm_90 (the wgmma kernel off): up to d = 64 without a mask on dense and packed batches the built-in
 * 4 x 2 x 64 keeps Q's fragments in registers (two tiles a warp, Q_REGS); causal, a sliding window, a KV cache (8 x 2 x
 * 64 there) and larger head dims read them from local memory, and so does a forced two-tile shape there. No register
 * cap on mma.sync's plans. */
START_TEST(mma_build_choices)
{
    struct test_env *e = test_env_get();
    static const struct {
        const char *options;
        int d, varlen, causal, window_left;  /* window_left >= 0: a sliding window to the diagonal */
        int warps, m_tiles, block_n;
        const char *want;
    } cases[] = {
        {"", 64, 0, 0, -1, 4, 2, 64, "-DQ_REGS=1"},
        {"", 64, 1, 0, -1, 4, 2, 64, "-DQ_REGS=1"},  /* packed varlen */
        {"", 32, 0, 0, -1, 4, 2, 64, "-DQ_REGS=1"},
        {"", 64, 2, 0, -1, 8, 2, 64, "-DQ_REGS=0"},  /* a KV cache: 8 x 2 x 64 */
        {"", 64, 3, 0, -1, 8, 2, 64, "-DQ_REGS=0"},  /* paged */
        {"", 64, 0, 1, -1, 4, 2, 64, "-DQ_REGS=0"},  /* causal */
        {"", 64, 0, 0, 256, 4, 2, 64, "-DQ_REGS=0"}, /* a sliding window */
        {"", 128, 0, 0, -1, 4, 2, 64, "-DQ_REGS=0"},
        {"tensor-core:warps=4,m_tiles=2,block_n=32", 64, 0, 0, -1, 4, 2, 32, "-DQ_REGS=1"},
        {"tensor-core:warps=4,m_tiles=2,block_n=32", 64, 0, 1, -1, 4, 2, 32, "-DQ_REGS=0"},
        {"tensor-core:warps=8,m_tiles=1,block_n=64", 64, 0, 0, -1, 8, 1, 64, "-DQ_REGS=0"},  /* one tile: in registers anyway */
    };
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * 128 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(mem);
    for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
        char options[128];
        snprintf(options, sizeof(options), "tensor-core-wgmma:off;%s", cases[i].options);
        flashcl_context *ctx = assumed_h200(options);
        struct flashcl_attention a = shape(cases[i].d, FLASHCL_BF16, cases[i].causal, mem);
        struct problem pr;
        fcl_forward_problem(&a, &pr);
        pr.varlen = cases[i].varlen;
        if (cases[i].window_left >= 0) {
            pr.mask = FLASHCL_MASK_WINDOW;
            pr.window_left = cases[i].window_left;
            pr.window_right = 0;
        }
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, "tensor-core");
        ck_assert_msg(plan.shape.axis[AXIS_WARPS] == cases[i].warps && plan.shape.axis[AXIS_M_TILES] == cases[i].m_tiles &&
                          plan.shape.axis[AXIS_BLOCK_N] == cases[i].block_n,
                      "case %d: %d x %d x %d planned", i, plan.shape.axis[AXIS_WARPS], plan.shape.axis[AXIS_M_TILES],
                      plan.shape.axis[AXIS_BLOCK_N]);
        check_build_option(plan.options, cases[i].want, i);
        check_build_option(plan.options, "!-cl-nv-maxrregcount", i);
        flashcl_context_destroy(&ctx);
    }

    /* Emulated as sm_90: the same plan, and the built kernel's local memory is the table's. */
    flashcl_context *ctx = test_emulated_context("decode:off;decode-tensor-core:off", 90, false);
    struct flashcl_attention a = shape(64, FLASHCL_F16, 0, mem);
    struct problem pr;
    fcl_forward_problem(&a, &pr);
    struct plan plan;
    ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
    ck_assert_str_eq(plan.kernel->name, "tensor-core");
    /* 4 x 2 x 64: 48 KiB of tiles and the emulator's scratch; a device with less plans a smaller shape. */
    if (flashcl_context_local_mem_bytes(ctx) >= 48 * 1024 + NV_EMULATE_SCRATCH_BYTES(4) + FCL_LOCAL_SLACK) {
        ck_assert_int_eq(plan.shape.axis[AXIS_WARPS], 4);
        ck_assert_int_eq(plan.shape.axis[AXIS_M_TILES], 2);
        ck_assert_int_eq(plan.shape.axis[AXIS_BLOCK_N], 64);
        ck_assert_ptr_nonnull(strstr(plan.options, "-DQ_REGS=1"));
    }
    check_built_footprint(ctx, &plan, "emulated tensor-core d=64 on sm_90");
    flashcl_context_destroy(&ctx);
    clReleaseMemObject(mem);
}
END_TEST

/* As check_built_footprint for a backward plan: its block kernels (steps 1 and 2: dK/dV, and dQ or the
 * fused kernel's convert step), the larger of which the table's footprint is. */
static void check_built_steps_footprint(flashcl_context *ctx, const struct plan *plan, const char *label)
{
    cl_ulong largest = 0;
    for (int step = 1; step <= 2; step++) {
        cl_kernel kernel;
        pthread_mutex_lock(&ctx->lock);
        const flashcl_status st = fcl_program_get_kernel(ctx, plan->kernel->source, plan->kernel->steps[step],
                                                         plan->options, false, &kernel);
        pthread_mutex_unlock(&ctx->lock);
        ck_assert_flashcl_ok(st);
        cl_ulong declared = 0;
        ck_assert_cl(clGetKernelWorkGroupInfo(kernel, test_env_get()->device, CL_KERNEL_LOCAL_MEM_SIZE,
                                              sizeof(declared), &declared, NULL));
        printf("%s %s: declared %llu\n", label, plan->kernel->steps[step], (unsigned long long)declared);
        largest = declared > largest ? declared : largest;
    }
    ck_assert_msg(largest + FCL_LOCAL_SLACK >= plan->local_bytes && largest <= plan->local_bytes + FCL_LOCAL_SLACK,
                  "%s: the kernels declare at most %llu bytes, the table says %zu", label,
                  (unsigned long long)largest, plan->local_bytes);
    printf("%s: table %zu\n", label, plan->local_bytes);
}

START_TEST(candidates_match_built_kernels)
{
    struct test_env *e = test_env_get();
    static const int dims[] = {16, 64, 128, 256};
    static const size_t locals[] = {49152, 98304, 232448};
    struct flashcl_tuned_config c[256];
    const char *const variants[] = {"portable", "register-tiled",
                                             "tensor-core", "tf32"};
    const flashcl_dtype dtypes[] = {FLASHCL_F32, FLASHCL_F32, FLASHCL_F16, FLASHCL_F32};  /* f32 exact: no tensor cores */
    for (int v = 0; v < 4; v++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 3; j++) {
                const int n = flashcl_tuning_candidates(e->ctx, variants[v], dtypes[v], dims[i], locals[j], c, 256);
                ck_assert_int_le(n, 256);
                if (kernel_is(variants[v], "portable"))
                    ck_assert_int_gt(n, 0);
                else if (kernel_is(variants[v], "register-tiled"))  /* 16x16 at d = 256 needs 52 KB */
                    ck_assert_int_eq(n == 0, dims[i] == 256 && locals[j] < 52224);
                else if (kernel_is(variants[v], "tf32") && dims[i] > 128)  /* past the TF32 kernel's head dims */
                    ck_assert_int_eq(n, 0);
                else if (locals[j] >= (dims[i] > 128 ? 232448u : 98304u))  /* d = 256: 96 KB + slack at least */
                    ck_assert_int_gt(n, 0);
                for (int k = 0; k < n; k++) {
                    ck_assert_int_eq(c[k].head_dim, dims[i]);
                    ck_assert_str_eq(c[k].kernel, variants[v]);
                }
                if (j > 0)
                    ck_assert_int_le(flashcl_tuning_candidates(e->ctx, variants[v], dtypes[v], dims[i], locals[j - 1],
                                                               NULL, 0), n);
            }

    /* Built: two candidates of each kernel this device can build (the
     * tensor-core ones where it has tensor cores), at d = 30 for the portable
     * kernel (the register-tiled one does not take it), 64 for the others. */
    const cl_ulong usable = flashcl_context_local_mem_bytes(e->ctx);
    const int n_kernels = flashcl_context_has_tensor_cores(e->ctx, NULL) ? 4 : 2;
    int built = 0;
    for (int v = 0; v < n_kernels; v++) {
        const int d = v == 0 ? 30 : 64;
        const int n = flashcl_tuning_candidates(e->ctx, variants[v], dtypes[v], d, usable, c, 256);
        for (int k = 0; k < n; k += n / 2 > 0 ? n / 2 : 1) {
            char options[128];
            ck_assert_flashcl_ok(flashcl_tuning_override(&c[k], options, sizeof(options)));
            flashcl_context *ctx = test_context_with_options(options);
            cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * (size_t)d * 4, NULL, NULL);
            ck_assert_ptr_nonnull(mem);
            struct flashcl_attention a = shape(d, dtypes[v], 0, mem);
            a.precision = kernel_is(variants[v], "tf32") ? FLASHCL_PRECISION_TF32 : FLASHCL_PRECISION_EXACT;
            struct problem p;
            fcl_forward_problem(&a, &p);
            struct plan plan;
            ck_assert_flashcl_ok(fcl_plan(ctx, &p, 1.0f, &plan));
            ck_assert_str_eq(plan.kernel->name, variants[v]);
            ck_assert_int_eq(plan.source, FLASHCL_TILE_FORCED);
            check_built_footprint(ctx, &plan, options);
            clReleaseMemObject(mem);
            if (++built == 2 * (v + 1))  /* two per kernel: the contexts are cached, eight at most */
                break;
        }
    }
    ck_assert_int_eq(built, 2 * n_kernels);
}
END_TEST

/* The decode kernels' footprints (their rows, K/V buffers and the paged row tables count) against
 * CL_KERNEL_LOCAL_MEM_SIZE of the built kernels, through the plan a decode call makes: the FMA decode
 * kernel at f32 and f16, dense and paged, with ALiBi (its rows' slopes), the tensor-core one where this
 * device has tensor cores. */
START_TEST(decode_kernels_match_built_kernels)
{
    struct test_env *e = test_env_get();
    enum { D = 64, HQ = 8, HKV = 2, NK = 256 };
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, (size_t)NK * HQ * D * 4, NULL, NULL);
    ck_assert_ptr_nonnull(mem);
    const struct {
        const char *options;
        const char *kernel;
        flashcl_dtype dtype;
        int varlen, alibi;
    } kernels[] = {
        /* The planner's shapes (they fit whatever this device has), and small forced ones. */
        {"decode-tensor-core:off", "decode", FLASHCL_F32, 0, 0},
        {"decode-tensor-core:off;decode:block_n=32", "decode", FLASHCL_F16, 3, 0},
        {"decode-tensor-core:off", "decode", FLASHCL_F16, 0, 1},
        {"", "decode-tensor-core", FLASHCL_F16, 0, 0},
        {"decode-tensor-core:warps=2,block_n=64", "decode-tensor-core", FLASHCL_BF16, 3, 0},
    };
    const int n_kernels = flashcl_context_has_tensor_cores(e->ctx, NULL) ? 5 : 3;
    for (int i = 0; i < n_kernels; i++) {
        flashcl_context *ctx = test_context_with_options(kernels[i].options);
        struct flashcl_attention a = {0};
        a.batch = 1;
        a.seq_q = 1;
        a.seq_kv = NK;
        a.heads_q = HQ;
        a.heads_kv = HKV;
        a.head_dim = D;
        a.q = a.o = flashcl_tensor_bnhd(mem, kernels[i].dtype, 1, HQ, D);
        a.k = a.v = flashcl_tensor_bnhd(mem, kernels[i].dtype, NK, HKV, D);
        struct problem p;
        fcl_forward_problem(&a, &p);
        p.varlen = kernels[i].varlen;  /* 3: a paged cache (its row tables count for the FMA kernel) */
        p.alibi = kernels[i].alibi;
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &p, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, kernels[i].kernel);
        char label[160];
        snprintf(label, sizeof(label), "%s (varlen %d, alibi %d)", kernels[i].options, kernels[i].varlen,
                 kernels[i].alibi);
        ck_assert(!kernels[i].alibi || strstr(plan.options, "-DALIBI=1"));
        const cl_ulong declared = check_built_footprint(ctx, &plan, label);
        if (kernels[i].alibi) {
            /* The slopes' bytes, a float a row (HQ / HKV rows), below the slack above: against the plan and the
             * kernel without them, which both must differ by exactly that. */
            struct plan plain;
            p.alibi = 0;
            ck_assert_flashcl_ok(fcl_plan(ctx, &p, 1.0f, &plain));
            const cl_ulong plain_declared = check_built_footprint(ctx, &plain, "the same without ALiBi");
            const size_t slopes = (size_t)(HQ / HKV) * sizeof(float);
            ck_assert_msg(plan.local_bytes == plain.local_bytes + slopes, "the table counts %zu bytes for the slopes",
                          plan.local_bytes - plain.local_bytes);
            ck_assert_msg(declared == plain_declared + slopes, "the kernel declares %llu bytes for the slopes",
                          (unsigned long long)(declared - plain_declared));
        }
    }
    clReleaseMemObject(mem);
}
END_TEST

/* The register-tiled backward's footprint is that of the larger of its two block kernels (dK/dV, dQ): the
 * table's number against CL_KERNEL_LOCAL_MEM_SIZE of both, built through the plan a backward call makes, for
 * the first, a middle and the last candidate at d = 64 and 128 (square and non-square tiles). */
START_TEST(backward_tiled_matches_built_kernels)
{
    struct test_env *e = test_env_get();
    const cl_ulong usable = flashcl_context_local_mem_bytes(e->ctx);
    static const int dims[] = {64, 128};
    struct flashcl_tuned_config c[256];
    for (int i = 0; i < 2; i++) {
        const int n = flashcl_tuning_candidates(e->ctx, "backward-tiled", FLASHCL_F32, dims[i], usable,
                                                c, 256);
        ck_assert_int_gt(n, 0);
        ck_assert_int_le(n, 256);
        const int picks[3] = {0, n / 2, n - 1};
        for (int j = 0; j < 3; j++) {
            const struct flashcl_tuned_config *t = &c[picks[j]];
            char options[128];
            ck_assert_flashcl_ok(flashcl_tuning_override(t, options, sizeof(options)));
            flashcl_context *ctx = test_context_with_options(options);
            cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * (size_t)dims[i] * 4, NULL, NULL);
            ck_assert_ptr_nonnull(mem);
            struct flashcl_attention a = shape(dims[i], FLASHCL_F32, 0, mem);
            struct problem p;
            fcl_forward_problem(&a, &p);
            p.op = OP_BACKWARD;
            struct plan plan;
            ck_assert_flashcl_ok(fcl_plan(ctx, &p, 1.0f, &plan));
            ck_assert_str_eq(plan.kernel->name, "backward-tiled");
            ck_assert_int_eq(plan.source, FLASHCL_TILE_FORCED);
            char label[160];
            snprintf(label, sizeof(label), "%s at d = %d", options, dims[i]);
            check_built_steps_footprint(ctx, &plan, label);
            clReleaseMemObject(mem);
        }
    }
}
END_TEST

/* The tensor-core kernels' footprints where their tile rows take the odd stride (d = 96: 13 chunks of 16
 * bytes a row for 12 of data; d = 160: 21 for 20) and where they do not (d = 64), against
 * CL_KERNEL_LOCAL_MEM_SIZE of the kernels built under the emulation (NV_EMULATE=1: the same arrays in
 * plain OpenCL C, plus the emulator's scratch, which the table counts there): the forward, the decode
 * kernel, the two-pass backward's two block kernels and the fused backward's dK/dV kernel. Built only,
 * nothing runs (tests/test_tensor_cores.c runs them). */
START_TEST(emulated_tensor_core_footprints)
{
    struct test_env *e = test_env_get();
    static const struct {
        enum kernel_op op;
        int d, seq_q;
        const char *options;
        const char *kernel;
        int varlen;  /* 3: a paged cache (the decode kernel's row tables, one a buffer, count) */
        int min_kb;  /* skipped on a device of less local memory */
    } kernels[] = {
        {OP_FORWARD, 96, 64, "decode-tensor-core:off", "tensor-core"},
        {OP_FORWARD, 160, 64, "decode-tensor-core:off", "tensor-core"},
        {OP_FORWARD, 96, 1, "", "decode-tensor-core"},
        {OP_FORWARD, 64, 1, "", "decode-tensor-core", 3},  /* 2-4 buffers, as local memory allows */
        {OP_BACKWARD, 96, 64, "", "backward-tensor-core"},
        {OP_BACKWARD, 64, 64, "", "backward-tensor-core"},
        {OP_BACKWARD, 96, 64, "backward-tensor-core-fused:on", "backward-tensor-core-fused"},
        /* Hopper's wgmma kernel (its plain-OpenCL wgmma; assumed sm_90), one warpgroup, 64-key blocks: 43 KB
         * at d = 64; whole 64-column panels at d = 96 (83 KB) and d = 192 (123 KB, Q read from local memory) */
        {OP_FORWARD, 64, 64, "decode-tensor-core:off;tensor-core-wgmma:warps=4,block_n=64",
         "tensor-core-wgmma"},
        {OP_FORWARD, 96, 64, "decode-tensor-core:off;tensor-core-wgmma:warps=4,block_n=64",
         "tensor-core-wgmma", 0, 128},
        {OP_FORWARD, 192, 64, "decode-tensor-core:off;tensor-core-wgmma:warps=4,block_n=64",
         "tensor-core-wgmma", 0, 128},
        /* The built-in 4 x 128 up to d = 64 without a mask (72 KiB with two buffers), and 12 x 192 forced (at
         * d = 48, the build test_forward runs: PoCL's cache has it once): 168 KiB and the emulator's scratch for
         * 12 warps */
        {OP_FORWARD, 48, 64, "decode-tensor-core:off", "tensor-core-wgmma", 0, 128},
        {OP_FORWARD, 48, 64, "decode-tensor-core:off;tensor-core-wgmma:warps=12,block_n=192",
         "tensor-core-wgmma", 0, 256},
        /* The wgmma backward: its built-in at d = 64 (8 warps, 128-key dQ blocks: 96 KiB and the scratch) and a
         * forced 4-warp shape at d = 96 (whole panels: 97 KiB for dK/dV) */
        {OP_BACKWARD, 64, 64, "", "backward-wgmma", 0, 128},
        {OP_BACKWARD, 96, 64, "backward-wgmma:warps=4,block_m=64,block_n=64", "backward-wgmma", 0, 128},
        /* The atomic one: dK/dV with the dS tile (87 KiB with the scratch at d = 64), then the convert step */
        {OP_BACKWARD, 64, 64, "backward-wgmma-atomic:on", "backward-wgmma-atomic", 0, 128},
    };
    /* The smallest shapes these plans can shrink to (d = 160, 2 warps x 16 rows, 16 keys: 33 KB with the
     * emulator's scratch) need more than OpenCL 1.2's 32 KB minimum; a device with less plans the FMA
     * kernels there, rightly. */
    cl_ulong device_local = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(device_local), &device_local, NULL));
    if (device_local < 48 * 1024) {
        printf("emulated tensor-core footprints: skipped (%llu bytes of local memory)\n",
               (unsigned long long)device_local);
        return;
    }
    for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
        struct flashcl_context_params params = {0};
        params.context = e->cl;
        params.device = e->device;
        params.kernel_options = kernels[i].options;
        const bool wgmma = kernel_is(kernels[i].kernel, "tensor-core-wgmma") ||
                           kernel_is(kernels[i].kernel, "backward-wgmma") ||
                           kernel_is(kernels[i].kernel, "backward-wgmma-atomic");
        if (device_local < (cl_ulong)kernels[i].min_kb * 1024) {
            printf("emulated %s footprint at d = %d: skipped (%llu bytes of local memory)\n", kernels[i].options,
                   kernels[i].d, (unsigned long long)device_local);
            continue;
        }
        const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .emulate_tensor_cores = true,
                                             .assume_wgmma = wgmma, .assume_compute_capability = wgmma ? 90 : 80};
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(fcl_context_create(&params, &hooks, &ctx));
        const int d = kernels[i].d;
        cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * (size_t)d * 4, NULL, NULL);
        ck_assert_ptr_nonnull(mem);
        struct flashcl_attention a = shape(d, FLASHCL_F16, 0, mem);
        a.seq_q = kernels[i].seq_q;
        a.heads_q = kernels[i].seq_q == 1 ? 4 : 1;  /* decode: a group of 4 query heads a KV head */
        a.q = a.o = flashcl_tensor_bnhd(mem, FLASHCL_F16, (size_t)a.seq_q, (size_t)a.heads_q, (size_t)d);
        struct problem p;
        fcl_forward_problem(&a, &p);
        p.op = kernels[i].op;
        p.varlen = kernels[i].varlen;
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &p, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, kernels[i].kernel);
        if (kernel_is(kernels[i].kernel, "tensor-core-wgmma") && d == 48) {  /* the built-in and forced entries: planned so, not some smaller shape */
            ck_assert_int_eq(plan.shape.axis[AXIS_WARPS], kernels[i].min_kb >= 256 ? 12 : 4);
            ck_assert_int_eq(plan.shape.axis[AXIS_BLOCK_N], kernels[i].min_kb >= 256 ? 192 : 128);
            ck_assert_ptr_null(strstr(plan.options, "-cl-nv-maxrregcount"));  /* emulated: PoCL does not take it */
        }
        char label[96];
        snprintf(label, sizeof(label), "%s d=%d%s", kernels[i].kernel, d,
                 kernels[i].varlen == 3 ? " paged" : "");
        if (p.op == OP_FORWARD) {
            check_built_footprint(ctx, &plan, label);
        } else {
            check_built_steps_footprint(ctx, &plan, label);
        }
        clReleaseMemObject(mem);
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

/* A value head dim (attn.head_dim_v) on the tensor-core forward kernels: the built-in shapes for the wider of d and
 * dv, V's tiles at dv in the footprint, the registers' choices by what grows with which (O and PV with dv, Q with
 * d), a dv these kernels cannot take left to the portable kernel; and the emulated builds' local memory is the
 * table's (test_forward runs the same plans). */
static struct flashcl_attention dv_shape(int d, int dv, int causal, cl_mem mem)
{
    struct flashcl_attention a = shape(d, FLASHCL_F16, causal, mem);
    a.head_dim_v = dv;
    a.v = flashcl_tensor_bnhd(mem, FLASHCL_F16, 64, 1, (size_t)dv);
    a.o = a.v;
    a.o.offset = 64 * 256 * 2;
    return a;
}

START_TEST(value_head_dim_plans)
{
    struct test_env *e = test_env_get();
    static const struct {
        const char *options;
        int d, dv, varlen;
        const char *kernel;
        int warps, m_tiles, block_n;
        size_t local_bytes;
        const char *want[6];
    } cases[] = {
        /* MLA's 192/128: 12 x 64 as at d = 192; PV's 128 columns let the overlap's registers fit (32 + 64 + 16 +
         * 40 <= 168); Q (d = 192) from local memory. Q 192 rows and K twice at 3 panels, V twice at 2. */
        {"", 192, 128, 0, "tensor-core-wgmma", 12, 1, 64, ((192 + 2 * 64) * 3 + 2 * 64 * 2) * 128,
         {"-DHEAD_DIM=192", "-DHEAD_DIM_V=128", "-DWGMMA_OVERLAP=1", "-DKV_STAGES=2", "-DQ_SMEM=1", "-DWGMMA_PINGPONG=1"}},
        {"", 192, 128, 3, "tensor-core-wgmma", 12, 1, 64, ((192 + 3 * 64) * 3 + 3 * 64 * 2) * 128,
         {"-DHEAD_DIM_V=128", "-DWGMMA_OVERLAP=0", "-DKV_STAGES=3", "-DQ_SMEM=1"}},  /* paged: three buffers */
        /* d = 64 with dv = 128: the d = 65-128 built-in 12 x 128, Q from local memory as at d = 128 */
        {"", 64, 128, 0, "tensor-core-wgmma", 12, 1, 128, ((192 + 3 * 128) * 1 + 3 * 128 * 2) * 128,
         {"-DHEAD_DIM=64", "-DHEAD_DIM_V=128", "-DQ_SMEM=1", "-DWGMMA_OVERLAP=0", "-DKV_STAGES=3",
          "!-cl-nv-maxrregcount"}},
        {"", 64, 64, 0, "tensor-core-wgmma", 4, 1, 128, 0, {"-DHEAD_DIM_V=64", "-cl-nv-maxrregcount=168"}},  /* dv = d */
        /* mma.sync: 8 x 1 x 64 as at d = 192 (Q and K at 24 chunks a row, V at 16); d = 64, dv = 128: 4 x 2 x 64,
         * Q's two tiles from local memory (O's are 128 registers) */
        {"tensor-core-wgmma:off", 192, 128, 0, "tensor-core", 8, 1, 64, (128 + 2 * 64) * 384 + 2 * 64 * 256,
         {"-DHEAD_DIM=192", "-DHEAD_DIM_V=128", "-DQ_REGS=0"}},
        {"tensor-core-wgmma:off", 64, 128, 0, "tensor-core", 4, 2, 64, (128 + 2 * 64) * 128 + 2 * 64 * 256,
         {"-DHEAD_DIM_V=128", "-DQ_REGS=0"}},
        {"tensor-core-wgmma:off", 64, 32, 0, "tensor-core", 4, 2, 64, (128 + 2 * 64) * 128 + 2 * 64 * 80,
         {"-DHEAD_DIM_V=32", "-DQ_REGS=1"}},  /* both up to 64: Q in registers, as at d = 64; V's rows 5 chunks */
        {"", 64, 40, 0, "portable", 0, 0, 0, 0, {"-DHEAD_DIM_V=40"}},  /* 40: not a multiple of 16 */
    };
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * 256 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(mem);
    for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
        flashcl_context *ctx = assumed_h200(cases[i].options);
        struct flashcl_attention a = dv_shape(cases[i].d, cases[i].dv, 0, mem);
        struct problem pr;
        fcl_forward_problem(&a, &pr);
        pr.varlen = cases[i].varlen;
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
        ck_assert_msg(kernel_is(plan.kernel->name, cases[i].kernel), "case %d: %s planned", i, plan.kernel->name);
        if (cases[i].warps)
            ck_assert_msg(plan.shape.axis[AXIS_WARPS] == cases[i].warps &&
                              plan.shape.axis[AXIS_M_TILES] == cases[i].m_tiles &&
                              plan.shape.axis[AXIS_BLOCK_N] == cases[i].block_n,
                          "case %d: %d x %d x %d planned", i, plan.shape.axis[AXIS_WARPS],
                          plan.shape.axis[AXIS_M_TILES], plan.shape.axis[AXIS_BLOCK_N]);
        if (cases[i].local_bytes)
            ck_assert_msg(plan.local_bytes == cases[i].local_bytes, "case %d: %zu bytes, not %zu", i, plan.local_bytes,
                          cases[i].local_bytes);
        for (int j = 0; j < 6 && cases[i].want[j]; j++)
            check_build_option(plan.options, cases[i].want[j], i);
        flashcl_context_destroy(&ctx);
    }

    /* Emulated, small shapes (those of test_forward's cases): the built kernels' local memory. */
    static const struct {
        const char *options;
        int cc, d, dv, kb;  /* kb: the shape's local memory, emulated */
    } built[] = {
        {"tensor-core:warps=4,m_tiles=1,block_n=32", 80, 64, 96, 32},  /* V an odd stride: 13 chunks a row */
        {"tensor-core-wgmma:warps=4,block_n=64", 90, 192, 128, 107},
        {"tensor-core-wgmma:warps=4,block_n=128", 90, 64, 128, 155},
    };
    for (int i = 0; i < (int)(sizeof(built) / sizeof(built[0])); i++) {
        flashcl_context *ctx = test_emulated_context(built[i].options, built[i].cc, built[i].cc >= 90);
        if (!test_local_mem_holds(ctx, built[i].kb, built[i].options)) {
            flashcl_context_destroy(&ctx);
            continue;
        }
        struct flashcl_attention a = dv_shape(built[i].d, built[i].dv, 1, mem);
        struct problem pr;
        fcl_forward_problem(&a, &pr);
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &pr, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, built[i].cc >= 90 ? "tensor-core-wgmma" : "tensor-core");
        char label[96];
        snprintf(label, sizeof(label), "%s d=%d dv=%d", plan.kernel->name, built[i].d, built[i].dv);
        check_built_footprint(ctx, &plan, label);
        flashcl_context_destroy(&ctx);
    }
    clReleaseMemObject(mem);
}
END_TEST

/* The FMA backward kernels with a value head dim: the table's footprint (dO's and V's tiles at dv) is what
 * their built kernels declare. */
START_TEST(value_head_dim_backward_footprints)
{
    struct test_env *e = test_env_get();
    static const struct {
        const char *options;
        int d, dv;
        const char *kernel;
    } cases[] = {
        {"", 48, 24, "backward-tiled"},
        {"backward-tiled:block_m=16,block_n=32", 192, 128, "backward-tiled"},
        {"backward-tiled:off", 40, 72, "backward"},
        {"backward-tiled:off;backward:block_m=8,block_n=16", 20, 36, "backward"},
    };
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * 256 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(mem);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        flashcl_context *ctx = test_context_with_options(cases[i].options);
        struct flashcl_attention a = dv_shape(cases[i].d, cases[i].dv, 1, mem);
        struct problem p;
        fcl_forward_problem(&a, &p);
        p.op = OP_BACKWARD;
        struct plan plan;
        ck_assert_flashcl_ok(fcl_plan(ctx, &p, 1.0f, &plan));
        ck_assert_str_eq(plan.kernel->name, cases[i].kernel);
        char label[96];
        snprintf(label, sizeof(label), "%s d=%d dv=%d", cases[i].kernel, cases[i].d, cases[i].dv);
        check_built_steps_footprint(ctx, &plan, label);
    }
    clReleaseMemObject(mem);
}
END_TEST

/* Asks which backward kernel and tile a call of this shape would use under ctx (aligned views, LSE,
 * gradients in a buffer of their own). */
/* The backward's plan of a [1, 64, 1, d] problem, with a softcap (0: none) and ALiBi slopes (NULL: none). */
static struct flashcl_tile backward_config_modified(flashcl_context *ctx, int d, flashcl_dtype dtype, int causal,
                                                    enum flashcl_precision precision, float softcap, cl_mem slopes,
                                                    size_t *workspace)
{
    struct test_env *e = test_env_get();
    const size_t rows = 64 * (size_t)d * flashcl_dtype_size(dtype);
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * rows, NULL, NULL);
    cl_mem lse = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 64 * sizeof(float), NULL, NULL);
    cl_mem grads = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 4 * rows, NULL, NULL);
    ck_assert(mem && lse && grads);
    struct flashcl_attention a = shape(d, dtype, causal, mem);
    a.precision = precision;
    a.softcap = softcap;
    a.alibi_slopes = (flashcl_vector){slopes, 0};
    a.lse = flashcl_tensor_lse(lse, 64, 1);
    struct flashcl_attention_grad g = {0};
    flashcl_tensor *views[] = {&g.d_o, &g.d_q, &g.d_k, &g.d_v};
    for (int i = 0; i < 4; i++) {
        *views[i] = flashcl_tensor_bnhd(grads, dtype, 64, 1, (size_t)d);
        views[i]->offset = (size_t)i * rows;
    }
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_backward_config(ctx, &a, &g, &t));
    if (workspace)
        ck_assert_flashcl_ok(flashcl_backward_workspace_size(ctx, &a, &g, workspace));
    clReleaseMemObject(mem);
    clReleaseMemObject(lse);
    clReleaseMemObject(grads);
    return t;
}

static struct flashcl_tile backward_config_and_workspace(flashcl_context *ctx, int d, flashcl_dtype dtype, int causal,
                                                         enum flashcl_precision precision, size_t *workspace)
{
    return backward_config_modified(ctx, d, dtype, causal, precision, 0.0f, NULL, workspace);
}

static struct flashcl_tile backward_config_precision(flashcl_context *ctx, int d, flashcl_dtype dtype, int causal,
                                                     enum flashcl_precision precision)
{
    return backward_config_and_workspace(ctx, d, dtype, causal, precision, NULL);
}

static struct flashcl_tile backward_config_of(flashcl_context *ctx, int d, flashcl_dtype dtype, int causal)
{
    return backward_config_precision(ctx, d, dtype, causal, FLASHCL_PRECISION_EXACT);
}

/* The TF32 backward's built-in shapes where tensor cores are assumed (nothing launched): for every
 * head dim it takes, both precisions and masks, an H200's 227 KB and a 99 KB part plan it with a
 * shape whose footprint fits; exact f32, and head dims that are no multiple of 16, never. */
START_TEST(backward_tf32_shapes_fit)
{
    static const size_t locals[] = {232448, 101376};
    for (int i = 0; i < 2; i++) {
        flashcl_context *ctx = assumed_tensor_cores(locals[i], 0, 0, 0, 0);
        for (int d = 8; d <= 136; d += 8)
            for (int causal = 0; causal < 2; causal++) {
                for (int precision = FLASHCL_PRECISION_TF32; precision <= FLASHCL_PRECISION_TF32X3; precision++) {
                    const struct flashcl_tile t = backward_config_precision(ctx, d, FLASHCL_F32, causal, precision);
                    if (d % 16 != 0 || d > 128) {
                        ck_assert_str_ne(t.kernel, "backward-tf32");
                        continue;
                    }
                    ck_assert_str_eq(t.kernel, "backward-tf32");
                    ck_assert_int_eq(t.source, FLASHCL_TILE_DEFAULT);
                    ck_assert_uint_le(t.local_bytes + FCL_LOCAL_SLACK, locals[i]);
                    /* The first built-in shape wherever it fits: on the H200 up to d = 128. */
                    if (i == 0) {
                        ck_assert_int_eq(t.warps, 4);
                        ck_assert_int_eq(t.block_m, 64);
                        ck_assert_int_eq(t.block_n, 64);
                    }
                }
                const struct flashcl_tile exact = backward_config_precision(ctx, d, FLASHCL_F32, causal,
                                                                            FLASHCL_PRECISION_EXACT);
                ck_assert_str_ne(exact.kernel, "backward-tf32");
            }
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

/* A softcapped call, or one with ALiBi slopes, on an assumed H200 plans the wgmma kernels, which compute both:
 * the forward and decode kernels (nv_mma.h's softmax), the backward (score_mod.h's P); the config query says
 * so. */
START_TEST(softcap_plans)
{
    struct test_env *e = test_env_get();
    flashcl_context *ctx = assumed_h200("");
    cl_mem mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 2 * 64 * 64 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(mem);
    struct flashcl_attention a = shape(64, FLASHCL_F16, 1, mem);
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_str_eq(t.kernel, "tensor-core-wgmma");
    a.softcap = 30.0f;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_str_eq(t.kernel, "tensor-core-wgmma");
    struct flashcl_attention one = a;  /* one query row: decode */
    one.seq_q = 1;
    one.q = flashcl_tensor_bnhd(mem, FLASHCL_F16, 1, 1, 64);
    one.o = one.q;
    one.o.offset = a.o.offset;  /* the second half of the buffer, as shape()'s O */
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &one, &t));
    ck_assert_str_eq(t.kernel, "decode-tensor-core");
    cl_mem slopes = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 4 * sizeof(float), NULL, NULL);
    ck_assert_ptr_nonnull(slopes);
    a.softcap = one.softcap = 0.0f;
    a.alibi_slopes = one.alibi_slopes = (flashcl_vector){slopes, 0};
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    ck_assert_str_eq(t.kernel, "tensor-core-wgmma");
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &one, &t));
    ck_assert_str_eq(t.kernel, "decode-tensor-core");
    flashcl_context_destroy(&ctx);
    clReleaseMemObject(mem);
    ctx = assumed_h200("");
    size_t bytes = 0;
    ck_assert_str_eq(backward_config_and_workspace(ctx, 64, FLASHCL_F16, 1, FLASHCL_PRECISION_EXACT, &bytes).kernel,
                     "backward-wgmma");
    /* With the cap, 64-query blocks: its slopes beside 128 queries' S and dP would spill. */
    const struct flashcl_tile capped =
        backward_config_modified(ctx, 64, FLASHCL_F16, 1, FLASHCL_PRECISION_EXACT, 30.0f, NULL, &bytes);
    ck_assert_str_eq(capped.kernel, "backward-wgmma");
    ck_assert_int_eq(capped.block_m, 64);
    ck_assert_str_eq(
        backward_config_modified(ctx, 64, FLASHCL_F16, 1, FLASHCL_PRECISION_EXACT, 0.0f, slopes, &bytes).kernel,
        "backward-wgmma");
    flashcl_context_destroy(&ctx);
    clReleaseMemObject(slopes);
}
END_TEST

/* The wgmma backward on an assumed H200: first among the backward kernels; off where its options say so, where
 * either mma.sync backward is named, or where the two-pass one is turned off (gives_way_to), unless it is named
 * itself; the opt-in fused one turned off changes nothing. Its forced shapes planned and reported as given
 * (block_m the streamed query block, not the 16 rows a warp a work-group owns). */
START_TEST(backward_wgmma_gives_way)
{
    static const struct {
        const char *options, *want;
        int warps, block_m, block_n;
    } cases[] = {
        {"", "backward-wgmma", 8, 128, 128},  /* d = 64: 8 warps own 128 keys; 128-query, 128-key blocks */
        {"backward-wgmma:off", "backward-tensor-core", 0, 0, 0},
        {"backward-tensor-core-fused:off", "backward-wgmma", 8, 128, 128},  /* opt-in: off takes nothing along */
        {"backward-tensor-core:warps=4,block_m=64,block_n=64", "backward-tensor-core", 4, 64, 64},
        {"backward-tensor-core-fused:on", "backward-tensor-core-fused", 0, 0, 0},
        {"backward-tensor-core:off", "backward-tiled", 0, 0, 0},
        {"backward-tensor-core:off;backward-wgmma:warps=4,block_m=128,block_n=64", "backward-wgmma", 4, 128, 64},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        flashcl_context *ctx = assumed_h200(cases[i].options);
        size_t bytes = 0;
        const struct flashcl_tile t = backward_config_and_workspace(ctx, 64, FLASHCL_F16, 1, FLASHCL_PRECISION_EXACT,
                                                                    &bytes);
        ck_assert_msg(kernel_is(t.kernel, cases[i].want), "\"%s\": %s", cases[i].options, t.kernel);
        if (cases[i].warps) {
            ck_assert_int_eq(t.warps, cases[i].warps);
            ck_assert_int_eq(t.block_m, cases[i].block_m);
            ck_assert_int_eq(t.block_n, cases[i].block_n);
        }
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

/* backward-tensor-core-fused is opt-in: planned only where a clause names it ("on" or a shape), not when
 * the two-pass kernel is merely off; its workspace adds dQ's f32 accumulator (64 rows, d = 64 here) and
 * the counters. With tensor cores assumed (an H200's local memory), nothing runs. */
START_TEST(fused_backward_opt_in)
{
    static const char *const options[] = {"", "backward-tensor-core-fused:on", "backward-tensor-core:off",
                                          "backward-tensor-core-fused:warps=2,block_m=32,block_n=32"};
    static const char *const expected[] = {
        "backward-tensor-core", "backward-tensor-core-fused",
        "backward-tiled", "backward-tensor-core-fused"};
    struct test_env *e = test_env_get();
    for (int i = 0; i < 4; i++) {
        struct flashcl_context_params p = {0};
        p.context = e->cl;
        p.device = e->device;
        p.local_mem_bytes = 232448;
        p.tuning_file = "";
        p.kernel_options = options[i];
        const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .assume_compute_capability = 90};
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(fcl_context_create(&p, &hooks, &ctx));
        size_t bytes = 0;
        const struct flashcl_tile t =
            backward_config_and_workspace(ctx, 64, FLASHCL_F16, 1, FLASHCL_PRECISION_EXACT, &bytes);
        ck_assert_str_eq(t.kernel, expected[i]);
        const size_t rows = 64;  /* batch 1, one head, 64 queries (shape()) */
        if (kernel_is(expected[i], "backward-tensor-core-fused")) {
            const size_t chunk = t.block_m % 32 == 0 ? 32 : 16;
            ck_assert_uint_eq(bytes, 4 * ((rows + 63) / 64 * 64 + rows * 64 + 1 + (rows + chunk - 1) / chunk));
        } else {
            ck_assert_uint_eq(bytes, 4 * rows);
        }
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

/* A kind=backward line (what flashcl-probe --tune writes for a backward key) is read by a fresh context and
 * used by the backward planner for its key only. 32 x 16 is not the rule's 64 x 64 tile. */
START_TEST(backward_entry_used)
{
    const struct flashcl_tuned_config c = {"backward-tiled", FLASHCL_F32, 64, 0, 32, 16, 0, 0, 1.0};
    char line[512];
    line_for(&c, line, sizeof(line));
    ck_assert_ptr_nonnull(strstr(line, "|kind=backward|kernel=backward-tiled|"));
    write_one_entry(&c);
    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, 0);
    ck_assert_int_eq(w.warnings, 0);
    struct flashcl_tile t = backward_config_of(ctx, 64, FLASHCL_F32, 0);
    ck_assert_str_eq(t.kernel, "backward-tiled");
    ck_assert_int_eq(t.source, FLASHCL_TILE_TUNED);
    ck_assert_int_eq(t.block_m, 32);
    ck_assert_int_eq(t.block_n, 16);
    /* Another mask keeps the rule; the forward of the same key is not affected. */
    ck_assert_int_ne(backward_config_of(ctx, 64, FLASHCL_F32, 1).source, FLASHCL_TILE_TUNED);
    ck_assert_int_ne(config_of(ctx, 64, FLASHCL_F32, 0).source, FLASHCL_TILE_TUNED);
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

/* ---- the decode kernel's entries ---- */

enum { DEC_D = 32, DEC_KEYS = 2048 };
/* Contexts only planned with, never launched: room for any shape on any device. */
#define PLAN_LOCAL ((size_t)1 << 20)

enum { DEC_KV_CACHE = 1, DEC_CAUSAL = 2 };

/* What a decode call gets under ctx: one query a sequence, f32, d = 32, a cache of seq_kv keys; flags
 * DEC_KV_CACHE: the same call through flashcl_forward_kv_cache_config (host lengths, every cache full),
 * DEC_CAUSAL: with the causal mask. */
static struct flashcl_tile decode_config_of(flashcl_context *ctx, int batch, int heads_q, int heads_kv, int seq_kv,
                                            int flags)
{
    struct test_env *e = test_env_get();
    const size_t q_bytes = (size_t)batch * heads_q * DEC_D * 4;
    const size_t kv_bytes = (size_t)batch * seq_kv * heads_kv * DEC_D * 4;
    cl_mem q = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, q_bytes, NULL, NULL);
    cl_mem o = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, q_bytes, NULL, NULL);
    cl_mem kv = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, kv_bytes, NULL, NULL);
    ck_assert(q && o && kv);
    struct flashcl_attention a = {0};
    a.batch = batch;
    a.seq_q = 1;
    a.seq_kv = seq_kv;
    a.heads_q = heads_q;
    a.heads_kv = heads_kv;
    a.head_dim = DEC_D;
    a.q = flashcl_tensor_bnhd(q, FLASHCL_F32, 1, (size_t)heads_q, DEC_D);
    a.o = flashcl_tensor_bnhd(o, FLASHCL_F32, 1, (size_t)heads_q, DEC_D);
    a.k = a.v = flashcl_tensor_bnhd(kv, FLASHCL_F32, (size_t)seq_kv, (size_t)heads_kv, DEC_D);
    a.mask = flags & DEC_CAUSAL ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    struct flashcl_tile t;
    if (flags & DEC_KV_CACHE) {
        int lengths[16];
        ck_assert_int_le(batch, 16);
        for (int b = 0; b < batch; b++)
            lengths[b] = seq_kv;
        struct flashcl_kv_lengths kl = {0};
        kl.cache_seqlens = lengths;
        ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(ctx, &a, &kl, NULL, &t));
    } else {
        ck_assert_flashcl_ok(flashcl_forward_config(ctx, &a, &t));
    }
    clReleaseMemObject(q);
    clReleaseMemObject(o);
    clReleaseMemObject(kv);
    ck_assert_str_eq(t.kernel, "decode");
    return t;
}

/* f32 d = 32 for 4 query heads a KV head (rows 4): 96-key blocks (neither the rule's 64 nor its 32) and 5
 * splits measured on 2 (sequence, KV head) pairs. */
static struct flashcl_tuned_config decode_entry(void)
{
    struct flashcl_tuned_config c = {"decode", FLASHCL_F32, DEC_D, 0, 0, 96, 0, 0, 0.5};
    c.rows = 4;
    c.splits = 5;
    c.groups = 2;
    return c;
}

static void assert_tile(struct flashcl_tile t, enum flashcl_tile_source source, int block_n, int splits)
{
    ck_assert_int_eq(t.source, source);
    ck_assert_int_eq(t.block_n, block_n);
    ck_assert_int_eq(t.splits, splits);
}

/* The decode of heads_q:heads_kv query/KV heads, planned from the file on the device's own local memory,
 * runs the tuned plan right (test_run_case checks it against the double reference) where its footprint
 * fits; smaller local memories plan otherwise, which the caller's assertions on PLAN_LOCAL cover. */
static void run_tuned_decode(struct test_warn_log *w, int heads_q, int heads_kv, unsigned seed, const char *test)
{
    flashcl_context *ctx = context_with_file(w, 0);
    if (decode_config_of(ctx, 1, heads_q, heads_kv, DEC_KEYS, 0).source == FLASHCL_TILE_TUNED) {
        const struct test_case run = {1, 1, DEC_KEYS, heads_q, heads_kv, DEC_D, FLASHCL_F32, 0, 0, LAYOUT_BNHD, 1};
        struct case_result r;
        rng_seed(seed);
        test_run_case(ctx, &run, &r);
        ck_assert_str_eq(r.kernel, "decode");
    } else {
        printf("%s: the tuned shape does not fit this device's local memory; not run\n", test);
    }
    flashcl_context_destroy(&ctx);
}

/* A decode line names its rows and split count, and the planner uses both where they apply: the split count
 * scaled to the call's grid (within the measured work-groups, each split two key blocks at least), through
 * every config query; the tuned plan runs correctly. */
START_TEST(decode_entry_used)
{
    const struct flashcl_tuned_config c = decode_entry();
    char line[512], clause[64];
    line_for(&c, line, sizeof(line));
    ck_assert_ptr_nonnull(
        strstr(line, "|kind=forward|kernel=decode|dtype=f32|d=32|mask=none|rows=4|block_n=96|splits=5|groups=2|"));
    ck_assert_flashcl_ok(flashcl_tuning_override(&c, clause, sizeof(clause)));
    ck_assert_str_eq(clause, "decode:block_n=96,splits=5");
    write_one_entry(&c);
    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, PLAN_LOCAL);
    ck_assert_int_eq(w.warnings, 0);
    /* The measured grid, through each config query and with causal (one query sees every key either way). */
    assert_tile(decode_config_of(ctx, 1, 8, 2, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 5);
    assert_tile(decode_config_of(ctx, 1, 8, 2, DEC_KEYS, DEC_KV_CACHE), FLASHCL_TILE_TUNED, 96, 5);
    assert_tile(decode_config_of(ctx, 1, 8, 2, DEC_KEYS, DEC_CAUSAL), FLASHCL_TILE_TUNED, 96, 5);
    /* Other grids: 5 x 2 work-groups over their (sequence, KV head) pairs, within the key blocks. */
    assert_tile(decode_config_of(ctx, 2, 8, 2, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 2);   /* 10 / 4 */
    assert_tile(decode_config_of(ctx, 1, 4, 1, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 10);  /* 10 / 1 */
    assert_tile(decode_config_of(ctx, 8, 8, 2, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 1);   /* 10 / 16 */
    assert_tile(decode_config_of(ctx, 1, 8, 2, 300, 0), FLASHCL_TILE_TUNED, 96, 2);        /* 4 key blocks */

    /* Rows 8 and 1 are other keys: the plan a context without the file makes. */
    flashcl_context *none = make_context("", PLAN_LOCAL, NULL, &w);
    for (int i = 0; i < 2; i++) {
        const int heads_q = i ? 2 : 8, heads_kv = i ? 2 : 1;
        const struct flashcl_tile untuned = decode_config_of(none, 1, heads_q, heads_kv, DEC_KEYS, 0);
        ck_assert_int_ne(untuned.source, FLASHCL_TILE_TUNED);
        assert_tile(decode_config_of(ctx, 1, heads_q, heads_kv, DEC_KEYS, 0), untuned.source, untuned.block_n,
                    untuned.splits);
    }
    flashcl_context_destroy(&none);
    flashcl_context_destroy(&ctx);

    /* Run where the device's own local memory takes the tuned shape (a 31 KB footprint). */
    run_tuned_decode(&w, 8, 2, 41, "decode_entry_used");
    unlink(path);
}
END_TEST

/* A group of 5..8 query heads a KV head runs the decode kernel of 8 rows (the rows rounded up to a power of
 * two), so its line is rows=8, as flashcl-probe writes it for its group of 7 (a rows=7 line is malformed:
 * decode_entry_malformed). Such a line, measured on 14:2 heads (two pairs), is read back and used by
 * groups 5, 7 and 8 with the split count scaled to their grids, not by groups of 4 or 9 (rows 4, 16); the
 * tuned plan runs a group of 7 correctly. */
START_TEST(decode_entry_odd_group)
{
    struct flashcl_tuned_config c = decode_entry();
    c.rows = 8;
    char line[512];
    line_for(&c, line, sizeof(line));
    ck_assert_ptr_nonnull(strstr(line, "|kernel=decode|dtype=f32|d=32|mask=none|rows=8|block_n=96|splits=5|groups=2|"));
    write_one_entry(&c);
    struct test_warn_log w = {0};
    flashcl_context *ctx = context_with_file(&w, PLAN_LOCAL);
    ck_assert_int_eq(w.warnings, 0);
    assert_tile(decode_config_of(ctx, 1, 14, 2, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 5);             /* 7, measured */
    assert_tile(decode_config_of(ctx, 1, 14, 2, DEC_KEYS, DEC_KV_CACHE), FLASHCL_TILE_TUNED, 96, 5);
    assert_tile(decode_config_of(ctx, 1, 14, 2, DEC_KEYS, DEC_CAUSAL), FLASHCL_TILE_TUNED, 96, 5);
    assert_tile(decode_config_of(ctx, 1, 10, 2, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 5);             /* 5 */
    assert_tile(decode_config_of(ctx, 1, 7, 1, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 10);             /* 7: 10 / 1 */
    assert_tile(decode_config_of(ctx, 4, 28, 4, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 1);             /* 7: 10 / 16 */
    assert_tile(decode_config_of(ctx, 1, 16, 2, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 5);             /* 8 */
    flashcl_context *none = make_context("", PLAN_LOCAL, NULL, &w);
    static const int others[2][2] = {{8, 2}, {18, 2}};  /* groups 4 and 9: rows 4 and 16, other keys */
    for (int i = 0; i < 2; i++) {
        const struct flashcl_tile untuned = decode_config_of(none, 1, others[i][0], others[i][1], DEC_KEYS, 0);
        ck_assert_int_ne(untuned.source, FLASHCL_TILE_TUNED);
        assert_tile(decode_config_of(ctx, 1, others[i][0], others[i][1], DEC_KEYS, 0), untuned.source,
                    untuned.block_n, untuned.splits);
    }
    flashcl_context_destroy(&none);
    flashcl_context_destroy(&ctx);

    run_tuned_decode(&w, 14, 2, 43, "decode_entry_odd_group");
    unlink(path);
}
END_TEST

/* kernel_options win over the file, each setting alone: a forced split count goes with the tuned block; a
 * forced block leaves the split count to the rule, as without the file. A line of the older kind (no rows,
 * no split count) serves every rows with the rule's split count. */
START_TEST(decode_forced_wins_and_old_lines)
{
    const struct flashcl_tuned_config c = decode_entry();
    write_one_entry(&c);
    struct test_warn_log w = {0};
    flashcl_context *ctx = make_context(path, PLAN_LOCAL, "decode:splits=3", &w);
    assert_tile(decode_config_of(ctx, 1, 8, 2, DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96, 3);
    flashcl_context_destroy(&ctx);
    ctx = make_context(path, PLAN_LOCAL, "decode:block_n=64,splits=7", &w);
    assert_tile(decode_config_of(ctx, 1, 8, 2, DEC_KEYS, 0), FLASHCL_TILE_FORCED, 64, 7);
    flashcl_context_destroy(&ctx);
    ctx = make_context(path, PLAN_LOCAL, "decode:block_n=64", &w);
    flashcl_context *none = make_context("", PLAN_LOCAL, "decode:block_n=64", &w);
    const int rule_splits = decode_config_of(none, 1, 8, 2, DEC_KEYS, 0).splits;
    assert_tile(decode_config_of(ctx, 1, 8, 2, DEC_KEYS, 0), FLASHCL_TILE_FORCED, 64, rule_splits);
    flashcl_context_destroy(&ctx);
    flashcl_context_destroy(&none);
    ck_assert_int_eq(w.warnings, 0);

    char line[512], text[1024];
    line_for(&c, line, sizeof(line));
    char *rows = strstr(line, "|rows=4"), *splits = strstr(line, "|splits=");
    ck_assert(rows && splits);
    memmove(rows, rows + strlen("|rows=4"), strlen(rows + strlen("|rows=4")) + 1);
    splits = strstr(line, "|splits=");
    memmove(splits, strstr(line, "|ms="), strlen(strstr(line, "|ms=")) + 1);
    snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n", line);
    write_file(text);
    ctx = context_with_file(&w, PLAN_LOCAL);
    ck_assert_int_eq(w.warnings, 0);
    none = make_context("", PLAN_LOCAL, "decode:block_n=96", &w);
    static const int grids[3][2] = {{8, 2}, {8, 1}, {2, 2}};  /* rows 4, 8, 1 */
    for (int i = 0; i < 3; i++)
        assert_tile(decode_config_of(ctx, 1, grids[i][0], grids[i][1], DEC_KEYS, 0), FLASHCL_TILE_TUNED, 96,
                    decode_config_of(none, 1, grids[i][0], grids[i][1], DEC_KEYS, 0).splits);
    flashcl_context_destroy(&none);
    flashcl_context_destroy(&ctx);
    unlink(path);
}
END_TEST

/* A decode line's rows, splits and groups out of range, one without the other, or on another kernel: the file
 * is refused whole with a WARN saying why; the formatter and the override refuse such configurations. */
START_TEST(decode_entry_malformed)
{
    const struct flashcl_tuned_config c = decode_entry();
    char good[512];
    line_for(&c, good, sizeof(good));
    static const struct {
        const char *from, *to, *why;
    } edits[] = {
        {"|rows=4|", "|rows=3|", "rows must be a power of two"},
        {"|rows=4|", "|rows=7|", "rows must be a power of two"},  /* a group of 7 runs the kernel of 8 rows */
        {"|rows=4|", "|rows=32|", "rows must be a power of two"},
        {"|splits=5|", "|splits=0|", "must be positive integers"},
        {"|splits=5|", "|splits=x|", "must be positive integers"},
        {"|splits=5|", "|splits=65|", "splits must be 1..64"},
        {"|splits=5|groups=2|", "|splits=5|", "splits needs groups"},
        {"|splits=5|groups=2|", "|groups=2|", "splits needs groups"},
        {"|kernel=decode|", "|kernel=portable|", "only the decode kernel's"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char line[600], text[700];
        const char *at = strstr(good, edits[i].from);
        ck_assert_ptr_nonnull(at);
        snprintf(line, sizeof(line), "%.*s%s%s", (int)(at - good), good, edits[i].to, at + strlen(edits[i].from));
        if (strstr(edits[i].to, "portable"))  /* a portable line with every axis it needs, and rows */
            snprintf(strstr(line, "|block_n="), sizeof(line) - (size_t)(strstr(line, "|block_n=") - line),
                     "|block_m=16|block_n=16|ms=1.0");
        snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n", line);
        write_file(text);
        struct test_warn_log w = {0};
        flashcl_context *ctx = context_with_file(&w, PLAN_LOCAL);
        ck_assert_msg(w.warnings == 1, "edit %zu: %d warnings", i, w.warnings);
        ck_assert_msg(strstr(w.last, edits[i].why) && strstr(w.last, "ignoring the file"), "edit %zu: %s", i, w.last);
        ck_assert_int_ne(decode_config_of(ctx, 1, 8, 2, DEC_KEYS, 0).source, FLASHCL_TILE_TUNED);
        flashcl_context_destroy(&ctx);
    }
    unlink(path);

    struct flashcl_tuned_config bad[4] = {c, c, c, {"portable", FLASHCL_F32, 30, 0, 5, 7, 0, 0, 1.0}};
    bad[0].rows = 3;
    bad[1].groups = 0;
    bad[2].splits = 65;
    bad[3].splits = 2;
    bad[3].groups = 1;
    for (int i = 0; i < 4; i++) {
        char line[512];
        ck_assert_int_eq(flashcl_tuning_format(test_env_get()->ctx, &bad[i], 0, line, sizeof(line)),
                         FLASHCL_INVALID_VALUE);
        ck_assert_int_eq(flashcl_tuning_override(&bad[i], line, sizeof(line)), FLASHCL_INVALID_VALUE);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(), i == 3 ? "decode kernel" : i == 1 ? "groups" : "must be"));
    }
}
END_TEST

/* The TF32 kernels' entries name the precision they were measured with and apply to it alone; one
 * without a precision applies to both. A precision on another kernel's entry, or one of another word,
 * is refused: in a configuration (its status) and in a line (the file ignored, with a WARN). */
static void check_tf32_tile(struct flashcl_tile t, enum flashcl_tile_source source, int block_m, int block_n,
                            int warps)
{
    ck_assert_str_eq(t.kernel, "backward-tf32");
    ck_assert_int_eq(t.source, source);
    ck_assert_int_eq(t.block_m, block_m);
    ck_assert_int_eq(t.block_n, block_n);
    ck_assert_int_eq(t.warps, warps);
}

START_TEST(tf32_entries_by_precision)
{
    const size_t h200 = 232448;
    struct flashcl_tuned_config tf32 = {"backward-tf32", FLASHCL_F32, 64, 0, 32, 64, 2, 0, 1.0};
    struct flashcl_tuned_config x3 = {"backward-tf32", FLASHCL_F32, 64, 0, 64, 32, 2, 0, 2.0};
    tf32.precision = FLASHCL_PRECISION_TF32;
    x3.precision = FLASHCL_PRECISION_TF32X3;
    char a[512], b[512], text[1400];
    line_for(&tf32, a, sizeof(a));
    line_for(&x3, b, sizeof(b));
    ck_assert_ptr_nonnull(strstr(a, "|mask=none|precision=tf32|"));
    ck_assert_ptr_nonnull(strstr(b, "|mask=none|precision=tf32x3|"));
    snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n%s\n", a, b);
    write_file(text);
    flashcl_context *ctx = assumed_tensor_cores(h200, 0, 0, 0, 1);
    check_tf32_tile(backward_config_precision(ctx, 64, FLASHCL_F32, 0, FLASHCL_PRECISION_TF32), FLASHCL_TILE_TUNED,
                    32, 64, 2);
    check_tf32_tile(backward_config_precision(ctx, 64, FLASHCL_F32, 0, FLASHCL_PRECISION_TF32X3), FLASHCL_TILE_TUNED,
                    64, 32, 2);
    check_tf32_tile(backward_config_precision(ctx, 64, FLASHCL_F32, 1, FLASHCL_PRECISION_TF32),  /* causal: none */
                    FLASHCL_TILE_DEFAULT, 64, 64, 4);
    flashcl_context_destroy(&ctx);

    /* The forward TF32 kernel's lines alike: a 3xTF32 line leaves TF32 calls their built-in shape. */
    struct flashcl_tuned_config fwd = {"tf32", FLASHCL_F32, 64, 0, 64, 32, 4, 1, 1.0};
    fwd.precision = FLASHCL_PRECISION_TF32X3;
    write_one_entry(&fwd);
    ctx = assumed_tensor_cores(h200, 0, 0, 0, 1);
    cl_mem mem = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE, 2 * 64 * 64 * 4, NULL, NULL);
    ck_assert_ptr_nonnull(mem);
    struct flashcl_attention attn = shape(64, FLASHCL_F32, 0, mem);
    struct flashcl_tile t;
    attn.precision = FLASHCL_PRECISION_TF32X3;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &attn, &t));
    ck_assert_str_eq(t.kernel, "tf32");
    check_mma_shape(t, FLASHCL_TILE_TUNED, 4, 1, 32, h200);
    attn.precision = FLASHCL_PRECISION_TF32;
    ck_assert_flashcl_ok(flashcl_forward_config(ctx, &attn, &t));
    check_mma_shape(t, FLASHCL_TILE_DEFAULT, 4, 2, 64, h200);
    clReleaseMemObject(mem);
    flashcl_context_destroy(&ctx);

    tf32.precision = FLASHCL_PRECISION_EXACT;  /* measured for either */
    line_for(&tf32, a, sizeof(a));
    ck_assert_ptr_null(strstr(a, "precision"));
    write_one_entry(&tf32);
    ctx = assumed_tensor_cores(h200, 0, 0, 0, 1);
    for (int precision = FLASHCL_PRECISION_TF32; precision <= FLASHCL_PRECISION_TF32X3; precision++)
        check_tf32_tile(backward_config_precision(ctx, 64, FLASHCL_F32, 0, precision), FLASHCL_TILE_TUNED, 32, 64, 2);
    flashcl_context_destroy(&ctx);

    struct flashcl_tuned_config mma = {"tensor-core", FLASHCL_F16, 128, 0, 128, 64, 4, 2, 1.0};
    mma.precision = FLASHCL_PRECISION_TF32;
    x3.precision = (enum flashcl_precision)7;
    const struct flashcl_tuned_config *bad[2] = {&mma, &x3};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(flashcl_tuning_format(test_env_get()->ctx, bad[i], 0, a, sizeof(a)), FLASHCL_INVALID_VALUE);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(), i == 0 ? "only the TF32 kernels'" : "tf32 or tf32x3"));
        ck_assert_int_eq(flashcl_tuning_override(bad[i], a, sizeof(a)), FLASHCL_INVALID_VALUE);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(), i == 0 ? "only the TF32 kernels'" : "tf32 or tf32x3"));
    }

    mma.precision = FLASHCL_PRECISION_EXACT;
    char mma_line[512];
    line_for(&mma, mma_line, sizeof(mma_line));
    const char *at = strstr(mma_line, "|mask=none|");
    ck_assert_ptr_nonnull(at);
    char lines[2][600];
    snprintf(lines[0], sizeof(lines[0]), "%.*s|mask=none|precision=tf32|%s", (int)(at - mma_line), mma_line,
             at + strlen("|mask=none|"));
    at = strstr(b, "|precision=tf32x3|");
    snprintf(lines[1], sizeof(lines[1]), "%.*s|precision=exact|%s", (int)(at - b), b,
             at + strlen("|precision=tf32x3|"));
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof(text), "flashcl-tuning 2\n%s\n", lines[i]);
        write_file(text);
        struct test_warn_log w = {0};
        ctx = context_with_file(&w, PLAN_LOCAL);
        ck_assert_msg(w.warnings == 1, "line %d: %d warnings", i, w.warnings);
        ck_assert_msg(strstr(w.last, i == 0 ? "only the TF32 kernels'" : "precision must be tf32 or tf32x3") &&
                          strstr(w.last, "ignoring the file"),
                      "line %d: %s", i, w.last);
        flashcl_context_destroy(&ctx);
    }
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tuning");
    TCase *tc = tcase_create("tuning file");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, round_trip_and_used);
    tcase_add_test(tc, other_devices_ignored_other_versions_fall_back);
    tcase_add_test(tc, version_1_files_read);
    tcase_add_test(tc, fallback_lines_never_raise_local_memory);
    tcase_add_test(tc, special_files_refused);
    tcase_add_test(tc, malformed_files_ignored);
    tcase_add_test(tc, nul_byte_anywhere);
    tcase_add_test(tc, tuned_tile_must_fit);
    tcase_add_test(tc, tensor_core_shapes_must_fit);
    tcase_add_test(tc, wgmma_planned_where_it_runs);
    tcase_add_test(tc, wgmma_build_choices);
    tcase_add_test(tc, mma_build_choices);
    tcase_add_test(tc, wgmma_gives_way_to_tensor_core);
    tcase_add_test(tc, candidates_match_built_kernels);
    tcase_add_test(tc, decode_kernels_match_built_kernels);
    tcase_add_test(tc, backward_tiled_matches_built_kernels);
    tcase_add_test(tc, backward_entry_used);
    tcase_add_test(tc, fused_backward_opt_in);
    tcase_add_test(tc, backward_wgmma_gives_way);
    tcase_add_test(tc, softcap_plans);
    tcase_add_test(tc, backward_tf32_shapes_fit);
    tcase_add_test(tc, tf32_entries_by_precision);
    tcase_add_test(tc, emulated_tensor_core_footprints);
    tcase_add_test(tc, decode_entry_used);
    tcase_add_test(tc, decode_entry_odd_group);
    tcase_add_test(tc, decode_forced_wins_and_old_lines);
    tcase_add_test(tc, decode_entry_malformed);
    suite_add_tcase(s, tc);
    TCase *dv = tcase_create("value head dim");
    tcase_set_timeout(dv, 600);
    tcase_add_test(dv, value_head_dim_plans);
    tcase_add_test(dv, value_head_dim_backward_footprints);
    suite_add_tcase(s, dv);
    return test_run_suite(s);
}
