/* kl_job.c - the tuning conductor: the scheduler hands out rounds, the
 * tasks propose and commit, the port moves candidates and results. */
#include "kl_job.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_eval.h"
#include "kl_log.h"
#include "kl_util.h"

#define RECV_MAX 256
/* How long a stop waits for the answers of cancelled candidates. */
#define DRAIN_S 10.0

/* A round out: its task, its request and the results still expected. */
typedef struct {
    int task;
    uint64_t request;
    size_t left;
    int64_t spent; /* trials recorded so far */
} round_t;

struct kl_job_s {
    kl_job_cfg_t cfg;
    kl_store_t *store;
    kl_task_t **tasks;        /* NULL for a proposer's task */
    kl_job_proposer_t *props; /* every task's calls: a kl_task's or given */
    double *flop;             /* per task, for the progress */
    int n;
    kl_ts_t *ts;
    /* kl_job_run's state. */
    const kl_port_t *port;
    const kl_job_run_cfg_t *run;
    round_t rounds[KL_TS_MAX_DEPTH];
    int nrounds, ended;
    double t0, no_agent_since;
    int64_t *fed; /* results fed by this run, per task */
};

void kl_job_cfg_default(kl_job_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    kl_task_cfg_default(&cfg->task);
    kl_ts_cfg_default(&cfg->ts);
    cfg->ts.depth = 0;
}

int kl_job_cfg_from_opts(const kl_opts_t *o, int64_t max_trials_global,
                         int64_t max_trials_per_task, kl_job_cfg_t *c,
                         char *err)
{
    kl_job_cfg_default(c);
    c->task.target = kl_opts_str(o, "target");
    kl_eval_from_opts(o, &c->task.evaluator);
    int rc = kl_search_cfg_from_opts(o, &c->task.search, err);
    if (!rc)
        rc = kl_ts_cfg_from_opts(o, &c->ts, err);
    c->ts.trials_per_iter = kl_opts_int(o, "trials-per-iter");
    c->ts.max_trials_global = max_trials_global;
    c->ts.max_trials_per_task = max_trials_per_task;
    c->ts.seed = c->task.search.seed + 1;
    return rc;
}

/* ---- a task's calls ------------------------------------------------------ */

/* A kl_task_t as a proposer: the job calls every task the same way. */
static int s_task_submit(void *ctx, const kl_port_t *port, int max, size_t *n,
                         uint64_t *request_id, char *err)
{
    return kl_task_submit(ctx, port, max, n, request_id, err);
}

static int s_task_feed(void *ctx, kl_dispatch_result_t **res, size_t n,
                       char *err)
{
    return kl_task_feed(ctx, res, n, err);
}

static int64_t s_task_trials(const void *ctx)
{
    return kl_task_trials(ctx);
}

static int64_t s_task_in_flight(const void *ctx)
{
    return kl_task_in_flight(ctx);
}

static int64_t s_task_valid(const void *ctx)
{
    return kl_task_valid(ctx);
}

static double s_task_best_s(const void *ctx)
{
    return kl_task_best_s(ctx);
}

static kl_job_proposer_t s_task_proposer(kl_task_t *t)
{
    return (kl_job_proposer_t){.ctx = t,
                               .submit = s_task_submit,
                               .feed = s_task_feed,
                               .trials = s_task_trials,
                               .in_flight = s_task_in_flight,
                               .valid = s_task_valid,
                               .best_s = s_task_best_s};
}

static int64_t s_trials(const kl_job_t *j, int i)
{
    return j->props[i].trials(j->props[i].ctx);
}

static int64_t s_task_out(const kl_job_t *j, int i)
{
    return j->props[i].in_flight(j->props[i].ctx);
}

static double s_best_s(const kl_job_t *j, int i)
{
    return j->props[i].best_s(j->props[i].ctx);
}

/* ---- creation ------------------------------------------------------------ */

static kl_job_t *s_alloc(const kl_job_cfg_t *cfg, kl_store_t *store, int n)
{
    kl_job_t *j = kl_xcalloc(1, sizeof *j);
    j->cfg = *cfg;
    j->store = store;
    j->n = n;
    j->tasks = kl_xcalloc((size_t)n, sizeof *j->tasks);
    j->props = kl_xcalloc((size_t)n, sizeof *j->props);
    j->flop = kl_xcalloc((size_t)n, sizeof *j->flop);
    j->fed = kl_xcalloc((size_t)n, sizeof *j->fed);
    return j;
}

/* The scheduler of the job's n tasks, desc[i] naming task i to it. */
static int s_new_ts(kl_job_t *j, const kl_ts_task_t *desc, char *err)
{
    kl_ts_cfg_t sc = j->cfg.ts;
    if (sc.depth == 0)
        sc.depth = j->n == 1 ? 2 : 1;
    for (int i = 0; i < j->n; i++)
        j->flop[i] = desc[i].flop;
    return kl_ts_new(&j->ts, &sc, desc, j->n, err);
}

int kl_job_new(kl_job_t **out, const kl_job_task_t *tasks, int n,
               const kl_job_cfg_t *cfg, kl_store_t *store, char *err)
{
    if (n < 1)
        return kl_seterr(err, KL_ERR_INVAL, "job: no task");
    kl_job_t *j = s_alloc(cfg, store, n);
    int rc = KL_OK;
    for (int i = 0; i < n && !rc; i++) {
        kl_task_cfg_t tc = cfg->task;
        if (tasks[i].cold)
            kl_eval_cold(&tc.evaluator);
        rc = kl_task_new(&j->tasks[i], tasks[i].spec, &tc, store, err);
        if (!rc)
            j->props[i] = s_task_proposer(j->tasks[i]);
    }
    if (!rc) {
        kl_ts_task_t *desc = kl_xcalloc((size_t)n, sizeof *desc);
        for (int i = 0; i < n; i++) {
            const kl_workload_t *w = kl_task_workload(j->tasks[i]);
            desc[i] =
                (kl_ts_task_t){w->name, w->op_kind, w->flop, tasks[i].weight};
        }
        rc = s_new_ts(j, desc, err);
        free(desc);
    }
    for (int i = 0; i < n && !rc; i++) {
        kl_task_t *t = j->tasks[i];
        if (kl_task_restored(t) > 0)
            rc = kl_ts_restore(j->ts, i, kl_task_restored(t), kl_task_best_s(t),
                               err);
        if (kl_task_exhausted(t))
            kl_ts_exhausted(j->ts, i);
    }
    if (rc) {
        kl_job_destroy(&j);
        return rc;
    }
    *out = j;
    return KL_OK;
}

int kl_job_new_proposer(kl_job_t **out, const kl_job_proposer_t *p,
                        const kl_ts_task_t *desc, const kl_job_cfg_t *cfg,
                        char *err)
{
    kl_job_t *j = s_alloc(cfg, NULL, 1);
    j->props[0] = *p;
    int rc = s_new_ts(j, desc, err);
    if (rc) {
        kl_job_destroy(&j);
        return rc;
    }
    *out = j;
    return KL_OK;
}

void kl_job_destroy(kl_job_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_job_t *j = *self_p;
    for (int i = 0; j->tasks && i < j->n; i++)
        kl_task_destroy(&j->tasks[i]);
    free(j->tasks);
    free(j->props);
    free(j->flop);
    free(j->fed);
    kl_ts_destroy(&j->ts);
    free(j);
    *self_p = NULL;
}

/* ---- accessors ----------------------------------------------------------- */

int kl_job_ntasks(const kl_job_t *j)
{
    return j->n;
}

kl_task_t *kl_job_task(const kl_job_t *j, int i)
{
    return j->tasks[i];
}

const kl_ts_t *kl_job_tasksched(const kl_job_t *j)
{
    return j->ts;
}

const char *kl_job_target(const kl_job_t *j)
{
    return j->tasks[0] ? kl_task_target(j->tasks[0]) : j->cfg.task.target;
}

kl_store_t *kl_job_store(const kl_job_t *j)
{
    return j->store;
}

int64_t kl_job_task_cap(const kl_job_t *j, int i)
{
    (void)i;
    int64_t per = j->cfg.ts.max_trials_per_task;
    int64_t all = j->cfg.ts.max_trials_global;
    return per && per < all ? per : all;
}

bool kl_job_task_done(const kl_job_t *j, int i)
{
    return kl_ts_task_state(j->ts, i) != KL_TS_RUNNING || kl_job_finished(j);
}

bool kl_job_finished(const kl_job_t *j)
{
    return kl_ts_finished(j->ts);
}

void kl_job_progress(const kl_job_t *j, int i, kl_job_progress_t *p)
{
    const kl_job_proposer_t *t = &j->props[i];
    *p = (kl_job_progress_t){
        .trials = t->trials(t->ctx),
        .cap = kl_job_task_cap(j, i),
        .restored = j->tasks[i] ? kl_task_restored(j->tasks[i]) : 0,
        .in_flight = t->in_flight(t->ctx),
        .valid = t->valid(t->ctx),
        .best_s = t->best_s(t->ctx),
        .elapsed_s = j->t0 > 0 ? kl_now_s() - j->t0 : 0,
        .eta_s = -1,
        .done = kl_job_task_done(j, i) && t->in_flight(t->ctx) == 0};
    if (j->fed[i] > 0 && !p->done)
        p->eta_s =
            (double)(p->cap - p->trials) * p->elapsed_s / (double)j->fed[i];
    double flop = j->flop[i];
    p->gflops =
        isfinite(p->best_s) && p->best_s > 0 ? flop / p->best_s / 1e9 : 0;
}

/* ---- the loop ------------------------------------------------------------ */

static void s_event(kl_job_t *j, kl_job_event_kind kind, int task,
                    int64_t spent)
{
    if (!j->run->event)
        return;
    kl_job_event_t ev = {
        .kind = kind, .task = task, .round = j->ended, .spent = spent};
    j->run->event(j->run->ctx, j, &ev);
}

static round_t *s_round_of(kl_job_t *j, uint64_t request)
{
    for (int k = 0; k < j->nrounds; k++)
        if (j->rounds[k].request == request)
            return &j->rounds[k];
    return NULL;
}

/* Reports a round of task i that spent `spent` trials to the scheduler. */
static int s_report(kl_job_t *j, int i, int64_t spent, char *err)
{
    int rc = kl_ts_report(j->ts, i, spent, s_best_s(j, i), err);
    if (!rc) {
        j->ended++;
        s_event(j, KL_JOB_ROUND, i, spent);
    }
    return rc;
}

/* Forgets the round at k and reports it. */
static int s_end_round(kl_job_t *j, int k, char *err)
{
    round_t r = j->rounds[k];
    for (; k + 1 < j->nrounds; k++)
        j->rounds[k] = j->rounds[k + 1];
    j->nrounds--;
    return s_report(j, r.task, r.spent, err);
}

/* Hands out rounds while the scheduler has one: the task proposes and the
 * port takes the batch. */
static int s_fill(kl_job_t *j, char *err)
{
    while (kl_ts_ready(j->ts)) {
        int i = -1;
        int64_t batch = 0;
        int rc = kl_ts_next(j->ts, &i, &batch, err);
        if (rc)
            return rc;
        size_t n = 0;
        uint64_t req = 0;
        rc = j->props[i].submit(j->props[i].ctx, j->port, (int)batch, &n, &req,
                                err);
        if (rc == KL_ERR_EXHAUSTED) { /* a round of 0 trials: exhausted */
            if ((rc = s_report(j, i, 0, err)))
                return rc;
            continue;
        }
        if (rc)
            return rc;
        j->rounds[j->nrounds++] =
            (round_t){.task = i, .request = req, .left = n, .spent = 0};
    }
    return KL_OK;
}

/* Feeds the results of one request (b[0..n), all of it) to its task. */
static int s_feed_round(kl_job_t *j, round_t *r, kl_dispatch_result_t **b,
                        size_t n, char *err)
{
    const kl_job_proposer_t *t = &j->props[r->task];
    int64_t before = s_trials(j, r->task);
    int rc = t->feed(t->ctx, b, n, err);
    int64_t got = s_trials(j, r->task) - before;
    r->spent += got;
    j->fed[r->task] += (int64_t)n;
    r->left = r->left > n ? r->left - n : 0;
    if (!rc)
        s_event(j, KL_JOB_RESULTS, r->task, 0);
    return rc;
}

/* Receives what is there (waiting up to timeout_ms for the first), feeds
 * it request by request and ends the rounds that are complete. *got
 * receives the count received. */
static int s_recv(kl_job_t *j, int timeout_ms, size_t *got, char *err)
{
    kl_dispatch_result_t *b[RECV_MAX];
    size_t n = 0;
    if (kl_port_recv(j->port, &b[0], timeout_ms, NULL) == KL_OK) {
        n = 1;
        while (n < RECV_MAX && kl_port_recv(j->port, &b[n], 0, NULL) == KL_OK)
            n++;
    }
    *got = n;
    int rc = KL_OK;
    /* Group by request, in order of arrival; a result of no round of this
     * run (a stale request) is dropped. */
    for (size_t i = 0; i < n; i++) {
        if (!b[i])
            continue;
        round_t *r = s_round_of(j, b[i]->request_id);
        if (!r) {
            kl_dispatch_result_free(&b[i]);
            continue;
        }
        kl_dispatch_result_t *g[RECV_MAX];
        size_t m = 0;
        uint64_t req = b[i]->request_id;
        for (size_t k = i; k < n; k++)
            if (b[k] && b[k]->request_id == req) {
                g[m++] = b[k];
                b[k] = NULL;
            }
        if (!rc)
            rc = s_feed_round(j, r, g, m, err);
        for (size_t k = 0; k < m; k++)
            kl_dispatch_result_free(&g[k]);
    }
    for (int k = 0; k < j->nrounds && !rc;)
        if (j->rounds[k].left == 0)
            rc = s_end_round(j, k, err);
        else
            k++;
    return rc;
}

static int64_t s_in_flight(const kl_job_t *j)
{
    int64_t n = 0;
    for (int i = 0; i < j->n; i++)
        n += s_task_out(j, i);
    return n;
}

/* No results for a while: are there still agents? */
static int s_check_agents(kl_job_t *j, char *err)
{
    size_t agents = 0;
    const char *target = kl_job_target(j);
    /* A port that is closed (a head that said goodbye, or refused this
     * job's work for one of its limits) ends the job with its reason. */
    if (kl_port_agents(j->port, target, &agents, err) == KL_ERR_CLOSED)
        return KL_ERR_CLOSED;
    if (agents > 0) {
        j->no_agent_since = 0;
        return KL_OK;
    }
    if (j->run->alive && !j->run->alive(j->run->ctx))
        return kl_seterr(err, KL_ERR_CLOSED,
                         "every local kiln-agent exited (see the log "
                         "above); %lld candidates not measured",
                         (long long)s_in_flight(j));
    double now = kl_now_s();
    if (j->no_agent_since == 0)
        j->no_agent_since = now;
    if (now - j->no_agent_since > j->run->agent_wait_s)
        return kl_seterr(err, KL_ERR_TIMEOUT,
                         "no agent for target '%s' connected to %s within "
                         "%.0f s",
                         target, kl_port_where(j->port), j->run->agent_wait_s);
    return KL_OK;
}

/* Cancels the rounds out and records what still arrives (DRAIN_S). */
static void s_drain(kl_job_t *j)
{
    char err[KL_ERRMSG_LEN];
    for (int k = 0; k < j->nrounds; k++)
        kl_port_cancel(j->port, j->rounds[k].request, NULL);
    double until = kl_now_s() + DRAIN_S;
    while (j->nrounds > 0 && kl_now_s() < until) {
        size_t got = 0;
        if (s_recv(j, 250, &got, err)) {
            kl_warn("%s", err);
            break;
        }
    }
}

int kl_job_run(kl_job_t *j, const kl_port_t *port, const kl_job_run_cfg_t *cfg,
               char *err)
{
    j->port = port;
    j->run = cfg;
    j->t0 = kl_now_s();
    j->no_agent_since = 0;
    j->ended = 0;
    int rc = KL_OK;
    for (;;) {
        if (cfg->stop && *cfg->stop) {
            s_drain(j);
            rc = kl_seterr(err, KL_ERR_CLOSED,
                           "interrupted; %lld candidates not measured",
                           (long long)s_in_flight(j));
            break;
        }
        if ((rc = s_fill(j, err)))
            break;
        if (j->nrounds == 0)
            break; /* finished: every cap reached or nothing new */
        size_t got = 0;
        if ((rc = s_recv(j, 250, &got, err)))
            break;
        if (got)
            j->no_agent_since = 0;
        else if ((rc = s_check_agents(j, err)))
            break;
    }
    s_event(j, KL_JOB_END, -1, 0);
    j->port = NULL;
    j->run = NULL;
    j->nrounds = 0;
    return rc;
}
