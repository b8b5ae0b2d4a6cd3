/* Building kernels from the embedded sources, once per set of build options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Puts the program's build log behind the current error message. */
static void append_build_log(cl_program program, cl_device_id device)
{
    size_t size = 0;
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS ||
        size == 0)
        return;
    char *log = malloc(size + 1);
    if (!log)
        return;
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log, NULL) == CL_SUCCESS) {
        log[size] = '\0';
        fail_append("\nbuild log:\n");
        fail_append(log);
    }
    free(log);
}

static flashcl_status build(flashcl_context *ctx, const char *source, const char *name,
                            const char *options, struct program_entry *entry)
{
    cl_int err;
    const double start = now_ms();
    entry->program = clCreateProgramWithSource(ctx->cl_ctx, 1, &source, NULL, &err);
    if (!entry->program)
        return fail(ctx, (flashcl_status)err, "clCreateProgramWithSource failed (%d)", err);
    err = clBuildProgram(entry->program, 1, &ctx->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        flashcl_status st = fail(ctx, (flashcl_status)err,
                                 "building kernel %s with \"%s\" on \"%s\" failed (%d)", name,
                                 options, ctx->device_name, err);
        append_build_log(entry->program, ctx->device);
        return st;
    }
    entry->kernel = clCreateKernel(entry->program, name, &err);
    if (!entry->kernel)
        return fail(ctx, (flashcl_status)err, "clCreateKernel(%s) failed (%d)", name, err);
    log_msg(ctx, FLASHCL_LOG_INFO, "built %s in %.0f ms", name, now_ms() - start);
    log_msg(ctx, FLASHCL_LOG_DEBUG, "build options: %s", options);
    return FLASHCL_SUCCESS;
}

static void entry_free(struct program_entry *e)
{
    if (e->kernel)
        clReleaseKernel(e->kernel);
    if (e->program)
        clReleaseProgram(e->program);
    free(e->key);
    free(e);
}

flashcl_status program_get_kernel(flashcl_context *ctx, const char *source, const char *name,
                                  const char *options, cl_kernel *out)
{
    /* Options name every compile-time choice and each kernel's source is
     * fixed, so "name options" identifies the build. */
    const size_t key_len = strlen(name) + 1 + strlen(options) + 1;
    char *key = malloc(key_len);
    if (!key)
        return fail(ctx, FLASHCL_OUT_OF_HOST_MEMORY, "cannot allocate a program key");
    snprintf(key, key_len, "%s %s", name, options);
    for (struct program_entry *e = ctx->programs; e; e = e->next) {
        if (strcmp(e->key, key) == 0) {
            free(key);
            *out = e->kernel;
            return FLASHCL_SUCCESS;
        }
    }
    struct program_entry *e = calloc(1, sizeof(*e));
    if (!e) {
        free(key);
        return fail(ctx, FLASHCL_OUT_OF_HOST_MEMORY, "cannot allocate a program entry");
    }
    e->key = key;
    flashcl_status st = build(ctx, source, name, options, e);
    if (st != FLASHCL_SUCCESS) {
        entry_free(e);
        return st;
    }
    e->next = ctx->programs;
    ctx->programs = e;
    *out = e->kernel;
    return FLASHCL_SUCCESS;
}

void program_cache_free(flashcl_context *ctx)
{
    struct program_entry *e = ctx->programs;
    while (e) {
        struct program_entry *next = e->next;
        entry_free(e);
        e = next;
    }
    ctx->programs = NULL;
}
