/* kl_tasksched.c - round-robin and gradient task schedulers with hard
 * trial caps (the contract is in kl_tasksched.h). */
#include "kl_tasksched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* Ansor's similarity buckets: floor(log_1.618(C + 1)). */
#define S_PHI 1.618
/* A task leaves its similarity group after this many rounds beyond every
 * other member without reaching 1/beta of the group's best speed. */
#define S_GROUP_SLACK 5

typedef struct {
    char *name;
    char *op_kind;
    double flop, weight;
    int64_t trials;
    int rounds;
    double best;  /* seconds; INFINITY while none */
    double *hist; /* g after each round (KL_TS_NO_RESULT_S while none) */
    int hist_cap;
    int last_better; /* round of the last improvement; 0: none */
    bool warm;       /* tried once (or restored) */
    kl_ts_state state;
    int group; /* -1: alone */
} s_task_t;

typedef struct {
    int *members;
    int n;
} s_group_t;

struct kl_ts_s {
    kl_ts_cfg_t cfg;
    s_task_t *t;
    int n;
    s_group_t *groups;
    int ngroups;
    int64_t total;
    /* Rounds handed out and not reported yet, oldest first. */
    int pend_task[KL_TS_MAX_DEPTH];
    int64_t pend_batch[KL_TS_MAX_DEPTH];
    int npend;
    int rr_last; /* last task picked by round-robin */
    bool started;
    kl_rng_t rng;
};

void kl_ts_cfg_default(kl_ts_cfg_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = KL_TS_GRADIENT;
    cfg->max_trials_global = 1000;
    cfg->max_trials_per_task = 0;
    cfg->trials_per_iter = KL_TS_DEF_TRIALS_PER_ITER;
    cfg->alpha = KL_TS_DEF_ALPHA;
    cfg->beta = KL_TS_DEF_BETA;
    cfg->window = KL_TS_DEF_WINDOW;
    cfg->eps = KL_TS_DEF_EPS;
    cfg->early_stop_rounds = KL_TS_DEF_EARLY_STOP;
    cfg->seed = 1;
    cfg->depth = 1;
}

int kl_ts_kind_parse(const char *s, kl_ts_kind *kind, char *err)
{
    if (s && strcmp(s, "round-robin") == 0) {
        *kind = KL_TS_ROUND_ROBIN;
        return KL_OK;
    }
    if (s && strcmp(s, "gradient") == 0) {
        *kind = KL_TS_GRADIENT;
        return KL_OK;
    }
    return kl_seterr(err, KL_ERR_INVAL,
                     "unknown scheduler '%s' (expected round-robin or "
                     "gradient)",
                     s ? s : "(none)");
}

int kl_ts_cfg_from_opts(const kl_opts_t *o, kl_ts_cfg_t *c, char *err)
{
    c->alpha = kl_opts_double(o, "alpha");
    c->beta = kl_opts_double(o, "beta");
    c->window = (int)kl_opts_int(o, "window");
    c->eps = kl_opts_double(o, "sched-eps");
    c->early_stop_rounds = (int)kl_opts_int(o, "early-stop-rounds");
    return kl_ts_kind_parse(kl_opts_str(o, "scheduler"), &c->kind, err);
}

const char *kl_ts_state_name(kl_ts_state st)
{
    switch (st) {
    case KL_TS_DONE_CAP:
        return "cap";
    case KL_TS_DONE_EXHAUSTED:
        return "exhausted";
    case KL_TS_DONE_STOPPED:
        return "stopped";
    default:
        return "";
    }
}

static int s_check_cfg(const kl_ts_cfg_t *c, char *err)
{
    if (c->kind != KL_TS_ROUND_ROBIN && c->kind != KL_TS_GRADIENT)
        return kl_seterr(err, KL_ERR_INVAL, "scheduler: unknown kind %d",
                         (int)c->kind);
    if (c->max_trials_global < 1)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: max-trials-global must be >= 1 (got "
                         "%lld)",
                         (long long)c->max_trials_global);
    if (c->max_trials_per_task < 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: max-trials-per-task must be >= 0 (got "
                         "%lld)",
                         (long long)c->max_trials_per_task);
    if (c->trials_per_iter < 1)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: trials-per-iter must be >= 1 (got %lld)",
                         (long long)c->trials_per_iter);
    if (!(c->alpha >= 0 && c->alpha <= 1))
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: alpha must be in [0, 1] (got %g)",
                         c->alpha);
    if (!(c->beta > 0) || !isfinite(c->beta))
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: beta must be > 0 (got %g)", c->beta);
    if (c->window < 1)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: window must be >= 1 (got %d)", c->window);
    if (!(c->eps >= 0 && c->eps <= 1))
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: eps must be in [0, 1] (got %g)", c->eps);
    if (c->early_stop_rounds < 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: early-stop-rounds must be >= 0 (got %d)",
                         c->early_stop_rounds);
    if (c->depth < 1 || c->depth > KL_TS_MAX_DEPTH)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: depth must be in [1, %d] (got %d)",
                         KL_TS_MAX_DEPTH, c->depth);
    return KL_OK;
}

static int s_check_task(const kl_ts_task_t *t, int i, char *err)
{
    if (!t->name || !*t->name)
        return kl_seterr(err, KL_ERR_INVAL, "scheduler: task %d has no name",
                         i);
    if (!(t->flop > 0) || !isfinite(t->flop))
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: task %d (%s) has FLOPs %g (must be > 0)",
                         i, t->name, t->flop);
    if (!(t->weight > 0) || !isfinite(t->weight))
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: task %d (%s) has weight %g (must be > 0)",
                         i, t->name, t->weight);
    return KL_OK;
}

static long s_bucket(double flop)
{
    return (long)floor(log(flop + 1.0) / log(S_PHI));
}

/* Groups tasks by (op kind, FLOP bucket); groups of one are dropped. */
static void s_make_groups(kl_ts_t *ts)
{
    ts->groups = kl_xcalloc((size_t)ts->n, sizeof(s_group_t));
    int *seen = kl_xcalloc((size_t)ts->n, sizeof(int));
    for (int i = 0; i < ts->n; i++)
        ts->t[i].group = -1;
    for (int i = 0; i < ts->n; i++) {
        if (seen[i])
            continue;
        s_group_t g = {kl_xcalloc((size_t)ts->n, sizeof(int)), 0};
        for (int j = i; j < ts->n; j++) {
            if (!seen[j] && strcmp(ts->t[i].op_kind, ts->t[j].op_kind) == 0 &&
                s_bucket(ts->t[i].flop) == s_bucket(ts->t[j].flop)) {
                seen[j] = 1;
                g.members[g.n++] = j;
            }
        }
        if (g.n < 2) {
            free(g.members);
            continue;
        }
        for (int k = 0; k < g.n; k++)
            ts->t[g.members[k]].group = ts->ngroups;
        ts->groups[ts->ngroups++] = g;
    }
    free(seen);
}

int kl_ts_new(kl_ts_t **out, const kl_ts_cfg_t *cfg, const kl_ts_task_t *tasks,
              int n, char *err)
{
    *out = NULL;
    int rc = s_check_cfg(cfg, err);
    if (rc)
        return rc;
    if (n < 1 || !tasks)
        return kl_seterr(err, KL_ERR_INVAL, "scheduler: no tasks");
    for (int i = 0; i < n; i++)
        if ((rc = s_check_task(&tasks[i], i, err)))
            return rc;
    kl_ts_t *ts = kl_xcalloc(1, sizeof(*ts));
    ts->cfg = *cfg;
    ts->n = n;
    ts->t = kl_xcalloc((size_t)n, sizeof(s_task_t));
    for (int i = 0; i < n; i++) {
        s_task_t *t = &ts->t[i];
        t->name = kl_xstrdup(tasks[i].name);
        t->op_kind = kl_xstrdup(tasks[i].op_kind ? tasks[i].op_kind : "");
        t->flop = tasks[i].flop;
        t->weight = tasks[i].weight;
        t->best = INFINITY;
    }
    s_make_groups(ts);
    ts->rr_last = -1;
    kl_rng_seed(&ts->rng, cfg->seed);
    *out = ts;
    return KL_OK;
}

void kl_ts_destroy(kl_ts_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_ts_t *ts = *self_p;
    for (int i = 0; i < ts->n; i++) {
        free(ts->t[i].name);
        free(ts->t[i].op_kind);
        free(ts->t[i].hist);
    }
    for (int g = 0; g < ts->ngroups; g++)
        free(ts->groups[g].members);
    free(ts->groups);
    free(ts->t);
    free(ts);
    *self_p = NULL;
}

static double s_g(const s_task_t *t)
{
    return isfinite(t->best) ? t->best : KL_TS_NO_RESULT_S;
}

static void s_push_hist(s_task_t *t)
{
    if (t->rounds >= t->hist_cap) {
        t->hist_cap = t->hist_cap ? 2 * t->hist_cap : 16;
        while (t->hist_cap <= t->rounds)
            t->hist_cap *= 2;
        t->hist = kl_xrealloc(t->hist, (size_t)t->hist_cap * sizeof(double));
    }
    t->hist[t->rounds++] = s_g(t);
}

static int64_t s_cap(const kl_ts_t *ts)
{
    return ts->cfg.max_trials_per_task;
}

/* Trials handed out and not reported yet: of task i, or of all (i < 0). */
static int64_t s_out(const kl_ts_t *ts, int i)
{
    int64_t n = 0;
    for (int k = 0; k < ts->npend; k++)
        if (i < 0 || ts->pend_task[k] == i)
            n += ts->pend_batch[k];
    return n;
}

/* The batch task i may get now: trials_per_iter cut to both caps, counting
 * the rounds still out. */
static int64_t s_room(const kl_ts_t *ts, int i)
{
    int64_t b = ts->cfg.trials_per_iter;
    int64_t g = ts->cfg.max_trials_global - ts->total - s_out(ts, -1);
    if (g < b)
        b = g;
    if (s_cap(ts) && s_cap(ts) - ts->t[i].trials - s_out(ts, i) < b)
        b = s_cap(ts) - ts->t[i].trials - s_out(ts, i);
    return b > 0 ? b : 0;
}

/* May task i get a round now? */
static bool s_open(const kl_ts_t *ts, int i)
{
    return ts->t[i].state == KL_TS_RUNNING && s_room(ts, i) > 0;
}

int kl_ts_restore(kl_ts_t *ts, int i, int64_t trials, double best_s, char *err)
{
    if (i < 0 || i >= ts->n)
        return kl_seterr(err, KL_ERR_INVAL, "scheduler: no task %d", i);
    if (ts->started)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: restore of task %d after the first round",
                         i);
    if (trials < 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: task %d restored with %lld trials", i,
                         (long long)trials);
    s_task_t *t = &ts->t[i];
    ts->total += trials;
    t->trials += trials;
    if (best_s > 0 && best_s < t->best)
        t->best = best_s;
    if (trials > 0) {
        int64_t r =
            (trials + ts->cfg.trials_per_iter - 1) / ts->cfg.trials_per_iter;
        while (t->rounds < r)
            s_push_hist(t);
        t->warm = true;
        if (isfinite(t->best))
            t->last_better = t->rounds;
    }
    if (s_cap(ts) && t->trials >= s_cap(ts))
        t->state = KL_TS_DONE_CAP;
    return KL_OK;
}

int kl_ts_unreached(const kl_ts_t *ts, int *idx, int max)
{
    int64_t cum = ts->total;
    int k = 0;
    for (int i = 0; i < ts->n; i++) {
        const s_task_t *t = &ts->t[i];
        if (t->warm || t->state != KL_TS_RUNNING)
            continue;
        if (cum >= ts->cfg.max_trials_global) {
            if (idx && k < max)
                idx[k] = i;
            k++;
            continue;
        }
        int64_t b = ts->cfg.trials_per_iter;
        if (s_cap(ts) && s_cap(ts) - t->trials < b)
            b = s_cap(ts) - t->trials;
        cum += b;
    }
    return k;
}

double kl_ts_gradient(const kl_ts_t *ts, int i)
{
    const s_task_t *t = &ts->t[i];
    if (t->state != KL_TS_RUNNING)
        return 0.0;
    const kl_ts_cfg_t *c = &ts->cfg;
    double g = s_g(t);
    int r = t->rounds > 0 ? t->rounds : 1;
    double back = 0.0;
    if (t->rounds > c->window)
        back = (t->hist[t->rounds - 1] - t->hist[t->rounds - 1 - c->window]) /
               c->window;
    double fwd = -g / r;
    if (t->group >= 0) {
        const s_group_t *gr = &ts->groups[t->group];
        double vmax = 0.0;
        for (int k = 0; k < gr->n; k++) {
            const s_task_t *o = &ts->t[gr->members[k]];
            double v = o->flop / s_g(o);
            if (v > vmax)
                vmax = v;
        }
        double sim = c->beta * t->flop / vmax - g;
        if (sim < fwd)
            fwd = sim;
    }
    return t->weight * (c->alpha * back + (1.0 - c->alpha) * fwd);
}

/* Picks uniformly among the running tasks for which keep() holds. */
static int s_random_running(kl_ts_t *ts, const double *grad, double min)
{
    int n = 0;
    for (int i = 0; i < ts->n; i++)
        if (s_open(ts, i) && (!grad || grad[i] == min))
            n++;
    if (n == 0)
        return -1;
    uint64_t pick = kl_rng_below(&ts->rng, (uint64_t)n);
    for (int i = 0; i < ts->n; i++)
        if (s_open(ts, i) && (!grad || grad[i] == min) && pick-- == 0)
            return i;
    return -1;
}

static int s_pick_gradient(kl_ts_t *ts)
{
    if (ts->cfg.eps > 0 && kl_rng_double(&ts->rng) < ts->cfg.eps)
        return s_random_running(ts, NULL, 0);
    double *grad = kl_xcalloc((size_t)ts->n, sizeof(double));
    double min = INFINITY;
    for (int i = 0; i < ts->n; i++) {
        if (!s_open(ts, i))
            continue;
        grad[i] = kl_ts_gradient(ts, i);
        if (grad[i] < min)
            min = grad[i];
    }
    int pick = s_random_running(ts, grad, min);
    free(grad);
    return pick;
}

static int s_pick(kl_ts_t *ts)
{
    /* Warm-up: the first task without any round, reported or out. */
    for (int i = 0; i < ts->n; i++)
        if (s_open(ts, i) && !ts->t[i].warm && s_out(ts, i) == 0)
            return i;
    if (ts->cfg.kind == KL_TS_GRADIENT)
        return s_pick_gradient(ts);
    for (int k = 1; k <= ts->n; k++) {
        int i = (ts->rr_last + k) % ts->n;
        if (s_open(ts, i))
            return i;
    }
    return -1;
}

bool kl_ts_finished(const kl_ts_t *ts)
{
    if (ts->total >= ts->cfg.max_trials_global)
        return true;
    for (int i = 0; i < ts->n; i++)
        if (ts->t[i].state == KL_TS_RUNNING)
            return false;
    return true;
}

bool kl_ts_ready(const kl_ts_t *ts)
{
    if (ts->npend >= ts->cfg.depth || kl_ts_finished(ts))
        return false;
    for (int i = 0; i < ts->n; i++)
        if (s_open(ts, i))
            return true;
    return false;
}

int kl_ts_outstanding(const kl_ts_t *ts)
{
    return ts->npend;
}

int kl_ts_next(kl_ts_t *ts, int *task, int64_t *batch, char *err)
{
    if (ts->npend >= ts->cfg.depth)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: the round of task %d (%s) is not "
                         "reported yet",
                         ts->pend_task[0], ts->t[ts->pend_task[0]].name);
    *task = -1;
    *batch = 0;
    ts->started = true;
    if (kl_ts_finished(ts))
        return kl_seterr(err, KL_ERR_EXHAUSTED,
                         "scheduler: the job is over (%lld trials)",
                         (long long)ts->total);
    if (!kl_ts_ready(ts)) /* rounds out hold the rest of the budget */
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: %d round%s out hold what is left; "
                         "report first",
                         ts->npend, ts->npend == 1 ? "" : "s");
    int i = s_pick(ts);
    if (i < 0)
        return kl_seterr(err, KL_ERR_INTERNAL, "scheduler: no task to pick");
    int64_t b = s_room(ts, i);
    ts->rr_last = i;
    ts->pend_task[ts->npend] = i;
    ts->pend_batch[ts->npend] = b;
    ts->npend++;
    *task = i;
    *batch = b;
    return KL_OK;
}

/* Ansor's _adjust_similarity_group: a task tuned well beyond the others of
 * its group that still cannot reach 1/beta of their best speed was not
 * similar to them; it leaves the group. */
static void s_adjust_group(kl_ts_t *ts, int i)
{
    s_task_t *t = &ts->t[i];
    if (t->group < 0)
        return;
    s_group_t *gr = &ts->groups[t->group];
    double vmax = 0.0;
    int others_max = 0;
    for (int k = 0; k < gr->n; k++) {
        const s_task_t *o = &ts->t[gr->members[k]];
        double v = o->flop / s_g(o);
        if (v > vmax)
            vmax = v;
        if (gr->members[k] != i && o->rounds > others_max)
            others_max = o->rounds;
    }
    double cur = t->flop / s_g(t);
    if (!(cur < vmax / ts->cfg.beta && t->rounds > S_GROUP_SLACK + others_max))
        return;
    int w = 0;
    for (int k = 0; k < gr->n; k++)
        if (gr->members[k] != i)
            gr->members[w++] = gr->members[k];
    gr->n = w;
    t->group = -1;
    if (gr->n == 1) {
        ts->t[gr->members[0]].group = -1;
        gr->n = 0;
    }
}

int kl_ts_report(kl_ts_t *ts, int i, int64_t trials, double best_s, char *err)
{
    int k = 0;
    while (k < ts->npend && ts->pend_task[k] != i)
        k++;
    if (i < 0 || i >= ts->n || k == ts->npend)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: task %d has no outstanding round", i);
    int64_t batch = ts->pend_batch[k];
    if (trials < 0 || trials > batch)
        return kl_seterr(err, KL_ERR_INVAL,
                         "scheduler: task %d reported %lld trials for a batch "
                         "of %lld",
                         i, (long long)trials, (long long)batch);
    s_task_t *t = &ts->t[i];
    for (; k + 1 < ts->npend; k++) {
        ts->pend_task[k] = ts->pend_task[k + 1];
        ts->pend_batch[k] = ts->pend_batch[k + 1];
    }
    ts->npend--;
    t->trials += trials;
    ts->total += trials;
    t->warm = true;
    if (best_s > 0 && best_s < t->best) {
        t->best = best_s;
        t->last_better = t->rounds + 1;
    }
    s_push_hist(t);
    if (t->state != KL_TS_RUNNING)
        ; /* a round still out when the task was done: counted only */
    else if (trials == 0)
        t->state = KL_TS_DONE_EXHAUSTED;
    else if (s_cap(ts) && t->trials >= s_cap(ts))
        t->state = KL_TS_DONE_CAP;
    else if (ts->cfg.early_stop_rounds > 0 &&
             t->rounds - t->last_better >= ts->cfg.early_stop_rounds)
        t->state = KL_TS_DONE_STOPPED;
    s_adjust_group(ts, i);
    return KL_OK;
}

void kl_ts_exhausted(kl_ts_t *ts, int i)
{
    if (i >= 0 && i < ts->n && ts->t[i].state == KL_TS_RUNNING)
        ts->t[i].state = KL_TS_DONE_EXHAUSTED;
}

int64_t kl_ts_total_trials(const kl_ts_t *ts)
{
    return ts->total;
}

int64_t kl_ts_trials(const kl_ts_t *ts, int i)
{
    return ts->t[i].trials;
}

int kl_ts_rounds(const kl_ts_t *ts, int i)
{
    return ts->t[i].rounds;
}

double kl_ts_best_s(const kl_ts_t *ts, int i)
{
    return ts->t[i].best;
}

kl_ts_state kl_ts_task_state(const kl_ts_t *ts, int i)
{
    return ts->t[i].state;
}

int kl_ts_group(const kl_ts_t *ts, int i)
{
    return ts->t[i].group;
}

void kl_ts_rows(const kl_ts_t *ts, kl_ts_row_t *rows)
{
    for (int i = 0; i < ts->n; i++) {
        const s_task_t *t = &ts->t[i];
        rows[i] = (kl_ts_row_t){
            .name = t->name,
            .flop = t->flop,
            .weight = t->weight,
            .best_s = t->best,
            .trials = t->trials,
            .done = t->state != KL_TS_RUNNING ||
                    ts->total >= ts->cfg.max_trials_global,
            .why = t->state != KL_TS_RUNNING ? kl_ts_state_name(t->state)
                   : ts->total >= ts->cfg.max_trials_global ? "global cap"
                                                            : "",
        };
    }
}
