/* flashcl-bench --varlen: sequences of different lengths packed as
 * FlashAttention's varlen layout (Q, O [total, Hq, d], K, V [total, Hkv, d],
 * host cu_seqlens), timed like the sweep (bench_time: OpenCL profiling
 * events, warm-up, median), then one dense call of the same tokens on the
 * same data, so the two rates can be compared: what packing costs (or saves)
 * against a batch of equal lengths. */
#include "bench_varlen.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostref.h"

int bench_parse_lengths(const char *list, int **lengths, const char **why)
{
    *lengths = NULL;
    int *out = NULL, count = 0, capacity = 0;
    long long total = 0;
    const char *p = list;
    for (;;) {
        char *end;
        errno = 0;
        const long x = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0')) {
            *why = *list ? "expected comma-separated integers (no empty items)" : "the list is empty";
            break;
        }
        if (errno || x < 1 || x > INT_MAX) {
            *why = "every length must be 1..2147483647";
            break;
        }
        total += x;
        if (total > INT_MAX) {
            *why = "more than 2147483647 tokens in all";
            break;
        }
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            int *grown = realloc(out, (size_t)capacity * sizeof(int));
            if (!grown) {
                *why = "out of host memory";
                break;
            }
            out = grown;
        }
        out[count++] = (int)x;
        if (*end == '\0') {
            *lengths = out;
            return count;
        }
        p = end + 1;
    }
    free(out);
    return -1;
}

int bench_parse_heads(const char *arg, int *heads_q, int *heads_kv, const char **why)
{
    int hq, hkv;
    char tail;
    const int n = sscanf(arg, "%d:%d%c", &hq, &hkv, &tail);
    if (n == 1 && !strchr(arg, ':'))
        hkv = hq;  /* "H": as many K/V heads as query heads */
    else if (n != 2) {
        *why = "expected Hq:Hkv, e.g. 32:8";
        return -1;
    }
    if (hq < 1 || hkv < 1 || hq % hkv) {
        *why = "Hq and Hkv must be >= 1 and Hkv must divide Hq";
        return -1;
    }
    *heads_q = hq;
    *heads_kv = hkv;
    return 0;
}

double bench_varlen_flops(const int *lengths, int count, int d, int heads_q, int causal)
{
    double flops = 0;
    for (int i = 0; i < count; i++)
        flops += 4.0 * (double)lengths[i] * (double)lengths[i] * d * heads_q;
    return causal ? 0.5 * flops : flops;
}

/* Creates the case's buffers from the host data (of at least its rows), names
 * the kernel its plan takes and times it; varlen non-NULL: as that packed
 * batch, whose sequences are the call's batch and the longest its seq_q. */
static flashcl_status time_case(struct bench_env *env, const struct bench_case *c, const void *q, const void *k,
                                const void *v, const struct flashcl_varlen *varlen, int count, int longest,
                                int warmup, int reps, const char **kernel, double *median_ms, double *min_ms)
{
    struct bench_buffers b;
    flashcl_status st = bench_buffers_create(env, c, q, k, v, &b);
    if (st == FLASHCL_SUCCESS) {
        if (varlen) {
            /* The views are the packed rows (one "batch" of total rows; stride_batch is unused). */
            b.attn.batch = count;
            b.attn.seq_q = b.attn.seq_kv = longest;
            b.varlen = varlen;
        }
        *kernel = bench_kernel_name(env, BENCH_FLASH, &b);
        st = bench_time(env, BENCH_FLASH, &b, c, warmup, reps, median_ms, min_ms, NULL);
    }
    bench_buffers_release(&b);
    return st;
}

flashcl_status bench_varlen(struct bench_env *env, const struct varlen_batch *batch, int d, flashcl_dtype dtype,
                            enum flashcl_precision precision, int causal, int warmup, int reps,
                            struct varlen_result *r)
{
    memset(r, 0, sizeof(*r));
    r->d = d;
    r->causal = causal;
    r->dtype = dtype;
    r->precision = precision;
    r->median_ms = r->tflops = r->dense_ms = r->dense_tflops = NAN;
    const int count = batch->count;
    long long total = 0;
    r->shortest = INT_MAX;
    for (int i = 0; i < count; i++) {
        total += batch->lengths[i];
        r->shortest = batch->lengths[i] < r->shortest ? batch->lengths[i] : r->shortest;
        r->longest = batch->lengths[i] > r->longest ? batch->lengths[i] : r->longest;
    }
    r->total_tokens = (int)total;  /* bench_parse_lengths keeps it <= INT_MAX */
    r->dense_batch = count;
    r->dense_n = (int)((total + count / 2) / count);  /* the mean, rounded; >= 1 as every length is */

    /* One fill serves both calls: the dense one reads the first batch·N rows
     * (a little more than total when the mean rounds up). */
    const long long dense_rows = (long long)count * r->dense_n;
    const size_t rows = (size_t)(total > dense_rows ? total : dense_rows);
    const size_t esize = flashcl_dtype_size(dtype);
    const size_t q_elems = rows * (size_t)batch->heads_q * (size_t)d;
    const size_t kv_elems = rows * (size_t)batch->heads_kv * (size_t)d;
    void *q = malloc(q_elems * esize), *k = malloc(kv_elems * esize), *v = malloc(kv_elems * esize);
    int *cu_seqlens = malloc(((size_t)count + 1) * sizeof(int));
    flashcl_status st = q && k && v && cu_seqlens ? FLASHCL_SUCCESS : FLASHCL_OUT_OF_HOST_MEMORY;
    r->status = r->dense_status = st;
    if (st == FLASHCL_SUCCESS) {
        rng_seed((uint64_t)total * 131 + (uint64_t)d);
        bench_fill_repeated(q, dtype, q_elems);
        bench_fill_repeated(k, dtype, kv_elems);
        bench_fill_repeated(v, dtype, kv_elems);
        cu_seqlens[0] = 0;
        for (int i = 0; i < count; i++)
            cu_seqlens[i + 1] = cu_seqlens[i] + batch->lengths[i];

        struct flashcl_varlen varlen;
        memset(&varlen, 0, sizeof(varlen));
        varlen.total_q = varlen.total_k = r->total_tokens;
        varlen.cu_seqlens_q = varlen.cu_seqlens_k = cu_seqlens;
        const struct bench_case packed = {r->total_tokens, d, 1, batch->heads_q, causal, dtype, precision,
                                          BENCH_PASS_FORWARD, batch->heads_kv, false, false, 0.0f, 0, 0};
        r->status = time_case(env, &packed, q, k, v, &varlen, count, r->longest, warmup, reps, &r->kernel,
                              &r->median_ms, &r->min_ms);
        if (r->status != FLASHCL_SUCCESS)
            snprintf(r->error, sizeof(r->error), "%s", flashcl_last_error());
        else
            r->tflops = bench_varlen_flops(batch->lengths, count, d, batch->heads_q, causal) /
                        (r->median_ms * 1e-3) / 1e12;

        const struct bench_case dense = {r->dense_n, d, count, batch->heads_q, causal, dtype, precision,
                                         BENCH_PASS_FORWARD, batch->heads_kv, false, false, 0.0f, 0, 0};
        r->dense_status = time_case(env, &dense, q, k, v, NULL, 0, 0, warmup, reps, &r->dense_kernel,
                                    &r->dense_ms, &r->dense_min_ms);
        if (r->dense_status != FLASHCL_SUCCESS && !r->error[0])
            snprintf(r->error, sizeof(r->error), "%s", flashcl_last_error());
        else if (r->dense_status == FLASHCL_SUCCESS)
            r->dense_tflops = 4.0 * count * (double)r->dense_n * r->dense_n * d * batch->heads_q *
                              (causal ? 0.5 : 1.0) / (r->dense_ms * 1e-3) / 1e12;
    }
    free(q);
    free(k);
    free(v);
    free(cu_seqlens);
    return r->status;
}
