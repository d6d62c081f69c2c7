/* Unit tests of the kiln-agent actor (agent/agent.c, kla_agent.h) against
 * a fake coordinator, a real kl_net ROUTER in this process (insecure,
 * tcp://127.0.0.1:*; tests/support/coord_fx.h): Hello/Welcome, a request
 * of three candidates (good, segfault, wrong), cancel, goodbye and
 * --simulate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_net.h"
#include "kl_util.h"
#include "kla_agent.h"
#include "kla_device.h"
#include "coord_fx.h"

/* Heartbeat of the agents that build and run (3 s of silence make a
 * peer dead: room for a loaded machine), and of those that only talk. */
#define HB_SLOW_MS 1000
#define HB_MS 200

static const char *s_ref =
    "void ref(void *const *args) {\n"
    "  const float *A = args[0], *B = args[1]; float *C = args[2];\n"
    "  for (int i = 0; i < 64; i++)\n"
    "    for (int j = 0; j < 64; j++) {\n"
    "      float s = 0;\n"
    "      for (int k = 0; k < 64; k++) s += A[i*64+k] * B[k*64+j];\n"
    "      C[i*64+j] = s;\n"
    "    }\n"
    "}\n";

static char *s_cand(const char *pre, const char *post)
{
    return kl_xasprintf(
        "void mm(void *const *args) {\n"
        "  const float *A = args[0], *B = args[1]; float *C = args[2];\n"
        "  %s\n"
        "  for (int i = 0; i < 64; i++)\n"
        "    for (int k = 0; k < 64; k++) {\n"
        "      if (k == 0) for (int j = 0; j < 64; j++) C[i*64+j] = 0;\n"
        "      for (int j = 0; j < 64; j++) C[i*64+j] += A[i*64+k] * "
        "B[k*64+j]%s;\n"
        "    }\n"
        "}\n",
        pre, post);
}

static void s_start_cores(fx_coord_t *c, kla_agent_t **agent, bool simulate,
                          const char *measure, const char *build)
{
    char err[KL_ERRMSG_LEN];
    assert_int_equal(fx_coord_new(c, simulate ? HB_MS : HB_SLOW_MS, err),
                     KL_OK);
    kla_agent_config_t cfg = {.endpoint = fx_coord_endpoint(c),
                              .sec = {.insecure = true},
                              .name = "test-agent",
                              .build_slots = 2,
                              .cflags = "-O2",
                              .simulate = simulate,
                              .heartbeat_ms = c->hb_ms,
                              .measure_cores = measure,
                              .build_cores = build,
                              .max_mem_mb = 2048};
    assert_int_equal(kla_agent_new(agent, &cfg, err), KL_OK);
    Kiln__Envelope *env = fx_coord_expect(c, KILN__ENVELOPE__BODY_HELLO, 10);
    assert_non_null(env);
    Kiln__Hello *h = env->hello;
    assert_string_equal(h->agent_name, "test-agent");
    assert_int_equal(h->build_slots, 2);
    assert_int_equal(h->n_devices, 1);
    assert_string_equal(h->devices[0]->kind, "cpu");
    /* A simulated agent never claims the real device (kl_target.h). */
    char want[64];
    snprintf(want, sizeof want, "%s%s", simulate ? "sim/" : "",
             kla_device_target());
    assert_string_equal(h->devices[0]->target, want);
    snprintf(c->target, sizeof c->target, "%s", h->devices[0]->target);
    assert_true(h->devices[0]->cores >= 1);
    assert_true(h->devices[0]->n_measure_cores >= 1);
    assert_true(h->devices[0]->simulated == simulate);
    if (measure) {
        kla_cores_t m;
        assert_int_equal(kla_cores_parse(measure, &m, err), KL_OK);
        assert_int_equal(h->devices[0]->n_measure_cores, m.n);
        for (int i = 0; i < m.n; i++)
            assert_int_equal(h->devices[0]->measure_cores[i], m.cpu[i]);
    }
    kl_net_envelope_free(&env);
    assert_int_equal(fx_coord_welcome(c, "test"), KL_OK);
}

static void s_start(fx_coord_t *c, kla_agent_t **agent, bool simulate)
{
    s_start_cores(c, agent, simulate, NULL, NULL);
}

static void s_stop(fx_coord_t *c, kla_agent_t **agent)
{
    kla_agent_destroy(agent);
    assert_null(*agent);
    /* The agent said Goodbye on its way out. */
    Kiln__Envelope *env = fx_coord_expect(c, KILN__ENVELOPE__BODY_GOODBYE, 5);
    assert_non_null(env);
    kl_net_envelope_free(&env);
    fx_coord_destroy(c);
}

/* Sends a 64x64 matmul request with n candidates (sources given). */
static void s_request(fx_coord_t *c, uint64_t id, char **srcs, int n)
{
    int64_t shape[2] = {64, 64};
    Kiln__KernelArg a = KILN__KERNEL_ARG__INIT, b, o;
    a.name = "A";
    a.n_shape = 2;
    a.shape = shape;
    b = a;
    b.name = "B";
    o = a;
    o.name = "C";
    o.role = KILN__ARG_ROLE__ROLE_OUTPUT;
    Kiln__KernelArg *args[3] = {&a, &b, &o};
    Kiln__Evaluator ev = KILN__EVALUATOR__INIT;
    ev.number = 1;
    ev.repeat = 3;
    ev.timeout_ms = 5000;
    ev.seed = 3;
    Kiln__Candidate cs[16], *cp[16];
    for (int i = 0; i < n; i++) {
        cs[i] = (Kiln__Candidate)KILN__CANDIDATE__INIT;
        cs[i].id = (uint64_t)i + 1;
        cs[i].source = srcs[i];
        cs[i].entry = "mm";
        cp[i] = &cs[i];
    }
    uint8_t key[16] = {9};
    Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
    m.request_id = id;
    m.workload_key.data = key;
    m.workload_key.len = 16;
    m.target = c->target;
    m.n_args = 3;
    m.args = args;
    m.reference_source = (char *)s_ref;
    m.reference_entry = "ref";
    m.evaluator = &ev;
    m.n_candidates = (size_t)n;
    m.candidates = cp;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &m;
    assert_int_equal(fx_coord_send(c, &env), KL_OK);
}

static void test_hello_request_three_results(void **state)
{
    (void)state;
    fx_coord_t c;
    kla_agent_t *agent = NULL;
    s_start(&c, &agent, false);
    char *srcs[3] = {s_cand("", ""), s_cand("*(volatile int *)0 = 1;", ""),
                     s_cand("", " + 1.0f")};
    s_request(&c, 42, srcs, 3);
    Kiln__Status want[3] = {KILN__STATUS__STATUS_OK,
                            KILN__STATUS__STATUS_RUNTIME_ERROR,
                            KILN__STATUS__STATUS_WRONG_RESULT};
    bool seen[3] = {false};
    for (int i = 0; i < 3; i++) {
        Kiln__Envelope *env =
            fx_coord_expect(&c, KILN__ENVELOPE__BODY_RESULT, 30);
        assert_non_null(env);
        Kiln__MeasureResult *r = env->result;
        assert_int_equal(r->request_id, 42);
        assert_in_range(r->candidate_id, 1, 3);
        int k = (int)r->candidate_id - 1;
        assert_false(seen[k]);
        seen[k] = true;
        if (r->status != want[k])
            fprintf(stderr, "candidate %d: status %d: %s\n", k, r->status,
                    r->error);
        assert_int_equal(r->status, want[k]);
        assert_false(r->simulated);
        /* The agent's own time around the compile and the run: not a
         * speed limit, only a bound on nonsense (a wrong clock). */
        assert_true(r->overhead_s >= 0 && r->overhead_s < 30);
        if (k == 0) {
            assert_int_equal(r->n_samples, 3);
            assert_true(r->compile_s > 0);
            assert_true(r->spread >= 0);
        } else if (k == 1) {
            assert_string_equal(r->error, "killed by signal 11 (SIGSEGV)");
        } else {
            assert_true(r->max_abs_err > 0.9);
        }
        kl_net_envelope_free(&env);
    }
    kla_agent_stats_t st;
    kla_agent_stats(agent, &st);
    assert_int_equal(st.results, 3);
    assert_int_equal(st.requests, 1);
    for (int i = 0; i < 3; i++)
        free(srcs[i]);
    s_stop(&c, &agent);
}

/* Disjoint --measure-cores and --build-cores: builds run on their own
 * cores (no pause), the timed child on the measure cores. */
static void test_disjoint_cores(void **state)
{
    (void)state;
    kla_cores_t all;
    kla_cores_affinity(&all);
    if (all.n < 2)
        skip();
    char m[16], b[16];
    snprintf(m, sizeof m, "%d", all.cpu[0]);
    snprintf(b, sizeof b, "%d", all.cpu[1]);
    fx_coord_t c;
    kla_agent_t *agent = NULL;
    s_start_cores(&c, &agent, false, m, b);
    char *srcs[2] = {s_cand("", ""), s_cand("/* second */", "")};
    s_request(&c, 11, srcs, 2);
    for (int i = 0; i < 2; i++) {
        Kiln__Envelope *env =
            fx_coord_expect(&c, KILN__ENVELOPE__BODY_RESULT, 30);
        assert_non_null(env);
        assert_int_equal(env->result->status, KILN__STATUS__STATUS_OK);
        kl_net_envelope_free(&env);
    }
    free(srcs[0]);
    free(srcs[1]);
    s_stop(&c, &agent);
}

static void test_cancel_and_goodbye(void **state)
{
    (void)state;
    fx_coord_t c;
    kla_agent_t *agent = NULL;
    s_start(&c, &agent, false);
    char *srcs[8];
    for (int i = 0; i < 8; i++)
        srcs[i] = s_cand(i ? "/* variant */" : "", i % 2 ? " * 1.0f" : "");
    for (int i = 1; i < 8; i++) { /* distinct sources: real compiles */
        free(srcs[i]);
        char pre[64];
        snprintf(pre, sizeof pre, "volatile int v%d = %d; (void)v%d;", i, i, i);
        srcs[i] = s_cand(pre, "");
    }
    s_request(&c, 7, srcs, 8);
    Kiln__Cancel cancel = KILN__CANCEL__INIT;
    cancel.request_id = 7;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_CANCEL;
    env.cancel = &cancel;
    assert_int_equal(fx_coord_send(&c, &env), KL_OK);
    int cancelled = 0, done = 0;
    for (int i = 0; i < 8; i++) {
        Kiln__Envelope *r =
            fx_coord_expect(&c, KILN__ENVELOPE__BODY_RESULT, 30);
        assert_non_null(r);
        if (r->result->status == KILN__STATUS__STATUS_CANCELLED)
            cancelled++;
        else
            done++;
        kl_net_envelope_free(&r);
    }
    /* Every candidate answered exactly once; the two build slots had
     * started at most two (plus none on the runner yet). */
    assert_int_equal(cancelled + done, 8);
    assert_true(cancelled >= 5);

    /* A coordinator's Goodbye: the agent says Hello again. */
    Kiln__Goodbye g = KILN__GOODBYE__INIT;
    g.reason = "unknown agent, say Hello";
    Kiln__Envelope ge = KILN__ENVELOPE__INIT;
    ge.body_case = KILN__ENVELOPE__BODY_GOODBYE;
    ge.goodbye = &g;
    assert_int_equal(fx_coord_send(&c, &ge), KL_OK);
    Kiln__Envelope *h = fx_coord_expect(&c, KILN__ENVELOPE__BODY_HELLO, 5);
    assert_non_null(h);
    kl_net_envelope_free(&h);
    for (int i = 0; i < 8; i++)
        free(srcs[i]);
    s_stop(&c, &agent);
}

static void test_silence_means_hello(void **state)
{
    (void)state;
    fx_coord_t c;
    kla_agent_t *agent = NULL;
    s_start(&c, &agent, true);
    /* Say nothing for more than 3 intervals: the welcomed agent heartbeats,
     * then says Hello again. A Hello before its first heartbeat is an
     * earlier one, sent before the Welcome arrived (a slow s_start). */
    Kiln__Envelope *env = NULL;
    int heartbeats = 0;
    while (!env && kl_now_s() - c.welcomed_at < 30) { /* hang bound */
        kl_peer_t from;
        char err[KL_ERRMSG_LEN];
        if (kl_net_recv(c.server, &from, &env, 100, err) != KL_OK)
            continue;
        if (env->body_case == KILN__ENVELOPE__BODY_HEARTBEAT)
            heartbeats++;
        if (env->body_case != KILN__ENVELOPE__BODY_HELLO || heartbeats == 0)
            kl_net_envelope_free(&env);
    }
    assert_non_null(env);
    assert_true(heartbeats >= 1);
    /* Not before 3 silent intervals: the agent heard the Welcome after
     * welcomed_at, so this holds however slow the machine is. */
    assert_true(kl_now_s() - c.welcomed_at > 3 * HB_MS / 1000.0);
    kl_net_envelope_free(&env);
    s_stop(&c, &agent);
}

static void test_simulate_fast(void **state)
{
    (void)state;
    fx_coord_t c;
    kla_agent_t *agent = NULL;
    s_start(&c, &agent, true);
    char *srcs[16];
    for (int i = 0; i < 16; i++)
        srcs[i] = kl_xasprintf("void mm(void *const *a) { /* %d %s */ }", i,
                               i % 4 == 0 ? "KILN_SIMULATE_FAIL" : "");
    s_request(&c, 5, srcs, 16);
    int ok = 0, fail = 0;
    for (int i = 0; i < 16; i++) {
        Kiln__Envelope *r =
            fx_coord_expect(&c, KILN__ENVELOPE__BODY_RESULT, 30);
        assert_non_null(r);
        assert_true(r->result->simulated);
        if (r->result->status == KILN__STATUS__STATUS_OK) {
            ok++;
            assert_int_equal(r->result->n_samples, 3);
        } else {
            fail++;
        }
        kl_net_envelope_free(&r);
    }
    assert_int_equal(ok, 12);
    assert_int_equal(fail, 4);
    /* One request, every candidate answered once, none cancelled. */
    kla_agent_stats_t st;
    kla_agent_stats(agent, &st);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.results, 16);
    assert_int_equal(st.cancelled, 0);
    /* Welcomed: it heartbeats every HB_MS. */
    Kiln__Envelope *hb =
        fx_coord_expect(&c, KILN__ENVELOPE__BODY_HEARTBEAT, 1.0);
    assert_non_null(hb);
    kl_net_envelope_free(&hb);
    for (int i = 0; i < 16; i++)
        free(srcs[i]);
    s_stop(&c, &agent);
}

/* A simulated agent answers a request for the real target INVALID: fake
 * latencies never come back as measurements of a real device. */
static void test_simulate_refuses_real_target(void **state)
{
    (void)state;
    fx_coord_t c;
    kla_agent_t *agent = NULL;
    s_start(&c, &agent, true);
    snprintf(c.target, sizeof c.target, "%s", kla_device_target());
    char *srcs[2] = {kl_xstrdup("void mm(void *const *a) { (void)a; }"),
                     kl_xstrdup("void mm(void *const *a) { (void)a; } ")};
    s_request(&c, 6, srcs, 2);
    for (int i = 0; i < 2; i++) {
        Kiln__Envelope *r = fx_coord_expect(&c, KILN__ENVELOPE__BODY_RESULT, 5);
        assert_non_null(r);
        assert_int_equal(r->result->status, KILN__STATUS__STATUS_INVALID);
        assert_int_equal(r->result->n_samples, 0);
        assert_non_null(strstr(r->result->error, "simulates"));
        kl_net_envelope_free(&r);
    }
    for (int i = 0; i < 2; i++)
        free(srcs[i]);
    s_stop(&c, &agent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_request_three_results),
        cmocka_unit_test(test_disjoint_cores),
        cmocka_unit_test(test_cancel_and_goodbye),
        cmocka_unit_test(test_silence_means_hello),
        cmocka_unit_test(test_simulate_fast),
        cmocka_unit_test(test_simulate_refuses_real_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
