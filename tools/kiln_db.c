/* kiln db - look into a record store: ls, best, export, import. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_opt.h"
#include "kl_store.h"
#include "kl_target.h"
#include "kl_trace.h"
#include "kl_task.h"
#include "kl_util.h"

#define S_USAGE                                                                \
    "usage: kiln db ls --db DIR\n"                                             \
    "       kiln db best --db DIR (--key HEX | --name NAME) [--target T] "     \
    "[--condition warm|cold] [--json] [--source]\n"                            \
    "       kiln db export --db DIR [--out FILE]\n"                            \
    "       kiln db import --db DIR FILE    (FILE '-' reads stdin)\n"          \
    "       kiln db upgrade --db DIR        (a store of an older schema)\n"

static const kl_opt_t s_opts[] = {
    {"db", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR", "record store directory"},
    {"key", KL_OPT_STR, NULL, KL_NOBOUNDS, "HEX",
     "best: workload key (32 hex digits)"},
    {"name", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME", "best: workload name"},
    {"target", KL_OPT_STR, NULL, KL_NOBOUNDS, "T",
     "best: only this target; cpu is this machine's exact target (default: "
     "every target with records)"},
    {"condition", KL_OPT_STR, "warm", KL_NOBOUNDS, "warm|cold",
     "best: records of this measurement condition only (cold: caches "
     "flushed before every sample of one run); the two never compete"},
    {"json", KL_OPT_BOOL, "false", KL_NOBOUNDS, NULL,
     "best: print the record as one JSON line (the export format)"},
    {"source", KL_OPT_BOOL, "false", KL_NOBOUNDS, NULL,
     "best: also print the C source that the best trace generates"},
    {"out", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "export: write here instead of stdout"},
    KL_OPT_END,
};

/* ---- ls ---------------------------------------------------------------- */

/* One row of ls: the records of (workload, target) of one class: a
 * measurement condition, or "simulated" / "unverified" for records that
 * are never results (kl_record.h). */
typedef struct {
    uint8_t key[16];
    char *target;
    const char *cls;
    bool measured;
    kl_cond_t cond;
    size_t n, ok;
} group_t;

typedef struct {
    group_t *g;
    size_t n, cap;
    Kiln__Workload **w;
    size_t nw, capw;
} ls_t;

static const char *s_class(const Kiln__TuningRecord *r)
{
    kl_record_kind_t k = kl_record_kind(r);
    return k == KL_RECORD_MEASURED ? kl_cond_name(kl_record_cond(r))
                                   : kl_record_kind_name(k);
}

static int s_ls_rec(const Kiln__TuningRecord *r, void *arg)
{
    ls_t *ls = arg;
    const char *cls = s_class(r);
    /* Records come in (key, target) order: the groups of this pair are the
     * last ones. */
    group_t *g = NULL;
    for (size_t i = ls->n; i-- > 0 && !g;) {
        if (memcmp(ls->g[i].key, r->workload_key.data, 16) ||
            strcmp(ls->g[i].target, r->target))
            break;
        if (!strcmp(ls->g[i].cls, cls))
            g = &ls->g[i];
    }
    if (!g) {
        if (ls->n == ls->cap) {
            ls->cap = ls->cap ? 2 * ls->cap : 16;
            ls->g = kl_xrealloc(ls->g, ls->cap * sizeof *ls->g);
        }
        g = &ls->g[ls->n++];
        memcpy(g->key, r->workload_key.data, 16);
        g->target = kl_xstrdup(r->target);
        g->cls = cls;
        g->measured = kl_record_kind(r) == KL_RECORD_MEASURED;
        g->cond = kl_record_cond(r);
        g->n = g->ok = 0;
    }
    g->n++;
    g->ok += kl_record_valid(r);
    return 0;
}

static int s_ls_w(const Kiln__Workload *w, void *arg)
{
    ls_t *ls = arg;
    if (ls->nw == ls->capw) {
        ls->capw = ls->capw ? 2 * ls->capw : 16;
        ls->w = kl_xrealloc(ls->w, ls->capw * sizeof *ls->w);
    }
    /* A deep copy: the callback's workload is borrowed. */
    size_t len = kiln__workload__get_packed_size(w);
    uint8_t *buf = kl_xmalloc(len ? len : 1);
    kiln__workload__pack(w, buf);
    ls->w[ls->nw++] = kiln__workload__unpack(NULL, len, buf);
    free(buf);
    return 0;
}

static const Kiln__Workload *s_find_w(const ls_t *ls, const uint8_t key[16])
{
    for (size_t i = 0; i < ls->nw; i++)
        if (ls->w[i]->key.len == 16 && !memcmp(ls->w[i]->key.data, key, 16))
            return ls->w[i];
    return NULL;
}

static void s_ls_row(kl_store_t *st, const uint8_t key[16],
                     const Kiln__Workload *w, const group_t *g)
{
    char hex[33], best[32] = "-", speed[32] = "-", ok[24] = "-";
    kl_hex128(key, hex);
    Kiln__TuningRecord *b = NULL;
    char err[KL_ERRMSG_LEN];
    if (g && g->measured)
        snprintf(ok, sizeof ok, "%zu", g->ok);
    if (g && g->measured &&
        kl_store_best(st, key, g->target, g->cond, &b, err) == KL_OK) {
        snprintf(best, sizeof best, "%.2f", b->median_s * 1e6);
        if (w && w->flop > 0 && b->median_s > 0)
            snprintf(speed, sizeof speed, "%.1f", w->flop / b->median_s / 1e9);
        if (kl_target_is_sim(b->target))
            strcat(best, " (sim)");
        kiln__tuning_record__free_unpacked(b, NULL);
    }
    printf("%-12.12s  %-28s %-12s %-22s %-10s %8zu %8s %12s %10s\n", hex,
           w && *w->name ? w->name : "-", w && *w->op_kind ? w->op_kind : "-",
           g ? g->target : "-", g ? g->cls : "-", g ? g->n : 0, ok, best,
           speed);
}

static int s_ls(kl_store_t *st, char *err)
{
    ls_t ls = {0};
    int rc = kl_store_foreach_workload(st, s_ls_w, &ls, err);
    if (rc == KL_OK)
        rc = kl_store_foreach_record(st, NULL, NULL, s_ls_rec, &ls, err);
    if (rc == KL_OK) {
        printf("%-12s  %-28s %-12s %-22s %-10s %8s %8s %12s %10s\n", "KEY",
               "NAME", "OP", "TARGET", "CONDITION", "RECORDS", "VALID",
               "BEST_US", "GFLOP/S");
        for (size_t i = 0; i < ls.n; i++)
            s_ls_row(st, ls.g[i].key, s_find_w(&ls, ls.g[i].key), &ls.g[i]);
        /* Workloads that have no record yet. */
        for (size_t i = 0; i < ls.nw; i++) {
            bool has = false;
            for (size_t j = 0; j < ls.n && !has; j++)
                has = ls.w[i]->key.len == 16 &&
                      !memcmp(ls.g[j].key, ls.w[i]->key.data, 16);
            if (!has && ls.w[i]->key.len == 16)
                s_ls_row(st, ls.w[i]->key.data, ls.w[i], NULL);
        }
    }
    for (size_t i = 0; i < ls.n; i++)
        free(ls.g[i].target);
    for (size_t i = 0; i < ls.nw; i++)
        kiln__workload__free_unpacked(ls.w[i], NULL);
    free(ls.g);
    free(ls.w);
    return rc ? 1 : 0;
}

/* ---- best -------------------------------------------------------------- */

static void s_trace_ops(const Kiln__Inst *const *insts, size_t n, size_t *count,
                        kl_buf_t *names)
{
    for (size_t i = 0; i < n; i++) {
        (*count)++;
        kl_buf_printf(names, "%s%s", names->len ? ", " : "", insts[i]->op);
        if (insts[i]->n_then_body || insts[i]->n_else_body) {
            kl_buf_puts(names, " {");
            s_trace_ops((const Kiln__Inst *const *)insts[i]->then_body,
                        insts[i]->n_then_body, count, names);
            kl_buf_puts(names, " } else {");
            s_trace_ops((const Kiln__Inst *const *)insts[i]->else_body,
                        insts[i]->n_else_body, count, names);
            kl_buf_puts(names, " }");
        }
    }
}

/* Prints the record's trace in text form (kl_trace.h); a trace that does
 * not decode is described instead. */
static void s_print_trace(FILE *f, const ProtobufCBinaryData *trace)
{
    if (trace->len == 0) {
        fprintf(f, "trace      none\n");
        return;
    }
    kl_trace_t *t = NULL;
    char err[KL_ERRMSG_LEN];
    if (kl_trace_from_proto(trace->data, trace->len, &t, err) != KL_OK) {
        Kiln__Trace *raw = kiln__trace__unpack(NULL, trace->len, trace->data);
        if (!raw) {
            fprintf(f, "trace      %zu bytes that do not decode as a Trace\n",
                    trace->len);
            return;
        }
        size_t count = 0;
        kl_buf_t names = {0};
        s_trace_ops((const Kiln__Inst *const *)raw->insts, raw->n_insts, &count,
                    &names);
        fprintf(f, "trace      %zu instructions (%s): %s\n", count, err,
                names.data ? names.data : "");
        kl_buf_free(&names);
        kiln__trace__free_unpacked(raw, NULL);
        return;
    }
    char *text = kl_trace_to_text(t);
    size_t n = strlen(text);
    fprintf(f, "trace\n%s%s", text, n && text[n - 1] != '\n' ? "\n" : "");
    free(text);
    kl_trace_free(&t);
}

static void s_print_best(const Kiln__TuningRecord *r, const Kiln__Workload *w)
{
    char hex[33];
    kl_hex128(r->workload_key.data, hex);
    printf("workload   %s %s\n", hex, w ? w->name : "(not in the store)");
    printf("target     %s\n", r->target);
    printf("seq        %llu\n", (unsigned long long)r->seq);
    printf("latency    %.3f us median%s%s", r->median_s * 1e6,
           r->simulated ? " (simulated)" : "",
           r->unsandboxed ? " (measured unsandboxed)" : "");
    if (w && w->flop > 0 && r->median_s > 0)
        printf(", %.1f GFLOP/s", w->flop / r->median_s / 1e9);
    printf("\n");
    if (r->n_samples) {
        double lo = r->samples[0], hi = r->samples[0];
        for (size_t i = 1; i < r->n_samples; i++) {
            lo = r->samples[i] < lo ? r->samples[i] : lo;
            hi = r->samples[i] > hi ? r->samples[i] : hi;
        }
        printf("samples    %zu x %u runs, min %.3f us, max %.3f us\n",
               r->n_samples, r->number, lo * 1e6, hi * 1e6);
    }
    Kiln__Evaluator e;
    kl_record_evaluator(r, &e);
    printf("evaluator  %s: number %u, repeat %u, min_repeat_ms %u, flush %s, "
           "rtol %g, atol %g%s\n",
           kl_cond_name(kl_cond_of(&e)), e.number, e.repeat, e.min_repeat_ms,
           e.flush_cache ? "on" : "off", e.rtol, e.atol,
           r->evaluator ? "" : " (not recorded: the defaults of that time)");
    printf("agent      %s%s%s%s\n", *r->agent ? r->agent : "-",
           *r->device_name ? " (" : "", r->device_name,
           *r->device_name ? ")" : "");
    if (*r->job)
        printf("job        %s\n", r->job);
    s_print_trace(stdout, &r->trace);
}

/* Regenerates and prints the source of the record's trace. Returns 0, or
 * 1 when the workload is missing or the trace does not replay. */
static int s_print_source(const Kiln__TuningRecord *r, const Kiln__Workload *w)
{
    char err[KL_ERRMSG_LEN], *src = NULL;
    if (!w) {
        fprintf(stderr, "kiln db best: --source: the workload is not in the "
                        "store\n");
        return 1;
    }
    if (kl_trace_source(w->text, r->target, r->trace.data, r->trace.len, &src,
                        err) != KL_OK) {
        fprintf(stderr, "kiln db best: --source: %s\n", err);
        return 1;
    }
    printf("source\n%s", src);
    free(src);
    return 0;
}

typedef struct {
    const char *name;
    uint8_t key[16];
    size_t matches;
} byname_t;

static int s_by_name(const Kiln__Workload *w, void *arg)
{
    byname_t *b = arg;
    if (strcmp(w->name, b->name) == 0 && w->key.len == 16) {
        if (b->matches == 0)
            memcpy(b->key, w->key.data, 16);
        b->matches++;
    }
    return 0;
}

typedef struct {
    char **t;
    size_t n;
} targets_t;

static int s_targets(const Kiln__TuningRecord *r, void *arg)
{
    targets_t *ts = arg;
    for (size_t i = 0; i < ts->n; i++)
        if (strcmp(ts->t[i], r->target) == 0)
            return 0;
    ts->t = kl_xrealloc(ts->t, (ts->n + 1) * sizeof *ts->t);
    ts->t[ts->n++] = kl_xstrdup(r->target);
    return 0;
}

static int s_resolve_key(kl_store_t *st, const kl_opts_t *o, uint8_t key[16],
                         char *err)
{
    const char *hex = kl_opts_str(o, "key"), *name = kl_opts_str(o, "name");
    if (!hex == !name) {
        fprintf(stderr, "kiln db best: give exactly one of --key, --name\n");
        return 2;
    }
    if (hex) {
        if (kl_unhex128(hex, key)) {
            fprintf(stderr, "kiln db best: --key '%s' is not 32 hex digits\n",
                    hex);
            return 2;
        }
        return 0;
    }
    byname_t b = {.name = name};
    if (kl_store_foreach_workload(st, s_by_name, &b, err)) {
        fprintf(stderr, "kiln db best: %s\n", err);
        return 1;
    }
    if (b.matches != 1) {
        fprintf(stderr, "kiln db best: %s workload named '%s'%s\n",
                b.matches ? "more than one" : "no", name,
                b.matches ? "; use --key" : "");
        return 1;
    }
    memcpy(key, b.key, 16);
    return 0;
}

/* The CPU features the kernels of the stored workload w (NULL: unknown)
 * may use, which its "cpu" carries (kl_target_resolve_for): an integer or
 * bf16 one's. */
static unsigned s_cpu_feats(const Kiln__Workload *w)
{
    kl_workload_t *x = NULL;
    char e2[KL_ERRMSG_LEN];
    if (!w || !w->text || kl_workload_from_string(w->text, &x, e2))
        return 0;
    unsigned feats = kl_workload_cpu_feats(x);
    kl_workload_free(&x);
    return feats;
}

static int s_best(kl_store_t *st, const kl_opts_t *o, char *err)
{
    uint8_t key[16];
    kl_cond_t cond = KL_COND_WARM;
    if (kl_cond_parse(kl_opts_str(o, "condition"), &cond, err)) {
        fprintf(stderr, "kiln db best: --condition: %s\n", err);
        return 2;
    }
    int rc = s_resolve_key(st, o, key, err);
    if (rc)
        return rc;
    char hex[33];
    kl_hex128(key, hex);
    targets_t ts = {0};
    Kiln__Workload *w = NULL;
    if (kl_store_get_workload(st, key, &w, err) == KL_ERR_CORRUPT)
        fprintf(stderr, "kiln db best: %s\n", err);
    const char *target = kl_opts_str(o, "target");
    if (target) /* "cpu" is this machine's exact target, +features */
        target = kl_target_resolve_for(target, s_cpu_feats(w));
    if (target)
        s_targets(&(Kiln__TuningRecord){.target = (char *)target}, &ts);
    else if (kl_store_foreach_record(st, key, NULL, s_targets, &ts, err)) {
        fprintf(stderr, "kiln db best: %s\n", err);
        if (w)
            kiln__workload__free_unpacked(w, NULL);
        return 1;
    }
    size_t found = 0, nrec = 0, other = 0;
    rc = 0;
    if (!w && kl_store_count(st, key, NULL, &nrec, err) == KL_OK && !nrec) {
        fprintf(stderr, "kiln db best: no workload or record with key %s\n",
                hex);
        rc = 1;
    }
    for (size_t i = 0; i < ts.n && rc == 0; i++) {
        Kiln__TuningRecord *r = NULL;
        int brc = kl_store_best(st, key, ts.t[i], cond, &r, err);
        if (brc == KL_ERR_NOTFOUND) {
            Kiln__TuningRecord *o2 = NULL;
            if (kl_store_best(st, key, ts.t[i], !cond, &o2, err) == KL_OK)
                other++;
            if (o2)
                kiln__tuning_record__free_unpacked(o2, NULL);
            continue;
        }
        if (brc) {
            fprintf(stderr, "kiln db best: %s\n", err);
            rc = 1;
            break;
        }
        if (kl_opts_bool(o, "json")) {
            char *line = kl_store_json_line("record", &r->base);
            printf("%s\n", line);
            free(line);
        } else {
            if (found)
                printf("\n");
            s_print_best(r, w);
            if (kl_opts_bool(o, "source"))
                rc = s_print_source(r, w);
        }
        found++;
        kiln__tuning_record__free_unpacked(r, NULL);
    }
    if (rc == 0 && found == 0) {
        fprintf(
            stderr,
            "kiln db best: no valid %s record for workload %s%s%s%s%s\n",
            kl_cond_name(cond), hex, target ? " on " : "", target ? target : "",
            other ? "; there are valid records measured " : "",
            other
                ? (cond ? "warm (--condition warm)" : "cold (--condition cold)")
                : "");
        rc = 3;
    }
    for (size_t i = 0; i < ts.n; i++)
        free(ts.t[i]);
    free(ts.t);
    if (w)
        kiln__workload__free_unpacked(w, NULL);
    return rc;
}

/* ---- export / import --------------------------------------------------- */

static int s_export(kl_store_t *st, const kl_opts_t *o, char *err)
{
    const char *path = kl_opts_str(o, "out");
    FILE *f = path ? fopen(path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "kiln db export: %s: %s\n", path, strerror(errno));
        return 1;
    }
    int rc = kl_store_export_jsonl(st, f, err);
    if (path && fclose(f) != 0 && rc == KL_OK)
        rc = kl_seterr(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
    if (rc) {
        fprintf(stderr, "kiln db export: %s\n", err);
        return 1;
    }
    return 0;
}

static int s_import(kl_store_t *st, const char *path, char *err)
{
    bool std_in = strcmp(path, "-") == 0;
    FILE *f = std_in ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kiln db import: %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t n = 0;
    double t0 = kl_now_s();
    int rc = kl_store_import_jsonl(st, f, &n, err);
    if (!std_in)
        fclose(f);
    if (rc) {
        fprintf(stderr, "kiln db import: %s: %s (%zu written before it)\n",
                path, err, n);
        return 1;
    }
    fprintf(stderr,
            "kiln db import: %zu workloads and records from %s in "
            "%.2f s\n",
            n, path, kl_now_s() - t0);
    return 0;
}

static int s_upgrade(kl_store_t *st, const char *dir)
{
    unsigned was = kl_store_schema_found(st);
    if (was == KL_STORE_SCHEMA)
        printf("store %s: schema %d already\n", dir, KL_STORE_SCHEMA);
    else
        printf("store %s: upgraded from schema %u to %d (best and seen "
               "rebuilt from the records)\n",
               dir, was, KL_STORE_SCHEMA);
    return 0;
}

/* ---- dispatch ---------------------------------------------------------- */

static int s_run(const char *sub, const kl_opts_t *o)
{
    const char *dir = kl_opts_str(o, "db");
    bool imp = strcmp(sub, "import") == 0;
    bool write = imp || !strcmp(sub, "upgrade");
    if (!dir) {
        fprintf(stderr, "kiln db %s: --db DIR is required\n%s", sub, S_USAGE);
        return 2;
    }
    if (imp != (kl_opts_npos(o) == 1) || (!imp && kl_opts_npos(o) != 0)) {
        fprintf(stderr, "%s", S_USAGE);
        return 2;
    }
    char err[KL_ERRMSG_LEN];
    kl_store_t *st = NULL;
    if (!strcmp(sub, "upgrade")) {
        /* An upgrade never creates a store where there was none. */
        char *data = kl_xasprintf("%s/data.mdb", dir);
        struct stat sb;
        bool none = stat(data, &sb) != 0;
        free(data);
        if (none) {
            fprintf(stderr, "kiln db upgrade: %s: no store in this directory\n",
                    dir);
            return 1;
        }
    }
    if (kl_store_open(&st, dir, write ? 0 : KL_STORE_RDONLY, err)) {
        fprintf(stderr, "kiln db %s: %s\n", sub, err);
        return 1;
    }
    int rc = !strcmp(sub, "ls")        ? s_ls(st, err)
             : !strcmp(sub, "best")    ? s_best(st, o, err)
             : !strcmp(sub, "export")  ? s_export(st, o, err)
             : !strcmp(sub, "upgrade") ? s_upgrade(st, dir)
                                       : s_import(st, kl_opts_pos(o, 0), err);
    if (rc == 1 && !strcmp(sub, "ls"))
        fprintf(stderr, "kiln db ls: %s\n", err);
    kl_store_close(&st);
    return rc;
}

int kiln_cmd_db(int argc, char **argv)
{
    static const char *subs[] = {"ls", "best", "export", "import", "upgrade"};
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        kl_opts_print_help(argc < 1 ? stderr : stdout, S_USAGE, s_opts);
        return argc < 1 ? 2 : 0;
    }
    bool known = false;
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        known |= strcmp(argv[0], subs[i]) == 0;
    if (!known) {
        fprintf(stderr, "kiln db: unknown subcommand '%s'\n%s", argv[0],
                S_USAGE);
        return 2;
    }
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc - 1, argv + 1, &o, err)) {
        fprintf(stderr, "kiln db %s: %s\n", argv[0], err);
        return 2;
    }
    int rc = 0;
    if (kl_opts_help_asked(o))
        kl_opts_print_help(stdout, S_USAGE, s_opts);
    else
        rc = s_run(argv[0], o);
    kl_opts_free(&o);
    return rc;
}
