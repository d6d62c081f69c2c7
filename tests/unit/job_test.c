/* Unit tests of coordinator/tune's conductor (kl_job.h) running jobs on
 * real kiln-agent processes in --simulate mode (synthetic latencies, a
 * real fleet and wire): caps are hard and counted once, rounds of one
 * task overlap (depth 2), a resumed job continues to its cap, a job of
 * several tasks shares the global cap, a stop keeps every committed
 * record, and a job without agents fails with the target named. A task
 * alone is task_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_fleet.h"
#include "kl_err.h"
#include "kl_hashset.h"
#include "kl_job.h"
#include "kl_record.h"
#include "kl_store.h"
#include "kl_task.h"
#include "kl_test_tmp.h"
#include "kl_util.h"
#include "tune_fx.h"

typedef struct {
    int results, rounds, ends, max_out;
    int64_t spent;
    volatile sig_atomic_t stop;
    bool stop_at_first;
} ev_t;

static void s_on_event(void *ctx, kl_job_t *job, const kl_job_event_t *ev)
{
    ev_t *e = ctx;
    int out = kl_ts_outstanding(kl_job_tasksched(job));
    if (out > e->max_out)
        e->max_out = out;
    if (ev->kind == KL_JOB_RESULTS) {
        e->results++;
        if (e->stop_at_first)
            e->stop = 1;
    } else if (ev->kind == KL_JOB_ROUND) {
        e->rounds++;
        e->spent += ev->spent;
        assert_int_equal(ev->round, e->rounds);
    } else {
        e->ends++;
    }
}

static int s_run(kl_job_t *job, fx_tune_t *f, ev_t *e, char *err)
{
    kl_job_run_cfg_t rc = {
        .agent_wait_s = 30, .stop = &e->stop, .event = s_on_event, .ctx = e};
    return kl_job_run(job, &f->port, &rc, err);
}

static size_t s_records(kl_store_t *st, size_t *dups)
{
    char err[KL_ERRMSG_LEN];
    fx_recs_t c = {0};
    assert_int_equal(
        kl_store_foreach_record(st, NULL, NULL, fx_rec_hash, &c, err), KL_OK);
    kl_hashset_free(&c.h);
    *dups = c.dups;
    return c.n;
}

static kl_job_cfg_t s_cfg(int64_t global, int64_t per_task, int64_t batch)
{
    kl_job_cfg_t cfg;
    kl_job_cfg_default(&cfg);
    cfg.task.target = "sim/cpu"; /* the simulated agents' target */
    cfg.task.search.strategy = KL_STRATEGY_REPLAY;
    cfg.task.search.seed = 3;
    cfg.ts.max_trials_global = global;
    cfg.ts.max_trials_per_task = per_task;
    cfg.ts.trials_per_iter = batch;
    return cfg;
}

/* One task: exactly its cap, two rounds out at once; resumed with a larger
 * cap it continues; at its cap a third job is finished before it starts. */
static void test_job_op(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = fx_tune_new(2);
    kl_job_task_t task = {"matmul M=64 N=64 K=64", 1, false};
    kl_job_cfg_t cfg = s_cfg(40, 0, 8);
    kl_job_t *job = NULL;
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, f->st, err), KL_OK);
    assert_false(kl_job_finished(job));
    ev_t e = {0};
    assert_int_equal(s_run(job, f, &e, err), KL_OK);
    assert_int_equal(kl_task_trials(kl_job_task(job, 0)), 40);
    assert_int_equal(kl_ts_total_trials(kl_job_tasksched(job)), 40);
    assert_true(kl_job_finished(job));
    assert_int_equal(e.rounds, 5);
    assert_int_equal(e.spent, 40);
    assert_int_equal(e.ends, 1);
    assert_int_equal(e.max_out, 2); /* the next round went out early */
    kl_job_progress_t p;
    kl_job_progress(job, 0, &p);
    assert_int_equal(p.trials, 40);
    assert_int_equal(p.cap, 40);
    assert_true(p.done);
    kl_job_destroy(&job);
    size_t dups = 0;
    assert_int_equal(s_records(f->st, &dups), 40);
    assert_int_equal(dups, 0);

    cfg = s_cfg(56, 0, 8);
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, f->st, err), KL_OK);
    assert_int_equal(kl_task_restored(kl_job_task(job, 0)), 40);
    e = (ev_t){0};
    assert_int_equal(s_run(job, f, &e, err), KL_OK);
    assert_int_equal(kl_task_trials(kl_job_task(job, 0)), 56);
    assert_int_equal(e.spent, 16);
    kl_job_destroy(&job);
    assert_int_equal(s_records(f->st, &dups), 56);
    assert_int_equal(dups, 0);

    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, f->st, err), KL_OK);
    assert_true(kl_job_finished(job));
    kl_job_destroy(&job);
    fx_tune_free(f);
}

/* Records by condition: n[0] warm, n[1] cold, n[2] cold ones of key. */
typedef struct {
    uint8_t key[16];
    int64_t n[3];
} s_cond_count_t;

static int s_count_cond(const Kiln__TuningRecord *rec, void *arg)
{
    s_cond_count_t *c = arg;
    kl_cond_t k = kl_record_cond(rec);
    c->n[k]++;
    c->n[2] += k == KL_COND_COLD && rec->workload_key.len == 16 &&
               !memcmp(rec->workload_key.data, c->key, 16);
    return 0;
}

/* Three tasks, round-robin, one round at a time: the global cap is shared,
 * no task passes its own cap, every trial is one record; the task asked
 * to be cold is measured cold (its records say so), the others with the
 * job's warm evaluator. */
static void test_job_model(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = fx_tune_new(2);
    kl_job_task_t tasks[] = {{"matmul M=64 N=64 K=64", 1, false},
                             {"dense N=1 I=64 O=32 bias=1", 2, true},
                             {"matmul M=32 N=48 K=16", 1, false}};
    kl_job_cfg_t cfg = s_cfg(30, 12, 5);
    cfg.ts.kind = KL_TS_ROUND_ROBIN;
    kl_job_t *job = NULL;
    assert_int_equal(kl_job_new(&job, tasks, 3, &cfg, f->st, err), KL_OK);
    ev_t e = {0};
    assert_int_equal(s_run(job, f, &e, err), KL_OK);
    int64_t sum = 0;
    for (int i = 0; i < 3; i++) {
        int64_t n = kl_task_trials(kl_job_task(job, i));
        assert_true(n >= 5 && n <= 12);
        assert_int_equal(n, kl_ts_trials(kl_job_tasksched(job), i));
        assert_int_equal(kl_job_task_cap(job, i), 12);
        sum += n;
    }
    assert_int_equal(sum, 30);
    assert_int_equal(e.max_out, 1);
    assert_int_equal(e.spent, 30);
    s_cond_count_t cc = {0};
    memcpy(cc.key, kl_task_workload(kl_job_task(job, 1))->key, 16);
    kl_job_destroy(&job);
    size_t dups = 0;
    assert_int_equal(s_records(f->st, &dups), 30);
    assert_int_equal(dups, 0);
    assert_int_equal(
        kl_store_foreach_record(f->st, NULL, NULL, s_count_cond, &cc, err),
        KL_OK);
    assert_true(cc.n[1] >= 5);
    assert_int_equal(cc.n[2], cc.n[1]);
    assert_int_equal(cc.n[0] + cc.n[1], 30);
    fx_tune_free(f);
}

/* A stop after the first results: KL_ERR_CLOSED, and the store holds
 * exactly the trials the task counted (nothing committed is lost). */
static void test_job_stop(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = fx_tune_new(1);
    kl_job_task_t task = {"matmul M=64 N=64 K=64", 1, false};
    kl_job_cfg_t cfg = s_cfg(400, 0, 16);
    kl_job_t *job = NULL;
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, f->st, err), KL_OK);
    ev_t e = {.stop_at_first = true};
    assert_int_equal(s_run(job, f, &e, err), KL_ERR_CLOSED);
    assert_non_null(strstr(err, "interrupted"));
    int64_t n = kl_task_trials(kl_job_task(job, 0));
    assert_true(n >= 1 && n < 400);
    kl_job_destroy(&job);
    size_t dups = 0;
    assert_int_equal(s_records(f->st, &dups), (size_t)n);
    fx_tune_free(f);
}

/* No agent of the target: KL_ERR_TIMEOUT naming the target and where the
 * job waited; bad jobs are refused at creation. */
static void test_job_errors(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = fx_tune_new(0);
    kl_job_task_t task = {"matmul M=64 N=64 K=64", 1, false};
    kl_job_cfg_t cfg = s_cfg(8, 0, 8);
    kl_job_t *job = NULL;
    assert_int_equal(kl_job_new(&job, &task, 0, &cfg, f->st, err),
                     KL_ERR_INVAL);
    kl_job_task_t bad = {"matmul M=64 N=64", 1, false};
    assert_int_equal(kl_job_new(&job, &bad, 1, &cfg, f->st, err), KL_ERR_INVAL);
    assert_null(job);
    cfg.ts.trials_per_iter = 0;
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, f->st, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "trials-per-iter"));
    cfg = s_cfg(8, 0, 8);
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, f->st, err), KL_OK);
    kl_job_run_cfg_t rc = {.agent_wait_s = 0.3};
    assert_int_equal(kl_job_run(job, &f->port, &rc, err), KL_ERR_TIMEOUT);
    assert_non_null(strstr(err, kl_job_target(job)));
    assert_non_null(strstr(err, "tcp://127.0.0.1:"));
    kl_job_destroy(&job);
    fx_tune_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_op),
        cmocka_unit_test(test_job_model),
        cmocka_unit_test(test_job_stop),
        cmocka_unit_test(test_job_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
