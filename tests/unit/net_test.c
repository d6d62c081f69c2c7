/* Unit tests of common/kl_net's key files and sockets: key generation,
 * real ZeroMQ sockets on loopback with and without CURVE (exchanges and
 * drops, a version mismatch, keys added while running, bad key files).
 * The codec is net_codec_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_net.h"
#include "kl_util.h"
#include "kl_test_tmp.h"
#include "net_msgs.h"

/* ---- helpers ----------------------------------------------------------- */

static int s_rm(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

static char *tmpdir(void)
{
    char t[256];
    assert_non_null(kl_test_mkdtemp(t, sizeof t, "kl-net-test-XXXXXX"));
    return kl_xstrdup(t);
}

static void rmrf(char *dir)
{
    nftw(dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

static void copy_file(const char *from, const char *to)
{
    char *data, err[KL_ERRMSG_LEN];
    size_t len;
    assert_int_equal(kl_read_file(from, &data, &len, err), KL_OK);
    assert_int_equal(kl_write_file(to, data, len, err), KL_OK);
    free(data);
}

static void keygen(const char *dir, const char *name)
{
    char err[KL_ERRMSG_LEN];
    int rc = kl_net_keygen(dir, name, err);
    if (rc != KL_OK)
        fail_msg("keygen %s/%s: %s", dir, name, err);
}

static Kiln__Envelope *hello_env(msgs_t *m)
{
    net_fill(m, KILN__ENVELOPE__BODY_HELLO);
    return &m->env;
}

/* Waits up to ms for one envelope on n; returns the code. */
static int recv_one(kl_net_t *n, kl_peer_t *peer, Kiln__Envelope **env, int ms,
                    char *err)
{
    return kl_net_recv(n, peer, env, ms, err);
}

/* ---- key files --------------------------------------------------------- */

static void test_keygen(void **state)
{
    (void)state;
    char *dir = tmpdir();
    char *sub = kl_xasprintf("%s/a/b", dir);
    char err[KL_ERRMSG_LEN];
    mode_t old = umask(0);
    int rc = kl_net_keygen(sub, "coord", err);
    umask(old);
    assert_int_equal(rc, KL_OK);
    char *kpath = kl_xasprintf("%s/coord.key", sub);
    char *ppath = kl_xasprintf("%s/coord.pub", sub);
    struct stat st;
    assert_int_equal(stat(kpath, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(ppath, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    char pub[41], sec[41], again[41];
    assert_int_equal(kl_net_read_key(ppath, pub, err), KL_OK);
    assert_int_equal(kl_net_read_key(kpath, sec, err), KL_OK);
    assert_int_equal(strlen(pub), 40);
    char derived[41];
    assert_int_equal(zmq_curve_public(derived, sec), 0);
    assert_string_equal(derived, pub);

    /* No overwrite: the old key stays. */
    assert_int_equal(kl_net_keygen(sub, "coord", err), KL_ERR_EXISTS);
    assert_non_null(strstr(err, "coord"));
    assert_int_equal(kl_net_read_key(kpath, again, err), KL_OK);
    assert_string_equal(again, sec);
    assert_int_equal(kl_net_keygen(sub, "../evil", err), KL_ERR_INVAL);

    char *missing = kl_xasprintf("%s/nope.pub", dir);
    assert_int_equal(kl_net_read_key(missing, pub, err), KL_ERR_NOTFOUND);
    assert_non_null(strstr(err, missing));
    char *bad = kl_xasprintf("%s/bad.pub", dir);
    assert_int_equal(kl_write_file(bad, "short\n", 6, err), KL_OK);
    assert_int_equal(kl_net_read_key(bad, pub, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, bad));
    /* 40 characters, but not Z85. */
    assert_int_equal(kl_write_file(bad,
                                   "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n",
                                   41, err),
                     KL_OK);
    assert_int_equal(kl_net_read_key(bad, pub, err), KL_ERR_INVAL);
    free(missing);
    free(bad);
    free(kpath);
    free(ppath);
    free(sub);
    rmrf(dir);
}

static void test_loopback(void **state)
{
    (void)state;
    assert_true(kl_net_is_loopback("tcp://127.0.0.1:7070"));
    assert_true(kl_net_is_loopback("tcp://127.3.2.1:*"));
    assert_true(kl_net_is_loopback("tcp://localhost:7070"));
    assert_true(kl_net_is_loopback("tcp://[::1]:7070"));
    assert_true(kl_net_is_loopback("ipc:///tmp/kiln.sock"));
    assert_true(kl_net_is_loopback("inproc://x"));
    assert_false(kl_net_is_loopback("tcp://*:7070"));
    assert_false(kl_net_is_loopback("tcp://0.0.0.0:7070"));
    assert_false(kl_net_is_loopback("tcp://10.0.0.1:7070"));
    assert_false(kl_net_is_loopback("tcp://127.0.0.1.example.com:7070"));
    assert_false(kl_net_is_loopback("tcp://localhost.example.com:7070"));
    assert_false(kl_net_is_loopback("tcp://[::2]:7070"));
    assert_false(kl_net_is_loopback(NULL));

    kl_net_security_t ins = {.insecure = true};
    kl_net_t *n = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_net_server_new(&n, "tcp://0.0.0.0:*", &ins, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "--insecure is for loopback only"));
    assert_null(n);
    assert_int_equal(kl_net_client_new(&n, "tcp://10.1.2.3:7070", &ins, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "--insecure is for loopback only"));
    assert_null(n);
}

/* ---- sockets ----------------------------------------------------------- */

static void pair_insecure(kl_net_t **srv, kl_net_t **cli)
{
    kl_net_security_t ins = {.insecure = true};
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_net_server_new(srv, "tcp://127.0.0.1:*", &ins, err),
                     KL_OK);
    assert_non_null(strstr(kl_net_endpoint(*srv), "tcp://127.0.0.1:"));
    assert_int_equal(kl_net_client_new(cli, kl_net_endpoint(*srv), &ins, err),
                     KL_OK);
}

static void raw_send(kl_net_t *cli, const void *buf, size_t len)
{
    assert_int_equal(zmq_send(kl_net_socket(cli), buf, len, 0), (int)len);
}

static void test_insecure_exchange_and_drops(void **state)
{
    (void)state;
    kl_net_t *srv = NULL, *cli = NULL;
    pair_insecure(&srv, &cli);
    char err[KL_ERRMSG_LEN];
    msgs_t m;
    kl_peer_t peer;
    Kiln__Envelope *got = NULL;

    /* Every message type goes through, in both directions. */
    assert_int_equal(kl_net_send(cli, NULL, hello_env(&m), err), KL_OK);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_OK);
    assert_int_equal(got->body_case, KILN__ENVELOPE__BODY_HELLO);
    assert_true(peer.len > 0);
    kl_net_envelope_free(&got);
    for (size_t i = 0; i < N_ALL; i++) {
        net_fill(&m, net_all[i]);
        assert_int_equal(kl_net_send(srv, &peer, &m.env, err), KL_OK);
        assert_int_equal(recv_one(cli, NULL, &got, 5000, err), KL_OK);
        assert_int_equal(got->body_case, net_all[i]);
        kl_net_envelope_free(&got);
    }
    /* Nothing more: a timeout. */
    assert_int_equal(recv_one(cli, NULL, &got, 50, err), KL_ERR_TIMEOUT);

    /* The sender refuses what the receiver would drop. */
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    m.cand[0].n_grid = 1;
    assert_int_equal(kl_net_send(srv, &peer, &m.env, err), KL_ERR_PROTO);
    assert_non_null(strstr(err, "grid"));

    /* Garbage, an unset oneof, 5000 candidates, two frames: dropped. */
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    raw_send(cli, junk, sizeof junk);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_ERR_PROTO);
    assert_null(got);
    Kiln__Envelope nobody = KILN__ENVELOPE__INIT;
    nobody.version_major = 1;
    size_t len;
    void *buf = kl_net_encode(&nobody, &len);
    raw_send(cli, buf, len);
    free(buf);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_ERR_PROTO);
    assert_non_null(strstr(err, "no body"));
    net_fill(&m, KILN__ENVELOPE__BODY_REQUEST);
    Kiln__Candidate **many = kl_xcalloc(5000, sizeof *many);
    for (int i = 0; i < 5000; i++)
        many[i] = &m.cand[0];
    m.req.candidates = many;
    m.req.n_candidates = 5000;
    buf = kl_net_encode(&m.env, &len);
    free(many);
    raw_send(cli, buf, len);
    free(buf);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_ERR_PROTO);
    assert_non_null(strstr(err, "request.candidates"));
    /* A body but no version; an empty frame. */
    net_fill(&m, KILN__ENVELOPE__BODY_HEARTBEAT);
    m.env.version_major = 0;
    buf = kl_net_encode(&m.env, &len);
    raw_send(cli, buf, len);
    free(buf);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_ERR_PROTO);
    assert_non_null(strstr(err, "no protocol version"));
    assert_null(got);
    raw_send(cli, "", 0);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_ERR_PROTO);
    void *zs = kl_net_socket(cli);
    assert_int_equal(zmq_send(zs, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(zs, "b", 1, 0), 1);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_ERR_PROTO);
    assert_non_null(strstr(err, "2 frames"));

    /* A frame over the limit (but within what zmq lets through). */
    size_t big = KL_NET_MAX_FRAME + 100;
    uint8_t *huge = kl_xcalloc(1, big);
    raw_send(cli, huge, big);
    free(huge);
    assert_int_equal(recv_one(srv, &peer, &got, 10000, err), KL_ERR_PROTO);

    /* Still alive after all that. */
    assert_int_equal(kl_net_send(cli, NULL, hello_env(&m), err), KL_OK);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_OK);
    kl_net_envelope_free(&got);

    kl_net_stats_t st;
    kl_net_stats(srv, &st);
    assert_int_equal(st.frames_in, 9);
    assert_int_equal(st.frames_out, N_ALL);
    assert_int_equal(st.dropped_malformed, 6);
    assert_int_equal(st.dropped_oversize, 1);
    assert_int_equal(st.dropped_version, 0);
    assert_int_equal(st.auth_denied, 0);

    /* A peer that is not there: fails at once. */
    kl_peer_t ghost = {.id = {0, 1, 2, 3}, .len = 4};
    net_fill(&m, KILN__ENVELOPE__BODY_HEARTBEAT);
    assert_int_equal(kl_net_send(srv, &ghost, &m.env, err), KL_ERR_CLOSED);
    assert_int_equal(kl_net_send(srv, NULL, &m.env, err), KL_ERR_INVAL);

    kl_net_destroy(&cli);
    kl_net_destroy(&srv);
    assert_null(srv);
    kl_net_destroy(&srv); /* safe twice */
}

static void test_version_mismatch(void **state)
{
    (void)state;
    kl_net_t *srv = NULL, *cli = NULL;
    pair_insecure(&srv, &cli);
    msgs_t m;
    net_fill(&m, KILN__ENVELOPE__BODY_HELLO);
    m.env.version_major = 2;
    m.env.version_minor = 3;
    size_t len;
    void *buf = kl_net_encode(&m.env, &len);
    raw_send(cli, buf, len);
    free(buf);
    char err[KL_ERRMSG_LEN];
    kl_peer_t peer;
    Kiln__Envelope *got = NULL;
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_ERR_VERSION);
    assert_non_null(got);
    assert_int_equal(got->version_major, 2);
    assert_int_equal(got->version_minor, 3);
    assert_non_null(strstr(err, "2.3"));
    char ours[16];
    snprintf(ours, sizeof ours, "%d.%d", KL_PROTO_MAJOR, KL_PROTO_MINOR);
    assert_non_null(strstr(err, ours));
    kl_net_envelope_free(&got);

    /* The answer reaches the peer of the other version. */
    net_fill(&m, KILN__ENVELOPE__BODY_GOODBYE);
    m.bye.reason = "protocol 2.3 is not 1.0";
    assert_int_equal(kl_net_send(srv, &peer, &m.env, err), KL_OK);
    assert_int_equal(recv_one(cli, NULL, &got, 5000, err), KL_OK);
    assert_int_equal(got->body_case, KILN__ENVELOPE__BODY_GOODBYE);
    kl_net_envelope_free(&got);
    kl_net_stats_t st;
    kl_net_stats(srv, &st);
    assert_int_equal(st.dropped_version, 1);
    kl_net_destroy(&cli);
    kl_net_destroy(&srv);
}

typedef struct {
    char *root, *coord, *agents, *allow;
} keys_t;

static void keys_make(keys_t *k)
{
    k->root = tmpdir();
    k->coord = kl_xasprintf("%s/coord", k->root);
    k->agents = kl_xasprintf("%s/agents", k->root);
    k->allow = kl_xasprintf("%s/allow", k->root);
    keygen(k->coord, "head");
    keygen(k->coord, "other"); /* a server key no server uses */
    keygen(k->agents, "good");
    keygen(k->agents, "stranger");
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_mkdirs(k->allow, err), KL_OK);
    char *from = kl_xasprintf("%s/good.pub", k->agents);
    char *to = kl_xasprintf("%s/good.pub", k->allow);
    copy_file(from, to);
    free(from);
    free(to);
}

static void keys_free(keys_t *k)
{
    free(k->coord);
    free(k->agents);
    free(k->allow);
    rmrf(k->root);
}

static kl_net_t *curve_server(const keys_t *k, const char *allow)
{
    kl_net_security_t s = {
        .keys_dir = k->coord, .name = "head", .allow_dir = allow};
    kl_net_t *srv = NULL;
    char err[KL_ERRMSG_LEN];
    int rc = kl_net_server_new(&srv, "tcp://127.0.0.1:*", &s, err);
    if (rc != KL_OK)
        fail_msg("server: %s", err);
    return srv;
}

static kl_net_t *curve_client(const keys_t *k, kl_net_t *srv, const char *name,
                              const char *server_pub)
{
    char *pin = kl_xasprintf("%s/%s.pub", k->coord, server_pub);
    kl_net_security_t s = {
        .keys_dir = k->agents, .name = name, .server_key_file = pin};
    kl_net_t *cli = NULL;
    char err[KL_ERRMSG_LEN];
    int rc = kl_net_client_new(&cli, kl_net_endpoint(srv), &s, err);
    free(pin);
    if (rc != KL_OK)
        fail_msg("client: %s", err);
    return cli;
}

static uint64_t wait_denied(kl_net_t *srv, uint64_t above, int ms)
{
    kl_net_stats_t st;
    for (int t = 0; t < ms; t += 20) {
        kl_net_stats(srv, &st);
        if (st.auth_denied > above)
            return st.auth_denied;
        usleep(20 * 1000);
    }
    kl_net_stats(srv, &st);
    return st.auth_denied;
}

static void test_curve(void **state)
{
    (void)state;
    keys_t k;
    keys_make(&k);
    char err[KL_ERRMSG_LEN];
    msgs_t m;
    kl_peer_t peer;
    Kiln__Envelope *got = NULL;

    kl_net_t *srv = curve_server(&k, k.allow);
    /* A second server in the same process with its own (empty) allow
     * list: the ZAP handler keeps them apart. */
    char *empty = kl_xasprintf("%s/empty", k.root);
    assert_int_equal(kl_mkdirs(empty, err), KL_OK);
    kl_net_t *srv2 = curve_server(&k, empty);

    /* Allowed key: both ways. */
    kl_net_t *good = curve_client(&k, srv, "good", "head");
    assert_int_equal(kl_net_send(good, NULL, hello_env(&m), err), KL_OK);
    assert_int_equal(recv_one(srv, &peer, &got, 5000, err), KL_OK);
    assert_string_equal(got->hello->agent_name, "agent-7");
    kl_net_envelope_free(&got);
    net_fill(&m, KILN__ENVELOPE__BODY_WELCOME);
    assert_int_equal(kl_net_send(srv, &peer, &m.env, err), KL_OK);
    assert_int_equal(recv_one(good, NULL, &got, 5000, err), KL_OK);
    assert_int_equal(got->body_case, KILN__ENVELOPE__BODY_WELCOME);
    kl_net_envelope_free(&got);

    /* Unknown key: nothing gets through, the refusal is counted. */
    kl_net_t *stranger = curve_client(&k, srv, "stranger", "head");
    assert_int_equal(kl_net_send(stranger, NULL, hello_env(&m), err), KL_OK);
    assert_true(wait_denied(srv, 0, 5000) > 0);
    assert_int_equal(recv_one(srv, &peer, &got, 1000, err), KL_ERR_TIMEOUT);
    /* The client knows it was refused. */
    assert_int_equal(recv_one(stranger, NULL, &got, 300, err), KL_ERR_TIMEOUT);
    kl_net_stats_t cst;
    kl_net_stats(stranger, &cst);
    assert_true(cst.auth_denied > 0);
    assert_int_equal(cst.frames_in, 0);

    /* The good key is unknown to the second server. */
    kl_net_t *good2 = curve_client(&k, srv2, "good", "head");
    assert_int_equal(kl_net_send(good2, NULL, hello_env(&m), err), KL_OK);
    assert_true(wait_denied(srv2, 0, 5000) > 0);
    assert_int_equal(recv_one(srv2, &peer, &got, 500, err), KL_ERR_TIMEOUT);

    /* Pinned to the wrong server key: the handshake fails. */
    kl_net_stats_t before, after;
    kl_net_stats(srv, &before);
    kl_net_t *misled = curve_client(&k, srv, "good", "other");
    assert_int_equal(kl_net_send(misled, NULL, hello_env(&m), err), KL_OK);
    assert_int_equal(recv_one(srv, &peer, &got, 1500, err), KL_ERR_TIMEOUT);
    assert_int_equal(recv_one(misled, NULL, &got, 10, err), KL_ERR_TIMEOUT);
    kl_net_stats(srv, &after);
    assert_int_equal(after.frames_in, before.frames_in);

    kl_net_destroy(&misled);
    kl_net_destroy(&good2);
    kl_net_destroy(&stranger);
    kl_net_destroy(&good);
    kl_net_destroy(&srv2);
    kl_net_destroy(&srv);
    free(empty);
    keys_free(&k);
}

static void test_curve_key_added_while_running(void **state)
{
    (void)state;
    keys_t k;
    keys_make(&k);
    char err[KL_ERRMSG_LEN];
    msgs_t m;
    kl_peer_t peer;
    Kiln__Envelope *got = NULL;
    kl_net_t *srv = curve_server(&k, k.allow);
    kl_net_t *cli = curve_client(&k, srv, "stranger", "head");
    assert_int_equal(kl_net_send(cli, NULL, hello_env(&m), err), KL_OK);
    assert_true(wait_denied(srv, 0, 5000) > 0);

    char *from = kl_xasprintf("%s/stranger.pub", k.agents);
    char *to = kl_xasprintf("%s/stranger.pub", k.allow);
    copy_file(from, to);
    free(from);
    free(to);
    /* ZeroMQ alone would not retry a refused handshake; kl_net does,
     * and the unknown key makes the handler rescan the directory. */
    int rc = KL_ERR_TIMEOUT;
    for (int i = 0; i < 30 && rc == KL_ERR_TIMEOUT; i++) {
        int s = kl_net_send(cli, NULL, hello_env(&m), err);
        assert_true(s == KL_OK || s == KL_ERR_AUTH);
        rc = recv_one(srv, &peer, &got, 500, err);
    }
    if (rc != KL_OK)
        fail_msg("rc %d: %s", rc, err);
    assert_int_equal(rc, KL_OK);
    assert_int_equal(got->body_case, KILN__ENVELOPE__BODY_HELLO);
    kl_net_envelope_free(&got);
    kl_net_destroy(&cli);
    kl_net_destroy(&srv);
    keys_free(&k);
}

static void test_bad_key_files(void **state)
{
    (void)state;
    keys_t k;
    keys_make(&k);
    char err[KL_ERRMSG_LEN];
    kl_net_t *n = NULL;
    kl_net_security_t s = {.keys_dir = k.coord, .name = "nobody"};
    assert_int_equal(kl_net_server_new(&n, "tcp://127.0.0.1:*", &s, err),
                     KL_ERR_NOTFOUND);
    assert_non_null(strstr(err, "nobody.pub"));
    char *missing = kl_xasprintf("%s/missing", k.root);
    s.name = "head";
    s.allow_dir = missing;
    assert_int_equal(kl_net_server_new(&n, "tcp://127.0.0.1:*", &s, err),
                     KL_ERR_NOTFOUND);
    assert_non_null(strstr(err, missing));
    kl_net_security_t c = {
        .keys_dir = k.agents, .name = "good", .server_key_file = missing};
    assert_int_equal(kl_net_client_new(&n, "tcp://127.0.0.1:1", &c, err),
                     KL_ERR_NOTFOUND);
    assert_non_null(strstr(err, missing));
    /* A .pub that does not belong to the .key. */
    char *a = kl_xasprintf("%s/stranger.pub", k.agents);
    char *b = kl_xasprintf("%s/good.pub", k.agents);
    copy_file(a, b);
    c.server_key_file = a;
    assert_int_equal(kl_net_client_new(&n, "tcp://127.0.0.1:1", &c, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "does not match"));
    assert_null(n);
    free(a);
    free(b);
    free(missing);
    keys_free(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keygen),
        cmocka_unit_test(test_loopback),
        cmocka_unit_test(test_insecure_exchange_and_drops),
        cmocka_unit_test(test_version_mismatch),
        cmocka_unit_test(test_curve),
        cmocka_unit_test(test_curve_key_added_while_running),
        cmocka_unit_test(test_bad_key_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
