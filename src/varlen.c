/* Batches of sequences of different lengths: flashcl_forward_varlen (packed,
 * FlashAttention's cu_seqlens) and flashcl_forward_kv_cache (dense rows, a
 * KV cache filled to a length per sequence). Host offsets and lengths are
 * checked fully; device ones are clamped by the kernels (cl/varlen.h). Both
 * run the kernels of the table that take such batches. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The packed problem as flashcl_forward's validation sees it: one batch of
 * total rows (stride_batch unused, so zeroed). */
static struct flashcl_attention packed_view(const struct flashcl_attention *attn, const struct flashcl_varlen *vl)
{
    struct flashcl_attention a = *attn;
    a.batch = 1;
    a.seq_q = vl->total_q;
    a.seq_kv = vl->total_k;
    a.q.stride_batch = a.k.stride_batch = a.v.stride_batch = a.o.stride_batch = a.lse.stride_batch = 0;
    return a;
}

/* Host offsets: from 0 or more, never decreasing, the last within the
 * total, no sequence longer than the longest the grid is sized for. */
static flashcl_status check_host_offsets(const flashcl_context *ctx, const char *name, const int *cu, int batch,
                                         int total, int longest)
{
    if (cu[0] < 0)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "varlen.%s[0] = %d; offsets start at 0 or more", name, cu[0]);
    for (int b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "varlen.%s[%d] = %d is below varlen.%s[%d] = %d", name, b + 1,
                            cu[b + 1], name, b, cu[b]);
        if (cu[b + 1] - cu[b] > longest)
            return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "sequence %d has %d rows in varlen.%s, more than the "
                            "longest (%d) the call is sized for", b, cu[b + 1] - cu[b], name, longest);
    }
    if (cu[batch] > total)
        return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "varlen.%s[%d] = %d is past the %d packed rows", name, batch,
                        cu[batch], total);
    return FLASHCL_SUCCESS;
}

/* A device int32 buffer of this context, readable, of at least `entries`. */
static flashcl_status check_device_offsets(const flashcl_context *ctx, const char *name, cl_mem mem, int entries)
{
    size_t size = 0;
    cl_context mem_ctx = NULL;
    cl_mem_flags flags = 0;
    cl_int err = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof(size), &size, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof(mem_ctx), &mem_ctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(mem, CL_MEM_FLAGS, sizeof(flags), &flags, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "%s_mem is not a valid cl_mem (%d)", name, err);
    if (mem_ctx != ctx->cl_ctx)
        return fcl_fail(ctx, FLASHCL_INVALID_CONTEXT, "%s_mem belongs to another cl_context", name);
    if (flags & CL_MEM_WRITE_ONLY)
        return fcl_fail(ctx, FLASHCL_INVALID_MEM_OBJECT, "%s_mem is CL_MEM_WRITE_ONLY", name);
    const size_t need = (size_t)entries * sizeof(cl_int);
    if (size < need)
        return fcl_fail(ctx, FLASHCL_ERROR_OUT_OF_BOUNDS, "%s_mem holds %zu bytes; %d entries need %zu", name, size,
                        entries, need);
    return FLASHCL_SUCCESS;
}

/* A device index buffer: its entries are read from byte 0 while O and the
 * LSE are written, so like any input it may share no byte with them. */
struct index_buffer {
    const char *name;  /* "varlen.cu_seqlens_q_mem" */
    cl_mem mem;        /* NULL: given on the host (a buffer of the call's own) */
    int entries;
};

/* A call's two index buffers apart from O and the LSE, whose rows are
 * those of `outputs` (the views validation saw). */
static flashcl_status check_indices_apart(const flashcl_context *ctx, const struct flashcl_attention *outputs,
                                          const struct index_buffer indices[2])
{
    flashcl_tensor as_view[2];
    struct view_spec views[4];
    int inputs = 0;
    for (int i = 0; i < 2; i++) {
        if (!indices[i].mem)
            continue;
        /* int32 entries as one row of f32 (4 bytes each). */
        const flashcl_tensor t = {.mem = indices[i].mem, .dtype = FLASHCL_F32};
        as_view[inputs] = t;
        const struct view_spec v = {indices[i].name, &as_view[inputs], {1, 1, 1}, (size_t)indices[i].entries};
        views[inputs++] = v;
    }
    if (inputs == 0)
        return FLASHCL_SUCCESS;
    const size_t rows[3] = {(size_t)outputs->batch, (size_t)outputs->seq_q, (size_t)outputs->heads_q};
    const struct view_spec o = {"attn.o", &outputs->o, {rows[0], rows[1], rows[2]}, (size_t)fcl_head_dim_v(outputs)};
    const struct view_spec lse = {"attn.lse", &outputs->lse, {rows[0], rows[1], rows[2]}, 1};
    int n_views = inputs;
    views[n_views++] = o;
    if (outputs->lse.mem)
        views[n_views++] = lse;
    return fcl_validate_views(ctx, views, n_views, inputs);
}

/* Everything but the queue; on success *packed is the view validation saw. */
static flashcl_status validate_varlen(const flashcl_context *ctx, const struct flashcl_attention *attn,
                                      const struct flashcl_varlen *vl, struct flashcl_attention *packed)
{
    const flashcl_status reserved = FCL_CHECK_RESERVED(ctx, "varlen.reserved", vl->reserved);
    if (reserved != FLASHCL_SUCCESS)
        return reserved;
    if (vl->total_q < 1 || vl->total_k < 1)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "varlen.total_q = %d, total_k = %d; each must be >= 1",
                        vl->total_q, vl->total_k);
    if (attn->batch < 1 || attn->batch > (1 << 30))
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "attn.batch = %d; must be 1..2^30 sequences", attn->batch);
    if (attn->seq_q < 1 || attn->seq_q > vl->total_q || attn->seq_kv < 1 || attn->seq_kv > vl->total_k)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "attn.seq_q = %d and attn.seq_kv = %d, the longest "
                        "sequences, must be 1..varlen.total_q (%d) and 1..varlen.total_k (%d)", attn->seq_q,
                        attn->seq_kv, vl->total_q, vl->total_k);
    const struct { const char *name, *mem_name; const int *host; cl_mem mem; int total, longest; } offsets[2] = {
        {"cu_seqlens_q", "varlen.cu_seqlens_q", vl->cu_seqlens_q, vl->cu_seqlens_q_mem, vl->total_q, attn->seq_q},
        {"cu_seqlens_k", "varlen.cu_seqlens_k", vl->cu_seqlens_k, vl->cu_seqlens_k_mem, vl->total_k, attn->seq_kv},
    };
    for (int i = 0; i < 2; i++) {
        if (!offsets[i].host == !offsets[i].mem)
            return fcl_fail(ctx, offsets[i].host ? FLASHCL_INVALID_VALUE : FLASHCL_ERROR_NULL_ARGUMENT,
                            "varlen.%s: give the host array or the buffer (%s)", offsets[i].name,
                            offsets[i].host ? "both are set" : "neither is");
        const flashcl_status st =
            offsets[i].host ? check_host_offsets(ctx, offsets[i].name, offsets[i].host, attn->batch, offsets[i].total,
                                                 offsets[i].longest)
                            : check_device_offsets(ctx, offsets[i].mem_name, offsets[i].mem, attn->batch + 1);
        if (st != FLASHCL_SUCCESS)
            return st;
    }
    *packed = packed_view(attn, vl);
    flashcl_status st = fcl_validate_attention(ctx, packed);
    if (st == FLASHCL_SUCCESS)
        st = fcl_refuse_e4m3_cache(ctx, packed, "flashcl_forward_varlen");
    if (st != FLASHCL_SUCCESS)
        return st;
    /* E4M3: Vᵀ's rows in the workspace hold the packed keys rounded up plus 256 a sequence (src/forward.c). */
    if (packed->q.dtype == FLASHCL_E4M3 && ((long long)vl->total_k + 127) / 128 * 128 + 256LL * attn->batch > INT_MAX)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "varlen.total_k = %d with %d sequences: E4M3 inputs need "
                        "total_k + 256 batch below 2^31", vl->total_k, attn->batch);
    const struct index_buffer indices[2] = {
        {"varlen.cu_seqlens_q_mem", vl->cu_seqlens_q_mem, attn->batch + 1},
        {"varlen.cu_seqlens_k_mem", vl->cu_seqlens_k_mem, attn->batch + 1},
    };
    return check_indices_apart(ctx, packed, indices);
}

/* The problem of the views (packed or a cache's) on the grid of `grid`: its
 * sequences and the longest one's rows, which split-KV and the decode
 * kernel's rows are chosen from. */
static void varlen_problem(const struct flashcl_attention *views, const struct flashcl_attention *grid, int mode,
                           struct problem *p)
{
    fcl_forward_problem(views, p);
    p->varlen = mode;
    p->batch = grid->batch;
    p->seq_q = grid->seq_q;
    p->seq_kv = grid->seq_kv;
}

flashcl_status flashcl_forward_varlen_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                             const struct flashcl_varlen *varlen, struct flashcl_tile *out)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, varlen, out);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    struct flashcl_attention packed;
    flashcl_status st = validate_varlen(ctx, attn, varlen, &packed);
    if (st != FLASHCL_SUCCESS)
        return st;
    struct problem p;
    varlen_problem(&packed, attn, 1, &p);
    struct plan plan;
    st = fcl_plan(ctx, &p, fcl_scale_log2(attn), &plan);
    if (st == FLASHCL_SUCCESS)
        fcl_plan_to_tile(&plan, out);
    return st;
}

/* A host array in a buffer of its own: copied at creation (no command on the
 * queue, so nothing blocks and the caller may free the array at once). */
static cl_mem upload(flashcl_context *ctx, const int *host, int count, flashcl_status *st)
{
    cl_int err;
    cl_mem mem = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)count * sizeof(cl_int),
                                (void *)host, &err);
    if (!mem)
        *st = fcl_fail(ctx, (flashcl_status)err, "uploading %d varlen offsets failed (%d)", count, err);
    return mem;
}

flashcl_status flashcl_forward_varlen(flashcl_context *ctx, const struct flashcl_attention *attn,
                                      const struct flashcl_varlen *varlen, cl_command_queue queue,
                                      cl_uint num_wait_events, const cl_event *wait_list, cl_event *event)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, varlen, queue);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    struct flashcl_attention packed;
    flashcl_status st = validate_varlen(ctx, attn, varlen, &packed);  /* the views, once */
    if (st == FLASHCL_SUCCESS)
        st = fcl_check_queue(ctx, queue, num_wait_events, wait_list);
    if (st != FLASHCL_SUCCESS)
        return st;

    struct fcl_varlen_args args = {varlen->cu_seqlens_q_mem, varlen->cu_seqlens_k_mem, varlen->total_q,
                                   varlen->total_k, NULL, 0, 0, 0};
    const bool own_q = varlen->cu_seqlens_q != NULL, own_k = varlen->cu_seqlens_k != NULL;
    if (own_q)
        args.cu_q = upload(ctx, varlen->cu_seqlens_q, attn->batch + 1, &st);
    if (own_k && st == FLASHCL_SUCCESS)
        args.cu_k = upload(ctx, varlen->cu_seqlens_k, attn->batch + 1, &st);
    if (st == FLASHCL_SUCCESS) {
        /* The grid: the longest sequence's query blocks, heads, sequences. */
        struct flashcl_attention grid = packed;
        grid.batch = attn->batch;
        grid.seq_q = attn->seq_q;
        grid.seq_kv = attn->seq_kv;
        struct problem p;
        varlen_problem(&packed, attn, 1, &p);
        st = fcl_forward_planned(ctx, &grid, &p, &args, queue, num_wait_events, wait_list, event);
    }
    /* Released now: OpenCL keeps them until the kernel that reads them is done. */
    if (own_q && args.cu_q)
        clReleaseMemObject(args.cu_q);
    if (own_k && args.cu_k)
        clReleaseMemObject(args.cu_k);
    return st;
}

/* ---- a KV cache of per-sequence lengths, contiguous or paged (cl/varlen.h's VARLEN 2 and 3) ---- */

/* The paged layout: the problem as a dense call's, the pool's views, the
 * block table, and Q/O apart from the pool. */
static flashcl_status validate_pages(const flashcl_context *ctx, const struct flashcl_attention *attn,
                                     const struct flashcl_kv_pages *pg)
{
    const flashcl_status pages_reserved = FCL_CHECK_RESERVED(ctx, "pages.reserved", pg->reserved);
    if (pages_reserved != FLASHCL_SUCCESS)
        return pages_reserved;
    if (pg->page_size < 16)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "pages.page_size = %d; must be a positive multiple of 16",
                        pg->page_size);
    if (pg->page_size % 16 != 0)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "pages.page_size = %d is not a multiple of 16", pg->page_size);
    if (pg->pages_per_seq < 1)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "pages.pages_per_seq = %d; must be 1 or more",
                        pg->pages_per_seq);
    if (pg->num_pages < 1)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "pages.num_pages = %d; must be 1 or more", pg->num_pages);
    /* The dense call's limits on the real dims (attn.seq_kv at most 2^30, a window's seq_q + seq_kv below
     * 2^30: the kernels' int row arithmetic), and its dtypes (the pool's: Q's, or E4M3 K and V). */
    flashcl_status st = fcl_validate_problem(ctx, attn);
    if (st == FLASHCL_SUCCESS)
        st = fcl_check_e4m3_cache(ctx, attn);
    if (st != FLASHCL_SUCCESS)
        return st;
    if ((long long)pg->page_size * pg->pages_per_seq != attn->seq_kv)
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "attn.seq_kv = %d; must be pages.pages_per_seq * "
                        "pages.page_size = %lld (the keys of a sequence)", attn->seq_kv,
                        (long long)pg->page_size * pg->pages_per_seq);
    const long long entries = (long long)attn->batch * pg->pages_per_seq;
    if (entries > (1 << 30))
        return fcl_fail(ctx, FLASHCL_ERROR_INVALID_SHAPE, "a block table of attn.batch * pages.pages_per_seq = %lld "
                        "entries; at most 2^30", entries);
    if (!pg->block_table == !pg->block_table_mem)
        return fcl_fail(ctx, pg->block_table ? FLASHCL_INVALID_VALUE : FLASHCL_ERROR_NULL_ARGUMENT,
                        "pages: give block_table or block_table_mem (%s)", pg->block_table ? "both are set" : "neither is");
    if (pg->block_table_mem) {
        st = check_device_offsets(ctx, "pages.block_table", pg->block_table_mem, (int)entries);
        if (st != FLASHCL_SUCCESS)
            return st;
    } else {
        for (long long e = 0; e < entries; e++)
            if (pg->block_table[e] < 0 || pg->block_table[e] >= pg->num_pages)
                return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "pages.block_table[%lld] = %d; must be 0..%d", e,
                                pg->block_table[e], pg->num_pages - 1);
    }
    /* The problem's own checks (shape, dtypes, mask, the per-head vectors) on Q's rows: K and V stand in as Q. */
    struct flashcl_attention dense = *attn;
    dense.k = dense.v = attn->q;
    dense.seq_kv = attn->seq_q;
    dense.heads_kv = attn->heads_q;
    st = fcl_validate_problem(ctx, &dense);
    if (st != FLASHCL_SUCCESS)
        return st;
    /* Then every view at once: the inputs (Q, the pool's K and V, the per-head vectors), then O and the LSE. */
    const size_t pool[3] = {(size_t)pg->num_pages, (size_t)pg->page_size, (size_t)attn->heads_kv};
    const size_t rows_q[3] = {(size_t)attn->batch, (size_t)attn->seq_q, (size_t)attn->heads_q};
    const size_t d = (size_t)attn->head_dim, dv = (size_t)fcl_head_dim_v(attn);
    const flashcl_tensor sinks = fcl_vector_view(&attn->sinks), slopes = fcl_vector_view(&attn->alibi_slopes);
    struct view_spec views[7] = {
        {"attn.q", &attn->q, {rows_q[0], rows_q[1], rows_q[2]}, d},
        {"attn.k", &attn->k, {pool[0], pool[1], pool[2]}, d},
        {"attn.v", &attn->v, {pool[0], pool[1], pool[2]}, dv},
    };
    int n = 3;
    if (attn->sinks.mem)
        views[n++] = (struct view_spec){"attn.sinks", &sinks, {1, 1, rows_q[2]}, 1};
    if (attn->alibi_slopes.mem)
        views[n++] = (struct view_spec){"attn.alibi_slopes", &slopes, {1, 1, rows_q[2]}, 1};
    const int first_output = n;
    views[n++] = (struct view_spec){"attn.o", &attn->o, {rows_q[0], rows_q[1], rows_q[2]}, dv};
    if (attn->lse.mem)
        views[n++] = (struct view_spec){"attn.lse", &attn->lse, {rows_q[0], rows_q[1], rows_q[2]}, 1};
    return fcl_validate_views(ctx, views, n, first_output);
}

static flashcl_status validate_kv_lengths(const flashcl_context *ctx, const struct flashcl_attention *attn,
                                          const struct flashcl_kv_lengths *kv, const struct flashcl_kv_pages *pages)
{
    const flashcl_status lengths_reserved = FCL_CHECK_RESERVED(ctx, "lengths.reserved", kv->reserved);
    if (lengths_reserved != FLASHCL_SUCCESS)
        return lengths_reserved;
    flashcl_status st = pages ? validate_pages(ctx, attn, pages) : fcl_validate_attention(ctx, attn);
    if (st == FLASHCL_SUCCESS)
        st = fcl_check_e4m3_cache(ctx, attn);
    if (st != FLASHCL_SUCCESS)
        return st;
    if (!kv->cache_seqlens == !kv->cache_seqlens_mem)
        return fcl_fail(ctx, kv->cache_seqlens ? FLASHCL_INVALID_VALUE : FLASHCL_ERROR_NULL_ARGUMENT,
                        "lengths: give cache_seqlens or cache_seqlens_mem (%s)",
                        kv->cache_seqlens ? "both are set" : "neither is");
    if (kv->cache_seqlens_mem) {
        st = check_device_offsets(ctx, "lengths.cache_seqlens", kv->cache_seqlens_mem, attn->batch);
        if (st != FLASHCL_SUCCESS)
            return st;
    } else {
        for (int b = 0; b < attn->batch; b++)
            if (kv->cache_seqlens[b] < 0 || kv->cache_seqlens[b] > attn->seq_kv)
                return fcl_fail(ctx, FLASHCL_INVALID_VALUE, "lengths.cache_seqlens[%d] = %d; must be 0..attn.seq_kv "
                                "(%d)", b, kv->cache_seqlens[b], attn->seq_kv);
    }
    const struct index_buffer indices[2] = {
        {"lengths.cache_seqlens_mem", kv->cache_seqlens_mem, attn->batch},
        {"pages.block_table_mem", pages ? pages->block_table_mem : NULL, pages ? attn->batch * pages->pages_per_seq : 0},
    };
    return check_indices_apart(ctx, attn, indices);
}

flashcl_status flashcl_forward_kv_cache_config(flashcl_context *ctx, const struct flashcl_attention *attn,
                                               const struct flashcl_kv_lengths *lengths,
                                               const struct flashcl_kv_pages *pages, struct flashcl_tile *out)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, lengths, out);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = validate_kv_lengths(ctx, attn, lengths, pages);
    struct problem p;
    varlen_problem(attn, attn, pages ? 3 : 2, &p);
    struct plan plan;
    if (st == FLASHCL_SUCCESS)
        st = fcl_plan(ctx, &p, fcl_scale_log2(attn), &plan);
    if (st == FLASHCL_SUCCESS)
        fcl_plan_to_tile(&plan, out);
    return st;
}

flashcl_status flashcl_forward_kv_cache(flashcl_context *ctx, const struct flashcl_attention *attn,
                                        const struct flashcl_kv_lengths *lengths, const struct flashcl_kv_pages *pages,
                                        cl_command_queue queue, cl_uint num_wait_events, const cl_event *wait_list,
                                        cl_event *event)
{
    const flashcl_status entry = FCL_ENTER(ctx, ctx, attn, lengths, queue);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    flashcl_status st = validate_kv_lengths(ctx, attn, lengths, pages);  /* the views, once */
    if (st == FLASHCL_SUCCESS)
        st = fcl_check_queue(ctx, queue, num_wait_events, wait_list);
    if (st != FLASHCL_SUCCESS)
        return st;
    const bool own_lengths = lengths->cache_seqlens != NULL, own_table = pages && pages->block_table;
    cl_mem len_mem = own_lengths ? upload(ctx, lengths->cache_seqlens, attn->batch, &st) : lengths->cache_seqlens_mem;
    cl_mem table = NULL;
    if (pages)
        table = own_table && st == FLASHCL_SUCCESS
                    ? upload(ctx, pages->block_table, attn->batch * pages->pages_per_seq, &st)
                    : pages->block_table_mem;
    if (st == FLASHCL_SUCCESS) {
        /* cl/varlen.h's arguments: the lengths in cu_k (cu_q is not read), the pages for VARLEN 3. */
        const struct fcl_varlen_args args = {len_mem, len_mem, 0, 0, table, pages ? pages->page_size : 0,
                                             pages ? pages->pages_per_seq : 0, pages ? pages->num_pages : 0};
        struct problem p;
        varlen_problem(attn, attn, pages ? 3 : 2, &p);
        st = fcl_forward_planned(ctx, attn, &p, &args, queue, num_wait_events, wait_list, event);
    }
    if (own_lengths && len_mem)
        clReleaseMemObject(len_mem);
    if (own_table && table)
        clReleaseMemObject(table);
    return st;
}
