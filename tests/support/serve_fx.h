/* serve_fx.h - what the head node's tests share (serve_test.c,
 * serve_keys_test.c, port_fleet_test.c): a head (kl_serve) run on its
 * own thread on loopback, jobs and query clients through the fleet port
 * (kl_port_fleet), raw clients that speak the wire as another
 * implementation would, batches of candidates, and a directory of real
 * CURVE keys as kiln serve --keys reads it. Every helper fails the test
 * (cmocka) on what it did not expect. */
#ifndef SERVE_FX_H
#define SERVE_FX_H

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

typedef struct {
    kl_serve_t *s;
    pthread_t th;
    volatile sig_atomic_t stop;
} fx_head_t;

static inline void *fx_head_loop(void *arg)
{
    fx_head_t *h = arg;
    char err[KL_ERRMSG_LEN];
    kl_serve_run(h->s, &h->stop, err);
    return NULL;
}

static inline void fx_head_start_cfg(fx_head_t *h, const kl_serve_config_t *cfg)
{
    memset(h, 0, sizeof *h);
    char err[KL_ERRMSG_LEN];
    /* A head restarted in this process binds the port its predecessor
     * closed: ZeroMQ's I/O thread closes that listener asynchronously,
     * which on a loaded machine can take a moment. */
    int rc = kl_serve_new(&h->s, cfg, err);
    for (int i = 0; rc && i < 100; i++) {
        usleep(50000);
        rc = kl_serve_new(&h->s, cfg, err);
    }
    if (rc)
        fail_msg("kl_serve_new on %s: %s", cfg->clients_endpoint, err);
    assert_int_equal(pthread_create(&h->th, NULL, fx_head_loop, h), 0);
}

static inline void fx_head_start_at(fx_head_t *h, double client_timeout_s,
                                    const char *clients)
{
    kl_serve_config_t cfg = {.agents_endpoint = "tcp://127.0.0.1:*",
                             .clients_endpoint = clients,
                             .insecure = true,
                             .heartbeat_ms = 100,
                             .client_timeout_s = client_timeout_s};
    fx_head_start_cfg(h, &cfg);
}

static inline void fx_head_start(fx_head_t *h, double client_timeout_s)
{
    fx_head_start_at(h, client_timeout_s, "tcp://127.0.0.1:*");
}

static inline void fx_head_stop(fx_head_t *h)
{
    h->stop = 1;
    pthread_join(h->th, NULL);
    kl_serve_destroy(&h->s);
    assert_null(h->s);
}

static inline kl_port_fleet_t *fx_job(fx_head_t *h, const char *name, int *rc,
                                      char *err)
{
    kl_port_fleet_config_t cfg = {.endpoint = kl_serve_clients_endpoint(h->s),
                                  .security = {.insecure = true},
                                  .name = name,
                                  .connect_s = 5};
    kl_port_fleet_t *f = NULL;
    *rc = kl_port_fleet_new(&f, &cfg, err);
    return f;
}

/* A batch of n candidates (ids 100 + i). */
typedef struct {
    Kiln__Candidate c[8];
    Kiln__Candidate *p[8];
    uint8_t key[16];
    kl_dispatch_batch_t b;
} fx_batch_t;

static inline void fx_batch(fx_batch_t *sb, size_t n)
{
    memset(sb, 0, sizeof *sb);
    for (size_t i = 0; i < n; i++) {
        kiln__candidate__init(&sb->c[i]);
        sb->c[i].id = 100 + i;
        sb->c[i].source = "void k(void) {}";
        sb->c[i].entry = "k";
        sb->p[i] = &sb->c[i];
    }
    sb->b.workload_key = sb->key;
    sb->b.target = "sim/cpu";
    sb->b.candidates = sb->p;
    sb->b.n_candidates = n;
}

/* The status line of job name: queued and in flight, or false if absent. */
static inline bool fx_job_status(kl_port_fleet_t *f, const char *name,
                                 uint64_t *queued, uint64_t *done)
{
    Kiln__Envelope *env = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_port_fleet_status(f, &env, 5000, err), KL_OK);
    bool found = false;
    for (size_t i = 0; i < env->status_reply->n_jobs; i++) {
        const Kiln__JobStatus *j = env->status_reply->jobs[i];
        if (strcmp(j->name, name) == 0) {
            found = true;
            if (queued)
                *queued = j->queued;
            if (done)
                *done = j->done;
        }
    }
    kl_net_envelope_free(&env);
    return found;
}

/* A raw client: the wire as another implementation would speak it. */
static inline void fx_raw_send(kl_net_t *c, Kiln__Envelope *env)
{
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_net_send(c, NULL, env, err), KL_OK);
}

static inline Kiln__Envelope *fx_raw_recv(kl_net_t *c,
                                          Kiln__Envelope__BodyCase want)
{
    char err[KL_ERRMSG_LEN];
    for (int i = 0; i < 100; i++) {
        Kiln__Envelope *env = NULL;
        if (kl_net_recv(c, NULL, &env, 100, err) != KL_OK)
            continue;
        if (env->body_case == want)
            return env;
        kl_net_envelope_free(&env);
    }
    fail_msg("no message of body %d", (int)want);
    return NULL;
}

static inline void fx_raw_request(kl_net_t *c, uint64_t id, fx_batch_t *sb)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
    m.request_id = id;
    m.workload_key.data = sb->key;
    m.workload_key.len = 16;
    m.target = "sim/cpu";
    m.candidates = sb->p;
    m.n_candidates = sb->b.n_candidates;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &m;
    fx_raw_send(c, &env);
}

static inline char *fx_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return kl_xstrdup(buf);
}

/* A keys directory as kiln serve --keys reads it: coordinator.key/.pub,
 * clients alice and bob (clients/), operator op (operators/ only), agents
 * ag1 and ag2 (agents/); each side's pair in the same directory. */
typedef struct {
    char dir[512];
    char server[600]; /* coordinator.pub */
} fx_keys_t;

static inline void fx_keys_allow(const fx_keys_t *k, const char *name,
                                 const char *sub)
{
    char err[KL_ERRMSG_LEN], *data = NULL;
    size_t len = 0;
    char *from = kl_xasprintf("%s/%s.pub", k->dir, name);
    char *adir = kl_xasprintf("%s/%s", k->dir, sub);
    char *to = kl_xasprintf("%s/%s.pub", adir, name);
    assert_int_equal(kl_mkdirs(adir, err), KL_OK);
    assert_int_equal(kl_read_file(from, &data, &len, err), KL_OK);
    assert_int_equal(kl_write_file(to, data, len, err), KL_OK);
    free(data);
    free(to);
    free(adir);
    free(from);
}

static inline void fx_keys_make(fx_keys_t *k)
{
    char err[KL_ERRMSG_LEN];
    assert_non_null(
        kl_test_mkdtemp(k->dir, sizeof k->dir, "kl-serve-keys-XXXXXX"));
    snprintf(k->server, sizeof k->server, "%s/coordinator.pub", k->dir);
    const char *names[] = {"coordinator", "alice", "bob", "op", "ag1", "ag2"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        assert_int_equal(kl_net_keygen(k->dir, names[i], err), KL_OK);
    fx_keys_allow(k, "alice", "clients");
    fx_keys_allow(k, "bob", "clients");
    fx_keys_allow(k, "op", "operators");
    fx_keys_allow(k, "ag1", "agents");
    fx_keys_allow(k, "ag2", "agents");
}

static inline char *fx_key_of(const fx_keys_t *k, const char *name)
{
    char err[KL_ERRMSG_LEN], key[41];
    char *path = kl_xasprintf("%s/%s.pub", k->dir, name);
    assert_int_equal(kl_net_read_key(path, key, err), KL_OK);
    free(path);
    return kl_xstrdup(key);
}

static inline int fx_rm_one(const char *p, const struct stat *st, int flag,
                            struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static inline void fx_keys_free(fx_keys_t *k)
{
    nftw(k->dir, fx_rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static inline kl_net_security_t fx_sec(const fx_keys_t *k, const char *name)
{
    return (kl_net_security_t){
        .keys_dir = k->dir, .name = name, .server_key_file = k->server};
}

/* A CURVE head on loopback (heartbeats every 100 ms, so a connection is
 * "silent" for a takeover after 0.3 s); cfg's limits as given. */
static inline void fx_head_start_keys(fx_head_t *h, const fx_keys_t *k,
                                      kl_serve_config_t cfg)
{
    cfg.agents_endpoint = "tcp://127.0.0.1:*";
    cfg.clients_endpoint = "tcp://127.0.0.1:*";
    cfg.keys_dir = k->dir;
    cfg.heartbeat_ms = 100;
    if (!cfg.client_timeout_s)
        cfg.client_timeout_s = 30;
    fx_head_start_cfg(h, &cfg);
}

/* A job (name) or a query-only client (name NULL) with key's pair. */
static inline kl_port_fleet_t *fx_port_as(fx_head_t *h, const fx_keys_t *k,
                                          const char *key, const char *name,
                                          int *rc, char *err)
{
    kl_port_fleet_config_t cfg = {.endpoint = kl_serve_clients_endpoint(h->s),
                                  .security = fx_sec(k, key),
                                  .name = name,
                                  .connect_s = 5};
    kl_port_fleet_t *f = NULL;
    *rc = kl_port_fleet_new(&f, &cfg, err);
    return f;
}

/* A raw client with key's pair (k NULL: insecure). */
static inline kl_net_t *fx_raw_as(const char *endpoint, const fx_keys_t *k,
                                  const char *key)
{
    char err[KL_ERRMSG_LEN];
    kl_net_security_t sec =
        k ? fx_sec(k, key) : (kl_net_security_t){.insecure = true};
    kl_net_t *c = NULL;
    if (kl_net_client_new(&c, endpoint, &sec, err) != KL_OK)
        fail_msg("client %s: %s", key ? key : "(insecure)", err);
    return c;
}

static inline void fx_raw_hello(kl_net_t *c, const char *name)
{
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    Kiln__JobHello hello = KILN__JOB_HELLO__INIT;
    hello.name = (char *)name;
    env.body_case = KILN__ENVELOPE__BODY_JOB_HELLO;
    env.job_hello = &hello;
    fx_raw_send(c, &env);
}

#endif
