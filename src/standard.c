/* flashcl_standard_forward: standard attention through CLBlast, with S and P
 * materialised in a device workspace. */
#include <clblast_c.h>
#include <stdint.h>
#include <stdio.h>

#include "internal.h"

/* Workspace regions, in f32 elements: packed Q (reused for O once S exists),
 * packed K, packed V, then S/P. */
struct workspace_plan {
    size_t q, k, v, s;       /* element offsets */
    size_t elements;         /* total */
};

static bool mul3_overflows(size_t a, size_t b, size_t c, size_t *out)
{
    if ((b && a > SIZE_MAX / b) || (c && a * b > SIZE_MAX / c))
        return true;
    *out = a * b * c;
    return false;
}

static flashcl_status plan_workspace(const flashcl_context *ctx, const struct flashcl_attention *a,
                                     struct workspace_plan *p)
{
    const size_t b = (size_t)a->batch, nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv;
    const size_t hq = (size_t)a->heads_q, hk = (size_t)a->heads_kv, d = (size_t)a->head_dim;
    size_t q_elems, kv_elems, s_elems, rows;
    if (mul3_overflows(b, hq, nq, &rows) || mul3_overflows(rows, d, 1, &q_elems) ||
        mul3_overflows(b * hk, nk, d, &kv_elems) || mul3_overflows(rows, nk, 1, &s_elems) ||
        q_elems > SIZE_MAX / 8 || kv_elems > SIZE_MAX / 8 || s_elems > SIZE_MAX / 8 ||
        q_elems + 2 * kv_elems + s_elems > SIZE_MAX / sizeof(float))
        return fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                    "the standard path's workspace for %zu x %zu scores per head overflows size_t", nq, nk);
    p->q = 0;
    p->k = q_elems;
    p->v = p->k + kv_elems;
    p->s = p->v + kv_elems;
    p->elements = p->s + s_elems;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_standard_workspace_size(flashcl_context *ctx, const struct flashcl_attention *attn,
                                               size_t *bytes)
{
    clear_error();
    if (!ctx || !attn || !bytes)
        return fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL", !ctx ? "ctx" : !attn ? "attn" : "bytes");
    flashcl_status st = validate_attention(ctx, attn);
    struct workspace_plan plan;
    if (st == FLASHCL_SUCCESS)
        st = plan_workspace(ctx, attn, &plan);
    if (st == FLASHCL_SUCCESS)
        *bytes = plan.elements * sizeof(float);
    return st;
}

static flashcl_status check_fits(const flashcl_context *ctx, size_t bytes)
{
    if (bytes > ctx->max_alloc_size || bytes > ctx->global_mem_size)
        return fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                    "standard attention needs a %.2f GiB workspace (%zu bytes); \"%s\" allows %.2f GiB "
                    "in one allocation and has %.2f GiB in all",
                    bytes / 1073741824.0, bytes, ctx->device_name, ctx->max_alloc_size / 1073741824.0,
                    ctx->global_mem_size / 1073741824.0);
    return FLASHCL_SUCCESS;
}

static flashcl_status check_workspace(const flashcl_context *ctx, cl_mem ws, size_t needed)
{
    size_t size = 0;
    cl_context ws_ctx = NULL;
    cl_int err = clGetMemObjectInfo(ws, CL_MEM_SIZE, sizeof(size), &size, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(ws, CL_MEM_CONTEXT, sizeof(ws_ctx), &ws_ctx, NULL);
    if (err != CL_SUCCESS)
        return fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "workspace is not a valid cl_mem (%d)", err);
    if (ws_ctx != ctx->cl_ctx)
        return fail(ctx, FLASHCL_INVALID_CONTEXT, "workspace belongs to another cl_context");
    if (size < needed)
        return fail(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS, "workspace holds %zu bytes; this call needs %zu", size,
                    needed);
    return FLASHCL_SUCCESS;
}

static flashcl_status check_in_order(const flashcl_context *ctx, cl_command_queue queue)
{
    cl_command_queue_properties props = 0;
    clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof(props), &props, NULL);
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return fail(ctx, FLASHCL_INVALID_COMMAND_QUEUE,
                    "the standard path needs an in-order queue (CLBlast's GEMMs rely on queue order)");
    return FLASHCL_SUCCESS;
}

/* A pack/unpack launch: one work-item per element of one tensor view. */
static cl_int enqueue_elementwise(cl_command_queue queue, cl_kernel kernel, size_t total, cl_uint n_wait,
                                  const cl_event *wait, cl_event *event)
{
    const size_t local = 256;
    const size_t global = (total + local - 1) / local * local;
    return clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, n_wait, wait, event);
}

struct repack_shape {
    cl_ulong total;
    cl_int seq, heads, group, d;
};

static cl_int set_repack_args(cl_kernel kernel, cl_uint first, const struct repack_shape *r)
{
    cl_int err = clSetKernelArg(kernel, first, sizeof(cl_ulong), &r->total);
    err |= clSetKernelArg(kernel, first + 1, sizeof(cl_int), &r->seq);
    err |= clSetKernelArg(kernel, first + 2, sizeof(cl_int), &r->heads);
    err |= clSetKernelArg(kernel, first + 3, sizeof(cl_int), &r->group);
    err |= clSetKernelArg(kernel, first + 4, sizeof(cl_int), &r->d);
    return err;
}

static cl_int set_view(cl_kernel kernel, cl_uint first, const flashcl_tensor *t, size_t esize)
{
    const cl_ulong v[4] = {t->offset / esize, t->stride_batch, t->stride_seq, t->stride_head};
    cl_int err = clSetKernelArg(kernel, first, sizeof(cl_mem), &t->mem);
    for (cl_uint i = 0; i < 4; i++)
        err |= clSetKernelArg(kernel, first + 1 + i, sizeof(cl_ulong), &v[i]);
    return err;
}

/* Enqueues pack of one tensor into the workspace at element offset dst_off. */
static cl_int enqueue_pack(cl_command_queue queue, cl_kernel pack, const flashcl_tensor *t, size_t esize,
                           cl_mem ws, cl_ulong dst_off, const struct repack_shape *r, cl_uint n_wait,
                           const cl_event *wait)
{
    cl_int err = set_view(pack, 0, t, esize);
    err |= clSetKernelArg(pack, 5, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(pack, 6, sizeof(cl_ulong), &dst_off);
    err |= set_repack_args(pack, 7, r);
    if (err != CL_SUCCESS)
        return err;
    return enqueue_elementwise(queue, pack, (size_t)r->total, n_wait, wait, NULL);
}

static flashcl_status clblast_failed(const flashcl_context *ctx, const char *what, CLBlastStatusCode code)
{
    if (code == CLBlastOpenCLOutOfResources || code == CLBlastTempBufferAllocFailure)
        return fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY, "CLBlast's %s ran out of device memory (%d)",
                    what, (int)code);
    return fail(ctx, FLASHCL_ERROR_CLBLAST, "CLBlast's %s failed with status %d", what, (int)code);
}

/* The whole chain; caller holds ctx->lock. */
static flashcl_status enqueue_standard(flashcl_context *ctx, const struct flashcl_attention *a, cl_mem ws,
                                       const struct workspace_plan *plan, cl_command_queue queue,
                                       cl_uint n_wait, const cl_event *wait, cl_event *event)
{
    char options[512];
    snprintf(options, sizeof(options), "-cl-std=CL1.2 -DDTYPE=%d", dtype_define(a->q.dtype));
    append_user_build_options(options, sizeof(options));
    cl_kernel pack, unpack, softmax;
    flashcl_status st = program_get_kernel(ctx, flashcl_source_standard_attention, "pack_rows", options, &pack);
    if (st == FLASHCL_SUCCESS)
        st = program_get_kernel(ctx, flashcl_source_standard_attention, "unpack_rows", options, &unpack);
    if (st == FLASHCL_SUCCESS)
        st = program_get_kernel(ctx, flashcl_source_standard_attention, "row_softmax", options, &softmax);
    if (st != FLASHCL_SUCCESS)
        return st;

    const size_t esize = flashcl_dtype_size(a->q.dtype);
    const size_t b = (size_t)a->batch, nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv, d = (size_t)a->head_dim;
    const size_t hq = (size_t)a->heads_q, hk = (size_t)a->heads_kv, group = hq / hk;
    const struct repack_shape rq = {(cl_ulong)(b * nq * hq * d), a->seq_q, a->heads_q, (cl_int)group, a->head_dim};
    const struct repack_shape rkv = {(cl_ulong)(b * nk * hk * d), a->seq_kv, a->heads_kv, 1, a->head_dim};

    /* The wait list gates the packs; everything after follows in queue order. */
    cl_int err = enqueue_pack(queue, pack, &a->q, esize, ws, plan->q, &rq, n_wait, wait);
    if (err == CL_SUCCESS)
        err = enqueue_pack(queue, pack, &a->k, esize, ws, plan->k, &rkv, n_wait, wait);
    if (err == CL_SUCCESS)
        err = enqueue_pack(queue, pack, &a->v, esize, ws, plan->v, &rkv, n_wait, wait);
    if (err != CL_SUCCESS)
        return fail(ctx, (flashcl_status)err, "enqueueing the standard path's packing failed (%d)", err);

    /* S[g] (group·Nq × Nk) = scale · Q[g] · K[g]ᵀ, one batch entry per (batch, kv head). */
    const size_t rows = group * nq, batches = b * hk;
    CLBlastStatusCode code = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, rows, nk, d, effective_scale(a),
        ws, plan->q, d, rows * d, ws, plan->k, d, nk * d, 0.0f, ws, plan->s, nk, rows * nk, batches, &queue, NULL);
    if (code != CLBlastSuccess)
        return clblast_failed(ctx, "SGEMM for S = QKᵀ", code);

    const cl_int seq_q = a->seq_q, seq_kv = a->seq_kv, heads_q = a->heads_q, grp = (cl_int)group;
    const cl_int causal = a->causal ? 1 : 0, has_lse = a->lse.mem != NULL;
    const cl_ulong s_off = plan->s;
    const cl_ulong lse_v[4] = {a->lse.offset / sizeof(float), a->lse.stride_batch, a->lse.stride_seq,
                               a->lse.stride_head};
    cl_uint arg = 0;
    err = clSetKernelArg(softmax, arg++, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_ulong), &s_off);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &seq_q);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &seq_kv);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &heads_q);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &grp);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &causal);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_mem), has_lse ? &a->lse.mem : NULL);
    for (int i = 0; i < 4; i++)
        err |= clSetKernelArg(softmax, arg++, sizeof(cl_ulong), &lse_v[i]);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &has_lse);
    const size_t softmax_local = 256, softmax_global = b * hq * nq * softmax_local;
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, softmax, 1, NULL, &softmax_global, &softmax_local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return fail(ctx, (flashcl_status)err, "enqueueing the row softmax failed (%d)", err);

    /* O[g] (group·Nq × d) = P[g] · V[g], into the packed-Q region (Q is no longer needed). */
    code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, rows, d, nk,
                                      1.0f, ws, plan->s, nk, rows * nk, ws, plan->v, d, nk * d, 0.0f, ws, plan->q,
                                      d, rows * d, batches, &queue, NULL);
    if (code != CLBlastSuccess)
        return clblast_failed(ctx, "SGEMM for O = PV", code);

    const cl_ulong o_src = plan->q;
    err = clSetKernelArg(unpack, 0, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(unpack, 1, sizeof(cl_ulong), &o_src);
    err |= set_view(unpack, 2, &a->o, esize);
    err |= set_repack_args(unpack, 7, &rq);
    if (err == CL_SUCCESS)
        err = enqueue_elementwise(queue, unpack, (size_t)rq.total, 0, NULL, event);
    if (err != CL_SUCCESS)
        return fail(ctx, (flashcl_status)err, "enqueueing the standard path's output failed (%d)", err);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_standard_forward(flashcl_context *ctx, const struct flashcl_attention *attn, cl_mem workspace,
                                        cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list,
                                        cl_event *event)
{
    flashcl_status st = check_call(ctx, attn, queue, num_wait_events, wait_list);
    if (st == FLASHCL_SUCCESS)
        st = check_in_order(ctx, queue);
    struct workspace_plan plan;
    if (st == FLASHCL_SUCCESS)
        st = plan_workspace(ctx, attn, &plan);
    if (st != FLASHCL_SUCCESS)
        return st;
    const size_t bytes = plan.elements * sizeof(float);

    cl_mem ws = workspace;
    if (ws) {
        st = check_workspace(ctx, ws, bytes);
    } else {
        st = check_fits(ctx, bytes);
        if (st == FLASHCL_SUCCESS) {
            cl_int err;
            ws = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
            if (!ws)
                st = fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                          "allocating the standard path's %.2f GiB workspace failed (%d)", bytes / 1073741824.0, err);
        }
    }
    if (st != FLASHCL_SUCCESS)
        return st;

    pthread_mutex_lock(&ctx->lock);
    st = enqueue_standard(ctx, attn, ws, &plan, queue, num_wait_events, wait_list, event);
    pthread_mutex_unlock(&ctx->lock);
    /* Released now, freed by OpenCL once the enqueued commands are done with it. */
    if (!workspace)
        clReleaseMemObject(ws);
    return st;
}
