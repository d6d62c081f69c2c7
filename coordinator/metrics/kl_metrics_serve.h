/* kl_metrics_serve.h - live metrics of a head node over HTTP
 * (`kiln serve --http ADDR:PORT`): `/metrics` in the Prometheus text
 * exposition format (version 0.0.4) and `/` a status page of the agents
 * and jobs that reloads itself every 2 s; 404 for any other path. The
 * server is kl_http.h's; kl_serve_run's thread publishes a snapshot
 * (kl_serve_snapshot) at most every 0.25 s through kl_metrics_serve_tick.
 *
 * Metric families (HELP and TYPE lines precede each):
 *   kiln_serve_info{head_id}                 gauge 1 (head_id: unique per
 *                                            start of the head)
 *   kiln_serve_uptime_seconds                gauge
 *   kiln_serve_results_forwarded_total       counter, JobResults sent to
 *                                            jobs (the head's own CANCELLED
 *                                            and INVALID included)
 *   kiln_serve_requests_received_total       counter, MeasureRequests from
 *                                            jobs
 *   kiln_serve_jobs_seen_total               counter, jobs that said
 *                                            JobHello under a new name
 *   kiln_serve_agents_connected              gauge, live agents
 *   kiln_serve_agent_info{agent,host,target} gauge 1, one per distinct
 *                                            device target of the agent
 *   kiln_serve_agent_busy{agent}             gauge, candidates it holds
 *   kiln_serve_agent_build_slots{agent}      gauge
 *   kiln_serve_agent_results_total{agent}    counter, answers it sent
 *   kiln_serve_agent_failures_total{agent}   counter, answers not ok
 *   kiln_serve_agent_drained{agent}          gauge, 1 while drained
 *   kiln_serve_agent_last_seen_seconds{agent} gauge, since last heard
 *   kiln_serve_jobs                          gauge, live jobs
 *   kiln_serve_job_info{job,owner_key,target} gauge 1, one per target the
 *                                            job said JobHello with
 *                                            (owner_key: its Z85 client key,
 *                                            "" with --insecure)
 *   kiln_serve_job_weight{job}               gauge
 *   kiln_serve_job_queued{job}               gauge, candidates waiting at
 *                                            the head
 *   kiln_serve_job_in_flight{job}            gauge, handed to agents and
 *                                            not answered
 *   kiln_serve_job_results_total{job}        counter, results sent to it
 *   kiln_serve_job_results_per_second{job}   gauge, since its first result
 *   kiln_serve_job_waiting_for_agents{job}   gauge, 1 while no live,
 *                                            undrained agent serves a
 *                                            target of its queued work (or,
 *                                            with nothing queued, any of
 *                                            its targets)
 * An agent's counters restart from 0 when it reconnects (Prometheus
 * treats that as a counter reset). Agent labels are the agents' names; a
 * second live agent of the same name is "NAME#2", a third "NAME#3", so
 * that every series stays unique.
 */
#ifndef KL_METRICS_SERVE_H
#define KL_METRICS_SERVE_H

#include <stdbool.h>

#include "kl_serve.h"

typedef struct kl_metrics_serve_s kl_metrics_serve_t;

/* Publishes at most this often from kl_metrics_serve_tick. */
#define KL_METRICS_SERVE_EVERY_S 0.25

/* Starts the HTTP server on listen (kl_http_parse_listen) for the head s,
 * and publishes its first snapshot; errors as kl_http_new. */
int kl_metrics_serve_new(kl_metrics_serve_t **out, kl_serve_t *s,
                         const char *listen, char *err);
/* Stops the server. NULLs *self_p; safe on NULL. */
void kl_metrics_serve_destroy(kl_metrics_serve_t **self_p);
/* "http://HOST:PORT" with the port actually bound. Borrowed. */
const char *kl_metrics_serve_url(const kl_metrics_serve_t *self);

/* A kl_serve_config_t on_tick (arg: a kl_metrics_serve_t, NULL: no-op):
 * publishes kl_serve_snapshot when KL_METRICS_SERVE_EVERY_S has passed
 * since the last. */
void kl_metrics_serve_tick(kl_serve_t *s, void *arg);

/* A snapshot as Prometheus text and as the status page. Heap strings;
 * label values and HTML text escaped. */
char *kl_metrics_serve_render_text(const kl_serve_snap_t *p);
char *kl_metrics_serve_render_html(const kl_serve_snap_t *p);

#endif
