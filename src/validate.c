/* Checking an attention call before anything is enqueued: every failure
 * names the argument and the value, and leaves the outputs untouched. */
#include <math.h>
#include <stdint.h>

#include "internal.h"

#define MAX_SEQ (1 << 30)  /* keeps the kernel's int row arithmetic far from overflow */

/* What a tensor view spans, in its dims and in bytes of its root buffer. */
struct view {
    const char *name;
    const flashcl_tensor *t;
    size_t count[3];   /* batch, seq, head */
    size_t dim;        /* contiguous last dimension */
    cl_mem root;       /* the buffer (or a sub-buffer's parent) */
    size_t begin, end; /* byte range in root */
};

bool fcl_mul_overflows(size_t a, size_t b, size_t *out)
{
    if (b != 0 && a > SIZE_MAX / b)
        return true;
    *out = a * b;
    return false;
}

bool fcl_add_overflows(size_t a, size_t b, size_t *out)
{
    if (a > SIZE_MAX - b)
        return true;
    *out = a + b;
    return false;
}

static flashcl_status check_shape(const flashcl_context *ctx, const struct flashcl_attention *a)
{
    const struct { const char *name; int value; int max; } dims[] = {
        {"batch", a->batch, INT32_MAX},      {"seq_q", a->seq_q, MAX_SEQ},
        {"seq_kv", a->seq_kv, MAX_SEQ},      {"heads_q", a->heads_q, INT32_MAX},
        {"heads_kv", a->heads_kv, INT32_MAX}, {"head_dim", a->head_dim, FLASHCL_MAX_HEAD_DIM},
    };
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++)
        if (dims[i].value < 1 || dims[i].value > dims[i].max)
            return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "attn.%s = %d; must be 1..%d", dims[i].name,
                        dims[i].value, dims[i].max);
    if (a->heads_q % a->heads_kv != 0)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE,
                    "attn.heads_q = %d is not a multiple of attn.heads_kv = %d", a->heads_q,
                    a->heads_kv);
    return FLASHCL_SUCCESS;
}

static flashcl_status check_dtypes(const flashcl_context *ctx, const struct flashcl_attention *a)
{
    const struct { const char *name; const flashcl_tensor *t; } in[] = {
        {"q", &a->q}, {"k", &a->k}, {"v", &a->v}, {"o", &a->o}};
    for (size_t i = 0; i < 4; i++) {
        if (flashcl_dtype_size(in[i].t->dtype) == 0)
            return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "attn.%s.dtype = %d is not a flashcl_dtype",
                        in[i].name, (int)in[i].t->dtype);
        if (in[i].t->dtype != a->q.dtype)
            return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE,
                        "attn.%s.dtype = %d differs from attn.q.dtype = %d", in[i].name,
                        (int)in[i].t->dtype, (int)a->q.dtype);
    }
    if (a->lse.mem && a->lse.dtype != FLASHCL_F32)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "attn.lse.dtype = %d; LSE is FLASHCL_F32 (%d)",
                    (int)a->lse.dtype, (int)FLASHCL_F32);
    return FLASHCL_SUCCESS;
}

/* Fills v->root/begin/end after checking the view lies inside its buffer
 * (a buffer, readable, and writable where `written`). */
static flashcl_status check_view(const flashcl_context *ctx, struct view *v, bool written)
{
    const flashcl_tensor *t = v->t;
    const size_t esize = flashcl_dtype_size(t->dtype);

    size_t mem_size = 0;
    cl_context mem_ctx = NULL;
    cl_mem_object_type type = 0;
    cl_mem_flags flags = 0;
    cl_int err = clGetMemObjectInfo(t->mem, CL_MEM_SIZE, sizeof(mem_size), &mem_size, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(t->mem, CL_MEM_CONTEXT, sizeof(mem_ctx), &mem_ctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(t->mem, CL_MEM_TYPE, sizeof(type), &type, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(t->mem, CL_MEM_FLAGS, sizeof(flags), &flags, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "%s.mem is not a valid cl_mem (%d)", v->name,
                    err);
    if (mem_ctx != ctx->cl_ctx)
        return fcl_fail(ctx, FLASHCL_INVALID_CONTEXT,
                    "%s.mem belongs to another cl_context than the flashcl context's", v->name);
    /* Kernels read every view and write the outputs: the spec leaves other uses undefined. */
    if (type != CL_MEM_OBJECT_BUFFER)
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "%s.mem is an image or pipe, not a buffer", v->name);
    if (written && (flags & CL_MEM_READ_ONLY))
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "%s.mem is CL_MEM_READ_ONLY; an output must be writable",
                        v->name);
    if (!written && (flags & CL_MEM_WRITE_ONLY))
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "%s.mem is CL_MEM_WRITE_ONLY; an input must be readable",
                        v->name);
    if (t->offset % esize != 0)
        return fcl_fail(ctx, FLASHCL_ERROR_MISALIGNED,
                    "%s.offset = %zu bytes is not a multiple of the element size %zu", v->name,
                    t->offset, esize);

    /* Last element + 1, in elements: sum of (count-1)*stride, plus dim. */
    const size_t strides[3] = {t->stride_batch, t->stride_seq, t->stride_head};
    size_t extent = v->dim;
    for (int i = 0; i < 3; i++) {
        size_t step;
        if (fcl_mul_overflows(v->count[i] - 1, strides[i], &step) || fcl_add_overflows(extent, step, &extent))
            return fcl_fail(ctx, FLASHCL_ERROR_OVERFLOW,
                        "%s's extent overflows size_t (strides %zu, %zu, %zu)", v->name,
                        t->stride_batch, t->stride_seq, t->stride_head);
    }
    size_t bytes, end;
    if (fcl_mul_overflows(extent, esize, &bytes) || fcl_add_overflows(t->offset, bytes, &end))
        return fcl_fail(ctx, FLASHCL_ERROR_OVERFLOW, "%s's byte extent overflows size_t", v->name);
    if (end > mem_size)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS,
                    "%s reaches byte %zu but its cl_mem holds %zu bytes (offset %zu, strides "
                    "%zu, %zu, %zu elements)", v->name, end, mem_size, t->offset, t->stride_batch,
                    t->stride_seq, t->stride_head);

    /* Overlap is judged in the root buffer, so sub-buffers compare too. */
    cl_mem parent = NULL;
    size_t sub_offset = 0;
    err = clGetMemObjectInfo(t->mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof(parent), &parent, NULL);
    if (err == CL_SUCCESS && parent)
        err = clGetMemObjectInfo(t->mem, CL_MEM_OFFSET, sizeof(sub_offset), &sub_offset, NULL);
    if (err != CL_SUCCESS)  /* not knowing the root buffer, overlap cannot be judged: refuse, never guess */
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "cannot query whether %s.mem is a sub-buffer (%d)",
                        v->name, err);
    v->root = parent ? parent : t->mem;
    v->begin = sub_offset + t->offset;
    v->end = sub_offset + end;
    return FLASHCL_SUCCESS;
}

/* An output's rows must be distinct memory, or work-items race. Sufficient
 * test: ordered by stride, each dimension steps past everything inside it. */
static flashcl_status check_no_self_overlap(const flashcl_context *ctx, const struct view *v)
{
    const size_t strides[3] = {v->t->stride_batch, v->t->stride_seq, v->t->stride_head};
    int order[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (strides[order[j]] < strides[order[i]]) {
                int tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
            }
    size_t inner = v->dim;  /* elements spanned by the dimensions inside */
    for (int i = 0; i < 3; i++) {
        const int d = order[i];
        if (v->count[d] == 1)
            continue;
        if (strides[d] < inner)
            return fcl_fail(ctx, FLASHCL_ERROR_ALIASING,
                        "%s's strides (%zu, %zu, %zu elements) make distinct elements overlap",
                        v->name, strides[0], strides[1], strides[2]);
        inner = strides[d] * (v->count[d] - 1) + inner;  /* no overflow: checked in check_view */
    }
    return FLASHCL_SUCCESS;
}

static bool views_overlap(const struct view *a, const struct view *b)
{
    return a->root == b->root && a->begin < b->end && b->begin < a->end;
}

/* Each view inside its buffer; views from first_output on are written, so
 * each must not overlap itself or any other view. */
static flashcl_status check_views(const flashcl_context *ctx, struct view *views, int n, int first_output)
{
    for (int i = 0; i < n; i++) {
        const flashcl_status st = check_view(ctx, &views[i], i >= first_output);
        if (st != FLASHCL_SUCCESS)
            return st;
    }
    for (int out = first_output; out < n; out++) {
        const flashcl_status st = check_no_self_overlap(ctx, &views[out]);
        if (st != FLASHCL_SUCCESS)
            return st;
        for (int other = 0; other < n; other++)
            if (other != out && views_overlap(&views[out], &views[other]))
                return fcl_fail(ctx, FLASHCL_ERROR_ALIASING, "%s overlaps %s in memory",
                            views[out].name, views[other].name);
    }
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_validate_attention(const flashcl_context *ctx, const struct flashcl_attention *a)
{
    flashcl_status st = check_shape(ctx, a);
    if (st != FLASHCL_SUCCESS)
        return st;
    const struct { const char *name; cl_mem mem; } required[] = {
        {"q", a->q.mem}, {"k", a->k.mem}, {"v", a->v.mem}, {"o", a->o.mem}};
    for (size_t i = 0; i < 4; i++)
        if (!required[i].mem)
            return fcl_fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "attn.%s.mem is NULL", required[i].name);
    st = check_dtypes(ctx, a);
    if (st != FLASHCL_SUCCESS)
        return st;
    if (!isfinite(a->scale))
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SCALE, "attn.scale = %g; must be finite", a->scale);
    if (a->precision != FLASHCL_PRECISION_EXACT && a->precision != FLASHCL_PRECISION_TF32 &&
        a->precision != FLASHCL_PRECISION_TF32X3)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.precision = %d is not a flashcl_precision", (int)a->precision);
    if (a->mask != FLASHCL_MASK_NONE && a->mask != FLASHCL_MASK_CAUSAL && a->mask != FLASHCL_MASK_WINDOW)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.mask = %d is not a flashcl_mask", (int)a->mask);
    if (a->mask == FLASHCL_MASK_WINDOW && (a->window_left < -1 || a->window_right < -1))
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.window_left = %d, attn.window_right = %d; each must be "
                        ">= 0, or -1 for no limit", a->window_left, a->window_right);
    if (a->mask == FLASHCL_MASK_WINDOW && (long long)a->seq_q + a->seq_kv >= (1LL << 30))
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "a window needs seq_q + seq_kv below 2^30 (%d + %d)",
                        a->seq_q, a->seq_kv);
    if (a->mask != FLASHCL_MASK_WINDOW && (a->window_left || a->window_right))
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.window_left = %d, attn.window_right = %d need attn.mask = "
                        "FLASHCL_MASK_WINDOW", a->window_left, a->window_right);
    if (a->causal && a->mask != FLASHCL_MASK_NONE && a->mask != FLASHCL_MASK_CAUSAL)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.causal = %d disagrees with attn.mask = %d", a->causal,
                        (int)a->mask);
    for (size_t i = 0; i < sizeof(a->reserved); i++)
        if (a->reserved[i])
            return fcl_fail(ctx, FLASHCL_INVALID_VALUE,
                            "attn.reserved[%zu] is not zero (a field of a newer flashcl than %s?)", i,
                            FLASHCL_VERSION_STRING);

    const size_t b = (size_t)a->batch, nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv;
    const size_t hq = (size_t)a->heads_q, hk = (size_t)a->heads_kv, d = (size_t)a->head_dim;
    struct view views[5] = {
        {"attn.q", &a->q, {b, nq, hq}, d, NULL, 0, 0},
        {"attn.k", &a->k, {b, nk, hk}, d, NULL, 0, 0},
        {"attn.v", &a->v, {b, nk, hk}, d, NULL, 0, 0},
        {"attn.o", &a->o, {b, nq, hq}, d, NULL, 0, 0},
        {"attn.lse", &a->lse, {b, nq, hq}, 1, NULL, 0, 0},
    };
    return check_views(ctx, views, a->lse.mem ? 5 : 4, 3);
}

flashcl_status fcl_validate_views(const flashcl_context *ctx, const struct view_spec *specs, int n, int first_output)
{
    struct view views[VALIDATE_MAX_VIEWS];
    if (n > VALIDATE_MAX_VIEWS)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "validate_views: %d views, at most %d", n, VALIDATE_MAX_VIEWS);
    for (int i = 0; i < n; i++) {
        const struct view v = {specs[i].name, specs[i].t, {specs[i].count[0], specs[i].count[1], specs[i].count[2]},
                               specs[i].dim, NULL, 0, 0};
        views[i] = v;
    }
    return check_views(ctx, views, n, first_output);
}
