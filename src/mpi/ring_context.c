/* The ring handle: a duplicated communicator, two queues, the kernels. */
#include <stdlib.h>
#include <string.h>

#include "ring_internal.h"

int fcl_ring_test_fail_rank = -1, fcl_ring_test_fail_step = -1;

static flashcl_status create_queues(flashcl_ring *ring)
{
    cl_int err;
    ring->compute = clCreateCommandQueue(ring->cl, ring->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (!ring->compute)
        return fcl_ring_fail((flashcl_status)err, "clCreateCommandQueue (compute) failed: %d", err);
    ring->transfer = clCreateCommandQueue(ring->cl, ring->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (!ring->transfer)
        return fcl_ring_fail((flashcl_status)err, "clCreateCommandQueue (transfer) failed: %d", err);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_ring_create(flashcl_context *ctx, MPI_Comm comm, const struct flashcl_ring_params *params,
                                   flashcl_ring **out)
{
    fcl_ring_clear_error();
    if (!out)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!ctx)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "ctx is NULL");
    if (params) {
        for (size_t i = 0; i < sizeof(params->reserved); i++)
            if (params->reserved[i])
                return fcl_ring_fail(FLASHCL_INVALID_VALUE, "params.reserved[%zu] is %d, not 0", i,
                                     params->reserved[i]);
        if (params->chunks < 0)
            return fcl_ring_fail(FLASHCL_INVALID_VALUE, "params.chunks is %d, below 0", params->chunks);
    }
    flashcl_ring *ring = calloc(1, sizeof(*ring));
    if (!ring)
        return fcl_ring_fail(FLASHCL_OUT_OF_HOST_MEMORY, "no memory for the ring");
    ring->ctx = ctx;
    ring->cl = flashcl_context_cl_context(ctx);
    ring->device = flashcl_context_device(ctx);
    ring->chunks = params ? params->chunks : 0;
    ring->comm = MPI_COMM_NULL;
    if (MPI_Comm_dup(comm, &ring->comm) != MPI_SUCCESS) {
        free(ring);
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "MPI_Comm_dup failed");
    }
    MPI_Comm_set_errhandler(ring->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(ring->comm, &ring->rank);
    MPI_Comm_size(ring->comm, &ring->ranks);
    flashcl_status st = create_queues(ring);
    if (st != FLASHCL_SUCCESS) {
        flashcl_ring_destroy(&ring);
        return st;
    }
    *out = ring;
    return FLASHCL_SUCCESS;
}

void flashcl_ring_destroy(flashcl_ring **ring_ptr)
{
    if (!ring_ptr || !*ring_ptr)
        return;
    flashcl_ring *ring = *ring_ptr;
    for (int d = 0; d < 4; d++) {
        for (int k = 0; k < RK_COUNT; k++)
            if (ring->kernel[d][k])
                clReleaseKernel(ring->kernel[d][k]);
        if (ring->program[d])
            clReleaseProgram(ring->program[d]);
    }
    if (ring->compute)
        clReleaseCommandQueue(ring->compute);
    if (ring->transfer)
        clReleaseCommandQueue(ring->transfer);
    if (ring->comm != MPI_COMM_NULL)
        MPI_Comm_free(&ring->comm);
    free(ring);
    *ring_ptr = NULL;
}

flashcl_status flashcl_ring_last_stats(const flashcl_ring *ring, struct flashcl_ring_stats *out)
{
    if (!ring || !out)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL", ring ? "out" : "ring");
    *out = ring->stats;
    return FLASHCL_SUCCESS;
}
