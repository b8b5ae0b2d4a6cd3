/* The ring's kernels (src/mpi/ring.cl, embedded at build time), one program per dtype. */
#include <stdio.h>
#include <stdlib.h>

#include "ring_internal.h"

extern const char flashcl_source_ring[];

static const char *const kernel_names[RK_COUNT] = {
    [RK_GATHER] = "ring_gather", [RK_GATHER_LSE] = "ring_gather_lse", [RK_MERGE] = "ring_merge",
    [RK_ACCUMULATE] = "ring_accumulate", [RK_ADD] = "ring_add", [RK_STORE] = "ring_store",
};

static flashcl_status build_failure(flashcl_ring *ring, cl_program program, cl_int err, const char *options)
{
    char log[768] = "";
    clGetProgramBuildInfo(program, ring->device, CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log, NULL);
    return fcl_ring_fail((flashcl_status)err, "building src/mpi/ring.cl with \"%s\" failed (%d): %s", options, err,
                         log);
}

flashcl_status fcl_ring_kernels(flashcl_ring *ring, flashcl_dtype dtype, cl_kernel **out)
{
    if (dtype < FLASHCL_F32 || dtype > FLASHCL_BF16)
        return fcl_ring_fail(FLASHCL_ERROR_INVALID_DTYPE, "dtype %d is not f32, f16 or bf16", (int)dtype);
    if (ring->program[dtype]) {
        *out = ring->kernel[dtype];
        return FLASHCL_SUCCESS;
    }
    cl_int err;
    const char *source = flashcl_source_ring;
    cl_program program = clCreateProgramWithSource(ring->cl, 1, &source, NULL, &err);
    if (!program)
        return fcl_ring_fail((flashcl_status)err, "clCreateProgramWithSource (ring.cl) failed: %d", err);
    char options[64];
    /* No fast-math flags: the merge's exp and log must be the same function on every rank. */
    snprintf(options, sizeof(options), "-DDTYPE=%d", (int)dtype - 1);
    err = clBuildProgram(program, 1, &ring->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        flashcl_status st = build_failure(ring, program, err, options);
        clReleaseProgram(program);
        return st;
    }
    for (int k = 0; k < RK_COUNT; k++) {
        ring->kernel[dtype][k] = clCreateKernel(program, kernel_names[k], &err);
        if (!ring->kernel[dtype][k]) {
            for (int j = 0; j < k; j++) {
                clReleaseKernel(ring->kernel[dtype][j]);
                ring->kernel[dtype][j] = NULL;
            }
            clReleaseProgram(program);
            return fcl_ring_fail((flashcl_status)err, "clCreateKernel(%s) failed: %d", kernel_names[k], err);
        }
    }
    ring->program[dtype] = program;
    *out = ring->kernel[dtype];
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_ring_set_args(cl_kernel kernel, int n, const size_t *sizes, const void *const *values,
                                 const char *what)
{
    for (int i = 0; i < n; i++) {
        const cl_int err = clSetKernelArg(kernel, (cl_uint)i, sizes[i], values[i]);
        if (err != CL_SUCCESS)
            return fcl_ring_fail((flashcl_status)err, "%s: clSetKernelArg(%d) failed: %d", what, i, err);
    }
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_ring_enqueue_1d(cl_command_queue queue, cl_kernel kernel, size_t total, cl_uint n_wait,
                                   const cl_event *wait, cl_event *event, const char *what)
{
    const size_t local = 64, global = (total + local - 1) / local * local;
    const cl_int err = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, n_wait, n_wait ? wait : NULL,
                                              event);
    if (err != CL_SUCCESS)
        return fcl_ring_fail((flashcl_status)err, "%s: clEnqueueNDRangeKernel failed: %d", what, err);
    return FLASHCL_SUCCESS;
}
