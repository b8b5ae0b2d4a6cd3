/* Shared test helpers: a context and queue on the default device, host-side
 * dtype conversion, random data, the double-precision reference, and one
 * routine that runs a whole attention case on the device and compares. */
#ifndef FLASHCL_TESTS_COMMON_H
#define FLASHCL_TESTS_COMMON_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "flashcl.h"
#include "hostref.h"

/* Check assertions that print the failing status with the library's message. */
#define ck_assert_flashcl_ok(expr)                                                              \
    do {                                                                                        \
        flashcl_status st_ = (expr);                                                            \
        ck_assert_msg(st_ == FLASHCL_SUCCESS, "%s returned %s: %s", #expr,                      \
                      flashcl_status_name(st_), flashcl_last_error());                          \
    } while (0)

#define ck_assert_status(expr, expected)                                                        \
    do {                                                                                        \
        flashcl_status st_ = (expr);                                                            \
        ck_assert_msg(st_ == (expected), "%s returned %s, expected %s (%s)", #expr,             \
                      flashcl_status_name(st_), flashcl_status_name(expected),                  \
                      flashcl_last_error());                                                    \
    } while (0)

#define ck_assert_cl(expr)                                                                      \
    do {                                                                                        \
        cl_int err_ = (expr);                                                                   \
        ck_assert_msg(err_ == CL_SUCCESS, "%s failed with %d", #expr, err_);                    \
    } while (0)

/* One context and in-order profiling queue per test process (the suites
 * run without fork, so built kernels are reused across test cases). */
struct test_env {
    flashcl_context *ctx;
    cl_context cl;
    cl_device_id device;
    cl_command_queue queue;
};
struct test_env *test_env_get(void);
/* A second queue on the shared device: out-of-order where the device has it (*out_of_order says which),
 * so only the library's events order what is enqueued there. The caller releases it. */
cl_command_queue test_second_queue(bool *out_of_order);
/* A context on the shared device with these kernel options (as
 * params.kernel_options), cached per string; destroyed with the suite. */
flashcl_context *test_context_with_options(const char *kernel_options);
/* A new context on the shared device with NVIDIA's tensor cores emulated (cl/nv_emulate.h, a test hook) as compute
 * capability `cc` (80 or 90), Hopper's wgmma kernel assumed too where `wgmma` (its probe passed), these kernel
 * options and no tuning file. The caller destroys it. */
flashcl_context *test_emulated_context(const char *kernel_options, int cc, bool wgmma);
/* A new context whose kernels also build with `build_options` (added to FLASHCL_BUILD_OPTIONS, which a context
 * reads when it is created; the variable is restored after), emulated as test_emulated_context's where `cc` is
 * not 0. For a kernel's compile-time switches no kernel option reaches (e.g. -DSPLIT_D=1). The caller destroys it. */
flashcl_context *test_context_built_with(const char *kernel_options, const char *build_options, int cc, bool wgmma);
/* Whether ctx's usable local memory holds `kb` KB (a case's footprint, which a forced or emulated shape cannot
 * shrink below); where not, prints that `what` is skipped: a smaller device plans other shapes, which other
 * cases cover. */
bool test_local_mem_holds(const flashcl_context *ctx, int kb, const char *what);
/* A second context forcing the tile (0 = automatic), cached per pair. */
/* Whether a kernel name (NULL where no kernel ran, e.g. the standard path) is this one. */
static inline bool kernel_is(const char *kernel, const char *name)
{
    return kernel && strcmp(kernel, name) == 0;
}

flashcl_context *test_context_with_blocks(int block_m, int block_n);
/* The forward kernel and tile flashcl_forward_config plans on ctx for a
 * plain call of this head_dim and dtype on the FMA units (64 queries, 64
 * keys, one head, no mask, rows off 16 bytes so no tensor-core kernel). */
flashcl_status test_fma_tile(flashcl_context *ctx, int head_dim, flashcl_dtype dtype, struct flashcl_tile *out);
/* A log callback that counts WARN lines and keeps the last (log_user: a struct test_warn_log). */
struct test_warn_log {
    int warnings;
    char last[512];
};
void test_record_warnings(void *user, enum flashcl_log_level level, const char *message);

/* Runs a Check suite without forking; returns the process exit code. */
int test_run_suite(Suite *s);

/* ---- one attention case, run and checked ---- */

enum test_layout {
    LAYOUT_BNHD,       /* [B, N, H, d] contiguous */
    LAYOUT_BHND,       /* [B, H, N, d] contiguous */
    LAYOUT_PADDED,     /* [B, N, H, d] with gaps after each row, head and batch, and an offset */
    LAYOUT_FUSED_QKV,  /* Q, K, V slices of one [B, N, 3, H, d] buffer (needs seq_q == seq_kv) */
    LAYOUT_FUSED_QKV_HEADS, /* Q, K, V interleaved per head, slices of one [B, N, H, 3, d] buffer (likewise) */
};

struct test_case {
    int batch, seq_q, seq_kv, heads_q, heads_kv, head_dim;
    flashcl_dtype dtype;
    int causal;
    float scale;            /* 0: default 1/sqrt(d) */
    enum test_layout layout;
    int with_lse;
    int standard;           /* run flashcl_standard_forward instead of flashcl_forward */
    enum flashcl_precision precision;
    int windowed;           /* mask FLASHCL_MASK_WINDOW with these (causal ignored) */
    int window_left, window_right;
    float softcap;          /* attn.softcap (0: none) */
    int sinks;              /* attn.sinks: random per-head sinks near log(seq_kv), the last head's -inf */
    int alibi;              /* attn.alibi_slopes: test_make_alibi_slopes' */
};

/* Per-head attention sinks for a test: near log(seq_kv) (so they take a fair share of each row's weight),
 * the last head's -inf (none) where there are several; *mem holds them after 4 NaN floats (the view's offset,
 * 16 bytes, must be honoured). The host copy in sinks[heads]. */
void test_make_sinks(int heads, int seq_kv, double *sinks, cl_mem *mem);
/* Per-head ALiBi slopes for a test: BLOOM's 2^(-8 (h + 1) / heads) times a random factor in [0.5, 1.5], the
 * last head's 0 (none) where there are several; *mem holds them after 4 NaN floats, as test_make_sinks'. */
void test_make_alibi_slopes(int heads, double *slopes, cl_mem *mem);

struct case_result {
    double max_abs_err;     /* over O */
    double max_lse_err;     /* over LSE */
    double rel_l2_err;      /* ||O - ref|| / ||ref|| */
    const char *kernel; /* the kernel that ran (flash path) */
    uint64_t output_hash;   /* FNV-1a of O's and LSE's bytes: equal hashes for bit-identical outputs */
};

/* Tolerance for |O - ref| <= atol + rtol * |ref|, by storage dtype; the
 * reference reads the same (rounded) inputs, so what is left is f32
 * arithmetic and the rounding of O to its storage type. The tensor-core
 * variant also rounds P to the storage type before P·V (as FlashAttention-2
 * does): each p_j is off by up to half an ulp, so O by up to that times
 * max|v| (inputs here lie in [-1, 1]). The TF32 variant's bounds follow
 * from its operand rounding (docs/precision.md). lse_tol bounds
 * |LSE - ref| / max(1, |ref|). */
void test_tolerance(flashcl_dtype dtype, const char *variant, enum flashcl_precision precision,
                    double *atol, double *rtol, double *lse_tol);

/* Slice `slice` (0, 1, 2: Q, K, V) of a fused [B, N, 3, H, d] (LAYOUT_FUSED_QKV) or [B, N, H, 3, d]
 * (LAYOUT_FUSED_QKV_HEADS) buffer of seq rows and heads heads, mem unset. */
void test_fused_view(enum test_layout layout, flashcl_dtype dtype, size_t seq, size_t heads, size_t dim, int slice,
                     flashcl_tensor *out);

/* The case's mask as a window around the diagonal (-1: unlimited). */
void test_case_window(int causal, int windowed, int window_left, int window_right, int *left, int *right);

/* Runs c on ctx (NULL: the shared one) with random inputs and poisoned
 * outputs, compares every element with the double reference, and fails the
 * current Check test on any mismatch or on a changed byte outside the views. */
void test_run_case(flashcl_context *ctx, const struct test_case *c, struct case_result *result);

/* Whether the context plans Hopper's wgmma forward for this dtype and head dim (f16/bf16, d a multiple of
 * 16 up to 256, flashcl_context_has_wgmma), and the f16/bf16 forward kernel a device with tensor cores runs by default
 * for this head dim (16-byte rows): the wgmma kernel there, else mma.sync. */
bool test_wgmma_takes(const flashcl_context *ctx, flashcl_dtype dtype, int head_dim);
const char *test_tensor_core_forward(const flashcl_context *ctx, int head_dim);

#endif
