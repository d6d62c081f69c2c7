/* kl_mutate.c - mutators of traces (one decision changed); kl_space_fix
 * (kl_space.h) makes a mutated trace valid and canonical again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_search.h"

#define MAXI 512 /* instructions of the taken path that we look at */

const char *kl_mutator_name(kl_mutator m)
{
    static const char *n[KL_MUT__COUNT] = {"tile_size",      "unroll",
                                           "parallel",       "compute_location",
                                           "thread_binding", "categorical"};
    return (unsigned)m < KL_MUT__COUNT ? n[m] : "?";
}

/* ---- the taken path ----------------------------------------------------- */

typedef struct {
    kl_inst_t *inst[MAXI]; /* taken path, in execution order */
    int n;
    kl_inst_t *ifs[MAXI]; /* every `if` of the taken path */
    int nifs;
    kl_inst_t *mutated; /* the instruction whose decision changed */
} path_t;

static void s_walk(kl_inst_t *v, int n, path_t *p)
{
    for (int i = 0; i < n && p->n < MAXI; i++) {
        kl_inst_t *in = &v[i];
        p->inst[p->n++] = in;
        if (in->op != KL_OP_IF)
            continue;
        if (p->nifs < MAXI)
            p->ifs[p->nifs++] = in;
        if (in->has_decision && in->ndec == 1)
            s_walk(in->dec[0] ? in->then_body : in->else_body,
                   in->dec[0] ? in->nthen : in->nelse, p);
    }
}

static void s_path(kl_trace_t *t, path_t *p)
{
    memset(p, 0, sizeof *p);
    int n = kl_trace_ninsts(t);
    /* Top-level instructions are contiguous: kl_trace_inst(t, 0) is the
     * array's first element. */
    if (n > 0)
        s_walk(kl_trace_inst(t, 0), n, p);
}

/* The instruction of the taken path defining rv, and which output. */
static kl_inst_t *s_def(const path_t *p, int64_t rv, int *which)
{
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->inst[i]->nout; k++)
            if (p->inst[i]->out[k] == rv) {
                *which = k;
                return p->inst[i];
            }
    return NULL;
}

/* Whether predicate text names integer RV rv ("v12", not "v123"). */
static bool s_pred_uses(const char *pred, int64_t rv)
{
    char tok[32];
    int n = snprintf(tok, sizeof tok, "v%lld", (long long)rv);
    for (const char *h = strstr(pred, tok); h; h = strstr(h + 1, tok)) {
        bool before =
            h == pred || !(h[-1] == '_' || (h[-1] >= 'a' && h[-1] <= 'z') ||
                           (h[-1] >= '0' && h[-1] <= '9'));
        bool after = !(h[n] >= '0' && h[n] <= '9');
        if (before && after)
            return true;
    }
    return false;
}

static bool s_has_unroll_annot(const kl_inst_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        if (v[i].op == KL_OP_ANNOTATE && v[i].nstrs > 0 &&
            !strcmp(v[i].strs[0], "unroll_max_step"))
            return true;
        if (v[i].op == KL_OP_IF &&
            (s_has_unroll_annot(v[i].then_body, v[i].nthen) ||
             s_has_unroll_annot(v[i].else_body, v[i].nelse)))
            return true;
    }
    return false;
}

/* A categorical whose value selects an unroll_max_step annotation. */
static bool s_is_unroll_cat(const path_t *p, const kl_inst_t *in)
{
    for (int i = 0; i < p->nifs; i++) {
        const kl_inst_t *f = p->ifs[i];
        if (s_pred_uses(f->pred, in->out[0]) &&
            (s_has_unroll_annot(f->then_body, f->nthen) ||
             s_has_unroll_annot(f->else_body, f->nelse)))
            return true;
    }
    return false;
}

/* ---- decision changes --------------------------------------------------- */

/* Another index of a categorical, weighted by the probabilities. */
static bool s_recat(kl_inst_t *in, kl_rng_t *rng)
{
    double tot = 0;
    for (int i = 0; i < in->nints; i++)
        if (i != in->dec[0] && in->floats[i] > 0)
            tot += in->floats[i];
    if (!(tot > 0))
        return false;
    double x = kl_rng_double(rng) * tot;
    for (int i = 0; i < in->nints; i++) {
        if (i == in->dec[0] || !(in->floats[i] > 0))
            continue;
        if (x < in->floats[i] || i == in->nints - 1) {
            in->dec[0] = i;
            return true;
        }
        x -= in->floats[i];
    }
    for (int i = in->nints - 1; i >= 0; i--)
        if (i != in->dec[0] && in->floats[i] > 0) {
            in->dec[0] = i;
            return true;
        }
    return false;
}

/* A prime factor of x > 1, chosen at random among its prime factors. */
static int64_t s_prime_of(int64_t x, kl_rng_t *rng)
{
    int64_t pr[64];
    int n = 0;
    for (int64_t p = 2; p * p <= x && n < 63; p++)
        while (x % p == 0 && n < 63) {
            pr[n++] = p;
            x /= p;
        }
    if (x > 1)
        pr[n++] = x;
    return n ? pr[kl_rng_below(rng, (uint64_t)n)] : 1;
}

/* Moves a prime factor from position src to dst of a perfect tile,
 * respecting max_innermost. */
static bool s_move(kl_inst_t *in, int src, int dst, kl_rng_t *rng)
{
    if (src == dst || src < 0 || dst < 0 || src >= in->ndec ||
        dst >= in->ndec || in->dec[src] <= 1)
        return false;
    int64_t p = s_prime_of(in->dec[src], rng);
    int64_t maxin = in->nints > 1 ? in->ints[1] : 0;
    if (dst == in->ndec - 1 && maxin > 0 && in->dec[dst] * p > maxin)
        return false;
    in->dec[src] /= p;
    in->dec[dst] *= p;
    return true;
}

static int s_mut_tile(path_t *p, kl_rng_t *rng)
{
    kl_inst_t *c[MAXI];
    int n = 0;
    for (int i = 0; i < p->n; i++)
        if (p->inst[i]->op == KL_OP_SAMPLE_PERFECT_TILE &&
            p->inst[i]->has_decision && p->inst[i]->ndec >= 2)
            c[n++] = p->inst[i];
    if (!n)
        return KL_ERR_NOTFOUND;
    for (int tries = 0; tries < 32; tries++) {
        kl_inst_t *in = c[kl_rng_below(rng, (uint64_t)n)];
        int src = (int)kl_rng_below(rng, (uint64_t)in->ndec);
        int dst = (int)kl_rng_below(rng, (uint64_t)in->ndec);
        if (s_move(in, src, dst, rng)) {
            p->mutated = in;
            return KL_OK;
        }
    }
    return KL_ERR_NOTFOUND;
}

static int s_mut_cat(path_t *p, kl_rng_t *rng, bool unroll)
{
    kl_inst_t *c[MAXI];
    int n = 0;
    for (int i = 0; i < p->n; i++) {
        kl_inst_t *in = p->inst[i];
        if (in->op == KL_OP_SAMPLE_CATEGORICAL && in->has_decision &&
            in->nints >= 2 && in->nout == 1 && s_is_unroll_cat(p, in) == unroll)
            c[n++] = in;
    }
    for (int tries = 0; n && tries < 16; tries++) {
        kl_inst_t *in = c[kl_rng_below(rng, (uint64_t)n)];
        if (s_recat(in, rng)) {
            p->mutated = in;
            return KL_OK;
        }
    }
    return KL_ERR_NOTFOUND;
}

static int s_mut_loc(path_t *p, kl_rng_t *rng)
{
    kl_inst_t *c[MAXI];
    int n = 0;
    for (int i = 0; i < p->n; i++)
        if (p->inst[i]->op == KL_OP_SAMPLE_COMPUTE_LOCATION &&
            p->inst[i]->has_decision && p->inst[i]->nin >= 3)
            c[n++] = p->inst[i];
    if (!n)
        return KL_ERR_NOTFOUND;
    kl_inst_t *in = c[kl_rng_below(rng, (uint64_t)n)];
    int64_t nc = in->nin - 1;
    int64_t d =
        (in->dec[0] + 1 + (int64_t)kl_rng_below(rng, (uint64_t)(nc - 1))) % nc;
    in->dec[0] = d;
    p->mutated = in;
    return KL_OK;
}

/* The sampling instruction (and output index) behind the split factor
 * that made loop RV rv, or NULL. */
static kl_inst_t *s_factor_src(const path_t *p, int64_t rv, int *k)
{
    int which;
    kl_inst_t *sp = s_def(p, rv, &which);
    if (!sp || sp->op != KL_OP_SPLIT || 1 + which >= sp->nin)
        return NULL;
    int64_t f = sp->in[1 + which];
    if (f < 0 || f == KL_SPLIT_INFER)
        return NULL;
    kl_inst_t *smp = s_def(p, f, k);
    if (!smp || !smp->has_decision ||
        (smp->op != KL_OP_SAMPLE_PERFECT_TILE &&
         smp->op != KL_OP_SAMPLE_CATEGORICAL))
        return NULL;
    return smp;
}

/* Changes the sampled extent behind a loop: a perfect tile moves a factor
 * between that level and a neighbour, a categorical picks another value. */
static bool s_change_extent(kl_inst_t *smp, int k, kl_rng_t *rng)
{
    if (smp->op == KL_OP_SAMPLE_CATEGORICAL)
        return s_recat(smp, rng);
    int nb = k + (kl_rng_below(rng, 2) ? 1 : -1);
    if (nb < 0 || nb >= smp->ndec)
        nb = k + (k + 1 < smp->ndec ? 1 : -1);
    return kl_rng_below(rng, 2)
               ? s_move(smp, k, nb, rng) || s_move(smp, nb, k, rng)
               : s_move(smp, nb, k, rng) || s_move(smp, k, nb, rng);
}

/* Parallel (bind == false) or threadIdx-bound (bind == true) loops. */
static int s_mut_extent(path_t *p, kl_rng_t *rng, bool bind)
{
    kl_inst_t *src[MAXI];
    int which[MAXI], n = 0;
    for (int i = 0; i < p->n; i++) {
        kl_inst_t *in = p->inst[i];
        bool hit = bind ? in->op == KL_OP_BIND && in->nstrs > 0 &&
                              !strncmp(in->strs[0], "threadIdx", 9)
                        : in->op == KL_OP_PARALLEL;
        if (!hit || in->nin < 1)
            continue;
        int w;
        kl_inst_t *def = s_def(p, in->in[0], &w);
        if (def && def->op == KL_OP_FUSE) {
            for (int k = 0; k < def->nin && n < MAXI; k++)
                if ((src[n] = s_factor_src(p, def->in[k], &which[n])))
                    n++;
        } else if ((src[n] = s_factor_src(p, in->in[0], &which[n]))) {
            n++;
        }
    }
    for (int tries = 0; n && tries < 32; tries++) {
        int i = (int)kl_rng_below(rng, (uint64_t)n);
        if (s_change_extent(src[i], which[i], rng)) {
            p->mutated = src[i];
            return KL_OK;
        }
    }
    return KL_ERR_NOTFOUND;
}

static bool s_has(const int64_t *v, int n, int64_t x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

/* A changed decision changes the extents of the loops split with it, so
 * the decisions of later tiles of those loops (and of loops split from
 * them) may no longer multiply to their extents: they are dropped, to be
 * drawn again when the trace is fixed. Follows the data flow of the taken
 * path from the mutated instruction. */
static void s_invalidate(path_t *p)
{
    int64_t taint[4 * MAXI];
    int nt = 0, i = 0;
    while (i < p->n && p->inst[i] != p->mutated)
        i++;
    for (int k = 0; i < p->n && k < p->mutated->nout; k++)
        taint[nt++] = p->mutated->out[k];
    for (i++; i < p->n; i++) {
        kl_inst_t *in = p->inst[i];
        bool hit = false;
        for (int k = 0; k < in->nin && !hit; k++)
            hit = in->in[k] >= 0 && s_has(taint, nt, in->in[k]);
        if (!hit || (in->op != KL_OP_SPLIT && in->op != KL_OP_FUSE &&
                     in->op != KL_OP_SAMPLE_PERFECT_TILE))
            continue;
        if (in->op == KL_OP_SAMPLE_PERFECT_TILE) {
            in->has_decision = false;
            in->ndec = 0;
        }
        for (int k = 0; k < in->nout && nt < 4 * MAXI; k++)
            taint[nt++] = in->out[k];
    }
}

int kl_mutate(const kl_trace_t *t, kl_mutator m, kl_rng_t *rng,
              kl_trace_t **out, char *err)
{
    kl_trace_t *c = kl_trace_clone(t);
    path_t *p = kl_xmalloc(sizeof *p);
    s_path(c, p);
    int rc;
    switch (m) {
    case KL_MUT_TILE_SIZE:
        rc = s_mut_tile(p, rng);
        break;
    case KL_MUT_UNROLL:
        rc = s_mut_cat(p, rng, true);
        break;
    case KL_MUT_PARALLEL:
        rc = s_mut_extent(p, rng, false);
        break;
    case KL_MUT_COMPUTE_LOCATION:
        rc = s_mut_loc(p, rng);
        break;
    case KL_MUT_THREAD_BINDING:
        rc = s_mut_extent(p, rng, true);
        break;
    case KL_MUT_CATEGORICAL:
        rc = s_mut_cat(p, rng, false);
        break;
    default:
        rc = KL_ERR_INVAL;
    }
    if (!rc && p->mutated)
        s_invalidate(p);
    free(p);
    if (rc) {
        kl_trace_free(&c);
        return kl_seterr(err, rc, "mutator %s: %s", kl_mutator_name(m),
                         rc == KL_ERR_NOTFOUND ? "nothing to change here"
                                               : "unknown mutator");
    }
    *out = c;
    return KL_OK;
}
