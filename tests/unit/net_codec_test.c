/* Unit tests of common/kl_net's codec (kl_net_codec.c): round trips of
 * every message, garbage that never crashes the decoder, and the bounds
 * on what a decoded message may hold. Sockets and key files are
 * net_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <math.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_net.h"
#include "kl_util.h"
#include "net_msgs.h"

/* Decodes buf and expects KL_ERR_PROTO with needle in the message. */
static void expect_proto(const void *buf, size_t len, const char *needle)
{
    char err[KL_ERRMSG_LEN] = "";
    Kiln__Envelope *env = (Kiln__Envelope *)1;
    assert_int_equal(kl_net_decode(buf, len, &env, err), KL_ERR_PROTO);
    assert_null(env);
    if (!strstr(err, needle))
        fail_msg("error '%s' does not name '%s'", err, needle);
}

static void expect_proto_env(Kiln__Envelope *e, const char *needle)
{
    size_t len;
    void *buf = kl_net_encode(e, &len);
    expect_proto(buf, len, needle);
    free(buf);
}

static void test_roundtrip_all(void **state)
{
    (void)state;
    msgs_t m;
    char err[KL_ERRMSG_LEN];
    for (size_t i = 0; i < N_ALL; i++) {
        net_fill(&m, net_all[i]);
        size_t len, len2;
        uint8_t *a = kl_net_encode(&m.env, &len);
        Kiln__Envelope *d = NULL;
        int rc = kl_net_decode(a, len, &d, err);
        if (rc != KL_OK)
            fail_msg("case %d: %s", (int)net_all[i], err);
        assert_int_equal(d->body_case, net_all[i]);
        assert_int_equal(d->version_major, KL_PROTO_MAJOR);
        /* protobuf-c packs fields in order: equal bytes, equal message. */
        uint8_t *b = kl_net_encode(d, &len2);
        assert_int_equal(len, len2);
        assert_memory_equal(a, b, len);
        free(a);
        free(b);
        switch (net_all[i]) {
        case KILN__ENVELOPE__BODY_HELLO:
            assert_int_equal(d->hello->n_devices, 2);
            assert_string_equal(d->hello->devices[1]->target, "cuda/sm_90");
            assert_int_equal(d->hello->devices[1]->measure_cores[2], 4);
            assert_int_equal(d->hello->devices[0]->mem_clock_mhz, 2619);
            break;
        case KILN__ENVELOPE__BODY_REQUEST:
            assert_int_equal(d->request->n_candidates, 2);
            assert_int_equal(d->request->candidates[1]->id, 1001);
            assert_int_equal(d->request->candidates[1]->grid[2], 12);
            assert_int_equal(d->request->args[2]->role,
                             KILN__ARG_ROLE__ROLE_OUTPUT);
            assert_int_equal(d->request->args[1]->shape[0], 65);
            assert_memory_equal(d->request->workload_key.data, m.key, 16);
            assert_true(d->request->evaluator->rtol == 1e-3);
            assert_true(d->request->evaluator->skip_verify);
            break;
        case KILN__ENVELOPE__BODY_RESULT:
            assert_int_equal(d->result->n_samples, 3);
            assert_true(d->result->samples[2] == m.samples[2]);
            assert_string_equal(d->result->error, "max abs err 0.5");
            break;
        case KILN__ENVELOPE__BODY_GOODBYE:
            assert_string_equal(d->goodbye->reason, "shutting down");
            break;
        case KILN__ENVELOPE__BODY_JOB_HELLO:
            assert_int_equal(d->job_hello->n_targets, 2);
            assert_string_equal(d->job_hello->targets[1], "cuda/sm_90");
            break;
        case KILN__ENVELOPE__BODY_JOB_RESULT:
            assert_int_equal(d->job_result->result->candidate_id, 1001);
            assert_string_equal(d->job_result->agent, "agent-0");
            break;
        case KILN__ENVELOPE__BODY_STATUS_REPLY:
            assert_int_equal(d->status_reply->jobs[0]->done, 20);
            assert_true(d->status_reply->agents[0]->drained);
            break;
        default:
            break;
        }
        kl_net_envelope_free(&d);
        assert_null(d);
    }
}

static void test_garbage_never_crashes(void **state)
{
    (void)state;
    kl_rng_t rng;
    kl_rng_seed(&rng, 7);
    uint8_t buf[512];
    char err[KL_ERRMSG_LEN];
    int rejected = 0;
    for (int i = 0; i < 3000; i++) {
        size_t len = kl_rng_below(&rng, sizeof buf);
        for (size_t j = 0; j < len; j++)
            buf[j] = (uint8_t)kl_rng_next(&rng);
        Kiln__Envelope *e = NULL;
        int rc = kl_net_decode(buf, len, &e, err);
        assert_true(rc == KL_OK || rc == KL_ERR_PROTO);
        rejected += rc == KL_ERR_PROTO;
        kl_net_envelope_free(&e);
    }
    assert_true(rejected > 2900);

    /* Truncations and byte flips of every valid message. */
    msgs_t m;
    for (size_t k = 0; k < N_ALL; k++) {
        net_fill(&m, net_all[k]);
        size_t len;
        uint8_t *a = kl_net_encode(&m.env, &len);
        for (size_t cut = 0; cut < len; cut++) {
            Kiln__Envelope *e = NULL;
            int rc = kl_net_decode(a, cut, &e, err);
            assert_true(rc == KL_OK || rc == KL_ERR_PROTO);
            kl_net_envelope_free(&e);
        }
        uint8_t *b = kl_xmalloc(len);
        for (int i = 0; i < 300; i++) {
            memcpy(b, a, len);
            for (int f = 0; f < 3; f++)
                b[kl_rng_below(&rng, len)] = (uint8_t)kl_rng_next(&rng);
            Kiln__Envelope *e = NULL;
            int rc = kl_net_decode(b, len, &e, err);
            assert_true(rc == KL_OK || rc == KL_ERR_PROTO);
            kl_net_envelope_free(&e);
        }
        free(b);
        free(a);
    }
    /* A request cut in the middle of its last candidate's source. */
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    size_t len;
    uint8_t *a = kl_net_encode(&m.env, &len);
    expect_proto(a, len - 20, "malformed field");
    free(a);
    expect_proto("", 0, "no body");
}

static void test_bounds(void **state)
{
    (void)state;
    msgs_t m;
    Kiln__Envelope e = KILN__ENVELOPE__INIT;
    e.version_major = 1;
    expect_proto_env(&e, "no body");

    /* 5000 candidates: refused while counting, before unpacking. */
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    Kiln__Candidate **many = kl_xcalloc(5000, sizeof *many);
    for (int i = 0; i < 5000; i++)
        many[i] = &m.cand[0];
    m.req.candidates = many;
    m.req.n_candidates = 5000;
    expect_proto_env(&m.env, "request.candidates");
    free(many);

    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.cand[1].n_grid = 2;
    expect_proto_env(&m.env, "request.candidates[1].grid");

    /* The job <-> head messages are bounded the same way. */
    net_fill(&m, KILN__ENVELOPE__BODY_JOB_HELLO);
    char **tg = kl_xcalloc(KL_NET_MAX_TARGETS + 1, sizeof *tg);
    for (int i = 0; i <= KL_NET_MAX_TARGETS; i++)
        tg[i] = "cpu";
    m.jhello.targets = tg;
    m.jhello.n_targets = KL_NET_MAX_TARGETS + 1;
    expect_proto_env(&m.env, "job_hello.targets");
    free(tg);
    net_fill(&m, KILN__ENVELOPE__BODY_JOB_RESULT);
    m.jres.result = NULL;
    expect_proto_env(&m.env, "job_result.result");
    net_fill(&m, KILN__ENVELOPE__BODY_JOB_RESULT);
    m.res.status = (Kiln__Status)42;
    expect_proto_env(&m.env, "result.status");
    net_fill(&m, KILN__ENVELOPE__BODY_STATUS_REPLY);
    char *longname = kl_xcalloc(KL_NET_MAX_STRING + 2, 1);
    memset(longname, 'a', KL_NET_MAX_STRING + 1);
    m.jst.name = longname;
    expect_proto_env(&m.env, "status_reply.jobs[0].name");
    free(longname);
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    uint32_t four[4] = {1, 2, 3, 4};
    m.cand[0].block = four;
    m.cand[0].n_block = 4;
    expect_proto_env(&m.env, "request.candidates[0].block");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.req.workload_key.len = 15;
    expect_proto_env(&m.env, "request.workload_key");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.ev.repeat = KL_NET_MAX_SAMPLES + 1;
    expect_proto_env(&m.env, "request.evaluator.repeat");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.req.evaluator = NULL; /* absent: the agent's defaults */
    size_t elen;
    void *ebuf = kl_net_encode(&m.env, &elen);
    Kiln__Envelope *ok = NULL;
    char eerr[KL_ERRMSG_LEN];
    assert_int_equal(kl_net_decode(ebuf, elen, &ok, eerr), KL_OK);
    assert_null(ok->request->evaluator);
    kl_net_envelope_free(&ok);
    free(ebuf);
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.ev.rtol = NAN;
    expect_proto_env(&m.env, "rtol");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    m.arg[1].shape = dims;
    m.arg[1].n_shape = 9;
    expect_proto_env(&m.env, "request.args[1].shape");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.shape[2][1] = -4;
    expect_proto_env(&m.env, "request.args[2].shape");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    int64_t huge[2] = {INT64_MAX / 2, 3};
    m.arg[0].shape = huge;
    expect_proto_env(&m.env, "overflows");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.arg[0].dtype = 9;
    expect_proto_env(&m.env, "request.args[0].dtype");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.arg[0].dtype = KILN__DTYPE__DTYPE_S8 + 1; /* S8 is the last known */
    expect_proto_env(&m.env, "request.args[0].dtype");
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    char *big = kl_xmalloc(KL_NET_MAX_STRING + 2);
    memset(big, 'x', KL_NET_MAX_STRING + 1);
    big[KL_NET_MAX_STRING + 1] = '\0';
    m.cand[1].entry = big;
    expect_proto_env(&m.env, "request.candidates[1].entry");
    net_fill(&m, KILN__ENVELOPE__BODY_HELLO);
    m.hello.hostname = big;
    expect_proto_env(&m.env, "hello.hostname");
    free(big);

    net_fill(&m, KILN__ENVELOPE__BODY_HELLO);
    Kiln__DeviceInfo **devs = kl_xcalloc(KL_NET_MAX_DEVICES + 1, sizeof *devs);
    for (int i = 0; i <= KL_NET_MAX_DEVICES; i++)
        devs[i] = &m.dev[0];
    m.hello.devices = devs;
    m.hello.n_devices = KL_NET_MAX_DEVICES + 1;
    expect_proto_env(&m.env, "hello.devices");
    free(devs);

    net_fill(&m, KILN__ENVELOPE__BODY_RESULT);
    double *s = kl_xcalloc(KL_NET_MAX_SAMPLES + 1, sizeof *s);
    m.res.samples = s;
    m.res.n_samples = KL_NET_MAX_SAMPLES + 1;
    expect_proto_env(&m.env, "result.samples");
    m.res.n_samples = 2;
    s[1] = -1;
    expect_proto_env(&m.env, "result.samples[1]");
    free(s);
    net_fill(&m, KILN__ENVELOPE__BODY_RESULT);
    m.res.status = 42;
    expect_proto_env(&m.env, "result.status");

    /* Hand-made wire: one sub-message twice, a bad wire type. */
    const uint8_t twice[] = {0x08, 0x01, 0x62, 0x00, 0x62, 0x00};
    expect_proto(twice, sizeof twice, "heartbeat: appears more than once");
    const uint8_t wt[] = {0x08, 0x01, 0x61, 0, 0, 0, 0, 0, 0, 0, 0};
    expect_proto(wt, sizeof wt, "heartbeat: wrong wire type");
    const uint8_t overlong[] = {0x6a, 0x7f, 0x01};
    expect_proto(overlong, sizeof overlong, "malformed field");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all),
        cmocka_unit_test(test_garbage_never_crashes),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
