/* flashcl_forward: validate, choose the tile, build (once), enqueue. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The queue must run on the context's device, or the enqueue fails late. */
static flashcl_status check_queue(const flashcl_context *ctx, cl_command_queue queue)
{
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof(qctx), &qctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof(qdev), &qdev, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, FLASHCL_INVALID_COMMAND_QUEUE, "queue is not a valid cl_command_queue (%d)", err);
    if (qctx != ctx->cl_ctx || qdev != ctx->device)
        return fcl_fail(ctx, FLASHCL_INVALID_COMMAND_QUEUE,
                        "queue runs on another context or device than the flashcl context");
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_check_queue(const flashcl_context *ctx, cl_command_queue queue, cl_uint num_wait_events,
                               const cl_event *wait_list)
{
    if ((num_wait_events == 0) != (wait_list == NULL))
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "num_wait_events = %u with wait_list %s", num_wait_events,
                        wait_list ? "non-NULL" : "NULL");
    return check_queue(ctx, queue);
}

flashcl_status fcl_check_call(flashcl_context *ctx, const struct flashcl_attention *attn, cl_command_queue queue,
                              cl_uint num_wait_events, const cl_event *wait_list)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, queue);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = fcl_check_queue(ctx, queue, num_wait_events, wait_list);
    if (st == FLASHCL_SUCCESS)
        st = fcl_validate_attention(ctx, attn);
    if (st == FLASHCL_SUCCESS)
        st = fcl_refuse_e4m3_cache(ctx, attn, "this call");
    return st;
}

cl_int fcl_set_view_args(cl_kernel kernel, cl_uint *arg, const flashcl_tensor *t, size_t esize)
{
    const cl_mem mem = t->mem;
    const cl_ulong values[4] = {t->offset / esize, t->stride_batch, t->stride_seq, t->stride_head};
    cl_int err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), mem ? &mem : NULL);
    for (int i = 0; i < 4; i++)
        err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_ulong), &values[i]);
    return err;
}

/* A flashcl_vector of f32 as a kernel's pointer (NULL where absent) and element offset. */
cl_int fcl_set_vector_args(cl_kernel kernel, cl_uint *arg, const flashcl_vector *v)
{
    const cl_mem mem = v->mem;
    const cl_ulong offset = v->offset / sizeof(float);
    const cl_int err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), mem ? &mem : NULL);
    return err | clSetKernelArg(kernel, (*arg)++, sizeof(cl_ulong), &offset);
}

/* cl/varlen.h's eight trailing arguments, from *arg on. */
static cl_int set_varlen_args(cl_kernel kernel, cl_uint *arg, const struct fcl_varlen_args *v)
{
    cl_int err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), &v->cu_q);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), &v->cu_k);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &v->total_q);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &v->total_k);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), v->pages ? &v->pages : NULL);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &v->page_size);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &v->pages_per_seq);
    return err | clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &v->num_pages);
}

/* flash_forward_combine's arguments (cl/split_combine.h). */
static cl_int set_combine_args(cl_kernel kernel, const struct flashcl_attention *attn, cl_mem part, cl_int splits,
                               const struct fcl_varlen_args *varlen)
{
    const cl_int has_lse = attn->lse.mem != NULL, rows = attn->seq_q, heads = attn->heads_q, batch = attn->batch;
    const cl_int seq_kv = attn->seq_kv;
    cl_uint arg = 0;
    cl_int err = clSetKernelArg(kernel, arg++, sizeof(cl_mem), &part);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &splits);
    err |= fcl_set_view_args(kernel, &arg, &attn->o, flashcl_dtype_size(attn->o.dtype));
    err |= fcl_set_view_args(kernel, &arg, &attn->lse, sizeof(float));
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &has_lse);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &rows);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &heads);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &batch);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &seq_kv);
    err |= fcl_set_vector_args(kernel, &arg, &attn->sinks);
    if (varlen)
        err |= set_varlen_args(kernel, &arg, varlen);
    return err;
}

/* An E4M3 view as the FP8 kernel addresses it: in 2-byte units (its rows start on 16 bytes, so offset and strides
 * are even), so cl/nv_mma16.h's loaders copy its 16-byte chunks as they do f16's. */
static flashcl_tensor fp8_as_pairs(const flashcl_tensor *t)
{
    flashcl_tensor pairs = *t;
    pairs.stride_batch /= 2;
    pairs.stride_seq /= 2;
    pairs.stride_head /= 2;
    return pairs;
}

/* Bytes before Vᵀ in the FP8 call's workspace: the split-KV counters, which every call leaves zero. */
#define FP8_VT_OFFSET ((size_t)FCL_SPLIT_COUNTERS * sizeof(cl_int))

/* The length of a row of cl/flash_forward_mma.cl's Vᵀ of an E4M3 call: the keys rounded up to 128-key blocks, one
 * row a (sequence, KV head, column of V); a packed batch's rows hold every sequence (fp8_vt_column: the packed keys
 * rounded up, plus 256 a sequence), one a (KV head, column). */
static size_t fp8_vt_keys(const struct flashcl_attention *attn, const struct fcl_varlen_args *varlen)
{
    if (varlen)
        return ((size_t)varlen->total_k + 127) / 128 * 128 + 256 * (size_t)attn->batch;
    return ((size_t)attn->seq_kv + 127) / 128 * 128;
}

/* Bytes of Vᵀ in the workspace. */
static size_t fp8_vt_bytes(const struct flashcl_attention *attn, const struct fcl_varlen_args *varlen)
{
    const size_t rows = (varlen ? 1 : (size_t)attn->batch) * (size_t)attn->heads_kv * (size_t)fcl_head_dim_v(attn);
    return rows * fp8_vt_keys(attn, varlen);
}

/* Enqueues fp8_transpose_v, V to Vᵀ in the workspace (after the wait list), its event in *done. */
static flashcl_status enqueue_fp8_transpose(flashcl_context *ctx, const struct flashcl_attention *attn,
                                            const struct fcl_varlen_args *varlen, const struct plan *plan,
                                            cl_mem workspace, cl_command_queue queue, cl_uint n_waits,
                                            const cl_event *waits, cl_event *done)
{
    cl_kernel kernel;
    const bool sm90a = !ctx->dev.tensor_cores_emulated;
    flashcl_status st = fcl_program_get_kernel(ctx, plan->kernel->source, "fp8_transpose_v", plan->options, sm90a,
                                               &kernel);
    if (st != FLASHCL_SUCCESS)
        return st;
    const cl_ulong vt_off = FP8_VT_OFFSET;
    const cl_int seq_kv = attn->seq_kv, nk_pad = (cl_int)fp8_vt_keys(attn, varlen);
    cl_uint arg = 0;
    cl_int err = fcl_set_view_args(kernel, &arg, &attn->v, 1);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_mem), &workspace);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_ulong), &vt_off);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &seq_kv);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &nk_pad);
    if (varlen)
        err |= set_varlen_args(kernel, &arg, varlen);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "setting the arguments of fp8_transpose_v failed");
    /* 32 keys a work-group over the (longest) sequence's blocks. */
    const size_t local[3] = {256, 1, 1};
    const size_t global[3] = {((size_t)seq_kv + 127) / 128 * 4 * 256, (size_t)attn->heads_kv, (size_t)attn->batch};
    err = clEnqueueNDRangeKernel(queue, kernel, 3, NULL, global, local, n_waits, waits, done);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing fp8_transpose_v failed (%d)", err);
    return FLASHCL_SUCCESS;
}

/* Builds (once) and enqueues the planned kernel (and, split-KV, the step
 * that merges its partials; E4M3, first the step that writes Vᵀ). Every forward kernel takes the same arguments;
 * they differ in source and shape. Caller has validated the call. */
static flashcl_status enqueue_forward(flashcl_context *ctx, const struct flashcl_attention *attn,
                                      const struct plan *plan, const struct fcl_varlen_args *varlen,
                                      cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list,
                                      cl_event *event)
{
    const struct kernel_info *k = plan->kernel;
    const bool fp8 = attn->q.dtype == FLASHCL_E4M3;
    /* E4M3 views (inputs, or a KV cache's K and V): Q's and K's descales join the scale; V's multiplies O (1 for
     * the other dtypes). */
    const float scale_log2 = fcl_scale_log2(attn) * fcl_descale(&attn->q) * fcl_descale(&attn->k);
    const cl_float v_descale = fcl_descale(&attn->v);
    const cl_int has_lse = attn->lse.mem != NULL;
    const cl_int seq_q = attn->seq_q, seq_kv = attn->seq_kv;
    const cl_int group = attn->heads_q / attn->heads_kv;
    const size_t esize = flashcl_dtype_size(attn->q.dtype);
    const bool split = plan->splits > 1;
    const cl_int splits = plan->splits;

    /* (query blocks x splits, query heads, sequences), or (splits, KV heads, sequences) for a kernel
     * whose work-group holds a KV head's query rows. */
    const size_t n_qblocks =
        k->packs_group ? 1 : ((size_t)attn->seq_q + (size_t)plan->block_m - 1) / (size_t)plan->block_m;
    const size_t local[3] = {(size_t)plan->workgroup, 1, 1};
    const size_t global[3] = {n_qblocks * local[0] * (size_t)plan->splits,
                              (size_t)(k->packs_group ? attn->heads_kv : attn->heads_q), (size_t)attn->batch};
    const size_t dv = (size_t)fcl_head_dim_v(attn);
    const size_t combine_items = (size_t)attn->seq_q * dv;  /* one a (row, column of O) */
    const size_t combine_global[3] = {(combine_items + 63) / 64 * 64, (size_t)attn->heads_q, (size_t)attn->batch};

    /* The partials: dv + 1 floats per (split, sequence, head, row); E4M3, Vᵀ (fp8_vt_bytes: dv rows of the keys
     * rounded up to 128 bytes a (sequence, KV head), a packed batch's rows holding every sequence); a buffer the
     * context keeps where one is free (workspace.c), else the call's own. */
    struct fcl_workspace ws = {NULL, -1, NULL};
    const cl_int merge_here = plan->merge_in_place;
    if (split || fp8) {
        const size_t bytes = split ? (FCL_SPLIT_COUNTERS + (size_t)splits * (size_t)attn->batch * (size_t)attn->heads_q *
                                                               (size_t)attn->seq_q * (dv + 1)) * sizeof(float)
                                   : FP8_VT_OFFSET + fp8_vt_bytes(attn, varlen);
        const flashcl_status wst = fcl_workspace_acquire(ctx, bytes, queue, &ws);
        if (wst != FLASHCL_SUCCESS)
            return wst;
    }
    cl_mem part = ws.mem;
    cl_event last_use = NULL;  /* split, E4M3: the last command enqueued that uses the workspace (our reference) */
    bool used = false;         /* split, E4M3: a command that uses it was enqueued */
    const bool uses_workspace = split || fp8;

    /* Arguments live in the cl_kernel, shared by all threads of this context. */
    pthread_mutex_lock(&ctx->lock);
    cl_kernel kernel, combine = NULL;
    const bool sm90a = (k->needs & NEEDS_SM90A) && !ctx->dev.tensor_cores_emulated;  /* emulated: plain OpenCL C */
    flashcl_status st = fcl_program_get_kernel(ctx, k->source, k->entry, plan->options, sm90a, &kernel);
    if (st == FLASHCL_SUCCESS && split && !merge_here)
        st = fcl_program_get_kernel(ctx, k->source, k->combine, plan->options, sm90a, &combine);
    if (st == FLASHCL_SUCCESS) {
        cl_uint arg = 0;
        cl_int err;
        if (fp8) {  /* Q and K in 2-byte units; V as its Vᵀ in the workspace (cl/flash_forward_mma.cl) */
            const size_t vt_keys = fp8_vt_keys(attn, varlen);
            const flashcl_tensor q = fp8_as_pairs(&attn->q), k_view = fp8_as_pairs(&attn->k);
            const flashcl_tensor vt = {.mem = ws.mem, .offset = FP8_VT_OFFSET, .dtype = FLASHCL_E4M3,
                                       .stride_batch = varlen ? 0 : (size_t)attn->heads_kv * dv * vt_keys / 2,
                                       .stride_seq = vt_keys / 2, .stride_head = dv * vt_keys / 2};
            err = fcl_set_view_args(kernel, &arg, &q, 2);
            err |= fcl_set_view_args(kernel, &arg, &k_view, 2);
            err |= fcl_set_view_args(kernel, &arg, &vt, 2);
        } else {
            err = fcl_set_view_args(kernel, &arg, &attn->q, esize);  /* K and V: an E4M3 cache's are in bytes */
            err |= fcl_set_view_args(kernel, &arg, &attn->k, flashcl_dtype_size(attn->k.dtype));
            err |= fcl_set_view_args(kernel, &arg, &attn->v, flashcl_dtype_size(attn->v.dtype));
        }
        err |= fcl_set_view_args(kernel, &arg, &attn->o, flashcl_dtype_size(attn->o.dtype));
        err |= fcl_set_view_args(kernel, &arg, &attn->lse, sizeof(float));
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &has_lse);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &seq_q);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &seq_kv);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &group);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_float), &scale_log2);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_float), &v_descale);
        err |= fcl_set_vector_args(kernel, &arg, &attn->sinks);
        err |= fcl_set_vector_args(kernel, &arg, &attn->alibi_slopes);
        if (varlen)
            err |= set_varlen_args(kernel, &arg, varlen);
        if (split) {  /* cl/split.h's trailing arguments */
            err |= clSetKernelArg(kernel, arg++, sizeof(cl_mem), &part);
            err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &splits);
            err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &merge_here);
            if (!merge_here)
                err |= set_combine_args(combine, attn, part, splits, varlen);
        }
        if (err != CL_SUCCESS) {
            st = fcl_fail(ctx, FLASHCL_INVALID_VALUE, "setting the arguments of %s failed", k->entry);
        } else {
            /* A new workspace's zeroing joins the caller's wait list. */
            cl_event waits_inline[8], *waits = (cl_event *)wait_list, *waits_heap = NULL;
            cl_uint n_waits = num_wait_events;
            err = CL_SUCCESS;
            if (ws.zeroed) {
                if (n_waits >= 8)
                    waits_heap = malloc(((size_t)n_waits + 1) * sizeof(cl_event));
                waits = n_waits < 8 ? waits_inline : waits_heap;
                if (waits) {
                    for (cl_uint i = 0; i < n_waits; i++)
                        waits[i] = wait_list[i];
                    waits[n_waits++] = ws.zeroed;
                } else {
                    err = CL_OUT_OF_HOST_MEMORY;
                }
            }
            cl_event vt_written = NULL;  /* E4M3: Vᵀ's step, which the kernel waits for instead */
            if (err == CL_SUCCESS && fp8) {
                st = enqueue_fp8_transpose(ctx, attn, varlen, plan, ws.mem, queue, n_waits, waits, &vt_written);
                if (st != FLASHCL_SUCCESS)
                    err = CL_SUCCESS;  /* the failure is st's */
                else
                    used = true;
            }
            if (err == CL_SUCCESS && st == FLASHCL_SUCCESS)
                err = clEnqueueNDRangeKernel(queue, kernel, 3, NULL, global, local, fp8 ? 1 : n_waits,
                                             fp8 ? &vt_written : waits, uses_workspace ? &last_use : event);
            free(waits_heap);
            if (vt_written)
                clReleaseEvent(vt_written);
            if (uses_workspace && (!split || merge_here) && err == CL_SUCCESS && st == FLASHCL_SUCCESS && event) {
                *event = last_use;  /* the caller's reference, and the workspace's */
                last_use = clRetainEvent(last_use) == CL_SUCCESS ? last_use : NULL;
            }
            used = used || (split && err == CL_SUCCESS);
            if (err != CL_SUCCESS)
                st = fcl_fail(ctx, (flashcl_status)err,
                              "enqueueing %s (%zu x %zu x %zu work-items, tile %dx%d, %zu bytes local) failed (%d)",
                              k->entry, global[0], global[1], global[2], plan->block_m, plan->block_n,
                              plan->local_bytes, err);
        }
        if (st == FLASHCL_SUCCESS && split && !merge_here) {
            /* Ordered by the partials' event, so out-of-order queues hold too. */
            cl_event merged = NULL;
            err = clEnqueueNDRangeKernel(queue, combine, 3, NULL, combine_global, NULL, 1, &last_use, &merged);
            if (err != CL_SUCCESS) {
                st = fcl_fail(ctx, (flashcl_status)err, "enqueueing %s failed (%d)", k->combine, err);
            } else {
                clReleaseEvent(last_use);
                last_use = merged;  /* now the workspace's last use */
                if (event) {  /* the caller's reference; the workspace's own, or none (it then drops the buffer) */
                    *event = merged;
                    last_use = clRetainEvent(merged) == CL_SUCCESS ? merged : NULL;
                }
            }
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    fcl_workspace_release(ctx, &ws, queue, used, last_use);  /* takes last_use's reference */
    if (st == FLASHCL_SUCCESS)
        fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "forward: %s, %d split(s)%s, %s", k->name, plan->splits,
                    merge_here ? " merged in place" : "", plan->options);
    return st;
}

/* Failures of a kernel itself (it did not build, or the device cannot
 * launch it), after which another kernel of the table may run the call. */
bool fcl_kernel_failure(flashcl_status st)
{
    return st == FLASHCL_BUILD_PROGRAM_FAILURE || st == FLASHCL_OUT_OF_RESOURCES ||
           st == (flashcl_status)CL_INVALID_WORK_GROUP_SIZE || st == (flashcl_status)CL_INVALID_KERNEL ||
           st == (flashcl_status)CL_INVALID_PROGRAM_EXECUTABLE ||
           st == (flashcl_status)CL_INVALID_BUILD_OPTIONS;  /* a compiler that refuses an option of the plan's */
}

flashcl_status fcl_run_planned(flashcl_context *ctx, const struct problem *p, float scale_log2,
                               const struct plan *planned,
                               flashcl_status (*enqueue)(flashcl_context *ctx, const struct plan *plan, void *call),
                               void *call)
{
    /* A kernel that fails here is set aside (with these options, for this
     * context) and the call planned again: at most once per kernel. Where
     * no kernel is left, the first failure is the call's. */
    flashcl_status st = FLASHCL_SUCCESS, first = FLASHCL_SUCCESS;
    char first_message[1024] = "";
    for (int attempt = 0; attempt < fcl_kernel_count; attempt++) {
        struct plan plan;
        if (attempt == 0 && planned)
            plan = *planned;
        else if ((st = fcl_plan(ctx, p, scale_log2, &plan)) != FLASHCL_SUCCESS)
            break;
        st = enqueue(ctx, &plan, call);
        if (st == FLASHCL_SUCCESS || !fcl_kernel_failure(st))
            return st;
        if (first == FLASHCL_SUCCESS) {
            first = st;
            snprintf(first_message, sizeof(first_message), "%s", flashcl_last_error());
        }
        fcl_program_mark_failed(ctx, plan.kernel, plan.options, flashcl_status_name(st));
        fcl_clear_error();
    }
    if (first != FLASHCL_SUCCESS)
        return fcl_fail(ctx, first, "%s", first_message);
    return st;
}

/* One forward call's arguments, for fcl_run_planned. */
struct forward_call {
    const struct flashcl_attention *attn;
    const struct fcl_varlen_args *varlen;
    cl_command_queue queue;
    cl_uint num_wait_events;
    const cl_event *wait_list;
    cl_event *event;
};

static flashcl_status enqueue_forward_call(flashcl_context *ctx, const struct plan *plan, void *call)
{
    const struct forward_call *c = call;
    return enqueue_forward(ctx, c->attn, plan, c->varlen, c->queue, c->num_wait_events, c->wait_list, c->event);
}

flashcl_status fcl_forward_planned(flashcl_context *ctx, const struct flashcl_attention *attn, const struct problem *p,
                                   const struct fcl_varlen_args *varlen, cl_command_queue queue,
                                   cl_uint num_wait_events, const cl_event *wait_list, cl_event *event)
{
    struct forward_call call = {attn, varlen, queue, num_wait_events, wait_list, event};
    return fcl_run_planned(ctx, p, fcl_scale_log2(attn), NULL, enqueue_forward_call, &call);
}

flashcl_status flashcl_forward(flashcl_context *ctx, const struct flashcl_attention *attn, cl_command_queue queue,
                               cl_uint num_wait_events, const cl_event *wait_list, cl_event *event)
{
    flashcl_status st = fcl_check_call(ctx, attn, queue, num_wait_events, wait_list);
    if (st != FLASHCL_SUCCESS)
        return st;
    struct problem p;
    fcl_forward_problem(attn, &p);
    return fcl_forward_planned(ctx, attn, &p, NULL, queue, num_wait_events, wait_list, event);
}
