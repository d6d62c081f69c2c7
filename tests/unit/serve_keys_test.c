/* Unit tests of the head node with real CURVE keys (coordinator/serve,
 * kiln serve --keys: its tenants, kl_serve_tenants.c): a job name belongs
 * to the key that opened it (while it lives, for the hold after, and
 * across a restart with --state), drain and undrain only from an operator
 * key, what status shows to a client and to an operator, and an agent
 * name bound to its key. */
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
    fx_keys_t k;
    fx_keys_make(&k);
    fx_head_t h;
    fx_head_start_keys(&h, &k, (kl_serve_config_t){.name_hold_s = 1.5});
    char err[KL_ERRMSG_LEN];
    int rc;
    /* alice opens "j" with one request queued, then goes silent. */
    kl_port_fleet_t *a = fx_port_as(&h, &k, "alice", "j", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_t p = kl_port_fleet(a);
    fx_batch_t sb;
    fx_batch(&sb, 3);
    uint64_t id = 0;
    assert_int_equal(kl_port_submit(&p, &sb.b, &id, err), KL_OK);
    kl_port_fleet_t *op = fx_port_as(&h, &k, "op", NULL, &rc, err);
    assert_int_equal(rc, KL_OK);
    uint64_t queued = 0;
    for (int i = 0; i < 100 && queued != 3; i++)
        if (!fx_job_status(op, "j", &queued, NULL) || queued != 3)
            usleep(10 * 1000);
    assert_int_equal(queued, 3);
    usleep(500 * 1000); /* > 3 heartbeats of 100 ms */
    /* bob: refused, naming why. */
    kl_port_fleet_t *b = fx_port_as(&h, &k, "bob", "j", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(b);
    assert_non_null(strstr(err, "job j is running on this head under another "
                                "client key"));
    /* A raw client of bob's key gets the same Goodbye. */
    kl_net_t *raw = fx_raw_as(kl_serve_clients_endpoint(h.s), &k, "bob");
    fx_raw_hello(raw, "j");
    Kiln__Envelope *got = fx_raw_recv(raw, KILN__ENVELOPE__BODY_GOODBYE);
    assert_non_null(strstr(got->goodbye->reason, "another client key"));
    kl_net_envelope_free(&got);
    /* The job is still alice's, with its queue. */
    char *alice = fx_key_of(&k, "alice");
    Kiln__Envelope *env = NULL;
    assert_int_equal(kl_port_fleet_status(op, &env, 5000, err), KL_OK);
    assert_int_equal(env->status_reply->n_jobs, 1);
    assert_string_equal(env->status_reply->jobs[0]->owner_key, alice);
    assert_int_equal(env->status_reply->jobs[0]->queued, 3);
    kl_net_envelope_free(&env);
    /* alice's key from a new connection resumes it (a reconnect). */
    kl_port_fleet_t *a2 = fx_port_as(&h, &k, "alice", "j", &rc, err);
    assert_int_equal(rc, KL_OK);
    assert_true(fx_job_status(op, "j", &queued, NULL));
    assert_int_equal(queued, 3);
    /* Gone (Goodbye): the name stays alice's for the hold (1.5 s). */
    kl_port_fleet_destroy(&a2);
    bool listed = true;
    for (int i = 0; i < 100 && listed; i++) {
        listed = fx_job_status(op, "j", NULL, NULL);
        if (listed)
            usleep(10 * 1000);
    }
    assert_false(listed);
    b = fx_port_as(&h, &k, "bob", "j", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_non_null(strstr(err, "job j belongs to another client key"));
    assert_non_null(strstr(err, "--name-hold-s"));
    /* After the hold, the name is free. */
    usleep(1600 * 1000);
    b = fx_port_as(&h, &k, "bob", "j", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_destroy(&b);
    free(alice);
    kl_net_destroy(&raw);
    kl_port_fleet_destroy(&a);
    kl_port_fleet_destroy(&op);
    fx_head_stop(&h);
    fx_keys_free(&k);
}

/* With --state, the names outlive the head: alice's job, gone or still
 * live when the head stops, keeps its name for alice's key on the head
 * started again (DIR/names). */
static void test_names_kept(void **state)
{
    (void)state;
    fx_keys_t k;
    fx_keys_make(&k);
    char sdir[512], err[KL_ERRMSG_LEN];
    assert_non_null(
        kl_test_mkdtemp(sdir, sizeof sdir, "kl-serve-names-XXXXXX"));
    fx_head_t h;
    kl_serve_config_t cfg = {.state_dir = sdir};
    fx_head_start_keys(&h, &k, cfg);
    char ep[256];
    snprintf(ep, sizeof ep, "%s", kl_serve_clients_endpoint(h.s));
    int rc;
    kl_port_fleet_t *gone = fx_port_as(&h, &k, "alice", "gone", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_destroy(&gone); /* says Goodbye: gone */
    kl_port_fleet_t *live = fx_port_as(&h, &k, "alice", "live", &rc, err);
    assert_int_equal(rc, KL_OK);
    usleep(100 * 1000);
    fx_head_stop(&h);
    kl_port_fleet_destroy(&live);
    char *names = kl_xasprintf("%s/names", sdir);
    char *text = fx_slurp(names);
    assert_non_null(text);
    char *alice = fx_key_of(&k, "alice");
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
    fx_head_start_cfg(&h, &c2);
    kl_port_fleet_t *b = fx_port_as(&h, &k, "bob", "gone", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(b);
    assert_non_null(strstr(err, "job gone belongs to another client key"));
    b = fx_port_as(&h, &k, "bob", "live", &rc, err);
    assert_int_equal(rc, KL_ERR_CLOSED);
    assert_null(b);
    assert_non_null(strstr(err, "job live belongs to another client key"));
    kl_port_fleet_t *a = fx_port_as(&h, &k, "alice", "live", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_destroy(&a);
    fx_head_stop(&h);
    free(alice);
    unlink(names);
    free(names);
    char *drained = kl_xasprintf("%s/drained", sdir);
    unlink(drained);
    free(drained);
    rmdir(sdir);
    fx_keys_free(&k);
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
    fx_raw_send(c, &env);
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
    fx_raw_send(c, &env);
}

/* Drain and undrain only from an operator key; a refusal changes nothing
 * (the agent stays undrained, --state keeps its file as it was). Status:
 * a client sees its own jobs, an operator every job; agents are listed
 * for all. An agent name belongs to the agent key that registered it. */
static void test_operators_and_agents(void **state)
{
    (void)state;
    fx_keys_t k;
    fx_keys_make(&k);
    char sdir[512], err[KL_ERRMSG_LEN], why[KL_ERRMSG_LEN] = "";
    assert_non_null(kl_test_mkdtemp(sdir, sizeof sdir, "kl-serve-ops-XXXXXX"));
    char *drained = kl_xasprintf("%s/drained", sdir);
    fx_head_t h;
    fx_head_start_keys(
        &h, &k, (kl_serve_config_t){.state_dir = sdir, .name_hold_s = 0.8});
    /* Agent "box" of key ag1 joins; ag2 may not take its name, live or
     * for the hold after it leaves; ag1 may come back. */
    kl_net_t *ag1 = fx_raw_as(kl_serve_agents_endpoint(h.s), &k, "ag1");
    kl_net_t *ag2 = fx_raw_as(kl_serve_agents_endpoint(h.s), &k, "ag2");
    assert_true(s_agent_joins(ag1, "box", why, sizeof why));
    assert_false(s_agent_joins(ag2, "box", why, sizeof why));
    assert_non_null(strstr(why, "agent name box is taken"));
    assert_true(s_agent_joins(ag2, "box2", why, sizeof why));

    int rc;
    kl_port_fleet_t *ja = fx_port_as(&h, &k, "alice", "ja", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_t *jb = fx_port_as(&h, &k, "bob", "jb", &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_t *op = fx_port_as(&h, &k, "op", NULL, &rc, err);
    assert_int_equal(rc, KL_OK);
    kl_port_fleet_t *qb = fx_port_as(&h, &k, "bob", NULL, &rc, err);
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
    char *text = fx_slurp(drained);
    assert_string_equal(text, "");
    free(text);
    /* The operator's drain works and is kept; so is its undrain. */
    assert_int_equal(kl_port_fleet_drain(op, "box", false, &n, 5000, err),
                     KL_OK);
    assert_int_equal(n, 1);
    text = fx_slurp(drained);
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
    text = fx_slurp(drained);
    assert_string_equal(text, "box\n");
    free(text);
    assert_int_equal(kl_port_fleet_drain(op, "box", true, &n, 5000, err),
                     KL_OK);
    text = fx_slurp(drained);
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
    fx_head_stop(&h);
    unlink(drained);
    free(drained);
    rmdir(sdir);
    fx_keys_free(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_name_bound),
        cmocka_unit_test(test_names_kept),
        cmocka_unit_test(test_operators_and_agents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
