/* Unit tests of coordinator/serve (the head node) over real loopback
 * sockets and no agents: request ids made idempotent and messages before
 * JobHello (a raw client), a job that reads nothing does not stall the
 * head, bad configurations, the snapshot (a job's state, the head's
 * counters), --state (DIR/drained read, rewritten, kept through
 * drain/undrain) and per-job limits. Keys, tenants and operators are
 * serve_keys_test.c, the job's port port_fleet_test.c; work actually
 * measured (agents, fair share, keys) is tests/integration/serve_fleet.sh. */
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
#include "serve_fx.h"

static void test_raw_client(void **state)
{
    (void)state;
    fx_head_t h;
    fx_head_start(&h, 1.0);
    char err[KL_ERRMSG_LEN];
    kl_net_security_t sec = {.insecure = true};
    kl_net_t *c = NULL;
    assert_int_equal(
        kl_net_client_new(&c, kl_serve_clients_endpoint(h.s), &sec, err),
        KL_OK);
    fx_batch_t sb;
    fx_batch(&sb, 3);
    /* Work before JobHello: Goodbye. */
    fx_raw_request(c, 1, &sb);
    Kiln__Envelope *got = fx_raw_recv(c, KILN__ENVELOPE__BODY_GOODBYE);
    assert_non_null(strstr(got->goodbye->reason, "say JobHello first"));
    kl_net_envelope_free(&got);

    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobHello hello = KILN__JOB_HELLO__INIT;
    hello.name = "raw";
    hello.weight = 3;
    env.body_case = KILN__ENVELOPE__BODY_JOB_HELLO;
    env.job_hello = &hello;
    fx_raw_send(c, &env);
    got = fx_raw_recv(c, KILN__ENVELOPE__BODY_JOB_WELCOME);
    assert_int_equal(got->job_welcome->heartbeat_ms, 100);
    kl_net_envelope_free(&got);
    /* The same request id twice: queued once. */
    fx_raw_request(c, 7, &sb);
    fx_raw_request(c, 7, &sb);
    fx_raw_request(c, 8, &sb);

    int rc;
    kl_port_fleet_config_t cfg = {.endpoint = kl_serve_clients_endpoint(h.s),
                                  .security = {.insecure = true}};
    kl_port_fleet_t *q = NULL;
    assert_int_equal(kl_port_fleet_new(&q, &cfg, err), KL_OK);
    /* The three requests cross another socket than the query: wait for
     * the last one, then make sure no fourth batch shows up. */
    uint64_t queued = 0;
    for (int i = 0; i < 100 && queued < 6; i++) {
        assert_true(fx_job_status(q, "raw", &queued, NULL));
        if (queued < 6)
            usleep(5 * 1000);
    }
    assert_int_equal(queued, 6);
    usleep(50 * 1000);
    assert_true(fx_job_status(q, "raw", &queued, NULL));
    assert_int_equal(queued, 6);
    size_t matched = 9;
    assert_int_equal(
        kl_port_fleet_drain(q, "nobody", false, &matched, 5000, err), KL_OK);
    assert_int_equal(matched, 0);
    /* raw says nothing more: dropped after its 1 s, work and all. */
    bool listed = true;
    for (int i = 0; i < 100 && listed; i++) {
        usleep(50 * 1000);
        listed = fx_job_status(q, "raw", NULL, NULL);
    }
    assert_false(listed);
    (void)rc;
    kl_port_fleet_destroy(&q);
    kl_net_destroy(&c);
    fx_head_stop(&h);
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
    fx_head_t h;
    /* 163,840 candidates queued at once: past the default per-job limit. */
    kl_serve_config_t hc = {.agents_endpoint = "tcp://127.0.0.1:*",
                            .clients_endpoint = "tcp://127.0.0.1:*",
                            .insecure = true,
                            .heartbeat_ms = 100,
                            .client_timeout_s = 60.0,
                            .max_queued_per_job = (size_t)NREQ * NCAND};
    fx_head_start_cfg(&h, &hc);
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
    fx_raw_send(c, &env);
    Kiln__Envelope *got = fx_raw_recv(c, KILN__ENVELOPE__BODY_JOB_WELCOME);
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
        fx_raw_send(c, &e);
    }
    for (uint64_t id = 1; id <= NREQ; id++) {
        Kiln__Envelope e = KILN__ENVELOPE__INIT;
        Kiln__Cancel k = KILN__CANCEL__INIT;
        k.request_id = id;
        e.body_case = KILN__ENVELOPE__BODY_CANCEL;
        e.cancel = &k;
        fx_raw_send(c, &e);
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
        assert_true(fx_job_status(q, "slow", NULL, &done));
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
    fx_head_stop(&h);
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
    fx_head_t h;
    memset(&h, 0, sizeof h);
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = "tcp://127.0.0.1:*",
                             .insecure = true,
                             .heartbeat_ms = 100};
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_serve_new(&h.s, &cfg, err), KL_OK);
    kl_serve_on_tick(h.s, s_tick, &v);
    assert_int_equal(pthread_create(&h.th, NULL, fx_head_loop, &h), 0);
    int rc;
    kl_port_fleet_t *a = fx_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_OK);
    assert_true(s_wait_state(&v, KL_SERVE_JOB_IDLE));
    kl_port_t p = kl_port_fleet(a);
    fx_batch_t sb;
    fx_batch(&sb, 5);
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
    fx_head_stop(&h);
    assert_string_equal(kl_serve_job_state_name(KL_SERVE_JOB_RUNNING),
                        "running");
    assert_string_equal(kl_serve_job_state_name(KL_SERVE_JOB_QUEUED), "queued");
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
    fx_head_t h;
    memset(&h, 0, sizeof h);
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = "tcp://127.0.0.1:*",
                             .insecure = true,
                             .heartbeat_ms = 100,
                             .state_dir = dir};
    assert_int_equal(kl_serve_new(&h.s, &cfg, err), KL_OK);
    char *text = fx_slurp(path);
    assert_string_equal(text, "a0\nb1\n");
    free(text);
    assert_int_equal(pthread_create(&h.th, NULL, fx_head_loop, &h), 0);
    int rc;
    kl_port_fleet_t *a = fx_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_OK);
    size_t n = 9;
    assert_int_equal(kl_port_fleet_drain(a, "zz", false, &n, 5000, err), KL_OK);
    assert_int_equal(n, 0);
    assert_int_equal(kl_port_fleet_drain(a, "a0", false, &n, 5000, err), KL_OK);
    assert_int_equal(n, 1); /* remembered, though not connected */
    assert_int_equal(kl_port_fleet_drain(a, "b1", true, &n, 5000, err), KL_OK);
    assert_int_equal(n, 1);
    text = fx_slurp(path);
    assert_string_equal(text, "a0\n");
    free(text);
    assert_int_equal(kl_port_fleet_drain(a, "b1", true, &n, 5000, err), KL_OK);
    assert_int_equal(n, 0);
    kl_port_fleet_destroy(&a);
    fx_head_stop(&h);
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

/* Reads the JobResults of request id from c until n came: each INVALID,
 * its limit and its error as given (once per index). */
static void s_expect_refused(kl_net_t *c, uint64_t id, size_t n,
                             const char *limit, const char *text)
{
    bool seen[8] = {false};
    for (size_t i = 0; i < n; i++) {
        Kiln__Envelope *e = fx_raw_recv(c, KILN__ENVELOPE__BODY_JOB_RESULT);
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
    fx_head_t h;
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = "tcp://127.0.0.1:*",
                             .insecure = true,
                             .heartbeat_ms = 100,
                             .client_timeout_s = 30,
                             .max_queued_per_job = 8,
                             .max_bytes_per_job = 2048,
                             .max_candidate_bytes = 1024,
                             .max_timeout_ms = 1000};
    fx_head_start_cfg(&h, &cfg);
    char err[KL_ERRMSG_LEN];
    kl_net_t *c = fx_raw_as(kl_serve_clients_endpoint(h.s), NULL, NULL);
    fx_raw_hello(c, "lim");
    Kiln__Envelope *welcome = fx_raw_recv(c, KILN__ENVELOPE__BODY_JOB_WELCOME);
    kl_net_envelope_free(&welcome);
    fx_batch_t sb;
    fx_batch(&sb, 5);
    fx_raw_request(c, 1, &sb); /* 5 held: fine */
    fx_raw_request(c, 2, &sb); /* 10 > 8 */
    s_expect_refused(c, 2, 5, "max-queued-per-job", "--max-queued-per-job 8");
    /* One candidate of 2000 bytes. */
    char *big = kl_xcalloc(2001, 1);
    memset(big, 'x', 2000);
    fx_batch(&sb, 3);
    sb.c[1].source = big;
    fx_raw_request(c, 3, &sb);
    s_expect_refused(c, 3, 3, "max-candidate-bytes",
                     "--max-candidate-bytes 1024");
    /* Three of 800 bytes: within the candidate limit and the count (8),
     * past the bytes (2048). */
    memset(big, 'y', 800);
    big[800] = '\0';
    for (int i = 0; i < 3; i++)
        sb.c[i].source = big;
    fx_raw_request(c, 4, &sb);
    s_expect_refused(c, 4, 3, "max-bytes-per-job", "--max-bytes-per-job 2048");
    /* An evaluator timeout past 1000 ms. */
    fx_batch(&sb, 2);
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
    fx_raw_send(c, &env);
    s_expect_refused(c, 5, 2, "max-timeout-ms", "--max-timeout-ms 1000");
    /* Only request 1 is held. */
    int rc;
    kl_port_fleet_t *q = fx_job(&h, NULL, &rc, err);
    assert_int_equal(rc, KL_OK);
    uint64_t queued = 0;
    assert_true(fx_job_status(q, "lim", &queued, NULL));
    assert_int_equal(queued, 5);

    /* A job through its port: the refusal ends it, with the reason. */
    kl_port_fleet_t *a = fx_job(&h, "pj", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_t p = kl_port_fleet(a);
    fx_batch(&sb, 5);
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
        listed = fx_job_status(q, "pj", NULL, NULL);
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
    fx_batch(&sb, 1);
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
    Kiln__Envelope *got = fx_raw_recv(c, KILN__ENVELOPE__BODY_GOODBYE);
    assert_non_null(strstr(got->goodbye->reason, "frame refused"));
    assert_non_null(strstr(got->goodbye->reason, "source"));
    kl_net_envelope_free(&got);
    assert_false(fx_job_status(q, "lim", NULL, NULL));
    free(huge);
    free(big);
    kl_port_fleet_destroy(&q);
    kl_net_destroy(&c);
    fx_head_stop(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_client),
        cmocka_unit_test(test_slow_job),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_snapshot_state),
        cmocka_unit_test(test_state_dir),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
