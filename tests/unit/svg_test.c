/* Unit tests of coordinator/report: round-number ticks, SVG output (text
 * escaping, log axes, non-finite points, "no data", grids), the report's
 * data over a real LMDB store (target filtering, "cpu" as this machine's
 * exact target, the weighted-latency curve and its note) and the live
 * view (the redrawn block's ANSI sequences, rate-limited plain lines). */
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

#include "kl_err.h"
#include "kl_live.h"
#include "kl_report.h"
#include "kl_store.h"
#include "kl_svg.h"
#include "kl_util.h"
#include "kl_test_tmp.h"

#define assert_near(a, b, eps) assert_true(fabs((a) - (b)) <= (eps))

static int s_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

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
    assert_int_equal(s_count(svg, "<polyline"), 1);
    /* Two finite points of the POINTS series. */
    assert_int_equal(s_count(svg, "<circle"), 2);
    assert_int_equal(s_count(svg, "<svg"), 1);
    assert_int_equal(s_count(svg, "<g "), s_count(svg, "</g>"));
    assert_int_equal(s_count(svg, "<text"), s_count(svg, "</text>"));
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
    assert_int_equal(s_count(svg, "fill-opacity"), 2);
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
    assert_int_equal(s_count(svg, "<svg"), 1);
    assert_non_null(strstr(svg, "id=\"id&lt;1&gt;\""));
    assert_non_null(strstr(svg, "width=\"600\" height=\"400\""));
    assert_non_null(strstr(svg, "translate(0,200)"));
    assert_int_equal(s_count(svg, "<polyline"), 3);
    free(svg);

    /* A line of one drawable point shows as a dot. */
    kl_svg_t *one = kl_svg_new("one", "x", "y", 0);
    kl_svg_add(one, NULL, KL_SVG_STEP, x, y, 1);
    svg = kl_svg_render(one, 300, 200);
    assert_int_equal(s_count(svg, "<circle"), 1);
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
    assert_int_equal(s_count(svg, "<polyline"), 1);
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

/* ---- report over a real store ------------------------------------------ */

static char s_dir[256];

static void s_put_workload(kl_store_t *st, const char *name, uint8_t tag,
                           double flop)
{
    char err[KL_ERRMSG_LEN];
    Kiln__Workload w = KILN__WORKLOAD__INIT;
    uint8_t key[16] = {tag};
    w.key.data = key;
    w.key.len = 16;
    w.name = (char *)name;
    w.text = (char *)name;
    w.op_kind = "matmul";
    w.flop = flop;
    assert_int_equal(kl_store_put_workload(st, &w, err), 0);
}

static void s_put_record(kl_store_t *st, uint8_t tag, const char *target,
                         double median, uint64_t time_us)
{
    char err[KL_ERRMSG_LEN];
    Kiln__TuningRecord r = KILN__TUNING_RECORD__INIT, *rp = &r;
    uint8_t key[16] = {tag};
    r.workload_key.data = key;
    r.workload_key.len = 16;
    r.target = (char *)target;
    r.status = median > 0 ? KILN__STATUS__STATUS_OK
                          : KILN__STATUS__STATUS_COMPILE_ERROR;
    r.median_s = median > 0 ? median : 0;
    r.time_us = time_us;
    assert_int_equal(kl_store_commit(st, &rp, 1, err), 0);
}

static kl_store_t *s_store(void)
{
    char err[KL_ERRMSG_LEN];
    assert_non_null(kl_test_mkdtemp(s_dir, sizeof s_dir, "kl_svg_test.XXXXXX"));
    kl_store_t *st = NULL;
    assert_int_equal(kl_store_open(&st, s_dir, KL_STORE_NOSYNC, err), 0);
    const char *exact = kl_report_target("cpu");
    s_put_workload(st, "mm_a", 1, 2e9);
    s_put_workload(st, "mm_b", 2, 1e9);
    s_put_workload(st, "mm_other", 3, 1e9);
    uint64_t t0 = 1700000000000000ull;
    s_put_record(st, 1, exact, 0.01, t0);
    s_put_record(st, 1, exact, -1, t0 + 1000000);
    s_put_record(st, 1, exact, 0.005, t0 + 2000000);
    s_put_record(st, 2, exact, 0.002, t0 + 3000000);
    /* Other targets: never in a report on `exact`. */
    s_put_record(st, 1, "cpu/generic", 1e-6, t0 + 500000);
    s_put_record(st, 3, "cuda/sm_90", 1e-6, t0 + 500000);
    s_put_record(st, 2, "cpu", 1e-6, t0 + 500000);
    return st;
}

static void s_rm_store(kl_store_t **st)
{
    kl_store_close(st);
    char *cmd = kl_xasprintf("rm -rf '%s'", s_dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

static void test_report_targets(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_store_t *st = s_store();
    const char *exact = kl_report_target("cpu");
    assert_true(!strncmp(exact, "cpu/x86_64", 10));
    assert_string_equal(kl_report_target("cuda/sm_90"), "cuda/sm_90");
    kl_report_t *r = NULL;
    kl_report_cfg_t cfg = {.target = "cpu", .source = s_dir};
    assert_int_equal(kl_report_load(&r, st, &cfg, err), 0);
    assert_string_equal(kl_report_exact_target(r), exact);
    assert_int_equal(kl_report_ntasks(r), 2); /* mm_other: cuda only */
    assert_int_equal(kl_report_nrecords(r, 0), 3);
    assert_int_equal(kl_report_nrecords(r, 1), 1);
    char *html = kl_report_html(r);
    /* mm_a's best is 5 ms (2e9 FLOP: 400 GFLOP/s), not the 1 us of
     * cpu/generic; the total is 5000 + 2000 us. */
    assert_non_null(strstr(html, "<td>400.00</td><td>5000.00</td>"));
    assert_non_null(strstr(html, "<td>7000.00</td>"));
    assert_null(strstr(html, "mm_other"));
    assert_int_equal(s_count(html, "<svg"), 3);
    assert_non_null(strstr(html, "id=\"task-1\""));
    assert_non_null(strstr(html, "when every task has a valid record"));
    free(html);
    kl_report_destroy(&r);

    cfg.target = "cuda/sm_80";
    assert_int_equal(kl_report_load(&r, st, &cfg, err), KL_ERR_NOTFOUND);
    assert_non_null(strstr(err, "cuda/sm_90"));
    assert_null(r);
    s_rm_store(&st);
}

static void test_report_model_missing_task(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_store_t *st = s_store();
    kl_report_t *r = NULL;
    /* A model whose tasks have no record at all: the curve cannot start
     * and the plot says which tasks are missing. */
    char path[300];
    snprintf(path, sizeof path, "%s.graph", s_dir);
    const char *g = "model m\ninput x 1x8\nd = dense x O=4\n";
    assert_int_equal(kl_write_file(path, g, strlen(g), err), 0);
    kl_report_cfg_t cfg = {.target = "cpu", .model = path};
    assert_int_equal(kl_report_load(&r, st, &cfg, err), 0);
    assert_int_equal(kl_report_ntasks(r), 1);
    assert_int_equal(kl_report_nrecords(r, 0), 0);
    char *svg = kl_report_weighted_svg(r);
    assert_non_null(strstr(svg, "no curve: 1 of 1 tasks"));
    free(svg);
    svg = kl_report_task_svg(r, 0);
    assert_non_null(strstr(svg, "no record on this target yet"));
    free(svg);
    /* No speed, latency or total for a task without a record: "-", never
     * a number such as 0. */
    char *html = kl_report_html(r);
    assert_null(strstr(html, "<td>0.00</td>"));
    assert_non_null(strstr(html, "<td>-</td><td>-</td><td>-</td></tr>"));
    assert_non_null(strstr(html, "<td></td><td>-</td></tr>"));
    free(html);
    kl_report_destroy(&r);
    unlink(path);
    cfg.model = "no_such_model_anywhere";
    assert_int_equal(kl_report_load(&r, st, &cfg, err), KL_ERR_NOTFOUND);
    s_rm_store(&st);
}

/* ---- live view ---------------------------------------------------------- */

static char *s_read_back(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *s = kl_xcalloc(1, (size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

static void test_live_block(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    kl_live_t *l = kl_live_new(f, KL_LIVE_BLOCK, 0);
    assert_true(kl_live_is_block(l));
    kl_job_progress_t p = {
        .trials = 5, .cap = 10, .best_s = 1e-3, .gflops = 2, .eta_s = 3};
    kl_live_tune(l, "mm", &p);
    p.trials = 10;
    p.done = true;
    kl_live_tune(l, "mm", &p); /* forced: done */
    kl_live_destroy(&l);
    char *s = s_read_back(f);
    /* The second draw goes back up over the 5 lines of the first. */
    assert_int_equal(s_count(s, "\033[5A"), 1);
    assert_non_null(strstr(s, "[###############...............]  50%"));
    assert_non_null(strstr(s, "] 100%  trials 10/10"));
    assert_non_null(strstr(s, "best 2.00 GFLOP/s (1000.00 us)"));
    free(s);
    fclose(f);
}

static void test_live_lines(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    kl_live_t *l = kl_live_new(f, KL_LIVE_LINES, 60);
    assert_false(kl_live_is_block(l));
    kl_job_progress_t p = {.trials = 1, .cap = 10, .best_s = INFINITY};
    for (int i = 0; i < 5; i++)
        kl_live_tune(l, NULL, &p); /* one line, then rate-limited */
    kl_ts_row_t rows[1] = {{"t0", 1e6, 1, 1e-3, 4, true, "cap"}};
    kl_live_tasks(l, "round 1", rows, 1, 4, 8, true);
    kl_live_destroy(&l);
    char *s = s_read_back(f);
    assert_int_equal(s_count(s, "\n"), 3);
    assert_int_equal(s_count(s, "no valid candidate yet"), 1);
    assert_null(strchr(s, '\033'));
    assert_non_null(strstr(s, "round 1\n"));
    assert_non_null(strstr(s, "trials 4/8, tasks done 1/1"));
    free(s);
    fclose(f);

    char bar[64];
    kl_live_bar(bar, sizeof bar, 4, 3, 0);
    assert_string_equal(bar, "[....]   0%");
    kl_live_bar(bar, 5, 4, 3, 4); /* too small: empty */
    assert_string_equal(bar, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ticks_linear),
        cmocka_unit_test(test_ticks_log),
        cmocka_unit_test(test_escape_and_render),
        cmocka_unit_test(test_empty_and_log),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_report_targets),
        cmocka_unit_test(test_report_model_missing_task),
        cmocka_unit_test(test_live_block),
        cmocka_unit_test(test_live_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
