/* Unit tests of coordinator/report's data (kl_report) over a real LMDB
 * store: target filtering, "cpu" as this machine's exact target, the
 * weighted-latency curve and its note, a model's task without a record. */
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
#include "kl_report.h"
#include "kl_store.h"
#include "kl_test_str.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

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
    assert_non_null(
        kl_test_mkdtemp(s_dir, sizeof s_dir, "kl_report_test.XXXXXX"));
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
    assert_int_equal(kl_test_count(html, "<svg"), 3);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_targets),
        cmocka_unit_test(test_report_model_missing_task),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
