/* kl_export.c - best records, replay to source, and the model export
 * driver (manifest.json). The layer graph's code is export_graph.c. */
#include "kl_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_util.h"

const char *kl_export_target(const char *user_target)
{
    return kl_target_resolve(user_target);
}

/* What the store holds for a key when its best on target is missing. */
typedef struct {
    const char *target;
    kl_cond_t cond;
    size_t here, here_ok, other_cond, sim, unverified, other;
    char others[160];
} s_census_t;

static int s_census(const Kiln__TuningRecord *rec, void *arg)
{
    s_census_t *c = arg;
    if (!strcmp(rec->target, c->target)) {
        kl_record_kind_t k = kl_record_kind(rec);
        bool valid = kl_record_valid(rec);
        c->here++;
        c->sim += k == KL_RECORD_SIMULATED;
        c->unverified += k == KL_RECORD_UNVERIFIED;
        c->here_ok += valid && kl_record_cond(rec) == c->cond;
        c->other_cond += valid && kl_record_cond(rec) != c->cond;
        return 0;
    }
    c->other++;
    if (!strstr(c->others, rec->target) &&
        strlen(c->others) + strlen(rec->target) + 3 < sizeof c->others) {
        if (c->others[0])
            strcat(c->others, ", ");
        strcat(c->others, rec->target);
    }
    return 0;
}

static int s_missing(kl_store_t *store, const kl_workload_t *w,
                     const char *target, kl_cond_t cond, char *err)
{
    s_census_t c = {.target = target, .cond = cond};
    char e2[KL_ERRMSG_LEN], key[33];
    kl_hex128(w->key, key);
    kl_store_foreach_record(store, w->key, NULL, s_census, &c, e2);
    char what[320];
    if (c.here) {
        int n = snprintf(what, sizeof what, "%zu record(s) there, %zu valid %s",
                         c.here, c.here_ok, kl_cond_name(cond));
        if (c.other_cond)
            n +=
                snprintf(what + n, sizeof what - (size_t)n,
                         ", %zu valid %s (never compared with %s)",
                         c.other_cond, kl_cond_name(!cond), kl_cond_name(cond));
        if (c.sim)
            n += snprintf(what + n, sizeof what - (size_t)n,
                          ", %zu simulated (never a result)", c.sim);
        if (c.unverified)
            snprintf(what + n, sizeof what - (size_t)n,
                     ", %zu unverified (skip_verify: never a result)",
                     c.unverified);
    } else if (c.other) {
        snprintf(what, sizeof what,
                 "%zu record(s) on other targets (%s), never used for %s",
                 c.other, c.others, target);
    } else {
        snprintf(what, sizeof what, "no record at all");
    }
    return kl_seterr(err, KL_ERR_NOTFOUND,
                     "no valid record of %s (key %s) on target %s, measured "
                     "%s: %s",
                     w->name, key, target, kl_cond_name(cond), what);
}

int kl_export_best(kl_store_t *store, const kl_workload_t *w,
                   const char *target, kl_cond_t cond, Kiln__TuningRecord **out,
                   char *err)
{
    *out = NULL;
    /* An integer or bf16 workload's "cpu" carries this CPU's features
     * ("cpu/x86_64-avx512+vnni"), as kiln tune keys its records. */
    const char *t = kl_target_resolve_for(target, kl_workload_cpu_feats(w));
    if (kl_target_is_sim(t))
        return kl_seterr(err, KL_ERR_INVAL,
                         "target %s is a simulated device: its latencies are "
                         "synthetic, there is nothing to export",
                         t);
    char e2[KL_ERRMSG_LEN];
    Kiln__TuningRecord *rec = NULL;
    int rc = kl_store_best(store, w->key, t, cond, &rec, e2);
    if (rc == KL_ERR_NOTFOUND)
        return s_missing(store, w, t, cond, err);
    if (rc)
        return kl_seterr(err, rc, "%s on %s: %s", w->name, t, e2);
    /* The store's own checks, made again here: the record must be of this
     * exact target and key, a valid measurement of the condition. */
    if (strcmp(rec->target, t) != 0 || rec->workload_key.len != 16 ||
        memcmp(rec->workload_key.data, w->key, 16) != 0) {
        kiln__tuning_record__free_unpacked(rec, NULL);
        return kl_seterr(err, KL_ERR_CORRUPT,
                         "the store's best of %s on %s names another "
                         "workload or target",
                         w->name, t);
    }
    if (!kl_record_valid(rec) || kl_record_cond(rec) != cond) {
        kiln__tuning_record__free_unpacked(rec, NULL);
        return s_missing(store, w, t, cond, err);
    }
    *out = rec;
    return KL_OK;
}

int kl_export_replay(const kl_workload_t *w, const Kiln__TuningRecord *rec,
                     const char *entry, kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (rec->workload_key.len != 16 ||
        memcmp(rec->workload_key.data, w->key, 16) != 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "record %llu on %s is not of workload %s",
                         (unsigned long long)rec->seq, rec->target, w->name);
    char e2[KL_ERRMSG_LEN];
    const char *step = NULL;
    int rc = kl_codegen_replay_proto(w, rec->target, rec->trace.data,
                                     rec->trace.len, entry, out, &step, e2);
    if (rc)
        return kl_seterr(err, rc, "%s record %llu on %s: %s: %s", w->name,
                         (unsigned long long)rec->seq, rec->target, step, e2);
    return KL_OK;
}

void kl_export_result_free(kl_export_result_t *r)
{
    for (int i = 0; i < r->nmissing; i++)
        free(r->missing[i]);
    free(r->missing);
    free(r->lib_path);
    free(r->model);
    memset(r, 0, sizeof *r);
}

/* ---- model export ---- */

typedef struct {
    Kiln__TuningRecord **recs; /* [ntasks], NULL where missing */
    kl_kernel_t *kernels;      /* [ntasks] */
    int nprepare;              /* kernels with a prepare step */
} s_tasks_t;

static json_object *s_task_json(const kl_model_task_t *t, int i,
                                const Kiln__TuningRecord *rec,
                                const kl_kernel_t *k, const char *file)
{
    char key[33];
    kl_hex128(t->w->key, key);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_int(i));
    json_object_object_add(o, "name", json_object_new_string(t->w->name));
    json_object_object_add(o, "workload", json_object_new_string(t->spec));
    json_object_object_add(o, "key", json_object_new_string(key));
    json_object_object_add(o, "weight", json_object_new_int(t->weight));
    json_object_object_add(o, "file", json_object_new_string(file));
    json_object_object_add(o, "entry", json_object_new_string(k->entry));
    /* Whether the kernel defines ENTRY_prepare (kl_abi.h). */
    json_object_object_add(o, "prepare", json_object_new_boolean(k->prepare));
    if (rec) {
        json_object *r = json_object_new_object();
        json_object_object_add(r, "target",
                               json_object_new_string(rec->target));
        json_object_object_add(r, "seq",
                               json_object_new_int64((int64_t)rec->seq));
        json_object_object_add(
            r, "agent", json_object_new_string(rec->agent ? rec->agent : ""));
        json_object_object_add(
            r, "job", json_object_new_string(rec->job ? rec->job : ""));
        json_object_object_add(
            r, "condition",
            json_object_new_string(kl_cond_name(kl_record_cond(rec))));
        json_object_object_add(o, "record", r);
        json_object_object_add(o, "latency_s",
                               json_object_new_double(rec->median_s));
        json_object_object_add(o, "source", json_object_new_string("tuned"));
    } else {
        json_object_object_add(o, "record", NULL);
        json_object_object_add(o, "latency_s", NULL);
        json_object_object_add(o, "source", json_object_new_string("naive"));
    }
    json_object *g = json_object_new_array(), *b = json_object_new_array();
    for (int d = 0; d < 3; d++) {
        json_object_array_add(g, json_object_new_int64(k->grid[d]));
        json_object_array_add(b, json_object_new_int64(k->block[d]));
    }
    json_object *l = json_object_new_object();
    json_object_object_add(l, "grid", g);
    json_object_object_add(l, "block", b);
    json_object_object_add(l, "shared_bytes",
                           json_object_new_int64(k->shared_bytes));
    json_object_object_add(o, "launch", l);
    return o;
}

/* What a model export writes on each kind of target. */
typedef struct {
    /* The kernel of a task without a valid record (kl_export_cfg_t's
     * fallback_naive); NULL: every task needs a record. */
    int (*naive)(const kl_workload_t *w, const char *entry, kl_kernel_t *out,
                 char *err);
    /* Writes the kernels, and what links them, into cfg->out_dir. */
    int (*write)(const kl_export_cfg_t *cfg, const char *text,
                 const kl_model_params_t *ps, const kl_model_t *m,
                 const s_tasks_t *ts, kl_target_kind kind,
                 kl_export_result_t *res, char *err);
    const char *library; /* the manifest's "library"; NULL: none */
} s_kind_t;

static int s_manifest(const kl_model_t *m, const kl_export_cfg_t *cfg,
                      const char *target, const s_tasks_t *ts,
                      kl_target_kind kind, const s_kind_t *how, char *err)
{
    const char *dir = cfg->out_dir;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "model",
                           json_object_new_string(kl_model_name(m)));
    json_object_object_add(o, "target", json_object_new_string(target));
    if (kl_model_prec(m) != KL_DT_F32) /* absent: f32 */
        json_object_object_add(
            o, "precision",
            json_object_new_string(kl_dtype_name(kl_model_prec(m))));
    if (cfg->batch) /* absent: the model's own input dimensions */
        json_object_object_add(o, "batch", json_object_new_int64(cfg->batch));
    if (cfg->seq)
        json_object_object_add(o, "seq", json_object_new_int64(cfg->seq));
    json_object *a = json_object_new_array();
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        char file[32];
        snprintf(file, sizeof file, "task_%02d.%s", i,
                 kl_codegen_source_ext(kind));
        json_object_array_add(a,
                              s_task_json(kl_model_task(m, i), i, ts->recs[i],
                                          &ts->kernels[i], file));
    }
    json_object_object_add(o, "tasks", a);
    json_object_object_add(o, "library",
                           how->library ? json_object_new_string(how->library)
                                        : NULL);
    const char *s = json_object_to_json_string_ext(
        o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *path = kl_xasprintf("%s/manifest.json", dir);
    char *text = kl_xasprintf("%s\n", s);
    int rc = kl_write_file(path, text, strlen(text), err);
    free(text);
    free(path);
    json_object_put(o);
    return rc;
}

/* Looks up every task's record; lists the missing ones in res. */
static int s_lookup(kl_store_t *store, const kl_model_t *m,
                    const kl_export_cfg_t *cfg, s_tasks_t *ts,
                    kl_export_result_t *res, char *err)
{
    const char *target = cfg->target;
    kl_buf_t names = {0};
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        kl_cond_t cond =
            kl_model_task_cold(t, cfg->cond) ? KL_COND_COLD : KL_COND_WARM;
        res->ncold += cond == KL_COND_COLD;
        char e2[KL_ERRMSG_LEN];
        int rc = kl_export_best(store, t->w, target, cond, &ts->recs[i], e2);
        if (rc == KL_ERR_NOTFOUND) {
            res->missing = kl_xrealloc(
                res->missing, (size_t)(res->nmissing + 1) * sizeof(char *));
            res->missing[res->nmissing++] =
                kl_xasprintf("task %d %s (%s): %s", i, t->w->name, t->spec, e2);
            kl_buf_printf(&names, "%s%d %s", names.len ? ", " : "", i,
                          t->w->name);
        } else if (rc) {
            kl_buf_free(&names);
            return kl_seterr(err, rc, "task %d: %s", i, e2);
        } else {
            res->tuned_s += t->weight * ts->recs[i]->median_s;
        }
    }
    int rc = KL_OK;
    if (res->nmissing)
        rc = kl_seterr(err, KL_ERR_NOTFOUND,
                       "%d of %d tasks have no valid record on %s: %s",
                       res->nmissing, kl_model_ntasks(m), target, names.data);
    kl_buf_free(&names);
    return rc;
}

static int s_kernels(const kl_model_t *m, const s_kind_t *how, s_tasks_t *ts,
                     char *err)
{
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        char entry[32];
        snprintf(entry, sizeof entry, "kiln_task_%02d", i);
        int rc = ts->recs[i] ? kl_export_replay(t->w, ts->recs[i], entry,
                                                &ts->kernels[i], err)
                             : how->naive(t->w, entry, &ts->kernels[i], err);
        if (rc)
            return rc;
        ts->nprepare += ts->kernels[i].prepare;
    }
    return KL_OK;
}

/* Each kernel in its own source file, task_NN.EXT (GPU kinds: the caller
 * compiles and launches them as the manifest says). */
static int s_write_sources(const kl_export_cfg_t *cfg, const char *text,
                           const kl_model_params_t *ps, const kl_model_t *m,
                           const s_tasks_t *ts, kl_target_kind kind,
                           kl_export_result_t *res, char *err)
{
    (void)text;
    (void)ps;
    (void)res;
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        char *p = kl_xasprintf("%s/task_%02d.%s", cfg->out_dir, i,
                               kl_codegen_source_ext(kind));
        int rc = kl_write_file(p, ts->kernels[i].source,
                               strlen(ts->kernels[i].source), err);
        free(p);
        if (rc)
            return rc;
    }
    return KL_OK;
}

/* Whether target carries the "+amx" feature. */
static bool s_has_amx(const char *target)
{
    kl_target_t t;
    char e2[KL_ERRMSG_LEN];
    return target && !kl_target_parse(target, &t, e2) &&
           (t.features & KL_CPU_FEAT_AMX);
}

/* The layer graph's code and, with cfg->build, libkiln_model.so. */
static int s_write_graph(const kl_export_cfg_t *cfg, const char *text,
                         const kl_model_params_t *ps, const kl_model_t *m,
                         const s_tasks_t *ts, kl_target_kind kind,
                         kl_export_result_t *res, char *err)
{
    (void)kind;
    res->trained = ps->n > 0;
    res->nmodel_params = ps->n;
    /* A kernel tuned for an AMX target uses the tiles, whose state the
     * library must ask Linux for (kl_amx.h). */
    bool amx = false;
    for (int i = 0; i < kl_model_ntasks(m); i++)
        amx = amx || (ts->recs[i] && s_has_amx(ts->recs[i]->target));
    int rc = kl_export_write_graph(text, cfg->model, m, ts->kernels, amx, ps,
                                   cfg->out_dir, cfg->build, cfg->cc, err);
    if (!rc && cfg->build)
        res->lib_path = kl_xasprintf("%s/libkiln_model.so", cfg->out_dir);
    return rc;
}

static const s_kind_t s_kinds[] = {
    [KL_TARGET_CPU] = {kl_codegen_reference, s_write_graph, "libkiln_model.so"},
    [KL_TARGET_CUDA] = {NULL, s_write_sources, NULL},
};
_Static_assert(sizeof s_kinds / sizeof s_kinds[0] == KL_TARGET__KINDS,
               "a model export per kind of target");

static int s_export(kl_store_t *store, const kl_export_cfg_t *cfg,
                    const kl_model_t *m, const char *text,
                    const kl_model_params_t *ps, s_tasks_t *ts,
                    kl_export_result_t *res, char *err)
{
    const char *target = kl_export_target(cfg->target);
    kl_target_kind kind;
    if (kl_target_kind_of(target, &kind))
        return kl_seterr(err, KL_ERR_INVAL, "target '%s': unknown kind",
                         target);
    const s_kind_t *how = &s_kinds[kind];
    /* Each task resolves the user's target itself (kl_export_best). */
    int rc = s_lookup(store, m, cfg, ts, res, err);
    if (rc == KL_ERR_INVAL)
        return rc; /* a simulated target: no fallback either */
    if (rc == KL_ERR_NOTFOUND && cfg->fallback_naive && how->naive)
        rc = KL_OK;
    if (!rc)
        rc = s_kernels(m, how, ts, err);
    if (!rc)
        rc = kl_mkdirs(cfg->out_dir, err);
    if (!rc)
        rc = how->write(cfg, text, ps, m, ts, kind, res, err);
    if (!rc)
        rc = s_manifest(m, cfg, target, ts, kind, how, err);
    res->nprepare = ts->nprepare;
    return rc;
}

/* Quantized models (an ONNX QDQ import's q-ops) export to CPU targets
 * only (their kernels are the int8 CPU design space's or the exact
 * reference C): on any other target the first integer task is named
 * before any record is looked up. */
static int s_float_only(const kl_model_t *m, const kl_export_cfg_t *cfg,
                        char *err)
{
    kl_target_kind kind;
    if (kl_target_kind_of(kl_export_target(cfg->target), &kind) ||
        kind == KL_TARGET_CPU)
        return KL_OK;
    if (kl_model_prec(m) != KL_DT_F32) /* a GPU kernel takes 16-bit inputs */
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: precision %s exports to CPU targets only (their "
                         "bf16 kernels take the f32 tensors of the graph)",
                         cfg->model, kl_dtype_name(kl_model_prec(m)));
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        if (kl_workload_is_int(t->w))
            return kl_seterr(err, KL_ERR_INVAL,
                             "%s: layer '%s' (%s) is quantized; kiln export "
                             "writes quantized models for CPU targets only",
                             cfg->model, t->layer, t->spec);
    }
    return KL_OK;
}

int kl_export_model(kl_store_t *store, const kl_export_cfg_t *cfg,
                    kl_export_result_t *res, char *err)
{
    memset(res, 0, sizeof *res);
    char *text = NULL;
    kl_model_t *m = NULL;
    kl_model_params_t ps = {0};
    kl_model_opts_t dims = {.batch = cfg->batch, .seq = cfg->seq};
    int rc = kl_model_text_params_opts(cfg->model, &dims, &text, &ps, err);
    if (!rc)
        rc = kl_model_parse_prec(text, cfg->model, cfg->precision, &m, err);
    if (!rc)
        rc = s_float_only(m, cfg, err);
    if (rc) {
        kl_model_destroy(&m);
        res->bad_model = true;
        kl_model_params_free(&ps);
        free(text);
        return rc;
    }
    int n = kl_model_ntasks(m);
    res->ntasks = n;
    res->model = kl_xstrdup(kl_model_name(m));
    s_tasks_t ts = {.recs = kl_xcalloc((size_t)n, sizeof(Kiln__TuningRecord *)),
                    .kernels = kl_xcalloc((size_t)n, sizeof(kl_kernel_t))};
    rc = s_export(store, cfg, m, text, &ps, &ts, res, err);
    kl_model_params_free(&ps);
    for (int i = 0; i < n; i++) {
        if (ts.recs[i])
            kiln__tuning_record__free_unpacked(ts.recs[i], NULL);
        kl_kernel_free(&ts.kernels[i]);
    }
    free(ts.recs);
    free(ts.kernels);
    kl_model_destroy(&m);
    free(text);
    return rc;
}

int kl_export_naive(const char *model, const char *dir, const char *cc,
                    char *err)
{
    return kl_export_naive_opts(model, NULL, dir, cc, err);
}

int kl_export_naive_opts(const char *model, const kl_model_opts_t *dims,
                         const char *dir, const char *cc, char *err)
{
    char *text = NULL;
    kl_model_t *m = NULL;
    kl_model_params_t ps = {0};
    int rc = kl_model_text_params_opts(model, dims, &text, &ps, err);
    if (!rc)
        rc = kl_model_parse(text, model, &m, err);
    if (!rc)
        rc = kl_mkdirs(dir, err);
    int n = m ? kl_model_ntasks(m) : 0;
    kl_kernel_t *ks = kl_xcalloc((size_t)n + 1, sizeof(kl_kernel_t));
    for (int i = 0; !rc && i < n; i++) {
        char entry[32];
        snprintf(entry, sizeof entry, "kiln_task_%02d", i);
        rc = kl_codegen_reference(kl_model_task(m, i)->w, entry, &ks[i], err);
    }
    if (!rc)
        rc = kl_export_write_graph(text, model, m, ks, false, &ps, dir, true,
                                   cc, err);
    kl_model_params_free(&ps);
    for (int i = 0; i < n; i++)
        kl_kernel_free(&ks[i]);
    free(ks);
    kl_model_destroy(&m);
    free(text);
    return rc;
}
