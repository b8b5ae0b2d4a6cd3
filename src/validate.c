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
    struct fcl_rows rows;  /* its rows in root */
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
    if (a->head_dim_v < 0 || a->head_dim_v > FLASHCL_MAX_HEAD_DIM)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "attn.head_dim_v = %d; must be 0 (head_dim) or 1..%d",
                        a->head_dim_v, FLASHCL_MAX_HEAD_DIM);
    return FLASHCL_SUCCESS;
}

/* A view's descale: 0 (none) except on E4M3 storage, where it is 0 (1) or finite and > 0. */
flashcl_status fcl_check_descale(const flashcl_context *ctx, const char *name, const flashcl_tensor *t)
{
    if (t->dtype != FLASHCL_E4M3 && t->descale != 0.0f)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.%s.descale = %g; only E4M3 storage has one (else 0)", name,
                        (double)t->descale);
    if (!(t->descale >= 0.0f) || !isfinite(t->descale))
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.%s.descale = %g; must be 0 (1) or finite and > 0", name,
                        (double)t->descale);
    return FLASHCL_SUCCESS;
}

static flashcl_status check_dtypes(const flashcl_context *ctx, const struct flashcl_attention *a)
{
    const struct { const char *name; const flashcl_tensor *t; } in[] = {
        {"q", &a->q}, {"k", &a->k}, {"v", &a->v}, {"o", &a->o}};
    const bool fp8 = a->q.dtype == FLASHCL_E4M3;
    /* E4M3 K and V with Q of another dtype: an E4M3 KV cache (flashcl_forward_kv_cache alone takes it). */
    const bool e4m3_cache = !fp8 && a->k.dtype == FLASHCL_E4M3 && a->v.dtype == FLASHCL_E4M3;
    if (!fp8 && (a->k.dtype == FLASHCL_E4M3) != (a->v.dtype == FLASHCL_E4M3))
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "attn.k.dtype = %d, attn.v.dtype = %d; an E4M3 KV cache "
                        "has both K and V E4M3", (int)a->k.dtype, (int)a->v.dtype);
    for (size_t i = 0; i < 4; i++) {
        if (flashcl_dtype_size(in[i].t->dtype) == 0)
            return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "attn.%s.dtype = %d is not a flashcl_dtype",
                        in[i].name, (int)in[i].t->dtype);
        const flashcl_status descale = fcl_check_descale(ctx, in[i].name, in[i].t);
        if (descale != FLASHCL_SUCCESS)
            return descale;
        if (fp8 && i == 3) {  /* E4M3 inputs write a wider O */
            if (in[i].t->dtype == FLASHCL_E4M3)
                return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "attn.o.dtype = e4m3; with E4M3 inputs O is f16, "
                                "bf16 or f32");
            continue;
        }
        if (e4m3_cache && (i == 1 || i == 2))
            continue;
        if (in[i].t->dtype != a->q.dtype)
            return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE,
                        "attn.%s.dtype = %d differs from attn.q.dtype = %d", in[i].name,
                        (int)in[i].t->dtype, (int)a->q.dtype);
    }
    if (a->lse.mem && a->lse.dtype != FLASHCL_F32)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "attn.lse.dtype = %d; LSE is FLASHCL_F32 (%d)",
                    (int)a->lse.dtype, (int)FLASHCL_F32);
    if (fp8 && (a->head_dim % 32 != 0 || fcl_head_dim_v(a) % 32 != 0))  /* the FP8 products' k-steps of 32 */
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "attn.head_dim = %d, head_dim_v = %d; E4M3 inputs need "
                        "multiples of 32", a->head_dim, fcl_head_dim_v(a));
    for (size_t i = 0; fp8 && i < 4; i++) {  /* the one kernel that takes them copies 16-byte chunks */
        const flashcl_tensor *t = in[i].t;
        const size_t esize = flashcl_dtype_size(t->dtype);
        if (t->offset % 16 || (t->stride_batch * esize) % 16 || (t->stride_seq * esize) % 16 ||
            (t->stride_head * esize) % 16)
            return fcl_fail(ctx, FLASHCL_ERROR_MISALIGNED, "attn.%s: with E4M3 inputs every view's rows start on 16 "
                            "bytes (offset %zu, strides %zu, %zu, %zu bytes)", in[i].name, t->offset,
                            t->stride_batch * esize, t->stride_seq * esize, t->stride_head * esize);
    }
    return a->lse.mem ? fcl_check_descale(ctx, "lse", &a->lse) : FLASHCL_SUCCESS;
}

flashcl_status fcl_refuse_fp8(const flashcl_context *ctx, const struct flashcl_attention *a, const char *call)
{
    if (a->q.dtype == FLASHCL_E4M3 || a->k.dtype == FLASHCL_E4M3 || a->v.dtype == FLASHCL_E4M3 ||
        a->o.dtype == FLASHCL_E4M3)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "%s does not take E4M3 tensors (flashcl_forward and "
                        "flashcl_forward_varlen do, on compute capability 9.0)", call);
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_refuse_e4m3_cache(const flashcl_context *ctx, const struct flashcl_attention *a, const char *call)
{
    if (a->q.dtype != FLASHCL_E4M3 && (a->k.dtype == FLASHCL_E4M3 || a->v.dtype == FLASHCL_E4M3))
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "%s does not take E4M3 K and V with %s Q (an E4M3 KV cache: "
                        "flashcl_forward_kv_cache does)", call, flashcl_dtype_name(a->q.dtype) ? flashcl_dtype_name(a->q.dtype) : "?");
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_check_e4m3_cache(const flashcl_context *ctx, const struct flashcl_attention *a)
{
    if (a->q.dtype == FLASHCL_E4M3 || a->o.dtype == FLASHCL_E4M3)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_DTYPE, "flashcl_forward_kv_cache takes E4M3 K and V (an E4M3 cache) "
                        "with Q and O f32, f16 or bf16; attn.%s is E4M3", a->q.dtype == FLASHCL_E4M3 ? "q" : "o");
    return FLASHCL_SUCCESS;
}

/* Fills v->root/begin/end after checking the view lies inside its buffer
 * (a buffer, readable, and writable where `written`). */
static flashcl_status check_view(const flashcl_context *ctx, struct view *v, bool written)
{
    const flashcl_tensor *t = v->t;
    const size_t esize = flashcl_dtype_size(t->dtype);
    char what[48];
    snprintf(what, sizeof(what), "%s.reserved", v->name);
    const flashcl_status reserved = fcl_check_reserved(ctx, what, t->reserved, sizeof(t->reserved));
    if (reserved != FLASHCL_SUCCESS)
        return reserved;

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
    /* The rows in bytes (a stride of one index is never stepped: 0, so nothing overflows). */
    v->rows.begin = v->begin;
    v->rows.row_bytes = v->dim * esize;
    for (int i = 0; i < 3; i++) {
        v->rows.count[i] = v->count[i];
        v->rows.stride[i] = v->count[i] > 1 ? strides[i] * esize : 0;
    }
    return FLASHCL_SUCCESS;
}

/* ---- whether two views share a byte ---- */

#define LATTICE_STEPS ((size_t)1 << 16)  /* the lattice search's share of a pair's steps */

/* A view's dimensions of more than one index, largest stride first, and the
 * bytes a block at each depth spans: extent[l] for a block of depth l (its
 * indices of levels 0 .. l-1 fixed; extent[n] is a row). */
struct levels {
    int n;
    size_t count[3], stride[3], extent[4];
};

/* repeats: keep dimensions of stride 0 (which only repeat rows). */
static void levels_of(const struct fcl_rows *r, bool repeats, struct levels *lv)
{
    lv->n = 0;
    for (int i = 0; i < 3; i++) {
        if (r->count[i] < 2 || (!repeats && r->stride[i] == 0))
            continue;
        int at = lv->n++;
        for (; at > 0 && lv->stride[at - 1] < r->stride[i]; at--) {
            lv->stride[at] = lv->stride[at - 1];
            lv->count[at] = lv->count[at - 1];
        }
        lv->stride[at] = r->stride[i];
        lv->count[at] = r->count[i];
    }
    lv->extent[lv->n] = r->row_bytes;
    for (int l = lv->n - 1; l >= 0; l--)
        lv->extent[l] = lv->stride[l] * (lv->count[l] - 1) + lv->extent[l + 1];
}

/* Each level steps past everything inside it: the blocks of every depth are
 * disjoint and in address order. A stride of 0 never is (the walk divides by
 * the strides of a nested view), whatever the row's bytes. */
static bool levels_nested(const struct levels *lv)
{
    for (int l = 0; l < lv->n; l++)
        if (lv->stride[l] == 0 || lv->stride[l] < lv->extent[l + 1])
            return false;
    return true;
}

bool fcl_rows_nested(const struct fcl_rows *r)
{
    struct levels lv;
    levels_of(r, true, &lv);
    return levels_nested(&lv);
}

/* Whether a row of the nested view `a` (first row at `base`) meets bytes
 * [lo, hi), lo < hi. Its blocks at each depth lie apart and in order, so
 * only the one holding lo, or the next one's first row, can. */
static bool nested_meets(const struct levels *a, size_t base, size_t lo, size_t hi)
{
    if (hi <= base)
        return false;
    if (lo < base)
        return true;  /* [lo, hi) holds the first row's first byte */
    for (int l = 0; l < a->n; l++) {
        size_t j = (lo - base) / a->stride[l];
        if (j >= a->count[l])
            j = a->count[l] - 1;
        const size_t start = base + j * a->stride[l];
        if (lo >= start + a->extent[l + 1])  /* in the gap after block j */
            return j + 1 < a->count[l] && start + a->stride[l] < hi;
        base = start;  /* lo inside block j: the answer is in it */
    }
    return lo < base + a->extent[a->n];
}

/* One view's rows walked, block by block, asking the nested other about
 * each block's span: a block it does not meet is skipped whole. */
struct walk {
    const struct levels *walked, *nested;
    size_t nested_begin, nested_end;
    size_t steps_left;
};

static enum fcl_overlap walk_blocks(struct walk *w, int l, size_t base)
{
    const size_t stride = w->walked->stride[l], inner = w->walked->extent[l + 1];
    if (base >= w->nested_end)
        return FCL_APART;
    /* Only blocks within the nested view's bytes can meet it. */
    size_t first = 0, last = w->walked->count[l] - 1;
    if (base + inner <= w->nested_begin)
        first = (w->nested_begin - base - inner) / stride + 1;
    if ((w->nested_end - 1 - base) / stride < last)
        last = (w->nested_end - 1 - base) / stride;
    for (size_t j = first; j <= last; j++) {
        if (w->steps_left == 0)
            return FCL_UNDECIDED;
        w->steps_left--;
        const size_t start = base + j * stride;
        if (!nested_meets(w->nested, w->nested_begin, start, start + inner))
            continue;
        if (l + 1 == w->walked->n)
            return FCL_OVERLAP;  /* a row of each */
        const enum fcl_overlap found = walk_blocks(w, l + 1, start);
        if (found != FCL_APART)
            return found;
    }
    return FCL_APART;
}

/* Rows of lv (first at begin) in its outermost blocks that reach [lo, hi). */
static size_t rows_near(const struct levels *lv, size_t begin, size_t lo, size_t hi)
{
    if (lv->n == 0)
        return 1;
    const size_t stride = lv->stride[0], inner = lv->extent[1];
    size_t first = 0, last = lv->count[0] - 1;
    if (begin + inner <= lo)
        first = (lo - begin - inner) / stride + 1;
    if ((hi - 1 - begin) / stride < last)
        last = (hi - 1 - begin) / stride;
    size_t rows = first <= last ? last - first + 1 : 0;
    for (int l = 1; l < lv->n; l++)
        rows *= lv->count[l];  /* a nested view's rows fit in memory: no overflow */
    return rows;
}

/* The other way, for views that step alike (a fused layout's slices): row
 * y of b minus row x of a is delta + sum of m_l * stride_l over the levels
 * of both, a level of a's giving m_l in -(count-1)..0, of b's 0..count-1,
 * one they share (equal strides) both. They overlap iff some such sum lies
 * in [lo, hi]. A depth-first search over m, largest stride first, keeps
 * only the m_l the levels inside can still bring into range: where both
 * views are nested and share their strides, at most three a level. */
struct lattice {
    int n;
    long long stride[6], m_lo[6], m_hi[6];
    long long down[7], up[7];  /* how far the levels from l on can move the sum down and up */
};

static long long floor_div(long long a, long long b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

static long long ceil_div(long long a, long long b)
{
    return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

static void lattice_add(struct lattice *lt, long long stride, long long m_lo, long long m_hi)
{
    for (int l = 0; l < lt->n; l++)
        if (lt->stride[l] == stride) {  /* a level of both views */
            lt->m_lo[l] += m_lo;
            lt->m_hi[l] += m_hi;
            return;
        }
    int at = lt->n++;
    for (; at > 0 && lt->stride[at - 1] < stride; at--) {
        lt->stride[at] = lt->stride[at - 1];
        lt->m_lo[at] = lt->m_lo[at - 1];
        lt->m_hi[at] = lt->m_hi[at - 1];
    }
    lt->stride[at] = stride;
    lt->m_lo[at] = m_lo;
    lt->m_hi[at] = m_hi;
}

static enum fcl_overlap lattice_search(const struct lattice *lt, int l, long long sum, long long lo, long long hi,
                                       size_t *steps_left)
{
    if (l == lt->n)
        return sum >= lo && sum <= hi ? FCL_OVERLAP : FCL_APART;
    const long long s = lt->stride[l];
    long long first = ceil_div(lo - sum - lt->up[l + 1], s), last = floor_div(hi - sum + lt->down[l + 1], s);
    first = first > lt->m_lo[l] ? first : lt->m_lo[l];
    last = last < lt->m_hi[l] ? last : lt->m_hi[l];
    for (long long m = first; m <= last; m++) {
        if (*steps_left == 0)
            return FCL_UNDECIDED;
        --*steps_left;
        const enum fcl_overlap found = lattice_search(lt, l + 1, sum + m * s, lo, hi, steps_left);
        if (found != FCL_APART)
            return found;
    }
    return FCL_APART;
}

/* The lattice search within *steps (FCL_UNDECIDED past them, or where the
 * byte offsets are too large for its signed sums). */
static enum fcl_overlap lattice_overlap(const struct fcl_rows *a, const struct levels *la, const struct fcl_rows *b,
                                        const struct levels *lb, size_t *steps)
{
    const size_t limit = (size_t)1 << 60;
    if (a->begin > limit || b->begin > limit || la->extent[0] > limit || lb->extent[0] > limit)
        return FCL_UNDECIDED;
    struct lattice lt = {0};
    for (int l = 0; l < la->n; l++)
        lattice_add(&lt, (long long)la->stride[l], -(long long)(la->count[l] - 1), 0);
    for (int l = 0; l < lb->n; l++)
        lattice_add(&lt, (long long)lb->stride[l], 0, (long long)(lb->count[l] - 1));
    for (int l = lt.n - 1; l >= 0; l--) {
        lt.down[l] = lt.down[l + 1] - lt.m_lo[l] * lt.stride[l];
        lt.up[l] = lt.up[l + 1] + lt.m_hi[l] * lt.stride[l];
    }
    /* Rows [x, x + a's row bytes) and [y, y + b's) share a byte iff y - x lies in
     * [1 - b's row bytes, a's row bytes - 1]. */
    const long long delta = (long long)b->begin - (long long)a->begin;
    return lattice_search(&lt, 0, delta, 1 - (long long)b->row_bytes, (long long)a->row_bytes - 1, steps);
}

enum fcl_overlap fcl_rows_overlap(const struct fcl_rows *a, const struct fcl_rows *b, size_t *steps)
{
    struct levels la, lb;
    levels_of(a, true, &la);
    levels_of(b, true, &lb);
    const size_t a_end = a->begin + la.extent[0], b_end = b->begin + lb.extent[0];
    if (a->begin >= b_end || b->begin >= a_end)
        return FCL_APART;
    /* The lattice first, on a small share of the steps: where the views step alike it decides at once. */
    struct levels a_once, b_once;
    levels_of(a, false, &a_once);
    levels_of(b, false, &b_once);
    size_t lattice_steps = *steps < LATTICE_STEPS ? *steps : LATTICE_STEPS;
    *steps -= lattice_steps;
    const enum fcl_overlap by_lattice = lattice_overlap(a, &a_once, b, &b_once, &lattice_steps);
    *steps += lattice_steps;  /* those it left */
    if (by_lattice != FCL_UNDECIDED)
        return by_lattice;
    const bool a_nested = levels_nested(&la), b_nested = levels_nested(&lb);
    if (!a_nested && !b_nested)
        return FCL_UNDECIDED;
    /* Walk the view that is not nested, or the one with fewer rows where the two meet. */
    const bool walk_a = !a_nested || (b_nested && rows_near(&la, a->begin, b->begin, b_end) <
                                                      rows_near(&lb, b->begin, a->begin, a_end));
    const struct fcl_rows *walked_rows = walk_a ? a : b;
    struct levels walked;
    levels_of(walked_rows, false, &walked);  /* repeated rows once */
    struct walk w = {&walked, walk_a ? &lb : &la, walk_a ? b->begin : a->begin, walk_a ? b_end : a_end, *steps};
    if (walked.n == 0)
        return nested_meets(w.nested, w.nested_begin, walked_rows->begin, walked_rows->begin + walked.extent[0])
                   ? FCL_OVERLAP : FCL_APART;
    const enum fcl_overlap found = walk_blocks(&w, 0, walked_rows->begin);
    *steps = w.steps_left;
    return found;
}

/* An output's rows must be distinct memory, or work-items race. Sufficient
 * test: ordered by stride, each dimension steps past everything inside it. */
static flashcl_status check_no_self_overlap(const flashcl_context *ctx, const struct view *v)
{
    if (fcl_rows_nested(&v->rows))
        return FLASHCL_SUCCESS;
    return fcl_fail(ctx, FLASHCL_ERROR_ALIASING, "%s's strides (%zu, %zu, %zu elements) make distinct elements overlap",
                    v->name, v->t->stride_batch, v->t->stride_seq, v->t->stride_head);
}

/* An output and another view share no byte: decided exactly, row by row,
 * where their byte ranges in one buffer meet, on the call's steps. */
static flashcl_status check_apart(const flashcl_context *ctx, const struct view *out, const struct view *other,
                                  size_t *steps)
{
    if (out->root != other->root || out->begin >= other->end || other->begin >= out->end)
        return FLASHCL_SUCCESS;
    switch (fcl_rows_overlap(&out->rows, &other->rows, steps)) {
    case FCL_APART:
        return FLASHCL_SUCCESS;
    case FCL_OVERLAP:
        break;
    case FCL_UNDECIDED:
        return fcl_fail(ctx, FLASHCL_ERROR_ALIASING, "cannot tell within the validation's step budget (%zu steps for all of the call's "
                        "pairs of views) whether %s and %s share a byte (their rows interleave in one buffer); "
                        "refused as if they did: give them byte ranges apart", FCL_OVERLAP_STEPS, out->name,
                        other->name);
    }
    return fcl_fail(ctx, FLASHCL_ERROR_ALIASING, "%s overlaps %s in memory", out->name, other->name);
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
    /* Every output's rows in order first: the pair test walks one view and asks a nested one. */
    for (int out = first_output; out < n; out++) {
        const flashcl_status st = check_no_self_overlap(ctx, &views[out]);
        if (st != FLASHCL_SUCCESS)
            return st;
    }
    size_t steps = FCL_OVERLAP_STEPS;  /* for all pairs together: each check_views well under a second */
    for (int out = first_output; out < n; out++)
        for (int other = 0; other < n; other++) {
            if (other == out || (other >= first_output && other < out))
                continue;  /* itself, or a pair of outputs judged already */
            const flashcl_status st = check_apart(ctx, &views[out], &views[other], &steps);
            if (st != FLASHCL_SUCCESS)
                return st;
        }
    return FLASHCL_SUCCESS;
}

/* A per-head f32 vector (attn.sinks, attn.alibi_slopes): absent (mem and offset 0), or heads floats inside
 * its buffer, aligned and of the context. */
static flashcl_status validate_head_vector(const flashcl_context *ctx, const char *name, const flashcl_vector *v,
                                           int heads)
{
    if (!v->mem)
        return v->offset ? fcl_fail(ctx, FLASHCL_INVALID_VALUE, "%s.offset = %zu with %s.mem NULL", name, v->offset,
                                    name)
                         : FLASHCL_SUCCESS;
    const flashcl_tensor view = fcl_vector_view(v);
    const struct view_spec spec = {name, &view, {1, 1, (size_t)heads}, 1};
    return fcl_validate_views(ctx, &spec, 1, 1);
}

flashcl_status fcl_validate_problem(const flashcl_context *ctx, const struct flashcl_attention *a)
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
    if (!(a->softcap >= 0.0f) || !isfinite(a->softcap))
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "attn.softcap = %g; must be 0 (none) or finite and > 0",
                        (double)a->softcap);
    /* Here too, for the calls (paged caches) that do not reach fcl_validate_attention. */
    st = validate_head_vector(ctx, "attn.sinks", &a->sinks, a->heads_q);
    if (st == FLASHCL_SUCCESS)
        st = validate_head_vector(ctx, "attn.alibi_slopes", &a->alibi_slopes, a->heads_q);
    if (st != FLASHCL_SUCCESS)
        return st;
    return FCL_CHECK_RESERVED(ctx, "attn.reserved", a->reserved);
}

flashcl_tensor fcl_vector_view(const flashcl_vector *v)
{
    /* [1, 1, n] with one element a head: check_view's bounds, alignment and context checks apply. */
    return (flashcl_tensor){.mem = v->mem, .offset = v->offset, .dtype = FLASHCL_F32, .stride_head = 1};
}

flashcl_status fcl_validate_attention(const flashcl_context *ctx, const struct flashcl_attention *a)
{
    const flashcl_status st = fcl_validate_problem(ctx, a);
    if (st != FLASHCL_SUCCESS)
        return st;
    const size_t b = (size_t)a->batch, nq = (size_t)a->seq_q, nk = (size_t)a->seq_kv;
    const size_t hq = (size_t)a->heads_q, hk = (size_t)a->heads_kv, d = (size_t)a->head_dim;
    const size_t dv = (size_t)fcl_head_dim_v(a);
    const flashcl_tensor sinks = fcl_vector_view(&a->sinks);
    const flashcl_tensor slopes = fcl_vector_view(&a->alibi_slopes);
    /* The inputs (q, k, v, the per-head vectors given), then the outputs (o, the LSE where given): checked
     * together, so no output overlaps an input. */
    struct view views[7] = {
        {"attn.q", &a->q, {b, nq, hq}, d, NULL, 0, 0, {0}},
        {"attn.k", &a->k, {b, nk, hk}, d, NULL, 0, 0, {0}},
        {"attn.v", &a->v, {b, nk, hk}, dv, NULL, 0, 0, {0}},
    };
    int n = 3;
    if (a->sinks.mem)
        views[n++] = (struct view){"attn.sinks", &sinks, {1, 1, hq}, 1, NULL, 0, 0, {0}};
    if (a->alibi_slopes.mem)
        views[n++] = (struct view){"attn.alibi_slopes", &slopes, {1, 1, hq}, 1, NULL, 0, 0, {0}};
    const int first_output = n;
    views[n++] = (struct view){"attn.o", &a->o, {b, nq, hq}, dv, NULL, 0, 0, {0}};
    if (a->lse.mem)
        views[n++] = (struct view){"attn.lse", &a->lse, {b, nq, hq}, 1, NULL, 0, 0, {0}};
    return check_views(ctx, views, n, first_output);
}

flashcl_status fcl_validate_views(const flashcl_context *ctx, const struct view_spec *specs, int n, int first_output)
{
    struct view views[VALIDATE_MAX_VIEWS];
    if (n > VALIDATE_MAX_VIEWS)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "validate_views: %d views, at most %d", n, VALIDATE_MAX_VIEWS);
    for (int i = 0; i < n; i++) {
        const struct view v = {specs[i].name, specs[i].t, {specs[i].count[0], specs[i].count[1], specs[i].count[2]},
                               specs[i].dim, NULL, 0, 0, {0}};
        views[i] = v;
    }
    return check_views(ctx, views, n, first_output);
}
