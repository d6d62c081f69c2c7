/* kl_evolve.c - the evolutionary strategy (MetaSchedule's
 * EvolutionarySearch): initial population from the best measured traces
 * and random samples, generations of mutation guided by the cost model,
 * epsilon-greedy choice of the batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_search_priv.h"

#define MAX_FAIL 10 /* failed mutations of one slot before a copy */

static int s_by_latency(const void *a, const void *b)
{
    double x = ((const kl_search__meas_t *)a)->latency,
           y = ((const kl_search__meas_t *)b)->latency;
    return x < y ? -1 : x > y;
}

typedef struct {
    kl_search_cand_t **v; /* borrowed members of one generation */
    int n;
} gen_t;

typedef struct {
    kl_search_t *self;
    kl_search_known_fn known;
    void *ctx;
    kl_search__pool_t
        elite; /* best unmeasured candidates seen in any generation */
    int cap;   /* elite size */
} evo_t;

static bool s_known(evo_t *e, const uint8_t h[16])
{
    return e->known && e->known(e->ctx, h);
}

static void s_score(evo_t *e, gen_t *g)
{
    if (g->n == 0)
        return;
    float *x = kl_xmalloc((size_t)g->n * KL_FEATURES_N * sizeof *x);
    float *y = kl_xmalloc((size_t)g->n * sizeof *y);
    for (int i = 0; i < g->n; i++)
        memcpy(x + (size_t)i * KL_FEATURES_N, g->v[i]->features,
               KL_FEATURES_N * sizeof *x);
    kl_search_predict(e->self, x, (size_t)g->n, y);
    for (int i = 0; i < g->n; i++)
        g->v[i]->score = y[i];
    free(x);
    free(y);
}

/* Copies the unmeasured members of g into the elite pool, which keeps
 * the e->cap best scores seen (MetaSchedule's heap of the batch size). */
static void s_collect(evo_t *e, const gen_t *g)
{
    kl_search__pool_t *el = &e->elite;
    for (int i = 0; i < g->n; i++) {
        kl_search_cand_t *c = g->v[i];
        if (s_known(e, c->hash) || kl_hashset_has(&el->set, c->hash))
            continue;
        if (el->n >= e->cap) {
            int lo = 0;
            for (int k = 1; k < el->n; k++)
                lo = el->v[k].score < el->v[lo].score ? k : lo;
            if (!(c->score > el->v[lo].score))
                continue;
            kl_hashset_del(&el->set, el->v[lo].hash);
            kl_search_cand_free(&el->v[lo]);
            el->v[lo] = el->v[--el->n];
        }
        if (kl_search__pool_add(el, e->self->sp, kl_trace_clone(c->trace),
                                kl_sched_clone(c->sched)))
            el->v[el->n - 1].score = c->score;
    }
}

/* Picks a parent with probability proportional to its shifted score. */
static int s_roulette(kl_search_t *self, const gen_t *g)
{
    double lo = INFINITY, tot = 0;
    for (int i = 0; i < g->n; i++)
        lo = g->v[i]->score < lo ? g->v[i]->score : lo;
    for (int i = 0; i < g->n; i++)
        tot += g->v[i]->score - lo + 1e-6;
    double x = kl_rng_double(&self->rng) * tot;
    for (int i = 0; i < g->n; i++) {
        x -= g->v[i]->score - lo + 1e-6;
        if (x < 0)
            return i;
    }
    return g->n - 1;
}

/* One mutated child of parent into next; false when every try failed. */
static bool s_mutant(evo_t *e, const kl_search_cand_t *parent,
                     kl_search__pool_t *next)
{
    kl_search_t *self = e->self;
    for (int f = 0; f < MAX_FAIL; f++) {
        kl_mutator m =
            (kl_mutator)kl_rng_below(&self->rng, (uint64_t)KL_MUT__COUNT);
        kl_trace_t *mt = NULL, *fixed = NULL;
        kl_sched_t *s = NULL;
        if (kl_mutate(parent->trace, m, &self->rng, &mt, NULL))
            continue;
        int rc = kl_space_fix(self->sp, mt, &self->rng, &fixed, &s, NULL);
        kl_trace_free(&mt);
        if (rc)
            continue;
        uint8_t h[16];
        kl_trace_hash(fixed, h);
        if (s_known(e, h) || kl_hashset_has(&next->set, h)) {
            kl_trace_free(&fixed);
            kl_sched_destroy(&s);
            continue;
        }
        return kl_search__pool_add(next, self->sp, fixed, s);
    }
    return false;
}

/* Builds the next generation from g. */
static void s_evolve(evo_t *e, const gen_t *g, kl_search__pool_t *next)
{
    kl_search_t *self = e->self;
    int want = self->cfg.population;
    for (int i = 0; i < want && g->n > 0; i++) {
        const kl_search_cand_t *p = g->v[s_roulette(self, g)];
        if (kl_rng_double(&self->rng) < self->cfg.mutate_prob &&
            s_mutant(e, p, next))
            continue;
        /* Kept as it is (or every mutation failed). */
        if (!kl_hashset_has(&next->set, p->hash))
            kl_search__pool_add(next, self->sp, kl_trace_clone(p->trace),
                                kl_sched_clone(p->sched));
    }
}

static void s_gen_of(gen_t *g, kl_search__pool_t *a, kl_search__pool_t *b)
{
    g->n = 0;
    g->v =
        kl_xrealloc(g->v, (size_t)(a->n + (b ? b->n : 0) + 1) * sizeof *g->v);
    for (int i = 0; i < a->n; i++)
        g->v[g->n++] = &a->v[i];
    for (int i = 0; b && i < b->n; i++)
        g->v[g->n++] = &b->v[i];
}

static int s_by_score(const void *a, const void *b)
{
    float x = ((const kl_search_cand_t *)a)->score;
    float y = ((const kl_search_cand_t *)b)->score;
    return x > y ? -1 : x < y;
}

/* The best measured traces, replayed, into p. */
static void s_seed_best(kl_search_t *self, kl_search__pool_t *p)
{
    if (!self->sorted && self->nm > 0) {
        qsort(self->m, self->nm, sizeof *self->m, s_by_latency);
        self->sorted = true;
    }
    int want = (int)(self->cfg.population * self->cfg.init_measured_ratio);
    for (size_t i = 0; i < self->nm && p->n < want; i++) {
        if (!isfinite(self->m[i].latency))
            break;
        kl_trace_t *mt = NULL, *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_trace_from_proto(self->m[i].trace, self->m[i].len, &mt, NULL) ==
                KL_OK &&
            kl_space_fix(self->sp, mt, &self->rng, &tr, &s, NULL) == KL_OK)
            kl_search__pool_add(p, self->sp, tr, s);
        kl_trace_free(&mt);
    }
}

/* Fills out: eps-greedy between the elite (by score) and random picks. */
static int s_pick(evo_t *e, kl_search__pool_t *rnd, int n,
                  kl_search_cand_t *out)
{
    kl_search_t *self = e->self;
    if (e->elite.n > 0)
        qsort(e->elite.v, (size_t)e->elite.n, sizeof *e->elite.v, s_by_score);
    kl_hashset_t taken = {0};
    int ie = 0, ir = 0, k = 0;
    while (k < n && (ie < e->elite.n || ir < rnd->n)) {
        bool rand_pick =
            ir < rnd->n && (ie >= e->elite.n ||
                            kl_rng_double(&self->rng) < self->cfg.eps_greedy);
        kl_search_cand_t *c = rand_pick ? &rnd->v[ir++] : &e->elite.v[ie++];
        if (s_known(e, c->hash) || !kl_hashset_add(&taken, c->hash))
            continue;
        kl_search__move_out(&out[k], c);
        memcpy(out[k].hash, c->hash, 16);
        memcpy(out[k].features, c->features, sizeof c->features);
        out[k].score = rand_pick ? 0 : c->score;
        out[k].random = rand_pick || !kl_search_model_trained(self);
        k++;
    }
    kl_hashset_free(&taken);
    return k;
}

int kl_search__propose_evolve(kl_search_t *self, int n,
                              kl_search_known_fn known, void *ctx,
                              kl_search_cand_t *out, int *nout, char *err)
{
    evo_t e = {.self = self, .known = known, .ctx = ctx, .cap = 2 * n};
    kl_search__pool_t best = {0}, rnd = {0}, cur = {0}, next = {0};
    /* Until the cost model is trained its scores are random, and evolving
     * on them only drifts the population towards the larger sub-spaces
     * (a branch with many distinct schedules outnumbers a small one
     * however the space weighs them): the batch is then the first n
     * random samples drawn, the design space's own distribution, and no
     * population is built. */
    bool trained = kl_search_model_trained(self);
    int want = n;
    if (trained) {
        s_seed_best(self, &best);
        want = self->cfg.population - best.n;
        if (want < self->cfg.init_min_unmeasured)
            want = self->cfg.init_min_unmeasured;
        if (want < n)
            want = n;
    }
    char rerr[KL_ERRMSG_LEN] = "";
    int rc = kl_search__random(self, &rnd, want, known, ctx, &best.set, rerr);
    if (rc && rc != KL_ERR_EXHAUSTED) {
        kl_search__pool_free(&best);
        kl_search__pool_free(&rnd);
        return kl_seterr(err, rc, "%s", rerr);
    }
    gen_t g = {0};
    if (trained)
        s_gen_of(&g, &best, &rnd);
    for (int gen = 0; gen <= self->cfg.generations && g.n > 0; gen++) {
        s_score(&e, &g);
        s_collect(&e, &g);
        if (gen == self->cfg.generations)
            break;
        s_evolve(&e, &g, &next);
        kl_search__pool_free(&cur);
        cur = next;
        memset(&next, 0, sizeof next);
        s_gen_of(&g, &cur, NULL);
    }
    *nout = s_pick(&e, &rnd, n, out);
    free(g.v);
    kl_search__pool_free(&cur);
    kl_search__pool_free(&best);
    kl_search__pool_free(&rnd);
    kl_search__pool_free(&e.elite);
    if (*nout == 0)
        return kl_seterr(err, KL_ERR_EXHAUSTED,
                         "design space exhausted: no unmeasured trace in "
                         "the population%s%s",
                         *rerr ? " (" : "", *rerr ? rerr : "");
    return KL_OK;
}
