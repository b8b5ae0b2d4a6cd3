/* The blocks that travel the ring: two device buffers (the one computed on, the one arriving), two
 * pinned host buffers (CL_MEM_ALLOC_HOST_PTR, mapped for the call) that MPI sends from and receives
 * into, and the events that order the uploads after the block's last reader. OpenCL has no path between
 * two devices' memory, so every block crosses host memory once each way. */
#include <limits.h>
#include <string.h>

#include "ring_internal.h"

void fcl_ring_release(cl_event *event)
{
    if (*event)
        clReleaseEvent(*event);
    *event = NULL;
}

double fcl_ring_event_span(cl_event first, cl_event last)
{
    cl_ulong start = 0, end = 0;
    if (!first || !last ||
        clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof(start), &start, NULL) != CL_SUCCESS ||
        clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL) != CL_SUCCESS)
        return 0.0;
    return end > start ? 1e-9 * (double)(end - start) : 0.0;
}

flashcl_status fcl_ring_stage_create(flashcl_ring *ring, struct fcl_ring_stage *st, size_t bytes, int tag)
{
    memset(st, 0, sizeof(*st));
    st->bytes = bytes;
    st->tag = tag;
    st->send = st->recv = MPI_REQUEST_NULL;
    if (bytes > INT_MAX)
        return fcl_ring_fail(FLASHCL_ERROR_INVALID_SHAPE,
                             "a ring block of %zu bytes exceeds one MPI message (2^31 - 1): use more ranks", bytes);
    const int copies = ring->ranks > 1 ? 2 : 1;  /* one rank: nothing arrives */
    for (int i = 0; i < copies; i++) {
        cl_int err;
        st->device[i] = clCreateBuffer(ring->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (!st->device[i])
            return fcl_ring_fail((flashcl_status)err, "allocating a ring block of %zu bytes failed: %d", bytes, err);
        if (ring->ranks == 1)
            continue;
        st->pinned[i] = clCreateBuffer(ring->cl, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
        if (!st->pinned[i])
            return fcl_ring_fail((flashcl_status)err, "allocating %zu bytes of pinned staging failed: %d", bytes, err);
        st->host[i] = clEnqueueMapBuffer(ring->transfer, st->pinned[i], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes,
                                         0, NULL, NULL, &err);
        if (!st->host[i])
            return fcl_ring_fail((flashcl_status)err, "mapping the pinned staging failed: %d", err);
    }
    return FLASHCL_SUCCESS;
}

void fcl_ring_stage_destroy(flashcl_ring *ring, struct fcl_ring_stage *st)
{
    /* Requests still open after a failure are completed, never left to a freed buffer. */
    if (st->send != MPI_REQUEST_NULL)
        MPI_Wait(&st->send, MPI_STATUS_IGNORE);
    if (st->recv != MPI_REQUEST_NULL)
        MPI_Wait(&st->recv, MPI_STATUS_IGNORE);
    for (int i = 0; i < 2; i++) {
        if (st->uploaded[i])
            clWaitForEvents(1, &st->uploaded[i]);
        fcl_ring_release(&st->uploaded[i]);
        fcl_ring_release(&st->consumed[i]);
        if (st->host[i]) {
            cl_event unmapped = NULL;
            if (clEnqueueUnmapMemObject(ring->transfer, st->pinned[i], st->host[i], 0, NULL, &unmapped) == CL_SUCCESS) {
                clWaitForEvents(1, &unmapped);
                clReleaseEvent(unmapped);
            }
        }
        if (st->pinned[i])
            clReleaseMemObject(st->pinned[i]);
        if (st->device[i])
            clReleaseMemObject(st->device[i]);
    }
    memset(st, 0, sizeof(*st));
}

flashcl_status fcl_ring_stage_post(flashcl_ring *ring, struct fcl_ring_stage *st, int slot, size_t send_bytes,
                                   size_t recv_bytes)
{
    const int prev = (ring->rank + ring->ranks - 1) % ring->ranks, next = (ring->rank + 1) % ring->ranks;
    /* The receive overwrites host[1 - slot]: its last upload must have finished reading it. */
    if (st->uploaded[1 - slot])
        clWaitForEvents(1, &st->uploaded[1 - slot]);
    if (MPI_Irecv(st->host[1 - slot], (int)recv_bytes, MPI_BYTE, next, st->tag, ring->comm, &st->recv) != MPI_SUCCESS)
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "MPI_Irecv of %zu bytes from rank %d failed", recv_bytes, next);
    if (MPI_Isend(st->host[slot], (int)send_bytes, MPI_BYTE, prev, st->tag, ring->comm, &st->send) != MPI_SUCCESS)
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "MPI_Isend of %zu bytes to rank %d failed", send_bytes, prev);
    ring->stats.bytes_sent += (double)send_bytes;
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_ring_stage_complete(flashcl_ring *ring, struct fcl_ring_stage *st, int slot, size_t bytes,
                                       bool upload)
{
    const int in = 1 - slot;
    if (MPI_Wait(&st->recv, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "receiving a ring block failed");
    if (MPI_Wait(&st->send, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "sending a ring block failed");
    if (!upload)
        return FLASHCL_SUCCESS;
    cl_event after = st->consumed[in];
    cl_event done = NULL;
    const cl_int err = clEnqueueWriteBuffer(ring->transfer, st->device[in], CL_FALSE, 0, bytes, st->host[in],
                                            after ? 1 : 0, after ? &after : NULL, &done);
    if (err != CL_SUCCESS)
        return fcl_ring_fail((flashcl_status)err, "uploading a ring block of %zu bytes failed: %d", bytes, err);
    clFlush(ring->transfer);
    fcl_ring_release(&st->uploaded[in]);
    st->uploaded[in] = done;
    return FLASHCL_SUCCESS;
}

/* A step's first and last chunk-pair events -> compute time, and the device's idle gap before each later
 * step (the transfer it waited for). Releases the events. */
void fcl_ring_step_stats(flashcl_ring *ring, cl_event *first, cl_event *last, int steps)
{
    for (int t = 0; t < steps; t++) {
        ring->stats.compute_s += fcl_ring_event_span(first[t], last[t]);
        if (t > 0 && first[t] && last[t - 1]) {
            cl_ulong end = 0, start = 0;
            clGetEventProfilingInfo(last[t - 1], CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL);
            clGetEventProfilingInfo(first[t], CL_PROFILING_COMMAND_START, sizeof(start), &start, NULL);
            if (start > end)
                ring->stats.exposed_s += 1e-9 * (double)(start - end);
        }
    }
    for (int t = 0; t < steps; t++) {
        fcl_ring_release(&first[t]);
        fcl_ring_release(&last[t]);
    }
}
