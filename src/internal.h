/* Private declarations shared by the library's source files. */
#ifndef FLASHCL_INTERNAL_H
#define FLASHCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "flashcl.h"
#include "flashcl_tools.h"
#include "kernel_table.h"
#include "test_hooks.h"

#if defined(__GNUC__) || defined(__clang__)
#define FLASHCL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define FLASHCL_PRINTF(fmt, args)
#endif

/* ---- status.c: the per-thread error message and the log ---- */

/* Records a failure's detail for flashcl_last_error() and returns status, so
 * a check reads `return fcl_fail(ctx, FLASHCL_..., "q.offset %zu ...", x);`. ctx may be
 * NULL; with a context the message also goes to its log at ERROR level. */
flashcl_status fcl_fail(const flashcl_context *ctx, flashcl_status status, const char *fmt, ...)
    FLASHCL_PRINTF(3, 4);
/* Appends more text (a build log) to the thread's current error message. */
void fcl_fail_append(const char *text);
void fcl_clear_error(void);
/* The start of every public call: clears the thread's error, then fails
 * (FLASHCL_ERROR_NULL_ARGUMENT, "attn is NULL") on the first NULL pointer
 * of the list, named as written. ctx (which may be NULL) receives the log. */
flashcl_status fcl_enter(const flashcl_context *ctx, const char *names, const void *const *pointers, size_t n);
#define FCL_ENTER(ctx, ...)                                                                                        \
    fcl_enter(ctx, #__VA_ARGS__, (const void *const[]){__VA_ARGS__},                                              \
              sizeof((const void *const[]){__VA_ARGS__}) / sizeof(const void *))
/* The one check of a struct's reserved bytes: FLASHCL_INVALID_VALUE naming
 * `what` (e.g. "attn.reserved") and the first nonzero byte, else success. */
flashcl_status fcl_check_reserved(const flashcl_context *ctx, const char *what, const unsigned char *bytes, size_t n);
#define FCL_CHECK_RESERVED(ctx, what, array) fcl_check_reserved(ctx, what, array, sizeof(array))
void fcl_log_msg(const flashcl_context *ctx, enum flashcl_log_level level, const char *fmt, ...)
    FLASHCL_PRINTF(3, 4);

/* ---- program.c: built programs, keyed by their build options ---- */

struct program_entry;

/* Returns (building on first use) the kernel `name` (a string literal) of
 * the embedded source `source` built with `options`; `sm90a`: through the
 * sm_90a route (cl/nv_wgmma.h). Caller holds ctx->lock. */
flashcl_status fcl_program_get_kernel(flashcl_context *ctx, const char *source, const char *name,
                                  const char *options, bool sm90a, cl_kernel *out);
/* The sm_90a route (cl/nv_wgmma.h): from the PTX the compiler made for sm_90 (size bytes), the same PTX
 * with every marked comment turned into code and the target sm_90a, malloc'd (its length in *out_size),
 * or NULL: no `.target sm_90` line, already sm_90a, or no marker (not a program of the route). */
char *fcl_sm90a_patch(const char *ptx, size_t size, size_t *out_size);
/* Builds `source` with `options` through the sm_90a route for `device` in `cl`, outside any context's
 * program cache and log (the probe); NULL with the error set. */
cl_program fcl_program_build_sm90a(cl_context cl, cl_device_id device, const char *source, const char *options);
void fcl_program_cache_free(flashcl_context *ctx);
/* Appends the caller's extra build options (FLASHCL_BUILD_OPTIONS) to
 * options; false if they do not fit in size. */
bool fcl_append_build_options(const flashcl_context *ctx, char *options, size_t size);

/* workspace.c: device scratch buffers kept for reuse across calls. */
#define FCL_WORKSPACE_SLOTS 4
#define FCL_WORKSPACE_KEPT_BYTES ((size_t)64 << 20)  /* larger requests get a buffer of their own */
struct workspace_slot {
    cl_mem mem;
    size_t bytes;
    cl_event last_use;       /* the last command that used it (the slot's reference), or NULL */
    cl_command_queue queue;  /* the queue last_use was enqueued on (the slot's reference) */
    bool in_use;             /* between acquire and release */
};
struct fcl_workspace {
    cl_mem mem;
    int slot;        /* the context's slot, or -1: the call's own buffer */
    cl_event zeroed; /* a new buffer's zeroing of its counters, which the call's first command must wait for
                        (the call's reference); NULL where the buffer was kept */
};
/* A buffer of at least `bytes` that no command can still be using when commands enqueued next on
 * `queue` run, its first FCL_SPLIT_COUNTERS ints zero (cl/split.h: a new buffer is zeroed there, on
 * `queue`; every call leaves them zero). */
flashcl_status fcl_workspace_acquire(flashcl_context *ctx, size_t bytes, cl_command_queue queue,
                                     struct fcl_workspace *out);
/* used: a command that uses it was enqueued on queue; last_use: the last such command's event, whose
 * reference the call hands over (NULL where it could not be had: the buffer is then not handed out
 * again). */
void fcl_workspace_release(flashcl_context *ctx, struct fcl_workspace *ws, cl_command_queue queue, bool used,
                           cl_event last_use);
/* Whether a slot is between acquire and release (tests: none may be once a call has returned). */
bool fcl_workspace_busy(const flashcl_context *ctx);
void fcl_workspace_free(flashcl_context *ctx);

/* ---- tuning.c: the tuning file ---- */

/* One entry of the tuning file for a kernel of the table. */
struct tuned_entry {
    const struct kernel_info *kernel;
    flashcl_dtype dtype;
    int head_dim;
    enum flashcl_mask mask;
    struct kernel_shape shape;
    int rows;            /* packs_group kernels: the work-group's query rows it is for; 0 any */
    int splits, groups;  /* packs_group kernels: splits measured on groups (sequence, KV head) pairs; 0 the rule */
    enum flashcl_precision precision;  /* the TF32 kernels: the precision it is for; EXACT either */
    double ms;
    bool fallback;  /* measured with another driver or flashcl version of this device */
};

void fcl_tuning_load(flashcl_context *ctx, const char *param_path);
void fcl_tuning_free(flashcl_context *ctx);
/* The entry for this kernel and problem (its dtype, head dim, mask and, for
 * packs_group kernels, rows unless the entry says any; for the TF32 kernels
 * the precision unless the entry says either): one for this exact
 * identity, else one of another driver or flashcl version of the same
 * device; NULL if none. */
const struct tuned_entry *fcl_tuning_find(const flashcl_context *ctx, const struct kernel_info *k,
                                          const struct problem *p);

/* ---- siphash.c: the cache entries' MAC ---- */

#define FCL_SIPHASH_KEY_BYTES 16
/* SipHash-2-4 of data under a 128-bit key. */
uint64_t fcl_siphash24(const unsigned char key[FCL_SIPHASH_KEY_BYTES], const void *data, size_t n);

/* ---- regular_file.c ---- */

/* A regular file opened for reading without blocking (a FIFO or a device
 * is refused, not waited on); NULL with the reason ("absent", ...). */
FILE *fcl_open_regular(const char *path, const char **why);

/* ---- cache.c: compiled programs on disk ---- */

/* The binary (NVIDIA: PTX text) of a built program for `device`, NUL-terminated, malloc'd; NULL if there
 * is none. The program may belong to a context of several devices. */
unsigned char *fcl_program_binary(cl_device_id device, cl_program program, size_t *size);

/* Picks the cache folder (param, FLASHCL_CACHE_DIR, XDG cache; "" or "off":
 * none) and records what identifies this device's binaries. */
void fcl_cache_init(flashcl_context *ctx, const char *param_dir);
/* A built program from the cache, or NULL (absent, or rejected and removed). */
cl_program fcl_cache_load(flashcl_context *ctx, const char *source, const char *options);
void fcl_cache_store(flashcl_context *ctx, const char *source, const char *options, cl_program program);

/* Embedded kernel sources (generated at build time from cl/). */
extern const char flashcl_source_flash_forward[];
extern const char flashcl_source_standard_attention[];
extern const char flashcl_source_flash_forward_mma[];
extern const char flashcl_source_flash_forward_tiled[];
extern const char flashcl_source_flash_forward_tf32[];
extern const char flashcl_source_flash_backward[];
extern const char flashcl_source_flash_backward_mma[];
extern const char flashcl_source_flash_backward_wgmma[];
extern const char flashcl_source_flash_backward_tf32[];
extern const char flashcl_source_flash_backward_tiled[];
extern const char flashcl_source_standard_backward[];
extern const char flashcl_source_flash_decode[];
extern const char flashcl_source_flash_decode_mma[];
extern const char flashcl_source_wgmma_probe[];

/* ---- planner.c: one plan per call from the kernel table ---- */

/* The problem a forward call poses to the planner. */
void fcl_forward_problem(const struct flashcl_attention *a, struct problem *out);
/* The first kernel of the table, in order of preference, that runs p here,
 * with its shape and build options; FLASHCL_ERROR_INVALID_CONFIG naming each
 * kernel's reason when none does. */
flashcl_status fcl_plan(const flashcl_context *ctx, const struct problem *p, float scale_log2, struct plan *out);
void fcl_plan_to_tile(const struct plan *plan, struct flashcl_tile *out);

/* ---- overrides.c: params.kernel_options, FLASHCL_KERNELS, deprecated fields ---- */

#define FCL_MAX_KERNELS 16

struct kernel_override {
    bool off;                  /* never plan this kernel */
    bool named;                /* a clause names it (not off): an opt_in kernel may be planned */
    int splits;                /* split-KV forced (kernels that take it); 0 automatic */
    bool merge_in_place;       /* split-KV merged by the kernel's last work-group ("merge=in-place"), not the combine step */
    unsigned fixed;            /* a bit per axis fixed in `shape` */
    struct kernel_shape shape;
};

flashcl_status fcl_overrides_from_params(flashcl_context *ctx, const struct flashcl_context_params *params,
                                         bool portable_only);

/* ---- forward.c, shared with standard.c and varlen.c ---- */

/* A packed varlen batch's offsets on the device and its totals. */
struct fcl_varlen_args {
    cl_mem cu_q, cu_k;
    cl_int total_q, total_k;
    cl_mem pages;  /* paged KV caches only */
    cl_int page_size, pages_per_seq, num_pages;
};

/* Plans p (planned: the plan the caller already made for it, or NULL) and calls
 * enqueue(ctx, plan, call); a kernel that fails to build or launch is set
 * aside (with those options, for this context) and the call planned again;
 * with no kernel left, the first failure is returned with its message. The
 * one retry loop of every operation. */
flashcl_status fcl_run_planned(flashcl_context *ctx, const struct problem *p, float scale_log2,
                               const struct plan *planned,
                               flashcl_status (*enqueue)(flashcl_context *ctx, const struct plan *plan, void *call),
                               void *call);
/* Plans and enqueues a validated forward (varlen NULL: dense) through fcl_run_planned. */
flashcl_status fcl_forward_planned(flashcl_context *ctx, const struct flashcl_attention *attn, const struct problem *p,
                                   const struct fcl_varlen_args *varlen, cl_command_queue queue,
                                   cl_uint num_wait_events, const cl_event *wait_list, cl_event *event);

/* The wait list's shape and that the queue runs on the context's device. */
flashcl_status fcl_check_queue(const flashcl_context *ctx, cl_command_queue queue, cl_uint num_wait_events,
                               const cl_event *wait_list);
/* Checks what every attention call checks: pointers, the queue, the problem. */
flashcl_status fcl_check_call(flashcl_context *ctx, const struct flashcl_attention *attn, cl_command_queue queue,
                              cl_uint num_wait_events, const cl_event *wait_list);
/* Failures of a kernel itself (it did not build, or the device cannot
 * launch it), after which another kernel of the table may run the call. */
bool fcl_kernel_failure(flashcl_status st);
/* Sets the five kernel arguments of a view (mem, offset and strides in elements) from *arg on. */
cl_int fcl_set_view_args(cl_kernel kernel, cl_uint *arg, const flashcl_tensor *t, size_t esize);
cl_int fcl_set_vector_args(cl_kernel kernel, cl_uint *arg, const flashcl_vector *v);

/* ---- tensor.c ---- */

/* The kernels' -DDTYPE value of a storage type (cl/storage.h). */
int fcl_dtype_define(flashcl_dtype dtype);

/* ---- attention.c: what an attention struct asks for ---- */

/* 1/sqrt(d) unless the caller set a scale; times log2(e) for the kernels' base-2 scores. */
float fcl_effective_scale(const struct flashcl_attention *attn);
float fcl_scale_log2(const struct flashcl_attention *attn);
/* V's and O's last dimension: attn.head_dim_v, or head_dim where that is 0. */
/* An E4M3 view's factor: its descale, 1 where 0. */
float fcl_descale(const flashcl_tensor *t);
int fcl_head_dim_v(const struct flashcl_attention *attn);
/* The keys row i sees as a window around its diagonal (-1: unlimited on
 * that side): causal is (-1, 0), no mask (-1, -1). */
void fcl_attention_window(const struct flashcl_attention *attn, int *left, int *right);

/* ---- nvidia.c: the tensor-core probe ---- */

/* Fills dev->tensor_cores, nv_major/minor and the note (and the
 * architecture's usable local memory) for the context's device. */
void fcl_nvidia_probe(flashcl_context *ctx, bool portable_only, const struct fcl_test_hooks *hooks);
/* A kernel failed to build or launch with these build options here: plan
 * the calls that would build it so without it from now on (this context
 * only), with a WARN saying why. Other shapes of the kernel stay in use. */
void fcl_program_mark_failed(flashcl_context *ctx, const struct kernel_info *k, const char *options, const char *why);
bool fcl_program_failed(const flashcl_context *ctx, const struct kernel_info *k, const char *options);

/* ---- validate.c ---- */

flashcl_status fcl_validate_attention(const flashcl_context *ctx, const struct flashcl_attention *a);
/* What fcl_validate_attention checks of the problem itself (dims, dtypes,
 * scale, mask and window, reserved bytes), not of its views: for calls
 * whose views are laid out otherwise (a paged KV cache). */
flashcl_status fcl_validate_problem(const flashcl_context *ctx, const struct flashcl_attention *a);
/* A view's descale ("attn.<name>.descale" in the message): 0 except on E4M3 storage, there 0 or finite > 0. */
flashcl_status fcl_check_descale(const flashcl_context *ctx, const char *name, const flashcl_tensor *t);
/* FLASHCL_ERROR_INVALID_DTYPE, naming `call`, where any of Q, K, V, O is E4M3: every call but flashcl_forward. */
flashcl_status fcl_refuse_fp8(const flashcl_context *ctx, const struct flashcl_attention *a, const char *call);
/* FLASHCL_ERROR_INVALID_DTYPE, naming `call`, for E4M3 K and V with Q of another dtype (an E4M3 KV cache, which
 * only flashcl_forward_kv_cache reads). */
flashcl_status fcl_refuse_e4m3_cache(const flashcl_context *ctx, const struct flashcl_attention *a, const char *call);
/* flashcl_forward_kv_cache's dtypes: E4M3 K and V (a cache) or none, never E4M3 Q or O. */
flashcl_status fcl_check_e4m3_cache(const flashcl_context *ctx, const struct flashcl_attention *a);

/* A view's rows in bytes of its root buffer: row (i, j, k) is the row_bytes
 * from begin + i * stride[0] + j * stride[1] + k * stride[2], i < count[0],
 * j < count[1], k < count[2]. */
struct fcl_rows {
    size_t begin, row_bytes;
    size_t count[3], stride[3];
};
enum fcl_overlap { FCL_APART, FCL_OVERLAP, FCL_UNDECIDED };
/* Ordered by stride, each dimension of more than one index steps past
 * everything inside it: the rows are distinct and in address order (what
 * every written view must be). */
bool fcl_rows_nested(const struct fcl_rows *r);
/* Whether a row of a and a row of b share a byte, taking steps from *steps:
 * first a search over the differences of their row offsets (a few steps for
 * views that step alike, the slices of a fused buffer; starts and extents
 * under 2^60 bytes), else a walk of one view against the other where that
 * one is nested (up to about the rows of the walked one where their bytes
 * meet, fewer where whole blocks lie apart). FCL_UNDECIDED where neither
 * decides or the steps run out. Rows must have at least one byte. */
enum fcl_overlap fcl_rows_overlap(const struct fcl_rows *a, const struct fcl_rows *b, size_t *steps);
/* The steps one check of a call's views allows all its pairs together (a
 * paged KV-cache call makes three checks, a backward two): a few divisions
 * each, well under a second. Past them the pair is refused (it might
 * overlap). */
#define FCL_OVERLAP_STEPS ((size_t)1 << 24)
/* a * b (a + b) into *out; true (and *out untouched) if it overflows size_t. */
bool fcl_mul_overflows(size_t a, size_t b, size_t *out);
bool fcl_add_overflows(size_t a, size_t b, size_t *out);

/* ---- standard.c ---- */

/* The standard path's workspace for a call, every size overflow-checked
 * (validation of the views is the caller's). */
flashcl_status fcl_standard_workspace_bytes(const flashcl_context *ctx, const struct flashcl_attention *a,
                                           size_t *bytes);
/* The standard paths' queue must be in-order (CLBlast's GEMMs rely on its
 * order); a queue whose properties cannot be read is refused too. */
flashcl_status fcl_check_in_order(const flashcl_context *ctx, cl_command_queue queue);
/* Sets cl/standard_attention.cl's row_softmax arguments for S at (s_off,
 * s_entry) of ws (the call's mask; its LSE written when write_lse and
 * attn.lse is given) and enqueues it, in queue order. */
cl_int fcl_enqueue_row_softmax(cl_command_queue queue, cl_kernel softmax, cl_mem ws, cl_ulong s_off, cl_ulong s_entry,
                               const struct flashcl_attention *a, bool write_lse);

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
flashcl_status fcl_validate_views(const flashcl_context *ctx, const struct view_spec *specs, int n, int first_output);
/* A flashcl_vector as a view of [1, 1, n] f32 (n heads), for the view checks. */
flashcl_tensor fcl_vector_view(const flashcl_vector *v);

/* ---- backward.c, shared with standard_backward.c ---- */

/* What a backward call adds to validate_attention: grad's views (d_o read;
 * d_q, d_k, d_v written), their dtypes, grad.reserved all zero, no written
 * view (nor the workspace, when given) overlapping anything; the LSE when
 * needs_lse; a workspace of at least ws_bytes. */
flashcl_status fcl_backward_validate(const flashcl_context *ctx, const struct flashcl_attention *a,
                                 const struct flashcl_attention_grad *g, bool needs_lse, cl_mem workspace,
                                 size_t ws_bytes);

/* ---- device.c: the context ---- */

/* The environment, read once at context creation (never per call). */
struct fcl_env {
    char *device;              /* FLASHCL_DEVICE; NULL when unset (the strings are the context's copies) */
    bool portable;             /* FLASHCL_PORTABLE=1 */
    bool step_times;           /* FLASHCL_STEP_TIMES=1: each backward step's time logged (it waits for them) */
    char *tuning;              /* FLASHCL_TUNING; NULL when unset, "" for none */
    char *cache_dir;           /* FLASHCL_CACHE_DIR; NULL when unset */
    char *build_options;       /* FLASHCL_BUILD_OPTIONS; "" when unset */
    char *kernels;             /* FLASHCL_KERNELS; "" when unset */
    char *user_cache;          /* $XDG_CACHE_HOME/flashcl or ~/.cache/flashcl; "" if neither is set */
};

struct failed_program {
    const struct kernel_info *kernel;
    char *options;
    struct failed_program *next;
};

struct flashcl_context {
    cl_context cl_ctx;
    cl_device_id device;
    struct device_desc dev;
    cl_ulong max_alloc_size;
    size_t base_align_bytes;  /* sub-buffer origin alignment (at least 512) */
    cl_ulong global_mem_size;
    size_t param_local_mem;   /* params.local_mem_bytes */
    size_t probed_local_mem;  /* from the tuning file; 0 if none */
    size_t arch_local_mem;    /* known for the architecture (NVIDIA sm_80+); 0 if not */
    char tensor_core_note[160];  /* why or why not */
    char wgmma_note[256];        /* why the sm_90a route's kernels are planned or not */

    struct fcl_env env;
    struct fcl_test_hooks hooks;
    struct kernel_override overrides[FCL_MAX_KERNELS];
    struct failed_program *failed;  /* kernels and options that failed here; guarded by lock */

    struct tuned_entry *tuned;
    int n_tuned;
    char tuning_device[256], tuning_driver[128];

    flashcl_log_fn log;
    void *log_user;
    enum flashcl_log_level log_level;

    char cache_dir[1024];        /* "" when the disk cache is off */
    char cache_identity[640];    /* flashcl version, platform, device, driver */
    unsigned char cache_key[FCL_SIPHASH_KEY_BYTES];  /* the folder's secret: entries carry its MAC */

    pthread_mutex_t lock;  /* guards the program cache, kernel arguments and the workspace slots */
    struct program_entry *programs;
    struct workspace_slot workspace[FCL_WORKSPACE_SLOTS];
};

#endif /* FLASHCL_INTERNAL_H */
