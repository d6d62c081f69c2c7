/* bench_serve_sim.c - bench_serve's simulated agents (bench_serve_sim.h). */
#include "bench_serve_sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_net.h"
#include "kl_util.h"

atomic_int bs_measuring;  /* agents record latencies */
_Atomic double bs_hold_s; /* how long an agent holds a candidate */
_Atomic double bs_win_t0; /* start of the measured window */
volatile int bs_stop_all; /* agents stop */
char bs_curve_dir[256];   /* CURVE keys, "" when insecure */

static void s_lat_add(bs_agents_t *g, double v)
{
    if (g->n_lat == g->cap_lat) {
        g->cap_lat = g->cap_lat ? 2 * g->cap_lat : 65536;
        g->lat = kl_xrealloc(g->lat, g->cap_lat * sizeof *g->lat);
    }
    g->lat[g->n_lat++] = v;
}

static void s_agent_send(void *sock, Kiln__Envelope *env)
{
    env->version_major = KL_PROTO_MAJOR;
    env->version_minor = KL_PROTO_MINOR;
    size_t len;
    void *buf = kl_net_encode(env, &len);
    if (zmq_send(sock, buf, len, 0) < 0)
        kl_warn("bench_serve: simulated agent send: %s", zmq_strerror(errno));
    free(buf);
}

static void s_agent_hello(bs_agents_t *g, bs_agent_t *a, size_t gi)
{
    char name[64];
    snprintf(name, sizeof name, "sim-%04zu", gi);
    Kiln__DeviceInfo dev = KILN__DEVICE_INFO__INIT;
    Kiln__DeviceInfo *devs[1] = {&dev};
    dev.kind = "cpu";
    dev.name = "simulated in bench_serve";
    dev.target = S_DEV_TARGET;
    dev.simulated = true;
    Kiln__Hello h = KILN__HELLO__INIT;
    h.agent_name = name;
    h.hostname = "bench_serve";
    h.pid = (uint32_t)getpid();
    h.build_slots = g->credit - 1;
    h.n_devices = 1;
    h.devices = devs;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    s_agent_send(a->sock, &env);
}

static void s_agent_heartbeat(bs_agent_t *a)
{
    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    hb.seq = ++a->hb_seq;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    s_agent_send(a->sock, &env);
}

/* Answers one candidate: simulated OK. */
static void s_agent_answer(bs_agents_t *g, bs_agent_t *a, uint64_t req_id,
                           uint64_t cand_id)
{
    double samples[3] = {1e-4, 1e-4, 1e-4};
    Kiln__MeasureResult r = KILN__MEASURE_RESULT__INIT;
    r.request_id = req_id;
    r.candidate_id = cand_id;
    r.status = KILN__STATUS__STATUS_OK;
    r.samples = samples;
    r.n_samples = 3;
    r.simulated = true;
    r.number = 1;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_RESULT;
    env.result = &r;
    s_agent_send(a->sock, &env);
    g->results++;
    if (a->f_n < g->credit) {
        a->freed[(a->f_head + a->f_n) % g->credit] = kl_now_s();
        a->f_n++;
    }
}

/* Held candidates: a binary heap on due. */
static void s_hold(bs_agents_t *g, bs_held_t h)
{
    if (g->h_n == g->h_cap) {
        g->h_cap = g->h_cap ? 2 * g->h_cap : 4096;
        g->held = kl_xrealloc(g->held, g->h_cap * sizeof *g->held);
    }
    size_t i = g->h_n++;
    while (i > 0 && g->held[(i - 1) / 2].due > h.due) {
        g->held[i] = g->held[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    g->held[i] = h;
}

static bs_held_t s_unhold(bs_agents_t *g)
{
    bs_held_t top = g->held[0], last = g->held[--g->h_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= g->h_n)
            break;
        if (c + 1 < g->h_n && g->held[c + 1].due < g->held[c].due)
            c++;
        if (last.due <= g->held[c].due)
            break;
        g->held[i] = g->held[c];
        i = c;
    }
    if (g->h_n)
        g->held[i] = last;
    return top;
}

/* A hold of mean bs_hold_s, uniform in [0.5, 1.5) of it, so that the
 * answers of candidates sent together spread out instead of coming back
 * as one burst each round. */
static double s_hold_for(bs_agents_t *g)
{
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return bs_hold_s * (0.5 + (double)(g->rng >> 11) / 9007199254740992.0);
}

/* A MeasureRequest: each candidate answered at once, or after the hold. */
static void s_agent_request(bs_agents_t *g, bs_agent_t *a,
                            const Kiln__MeasureRequest *m)
{
    double now = kl_now_s(), hold = bs_hold_s;
    bool meas = atomic_load(&bs_measuring);
    double t0 = bs_win_t0;
    g->requests++;
    for (size_t i = 0; i < m->n_candidates; i++) {
        if (a->f_n) { /* a credit freed by an earlier result is used */
            double t = a->freed[a->f_head];
            a->f_head = (a->f_head + 1) % g->credit;
            a->f_n--;
            if (meas && t >= t0)
                s_lat_add(g, now - t);
        }
    }
    for (size_t i = 0; i < m->n_candidates; i++) {
        if (hold > 0)
            s_hold(g, (bs_held_t){(size_t)(a - g->agents), m->request_id,
                                  m->candidates[i]->id, now + s_hold_for(g)});
        else
            s_agent_answer(g, a, m->request_id, m->candidates[i]->id);
    }
}

/* Reads everything the socket has (ZMQ_FD is only a hint: ZMQ_EVENTS
 * says what is there, and sending may take the hint away). */
static void s_agent_service(bs_agents_t *g, bs_agent_t *a)
{
    for (;;) {
        int ev = 0;
        size_t sz = sizeof ev;
        if (zmq_getsockopt(a->sock, ZMQ_EVENTS, &ev, &sz) != 0 ||
            !(ev & ZMQ_POLLIN))
            return;
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, a->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        Kiln__Envelope *env = NULL;
        if (kl_net_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), &env, NULL) ==
            KL_OK) {
            if (env->body_case == KILN__ENVELOPE__BODY_WELCOME &&
                !a->welcomed) {
                a->welcomed = true;
                atomic_fetch_add(&g->welcomed, 1);
            } else if (env->body_case == KILN__ENVELOPE__BODY_REQUEST) {
                s_agent_request(g, a, env->request);
            } else if (env->body_case == KILN__ENVELOPE__BODY_GOODBYE) {
                kl_warn("bench_serve: a simulated agent got Goodbye: %s",
                        env->goodbye->reason ? env->goodbye->reason : "");
            }
        }
        kl_net_envelope_free(&env);
        zmq_msg_close(&msg);
    }
}

static void *s_agents_main(void *arg)
{
    bs_agents_t *g = arg;
    char tname[16];
    snprintf(tname, sizeof tname, "bench-agents%d", g->index);
    pthread_setname_np(pthread_self(), tname);
    struct epoll_event evs[256];
    double next_timer = 0;
    while (!bs_stop_all) {
        int wait = 10;
        if (g->h_n) {
            double d = g->held[0].due - kl_now_s();
            wait = d <= 0 ? 0 : d < 0.01 ? (int)(d * 1e3) + 1 : 10;
        }
        int n = epoll_wait(g->ep, evs, 256, wait);
        for (int i = 0; i < n; i++)
            s_agent_service(g, &g->agents[evs[i].data.u64]);
        double now = kl_now_s();
        while (g->h_n && g->held[0].due <= now) {
            bs_held_t h = s_unhold(g);
            s_agent_answer(g, &g->agents[h.agent], h.req_id, h.cand_id);
            s_agent_service(g, &g->agents[h.agent]);
        }
        if (now < next_timer)
            continue;
        next_timer = now + 0.05;
        for (size_t i = 0; i < g->n; i++) {
            bs_agent_t *a = &g->agents[i];
            if (now < a->next_hb)
                continue;
            /* Not welcomed yet: Hello again (the head may have been slow);
             * welcomed: a heartbeat. */
            if (a->welcomed)
                s_agent_heartbeat(a);
            else
                s_agent_hello(g, a, g->first + i);
            a->next_hb = now + g->hb_ms / 1000.0;
            s_agent_service(g, a);
        }
    }
    return NULL;
}

static int s_sock_key(void *sock, int opt, const char *path, char *err)
{
    char key[41];
    int rc = kl_net_read_key(path, key, err);
    if (rc == KL_OK && zmq_setsockopt(sock, opt, key, 40) != 0)
        rc = kl_seterr(err, KL_ERR_INVAL, "CURVE key %s: %s", path,
                       zmq_strerror(errno));
    return rc;
}

int bs_agents_start(bs_agents_t *g, void *ctx, size_t first, size_t n,
                    uint32_t credit, int hb_ms, const char *endpoint, char *err)
{
    g->ctx = ctx;
    g->first = first;
    g->n = n;
    g->credit = credit;
    g->hb_ms = hb_ms;
    g->agents = kl_xcalloc(n, sizeof *g->agents);
    g->rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)first;
    g->ep = epoll_create1(0);
    if (g->ep < 0)
        return kl_seterr(err, KL_ERR_IO, "epoll_create1: %s", strerror(errno));
    double now = kl_now_s();
    for (size_t i = 0; i < n; i++) {
        bs_agent_t *a = &g->agents[i];
        a->freed = kl_xcalloc(credit, sizeof *a->freed);
        a->sock = zmq_socket(ctx, ZMQ_DEALER);
        if (!a->sock)
            return kl_seterr(err, KL_ERR_IO, "agent socket %zu: %s", first + i,
                             zmq_strerror(errno));
        int zero = 0, tmo = 1000;
        zmq_setsockopt(a->sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(a->sock, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
        if (bs_curve_dir[0]) {
            char *pub = kl_xasprintf("%s/simagent/simagent.pub", bs_curve_dir);
            char *sec = kl_xasprintf("%s/simagent/simagent.key", bs_curve_dir);
            char *srv = kl_xasprintf("%s/coordinator.pub", bs_curve_dir);
            int rc = s_sock_key(a->sock, ZMQ_CURVE_SERVERKEY, srv, err);
            if (rc == KL_OK)
                rc = s_sock_key(a->sock, ZMQ_CURVE_PUBLICKEY, pub, err);
            if (rc == KL_OK)
                rc = s_sock_key(a->sock, ZMQ_CURVE_SECRETKEY, sec, err);
            free(pub);
            free(sec);
            free(srv);
            if (rc != KL_OK)
                return rc;
        }
        if (zmq_connect(a->sock, endpoint) != 0)
            return kl_seterr(err, KL_ERR_IO, "agent connect %s: %s", endpoint,
                             zmq_strerror(errno));
        int fd;
        size_t sz = sizeof fd;
        zmq_getsockopt(a->sock, ZMQ_FD, &fd, &sz);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            return kl_seterr(err, KL_ERR_IO, "epoll_ctl: %s", strerror(errno));
        s_agent_hello(g, a, first + i);
        /* Spread the heartbeats over the interval. */
        a->next_hb = now + (hb_ms / 1000.0) * (double)(i + 1) / (double)n;
    }
    if (pthread_create(&g->th, NULL, s_agents_main, g) != 0)
        return kl_seterr(err, KL_ERR_INTERNAL, "no agent thread");
    g->started = true;
    return KL_OK;
}

void bs_agents_free(bs_agents_t *g)
{
    for (size_t i = 0; i < g->n; i++) {
        if (g->agents[i].sock)
            zmq_close(g->agents[i].sock);
        free(g->agents[i].freed);
    }
    free(g->agents);
    free(g->lat);
    free(g->held);
    if (g->ep >= 0)
        close(g->ep);
}
