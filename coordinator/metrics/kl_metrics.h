/* kl_metrics.h - live metrics of a tuning job over HTTP: `/metrics` in the
 * Prometheus text exposition format (version 0.0.4) and `/` a small status
 * page that reloads itself every 2 s (`kiln tune --http ADDR:PORT`).
 *
 * The tuning loop owns every source (dispatch, tasks, store) and is the
 * only thread that may touch them; the HTTP server (kl_http.h) runs in
 * libmicrohttpd's own thread. So the loop collects a snapshot
 * (kl_metrics_update, rate limited) and publishes it; the server renders
 * the latest published snapshot. The two threads share nothing else.
 *
 * Metric families (HELP and TYPE lines precede each):
 *   kiln_job_info{job}                   gauge 1 (job: the workload or
 *                                        model name)
 *   kiln_job_done                        gauge, 1 once the job ended
 *   kiln_job_elapsed_seconds             gauge
 *   kiln_agents{target}                  gauge, live agents of each exact
 *                                        target the job's tasks run on
 *   kiln_agents_connected                gauge, every live agent
 *   kiln_queue_depth                     gauge, candidates waiting
 *   kiln_in_flight                       gauge, candidates held by agents
 *   kiln_submitted_total                 counter, candidates submitted
 *   kiln_results_total{status}           counter, results accepted by
 *                                        dispatch in this job, by status
 *                                        ("ok", "compile_error", ...; every
 *                                        status is present, 0 included)
 *   kiln_results_per_second              gauge
 *   kiln_resent_total, kiln_agents_lost_total, kiln_duplicates_total
 *   kiln_dispatch_latency_seconds{quantile="0.5"|"0.99"|"1"}  gauge
 *   kiln_task_trials{task,workload}      gauge, trials of the task, the
 *                                        records restored from the store
 *                                        included
 *   kiln_task_valid_trials{task,workload}, kiln_task_restored_trials,
 *   kiln_task_in_flight, kiln_task_max_trials, kiln_task_done  gauges
 *   kiln_task_best_latency_seconds{task,workload,target}  gauge, median
 *                                        of the best verified candidate;
 *                                        absent while the task has none
 *   kiln_task_flop{task,workload}        gauge
 *   kiln_store_bytes                     gauge, size of DIR/data.mdb
 *   kiln_store_map_bytes                 gauge, the LMDB map size
 * A task label is the task's index in the job ("0", "1", ...); workload is
 * its name (e.g. "matmul_1024_1024_1024"); target labels are exact: a
 * task target "cpu" is shown as this machine's CPU target
 * ("cpu/x86_64-avx512"). Without a dispatch (nothing left to tune) the
 * dispatch families are 0; without a store the store families are absent.
 */
#ifndef KL_METRICS_H
#define KL_METRICS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_dispatch.h"
#include "kl_job.h"
#include "kl_opt.h"
#include "kl_store.h"

/* The two option rows of `kiln tune` (both forms): --http ADDR:PORT and
 * --http-linger S. Put KL_METRICS_OPTS, before KL_OPT_END. */
#define KL_METRICS_OPTS                                                        \
    {"http",                                                                   \
     KL_OPT_STR,                                                               \
     NULL,                                                                     \
     KL_NOBOUNDS,                                                              \
     "ADDR:PORT",                                                              \
     "serve live metrics: /metrics (Prometheus text) and / (status page); "    \
     "a bare PORT listens on 127.0.0.1, port 0 picks a free one"},             \
    {                                                                          \
        "http-linger", KL_OPT_DOUBLE, "0", 0, 86400, "S",                      \
            "with --http: keep serving the final metrics this long after "     \
            "the job (a signal ends it sooner)"                                \
    }

#define KL_METRICS_MAX_TARGETS 8

/* ---- snapshots (plain data) -------------------------------------------- */

typedef struct {
    char target[64]; /* exact */
    size_t agents;
} kl_metrics_target_t;

typedef struct {
    char workload[128]; /* the workload's name */
    char target[64];    /* exact */
    double best_s;      /* INFINITY when none */
    double flop;
    int64_t trials, valid, restored, in_flight, cap;
    bool done;
} kl_metrics_task_t;

typedef struct {
    char job[64];
    double elapsed_s;
    bool done;
    bool have_dispatch;
    kl_dispatch_stats_t dispatch;
    size_t n_targets;
    kl_metrics_target_t targets[KL_METRICS_MAX_TARGETS];
    size_t n_tasks;
    kl_metrics_task_t *tasks; /* heap, owned by the snapshot */
    bool have_store;
    uint64_t store_bytes, store_map_bytes;
} kl_metrics_snap_t;

/* A zeroed heap snapshot with room for n_tasks tasks (n_tasks set). */
kl_metrics_snap_t *kl_metrics_snap_new(size_t n_tasks);
void kl_metrics_snap_free(kl_metrics_snap_t **self_p);

/* Fills s from the sources, which are borrowed for the call and must be
 * used by the calling thread only: port (NULL: no fleet yet), the tasks of
 * job (their count must equal s->n_tasks), the job's store (NULL: none)
 * and store_dir (its directory, for the data file's size). job and
 * elapsed_s are left as they are. Fleet errors leave its part zero
 * (have_dispatch false). */
void kl_metrics_collect(kl_metrics_snap_t *s, const kl_port_t *port,
                        const kl_job_t *job, const char *store_dir);

/* The snapshot in the Prometheus text format, and as the HTML status
 * page. Heap strings. Label values and HTML text are escaped. */
char *kl_metrics_render_text(const kl_metrics_snap_t *s);
char *kl_metrics_render_html(const kl_metrics_snap_t *s);

/* The lower-case name of a Kiln__Status ("ok", "compile_error", ...), or
 * NULL for a value outside the enum. */
const char *kl_metrics_status_name(int status);

/* ---- the registry and its HTTP server ---------------------------------- */

typedef struct kl_metrics_s kl_metrics_t;

typedef struct {
    /* "PORT", ":PORT", "ADDR:PORT" or "[IPV6]:PORT"; a missing address is
     * 127.0.0.1. Port 0 picks a free port (see kl_metrics_url). */
    const char *listen;
    /* Shown as kiln_job_info{job=...}; NULL: "tune". */
    const char *job;
    /* The record store's directory (for kiln_store_bytes); may be NULL. */
    const char *store_dir;
    /* kl_metrics_update collects at most once per this many seconds
     * unless forced; 0: 0.5. */
    double min_interval_s;
} kl_metrics_cfg_t;

/* Binds the HTTP server on cfg->listen (kl_http_parse_listen) and starts
 * its thread. A listen value that does not parse is KL_ERR_INVAL; an address
 * that cannot be bound (in use, not local) is KL_ERR_IO naming the address and
 * the reason. A non-loopback address is served (it was asked for explicitly)
 * with a warning on stderr. Until the first publish, the metrics show an
 * empty job. */
int kl_metrics_new(kl_metrics_t **out, const kl_metrics_cfg_t *cfg, char *err);
/* Stops the server (open connections are closed) and frees everything.
 * NULLs *self_p; safe on NULL. */
void kl_metrics_destroy(kl_metrics_t **self_p);

/* "http://HOST:PORT" with the port actually bound. Borrowed. */
const char *kl_metrics_url(const kl_metrics_t *self);

/* Takes *snap (NULLs it) and makes it the one served; job and elapsed_s
 * are set here. Cheap: one pointer swap under a mutex. */
void kl_metrics_publish(kl_metrics_t *self, kl_metrics_snap_t **snap);

/* Collects (kl_metrics_collect) and publishes, at most once per
 * min_interval_s unless force. Call it from the tuning loop after a
 * group of results; with done, the snapshot says the job ended (and is
 * always taken). Safe on a NULL self (no-op), so a job without --http
 * calls it unconditionally. */
void kl_metrics_update(kl_metrics_t *self, const kl_port_t *port,
                       const kl_job_t *job, bool force, bool done);

/* The two steps of `kiln tune --http`, on its parsed options: when --http
 * is given, starts the server (job and store_dir as cfg) and prints
 * "kiln tune: metrics on URL/metrics" to stderr; *out stays NULL when it
 * is not given. */
int kl_metrics_from_opts(kl_metrics_t **out, const kl_opts_t *o,
                         const char *job, const char *store_dir, char *err);
/* After the job (its final kl_metrics_update done): keeps serving for
 * --http-linger seconds, or until *stop is set. No-op on NULL self. */
void kl_metrics_linger(kl_metrics_t *self, const kl_opts_t *o,
                       volatile sig_atomic_t *stop);

#endif
