/* kl_task.c - one tuning task: workload + target + search state, restored
 * from and committed to the record store. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_hashset.h"
#include "kl_eval.h"
#include "kl_log.h"
#include "kl_record.h"
#include "kl_target.h"
#include "kl_task.h"

#define ENTRY "kl_main"
/* How an agent says that the reference kernel, not the candidate, failed
 * (agent/cpu/runner.c, agent/work.c). */
#define REF_FAILED "reference kernel failed: "

typedef struct {
    uint64_t id, request;
    uint8_t hash[16], src_hash[16];
    kl_trace_t *trace;
    float features[KL_FEATURES_N];
} pend_t;

struct kl_task_s {
    kl_task_cfg_t cfg;
    char *target, *job;
    kl_workload_t *w;
    kl_space_t *sp;
    kl_search_t *search;
    kl_store_t *store;
    kl_hashset_t seen, sources, flight;
    Kiln__KernelArg *argv;
    Kiln__KernelArg **args;
    size_t nargs;
    char *ref_src;
    pend_t *pend;
    size_t npend, cappend;
    uint64_t next_id;
    int64_t trials, restored, valid;
    bool exhausted;
    double best_s;
    kl_trace_t *best_trace;
    uint64_t best_seq;
};

void kl_task_cfg_default(kl_task_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->target = "cpu";
    kl_search_cfg_default(&cfg->search);
    kl_eval_default(&cfg->evaluator);
}

/* ---- accessors ----------------------------------------------------------- */

const kl_workload_t *kl_task_workload(const kl_task_t *t)
{
    return t->w;
}
const char *kl_task_target(const kl_task_t *t)
{
    return t->target;
}
int64_t kl_task_trials(const kl_task_t *t)
{
    return t->trials;
}
int64_t kl_task_restored(const kl_task_t *t)
{
    return t->restored;
}
int64_t kl_task_in_flight(const kl_task_t *t)
{
    return (int64_t)t->npend;
}
int64_t kl_task_valid(const kl_task_t *t)
{
    return t->valid;
}
bool kl_task_exhausted(const kl_task_t *t)
{
    return t->exhausted;
}
double kl_task_best_s(const kl_task_t *t)
{
    return t->best_s;
}
uint64_t kl_task_best_seq(const kl_task_t *t)
{
    return t->best_seq;
}

const kl_trace_t *kl_task_best_trace(const kl_task_t *t)
{
    return t->best_trace;
}

/* ---- creation and restore ------------------------------------------------ */

/* ok: a valid record of this task's target and condition (s_counts), so
 * that only latencies of one kind are compared. */
static void s_best(kl_task_t *t, const kl_trace_t *tr, bool ok, double m,
                   uint64_t seq)
{
    if (!ok || !(m >= 0) || !isfinite(m))
        return;
    if (t->best_trace && !(m < t->best_s))
        return;
    kl_trace_free(&t->best_trace);
    t->best_trace = kl_trace_clone(tr);
    t->best_s = m;
    t->best_seq = seq;
}

/* Whether a record of this task's target is one of its trials: a
 * measurement (not simulated on a real target, not unverified) in the
 * condition of the task's evaluator (kl_record.h). */
static bool s_counts(const kl_task_t *t, const Kiln__TuningRecord *rec)
{
    return kl_record_kind(rec) == KL_RECORD_MEASURED &&
           kl_record_cond(rec) == kl_cond_of(&t->cfg.evaluator);
}

/* Replays tr: features, and the hash of the code it generates. */
static int s_replay(const kl_task_t *t, const kl_trace_t *tr, float *f,
                    uint8_t src_hash[16], kl_kernel_t *k, char *err)
{
    kl_sched_t *s = NULL;
    kl_kernel_t tmp = {0};
    kl_kernel_t *kk = k ? k : &tmp;
    int rc = kl_codegen_replay(t->sp, tr, ENTRY, kk, &s, NULL, err);
    if (!rc) {
        kl_features_extract(s, kl_space_target(t->sp), f);
        kl_hash128(kk->source, strlen(kk->source), src_hash);
    }
    kl_kernel_free(&tmp);
    kl_sched_destroy(&s);
    return rc;
}

static int s_restore_one(const Kiln__TuningRecord *rec, void *arg)
{
    kl_task_t *t = arg;
    if (!s_counts(t, rec))
        return 0; /* another condition, simulated or unverified: not ours */
    t->trials++;
    t->restored++;
    bool ok = kl_record_valid(rec);
    t->valid += ok;
    if (rec->trace_hash.len == 16)
        kl_hashset_add(&t->seen, rec->trace_hash.data);
    kl_trace_t *tr = NULL;
    if (!rec->trace.len ||
        kl_trace_from_proto(rec->trace.data, rec->trace.len, &tr, NULL))
        return 0; /* a record of `kiln measure`, or foreign: counted only */
    float f[KL_FEATURES_N];
    uint8_t sh[16];
    if (s_replay(t, tr, f, sh, NULL, NULL) == KL_OK) {
        kl_hashset_add(&t->sources, sh);
        kl_search_observe(t->search, tr, f, ok, rec->median_s);
    }
    s_best(t, tr, ok, rec->median_s, rec->seq);
    kl_trace_free(&tr);
    return 0;
}

static void s_make_args(kl_task_t *t)
{
    const kl_workload_t *w = t->w;
    t->nargs = (size_t)w->ntensors;
    t->argv = kl_xcalloc(t->nargs, sizeof *t->argv);
    t->args = kl_xcalloc(t->nargs, sizeof *t->args);
    for (size_t i = 0; i < t->nargs; i++) {
        const kl_tensor_t *tn = &w->tensors[i];
        Kiln__KernelArg *a = &t->argv[i];
        kiln__kernel_arg__init(a);
        a->name = (char *)tn->name;
        a->dtype = (Kiln__DType)tn->dtype;
        a->n_shape = (size_t)tn->ndim;
        a->shape = (int64_t *)tn->shape;
        a->role = tn->is_output  ? KILN__ARG_ROLE__ROLE_OUTPUT
                  : tn->is_const ? KILN__ARG_ROLE__ROLE_CONSTANT
                                 : KILN__ARG_ROLE__ROLE_INPUT;
        t->args[i] = a;
    }
}

static int s_put_workload(kl_task_t *t, char *err)
{
    Kiln__Workload wl = KILN__WORKLOAD__INIT;
    wl.key.data = t->w->key;
    wl.key.len = 16;
    wl.text = t->w->canonical;
    wl.name = t->w->name ? t->w->name : "";
    wl.op_kind = t->w->op_kind;
    wl.flop = t->w->flop;
    wl.args = t->args;
    wl.n_args = t->nargs;
    return kl_store_put_workload(t->store, &wl, err);
}

int kl_task_new(kl_task_t **out, const char *workload, const kl_task_cfg_t *cfg,
                kl_store_t *store, char *err)
{
    if (!cfg->target)
        return kl_seterr(err, KL_ERR_INVAL, "task: no target");
    kl_task_t *t = kl_xcalloc(1, sizeof *t);
    t->cfg = *cfg;
    t->job = kl_xstrdup(cfg->job ? cfg->job : "tune");
    t->store = store;
    t->best_s = INFINITY;
    t->next_id = 1;
    int rc = kl_workload_from_string(workload, &t->w, err);
    /* "cpu" means this machine's exact target: records are keyed by the
     * exact target, so a record is never used on another ISA; for an
     * integer workload the target carries the CPU features its intrinsic
     * needs ("cpu/x86_64-avx512+vnni", kl_target.h). */
    t->target = kl_xstrdup(
        kl_target_resolve_for(cfg->target, !rc && kl_workload_is_int(t->w)));
    if (!rc)
        rc = kl_target_check_exact(t->target, err);
    if (!rc)
        rc = kl_space_for_target(t->target, t->w, &t->sp, err);
    if (!rc)
        rc = kl_search_new(&t->search, t->sp, &cfg->search, err);
    kl_kernel_t ref = {0};
    if (!rc)
        rc = kl_codegen_reference_kernel(t->w, kl_space_target(t->sp), "kl_ref",
                                         &ref, err);
    if (!rc) {
        t->ref_src = ref.source;
        ref.source = NULL;
        kl_kernel_free(&ref);
        s_make_args(t);
    }
    if (!rc && store)
        rc = s_put_workload(t, err);
    if (!rc && store)
        rc = kl_store_foreach_record(store, t->w->key, t->target, s_restore_one,
                                     t, err);
    if (rc) {
        kl_task_destroy(&t);
        return rc;
    }
    *out = t;
    return KL_OK;
}

void kl_task_destroy(kl_task_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_task_t *t = *self_p;
    for (size_t i = 0; i < t->npend; i++)
        kl_trace_free(&t->pend[i].trace);
    free(t->pend);
    kl_hashset_free(&t->seen);
    kl_hashset_free(&t->sources);
    kl_hashset_free(&t->flight);
    kl_search_destroy(&t->search);
    kl_space_destroy(&t->sp);
    kl_trace_free(&t->best_trace);
    kl_workload_free(&t->w);
    free(t->argv);
    free(t->args);
    free(t->ref_src);
    free(t->target);
    free(t->job);
    free(t);
    *self_p = NULL;
}

int kl_task_source(const kl_task_t *t, const kl_trace_t *trace, char **src,
                   char *err)
{
    float f[KL_FEATURES_N];
    uint8_t h[16];
    kl_kernel_t k = {0};
    int rc = s_replay(t, trace, f, h, &k, err);
    if (!rc) {
        *src = k.source;
        k.source = NULL;
    }
    kl_kernel_free(&k);
    return rc;
}

/* ---- submit -------------------------------------------------------------- */

static bool s_known(void *ctx, const uint8_t h[16])
{
    const kl_task_t *t = ctx;
    return kl_hashset_has(&t->seen, h) || kl_hashset_has(&t->flight, h);
}

typedef struct {
    Kiln__Candidate *c;
    Kiln__Candidate **p;
    char **src;
    uint32_t (*launch)[6]; /* launched kernels: grid, block */
    size_t n;
} batch_t;

/* A launched kernel's grid and block into the candidate (storage in b). */
static void s_launch(batch_t *b, Kiln__Candidate *cd, const kl_kernel_t *k)
{
    uint32_t *l = b->launch[b->n];
    for (int i = 0; i < 3; i++) {
        l[i] = (uint32_t)k->grid[i];
        l[3 + i] = (uint32_t)k->block[i];
    }
    cd->n_grid = cd->n_block = 3;
    cd->grid = l;
    cd->block = l + 3;
    cd->shared_bytes = (uint32_t)k->shared_bytes;
}

/* Takes candidate c into the batch unless the store has seen its trace
 * or its code was measured (or is in flight) already. */
static int s_take(kl_task_t *t, kl_search_cand_t *c, batch_t *b,
                  uint64_t request, char *err)
{
    bool seen = false;
    int rc = t->store ? kl_store_seen(t->store, t->w->key, t->target,
                                      kl_cond_of(&t->cfg.evaluator), c->hash,
                                      &seen, err)
                      : KL_OK;
    if (rc)
        return rc;
    if (seen) {
        kl_hashset_add(&t->seen, c->hash);
        return KL_OK;
    }
    kl_kernel_t k = {0};
    if (kl_codegen_kernel(c->sched, kl_space_target(t->sp), ENTRY, &k, err)) {
        kl_warn("codegen refused a valid schedule: %s", err);
        kl_hashset_add(&t->seen, c->hash);
        return KL_OK;
    }
    uint8_t sh[16];
    kl_hash128(k.source, strlen(k.source), sh);
    if (!kl_hashset_add(&t->sources, sh)) {
        kl_hashset_add(&t->seen, c->hash); /* same code as a measured one */
        kl_kernel_free(&k);
        return KL_OK;
    }
    if (t->npend == t->cappend) {
        t->cappend = t->cappend ? 2 * t->cappend : 128;
        t->pend = kl_xrealloc(t->pend, t->cappend * sizeof *t->pend);
    }
    pend_t *p = &t->pend[t->npend++];
    p->id = t->next_id++;
    p->request = request;
    memcpy(p->hash, c->hash, 16);
    memcpy(p->src_hash, sh, 16);
    memcpy(p->features, c->features, sizeof p->features);
    p->trace = c->trace;
    c->trace = NULL;
    kl_hashset_add(&t->flight, p->hash);
    Kiln__Candidate *cd = &b->c[b->n];
    kiln__candidate__init(cd);
    cd->id = p->id;
    cd->source = k.source;
    cd->entry = ENTRY;
    if (k.launched)
        s_launch(b, cd, &k);
    kl_trace_to_proto(p->trace, &cd->trace.data, &cd->trace.len);
    b->src[b->n] = k.source;
    k.source = NULL;
    kl_kernel_free(&k);
    b->p[b->n] = cd;
    b->n++;
    return KL_OK;
}

static void s_batch_free(batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->src[i]);
        free(b->c[i].trace.data);
    }
    free(b->c);
    free(b->p);
    free(b->src);
    free(b->launch);
}

/* Forgets the last k pending candidates (a submit that failed). */
static void s_unpend(kl_task_t *t, size_t k)
{
    for (; k > 0 && t->npend > 0; k--) {
        pend_t *p = &t->pend[--t->npend];
        kl_hashset_del(&t->flight, p->hash);
        kl_hashset_del(&t->sources, p->src_hash);
        kl_trace_free(&p->trace);
    }
}

static int s_fill(kl_task_t *t, int want, batch_t *b, uint64_t request,
                  char *err)
{
    kl_search_cand_t *cs = kl_xcalloc((size_t)want, sizeof *cs);
    int rc = KL_OK;
    for (int round = 0; round < 8 && (int)b->n < want && !rc; round++) {
        int got = 0;
        rc = kl_search_propose(t->search, want - (int)b->n, s_known, t, cs,
                               &got, err);
        for (int i = 0; i < got; i++) {
            if (!rc && (int)b->n < want)
                rc = s_take(t, &cs[i], b, request, err);
            kl_search_cand_free(&cs[i]);
        }
        if (rc == KL_ERR_EXHAUSTED) {
            t->exhausted = true;
            kl_info("%s on %s: %s", t->w->name, t->target, err);
            rc = KL_OK;
            break;
        }
    }
    free(cs);
    return rc;
}

/* What kl_task_submit sends: batch b of t. */
static kl_dispatch_batch_t s_dbatch(const kl_task_t *t, const batch_t *b)
{
    kl_dispatch_batch_t db = {.workload_key = t->w->key,
                              .target = t->target,
                              .args = t->args,
                              .n_args = t->nargs,
                              .reference_source = t->ref_src,
                              .reference_entry = "kl_ref",
                              .evaluator = &t->cfg.evaluator,
                              .candidates = b->p,
                              .n_candidates = b->n};
    return db;
}

static int s_want(kl_task_t *t, int max, int *want, char *err)
{
    *want = max;
    if (t->exhausted || *want <= 0)
        return kl_seterr(err, KL_ERR_EXHAUSTED, "%s",
                         t->exhausted ? "design space exhausted"
                                      : "no candidate asked for");
    return KL_OK;
}

static batch_t s_batch_new(int want)
{
    batch_t b = {.c = kl_xcalloc((size_t)want, sizeof *b.c),
                 .p = kl_xcalloc((size_t)want, sizeof *b.p),
                 .src = kl_xcalloc((size_t)want, sizeof *b.src),
                 .launch = kl_xcalloc((size_t)want, sizeof *b.launch)};
    return b;
}

/* The next batch of up to max candidates (their traces pending) into *b,
 * which the caller frees; KL_ERR_EXHAUSTED when none can be made. */
static int s_next_batch(kl_task_t *t, int max, batch_t *b, char *err)
{
    int want = 0;
    int rc = s_want(t, max, &want, err);
    if (rc)
        return rc;
    *b = s_batch_new(want);
    rc = s_fill(t, want, b, 0, err);
    if (!rc && b->n == 0)
        rc = kl_seterr(err, KL_ERR_EXHAUSTED, "design space exhausted");
    return rc;
}

int kl_task_preview(kl_task_t *t, int max,
                    void (*fn)(void *ctx, const kl_dispatch_batch_t *b),
                    void *ctx, size_t *n, char *err)
{
    *n = 0;
    batch_t b = {0};
    int rc = s_next_batch(t, max, &b, err);
    if (!rc) {
        kl_dispatch_batch_t db = s_dbatch(t, &b);
        fn(ctx, &db);
        *n = b.n;
    }
    s_unpend(t, b.n);
    s_batch_free(&b);
    return rc;
}

int kl_task_submit(kl_task_t *t, const kl_port_t *port, int max, size_t *n,
                   uint64_t *request_id, char *err)
{
    *n = 0;
    batch_t b = {0};
    int rc = s_next_batch(t, max, &b, err);
    if (!rc) {
        kl_dispatch_batch_t db = s_dbatch(t, &b);
        rc = kl_port_submit(port, &db, request_id, err);
        if (rc) {
            s_unpend(t, b.n);
        } else {
            /* The request id is known after submit: record it now. */
            for (size_t i = t->npend - b.n; i < t->npend; i++)
                t->pend[i].request = *request_id;
            *n = b.n;
        }
    }
    s_batch_free(&b);
    return rc;
}

/* ---- feed ---------------------------------------------------------------- */

static pend_t *s_find(kl_task_t *t, uint64_t request, uint64_t id)
{
    for (size_t i = 0; i < t->npend; i++)
        if (t->pend[i].id == id && t->pend[i].request == request)
            return &t->pend[i];
    return NULL;
}

static void s_drop(kl_task_t *t, pend_t *p)
{
    kl_hashset_del(&t->flight, p->hash);
    kl_trace_free(&p->trace);
    *p = t->pend[--t->npend];
}

/* sim_target: the simulated twin of the task's target (kl_target.h), where
 * a simulated result lands whatever the task's target: an agent from
 * before simulated targets says "simulated" but names the real target. */
static void s_record(const kl_task_t *t, const kl_dispatch_result_t *d,
                     const pend_t *p, const char *sim_target,
                     Kiln__TuningRecord *rec, uint8_t **tb)
{
    const Kiln__MeasureResult *r = d->result;
    kiln__tuning_record__init(rec);
    rec->workload_key.data = t->w->key;
    rec->workload_key.len = 16;
    rec->target = r->simulated ? (char *)sim_target : t->target;
    size_t len = 0;
    kl_trace_to_proto(p->trace, tb, &len);
    rec->trace.data = *tb;
    rec->trace.len = len;
    rec->status = r->status;
    rec->n_samples = r->n_samples;
    rec->samples = r->samples;
    rec->median_s = r->n_samples ? kl_median(r->samples, r->n_samples) : 0;
    rec->error = r->error;
    rec->agent = (char *)d->agent;
    rec->device_name = (char *)d->device_name;
    rec->simulated = r->simulated || kl_target_is_sim(t->target);
    rec->unsandboxed = r->unsandboxed;
    rec->trace_hash.data = (uint8_t *)p->hash;
    rec->trace_hash.len = 16;
    rec->spread = r->spread;
    rec->job = t->job;
    rec->number = r->number;
    rec->compile_s = r->compile_s;
    /* What the latency means (kl_record.h): the request's evaluator. */
    rec->evaluator = (Kiln__Evaluator *)&t->cfg.evaluator;
}

int kl_task_feed(kl_task_t *t, kl_dispatch_result_t *const *res, size_t n,
                 char *err)
{
    Kiln__TuningRecord *recs = kl_xcalloc(n ? n : 1, sizeof *recs);
    Kiln__TuningRecord **ptrs = kl_xcalloc(n ? n : 1, sizeof *ptrs);
    pend_t **ps = kl_xcalloc(n ? n : 1, sizeof *ps);
    uint8_t **tbs = kl_xcalloc(n ? n : 1, sizeof *tbs);
    char ref_err[400] = "", sim_target[160];
    kl_target_sim_for(t->target, kl_workload_is_int(t->w), sim_target,
                      sizeof sim_target);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        pend_t *p = s_find(t, res[i]->request_id, res[i]->candidate_id);
        if (!p) {
            kl_warn("result for unknown candidate %llu of request %llu",
                    (unsigned long long)res[i]->candidate_id,
                    (unsigned long long)res[i]->request_id);
            continue;
        }
        const char *e = res[i]->result->error ? res[i]->result->error : "";
        bool ref_failed = !strncmp(e, REF_FAILED, strlen(REF_FAILED));
        if (ref_failed && !*ref_err)
            snprintf(ref_err, sizeof ref_err, "agent %s: %.300s",
                     res[i]->agent ? res[i]->agent : "?", e);
        if (ref_failed ||
            res[i]->result->status == KILN__STATUS__STATUS_CANCELLED) {
            kl_hashset_del(&t->sources, p->src_hash);
            s_drop(t, p);
            continue;
        }
        s_record(t, res[i], p, sim_target, &recs[m], &tbs[m]);
        ptrs[m] = &recs[m];
        ps[m++] = p;
    }
    int rc = m && t->store ? kl_store_commit(t->store, ptrs, m, err) : KL_OK;
    if (!rc) {
        /* Observe first: pend_t pointers move when one is dropped. */
        for (size_t i = 0; i < m; i++) {
            /* A result keyed elsewhere (simulated) or unverified is a
             * trial spent, never a latency of this task. */
            bool mine =
                !strcmp(recs[i].target, t->target) && s_counts(t, &recs[i]);
            bool ok = mine && kl_record_valid(&recs[i]);
            t->trials++;
            t->valid += ok;
            kl_hashset_add(&t->seen, ps[i]->hash);
            if (mine)
                kl_search_observe(t->search, ps[i]->trace, ps[i]->features, ok,
                                  recs[i].median_s);
            s_best(t, ps[i]->trace, ok, recs[i].median_s, recs[i].seq);
        }
        uint64_t *ids = kl_xcalloc(m ? m : 1, 2 * sizeof *ids);
        for (size_t i = 0; i < m; i++) {
            ids[2 * i] = ps[i]->request;
            ids[2 * i + 1] = ps[i]->id;
        }
        for (size_t i = 0; i < m; i++)
            s_drop(t, s_find(t, ids[2 * i], ids[2 * i + 1]));
        free(ids);
    }
    for (size_t i = 0; i < m; i++)
        free(tbs[i]);
    free(tbs);
    if (!rc && *ref_err)
        rc = kl_seterr(err, KL_ERR_RUNTIME,
                       "%s; no candidate of it was recorded (the reference "
                       "is the naive loop nest: give large workloads a "
                       "longer --timeout-ms)",
                       ref_err);
    free(ps);
    free(ptrs);
    free(recs);
    return rc;
}

int kl_trace_source(const char *workload, const char *target,
                    const uint8_t *trace, size_t len, char **src, char *err)
{
    kl_workload_t *w = NULL;
    kl_kernel_t k = {0};
    int rc = kl_workload_from_string(workload, &w, err);
    if (!rc)
        rc = kl_codegen_replay_proto(w, target, trace, len, ENTRY, &k, NULL,
                                     err);
    if (!rc) {
        *src = k.source;
        k.source = NULL;
    }
    kl_kernel_free(&k);
    kl_workload_free(&w);
    return rc;
}
