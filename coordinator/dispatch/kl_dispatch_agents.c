/* kl_dispatch_agents.c - the core's agents: registration by Hello
 * (devices, credit), re-registration and loss (what they held goes back to
 * the queue), drain, the agent list, and agent names bound to the CURVE key
 * that registered them (kl_dcore_bind_names). See kl_dispatch_core.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_dispatch_core_int.h"
#include "kl_err.h"
#include "kl_log.h"
#include "kl_target.h"
#include "kl_util.h"

#define S_MAX_CREDIT KL_NET_MAX_CANDIDATES

/* Names remembered at most (live ones included): past it the one gone the
 * longest is forgotten first. */
#define S_MAX_BINDS 65536

void kl_dcore__agent_clear(kl_dagent_t *a)
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

/* ---- agent names bound to keys ---- */

void kl_dcore_bind_names(kl_dcore_t *self, double hold_s)
{
    self->hold_s = hold_s > 0 ? hold_s : 0;
}

static kl_dcore__bind_t *s_bind_find(kl_dcore_t *c, const char *name)
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
    kl_dcore__bind_t *b = s_bind_find(c, name);
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
    kl_dcore__bind_t *b = s_bind_find(c, name);
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
    kl_dcore__bind_t *b = s_bind_find(c, a->name);
    if (b)
        b->gone_at = now > 0 ? now : 1e-9;
}

/* ---- registration and loss ---- */

static uint64_t s_peer_key(const kl_peer_t *p)
{
    return kl_hash64(p->id, p->len) | 1;
}

int kl_dcore_find(const kl_dcore_t *self, const kl_peer_t *peer)
{
    void *v = kl_dcore__map_get(&self->peers, s_peer_key(peer));
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
        kl_dreq_t *req = kl_dcore__map_get(&c->reqs, h->req_id);
        if (!h->expired && req && req->state[h->idx] == KL_DC_INFLIGHT)
            kl_dcore__requeue(c, req, h->idx, msg, now);
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
    kl_dcore__map_del(&self->peers, s_peer_key(&a->peer));
    kl_dcore__agent_clear(a);
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
        kl_dcore__map_del(&self->peers, s_peer_key(&a->peer));
        kl_dcore__agent_clear(a);
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
    kl_dcore__map_put(&self->peers, s_peer_key(peer),
                      (void *)(intptr_t)(slot + 1));
    self->n_live++;
    self->agents_gen++;
    return slot;
}

/* ---- the agent list ---- */

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
