/* kl_fixed.c - a task of fixed candidates (kl_fixed.h). */
#include "kl_fixed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_eval.h"
#include "kl_target.h"
#include "kl_util.h"

struct kl_fixed_s {
    kl_fixed_cfg_t cfg;
    uint8_t key[16];
    uint8_t (*hash)[16];
    int *state;                 /* kl_fixed_state per source */
    kl_dispatch_result_t **res; /* per index */
    kl_store_t *store;
    int64_t sent, fed, valid;
    double best_s;
    bool submitted;
};

kl_fixed_t *kl_fixed_new(const kl_fixed_cfg_t *cfg)
{
    kl_fixed_t *f = kl_xcalloc(1, sizeof *f);
    f->cfg = *cfg;
    f->best_s = INFINITY;
    int n = cfg->n;
    f->hash = kl_xcalloc((size_t)n, sizeof *f->hash);
    f->state = kl_xcalloc((size_t)n, sizeof *f->state);
    f->res = kl_xcalloc((size_t)n, sizeof *f->res);
    for (int i = 0; i < n; i++)
        kl_hash128(cfg->sources[i], strlen(cfg->sources[i]), f->hash[i]);
    kl_buf_t kb = {0};
    kl_buf_puts(&kb, cfg->args_text);
    kl_buf_puts(&kb, cfg->reference);
    kl_hash128(kb.data, kb.len, f->key);
    kl_buf_free(&kb);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < i && !f->state[i]; k++)
            if (!memcmp(f->hash[i], f->hash[k], 16))
                f->state[i] = KL_FIXED_DUPLICATE;
    return f;
}

void kl_fixed_destroy(kl_fixed_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_fixed_t *f = *self_p;
    for (int i = 0; i < f->cfg.n; i++)
        kl_dispatch_result_free(&f->res[i]);
    free(f->res);
    free(f->hash);
    free(f->state);
    free(f);
    *self_p = NULL;
}

int kl_fixed_dedupe(kl_fixed_t *f, kl_store_t *store, char *err)
{
    f->store = store;
    Kiln__Workload w = KILN__WORKLOAD__INIT;
    w.key.data = f->key;
    w.key.len = 16;
    w.text = (char *)f->cfg.args_text;
    w.name = (char *)f->cfg.name;
    w.op_kind = "measure";
    w.flop = f->cfg.flop;
    w.n_args = f->cfg.n_args;
    w.args = f->cfg.args;
    Kiln__Workload *have = NULL;
    int rc = KL_OK;
    /* Keep a FLOP count recorded before unless a new one is given. */
    if (kl_store_get_workload(store, f->key, &have, NULL) || f->cfg.flop_given)
        rc = kl_store_put_workload(store, &w, err);
    if (have)
        kiln__workload__free_unpacked(have, NULL);
    for (int i = 0; i < f->cfg.n && rc == KL_OK; i++) {
        bool seen = false;
        if (!f->state[i])
            rc = kl_store_seen(store, f->key, f->cfg.target,
                               kl_cond_of(&f->cfg.evaluator), f->hash[i], &seen,
                               err);
        if (seen)
            f->state[i] = KL_FIXED_SEEN;
    }
    return rc;
}

int kl_fixed_pending(const kl_fixed_t *f)
{
    int n = 0;
    for (int i = 0; i < f->cfg.n; i++)
        n += f->state[i] == KL_FIXED_NEW;
    return n;
}

kl_fixed_state kl_fixed_state_of(const kl_fixed_t *f, int i)
{
    return (kl_fixed_state)f->state[i];
}

const uint8_t *kl_fixed_hash(const kl_fixed_t *f, int i)
{
    return f->hash[i];
}

const kl_dispatch_result_t *kl_fixed_result(const kl_fixed_t *f, int i)
{
    return f->res[i];
}

/* ---- the proposer ---------------------------------------------------------
 */

static int s_submit(void *ctx, const kl_port_t *port, int max, size_t *n_sub,
                    uint64_t *request_id, char *err)
{
    kl_fixed_t *f = ctx;
    *n_sub = 0;
    if (f->submitted)
        return KL_ERR_EXHAUSTED;
    int n_src = f->cfg.n;
    Kiln__Candidate *c = kl_xcalloc((size_t)n_src, sizeof *c);
    Kiln__Candidate **p = kl_xcalloc((size_t)n_src, sizeof *p);
    size_t n = 0;
    for (int i = 0; i < n_src && (int)n < max; i++) {
        if (f->state[i])
            continue;
        kiln__candidate__init(&c[n]);
        c[n].id = (uint64_t)i;
        c[n].source = (char *)f->cfg.sources[i];
        c[n].entry = (char *)f->cfg.entry;
        p[n] = &c[n];
        n++;
    }
    Kiln__Evaluator ev = f->cfg.evaluator;
    kl_dispatch_batch_t b = {.workload_key = f->key,
                             .target = f->cfg.target,
                             .args = f->cfg.args,
                             .n_args = f->cfg.n_args,
                             .reference_source = f->cfg.reference,
                             .reference_entry = f->cfg.ref_entry,
                             .evaluator = &ev,
                             .candidates = p,
                             .n_candidates = n};
    int rc = n ? kl_port_submit(port, &b, request_id, err) : KL_ERR_EXHAUSTED;
    free(c);
    free(p);
    f->submitted = true;
    if (rc == KL_OK) {
        *n_sub = n;
        f->sent += (int64_t)n;
    }
    return rc;
}

/* The records of n results, committed in one transaction. */
static int s_commit(kl_fixed_t *f, kl_dispatch_result_t **b, size_t n,
                    char *err)
{
    Kiln__TuningRecord *recs = kl_xcalloc(n, sizeof *recs);
    Kiln__TuningRecord **ptrs = kl_xcalloc(n, sizeof *ptrs);
    Kiln__Evaluator ev = f->cfg.evaluator;
    const char *target = f->cfg.target;
    /* A simulated result is never a measurement of a real target
     * (kl_target.h), even from an agent that names the real one. */
    char sim[160];
    kl_target_sim(target, sim, sizeof sim);
    for (size_t i = 0; i < n; i++) {
        const Kiln__MeasureResult *r = b[i]->result;
        Kiln__TuningRecord *t = ptrs[i] = &recs[i];
        kiln__tuning_record__init(t);
        t->workload_key.data = f->key;
        t->workload_key.len = 16;
        t->target = r->simulated ? sim : (char *)target;
        t->status = r->status;
        t->n_samples = r->n_samples;
        t->samples = r->samples;
        t->median_s = r->n_samples ? kl_median(r->samples, r->n_samples) : 0;
        t->error = r->error;
        t->time_us = kl_unix_us();
        t->agent = (char *)b[i]->agent;
        t->device_name = (char *)b[i]->device_name;
        t->simulated = r->simulated || kl_target_is_sim(target);
        t->unsandboxed = r->unsandboxed;
        t->evaluator = &ev;
        /* The candidate's id is its source's index (s_submit); its
         * position in the batch is not, once a source before it was
         * skipped as measured already. */
        t->trace_hash.data = f->hash[b[i]->candidate_id];
        t->trace_hash.len = 16;
        t->spread = r->spread;
        t->job = "measure";
        t->number = r->number;
        t->compile_s = r->compile_s;
    }
    int rc = kl_store_commit(f->store, ptrs, n, err);
    free(ptrs);
    free(recs);
    return rc;
}

static int s_feed(void *ctx, kl_dispatch_result_t **b, size_t n, char *err)
{
    kl_fixed_t *f = ctx;
    for (size_t i = 0; i < n; i++)
        if (b[i]->candidate_id >= (uint64_t)f->cfg.n)
            return kl_seterr(err, KL_ERR_PROTO,
                             "measure: a result for candidate %llu of %d",
                             (unsigned long long)b[i]->candidate_id, f->cfg.n);
    if (f->store) {
        int rc = s_commit(f, b, n, err);
        if (rc != KL_OK)
            return rc;
    }
    for (size_t i = 0; i < n; i++) {
        const Kiln__MeasureResult *r = b[i]->result;
        f->fed++;
        if (r->status == KILN__STATUS__STATUS_OK && r->n_samples) {
            double m = kl_median(r->samples, r->n_samples);
            f->valid++;
            if (m < f->best_s)
                f->best_s = m;
        }
        size_t at = (size_t)b[i]->candidate_id;
        kl_dispatch_result_free(&f->res[at]);
        f->res[at] = b[i];
        b[i] = NULL;
        if (f->cfg.on_result)
            f->cfg.on_result(f->cfg.ctx, (int)at);
    }
    return KL_OK;
}

static int64_t s_trials(const void *ctx)
{
    return ((const kl_fixed_t *)ctx)->fed;
}

static int64_t s_in_flight(const void *ctx)
{
    const kl_fixed_t *f = ctx;
    return f->sent > f->fed ? f->sent - f->fed : 0;
}

static int64_t s_valid(const void *ctx)
{
    return ((const kl_fixed_t *)ctx)->valid;
}

static double s_best_s(const void *ctx)
{
    return ((const kl_fixed_t *)ctx)->best_s;
}

int kl_fixed_job(kl_fixed_t *f, kl_job_t **out, char *err)
{
    int64_t pending = kl_fixed_pending(f);
    kl_job_cfg_t cfg;
    kl_job_cfg_default(&cfg);
    cfg.task.target = f->cfg.target;
    cfg.ts.kind = KL_TS_ROUND_ROBIN;
    cfg.ts.max_trials_global = pending;
    cfg.ts.max_trials_per_task = pending;
    cfg.ts.trials_per_iter = pending;
    cfg.ts.depth = 1;
    kl_job_proposer_t p = {.ctx = f,
                           .submit = s_submit,
                           .feed = s_feed,
                           .trials = s_trials,
                           .in_flight = s_in_flight,
                           .valid = s_valid,
                           .best_s = s_best_s};
    kl_ts_task_t desc = {.name = f->cfg.name,
                         .op_kind = "measure",
                         .flop = f->cfg.flop > 0 ? f->cfg.flop : 1,
                         .weight = 1};
    return kl_job_new_proposer(out, &p, &desc, &cfg, err);
}
