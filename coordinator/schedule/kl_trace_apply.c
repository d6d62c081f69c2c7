/* kl_trace_apply.c - executing programs and replaying traces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_trace.h"
#include "kl_trace_priv.h"

typedef enum { RV_NONE = 0, RV_LOOP, RV_INT, RV_STAGE } rv_kind;

typedef struct {
    rv_kind kind;
    int64_t v; /* loop id, integer value or stage id */
} rv_t;

typedef struct {
    kl_sched_t *s;
    kl_rng_t *rng;
    rv_t *rvs;
    int64_t nrvs;
    bool rejected;
    int count; /* instructions run, for messages */
    char *err;
} ex_t;

static int s_err(ex_t *ex, const kl_inst_t *in, const char *msg)
{
    return kl_seterr(ex->err, KL_ERR_INVAL, "inst %d %s: %s", ex->count,
                     kl_op_name(in->op), msg);
}

static int s_get(ex_t *ex, const kl_inst_t *in, int64_t rv, rv_kind kind,
                 int64_t *v)
{
    char m[128];
    if (kind == RV_LOOP && rv == -1) {
        *v = KL_ATTACH_ROOT;
        return KL_OK;
    }
    if (rv < 0 || rv >= ex->nrvs || ex->rvs[rv].kind == RV_NONE) {
        snprintf(m, sizeof m, "random variable %lld is not defined",
                 (long long)rv);
        return s_err(ex, in, m);
    }
    if (ex->rvs[rv].kind != kind) {
        snprintf(m, sizeof m, "random variable %lld has the wrong kind",
                 (long long)rv);
        return s_err(ex, in, m);
    }
    *v = ex->rvs[rv].v;
    return KL_OK;
}

static int s_set(ex_t *ex, const kl_inst_t *in, int64_t rv, rv_kind kind,
                 int64_t v)
{
    if (rv < 0 || rv >= ex->nrvs)
        return s_err(ex, in, "output random variable out of range");
    ex->rvs[rv].kind = kind;
    ex->rvs[rv].v = v;
    return KL_OK;
}

static int s_lookup(void *ctx, int64_t rv, int64_t *value, char *err)
{
    ex_t *ex = ctx;
    if (rv < 0 || rv >= ex->nrvs || ex->rvs[rv].kind == RV_NONE)
        return kl_seterr(err, KL_ERR_INVAL,
                         "predicate: random variable %lld is not defined",
                         (long long)rv);
    if (ex->rvs[rv].kind == RV_LOOP) {
        const kl_loop_t *l = kl_sched_loop_by_id(ex->s, (int)ex->rvs[rv].v);
        if (!l)
            return kl_seterr(err, KL_ERR_INVAL, "predicate: loop l%lld is gone",
                             (long long)rv);
        *value = l->extent;
        return KL_OK;
    }
    *value = ex->rvs[rv].v;
    return KL_OK;
}

static int s_pred(ex_t *ex, const kl_inst_t *in, int64_t *v)
{
    kl_pred_t *p = NULL;
    char e[KL_ERRMSG_LEN];
    int rc = kl_pred_parse(in->pred, &p, e);
    if (!rc)
        rc = kl_pred_eval(p, s_lookup, ex, v, e);
    kl_pred_free(&p);
    return rc ? s_err(ex, in, e) : KL_OK;
}

/* Draws n factors of extent whose innermost is <= max_inner: each prime
 * factor goes to a uniformly chosen position. */
static void s_draw_tile(kl_rng_t *rng, int64_t extent, int n, int64_t max_inner,
                        int64_t whole, int64_t *f)
{
    if (whole > 0 && (max_inner <= 0 || extent <= max_inner) &&
        (int64_t)kl_rng_below(rng, 100) < whole) {
        for (int i = 0; i < n; i++)
            f[i] = 1;
        f[n - 1] = extent;
        return;
    }
    int64_t primes[64];
    int np = 0;
    int64_t e = extent;
    for (int64_t p = 2; p * p <= e && np < 63; p++)
        while (e % p == 0 && np < 63) {
            primes[np++] = p;
            e /= p;
        }
    if (e > 1)
        primes[np++] = e;
    for (int tries = 0; tries < 64; tries++) {
        for (int i = 0; i < n; i++)
            f[i] = 1;
        for (int k = 0; k < np; k++)
            f[kl_rng_below(rng, (uint64_t)n)] *= primes[k];
        if (max_inner <= 0 || f[n - 1] <= max_inner)
            return;
    }
    for (int i = 0; i < n; i++)
        f[i] = 1;
    f[0] = extent;
}

static int s_sample_tile(ex_t *ex, kl_inst_t *in)
{
    int64_t loop;
    int rc = s_get(ex, in, in->in[0], RV_LOOP, &loop);
    if (rc)
        return rc;
    const kl_loop_t *l = kl_sched_loop_by_id(ex->s, (int)loop);
    if (!l)
        return s_err(ex, in, "loop is not in the nest");
    int n = (int)in->ints[0];
    if (n < 1 || n != in->nout)
        return s_err(ex, in, "n does not match the outputs");
    if (!in->has_decision) {
        if (!ex->rng)
            return s_err(ex, in, "no decision to replay and no RNG");
        s_draw_tile(ex->rng, l->extent, n, in->ints[1],
                    in->nints > 2 ? in->ints[2] : 0, in->dec);
        in->ndec = n;
        in->has_decision = true;
    }
    if (in->ndec != n)
        return s_err(ex, in, "decision has the wrong length");
    int64_t prod = 1;
    for (int i = 0; i < n; i++) {
        if (in->dec[i] < 1 || in->dec[i] > l->extent)
            return s_err(ex, in, "decision factor out of range");
        prod *= in->dec[i];
    }
    if (prod != l->extent)
        return s_err(ex, in, "decision factors do not multiply to the extent");
    for (int i = 0; i < n; i++)
        if ((rc = s_set(ex, in, in->out[i], RV_INT, in->dec[i])))
            return rc;
    return KL_OK;
}

static int s_sample_cat(ex_t *ex, kl_inst_t *in)
{
    int n = in->nints;
    if (n < 1 || in->nfloats != n || in->nout != 1)
        return s_err(ex, in, "values and probs must have the same length");
    if (!in->has_decision) {
        if (!ex->rng)
            return s_err(ex, in, "no decision to replay and no RNG");
        double tot = 0;
        for (int i = 0; i < n; i++)
            tot += in->floats[i] > 0 ? in->floats[i] : 0;
        double x = kl_rng_double(ex->rng) * tot;
        int pick = n - 1;
        for (int i = 0; i < n; i++) {
            double p = in->floats[i] > 0 ? in->floats[i] : 0;
            if (x < p) {
                pick = i;
                break;
            }
            x -= p;
        }
        while (pick > 0 && !(in->floats[pick] > 0))
            pick--;
        in->dec[0] = pick;
        in->ndec = 1;
        in->has_decision = true;
    }
    if (in->ndec != 1 || in->dec[0] < 0 || in->dec[0] >= n)
        return s_err(ex, in, "decision index out of range");
    return s_set(ex, in, in->out[0], RV_INT, in->ints[in->dec[0]]);
}

static int s_sample_loc(ex_t *ex, kl_inst_t *in)
{
    int64_t st, loop;
    int n = in->nin - 1, rc;
    if (n < 1 || in->nout != 1)
        return s_err(ex, in, "needs a stage and candidate loops");
    if ((rc = s_get(ex, in, in->in[0], RV_STAGE, &st)))
        return rc;
    if (!in->has_decision) {
        if (!ex->rng)
            return s_err(ex, in, "no decision to replay and no RNG");
        in->dec[0] = (int64_t)kl_rng_below(ex->rng, (uint64_t)n);
        in->ndec = 1;
        in->has_decision = true;
    }
    if (in->ndec != 1 || in->dec[0] < 0 || in->dec[0] >= n)
        return s_err(ex, in, "decision index out of range");
    if ((rc = s_get(ex, in, in->in[1 + in->dec[0]], RV_LOOP, &loop)))
        return rc;
    return s_set(ex, in, in->out[0], RV_LOOP, loop);
}

static int s_loops_in(ex_t *ex, kl_inst_t *in, int from, int *ids)
{
    for (int k = from; k < in->nin; k++) {
        int64_t v;
        int rc = s_get(ex, in, in->in[k], RV_LOOP, &v);
        if (rc)
            return rc;
        ids[k - from] = (int)v;
    }
    return KL_OK;
}

static int s_prim(ex_t *ex, kl_inst_t *in);

static int s_run(ex_t *ex, kl_inst_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        kl_inst_t *in = &v[i];
        ex->count++;
        int64_t pv;
        int rc;
        switch (in->op) {
        case KL_OP_SAMPLE_PERFECT_TILE:
            rc = s_sample_tile(ex, in);
            break;
        case KL_OP_SAMPLE_CATEGORICAL:
            rc = s_sample_cat(ex, in);
            break;
        case KL_OP_SAMPLE_COMPUTE_LOCATION:
            rc = s_sample_loc(ex, in);
            break;
        case KL_OP_REJECT_IF:
            if ((rc = s_pred(ex, in, &pv)))
                break;
            if (pv) {
                ex->rejected = true;
                kl_seterr(ex->err, KL_OK, "reject_if(%s) held", in->pred);
                return KL_OK;
            }
            break;
        case KL_OP_IF:
            if ((rc = s_pred(ex, in, &pv)))
                break;
            if (in->has_decision && in->ndec == 1 && in->dec[0] != (pv != 0))
                return s_err(ex, in,
                             "the predicate disagrees with the recorded "
                             "branch");
            in->has_decision = true;
            in->ndec = 1;
            in->dec[0] = pv != 0;
            rc = pv ? s_run(ex, in->then_body, in->nthen)
                    : s_run(ex, in->else_body, in->nelse);
            if (!rc && ex->rejected)
                return KL_OK;
            break;
        default:
            rc = s_prim(ex, in);
            break;
        }
        if (rc)
            return rc;
    }
    return KL_OK;
}

static int s_find_tensor(const kl_workload_t *w, const char *name)
{
    for (int i = 0; i < w->ntensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return i;
    return -1;
}

static int s_prim(ex_t *ex, kl_inst_t *in)
{
    int ids[KL_INST_MAX], out = 0, rc = KL_OK;
    int64_t f[KL_INST_MAX], st = 0, loop = 0;
    char e[KL_ERRMSG_LEN];
    kl_sched_t *s = ex->s;
    if (in->nin > KL_INST_MAX || in->nout > KL_INST_MAX)
        return s_err(ex, in, "too many operands");
    switch (in->op) {
    case KL_OP_GET_LOOPS:
        if (in->nout != kl_sched_nloops(s))
            return s_err(ex, in, "output count differs from the nest depth");
        for (int k = 0; k < in->nout; k++)
            if ((rc = s_set(ex, in, in->out[k], RV_LOOP,
                            kl_sched_loop(s, k)->id)))
                return rc;
        return KL_OK;
    case KL_OP_SPLIT:
        if (in->nin < 2 || in->nout != in->nin - 1)
            return s_err(ex, in, "needs a loop and one factor per output");
        if ((rc = s_get(ex, in, in->in[0], RV_LOOP, &loop)))
            return rc;
        int infer = -1;
        int64_t prod = 1;
        for (int k = 1; k < in->nin; k++) {
            if (in->in[k] == KL_SPLIT_INFER) {
                if (infer >= 0)
                    return s_err(ex, in, "more than one inferred factor");
                infer = k - 1;
                f[k - 1] = 1;
            } else if (in->in[k] < 0) {
                f[k - 1] = -in->in[k];
            } else if ((rc = s_get(ex, in, in->in[k], RV_INT, &f[k - 1]))) {
                return rc;
            }
            if (f[k - 1] < 1 || f[k - 1] > ((int64_t)1 << 40))
                return s_err(ex, in, "factor out of range");
            prod *= f[k - 1];
            if (prod > ((int64_t)1 << 40))
                return s_err(ex, in, "factors overflow");
        }
        if (infer >= 0) {
            const kl_loop_t *l = kl_sched_loop_by_id(s, (int)loop);
            if (!l)
                return s_err(ex, in, "loop is not in the nest");
            f[infer] = (l->extent + prod - 1) / prod;
        }
        if ((rc = kl_sched_split(s, (int)loop, f, in->nin - 1, ids, e)))
            return s_err(ex, in, e);
        for (int k = 0; k < in->nout; k++)
            if ((rc = s_set(ex, in, in->out[k], RV_LOOP, ids[k])))
                return rc;
        return KL_OK;
    case KL_OP_REORDER:
        if ((rc = s_loops_in(ex, in, 0, ids)))
            return rc;
        rc = kl_sched_reorder(s, ids, in->nin, e);
        break;
    case KL_OP_FUSE:
        if (in->nout != 1)
            return s_err(ex, in, "needs one output");
        if ((rc = s_loops_in(ex, in, 0, ids)))
            return rc;
        if ((rc = kl_sched_fuse(s, ids, in->nin, &out, e)))
            return s_err(ex, in, e);
        return s_set(ex, in, in->out[0], RV_LOOP, out);
    case KL_OP_PARALLEL:
    case KL_OP_VECTORIZE:
    case KL_OP_UNROLL:
    case KL_OP_BIND:
    case KL_OP_ANNOTATE:
        if (in->nin != 1)
            return s_err(ex, in, "needs one loop");
        if ((rc = s_get(ex, in, in->in[0], RV_LOOP, &loop)))
            return rc;
        if (in->op == KL_OP_PARALLEL)
            rc = kl_sched_parallel(s, (int)loop, e);
        else if (in->op == KL_OP_VECTORIZE)
            rc = kl_sched_vectorize(s, (int)loop, e);
        else if (in->op == KL_OP_UNROLL)
            rc = kl_sched_unroll(s, (int)loop, e);
        else if (in->op == KL_OP_BIND) {
            kl_loop_kind k;
            if (in->nstrs < 1 || kl_loop_kind_parse(in->strs[0], &k))
                return s_err(ex, in, "unknown kind");
            rc = kl_sched_bind(s, (int)loop, k, e);
        } else {
            if (in->nstrs < 1 || in->nints < 1)
                return s_err(ex, in, "needs key and value");
            rc = kl_sched_annotate(s, (int)loop, in->strs[0], in->ints[0], e);
        }
        break;
    case KL_OP_CACHE_READ:
    case KL_OP_CACHE_WRITE: {
        kl_scope sc;
        const char *scs =
            in->op == KL_OP_CACHE_READ ? in->strs[1] : in->strs[0];
        if (in->nout != 1 || in->nstrs < (in->op == KL_OP_CACHE_READ ? 2 : 1))
            return s_err(ex, in, "needs its attributes and one output");
        if (kl_scope_parse(scs, &sc))
            return s_err(ex, in, "unknown scope");
        if (in->op == KL_OP_CACHE_READ) {
            int tn = s_find_tensor(kl_sched_workload(s), in->strs[0]);
            if (tn < 0)
                return s_err(ex, in, "no such tensor");
            rc = kl_sched_cache_read(s, tn, sc, &out, e);
        } else {
            rc = kl_sched_cache_write(s, sc, &out, e);
        }
        if (rc)
            return s_err(ex, in, e);
        return s_set(ex, in, in->out[0], RV_STAGE, out);
    }
    case KL_OP_COMPUTE_AT:
    case KL_OP_REVERSE_COMPUTE_AT:
        if (in->nin != 2)
            return s_err(ex, in, "needs a stage and a loop");
        if ((rc = s_get(ex, in, in->in[0], RV_STAGE, &st)) ||
            (rc = s_get(ex, in, in->in[1], RV_LOOP, &loop)))
            return rc;
        rc = in->op == KL_OP_COMPUTE_AT
                 ? kl_sched_compute_at(s, (int)st, (int)loop, e)
                 : kl_sched_reverse_compute_at(s, (int)st, (int)loop, e);
        break;
    case KL_OP_WINOGRAD:
        if (in->nints != 1 || in->ints[0] < 1 || in->ints[0] > 8)
            return s_err(ex, in, "needs m, the output tile");
        rc = kl_sched_winograd(s, (int)in->ints[0], e);
        break;
    case KL_OP_TENSORIZE:
        if (in->nin != 1 || in->nstrs < 1)
            return s_err(ex, in, "needs a loop and an intrinsic");
        if ((rc = s_get(ex, in, in->in[0], RV_LOOP, &loop)))
            return rc;
        rc = kl_sched_tensorize(s, (int)loop, in->strs[0], e);
        break;
    default:
        return s_err(ex, in, "not a primitive");
    }
    return rc ? s_err(ex, in, e) : KL_OK;
}

int kl_trace_apply(const kl_trace_t *t, kl_sched_t *s, kl_rng_t *rng,
                   kl_trace_t **executed, bool *rejected, char *err)
{
    kl_trace_t *run = kl_trace_clone(t);
    run->depth = 0;
    ex_t ex = {0};
    ex.s = s;
    ex.rng = rng;
    ex.err = err;
    ex.nrvs = kl_trace__insts_max_rv(run->insts, run->n) + 1;
    if (ex.nrvs > 1000000) {
        kl_trace_free(&run);
        return kl_seterr(err, KL_ERR_INVAL, "trace: RV numbers too large");
    }
    ex.rvs = kl_xcalloc((size_t)(ex.nrvs ? ex.nrvs : 1), sizeof(rv_t));
    int rc = s_run(&ex, run->insts, run->n);
    free(ex.rvs);
    if (rejected)
        *rejected = !rc && ex.rejected;
    if (!rc && !ex.rejected && executed)
        *executed = run;
    else
        kl_trace_free(&run);
    return rc;
}
