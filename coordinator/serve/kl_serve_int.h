/* kl_serve_int.h - the head node's tables, shared by kl_serve.c (the
 * loop, clients' messages), kl_serve_jobs.c (jobs, their requests, sends),
 * kl_serve_share.c (the fair share, results), kl_serve_status.c (agents,
 * status, drain), kl_serve_state.c and kl_serve_tenants.c. Private to
 * coordinator/serve. */
#ifndef KL_SERVE_INT_H
#define KL_SERVE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_serve.h"

/* Candidates of one request handed to dispatch at a time: small, so that
 * the share between jobs is decided here, not in dispatch's queue. */
#define KL_SERVE_CHUNK 4
/* Messages a job may leave unread at the head (its send queue full, the
 * rest kept here) before the head drops it as not reading. */
#define KL_SERVE_BACKLOG_MAX 200000
/* How often at most the agent list (credit, drained) is read from
 * dispatch for the fair share: only when kl_dispatch_agents_gen says it
 * changed (a StatusQuery, AgentsQuery or Drain reads it at once). */
#define KL_SERVE_AGENTS_EVERY_S 0.05
/* Names of jobs gone that one client key keeps bound at most (its live
 * jobs aside): past it the one gone the longest is forgotten. */
#define KL_SERVE_NAMES_PER_KEY 1024
/* How often at most KEYS/operators is read again (a key added or removed
 * counts within this). */
#define KL_SERVE_OPERATORS_EVERY_S 1.0

typedef struct kl_sjob_s kl_sjob_t;

/* One MeasureRequest of a job. */
typedef struct {
    kl_sjob_t *job;
    uint64_t id;         /* the job's */
    Kiln__Envelope *env; /* owned; env->request */
    size_t next;         /* first candidate not handed to dispatch */
    size_t n_out;        /* handed to dispatch, not answered */
    size_t n_done;
    double t_recv;
    size_t tgt;   /* index in kl_serve_s.tgts of its target */
    size_t bytes; /* its packed size, counted in its job's held_bytes */
} kl_sreq_t;

struct kl_sjob_s {
    kl_peer_t peer;
    char *name;
    char owner_key[41]; /* the client key it said JobHello with */
    uint32_t weight;
    char **targets;
    size_t n_targets;
    double last_heard;
    double pass; /* stride scheduling: candidates handed out / weight */
    double t_first;
    uint64_t done;
    bool gone; /* forgotten; kept until its chunks are answered */
    /* What its requests hold (kl_serve_config_t's per-job limits). */
    size_t held_cands, held_bytes;
    /* Its backlog went past KL_SERVE_BACKLOG_MAX messages or
     * max_bytes_per_job bytes: dropped at the next tick, nothing more
     * kept for it. */
    bool unread;
    kl_sreq_t **reqs;
    size_t n_reqs;
    size_t q_from; /* reqs[0 .. q_from) have nothing queued any more */
    /* Messages to the job that its full send queue did not take, packed,
     * oldest first from backlog_head: sent before anything newer, and
     * while any is left the job is handed no new work. */
    ProtobufCBinaryData *backlog;
    size_t backlog_head, n_backlog, cap_backlog, backlog_bytes;
};

/* A job name bound to the client key that opened it (kl_serve_tenants.c);
 * gone_at 0 while the job is live. */
typedef struct {
    char *name;
    char key[41];
    double gone_at;
} kl_sname_t;

/* A target some job asked for: the credit of its agents (read once per
 * refresh of the agent list) and what the head handed dispatch of it and
 * has not had answered, so that the fair share's "room" costs no scan. */
typedef struct {
    char *name;
    size_t cap;       /* kl_serve__capacity at agents_gen cap_gen */
    uint64_t cap_gen; /* 0: not computed yet */
    size_t out;       /* candidates out at dispatch, not answered */
} kl_starget_t;

/* Candidates [off, off + n) of req, submitted to dispatch as disp_id. */
typedef struct {
    uint64_t disp_id;
    kl_sreq_t *req;
    size_t off, n, answered;
} kl_schunk_t;

struct kl_serve_s {
    kl_serve_config_t cfg;
    char head_id[64];
    kl_dispatch_t *disp;
    kl_net_t *net;
    kl_sjob_t **jobs;
    size_t n_jobs;
    kl_schunk_t *chunks;
    size_t n_chunks, cap_chunks;
    /* disp_id -> index in chunks (open addressing; key 0: empty). */
    uint64_t *chunk_keys;
    size_t *chunk_idx;
    size_t chunk_map_cap;
    kl_starget_t *tgts;
    size_t n_tgts;
    kl_dispatch_agent_info_t *agents;
    size_t n_agents;
    uint64_t agents_gen;      /* grows with each read of the agent list */
    uint64_t agents_disp_gen; /* kl_dispatch_agents_gen at the last read */
    double agents_at, next_hb;
    uint64_t hb_seq;
    void (*on_tick)(kl_serve_t *, void *);
    void *tick_arg;
    /* For kl_serve_snapshot (kl_serve_status.c). */
    double t_start;
    uint64_t n_forwarded, n_requests, n_jobs_seen;
    /* Agent names an operator drained (kl_serve_state.c). */
    char **drained;
    size_t n_drained;
    /* Tenants (kl_serve_tenants.c): job names bound to keys, the
     * operator keys (KEYS/operators, NULL with insecure) as last read, and
     * the last refusal logged. */
    kl_sname_t *names;
    size_t n_names, cap_names;
    char *ops_dir;
    char **ops;
    size_t n_ops;
    double ops_at;
    char refused[KL_ERRMSG_LEN];
    double refused_at;
    /* names changed since DIR/names was written, and when it was. */
    bool names_dirty;
    double names_saved_at;
};

/* Sends env to a client that is not a job (kiln fleet) without waiting: a
 * full queue drops it (the client asks again), a peer gone is not an
 * error. */
void kl_serve__send(kl_serve_t *s, const kl_peer_t *peer, Kiln__Envelope *env);
/* Sends env to job j without waiting; what its full queue does not take
 * waits in j's backlog, in order (sent on by kl_serve__flush). */
void kl_serve__send_job(kl_serve_t *s, kl_sjob_t *j, Kiln__Envelope *env);
/* Sends job j a result for candidate i of r that the head makes itself
 * (CANCELLED, INVALID) with why. */
void kl_serve__answer(kl_serve_t *s, kl_sreq_t *r, size_t i, Kiln__Status st,
                      const char *why);
/* Sends what jobs' full queues did not take, oldest first, until a queue
 * is full again. Whether there is any left. */
bool kl_serve__flush(kl_serve_t *s);

/* Jobs (kl_serve_jobs.c). The live job of a peer (its routing id and
 * key), of a name; a request of j by id; NULL when none. */
kl_sjob_t *kl_serve__job_by_peer(kl_serve_t *s, const kl_peer_t *p);
kl_sjob_t *kl_serve__job_by_name(kl_serve_t *s, const char *name);
kl_sreq_t *kl_serve__req_find(kl_sjob_t *j, uint64_t id);
/* Frees a request once nothing of it is queued or out, and a forgotten job
 * once it has no request left. */
void kl_serve__maybe_free(kl_serve_t *s, kl_sreq_t *r);
/* Forgets a job: queued work dropped, work in flight cancelled. */
void kl_serve__job_gone(kl_serve_t *s, kl_sjob_t *j, const char *why);
/* Frees j, its requests and its backlog (not out of s->jobs). */
void kl_serve__job_free(kl_sjob_t *j);

/* The fair share (kl_serve_share.c). The index in s->tgts of target, added
 * when new. */
size_t kl_serve__target(kl_serve_t *s, const char *target);
/* Cancels at the agents what dispatch holds of r. */
void kl_serve__cancel_out(kl_serve_t *s, kl_sreq_t *r);
/* Hands out work while some target has room: each time to the job of
 * least pass among those with a ready request. */
void kl_serve__schedule(kl_serve_t *s);
/* The least pass of the jobs with queued work but except (-1: none). */
double kl_serve__min_pass(const kl_serve_t *s, const kl_sjob_t *except);
/* Sends the results dispatch has on to their jobs. */
void kl_serve__drain_results(kl_serve_t *s);
/* Reads the agent list from dispatch when it changed, at most every
 * KL_SERVE_AGENTS_EVERY_S (force: at once, changed or not). */
void kl_serve__refresh_agents(kl_serve_t *s, double now, bool force);
/* Credit of the live, undrained agents that take work of target; their
 * number in *n_agents (may be NULL). */
size_t kl_serve__capacity(const kl_serve_t *s, const char *target,
                          size_t *n_agents);
/* Answers AgentsQuery, StatusQuery and Drain. */
void kl_serve__on_agents(kl_serve_t *s, const kl_peer_t *peer,
                         const Kiln__AgentsQuery *q);
void kl_serve__on_status(kl_serve_t *s, const kl_peer_t *peer, uint64_t seq,
                         double now);
void kl_serve__on_drain(kl_serve_t *s, const kl_peer_t *peer,
                        const Kiln__Drain *d);

/* The drained names (kl_serve_state.c): read from cfg.state_dir (and
 * written back at once, so that a directory that cannot be written is
 * an error at start); remembered or forgotten on a drain or undrain (and
 * the file rewritten), true when the name was remembered before; applied
 * to the agents of s->agents that registered undrained; freed. */
int kl_serve__state_load(kl_serve_t *s, char *err);
bool kl_serve__state_has(const kl_serve_t *s, const char *name);
bool kl_serve__state_set(kl_serve_t *s, const char *name, bool drained);
void kl_serve__state_apply(kl_serve_t *s);
void kl_serve__state_free(kl_serve_t *s);
/* The job names bound to keys, kept in cfg.state_dir's DIR/names (not
 * with insecure): read at start (a name whose hold is over is dropped, a
 * job live when the head stopped counts as gone at the start, so its
 * hold starts again), written back at once; then written when they
 * changed, at most once a second (force: now, if changed). */
int kl_serve__names_load(kl_serve_t *s, char *err);
void kl_serve__names_save(kl_serve_t *s, double now, bool force);

/* Tenants (kl_serve_tenants.c). Whether key is an operator's (insecure:
 * every client is); KEYS/operators is read again when
 * KL_SERVE_OPERATORS_EVERY_S old. */
bool kl_serve__is_operator(kl_serve_t *s, const char *key, double now);
/* Reads KEYS/operators at start and says how many keys it holds. */
void kl_serve__operators_load(kl_serve_t *s);
/* True, with the reason in why, when a new job name from key is refused:
 * the name is bound to another key (its job went less than name_hold_s
 * ago), or key has max_jobs_per_key live jobs. */
bool kl_serve__job_refused(kl_serve_t *s, const char *name, const char *key,
                           double now, char *why, size_t len);
/* The job of name (opened by key) is live / went at now. */
void kl_serve__name_live(kl_serve_t *s, const char *name, const char *key);
void kl_serve__name_gone(kl_serve_t *s, const char *name, double now);
/* True, with the reason in why and the limit's option name in *limit,
 * when request m (bytes packed) of job j breaks a limit of the head. */
bool kl_serve__request_refused(const kl_serve_t *s, const kl_sjob_t *j,
                               const Kiln__MeasureRequest *m, size_t bytes,
                               char *why, size_t len, const char **limit);
/* Logs a refusal (warning); one of the same tag as the last (e.g. the
 * limit and the key) at most once a minute, the others at debug level. */
void kl_serve__log_refusal(kl_serve_t *s, const char *tag, const char *what,
                           double now);
void kl_serve__tenants_free(kl_serve_t *s);

#endif
