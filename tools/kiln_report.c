/* kiln report - one self-contained HTML page (inline SVG) of what a record
 * store holds: the summary table, per task the convergence curves and the
 * latency distribution, and the weighted latency of the job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_opt.h"
#include "kl_report.h"
#include "kl_store.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"db", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR", "record store to report on"},
    {"model", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME|FILE",
     "the model's tasks and weights (built-in or graph file); default: "
     "every workload with records, weight 1"},
    KILN_DIM_OPTS,
    {"target", KL_OPT_STR, "cpu", KL_NOBOUNDS, "TARGET",
     "records of this target only; cpu is this machine's exact CPU target"},
    {"condition", KL_OPT_STR, "warm", KL_NOBOUNDS, "warm|cold",
     "records of this measurement condition only (cold: caches flushed "
     "before every sample of one run); the two are never compared"},
    {"html", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "write the page here (- for stdout)"},
    {"svg", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "write the plots alone here: weighted.svg, task-I.svg"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln report --db DIR [--model NAME|FILE [--batch N] [--seq N]] "
    "[--target cpu]\n"
    "                   [--condition warm|cold] [--html FILE] [--svg DIR]\n"
    "Writes the results of a record store as one HTML page with inline SVG "
    "plots (no network\nneeded to view it) and/or the plots as SVG files.\n"
    "Exit codes: 0 ok, 1 failed (store, model, file), 2 usage, 3 no record "
    "on the target.";

static int s_write_html(const kl_report_t *r, const char *path, char *err)
{
    char *html = kl_report_html(r);
    int rc = KL_OK;
    if (!strcmp(path, "-")) {
        if (fputs(html, stdout) == EOF || fflush(stdout))
            rc = kl_seterr(err, KL_ERR_IO, "stdout: write failed");
    } else {
        rc = kl_write_file(path, html, strlen(html), err);
    }
    free(html);
    return rc;
}

static int s_run(const kl_opts_t *o, kl_cond_t cond, char *err)
{
    kl_store_t *st = NULL;
    const char *db = kl_opts_str(o, "db");
    int rc = kl_store_open(&st, db, KL_STORE_RDONLY, err);
    if (rc) /* a missing store is a failure, not a missing record */
        return rc == KL_ERR_NOTFOUND ? KL_ERR_IO : rc;
    kl_report_t *r = NULL;
    kl_report_cfg_t cfg = {.target = kl_opts_str(o, "target"),
                           .model = kl_opts_str(o, "model"),
                           .source = db,
                           .cond = cond,
                           .batch = kl_opts_int(o, "batch"),
                           .seq = kl_opts_int(o, "seq")};
    rc = kl_report_load(&r, st, &cfg, err);
    const char *html = kl_opts_str(o, "html"), *svg = kl_opts_str(o, "svg");
    if (!rc && html)
        rc = s_write_html(r, html, err);
    if (!rc && svg)
        rc = kl_report_write_svgs(r, svg, err);
    if (!rc)
        fprintf(stderr, "kiln report: %d task(s) on %s (%s)%s%s%s%s\n",
                kl_report_ntasks(r), kl_report_exact_target(r),
                kl_cond_name(cond), html ? ", page " : "", html ? html : "",
                svg ? ", plots in " : "", svg ? svg : "");
    kl_report_destroy(&r);
    kl_store_close(&st);
    return rc;
}

int kiln_cmd_report(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err)) {
        fprintf(stderr, "kiln report: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&o);
        return 0;
    }
    if (!kl_opts_str(o, "db") ||
        (!kl_opts_str(o, "html") && !kl_opts_str(o, "svg")) ||
        kl_opts_npos(o) > 0) {
        fprintf(stderr, "kiln report: %s\n%s\n",
                kl_opts_npos(o) > 0 ? "unexpected argument"
                                    : "--db and one of --html or --svg needed",
                s_usage);
        kl_opts_free(&o);
        return 2;
    }
    if (!kl_opts_str(o, "model") &&
        (kl_opts_given(o, "batch") || kl_opts_given(o, "seq"))) {
        fprintf(stderr, "kiln report: --batch and --seq go with --model\n%s\n",
                s_usage);
        kl_opts_free(&o);
        return 2;
    }
    kl_cond_t cond = KL_COND_WARM;
    if (kl_cond_parse(kl_opts_str(o, "condition"), &cond, err)) {
        fprintf(stderr, "kiln report: --condition: %s\n%s\n", err, s_usage);
        kl_opts_free(&o);
        return 2;
    }
    int rc = s_run(o, cond, err);
    if (rc)
        fprintf(stderr, "kiln report: %s\n", err);
    kl_opts_free(&o);
    return rc == KL_ERR_NOTFOUND ? 3 : rc ? 1 : 0;
}
