/* kl_serve.h - the head node of a fleet shared by several tuning jobs
 * (`kiln serve`, docs/architecture.md "The head node", docs/protocol.md
 * section 7).
 *
 * Agents connect to the agent endpoint exactly as to `kiln tune --listen`:
 * that side is a kl_dispatch_t. Jobs (`kiln tune --fleet`, kl_port_fleet.h)
 * connect to the client endpoint, a second ROUTER with its own allow list,
 * and send MeasureRequests with their own ids. The head keeps one queue per
 * (job, target) and hands dispatch only as many candidates of a target as
 * its agents have credit for, picking the job by stride scheduling over
 * candidates handed out (a job of weight w advances by 1/w per candidate),
 * so that saturated jobs get results in proportion to their weights.
 * It stores no records: results go back to their job as they come.
 *
 * Faults: an agent lost is dispatch's (bounded re-sends, then AGENT_LOST);
 * a job silent for client_timeout_s, or that says Goodbye, loses its queued
 * work and its requests in flight are cancelled.
 *
 * A kl_serve_t is driven by one thread: kl_serve_run loops until *stop.
 */
#ifndef KL_SERVE_H
#define KL_SERVE_H

#include <signal.h>
#include <stdbool.h>

#include "kl_net.h"

typedef struct kl_serve_s kl_serve_t;

typedef struct {
    const char *agents_endpoint;  /* e.g. "tcp://0.0.0.0:7070" */
    const char *clients_endpoint; /* e.g. "tcp://0.0.0.0:7071" */
    /* KEYS/coordinator.key and .pub (the head's pair, which agents and
     * jobs pin), allow lists KEYS/agents and KEYS/clients. NULL only with
     * insecure. */
    const char *keys_dir;
    bool insecure;           /* loopback endpoints only (kl_net.h) */
    int heartbeat_ms;        /* to agents and jobs; 0: 1000 */
    double client_timeout_s; /* a job silent this long is dropped; 0: 30 */
    const char *head_id;     /* NULL: "kiln-serve-<pid>" */
} kl_serve_config_t;

/* Binds both endpoints. A bind or key failure is returned with the reason
 * in err and nothing left running. */
int kl_serve_new(kl_serve_t **out, const kl_serve_config_t *cfg, char *err);
/* Cancels the work of every job, says Goodbye to jobs and agents, closes
 * both sockets. NULLs *self_p; safe on NULL. */
void kl_serve_destroy(kl_serve_t **self_p);

/* The endpoints actually bound (wildcard ports resolved). Borrowed. */
const char *kl_serve_agents_endpoint(const kl_serve_t *self);
const char *kl_serve_clients_endpoint(const kl_serve_t *self);

/* Serves until *stop becomes non-zero (a signal handler sets it). KL_OK,
 * or an error of the sockets with err. */
int kl_serve_run(kl_serve_t *self, volatile sig_atomic_t *stop, char *err);

#endif
