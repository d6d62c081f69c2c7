/* kl_ts_summary.c - the summary table of a tuning job, as text and JSON. */
#include "kl_tasksched.h"

#include <math.h>
#include <string.h>

#define S_NAME_MAX 48

static bool s_has(const kl_ts_row_t *r)
{
    return isfinite(r->best_s) && r->best_s > 0;
}

/* Writes s to f as a JSON string. */
static void s_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void s_rule(FILE *f, int width)
{
    for (int i = 0; i < width; i++)
        fputc('-', f);
    fputc('\n', f);
}

void kl_ts_print_table(FILE *f, const kl_ts_row_t *rows, int n)
{
    int nw = 4;
    for (int i = 0; i < n; i++) {
        int l = (int)strlen(rows[i].name);
        if (l > nw)
            nw = l > S_NAME_MAX ? S_NAME_MAX : l;
    }
    int width =
        fprintf(f,
                "%4s | %-*s | %10s | %6s | %14s | %12s | %21s | "
                "%7s | %s",
                "ID", nw, "Name", "FLOP", "Weight", "Speed (GFLOPS)",
                "Latency (us)", "Weighted Latency (us)", "Trials", "Done");
    fputc('\n', f);
    s_rule(f, width);
    int64_t trials = 0;
    double wlat = 0.0;
    int missing = 0;
    for (int i = 0; i < n; i++) {
        const kl_ts_row_t *r = &rows[i];
        trials += r->trials;
        char done[32];
        snprintf(done, sizeof(done), "%s%s%s%s", r->done ? "yes" : "",
                 r->done && r->why && *r->why ? " (" : "",
                 r->done && r->why ? r->why : "",
                 r->done && r->why && *r->why ? ")" : "");
        fprintf(f, "%4d | %-*.*s | %10.4g | %6g | ", i, nw, nw, r->name,
                r->flop, r->weight);
        if (s_has(r)) {
            double us = r->best_s * 1e6;
            wlat += us * r->weight;
            fprintf(f, "%14.2f | %12.2f | %21.2f | ", r->flop / r->best_s / 1e9,
                    us, us * r->weight);
        } else {
            missing++;
            fprintf(f, "%14s | %12s | %21s | ", "-", "-", "-");
        }
        fprintf(f, "%7lld | %s\n", (long long)r->trials, done);
    }
    s_rule(f, width);
    fprintf(f, "Total trials: %lld\n", (long long)trials);
    if (missing)
        fprintf(f,
                "Total weighted latency: %.2f us (%d of %d tasks without a "
                "result are not counted)\n",
                wlat, missing, n);
    else
        fprintf(f, "Total weighted latency: %.2f us\n", wlat);
}

static void s_num(FILE *f, const char *key, bool ok, double v)
{
    fprintf(f, ",\"%s\":", key);
    if (ok)
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

void kl_ts_print_json(FILE *f, const kl_ts_row_t *rows, int n)
{
    int64_t trials = 0;
    double wlat = 0.0;
    int missing = 0;
    fputs("{\"tasks\":[", f);
    for (int i = 0; i < n; i++) {
        const kl_ts_row_t *r = &rows[i];
        bool ok = s_has(r);
        trials += r->trials;
        if (ok)
            wlat += r->best_s * 1e6 * r->weight;
        else
            missing++;
        fprintf(f, "%s{\"id\":%d,\"name\":", i ? "," : "", i);
        s_json_str(f, r->name);
        fprintf(f, ",\"flop\":%.17g,\"weight\":%.17g", r->flop, r->weight);
        s_num(f, "gflops", ok, ok ? r->flop / r->best_s / 1e9 : 0);
        s_num(f, "latency_us", ok, r->best_s * 1e6);
        s_num(f, "weighted_latency_us", ok, r->best_s * 1e6 * r->weight);
        fprintf(f,
                ",\"trials\":%lld,\"done\":%s,\"why\":", (long long)r->trials,
                r->done ? "true" : "false");
        s_json_str(f, r->done && r->why ? r->why : "");
        fputc('}', f);
    }
    fprintf(f,
            "],\"total_trials\":%lld,\"total_weighted_latency_us\":%.17g,"
            "\"tasks_without_result\":%d}\n",
            (long long)trials, wlat, missing);
}
