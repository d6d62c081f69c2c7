/* Unit tests of coordinator/dispatch's bookkeeping (kl_dispatch_core): target
 * matching, batch checks, credit, idempotence, loss, retries, deadlines and
 * cancellation, driven with a synthetic clock. The fleet behaviour over real
 * sockets and processes is covered by tests/integration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zmq.h>

#include "kl_dispatch.h"
#include "kl_dispatch_core.h"
#include "kl_err.h"
#include "kl_net.h"
#include "kl_util.h"

/* ---- helpers ---- */

#define MAXC 64

typedef struct {
    Kiln__Candidate c[MAXC];
    Kiln__Candidate *p[MAXC];
    char src[MAXC][48];
    uint8_t key[16];
    Kiln__Evaluator ev;
    kl_dispatch_batch_t b;
} s_batch_t;

static void s_batch(s_batch_t *sb, const char *target, size_t n,
                    uint32_t timeout_ms)
{
    memset(sb, 0, sizeof *sb);
    for (size_t i = 0; i < n; i++) {
        kiln__candidate__init(&sb->c[i]);
        snprintf(sb->src[i], sizeof sb->src[i], "void kernel() {} // %zu", i);
        sb->c[i].id = 1000 + i;
        sb->c[i].source = sb->src[i];
        sb->c[i].entry = "kernel";
        sb->p[i] = &sb->c[i];
    }
    kiln__evaluator__init(&sb->ev);
    sb->ev.timeout_ms = timeout_ms;
    sb->b.workload_key = sb->key;
    sb->b.target = target;
    sb->b.evaluator = &sb->ev;
    sb->b.candidates = sb->p;
    sb->b.n_candidates = n;
}

static void s_submit(kl_dcore_t *core, s_batch_t *sb, uint64_t id, double now)
{
    kl_dreq_t *req;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dreq_new(&req, &sb->b, err), KL_OK);
    req->id = id;
    kl_dcore_submit(core, &req, now);
    assert_null(req);
}

static int s_hello_feat(kl_dcore_t *core, uint8_t peer_id, const char *name,
                        const char *target, uint32_t slots, double now,
                        bool simulated, const char *feature);

static int s_hello_sim(kl_dcore_t *core, uint8_t peer_id, const char *name,
                       const char *target, uint32_t slots, double now,
                       bool simulated)
{
    return s_hello_feat(core, peer_id, name, target, slots, now, simulated,
                        NULL);
}

/* A Hello of one device listing feature (NULL: none). */
static int s_hello_feat(kl_dcore_t *core, uint8_t peer_id, const char *name,
                        const char *target, uint32_t slots, double now,
                        bool simulated, const char *feature)
{
    kl_peer_t peer = {.len = 5};
    peer.id[4] = peer_id;
    Kiln__DeviceInfo dev = KILN__DEVICE_INFO__INIT;
    Kiln__DeviceInfo *devs[1] = {&dev};
    dev.kind = "cpu";
    dev.name = "test cpu";
    dev.target = (char *)target;
    dev.simulated = simulated;
    char *feats[1] = {(char *)feature};
    dev.n_features = feature ? 1 : 0;
    dev.features = feats;
    Kiln__Hello h = KILN__HELLO__INIT;
    h.agent_name = (char *)name;
    h.hostname = "localhost";
    h.build_slots = slots;
    h.n_devices = 1;
    h.devices = devs;
    char err[KL_ERRMSG_LEN];
    return kl_dcore_hello(core, &peer, &h, now, err);
}

static int s_hello(kl_dcore_t *core, uint8_t peer_id, const char *name,
                   const char *target, uint32_t slots, double now)
{
    return s_hello_sim(core, peer_id, name, target, slots, now, false);
}

/* What the core asked to send: (slot, request, candidate index). */
typedef struct {
    int slot[1024];
    uint64_t req[1024];
    uint32_t idx[1024];
    size_t n, messages;
    int fail_slot;
    int fail_rc;
} s_sent_t;

static int s_capture(void *arg, const kl_dpick_t *p)
{
    s_sent_t *s = arg;
    if (p->slot == s->fail_slot)
        return s->fail_rc ? s->fail_rc : -1;
    s->messages++;
    for (size_t i = 0; i < p->n; i++) {
        s->slot[s->n] = p->slot;
        s->req[s->n] = p->req->id;
        s->idx[s->n++] = p->idx[i];
    }
    return 0;
}

/* An envelope as kl_net_recv would hand it (decoded from bytes). */
static Kiln__Envelope *s_result_env(uint64_t req, uint64_t cand, int status)
{
    Kiln__MeasureResult r = KILN__MEASURE_RESULT__INIT;
    double samples[3] = {1e-3, 1.1e-3, 0.9e-3};
    r.request_id = req;
    r.candidate_id = cand;
    r.status = (Kiln__Status)status;
    r.n_samples = 3;
    r.samples = samples;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.version_major = KL_PROTO_MAJOR;
    env.body_case = KILN__ENVELOPE__BODY_RESULT;
    env.result = &r;
    size_t len;
    void *buf = kl_net_encode(&env, &len);
    Kiln__Envelope *out = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_net_decode(buf, len, &out, err), KL_OK);
    free(buf);
    return out;
}

static size_t s_take(kl_dcore_t *core, kl_dispatch_result_t **keep, size_t max)
{
    size_t n;
    kl_dispatch_result_t **v = kl_dcore_take_results(core, &n);
    for (size_t i = 0; i < n; i++) {
        if (keep && i < max)
            keep[i] = v[i];
        else
            kl_dispatch_result_free(&v[i]);
    }
    free(v);
    return n;
}

/* ---- tests ---- */

static void test_target_match(void **state)
{
    (void)state;
    assert_true(kl_dispatch_target_match("cpu", "cpu/x86_64-avx512"));
    assert_true(kl_dispatch_target_match("cpu", "cpu/aarch64"));
    assert_true(kl_dispatch_target_match("cpu/x86_64-avx2", "cpu/x86_64-avx2"));
    assert_false(
        kl_dispatch_target_match("cpu/x86_64-avx2", "cpu/x86_64-avx512"));
    assert_false(kl_dispatch_target_match("cpu", "cuda/sm_90"));
    assert_false(kl_dispatch_target_match("cpu", "cpux/foo"));
    assert_false(kl_dispatch_target_match("cuda/sm_80", "cuda/sm_90"));
    assert_true(kl_dispatch_target_match("cuda", "cuda/sm_90"));
    /* A simulated device serves its own target only, never the real one
     * nor a bare kind (kl_target.h). */
    assert_false(kl_dispatch_target_match("cpu", "sim/cpu/x86_64-avx512"));
    assert_false(
        kl_dispatch_target_match("cpu/x86_64-avx512", "sim/cpu/x86_64-avx512"));
    assert_false(kl_dispatch_target_match("cuda", "sim/cuda/sm_90"));
    assert_true(kl_dispatch_target_match("sim/cpu/x86_64-avx512",
                                         "sim/cpu/x86_64-avx512"));
    assert_false(
        kl_dispatch_target_match("sim/cpu/x86_64-avx512", "cpu/x86_64-avx512"));
    assert_true(kl_dispatch_target_match("sim/cpu", "sim/cpu/x86_64-avx512"));
    assert_false(kl_dispatch_target_match("sim/cpu", "cpu/x86_64-avx512"));
    assert_false(kl_dispatch_target_match("sim/", "sim/cpu/x86_64-avx512"));
    assert_false(kl_dispatch_target_match("", "cpu/x86_64"));
    assert_false(kl_dispatch_target_match(NULL, "cpu/x86_64"));
}

/* A task refined by a feature goes only to devices listing it, under the
 * device's own (unrefined) target; an unrefined task goes to every device
 * of its target, with or without features. */
static void test_feature_match(void **state)
{
    (void)state;
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                         "cpu/x86_64-avx512", "vnni"));
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                         "cpu/x86_64-avx512", "avxvnni,vnni"));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                          "cpu/x86_64-avx512", ""));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                          "cpu/x86_64-avx512", NULL));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                          "cpu/x86_64-avx512", "avxvnni"));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                          "cpu/x86_64-avx2", "vnni"));
    assert_false(kl_dispatch_target_match("cpu/x86_64-avx512+vnni",
                                          "cpu/x86_64-avx512"));
    /* A device's target never carries features itself. */
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                          "cpu/x86_64-avx512+vnni", "vnni"));
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx2+avxvnni",
                                         "cpu/x86_64-avx2", "avxvnni"));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx2+avxvnni",
                                          "cpu/x86_64-avx2", "vnni"));
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx512",
                                         "cpu/x86_64-avx512", "vnni"));
    assert_true(
        kl_dispatch_device_match("cpu/x86_64-avx512", "cpu/x86_64-avx512", ""));
    assert_true(kl_dispatch_device_match("cpu", "cpu/x86_64-avx512", "vnni"));
    assert_true(kl_dispatch_device_match("sim/cpu/x86_64-avx512+vnni",
                                         "sim/cpu/x86_64-avx512", "vnni"));
    assert_false(kl_dispatch_device_match("sim/cpu/x86_64-avx512+vnni",
                                          "cpu/x86_64-avx512", "vnni"));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+vnni",
                                          "sim/cpu/x86_64-avx512", "vnni"));
    /* The matrix units: a device without bf16 never serves a +bf16 task,
     * one without AMX never a +amx one (bf16 or int8). */
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx512+bf16",
                                         "cpu/x86_64-avx512", "vnni,bf16"));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+bf16",
                                          "cpu/x86_64-avx512", "vnni"));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+bf16+amx",
                                          "cpu/x86_64-avx512", "vnni,bf16"));
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx512+bf16+amx",
                                         "cpu/x86_64-avx512", "vnni,bf16,amx"));
    assert_false(kl_dispatch_device_match("cpu/x86_64-avx512+vnni+amx",
                                          "cpu/x86_64-avx512", "vnni,bf16"));
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx512+vnni+amx",
                                         "cpu/x86_64-avx512", "vnni,bf16,amx"));
    assert_true(kl_dispatch_device_match("cpu/x86_64-avx512",
                                         "cpu/x86_64-avx512", "bf16,amx"));

    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 4, 1, 1, err), KL_OK);
    int plain =
        s_hello_feat(core, 1, "plain", "cpu/x86_64-avx512", 2, 0, false, NULL);
    int vnni =
        s_hello_feat(core, 2, "vnni", "cpu/x86_64-avx512", 2, 0, false, "vnni");
    int sim = s_hello_feat(core, 3, "sim", "sim/cpu/x86_64-avx512", 2, 0, true,
                           "vnni");
    assert_true(plain >= 0 && vnni >= 0 && sim >= 0);
    assert_int_equal(kl_dcore_agents(core, "cpu/x86_64-avx512+vnni"), 1);
    assert_int_equal(kl_dcore_agents(core, "cpu/x86_64-avx512"), 2);
    assert_int_equal(kl_dcore_agents(core, "cpu"), 2);
    assert_int_equal(kl_dcore_agents(core, "sim/cpu/x86_64-avx512+vnni"), 1);
    assert_int_equal(kl_dcore_agents(core, "cpu/x86_64-avx2+avxvnni"), 0);
    /* 6 integer candidates: the VNNI agent takes its credit (3), the
     * other one with free credit takes none. */
    s_batch_t sb;
    s_batch(&sb, "cpu/x86_64-avx512+vnni", 6, 1000);
    s_submit(core, &sb, 1, 0);
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0.1, s_capture, &sent), 3);
    assert_int_equal(sent.n, 3);
    for (size_t i = 0; i < sent.n; i++)
        assert_int_equal(sent.slot[i], vnni);
    /* f32 work for the same target goes to the plain agent too. */
    s_batch_t f32;
    s_batch(&f32, "cpu/x86_64-avx512", 2, 1000);
    s_submit(core, &f32, 2, 0);
    s_sent_t sent2 = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0.2, s_capture, &sent2), 2);
    assert_int_equal(sent2.n, 2);
    for (size_t i = 0; i < sent2.n; i++)
        assert_int_equal(sent2.slot[i], plain);
    /* The agent list carries the features. */
    size_t n = 0;
    kl_dispatch_agent_info_t *v = kl_dcore_agent_list(core, 0.2, &n);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(v[i].device_features[0],
                            strcmp(v[i].name, "plain") ? "vnni" : "");
    free(v);
    kl_dcore_destroy(&core);
}

/* A device that says it simulates serves its simulated target only, even
 * when (as agents before simulated targets did) it names the real one. */
static void test_simulated_device(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1, 1, err), KL_OK);
    s_batch_t sb;
    s_batch(&sb, "cpu/x86_64-avx512", 4, 1000);
    s_submit(core, &sb, 1, 0);
    assert_true(s_hello_sim(core, 1, "old", "cpu/x86_64-avx512", 2, 0, true) >=
                0);
    assert_true(
        s_hello_sim(core, 2, "new", "sim/cpu/x86_64-avx512", 2, 0, true) >= 0);
    assert_int_equal(kl_dcore_agents(core, "cpu"), 0);
    assert_int_equal(kl_dcore_agents(core, "cpu/x86_64-avx512"), 0);
    assert_int_equal(kl_dcore_agents(core, "sim/cpu/x86_64-avx512"), 2);
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0.5, s_capture, &sent), 0);
    kl_dcore_destroy(&core);
}

static void test_batch_checks(void **state)
{
    (void)state;
    s_batch_t sb;
    kl_dreq_t *req = NULL;
    char err[KL_ERRMSG_LEN];
    s_batch(&sb, "cpu", 3, 0);
    sb.c[2].id = sb.c[0].id;
    assert_int_equal(kl_dreq_new(&req, &sb.b, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "given twice"));
    s_batch(&sb, "cpu", 3, 0);
    sb.c[1].source = "";
    assert_int_equal(kl_dreq_new(&req, &sb.b, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "candidate 1 has no source"));
    s_batch(&sb, "", 3, 0);
    assert_int_equal(kl_dreq_new(&req, &sb.b, err), KL_ERR_INVAL);
    s_batch(&sb, "cpu", 0, 0);
    assert_int_equal(kl_dreq_new(&req, &sb.b, err), KL_ERR_INVAL);
    s_batch(&sb, "cpu", 3, 2000);
    assert_int_equal(kl_dreq_new(&req, &sb.b, err), KL_OK);
    /* A deep copy: wire ids are indices, the caller's ids are kept. */
    sb.src[1][0] = 'X';
    assert_string_equal(req->cands[1].source, "void kernel() {} // 1");
    assert_int_equal(req->cands[2].id, 2);
    assert_int_equal(req->user_ids[2], 1002);
    assert_true(req->run_s == 2.0);
    kl_dreq_free(&req);
    assert_null(req);
}

static void test_credit_and_targets(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1, 1, err), KL_OK);
    s_batch_t sb;
    s_batch(&sb, "cpu", 10, 1000);
    s_submit(core, &sb, 1, 0);
    s_batch_t gpu;
    s_batch(&gpu, "cuda/sm_90", 2, 1000);
    s_submit(core, &gpu, 2, 0);
    int a = s_hello(core, 1, "a", "cpu/x86_64-avx512", 2, 0); /* credit 3 */
    int b = s_hello(core, 2, "b", "cpu/x86_64-avx2", 0, 0);   /* credit 1 */
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(kl_dcore_agents(core, "cpu"), 2);
    assert_int_equal(kl_dcore_agents(core, "cuda/sm_90"), 0);
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0.5, s_capture, &sent), 4);
    size_t on_a = 0, on_b = 0;
    for (size_t i = 0; i < sent.n; i++) {
        assert_int_equal(sent.req[i], 1); /* no cpu agent gets cuda work */
        on_a += sent.slot[i] == a;
        on_b += sent.slot[i] == b;
    }
    assert_int_equal(on_a, 3);
    assert_int_equal(on_b, 1);
    /* Agent a's three candidates went in one message. */
    assert_int_equal(sent.messages, 2);
    kl_dispatch_stats_t st;
    kl_dcore_stats(core, &st);
    assert_int_equal(st.queued, 8);
    assert_int_equal(st.in_flight, 4);
    assert_true(st.latency_p50_s > 0.49 && st.latency_p50_s < 0.51);
    /* No credit left: nothing more is sent. */
    memset(&sent, 0, sizeof sent);
    sent.fail_slot = -1;
    assert_int_equal(kl_dcore_dispatch(core, 1, s_capture, &sent), 0);
    /* One answer from b frees one credit on b. */
    kl_dagent_t *ab = kl_dcore_agent(core, b);
    uint32_t held = ab->held[0].idx;
    Kiln__Envelope *env = s_result_env(1, held, 0);
    assert_true(kl_dcore_result(core, b, &env, 1.5));
    assert_null(env);
    assert_int_equal(kl_dcore_dispatch(core, 1.5, s_capture, &sent), 1);
    assert_int_equal(sent.slot[0], b);
    kl_dispatch_result_t *r[4];
    assert_int_equal(s_take(core, r, 4), 1);
    assert_int_equal(r[0]->candidate_id, 1000 + held);
    assert_int_equal(r[0]->result->candidate_id, 1000 + held);
    assert_string_equal(r[0]->agent, "b");
    assert_string_equal(r[0]->device_target, "cpu/x86_64-avx2");
    assert_int_equal(r[0]->attempts, 1);
    kl_dispatch_result_free(&r[0]);
    kl_dcore_destroy(&core);
    assert_null(core);
}

/* An agent of protocol 1.3 reads no u8 / s8 argument: an integer request
 * waits for a 1.4+ agent while a float one goes to either. */
static void test_old_agent_no_int(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1, 1, err), KL_OK);
    Kiln__KernelArg x = KILN__KERNEL_ARG__INIT, *args[1] = {&x};
    x.name = "X";
    x.dtype = KILN__DTYPE__DTYPE_U8;
    s_batch_t q;
    s_batch(&q, "cpu", 2, 1000);
    q.b.args = args;
    q.b.n_args = 1;
    s_submit(core, &q, 1, 0);
    int old = s_hello(core, 1, "old", "cpu/x86_64-avx512", 3, 0);
    assert_true(old >= 0);
    kl_dcore_agent(core, old)->minor = 3;
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0.5, s_capture, &sent), 0);
    /* A float request behind it in another queue does reach it. */
    s_batch_t f;
    s_batch(&f, "cpu/x86_64-avx512", 2, 1000);
    s_submit(core, &f, 2, 0.6);
    assert_int_equal(kl_dcore_dispatch(core, 0.7, s_capture, &sent), 2);
    for (size_t i = 0; i < sent.n; i++)
        assert_int_equal(sent.req[i], 2);
    int cur = s_hello(core, 2, "new", "cpu/x86_64-avx512", 3, 1);
    memset(&sent, 0, sizeof sent);
    sent.fail_slot = -1;
    assert_int_equal(kl_dcore_dispatch(core, 1, s_capture, &sent), 2);
    for (size_t i = 0; i < sent.n; i++) {
        assert_int_equal(sent.req[i], 1);
        assert_int_equal(sent.slot[i], cur);
    }
    kl_dcore_destroy(&core);
}

/* A drained agent finishes what it holds and gets no more; its answers
 * count as results (and failures) in the agent list; undrain resumes. */
static void test_drain_and_agent_list(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1, 1, err), KL_OK);
    s_batch_t sb;
    s_batch(&sb, "cpu", 6, 1000);
    s_submit(core, &sb, 1, 0);
    assert_int_equal(kl_dcore_agents_gen(core), 0);
    int a = s_hello(core, 1, "a", "cpu/x86_64-avx512", 1, 0); /* credit 2 */
    int b = s_hello(core, 2, "b", "cpu/x86_64-avx512", 1, 0);
    /* The agent list changes with each join, drain and loss only. */
    uint64_t gen = kl_dcore_agents_gen(core);
    assert_int_equal(gen, 2);
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0.1, s_capture, &sent), 4);
    assert_int_equal(kl_dcore_agents_gen(core), gen);
    assert_int_equal(kl_dcore_drain(core, "a", true), 1);
    assert_int_equal(kl_dcore_agents_gen(core), gen + 1);
    assert_int_equal(kl_dcore_drain(core, "a", true), 1);
    assert_int_equal(kl_dcore_drain(core, "nobody", true), 0);
    assert_int_equal(kl_dcore_agents_gen(core), gen + 1);
    /* a answers both (one a failure): it gets nothing new; b does. */
    kl_dagent_t *aa = kl_dcore_agent(core, a);
    uint32_t h0 = aa->held[0].idx, h1 = aa->held[1].idx;
    Kiln__Envelope *env = s_result_env(1, h0, 0);
    assert_true(kl_dcore_result(core, a, &env, 0.2));
    env = s_result_env(1, h1, KILN__STATUS__STATUS_COMPILE_ERROR);
    assert_true(kl_dcore_result(core, a, &env, 0.2));
    kl_dagent_t *ab = kl_dcore_agent(core, b);
    env = s_result_env(1, ab->held[0].idx, 0);
    assert_true(kl_dcore_result(core, b, &env, 0.2));
    memset(&sent, 0, sizeof sent);
    sent.fail_slot = -1;
    assert_int_equal(kl_dcore_dispatch(core, 0.3, s_capture, &sent), 1);
    assert_int_equal(sent.slot[0], b);
    size_t n = 0;
    kl_dispatch_agent_info_t *v = kl_dcore_agent_list(core, 1.0, &n);
    assert_int_equal(n, 2);
    const kl_dispatch_agent_info_t *ia = strcmp(v[0].name, "a") ? &v[1] : &v[0];
    assert_string_equal(ia->name, "a");
    assert_true(ia->drained);
    assert_int_equal(ia->busy, 0);
    assert_int_equal(ia->results, 2);
    assert_int_equal(ia->failures, 1);
    assert_int_equal(ia->credit, 2);
    assert_string_equal(ia->device_target[0], "cpu/x86_64-avx512");
    assert_true(ia->last_seen_s > 0.79 && ia->last_seen_s < 0.81);
    free(v);
    /* Undrained: a takes the rest. */
    assert_int_equal(kl_dcore_drain(core, "a", false), 1);
    assert_int_equal(kl_dcore_agents_gen(core), gen + 2);
    memset(&sent, 0, sizeof sent);
    sent.fail_slot = -1;
    assert_int_equal(kl_dcore_dispatch(core, 0.4, s_capture, &sent), 1);
    assert_int_equal(sent.slot[0], a);
    assert_int_equal(s_take(core, NULL, 0), 3);
    kl_dcore_agent_lost(core, b, 0.5, "test");
    assert_int_equal(kl_dcore_agents_gen(core), gen + 3);
    kl_dcore_destroy(&core);
}

static void test_idempotent_results(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1, 1, err), KL_OK);
    s_batch_t sb;
    s_batch(&sb, "cpu", 2, 1000);
    s_submit(core, &sb, 7, 0);
    int a = s_hello(core, 1, "a", "cpu/x86_64", 4, 0);
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0, s_capture, &sent), 2);
    Kiln__Envelope *env = s_result_env(7, 0, 0);
    assert_true(kl_dcore_result(core, a, &env, 1));
    env = s_result_env(7, 0, 4); /* the same candidate again */
    assert_false(kl_dcore_result(core, a, &env, 1));
    assert_null(env);
    env = s_result_env(7, 99, 0); /* a candidate that does not exist */
    assert_false(kl_dcore_result(core, a, &env, 1));
    env = s_result_env(8, 0, 0); /* a request that does not exist */
    assert_false(kl_dcore_result(core, a, &env, 1));
    env = s_result_env(7, 1, 4);
    assert_true(kl_dcore_result(core, a, &env, 1));
    /* The request is finished: a late duplicate is still dropped. */
    env = s_result_env(7, 1, 0);
    assert_false(kl_dcore_result(core, a, &env, 2));
    kl_dispatch_stats_t st;
    kl_dcore_stats(core, &st);
    assert_int_equal(st.results, 2);
    assert_int_equal(st.duplicates, 4);
    assert_int_equal(st.by_status[0], 1);
    assert_int_equal(st.by_status[4], 1);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(kl_dcore_agent(core, a)->n_held, 0);
    assert_int_equal(s_take(core, NULL, 0), 2);
    kl_dcore_destroy(&core);
}

static void test_lost_agent_retries(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 1, 1, 1, err), KL_OK); /* retries 1 */
    s_batch_t sb;
    s_batch(&sb, "cpu", 1, 1000);
    s_submit(core, &sb, 1, 0);
    s_sent_t sent = {.fail_slot = -1};
    /* First agent goes silent: its candidate is re-queued. */
    int a = s_hello(core, 1, "a", "cpu/x86_64", 0, 0);
    assert_int_equal(kl_dcore_dispatch(core, 0, s_capture, &sent), 1);
    kl_dcore_tick(core, 2.0, 3.0);
    assert_int_equal(kl_dcore_agents(core, NULL), 1);
    kl_dcore_tick(core, 3.5, 3.0);
    assert_int_equal(kl_dcore_agents(core, NULL), 0);
    kl_dispatch_stats_t st;
    kl_dcore_stats(core, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.resent, 1);
    assert_int_equal(st.agents_lost, 1);
    assert_int_equal(s_take(core, NULL, 0), 0);
    /* Second agent is lost too: retries exhausted -> AGENT_LOST. */
    int b = s_hello(core, 2, "b", "cpu/x86_64", 0, 4);
    assert_int_equal(kl_dcore_dispatch(core, 4, s_capture, &sent), 1);
    assert_int_equal(sent.slot[1], b);
    (void)a;
    kl_dcore_agent_lost(core, b, 5, "said Goodbye");
    kl_dispatch_result_t *r[2];
    assert_int_equal(s_take(core, r, 2), 1);
    assert_int_equal(r[0]->result->status, KILN__STATUS__STATUS_AGENT_LOST);
    assert_int_equal(r[0]->attempts, 2);
    assert_non_null(strstr(r[0]->result->error, "said Goodbye"));
    assert_string_equal(r[0]->agent, "");
    kl_dispatch_result_free(&r[0]);
    /* A late answer from the lost agent's peer id is just unknown now. */
    kl_peer_t peer = {.len = 5};
    peer.id[4] = 2;
    assert_int_equal(kl_dcore_find(core, &peer), -1);
    kl_dcore_destroy(&core);
}

static void test_deadline_and_send_failure(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1.0, 0.5, err), KL_OK);
    s_batch_t sb;
    s_batch(&sb, "cpu", 2, 1000); /* 1 s run + 1 s compile + 0.5 s margin */
    s_submit(core, &sb, 1, 0);
    int a = s_hello(core, 1, "a", "cpu/x86_64", 0, 0); /* credit 1 */
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0, s_capture, &sent), 1);
    kl_dcore_heard(core, a, 2.4);
    kl_dcore_tick(core, 2.4, 10);
    kl_dispatch_stats_t st;
    kl_dcore_stats(core, &st);
    assert_int_equal(st.resent, 0);
    kl_dcore_heard(core, a, 2.6);
    kl_dcore_tick(core, 2.6, 10);
    kl_dcore_stats(core, &st);
    assert_int_equal(st.resent, 1);
    assert_int_equal(st.queued, 2);
    /* The stuck agent keeps its credit consumed: it gets nothing more. */
    assert_int_equal(kl_dcore_dispatch(core, 2.6, s_capture, &sent), 0);
    /* Its late answer is still accepted once, and frees the credit. */
    Kiln__Envelope *env = s_result_env(1, sent.idx[0], 0);
    assert_true(kl_dcore_result(core, a, &env, 3));
    assert_int_equal(kl_dcore_agent(core, a)->n_held, 0);
    /* A send that fails declares the agent lost and re-queues. */
    kl_dcore_agent_lost(core, a, 3, "stopped");
    int b = s_hello(core, 2, "b", "cpu/x86_64", 0, 3);
    sent.fail_slot = b;
    kl_dcore_dispatch(core, 3, s_capture, &sent);
    assert_false(kl_dcore_agent(core, b)->live);
    kl_dcore_stats(core, &st);
    assert_int_equal(st.queued + st.results, 2);
    assert_int_equal(st.results, 1);
    assert_int_equal(s_take(core, NULL, 0), 1);
    kl_dcore_destroy(&core);
}

static void test_unsendable(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1, 1, err), KL_OK);
    s_batch_t sb;
    s_batch(&sb, "cpu", 3, 1000);
    s_submit(core, &sb, 1, 0);
    int a = s_hello(core, 1, "a", "cpu/x86_64", 0, 0); /* credit 1 */
    /* kl_net refuses the message itself: INVALID, the agent stays. */
    s_sent_t sent = {.fail_slot = a, .fail_rc = KL_ERR_PROTO};
    assert_int_equal(kl_dcore_dispatch(core, 0, s_capture, &sent), 0);
    kl_dispatch_result_t *r[4];
    assert_int_equal(s_take(core, r, 4), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i]->result->status, KILN__STATUS__STATUS_INVALID);
        kl_dispatch_result_free(&r[i]);
    }
    assert_true(kl_dcore_agent(core, a)->live);
    assert_int_equal(kl_dcore_agent(core, a)->n_held, 0);
    kl_dispatch_stats_t st;
    kl_dcore_stats(core, &st);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.agents_lost, 0);
    kl_dcore_destroy(&core);
}

static void test_cancel_and_rehello(void **state)
{
    (void)state;
    kl_dcore_t *core;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_dcore_new(&core, 2, 1, 1, err), KL_OK);
    s_batch_t sb;
    s_batch(&sb, "cpu", 5, 1000);
    s_submit(core, &sb, 3, 0);
    int a = s_hello(core, 1, "a", "cpu/x86_64", 1, 0); /* credit 2 */
    s_sent_t sent = {.fail_slot = -1};
    assert_int_equal(kl_dcore_dispatch(core, 0, s_capture, &sent), 2);
    int slots[4];
    size_t n;
    assert_int_equal(kl_dcore_cancel(core, 3, slots, 4, &n), KL_OK);
    assert_int_equal(n, 1);
    assert_int_equal(slots[0], a);
    kl_dispatch_result_t *r[8];
    assert_int_equal(s_take(core, r, 8), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i]->result->status, KILN__STATUS__STATUS_CANCELLED);
        kl_dispatch_result_free(&r[i]);
    }
    /* The agent answers its two as CANCELLED; the request then ends. */
    for (size_t i = 0; i < 2; i++) {
        Kiln__Envelope *env = s_result_env(3, sent.idx[i], 6);
        assert_true(kl_dcore_result(core, a, &env, 1));
    }
    assert_int_equal(kl_dcore_cancel(core, 3, slots, 4, &n), KL_ERR_NOTFOUND);
    assert_int_equal(s_take(core, NULL, 0), 2);
    /* Hello again from the same peer: held work is re-queued. */
    s_batch(&sb, "cpu", 2, 1000);
    s_submit(core, &sb, 4, 1);
    assert_int_equal(kl_dcore_dispatch(core, 1, s_capture, &sent), 2);
    assert_int_equal(s_hello(core, 1, "a", "cpu/x86_64", 1, 2), a);
    kl_dispatch_stats_t st;
    kl_dcore_stats(core, &st);
    assert_int_equal(st.queued, 2);
    assert_int_equal(st.agents, 1);
    assert_int_equal(kl_dcore_agent(core, a)->n_held, 0);
    kl_dcore_destroy(&core);
}

/* The actor through its API, with no agent connected: binding, errors,
 * queueing, cancel and stats over the inproc pipes. */
static void test_actor_api(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_dispatch_t *d = NULL;
    kl_dispatch_config_t cfg = {.endpoint = "tcp://127.0.0.1:*", .retries = -1};
    /* Neither keys nor --insecure: refused, with a reason. */
    assert_int_equal(kl_dispatch_new(&d, &cfg, err), KL_ERR_INVAL);
    assert_null(d);
    assert_true(strlen(err) > 10);
    cfg.security.insecure = true;
    cfg.heartbeat_ms = 100;
    assert_int_equal(kl_dispatch_new(&d, &cfg, err), KL_OK);
    assert_non_null(strstr(kl_dispatch_endpoint(d), "tcp://127.0.0.1:"));
    assert_null(strstr(kl_dispatch_endpoint(d), "*"));
    s_batch_t sb;
    s_batch(&sb, "cpu", 0, 0);
    uint64_t id = 0;
    assert_int_equal(kl_dispatch_submit(d, &sb.b, &id, err), KL_ERR_INVAL);
    s_batch(&sb, "cpu", 5, 1000);
    assert_int_equal(kl_dispatch_submit(d, &sb.b, &id, err), KL_OK);
    assert_true(id > 0);
    size_t n = 99;
    assert_int_equal(kl_dispatch_agents(d, "cpu", &n, err), KL_OK);
    assert_int_equal(n, 0);
    kl_dispatch_result_t *r = NULL;
    assert_int_equal(kl_dispatch_recv(d, &r, 50, err), KL_ERR_TIMEOUT);
    kl_dispatch_stats_t st;
    assert_int_equal(kl_dispatch_stats(d, &st, err), KL_OK);
    assert_int_equal(st.queued, 5);
    assert_int_equal(st.submitted, 5);
    assert_int_equal(kl_dispatch_agents_gen(d), 0);
    assert_int_equal(kl_dispatch_cancel(d, id, err), KL_OK);
    assert_int_equal(kl_dispatch_cancel(d, id + 7, err), KL_ERR_NOTFOUND);
    /* The five CANCELLED results wake a poll on dispatch's socket. */
    zmq_pollitem_t it = {kl_dispatch_socket(d), 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&it, 1, 2000), 1);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(kl_dispatch_recv(d, &r, 2000, err), KL_OK);
        assert_int_equal(r->result->status, KILN__STATUS__STATUS_CANCELLED);
        assert_int_equal(r->candidate_id, 1000 + r->index);
        kl_dispatch_result_free(&r);
    }
    assert_int_equal(kl_dispatch_stats(d, &st, err), KL_OK);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.by_status[KILN__STATUS__STATUS_CANCELLED], 5);
    /* Results not taken are freed by destroy (ASan checks). */
    assert_int_equal(kl_dispatch_submit(d, &sb.b, &id, err), KL_OK);
    assert_int_equal(kl_dispatch_cancel(d, id, err), KL_OK);
    kl_dispatch_destroy(&d);
    assert_null(d);
    /* A second coordinator on a taken port fails with the bind error. */
    kl_dispatch_t *d1 = NULL, *d2 = NULL;
    assert_int_equal(kl_dispatch_new(&d1, &cfg, err), KL_OK);
    cfg.endpoint = kl_dispatch_endpoint(d1);
    assert_int_not_equal(kl_dispatch_new(&d2, &cfg, err), KL_OK);
    assert_non_null(strstr(err, "bind"));
    kl_dispatch_destroy(&d1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_match),
        cmocka_unit_test(test_batch_checks),
        cmocka_unit_test(test_simulated_device),
        cmocka_unit_test(test_feature_match),
        cmocka_unit_test(test_credit_and_targets),
        cmocka_unit_test(test_old_agent_no_int),
        cmocka_unit_test(test_drain_and_agent_list),
        cmocka_unit_test(test_idempotent_results),
        cmocka_unit_test(test_lost_agent_retries),
        cmocka_unit_test(test_deadline_and_send_failure),
        cmocka_unit_test(test_unsendable),
        cmocka_unit_test(test_cancel_and_rehello),
        cmocka_unit_test(test_actor_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
