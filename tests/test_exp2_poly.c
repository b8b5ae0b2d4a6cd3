/* cl/exp2_poly.h, the softmax's exponent on the FMA units, compiled as C (x86-64's SSE f32 arithmetic is
 * the same IEEE round-to-nearest single precision the GPU's FFMA and FADD compute, and fmaf is fused
 * on both) and checked against double exp2: its relative error bound where the result is normal, 2^0 = 1
 * exactly, 0 exactly where x < -126.5 (hidden keys, -inf, add nothing), and the rounding's edges (x
 * next to every half-integer, where j changes). It is not monotone to the last ulp (a polynomial within
 * its error), which a softmax does not need. Needs a C whose float arithmetic is IEEE single without
 * excess precision (FLT_EVAL_METHOD 0, as on x86-64's SSE): elsewhere it reports itself skipped. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#include "cl_as_c.h"

#define fma fmaf
#define fmax fmaxf
#include "../cl/exp2_poly.h"
#undef fma
#undef fmax

#define REL_BOUND 2.0e-7  /* under 2 ulps of f32 (2.4e-7): the hardware exponent's own class of error */

static double rel_err(float x)
{
    const double want = exp2((double)x), got = exp2_poly(x);
    return fabs(got - want) / want;
}

START_TEST(relative_error_over_the_normal_range)
{
    /* Floats in [-1, -0] by their bits, every 61st (17 million), then a dense grid to -126. Every float of
     * [-1, -0] gave at worst 1.7155e-7, at x = -0.499989927 (an exhaustive run, 34 s: too long here). */
    double worst = 0;
    float worst_x = 0;
    int swept = 0;
    for (uint bits = 0x80000000u; bits <= as_uint(-1.0f); bits += 61, swept++) {
        const float x = as_float(bits);
        if (rel_err(x) > worst)
            worst = rel_err(x), worst_x = x;
    }
    for (int i = 0; i <= 4000000; i++) {
        const float x = (float)(-126.0 * i / 4000000.0);
        if (rel_err(x) > worst)
            worst = rel_err(x), worst_x = x;
    }
    ck_assert_int_gt(swept, 17000000);
    printf("exp2_poly: worst relative error %.4g at x = %.9g\n", worst, worst_x);
    ck_assert_msg(worst <= REL_BOUND, "relative error %.3g at x = %.9g", worst, worst_x);
    ck_assert_msg(worst > 1e-9, "an error of %.3g is not a polynomial's: is exp2_poly exp2?", worst);
}
END_TEST

START_TEST(rounding_edges)
{
    /* x a few ulps either side of j + 0.5, where round(x) moves from j to j + 1 and f from +0.5 to -0.5. */
    for (int j = -126; j <= 0; j++) {
        const float half = (float)j - 0.5f;
        float x = half;
        for (int step = 0; step < 4; step++)
            x = nextafterf(x, -INFINITY);
        for (int step = 0; step < 8; step++, x = nextafterf(x, INFINITY)) {
            if (x < -126.0f)
                continue;  /* results under 2^-126: the flushed range, below */
            ck_assert_msg(rel_err(x) <= REL_BOUND, "relative error %.3g at x = %.9g", rel_err(x), x);
        }
    }
}
END_TEST

START_TEST(exact_points)
{
    ck_assert(exp2_poly(0.0f) == 1.0f);
    ck_assert(exp2_poly(-0.0f) == 1.0f);
    /* Integers give 2^j to within the polynomial's error at f = 0, which is none. */
    for (int j = -126; j <= 0; j++)
        ck_assert_msg(exp2_poly((float)j) == ldexpf(1.0f, j), "2^%d", j);
    /* Hidden keys and the flushed range: 0 exactly, never a tiny positive weight. */
    ck_assert(exp2_poly(-INFINITY) == 0.0f);
    ck_assert(exp2_poly(-127.0f) == 0.0f);
    ck_assert(exp2_poly(-126.75f) == 0.0f);
    ck_assert(exp2_poly(-1e30f) == 0.0f);
    ck_assert(exp2_poly(-FLT_MAX) == 0.0f);
    /* Past 0, as a score a rounding above the row's max gives, and further up. */
    ck_assert_msg(rel_err(1e-6f) <= REL_BOUND, "x = 1e-6");
    ck_assert_msg(rel_err(10.3f) <= REL_BOUND, "x = 10.3");
    ck_assert_msg(rel_err(127.0f) <= REL_BOUND, "x = 127");
}
END_TEST

/* recip_fma over the softcap's range, [1, 2^64 + 1] (every 97th float), against double division; NaN kept. */
START_TEST(recip_over_the_cap_range)
{
    double worst = 0.0;
    float worst_x = 1.0f;
    for (uint bits = as_uint(1.0f); bits <= as_uint(18446744073709551616.0f); bits += 97) {
        const float x = as_float(bits);
        const double err = fabs((double)recip_fma(x) * (double)x - 1.0);
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
    }
    printf("recip_fma: largest relative error %.3e at x = %.9g\n", worst, (double)worst_x);
    ck_assert_msg(worst <= REL_BOUND, "relative error %.3e at x = %.9g", worst, (double)worst_x);
    ck_assert_msg(recip_fma(1.0f) == 1.0f || fabs((double)recip_fma(1.0f) - 1.0) <= REL_BOUND, "1 / 1");
    ck_assert(isnan(recip_fma(NAN)));
}
END_TEST

int main(void)
{
    if (FLT_EVAL_METHOD != 0) {
        printf("exp2_poly: skipped: this C evaluates float in more precision (FLT_EVAL_METHOD %d), which the "
               "GPU's f32 does not\n", (int)FLT_EVAL_METHOD);
        return 77;
    }
    Suite *s = suite_create("exp2_poly");
    TCase *tc = tcase_create("against double exp2");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, relative_error_over_the_normal_range);
    tcase_add_test(tc, rounding_edges);
    tcase_add_test(tc, exact_points);
    tcase_add_test(tc, recip_over_the_cap_range);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
