/* kl_search.c - replay and evolutionary search over one design space. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_costmodel.h"
#include "kl_err.h"
#include "kl_hashset.h"
#include "kl_log.h"
#include "kl_search.h"
#include "kl_search_priv.h"

static const char *s_names[] = {"replay", "evolutionary"};

int kl_strategy_parse(const char *name, kl_strategy *out, char *err)
{
    for (int i = 0; i < 2; i++)
        if (name && !strcmp(name, s_names[i])) {
            *out = (kl_strategy)i;
            return KL_OK;
        }
    return kl_seterr(err, KL_ERR_INVAL,
                     "strategy '%s' is not one of replay, evolutionary",
                     name ? name : "");
}

void kl_search_cfg_default(kl_search_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->strategy = KL_STRATEGY_EVOLUTIONARY;
    cfg->max_sample_tries = KL_SEARCH_DEF_MAX_SAMPLE_TRIES;
    cfg->max_known_draws = KL_SEARCH_DEF_MAX_KNOWN_DRAWS;
    cfg->population = KL_SEARCH_DEF_POPULATION;
    cfg->generations = KL_SEARCH_DEF_GENERATIONS;
    cfg->mutate_prob = KL_SEARCH_DEF_MUTATE_PROB;
    cfg->eps_greedy = KL_SEARCH_DEF_EPS_GREEDY;
    cfg->init_measured_ratio = KL_SEARCH_DEF_INIT_MEASURED_RATIO;
    cfg->init_min_unmeasured = KL_SEARCH_DEF_INIT_MIN_UNMEASURED;
    cfg->model_min_rows = KL_SEARCH_DEF_MODEL_MIN_ROWS;
    cfg->model_retrain_growth = KL_SEARCH_DEF_MODEL_RETRAIN_GROWTH;
    cfg->model_rounds = KL_SEARCH_DEF_MODEL_ROUNDS;
    cfg->model_threads = 1;
}

int kl_search_cfg_from_opts(const kl_opts_t *o, kl_search_cfg_t *s, char *err)
{
    kl_search_cfg_default(s);
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
    return kl_strategy_parse(kl_opts_str(o, "strategy"), &s->strategy, err);
}

int kl_search_new(kl_search_t **out, const kl_space_t *sp,
                  const kl_search_cfg_t *cfg, char *err)
{
    const char *bad =
        cfg->max_sample_tries < 1                           ? "max_sample_tries"
        : cfg->max_known_draws < 1                          ? "max_known_draws"
        : cfg->population < 1                               ? "population"
        : cfg->generations < 0                              ? "generations"
        : !(cfg->mutate_prob >= 0 && cfg->mutate_prob <= 1) ? "mutate_prob"
        : !(cfg->eps_greedy >= 0 && cfg->eps_greedy <= 1)   ? "eps_greedy"
        : !(cfg->init_measured_ratio >= 0 && cfg->init_measured_ratio <= 1)
            ? "init_measured_ratio"
        : cfg->init_min_unmeasured < 0      ? "init_min_unmeasured"
        : cfg->model_min_rows < 2           ? "model_min_rows"
        : !(cfg->model_retrain_growth >= 0) ? "model_retrain_growth"
        : cfg->model_rounds < 1             ? "model_rounds"
                                            : NULL;
    if (bad)
        return kl_seterr(err, KL_ERR_INVAL, "search config: %s out of range",
                         bad);
    kl_costmodel_cfg_t mc;
    kl_costmodel_cfg_default(&mc, KL_FEATURES_N);
    mc.min_rows = cfg->model_min_rows;
    mc.retrain_growth = cfg->model_retrain_growth;
    mc.rounds = cfg->model_rounds;
    mc.seed = cfg->seed;
    mc.nthreads = cfg->model_threads > 0 ? cfg->model_threads : 1;
    kl_costmodel_t *model = NULL;
    int rc = kl_costmodel_new(&model, &mc, err);
    if (rc)
        return rc;
    kl_search_t *self = kl_xcalloc(1, sizeof *self);
    self->sp = sp;
    self->cfg = *cfg;
    self->model = model;
    kl_rng_seed(&self->rng, cfg->seed ^ 0x6b696c6e73656172ull);
    memcpy(&self->group, kl_space_workload(sp)->key, sizeof self->group);
    *out = self;
    return KL_OK;
}

void kl_search_destroy(kl_search_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_search_t *self = *self_p;
    for (size_t i = 0; i < self->nm; i++)
        free(self->m[i].trace);
    free(self->m);
    kl_costmodel_destroy(&self->model);
    free(self);
    *self_p = NULL;
}

void kl_search_cand_free(kl_search_cand_t *c)
{
    kl_trace_free(&c->trace);
    kl_sched_destroy(&c->sched);
}

size_t kl_search_observed(const kl_search_t *self)
{
    return self->nm;
}

bool kl_search_model_trained(const kl_search_t *self)
{
    return kl_costmodel_trained(self->model);
}

void kl_search_observe(kl_search_t *self, const kl_trace_t *t,
                       const float *features, bool ok, double latency_s)
{
    float f[KL_FEATURES_N];
    if (!features) {
        kl_rng_t r;
        kl_rng_seed(&r, 1);
        kl_sched_t *s = NULL;
        kl_trace_t *ex = NULL;
        if (kl_space_fix(self->sp, t, &r, &ex, &s, NULL) == KL_OK) {
            kl_features_extract(s, kl_space_target(self->sp), f);
            features = f;
        }
        kl_trace_free(&ex);
        kl_sched_destroy(&s);
    }
    ok = ok && latency_s > 0 && isfinite(latency_s);
    if (features)
        kl_costmodel_add(self->model, features, ok ? 1e-3 / latency_s : 0.0,
                         self->group);
    if (self->nm == self->capm) {
        self->capm = self->capm ? 2 * self->capm : 64;
        self->m = kl_xrealloc(self->m, self->capm * sizeof *self->m);
    }
    kl_trace_to_proto(t, &self->m[self->nm].trace, &self->m[self->nm].len);
    self->m[self->nm].latency = ok ? latency_s : INFINITY;
    self->nm++;
    self->sorted = false;
}

void kl_search_predict(kl_search_t *self, const float *features, size_t n,
                       float *out)
{
    if (n == 0)
        return;
    if (kl_costmodel_trained(self->model) &&
        kl_costmodel_predict(self->model, features, n, out, NULL) == KL_OK)
        return;
    for (size_t i = 0; i < n; i++)
        out[i] = (float)kl_rng_double(&self->rng);
}

/* Retrains when the data grew enough; a failure keeps the old model. */
void kl_search__maybe_train(kl_search_t *self)
{
    if (!kl_costmodel_wants_training(self->model))
        return;
    char err[KL_ERRMSG_LEN];
    double t0 = kl_now_s();
    if (kl_costmodel_train(self->model, err))
        kl_warn("cost model: %s", err);
    else
        kl_info("cost model trained on %zu rows in %.2f s",
                kl_costmodel_rows(self->model), kl_now_s() - t0);
}

/* ---- candidates --------------------------------------------------------- */

void kl_search__pool_free(kl_search__pool_t *p)
{
    for (int i = 0; i < p->n; i++)
        kl_search_cand_free(&p->v[i]);
    free(p->v);
    kl_hashset_free(&p->set);
    memset(p, 0, sizeof *p);
}

/* Takes ownership of trace and sched; drops them when the hash is in the
 * pool already. Returns whether added. */
bool kl_search__pool_add(kl_search__pool_t *p, const kl_space_t *sp,
                         kl_trace_t *tr, kl_sched_t *s)
{
    kl_search_cand_t c = {.trace = tr, .sched = s};
    kl_trace_hash(tr, c.hash);
    if (!kl_hashset_add(&p->set, c.hash)) {
        kl_search_cand_free(&c);
        return false;
    }
    kl_features_extract(s, kl_space_target(sp), c.features);
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->v = kl_xrealloc(p->v, (size_t)p->cap * sizeof *p->v);
    }
    p->v[p->n++] = c;
    return true;
}

void kl_search__move_out(kl_search_cand_t *dst, kl_search_cand_t *src)
{
    *dst = *src;
    src->trace = NULL;
    src->sched = NULL;
}

/* Draws random valid samples not known and not in `avoid` into p until it
 * holds want of them. KL_ERR_EXHAUSTED when the rejection or the known
 * bound was hit (p keeps what it got). */
int kl_search__random(kl_search_t *self, kl_search__pool_t *p, int want,
                      kl_search_known_fn known, void *ctx,
                      const kl_hashset_t *avoid, char *err)
{
    int streak = 0;
    while (p->n < want) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        int rc = kl_space_sample(self->sp, &self->rng, &tr, &s,
                                 self->cfg.max_sample_tries, NULL, err);
        if (rc)
            return rc == KL_ERR_EXHAUSTED
                       ? rc
                       : kl_seterr(err, rc, "sampling: %.400s", err);
        kl_trace_canonicalize(tr);
        uint8_t h[16];
        kl_trace_hash(tr, h);
        bool dup =
            (known && known(ctx, h)) || (avoid && kl_hashset_has(avoid, h));
        if (dup) {
            kl_trace_free(&tr);
            kl_sched_destroy(&s);
        } else {
            dup = !kl_search__pool_add(p, self->sp, tr, s);
        }
        if (dup) {
            if (++streak >= self->cfg.max_known_draws)
                return kl_seterr(err, KL_ERR_EXHAUSTED,
                                 "design space exhausted: %d samples in a "
                                 "row were already measured or proposed",
                                 streak);
            continue;
        }
        streak = 0;
    }
    return KL_OK;
}

static int s_propose_replay(kl_search_t *self, int n, kl_search_known_fn known,
                            void *ctx, kl_search_cand_t *out, int *nout,
                            char *err)
{
    kl_search__pool_t p = {0};
    int rc = kl_search__random(self, &p, n, known, ctx, NULL, err);
    for (int i = 0; i < p.n; i++) {
        kl_search__move_out(&out[i], &p.v[i]);
        out[i].random = true;
    }
    *nout = p.n;
    kl_search__pool_free(&p);
    if (*nout > 0)
        return KL_OK;
    return rc ? rc : kl_seterr(err, KL_ERR_EXHAUSTED, "design space exhausted");
}

int kl_search_propose(kl_search_t *self, int n, kl_search_known_fn known,
                      void *ctx, kl_search_cand_t *out, int *nout, char *err)
{
    *nout = 0;
    if (n <= 0)
        return KL_OK;
    if (self->cfg.strategy == KL_STRATEGY_REPLAY)
        return s_propose_replay(self, n, known, ctx, out, nout, err);
    kl_search__maybe_train(self);
    return kl_search__propose_evolve(self, n, known, ctx, out, nout, err);
}
