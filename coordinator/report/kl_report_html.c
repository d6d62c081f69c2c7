/* kl_report_html.c - the report's page and plots (kl_report.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kl_report.h"
#include "kl_report_int.h"
#include "kl_svg.h"
#include "kl_target.h"
#include "kl_util.h"

#define HIST_BINS 24
#define CELL_W 400
#define CELL_H 280

/* Seconds, minutes or hours, whichever keeps a span readable. */
static double s_time_unit(double span_s, const char **label)
{
    if (span_s <= 300) {
        *label = "wall time since the first record (s)";
        return 1;
    }
    if (span_s <= 300 * 60) {
        *label = "wall time since the first record (min)";
        return 60;
    }
    *label = "wall time since the first record (h)";
    return 3600;
}

/* Best GFLOP/s so far after each record (NAN before the first valid). */
static double *s_best_curve(const krep_task_t *t)
{
    double *y = kl_xmalloc((t->nrec ? t->nrec : 1) * sizeof *y);
    double best = INFINITY;
    for (size_t k = 0; k < t->nrec; k++) {
        if (isfinite(t->lat_s[k]) && t->lat_s[k] < best)
            best = t->lat_s[k];
        y[k] = isfinite(best) ? t->flop / best / 1e9 : NAN;
    }
    return y;
}

static kl_svg_t *s_latency_hist(const krep_task_t *t)
{
    kl_svg_t *p =
        kl_svg_new("latency of the valid candidates", "median latency (us)",
                   "candidates", KL_SVG_LOGX | KL_SVG_YZERO);
    double lo = INFINITY, hi = 0;
    for (size_t k = 0; k < t->nrec; k++)
        if (isfinite(t->lat_s[k])) {
            lo = fmin(lo, t->lat_s[k] * 1e6);
            hi = fmax(hi, t->lat_s[k] * 1e6);
        }
    if (!(lo <= hi))
        return p;
    if (hi < lo * 1.01) {
        lo *= 0.95;
        hi *= 1.05;
    }
    double edges[HIST_BINS + 1], counts[HIST_BINS] = {0};
    double a = log(lo), step = (log(hi) - a) / HIST_BINS;
    for (int b = 0; b <= HIST_BINS; b++)
        edges[b] = exp(a + step * b);
    for (size_t k = 0; k < t->nrec; k++) {
        if (!isfinite(t->lat_s[k]))
            continue;
        int b = (int)((log(t->lat_s[k] * 1e6) - a) / step);
        counts[b < 0 ? 0 : b >= HIST_BINS ? HIST_BINS - 1 : b]++;
    }
    kl_svg_add_bars(p, NULL, edges, counts, HIST_BINS);
    char note[96];
    snprintf(note, sizeof note, "%zu valid of %zu; best %.4g us", t->nok,
             t->nrec, t->best_s * 1e6);
    kl_svg_note(p, note);
    return p;
}

char *kl_report_task_svg(const kl_report_t *r, int i)
{
    const krep_task_t *t = &r->tasks[i];
    double *y = s_best_curve(t);
    double *x = kl_xmalloc((t->nrec ? t->nrec : 1) * sizeof *x);
    for (size_t k = 0; k < t->nrec; k++)
        x[k] = (double)(k + 1);
    kl_svg_t *p[3];
    p[0] = kl_svg_new("best GFLOP/s vs trials", "trials", "best GFLOP/s",
                      KL_SVG_YZERO);
    kl_svg_add(p[0], NULL, KL_SVG_STEP, x, y, t->nrec);
    if (t->nrec == 0)
        kl_svg_note(p[0], "no record on this target yet");
    double span = t->nrec ? (t->time_us[t->nrec - 1] - t->time_us[0]) / 1e6 : 0;
    const char *xl;
    double unit = s_time_unit(span, &xl);
    for (size_t k = 0; k < t->nrec; k++)
        x[k] = (t->time_us[k] - t->time_us[0]) / 1e6 / unit;
    p[1] = kl_svg_new("best GFLOP/s vs wall time", xl, "best GFLOP/s",
                      KL_SVG_YZERO | KL_SVG_XZERO);
    kl_svg_add(p[1], NULL, KL_SVG_STEP, x, y, t->nrec);
    p[2] = s_latency_hist(t);
    char id[32];
    snprintf(id, sizeof id, "task-%d", i);
    char *svg =
        kl_svg_grid((const kl_svg_t *const *)p, 3, 3, CELL_W, CELL_H, id);
    for (int k = 0; k < 3; k++)
        kl_svg_destroy(&p[k]);
    free(x);
    free(y);
    return svg;
}

/* ---- weighted latency over time ---------------------------------------- */

typedef struct {
    uint64_t time_us;
    int task;
    double lat_s;
} s_event_t;

static int s_cmp_event(const void *a, const void *b)
{
    const s_event_t *x = a, *y = b;
    return x->time_us < y->time_us ? -1 : x->time_us > y->time_us;
}

/* Events of every valid record, by time; *t0 the first record of all. */
static s_event_t *s_events(const kl_report_t *r, size_t *n, uint64_t *t0)
{
    size_t cap = 0;
    *t0 = UINT64_MAX;
    for (int i = 0; i < r->n; i++)
        cap += r->tasks[i].nok;
    s_event_t *ev = kl_xmalloc((cap ? cap : 1) * sizeof *ev);
    *n = 0;
    for (int i = 0; i < r->n; i++) {
        const krep_task_t *t = &r->tasks[i];
        for (size_t k = 0; k < t->nrec; k++) {
            if (t->time_us[k] < *t0)
                *t0 = t->time_us[k];
            if (isfinite(t->lat_s[k]))
                ev[(*n)++] = (s_event_t){t->time_us[k], i, t->lat_s[k]};
        }
    }
    qsort(ev, *n, sizeof *ev, s_cmp_event);
    return ev;
}

static void s_missing_note(const kl_report_t *r, kl_svg_t *p)
{
    kl_buf_t b = {0};
    int missing = 0;
    for (int i = 0; i < r->n; i++)
        if (!isfinite(r->tasks[i].best_s)) {
            if (missing++ < 2)
                kl_buf_printf(&b, "%s%s", missing > 1 ? ", " : "",
                              r->tasks[i].name);
        }
    if (missing > 2)
        kl_buf_printf(&b, " and %d more", missing - 2);
    char *note = kl_xasprintf("no curve: %d of %d tasks have no valid record "
                              "yet",
                              missing, r->n);
    kl_svg_note(p, note);
    kl_svg_note(p, b.data ? b.data : "");
    free(note);
    kl_buf_free(&b);
}

char *kl_report_weighted_svg(const kl_report_t *r)
{
    size_t n;
    uint64_t t0;
    s_event_t *ev = s_events(r, &n, &t0);
    double *best = kl_xmalloc((size_t)(r->n ? r->n : 1) * sizeof *best);
    for (int i = 0; i < r->n; i++)
        best[i] = INFINITY;
    double *x = kl_xmalloc((n ? n : 1) * sizeof *x);
    double *y = kl_xmalloc((n ? n : 1) * sizeof *y);
    size_t m = 0;
    int have = 0;
    double span = n ? (ev[n - 1].time_us - t0) / 1e6 : 0;
    const char *xl;
    double unit = s_time_unit(span, &xl);
    for (size_t k = 0; k < n; k++) {
        if (!isfinite(best[ev[k].task]))
            have++;
        if (ev[k].lat_s < best[ev[k].task])
            best[ev[k].task] = ev[k].lat_s;
        if (have < r->n)
            continue;
        double sum = 0;
        for (int i = 0; i < r->n; i++)
            sum += r->tasks[i].weight * best[i];
        x[m] = (ev[k].time_us - t0) / 1e6 / unit;
        y[m++] = sum * 1e3;
    }
    kl_svg_t *p = kl_svg_new(r->weighted ? "weighted latency of the model"
                                         : "sum of best latencies (weight 1)",
                             xl, "sum of weight x best latency (ms)",
                             KL_SVG_LOGY | KL_SVG_XZERO);
    kl_svg_add(p, NULL, KL_SVG_STEP, x, y, m);
    if (m) {
        char note[128];
        snprintf(note, sizeof note,
                 "starts at %.3g when every task has a valid record", x[0]);
        kl_svg_note(p, note);
    } else {
        s_missing_note(r, p);
    }
    char *svg = kl_svg_grid((const kl_svg_t *const *)&p, 1, 1, 2 * CELL_W,
                            CELL_H + 20, "weighted");
    kl_svg_destroy(&p);
    free(ev);
    free(best);
    free(x);
    free(y);
    return svg;
}

/* ---- the page ---------------------------------------------------------- */

static const char s_style[] =
    "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
    "table{border-collapse:collapse;margin:12px 0}"
    "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
    "td.l,th.l{text-align:left}th{background:#e8eef6}"
    "tr.total td{font-weight:bold;background:#f4f4f4}"
    "svg{display:block;margin:8px 0;border:1px solid #ddd;max-width:100%;"
    "height:auto}"
    "h2{margin-top:28px;font-size:16px}.note{color:#666}";

static void s_cell_num(kl_buf_t *b, double v, const char *fmt)
{
    kl_buf_puts(b, "<td>");
    if (isfinite(v))
        kl_buf_printf(b, fmt, v);
    else
        kl_buf_puts(b, "-");
    kl_buf_puts(b, "</td>");
}

static void s_table(const kl_report_t *r, kl_buf_t *b)
{
    kl_buf_puts(b, "<table>\n<tr><th>ID</th><th class=\"l\">Name</th>"
                   "<th>FLOP</th><th>Weight</th><th>Trials</th><th>Valid</th>"
                   "<th>Speed (GFLOP/s)</th><th>Latency (us)</th>"
                   "<th>Weighted latency (us)</th></tr>\n");
    double total = 0;
    size_t trials = 0;
    int without = 0;
    for (int i = 0; i < r->n; i++) {
        const krep_task_t *t = &r->tasks[i];
        kl_buf_printf(b, "<tr><td>%d</td><td class=\"l\"><a href=\"#t%d\">", i,
                      i);
        kl_buf_put_xml(b, t->name);
        kl_buf_printf(b,
                      "</a></td><td>%.4g</td><td>%g</td><td>%zu</td>"
                      "<td>%zu</td>",
                      t->flop, t->weight, t->nrec, t->nok);
        double s = t->best_s;
        s_cell_num(b, isfinite(s) ? t->flop / s / 1e9 : NAN, "%.2f");
        s_cell_num(b, s * 1e6, "%.2f");
        s_cell_num(b, t->weight * s * 1e6, "%.2f");
        kl_buf_puts(b, "</tr>\n");
        trials += t->nrec;
        if (isfinite(s))
            total += t->weight * s * 1e6;
        else
            without++;
    }
    kl_buf_printf(b,
                  "<tr class=\"total\"><td></td><td class=\"l\">Total"
                  "</td><td></td><td></td><td>%zu</td><td></td><td></td>"
                  "<td></td>",
                  trials);
    s_cell_num(b, without < r->n ? total : NAN, "%.2f");
    kl_buf_puts(b, "</tr>\n</table>\n");
    if (without)
        kl_buf_printf(b,
                      "<p class=\"note\">%d task(s) without a valid record "
                      "are not in the total.</p>\n",
                      without);
}

/* What the page does not show, and why: a reader must never take a
 * simulated or unverified latency, or one of the other condition, for
 * one of these. */
static void s_left_out(const kl_report_t *r, kl_buf_t *b)
{
    if (kl_target_is_sim(r->target))
        kl_buf_puts(b, "<p class=\"note\">Simulated device: every latency "
                       "on this page is synthetic, none was measured.</p>\n");
    size_t sim, unver, other;
    kl_report_left_out(r, &sim, &unver, &other);
    if (!sim && !unver && !other)
        return;
    kl_buf_puts(b, "<p class=\"note\">Not counted:");
    const char *sep = " ";
    if (sim) {
        kl_buf_printf(b, "%s%zu simulated record(s)", sep, sim);
        sep = ", ";
    }
    if (unver) {
        kl_buf_printf(b, "%s%zu unverified record(s) (skip_verify)", sep,
                      unver);
        sep = ", ";
    }
    if (other)
        kl_buf_printf(b, "%s%zu record(s) measured %s (--condition %s)", sep,
                      other, kl_cond_name(!r->cond), kl_cond_name(!r->cond));
    kl_buf_puts(b, ".</p>\n");
}

char *kl_report_html(const kl_report_t *r)
{
    kl_buf_t b = {0};
    kl_buf_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                    "<meta charset=\"utf-8\"/>\n<title>kiln report: ");
    kl_buf_put_xml(&b, r->title);
    kl_buf_printf(&b,
                  "</title>\n<style>%s</style>\n</head>\n<body>\n"
                  "<h1>kiln report: ",
                  s_style);
    kl_buf_put_xml(&b, r->title);
    kl_buf_puts(&b, " on ");
    kl_buf_put_xml(&b, r->target);
    kl_buf_puts(&b, "</h1>\n<p class=\"note\">Store ");
    kl_buf_put_xml(&b, r->source);
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tm));
    kl_buf_printf(&b, ", %d task(s), records of target ", r->n);
    kl_buf_put_xml(&b, r->target);
    kl_buf_printf(&b, " only, measured %s; made %s.</p>\n",
                  kl_cond_name(r->cond), when);
    s_left_out(r, &b);
    s_table(r, &b);
    char *svg = kl_report_weighted_svg(r);
    kl_buf_puts(&b, "<h2>Weighted latency</h2>\n");
    kl_buf_puts(&b, svg);
    free(svg);
    for (int i = 0; i < r->n; i++) {
        kl_buf_printf(&b, "<h2 id=\"t%d\">Task %d: ", i, i);
        kl_buf_put_xml(&b, r->tasks[i].name);
        kl_buf_printf(&b, " (weight %g)</h2>\n", r->tasks[i].weight);
        svg = kl_report_task_svg(r, i);
        kl_buf_puts(&b, svg);
        free(svg);
    }
    kl_buf_puts(&b, "</body>\n</html>\n");
    return kl_buf_take(&b);
}
