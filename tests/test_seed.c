/* The seed chapter's worked examples, through the public API: one query row,
 * d = 1, four keys, a forced block of 2 so the second block's max exceeds the
 * first's (example 1) or does not (example 2). */
#include <math.h>
#include <stdlib.h>

#include "common.h"

struct seed_example {
    float scores[4];
    float values[4];
    double output;  /* the chapter's figure */
    double lse;     /* log(sum(exp(scores))) */
};

/* Runs one query against four keys, with k chosen so that scale·q·k is the
 * example's score. */
static void run_example(flashcl_context *ctx, const struct seed_example *ex, float q_value,
                        float scale, double *out, double *lse)
{
    struct test_env *e = test_env_get();
    float q[1] = {q_value}, k[4], v[4], o[1] = {NAN}, l[1] = {NAN};
    const float effective = scale != 0.0f ? scale : 1.0f;  /* default 1/sqrt(1) = 1 */
    for (int j = 0; j < 4; j++) {
        k[j] = ex->scores[j] / (q_value * effective);
        v[j] = ex->values[j];
    }
    cl_int err;
    cl_mem mq = clCreateBuffer(e->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(q), q, &err);
    cl_mem mk = clCreateBuffer(e->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(k), k, &err);
    cl_mem mv = clCreateBuffer(e->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(v), v, &err);
    cl_mem mo = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(o), o, &err);
    cl_mem ml = clCreateBuffer(e->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(l), l, &err);
    ck_assert(mq && mk && mv && mo && ml);

    struct flashcl_attention a = {0};
    a.batch = 1;
    a.seq_q = 1;
    a.seq_kv = 4;
    a.heads_q = a.heads_kv = 1;
    a.head_dim = 1;
    a.q = flashcl_tensor_bnhd(mq, FLASHCL_F32, 1, 1, 1);
    a.k = flashcl_tensor_bnhd(mk, FLASHCL_F32, 4, 1, 1);
    a.v = flashcl_tensor_bnhd(mv, FLASHCL_F32, 4, 1, 1);
    a.o = flashcl_tensor_bnhd(mo, FLASHCL_F32, 1, 1, 1);
    a.lse = flashcl_tensor_lse(ml, 1, 1);
    a.scale = scale;
    ck_assert_flashcl_ok(flashcl_forward(ctx, &a, e->queue, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, mo, CL_TRUE, 0, sizeof(o), o, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, ml, CL_TRUE, 0, sizeof(l), l, 0, NULL, NULL));
    *out = o[0];
    *lse = l[0];
    clReleaseMemObject(mq);
    clReleaseMemObject(mk);
    clReleaseMemObject(mv);
    clReleaseMemObject(mo);
    clReleaseMemObject(ml);
}

static const struct seed_example examples[2] = {
    /* The chapter's worked example: the second block raises the max 3 -> 5. */
    {{1, 3, 2, 5}, {10, 20, 30, 40}, 36.8806, 5.18519},
    /* Active-recall question 1: the second block's max (3) stays under 4. */
    {{2, 4, 1, 3}, {5, 15, 25, 35}, 19.187, 4.44019},
};

static void check_example(int i, flashcl_context *ctx, float q_value, float scale)
{
    double out, lse;
    run_example(ctx, &examples[i], q_value, scale, &out, &lse);
    /* The chapter prints 4 decimals (36.8806) and 3 (19.187). */
    const double tol = i == 0 ? 5e-5 : 5e-4;
    ck_assert_msg(fabs(out - examples[i].output) <= tol, "example %d: O = %.6f, chapter says %.6g", i + 1,
                  out, examples[i].output);
    ck_assert_msg(fabs(lse - examples[i].lse) <= 1e-5, "example %d: LSE = %.6f, expected %.6g", i + 1, lse,
                  examples[i].lse);
}

START_TEST(worked_example_block_2)
{
    flashcl_context *ctx = test_context_with_blocks(2, 2);
    struct flashcl_tile tile;
    ck_assert_flashcl_ok(test_fma_tile(ctx, 1, FLASHCL_F32, &tile));
    ck_assert_int_eq(tile.block_n, 2);  /* two K/V blocks: the rescale path runs */
    check_example(_i, ctx, 1.0f, 0.0f);
}
END_TEST

START_TEST(worked_example_explicit_scale)
{
    /* q = 2, scale = 0.25: scores come from scale·q·k, not from default 1/sqrt(d). */
    check_example(_i, test_context_with_blocks(2, 2), 2.0f, 0.25f);
}
END_TEST

START_TEST(worked_example_block_1)
{
    /* One key per block: every key is its own rescale step. */
    check_example(_i, test_context_with_blocks(1, 1), 1.0f, 0.0f);
}
END_TEST

START_TEST(worked_example_automatic_tile)
{
    /* The device's own tile (all four keys in one block). */
    check_example(_i, test_env_get()->ctx, 1.0f, 0.0f);
}
END_TEST

/* The chapter's NumPy trace, in double: the recurrence on the host gives the
 * same figure, so the expected values above are the chapter's, not ours. */
START_TEST(chapter_recurrence_in_double)
{
    const struct seed_example *ex = &examples[_i];
    double m = -INFINITY, l = 0, acc = 0;
    for (int start = 0; start < 4; start += 2) {
        const double mb = fmax(ex->scores[start], ex->scores[start + 1]);
        const double p0 = exp(ex->scores[start] - mb), p1 = exp(ex->scores[start + 1] - mb);
        const double m_new = fmax(m, mb);
        const double scale_old = exp(m - m_new), scale_new = exp(mb - m_new);
        l = l * scale_old + (p0 + p1) * scale_new;
        acc = acc * scale_old + (p0 * ex->values[start] + p1 * ex->values[start + 1]) * scale_new;
        m = m_new;
    }
    ck_assert_double_eq_tol(acc / l, ex->output, _i == 0 ? 5e-5 : 5e-4);
    ck_assert_double_eq_tol(m + log(l), ex->lse, 1e-5);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("seed");
    TCase *tc = tcase_create("worked examples");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, chapter_recurrence_in_double, 0, 2);
    tcase_add_loop_test(tc, worked_example_block_2, 0, 2);
    tcase_add_loop_test(tc, worked_example_explicit_scale, 0, 2);
    tcase_add_loop_test(tc, worked_example_block_1, 0, 2);
    tcase_add_loop_test(tc, worked_example_automatic_tile, 0, 2);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
