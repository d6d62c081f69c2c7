/* kl_sched.c - the schedule state and its primitives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_sched.h"
#include "kl_util.h"
#include "kl_intrin.h"
#include "kl_wino.h"
#include "kl_sched_priv.h"

static const char *s_kind_names[KL_LOOP__COUNT] = {
    "serial",      "parallel",    "vectorize",  "unroll",
    "blockIdx.x",  "blockIdx.y",  "blockIdx.z", "threadIdx.x",
    "threadIdx.y", "threadIdx.z", "vthread",
};

const char *kl_loop_kind_name(kl_loop_kind k)
{
    return (k >= 0 && k < KL_LOOP__COUNT) ? s_kind_names[k] : "?";
}

int kl_loop_kind_parse(const char *name, kl_loop_kind *out)
{
    for (int i = 0; i < KL_LOOP__COUNT; i++)
        if (strcmp(name, s_kind_names[i]) == 0) {
            *out = (kl_loop_kind)i;
            return KL_OK;
        }
    return KL_ERR_INVAL;
}

static const char *s_scope_names[] = {"global", "shared", "local", "packed"};

const char *kl_scope_name(kl_scope s)
{
    return (s >= 0 && s <= KL_SCOPE_PACKED) ? s_scope_names[s] : "?";
}

int kl_scope_parse(const char *name, kl_scope *out)
{
    for (int i = 0; i <= KL_SCOPE_PACKED; i++)
        if (strcmp(name, s_scope_names[i]) == 0) {
            *out = (kl_scope)i;
            return KL_OK;
        }
    return KL_ERR_INVAL;
}

/* The naive nest of s->w: spatial iterators first, then reductions, each
 * in workload order. */
static void s_naive(kl_sched_t *s)
{
    const kl_workload_t *w = s->w;
    s->nloops = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < w->niters; i++) {
            if (w->iters[i].reduce != (pass == 1))
                continue;
            kl_loop_t *l = &s->loops[s->nloops++];
            l->id = s->next_id++;
            l->extent = w->iters[i].extent;
            l->reduce = w->iters[i].reduce;
            l->nparts = 1;
            l->parts[0] = (kl_loop_part_t){i, 1, w->iters[i].extent};
        }
}

int kl_sched_create(kl_sched_t **out, const kl_workload_t *w, char *err)
{
    if (!w || w->niters <= 0 || w->niters > KL_IR_MAX_ITERS)
        return kl_seterr(err, KL_ERR_INVAL, "workload has no iterators");
    kl_sched_t *s = kl_xcalloc(1, sizeof *s);
    s->w = s->origin = w;
    s_naive(s);
    *out = s;
    return KL_OK;
}

void kl_sched_destroy(kl_sched_t **self_p)
{
    if (self_p && *self_p) {
        kl_workload_free(&(*self_p)->own);
        free(*self_p);
        *self_p = NULL;
    }
}

kl_sched_t *kl_sched_clone(const kl_sched_t *s)
{
    kl_sched_t *c = kl_xmalloc(sizeof *c);
    memcpy(c, s, sizeof *c);
    if (s->own)
        c->w = c->own = kl_workload_clone(s->own);
    return c;
}

int kl_sched_winograd(kl_sched_t *s, int m, char *err)
{
    if (s->own)
        return kl_seterr(err, KL_ERR_INVAL,
                         "winograd: the schedule is already rewritten");
    bool naive = s->nstages == 0 && s->nguards == 0 &&
                 s->nloops == s->w->niters && s->next_id == s->w->niters;
    for (int i = 0; naive && i < s->nloops; i++)
        naive = s->loops[i].id == i && s->loops[i].kind == KL_LOOP_SERIAL &&
                s->loops[i].nannots == 0;
    if (!naive)
        return kl_seterr(err, KL_ERR_INVAL,
                         "winograd: must come before any other primitive");
    kl_workload_t *d = NULL;
    char e[KL_ERRMSG_LEN];
    if (kl_workload_winograd(s->w, m, &d, NULL, e))
        return kl_seterr(err, KL_ERR_INVAL, "%s", e);
    s->own = d;
    s->w = d;
    s->wino_m = m;
    s_naive(s);
    return KL_OK;
}

const kl_workload_t *kl_sched_origin(const kl_sched_t *s)
{
    return s->origin;
}

int kl_sched_winograd_m(const kl_sched_t *s)
{
    return s->wino_m;
}

const kl_workload_t *kl_sched_workload(const kl_sched_t *s)
{
    return s->w;
}

int kl_sched_nloops(const kl_sched_t *s)
{
    return s->nloops;
}

const kl_loop_t *kl_sched_loop(const kl_sched_t *s, int pos)
{
    return (pos >= 0 && pos < s->nloops) ? &s->loops[pos] : NULL;
}

int kl_sched_loop_pos(const kl_sched_t *s, int loop_id)
{
    for (int i = 0; i < s->nloops; i++)
        if (s->loops[i].id == loop_id)
            return i;
    return -1;
}

const kl_loop_t *kl_sched_loop_by_id(const kl_sched_t *s, int loop_id)
{
    return kl_sched_loop(s, kl_sched_loop_pos(s, loop_id));
}

int kl_sched_nguards(const kl_sched_t *s)
{
    return s->nguards;
}

const kl_guard_t *kl_sched_guard(const kl_sched_t *s, int i)
{
    return (i >= 0 && i < s->nguards) ? &s->guards[i] : NULL;
}

int kl_sched_nstages(const kl_sched_t *s)
{
    return s->nstages;
}

const kl_stage_t *kl_sched_stage(const kl_sched_t *s, int i)
{
    return (i >= 0 && i < s->nstages) ? &s->stages[i] : NULL;
}

const kl_stage_t *kl_sched_stage_by_id(const kl_sched_t *s, int stage_id)
{
    for (int i = 0; i < s->nstages; i++)
        if (s->stages[i].id == stage_id)
            return &s->stages[i];
    return NULL;
}

int kl_sched_stage_attach_pos(const kl_sched_t *s, const kl_stage_t *st)
{
    if (st->attach == KL_ATTACH_ROOT)
        return -1;
    return kl_sched_loop_pos(s, st->attach);
}

static bool s_access_uses(const kl_access_t *a, int ndim, int iter)
{
    for (int d = 0; d < ndim; d++)
        if (a->idx[d].coef[iter] != 0)
            return true;
    return false;
}

/* Whether tensor's accesses (in the body, the output access, or epilogue
 * reads) use iterator iter. */
static bool s_tensor_uses_iter(const kl_workload_t *w, const kl_expr_t *e,
                               int tensor, int iter)
{
    if (!e)
        return false;
    if (e->kind == KL_EX_LOAD)
        return e->access.tensor == tensor &&
               s_access_uses(&e->access, w->tensors[tensor].ndim, iter);
    return s_tensor_uses_iter(w, e->a, tensor, iter) ||
           s_tensor_uses_iter(w, e->b, tensor, iter);
}

bool kl_sched_loop_touches(const kl_sched_t *s, int pos, int tensor)
{
    const kl_workload_t *w = s->w;
    const kl_loop_t *l = kl_sched_loop(s, pos);
    if (!l || tensor < 0 || tensor >= w->ntensors)
        return false;
    for (int p = 0; p < l->nparts; p++) {
        int it = l->parts[p].iter;
        if (w->tensors[tensor].is_output) {
            if (s_access_uses(&w->out, w->tensors[tensor].ndim, it))
                return true;
        } else if (s_tensor_uses_iter(w, w->body, tensor, it)) {
            return true;
        }
    }
    return false;
}

static int s_pos_or_err(const kl_sched_t *s, int loop, const char *prim,
                        char *err)
{
    int pos = kl_sched_loop_pos(s, loop);
    if (pos < 0)
        kl_seterr(err, KL_ERR_INVAL, "%s: loop %d is not in the nest", prim,
                  loop);
    return pos;
}

static bool s_is_attach(const kl_sched_t *s, int loop_id)
{
    for (int i = 0; i < s->nstages; i++)
        if (s->stages[i].attach == loop_id)
            return true;
    return false;
}

int kl_sched_split(kl_sched_t *s, int loop, const int64_t *factors, int n,
                   int *out_ids, char *err)
{
    int pos = s_pos_or_err(s, loop, "split", err);
    if (pos < 0)
        return KL_ERR_INVAL;
    kl_loop_t old = s->loops[pos];
    if (old.nparts != 1)
        return kl_seterr(err, KL_ERR_INVAL,
                         "split: loop %d is fused (%d parts); split it "
                         "before fusing",
                         loop, old.nparts);
    if (n < 1 || s->nloops + n - 1 > KL_SCHED_MAX_LOOPS)
        return kl_seterr(err, KL_ERR_INVAL,
                         "split: %d factors (1..%d loops allowed)", n,
                         KL_SCHED_MAX_LOOPS - s->nloops + 1);
    if (old.kind != KL_LOOP_SERIAL)
        return kl_seterr(err, KL_ERR_INVAL, "split: loop %d is already %s",
                         loop, kl_loop_kind_name(old.kind));
    if (s_is_attach(s, loop))
        return kl_seterr(err, KL_ERR_INVAL,
                         "split: loop %d is a stage's attach point", loop);
    int64_t prod = 1;
    for (int i = 0; i < n; i++) {
        if (factors[i] < 1)
            return kl_seterr(err, KL_ERR_INVAL,
                             "split: factor %d is %lld (must be >= 1)", i,
                             (long long)factors[i]);
        if (prod > (int64_t)1 << 40)
            return kl_seterr(err, KL_ERR_INVAL, "split: factors overflow");
        prod *= factors[i];
    }
    if (prod < old.extent)
        return kl_seterr(err, KL_ERR_INVAL,
                         "split: factors multiply to %lld < extent %lld of "
                         "loop %d",
                         (long long)prod, (long long)old.extent, loop);
    bool imperfect = prod != old.extent;
    if (imperfect && s->nguards >= KL_SCHED_MAX_GUARDS)
        return kl_seterr(err, KL_ERR_INVAL, "split: too many guards");
    /* Guards that mention the old loop must stay expressible. */
    for (int g = 0; g < s->nguards; g++)
        for (int k = 0; k < s->guards[g].nterms; k++)
            if (s->guards[g].terms[k].loop == loop &&
                s->guards[g].nterms + n - 1 > KL_GUARD_MAX_TERMS)
                return kl_seterr(err, KL_ERR_INVAL,
                                 "split: guard of loop %d too long", loop);
    kl_loop_t nl[KL_SCHED_MAX_LOOPS];
    int64_t inner = 1;
    for (int i = n - 1; i >= 0; i--) {
        kl_loop_t *l = &nl[i];
        memset(l, 0, sizeof *l);
        l->id = s->next_id + i;
        l->extent = factors[i];
        l->reduce = old.reduce;
        l->nparts = 1;
        l->parts[0] = (kl_loop_part_t){old.parts[0].iter,
                                       old.parts[0].stride * inner, factors[i]};
        inner *= factors[i];
    }
    s->next_id += n;
    /* Rewrite guards: old value = sum new_i * (product of later factors). */
    for (int g = 0; g < s->nguards; g++) {
        kl_guard_t *gd = &s->guards[g];
        for (int k = 0; k < gd->nterms; k++) {
            if (gd->terms[k].loop != loop)
                continue;
            int64_t c = gd->terms[k].coef;
            gd->terms[k] = gd->terms[--gd->nterms];
            int64_t mult = 1;
            for (int i = n - 1; i >= 0; i--) {
                gd->terms[gd->nterms].loop = nl[i].id;
                gd->terms[gd->nterms].part = 0;
                gd->terms[gd->nterms].coef = c * mult;
                gd->nterms++;
                mult *= factors[i];
            }
            break;
        }
    }
    if (imperfect) {
        kl_guard_t *gd = &s->guards[s->nguards++];
        memset(gd, 0, sizeof *gd);
        gd->bound = old.extent;
        gd->iter = old.parts[0].iter;
        int64_t mult = 1;
        for (int i = n - 1; i >= 0; i--) {
            gd->terms[gd->nterms].loop = nl[i].id;
            gd->terms[gd->nterms].coef = mult;
            gd->nterms++;
            mult *= factors[i];
        }
    }
    memmove(&s->loops[pos + n], &s->loops[pos + 1],
            (size_t)(s->nloops - pos - 1) * sizeof(kl_loop_t));
    memcpy(&s->loops[pos], nl, (size_t)n * sizeof(kl_loop_t));
    s->nloops += n - 1;
    for (int i = 0; out_ids && i < n; i++)
        out_ids[i] = nl[i].id;
    return KL_OK;
}

int kl_sched_reorder(kl_sched_t *s, const int *loops, int n, char *err)
{
    int pos[KL_SCHED_MAX_LOOPS];
    if (n < 1 || n > s->nloops)
        return kl_seterr(err, KL_ERR_INVAL, "reorder: %d loops", n);
    for (int i = 0; i < n; i++) {
        pos[i] = kl_sched_loop_pos(s, loops[i]);
        if (pos[i] < 0)
            return kl_seterr(err, KL_ERR_INVAL,
                             "reorder: loop %d is not in this nest", loops[i]);
        for (int j = 0; j < i; j++)
            if (loops[j] == loops[i])
                return kl_seterr(err, KL_ERR_INVAL,
                                 "reorder: loop %d named twice", loops[i]);
    }
    int sorted[KL_SCHED_MAX_LOOPS];
    memcpy(sorted, pos, (size_t)n * sizeof(int));
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    /* A stage attached inside the moved range would change what it covers. */
    for (int i = 0; i < s->nstages; i++) {
        int ap = kl_sched_stage_attach_pos(s, &s->stages[i]);
        if (ap >= sorted[0] && ap < sorted[n - 1])
            return kl_seterr(err, KL_ERR_INVAL,
                             "reorder: moves loops across the attach point "
                             "of stage %d",
                             s->stages[i].id);
    }
    kl_loop_t moved[KL_SCHED_MAX_LOOPS];
    for (int i = 0; i < n; i++)
        moved[i] = s->loops[pos[i]];
    for (int i = 0; i < n; i++)
        s->loops[sorted[i]] = moved[i];
    return KL_OK;
}

int kl_sched_fuse(kl_sched_t *s, const int *loops, int n, int *out_id,
                  char *err)
{
    if (n < 2)
        return kl_seterr(err, KL_ERR_INVAL, "fuse: needs 2 or more loops");
    int p0 = s_pos_or_err(s, loops[0], "fuse", err);
    if (p0 < 0)
        return KL_ERR_INVAL;
    int nparts = 0;
    for (int i = 0; i < n; i++) {
        int p = kl_sched_loop_pos(s, loops[i]);
        if (p < 0)
            return kl_seterr(err, KL_ERR_INVAL,
                             "fuse: loop %d is not in the nest", loops[i]);
        if (p != p0 + i)
            return kl_seterr(err, KL_ERR_INVAL,
                             "fuse: loops %d and %d are not adjacent",
                             loops[i - 1 < 0 ? 0 : i - 1], loops[i]);
        const kl_loop_t *l = &s->loops[p];
        if (l->kind != KL_LOOP_SERIAL)
            return kl_seterr(err, KL_ERR_INVAL, "fuse: loop %d is %s", l->id,
                             kl_loop_kind_name(l->kind));
        if (l->reduce != s->loops[p0].reduce)
            return kl_seterr(err, KL_ERR_INVAL,
                             "fuse: loops %d and %d mix spatial and "
                             "reduction",
                             loops[0], loops[i]);
        if (s_is_attach(s, l->id))
            return kl_seterr(err, KL_ERR_INVAL,
                             "fuse: loop %d is a stage's attach point", l->id);
        nparts += l->nparts;
    }
    if (nparts > KL_LOOP_MAX_PARTS)
        return kl_seterr(err, KL_ERR_INVAL, "fuse: more than %d parts",
                         KL_LOOP_MAX_PARTS);
    kl_loop_t f;
    memset(&f, 0, sizeof f);
    f.id = s->next_id++;
    f.extent = 1;
    f.reduce = s->loops[p0].reduce;
    for (int i = 0; i < n; i++) {
        const kl_loop_t *l = &s->loops[p0 + i];
        /* Guard terms follow their parts into the fused loop. */
        for (int g = 0; g < s->nguards; g++)
            for (int k = 0; k < s->guards[g].nterms; k++)
                if (s->guards[g].terms[k].loop == l->id) {
                    s->guards[g].terms[k].loop = f.id;
                    s->guards[g].terms[k].part += f.nparts;
                }
        for (int p = 0; p < l->nparts; p++)
            f.parts[f.nparts++] = l->parts[p];
        f.extent *= l->extent;
    }
    s->loops[p0] = f;
    memmove(&s->loops[p0 + 1], &s->loops[p0 + n],
            (size_t)(s->nloops - p0 - n) * sizeof(kl_loop_t));
    s->nloops -= n - 1;
    if (out_id)
        *out_id = f.id;
    return KL_OK;
}

static int s_set_kind(kl_sched_t *s, int loop, kl_loop_kind kind,
                      const char *prim, char *err)
{
    int pos = s_pos_or_err(s, loop, prim, err);
    if (pos < 0)
        return KL_ERR_INVAL;
    kl_loop_t *l = &s->loops[pos];
    if (l->kind != KL_LOOP_SERIAL && l->kind != kind)
        return kl_seterr(err, KL_ERR_INVAL, "%s: loop %d is already %s", prim,
                         loop, kl_loop_kind_name(l->kind));
    if (kind != KL_LOOP_UNROLL && l->reduce)
        return kl_seterr(err, KL_ERR_INVAL, "%s: loop %d is a reduction loop",
                         prim, loop);
    for (int i = 0; kind != KL_LOOP_UNROLL && kind != KL_LOOP_VTHREAD &&
                    kind != KL_LOOP_PARALLEL && i < s->nloops;
         i++)
        if (i != pos && s->loops[i].kind == kind)
            return kl_seterr(err, KL_ERR_INVAL, "%s: loop %d is already %s",
                             prim, s->loops[i].id, kl_loop_kind_name(kind));
    l->kind = kind;
    return KL_OK;
}

int kl_sched_parallel(kl_sched_t *s, int loop, char *err)
{
    return s_set_kind(s, loop, KL_LOOP_PARALLEL, "parallel", err);
}

int kl_sched_vectorize(kl_sched_t *s, int loop, char *err)
{
    int pos = s_pos_or_err(s, loop, "vectorize", err);
    if (pos < 0)
        return KL_ERR_INVAL;
    const kl_loop_t *l = &s->loops[pos];
    if (l->reduce)
        return kl_seterr(err, KL_ERR_INVAL,
                         "vectorize: loop %d is a reduction loop", loop);
    if (pos != s->nloops - 1)
        return kl_seterr(err, KL_ERR_INVAL,
                         "vectorize: loop %d is not the innermost loop", loop);
    if (l->nparts != 1 || l->parts[0].stride != 1)
        return kl_seterr(err, KL_ERR_INVAL,
                         "vectorize: loop %d is not a stride-1 loop of one "
                         "iterator",
                         loop);
    return s_set_kind(s, loop, KL_LOOP_VECTORIZE, "vectorize", err);
}

int kl_sched_unroll(kl_sched_t *s, int loop, char *err)
{
    int pos = s_pos_or_err(s, loop, "unroll", err);
    if (pos < 0)
        return KL_ERR_INVAL;
    if (s->loops[pos].extent > 64)
        return kl_seterr(err, KL_ERR_INVAL,
                         "unroll: loop %d has extent %lld (at most 64)", loop,
                         (long long)s->loops[pos].extent);
    return s_set_kind(s, loop, KL_LOOP_UNROLL, "unroll", err);
}

int kl_sched_bind(kl_sched_t *s, int loop, kl_loop_kind kind, char *err)
{
    if (kind < KL_LOOP_BLOCK_X || kind > KL_LOOP_VTHREAD)
        return kl_seterr(err, KL_ERR_INVAL,
                         "bind: %s is not a GPU index (blockIdx.*, "
                         "threadIdx.*, vthread)",
                         kl_loop_kind_name(kind));
    return s_set_kind(s, loop, kind, "bind", err);
}

static int s_add_stage(kl_sched_t *s, kl_stage_kind kind, int tensor,
                       kl_scope scope, int *out, char *err)
{
    if (s->nstages >= KL_SCHED_MAX_STAGES)
        return kl_seterr(err, KL_ERR_INVAL, "cache: more than %d stages",
                         KL_SCHED_MAX_STAGES);
    kl_stage_t *st = &s->stages[s->nstages++];
    st->id = s->next_id++;
    st->kind = kind;
    st->tensor = tensor;
    st->scope = scope;
    st->attach = KL_ATTACH_ROOT;
    if (out)
        *out = st->id;
    return KL_OK;
}

int kl_sched_cache_read(kl_sched_t *s, int tensor, kl_scope scope,
                        int *out_stage, char *err)
{
    if (tensor < 0 || tensor >= s->w->ntensors ||
        s->w->tensors[tensor].is_output)
        return kl_seterr(err, KL_ERR_INVAL,
                         "cache_read: tensor %d is not an input", tensor);
    if (scope == KL_SCOPE_GLOBAL)
        return kl_seterr(err, KL_ERR_INVAL,
                         "cache_read: scope global copies nothing (use "
                         "packed, shared or local)");
    for (int i = 0; i < s->nstages; i++)
        if (s->stages[i].kind == KL_STAGE_READ && s->stages[i].tensor == tensor)
            return kl_seterr(err, KL_ERR_INVAL,
                             "cache_read: tensor %s already has stage %d",
                             s->w->tensors[tensor].name, s->stages[i].id);
    return s_add_stage(s, KL_STAGE_READ, tensor, scope, out_stage, err);
}

int kl_sched_cache_write(kl_sched_t *s, kl_scope scope, int *out_stage,
                         char *err)
{
    if (scope != KL_SCOPE_LOCAL && scope != KL_SCOPE_SHARED)
        return kl_seterr(err, KL_ERR_INVAL,
                         "cache_write: scope %s (local or shared)",
                         kl_scope_name(scope));
    for (int i = 0; i < s->nstages; i++)
        if (s->stages[i].kind == KL_STAGE_WRITE)
            return kl_seterr(err, KL_ERR_INVAL,
                             "cache_write: the output already has stage %d",
                             s->stages[i].id);
    return s_add_stage(s, KL_STAGE_WRITE, kl_workload_output(s->w), scope,
                       out_stage, err);
}

static kl_stage_t *s_stage(kl_sched_t *s, int id)
{
    return (kl_stage_t *)kl_sched_stage_by_id(s, id);
}

int kl_sched_compute_at(kl_sched_t *s, int stage, int loop, char *err)
{
    kl_stage_t *st = s_stage(s, stage);
    if (!st)
        return kl_seterr(err, KL_ERR_INVAL, "compute_at: no stage %d", stage);
    if (st->kind != KL_STAGE_READ)
        return kl_seterr(err, KL_ERR_INVAL,
                         "compute_at: stage %d is a write cache (use "
                         "reverse_compute_at)",
                         stage);
    if (loop != KL_ATTACH_ROOT) {
        int pos = s_pos_or_err(s, loop, "compute_at", err);
        if (pos < 0)
            return KL_ERR_INVAL;
        if (s->loops[pos].kind == KL_LOOP_VECTORIZE)
            return kl_seterr(err, KL_ERR_INVAL,
                             "compute_at: loop %d is vectorized", loop);
        /* The copy must cover at least one loop that reads the tensor. */
        bool any = false;
        for (int p = pos + 1; p < s->nloops; p++)
            any = any || kl_sched_loop_touches(s, p, st->tensor);
        if (!any)
            return kl_seterr(err, KL_ERR_INVAL,
                             "compute_at: no loop below loop %d reads %s", loop,
                             s->w->tensors[st->tensor].name);
    }
    st->attach = loop;
    return KL_OK;
}

int kl_sched_reverse_compute_at(kl_sched_t *s, int stage, int loop, char *err)
{
    kl_stage_t *st = s_stage(s, stage);
    if (!st)
        return kl_seterr(err, KL_ERR_INVAL, "reverse_compute_at: no stage %d",
                         stage);
    if (st->kind != KL_STAGE_WRITE)
        return kl_seterr(err, KL_ERR_INVAL,
                         "reverse_compute_at: stage %d is a read cache (use "
                         "compute_at)",
                         stage);
    if (loop != KL_ATTACH_ROOT) {
        int pos = s_pos_or_err(s, loop, "reverse_compute_at", err);
        if (pos < 0)
            return KL_ERR_INVAL;
        if (s->loops[pos].kind == KL_LOOP_VECTORIZE)
            return kl_seterr(err, KL_ERR_INVAL,
                             "reverse_compute_at: loop %d is vectorized", loop);
    }
    st->attach = loop;
    return KL_OK;
}

int64_t kl_loop_annot(const kl_loop_t *l, const char *key)
{
    for (int i = 0; i < l->nannots; i++)
        if (!strcmp(l->annots[i].key, key))
            return l->annots[i].value;
    return 0;
}

int kl_sched_annotate(kl_sched_t *s, int loop, const char *key, int64_t value,
                      char *err)
{
    int pos = s_pos_or_err(s, loop, "annotate", err);
    if (pos < 0)
        return KL_ERR_INVAL;
    if (!key || !*key || strlen(key) >= sizeof(((kl_annot_t *)0)->key))
        return kl_seterr(err, KL_ERR_INVAL, "annotate: bad key");
    kl_loop_t *l = &s->loops[pos];
    for (int i = 0; i < l->nannots; i++)
        if (!strcmp(l->annots[i].key, key)) {
            l->annots[i].value = value;
            return KL_OK;
        }
    if (l->nannots >= KL_LOOP_MAX_ANNOTS)
        return kl_seterr(err, KL_ERR_INVAL,
                         "annotate: loop %d has %d annotations already", loop,
                         l->nannots);
    snprintf(l->annots[l->nannots].key, sizeof l->annots[0].key, "%s", key);
    l->annots[l->nannots++].value = value;
    return KL_OK;
}

int kl_sched_tensorize(kl_sched_t *s, int loop, const char *intrin, char *err)
{
    const kl_intrin_t *in = kl_intrin_find(intrin);
    if (!in) {
        kl_buf_t b = {0};
        for (int i = 0; i < kl_intrin_count(); i++)
            kl_buf_printf(&b, "%s%s", i ? ", " : "", kl_intrin_at(i)->name);
        kl_seterr(err, KL_ERR_INVAL,
                  "tensorize: unknown intrinsic \"%s\" (known: %s)",
                  intrin ? intrin : "", b.data);
        kl_buf_free(&b);
        return KL_ERR_INVAL;
    }
    if (s->tz)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize: the nest is tensorized already");
    kl_tensorize_t tz;
    int rc = kl_sched__tz_match(s, loop, in, &tz, err);
    if (rc)
        return rc;
    s->tz = in;
    s->tz_loop = loop;
    return KL_OK;
}

int kl_sched_tensorized(const kl_sched_t *s, kl_tensorize_t *out, char *err)
{
    if (!s->tz)
        return KL_ERR_NOTFOUND;
    return kl_sched__tz_match(s, s->tz_loop, s->tz, out, err);
}

char *kl_sched_print(const kl_sched_t *s)
{
    kl_buf_t b = {0};
    if (s->tz)
        kl_buf_printf(&b, "tensorize l%d with %s\n", s->tz_loop, s->tz->name);
    if (s->wino_m)
        kl_buf_printf(&b, "winograd F(%dx%d,3x3) of %s: the product %s\n",
                      s->wino_m, s->wino_m,
                      s->origin->name ? s->origin->name : "?", s->w->canonical);
    for (int i = -1; i < s->nloops; i++) {
        if (i >= 0) {
            const kl_loop_t *l = &s->loops[i];
            kl_buf_printf(&b, "%*sfor l%d in %lld [%s%s]:", 2 * i, "", l->id,
                          (long long)l->extent, kl_loop_kind_name(l->kind),
                          l->reduce ? ", reduce" : "");
            for (int p = 0; p < l->nparts; p++)
                kl_buf_printf(&b, " %s*%lld(%lld)",
                              s->w->iters[l->parts[p].iter].name,
                              (long long)l->parts[p].stride,
                              (long long)l->parts[p].extent);
            for (int a = 0; a < l->nannots; a++)
                kl_buf_printf(&b, " @%s=%lld", l->annots[a].key,
                              (long long)l->annots[a].value);
            kl_buf_puts(&b, "\n");
        }
        /* Stages attached here run inside this loop (root: before all). */
        for (int k = 0; k < s->nstages; k++) {
            const kl_stage_t *st = &s->stages[k];
            if (kl_sched_stage_attach_pos(s, st) == i)
                kl_buf_printf(
                    &b, "%*sstage %d: %s %s %s\n", 2 * (i + 1), "", st->id,
                    st->kind == KL_STAGE_READ ? "cache_read" : "cache_write",
                    s->w->tensors[st->tensor].name, kl_scope_name(st->scope));
        }
    }
    for (int g = 0; g < s->nguards; g++) {
        const kl_guard_t *gd = &s->guards[g];
        kl_buf_puts(&b, "guard:");
        for (int k = 0; k < gd->nterms; k++)
            kl_buf_printf(&b, " %s l%d.%d*%lld", k ? "+" : "",
                          gd->terms[k].loop, gd->terms[k].part,
                          (long long)gd->terms[k].coef);
        kl_buf_printf(&b, " < %lld\n", (long long)gd->bound);
    }
    if (!b.data)
        kl_buf_puts(&b, "");
    return kl_buf_take(&b);
}
