/* Building programs from the embedded sources, once per (source, options),
 * and handing out their kernels by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

struct kernel_entry {
    const char *name;  /* a string literal of the caller's */
    cl_kernel kernel;
    struct kernel_entry *next;
};

struct program_entry {
    const char *source;  /* identity: one of the embedded sources */
    char *options;
    cl_program program;
    struct kernel_entry *kernels;
    struct program_entry *next;
};

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
        fcl_fail_append("\nbuild log:\n");
        fcl_fail_append(log);
    }
    free(log);
}

/* The compiler's report (registers, spills with -cl-nv-verbose) at DEBUG. */
static void log_build_log(const flashcl_context *ctx, cl_program program)
{
    size_t size = 0;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS || size < 2)
        return;
    char *log = malloc(size + 1);
    if (log && clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, size, log, NULL) == CL_SUCCESS) {
        log[size] = '\0';
        fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "build log: %.900s", log);
    }
    free(log);
}

static void program_free(struct program_entry *p)
{
    for (struct kernel_entry *k = p->kernels, *next; k; k = next) {
        next = k->next;
        clReleaseKernel(k->kernel);
        free(k);
    }
    if (p->program)
        clReleaseProgram(p->program);
    free(p->options);
    free(p);
}

/* cl/nv_wgmma.h's marker: an inline-asm comment that starts with it is an sm_90a instruction. */
static const char sm90a_marker[] = "// @fcl-sm90a ";

char *fcl_sm90a_patch(const char *ptx, size_t size, size_t *out_size)
{
    const char *target = strstr(ptx, ".target sm_90");
    if (!target || target[strlen(".target sm_90")] == 'a' || !strstr(ptx, sm90a_marker))
        return NULL;
    char *out = malloc(size + 2);
    if (!out)
        return NULL;
    const size_t marker_len = strlen(sm90a_marker), head = (size_t)(target - ptx) + strlen(".target sm_90");
    size_t n = 0;
    memcpy(out, ptx, head);
    n = head;
    out[n++] = 'a';
    for (const char *p = ptx + head, *end = ptx + size; p < end;) {
        const char *m = strstr(p, sm90a_marker);
        const char *stop = m && m < end ? m : end;
        memcpy(out + n, p, (size_t)(stop - p));
        n += (size_t)(stop - p);
        p = stop == end ? end : stop + marker_len;
    }
    out[n] = '\0';
    *out_size = n;
    return out;
}

/* Rebuilds `built` (from source, for sm_90) through the sm_90a route in `cl`; the new program or NULL with
 * the error set (logged through `log`, which may be NULL). */
static cl_program build_sm90a(const flashcl_context *log, cl_context cl, cl_device_id device, cl_program built,
                              const char *options)
{
    size_t size = 0;
    char *ptx = (char *)fcl_program_binary(device, built, &size);
    if (!ptx) {
        fcl_fail(log, FLASHCL_BUILD_PROGRAM_FAILURE, "sm_90a route: the compiler gave no PTX");
        return NULL;
    }
    size_t patched_size = 0;
    char *patched = fcl_sm90a_patch(ptx, strlen(ptx), &patched_size);
    free(ptx);
    if (!patched) {
        fcl_fail(log, FLASHCL_BUILD_PROGRAM_FAILURE, "sm_90a route: the binary is not PTX for sm_90 with marked "
                 "instructions");
        return NULL;
    }
    const unsigned char *src[1] = {(const unsigned char *)patched};
    const size_t length = patched_size + 1;  /* with its NUL, as the driver's own PTX binaries */
    cl_int bin_status = CL_SUCCESS, err;
    cl_program program = clCreateProgramWithBinary(cl, 1, &device, &length, src, &bin_status, &err);
    free(patched);
    if (program && bin_status == CL_SUCCESS)
        err = clBuildProgram(program, 1, &device, options, NULL, NULL);
    if (!program || bin_status != CL_SUCCESS || err != CL_SUCCESS) {
        fcl_fail(log, FLASHCL_BUILD_PROGRAM_FAILURE, "sm_90a route: the patched PTX did not build (%d, %d)", err,
                 bin_status);
        if (program) {
            append_build_log(program, device);
            clReleaseProgram(program);
        }
        return NULL;
    }
    return program;
}

/* `source` built with `options` for `device` in `cl` (through the sm_90a route where `sm90a`); NULL with the
 * error set (and logged through `log`, which may be NULL) and the build log appended. */
static cl_program build_program(const flashcl_context *log, cl_context cl, cl_device_id device, const char *source,
                                const char *options, bool sm90a, flashcl_status *st)
{
    cl_int err;
    cl_program program = clCreateProgramWithSource(cl, 1, &source, NULL, &err);
    if (!program) {
        *st = fcl_fail(log, (flashcl_status)err, "clCreateProgramWithSource failed (%d)", err);
        return NULL;
    }
    err = clBuildProgram(program, 1, &device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        *st = fcl_fail(log, (flashcl_status)err, "building a program with \"%s\" on \"%s\" failed (%d)", options,
                       log ? log->dev.name : "its device", err);
        append_build_log(program, device);
        clReleaseProgram(program);
        return NULL;
    }
    if (sm90a) {
        cl_program patched = build_sm90a(log, cl, device, program, options);
        clReleaseProgram(program);
        program = patched;
        *st = FLASHCL_BUILD_PROGRAM_FAILURE;
    }
    return program;
}

static flashcl_status program_get(flashcl_context *ctx, const char *source, const char *options, bool sm90a,
                                  struct program_entry **out)
{
    for (struct program_entry *p = ctx->programs; p; p = p->next)
        if (p->source == source && strcmp(p->options, options) == 0) {
            *out = p;
            return FLASHCL_SUCCESS;
        }
    struct program_entry *p = calloc(1, sizeof(*p));
    if (!p || !(p->options = strdup(options))) {
        free(p);
        return fcl_fail(ctx, FLASHCL_OUT_OF_HOST_MEMORY, "cannot allocate a program entry");
    }
    p->source = source;
    const double start = now_ms();
    p->program = fcl_cache_load(ctx, source, options);
    if (p->program) {
        fcl_log_msg(ctx, FLASHCL_LOG_INFO, "loaded a program from the cache in %.0f ms", now_ms() - start);
        p->next = ctx->programs;
        ctx->programs = p;
        *out = p;
        return FLASHCL_SUCCESS;
    }
    flashcl_status st = FLASHCL_SUCCESS;
    p->program = build_program(ctx, ctx->cl_ctx, ctx->device, source, options, sm90a, &st);
    if (!p->program) {
        program_free(p);
        return st;
    }
    fcl_log_msg(ctx, FLASHCL_LOG_INFO, "built a program%s in %.0f ms", sm90a ? " (sm_90a route)" : "",
                now_ms() - start);
    fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "build options: %s", options);
    if (ctx->log && ctx->log_level >= FLASHCL_LOG_DEBUG)
        log_build_log(ctx, p->program);
    fcl_cache_store(ctx, source, options, p->program);
    p->next = ctx->programs;
    ctx->programs = p;
    *out = p;
    return FLASHCL_SUCCESS;
}

cl_program fcl_program_build_sm90a(cl_context cl, cl_device_id device, const char *source, const char *options)
{
    flashcl_status st;
    return build_program(NULL, cl, device, source, options, true, &st);
}

bool fcl_program_failed(const flashcl_context *ctx, const struct kernel_info *k, const char *options)
{
    flashcl_context *c = (flashcl_context *)ctx;  /* the lock, not the context, changes */
    pthread_mutex_lock(&c->lock);
    bool failed = false;
    for (const struct failed_program *f = c->failed; f && !failed; f = f->next)
        failed = f->kernel == k && strcmp(f->options, options) == 0;
    pthread_mutex_unlock(&c->lock);
    return failed;
}

void fcl_program_mark_failed(flashcl_context *ctx, const struct kernel_info *k, const char *options, const char *why)
{
    struct failed_program *f = malloc(sizeof(*f));
    char *copy = strdup(options);
    if (!f || !copy) {
        free(f);
        free(copy);
        return;  /* out of host memory: the call fails again next time, no worse */
    }
    f->kernel = k;
    f->options = copy;
    pthread_mutex_lock(&ctx->lock);
    f->next = ctx->failed;
    ctx->failed = f;
    pthread_mutex_unlock(&ctx->lock);
    fcl_log_msg(ctx, FLASHCL_LOG_WARN, "kernel %s with \"%s\" off for this context: it failed here (%s); %s", k->name,
                options, why, flashcl_last_error());
}

flashcl_status fcl_program_get_kernel(flashcl_context *ctx, const char *source, const char *name,
                                  const char *options, bool sm90a, cl_kernel *out)
{
    struct program_entry *p = NULL;
    flashcl_status st = program_get(ctx, source, options, sm90a, &p);
    if (st != FLASHCL_SUCCESS)
        return st;
    for (struct kernel_entry *k = p->kernels; k; k = k->next)
        if (strcmp(k->name, name) == 0) {
            *out = k->kernel;
            return FLASHCL_SUCCESS;
        }
    struct kernel_entry *k = calloc(1, sizeof(*k));
    if (!k)
        return fcl_fail(ctx, FLASHCL_OUT_OF_HOST_MEMORY, "cannot allocate a kernel entry");
    cl_int err;
    k->kernel = clCreateKernel(p->program, name, &err);
    if (!k->kernel) {
        free(k);
        return fcl_fail(ctx, (flashcl_status)err, "clCreateKernel(%s) failed (%d)", name, err);
    }
    k->name = name;
    k->next = p->kernels;
    p->kernels = k;
    *out = k->kernel;
    return FLASHCL_SUCCESS;
}

void fcl_program_cache_free(flashcl_context *ctx)
{
    for (struct program_entry *p = ctx->programs, *next; p; p = next) {
        next = p->next;
        program_free(p);
    }
    ctx->programs = NULL;
}

bool fcl_append_build_options(const flashcl_context *ctx, char *options, size_t size)
{
    const char *extra = ctx->env.build_options;
    if (!extra || !*extra)
        return true;
    const size_t used = strlen(options);
    const int n = snprintf(options + used, size - used, " %s", extra);
    return n >= 0 && (size_t)n < size - used;
}
