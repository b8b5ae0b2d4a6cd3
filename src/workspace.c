/* workspace.c: device scratch buffers the context keeps for its calls (the
 * split-KV partials), so a decode step does not allocate and free device
 * memory each time. A kept buffer goes to a call only where no command can
 * still be using it when the call's own commands run: every command that
 * used it is complete (the event recorded at its release), or its last use
 * was on the call's own in-order queue, which runs the new commands after
 * the old ones. Neither adds a wait list, so no call ever waits on another
 * through the workspace (an earlier design that did was reverted: a failed
 * wait list in one call then failed the next). When no buffer is free, or
 * the request is larger than the context keeps, the call gets a buffer of
 * its own, released with it. Device memory is allocated and released
 * outside the context's lock, which also guards the program cache. */
#include "internal.h"

#define KEPT_MIN_BYTES ((size_t)1 << 20)

/* Kept sizes are powers of two from 1 MB (at most the cap): a decode whose split count grows with the
 * cache replaces its buffer a few times, not at every growth. */
static size_t kept_size(size_t bytes)
{
    size_t size = KEPT_MIN_BYTES;
    while (size < bytes && size < FCL_WORKSPACE_KEPT_BYTES)
        size *= 2;
    return size < bytes ? bytes : size;
}

static bool in_order(cl_command_queue queue)
{
    cl_command_queue_properties props = 0;
    return clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof(props), &props, NULL) == CL_SUCCESS &&
           !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
}

/* What a slot's last use allows: free for this call, still busy, or unknown (an event whose status cannot
 * be read, or one that ended in an error, after which the state of its commands is the implementation's:
 * such a slot is dropped, its buffer released once OpenCL is done with it). */
enum slot_state { SLOT_FREE, SLOT_BUSY, SLOT_DROP };

static enum slot_state slot_state(const struct workspace_slot *s, cl_command_queue queue, bool queue_in_order)
{
    if (!s->last_use)
        return SLOT_FREE;
    cl_int status;
    if (clGetEventInfo(s->last_use, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, NULL) != CL_SUCCESS ||
        status < 0)
        return SLOT_DROP;
    if (status == CL_COMPLETE || (queue_in_order && s->queue == queue))
        return SLOT_FREE;
    return SLOT_BUSY;
}

/* References to release once the lock is dropped: what emptied slots held, and replaced last uses. */
struct deferred {
    cl_mem mem[2 * FCL_WORKSPACE_SLOTS + 2];  /* every slot emptied, then the chosen one and its last use */
    cl_event event[2 * FCL_WORKSPACE_SLOTS + 2];
    cl_command_queue queue[2 * FCL_WORKSPACE_SLOTS + 2];
    int n;
};

static void defer(struct deferred *later, cl_mem mem, cl_event event, cl_command_queue queue)
{
    later->mem[later->n] = mem;
    later->event[later->n] = event;
    later->queue[later->n] = queue;
    later->n++;
}

/* Empties a slot under the lock; what it held is released after unlocking. */
static void slot_empty(struct workspace_slot *s, struct deferred *later)
{
    defer(later, s->mem, s->last_use, s->queue);
    *s = (struct workspace_slot){0};
}

static void release_deferred(const struct deferred *later)
{
    for (int i = 0; i < later->n; i++) {
        if (later->mem[i])
            clReleaseMemObject(later->mem[i]);  /* OpenCL keeps it until the commands that use it are done */
        if (later->event[i])
            clReleaseEvent(later->event[i]);
        if (later->queue[i])
            clReleaseCommandQueue(later->queue[i]);
    }
}

flashcl_status fcl_workspace_acquire(flashcl_context *ctx, size_t bytes, cl_command_queue queue,
                                     struct fcl_workspace *out)
{
    out->mem = NULL;
    out->slot = -1;
    out->zeroed = NULL;
    struct deferred later = {.n = 0};
    int slot = -1;
    size_t fresh_bytes = 0;  /* > 0: the slot needs a new buffer of this size */
    if (bytes <= FCL_WORKSPACE_KEPT_BYTES) {
        const bool queue_in_order = in_order(queue);
        pthread_mutex_lock(&ctx->lock);
        int unallocated = -1, small = -1;
        for (int i = 0; i < FCL_WORKSPACE_SLOTS; i++) {
            struct workspace_slot *s = &ctx->workspace[i];
            if (s->in_use)
                continue;  /* another call's, perhaps still being allocated */
            const enum slot_state state = s->mem ? slot_state(s, queue, queue_in_order) : SLOT_FREE;
            if (state == SLOT_DROP)
                slot_empty(s, &later);
            if (!s->mem) {
                unallocated = unallocated < 0 ? i : unallocated;
            } else if (state == SLOT_FREE) {
                if (s->bytes >= bytes && (slot < 0 || s->bytes < ctx->workspace[slot].bytes))
                    slot = i;  /* the smallest that fits */
                else if (s->bytes < bytes && small < 0)
                    small = i;
            }
        }
        if (slot < 0 && (unallocated >= 0 || small >= 0)) {
            slot = unallocated >= 0 ? unallocated : small;  /* replace a too-small one only where all are taken */
            slot_empty(&ctx->workspace[slot], &later);
            fresh_bytes = ctx->workspace[slot].bytes = kept_size(bytes);
        }
        /* In use until released; its last use stays recorded until the call records a newer one, so a
         * call that enqueues nothing leaves the slot as busy as it found it. */
        if (slot >= 0) {
            ctx->workspace[slot].in_use = true;
            out->mem = ctx->workspace[slot].mem;
        }
        pthread_mutex_unlock(&ctx->lock);
        release_deferred(&later);
    }
    cl_int err = CL_SUCCESS;
    if (slot < 0) {  /* none free, or too large to keep: the call's own */
        out->mem = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    } else if (fresh_bytes) {
        cl_mem mem = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, fresh_bytes, NULL, &err);
        pthread_mutex_lock(&ctx->lock);
        ctx->workspace[slot].mem = mem;
        if (!mem)
            ctx->workspace[slot] = (struct workspace_slot){0};
        pthread_mutex_unlock(&ctx->lock);
        out->mem = mem;
        out->slot = mem ? slot : -1;
    } else {
        out->slot = slot;
    }
    if (!out->mem)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY, "allocating the %zu-byte split-KV workspace failed (%d)",
                        bytes, err);
    if (slot < 0 || fresh_bytes) {  /* a new buffer: its counters zeroed before the call's commands */
        const cl_int zero = 0;
        const size_t counter_bytes = FCL_SPLIT_COUNTERS * sizeof(cl_int);
        cl_event poisoned = NULL;  /* tests: the zeroing after it, on an out-of-order queue too */
        if (ctx->hooks.poison_workspace) {
            const cl_uint nan_bytes = 0xFFFFFFFFu;
            size_t size = 0;
            err = clGetMemObjectInfo(out->mem, CL_MEM_SIZE, sizeof(size), &size, NULL);
            if (err == CL_SUCCESS)
                err = clEnqueueFillBuffer(queue, out->mem, &nan_bytes, sizeof(nan_bytes), 0, size & ~(size_t)3, 0,
                                          NULL, &poisoned);
        }
        if (err == CL_SUCCESS && bytes >= counter_bytes)
            err = clEnqueueFillBuffer(queue, out->mem, &zero, sizeof(zero), 0, counter_bytes, poisoned ? 1 : 0,
                                      poisoned ? &poisoned : NULL, &out->zeroed);
        if (poisoned)
            clReleaseEvent(poisoned);
        if (err != CL_SUCCESS) {
            fcl_workspace_release(ctx, out, queue, true, NULL);  /* not handed out again */
            return fcl_fail(ctx, (flashcl_status)err, "zeroing the split-KV workspace's counters failed (%d)", err);
        }
    }
    return FLASHCL_SUCCESS;
}

void fcl_workspace_release(flashcl_context *ctx, struct fcl_workspace *ws, cl_command_queue queue, bool used,
                           cl_event last_use)
{
    /* The slot keeps last_use (and a reference to the queue) only where it tracks a use. */
    if (ws->zeroed) {  /* a new buffer's zeroing, enqueued: its last use where the call enqueued nothing after it */
        if (!last_use) {
            last_use = ws->zeroed;
            used = true;
        } else {
            clReleaseEvent(ws->zeroed);
        }
        ws->zeroed = NULL;
    }
    const bool keep = ws->mem && ws->slot >= 0 && used && last_use && clRetainCommandQueue(queue) == CL_SUCCESS;
    if (last_use && !keep)
        clReleaseEvent(last_use);
    if (!ws->mem)
        return;
    if (ws->slot < 0) {
        clReleaseMemObject(ws->mem);  /* OpenCL keeps it until the commands that use it are done */
    } else {
        struct deferred later = {.n = 0};
        pthread_mutex_lock(&ctx->lock);
        struct workspace_slot *s = &ctx->workspace[ws->slot];
        s->in_use = false;
        if (keep) {  /* the newer last use (on the same queue, or after the older one completed) */
            defer(&later, NULL, s->last_use, s->queue);
            s->last_use = last_use;
            s->queue = queue;
        } else if (used) {
            slot_empty(s, &later);  /* used, but its use cannot be tracked: not handed out again */
        }  /* unused: the recorded last use stands */
        pthread_mutex_unlock(&ctx->lock);
        release_deferred(&later);
    }
    ws->mem = NULL;
    ws->slot = -1;
}

bool fcl_workspace_busy(const flashcl_context *ctx)
{
    for (int i = 0; i < FCL_WORKSPACE_SLOTS; i++)
        if (ctx->workspace[i].in_use)
            return true;
    return false;
}

void fcl_workspace_free(flashcl_context *ctx)
{
    struct deferred later = {.n = 0};
    for (int i = 0; i < FCL_WORKSPACE_SLOTS; i++)
        slot_empty(&ctx->workspace[i], &later);
    release_deferred(&later);
}
