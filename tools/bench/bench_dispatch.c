/* bench_dispatch - coordinator dispatch throughput and latency with many
 * simulated agents (kiln-agent --simulate processes on loopback).
 *
 * Submits --candidates candidates in batches of --batch, keeping at most
 * --window not yet answered (default: the fleet's total credit, so the
 * queue stays short and the latency is dispatch's own), and reports, over
 * --runs runs: results/s (median, min, max) and the dispatch latency
 * (submit -> sent to an agent) p50 / p99 of each run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_fleet.h"
#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_log.h"
#include "kl_opt.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"agents", KL_OPT_INT, "200", 1, 2000, "N", "simulated agents"},
    {"candidates", KL_OPT_INT, "200000", 1, 1e8, "N", "candidates per run"},
    {"batch", KL_OPT_INT, "100", 1, 4096, "N", "candidates per submit"},
    {"window", KL_OPT_INT, "0", 0, 1e8, "N",
     "most candidates not yet answered (0: agents x (build slots + 1))"},
    {"build-slots", KL_OPT_INT, "2", 1, 64, "N",
     "agents' build slots (credit = slots + 1)"},
    {"runs", KL_OPT_INT, "3", 1, 100, "N", "runs (the median is reported)"},
    {"curve", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "CURVE with ephemeral keys instead of insecure loopback"},
    {"heartbeat-ms", KL_OPT_INT, "1000", 100, 60000, "MS", "heartbeat"},
    {"agent-log", KL_OPT_STR, "/dev/null", KL_NOBOUNDS, "FILE",
     "where the agents' stderr goes"},
    KL_OPT_END,
};

typedef struct {
    double rate, p50, p99, max, wall;
    uint64_t results, failed;
} s_run_t;

static int s_wait_agents(kl_dispatch_t *d, kl_fleet_t *f, size_t want,
                         char *err)
{
    double t0 = kl_now_s();
    size_t n = 0;
    while (kl_now_s() - t0 < 120) {
        if (kl_dispatch_agents(d, NULL, &n, err) != KL_OK)
            return KL_ERR_INTERNAL;
        if (n >= want) {
            fprintf(stderr, "bench_dispatch: %zu agents connected in %.1f s\n",
                    n, kl_now_s() - t0);
            return KL_OK;
        }
        if (kl_fleet_running(f) < want)
            return kl_seterr(err, KL_ERR_CLOSED,
                             "only %zu of %zu agent processes are running",
                             kl_fleet_running(f), want);
        kl_dispatch_result_t *r;
        if (kl_dispatch_recv(d, &r, 200, NULL) == KL_OK)
            kl_dispatch_result_free(&r);
    }
    return kl_seterr(err, KL_ERR_TIMEOUT, "%zu of %zu agents after 120 s", n,
                     want);
}

static int s_run(kl_dispatch_t *d, char **src, size_t total, size_t batch,
                 size_t window, s_run_t *out, char *err)
{
    uint8_t key[16];
    kl_hash128(src, sizeof src, key);
    Kiln__Candidate *c = kl_xcalloc(batch, sizeof *c);
    Kiln__Candidate **p = kl_xcalloc(batch, sizeof *p);
    Kiln__Evaluator ev = KILN__EVALUATOR__INIT;
    ev.timeout_ms = 1000;
    size_t sent = 0, got = 0;
    kl_dispatch_stats_t st0, st1;
    kl_dispatch_stats(d, &st0, err);
    double t0 = kl_now_s();
    int rc = KL_OK;
    while (got < total && rc == KL_OK) {
        while (sent < total && sent - got + batch <= window) {
            size_t n = total - sent < batch ? total - sent : batch;
            for (size_t i = 0; i < n; i++) {
                kiln__candidate__init(&c[i]);
                c[i].id = sent + i;
                c[i].source = src[sent + i];
                c[i].entry = "kernel";
                p[i] = &c[i];
            }
            kl_dispatch_batch_t b = {.workload_key = key,
                                     .target = "cpu",
                                     .reference_source = "",
                                     .reference_entry = "kernel",
                                     .evaluator = &ev,
                                     .candidates = p,
                                     .n_candidates = n};
            uint64_t id;
            rc = kl_dispatch_submit(d, &b, &id, err);
            if (rc != KL_OK)
                break;
            sent += n;
        }
        kl_dispatch_result_t *r;
        int wait = 5000;
        while (rc == KL_OK && kl_dispatch_recv(d, &r, wait, err) == KL_OK) {
            wait = 0;
            out->failed += r->result->status != KILN__STATUS__STATUS_OK;
            kl_dispatch_result_free(&r);
            got++;
        }
        if (wait)
            rc = kl_seterr(err, KL_ERR_TIMEOUT,
                           "no result for 5 s (%zu of "
                           "%zu)",
                           got, total);
    }
    out->wall = kl_now_s() - t0;
    kl_dispatch_stats(d, &st1, NULL);
    out->results = got;
    out->rate = got / out->wall;
    out->p50 = st1.latency_p50_s;
    out->p99 = st1.latency_p99_s;
    out->max = st1.latency_max_s;
    free(c);
    free(p);
    return rc;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void s_report(const s_run_t *runs, int n, kl_opts_t *o, bool curve)
{
    double rate[100], p50[100], p99[100];
    for (int i = 0; i < n; i++) {
        rate[i] = runs[i].rate;
        p50[i] = runs[i].p50 * 1e3;
        p99[i] = runs[i].p99 * 1e3;
        printf("run %d: %llu results in %.2f s = %.0f results/s, dispatch "
               "latency p50 %.3f ms p99 %.3f ms max %.3f ms, %llu not OK\n",
               i + 1, (unsigned long long)runs[i].results, runs[i].wall,
               runs[i].rate, p50[i], p99[i], runs[i].max * 1e3,
               (unsigned long long)runs[i].failed);
    }
    qsort(rate, (size_t)n, sizeof *rate, s_cmp);
    qsort(p50, (size_t)n, sizeof *p50, s_cmp);
    qsort(p99, (size_t)n, sizeof *p99, s_cmp);
    double mr = rate[n / 2], m99 = p99[n / 2];
    printf("\nbench_dispatch: %lld simulated agents (kiln-agent --simulate, "
           "loopback, %s), %lld candidates per run in batches of %lld\n",
           (long long)kl_opts_int(o, "agents"),
           curve ? "CURVE" : "INSECURE: no CURVE",
           (long long)kl_opts_int(o, "candidates"),
           (long long)kl_opts_int(o, "batch"));
    printf("  results/s        median %.0f (min %.0f, max %.0f)   goal >= "
           "10000: %s\n",
           mr, rate[0], rate[n - 1], mr >= 10000 ? "met" : "NOT met");
    printf("  latency p50      median %.3f ms\n", p50[n / 2]);
    printf("  latency p99      median %.3f ms (min %.3f, max %.3f)   goal < "
           "5 ms: %s\n",
           m99, p99[0], p99[n - 1], m99 < 5 ? "met" : "NOT met");
    printf("  (latency = submit -> MeasureRequest sent; coordinator and "
           "agents share this machine's cores)\n");
    printf("reproduce: ninja -C build tools/bench_dispatch agent/kiln-agent "
           "&& build/tools/bench_dispatch --agents %lld --candidates %lld "
           "--batch %lld --runs %d%s\n",
           (long long)kl_opts_int(o, "agents"),
           (long long)kl_opts_int(o, "candidates"),
           (long long)kl_opts_int(o, "batch"), n, curve ? " --curve" : "");
}

int main(int argc, char **argv)
{
    kl_log_init("bench_dispatch");
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o;
    if (kl_opts_parse(s_opts, argc - 1, argv + 1, &o, err) != KL_OK) {
        fprintf(stderr, "bench_dispatch: %s\n", err);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, "usage: bench_dispatch [options]", s_opts);
        kl_opts_free(&o);
        return 0;
    }
    bool curve = kl_opts_bool(o, "curve");
    size_t agents = (size_t)kl_opts_int(o, "agents");
    size_t total = (size_t)kl_opts_int(o, "candidates");
    size_t batch = (size_t)kl_opts_int(o, "batch");
    size_t slots = (size_t)kl_opts_int(o, "build-slots");
    size_t window = (size_t)kl_opts_int(o, "window");
    if (!window)
        window = agents * (slots + 1);
    if (window < batch)
        window = batch;
    int runs = (int)kl_opts_int(o, "runs");
    kl_fleet_config_t fc = {.n_agents = (int)agents,
                            .insecure = !curve,
                            .simulate = true,
                            .heartbeat_ms = (int)kl_opts_int(o, "heartbeat-ms"),
                            .build_slots = (int)slots,
                            .log_path = kl_opts_str(o, "agent-log")};
    kl_fleet_t *fleet = NULL;
    kl_dispatch_t *d = NULL;
    int rc = kl_fleet_new(&fleet, &fc, err);
    kl_dispatch_config_t dc = {.endpoint = "tcp://127.0.0.1:*",
                               .heartbeat_ms = fc.heartbeat_ms,
                               .retries = -1};
    if (rc == KL_OK) {
        dc.security = *kl_fleet_security(fleet);
        rc = kl_dispatch_new(&d, &dc, err);
    }
    if (rc == KL_OK)
        rc = kl_fleet_start(fleet, kl_dispatch_endpoint(d), err);
    if (rc == KL_OK)
        rc = s_wait_agents(d, fleet, agents, err);
    char **src = kl_xcalloc(total, sizeof *src);
    for (size_t i = 0; i < total; i++)
        src[i] = kl_xasprintf("void kernel(void *const *a) {} /* %zu */", i);
    s_run_t res[100] = {{0}};
    for (int r = 0; r < runs && rc == KL_OK; r++)
        rc = s_run(d, src, total, batch, window, &res[r], err);
    if (rc == KL_OK)
        s_report(res, runs, o, curve);
    else
        fprintf(stderr, "bench_dispatch: %s\n", err);
    kl_dispatch_destroy(&d);
    kl_fleet_destroy(&fleet);
    for (size_t i = 0; i < total; i++)
        free(src[i]);
    free(src);
    kl_opts_free(&o);
    return rc == KL_OK ? 0 : 1;
}
