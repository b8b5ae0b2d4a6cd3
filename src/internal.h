/* Private declarations shared by the library's source files. */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "flashcl.h"

#if defined(__GNUC__) || defined(__clang__)
#define FLASHCL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define FLASHCL_PRINTF(fmt, args)
#endif

/* ---- status.c: the per-thread error message and the log ---- */

/* Records a failure's detail for flashcl_last_error() and returns status, so
 * a check reads `return fail(ctx, FLASHCL_..., "q.offset %zu ...", x);`. ctx may be
 * NULL; with a context the message also goes to its log at ERROR level. */
flashcl_status fail(const flashcl_context *ctx, flashcl_status status, const char *fmt, ...)
    FLASHCL_PRINTF(3, 4);
/* Appends more text (a build log) to the thread's current error message. */
void fail_append(const char *text);
void clear_error(void);
void log_msg(const flashcl_context *ctx, enum flashcl_log_level level, const char *fmt, ...)
    FLASHCL_PRINTF(3, 4);

/* ---- program.c: built programs, keyed by their build options ---- */

struct program_entry;

/* Returns (building on first use) the kernel `name` (a string literal) of
 * the embedded source `source` built with `options`. Caller holds ctx->lock. */
flashcl_status program_get_kernel(flashcl_context *ctx, const char *source, const char *name,
                                  const char *options, cl_kernel *out);
void program_cache_free(flashcl_context *ctx);

/* ---- tuning.c: the tuning file ---- */

void tuning_identity(flashcl_context *ctx);
void tuning_load(flashcl_context *ctx, const char *param_path);
void tuning_free(flashcl_context *ctx);
const struct flashcl_tuned_config *tuning_find(const flashcl_context *ctx, enum flashcl_variant variant,
                                               flashcl_dtype dtype, int head_dim, int causal);
/* Local memory forced and tuned tiles may use (param, probed, reported). */
size_t usable_local_mem(const flashcl_context *ctx);

/* ---- cache.c: compiled programs on disk ---- */

/* $XDG_CACHE_HOME/flashcl/leaf, else ~/.cache/flashcl/leaf ("" leaf: the
 * folder); false if neither variable is set or the path does not fit. */
bool user_cache_path(const char *leaf, char *buf, size_t size);

/* Picks the cache folder (param, FLASHCL_CACHE_DIR, XDG cache; "" or "off":
 * none) and records what identifies this device's binaries. */
void cache_init(flashcl_context *ctx, const char *param_dir);
/* A built program from the cache, or NULL (absent, or rejected and removed). */
cl_program cache_load(flashcl_context *ctx, const char *source, const char *options);
void cache_store(flashcl_context *ctx, const char *source, const char *options, cl_program program);

/* Embedded kernel sources (generated at build time from cl/). */
extern const char flashcl_source_flash_forward[];
extern const char flashcl_source_standard_attention[];
extern const char flashcl_source_flash_forward_mma[];
extern const char flashcl_source_flash_forward_tiled[];
extern const char flashcl_source_flash_forward_tf32[];
extern const char flashcl_source_flash_backward[];
extern const char flashcl_source_standard_backward[];

/* ---- tile.c: the sizing rule and the tile a call uses ---- */

/* Local memory the portable / register-tiled forward kernel declares for a tile. */
size_t forward_local_bytes(int block_m, int block_n, int head_dim, int tn);
size_t forward_tiled_local_bytes(int block_m, int block_n, int head_dim);
/* The FMA kernel and its tile: register-tiled where it supports the call
 * and its tile fits (and fma_variant allows), else portable. */
flashcl_status tile_choose(flashcl_context *ctx, int head_dim, flashcl_dtype dtype, int causal,
                           struct flashcl_tile *out);
/* The portable kernel's work-group is side x side work-items. */
int portable_side(const flashcl_context *ctx);

/* ---- forward.c, shared with standard.c ---- */

int dtype_define(flashcl_dtype dtype);
void append_user_build_options(char *options, size_t size);
/* Checks what every attention call checks: pointers, the problem, the queue. */
flashcl_status check_call(flashcl_context *ctx, const struct flashcl_attention *attn,
                          cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list);
/* 1/sqrt(d) unless the caller set a scale. */
float effective_scale(const struct flashcl_attention *attn);

/* ---- variant.c: portable or tensor-core kernel ---- */

/* FLASHCL_MMA_CONFIG and FLASHCL_FMA_TILE into the forced shapes the
 * parameters left at 0 (a WARN for a malformed value). */
void variant_read_env(flashcl_context *ctx);
/* Sets ctx->tensor_cores (and the note saying why) for the context's device. */
void variant_probe(flashcl_context *ctx, bool portable_only);
/* After the tensor-core kernel failed on this device: portable from now on,
 * with a WARN saying why (once). */
void variant_disable(flashcl_context *ctx, const char *why);
/* The kernel this (validated) call runs, and its tile: tensor-core, TF32 or
 * one of the FMA kernels. */
flashcl_status variant_choose(flashcl_context *ctx, const struct flashcl_attention *a, struct flashcl_tile *out);
size_t variant_mma_local_bytes(enum flashcl_variant variant, int block_m, int block_n, int head_dim);

/* ---- validate.c ---- */

flashcl_status validate_attention(const flashcl_context *ctx, const struct flashcl_attention *a);

/* One tensor view to check: its full argument name ("grad.d_q"), dims
 * (batch, seq, head) and contiguous last dimension. */
struct view_spec {
    const char *name;
    const flashcl_tensor *t;
    size_t count[3];
    size_t dim;
};
#define VALIDATE_MAX_VIEWS 16
/* The checks validate_attention applies to its views, for other calls:
 * every view valid and inside its buffer; views from first_output on are
 * written, so none overlaps itself or any other view. */
flashcl_status validate_views(const flashcl_context *ctx, const struct view_spec *specs, int n, int first_output);

/* ---- backward.c, shared with standard_backward.c ---- */

/* What a backward call adds to validate_attention: grad's views (d_o read;
 * d_q, d_k, d_v written), their dtypes, grad.reserved all zero, no written
 * view (nor the workspace, when given) overlapping anything; the LSE when
 * needs_lse; a workspace of at least ws_bytes. */
flashcl_status backward_validate(const flashcl_context *ctx, const struct flashcl_attention *a,
                                 const struct flashcl_attention_grad *g, bool needs_lse, cl_mem workspace,
                                 size_t ws_bytes);

/* ---- the context (device.c) ---- */

struct flashcl_context {
    cl_context cl_ctx;
    cl_device_id device;
    char device_name[256];
    cl_device_type device_type;
    cl_ulong local_mem_size;
    cl_ulong max_alloc_size;
    size_t base_align_bytes;  /* sub-buffer origin alignment (at least 512) */
    cl_ulong global_mem_size;
    size_t max_workgroup_size;

    int forced_block_m, forced_block_n;
    int forced_mma_warps, forced_mma_m_tiles, forced_mma_block_n;
    size_t param_local_mem;          /* params.local_mem_bytes */
    size_t probed_local_mem;         /* from the tuning file; 0 if none */
    size_t arch_local_mem;           /* known for the architecture (NVIDIA sm_80+); 0 if not */
    enum flashcl_variant fma_variant; /* params.fma_variant: 0 automatic */
    struct flashcl_tuned_config *tuned;
    int n_tuned;
    char tuning_device[256], tuning_driver[128];
    atomic_bool tensor_cores;    /* the tensor-core kernel may run here; cleared on its failure */
    char tensor_core_note[160];  /* why or why not */

    flashcl_log_fn log;
    void *log_user;
    enum flashcl_log_level log_level;

    char cache_dir[1024];        /* "" when the disk cache is off */
    char cache_identity[640];    /* flashcl version, platform, device, driver */

    pthread_mutex_t lock;  /* guards the program cache and kernel arguments */
    struct program_entry *programs;
};

#endif /* FLASHCL_INTERNAL_H */
