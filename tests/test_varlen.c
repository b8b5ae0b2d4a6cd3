/* flashcl_forward_varlen: packed batches of different lengths against the
 * double reference per sequence (empty sequences, 1, block +- 1, primes; GQA;
 * causal and windows aligned per sequence; every dtype; host and device
 * offsets), outputs poisoned and guarded by a row on each side; bad host
 * offsets refused with the outputs untouched; bad device offsets clamped,
 * never written past the packed rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_hooks.h"
#include "varlen_common.h"

#define F32 FLASHCL_F32
#define F16 FLASHCL_F16
#define BF16 FLASHCL_BF16

static const struct vl_case cases[] = {
    {5, {5, 0, 17, 1, 33}, {5, 0, 17, 1, 33}, 4, 2, 32, F32, FLASHCL_MASK_NONE},
    {4, {16, 15, 17, 7}, {30, 1, 40, 7}, 4, 1, 64, F16, FLASHCL_MASK_CAUSAL},
    {3, {40, 3, 64}, {40, 3, 64}, 2, 2, 24, BF16, FLASHCL_MASK_WINDOW, 8, 0},
    {2, {10, 20}, {4, 12}, 2, 2, 33, F32, FLASHCL_MASK_CAUSAL},             /* rows with no key */
    {4, {16, 15, 17, 7}, {30, 1, 40, 7}, 4, 2, 64, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1},  /* device offsets */
    {1, {1}, {97}, 2, 2, 16, F16, FLASHCL_MASK_NONE},                       /* one decode query */
    {3, {0, 0, 9}, {0, 5, 9}, 2, 1, 8, F32, FLASHCL_MASK_WINDOW, 2, 3, 1},
};

START_TEST(against_reference)
{
    varlen_run(NULL, &cases[_i], 500 + (uint64_t)_i, "default kernel");
    /* The portable kernel with small odd tiles: blocks cross sequence ends. */
    varlen_run(test_context_with_options("decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;register-tiled:off;portable:block_m=3,block_n=5"),
        &cases[_i], 520 + (uint64_t)_i, "portable 3x5");
    /* The decode kernel with splits where its rows fit (a KV head's query rows in one group). */
    varlen_run(test_context_with_options("decode-tensor-core:off;decode:block_n=32,splits=3"), &cases[_i], 540 + (uint64_t)_i, "decode split 3");
}
END_TEST

/* Host offsets are checked fully: each refusal names the value, enqueues
 * nothing and leaves O and the LSE as they were. */
START_TEST(bad_host_offsets)
{
    struct test_env *e = test_env_get();
    struct packed p;
    packed_create(&p, &cases[0], 9);
    size_t before_bytes, after_bytes;
    unsigned char *before = vl_read_all(p.o_mem, &before_bytes);
    const struct { int index, value; const char *message; } bad[] = {
        {0, -1, "cu_seqlens_q[0] = -1"},
        {2, 4, "is below"},
        {3, 40, "more than the longest"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int cu[MAX_SEQS + 1];
        memcpy(cu, p.cu_q, sizeof(cu));
        cu[bad[i].index] = bad[i].value;
        struct flashcl_varlen vl = p.vl;
        vl.cu_seqlens_q = cu;
        ck_assert_status(flashcl_forward_varlen(e->ctx, &p.attn, &vl, e->queue, 0, NULL, NULL), FLASHCL_INVALID_VALUE);
        ck_assert_msg(strstr(flashcl_last_error(), bad[i].message) != NULL, "%s", flashcl_last_error());
    }
    struct flashcl_varlen vl = p.vl;
    vl.cu_seqlens_k_mem = p.q_mem;  /* both the array and a buffer */
    ck_assert_status(flashcl_forward_varlen(e->ctx, &p.attn, &vl, e->queue, 0, NULL, NULL), FLASHCL_INVALID_VALUE);
    vl = p.vl;
    vl.cu_seqlens_q = NULL;  /* neither */
    ck_assert_status(flashcl_forward_varlen(e->ctx, &p.attn, &vl, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    vl = p.vl;
    vl.cu_seqlens_q = NULL;
    cl_int err;
    vl.cu_seqlens_q_mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 5 * sizeof(int), NULL, &err);  /* batch 5 needs 6 */
    ck_assert_status(flashcl_forward_varlen(e->ctx, &p.attn, &vl, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_OUT_OF_BOUNDS);
    clReleaseMemObject(vl.cu_seqlens_q_mem);
    vl = p.vl;
    vl.total_q = 40;  /* the views hold 56 rows; a total of 40 is fine for them, but the offsets reach 56 */
    ck_assert_status(flashcl_forward_varlen(e->ctx, &p.attn, &vl, e->queue, 0, NULL, NULL), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "past the 40 packed rows"));
    vl = p.vl;
    vl.reserved[0] = 1;
    ck_assert_status(flashcl_forward_varlen(e->ctx, &p.attn, &vl, e->queue, 0, NULL, NULL), FLASHCL_INVALID_VALUE);
    struct flashcl_attention a = p.attn;
    a.seq_q = 57;  /* a longest sequence past the total */
    ck_assert_status(flashcl_forward_varlen(e->ctx, &a, &p.vl, e->queue, 0, NULL, NULL), FLASHCL_ERROR_INVALID_SHAPE);
    unsigned char *after = vl_read_all(p.o_mem, &after_bytes);
    ck_assert_int_eq(memcmp(before, after, before_bytes), 0);
    free(before);
    free(after);
    packed_free(&p);
}
END_TEST

/* Offsets on the device are not checked, but no value can make a kernel
 * write outside the packed rows: garbage offsets run, and the guard rows
 * around O keep their poison. */
START_TEST(bad_device_offsets_stay_inside)
{
    struct test_env *e = test_env_get();
    struct vl_case c = cases[4];
    struct packed p;
    packed_create(&p, &c, 11);
    const int garbage_q[] = {-100, 1000, 3, -7, 2147483647}, garbage_k[] = {5, 2, 99999, -1, 50};
    ck_assert_cl(clEnqueueWriteBuffer(e->queue, p.cu_q_mem, CL_TRUE, 0, sizeof(garbage_q), garbage_q, 0, NULL, NULL));
    ck_assert_cl(clEnqueueWriteBuffer(e->queue, p.cu_k_mem, CL_TRUE, 0, sizeof(garbage_k), garbage_k, 0, NULL, NULL));
    /* O and the LSE inside wide poisoned margins (16 rows of O, 4096 floats of LSE on each side). */
    const size_t o_row = p.row_q * p.esize, o_margin = 16 * o_row, o_bytes = (size_t)p.total_q * o_row + 2 * o_margin;
    const size_t l_margin = 4096 * sizeof(float);
    const size_t l_bytes = (size_t)c.heads_q * (size_t)p.total_q * sizeof(float) + 2 * l_margin;
    unsigned char *poison = malloc(o_bytes > l_bytes ? o_bytes : l_bytes);
    memset(poison, 0xff, o_bytes > l_bytes ? o_bytes : l_bytes);
    cl_mem o_wide = vl_upload(poison, o_bytes), l_wide = vl_upload(poison, l_bytes);
    free(poison);
    struct flashcl_attention a = p.attn;
    a.o.mem = o_wide;
    a.o.offset = o_margin;
    a.lse.mem = l_wide;
    a.lse.offset = l_margin;
    for (int layout = 0; layout < 3; layout++) {  /* the default kernel, the portable one, decode with splits */
        flashcl_context *ctx = layout == 1 ? test_context_with_options("decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;"
                                                                       "register-tiled:off;portable:block_m=3,block_n=5")
                             : layout == 2 ? test_context_with_options("decode-tensor-core:off;decode:block_n=32,splits=3")
                                           : e->ctx;
        cl_event done = NULL;
        ck_assert_flashcl_ok(flashcl_forward_varlen(ctx, &a, &p.vl, e->queue, 0, NULL, &done));
        ck_assert_cl(clWaitForEvents(1, &done));
        clReleaseEvent(done);
        size_t got;
        unsigned char *o = vl_read_all(o_wide, &got), *l = vl_read_all(l_wide, &got);
        for (size_t x = 0; x < o_margin; x++) {
            ck_assert_msg(o[x] == 0xff, "a garbage offset wrote %zu bytes before the packed rows", o_margin - x);
            ck_assert_msg(o[o_bytes - 1 - x] == 0xff, "a garbage offset wrote after the packed rows");
        }
        for (size_t x = 0; x < l_margin; x++) {
            ck_assert_msg(l[x] == 0xff, "a garbage offset wrote before the LSE");
            ck_assert_msg(l[l_bytes - 1 - x] == 0xff, "a garbage offset wrote after the LSE");
        }
        free(o);
        free(l);
    }
    clReleaseMemObject(o_wide);
    clReleaseMemObject(l_wide);
    packed_free(&p);
}
END_TEST

/* Where tensor cores exist (assumed here; nothing launched), a varlen f16
 * call of 16-byte rows and a head dim they take plans the tensor-core
 * kernel; a head dim they do not take, an FMA kernel. */
START_TEST(varlen_plans_tensor_cores)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params params = {0};
    params.context = e->cl;
    params.device = e->device;
    const struct fcl_test_hooks hooks = {.assume_tensor_cores = true, .assume_compute_capability = 90};
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(fcl_context_create(&params, &hooks, &ctx));
    struct packed p;
    packed_create(&p, &cases[1], 13);  /* f16, d = 64, causal */
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_varlen_config(ctx, &p.attn, &p.vl, &t));
    ck_assert_str_eq(t.kernel, "tensor-core");
    packed_free(&p);
    packed_create(&p, &cases[2], 13);  /* bf16, d = 24 */
    ck_assert_flashcl_ok(flashcl_forward_varlen_config(ctx, &p.attn, &p.vl, &t));
    ck_assert_str_eq(t.kernel, "register-tiled");
    packed_free(&p);
    flashcl_context_destroy(&ctx);
}
END_TEST

/* ---- a KV cache filled to a length per sequence ---- */


static const struct kv_case kv_cases[] = {
    {4, 1, 64, {0, 1, 64, 37}, 4, 2, 32, F16, FLASHCL_MASK_NONE},                /* decode */
    {3, 5, 48, {5, 17, 48}, 2, 1, 64, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1},       /* chunked prefill */
    {2, 3, 40, {3, 33}, 2, 2, 24, BF16, FLASHCL_MASK_WINDOW, 6, 0},
    {2, 8, 20, {2, 20}, 2, 2, 16, F32, FLASHCL_MASK_CAUSAL},                    /* rows with no key */
    {3, 1, 64, {0, 17, 64}, 4, 2, 32, F16, FLASHCL_MASK_NONE, 0, 0, 0, 16, 1},    /* paged decode */
    {2, 4, 96, {40, 96}, 2, 1, 64, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1, 32, 0},     /* paged, device table */
};


START_TEST(kv_cache)
{
    kv_cache_run(NULL, &kv_cases[_i], 600 + (uint64_t)_i, false);
    kv_cache_run(test_context_with_options("decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;register-tiled:off;portable:block_m=3,block_n=5"),
           &kv_cases[_i], 610 + (uint64_t)_i, false);
    kv_cache_run(test_context_with_options("decode-tensor-core:off;decode:block_n=32,splits=3"), &kv_cases[_i], 620 + (uint64_t)_i, false);
}
END_TEST

/* Logit softcapping on packed batches and KV caches (contiguous and paged), on the default kernel, the
 * portable one with small odd tiles and the decode kernel with splits; caps against scores of scale 1/sqrt(d)
 * small enough that tanh bends them. Packed batches with attention sinks too (the merge's VARLEN build adds
 * the sink once; a sequence with queries and no keys gets O = 0, LSE = sink). */
static const struct vl_case softcap_vl_cases[] = {
    {3, {5, 0, 17}, {9, 0, 20}, 2, 1, 32, F16, FLASHCL_MASK_CAUSAL, 0, 0, 0, 0, 0.3f},
    {2, {1, 1}, {60, 33}, 4, 2, 64, F32, FLASHCL_MASK_NONE, 0, 0, 1, 0, 0.25f},
    {3, {5, 4, 17}, {9, 0, 20}, 3, 1, 32, F16, FLASHCL_MASK_CAUSAL, 0, 0, 0, 0, 0, 1},
    {2, {1, 2}, {60, 33}, 4, 2, 64, F32, FLASHCL_MASK_NONE, 0, 0, 1, 0, 0.25f, 1},
};
static const struct kv_case softcap_kv_cases[] = {
    {3, 1, 64, {0, 17, 64}, 4, 2, 32, F16, FLASHCL_MASK_NONE, 0, 0, 0, 16, 1, 0, 0.3f},  /* paged decode */
    {2, 3, 40, {3, 33}, 2, 2, 24, BF16, FLASHCL_MASK_WINDOW, 6, 0, 0, 0, 0, 0, 0.4f},
};
static const char *const softcap_contexts[] = {
    NULL,
    "decode:off;decode-tensor-core:off;tensor-core:off;tf32:off;register-tiled:off;portable:block_m=3,block_n=5",
    "decode-tensor-core:off;decode:block_n=32,splits=3",
};

START_TEST(softcap_varlen)
{
    for (int i = 0; i < 3; i++)
        varlen_run(softcap_contexts[i] ? test_context_with_options(softcap_contexts[i]) : NULL, &softcap_vl_cases[_i],
                   560 + (uint64_t)_i, "softcap");
}
END_TEST

START_TEST(softcap_kv_cache)
{
    for (int i = 0; i < 3; i++)
        kv_cache_run(softcap_contexts[i] ? test_context_with_options(softcap_contexts[i]) : NULL,
                     &softcap_kv_cases[_i], 660 + (uint64_t)_i, false);
}
END_TEST

/* ALiBi on packed batches and KV caches (contiguous and paged) on softcap_contexts' kernels: the distance
 * counts from each sequence's own diagonal (its lengths, not the longest's), GQA groups whose heads have their
 * own slopes (the decode kernel's rows), an empty sequence, a sequence with queries and no keys, chunked
 * prefill against a cache, with a cap and sinks. */
static const struct vl_case alibi_vl_cases[] = {
    {3, {5, 0, 17}, {9, 0, 20}, 2, 1, 32, F16, FLASHCL_MASK_CAUSAL, .alibi = 1},
    {2, {1, 1}, {60, 33}, 4, 2, 64, F32, FLASHCL_MASK_NONE, 0, 0, 1, .alibi = 1},
    {3, {30, 4, 17}, {9, 0, 40}, 3, 1, 32, F16, FLASHCL_MASK_NONE, .softcap = 0.3f, .sinks = 1, .alibi = 1},
    {2, {25, 40}, {25, 40}, 2, 2, 16, BF16, FLASHCL_MASK_WINDOW, 8, 4, .alibi = 1},
};
static const struct kv_case alibi_kv_cases[] = {
    {3, 1, 64, {0, 17, 64}, 8, 2, 32, F16, FLASHCL_MASK_NONE, 0, 0, 0, 16, 1, .alibi = 1},  /* paged decode */
    {2, 5, 40, {13, 40}, 4, 2, 24, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1, .alibi = 1},          /* chunked prefill */
    {2, 3, 40, {3, 33}, 2, 2, 24, BF16, FLASHCL_MASK_WINDOW, 6, 0, 0, 0, 0, 0, 0.4f, 1},
};

/* A value head dim other than head_dim (attn.head_dim_v) against caches, contiguous and paged (V's pages
 * of dv columns), on the FMA decode kernel and on the portable one, each whole and split: decode with GQA,
 * chunked prefill (causal), a cap and ALiBi. The tensor-core kernels, which take the f16/bf16 cases where
 * tensor cores are, are turned off. */
static const struct kv_case dv_kv_cases[] = {
    {3, 1, 64, {0, 17, 64}, 8, 2, 32, F16, FLASHCL_MASK_NONE, 0, 0, 0, 16, 1, .head_dim_v = 16},
    {2, 5, 40, {13, 40}, 4, 2, 24, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1, .alibi = 1, .head_dim_v = 40},
    {2, 3, 48, {3, 33}, 2, 2, 48, BF16, FLASHCL_MASK_CAUSAL, 0, 0, 0, 16, 0, 0, 0.4f, .head_dim_v = 32},
    {2, 2, 32, {20, 32}, 4, 2, 16, F32, FLASHCL_MASK_NONE, 0, 0, 0, 16, 1, .head_dim_v = 40},  /* paged, dv > d */
};
static const struct {
    const char *options, *expect;
} dv_contexts[] = {
    {"tensor-core:off;decode-tensor-core:off", "decode"},
    {"tensor-core:off;decode-tensor-core:off;decode:splits=3", "decode"},
    {"tensor-core:off;decode-tensor-core:off;decode:off", "portable"},
    {"tensor-core:off;decode-tensor-core:off;decode:off;portable:splits=3", "portable"},
};

START_TEST(value_head_dim_kv_cache)
{
    for (int i = 0; i < 4; i++) {
        const char *kernel = kv_cache_run(test_context_with_options(dv_contexts[i].options), &dv_kv_cases[_i],
                                          680 + (uint64_t)_i, false);
        ck_assert_str_eq(kernel, dv_contexts[i].expect);
    }
}
END_TEST

/* The same on the f16/bf16 tensor-core kernels' plain-OpenCL emulation: chunked prefill against a paged cache
 * (causal, GQA) with dv = 96 > d = 64: one page lookup a key serves K's 8 chunks and V's 12; mma.sync's V rows an
 * odd stride (13 chunks) and copied by the general loop, wgmma's in two panels, the second half used. Then decode
 * (one query, GQA 4:1, the group's rows one mma tile) on the tensor-core decode kernel: a paged cache with
 * dv = 48 > d = 32 and an empty sequence; a contiguous one, split three ways, with dv = 32 < d = 64, causal,
 * ALiBi, lengths on the device. */
static const struct kv_case dv_kv_tensor_core_case = {2, 20, 96, {50, 96}, 4, 2, 64, F16, FLASHCL_MASK_CAUSAL,
                                                      0, 0, 0, 32, 1, .head_dim_v = 96};
static const struct kv_case dv_decode_paged_case = {3, 1, 64, {0, 17, 64}, 8, 2, 32, F16, FLASHCL_MASK_NONE,
                                                    0, 0, 0, 16, 1, .head_dim_v = 48};
static const struct kv_case dv_decode_split_case = {2, 1, 200, {130, 200}, 8, 2, 64, BF16, FLASHCL_MASK_CAUSAL,
                                                    0, 0, 1, .alibi = 1, .head_dim_v = 32};
static const struct {
    int cc;
    const char *options, *expect;
    int kb;  /* the shape's local memory, emulated */
    const struct kv_case *c;
} dv_kv_tensor_core_kernels[] = {
    {80, "", "tensor-core", 61, &dv_kv_tensor_core_case},
    {90, "tensor-core-wgmma:warps=4,block_n=64", "tensor-core-wgmma", 83, &dv_kv_tensor_core_case},
    {80, "", "decode-tensor-core", 60, &dv_decode_paged_case},
    {80, "decode-tensor-core:splits=3", "decode-tensor-core", 60, &dv_decode_split_case},
};

START_TEST(value_head_dim_kv_cache_tensor_cores)
{
    const int cc = dv_kv_tensor_core_kernels[_i].cc;
    flashcl_context *ctx = test_emulated_context(dv_kv_tensor_core_kernels[_i].options, cc, cc >= 90);
    if (test_local_mem_holds(ctx, dv_kv_tensor_core_kernels[_i].kb, dv_kv_tensor_core_kernels[_i].expect)) {
        const char *kernel = kv_cache_run(ctx, dv_kv_tensor_core_kernels[_i].c, 690 + (uint64_t)_i, false);
        ck_assert_str_eq(kernel, dv_kv_tensor_core_kernels[_i].expect);
    }
    flashcl_context_destroy(&ctx);
}
END_TEST

START_TEST(alibi_varlen)
{
    for (int i = 0; i < 3; i++)
        varlen_run(softcap_contexts[i] ? test_context_with_options(softcap_contexts[i]) : NULL, &alibi_vl_cases[_i],
                   570 + (uint64_t)_i, "ALiBi");
}
END_TEST

START_TEST(alibi_kv_cache)
{
    for (int i = 0; i < 3; i++)
        kv_cache_run(softcap_contexts[i] ? test_context_with_options(softcap_contexts[i]) : NULL, &alibi_kv_cases[_i],
                     670 + (uint64_t)_i, false);
}
END_TEST

/* Device lengths past the capacity or below 0 are clamped: O's guards stay poisoned. */
START_TEST(kv_cache_garbage_lengths)
{
    kv_cache_run(NULL, &kv_cases[0], 650, true);
    kv_cache_run(NULL, &kv_cases[5], 651, true);  /* paged */
}
END_TEST

/* ---- shapes the tensor-core kernel takes (f16/bf16, d a multiple of 16, 16-byte rows) ---- */

/* Several query and key blocks per sequence, empty and one-row sequences,
 * every mask, GQA: on a device with tensor cores they must run there, by
 * default and with forced splits; elsewhere they check the FMA kernels. */
static const struct vl_case tc_cases[] = {
    {4, {130, 0, 257, 64}, {130, 0, 257, 64}, 8, 2, 64, F16, FLASHCL_MASK_CAUSAL},
    {3, {1, 200, 77}, {300, 200, 77}, 4, 4, 128, BF16, FLASHCL_MASK_NONE},
    {3, {100, 150, 40}, {100, 150, 40}, 4, 2, 64, F16, FLASHCL_MASK_WINDOW, 32, 8},
    {2, {300, 50}, {90, 50}, 2, 1, 128, F16, FLASHCL_MASK_CAUSAL, 0, 0, 1},  /* rows with no key; device offsets */
    {2, {70, 129}, {70, 129}, 2, 2, 64, BF16, FLASHCL_MASK_WINDOW, 16, -1},
    {3, {90, 0, 140}, {200, 3, 140}, 4, 2, 64, F32, FLASHCL_MASK_CAUSAL, 0, 0, 0, FLASHCL_PRECISION_TF32X3},
    {2, {64, 33}, {64, 33}, 2, 1, 40, F32, FLASHCL_MASK_WINDOW, 8, 8, 0, FLASHCL_PRECISION_TF32},
};

/* Chunked prefill against a cache (rows past the decode kernel's 16), contiguous and paged. */
static const struct kv_case tc_kv_cases[] = {
    {2, 40, 256, {100, 256}, 8, 2, 64, F16, FLASHCL_MASK_CAUSAL},
    {3, 33, 192, {33, 150, 192}, 4, 1, 128, BF16, FLASHCL_MASK_CAUSAL, 0, 0, 1, 64, 0},  /* device lengths, table */
    {2, 20, 128, {0, 128}, 4, 2, 64, F16, FLASHCL_MASK_WINDOW, 24, 0, 0, 32, 1},         /* an empty sequence */
    {2, 24, 96, {50, 96}, 4, 2, 64, F32, FLASHCL_MASK_CAUSAL, 0, 0, 1, 32, 0, FLASHCL_PRECISION_TF32X3},
};

#define TC_SPLIT_OPTIONS                                                                                             \
    "decode:off;decode-tensor-core:off;tensor-core-wgmma:off;tensor-core:block_n=16,splits=3;tf32:block_n=16,splits=3"

/* The tensor-core kernel a case must run where tensor cores exist: by default, and with TC_SPLIT_OPTIONS. */
static const char *tensor_core_variant(flashcl_dtype dtype, int head_dim)
{
    return dtype == F32 ? "tf32" : test_tensor_core_forward(test_env_get()->ctx, head_dim);
}

static const char *tensor_core_split_variant(flashcl_dtype dtype)
{
    return dtype == F32 ? "tf32" : "tensor-core";
}

static bool has_tensor_cores(void)
{
    const char *why;
    return flashcl_context_has_tensor_cores(test_env_get()->ctx, &why) == 1;
}

/* Where Hopper's wgmma kernel is planned (flashcl_context_has_wgmma), the cases it takes (f16/bf16,
 * d a multiple of 16) run on it with a forced shape too (one warpgroup, 64-key blocks, 3 splits). */
#define WGMMA_OPTIONS "decode:off;decode-tensor-core:off;tensor-core-wgmma:warps=4,block_n=64,splits=3"
static bool wgmma_takes(flashcl_dtype dtype, int head_dim)
{
    return test_wgmma_takes(test_env_get()->ctx, dtype, head_dim);
}

START_TEST(tensor_core_varlen)
{
    if (wgmma_takes(tc_cases[_i].dtype, tc_cases[_i].head_dim))
        ck_assert_str_eq(varlen_run(test_context_with_options(WGMMA_OPTIONS), &tc_cases[_i], 780 + (uint64_t)_i, "wgmma"),
                         "tensor-core-wgmma");
    const char *const by_default = varlen_run(NULL, &tc_cases[_i], 700 + (uint64_t)_i, "default kernel");
    const char *const split = varlen_run(test_context_with_options(TC_SPLIT_OPTIONS), &tc_cases[_i],
                                           710 + (uint64_t)_i, "split 3, block_n 16");
    if (has_tensor_cores()) {
        ck_assert_str_eq(by_default, tensor_core_variant(tc_cases[_i].dtype, tc_cases[_i].head_dim));
        ck_assert_str_eq(split, tensor_core_split_variant(tc_cases[_i].dtype));
    }
}
END_TEST

START_TEST(tensor_core_kv_cache)
{
    if (wgmma_takes(tc_kv_cases[_i].dtype, tc_kv_cases[_i].head_dim))
        ck_assert_str_eq(kv_cache_run(test_context_with_options(WGMMA_OPTIONS), &tc_kv_cases[_i], 790 + (uint64_t)_i, false),
                         "tensor-core-wgmma");
    const char *const by_default = kv_cache_run(NULL, &tc_kv_cases[_i], 720 + (uint64_t)_i, false);
    const char *const split = kv_cache_run(test_context_with_options(TC_SPLIT_OPTIONS), &tc_kv_cases[_i],
                                              730 + (uint64_t)_i, false);
    if (has_tensor_cores()) {
        ck_assert_str_eq(by_default, tensor_core_variant(tc_kv_cases[_i].dtype, tc_kv_cases[_i].head_dim));
        ck_assert_str_eq(split, tensor_core_split_variant(tc_kv_cases[_i].dtype));
    }
    kv_cache_run(NULL, &tc_kv_cases[_i], 740 + (uint64_t)_i, true);  /* garbage lengths stay inside */
}
END_TEST

/* ---- decode-shaped calls (group x seq_q <= 16) the tensor-core decode kernel takes ---- */

/* Sequences that start past row 0, empty ones, 4..16 rows, masks; on a device with tensor cores they
 * must run on decode-tensor-core (by default and with forced splits); elsewhere on the FMA decode kernel. */
static const struct vl_case tc_decode_cases[] = {
    {4, {1, 1, 0, 1}, {300, 17, 0, 129}, 8, 2, 64, F16, FLASHCL_MASK_NONE},
    {3, {2, 4, 1}, {100, 257, 4}, 8, 2, 128, BF16, FLASHCL_MASK_CAUSAL},             /* 16 rows */
    {2, {3, 2}, {200, 90}, 4, 4, 64, F16, FLASHCL_MASK_WINDOW, 40, 0, 1},            /* device offsets */
};

static const struct kv_case tc_decode_kv_cases[] = {
    {3, 1, 256, {0, 100, 256}, 8, 2, 64, F16, FLASHCL_MASK_NONE, 0, 0, 0, 32, 1},      /* paged, host table */
    {2, 4, 192, {40, 192}, 8, 2, 128, BF16, FLASHCL_MASK_CAUSAL, 0, 0, 1, 64, 0},      /* paged, device table */
    {2, 2, 160, {160, 33}, 4, 4, 64, F16, FLASHCL_MASK_WINDOW, 30, 0},                 /* contiguous, a window */
};

#define TC_DECODE_SPLIT_OPTIONS "decode-tensor-core:warps=2,block_n=32,splits=3"

START_TEST(tensor_core_decode_varlen)
{
    const char *const by_default = varlen_run(NULL, &tc_decode_cases[_i], 760 + (uint64_t)_i, "default kernel");
    const char *const split = varlen_run(test_context_with_options(TC_DECODE_SPLIT_OPTIONS), &tc_decode_cases[_i],
                                           770 + (uint64_t)_i, "decode-tensor-core split 3");
    if (has_tensor_cores()) {
        ck_assert_str_eq(by_default, "decode-tensor-core");
        ck_assert_str_eq(split, "decode-tensor-core");
    }
}
END_TEST

START_TEST(tensor_core_decode_kv_cache)
{
    const char *const by_default = kv_cache_run(NULL, &tc_decode_kv_cases[_i], 780 + (uint64_t)_i, false);
    const char *const split = kv_cache_run(test_context_with_options(TC_DECODE_SPLIT_OPTIONS),
                                              &tc_decode_kv_cases[_i], 790 + (uint64_t)_i, false);
    if (has_tensor_cores()) {
        ck_assert_str_eq(by_default, "decode-tensor-core");
        ck_assert_str_eq(split, "decode-tensor-core");
    }
    kv_cache_run(test_context_with_options(TC_DECODE_SPLIT_OPTIONS), &tc_decode_kv_cases[_i], 795 + (uint64_t)_i,
           true);  /* garbage lengths stay inside */
}
END_TEST

START_TEST(kv_cache_bad_host_lengths)
{
    struct test_env *e = test_env_get();
    cl_int err;
    cl_mem buf = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 4 * 64 * 2 * 16 * 4, NULL, &err);
    cl_mem out = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, 4 * 64 * 2 * 16 * 4, NULL, &err);
    struct flashcl_attention a = {0};
    a.batch = 2;
    a.seq_q = 1;
    a.seq_kv = 64;
    a.heads_q = a.heads_kv = 2;
    a.head_dim = 16;
    a.q = flashcl_tensor_bnhd(buf, F32, 1, 2, 16);
    a.k = a.v = flashcl_tensor_bnhd(buf, F32, 64, 2, 16);
    a.o = flashcl_tensor_bnhd(out, F32, 1, 2, 16);
    const int too_long[2] = {3, 65}, negative[2] = {-1, 3};
    struct flashcl_kv_lengths kv = {0};
    kv.cache_seqlens = too_long;
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, NULL, e->queue, 0, NULL, NULL), FLASHCL_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "cache_seqlens[1] = 65"));
    kv.cache_seqlens = negative;
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, NULL, e->queue, 0, NULL, NULL), FLASHCL_INVALID_VALUE);
    kv.cache_seqlens = NULL;
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, NULL, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_NULL_ARGUMENT);
    kv.cache_seqlens_mem = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, sizeof(int), NULL, &err);  /* batch 2 needs 2 */
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, NULL, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_OUT_OF_BOUNDS);
    clReleaseMemObject(kv.cache_seqlens_mem);

    /* Paged: a page index outside the pool, a page size that is no multiple of 16, a capacity that disagrees. */
    const int lengths[2] = {3, 5}, bad_table[8] = {0, 1, 2, 3, 4, 5, 6, 9};
    kv.cache_seqlens_mem = NULL;
    kv.cache_seqlens = lengths;
    struct flashcl_kv_pages pages = {0};
    pages.page_size = 16;
    pages.pages_per_seq = 4;
    pages.num_pages = 8;
    pages.block_table = bad_table;
    a.k = a.v = flashcl_tensor_bnhd(buf, F32, 16, 2, 16);  /* the pool: [8, 16, 2, 16] */
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, &pages, e->queue, 0, NULL, NULL),
                     FLASHCL_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "block_table[7] = 9"));
    a.k.dtype = a.v.dtype = F16;  /* the pool is read as Q's type: refused, not read past */
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, &pages, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_DTYPE);
    a.k.dtype = a.v.dtype = F32;
    pages.block_table = NULL;
    const int good_table[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pages.block_table = good_table;
    /* Each message says what is wrong with the value it names. */
    const struct { int page_size, pages_per_seq, num_pages; const char *message; } bad_pages[] = {
        {24, 4, 8, "pages.page_size = 24 is not a multiple of 16"},
        {0, 4, 8, "pages.page_size = 0; must be a positive multiple of 16"},
        {16, 0, 8, "pages.pages_per_seq = 0; must be 1 or more"},
        {16, 4, -1, "pages.num_pages = -1; must be 1 or more"},
        {16, 3, 8, "attn.seq_kv = 64; must be pages.pages_per_seq * pages.page_size = 48"},  /* 48 keys, not 64 */
    };
    for (size_t i = 0; i < sizeof(bad_pages) / sizeof(bad_pages[0]); i++) {
        pages.page_size = bad_pages[i].page_size;
        pages.pages_per_seq = bad_pages[i].pages_per_seq;
        pages.num_pages = bad_pages[i].num_pages;
        ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, &pages, e->queue, 0, NULL, NULL),
                         FLASHCL_ERROR_INVALID_SHAPE);
        ck_assert_msg(strstr(flashcl_last_error(), bad_pages[i].message) != NULL, "\"%s\" does not say \"%s\"",
                      flashcl_last_error(), bad_pages[i].message);
    }
    clReleaseMemObject(buf);
    clReleaseMemObject(out);
}
END_TEST

/* A paged cache is held to the dense call's limits, whatever its pages
 * hold: attn.seq_kv at most 2^30 and, with a window, seq_q + seq_kv below
 * 2^30 (the kernels' int row arithmetic). One page of 2147483632 rows (K and
 * V rows all one row, stride 0) and one visible key used to run and give
 * O = 0, LSE = -inf; a page within the limits gives that key's value row. */
START_TEST(paged_cache_limits)
{
    struct test_env *e = test_env_get();
    enum { D = 16, ROWS = 16 };
    rng_seed(1201);
    unsigned char *q = vl_random_rows(F32, ROWS * D), *kv = vl_random_rows(F32, 2 * D);  /* the key row, the value row */
    cl_mem q_mem = vl_upload(q, ROWS * D * 4), k_mem = vl_upload(kv, D * 4), v_mem = vl_upload(kv + D * 4, D * 4);
    unsigned char poison[ROWS * D * 4];
    memset(poison, 0xff, sizeof(poison));
    cl_mem o_mem = vl_upload(poison, sizeof(poison)), lse_mem = vl_upload(poison, ROWS * 4);
    const int one_key[1] = {1}, table[1] = {0};
    struct flashcl_kv_lengths kv_len = {0};
    kv_len.cache_seqlens = one_key;
    const struct { int seq_q, page_size; flashcl_status status; const char *message; } limits[] = {
        {1, 32, FLASHCL_SUCCESS, ""},
        {1, 2147483632, FLASHCL_ERROR_INVALID_SHAPE, "attn.seq_kv = 2147483632; must be 1..1073741824"},
        {ROWS, 1073741808, FLASHCL_ERROR_INVALID_SHAPE, "a window needs seq_q + seq_kv below 2^30 (16 + 1073741808)"},
    };
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        struct flashcl_attention a = {0};
        a.batch = 1;
        a.seq_q = limits[i].seq_q;
        a.seq_kv = limits[i].page_size;
        a.heads_q = a.heads_kv = 1;
        a.head_dim = D;
        a.q = flashcl_tensor_bnhd(q_mem, F32, (size_t)a.seq_q, 1, D);
        a.k = flashcl_tensor_bnhd(k_mem, F32, 1, 1, D);
        a.v = flashcl_tensor_bnhd(v_mem, F32, 1, 1, D);
        a.k.stride_seq = a.v.stride_seq = 0;  /* every row of the page is the one row */
        a.o = flashcl_tensor_bnhd(o_mem, F32, (size_t)a.seq_q, 1, D);
        a.lse = flashcl_tensor_lse(lse_mem, (size_t)a.seq_q, 1);
        a.mask = FLASHCL_MASK_WINDOW;
        a.window_left = 0;  /* the last query sees the last key and none before it */
        a.window_right = -1;
        struct flashcl_kv_pages pages = {0};
        pages.page_size = limits[i].page_size;
        pages.pages_per_seq = 1;
        pages.num_pages = 1;
        pages.block_table = table;
        ck_assert_cl(clEnqueueWriteBuffer(e->queue, o_mem, CL_TRUE, 0, sizeof(poison), poison, 0, NULL, NULL));
        ck_assert_cl(clEnqueueWriteBuffer(e->queue, lse_mem, CL_TRUE, 0, ROWS * 4, poison, 0, NULL, NULL));
        struct flashcl_tile t;
        ck_assert_status(flashcl_forward_kv_cache_config(e->ctx, &a, &kv_len, &pages, &t), limits[i].status);
        ck_assert_msg(strstr(flashcl_last_error(), limits[i].message) != NULL, "page_size %d: \"%s\"",
                      limits[i].page_size, flashcl_last_error());
        cl_event done = NULL;
        ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv_len, &pages, e->queue, 0, NULL, &done),
                         limits[i].status);
        ck_assert_msg(strstr(flashcl_last_error(), limits[i].message) != NULL, "page_size %d: \"%s\"",
                      limits[i].page_size, flashcl_last_error());
        if (done) {
            ck_assert_cl(clWaitForEvents(1, &done));
            clReleaseEvent(done);
        }
        ck_assert_cl(clFinish(e->queue));
        size_t bytes;
        unsigned char *o = vl_read_all(o_mem, &bytes), *lse = vl_read_all(lse_mem, &bytes);
        if (limits[i].status != FLASHCL_SUCCESS) {  /* refused: nothing written */
            ck_assert_int_eq(memcmp(o, poison, sizeof(poison)), 0);
            ck_assert_int_eq(memcmp(lse, poison, ROWS * 4), 0);
        } else {  /* one key: P = 1, O is its value row, LSE its scaled score */
            double score = 0;
            for (int x = 0; x < D; x++)
                score += hostref_load(q, F32, (size_t)x) * hostref_load(kv, F32, (size_t)x);
            for (int x = 0; x < D; x++)
                ck_assert_double_eq_tol(hostref_load(o, F32, (size_t)x), hostref_load(kv, F32, (size_t)(D + x)), 1e-6);
            float got_lse;
            memcpy(&got_lse, lse, sizeof(got_lse));
            ck_assert_double_eq_tol(got_lse, score / sqrt((double)D), 1e-5);
        }
        free(o);
        free(lse);
    }
    cl_mem all[] = {q_mem, k_mem, v_mem, o_mem, lse_mem};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        clReleaseMemObject(all[i]);
    free(q);
    free(kv);
}
END_TEST

/* A device index buffer (cu_seqlens_*_mem, cache_seqlens_mem,
 * block_table_mem) is read while O and the LSE are written: one sharing a
 * byte with either is refused, as any input overlapping an output is. In
 * the same buffer but apart from them, or inside an input, it is fine. */
START_TEST(index_buffers_apart_from_outputs)
{
    struct test_env *e = test_env_get();
    struct packed p;
    packed_create(&p, &cases[4], 12);  /* device offsets; O starts after a guard row of 1024 bytes */
    struct flashcl_tile t;
    struct flashcl_varlen vl = p.vl;
    vl.cu_seqlens_q_mem = p.o_mem;  /* its 5 offsets lie in O's guard row, apart from O's rows */
    ck_assert_flashcl_ok(flashcl_forward_varlen_config(e->ctx, &p.attn, &vl, &t));
    vl.cu_seqlens_q_mem = p.q_mem;  /* inside Q: both read */
    ck_assert_flashcl_ok(flashcl_forward_varlen_config(e->ctx, &p.attn, &vl, &t));

    cl_uint align_bits = 0;
    ck_assert_cl(clGetDeviceInfo(e->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(align_bits), &align_bits, NULL));
    const size_t align = align_bits / 8, o_start = p.attn.o.offset;
    cl_buffer_region region = {(o_start + align - 1) / align * align, 8 * sizeof(int)};  /* inside O's rows */
    cl_int err;
    cl_mem inside_o = clCreateSubBuffer(p.o_mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    ck_assert_ptr_nonnull(inside_o);
    struct flashcl_attention o_at_0 = p.attn;
    o_at_0.o.offset = 0;  /* O's rows from byte 0, where an index buffer of the whole cl_mem starts */
    const struct { const struct flashcl_attention *a; cl_mem cu_q, cu_k; const char *message; } overlapping[] = {
        {&o_at_0, p.o_mem, p.cu_k_mem, "attn.o overlaps varlen.cu_seqlens_q_mem"},
        {&p.attn, p.cu_q_mem, inside_o, "attn.o overlaps varlen.cu_seqlens_k_mem"},
        {&p.attn, p.cu_q_mem, p.lse_mem, "attn.lse overlaps varlen.cu_seqlens_k_mem"},
    };
    size_t before_bytes, after_bytes;
    unsigned char *before = vl_read_all(p.o_mem, &before_bytes);
    for (size_t i = 0; i < sizeof(overlapping) / sizeof(overlapping[0]); i++) {
        vl = p.vl;
        vl.cu_seqlens_q_mem = overlapping[i].cu_q;
        vl.cu_seqlens_k_mem = overlapping[i].cu_k;
        ck_assert_status(flashcl_forward_varlen_config(e->ctx, overlapping[i].a, &vl, &t), FLASHCL_ERROR_ALIASING);
        ck_assert_status(flashcl_forward_varlen(e->ctx, overlapping[i].a, &vl, e->queue, 0, NULL, NULL),
                         FLASHCL_ERROR_ALIASING);
        ck_assert_msg(strstr(flashcl_last_error(), overlapping[i].message) != NULL, "\"%s\" does not say \"%s\"",
                      flashcl_last_error(), overlapping[i].message);
    }
    unsigned char *after = vl_read_all(p.o_mem, &after_bytes);
    ck_assert_int_eq(memcmp(before, after, before_bytes), 0);
    free(before);
    free(after);

    /* A KV cache's lengths and block table, contiguous and paged. */
    struct flashcl_attention a = {0};
    a.batch = 2;
    a.seq_q = 1;
    a.seq_kv = 32;
    a.heads_q = a.heads_kv = 2;
    a.head_dim = 16;
    a.q = flashcl_tensor_bnhd(p.q_mem, F32, 1, 2, 16);
    a.k = a.v = flashcl_tensor_bnhd(p.k_mem, F32, 32, 2, 16);
    a.o = flashcl_tensor_bnhd(p.o_mem, F32, 1, 2, 16);
    a.lse = flashcl_tensor_lse(p.lse_mem, 1, 2);
    struct flashcl_kv_lengths kv = {0};
    kv.cache_seqlens_mem = p.q_mem;  /* an input's bytes: fine */
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(e->ctx, &a, &kv, NULL, &t));
    struct flashcl_attention o_after = a;
    o_after.o.offset = 64;  /* O's rows after the lengths' 8 bytes of the same cl_mem */
    kv.cache_seqlens_mem = p.o_mem;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(e->ctx, &o_after, &kv, NULL, &t));
    ck_assert_status(flashcl_forward_kv_cache_config(e->ctx, &a, &kv, NULL, &t), FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "attn.o overlaps lengths.cache_seqlens_mem"));
    kv.cache_seqlens_mem = p.lse_mem;
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, NULL, e->queue, 0, NULL, NULL), FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "attn.lse overlaps lengths.cache_seqlens_mem"));
    kv.cache_seqlens_mem = p.cu_k_mem;
    struct flashcl_kv_pages pages = {0};
    pages.page_size = 16;
    pages.pages_per_seq = 2;
    pages.num_pages = 4;
    a.k = a.v = flashcl_tensor_bnhd(p.k_mem, F32, 16, 2, 16);  /* a pool of 4 pages of 16 rows */
    pages.block_table_mem = p.q_mem;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(e->ctx, &a, &kv, &pages, &t));
    pages.block_table_mem = inside_o;
    ck_assert_flashcl_ok(flashcl_forward_kv_cache_config(e->ctx, &a, &kv, &pages, &t));  /* past O's 256 bytes */
    pages.block_table_mem = p.o_mem;
    ck_assert_status(flashcl_forward_kv_cache(e->ctx, &a, &kv, &pages, e->queue, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(), "attn.o overlaps pages.block_table_mem"));
    clReleaseMemObject(inside_o);
    packed_free(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("varlen");
    TCase *tc = tcase_create("packed batches");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, against_reference, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, bad_host_offsets);
    tcase_add_test(tc, bad_device_offsets_stay_inside);
    tcase_add_test(tc, varlen_plans_tensor_cores);
    tcase_add_loop_test(tc, tensor_core_varlen, 0, (int)(sizeof(tc_cases) / sizeof(tc_cases[0])));
    tcase_add_loop_test(tc, tensor_core_kv_cache, 0, (int)(sizeof(tc_kv_cases) / sizeof(tc_kv_cases[0])));
    tcase_add_loop_test(tc, tensor_core_decode_varlen, 0, (int)(sizeof(tc_decode_cases) / sizeof(tc_decode_cases[0])));
    tcase_add_loop_test(tc, tensor_core_decode_kv_cache, 0,
                        (int)(sizeof(tc_decode_kv_cases) / sizeof(tc_decode_kv_cases[0])));
    tcase_add_loop_test(tc, kv_cache, 0, (int)(sizeof(kv_cases) / sizeof(kv_cases[0])));
    tcase_add_test(tc, kv_cache_garbage_lengths);
    tcase_add_test(tc, kv_cache_bad_host_lengths);
    tcase_add_test(tc, paged_cache_limits);
    tcase_add_test(tc, index_buffers_apart_from_outputs);
    suite_add_tcase(s, tc);
    TCase *sc = tcase_create("softcap");
    tcase_set_timeout(sc, 600);
    tcase_add_loop_test(sc, softcap_varlen, 0, (int)(sizeof(softcap_vl_cases) / sizeof(softcap_vl_cases[0])));
    tcase_add_loop_test(sc, softcap_kv_cache, 0, (int)(sizeof(softcap_kv_cases) / sizeof(softcap_kv_cases[0])));
    tcase_add_loop_test(sc, alibi_varlen, 0, (int)(sizeof(alibi_vl_cases) / sizeof(alibi_vl_cases[0])));
    tcase_add_loop_test(sc, alibi_kv_cache, 0, (int)(sizeof(alibi_kv_cases) / sizeof(alibi_kv_cases[0])));
    tcase_add_loop_test(sc, value_head_dim_kv_cache, 0, (int)(sizeof(dv_kv_cases) / sizeof(dv_kv_cases[0])));
    tcase_add_loop_test(sc, value_head_dim_kv_cache_tensor_cores, 0,
                        (int)(sizeof(dv_kv_tensor_core_kernels) / sizeof(dv_kv_tensor_core_kernels[0])));
    suite_add_tcase(s, sc);
    return test_run_suite(s);
}
