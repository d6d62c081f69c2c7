/* kl_tasksched.h - task schedulers: which task of a tuning job to tune
 * next, and how many trials it may spend (docs/architecture.md, "Task
 * scheduler").
 *
 * The scheduler only keeps the books: it never measures anything. A driver
 * asks it for the next (task, batch size) with kl_ts_next, runs that batch
 * on the fleet, and reports what it cost and the task's best latency with
 * kl_ts_report. Everything the limits promise is enforced here, so it is
 * testable with a synthetic latency model and no fleet:
 *
 *  - max_trials_global caps the trials of the whole job; max_trials_per_task
 *    caps each task (0: no cap beyond the global one); trials_per_iter is the
 *    batch of one round of one task. Caps are hard: the batch that
 *    kl_ts_next hands out is cut so that neither cap is ever passed.
 *  - A failed candidate (compile error, crash, timeout, wrong result) counts
 *    as a trial: the driver reports every trial it spent, valid or not.
 *  - A task is done when it reaches its cap, its design space is exhausted
 *    (a round that spent no trial, or kl_ts_exhausted), or it stopped
 *    improving (no better best latency for early_stop_rounds of its rounds).
 *    The job ends when every task is done or the global cap is reached.
 *
 * Order of rounds. Every task is tried once first, in task order
 * (round-robin warm-up; tasks restored with kl_ts_restore skip it). Then:
 *  - round-robin: the tasks that are not done, in turn;
 *  - gradient (Ansor, OSDI'20 section 6): the task with the most negative
 *
 *      dF/dt_i = w_i * ( alpha * (g_i(t) - g_i(t - dt)) / dt
 *                      + (1 - alpha) * min( -g_i(t) / t,
 *                                           beta * C_i / max_k V_k - g_i(t) ) )
 *
 *    where t is the number of rounds of task i, g_i(t) its best latency
 *    after them, w_i its weight, C_i its FLOPs, V_k = C_k / g_k the speed of
 *    the tasks k of its similarity group (same op kind and the same
 *    floor(log_1.618(C + 1)) bucket, task i included). The backward term is
 *    0 while t <= dt; the similarity term is left out (only -g/t counts)
 *    when the group has one member. A task without a valid measurement yet
 *    has g = KL_TS_NO_RESULT_S (a large finite latency, as Ansor does), so
 *    it is preferred. Ties are broken at random; with probability eps a
 *    random task that is not done is picked instead. After each of its
 *    rounds, a task that has had more than 5 rounds beyond every other
 *    member of its group and is still slower than 1/beta of the group's
 *    best speed leaves the group (it was not similar after all).
 *
 * Rounds out at once: up to `depth` rounds may be handed out before they
 * are reported (the conductor keeps the agents busy while the next batch is
 * generated). Caps count the rounds still out, so they hold whatever order
 * the reports come in; a task's warm-up round is handed out once. With depth
 * 1 (the default) kl_ts_next needs the last round reported first.
 * A scheduler is used by one thread.
 */
#ifndef KL_TASKSCHED_H
#define KL_TASKSCHED_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kl_opt.h"

/* The latency (seconds) a task without any valid measurement counts with
 * in the gradient: large and finite, as Ansor's 1e10. */
#define KL_TS_NO_RESULT_S 1e10

/* The most rounds a scheduler hands out before they are reported. */
#define KL_TS_MAX_DEPTH 8

typedef enum {
    KL_TS_ROUND_ROBIN = 0,
    KL_TS_GRADIENT = 1,
} kl_ts_kind;

/* Why a task is done (KL_TS_RUNNING while it is not). */
typedef enum {
    KL_TS_RUNNING = 0,
    KL_TS_DONE_CAP,       /* reached max_trials_per_task */
    KL_TS_DONE_EXHAUSTED, /* its design space has nothing new */
    KL_TS_DONE_STOPPED,   /* no better after early_stop_rounds rounds */
} kl_ts_state;

typedef struct {
    kl_ts_kind kind;
    int64_t max_trials_global;   /* > 0 */
    int64_t max_trials_per_task; /* >= 0; 0: no cap beyond the global */
    int64_t trials_per_iter;     /* > 0 */
    double alpha;                /* [0, 1] */
    double beta;                 /* > 0 */
    int window;                  /* dt, backward window in rounds, >= 1 */
    double eps;                  /* [0, 1] */
    int early_stop_rounds;       /* >= 0; 0: never */
    uint64_t seed;               /* ties and the epsilon-greedy pick */
    int depth;                   /* rounds out at once, [1, KL_TS_MAX_DEPTH] */
} kl_ts_cfg_t;

/* The defaults, written once: kl_ts_cfg_default and KL_TS_OPTS. */
#define KL_TS_DEF_TRIALS_PER_ITER 64
#define KL_TS_DEF_ALPHA 0.2
#define KL_TS_DEF_BETA 2
#define KL_TS_DEF_WINDOW 3
#define KL_TS_DEF_EPS 0.05
#define KL_TS_DEF_EARLY_STOP 0

/* Fills cfg with: gradient, global cap 1000, no per-task cap, 64 trials
 * per iteration, the KL_TS_DEF_ values above, seed 1, depth 1. */
void kl_ts_cfg_default(kl_ts_cfg_t *cfg);

/* The options of the scheduler, for the table of every command that runs
 * a job of several tasks (kiln tune --model): scheduler, alpha, beta,
 * window, sched-eps, early-stop-rounds. */
/* clang-format off */
#define KL_TS_OPTS \
    {"scheduler", KL_OPT_STR, "gradient", KL_NOBOUNDS, "NAME", \
     "task scheduler: gradient (Ansor's) or round-robin"}, \
    {"alpha", KL_OPT_DOUBLE, KL_OPT_DEF(KL_TS_DEF_ALPHA), 0, 1, "A", \
     "gradient: weight of the backward (history) term"}, \
    {"beta", KL_OPT_DOUBLE, KL_OPT_DEF(KL_TS_DEF_BETA), 1e-9, 1e9, "B", \
     "gradient: a task may reach beta x its similar tasks' best speed"}, \
    {"window", KL_OPT_INT, KL_OPT_DEF(KL_TS_DEF_WINDOW), 1, 1e6, "DT", \
     "gradient: backward window in rounds"}, \
    {"sched-eps", KL_OPT_DOUBLE, KL_OPT_DEF(KL_TS_DEF_EPS), 0, 1, "E", \
     "gradient: probability of a random task instead of the best one"}, \
    {"early-stop-rounds", KL_OPT_INT, KL_OPT_DEF(KL_TS_DEF_EARLY_STOP), 0, \
     1e9, "N", \
     "a task whose best is no better after N of its rounds is done (0: " \
     "never)"},
/* clang-format on */

/* Reads the KL_TS_OPTS rows of o (which must be in its table) into cfg;
 * the other fields are left as they are. KL_ERR_INVAL names an unknown
 * scheduler. */
int kl_ts_cfg_from_opts(const kl_opts_t *o, kl_ts_cfg_t *cfg, char *err);

/* "round-robin" or "gradient" to *kind; KL_ERR_INVAL naming the value. */
int kl_ts_kind_parse(const char *s, kl_ts_kind *kind, char *err);
const char *kl_ts_state_name(kl_ts_state st); /* "", "cap", "exhausted", ... */

/* One task as the scheduler sees it. The strings are copied. */
typedef struct {
    const char *name;    /* shown in the summary */
    const char *op_kind; /* "conv2d", ...: similarity groups */
    double flop;         /* > 0 */
    double weight;       /* > 0: how many times the model runs it */
} kl_ts_task_t;

typedef struct kl_ts_s kl_ts_t;

/* Creates a scheduler over n >= 1 tasks. Errors (KL_ERR_INVAL, naming the
 * parameter or the task): a config value out of range, a task without a
 * name or with flop or weight <= 0. */
int kl_ts_new(kl_ts_t **out, const kl_ts_cfg_t *cfg, const kl_ts_task_t *tasks,
              int n, char *err);
void kl_ts_destroy(kl_ts_t **self_p);

/* Gives task i what the store already holds before the first kl_ts_next:
 * `trials` records (failed ones included; they count toward both caps) and
 * the best valid latency among them (seconds; INFINITY or <= 0: none). A
 * task restored with trials > 0 skips the warm-up; its history is taken as
 * ceil(trials / trials_per_iter) rounds that all ended at best_s. A task
 * whose restored trials reach its cap is done. Errors: KL_ERR_INVAL for a
 * bad index, negative trials, or a call after the first kl_ts_next. */
int kl_ts_restore(kl_ts_t *ts, int i, int64_t trials, double best_s, char *err);

/* The tasks that may get no trial at all, in task order: those whose
 * warm-up round starts past the global cap (the global cap is smaller than
 * the warm-up needs). Writes up to max indexes to idx (which may be NULL)
 * and returns how many there are. */
int kl_ts_unreached(const kl_ts_t *ts, int *idx, int max);

/* Picks the next round: *task and *batch (1 <= batch <= trials_per_iter,
 * cut to both caps, the rounds still out counted). Returns
 * KL_ERR_EXHAUSTED when the job is over (every task done or the global cap
 * reached; *task is then -1 and *batch 0), KL_ERR_INVAL when no round can
 * be handed out before one is reported (depth rounds are out, or the rounds
 * out hold what the caps leave; see kl_ts_ready). */
int kl_ts_next(kl_ts_t *ts, int *task, int64_t *batch, char *err);

/* Whether kl_ts_next would hand out a round now. */
bool kl_ts_ready(const kl_ts_t *ts);
/* Rounds handed out and not reported yet. */
int kl_ts_outstanding(const kl_ts_t *ts);

/* Reports the oldest round out for task i: it spent `trials` trials
 * (0..batch, failures included) and the task's best valid latency is now
 * best_s (seconds; INFINITY or <= 0: still none; a value worse than the
 * best known is ignored). A round of 0 trials marks the task exhausted.
 * Errors: KL_ERR_INVAL for a task that has no outstanding round or trials
 * out of 0..batch. */
int kl_ts_report(kl_ts_t *ts, int i, int64_t trials, double best_s, char *err);

/* Marks task i done because its design space has nothing new (e.g. the
 * search said so between rounds). Safe on a task already done. */
void kl_ts_exhausted(kl_ts_t *ts, int i);

/* The gradient dF/dt of task i as kl_ts_next would compute it now (0 for a
 * task that is done): for tests and the verbose log. */
double kl_ts_gradient(const kl_ts_t *ts, int i);

/* Bookkeeping. */
int64_t kl_ts_total_trials(const kl_ts_t *ts);
int64_t kl_ts_trials(const kl_ts_t *ts, int i);
int kl_ts_rounds(const kl_ts_t *ts, int i);
double kl_ts_best_s(const kl_ts_t *ts, int i); /* INFINITY when none */
kl_ts_state kl_ts_task_state(const kl_ts_t *ts, int i);
bool kl_ts_finished(const kl_ts_t *ts); /* the job is over */
/* Index of task i's similarity group, -1 when it is alone in it. */
int kl_ts_group(const kl_ts_t *ts, int i);

/* ---- summary ----------------------------------------------------------- */

/* One row of the summary table. */
typedef struct {
    const char *name;
    double flop;
    double weight;
    double best_s; /* INFINITY when none */
    int64_t trials;
    bool done;
    const char *why; /* kl_ts_state_name of a done task, or "" */
} kl_ts_row_t;

/* Fills rows[0..n) for the n tasks ts was made with (kl_ts_new); the
 * strings are borrowed from ts. */
void kl_ts_rows(const kl_ts_t *ts, kl_ts_row_t *rows);

/* Prints the summary table of n rows to f:
 *   ID | Name | FLOP | Weight | Speed (GFLOPS) | Latency (us) |
 *   Weighted Latency (us) | Trials | Done
 * then the total trials and the total weighted latency (sum over the tasks
 * with a result; the tasks without one are counted and named "-"). */
void kl_ts_print_table(FILE *f, const kl_ts_row_t *rows, int n);

/* The same as one JSON object on one line:
 *   {"tasks":[{"id":0,"name":...,"flop":...,"weight":...,"gflops":...,
 *   "latency_us":...,"weighted_latency_us":...,"trials":...,"done":...,
 *   "why":...}], "total_trials":..., "total_weighted_latency_us":...,
 *   "tasks_without_result":...}
 * (null for the numbers of a task without a result). */
void kl_ts_print_json(FILE *f, const kl_ts_row_t *rows, int n);

#endif
