/* kl_metrics_render.c - a snapshot as Prometheus text (exposition format
 * 0.0.4) and as the HTML status page. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_metrics.h"
#include "kl_prom.h"
#include "kl_util.h"

static const char *const s_status[8] = {
    "ok",           "compile_error", "runtime_error", "timeout",
    "wrong_result", "agent_lost",    "cancelled",     "invalid",
};

const char *kl_metrics_status_name(int status)
{
    if (status < 0 || status >= 8)
        return NULL;
    return s_status[status];
}

/* One sample of a task family: {task="i",workload="..."[,target="..."]}. */
static void s_task_sample(kl_buf_t *b, const char *name, size_t i,
                          const kl_metrics_task_t *t, bool target, double v)
{
    kl_buf_printf(b, "%s{task=\"%zu\",workload=\"", name, i);
    kl_prom_label(b, t->workload);
    if (target) {
        kl_buf_puts(b, "\",target=\"");
        kl_prom_label(b, t->target);
    }
    kl_buf_puts(b, "\"} ");
    kl_prom_value(b, v);
    kl_buf_puts(b, "\n");
}

static void s_text_dispatch(kl_buf_t *b, const kl_metrics_snap_t *s)
{
    const kl_dispatch_stats_t *d = &s->dispatch;
    kl_prom_family(b, "kiln_agents", "gauge",
                   "Live agents of each exact target the job's tasks run on.");
    for (size_t i = 0; i < s->n_targets; i++) {
        kl_buf_puts(b, "kiln_agents{target=\"");
        kl_prom_label(b, s->targets[i].target);
        kl_buf_printf(b, "\"} %zu\n", s->targets[i].agents);
    }
    kl_prom_metric(b, "kiln_agents_connected", "gauge",
                   "Live agents of every target.", (double)d->agents);
    kl_prom_metric(b, "kiln_queue_depth", "gauge",
                   "Candidates waiting for an agent.", (double)d->queued);
    kl_prom_metric(b, "kiln_in_flight", "gauge", "Candidates held by agents.",
                   (double)d->in_flight);
    kl_prom_metric(b, "kiln_submitted_total", "counter",
                   "Candidates submitted to dispatch in this job.",
                   (double)d->submitted);
    kl_prom_family(b, "kiln_results_total", "counter",
                   "Results accepted by dispatch in this job, by status.");
    for (int i = 0; i < 8; i++)
        kl_buf_printf(b, "kiln_results_total{status=\"%s\"} %llu\n",
                      s_status[i], (unsigned long long)d->by_status[i]);
    kl_prom_metric(b, "kiln_results_per_second", "gauge",
                   "Results per second since the first submit.",
                   d->results_per_s);
    kl_prom_metric(b, "kiln_resent_total", "counter",
                   "Candidates sent again after their agent was lost.",
                   (double)d->resent);
    kl_prom_metric(b, "kiln_agents_lost_total", "counter",
                   "Agents declared dead or gone.", (double)d->agents_lost);
    kl_prom_metric(b, "kiln_duplicates_total", "counter",
                   "Results dropped as already answered.",
                   (double)d->duplicates);
    kl_prom_family(
        b, "kiln_dispatch_latency_seconds", "gauge",
        "Seconds from submit to a candidate's first send, over the last "
        "65536 sends (quantile 1 is the maximum).");
    const char *q[3] = {"0.5", "0.99", "1"};
    double v[3] = {d->latency_p50_s, d->latency_p99_s, d->latency_max_s};
    for (int i = 0; i < 3; i++) {
        kl_buf_printf(b, "kiln_dispatch_latency_seconds{quantile=\"%s\"} ",
                      q[i]);
        kl_prom_value(b, v[i]);
        kl_buf_puts(b, "\n");
    }
}

static void s_text_tasks(kl_buf_t *b, const kl_metrics_snap_t *s)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"kiln_task_trials",
         "Trials of the task, records restored from the store included."},
        {"kiln_task_valid_trials", "Verified (status ok) trials of the task."},
        {"kiln_task_restored_trials",
         "Trials of the task restored from the store at start."},
        {"kiln_task_in_flight", "Candidates of the task being measured."},
        {"kiln_task_max_trials", "Trial cap of the task."},
        {"kiln_task_done", "1 when the task reached its cap or its design "
                           "space has nothing new."},
        {"kiln_task_flop", "Floating-point operations of one run."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        kl_prom_family(b, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < s->n_tasks; i++) {
            const kl_metrics_task_t *t = &s->tasks[i];
            double v[] = {(double)t->trials,
                          (double)t->valid,
                          (double)t->restored,
                          (double)t->in_flight,
                          (double)t->cap,
                          t->done ? 1 : 0,
                          t->flop};
            s_task_sample(b, fam[f].name, i, t, false, v[f]);
        }
    }
    kl_prom_family(
        b, "kiln_task_best_latency_seconds", "gauge",
        "Median latency of the task's best verified candidate on its "
        "exact target (absent while there is none).");
    for (size_t i = 0; i < s->n_tasks; i++)
        if (isfinite(s->tasks[i].best_s))
            s_task_sample(b, "kiln_task_best_latency_seconds", i, &s->tasks[i],
                          true, s->tasks[i].best_s);
}

char *kl_metrics_render_text(const kl_metrics_snap_t *s)
{
    kl_buf_t b = {0};
    kl_prom_family(&b, "kiln_job_info", "gauge", "The tuning job (value 1).");
    kl_buf_puts(&b, "kiln_job_info{job=\"");
    kl_prom_label(&b, s->job);
    kl_buf_puts(&b, "\"} 1\n");
    kl_prom_metric(&b, "kiln_job_done", "gauge", "1 once the job has ended.",
                   s->done ? 1 : 0);
    kl_prom_metric(&b, "kiln_job_elapsed_seconds", "gauge",
                   "Seconds since the job started.", s->elapsed_s);
    s_text_dispatch(&b, s);
    s_text_tasks(&b, s);
    if (s->have_store) {
        kl_prom_metric(&b, "kiln_store_bytes", "gauge",
                       "Size of the record store's data file.",
                       (double)s->store_bytes);
        kl_prom_metric(&b, "kiln_store_map_bytes", "gauge",
                       "Map size of the record store (it doubles when full).",
                       (double)s->store_map_bytes);
    }
    return kl_buf_take(&b);
}

/* ---- the status page --------------------------------------------------- */

static void s_html_head(kl_buf_t *b, const kl_metrics_snap_t *s)
{
    char title[96];
    snprintf(title, sizeof title, "kiln tune: %s", s->job);
    kl_prom_html_begin(b, title);
    kl_buf_printf(b,
                  "<p>%s, %.0f s elapsed. Prometheus metrics: "
                  "<a href=\"/metrics\">/metrics</a>.</p>\n",
                  s->done ? "Done" : "Running", s->elapsed_s);
}

static void s_html_rates(kl_buf_t *b, const kl_metrics_snap_t *s)
{
    const kl_dispatch_stats_t *d = &s->dispatch;
    kl_buf_puts(b, "<h2>Agents</h2>\n<table><tr><th>Target</th><th>Agents"
                   "</th></tr>\n");
    for (size_t i = 0; i < s->n_targets; i++) {
        kl_buf_puts(b, "<tr><td class=\"l\">");
        kl_buf_put_xml(b, s->targets[i].target);
        kl_buf_printf(b, "</td><td>%zu</td></tr>\n", s->targets[i].agents);
    }
    kl_buf_printf(b, "<tr><td class=\"l\">all</td><td>%zu</td></tr></table>\n",
                  d->agents);
    kl_buf_printf(b,
                  "<h2>Rates</h2>\n<table><tr><th>Results/s</th><th>Queued"
                  "</th><th>In flight</th><th>Submitted</th><th>Results</th>"
                  "</tr>\n<tr><td>%.2f</td><td>%zu</td><td>%zu</td><td>%llu"
                  "</td><td>%llu</td></tr></table>\n",
                  d->results_per_s, d->queued, d->in_flight,
                  (unsigned long long)d->submitted,
                  (unsigned long long)d->results);
    kl_buf_puts(b, "<table><tr>");
    for (int i = 0; i < 8; i++)
        kl_buf_printf(b, "<th>%s</th>", s_status[i]);
    kl_buf_puts(b, "</tr>\n<tr>");
    for (int i = 0; i < 8; i++)
        kl_buf_printf(b, "<td>%llu</td>", (unsigned long long)d->by_status[i]);
    kl_buf_puts(b, "</tr></table>\n");
}

static void s_html_tasks(kl_buf_t *b, const kl_metrics_snap_t *s)
{
    kl_buf_puts(b, "<h2>Tasks</h2>\n<table><tr><th>ID</th><th>Workload</th>"
                   "<th>Target</th><th>Trials</th><th>Cap</th><th>Valid</th>"
                   "<th>Restored</th><th>In flight</th><th>Best (us)</th>"
                   "<th>GFLOP/s</th><th>Done</th></tr>\n");
    for (size_t i = 0; i < s->n_tasks; i++) {
        const kl_metrics_task_t *t = &s->tasks[i];
        kl_buf_printf(b, "<tr><td>%zu</td><td class=\"l\">", i);
        kl_buf_put_xml(b, t->workload);
        kl_buf_puts(b, "</td><td class=\"l\">");
        kl_buf_put_xml(b, t->target);
        kl_buf_printf(b,
                      "</td><td>%lld</td><td>%lld</td><td>%lld</td>"
                      "<td>%lld</td><td>%lld</td>",
                      (long long)t->trials, (long long)t->cap,
                      (long long)t->valid, (long long)t->restored,
                      (long long)t->in_flight);
        if (isfinite(t->best_s) && t->best_s > 0)
            kl_buf_printf(b, "<td>%.2f</td><td>%.2f</td>", t->best_s * 1e6,
                          t->flop / t->best_s / 1e9);
        else
            kl_buf_puts(b, "<td>-</td><td>-</td>");
        kl_buf_printf(b, "<td>%s</td></tr>\n", t->done ? "yes" : "no");
    }
    kl_buf_puts(b, "</table>\n");
}

char *kl_metrics_render_html(const kl_metrics_snap_t *s)
{
    kl_buf_t b = {0};
    s_html_head(&b, s);
    s_html_rates(&b, s);
    s_html_tasks(&b, s);
    if (s->have_store)
        kl_buf_printf(&b, "<p>Store: %.1f MiB (map %.0f MiB).</p>\n",
                      (double)s->store_bytes / (1 << 20),
                      (double)s->store_map_bytes / (1 << 20));
    kl_buf_puts(&b, "</body></html>\n");
    return kl_buf_take(&b);
}
