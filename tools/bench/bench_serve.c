/* bench_serve - how far one head node (`kiln serve`, kl_serve.h) goes:
 * a kl_serve_t in its own thread, many simulated agents and concurrent
 * jobs, all on loopback in this one process.
 *
 * The agents are simulated in-process: one thread (--agent-threads) drives
 * a DEALER socket per agent that speaks the agent protocol (Hello /
 * Welcome, heartbeats, credit = build slots + 1) and answers every
 * candidate of a MeasureRequest at once with a simulated OK result; no
 * kiln-agent process runs, nothing is compiled. The jobs are
 * kl_port_fleet_t clients, one thread each, that keep --window candidates
 * not yet answered (so the head always has work of every job queued),
 * submitting batches of --batch.
 *
 * Each run has two phases on the same head and agents: --jobs jobs of
 * weight 1, then --jobs jobs of weights 1..--max-weight (cycling). After
 * --warmup seconds each phase counts for --seconds:
 *  - results/s: results the jobs received through the head;
 *  - dispatch latency: from a simulated agent sending a result (which frees
 *    one credit) to the next candidate reaching that agent. With every
 *    job's queue full, this is how long a free agent waits for work: the
 *    result's trip through dispatch to the head, the head's decision, and
 *    the chunk's trip through dispatch back to the agent;
 *  - fairness: each job's share of the results; for equal weights, the
 *    spread (max - min) / mean; for the weighted phase, share / weight of
 *    each weight relative to the mean of share / weight;
 *  - CPU seconds per second of each thread group (head, dispatch, agents,
 *    jobs, ZeroMQ I/O), from /proc/self/task.
 *
 * The simulated agents are in bench_serve_sim.c; this file holds the head,
 * the jobs, the phases and the report.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bench_serve_sim.h"
#include "kl_fleet.h"
#include "kl_err.h"
#include "kl_log.h"
#include "kl_net.h"
#include "kl_opt.h"
#include "kl_port_fleet.h"
#include "kl_serve.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"agents", KL_OPT_INT, "1000", 1, 4000, "N",
     "simulated agents (in-process DEALER sockets)"},
    {"jobs", KL_OPT_INT, "20", 1, 200, "N", "concurrent jobs"},
    {"seconds", KL_OPT_DOUBLE, "5", 0.5, 600, "S", "measured time per phase"},
    {"warmup", KL_OPT_DOUBLE, "1", 0, 60, "S", "time before measuring"},
    {"runs", KL_OPT_INT, "3", 1, 50, "N", "runs (median and spread)"},
    {"build-slots", KL_OPT_INT, "2", 0, 64, "N",
     "agents' build slots (credit = slots + 1)"},
    {"batch", KL_OPT_INT, "50", 1, 4096, "N", "candidates per job request"},
    {"window", KL_OPT_INT, "0", 0, 1e7, "N",
     "candidates a job of mean weight keeps unanswered (0: 12 x total "
     "credit / jobs)"},
    {"max-weight", KL_OPT_INT, "4", 0, 100, "W",
     "weighted phase: weights 1..W (0: no weighted phase)"},
    {"paced-rate", KL_OPT_DOUBLE, "20000", 0, 1e7, "R",
     "paced phase: agents hold each candidate total credit / R seconds on "
     "average (uniform in 0.5..1.5 of it), so "
     "that the fleet offers R results/s (0: no paced phase)"},
    {"paced-only", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "skip the saturated phases (equal weights, then weighted)"},
    {"agent-threads", KL_OPT_INT, "1", 1, 16, "N",
     "threads driving the simulated agents"},
    {"heartbeat-ms", KL_OPT_INT, "1000", 100, 60000, "MS", "heartbeat"},
    {"curve", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "CURVE with ephemeral keys instead of insecure loopback"},
    KL_OPT_END,
};

#define S_TARGET "sim/cpu"
#define S_MAX_RUNS 50

/* ---- the head -------------------------------------------------------------
 */

typedef struct {
    kl_serve_t *s;
    pthread_t th;
    volatile sig_atomic_t stop;
} s_head_t;

static void *s_head_main(void *arg)
{
    s_head_t *h = arg;
    pthread_setname_np(pthread_self(), "bench-head");
    char err[KL_ERRMSG_LEN];
    if (kl_serve_run(h->s, &h->stop, err) != KL_OK)
        fprintf(stderr, "bench_serve: head: %s\n", err);
    return NULL;
}

/* ---- jobs ------------------------------------------------------------------
 */

typedef struct {
    int index;
    char name[64];
    uint32_t weight;
    const char *endpoint;
    size_t batch, window;
    pthread_t th;
    volatile int stop;
    atomic_uint_fast64_t got, not_ok;
    atomic_int ready; /* 1 connected, -1 failed */
    char err[KL_ERRMSG_LEN];
} s_job_t;

static void *s_job_main(void *arg)
{
    s_job_t *j = arg;
    pthread_setname_np(pthread_self(), "bench-job");
    const char *targets[1] = {S_TARGET};
    kl_port_fleet_config_t cfg = {.endpoint = j->endpoint,
                                  .security = {.insecure = true},
                                  .name = j->name,
                                  .weight = j->weight,
                                  .targets = targets,
                                  .n_targets = 1,
                                  .connect_s = 30};
    char *keys = NULL, *srv = NULL;
    if (bs_curve_dir[0]) {
        keys = kl_xasprintf("%s/job", bs_curve_dir);
        srv = kl_xasprintf("%s/coordinator.pub", bs_curve_dir);
        cfg.security = (kl_net_security_t){
            .keys_dir = keys, .name = "job", .server_key_file = srv};
    }
    kl_port_fleet_t *f = NULL;
    int rc = kl_port_fleet_new(&f, &cfg, j->err);
    free(keys);
    free(srv);
    if (rc != KL_OK) {
        atomic_store(&j->ready, -1);
        return NULL;
    }
    atomic_store(&j->ready, 1);
    kl_port_t p = kl_port_fleet(f);
    uint8_t key[16];
    kl_hash128(j->name, strlen(j->name), key);
    Kiln__Candidate *c = kl_xcalloc(j->batch, sizeof *c);
    Kiln__Candidate **cp = kl_xcalloc(j->batch, sizeof *cp);
    Kiln__Evaluator ev = KILN__EVALUATOR__INIT;
    ev.timeout_ms = 1000;
    uint64_t next_id = 1;
    size_t out = 0;
    while (!j->stop) {
        while (out + j->batch <= j->window) {
            for (size_t i = 0; i < j->batch; i++) {
                kiln__candidate__init(&c[i]);
                c[i].id = next_id++;
                c[i].source = "void kernel(void *const *a) { (void)a; }";
                c[i].entry = "kernel";
                cp[i] = &c[i];
            }
            kl_dispatch_batch_t b = {.workload_key = key,
                                     .target = S_TARGET,
                                     .reference_source = "",
                                     .reference_entry = "kernel",
                                     .evaluator = &ev,
                                     .candidates = cp,
                                     .n_candidates = j->batch};
            uint64_t id;
            if (kl_port_submit(&p, &b, &id, j->err) != KL_OK) {
                fprintf(stderr, "bench_serve: job %s: %s\n", j->name, j->err);
                j->stop = 1;
                break;
            }
            out += j->batch;
        }
        kl_dispatch_result_t *r = NULL;
        int wait = 20;
        while (kl_port_recv(&p, &r, wait, NULL) == KL_OK) {
            wait = 0;
            if (r->result->status != KILN__STATUS__STATUS_OK)
                atomic_fetch_add(&j->not_ok, 1);
            atomic_fetch_add(&j->got, 1);
            kl_dispatch_result_free(&r);
            out--;
            if (out + j->batch <= j->window)
                break;
        }
    }
    free(c);
    free(cp);
    kl_port_fleet_destroy(&f);
    return NULL;
}

/* ---- CPU per thread group ----------------------------------------------- */

enum {
    G_HEAD,
    G_DISPATCH,
    G_ZMQ,
    G_AGENTS,
    G_AGENTS_ZMQ,
    G_JOBS,
    G_OTHER,
    G_N
};
static const char *s_group_names[G_N] = {
    "head", "dispatch", "kiln's ZeroMQ I/O", "sim agents", "their I/O",
    "jobs", "other"};

static int s_group_of(const char *comm)
{
    if (strcmp(comm, "bench-head") == 0)
        return G_HEAD;
    if (strcmp(comm, "kl-dispatch") == 0)
        return G_DISPATCH;
    if (strncmp(comm, "bench-agents", 12) == 0)
        return G_AGENTS;
    if (strcmp(comm, "bench-job") == 0)
        return G_JOBS;
    if (strncmp(comm, "ZMQbg", 5) == 0)
        return G_ZMQ;
    if (strncmp(comm, "7/ZMQbg", 7) == 0)
        return G_AGENTS_ZMQ;
    return G_OTHER;
}

/* CPU seconds used so far by each thread group of this process. */
static void s_cpu(double out[G_N])
{
    memset(out, 0, G_N * sizeof *out);
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return;
    long hz = sysconf(_SC_CLK_TCK);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *l = strchr(buf, '('), *r = strrchr(buf, ')');
        if (!l || !r)
            continue;
        char comm[64];
        snprintf(comm, sizeof comm, "%.*s", (int)(r - l - 1), l + 1);
        /* Fields after ')': state(3) ... utime(14) stime(15). */
        unsigned long ut = 0, st = 0;
        char *p = r + 2;
        for (int field = 3; field < 14 && p; field++) {
            p = strchr(p, ' ');
            if (p)
                p++;
        }
        if (!p || sscanf(p, "%lu %lu", &ut, &st) != 2)
            continue;
        out[s_group_of(comm)] += (double)(ut + st) / (double)hz;
    }
    closedir(d);
}

/* ---- one phase ---------------------------------------------------------- */

typedef struct {
    double rate, p50, p99, max, spread, wall;
    uint64_t results, not_ok;
    size_t n_jobs;
    double share[200];
    uint32_t weight[200];
    double cpu[G_N];
} s_phase_t;

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int s_phase(const char *endpoint, bs_agents_t *groups, int n_groups,
                   size_t n_jobs, size_t batch, size_t window, int max_weight,
                   double hold_s, double warmup, double seconds, int run,
                   s_phase_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    bs_hold_s = hold_s;
    s_job_t *jobs = kl_xcalloc(n_jobs, sizeof *jobs);
    int rc = KL_OK;
    for (size_t i = 0; i < n_jobs; i++) {
        s_job_t *j = &jobs[i];
        j->index = (int)i;
        j->weight = max_weight > 0 ? (uint32_t)(i % (size_t)max_weight) + 1 : 1;
        snprintf(j->name, sizeof j->name, "bench-r%d-%s%02zu", run,
                 max_weight > 0 ? "w"
                 : hold_s > 0   ? "p"
                                : "e",
                 i);
        j->endpoint = endpoint;
        j->batch = batch;
        /* A heavier job gets results faster: its window grows with its
         * weight, so that its queue at the head never runs dry. */
        double mean_w = max_weight > 0 ? (max_weight + 1) / 2.0 : 1;
        j->window = (size_t)((double)window * j->weight / mean_w);
        if (j->window < 2 * batch)
            j->window = 2 * batch;
        if (pthread_create(&j->th, NULL, s_job_main, j) != 0) {
            n_jobs = i;
            rc = kl_seterr(err, KL_ERR_INTERNAL, "no job thread");
            break;
        }
    }
    for (size_t i = 0; i < n_jobs && rc == KL_OK; i++) {
        while (atomic_load(&jobs[i].ready) == 0)
            usleep(10 * 1000);
        if (atomic_load(&jobs[i].ready) < 0)
            rc = kl_seterr(err, KL_ERR_CLOSED, "job %s: %s", jobs[i].name,
                           jobs[i].err);
    }
    if (rc == KL_OK) {
        usleep((useconds_t)(warmup * 1e6));
        uint64_t g0[200];
        double cpu0[G_N], cpu1[G_N];
        for (int k = 0; k < n_groups; k++)
            groups[k].n_lat = 0;
        s_cpu(cpu0);
        double t0 = kl_now_s();
        bs_win_t0 = t0;
        atomic_store(&bs_measuring, 1);
        for (size_t i = 0; i < n_jobs; i++)
            g0[i] = atomic_load(&jobs[i].got);
        usleep((useconds_t)(seconds * 1e6));
        uint64_t total = 0, g1[200];
        for (size_t i = 0; i < n_jobs; i++) {
            g1[i] = atomic_load(&jobs[i].got) - g0[i];
            total += g1[i];
        }
        atomic_store(&bs_measuring, 0);
        double t1 = kl_now_s();
        s_cpu(cpu1);
        out->wall = t1 - t0;
        out->results = total;
        out->rate = (double)total / out->wall;
        out->n_jobs = n_jobs;
        for (int g = 0; g < G_N; g++)
            out->cpu[g] = (cpu1[g] - cpu0[g]) / out->wall;
        /* Share / weight, relative to its mean: 1.0 is exactly fair. */
        double wsum = 0, mean = 0;
        for (size_t i = 0; i < n_jobs; i++)
            wsum += jobs[i].weight;
        double lo = 1e300, hi = 0;
        for (size_t i = 0; i < n_jobs; i++) {
            out->weight[i] = jobs[i].weight;
            out->share[i] = total ? (double)g1[i] / (double)total : 0;
            double norm = out->share[i] / (jobs[i].weight / wsum);
            mean += norm / (double)n_jobs;
            lo = norm < lo ? norm : lo;
            hi = norm > hi ? norm : hi;
        }
        out->spread = mean > 0 ? (hi - lo) / mean : 0;
        size_t nl = 0;
        for (int k = 0; k < n_groups; k++)
            nl += groups[k].n_lat;
        double *lat = kl_xmalloc((nl + 1) * sizeof *lat);
        nl = 0;
        for (int k = 0; k < n_groups; k++) {
            memcpy(lat + nl, groups[k].lat, groups[k].n_lat * sizeof *lat);
            nl += groups[k].n_lat;
        }
        if (nl) {
            qsort(lat, nl, sizeof *lat, s_cmp);
            out->p50 = lat[(size_t)(0.50 * (double)(nl - 1))];
            out->p99 = lat[(size_t)(0.99 * (double)(nl - 1))];
            out->max = lat[nl - 1];
        }
        free(lat);
    }
    for (size_t i = 0; i < n_jobs; i++)
        jobs[i].stop = 1;
    for (size_t i = 0; i < n_jobs; i++) {
        pthread_join(jobs[i].th, NULL);
        out->not_ok += atomic_load(&jobs[i].not_ok);
    }
    free(jobs);
    /* Let the head cancel what the jobs left and the agents answer it. */
    usleep(500 * 1000);
    return rc;
}

/* ---- report ---------------------------------------------------------------
 */

static double s_median(double *v, int n, double *lo, double *hi)
{
    qsort(v, (size_t)n, sizeof *v, s_cmp);
    *lo = v[0];
    *hi = v[n - 1];
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void s_print_run(int r, const char *what, const s_phase_t *p)
{
    printf("run %d %-8s: %llu results in %.2f s = %.0f results/s; dispatch "
           "latency p50 %.3f ms p99 %.3f ms max %.3f ms; fairness spread "
           "%.1f%%; %llu not OK\n",
           r + 1, what, (unsigned long long)p->results, p->wall, p->rate,
           p->p50 * 1e3, p->p99 * 1e3, p->max * 1e3, p->spread * 100,
           (unsigned long long)p->not_ok);
    printf("          CPU s/s:");
    for (int g = 0; g < G_N; g++)
        printf(" %s %.2f%s", s_group_names[g], p->cpu[g],
               g + 1 < G_N ? "," : "\n");
}

/* Median (min..max) over the runs of one figure of a phase. */
#define S_FIG(arr, expr)                                                       \
    do {                                                                       \
        for (int i_ = 0; i_ < runs; i_++) {                                    \
            const s_phase_t *p_ = &(arr)[i_];                                  \
            v[i_] = (expr);                                                    \
        }                                                                      \
        m = s_median(v, runs, &lo, &hi);                                       \
    } while (0)

static void s_report(const s_phase_t *eq, const s_phase_t *wt,
                     const s_phase_t *pc, int runs, kl_opts_t *o, size_t window,
                     double hold)
{
    double v[S_MAX_RUNS], lo, hi, m;
    long long n_jobs = (long long)kl_opts_int(o, "jobs");
    printf("\nbench_serve: one head (kl_serve_t in its own thread), %lld "
           "agents SIMULATED IN-PROCESS (DEALER sockets driven by %lld "
           "thread(s), speaking the agent protocol, credit %lld each; no "
           "kiln-agent runs, nothing is compiled), %lld jobs "
           "(kl_port_fleet_t, one thread each, batches of %lld, %zu "
           "candidates unanswered per job of mean weight), loopback, %s; "
           "%.1f s measured per phase after %.1f s; %d run(s): median "
           "(min..max)\n",
           (long long)kl_opts_int(o, "agents"),
           (long long)kl_opts_int(o, "agent-threads"),
           (long long)kl_opts_int(o, "build-slots") + 1, n_jobs,
           (long long)kl_opts_int(o, "batch"), window,
           kl_opts_bool(o, "curve") ? "CURVE" : "INSECURE: no CURVE",
           kl_opts_double(o, "seconds"), kl_opts_double(o, "warmup"), runs);
    if (eq) {
        printf("saturated (agents answer at once; equal weights):\n");
        S_FIG(eq, p_->rate);
        printf(
            "  results/s through the head  %.0f (%.0f..%.0f)   goal >= 20000: "
            "%.2fx\n",
            m, lo, hi, m / 20000);
        S_FIG(eq, p_->spread * 100);
        printf(
            "  fairness spread             %.1f%% (%.1f..%.1f)   goal <= 10%%: "
            "%.2fx of the limit\n",
            m, lo, hi, m / 10);
        printf("    (spread: (max - min) / mean of the %lld jobs' results)\n",
               n_jobs);
        S_FIG(eq, p_->p50 * 1e3);
        printf("  dispatch latency p50        %.2f ms (%.2f..%.2f)\n", m, lo,
               hi);
        S_FIG(eq, p_->p99 * 1e3);
        printf(
            "  dispatch latency p99        %.2f ms (%.2f..%.2f)   (saturated: "
            "about total credit / results/s, the loop's own queue)\n",
            m, lo, hi);
        printf("  CPU seconds per second:");
        for (int g = 0; g < G_N; g++) {
            S_FIG(eq, p_->cpu[g]);
            printf(" %s %.2f%s", s_group_names[g], m, g + 1 < G_N ? "," : "\n");
        }
        printf("  CPU microseconds per result:");
        for (int g = 0; g < G_N; g++) {
            S_FIG(eq, p_->rate > 0 ? p_->cpu[g] / p_->rate * 1e6 : 0);
            printf(" %s %.1f%s", s_group_names[g], m, g + 1 < G_N ? "," : "\n");
        }
        printf(
            "    (%ld cores shared by all of these and whatever else runs)\n",
            sysconf(_SC_NPROCESSORS_ONLN));
    }
    int mw = (int)kl_opts_int(o, "max-weight");
    if (wt && mw > 0) {
        S_FIG(wt, p_->rate);
        printf("weighted (weights 1..%d, saturated): %.0f results/s "
               "(%.0f..%.0f)\n",
               mw, m, lo, hi);
        double wsum = 0;
        for (size_t i = 0; i < wt[0].n_jobs; i++)
            wsum += wt[0].weight[i];
        for (int w = 1; w <= mw; w++) {
            double want = 0;
            size_t nw = 0;
            for (size_t i = 0; i < wt[0].n_jobs; i++)
                if (wt[0].weight[i] == (uint32_t)w) {
                    want += w / wsum;
                    nw++;
                }
            for (int r = 0; r < runs; r++) {
                v[r] = 0;
                for (size_t i = 0; i < wt[r].n_jobs; i++)
                    if (wt[r].weight[i] == (uint32_t)w)
                        v[r] += wt[r].share[i];
            }
            m = s_median(v, runs, &lo, &hi);
            printf("  weight %d (%zu jobs): share %.2f%% (%.2f..%.2f), by "
                   "weight %.2f%%: %.3fx\n",
                   w, nw, m * 100, lo * 100, hi * 100, want * 100,
                   want > 0 ? m / want : 0);
        }
        S_FIG(wt, p_->spread * 100);
        printf("  spread of share / weight    %.1f%% (%.1f..%.1f)   goal <= "
               "10%%: %.2fx of the limit\n",
               m, lo, hi, m / 10);
    }
    if (hold > 0) {
        printf(
            "paced (an agent holds a candidate %.0f ms on average: the fleet "
            "offers "
            "%.0f results/s; equal weights):\n",
            hold * 1e3, kl_opts_double(o, "paced-rate"));
        S_FIG(pc, p_->rate);
        printf("  results/s through the head  %.0f (%.0f..%.0f)   %.2fx the "
               "offered rate\n",
               m, lo, hi, m / kl_opts_double(o, "paced-rate"));
        S_FIG(pc, p_->p50 * 1e3);
        printf("  dispatch latency p50        %.2f ms (%.2f..%.2f)\n", m, lo,
               hi);
        S_FIG(pc, p_->p99 * 1e3);
        printf("  dispatch latency p99        %.2f ms (%.2f..%.2f)   goal < 10 "
               "ms: %.2fx of the limit\n",
               m, lo, hi, m / 10);
        S_FIG(pc, p_->spread * 100);
        printf("  fairness spread             %.1f%% (%.1f..%.1f)   goal <= "
               "10%%: %.2fx of the limit\n",
               m, lo, hi, m / 10);
        printf("  CPU seconds per second:");
        for (int g = 0; g < G_N; g++) {
            S_FIG(pc, p_->cpu[g]);
            printf(" %s %.2f%s", s_group_names[g], m, g + 1 < G_N ? "," : "\n");
        }
    }
    printf("dispatch latency: from a simulated agent sending a result, which "
           "frees one credit, to the next candidate reaching that agent, "
           "while every job has work queued at the head; all timestamps in "
           "the agents' thread\n");
    char load[128] = "?";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (!fgets(load, sizeof load, lf))
            snprintf(load, sizeof load, "?");
        load[strcspn(load, "\n")] = 0;
        fclose(lf);
    }
    printf("load average at the end (this machine, all processes): %s\n", load);
    printf("reproduce: ninja -C build tools/bench_serve && build/tools/"
           "bench_serve --agents %lld --jobs %lld --seconds %g --runs %d%s\n",
           (long long)kl_opts_int(o, "agents"), n_jobs,
           kl_opts_double(o, "seconds"), runs,
           kl_opts_bool(o, "curve") ? " --curve" : "");
}

/* ---- keys ------------------------------------------------------------------
 */

static int s_copy_pub(const char *from, const char *to, char *err)
{
    char key[41];
    int rc = kl_net_read_key(from, key, err);
    if (rc == KL_OK) {
        key[40] = '\n';
        rc = kl_write_file(to, key, 41, err);
    }
    return rc;
}

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

static int s_make_keys(char *err)
{
    char tmpl[200];
    int k = snprintf(tmpl, sizeof tmpl, "%s/bench_serve.XXXXXX", s_tmpdir());
    if (k < 0 || (size_t)k >= sizeof tmpl)
        return kl_seterr(err, KL_ERR_INVAL, "TMPDIR %s is too long",
                         s_tmpdir());
    if (!mkdtemp(tmpl))
        return kl_seterr(err, KL_ERR_IO, "mkdtemp: %s", strerror(errno));
    snprintf(bs_curve_dir, sizeof bs_curve_dir, "%s", tmpl);
    char *sim = kl_xasprintf("%s/simagent", tmpl);
    char *job = kl_xasprintf("%s/job", tmpl);
    char *agents = kl_xasprintf("%s/agents", tmpl);
    char *clients = kl_xasprintf("%s/clients", tmpl);
    char *a_from = kl_xasprintf("%s/simagent.pub", sim);
    char *a_to = kl_xasprintf("%s/simagent.pub", agents);
    char *j_from = kl_xasprintf("%s/job.pub", job);
    char *j_to = kl_xasprintf("%s/job.pub", clients);
    int rc = kl_net_keygen(tmpl, "coordinator", err);
    if (rc == KL_OK)
        rc = kl_net_keygen(sim, "simagent", err);
    if (rc == KL_OK)
        rc = kl_net_keygen(job, "job", err);
    if (rc == KL_OK)
        rc = kl_mkdirs(agents, err);
    if (rc == KL_OK)
        rc = kl_mkdirs(clients, err);
    if (rc == KL_OK)
        rc = s_copy_pub(a_from, a_to, err);
    if (rc == KL_OK)
        rc = s_copy_pub(j_from, j_to, err);
    free(sim);
    free(job);
    free(agents);
    free(clients);
    free(a_from);
    free(a_to);
    free(j_from);
    free(j_to);
    return rc;
}

/* ---- main ------------------------------------------------------------------
 */

int main(int argc, char **argv)
{
    kl_log_init("bench_serve");
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o;
    if (kl_opts_parse(s_opts, argc - 1, argv + 1, &o, err) != KL_OK) {
        fprintf(stderr, "bench_serve: %s\n", err);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, "usage: bench_serve [options]", s_opts);
        kl_opts_free(&o);
        return 0;
    }
    size_t n_agents = (size_t)kl_opts_int(o, "agents");
    size_t n_jobs = (size_t)kl_opts_int(o, "jobs");
    uint32_t credit = (uint32_t)kl_opts_int(o, "build-slots") + 1;
    size_t batch = (size_t)kl_opts_int(o, "batch");
    size_t window = (size_t)kl_opts_int(o, "window");
    if (!window)
        window = 12 * n_agents * credit / n_jobs;
    if (window < 2 * batch)
        window = 2 * batch;
    int runs = (int)kl_opts_int(o, "runs");
    int n_groups = (int)kl_opts_int(o, "agent-threads");
    if ((size_t)n_groups > n_agents)
        n_groups = (int)n_agents;
    int hb_ms = (int)kl_opts_int(o, "heartbeat-ms");
    int max_weight = (int)kl_opts_int(o, "max-weight");
    bool curve = kl_opts_bool(o, "curve");
    double seconds = kl_opts_double(o, "seconds");
    double warmup = kl_opts_double(o, "warmup");

    int rc = curve ? s_make_keys(err) : KL_OK;
    /* The dispatch actor's thread takes its creator's name. */
    pthread_setname_np(pthread_self(), "kl-dispatch");
    kl_serve_config_t sc = {.agents_endpoint = "tcp://127.0.0.1:*",
                            .clients_endpoint = "tcp://127.0.0.1:*",
                            .keys_dir = curve ? bs_curve_dir : NULL,
                            .insecure = !curve,
                            .heartbeat_ms = hb_ms,
                            .client_timeout_s = 30,
                            /* Every job here is one client key. */
                            .max_jobs_per_key = 1000};
    s_head_t head = {0};
    if (rc == KL_OK)
        rc = kl_serve_new(&head.s, &sc, err);
    pthread_setname_np(pthread_self(), "bench-main");
    bool head_started = false;
    if (rc == KL_OK) {
        if (pthread_create(&head.th, NULL, s_head_main, &head) == 0)
            head_started = true;
        else
            rc = kl_seterr(err, KL_ERR_INTERNAL, "no head thread");
    }
    /* The simulated agents' own ZeroMQ context: one socket each. */
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, (int)n_agents + 64);
    zmq_ctx_set(ctx, ZMQ_BLOCKY, 0);
    zmq_ctx_set(ctx, ZMQ_THREAD_NAME_PREFIX, 7); /* "7/ZMQbg/IO/0" */
    bs_agents_t *groups = kl_xcalloc((size_t)n_groups, sizeof *groups);
    for (int k = 0; k < n_groups; k++)
        groups[k].ep = -1;
    double t_conn = kl_now_s();
    for (int k = 0; k < n_groups && rc == KL_OK; k++) {
        size_t first = n_agents * (size_t)k / (size_t)n_groups;
        size_t last = n_agents * (size_t)(k + 1) / (size_t)n_groups;
        groups[k].index = k;
        rc = bs_agents_start(&groups[k], ctx, first, last - first, credit,
                             hb_ms, kl_serve_agents_endpoint(head.s), err);
    }
    while (rc == KL_OK) {
        size_t w = 0;
        for (int k = 0; k < n_groups; k++)
            w += atomic_load(&groups[k].welcomed);
        if (w == n_agents)
            break;
        if (kl_now_s() - t_conn > 120)
            rc = kl_seterr(err, KL_ERR_TIMEOUT,
                           "%zu of %zu simulated agents welcomed after 120 s",
                           w, n_agents);
        usleep(20 * 1000);
    }
    if (rc == KL_OK)
        fprintf(stderr,
                "bench_serve: %zu simulated agents welcomed in %.1f s\n",
                n_agents, kl_now_s() - t_conn);
    usleep(200 * 1000); /* the head reads the agent list every 50 ms */
    s_phase_t *eq = kl_xcalloc(S_MAX_RUNS, sizeof *eq);
    s_phase_t *wt = kl_xcalloc(S_MAX_RUNS, sizeof *wt);
    s_phase_t *pc = kl_xcalloc(S_MAX_RUNS, sizeof *pc);
    double paced = kl_opts_double(o, "paced-rate");
    bool saturated = !kl_opts_bool(o, "paced-only");
    double hold = paced > 0 ? (double)(n_agents * credit) / paced : 0;
    const char *ep = rc == KL_OK ? kl_serve_clients_endpoint(head.s) : NULL;
    for (int r = 0; r < runs && rc == KL_OK; r++) {
        if (saturated)
            rc = s_phase(ep, groups, n_groups, n_jobs, batch, window, 0, 0,
                         warmup, seconds, r, &eq[r], err);
        if (rc == KL_OK && saturated)
            s_print_run(r, "equal", &eq[r]);
        if (rc == KL_OK && saturated && max_weight > 0) {
            rc = s_phase(ep, groups, n_groups, n_jobs, batch, window,
                         max_weight, 0, warmup, seconds, r, &wt[r], err);
            if (rc == KL_OK)
                s_print_run(r, "weighted", &wt[r]);
        }
        if (rc == KL_OK && hold > 0) {
            rc = s_phase(ep, groups, n_groups, n_jobs, batch, window, 0, hold,
                         warmup, seconds, r, &pc[r], err);
            if (rc == KL_OK)
                s_print_run(r, "paced", &pc[r]);
        }
        fflush(stdout);
    }
    if (rc == KL_OK)
        s_report(saturated ? eq : NULL, saturated ? wt : NULL, pc, runs, o,
                 window, hold);
    else
        fprintf(stderr, "bench_serve: %s\n", err);
    bs_stop_all = 1;
    for (int k = 0; k < n_groups; k++)
        if (groups[k].started)
            pthread_join(groups[k].th, NULL);
    if (head_started) {
        head.stop = 1;
        pthread_join(head.th, NULL);
    }
    kl_serve_destroy(&head.s);
    for (int k = 0; k < n_groups; k++)
        bs_agents_free(&groups[k]);
    free(groups);
    zmq_ctx_term(ctx);
    if (bs_curve_dir[0])
        kl_fleet_rmtree(bs_curve_dir, NULL);
    free(eq);
    free(wt);
    free(pc);
    kl_opts_free(&o);
    return rc == KL_OK ? 0 : 1;
}
