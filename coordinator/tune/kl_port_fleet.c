/* kl_port_fleet.c - a job's port to a head node (kl_port_fleet.h). */
#include "kl_port_fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"

/* One MeasureRequest on the wire for (part of) a job's request: its id
 * at the head and, for a part, the job's index of each of its candidates
 * (map NULL: all of them, in order). A superseded one was cancelled at the
 * head when the request was sent again. */
typedef struct {
    uint64_t id;
    uint32_t *map;
    size_t n;
    bool superseded;
} s_wire_t;

typedef struct {
    uint64_t id;  /* the job's */
    uint8_t *buf; /* the packed Envelope */
    size_t len;
    size_t n;
    uint8_t *answered; /* per candidate */
    size_t n_answered;
    s_wire_t *wires;
    size_t n_wires;
} s_sent_t;

struct kl_port_fleet_s {
    kl_net_t *net;
    char *endpoint;
    bool job; /* said JobHello */
    uint64_t next_req, seq, hb_seq;
    double hb_s, last_sent, last_heard;
    char closed[KL_ERRMSG_LEN]; /* the head's Goodbye, "" while open */
    /* closed because the head refused a request for one of its limits
     * (JobResult.limit): this side still says Goodbye at the end. */
    bool refused;
    /* The JobHello, kept to say it again to a restarted head. */
    char *name, **targets;
    size_t n_targets;
    uint32_t weight;
    char head_id[128];
    double rehello_at;
    /* Said JobHello again (the head went silent or forgot the job): the
     * next welcome sends the unanswered work again. */
    bool resend_due;
    /* Requests not fully answered, packed, to send again (s_resend); which
     * of their candidates were answered (a result is given to the job
     * once), and their wire messages. */
    s_sent_t *sent;
    size_t n_sent, cap_sent;
    /* Results received while waiting for something else. */
    kl_dispatch_result_t **pend;
    size_t pend_head, pend_n, pend_cap;
};

static int s_send(kl_port_fleet_t *f, Kiln__Envelope *env, char *err)
{
    if (f->closed[0])
        return kl_seterr(err, KL_ERR_CLOSED, "head %s: %s", f->endpoint,
                         f->closed);
    int rc = kl_net_send(f->net, NULL, env, err);
    if (rc == KL_OK)
        f->last_sent = kl_now_s();
    return rc;
}

static void s_heartbeat(kl_port_fleet_t *f)
{
    if (!f->job || kl_now_s() - f->last_sent < f->hb_s)
        return;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    hb.seq = ++f->hb_seq;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    s_send(f, &env, NULL);
}

static void s_send_hello(kl_port_fleet_t *f)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobHello h = KILN__JOB_HELLO__INIT;
    h.name = f->name;
    h.weight = f->weight;
    h.targets = f->targets;
    h.n_targets = f->n_targets;
    h.hostname = host;
    h.pid = (uint32_t)getpid();
    env.body_case = KILN__ENVELOPE__BODY_JOB_HELLO;
    env.job_hello = &h;
    s_send(f, &env, NULL);
}

/* A head that said nothing for 3 heartbeats (and a second) may have
 * restarted without knowing this job: say JobHello again, once a second.
 * The head that still knows the job just welcomes it again. */
static void s_maybe_rehello(kl_port_fleet_t *f)
{
    double now = kl_now_s();
    if (!f->job || now < f->rehello_at ||
        (now - f->last_heard < 3 * f->hb_s + 1 && f->rehello_at == 0))
        return;
    f->rehello_at = now + 1;
    f->resend_due = true;
    s_send_hello(f);
}

/* The request and the wire message that head request id wire belongs
 * to. */
static s_sent_t *s_sent_find(kl_port_fleet_t *f, uint64_t wire, s_wire_t **w)
{
    for (size_t i = 0; i < f->n_sent; i++)
        for (size_t k = 0; k < f->sent[i].n_wires; k++)
            if (f->sent[i].wires[k].id == wire) {
                *w = &f->sent[i].wires[k];
                return &f->sent[i];
            }
    return NULL;
}

static void s_sent_drop(kl_port_fleet_t *f, s_sent_t *r)
{
    free(r->buf);
    free(r->answered);
    for (size_t k = 0; k < r->n_wires; k++)
        free(r->wires[k].map);
    free(r->wires);
    *r = f->sent[--f->n_sent];
}

static s_wire_t *s_wire_add(s_sent_t *r, uint64_t id)
{
    r->wires = kl_xrealloc(r->wires, (r->n_wires + 1) * sizeof *r->wires);
    s_wire_t *w = &r->wires[r->n_wires++];
    *w = (s_wire_t){.id = id, .n = r->n};
    return w;
}

static int s_cancel_wire(kl_port_fleet_t *f, uint64_t wire, char *err)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Cancel c = KILN__CANCEL__INIT;
    c.request_id = wire;
    env.body_case = KILN__ENVELOPE__BODY_CANCEL;
    env.cancel = &c;
    return s_send(f, &env, err);
}

/* Sends the unanswered candidates of r again, under a new head request
 * id, and cancels what the head may still hold of r under the old ones: a
 * head that restarted does not know them, and one that lost this job's
 * connection meanwhile answered some of them into the void (a ROUTER
 * drops what it sends to a connection gone; TCP what was in flight), and
 * drops a request id it already has, so the same id would not do. */
static void s_resend(kl_port_fleet_t *f, s_sent_t *r)
{
    Kiln__Envelope *env = NULL;
    if (kl_net_decode(r->buf, r->len, &env, NULL) != KL_OK)
        return;
    for (size_t k = 0; k < r->n_wires; k++)
        if (!r->wires[k].superseded) {
            r->wires[k].superseded = true;
            s_cancel_wire(f, r->wires[k].id, NULL);
        }
    Kiln__MeasureRequest *m = env->request;
    Kiln__Candidate **left = kl_xcalloc(r->n, sizeof *left);
    s_wire_t *w = s_wire_add(r, ++f->next_req);
    w->map = kl_xcalloc(r->n, sizeof *w->map);
    w->n = 0;
    for (size_t i = 0; i < r->n && i < m->n_candidates; i++)
        if (!r->answered[i]) {
            left[w->n] = m->candidates[i];
            w->map[w->n++] = (uint32_t)i;
        }
    Kiln__Candidate **all = m->candidates;
    size_t n_all = m->n_candidates;
    m->request_id = w->id;
    m->candidates = left;
    m->n_candidates = w->n;
    s_send(f, env, NULL);
    m->candidates = all; /* the decoded ones, freed with env */
    m->n_candidates = n_all;
    free(left);
    kl_net_envelope_free(&env);
}

/* A welcome: from a head of another id, or after this side said JobHello
 * again (results may have been lost), the candidates not answered yet are
 * sent again (s_resend), once however many welcomes come. */
static void s_on_welcome(kl_port_fleet_t *f, const Kiln__JobWelcome *w)
{
    f->rehello_at = 0;
    if (w->heartbeat_ms)
        f->hb_s = w->heartbeat_ms / 1000.0;
    const char *id = w->head_id ? w->head_id : "";
    bool same = strcmp(id, f->head_id) == 0;
    if (same && !f->resend_due)
        return;
    f->resend_due = false;
    if (f->n_sent && same)
        kl_warn("fleet: head %s welcomed this job again: sending its %zu "
                "unanswered request(s) again",
                f->endpoint, f->n_sent);
    else if (f->head_id[0] && !same)
        kl_warn("fleet: head %s is %s now (was %s): sending its %zu "
                "unanswered request(s) again",
                f->endpoint, id, f->head_id, f->n_sent);
    snprintf(f->head_id, sizeof f->head_id, "%s", id);
    for (size_t i = 0; i < f->n_sent; i++)
        s_resend(f, &f->sent[i]);
}

/* True when the result is new to the job (and marks it answered); gives
 * it the job's request id and index. A superseded wire's CANCELLED is
 * this side's own cancel, not the job's: dropped. */
static bool s_first_answer(kl_port_fleet_t *f, Kiln__JobResult *jr)
{
    s_wire_t *w = NULL;
    s_sent_t *r = s_sent_find(f, jr->result->request_id, &w);
    if (!r || jr->index >= w->n)
        return false;
    uint32_t i = w->map ? w->map[jr->index] : jr->index;
    if (i >= r->n || r->answered[i] ||
        (w->superseded && jr->result->status == KILN__STATUS__STATUS_CANCELLED))
        return false;
    jr->result->request_id = r->id;
    jr->index = i;
    r->answered[i] = 1;
    if (++r->n_answered == r->n)
        s_sent_drop(f, r);
    return true;
}

/* The head refused a request of this job for one of its limits: the port
 * stops (every later call fails with the reason), so that the job ends
 * showing it, instead of recording the candidates or sending them again. */
static void s_on_refused(kl_port_fleet_t *f, const Kiln__JobResult *jr)
{
    if (f->closed[0])
        return;
    const char *why = jr->result->error && *jr->result->error
                          ? jr->result->error
                          : "over a limit of the head";
    snprintf(f->closed, sizeof f->closed,
             "refused this job's work (%.64s): %.380s", jr->limit, why);
    f->refused = true;
    kl_warn("fleet: head %s %s", f->endpoint, f->closed);
}

static void s_push(kl_port_fleet_t *f, Kiln__Envelope *env)
{
    Kiln__JobResult *jr = env->job_result;
    kl_dispatch_result_t *r = kl_xcalloc(1, sizeof *r);
    r->result = jr->result;
    r->request_id = jr->result->request_id;
    r->candidate_id = jr->result->candidate_id;
    r->index = jr->index;
    r->agent = jr->agent ? jr->agent : "";
    r->hostname = jr->hostname ? jr->hostname : "";
    r->device_name = jr->device_name ? jr->device_name : "";
    r->device_target = jr->device_target ? jr->device_target : "";
    r->attempts = jr->attempts;
    r->turnaround_s = jr->turnaround_s;
    r->priv_ = env;
    if (f->pend_head + f->pend_n == f->pend_cap) {
        if (f->pend_head > 0) {
            memmove(f->pend, f->pend + f->pend_head,
                    f->pend_n * sizeof *f->pend);
            f->pend_head = 0;
        }
        if (f->pend_n == f->pend_cap) {
            f->pend_cap = f->pend_cap ? 2 * f->pend_cap : 64;
            f->pend = kl_xrealloc(f->pend, f->pend_cap * sizeof *f->pend);
        }
    }
    f->pend[f->pend_head + f->pend_n++] = r;
}

/* Receives for up to timeout_ms (-1: forever), keeping results and
 * heartbeats. With want set, returns KL_OK as soon as an envelope of that
 * body (and, for replies, of seq) came, in *out. Without want, returns
 * KL_OK once a result is pending. */
static int s_pump(kl_port_fleet_t *f, int timeout_ms,
                  Kiln__Envelope__BodyCase want, uint64_t seq,
                  Kiln__Envelope **out, char *err)
{
    double until = timeout_ms < 0 ? -1 : kl_now_s() + timeout_ms / 1000.0;
    for (;;) {
        if (!want && f->pend_n)
            return KL_OK;
        if (f->closed[0])
            return kl_seterr(err, KL_ERR_CLOSED, "head %s: %s", f->endpoint,
                             f->closed);
        s_heartbeat(f);
        s_maybe_rehello(f);
        double now = kl_now_s();
        int slice = 250;
        if (until >= 0) {
            double left_ms = (until - now) * 1000.0;
            if (left_ms < 0)
                left_ms = 0;
            /* Rounded up: a wait of 0 for the last fraction of a
             * millisecond would spin. */
            if (left_ms < slice)
                slice = (int)left_ms + (left_ms > (int)left_ms);
        }
        Kiln__Envelope *env = NULL;
        char rerr[KL_ERRMSG_LEN];
        int rc = kl_net_recv(f->net, NULL, &env, slice, rerr);
        if (rc == KL_OK) {
            f->last_heard = kl_now_s();
            switch (env->body_case) {
            case KILN__ENVELOPE__BODY_JOB_RESULT:
                if (env->job_result->limit && *env->job_result->limit)
                    s_on_refused(f, env->job_result);
                else if (s_first_answer(f, env->job_result)) {
                    s_push(f, env);
                    env = NULL;
                }
                break;
            case KILN__ENVELOPE__BODY_JOB_WELCOME:
                if (want == KILN__ENVELOPE__BODY_JOB_WELCOME) {
                    *out = env;
                    return KL_OK;
                }
                s_on_welcome(f, env->job_welcome);
                break;
            case KILN__ENVELOPE__BODY_GOODBYE:
                /* A head going away, or one that does not know this job
                 * (restarted): say hello again; agent-wait-s bounds the
                 * wait (kl_port_agents answers 0 meanwhile). */
                if (f->job && env->goodbye->reason &&
                    (strcmp(env->goodbye->reason, "head shutting down") == 0 ||
                     strcmp(env->goodbye->reason, "say JobHello first") == 0)) {
                    kl_warn("fleet: head %s: %s", f->endpoint,
                            env->goodbye->reason);
                    f->rehello_at = kl_now_s() + 0.5;
                    break;
                }
                snprintf(f->closed, sizeof f->closed, "said goodbye: %s",
                         env->goodbye->reason ? env->goodbye->reason : "");
                break;
            default:
                if (want && env->body_case == want) {
                    uint64_t got = want == KILN__ENVELOPE__BODY_STATUS_REPLY
                                       ? env->status_reply->seq
                                   : want == KILN__ENVELOPE__BODY_AGENTS_REPLY
                                       ? env->agents_reply->seq
                                   : want == KILN__ENVELOPE__BODY_DRAIN_REPLY
                                       ? env->drain_reply->seq
                                       : seq;
                    if (got == seq) {
                        *out = env;
                        return KL_OK;
                    }
                }
                break;
            }
            kl_net_envelope_free(&env);
        } else if (rc != KL_ERR_TIMEOUT) {
            kl_net_envelope_free(&env);
            kl_warn("fleet: from head %s: %s", f->endpoint, rerr);
        }
        if (until >= 0 && kl_now_s() >= until) {
            kl_net_stats_t st;
            kl_net_stats(f->net, &st);
            if (st.auth_denied)
                return kl_seterr(err, KL_ERR_AUTH,
                                 "head %s refused this side's key (not in "
                                 "its clients/ allow list?)",
                                 f->endpoint);
            return kl_seterr(err, KL_ERR_TIMEOUT,
                             "head %s: no answer within %d ms", f->endpoint,
                             timeout_ms);
        }
    }
}

/* ---- the port ----------------------------------------------------------- */

static int s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int s_submit(void *ctx, const kl_dispatch_batch_t *b, uint64_t *id,
                    char *err)
{
    kl_port_fleet_t *f = ctx;
    if (!b->workload_key || !b->target || !*b->target || !b->n_candidates)
        return kl_seterr(err, KL_ERR_INVAL,
                         "fleet submit: a batch needs a workload key, a "
                         "target and candidates");
    if (b->n_candidates > KL_NET_MAX_CANDIDATES)
        return kl_seterr(err, KL_ERR_INVAL,
                         "fleet submit: %zu candidates (limit %d)",
                         b->n_candidates, KL_NET_MAX_CANDIDATES);
    uint64_t *ids = kl_xcalloc(b->n_candidates, sizeof *ids);
    for (size_t i = 0; i < b->n_candidates; i++)
        ids[i] = b->candidates[i]->id;
    qsort(ids, b->n_candidates, sizeof *ids, s_cmp_u64);
    bool dup = false;
    for (size_t i = 1; i < b->n_candidates && !dup; i++)
        dup = ids[i] == ids[i - 1];
    free(ids);
    if (dup)
        return kl_seterr(err, KL_ERR_INVAL,
                         "fleet submit: candidate ids repeat in a batch");
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
    m.request_id = f->next_req + 1;
    m.workload_key.data = (uint8_t *)b->workload_key;
    m.workload_key.len = 16;
    m.target = (char *)b->target;
    m.args = (Kiln__KernelArg **)b->args;
    m.n_args = b->n_args;
    m.reference_source =
        (char *)(b->reference_source ? b->reference_source : "");
    m.reference_entry = (char *)(b->reference_entry ? b->reference_entry : "");
    m.evaluator = (Kiln__Evaluator *)b->evaluator;
    m.candidates = (Kiln__Candidate **)b->candidates;
    m.n_candidates = b->n_candidates;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &m;
    int rc = s_send(f, &env, err);
    if (rc != KL_OK && rc != KL_ERR_TIMEOUT)
        return rc;
    /* Sent, or queued for a head that is away: kept until answered. */
    *id = ++f->next_req;
    if (f->n_sent == f->cap_sent) {
        f->cap_sent = f->cap_sent ? 2 * f->cap_sent : 16;
        f->sent = kl_xrealloc(f->sent, f->cap_sent * sizeof *f->sent);
    }
    s_sent_t *r = &f->sent[f->n_sent++];
    env.version_major = KL_PROTO_MAJOR;
    env.version_minor = KL_PROTO_MINOR;
    r->id = *id;
    r->buf = kl_net_encode(&env, &r->len);
    r->n = b->n_candidates;
    r->answered = kl_xcalloc(r->n, 1);
    r->n_answered = 0;
    r->wires = NULL;
    r->n_wires = 0;
    s_wire_add(r, *id);
    return KL_OK;
}

static int s_recv(void *ctx, kl_dispatch_result_t **out, int timeout_ms,
                  char *err)
{
    kl_port_fleet_t *f = ctx;
    *out = NULL;
    int rc = s_pump(f, timeout_ms, 0, 0, NULL, err);
    if (rc != KL_OK && !f->pend_n)
        return rc == KL_ERR_TIMEOUT
                   ? kl_seterr(err, KL_ERR_TIMEOUT, "no result within %d ms",
                               timeout_ms)
                   : rc;
    *out = f->pend[f->pend_head++];
    f->pend_n--;
    if (!f->pend_n)
        f->pend_head = 0;
    return KL_OK;
}

/* Cancels the request's live wire message(s). */
static int s_cancel(void *ctx, uint64_t id, char *err)
{
    kl_port_fleet_t *f = ctx;
    for (size_t i = 0; i < f->n_sent; i++) {
        s_sent_t *r = &f->sent[i];
        if (r->id != id)
            continue;
        int rc = KL_OK;
        for (size_t k = 0; k < r->n_wires && rc == KL_OK; k++)
            if (!r->wires[k].superseded)
                rc = s_cancel_wire(f, r->wires[k].id, err);
        return rc;
    }
    return s_cancel_wire(f, id, err);
}

static int s_agents(void *ctx, const char *target, size_t *n, char *err)
{
    kl_port_fleet_t *f = ctx;
    char buf[KL_ERRMSG_LEN];
    if (!err)
        err = buf; /* named in the warning below */
    *n = 0;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__AgentsQuery q = KILN__AGENTS_QUERY__INIT;
    q.seq = ++f->seq;
    q.target = (char *)(target ? target : "");
    env.body_case = KILN__ENVELOPE__BODY_AGENTS_QUERY;
    env.agents_query = &q;
    int rc = s_send(f, &env, err);
    Kiln__Envelope *got = NULL;
    if (rc == KL_OK)
        rc = s_pump(f, 2000, KILN__ENVELOPE__BODY_AGENTS_REPLY, q.seq, &got,
                    err);
    if (rc == KL_OK)
        *n = got->agents_reply->agents;
    kl_net_envelope_free(&got);
    if (rc == KL_ERR_TIMEOUT) {
        kl_warn("fleet: %s", err);
        return KL_OK; /* no agents as far as the job can tell */
    }
    return rc;
}

static const char *s_where(void *ctx)
{
    return ((kl_port_fleet_t *)ctx)->endpoint;
}

kl_port_t kl_port_fleet(kl_port_fleet_t *self)
{
    return (kl_port_t){.ctx = self,
                       .submit = s_submit,
                       .recv = s_recv,
                       .cancel = s_cancel,
                       .agents = s_agents,
                       .where = s_where,
                       .stats = NULL};
}

/* ---- queries and life --------------------------------------------------- */

int kl_port_fleet_status(kl_port_fleet_t *f, Kiln__Envelope **out,
                         int timeout_ms, char *err)
{
    *out = NULL;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__StatusQuery q = KILN__STATUS_QUERY__INIT;
    q.seq = ++f->seq;
    env.body_case = KILN__ENVELOPE__BODY_STATUS_QUERY;
    env.status_query = &q;
    int rc = s_send(f, &env, err);
    if (rc == KL_ERR_AUTH)
        rc = KL_OK; /* retried by kl_net: wait for the answer or time out */
    if (rc == KL_OK)
        rc = s_pump(f, timeout_ms, KILN__ENVELOPE__BODY_STATUS_REPLY, q.seq,
                    out, err);
    return rc;
}

int kl_port_fleet_drain(kl_port_fleet_t *f, const char *agent, bool undrain,
                        size_t *matched, int timeout_ms, char *err)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Drain d = KILN__DRAIN__INIT;
    d.seq = ++f->seq;
    d.agent = (char *)agent;
    d.undrain = undrain;
    env.body_case = KILN__ENVELOPE__BODY_DRAIN;
    env.drain = &d;
    int rc = s_send(f, &env, err);
    if (rc == KL_ERR_AUTH)
        rc = KL_OK;
    Kiln__Envelope *got = NULL;
    if (rc == KL_OK)
        rc = s_pump(f, timeout_ms, KILN__ENVELOPE__BODY_DRAIN_REPLY, d.seq,
                    &got, err);
    if (rc == KL_OK && got->drain_reply->error && *got->drain_reply->error)
        rc = kl_seterr(err, KL_ERR_AUTH, "head %s: %s", f->endpoint,
                       got->drain_reply->error);
    else if (rc == KL_OK)
        *matched = got->drain_reply->matched;
    kl_net_envelope_free(&got);
    return rc;
}

static int s_hello(kl_port_fleet_t *f, const kl_port_fleet_config_t *cfg,
                   char *err)
{
    f->name = kl_xstrdup(cfg->name);
    f->weight = cfg->weight ? cfg->weight : 1;
    f->n_targets = cfg->n_targets;
    f->targets = kl_xcalloc(cfg->n_targets + 1, sizeof *f->targets);
    for (size_t i = 0; i < cfg->n_targets; i++)
        f->targets[i] = kl_xstrdup(cfg->targets[i]);
    double wait = cfg->connect_s > 0 ? cfg->connect_s : 10;
    double until = kl_now_s() + wait;
    /* A refused key is retried by kl_net; so is the hello, until the
     * head answers or the time is up. */
    for (;;) {
        s_send_hello(f);
        double left = until - kl_now_s();
        int ms = left > 1 ? 1000 : left > 0 ? (int)(left * 1000) : 0;
        Kiln__Envelope *got = NULL;
        int rc = s_pump(f, ms, KILN__ENVELOPE__BODY_JOB_WELCOME, 0, &got, err);
        if (rc == KL_OK) {
            s_on_welcome(f, got->job_welcome);
            kl_net_envelope_free(&got);
            f->job = true;
            return KL_OK;
        }
        if (rc == KL_ERR_CLOSED || kl_now_s() >= until) {
            if (rc == KL_ERR_TIMEOUT)
                kl_seterr(err, KL_ERR_TIMEOUT,
                          "head %s did not welcome job %s within %.0f s",
                          f->endpoint, cfg->name, wait);
            return rc;
        }
    }
}

int kl_port_fleet_new(kl_port_fleet_t **out, const kl_port_fleet_config_t *cfg,
                      char *err)
{
    *out = NULL;
    kl_port_fleet_t *f = kl_xcalloc(1, sizeof *f);
    f->endpoint = kl_xstrdup(cfg->endpoint);
    f->hb_s = 1.0;
    int rc = kl_net_client_new(&f->net, cfg->endpoint, &cfg->security, err);
    if (rc == KL_OK && cfg->name)
        rc = s_hello(f, cfg, err);
    if (rc != KL_OK) {
        kl_port_fleet_destroy(&f);
        return rc;
    }
    *out = f;
    return KL_OK;
}

void kl_port_fleet_destroy(kl_port_fleet_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_port_fleet_t *f = *self_p;
    if (f->job && f->net && (!f->closed[0] || f->refused)) {
        Kiln__Envelope env = KILN__ENVELOPE__INIT;
        Kiln__Goodbye g = KILN__GOODBYE__INIT;
        g.reason = "job ends";
        env.body_case = KILN__ENVELOPE__BODY_GOODBYE;
        env.goodbye = &g;
        kl_net_send(f->net, NULL, &env, NULL);
    }
    while (f->pend_n) {
        kl_dispatch_result_free(&f->pend[f->pend_head++]);
        f->pend_n--;
    }
    free(f->pend);
    while (f->n_sent)
        s_sent_drop(f, &f->sent[f->n_sent - 1]);
    free(f->sent);
    for (size_t i = 0; i < f->n_targets; i++)
        free(f->targets[i]);
    free(f->targets);
    free(f->name);
    /* Let the Goodbye go out before the socket closes (linger 0). */
    if (f->job && f->net)
        usleep(50 * 1000);
    kl_net_destroy(&f->net);
    free(f->endpoint);
    free(f);
    *self_p = NULL;
}
