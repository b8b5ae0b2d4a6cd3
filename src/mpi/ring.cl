/*
 * ring.cl: the ring's own kernels (src/mpi/): copies between the caller's
 * views and the ring's chunk-major buffers, the LSE merge of a query chunk's
 * partials, and the f32 sums of the backward. Built once per dtype with
 * -DDTYPE (cl/storage.h). Chunk-major: [chunk][batch][row][head][dim], `rows`
 * rows a chunk, chunk g at g * chunk_stride elements.
 */
#include "../../cl/storage.h"

#if DTYPE == 0
typedef uint raw_t;  /* copies move bits, never values */
#else
typedef ushort raw_t;
#endif

/* Element (g, b, row, h, e) of a flat index over [chunks][batch][rows][heads][dim]. */
static void split_index(ulong i, int rows, int heads, int dim, int batch, ulong *g, ulong *b, ulong *row,
                        ulong *h, ulong *e)
{
    *e = i % (ulong)dim;
    i /= (ulong)dim;
    *h = i % (ulong)heads;
    i /= (ulong)heads;
    *row = i % (ulong)rows;
    i /= (ulong)rows;
    *b = i % (ulong)batch;
    *g = i / (ulong)batch;
}

/* View (local rows g * rows + row) -> chunk-major, `total` elements from chunk first_chunk on. */
__kernel void ring_gather(__global const raw_t *src, ulong off, ulong sb, ulong ss, ulong sh, __global raw_t *dst,
                          ulong dst_off, ulong chunk_stride, int rows, int heads, int dim, int batch,
                          int first_chunk, ulong total)
{
    const ulong i = get_global_id(0);
    if (i >= total)
        return;
    ulong g, b, row, h, e;
    split_index(i, rows, heads, dim, batch, &g, &b, &row, &h, &e);
    g += (ulong)first_chunk;
    const ulong inner = i % ((ulong)batch * rows * heads * dim);
    dst[dst_off + g * chunk_stride + inner] = src[off + b * sb + (g * rows + row) * ss + h * sh + e];
}

/* LSE view f32 [batch][heads][local rows] -> chunk-major [chunk][batch][heads][row]. */
__kernel void ring_gather_lse(__global const float *src, ulong off, ulong sb, ulong ss, ulong sh,
                              __global float *dst, int rows, int heads, int batch, ulong total)
{
    const ulong i = get_global_id(0);
    if (i >= total)
        return;
    const ulong row = i % (ulong)rows, h = i / rows % (ulong)heads, b = i / rows / heads % (ulong)batch;
    const ulong g = i / rows / heads / batch;
    dst[i] = src[off + b * sb + h * sh + (g * rows + row) * ss];
}

/* One query chunk's n_parts partials (slot s: O [batch][row][head][dim] in the storage type at
 * s * part_stride, LSE f32 [batch][head][row] at s * lse_stride), merged in slot order into O and the
 * LSE (local rows local_row0 + row). The arithmetic of cl/split_combine.h's flash_forward_combine, term
 * for term: the largest LSE as reference, weights exp(lse_s - m), an fma a term, a split that saw no
 * key (LSE -inf) weighted 0 and its partial kept out of the sum. */
__kernel void ring_merge(__global const storage_t *part, __global const float *part_lse, int n_parts,
                         ulong part_stride, ulong lse_stride, int rows, int heads, int batch, int local_row0,
                         __global storage_t *o, ulong o_off, ulong o_sb, ulong o_ss, ulong o_sh,
                         __global float *lse, ulong l_off, ulong l_sb, ulong l_ss, ulong l_sh, int has_lse,
                         int dim)
{
    const int gid = (int)get_global_id(0), h = (int)get_global_id(1), b = (int)get_global_id(2);
    const int row = gid / dim, c = gid % dim;
    if (row >= rows)
        return;
    const ulong l_first = ((ulong)b * heads + (ulong)h) * rows + (ulong)row;
    const ulong p_first = (((ulong)b * rows + (ulong)row) * heads + (ulong)h) * dim + (ulong)c;
    float m = -INFINITY;
    for (int s = 0; s < n_parts; s++)
        m = fmax(m, part_lse[l_first + (ulong)s * lse_stride]);
    const float m_ref = m == -INFINITY ? 0.0f : m;
    float weight_sum = 0.0f, acc = 0.0f;
    for (int s = 0; s < n_parts; s++) {
        const float l_s = part_lse[l_first + (ulong)s * lse_stride];
        const float p_s = LOAD(part, p_first + (ulong)s * part_stride);
        const float w = exp(l_s - m_ref);
        weight_sum += w;
        acc = fma(w, w > 0.0f ? p_s : 0.0f, acc);
    }
    const ulong local_row = (ulong)(local_row0 + row);
    STORE(o, o_off + (ulong)b * o_sb + local_row * o_ss + (ulong)h * o_sh + (ulong)c,
          weight_sum > 0.0f ? acc / weight_sum : 0.0f);
    if (has_lse && c == 0)
        lse[l_off + (ulong)b * l_sb + (ulong)h * l_sh + local_row * l_ss] =
            weight_sum > 0.0f ? m + log(weight_sum) : -INFINITY;
}

/* acc[i] += part[i] (a chunk-pair call's gradient, in the storage type, into an f32 sum). */
__kernel void ring_accumulate(__global float *acc, ulong acc_off, __global const storage_t *part, ulong total)
{
    const ulong i = get_global_id(0);
    if (i < total)
        acc[acc_off + i] += LOAD(part, i);
}

/* acc[i] += in[i] (f32: the dK/dV sums that arrived from the next rank). */
__kernel void ring_add(__global float *acc, __global const float *in, ulong total)
{
    const ulong i = get_global_id(0);
    if (i < total)
        acc[i] += in[i];
}

/* Chunk-major f32 sums (chunk g at g * chunk_stride + src_off) -> the caller's view in the storage type. */
__kernel void ring_store(__global const float *src, ulong src_off, ulong chunk_stride, __global storage_t *dst,
                         ulong off, ulong sb, ulong ss, ulong sh, int rows, int heads, int dim, int batch,
                         ulong total)
{
    const ulong i = get_global_id(0);
    if (i >= total)
        return;
    ulong g, b, row, h, e;
    split_index(i, rows, heads, dim, batch, &g, &b, &row, &h, &e);
    const ulong inner = i % ((ulong)batch * rows * heads * dim);
    STORE(dst, off + b * sb + (g * rows + row) * ss + h * sh + e, src[src_off + g * chunk_stride + inner]);
}
