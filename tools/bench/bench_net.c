/* bench_net - what the wire costs: the Envelope codec against protobuf-c
 * alone (the price of the bounds checks), and round trips and streamed
 * results over loopback TCP with and without CURVE.
 *
 * Usage: bench_net [ROUNDS]   (default 2000 round trips per mode) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_net.h"
#include "kl_util.h"

#define S_CANDS 256
#define S_SRC 4096
#define S_SAMPLES 21

static void s_die(const char *what, const char *err)
{
    fprintf(stderr, "bench_net: %s: %s\n", what, err);
    exit(1);
}

/* ---- codec ------------------------------------------------------------- */

static void s_codec(void)
{
    static Kiln__Candidate cand[S_CANDS], *candp[S_CANDS];
    char *src = kl_xmalloc(S_SRC + 1);
    memset(src, 'x', S_SRC);
    src[S_SRC] = '\0';
    uint32_t g[3] = {64, 1, 1}, b[3] = {256, 1, 1};
    for (int i = 0; i < S_CANDS; i++) {
        kiln__candidate__init(&cand[i]);
        cand[i].id = (uint64_t)i;
        cand[i].source = src;
        cand[i].entry = "k";
        cand[i].n_grid = cand[i].n_block = 3;
        cand[i].grid = g;
        cand[i].block = b;
        candp[i] = &cand[i];
    }
    uint8_t key[16] = {1};
    Kiln__Evaluator ev = KILN__EVALUATOR__INIT;
    Kiln__MeasureRequest req = KILN__MEASURE_REQUEST__INIT;
    req.workload_key.data = key;
    req.workload_key.len = 16;
    req.target = "cuda/sm_90";
    req.evaluator = &ev;
    req.candidates = candp;
    req.n_candidates = S_CANDS;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.version_major = 1;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &req;
    size_t len;
    void *buf = kl_net_encode(&env, &len);
    double kiln[S_SAMPLES], base[S_SAMPLES];
    char err[KL_ERRMSG_LEN];
    for (int s = 0; s < S_SAMPLES; s++) {
        double t0 = kl_now_s();
        for (int r = 0; r < 10; r++) {
            Kiln__Envelope *e = NULL;
            if (kl_net_decode(buf, len, &e, err) != KL_OK)
                s_die("decode", err);
            kl_net_envelope_free(&e);
        }
        double t1 = kl_now_s();
        for (int r = 0; r < 10; r++) {
            Kiln__Envelope *e = kiln__envelope__unpack(NULL, len, buf);
            kiln__envelope__free_unpacked(e, NULL);
        }
        double t2 = kl_now_s();
        kiln[s] = (t1 - t0) / 10;
        base[s] = (t2 - t1) / 10;
    }
    double mk = kl_median(kiln, S_SAMPLES), mb = kl_median(base, S_SAMPLES);
    printf("codec: MeasureRequest of %d candidates x %d B source = %zu B\n",
           S_CANDS, S_SRC, len);
    printf("  kl_net_decode (pre-scan + unpack + bounds): median %.1f us "
           "(%.0f MB/s), min %.1f max %.1f\n",
           mk * 1e6, len / mk / 1e6, kl_percentile(kiln, S_SAMPLES, 0) * 1e6,
           kl_percentile(kiln, S_SAMPLES, 100) * 1e6);
    printf("  protobuf-c unpack alone (baseline):        median %.1f us "
           "(%.0f MB/s)\n",
           mb * 1e6, len / mb / 1e6);
    printf("  ratio kiln / baseline: %.2f\n", mk / mb);
    free(buf);
    free(src);
}

/* ---- sockets ----------------------------------------------------------- */

static void s_pair(bool curve, const char *dir, kl_net_t **srv, kl_net_t **cli)
{
    char err[KL_ERRMSG_LEN];
    kl_net_security_t ss = {.insecure = true}, cs = {.insecure = true};
    char *pin = kl_xasprintf("%s/head.pub", dir);
    if (curve) {
        ss = (kl_net_security_t){.keys_dir = dir, .name = "head"};
        cs = (kl_net_security_t){
            .keys_dir = dir, .name = "agent", .server_key_file = pin};
    }
    if (kl_net_server_new(srv, "tcp://127.0.0.1:*", &ss, err) != KL_OK)
        s_die("server", err);
    if (kl_net_client_new(cli, kl_net_endpoint(*srv), &cs, err) != KL_OK)
        s_die("client", err);
    free(pin);
}

static void s_sockets(bool curve, const char *dir, int rounds)
{
    kl_net_t *srv, *cli;
    s_pair(curve, dir, &srv, &cli);
    char err[KL_ERRMSG_LEN];
    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    kl_peer_t peer;
    Kiln__Envelope *got;
    double *rt = kl_xmalloc(sizeof *rt * (size_t)rounds);
    for (int i = -100; i < rounds; i++) { /* 100 rounds of warm-up */
        double t0 = kl_now_s();
        hb.seq = (uint64_t)(i + 100);
        if (kl_net_send(cli, NULL, &env, err) != KL_OK ||
            kl_net_recv(srv, &peer, &got, 5000, err) != KL_OK)
            s_die("ping", err);
        kl_net_envelope_free(&got);
        if (kl_net_send(srv, &peer, &env, err) != KL_OK ||
            kl_net_recv(cli, NULL, &got, 5000, err) != KL_OK)
            s_die("pong", err);
        kl_net_envelope_free(&got);
        if (i >= 0)
            rt[i] = kl_now_s() - t0;
    }
    /* Streamed results, as an agent sends them (sender and receiver in
     * this one thread, interleaved in blocks below the high-water mark). */
    double samples[5] = {1e-4, 1e-4, 1e-4, 1e-4, 1e-4};
    Kiln__MeasureResult res = KILN__MEASURE_RESULT__INIT;
    res.n_samples = 5;
    res.samples = samples;
    Kiln__Envelope renv = KILN__ENVELOPE__INIT;
    renv.body_case = KILN__ENVELOPE__BODY_RESULT;
    renv.result = &res;
    int n = rounds * 10;
    double t0 = kl_now_s();
    for (int i = 0; i < n; i += 500) {
        for (int j = 0; j < 500; j++) {
            res.candidate_id = (uint64_t)(i + j);
            if (kl_net_send(cli, NULL, &renv, err) != KL_OK)
                s_die("stream send", err);
        }
        for (int j = 0; j < 500; j++) {
            if (kl_net_recv(srv, &peer, &got, 5000, err) != KL_OK)
                s_die("stream recv", err);
            kl_net_envelope_free(&got);
        }
    }
    double dt = kl_now_s() - t0;
    printf("%s loopback TCP:\n", curve ? "CURVE" : "insecure");
    printf("  round trip (heartbeat there and back, %d rounds): median %.1f "
           "us, p99 %.1f us, min %.1f us\n",
           rounds, kl_median(rt, (size_t)rounds) * 1e6,
           kl_percentile(rt, (size_t)rounds, 99) * 1e6,
           kl_percentile(rt, (size_t)rounds, 0) * 1e6);
    printf("  streamed MeasureResults: %d in %.3f s = %.0f msg/s\n", n, dt,
           n / dt);
    free(rt);
    kl_net_destroy(&cli);
    kl_net_destroy(&srv);
}

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

int main(int argc, char **argv)
{
    kl_log_init("bench_net");
    kl_log_set_level(KL_LOG_ERROR);
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    if (rounds < 10)
        rounds = 10;
    char dir[512], err[KL_ERRMSG_LEN];
    snprintf(dir, sizeof dir, "%s/kl-bench-net-XXXXXX", s_tmpdir());
    if (!mkdtemp(dir))
        s_die("mkdtemp", "failed");
    if (kl_net_keygen(dir, "head", err) != KL_OK ||
        kl_net_keygen(dir, "agent", err) != KL_OK)
        s_die("keygen", err);
    s_codec();
    s_sockets(false, dir, rounds);
    s_sockets(true, dir, rounds);
    printf("reproduce: build/tools/bench_net %d\n", rounds);
    char *k;
    const char *names[] = {"head.key", "head.pub", "agent.key", "agent.pub"};
    for (int i = 0; i < 4; i++) {
        k = kl_xasprintf("%s/%s", dir, names[i]);
        unlink(k);
        free(k);
    }
    rmdir(dir);
    return 0;
}
