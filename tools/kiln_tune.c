/* kiln tune - tunes one operator on a local fleet (agents started here) or
 * on remote agents (--listen), recording every result in the store (--db)
 * and continuing from what the store holds. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_coord.h"
#include "kiln_cmds.h"
#include "kiln_tune_model.h"
#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_live.h"
#include "kl_log.h"
#include "kl_metrics.h"
#include "kl_opt.h"
#include "kl_store.h"
#include "kl_target.h"
#include "kl_tune.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"op", KL_OPT_STR, NULL, KL_NOBOUNDS, "TEXT",
     "the workload: \"matmul M=1024 N=1024 K=1024\", \"conv2d N=1 C=64 ...\" "
     "or an expression (kiln's workload language)"},
    {"target", KL_OPT_STR, "cpu", KL_NOBOUNDS, "TARGET",
     "task target: cpu (this machine's vector ISA), cpu/x86_64-avx512, ..., "
     "cuda/sm_90 (a GPU's exact arch; local agents get --device cuda:all)"},
    {"strategy", KL_OPT_STR, "evolutionary", KL_NOBOUNDS, "NAME",
     "search strategy: evolutionary or replay"},
    {"max-trials-per-task", KL_OPT_INT, "1000", 1, 1e9, "N",
     "hard cap on the trials of this task, records already in --db "
     "included; a failed candidate counts as a trial"},
    {"trials-per-iter", KL_OPT_INT, "64", 1, 1e6, "K",
     "candidates per batch (the last batch is cut to fit the cap)"},
    {"db", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "record store: results are committed per batch; a later run on it "
     "continues (records count, seed the search, are never re-measured)"},
    {"seed", KL_OPT_INT, "0", 0, 9e18, "S", "seed of the search"},
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
    {"source-out", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "write the best kernel's source here (default: "
     "DB/sources/NAME.TARGET.c, or ./NAME.TARGET.c without --db; .cu for "
     "a cuda target)"},
    KL_FLEET_OPTS{
        "simulate", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
        "local agents answer with synthetic latencies (for trying kiln out); "
        "the task's target becomes sim/TARGET, so that its records are "
        "never taken for measurements of TARGET"},
    {"quiet", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "no progress lines, only the result"},
    KL_METRICS_OPTS,
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln tune --op TEXT [--target cpu] [--strategy evolutionary|"
    "replay]\n"
    "                 [--max-trials-per-task N] [--trials-per-iter K] "
    "[--db DIR] [fleet options]\n"
    "Tunes one operator: proposes schedules, measures them on kiln agents, "
    "records every result,\nand prints the best latency, its trace and where "
    "its source is.\n"
    "Exit codes: 0 ok, 1 job failed, 2 usage, 69 no CUDA device for a "
    "cuda target's local agents.\n"
    "A whole model: kiln tune --model NAME|FILE ... (see kiln tune --model "
    "resnet18 --help).";

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

typedef struct {
    kl_opts_t *o;
    kl_store_t *store;
    kl_fleet_t *fleet;
    kl_dispatch_t *disp;
    kl_task_t *task;
    double last_print;
    kl_metrics_t *metrics; /* --http */
} job_t;

static void s_fmt_time(double s, char *buf, size_t n)
{
    if (s < 0 || !isfinite(s))
        snprintf(buf, n, "?");
    else if (s < 120)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 7200)
        snprintf(buf, n, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else
        snprintf(buf, n, "%.1fh", s / 3600);
}

/* On a terminal the progress is one block redrawn in place (kl_live.h);
 * elsewhere it stays the plain lines of s_progress. */
static kl_live_t *s_live;

static void s_progress(void *ctx, const kl_tune_progress_t *p)
{
    job_t *j = ctx;
    kl_metrics_update(j->metrics, j->disp, &j->task, 1, j->store, false, false);
    double now = kl_now_s();
    if (kl_opts_bool(j->o, "quiet") || (!p->done && now - j->last_print < 1))
        return;
    j->last_print = now;
    if (!s_live)
        s_live = kl_live_new(stderr, KL_LIVE_AUTO, 0);
    if (kl_live_is_block(s_live)) {
        kl_live_tune(s_live, kl_task_workload(j->task)->name, p);
        return;
    }
    char el[32], eta[32], best[64] = "no valid candidate yet";
    s_fmt_time(p->elapsed_s, el, sizeof el);
    s_fmt_time(p->eta_s, eta, sizeof eta);
    if (isfinite(p->best_s))
        snprintf(best, sizeof best, "best %.2f GFLOP/s (%.2f us)", p->gflops,
                 p->best_s * 1e6);
    fprintf(stderr,
            "kiln tune: trials %lld/%lld (%lld valid, %lld restored, %lld "
            "in flight)  %s  elapsed %s  ETA %s\n",
            (long long)p->trials, (long long)p->cap, (long long)p->valid,
            (long long)p->restored, (long long)p->in_flight, best, el,
            p->done ? "-" : eta);
}

static bool s_alive(void *ctx)
{
    job_t *j = ctx;
    return !j->fleet || kl_fleet_running(j->fleet) > 0 ||
           kl_opts_str(j->o, "listen");
}

/* Binds the coordinator and, when asked, starts local agents. */
static int s_start(job_t *j, char *err)
{
    return kl_fleet_coordinator(j->o, "kiln tune",
                                kl_opts_bool(j->o, "simulate"), &j->fleet,
                                &j->disp, err);
}

static int s_config(const kl_opts_t *o, kl_task_cfg_t *c, char *err)
{
    kl_task_cfg_default(c);
    c->target = kl_opts_str(o, "target");
    if (kl_opts_bool(o, "simulate")) {
        /* Simulated results are keyed under a target of their own
         * (kl_target.h), never as measurements of the real one. */
        static char sim[160];
        c->target = kl_target_sim(c->target, sim, sizeof sim);
    }
    c->max_trials = kl_opts_int(o, "max-trials-per-task");
    c->trials_per_iter = (int)kl_opts_int(o, "trials-per-iter");
    kl_search_cfg_t *s = &c->search;
    int rc = kl_strategy_parse(kl_opts_str(o, "strategy"), &s->strategy, err);
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
    return rc;
}

/* Where the best source goes; heap string. */
static char *s_source_path(const job_t *j)
{
    const char *given = kl_opts_str(j->o, "source-out");
    if (given)
        return kl_xstrdup(given);
    const kl_workload_t *w = kl_task_workload(j->task);
    char *tg = kl_xstrdup(kl_task_target(j->task));
    for (char *p = tg; *p; p++)
        if (*p == '/')
            *p = '_';
    const char *db = kl_opts_str(j->o, "db");
    const char *ext =
        strncmp(kl_target_base(kl_task_target(j->task)), "cuda", 4) ? "c"
                                                                    : "cu";
    char *path = db ? kl_xasprintf("%s/sources/%s.%s.%s", db, w->name, tg, ext)
                    : kl_xasprintf("%s.%s.%s", w->name, tg, ext);
    free(tg);
    return path;
}

static int s_report(job_t *j, char *err)
{
    kl_task_t *t = j->task;
    const kl_workload_t *w = kl_task_workload(t);
    const kl_trace_t *best = kl_task_best_trace(t);
    printf("workload   %s (%s)\n", w->name, kl_task_target(t));
    printf("trials     %lld (%lld valid, %lld restored from the store)%s\n",
           (long long)kl_task_trials(t), (long long)kl_task_valid(t),
           (long long)kl_task_restored(t),
           kl_task_exhausted(t) ? "; design space exhausted" : "");
    if (!best) {
        printf("best       none: no candidate was verified\n");
        return KL_OK;
    }
    double b = kl_task_best_s(t);
    printf("best       %.3f us, %.2f GFLOP/s (record seq %llu)%s\n", b * 1e6,
           w->flop / b / 1e9, (unsigned long long)kl_task_best_seq(t),
           kl_target_is_sim(kl_task_target(t)) ? ", simulated" : "");
    char *text = kl_trace_to_text(best);
    printf("trace\n%s", text);
    if (text[0] && text[strlen(text) - 1] != '\n')
        printf("\n");
    free(text);
    char *src = NULL, *path = s_source_path(j);
    int rc = kl_task_source(t, best, &src, err);
    if (!rc && kl_opts_str(j->o, "db") && !kl_opts_given(j->o, "source-out")) {
        char *dir = kl_xasprintf("%s/sources", kl_opts_str(j->o, "db"));
        rc = kl_mkdirs(dir, err);
        free(dir);
    }
    if (!rc)
        rc = kl_write_file(path, src, strlen(src), err);
    if (!rc)
        printf("source     %s\n", path);
    free(src);
    free(path);
    fflush(stdout);
    return rc;
}

static void s_job_free(job_t *j)
{
    kl_metrics_destroy(&j->metrics);
    kl_task_destroy(&j->task);
    kl_dispatch_destroy(&j->disp);
    kl_fleet_destroy(&j->fleet);
    kl_store_close(&j->store);
    kl_opts_free(&j->o);
}

int kiln_cmd_tune(int argc, char **argv)
{
    /* A whole model: tools/kiln_tune_model.c (its own options). */
    if (kiln_tune_model_wanted(argc, argv))
        return kiln_tune_model(argc, argv);
    job_t j = {0};
    char err[KL_ERRMSG_LEN];
    if (kl_opts_parse(s_opts, argc, argv, &j.o, err) != KL_OK) {
        fprintf(stderr, "kiln tune: %s\n", err);
        return 2;
    }
    if (kl_opts_help_asked(j.o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&j.o);
        return 0;
    }
    kl_task_cfg_t cfg;
    int rc = KL_OK;
    if (!kl_opts_str(j.o, "op") || kl_opts_npos(j.o) > 0)
        rc = kl_seterr(err, KL_ERR_INVAL, "%s",
                       kl_opts_npos(j.o) ? "unexpected argument"
                                         : "--op TEXT is required");
    if (!rc)
        rc = s_config(j.o, &cfg, err);
    if (rc) {
        fprintf(stderr, "kiln tune: %s\n%s\n", err, s_usage);
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
        rc = kl_task_new(&j.task, kl_opts_str(j.o, "op"), &cfg, j.store, err);
    if (!rc) /* --http: live metrics (coordinator/metrics) */
        rc = kl_metrics_from_opts(&j.metrics, j.o,
                                  kl_task_workload(j.task)->name, db, err);
    if (rc == KL_ERR_INVAL || rc == KL_ERR_UNSUPPORTED) {
        fprintf(stderr, "kiln tune: %s\n", err);
        s_job_free(&j);
        return 2;
    }
    if (!rc && kl_task_restored(j.task) > 0)
        fprintf(stderr,
                "kiln tune: %lld records of %s on %s restored from %s\n",
                (long long)kl_task_restored(j.task),
                kl_task_workload(j.task)->name, kl_task_target(j.task), db);
    if (!rc && !kl_task_done(j.task))
        rc = s_start(&j, err);
    if (!rc && !kl_task_done(j.task)) {
        kl_tune_run_cfg_t rcfg = {.agent_wait_s =
                                      kl_opts_double(j.o, "agent-wait-s"),
                                  .stop = &s_stop,
                                  .progress = s_progress,
                                  .ctx = &j,
                                  .alive = s_alive};
        kl_metrics_update(j.metrics, j.disp, &j.task, 1, j.store, true, false);
        rc = kl_tune_run(j.task, j.disp, &rcfg, err);
    }
    if (j.task)
        kl_metrics_update(j.metrics, j.disp, &j.task, 1, j.store, true, true);
    char rerr[KL_ERRMSG_LEN];
    if (j.task && s_report(&j, rerr))
        fprintf(stderr, "kiln tune: %s\n", rerr);
    kl_metrics_linger(j.metrics, j.o, &s_stop);
    /* The local CUDA agents said "no such device" (kiln-agent exits 69). */
    bool no_dev = rc && j.fleet && kl_fleet_exit_code(j.fleet) == 69;
    if (no_dev)
        fprintf(stderr,
                "kiln tune: no CUDA device: the local kiln-agent (--device "
                "cuda:all) exited 69 (no GPU or no driver here: see its "
                "message above); run agents on a GPU machine with --listen\n");
    else if (rc)
        fprintf(stderr, "kiln tune: %s\n", err);
    kl_live_destroy(&s_live);
    s_job_free(&j);
    return no_dev ? 69 : rc ? 1 : 0;
}
