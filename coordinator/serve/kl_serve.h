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
 * Tenants: a client is the CURVE key it authenticated with (never a name
 * it claims). A job name belongs to the key that opened it, and an agent
 * name to the agent key that registered it, while it is live and for
 * name_hold_s after it goes: another key's JobHello (Hello) for it is
 * answered Goodbye naming why. Operator keys (KEYS/operators/\*.pub, also
 * admitted as clients) may drain and undrain agents and see every job in
 * a StatusReply; any other client sees its own jobs only, and its Drain
 * is answered DrainReply.error and changes nothing. Each job's requests
 * are held within the limits below; a request over one is answered, for
 * each of its candidates, STATUS_INVALID naming the limit (JobResult.limit)
 * and is not queued. With insecure every client is one key ("") and an
 * operator.
 *
 * A kl_serve_t is driven by one thread: kl_serve_run loops until *stop.
 */
#ifndef KL_SERVE_H
#define KL_SERVE_H

#include <signal.h>
#include <stdbool.h>

#include "kl_dispatch.h"
#include "kl_net.h"

typedef struct kl_serve_s kl_serve_t;

/* The defaults of the limits below (kiln serve's options print the same). */
#define KL_SERVE_DEF_NAME_HOLD_S 600
#define KL_SERVE_DEF_MAX_QUEUED 65536
#define KL_SERVE_DEF_MAX_BYTES 134217728   /* 128 MiB */
#define KL_SERVE_DEF_MAX_CANDIDATE 1048576 /* 1 MiB */
#define KL_SERVE_DEF_MAX_TIMEOUT_MS 600000 /* 10 min */
#define KL_SERVE_DEF_MAX_JOBS_PER_KEY 32

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
    /* What an operator set, kept across restarts: DIR/drained, the names
     * of the drained agents, one a line, rewritten (a temporary file, then
     * rename) on every drain and undrain, read by kl_serve_new. An agent
     * of a name there is drained as it registers. With keys, also
     * DIR/names: the job names bound to client keys ("KEY GONE NAME" a
     * line, GONE the wall-clock second the job went, 0 live), written at
     * most once a second when they change and at destroy, read by
     * kl_serve_new, so a restarted head keeps refusing them to other
     * keys. NULL: kept in memory for the head's life only, nothing
     * written. */
    const char *state_dir;
    /* Seconds a job name stays bound to the client key that opened it
     * after the job goes (silent, Goodbye), and an agent name to its agent
     * key after its agent leaves; while live they are bound too. 0: 600. */
    double name_hold_s;
    /* Per job, what its requests may hold at the head (queued, or out at
     * agents and not answered): candidates, and bytes (each request's
     * packed size); 0: 65536 and 128 MiB. */
    size_t max_queued_per_job;
    size_t max_bytes_per_job;
    /* One candidate's source + entry + trace bytes; 0: 1 MiB. */
    size_t max_candidate_bytes;
    /* A request's evaluator timeout_ms (a candidate's run); 0: 600000. */
    uint32_t max_timeout_ms;
    /* Live jobs one client key may have; 0: 32. */
    size_t max_jobs_per_key;
} kl_serve_config_t;

/* Binds both endpoints. A bind or key failure, or a state_dir that cannot
 * be read, created or written, is returned with the reason in err and
 * nothing left running. */
int kl_serve_new(kl_serve_t **out, const kl_serve_config_t *cfg, char *err);
/* Cancels the work of every job, says Goodbye to jobs and agents, closes
 * both sockets. NULLs *self_p; safe on NULL. */
void kl_serve_destroy(kl_serve_t **self_p);

/* The endpoints actually bound (wildcard ports resolved). Borrowed. */
const char *kl_serve_agents_endpoint(const kl_serve_t *self);
const char *kl_serve_clients_endpoint(const kl_serve_t *self);

/* fn(self, arg) is called from kl_serve_run's thread after each turn of
 * its loop (a few ms apart), e.g. to publish kl_serve_snapshot for
 * --http. NULL fn: none. */
void kl_serve_on_tick(kl_serve_t *self, void (*fn)(kl_serve_t *, void *),
                      void *arg);

/* Serves until *stop becomes non-zero (a signal handler sets it). KL_OK,
 * or an error of the sockets with err. */
int kl_serve_run(kl_serve_t *self, volatile sig_atomic_t *stop, char *err);

/* ---- what the head is doing (kiln fleet status, --http) -------------- */

/* Why a job's work is or is not moving. */
typedef enum {
    KL_SERVE_JOB_IDLE,    /* nothing of it at the head */
    KL_SERVE_JOB_QUEUED,  /* work waiting for free credit, none out */
    KL_SERVE_JOB_RUNNING, /* work held by agents */
    KL_SERVE_JOB_WAITING, /* no live, undrained agent for a target of its
                             queued work (or, with nothing queued, for any
                             of the targets it said JobHello with) */
} kl_serve_job_state_t;

/* "idle", "queued", "running", "waiting". */
const char *kl_serve_job_state_name(kl_serve_job_state_t st);

typedef struct {
    char *name;
    char owner_key[41]; /* Z85, "" with --insecure */
    char **targets;
    size_t n_targets;
    uint32_t weight;
    uint64_t queued, in_flight, done;
    double rate; /* results per second since its first */
    kl_serve_job_state_t state;
    char *waiting_target; /* with KL_SERVE_JOB_WAITING, else NULL */
} kl_serve_job_info_t;

typedef struct {
    char head_id[64];
    double uptime_s;
    uint64_t results_forwarded;       /* JobResults sent to jobs */
    uint64_t requests_received;       /* MeasureRequests from jobs */
    uint64_t jobs_seen;               /* jobs that said JobHello (new names) */
    kl_dispatch_agent_info_t *agents; /* live agents */
    size_t n_agents;
    kl_serve_job_info_t *jobs; /* live jobs */
    size_t n_jobs;
} kl_serve_snap_t;

/* What the head is doing now: plain data, heap. From kl_serve_run's
 * thread only (on_tick), or before kl_serve_run. */
kl_serve_snap_t *kl_serve_snapshot(kl_serve_t *self);
void kl_serve_snap_free(kl_serve_snap_t **snap_p);

#endif
