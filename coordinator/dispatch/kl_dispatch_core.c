/* kl_dispatch_core.c - dispatch's tables: agents, queues, requests. No
 * sockets here; see kl_dispatch_core.h. */
#include "kl_dispatch_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_target.h"
#include "kl_util.h"

#define S_LAT_RING 65536
#define S_MAX_CREDIT KL_NET_MAX_CANDIDATES
/* Candidate bytes per MeasureRequest: a quarter of the frame limit, so the
 * request's reference source and args always fit too. */
#define S_MAX_MSG_BYTES (KL_NET_MAX_FRAME / 4)

/* ---- a uint64 -> pointer map: linear probing, backward-shift delete ---- */

typedef struct {
    uint64_t *keys; /* 0: empty */
    void **vals;
    size_t cap; /* power of two */
    size_t n;
} s_map_t;

static size_t s_mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static void s_map_put(s_map_t *m, uint64_t key, void *val);

static void s_map_grow(s_map_t *m)
{
    s_map_t old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->keys = kl_xcalloc(m->cap, sizeof *m->keys);
    m->vals = kl_xcalloc(m->cap, sizeof *m->vals);
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.keys[i])
            s_map_put(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
}

static void s_map_put(s_map_t *m, uint64_t key, void *val)
{
    if ((m->n + 1) * 2 > m->cap)
        s_map_grow(m);
    size_t i = s_mix(key) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

static void *s_map_get(const s_map_t *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    size_t i = s_mix(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->keys[i] == key)
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static void s_map_del(s_map_t *m, uint64_t key)
{
    if (!m->cap)
        return;
    size_t mask = m->cap - 1, i = s_mix(key) & mask;
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & mask;
    if (!m->keys[i])
        return;
    m->keys[i] = 0;
    m->n--;
    /* Shift back later entries of the run that may no longer be found. */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = s_mix(m->keys[j]) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            m->keys[j] = 0;
            i = j;
        }
    }
}

static void s_map_free(s_map_t *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- queues: one ring of (request, candidate) per task target ---- */

typedef struct {
    uint64_t req_id;
    uint32_t idx;
} s_qent_t;

typedef struct {
    char *target;
    s_qent_t *ring;
    size_t head, len, cap;
} s_queue_t;

static void s_q_grow(s_queue_t *q)
{
    size_t cap = q->cap ? q->cap * 2 : 256;
    s_qent_t *r = kl_xmalloc(cap * sizeof *r);
    for (size_t i = 0; i < q->len; i++)
        r[i] = q->ring[(q->head + i) % q->cap];
    free(q->ring);
    q->ring = r;
    q->cap = cap;
    q->head = 0;
}

static void s_q_push(s_queue_t *q, s_qent_t e, bool front)
{
    if (q->len == q->cap)
        s_q_grow(q);
    if (front) {
        q->head = (q->head + q->cap - 1) % q->cap;
        q->ring[q->head] = e;
    } else {
        q->ring[(q->head + q->len) % q->cap] = e;
    }
    q->len++;
}

static s_qent_t s_q_pop(s_queue_t *q)
{
    s_qent_t e = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return e;
}

/* ---- the core ---- */

/* An agent name bound to the CURVE key of the agent that registered it
 * (kl_dcore_bind_names); gone_at is 0 while an agent of that name is
 * live. */
typedef struct {
    char *name;
    char key[41];
    double gone_at;
} s_bind_t;

/* Names remembered at most (live ones included): past it the one gone the
 * longest is forgotten first. */
#define S_MAX_BINDS 65536

struct kl_dcore_s {
    int retries;
    double compile_s, margin_s;
    double hold_s; /* > 0: names bound to keys this long after */
    s_bind_t *binds;
    size_t n_binds, cap_binds;
    s_map_t reqs;  /* request id -> kl_dreq_t */
    s_map_t peers; /* hash of routing id -> slot + 1 */
    kl_dagent_t *agents;
    size_t n_slots, cap_slots, n_live, rr;
    s_queue_t *queues;
    size_t n_queues, rr_queue;
    uint32_t *pick_idx;
    size_t pick_cap;
    kl_dispatch_result_t **out;
    size_t n_out, cap_out;
    double *lat;
    uint64_t n_lat;
    size_t queued, in_flight;
    uint64_t agents_gen; /* grows when an agent joins, leaves, is drained */
    kl_dispatch_stats_t st;
    double t_first_submit, t_last_result;
};

int kl_dcore_new(kl_dcore_t **out, int retries, double compile_s,
                 double margin_s, char *err)
{
    if (retries < 0 || retries > 100)
        return kl_seterr(err, KL_ERR_INVAL,
                         "dispatch: retries %d not in "
                         "[0, 100]",
                         retries);
    kl_dcore_t *c = kl_xcalloc(1, sizeof *c);
    c->retries = retries;
    c->compile_s = compile_s;
    c->margin_s = margin_s;
    c->lat = kl_xmalloc(S_LAT_RING * sizeof *c->lat);
    c->t_first_submit = -1;
    *out = c;
    return KL_OK;
}

static void s_agent_clear(kl_dagent_t *a)
{
    free(a->name);
    free(a->hostname);
    for (size_t i = 0; i < a->n_dev; i++) {
        free(a->dev_target[i]);
        free(a->dev_features[i]);
        free(a->dev_name[i]);
    }
    free(a->dev_target);
    free(a->dev_features);
    free(a->dev_name);
    free(a->dev_index);
    free(a->held);
    memset(a, 0, sizeof *a);
}

void kl_dcore_destroy(kl_dcore_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_dcore_t *c = *self_p;
    for (size_t i = 0; i < c->reqs.cap; i++)
        if (c->reqs.keys[i]) {
            kl_dreq_t *r = c->reqs.vals[i];
            kl_dreq_free(&r);
        }
    s_map_free(&c->reqs);
    s_map_free(&c->peers);
    for (size_t i = 0; i < c->n_slots; i++)
        s_agent_clear(&c->agents[i]);
    free(c->agents);
    for (size_t i = 0; i < c->n_queues; i++) {
        free(c->queues[i].target);
        free(c->queues[i].ring);
    }
    free(c->queues);
    free(c->pick_idx);
    for (size_t i = 0; i < c->n_out; i++)
        kl_dispatch_result_free(&c->out[i]);
    free(c->out);
    free(c->lat);
    for (size_t i = 0; i < c->n_binds; i++)
        free(c->binds[i].name);
    free(c->binds);
    free(c);
    *self_p = NULL;
}

/* ---- agent names bound to keys ---- */

void kl_dcore_bind_names(kl_dcore_t *self, double hold_s)
{
    self->hold_s = hold_s > 0 ? hold_s : 0;
}

static s_bind_t *s_bind_find(kl_dcore_t *c, const char *name)
{
    for (size_t i = 0; i < c->n_binds; i++)
        if (strcmp(c->binds[i].name, name) == 0)
            return &c->binds[i];
    return NULL;
}

static void s_bind_del(kl_dcore_t *c, size_t i)
{
    free(c->binds[i].name);
    c->binds[i] = c->binds[--c->n_binds];
}

/* Forgets the names whose agents left hold_s ago or more; past
 * S_MAX_BINDS also the one gone the longest. */
static void s_bind_prune(kl_dcore_t *c, double now)
{
    for (size_t i = c->n_binds; i-- > 0;)
        if (c->binds[i].gone_at > 0 && now - c->binds[i].gone_at >= c->hold_s)
            s_bind_del(c, i);
    while (c->n_binds >= S_MAX_BINDS) {
        size_t old = c->n_binds;
        for (size_t i = 0; i < c->n_binds; i++)
            if (c->binds[i].gone_at > 0 &&
                (old == c->n_binds ||
                 c->binds[i].gone_at < c->binds[old].gone_at))
                old = i;
        if (old == c->n_binds)
            break; /* every one live */
        s_bind_del(c, old);
    }
}

/* KL_ERR_AUTH with the reason when name is bound to another key than
 * key: an agent of it is live, or left less than hold_s ago. */
static int s_bind_check(kl_dcore_t *c, const char *name, const char *key,
                        double now, char *err)
{
    s_bind_t *b = s_bind_find(c, name);
    if (!b || strcmp(b->key, key) == 0)
        return KL_OK;
    if (b->gone_at == 0)
        return kl_seterr(err, KL_ERR_AUTH,
                         "agent name %.200s is taken: a live agent of another "
                         "key holds it (an agent name is bound to the key "
                         "that registered it)",
                         name);
    if (now - b->gone_at < c->hold_s)
        return kl_seterr(err, KL_ERR_AUTH,
                         "agent name %.200s belongs to another key: its agent "
                         "left %.1f s ago and the name stays that key's for "
                         "%g s after",
                         name, now - b->gone_at, c->hold_s);
    return KL_OK;
}

static void s_bind_set(kl_dcore_t *c, const char *name, const char *key)
{
    s_bind_t *b = s_bind_find(c, name);
    if (!b) {
        if (c->n_binds == c->cap_binds) {
            c->cap_binds = c->cap_binds ? 2 * c->cap_binds : 64;
            c->binds = kl_xrealloc(c->binds, c->cap_binds * sizeof *c->binds);
        }
        b = &c->binds[c->n_binds++];
        b->name = kl_xstrdup(name);
    }
    snprintf(b->key, sizeof b->key, "%s", key);
    b->gone_at = 0;
}

/* The agent in slot leaves: its name's hold starts unless another live
 * agent (of the same key) still has that name. */
static void s_bind_leave(kl_dcore_t *c, int slot, double now)
{
    const kl_dagent_t *a = &c->agents[slot];
    if (c->hold_s <= 0 || !a->name)
        return;
    for (size_t i = 0; i < c->n_slots; i++)
        if ((int)i != slot && c->agents[i].live &&
            strcmp(c->agents[i].name, a->name) == 0)
            return;
    s_bind_t *b = s_bind_find(c, a->name);
    if (b)
        b->gone_at = now > 0 ? now : 1e-9;
}

static s_queue_t *s_queue_for(kl_dcore_t *c, const char *target)
{
    for (size_t i = 0; i < c->n_queues; i++)
        if (strcmp(c->queues[i].target, target) == 0)
            return &c->queues[i];
    c->queues = kl_xrealloc(c->queues, (c->n_queues + 1) * sizeof *c->queues);
    s_queue_t *q = &c->queues[c->n_queues++];
    memset(q, 0, sizeof *q);
    q->target = kl_xstrdup(target);
    return q;
}

static void s_emit(kl_dcore_t *c, kl_dispatch_result_t *r)
{
    if (c->n_out == c->cap_out) {
        c->cap_out = c->cap_out ? c->cap_out * 2 : 64;
        c->out = kl_xrealloc(c->out, c->cap_out * sizeof *c->out);
    }
    c->out[c->n_out++] = r;
}

/* Marks a candidate done and emits its result; frees the request when it
 * was the last one (req is then dangling: the caller stops using it). */
static bool s_finish(kl_dcore_t *c, kl_dreq_t *req, size_t idx,
                     kl_dispatch_result_t *res, double now)
{
    if (req->state[idx] == KL_DC_QUEUED)
        c->queued--;
    else if (req->state[idx] == KL_DC_INFLIGHT)
        c->in_flight--;
    req->state[idx] = KL_DC_DONE;
    req->n_done++;
    unsigned st = (unsigned)res->result->status;
    c->st.by_status[st < 8 ? st : 7]++;
    c->st.results++;
    c->t_last_result = now;
    s_emit(c, res);
    if (req->n_done < req->n)
        return false;
    s_map_del(&c->reqs, req->id);
    kl_dreq_free(&req);
    return true;
}

void kl_dcore_submit(kl_dcore_t *self, kl_dreq_t **req_p, double now)
{
    kl_dreq_t *req = *req_p;
    *req_p = NULL;
    if (req->t_submit <= 0) /* else stamped by the caller's submit */
        req->t_submit = now;
    if (self->t_first_submit < 0)
        self->t_first_submit = req->t_submit;
    s_map_put(&self->reqs, req->id, req);
    s_queue_t *q = s_queue_for(self, req->target);
    for (size_t i = 0; i < req->n; i++)
        s_q_push(q, (s_qent_t){req->id, (uint32_t)i}, false);
    self->queued += req->n;
    self->st.submitted += req->n;
}

/* A lost candidate goes back to the front of its queue, or becomes
 * AGENT_LOST once it was sent 1 + retries times. */
static void s_requeue(kl_dcore_t *c, kl_dreq_t *req, size_t idx,
                      const char *why, double now)
{
    if (req->attempts[idx] > c->retries) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s; gave up after %u attempts", why,
                 req->attempts[idx]);
        s_finish(c, req, idx, kl_dcore_make_result(req, idx, 5, msg, now), now);
        return;
    }
    req->state[idx] = KL_DC_QUEUED;
    c->in_flight--;
    c->queued++;
    c->st.resent++;
    s_q_push(s_queue_for(c, req->target), (s_qent_t){req->id, (uint32_t)idx},
             true);
}

static uint64_t s_peer_key(const kl_peer_t *p)
{
    return kl_hash64(p->id, p->len) | 1;
}

int kl_dcore_find(const kl_dcore_t *self, const kl_peer_t *peer)
{
    void *v = s_map_get(&self->peers, s_peer_key(peer));
    if (!v)
        return -1;
    int slot = (int)((intptr_t)v - 1);
    const kl_dagent_t *a = &self->agents[slot];
    /* Two routing ids with one 64-bit hash: treat the newcomer as
     * unknown rather than confuse them. */
    if (a->peer.len != peer->len || memcmp(a->peer.id, peer->id, peer->len))
        return -1;
    return slot;
}

kl_dagent_t *kl_dcore_agent(kl_dcore_t *self, int slot)
{
    return &self->agents[slot];
}

size_t kl_dcore_nslots(const kl_dcore_t *self)
{
    return self->n_slots;
}

void kl_dcore_heard(kl_dcore_t *self, int slot, double now)
{
    self->agents[slot].last_heard = now;
}

/* Gives back the candidates an agent holds (re-queued or AGENT_LOST). */
static void s_release_held(kl_dcore_t *c, kl_dagent_t *a, const char *why,
                           double now)
{
    char msg[400];
    snprintf(msg, sizeof msg, "agent %s: %s", a->name, why);
    for (size_t i = 0; i < a->n_held; i++) {
        kl_dheld_t *h = &a->held[i];
        kl_dreq_t *req = s_map_get(&c->reqs, h->req_id);
        if (!h->expired && req && req->state[h->idx] == KL_DC_INFLIGHT)
            s_requeue(c, req, h->idx, msg, now);
    }
    a->n_held = 0;
}

void kl_dcore_agent_lost(kl_dcore_t *self, int slot, double now,
                         const char *why)
{
    kl_dagent_t *a = &self->agents[slot];
    if (!a->live)
        return;
    kl_warn("agent %s (%s pid %u) lost: %s", a->name, a->hostname, a->pid, why);
    s_release_held(self, a, why, now);
    s_bind_leave(self, slot, now);
    s_map_del(&self->peers, s_peer_key(&a->peer));
    s_agent_clear(a);
    self->n_live--;
    self->agents_gen++;
    self->st.agents_lost++;
}

static int s_new_slot(kl_dcore_t *c)
{
    for (size_t i = 0; i < c->n_slots; i++)
        if (!c->agents[i].live)
            return (int)i;
    if (c->n_slots == c->cap_slots) {
        c->cap_slots = c->cap_slots ? c->cap_slots * 2 : 16;
        c->agents = kl_xrealloc(c->agents, c->cap_slots * sizeof *c->agents);
    }
    memset(&c->agents[c->n_slots], 0, sizeof *c->agents);
    return (int)c->n_slots++;
}

int kl_dcore_hello(kl_dcore_t *self, const kl_peer_t *peer,
                   const Kiln__Hello *h, double now, char *err)
{
    if (h->n_devices == 0)
        return kl_seterr(err, KL_ERR_PROTO, "Hello from %s lists no device",
                         h->agent_name),
               -1;
    for (size_t i = 0; i < h->n_devices; i++)
        if (!h->devices[i]->target || !*h->devices[i]->target)
            return kl_seterr(err, KL_ERR_PROTO,
                             "Hello from %s: device %zu has no target",
                             h->agent_name, i),
                   -1;
    const char *name =
        h->agent_name && *h->agent_name ? h->agent_name : "(unnamed)";
    int slot = kl_dcore_find(self, peer);
    if (slot >= 0 && strcmp(self->agents[slot].peer.key, peer->key) != 0) {
        /* A client may pick its routing id: one that comes back with
         * another key is not the agent that had it. */
        kl_dcore_agent_lost(self, slot, now,
                            "its routing id came back with another key");
        slot = -1;
    }
    if (self->hold_s > 0) {
        s_bind_prune(self, now);
        int rc = s_bind_check(self, name, peer->key, now, err);
        if (rc != KL_OK)
            return -1;
    }
    if (slot >= 0) {
        /* It says Hello again: it forgot what it held. */
        kl_dagent_t *a = &self->agents[slot];
        s_release_held(self, a, "said Hello again", now);
        s_bind_leave(self, slot, now);
        s_map_del(&self->peers, s_peer_key(&a->peer));
        s_agent_clear(a);
        self->n_live--;
    } else {
        slot = s_new_slot(self);
    }
    kl_dagent_t *a = &self->agents[slot];
    a->live = true;
    a->minor = KL_PROTO_MINOR;
    a->peer = *peer;
    a->name = kl_xstrdup(name);
    if (self->hold_s > 0)
        s_bind_set(self, name, peer->key);
    a->hostname = kl_xstrdup(h->hostname ? h->hostname : "");
    a->pid = h->pid;
    a->unsandboxed = h->unsandboxed;
    uint64_t credit = (uint64_t)h->build_slots + 1;
    a->credit = credit > S_MAX_CREDIT ? S_MAX_CREDIT : (uint32_t)credit;
    a->n_dev = h->n_devices;
    a->dev_target = kl_xcalloc(a->n_dev, sizeof(char *));
    a->dev_features = kl_xcalloc(a->n_dev, sizeof(char *));
    a->dev_name = kl_xcalloc(a->n_dev, sizeof(char *));
    a->dev_index = kl_xcalloc(a->n_dev, sizeof(uint32_t));
    for (size_t i = 0; i < a->n_dev; i++) {
        /* A device that says it only simulates never passes for the real
         * target, even when an agent from before simulated targets names
         * that one (kl_target.h). */
        const char *t = h->devices[i]->target;
        a->dev_target[i] = h->devices[i]->simulated && !kl_target_is_sim(t)
                               ? kl_xasprintf(KL_TARGET_SIM "%s", t)
                               : kl_xstrdup(t);
        a->dev_name[i] =
            kl_xstrdup(h->devices[i]->name ? h->devices[i]->name : "");
        /* Names only, ','-joined: a name with ',' or '+' in it could
         * never match a target's suffix, so it is dropped. */
        size_t nf = 1;
        for (size_t f = 0; f < h->devices[i]->n_features; f++)
            nf += strlen(h->devices[i]->features[f]) + 1;
        a->dev_features[i] = kl_xcalloc(1, nf);
        for (size_t f = 0; f < h->devices[i]->n_features; f++) {
            const char *name = h->devices[i]->features[f];
            if (!*name || strpbrk(name, ",+"))
                continue;
            if (*a->dev_features[i])
                strcat(a->dev_features[i], ",");
            strcat(a->dev_features[i], name);
        }
        a->dev_index[i] = h->devices[i]->index;
    }
    a->last_heard = now;
    a->last_hb_sent = now;
    s_map_put(&self->peers, s_peer_key(peer), (void *)(intptr_t)(slot + 1));
    self->n_live++;
    self->agents_gen++;
    return slot;
}

static bool s_held_remove(kl_dagent_t *a, uint64_t req_id, uint64_t idx)
{
    for (size_t i = 0; i < a->n_held; i++)
        if (a->held[i].req_id == req_id && a->held[i].idx == idx) {
            a->held[i] = a->held[--a->n_held];
            return true;
        }
    return false;
}

bool kl_dcore_result(kl_dcore_t *self, int slot, Kiln__Envelope **env,
                     double now)
{
    Kiln__MeasureResult *r = (*env)->result;
    kl_dagent_t *a = &self->agents[slot];
    a->last_heard = now;
    if (s_held_remove(a, r->request_id, r->candidate_id)) {
        a->answered++;
        a->failures += r->status != KILN__STATUS__STATUS_OK;
    }
    kl_dreq_t *req = s_map_get(&self->reqs, r->request_id);
    if (!req || r->candidate_id >= req->n ||
        req->state[r->candidate_id] == KL_DC_DONE) {
        self->st.duplicates++;
        kl_net_envelope_free(env);
        return false;
    }
    size_t idx = (size_t)r->candidate_id;
    kl_dispatch_result_t *res = kl_dcore_wrap_result(req, idx, a, *env, now);
    *env = NULL;
    s_finish(self, req, idx, res, now);
    return true;
}

/* Index of the first device of a matching target, or -1. */
static int s_match(const kl_dagent_t *a, const char *target)
{
    for (size_t i = 0; i < a->n_dev; i++)
        if (kl_dispatch_device_match(target, a->dev_target[i],
                                     a->dev_features[i]))
            return (int)i;
    return -1;
}

/* The request at the head of q, dropping finished entries; NULL when
 * none is left. */
static kl_dreq_t *s_head(kl_dcore_t *c, s_queue_t *q)
{
    while (q->len) {
        s_qent_t e = q->ring[q->head];
        kl_dreq_t *r = s_map_get(&c->reqs, e.req_id);
        if (r && r->state[e.idx] == KL_DC_QUEUED)
            return r;
        s_q_pop(q); /* finished or cancelled meanwhile */
    }
    return NULL;
}

/* Takes up to max live entries of one request from the head of q, and no
 * more source bytes than fit well inside one frame (at least one). */
static size_t s_take(kl_dcore_t *c, s_queue_t *q, size_t max, kl_dreq_t **req)
{
    size_t n = 0, bytes = 0;
    *req = NULL;
    kl_dreq_t *r;
    while (n < max && (r = s_head(c, q))) {
        if (*req && r != *req)
            break;
        uint32_t idx = q->ring[q->head].idx;
        size_t sz = r->cand_bytes[idx];
        if (n && bytes + sz > S_MAX_MSG_BYTES)
            break;
        bytes += sz;
        *req = r;
        s_q_pop(q);
        c->pick_idx[n++] = idx;
    }
    return n;
}

static void s_mark_sent(kl_dcore_t *c, kl_dagent_t *a, kl_dreq_t *req,
                        uint32_t idx, double now)
{
    req->state[idx] = KL_DC_INFLIGHT;
    c->queued--;
    c->in_flight++;
    if (req->attempts[idx]++ == 0)
        c->lat[c->n_lat++ % S_LAT_RING] = now - req->t_submit;
    if (a->n_held == a->cap_held) {
        a->cap_held = a->cap_held ? a->cap_held * 2 : 8;
        a->held = kl_xrealloc(a->held, a->cap_held * sizeof *a->held);
    }
    double wait = (double)(a->n_held + 1) * (req->run_s + c->compile_s);
    a->held[a->n_held++] =
        (kl_dheld_t){req->id, idx, false, now + wait + c->margin_s};
}

/* One pick for the agent in slot from the first matching queue with work.
 * Returns the number of candidates picked (0: nothing for it). */
static size_t s_pick(kl_dcore_t *c, int slot, double now, kl_dpick_t *pick)
{
    kl_dagent_t *a = &c->agents[slot];
    size_t free_credit = a->credit - a->n_held;
    if (c->pick_cap < free_credit) {
        c->pick_cap = free_credit;
        c->pick_idx = kl_xrealloc(c->pick_idx, free_credit * sizeof(uint32_t));
    }
    for (size_t k = 0; k < c->n_queues; k++) {
        s_queue_t *q = &c->queues[(c->rr_queue + k) % c->n_queues];
        int dev;
        if (!q->len || (dev = s_match(a, q->target)) < 0)
            continue;
        /* An older agent does not take what it cannot read; it waits
         * behind such a request rather than reorder the queue. */
        kl_dreq_t *head = s_head(c, q);
        if (!head || head->need_minor > a->minor)
            continue;
        kl_dreq_t *req;
        size_t n = s_take(c, q, free_credit, &req);
        if (!n)
            continue;
        for (size_t i = 0; i < n; i++)
            s_mark_sent(c, a, req, c->pick_idx[i], now);
        *pick = (kl_dpick_t){
            slot, req, a->dev_index[dev], a->dev_target[dev], n, c->pick_idx};
        return n;
    }
    return 0;
}

/* A pick that kl_net refused to send (out of bounds): its candidates are
 * answered INVALID and the agent's credit is given back. */
static void s_unsendable(kl_dcore_t *c, kl_dagent_t *a, const kl_dpick_t *p,
                         double now)
{
    uint64_t req_id = p->req->id;
    size_t n = p->n;
    uint32_t *idx = kl_xmalloc(n * sizeof *idx);
    memcpy(idx, p->idx, n * sizeof *idx);
    for (size_t i = 0; i < n; i++) {
        s_held_remove(a, req_id, idx[i]);
        kl_dreq_t *req = s_map_get(&c->reqs, req_id);
        if (req)
            s_finish(c, req, idx[i],
                     kl_dcore_make_result(req, idx[i], 7,
                                          "the request could not be sent "
                                          "(over the wire limits)",
                                          now),
                     now);
    }
    free(idx);
}

size_t kl_dcore_dispatch(kl_dcore_t *self, double now, kl_dcore_send_fn send,
                         void *arg)
{
    size_t sent = 0, n = self->n_slots;
    if (!self->queued || !n)
        return 0;
    size_t start = self->rr;
    for (size_t k = 0; k < n && self->queued; k++) {
        int slot = (int)((start + k) % n);
        kl_dagent_t *a = &self->agents[slot];
        kl_dpick_t pick;
        while (a->live && !a->drained && a->n_held < a->credit &&
               self->queued && s_pick(self, slot, now, &pick)) {
            int rc = send(arg, &pick);
            if (rc == KL_ERR_PROTO || rc == KL_ERR_INVAL) {
                s_unsendable(self, a, &pick, now);
                continue;
            }
            if (rc != KL_OK) {
                kl_dcore_agent_lost(self, slot, now, "send failed");
                break;
            }
            self->st.requests_sent++;
            sent += pick.n;
        }
    }
    self->rr = (start + 1) % n;
    if (self->n_queues)
        self->rr_queue = (self->rr_queue + 1) % self->n_queues;
    return sent;
}

void kl_dcore_tick(kl_dcore_t *self, double now, double dead_s)
{
    for (size_t s = 0; s < self->n_slots; s++) {
        kl_dagent_t *a = &self->agents[s];
        if (!a->live)
            continue;
        if (now - a->last_heard > dead_s) {
            char why[64];
            snprintf(why, sizeof why, "silent for %.1f s", now - a->last_heard);
            kl_dcore_agent_lost(self, (int)s, now, why);
            continue;
        }
        for (size_t i = 0; i < a->n_held; i++) {
            kl_dheld_t *h = &a->held[i];
            if (h->expired || h->deadline > now)
                continue;
            h->expired = true;
            kl_dreq_t *req = s_map_get(&self->reqs, h->req_id);
            if (req && req->state[h->idx] == KL_DC_INFLIGHT) {
                char why[128];
                snprintf(why, sizeof why,
                         "agent %s held candidate %u past its deadline",
                         a->name, h->idx);
                kl_warn("%s", why);
                s_requeue(self, req, h->idx, why, now);
            }
        }
    }
}

int kl_dcore_cancel(kl_dcore_t *self, uint64_t req_id, int *slots, size_t max,
                    size_t *n_slots)
{
    *n_slots = 0;
    kl_dreq_t *req = s_map_get(&self->reqs, req_id);
    if (!req)
        return KL_ERR_NOTFOUND;
    for (size_t s = 0; s < self->n_slots && *n_slots < max; s++) {
        kl_dagent_t *a = &self->agents[s];
        for (size_t i = 0; a->live && i < a->n_held; i++)
            if (a->held[i].req_id == req_id && !a->held[i].expired) {
                slots[(*n_slots)++] = (int)s;
                break;
            }
    }
    double now = kl_now_s();
    for (size_t i = 0; i < req->n; i++)
        if (req->state[i] == KL_DC_QUEUED &&
            s_finish(self, req, i,
                     kl_dcore_make_result(req, i, 6, "cancelled", now), now))
            break; /* that was the last one: req is gone */
    return KL_OK;
}

kl_dispatch_result_t **kl_dcore_take_results(kl_dcore_t *self, size_t *n)
{
    *n = self->n_out;
    if (!self->n_out)
        return NULL;
    kl_dispatch_result_t **v = self->out;
    self->out = NULL;
    self->n_out = self->cap_out = 0;
    return v;
}

size_t kl_dcore_agents(const kl_dcore_t *self, const char *target)
{
    size_t n = 0;
    for (size_t s = 0; s < self->n_slots; s++) {
        const kl_dagent_t *a = &self->agents[s];
        if (a->live && (!target || s_match(a, target) >= 0))
            n++;
    }
    return n;
}

uint64_t kl_dcore_agents_gen(const kl_dcore_t *self)
{
    return self->agents_gen;
}

size_t kl_dcore_drain(kl_dcore_t *self, const char *name, bool drained)
{
    size_t n = 0;
    for (size_t s = 0; s < self->n_slots; s++) {
        kl_dagent_t *a = &self->agents[s];
        if (a->live && strcmp(a->name, name) == 0) {
            self->agents_gen += a->drained != drained;
            a->drained = drained;
            n++;
        }
    }
    return n;
}

kl_dispatch_agent_info_t *kl_dcore_agent_list(const kl_dcore_t *self,
                                              double now, size_t *n)
{
    kl_dispatch_agent_info_t *v = kl_xcalloc(self->n_slots + 1, sizeof *v);
    *n = 0;
    for (size_t s = 0; s < self->n_slots; s++) {
        const kl_dagent_t *a = &self->agents[s];
        if (!a->live)
            continue;
        kl_dispatch_agent_info_t *i = &v[(*n)++];
        snprintf(i->name, sizeof i->name, "%s", a->name);
        snprintf(i->hostname, sizeof i->hostname, "%s", a->hostname);
        i->n_devices = a->n_dev;
        for (size_t d = 0; d < a->n_dev && d < KL_DISPATCH_INFO_DEVICES; d++) {
            snprintf(i->device_target[d], sizeof i->device_target[d], "%s",
                     a->dev_target[d]);
            snprintf(i->device_features[d], sizeof i->device_features[d], "%s",
                     a->dev_features[d]);
            snprintf(i->device_name[d], sizeof i->device_name[d], "%s",
                     a->dev_name[d]);
        }
        i->credit = a->credit;
        i->busy = (uint32_t)a->n_held;
        i->results = a->answered;
        i->failures = a->failures;
        i->last_seen_s = now - a->last_heard;
        i->drained = a->drained;
        i->unsandboxed = a->unsandboxed;
    }
    return v;
}

void kl_dcore_stats(const kl_dcore_t *self, kl_dispatch_stats_t *out)
{
    *out = self->st;
    out->agents = self->n_live;
    out->queued = self->queued;
    out->in_flight = self->in_flight;
    out->requests = self->reqs.n;
    double span = self->t_last_result - self->t_first_submit;
    out->results_per_s =
        self->t_first_submit >= 0 && span > 0 ? out->results / span : 0;
    size_t n = self->n_lat < S_LAT_RING ? (size_t)self->n_lat : S_LAT_RING;
    if (n) {
        out->latency_p50_s = kl_percentile(self->lat, n, 50);
        out->latency_p99_s = kl_percentile(self->lat, n, 99);
        out->latency_max_s = kl_percentile(self->lat, n, 100);
    }
}
