/* kl_metrics.c - snapshots of a tuning job, collected on the tuning
 * loop's thread and published to the HTTP server (kl_metrics_serve.c). */
#include "kl_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kl_err.h"
#include "kl_export.h"
#include "kl_log.h"
#include "kl_metrics_int.h"
#include "kl_util.h"

kl_metrics_snap_t *kl_metrics_snap_new(size_t n_tasks)
{
    kl_metrics_snap_t *s = kl_xcalloc(1, sizeof *s);
    s->n_tasks = n_tasks;
    if (n_tasks)
        s->tasks = kl_xcalloc(n_tasks, sizeof *s->tasks);
    return s;
}

void kl_metrics_snap_free(kl_metrics_snap_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->tasks);
    free(*self_p);
    *self_p = NULL;
}

/* The exact target a task target means: "cpu" is this machine's CPU
 * target (kl_export_target, the one copy of kiln-agent's rule). */
static const char *s_exact_target(const char *target)
{
    return target ? kl_export_target(target) : "";
}

/* Adds the exact target to the snapshot's list once, with its agents. */
static void s_add_target(kl_metrics_snap_t *s, const kl_port_t *port,
                         const char *exact)
{
    for (size_t i = 0; i < s->n_targets; i++)
        if (strcmp(s->targets[i].target, exact) == 0)
            return;
    if (s->n_targets == KL_METRICS_MAX_TARGETS)
        return;
    kl_metrics_target_t *t = &s->targets[s->n_targets++];
    snprintf(t->target, sizeof t->target, "%s", exact);
    t->agents = 0;
    if (port)
        kl_port_agents(port, exact, &t->agents, NULL);
}

static void s_collect_task(kl_metrics_task_t *m, const kl_job_t *j, int i)
{
    const kl_task_t *t = kl_job_task(j, i);
    const kl_workload_t *w = kl_task_workload(t);
    snprintf(m->workload, sizeof m->workload, "%s", w->name);
    snprintf(m->target, sizeof m->target, "%s",
             s_exact_target(kl_task_target(t)));
    m->flop = w->flop;
    m->best_s = kl_task_best_s(t);
    m->trials = kl_task_trials(t);
    m->valid = kl_task_valid(t);
    m->restored = kl_task_restored(t);
    m->in_flight = kl_task_in_flight(t);
    m->cap = kl_job_task_cap(j, i);
    m->done = kl_job_task_done(j, i);
}

void kl_metrics_collect(kl_metrics_snap_t *s, const kl_port_t *port,
                        const kl_job_t *job, const char *store_dir)
{
    size_t n = job ? (size_t)kl_job_ntasks(job) : 0;
    const kl_store_t *store = job ? kl_job_store(job) : NULL;
    s->have_dispatch = port && kl_port_stats(port, &s->dispatch, NULL) == KL_OK;
    if (!s->have_dispatch) /* nothing half-filled */
        memset(&s->dispatch, 0, sizeof s->dispatch);
    s->n_targets = 0;
    for (size_t i = 0; i < n && i < s->n_tasks; i++) {
        s_collect_task(&s->tasks[i], job, (int)i);
        s_add_target(s, port, s->tasks[i].target);
    }
    s->have_store = store != NULL;
    s->store_map_bytes = store ? kl_store_map_size(store) : 0;
    s->store_bytes = 0;
    if (store && store_dir) {
        char *path = kl_xasprintf("%s/data.mdb", store_dir);
        struct stat st;
        if (stat(path, &st) == 0)
            s->store_bytes = (uint64_t)st.st_size;
        free(path);
    }
}

void kl_metrics_publish(kl_metrics_t *self, kl_metrics_snap_t **snap)
{
    if (!snap || !*snap)
        return;
    kl_metrics_snap_t *s = *snap;
    *snap = NULL;
    snprintf(s->job, sizeof s->job, "%s", self->job);
    s->elapsed_s = kl_now_s() - self->t0;
    kl_http_publish(self->http, s);
}

void kl_metrics_update(kl_metrics_t *self, const kl_port_t *port,
                       const kl_job_t *job, bool force, bool done)
{
    if (!self)
        return;
    double now = kl_now_s();
    if (!force && !done && now - self->last_update < self->min_interval_s)
        return;
    self->last_update = now;
    kl_metrics_snap_t *s =
        kl_metrics_snap_new(job ? (size_t)kl_job_ntasks(job) : 0);
    kl_metrics_collect(s, port, job, self->store_dir);
    s->done = done;
    kl_metrics_publish(self, &s);
}

int kl_metrics_from_opts(kl_metrics_t **out, const kl_opts_t *o,
                         const char *job, const char *store_dir, char *err)
{
    *out = NULL;
    const char *listen = kl_opts_str(o, "http");
    if (!listen)
        return KL_OK;
    kl_metrics_cfg_t cfg = {
        .listen = listen, .job = job, .store_dir = store_dir};
    int rc = kl_metrics_new(out, &cfg, err);
    if (rc == KL_OK)
        fprintf(stderr, "kiln tune: metrics on %s/metrics\n",
                kl_metrics_url(*out));
    return rc;
}

static char *s_text(const void *snap)
{
    return kl_metrics_render_text(snap);
}

static char *s_html(const void *snap)
{
    return kl_metrics_render_html(snap);
}

static void s_snap_free(void *snap)
{
    kl_metrics_snap_t *s = snap;
    kl_metrics_snap_free(&s);
}

int kl_metrics_new(kl_metrics_t **out, const kl_metrics_cfg_t *cfg, char *err)
{
    *out = NULL;
    kl_metrics_t *m = kl_xcalloc(1, sizeof *m);
    snprintf(m->job, sizeof m->job, "%s", cfg->job ? cfg->job : "tune");
    m->store_dir = cfg->store_dir ? kl_xstrdup(cfg->store_dir) : NULL;
    m->min_interval_s = cfg->min_interval_s > 0 ? cfg->min_interval_s : 0.5;
    m->t0 = kl_now_s();
    kl_metrics_snap_t *first = kl_metrics_snap_new(0);
    snprintf(first->job, sizeof first->job, "%s", m->job);
    kl_http_cfg_t hc = {.listen = cfg->listen,
                        .what = "this job's metrics",
                        .text = s_text,
                        .html = s_html,
                        .snap_free = s_snap_free};
    int rc = kl_http_new(&m->http, &hc, first, err);
    if (rc) {
        kl_metrics_destroy(&m);
        return rc;
    }
    *out = m;
    return KL_OK;
}

void kl_metrics_destroy(kl_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_metrics_t *m = *self_p;
    kl_http_destroy(&m->http);
    free(m->store_dir);
    free(m);
    *self_p = NULL;
}

const char *kl_metrics_url(const kl_metrics_t *self)
{
    return kl_http_url(self->http);
}

void kl_metrics_linger(kl_metrics_t *self, const kl_opts_t *o,
                       volatile sig_atomic_t *stop)
{
    double s = self ? kl_opts_double(o, "http-linger") : 0;
    if (s <= 0)
        return;
    fprintf(stderr,
            "kiln tune: serving the final metrics on %s for %.0f s (a "
            "signal stops it)\n",
            kl_metrics_url(self), s);
    double until = kl_now_s() + s;
    while ((!stop || !*stop) && kl_now_s() < until) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
