/* Unit tests of coordinator/tasksched: the hard trial caps, the warm-up,
 * the gradient of Ansor's scheduler against hand-computed values, ties,
 * similarity groups, early stop, restore and the summary table. A
 * synthetic latency model stands in for the fleet. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_tasksched.h"

#define NT_MAX 32

static char s_names[NT_MAX][16];
static kl_ts_task_t s_tasks[NT_MAX];

/* n tasks of one op kind, FLOPs spread over distinct buckets. */
static void s_make(int n, const char *kind)
{
    for (int i = 0; i < n; i++) {
        snprintf(s_names[i], sizeof(s_names[i]), "t%d", i);
        s_tasks[i] = (kl_ts_task_t){s_names[i], kind, 1e6 * (i + 1), 1.0};
    }
}

static kl_ts_t *s_new(const kl_ts_cfg_t *cfg, int n)
{
    char err[KL_ERRMSG_LEN];
    kl_ts_t *ts = NULL;
    int rc = kl_ts_new(&ts, cfg, s_tasks, n, err);
    if (rc)
        fail_msg("kl_ts_new: %s", err);
    return ts;
}

/* Synthetic model: the best latency of task i after n trials. */
static double s_lat(int i, int64_t n)
{
    return 1e-3 * (1.0 + (i % 3)) * (1.0 + 4.0 * exp(-(double)n / 64.0));
}

/* Runs the job to its end; returns the number of rounds. Checks every
 * batch against the caps. */
static int s_run(kl_ts_t *ts, const kl_ts_cfg_t *cfg, int64_t *maxbatch)
{
    char err[KL_ERRMSG_LEN];
    int task, rounds = 0;
    int64_t batch, mb = 0;
    while (kl_ts_next(ts, &task, &batch, err) == KL_OK) {
        assert_true(batch >= 1 && batch <= cfg->trials_per_iter);
        if (batch > mb)
            mb = batch;
        int64_t n = kl_ts_trials(ts, task) + batch;
        assert_int_equal(kl_ts_report(ts, task, batch, s_lat(task, n), err),
                         KL_OK);
        assert_true(kl_ts_total_trials(ts) <= cfg->max_trials_global);
        if (cfg->max_trials_per_task)
            assert_true(kl_ts_trials(ts, task) <= cfg->max_trials_per_task);
        rounds++;
        assert_true(rounds < 100000);
    }
    if (maxbatch)
        *maxbatch = mb;
    return rounds;
}

static void test_per_task_cap(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        kl_ts_cfg_t cfg;
        kl_ts_cfg_default(&cfg);
        cfg.kind = (kl_ts_kind)kind;
        cfg.max_trials_global = 1000000;
        cfg.max_trials_per_task = 32;
        cfg.trials_per_iter = 32;
        s_make(20, "conv2d");
        kl_ts_t *ts = s_new(&cfg, 20);
        assert_int_equal(kl_ts_unreached(ts, NULL, 0), 0);
        assert_int_equal(s_run(ts, &cfg, NULL), 20);
        for (int i = 0; i < 20; i++) {
            assert_int_equal(kl_ts_trials(ts, i), 32);
            assert_int_equal(kl_ts_task_state(ts, i), KL_TS_DONE_CAP);
        }
        assert_int_equal(kl_ts_total_trials(ts), 640);
        assert_true(kl_ts_finished(ts));
        kl_ts_destroy(&ts);
        assert_null(ts);
    }
}

static void test_global_cap(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.max_trials_global = 100;
    cfg.max_trials_per_task = 32;
    cfg.trials_per_iter = 32;
    s_make(20, "conv2d");
    kl_ts_t *ts = s_new(&cfg, 20);
    int idx[20];
    /* 32 + 32 + 32 + 4: tasks 4..19 may get nothing. */
    assert_int_equal(kl_ts_unreached(ts, idx, 20), 16);
    assert_int_equal(idx[0], 4);
    assert_int_equal(idx[15], 19);
    int64_t mb = 0;
    assert_int_equal(s_run(ts, &cfg, &mb), 4);
    assert_int_equal(kl_ts_total_trials(ts), 100);
    assert_int_equal(kl_ts_trials(ts, 3), 4);
    assert_int_equal(kl_ts_trials(ts, 4), 0);
    int t;
    int64_t b;
    assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_ERR_EXHAUSTED);
    assert_int_equal(b, 0);
    kl_ts_row_t rows[20];
    kl_ts_rows(ts, rows);
    assert_true(rows[10].done);
    assert_string_equal(rows[10].why, "global cap");
    kl_ts_destroy(&ts);

    /* The same with the gradient past the warm-up: 5 tasks, 300 trials. */
    cfg.max_trials_global = 300;
    cfg.max_trials_per_task = 0;
    ts = s_new(&cfg, 5);
    assert_int_equal(kl_ts_unreached(ts, NULL, 0), 0);
    s_run(ts, &cfg, NULL);
    assert_int_equal(kl_ts_total_trials(ts), 300);
    kl_ts_destroy(&ts);
}

static void test_batch_cut(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.kind = KL_TS_ROUND_ROBIN;
    cfg.max_trials_global = 1000;
    cfg.max_trials_per_task = 50;
    cfg.trials_per_iter = 32;
    s_make(3, "dense");
    kl_ts_t *ts = s_new(&cfg, 3);
    int64_t want[] = {32, 32, 32, 18, 18, 18};
    for (int r = 0; r < 6; r++) {
        int t;
        int64_t b;
        assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_OK);
        assert_int_equal(t, r % 3);
        assert_int_equal(b, want[r]);
        assert_int_equal(kl_ts_report(ts, t, b, 1e-3, err), KL_OK);
    }
    assert_true(kl_ts_finished(ts));
    assert_int_equal(kl_ts_total_trials(ts), 150);
    kl_ts_destroy(&ts);

    /* The global cap cuts the last batch too: 70 = 32 + 32 + 6. */
    cfg.max_trials_global = 70;
    cfg.max_trials_per_task = 0;
    ts = s_new(&cfg, 3);
    int64_t mb;
    assert_int_equal(s_run(ts, &cfg, &mb), 3);
    assert_int_equal(kl_ts_trials(ts, 2), 6);
    assert_int_equal(kl_ts_total_trials(ts), 70);
    kl_ts_destroy(&ts);
}

static void test_failures_and_errors(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.max_trials_global = 40;
    cfg.trials_per_iter = 16;
    s_make(2, "conv2d");
    kl_ts_t *ts = s_new(&cfg, 2);
    int t;
    int64_t b;
    assert_int_equal(kl_ts_report(ts, 0, 1, 1e-3, err), KL_ERR_INVAL);
    assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_OK);
    assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not reported"));
    assert_int_equal(kl_ts_report(ts, t, b + 1, 1e-3, err), KL_ERR_INVAL);
    assert_int_equal(kl_ts_report(ts, 1 - t, b, 1e-3, err), KL_ERR_INVAL);
    /* Every candidate failed: the trials still count, no best yet. */
    assert_int_equal(kl_ts_report(ts, t, b, INFINITY, err), KL_OK);
    assert_int_equal(kl_ts_trials(ts, t), 16);
    assert_true(isinf(kl_ts_best_s(ts, t)));
    /* A round with no trial: that task's space is exhausted. */
    assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_OK);
    assert_int_equal(t, 1);
    assert_int_equal(kl_ts_report(ts, t, 0, INFINITY, err), KL_OK);
    assert_int_equal(kl_ts_task_state(ts, 1), KL_TS_DONE_EXHAUSTED);
    /* Only task 0 is left: 16 more, then 8 to the global cap. */
    assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_OK);
    assert_true(t == 0 && b == 16);
    assert_int_equal(kl_ts_report(ts, t, b, 2e-3, err), KL_OK);
    assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_OK);
    assert_true(t == 0 && b == 8);
    assert_int_equal(kl_ts_report(ts, t, b, 3e-3, err), KL_OK);
    assert_true(kl_ts_best_s(ts, 0) == 2e-3); /* worse values are ignored */
    assert_int_equal(kl_ts_next(ts, &t, &b, err), KL_ERR_EXHAUSTED);
    kl_ts_destroy(&ts);

    /* Bad configurations and tasks are named. */
    kl_ts_cfg_default(&cfg);
    cfg.trials_per_iter = 0;
    assert_int_equal(kl_ts_new(&ts, &cfg, s_tasks, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "trials-per-iter"));
    kl_ts_cfg_default(&cfg);
    cfg.alpha = 1.5;
    assert_int_equal(kl_ts_new(&ts, &cfg, s_tasks, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "alpha"));
    kl_ts_cfg_default(&cfg);
    kl_ts_task_t bad = {"zero", "conv2d", 0.0, 1.0};
    assert_int_equal(kl_ts_new(&ts, &cfg, &bad, 1, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "zero"));
    assert_null(ts);
    kl_ts_kind k;
    assert_int_equal(kl_ts_kind_parse("random", &k, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "random"));
    assert_int_equal(kl_ts_kind_parse("round-robin", &k, err), KL_OK);
    assert_int_equal(k, KL_TS_ROUND_ROBIN);
}

/* Three tasks, A and B similar (conv2d, same bucket), C alone (dense),
 * five round-robin rounds each with the latencies below. */
static kl_ts_t *s_three(void)
{
    static kl_ts_task_t t[3] = {
        {"A", "conv2d", 1e9, 2.0},
        {"B", "conv2d", 1.1e9, 1.0},
        {"C", "dense", 1e9, 1.0},
    };
    static const double lat[3][5] = {
        {4e-3, 3e-3, 2e-3, 1.5e-3, 1e-3},
        {8e-3, 8e-3, 8e-3, 8e-3, 8e-3},
        {5e-3, 4e-3, 4e-3, 4e-3, 4e-3},
    };
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.kind = KL_TS_ROUND_ROBIN;
    cfg.max_trials_global = 100000;
    cfg.trials_per_iter = 10;
    kl_ts_t *ts = NULL;
    assert_int_equal(kl_ts_new(&ts, &cfg, t, 3, err), KL_OK);
    for (int r = 0; r < 15; r++) {
        int i;
        int64_t b;
        assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
        assert_int_equal(i, r % 3);
        assert_int_equal(kl_ts_report(ts, i, b, lat[i][r / 3], err), KL_OK);
    }
    return ts;
}

static void s_near(double got, double want)
{
    if (fabs(got - want) > 1e-12 + 1e-9 * fabs(want))
        fail_msg("got %.12g, want %.12g", got, want);
}

static void test_gradient_values(void **state)
{
    (void)state;
    kl_ts_t *ts = s_three();
    assert_true(kl_ts_group(ts, 0) >= 0);
    assert_int_equal(kl_ts_group(ts, 0), kl_ts_group(ts, 1));
    assert_int_equal(kl_ts_group(ts, 2), -1);
    /* A: backward (g(5)-g(2))/3 = (1e-3 - 3e-3)/3; forward -g/t = -2e-4
     * (the group term 2*1e9/1e12 - 1e-3 = +1e-3 is larger):
     * 2 * (0.2 * -6.667e-4 + 0.8 * -2e-4). */
    s_near(kl_ts_gradient(ts, 0),
           2.0 * (0.2 * (1e-3 - 3e-3) / 3.0 + 0.8 * (-1e-3 / 5.0)));
    /* B: flat, so backward 0; -g/t = -1.6e-3 but the group's best speed
     * (A: 1e12 FLOP/s) says B could reach 2 * 1.1e9 / 1e12 = 2.2e-3:
     * forward 2.2e-3 - 8e-3 = -5.8e-3. */
    s_near(kl_ts_gradient(ts, 1), 0.8 * (2.0 * 1.1e9 / 1e12 - 8e-3));
    /* C: alone; backward (4e-3 - 4e-3)/3 = 0, forward -4e-3/5. */
    s_near(kl_ts_gradient(ts, 2), 0.8 * (-4e-3 / 5.0));

    /* B stays the slowest of its group; once it has had more than 5 rounds
     * beyond A it leaves, and the group of one dissolves. */
    kl_ts_exhausted(ts, 0);
    kl_ts_exhausted(ts, 2);
    assert_true(kl_ts_gradient(ts, 0) == 0.0);
    char err[KL_ERRMSG_LEN];
    for (int r = 0; r < 6; r++) {
        int i;
        int64_t b;
        assert_int_equal(kl_ts_group(ts, 1), kl_ts_group(ts, 0));
        assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
        assert_int_equal(i, 1);
        assert_int_equal(kl_ts_report(ts, i, b, 8e-3, err), KL_OK);
    }
    assert_int_equal(kl_ts_rounds(ts, 1), 11);
    assert_int_equal(kl_ts_group(ts, 1), -1);
    assert_int_equal(kl_ts_group(ts, 0), -1);
    /* Alone now: only -g/t is left (backward still 0). */
    s_near(kl_ts_gradient(ts, 1), 0.8 * (-8e-3 / 11.0));
    kl_ts_destroy(&ts);
}

static void test_gradient_no_result(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.eps = 0;
    kl_ts_task_t two[2] = {{"p", "conv2d", 1e6, 1}, {"q", "conv2d", 1e6, 1}};
    kl_ts_t *ts = NULL;
    assert_int_equal(kl_ts_new(&ts, &cfg, two, 2, err), KL_OK);
    assert_true(kl_ts_group(ts, 0) >= 0);
    /* Before any round: t counts as 1, g as the large finite value. */
    s_near(kl_ts_gradient(ts, 0), 0.8 * -KL_TS_NO_RESULT_S);
    int i;
    int64_t b;
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(kl_ts_report(ts, i, b, 1e-3, err), KL_OK);
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(kl_ts_report(ts, i, b, INFINITY, err), KL_OK);
    /* Task 1 has no valid result: it is preferred, and the speed of the
     * group is not poisoned by its infinite latency. */
    assert_true(isfinite(kl_ts_gradient(ts, 1)));
    assert_true(kl_ts_gradient(ts, 1) < kl_ts_gradient(ts, 0));
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(i, 1);
    kl_ts_destroy(&ts);
}

/* With eps = 0 every pick after the warm-up is the most negative gradient;
 * exact ties go either way depending on the seed. */
static void test_gradient_picks_and_ties(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.eps = 0;
    cfg.max_trials_global = 64 * 60;
    s_make(6, "conv2d");
    kl_ts_t *ts = s_new(&cfg, 6);
    int i;
    int64_t b;
    for (int r = 0; kl_ts_next(ts, &i, &b, err) == KL_OK; r++) {
        if (r >= 6) {
            for (int k = 0; k < 6; k++)
                assert_true(kl_ts_gradient(ts, i) <= kl_ts_gradient(ts, k));
        } else {
            assert_int_equal(i, r); /* warm-up in task order */
        }
        assert_int_equal(
            kl_ts_report(ts, i, b, s_lat(i, kl_ts_trials(ts, i) + b), err),
            KL_OK);
    }
    kl_ts_destroy(&ts);

    /* Two identical tasks: after the warm-up their gradients are equal. */
    int seen[2] = {0, 0};
    for (uint64_t seed = 1; seed <= 32; seed++) {
        kl_ts_task_t two[2] = {{"x", "dense", 1e6, 1}, {"y", "dense", 1e6, 1}};
        cfg.seed = seed;
        assert_int_equal(kl_ts_new(&ts, &cfg, two, 2, err), KL_OK);
        for (int r = 0; r < 2; r++) {
            assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
            assert_int_equal(kl_ts_report(ts, i, b, 1e-3, err), KL_OK);
        }
        assert_true(kl_ts_gradient(ts, 0) == kl_ts_gradient(ts, 1));
        assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
        seen[i]++;
        kl_ts_destroy(&ts);
    }
    assert_true(seen[0] > 0 && seen[1] > 0);
}

/* Synthetic model: task 0 is heavy (weight 8) and improves a lot with
 * trials; the others are light and start near their floor. The gradient
 * scheduler spends more trials on task 0 than round-robin does, and ends
 * with a lower total weighted latency for the same budget. */
static double s_model(int i, int64_t n)
{
    if (i == 0)
        return 1e-3 * (1.0 + 9.0 * exp(-(double)n / 400.0));
    return 1e-3 * (1.0 + 0.05 * exp(-(double)n / 50.0));
}

static double s_job(kl_ts_kind kind, int64_t *trials0)
{
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.kind = kind;
    cfg.max_trials_global = 2048;
    cfg.trials_per_iter = 32;
    kl_ts_task_t t[4] = {{"heavy", "conv2d", 1e9, 8},
                         {"l1", "dense", 1e8, 1},
                         {"l2", "batch_matmul", 1e7, 1},
                         {"l3", "add", 1e5, 1}};
    kl_ts_t *ts = NULL;
    assert_int_equal(kl_ts_new(&ts, &cfg, t, 4, err), KL_OK);
    int i;
    int64_t b;
    while (kl_ts_next(ts, &i, &b, err) == KL_OK)
        assert_int_equal(
            kl_ts_report(ts, i, b, s_model(i, kl_ts_trials(ts, i) + b), err),
            KL_OK);
    double score = 0;
    for (int k = 0; k < 4; k++)
        score += t[k].weight * kl_ts_best_s(ts, k);
    *trials0 = kl_ts_trials(ts, 0);
    kl_ts_destroy(&ts);
    return score;
}

static void test_gradient_spends_where_it_pays(void **state)
{
    (void)state;
    int64_t rr0, gr0;
    double rr = s_job(KL_TS_ROUND_ROBIN, &rr0);
    double gr = s_job(KL_TS_GRADIENT, &gr0);
    assert_int_equal(rr0, 512);
    assert_true(gr0 > 1024); /* most of the budget goes to task 0 */
    assert_true(gr < rr);
}

static void test_early_stop(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.kind = KL_TS_ROUND_ROBIN;
    cfg.early_stop_rounds = 3;
    cfg.trials_per_iter = 8;
    s_make(2, "conv2d");
    kl_ts_t *ts = s_new(&cfg, 2);
    /* Task 0 is flat from its first round, task 1 keeps improving. */
    int i;
    int64_t b;
    for (int r = 0; r < 8; r++) {
        assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
        double lat = i == 0 ? 1e-3 : 1e-3 / (r + 1);
        assert_int_equal(kl_ts_report(ts, i, b, lat, err), KL_OK);
    }
    /* Task 0: improved in round 1, not in rounds 2, 3, 4: stopped. */
    assert_int_equal(kl_ts_task_state(ts, 0), KL_TS_DONE_STOPPED);
    assert_int_equal(kl_ts_rounds(ts, 0), 4);
    assert_int_equal(kl_ts_task_state(ts, 1), KL_TS_RUNNING);
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(i, 1);
    kl_ts_destroy(&ts);
}

static void test_restore(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.kind = KL_TS_ROUND_ROBIN;
    cfg.max_trials_global = 200;
    cfg.max_trials_per_task = 64;
    cfg.trials_per_iter = 32;
    s_make(4, "conv2d");
    kl_ts_t *ts = s_new(&cfg, 4);
    assert_int_equal(kl_ts_restore(ts, 0, 64, 1e-3, err), KL_OK);
    assert_int_equal(kl_ts_restore(ts, 1, 40, INFINITY, err), KL_OK);
    assert_int_equal(kl_ts_restore(ts, 9, 1, 1e-3, err), KL_ERR_INVAL);
    assert_int_equal(kl_ts_task_state(ts, 0), KL_TS_DONE_CAP);
    assert_int_equal(kl_ts_rounds(ts, 1), 2);
    assert_int_equal(kl_ts_total_trials(ts), 104);
    /* Warm-up: tasks 2 and 3 only (0 and 1 are restored). */
    int i;
    int64_t b;
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(i, 2);
    assert_int_equal(kl_ts_restore(ts, 3, 1, 1e-3, err), KL_ERR_INVAL);
    assert_int_equal(kl_ts_report(ts, i, b, 1e-3, err), KL_OK);
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(i, 3);
    assert_int_equal(kl_ts_report(ts, i, b, 1e-3, err), KL_OK);
    /* 168 so far; task 1 may take 24 more (cap 64), then 8 to 200. */
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_true(i == 1 && b == 24);
    assert_int_equal(kl_ts_report(ts, i, b, 1e-3, err), KL_OK);
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_true(i == 2 && b == 8);
    assert_int_equal(kl_ts_report(ts, i, b, 1e-3, err), KL_OK);
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_ERR_EXHAUSTED);
    assert_int_equal(kl_ts_total_trials(ts), 200);

    /* Unreached tasks count the restored trials toward the global cap. */
    kl_ts_destroy(&ts);
    cfg.max_trials_global = 100;
    ts = s_new(&cfg, 4);
    assert_int_equal(kl_ts_restore(ts, 0, 64, 1e-3, err), KL_OK);
    int idx[4];
    /* 64 restored, task 1 from 64 to 96, task 2 from 96 (cut to 4). */
    assert_int_equal(kl_ts_unreached(ts, idx, 4), 1);
    assert_int_equal(idx[0], 3);
    kl_ts_destroy(&ts);
}

static char *s_capture(void (*fn)(FILE *, const kl_ts_row_t *, int),
                       const kl_ts_row_t *rows, int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fn(f, rows, n);
    fclose(f);
    return buf;
}

static void test_summary(void **state)
{
    (void)state;
    kl_ts_row_t rows[3] = {
        {"conv2d_a", 2e9, 2, 1e-3, 64, true, "cap"},
        {"dense_\"b\"", 1e6, 1, 1e-5, 32, false, ""},
        {"add_c", 1e5, 3, INFINITY, 8, false, ""},
    };
    char *t = s_capture(kl_ts_print_table, rows, 3);
    assert_non_null(strstr(t, "Weighted Latency (us)"));
    assert_non_null(strstr(t, "Speed (GFLOPS)"));
    /* 2e9 FLOP in 1 ms = 2000 GFLOPS; weighted 2 * 1000 us. */
    assert_non_null(strstr(t, "2000.00"));
    assert_non_null(strstr(t, "yes (cap)"));
    assert_non_null(strstr(t, "Total trials: 104"));
    assert_non_null(strstr(t, "Total weighted latency: 2010.00 us (1 of 3"));
    free(t);
    char *j = s_capture(kl_ts_print_json, rows, 3);
    assert_non_null(strstr(j, "\"name\":\"dense_\\\"b\\\"\""));
    assert_non_null(strstr(j, "\"gflops\":null"));
    assert_non_null(strstr(j, "\"total_trials\":104"));
    assert_non_null(strstr(j, "\"total_weighted_latency_us\":2010"));
    assert_non_null(strstr(j, "\"tasks_without_result\":1"));
    free(j);
}

/* depth 2: a second round goes out before the first is reported, the caps
 * count both, reports may come in either order, a third round waits, and a
 * task's warm-up round is handed out once. */
static void test_depth(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_ts_cfg_t cfg;
    kl_ts_cfg_default(&cfg);
    cfg.kind = KL_TS_ROUND_ROBIN;
    cfg.max_trials_global = 10;
    cfg.trials_per_iter = 4;
    cfg.depth = 2;
    s_make(1, "matmul");
    kl_ts_t *ts = s_new(&cfg, 1);
    int i = -1;
    int64_t b = 0;
    assert_true(kl_ts_ready(ts));
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(b, 4);
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(b, 4);
    assert_int_equal(kl_ts_outstanding(ts), 2);
    assert_false(kl_ts_ready(ts));
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not reported"));
    assert_int_equal(kl_ts_report(ts, 0, 3, 1e-3, err), KL_OK); /* 1 lost */
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_OK);
    assert_int_equal(b, 3); /* 10 - 3 reported - 4 still out */
    assert_int_equal(kl_ts_report(ts, 0, 4, 2e-3, err), KL_OK);
    assert_int_equal(kl_ts_report(ts, 0, 3, 1e-3, err), KL_OK);
    assert_int_equal(kl_ts_total_trials(ts), 10);
    assert_int_equal(kl_ts_next(ts, &i, &b, err), KL_ERR_EXHAUSTED);
    assert_int_equal(kl_ts_report(ts, 0, 1, 1e-3, err), KL_ERR_INVAL);
    kl_ts_destroy(&ts);

    /* Two tasks, depth 2: the warm-up gives each its round, once. */
    cfg.max_trials_global = 100;
    s_make(2, "matmul");
    ts = s_new(&cfg, 2);
    int a = -1, c = -1;
    assert_int_equal(kl_ts_next(ts, &a, &b, err), KL_OK);
    assert_int_equal(kl_ts_next(ts, &c, &b, err), KL_OK);
    assert_int_equal(a, 0);
    assert_int_equal(c, 1);
    kl_ts_destroy(&ts);
    cfg.depth = KL_TS_MAX_DEPTH + 1;
    assert_int_equal(kl_ts_new(&ts, &cfg, s_tasks, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "depth"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_task_cap),
        cmocka_unit_test(test_global_cap),
        cmocka_unit_test(test_batch_cut),
        cmocka_unit_test(test_failures_and_errors),
        cmocka_unit_test(test_gradient_values),
        cmocka_unit_test(test_gradient_no_result),
        cmocka_unit_test(test_gradient_picks_and_ties),
        cmocka_unit_test(test_gradient_spends_where_it_pays),
        cmocka_unit_test(test_early_stop),
        cmocka_unit_test(test_restore),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
