/* kl_report.c - see kl_report.h. The data half: tasks and their records;
 * the page and plots are in kl_report_html.c. */
#include "kl_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_export.h"
#include "kl_model.h"
#include "kl_report_int.h"
#include "kl_util.h"

const char *kl_report_target(const char *target)
{
    /* The same rule as kiln-agent's and kiln export's, from one place. */
    return target ? kl_target_resolve(target) : target;
}

static krep_task_t *s_add_task(kl_report_t *r)
{
    r->tasks = kl_xrealloc(r->tasks, (size_t)(r->n + 1) * sizeof *r->tasks);
    krep_task_t *t = &r->tasks[r->n++];
    memset(t, 0, sizeof *t);
    t->best_s = INFINITY;
    return t;
}

typedef struct {
    const kl_report_t *r;
    krep_task_t *t;
} s_rec_ctx_t;

static int s_on_record(const Kiln__TuningRecord *rec, void *arg)
{
    const s_rec_ctx_t *c = arg;
    krep_task_t *t = c->t;
    /* Only measurements of the report's condition are trials here; the
     * others are counted apart, so that the page can say so. */
    kl_record_kind_t kind = kl_record_kind(rec);
    t->nsim += kind == KL_RECORD_SIMULATED;
    t->nunverified += kind == KL_RECORD_UNVERIFIED;
    if (kind != KL_RECORD_MEASURED)
        return 0;
    if (kl_record_cond(rec) != c->r->cond) {
        t->nother++;
        return 0;
    }
    if (t->nrec == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->time_us = kl_xrealloc(t->time_us, t->cap * sizeof *t->time_us);
        t->lat_s = kl_xrealloc(t->lat_s, t->cap * sizeof *t->lat_s);
    }
    bool ok = kl_record_valid(rec) && rec->median_s > 0;
    t->time_us[t->nrec] = rec->time_us;
    t->lat_s[t->nrec] = ok ? rec->median_s : NAN;
    t->nrec++;
    if (ok) {
        t->nok++;
        if (rec->median_s < t->best_s)
            t->best_s = rec->median_s;
    }
    return 0;
}

static int s_load_records(kl_report_t *r, kl_store_t *store, char *err)
{
    for (int i = 0; i < r->n; i++) {
        s_rec_ctx_t c = {r, &r->tasks[i]};
        int rc = kl_store_foreach_record(
            store, r->tasks[i].key, r->tasks[i].target, s_on_record, &c, err);
        if (rc)
            return rc;
    }
    return KL_OK;
}

/* An integer or bf16 workload's "cpu" is this CPU's refined target
 * (kl_target_resolve_for), as kiln tune keys its records. */
static char *s_task_target(const char *user, const char *text)
{
    kl_workload_t *w = NULL;
    char e2[KL_ERRMSG_LEN];
    unsigned feats = text && !kl_workload_from_string(text, &w, e2)
                         ? kl_workload_cpu_feats(w)
                         : 0;
    kl_workload_free(&w);
    return kl_xstrdup(kl_target_resolve_for(user, feats));
}

static int s_from_model(kl_report_t *r, const kl_report_cfg_t *cfg,
                        const char *user, char *err)
{
    kl_model_t *m = NULL;
    kl_model_opts_t dims = {.batch = cfg->batch, .seq = cfg->seq};
    int rc = kl_model_load_opts(cfg->model, &dims, &m, err);
    if (rc)
        return rc;
    r->title = kl_xstrdup(kl_model_name(m));
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_model_task_t *mt = kl_model_task(m, i);
        krep_task_t *t = s_add_task(r);
        t->name = kl_xstrdup(mt->w->name);
        t->target = kl_xstrdup(
            kl_target_resolve_for(user, kl_workload_cpu_feats(mt->w)));
        memcpy(t->key, mt->w->key, 16);
        t->flop = mt->w->flop;
        t->weight = mt->weight;
    }
    kl_model_destroy(&m);
    return KL_OK;
}

typedef struct {
    kl_report_t *r;
    kl_store_t *store;
    const char *user; /* the target the user gave */
    int rc;
    char *err;
} s_wl_ctx_t;

static int s_on_workload(const Kiln__Workload *w, void *arg)
{
    s_wl_ctx_t *c = arg;
    size_t n = 0;
    if (w->key.len != 16)
        return 0;
    char *target = s_task_target(c->user, w->text);
    c->rc = kl_store_count(c->store, w->key.data, target, &n, c->err);
    if (c->rc || n == 0) {
        free(target);
        return c->rc ? 1 : 0;
    }
    krep_task_t *t = s_add_task(c->r);
    t->target = target;
    t->name = kl_xstrdup(w->name && *w->name ? w->name : "(unnamed)");
    memcpy(t->key, w->key.data, 16);
    t->flop = w->flop;
    t->weight = 1;
    return 0;
}

static int s_collect_target(const Kiln__TuningRecord *rec, void *arg)
{
    kl_buf_t *b = arg;
    const char *t = rec->target ? rec->target : "";
    /* Records come in (key, target) order: list each target once. */
    char probe[160];
    snprintf(probe, sizeof probe, " %s,", t);
    kl_buf_t tmp = {0};
    kl_buf_printf(&tmp, " %s", b->data ? b->data : "");
    bool seen = strstr(tmp.data, probe) != NULL;
    kl_buf_free(&tmp);
    if (!seen)
        kl_buf_printf(b, "%s, ", t);
    return 0;
}

static int s_no_task(kl_report_t *r, kl_store_t *store, char *err)
{
    kl_buf_t b = {0};
    char e2[KL_ERRMSG_LEN];
    kl_store_foreach_record(store, NULL, NULL, s_collect_target, &b, e2);
    if (b.len >= 2)
        b.data[b.len - 2] = 0;
    int rc = kl_seterr(err, KL_ERR_NOTFOUND,
                       "no record on target %s in the store (%s%s)", r->target,
                       b.len ? "its targets: " : "it has no record",
                       b.len ? b.data : "");
    kl_buf_free(&b);
    return rc;
}

int kl_report_load(kl_report_t **out, kl_store_t *store,
                   const kl_report_cfg_t *cfg, char *err)
{
    *out = NULL;
    kl_report_t *r = kl_xcalloc(1, sizeof *r);
    const char *user = cfg->target ? cfg->target : "cpu";
    r->target = kl_xstrdup(kl_report_target(user));
    r->source = kl_xstrdup(cfg->source ? cfg->source : "");
    r->cond = cfg->cond;
    r->weighted = cfg->model != NULL;
    int rc = KL_OK;
    if (cfg->model) {
        rc = s_from_model(r, cfg, user, err);
    } else {
        s_wl_ctx_t c = {r, store, user, 0, err};
        rc = kl_store_foreach_workload(store, s_on_workload, &c, err);
        if (c.rc)
            rc = c.rc;
        r->title = kl_xstrdup("every workload");
        if (!rc && r->n == 0)
            rc = s_no_task(r, store, err);
    }
    if (!rc)
        rc = s_load_records(r, store, err);
    if (rc) {
        kl_report_destroy(&r);
        return rc;
    }
    *out = r;
    return KL_OK;
}

void kl_report_destroy(kl_report_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_report_t *r = *self_p;
    for (int i = 0; i < r->n; i++) {
        free(r->tasks[i].name);
        free(r->tasks[i].target);
        free(r->tasks[i].time_us);
        free(r->tasks[i].lat_s);
    }
    free(r->tasks);
    free(r->target);
    free(r->source);
    free(r->title);
    free(r);
    *self_p = NULL;
}

int kl_report_ntasks(const kl_report_t *r)
{
    return r->n;
}

size_t kl_report_nrecords(const kl_report_t *r, int i)
{
    return i >= 0 && i < r->n ? r->tasks[i].nrec : 0;
}

const char *kl_report_exact_target(const kl_report_t *r)
{
    return r->target;
}

void kl_report_left_out(const kl_report_t *r, size_t *sim, size_t *unverified,
                        size_t *other_cond)
{
    *sim = *unverified = *other_cond = 0;
    for (int i = 0; i < r->n; i++) {
        *sim += r->tasks[i].nsim;
        *unverified += r->tasks[i].nunverified;
        *other_cond += r->tasks[i].nother;
    }
}

int kl_report_write_svgs(const kl_report_t *r, const char *dir, char *err)
{
    int rc = kl_mkdirs(dir, err);
    for (int i = -1; !rc && i < r->n; i++) {
        char *svg =
            i < 0 ? kl_report_weighted_svg(r) : kl_report_task_svg(r, i);
        char *path = i < 0 ? kl_xasprintf("%s/weighted.svg", dir)
                           : kl_xasprintf("%s/task-%d.svg", dir, i);
        rc = kl_write_file(path, svg, strlen(svg), err);
        free(path);
        free(svg);
    }
    return rc;
}
