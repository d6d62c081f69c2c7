/* agent.c - the kiln-agent actor: connection, Hello/Welcome, heartbeats,
 * requests, cancels, goodbyes and results. */
#include "kla_agent.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_target.h"
#include "kl_util.h"
#include "kla_agent_int.h"
#include "kla_jail.h"
#include "kla_simulate.h"

/* ---- sending ----------------------------------------------------------- */

static void s_send(kla_agent_t *a, Kiln__Envelope *env)
{
    char err[KL_ERRMSG_LEN];
    if (kl_net_send(a->net, NULL, env, err) != KL_OK)
        kl_warn("agent: send to coordinator: %s", err);
}

void kla_agent__send_result(kla_agent_t *a, uint64_t request_id,
                            uint64_t cand_id, const kla_result_t *r,
                            const kla_build_t *b, double overhead_s,
                            bool simulated)
{
    Kiln__MeasureResult m = KILN__MEASURE_RESULT__INIT;
    m.request_id = request_id;
    m.candidate_id = cand_id;
    m.status = r->status;
    m.n_samples = r->n_samples;
    m.samples = r->samples;
    m.error = (char *)r->error; /* bounded: KLA_ERROR_MAX */
    m.max_abs_err = r->max_abs_err;
    m.simulated = simulated;
    m.number = r->number;
    m.spread = r->spread;
    m.overhead_s = overhead_s;
    m.unsandboxed = kla_jail_unsafe() && !simulated;
    if (b) {
        m.compile_s = b->compile_s;
        m.cache_hit = b->cache_hit;
    }
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_RESULT;
    env.result = &m;
    atomic_fetch_add(&a->st_results, 1); /* before: a peer may look now */
    s_send(a, &env);
}

static void s_send_hello(kla_agent_t *a)
{
    Kiln__DeviceInfo info[KLA_MAX_DEVICES];
    Kiln__DeviceInfo *devs[KLA_MAX_DEVICES];
    for (int i = 0; i < a->ndev; i++) {
        kla_dev_t *d = &a->dev[i];
        d->backend->info(d, &a->env, &info[i]);
        info[i].target = d->target; /* "sim/..." when it only pretends */
        info[i].simulated = d->stand_in || a->cfg.simulate;
        info[i].index = (uint32_t)i;
        devs[i] = &info[i];
    }
    Kiln__Hello h = KILN__HELLO__INIT;
    h.agent_name = a->name;
    h.hostname = a->hostname;
    h.pid = (uint32_t)getpid();
    h.build_slots = (uint32_t)a->build_slots;
    h.n_devices = (size_t)a->ndev;
    h.devices = devs;
    h.unsandboxed = kla_jail_unsafe();
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    atomic_fetch_add(&a->st_hellos, 1);
    s_send(a, &env);
}

static void s_send_heartbeat(kla_agent_t *a)
{
    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    hb.seq = ++a->hb_seq;
    hb.busy = (uint32_t)(a->held > 0 ? a->held : 0);
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    s_send(a, &env);
}

static void s_send_goodbye(kla_agent_t *a, const char *reason)
{
    Kiln__Goodbye g = KILN__GOODBYE__INIT;
    g.reason = (char *)reason;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_GOODBYE;
    env.goodbye = &g;
    s_send(a, &env);
}

/* ---- receiving -------------------------------------------------------- */

/* Answers every candidate of m with one status and message. */
static void s_reject(kla_agent_t *a, const Kiln__MeasureRequest *m,
                     Kiln__Status st, const char *msg)
{
    kla_result_t r = {.status = st};
    snprintf(r.error, sizeof r.error, "%s", msg);
    for (size_t i = 0; i < m->n_candidates; i++)
        kla_agent__send_result(a, m->request_id, m->candidates[i]->id, &r, NULL,
                               0, a->cfg.simulate);
}

static void s_simulate(kla_agent_t *a, const Kiln__MeasureRequest *m)
{
    for (size_t i = 0; i < m->n_candidates; i++) {
        double t0 = kl_now_s();
        const Kiln__Candidate *c = m->candidates[i];
        kla_result_t r;
        kla_simulate(c->source, strlen(c->source), &r);
        if (a->cfg.simulate_ms > 0) { /* stands for the time of a real one */
            struct timespec ts = {a->cfg.simulate_ms / 1000,
                                  (a->cfg.simulate_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        kla_agent__send_result(a, m->request_id, c->id, &r, NULL,
                               kl_now_s() - t0, true);
        kla_result_clear(&r);
    }
}

static void s_on_request(kla_agent_t *a, const Kiln__MeasureRequest *m)
{
    atomic_fetch_add(&a->st_requests, 1);
    char err[KL_ERRMSG_LEN];
    if (a->cfg.simulate && m->target && *m->target &&
        !kl_target_is_sim(m->target)) {
        /* Fake latencies must never come back as measurements of a real
         * target, whoever asks for them. */
        snprintf(err, sizeof err,
                 "target %.100s: this agent only simulates (--simulate); it "
                 "serves %s targets only",
                 m->target, KL_TARGET_SIM);
        kl_warn("agent: request %llu rejected: %s",
                (unsigned long long)m->request_id, err);
        s_reject(a, m, KILN__STATUS__STATUS_INVALID, err);
        return;
    }
    if (a->cfg.simulate) {
        s_simulate(a, m);
        return;
    }
    kla_problem_t p;
    uint64_t max_bytes = a->cfg.max_mem_mb << 20;
    int dev = 0;
    int rc = kla_problem_from_request(&p, m, max_bytes, err);
    if (rc == KL_OK)
        rc = kla_agent__work_device(a, m->device_index, &dev, err);
    const kla_dev_t *d = &a->dev[dev];
    if (rc == KL_OK && m->target && *m->target &&
        strcmp(m->target, d->target) != 0)
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "target %.100s does not match device %u's %s", m->target,
                       m->device_index, d->target);
    if (rc == KL_OK && d->backend->check_request)
        rc = d->backend->check_request(d, m, err);
    if (rc == KL_OK && (!*m->reference_source || !*m->reference_entry))
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "request has no reference kernel (source and entry)");
    for (size_t i = 0; rc == KL_OK && i < m->n_candidates; i++)
        if (!*m->candidates[i]->source || !*m->candidates[i]->entry)
            rc = kl_seterr(err, KL_ERR_INVAL,
                           "candidate %llu has no source or no entry",
                           (unsigned long long)m->candidates[i]->id);
    if (rc != KL_OK) {
        kl_warn("agent: request %llu rejected: %s",
                (unsigned long long)m->request_id, err);
        s_reject(a, m, KILN__STATUS__STATUS_INVALID, err);
        return;
    }
    kla_agent__work_add(a, m, &p, dev);
}

/* The coordinator left or was lost: forget its work, Hello again later. */
static void s_lost(kla_agent_t *a, double hello_in_s)
{
    kla_agent__work_forget(a);
    a->welcomed = false;
    a->next_hello = kl_now_s() + hello_in_s;
}

static void s_on_envelope(kla_agent_t *a, Kiln__Envelope *env)
{
    a->last_heard = kl_now_s();
    switch (env->body_case) {
    case KILN__ENVELOPE__BODY_WELCOME:
        atomic_fetch_add(&a->st_welcomes, 1);
        a->welcomed = true;
        if (env->welcome->heartbeat_ms >= 10 &&
            env->welcome->heartbeat_ms <= 600000)
            a->hb_ms = (int)env->welcome->heartbeat_ms;
        kl_info("agent: welcomed by %s (heartbeat %d ms)",
                env->welcome->coordinator_id, a->hb_ms);
        break;
    case KILN__ENVELOPE__BODY_REQUEST:
        s_on_request(a, env->request);
        break;
    case KILN__ENVELOPE__BODY_CANCEL:
        kla_agent__work_cancel(a, env->cancel->request_id);
        break;
    case KILN__ENVELOPE__BODY_GOODBYE:
        atomic_fetch_add(&a->st_goodbyes, 1);
        kl_info("agent: coordinator said goodbye: %s", env->goodbye->reason);
        s_lost(a, a->hb_ms / 1000.0);
        break;
    case KILN__ENVELOPE__BODY_HEARTBEAT:
        break;
    default:
        kl_debug("agent: ignored a message of kind %d", env->body_case);
    }
}

static void s_drain_net(kla_agent_t *a)
{
    for (;;) {
        Kiln__Envelope *env = NULL;
        char err[KL_ERRMSG_LEN];
        int rc = kl_net_recv(a->net, NULL, &env, 0, err);
        if (rc == KL_ERR_TIMEOUT)
            break;
        if (rc == KL_OK)
            s_on_envelope(a, env);
        else
            kl_warn("agent: dropped a message: %s", err);
        kl_net_envelope_free(&env);
        if (rc != KL_OK && rc != KL_ERR_PROTO && rc != KL_ERR_VERSION)
            break;
    }
}

/* ---- the loop ---------------------------------------------------------- */

static void s_timers(kla_agent_t *a)
{
    double now = kl_now_s(), hb = a->hb_ms / 1000.0;
    if (a->welcomed && now - a->last_heard > 3 * hb) {
        kl_warn("agent: coordinator silent for %.1f s, saying Hello again",
                now - a->last_heard);
        s_lost(a, 0);
    }
    if (!a->welcomed && now >= a->next_hello) {
        s_send_hello(a);
        a->last_heard = now;
        a->next_hello = now + 3 * hb;
    }
    if (a->welcomed && now >= a->next_hb) {
        s_send_heartbeat(a);
        a->next_hb = now + hb;
    }
}

static double s_next_timer(kla_agent_t *a)
{
    double hb = a->hb_ms / 1000.0;
    if (!a->welcomed)
        return a->next_hello;
    double t = a->last_heard + 3 * hb + 0.001;
    return a->next_hb < t ? a->next_hb : t;
}

static void *s_actor(void *arg)
{
    kla_agent_t *a = arg;
    int nb = a->cfg.simulate ? 0 : a->build_slots;
    int nd = a->cfg.simulate ? 0 : a->ndev;
    int n = 2 + nb + nd;
    zmq_pollitem_t *items = kl_xcalloc((size_t)n, sizeof *items);
    a->next_hello = kl_now_s();
    while (!a->stopping) {
        s_timers(a);
        if (!a->cfg.simulate)
            kla_agent__work_dispatch(a);
        items[0] = (zmq_pollitem_t){a->pipe_actor, 0, ZMQ_POLLIN, 0};
        items[1] = (zmq_pollitem_t){kl_net_socket(a->net), 0, ZMQ_POLLIN, 0};
        for (int i = 0; i < nb; i++)
            items[2 + i] =
                (zmq_pollitem_t){a->builders[i].sock, 0, ZMQ_POLLIN, 0};
        for (int d = 0; d < nd; d++)
            items[2 + nb + d] =
                (zmq_pollitem_t){a->run_w[d].sock, 0, ZMQ_POLLIN, 0};
        double wait = s_next_timer(a) - kl_now_s();
        long ms = wait <= 0 ? 0 : (long)(wait * 1000.0) + 1;
        int rc = zmq_poll(items, n, ms);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc <= 0)
            continue;
        if (items[0].revents & ZMQ_POLLIN)
            a->stopping = true;
        for (int i = 0; i < nb; i++)
            if (items[2 + i].revents & ZMQ_POLLIN)
                kla_agent__work_collect(a, &a->builders[i], false);
        for (int d = 0; d < nd; d++)
            if (items[2 + nb + d].revents & ZMQ_POLLIN)
                kla_agent__work_collect(a, &a->run_w[d], true);
        if (items[1].revents & ZMQ_POLLIN)
            s_drain_net(a);
    }
    free(items);
    s_send_goodbye(a, "agent shutting down");
    if (!a->cfg.simulate)
        kla_agent__work_stop(a);
    return NULL;
}

/* ---- life cycle --------------------------------------------------------- */

static int s_rm_entry(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Parses a core list that must lie inside the allowed set. */
static int s_cores(const char *what, const char *text,
                   const kla_cores_t *allowed, kla_cores_t *out, char *err)
{
    if (!text || !*text) {
        *out = *allowed;
        return KL_OK;
    }
    char msg[KL_ERRMSG_LEN];
    if (kla_cores_parse(text, out, msg) != KL_OK)
        return kl_seterr(err, KL_ERR_INVAL, "--%s: %s", what, msg);
    for (int i = 0; i < out->n; i++) {
        bool ok = false;
        for (int j = 0; j < allowed->n && !ok; j++)
            ok = allowed->cpu[j] == out->cpu[i];
        if (!ok) {
            char have[256];
            kla_cores_format(allowed, have, sizeof have);
            return kl_seterr(err, KL_ERR_INVAL,
                             "--%s: core %d is not available to this process "
                             "(allowed: %s)",
                             what, out->cpu[i], have);
        }
    }
    return KL_OK;
}

static int s_workdir(kla_agent_t *a, const char *given, char *err)
{
    if (given && *given) {
        snprintf(a->workdir, sizeof a->workdir, "%s", given);
        return kl_mkdirs(given, err);
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(a->workdir, sizeof a->workdir, "%s/kiln-agent-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(a->workdir))
        return kl_seterr(err, KL_ERR_IO, "mkdtemp %s: %s", a->workdir,
                         strerror(errno));
    a->own_workdir = true;
    return KL_OK;
}

/* Each backend's builders and runners (not in --simulate). */
static int s_open(kla_agent_t *a, char *err)
{
    int rc = KL_OK;
    for (int k = 0; rc == KL_OK && k < KL_TARGET__KINDS; k++) {
        int first = a->kinds[k].first, n = a->kinds[k].n;
        if (n)
            rc = a->dev[first].backend->open(&a->dev[first], n, &a->env, err);
    }
    return rc;
}

static int s_pipes(kla_agent_t *a, char *err)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://kla-%p-pipe", (void *)a);
    a->zctx = zmq_ctx_new();
    if (!a->zctx)
        return kl_seterr(err, KL_ERR_IO, "zmq_ctx_new: %s",
                         zmq_strerror(errno));
    a->pipe_actor = zmq_socket(a->zctx, ZMQ_PAIR);
    a->pipe_api = zmq_socket(a->zctx, ZMQ_PAIR);
    if (!a->pipe_actor || !a->pipe_api || zmq_bind(a->pipe_actor, ep) != 0 ||
        zmq_connect(a->pipe_api, ep) != 0)
        return kl_seterr(err, KL_ERR_IO, "inproc pipe: %s",
                         zmq_strerror(errno));
    return KL_OK;
}

/* The devices of --device, probed by their backends, kinds in registry
 * order. */
static int s_devices(kla_agent_t *a, const kla_agent_config_t *cfg, char *err)
{
    kla_devspec_t spec;
    int rc = kla_devspec_parse(
        cfg->device && *cfg->device ? cfg->device : "cpu", &spec, err);
    for (int k = 0; rc == KL_OK && k < KL_TARGET__KINDS; k++) {
        const kla_backend_t *b = kla_backend_of((kl_target_kind)k);
        a->kinds[k].first = a->ndev;
        if (!kla_devsel_any(&spec.sel[k]))
            continue;
        if (!b)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "--device: this agent has no %s backend",
                             kl_target_kind_info((kl_target_kind)k)->name);
        if (a->ndev + b->max_devices > KLA_MAX_DEVICES)
            return kl_seterr(err, KL_ERR_INVAL,
                             "--device: more than %d devices", KLA_MAX_DEVICES);
        int n = 0;
        rc = b->probe(&spec.sel[k], &a->env, &a->dev[a->ndev], &n, err);
        for (int i = 0; i < n; i++)
            a->dev[a->ndev + i].backend = b;
        a->kinds[k].n = n;
        a->ndev += n;
    }
    return rc;
}

/* What the backends get: set before probing, the core lists filled in
 * before open. */
static void s_env(kla_agent_t *a, const kla_agent_config_t *cfg)
{
    a->env = (kla_env_t){.host = &a->host,
                         .workdir = a->workdir,
                         .cc = cfg->cc,
                         .cflags = cfg->cflags,
                         .measure = &a->measure,
                         .build = &a->build,
                         .max_mem_mb = cfg->max_mem_mb,
                         .flush_mb = cfg->flush_mb,
                         .worker_path = cfg->gpu_worker,
                         .simulate = cfg->simulate};
}

/* A device that only pretends to measure names a target of its own
 * (kl_target.h: "sim/cpu/x86_64-avx512"), so that no coordinator sends it
 * work for the real target or keys its results as measurements of it. */
static void s_sim_target(char *target, size_t len)
{
    char sim[64];
    kl_target_sim(target, sim, sizeof sim);
    /* Cut to fit, it still starts with "sim/". */
    size_t n = strlen(sim) < len ? strlen(sim) : len - 1;
    memcpy(target, sim, n);
    target[n] = '\0';
}

static int s_setup(kla_agent_t *a, const kla_agent_config_t *cfg, char *err)
{
    kla_device_detect(&a->host);
    s_env(a, cfg);
    int drc = s_devices(a, cfg, err);
    if (drc != KL_OK)
        return drc;
    for (int i = 0; cfg->simulate && i < a->ndev; i++)
        if (!kl_target_is_sim(a->dev[i].target))
            s_sim_target(a->dev[i].target, sizeof a->dev[i].target);
    if (gethostname(a->hostname, sizeof a->hostname - 1) != 0)
        snprintf(a->hostname, sizeof a->hostname, "unknown");
    snprintf(a->name, sizeof a->name, "%s",
             cfg->name && *cfg->name ? cfg->name : "");
    if (!a->name[0])
        snprintf(a->name, sizeof a->name, "%.200s-%d", a->hostname,
                 (int)getpid());
    kla_cores_t allowed;
    kla_cores_affinity(&allowed);
    int rc = s_cores("measure-cores", cfg->measure_cores, &allowed, &a->measure,
                     err);
    if (rc == KL_OK)
        rc = s_cores("build-cores", cfg->build_cores, &allowed, &a->build, err);
    if (rc != KL_OK)
        return rc;
    a->measure_given = cfg->measure_cores && *cfg->measure_cores;
    a->disjoint = a->measure_given && cfg->build_cores && *cfg->build_cores &&
                  kla_cores_disjoint(&a->measure, &a->build);
    a->build_slots = cfg->build_slots > 0 ? cfg->build_slots
                     : a->disjoint        ? a->build.n
                                          : (int)a->host.cores;
    if (a->build_slots < 1)
        a->build_slots = 1;
    a->hb_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : 1000;
    a->env.measure_given = a->measure_given;
    a->env.disjoint = a->disjoint;
    a->env.build_slots = a->build_slots;
    rc = s_workdir(a, cfg->workdir, err);
    if (rc == KL_OK && !cfg->simulate)
        rc = s_open(a, err);
    if (rc == KL_OK)
        rc = s_pipes(a, err);
    if (rc == KL_OK)
        rc = kl_net_client_new(&a->net, cfg->endpoint, &cfg->sec, err);
    if (rc == KL_OK && !cfg->simulate)
        rc = kla_agent__work_start(a, err);
    return rc;
}

#if defined(__SANITIZE_ADDRESS__)
#define S_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define S_ASAN 1
#endif
#endif

/* Kernel processes inherit the agent's address space, so a limit close to
 * it leaves them no room; say so once at start. */
static void s_check_mem(uint64_t max_mb)
{
#ifndef S_ASAN
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!max_mb || !f || fscanf(f, "%lu", &pages) != 1) {
        if (f)
            fclose(f);
        return;
    }
    fclose(f);
    uint64_t own = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE) >> 20;
    if (own + 256 > max_mb)
        kl_warn("agent: --max-mem-mb %llu leaves kernels little room: they "
                "inherit the agent's %llu MiB of address space",
                (unsigned long long)max_mb, (unsigned long long)own);
#else
    (void)max_mb;
#endif
}

int kla_agent_new(kla_agent_t **out, const kla_agent_config_t *cfg, char *err)
{
    *out = NULL;
    if (!cfg->endpoint || !*cfg->endpoint)
        return kl_seterr(err, KL_ERR_INVAL, "no coordinator endpoint");
    kla_agent_t *a = kl_xcalloc(1, sizeof *a);
    a->cfg = *cfg;
    int rc = s_setup(a, cfg, err);
    /* Strings of cfg are borrowed for the call only. */
    a->cfg = (kla_agent_config_t){.simulate = cfg->simulate,
                                  .simulate_ms = cfg->simulate_ms,
                                  .max_mem_mb = cfg->max_mem_mb};
    if (rc == KL_OK && pthread_create(&a->actor, NULL, s_actor, a) != 0)
        rc = kl_seterr(err, KL_ERR_IO, "pthread_create failed");
    if (rc != KL_OK) {
        kla_agent_destroy(&a);
        return rc;
    }
    a->actor_started = true;
    if (!cfg->simulate)
        s_check_mem(cfg->max_mem_mb);
    for (int i = 0; i < a->ndev; i++) {
        char line[1024];
        a->dev[i].backend->describe(&a->dev[i], &a->env, line, sizeof line);
        kl_info("agent %s: %s", a->name, line);
    }
    *out = a;
    return KL_OK;
}

void kla_agent_destroy(kla_agent_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_agent_t *a = *self_p;
    if (a->actor_started) {
        zmq_send(a->pipe_api, "$TERM", 5, 0);
        pthread_join(a->actor, NULL);
    } else if (!a->cfg.simulate) {
        kla_agent__work_stop(a);
    }
    kl_net_destroy(&a->net);
    if (a->pipe_api)
        zmq_close(a->pipe_api);
    if (a->pipe_actor)
        zmq_close(a->pipe_actor);
    if (a->zctx)
        zmq_ctx_term(a->zctx);
    for (int k = 0; k < KL_TARGET__KINDS; k++) {
        int first = a->kinds[k].first, n = a->kinds[k].n;
        if (n)
            a->dev[first].backend->close(&a->dev[first], n);
    }
    if (a->own_workdir)
        nftw(a->workdir, s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(a);
    *self_p = NULL;
}

void kla_agent_stats(kla_agent_t *a, kla_agent_stats_t *out)
{
    out->hellos = atomic_load(&a->st_hellos);
    out->welcomes = atomic_load(&a->st_welcomes);
    out->goodbyes = atomic_load(&a->st_goodbyes);
    out->requests = atomic_load(&a->st_requests);
    out->results = atomic_load(&a->st_results);
    out->cancelled = atomic_load(&a->st_cancelled);
}
