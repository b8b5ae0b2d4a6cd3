#include "bench_paths.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostref.h"

#define SAMPLED_ROWS 8  /* query rows checked against the CPU reference per case */

static const char *const path_names[BENCH_PATH_COUNT] = {"flash", "standard"};
static const char *const pass_names[BENCH_PASS_COUNT] = {"forward", "backward", "both"};

const char *bench_path_name(enum bench_path path)
{
    return path_names[path];
}

const char *bench_pass_name(enum bench_pass pass)
{
    return pass_names[pass];
}

/* A comma-separated list of names into a bit set; -1 for an unknown name or none. */
static int parse_names(const char *list, const char *const *names, int count)
{
    int set = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int p = 0; p < count; p++)
            if (strcmp(tok, names[p]) == 0)
                found = p;
        if (found < 0) {
            free(copy);
            return -1;
        }
        set |= 1 << found;
    }
    free(copy);
    return set ? set : -1;
}

int bench_parse_paths(const char *list)
{
    return parse_names(list, path_names, BENCH_PATH_COUNT);
}

int bench_parse_passes(const char *list)
{
    return parse_names(list, pass_names, BENCH_PASS_COUNT);
}

double bench_tolerance(const struct bench_case *c)
{
    const flashcl_dtype dtype = c->dtype;
    const enum flashcl_precision precision = c->precision;
    /* Backward: dQ relative to its largest element; f16/bf16 P and dS (and O
     * in D) carry their storage type's rounding (docs/backward.md). */
    if (c->pass != BENCH_PASS_FORWARD)
        return dtype == FLASHCL_F32 ? (precision == FLASHCL_PRECISION_TF32 ? 1e-2 : 1e-4)
                                    : dtype == FLASHCL_F16 ? 1e-2 : 6e-2;
    /* Outputs lie in [-1, 1]: f32 arithmetic, or one rounding to the storage
     * type; TF32 rounds every operand to 10 mantissa bits. */
    if (dtype == FLASHCL_F32 && precision == FLASHCL_PRECISION_TF32)
        return 5e-3;
    /* E4M3: P rounded to 3 mantissa bits before PV moves O by up to 2^-4 of Σ P|V| (tests/test_fp8.c). */
    if (dtype == FLASHCL_E4M3)
        return 0x1p-4;
    return dtype == FLASHCL_F32 ? 1e-4 : dtype == FLASHCL_F16 ? 2e-3 : 1.6e-2;
}

static void log_to_stderr(void *user, enum flashcl_log_level level, const char *message)
{
    (void)user;
    fprintf(stderr, "flashcl[%d]: %s\n", (int)level, message);
}

flashcl_status bench_env_create(struct bench_env *env, bool verbose)
{
    memset(env, 0, sizeof(*env));
    struct flashcl_context_params params = {0};
    if (verbose) {
        params.log = log_to_stderr;
        params.log_level = FLASHCL_LOG_DEBUG;
    }
    flashcl_status st = flashcl_context_create(&params, &env->ctx);
    if (st != FLASHCL_SUCCESS)
        return st;
    snprintf(env->device_name, sizeof(env->device_name), "%s", flashcl_context_device_name(env->ctx));
    cl_int err;
    env->queue = clCreateCommandQueue(flashcl_context_cl_context(env->ctx), flashcl_context_device(env->ctx),
                                      CL_QUEUE_PROFILING_ENABLE, &err);
    if (!env->queue) {
        flashcl_context_destroy(&env->ctx);
        return (flashcl_status)err;
    }
    return FLASHCL_SUCCESS;
}

void bench_env_release(struct bench_env *env)
{
    if (env->queue)
        clReleaseCommandQueue(env->queue);
    flashcl_context_destroy(&env->ctx);
}

static cl_mem buffer(struct bench_env *env, size_t bytes, const void *host, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    cl_mem_flags flags = CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0);
    return clCreateBuffer(flashcl_context_cl_context(env->ctx), flags, bytes, (void *)host, err);
}

flashcl_status bench_buffers_create(struct bench_env *env, const struct bench_case *c, const void *q,
                                    const void *k, const void *v, struct bench_buffers *b)
{
    memset(b, 0, sizeof(*b));
    const size_t n = (size_t)c->n, h = (size_t)c->heads, d = (size_t)c->d, dv = (size_t)bench_dv(c);
    const size_t hk = c->heads_kv > 0 ? (size_t)c->heads_kv : h;
    const size_t row = (size_t)c->batch * n * flashcl_dtype_size(c->dtype);  /* bytes a column of a head */
    const size_t o_row = (size_t)c->batch * n * flashcl_dtype_size(bench_o_dtype(c));
    const size_t q_bytes = row * h * d, o_bytes = o_row * h * dv, k_bytes = row * hk * d, v_bytes = row * hk * dv;
    const size_t lse_bytes = (size_t)c->batch * h * n * sizeof(float);
    cl_int err = CL_SUCCESS;
    b->q = buffer(env, q_bytes, q, &err);
    b->k = buffer(env, k_bytes, k, &err);
    b->v = buffer(env, v_bytes, v, &err);
    b->o = buffer(env, o_bytes, NULL, &err);
    b->lse = buffer(env, lse_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        bench_buffers_release(b);
        return (flashcl_status)err;
    }
    b->io_bytes = q_bytes + o_bytes + k_bytes + v_bytes + lse_bytes;
    struct flashcl_attention *a = &b->attn;
    a->batch = c->batch;
    a->seq_q = a->seq_kv = c->n;
    a->heads_q = c->heads;
    a->heads_kv = (int)hk;
    a->head_dim = c->d;
    a->head_dim_v = dv != d ? (int)dv : 0;
    a->q = flashcl_tensor_bnhd(b->q, c->dtype, n, h, d);
    a->k = flashcl_tensor_bnhd(b->k, c->dtype, n, hk, d);
    a->v = flashcl_tensor_bnhd(b->v, c->dtype, n, hk, dv);
    a->o = flashcl_tensor_bnhd(b->o, bench_o_dtype(c), n, h, dv);
    a->lse = flashcl_tensor_lse(b->lse, n, h);
    a->mask = c->window > 0 ? FLASHCL_MASK_WINDOW : c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    a->window_left = c->window > 0 ? c->window : 0;
    a->precision = c->precision;
    a->softcap = c->softcap;
    if (c->sinks) {
        float *sinks = malloc(h * sizeof(float));
        if (!sinks) {
            bench_buffers_release(b);
            return FLASHCL_OUT_OF_HOST_MEMORY;
        }
        for (size_t i = 0; i < h; i++)
            sinks[i] = -30000.0f;
        b->sinks = buffer(env, h * sizeof(float), sinks, &err);
        free(sinks);
        if (err != CL_SUCCESS) {
            bench_buffers_release(b);
            return (flashcl_status)err;
        }
        a->sinks = (flashcl_vector){b->sinks, 0};
    }
    if (c->alibi) {  /* slopes of 0: the kernels' bias arithmetic runs (it does not look at the values) */
        float *slopes = calloc(h, sizeof(float));
        if (!slopes) {
            bench_buffers_release(b);
            return FLASHCL_OUT_OF_HOST_MEMORY;
        }
        b->slopes = buffer(env, h * sizeof(float), slopes, &err);
        free(slopes);
        if (err != CL_SUCCESS) {
            bench_buffers_release(b);
            return (flashcl_status)err;
        }
        a->alibi_slopes = (flashcl_vector){b->slopes, 0};
    }
    return FLASHCL_SUCCESS;
}

flashcl_status bench_buffers_add_grads(struct bench_env *env, const struct bench_case *c, const void *d_o,
                                       struct bench_buffers *b)
{
    const size_t n = (size_t)c->n, h = (size_t)c->heads, d = (size_t)c->d, dv = (size_t)bench_dv(c);
    const size_t hk = c->heads_kv > 0 ? (size_t)c->heads_kv : h;
    const size_t row = (size_t)c->batch * n * flashcl_dtype_size(c->dtype);  /* bytes a column of a head */
    const size_t q_bytes = row * h * d, o_bytes = row * h * dv, k_bytes = row * hk * d, v_bytes = row * hk * dv;
    cl_int err = CL_SUCCESS;
    b->d_o = buffer(env, o_bytes, d_o, &err);
    b->d_q = buffer(env, q_bytes, NULL, &err);
    b->d_k = buffer(env, k_bytes, NULL, &err);
    b->d_v = buffer(env, v_bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return (flashcl_status)err;
    b->io_bytes += o_bytes + q_bytes + k_bytes + v_bytes;
    b->grad.d_o = flashcl_tensor_bnhd(b->d_o, c->dtype, n, h, dv);
    b->grad.d_q = flashcl_tensor_bnhd(b->d_q, c->dtype, n, h, d);
    b->grad.d_k = flashcl_tensor_bnhd(b->d_k, c->dtype, n, hk, d);
    b->grad.d_v = flashcl_tensor_bnhd(b->d_v, c->dtype, n, hk, dv);
    return FLASHCL_SUCCESS;
}

void bench_buffers_release(struct bench_buffers *b)
{
    cl_mem *all[] = {&b->q,   &b->k,   &b->v,   &b->o,   &b->lse, &b->sinks,
                     &b->slopes, &b->d_o, &b->d_q, &b->d_k, &b->d_v};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (*all[i]) {
            clReleaseMemObject(*all[i]);
            *all[i] = NULL;
        }
}

/* Allocates a workspace of `bytes` into *ws, once, outside the timed runs;
 * false when the device cannot hold it (the call itself then answers). */
static bool allocate_workspace(struct bench_env *env, size_t bytes, size_t total, cl_mem *ws)
{
    cl_ulong max_alloc = 0, global = 0;
    cl_device_id dev = flashcl_context_device(env->ctx);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(max_alloc), &max_alloc, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(global), &global, NULL);
    if (bytes == 0 || bytes > max_alloc || total > global)
        return false;
    cl_int err;
    *ws = clCreateBuffer(flashcl_context_cl_context(env->ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    return *ws != NULL;
}

flashcl_status bench_prepare_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b,
                                  const struct bench_case *c, size_t *device_bytes)
{
    *device_bytes = b->io_bytes;
    const bool forward = c->pass != BENCH_PASS_BACKWARD, backward = c->pass != BENCH_PASS_FORWARD;
    size_t fwd_bytes = 0, bwd_bytes = 0;
    flashcl_status st = FLASHCL_SUCCESS;
    if (path == BENCH_STANDARD && forward)
        st = flashcl_standard_workspace_size(env->ctx, &b->attn, &fwd_bytes);
    if (st == FLASHCL_SUCCESS && backward)
        st = path == BENCH_STANDARD ? flashcl_standard_backward_workspace_size(env->ctx, &b->attn, &b->grad, &bwd_bytes)
                                    : flashcl_backward_workspace_size(env->ctx, &b->attn, &b->grad, &bwd_bytes);
    if (st != FLASHCL_SUCCESS)
        return st;
    *device_bytes += fwd_bytes + bwd_bytes;
    /* A size the device cannot hold gets the library's own out-of-memory answer. */
    if (fwd_bytes && !allocate_workspace(env, fwd_bytes, *device_bytes, &b->workspace))
        return flashcl_standard_forward(env->ctx, &b->attn, NULL, env->queue, 0, NULL, NULL);
    if (bwd_bytes && !allocate_workspace(env, bwd_bytes, *device_bytes, &b->bwd_workspace))
        return path == BENCH_STANDARD
                   ? flashcl_standard_backward(env->ctx, &b->attn, &b->grad, NULL, env->queue, 0, NULL, NULL)
                   : FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
    if (c->pass == BENCH_PASS_BACKWARD) {
        /* The backward reads O and the LSE: one forward, untimed. */
        st = flashcl_forward(env->ctx, &b->attn, env->queue, 0, NULL, NULL);
        if (st == FLASHCL_SUCCESS)
            st = (flashcl_status)clFinish(env->queue);
    }
    return st;
}

/* The backward of a path: dQ, dK, dV from O, LSE and dO. */
static flashcl_status run_backward(struct bench_env *env, enum bench_path path, struct bench_buffers *b,
                                   cl_event *event)
{
    if (path == BENCH_STANDARD)
        return flashcl_standard_backward(env->ctx, &b->attn, &b->grad, b->bwd_workspace, env->queue, 0, NULL, event);
    return flashcl_backward(env->ctx, &b->attn, &b->grad, b->bwd_workspace, env->queue, 0, NULL, event);
}

flashcl_status bench_run_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b,
                              const struct bench_case *c, cl_event *event)
{
    if (c->pass == BENCH_PASS_BACKWARD)
        return run_backward(env, path, b, event);
    const bool both = c->pass == BENCH_PASS_BOTH;
    cl_event *forward_event = both ? NULL : event;
    flashcl_status st;
    if (path == BENCH_STANDARD)
        st = flashcl_standard_forward(env->ctx, &b->attn, b->workspace, env->queue, 0, NULL, forward_event);
    else if (b->kv_lengths)
        st = flashcl_forward_kv_cache(env->ctx, &b->attn, b->kv_lengths, b->kv_pages, env->queue, 0, NULL,
                                      forward_event);
    else if (b->varlen)
        st = flashcl_forward_varlen(env->ctx, &b->attn, b->varlen, env->queue, 0, NULL, forward_event);
    else
        st = flashcl_forward(env->ctx, &b->attn, env->queue, 0, NULL, forward_event);
    /* In order: the backward starts when the forward is done. */
    if (st == FLASHCL_SUCCESS && both)
        st = run_backward(env, path, b, event);
    return st;
}

void bench_release_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b)
{
    (void)env;
    (void)path;
    if (b->workspace) {
        clReleaseMemObject(b->workspace);
        b->workspace = NULL;
    }
    if (b->bwd_workspace) {
        clReleaseMemObject(b->bwd_workspace);
        b->bwd_workspace = NULL;
    }
}

flashcl_status bench_read_output(struct bench_env *env, const struct bench_case *c, struct bench_buffers *b,
                                 void *out, size_t bytes)
{
    cl_mem from = c->pass == BENCH_PASS_FORWARD ? b->o : b->d_q;
    return (flashcl_status)clEnqueueReadBuffer(env->queue, from, CL_TRUE, 0, bytes, out, 0, NULL, NULL);
}

const char *bench_kernel_name(struct bench_env *env, enum bench_path path, struct bench_buffers *b)
{
    if (path == BENCH_STANDARD)
        return "clblast";
    struct flashcl_tile t;
    const flashcl_status st = b->grad.d_q.mem ? flashcl_backward_config(env->ctx, &b->attn, &b->grad, &t)
                              : b->varlen     ? flashcl_forward_varlen_config(env->ctx, &b->attn, b->varlen, &t)
                                              : flashcl_forward_config(env->ctx, &b->attn, &t);
    return st == FLASHCL_SUCCESS ? t.kernel : "?";
}

/* Ascending, NaNs (a run without profiling information) last. */
static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y))
        return isnan(x) - isnan(y);
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double host_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Device time of one sample: from the end of a marker enqueued just before
 * it (on the in-order queue, when the previous work is done) to the end of
 * the last command of env->calls runs enqueued back to back, divided by
 * their number. With one call the host's enqueueing sits inside the time,
 * as for a caller that waits on each call; with several it overlaps the
 * device's work on the calls before it, as in a serving loop that runs
 * ahead. The standard path is several commands, so its launch gaps count.
 * Falls back to the host clock around a finished queue where markers carry
 * no profiling information. */
static flashcl_status time_one(struct bench_env *env, enum bench_path path, struct bench_buffers *bufs,
                               const struct bench_case *c, double *ms, double *last_ms)
{
    const int calls = env->calls > 1 ? env->calls : 1;
    cl_event marker = NULL, last = NULL;
    const double host_start = host_ms();
    cl_int err = clEnqueueMarkerWithWaitList(env->queue, 0, NULL, &marker);
    flashcl_status st = err == CL_SUCCESS ? FLASHCL_SUCCESS : (flashcl_status)err;
    for (int i = 0; st == FLASHCL_SUCCESS && i < calls; i++) {
        if (last)
            clReleaseEvent(last);
        last = NULL;
        st = bench_run_path(env, path, bufs, c, &last);
    }
    if (st == FLASHCL_SUCCESS && clWaitForEvents(1, &last) != CL_SUCCESS)
        st = FLASHCL_OUT_OF_RESOURCES;
    if (st == FLASHCL_SUCCESS) {
        cl_ulong start = 0, end = 0, last_start = 0;
        const bool have_end =
            clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL) == CL_SUCCESS;
        if (have_end &&
            clGetEventProfilingInfo(marker, CL_PROFILING_COMMAND_END, sizeof(start), &start, NULL) == CL_SUCCESS &&
            end > start)
            *ms = (double)(end - start) * 1e-6 / calls;
        else
            *ms = (host_ms() - host_start) / calls;
        *last_ms = have_end &&
                           clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_START, sizeof(last_start), &last_start,
                                                   NULL) == CL_SUCCESS &&
                           end > last_start
                       ? (double)(end - last_start) * 1e-6
                       : NAN;
    }
    if (marker)
        clReleaseEvent(marker);
    if (last)
        clReleaseEvent(last);
    return st;
}

/* Median (and minimum) of `reps` timed runs after `warmup` untimed ones. */
flashcl_status bench_time(struct bench_env *env, enum bench_path path, struct bench_buffers *bufs,
                                const struct bench_case *c, int warmup, int reps, double *median_ms,
                                double *min_ms, double *last_command_ms)
{
    double *ms = calloc(2 * (size_t)reps, sizeof(double)), *last = ms + reps;
    if (!ms)
        return FLASHCL_OUT_OF_HOST_MEMORY;
    flashcl_status st = FLASHCL_SUCCESS;
    for (int i = 0; st == FLASHCL_SUCCESS && i < warmup + reps; i++) {
        double t = 0, t_last = NAN;
        st = time_one(env, path, bufs, c, &t, &t_last);
        if (i >= warmup) {
            ms[i - warmup] = t;
            last[i - warmup] = t_last;
        }
    }
    if (st == FLASHCL_SUCCESS) {
        *median_ms = median(ms, reps);
        *min_ms = ms[0];
        if (last_command_ms)
            *last_command_ms = median(last, reps);
    }
    free(ms);
    return st;
}


void bench_fill_random(void *buf, flashcl_dtype dtype, size_t count)
{
    for (size_t i = 0; i < count; i++)
        hostref_store(buf, dtype, i, (float)rng_uniform(-1.0, 1.0));
}

#define FILL_BLOCK ((size_t)1 << 22)

void bench_fill_repeated(void *buf, flashcl_dtype dtype, size_t count)
{
    const size_t esize = flashcl_dtype_size(dtype);
    size_t done = count < FILL_BLOCK ? count : FILL_BLOCK;
    bench_fill_random(buf, dtype, done);
    while (done < count) {  /* doubling copies of what is filled, never overlapping */
        const size_t n = done < count - done ? done : count - done;
        memcpy((unsigned char *)buf + done * esize, buf, n * esize);
        done += n;
    }
}

/* K's (d columns) and V's (dv columns) rows of batch b's head `head` as doubles ([B, N, H, d] layout). */
static void load_head_kv(const struct bench_case *c, const void *k, const void *v, size_t b, size_t head, double *kd,
                         double *vd)
{
    const size_t n = (size_t)c->n, h = (size_t)c->heads, d = (size_t)c->d, dv = (size_t)bench_dv(c);
    for (size_t j = 0; j < n; j++) {
        for (size_t e = 0; e < d; e++)
            kd[j * d + e] = hostref_load(k, c->dtype, ((b * n + j) * h + head) * d + e);
        for (size_t e = 0; e < dv; e++)
            vd[j * dv + e] = hostref_load(v, c->dtype, ((b * n + j) * h + head) * dv + e);
    }
}

/* Largest |O - reference| over SAMPLED_ROWS rows spread over batches and
 * heads ([B, N, H, d] layout, V and O of dv columns; causal aligned bottom-right, N_q = N_kv; a window's keys). */
double bench_sampled_error(const struct bench_case *c, const void *q, const void *k, const void *v,
                            const void *o)
{
    const size_t n = (size_t)c->n, h = (size_t)c->heads, d = (size_t)c->d, dv = (size_t)bench_dv(c);
    const struct hostref_mods plain = {0.0, -INFINITY, 0.0};
    double *kd = malloc(n * d * sizeof(double)), *vd = malloc(n * dv * sizeof(double));
    double *scratch = malloc(n * sizeof(double)), qd[FLASHCL_MAX_HEAD_DIM], ref[FLASHCL_MAX_HEAD_DIM];
    if (!kd || !vd || !scratch) {
        free(kd);
        free(vd);
        free(scratch);
        return NAN;
    }
    double max_err = 0;
    for (int s = 0; s < SAMPLED_ROWS; s++) {
        const size_t b = (size_t)s % (size_t)c->batch, head = ((size_t)s * 5) % h;
        const size_t row = s == 0 ? n - 1 : ((size_t)s * 2654435761u) % n;
        load_head_kv(c, k, v, b, head, kd, vd);
        for (size_t e = 0; e < d; e++)
            qd[e] = hostref_load(q, c->dtype, ((b * n + row) * h + head) * d + e);
        double lse;
        hostref_attention_row_dv(qd, kd, vd, bench_first_key(c, row), c->causal ? row + 1 : n, d, dv,
                                 1.0 / sqrt((double)d), &plain, (long long)row, ref, &lse, scratch);
        for (size_t e = 0; e < dv; e++) {
            const double err = fabs(hostref_load(o, bench_o_dtype(c), ((b * n + row) * h + head) * dv + e) - ref[e]);
            max_err = err > max_err || err != err ? err : max_err;
        }
    }
    free(kd);
    free(vd);
    free(scratch);
    return max_err;
}


/* dQ of SAMPLED_ROWS rows from their reference row of P: p_j = exp(s·q·k_j −
 * lse), ds_j = p_j (dO·v_j − dO·o), dQ = s Σ ds_j k_j (dO, v_j and o of dv columns). */
double bench_sampled_dq_error(const struct bench_case *c, const void *q, const void *k, const void *v,
                              const void *d_o, const void *dq)
{
    const size_t n = (size_t)c->n, h = (size_t)c->heads, d = (size_t)c->d, dv = (size_t)bench_dv(c);
    const double scale = 1.0 / sqrt((double)d);
    const struct hostref_mods plain = {0.0, -INFINITY, 0.0};
    double *kd = malloc(n * d * sizeof(double)), *vd = malloc(n * dv * sizeof(double));
    double *scratch = malloc(n * sizeof(double));
    double qd[FLASHCL_MAX_HEAD_DIM], dod[FLASHCL_MAX_HEAD_DIM], o[FLASHCL_MAX_HEAD_DIM], ref[FLASHCL_MAX_HEAD_DIM];
    if (!kd || !vd || !scratch) {
        free(kd);
        free(vd);
        free(scratch);
        return NAN;
    }
    double max_err = 0, max_ref = 0;
    for (int s = 0; s < SAMPLED_ROWS; s++) {
        const size_t b = (size_t)s % (size_t)c->batch, head = ((size_t)s * 5) % h;
        const size_t row = s == 0 ? n - 1 : ((size_t)s * 2654435761u) % n;
        load_head_kv(c, k, v, b, head, kd, vd);
        const size_t base = ((b * n + row) * h + head) * d, base_v = ((b * n + row) * h + head) * dv;
        for (size_t e = 0; e < d; e++)
            qd[e] = hostref_load(q, c->dtype, base + e);
        for (size_t e = 0; e < dv; e++)
            dod[e] = hostref_load(d_o, c->dtype, base_v + e);
        double lse;
        const size_t first = bench_first_key(c, row), last = c->causal ? row : n - 1;
        hostref_attention_row_dv(qd, kd, vd, first, last + 1, d, dv, scale, &plain, (long long)row, o, &lse,
                                 scratch);
        double delta = 0;
        for (size_t e = 0; e < dv; e++)
            delta += dod[e] * o[e];
        for (size_t e = 0; e < d; e++)
            ref[e] = 0;
        for (size_t j = first; j <= last; j++) {
            double score = 0, dp = 0;
            for (size_t e = 0; e < d; e++)
                score += qd[e] * kd[j * d + e];
            for (size_t e = 0; e < dv; e++)
                dp += dod[e] * vd[j * dv + e];
            const double ds = exp(scale * score - lse) * (dp - delta);
            for (size_t e = 0; e < d; e++)
                ref[e] += scale * ds * kd[j * d + e];
        }
        for (size_t e = 0; e < d; e++) {
            const double err = fabs(hostref_load(dq, c->dtype, base + e) - ref[e]);
            max_err = err > max_err || err != err ? err : max_err;
            max_ref = fmax(max_ref, fabs(ref[e]));
        }
    }
    free(kd);
    free(vd);
    free(scratch);
    return max_ref > 0 ? max_err / max_ref : max_err;
}
