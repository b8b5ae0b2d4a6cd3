/* The wrappers of fault.h. Each counts itself while armed and fails when
 * its number comes up; releases always pass through (a release cannot
 * usefully fail) but are tracked. Single-threaded use only. */
#include "fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CL/cl.h>
#include <clblast_c.h>

static bool armed;
static long calls, fail_at, enqueued;
static struct fault_report report;

void fault_arm(long k)
{
    armed = true;
    calls = 0;
    enqueued = 0;
    fail_at = k;
    memset(&report, 0, sizeof(report));
}

struct fault_report fault_disarm(void)
{
    armed = false;
    report.calls = calls;
    return report;
}

/* True if this call (of function `name`) is the one to fail. */
static bool fail_here(const char *name)
{
    if (!armed)
        return false;
    calls++;
    if (calls != fail_at)
        return false;
    report.fired = true;
    report.failed = name;
    report.enqueued_before = enqueued;
    return true;
}

/* ---- OpenCL object references ---- */

#define MAX_TRACKED 4096
static struct {
    const void *object;
    const char *kind;
    int refs;
} tracked[MAX_TRACKED];
static int n_tracked;

static int find(const void *object)
{
    for (int i = 0; i < n_tracked; i++)
        if (tracked[i].object == object)
            return i;
    return -1;
}

/* delta references to object: counted while armed, or for an object already tracked. */
static void track(const void *object, const char *kind, int delta)
{
    if (!object)
        return;
    int i = find(object);
    if (i < 0) {
        if (!armed || n_tracked == MAX_TRACKED)
            return;
        i = n_tracked++;
        tracked[i].object = object;
        tracked[i].kind = kind;
        tracked[i].refs = 0;
    }
    tracked[i].refs += delta;
    if (tracked[i].refs == 0)
        tracked[i] = tracked[--n_tracked];
}

int fault_unbalanced_objects(const char **what)
{
    static char text[128];
    if (n_tracked > 0) {
        snprintf(text, sizeof(text), "%s %p with %+d reference(s)", tracked[0].kind, tracked[0].object,
                 tracked[0].refs);
        *what = text;
    }
    return n_tracked;
}

void fault_reset_objects(void)
{
    n_tracked = 0;
}

/* ---- host allocations ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t count, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
FILE *__real_fdopen(int fd, const char *mode);
int __real_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t count, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
FILE *__wrap_fdopen(int fd, const char *mode);
int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);

#define FAIL_NULL(name)      \
    do {                     \
        if (fail_here(name)) { \
            errno = ENOMEM;  \
            return NULL;     \
        }                    \
    } while (0)

void *__wrap_malloc(size_t n)
{
    FAIL_NULL("malloc");
    return __real_malloc(n);
}

void *__wrap_calloc(size_t count, size_t n)
{
    FAIL_NULL("calloc");
    return __real_calloc(count, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    FAIL_NULL("realloc");
    return __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    FAIL_NULL("strdup");
    return __real_strdup(s);
}

FILE *__wrap_fdopen(int fd, const char *mode)
{
    FAIL_NULL("fdopen");
    return __real_fdopen(fd, mode);
}

int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    if (fail_here("pthread_mutex_init"))
        return ENOMEM;
    return __real_pthread_mutex_init(m, a);
}

/* ---- OpenCL ---- */

/* A wrapper for a function returning cl_int: fails with CL_OUT_OF_RESOURCES. */
#define WRAP_STATUS(name, params, args)                        \
    cl_int __real_##name params;                               \
    cl_int __wrap_##name params;                               \
    cl_int __wrap_##name params                                \
    {                                                          \
        if (fail_here(#name))                                  \
            return CL_OUT_OF_RESOURCES;                        \
        return __real_##name args;                             \
    }

/* A wrapper for a creation: NULL with *errcode_ret = CL_OUT_OF_RESOURCES;
 * the object made is tracked. */
#define WRAP_CREATE(type, name, params, args)                  \
    type __real_##name params;                                 \
    type __wrap_##name params;                                 \
    type __wrap_##name params                                  \
    {                                                          \
        if (fail_here(#name)) {                                \
            if (errcode_ret)                                   \
                *errcode_ret = CL_OUT_OF_RESOURCES;            \
            return NULL;                                       \
        }                                                      \
        type object = __real_##name args;                      \
        track(object, #type, 1);                               \
        return object;                                         \
    }

/* A retain fails without taking a reference; a release always passes. */
#define WRAP_RETAIN(type, name)                                \
    cl_int __real_##name(type object);                         \
    cl_int __wrap_##name(type object);                         \
    cl_int __wrap_##name(type object)                          \
    {                                                          \
        if (fail_here(#name))                                  \
            return CL_OUT_OF_RESOURCES;                        \
        const cl_int err = __real_##name(object);              \
        if (err == CL_SUCCESS)                                 \
            track(object, #type, 1);                           \
        return err;                                            \
    }
#define WRAP_RELEASE(type, name)                               \
    cl_int __real_##name(type object);                         \
    cl_int __wrap_##name(type object);                         \
    cl_int __wrap_##name(type object)                          \
    {                                                          \
        const cl_int err = __real_##name(object);              \
        if (err == CL_SUCCESS)                                 \
            track(object, #type, -1);                          \
        return err;                                            \
    }

WRAP_STATUS(clGetPlatformIDs, (cl_uint n, cl_platform_id *p, cl_uint *np), (n, p, np))
WRAP_STATUS(clGetPlatformInfo, (cl_platform_id p, cl_platform_info i, size_t n, void *v, size_t *r), (p, i, n, v, r))
WRAP_STATUS(clGetDeviceIDs, (cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d, cl_uint *nd),
            (p, t, n, d, nd))
WRAP_STATUS(clGetDeviceInfo, (cl_device_id d, cl_device_info i, size_t n, void *v, size_t *r), (d, i, n, v, r))
WRAP_STATUS(clGetContextInfo, (cl_context c, cl_context_info i, size_t n, void *v, size_t *r), (c, i, n, v, r))
WRAP_STATUS(clGetCommandQueueInfo, (cl_command_queue q, cl_command_queue_info i, size_t n, void *v, size_t *r),
            (q, i, n, v, r))
WRAP_STATUS(clGetMemObjectInfo, (cl_mem m, cl_mem_info i, size_t n, void *v, size_t *r), (m, i, n, v, r))
WRAP_STATUS(clGetProgramInfo, (cl_program p, cl_program_info i, size_t n, void *v, size_t *r), (p, i, n, v, r))
WRAP_STATUS(clGetProgramBuildInfo,
            (cl_program p, cl_device_id d, cl_program_build_info i, size_t n, void *v, size_t *r),
            (p, d, i, n, v, r))
WRAP_STATUS(clGetEventInfo, (cl_event e, cl_event_info i, size_t n, void *v, size_t *r), (e, i, n, v, r))
WRAP_STATUS(clBuildProgram,
            (cl_program p, cl_uint n, const cl_device_id *d, const char *o,
             void(CL_CALLBACK *f)(cl_program, void *), void *u),
            (p, n, d, o, f, u))
WRAP_STATUS(clSetKernelArg, (cl_kernel k, cl_uint i, size_t n, const void *v), (k, i, n, v))
WRAP_STATUS(clWaitForEvents, (cl_uint n, const cl_event *e), (n, e))
WRAP_STATUS(clFlush, (cl_command_queue q), (q))
WRAP_STATUS(clFinish, (cl_command_queue q), (q))

WRAP_CREATE(cl_context, clCreateContext,
            (const cl_context_properties *p, cl_uint n, const cl_device_id *d,
             void(CL_CALLBACK *f)(const char *, const void *, size_t, void *), void *u, cl_int *errcode_ret),
            (p, n, d, f, u, errcode_ret))
/* The tensor-core probe's queue (src/nvidia.c): created on NVIDIA devices only, so its release went
 * uncounted against no create on the H200 until this was wrapped. */
WRAP_CREATE(cl_command_queue, clCreateCommandQueue,
            (cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *errcode_ret), (c, d, p, errcode_ret))
WRAP_CREATE(cl_mem, clCreateBuffer, (cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *errcode_ret),
            (c, f, n, h, errcode_ret))
WRAP_CREATE(cl_mem, clCreateSubBuffer,
            (cl_mem m, cl_mem_flags f, cl_buffer_create_type t, const void *i, cl_int *errcode_ret),
            (m, f, t, i, errcode_ret))
WRAP_CREATE(cl_program, clCreateProgramWithSource,
            (cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *errcode_ret),
            (c, n, s, l, errcode_ret))
WRAP_CREATE(cl_program, clCreateProgramWithBinary,
            (cl_context c, cl_uint n, const cl_device_id *d, const size_t *l, const unsigned char **b,
             cl_int *s, cl_int *errcode_ret),
            (c, n, d, l, b, s, errcode_ret))
WRAP_CREATE(cl_kernel, clCreateKernel, (cl_program p, const char *name, cl_int *errcode_ret),
            (p, name, errcode_ret))

WRAP_RETAIN(cl_context, clRetainContext)
WRAP_RETAIN(cl_device_id, clRetainDevice)
WRAP_RETAIN(cl_mem, clRetainMemObject)
WRAP_RETAIN(cl_event, clRetainEvent)
WRAP_RETAIN(cl_command_queue, clRetainCommandQueue)
WRAP_RELEASE(cl_context, clReleaseContext)
WRAP_RELEASE(cl_device_id, clReleaseDevice)
WRAP_RELEASE(cl_mem, clReleaseMemObject)
WRAP_RELEASE(cl_program, clReleaseProgram)
WRAP_RELEASE(cl_kernel, clReleaseKernel)
WRAP_RELEASE(cl_event, clReleaseEvent)
WRAP_RELEASE(cl_command_queue, clReleaseCommandQueue)

cl_int __real_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *off,
                                     const size_t *global, const size_t *local, cl_uint n, const cl_event *wait,
                                     cl_event *event);
cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *off,
                                     const size_t *global, const size_t *local, cl_uint n, const cl_event *wait,
                                     cl_event *event);
cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims, const size_t *off,
                                     const size_t *global, const size_t *local, cl_uint n, const cl_event *wait,
                                     cl_event *event)
{
    if (fail_here("clEnqueueNDRangeKernel"))
        return CL_OUT_OF_RESOURCES;
    const cl_int err = __real_clEnqueueNDRangeKernel(q, k, dims, off, global, local, n, wait, event);
    if (err == CL_SUCCESS) {
        enqueued += armed;
        if (event)
            track(*event, "cl_event", 1);
    }
    return err;
}

cl_int __real_clEnqueueFillBuffer(cl_command_queue q, cl_mem buffer, const void *pattern, size_t pattern_size,
                                  size_t offset, size_t size, cl_uint n, const cl_event *wait, cl_event *event);
cl_int __wrap_clEnqueueFillBuffer(cl_command_queue q, cl_mem buffer, const void *pattern, size_t pattern_size,
                                  size_t offset, size_t size, cl_uint n, const cl_event *wait, cl_event *event);
cl_int __wrap_clEnqueueFillBuffer(cl_command_queue q, cl_mem buffer, const void *pattern, size_t pattern_size,
                                  size_t offset, size_t size, cl_uint n, const cl_event *wait, cl_event *event)
{
    if (fail_here("clEnqueueFillBuffer"))
        return CL_OUT_OF_RESOURCES;
    const cl_int err = __real_clEnqueueFillBuffer(q, buffer, pattern, pattern_size, offset, size, n, wait, event);
    if (err == CL_SUCCESS) {
        enqueued += armed;
        if (event)
            track(*event, "cl_event", 1);
    }
    return err;
}

CLBlastStatusCode __real_CLBlastSgemmStridedBatched(
    const CLBlastLayout layout, const CLBlastTranspose ta, const CLBlastTranspose tb, const size_t m, const size_t n,
    const size_t k, const float alpha, const cl_mem a, const size_t a_off, const size_t a_ld, const size_t a_stride,
    const cl_mem b, const size_t b_off, const size_t b_ld, const size_t b_stride, const float beta, cl_mem c,
    const size_t c_off, const size_t c_ld, const size_t c_stride, const size_t batch, cl_command_queue *queue,
    cl_event *event);
CLBlastStatusCode __wrap_CLBlastSgemmStridedBatched(
    const CLBlastLayout layout, const CLBlastTranspose ta, const CLBlastTranspose tb, const size_t m, const size_t n,
    const size_t k, const float alpha, const cl_mem a, const size_t a_off, const size_t a_ld, const size_t a_stride,
    const cl_mem b, const size_t b_off, const size_t b_ld, const size_t b_stride, const float beta, cl_mem c,
    const size_t c_off, const size_t c_ld, const size_t c_stride, const size_t batch, cl_command_queue *queue,
    cl_event *event);
CLBlastStatusCode __wrap_CLBlastSgemmStridedBatched(
    const CLBlastLayout layout, const CLBlastTranspose ta, const CLBlastTranspose tb, const size_t m, const size_t n,
    const size_t k, const float alpha, const cl_mem a, const size_t a_off, const size_t a_ld, const size_t a_stride,
    const cl_mem b, const size_t b_off, const size_t b_ld, const size_t b_stride, const float beta, cl_mem c,
    const size_t c_off, const size_t c_ld, const size_t c_stride, const size_t batch, cl_command_queue *queue,
    cl_event *event)
{
    if (fail_here("CLBlastSgemmStridedBatched"))
        return CLBlastOpenCLOutOfResources;
    const CLBlastStatusCode code =
        __real_CLBlastSgemmStridedBatched(layout, ta, tb, m, n, k, alpha, a, a_off, a_ld, a_stride, b, b_off, b_ld,
                                          b_stride, beta, c, c_off, c_ld, c_stride, batch, queue, event);
    if (code == CLBlastSuccess) {
        enqueued += armed;
        if (event)
            track(*event, "cl_event", 1);
    }
    return code;
}
