/* The ring forward: K/V blocks travel the ring; every (query chunk, key chunk) pair is one
 * flashcl_forward call of the same shape on any rank count, writing a partial O and LSE to a slot of its
 * own; each query chunk's partials are merged in ascending key-chunk order at the end (docs/ring.md). */
#include <stdlib.h>
#include <string.h>

#include "ring_internal.h"

struct forward_run {
    struct fcl_ring_shape s;
    cl_mem q;                   /* this rank's Q, chunk-major */
    cl_mem *part, *part_lse;    /* per local query chunk: a slot per key chunk it sees */
    struct fcl_ring_stage kv;   /* [chunk][K, V] blocks */
    cl_event *first, *last;     /* per step: its first and last pair call */
};

/* Key chunks query chunk gi sees: all, or those up to its own when causal. */
static int visible_chunks(const struct fcl_ring_shape *s, int gi)
{
    return s->causal ? gi + 1 : s->chunks;
}

/* Whether this rank needs the late (zigzag) half of the block it holds at step t: the late half of
 * rank s's chunks lies after all of rank r's queries once the ring has wrapped (s < r). */
static bool late_half_needed(const struct fcl_ring_shape *s, int rank, int ranks, int t)
{
    return !s->causal || rank + t < ranks;
}

static size_t block_bytes(const struct fcl_ring_shape *s, bool late_half)
{
    const size_t chunks = late_half ? (size_t)s->local_chunks : (size_t)s->local_chunks / 2;
    return chunks * 2 * s->kv_chunk_elems * s->esize;
}

static flashcl_status allocate(flashcl_ring *ring, struct forward_run *run)
{
    const struct fcl_ring_shape *s = &run->s;
    const int G = s->local_chunks;
    cl_int err;
    run->part = calloc((size_t)G, sizeof(cl_mem));
    run->part_lse = calloc((size_t)G, sizeof(cl_mem));
    run->first = calloc((size_t)ring->ranks, sizeof(cl_event));
    run->last = calloc((size_t)ring->ranks, sizeof(cl_event));
    if (!run->part || !run->part_lse || !run->first || !run->last)
        return fcl_ring_fail(FLASHCL_OUT_OF_HOST_MEMORY, "no host memory for the ring's bookkeeping");
    run->q = clCreateBuffer(ring->cl, CL_MEM_READ_WRITE, (size_t)G * s->q_chunk_elems * s->esize, NULL, &err);
    if (!run->q)
        return fcl_ring_fail((flashcl_status)err, "allocating the chunk-major Q failed: %d", err);
    for (int i = 0; i < G; i++) {
        const int gi = flashcl_ring_global_chunk(s->chunks, ring->ranks, ring->rank, s->causal, i);
        const size_t slots = (size_t)visible_chunks(s, gi);
        run->part[i] = clCreateBuffer(ring->cl, CL_MEM_READ_WRITE, slots * s->q_chunk_elems * s->esize, NULL, &err);
        if (run->part[i])
            run->part_lse[i] = clCreateBuffer(ring->cl, CL_MEM_READ_WRITE,
                                              slots * (size_t)s->batch * s->heads_q * s->chunk_rows * sizeof(float),
                                              NULL, &err);
        if (!run->part[i] || !run->part_lse[i])
            return fcl_ring_fail((flashcl_status)err, "allocating the partials of query chunk %d failed: %d", gi,
                                 err);
    }
    return fcl_ring_stage_create(ring, &run->kv, block_bytes(s, true), 1);
}

static void release(flashcl_ring *ring, struct forward_run *run)
{
    fcl_ring_stage_destroy(ring, &run->kv);
    for (int i = 0; run->part && i < run->s.local_chunks; i++) {
        if (run->part[i])
            clReleaseMemObject(run->part[i]);
        if (run->part_lse[i])
            clReleaseMemObject(run->part_lse[i]);
    }
    if (run->first)
        fcl_ring_step_stats(ring, run->first, run->last, ring->ranks);
    free(run->part);
    free(run->part_lse);
    free(run->first);
    free(run->last);
    if (run->q)
        clReleaseMemObject(run->q);
}

/* The step's pair calls against the block in kv.device[slot], whose chunks are rank src's. */
static flashcl_status compute_step(flashcl_ring *ring, struct forward_run *run, const struct flashcl_attention *attn,
                                   int t, int slot)
{
    const struct fcl_ring_shape *s = &run->s;
    const int src = (ring->rank + t) % ring->ranks;
    if (ring->rank == fcl_ring_test_fail_rank && t == fcl_ring_test_fail_step)
        return fcl_ring_fail(FLASHCL_OUT_OF_RESOURCES, "test hook: rank %d fails its step %d", ring->rank, t);
    if (t > 0) {
        const cl_int err = clEnqueueBarrierWithWaitList(ring->compute, 1, &run->kv.uploaded[slot], NULL);
        if (err != CL_SUCCESS)
            return fcl_ring_fail((flashcl_status)err, "clEnqueueBarrierWithWaitList failed: %d", err);
    }
    const size_t lse_slot = (size_t)s->batch * s->heads_q * s->chunk_rows;
    for (int i = 0; i < s->local_chunks; i++) {
        const int gi = flashcl_ring_global_chunk(s->chunks, ring->ranks, ring->rank, s->causal, i);
        for (int j = 0; j < s->local_chunks; j++) {
            const int gj = flashcl_ring_global_chunk(s->chunks, ring->ranks, src, s->causal, j);
            if (s->causal && gj > gi)
                continue;  /* every key after every query */
            struct flashcl_attention pair = *attn;
            pair.seq_q = pair.seq_kv = s->chunk_rows;
            pair.mask = s->causal && gj == gi ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
            pair.q = flashcl_tensor_bnhd(run->q, s->dtype, s->chunk_rows, s->heads_q, s->dim);
            pair.q.offset = (size_t)i * s->q_chunk_elems * s->esize;
            pair.k = flashcl_tensor_bnhd(run->kv.device[slot], s->dtype, s->chunk_rows, s->heads_kv, s->dim);
            pair.k.offset = (size_t)(2 * j) * s->kv_chunk_elems * s->esize;
            pair.v = pair.k;
            pair.v.offset += s->kv_chunk_elems * s->esize;
            pair.o = flashcl_tensor_bnhd(run->part[i], s->dtype, s->chunk_rows, s->heads_q, s->dim);
            pair.o.offset = (size_t)gj * s->q_chunk_elems * s->esize;
            pair.lse = flashcl_tensor_lse(run->part_lse[i], s->chunk_rows, s->heads_q);
            pair.lse.offset = (size_t)gj * lse_slot * sizeof(float);
            cl_event done = NULL;
            const flashcl_status st = flashcl_forward(ring->ctx, &pair, ring->compute, 0, NULL, &done);
            if (st != FLASHCL_SUCCESS)
                return fcl_ring_fail_core(st, "flashcl_forward of a chunk pair");
            ring->stats.pair_calls++;
            if (!run->first[t])
                run->first[t] = done;
            else
                fcl_ring_release(&run->last[t]);
            if (done != run->first[t])
                run->last[t] = done;
        }
    }
    if (run->first[t] && !run->last[t]) {
        run->last[t] = run->first[t];
        clRetainEvent(run->last[t]);
    }
    fcl_ring_release(&run->kv.consumed[slot]);
    const cl_int err = clEnqueueMarkerWithWaitList(ring->compute, 0, NULL, &run->kv.consumed[slot]);
    clFlush(ring->compute);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : fcl_ring_fail((flashcl_status)err, "clEnqueueMarkerWithWaitList failed: %d", err);
}

static flashcl_status merge(flashcl_ring *ring, struct forward_run *run, const struct flashcl_attention *attn)
{
    const struct fcl_ring_shape *s = &run->s;
    cl_kernel *k;
    flashcl_status st = fcl_ring_kernels(ring, s->dtype, &k);
    if (st != FLASHCL_SUCCESS)
        return st;
    const cl_kernel m = k[RK_MERGE];
    const size_t lse_slot = (size_t)s->batch * s->heads_q * s->chunk_rows, esize = s->esize;
    const int has_lse = attn->lse.mem != NULL;
    cl_event first = NULL, last = NULL;
    for (int i = 0; i < s->local_chunks && st == FLASHCL_SUCCESS; i++) {
        const int gi = flashcl_ring_global_chunk(s->chunks, ring->ranks, ring->rank, s->causal, i);
        const cl_int n_parts = visible_chunks(s, gi), rows = s->chunk_rows, heads = s->heads_q, batch = s->batch;
        const cl_int row0 = i * s->chunk_rows, dim = s->dim;
        const cl_ulong part_stride = s->q_chunk_elems, lse_stride = lse_slot;
        const cl_ulong o_off = attn->o.offset / esize, o_sb = attn->o.stride_batch, o_ss = attn->o.stride_seq,
                       o_sh = attn->o.stride_head;
        const cl_mem lse_mem = has_lse ? attn->lse.mem : run->part_lse[i];  /* any buffer: not written */
        const cl_ulong l_off = attn->lse.offset / sizeof(float), l_sb = attn->lse.stride_batch,
                       l_ss = attn->lse.stride_seq, l_sh = attn->lse.stride_head;
        const size_t sizes[] = {sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_int), sizeof(cl_ulong), sizeof(cl_ulong),
                                sizeof(cl_int), sizeof(cl_int), sizeof(cl_int), sizeof(cl_int), sizeof(cl_mem),
                                sizeof(cl_ulong), sizeof(cl_ulong), sizeof(cl_ulong), sizeof(cl_ulong),
                                sizeof(cl_mem), sizeof(cl_ulong), sizeof(cl_ulong), sizeof(cl_ulong),
                                sizeof(cl_ulong), sizeof(cl_int), sizeof(cl_int)};
        const void *const values[] = {&run->part[i], &run->part_lse[i], &n_parts, &part_stride, &lse_stride, &rows,
                                      &heads, &batch, &row0, &attn->o.mem, &o_off, &o_sb, &o_ss, &o_sh, &lse_mem,
                                      &l_off, &l_sb, &l_ss, &l_sh, &has_lse, &dim};
        st = fcl_ring_set_args(m, 21, sizes, values, "ring_merge");
        if (st != FLASHCL_SUCCESS)
            break;
        const size_t local[3] = {64, 1, 1};
        const size_t global[3] = {((size_t)rows * (size_t)dim + 63) / 64 * 64, (size_t)heads, (size_t)batch};
        cl_event done = NULL;
        const cl_int err = clEnqueueNDRangeKernel(ring->compute, m, 3, NULL, global, local, 0, NULL, &done);
        if (err != CL_SUCCESS)
            st = fcl_ring_fail((flashcl_status)err, "ring_merge: clEnqueueNDRangeKernel failed: %d", err);
        else if (!first)
            first = done;
        else {
            fcl_ring_release(&last);
            last = done;
        }
    }
    if (st == FLASHCL_SUCCESS) {
        const cl_int err = clFinish(ring->compute);
        if (err != CL_SUCCESS)
            st = fcl_ring_fail((flashcl_status)err, "the ring's work failed on the device: %d", err);
        cl_int exec = CL_COMPLETE;
        if (st == FLASHCL_SUCCESS && first)
            clGetEventInfo(last ? last : first, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec, NULL);
        if (exec < 0)
            st = fcl_ring_fail((flashcl_status)exec, "the ring's merge failed on the device: %d", exec);
        ring->stats.merge_s += fcl_ring_event_span(first, last ? last : first);
    }
    fcl_ring_release(&first);
    fcl_ring_release(&last);
    return st;
}

/* Step 0's block from this rank's own K and V; with other ranks, its host copy to send. */
static flashcl_status own_block(flashcl_ring *ring, struct forward_run *run, const struct flashcl_attention *attn,
                                cl_event *read)
{
    const struct fcl_ring_shape *s = &run->s;
    flashcl_status st = fcl_ring_gather(ring, s, &attn->q, s->heads_q, run->q, 0, s->q_chunk_elems, NULL);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_gather(ring, s, &attn->k, s->heads_kv, run->kv.device[0], 0, 2 * s->kv_chunk_elems, NULL);
    cl_event gathered = NULL;
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_gather(ring, s, &attn->v, s->heads_kv, run->kv.device[0], s->kv_chunk_elems,
                             2 * s->kv_chunk_elems, &gathered);
    if (st == FLASHCL_SUCCESS && ring->ranks > 1) {
        const cl_int err = clEnqueueReadBuffer(ring->transfer, run->kv.device[0], CL_FALSE, 0, run->kv.bytes,
                                               run->kv.host[0], 1, &gathered, read);
        if (err != CL_SUCCESS)
            st = fcl_ring_fail((flashcl_status)err, "reading the own K/V block to the host failed: %d", err);
        clFlush(ring->transfer);
    }
    fcl_ring_release(&gathered);
    return st;
}

/* The ring itself. A local failure stops the enqueueing but never the messages: every rank posts and
 * completes the same sends and receives, so the others finish and learn of it at the end. */
static flashcl_status ring_steps(flashcl_ring *ring, struct forward_run *run, const struct flashcl_attention *attn)
{
    const struct fcl_ring_shape *s = &run->s;
    const int R = ring->ranks, r = ring->rank;
    cl_event read = NULL;
    flashcl_status local = own_block(ring, run, attn, &read);
    for (int t = 0; t < R; t++) {
        const int slot = t & 1;
        if (local == FLASHCL_SUCCESS)
            local = compute_step(ring, run, attn, t, slot);
        if (t + 1 == R)
            break;
        if (read) {
            clWaitForEvents(1, &read);  /* the own block is on the host (garbage after a failure: unused) */
            fcl_ring_release(&read);
        }
        const int prev = (r + R - 1) % R;
        const double posted = fcl_ring_now();
        flashcl_status st = fcl_ring_stage_post(ring, &run->kv, slot, block_bytes(s, late_half_needed(s, prev, R, t + 1)),
                                                block_bytes(s, late_half_needed(s, r, R, t + 1)));
        if (st == FLASHCL_SUCCESS)
            st = fcl_ring_stage_complete(ring, &run->kv, slot, block_bytes(s, late_half_needed(s, r, R, t + 1)),
                                         local == FLASHCL_SUCCESS);
        ring->stats.transfer_s += fcl_ring_now() - posted;
        if (st == FLASHCL_RING_ERROR_MPI)
            return st;  /* the ring itself is broken: nothing left to keep in step */
        if (local == FLASHCL_SUCCESS)
            local = st;
    }
    fcl_ring_release(&read);
    return local == FLASHCL_SUCCESS ? merge(ring, run, attn) : local;
}

static flashcl_status check_local(flashcl_ring *ring, const struct flashcl_attention *attn, cl_uint n_wait,
                                  const cl_event *wait)
{
    flashcl_status st = fcl_ring_check_attention(attn);
    if (st != FLASHCL_SUCCESS)
        return st;
    if (n_wait && !wait)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "wait_list is NULL with %u events", n_wait);
    struct flashcl_tile tile;
    st = flashcl_forward_config(ring->ctx, attn, &tile);  /* every view, dtype and alias, as a forward checks */
    return st == FLASHCL_SUCCESS ? st : fcl_ring_fail_core(st, "attn");
}

flashcl_status flashcl_ring_forward(flashcl_ring *ring, const struct flashcl_attention *attn, cl_uint num_wait_events,
                                    const cl_event *wait_list)
{
    fcl_ring_clear_error();
    if (!ring)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "ring is NULL");
    const double start = fcl_ring_now();
    memset(&ring->stats, 0, sizeof(ring->stats));
    struct forward_run run = {0};
    flashcl_status st = fcl_ring_agree(ring, check_local(ring, attn, num_wait_events, wait_list), attn, &run.s);
    if (st != FLASHCL_SUCCESS)
        return st;
    ring->stats.steps = ring->ranks;
    ring->stats.chunks = run.s.chunks;
    flashcl_status local = allocate(ring, &run);
    if (local == FLASHCL_SUCCESS)
        local = fcl_ring_kernels(ring, run.s.dtype, &(cl_kernel *){NULL});
    if (local == FLASHCL_SUCCESS && num_wait_events) {
        const cl_int err = clWaitForEvents(num_wait_events, wait_list);
        if (err != CL_SUCCESS)
            local = fcl_ring_fail((flashcl_status)err, "waiting for wait_list failed: %d", err);
    }
    st = fcl_ring_agree_outcome(ring, local);  /* every rank has its buffers before any message */
    if (st == FLASHCL_SUCCESS) {
        local = ring_steps(ring, &run, attn);
        if (local == FLASHCL_RING_ERROR_MPI) {
            release(ring, &run);
            return local;
        }
        clFinish(ring->compute);
        clFinish(ring->transfer);
        st = fcl_ring_agree_outcome(ring, local);
    }
    release(ring, &run);
    ring->stats.wall_s = fcl_ring_now() - start;
    return st;
}
