/* kl_dispatch.c - the dispatch actor (a thread owning the ROUTER and the
 * core tables) and the API that talks to it over two inproc pipes: "cmd"
 * (requests and their replies) and "res" (batches of results, pushed). */
#include "kl_dispatch.h"
#include "kl_dispatch_core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"

enum { S_SUBMIT = 1, S_CANCEL, S_AGENTS, S_STATS, S_LIST, S_DRAIN, S_TERM };

typedef struct {
    int op;
    void *ptr;
    uint64_t arg;
    char target[128];
} s_cmd_t;

typedef struct {
    int rc;
    size_t n;
    char err[KL_ERRMSG_LEN];
} s_reply_t;

/* A batch of results crossing the res pipe. */
typedef struct {
    kl_dispatch_result_t **v;
    size_t n;
} s_batch_t;

struct kl_dispatch_s {
    void *ctx;
    void *cmd; /* PAIR, caller side */
    void *res; /* PAIR, caller side */
    pthread_t thread;
    bool started;
    char endpoint[KL_ERRMSG_LEN];
    uint64_t next_req;
    kl_dispatch_config_t cfg;
    char id[64];
    char cmd_ep[64], res_ep[64];
    /* Results received but not yet handed out. */
    kl_dispatch_result_t **pend;
    size_t pend_head, pend_n;
    /* kl_dcore_agents_gen as of the actor's last loop. */
    _Atomic uint64_t agents_gen;
};

/* ---- the actor ---- */

typedef struct {
    kl_dispatch_t *api; /* read-only config */
    void *cmd, *res;
    kl_net_t *net;
    kl_dcore_t *core;
    double hb_s, next_tick;
    uint64_t hb_seq;
    bool term;
    Kiln__Candidate **scratch;
    size_t scratch_cap;
    /* The last Hello refused and when it was logged: an agent refused
     * says Hello again every interval, logged once a minute. */
    char refused[KL_ERRMSG_LEN];
    double refused_at;
} s_actor_t;

static int s_send_env(s_actor_t *s, const kl_peer_t *peer, Kiln__Envelope *env)
{
    char err[KL_ERRMSG_LEN];
    int rc = kl_net_send(s->net, peer, env, err);
    if (rc != KL_OK)
        kl_warn("dispatch: send: %s", err);
    return rc;
}

static void s_goodbye(s_actor_t *s, const kl_peer_t *peer, const char *why)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Goodbye bye = KILN__GOODBYE__INIT;
    bye.reason = (char *)why;
    env.body_case = KILN__ENVELOPE__BODY_GOODBYE;
    env.goodbye = &bye;
    s_send_env(s, peer, &env);
}

static int s_send_pick(void *arg, const kl_dpick_t *p)
{
    s_actor_t *s = arg;
    kl_dreq_t *r = p->req;
    kl_dagent_t *a = kl_dcore_agent(s->core, p->slot);
    if (s->scratch_cap < p->n) {
        s->scratch_cap = p->n;
        s->scratch = kl_xrealloc(s->scratch, p->n * sizeof *s->scratch);
    }
    for (size_t i = 0; i < p->n; i++)
        s->scratch[i] = r->cand_ptrs[p->idx[i]];
    Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
    m.request_id = r->id;
    m.workload_key.data = r->key;
    m.workload_key.len = 16;
    m.target = (char *)p->dev_target;
    m.n_args = r->n_args;
    m.args = r->args;
    m.reference_source = r->ref_source;
    m.reference_entry = r->ref_entry;
    m.evaluator = r->has_evaluator ? &r->evaluator : NULL;
    m.n_candidates = p->n;
    m.candidates = s->scratch;
    m.device_index = p->dev_index;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &m;
    return s_send_env(s, &a->peer, &env);
}

static void s_on_hello(s_actor_t *s, const kl_peer_t *peer,
                       const Kiln__Hello *h, uint32_t minor, double now)
{
    char err[KL_ERRMSG_LEN];
    int slot = kl_dcore_hello(s->core, peer, h, now, err);
    if (slot < 0) {
        if (strcmp(err, s->refused) != 0 || now - s->refused_at > 60) {
            kl_warn("dispatch: %s", err);
            snprintf(s->refused, sizeof s->refused, "%s", err);
            s->refused_at = now;
        }
        s_goodbye(s, peer, err);
        return;
    }
    kl_dagent_t *a = kl_dcore_agent(s->core, slot);
    a->minor = minor;
    if (minor < 4)
        kl_warn("agent %s speaks protocol %d.%u: it is given no integer "
                "(u8 / s8) tasks, which need %d.4; upgrade it",
                a->name, KL_PROTO_MAJOR, minor, KL_PROTO_MAJOR);
    const char *feats = a->n_dev ? a->dev_features[0] : "";
    kl_info("agent %s (%s pid %u) joined: %s%s%s%s, credit %u", a->name,
            a->hostname, a->pid, a->dev_target[0], *feats ? " (features " : "",
            feats, *feats ? ")" : "", a->credit);
    if (a->unsandboxed)
        kl_warn("agent %s runs candidates WITHOUT its sandbox "
                "(kiln-agent --unsafe-no-sandbox): a candidate can read and "
                "change what its user can; its results say unsandboxed",
                a->name);
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Welcome w = KILN__WELCOME__INIT;
    w.coordinator_id = s->api->id;
    w.heartbeat_ms = (uint32_t)s->api->cfg.heartbeat_ms;
    env.body_case = KILN__ENVELOPE__BODY_WELCOME;
    env.welcome = &w;
    if (s_send_env(s, peer, &env) != KL_OK)
        kl_dcore_agent_lost(s->core, slot, now, "Welcome not sent");
}

static void s_on_version(s_actor_t *s, const kl_peer_t *peer,
                         const Kiln__Envelope *env)
{
    char why[160];
    snprintf(why, sizeof why,
             "protocol version %u.%u refused: this coordinator speaks %d.%d",
             env->version_major, env->version_minor, KL_PROTO_MAJOR,
             KL_PROTO_MINOR);
    kl_warn("dispatch: %s", why);
    s_goodbye(s, peer, why);
}

/* One envelope from the ROUTER; takes *env. */
static void s_on_message(s_actor_t *s, const kl_peer_t *peer,
                         Kiln__Envelope **env, double now)
{
    Kiln__Envelope *e = *env;
    int slot = kl_dcore_find(s->core, peer);
    /* The agent is the key it authenticated with, not the routing id
     * (which a client may pick): another key is not that agent. */
    if (slot >= 0 &&
        strcmp(kl_dcore_agent(s->core, slot)->peer.key, peer->key) != 0)
        slot = -1;
    if (e->body_case == KILN__ENVELOPE__BODY_HELLO &&
        e->version_minor < KL_PROTO_MINOR_AGENT_MIN) {
        char why[200];
        snprintf(why, sizeof why,
                 "agent protocol %u.%u refused: this coordinator needs %d.%d "
                 "or later (constant inputs, ROLE_CONSTANT); upgrade the agent",
                 e->version_major, e->version_minor, KL_PROTO_MAJOR,
                 KL_PROTO_MINOR_AGENT_MIN);
        kl_warn("dispatch: %s", why);
        s_goodbye(s, peer, why);
    } else if (e->body_case == KILN__ENVELOPE__BODY_HELLO) {
        s_on_hello(s, peer, e->hello, e->version_minor, now);
    } else if (slot < 0) {
        if (e->body_case != KILN__ENVELOPE__BODY_GOODBYE)
            s_goodbye(s, peer, "unknown agent, say Hello");
    } else if (e->body_case == KILN__ENVELOPE__BODY_RESULT) {
        kl_dcore_result(s->core, slot, env, now);
    } else if (e->body_case == KILN__ENVELOPE__BODY_GOODBYE) {
        char why[300];
        snprintf(why, sizeof why, "said Goodbye (%s)",
                 e->goodbye->reason ? e->goodbye->reason : "");
        kl_dcore_agent_lost(s->core, slot, now, why);
    } else {
        kl_dcore_heard(s->core, slot, now);
    }
    kl_net_envelope_free(env);
}

static void s_drain_net(s_actor_t *s)
{
    char err[KL_ERRMSG_LEN];
    /* A bounded drain: new submits and freed credit are looked at between
     * chunks, which keeps the dispatch latency low under a flood. */
    for (int i = 0; i < 64; i++) {
        kl_peer_t peer;
        Kiln__Envelope *env = NULL;
        int rc = kl_net_recv(s->net, &peer, &env, 0, err);
        if (rc == KL_ERR_TIMEOUT)
            return;
        double now = kl_now_s();
        if (rc == KL_ERR_VERSION && env)
            s_on_version(s, &peer, env);
        else if (rc != KL_OK)
            kl_debug("dispatch: dropped a frame: %s", err);
        else
            s_on_message(s, &peer, &env, now);
        kl_net_envelope_free(&env);
    }
}

static void s_heartbeats(s_actor_t *s, double now)
{
    size_t n = kl_dcore_nslots(s->core);
    for (size_t i = 0; i < n; i++) {
        kl_dagent_t *a = kl_dcore_agent(s->core, (int)i);
        if (!a->live || now - a->last_hb_sent < s->hb_s)
            continue;
        a->last_hb_sent = now;
        Kiln__Envelope env = KILN__ENVELOPE__INIT;
        Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
        hb.seq = ++s->hb_seq;
        hb.busy = (uint32_t)a->n_held;
        env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
        env.heartbeat = &hb;
        if (s_send_env(s, &a->peer, &env) != KL_OK)
            kl_dcore_agent_lost(s->core, (int)i, now, "heartbeat not sent");
    }
}

static void s_reply(s_actor_t *s, int rc, size_t n, const char *err)
{
    s_reply_t r = {rc, n, {0}};
    if (err)
        snprintf(r.err, sizeof r.err, "%s", err);
    zmq_send(s->cmd, &r, sizeof r, 0);
}

static void s_cancel(s_actor_t *s, uint64_t id)
{
    int slots[256];
    size_t n;
    if (kl_dcore_cancel(s->core, id, slots, 256, &n) != KL_OK) {
        s_reply(s, KL_ERR_NOTFOUND, 0, "no such request in progress");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        Kiln__Envelope env = KILN__ENVELOPE__INIT;
        Kiln__Cancel c = KILN__CANCEL__INIT;
        c.request_id = id;
        env.body_case = KILN__ENVELOPE__BODY_CANCEL;
        env.cancel = &c;
        s_send_env(s, &kl_dcore_agent(s->core, slots[i])->peer, &env);
    }
    s_reply(s, KL_OK, n, NULL);
}

static void s_on_cmd(s_actor_t *s, const s_cmd_t *c)
{
    if (c->op == S_SUBMIT) {
        kl_dreq_t *req = c->ptr;
        kl_dcore_submit(s->core, &req, kl_now_s());
    } else if (c->op == S_CANCEL) {
        s_cancel(s, c->arg);
    } else if (c->op == S_AGENTS) {
        s_reply(s, KL_OK,
                kl_dcore_agents(s->core, c->target[0] ? c->target : NULL),
                NULL);
    } else if (c->op == S_STATS) {
        kl_dispatch_stats_t st;
        kl_dcore_stats(s->core, &st);
        kl_net_stats(s->net, &st.net);
        zmq_send(s->cmd, &st, sizeof st, 0);
    } else if (c->op == S_LIST) {
        s_batch_t b = {0};
        b.v = (void *)kl_dcore_agent_list(s->core, kl_now_s(), &b.n);
        zmq_send(s->cmd, &b, sizeof b, 0);
    } else if (c->op == S_DRAIN) {
        s_reply(s, KL_OK, kl_dcore_drain(s->core, c->target, c->arg != 0),
                NULL);
    } else if (c->op == S_TERM) {
        s->term = true;
    }
}

static void s_drain_cmd(s_actor_t *s)
{
    s_cmd_t c;
    while (zmq_recv(s->cmd, &c, sizeof c, ZMQ_DONTWAIT) == (int)sizeof c)
        s_on_cmd(s, &c);
}

static void s_flush_results(s_actor_t *s)
{
    s_batch_t b;
    b.v = kl_dcore_take_results(s->core, &b.n);
    if (b.n)
        zmq_send(s->res, &b, sizeof b, 0);
}

static void s_goodbye_all(s_actor_t *s)
{
    size_t n = kl_dcore_nslots(s->core);
    for (size_t i = 0; i < n; i++) {
        kl_dagent_t *a = kl_dcore_agent(s->core, (int)i);
        if (a->live)
            s_goodbye(s, &a->peer, "coordinator shutting down");
    }
}

static void s_loop(s_actor_t *s)
{
    zmq_pollitem_t items[2] = {{s->cmd, 0, ZMQ_POLLIN, 0},
                               {kl_net_socket(s->net), 0, ZMQ_POLLIN, 0}};
    double tick_s = s->hb_s / 4 < 0.1 ? s->hb_s / 4 : 0.1;
    s->next_tick = kl_now_s() + tick_s;
    while (!s->term) {
        double now = kl_now_s();
        long wait = (long)((s->next_tick - now) * 1e3) + 1;
        zmq_poll(items, 2, wait < 0 ? 0 : wait);
        s_drain_cmd(s);
        /* New work goes out before the next chunk of results is read. */
        kl_dcore_dispatch(s->core, kl_now_s(), s_send_pick, s);
        s_drain_net(s);
        now = kl_now_s();
        if (now >= s->next_tick) {
            kl_dcore_tick(s->core, now, 3 * s->hb_s);
            s_heartbeats(s, now);
            s->next_tick = now + tick_s;
        }
        kl_dcore_dispatch(s->core, now, s_send_pick, s);
        s_flush_results(s);
        atomic_store(&s->api->agents_gen, kl_dcore_agents_gen(s->core));
    }
    s_goodbye_all(s);
}

static void *s_actor(void *arg)
{
    kl_dispatch_t *api = arg;
    s_actor_t s = {.api = api, .hb_s = api->cfg.heartbeat_ms / 1e3};
    char err[KL_ERRMSG_LEN] = "";
    s.cmd = zmq_socket(api->ctx, ZMQ_PAIR);
    s.res = zmq_socket(api->ctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt(s.res, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_connect(s.cmd, api->cmd_ep);
    zmq_connect(s.res, api->res_ep);
    int rc = kl_dcore_new(&s.core, api->cfg.retries,
                          api->cfg.compile_allowance_s, api->cfg.margin_s, err);
    if (rc == KL_OK)
        kl_dcore_bind_names(s.core, api->cfg.name_hold_s);
    if (rc == KL_OK)
        rc = kl_net_server_new(&s.net, api->cfg.endpoint, &api->cfg.security,
                               err);
    s_reply_t ready = {rc, 0, {0}};
    snprintf(ready.err, sizeof ready.err, "%s",
             rc == KL_OK ? kl_net_endpoint(s.net) : err);
    zmq_send(s.cmd, &ready, sizeof ready, 0);
    if (rc == KL_OK)
        s_loop(&s);
    s_flush_results(&s);
    kl_net_destroy(&s.net);
    kl_dcore_destroy(&s.core);
    free(s.scratch);
    zmq_close(s.cmd);
    zmq_close(s.res);
    return NULL;
}

/* ---- the API ---- */

static void s_free_pending(kl_dispatch_t *self)
{
    for (size_t i = 0; i < self->pend_n; i++)
        kl_dispatch_result_free(&self->pend[self->pend_head + i]);
    free(self->pend);
    self->pend = NULL;
    self->pend_head = self->pend_n = 0;
    s_batch_t b;
    while (self->res &&
           zmq_recv(self->res, &b, sizeof b, ZMQ_DONTWAIT) == (int)sizeof b) {
        for (size_t i = 0; i < b.n; i++)
            kl_dispatch_result_free(&b.v[i]);
        free(b.v);
    }
}

void kl_dispatch_destroy(kl_dispatch_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_dispatch_t *self = *self_p;
    if (self->started) {
        s_cmd_t c = {.op = S_TERM};
        zmq_send(self->cmd, &c, sizeof c, 0);
        pthread_join(self->thread, NULL);
    }
    s_free_pending(self);
    zmq_close(self->cmd);
    zmq_close(self->res);
    zmq_ctx_term(self->ctx);
    free(self);
    *self_p = NULL;
}

int kl_dispatch_new(kl_dispatch_t **out, const kl_dispatch_config_t *cfg,
                    char *err)
{
    if (!cfg || !cfg->endpoint)
        return kl_seterr(err, KL_ERR_INVAL, "dispatch: no endpoint to bind");
    kl_dispatch_t *self = kl_xcalloc(1, sizeof *self);
    self->cfg = *cfg;
    if (self->cfg.heartbeat_ms <= 0)
        self->cfg.heartbeat_ms = 1000;
    if (self->cfg.retries < 0)
        self->cfg.retries = 2;
    if (self->cfg.compile_allowance_s <= 0)
        self->cfg.compile_allowance_s = 60;
    if (self->cfg.margin_s <= 0)
        self->cfg.margin_s = 5;
    if (cfg->coordinator_id)
        snprintf(self->id, sizeof self->id, "%s", cfg->coordinator_id);
    else
        snprintf(self->id, sizeof self->id, "kiln-%d", (int)getpid());
    self->cfg.endpoint = NULL; /* borrowed: not kept past this call */
    self->next_req = 1;
    self->ctx = zmq_ctx_new();
    snprintf(self->cmd_ep, sizeof self->cmd_ep, "inproc://kl-dispatch-cmd-%p",
             (void *)self);
    snprintf(self->res_ep, sizeof self->res_ep, "inproc://kl-dispatch-res-%p",
             (void *)self);
    self->cmd = zmq_socket(self->ctx, ZMQ_PAIR);
    self->res = zmq_socket(self->ctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt(self->res, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_bind(self->cmd, self->cmd_ep);
    zmq_bind(self->res, self->res_ep);
    /* The actor reads the endpoint and keys while starting up only. */
    self->cfg.endpoint = cfg->endpoint;
    if (pthread_create(&self->thread, NULL, s_actor, self) != 0) {
        kl_dispatch_destroy(&self);
        return kl_seterr(err, KL_ERR_INTERNAL, "dispatch: no thread");
    }
    self->started = true;
    s_reply_t ready;
    if (zmq_recv(self->cmd, &ready, sizeof ready, 0) != (int)sizeof ready) {
        ready.rc = KL_ERR_INTERNAL;
        snprintf(ready.err, sizeof ready.err, "dispatch: no actor reply");
    }
    self->cfg.endpoint = NULL;
    memset(&self->cfg.security, 0, sizeof self->cfg.security);
    if (ready.rc != KL_OK) {
        pthread_join(self->thread, NULL);
        self->started = false;
        kl_dispatch_destroy(&self);
        return kl_seterr(err, ready.rc, "%s", ready.err);
    }
    memcpy(self->endpoint, ready.err, sizeof self->endpoint);
    *out = self;
    return KL_OK;
}

const char *kl_dispatch_endpoint(const kl_dispatch_t *self)
{
    return self->endpoint;
}

int kl_dispatch_submit(kl_dispatch_t *self, const kl_dispatch_batch_t *batch,
                       uint64_t *request_id, char *err)
{
    kl_dreq_t *req;
    int rc = kl_dreq_new(&req, batch, err);
    if (rc != KL_OK)
        return rc;
    req->id = self->next_req++;
    req->t_submit = kl_now_s(); /* latency counts the trip to the actor */
    *request_id = req->id;
    s_cmd_t c = {.op = S_SUBMIT, .ptr = req};
    if (zmq_send(self->cmd, &c, sizeof c, 0) != (int)sizeof c) {
        kl_dreq_free(&req);
        return kl_seterr(err, KL_ERR_CLOSED, "dispatch: actor gone");
    }
    return KL_OK;
}

/* A command that the actor answers with one reply of reply_len bytes. */
static int s_call(kl_dispatch_t *self, const s_cmd_t *c, void *reply,
                  size_t reply_len, char *err)
{
    if (zmq_send(self->cmd, c, sizeof *c, 0) != (int)sizeof *c ||
        zmq_recv(self->cmd, reply, reply_len, 0) != (int)reply_len)
        return kl_seterr(err, KL_ERR_CLOSED, "dispatch: actor gone");
    return KL_OK;
}

int kl_dispatch_cancel(kl_dispatch_t *self, uint64_t request_id, char *err)
{
    s_cmd_t c = {.op = S_CANCEL, .arg = request_id};
    s_reply_t r;
    int rc = s_call(self, &c, &r, sizeof r, err);
    if (rc == KL_OK && r.rc != KL_OK)
        rc = kl_seterr(err, r.rc, "cancel request %llu: %s",
                       (unsigned long long)request_id, r.err);
    return rc;
}

int kl_dispatch_agents(kl_dispatch_t *self, const char *target, size_t *n,
                       char *err)
{
    s_cmd_t c = {.op = S_AGENTS};
    if (target && strlen(target) >= sizeof c.target)
        return kl_seterr(err, KL_ERR_INVAL, "target '%s' too long", target);
    if (target)
        snprintf(c.target, sizeof c.target, "%s", target);
    s_reply_t r;
    int rc = s_call(self, &c, &r, sizeof r, err);
    *n = rc == KL_OK ? r.n : 0;
    return rc;
}

int kl_dispatch_stats(kl_dispatch_t *self, kl_dispatch_stats_t *out, char *err)
{
    s_cmd_t c = {.op = S_STATS};
    return s_call(self, &c, out, sizeof *out, err);
}

int kl_dispatch_agent_list(kl_dispatch_t *self, kl_dispatch_agent_info_t **out,
                           size_t *n, char *err)
{
    s_cmd_t c = {.op = S_LIST};
    s_batch_t b = {0};
    int rc = s_call(self, &c, &b, sizeof b, err);
    *out = rc == KL_OK ? (kl_dispatch_agent_info_t *)(void *)b.v : NULL;
    *n = rc == KL_OK ? b.n : 0;
    return rc;
}

int kl_dispatch_drain(kl_dispatch_t *self, const char *name, bool drained,
                      size_t *matched, char *err)
{
    s_cmd_t c = {.op = S_DRAIN, .arg = drained};
    if (strlen(name) >= sizeof c.target)
        return kl_seterr(err, KL_ERR_INVAL, "agent name '%s' too long", name);
    snprintf(c.target, sizeof c.target, "%s", name);
    s_reply_t r;
    int rc = s_call(self, &c, &r, sizeof r, err);
    if (matched)
        *matched = rc == KL_OK ? r.n : 0;
    return rc;
}

int kl_dispatch_recv(kl_dispatch_t *self, kl_dispatch_result_t **out,
                     int timeout_ms, char *err)
{
    *out = NULL;
    if (!self->pend_n) {
        free(self->pend);
        self->pend = NULL;
        self->pend_head = 0;
        zmq_pollitem_t it = {self->res, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, timeout_ms) <= 0)
            return kl_seterr(err, KL_ERR_TIMEOUT, "no result within %d ms",
                             timeout_ms);
        s_batch_t b;
        if (zmq_recv(self->res, &b, sizeof b, 0) != (int)sizeof b)
            return kl_seterr(err, KL_ERR_CLOSED, "dispatch: actor gone");
        self->pend = b.v;
        self->pend_n = b.n;
    }
    *out = self->pend[self->pend_head++];
    self->pend_n--;
    return KL_OK;
}

void *kl_dispatch_socket(kl_dispatch_t *self)
{
    return self->res;
}

uint64_t kl_dispatch_agents_gen(kl_dispatch_t *self)
{
    return atomic_load(&self->agents_gen);
}
