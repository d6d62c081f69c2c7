/* Unit tests of coordinator/serve (the head node) with the job's side,
 * coordinator/tune/kl_port_fleet, over real loopback sockets and no agents:
 * the hello and a name in use, queued work and cancel, request ids made
 * idempotent, messages before JobHello, a silent job dropped (and its
 * work sent again once it is back), drain of an unknown agent, the
 * snapshot (a job's state, the head's counters) and --state (DIR/drained
 * read, rewritten, kept through drain/undrain). Work actually measured
 * (agents, fair share, keys) is tests/integration/serve_fleet.sh. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "kl_err.h"
#include "kl_net.h"
#include "kl_port_fleet.h"
#include "kl_serve.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

typedef struct {
    kl_serve_t *s;
    pthread_t th;
    volatile sig_atomic_t stop;
} s_head_t;

static void *s_run(void *arg)
{
    s_head_t *h = arg;
    char err[KL_ERRMSG_LEN];
    kl_serve_run(h->s, &h->stop, err);
    return NULL;
}

static void s_head_start_cfg(s_head_t *h, const kl_serve_config_t *cfg)
{
    memset(h, 0, sizeof *h);
    char err[KL_ERRMSG_LEN];
    /* A head restarted in this process binds the port its predecessor
     * closed: ZeroMQ's I/O thread closes that listener asynchronously,
     * which on a loaded machine can take a moment. */
    int rc = kl_serve_new(&h->s, cfg, err);
    for (int i = 0; rc && i < 100; i++) {
        usleep(50000);
        rc = kl_serve_new(&h->s, cfg, err);
    }
    if (rc)
        fail_msg("kl_serve_new on %s: %s", cfg->clients_endpoint, err);
    assert_int_equal(pthread_create(&h->th, NULL, s_run, h), 0);
}

static void s_head_start_at(s_head_t *h, double client_timeout_s,
                            const char *clients)
{
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = clients,
                             .insecure = true,
                             .heartbeat_ms = 100,
                             .client_timeout_s = client_timeout_s};
    s_head_start_cfg(h, &cfg);
}

static void s_head_start(s_head_t *h, double client_timeout_s)
{
    s_head_start_at(h, client_timeout_s, "tcp://127.0.0.1:*");
}

static void s_head_stop(s_head_t *h)
{
    h->stop = 1;
    pthread_join(h->th, NULL);
    kl_serve_destroy(&h->s);
    assert_null(h->s);
}

static kl_port_fleet_t *s_job(s_head_t *h, const char *name, int *rc, char *err)
{
    kl_port_fleet_config_t cfg = {.endpoint = kl_serve_clients_endpoint(h->s),
                                  .security = {.insecure = true},
                                  .name = name,
                                  .connect_s = 5};
    kl_port_fleet_t *f = NULL;
    *rc = kl_port_fleet_new(&f, &cfg, err);
    return f;
}

/* A batch of n candidates (ids 100 + i). */
typedef struct {
    Kiln__Candidate c[8];
    Kiln__Candidate *p[8];
    uint8_t key[16];
    kl_dispatch_batch_t b;
} s_batch_t;

static void s_batch(s_batch_t *sb, size_t n)
{
    memset(sb, 0, sizeof *sb);
    for (size_t i = 0; i < n; i++) {
        kiln__candidate__init(&sb->c[i]);
        sb->c[i].id = 100 + i;
        sb->c[i].source = "void k(void) {}";
        sb->c[i].entry = "k";
        sb->p[i] = &sb->c[i];
    }
    sb->b.workload_key = sb->key;
    sb->b.target = "sim/cpu";
    sb->b.candidates = sb->p;
    sb->b.n_candidates = n;
}

/* The status line of job name: queued and in flight, or false if absent. */
static bool s_job_status(kl_port_fleet_t *f, const char *name, uint64_t *queued,
                         uint64_t *done)
{
    Kiln__Envelope *env = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_port_fleet_status(f, &env, 5000, err), KL_OK);
    bool found = false;
    for (size_t i = 0; i < env->status_reply->n_jobs; i++) {
        const Kiln__JobStatus *j = env->status_reply->jobs[i];
        if (strcmp(j->name, name) == 0) {
            found = true;
            if (queued)
                *queued = j->queued;
            if (done)
                *done = j->done;
        }
    }
    kl_net_envelope_free(&env);
    return found;
}

static void test_hello_queue_cancel(void **state)
{
    (void)state;
    s_head_t h;
    s_head_start(&h, 30);
    char err[KL_ERRMSG_LEN];
    int rc;
    kl_port_fleet_t *a = s_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_OK);
    /* A second job of that name is refused while a runs. */
    kl_port_fleet_t *dup = s_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(dup);
    assert_non_null(strstr(err, "job a is running"));

    kl_port_t p = kl_port_fleet(a);
    size_t n = 99;
    assert_int_equal(kl_port_agents(&p, "sim/cpu", &n, err), KL_OK);
    assert_int_equal(n, 0);
    s_batch_t sb;
    s_batch(&sb, 5);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    assert_int_equal(id, 1);
    /* No agent: all five wait at the head. */
    uint64_t queued = 0, done = 0;
    for (int i = 0; i < 50 && queued != 5; i++) {
        assert_true(s_job_status(a, "a", &queued, &done));
        usleep(20 * 1000);
    }
    assert_int_equal(queued, 5);
    assert_int_equal(done, 0);
    /* Cancel: five CANCELLED results with the job's ids and indexes. */
    assert_int_equal(kl_port_cancel(&p, id, err), KL_OK);
    bool seen[5] = {false};
    for (int i = 0; i < 5; i++) {
        kl_dispatch_result_t *r = NULL;
        assert_int_equal(kl_port_recv(&p, &r, 5000, err), KL_OK);
        assert_int_equal(r->request_id, 1);
        assert_int_equal(r->result->status, KILN__STATUS__STATUS_CANCELLED);
        assert_true(r->index < 5);
        assert_int_equal(r->candidate_id, 100 + r->index);
        seen[r->index] = true;
        kl_dispatch_result_free(&r);
    }
    for (int i = 0; i < 5; i++)
        assert_true(seen[i]);
    kl_dispatch_result_t *r = NULL;
    assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
    assert_true(s_job_status(a, "a", &queued, &done));
    assert_int_equal(queued, 0);
    assert_int_equal(done, 5);
    /* A batch with repeated candidate ids never leaves the job. */
    sb.c[1].id = sb.c[0].id;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_ERR_INVAL);
    kl_port_fleet_destroy(&a);
    assert_null(a);
    s_head_stop(&h);
}

/* A raw client: the wire as another implementation would speak it. */
static void s_raw_send(kl_net_t *c, Kiln__Envelope *env)
{
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_net_send(c, NULL, env, err), KL_OK);
}

static Kiln__Envelope *s_raw_recv(kl_net_t *c, Kiln__Envelope__BodyCase want)
{
    char err[KL_ERRMSG_LEN];
    for (int i = 0; i < 100; i++) {
        Kiln__Envelope *env = NULL;
        if (kl_net_recv(c, NULL, &env, 100, err) != KL_OK)
            continue;
        if (env->body_case == want)
            return env;
        kl_net_envelope_free(&env);
    }
    fail_msg("no message of body %d", (int)want);
    return NULL;
}

static void s_raw_request(kl_net_t *c, uint64_t id, s_batch_t *sb)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
    m.request_id = id;
    m.workload_key.data = sb->key;
    m.workload_key.len = 16;
    m.target = "sim/cpu";
    m.candidates = sb->p;
    m.n_candidates = sb->b.n_candidates;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &m;
    s_raw_send(c, &env);
}

static void test_raw_client(void **state)
{
    (void)state;
    s_head_t h;
    s_head_start(&h, 1.0);
    char err[KL_ERRMSG_LEN];
    kl_net_security_t sec = {.insecure = true};
    kl_net_t *c = NULL;
    assert_int_equal(
        kl_net_client_new(&c, kl_serve_clients_endpoint(h.s), &sec, err),
        KL_OK);
    s_batch_t sb;
    s_batch(&sb, 3);
    /* Work before JobHello: Goodbye. */
    s_raw_request(c, 1, &sb);
    Kiln__Envelope *got = s_raw_recv(c, KILN__ENVELOPE__BODY_GOODBYE);
    assert_non_null(strstr(got->goodbye->reason, "say JobHello first"));
    kl_net_envelope_free(&got);

    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobHello hello = KILN__JOB_HELLO__INIT;
    hello.name = "raw";
    hello.weight = 3;
    env.body_case = KILN__ENVELOPE__BODY_JOB_HELLO;
    env.job_hello = &hello;
    s_raw_send(c, &env);
    got = s_raw_recv(c, KILN__ENVELOPE__BODY_JOB_WELCOME);
    assert_int_equal(got->job_welcome->heartbeat_ms, 100);
    kl_net_envelope_free(&got);
    /* The same request id twice: queued once. */
    s_raw_request(c, 7, &sb);
    s_raw_request(c, 7, &sb);
    s_raw_request(c, 8, &sb);

    int rc;
    kl_port_fleet_config_t cfg = {.endpoint = kl_serve_clients_endpoint(h.s),
                                  .security = {.insecure = true}};
    kl_port_fleet_t *q = NULL;
    assert_int_equal(kl_port_fleet_new(&q, &cfg, err), KL_OK);
    /* The three requests cross another socket than the query: wait for
     * the last one, then make sure no fourth batch shows up. */
    uint64_t queued = 0;
    for (int i = 0; i < 100 && queued < 6; i++) {
        assert_true(s_job_status(q, "raw", &queued, NULL));
        if (queued < 6)
            usleep(5 * 1000);
    }
    assert_int_equal(queued, 6);
    usleep(50 * 1000);
    assert_true(s_job_status(q, "raw", &queued, NULL));
    assert_int_equal(queued, 6);
    size_t matched = 9;
    assert_int_equal(
        kl_port_fleet_drain(q, "nobody", false, &matched, 5000, err), KL_OK);
    assert_int_equal(matched, 0);
    /* raw says nothing more: dropped after its 1 s, work and all. */
    bool listed = true;
    for (int i = 0; i < 100 && listed; i++) {
        usleep(50 * 1000);
        listed = s_job_status(q, "raw", NULL, NULL);
    }
    assert_false(listed);
    (void)rc;
    kl_port_fleet_destroy(&q);
    kl_net_destroy(&c);
    s_head_stop(&h);
}

/* A head restarted on the same endpoint: the job says hello again and
 * sends what was not answered, once; each candidate is answered once. */
static void test_head_restart(void **state)
{
    (void)state;
    s_head_t h;
    s_head_start(&h, 30);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", kl_serve_clients_endpoint(h.s));
    char err[KL_ERRMSG_LEN];
    int rc;
    kl_port_fleet_t *a = s_job(&h, "r", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_t p = kl_port_fleet(a);
    s_batch_t sb;
    s_batch(&sb, 3);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    uint64_t queued = 0;
    for (int i = 0; i < 100 && queued != 3; i++)
        if (!s_job_status(a, "r", &queued, NULL) || queued != 3)
            usleep(10 * 1000);
    assert_int_equal(queued, 3);
    s_head_stop(&h); /* says Goodbye "head shutting down" */
    s_head_start_at(&h, 30, ep);
    kl_port_fleet_config_t qc = {.endpoint = ep,
                                 .security = {.insecure = true}};
    kl_port_fleet_t *q = NULL;
    assert_int_equal(kl_port_fleet_new(&q, &qc, err), KL_OK);
    /* The job notices while it waits for results. */
    kl_dispatch_result_t *r = NULL;
    queued = 0;
    for (int i = 0; i < 100 && queued != 3; i++) {
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
        if (!s_job_status(q, "r", &queued, NULL))
            queued = 0;
    }
    assert_int_equal(queued, 3);
    for (int i = 0; i < 5; i++)
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
    assert_true(s_job_status(q, "r", &queued, NULL));
    assert_int_equal(queued, 3);
    assert_int_equal(kl_port_cancel(&p, id, err), KL_OK);
    bool seen[3] = {false};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kl_port_recv(&p, &r, 5000, err), KL_OK);
        assert_int_equal(r->result->status, KILN__STATUS__STATUS_CANCELLED);
        assert_true(r->index < 3 && !seen[r->index]);
        seen[r->index] = true;
        kl_dispatch_result_free(&r);
    }
    assert_int_equal(kl_port_recv(&p, &r, 200, err), KL_ERR_TIMEOUT);
    kl_port_fleet_destroy(&q);
    kl_port_fleet_destroy(&a);
    s_head_stop(&h);
}

/* A job silent past the head's client timeout (its connection lost, or
 * the process stopped): the head drops it with its queued work. Heard
 * from again, the job says JobHello, is welcomed by the same head and
 * sends its unanswered work again, as a new request id whose results
 * come back under the job's own id. */
static void test_job_silent_resend(void **state)
{
    (void)state;
    s_head_t h;
    s_head_start(&h, 0.5);
    char err[KL_ERRMSG_LEN];
    int rc;
    kl_port_fleet_t *a = s_job(&h, "s", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_config_t qc = {.endpoint = kl_serve_clients_endpoint(h.s),
                                 .security = {.insecure = true}};
    kl_port_fleet_t *q = NULL;
    assert_int_equal(kl_port_fleet_new(&q, &qc, err), KL_OK);
    kl_port_t p = kl_port_fleet(a);
    s_batch_t sb;
    s_batch(&sb, 3);
    uint64_t id = 0, queued = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    for (int i = 0; i < 100 && queued != 3; i++)
        if (!s_job_status(q, "s", &queued, NULL) || queued != 3)
            usleep(10 * 1000);
    assert_int_equal(queued, 3);
    /* Silent: dropped, its work with it. */
    usleep(1200 * 1000);
    assert_false(s_job_status(q, "s", NULL, NULL));
    /* Back: within a few seconds the head has its three again, once. */
    kl_dispatch_result_t *r = NULL;
    queued = 0;
    for (int i = 0; i < 50 && queued != 3; i++) {
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
        if (!s_job_status(q, "s", &queued, NULL))
            queued = 0;
    }
    assert_int_equal(queued, 3);
    for (int i = 0; i < 5; i++)
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
    assert_true(s_job_status(q, "s", &queued, NULL));
    assert_int_equal(queued, 3);
    /* The job's cancel reaches the new request: three CANCELLED, each
     * with the job's request id and index, once. */
    assert_int_equal(kl_port_cancel(&p, id, err), KL_OK);
    bool seen[3] = {false};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kl_port_recv(&p, &r, 5000, err), KL_OK);
        assert_int_equal(r->request_id, id);
        assert_int_equal(r->result->status, KILN__STATUS__STATUS_CANCELLED);
        assert_true(r->index < 3 && !seen[r->index]);
        assert_int_equal(r->candidate_id, 100 + r->index);
        seen[r->index] = true;
        kl_dispatch_result_free(&r);
    }
    assert_int_equal(kl_port_recv(&p, &r, 200, err), KL_ERR_TIMEOUT);
    kl_port_fleet_destroy(&q);
    kl_port_fleet_destroy(&a);
    s_head_stop(&h);
}

/* A job that stops reading must not stall the head: 40 requests of 4096
 * queued candidates, all cancelled at once, make the head answer 163,840
 * results to a raw client that reads none of them meanwhile (far more
 * than its send queue and the socket buffers hold). Another client's
 * status query is answered while they wait (a head that waited on the
 * full queue would take a second per message), and then the raw client
 * reads every one of them: nothing dropped. */
static void test_slow_job(void **state)
{
    (void)state;
    enum { NREQ = 40, NCAND = KL_NET_MAX_CANDIDATES };
    s_head_t h;
    /* 163,840 candidates queued at once: past the default per-job limit. */
    kl_serve_config_t hc = {.agents_endpoint = "tcp://127.0.0.1:*",
                            .clients_endpoint = "tcp://127.0.0.1:*",
                            .insecure = true,
                            .heartbeat_ms = 100,
                            .client_timeout_s = 60.0,
                            .max_queued_per_job = (size_t)NREQ * NCAND};
    s_head_start_cfg(&h, &hc);
    char err[KL_ERRMSG_LEN];
    kl_net_security_t sec = {.insecure = true};
    kl_net_t *c = NULL;
    assert_int_equal(
        kl_net_client_new(&c, kl_serve_clients_endpoint(h.s), &sec, err),
        KL_OK);
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobHello hello = KILN__JOB_HELLO__INIT;
    hello.name = "slow";
    env.body_case = KILN__ENVELOPE__BODY_JOB_HELLO;
    env.job_hello = &hello;
    s_raw_send(c, &env);
    Kiln__Envelope *got = s_raw_recv(c, KILN__ENVELOPE__BODY_JOB_WELCOME);
    kl_net_envelope_free(&got);

    Kiln__Candidate *cs = kl_xcalloc(NCAND, sizeof *cs);
    Kiln__Candidate **cp = kl_xcalloc(NCAND, sizeof *cp);
    for (size_t i = 0; i < NCAND; i++) {
        kiln__candidate__init(&cs[i]);
        cs[i].id = i;
        cs[i].source = "x";
        cs[i].entry = "k";
        cp[i] = &cs[i];
    }
    uint8_t key[16] = {0};
    for (uint64_t id = 1; id <= NREQ; id++) {
        Kiln__Envelope e = KILN__ENVELOPE__INIT;
        Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
        m.request_id = id;
        m.workload_key.data = key;
        m.workload_key.len = 16;
        m.target = "sim/cpu"; /* no agent: all of it stays queued */
        m.candidates = cp;
        m.n_candidates = NCAND;
        e.body_case = KILN__ENVELOPE__BODY_REQUEST;
        e.request = &m;
        s_raw_send(c, &e);
    }
    for (uint64_t id = 1; id <= NREQ; id++) {
        Kiln__Envelope e = KILN__ENVELOPE__INIT;
        Kiln__Cancel k = KILN__CANCEL__INIT;
        k.request_id = id;
        e.body_case = KILN__ENVELOPE__BODY_CANCEL;
        e.cancel = &k;
        s_raw_send(c, &e);
    }
    /* The head answers the cancels; the raw client reads nothing. Status
     * from another client comes back meanwhile, and shows the job with
     * every candidate answered. */
    kl_port_fleet_config_t cfg = {.endpoint = kl_serve_clients_endpoint(h.s),
                                  .security = {.insecure = true}};
    kl_port_fleet_t *q = NULL;
    assert_int_equal(kl_port_fleet_new(&q, &cfg, err), KL_OK);
    uint64_t done = 0;
    for (int i = 0; i < 200 && done < (uint64_t)NREQ * NCAND; i++) {
        assert_true(s_job_status(q, "slow", NULL, &done));
        if (done < (uint64_t)NREQ * NCAND)
            usleep(20 * 1000);
    }
    assert_int_equal(done, (uint64_t)NREQ * NCAND);
    kl_port_fleet_destroy(&q);

    /* Now every result reaches the job, each candidate of each request
     * once. */
    uint8_t *seen = kl_xcalloc((size_t)NREQ * NCAND, 1);
    size_t n = 0, twice = 0;
    for (int idle = 0; idle < 50 && n < (size_t)NREQ * NCAND;) {
        Kiln__Envelope *e = NULL;
        if (kl_net_recv(c, NULL, &e, 100, err) != KL_OK) {
            idle++;
            continue;
        }
        if (e->body_case == KILN__ENVELOPE__BODY_JOB_RESULT) {
            const Kiln__MeasureResult *r = e->job_result->result;
            assert_int_equal(r->status, KILN__STATUS__STATUS_CANCELLED);
            assert_true(r->request_id >= 1 && r->request_id <= NREQ);
            size_t at =
                (size_t)(r->request_id - 1) * NCAND + e->job_result->index;
            twice += seen[at]++ > 0;
            n++;
        }
        kl_net_envelope_free(&e);
    }
    assert_int_equal(n, (size_t)NREQ * NCAND);
    assert_int_equal(twice, 0);
    free(seen);
    free(cp);
    free(cs);
    kl_net_destroy(&c);
    s_head_stop(&h);
}

static void test_bad_config(void **state)
{
    (void)state;
    kl_serve_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = "tcp://127.0.0.1:*"};
    assert_int_equal(kl_serve_new(&s, &cfg, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "--keys"));
    cfg.insecure = true;
    cfg.agents_endpoint = "tcp://0.0.0.0:*";
    assert_int_not_equal(kl_serve_new(&s, &cfg, err), KL_OK);
    assert_non_null(strstr(err, "loopback"));
    assert_null(s);
}

/* What the on_tick hook saw last, taken on the head's thread. */
typedef struct {
    pthread_mutex_t lock;
    int n_jobs;
    kl_serve_job_state_t state;
    char waiting[64];
    uint64_t queued, forwarded, requests, jobs_seen;
} s_seen_t;

static void s_tick(kl_serve_t *s, void *arg)
{
    s_seen_t *v = arg;
    kl_serve_snap_t *p = kl_serve_snapshot(s);
    pthread_mutex_lock(&v->lock);
    v->n_jobs = (int)p->n_jobs;
    v->state = p->n_jobs ? p->jobs[0].state : KL_SERVE_JOB_IDLE;
    snprintf(v->waiting, sizeof v->waiting, "%s",
             p->n_jobs && p->jobs[0].waiting_target ? p->jobs[0].waiting_target
                                                    : "");
    v->queued = p->n_jobs ? p->jobs[0].queued : 0;
    v->forwarded = p->results_forwarded;
    v->requests = p->requests_received;
    v->jobs_seen = p->jobs_seen;
    pthread_mutex_unlock(&v->lock);
    kl_serve_snap_free(&p);
}

/* Waits (up to 5 s) until the hook saw job state st; false if not. */
static bool s_wait_state(s_seen_t *v, kl_serve_job_state_t st)
{
    for (int i = 0; i < 250; i++) {
        pthread_mutex_lock(&v->lock);
        bool ok = v->n_jobs == 1 && v->state == st;
        pthread_mutex_unlock(&v->lock);
        if (ok)
            return true;
        usleep(20 * 1000);
    }
    return false;
}

/* A job's state through the snapshot and the status reply: idle after
 * its hello (it named no target), waiting while its work is for a target
 * no agent serves, idle again after a cancel; the head's counters. */
static void test_snapshot_state(void **state)
{
    (void)state;
    s_seen_t v = {.lock = PTHREAD_MUTEX_INITIALIZER};
    s_head_t h;
    memset(&h, 0, sizeof h);
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = "tcp://127.0.0.1:*",
                             .insecure = true,
                             .heartbeat_ms = 100};
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_serve_new(&h.s, &cfg, err), KL_OK);
    kl_serve_on_tick(h.s, s_tick, &v);
    assert_int_equal(pthread_create(&h.th, NULL, s_run, &h), 0);
    int rc;
    kl_port_fleet_t *a = s_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_OK);
    assert_true(s_wait_state(&v, KL_SERVE_JOB_IDLE));
    kl_port_t p = kl_port_fleet(a);
    s_batch_t sb;
    s_batch(&sb, 5);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    assert_true(s_wait_state(&v, KL_SERVE_JOB_WAITING));
    pthread_mutex_lock(&v.lock);
    assert_string_equal(v.waiting, "sim/cpu");
    assert_int_equal(v.queued, 5);
    assert_int_equal(v.requests, 1);
    assert_int_equal(v.jobs_seen, 1);
    assert_int_equal(v.forwarded, 0);
    pthread_mutex_unlock(&v.lock);
    /* The status reply says the same. */
    Kiln__Envelope *env = NULL;
    assert_int_equal(kl_port_fleet_status(a, &env, 5000, err), KL_OK);
    assert_int_equal(env->status_reply->n_jobs, 1);
    assert_string_equal(env->status_reply->jobs[0]->state, "waiting");
    assert_string_equal(env->status_reply->jobs[0]->waiting_target, "sim/cpu");
    kl_net_envelope_free(&env);
    assert_int_equal(kl_port_cancel(&p, id, err), KL_OK);
    assert_true(s_wait_state(&v, KL_SERVE_JOB_IDLE));
    pthread_mutex_lock(&v.lock);
    assert_int_equal(v.forwarded, 5); /* the head's CANCELLED results */
    pthread_mutex_unlock(&v.lock);
    assert_int_equal(kl_port_fleet_status(a, &env, 5000, err), KL_OK);
    assert_string_equal(env->status_reply->jobs[0]->state, "idle");
    assert_string_equal(env->status_reply->jobs[0]->waiting_target, "");
    kl_net_envelope_free(&env);
    kl_port_fleet_destroy(&a);
    s_head_stop(&h);
    assert_string_equal(kl_serve_job_state_name(KL_SERVE_JOB_RUNNING),
                        "running");
    assert_string_equal(kl_serve_job_state_name(KL_SERVE_JOB_QUEUED), "queued");
}

static char *s_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return kl_xstrdup(buf);
}

/* --state: DIR/drained is read (blank lines and repeats dropped) and
 * rewritten at start; a drain of a name no agent has is not kept, an
 * undrain of a remembered name forgets it (and counts as a match); a
 * directory that cannot be made is an error at start. */
static void test_state_dir(void **state)
{
    (void)state;
    char dir[512], err[KL_ERRMSG_LEN];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kl-serve-state-XXXXXX"));
    char *path = kl_xasprintf("%s/drained", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("a0\n\nb1\na0\n", f);
    fclose(f);
    s_head_t h;
    memset(&h, 0, sizeof h);
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = "tcp://127.0.0.1:*",
                             .insecure = true,
                             .heartbeat_ms = 100,
                             .state_dir = dir};
    assert_int_equal(kl_serve_new(&h.s, &cfg, err), KL_OK);
    char *text = s_slurp(path);
    assert_string_equal(text, "a0\nb1\n");
    free(text);
    assert_int_equal(pthread_create(&h.th, NULL, s_run, &h), 0);
    int rc;
    kl_port_fleet_t *a = s_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_OK);
    size_t n = 9;
    assert_int_equal(kl_port_fleet_drain(a, "zz", false, &n, 5000, err), KL_OK);
    assert_int_equal(n, 0);
    assert_int_equal(kl_port_fleet_drain(a, "a0", false, &n, 5000, err), KL_OK);
    assert_int_equal(n, 1); /* remembered, though not connected */
    assert_int_equal(kl_port_fleet_drain(a, "b1", true, &n, 5000, err), KL_OK);
    assert_int_equal(n, 1);
    text = s_slurp(path);
    assert_string_equal(text, "a0\n");
    free(text);
    assert_int_equal(kl_port_fleet_drain(a, "b1", true, &n, 5000, err), KL_OK);
    assert_int_equal(n, 0);
    kl_port_fleet_destroy(&a);
    s_head_stop(&h);
    char *tmp = kl_xasprintf("%s/drained.tmp", dir);
    assert_int_not_equal(access(tmp, F_OK), 0);
    free(tmp);
    /* A state directory that cannot be made. */
    cfg.state_dir = "/proc/kiln-no-such-dir";
    kl_serve_t *s = NULL;
    assert_int_equal(kl_serve_new(&s, &cfg, err), KL_ERR_IO);
    assert_non_null(strstr(err, "--state /proc/kiln-no-such-dir"));
    assert_null(s);
    unlink(path);
    free(path);
    rmdir(dir);
}

/* ---- tenants: real CURVE keys ---------------------------------------- */

/* A keys directory as kiln serve --keys reads it: coordinator.key/.pub,
 * clients alice and bob (clients/), operator op (operators/ only), agents
 * ag1 and ag2 (agents/); each side's pair in the same directory. */
typedef struct {
    char dir[512];
    char server[600]; /* coordinator.pub */
} s_keys_t;

static void s_allow(const s_keys_t *k, const char *name, const char *sub)
{
    char err[KL_ERRMSG_LEN], *data = NULL;
    size_t len = 0;
    char *from = kl_xasprintf("%s/%s.pub", k->dir, name);
    char *adir = kl_xasprintf("%s/%s", k->dir, sub);
    char *to = kl_xasprintf("%s/%s.pub", adir, name);
    assert_int_equal(kl_mkdirs(adir, err), KL_OK);
    assert_int_equal(kl_read_file(from, &data, &len, err), KL_OK);
    assert_int_equal(kl_write_file(to, data, len, err), KL_OK);
    free(data);
    free(to);
    free(adir);
    free(from);
}

static void s_keys_make(s_keys_t *k)
{
    char err[KL_ERRMSG_LEN];
    assert_non_null(
        kl_test_mkdtemp(k->dir, sizeof k->dir, "kl-serve-keys-XXXXXX"));
    snprintf(k->server, sizeof k->server, "%s/coordinator.pub", k->dir);
    const char *names[] = {"coordinator", "alice", "bob", "op", "ag1", "ag2"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        assert_int_equal(kl_net_keygen(k->dir, names[i], err), KL_OK);
    s_allow(k, "alice", "clients");
    s_allow(k, "bob", "clients");
    s_allow(k, "op", "operators");
    s_allow(k, "ag1", "agents");
    s_allow(k, "ag2", "agents");
}

static char *s_key_of(const s_keys_t *k, const char *name)
{
    char err[KL_ERRMSG_LEN], key[41];
    char *path = kl_xasprintf("%s/%s.pub", k->dir, name);
    assert_int_equal(kl_net_read_key(path, key, err), KL_OK);
    free(path);
    return kl_xstrdup(key);
}

static int s_rm_one(const char *p, const struct stat *st, int flag,
                    struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void s_keys_free(s_keys_t *k)
{
    nftw(k->dir, s_rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static kl_net_security_t s_sec(const s_keys_t *k, const char *name)
{
    return (kl_net_security_t){
        .keys_dir = k->dir, .name = name, .server_key_file = k->server};
}

/* A CURVE head on loopback (heartbeats every 100 ms, so a connection is
 * "silent" for a takeover after 0.3 s); cfg's limits as given. */
static void s_head_start_keys(s_head_t *h, const s_keys_t *k,
                              kl_serve_config_t cfg)
{
    cfg.agents_endpoint = "tcp://127.0.0.1:*";
    cfg.clients_endpoint = "tcp://127.0.0.1:*";
    cfg.keys_dir = k->dir;
    cfg.heartbeat_ms = 100;
    if (!cfg.client_timeout_s)
        cfg.client_timeout_s = 30;
    s_head_start_cfg(h, &cfg);
}

/* A job (name) or a query-only client (name NULL) with key's pair. */
static kl_port_fleet_t *s_port_as(s_head_t *h, const s_keys_t *k,
                                  const char *key, const char *name, int *rc,
                                  char *err)
{
    kl_port_fleet_config_t cfg = {.endpoint = kl_serve_clients_endpoint(h->s),
                                  .security = s_sec(k, key),
                                  .name = name,
                                  .connect_s = 5};
    kl_port_fleet_t *f = NULL;
    *rc = kl_port_fleet_new(&f, &cfg, err);
    return f;
}

/* A raw client with key's pair (k NULL: insecure). */
static kl_net_t *s_raw_as(const char *endpoint, const s_keys_t *k,
                          const char *key)
{
    char err[KL_ERRMSG_LEN];
    kl_net_security_t sec =
        k ? s_sec(k, key) : (kl_net_security_t){.insecure = true};
    kl_net_t *c = NULL;
    if (kl_net_client_new(&c, endpoint, &sec, err) != KL_OK)
        fail_msg("client %s: %s", key, err);
    return c;
}

static void s_raw_hello(kl_net_t *c, const char *name)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobHello hello = KILN__JOB_HELLO__INIT;
    hello.name = (char *)name;
    env.body_case = KILN__ENVELOPE__BODY_JOB_HELLO;
    env.job_hello = &hello;
    s_raw_send(c, &env);
}

/* The reply to a StatusQuery from f: its jobs' names joined by ' ', in
 * *names (at most 256 bytes), its all_jobs, and its number of agents. */
static bool s_status_of(kl_port_fleet_t *f, char *names, size_t *n_agents)
{
    Kiln__Envelope *env = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_port_fleet_status(f, &env, 5000, err), KL_OK);
    const Kiln__StatusReply *r = env->status_reply;
    names[0] = '\0';
    for (size_t i = 0; i < r->n_jobs; i++) {
        if (i)
            strcat(names, " ");
        strncat(names, r->jobs[i]->name, 64);
    }
    if (n_agents)
        *n_agents = r->n_agents;
    bool all = r->all_jobs;
    kl_net_envelope_free(&env);
    return all;
}

/* A job name belongs to the key that opened it. Another key's JobHello is
 * refused while the job lives, even with its connection silent past the
 * reconnect window (the takeover a hostile tenant used), and for the hold
 * after it goes; the owner's key resumes it (a reconnect) and keeps its
 * queue. */
static void test_job_name_bound(void **state)
{
    (void)state;
    s_keys_t k;
    s_keys_make(&k);
    s_head_t h;
    s_head_start_keys(&h, &k, (kl_serve_config_t){.name_hold_s = 1.5});
    char err[KL_ERRMSG_LEN];
    int rc;
    /* alice opens "j" with one request queued, then goes silent. */
    kl_port_fleet_t *a = s_port_as(&h, &k, "alice", "j", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_t p = kl_port_fleet(a);
    s_batch_t sb;
    s_batch(&sb, 3);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    kl_port_fleet_t *op = s_port_as(&h, &k, "op", NULL, &rc, err);
    assert_int_equal(rc, KL_OK);
    uint64_t queued = 0;
    for (int i = 0; i < 100 && queued != 3; i++)
        if (!s_job_status(op, "j", &queued, NULL) || queued != 3)
            usleep(10 * 1000);
    assert_int_equal(queued, 3);
    usleep(500 * 1000); /* > 3 heartbeats of 100 ms */
    /* bob: refused, naming why. */
    kl_port_fleet_t *b = s_port_as(&h, &k, "bob", "j", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(b);
    assert_non_null(strstr(err, "job j is running on this head under another "
                                "client key"));
    /* A raw client of bob's key gets the same Goodbye. */
    kl_net_t *raw = s_raw_as(kl_serve_clients_endpoint(h.s), &k, "bob");
    s_raw_hello(raw, "j");
    Kiln__Envelope *got = s_raw_recv(raw, KILN__ENVELOPE__BODY_GOODBYE);
    assert_non_null(strstr(got->goodbye->reason, "another client key"));
    kl_net_envelope_free(&got);
    /* The job is still alice's, with its queue. */
    char *alice = s_key_of(&k, "alice");
    Kiln__Envelope *env = NULL;
    assert_int_equal(kl_port_fleet_status(op, &env, 5000, err), KL_OK);
    assert_int_equal(env->status_reply->n_jobs, 1);
    assert_string_equal(env->status_reply->jobs[0]->owner_key, alice);
    assert_int_equal(env->status_reply->jobs[0]->queued, 3);
    kl_net_envelope_free(&env);
    /* alice's key from a new connection resumes it (a reconnect). */
    kl_port_fleet_t *a2 = s_port_as(&h, &k, "alice", "j", &rc, err);
    assert_int_equal(rc, KL_OK);
    assert_true(s_job_status(op, "j", &queued, NULL));
    assert_int_equal(queued, 3);
    /* Gone (Goodbye): the name stays alice's for the hold (1.5 s). */
    kl_port_fleet_destroy(&a2);
    bool listed = true;
    for (int i = 0; i < 100 && listed; i++) {
        listed = s_job_status(op, "j", NULL, NULL);
        if (listed)
            usleep(10 * 1000);
    }
    assert_false(listed);
    b = s_port_as(&h, &k, "bob", "j", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_non_null(strstr(err, "job j belongs to another client key"));
    assert_non_null(strstr(err, "--name-hold-s"));
    /* After the hold, the name is free. */
    usleep(1600 * 1000);
    b = s_port_as(&h, &k, "bob", "j", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_destroy(&b);
    free(alice);
    kl_net_destroy(&raw);
    kl_port_fleet_destroy(&a);
    kl_port_fleet_destroy(&op);
    s_head_stop(&h);
    s_keys_free(&k);
}

/* With --state, the names outlive the head: alice's job, gone or still
 * live when the head stops, keeps its name for alice's key on the head
 * started again (DIR/names). */
static void test_names_kept(void **state)
{
    (void)state;
    s_keys_t k;
    s_keys_make(&k);
    char sdir[512], err[KL_ERRMSG_LEN];
    assert_non_null(
        kl_test_mkdtemp(sdir, sizeof sdir, "kl-serve-names-XXXXXX"));
    s_head_t h;
    kl_serve_config_t cfg = {.state_dir = sdir};
    s_head_start_keys(&h, &k, cfg);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", kl_serve_clients_endpoint(h.s));
    int rc;
    kl_port_fleet_t *gone = s_port_as(&h, &k, "alice", "gone", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_destroy(&gone); /* says Goodbye: gone */
    kl_port_fleet_t *live = s_port_as(&h, &k, "alice", "live", &rc, err);
    assert_int_equal(rc, KL_OK);
    usleep(100 * 1000);
    s_head_stop(&h);
    kl_port_fleet_destroy(&live);
    char *names = kl_xasprintf("%s/names", sdir);
    char *text = s_slurp(names);
    assert_non_null(text);
    char *alice = s_key_of(&k, "alice");
    assert_non_null(strstr(text, alice));
    assert_non_null(strstr(text, " gone\n"));
    assert_non_null(strstr(text, " 0 live\n"));
    free(text);
    /* Started again on the same endpoint and state. */
    kl_serve_config_t c2 = {.agents_endpoint = "tcp://127.0.0.1:*",
                            .clients_endpoint = ep,
                            .keys_dir = k.dir,
                            .heartbeat_ms = 100,
                            .client_timeout_s = 30,
                            .state_dir = sdir};
    s_head_start_cfg(&h, &c2);
    kl_port_fleet_t *b = s_port_as(&h, &k, "bob", "gone", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(b);
    assert_non_null(strstr(err, "job gone belongs to another client key"));
    b = s_port_as(&h, &k, "bob", "live", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(b);
    assert_non_null(strstr(err, "job live belongs to another client key"));
    kl_port_fleet_t *a = s_port_as(&h, &k, "alice", "live", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_destroy(&a);
    s_head_stop(&h);
    free(alice);
    unlink(names);
    free(names);
    char *drained = kl_xasprintf("%s/drained", sdir);
    unlink(drained);
    free(drained);
    rmdir(sdir);
    s_keys_free(&k);
}

/* A Hello of an agent called name, with one simulated CPU device. */
static void s_agent_hello(kl_net_t *c, const char *name)
{
    Kiln__DeviceInfo dev = KILN__DEVICE_INFO__INIT;
    Kiln__DeviceInfo *devs[1] = {&dev};
    dev.kind = "cpu";
    dev.name = "sim";
    dev.target = "sim/cpu/x86_64-avx2";
    dev.simulated = true;
    Kiln__Hello hello = KILN__HELLO__INIT;
    hello.agent_name = (char *)name;
    hello.hostname = "test";
    hello.build_slots = 1;
    hello.devices = devs;
    hello.n_devices = 1;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    s_raw_send(c, &env);
}

/* Whether the head welcomes (true) or says goodbye (false, its reason in
 * why) to a Hello of agent name from key. */
static bool s_agent_joins(kl_net_t *c, const char *name, char *why, size_t n)
{
    s_agent_hello(c, name);
    char err[KL_ERRMSG_LEN];
    for (int i = 0; i < 100; i++) {
        Kiln__Envelope *env = NULL;
        if (kl_net_recv(c, NULL, &env, 100, err) != KL_OK)
            continue;
        int body = env->body_case;
        if (body == KILN__ENVELOPE__BODY_GOODBYE)
            snprintf(why, n, "%s", env->goodbye->reason);
        kl_net_envelope_free(&env);
        if (body == KILN__ENVELOPE__BODY_WELCOME)
            return true;
        if (body == KILN__ENVELOPE__BODY_GOODBYE)
            return false;
    }
    fail_msg("no Welcome or Goodbye for agent %s", name);
    return false;
}

static void s_agent_bye(kl_net_t *c)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__Goodbye g = KILN__GOODBYE__INIT;
    g.reason = "stopping";
    env.body_case = KILN__ENVELOPE__BODY_GOODBYE;
    env.goodbye = &g;
    s_raw_send(c, &env);
}

/* Drain and undrain only from an operator key; a refusal changes nothing
 * (the agent stays undrained, --state keeps its file as it was). Status:
 * a client sees its own jobs, an operator every job; agents are listed
 * for all. An agent name belongs to the agent key that registered it. */
static void test_operators_and_agents(void **state)
{
    (void)state;
    s_keys_t k;
    s_keys_make(&k);
    char sdir[512], err[KL_ERRMSG_LEN], why[KL_ERRMSG_LEN] = "";
    assert_non_null(kl_test_mkdtemp(sdir, sizeof sdir, "kl-serve-ops-XXXXXX"));
    char *drained = kl_xasprintf("%s/drained", sdir);
    s_head_t h;
    s_head_start_keys(
        &h, &k, (kl_serve_config_t){.state_dir = sdir, .name_hold_s = 0.8});
    /* Agent "box" of key ag1 joins; ag2 may not take its name, live or
     * for the hold after it leaves; ag1 may come back. */
    kl_net_t *ag1 = s_raw_as(kl_serve_agents_endpoint(h.s), &k, "ag1");
    kl_net_t *ag2 = s_raw_as(kl_serve_agents_endpoint(h.s), &k, "ag2");
    assert_true(s_agent_joins(ag1, "box", why, sizeof why));
    assert_false(s_agent_joins(ag2, "box", why, sizeof why));
    assert_non_null(strstr(why, "agent name box is taken"));
    assert_true(s_agent_joins(ag2, "box2", why, sizeof why));

    int rc;
    kl_port_fleet_t *ja = s_port_as(&h, &k, "alice", "ja", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_t *jb = s_port_as(&h, &k, "bob", "jb", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_t *op = s_port_as(&h, &k, "op", NULL, &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_t *qb = s_port_as(&h, &k, "bob", NULL, &rc, err);
    assert_int_equal(rc, KL_OK);
    char names[300];
    size_t n_agents = 0;
    for (int i = 0; i < 100 && n_agents < 2; i++) {
        s_status_of(op, names, &n_agents);
        if (n_agents < 2)
            usleep(20 * 1000);
    }
    assert_int_equal(n_agents, 2);
    /* Jobs: each client its own; the operator all. */
    assert_false(s_status_of(ja, names, &n_agents));
    assert_string_equal(names, "ja");
    assert_int_equal(n_agents, 2);
    assert_false(s_status_of(qb, names, &n_agents));
    assert_string_equal(names, "jb");
    assert_int_equal(n_agents, 2);
    assert_true(s_status_of(op, names, NULL));
    assert_true(strcmp(names, "ja jb") == 0 || strcmp(names, "jb ja") == 0);

    /* bob's drain: refused, box not drained, nothing in --state. */
    size_t n = 9;
    assert_int_equal(kl_port_fleet_drain(qb, "box", false, &n, 5000, err),
                     KL_ERR_AUTH);
    assert_non_null(strstr(err, "drain needs an operator key"));
    assert_int_equal(kl_port_fleet_drain(jb, "box", true, &n, 5000, err),
                     KL_ERR_AUTH);
    assert_non_null(strstr(err, "undrain needs an operator key"));
    Kiln__Envelope *env = NULL;
    assert_int_equal(kl_port_fleet_status(op, &env, 5000, err), KL_OK);
    for (size_t i = 0; i < env->status_reply->n_agents; i++)
        assert_false(env->status_reply->agents[i]->drained);
    kl_net_envelope_free(&env);
    char *text = s_slurp(drained);
    assert_string_equal(text, "");
    free(text);
    /* The operator's drain works and is kept; so is its undrain. */
    assert_int_equal(kl_port_fleet_drain(op, "box", false, &n, 5000, err),
                     KL_OK);
    assert_int_equal(n, 1);
    text = s_slurp(drained);
    assert_string_equal(text, "box\n");
    free(text);
    bool is_drained = false;
    assert_int_equal(kl_port_fleet_status(op, &env, 5000, err), KL_OK);
    for (size_t i = 0; i < env->status_reply->n_agents; i++)
        if (strcmp(env->status_reply->agents[i]->name, "box") == 0)
            is_drained = env->status_reply->agents[i]->drained;
    kl_net_envelope_free(&env);
    assert_true(is_drained);
    /* bob cannot undrain it either. */
    assert_int_equal(kl_port_fleet_drain(qb, "box", true, &n, 5000, err),
                     KL_ERR_AUTH);
    text = s_slurp(drained);
    assert_string_equal(text, "box\n");
    free(text);
    assert_int_equal(kl_port_fleet_drain(op, "box", true, &n, 5000, err),
                     KL_OK);
    text = s_slurp(drained);
    assert_string_equal(text, "");
    free(text);

    /* ag1 leaves: box stays ag1's for the hold, then is free. */
    s_agent_bye(ag1);
    usleep(100 * 1000);
    assert_false(s_agent_joins(ag2, "box", why, sizeof why));
    assert_non_null(strstr(why, "agent name box belongs to another key"));
    assert_true(s_agent_joins(ag1, "box", why, sizeof why));
    s_agent_bye(ag1);
    usleep(900 * 1000);
    assert_true(s_agent_joins(ag2, "box", why, sizeof why));

    kl_port_fleet_destroy(&qb);
    kl_port_fleet_destroy(&op);
    kl_port_fleet_destroy(&jb);
    kl_port_fleet_destroy(&ja);
    kl_net_destroy(&ag2);
    kl_net_destroy(&ag1);
    s_head_stop(&h);
    unlink(drained);
    free(drained);
    rmdir(sdir);
    s_keys_free(&k);
}

/* Reads the JobResults of request id from c until n came: each INVALID,
 * its limit and its error as given (once per index). */
static void s_expect_refused(kl_net_t *c, uint64_t id, size_t n,
                             const char *limit, const char *text)
{
    bool seen[8] = {false};
    for (size_t i = 0; i < n; i++) {
        Kiln__Envelope *e = s_raw_recv(c, KILN__ENVELOPE__BODY_JOB_RESULT);
        const Kiln__JobResult *jr = e->job_result;
        assert_int_equal(jr->result->request_id, id);
        assert_int_equal(jr->result->status, KILN__STATUS__STATUS_INVALID);
        assert_string_equal(jr->limit, limit);
        assert_non_null(strstr(jr->result->error, text));
        assert_true(jr->index < n && jr->index < 8 && !seen[jr->index]);
        seen[jr->index] = true;
        kl_net_envelope_free(&e);
    }
}

/* Per-job limits: a request past one is answered, every candidate of it
 * STATUS_INVALID naming the limit, and not queued (what the job holds at
 * the head stays within the limits); the job's port stops on it with the
 * reason. A frame out of the protocol's bounds (a 5 MiB source) is
 * answered with a Goodbye naming the field, not dropped in silence. */
static void test_limits(void **state)
{
    (void)state;
    s_head_t h;
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = "tcp://127.0.0.1:*",
                             .insecure = true,
                             .heartbeat_ms = 100,
                             .client_timeout_s = 30,
                             .max_queued_per_job = 8,
                             .max_bytes_per_job = 2048,
                             .max_candidate_bytes = 1024,
                             .max_timeout_ms = 1000};
    s_head_start_cfg(&h, &cfg);
    char err[KL_ERRMSG_LEN];
    kl_net_t *c = s_raw_as(kl_serve_clients_endpoint(h.s), NULL, NULL);
    s_raw_hello(c, "lim");
    Kiln__Envelope *welcome = s_raw_recv(c, KILN__ENVELOPE__BODY_JOB_WELCOME);
    kl_net_envelope_free(&welcome);
    s_batch_t sb;
    s_batch(&sb, 5);
    s_raw_request(c, 1, &sb); /* 5 held: fine */
    s_raw_request(c, 2, &sb); /* 10 > 8 */
    s_expect_refused(c, 2, 5, "max-queued-per-job", "--max-queued-per-job 8");
    /* One candidate of 2000 bytes. */
    char *big = kl_xcalloc(2001, 1);
    memset(big, 'x', 2000);
    s_batch(&sb, 3);
    sb.c[1].source = big;
    s_raw_request(c, 3, &sb);
    s_expect_refused(c, 3, 3, "max-candidate-bytes",
                     "--max-candidate-bytes 1024");
    /* Three of 800 bytes: within the candidate limit and the count (8),
     * past the bytes (2048). */
    memset(big, 'y', 800);
    big[800] = '\0';
    for (int i = 0; i < 3; i++)
        sb.c[i].source = big;
    s_raw_request(c, 4, &sb);
    s_expect_refused(c, 4, 3, "max-bytes-per-job", "--max-bytes-per-job 2048");
    /* An evaluator timeout past 1000 ms. */
    s_batch(&sb, 2);
    Kiln__Evaluator ev = KILN__EVALUATOR__INIT;
    ev.timeout_ms = 5000;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
    m.request_id = 5;
    m.workload_key.data = sb.key;
    m.workload_key.len = 16;
    m.target = "sim/cpu";
    m.evaluator = &ev;
    m.candidates = sb.p;
    m.n_candidates = 2;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &m;
    s_raw_send(c, &env);
    s_expect_refused(c, 5, 2, "max-timeout-ms", "--max-timeout-ms 1000");
    /* Only request 1 is held. */
    int rc;
    kl_port_fleet_t *q = s_job(&h, NULL, &rc, err);
    assert_int_equal(rc, KL_OK);
    uint64_t queued = 0;
    assert_true(s_job_status(q, "lim", &queued, NULL));
    assert_int_equal(queued, 5);

    /* A job through its port: the refusal ends it, with the reason. */
    kl_port_fleet_t *a = s_job(&h, "pj", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_t p = kl_port_fleet(a);
    s_batch(&sb, 5);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    kl_dispatch_result_t *r = NULL;
    rc = KL_ERR_TIMEOUT;
    for (int i = 0; i < 50 && rc == KL_ERR_TIMEOUT; i++)
        rc = kl_port_recv(&p, &r, 100, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(r);
    assert_non_null(
        strstr(err, "refused this job's work (max-queued-per-job)"));
    assert_non_null(strstr(err, "request 2 refused"));
    assert_non_null(strstr(err, "--max-queued-per-job 8"));
    size_t n = 0;
    assert_int_equal(kl_port_agents(&p, "sim/cpu", &n, err), KL_ERR_CLOSED);
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_ERR_CLOSED);
    kl_port_fleet_destroy(&a); /* says Goodbye: the head drops pj */
    bool listed = true;
    for (int i = 0; i < 100 && listed; i++) {
        listed = s_job_status(q, "pj", NULL, NULL);
        if (listed)
            usleep(10 * 1000);
    }
    assert_false(listed);

    /* A source past the protocol's 4 MiB, sent around kl_net_send's own
     * check: a Goodbye naming the field, and the job is dropped. */
    size_t huge_n = KL_NET_MAX_SOURCE + 1024;
    char *huge = kl_xmalloc(huge_n + 1);
    memset(huge, 'z', huge_n);
    huge[huge_n] = '\0';
    s_batch(&sb, 1);
    sb.c[0].source = huge;
    m.request_id = 6;
    m.evaluator = NULL;
    m.candidates = sb.p;
    m.n_candidates = 1;
    env.version_major = KL_PROTO_MAJOR;
    env.version_minor = KL_PROTO_MINOR;
    size_t len = 0;
    void *buf = kl_net_encode(&env, &len);
    assert_int_equal(zmq_send(kl_net_socket(c), buf, len, 0), (int)len);
    free(buf);
    Kiln__Envelope *got = s_raw_recv(c, KILN__ENVELOPE__BODY_GOODBYE);
    assert_non_null(strstr(got->goodbye->reason, "frame refused"));
    assert_non_null(strstr(got->goodbye->reason, "source"));
    kl_net_envelope_free(&got);
    assert_false(s_job_status(q, "lim", NULL, NULL));
    free(huge);
    free(big);
    kl_port_fleet_destroy(&q);
    kl_net_destroy(&c);
    s_head_stop(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_queue_cancel),
        cmocka_unit_test(test_raw_client),
        cmocka_unit_test(test_head_restart),
        cmocka_unit_test(test_job_silent_resend),
        cmocka_unit_test(test_slow_job),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_snapshot_state),
        cmocka_unit_test(test_state_dir),
        cmocka_unit_test(test_job_name_bound),
        cmocka_unit_test(test_names_kept),
        cmocka_unit_test(test_operators_and_agents),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
