/* kiln tune --model - tunes every task of a model: the task scheduler
 * (coordinator/tasksched) picks the next task and its batch, the task's
 * search (coordinator/search, kl_tune.h) proposes that many candidates, the
 * fleet measures them, the store records them, and the scheduler hears the
 * trials spent and the new best. The summary table follows every round.
 *
 * This file is called by tools/kiln_tune.c when --model is given (see
 * kiln_tune_model.h); it keeps its own option table. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_coord.h"
#include "kiln_tune_model.h"
#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_live.h"
#include "kl_log.h"
#include "kl_metrics.h"
#include "kl_model.h"
#include "kl_opt.h"
#include "kl_store.h"
#include "kl_target.h"
#include "kl_tasksched.h"
#include "kl_tune.h"
#include "kl_util.h"

#define RECV_MAX 256

static const kl_opt_t s_opts[] = {
    {"model", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME|FILE",
     "a built-in model (resnet18, resnet50, mobilenet_v2, bert_base) or a "
     "graph file (docs/models.md)"},
    {"scheduler", KL_OPT_STR, "gradient", KL_NOBOUNDS, "NAME",
     "task scheduler: gradient (Ansor's) or round-robin"},
    {"max-trials-global", KL_OPT_INT, NULL, 1, 1e12, "N",
     "hard cap on the trials of the whole job, records already in --db "
     "included (default: 1000 x the number of tasks)"},
    {"max-trials-per-task", KL_OPT_INT, "0", 0, 1e12, "N",
     "hard cap on each task (0: none beyond the global cap)"},
    {"trials-per-iter", KL_OPT_INT, "64", 1, 1e6, "K",
     "batch of one round of one task (the last batch is cut to fit a cap)"},
    {"alpha", KL_OPT_DOUBLE, "0.2", 0, 1, "A",
     "gradient: weight of the backward (history) term"},
    {"beta", KL_OPT_DOUBLE, "2", 1e-9, 1e9, "B",
     "gradient: a task may reach beta x its similar tasks' best speed"},
    {"window", KL_OPT_INT, "3", 1, 1e6, "DT",
     "gradient: backward window in rounds"},
    {"sched-eps", KL_OPT_DOUBLE, "0.05", 0, 1, "E",
     "gradient: probability of a random task instead of the best one"},
    {"early-stop-rounds", KL_OPT_INT, "0", 0, 1e9, "N",
     "a task whose best is no better after N of its rounds is done (0: "
     "never)"},
    {"summary-json", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "also write the summary as JSON here (after every round)"},
    {"target", KL_OPT_STR, "cpu", KL_NOBOUNDS, "TARGET",
     "task target: cpu (this machine's vector ISA), cpu/x86_64-avx512, ..."},
    {"strategy", KL_OPT_STR, "evolutionary", KL_NOBOUNDS, "NAME",
     "search strategy of every task: evolutionary or replay"},
    {"db", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "record store; a later run on it continues (records count toward the "
     "caps, restore each task's best, and are never measured again)"},
    {"seed", KL_OPT_INT, "0", 0, 9e18, "S",
     "seed of the searches and of the scheduler"},
    {"population", KL_OPT_INT, "512", 1, 1e6, "N",
     "evolutionary: population size"},
    {"generations", KL_OPT_INT, "4", 0, 1000, "N",
     "evolutionary: generations per batch"},
    {"mutate-prob", KL_OPT_DOUBLE, "0.85", 0, 1, "P",
     "evolutionary: probability that a child is mutated"},
    {"eps-greedy", KL_OPT_DOUBLE, "0.05", 0, 1, "P",
     "evolutionary: probability that a batch slot is a random sample"},
    {"init-measured-ratio", KL_OPT_DOUBLE, "0.2", 0, 1, "R",
     "evolutionary: share of the population taken from the best records"},
    {"init-min-unmeasured", KL_OPT_INT, "50", 0, 1e6, "N",
     "evolutionary: random samples in every initial population, at least"},
    {"model-min-rows", KL_OPT_INT, "64", 2, 1e9, "N",
     "results before the cost model is used (random scores until then)"},
    {"model-retrain-growth", KL_OPT_DOUBLE, "0.2", 0, 100, "G",
     "retrain the cost model when its data grew by this fraction"},
    {"model-rounds", KL_OPT_INT, "64", 1, 10000, "N",
     "boosting rounds of the cost model"},
    {"max-sample-tries", KL_OPT_INT, "1000", 1, 1e9, "N",
     "rejected samples per draw before the space counts as exhausted"},
    {"max-known-draws", KL_OPT_INT, "256", 1, 1e9, "N",
     "already-measured samples in a row before the space counts as "
     "exhausted"},
    {"number", KL_OPT_INT, "1", 1, 1e9, "N", "runs per sample"},
    {"repeat", KL_OPT_INT, "5", 1, 10000, "N", "samples per candidate"},
    {"min-repeat-ms", KL_OPT_INT, "50", 0, 1e6, "MS",
     "grow --number until one sample lasts this long"},
    {"timeout-ms", KL_OPT_INT, "10000", 1, 1e8, "MS",
     "limit for one candidate's whole run"},
    {"rtol", KL_OPT_DOUBLE, "1e-3", 0, 1, "X", "relative tolerance"},
    {"atol", KL_OPT_DOUBLE, "1e-4", 0, 1e9, "X", "absolute tolerance"},
    {"no-flush", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "do not flush the caches between samples"},
    {"data-seed", KL_OPT_INT, "1", 0, 9e18, "S", "seed of the input data"},
    KL_FLEET_OPTS{
        "simulate", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
        "local agents answer with synthetic latencies (for trying kiln "
        "out); the tasks' target becomes sim/TARGET, so that their records "
        "are never taken for measurements of TARGET"},
    {"quiet", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "no table after every round, only the final one"},
    KL_METRICS_OPTS,
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln tune --model NAME|FILE [--scheduler gradient|round-robin]\n"
    "                 [--max-trials-global N] [--max-trials-per-task N] "
    "[--trials-per-iter K]\n"
    "                 [--db DIR] [--target cpu] [fleet options]\n"
    "Tunes every task of a model. Caps are hard: the last batch is cut to "
    "fit,\nfailed candidates count as trials, records in --db count too. A "
    "task is done\nat its cap, when its design space is exhausted or when it "
    "stopped improving\n(--early-stop-rounds); the job ends when every task "
    "is done or the global\ncap is reached.\n"
    "Exit codes: 0 ok, 1 job failed, 2 usage.";

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

typedef struct {
    kl_opts_t *o;
    kl_model_t *model;
    kl_store_t *store;
    kl_fleet_t *fleet;
    kl_dispatch_t *disp;
    kl_task_t **tasks;
    int n;
    kl_ts_t *ts;
    int64_t global; /* the global cap */
    double agentless_since;
    kl_metrics_t *metrics; /* --http */
} job_t;

bool kiln_tune_model_wanted(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "--model") == 0 ||
            strncmp(argv[i], "--model=", 8) == 0)
            return true;
    }
    return false;
}

/* Binds the coordinator and, when asked, starts local agents. */
static int s_start(job_t *j, char *err)
{
    return kl_fleet_coordinator(j->o, "kiln tune",
                                kl_opts_bool(j->o, "simulate"), &j->fleet,
                                &j->disp, err);
}

static int s_task_config(const kl_opts_t *o, kl_task_cfg_t *c, char *err)
{
    kl_task_cfg_default(c);
    c->target = kl_opts_str(o, "target");
    if (kl_opts_bool(o, "simulate")) {
        /* Simulated results are keyed under a target of their own
         * (kl_target.h), never as measurements of the real one. */
        static char sim[160];
        c->target = kl_target_sim(c->target, sim, sizeof sim);
    }
    c->trials_per_iter = (int)kl_opts_int(o, "trials-per-iter");
    kl_search_cfg_t *s = &c->search;
    s->seed = (uint64_t)kl_opts_int(o, "seed");
    s->population = (int)kl_opts_int(o, "population");
    s->generations = (int)kl_opts_int(o, "generations");
    s->mutate_prob = kl_opts_double(o, "mutate-prob");
    s->eps_greedy = kl_opts_double(o, "eps-greedy");
    s->init_measured_ratio = kl_opts_double(o, "init-measured-ratio");
    s->init_min_unmeasured = (int)kl_opts_int(o, "init-min-unmeasured");
    s->model_min_rows = (int)kl_opts_int(o, "model-min-rows");
    s->model_retrain_growth = kl_opts_double(o, "model-retrain-growth");
    s->model_rounds = (int)kl_opts_int(o, "model-rounds");
    s->max_sample_tries = (int)kl_opts_int(o, "max-sample-tries");
    s->max_known_draws = (int)kl_opts_int(o, "max-known-draws");
    Kiln__Evaluator *e = &c->evaluator;
    e->number = (uint32_t)kl_opts_int(o, "number");
    e->repeat = (uint32_t)kl_opts_int(o, "repeat");
    e->min_repeat_ms = (uint32_t)kl_opts_int(o, "min-repeat-ms");
    e->timeout_ms = (uint32_t)kl_opts_int(o, "timeout-ms");
    e->rtol = kl_opts_double(o, "rtol");
    e->atol = kl_opts_double(o, "atol");
    e->flush_cache = !kl_opts_bool(o, "no-flush");
    e->seed = (uint64_t)kl_opts_int(o, "data-seed");
    return kl_strategy_parse(kl_opts_str(o, "strategy"), &c->search.strategy,
                             err);
}

static int s_sched_config(const kl_opts_t *o, int ntasks, kl_ts_cfg_t *c,
                          char *err)
{
    kl_ts_cfg_default(c);
    c->max_trials_global = kl_opts_given(o, "max-trials-global")
                               ? kl_opts_int(o, "max-trials-global")
                               : 1000 * (int64_t)ntasks;
    c->max_trials_per_task = kl_opts_int(o, "max-trials-per-task");
    c->trials_per_iter = kl_opts_int(o, "trials-per-iter");
    c->alpha = kl_opts_double(o, "alpha");
    c->beta = kl_opts_double(o, "beta");
    c->window = (int)kl_opts_int(o, "window");
    c->eps = kl_opts_double(o, "sched-eps");
    c->early_stop_rounds = (int)kl_opts_int(o, "early-stop-rounds");
    c->seed = (uint64_t)kl_opts_int(o, "seed") + 1;
    return kl_ts_kind_parse(kl_opts_str(o, "scheduler"), &c->kind, err);
}

/* Creates every task (restoring its records from the store) and the
 * scheduler, restored with the same records. */
static int s_setup(job_t *j, char *err)
{
    kl_task_cfg_t tc;
    kl_ts_cfg_t sc;
    j->n = kl_model_ntasks(j->model);
    int rc =
        s_task_config(j->o, &tc, err) ?: s_sched_config(j->o, j->n, &sc, err);
    if (rc)
        return rc;
    j->global = sc.max_trials_global;
    tc.max_trials =
        sc.max_trials_per_task ? sc.max_trials_per_task : sc.max_trials_global;
    j->tasks = kl_xcalloc((size_t)j->n, sizeof(kl_task_t *));
    kl_ts_task_t *desc = kl_xcalloc((size_t)j->n, sizeof(kl_ts_task_t));
    for (int i = 0; i < j->n && !rc; i++) {
        const kl_model_task_t *mt = kl_model_task(j->model, i);
        rc = kl_task_new(&j->tasks[i], mt->spec, &tc, j->store, err);
        desc[i] = (kl_ts_task_t){mt->w->name, mt->w->op_kind, mt->w->flop,
                                 (double)mt->weight};
    }
    if (!rc)
        rc = kl_ts_new(&j->ts, &sc, desc, j->n, err);
    free(desc);
    for (int i = 0; i < j->n && !rc; i++) {
        kl_task_t *t = j->tasks[i];
        if (kl_task_restored(t) > 0)
            rc = kl_ts_restore(j->ts, i, kl_task_restored(t), kl_task_best_s(t),
                               err);
        if (kl_task_exhausted(t))
            kl_ts_exhausted(j->ts, i);
    }
    return rc;
}

static void s_warn_unreached(job_t *j)
{
    int k = kl_ts_unreached(j->ts, NULL, 0);
    if (k == 0)
        return;
    int *idx = kl_xcalloc((size_t)k, sizeof(int));
    kl_ts_unreached(j->ts, idx, k);
    kl_buf_t b = {0};
    for (int i = 0; i < k; i++)
        kl_buf_printf(&b, "%s%d (%s)", i ? ", " : "", idx[i],
                      kl_model_task(j->model, idx[i])->w->name);
    kl_warn("the global cap (%lld) is smaller than what one round of every "
            "task needs; %d task%s may get no trial at all: %s",
            (long long)j->global, k, k > 1 ? "s" : "", b.data);
    kl_buf_free(&b);
    free(idx);
}

/* No results for a while: are there still agents? */
static int s_check_agents(job_t *j, kl_task_t *t, char *err)
{
    size_t agents = 0;
    kl_dispatch_agents(j->disp, kl_task_target(t), &agents, NULL);
    if (agents > 0) {
        j->agentless_since = 0;
        return KL_OK;
    }
    if (j->fleet && kl_fleet_running(j->fleet) == 0 &&
        !kl_opts_str(j->o, "listen"))
        return kl_seterr(err, KL_ERR_CLOSED,
                         "every local kiln-agent exited (see the log above)");
    double now = kl_now_s();
    if (j->agentless_since == 0)
        j->agentless_since = now;
    if (now - j->agentless_since > kl_opts_double(j->o, "agent-wait-s"))
        return kl_seterr(err, KL_ERR_TIMEOUT,
                         "no agent for target '%s' connected to %s within "
                         "%.0f s",
                         kl_task_target(t), kl_dispatch_endpoint(j->disp),
                         kl_opts_double(j->o, "agent-wait-s"));
    return KL_OK;
}

/* Receives results (up to 250 ms for the first) and feeds those of t. */
static int s_recv(job_t *j, kl_task_t *t, size_t *got, char *err)
{
    kl_dispatch_result_t *b[RECV_MAX];
    size_t n = 0, m = 0;
    if (kl_dispatch_recv(j->disp, &b[0], 250, NULL) == KL_OK) {
        n = 1;
        while (n < RECV_MAX &&
               kl_dispatch_recv(j->disp, &b[n], 0, NULL) == KL_OK)
            n++;
    }
    for (size_t i = 0; i < n; i++) {
        if (kl_task_owns(t, b[i]->request_id))
            b[m++] = b[i];
        else
            kl_dispatch_result_free(&b[i]);
    }
    *got = m;
    int rc = m ? kl_task_feed(t, b, m, err) : KL_OK;
    for (size_t i = 0; i < m; i++)
        kl_dispatch_result_free(&b[i]);
    kl_metrics_update(j->metrics, j->disp, j->tasks, (size_t)j->n, j->store,
                      false, false);
    return rc;
}

/* One round: up to batch candidates of task i, measured and fed. */
static int s_round(job_t *j, int i, int64_t batch, char *err)
{
    kl_task_t *t = j->tasks[i];
    int64_t before = kl_task_trials(t);
    size_t n = 0;
    uint64_t req = 0;
    int rc = kl_task_submit(t, j->disp, (int)batch, &n, &req, err);
    if (rc == KL_ERR_EXHAUSTED)
        return kl_ts_report(j->ts, i, 0, kl_task_best_s(t), err);
    if (rc)
        return rc;
    while (!rc && kl_task_in_flight(t) > 0) {
        if (s_stop) {
            kl_dispatch_cancel(j->disp, req, NULL);
            double until = kl_now_s() + 10;
            size_t got;
            while (kl_task_in_flight(t) > 0 && kl_now_s() < until &&
                   !s_recv(j, t, &got, err))
                ;
            return kl_seterr(err, KL_ERR_CLOSED, "interrupted");
        }
        size_t got = 0;
        rc = s_recv(j, t, &got, err);
        if (!rc && got == 0)
            rc = s_check_agents(j, t, err);
    }
    if (rc)
        return rc;
    int64_t spent = kl_task_trials(t) - before;
    if (spent > batch)
        spent = batch;
    return kl_ts_report(j->ts, i, spent, kl_task_best_s(t), err);
}

static void s_summary(job_t *j, FILE *f)
{
    kl_ts_row_t *rows = kl_xcalloc((size_t)j->n, sizeof(kl_ts_row_t));
    kl_ts_rows(j->ts, rows);
    kl_ts_print_table(f, rows, j->n);
    const char *path = kl_opts_str(j->o, "summary-json");
    FILE *jf = path ? fopen(path, "w") : NULL;
    if (path && !jf)
        kl_warn("--summary-json %s: cannot write it", path);
    if (jf) {
        kl_ts_print_json(jf, rows, j->n);
        fclose(jf);
    }
    free(rows);
}

/* On a terminal the task table is one block redrawn in place after every
 * round, with a progress bar (kl_live.h); elsewhere the round line and
 * the table are printed as they are. Returns whether it drew the block. */
static kl_live_t *s_live;

static bool s_live_round(job_t *j, int round, int i)
{
    if (!s_live)
        s_live = kl_live_new(stderr, KL_LIVE_AUTO, 0);
    if (!kl_live_is_block(s_live))
        return false;
    FILE *sink = fopen("/dev/null", "w"); /* --summary-json still written */
    if (sink) {
        s_summary(j, sink);
        fclose(sink);
    }
    kl_ts_row_t *rows = kl_xcalloc((size_t)j->n, sizeof(kl_ts_row_t));
    kl_ts_rows(j->ts, rows);
    char *head = kl_xasprintf("kiln tune: model %s, round %d: task %d (%s)",
                              kl_model_name(j->model), round, i,
                              kl_model_task(j->model, i)->w->name);
    kl_live_tasks(s_live, head, rows, j->n, kl_ts_total_trials(j->ts),
                  j->global, kl_ts_finished(j->ts));
    free(head);
    free(rows);
    return true;
}

static int s_loop(job_t *j, char *err)
{
    int rc = KL_OK, round = 0;
    int i;
    int64_t batch;
    while (!s_stop && (rc = kl_ts_next(j->ts, &i, &batch, err)) == KL_OK) {
        if (!j->disp && (rc = s_start(j, err)))
            return rc;
        if ((rc = s_round(j, i, batch, err)))
            return rc;
        round++;
        if (!kl_opts_bool(j->o, "quiet") && !s_live_round(j, round, i)) {
            fprintf(stderr,
                    "\nkiln tune: round %d: task %d (%s), %lld trials; "
                    "%lld of %lld in all\n",
                    round, i, kl_model_task(j->model, i)->w->name,
                    (long long)kl_ts_trials(j->ts, i),
                    (long long)kl_ts_total_trials(j->ts), (long long)j->global);
            s_summary(j, stderr);
        }
    }
    if (s_stop)
        return kl_seterr(err, KL_ERR_CLOSED, "interrupted");
    return rc == KL_ERR_EXHAUSTED ? KL_OK : rc;
}

static void s_job_free(job_t *j)
{
    kl_metrics_destroy(&j->metrics);
    for (int i = 0; j->tasks && i < j->n; i++)
        kl_task_destroy(&j->tasks[i]);
    free(j->tasks);
    kl_ts_destroy(&j->ts);
    kl_dispatch_destroy(&j->disp);
    kl_fleet_destroy(&j->fleet);
    kl_store_close(&j->store);
    kl_model_destroy(&j->model);
    kl_opts_free(&j->o);
}

int kiln_tune_model(int argc, char **argv)
{
    job_t j = {0};
    char err[KL_ERRMSG_LEN];
    if (kl_opts_parse(s_opts, argc, argv, &j.o, err) != KL_OK) {
        fprintf(stderr, "kiln tune: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(j.o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&j.o);
        return 0;
    }
    int rc = KL_OK;
    if (kl_opts_npos(j.o) > 0 || !kl_opts_str(j.o, "model"))
        rc = kl_seterr(err, KL_ERR_INVAL, "%s",
                       kl_opts_npos(j.o) ? "unexpected argument"
                                         : "--model NAME|FILE is required");
    if (!rc)
        rc = kl_model_load(kl_opts_str(j.o, "model"), &j.model, err);
    if (rc) {
        fprintf(stderr, "kiln tune: %s\n", err);
        kl_opts_free(&j.o);
        return 2;
    }
    kl_log_init("kiln tune");
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    const char *db = kl_opts_str(j.o, "db");
    if (db)
        rc = kl_store_open(&j.store, db, 0, err);
    if (!rc)
        rc = s_setup(&j, err);
    if (!rc) /* --http: live metrics (coordinator/metrics) */
        rc = kl_metrics_from_opts(&j.metrics, j.o, kl_model_name(j.model), db,
                                  err);
    if (rc == KL_ERR_INVAL || rc == KL_ERR_UNSUPPORTED) {
        fprintf(stderr, "kiln tune: %s\n", err);
        s_job_free(&j);
        return 2;
    }
    if (!rc) {
        fprintf(stderr,
                "kiln tune: model %s, %d tasks, %s scheduler, %lld trials "
                "already in the store\n",
                kl_model_name(j.model), j.n, kl_opts_str(j.o, "scheduler"),
                (long long)kl_ts_total_trials(j.ts));
        s_warn_unreached(&j);
        kl_metrics_update(j.metrics, j.disp, j.tasks, (size_t)j.n, j.store,
                          true, false);
        rc = s_loop(&j, err);
    }
    if (j.ts)
        kl_metrics_update(j.metrics, j.disp, j.tasks, (size_t)j.n, j.store,
                          true, true);
    if (j.ts) {
        printf("\n");
        s_summary(&j, stdout);
        fflush(stdout);
    }
    kl_metrics_linger(j.metrics, j.o, &s_stop);
    if (rc)
        fprintf(stderr, "kiln tune: %s\n", err);
    kl_live_destroy(&s_live);
    s_job_free(&j);
    return rc ? 1 : 0;
}
