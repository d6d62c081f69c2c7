/* kl_serve_jobs.c - the head node's jobs: their requests, kept until
 * answered, and what is sent to them without waiting (what a job's full
 * queue does not take is held, in order, up to a bound). */
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_serve_int.h"
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
        /* Bounded: a job that does not read is dropped (kl_serve.c's s_tick),
         * and nothing more is kept for it meanwhile. */
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

/* A result the head makes itself (CANCELLED, INVALID) for candidate i. */
void kl_serve__answer(kl_serve_t *s, kl_sreq_t *r, size_t i, Kiln__Status st,
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

/* Sends what jobs' full queues did not take, oldest first, until a queue
 * is full again. Whether there is any left. */
bool kl_serve__flush(kl_serve_t *s)
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

/* ---- jobs and their requests ------------------------------------------- */

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

void kl_serve__job_free(kl_sjob_t *j)
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
void kl_serve__maybe_free(kl_serve_t *s, kl_sreq_t *r)
{
    kl_sjob_t *j = r->job;
    if (r->n_out == 0 && r->next == r->env->request->n_candidates)
        s_req_remove(j, r);
    if (j->gone && j->n_reqs == 0)
        for (size_t i = 0; i < s->n_jobs; i++)
            if (s->jobs[i] == j) {
                s->jobs[i] = s->jobs[--s->n_jobs];
                kl_serve__job_free(j);
                break;
            }
}

kl_sjob_t *kl_serve__job_by_peer(kl_serve_t *s, const kl_peer_t *p)
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

kl_sjob_t *kl_serve__job_by_name(kl_serve_t *s, const char *name)
{
    for (size_t i = 0; i < s->n_jobs; i++)
        if (!s->jobs[i]->gone && strcmp(s->jobs[i]->name, name) == 0)
            return s->jobs[i];
    return NULL;
}

kl_sreq_t *kl_serve__req_find(kl_sjob_t *j, uint64_t id)
{
    for (size_t i = 0; i < j->n_reqs; i++)
        if (j->reqs[i]->id == id)
            return j->reqs[i];
    return NULL;
}

/* Forgets a job: queued work dropped, work in flight cancelled. */
void kl_serve__job_gone(kl_serve_t *s, kl_sjob_t *j, const char *why)
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
            kl_serve__cancel_out(s, r); /* freed as their answers come */
        else
            s_req_remove(j, r);
    }
    if (j->n_reqs == 0)
        for (size_t i = 0; i < s->n_jobs; i++)
            if (s->jobs[i] == j) {
                s->jobs[i] = s->jobs[--s->n_jobs];
                kl_serve__job_free(j);
                break;
            }
}
