/* workspace.c: device scratch buffers the context keeps for its calls (the
 * split-KV partials), so a decode step does not allocate and free device
 * memory each time. A kept buffer is handed out again only once every
 * command that used it is complete (the event recorded at its release), so
 * no call ever waits on another; when none is free, or the request is
 * larger than the context keeps, the call gets a buffer of its own, released
 * with it as before. */
#include "internal.h"

static bool slot_idle(const struct workspace_slot *s)
{
    if (s->in_use)
        return false;
    cl_int status = CL_COMPLETE;
    if (s->last_use &&
        clGetEventInfo(s->last_use, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, NULL) != CL_SUCCESS)
        return false;  /* cannot tell: leave it */
    return status <= CL_COMPLETE;  /* done, or ended by an error: nothing reads or writes it any more */
}

static void slot_clear(struct workspace_slot *s)
{
    if (s->mem)
        clReleaseMemObject(s->mem);
    if (s->last_use)
        clReleaseEvent(s->last_use);
    *s = (struct workspace_slot){0};
}

flashcl_status fcl_workspace_acquire(flashcl_context *ctx, size_t bytes, struct fcl_workspace *out)
{
    out->mem = NULL;
    out->slot = -1;
    if (bytes <= FCL_WORKSPACE_KEPT_BYTES) {
        pthread_mutex_lock(&ctx->lock);
        int best = -1, empty = -1;
        for (int i = 0; i < FCL_WORKSPACE_SLOTS; i++) {
            struct workspace_slot *s = &ctx->workspace[i];
            if (!s->mem) {
                empty = empty < 0 ? i : empty;
            } else if (slot_idle(s)) {
                if (s->bytes >= bytes && (best < 0 || s->bytes < ctx->workspace[best].bytes))
                    best = i;  /* the smallest that fits */
                else if (s->bytes < bytes && empty < 0)
                    empty = i;  /* too small and idle: replaced by a larger one */
            }
        }
        if (best < 0 && empty >= 0) {
            struct workspace_slot *s = &ctx->workspace[empty];
            slot_clear(s);
            cl_int err;
            s->mem = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
            s->bytes = bytes;
            best = s->mem ? empty : -1;
            if (!s->mem)
                *s = (struct workspace_slot){0};
        }
        if (best >= 0) {
            ctx->workspace[best].in_use = true;
            if (ctx->workspace[best].last_use)
                clReleaseEvent(ctx->workspace[best].last_use);
            ctx->workspace[best].last_use = NULL;
            out->mem = ctx->workspace[best].mem;
            out->slot = best;
        }
        pthread_mutex_unlock(&ctx->lock);
        if (out->mem)
            return FLASHCL_SUCCESS;
    }
    cl_int err;
    out->mem = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!out->mem)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY, "allocating the %zu-byte workspace failed (%d)",
                        bytes, err);
    return FLASHCL_SUCCESS;
}

void fcl_workspace_release(flashcl_context *ctx, struct fcl_workspace *ws, bool used, cl_event last_use)
{
    if (!ws->mem)
        return;
    if (ws->slot < 0) {
        clReleaseMemObject(ws->mem);  /* OpenCL keeps it until the commands that use it are done */
    } else {
        pthread_mutex_lock(&ctx->lock);
        struct workspace_slot *s = &ctx->workspace[ws->slot];
        if (used && (!last_use || clRetainEvent(last_use) != CL_SUCCESS)) {
            slot_clear(s);  /* its use cannot be tracked: not handed out again (OpenCL keeps it alive) */
        } else {
            s->last_use = used ? last_use : NULL;
            s->in_use = false;
        }
        pthread_mutex_unlock(&ctx->lock);
    }
    ws->mem = NULL;
    ws->slot = -1;
}

void fcl_workspace_free(flashcl_context *ctx)
{
    for (int i = 0; i < FCL_WORKSPACE_SLOTS; i++)
        slot_clear(&ctx->workspace[i]);
}
