/* kl_dispatch.h - the coordinator's dispatch: agent registry, one queue per
 * target, credit-based flow control, heartbeats, retries and cancellation
 * (docs/architecture.md, docs/protocol.md).
 *
 * A kl_dispatch_t is an actor: kl_dispatch_new starts a thread that owns
 * the ROUTER socket (common/kl_net) and every table; the functions below
 * talk to it over inproc:// ZeroMQ pipes. One handle is used by one caller
 * thread at a time (the search / tuning loop, or `kiln measure`).
 *
 * What the actor does:
 *  - Registers an agent on Hello (routing id, name, devices, build slots;
 *    credit = build_slots + 1) and answers Welcome. A Hello of another
 *    major protocol version gets a Goodbye naming both versions. Any other
 *    message from an unknown peer gets Goodbye "unknown agent, say Hello".
 *  - Sends a Heartbeat to every agent each heartbeat_ms; an agent silent
 *    for 3 intervals is dead. Its candidates go back to the front of their
 *    queue; a candidate sent more than 1 + retries times is answered with
 *    STATUS_AGENT_LOST instead.
 *  - Dispatches a candidate only to an agent with free credit whose device
 *    target matches the task target: exact match, except that the task
 *    target "cpu" (or "cuda") matches any "cpu/..." ("cuda/...") device,
 *    and a target refined by CPU features ("cpu/x86_64-avx512+vnni")
 *    matches only devices that list them (kl_dispatch_device_match).
 *    Candidates of one request are batched into one MeasureRequest, up to
 *    the agent's free credit (and a quarter of the frame limit in source
 *    bytes). The MeasureRequest names the device's exact target, so a task
 *    for "cpu" reaches an agent as, e.g., "cpu/x86_64-avx512". A request
 *    that kl_net refuses to send (out of its bounds) is answered
 *    STATUS_INVALID.
 *  - Treats a candidate as lost when it has been held by an agent longer
 *    than (candidates the agent held when it was sent + 1) x (evaluator
 *    timeout + compile allowance) + margin. The agent keeps that credit
 *    consumed until it answers, so a stuck agent gets no more work.
 *  - Accepts each (request, candidate) result once; duplicates and late
 *    answers for a finished candidate are counted and dropped.
 *  - Never looks inside a candidate's source.
 */
#ifndef KL_DISPATCH_H
#define KL_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.pb-c.h"
#include "kl_net.h"

typedef struct kl_dispatch_s kl_dispatch_t;

typedef struct {
    /* ROUTER endpoint to bind, e.g. "tcp://0.0.0.0:7070", or port "*" for
     * an ephemeral one (the bound port is then given by
     * kl_dispatch_endpoint). */
    const char *endpoint;
    /* Passed to kl_net_server_new as is. */
    kl_net_security_t security;
    /* Heartbeat interval sent to agents in Welcome; 0: 1000. */
    int heartbeat_ms;
    /* Re-sends after an agent is lost; < 0: the default, 2. */
    int retries;
    /* Seconds added to a candidate's evaluator timeout for its compile;
     * 0: 60. */
    double compile_allowance_s;
    /* Seconds added once to every deadline; 0: 5. */
    double margin_s;
    /* Shown to agents in Welcome; NULL: "kiln-<pid>". */
    const char *coordinator_id;
    /* > 0: an agent name is bound to the CURVE key that registered it: a
     * Hello with that name from another key is answered Goodbye (naming
     * why) while an agent of the name is live and for this many seconds
     * after the last one leaves (kiln serve: --name-hold-s). 0: names are
     * not bound (kiln tune --listen, whose agents are one operator's). */
    double name_hold_s;
} kl_dispatch_config_t;

/* Starts the actor and binds its ROUTER. A bind or key failure is returned
 * with the reason in err (and no thread is left running). */
int kl_dispatch_new(kl_dispatch_t **out, const kl_dispatch_config_t *cfg,
                    char *err);
/* Says Goodbye to every agent, stops the actor, frees results not yet
 * received. NULLs *self_p; safe on NULL. */
void kl_dispatch_destroy(kl_dispatch_t **self_p);

/* The endpoint actually bound (wildcard port resolved). Borrowed, valid
 * until destroy. */
const char *kl_dispatch_endpoint(const kl_dispatch_t *self);

/* One batch of candidates of one workload for one target. Everything is
 * borrowed for the call only: submit copies what it needs. */
typedef struct {
    const uint8_t *workload_key; /* 16 bytes */
    const char *target;          /* "cpu", "cpu/x86_64-avx512", "cuda/sm_90" */
    Kiln__KernelArg *const *args;
    size_t n_args;
    const char *reference_source;
    const char *reference_entry;
    const Kiln__Evaluator *evaluator; /* NULL: agent defaults */
    /* Each candidate's id is the caller's; ids must be distinct within a
     * batch (KL_ERR_INVAL otherwise). */
    Kiln__Candidate *const *candidates;
    size_t n_candidates;
} kl_dispatch_batch_t;

/* Queues a batch and returns its request id (> 0). The batch is checked
 * (16-byte key, a target, at least one candidate, each with a source and an
 * entry, distinct ids, at most KL_NET_MAX_ARGS args): KL_ERR_INVAL with a
 * message otherwise. Candidates wait in the queue of their target until an
 * agent of that target has credit; there is no limit on the queue. */
int kl_dispatch_submit(kl_dispatch_t *self, const kl_dispatch_batch_t *batch,
                       uint64_t *request_id, char *err);

/* Drops the queued candidates of a request (each answered with a
 * STATUS_CANCELLED result) and sends Cancel to the agents holding the
 * others, whose answers (CANCELLED, or a result for a candidate already
 * started) still arrive through kl_dispatch_recv. Unknown or finished
 * request: KL_ERR_NOTFOUND. */
int kl_dispatch_cancel(kl_dispatch_t *self, uint64_t request_id, char *err);

/* One result, as measured by an agent or made by dispatch (AGENT_LOST,
 * CANCELLED; then agent is ""). Owned by the caller: free with
 * kl_dispatch_result_free. */
typedef struct {
    /* The agent's answer; result->candidate_id is the caller's id. */
    Kiln__MeasureResult *result;
    uint64_t request_id;
    uint64_t candidate_id;
    size_t index; /* position of the candidate in its batch */
    const char *agent;
    const char *hostname;
    const char *device_name;
    const char *device_target;
    /* Times the candidate was sent (1 + re-sends after a lost agent). */
    unsigned attempts;
    /* Seconds from submit to the result's arrival. */
    double turnaround_s;
    void *priv_; /* owned wire envelope, if any */
} kl_dispatch_result_t;

/* Waits up to timeout_ms (0: no wait, -1: forever) for the next result.
 * KL_OK and *out, or KL_ERR_TIMEOUT when none came. Results arrive in the
 * order they are accepted. */
int kl_dispatch_recv(kl_dispatch_t *self, kl_dispatch_result_t **out,
                     int timeout_ms, char *err);
void kl_dispatch_result_free(kl_dispatch_result_t **self_p);
/* A ZeroMQ socket to wait on with zmq_poll (ZMQ_POLLIN) next to the
 * caller's own sockets: readable while results wait at the actor. Results
 * that kl_dispatch_recv already took from it and has not handed out yet do
 * not show: receive with timeout 0 until KL_ERR_TIMEOUT before polling.
 * Borrowed; only for polling. */
void *kl_dispatch_socket(kl_dispatch_t *self);

/* Number of live agents with a device matching target (NULL: all live
 * agents). */
int kl_dispatch_agents(kl_dispatch_t *self, const char *target, size_t *n,
                       char *err);

typedef struct {
    size_t agents;
    size_t queued;    /* candidates waiting for an agent */
    size_t in_flight; /* candidates held by agents */
    size_t requests;  /* requests with candidates not yet answered */
    uint64_t submitted;
    uint64_t results;         /* accepted, all statuses */
    uint64_t by_status[8];    /* indexed by Kiln__Status */
    uint64_t duplicates;      /* results dropped as already answered */
    uint64_t resent;          /* candidates re-queued after a loss */
    uint64_t agents_lost;     /* agents declared dead or gone */
    uint64_t requests_sent;   /* MeasureRequest messages */
    uint64_t version_refused; /* Hellos of another major version */
    double results_per_s;     /* results / (last result - first submit) */
    /* Dispatch latency: from submit to the candidate's first send to an
     * agent, over the last 65536 first sends, in seconds. */
    double latency_p50_s;
    double latency_p99_s;
    double latency_max_s;
    kl_net_stats_t net;
} kl_dispatch_stats_t;

int kl_dispatch_stats(kl_dispatch_t *self, kl_dispatch_stats_t *out, char *err);

/* One live agent, as kl_dispatch_agent_list sees it (strings cut to fit;
 * devices past the first KL_DISPATCH_INFO_DEVICES only counted). */
#define KL_DISPATCH_INFO_DEVICES 8
typedef struct {
    char name[128];
    char hostname[128];
    size_t n_devices;
    char device_target[KL_DISPATCH_INFO_DEVICES][64];
    char device_features[KL_DISPATCH_INFO_DEVICES][64]; /* "vnni,..." */
    char device_name[KL_DISPATCH_INFO_DEVICES][64];
    uint32_t credit;  /* build_slots + 1 */
    uint32_t busy;    /* candidates it holds */
    uint64_t results; /* answers to candidates it held */
    uint64_t failures;
    double last_seen_s; /* seconds since it was last heard */
    bool drained;
    bool unsandboxed; /* kiln-agent --unsafe-no-sandbox (its Hello) */
} kl_dispatch_agent_info_t;

/* A snapshot of the live agents: *out is a malloc'd array of *n entries
 * (free() it; set even when *n is 0). */
int kl_dispatch_agent_list(kl_dispatch_t *self, kl_dispatch_agent_info_t **out,
                           size_t *n, char *err);

/* Grows each time an agent joins, is lost, or is drained or undrained
 * (read without a trip to the actor): an agent list kept from
 * kl_dispatch_agent_list is still right about names, devices, credit and
 * drain while this has not changed since just before it was read. */
uint64_t kl_dispatch_agents_gen(kl_dispatch_t *self);

/* Drain (drained true) or undrain every live agent called name: a drained
 * agent finishes what it holds and is given no more work; its queued
 * candidates wait for other agents. *matched (may be NULL) is the number
 * of agents of that name; none is not an error. */
int kl_dispatch_drain(kl_dispatch_t *self, const char *name, bool drained,
                      size_t *matched, char *err);

/* True when a device of device_target may run a task of task_target: the
 * same string, or a bare kind ("cpu", "cuda") and a device of that kind
 * ("cpu/x86_64-avx512"). A simulated target ("sim/...", kl_target.h)
 * matches simulated ones only, by the same rule ("sim/cpu" matches
 * "sim/cpu/x86_64-avx512"), and a real one real ones only. */
bool kl_dispatch_target_match(const char *task_target,
                              const char *device_target);

/* The same for a device that reports features (DeviceInfo.features,
 * ','-joined; NULL or "" for none): a task target refined by features
 * ("cpu/x86_64-avx512+vnni", kl_target.h) matches a device whose target
 * matches the unrefined one ("cpu/x86_64-avx512") and that lists every
 * feature; an unrefined task target ignores the features, so f32 work
 * goes to every device of its target. kl_dispatch_target_match is this
 * with no features: a refined task matches no device there. */
bool kl_dispatch_device_match(const char *task_target,
                              const char *device_target,
                              const char *device_features);

#endif
