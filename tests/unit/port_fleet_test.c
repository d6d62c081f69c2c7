/* Unit tests of coordinator/tune/kl_port_fleet, the job's side of the
 * head node (kl_serve), over real loopback sockets and no agents: the
 * hello and a name in use, queued work and cancel, a batch with repeated
 * ids refused before it leaves, and the work the port sends again, once,
 * after a head restarted or after the head dropped the job as silent.
 * The head's own behaviour is serve_test.c. */
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

static void test_hello_queue_cancel(void **state)
{
    (void)state;
    fx_head_t h;
    fx_head_start(&h, 30);
    char err[KL_ERRMSG_LEN];
    int rc;
    kl_port_fleet_t *a = fx_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_OK);
    /* A second job of that name is refused while a runs. */
    kl_port_fleet_t *dup = fx_job(&h, "a", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(dup);
    assert_non_null(strstr(err, "job a is running"));

    kl_port_t p = kl_port_fleet(a);
    size_t n = 99;
    assert_int_equal(kl_port_agents(&p, "sim/cpu", &n, err), KL_OK);
    assert_int_equal(n, 0);
    fx_batch_t sb;
    fx_batch(&sb, 5);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    assert_int_equal(id, 1);
    /* No agent: all five wait at the head. */
    uint64_t queued = 0, done = 0;
    for (int i = 0; i < 50 && queued != 5; i++) {
        assert_true(fx_job_status(a, "a", &queued, &done));
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
    assert_true(fx_job_status(a, "a", &queued, &done));
    assert_int_equal(queued, 0);
    assert_int_equal(done, 5);
    /* A batch with repeated candidate ids never leaves the job. */
    sb.c[1].id = sb.c[0].id;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_ERR_INVAL);
    kl_port_fleet_destroy(&a);
    assert_null(a);
    fx_head_stop(&h);
}

/* A head restarted on the same endpoint: the job says hello again and
 * sends what was not answered, once; each candidate is answered once. */
static void test_head_restart(void **state)
{
    (void)state;
    fx_head_t h;
    fx_head_start(&h, 30);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", kl_serve_clients_endpoint(h.s));
    char err[KL_ERRMSG_LEN];
    int rc;
    kl_port_fleet_t *a = fx_job(&h, "r", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_t p = kl_port_fleet(a);
    fx_batch_t sb;
    fx_batch(&sb, 3);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    uint64_t queued = 0;
    for (int i = 0; i < 100 && queued != 3; i++)
        if (!fx_job_status(a, "r", &queued, NULL) || queued != 3)
            usleep(10 * 1000);
    assert_int_equal(queued, 3);
    fx_head_stop(&h); /* says Goodbye "head shutting down" */
    fx_head_start_at(&h, 30, ep);
    kl_port_fleet_config_t qc = {.endpoint = ep,
                                 .security = {.insecure = true}};
    kl_port_fleet_t *q = NULL;
    assert_int_equal(kl_port_fleet_new(&q, &qc, err), KL_OK);
    /* The job notices while it waits for results. */
    kl_dispatch_result_t *r = NULL;
    queued = 0;
    for (int i = 0; i < 100 && queued != 3; i++) {
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
        if (!fx_job_status(q, "r", &queued, NULL))
            queued = 0;
    }
    assert_int_equal(queued, 3);
    for (int i = 0; i < 5; i++)
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
    assert_true(fx_job_status(q, "r", &queued, NULL));
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
    fx_head_stop(&h);
}

/* A job silent past the head's client timeout (its connection lost, or
 * the process stopped): the head drops it with its queued work. Heard
 * from again, the job says JobHello, is welcomed by the same head and
 * sends its unanswered work again, as a new request id whose results
 * come back under the job's own id. */
static void test_job_silent_resend(void **state)
{
    (void)state;
    fx_head_t h;
    fx_head_start(&h, 0.5);
    char err[KL_ERRMSG_LEN];
    int rc;
    kl_port_fleet_t *a = fx_job(&h, "s", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_config_t qc = {.endpoint = kl_serve_clients_endpoint(h.s),
                                 .security = {.insecure = true}};
    kl_port_fleet_t *q = NULL;
    assert_int_equal(kl_port_fleet_new(&q, &qc, err), KL_OK);
    kl_port_t p = kl_port_fleet(a);
    fx_batch_t sb;
    fx_batch(&sb, 3);
    uint64_t id = 0, queued = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    for (int i = 0; i < 100 && queued != 3; i++)
        if (!fx_job_status(q, "s", &queued, NULL) || queued != 3)
            usleep(10 * 1000);
    assert_int_equal(queued, 3);
    /* Silent: dropped, its work with it. */
    usleep(1200 * 1000);
    assert_false(fx_job_status(q, "s", NULL, NULL));
    /* Back: within a few seconds the head has its three again, once. */
    kl_dispatch_result_t *r = NULL;
    queued = 0;
    for (int i = 0; i < 50 && queued != 3; i++) {
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
        if (!fx_job_status(q, "s", &queued, NULL))
            queued = 0;
    }
    assert_int_equal(queued, 3);
    for (int i = 0; i < 5; i++)
        assert_int_equal(kl_port_recv(&p, &r, 100, err), KL_ERR_TIMEOUT);
    assert_true(fx_job_status(q, "s", &queued, NULL));
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
    fx_head_stop(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_queue_cancel),
        cmocka_unit_test(test_head_restart),
        cmocka_unit_test(test_job_silent_resend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
