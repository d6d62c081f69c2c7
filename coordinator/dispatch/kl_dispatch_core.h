/* kl_dispatch_core.h - dispatch's bookkeeping without any socket: agents
 * and their credit, queues per target, requests and the per-candidate state
 * that makes results idempotent, deadlines and retries. Private to
 * coordinator/dispatch: the actor (kl_dispatch.c) feeds it decoded messages
 * and the clock, and sends what it picks. Unit-tested directly.
 *
 * Times are kl_now_s() seconds passed in by the caller, so tests can drive
 * the clock. Results the core accepts or makes (AGENT_LOST, CANCELLED) are
 * appended to an output list the caller takes with kl_dcore_take_results.
 */
#ifndef KL_DISPATCH_CORE_H
#define KL_DISPATCH_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.pb-c.h"
#include "kl_dispatch.h"
#include "kl_net.h"

enum { KL_DC_QUEUED = 0, KL_DC_INFLIGHT = 1, KL_DC_DONE = 2 };

/* One request: a deep copy of a submitted batch. Candidates are stored with
 * id = their index (the id on the wire); user_ids holds the caller's ids. */
typedef struct {
    uint64_t id;
    uint8_t key[16];
    char *target;
    Kiln__KernelArg **args;
    size_t n_args;
    char *ref_source;
    char *ref_entry;
    Kiln__Evaluator evaluator;
    bool has_evaluator;
    Kiln__Candidate *cands; /* n structs */
    Kiln__Candidate **cand_ptrs;
    uint64_t *user_ids;
    uint32_t *cand_bytes; /* source + trace bytes per candidate */
    uint8_t *state;       /* KL_DC_* per candidate */
    uint8_t *attempts;    /* sends so far per candidate */
    size_t n;
    size_t n_done;
    double t_submit;
    double run_s; /* evaluator timeout (default 10 s) */
    /* The least protocol minor of an agent that can read it: 4 when an
     * argument is u8 / s8 (DTYPE_U8, DTYPE_S8), else 1. */
    uint32_t need_minor;
} kl_dreq_t;

/* Checks and copies a batch (see kl_dispatch_submit for the rules). */
int kl_dreq_new(kl_dreq_t **out, const kl_dispatch_batch_t *b, char *err);
void kl_dreq_free(kl_dreq_t **self_p);

/* One candidate held by an agent. */
typedef struct {
    uint64_t req_id;
    uint32_t idx;
    bool expired; /* past its deadline: re-queued, credit still held */
    double deadline;
} kl_dheld_t;

typedef struct {
    bool live;
    kl_peer_t peer;
    char *name;
    char *hostname;
    uint32_t pid;
    uint32_t credit; /* build_slots + 1 */
    size_t n_dev;
    char **dev_target;
    char **dev_features; /* DeviceInfo.features, ','-joined ("vnni") */
    char **dev_name;
    uint32_t *dev_index;
    kl_dheld_t *held;
    size_t n_held;
    size_t cap_held;
    double last_heard;
    double last_hb_sent;
    uint64_t answered;
    uint64_t failures; /* answers other than STATUS_OK */
    bool drained;      /* finishes what it holds, is given no more */
    bool unsandboxed;  /* runs candidates without its sandbox (Hello) */
    /* Protocol minor of its Hello (kl_dcore_hello assumes KL_PROTO_MINOR;
     * the dispatch actor sets the envelope's): requests needing a later
     * minor (kl_dreq_t.need_minor) are not given to it. */
    uint32_t minor;
} kl_dagent_t;

/* What the core picked for one agent: candidates idx[0..n) of req, to be
 * sent in one MeasureRequest on device dev_index. The request names the
 * device's exact target (a task for "cpu" goes out as, e.g.,
 * "cpu/x86_64-avx512"), so agents only ever compare exact strings. */
typedef struct {
    int slot;
    kl_dreq_t *req;
    uint32_t dev_index;
    const char *dev_target; /* the device's exact target */
    size_t n;
    uint32_t *idx; /* owned by the core, valid until the next pick */
} kl_dpick_t;

typedef struct kl_dcore_s kl_dcore_t;

int kl_dcore_new(kl_dcore_t **out, int retries, double compile_s,
                 double margin_s, char *err);
/* Frees every table, request and result not taken. */
void kl_dcore_destroy(kl_dcore_t **self_p);

/* Takes ownership of *req (ids must grow) and queues its candidates.
 * req->t_submit, when not set (0), becomes now. */
void kl_dcore_submit(kl_dcore_t *self, kl_dreq_t **req, double now);

/* Binds agent names to the CURVE key that registered them (hold_s > 0;
 * 0, the default: not bound): while an agent of a name is live, and for
 * hold_s after the last one leaves, kl_dcore_hello refuses that name from
 * any other key. At most 65536 names are remembered (the one gone the
 * longest is forgotten first). */
void kl_dcore_bind_names(kl_dcore_t *self, double hold_s);

/* Registers (or re-registers: its held candidates go back to the queue) the
 * agent of a Hello. Returns its slot, or -1 with err when the Hello is not
 * usable (no device; KL_ERR_AUTH: its name is bound to another key,
 * kl_dcore_bind_names). A registered routing id that comes with another
 * key is the old agent lost and a new one. */
int kl_dcore_hello(kl_dcore_t *self, const kl_peer_t *peer,
                   const Kiln__Hello *hello, double now, char *err);
/* Slot of a registered peer, or -1. */
int kl_dcore_find(const kl_dcore_t *self, const kl_peer_t *peer);
kl_dagent_t *kl_dcore_agent(kl_dcore_t *self, int slot);
/* Number of slots (live or not) to iterate with kl_dcore_agent. */
size_t kl_dcore_nslots(const kl_dcore_t *self);
/* Marks that the agent was heard from. */
void kl_dcore_heard(kl_dcore_t *self, int slot, double now);
/* Forgets an agent: candidates it held go back to the front of their queue,
 * or become AGENT_LOST results after 1 + retries sends. */
void kl_dcore_agent_lost(kl_dcore_t *self, int slot, double now,
                         const char *why);

/* Handles a MeasureResult envelope from the agent in slot, taking *env.
 * Returns true when accepted (a result is appended to the output), false
 * when dropped as a duplicate or unknown (env freed). The agent's credit is
 * given back when it held that candidate. */
bool kl_dcore_result(kl_dcore_t *self, int slot, Kiln__Envelope **env,
                     double now);

/* Hands out work: for each agent with free credit and a matching queue,
 * picks up to its free credit candidates of one request and calls
 * send(arg, pick). send returns a kl_err: KL_ERR_PROTO or KL_ERR_INVAL (the
 * message is out of bounds) answers those candidates STATUS_INVALID; any
 * other error declares that agent lost. Returns the number of candidates
 * sent. */
typedef int (*kl_dcore_send_fn)(void *arg, const kl_dpick_t *pick);
size_t kl_dcore_dispatch(kl_dcore_t *self, double now, kl_dcore_send_fn send,
                         void *arg);

/* Expires candidates past their deadline and declares agents silent for
 * longer than dead_s lost. */
void kl_dcore_tick(kl_dcore_t *self, double now, double dead_s);

/* Cancels a request: queued candidates become CANCELLED results; the slots
 * of agents holding its other candidates are written to slots (at most
 * max, distinct) and counted in *n_slots. KL_ERR_NOTFOUND when the request
 * is unknown or finished. */
int kl_dcore_cancel(kl_dcore_t *self, uint64_t req_id, int *slots, size_t max,
                    size_t *n_slots);

/* Results accepted or made since the last call, in order; the caller owns
 * the array and each result. */
kl_dispatch_result_t **kl_dcore_take_results(kl_dcore_t *self, size_t *n);

size_t kl_dcore_agents(const kl_dcore_t *self, const char *target);
void kl_dcore_stats(const kl_dcore_t *self, kl_dispatch_stats_t *out);
/* Sets or clears drained on every live agent called name; returns how
 * many there were. */
size_t kl_dcore_drain(kl_dcore_t *self, const char *name, bool drained);
/* Grows each time an agent joins, is lost or is drained or undrained:
 * what kl_dcore_agent_list says of credit, devices and drain is the same
 * while it stays. */
uint64_t kl_dcore_agents_gen(const kl_dcore_t *self);
/* A snapshot of the live agents (malloc'd array of *n; the caller frees
 * it). */
kl_dispatch_agent_info_t *kl_dcore_agent_list(const kl_dcore_t *self,
                                              double now, size_t *n);

/* Makes a result that no agent measured (AGENT_LOST, CANCELLED). */
kl_dispatch_result_t *kl_dcore_make_result(const kl_dreq_t *req, size_t idx,
                                           int status, const char *error,
                                           double now);
/* Wraps an agent's MeasureResult envelope (taking it) for the caller. */
kl_dispatch_result_t *kl_dcore_wrap_result(const kl_dreq_t *req, size_t idx,
                                           const kl_dagent_t *a,
                                           Kiln__Envelope *env, double now);

#endif
