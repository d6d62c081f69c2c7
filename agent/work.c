/* work.c - the agent's jobs on their way: build threads, the runner
 * thread, and the actor's queues between them. Threads get one job pointer
 * at a time over their inproc PAIR socket and hand it back when done; only
 * the actor touches queues, requests and counters. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"
#include "kla_agent_int.h"

static void s_queue_push(kla_queue_t *q, kla_job_t *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->n++;
}

static kla_job_t *s_queue_pop(kla_queue_t *q)
{
    kla_job_t *j = q->head;
    if (!j)
        return NULL;
    q->head = j->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    j->next = NULL;
    return j;
}

static void s_req_unref(kla_req_t *r)
{
    if (--r->refs > 0)
        return;
    free(r->ref_source);
    free(r->ref_entry);
    free(r);
}

static void s_job_free(kla_job_t *j)
{
    if (!j)
        return;
    s_req_unref(j->req);
    free(j->source);
    free(j->entry);
    kla_result_clear(&j->res);
    free(j);
}

/* ---- the threads ------------------------------------------------------- */

typedef struct {
    kla_agent_t *a;
    void *sock;
    int dev; /* runner of this device; -1: a build thread */
} s_thread_arg_t;

/* Ends the job with status st and the message prefix + what (bounded). */
static void s_fail(kla_job_t *j, Kiln__Status st, const char *prefix,
                   const char *what)
{
    j->finished = true;
    j->res.status = st;
    size_t cap = sizeof j->res.error - 1;
    size_t n = strlen(prefix), m = strlen(what);
    n = n > cap ? cap : n;
    m = m > cap - n ? cap - n : m;
    memcpy(j->res.error, prefix, n);
    memcpy(j->res.error + n, what, m);
    j->res.error[n + m] = '\0';
}

/* One build for the job's device, by its backend. */
static int s_build_one(kla_agent_t *a, const kla_req_t *r, const char *src,
                       size_t len, const char *entry, kla_build_t *out)
{
    kla_dev_t *d = &a->dev[r->dev];
    return d->backend->build(d, src, len, entry, out);
}

/* Builds the reference (a cache hit after the first) and the candidate. */
static void s_build(kla_agent_t *a, kla_job_t *j)
{
    kla_req_t *r = j->req;
    kla_build_t *rb = kl_xmalloc(sizeof *rb);
    int rc = s_build_one(a, r, r->ref_source, r->ref_len, r->ref_entry, rb);
    /* The reference's compile is shared by the request: not this
     * candidate's compile time, not overhead either. */
    j->blocked_s += rb->compile_s + rb->paused_s;
    if (rc != KL_OK) {
        s_fail(j, KILN__STATUS__STATUS_RUNTIME_ERROR,
               "reference kernel failed: compile error: ", rb->log);
        free(rb);
        return;
    }
    snprintf(j->ref_so, sizeof j->ref_so, "%s", rb->so_path);
    free(rb);
    rc = s_build_one(a, r, j->source, j->len, j->entry, &j->build);
    if (rc == KL_ERR_COMPILE)
        s_fail(j, KILN__STATUS__STATUS_COMPILE_ERROR, "", j->build.log);
    else if (rc != KL_OK)
        s_fail(j, KILN__STATUS__STATUS_RUNTIME_ERROR,
               "build failed: ", j->build.log);
}

static void *s_thread_main(void *arg)
{
    s_thread_arg_t *t = arg;
    for (;;) {
        kla_job_t *j = NULL;
        int n = zmq_recv(t->sock, &j, sizeof j, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (int)sizeof j || !j)
            break;
        if (t->dev >= 0) {
            kla_dev_t *d = &t->a->dev[t->dev];
            d->backend->measure(d, &j->req->problem, j->ref_so,
                                j->req->ref_entry, j->build.so_path, j->entry,
                                &j->launch, &j->res);
        } else {
            s_build(t->a, j);
        }
        while (zmq_send(t->sock, &j, sizeof j, 0) < 0 && errno == EINTR)
            ;
    }
    zmq_close(t->sock);
    free(t);
    return NULL;
}

/* A build thread (dev -1) or device dev's runner thread. */
static int s_start_one(kla_agent_t *a, kla_worker_t *w, int idx, int dev,
                       char *err)
{
    char ep[128];
    snprintf(ep, sizeof ep, "inproc://kla-%p-%s-%d", (void *)a,
             dev >= 0 ? "run" : "build", idx);
    w->sock = zmq_socket(a->zctx, ZMQ_PAIR);
    void *theirs = zmq_socket(a->zctx, ZMQ_PAIR);
    if (!w->sock || !theirs || zmq_bind(w->sock, ep) != 0 ||
        zmq_connect(theirs, ep) != 0) {
        if (theirs)
            zmq_close(theirs);
        return kl_seterr(err, KL_ERR_IO, "inproc socket %s: %s", ep,
                         zmq_strerror(errno));
    }
    s_thread_arg_t *t = kl_xmalloc(sizeof *t);
    *t = (s_thread_arg_t){.a = a, .sock = theirs, .dev = dev};
    if (pthread_create(&w->thread, NULL, s_thread_main, t) != 0) {
        zmq_close(theirs);
        free(t);
        return kl_seterr(err, KL_ERR_IO, "pthread_create failed");
    }
    w->started = true;
    w->idle_since = kl_now_s();
    return KL_OK;
}

int kla_agent__work_start(kla_agent_t *a, char *err)
{
    a->builders = kl_xcalloc((size_t)a->build_slots, sizeof(kla_worker_t));
    for (int i = 0; i < a->build_slots; i++) {
        int rc = s_start_one(a, &a->builders[i], i, -1, err);
        if (rc != KL_OK)
            return rc;
    }
    for (int d = 0; d < a->ndev; d++) {
        int rc = s_start_one(a, &a->run_w[d], d, d, err);
        if (rc != KL_OK)
            return rc;
    }
    return KL_OK;
}

/* Kills whatever builds and runs on the devices now (shutdown). */
static void s_abort_all(kla_agent_t *a)
{
    for (int d = 0; d < a->ndev; d++)
        a->dev[d].backend->abort(&a->dev[d]);
}

static void s_stop_one(kla_agent_t *a, kla_worker_t *w)
{
    if (!w->sock)
        return;
    if (w->started) {
        /* A busy thread gives its job back first; keep killing what it
         * runs until it does (a child forked just after a kill). */
        while (w->busy) {
            zmq_pollitem_t it = {w->sock, 0, ZMQ_POLLIN, 0};
            if (zmq_poll(&it, 1, 100) > 0) {
                kla_job_t *j = NULL;
                if (zmq_recv(w->sock, &j, sizeof j, 0) == (int)sizeof j) {
                    s_job_free(j);
                    w->busy = false;
                }
            } else {
                s_abort_all(a);
            }
        }
        kla_job_t *stop = NULL;
        zmq_send(w->sock, &stop, sizeof stop, 0);
        pthread_join(w->thread, NULL);
    }
    zmq_close(w->sock);
    w->sock = NULL;
}

void kla_agent__work_stop(kla_agent_t *a)
{
    s_abort_all(a);
    for (int i = 0; a->builders && i < a->build_slots; i++)
        s_stop_one(a, &a->builders[i]);
    kla_job_t *j;
    for (int d = 0; d < a->ndev; d++) {
        s_stop_one(a, &a->run_w[d]);
        while ((j = s_queue_pop(&a->run_q[d])))
            s_job_free(j);
    }
    free(a->builders);
    a->builders = NULL;
    while ((j = s_queue_pop(&a->build_q)))
        s_job_free(j);
}

/* ---- the actor's side ------------------------------------------------- */

static void s_give(kla_worker_t *w, kla_queue_t *q)
{
    kla_job_t *j = s_queue_pop(q);
    /* Time queued while this thread was busy with others is theirs. */
    if (w->idle_since > j->t_enq)
        j->blocked_s += w->idle_since - j->t_enq;
    w->busy = true;
    while (zmq_send(w->sock, &j, sizeof j, 0) < 0 && errno == EINTR)
        ;
}

void kla_agent__work_dispatch(kla_agent_t *a)
{
    for (int i = 0; i < a->build_slots && a->build_q.head; i++)
        if (!a->builders[i].busy)
            s_give(&a->builders[i], &a->build_q);
    /* An idle device takes its own work first, then work queued for
     * another device of the same target (identical GPUs measure in
     * parallel). */
    for (int d = 0; d < a->ndev; d++) {
        if (!a->run_w[d].started || a->run_w[d].busy)
            continue;
        for (int k = 0; k < a->ndev; k++) {
            int q = (d + k) % a->ndev;
            if (a->run_q[q].head &&
                strcmp(a->dev[q].target, a->dev[d].target) == 0) {
                s_give(&a->run_w[d], &a->run_q[q]);
                break;
            }
        }
    }
}

static void s_answer(kla_agent_t *a, kla_job_t *j)
{
    double total = kl_now_s() - j->t_recv;
    double overhead = total - j->build.compile_s - j->build.paused_s -
                      j->res.run_s - j->blocked_s;
    if (overhead < 0)
        overhead = 0;
    bool fake = a->dev[j->req->dev].stand_in;
    kla_agent__send_result(a, j->req->request_id, j->cand_id, &j->res,
                           &j->build, overhead, fake);
    a->held--;
}

void kla_agent__work_collect(kla_agent_t *a, kla_worker_t *w, bool runner)
{
    kla_job_t *j = NULL;
    if (zmq_recv(w->sock, &j, sizeof j, ZMQ_DONTWAIT) != (int)sizeof j || !j)
        return;
    w->busy = false;
    w->idle_since = kl_now_s();
    if (j->req->epoch != a->epoch) { /* forgotten meanwhile */
        s_job_free(j);
        return;
    }
    if (runner || j->finished) {
        s_answer(a, j);
        s_job_free(j);
        return;
    }
    j->t_enq = kl_now_s();
    s_queue_push(&a->run_q[j->req->dev], j);
}

int kla_agent__work_device(const kla_agent_t *a, uint32_t index, int *dev,
                           char *err)
{
    uint32_t n = (uint32_t)a->ndev;
    if (index >= n)
        return kl_seterr(err, KL_ERR_INVAL,
                         "device index %u: this agent has devices 0..%u", index,
                         n - 1);
    *dev = (int)index;
    return KL_OK;
}

void kla_agent__work_add(kla_agent_t *a, const Kiln__MeasureRequest *m,
                         const kla_problem_t *p, int dev)
{
    kla_req_t *r = kl_xcalloc(1, sizeof *r);
    r->request_id = m->request_id;
    r->dev = dev;
    r->epoch = a->epoch;
    r->problem = *p;
    r->ref_len = strlen(m->reference_source);
    r->ref_source = kl_xstrndup(m->reference_source, r->ref_len);
    r->ref_entry = kl_xstrdup(m->reference_entry);
    r->refs = 1; /* held while adding */
    double now = kl_now_s();
    for (size_t i = 0; i < m->n_candidates; i++) {
        const Kiln__Candidate *c = m->candidates[i];
        kla_job_t *j = kl_xcalloc(1, sizeof *j);
        j->req = r;
        r->refs++;
        j->cand_id = c->id;
        j->len = strlen(c->source);
        j->source = kl_xstrndup(c->source, j->len);
        j->entry = kl_xstrdup(c->entry);
        for (int d = 0; d < 3; d++) {
            j->launch.grid[d] = c->n_grid == 3 ? c->grid[d] : 1;
            j->launch.block[d] = c->n_block == 3 ? c->block[d] : 1;
        }
        j->launch.shared_bytes = c->shared_bytes;
        j->t_recv = j->t_enq = now;
        a->held++;
        s_queue_push(&a->build_q, j);
    }
    s_req_unref(r);
}

/* Removes the matching jobs of q into out (order kept). */
static void s_take(kla_queue_t *q, kla_queue_t *out, bool all, uint64_t id)
{
    kla_queue_t keep = {0};
    kla_job_t *j;
    while ((j = s_queue_pop(q)))
        s_queue_push((all || j->req->request_id == id) ? out : &keep, j);
    *q = keep;
}

void kla_agent__work_cancel(kla_agent_t *a, uint64_t request_id)
{
    kla_queue_t out = {0};
    s_take(&a->build_q, &out, false, request_id);
    for (int d = 0; d < a->ndev; d++)
        s_take(&a->run_q[d], &out, false, request_id);
    kla_job_t *j;
    while ((j = s_queue_pop(&out))) {
        kla_result_clear(&j->res);
        j->res.status = KILN__STATUS__STATUS_CANCELLED;
        snprintf(j->res.error, sizeof j->res.error,
                 "cancelled before it started");
        kla_agent__send_result(a, request_id, j->cand_id, &j->res, NULL, 0,
                               a->cfg.simulate);
        atomic_fetch_add(&a->st_cancelled, 1);
        a->held--;
        s_job_free(j);
    }
}

void kla_agent__work_forget(kla_agent_t *a)
{
    kla_queue_t out = {0};
    s_take(&a->build_q, &out, true, 0);
    for (int d = 0; d < a->ndev; d++)
        s_take(&a->run_q[d], &out, true, 0);
    kla_job_t *j;
    while ((j = s_queue_pop(&out)))
        s_job_free(j);
    a->epoch++; /* jobs in threads now belong to the past */
    a->held = 0;
}
