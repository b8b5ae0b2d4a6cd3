/* The kernel table and the plan of one call.
 *
 * Every kernel flashcl can run is one `struct kernel_info` in src/kernels.c:
 * what it computes, what it supports, its tunable axes, its built-in shapes,
 * its local-memory footprint and its build options, side by side. The planner
 * (src/planner.c) walks the table in order of preference and returns one
 * `struct plan` per call; the forward, the config query, the tuning file, the
 * candidates the probe times and the override parser all read the same table.
 */
#ifndef FLASHCL_KERNEL_TABLE_H
#define FLASHCL_KERNEL_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "flashcl.h"
#include "flashcl_tools.h"

/* What a kernel computes. */
enum kernel_op {
    OP_FORWARD = 1,
    OP_BACKWARD = 2,  /* dQ, dK, dV from Q, K, V, O, LSE, dO */
};

/* Tunable axes, shared by every kernel that has them. */
enum axis {
    AXIS_BLOCK_M,  /* query rows per work-group */
    AXIS_BLOCK_N,  /* keys per streamed K/V block */
    AXIS_WARPS,    /* warps per work-group (tensor-core kernels) */
    AXIS_M_TILES,  /* 16-row mma tiles per warp */
    AXIS_COUNT
};

struct kernel_shape {
    int axis[AXIS_COUNT];  /* 0 for an axis the kernel does not have */
};

/* The device as read once at context creation. */
struct device_desc {
    char name[256];
    char driver[128];
    cl_device_type type;
    size_t reported_local;    /* CL_DEVICE_LOCAL_MEM_SIZE */
    size_t usable_local;      /* what a work-group may really declare (flashcl_context_local_mem_bytes) */
    size_t max_workgroup;
    bool tensor_cores;        /* NVIDIA sm_80+ with the inline-PTX probe built */
    bool tensor_cores_emulated;  /* a test hook's: the tensor-core kernels built with -DNV_EMULATE=1 */
    bool wgmma;               /* sm_90a's wgmma through the sm_90a route: its probe built and computed right */
    int compute_units;        /* CL_DEVICE_MAX_COMPUTE_UNITS */
    int nv_major, nv_minor;   /* NVIDIA compute capability; 0 elsewhere */
};

/* What the planner sees of one call. */
struct problem {
    enum kernel_op op;
    flashcl_dtype dtype;
    flashcl_dtype o_dtype;             /* O's: dtype's but with E4M3 inputs (f16, bf16 or f32) */
    flashcl_dtype kv_dtype;            /* K's and V's: dtype's but on an E4M3 KV cache (E4M3, dtype Q's) */
    enum flashcl_precision precision;  /* f32 only */
    int head_dim;
    enum flashcl_mask mask;
    int window_left, window_right;     /* the mask as a window (-1: unlimited), whatever its kind */
    float softcap;                     /* attn.softcap: 0 none */
    bool sinks;                        /* forward: attn.sinks given */
    bool alibi;                        /* attn.alibi_slopes given */
    int head_dim_v;                    /* V's and O's last dimension (0 or head_dim: the same as Q's and K's) */
    bool rows_16b;  /* every view's offset and strides are multiples of 16 bytes */
    int varlen;     /* cl/varlen.h: 0 dense, 1 packed sequences with offsets, 2 a KV cache's lengths, 3 paged */
    int batch, heads_q, heads_kv, seq_q, seq_kv;  /* the grid's (the longest sequence's for varlen): split-KV's
                                                     rule and the decode kernel's rows */
};

/* One valid range of an axis, and the values flashcl-probe --tune tries. */
struct axis_spec {
    int lo, hi, step;      /* lo == 0: the kernel has no such axis */
    int candidates[8];     /* 0-terminated */
};

/* Architecture classes a built-in shape applies to. */
enum arch_class {
    ARCH_ANY = 0,
    ARCH_NVIDIA_SM90 = 1,  /* compute capability 9.x */
};

/* A built-in shape and where it applies; a kernel lists them preferred first. */
struct builtin_shape {
    enum arch_class arch;
    int head_dim_lo, head_dim_hi;  /* inclusive */
    int mask;                      /* -1 any, else a flashcl_mask */
    struct kernel_shape shape;
    unsigned batches;              /* bits 1 << problem.varlen: the batch kinds it applies to; ANY_BATCH all */
};
#define ANY_BATCH 0u
#define DENSE_OR_PACKED (1u << 0 | 1u << 1)  /* not on a KV cache (varlen 2 or 3) */

#define NEEDS_TENSOR_CORES 1u
#define NEEDS_ROWS_16B 2u  /* cp.async copies 16-byte chunks */
#define NV_EMULATES 4u     /* with NEEDS_TENSOR_CORES: builds with -DNV_EMULATE=1 (cl/nv_emulate.h) too */
#define NEEDS_SM90A 8u     /* Hopper's wgmma, built through the sm_90a route (cl/nv_wgmma.h, src/program.c) */
/* cl/nv_emulate.h's scratch: NV_SCRATCH_WORDS 32-bit words a warp. */
#define NV_EMULATE_SCRATCH_BYTES(warps) ((size_t)(warps) * 192 * 4)

#define DTYPE_BIT(t) (1u << (t))
#define MASK_BIT(m) (1u << (m))
#define ALL_MASKS (MASK_BIT(FLASHCL_MASK_NONE) | MASK_BIT(FLASHCL_MASK_CAUSAL) | MASK_BIT(FLASHCL_MASK_WINDOW))
#define PRECISION_BIT(p) (1u << (p))

struct kernel_info {
    const char *name;                /* its one identity: logs, tuning file, overrides, flashcl_tile */
    const char *file;                /* its OpenCL C file, for listings */
    const char *summary;             /* one sentence for listings (flashcl_kernel_describe) */
    enum kernel_op op;
    const char *source;              /* embedded OpenCL C */
    const char *entry;               /* kernel function (the first step's, for several) */
    /* Operations of several kernels: the kernel functions of the same
     * program in the order they are enqueued (each after the previous). */
    const char *steps[4];
    unsigned dtypes;                 /* DTYPE_BIT(...) */
    unsigned masks;                  /* MASK_BIT(...) of the masks it computes */
    unsigned f32_precisions;         /* PRECISION_BIT(...) an f32 call may ask for and get here */
    int head_dim_step, head_dim_max;
    unsigned needs;                  /* NEEDS_... */
    bool varlen;                     /* takes batches of different lengths (cl/varlen.h) ... */
    bool packed_only;                /* ... packed ones only, not KV caches (E4M3's Vᵀ is built per call) */
    bool kv_e4m3;                    /* reads an E4M3 KV cache (-DKV_E4M3=1) with Q and O of its dtypes */
    bool softcap;                    /* computes logit softcapping (cl/score_mod.h, -DSOFTCAP2) */
    /* Forward: computes attention sinks (cl/score_mod.h's row_finish, -DSINKS=1; split_combine.h). The
     * backward's kernels all take them: they read P through the LSE, which holds the sink. */
    bool sinks;
    bool alibi;                      /* computes ALiBi biases (cl/score_mod.h, -DALIBI=1) */
    bool head_dim_v;                 /* takes head_dim_v != head_dim (-DHEAD_DIM_V) */
    /* Takes split-KV (cl/split.h): the entry point that merges the partials; NULL if not. */
    const char *combine;
    /* One work-group per (split, KV head, sequence) holding every query row of
     * the KV head's group (group x seq_q of at most FCL_DECODE_MAX_ROWS); the
     * grid is (splits, heads_kv, batch). false: (query blocks x splits, heads_q, batch). */
    bool packs_group;
    /* Backward: the dK/dV step also adds up dQ in the workspace (src/backward.c's layout), and the
     * last step converts it; false: the last step computes dQ itself. */
    bool dq_accumulated;
    /* With dq_accumulated: the adds land in any order (float atomics, no turns), so dQ's bits may change from run
     * to run; false: they take turns (the workspace's turn counters) and every run gives the same bits. */
    bool dq_unordered;
    /* Backward: the keys a dK/dV work-group owns (step 1) and the query rows a dQ work-group owns (step 2), which
     * the shape's blocks stream past; NULL: block_n keys and block_m query rows. */
    int (*owned_rows)(const struct kernel_shape *s, const struct problem *p, int step);
    /* Planned only where the kernel options name it ("name:on", or a shape): not the default, and not
     * a retry's fallback either. */
    bool opt_in;
    /* Off where the kernel options name one of these kernels (a comma-separated list of names: a shape,
     * splits or "on"), or turn one off that is not opt-in, and do not name this one: a forced mma.sync
     * shape runs on mma.sync though this entry comes first. NULL: none. */
    const char *gives_way_to;
    struct axis_spec axes[AXIS_COUNT];
    /* Built-in shapes, preferred first; the first that applies and fits wins. */
    const struct builtin_shape *builtin;
    int n_builtin;
    /* The sizing rule, where there is one: a shape from the local memory,
     * which `shrink` then reduces until it fits. rule_reported: the rule
     * stays within the reported local memory (forced and tuned shapes may
     * use what really works). */
    void (*rule)(const struct device_desc *dev, const struct problem *p, struct kernel_shape *out);
    bool rule_reported;
    /* Makes the shape smaller along an axis not in `fixed` (a bit per axis);
     * false when it cannot. NULL: shapes are not shrunk. */
    bool (*shrink)(const struct device_desc *dev, struct kernel_shape *s, unsigned fixed);
    /* Beyond the axes' ranges: whether the device can launch the shape for the problem. */
    bool (*launchable)(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p);
    /* Bytes of the __local arrays the kernel declares for this shape and problem
     * (its head_dim; the decode kernel also its rows, at most where unknown). */
    size_t (*local_bytes)(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p);
    /* Query rows per work-group and work-items per work-group. */
    void (*geometry)(const struct device_desc *dev, const struct kernel_shape *s, int *block_m, int *workgroup);
    /* Operations of several kernels whose work-groups differ: step i's work-items per work-group. NULL:
     * every step's is geometry's. */
    int (*step_workgroup)(const struct device_desc *dev, const struct kernel_shape *s, int step);
    /* Work-groups of the shape a compute unit holds at once by registers, where its build caps a thread's
     * registers for that many (on the device itself: an emulated build leaves the cap out); 0 (or NULL) where the
     * build leaves them to the compiler: as local memory allows. */
    int (*resident)(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p);
    /* Split-KV: the floats of local memory the kernel's last work-group of a (KV head, sequence) can merge the
     * splits' partials in, itself (cl/split_combine.h's split_merge_last: rows x (splits + 2)); NULL: the
     * combine step always merges them. */
    size_t (*merge_floats)(const struct device_desc *dev, const struct kernel_shape *s, const struct problem *p);
    /* The -D options that select the shape and the problem. */
    void (*options)(const struct device_desc *dev, const struct problem *p, const struct kernel_shape *s,
                    float scale_log2, char *buf, size_t size);
};

/* Bytes a compiler may add to a kernel's __local arrays of its own (NVIDIA's
 * declared 4 more than the arrays for the portable kernel on an H200): a
 * shape is planned only where its footprint plus this fits. */
#define FCL_LOCAL_SLACK 64

#define FCL_MAX_SPLITS 64  /* split-KV work-groups per query block at most */
/* Ints at the start of the split-KV workspace: the merge in place's arrival counts, one per (sequence, KV
 * head) (cl/split.h's SPLIT_COUNTERS, the same number). Zero whenever no call runs. */
#define FCL_SPLIT_COUNTERS 4096
#define FCL_DECODE_MAX_ROWS 16  /* query rows (group x seq_q) a decode work-group holds at most */

/* cl/flash_backward_mma.cl's Q_CHUNK: the query rows of its inner step (and of a fused dQ turn). */
static inline int fcl_backward_mma_chunk(int block_m)
{
    return block_m % 32 == 0 ? 32 : 16;
}

/* V's and O's head dim (head_dim where the problem leaves it 0), and the wider of it and Q's and K's: what a
 * kernel holding tiles or accumulators of both grows with, so what its built-in shapes' head dims are read
 * against (src/planner.c). */
static inline int fcl_value_dim(const struct problem *p)
{
    return p->head_dim_v ? p->head_dim_v : p->head_dim;
}

static inline int fcl_wide_dim(const struct problem *p)
{
    return fcl_value_dim(p) > p->head_dim ? fcl_value_dim(p) : p->head_dim;
}

/* Work-groups of local_bytes a compute unit holds at once by local memory (1..8; the usable amount is
 * about a unit's, less 1 KB each for the runtime's own). */
static inline long long fcl_groups_per_unit(const struct device_desc *dev, size_t local_bytes)
{
    const long long n = (long long)(dev->usable_local / (local_bytes + 1024));
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

extern const struct kernel_info fcl_kernels[];
extern const int fcl_kernel_count;

/* The table entry of a name (len bytes, or NUL-terminated); NULL if none.
 * Its index through fcl_kernel_index. */
const struct kernel_info *fcl_kernel_by_name(const char *name, size_t len);
const struct kernel_info *fcl_kernel_named(const char *name);
int fcl_kernel_index(const struct kernel_info *k);

/* A shape as a tuning file's configuration (the kernel's name, its axes, block_m from its geometry) and
 * back (the axes the kernel has). */
void fcl_shape_to_config(const struct device_desc *dev, const struct kernel_info *k, const struct kernel_shape *s,
                         struct flashcl_tuned_config *c);
void fcl_config_to_shape(const struct kernel_info *k, const struct flashcl_tuned_config *c, struct kernel_shape *s);

/* Axis names as the tuning file and the overrides write them. */
const char *fcl_axis_name(enum axis a);
int fcl_axis_by_name(const char *name, size_t len);  /* -1 if none */
bool fcl_axis_in_range(const struct kernel_info *k, enum axis a, int value);

/* The query rows a packs_group work-group holds: group x seq_q rounded up
 * to a power of two (cl/flash_decode.cl's ROWS); FCL_DECODE_MAX_ROWS where
 * the problem is not known. Tuning-file entries are keyed by it. */
int fcl_group_rows(const struct problem *p);

/* A kernel's own constraints on a problem (dtype, precision, head_dim, views),
 * not the device's; NULL if it runs it, else the reason. */
const char *fcl_kernel_supports(const struct kernel_info *k, const struct problem *p);

/* The plan of one kernel launch. */
struct plan {
    const struct kernel_info *kernel;
    struct kernel_shape shape;
    enum flashcl_tile_source source;
    int block_m, block_n, workgroup;
    size_t local_bytes;
    int splits;          /* split-KV: work-groups sharing a query block's keys (1: none) */
    bool merge_in_place; /* split-KV: the kernel's last work-group merges (no combine step; merge_floats) */
    char options[1024];  /* build options, including the caller's extra ones */
};

#endif /* FLASHCL_KERNEL_TABLE_H */
