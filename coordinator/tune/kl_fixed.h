/* kl_fixed.h - a task of fixed candidates: the hand-written sources of one
 * workload that `kiln measure` measures, run as the proposer of a job
 * (kl_job_new_proposer) instead of a search, so that kl_job_run is the
 * only loop that sends candidates and records their results.
 *
 * The workload is an argument list and a reference source: its key is the
 * 128-bit hash of the args text followed by the reference source, its op
 * kind "measure", its name the caller's ("measure:<arg names>"). The trace
 * hash of a candidate (in the store's seen index and in its record) is
 * the hash of its source.
 *  - kl_fixed_new marks every source that an earlier one repeats
 *    (KL_FIXED_DUPLICATE). kl_fixed_dedupe, with a store, records the
 *    workload (keeping a FLOP count recorded before unless one is given)
 *    and marks the sources that the seen index holds for (workload,
 *    target, the evaluator's condition) (KL_FIXED_SEEN). Neither kind is
 *    measured.
 *  - The proposer sends every other source in one request, with the
 *    reference and the arguments, and then has nothing left.
 *  - Its feed commits a group of results in one store transaction (when
 *    there is a store): a TuningRecord of job "measure" each, with the
 *    status, samples, error, agent, device, evaluator and source hash; a
 *    simulated result is recorded under the simulated target (kl_target.h).
 *    It then keeps the results and calls on_result for each, in order.
 *
 * Used by one thread. It borrows its configuration's strings, the sources
 * and the store; they must outlive it.
 */
#ifndef KL_FIXED_H
#define KL_FIXED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_dispatch.h"
#include "kl_job.h"
#include "kl_store.h"

typedef struct {
    const char *args_text;  /* the arguments as the user wrote them */
    Kiln__KernelArg **args; /* in ABI order */
    size_t n_args;
    const char *name;      /* the workload's name */
    const char *reference; /* C source of the reference kernel */
    const char *entry;     /* entry symbol of the candidates */
    const char *ref_entry; /* of the reference */
    const char *target;
    Kiln__Evaluator evaluator;  /* of every request and record */
    double flop;                /* of one run; 0: unknown */
    bool flop_given;            /* replace a FLOP count recorded before */
    const char *const *sources; /* n >= 1 candidate sources */
    int n;
    /* Called for each result after it is committed, with the index the
     * result gives (its position in the batch); may be NULL. */
    void (*on_result)(void *ctx, int i);
    void *ctx;
} kl_fixed_cfg_t;

typedef enum {
    KL_FIXED_NEW = 0,       /* to be measured */
    KL_FIXED_SEEN = 1,      /* measured before (in the store) */
    KL_FIXED_DUPLICATE = 2, /* the same source as an earlier one */
} kl_fixed_state;

typedef struct kl_fixed_s kl_fixed_t;

/* Hashes the workload and the sources and marks the duplicates. The
 * configuration is copied (its strings are borrowed). Never fails. */
kl_fixed_t *kl_fixed_new(const kl_fixed_cfg_t *cfg);
void kl_fixed_destroy(kl_fixed_t **self_p);

/* Records the workload in store and marks the sources measured before
 * (see above). The store is borrowed for the task's life and gets its
 * records. Errors: the store's. */
int kl_fixed_dedupe(kl_fixed_t *f, kl_store_t *store, char *err);

/* The sources to measure (KL_FIXED_NEW). */
int kl_fixed_pending(const kl_fixed_t *f);
kl_fixed_state kl_fixed_state_of(const kl_fixed_t *f, int i);
/* The 16-byte hash of source i (borrowed). */
const uint8_t *kl_fixed_hash(const kl_fixed_t *f, int i);
/* The result kept for index i (borrowed), NULL when none came. */
const kl_dispatch_result_t *kl_fixed_result(const kl_fixed_t *f, int i);

/* A job of this one task (kl_job_new_proposer) whose caps are the
 * sources to measure, in one round: kl_job_run sends them, waits for the
 * agents and records every result. The task must outlive the job.
 * KL_ERR_INVAL (the scheduler's message) when there is none to measure. */
int kl_fixed_job(kl_fixed_t *f, kl_job_t **out, char *err);

#endif
