/* kl_serve.c - the head node: a dispatch for the agents, a ROUTER for the
 * jobs, and the fair share between them (kl_serve.h). */
#include "kl_serve.h"
#include "kl_serve_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"

/* ---- sending to jobs ---------------------------------------------------- */

void kl_serve__send(kl_serve_t *s, const kl_peer_t *peer, Kiln__Envelope *env)
{
    char err[KL_ERRMSG_LEN];
    int rc = kl_net_try_send(s->net, peer, env, err);
    if (rc != KL_OK && rc != KL_ERR_CLOSED)
        kl_warn("serve: send to a client: %s", err);
}

/* One job blocked on a full queue must not stall the head (and with it
 * every other job and the agents' results): sends never wait; what does
 * not fit is kept, packed, and goes first once the job reads again. */
void kl_serve__send_job(kl_serve_t *s, kl_sjob_t *j, Kiln__Envelope *env)
{
    if (j->gone || j->unread)
        return;
    char err[KL_ERRMSG_LEN];
    if (j->n_backlog == 0) {
        int rc = kl_net_try_send(s->net, &j->peer, env, err);
        if (rc != KL_ERR_TIMEOUT) {
            if (rc != KL_OK && rc != KL_ERR_CLOSED)
                kl_warn("serve: send to job %s: %s", j->name, err);
            return;
        }
    }
    if (j->backlog_head + j->n_backlog == j->cap_backlog) {
        if (j->backlog_head > 0) { /* slide the unsent to the front */
            memmove(j->backlog, j->backlog + j->backlog_head,
                    j->n_backlog * sizeof *j->backlog);
            j->backlog_head = 0;
        } else {
            j->cap_backlog = j->cap_backlog ? 2 * j->cap_backlog : 256;
            j->backlog =
                kl_xrealloc(j->backlog, j->cap_backlog * sizeof *j->backlog);
        }
    }
    env->version_major = KL_PROTO_MAJOR;
    env->version_minor = KL_PROTO_MINOR;
    size_t len = kiln__envelope__get_packed_size(env);
    if (j->n_backlog >= KL_SERVE_BACKLOG_MAX ||
        j->backlog_bytes + len > s->cfg.max_bytes_per_job) {
        /* Bounded: a job that does not read is dropped (s_tick), and
         * nothing more is kept for it meanwhile. */
        j->unread = true;
        return;
    }
    ProtobufCBinaryData *b = &j->backlog[j->backlog_head + j->n_backlog++];
    b->len = len;
    b->data = kl_xmalloc(b->len + 1);
    kiln__envelope__pack(env, b->data);
    j->backlog_bytes += len;
    if (j->n_backlog == 1)
        kl_info("serve: job %s does not keep up reading: holding its "
                "messages, and new work for it, until it does",
                j->name);
}

static void s_backlog_free(kl_sjob_t *j)
{
    for (size_t i = 0; i < j->n_backlog; i++)
        free(j->backlog[j->backlog_head + i].data);
    free(j->backlog);
    j->backlog = NULL;
    j->backlog_head = j->n_backlog = j->cap_backlog = j->backlog_bytes = 0;
}

static void s_goodbye(kl_serve_t *s, const kl_peer_t *peer, const char *why)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Goodbye g = KILN__GOODBYE__INIT;
    g.reason = (char *)why;
    env.body_case = KILN__ENVELOPE__BODY_GOODBYE;
    env.goodbye = &g;
    kl_serve__send(s, peer, &env);
}

/* A result the head makes itself (CANCELLED, INVALID) for candidate i. */
static void s_answer(kl_serve_t *s, kl_sreq_t *r, size_t i, Kiln__Status st,
                     const char *why)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobResult jr = KILN__JOB_RESULT__INIT;
    Kiln__MeasureResult mr = KILN__MEASURE_RESULT__INIT;
    mr.request_id = r->id;
    mr.candidate_id = r->env->request->candidates[i]->id;
    mr.status = st;
    mr.error = (char *)why;
    jr.result = &mr;
    jr.index = (uint32_t)i;
    jr.agent = "";
    jr.attempts = 0;
    jr.turnaround_s = kl_now_s() - r->t_recv;
    env.body_case = KILN__ENVELOPE__BODY_JOB_RESULT;
    env.job_result = &jr;
    kl_serve__send_job(s, r->job, &env);
    r->job->done++;
    s->n_forwarded++;
}

/* ---- tables ------------------------------------------------------------- */

/* disp_id -> index in s->chunks: open addressing, linear probing,
 * backward-shift delete (dispatch's ids are never 0). */
static size_t s_mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static void s_cmap_put(kl_serve_t *s, uint64_t key, size_t idx);

static void s_cmap_grow(kl_serve_t *s)
{
    uint64_t *keys = s->chunk_keys;
    size_t *idx = s->chunk_idx, cap = s->chunk_map_cap;
    s->chunk_map_cap = cap ? 2 * cap : 256;
    s->chunk_keys = kl_xcalloc(s->chunk_map_cap, sizeof *s->chunk_keys);
    s->chunk_idx = kl_xcalloc(s->chunk_map_cap, sizeof *s->chunk_idx);
    for (size_t i = 0; i < cap; i++)
        if (keys[i])
            s_cmap_put(s, keys[i], idx[i]);
    free(keys);
    free(idx);
}

/* Sets (or adds) key; the map holds at most n_chunks entries. */
static void s_cmap_put(kl_serve_t *s, uint64_t key, size_t idx)
{
    if (2 * (s->n_chunks + 1) > s->chunk_map_cap)
        s_cmap_grow(s);
    size_t mask = s->chunk_map_cap - 1, i = s_mix(key) & mask;
    while (s->chunk_keys[i] && s->chunk_keys[i] != key)
        i = (i + 1) & mask;
    s->chunk_keys[i] = key;
    s->chunk_idx[i] = idx;
}

/* Index in s->chunks of disp_id, or s->n_chunks when not there. */
static size_t s_cmap_get(const kl_serve_t *s, uint64_t key)
{
    if (!s->chunk_map_cap)
        return s->n_chunks;
    size_t mask = s->chunk_map_cap - 1, i = s_mix(key) & mask;
    for (; s->chunk_keys[i]; i = (i + 1) & mask)
        if (s->chunk_keys[i] == key)
            return s->chunk_idx[i];
    return s->n_chunks;
}

static void s_cmap_del(kl_serve_t *s, uint64_t key)
{
    if (!s->chunk_map_cap)
        return;
    size_t mask = s->chunk_map_cap - 1, i = s_mix(key) & mask;
    while (s->chunk_keys[i] && s->chunk_keys[i] != key)
        i = (i + 1) & mask;
    if (!s->chunk_keys[i])
        return;
    s->chunk_keys[i] = 0;
    for (size_t j = (i + 1) & mask; s->chunk_keys[j]; j = (j + 1) & mask) {
        size_t home = s_mix(s->chunk_keys[j]) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            s->chunk_keys[i] = s->chunk_keys[j];
            s->chunk_idx[i] = s->chunk_idx[j];
            s->chunk_keys[j] = 0;
            i = j;
        }
    }
}

/* Removes chunk k (answered in full): the last one takes its place. */
static void s_chunk_remove(kl_serve_t *s, size_t k)
{
    s_cmap_del(s, s->chunks[k].disp_id);
    s->chunks[k] = s->chunks[--s->n_chunks];
    if (k < s->n_chunks)
        s_cmap_put(s, s->chunks[k].disp_id, k);
}

/* The index in s->tgts of target, added when new. */
static size_t s_target(kl_serve_t *s, const char *target)
{
    for (size_t i = 0; i < s->n_tgts; i++)
        if (strcmp(s->tgts[i].name, target) == 0)
            return i;
    s->tgts = kl_xrealloc(s->tgts, (s->n_tgts + 1) * sizeof *s->tgts);
    s->tgts[s->n_tgts] = (kl_starget_t){.name = kl_xstrdup(target)};
    return s->n_tgts++;
}

static void s_req_remove(kl_sjob_t *j, kl_sreq_t *r)
{
    j->held_cands -= r->env->request->n_candidates;
    j->held_bytes -= r->bytes;
    for (size_t i = 0; i < j->n_reqs; i++)
        if (j->reqs[i] == r) {
            memmove(&j->reqs[i], &j->reqs[i + 1],
                    (j->n_reqs - i - 1) * sizeof *j->reqs);
            j->n_reqs--;
            if (i < j->q_from)
                j->q_from--;
            break;
        }
    kl_net_envelope_free(&r->env);
    free(r);
}

static void s_job_free(kl_sjob_t *j)
{
    while (j->n_reqs)
        s_req_remove(j, j->reqs[0]);
    for (size_t i = 0; i < j->n_targets; i++)
        free(j->targets[i]);
    free(j->targets);
    free(j->reqs);
    free(j->name);
    s_backlog_free(j);
    free(j);
}

/* Frees a request once nothing of it is queued or out, and a forgotten job
 * once it has no request left. */
static void s_maybe_free(kl_serve_t *s, kl_sreq_t *r)
{
    kl_sjob_t *j = r->job;
    if (r->n_out == 0 && r->next == r->env->request->n_candidates)
        s_req_remove(j, r);
    if (j->gone && j->n_reqs == 0)
        for (size_t i = 0; i < s->n_jobs; i++)
            if (s->jobs[i] == j) {
                s->jobs[i] = s->jobs[--s->n_jobs];
                s_job_free(j);
                break;
            }
}

static kl_sjob_t *s_job_by_peer(kl_serve_t *s, const kl_peer_t *p)
{
    for (size_t i = 0; i < s->n_jobs; i++) {
        kl_sjob_t *j = s->jobs[i];
        /* The key as well as the routing id (which a client may pick):
         * another key on a job's old routing id is not that job. */
        if (!j->gone && j->peer.len == p->len &&
            memcmp(j->peer.id, p->id, p->len) == 0 &&
            strcmp(j->owner_key, p->key) == 0)
            return j;
    }
    return NULL;
}

static kl_sjob_t *s_job_by_name(kl_serve_t *s, const char *name)
{
    for (size_t i = 0; i < s->n_jobs; i++)
        if (!s->jobs[i]->gone && strcmp(s->jobs[i]->name, name) == 0)
            return s->jobs[i];
    return NULL;
}

static kl_sreq_t *s_req_find(kl_sjob_t *j, uint64_t id)
{
    for (size_t i = 0; i < j->n_reqs; i++)
        if (j->reqs[i]->id == id)
            return j->reqs[i];
    return NULL;
}

/* Cancels at the agents what dispatch holds of r. */
static void s_cancel_out(kl_serve_t *s, kl_sreq_t *r)
{
    for (size_t i = 0; i < s->n_chunks; i++)
        if (s->chunks[i].req == r)
            kl_dispatch_cancel(s->disp, s->chunks[i].disp_id, NULL);
}

/* Forgets a job: queued work dropped, work in flight cancelled. */
static void s_job_gone(kl_serve_t *s, kl_sjob_t *j, const char *why)
{
    kl_info("serve: job %s gone (%s): %zu request(s) dropped", j->name, why,
            j->n_reqs);
    kl_serve__name_gone(s, j->name, kl_now_s());
    j->gone = true;
    s_backlog_free(j);
    for (size_t i = j->n_reqs; i-- > 0;) {
        kl_sreq_t *r = j->reqs[i];
        r->next = r->env->request->n_candidates;
        if (r->n_out)
            s_cancel_out(s, r); /* freed as their answers come */
        else
            s_req_remove(j, r);
    }
    if (j->n_reqs == 0)
        for (size_t i = 0; i < s->n_jobs; i++)
            if (s->jobs[i] == j) {
                s->jobs[i] = s->jobs[--s->n_jobs];
                s_job_free(j);
                break;
            }
}

/* ---- the fair share ----------------------------------------------------- */

/* Free credit of target t for the head: its agents' credit (as of the last
 * read of the agent list) minus what the head has out at dispatch. */
static size_t s_room(kl_serve_t *s, kl_starget_t *t)
{
    if (t->cap_gen != s->agents_gen) {
        t->cap = kl_serve__capacity(s, t->name, NULL);
        t->cap_gen = s->agents_gen;
    }
    return t->out < t->cap ? t->cap - t->out : 0;
}

/* The first request of j with queued candidates whose target has room. */
static kl_sreq_t *s_ready(kl_serve_t *s, kl_sjob_t *j, size_t *room)
{
    /* A request's queue only shrinks: the ones handed out in full stay
     * behind q_from until answered. */
    while (j->q_from < j->n_reqs &&
           j->reqs[j->q_from]->next >=
               j->reqs[j->q_from]->env->request->n_candidates)
        j->q_from++;
    for (size_t i = j->q_from; i < j->n_reqs; i++) {
        kl_sreq_t *r = j->reqs[i];
        if (r->next >= r->env->request->n_candidates)
            continue;
        size_t n = s_room(s, &s->tgts[r->tgt]);
        if (n) {
            *room = n;
            return r;
        }
    }
    return NULL;
}

static void s_submit_chunk(kl_serve_t *s, kl_sreq_t *r, size_t n)
{
    const Kiln__MeasureRequest *m = r->env->request;
    kl_dispatch_batch_t b = {.workload_key = m->workload_key.data,
                             .target = m->target,
                             .args = m->args,
                             .n_args = m->n_args,
                             .reference_source = m->reference_source,
                             .reference_entry = m->reference_entry,
                             .evaluator = m->evaluator,
                             .candidates = m->candidates + r->next,
                             .n_candidates = n};
    char err[KL_ERRMSG_LEN];
    uint64_t id = 0;
    size_t off = r->next;
    r->next += n;
    if (m->workload_key.len != 16 ||
        kl_dispatch_submit(s->disp, &b, &id, err) != KL_OK) {
        if (m->workload_key.len != 16)
            snprintf(err, sizeof err, "workload_key of %zu bytes (want 16)",
                     m->workload_key.len);
        for (size_t i = off; i < off + n; i++)
            s_answer(s, r, i, KILN__STATUS__STATUS_INVALID, err);
        r->n_done += n;
        return;
    }
    if (s->n_chunks == s->cap_chunks) {
        s->cap_chunks = s->cap_chunks ? 2 * s->cap_chunks : 64;
        s->chunks = kl_xrealloc(s->chunks, s->cap_chunks * sizeof *s->chunks);
    }
    s->chunks[s->n_chunks] = (kl_schunk_t){id, r, off, n, 0};
    s_cmap_put(s, id, s->n_chunks);
    s->n_chunks++;
    s->tgts[r->tgt].out += n;
    r->n_out += n;
}

/* Hands out work while some target has room: each time to the job of
 * least pass among those with a ready request. */
static void s_schedule(kl_serve_t *s)
{
    for (;;) {
        bool room = false;
        for (size_t t = 0; t < s->n_tgts && !room; t++)
            room = s_room(s, &s->tgts[t]) > 0;
        if (!room)
            return; /* every agent busy: nothing to decide */
        kl_sjob_t *best = NULL;
        kl_sreq_t *best_r = NULL;
        size_t best_room = 0;
        for (size_t i = 0; i < s->n_jobs; i++) {
            kl_sjob_t *j = s->jobs[i];
            size_t room;
            kl_sreq_t *r;
            if (j->gone || j->n_backlog || (best && j->pass >= best->pass) ||
                !(r = s_ready(s, j, &room)))
                continue;
            best = j;
            best_r = r;
            best_room = room;
        }
        if (!best)
            return;
        size_t left = best_r->env->request->n_candidates - best_r->next;
        size_t n = left < best_room ? left : best_room;
        if (n > KL_SERVE_CHUNK)
            n = KL_SERVE_CHUNK;
        s_submit_chunk(s, best_r, n);
        best->pass += (double)n / best->weight;
        s_maybe_free(s, best_r);
    }
}

/* The least pass of the jobs with queued work (a job that comes back from
 * idle starts there, so that it gets no burst for the time it was idle). */
static double s_min_pass(const kl_serve_t *s, const kl_sjob_t *except)
{
    double m = -1;
    for (size_t i = 0; i < s->n_jobs; i++) {
        const kl_sjob_t *j = s->jobs[i];
        bool queued = false;
        for (size_t k = j->q_from; k < j->n_reqs && !queued; k++)
            queued = j->reqs[k]->next < j->reqs[k]->env->request->n_candidates;
        if (j != except && !j->gone && queued && (m < 0 || j->pass < m))
            m = j->pass;
    }
    return m;
}

/* ---- results from dispatch ---------------------------------------------- */

static void s_forward(kl_serve_t *s, kl_dispatch_result_t *dr)
{
    size_t k = s_cmap_get(s, dr->request_id);
    if (k == s->n_chunks)
        return; /* not ours any more */
    kl_schunk_t *c = &s->chunks[k];
    kl_sreq_t *r = c->req;
    size_t index = c->off + dr->index;
    c->answered++;
    s->tgts[r->tgt].out--;
    r->n_out--;
    r->n_done++;
    if (c->answered == c->n)
        s_chunk_remove(s, k);
    if (!r->job->gone) {
        Kiln__Envelope env = KILN__ENVELOPE__INIT;
        Kiln__JobResult jr = KILN__JOB_RESULT__INIT;
        dr->result->request_id = r->id;
        dr->result->candidate_id = dr->candidate_id;
        jr.result = dr->result;
        jr.index = (uint32_t)index;
        jr.agent = (char *)(dr->agent ? dr->agent : "");
        jr.hostname = (char *)(dr->hostname ? dr->hostname : "");
        jr.device_name = (char *)(dr->device_name ? dr->device_name : "");
        jr.device_target = (char *)(dr->device_target ? dr->device_target : "");
        jr.attempts = dr->attempts;
        jr.turnaround_s = kl_now_s() - r->t_recv;
        env.body_case = KILN__ENVELOPE__BODY_JOB_RESULT;
        env.job_result = &jr;
        kl_serve__send_job(s, r->job, &env);
        s->n_forwarded++;
        if (!r->job->done++)
            r->job->t_first = kl_now_s();
    }
    s_maybe_free(s, r);
}

static void s_drain_results(kl_serve_t *s)
{
    kl_dispatch_result_t *dr = NULL;
    size_t n = 0;
    while (kl_dispatch_recv(s->disp, &dr, 0, NULL) == KL_OK) {
        s_forward(s, dr);
        kl_dispatch_result_free(&dr);
        /* Credit freed goes back out before the rest of a long batch is
         * forwarded, so that agents wait less. */
        if (++n % 64 == 0)
            s_schedule(s);
    }
}

/* ---- messages from clients ---------------------------------------------- */

static void s_on_hello(kl_serve_t *s, const kl_peer_t *peer,
                       const Kiln__JobHello *h, double now)
{
    kl_sjob_t *j = s_job_by_peer(s, peer);
    const char *name = h->name && *h->name ? h->name : NULL;
    if (!j && !name) {
        s_goodbye(s, peer, "JobHello without a name");
        return;
    }
    kl_sjob_t *same = j ? NULL : s_job_by_name(s, name);
    char why[KL_ERRMSG_LEN];
    if (same && strcmp(same->owner_key, peer->key) != 0) {
        /* A job is the key that opened it: another key never takes it
         * over, however long its connection has been silent. */
        snprintf(why, sizeof why,
                 "job %.200s is running on this head under another client "
                 "key (a job name belongs to the key that opened it)",
                 name);
        char what[KL_ERRMSG_LEN];
        snprintf(what, sizeof what, "JobHello from key %.40s refused: %.400s",
                 peer->key, why);
        kl_serve__log_refusal(s, peer->key, what, now);
        s_goodbye(s, peer, why);
        return;
    }
    if (same && now - same->last_heard > 3 * s->cfg.heartbeat_ms / 1000.0) {
        /* Its connection changed (a reconnect gets a new routing id) and
         * the old one went silent: the job carries on from here, with its
         * queue. */
        kl_info("serve: job %s reconnected", name);
        same->peer = *peer;
        j = same;
    } else if (same) {
        snprintf(why, sizeof why, "job %.200s is running on this head", name);
        s_goodbye(s, peer, why);
        return;
    }
    if (!j && kl_serve__job_refused(s, name, peer->key, now, why, sizeof why)) {
        char what[KL_ERRMSG_LEN];
        snprintf(what, sizeof what, "JobHello from key %.40s refused: %.400s",
                 peer->key, why);
        kl_serve__log_refusal(s, peer->key, what, now);
        s_goodbye(s, peer, why);
        return;
    }
    if (!j) {
        j = kl_xcalloc(1, sizeof *j);
        j->peer = *peer;
        j->name = kl_xstrdup(name);
        memcpy(j->owner_key, peer->key, sizeof j->owner_key);
        j->weight = h->weight ? h->weight : 1;
        j->n_targets = h->n_targets;
        j->targets = kl_xcalloc(h->n_targets + 1, sizeof *j->targets);
        for (size_t i = 0; i < h->n_targets; i++)
            j->targets[i] = kl_xstrdup(h->targets[i] ? h->targets[i] : "");
        double m = s_min_pass(s, j);
        j->pass = m > 0 ? m : 0; /* -1: no job has work */
        s->jobs = kl_xrealloc(s->jobs, (s->n_jobs + 1) * sizeof *s->jobs);
        s->jobs[s->n_jobs++] = j;
        s->n_jobs_seen++;
        kl_serve__name_live(s, j->name, j->owner_key);
        kl_info("serve: job %s (weight %u) from %s pid %u", j->name, j->weight,
                h->hostname ? h->hostname : "?", h->pid);
    }
    j->last_heard = now;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobWelcome w = KILN__JOB_WELCOME__INIT;
    w.head_id = s->head_id;
    w.heartbeat_ms = (uint32_t)s->cfg.heartbeat_ms;
    w.client_timeout_s = s->cfg.client_timeout_s;
    env.body_case = KILN__ENVELOPE__BODY_JOB_WELCOME;
    env.job_welcome = &w;
    kl_serve__send_job(s, j, &env);
}

/* Answers every candidate of m, which is not queued, STATUS_INVALID with
 * why; limit (may be NULL) names the head's limit that refused it. */
static void s_refuse(kl_serve_t *s, kl_sjob_t *j, const Kiln__MeasureRequest *m,
                     const char *why, const char *limit, double now)
{
    for (size_t i = 0; i < m->n_candidates && !j->unread; i++) {
        Kiln__Envelope env = KILN__ENVELOPE__INIT;
        Kiln__JobResult jr = KILN__JOB_RESULT__INIT;
        Kiln__MeasureResult mr = KILN__MEASURE_RESULT__INIT;
        mr.request_id = m->request_id;
        mr.candidate_id = m->candidates[i]->id;
        mr.status = KILN__STATUS__STATUS_INVALID;
        mr.error = (char *)why;
        jr.result = &mr;
        jr.index = (uint32_t)i;
        jr.agent = "";
        jr.limit = (char *)(limit ? limit : "");
        jr.turnaround_s = kl_now_s() - now;
        env.body_case = KILN__ENVELOPE__BODY_JOB_RESULT;
        env.job_result = &jr;
        kl_serve__send_job(s, j, &env);
        j->done++;
        s->n_forwarded++;
    }
}

/* Takes *env (a MeasureRequest of job j). */
static void s_on_request(kl_serve_t *s, kl_sjob_t *j, Kiln__Envelope **env,
                         double now)
{
    Kiln__MeasureRequest *m = (*env)->request;
    s->n_requests++;
    if (s_req_find(j, m->request_id)) {
        kl_warn("serve: job %s re-sent request %llu: dropped", j->name,
                (unsigned long long)m->request_id);
        kl_net_envelope_free(env);
        return;
    }
    char why[KL_ERRMSG_LEN];
    const char *limit = NULL;
    size_t bytes = kiln__measure_request__get_packed_size(m);
    if (m->n_candidates == 0) {
        kl_warn("serve: job %s sent request %llu without candidates: "
                "nothing to answer",
                j->name, (unsigned long long)m->request_id);
        kl_net_envelope_free(env);
        return;
    }
    if (!m->target || !*m->target) {
        snprintf(why, sizeof why, "request %llu refused: it has no target",
                 (unsigned long long)m->request_id);
        s_refuse(s, j, m, why, NULL, now);
        kl_net_envelope_free(env);
        return;
    }
    if (kl_serve__request_refused(s, j, m, bytes, why, sizeof why, &limit)) {
        char what[KL_ERRMSG_LEN];
        snprintf(what, sizeof what, "job %.100s: %.400s", j->name, why);
        char tag[KL_ERRMSG_LEN];
        snprintf(tag, sizeof tag, "%s %.200s", limit, j->name);
        kl_serve__log_refusal(s, tag, what, now);
        s_refuse(s, j, m, why, limit, now);
        kl_net_envelope_free(env);
        return;
    }
    /* Idle until now: start at the pass of the jobs that kept working. */
    double m_pass = s_min_pass(s, j);
    if (m_pass > j->pass)
        j->pass = m_pass;
    kl_sreq_t *r = kl_xcalloc(1, sizeof *r);
    r->job = j;
    r->id = m->request_id;
    r->env = *env;
    *env = NULL;
    r->t_recv = now;
    r->tgt = s_target(s, m->target);
    r->bytes = bytes;
    j->held_cands += m->n_candidates;
    j->held_bytes += bytes;
    j->reqs = kl_xrealloc(j->reqs, (j->n_reqs + 1) * sizeof *j->reqs);
    j->reqs[j->n_reqs++] = r;
}

static void s_on_cancel(kl_serve_t *s, kl_sjob_t *j, uint64_t id)
{
    kl_sreq_t *r = s_req_find(j, id);
    if (!r)
        return;
    size_t n = r->env->request->n_candidates;
    for (size_t i = r->next; i < n; i++)
        s_answer(s, r, i, KILN__STATUS__STATUS_CANCELLED, "cancelled");
    r->n_done += n - r->next;
    r->next = n;
    s_cancel_out(s, r);
    s_maybe_free(s, r);
}

/* Takes *env. */
static void s_on_client(kl_serve_t *s, const kl_peer_t *peer,
                        Kiln__Envelope **env, double now)
{
    Kiln__Envelope *e = *env;
    kl_sjob_t *j = s_job_by_peer(s, peer);
    if (j)
        j->last_heard = now;
    switch (e->body_case) {
    case KILN__ENVELOPE__BODY_JOB_HELLO:
        s_on_hello(s, peer, e->job_hello, now);
        break;
    case KILN__ENVELOPE__BODY_STATUS_QUERY:
        kl_serve__on_status(s, peer, e->status_query->seq, now);
        break;
    case KILN__ENVELOPE__BODY_DRAIN:
        kl_serve__on_drain(s, peer, e->drain);
        break;
    case KILN__ENVELOPE__BODY_HEARTBEAT:
        break;
    case KILN__ENVELOPE__BODY_GOODBYE:
        if (j)
            s_job_gone(s, j, "said goodbye");
        break;
    case KILN__ENVELOPE__BODY_REQUEST:
    case KILN__ENVELOPE__BODY_CANCEL:
    case KILN__ENVELOPE__BODY_AGENTS_QUERY:
        if (!j)
            s_goodbye(s, peer, "say JobHello first");
        else if (e->body_case == KILN__ENVELOPE__BODY_REQUEST)
            s_on_request(s, j, env, now);
        else if (e->body_case == KILN__ENVELOPE__BODY_CANCEL)
            s_on_cancel(s, j, e->cancel->request_id);
        else
            kl_serve__on_agents(s, peer, e->agents_query);
        break;
    default:
        s_goodbye(s, peer, "not a message for a head node");
        break;
    }
    kl_net_envelope_free(env);
}

static void s_drain_clients(kl_serve_t *s, double now)
{
    for (int k = 0; k < 256; k++) {
        kl_peer_t peer;
        Kiln__Envelope *env = NULL;
        char err[KL_ERRMSG_LEN];
        int rc = kl_net_recv(s->net, &peer, &env, 0, err);
        if (rc == KL_ERR_TIMEOUT)
            return;
        if (rc == KL_ERR_VERSION) {
            char why[KL_ERRMSG_LEN];
            snprintf(why, sizeof why,
                     "protocol version %u.%u refused: this head speaks %d.%d",
                     env->version_major, env->version_minor, KL_PROTO_MAJOR,
                     KL_PROTO_MINOR);
            s_goodbye(s, &peer, why);
        } else if (rc == KL_OK) {
            s_on_client(s, &peer, &env, now);
        } else if (rc == KL_ERR_PROTO && peer.len > 0) {
            /* Out of the protocol's bounds (docs/protocol.md section 5):
             * answered, not dropped in silence. A job that sends one is
             * dropped: its own kl_net_send would never have. */
            char why[KL_ERRMSG_LEN];
            snprintf(why, sizeof why, "frame refused: %.480s", err);
            kl_serve__log_refusal(s, "frame", why, now);
            kl_sjob_t *j = s_job_by_peer(s, &peer);
            if (j)
                s_job_gone(s, j, "sent a frame out of the protocol's bounds");
            s_goodbye(s, &peer, why);
        } else {
            kl_warn("serve: from a client: %s", err);
        }
        kl_net_envelope_free(&env);
    }
}

static void s_tick(kl_serve_t *s, double now)
{
    kl_serve__names_save(s, now, false);
    for (size_t i = s->n_jobs; i-- > 0;) {
        if (i >= s->n_jobs)
            continue;
        kl_sjob_t *j = s->jobs[i];
        if (!j->gone && now - j->last_heard > s->cfg.client_timeout_s)
            s_job_gone(s, j, "silent");
        else if (!j->gone && j->unread)
            s_job_gone(s, j, "not reading what the head sends");
    }
    if (now < s->next_hb)
        return;
    s->next_hb = now + s->cfg.heartbeat_ms / 1000.0;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    hb.seq = ++s->hb_seq;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    for (size_t i = 0; i < s->n_jobs; i++)
        if (!s->jobs[i]->n_backlog) /* else it has plenty to read */
            kl_serve__send_job(s, s->jobs[i], &env);
}

/* Sends what jobs' full queues did not take, oldest first, until a queue
 * is full again. Whether there is any left. */
static bool s_flush(kl_serve_t *s)
{
    bool left = false;
    for (size_t i = 0; i < s->n_jobs; i++) {
        kl_sjob_t *j = s->jobs[i];
        while (j->n_backlog && !j->gone) {
            ProtobufCBinaryData *b = &j->backlog[j->backlog_head];
            Kiln__Envelope *env = kiln__envelope__unpack(NULL, b->len, b->data);
            char err[KL_ERRMSG_LEN];
            int rc = env ? kl_net_try_send(s->net, &j->peer, env, err)
                         : KL_ERR_INTERNAL;
            if (env)
                kiln__envelope__free_unpacked(env, NULL);
            if (rc == KL_ERR_TIMEOUT)
                break;
            if (rc != KL_OK && rc != KL_ERR_CLOSED)
                kl_warn("serve: send to job %s: %s", j->name,
                        env ? err : "a held message does not unpack");
            free(b->data);
            j->backlog_bytes -= b->len;
            j->backlog_head++;
            if (--j->n_backlog == 0) {
                j->backlog_head = 0;
                kl_info("serve: job %s reads again", j->name);
            }
        }
        left |= j->n_backlog > 0;
    }
    return left;
}

int kl_serve_run(kl_serve_t *s, volatile sig_atomic_t *stop, char *err)
{
    (void)err;
    bool left = false; /* messages held for a job (s_flush) */
    while (!*stop) {
        /* Woken by a job's message or by results from dispatch (all of
         * which s_drain_results took before). */
        zmq_pollitem_t it[2] = {
            {kl_net_socket(s->net), 0, ZMQ_POLLIN, 0},
            {kl_dispatch_socket(s->disp), 0, ZMQ_POLLIN, 0}};
        zmq_poll(it, 2, left ? 1 : 5);
        double now = kl_now_s();
        left = s_flush(s);
        s_drain_clients(s, now);
        s_drain_results(s);
        kl_serve__refresh_agents(s, now, false);
        s_tick(s, now);
        s_schedule(s);
        if (s->on_tick)
            s->on_tick(s, s->tick_arg);
    }
    return KL_OK;
}

/* ---- life --------------------------------------------------------------- */

int kl_serve_new(kl_serve_t **out, const kl_serve_config_t *cfg, char *err)
{
    *out = NULL;
    if (!cfg->insecure && !cfg->keys_dir)
        return kl_seterr(err, KL_ERR_INVAL,
                         "kiln serve needs --keys DIR (coordinator.key, "
                         "agents/, clients/) or --insecure on loopback");
    kl_serve_t *s = kl_xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    s->t_start = kl_now_s();
    if (s->cfg.heartbeat_ms <= 0)
        s->cfg.heartbeat_ms = 1000;
    if (s->cfg.client_timeout_s <= 0)
        s->cfg.client_timeout_s = 30;
    if (s->cfg.name_hold_s <= 0)
        s->cfg.name_hold_s = KL_SERVE_DEF_NAME_HOLD_S;
    if (!s->cfg.max_queued_per_job)
        s->cfg.max_queued_per_job = KL_SERVE_DEF_MAX_QUEUED;
    if (!s->cfg.max_bytes_per_job)
        s->cfg.max_bytes_per_job = KL_SERVE_DEF_MAX_BYTES;
    if (!s->cfg.max_candidate_bytes)
        s->cfg.max_candidate_bytes = KL_SERVE_DEF_MAX_CANDIDATE;
    if (!s->cfg.max_timeout_ms)
        s->cfg.max_timeout_ms = KL_SERVE_DEF_MAX_TIMEOUT_MS;
    if (!s->cfg.max_jobs_per_key)
        s->cfg.max_jobs_per_key = KL_SERVE_DEF_MAX_JOBS_PER_KEY;
    snprintf(s->head_id, sizeof s->head_id, "%s",
             cfg->head_id ? cfg->head_id : "");
    /* Unique per start, so that a job tells a restarted head from the
     * one it knew (kl_port_fleet.h re-sends its work to a new one). */
    static unsigned s_starts;
    if (!cfg->head_id)
        snprintf(s->head_id, sizeof s->head_id, "kiln-serve-%d-%lld-%u",
                 (int)getpid(), (long long)time(NULL), ++s_starts);
    char *agents = NULL, *clients = NULL;
    kl_net_security_t sa = {.insecure = cfg->insecure}, sc = sa;
    if (!cfg->insecure) {
        agents = kl_xasprintf("%s/agents", cfg->keys_dir);
        clients = kl_xasprintf("%s/clients", cfg->keys_dir);
        sa.keys_dir = sc.keys_dir = cfg->keys_dir;
        sa.name = sc.name = "coordinator";
        sa.allow_dir = agents;
        sc.allow_dir = clients;
        /* Operators are clients too: the client socket admits them. */
        s->ops_dir = kl_xasprintf("%s/operators", cfg->keys_dir);
        sc.also_allow_dir = s->ops_dir;
    }
    kl_dispatch_config_t dc = {.endpoint = cfg->agents_endpoint,
                               .security = sa,
                               .heartbeat_ms = s->cfg.heartbeat_ms,
                               .retries = -1,
                               .coordinator_id = s->head_id,
                               .name_hold_s = s->cfg.name_hold_s};
    kl_serve__operators_load(s);
    int rc = kl_serve__state_load(s, err);
    if (rc == KL_OK)
        rc = kl_serve__names_load(s, err);
    if (rc == KL_OK)
        rc = kl_dispatch_new(&s->disp, &dc, err);
    if (rc == KL_OK)
        rc = kl_net_server_new(&s->net, cfg->clients_endpoint, &sc, err);
    free(agents);
    free(clients);
    if (rc != KL_OK) {
        kl_serve_destroy(&s);
        return rc;
    }
    *out = s;
    return KL_OK;
}

void kl_serve_destroy(kl_serve_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_serve_t *s = *self_p;
    /* The jobs still live are written as such: a restarted head holds
     * their names for their keys. */
    kl_serve__names_save(s, kl_now_s(), true);
    while (s->n_jobs) {
        kl_sjob_t *j = s->jobs[s->n_jobs - 1];
        if (!j->gone && s->net)
            s_goodbye(s, &j->peer, "head shutting down");
        s->n_jobs--;
        s_job_free(j);
    }
    free(s->jobs);
    free(s->chunks);
    free(s->chunk_keys);
    free(s->chunk_idx);
    for (size_t i = 0; i < s->n_tgts; i++)
        free(s->tgts[i].name);
    free(s->tgts);
    free(s->agents);
    kl_serve__state_free(s);
    kl_serve__tenants_free(s);
    kl_net_destroy(&s->net);
    kl_dispatch_destroy(&s->disp);
    free(s);
    *self_p = NULL;
}

void kl_serve_on_tick(kl_serve_t *self, void (*fn)(kl_serve_t *, void *),
                      void *arg)
{
    self->on_tick = fn;
    self->tick_arg = arg;
}

const char *kl_serve_agents_endpoint(const kl_serve_t *self)
{
    return kl_dispatch_endpoint(self->disp);
}

const char *kl_serve_clients_endpoint(const kl_serve_t *self)
{
    return kl_net_endpoint(self->net);
}
