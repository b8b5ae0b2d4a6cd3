/* flashcl_standard_backward: the materialised backward through CLBlast, the
 * baseline for flashcl_backward. S, P, dP and dS live in the workspace
 * (cl/standard_backward.cl lists the steps). */
#include <clblast_c.h>
#include <stdint.h>
#include <stdio.h>

#include <string.h>

#include "internal.h"

/* CLBlast indexes with 32-bit ints; unlike the standard forward this path
 * does not split its GEMMs, so the whole workspace must stay under 2^31
 * floats (problems past that belong to the flash path). */
#define CLBLAST_MAX_ELEMENTS ((size_t)1 << 31)

/* Workspace regions in f32 elements, each `entries` entries of (batch, kv
 * head), the group's query rows stacked: Q, dO (then dQ), K (then dK),
 * V (then dV), S (then P), dP (then dS). */
struct backward_plan {
    size_t entries, rows;                /* batch * heads_kv; group * seq_q */
    size_t q_entry, kv_entry, s_entry;   /* rows * d, seq_kv * d, rows * seq_kv */
    size_t q, d_o, k, v, s, dp;          /* region offsets */
    size_t elements;
};

static flashcl_status plan_backward(const flashcl_context *ctx, const struct flashcl_attention *a,
                                    struct backward_plan *p)
{
    if (a->sinks.mem)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard backward does not take attn.sinks; flashcl_backward "
                        "does");
    if (fcl_head_dim_v(a) != a->head_dim)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard backward takes head_dim_v = head_dim only (%d != %d)",
                        a->head_dim_v, a->head_dim);
    if (a->alibi_slopes.mem)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard backward does not take attn.alibi_slopes; "
                        "flashcl_backward does");
    if (a->softcap != 0.0f)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard backward does not take attn.softcap (%g); "
                        "flashcl_backward does", (double)a->softcap);
    const size_t nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv, d = (size_t)a->head_dim;
    p->entries = (size_t)a->batch * (size_t)a->heads_kv;
    p->rows = (size_t)(a->heads_q / a->heads_kv) * nq;
    size_t q_all, kv_all, s_all, total = 0;
    if (fcl_mul_overflows(p->rows, d, &p->q_entry) || fcl_mul_overflows(nk, d, &p->kv_entry) ||
        fcl_mul_overflows(p->rows, nk, &p->s_entry) || fcl_mul_overflows(p->entries, p->q_entry, &q_all) ||
        fcl_mul_overflows(p->entries, p->kv_entry, &kv_all) || fcl_mul_overflows(p->entries, p->s_entry, &s_all) ||
        fcl_add_overflows(total, q_all, &total) || fcl_add_overflows(total, q_all, &total) ||
        fcl_add_overflows(total, kv_all, &total) || fcl_add_overflows(total, kv_all, &total) ||
        fcl_add_overflows(total, s_all, &total) || fcl_add_overflows(total, s_all, &total) ||
        total > SIZE_MAX / sizeof(float))
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                    "the standard backward's workspace for %zu x %zu scores per head overflows size_t", nq, nk);
    p->q = 0;
    p->d_o = q_all;
    p->k = 2 * q_all;
    p->v = p->k + kv_all;
    p->s = p->v + kv_all;
    p->dp = p->s + s_all;
    p->elements = p->dp + s_all;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_standard_backward_workspace_size(flashcl_context *ctx, const struct flashcl_attention *attn,
                                                        const struct flashcl_attention_grad *grad, size_t *bytes)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, grad, bytes);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = fcl_validate_attention(ctx, attn);
    if (st == FLASHCL_SUCCESS)
        st = fcl_refuse_fp8(ctx, attn, "the standard path");
    struct backward_plan plan;
    if (st == FLASHCL_SUCCESS)
        st = fcl_backward_validate(ctx, attn, grad, false, NULL, 0);
    if (st == FLASHCL_SUCCESS)
        st = plan_backward(ctx, attn, &plan);
    if (st == FLASHCL_SUCCESS)
        *bytes = plan.elements * sizeof(float);
    return st;
}

/* One tensor moved between its view and a workspace region. */
struct repack {
    const flashcl_tensor *view;
    size_t region, entry;  /* element offset of the region, and its entry stride */
    int seq, heads, group;
};

/* pack_rows (view -> workspace) or unpack_rows (workspace -> view), one work-item per element. */
static cl_int enqueue_repack(cl_command_queue queue, cl_kernel kernel, bool pack, cl_mem ws, const struct repack *r,
                             const struct flashcl_attention *a, cl_uint n_wait, const cl_event *wait, cl_event *event)
{
    const flashcl_tensor *t = r->view;
    const size_t esize = flashcl_dtype_size(t->dtype);
    const cl_ulong view[4] = {t->offset / esize, t->stride_batch, t->stride_seq, t->stride_head};
    const cl_ulong region = r->region, entry = r->entry;
    const cl_ulong total = (cl_ulong)a->batch * (cl_ulong)r->seq * (cl_ulong)r->heads * (cl_ulong)a->head_dim;
    const cl_int seq = r->seq, heads = r->heads, group = r->group, d = a->head_dim;
    cl_uint arg = 0;
    cl_int err = CL_SUCCESS;
    if (!pack) {  /* unpack_rows(src, src_off, entry, dst view, ...) */
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_mem), &ws);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_ulong), &region);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_ulong), &entry);
    }
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_mem), &t->mem);
    for (int i = 0; i < 4; i++)
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_ulong), &view[i]);
    if (pack) {  /* pack_rows(src view, dst, dst_off, entry, ...) */
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_mem), &ws);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_ulong), &region);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_ulong), &entry);
    }
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_ulong), &total);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &seq);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &heads);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &group);
    err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &d);
    if (err != CL_SUCCESS)
        return err;
    const size_t local = 256, global = ((size_t)total + local - 1) / local * local;
    return clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, n_wait, wait, event);
}

/* One strided-batched SGEMM over all entries: C = alpha · op(A) · op(B), row-major. */
struct gemm {
    const char *what;
    bool trans_a, trans_b;
    size_t m, n, k;
    size_t a, lda, a_entry, b, ldb, b_entry, c, ldc, c_entry;
};

static flashcl_status run_gemm(const flashcl_context *ctx, cl_command_queue queue, cl_mem ws, const struct gemm *g,
                               float alpha, size_t entries)
{
    const CLBlastStatusCode code = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
        g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, g->m, g->n, g->k, alpha, ws, g->a, g->lda, g->a_entry,
        ws, g->b, g->ldb, g->b_entry, 0.0f, ws, g->c, g->ldc, g->c_entry, entries, &queue, NULL);
    if (code == CLBlastOpenCLOutOfResources || code == CLBlastTempBufferAllocFailure)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY, "CLBlast's SGEMM for %s ran out of device memory (%d)",
                    g->what, (int)code);
    if (code != CLBlastSuccess)
        return fcl_fail(ctx, FLASHCL_ERROR_CLBLAST, "CLBlast's SGEMM for %s failed with status %d", g->what, (int)code);
    return FLASHCL_SUCCESS;
}

/* The whole chain on an in-order queue; caller holds ctx->lock. */
static flashcl_status enqueue_standard_backward(flashcl_context *ctx, const struct flashcl_attention *a,
                                                const struct flashcl_attention_grad *g, cl_mem ws,
                                                const struct backward_plan *p, cl_command_queue queue,
                                                cl_uint n_wait, const cl_event *wait, cl_event *event)
{
    /* softmax_grad works on the f32 workspace only: no DTYPE, one build for every dtype; the caller's
     * FLASHCL_BUILD_OPTIONS apply to both programs. */
    char options[512], grad_options[512] = "-cl-std=CL1.2";
    snprintf(options, sizeof(options), "-cl-std=CL1.2 -DDTYPE=%d", fcl_dtype_define(a->q.dtype));
    if (!fcl_append_build_options(ctx, options, sizeof(options)) ||
        !fcl_append_build_options(ctx, grad_options, sizeof(grad_options)))
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "FLASHCL_BUILD_OPTIONS is too long (%zu characters)",
                        strlen(ctx->env.build_options));
    cl_kernel pack, unpack, softmax, softmax_grad;
    flashcl_status st = fcl_program_get_kernel(ctx, flashcl_source_standard_attention, "pack_rows", options, false, &pack);
    if (st == FLASHCL_SUCCESS)
        st = fcl_program_get_kernel(ctx, flashcl_source_standard_attention, "unpack_rows", options, false, &unpack);
    if (st == FLASHCL_SUCCESS)
        st = fcl_program_get_kernel(ctx, flashcl_source_standard_attention, "row_softmax", options, false, &softmax);
    if (st == FLASHCL_SUCCESS)
        st = fcl_program_get_kernel(ctx, flashcl_source_standard_backward, "softmax_grad", grad_options,
                                false, &softmax_grad);
    if (st != FLASHCL_SUCCESS)
        return st;

    const int group = a->heads_q / a->heads_kv;
    const struct repack q = {&a->q, p->q, p->q_entry, a->seq_q, a->heads_q, group};
    const struct repack d_o = {&g->d_o, p->d_o, p->q_entry, a->seq_q, a->heads_q, group};
    const struct repack k = {&a->k, p->k, p->kv_entry, a->seq_kv, a->heads_kv, 1};
    const struct repack v = {&a->v, p->v, p->kv_entry, a->seq_kv, a->heads_kv, 1};
    /* The wait list gates every pack; the rest follows in queue order. */
    cl_int err = enqueue_repack(queue, pack, true, ws, &q, a, n_wait, wait, NULL);
    if (err == CL_SUCCESS)
        err = enqueue_repack(queue, pack, true, ws, &d_o, a, n_wait, wait, NULL);
    if (err == CL_SUCCESS)
        err = enqueue_repack(queue, pack, true, ws, &k, a, n_wait, wait, NULL);
    if (err == CL_SUCCESS)
        err = enqueue_repack(queue, pack, true, ws, &v, a, n_wait, wait, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing the standard backward's packing failed (%d)", err);

    const size_t rows = p->rows, nk = (size_t)a->seq_kv, d = (size_t)a->head_dim;
    const float scale = fcl_effective_scale(a);
    const struct gemm scores = {"S = QKᵀ", false, true, rows, nk, d,
                                p->q, d, p->q_entry, p->k, d, p->kv_entry, p->s, nk, p->s_entry};
    st = run_gemm(ctx, queue, ws, &scores, scale, p->entries);
    if (st != FLASHCL_SUCCESS)
        return st;

    /* P = softmax(S) in place (row_softmax's LSE output off). */
    const cl_ulong dp_off = p->dp;
    err = fcl_enqueue_row_softmax(queue, softmax, ws, p->s, p->s_entry, a, false);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing the standard backward's softmax failed (%d)", err);

    /* dP = dO Vᵀ; dV = Pᵀ dO into V's region (V is read only by dP). */
    const struct gemm d_p = {"dP = dO Vᵀ", false, true, rows, nk, d,
                             p->d_o, d, p->q_entry, p->v, d, p->kv_entry, p->dp, nk, p->s_entry};
    const struct gemm d_v = {"dV = Pᵀ dO", true, false, nk, d, rows,
                             p->s, nk, p->s_entry, p->d_o, d, p->q_entry, p->v, d, p->kv_entry};
    st = run_gemm(ctx, queue, ws, &d_p, 1.0f, p->entries);
    if (st == FLASHCL_SUCCESS)
        st = run_gemm(ctx, queue, ws, &d_v, 1.0f, p->entries);
    if (st != FLASHCL_SUCCESS)
        return st;

    /* dS = P ∘ (dP − rowsum(P ∘ dP)) in place over dP: one work-group of 256 per row, as the softmax. */
    const cl_ulong s_off = p->s, s_entry = p->s_entry;
    const cl_int seq_q = a->seq_q, seq_kv = a->seq_kv, grp = group;
    const size_t row_local = 256, row_global = (size_t)a->batch * (size_t)a->heads_q * (size_t)a->seq_q * row_local;
    cl_uint arg = 0;
    err = clSetKernelArg(softmax_grad, arg++, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(softmax_grad, arg++, sizeof(cl_ulong), &s_off);
    err |= clSetKernelArg(softmax_grad, arg++, sizeof(cl_ulong), &dp_off);
    err |= clSetKernelArg(softmax_grad, arg++, sizeof(cl_ulong), &s_entry);
    err |= clSetKernelArg(softmax_grad, arg++, sizeof(cl_int), &seq_q);
    err |= clSetKernelArg(softmax_grad, arg++, sizeof(cl_int), &seq_kv);
    err |= clSetKernelArg(softmax_grad, arg++, sizeof(cl_int), &grp);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, softmax_grad, 1, NULL, &row_global, &row_local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing the standard backward's softmax gradient failed (%d)", err);

    /* dQ = scale dS K into dO's region (dO is no longer read), then dK = scale dSᵀ Q into K's (K read by dQ). */
    const struct gemm d_q = {"dQ = dS K", false, false, rows, d, nk,
                             p->dp, nk, p->s_entry, p->k, d, p->kv_entry, p->d_o, d, p->q_entry};
    const struct gemm d_k = {"dK = dSᵀ Q", true, false, nk, d, rows,
                             p->dp, nk, p->s_entry, p->q, d, p->q_entry, p->k, d, p->kv_entry};
    st = run_gemm(ctx, queue, ws, &d_q, scale, p->entries);
    if (st == FLASHCL_SUCCESS)
        st = run_gemm(ctx, queue, ws, &d_k, scale, p->entries);
    if (st != FLASHCL_SUCCESS)
        return st;

    const struct repack out_q = {&g->d_q, p->d_o, p->q_entry, a->seq_q, a->heads_q, group};
    const struct repack out_k = {&g->d_k, p->k, p->kv_entry, a->seq_kv, a->heads_kv, 1};
    const struct repack out_v = {&g->d_v, p->v, p->kv_entry, a->seq_kv, a->heads_kv, 1};
    err = enqueue_repack(queue, unpack, false, ws, &out_q, a, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = enqueue_repack(queue, unpack, false, ws, &out_k, a, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = enqueue_repack(queue, unpack, false, ws, &out_v, a, 0, NULL, event);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing the standard backward's outputs failed (%d)", err);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_standard_backward(flashcl_context *ctx, const struct flashcl_attention *attn,
                                         const struct flashcl_attention_grad *grad, cl_mem workspace,
                                         cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list,
                                         cl_event *event)
{
    flashcl_status st = fcl_check_call(ctx, attn, queue, num_wait_events, wait_list);
    if (st == FLASHCL_SUCCESS)
        st = fcl_refuse_fp8(ctx, attn, "the standard path");
    struct backward_plan plan;
    if (st == FLASHCL_SUCCESS)
        st = plan_backward(ctx, attn, &plan);
    if (st == FLASHCL_SUCCESS)
        st = fcl_backward_validate(ctx, attn, grad, false, workspace, plan.elements * sizeof(float));
    if (st != FLASHCL_SUCCESS)
        return st;
    st = fcl_check_in_order(ctx, queue);
    if (st != FLASHCL_SUCCESS)
        return st;
    const size_t bytes = plan.elements * sizeof(float);
    if (plan.elements >= CLBLAST_MAX_ELEMENTS)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                    "the standard backward's workspace of %zu floats is past CLBlast's 32-bit indexing (2^31); "
                    "flashcl_backward has no such limit", plan.elements);
    if (!workspace && (bytes > ctx->max_alloc_size || bytes > ctx->global_mem_size))
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                    "the standard backward needs a %.2f GiB workspace; \"%s\" allows %.2f GiB in one allocation",
                    bytes / 1073741824.0, ctx->dev.name, ctx->max_alloc_size / 1073741824.0);
    cl_mem ws = workspace;
    if (!ws) {
        cl_int err;
        ws = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (!ws)
            return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                        "allocating the standard backward's %.2f GiB workspace failed (%d)", bytes / 1073741824.0, err);
    }
    pthread_mutex_lock(&ctx->lock);
    st = enqueue_standard_backward(ctx, attn, grad, ws, &plan, queue, num_wait_events, wait_list, event);
    pthread_mutex_unlock(&ctx->lock);
    /* Released now: OpenCL frees it once the enqueued commands that use it have completed. */
    if (!workspace)
        clReleaseMemObject(ws);
    return st;
}
