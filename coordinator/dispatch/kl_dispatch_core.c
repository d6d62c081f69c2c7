/* kl_dispatch_core.c - dispatch's tables: queues, requests, credit and
 * results (the agents themselves are kl_dispatch_agents.c's). No sockets
 * here; see kl_dispatch_core.h. */
#include "kl_dispatch_core_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"

#define S_LAT_RING 65536
/* Candidate bytes per MeasureRequest: a quarter of the frame limit, so the
 * request's reference source and args always fit too. */
#define S_MAX_MSG_BYTES (KL_NET_MAX_FRAME / 4)

/* ---- a uint64 -> pointer map: linear probing, backward-shift delete ---- */

static size_t s_mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static void s_map_grow(kl_dcore__map_t *m)
{
    kl_dcore__map_t old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->keys = kl_xcalloc(m->cap, sizeof *m->keys);
    m->vals = kl_xcalloc(m->cap, sizeof *m->vals);
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.keys[i])
            kl_dcore__map_put(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
}

void kl_dcore__map_put(kl_dcore__map_t *m, uint64_t key, void *val)
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

void *kl_dcore__map_get(const kl_dcore__map_t *m, uint64_t key)
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

void kl_dcore__map_del(kl_dcore__map_t *m, uint64_t key)
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

static void s_map_free(kl_dcore__map_t *m)
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

typedef struct kl_dcore__queue_s {
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
        kl_dcore__agent_clear(&c->agents[i]);
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
    kl_dcore__map_del(&c->reqs, req->id);
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
    kl_dcore__map_put(&self->reqs, req->id, req);
    s_queue_t *q = s_queue_for(self, req->target);
    for (size_t i = 0; i < req->n; i++)
        s_q_push(q, (s_qent_t){req->id, (uint32_t)i}, false);
    self->queued += req->n;
    self->st.submitted += req->n;
}

/* A lost candidate goes back to the front of its queue, or becomes
 * AGENT_LOST once it was sent 1 + retries times. */
void kl_dcore__requeue(kl_dcore_t *c, kl_dreq_t *req, size_t idx,
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
    kl_dreq_t *req = kl_dcore__map_get(&self->reqs, r->request_id);
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
        kl_dreq_t *r = kl_dcore__map_get(&c->reqs, e.req_id);
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
        kl_dreq_t *req = kl_dcore__map_get(&c->reqs, req_id);
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
            kl_dreq_t *req = kl_dcore__map_get(&self->reqs, h->req_id);
            if (req && req->state[h->idx] == KL_DC_INFLIGHT) {
                char why[128];
                snprintf(why, sizeof why,
                         "agent %s held candidate %u past its deadline",
                         a->name, h->idx);
                kl_warn("%s", why);
                kl_dcore__requeue(self, req, h->idx, why, now);
            }
        }
    }
}

int kl_dcore_cancel(kl_dcore_t *self, uint64_t req_id, int *slots, size_t max,
                    size_t *n_slots)
{
    *n_slots = 0;
    kl_dreq_t *req = kl_dcore__map_get(&self->reqs, req_id);
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
