/* kl_serve.c - the head node: a dispatch for the agents, a ROUTER for the
 * jobs (kl_serve.h). Here the loop, the messages from clients and the
 * head's life; the jobs and what is sent to them are kl_serve_jobs.c's,
 * the fair share between them kl_serve_share.c's. */
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

/* ---- messages from clients ---------------------------------------------- */

static void s_goodbye(kl_serve_t *s, const kl_peer_t *peer, const char *why)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Goodbye g = KILN__GOODBYE__INIT;
    g.reason = (char *)why;
    env.body_case = KILN__ENVELOPE__BODY_GOODBYE;
    env.goodbye = &g;
    kl_serve__send(s, peer, &env);
}

static void s_on_hello(kl_serve_t *s, const kl_peer_t *peer,
                       const Kiln__JobHello *h, double now)
{
    kl_sjob_t *j = kl_serve__job_by_peer(s, peer);
    const char *name = h->name && *h->name ? h->name : NULL;
    if (!j && !name) {
        s_goodbye(s, peer, "JobHello without a name");
        return;
    }
    kl_sjob_t *same = j ? NULL : kl_serve__job_by_name(s, name);
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
        double m = kl_serve__min_pass(s, j);
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
    if (kl_serve__req_find(j, m->request_id)) {
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
    double m_pass = kl_serve__min_pass(s, j);
    if (m_pass > j->pass)
        j->pass = m_pass;
    kl_sreq_t *r = kl_xcalloc(1, sizeof *r);
    r->job = j;
    r->id = m->request_id;
    r->env = *env;
    *env = NULL;
    r->t_recv = now;
    r->tgt = kl_serve__target(s, m->target);
    r->bytes = bytes;
    j->held_cands += m->n_candidates;
    j->held_bytes += bytes;
    j->reqs = kl_xrealloc(j->reqs, (j->n_reqs + 1) * sizeof *j->reqs);
    j->reqs[j->n_reqs++] = r;
}

static void s_on_cancel(kl_serve_t *s, kl_sjob_t *j, uint64_t id)
{
    kl_sreq_t *r = kl_serve__req_find(j, id);
    if (!r)
        return;
    size_t n = r->env->request->n_candidates;
    for (size_t i = r->next; i < n; i++)
        kl_serve__answer(s, r, i, KILN__STATUS__STATUS_CANCELLED, "cancelled");
    r->n_done += n - r->next;
    r->next = n;
    kl_serve__cancel_out(s, r);
    kl_serve__maybe_free(s, r);
}

/* Takes *env. */
static void s_on_client(kl_serve_t *s, const kl_peer_t *peer,
                        Kiln__Envelope **env, double now)
{
    Kiln__Envelope *e = *env;
    kl_sjob_t *j = kl_serve__job_by_peer(s, peer);
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
            kl_serve__job_gone(s, j, "said goodbye");
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
            kl_sjob_t *j = kl_serve__job_by_peer(s, &peer);
            if (j)
                kl_serve__job_gone(s, j,
                                   "sent a frame out of the protocol's bounds");
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
            kl_serve__job_gone(s, j, "silent");
        else if (!j->gone && j->unread)
            kl_serve__job_gone(s, j, "not reading what the head sends");
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

int kl_serve_run(kl_serve_t *s, volatile sig_atomic_t *stop, char *err)
{
    (void)err;
    bool left = false; /* messages held for a job (kl_serve__flush) */
    while (!*stop) {
        /* Woken by a job's message or by results from dispatch (all of
         * which kl_serve__drain_results took before). */
        zmq_pollitem_t it[2] = {
            {kl_net_socket(s->net), 0, ZMQ_POLLIN, 0},
            {kl_dispatch_socket(s->disp), 0, ZMQ_POLLIN, 0}};
        zmq_poll(it, 2, left ? 1 : 5);
        double now = kl_now_s();
        left = kl_serve__flush(s);
        s_drain_clients(s, now);
        kl_serve__drain_results(s);
        kl_serve__refresh_agents(s, now, false);
        s_tick(s, now);
        kl_serve__schedule(s);
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
        kl_serve__job_free(j);
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
