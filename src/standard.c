/* flashcl_standard_forward: standard attention through CLBlast, with S and P
 * materialised in a device workspace. */
#include <clblast_c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* CLBlast's kernels index with 32-bit ints: each GEMM call must see fewer
 * than 2^31 elements per operand. The workspace is therefore laid out in
 * (batch, kv head) entries padded to the sub-buffer alignment, and GEMMs run
 * on sub-buffers of as many whole entries as stay under that limit. */
#define CLBLAST_MAX_ELEMENTS ((size_t)1 << 31)

/* The limit, lowered by a test hook so the tests can run the chunked path
 * on small problems. */
static size_t gemm_limit(const flashcl_context *ctx)
{
    const size_t v = ctx->hooks.gemm_limit;
    return v > 0 && v < CLBLAST_MAX_ELEMENTS ? v : CLBLAST_MAX_ELEMENTS;
}

/* Workspace regions, in f32 elements: packed Q (reused for O once S exists),
 * packed K, packed V, then S/P; each region `entries` entries of its stride. */
struct workspace_plan {
    size_t entries;                      /* batch * heads_kv */
    size_t rows;                         /* group * seq_q: query rows per entry */
    size_t q_entry, kv_entry, s_entry;   /* padded entry strides */
    size_t q, k, v, s;                   /* region offsets */
    size_t elements;                     /* total */
    size_t limit;                        /* elements one GEMM call may index */
    size_t chunk;                        /* entries per GEMM call */
};

static size_t round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

static flashcl_status plan_workspace(const flashcl_context *ctx, const struct flashcl_attention *a,
                                     struct workspace_plan *p)
{
    if (a->sinks.mem)  /* likewise its softmax has no sink */
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard path does not take attn.sinks; the flash path does");
    if (fcl_head_dim_v(a) != a->head_dim)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard path takes head_dim_v = head_dim only (%d != %d); "
                        "the flash path takes both", a->head_dim_v, a->head_dim);
    if (a->alibi_slopes.mem)  /* nor a bias */
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard path does not take attn.alibi_slopes; the flash "
                        "path does");
    if (a->softcap != 0.0f)  /* its softmax kernel has no cap: refused, not computed uncapped */
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "the standard path does not take attn.softcap (%g); the flash "
                        "path does", (double)a->softcap);
    const size_t nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv, d = (size_t)a->head_dim;
    const size_t group = (size_t)(a->heads_q / a->heads_kv);
    const size_t align = ctx->base_align_bytes / sizeof(float);
    p->entries = (size_t)a->batch * (size_t)a->heads_kv;
    p->rows = group * nq;
    size_t q_e, kv_e, s_e, q_all, kv_all, s_all, total = 0;
    /* Every size checked: each region, their sum and its bytes (a wrapped
     * size would let the pack kernels write past the workspace). */
    const size_t cap = SIZE_MAX / 8;  /* entries stay far below it: round_up cannot wrap */
    if (fcl_mul_overflows(p->rows, d, &q_e) || fcl_mul_overflows(nk, d, &kv_e) || fcl_mul_overflows(p->rows, nk, &s_e) ||
        q_e > cap || kv_e > cap || s_e > cap || fcl_mul_overflows(p->entries, round_up(q_e, align), &q_all) ||
        fcl_mul_overflows(p->entries, round_up(kv_e, align), &kv_all) ||
        fcl_mul_overflows(p->entries, round_up(s_e, align), &s_all) || fcl_add_overflows(total, q_all, &total) ||
        fcl_add_overflows(total, kv_all, &total) || fcl_add_overflows(total, kv_all, &total) ||
        fcl_add_overflows(total, s_all, &total) || total > SIZE_MAX / sizeof(float))
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                    "the standard path's workspace for %zu x %zu scores per head overflows size_t", nq, nk);
    p->q_entry = round_up(q_e, align);
    p->kv_entry = round_up(kv_e, align);
    p->s_entry = round_up(s_e, align);
    p->q = 0;
    p->k = q_all;
    p->v = p->k + kv_all;
    p->s = p->v + kv_all;
    p->elements = p->s + s_all;
    size_t largest = p->s_entry > p->q_entry ? p->s_entry : p->q_entry;
    largest = largest > p->kv_entry ? largest : p->kv_entry;
    p->limit = gemm_limit(ctx);
    p->chunk = largest < p->limit ? (p->limit - 1) / largest : 0;
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_standard_workspace_bytes(const flashcl_context *ctx, const struct flashcl_attention *a,
                                           size_t *bytes)
{
    struct workspace_plan plan = {0};
    const flashcl_status st = plan_workspace(ctx, a, &plan);
    if (st == FLASHCL_SUCCESS)
        *bytes = plan.elements * sizeof(float);
    return st;
}

flashcl_status flashcl_standard_workspace_size(flashcl_context *ctx, const struct flashcl_attention *attn,
                                               size_t *bytes)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, bytes);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = fcl_validate_attention(ctx, attn);
    if (st == FLASHCL_SUCCESS)
        st = fcl_refuse_fp8(ctx, attn, "the standard path");
    struct workspace_plan plan = {0};
    if (st == FLASHCL_SUCCESS)
        st = plan_workspace(ctx, attn, &plan);
    if (st == FLASHCL_SUCCESS)
        *bytes = plan.elements * sizeof(float);
    return st;
}

static flashcl_status check_fits(const flashcl_context *ctx, size_t bytes)
{
    if (bytes > ctx->max_alloc_size || bytes > ctx->global_mem_size)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                    "standard attention needs a %.2f GiB workspace (%zu bytes); \"%s\" allows %.2f GiB "
                    "in one allocation and has %.2f GiB in all",
                    bytes / 1073741824.0, bytes, ctx->dev.name, ctx->max_alloc_size / 1073741824.0,
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
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "workspace is not a valid cl_mem (%d)", err);
    if (ws_ctx != ctx->cl_ctx)
        return fcl_fail(ctx, FLASHCL_INVALID_CONTEXT, "workspace belongs to another cl_context");
    if (size < needed)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS, "workspace holds %zu bytes; this call needs %zu", size,
                    needed);
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_check_in_order(const flashcl_context *ctx, cl_command_queue queue)
{
    cl_command_queue_properties props = 0;
    const cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof(props), &props, NULL);
    if (err != CL_SUCCESS)  /* unknown order: refused, never assumed in-order */
        return fcl_fail(ctx, FLASHCL_INVALID_COMMAND_QUEUE, "cannot query the queue's properties (%d)", err);
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return fcl_fail(ctx, FLASHCL_INVALID_COMMAND_QUEUE,
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

/* Enqueues pack of one tensor into the workspace at element offset dst_off. */
static cl_int enqueue_pack(cl_command_queue queue, cl_kernel pack, const flashcl_tensor *t, size_t esize,
                           cl_mem ws, cl_ulong dst_off, cl_ulong entry, const struct repack_shape *r,
                           cl_uint n_wait, const cl_event *wait)
{
    cl_uint arg = 0;
    cl_int err = fcl_set_view_args(pack, &arg, t, esize);
    err |= clSetKernelArg(pack, 5, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(pack, 6, sizeof(cl_ulong), &dst_off);
    err |= clSetKernelArg(pack, 7, sizeof(cl_ulong), &entry);
    err |= set_repack_args(pack, 8, r);
    if (err != CL_SUCCESS)
        return err;
    return enqueue_elementwise(queue, pack, (size_t)r->total, n_wait, wait, NULL);
}

static flashcl_status clblast_failed(const flashcl_context *ctx, const char *what, CLBlastStatusCode code)
{
    if (code == CLBlastOpenCLOutOfResources || code == CLBlastTempBufferAllocFailure)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY, "CLBlast's %s ran out of device memory (%d)",
                    what, (int)code);
    return fcl_fail(ctx, FLASHCL_ERROR_CLBLAST, "CLBlast's %s failed with status %d", what, (int)code);
}

enum gemm_kind {
    GEMM_SCORES,  /* S = scale · Q Kᵀ */
    GEMM_OUTPUT   /* O = P V, written over packed Q */
};

/* A sub-buffer of `count` elements of ws from element `first`. */
static cl_mem region(cl_mem ws, size_t first, size_t count, cl_int *err)
{
    const cl_buffer_region r = {first * sizeof(float), count * sizeof(float)};
    return clCreateSubBuffer(ws, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, err);
}

/* Runs one strided-batched GEMM over all entries, plan->chunk entries per
 * CLBlast call, each call on sub-buffers so its indices fit in 32 bits. */
static flashcl_status gemm_chunks(const flashcl_context *ctx, cl_command_queue queue, cl_mem ws,
                                  const struct workspace_plan *p, enum gemm_kind kind, float alpha, size_t d,
                                  size_t nk)
{
    const bool whole = p->elements < p->limit;  /* one call on ws itself */
    for (size_t first = 0; first < p->entries; first += p->chunk) {
        const size_t n = p->entries - first < p->chunk ? p->entries - first : p->chunk;
        cl_int err = CL_SUCCESS;
        cl_mem q = ws, kv = ws, s = ws;
        size_t q_off = p->q, kv_off = kind == GEMM_SCORES ? p->k : p->v, s_off = p->s;
        if (!whole) {
            q = region(ws, p->q + first * p->q_entry, n * p->q_entry, &err);
            kv = err ? NULL : region(ws, kv_off + first * p->kv_entry, n * p->kv_entry, &err);
            s = err ? NULL : region(ws, p->s + first * p->s_entry, n * p->s_entry, &err);
            q_off = kv_off = s_off = 0;
        }
        CLBlastStatusCode code = CLBlastSuccess;
        if (err == CL_SUCCESS && kind == GEMM_SCORES)
            code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, p->rows,
                                              nk, d, alpha, q, q_off, d, p->q_entry, kv, kv_off, d, p->kv_entry, 0.0f,
                                              s, s_off, nk, p->s_entry, n, &queue, NULL);
        else if (err == CL_SUCCESS)
            code = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, p->rows,
                                              d, nk, alpha, s, s_off, nk, p->s_entry, kv, kv_off, d, p->kv_entry, 0.0f,
                                              q, q_off, d, p->q_entry, n, &queue, NULL);
        if (!whole) {  /* released now, freed once the GEMM is done with them */
            if (q)
                clReleaseMemObject(q);
            if (kv)
                clReleaseMemObject(kv);
            if (s)
                clReleaseMemObject(s);
        }
        if (err != CL_SUCCESS)
            return fcl_fail(ctx, (flashcl_status)err,
                        "creating sub-buffers of the standard path's workspace failed (%d); a workspace over "
                        "2^31 floats must be a buffer, not itself a sub-buffer", err);
        if (code != CLBlastSuccess)
            return clblast_failed(ctx, kind == GEMM_SCORES ? "SGEMM for S = QKᵀ" : "SGEMM for O = PV", code);
    }
    return FLASHCL_SUCCESS;
}

/* The whole chain; caller holds ctx->lock. */
static flashcl_status enqueue_standard(flashcl_context *ctx, const struct flashcl_attention *a, cl_mem ws,
                                       const struct workspace_plan *plan, cl_command_queue queue,
                                       cl_uint n_wait, const cl_event *wait, cl_event *event)
{
    char options[512];
    snprintf(options, sizeof(options), "-cl-std=CL1.2 -DDTYPE=%d", fcl_dtype_define(a->q.dtype));
    if (!fcl_append_build_options(ctx, options, sizeof(options)))
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "FLASHCL_BUILD_OPTIONS is too long (%zu characters)",
                        strlen(ctx->env.build_options));
    cl_kernel pack, unpack, softmax;
    flashcl_status st = fcl_program_get_kernel(ctx, flashcl_source_standard_attention, "pack_rows", options, false, &pack);
    if (st == FLASHCL_SUCCESS)
        st = fcl_program_get_kernel(ctx, flashcl_source_standard_attention, "unpack_rows", options, false, &unpack);
    if (st == FLASHCL_SUCCESS)
        st = fcl_program_get_kernel(ctx, flashcl_source_standard_attention, "row_softmax", options, false, &softmax);
    if (st != FLASHCL_SUCCESS)
        return st;

    const size_t esize = flashcl_dtype_size(a->q.dtype);
    const size_t b = (size_t)a->batch, nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv, d = (size_t)a->head_dim;
    const size_t hq = (size_t)a->heads_q, hk = (size_t)a->heads_kv, group = hq / hk;
    (void)d;
    const struct repack_shape rq = {(cl_ulong)(b * nq * hq * d), a->seq_q, a->heads_q, (cl_int)group, a->head_dim};
    const struct repack_shape rkv = {(cl_ulong)(b * nk * hk * d), a->seq_kv, a->heads_kv, 1, a->head_dim};

    /* The wait list gates the packs; everything after follows in queue order. */
    cl_int err = enqueue_pack(queue, pack, &a->q, esize, ws, plan->q, plan->q_entry, &rq, n_wait, wait);
    if (err == CL_SUCCESS)
        err = enqueue_pack(queue, pack, &a->k, esize, ws, plan->k, plan->kv_entry, &rkv, n_wait, wait);
    if (err == CL_SUCCESS)
        err = enqueue_pack(queue, pack, &a->v, esize, ws, plan->v, plan->kv_entry, &rkv, n_wait, wait);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing the standard path's packing failed (%d)", err);

    /* S[e] (group·Nq × Nk) = scale · Q[e] · K[e]ᵀ, one batch entry per (batch, kv head). */
    st = gemm_chunks(ctx, queue, ws, plan, GEMM_SCORES, fcl_effective_scale(a), (size_t)a->head_dim, nk);
    if (st != FLASHCL_SUCCESS)
        return st;

    err = fcl_enqueue_row_softmax(queue, softmax, ws, plan->s, plan->s_entry, a, true);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing the row softmax failed (%d)", err);

    /* O[e] (group·Nq × d) = P[e] · V[e], into the packed-Q region (Q is no longer needed). */
    st = gemm_chunks(ctx, queue, ws, plan, GEMM_OUTPUT, 1.0f, (size_t)a->head_dim, nk);
    if (st != FLASHCL_SUCCESS)
        return st;

    const cl_ulong o_src = plan->q, o_entry = plan->q_entry;
    err = clSetKernelArg(unpack, 0, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(unpack, 1, sizeof(cl_ulong), &o_src);
    err |= clSetKernelArg(unpack, 2, sizeof(cl_ulong), &o_entry);
    cl_uint o_arg = 3;
    err |= fcl_set_view_args(unpack, &o_arg, &a->o, esize);
    err |= set_repack_args(unpack, 8, &rq);
    if (err == CL_SUCCESS)
        err = enqueue_elementwise(queue, unpack, (size_t)rq.total, 0, NULL, event);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing the standard path's output failed (%d)", err);
    return FLASHCL_SUCCESS;
}

cl_int fcl_enqueue_row_softmax(cl_command_queue queue, cl_kernel softmax, cl_mem ws, cl_ulong s_off, cl_ulong s_entry,
                               const struct flashcl_attention *a, bool write_lse)
{
    const cl_int seq_q = a->seq_q, seq_kv = a->seq_kv, heads_q = a->heads_q, group = a->heads_q / a->heads_kv;
    cl_int window_left, window_right;
    fcl_attention_window(a, &window_left, &window_right);
    const flashcl_tensor none = {0};
    const flashcl_tensor *lse = write_lse && a->lse.mem ? &a->lse : &none;
    const cl_int has_lse = lse->mem != NULL;
    cl_uint arg = 0;
    cl_int err = clSetKernelArg(softmax, arg++, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_ulong), &s_off);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_ulong), &s_entry);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &seq_q);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &seq_kv);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &heads_q);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &group);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &window_left);
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &window_right);
    err |= fcl_set_view_args(softmax, &arg, lse, sizeof(float));
    err |= clSetKernelArg(softmax, arg++, sizeof(cl_int), &has_lse);
    /* One work-group of 256 per row of S. */
    const size_t local = 256, global = (size_t)a->batch * (size_t)a->heads_q * (size_t)a->seq_q * local;
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(queue, softmax, 1, NULL, &global, &local, 0, NULL, NULL);
    return err;
}

flashcl_status flashcl_standard_forward(flashcl_context *ctx, const struct flashcl_attention *attn, cl_mem workspace,
                                        cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list,
                                        cl_event *event)
{
    flashcl_status st = fcl_check_call(ctx, attn, queue, num_wait_events, wait_list);
    if (st == FLASHCL_SUCCESS)
        st = fcl_refuse_fp8(ctx, attn, "the standard path");
    if (st == FLASHCL_SUCCESS)
        st = fcl_check_in_order(ctx, queue);
    struct workspace_plan plan = {0};
    if (st == FLASHCL_SUCCESS)
        st = plan_workspace(ctx, attn, &plan);
    if (st != FLASHCL_SUCCESS)
        return st;
    const size_t bytes = plan.elements * sizeof(float);
    /* The memory wall first, then CLBlast's own limit, then the allocation. */
    st = workspace ? check_workspace(ctx, workspace, bytes) : check_fits(ctx, bytes);
    if (st == FLASHCL_SUCCESS && plan.chunk == 0)
        st = fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                  "one head group's scores (%zu x %d) reach %zu elements, past CLBlast's 32-bit indexing; "
                  "the flash path has no such limit", plan.rows, attn->seq_kv, plan.limit);
    cl_mem ws = workspace;
    if (st == FLASHCL_SUCCESS && !ws) {
        cl_int err;
        ws = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (!ws)
            st = fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                      "allocating the standard path's %.2f GiB workspace failed (%d)", bytes / 1073741824.0, err);
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
