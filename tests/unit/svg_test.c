/* Unit tests of coordinator/report's SVG plots (kl_svg): round-number
 * ticks, SVG output (text escaping, log axes, non-finite points, "no
 * data", grids). The report's data is report_test.c, the live view
 * live_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_svg.h"
#include "kl_test_str.h"
#include "kl_util.h"

#define assert_near(a, b, eps) assert_true(fabs((a) - (b)) <= (eps))

static void test_ticks_linear(void **state)
{
    (void)state;
    double t[12], lo = 0.3, hi = 97.2;
    int n = kl_svg_ticks(&lo, &hi, false, 7, t);
    assert_true(n >= 2 && n <= 7);
    assert_true(lo <= 0.3 && hi >= 97.2);
    for (int i = 0; i < n; i++) {
        double step = t[1] - t[0];
        assert_near(t[i], lo + i * step, 1e-9);
        /* Steps are 1, 2 or 5 times a power of ten. */
        double m = step / pow(10, floor(log10(step)));
        assert_true(fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 ||
                    fabs(m - 5) < 1e-9);
    }
    assert_near(lo, 0, 1e-12);
    assert_near(hi, 100, 1e-9);
    /* A single value is widened around itself. */
    lo = hi = 5;
    n = kl_svg_ticks(&lo, &hi, false, 7, t);
    assert_true(n >= 2 && lo < 5 && hi > 5);
    /* Negative ranges and a hard limit of ticks. */
    lo = -123;
    hi = 4567;
    n = kl_svg_ticks(&lo, &hi, false, 4, t);
    assert_true(n >= 2 && n <= 4 && lo <= -123 && hi >= 4567);
}

static void test_ticks_log(void **state)
{
    (void)state;
    double t[12], lo = 3.2, hi = 4100;
    int n = kl_svg_ticks(&lo, &hi, true, 7, t);
    assert_int_equal(n, 5);
    assert_near(lo, 1, 1e-12);
    assert_near(hi, 1e4, 1e-6);
    assert_near(t[1], 10, 1e-9);
    /* Less than a decade: 1, 2, 5 times the power. */
    lo = 2.5;
    hi = 7;
    n = kl_svg_ticks(&lo, &hi, true, 7, t);
    assert_int_equal(n, 4);
    assert_near(t[1], 2, 1e-12);
    assert_near(t[2], 5, 1e-12);
    /* Many decades: every other power to stay under the limit. */
    lo = 1e-9;
    hi = 1e9;
    n = kl_svg_ticks(&lo, &hi, true, 7, t);
    assert_true(n <= 7 && n >= 2);
}

static void test_escape_and_render(void **state)
{
    (void)state;
    kl_svg_t *p = kl_svg_new("a <b> & \"c\"", "x", "y", KL_SVG_YZERO);
    double x[] = {1, 2, 3, 4}, y[] = {NAN, 2, INFINITY, 8};
    kl_svg_add(p, "series <1>", KL_SVG_STEP, x, y, 4);
    kl_svg_add(p, NULL, KL_SVG_POINTS, x, y, 4);
    kl_svg_note(p, "note & more");
    assert_int_equal(kl_svg_nseries(p), 2);
    char *svg = kl_svg_render(p, 400, 300);
    assert_non_null(strstr(svg, "xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(svg, "a &lt;b&gt; &amp; &quot;c&quot;"));
    assert_non_null(strstr(svg, "series &lt;1&gt;"));
    assert_non_null(strstr(svg, "note &amp; more"));
    assert_null(strstr(svg, "nan"));
    assert_null(strstr(svg, "inf"));
    assert_int_equal(kl_test_count(svg, "<polyline"), 1);
    /* Two finite points of the POINTS series. */
    assert_int_equal(kl_test_count(svg, "<circle"), 2);
    assert_int_equal(kl_test_count(svg, "<svg"), 1);
    assert_int_equal(kl_test_count(svg, "<g "), kl_test_count(svg, "</g>"));
    assert_int_equal(kl_test_count(svg, "<text"),
                     kl_test_count(svg, "</text>"));
    free(svg);
    kl_svg_destroy(&p);
    assert_null(p);
    kl_svg_destroy(&p);
}

static void test_empty_and_log(void **state)
{
    (void)state;
    kl_svg_t *p = kl_svg_new("empty", NULL, NULL, KL_SVG_LOGX | KL_SVG_LOGY);
    double x[] = {-1, 0}, y[] = {5, 6};
    kl_svg_add(p, "nothing drawable", KL_SVG_LINE, x, y, 2);
    char *svg = kl_svg_render(p, 10, 10); /* clamped to 120 */
    assert_non_null(strstr(svg, "no data"));
    assert_non_null(strstr(svg, "width=\"120\""));
    assert_null(strstr(svg, "<polyline"));
    free(svg);
    kl_svg_destroy(&p);

    p = kl_svg_new("hist", "us", "n", KL_SVG_LOGX);
    double edges[] = {1, 10, 100, 1000}, counts[] = {3, 0, 1};
    kl_svg_add_bars(p, NULL, edges, counts, 3);
    svg = kl_svg_render(p, 400, 300);
    /* Two bars (the empty bin draws nothing), plus the frame and the
     * background. */
    assert_int_equal(kl_test_count(svg, "fill-opacity"), 2);
    assert_non_null(strstr(svg, ">1000</text>"));
    free(svg);
    kl_svg_destroy(&p);
}

static void test_grid(void **state)
{
    (void)state;
    kl_svg_t *p[3];
    double x[] = {1, 2}, y[] = {1, 2};
    for (int i = 0; i < 3; i++) {
        p[i] = kl_svg_new("p", "x", "y", 0);
        kl_svg_add(p[i], NULL, KL_SVG_LINE, x, y, 2);
    }
    char *svg =
        kl_svg_grid((const kl_svg_t *const *)p, 3, 2, 300, 200, "id<1>");
    assert_int_equal(kl_test_count(svg, "<svg"), 1);
    assert_non_null(strstr(svg, "id=\"id&lt;1&gt;\""));
    assert_non_null(strstr(svg, "width=\"600\" height=\"400\""));
    assert_non_null(strstr(svg, "translate(0,200)"));
    assert_int_equal(kl_test_count(svg, "<polyline"), 3);
    free(svg);

    /* A line of one drawable point shows as a dot. */
    kl_svg_t *one = kl_svg_new("one", "x", "y", 0);
    kl_svg_add(one, NULL, KL_SVG_STEP, x, y, 1);
    svg = kl_svg_render(one, 300, 200);
    assert_int_equal(kl_test_count(svg, "<circle"), 1);
    free(svg);
    kl_svg_destroy(&one);

    /* 10000 trials of a best-so-far curve that changes 3 times: a few
     * points, not thousands. */
    double bx[10000], by[10000];
    for (int i = 0; i < 10000; i++) {
        bx[i] = i + 1;
        by[i] = i < 10 ? 1 : i < 500 ? 2 : i < 9000 ? 3 : 4;
    }
    kl_svg_t *big = kl_svg_new("big", "x", "y", 0);
    kl_svg_add(big, NULL, KL_SVG_STEP, bx, by, 10000);
    svg = kl_svg_render(big, 300, 200);
    assert_true(strlen(svg) < 4000);
    assert_int_equal(kl_test_count(svg, "<polyline"), 1);
    char *pts = strstr(svg, "points=\"");
    assert_non_null(pts);
    int commas = 0;
    for (char *c = pts; *c && *c != '/'; c++)
        commas += *c == ',';
    assert_int_equal(commas, 1 + 2 * 3 + 1); /* start, 3 steps, end */
    free(svg);
    kl_svg_destroy(&big);
    for (int i = 0; i < 3; i++)
        kl_svg_destroy(&p[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ticks_linear),
        cmocka_unit_test(test_ticks_log),
        cmocka_unit_test(test_escape_and_render),
        cmocka_unit_test(test_empty_and_log),
        cmocka_unit_test(test_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
