/* coord_fx.h - a fake coordinator for a real kiln-agent on loopback: the
 * server socket an agent connects to, the agent's peer once it spoke, and
 * heartbeats sent while the test waits for a message. What the agent
 * tests (agent_test.c, cuda_agent_test.c) and tools/bench/bench_agent.c
 * share; it asserts nothing (no cmocka), so that a benchmark can use it.
 *
 * Usage: fx_coord_new, start the agent on fx_coord_endpoint, expect its
 * Hello, fx_coord_welcome, then requests with fx_coord_send and results
 * with fx_coord_expect; fx_coord_destroy. */
#ifndef COORD_FX_H
#define COORD_FX_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kl_err.h"
#include "kl_net.h"
#include "kl_util.h"

typedef struct {
    kl_net_t *server;
    kl_peer_t peer; /* the agent's, from its last message (len 0: none) */
    double next_hb;
    int hb_ms;          /* the interval the Welcome announces */
    double hb_every_s;  /* how often heartbeats go out: hb_ms / 4 */
    char target[64];    /* the device's, from Hello: what requests name */
    double welcomed_at; /* just before the Welcome went out */
} fx_coord_t;

/* A server on tcp://127.0.0.1:* (an ephemeral port), insecure, that
 * announces heartbeats every hb_ms and sends them four times as often
 * (hb_every_s, which the caller may change). Returns KL_OK or
 * kl_net_server_new's error (its message in err). */
static inline int fx_coord_new(fx_coord_t *c, int hb_ms, char *err)
{
    memset(c, 0, sizeof *c);
    c->hb_ms = hb_ms;
    c->hb_every_s = hb_ms / 4000.0;
    kl_net_security_t sec = {.insecure = true};
    return kl_net_server_new(&c->server, "tcp://127.0.0.1:*", &sec, err);
}

/* The endpoint the agent connects to (valid until fx_coord_destroy). */
static inline const char *fx_coord_endpoint(const fx_coord_t *c)
{
    return kl_net_endpoint(c->server);
}

/* Sends env to the agent; a failure is printed on stderr. Returns
 * kl_net_send's result. */
static inline int fx_coord_send(fx_coord_t *c, Kiln__Envelope *env)
{
    char err[KL_ERRMSG_LEN];
    int rc = kl_net_send(c->server, &c->peer, env, err);
    if (rc != KL_OK)
        fprintf(stderr, "fake coordinator: send: %s\n", err);
    return rc;
}

/* A heartbeat to the agent when one is due (never before it spoke). The
 * agent may be gone: a failed send is ignored. */
static inline void fx_coord_heartbeat(fx_coord_t *c)
{
    if (c->peer.len == 0 || kl_now_s() < c->next_hb)
        return;
    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    char err[KL_ERRMSG_LEN];
    (void)kl_net_send(c->server, &c->peer, &env, err);
    c->next_hb = kl_now_s() + c->hb_every_s;
}

/* Waits up to timeout_s (heartbeating) for a message whose body is want;
 * others are dropped. Returns it (free with kl_net_envelope_free), or
 * NULL on timeout. */
static inline Kiln__Envelope *fx_coord_expect(fx_coord_t *c, int want,
                                              double timeout_s)
{
    double end = kl_now_s() + timeout_s;
    while (kl_now_s() < end) {
        fx_coord_heartbeat(c);
        Kiln__Envelope *env = NULL;
        kl_peer_t from;
        char err[KL_ERRMSG_LEN];
        if (kl_net_recv(c->server, &from, &env, 50, err) != KL_OK)
            continue;
        c->peer = from;
        if ((int)env->body_case == want)
            return env;
        kl_net_envelope_free(&env);
    }
    return NULL;
}

/* Sends the Welcome (coordinator id, heartbeat_ms = hb_ms) and notes
 * welcomed_at. Returns fx_coord_send's result. */
static inline int fx_coord_welcome(fx_coord_t *c, const char *id)
{
    Kiln__Welcome w = KILN__WELCOME__INIT;
    w.coordinator_id = (char *)id;
    w.heartbeat_ms = (uint32_t)c->hb_ms;
    Kiln__Envelope out = KILN__ENVELOPE__INIT;
    out.body_case = KILN__ENVELOPE__BODY_WELCOME;
    out.welcome = &w;
    c->welcomed_at = kl_now_s();
    return fx_coord_send(c, &out);
}

/* Closes the server. Safe on a coordinator already destroyed. */
static inline void fx_coord_destroy(fx_coord_t *c)
{
    kl_net_destroy(&c->server);
}

#endif
