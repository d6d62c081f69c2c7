/* kl_metrics_serve.c - kiln serve's metrics: the head's snapshot as
 * Prometheus text and as a status page, served by kl_http
 * (kl_metrics_serve.h). */
#include "kl_metrics_serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_http.h"
#include "kl_prom.h"
#include "kl_util.h"

struct kl_metrics_serve_s {
    kl_http_t *http;
    double last;
};

/* ---- Prometheus text ---------------------------------------------------- */

/* The label of each agent: its name, "NAME#k" for the k-th live agent of
 * a name (k >= 2). Heap strings, n of them. */
static char **s_agent_labels(const kl_serve_snap_t *p)
{
    char **v = kl_xcalloc(p->n_agents + 1, sizeof *v);
    for (size_t i = 0; i < p->n_agents; i++) {
        size_t k = 1;
        for (size_t j = 0; j < i; j++)
            k += strcmp(p->agents[j].name, p->agents[i].name) == 0;
        v[i] = k == 1 ? kl_xstrdup(p->agents[i].name)
                      : kl_xasprintf("%s#%zu", p->agents[i].name, k);
    }
    return v;
}

/* The distinct device targets of an agent ("" when it has none). */
static size_t s_agent_targets(const kl_dispatch_agent_info_t *a,
                              const char **out)
{
    size_t nd = a->n_devices < KL_DISPATCH_INFO_DEVICES
                    ? a->n_devices
                    : KL_DISPATCH_INFO_DEVICES,
           n = 0;
    for (size_t d = 0; d < nd; d++) {
        bool seen = false;
        for (size_t k = 0; k < n && !seen; k++)
            seen = strcmp(out[k], a->device_target[d]) == 0;
        if (!seen)
            out[n++] = a->device_target[d];
    }
    if (n == 0)
        out[n++] = "";
    return n;
}

static void s_text_agents(kl_buf_t *b, const kl_serve_snap_t *p)
{
    char **lab = s_agent_labels(p);
    kl_prom_metric(b, "kiln_serve_agents_connected", "gauge",
                   "Live agents connected to the head.", (double)p->n_agents);
    kl_prom_family(b, "kiln_serve_agent_info", "gauge",
                   "A live agent (value 1), one series per distinct device "
                   "target.");
    for (size_t i = 0; i < p->n_agents; i++) {
        const char *t[KL_DISPATCH_INFO_DEVICES + 1];
        size_t nt = s_agent_targets(&p->agents[i], t);
        for (size_t k = 0; k < nt; k++) {
            const char *l[] = {"agent",  lab[i], "host", p->agents[i].hostname,
                               "target", t[k],   NULL};
            kl_prom_sample(b, "kiln_serve_agent_info", l, 1);
        }
    }
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"kiln_serve_agent_busy", "gauge", "Candidates the agent holds."},
        {"kiln_serve_agent_build_slots", "gauge",
         "Candidates the agent builds while one runs."},
        {"kiln_serve_agent_results_total", "counter",
         "Answers of the agent since it registered."},
        {"kiln_serve_agent_failures_total", "counter",
         "Answers of the agent other than ok since it registered."},
        {"kiln_serve_agent_drained", "gauge",
         "1 while the agent is drained (given no new work)."},
        {"kiln_serve_agent_last_seen_seconds", "gauge",
         "Seconds since the agent was last heard."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        kl_prom_family(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; i < p->n_agents; i++) {
            const kl_dispatch_agent_info_t *a = &p->agents[i];
            double v[] = {
                (double)a->busy,    a->credit ? (double)a->credit - 1 : 0,
                (double)a->results, (double)a->failures,
                a->drained ? 1 : 0, a->last_seen_s};
            const char *l[] = {"agent", lab[i], NULL};
            kl_prom_sample(b, fam[f].name, l, v[f]);
        }
    }
    for (size_t i = 0; i < p->n_agents; i++)
        free(lab[i]);
    free(lab);
}

static void s_text_jobs(kl_buf_t *b, const kl_serve_snap_t *p)
{
    kl_prom_metric(b, "kiln_serve_jobs", "gauge", "Live jobs on the head.",
                   (double)p->n_jobs);
    kl_prom_family(b, "kiln_serve_job_info", "gauge",
                   "A live job (value 1), one series per target it said "
                   "JobHello with; owner_key is its client key.");
    for (size_t i = 0; i < p->n_jobs; i++) {
        const kl_serve_job_info_t *j = &p->jobs[i];
        for (size_t t = 0; t < j->n_targets || (t == 0 && !j->n_targets); t++) {
            const char *l[] = {"job",       j->name,
                               "owner_key", j->owner_key,
                               "target",    j->n_targets ? j->targets[t] : "",
                               NULL};
            kl_prom_sample(b, "kiln_serve_job_info", l, 1);
        }
    }
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"kiln_serve_job_weight", "gauge", "Fair-share weight of the job."},
        {"kiln_serve_job_queued", "gauge",
         "Candidates of the job waiting at the head."},
        {"kiln_serve_job_in_flight", "gauge",
         "Candidates of the job handed to agents and not answered."},
        {"kiln_serve_job_results_total", "counter", "Results sent to the job."},
        {"kiln_serve_job_results_per_second", "gauge",
         "Results per second since the job's first."},
        {"kiln_serve_job_waiting_for_agents", "gauge",
         "1 while no live, undrained agent serves a target the job has "
         "work for."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        kl_prom_family(b, fam[f].name, fam[f].type, fam[f].help);
        for (size_t i = 0; i < p->n_jobs; i++) {
            const kl_serve_job_info_t *j = &p->jobs[i];
            double v[] = {(double)j->weight,
                          (double)j->queued,
                          (double)j->in_flight,
                          (double)j->done,
                          j->rate,
                          j->state == KL_SERVE_JOB_WAITING ? 1 : 0};
            const char *l[] = {"job", j->name, NULL};
            kl_prom_sample(b, fam[f].name, l, v[f]);
        }
    }
}

char *kl_metrics_serve_render_text(const kl_serve_snap_t *p)
{
    kl_buf_t b = {0};
    kl_prom_family(&b, "kiln_serve_info", "gauge",
                   "The head node (value 1); head_id is unique per start.");
    const char *l[] = {"head_id", p->head_id, NULL};
    kl_prom_sample(&b, "kiln_serve_info", l, 1);
    kl_prom_metric(&b, "kiln_serve_uptime_seconds", "gauge",
                   "Seconds since the head started.", p->uptime_s);
    kl_prom_metric(&b, "kiln_serve_results_forwarded_total", "counter",
                   "Results sent to jobs (the head's own cancelled and "
                   "invalid ones included).",
                   (double)p->results_forwarded);
    kl_prom_metric(&b, "kiln_serve_requests_received_total", "counter",
                   "Measure requests received from jobs.",
                   (double)p->requests_received);
    kl_prom_metric(&b, "kiln_serve_jobs_seen_total", "counter",
                   "Jobs that said hello under a new name.",
                   (double)p->jobs_seen);
    s_text_agents(&b, p);
    s_text_jobs(&b, p);
    return kl_buf_take(&b);
}

/* ---- the status page ---------------------------------------------------- */

static void s_td(kl_buf_t *b, const char *text)
{
    kl_buf_puts(b, "<td class=\"l\">");
    kl_buf_put_xml(b, text);
    kl_buf_puts(b, "</td>");
}

static void s_html_agents(kl_buf_t *b, const kl_serve_snap_t *p)
{
    kl_buf_puts(b, "<h2>Agents</h2>\n<table><tr><th>Agent</th><th>Host</th>"
                   "<th>Targets</th><th>Build slots</th><th>Busy</th>"
                   "<th>Results</th><th>Failures</th><th>Seen (s ago)</th>"
                   "<th>Drained</th></tr>\n");
    for (size_t i = 0; i < p->n_agents; i++) {
        const kl_dispatch_agent_info_t *a = &p->agents[i];
        const char *t[KL_DISPATCH_INFO_DEVICES + 1];
        size_t nt = s_agent_targets(a, t);
        kl_buf_t tb = {0};
        for (size_t k = 0; k < nt; k++)
            kl_buf_printf(&tb, "%s%s", k ? ", " : "", t[k]);
        char *targets = kl_buf_take(&tb);
        kl_buf_puts(b, "<tr>");
        s_td(b, a->name);
        s_td(b, a->hostname);
        s_td(b, targets);
        free(targets);
        kl_buf_printf(b,
                      "<td>%u</td><td>%u</td><td>%llu</td><td>%llu</td>"
                      "<td>%.1f</td><td>%s</td></tr>\n",
                      a->credit ? a->credit - 1 : 0, a->busy,
                      (unsigned long long)a->results,
                      (unsigned long long)a->failures, a->last_seen_s,
                      a->drained ? "yes" : "no");
    }
    kl_buf_puts(b, "</table>\n");
}

static void s_html_jobs(kl_buf_t *b, const kl_serve_snap_t *p)
{
    kl_buf_puts(b, "<h2>Jobs</h2>\n<table><tr><th>Job</th><th>Owner key</th>"
                   "<th>Targets</th><th>Weight</th><th>Queued</th>"
                   "<th>In flight</th><th>Results</th><th>Results/s</th>"
                   "<th>State</th></tr>\n");
    for (size_t i = 0; i < p->n_jobs; i++) {
        const kl_serve_job_info_t *j = &p->jobs[i];
        kl_buf_t tb = {0};
        for (size_t k = 0; k < j->n_targets; k++)
            kl_buf_printf(&tb, "%s%s", k ? ", " : "", j->targets[k]);
        char *targets = kl_buf_take(&tb);
        kl_buf_puts(b, "<tr>");
        s_td(b, j->name);
        s_td(b, j->owner_key[0] ? j->owner_key : "-");
        s_td(b, targets ? targets : "");
        free(targets);
        kl_buf_printf(b,
                      "<td>%u</td><td>%llu</td><td>%llu</td><td>%llu</td>"
                      "<td>%.1f</td>",
                      j->weight, (unsigned long long)j->queued,
                      (unsigned long long)j->in_flight,
                      (unsigned long long)j->done, j->rate);
        char *state =
            j->state == KL_SERVE_JOB_WAITING
                ? kl_xasprintf("waiting for an agent of target %s",
                               j->waiting_target ? j->waiting_target : "?")
                : kl_xstrdup(kl_serve_job_state_name(j->state));
        s_td(b, state);
        free(state);
        kl_buf_puts(b, "</tr>\n");
    }
    kl_buf_puts(b, "</table>\n");
}

char *kl_metrics_serve_render_html(const kl_serve_snap_t *p)
{
    kl_buf_t b = {0};
    char title[96];
    snprintf(title, sizeof title, "kiln serve: %s", p->head_id);
    kl_prom_html_begin(&b, title);
    kl_buf_printf(&b,
                  "<p>Up %.0f s: %zu agent(s), %zu job(s), %llu results "
                  "forwarded. Prometheus metrics: <a href=\"/metrics\">"
                  "/metrics</a>.</p>\n",
                  p->uptime_s, p->n_agents, p->n_jobs,
                  (unsigned long long)p->results_forwarded);
    s_html_agents(&b, p);
    s_html_jobs(&b, p);
    kl_buf_puts(&b, "</body></html>\n");
    return kl_buf_take(&b);
}

/* ---- the server ---------------------------------------------------------- */

static char *s_text(const void *snap)
{
    return kl_metrics_serve_render_text(snap);
}

static char *s_html(const void *snap)
{
    return kl_metrics_serve_render_html(snap);
}

static void s_snap_free(void *snap)
{
    kl_serve_snap_t *p = snap;
    kl_serve_snap_free(&p);
}

int kl_metrics_serve_new(kl_metrics_serve_t **out, kl_serve_t *s,
                         const char *listen, char *err)
{
    *out = NULL;
    kl_metrics_serve_t *m = kl_xcalloc(1, sizeof *m);
    kl_http_cfg_t hc = {.listen = listen,
                        .what = "the head's agents and jobs",
                        .text = s_text,
                        .html = s_html,
                        .snap_free = s_snap_free};
    int rc = kl_http_new(&m->http, &hc, kl_serve_snapshot(s), err);
    if (rc) {
        free(m);
        return rc;
    }
    m->last = kl_now_s();
    *out = m;
    return KL_OK;
}

void kl_metrics_serve_destroy(kl_metrics_serve_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_http_destroy(&(*self_p)->http);
    free(*self_p);
    *self_p = NULL;
}

const char *kl_metrics_serve_url(const kl_metrics_serve_t *self)
{
    return kl_http_url(self->http);
}

void kl_metrics_serve_tick(kl_serve_t *s, void *arg)
{
    kl_metrics_serve_t *m = arg;
    if (!m)
        return;
    double now = kl_now_s();
    if (now - m->last < KL_METRICS_SERVE_EVERY_S)
        return;
    m->last = now;
    kl_http_publish(m->http, kl_serve_snapshot(s));
}
