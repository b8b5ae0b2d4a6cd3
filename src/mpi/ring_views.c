/* Copies between the caller's views and the ring's chunk-major buffers, and the backward's f32 sums. */
#include "ring_internal.h"

/* One kernel argument; the error names the kernel and the argument. */
#define ARG(kernel, index, type, value)                                                                      \
    do {                                                                                                     \
        type arg_ = (value);                                                                                 \
        const cl_int err_ = clSetKernelArg((kernel), (index), sizeof(type), &arg_);                          \
        if (err_ != CL_SUCCESS)                                                                              \
            return fcl_ring_fail((flashcl_status)err_, "%s: clSetKernelArg(%d) failed: %d", __func__, (index), \
                                 err_);                                                                      \
    } while (0)

static cl_ulong elems(size_t offset_bytes, size_t esize)
{
    return (cl_ulong)(offset_bytes / esize);
}

flashcl_status fcl_ring_gather(flashcl_ring *ring, const struct fcl_ring_shape *s, const flashcl_tensor *view,
                               int heads, cl_mem dst, size_t dst_off, size_t chunk_stride, cl_event *event)
{
    cl_kernel *k;
    flashcl_status st = fcl_ring_kernels(ring, s->dtype, &k);
    if (st != FLASHCL_SUCCESS)
        return st;
    const cl_kernel g = k[RK_GATHER];
    const size_t total = (size_t)s->local_chunks * (size_t)s->batch * (size_t)s->chunk_rows * (size_t)heads *
                         (size_t)s->dim;
    ARG(g, 0, cl_mem, view->mem);
    ARG(g, 1, cl_ulong, elems(view->offset, s->esize));
    ARG(g, 2, cl_ulong, view->stride_batch);
    ARG(g, 3, cl_ulong, view->stride_seq);
    ARG(g, 4, cl_ulong, view->stride_head);
    ARG(g, 5, cl_mem, dst);
    ARG(g, 6, cl_ulong, dst_off);
    ARG(g, 7, cl_ulong, chunk_stride);
    ARG(g, 8, cl_int, s->chunk_rows);
    ARG(g, 9, cl_int, heads);
    ARG(g, 10, cl_int, s->dim);
    ARG(g, 11, cl_int, s->batch);
    ARG(g, 12, cl_int, 0);
    ARG(g, 13, cl_ulong, total);
    return fcl_ring_enqueue_1d(ring->compute, g, total, 0, NULL, event, "ring_gather");
}

flashcl_status fcl_ring_gather_lse(flashcl_ring *ring, const struct fcl_ring_shape *s, const flashcl_tensor *lse,
                                   cl_mem dst, cl_event *event)
{
    cl_kernel *k;
    flashcl_status st = fcl_ring_kernels(ring, s->dtype, &k);
    if (st != FLASHCL_SUCCESS)
        return st;
    const cl_kernel g = k[RK_GATHER_LSE];
    const size_t total = (size_t)s->local_chunks * (size_t)s->batch * (size_t)s->heads_q * (size_t)s->chunk_rows;
    ARG(g, 0, cl_mem, lse->mem);
    ARG(g, 1, cl_ulong, elems(lse->offset, sizeof(float)));
    ARG(g, 2, cl_ulong, lse->stride_batch);
    ARG(g, 3, cl_ulong, lse->stride_seq);
    ARG(g, 4, cl_ulong, lse->stride_head);
    ARG(g, 5, cl_mem, dst);
    ARG(g, 6, cl_int, s->chunk_rows);
    ARG(g, 7, cl_int, s->heads_q);
    ARG(g, 8, cl_int, s->batch);
    ARG(g, 9, cl_ulong, total);
    return fcl_ring_enqueue_1d(ring->compute, g, total, 0, NULL, event, "ring_gather_lse");
}

flashcl_status fcl_ring_store(flashcl_ring *ring, const struct fcl_ring_shape *s, cl_mem src, size_t src_off,
                              size_t chunk_stride, const flashcl_tensor *view, int heads, cl_uint n_wait,
                              const cl_event *wait, cl_event *event)
{
    cl_kernel *k;
    flashcl_status st = fcl_ring_kernels(ring, s->dtype, &k);
    if (st != FLASHCL_SUCCESS)
        return st;
    const cl_kernel g = k[RK_STORE];
    const size_t total = (size_t)s->local_chunks * (size_t)s->batch * (size_t)s->chunk_rows * (size_t)heads *
                         (size_t)s->dim;
    ARG(g, 0, cl_mem, src);
    ARG(g, 1, cl_ulong, src_off);
    ARG(g, 2, cl_ulong, chunk_stride);
    ARG(g, 3, cl_mem, view->mem);
    ARG(g, 4, cl_ulong, elems(view->offset, s->esize));
    ARG(g, 5, cl_ulong, view->stride_batch);
    ARG(g, 6, cl_ulong, view->stride_seq);
    ARG(g, 7, cl_ulong, view->stride_head);
    ARG(g, 8, cl_int, s->chunk_rows);
    ARG(g, 9, cl_int, heads);
    ARG(g, 10, cl_int, s->dim);
    ARG(g, 11, cl_int, s->batch);
    ARG(g, 12, cl_ulong, total);
    return fcl_ring_enqueue_1d(ring->compute, g, total, n_wait, wait, event, "ring_store");
}

flashcl_status fcl_ring_accumulate(flashcl_ring *ring, const struct fcl_ring_shape *s, cl_mem acc, size_t acc_off,
                                   cl_mem part, size_t n)
{
    cl_kernel *k;
    flashcl_status st = fcl_ring_kernels(ring, s->dtype, &k);
    if (st != FLASHCL_SUCCESS)
        return st;
    const cl_kernel a = k[RK_ACCUMULATE];
    ARG(a, 0, cl_mem, acc);
    ARG(a, 1, cl_ulong, acc_off);
    ARG(a, 2, cl_mem, part);
    ARG(a, 3, cl_ulong, n);
    return fcl_ring_enqueue_1d(ring->compute, a, n, 0, NULL, NULL, "ring_accumulate");
}
