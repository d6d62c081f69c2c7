/* kl_serve_status.c - the head node's agents as seen from dispatch, and
 * the queries of kiln fleet: agents, status, drain (kl_serve.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_serve_int.h"
#include "kl_util.h"

/* ---- agents ------------------------------------------------------------- */

void kl_serve__refresh_agents(kl_serve_t *s, double now, bool force)
{
    /* Read before the list: a change after it is seen next time. */
    uint64_t gen = kl_dispatch_agents_gen(s->disp);
    if (!force && (now - s->agents_at < KL_SERVE_AGENTS_EVERY_S ||
                   gen == s->agents_disp_gen))
        return;
    kl_dispatch_agent_info_t *v = NULL;
    size_t n = 0;
    if (kl_dispatch_agent_list(s->disp, &v, &n, NULL) != KL_OK)
        return;
    s->agents_disp_gen = gen;
    free(s->agents);
    s->agents = v;
    s->n_agents = n;
    s->agents_at = now;
    s->agents_gen++;
    if (s->n_drained)
        kl_serve__state_apply(s);
}

static bool s_agent_matches(const kl_dispatch_agent_info_t *a,
                            const char *target)
{
    size_t nd = a->n_devices < KL_DISPATCH_INFO_DEVICES
                    ? a->n_devices
                    : KL_DISPATCH_INFO_DEVICES;
    for (size_t d = 0; d < nd; d++)
        if (kl_dispatch_device_match(target, a->device_target[d],
                                     a->device_features[d]))
            return true;
    return false;
}

/* Credit of the agents that take work of target now. */
size_t kl_serve__capacity(const kl_serve_t *s, const char *target,
                          size_t *n_agents)
{
    size_t c = 0, n = 0;
    for (size_t i = 0; i < s->n_agents; i++)
        if (!s->agents[i].drained && s_agent_matches(&s->agents[i], target)) {
            c += s->agents[i].credit;
            n++;
        }
    if (n_agents)
        *n_agents = n;
    return c;
}

void kl_serve__on_agents(kl_serve_t *s, const kl_peer_t *peer,
                         const Kiln__AgentsQuery *q)
{
    kl_serve__refresh_agents(s, kl_now_s(), true);
    size_t n = 0;
    if (q->target && *q->target)
        kl_serve__capacity(s, q->target, &n);
    else
        for (size_t i = 0; i < s->n_agents; i++)
            n += !s->agents[i].drained;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__AgentsReply r = KILN__AGENTS_REPLY__INIT;
    r.seq = q->seq;
    r.agents = (uint32_t)n;
    env.body_case = KILN__ENVELOPE__BODY_AGENTS_REPLY;
    env.agents_reply = &r;
    kl_serve__send(s, peer, &env);
}

/* ---- the snapshot ------------------------------------------------------- */

const char *kl_serve_job_state_name(kl_serve_job_state_t st)
{
    switch (st) {
    case KL_SERVE_JOB_QUEUED:
        return "queued";
    case KL_SERVE_JOB_RUNNING:
        return "running";
    case KL_SERVE_JOB_WAITING:
        return "waiting";
    default:
        return "idle";
    }
}

/* Why j's work is or is not moving (kl_serve_job_state_t). */
static void s_job_state(const kl_serve_t *s, const kl_sjob_t *j,
                        kl_serve_job_info_t *x)
{
    const char *wait = NULL;
    size_t n;
    for (size_t k = 0; k < j->n_reqs && !wait; k++) {
        const Kiln__MeasureRequest *m = j->reqs[k]->env->request;
        if (j->reqs[k]->next < m->n_candidates) {
            kl_serve__capacity(s, m->target, &n);
            if (n == 0)
                wait = m->target;
        }
    }
    if (!wait && x->queued == 0 && x->in_flight == 0) {
        const char *first = NULL;
        bool served = false;
        for (size_t t = 0; t < j->n_targets && !served; t++) {
            if (!*j->targets[t])
                continue;
            first = first ? first : j->targets[t];
            kl_serve__capacity(s, j->targets[t], &n);
            served = n > 0;
        }
        if (!served)
            wait = first;
    }
    x->waiting_target = wait ? kl_xstrdup(wait) : NULL;
    x->state = wait           ? KL_SERVE_JOB_WAITING
               : x->in_flight ? KL_SERVE_JOB_RUNNING
               : x->queued    ? KL_SERVE_JOB_QUEUED
                              : KL_SERVE_JOB_IDLE;
}

static void s_job_info(const kl_serve_t *s, const kl_sjob_t *j, double now,
                       kl_serve_job_info_t *x)
{
    x->name = kl_xstrdup(j->name);
    memcpy(x->owner_key, j->owner_key, sizeof x->owner_key);
    x->owner_key[sizeof x->owner_key - 1] = '\0';
    x->n_targets = j->n_targets;
    x->targets = kl_xcalloc(j->n_targets + 1, sizeof *x->targets);
    for (size_t t = 0; t < j->n_targets; t++)
        x->targets[t] = kl_xstrdup(j->targets[t]);
    x->weight = j->weight;
    for (size_t k = 0; k < j->n_reqs; k++) {
        kl_sreq_t *r = j->reqs[k];
        x->queued += r->env->request->n_candidates - r->next;
        x->in_flight += r->n_out;
    }
    x->done = j->done;
    x->rate = j->done > 1 && now > j->t_first
                  ? (double)(j->done - 1) / (now - j->t_first)
                  : 0;
    s_job_state(s, j, x);
}

kl_serve_snap_t *kl_serve_snapshot(kl_serve_t *s)
{
    double now = kl_now_s();
    /* The agents' counters (busy, results, last seen) change without a
     * join or a leave: read them again when a second old. */
    kl_serve__refresh_agents(s, now, now - s->agents_at > 1.0);
    kl_serve_snap_t *p = kl_xcalloc(1, sizeof *p);
    snprintf(p->head_id, sizeof p->head_id, "%s", s->head_id);
    p->uptime_s = now - s->t_start;
    p->results_forwarded = s->n_forwarded;
    p->requests_received = s->n_requests;
    p->jobs_seen = s->n_jobs_seen;
    p->n_agents = s->n_agents;
    p->agents = kl_xcalloc(s->n_agents + 1, sizeof *p->agents);
    if (s->n_agents)
        memcpy(p->agents, s->agents, s->n_agents * sizeof *p->agents);
    p->jobs = kl_xcalloc(s->n_jobs + 1, sizeof *p->jobs);
    for (size_t i = 0; i < s->n_jobs; i++)
        if (!s->jobs[i]->gone)
            s_job_info(s, s->jobs[i], now, &p->jobs[p->n_jobs++]);
    return p;
}

void kl_serve_snap_free(kl_serve_snap_t **snap_p)
{
    if (!snap_p || !*snap_p)
        return;
    kl_serve_snap_t *p = *snap_p;
    for (size_t i = 0; i < p->n_jobs; i++) {
        kl_serve_job_info_t *x = &p->jobs[i];
        for (size_t t = 0; t < x->n_targets; t++)
            free(x->targets[t]);
        free(x->targets);
        free(x->name);
        free(x->waiting_target);
    }
    free(p->jobs);
    free(p->agents);
    free(p);
    *snap_p = NULL;
}

/* ---- kiln fleet ---------------------------------------------------------- */

void kl_serve__on_status(kl_serve_t *s, const kl_peer_t *peer, uint64_t seq,
                         double now)
{
    kl_serve__refresh_agents(s, now, true);
    kl_serve_snap_t *p = kl_serve_snapshot(s);
    /* The agents are every client's to see (which targets the fleet
     * serves, what is drained); the jobs only their owner's, and an
     * operator's. */
    bool all = kl_serve__is_operator(s, peer->key, now);
    size_t na = p->n_agents, nj = 0;
    Kiln__AgentStatus *as = kl_xcalloc(na + 1, sizeof *as);
    Kiln__AgentStatus **asp = kl_xcalloc(na + 1, sizeof *asp);
    char **dt = kl_xcalloc(na * KL_DISPATCH_INFO_DEVICES + 1, sizeof *dt);
    char **dn = kl_xcalloc(na * KL_DISPATCH_INFO_DEVICES + 1, sizeof *dn);
    for (size_t i = 0; i < na; i++) {
        kl_dispatch_agent_info_t *a = &p->agents[i];
        Kiln__AgentStatus *x = &as[i];
        kiln__agent_status__init(x);
        x->name = a->name;
        x->hostname = a->hostname;
        size_t nd = a->n_devices < KL_DISPATCH_INFO_DEVICES
                        ? a->n_devices
                        : KL_DISPATCH_INFO_DEVICES;
        x->device_targets = dt + i * KL_DISPATCH_INFO_DEVICES;
        x->device_names = dn + i * KL_DISPATCH_INFO_DEVICES;
        for (size_t d = 0; d < nd; d++) {
            x->device_targets[d] = a->device_target[d];
            x->device_names[d] = a->device_name[d];
        }
        x->n_device_targets = x->n_device_names = nd;
        x->build_slots = a->credit ? a->credit - 1 : 0;
        x->busy = a->busy;
        x->results = a->results;
        x->failures = a->failures;
        x->last_seen_s = a->last_seen_s;
        x->drained = a->drained;
        x->unsandboxed = a->unsandboxed;
        asp[i] = x;
    }
    Kiln__JobStatus *js = kl_xcalloc(p->n_jobs + 1, sizeof *js);
    Kiln__JobStatus **jsp = kl_xcalloc(p->n_jobs + 1, sizeof *jsp);
    for (size_t i = 0; i < p->n_jobs; i++) {
        kl_serve_job_info_t *j = &p->jobs[i];
        if (!all && strcmp(j->owner_key, peer->key) != 0)
            continue;
        Kiln__JobStatus *x = &js[nj];
        kiln__job_status__init(x);
        x->name = j->name;
        x->owner_key = j->owner_key;
        x->targets = j->targets;
        x->n_targets = j->n_targets;
        x->weight = j->weight;
        x->queued = j->queued;
        x->in_flight = j->in_flight;
        x->done = j->done;
        x->rate = j->rate;
        x->state = (char *)kl_serve_job_state_name(j->state);
        x->waiting_target = j->waiting_target ? j->waiting_target : "";
        jsp[nj++] = x;
    }
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__StatusReply r = KILN__STATUS_REPLY__INIT;
    r.seq = seq;
    r.head_id = s->head_id;
    r.agents = asp;
    r.n_agents = na;
    r.jobs = jsp;
    r.n_jobs = nj;
    r.all_jobs = all;
    env.body_case = KILN__ENVELOPE__BODY_STATUS_REPLY;
    env.status_reply = &r;
    kl_serve__send(s, peer, &env);
    free(as);
    free(asp);
    free(dt);
    free(dn);
    free(js);
    free(jsp);
    kl_serve_snap_free(&p);
}

void kl_serve__on_drain(kl_serve_t *s, const kl_peer_t *peer,
                        const Kiln__Drain *d)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__DrainReply r = KILN__DRAIN_REPLY__INIT;
    r.seq = d->seq;
    env.body_case = KILN__ENVELOPE__BODY_DRAIN_REPLY;
    env.drain_reply = &r;
    double now = kl_now_s();
    if (!kl_serve__is_operator(s, peer->key, now)) {
        /* Nothing changes, nothing is written to --state. */
        char what[KL_ERRMSG_LEN];
        r.error = d->undrain ? "undrain needs an operator key (the head's "
                               "KEYS/operators/): refused, nothing changed"
                             : "drain needs an operator key (the head's "
                               "KEYS/operators/): refused, nothing changed";
        snprintf(what, sizeof what, "%s of agent %.200s from key %.40s: %s",
                 d->undrain ? "undrain" : "drain", d->agent ? d->agent : "",
                 peer->key, r.error);
        kl_serve__log_refusal(s, "drain", what, now);
        kl_serve__send(s, peer, &env);
        return;
    }
    size_t n = 0;
    if (d->agent && *d->agent &&
        kl_dispatch_drain(s->disp, d->agent, !d->undrain, &n, NULL) == KL_OK)
        kl_info("serve: %s agent %s (%zu matched)",
                d->undrain ? "undrained" : "drained", d->agent, n);
    /* Remembered (--state: written) when it matched a live agent; a name
     * remembered counts as one match, so that an agent drained before a
     * restart of the head can be undrained while it is away. */
    if (d->agent && *d->agent) {
        bool had = kl_serve__state_has(s, d->agent);
        if (n > 0 || d->undrain)
            kl_serve__state_set(s, d->agent, !d->undrain);
        if (n == 0 && had)
            n = 1;
    }
    kl_serve__refresh_agents(s, kl_now_s(), true);
    r.matched = (uint32_t)n;
    kl_serve__send(s, peer, &env);
}
