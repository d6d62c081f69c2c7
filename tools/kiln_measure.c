/* kiln measure - measures hand-written candidate kernels of one workload on
 * a local fleet (agents started here) or on remote agents (--listen), and
 * records every result in the store (--db). */
#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kl_fleet_coord.h"
#include "kiln_cmds.h"
#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_eval.h"
#include "kl_log.h"
#include "kl_opt.h"
#include "kl_store.h"
#include "kl_target.h"
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
    uint8_t key[16];
    int npos;
    char **src; /* per positional */
    uint8_t (*hash)[16];
    int *skip; /* 0, 1 seen in store, 2 duplicate of an earlier file */
    kl_dispatch_result_t **res; /* per positional */
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

/* The evaluator of every request (and of every record: what its latency
 * means, kl_record.h). */
static int s_read_sources(s_job_t *j, char *err)
{
    int rc = kl_read_file(kl_opts_str(j->o, "reference"), &j->ref, NULL, err);
    j->src = kl_xcalloc((size_t)j->npos, sizeof *j->src);
    j->hash = kl_xcalloc((size_t)j->npos, sizeof *j->hash);
    j->skip = kl_xcalloc((size_t)j->npos, sizeof *j->skip);
    j->res = kl_xcalloc((size_t)j->npos, sizeof *j->res);
    for (int i = 0; i < j->npos && rc == KL_OK; i++) {
        rc = kl_read_file(kl_opts_pos(j->o, i), &j->src[i], NULL, err);
        if (rc == KL_OK && !j->src[i][0])
            rc = kl_seterr(err, KL_ERR_INVAL, "%s is empty",
                           kl_opts_pos(j->o, i));
        if (rc == KL_OK)
            kl_hash128(j->src[i], strlen(j->src[i]), j->hash[i]);
    }
    if (rc != KL_OK)
        return rc;
    kl_buf_t kb = {0};
    kl_buf_puts(&kb, kl_opts_str(j->o, "args"));
    kl_buf_puts(&kb, j->ref);
    kl_hash128(kb.data, kb.len, j->key);
    kl_buf_free(&kb);
    return KL_OK;
}

/* Opens the store, records the workload and marks the sources measured
 * before (or given twice) as skipped. */
static int s_dedupe(s_job_t *j, char *err)
{
    for (int i = 0; i < j->npos; i++)
        for (int k = 0; k < i && !j->skip[i]; k++)
            if (!memcmp(j->hash[i], j->hash[k], 16))
                j->skip[i] = 2;
    const char *db = kl_opts_str(j->o, "db");
    if (!db)
        return KL_OK;
    int rc = kl_store_open(&j->store, db, 0, err);
    Kiln__Workload w = KILN__WORKLOAD__INIT;
    w.key.data = j->key;
    w.key.len = 16;
    w.text = (char *)kl_opts_str(j->o, "args");
    w.name = j->name;
    w.op_kind = "measure";
    w.flop = kl_opts_double(j->o, "flop");
    w.n_args = j->n_args;
    w.args = j->args;
    Kiln__Workload *have = NULL;
    /* Keep a FLOP count recorded before unless a new one is given. */
    if (rc == KL_OK && (kl_store_get_workload(j->store, j->key, &have, NULL) ||
                        kl_opts_given(j->o, "flop")))
        rc = kl_store_put_workload(j->store, &w, err);
    if (have)
        kiln__workload__free_unpacked(have, NULL);
    Kiln__Evaluator ev;
    kl_eval_from_opts(j->o, &ev);
    for (int i = 0; i < j->npos && rc == KL_OK; i++) {
        bool seen = false;
        if (!j->skip[i])
            rc = kl_store_seen(j->store, j->key, j->target, kl_cond_of(&ev),
                               j->hash[i], &seen, err);
        if (seen)
            j->skip[i] = 1;
    }
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
    if (j->skip[i]) {
        printf("%-28s %-13s %10s %10s %9s %7s  %s\n", file, "SKIPPED", "-", "-",
               "-", "-",
               j->skip[i] == 1 ? "already measured (in --db)"
                               : "same source as an earlier file");
        fflush(stdout);
        return;
    }
    const Kiln__MeasureResult *r = j->res[i]->result;
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

/* Commits one batch of results (one transaction), then reports them. */
static int s_commit(s_job_t *j, kl_dispatch_result_t **b, size_t n, char *err)
{
    if (j->store) {
        Kiln__TuningRecord *recs = kl_xcalloc(n, sizeof *recs);
        Kiln__TuningRecord **ptrs = kl_xcalloc(n, sizeof *ptrs);
        Kiln__Evaluator ev;
        kl_eval_from_opts(j->o, &ev);
        /* A simulated result is never a measurement of a real target
         * (kl_target.h), even from an agent that names the real one. */
        char sim[160];
        kl_target_sim(j->target, sim, sizeof sim);
        for (size_t i = 0; i < n; i++) {
            const Kiln__MeasureResult *r = b[i]->result;
            Kiln__TuningRecord *t = ptrs[i] = &recs[i];
            kiln__tuning_record__init(t);
            t->workload_key.data = j->key;
            t->workload_key.len = 16;
            t->target = r->simulated ? sim : (char *)j->target;
            t->status = r->status;
            t->n_samples = r->n_samples;
            t->samples = r->samples;
            t->median_s =
                r->n_samples ? kl_median(r->samples, r->n_samples) : 0;
            t->error = r->error;
            t->time_us = kl_unix_us();
            t->agent = (char *)b[i]->agent;
            t->device_name = (char *)b[i]->device_name;
            t->simulated = r->simulated || kl_target_is_sim(j->target);
            t->unsandboxed = r->unsandboxed;
            t->evaluator = &ev;
            t->trace_hash.data = j->hash[b[i]->index];
            t->trace_hash.len = 16;
            t->spread = r->spread;
            t->job = "measure";
            t->number = r->number;
            t->compile_s = r->compile_s;
        }
        int rc = kl_store_commit(j->store, ptrs, n, err);
        free(ptrs);
        free(recs);
        if (rc != KL_OK)
            return rc;
    }
    for (size_t i = 0; i < n; i++) {
        j->res[b[i]->index] = b[i];
        s_row(j, (int)b[i]->index);
    }
    return KL_OK;
}

static int s_submit(s_job_t *j, size_t *n_sub, char *err)
{
    Kiln__Candidate *c = kl_xcalloc((size_t)j->npos, sizeof *c);
    Kiln__Candidate **p = kl_xcalloc((size_t)j->npos, sizeof *p);
    size_t n = 0;
    const char *entry = kl_opts_str(j->o, "entry");
    for (int i = 0; i < j->npos; i++) {
        if (j->skip[i])
            continue;
        kiln__candidate__init(&c[n]);
        c[n].id = (uint64_t)i;
        c[n].source = j->src[i];
        c[n].entry = (char *)entry;
        p[n] = &c[n];
        n++;
    }
    Kiln__Evaluator ev;
    kl_eval_from_opts(j->o, &ev);
    const char *re = kl_opts_str(j->o, "ref-entry");
    kl_dispatch_batch_t b = {.workload_key = j->key,
                             .target = j->target,
                             .args = j->args,
                             .n_args = j->n_args,
                             .reference_source = j->ref,
                             .reference_entry = re ? re : entry,
                             .evaluator = &ev,
                             .candidates = p,
                             .n_candidates = n};
    uint64_t id;
    int rc = n ? kl_port_submit(&j->port, &b, &id, err) : KL_OK;
    free(c);
    free(p);
    *n_sub = n;
    return rc;
}

/* Waits for an agent of the target; KL_ERR_TIMEOUT after --agent-wait-s. */
static int s_wait_agent(s_job_t *j, double since, char *err)
{
    double wait = kl_opts_double(j->o, "agent-wait-s");
    for (;;) {
        size_t n = 0;
        int rc = kl_port_agents(&j->port, j->target, &n, err);
        if (rc != KL_OK || n > 0)
            return rc;
        if (s_stop)
            return kl_seterr(err, KL_ERR_CLOSED, "interrupted");
        if (kl_now_s() - since > wait)
            return kl_seterr(err, KL_ERR_TIMEOUT,
                             "no agent for target '%s' connected to %s "
                             "within %.0f s",
                             j->target, kl_port_where(&j->port), wait);
        if (j->fleet && kl_fleet_running(j->fleet) == 0)
            return kl_seterr(err, KL_ERR_CLOSED,
                             "every local kiln-agent exited (see its log "
                             "above)");
        /* Sleep, not recv: results that come meanwhile stay queued for
         * s_collect. */
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int s_collect(s_job_t *j, size_t want, char *err)
{
    kl_dispatch_result_t *b[256];
    size_t got = 0;
    while (got < want && !s_stop) {
        size_t n = 0;
        if (kl_port_recv(&j->port, &b[0], 250, NULL) == KL_OK) {
            n = 1;
            while (n < 256 && kl_port_recv(&j->port, &b[n], 0, NULL) == KL_OK)
                n++;
        }
        if (n) {
            int rc = s_commit(j, b, n, err);
            if (rc != KL_OK) {
                for (size_t i = 0; i < n; i++)
                    kl_dispatch_result_free(&b[i]);
                return rc;
            }
            got += n;
            continue;
        }
        size_t agents = 0;
        kl_port_agents(&j->port, j->target, &agents, NULL);
        if (agents == 0) {
            char why[KL_ERRMSG_LEN];
            int rc = s_wait_agent(j, kl_now_s(), why);
            if (rc != KL_OK)
                return kl_seterr(err, rc,
                                 "%.400s; %zu of %zu candidates not "
                                 "measured",
                                 why, want - got, want);
        }
    }
    if (s_stop)
        return kl_seterr(err, KL_ERR_CLOSED,
                         "interrupted; %zu of %zu "
                         "candidates not measured",
                         want - got, want);
    return KL_OK;
}

static void s_json(s_job_t *j)
{
    json_object *arr = json_object_new_array();
    for (int i = 0; i < j->npos; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "file",
                               json_object_new_string(kl_opts_pos(j->o, i)));
        char hex[33];
        kl_hex128(j->hash[i], hex);
        json_object_object_add(o, "source_hash", json_object_new_string(hex));
        const kl_dispatch_result_t *d = j->res[i];
        if (j->skip[i] || !d) {
            json_object_object_add(
                o, "status",
                json_object_new_string(j->skip[i] ? "SKIPPED"
                                                  : "NOT_MEASURED"));
            json_object_object_add(
                o, "error",
                json_object_new_string(j->skip[i] == 1   ? "already measured"
                                       : j->skip[i] == 2 ? "duplicate source"
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
        if (j->skip[i] || !j->res[i])
            continue;
        const Kiln__MeasureResult *r = j->res[i]->result;
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
    kl_store_close(&j->store);
    for (int i = 0; i < j->npos; i++) {
        if (j->src)
            free(j->src[i]);
        if (j->res)
            kl_dispatch_result_free(&j->res[i]);
    }
    free(j->src);
    free(j->hash);
    free(j->skip);
    free(j->res);
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
    size_t n = 0;
    int rc = s_dedupe(&j, err);
    for (int i = 0; rc == KL_OK && i < j.npos; i++)
        if (j.skip[i])
            fprintf(stderr, "kiln measure: skipping %s: %s\n",
                    kl_opts_pos(j.o, i),
                    j.skip[i] == 1 ? "this source was measured before"
                                   : "same source as an earlier file");
    int todo = 0;
    for (int i = 0; i < j.npos; i++)
        todo += !j.skip[i];
    bool usage = false;
    if (rc == KL_OK && todo) {
        rc = s_start(&j, err);
        usage = rc == KL_ERR_INVAL; /* endpoint, keys or flags that clash */
    }
    if (rc == KL_OK && todo)
        rc = s_wait_agent(&j, kl_now_s(), err);
    if (rc == KL_OK && todo)
        rc = s_submit(&j, &n, err);
    if (rc == KL_OK && todo)
        rc = s_collect(&j, n, err);
    for (int i = 0; i < j.npos; i++)
        if (j.skip[i])
            s_row(&j, i);
    if (kl_opts_bool(j.o, "json"))
        s_json(&j);
    s_summary(&j);
    if (rc != KL_OK)
        fprintf(stderr, "kiln measure: %s\n", err);
    s_job_free(&j);
    return rc == KL_OK ? 0 : usage ? 2 : 1;
}
