#include "bench_paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

double bench_tolerance(flashcl_dtype dtype)
{
    /* Outputs lie in [-1, 1]: f32 arithmetic, or one rounding to the storage type. */
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
    a->causal = c->causal;
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
    return t.variant == FLASHCL_VARIANT_TENSOR_CORE ? "tensor-core" : "portable";
}
