/* kl_job.h - the tuning conductor: one tuning job, from its tasks to the
 * records committed for them (docs/architecture.md, "How a candidate
 * flows").
 *
 * A job is a set of tasks (one for `kiln tune --op`, one per operator of a
 * model for `kiln tune --model`, or the one task of fixed candidates of
 * `kiln measure`: a proposer, kl_job_new_proposer) tuned on one target,
 * the task scheduler that hands out their rounds (kl_tasksched.h), and the
 * record store they commit to. kl_job_run is the only loop: it asks the
 * scheduler for a round (task, batch size), has that task's search propose a
 * batch and sends it through the job's port (kl_port.h), receives the results,
 * commits them through the task (one store transaction per group), gives
 * them to the search, and reports the round to the scheduler when its
 * last result is in. Every cap is the scheduler's: the batch it hands out
 * is cut so that neither the global nor the per-task cap is ever passed,
 * records restored from the store included.
 *
 * Rounds in flight: with depth > 1 the next round is generated and sent
 * while the agents measure the current one (the default for a job of one
 * task, whose rounds follow each other anyway: depth 2). A job of several
 * tasks runs one round at a time by default, so that the scheduler picks
 * each round knowing every result before it.
 *
 * Resume: creating a job on a store that holds records of its tasks
 * restores them into each task (kl_task.h) and into the scheduler; a job
 * whose caps the records already reach is finished before it starts.
 *
 * Stop: when *stop becomes non-zero, the rounds out are cancelled and the
 * results that still arrive within 10 s are recorded; kl_job_run returns
 * KL_ERR_CLOSED.
 *
 * A job is used by one thread. It borrows the store; the store must
 * outlive it.
 */
#ifndef KL_JOB_H
#define KL_JOB_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "kl_opt.h"
#include "kl_port.h"
#include "kl_store.h"
#include "kl_task.h"
#include "kl_tasksched.h"

/* One task of a job. */
typedef struct {
    const char *spec; /* workload text (kl_workload_from_string) */
    double weight;    /* > 0: how many times the model runs it */
    bool cold;        /* measured cold (kl_eval_cold) whatever the job's
                       * evaluator says */
} kl_job_task_t;

typedef struct {
    /* Every task's target, search, evaluator and the records' "job". */
    kl_task_cfg_t task;
    /* The task scheduler's: caps, batch size, kind. depth 0: 2 for a job
     * of one task, 1 otherwise. */
    kl_ts_cfg_t ts;
} kl_job_cfg_t;

/* kl_task_cfg_default and kl_ts_cfg_default, with depth 0 (automatic). */
void kl_job_cfg_default(kl_job_cfg_t *cfg);

/* The options of a job that every tuning command shares: target, db,
 * trials-per-iter. (The caps differ: --op has max-trials-per-task, --model
 * adds max-trials-global.) */
/* clang-format off */
#define KL_JOB_OPTS \
    {"target", KL_OPT_STR, "cpu", KL_NOBOUNDS, "TARGET", \
     "task target: cpu (this machine's vector ISA), cpu/x86_64-avx512, " \
     "..., cuda/sm_90 (a GPU's exact arch; local agents get --device " \
     "cuda:all)"}, \
    {"trials-per-iter", KL_OPT_INT, KL_OPT_DEF(KL_TS_DEF_TRIALS_PER_ITER), 1, \
     1e6, "K", \
     "candidates per round of one task (the last is cut to fit a cap)"}, \
    {"db", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR", \
     "record store: results are committed per group; a later run on it " \
     "continues (records count toward the caps, seed the search, and are " \
     "never measured again)"},
/* clang-format on */

/* Sets cfg from a command's options: KL_JOB_OPTS, KL_SEARCH_OPTS,
 * KL_TS_OPTS and KL_EVAL_OPTS (all in o's table), and the caps given.
 * The scheduler's seed is the search seed + 1. KL_ERR_INVAL names a bad
 * strategy or scheduler. */
int kl_job_cfg_from_opts(const kl_opts_t *o, int64_t max_trials_global,
                         int64_t max_trials_per_task, kl_job_cfg_t *cfg,
                         char *err);

typedef struct kl_job_s kl_job_t;

/* Creates the job's n >= 1 tasks (restoring each from store, which may be
 * NULL: nothing restored or committed) and its scheduler, restored with
 * the same records. Errors: a workload that does not parse or has no
 * design space on the target, a config out of range (KL_ERR_INVAL naming
 * it), a store error. */
int kl_job_new(kl_job_t **out, const kl_job_task_t *tasks, int n,
               const kl_job_cfg_t *cfg, kl_store_t *store, char *err);

/* A task that proposes its own candidates instead of a search: kiln
 * measure's fixed sources (kl_fixed.h). The job calls it where it calls a
 * kl_task_t, with kl_task.h's contracts: submit proposes up to max
 * candidates and sends them through port in one request (KL_ERR_EXHAUSTED
 * and *n = 0 when it has nothing left); feed records a group of n results
 * of one of its requests (one store transaction) and may keep any of them
 * by setting its slot to NULL (the job frees the others); trials counts
 * the results that count toward the caps, in_flight the candidates out,
 * valid the valid results, best_s the best valid latency (INFINITY when
 * none). */
typedef struct {
    void *ctx;
    int (*submit)(void *ctx, const kl_port_t *port, int max, size_t *n,
                  uint64_t *request_id, char *err);
    int (*feed)(void *ctx, kl_dispatch_result_t **res, size_t n, char *err);
    int64_t (*trials)(const void *ctx);
    int64_t (*in_flight)(const void *ctx);
    int64_t (*valid)(const void *ctx);
    double (*best_s)(const void *ctx);
} kl_job_proposer_t;

/* Creates a job of one task that p proposes (copied; p->ctx is borrowed
 * and must outlive the job). desc names the task to the scheduler and
 * cfg->ts caps it; cfg->task.target is the job's target (borrowed) and the
 * rest of cfg->task is unused. Nothing is restored: the proposer knows
 * what was measured before. The job has no store (kl_job_store is NULL)
 * and kl_job_task gives NULL for the task. Errors: cfg->ts or desc out of
 * range (KL_ERR_INVAL naming it). */
int kl_job_new_proposer(kl_job_t **out, const kl_job_proposer_t *p,
                        const kl_ts_task_t *desc, const kl_job_cfg_t *cfg,
                        char *err);
void kl_job_destroy(kl_job_t **self_p);

int kl_job_ntasks(const kl_job_t *j);
/* Task i (the job's; NULL for a proposer's task, kl_job_new_proposer). */
kl_task_t *kl_job_task(const kl_job_t *j, int i);
/* The job's task scheduler (kl_tasksched.h; borrowed, the job's). */
const kl_ts_t *kl_job_tasksched(const kl_job_t *j);
const char *kl_job_target(const kl_job_t *j);
kl_store_t *kl_job_store(const kl_job_t *j);
/* The trial cap of task i: the per-task cap, else the global one. */
int64_t kl_job_task_cap(const kl_job_t *j, int i);
/* Task i will get no more rounds (cap, exhausted, stopped, global cap). */
bool kl_job_task_done(const kl_job_t *j, int i);
/* Every task is done or the global cap is reached. */
bool kl_job_finished(const kl_job_t *j);

/* The progress of task i, for printing. */
typedef struct {
    int64_t trials, cap, restored, in_flight, valid;
    double best_s;    /* INFINITY when none */
    double gflops;    /* of the best */
    double elapsed_s; /* since kl_job_run started */
    double eta_s;     /* estimated time to the cap; < 0 unknown */
    bool done;
} kl_job_progress_t;

void kl_job_progress(const kl_job_t *j, int i, kl_job_progress_t *p);

typedef enum {
    KL_JOB_RESULTS, /* results of task `task` were committed */
    KL_JOB_ROUND,   /* a round of task `task` ended (its last result in) */
    KL_JOB_END,     /* kl_job_run is returning; task -1 */
} kl_job_event_kind;

typedef struct {
    kl_job_event_kind kind;
    int task;
    int round;     /* rounds ended so far in this run (KL_JOB_ROUND) */
    int64_t spent; /* trials of that round (KL_JOB_ROUND) */
} kl_job_event_t;

typedef struct {
    /* Fail when no agent of the target is connected for this long. */
    double agent_wait_s;
    /* Set to non-zero (e.g. by a signal handler) to stop. May be NULL. */
    volatile sig_atomic_t *stop;
    /* Called on every event; may be NULL. */
    void (*event)(void *ctx, kl_job_t *job, const kl_job_event_t *ev);
    void *ctx;
    /* Returns false when the agents are known to be gone (e.g. every local
     * kiln-agent exited); may be NULL. */
    bool (*alive)(void *ctx);
} kl_job_run_cfg_t;

/* Runs the job on port until it is finished, a stop, or an error:
 * KL_ERR_TIMEOUT when no agent of the target is connected for
 * agent_wait_s, KL_ERR_CLOSED when stopped or the agents are gone, a store
 * error, KL_ERR_RUNTIME when an agent's reference kernel failed. The port
 * is borrowed for the call. */
int kl_job_run(kl_job_t *j, const kl_port_t *port, const kl_job_run_cfg_t *cfg,
               char *err);

#endif
