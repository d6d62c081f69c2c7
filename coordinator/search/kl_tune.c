/* kl_tune.c - the tuning loop of one task: two batches in flight, so the
 * search prepares the next batch while the agents measure this one; every
 * group of results is committed, then learned from. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_tune.h"

#define IN_FLIGHT_BATCHES 2
#define RECV_MAX 256

typedef struct {
    kl_task_t *t;
    kl_dispatch_t *d;
    const kl_tune_run_cfg_t *cfg;
    uint64_t reqs[IN_FLIGHT_BATCHES];
    size_t left[IN_FLIGHT_BATCHES]; /* results still expected */
    int nreq;
    double t0, no_agent_since;
    int64_t fed; /* results fed by this run */
} loop_t;

static void s_progress(loop_t *l, bool done)
{
    if (!l->cfg->progress)
        return;
    kl_task_t *t = l->t;
    kl_tune_progress_t p = {.trials = kl_task_trials(t),
                            .cap = 0,
                            .restored = kl_task_restored(t),
                            .in_flight = kl_task_in_flight(t),
                            .valid = kl_task_valid(t),
                            .best_s = kl_task_best_s(t),
                            .elapsed_s = kl_now_s() - l->t0,
                            .eta_s = -1,
                            .done = done};
    p.cap = kl_task_cap(t);
    if (l->fed > 0 && !done)
        p.eta_s = (double)(p.cap - p.trials) * p.elapsed_s / (double)l->fed;
    double flop = kl_task_workload(t)->flop;
    p.gflops = isfinite(p.best_s) && p.best_s > 0 ? flop / p.best_s / 1e9 : 0;
    l->cfg->progress(l->cfg->ctx, &p);
}

static int s_fill(loop_t *l, char *err)
{
    while (l->nreq < IN_FLIGHT_BATCHES && !kl_task_done(l->t)) {
        size_t n = 0;
        uint64_t id = 0;
        int rc = kl_task_submit(l->t, l->d, INT32_MAX, &n, &id, err);
        if (rc == KL_ERR_EXHAUSTED)
            return KL_OK;
        if (rc)
            return rc;
        l->reqs[l->nreq] = id;
        l->left[l->nreq] = n;
        l->nreq++;
    }
    return KL_OK;
}

static void s_account(loop_t *l, kl_dispatch_result_t *const *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < l->nreq; k++)
            if (l->reqs[k] == b[i]->request_id && l->left[k] > 0) {
                l->left[k]--;
                break;
            }
    for (int k = 0; k < l->nreq;) {
        if (l->left[k] == 0) {
            l->reqs[k] = l->reqs[l->nreq - 1];
            l->left[k] = l->left[l->nreq - 1];
            l->nreq--;
        } else {
            k++;
        }
    }
}

/* No results for a while: are there still agents? */
static int s_check_agents(loop_t *l, char *err)
{
    size_t agents = 0;
    kl_dispatch_agents(l->d, kl_task_target(l->t), &agents, NULL);
    if (agents > 0) {
        l->no_agent_since = 0;
        return KL_OK;
    }
    if (l->cfg->alive && !l->cfg->alive(l->cfg->ctx))
        return kl_seterr(err, KL_ERR_CLOSED,
                         "every local kiln-agent exited (see the log "
                         "above); %lld candidates not measured",
                         (long long)kl_task_in_flight(l->t));
    double now = kl_now_s();
    if (l->no_agent_since == 0)
        l->no_agent_since = now;
    if (now - l->no_agent_since > l->cfg->agent_wait_s)
        return kl_seterr(err, KL_ERR_TIMEOUT,
                         "no agent for target '%s' connected to %s within "
                         "%.0f s",
                         kl_task_target(l->t), kl_dispatch_endpoint(l->d),
                         l->cfg->agent_wait_s);
    return KL_OK;
}

/* Receives what is there (waiting up to timeout_ms for the first) and
 * feeds it. *got receives the count. */
static int s_recv(loop_t *l, int timeout_ms, size_t *got, char *err)
{
    kl_dispatch_result_t *b[RECV_MAX];
    size_t n = 0;
    if (kl_dispatch_recv(l->d, &b[0], timeout_ms, NULL) == KL_OK) {
        n = 1;
        while (n < RECV_MAX && kl_dispatch_recv(l->d, &b[n], 0, NULL) == KL_OK)
            n++;
    }
    *got = n;
    if (n == 0)
        return KL_OK;
    /* Only this task's results (a stale request of an earlier run is
     * dropped). */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (kl_task_owns(l->t, b[i]->request_id))
            b[m++] = b[i];
        else
            kl_dispatch_result_free(&b[i]);
    }
    int rc = kl_task_feed(l->t, b, m, err);
    if (!rc) {
        s_account(l, b, m);
        l->fed += (int64_t)m;
    }
    for (size_t i = 0; i < m; i++)
        kl_dispatch_result_free(&b[i]);
    return rc;
}

/* Cancels what is in flight and records what still arrives (10 s). */
static void s_drain(loop_t *l)
{
    char err[KL_ERRMSG_LEN];
    for (int k = 0; k < l->nreq; k++)
        kl_dispatch_cancel(l->d, l->reqs[k], NULL);
    double until = kl_now_s() + 10;
    while (kl_task_in_flight(l->t) > 0 && kl_now_s() < until) {
        size_t got = 0;
        if (s_recv(l, 250, &got, err)) {
            kl_warn("%s", err);
            break;
        }
    }
}

int kl_tune_run(kl_task_t *t, kl_dispatch_t *d, const kl_tune_run_cfg_t *cfg,
                char *err)
{
    loop_t l = {.t = t, .d = d, .cfg = cfg, .t0 = kl_now_s()};
    int rc = KL_OK;
    for (;;) {
        if (cfg->stop && *cfg->stop) {
            s_drain(&l);
            rc = kl_seterr(err, KL_ERR_CLOSED,
                           "interrupted; %lld candidates not measured",
                           (long long)kl_task_in_flight(t));
            break;
        }
        if ((rc = s_fill(&l, err)))
            break;
        if (kl_task_in_flight(t) == 0)
            break; /* done: cap reached or nothing new */
        size_t got = 0;
        if ((rc = s_recv(&l, 250, &got, err)))
            break;
        if (got) {
            l.no_agent_since = 0;
            s_progress(&l, false);
        } else if ((rc = s_check_agents(&l, err))) {
            break;
        }
    }
    s_progress(&l, true);
    return rc;
}
