/* The backward pass against the double-precision reference gradients, with
 * O and LSE from flashcl_forward (the real chain); the reference itself
 * against finite differences; determinism; rejected calls. Every output
 * starts poisoned (0xFF bytes: NaN in every dtype), and bytes outside the
 * output views must survive. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_common.h"
#include "flashcl_tools.h"

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

/* ---- against the reference ---- */

static const int head_dims[] = {1, 33, 64, 80, 128, 256};

START_TEST(head_dim)
{
    struct bwd_case c = {1, 37, 45, 2, 1, head_dims[_i], F32, _i % 2, 0, LAYOUT_BNHD, 0};
    run_case(NULL, "head_dim", &c, 100 + (uint64_t)_i, NULL);
}
END_TEST

/* batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, own_workspace */
/* head_dim 16 without and 32 with the mask, so these cases share few kernel builds. */
static const struct bwd_case shape_cases[] = {
    {2, 40, 40, 4, 2, 16, F32, 0, 0, LAYOUT_BNHD, 0},      /* GQA 2:1 */
    {1, 30, 50, 4, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1},      /* GQA, causal Nq < Nk, caller's workspace */
    {2, 33, 29, 3, 1, 16, F32, 0, 0, LAYOUT_BNHD, 0},      /* MQA */
    {1, 50, 20, 3, 1, 32, F32, 1, 0, LAYOUT_BNHD, 0},      /* MQA, causal Nq > Nk: 30 rows see no key */
    {1, 130, 150, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 0},    /* several blocks, N no multiple of any block */
    {1, 150, 77, 2, 1, 16, F32, 0, 0, LAYOUT_BNHD, 0},
    {2, 40, 60, 2, 2, 32, F32, 1, 0, LAYOUT_BHND, 0},
    {2, 45, 35, 4, 2, 32, F32, 1, 0, LAYOUT_PADDED, 1},    /* strides with gaps and an offset */
    {1, 1, 1, 1, 1, 16, F32, 0, 0, LAYOUT_BNHD, 0},        /* one key: P = 1, dS = 0 */
    {1, 1, 60, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 0},       /* one causal query sees every key */
    {1, 64, 64, 2, 2, 16, F32, 0, 0.5f, LAYOUT_BNHD, 0},   /* explicit scale */
    {1, 64, 64, 2, 2, 32, F32, 1, -0.3f, LAYOUT_BNHD, 0},  /* negative scale */
};

START_TEST(shapes)
{
    run_case(NULL, "shape", &shape_cases[_i], 200 + (uint64_t)_i, NULL);
}
END_TEST

/* ---- the register-tiled kernel (backward-tiled), forced ---- */

/* A context whose backward calls run on backward-tiled with this tile (the tensor-core kernel off, so f16 and
 * bf16 take it too). */
static flashcl_context *tiled_context(int block_m, int block_n)
{
    char options[128];
    snprintf(options, sizeof(options),
             "backward-tensor-core:off;backward-tiled:block_m=%d,block_n=%d", block_m,
             block_n);
    return test_context_with_options(options);
}

/* run_case on backward-tiled with this tile; flashcl_backward_config must report that kernel and tile, and the
 * dK/dV step's work-group (4 work-items per key). */
static void run_tiled(const char *what, const struct bwd_case *c, int block_m, int block_n, uint64_t seed)
{
    flashcl_context *ctx = tiled_context(block_m, block_n);
    struct problem p;
    problem_create(&p, c, seed);
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_backward_config(ctx, &p.a, &p.g, &t));
    problem_free(&p);
    ck_assert_str_eq(t.kernel, "backward-tiled");
    ck_assert_int_eq(t.source, FLASHCL_TILE_FORCED);
    ck_assert_int_eq(t.block_m, block_m);
    ck_assert_int_eq(t.block_n, block_n);
    ck_assert_int_eq(t.workgroup_size, 4 * block_n);
    char label[64];
    snprintf(label, sizeof(label), "%s, tiled %dx%d", what, block_m, block_n);
    struct bwd_result r;
    run_case(ctx, label, c, seed, &r);
    ck_assert_str_eq(r.kernel, "backward-tiled");
}

/* Every head dim class of the kernel (one float4 column, columns shared unevenly by the 16 work-items of a row
 * at d = 80, four per work-item at d = 256), each with another tile, lengths past one block on both sides. */
static const struct { int head_dim, block_m, block_n; } tiled_dims[] = {
    {4, 16, 16}, {32, 32, 48}, {64, 64, 64}, {80, 48, 32}, {128, 32, 64}, {256, 16, 32},
};

START_TEST(tiled_head_dim)
{
    const struct bwd_case c = {1, 70, 85, 2, 1, tiled_dims[_i].head_dim, F32, _i % 2, 0, LAYOUT_BNHD, 0};
    run_tiled("head_dim", &c, tiled_dims[_i].block_m, tiled_dims[_i].block_n, 1100 + (uint64_t)_i);
}
END_TEST

/* GQA, MQA, both causal alignments, layouts, lengths no multiple of any block, f16/bf16, on the smallest tile
 * and non-square ones. batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout,
 * own_workspace. */
static const struct { struct bwd_case c; int block_m, block_n; } tiled_cases[] = {
    {{2, 40, 40, 4, 2, 16, F32, 0, 0, LAYOUT_BNHD, 0}, 16, 16},       /* GQA 2:1 */
    {{1, 30, 50, 4, 2, 32, F32, 1, 0, LAYOUT_BNHD, 1}, 16, 16},       /* GQA, causal Nq < Nk, caller's workspace */
    {{2, 33, 29, 3, 1, 16, F32, 0, 0, LAYOUT_BNHD, 0}, 16, 48},       /* MQA */
    {{1, 50, 20, 3, 1, 32, F32, 1, 0, LAYOUT_BNHD, 0}, 16, 16},       /* MQA, causal Nq > Nk: 30 rows see no key */
    {{1, 130, 150, 2, 2, 32, F32, 1, 0, LAYOUT_BNHD, 0}, 48, 16},     /* blocks skipped and cut by the diagonal */
    {{1, 150, 77, 2, 1, 16, F32, 0, 0, LAYOUT_BNHD, 0}, 16, 48},
    {{2, 40, 60, 2, 2, 32, F32, 1, 0, LAYOUT_BHND, 0}, 16, 16},
    {{2, 45, 35, 4, 2, 32, F32, 1, 0, LAYOUT_PADDED, 1}, 16, 16},     /* strides with gaps and an offset */
    {{1, 1, 1, 1, 1, 16, F32, 0, 0, LAYOUT_BNHD, 0}, 16, 16},         /* one key: P = 1, dS = 0 */
    {{1, 77, 1, 2, 2, 16, F32, 1, 0, LAYOUT_BNHD, 0}, 16, 16},        /* one key, causal: 76 rows see none */
    {{1, 64, 64, 2, 2, 32, F32, 1, -0.3f, LAYOUT_BNHD, 0}, 16, 16},   /* negative scale */
    {{1, 40, 56, 4, 2, 64, F16, 1, 0, LAYOUT_PADDED, 0}, 16, 16},
    {{2, 50, 50, 2, 1, 48, F16, 0, 0, LAYOUT_BHND, 0}, 32, 16},
    {{1, 40, 56, 4, 2, 64, BF16, 1, 0, LAYOUT_PADDED, 0}, 16, 16},
    {{2, 50, 50, 2, 1, 48, BF16, 0, 0, LAYOUT_BHND, 1}, 32, 16},
    /* Windows whose left edge leaves keys 0..33 (and 0..34) unseen: dK = dV = 0, whole key blocks skipped. */
    {{1, 50, 90, 2, 2, 32, BF16, 0, 0, LAYOUT_BNHD, 0, 0, .windowed = 1, .window_left = 6, .window_right = -1}, 16, 16},
    {{1, 60, 100, 2, 1, 32, F32, 0, 0, LAYOUT_BHND, 0, 0, .windowed = 1, .window_left = 5, .window_right = 3}, 16, 32},
};

START_TEST(tiled_shapes)
{
    run_tiled("shape", &tiled_cases[_i].c, tiled_cases[_i].block_m, tiled_cases[_i].block_n, 1200 + (uint64_t)_i);
}
END_TEST

/* Head dims that are no multiple of 4 are planned on the portable kernel, even with backward-tiled forced; the
 * others on backward-tiled by default, and on the portable kernel once it is off. */
START_TEST(tiled_fallback)
{
    struct test_env *e = test_env_get();
    flashcl_context *off =
        test_context_with_options("backward-tensor-core:off;backward-tiled:off");
    static const int dims[] = {1, 6, 30, 33, 255, 4, 64, 256};
    for (int i = 0; i < (int)(sizeof(dims) / sizeof(dims[0])); i++) {
        const struct bwd_case c = {1, 20, 24, 2, 1, dims[i], F32, 1, 0, LAYOUT_BNHD, 0};
        struct problem p;
        problem_create(&p, &c, 1);
        struct flashcl_tile t;
        const bool tiled = dims[i] % 4 == 0;
        ck_assert_flashcl_ok(flashcl_backward_config(tiled_context(16, 16), &p.a, &p.g, &t));
        ck_assert_str_eq(t.kernel, tiled ? "backward-tiled" : "backward");
        ck_assert_int_eq(t.source, tiled ? FLASHCL_TILE_FORCED : FLASHCL_TILE_RULE);
        ck_assert_flashcl_ok(flashcl_backward_config(e->ctx, &p.a, &p.g, &t));
        ck_assert_str_eq(t.kernel, tiled ? "backward-tiled" : "backward");
        ck_assert_flashcl_ok(flashcl_backward_config(off, &p.a, &p.g, &t));
        ck_assert_str_eq(t.kernel, "backward");
        problem_free(&p);
    }
}
END_TEST

/* Sliding windows: both sides, causal-local, one side, rows with no key;
 * on the default backward kernels and the standard path. */
#define WINDOW(l, r) .windowed = 1, .window_left = (l), .window_right = (r)
static const struct bwd_case window_cases[] = {
    {1, 60, 60, 2, 2, 32, F32, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(9, 0)},
    {1, 40, 75, 4, 2, 24, F32, 0, 0, LAYOUT_BHND, 1, 0, WINDOW(12, 4)},
    {2, 70, 30, 2, 1, 16, F16, 0, 0, LAYOUT_PADDED, 0, 0, WINDOW(-1, 2)},
    {1, 50, 90, 2, 2, 33, BF16, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(6, -1)},
    {1, 40, 30, 2, 2, 16, F32, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(2147483647, 2147483647)},  /* past int's sums */
};

START_TEST(windows)
{
    run_case(NULL, "window", &window_cases[_i], 700 + (uint64_t)_i, NULL);
    struct bwd_case standard = window_cases[_i];
    standard.standard = 1;
    standard.own_workspace = 0;
    run_case(NULL, "window, standard", &standard, 700 + (uint64_t)_i, NULL);
    struct bwd_case tiny = window_cases[_i];
    run_case(test_context_with_options("backward-tensor-core:off;backward-tiled:off;"
                                       "backward:block_m=3,block_n=5"),
             "window, 3x5 tile",
             &tiny, 710 + (uint64_t)_i, NULL);
    if (window_cases[_i].head_dim % 4 == 0)  /* many 16-row and 16-key blocks: skipped, partly and wholly visible */
        run_tiled("window", &window_cases[_i], 16, 16, 720 + (uint64_t)_i);
}
END_TEST

/* The same masks on the tensor-core programs (emulated here, as compute capability 8.0 and 9.0): mma.sync with
 * 16-row and 16-key blocks (blocks skipped before and after the band, partly and wholly visible), wgmma's smallest
 * tiles, and TF32 for f32 (emulation is slow: small shapes, one run a kernel). Causal-local (Mistral's), left only, both sides with rows that see
 * no key, right only, GQA, and a cap, sinks and ALiBi in one. */
static const struct bwd_case tc_window_cases[] = {
    {1, 50, 160, 2, 1, 32, F16, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(40, 0)},
    {1, 100, 100, 2, 1, 64, BF16, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(20, -1)},
    {1, 120, 90, 2, 2, 16, F16, 0, 0.5f, LAYOUT_BHND, 0, 0, WINDOW(5, 3)},
    {1, 60, 100, 2, 1, 48, F16, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(-1, 7)},
    {1, 80, 80, 2, 2, 32, F16, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(30, 0), .softcap = 2.0f, .sinks = 1, .alibi = 1},
    {1, 60, 90, 2, 1, 32, F32, 0, 0, LAYOUT_BNHD, 0, 0, WINDOW(12, 4), FLASHCL_PRECISION_TF32},
};

START_TEST(windows_on_tensor_cores)
{
    const struct bwd_case *c = &tc_window_cases[_i];
    static const struct {
        const char *options;
        int cc;
        bool wgmma;
        const char *expect, *expect_f32;
        int kb;  /* the forced shape's local memory (d <= 64), emulated: a device with less skips the run */
    } runs[] = {
        /* two 16-key tiles a warp in the dK/dV pass (its innermost loop; a tile beside the band is masked) */
        {"backward-tensor-core:warps=1,block_m=16,block_n=32", 80, false, "backward-tensor-core", NULL, 0},
        {"", 80, false, NULL, "backward-tf32", 0},
        {"backward-wgmma:warps=4,block_m=64,block_n=64", 90, true, "backward-wgmma", NULL, 52},
    };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        const char *expect = c->dtype == F32 ? runs[i].expect_f32 : runs[i].expect;
        if (!expect)
            continue;
        flashcl_context *ctx = test_emulated_context(runs[i].options, runs[i].cc, runs[i].wgmma);
        char label[96];
        snprintf(label, sizeof(label), "window, %s emulated", expect);
        if (test_local_mem_holds(ctx, runs[i].kb, label)) {
            struct bwd_result r;
            run_case(ctx, label, c, 760 + (uint64_t)_i, &r);
            ck_assert_msg(kernel_is(r.kernel, expect), "%s ran %s", label, r.kernel);
        }
        flashcl_context_destroy(&ctx);
    }
}
END_TEST

static const struct bwd_case dtype_cases[] = {
    {1, 40, 56, 4, 2, 64, F16, 1, 0, LAYOUT_PADDED, 0},
    {2, 50, 50, 2, 1, 33, F16, 0, 0, LAYOUT_BHND, 0},
    {1, 40, 56, 4, 2, 64, BF16, 1, 0, LAYOUT_PADDED, 0},
    {2, 50, 50, 2, 1, 33, BF16, 0, 0, LAYOUT_BHND, 1},
};

START_TEST(dtypes)
{
    run_case(NULL, "dtype", &dtype_cases[_i], 300 + (uint64_t)_i, NULL);
}
END_TEST

/* The standard (materialised) backward: same reference, same bounds (its
 * D comes from P and dP in f32, not from the stored O, so f16/bf16 lose no
 * more than the flash path). */
static const struct bwd_case standard_cases[] = {
    {2, 40, 40, 4, 2, 16, F32, 0, 0, LAYOUT_BNHD, 0, 1},   /* GQA */
    {1, 50, 20, 3, 1, 32, F32, 1, 0, LAYOUT_BNHD, 1, 1},   /* MQA, causal Nq > Nk, caller's workspace */
    {2, 45, 35, 4, 2, 32, F32, 1, 0, LAYOUT_PADDED, 0, 1},
    {1, 30, 50, 2, 2, 80, F32, 1, -0.3f, LAYOUT_BHND, 0, 1},
    {1, 40, 56, 4, 2, 64, F16, 1, 0, LAYOUT_PADDED, 0, 1},
    {2, 50, 50, 2, 1, 33, BF16, 0, 0, LAYOUT_BHND, 0, 1},
};

START_TEST(standard_path)
{
    run_case(NULL, "standard", &standard_cases[_i], 800 + (uint64_t)_i, NULL);
}
END_TEST

/* The standard path's own refusals leave the outputs untouched; it needs no LSE. */
START_TEST(standard_rejected)
{
    struct test_env *e = test_env_get();
    const struct bwd_case c = {1, 20, 24, 4, 2, 16, F32, 1, 0, LAYOUT_BNHD, 0, 1};
    struct problem p;
    problem_create(&p, &c, 900);
    problem_forward(&p, e->ctx);
    cl_int err;
    cl_mem tiny = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 64, NULL, &err);
    ck_assert_ptr_nonnull(tiny);
    cl_command_queue_properties supported = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_QUEUE_PROPERTIES, sizeof(supported), &supported, NULL));
    if (supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
        cl_command_queue ooo = clCreateCommandQueue(e->cl, e->device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
        ck_assert_ptr_nonnull(ooo);
        ck_assert_status(flashcl_standard_backward(e->ctx, &p.a, &p.g, NULL, ooo, 0, NULL, NULL),
                         FLASHCL_INVALID_COMMAND_QUEUE);
        clReleaseCommandQueue(ooo);
    }
    ck_assert_status(flashcl_standard_backward(e->ctx, &p.a, &p.g, tiny, e->queue, 0, NULL, NULL),
                     FLASHCL_INVALID_VALUE);
    struct flashcl_attention_grad g = p.g;
    g.d_q = p.a.q;
    ck_assert_status(flashcl_standard_backward(e->ctx, &p.a, &g, NULL, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    g = p.g;
    g.reserved[0] = 9;
    size_t bytes = 0;
    ck_assert_status(flashcl_standard_backward_workspace_size(e->ctx, &p.a, &g, &bytes), FLASHCL_INVALID_VALUE);
    ck_assert_cl(clFinish(e->queue));
    for (int t = T_DQ; t <= T_DV; t++) {
        unsigned char *out = read_back(&p, t);
        ck_assert_msg(memcmp(out, p.img[t], p.count[t] * p.esize) == 0, "a rejected call wrote %s", tensor_names[t]);
        free(out);
    }
    /* No LSE: the standard path recomputes the softmax, so the call runs and matches the reference. */
    p.a.lse.mem = NULL;
    problem_backward(&p, e->ctx, e->queue);
    struct bwd_result r;
    problem_check(&p, &r);
    clReleaseMemObject(tiny);
    problem_free(&p);
}
END_TEST

/* ---- forced tiles, down to one row and one key per block ---- */

struct log_capture {
    char last[512];
};

static void capture_backward(void *user, enum flashcl_log_level level, const char *message)
{
    struct log_capture *cap = user;
    if (level == FLASHCL_LOG_DEBUG && strncmp(message, "backward:", 9) == 0)
        snprintf(cap->last, sizeof(cap->last), "%s", message);
}

static const int tiles[][2] = {{1, 1}, {3, 5}, {16, 7}};  /* block_m < block_n, and > */

/* flashcl_backward_config reports the backward kernel and the forced tile. */
static void check_backward_config(flashcl_context *ctx, const struct bwd_case *c, int block_m, int block_n)
{
    struct problem p;
    problem_create(&p, c, 1);
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_backward_config(ctx, &p.a, &p.g, &t));
    ck_assert_str_eq(t.kernel, "backward");
    ck_assert_int_eq(t.source, FLASHCL_TILE_FORCED);
    ck_assert_int_eq(t.block_m, block_m);
    ck_assert_int_eq(t.block_n, block_n);
    problem_free(&p);
}

START_TEST(forced_tiles)
{
    struct test_env *e = test_env_get();
    struct log_capture cap = {{0}};
    struct flashcl_context_params params = {0};
    params.context = e->cl;
    params.device = e->device;
    params.log = capture_backward;
    params.log_user = &cap;
    params.log_level = FLASHCL_LOG_DEBUG;
    char tile[64], expect[64];
    snprintf(tile, sizeof(tile), "backward:block_m=%d,block_n=%d", tiles[_i][0], tiles[_i][1]);
    snprintf(expect, sizeof(expect), "-DBLOCK_M=%d -DBLOCK_N=%d ", tiles[_i][0], tiles[_i][1]);
    /* The tile of the portable kernel: the tensor-core one (f16/bf16 where the device has it) and the
     * register-tiled one (head dims that are multiples of 4) are off. */
    char options[192];
    snprintf(options, sizeof(options), "backward-tensor-core:off;backward-tiled:off;%s",
             tile);
    params.kernel_options = options;
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&params, &ctx));
    const struct bwd_case cases[] = {
        {1, 23, 17, 4, 2, 9, F32, 1, 0, LAYOUT_BNHD, 0},   /* rows with no key, GQA */
        {1, 17, 23, 2, 1, 9, F32, 1, 0, LAYOUT_BHND, 0},
        {1, 19, 19, 2, 2, 16, BF16, 0, 0, LAYOUT_BNHD, 0},
    };
    for (int i = 0; i < 3; i++) {
        cap.last[0] = '\0';
        run_case(ctx, tile, &cases[i], 400 + (uint64_t)(_i * 3 + i), NULL);
        if (i == 0)
            check_backward_config(ctx, &cases[0], tiles[_i][0], tiles[_i][1]);
        ck_assert_msg(strstr(cap.last, expect) != NULL, "the backward call ran with \"%s\", not tile %s", cap.last,
                      tile);
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

/* ---- fused-QKV gradients ---- */

/* dQ, dK, dV written as the interleaved slices of one buffer, the gradient
 * of a fused QKV projection ([B, N, 3, H, d], and per head [B, N, H, 3, d]),
 * with Q, K, V slices of another: the slices share no byte, so the call runs
 * and each gets its own gradient (the rows between a slice's rows are the
 * other slices'). batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype,
 * causal, scale, layout, own_workspace, standard. */
static const struct bwd_case fused_cases[] = {
    {2, 24, 24, 3, 3, 16, F32, 1, 0, LAYOUT_FUSED_QKV, 0},
    {1, 33, 33, 2, 2, 32, F16, 0, 0, LAYOUT_FUSED_QKV_HEADS, 1},
    {2, 20, 20, 2, 2, 9, F32, 0, 0, LAYOUT_FUSED_QKV_HEADS, 0},       /* the portable kernel (d % 4 != 0) */
    {1, 24, 24, 2, 2, 16, F32, 1, 0, LAYOUT_FUSED_QKV, 0, 1},         /* the standard path */
};

START_TEST(fused_qkv_gradients)
{
    run_case(NULL, "fused qkv", &fused_cases[_i], 660 + (uint64_t)_i, NULL);
}
END_TEST

/* The same slices moved so that they do share a byte, however little or
 * late (one element, one batch), are refused and nothing is written; moved
 * so that they still share none, they run. */
START_TEST(fused_qkv_gradients_that_overlap)
{
    struct test_env *e = test_env_get();
    for (int per_head = 0; per_head < 2; per_head++) {
        const struct bwd_case c = {2, 8, 8, 2, 2, 8, F32, 0, 0, per_head ? LAYOUT_FUSED_QKV_HEADS : LAYOUT_FUSED_QKV, 0};
        struct problem p;
        problem_create(&p, &c, 680 + (uint64_t)per_head);
        problem_forward(&p, e->ctx);
        const size_t esize = p.esize, d = 8, hd = 2 * d, slot = per_head ? d : hd;  /* elements between slices */
        struct { const char *what; struct flashcl_attention_grad g; } bad[5];
        int n = 0;
        for (int i = 0; i < 5; i++)
            bad[i].g = p.g;
        bad[n].what = "d_k one element into d_q";
        bad[n++].g.d_k.offset -= esize;
        bad[n].what = "d_v on d_k";
        bad[n++].g.d_v.offset = p.g.d_k.offset;
        bad[n].what = "d_k's second batch one element back";  /* only batch 1 meets d_q */
        bad[n++].g.d_k.stride_batch -= 1;
        if (per_head) {
            bad[n].what = "d_v's heads one element closer";  /* head 1 of d_v meets head 1 of d_k */
            bad[n++].g.d_v.stride_head -= 1;
        } else {
            bad[n].what = "d_v's rows one element closer";  /* position 1 of d_v meets d_k's */
            bad[n++].g.d_v.stride_seq -= 1;
        }
        for (int i = 0; i < n; i++) {
            struct flashcl_tile t;
            size_t bytes = 7;
            ck_assert_status(flashcl_backward_config(e->ctx, &p.a, &bad[i].g, &t), FLASHCL_ERROR_ALIASING);
            ck_assert_status(flashcl_backward_workspace_size(e->ctx, &p.a, &bad[i].g, &bytes), FLASHCL_ERROR_ALIASING);
            ck_assert_uint_eq(bytes, 7);
            ck_assert_msg(flashcl_backward(e->ctx, &p.a, &bad[i].g, NULL, e->queue, 0, NULL, NULL) ==
                          FLASHCL_ERROR_ALIASING, "%s: accepted (%s)", bad[i].what, flashcl_last_error());
            ck_assert_msg(strstr(flashcl_last_error(), "overlaps grad.d_") != NULL, "%s: %s", bad[i].what,
                          flashcl_last_error());
            ck_assert_status(flashcl_standard_backward(e->ctx, &p.a, &bad[i].g, NULL, e->queue, 0, NULL, NULL),
                             FLASHCL_ERROR_ALIASING);
            printf("fused, refused %-38s %s\n", bad[i].what, flashcl_last_error());
        }
        ck_assert_cl(clFinish(e->queue));
        unsigned char *grads = read_back(&p, T_DQ);
        ck_assert_msg(memcmp(grads, p.img[T_DQ], p.count[T_DQ] * esize) == 0, "a refused call wrote the gradients");
        free(grads);

        /* d_k and d_v swapped: still no byte shared. */
        struct flashcl_attention_grad apart = p.g;
        apart.d_k.offset = 2 * slot * esize;
        apart.d_v.offset = slot * esize;
        struct flashcl_tile t;
        ck_assert_flashcl_ok(flashcl_backward_config(e->ctx, &p.a, &apart, &t));
        problem_free(&p);
    }
}
END_TEST

/* ---- the reference against finite differences ---- */

/* L = sum dO o O for one head, O from the forward reference. */
static double host_loss(const double *q, const double *k, const double *v, const double *d_o, size_t nq, size_t nk,
                        size_t d, double scale, int causal, double softcap)
{
    double loss = 0, out[8], lse, scratch[8];
    for (size_t i = 0; i < nq; i++) {
        const long long last = causal ? (long long)i + (long long)nk - (long long)nq : (long long)nk - 1;
        const size_t end = last < 0 ? 0 : (size_t)last + 1 < nk ? (size_t)last + 1 : nk;
        hostref_attention_row_capped(&q[i * d], k, v, 0, end, d, scale, softcap, out, &lse, scratch);
        for (size_t e = 0; e < d; e++)
            loss += d_o[i * d + e] * out[e];
    }
    return loss;
}

START_TEST(reference_finite_differences)
{
    enum { NQ = 4, NK = 3, D = 3 };
    for (int run = 0; run < 4; run++) {  /* causal with Nq > Nk: row 0 sees no key; runs 2, 3 softcapped */
        const int causal = run % 2;
        const double softcap = run >= 2 ? 0.8 : 0.0;  /* against scores up to 0.7 x 3: tanh bends them */
        double q[NQ * D], k[NK * D], v[NK * D], d_o[NQ * D];
        double *all[4] = {q, k, v, d_o};
        const size_t sizes[4] = {NQ * D, NK * D, NK * D, NQ * D};
        rng_seed(7 + (uint64_t)run);
        for (int t = 0; t < 4; t++)
            for (size_t x = 0; x < sizes[t]; x++)
                all[t][x] = rng_uniform(-1.0, 1.0);
        const double scale = 0.7;
        double dq[NQ * D], dk[NK * D] = {0}, dv[NK * D] = {0}, scratch[2 * NK + D];
        hostref_attention_backward_capped(q, k, v, d_o, NQ, NK, D, scale, -1, causal ? 0 : -1, softcap, dq, dk, dv,
                                          scratch);
        double *grads[3] = {dq, dk, dv};
        const double h = 1e-6;
        double worst = 0;
        for (int t = 0; t < 3; t++)
            for (size_t x = 0; x < sizes[t]; x++) {
                const double saved = all[t][x];
                all[t][x] = saved + h;
                const double up = host_loss(q, k, v, d_o, NQ, NK, D, scale, causal, softcap);
                all[t][x] = saved - h;
                const double down = host_loss(q, k, v, d_o, NQ, NK, D, scale, causal, softcap);
                all[t][x] = saved;
                const double fd = (up - down) / (2 * h);
                /* Central differences: O(h^2) truncation, ~1e-16 / h = 1e-10 rounding. */
                ck_assert_msg(fabs(fd - grads[t][x]) < 1e-8,
                              "causal %d, softcap %g: d%s[%zu] = %.12g, finite difference %.12g", causal, softcap,
                              tensor_names[t], x, grads[t][x], fd);
                worst = fmax(worst, fabs(fd - grads[t][x]));
            }
        if (causal)
            for (int e = 0; e < D; e++)
                ck_assert(dq[e] == 0.0);  /* row 0 sees no key */
        printf("finite differences, causal %d, softcap %g: max |reference - fd| %.2e\n", causal, softcap, worst);
    }
}
END_TEST

/* Cases `with` and `without` a variant, from the same seed, on the default context: their dQ must differ in some
 * bit (the variant changed the gradients, so a kernel that ignored it could not pass the reference). */
static void assert_dq_differs(const struct bwd_case *with, const struct bwd_case *without, uint64_t seed,
                              const char *variant)
{
    struct test_env *e = test_env_get();
    struct problem p[2];
    const struct bwd_case *cases[2] = {with, without};
    unsigned char *dq[2];
    for (int i = 0; i < 2; i++) {
        problem_create(&p[i], cases[i], seed);
        problem_forward(&p[i], e->ctx);
        problem_backward(&p[i], e->ctx, e->queue);
        dq[i] = read_back(&p[i], T_DQ);
    }
    ck_assert_msg(memcmp(dq[0], dq[1], p[0].count[T_DQ] * p[0].esize) != 0, "%s changed no bit of dQ", variant);
    for (int i = 0; i < 2; i++) {
        free(dq[i]);
        problem_free(&p[i]);
    }
}

/* The case on each tensor-core backward program (mma.sync, its fused dQ, wgmma), emulated in plain OpenCL C
 * as sm_80 and sm_90: f16, head dims of 16s. */
static void run_on_tensor_cores(const struct bwd_case *c, uint64_t seed, const char *what)
{
    static const struct {
        const char *options;
        int cc;
        bool wgmma;
        const char *expect;
    } emulated[] = {
        {"", 80, false, "backward-tensor-core"},
        {"backward-tensor-core-fused:on", 80, false, "backward-tensor-core-fused"},
        {"backward-wgmma:warps=4,block_m=64,block_n=64", 90, true, "backward-wgmma"},
    };
    ck_assert(c->dtype == F16 && c->head_dim % 16 == 0);
    for (int i = 0; i < 3; i++) {
        struct bwd_result r;
        flashcl_context *ctx = test_emulated_context(emulated[i].options, emulated[i].cc, emulated[i].wgmma);
        run_case(ctx, what, c, seed, &r);
        ck_assert_msg(kernel_is(r.kernel, emulated[i].expect), "ran %s, not %s", r.kernel, emulated[i].expect);
        flashcl_context_destroy(&ctx);
    }
}

/* Whether the table says backward kernel `name` computes the softcap (else: ALiBi). */
static bool backward_computes(const char *name, bool softcap)
{
    for (int i = 0; i < flashcl_kernel_count(); i++) {
        struct flashcl_kernel_info k;
        ck_assert_flashcl_ok(flashcl_kernel_describe(i, &k));
        if (k.backward && kernel_is(name, k.name))
            return (softcap ? k.softcap : k.alibi) != 0;
    }
    return false;
}

/* ---- logit softcapping ---- */

/* On the FMA kernels (backward-tiled, the default here, and the portable one), against the capped reference,
 * whose gradients the finite differences above check (the tensor-core programs take the cap in the ALiBi
 * cases below); caps small against the scores so tanh bends them, with causal and windowed masks, GQA,
 * a negative scale, padded views. batch, seq_q, seq_kv,
 * heads_q, heads_kv, head_dim, dtype, causal, scale, layout, own_workspace, standard, windowed, window_left,
 * window_right, precision, softcap. */
static const struct bwd_case softcap_cases[] = {
    {1, 70, 90, 4, 2, 32, F32, 1, 1.0f, LAYOUT_BNHD, 0, 0, 0, 0, 0, 0, 1.5f},
    {2, 33, 47, 2, 2, 16, F16, 0, 2.0f, LAYOUT_BHND, 1, 0, 0, 0, 0, 0, 1.0f},
    {1, 50, 50, 2, 1, 24, BF16, 0, -1.0f, LAYOUT_PADDED, 0, 0, 1, 8, 3, 0, 3.0f},
    {1, 40, 30, 2, 2, 30, F32, 1, 1.0f, LAYOUT_BNHD, 0, 0, 0, 0, 0, 0, 0.5f},  /* d = 30: the portable one */
};

START_TEST(softcap)
{
    static const char *const options[] = {"", "backward-tensor-core:off;backward-tiled:off"};
    for (int i = 0; i < 2; i++) {
        struct bwd_result r;
        run_case(test_context_with_options(options[i]), "softcap", &softcap_cases[_i], 800 + (uint64_t)_i, &r);
        ck_assert_msg(backward_computes(r.kernel, true), "softcap ran %s", r.kernel);
    }
    /* The same inputs uncapped give other gradients: the case can tell a kernel that ignores the cap. */
    struct bwd_case uncapped = softcap_cases[_i];
    uncapped.softcap = 0.0f;
    assert_dq_differs(&softcap_cases[_i], &uncapped, 800 + (uint64_t)_i, "the cap");
}
END_TEST

/* ---- ALiBi ---- */

/* On the FMA kernels (backward-tiled and the portable one) and, for the case with a cap too, the emulated
 * tensor-core programs against the biased reference (its gradients checked by finite differences below), with
 * causal and windowed masks, Nq != Nk both ways (the distance counts from the bottom-right diagonal), GQA (each
 * query head its slope, one of them 0), a negative scale, padded views, with a cap and sinks. */
static const struct bwd_case alibi_cases[] = {
    {1, 70, 90, 4, 2, 32, F32, 1, 0, LAYOUT_BNHD, .alibi = 1},
    {2, 33, 47, 2, 2, 16, F16, 0, 0, LAYOUT_BHND, 1, .alibi = 1},
    {1, 50, 50, 3, 1, 24, BF16, 0, -1.0f, LAYOUT_PADDED, 0, 0, 1, 8, 3, .alibi = 1},
    {1, 60, 35, 2, 2, 30, F32, 0, 0, LAYOUT_BNHD, .alibi = 1},  /* d = 30: the portable one; diagonals < 0 */
    {1, 33, 60, 2, 1, 16, F32, 1, 0.5f, LAYOUT_BNHD, .softcap = 1.5f, .sinks = 1, .alibi = 1},
    {1, 70, 90, 4, 2, 32, F16, 1, 0, LAYOUT_BNHD, .softcap = 2.0f, .alibi = 1},
};

START_TEST(alibi)
{
    static const char *const options[] = {"", "backward-tensor-core:off;backward-tiled:off"};
    for (int i = 0; i < 2; i++) {
        struct bwd_result r;
        run_case(test_context_with_options(options[i]), "ALiBi", &alibi_cases[_i], 900 + (uint64_t)_i, &r);
        ck_assert_msg(backward_computes(r.kernel, false), "ALiBi ran %s", r.kernel);
    }
    /* The tensor-core programs on the case with both the cap and ALiBi (emulation is slow: one case). */
    const struct bwd_case *c = &alibi_cases[_i];
    if (c->dtype == F16 && c->head_dim % 16 == 0 && !c->windowed && c->softcap > 0.0f)
        run_on_tensor_cores(c, 900 + (uint64_t)_i, "cap and ALiBi, emulated");
    /* The same inputs unbiased give other gradients: the case can tell a kernel that ignores the slopes. */
    struct bwd_case plain = alibi_cases[_i];
    plain.alibi = 0;
    assert_dq_differs(&alibi_cases[_i], &plain, 900 + (uint64_t)_i, "the ALiBi slopes");
}
END_TEST

/* ---- a value head dim other than head_dim (attn.head_dim_v) ---- */

/* The FMA backward kernels take it (MLA prefill's 192 / 128 among the cases): backward-tiled where both head dims
 * are multiples of 4, else backward; V, O, dO and dV have dv columns.
 * batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, own_workspace, standard,
 * windowed, window_left, window_right, precision, softcap, sinks, alibi, head_dim_v. */
static const struct bwd_case dv_cases[] = {
    {1, 37, 45, 2, 1, 192, F32, 1, 0, LAYOUT_BNHD, .head_dim_v = 128},          /* MQA, causal Nq < Nk */
    {2, 40, 33, 4, 2, 24, F16, 0, 0, LAYOUT_BHND, .head_dim_v = 40},            /* dv > d, GQA */
    {1, 50, 20, 3, 1, 40, BF16, 1, 0, LAYOUT_PADDED, 1, .head_dim_v = 16},      /* 30 rows see no key */
    {1, 30, 50, 4, 2, 48, F32, 0, 0, LAYOUT_BNHD, 0, 0, 1, 7, 3, .softcap = 3.0f, .sinks = 1, .alibi = 1,
     .head_dim_v = 33},
    {1, 70, 90, 2, 2, 20, BF16, 1, 0, LAYOUT_BHND, .head_dim_v = 72},           /* dv past 64: 2 column groups */
    {1, 45, 60, 2, 1, 192, BF16, 1, 0, LAYOUT_BNHD, .head_dim_v = 128},         /* MLA in bf16: wgmma's on Hopper */
};

/* The default plan (on Hopper, backward-wgmma where both head dims are multiples of 16 in f16/bf16: the native run
 * of what "wgmma kernels, emulated" checks; the case without dv says whether the device plans it), then each FMA
 * kernel forced with a small tile and the tensor-core kernels off ("backward-tensor-core:off" takes wgmma with it;
 * on Hopper wgmma would otherwise win the plan). */
START_TEST(value_head_dim)
{
    const struct bwd_case *c = &dv_cases[_i];
    const bool tiled = c->head_dim % 4 == 0 && c->head_dim_v % 4 == 0;
    static const char *const options[] = {"", "backward-tensor-core:off;backward-tiled:block_m=16,block_n=32",
                                          "backward-tensor-core:off;backward-tiled:off;backward:block_m=16,block_n=8"};
    /* Where this device's plan takes backward-wgmma for the case without dv, it must take it with dv too. */
    bool wgmma_here = false;
    if (c->dtype != F32 && c->head_dim % 16 == 0 && c->head_dim_v % 16 == 0) {
        struct bwd_case plain = *c;
        plain.head_dim_v = 0;
        struct bwd_result r;
        run_case(test_context_with_options(""), "head_dim_v's plain case", &plain, 1300 + (uint64_t)_i, &r);
        wgmma_here = kernel_is(r.kernel, "backward-wgmma");
    }
    for (int i = 0; i < 3; i++) {
        if (i == 1 && !tiled)
            continue;
        struct bwd_result r;
        run_case(test_context_with_options(options[i]), "head_dim_v", c, 1300 + (uint64_t)_i, &r);
        const char *expect = i == 0 && wgmma_here ? "backward-wgmma" : i == 2 || !tiled ? "backward" : "backward-tiled";
        ck_assert_msg(kernel_is(r.kernel, expect), "head_dim_v (%s) ran %s, not %s", options[i], r.kernel, expect);
    }
}
END_TEST

/* The reference with dv != d against central differences of L = sum dO o O (O of dv columns). */
START_TEST(value_head_dim_reference_finite_differences)
{
    enum { NQ = 4, NK = 3, D = 3, DV = 2 };
    double q[NQ * D], k[NK * D], v[NK * DV], d_o[NQ * DV];
    double *all[4] = {q, k, v, d_o};
    const size_t sizes[4] = {NQ * D, NK * D, NK * DV, NQ * DV};
    rng_seed(17);
    for (int t = 0; t < 4; t++)
        for (size_t x = 0; x < sizes[t]; x++)
            all[t][x] = rng_uniform(-1.0, 1.0);
    const double scale = 0.7;
    const struct hostref_mods mods = {0.0, -INFINITY, 0.0};
    double dq[NQ * D], dk[NK * D] = {0}, dv[NK * DV] = {0}, scratch[2 * NK + DV];
    hostref_attention_backward_dv(q, k, v, d_o, NQ, NK, D, DV, scale, -1, 0, &mods, dq, dk, dv, NULL, scratch);
    double *grads[3] = {dq, dk, dv};
    const double h = 1e-6;
    double worst = 0;
    for (int t = 0; t < 3; t++)
        for (size_t x = 0; x < sizes[t]; x++) {
            double loss[2];
            for (int side = 0; side < 2; side++) {
                const double saved = all[t][x];
                all[t][x] = saved + (side ? -h : h);
                loss[side] = 0;
                for (size_t i = 0; i < NQ; i++) {  /* causal, Nq > Nk: row 0 sees no key */
                    const long long last = (long long)i + NK - NQ;
                    double out[DV], lse, row_scratch[NK];
                    if (last < 0)
                        continue;
                    hostref_attention_row_dv(&q[i * D], k, v, 0, (size_t)last + 1, D, DV, scale, &mods, last, out,
                                             &lse, row_scratch);
                    for (size_t e = 0; e < DV; e++)
                        loss[side] += d_o[i * DV + e] * out[e];
                }
                all[t][x] = saved;
            }
            const double fd = (loss[0] - loss[1]) / (2 * h);
            ck_assert_msg(fabs(fd - grads[t][x]) < 1e-8, "d%s[%zu] = %.12g, finite difference %.12g", tensor_names[t],
                          x, grads[t][x], fd);
            worst = fmax(worst, fabs(fd - grads[t][x]));
        }
    printf("finite differences, head_dim_v %d against head_dim %d: max |reference - fd| %.2e\n", DV, D, worst);
}
END_TEST

/* ---- head dims past 128 on the wgmma backward (emulated as sm_90) ---- */

/* Past d = 128 its two warpgroups split dK's and dV's columns, overlapping (128 + 32 at d = 160: with a cap,
 * ALiBi and a sink, GQA, causal, Nq < Nk), or not (128 + 128 at d = 256, 32-key dQ blocks, Nq > Nk); 32-key
 * dQ blocks at d = 32, where S's products are split in 16-key halves; the atomic variant (dQ added up by the
 * dK/dV pass: a key block past seq_kv, a query block past seq_q, two query heads a KV head, a cap and ALiBi; at
 * d = 96 the second warpgroup's dQ columns 48..95 span two panels).
 * kb: the shape's local memory, emulated. */
static const struct {
    struct bwd_case c;
    const char *options, *label, *kernel;
    int kb;
} wgmma_head_dim_cases[] = {
    {{1, 40, 56, 4, 2, 160, F16, 1, 0, LAYOUT_BNHD, .softcap = 2.0f, .sinks = 1, .alibi = 1}, "", "d = 160",
     "backward-wgmma", 198},
    {{1, 45, 33, 2, 1, 256, BF16, 1, 0, LAYOUT_BNHD}, "", "d = 256", "backward-wgmma", 199},
    {{1, 70, 90, 2, 2, 32, F16, 0, 0, LAYOUT_BHND}, "backward-wgmma:warps=8,block_m=64,block_n=32", "d = 32, 32-key dQ",
     "backward-wgmma", 72},
    {{1, 90, 110, 4, 2, 64, BF16, 1, 0, LAYOUT_BNHD, .softcap = 3.0f, .alibi = 1}, "backward-wgmma-atomic:on",
     "atomic dQ, d = 64", "backward-wgmma-atomic", 87},
    {{1, 70, 50, 2, 1, 96, F16, 0, 0, LAYOUT_BHND}, "backward-wgmma-atomic:on", "atomic dQ, d = 96",
     "backward-wgmma-atomic", 151},
    /* A value head dim of its own: MLA's 192 and 128 (split: dK 128 + 128 overlapping, dV 64 + 64); dv = 2d
     * (not split; S's products in 32-query parts, dK's N being the block's 64); d = 128 with dv = 256 (split: dK
     * 64 + 64, dV 128 + 128, 32-key dQ blocks); dv = d / 2 with a cap and ALiBi (dV 48 wide); d = 32 with dv =
     * 64 (S's products 16 wide: 64 and 32 are dV's and dK's). */
    {{1, 45, 60, 2, 1, 192, BF16, 1, 0, LAYOUT_BNHD, .head_dim_v = 128}, "", "d = 192, dv = 128", "backward-wgmma",
     167},
    {{2, 40, 33, 4, 2, 64, F16, 0, 0, LAYOUT_BHND, .head_dim_v = 128}, "", "d = 64, dv = 128", "backward-wgmma", 104},
    {{1, 33, 47, 2, 2, 128, F16, 1, 0, LAYOUT_BNHD, .head_dim_v = 256}, "", "d = 128, dv = 256", "backward-wgmma",
     152},
    {{1, 50, 70, 2, 1, 96, BF16, 1, 0, LAYOUT_BHND, .softcap = 2.0f, .alibi = 1, .head_dim_v = 48}, "",
     "d = 96, dv = 48", "backward-wgmma", 104},
    {{1, 37, 52, 2, 1, 32, F16, 1, 0, LAYOUT_BNHD, .head_dim_v = 64}, "", "d = 32, dv = 64", "backward-wgmma", 103},
};

START_TEST(head_dims_on_wgmma)
{
    flashcl_context *ctx = test_emulated_context(wgmma_head_dim_cases[_i].options, 90, true);
    char label[64];
    snprintf(label, sizeof(label), "%s, emulated wgmma", wgmma_head_dim_cases[_i].label);
    if (test_local_mem_holds(ctx, wgmma_head_dim_cases[_i].kb, label)) {
        struct bwd_result r;
        run_case(ctx, label, &wgmma_head_dim_cases[_i].c, 990 + (uint64_t)_i, &r);
        ck_assert_msg(kernel_is(r.kernel, wgmma_head_dim_cases[_i].kernel), "%s ran %s", label, r.kernel);
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

/* The reference's gradients with every score modifier at once (a cap, ALiBi's bias, a sink) against central
 * differences of L = sum dO o O, in every element of Q, K and V, causal and not, Nq != Nk. */
START_TEST(mods_reference_finite_differences)
{
    enum { NQ = 4, NK = 5, D = 3 };
    double q[NQ * D], k[NK * D], v[NK * D], d_o[NQ * D];
    double *all[4] = {q, k, v, d_o};
    const size_t sizes[4] = {NQ * D, NK * D, NK * D, NQ * D};
    const struct hostref_mods mods = {1.2, 0.3, 0.35};
    const double scale = 0.8;
    for (int causal = 0; causal < 2; causal++) {
        rng_seed(31 + (uint64_t)causal);
        for (int t = 0; t < 4; t++)
            for (size_t x = 0; x < sizes[t]; x++)
                all[t][x] = rng_uniform(-1.0, 1.0);
        double dq[NQ * D], dk[NK * D] = {0}, dv[NK * D] = {0}, scratch[2 * NK + D];
        hostref_attention_backward_mods(q, k, v, d_o, NQ, NK, D, scale, -1, causal ? 0 : -1, &mods, dq, dk, dv, NULL,
                                        scratch);
        double max_err = 0;
        for (int t = 0; t < 3; t++)
            for (size_t x = 0; x < sizes[t]; x++) {
                double loss[2];
                const double saved = all[t][x];
                for (int side = 0; side < 2; side++) {
                    all[t][x] = saved + (side ? -1e-6 : 1e-6);
                    loss[side] = 0;
                    for (size_t i = 0; i < NQ; i++) {
                        size_t first, end;
                        hostref_visible_keys(i, NQ, NK, -1, causal ? 0 : -1, &first, &end);
                        double out[D], lse, row_scratch[NK];
                        hostref_attention_row_mods(&q[i * D], k, v, first, end, D, scale, &mods,
                                                   (long long)i + NK - NQ, out, &lse, row_scratch);
                        for (size_t e = 0; e < D; e++)
                            loss[side] += d_o[i * D + e] * out[e];
                    }
                }
                all[t][x] = saved;
                const double fd = (loss[0] - loss[1]) / 2e-6, got = t == 0 ? dq[x] : t == 1 ? dk[x] : dv[x];
                max_err = fmax(max_err, fabs(fd - got));
            }
        ck_assert_msg(max_err < 1e-8, "causal %d: |reference - finite difference| up to %.3g", causal, max_err);
        printf("score modifiers' finite differences, causal %d: |reference - fd| %.2e\n", causal, max_err);
    }
}
END_TEST

/* The standard path, forward and backward, refuses a cap, sinks and ALiBi, each with a clear message (its
 * softmax kernel has none of them). */
START_TEST(variants_standard_refused)
{
    static const struct {
        struct bwd_case c;
        const char *field;
    } refused[] = {
        {{1, 20, 20, 2, 2, 16, F32, 1, 0, LAYOUT_BNHD, .softcap = 1.5f}, "attn.softcap"},
        {{1, 20, 20, 2, 2, 16, F32, 1, 0, LAYOUT_BNHD, .sinks = 1}, "attn.sinks"},
        {{1, 20, 20, 2, 2, 16, F32, 1, 0, LAYOUT_BNHD, .alibi = 1}, "attn.alibi_slopes"},
    };
    for (int i = 0; i < 3; i++) {
        struct problem p;
        problem_create(&p, &refused[i].c, 1);
        size_t bytes;
        ck_assert_int_eq(flashcl_standard_backward_workspace_size(test_env_get()->ctx, &p.a, &p.g, &bytes),
                         FLASHCL_INVALID_VALUE);
        ck_assert_msg(strstr(flashcl_last_error(), refused[i].field), "%s", flashcl_last_error());
        ck_assert_int_eq(flashcl_standard_workspace_size(test_env_get()->ctx, &p.a, &bytes), FLASHCL_INVALID_VALUE);
        ck_assert_msg(strstr(flashcl_last_error(), refused[i].field), "%s", flashcl_last_error());
        problem_free(&p);
    }
}
END_TEST

/* ---- attention sinks ---- */

/* dQ, dK, dV through the LSE that holds the sink, and d(sink) against the reference, on the FMA backward
 * kernels and (emulated as sm_80, f16 with a head dim of 16s) the tensor-core one: every backward kernel reads
 * P through the LSE, so each takes sinks. Masks, a window, GQA, rows with no key, a head without a sink, a
 * cap. batch, seq_q, seq_kv, heads_q, heads_kv, head_dim, dtype, causal, scale, layout, own_workspace,
 * standard, windowed, window_left, window_right, precision, softcap, sinks. */
static const struct bwd_case sink_cases[] = {
    {2, 37, 45, 4, 2, 16, F32, 1, 0, LAYOUT_BNHD, .sinks = 1},
    {1, 50, 30, 2, 2, 12, F32, 1, 0, LAYOUT_BHND, 1, .sinks = 1},  /* 20 rows see no key */
    {1, 40, 40, 3, 1, 8, BF16, 0, 0, LAYOUT_BNHD, 0, 0, 1, 6, 2, .sinks = 1},
    {1, 33, 60, 2, 1, 16, F32, 0, 0.5f, LAYOUT_BNHD, .softcap = 1.5f, .sinks = 1},
    {1, 70, 70, 2, 2, 32, F16, 1, 0, LAYOUT_BNHD, .sinks = 1},
};

START_TEST(sinks)
{
    const struct bwd_case *c = &sink_cases[_i];
    static const char *const options[] = {"", "backward-tensor-core:off;backward-tiled:off"};
    for (int i = 0; i < 2; i++) {
        struct bwd_result r;
        run_case(test_context_with_options(options[i]), "sinks", c, 850 + (uint64_t)_i, &r);
    }
    if (c->dtype == F16 && c->head_dim % 16 == 0)  /* each tensor-core backward program's d(sink) step */
        run_on_tensor_cores(c, 850 + (uint64_t)_i, "sinks, emulated");
    /* The same inputs without sinks give other dQ: the case can tell a kernel that ignores them. */
    struct bwd_case plain = *c;
    plain.sinks = 0;
    assert_dq_differs(c, &plain, 850 + (uint64_t)_i, "the sinks");
}
END_TEST

/* The reference's d(sink) against central differences of L = sum dO o O in the sink (and its dQ with a sink). */
START_TEST(sink_reference_finite_differences)
{
    enum { NQ = 4, NK = 3, D = 3 };
    double q[NQ * D], k[NK * D], v[NK * D], d_o[NQ * D];
    double *all[4] = {q, k, v, d_o};
    const size_t sizes[4] = {NQ * D, NK * D, NK * D, NQ * D};
    for (int causal = 0; causal < 2; causal++) {
        rng_seed(17 + (uint64_t)causal);
        for (int t = 0; t < 4; t++)
            for (size_t x = 0; x < sizes[t]; x++)
                all[t][x] = rng_uniform(-1.0, 1.0);
        const double scale = 0.7;
        double sink = 0.4, dq[NQ * D], dk[NK * D] = {0}, dv[NK * D] = {0}, d_sink = 0, scratch[2 * NK + D];
        hostref_attention_backward_sink(q, k, v, d_o, NQ, NK, D, scale, -1, causal ? 0 : -1, 0.0, sink, dq, dk, dv,
                                        &d_sink, scratch);
        double loss[2];
        for (int side = 0; side < 2; side++) {
            const double s = sink + (side ? -1e-6 : 1e-6);
            loss[side] = 0;
            for (size_t i = 0; i < NQ; i++) {
                size_t first, end;
                hostref_visible_keys(i, NQ, NK, -1, causal ? 0 : -1, &first, &end);
                double out[D], lse, row_scratch[NK];
                hostref_attention_row_sink(&q[i * D], k, v, first, end, D, scale, 0.0, s, out, &lse, row_scratch);
                for (size_t e = 0; e < D; e++)
                    loss[side] += d_o[i * D + e] * out[e];
            }
        }
        const double fd = (loss[0] - loss[1]) / 2e-6;
        ck_assert_msg(fabs(fd - d_sink) < 1e-8, "causal %d: d_sink %.12g, finite difference %.12g", causal, d_sink,
                      fd);
        ck_assert(fabs(d_sink) > 1e-3);
        printf("sink finite difference, causal %d: d_sink %.6f, |reference - fd| %.2e\n", causal, d_sink,
               fabs(fd - d_sink));
    }
}
END_TEST

/* ---- determinism ---- */

/* The register-tiled kernel with many blocks, then the portable one. */
static const char *const deterministic_options[] = {
    "backward-tensor-core:off;backward-tiled:block_m=32,block_n=16",
    "backward-tensor-core:off;backward-tiled:off"};
static const char *const deterministic_variants[] = {"backward-tiled",
                                                              "backward"};

START_TEST(deterministic)
{
    struct test_env *e = test_env_get();
    flashcl_context *ctx = test_context_with_options(deterministic_options[_i]);
    /* GQA (dK, dV summed over 4 heads) with several key and query blocks. */
    const struct bwd_case c = {1, 150, 140, 4, 1, 32, F32, 1, 0, LAYOUT_BNHD, 0};
    struct problem p;
    problem_create(&p, &c, 500);
    problem_forward(&p, ctx);
    problem_backward(&p, ctx, e->queue);
    ck_assert_str_eq(p.kernel, deterministic_variants[_i]);
    unsigned char *first[3];
    for (int o = 0; o < 3; o++)
        first[o] = read_back(&p, T_DQ + o);

    /* A second queue: out-of-order where the device has it, so the event chain is what orders the kernels. */
    bool out_of_order;
    cl_command_queue second = test_second_queue(&out_of_order);
    for (int run = 0; run < 3; run++) {
        problem_backward(&p, ctx, run == 2 ? second : e->queue);
        for (int o = 0; o < 3; o++) {
            unsigned char *again = read_back(&p, T_DQ + o);
            ck_assert_msg(memcmp(again, first[o], p.count[T_DQ + o] * p.esize) == 0,
                          "run %d (%s queue) gave other %s bits", run, run == 2 ? "second" : "same",
                          tensor_names[T_DQ + o]);
            free(again);
        }
    }
    printf("deterministic, %s: 4 runs bit-identical (second queue %s)\n", p.kernel,
           out_of_order ? "out-of-order" : "in-order");
    struct bwd_result r;
    problem_check(&p, &r);
    clReleaseCommandQueue(second);
    for (int o = 0; o < 3; o++)
        free(first[o]);
    problem_free(&p);
}
END_TEST

/* forward -> backward on an out-of-order queue (where the device has one) with no wait in between: only the
 * wait list orders the backward's first kernel after the forward, and its own events order the rest. */
START_TEST(event_chain)
{
    struct test_env *e = test_env_get();
    bool out_of_order;
    cl_command_queue queue = test_second_queue(&out_of_order);
    const struct bwd_case c = {2, 70, 90, 4, 2, 32, F32, 1, 0, LAYOUT_BHND, 1};
    struct problem p;
    problem_create(&p, &c, 700);
    size_t bytes = 0;
    ck_assert_flashcl_ok(flashcl_backward_workspace_size(e->ctx, &p.a, &p.g, &bytes));
    cl_mem ws = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, bytes, NULL, NULL);
    ck_assert_ptr_nonnull(ws);
    cl_event forward_done = NULL, backward_done = NULL;
    ck_assert_flashcl_ok(flashcl_forward(e->ctx, &p.a, queue, 0, NULL, &forward_done));
    ck_assert_flashcl_ok(flashcl_backward(e->ctx, &p.a, &p.g, ws, queue, 1, &forward_done, &backward_done));
    ck_assert_cl(clFlush(queue));
    wait_complete(backward_done);
    clReleaseEvent(forward_done);
    struct bwd_result r;
    problem_check(&p, &r);
    printf("event chain (%s queue): max err / max|ref| dQ %.2e dK %.2e dV %.2e\n",
           out_of_order ? "out-of-order" : "in-order", r.max_err[0],
           r.max_err[1], r.max_err[2]);
    clReleaseMemObject(ws);
    clReleaseCommandQueue(queue);
    problem_free(&p);
}
END_TEST

/* ---- rejected calls ---- */

static cl_mem sized_buffer(size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    ck_assert_ptr_nonnull(m);
    return m;
}

START_TEST(rejected_calls)
{
    struct test_env *e = test_env_get();
    const struct bwd_case c = {1, 20, 24, 4, 2, 16, F32, 1, 0, LAYOUT_BNHD, 0};
    struct problem p;
    problem_create(&p, &c, 600);
    problem_forward(&p, e->ctx);
    cl_mem tiny = sized_buffer(4);
    cl_mem other = sized_buffer(1 << 16);

    enum mutation {
        NULL_GRAD, NO_LSE, NULL_DO, DK_DTYPE, DV_BAD_DTYPE, RESERVED, DQ_OUT_OF_BOUNDS, DQ_MISALIGNED, DQ_IS_Q,
        DK_IS_DV, DQ_OVER_DO, DV_OVER_O, DK_SELF_OVERLAP, DQ_OVER_LSE, BAD_SHAPE, WS_TOO_SMALL, WS_IS_DQ, WS_IS_Q,
        D_SINKS_WITHOUT_SINKS, D_SINKS_OFFSET_NO_MEM, D_SINKS_MISALIGNED, D_SINKS_OUT_OF_BOUNDS, D_SINKS_OVER_SINKS,
        N_MUTATIONS
    };
    static const struct { const char *what; flashcl_status status; } expected[N_MUTATIONS] = {
        {"grad NULL", FLASHCL_ERROR_NULL_ARGUMENT},
        {"no LSE", FLASHCL_ERROR_NULL_ARGUMENT},
        {"d_o.mem NULL", FLASHCL_ERROR_NULL_ARGUMENT},
        {"d_k f16", FLASHCL_ERROR_INVALID_DTYPE},
        {"d_v dtype 7", FLASHCL_ERROR_INVALID_DTYPE},
        {"reserved byte", FLASHCL_INVALID_VALUE},
        {"d_q past its buffer", FLASHCL_ERROR_OUT_OF_BOUNDS},
        {"d_q offset 2 bytes", FLASHCL_ERROR_MISALIGNED},
        {"d_q is q", FLASHCL_ERROR_ALIASING},
        {"d_k is d_v", FLASHCL_ERROR_ALIASING},
        {"d_q over d_o", FLASHCL_ERROR_ALIASING},
        {"d_v over o", FLASHCL_ERROR_ALIASING},
        {"d_k strides overlap", FLASHCL_ERROR_ALIASING},
        {"d_q over lse", FLASHCL_ERROR_ALIASING},
        {"head_dim 0", FLASHCL_ERROR_INVALID_SHAPE},
        {"workspace too small", FLASHCL_INVALID_VALUE},
        {"workspace is d_q", FLASHCL_ERROR_ALIASING},
        {"workspace is q", FLASHCL_ERROR_ALIASING},
        {"d_sinks without sinks", FLASHCL_INVALID_VALUE},
        {"d_sinks offset, no mem", FLASHCL_INVALID_VALUE},
        {"d_sinks offset 2 bytes", FLASHCL_ERROR_MISALIGNED},
        {"d_sinks past its buffer", FLASHCL_ERROR_OUT_OF_BOUNDS},
        {"d_sinks over sinks", FLASHCL_ERROR_ALIASING},
    };
    for (int m = 0; m < N_MUTATIONS; m++) {
        struct flashcl_attention a = p.a;
        struct flashcl_attention_grad g = p.g;
        const struct flashcl_attention_grad *gp = &g;
        cl_mem ws = NULL;
        switch ((enum mutation)m) {
        case NULL_GRAD: gp = NULL; break;
        case NO_LSE: a.lse.mem = NULL; break;
        case NULL_DO: g.d_o.mem = NULL; break;
        case DK_DTYPE: g.d_k.dtype = F16; break;
        case DV_BAD_DTYPE: g.d_v.dtype = (flashcl_dtype)7; break;
        case RESERVED: g.reserved[sizeof(g.reserved) - 1] = 1; break;
        case DQ_OUT_OF_BOUNDS: g.d_q.offset = 4 * p.esize; break;
        case DQ_MISALIGNED: g.d_q.offset = 2; break;
        case DQ_IS_Q: g.d_q = a.q; break;
        case DK_IS_DV: g.d_k = g.d_v; break;
        case DQ_OVER_DO: g.d_q.mem = g.d_o.mem; break;
        case DV_OVER_O: g.d_v.mem = a.o.mem; break;  /* o's buffer is larger than d_v's view */
        case DK_SELF_OVERLAP: g.d_k.stride_seq = 1; break;
        case DQ_OVER_LSE:  /* a d_q view inside a buffer that also holds the LSE */
            a.lse.mem = other;
            g.d_q.mem = other;
            g.d_q.offset = 64;
            break;
        case BAD_SHAPE: a.head_dim = 0; break;
        case WS_TOO_SMALL: ws = tiny; break;
        case WS_IS_DQ: ws = g.d_q.mem; break;
        case WS_IS_Q: ws = a.q.mem; break;
        case D_SINKS_WITHOUT_SINKS: g.d_sinks = (flashcl_vector){other, 0}; break;
        case D_SINKS_OFFSET_NO_MEM: a.sinks = (flashcl_vector){other, 0}; g.d_sinks.offset = 16; break;
        case D_SINKS_MISALIGNED: a.sinks = (flashcl_vector){other, 0}; g.d_sinks = (flashcl_vector){other, 1026}; break;
        case D_SINKS_OUT_OF_BOUNDS: a.sinks = (flashcl_vector){other, 0}; g.d_sinks = (flashcl_vector){tiny, 0}; break;
        case D_SINKS_OVER_SINKS:  /* heads_q = 4: sinks in bytes 0..15, d_sinks from byte 8 */
            a.sinks = (flashcl_vector){other, 0};
            g.d_sinks = (flashcl_vector){other, 8};
            break;
        default: break;
        }
        const flashcl_status st = flashcl_backward(e->ctx, &a, gp, ws, e->queue, 0, NULL, NULL);
        ck_assert_msg(st == expected[m].status, "%s: flashcl_backward gave %s, expected %s (%s)", expected[m].what,
                      flashcl_status_name(st), flashcl_status_name(expected[m].status), flashcl_last_error());
        ck_assert_msg(flashcl_last_error()[0] != '\0', "%s: no message", expected[m].what);
        printf("rejected %-22s %s: %s\n", expected[m].what, flashcl_status_name(expected[m].status),
               flashcl_last_error());
        if (!ws) {  /* the workspace query validates like the call */
            size_t bytes = 12345;
            ck_assert_status(flashcl_backward_workspace_size(e->ctx, &a, gp, &bytes), expected[m].status);
            ck_assert_uint_eq(bytes, 12345);
        }
    }
    size_t bytes;
    ck_assert_status(flashcl_backward_workspace_size(e->ctx, &p.a, &p.g, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_status(flashcl_backward(NULL, &p.a, &p.g, NULL, e->queue, 0, NULL, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_status(flashcl_backward(e->ctx, &p.a, &p.g, NULL, e->queue, 1, NULL, NULL), FLASHCL_INVALID_VALUE);
    ck_assert_flashcl_ok(flashcl_backward_workspace_size(e->ctx, &p.a, &p.g, &bytes));

    /* Nothing was enqueued: the gradients still hold their poison. */
    ck_assert_cl(clFinish(e->queue));
    for (int t = T_DQ; t <= T_DV; t++) {
        unsigned char *out = read_back(&p, t);
        ck_assert_msg(memcmp(out, p.img[t], p.count[t] * p.esize) == 0, "a rejected call wrote %s", tensor_names[t]);
        free(out);
    }
    clReleaseMemObject(tiny);
    clReleaseMemObject(other);
    problem_free(&p);
}
END_TEST

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

int main(void)
{
    Suite *s = suite_create("backward");
    TCase *tc = tcase_create("backward");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, reference_finite_differences);
    tcase_add_test(tc, rejected_calls);
    tcase_add_loop_test(tc, fused_qkv_gradients, 0, COUNT(fused_cases));
    tcase_add_test(tc, fused_qkv_gradients_that_overlap);
    tcase_add_loop_test(tc, head_dim, 0, COUNT(head_dims));
    tcase_add_loop_test(tc, shapes, 0, COUNT(shape_cases));
    tcase_add_loop_test(tc, dtypes, 0, COUNT(dtype_cases));
    tcase_add_loop_test(tc, standard_path, 0, COUNT(standard_cases));
    tcase_add_test(tc, standard_rejected);
    tcase_add_loop_test(tc, forced_tiles, 0, COUNT(tiles));
    tcase_add_loop_test(tc, windows, 0, COUNT(window_cases));
    tcase_add_loop_test(tc, tiled_head_dim, 0, COUNT(tiled_dims));
    tcase_add_loop_test(tc, tiled_shapes, 0, COUNT(tiled_cases));
    tcase_add_test(tc, tiled_fallback);
    tcase_add_loop_test(tc, deterministic, 0, COUNT(deterministic_options));
    tcase_add_test(tc, event_chain);
    suite_add_tcase(s, tc);
    TCase *sc = tcase_create("softcap");
    tcase_set_timeout(sc, 600);
    tcase_add_loop_test(sc, softcap, 0, COUNT(softcap_cases));
    tcase_add_test(sc, variants_standard_refused);
    suite_add_tcase(s, sc);
    TCase *al = tcase_create("alibi");
    tcase_set_timeout(al, 600);
    tcase_add_loop_test(al, alibi, 0, COUNT(alibi_cases));
    tcase_add_test(al, mods_reference_finite_differences);
    suite_add_tcase(s, al);
    TCase *sk = tcase_create("sinks");
    tcase_set_timeout(sk, 900);
    tcase_add_loop_test(sk, sinks, 0, COUNT(sink_cases));
    tcase_add_test(sk, sink_reference_finite_differences);
    suite_add_tcase(s, sk);
    TCase *dvc = tcase_create("value head dim");
    tcase_set_timeout(dvc, 600);
    tcase_add_loop_test(dvc, value_head_dim, 0, COUNT(dv_cases));
    tcase_add_test(dvc, value_head_dim_reference_finite_differences);
    suite_add_tcase(s, dvc);
    TCase *wtc = tcase_create("windows on the tensor-core kernels, emulated");
    tcase_set_timeout(wtc, 900);
    tcase_add_loop_test(wtc, windows_on_tensor_cores, 0, COUNT(tc_window_cases));
    suite_add_tcase(s, wtc);
    TCase *wide = tcase_create("wgmma kernels, emulated");
    tcase_set_timeout(wide, 600);
    tcase_add_loop_test(wide, head_dims_on_wgmma, 0, sizeof(wgmma_head_dim_cases) / sizeof(wgmma_head_dim_cases[0]));
    suite_add_tcase(s, wide);
    return test_run_suite(s);
}
