/* flashcl_backward: validate, plan (the kernel table's backward entries: "backward-tensor-core",
 * "backward-tiled", then "backward"), build (once), enqueue its three steps (D, then dK/dV, then dQ). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Elements of the D workspace, f32 [batch, heads_q, seq_q]; false on overflow. */
static bool backward_workspace_elements(const struct flashcl_attention *a, size_t *elements)
{
    const size_t rows_per_batch = (size_t)a->heads_q * (size_t)a->seq_q;  /* < 2^61: both are int */
    if ((size_t)a->batch > SIZE_MAX / sizeof(float) / rows_per_batch)
        return false;
    *elements = (size_t)a->batch * rows_per_batch;
    return true;
}

/* A plan's workspace, in 4-byte words: D [batch, heads_q, seq_q]; where the kernel accumulates dQ
 * (kernel_info.dq_accumulated), then the f32 accumulator [batch, heads_q, seq_q, head_dim] from
 * accum_off (256-byte aligned) and, where its adds take turns (not dq_unordered), the turn counters (one
 * ticket counter, one a chunk of query rows, fcl_backward_mma_chunk) from turns_off. false on overflow. */
struct backward_workspace {
    size_t accum_off, turns_off, bytes;
};

static bool backward_workspace_layout(const struct flashcl_attention *a, const struct plan *plan,
                                      struct backward_workspace *w)
{
    size_t rows = 0;
    if (!backward_workspace_elements(a, &rows))
        return false;
    *w = (struct backward_workspace){0, 0, rows * sizeof(float)};
    if (!plan || !plan->kernel->dq_accumulated)
        return true;
    const size_t d = (size_t)a->head_dim, chunk = (size_t)fcl_backward_mma_chunk(plan->block_m);
    const size_t blocks = ((size_t)a->seq_q + chunk - 1) / chunk;
    const size_t limit = SIZE_MAX / sizeof(float) / 2;
    if (rows > limit / d || (size_t)a->batch * (size_t)a->heads_q > limit / blocks)
        return false;
    w->accum_off = (rows + 63) / 64 * 64;
    w->turns_off = w->accum_off + rows * d;
    const size_t turns = plan->kernel->dq_unordered ? 0 : 1 + (size_t)a->batch * (size_t)a->heads_q * blocks;
    const size_t words = w->turns_off + turns;
    if (words > limit)
        return false;
    w->bytes = words * sizeof(float);
    return true;
}

flashcl_status fcl_backward_validate(const flashcl_context *ctx, const struct flashcl_attention *a,
                                 const struct flashcl_attention_grad *g, bool needs_lse, cl_mem workspace,
                                 size_t ws_bytes)
{
    if (!g)
        return fcl_fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "grad is NULL");
    if (needs_lse && !a->lse.mem)
        return fcl_fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT,
                    "attn.lse.mem is NULL; the backward pass reads the forward's log-sum-exp");
    const flashcl_status reserved = FCL_CHECK_RESERVED(ctx, "grad.reserved", g->reserved);
    if (reserved != FLASHCL_SUCCESS)
        return reserved;
    const flashcl_status fp8 = fcl_refuse_fp8(ctx, a, "flashcl_backward");
    if (fp8 != FLASHCL_SUCCESS)
        return fp8;
    const struct { const char *name; const flashcl_tensor *t; } grads[] = {
        {"grad.d_o", &g->d_o}, {"grad.d_q", &g->d_q}, {"grad.d_k", &g->d_k}, {"grad.d_v", &g->d_v}};
    for (size_t i = 0; i < 4; i++) {
        if (!grads[i].t->mem)
            return fcl_fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s.mem is NULL", grads[i].name);
        if (flashcl_dtype_size(grads[i].t->dtype) == 0)
            return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "%s.dtype = %d is not a flashcl_dtype", grads[i].name,
                        (int)grads[i].t->dtype);
        if (grads[i].t->dtype != a->q.dtype)
            return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "%s.dtype = %d differs from attn.q.dtype = %d",
                        grads[i].name, (int)grads[i].t->dtype, (int)a->q.dtype);
        const flashcl_status descale = fcl_check_descale(ctx, grads[i].name + 5, grads[i].t);  /* after "grad." */
        if (descale != FLASHCL_SUCCESS)
            return descale;
    }

    if (g->d_sinks.mem && !a->sinks.mem)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "grad.d_sinks is given but attn.sinks is not");
    if (!g->d_sinks.mem && g->d_sinks.offset)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "grad.d_sinks.offset = %zu with grad.d_sinks.mem NULL",
                        g->d_sinks.offset);
    const flashcl_tensor sinks = fcl_vector_view(&a->sinks), d_sinks = fcl_vector_view(&g->d_sinks);
    const flashcl_tensor slopes = fcl_vector_view(&a->alibi_slopes);

    /* The workspace is checked like a written view: one row of ws_bytes / 4 floats. */
    const flashcl_tensor ws_view = {.mem = workspace, .dtype = FLASHCL_F32};
    if (workspace) {
        size_t ws_size = 0;
        const cl_int err = clGetMemObjectInfo(workspace, CL_MEM_SIZE, sizeof(ws_size), &ws_size, NULL);
        if (err != CL_SUCCESS)
            return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "workspace is not a valid cl_mem (%d)", err);
        if (ws_size < ws_bytes)
            return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "workspace holds %zu bytes; this call needs %zu "
                        "(its workspace_size function says so)", ws_size, ws_bytes);
    }

    const size_t b = (size_t)a->batch, nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv;
    const size_t hq = (size_t)a->heads_q, hk = (size_t)a->heads_kv, d = (size_t)a->head_dim;
    const size_t dv = (size_t)fcl_head_dim_v(a);  /* V's, O's and their gradients' */
    const struct view_spec views[] = {
        {"attn.q", &a->q, {b, nq, hq}, d},
        {"attn.k", &a->k, {b, nk, hk}, d},
        {"attn.v", &a->v, {b, nk, hk}, dv},
        {"attn.o", &a->o, {b, nq, hq}, dv},
        {"attn.lse", &a->lse, {b, nq, hq}, 1},
        {"attn.sinks", &sinks, {1, 1, hq}, 1},
        {"attn.alibi_slopes", &slopes, {1, 1, hq}, 1},
        {"grad.d_o", &g->d_o, {b, nq, hq}, dv},
        /* written from here on */
        {"grad.d_q", &g->d_q, {b, nq, hq}, d},
        {"grad.d_k", &g->d_k, {b, nk, hk}, d},
        {"grad.d_v", &g->d_v, {b, nk, hk}, dv},
        {"grad.d_sinks", &d_sinks, {1, 1, hq}, 1},
        {"workspace", &ws_view, {1, 1, 1}, ws_bytes / sizeof(float)},
    };
    const int first_written = 8;
    /* The LSE only when present (the standard path does not read it), the workspace only when given. */
    struct view_spec present[sizeof(views) / sizeof(views[0])];
    int n = 0, first_output = 0;
    for (int i = 0; i < (int)(sizeof(views) / sizeof(views[0])); i++) {
        if (i == first_written)
            first_output = n;
        if (views[i].t->mem)
            present[n++] = views[i];
    }
    return fcl_validate_views(ctx, present, n, first_output);
}

static void backward_problem(const struct flashcl_attention *attn, const struct flashcl_attention_grad *grad,
                             struct problem *p);

/* The flash path's checks: backward_validate, then the plan, whose workspace (D, and dQ's
 * accumulator where the planned kernel adds dQ up) the given one must hold. */
static flashcl_status validate_and_plan(const flashcl_context *ctx, const struct flashcl_attention *a,
                                        const struct flashcl_attention_grad *g, cl_mem workspace,
                                        struct problem *p, struct plan *plan, struct backward_workspace *w)
{
    size_t rows = 0;
    if (!backward_workspace_elements(a, &rows))
        return fcl_fail(ctx, FLASHCL_ERROR_OVERFLOW, "the backward workspace for batch %d x heads_q %d x seq_q %d "
                    "overflows size_t", a->batch, a->heads_q, a->seq_q);
    flashcl_status st = fcl_backward_validate(ctx, a, g, true, NULL, 0);
    if (st != FLASHCL_SUCCESS)
        return st;
    backward_problem(a, g, p);
    st = fcl_plan(ctx, p, fcl_scale_log2(a), plan);
    if (st != FLASHCL_SUCCESS)
        return st;
    if (!backward_workspace_layout(a, plan, w))
        return fcl_fail(ctx, FLASHCL_ERROR_OVERFLOW, "the backward workspace for batch %d x heads_q %d x seq_q %d x "
                    "head_dim %d overflows size_t", a->batch, a->heads_q, a->seq_q, a->head_dim);
    return workspace ? fcl_backward_validate(ctx, a, g, true, workspace, w->bytes) : FLASHCL_SUCCESS;
}

flashcl_status flashcl_backward_workspace_size(flashcl_context *ctx, const struct flashcl_attention *attn,
                                               const struct flashcl_attention_grad *grad, size_t *bytes)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, grad, bytes);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = fcl_validate_attention(ctx, attn);
    struct problem p;
    struct plan plan;
    struct backward_workspace w;
    if (st == FLASHCL_SUCCESS)
        st = validate_and_plan(ctx, attn, grad, NULL, &p, &plan, &w);
    if (st == FLASHCL_SUCCESS)
        *bytes = w.bytes;
    return st;
}

/* The arguments that close flash_backward_dkdv's and flash_backward_dq's lists: the sizes, the scales and
 * the ALiBi slopes. */
static cl_int set_tail_args(cl_kernel kernel, cl_uint *arg, const struct flashcl_attention *a)
{
    const cl_int seq_q = a->seq_q, seq_kv = a->seq_kv, group = a->heads_q / a->heads_kv;
    const float scale = fcl_effective_scale(a), scale_log2 = fcl_scale_log2(a);
    cl_int err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &seq_q);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &seq_kv);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_int), &group);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_float), &scale_log2);
    err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_float), &scale);
    return err | fcl_set_vector_args(kernel, arg, &a->alibi_slopes);
}

/* The arguments that open flash_backward_dkdv's and flash_backward_dq's lists: Q, K, V, dO, LSE and the
 * workspace (D's rows). */
static cl_int set_input_args(cl_kernel kernel, cl_uint *arg, const struct flashcl_attention *a,
                             const struct flashcl_attention_grad *g, cl_mem ws, size_t esize)
{
    cl_int err = fcl_set_view_args(kernel, arg, &a->q, esize);
    err |= fcl_set_view_args(kernel, arg, &a->k, esize);
    err |= fcl_set_view_args(kernel, arg, &a->v, esize);
    err |= fcl_set_view_args(kernel, arg, &g->d_o, esize);
    err |= fcl_set_view_args(kernel, arg, &a->lse, sizeof(float));
    return err | clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), &ws);
}

/* dot -> dkdv -> dq, each gated by the previous one's event, so the chain
 * holds on out-of-order queues too. Caller holds ctx->lock. */
/* FLASHCL_STEP_TIMES=1: waits for the call's steps and logs each one's time from the queue's profiling events
 * (where the queue has profiling on), so a tuner sees where the backward's time goes. */
static void log_step_times(flashcl_context *ctx, const struct kernel_info *k, const char *first_step, cl_event dot,
                           cl_event dkdv, cl_event dq)
{
    const cl_event steps[3] = {dot, dkdv, dq};
    double ms[3];
    if (clWaitForEvents(3, steps) != CL_SUCCESS) {
        fcl_log_msg(ctx, FLASHCL_LOG_WARN, "FLASHCL_STEP_TIMES: waiting for the backward's steps failed");
        return;
    }
    for (int i = 0; i < 3; i++) {
        cl_ulong start, end;
        if (clGetEventProfilingInfo(steps[i], CL_PROFILING_COMMAND_START, sizeof(start), &start, NULL) != CL_SUCCESS ||
            clGetEventProfilingInfo(steps[i], CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL) != CL_SUCCESS) {
            fcl_log_msg(ctx, FLASHCL_LOG_WARN, "FLASHCL_STEP_TIMES: the queue has no profiling information");
            return;
        }
        ms[i] = (double)(end - start) * 1e-6;
    }
    fcl_log_msg(ctx, FLASHCL_LOG_INFO, "backward steps (%s): %s %.4f ms, %s %.4f ms, %s %.4f ms", k->name, first_step,
                ms[0], k->steps[1], ms[1], k->steps[2], ms[2]);
}

static flashcl_status enqueue_backward(flashcl_context *ctx, const struct flashcl_attention *a,
                                       const struct flashcl_attention_grad *g, const struct plan *plan,
                                       cl_mem ws, size_t ws_bytes, cl_command_queue queue, cl_uint n_wait,
                                       const cl_event *wait, cl_event *event)
{
    const struct kernel_info *k = plan->kernel;
    const size_t esize = flashcl_dtype_size(a->q.dtype);
    /* A retry's plan (after a kernel failed) comes later in the table: it never needs more. */
    struct backward_workspace w;
    if (!backward_workspace_layout(a, plan, &w) || w.bytes > ws_bytes)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "%s needs a %zu-byte workspace; this one holds %zu", k->name,
                        w.bytes, ws_bytes);
    const cl_ulong accum_off = w.accum_off, turns_off = w.turns_off;
    cl_kernel dot, dkdv, dq;
    const bool sm90a = (k->needs & NEEDS_SM90A) && !ctx->dev.tensor_cores_emulated;  /* emulated: plain OpenCL C */
    flashcl_status st = fcl_program_get_kernel(ctx, k->source, k->steps[0], plan->options, sm90a, &dot);
    if (st == FLASHCL_SUCCESS)
        st = fcl_program_get_kernel(ctx, k->source, k->steps[1], plan->options, sm90a, &dkdv);
    if (st == FLASHCL_SUCCESS)
        st = fcl_program_get_kernel(ctx, k->source, k->steps[2], plan->options, sm90a, &dq);
    cl_kernel sink_grad = NULL;  /* cl/backward_dot.h's, in every backward program */
    if (st == FLASHCL_SUCCESS && g->d_sinks.mem)
        st = fcl_program_get_kernel(ctx, k->source, "flash_backward_sink_grad", plan->options, sm90a, &sink_grad);
    if (st != FLASHCL_SUCCESS)
        return st;

    /* flash_backward_dot (o, d_o, delta, seq_q) */
    const cl_int seq_q = a->seq_q;
    cl_uint arg = 0;
    cl_int err = fcl_set_view_args(dot, &arg, &a->o, esize);
    err |= fcl_set_view_args(dot, &arg, &g->d_o, esize);
    err |= clSetKernelArg(dot, arg++, sizeof(cl_mem), &ws);
    err |= clSetKernelArg(dot, arg++, sizeof(cl_int), &seq_q);
    if (k->dq_accumulated) {
        err |= clSetKernelArg(dot, arg++, sizeof(cl_ulong), &accum_off);
        err |= clSetKernelArg(dot, arg++, sizeof(cl_ulong), &turns_off);
    }

    /* flash_backward_dkdv (q, k, v, d_o, lse, delta, d_k, d_v, seq_q, seq_kv, group, scale_log2, scale) */
    arg = 0;
    err |= set_input_args(dkdv, &arg, a, g, ws, esize);
    if (k->dq_accumulated) {  /* (workspace, accum_off, turns_off) */
        err |= clSetKernelArg(dkdv, arg++, sizeof(cl_mem), &ws);
        err |= clSetKernelArg(dkdv, arg++, sizeof(cl_ulong), &accum_off);
        err |= clSetKernelArg(dkdv, arg++, sizeof(cl_ulong), &turns_off);
    }
    err |= fcl_set_view_args(dkdv, &arg, &g->d_k, esize);
    err |= fcl_set_view_args(dkdv, &arg, &g->d_v, esize);
    err |= set_tail_args(dkdv, &arg, a);

    if (sink_grad) {
        /* flash_backward_sink_grad (lse, delta, sinks, d_sinks, seq_q, batch) */
        const cl_int batch = a->batch;
        arg = 0;
        err |= fcl_set_view_args(sink_grad, &arg, &a->lse, sizeof(float));
        err |= clSetKernelArg(sink_grad, arg++, sizeof(cl_mem), &ws);
        err |= fcl_set_vector_args(sink_grad, &arg, &a->sinks);
        err |= fcl_set_vector_args(sink_grad, &arg, &g->d_sinks);
        err |= clSetKernelArg(sink_grad, arg++, sizeof(cl_int), &seq_q);
        err |= clSetKernelArg(sink_grad, arg++, sizeof(cl_int), &batch);
    }

    arg = 0;
    if (k->dq_accumulated) {
        /* flash_backward_mma_dq_convert (workspace, accum_off, d_q, seq_q, scale) */
        const cl_float scale = fcl_effective_scale(a);
        err |= clSetKernelArg(dq, arg++, sizeof(cl_mem), &ws);
        err |= clSetKernelArg(dq, arg++, sizeof(cl_ulong), &accum_off);
        err |= fcl_set_view_args(dq, &arg, &g->d_q, esize);
        err |= clSetKernelArg(dq, arg++, sizeof(cl_int), &seq_q);
        err |= clSetKernelArg(dq, arg++, sizeof(cl_float), &scale);
    } else {
        /* flash_backward_dq (q, k, v, d_o, lse, delta, d_q, seq_q, seq_kv, group, scale_log2, scale) */
        err |= set_input_args(dq, &arg, a, g, ws, esize);
        err |= fcl_set_view_args(dq, &arg, &g->d_q, esize);
        err |= set_tail_args(dq, &arg, a);
    }
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "setting the backward kernels' arguments failed");

    /* Each step's work-group: the plan's, unless the kernel's steps differ (backward-tiled). */
    size_t wg[3];
    for (int step = 0; step < 3; step++)
        wg[step] = (size_t)(k->step_workgroup ? k->step_workgroup(&ctx->dev, &plan->shape, step) : plan->workgroup);
    const size_t dot_local[3] = {wg[0], 1, 1}, dkdv_local[3] = {wg[1], 1, 1}, dq_local[3] = {wg[2], 1, 1};
    const size_t b = (size_t)a->batch, hq = (size_t)a->heads_q, hk = (size_t)a->heads_kv;
    const size_t nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv;
    /* The keys a dK/dV work-group owns, and the query rows a dQ work-group owns. */
    struct problem problem;
    backward_problem(a, g, &problem);
    const size_t bn = k->owned_rows ? (size_t)k->owned_rows(&plan->shape, &problem, 1) : (size_t)plan->block_n;
    const size_t bm = k->owned_rows ? (size_t)k->owned_rows(&plan->shape, &problem, 2) : (size_t)plan->block_m;
    const size_t dot_global[3] = {(nq + wg[0] - 1) / wg[0] * wg[0], hq, b};
    const size_t dkdv_global[3] = {(nk + bn - 1) / bn * wg[1], hk, b};
    /* The convert step: a work-item per pair of dQ columns; else a work-group per query block. */
    const size_t pairs = nq * (size_t)(a->head_dim / 2);
    const size_t dq_global[3] = {k->dq_accumulated ? (pairs + wg[2] - 1) / wg[2] * wg[2] : (nq + bm - 1) / bm * wg[2],
                                 hq, b};

    cl_event dot_done = NULL, dkdv_done = NULL;
    int stage = 0;
    const char *failed_step = NULL;  /* the sink step's name where it failed, else k->steps[stage] */
    err = clEnqueueNDRangeKernel(queue, dot, 3, NULL, dot_global, dot_local, n_wait, wait, &dot_done);
    if (err == CL_SUCCESS && sink_grad) {  /* in the chain after D: the call's event then covers d_sinks too */
        const size_t sink_global[3] = {wg[0], hq, 1};
        cl_event sink_done = NULL;
        err = clEnqueueNDRangeKernel(queue, sink_grad, 3, NULL, sink_global, dot_local, 1, &dot_done, &sink_done);
        clReleaseEvent(dot_done);
        dot_done = err == CL_SUCCESS ? sink_done : NULL;
        if (err != CL_SUCCESS)
            failed_step = "flash_backward_sink_grad";
    }
    if (err == CL_SUCCESS) {
        stage = 1;
        err = clEnqueueNDRangeKernel(queue, dkdv, 3, NULL, dkdv_global, dkdv_local, 1, &dot_done, &dkdv_done);
    }
    cl_event dq_done = NULL;
    if (err == CL_SUCCESS) {
        stage = 2;
        err = clEnqueueNDRangeKernel(queue, dq, 3, NULL, dq_global, dq_local, 1, &dkdv_done, &dq_done);
    }
    if (err == CL_SUCCESS && ctx->env.step_times)
        log_step_times(ctx, k, sink_grad ? "flash_backward_sink_grad" : k->steps[0], dot_done, dkdv_done, dq_done);
    if (dq_done && event)
        *event = dq_done;
    else if (dq_done)
        clReleaseEvent(dq_done);
    if (dot_done)
        clReleaseEvent(dot_done);
    if (dkdv_done)
        clReleaseEvent(dkdv_done);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, (flashcl_status)err, "enqueueing %s (tile %dx%d, %zu work-items per group, %zu bytes "
                    "local) failed (%d)", failed_step ? failed_step : k->steps[stage], plan->block_m, plan->block_n,
                    wg[stage], plan->local_bytes, err);
    fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "backward: %s %s", k->name, plan->options);
    return FLASHCL_SUCCESS;
}

/* A view's offset and strides are multiples of 16 bytes (as the planner's check for the forward). */
static bool grad_rows_16b(const flashcl_tensor *t)
{
    const size_t esize = flashcl_dtype_size(t->dtype);
    return t->offset % 16 == 0 && (t->stride_batch * esize) % 16 == 0 && (t->stride_seq * esize) % 16 == 0 &&
           (t->stride_head * esize) % 16 == 0;
}

/* rows_16b: Q, K, V, O (fcl_forward_problem) and every gradient view (the tensor-core kernels copy
 * 16-byte chunks of Q, K, V, dO and write dQ, dK, dV as 4-byte pairs). */
static void backward_problem(const struct flashcl_attention *attn, const struct flashcl_attention_grad *grad,
                             struct problem *p)
{
    fcl_forward_problem(attn, p);
    p->op = OP_BACKWARD;
    p->rows_16b = p->rows_16b && grad_rows_16b(&grad->d_o) && grad_rows_16b(&grad->d_q) &&
                  grad_rows_16b(&grad->d_k) && grad_rows_16b(&grad->d_v);
}

flashcl_status flashcl_backward_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                       const struct flashcl_attention_grad *grad, struct flashcl_tile *out)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, grad, out);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = fcl_validate_attention(ctx, attn);
    struct problem p;
    struct backward_workspace w;
    struct plan plan;
    if (st == FLASHCL_SUCCESS)
        st = validate_and_plan(ctx, attn, grad, NULL, &p, &plan, &w);
    if (st == FLASHCL_SUCCESS)
        fcl_plan_to_tile(&plan, out);
    return st;
}

/* One backward call's arguments, for fcl_run_planned. */
struct backward_call {
    const struct flashcl_attention *attn;
    const struct flashcl_attention_grad *grad;
    cl_mem ws;
    size_t ws_bytes;
    cl_command_queue queue;
    cl_uint num_wait_events;
    const cl_event *wait_list;
    cl_event *event;
};

static flashcl_status enqueue_backward_call(flashcl_context *ctx, const struct plan *plan, void *call)
{
    const struct backward_call *c = call;
    pthread_mutex_lock(&ctx->lock);
    const flashcl_status st = enqueue_backward(ctx, c->attn, c->grad, plan, c->ws, c->ws_bytes, c->queue,
                                               c->num_wait_events, c->wait_list, c->event);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

flashcl_status flashcl_backward(flashcl_context *ctx, const struct flashcl_attention *attn,
                                const struct flashcl_attention_grad *grad, cl_mem workspace,
                                cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list,
                                cl_event *event)
{
    flashcl_status st = fcl_check_call(ctx, attn, queue, num_wait_events, wait_list);
    struct problem p;
    struct plan plan;
    struct backward_workspace w;
    if (st == FLASHCL_SUCCESS)
        st = validate_and_plan(ctx, attn, grad, workspace, &p, &plan, &w);
    if (st != FLASHCL_SUCCESS)
        return st;

    cl_mem ws = workspace;
    size_t ws_bytes = w.bytes;
    if (ws)
        clGetMemObjectInfo(ws, CL_MEM_SIZE, sizeof(ws_bytes), &ws_bytes, NULL);  /* validated: >= w.bytes */
    else {
        cl_int err;
        ws = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, w.bytes, NULL, &err);
        if (!ws)
            return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                        "allocating the backward pass's %zu-byte workspace failed (%d)", w.bytes, err);
    }
    /* A retry after a kernel failure enqueues every step anew (D, and dQ's accumulator, are rewritten whole). */
    struct backward_call call = {attn, grad, ws, ws_bytes, queue, num_wait_events, wait_list, event};
    st = fcl_run_planned(ctx, &p, fcl_scale_log2(attn), &plan, enqueue_backward_call, &call);  /* planned once */
    /* Released now: OpenCL frees it once the enqueued kernels that use it have completed. */
    if (!workspace)
        clReleaseMemObject(ws);
    return st;
}
