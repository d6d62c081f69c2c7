/* kl_eval.h - the evaluator: how an agent measures a candidate, with its
 * defaults written once, for the agent (a request without an evaluator),
 * the coordinator's tuning jobs and every command that takes the
 * evaluator's options.
 *
 * What the fields mean (kiln.Evaluator, docs/protocol.md): each candidate
 * runs `number` times per sample, `repeat` samples; number grows until one
 * sample lasts min_repeat_ms; the caches are flushed before every sample
 * unless flush_cache is off; the whole run is limited to timeout_ms; the
 * output must match the reference within rtol / atol; the inputs come from
 * seed.
 */
#ifndef KL_EVAL_H
#define KL_EVAL_H

#include "kiln.pb-c.h"
#include "kl_opt.h"

/* The defaults, each written here only. */
#define KL_EVAL_DEF_NUMBER 1
#define KL_EVAL_DEF_REPEAT 5
#define KL_EVAL_DEF_MIN_REPEAT_MS 50
#define KL_EVAL_DEF_TIMEOUT_MS 10000
#define KL_EVAL_DEF_RTOL 1e-3
#define KL_EVAL_DEF_ATOL 1e-4
#define KL_EVAL_DEF_SEED 1
#define KL_EVAL_DEF_FLUSH 1

/* Initializes e (kiln__evaluator__init) and sets the defaults above. */
void kl_eval_default(Kiln__Evaluator *e);

/* The evaluator's options, for the table of every command that measures:
 * number, repeat, min-repeat-ms, timeout-ms, rtol, atol, no-flush,
 * data-seed. */
/* clang-format off */
#define KL_EVAL_OPTS \
    {"number", KL_OPT_INT, KL_OPT_DEF(KL_EVAL_DEF_NUMBER), 1, 1e9, "N", \
     "runs per sample"}, \
    {"repeat", KL_OPT_INT, KL_OPT_DEF(KL_EVAL_DEF_REPEAT), 1, 10000, "N", \
     "samples per candidate"}, \
    {"min-repeat-ms", KL_OPT_INT, KL_OPT_DEF(KL_EVAL_DEF_MIN_REPEAT_MS), 0, \
     1e6, "MS", "grow --number until one sample lasts this long (0: one " \
     "run per sample, with the flush: cold latency)"}, \
    {"timeout-ms", KL_OPT_INT, KL_OPT_DEF(KL_EVAL_DEF_TIMEOUT_MS), 1, 1e8, \
     "MS", "limit for one candidate's whole run"}, \
    {"rtol", KL_OPT_DOUBLE, KL_OPT_DEF(KL_EVAL_DEF_RTOL), 0, 1, "X", \
     "relative tolerance"}, \
    {"atol", KL_OPT_DOUBLE, KL_OPT_DEF(KL_EVAL_DEF_ATOL), 0, 1e9, "X", \
     "absolute tolerance"}, \
    {"no-flush", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL, \
     "do not flush the caches between samples"}, \
    {"data-seed", KL_OPT_INT, KL_OPT_DEF(KL_EVAL_DEF_SEED), 0, 9e18, "S", \
     "seed of the input data"},
/* clang-format on */

/* Makes e measure cold latencies (kl_record.h): caches flushed before
 * every sample of one run (flush on, number 1, min_repeat_ms 0); the
 * rest of e is kept. */
void kl_eval_cold(Kiln__Evaluator *e);

/* Sets e from the KL_EVAL_OPTS rows of o (which must be in its table);
 * kl_eval_default first. */
void kl_eval_from_opts(const kl_opts_t *o, Kiln__Evaluator *e);

#endif
