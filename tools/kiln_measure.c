/* kiln measure - measures hand-written candidate kernels of one workload on
 * a local fleet (agents started here) or on remote agents (--listen), and
 * records every result in the store (--db). The work is a tuning job
 * (kl_job.h) of one task of fixed candidates (kl_fixed.h); this file parses
 * the command line and prints. */
#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kl_fleet_coord.h"
#include "kiln_cmds.h"
#include "kl_dispatch.h"
#include "kl_fixed.h"
#include "kl_err.h"
#include "kl_eval.h"
#include "kl_log.h"
#include "kl_opt.h"
#include "kl_store.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"args", KL_OPT_STR, NULL, KL_NOBOUNDS, "TEXT",
     "kernel arguments in ABI order, e.g. \"A:f32[256,256] "
     "B:f32[256,256]:const C:f32[256,256]:out\" (:out marks the output, "
     ":const an input that never changes, which a kernel may prepare once)"},
    {"reference", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "C source of the reference kernel (the output is checked against it)"},
    {"entry", KL_OPT_STR, "kernel", KL_NOBOUNDS, "NAME",
     "entry symbol of the candidates"},
    {"ref-entry", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME",
     "entry symbol of the reference (default: --entry)"},
    {"target", KL_OPT_STR, "cpu", KL_NOBOUNDS, "TARGET",
     "task target: cpu (any CPU agent), cpu/x86_64-avx512, cuda/sm_90, ..."},
    KL_EVAL_OPTS{"flop", KL_OPT_DOUBLE, "0", 0, 1e30, "F",
                 "FLOPs of one run (a multiply-add is 2), to print GFLOP/s"},
    {"db", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "record store: commit every result, skip sources already measured"},
    KL_FLEET_OPTS{
        "json", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
        "print a JSON array of results on stdout instead of the table"},
    KL_HEAD_OPTS KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln measure --args TEXT --reference FILE [options] CAND.c...\n"
    "Compiles, runs, checks and times each candidate on kiln agents.";

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

/* ---- the --args text ---- */

static int s_dtype(const char *s, size_t n, Kiln__DType *out)
{
    static const struct {
        const char *name;
        Kiln__DType t;
    } tab[] = {
        {"f32", KILN__DTYPE__DTYPE_F32},   {"f16", KILN__DTYPE__DTYPE_F16},
        {"bf16", KILN__DTYPE__DTYPE_BF16}, {"i32", KILN__DTYPE__DTYPE_I32},
        {"s32", KILN__DTYPE__DTYPE_I32},   {"u8", KILN__DTYPE__DTYPE_U8},
        {"s8", KILN__DTYPE__DTYPE_S8}};
    for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
        if (strlen(tab[i].name) == n && !strncmp(s, tab[i].name, n)) {
            *out = tab[i].t;
            return KL_OK;
        }
    return KL_ERR_INVAL;
}

/* One token "NAME:DTYPE[d0,d1,...][:out|:const|:in]". */
static int s_parse_arg(const char *tok, Kiln__KernelArg *a, char *err)
{
    kiln__kernel_arg__init(a);
    const char *p = tok;
    while (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
           (p > tok && *p >= '0' && *p <= '9'))
        p++;
    if (p == tok || *p != ':')
        return kl_seterr(err, KL_ERR_INVAL,
                         "--args: '%s': expected NAME:DTYPE[DIMS] (a name of "
                         "letters, digits and _ first)",
                         tok);
    a->name = kl_xstrndup(tok, (size_t)(p - tok));
    const char *t = ++p;
    while (*p && *p != '[')
        p++;
    if (*p != '[' || s_dtype(t, (size_t)(p - t), &a->dtype) != KL_OK)
        return kl_seterr(err, KL_ERR_INVAL,
                         "--args: '%s': dtype '%.*s' is not one of f32, f16, "
                         "bf16, u8, s8, s32 (or i32) (followed by [DIMS])",
                         tok, (int)(p - t), t);
    a->shape = kl_xcalloc(KL_NET_MAX_DIMS, sizeof *a->shape);
    for (p++;;) {
        char *end;
        errno = 0;
        long long d = strtoll(p, &end, 10);
        if (end == p || errno || d < 1 || d > (1ll << 31))
            return kl_seterr(err, KL_ERR_INVAL,
                             "--args: '%s': dimension %zu is not a positive "
                             "integer",
                             tok, a->n_shape + 1);
        if (a->n_shape == KL_NET_MAX_DIMS)
            return kl_seterr(err, KL_ERR_INVAL,
                             "--args: '%s': more than %d dimensions", tok,
                             KL_NET_MAX_DIMS);
        a->shape[a->n_shape++] = d;
        p = end;
        if (*p == ']')
            break;
        if (*p != ',')
            return kl_seterr(err, KL_ERR_INVAL,
                             "--args: '%s': expected ',' or ']' after "
                             "dimension %zu",
                             tok, a->n_shape);
        p++;
    }
    p++;
    if (!strcmp(p, ":out"))
        a->role = KILN__ARG_ROLE__ROLE_OUTPUT;
    else if (!strcmp(p, ":const"))
        a->role = KILN__ARG_ROLE__ROLE_CONSTANT;
    else if (*p && strcmp(p, ":in"))
        return kl_seterr(err, KL_ERR_INVAL,
                         "--args: '%s': unexpected '%s' (only :out, :const or "
                         ":in may follow the shape)",
                         tok, p);
    return KL_OK;
}

static void s_free_args(Kiln__KernelArg **args, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(args[i]->name);
        free(args[i]->shape);
        free(args[i]);
    }
    free(args);
}

/* Parses the whole text into args in ABI order (inputs, then the output)
 * and writes "measure:<names>" into name. */
static int s_parse_args(const char *text, Kiln__KernelArg ***out, size_t *n,
                        kl_buf_t *name, char *err)
{
    char *copy = kl_xstrdup(text), *save = NULL;
    Kiln__KernelArg **v = kl_xcalloc(KL_NET_MAX_ARGS + 1, sizeof *v);
    size_t k = 0, outs = 0;
    int rc = KL_OK;
    for (char *tok = strtok_r(copy, " \t\n", &save); tok && rc == KL_OK;
         tok = strtok_r(NULL, " \t\n", &save)) {
        if (k == KL_NET_MAX_ARGS) {
            rc = kl_seterr(err, KL_ERR_INVAL, "--args: more than %d args",
                           KL_NET_MAX_ARGS);
            break;
        }
        v[k] = kl_xmalloc(sizeof *v[k]);
        rc = s_parse_arg(tok, v[k++], err);
        for (size_t j = 0; rc == KL_OK && j + 1 < k; j++)
            if (!strcmp(v[j]->name, v[k - 1]->name))
                rc = kl_seterr(err, KL_ERR_INVAL, "--args: '%s' named twice",
                               v[j]->name);
        if (rc == KL_OK && v[k - 1]->role == KILN__ARG_ROLE__ROLE_OUTPUT)
            outs++;
    }
    free(copy);
    if (rc == KL_OK && outs != 1)
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "--args: %zu args marked :out (exactly one is needed)",
                       outs);
    if (rc != KL_OK) {
        s_free_args(v, k);
        return rc;
    }
    /* ABI order: inputs in order of appearance, then the output. */
    for (size_t i = 0; i + 1 < k; i++)
        if (v[i]->role == KILN__ARG_ROLE__ROLE_OUTPUT) {
            Kiln__KernelArg *o = v[i];
            memmove(&v[i], &v[i + 1], (k - i - 1) * sizeof *v);
            v[k - 1] = o;
            break;
        }
    kl_buf_puts(name, "measure:");
    for (size_t i = 0; i < k; i++)
        kl_buf_printf(name, "%s%s", i ? "," : "", v[i]->name);
    *out = v;
    *n = k;
    return KL_OK;
}

/* ---- the job ---- */

typedef struct {
    kl_opts_t *o;
    const char *target;
    Kiln__KernelArg **args;
    size_t n_args;
    char *name;
    char *ref;
    int npos;
    char **src;        /* per positional */
    kl_fixed_t *fixed; /* the sources as a job's task */
    kl_store_t *store;
    kl_dispatch_t *disp;
    kl_fleet_t *fleet;
    kl_port_fleet_t *head; /* --fleet */
    kl_port_t port;        /* disp's or head's */
    bool header;
} s_job_t;

static const char *s_status(int st)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&kiln__status__descriptor, st);
    return v ? v->name + 7 : "UNKNOWN"; /* past "STATUS_" */
}

static void s_on_result(void *ctx, int i);

/* Reads the reference and the candidates, and makes them the job's task
 * (kl_fixed.h: the workload's key, the sources' hashes, duplicates). */
static int s_read_sources(s_job_t *j, char *err)
{
    int rc = kl_read_file(kl_opts_str(j->o, "reference"), &j->ref, NULL, err);
    j->src = kl_xcalloc((size_t)j->npos, sizeof *j->src);
    for (int i = 0; i < j->npos && rc == KL_OK; i++) {
        rc = kl_read_file(kl_opts_pos(j->o, i), &j->src[i], NULL, err);
        if (rc == KL_OK && !j->src[i][0])
            rc = kl_seterr(err, KL_ERR_INVAL, "%s is empty",
                           kl_opts_pos(j->o, i));
    }
    if (rc != KL_OK)
        return rc;
    const char *entry = kl_opts_str(j->o, "entry");
    const char *re = kl_opts_str(j->o, "ref-entry");
    kl_fixed_cfg_t fc = {.args_text = kl_opts_str(j->o, "args"),
                         .args = j->args,
                         .n_args = j->n_args,
                         .name = j->name,
                         .reference = j->ref,
                         .entry = entry,
                         .ref_entry = re ? re : entry,
                         .target = j->target,
                         .flop = kl_opts_double(j->o, "flop"),
                         .flop_given = kl_opts_given(j->o, "flop"),
                         .sources = (const char *const *)j->src,
                         .n = j->npos,
                         .on_result = s_on_result,
                         .ctx = j};
    /* The evaluator of every request and of every record (what its
     * latency means, kl_record.h). */
    kl_eval_from_opts(j->o, &fc.evaluator);
    j->fixed = kl_fixed_new(&fc);
    return KL_OK;
}

/* Opens the store (--db): the task records the workload there and skips
 * the sources measured before. */
static int s_dedupe(s_job_t *j, char *err)
{
    const char *db = kl_opts_str(j->o, "db");
    if (!db)
        return KL_OK;
    int rc = kl_store_open(&j->store, db, 0, err);
    if (rc == KL_OK)
        rc = kl_fixed_dedupe(j->fixed, j->store, err);
    return rc;
}

static void s_row(s_job_t *j, int i)
{
    if (kl_opts_bool(j->o, "json"))
        return;
    if (!j->header) {
        printf("%-28s %-13s %10s %10s %9s %7s  %s\n", "candidate", "status",
               "median_us", "min_us", "GFLOP/s", "samples", "error");
        j->header = true;
    }
    const char *file = kl_opts_pos(j->o, i);
    kl_fixed_state st = kl_fixed_state_of(j->fixed, i);
    if (st != KL_FIXED_NEW) {
        printf("%-28s %-13s %10s %10s %9s %7s  %s\n", file, "SKIPPED", "-", "-",
               "-", "-",
               st == KL_FIXED_SEEN ? "already measured (in --db)"
                                   : "same source as an earlier file");
        fflush(stdout);
        return;
    }
    const Kiln__MeasureResult *r = kl_fixed_result(j->fixed, i)->result;
    char med[32] = "-", min[32] = "-", gf[32] = "-";
    if (r->n_samples) {
        double m = kl_median(r->samples, r->n_samples);
        double lo = kl_percentile(r->samples, r->n_samples, 0);
        snprintf(med, sizeof med, "%.2f", m * 1e6);
        snprintf(min, sizeof min, "%.2f", lo * 1e6);
        double flop = kl_opts_double(j->o, "flop");
        if (flop > 0 && m > 0)
            snprintf(gf, sizeof gf, "%.2f", flop / m / 1e9);
    }
    /* The line that says what went wrong (a compiler's "error:" line). */
    const char *e = r->error ? r->error : "";
    const char *hit = strstr(e, "error:");
    if (hit) {
        while (hit > e && hit[-1] != '\n')
            hit--;
        e = hit;
    }
    int elen = (int)strcspn(e, "\n");
    printf("%-28s %-13s %10s %10s %9s %7zu  %.*s\n", file, s_status(r->status),
           med, min, gf, r->n_samples, elen > 100 ? 100 : elen, e);
    fflush(stdout);
}

/* A result of source i was committed: its row of the table. */
static void s_on_result(void *ctx, int i)
{
    s_row(ctx, i);
}

/* Whether a local agent still runs (always, without local agents). */
static bool s_alive(void *ctx)
{
    const s_job_t *j = ctx;
    return !j->fleet || kl_fleet_running(j->fleet) > 0;
}

/* Measures the sources to measure: a job of their task (kl_fixed_job) on
 * the port waits for an agent of the target, sends them and records every
 * result (s_on_result prints its row). */
static int s_run(s_job_t *j, char *err)
{
    kl_job_t *job = NULL;
    int rc = kl_fixed_job(j->fixed, &job, err);
    kl_job_run_cfg_t run = {.agent_wait_s =
                                kl_opts_double(j->o, "agent-wait-s"),
                            .stop = &s_stop,
                            .alive = s_alive,
                            .ctx = j};
    if (rc == KL_OK)
        rc = kl_job_run(job, &j->port, &run, err);
    kl_job_destroy(&job);
    return rc;
}

static void s_json(s_job_t *j)
{
    json_object *arr = json_object_new_array();
    for (int i = 0; i < j->npos; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "file",
                               json_object_new_string(kl_opts_pos(j->o, i)));
        char hex[33];
        kl_hex128(kl_fixed_hash(j->fixed, i), hex);
        json_object_object_add(o, "source_hash", json_object_new_string(hex));
        const kl_dispatch_result_t *d = kl_fixed_result(j->fixed, i);
        kl_fixed_state st = kl_fixed_state_of(j->fixed, i);
        if (st != KL_FIXED_NEW || !d) {
            json_object_object_add(
                o, "status",
                json_object_new_string(st != KL_FIXED_NEW ? "SKIPPED"
                                                          : "NOT_MEASURED"));
            json_object_object_add(
                o, "error",
                json_object_new_string(st == KL_FIXED_SEEN ? "already measured"
                                       : st == KL_FIXED_DUPLICATE
                                           ? "duplicate source"
                                           : "no result"));
            json_object_array_add(arr, o);
            continue;
        }
        const Kiln__MeasureResult *r = d->result;
        json_object_object_add(o, "status",
                               json_object_new_string(s_status(r->status)));
        json_object *samples = json_object_new_array();
        for (size_t k = 0; k < r->n_samples; k++)
            json_object_array_add(samples,
                                  json_object_new_double(r->samples[k] * 1e6));
        json_object_object_add(o, "samples_us", samples);
        if (r->n_samples) {
            double m = kl_median(r->samples, r->n_samples);
            json_object_object_add(o, "median_us",
                                   json_object_new_double(m * 1e6));
            json_object_object_add(
                o, "min_us",
                json_object_new_double(
                    kl_percentile(r->samples, r->n_samples, 0) * 1e6));
            double flop = kl_opts_double(j->o, "flop");
            if (flop > 0 && m > 0)
                json_object_object_add(o, "gflops",
                                       json_object_new_double(flop / m / 1e9));
        }
        json_object_object_add(o, "number", json_object_new_int64(r->number));
        json_object_object_add(o, "compile_s",
                               json_object_new_double(r->compile_s));
        json_object_object_add(o, "max_abs_err",
                               json_object_new_double(r->max_abs_err));
        json_object_object_add(o, "simulated",
                               json_object_new_boolean(r->simulated));
        if (r->unsandboxed)
            json_object_object_add(o, "unsandboxed",
                                   json_object_new_boolean(true));
        json_object_object_add(
            o, "error", json_object_new_string(r->error ? r->error : ""));
        json_object_object_add(o, "agent", json_object_new_string(d->agent));
        json_object_object_add(o, "device",
                               json_object_new_string(d->device_name));
        json_object_object_add(o, "attempts",
                               json_object_new_int((int)d->attempts));
        json_object_array_add(arr, o);
    }
    printf("%s\n",
           json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY));
    json_object_put(arr);
}

static void s_summary(s_job_t *j)
{
    size_t by[9] = {0};
    int best = -1;
    double best_m = 0;
    for (int i = 0; i < j->npos; i++) {
        const kl_dispatch_result_t *d = kl_fixed_result(j->fixed, i);
        if (kl_fixed_state_of(j->fixed, i) != KL_FIXED_NEW || !d)
            continue;
        const Kiln__MeasureResult *r = d->result;
        by[(unsigned)r->status < 8 ? r->status : 8]++;
        double m = r->n_samples ? kl_median(r->samples, r->n_samples) : 0;
        if (r->status == KILN__STATUS__STATUS_OK && r->n_samples &&
            (best < 0 || m < best_m)) {
            best = i;
            best_m = m;
        }
    }
    kl_buf_t b = {0};
    for (int s = 0; s < 8; s++)
        if (by[s])
            kl_buf_printf(&b, " %zu %s", by[s], s_status(s));
    fprintf(stderr, "kiln measure: %d candidate(s):%s", j->npos,
            b.data ? b.data : " none measured");
    if (best >= 0)
        fprintf(stderr, "; best %s at %.2f us", kl_opts_pos(j->o, best),
                best_m * 1e6);
    fprintf(stderr, "\n");
    kl_buf_free(&b);
}

/* Binds the coordinator and, when asked, starts local agents; or, with
 * --fleet, joins a shared head node as job --name (default
 * measure-HOST-PID). */
static int s_start(s_job_t *j, char *err)
{
    int rc;
    if (kl_opts_str(j->o, "fleet")) {
        char host[64] = "host", name[96];
        gethostname(host, sizeof host - 1);
        snprintf(name, sizeof name, "measure-%s-%d", host, (int)getpid());
        rc =
            kl_fleet_head(j->o, "kiln measure", j->target, name, &j->head, err);
        if (rc == KL_OK)
            j->port = kl_port_fleet(j->head);
        return rc;
    }
    rc = kl_fleet_coordinator(j->o, "kiln measure", false, &j->fleet, &j->disp,
                              err);
    if (rc == KL_OK)
        j->port = kl_port_dispatch(j->disp);
    return rc;
}

static void s_job_free(s_job_t *j)
{
    kl_port_fleet_destroy(&j->head);
    kl_dispatch_destroy(&j->disp);
    kl_fleet_destroy(&j->fleet);
    kl_fixed_destroy(&j->fixed);
    kl_store_close(&j->store);
    for (int i = 0; j->src && i < j->npos; i++)
        free(j->src[i]);
    free(j->src);
    free(j->ref);
    free(j->name);
    if (j->args)
        s_free_args(j->args, j->n_args);
    kl_opts_free(&j->o);
}

/* Checks the command line; 0 to go on, else the exit code. */
static int s_parse(s_job_t *j, int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    if (kl_opts_parse(s_opts, argc, argv, &j->o, err) != KL_OK) {
        fprintf(stderr, "kiln measure: %s\n", err);
        return 2;
    }
    if (kl_opts_help_asked(j->o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        return -1;
    }
    const char *missing = !kl_opts_str(j->o, "args")        ? "--args"
                          : !kl_opts_str(j->o, "reference") ? "--reference"
                          : kl_opts_npos(j->o) == 0         ? "candidate files"
                                                            : NULL;
    if (missing) {
        fprintf(stderr, "kiln measure: %s missing\n%s\n", missing, s_usage);
        return 2;
    }
    j->target = kl_opts_str(j->o, "target");
    j->npos = kl_opts_npos(j->o);
    kl_buf_t name = {0};
    if (kl_fleet_head_check(j->o, false, err) != KL_OK) {
        fprintf(stderr, "kiln measure: %s\n%s\n", err, s_usage);
        return 2;
    }
    int rc = s_parse_args(kl_opts_str(j->o, "args"), &j->args, &j->n_args,
                          &name, err);
    j->name = kl_buf_take(&name);
    if (rc == KL_OK)
        rc = s_read_sources(j, err);
    if (rc != KL_OK) {
        fprintf(stderr, "kiln measure: %s\n", err);
        return 2;
    }
    return 0;
}

int kiln_cmd_measure(int argc, char **argv)
{
    s_job_t j = {0};
    int code = s_parse(&j, argc, argv);
    if (code != 0) {
        s_job_free(&j);
        return code < 0 ? 0 : code;
    }
    kl_log_init("kiln measure");
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char err[KL_ERRMSG_LEN];
    int rc = s_dedupe(&j, err);
    for (int i = 0; rc == KL_OK && i < j.npos; i++) {
        kl_fixed_state st = kl_fixed_state_of(j.fixed, i);
        if (st != KL_FIXED_NEW)
            fprintf(stderr, "kiln measure: skipping %s: %s\n",
                    kl_opts_pos(j.o, i),
                    st == KL_FIXED_SEEN ? "this source was measured before"
                                        : "same source as an earlier file");
    }
    int pending = kl_fixed_pending(j.fixed);
    bool usage = false;
    if (rc == KL_OK && pending) {
        rc = s_start(&j, err);
        usage = rc == KL_ERR_INVAL; /* endpoint, keys or flags that clash */
    }
    if (rc == KL_OK && pending)
        rc = s_run(&j, err);
    for (int i = 0; i < j.npos; i++)
        if (kl_fixed_state_of(j.fixed, i) != KL_FIXED_NEW)
            s_row(&j, i);
    if (kl_opts_bool(j.o, "json"))
        s_json(&j);
    s_summary(&j);
    if (rc != KL_OK)
        fprintf(stderr, "kiln measure: %s\n", err);
    s_job_free(&j);
    return rc == KL_OK ? 0 : usage ? 2 : 1;
}
