/* Unit tests of coordinator/tune's task (kl_task.h) against a real
 * dispatch and a real store with made-up results: what counts as a trial,
 * resume (a second task restores the records and never proposes a
 * measured trace), only the records of the task's own condition restored
 * (not simulated, not unverified), and a simulated result recorded under
 * the simulated target, never valid nor best. The conductor is
 * job_test.c. */
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
#include "kl_store.h"
#include "kl_task.h"
#include "kl_test_tmp.h"
#include "kl_util.h"
#include "tune_fx.h"

/* Results for the n candidates of request req (ids first..first+n-1):
 * status st, latency from the id. */
static void s_feed_sim(kl_task_t *t, uint64_t req, uint64_t first, size_t n,
                       Kiln__Status st, const char *error, int expect,
                       bool simulated)
{
    char err[KL_ERRMSG_LEN];
    Kiln__MeasureResult *mr = kl_xcalloc(n, sizeof *mr);
    kl_dispatch_result_t *r = kl_xcalloc(n, sizeof *r);
    kl_dispatch_result_t **p = kl_xcalloc(n, sizeof *p);
    double *samples = kl_xcalloc(n, sizeof *samples);
    for (size_t i = 0; i < n; i++) {
        kiln__measure_result__init(&mr[i]);
        mr[i].status = st;
        mr[i].error = (char *)error;
        samples[i] = 1e-3 * (double)(1 + (first + i) % 7);
        mr[i].samples = &samples[i];
        mr[i].n_samples = st == KILN__STATUS__STATUS_OK;
        mr[i].number = 1;
        mr[i].simulated = simulated;
        r[i].result = &mr[i];
        r[i].request_id = req;
        r[i].candidate_id = first + i;
        r[i].agent = "agent-x";
        r[i].device_name = "cpu";
        p[i] = &r[i];
    }
    assert_int_equal(kl_task_feed(t, p, n, err), expect);
    if (expect == KL_ERR_RUNTIME)
        assert_non_null(strstr(err, "agent-x: reference kernel failed"));
    free(mr);
    free(r);
    free(p);
    free(samples);
}

static void s_feed(kl_task_t *t, uint64_t req, uint64_t first, size_t n,
                   Kiln__Status st, const char *error, int expect)
{
    s_feed_sim(t, req, first, n, st, error, expect, false);
}

/* Tasks against a real dispatch (no agents: candidates wait in its queue)
 * and a real store (fx_tune_new(0)), results made up: failures count, cancelled
 * and reference failures do not, a second task restores the records and never
 * proposes a measured trace. (Caps are the job's: test_job_*.) */
static void test_task_store(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = fx_tune_new(0);
    kl_store_t *st = f->st;
    kl_port_t port = f->port;
    kl_task_cfg_t cfg;
    kl_task_cfg_default(&cfg);
    cfg.search.strategy = KL_STRATEGY_REPLAY;
    cfg.search.seed = 1;
    kl_task_t *t = NULL;
    assert_int_equal(kl_task_new(&t, "matmul M=64 N=64 K=64", &cfg, st, err),
                     KL_OK);
    size_t n = 0;
    uint64_t req = 0;
    assert_int_equal(kl_task_submit(t, &port, 8, &n, &req, err), KL_OK);
    assert_int_equal(n, 8);
    assert_int_equal(kl_task_in_flight(t), 8);
    /* 3 OK, 2 wrong, 3 cancelled (not recorded, not counted). */
    s_feed(t, req, 1, 3, KILN__STATUS__STATUS_OK, "", KL_OK);
    s_feed(t, req, 4, 2, KILN__STATUS__STATUS_WRONG_RESULT, "mismatch", KL_OK);
    s_feed(t, req, 6, 3, KILN__STATUS__STATUS_CANCELLED, "", KL_OK);
    assert_int_equal(kl_task_trials(t), 5);
    assert_int_equal(kl_task_valid(t), 3);
    assert_int_equal(kl_task_in_flight(t), 0);
    assert_true(isfinite(kl_task_best_s(t)));
    /* A reference failure: not recorded, the job is told. */
    assert_int_equal(kl_task_submit(t, &port, 2, &n, &req, err), KL_OK);
    assert_int_equal(n, 2);
    s_feed(t, req, 9, 2, KILN__STATUS__STATUS_RUNTIME_ERROR,
           "reference kernel failed: timed out after 5 ms (killed)",
           KL_ERR_RUNTIME);
    assert_int_equal(kl_task_trials(t), 5);
    /* Two batches out at once, fed in either order. */
    assert_int_equal(kl_task_submit(t, &port, 8, &n, &req, err), KL_OK);
    assert_int_equal(n, 8);
    uint64_t req2 = 0;
    size_t n2 = 0;
    assert_int_equal(kl_task_submit(t, &port, 7, &n2, &req2, err), KL_OK);
    assert_int_equal(n2, 7);
    assert_int_equal(kl_task_in_flight(t), 15);
    s_feed(t, req2, 19, 7, KILN__STATUS__STATUS_TIMEOUT, "slow", KL_OK);
    s_feed(t, req, 11, 8, KILN__STATUS__STATUS_OK, "", KL_OK);
    assert_int_equal(kl_task_trials(t), 20);
    kl_task_destroy(&t);

    /* A second task on the same store: 20 restored; the same seed would
     * draw the same traces, yet it measures 16 new ones. */
    cfg.search.seed = 1;
    assert_int_equal(kl_task_new(&t, "matmul M=64 N=64 K=64", &cfg, st, err),
                     KL_OK);
    assert_int_equal(kl_task_restored(t), 20);
    assert_int_equal(kl_task_valid(t), 11);
    assert_int_equal(kl_task_submit(t, &port, 8, &n, &req, err), KL_OK);
    s_feed(t, req, 1, n, KILN__STATUS__STATUS_OK, "", KL_OK);
    assert_int_equal(kl_task_submit(t, &port, 8, &n, &req, err), KL_OK);
    s_feed(t, req, 9, n, KILN__STATUS__STATUS_OK, "", KL_OK);
    assert_int_equal(kl_task_trials(t), 36);
    kl_task_destroy(&t);
    fx_recs_t c = {0};
    assert_int_equal(
        kl_store_foreach_record(st, NULL, NULL, fx_rec_hash, &c, err), KL_OK);
    assert_int_equal(c.n, 36);
    assert_int_equal(c.dups, 0);
    assert_int_equal(c.ok, 27);
    kl_hashset_free(&c.h);
    fx_tune_free(f);
}

/* One JSON line of a record of w on target: a trace sampled with seed,
 * status OK, the given median, and `extra` fields (",..." or ""). */
static char *s_record_line(const kl_workload_t *w, const char *target,
                           uint64_t seed, double median, const char *extra)
{
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    kl_trace_t *tr = NULL;
    kl_rng_t r;
    kl_rng_seed(&r, seed);
    assert_int_equal(kl_space_for_target(target, w, &sp, err), KL_OK);
    assert_int_equal(kl_space_sample(sp, &r, &tr, NULL, 0, NULL, err), KL_OK);
    uint8_t *buf = NULL, hash[16];
    size_t len = 0;
    kl_trace_to_proto(tr, &buf, &len);
    kl_trace_hash(tr, hash);
    char *hex = kl_xmalloc(2 * len + 1), key[33], th[33];
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", buf[i]);
    hex[2 * len] = 0;
    kl_hex128(w->key, key);
    kl_hex128(hash, th);
    char *line = kl_xasprintf(
        "{\"type\":\"record\",\"workload_key\":\"%s\",\"target\":\"%s\","
        "\"status\":\"STATUS_OK\",\"median_s\":%.17g,\"samples\":[%.17g],"
        "\"trace\":\"%s\",\"trace_hash\":\"%s\"%s}\n",
        key, target, median, median, hex, th, extra);
    free(hex);
    free(buf);
    kl_trace_free(&tr);
    kl_space_destroy(&sp);
    return line;
}

static void s_import(kl_store_t *st, const char *text)
{
    char err[KL_ERRMSG_LEN];
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    int rc = kl_store_import_jsonl(st, f, NULL, err);
    if (rc)
        fail_msg("import: %s", err);
    fclose(f);
}

/* A task restores only the records that are its trials: measurements
 * (not simulated, not unverified) of its own condition. The others never
 * count, never train the model and are never its best, however fast. */
static void test_task_restore_own_condition(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = fx_tune_new(0);
    kl_store_t *st = f->st;
    const char *op = "matmul M=64 N=64 K=64";
    const char *tg = "cpu/x86_64-avx512";
    kl_workload_t *w = NULL;
    assert_int_equal(kl_workload_from_string(op, &w, err), KL_OK);
    const char *cold = ",\"evaluator\":{\"number\":1,\"repeat\":5,"
                       "\"min_repeat_ms\":0,\"flush_cache\":true}";
    const char *warm = ",\"evaluator\":{\"number\":1,\"repeat\":5,"
                       "\"min_repeat_ms\":50,\"flush_cache\":true}";
    const char *unverified = ",\"evaluator\":{\"number\":1,\"repeat\":5,"
                             "\"min_repeat_ms\":50,\"flush_cache\":true,"
                             "\"skip_verify\":true}";
    char *lines[5] = {
        s_record_line(w, tg, 1, 5e-3, ""), /* old: warm by default */
        s_record_line(w, tg, 2, 1e-6, ",\"simulated\":true"),
        s_record_line(w, tg, 3, 1e-4, cold),
        s_record_line(w, tg, 4, 1e-5, unverified),
        s_record_line(w, tg, 5, 4e-3, warm),
    };
    kl_buf_t text = {0};
    for (int i = 0; i < 5; i++) {
        kl_buf_puts(&text, lines[i]);
        free(lines[i]);
    }
    s_import(st, text.data);
    kl_buf_free(&text);

    kl_task_cfg_t cfg;
    kl_task_cfg_default(&cfg);
    cfg.target = tg;
    cfg.search.strategy = KL_STRATEGY_REPLAY;
    kl_task_t *t = NULL;
    assert_int_equal(kl_task_new(&t, op, &cfg, st, err), KL_OK);
    assert_int_equal(kl_task_restored(t), 2);
    assert_int_equal(kl_task_valid(t), 2);
    assert_true(kl_task_best_s(t) == 4e-3);
    assert_int_equal(kl_task_best_seq(t), 5);
    kl_task_destroy(&t);

    cfg.evaluator.min_repeat_ms = 0; /* cold: flushed, one run a sample */
    assert_int_equal(kl_task_new(&t, op, &cfg, st, err), KL_OK);
    assert_int_equal(kl_task_restored(t), 1);
    assert_true(kl_task_best_s(t) == 1e-4);
    assert_int_equal(kl_task_best_seq(t), 3);
    kl_task_destroy(&t);

    kl_workload_free(&w);
    fx_tune_free(f);
}

typedef struct {
    size_t n, simulated, with_eval;
    const char *target;
} where_t;

static int s_where(const Kiln__TuningRecord *r, void *arg)
{
    where_t *c = arg;
    c->n++;
    c->simulated += r->simulated;
    c->target = strcmp(r->target, "cpu/x86_64-avx512") ? "other" : "real";
    return 0;
}

/* A simulated result (here from an agent that names the real target, as
 * agents did before simulated targets) is recorded under the simulated
 * twin of the task's target: it counts as a trial spent, never as a valid
 * result or the task's best, and a resumed task does not restore it. */
static void test_task_simulated_result(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = fx_tune_new(0);
    kl_store_t *st = f->st;
    kl_port_t port = f->port;
    kl_task_cfg_t cfg;
    kl_task_cfg_default(&cfg);
    cfg.target = "cpu/x86_64-avx512";
    cfg.search.strategy = KL_STRATEGY_REPLAY;
    const char *op = "matmul M=64 N=64 K=64";
    kl_task_t *t = NULL;
    assert_int_equal(kl_task_new(&t, op, &cfg, st, err), KL_OK);
    size_t n = 0;
    uint64_t req = 0;
    assert_int_equal(kl_task_submit(t, &port, 4, &n, &req, err), KL_OK);
    assert_int_equal(n, 4);
    s_feed_sim(t, req, 1, 4, KILN__STATUS__STATUS_OK, "", KL_OK, true);
    assert_int_equal(kl_task_trials(t), 4);
    assert_int_equal(kl_task_valid(t), 0);
    assert_null(kl_task_best_trace(t));
    assert_false(isfinite(kl_task_best_s(t)));
    const uint8_t *key = kl_task_workload(t)->key;
    size_t on_real = 9;
    assert_int_equal(
        kl_store_count(st, key, "cpu/x86_64-avx512", &on_real, err), KL_OK);
    assert_int_equal(on_real, 0);
    where_t c = {0};
    assert_int_equal(kl_store_foreach_record(st, key, NULL, s_where, &c, err),
                     KL_OK);
    assert_int_equal(c.n, 4);
    assert_int_equal(c.simulated, 4);
    assert_string_equal(c.target, "other");
    kl_task_destroy(&t);
    assert_int_equal(kl_task_new(&t, op, &cfg, st, err), KL_OK);
    assert_int_equal(kl_task_restored(t), 0);
    kl_task_destroy(&t);
    fx_tune_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_store),
        cmocka_unit_test(test_task_restore_own_condition),
        cmocka_unit_test(test_task_simulated_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
