/* flashcl_forward: validate, choose the tile, build (once), enqueue. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define LOG2E 1.4426950408889634

int dtype_define(flashcl_dtype dtype)
{
    return dtype == FLASHCL_F32 ? 0 : dtype == FLASHCL_F16 ? 1 : 2;
}

/* The queue must run on the context's device, or the enqueue fails late. */
static flashcl_status check_queue(const flashcl_context *ctx, cl_command_queue queue)
{
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof(qctx), &qctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof(qdev), &qdev, NULL);
    if (err != CL_SUCCESS)
        return fail(ctx, FLASHCL_INVALID_COMMAND_QUEUE, "queue is not a valid cl_command_queue (%d)", err);
    if (qctx != ctx->cl_ctx || qdev != ctx->device)
        return fail(ctx, FLASHCL_INVALID_COMMAND_QUEUE,
                    "queue runs on another context or device than the flashcl context");
    return FLASHCL_SUCCESS;
}

/* FLASHCL_BUILD_OPTIONS adds compiler options to every kernel build, for
 * diagnosis (e.g. -cl-nv-verbose, whose report the DEBUG log shows). */
void append_user_build_options(char *options, size_t size)
{
    const char *extra = getenv("FLASHCL_BUILD_OPTIONS");
    if (extra && *extra) {
        const size_t used = strlen(options);
        snprintf(options + used, size - used, " %s", extra);
    }
}

flashcl_status check_call(flashcl_context *ctx, const struct flashcl_attention *attn,
                          cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list)
{
    clear_error();
    if (!ctx || !attn || !queue)
        return fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%s is NULL",
                    !ctx ? "ctx" : !attn ? "attn" : "queue");
    if ((num_wait_events == 0) != (wait_list == NULL))
        return fail(ctx, FLASHCL_INVALID_VALUE, "num_wait_events = %u with wait_list %s",
                    num_wait_events, wait_list ? "non-NULL" : "NULL");
    flashcl_status st = validate_attention(ctx, attn);
    if (st == FLASHCL_SUCCESS)
        st = check_queue(ctx, queue);
    return st;
}

float effective_scale(const struct flashcl_attention *attn)
{
    return attn->scale != 0.0f ? attn->scale : (float)(1.0 / sqrt((double)attn->head_dim));
}

/* Sets the five kernel arguments of one tensor view, from index *arg on. */
static cl_int set_view_args(cl_kernel kernel, cl_uint *arg, const flashcl_tensor *t, size_t esize)
{
    const cl_mem mem = t->mem;
    const cl_ulong values[4] = {t->offset / esize, t->stride_batch, t->stride_seq, t->stride_head};
    cl_int err = clSetKernelArg(kernel, (*arg)++, sizeof(cl_mem), mem ? &mem : NULL);
    for (int i = 0; i < 4; i++)
        err |= clSetKernelArg(kernel, (*arg)++, sizeof(cl_ulong), &values[i]);
    return err;
}

/* Builds (once) and enqueues the kernel of `tile` (from variant_choose).
 * Caller has validated the call. */
static flashcl_status enqueue_forward(flashcl_context *ctx, const struct flashcl_attention *attn,
                                      const struct flashcl_tile *tile, cl_command_queue queue,
                                      cl_uint num_wait_events, const cl_event *wait_list, cl_event *event)
{
    /* All four kernels take the same arguments; they differ in source and tile. */
    const char *source, *name;
    char options[512];
    const float scale_log2 = (float)(effective_scale(attn) * LOG2E);
    const int dtype = dtype_define(attn->q.dtype), causal = attn->causal ? 1 : 0;
    if (tile->variant == FLASHCL_VARIANT_TENSOR_CORE || tile->variant == FLASHCL_VARIANT_TF32) {
        const bool tf32 = tile->variant == FLASHCL_VARIANT_TF32;
        source = tf32 ? flashcl_source_flash_forward_tf32 : flashcl_source_flash_forward_mma;
        name = tf32 ? "flash_forward_tf32" : "flash_forward_mma";
        /* The softmax finds the row max on raw scores: the smallest one when the scale is negative. */
        const int negative_scale = scale_log2 < 0.0f;
        const int n = snprintf(options, sizeof(options),
                               "-cl-std=CL1.2 -DHEAD_DIM=%d -DWARPS=%d -DM_TILES=%d -DBLOCK_N=%d -DCAUSAL=%d "
                               "-DNEGATIVE_SCALE=%d", attn->head_dim, tile->warps, tile->m_tiles, tile->block_n,
                               causal, negative_scale);
        snprintf(options + n, sizeof(options) - (size_t)n, tf32 ? " -DPASSES=%d" : " -DDTYPE=%d",
                 tf32 ? (attn->precision == FLASHCL_PRECISION_TF32X3 ? 3 : 1) : dtype);
    } else {
        const bool tiled = tile->variant == FLASHCL_VARIANT_REGISTER_TILED;
        const int side = portable_side(ctx);  /* the portable kernel's work-group grid */
        source = tiled ? flashcl_source_flash_forward_tiled : flashcl_source_flash_forward;
        name = tiled ? "flash_forward_tiled" : "flash_forward";
        const int n = snprintf(options, sizeof(options), "-cl-std=CL1.2 -DHEAD_DIM=%d -DBLOCK_M=%d -DBLOCK_N=%d "
                               "-DDTYPE=%d -DCAUSAL=%d", attn->head_dim, tile->block_m, tile->block_n, dtype, causal);
        if (!tiled)
            snprintf(options + n, sizeof(options) - (size_t)n, " -DTM=%d -DTN=%d", side, side);
    }
    append_user_build_options(options, sizeof(options));

    const cl_int has_lse = attn->lse.mem != NULL;
    const cl_int seq_q = attn->seq_q, seq_kv = attn->seq_kv;
    const cl_int group = attn->heads_q / attn->heads_kv;
    const size_t esize = flashcl_dtype_size(attn->q.dtype);

    const size_t n_qblocks = ((size_t)attn->seq_q + (size_t)tile->block_m - 1) / (size_t)tile->block_m;
    const size_t local[3] = {(size_t)tile->workgroup_size, 1, 1};
    const size_t global[3] = {n_qblocks * local[0], (size_t)attn->heads_q, (size_t)attn->batch};

    /* Arguments live in the cl_kernel, shared by all threads of this context. */
    pthread_mutex_lock(&ctx->lock);
    cl_kernel kernel;
    flashcl_status st = program_get_kernel(ctx, source, name, options, &kernel);
    if (st == FLASHCL_SUCCESS) {
        cl_uint arg = 0;
        cl_int err = set_view_args(kernel, &arg, &attn->q, esize);
        err |= set_view_args(kernel, &arg, &attn->k, esize);
        err |= set_view_args(kernel, &arg, &attn->v, esize);
        err |= set_view_args(kernel, &arg, &attn->o, esize);
        err |= set_view_args(kernel, &arg, &attn->lse, sizeof(float));
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &has_lse);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &seq_q);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &seq_kv);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_int), &group);
        err |= clSetKernelArg(kernel, arg++, sizeof(cl_float), &scale_log2);
        if (err != CL_SUCCESS) {
            st = fail(ctx, FLASHCL_INVALID_VALUE, "setting the forward kernel's arguments failed");
        } else {
            err = clEnqueueNDRangeKernel(queue, kernel, 3, NULL, global, local, num_wait_events,
                                         wait_list, event);
            if (err != CL_SUCCESS)
                st = fail(ctx, (flashcl_status)err,
                          "enqueueing %s (%zu x %zu x %zu work-items, tile %dx%d, "
                          "%zu bytes local) failed (%d)", name, global[0], global[1], global[2],
                          tile->block_m, tile->block_n, tile->local_bytes, err);
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    if (st == FLASHCL_SUCCESS)
        log_msg(ctx, FLASHCL_LOG_DEBUG, "forward: %s", options);
    return st;
}

/* Failures of a tensor-core kernel itself (it did not build, or the device
 * cannot launch it), after which an FMA kernel may run. */
static bool kernel_failure(flashcl_status st)
{
    return st == FLASHCL_BUILD_PROGRAM_FAILURE || st == FLASHCL_OUT_OF_RESOURCES ||
           st == (flashcl_status)CL_INVALID_WORK_GROUP_SIZE || st == (flashcl_status)CL_INVALID_KERNEL ||
           st == (flashcl_status)CL_INVALID_PROGRAM_EXECUTABLE;
}

flashcl_status flashcl_forward(flashcl_context *ctx, const struct flashcl_attention *attn,
                               cl_command_queue queue, cl_uint num_wait_events,
                               const cl_event *wait_list, cl_event *event)
{
    flashcl_status st = check_call(ctx, attn, queue, num_wait_events, wait_list);
    if (st != FLASHCL_SUCCESS)
        return st;
    struct flashcl_tile tile = {0};
    st = variant_choose(ctx, attn, &tile);
    if (st == FLASHCL_SUCCESS)
        st = enqueue_forward(ctx, attn, &tile, queue, num_wait_events, wait_list, event);
    const bool tensor_cores = tile.variant == FLASHCL_VARIANT_TENSOR_CORE || tile.variant == FLASHCL_VARIANT_TF32;
    if (st != FLASHCL_SUCCESS && tensor_cores && kernel_failure(st)) {
        /* The probe passed but this kernel did not: say why once, then run
         * everything on the FMA units. */
        variant_disable(ctx, flashcl_status_name(st));
        clear_error();
        st = variant_choose(ctx, attn, &tile);
        if (st == FLASHCL_SUCCESS)
            st = enqueue_forward(ctx, attn, &tile, queue, num_wait_events, wait_list, event);
    }
    return st;
}
