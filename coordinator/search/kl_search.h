/* kl_search.h - search strategies over one design space
 * (docs/architecture.md): loop-nest features, trace mutators, and the two
 * strategies.
 *
 *   replay        samples the design space at random. A sample that the
 *                 rules or postprocessors reject is drawn again (bounded
 *                 by max_sample_tries); a sample whose trace was already
 *                 measured or proposed is drawn again too, and after
 *                 max_known_draws such draws in a row the space is
 *                 reported as exhausted (KL_ERR_EXHAUSTED) instead of
 *                 spinning.
 *   evolutionary  MetaSchedule's evolutionary search: a population of
 *                 `population` traces made of the best measured traces
 *                 (init_measured_ratio of it, replayed) and fresh random
 *                 samples, evolved for `generations` rounds: parents are
 *                 picked in proportion to their predicted score and, with
 *                 probability mutate_prob, changed by one random mutator
 *                 (tile sizes, unroll depth, parallel extent, compute
 *                 location, thread binding, other categorical choices).
 *                 The cost model (kl_costmodel.h, XGBoost rank:pairwise
 *                 on kl_features) scores the candidates. Until it is
 *                 trained (model_min_rows results) there is no evolution:
 *                 a batch is fresh random samples in the order drawn, so
 *                 that the space's own probabilities hold (random scores
 *                 would favour the branch with the most distinct
 *                 schedules). Then each batch takes the best predicted
 *                 unmeasured traces, except that each slot is a random
 *                 sample with probability eps_greedy.
 *
 * A kl_search_t never measures anything: it proposes traces and learns
 * from results given back with kl_search_observe. One kl_search_t is used
 * by one thread at a time.
 */
#ifndef KL_SEARCH_H
#define KL_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_opt.h"
#include "kl_sched.h"
#include "kl_space.h"
#include "kl_trace.h"
#include "kl_util.h"

/* ---- features --------------------------------------------------------- */

/* Length of every feature vector. */
#define KL_FEATURES_N 148

/* Fills out[KL_FEATURES_N] with the loop-nest features of a scheduled
 * (replayed and postprocessed) nest on target t: loop extents and kinds
 * (per position, innermost first, and summed per kind), annotations
 * (unroll steps), the register tile, the parallel extent and its balance
 * over the cores, per buffer (up to 3 inputs and the output) the bytes
 * touched below several loop levels, the stride class of the innermost
 * loops (broadcast, contiguous, strided) and the reuse, arithmetic
 * intensity, cache stages and guards. Values are log2(1 + x) or small
 * codes; the same nest always gives the same bytes. */
void kl_features_extract(const kl_sched_t *s, const kl_target_t *t, float *out);
/* A short name of feature i ("par.extent", "loop3.extent", ...); static. */
const char *kl_features_name(int i);

/* ---- mutators --------------------------------------------------------- */

typedef enum {
    KL_MUT_TILE_SIZE = 0,    /* move a prime factor between two tile levels */
    KL_MUT_UNROLL,           /* another unroll depth (categorical feeding an
                                unroll_max_step annotation) */
    KL_MUT_PARALLEL,         /* move a factor into or out of a tile level that
                                the parallel loop is fused from */
    KL_MUT_COMPUTE_LOCATION, /* another sample_compute_location choice */
    KL_MUT_THREAD_BINDING,   /* another extent of a threadIdx-bound split */
    KL_MUT_CATEGORICAL,      /* any other categorical decision */
    KL_MUT__COUNT
} kl_mutator;

/* "tile_size", "unroll", "parallel", "compute_location", "thread_binding",
 * "categorical". */
const char *kl_mutator_name(kl_mutator m);

/* Makes *out, a copy of trace t (with decisions) where mutator m changed
 * one decision of the taken path, chosen with rng. Decisions of later
 * tiles of loops whose extents follow from the changed one are dropped
 * (kl_space_fix draws them again). KL_ERR_NOTFOUND when the trace has
 * nothing this mutator can change (e.g. thread binding on a CPU trace).
 * The result is not checked: replay it with kl_space_fix
 * (kl_space.h). */
int kl_mutate(const kl_trace_t *t, kl_mutator m, kl_rng_t *rng,
              kl_trace_t **out, char *err);

/* ---- strategies ------------------------------------------------------- */

typedef enum {
    KL_STRATEGY_REPLAY = 0,
    KL_STRATEGY_EVOLUTIONARY,
} kl_strategy;

/* "replay" / "evolutionary" to *out; KL_ERR_INVAL naming the text. */
int kl_strategy_parse(const char *name, kl_strategy *out, char *err);

/* The defaults, written once: kl_search_cfg_default and KL_SEARCH_OPTS
 * (MetaSchedule's for the evolution). */
#define KL_SEARCH_DEF_MAX_SAMPLE_TRIES 1000
#define KL_SEARCH_DEF_MAX_KNOWN_DRAWS 256
#define KL_SEARCH_DEF_POPULATION 512
#define KL_SEARCH_DEF_GENERATIONS 4
#define KL_SEARCH_DEF_MUTATE_PROB 0.85
#define KL_SEARCH_DEF_EPS_GREEDY 0.05
#define KL_SEARCH_DEF_INIT_MEASURED_RATIO 0.2
#define KL_SEARCH_DEF_INIT_MIN_UNMEASURED 50
#define KL_SEARCH_DEF_MODEL_MIN_ROWS 64
#define KL_SEARCH_DEF_MODEL_RETRAIN_GROWTH 0.2
#define KL_SEARCH_DEF_MODEL_ROUNDS 64

typedef struct {
    kl_strategy strategy;
    uint64_t seed;
    int max_sample_tries;        /* rejected samples per draw */
    int max_known_draws;         /* known samples in a row */
    int population;              /* evolutionary */
    int generations;             /* evolutionary */
    double mutate_prob;          /* evolutionary */
    double eps_greedy;           /* evolutionary */
    double init_measured_ratio;  /* evolutionary */
    int init_min_unmeasured;     /* evolutionary */
    int model_min_rows;          /* results before the model is used */
    double model_retrain_growth; /* retrain when the data grew so much */
    int model_rounds;            /* boosting rounds */
    int model_threads;           /* [1] */
} kl_search_cfg_t;

/* Fills cfg with the KL_SEARCH_DEF_ values, strategy evolutionary, seed 0
 * and one model thread. */
void kl_search_cfg_default(kl_search_cfg_t *cfg);

/* The search's options, for the table of every command that tunes:
 * strategy, seed and the parameters above. */
/* clang-format off */
#define KL_SEARCH_OPTS \
    {"strategy", KL_OPT_STR, "evolutionary", KL_NOBOUNDS, "NAME", \
     "search strategy: evolutionary or replay"}, \
    {"seed", KL_OPT_INT, "0", 0, 9e18, "S", \
     "seed of the search (and of the task scheduler)"}, \
    {"population", KL_OPT_INT, KL_OPT_DEF(KL_SEARCH_DEF_POPULATION), 1, 1e6, \
     "N", "evolutionary: population size"}, \
    {"generations", KL_OPT_INT, KL_OPT_DEF(KL_SEARCH_DEF_GENERATIONS), 0, \
     1000, "N", "evolutionary: generations per batch"}, \
    {"mutate-prob", KL_OPT_DOUBLE, KL_OPT_DEF(KL_SEARCH_DEF_MUTATE_PROB), 0, \
     1, "P", "evolutionary: probability that a child is mutated"}, \
    {"eps-greedy", KL_OPT_DOUBLE, KL_OPT_DEF(KL_SEARCH_DEF_EPS_GREEDY), 0, 1, \
     "P", "evolutionary: probability that a batch slot is a random sample"}, \
    {"init-measured-ratio", KL_OPT_DOUBLE, \
     KL_OPT_DEF(KL_SEARCH_DEF_INIT_MEASURED_RATIO), 0, 1, "R", \
     "evolutionary: share of the population taken from the best records"}, \
    {"init-min-unmeasured", KL_OPT_INT, \
     KL_OPT_DEF(KL_SEARCH_DEF_INIT_MIN_UNMEASURED), 0, 1e6, "N", \
     "evolutionary: random samples in every initial population, at least"}, \
    {"model-min-rows", KL_OPT_INT, KL_OPT_DEF(KL_SEARCH_DEF_MODEL_MIN_ROWS), \
     2, 1e9, "N", \
     "results before the cost model is used (random scores until then)"}, \
    {"model-retrain-growth", KL_OPT_DOUBLE, \
     KL_OPT_DEF(KL_SEARCH_DEF_MODEL_RETRAIN_GROWTH), 0, 100, "G", \
     "retrain the cost model when its data grew by this fraction"}, \
    {"model-rounds", KL_OPT_INT, KL_OPT_DEF(KL_SEARCH_DEF_MODEL_ROUNDS), 1, \
     10000, "N", "boosting rounds of the cost model"}, \
    {"max-sample-tries", KL_OPT_INT, \
     KL_OPT_DEF(KL_SEARCH_DEF_MAX_SAMPLE_TRIES), 1, 1e9, "N", \
     "rejected samples per draw before the space counts as exhausted"}, \
    {"max-known-draws", KL_OPT_INT, KL_OPT_DEF(KL_SEARCH_DEF_MAX_KNOWN_DRAWS), \
     1, 1e9, "N", \
     "already-measured samples in a row before the space counts as " \
     "exhausted"},
/* clang-format on */

/* Sets cfg from the KL_SEARCH_OPTS rows of o (which must be in its
 * table); kl_search_cfg_default first. KL_ERR_INVAL names an unknown
 * strategy. */
int kl_search_cfg_from_opts(const kl_opts_t *o, kl_search_cfg_t *cfg,
                            char *err);

typedef struct kl_search_s kl_search_t;

/* Creates a search over sp (borrowed; it must outlive the search).
 * KL_ERR_INVAL for a config out of range (names the field). */
int kl_search_new(kl_search_t **out, const kl_space_t *sp,
                  const kl_search_cfg_t *cfg, char *err);
void kl_search_destroy(kl_search_t **self_p);

/* Tells the search that trace t was measured: ok with latency_s > 0, or
 * failed (ok false). t is copied. features may be NULL (then t is
 * replayed to compute them; a trace that no longer replays is only
 * remembered as known). Feeds the cost model and, when the data grew
 * enough, retrains it (errors of training are logged, not fatal). */
void kl_search_observe(kl_search_t *self, const kl_trace_t *t,
                       const float *features, bool ok, double latency_s);

/* Whether a trace hash is known to the caller (measured, in flight). */
typedef bool (*kl_search_known_fn)(void *ctx, const uint8_t hash[16]);

typedef struct {
    kl_trace_t *trace; /* owned, canonical, with decisions */
    kl_sched_t *sched; /* owned, postprocessed */
    uint8_t hash[16];  /* kl_trace_hash(trace) */
    float features[KL_FEATURES_N];
    float score; /* predicted (higher is faster); 0 for random picks */
    bool random; /* picked at random (eps-greedy or no model yet) */
} kl_search_cand_t;

void kl_search_cand_free(kl_search_cand_t *c);

/* Proposes up to n distinct traces that known() does not know (known may
 * be NULL) into out[0..*nout). Returns KL_OK with *nout >= 1, or
 * KL_ERR_EXHAUSTED (with *nout = 0) when no new valid trace could be
 * found within the bounds above. */
int kl_search_propose(kl_search_t *self, int n, kl_search_known_fn known,
                      void *ctx, kl_search_cand_t *out, int *nout, char *err);

/* Results observed so far, and whether the cost model is trained. */
size_t kl_search_observed(const kl_search_t *self);
bool kl_search_model_trained(const kl_search_t *self);

/* Predicts scores for n feature vectors (random when untrained). */
void kl_search_predict(kl_search_t *self, const float *features, size_t n,
                       float *out);

#endif
