/* The measuring harness shared by flashcl-bench and flashcl-probe: the
 * attention paths behind one interface (buffers set up once per case, then
 * prepare, run and release each path), the device timing of whole calls, and
 * the check of sampled rows against the double reference. */
#ifndef FLASHCL_BENCH_PATHS_H
#define FLASHCL_BENCH_PATHS_H

#include <stdbool.h>

#include "flashcl.h"

enum bench_path {
    BENCH_FLASH = 0,  /* flashcl_forward / flashcl_backward */
    BENCH_STANDARD,   /* flashcl_standard_forward / _backward: CLBlast GEMMs, N×N matrices in device memory */
    BENCH_PATH_COUNT
};
#define BENCH_PATH_NAMES "flash,standard"
#define BENCH_PATH_DEFAULT_NAMES "flash,standard"

struct bench_env {
    flashcl_context *ctx;
    cl_command_queue queue;  /* in order, with profiling */
    char device_name[256];
    /* Calls in one timed sample, back to back on the queue, reported per call (bench_time); 0 or 1:
     * one call on an idle queue, its host-side enqueue inside the time. */
    int calls;
};

/* What one timed run is. */
enum bench_pass {
    BENCH_PASS_FORWARD = 0,
    BENCH_PASS_BACKWARD,  /* the backward alone (O and LSE from one forward before the timing) */
    BENCH_PASS_BOTH,      /* forward, then backward */
    BENCH_PASS_COUNT
};
#define BENCH_PASS_NAMES "forward,backward,both"

/* One problem: [batch, n, heads, d] Q and O, [batch, n, heads_kv, d] K and V; N_q = N_kv = n. */
struct bench_case {
    int n, d, batch, heads, causal;
    flashcl_dtype dtype;
    enum flashcl_precision precision;  /* f32 only: exact, tf32 or tf32x3 */
    enum bench_pass pass;
    int heads_kv;  /* K/V heads (GQA); 0: as many as heads. The sampled checks assume MHA. */
    bool sinks;    /* attn.sinks of -30000 a head: computed, weight 0 (the plain results) */
    bool alibi;    /* attn.alibi_slopes of 0 a head: the bias computed, 0 (the plain results) */
    float softcap; /* attn.softcap (0: none) */
    int dv;        /* attn.head_dim_v: V's, O's, dO's and dV's head dim (0: d) */
    int window;    /* > 0: a causal sliding window of this many keys before the diagonal (mask WINDOW, right 0) */
};

/* The first key row `row` sees (causal, or a window's left edge). */
static inline size_t bench_first_key(const struct bench_case *c, size_t row)
{
    return c->window > 0 && row > (size_t)c->window ? row - (size_t)c->window : 0;
}

/* V's and O's head dim. */
static inline int bench_dv(const struct bench_case *c)
{
    return c->dv > 0 ? c->dv : c->d;
}

/* O's storage: the inputs' but f16 for E4M3 inputs. */
static inline flashcl_dtype bench_o_dtype(const struct bench_case *c)
{
    return c->dtype == FLASHCL_E4M3 ? FLASHCL_F16 : c->dtype;
}

struct bench_buffers {
    cl_mem q, k, v, o, lse, sinks, slopes;
    cl_mem d_o, d_q, d_k, d_v;   /* backward passes only */
    size_t io_bytes;             /* Q, K, V, O and LSE together, and the four gradients */
    cl_mem workspace;            /* the path's forward workspace (standard), while it is prepared */
    cl_mem bwd_workspace;        /* the path's backward workspace, while it is prepared */
    struct flashcl_attention attn;
    struct flashcl_attention_grad grad;
    /* Set: the flash forward reads K and V as this KV cache (flashcl_forward_kv_cache); not owned. */
    const struct flashcl_kv_lengths *kv_lengths;
    const struct flashcl_kv_pages *kv_pages;
    /* Set: the flash forward is a packed varlen batch (flashcl_forward_varlen); not owned. */
    const struct flashcl_varlen *varlen;
};

/* verbose: the library's DEBUG log (builds, compiler reports) to stderr. */
flashcl_status bench_env_create(struct bench_env *env, bool verbose);
void bench_env_release(struct bench_env *env);

int bench_parse_paths(const char *list);  /* bit set, or -1 */
const char *bench_path_name(enum bench_path path);
int bench_parse_passes(const char *list);  /* bit set, or -1 */
const char *bench_pass_name(enum bench_pass pass);
/* Largest sampled error against the double reference that counts as right. */
double bench_tolerance(const struct bench_case *c);

flashcl_status bench_buffers_create(struct bench_env *env, const struct bench_case *c, const void *q,
                                    const void *k, const void *v, struct bench_buffers *b);
/* dO (host data as dtype) and dQ, dK, dV for the backward passes. */
flashcl_status bench_buffers_add_grads(struct bench_env *env, const struct bench_case *c, const void *d_o,
                                       struct bench_buffers *b);
void bench_buffers_release(struct bench_buffers *b);

/* Allocates what the path needs beyond the buffers; *device_bytes is all
 * the device memory the path uses (set even when it does not fit). */
flashcl_status bench_prepare_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b,
                                  const struct bench_case *c, size_t *device_bytes);
flashcl_status bench_run_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b,
                              const struct bench_case *c, cl_event *event);
void bench_release_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b);
/* What runs for this path on these buffers: portable, tensor-core, clblast
 * (flashcl_forward_varlen_config's plan where the buffers carry a varlen batch). */
const char *bench_kernel_name(struct bench_env *env, enum bench_path path, struct bench_buffers *b);
/* The output the pass checks: O for the forward, dQ for the backward passes. */
flashcl_status bench_read_output(struct bench_env *env, const struct bench_case *c, struct bench_buffers *b,
                                 void *out, size_t bytes);

/* Random values in [-1, 1) stored as dtype. */
void bench_fill_random(void *buf, flashcl_dtype dtype, size_t count);
/* Random values (bench_fill_random) for the first 4 M elements, repeated up to count: a long KV cache or
 * a realistic varlen mix is 10^9 elements, ~12 ns each on one host thread (a decode shape took ~5 s to
 * fill), and the timing does not depend on the values; the sampled checks read the same host data. */
void bench_fill_repeated(void *buf, flashcl_dtype dtype, size_t count);
/* Largest |O - reference| over sampled query rows of a [B, N, H, d] case
 * (causal aligned bottom-right, N_q = N_kv), computed in double. */
double bench_sampled_error(const struct bench_case *c, const void *q, const void *k, const void *v, const void *o);
/* Largest |dQ - reference| over sampled query rows (dQ rows need only their
 * own row of P, so a sample stays cheap at any N), relative to max|dQ ref|. */
double bench_sampled_dq_error(const struct bench_case *c, const void *q, const void *k, const void *v,
                              const void *d_o, const void *dq);

/* Median (and minimum) device time in ms of `reps` runs after `warmup`
 * untimed ones; each run is timed from a marker enqueued before it to the
 * end of its last command (OpenCL profiling; host clock where markers have
 * no profiling information). */
/* last_command_ms (may be NULL): the median of the last command's own time (START to END), the
 * split-KV merge of a split call, NaN without profiling information. */
flashcl_status bench_time(struct bench_env *env, enum bench_path path, struct bench_buffers *bufs,
                          const struct bench_case *c, int warmup, int reps, double *median_ms, double *min_ms,
                          double *last_command_ms);

#endif
