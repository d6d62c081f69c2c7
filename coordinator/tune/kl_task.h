/* kl_task.h - a tuning task: one workload on one target with its search
 * state, restored from and committed to the record store. The conductor
 * (kl_job.h) owns the tasks of a job and drives them round by round; a
 * task never decides how many trials it may spend (the job's scheduler
 * does, kl_tasksched.h).
 *
 * A task owns a design space, a search (kl_search.h) and its bookkeeping:
 *  - On creation it records the workload in the store and restores what
 *    the store holds for (workload, target) in the measurement condition
 *    of its evaluator (kl_record.h: warm or cold): every such record that
 *    is a measurement counts as a trial, seeds the search (best traces)
 *    and trains its cost model, and its trace is never measured again in
 *    that condition. Records of the other condition, simulated records of
 *    a real target and unverified ones (skip_verify) are not restored.
 *  - A task for a simulated target ("sim/cpu/...", kl_target.h) is served
 *    by simulated devices only and builds the code of the real target; a
 *    task for a real target is never served by them. A result that says
 *    it is simulated is recorded under the simulated target whatever the
 *    task's target (an agent from before simulated targets), and is a
 *    trial spent, never a valid result or a best of a real task.
 *  - kl_task_submit asks the search for a batch of up to the size it is
 *    given, drops every trace that the store's `seen` index, the in-flight
 *    set or an earlier source (two traces that generate the same code)
 *    already covers, generates the code and submits the batch through the
 *    job's port (kl_port.h).
 *  - kl_task_feed commits a group of results in one store transaction
 *    (each a TuningRecord with its trace and the task's evaluator;
 *    failures too: they count as trials) and gives them to the search.
 *    Cancelled candidates are not recorded and do not count.
 *
 * A task is used by one thread at a time. It borrows the store it is
 * given; the store must outlive it.
 */
#ifndef KL_TASK_H
#define KL_TASK_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "kl_ir.h"
#include "kl_port.h"
#include "kl_search.h"
#include "kl_store.h"
#include "kl_trace.h"

typedef struct {
    const char *target;        /* "cpu", "cpu/x86_64-avx512", "cuda/sm_90" */
    kl_search_cfg_t search;    /* strategy and its parameters */
    Kiln__Evaluator evaluator; /* copied into every request and record */
    const char *job;           /* "job" of the records; NULL: "tune" */
} kl_task_cfg_t;

/* Fills cfg with: target "cpu", the search defaults (kl_search.h), the
 * evaluator defaults (kl_eval.h). */
void kl_task_cfg_default(kl_task_cfg_t *cfg);

typedef struct kl_task_s kl_task_t;

/* Creates a task for the workload in `workload` (either form of
 * kl_workload_from_string) and restores its records from store (which
 * may be NULL: nothing restored, nothing committed). Errors: a workload
 * that does not parse, a target without a design space for it, a config
 * out of range (KL_ERR_INVAL naming it), a store error. */
int kl_task_new(kl_task_t **out, const char *workload, const kl_task_cfg_t *cfg,
                kl_store_t *store, char *err);
void kl_task_destroy(kl_task_t **self_p);

const kl_workload_t *kl_task_workload(const kl_task_t *t);
const char *kl_task_target(const kl_task_t *t);

/* Trials so far (restored records plus results fed here), of which
 * restored; candidates in flight; results fed here. */
int64_t kl_task_trials(const kl_task_t *t);
int64_t kl_task_restored(const kl_task_t *t);
int64_t kl_task_in_flight(const kl_task_t *t);
/* Valid results among the trials (kl_record_valid: status OK, verified,
 * a measurement). */
int64_t kl_task_valid(const kl_task_t *t);
/* The design space has nothing new. */
bool kl_task_exhausted(const kl_task_t *t);

/* Best valid latency of the task's condition (median seconds; INFINITY
 * when none) and its trace (borrowed, NULL when none) and record seq. */
double kl_task_best_s(const kl_task_t *t);
const kl_trace_t *kl_task_best_trace(const kl_task_t *t);
uint64_t kl_task_best_seq(const kl_task_t *t);

/* Proposes, dedupes, generates and submits up to max (>= 1) candidates
 * through port. *n receives the count submitted and *request_id the
 * request. KL_ERR_EXHAUSTED (and *n = 0) when the search has nothing new;
 * the task is then exhausted. */
int kl_task_submit(kl_task_t *t, const kl_port_t *port, int max, size_t *n,
                   uint64_t *request_id, char *err);

/* Generates the batch kl_task_submit would send (up to max candidates,
 * deduped, code generated: C, or CUDA C with grid / block / shared bytes on
 * a CUDA target; the reference kernel of the target's language) and gives
 * it to fn instead of a port; then forgets the candidates, so that
 * nothing counts or stays in flight (the search has moved on). *n
 * receives the count. For tests and dry runs. Errors as kl_task_submit. */
int kl_task_preview(kl_task_t *t, int max,
                    void (*fn)(void *ctx, const kl_dispatch_batch_t *b),
                    void *ctx, size_t *n, char *err);

/* Commits n results of this task (one transaction) and feeds the search.
 * The results stay the caller's. On a store error nothing is committed
 * and the candidates stay in flight. A result saying that the agent's
 * reference kernel failed (e.g. timed out) is not the candidate's: it is
 * not recorded and does not count; the others are committed and the call
 * returns KL_ERR_RUNTIME naming the agent and the reason, since every
 * later candidate on that agent would fail the same way. */
int kl_task_feed(kl_task_t *t, kl_dispatch_result_t *const *res, size_t n,
                 char *err);

/* Regenerates the source of a trace of this task (heap string, entry
 * "kl_main"): C, or CUDA C on a CUDA target; for `kiln db best --source`
 * and the final report. */
int kl_task_source(const kl_task_t *t, const kl_trace_t *trace, char **src,
                   char *err);

/* The source (entry "kl_main"; C, or CUDA C for a cuda/ target) that a
 * stored trace (kiln.Trace bytes)
 * generates for workload text on target: parses the workload, then
 * kl_codegen_replay_proto (kl_codegen.h: the replay of kiln export too).
 * Errors name the step that failed. *src is a heap string. */
int kl_trace_source(const char *workload, const char *target,
                    const uint8_t *trace, size_t len, char **src, char *err);

#endif
