/* kl_record.h - what a TuningRecord's latency means, from one place.
 *
 * Every reader that counts, ranks or exports records (the store's best and
 * seen indexes, task restore, kiln db, kiln export, kiln report) asks these
 * functions, so that they all agree.
 *
 * Kind. A record is a measurement of its target unless it is
 *  - simulated on a real target (written by a kiln from before simulated
 *    devices had targets of their own, "sim/..." in kl_target.h), or
 *  - unverified: measured with evaluator.skip_verify, so that nobody
 *    checked that the kernel computes the right thing.
 * Such records stay in the store (the history is kept, an export carries
 * them) but they are never valid, never best, never enter `seen` (a later
 * job measures their traces for real) and are never restored into a task.
 * A record of a "sim/..." target is a measurement of that simulated
 * target; kiln export refuses those targets.
 *
 * Condition. A latency is cold when every sample is one run on flushed
 * caches: evaluator flush_cache on, number 1 (or 0) and min_repeat_ms 0.
 * Anything else is warm: with min_repeat_ms > 0 the runner grows the runs
 * per sample, and every run after the first finds the data in cache.
 * Warm and cold latencies are different quantities (docs/cli.md: 323 us
 * warm against 659 us cold for a conv2d's best kernels), so they are never
 * compared: the store keeps one best per (workload, target, condition), a
 * task restores only records of its own condition, and kiln db best /
 * export / report pick warm unless asked for cold.
 */
#ifndef KL_RECORD_H
#define KL_RECORD_H

#include <stdbool.h>

#include "kiln.pb-c.h"

typedef enum {
    KL_COND_WARM = 0,
    KL_COND_COLD = 1,
} kl_cond_t;

#define KL_COND_COUNT 2

typedef enum {
    KL_RECORD_MEASURED = 0, /* a measurement of its target */
    KL_RECORD_SIMULATED,    /* simulated, on a real target */
    KL_RECORD_UNVERIFIED,   /* skip_verify */
} kl_record_kind_t;

/* "warm" or "cold". */
const char *kl_cond_name(kl_cond_t c);
/* Parses "warm" or "cold" into *out; KL_ERR_INVAL with a message naming
 * text otherwise. */
int kl_cond_parse(const char *text, kl_cond_t *out, char *err);
/* The condition of latencies measured with evaluator e (see the top). */
kl_cond_t kl_cond_of(const Kiln__Evaluator *e);

/* Fills *out with the evaluator r was measured with: r->evaluator, or for
 * a record written before records carried it, the defaults of that time
 * (number 1, repeat 5, min_repeat_ms 50, flush_cache on, timeout_ms 10000,
 * rtol 1e-3, atol 1e-4, seed 1, verified). *out borrows nothing. */
void kl_record_evaluator(const Kiln__TuningRecord *r, Kiln__Evaluator *out);
kl_cond_t kl_record_cond(const Kiln__TuningRecord *r);
kl_record_kind_t kl_record_kind(const Kiln__TuningRecord *r);
/* "measured", "simulated" or "unverified". */
const char *kl_record_kind_name(kl_record_kind_t k);

/* Whether r may be a best: a measurement of its target, status OK, a
 * finite median >= 0. */
bool kl_record_valid(const Kiln__TuningRecord *r);

#endif
