/*
 * flashcl: exact FlashAttention as OpenCL kernels.
 *
 * One header, C99, usable from C++. The library computes
 *
 *     O = softmax(scale * Q Kᵀ  [+ causal or window mask]) V
 *
 * block by block in OpenCL local memory (the online-softmax recurrence), so no
 * N×N matrix ever exists, and its exact gradients (flashcl_backward). Every
 * call is enqueued on the caller's command queue and returns without waiting,
 * like CLBlast.
 *
 * Thread safety: a flashcl_context may be used from several threads at once;
 * the library serialises what must be serialised. flashcl_last_error() is
 * per thread.
 *
 * A C user's checklist:
 *  1. Link with `pkg-config --cflags --libs flashcl`; check at start-up that
 *     flashcl_api_version() == FLASHCL_API_VERSION if the binary may meet
 *     another build of the library.
 *  2. flashcl_context_create(NULL, &ctx) picks a device (FLASHCL_DEVICE, else
 *     the first GPU); pass your own cl_context and cl_device_id to share
 *     buffers with the rest of your program.
 *  3. Zero every struct before filling it (`struct flashcl_attention a = {0};`,
 *     designated initialisers): zero is each field's default and the
 *     reserved bytes must be zero.
 *  4. Describe each tensor with a view (flashcl_tensor_bnhd / _bhnd, or your
 *     own strides); outputs may not overlap inputs.
 *  5. Enqueue on a queue of the context's device; wait on the returned event
 *     or on the queue before reading the outputs. Buffers must outlive the
 *     work.
 *  6. On a status other than FLASHCL_SUCCESS nothing was enqueued;
 *     flashcl_last_error() says which argument and why.
 *  7. Kernels are named by strings ("tensor-core", "backward-tiled", ...):
 *     the *_config calls report the one a call runs, params.kernel_options
 *     steers them. Nothing needs setting for a correct result.
 *  8. Release with flashcl_context_destroy(&ctx) once your own work on it
 *     is enqueued; work in flight keeps what it needs.
 */
#ifndef FLASHCL_H
#define FLASHCL_H

#include <stddef.h>

/* flashcl is written against OpenCL 1.2; a caller who wants newer API in the
 * same translation unit defines CL_TARGET_OPENCL_VERSION before this header. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#ifdef __APPLE__
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif

#include "flashcl_version.h"

#if defined(_WIN32) && defined(FLASHCL_BUILDING_DLL)
#define FLASHCL_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define FLASHCL_API __attribute__((visibility("default")))
#else
#define FLASHCL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version at run time, e.g. "0.4.0" (FLASHCL_VERSION_STRING is
 * the header's). */
FLASHCL_API const char *flashcl_version(void);
/* The loaded library's ABI number (FLASHCL_API_VERSION is the header's): a
 * program may refuse to run where the two differ. */
FLASHCL_API int flashcl_api_version(void);

/* ------------------------------------------------------------------------ */
/* Status                                                                     */
/* ------------------------------------------------------------------------ */

/* Every function that can fail returns a flashcl_status. OpenCL's own codes
 * are passed through unchanged (they are negative cl_int values); flashcl's
 * own failures use the range from -3000 down (clear of CLBlast's codes). flashcl_last_error() gives the
 * detail: which argument, which value, the kernel build log. */
typedef enum flashcl_status {
    FLASHCL_SUCCESS                  = 0,    /* CL_SUCCESS */
    FLASHCL_DEVICE_NOT_FOUND         = -1,   /* CL_DEVICE_NOT_FOUND */
    FLASHCL_OUT_OF_RESOURCES         = -5,   /* CL_OUT_OF_RESOURCES */
    FLASHCL_OUT_OF_HOST_MEMORY       = -6,   /* CL_OUT_OF_HOST_MEMORY */
    FLASHCL_BUILD_PROGRAM_FAILURE    = -11,  /* CL_BUILD_PROGRAM_FAILURE */
    FLASHCL_INVALID_VALUE            = -30,  /* CL_INVALID_VALUE */
    FLASHCL_INVALID_CONTEXT          = -34,  /* CL_INVALID_CONTEXT: e.g. a buffer of another context */
    FLASHCL_INVALID_COMMAND_QUEUE    = -36,  /* CL_INVALID_COMMAND_QUEUE */
    FLASHCL_INVALID_MEM_OBJECT       = -38,  /* CL_INVALID_MEM_OBJECT */

    FLASHCL_ERROR_NULL_ARGUMENT      = -3000, /* a required pointer or cl_mem is NULL */
    FLASHCL_ERROR_INVALID_SHAPE      = -3001, /* a dimension <= 0, head_dim > 256, heads_q % heads_kv != 0 */
    FLASHCL_ERROR_INVALID_DTYPE      = -3002, /* unknown dtype, or Q/K/V/O dtypes differ, or LSE not f32 */
    FLASHCL_ERROR_OUT_OF_BOUNDS      = -3003, /* a view reaches past the end of its cl_mem */
    FLASHCL_ERROR_OVERFLOW           = -3004, /* a view's extent does not fit in size_t */
    FLASHCL_ERROR_MISALIGNED         = -3005, /* an offset is not a multiple of the element size */
    FLASHCL_ERROR_ALIASING           = -3006, /* the output overlaps an input or the other output */
    FLASHCL_ERROR_INVALID_SCALE      = -3007, /* softmax scale is NaN or infinite */
    FLASHCL_ERROR_INVALID_CONFIG     = -3008, /* a forced block size the device cannot run */
    FLASHCL_ERROR_UNSUPPORTED_DEVICE = -3009, /* the device lacks what flashcl needs */
    FLASHCL_ERROR_INVALID_ENV        = -3010, /* FLASHCL_DEVICE names no device */
    FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY = -3011, /* the standard path's N×N workspace does not fit */
    FLASHCL_ERROR_CLBLAST            = -3012  /* CLBlast failed; the message has its status */
} flashcl_status;

/* Short constant name of a status, e.g. "FLASHCL_ERROR_OUT_OF_BOUNDS";
 * "CL_..." names for OpenCL codes. Never NULL. */
FLASHCL_API const char *flashcl_status_name(flashcl_status status);

/* The detail of the most recent failure in the calling thread: a sentence
 * naming the argument and value (and the build log after a build failure).
 * Empty string if the thread has seen no failure. Valid until the thread's
 * next flashcl call. */
FLASHCL_API const char *flashcl_last_error(void);

/* ------------------------------------------------------------------------ */
/* Context                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct flashcl_context flashcl_context;

enum flashcl_log_level {
    FLASHCL_LOG_ERROR = 1,
    FLASHCL_LOG_WARN  = 2,
    FLASHCL_LOG_INFO  = 3,  /* device chosen, kernels built */
    FLASHCL_LOG_DEBUG = 4   /* build options, per-call configuration */
};

typedef void (*flashcl_log_fn)(void *user, enum flashcl_log_level level, const char *message);

/* Parameters of flashcl_context_create. Zero/NULL in any field means its
 * default; a NULL params pointer means all defaults. */
struct flashcl_context_params {
    /* The caller's context and device. Both NULL: the library chooses a device
     * (FLASHCL_DEVICE, else the first GPU on any platform, else the first
     * device) and creates and owns its own cl_context. Both given: the caller
     * keeps ownership; the library retains them while the flashcl_context
     * lives. Exactly one given is an error. */
    cl_context context;
    cl_device_id device;

    /* Device selection used when no device is given, overriding the
     * FLASHCL_DEVICE environment variable: "P:D" (platform and device index,
     * as clinfo -l lists them) or a case-insensitive substring of the
     * platform or device name, e.g. "NVIDIA" or "pthread". NULL: the env. */
    const char *device_select;

    /* Nonzero: never use the tensor-core kernels (tensor-core, TF32,
     * decode-tensor-core, backward-tensor-core(-fused)), only
     * the FMA ones (also set by the environment variable FLASHCL_PORTABLE=1);
     * the tensor-core probe is not run. */
    int portable_only;

    /* The tuning file (written by flashcl-probe --tune). NULL: FLASHCL_TUNING,
     * else $XDG_CACHE_HOME/flashcl/tuning.txt (~/.cache/flashcl/tuning.txt).
     * "": none. Entries for another device, driver or flashcl version are
     * ignored; a malformed file is reported (WARN) and ignored as a whole. */
    const char *tuning_file;

    /* Local memory a work-group may really use, when the device reports less
     * than works (NVIDIA reports 48 KB; static arrays up to 227 KB run on an
     * H200). 0: the tuning file's probed value, else the reported one. Only
     * forced and tuned tiles use more than the reported size. */
    size_t local_mem_bytes;

    /* Folder of the on-disk program cache. NULL: FLASHCL_CACHE_DIR, else
     * $XDG_CACHE_HOME/flashcl, else ~/.cache/flashcl. "" (or "off"): no
     * disk cache. A folder that cannot be created or written turns it off. */
    const char *cache_dir;

    /* Where the library's messages go. NULL: nowhere (flashcl never prints). */
    flashcl_log_fn log;
    void *log_user;
    enum flashcl_log_level log_level;  /* most verbose level passed; 0: INFO */

    /* Per-kernel overrides, one mechanism for every kernel: clauses separated
     * by ';', each a kernel name (struct flashcl_tile lists them) and ':' then one or
     * more comma-separated settings — `axis=value` fixes an axis of its
     * shape (block_m, block_n, warps, m_tiles, as the kernel has them; the
     * others stay automatic), `splits=N` forces split-KV where the kernel
     * takes it, `merge=in-place` has the kernel's last work-group merge the
     * splits instead of a second kernel (decode-tensor-core; opt-in, not yet
     * measured on a GPU; `merge=separate`, the default, keeps the second
     * kernel), `off` keeps every call off that kernel, `on` only names it
     * (an opt-in kernel, backward-tensor-core-fused, is planned only where a
     * clause names it). E.g.
     * "tensor-core:warps=4,m_tiles=2,block_n=64;register-tiled:off".
     * An empty clause (";;", a ';' leading or trailing) is nothing, so
     * strings of clauses can be joined; inside a clause an empty setting
     * (",,", a ',' leading or trailing) or a name with no setting
     * ("decode:") is malformed.
     * A fixed shape whose local memory does not fit leaves the call to the
     * next kernel; where no kernel is left, the call fails with
     * FLASHCL_ERROR_INVALID_CONFIG. NULL: the environment variable
     * FLASHCL_KERNELS (read once, here; a malformed value is a WARN and
     * ignored); a malformed parameter fails context creation. */
    const char *kernel_options;

    /* Zero. Fields of later versions take this room, so a binary built
     * against this header keeps working with them. */
    unsigned char reserved[64];
};

/* Compound-literal helper (C only):
 * flashcl_context_params(.kernel_options = "register-tiled:block_m=32") */
#define flashcl_context_params(...) (&(const struct flashcl_context_params){ __VA_ARGS__ })

/* Creates a context bound to one OpenCL device. On failure *out is NULL. */
FLASHCL_API flashcl_status flashcl_context_create(const struct flashcl_context_params *params,
                                                  flashcl_context **out);

/* Releases everything the context holds and sets *ctx to NULL. Accepts NULL
 * and &NULL. Work already enqueued keeps its own references and completes. */
FLASHCL_API void flashcl_context_destroy(flashcl_context **ctx);

/* The OpenCL objects the context runs on (owned by whoever created them). */
FLASHCL_API cl_context flashcl_context_cl_context(const flashcl_context *ctx);
FLASHCL_API cl_device_id flashcl_context_device(const flashcl_context *ctx);
/* Device name, e.g. "NVIDIA H200". */
FLASHCL_API const char *flashcl_context_device_name(const flashcl_context *ctx);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum flashcl_dtype {
    FLASHCL_F32  = 1,  /* IEEE binary32 */
    FLASHCL_F16  = 2,  /* IEEE binary16, read/written with vload_half (no cl_khr_fp16 needed) */
    FLASHCL_BF16 = 3,  /* bfloat16 */
    /* FP8 E4M3 (OCP's "FN" form: 4 exponent bits of bias 7, 3 mantissa bits,
     * no infinities, NaN 0x7f/0xff, largest finite 448), a value being the
     * stored one times its view's descale; the rows of Q, K, V and O start on
     * 16 bytes (offsets and strides multiples of 16 bytes; else
     * FLASHCL_ERROR_MISALIGNED). Inputs of flashcl_forward and
     * flashcl_forward_varlen (Q, K and V together; O f16, bf16 or f32),
     * on Hopper's wgmma (compute capability 9.0: the kernel
     * "tensor-core-wgmma-fp8"). Also an E4M3 KV cache: K and V of
     * flashcl_forward_kv_cache with Q and O f32, f16 or bf16 (see there; any
     * alignment, any device). Every other use (one of K and V alone, the
     * backward, the standard path) is refused. */
    FLASHCL_E4M3 = 4
} flashcl_dtype;

/* Bytes per element of a dtype; 0 for an unknown value. */
FLASHCL_API size_t flashcl_dtype_size(flashcl_dtype dtype);
/* "f32", "f16", "bf16" or "e4m3"; NULL for an unknown value. */
FLASHCL_API const char *flashcl_dtype_name(flashcl_dtype dtype);

/* A view of a 4-D tensor [batch, seq, head, dim] in a cl_mem. The last
 * dimension is contiguous; the other three have element strides, so
 * [B,N,H,d], [B,H,N,d] and slices of a fused QKV buffer are all views of
 * their buffers. Arithmetic is always f32; dtype is the storage format.
 * The LSE output uses the same struct with dim = 1 (stride_head and
 * stride_seq give its layout). */
typedef struct flashcl_tensor {
    cl_mem mem;
    size_t offset;        /* bytes from the start of mem; a multiple of the element size */
    flashcl_dtype dtype;
    size_t stride_batch;  /* elements */
    size_t stride_seq;    /* elements */
    size_t stride_head;   /* elements */
    /* FLASHCL_E4M3 only (else 0): the per-tensor factor each stored value
     * is multiplied by (the scale it was quantised with, inverted). 0: 1;
     * else finite and > 0. */
    float descale;
    /* Zero (the view helpers below and `= {0}` leave it so). Room for
     * fields of later versions; a nonzero byte is refused
     * (FLASHCL_INVALID_VALUE). */
    unsigned char reserved[12];
} flashcl_tensor;

/* A vector of f32 in a cl_mem: element i at byte offset + 4 i. mem == NULL:
 * absent. Used for per-head values (attention sinks and their gradient). */
typedef struct flashcl_vector {
    cl_mem mem;
    size_t offset;  /* bytes from the start of mem; a multiple of 4 */
} flashcl_vector;

/* Contiguous [batch, seq, heads, dim] view (the layout of PyTorch's
 * flash_attn and of most model code). */
FLASHCL_API flashcl_tensor flashcl_tensor_bnhd(cl_mem mem, flashcl_dtype dtype, size_t seq,
                                               size_t heads, size_t dim);
/* Contiguous [batch, heads, seq, dim] view (the layout of PyTorch's SDPA). */
FLASHCL_API flashcl_tensor flashcl_tensor_bhnd(cl_mem mem, flashcl_dtype dtype, size_t seq,
                                               size_t heads, size_t dim);
/* Contiguous f32 [batch, heads, seq] view for the log-sum-exp output. */
FLASHCL_API flashcl_tensor flashcl_tensor_lse(cl_mem mem, size_t seq, size_t heads);

/* ------------------------------------------------------------------------ */
/* Attention                                                                  */
/* ------------------------------------------------------------------------ */

#define FLASHCL_MAX_HEAD_DIM 256

/* Arithmetic an f32 call allows (docs/precision.md has the measured errors). */
enum flashcl_precision {
    FLASHCL_PRECISION_EXACT = 0,  /* f32 products and sums: rounding-level agreement with a
                                     double-precision reference */
    FLASHCL_PRECISION_TF32 = 1,   /* QKᵀ and PV on TF32 tensor cores: each operand keeps 10
                                     mantissa bits (about 3e-4 relative L2 error in O seen) */
    FLASHCL_PRECISION_TF32X3 = 2  /* each operand split into two TF32 parts, three products
                                     (CUTLASS's 3xTF32): errors near f32's, fewer FLOP/s */
};

/* Which scores a query sees. */
enum flashcl_mask {
    FLASHCL_MASK_NONE = 0,    /* every key */
    FLASHCL_MASK_CAUSAL = 1,  /* query i sees key j only if j <= i + (seq_kv - seq_q): aligned to
                                 the bottom-right corner as in FlashAttention >= 2.1 */
    FLASHCL_MASK_WINDOW = 2   /* a sliding window (FlashAttention's semantics): query i sees key j
                                 only if i + (seq_kv - seq_q) - window_left <= j <= i + (seq_kv -
                                 seq_q) + window_right, a side with window -1 unlimited; causal
                                 local attention is window_right = 0 */
};

/* One attention problem. Q [batch, seq_q, heads_q, head_dim]; K
 * [batch, seq_kv, heads_kv, head_dim]; V [batch, seq_kv, heads_kv, dv] and
 * O [batch, seq_q, heads_q, dv], dv = head_dim_v (head_dim where 0). Query
 * head h reads key/value head h / (heads_q / heads_kv) (grouped-query and
 * multi-query attention). */
struct flashcl_attention {
    int batch;
    int seq_q;
    int seq_kv;
    int heads_q;
    int heads_kv;   /* divides heads_q */
    int head_dim;   /* 1..FLASHCL_MAX_HEAD_DIM */

    flashcl_tensor q, k, v;  /* same dtype */
    flashcl_tensor o;        /* written; same dtype as q (f16, bf16 or f32 for E4M3 inputs) */
    /* Optional output, f32 [batch, heads_q, seq_q]: the natural log of the
     * row's sum of exp(scaled score), -INFINITY for a row that sees no key.
     * lse.mem == NULL: not written. */
    flashcl_tensor lse;

    /* Multiplies QKᵀ before the softmax. 0: 1/sqrt(head_dim). Any other
     * finite value is used as given. */
    float scale;

    /* How f32 inputs may be multiplied (f16/bf16 ignore it). 0 (EXACT):
     * f32 FMA, the default. TF32 / TF32X3 allow the TF32 tensor-core kernels
     * (the forward's "tf32", and flashcl_backward's "backward-tf32")
     * where the context has tensor cores (flashcl_forward_config and
     * flashcl_backward_config say which kernel runs; elsewhere the call stays
     * exact). */
    enum flashcl_precision precision;

    /* FLASHCL_MASK_NONE (0), FLASHCL_MASK_CAUSAL or FLASHCL_MASK_WINDOW. A
     * query row that sees no key (e.g. causal with seq_q > seq_kv) gets
     * O = 0, LSE = -inf. */
    enum flashcl_mask mask;

    /* FLASHCL_MASK_WINDOW only (else 0): keys seen left and right of the
     * row's diagonal, -1 for no limit on that side. Every forward kernel
     * takes windows (key blocks wholly outside one are skipped), and every
     * backward kernel but the opt-in "backward-tensor-core-fused" and
     * "backward-wgmma-atomic" (whose dQ turns count blocks from the last). */
    int window_left, window_right;

    /* Logit softcapping (Gemma 2, Grok): each scaled score s = scale·q·k
     * becomes softcap·tanh(s / softcap) before the mask and the softmax, and
     * the LSE is that of the capped scores; the backward differentiates
     * through the cap. 0: none; else finite and > 0. Computed by every
     * forward and backward kernel. The standard path refuses it. */
    float softcap;

    /* Attention sinks (gpt-oss; StreamingLLM-style serving): sinks.mem !=
     * NULL gives f32 [heads_q], a logit per query head that joins every
     * row's softmax denominator and has no value: with s_j the row's
     * (scaled, capped, masked) scores, P_j = exp(s_j) / (exp(sink) +
     * Σ exp(s_j)), O = Σ P_j V_j, and the LSE is log(exp(sink) + Σ exp(s_j)).
     * A row that sees no key gets O = 0 and LSE = sink. The sink is used as
     * given (not scaled or capped); a sink of -INFINITY is none for its head.
     * Computed by every forward kernel, split-KV merges included;
     * flashcl_backward takes them through the LSE (every backward kernel)
     * and writes their gradient to grad.d_sinks. The standard path refuses
     * them. */
    flashcl_vector sinks;

    /* ALiBi (BLOOM, MPT): alibi_slopes.mem != NULL gives f32 [heads_q], a
     * slope per query head; query row i's score against key j gains
     * -slope·|j - (i + seq_kv - seq_q)|, the distance from the row's diagonal
     * in the masks' bottom-right alignment (each sequence's own lengths in
     * packed batches and caches). The bias joins the scaled (and capped)
     * score, before the mask and the softmax, so the LSE is that of the
     * biased scores (FlashAttention-2's causal form adds slope·j instead,
     * which differs from this by a constant a row: the same O, another LSE).
     * A slope of 0 is none for its head; slopes must be finite (a NaN or
     * infinite slope gives NaN rows; the library does not read device data
     * to check). Computed by every forward and backward kernel (the bias has
     * no gradient of its own). The standard path refuses them. */
    flashcl_vector alibi_slopes;

    /* The value head dim dv, where it differs from head_dim (DeepSeek's MLA
     * prefill: 192 for Q and K, 128 for V): V's and O's last dimension, and
     * the gradients dV and dO's. 0: head_dim; else 1..FLASHCL_MAX_HEAD_DIM.
     * The scale's default stays 1/sqrt(head_dim). Computed by the forward
     * (dense, packed batches, KV caches, split-KV): on the f16/bf16
     * tensor-core kernels ("tensor-core", "tensor-core-wgmma") where dv too is
     * a multiple of 16 up to 256 (any relation to head_dim), decode on
     * "decode-tensor-core" likewise, else on the "portable" kernel (the FMA
     * "decode" kernel does not take it). The backward computes it on
     * "backward-wgmma" (compute capability 9.0, f16/bf16, both head dims
     * multiples of 16) and else on the FMA kernels ("backward-tiled" where
     * both head dims are multiples of 4, else "backward"; any device); the
     * standard path refuses it. */
    int head_dim_v;

    /* Zero. Room for fields of later versions (sequence offsets, page
     * tables) without changing the struct's size. */
    unsigned char reserved[80];
};

/* ------------------------------------------------------------------------ */
/* Kernels and tiles                                                          */
/* ------------------------------------------------------------------------ */

/* Where a tile came from. */
enum flashcl_tile_source {
    FLASHCL_TILE_RULE = 1,    /* the sizing rule on the local memory (flashcl_block_size_bound) */
    FLASHCL_TILE_DEFAULT = 2, /* a built-in shape of the kernel */
    FLASHCL_TILE_TUNED = 3,   /* an entry of the tuning file */
    FLASHCL_TILE_FORCED = 4   /* params.kernel_options (or FLASHCL_KERNELS) */
};

/* The kernel one call runs and its tile, as the *_config calls report it.
 * Kernels are named, never numbered: the names are those of
 * params.kernel_options, the logs and the tuning file ("portable",
 * "register-tiled", "tensor-core", "tensor-core-wgmma", "tf32", "decode",
 * "decode-tensor-core", "backward", "backward-tiled", "backward-wgmma",
 * "backward-tensor-core", "backward-tensor-core-fused", "backward-tf32";
 * docs/design.md's table, or
 * `flashcl-probe --kernels`, says what each runs), and a later version may
 * add kernels without changing this header. */
struct flashcl_tile {
    const char *kernel;  /* the kernel's name; static storage, never NULL after a successful call */
    enum flashcl_tile_source source;
    int warps, m_tiles;  /* tensor-core and TF32 kernels only (0 otherwise) */
    int block_m;        /* query rows per work-group */
    int block_n;        /* keys per streamed K/V block */
    int workgroup_size; /* work-items per work-group (backward-tiled: its dK/dV step's; dQ's is 4·block_m) */
    size_t local_bytes; /* local memory the kernel declares */
    int splits;         /* split-KV: work-groups sharing a query block's keys, merged after (1: none) */
    unsigned char reserved[28];  /* written as zero; room for later fields */
};

/* Enqueues O = softmax(scale·QKᵀ)·V (and LSE) on queue, after the events in
 * wait_list; *event (if not NULL) receives an event that completes with the
 * work. Does not block. No N×N buffer exists: the one device memory the call
 * itself needs is a split-KV call's f32 partials (flashcl_tile.splits > 1:
 * splits·batch·heads_q·seq_q·(head_dim + 1) floats), taken from up to four
 * buffers of at most 64 MB the context keeps for later calls (one is reused
 * only once every command that used it is complete, so calls never wait on
 * each other; released with the context), else made for the call and
 * released with its commands. On any validation failure nothing is
 * enqueued and the outputs are untouched. The queue must belong to the
 * context's cl_context and device.
 *
 * Every view is a buffer (not an image) inside its cl_mem; inputs must be
 * readable (not CL_MEM_WRITE_ONLY) and outputs writable (not
 * CL_MEM_READ_ONLY). An output may not overlap an input, another output or
 * itself, judged in bytes within the same buffer (a sub-buffer counts as
 * its parent's range). Between two views the judgement is exact, row by
 * row: views that share no byte may interleave, as the slices of a fused
 * [B, N, 3, H, d] or [B, N, H, 3, d] buffer do, and views that share one
 * are refused; a pair it cannot tell apart within its step budget (views
 * of different strides interleaving over tens of millions of rows; the
 * slices of one layout are decided at once below 2^60 bytes) is refused
 * too. An output's own rows must be
 * laid out so that, ordered by stride, each dimension steps past everything
 * inside it (a sufficient test: a few layouts of one view that share no
 * byte are refused). Two buffers created with CL_MEM_USE_HOST_PTR over the
 * same host memory look distinct to the library: such aliasing is the
 * caller's to avoid. */
FLASHCL_API flashcl_status flashcl_forward(flashcl_context *ctx, const struct flashcl_attention *attn,
                                           cl_command_queue queue, cl_uint num_wait_events,
                                           const cl_event *wait_list, cl_event *event);

/* The kernel and tile flashcl_forward would use for this exact call: the
 * first kernel, in order of preference (decode-tensor-core and decode for
 * calls whose KV head's query rows, group x seq_q, are at most 16; then
 * tensor-core-wgmma, tensor-core, tf32, register-tiled, portable), that
 * supports the call and whose shape fits. Where the context
 * has tensor cores (NVIDIA, compute capability >= 8.0, the probe built, not
 * portable_only) and every view's rows start on 16 bytes (offset and
 * strides multiples of 16 bytes): f16/bf16 with head_dim a multiple of 16
 * up to 256 run the tensor-core kernel — on compute capability 9.0 the
 * wgmma kernel where flashcl_context_has_wgmma, unless the kernel options
 * turn it off, or name tensor-core (a shape, splits, "on") or turn that off
 * without naming it; f32 with precision TF32/TF32X3 and
 * head_dim a multiple of 8 up to 128 the TF32 kernel. Everything else runs
 * on the FMA units: the register-tiled kernel where head_dim % 4 == 0 and
 * its tile fits the local memory, else the portable one. */
FLASHCL_API flashcl_status flashcl_forward_config(flashcl_context *ctx,
                                                  const struct flashcl_attention *attn,
                                                  struct flashcl_tile *out);

/* ------------------------------------------------------------------------ */
/* Packed batches of different lengths                                        */
/* ------------------------------------------------------------------------ */

/* FlashAttention's varlen layout: sequence b's queries are rows
 * cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of Q and O, packed as
 * [total_q, heads_q, head_dim]; its keys rows cu_seqlens_k[b] ..
 * cu_seqlens_k[b + 1] - 1 of K and V, packed as [total_k, heads_kv,
 * head_dim]. Each sequence attends only to its own keys; a causal or window
 * mask aligns bottom-right per sequence; an empty sequence writes nothing. */
struct flashcl_varlen {
    int total_q, total_k;  /* packed rows of Q/O and of K/V, >= 1 */
    /* The batch + 1 offsets of each, from the host (checked fully: from 0
     * or more, never decreasing, the last at most the total, no sequence
     * longer than attn.seq_q / attn.seq_kv; copied at the call, the arrays
     * may be freed when it returns) ... */
    const int *cu_seqlens_q, *cu_seqlens_k;
    /* ... or from the device: int32 buffers of at least batch + 1 entries
     * (from byte 0 of the cl_mem; inputs like Q, so sharing no byte with O
     * or the LSE), read by the kernels unchecked. No value can make a kernel
     * read or write outside the packed rows: an offset below 0 or past the
     * total counts as 0 or the total, a decreasing pair is an empty
     * sequence, a sequence longer than attn.seq_q (seq_kv) is cut to that
     * length (with E4M3 inputs, key offsets that decrease leave every
     * sequence's O unspecified, their transposed V's columns being placed
     * by the offsets; still nothing outside the call's buffers is touched). Set the host array or the buffer of each,
     * not both. */
    cl_mem cu_seqlens_q_mem, cu_seqlens_k_mem;
    unsigned char reserved[32];  /* zero */
};

/* Enqueues attention over a packed varlen batch. attn describes the batch:
 * batch is the number of sequences, seq_q and seq_kv the longest query and
 * key lengths (the grid is sized for them), q, k, v, o views of the packed
 * tensors (stride_seq and stride_head are used, stride_batch is not), lse
 * (optional) f32 [heads_q, total_q] (stride_head and stride_seq), mask,
 * scale and precision as for flashcl_forward, on the same kernels (the
 * tensor-core ones included; flashcl_forward_varlen_config says which).
 * Validation as strict as flashcl_forward's; a rejected call enqueues
 * nothing. */
FLASHCL_API flashcl_status flashcl_forward_varlen(flashcl_context *ctx, const struct flashcl_attention *attn,
                                                  const struct flashcl_varlen *varlen, cl_command_queue queue,
                                                  cl_uint num_wait_events, const cl_event *wait_list,
                                                  cl_event *event);

/* A KV cache filled to a different length per sequence (decode, chunked
 * prefill): K and V are [batch, capacity, heads_kv, head_dim] views with
 * attn.seq_kv = capacity, and sequence b's keys are its first
 * cache_seqlens[b]; Q and O are dense [batch, seq_q, heads_q, head_dim]
 * views, the queries being the last seq_q positions of each sequence, so
 * causal and window masks align to the end of its own keys. A sequence of
 * 0 keys gets O = 0, LSE = -inf. */
struct flashcl_kv_lengths {
    /* Host lengths, batch entries of 0 .. attn.seq_kv (checked; copied at
     * the call) ... */
    const int *cache_seqlens;
    /* ... or a device int32 buffer of at least batch entries (sharing no
     * byte with O or the LSE), read unchecked and clamped to 0 ..
     * attn.seq_kv in the kernels. One of the two. */
    cl_mem cache_seqlens_mem;
    unsigned char reserved[32];  /* zero */
};

/* A paged KV cache (vLLM's and FlashAttention's layout): K and V are views
 * of a pool of num_pages pages of page_size rows each, [num_pages,
 * page_size, heads_kv, head_dim] (stride_batch steps pages, stride_seq rows
 * in a page), and key j of sequence b lives in row j % page_size of page
 * block_table[b * pages_per_seq + j / page_size]; attn.seq_kv must be
 * pages_per_seq * page_size, within a dense call's limits (at most 2^30;
 * with a window, seq_q + seq_kv below 2^30). Pages may lie in the pool in
 * any order. */
struct flashcl_kv_pages {
    int page_size;      /* rows per page, a multiple of 16 */
    int pages_per_seq;  /* block-table entries per sequence */
    int num_pages;      /* pages in the pool */
    /* The block table, batch * pages_per_seq page indices: a host array
     * (checked: each 0 .. num_pages - 1; copied at the call) or a device
     * int32 buffer (sharing no byte with O or the LSE; read unchecked, each
     * index clamped to 0 .. num_pages - 1). One of the two. */
    const int *block_table;
    cl_mem block_table_mem;
    unsigned char reserved[32];  /* zero */
};

/* Enqueues attention against a KV cache of per-sequence lengths, contiguous
 * (pages NULL) or paged; otherwise as flashcl_forward, on the same kernels
 * (flashcl_forward_kv_cache_config says which).
 *
 * An E4M3 cache: attn.k and attn.v both FLASHCL_E4M3 (each with its
 * descale), attn.q and attn.o one of f32, f16 and bf16. A key's values are
 * its bytes times k.descale, a value's times v.descale; every E4M3 value is
 * exact in Q's dtype, so the call computes what one on those values in Q's
 * dtype does. Up to 16 query rows a KV head (group x seq_q: decode) the
 * decode kernels read it ("decode-tensor-core" on NVIDIA compute capability
 * 8.0+ for f16 and bf16 with rows on 16 bytes, "decode" anywhere); past that
 * (chunked prefill) "tensor-core" (mma.sync, NVIDIA compute capability 8.0+,
 * the same conditions; not wgmma) and the FMA forward kernels
 * ("register-tiled", "portable") elsewhere. */
FLASHCL_API flashcl_status flashcl_forward_kv_cache(flashcl_context *ctx, const struct flashcl_attention *attn,
                                                    const struct flashcl_kv_lengths *lengths,
                                                    const struct flashcl_kv_pages *pages, cl_command_queue queue,
                                                    cl_uint num_wait_events, const cl_event *wait_list,
                                                    cl_event *event);

/* The kernel and tile flashcl_forward_kv_cache and flashcl_forward_varlen
 * would use for these calls, as flashcl_forward_config. */
FLASHCL_API flashcl_status flashcl_forward_kv_cache_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                                           const struct flashcl_kv_lengths *lengths,
                                                           const struct flashcl_kv_pages *pages,
                                                           struct flashcl_tile *out);
FLASHCL_API flashcl_status flashcl_forward_varlen_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                                         const struct flashcl_varlen *varlen,
                                                         struct flashcl_tile *out);

/* ------------------------------------------------------------------------ */
/* Backward                                                                   */
/* ------------------------------------------------------------------------ */

/* The gradients of one attention problem. d_o is read (like attn.o); d_q,
 * d_k, d_v are written (views like q, k, v: any strides, the inputs'
 * dtype). */
struct flashcl_attention_grad {
    flashcl_tensor d_o;
    flashcl_tensor d_q, d_k, d_v;
    /* With attn.sinks: f32 [heads_q], written with dL/d(sink_h) = -Σ over
     * sequences and rows of exp(sink_h - LSE)·D, D = rowsum(dO ∘ O) (summed
     * in a fixed order: deterministic). mem == NULL: not computed. Without
     * attn.sinks it must be absent. */
    flashcl_vector d_sinks;
    unsigned char reserved[48];  /* zero; room for fields of later versions */
};

/* Bytes of scratch flashcl_backward needs for this problem under this
 * context's plan: O(batch · heads_q · seq_q) (the row terms D = rowsum(dO ∘
 * O)), with the fused tensor-core kernel also dQ's f32 accumulator (4 ·
 * head_dim bytes a row, 256-byte aligned) and a counter per 16 or 32 query
 * rows (its chunk) plus one, with the atomic wgmma kernel the accumulator
 * alone; never N×N.
 * Validates like the call itself. */
FLASHCL_API flashcl_status flashcl_backward_workspace_size(flashcl_context *ctx,
                                                           const struct flashcl_attention *attn,
                                                           const struct flashcl_attention_grad *grad,
                                                           size_t *bytes);

/* The kernel and tile flashcl_backward would use for this call: on the FMA
 * units "backward-tiled" where the head dim is a multiple of 4, else
 * "backward"; on tensor cores (16-byte rows, head dims of 16s up to 128)
 * "backward-wgmma" on Hopper (compute capability 9.0) and elsewhere
 * "backward-tensor-core" (or the opt-in "backward-tensor-core-fused") for
 * f16/bf16, "backward-tf32" for f32 whose attn.precision allows TF32.
 * block_m query rows and block_n keys per block, forced with kernel_options
 * such as "backward-tiled:block_m=..,block_n=..". */
FLASHCL_API flashcl_status flashcl_backward_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                                   const struct flashcl_attention_grad *grad,
                                                   struct flashcl_tile *out);

/* Enqueues the exact gradients dQ, dK, dV of O = softmax(scale·QKᵀ)·V for
 * the forward problem attn (its q, k, v, o, scale, mask; attn.lse is
 * required: the forward's log-sum-exp, from which P is recomputed block by
 * block). Deterministic: the same call gives the same bits every time (no
 * float atomics; GQA's dK, dV summed over a group's query heads in a fixed
 * order), unless the kernel options name the opt-in "backward-wgmma-atomic",
 * whose dQ is added up with float atomics in any order. workspace: a buffer of at least flashcl_backward_workspace_size
 * bytes, or NULL to let the call allocate (and release) one. On any
 * validation failure nothing is enqueued and the outputs are untouched. */
FLASHCL_API flashcl_status flashcl_backward(flashcl_context *ctx, const struct flashcl_attention *attn,
                                            const struct flashcl_attention_grad *grad, cl_mem workspace,
                                            cl_command_queue queue, cl_uint num_wait_events,
                                            const cl_event *wait_list, cl_event *event);

/* ------------------------------------------------------------------------ */
/* Standard attention (the materialised baseline)                             */
/* ------------------------------------------------------------------------ */

/* The same function as flashcl_forward (scale, causal, GQA, dtypes, strides,
 * LSE), computed the standard way: S = scale·QKᵀ with CLBlast's strided
 * batched SGEMM, a row softmax in place, O = P·V with SGEMM. S and P live in
 * a workspace of about 4·batch·heads_q·seq_q·seq_kv bytes (plus f32 copies
 * of Q, K, V): O(N²) device memory, the baseline flashcl exists to beat.
 * f16/bf16 inputs are widened to f32 in the workspace first. */

/* Bytes of workspace flashcl_standard_forward needs for this problem.
 * Validates attn like the call itself. */
FLASHCL_API flashcl_status flashcl_standard_workspace_size(flashcl_context *ctx,
                                                           const struct flashcl_attention *attn,
                                                           size_t *bytes);

/* Enqueues standard attention. workspace: a buffer of the context of at
 * least flashcl_standard_workspace_size bytes, or NULL to let the call
 * allocate (and release) one. If the workspace would exceed the device's
 * largest allocation or its global memory, returns
 * FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY (the message gives the size needed)
 * and enqueues nothing. Needs an in-order queue (CLBlast's GEMMs are ordered
 * by the queue); the wait list gates the first command, *event completes
 * with the last. */
FLASHCL_API flashcl_status flashcl_standard_forward(flashcl_context *ctx,
                                                    const struct flashcl_attention *attn,
                                                    cl_mem workspace, cl_command_queue queue,
                                                    cl_uint num_wait_events,
                                                    const cl_event *wait_list, cl_event *event);

/* The same gradients as flashcl_backward, computed the standard way: S and
 * P = softmax(S) recomputed with CLBlast's SGEMM, dP = dO·Vᵀ, dV = Pᵀ·dO,
 * dS = P∘(dP − rowsum(P∘dP)), dQ = scale·dS·K, dK = scale·dSᵀ·Q, with S/P
 * and dP/dS materialised: a workspace of about 8·batch·heads_q·seq_q·seq_kv
 * bytes (plus f32 copies of Q, dO, K, V), which must stay under 2^31
 * floats (CLBlast's indexing; FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY past it).
 * attn.lse is not read. Validation as flashcl_backward's; needs an
 * in-order queue. */
FLASHCL_API flashcl_status flashcl_standard_backward_workspace_size(flashcl_context *ctx,
                                                                    const struct flashcl_attention *attn,
                                                                    const struct flashcl_attention_grad *grad,
                                                                    size_t *bytes);
FLASHCL_API flashcl_status flashcl_standard_backward(flashcl_context *ctx, const struct flashcl_attention *attn,
                                                     const struct flashcl_attention_grad *grad, cl_mem workspace,
                                                     cl_command_queue queue, cl_uint num_wait_events,
                                                     const cl_event *wait_list, cl_event *event);

/* Local memory one work-group may use here, which the tiles are sized from:
 * params.local_mem_bytes, else the tuning file's probed value, else the
 * architecture's known size (NVIDIA compute capability >= 8.0 with the
 * tensor-core probe passed: 99–227 KB, where the driver reports 48 KB),
 * else CL_DEVICE_LOCAL_MEM_SIZE. The portable kernel's automatic tile stays
 * within the reported size. */
FLASHCL_API size_t flashcl_context_local_mem_bytes(const flashcl_context *ctx);

/* Nonzero when the context's device has tensor cores flashcl can use (the
 * probe at context creation); *why (if not NULL) gets a sentence saying why
 * or why not. A tensor-core kernel that later fails to build or launch is
 * turned off alone, for this context (a WARN says which). */
FLASHCL_API int flashcl_context_has_tensor_cores(const flashcl_context *ctx, const char **why);

/* Nonzero when the kernels built through the sm_90a route (Hopper's wgmma:
 * "tensor-core-wgmma") may be planned here: compute capability
 * 9.0, and a probe at context creation built one through the route and
 * computed its products exactly. *why (if not NULL) gets a sentence starting
 * "on" or "off" that says why. */
FLASHCL_API int flashcl_context_has_wgmma(const flashcl_context *ctx, const char **why);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCL_H */
