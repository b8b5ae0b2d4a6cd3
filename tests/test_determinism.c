/* Bitwise determinism of every kernel and dtype that runs on this device:
 * the same call made twice on the suite's in-order queue and once on an
 * out-of-order queue (where the device has one; the library's events order
 * its kernels there) gives outputs equal byte for byte (memcmp), the
 * outputs poisoned before each run. Forward: the portable and register-tiled
 * kernels, split-KV forced on each, a packed varlen batch, a KV cache
 * contiguous and paged (on those and on the decode kernel, split too); the backward; the standard forward and backward
 * (in-order queues only: CLBlast's GEMMs are ordered by the queue). Every
 * forward case is causal with the LSE, GQA, and runs in f32, f16 and bf16.
 * (The tensor-core and TF32 kernels' determinism is test_tensor_cores',
 * on a device that has them.) Correctness is the other suites' concern. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum op { OP_DENSE, OP_VARLEN, OP_KV_CACHE, OP_KV_PAGED, OP_BACKWARD, OP_STANDARD, OP_STANDARD_BACKWARD };

static const struct {
    const char *name;
    enum op op;
    const char *options;  /* kernel_options of the context */
    const char *kernel;  /* the kernel that must run (forward ops) */
    int splits;
} kinds[] = {
    {"portable", OP_DENSE, "tensor-core:off;tf32:off;register-tiled:off", "portable", 1},
    {"register-tiled", OP_DENSE, "tensor-core:off;tf32:off", "register-tiled", 1},
    {"portable, 3 splits", OP_DENSE, "tensor-core:off;tf32:off;register-tiled:off;portable:splits=3,block_n=16",
     "portable", 3},
    {"register-tiled, 3 splits", OP_DENSE, "tensor-core:off;tf32:off;register-tiled:splits=3,block_n=16",
     "register-tiled", 3},
    {"varlen, portable", OP_VARLEN, "tensor-core:off;tf32:off;register-tiled:off", "portable", 1},
    {"varlen, register-tiled", OP_VARLEN, "tensor-core:off;tf32:off", "register-tiled", 1},
    {"KV cache, register-tiled", OP_KV_CACHE, "decode:off;decode-tensor-core:off;tensor-core:off;tf32:off", "register-tiled", 1},
    {"paged KV cache, portable", OP_KV_PAGED, "decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;register-tiled:off",
     "portable", 1},
    {"KV cache, decode", OP_KV_CACHE, "decode-tensor-core:off;decode:block_n=32,splits=1", "decode", 1},
    {"paged KV cache, decode, 3 splits", OP_KV_PAGED, "decode-tensor-core:off;decode:block_n=32,splits=3", "decode", 3},
    {"backward, register-tiled", OP_BACKWARD, "backward-tensor-core:off",
     "backward-tiled", 1},
    {"backward, portable", OP_BACKWARD, "backward-tensor-core:off;backward-tiled:off",
     "backward", 1},
    {"standard forward", OP_STANDARD, "", 0, 1},
    {"standard backward", OP_STANDARD_BACKWARD, "", 0, 1},
};
#define N_KINDS (int)(sizeof(kinds) / sizeof(kinds[0]))
static const flashcl_dtype dtypes[] = {FLASHCL_F32, FLASHCL_F16, FLASHCL_BF16};

enum { HQ = 4, HK = 2, D = 32, PAGE = 16 };
enum { T_Q, T_K, T_V, T_O, T_LSE, T_DO, T_DQ, T_DK, T_DV, N_TENSORS };

struct problem {
    struct flashcl_attention a;
    struct flashcl_attention_grad g;
    struct flashcl_varlen vl;
    struct flashcl_kv_lengths lengths;
    struct flashcl_kv_pages pages;
    int cu_q[4], cu_k[4], cache_len[2], table[2 * 6];
    cl_mem mem[N_TENSORS];
    size_t bytes[N_TENSORS];
};

static cl_mem random_buffer(size_t elems, flashcl_dtype dtype, size_t *bytes)
{
    const size_t esize = flashcl_dtype_size(dtype);
    unsigned char *h = malloc(elems * esize);
    ck_assert_ptr_nonnull(h);
    for (size_t x = 0; x < elems; x++)
        hostref_store(h, dtype, x, (float)rng_uniform(-1, 1));
    cl_int err;
    cl_mem m = clCreateBuffer(test_env_get()->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, elems * esize, h, &err);
    ck_assert_ptr_nonnull(m);
    free(h);
    *bytes = elems * esize;
    return m;
}

/* Buffers and views for op in dtype: every tensor contiguous, random. */
static void problem_create(struct problem *p, enum op op, flashcl_dtype dtype)
{
    memset(p, 0, sizeof(*p));
    rng_seed(1234 + (uint64_t)op);
    struct flashcl_attention *a = &p->a;
    a->heads_q = HQ;
    a->heads_kv = HK;
    a->head_dim = D;
    a->mask = FLASHCL_MASK_CAUSAL;
    size_t q_rows, kv_rows, q_per = 0, kv_per = 0;  /* rows of Q/O and K/V in all; per batch entry (0: packed) */
    if (op == OP_VARLEN) {
        const int cu_q[4] = {0, 10, 10, 45}, cu_k[4] = {0, 20, 25, 90};
        memcpy(p->cu_q, cu_q, sizeof(cu_q));
        memcpy(p->cu_k, cu_k, sizeof(cu_k));
        a->batch = 3;
        a->seq_q = 35;
        a->seq_kv = 65;
        q_rows = 45;
        kv_rows = 90;
        p->vl.total_q = 45;
        p->vl.total_k = 90;
        p->vl.cu_seqlens_q = p->cu_q;
        p->vl.cu_seqlens_k = p->cu_k;
    } else if (op == OP_KV_CACHE || op == OP_KV_PAGED) {
        a->batch = 2;
        a->seq_q = 7;
        a->seq_kv = 96;
        q_per = 7;
        kv_per = op == OP_KV_PAGED ? PAGE : 96;
        q_rows = 2 * q_per;
        kv_rows = op == OP_KV_PAGED ? 12 * PAGE : 2 * 96;
        p->cache_len[0] = 93;
        p->cache_len[1] = 40;
        p->lengths.cache_seqlens = p->cache_len;
        if (op == OP_KV_PAGED) {
            for (int i = 0; i < 12; i++)
                p->table[i] = (i * 5 + 3) % 12;  /* every page once, out of order */
            p->pages.page_size = PAGE;
            p->pages.pages_per_seq = 6;
            p->pages.num_pages = 12;
            p->pages.block_table = p->table;
        }
    } else {
        a->batch = 2;
        a->seq_q = 45;
        a->seq_kv = 90;
        q_per = 45;
        kv_per = 90;
        q_rows = 2 * q_per;
        kv_rows = 2 * kv_per;
    }
    const bool backward = op == OP_BACKWARD || op == OP_STANDARD_BACKWARD;
    for (int t = 0; t < N_TENSORS; t++) {
        if (t >= T_DO && !backward)
            break;
        const bool kv = t == T_K || t == T_V || t == T_DK || t == T_DV;
        const size_t rows = kv ? kv_rows : q_rows, heads = kv ? HK : HQ;
        p->mem[t] = random_buffer(rows * heads * (t == T_LSE ? 1 : D), t == T_LSE ? FLASHCL_F32 : dtype,
                                  &p->bytes[t]);
    }
    flashcl_tensor *views[N_TENSORS] = {&a->q, &a->k, &a->v, &a->o, &a->lse, &p->g.d_o, &p->g.d_q, &p->g.d_k,
                                        &p->g.d_v};
    for (int t = 0; t < N_TENSORS; t++) {
        if (!p->mem[t])
            continue;
        const bool kv = t == T_K || t == T_V || t == T_DK || t == T_DV;
        const size_t per = kv ? kv_per : q_per, heads = kv ? HK : HQ;
        const size_t seq = per ? per : (kv ? kv_rows : q_rows);
        *views[t] = t == T_LSE ? flashcl_tensor_lse(p->mem[t], seq, HQ)
                               : flashcl_tensor_bnhd(p->mem[t], dtype, seq, heads, D);
    }
}

static void problem_destroy(struct problem *p)
{
    for (int t = 0; t < N_TENSORS; t++)
        if (p->mem[t])
            clReleaseMemObject(p->mem[t]);
}

static flashcl_status enqueue(flashcl_context *ctx, enum op op, struct problem *p, cl_command_queue queue)
{
    switch (op) {
    case OP_DENSE:
        return flashcl_forward(ctx, &p->a, queue, 0, NULL, NULL);
    case OP_VARLEN:
        return flashcl_forward_varlen(ctx, &p->a, &p->vl, queue, 0, NULL, NULL);
    case OP_KV_CACHE:
        return flashcl_forward_kv_cache(ctx, &p->a, &p->lengths, NULL, queue, 0, NULL, NULL);
    case OP_KV_PAGED:
        return flashcl_forward_kv_cache(ctx, &p->a, &p->lengths, &p->pages, queue, 0, NULL, NULL);
    case OP_BACKWARD:
        return flashcl_backward(ctx, &p->a, &p->g, NULL, queue, 0, NULL, NULL);
    case OP_STANDARD:
        return flashcl_standard_forward(ctx, &p->a, NULL, queue, 0, NULL, NULL);
    default:
        return flashcl_standard_backward(ctx, &p->a, &p->g, NULL, queue, 0, NULL, NULL);
    }
}

static flashcl_status config(flashcl_context *ctx, enum op op, struct problem *p, struct flashcl_tile *t)
{
    switch (op) {
    case OP_DENSE:
        return flashcl_forward_config(ctx, &p->a, t);
    case OP_VARLEN:
        return flashcl_forward_varlen_config(ctx, &p->a, &p->vl, t);
    case OP_KV_CACHE:
        return flashcl_forward_kv_cache_config(ctx, &p->a, &p->lengths, NULL, t);
    case OP_KV_PAGED:
        return flashcl_forward_kv_cache_config(ctx, &p->a, &p->lengths, &p->pages, t);
    default:
        return flashcl_backward_config(ctx, &p->a, &p->g, t);
    }
}

/* Poisons the outputs, runs, reads every output buffer back (one block). */
static unsigned char *run(flashcl_context *ctx, enum op op, struct problem *p, cl_command_queue queue,
                          size_t *total)
{
    const bool backward = op == OP_BACKWARD || op == OP_STANDARD_BACKWARD;
    const int first = backward ? T_DQ : T_O, last = backward ? T_DV : T_LSE;
    *total = 0;
    for (int t = first; t <= last; t++)
        *total += p->bytes[t];
    unsigned char *out = malloc(*total), pattern = 0xff;
    ck_assert_ptr_nonnull(out);
    for (int t = first; t <= last; t++)
        ck_assert_cl(clEnqueueFillBuffer(queue, p->mem[t], &pattern, 1, 0, p->bytes[t], 0, NULL, NULL));
    ck_assert_cl(clFinish(queue));
    ck_assert_flashcl_ok(enqueue(ctx, op, p, queue));
    ck_assert_cl(clFinish(queue));
    size_t at = 0;
    for (int t = first; t <= last; t++) {
        ck_assert_cl(clEnqueueReadBuffer(queue, p->mem[t], CL_TRUE, 0, p->bytes[t], out + at, 0, NULL, NULL));
        at += p->bytes[t];
    }
    return out;
}

START_TEST(same_bytes_every_time)
{
    struct test_env *e = test_env_get();
    const int kind = _i / 3;
    const flashcl_dtype dtype = dtypes[_i % 3];
    const enum op op = kinds[kind].op;
    const bool standard = op == OP_STANDARD || op == OP_STANDARD_BACKWARD;
    if (standard && dtype == FLASHCL_BF16)
        return;  /* the standard paths widen f16 and bf16 the same way: f32 and f16 cover them */
    flashcl_context *ctx = *kinds[kind].options ? test_context_with_options(kinds[kind].options) : e->ctx;
    struct problem p;
    problem_create(&p, op, dtype);
    if (op == OP_BACKWARD || op == OP_STANDARD_BACKWARD) {
        /* The backward's O and LSE: the forward's, once. */
        ck_assert_flashcl_ok(flashcl_forward(ctx, &p.a, e->queue, 0, NULL, NULL));
        ck_assert_cl(clFinish(e->queue));
    }
    if (!standard) {
        struct flashcl_tile t;
        ck_assert_flashcl_ok(config(ctx, op, &p, &t));
        ck_assert_str_eq(t.kernel, kinds[kind].kernel);
        ck_assert_int_eq(t.splits, kinds[kind].splits);
    }
    cl_command_queue_properties supported = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_QUEUE_PROPERTIES, sizeof(supported), &supported, NULL));
    const cl_command_queue_properties ooo = standard ? 0 : supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
    cl_int err;
    cl_command_queue second = clCreateCommandQueue(e->cl, e->device, ooo, &err);
    ck_assert_ptr_nonnull(second);
    size_t n = 0, n2 = 0;
    unsigned char *first = run(ctx, op, &p, e->queue, &n);
    for (int r = 1; r < 3; r++) {
        unsigned char *again = run(ctx, op, &p, r == 2 ? second : e->queue, &n2);
        ck_assert_uint_eq(n, n2);
        size_t x = 0;
        while (x < n && first[x] == again[x])
            x++;
        ck_assert_msg(x == n, "%s %s, run %d (%s queue): byte %zu of the outputs differs", kinds[kind].name,
                      flashcl_dtype_name(dtype), r, r == 2 ? (ooo ? "out-of-order" : "second in-order") : "same", x);
        free(again);
    }
    printf("%-26s %-4s: 3 runs bit-identical (%zu output bytes; the third on a%s queue)\n", kinds[kind].name,
           flashcl_dtype_name(dtype), n, ooo ? "n out-of-order" : " second in-order");
    free(first);
    clReleaseCommandQueue(second);
    problem_destroy(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("determinism");
    TCase *tc = tcase_create("determinism");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, same_bytes_every_time, 0, N_KINDS * 3);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
