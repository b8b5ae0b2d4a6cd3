/* The ring backward: K/V blocks travel the ring as in the forward, and with them f32 sums of their
 * dK/dV, one step behind: at each step a rank computes its queries' contributions to the block it holds
 * into a fresh f32 sum while the sum so far arrives from the next rank, adds it, and passes it on; after
 * the last step the sums reach their own rank. dQ accumulates locally. Every chunk pair is one
 * flashcl_backward call with the forward's global LSE, so its P is the whole sequence's softmax. */
#include <stdlib.h>
#include <string.h>

#include "ring_internal.h"

struct backward_run {
    struct fcl_ring_shape s;
    cl_mem q, o, d_o, lse;       /* this rank's rows, chunk-major */
    cl_mem dq_sum;               /* f32, chunk-major */
    cl_mem dq_part, dk_part, dv_part, workspace;  /* one pair call's outputs and scratch */
    cl_mem dkv_step[2];          /* f32 [chunk][dK, dV]: a step's contributions, alternate steps */
    struct fcl_ring_stage kv;    /* [chunk][K, V] blocks */
    struct fcl_ring_stage dkv;   /* f32 sums arriving (device[0], host[0]) and leaving (host[1]) */
    cl_event dkv_read;           /* the last step's sums on the host, to be sent */
    cl_event *first, *last;
};

static size_t kv_bytes(const struct fcl_ring_shape *s, bool late_half)
{
    const size_t chunks = late_half ? (size_t)s->local_chunks : (size_t)s->local_chunks / 2;
    return chunks * 2 * s->kv_chunk_elems * s->esize;
}

static size_t dkv_elems(const struct fcl_ring_shape *s)
{
    return (size_t)s->local_chunks * 2 * s->kv_chunk_elems;
}

static cl_mem buffer(flashcl_ring *ring, size_t bytes, flashcl_status *st, const char *what)
{
    cl_int err = CL_SUCCESS;
    cl_mem mem = *st == FLASHCL_SUCCESS ? clCreateBuffer(ring->cl, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err)
                                        : NULL;
    if (*st == FLASHCL_SUCCESS && !mem)
        *st = fcl_ring_fail((flashcl_status)err, "allocating %s (%zu bytes) failed: %d", what, bytes, err);
    return mem;
}

/* The workspace of a pair call: the larger of the masked and the unmasked one. */
static flashcl_status pair_workspace(flashcl_ring *ring, const struct flashcl_attention *attn,
                                     const struct flashcl_attention_grad *grad, const struct fcl_ring_shape *s,
                                     size_t *bytes)
{
    struct flashcl_attention pair = *attn;
    pair.batch = s->batch;
    pair.seq_q = pair.seq_kv = s->chunk_rows;
    *bytes = 0;
    for (int masked = 0; masked <= (int)s->causal; masked++) {
        pair.mask = masked ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
        size_t b = 0;
        const flashcl_status st = flashcl_backward_workspace_size(ring->ctx, &pair, grad, &b);
        if (st != FLASHCL_SUCCESS)
            return fcl_ring_fail_core(st, "flashcl_backward_workspace_size of a chunk pair");
        *bytes = b > *bytes ? b : *bytes;
    }
    return FLASHCL_SUCCESS;
}

static flashcl_status allocate(flashcl_ring *ring, struct backward_run *run, const struct flashcl_attention *attn,
                               const struct flashcl_attention_grad *grad)
{
    const struct fcl_ring_shape *s = &run->s;
    const size_t G = (size_t)s->local_chunks, qb = s->q_chunk_elems * s->esize;
    flashcl_status st = FLASHCL_SUCCESS;
    run->first = calloc((size_t)ring->ranks, sizeof(cl_event));
    run->last = calloc((size_t)ring->ranks, sizeof(cl_event));
    if (!run->first || !run->last)
        return fcl_ring_fail(FLASHCL_OUT_OF_HOST_MEMORY, "no host memory for the ring's bookkeeping");
    run->q = buffer(ring, G * qb, &st, "the chunk-major Q");
    run->o = buffer(ring, G * qb, &st, "the chunk-major O");
    run->d_o = buffer(ring, G * qb, &st, "the chunk-major dO");
    run->lse = buffer(ring, G * s->batch * s->heads_q * s->chunk_rows * sizeof(float), &st, "the chunk-major LSE");
    run->dq_sum = buffer(ring, G * s->q_chunk_elems * sizeof(float), &st, "dQ's f32 sums");
    run->dq_part = buffer(ring, qb, &st, "a pair's dQ");
    run->dk_part = buffer(ring, s->kv_chunk_elems * s->esize, &st, "a pair's dK");
    run->dv_part = buffer(ring, s->kv_chunk_elems * s->esize, &st, "a pair's dV");
    for (int i = 0; i < 2; i++)
        run->dkv_step[i] = buffer(ring, dkv_elems(s) * sizeof(float), &st, "a step's dK/dV sums");
    size_t ws = 0;
    if (st == FLASHCL_SUCCESS)
        st = pair_workspace(ring, attn, grad, s, &ws);
    if (ws)
        run->workspace = buffer(ring, ws, &st, "the backward's workspace");
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_stage_create(ring, &run->kv, kv_bytes(s, true), 2);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_stage_create(ring, &run->dkv, dkv_elems(s) * sizeof(float), 3);
    return st;
}

static void release_mem(cl_mem *mem)
{
    if (*mem)
        clReleaseMemObject(*mem);
    *mem = NULL;
}

static void release(flashcl_ring *ring, struct backward_run *run)
{
    fcl_ring_stage_destroy(ring, &run->kv);
    fcl_ring_stage_destroy(ring, &run->dkv);
    fcl_ring_release(&run->dkv_read);
    if (run->first)
        fcl_ring_step_stats(ring, run->first, run->last, ring->ranks);
    free(run->first);
    free(run->last);
    cl_mem *mems[] = {&run->q, &run->o, &run->d_o, &run->lse, &run->dq_sum, &run->dq_part, &run->dk_part,
                      &run->dv_part, &run->workspace, &run->dkv_step[0], &run->dkv_step[1]};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++)
        release_mem(mems[i]);
}

static flashcl_status fill_zero(flashcl_ring *ring, cl_mem mem, size_t bytes)
{
    const float zero = 0.0f;
    const cl_int err = clEnqueueFillBuffer(ring->compute, mem, &zero, sizeof(zero), 0, bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : fcl_ring_fail((flashcl_status)err, "clEnqueueFillBuffer failed: %d", err);
}

static flashcl_status pair_call(flashcl_ring *ring, struct backward_run *run, const struct flashcl_attention *attn,
                                int t, int slot, int i, int gi, int j, int gj)
{
    const struct fcl_ring_shape *s = &run->s;
    const size_t qb = s->q_chunk_elems * s->esize, kvb = s->kv_chunk_elems * s->esize;
    struct flashcl_attention pair = *attn;
    pair.seq_q = pair.seq_kv = s->chunk_rows;
    pair.mask = s->causal && gj == gi ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
    pair.q = flashcl_tensor_bnhd(run->q, s->dtype, s->chunk_rows, s->heads_q, s->dim);
    pair.q.offset = (size_t)i * qb;
    pair.o = pair.q;
    pair.o.mem = run->o;
    pair.k = flashcl_tensor_bnhd(run->kv.device[slot], s->dtype, s->chunk_rows, s->heads_kv, s->dim);
    pair.k.offset = (size_t)(2 * j) * kvb;
    pair.v = pair.k;
    pair.v.offset += kvb;
    pair.lse = flashcl_tensor_lse(run->lse, s->chunk_rows, s->heads_q);
    pair.lse.offset = (size_t)i * s->batch * s->heads_q * s->chunk_rows * sizeof(float);
    struct flashcl_attention_grad g = {0};
    g.d_o = pair.q;
    g.d_o.mem = run->d_o;
    g.d_q = flashcl_tensor_bnhd(run->dq_part, s->dtype, s->chunk_rows, s->heads_q, s->dim);
    g.d_k = flashcl_tensor_bnhd(run->dk_part, s->dtype, s->chunk_rows, s->heads_kv, s->dim);
    g.d_v = flashcl_tensor_bnhd(run->dv_part, s->dtype, s->chunk_rows, s->heads_kv, s->dim);
    cl_event done = NULL;
    flashcl_status st = flashcl_backward(ring->ctx, &pair, &g, run->workspace, ring->compute, 0, NULL, &done);
    if (st != FLASHCL_SUCCESS)
        return fcl_ring_fail_core(st, "flashcl_backward of a chunk pair");
    ring->stats.pair_calls++;
    if (!run->first[t])
        run->first[t] = done;
    else {
        fcl_ring_release(&run->last[t]);
        run->last[t] = done;
    }
    st = fcl_ring_accumulate(ring, s, run->dq_sum, (size_t)i * s->q_chunk_elems, run->dq_part, s->q_chunk_elems);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_accumulate(ring, s, run->dkv_step[t & 1], (size_t)(2 * j) * s->kv_chunk_elems, run->dk_part,
                                 s->kv_chunk_elems);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_accumulate(ring, s, run->dkv_step[t & 1], (size_t)(2 * j + 1) * s->kv_chunk_elems,
                                 run->dv_part, s->kv_chunk_elems);
    return st;
}

static flashcl_status compute_step(flashcl_ring *ring, struct backward_run *run, const struct flashcl_attention *attn,
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
    flashcl_status st = fill_zero(ring, run->dkv_step[t & 1], dkv_elems(s) * sizeof(float));
    for (int i = 0; i < s->local_chunks && st == FLASHCL_SUCCESS; i++) {
        const int gi = flashcl_ring_global_chunk(s->chunks, ring->ranks, ring->rank, s->causal, i);
        for (int j = 0; j < s->local_chunks && st == FLASHCL_SUCCESS; j++) {
            const int gj = flashcl_ring_global_chunk(s->chunks, ring->ranks, src, s->causal, j);
            if (!s->causal || gj <= gi)
                st = pair_call(ring, run, attn, t, slot, i, gi, j, gj);
        }
    }
    if (st != FLASHCL_SUCCESS)
        return st;
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

/* After step t's pairs: the sums so far (from the next rank, t > 0) added to the step's, and the total
 * read to the host to be sent on (enqueued; run->dkv_read completes with it). */
static flashcl_status finish_step_sums(flashcl_ring *ring, struct backward_run *run, int t, bool arrived)
{
    const struct fcl_ring_shape *s = &run->s;
    cl_mem step = run->dkv_step[t & 1];
    cl_kernel *k;
    flashcl_status st = fcl_ring_kernels(ring, s->dtype, &k);
    if (st != FLASHCL_SUCCESS)
        return st;
    cl_event added = NULL;
    if (arrived) {
        const cl_ulong n = dkv_elems(s);
        const size_t sizes[] = {sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_ulong)};
        const void *const values[] = {&step, &run->dkv.device[1], &n};
        st = fcl_ring_set_args(k[RK_ADD], 3, sizes, values, "ring_add");
        if (st == FLASHCL_SUCCESS)
            st = fcl_ring_enqueue_1d(ring->compute, k[RK_ADD], n, 1, &run->dkv.uploaded[1], &added, "ring_add");
    } else {
        const cl_int err = clEnqueueMarkerWithWaitList(ring->compute, 0, NULL, &added);
        if (err != CL_SUCCESS)
            st = fcl_ring_fail((flashcl_status)err, "clEnqueueMarkerWithWaitList failed: %d", err);
    }
    clFlush(ring->compute);
    if (st != FLASHCL_SUCCESS)
        return st;
    fcl_ring_release(&run->dkv_read);
    const cl_int err = clEnqueueReadBuffer(ring->transfer, step, CL_FALSE, 0, dkv_elems(s) * sizeof(float),
                                           run->dkv.host[1], 1, &added, &run->dkv_read);
    clFlush(ring->transfer);
    fcl_ring_release(&added);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : fcl_ring_fail((flashcl_status)err, "reading the dK/dV sums to the host failed: %d", err);
}

static flashcl_status gather_inputs(flashcl_ring *ring, struct backward_run *run, const struct flashcl_attention *attn,
                                    const struct flashcl_attention_grad *grad, cl_event *read)
{
    const struct fcl_ring_shape *s = &run->s;
    const size_t qe = s->q_chunk_elems, kve = s->kv_chunk_elems;
    flashcl_status st = fcl_ring_gather(ring, s, &attn->q, s->heads_q, run->q, 0, qe, NULL);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_gather(ring, s, &attn->o, s->heads_q, run->o, 0, qe, NULL);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_gather(ring, s, &grad->d_o, s->heads_q, run->d_o, 0, qe, NULL);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_gather_lse(ring, s, &attn->lse, run->lse, NULL);
    if (st == FLASHCL_SUCCESS)
        st = fill_zero(ring, run->dq_sum, (size_t)s->local_chunks * qe * sizeof(float));
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_gather(ring, s, &attn->k, s->heads_kv, run->kv.device[0], 0, 2 * kve, NULL);
    cl_event gathered = NULL;
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_gather(ring, s, &attn->v, s->heads_kv, run->kv.device[0], kve, 2 * kve, &gathered);
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

/* Sends the step's sums (once read) to the previous rank, and posts the receive of the next sums. */
static flashcl_status pass_sums(flashcl_ring *ring, struct backward_run *run)
{
    const struct fcl_ring_shape *s = &run->s;
    if (run->dkv_read)
        clWaitForEvents(1, &run->dkv_read);
    if (run->dkv.uploaded[1])
        clWaitForEvents(1, &run->dkv.uploaded[1]);  /* host[0] is received into again */
    /* host[1] is sent from, host[0] received into: fcl_ring_stage_post with slot 1. */
    return fcl_ring_stage_post(ring, &run->dkv, 1, dkv_elems(s) * sizeof(float), dkv_elems(s) * sizeof(float));
}

/* The sums arrived from the next rank (host[0]) onto the device (device[1]) for the add. */
static flashcl_status land_sums(flashcl_ring *ring, struct backward_run *run, bool upload)
{
    struct fcl_ring_stage *d = &run->dkv;
    if (MPI_Wait(&d->recv, MPI_STATUS_IGNORE) != MPI_SUCCESS || MPI_Wait(&d->send, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return fcl_ring_fail(FLASHCL_RING_ERROR_MPI, "passing the dK/dV sums failed");
    if (!upload)
        return FLASHCL_SUCCESS;
    fcl_ring_release(&d->uploaded[1]);
    const cl_int err = clEnqueueWriteBuffer(ring->transfer, d->device[1], CL_FALSE, 0, d->bytes, d->host[0], 0, NULL,
                                            &d->uploaded[1]);
    clFlush(ring->transfer);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS
                             : fcl_ring_fail((flashcl_status)err, "uploading the dK/dV sums failed: %d", err);
}

static flashcl_status store_gradients(flashcl_ring *ring, struct backward_run *run,
                                      const struct flashcl_attention_grad *grad, cl_mem dkv, cl_uint n_wait,
                                      const cl_event *wait)
{
    const struct fcl_ring_shape *s = &run->s;
    const size_t kve = s->kv_chunk_elems;
    flashcl_status st = fcl_ring_store(ring, s, run->dq_sum, 0, s->q_chunk_elems, &grad->d_q, s->heads_q, 0, NULL, NULL);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_store(ring, s, dkv, 0, 2 * kve, &grad->d_k, s->heads_kv, n_wait, wait, NULL);
    if (st == FLASHCL_SUCCESS)
        st = fcl_ring_store(ring, s, dkv, kve, 2 * kve, &grad->d_v, s->heads_kv, 0, NULL, NULL);
    if (st == FLASHCL_SUCCESS) {
        const cl_int err = clFinish(ring->compute);
        if (err != CL_SUCCESS)
            st = fcl_ring_fail((flashcl_status)err, "the ring's work failed on the device: %d", err);
    }
    return st;
}

/* Per step t: the pairs against the block held; the sums of step t - 1 sent on and those of this step's
 * block from the ranks before received (both while step t computes); the next K/V block; then this
 * step's sums plus the received ones, read to the host. A local failure stops the enqueueing, never the
 * messages. */
static flashcl_status ring_steps(flashcl_ring *ring, struct backward_run *run, const struct flashcl_attention *attn,
                                 const struct flashcl_attention_grad *grad)
{
    const struct fcl_ring_shape *s = &run->s;
    const int R = ring->ranks, r = ring->rank, prev = (r + R - 1) % R;
    cl_event read = NULL;
    flashcl_status local = gather_inputs(ring, run, attn, grad, &read);
    for (int t = 0; t < R; t++) {
        const int slot = t & 1;
        if (local == FLASHCL_SUCCESS)
            local = compute_step(ring, run, attn, t, slot);
        const double posted = fcl_ring_now();
        flashcl_status st = t > 0 ? pass_sums(ring, run) : FLASHCL_SUCCESS;
        if (st == FLASHCL_SUCCESS && t + 1 < R) {
            if (read) {
                clWaitForEvents(1, &read);
                fcl_ring_release(&read);
            }
            const bool late_prev = !s->causal || prev + t + 1 < R, late_mine = !s->causal || r + t + 1 < R;
            st = fcl_ring_stage_post(ring, &run->kv, slot, kv_bytes(s, late_prev), kv_bytes(s, late_mine));
            if (st == FLASHCL_SUCCESS)
                st = fcl_ring_stage_complete(ring, &run->kv, slot, kv_bytes(s, late_mine), local == FLASHCL_SUCCESS);
        }
        if (st == FLASHCL_SUCCESS && t > 0)
            st = land_sums(ring, run, local == FLASHCL_SUCCESS);
        ring->stats.transfer_s += fcl_ring_now() - posted;
        if (st == FLASHCL_RING_ERROR_MPI)
            return st;
        if (local == FLASHCL_SUCCESS)
            local = st;
        if (local == FLASHCL_SUCCESS && R > 1)
            local = finish_step_sums(ring, run, t, t > 0);
    }
    fcl_ring_release(&read);
    if (R == 1)
        return local == FLASHCL_SUCCESS ? store_gradients(ring, run, grad, run->dkv_step[0], 0, NULL) : local;
    /* The last step's sums go to their own rank (the previous one); this rank's come from the next. */
    flashcl_status st = pass_sums(ring, run);
    if (st == FLASHCL_SUCCESS)
        st = land_sums(ring, run, local == FLASHCL_SUCCESS);
    if (st == FLASHCL_RING_ERROR_MPI)
        return st;
    if (local == FLASHCL_SUCCESS)
        local = st;
    return local == FLASHCL_SUCCESS ? store_gradients(ring, run, grad, run->dkv.device[1], 1, &run->dkv.uploaded[1])
                                    : local;
}

static flashcl_status check_local(flashcl_ring *ring, const struct flashcl_attention *attn,
                                  const struct flashcl_attention_grad *grad, cl_uint n_wait, const cl_event *wait)
{
    flashcl_status st = fcl_ring_check_attention(attn);
    if (st != FLASHCL_SUCCESS)
        return st;
    if (!grad)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "grad is NULL");
    if (!attn->lse.mem)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "attn.lse is absent: the backward needs the forward's LSE");
    if (grad->d_sinks.mem)
        return fcl_ring_fail(FLASHCL_INVALID_VALUE, "grad.d_sinks is set: the ring does not take sinks");
    if (n_wait && !wait)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "wait_list is NULL with %u events", n_wait);
    size_t bytes;
    st = flashcl_backward_workspace_size(ring->ctx, attn, grad, &bytes);  /* validates like a backward */
    return st == FLASHCL_SUCCESS ? st : fcl_ring_fail_core(st, "attn, grad");
}

flashcl_status flashcl_ring_backward(flashcl_ring *ring, const struct flashcl_attention *attn,
                                     const struct flashcl_attention_grad *grad, cl_uint num_wait_events,
                                     const cl_event *wait_list)
{
    fcl_ring_clear_error();
    if (!ring)
        return fcl_ring_fail(FLASHCL_ERROR_NULL_ARGUMENT, "ring is NULL");
    const double start = fcl_ring_now();
    memset(&ring->stats, 0, sizeof(ring->stats));
    struct backward_run run = {0};
    flashcl_status st =
        fcl_ring_agree(ring, check_local(ring, attn, grad, num_wait_events, wait_list), attn, &run.s);
    if (st != FLASHCL_SUCCESS)
        return st;
    ring->stats.steps = ring->ranks;
    ring->stats.chunks = run.s.chunks;
    flashcl_status local = allocate(ring, &run, attn, grad);
    if (local == FLASHCL_SUCCESS)
        local = fcl_ring_kernels(ring, run.s.dtype, &(cl_kernel *){NULL});
    if (local == FLASHCL_SUCCESS && num_wait_events) {
        const cl_int err = clWaitForEvents(num_wait_events, wait_list);
        if (err != CL_SUCCESS)
            local = fcl_ring_fail((flashcl_status)err, "waiting for wait_list failed: %d", err);
    }
    st = fcl_ring_agree_outcome(ring, local);
    if (st == FLASHCL_SUCCESS) {
        local = ring_steps(ring, &run, attn, grad);
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
