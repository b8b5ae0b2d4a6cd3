#include "bench_paths.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostref.h"

#define SAMPLED_ROWS 8  /* query rows checked against the CPU reference per case */

static const char *const path_names[BENCH_PATH_COUNT] = {"flash", "standard"};

const char *bench_path_name(enum bench_path path)
{
    return path_names[path];
}

int bench_parse_paths(const char *list)
{
    int set = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int p = 0; p < BENCH_PATH_COUNT; p++)
            if (strcmp(tok, path_names[p]) == 0)
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

double bench_tolerance(flashcl_dtype dtype, enum flashcl_precision precision)
{
    /* Outputs lie in [-1, 1]: f32 arithmetic, or one rounding to the storage
     * type; TF32 rounds every operand to 10 mantissa bits. */
    if (dtype == FLASHCL_F32 && precision == FLASHCL_PRECISION_TF32)
        return 5e-3;
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
    const size_t n = (size_t)c->n, h = (size_t)c->heads, d = (size_t)c->d;
    const size_t bytes = (size_t)c->batch * n * h * d * flashcl_dtype_size(c->dtype);
    const size_t lse_bytes = (size_t)c->batch * h * n * sizeof(float);
    cl_int err = CL_SUCCESS;
    b->q = buffer(env, bytes, q, &err);
    b->k = buffer(env, bytes, k, &err);
    b->v = buffer(env, bytes, v, &err);
    b->o = buffer(env, bytes, NULL, &err);
    b->lse = buffer(env, lse_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        bench_buffers_release(b);
        return (flashcl_status)err;
    }
    b->io_bytes = 4 * bytes + lse_bytes;
    struct flashcl_attention *a = &b->attn;
    a->batch = c->batch;
    a->seq_q = a->seq_kv = c->n;
    a->heads_q = a->heads_kv = c->heads;
    a->head_dim = c->d;
    a->q = flashcl_tensor_bnhd(b->q, c->dtype, n, h, d);
    a->k = flashcl_tensor_bnhd(b->k, c->dtype, n, h, d);
    a->v = flashcl_tensor_bnhd(b->v, c->dtype, n, h, d);
    a->o = flashcl_tensor_bnhd(b->o, c->dtype, n, h, d);
    a->lse = flashcl_tensor_lse(b->lse, n, h);
    a->mask = c->causal ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    a->precision = c->precision;
    return FLASHCL_SUCCESS;
}

void bench_buffers_release(struct bench_buffers *b)
{
    cl_mem *all[] = {&b->q, &b->k, &b->v, &b->o, &b->lse};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (*all[i]) {
            clReleaseMemObject(*all[i]);
            *all[i] = NULL;
        }
}

flashcl_status bench_prepare_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b,
                                  const struct bench_case *c, size_t *device_bytes)
{
    (void)c;
    *device_bytes = b->io_bytes;
    if (path == BENCH_FLASH)
        return FLASHCL_SUCCESS;  /* flash needs nothing beyond the inputs and outputs */

    size_t ws_bytes = 0;
    flashcl_status st = flashcl_standard_workspace_size(env->ctx, &b->attn, &ws_bytes);
    if (st != FLASHCL_SUCCESS)
        return st;
    *device_bytes += ws_bytes;
    /* The workspace is allocated once, outside the timed runs; a size the
     * device cannot hold gets the library's own out-of-memory answer. */
    cl_ulong max_alloc = 0, global = 0;
    cl_device_id dev = flashcl_context_device(env->ctx);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(max_alloc), &max_alloc, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(global), &global, NULL);
    if (ws_bytes > max_alloc || *device_bytes > global)
        return flashcl_standard_forward(env->ctx, &b->attn, NULL, env->queue, 0, NULL, NULL);
    cl_int err;
    b->workspace = clCreateBuffer(flashcl_context_cl_context(env->ctx), CL_MEM_READ_WRITE, ws_bytes, NULL, &err);
    return b->workspace ? FLASHCL_SUCCESS : FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
}

flashcl_status bench_run_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b,
                              const struct bench_case *c, cl_event *event)
{
    (void)c;
    if (path == BENCH_STANDARD)
        return flashcl_standard_forward(env->ctx, &b->attn, b->workspace, env->queue, 0, NULL, event);
    return flashcl_forward(env->ctx, &b->attn, env->queue, 0, NULL, event);
}

void bench_release_path(struct bench_env *env, enum bench_path path, struct bench_buffers *b)
{
    (void)env;
    (void)path;
    if (b->workspace) {
        clReleaseMemObject(b->workspace);
        b->workspace = NULL;
    }
}

flashcl_status bench_read_output(struct bench_env *env, struct bench_buffers *b, void *out, size_t bytes)
{
    return (flashcl_status)clEnqueueReadBuffer(env->queue, b->o, CL_TRUE, 0, bytes, out, 0, NULL, NULL);
}

const char *bench_kernel_name(struct bench_env *env, enum bench_path path, struct bench_buffers *b)
{
    if (path == BENCH_STANDARD)
        return "clblast";
    struct flashcl_tile t;
    if (flashcl_forward_config(env->ctx, &b->attn, &t) != FLASHCL_SUCCESS)
        return "?";
    return flashcl_variant_name(t.variant);
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double host_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Device time of one run: from the end of a marker enqueued just before it
 * (on the in-order queue, when the previous work is done) to the end of the
 * run's last command. The standard path is several commands, so its launch
 * gaps count, as they do for a user. Falls back to the host clock around a
 * finished queue where markers carry no profiling information. */
static flashcl_status time_one(struct bench_env *env, enum bench_path path, struct bench_buffers *bufs,
                               const struct bench_case *c, double *ms)
{
    cl_event marker = NULL, last = NULL;
    const double host_start = host_ms();
    cl_int err = clEnqueueMarkerWithWaitList(env->queue, 0, NULL, &marker);
    flashcl_status st = err == CL_SUCCESS ? bench_run_path(env, path, bufs, c, &last) : (flashcl_status)err;
    if (st == FLASHCL_SUCCESS && clWaitForEvents(1, &last) != CL_SUCCESS)
        st = FLASHCL_OUT_OF_RESOURCES;
    if (st == FLASHCL_SUCCESS) {
        cl_ulong start = 0, end = 0;
        if (clGetEventProfilingInfo(marker, CL_PROFILING_COMMAND_END, sizeof(start), &start, NULL) == CL_SUCCESS &&
            clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL) == CL_SUCCESS &&
            end > start)
            *ms = (double)(end - start) * 1e-6;
        else
            *ms = host_ms() - host_start;
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
                                double *min_ms)
{
    double *ms = calloc((size_t)reps, sizeof(double));
    if (!ms)
        return FLASHCL_OUT_OF_HOST_MEMORY;
    flashcl_status st = FLASHCL_SUCCESS;
    for (int i = 0; st == FLASHCL_SUCCESS && i < warmup + reps; i++) {
        double t = 0;
        st = time_one(env, path, bufs, c, &t);
        if (i >= warmup)
            ms[i - warmup] = t;
    }
    if (st == FLASHCL_SUCCESS) {
        qsort(ms, (size_t)reps, sizeof(double), compare_doubles);
        *median_ms = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
        *min_ms = ms[0];
    }
    free(ms);
    return st;
}


void bench_fill_random(void *buf, flashcl_dtype dtype, size_t count)
{
    for (size_t i = 0; i < count; i++)
        hostref_store(buf, dtype, i, (float)rng_uniform(-1.0, 1.0));
}

/* Largest |O - reference| over SAMPLED_ROWS rows spread over batches and
 * heads ([B, N, H, d] layout; causal aligned bottom-right, N_q = N_kv). */
double bench_sampled_error(const struct bench_case *c, const void *q, const void *k, const void *v,
                            const void *o)
{
    const size_t n = (size_t)c->n, h = (size_t)c->heads, d = (size_t)c->d;
    double *kd = malloc(n * d * sizeof(double)), *vd = malloc(n * d * sizeof(double));
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
        for (size_t j = 0; j < n; j++)
            for (size_t e = 0; e < d; e++) {
                const size_t idx = ((b * n + j) * h + head) * d + e;
                kd[j * d + e] = hostref_load(k, c->dtype, idx);
                vd[j * d + e] = hostref_load(v, c->dtype, idx);
            }
        for (size_t e = 0; e < d; e++)
            qd[e] = hostref_load(q, c->dtype, ((b * n + row) * h + head) * d + e);
        double lse;
        hostref_attention_row(qd, kd, vd, n, d, 1.0 / sqrt((double)d),
                              c->causal ? (long long)row : (long long)n - 1, ref, &lse, scratch);
        for (size_t e = 0; e < d; e++) {
            const double err = fabs(hostref_load(o, c->dtype, ((b * n + row) * h + head) * d + e) - ref[e]);
            max_err = err > max_err || err != err ? err : max_err;
        }
    }
    free(kd);
    free(vd);
    free(scratch);
    return max_err;
}

