/* metrics_test.c - coordinator/metrics: --http parsing, the Prometheus text
 * and HTML renderings (escaping, families) of a job's and of a head's,
 * snapshots collected from a real dispatch, task and store, and the HTTP server
 * over real loopback TCP (pages, 404, a port in use, scrapes while the loop
 * publishes). */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "kl_err.h"
#include "kl_metrics.h"
#include "kl_metrics_int.h"
#include "kl_metrics_serve.h"
#include "kl_util.h"
#include "kl_test_tmp.h"

static void test_parse_listen(void **state)
{
    (void)state;
    char host[64], err[KL_ERRMSG_LEN];
    unsigned port = 1;
    bool lo = false;
    assert_int_equal(
        kl_http_parse_listen("9100", host, sizeof host, &port, &lo, err),
        KL_OK);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 9100);
    assert_true(lo);
    assert_int_equal(
        kl_http_parse_listen(":0", host, sizeof host, &port, &lo, err), KL_OK);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 0);
    assert_int_equal(kl_http_parse_listen("127.0.0.2:80", host, sizeof host,
                                          &port, &lo, err),
                     KL_OK);
    assert_true(lo);
    assert_int_equal(
        kl_http_parse_listen("[::1]:9", host, sizeof host, &port, &lo, err),
        KL_OK);
    assert_string_equal(host, "::1");
    assert_true(lo);
    assert_int_equal(kl_http_parse_listen("0.0.0.0:9100", host, sizeof host,
                                          &port, &lo, err),
                     KL_OK);
    assert_false(lo);
    const char *bad[] = {
        "",        "70000",    "-1",         "127.0.0.1:", "a:b:c",
        "[::1:80", "::1:9100", "1.2.3.4:9x", "+80",        "[::1]x:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(
            kl_http_parse_listen(bad[i], host, sizeof host, &port, &lo, err),
            KL_ERR_INVAL);
        assert_non_null(strstr(err, "--http"));
    }
}

/* A snapshot of two tasks, one with awkward characters in its name. */
static kl_metrics_snap_t *s_snap(void)
{
    kl_metrics_snap_t *s = kl_metrics_snap_new(2);
    snprintf(s->job, sizeof s->job, "a<b>\"c\\d");
    s->have_dispatch = true;
    s->dispatch.agents = 3;
    s->dispatch.queued = 5;
    s->dispatch.in_flight = 7;
    s->dispatch.submitted = 40;
    s->dispatch.by_status[0] = 11;
    s->dispatch.by_status[3] = 2;
    s->dispatch.results_per_s = 12.5;
    s->n_targets = 1;
    snprintf(s->targets[0].target, 64, "cpu/x86_64-avx512");
    s->targets[0].agents = 2;
    snprintf(s->tasks[0].workload, 128, "quote\"back\\slash\nline");
    snprintf(s->tasks[0].target, 64, "cpu/x86_64-avx512");
    s->tasks[0].best_s = 2.5e-5;
    s->tasks[0].trials = 13;
    s->tasks[0].valid = 11;
    s->tasks[0].cap = 100;
    snprintf(s->tasks[1].workload, 128, "<script>");
    snprintf(s->tasks[1].target, 64, "cuda/sm_90");
    s->tasks[1].best_s = INFINITY;
    s->tasks[1].done = true;
    s->have_store = true;
    s->store_bytes = 4096;
    s->store_map_bytes = 64 << 20;
    return s;
}

static int s_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void test_render_text(void **state)
{
    (void)state;
    kl_metrics_snap_t *s = s_snap();
    char *t = kl_metrics_render_text(s);
    assert_non_null(strstr(t, "kiln_job_info{job=\"a<b>\\\"c\\\\d\"} 1\n"));
    assert_non_null(strstr(t, "kiln_agents{target=\"cpu/x86_64-avx512\"} 2\n"));
    assert_non_null(strstr(t, "kiln_queue_depth 5\n"));
    assert_non_null(strstr(t, "kiln_in_flight 7\n"));
    assert_non_null(strstr(t, "kiln_results_total{status=\"ok\"} 11\n"));
    assert_non_null(strstr(t, "kiln_results_total{status=\"timeout\"} 2\n"));
    assert_non_null(strstr(t, "kiln_results_total{status=\"invalid\"} 0\n"));
    assert_non_null(strstr(t, "kiln_results_per_second 12.5\n"));
    assert_non_null(strstr(t, "kiln_task_trials{task=\"0\",workload=\"quote\\"
                              "\"back\\\\slash\\nline\"} 13\n"));
    assert_non_null(strstr(t, "kiln_task_best_latency_seconds{task=\"0\","));
    assert_non_null(strstr(t, "target=\"cpu/x86_64-avx512\"} "
                              "2.5000000000000001e-05\n"));
    /* No best for task 1: no sample, never +Inf. */
    assert_null(strstr(t, "kiln_task_best_latency_seconds{task=\"1\""));
    assert_null(strstr(t, "Inf"));
    assert_non_null(strstr(t, "kiln_task_done{task=\"1\",workload=\"<script>"
                              "\"} 1\n"));
    assert_non_null(strstr(t, "kiln_store_bytes 4096\n"));
    /* One HELP and one TYPE per family, every sample line after them. */
    assert_int_equal(s_count(t, "# HELP "), s_count(t, "# TYPE "));
    assert_int_equal(s_count(t, "# TYPE kiln_results_total counter\n"), 1);
    assert_int_equal(s_count(t, "# TYPE "), 24);
    assert_int_equal(t[strlen(t) - 1], '\n');
    free(t);
    s->have_store = false;
    t = kl_metrics_render_text(s);
    assert_null(strstr(t, "kiln_store_bytes"));
    free(t);
    kl_metrics_snap_free(&s);
    assert_null(s);
    assert_string_equal(kl_metrics_status_name(4), "wrong_result");
    assert_null(kl_metrics_status_name(8));
}

static void test_render_html(void **state)
{
    (void)state;
    kl_metrics_snap_t *s = s_snap();
    char *h = kl_metrics_render_html(s);
    assert_non_null(strstr(h, "<meta http-equiv=\"refresh\" content=\"2\">"));
    assert_null(strstr(h, "<script>"));
    assert_non_null(strstr(h, "&lt;script&gt;"));
    assert_non_null(strstr(h, "a&lt;b&gt;&quot;c\\d"));
    assert_non_null(strstr(h, "<td>25.00</td>")); /* best in us */
    assert_non_null(strstr(h, "cuda/sm_90"));
    free(h);
    kl_metrics_snap_free(&s);
}

/* One request to url ("http://127.0.0.1:PORT") over a plain socket, no
 * asserts (it also runs on a second thread): the whole answer (heap) and
 * its status code, or NULL. */
static char *s_fetch(const char *url, const char *method, const char *path,
                     int *code)
{
    unsigned port = 0;
    *code = 0;
    if (sscanf(url, "http://127.0.0.1:%u", &port) != 1)
        return NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char req[256];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     method, path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        write(fd, req, (size_t)n) != n) {
        close(fd);
        return NULL;
    }
    kl_buf_t b = {0};
    char buf[4096];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0)
        kl_buf_append(&b, buf, (size_t)r);
    close(fd);
    if (!b.data || sscanf(b.data, "HTTP/1.1 %d", code) != 1) {
        kl_buf_free(&b);
        return NULL;
    }
    return kl_buf_take(&b);
}

static char *s_get(const char *url, const char *method, const char *path,
                   int *code)
{
    char *r = s_fetch(url, method, path, code);
    assert_non_null(r);
    return r;
}

static void test_server(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_metrics_t *m = NULL;
    kl_metrics_cfg_t cfg = {.listen = "127.0.0.1:0", .job = "jobname"};
    assert_int_equal(kl_metrics_new(&m, &cfg, err), KL_OK);
    const char *url = kl_metrics_url(m);
    assert_non_null(strstr(url, "http://127.0.0.1:"));
    unsigned port = 0;
    assert_int_equal(sscanf(url, "http://127.0.0.1:%u", &port), 1);
    assert_true(port > 0);
    int code = 0;
    /* Before any publish: an empty job, still valid. */
    char *r = s_get(url, "GET", "/metrics", &code);
    assert_int_equal(code, 200);
    assert_non_null(strstr(r, "text/plain; version=0.0.4"));
    assert_non_null(strstr(r, "kiln_job_info{job=\"jobname\"} 1\n"));
    assert_non_null(strstr(r, "kiln_job_done 0\n"));
    free(r);
    kl_metrics_snap_t *s = s_snap();
    s->done = true;
    kl_metrics_publish(m, &s);
    assert_null(s);
    r = s_get(url, "GET", "/metrics", &code);
    assert_int_equal(code, 200);
    assert_non_null(strstr(r, "kiln_job_done 1\n"));
    /* publish sets the job name of the registry */
    assert_non_null(strstr(r, "kiln_job_info{job=\"jobname\"} 1\n"));
    assert_non_null(strstr(r, "kiln_in_flight 7\n"));
    free(r);
    r = s_get(url, "GET", "/", &code);
    assert_int_equal(code, 200);
    assert_non_null(strstr(r, "text/html"));
    assert_non_null(strstr(r, "Done"));
    free(r);
    r = s_get(url, "GET", "/nope", &code);
    assert_int_equal(code, 404);
    free(r);
    r = s_get(url, "DELETE", "/metrics", &code);
    assert_int_equal(code, 405);
    free(r);
    /* The same port again: refused with the reason. */
    kl_metrics_t *m2 = NULL;
    char listen[64];
    snprintf(listen, sizeof listen, "%s", url + strlen("http://"));
    kl_metrics_cfg_t cfg2 = {.listen = listen};
    assert_int_equal(kl_metrics_new(&m2, &cfg2, err), KL_ERR_IO);
    assert_null(m2);
    assert_non_null(strstr(err, "in use"));
    kl_metrics_destroy(&m);
    assert_null(m);
    kl_metrics_destroy(&m); /* safe on NULL */
}

typedef struct {
    const char *url;
    int ok;
} scraper_t;

static void *s_scrape(void *arg)
{
    scraper_t *sc = arg;
    for (int i = 0; i < 100; i++) {
        int code = 0;
        char *r = s_fetch(sc->url, "GET", i % 2 ? "/" : "/metrics", &code);
        if (r && code == 200 &&
            (strstr(r, "</html>\n") || strstr(r, "kiln_store_map_bytes")))
            sc->ok++;
        free(r);
    }
    return NULL;
}

/* Scrapes on another thread while the loop publishes: every answer is a
 * whole page (ASan would see a snapshot freed under a render). */
static void test_publish_while_serving(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_metrics_t *m = NULL;
    kl_metrics_cfg_t cfg = {.listen = "0"};
    assert_int_equal(kl_metrics_new(&m, &cfg, err), KL_OK);
    kl_metrics_snap_t *first = s_snap();
    kl_metrics_publish(m, &first); /* so every page ends the same way */
    scraper_t sc = {kl_metrics_url(m), 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, s_scrape, &sc), 0);
    for (int i = 0; i < 2000; i++) {
        kl_metrics_snap_t *s = s_snap();
        s->dispatch.submitted = (uint64_t)i;
        kl_metrics_publish(m, &s);
        if (i % 100 == 0)
            usleep(1000);
    }
    pthread_join(th, NULL);
    assert_int_equal(sc.ok, 100);
    kl_metrics_destroy(&m);
}

/* A real dispatch (no agent), a real task on a real store. */
static void test_collect(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], dir[256];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kl-metrics-XXXXXX"));
    kl_store_t *st = NULL;
    assert_int_equal(kl_store_open(&st, dir, KL_STORE_NOSYNC, err), KL_OK);
    kl_job_cfg_t cfg;
    kl_job_cfg_default(&cfg);
    cfg.ts.max_trials_global = 17;
    kl_job_task_t task = {"matmul M=16 N=16 K=16", 1, false};
    kl_job_t *job = NULL;
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, st, err), KL_OK);
    kl_dispatch_config_t dc = {.endpoint = "tcp://127.0.0.1:*"};
    dc.security.insecure = true;
    kl_dispatch_t *d = NULL;
    assert_int_equal(kl_dispatch_new(&d, &dc, err), KL_OK);
    kl_port_t port = kl_port_dispatch(d);
    kl_metrics_snap_t *s = kl_metrics_snap_new(1);
    kl_metrics_collect(s, &port, job, dir);
    assert_true(s->have_dispatch);
    assert_int_equal(s->dispatch.agents, 0);
    assert_int_equal(s->n_targets, 1);
    /* "cpu" is shown as this machine's exact target */
    assert_int_equal(strncmp(s->targets[0].target, "cpu/", 4), 0);
    assert_string_equal(s->tasks[0].target, s->targets[0].target);
    assert_string_equal(s->tasks[0].workload, "matmul_16_16_16");
    assert_int_equal(s->tasks[0].cap, 17);
    assert_int_equal(s->tasks[0].trials, 0);
    assert_true(isinf(s->tasks[0].best_s));
    assert_true(s->tasks[0].flop == 2.0 * 16 * 16 * 16);
    assert_true(s->have_store);
    assert_true(s->store_bytes > 0);
    assert_true(s->store_map_bytes >= s->store_bytes);
    kl_job_destroy(&job);
    /* Without a fleet or a store: those parts are zero / absent. */
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, NULL, err), KL_OK);
    kl_metrics_collect(s, NULL, job, NULL);
    assert_false(s->have_dispatch);
    assert_false(s->have_store);
    assert_int_equal(s->targets[0].agents, 0);
    kl_metrics_snap_free(&s);
    /* update on a NULL registry is a no-op */
    kl_metrics_update(NULL, &port, job, true, true);
    kl_dispatch_destroy(&d);
    kl_job_destroy(&job);
    kl_store_close(&st);
    char *cmd = kl_xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

/* The snapshot served: elapsed_s (each publish sets it anew) and done. */
typedef struct {
    double elapsed_s;
    bool done;
} s_served_t;

static void s_peek(const void *snap, void *arg)
{
    const kl_metrics_snap_t *s = snap;
    s_served_t *o = arg;
    o->elapsed_s = s ? s->elapsed_s : -1;
    o->done = s && s->done;
}

static double s_served_elapsed(kl_metrics_t *m)
{
    s_served_t o;
    kl_http_peek(m->http, s_peek, &o);
    return o.elapsed_s;
}

/* What the tuning loop's updates do: a forced one collects and publishes
 * (dispatch stats, the agents of one target, the store's size), one
 * within min_interval_s of the last does nothing (a clock read), one for
 * the job's end always publishes. What each costs is printed, not
 * asserted: speed is for the benchmarks, not for a test under ASan. */
static void test_update_cost(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], dir[256];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kl-metrics-XXXXXX"));
    kl_store_t *st = NULL;
    assert_int_equal(kl_store_open(&st, dir, KL_STORE_NOSYNC, err), KL_OK);
    kl_job_cfg_t cfg;
    kl_job_cfg_default(&cfg);
    kl_job_task_t task = {"matmul M=16 N=16 K=16", 1, false};
    kl_job_t *job = NULL;
    assert_int_equal(kl_job_new(&job, &task, 1, &cfg, st, err), KL_OK);
    kl_dispatch_config_t dc = {.endpoint = "tcp://127.0.0.1:*"};
    dc.security.insecure = true;
    kl_dispatch_t *d = NULL;
    assert_int_equal(kl_dispatch_new(&d, &dc, err), KL_OK);
    kl_port_t port = kl_port_dispatch(d);
    kl_metrics_t *m = NULL;
    /* An interval that never passes here: no unforced update is due. */
    kl_metrics_cfg_t mc = {
        .listen = "0", .store_dir = dir, .min_interval_s = 3600};
    assert_int_equal(kl_metrics_new(&m, &mc, err), KL_OK);
    int n = 500, published = 0;
    double last = s_served_elapsed(m);
    double t0 = kl_now_s();
    for (int i = 0; i < n; i++) {
        kl_metrics_update(m, &port, job, true, false);
        double e = s_served_elapsed(m);
        published += e != last;
        last = e;
    }
    double forced = (kl_now_s() - t0) / n;
    assert_int_equal(published, n);
    t0 = kl_now_s();
    for (int i = 0; i < 100000; i++)
        kl_metrics_update(m, &port, job, false, false);
    double limited = (kl_now_s() - t0) / 100000;
    assert_true(s_served_elapsed(m) == last); /* nothing published */
    print_message("kl_metrics_update: %.1f us forced, %.3f us rate-limited\n",
                  forced * 1e6, limited * 1e6);
    int code = 0;
    char *r = s_get(kl_metrics_url(m), "GET", "/metrics", &code);
    assert_int_equal(code, 200);
    assert_non_null(strstr(r, "kiln_task_max_trials{task=\"0\",workload="
                              "\"matmul_16_16_16\"} 1000\n"));
    free(r);
    /* The job's end is published however soon it comes. */
    kl_metrics_update(m, &port, job, false, true);
    assert_true(s_served_elapsed(m) != last);
    s_served_t o;
    kl_http_peek(m->http, s_peek, &o);
    assert_true(o.done);
    kl_metrics_destroy(&m);
    kl_dispatch_destroy(&d);
    kl_job_destroy(&job);
    kl_store_close(&st);
    char *cmd = kl_xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

/* A head's snapshot: two live agents of one name (labels kept unique),
 * one with two devices of one target and one with two targets, a name to
 * escape; a job waiting for sim/cuda and one running. */
static void test_render_serve(void **state)
{
    (void)state;
    kl_serve_snap_t *p = calloc(1, sizeof *p);
    snprintf(p->head_id, sizeof p->head_id, "h1");
    p->uptime_s = 12.5;
    p->results_forwarded = 300;
    p->requests_received = 4;
    p->jobs_seen = 2;
    p->n_agents = 3;
    p->agents = calloc(3, sizeof *p->agents);
    const char *names[3] = {"a0", "a0", "q\"<x>"};
    for (int i = 0; i < 3; i++) {
        kl_dispatch_agent_info_t *a = &p->agents[i];
        snprintf(a->name, sizeof a->name, "%s", names[i]);
        snprintf(a->hostname, sizeof a->hostname, "host%d", i);
        a->n_devices = 2;
        snprintf(a->device_target[0], 64, "sim/cpu/x86_64-avx2");
        snprintf(a->device_target[1], 64,
                 i == 2 ? "sim/cuda/sm_90" : "sim/cpu/x86_64-avx2");
        a->credit = 3;
        a->busy = (uint32_t)i;
        a->results = 100 + (uint64_t)i;
        a->drained = i == 1;
    }
    p->n_jobs = 2;
    p->jobs = calloc(2, sizeof *p->jobs);
    p->jobs[0] = (kl_serve_job_info_t){.name = strdup("jw"),
                                       .targets = calloc(2, sizeof(char *)),
                                       .n_targets = 1,
                                       .weight = 3,
                                       .queued = 20,
                                       .state = KL_SERVE_JOB_WAITING,
                                       .waiting_target = strdup("sim/cuda")};
    p->jobs[0].targets[0] = strdup("sim/cuda");
    p->jobs[1] = (kl_serve_job_info_t){.name = strdup("jr"),
                                       .targets = calloc(1, sizeof(char *)),
                                       .done = 7,
                                       .in_flight = 2,
                                       .rate = 1.5,
                                       .state = KL_SERVE_JOB_RUNNING};
    snprintf(p->jobs[1].owner_key, sizeof p->jobs[1].owner_key, "K");
    char *t = kl_metrics_serve_render_text(p);
    assert_non_null(strstr(t, "kiln_serve_agents_connected 3\n"));
    assert_non_null(strstr(t, "kiln_serve_agent_busy{agent=\"a0\"} 0\n"));
    assert_non_null(strstr(t, "kiln_serve_agent_busy{agent=\"a0#2\"} 1\n"));
    assert_non_null(strstr(t, "kiln_serve_agent_drained{agent=\"a0#2\"} 1\n"));
    assert_non_null(
        strstr(t, "kiln_serve_agent_results_total{agent=\"q\\\"<x>\"} 102\n"));
    /* One info series per distinct target. */
    assert_int_equal(s_count(t, "kiln_serve_agent_info{agent=\"a0\","), 1);
    assert_int_equal(s_count(t, "kiln_serve_agent_info{agent=\"q"), 2);
    assert_non_null(
        strstr(t, "kiln_serve_agent_build_slots{agent=\"a0\"} 2\n"));
    assert_non_null(strstr(t, "kiln_serve_job_info{job=\"jw\",owner_key=\"\","
                              "target=\"sim/cuda\"} 1\n"));
    assert_non_null(strstr(t, "kiln_serve_job_info{job=\"jr\",owner_key=\"K\","
                              "target=\"\"} 1\n"));
    assert_non_null(strstr(t, "kiln_serve_job_waiting_for_agents{job=\"jw\"} "
                              "1\n"));
    assert_non_null(strstr(t, "kiln_serve_job_waiting_for_agents{job=\"jr\"} "
                              "0\n"));
    assert_non_null(strstr(t, "kiln_serve_job_results_per_second{job=\"jr\"} "
                              "1.5\n"));
    assert_non_null(strstr(t, "kiln_serve_results_forwarded_total 300\n"));
    assert_int_equal(s_count(t, "# HELP "), s_count(t, "# TYPE "));
    assert_int_equal(s_count(t, "# TYPE "), 21);
    free(t);
    char *h = kl_metrics_serve_render_html(p);
    assert_non_null(strstr(h, "<meta http-equiv=\"refresh\" content=\"2\">"));
    assert_null(strstr(h, "<x>"));
    assert_non_null(strstr(h, "q&quot;&lt;x&gt;"));
    assert_non_null(strstr(h, "waiting for an agent of target sim/cuda"));
    assert_non_null(strstr(h, ">running<"));
    free(h);
    kl_serve_snap_free(&p);
    assert_null(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_listen),
        cmocka_unit_test(test_render_text),
        cmocka_unit_test(test_render_html),
        cmocka_unit_test(test_render_serve),
        cmocka_unit_test(test_server),
        cmocka_unit_test(test_publish_while_serving),
        cmocka_unit_test(test_collect),
        cmocka_unit_test(test_update_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
