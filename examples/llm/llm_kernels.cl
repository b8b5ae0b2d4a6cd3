/*
 * The Llama block's small operations (everything but the projections, done
 * by CLBlast, and attention, done by flashcl). OpenCL C 1.2, f32.
 * Row-major activations: row t is token t.
 */

#ifndef NORM_GROUP
#define NORM_GROUP 128  /* work-items per row of rms_norm: a power of two */
#endif

/* out[r] = x[first_row + r] / sqrt(mean(x^2) + eps) · weight, one work-group per row. */
__kernel __attribute__((reqd_work_group_size(NORM_GROUP, 1, 1)))
void rms_norm(__global const float *x, int first_row, __global const float *weight, __global float *out,
              int width, float eps)
{
    __local float partial[NORM_GROUP];
    const int row = get_group_id(0), lid = get_local_id(0);
    __global const float *in = x + (size_t)(first_row + row) * width;
    float sum = 0.0f;
    for (int i = lid; i < width; i += NORM_GROUP)
        sum += in[i] * in[i];
    partial[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int half_size = NORM_GROUP / 2; half_size > 0; half_size /= 2) {
        if (lid < half_size)
            partial[lid] += partial[lid + half_size];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float scale = rsqrt(partial[0] / (float)width + eps);
    __global float *o = out + (size_t)row * width;
    for (int i = lid; i < width; i += NORM_GROUP)
        o[i] = in[i] * scale * weight[i];
}

/*
 * From the fused projection qkv [n][(heads_q + 2 heads_kv) · head_dim] of n
 * tokens at positions first_pos.., rotates Q and K (RoPE, llama.cpp's NORM
 * mode for arch llama: adjacent pairs (2i, 2i+1), angle pos · base^(-2i/d)
 * from the host's cos/sin tables [pos][d/2]) and writes Q to q_out
 * [n][heads_q][head_dim] and K, V to rows first_pos.. of the caches
 * [capacity][heads_kv][head_dim]. Global size (head_dim / 2, heads_q + 2
 * heads_kv, n): one pair of one head of one token per work-item.
 */
__kernel void rope_store(__global const float *qkv, __global const float *cos_table,
                         __global const float *sin_table, __global float *q_out, __global float *k_cache,
                         __global float *v_cache, int heads_q, int heads_kv, int head_dim, int first_pos)
{
    const int pair = get_global_id(0), slot = get_global_id(1), t = get_global_id(2);
    const int half_dim = head_dim / 2, row_width = (heads_q + 2 * heads_kv) * head_dim;
    const int pos = first_pos + t;
    __global const float *src = qkv + (size_t)t * row_width + slot * head_dim + 2 * pair;
    const float x0 = src[0], x1 = src[1];
    __global float *dst;
    if (slot < heads_q + heads_kv) {
        const float c = cos_table[(size_t)pos * half_dim + pair], s = sin_table[(size_t)pos * half_dim + pair];
        if (slot < heads_q)
            dst = q_out + ((size_t)t * heads_q + slot) * head_dim;
        else
            dst = k_cache + ((size_t)pos * heads_kv + (slot - heads_q)) * head_dim;
        dst[2 * pair] = x0 * c - x1 * s;
        dst[2 * pair + 1] = x0 * s + x1 * c;
    } else {
        dst = v_cache + ((size_t)pos * heads_kv + (slot - heads_q - heads_kv)) * head_dim;
        dst[2 * pair] = x0;
        dst[2 * pair + 1] = x1;
    }
}

/* out[t][i] = silu(gate) · up for the fused [n][2 · width] (gate then up). */
__kernel void swiglu(__global const float *gate_up, __global float *out, int width)
{
    const int i = get_global_id(0), t = get_global_id(1);
    const float g = gate_up[(size_t)t * 2 * width + i], u = gate_up[(size_t)t * 2 * width + width + i];
    out[(size_t)t * width + i] = g / (1.0f + exp(-g)) * u;
}

/* out[t] = table[ids[t]] (ids checked by the host). Global size (width, n). */
__kernel void embed(__global const int *ids, __global const float *table, __global float *out, int width)
{
    const int i = get_global_id(0), t = get_global_id(1);
    out[(size_t)t * width + i] = table[(size_t)ids[t] * width + i];
}
