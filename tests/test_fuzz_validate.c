/* Fuzzers of what parses untrusted input. The call validator: random attention calls (small dims, random
 * strides including 0, offsets, dtypes, buffers shared between views, LSE
 * or not, a quarter of them Q, K, V, O as slices of one fused buffer) are
 * validated by the library (flashcl_forward_config, which enqueues nothing)
 * and, independently, by brute force here: every element of every view
 * inside its buffer, no output element written twice, no output byte shared
 * with any other view. The library may refuse a safe call (an output's own
 * strides are judged by a sufficient rule) but must never accept an unsafe
 * one; and its test of whether two views share a byte, exact, against byte
 * marking. The kernel_options parser and the tuning-file reader: random and
 * mutated text must give a status (or a WARN), never a crash or a hang; CI
 * runs them under ASan too.
 *
 * Standalone, for N calls from seed S (CI runs the defaults, 3000 and
 * 20261129): FLASHCL_FUZZ_ITERATIONS=N FLASHCL_FUZZ_SEED=S CK_RUN_CASE=validator
 * build/tests/test_fuzz_validate (docs/reliability.md has the long run). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

#define MAX_BUFFERS 3
#define MAX_BYTES 6000

struct fuzz_view {
    const char *name;
    const flashcl_tensor *t;
    size_t count[3], dim;  /* batch, seq, head; last dim */
    int buffer;
};

static int pick(int lo, int hi)
{
    return lo + (int)rng_uniform(0, hi - lo + 1 - 1e-9);
}

/* Marks the bytes of every element of v in `owner` (per byte: 0 none, 1 an
 * input's, 2 an output's). False when an element leaves the buffer or is
 * misaligned; *overlap when an output byte meets any marked byte. */
static bool brute_force_view(const struct fuzz_view *v, bool output, size_t buffer_bytes, unsigned char *owner,
                             bool *overlap)
{
    const size_t esize = flashcl_dtype_size(v->t->dtype);
    if (esize == 0 || v->t->offset % esize)
        return false;
    for (size_t b = 0; b < v->count[0]; b++)
        for (size_t n = 0; n < v->count[1]; n++)
            for (size_t h = 0; h < v->count[2]; h++)
                for (size_t e = 0; e < v->dim; e++) {
                    const size_t elem = v->t->offset / esize + b * v->t->stride_batch + n * v->t->stride_seq +
                                        h * v->t->stride_head + e;
                    if ((elem + 1) * esize > buffer_bytes)
                        return false;
                    for (size_t x = elem * esize; x < (elem + 1) * esize; x++) {
                        if (output && owner[x])
                            *overlap = true;  /* written twice, or where another view lies */
                        if (output || !owner[x])
                            owner[x] = output ? 2 : 1;
                    }
                }
    return true;
}

/* The bytes from v's first element to past its last. */
static void view_range(const struct fuzz_view *v, size_t *lo, size_t *hi)
{
    const size_t esize = flashcl_dtype_size(v->t->dtype);
    size_t last = v->dim;
    last += (v->count[0] - 1) * v->t->stride_batch + (v->count[1] - 1) * v->t->stride_seq +
            (v->count[2] - 1) * v->t->stride_head;
    *lo = v->t->offset;
    *hi = v->t->offset + last * esize;
}

START_TEST(validator_never_accepts_an_unsafe_call)
{
    struct test_env *e = test_env_get();
    const char *env = getenv("FLASHCL_FUZZ_ITERATIONS"), *seed_env = getenv("FLASHCL_FUZZ_SEED");
    const long iterations = env && *env ? atol(env) : 3000;
    const unsigned long long seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10) : 20261129;
    cl_int err;
    cl_mem buffers[MAX_BUFFERS];
    size_t sizes[MAX_BUFFERS];
    for (int i = 0; i < MAX_BUFFERS; i++) {
        sizes[i] = (size_t)(MAX_BYTES / (i + 1));
        buffers[i] = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, sizes[i], NULL, &err);
        ck_assert_ptr_nonnull(buffers[i]);
    }
    rng_seed(seed);
    const time_t start = time(NULL);
    long accepted = 0, refused_safe = 0, unsafe = 0, accepted_interleaved = 0;
    unsigned char *owner = malloc(MAX_BYTES);
    for (long it = 0; it < iterations; it++) {
        struct flashcl_attention a = {0};
        a.batch = pick(1, 3);
        a.seq_q = pick(1, 6);
        a.seq_kv = pick(1, 6);
        a.heads_kv = pick(1, 2);
        a.heads_q = a.heads_kv * pick(1, 2);
        a.head_dim = pick(1, 8);
        a.mask = (enum flashcl_mask)pick(0, 1);
        const flashcl_dtype dtype = (flashcl_dtype)pick(1, 3);
        flashcl_tensor *ts[5] = {&a.q, &a.k, &a.v, &a.o, &a.lse};
        int buffer_of[5];
        const bool with_lse = pick(0, 1);
        for (int i = 0; i < 5; i++) {
            flashcl_tensor *t = ts[i];
            buffer_of[i] = pick(0, MAX_BUFFERS - 1);
            t->mem = buffers[buffer_of[i]];
            t->dtype = i == 4 ? FLASHCL_F32 : dtype;
            const size_t esize = flashcl_dtype_size(t->dtype);
            /* Mostly plausible layouts, sometimes anything (0 strides, overlaps, odd offsets). */
            const int d = i == 4 ? 1 : a.head_dim;
            const bool wild = pick(0, 3) == 0;
            t->stride_head = wild ? (size_t)pick(0, 12) : (size_t)d;
            t->stride_seq = wild ? (size_t)pick(0, 40) : (size_t)d * (size_t)(i == 1 || i == 2 ? a.heads_kv : a.heads_q);
            t->stride_batch = wild ? (size_t)pick(0, 200) : t->stride_seq * (size_t)(i == 1 || i == 2 ? a.seq_kv : a.seq_q);
            t->offset = (size_t)pick(0, 400) * (pick(0, 5) == 0 ? 1 : esize);
        }
        if (!with_lse)
            a.lse.mem = NULL;
        /* A quarter of the calls: Q, K, V, O as slices of one fused [B, N, 4, H, d] buffer, each in a slot
         * (two may take the same one), sometimes an element off it. */
        if (pick(0, 3) == 0) {
            const size_t d = (size_t)a.head_dim, h = (size_t)a.heads_q, esize = flashcl_dtype_size(dtype);
            const size_t n = (size_t)(a.seq_q > a.seq_kv ? a.seq_q : a.seq_kv);
            for (int i = 0; i < 4; i++) {
                flashcl_tensor *t = ts[i];
                buffer_of[i] = 0;
                t->mem = buffers[0];
                t->stride_head = d;
                t->stride_seq = 4 * h * d;
                t->stride_batch = n * 4 * h * d;
                t->offset = (size_t)pick(0, 3) * h * d * esize;
                if (pick(0, 4) == 0)
                    t->offset += esize;
            }
        }

        struct flashcl_tile tile;
        const bool library_accepts = flashcl_forward_config(e->ctx, &a, &tile) == FLASHCL_SUCCESS;

        /* The independent judgement: inputs first, then outputs, per buffer. */
        const size_t hq = (size_t)a.heads_q, hk = (size_t)a.heads_kv, d = (size_t)a.head_dim;
        const struct fuzz_view views[5] = {
            {"q", &a.q, {(size_t)a.batch, (size_t)a.seq_q, hq}, d, buffer_of[0]},
            {"k", &a.k, {(size_t)a.batch, (size_t)a.seq_kv, hk}, d, buffer_of[1]},
            {"v", &a.v, {(size_t)a.batch, (size_t)a.seq_kv, hk}, d, buffer_of[2]},
            {"o", &a.o, {(size_t)a.batch, (size_t)a.seq_q, hq}, d, buffer_of[3]},
            {"lse", &a.lse, {(size_t)a.batch, (size_t)a.seq_q, hq}, 1, buffer_of[4]},
        };
        bool safe = true;
        const int n_views = with_lse ? 5 : 4;
        for (int buf = 0; buf < MAX_BUFFERS && safe; buf++) {
            memset(owner, 0, MAX_BYTES);
            bool overlap = false;
            /* Inputs first (they may share bytes), then outputs (which may share none). */
            for (int pass = 0; pass < 2 && safe; pass++)
                for (int i = 0; i < n_views && safe; i++)
                    if (views[i].buffer == buf && (i >= 3) == (pass == 1))
                        safe = brute_force_view(&views[i], i >= 3, sizes[buf], owner, &overlap);
            safe = safe && !overlap;
        }
        /* Accepted with an output's bytes and another view's in one buffer meeting: the exact test at work. */
        bool interleaved = false;
        for (int out = 3; out < n_views && library_accepts; out++)
            for (int i = 0; i < n_views; i++) {
                size_t lo[2], hi[2];
                view_range(&views[out], &lo[0], &hi[0]);
                view_range(&views[i], &lo[1], &hi[1]);
                interleaved |= i != out && views[i].buffer == views[out].buffer && lo[0] < hi[1] && lo[1] < hi[0];
            }
        accepted_interleaved += interleaved;
        if (library_accepts && !safe) {
            unsafe++;
            ck_abort_msg("iteration %ld: the library accepted an unsafe call (batch %d, seq %d/%d, heads %d/%d, d %d, "
                         "o strides %zu/%zu/%zu offset %zu)", it, a.batch, a.seq_q, a.seq_kv, a.heads_q, a.heads_kv,
                         a.head_dim, a.o.stride_batch, a.o.stride_seq, a.o.stride_head, a.o.offset);
        }
        accepted += library_accepts;
        refused_safe += !library_accepts && safe;
    }
    printf("validator fuzz: %ld calls (seed %llu) in %ld s, %ld accepted (all safe; %ld with an output's bytes "
           "interleaved with another view's), %ld safe calls refused (an output's own strides, the overlap test's "
           "steps, or other checks), %ld unsafe accepted\n", iterations, seed, (long)(time(NULL) - start), accepted,
           accepted_interleaved, refused_safe, unsafe);
    ck_assert_int_gt(accepted, iterations / 20);  /* the generator does produce valid calls */
    ck_assert_int_gt(accepted_interleaved, iterations / 100);  /* and interleaved ones the library takes */
    free(owner);
    for (int i = 0; i < MAX_BUFFERS; i++)
        clReleaseMemObject(buffers[i]);
}
END_TEST

/* ---- the overlap test of two views against byte marking ---- */

#define ROW_BYTES 1024

/* Random rows inside ROW_BYTES bytes: nested (each dimension, ordered by stride, stepping past everything
 * inside it, with random gaps or none) or any strides (0 included); element sizes 2 and 4. */
static void random_rows_view(struct fcl_rows *r, bool nested)
{
    for (;;) {
        const size_t esize = pick(0, 1) ? 4 : 2;
        r->row_bytes = esize * (size_t)pick(1, 6);
        int order[3] = {0, 1, 2};
        for (int i = 2; i > 0; i--) {
            const int j = pick(0, i), tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        size_t inner = r->row_bytes;
        for (int i = 0; i < 3; i++) {
            const int dim = order[i];
            r->count[dim] = (size_t)pick(1, 4);
            if (nested) {
                r->stride[dim] = r->count[dim] > 1 || pick(0, 1) ? inner + esize * (size_t)(pick(0, 2) ? 0 : pick(0, 8)) : 0;
                inner += r->stride[dim] * (r->count[dim] - 1);
            } else {
                r->stride[dim] = esize * (size_t)pick(0, 24);
            }
        }
        size_t extent = r->row_bytes;
        for (int i = 0; i < 3; i++)
            extent += r->stride[i] * (r->count[i] - 1);
        if (extent > ROW_BYTES)
            continue;
        r->begin = esize * (size_t)pick(0, (int)((ROW_BYTES - extent) / esize));
        return;
    }
}

/* Marks r's bytes in `marks` (mark) or says whether any is marked already. */
static bool brute_rows(const struct fcl_rows *r, unsigned char *marks, bool mark)
{
    for (size_t i = 0; i < r->count[0]; i++)
        for (size_t j = 0; j < r->count[1]; j++)
            for (size_t k = 0; k < r->count[2]; k++) {
                const size_t start = r->begin + i * r->stride[0] + j * r->stride[1] + k * r->stride[2];
                for (size_t x = start; x < start + r->row_bytes; x++) {
                    if (!mark && marks[x])
                        return true;
                    marks[x] |= mark;
                }
            }
    return false;
}

/* The library's test of whether two views share a byte (validate.c) against
 * marking their bytes: never wrong, and undecided only where neither view is
 * nested (a written view always is) or its steps ran out. Fused layouts:
 * a view and the same layout moved a little (a slice of a fused buffer or
 * one element off it), half the time. */
START_TEST(overlap_test_is_exact)
{
    rng_seed(8128);
    unsigned char marks[ROW_BYTES];
    long decided = 0, overlapping = 0, interleaved_apart = 0, undecided = 0;
    for (int it = 0; it < 6000; it++) {
        struct fcl_rows v[2];
        bool nested[2] = {pick(0, 3) != 0, pick(0, 1) != 0};
        random_rows_view(&v[0], nested[0]);
        if (pick(0, 1)) {  /* the same strides, moved: fused slices, or one element into the other */
            v[1] = v[0];
            nested[1] = nested[0];
            const size_t shift = (size_t)pick(1, 3) * v[0].row_bytes + (size_t)pick(-2, 2) * 2;
            v[1].begin = v[0].begin + shift;
            size_t extent = v[1].row_bytes;
            for (int i = 0; i < 3; i++)
                extent += v[1].stride[i] * (v[1].count[i] - 1);
            if (v[1].begin + extent > ROW_BYTES)
                continue;
        } else {
            random_rows_view(&v[1], nested[1]);
        }
        for (int i = 0; i < 2; i++)
            if (nested[i])
                ck_assert_msg(fcl_rows_nested(&v[i]), "case %d: a nested layout not seen as nested", it);
        memset(marks, 0, sizeof(marks));
        brute_rows(&v[0], marks, true);
        const bool shared = brute_rows(&v[1], marks, false);
        const bool few_steps = pick(0, 4) == 0;
        const size_t steps_given = few_steps ? (size_t)pick(0, 12) : FCL_OVERLAP_STEPS;
        for (int order = 0; order < 2; order++) {
            size_t steps = steps_given;
            const enum fcl_overlap got = fcl_rows_overlap(&v[order], &v[1 - order], &steps);
            ck_assert_uint_le(steps, steps_given);
            if (got == FCL_UNDECIDED) {
                ck_assert_msg(few_steps || !(fcl_rows_nested(&v[0]) || fcl_rows_nested(&v[1])),
                              "case %d: undecided, though a view is nested", it);
                undecided++;
                continue;
            }
            ck_assert_msg((got == FCL_OVERLAP) == shared,
                          "case %d: said %s, but they share %s (begin %zu/%zu, rows %zu/%zu bytes, counts %zu,%zu,%zu / "
                          "%zu,%zu,%zu, strides %zu,%zu,%zu / %zu,%zu,%zu)", it,
                          got == FCL_OVERLAP ? "overlap" : "apart", shared ? "a byte" : "none", v[0].begin, v[1].begin,
                          v[0].row_bytes, v[1].row_bytes, v[0].count[0], v[0].count[1], v[0].count[2], v[1].count[0],
                          v[1].count[1], v[1].count[2], v[0].stride[0], v[0].stride[1], v[0].stride[2], v[1].stride[0],
                          v[1].stride[1], v[1].stride[2]);
            decided++;
            overlapping += shared;
            /* Byte ranges that meet with no byte shared: what the old range test refused. */
            size_t end[2];
            for (int i = 0; i < 2; i++) {
                end[i] = v[i].begin + v[i].row_bytes;
                for (int d = 0; d < 3; d++)
                    end[i] += v[i].stride[d] * (v[i].count[d] - 1);
            }
            interleaved_apart += !shared && v[0].begin < end[1] && v[1].begin < end[0];
        }
    }
    printf("overlap test: %ld decided (%ld sharing a byte, %ld interleaved without), %ld undecided\n", decided,
           overlapping, interleaved_apart, undecided);
    ck_assert_int_gt(overlapping, 1000);
    ck_assert_int_gt(interleaved_apart, 300);

    /* Fused gradients of a large training batch ([B, N, H, 3, d] and [B, N, 3, H, d], 16M rows of f16, d 64):
     * told apart within the steps, as is one element off. */
    const size_t B = 64, N = 8192, H = 32, row = 64 * 2;
    for (int per_head = 0; per_head < 2; per_head++) {
        const struct fcl_rows dq = {0, row, {B, N, H}, {N * 3 * H * row, 3 * H * row, per_head ? 3 * row : row}};
        struct fcl_rows dk = dq;
        dk.begin = per_head ? row : H * row;
        size_t steps = FCL_OVERLAP_STEPS;
        ck_assert_int_eq(fcl_rows_overlap(&dq, &dk, &steps), FCL_APART);
        dk.begin -= 2;
        ck_assert_int_eq(fcl_rows_overlap(&dq, &dk, &steps), FCL_OVERLAP);
        dk.begin += 2;
        dk.stride[0] -= 2;  /* only the last batches meet */
        ck_assert_int_eq(fcl_rows_overlap(&dq, &dk, &steps), FCL_OVERLAP);
        ck_assert_uint_gt(steps, FCL_OVERLAP_STEPS - 1000);  /* a few steps each: the lattice's */
    }
}
END_TEST

/* Random text, biased toward the parsers' own words and separators. */
static void random_text(char *buf, size_t size)
{
    static const char *const words[] = {"portable", "register-tiled", "tensor-core", "tf32", "backward", "block_m",
                                        "block_n", "warps", "m_tiles", "off", "=", ":", ";", ",", "16", "-1", "999999999999",
                                        "device=", "driver=", "flashcl=", "kind=forward", "kind=local_mem", "|", "\n",
                                        "mask=causal", "d=64", "dtype=f16", "bytes=", "flashcl-tuning 2\n", "#", " "};
    size_t used = 0;
    const int n = pick(0, 24);
    for (int i = 0; i < n && used + 1 < size; i++) {
        const char *w = words[pick(0, (int)(sizeof(words) / sizeof(words[0])) - 1)];
        char random_bytes[4] = {(char)pick(1, 255), (char)pick(1, 255), 0, 0};
        const char *piece = pick(0, 9) == 0 ? random_bytes : w;
        const int written = snprintf(buf + used, size - used, "%s", piece);
        used += written > 0 ? (size_t)written : 0;
    }
    if (used >= size)
        used = size - 1;
    buf[used] = '\0';
}

START_TEST(parsers_take_any_text)
{
    struct test_env *e = test_env_get();
    rng_seed(4242);
    char text[1600];
    int refused = 0;
    for (int it = 0; it < 300; it++) {
        random_text(text, sizeof(text));
        struct flashcl_context_params p = {0};
        p.context = e->cl;
        p.device = e->device;
        p.kernel_options = text;
        p.tuning_file = "";
        flashcl_context *ctx = NULL;
        const flashcl_status st = flashcl_context_create(&p, &ctx);
        ck_assert_msg(st == FLASHCL_SUCCESS || st == FLASHCL_ERROR_INVALID_CONFIG, "\"%s\": %s", text,
                      flashcl_status_name(st));
        refused += st != FLASHCL_SUCCESS;
        flashcl_context_destroy(&ctx);
    }
    char path[256];
    snprintf(path, sizeof(path), "/tmp/flashcl-fuzz-tuning-%ld.txt", (long)getpid());
    for (int it = 0; it < 200; it++) {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        fputs("flashcl-tuning 2\n", f);
        for (int line = 0; line < 4; line++) {
            random_text(text, sizeof(text));
            fputs(text, f);
            fputc('\n', f);
        }
        fclose(f);
        struct flashcl_context_params p = {0};
        p.context = e->cl;
        p.device = e->device;
        p.tuning_file = path;
        flashcl_context *ctx = NULL;
        ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));  /* a bad file is a WARN, never a failure */
        struct flashcl_tile t;
        ck_assert_flashcl_ok(test_fma_tile(ctx, 64, FLASHCL_F32, &t));
        flashcl_context_destroy(&ctx);
    }
    unlink(path);
    printf("parser fuzz: 300 option strings (%d refused, the rest accepted), 200 tuning files read\n", refused);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fuzz_validate");
    TCase *tc = tcase_create("validator");
    tcase_set_timeout(tc, 86400);  /* long runs; meson's timeout bounds the default one */
    tcase_add_test(tc, validator_never_accepts_an_unsafe_call);
    tcase_add_test(tc, overlap_test_is_exact);
    suite_add_tcase(s, tc);
    TCase *parsers = tcase_create("parsers");
    tcase_set_timeout(parsers, 600);
    tcase_add_test(parsers, parsers_take_any_text);
    suite_add_tcase(s, parsers);
    return test_run_suite(s);
}
