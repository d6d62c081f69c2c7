/* kl_port_fleet.h - a job's port (kl_port.h) to a head node shared with
 * other jobs (`kiln serve`, coordinator/serve/kl_serve.h), and the queries
 * of `kiln fleet` (status, drain).
 *
 * The job's search, task scheduler and store stay here; only batches and
 * results cross the wire (docs/protocol.md section 7). Request ids are
 * this side's, growing from 1; the head keeps them per job name and drops
 * a request id it already has. The port keeps each request until all its
 * candidates are answered: when the head says goodbye or goes silent, it
 * says JobHello again, and at the next welcome (a restarted head, or the
 * same one, which may have answered into a lost connection) sends the
 * unanswered candidates again under a new request id and cancels the old
 * one; each candidate's result is given to the job once, with the job's
 * request id and index. A head that stays away: agents answers 0, so the
 * job's agent-wait-s ends it. A request the head refuses for one of its
 * limits (JobResult.limit: too many candidates or bytes held for the job,
 * a candidate too big, an evaluator timeout too long) stops the port:
 * its results are not given to the job, and every later call fails with
 * KL_ERR_CLOSED and the head's reason, so the job ends showing it.
 * Heartbeats go out from every call (submit, recv, agents), so a job must
 * call into its port at least every client_timeout_s of the head (30 s by
 * default); kl_job's loop does several times a second.
 *
 * A kl_port_fleet_t is used by one thread at a time.
 */
#ifndef KL_PORT_FLEET_H
#define KL_PORT_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_net.h"
#include "kl_port.h"

typedef struct kl_port_fleet_s kl_port_fleet_t;

typedef struct {
    const char *endpoint; /* the head's client endpoint */
    /* This side's keys (keys_dir/name.key) and the head's public key
     * (server_key_file), or insecure. */
    kl_net_security_t security;
    /* The job's name and weight (0: 1), and its targets (for status).
     * name NULL: no JobHello (kiln fleet status / drain only). */
    const char *name;
    uint32_t weight;
    const char *const *targets;
    size_t n_targets;
    /* Seconds to wait for the head's JobWelcome; 0: 10. */
    double connect_s;
} kl_port_fleet_config_t;

/* Connects and, with a name, says JobHello and waits for JobWelcome. A
 * head that refuses the key (KL_ERR_AUTH), says Goodbye (KL_ERR_CLOSED,
 * its reason in err) or does not answer in connect_s (KL_ERR_TIMEOUT) is
 * an error naming the endpoint. */
int kl_port_fleet_new(kl_port_fleet_t **out, const kl_port_fleet_config_t *cfg,
                      char *err);
/* Says Goodbye (the head drops what is left of this job) and closes.
 * NULLs *self_p; safe on NULL. */
void kl_port_fleet_destroy(kl_port_fleet_t **self_p);

/* The port (borrowed: self must outlive its use). submit sends the batch
 * as one MeasureRequest; recv gives JobResults as kl_dispatch results;
 * cancel sends Cancel; agents asks the head (live agents of target that
 * are not drained; 0 when the head does not answer within 2 s). */
kl_port_t kl_port_fleet(kl_port_fleet_t *self);

/* Asks the head for its status: *out is the reply's envelope (body
 * status_reply; free with kl_net_envelope_free). KL_ERR_TIMEOUT when no
 * answer came within timeout_ms. */
int kl_port_fleet_status(kl_port_fleet_t *self, Kiln__Envelope **out,
                         int timeout_ms, char *err);
/* Drains (undrain false) or undrains the agents called agent; *matched is
 * how many the head has. A head that refuses it (this side's key is not an
 * operator's) is KL_ERR_AUTH with its reason. */
int kl_port_fleet_drain(kl_port_fleet_t *self, const char *agent, bool undrain,
                        size_t *matched, int timeout_ms, char *err);

#endif
