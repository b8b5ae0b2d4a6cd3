/* flashcl-bench --decode: one or a few new queries per sequence against a
 * long cache (decode, chunked prefill), GQA, timed like the sweep (OpenCL
 * profiling events, warm-up, median) and reported as the K+V bytes read per
 * second — the figure decode is bound by — next to the kernel and its
 * split-KV count; sampled rows checked against the double reference. */
#include "bench_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostref.h"

int bench_parse_decode(const char *list, struct decode_shape *out, int max)
{
    int count = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        struct decode_shape s;
        char tail;
        if (count == max || sscanf(tok, "%d:%d:%d:%d:%d%c", &s.batch, &s.heads_q, &s.heads_kv, &s.seq_q, &s.seq_kv,
                                   &tail) != 5 ||
            s.batch < 1 || s.heads_kv < 1 || s.heads_q % s.heads_kv || s.seq_q < 1 || s.seq_kv < 1) {
            free(copy);
            return -1;
        }
        out[count++] = s;
    }
    free(copy);
    return count;
}

/* Largest |O - reference| over a few sampled (sequence, head, row) of a
 * [B, N, H, d] problem; causal when more than one query (chunked prefill). */
static double sampled_error(const struct decode_shape *s, int d, flashcl_dtype dtype, const void *q, const void *k,
                            const void *v, const void *o)
{
    const size_t nk = (size_t)s->seq_kv, hk = (size_t)s->heads_kv, dd = (size_t)d;
    double *kd = malloc(nk * dd * sizeof(double)), *vd = malloc(nk * dd * sizeof(double));
    double *scratch = malloc(nk * sizeof(double)), qd[FLASHCL_MAX_HEAD_DIM], ref[FLASHCL_MAX_HEAD_DIM], lse;
    double max_err = kd && vd && scratch ? 0 : NAN;
    for (int sample = 0; sample < 4 && kd && vd && scratch; sample++) {
        const size_t b = (size_t)sample % (size_t)s->batch, h = ((size_t)sample * 7) % (size_t)s->heads_q;
        const size_t row = (size_t)(s->seq_q - 1 - sample % s->seq_q), g = h / (size_t)(s->heads_q / s->heads_kv);
        for (size_t j = 0; j < nk; j++)
            for (size_t e = 0; e < dd; e++) {
                kd[j * dd + e] = hostref_load(k, dtype, ((b * nk + j) * hk + g) * dd + e);
                vd[j * dd + e] = hostref_load(v, dtype, ((b * nk + j) * hk + g) * dd + e);
            }
        const size_t q_at = ((b * (size_t)s->seq_q + row) * (size_t)s->heads_q + h) * dd;
        for (size_t e = 0; e < dd; e++)
            qd[e] = hostref_load(q, dtype, q_at + e);
        const long long last = s->seq_q > 1 ? (long long)row + (long long)nk - s->seq_q : (long long)nk - 1;
        hostref_attention_row(qd, kd, vd, nk, dd, 1.0 / sqrt((double)d), last, ref, &lse, scratch);
        for (size_t e = 0; e < dd; e++) {
            const double err = fabs(hostref_load(o, dtype, q_at + e) - ref[e]);
            max_err = err > max_err || err != err ? err : max_err;
        }
    }
    free(kd);
    free(vd);
    free(scratch);
    return max_err;
}

flashcl_status bench_decode(struct bench_env *env, const struct decode_shape *s, int d, flashcl_dtype dtype,
                            int warmup, int reps, struct decode_result *r)
{
    memset(r, 0, sizeof(*r));
    r->shape = *s;
    r->d = d;
    r->dtype = dtype;
    const size_t esize = flashcl_dtype_size(dtype);
    const size_t q_elems = (size_t)s->batch * (size_t)s->seq_q * (size_t)s->heads_q * (size_t)d;
    const size_t kv_elems = (size_t)s->batch * (size_t)s->seq_kv * (size_t)s->heads_kv * (size_t)d;
    void *q = malloc(q_elems * esize), *k = malloc(kv_elems * esize), *v = malloc(kv_elems * esize);
    void *o = malloc(q_elems * esize);
    if (!q || !k || !v || !o) {
        free(q);
        free(k);
        free(v);
        free(o);
        return FLASHCL_OUT_OF_HOST_MEMORY;
    }
    rng_seed((uint64_t)s->seq_kv * 131 + (uint64_t)d);
    bench_fill_random(q, dtype, q_elems);
    bench_fill_random(k, dtype, kv_elems);
    bench_fill_random(v, dtype, kv_elems);

    cl_context cl = flashcl_context_cl_context(env->ctx);
    cl_int err = CL_SUCCESS;
    struct bench_buffers b;
    memset(&b, 0, sizeof(b));
    b.q = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, q_elems * esize, q, &err);
    if (err == CL_SUCCESS)
        b.k = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, kv_elems * esize, k, &err);
    if (err == CL_SUCCESS)
        b.v = clCreateBuffer(cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, kv_elems * esize, v, &err);
    if (err == CL_SUCCESS)
        b.o = clCreateBuffer(cl, CL_MEM_READ_WRITE, q_elems * esize, NULL, &err);
    flashcl_status st = (flashcl_status)err;
    if (st == FLASHCL_SUCCESS) {
        struct flashcl_attention *a = &b.attn;
        a->batch = s->batch;
        a->seq_q = s->seq_q;
        a->seq_kv = s->seq_kv;
        a->heads_q = s->heads_q;
        a->heads_kv = s->heads_kv;
        a->head_dim = d;
        a->q = flashcl_tensor_bnhd(b.q, dtype, (size_t)s->seq_q, (size_t)s->heads_q, (size_t)d);
        a->k = flashcl_tensor_bnhd(b.k, dtype, (size_t)s->seq_kv, (size_t)s->heads_kv, (size_t)d);
        a->v = flashcl_tensor_bnhd(b.v, dtype, (size_t)s->seq_kv, (size_t)s->heads_kv, (size_t)d);
        a->o = flashcl_tensor_bnhd(b.o, dtype, (size_t)s->seq_q, (size_t)s->heads_q, (size_t)d);
        a->mask = s->seq_q > 1 ? FLASHCL_MASK_CAUSAL : FLASHCL_MASK_NONE;
        struct flashcl_tile t;
        st = flashcl_forward_config(env->ctx, a, &t);
        if (st == FLASHCL_SUCCESS) {
            r->kernel = flashcl_variant_name(t.variant);
            r->splits = t.splits;
            /* bench_time runs flashcl_forward on b.attn for the flash path's forward pass. */
            const struct bench_case c = {s->seq_kv, d, s->batch, s->heads_q, s->seq_q > 1, dtype,
                                         FLASHCL_PRECISION_EXACT, BENCH_PASS_FORWARD};
            st = bench_time(env, BENCH_FLASH, &b, &c, warmup, reps, &r->median_ms, &r->min_ms);
        }
        if (st == FLASHCL_SUCCESS)
            st = (flashcl_status)clEnqueueReadBuffer(env->queue, b.o, CL_TRUE, 0, q_elems * esize, o, 0, NULL, NULL);
        if (st == FLASHCL_SUCCESS) {
            r->kv_gb_s = 2.0 * (double)kv_elems * (double)esize / (r->median_ms * 1e-3) / 1e9;
            r->err_ref = sampled_error(s, d, dtype, q, k, v, o);
        }
    }
    r->status = st;
    bench_buffers_release(&b);
    free(q);
    free(k);
    free(v);
    free(o);
    return st;
}
