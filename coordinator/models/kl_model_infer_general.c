/* kl_model_infer_general.c - the general ops' semantics (kl_graph.h,
 * kl_mop_is_general; docs/models.md): numpy's broadcasting, and each
 * op's attributes checked against its inputs and its output shape, as the
 * parser reads the layer (kl_model_infer.c calls it; add comes here too,
 * a same-shape add being the case that does not broadcast). */
#include "kl_model_parse_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"

static void s_shape(const kl_mnode_t *nd, char out[160])
{
    kl_mgraph__shape_text(nd->shape, nd->ndim, out, 160);
}

static bool s_same(const int64_t *a, int na, const int64_t *b, int nb)
{
    return na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

/* The broadcast of shapes a (na dims) and b (nb) into out (*no dims):
 * aligned at the right, each dim equal or 1, the larger kept; false when
 * they do not broadcast. out may be a. */
static bool s_bshape(const int64_t *a, int na, const int64_t *b, int nb,
                     int64_t *out, int *no)
{
    int64_t r[KL_MODEL_MAX_DIMS];
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < na ? a[na - 1 - i] : 1, y = i < nb ? b[nb - 1 - i] : 1;
        if (x != y && x != 1 && y != 1)
            return false;
        r[n - 1 - i] = x > y ? x : y;
    }
    memcpy(out, r, (size_t)n * sizeof *r);
    *no = n;
    return true;
}

/* add, the binary ops and where: the broadcast of the inputs' shapes;
 * bcast when one of them differs from it. */
static int s_broadcast(kl_mgraph__ctx_t *c, kl_mnode_t *nd)
{
    const kl_mgraph_t *g = c->g;
    bool ok = true;
    nd->ndim = 0;
    for (int k = 0; k < nd->nin && ok; k++) {
        const kl_mnode_t *x = &g->nodes[nd->in[k]];
        ok = s_bshape(nd->shape, nd->ndim, x->shape, x->ndim, nd->shape,
                      &nd->ndim);
    }
    if (!ok) {
        char list[3 * 170] = "";
        size_t n = 0;
        for (int k = 0; k < nd->nin; k++) {
            char sh[160];
            s_shape(&g->nodes[nd->in[k]], sh);
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s",
                                  !k                 ? ""
                                  : k == nd->nin - 1 ? " and "
                                                     : ", ",
                                  sh);
        }
        return kl_mgraph__err(c, "layer '%s': %s: shapes %s do not broadcast",
                              nd->name, kl_mop_name(nd->op), list);
    }
    for (int k = 0; k < nd->nin; k++) {
        const kl_mnode_t *x = &g->nodes[nd->in[k]];
        nd->bcast =
            nd->bcast || !s_same(x->shape, x->ndim, nd->shape, nd->ndim);
    }
    return KL_OK;
}

/* An axis= of input x (0 <= axis < its dims). */
static int s_axis(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                  const kl_mnode_t *x)
{
    int rc = kl_mgraph__int(c, from, nd, "axis", -1, 0, &nd->axis);
    if (!rc && nd->axis >= x->ndim)
        rc = kl_mgraph__err(c,
                            "layer '%s': %s: axis=%lld is past the %d dims "
                            "of '%s'",
                            nd->name, kl_mop_name(nd->op), (long long)nd->axis,
                            x->ndim, x->name);
    return rc;
}

/* concat of A and B along axis: the same dims elsewhere. */
static int s_concat(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *a = &c->g->nodes[nd->in[0]], *b = &c->g->nodes[nd->in[1]];
    int rc = s_axis(c, from, nd, a);
    if (rc)
        return rc;
    bool ok = a->ndim == b->ndim;
    for (int k = 0; ok && k < a->ndim; k++)
        ok = k == nd->axis || a->shape[k] == b->shape[k];
    if (!ok) {
        char sa[160], sb[160];
        s_shape(a, sa);
        s_shape(b, sb);
        return kl_mgraph__err(c,
                              "layer '%s': concat: '%s' (%s) and '%s' (%s) "
                              "differ outside axis %lld",
                              nd->name, a->name, sa, b->name, sb,
                              (long long)nd->axis);
    }
    nd->ndim = a->ndim;
    memcpy(nd->shape, a->shape, sizeof nd->shape);
    nd->shape[nd->axis] += b->shape[nd->axis];
    return KL_OK;
}

/* slice along axis: start <= end <= dim, step >= 1, not empty. */
static int s_slice(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                   const kl_mnode_t *x)
{
    int rc = s_axis(c, from, nd, x)
                 ?: kl_mgraph__int(c, from, nd, "start", -1, 0, &nd->start)
                 ?: kl_mgraph__int(c, from, nd, "end", -1, 0, &nd->end)
                 ?: kl_mgraph__int(c, from, nd, "step", 1, 1, &nd->step);
    if (rc)
        return rc;
    int64_t dim = x->shape[nd->axis];
    if (nd->end > dim)
        return kl_mgraph__err(c,
                              "layer '%s': slice: end=%lld is past dim %lld "
                              "(%lld)",
                              nd->name, (long long)nd->end, (long long)nd->axis,
                              (long long)dim);
    if (nd->start >= nd->end)
        return kl_mgraph__err(c,
                              "layer '%s': slice: start=%lld end=%lld is "
                              "empty (an empty tensor is an error)",
                              nd->name, (long long)nd->start,
                              (long long)nd->end);
    nd->ndim = x->ndim;
    memcpy(nd->shape, x->shape, sizeof nd->shape);
    nd->shape[nd->axis] = (nd->end - nd->start + nd->step - 1) / nd->step;
    return KL_OK;
}

/* gather along axis: indices=i,j,... each in the axis. */
static int s_gather(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                    const kl_mnode_t *x)
{
    int rc = s_axis(c, from, nd, x);
    const char *v = rc ? NULL : kl_mgraph__attr(c, from, "indices");
    if (rc || !v)
        return rc
                   ?: kl_mgraph__err(
                          c, "layer '%s': gather needs indices=", nd->name);
    int64_t dim = x->shape[nd->axis];
    for (const char *p = v; *p;) {
        char *end;
        errno = 0;
        long long i = strtoll(p, &end, 10);
        if (end == p || errno || *p == '+' || *p == '-' ||
            (*end && *end != ',') || (*end == ',' && !end[1]))
            return kl_mgraph__err(c,
                                  "layer '%s': bad indices '%s' (numbers "
                                  "separated by ',')",
                                  nd->name, v);
        if (nd->nidx == KL_MODEL_MAX_GATHER)
            return kl_mgraph__err(c, "layer '%s': gather: more than %d indices",
                                  nd->name, KL_MODEL_MAX_GATHER);
        if (i >= dim)
            return kl_mgraph__err(c,
                                  "layer '%s': gather: index %lld is past "
                                  "dim %lld (%lld)",
                                  nd->name, i, (long long)nd->axis,
                                  (long long)dim);
        nd->idx[nd->nidx++] = i;
        p = *end ? end + 1 : end;
    }
    nd->ndim = x->ndim;
    memcpy(nd->shape, x->shape, sizeof nd->shape);
    nd->shape[nd->axis] = nd->nidx;
    return KL_OK;
}

/* expand to shape=: the broadcast of the input's shape and it. */
static int s_expand(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                    const kl_mnode_t *x)
{
    const char *v = kl_mgraph__attr(c, from, "shape");
    if (!v)
        return kl_mgraph__err(c, "layer '%s': expand needs shape=", nd->name);
    int64_t d[KL_MODEL_MAX_DIMS];
    int n;
    int rc = kl_mgraph__dims(c, "shape", v, 'x', false, d, &n);
    if (rc)
        return rc;
    if (!s_bshape(x->shape, x->ndim, d, n, nd->shape, &nd->ndim)) {
        char sx[160];
        s_shape(x, sx);
        return kl_mgraph__err(
            c, "layer '%s': expand: shapes %s and %s do not broadcast",
            nd->name, sx, v);
    }
    return KL_OK;
}

/* reduce_mean, reduce_sum over axes=a,b (no repeats) [keepdims=1]. */
static int s_reduce(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                    const kl_mnode_t *x)
{
    const char *v = kl_mgraph__attr(c, from, "axes");
    if (!v)
        return kl_mgraph__err(c, "layer '%s': %s needs axes=", nd->name,
                              kl_mop_name(nd->op));
    int64_t d[KL_MODEL_MAX_DIMS];
    int n;
    int rc =
        kl_mgraph__dims(c, "axes", v, ',', true, d, &n)
            ?: kl_mgraph__flag(c, from, nd, "keepdims", true, &nd->keepdims);
    for (int k = 0; !rc && k < n; k++) {
        if (d[k] >= x->ndim)
            rc = kl_mgraph__err(c,
                                "layer '%s': %s: axis %lld is past the %d "
                                "dims of '%s'",
                                nd->name, kl_mop_name(nd->op), (long long)d[k],
                                x->ndim, x->name);
        else if (nd->axes & 1u << d[k])
            rc = kl_mgraph__err(c, "layer '%s': %s: axis %lld given twice",
                                nd->name, kl_mop_name(nd->op), (long long)d[k]);
        else
            nd->axes |= 1u << d[k];
    }
    if (rc)
        return rc;
    nd->ndim = 0;
    for (int k = 0; k < x->ndim; k++)
        if (!(nd->axes & 1u << k))
            nd->shape[nd->ndim++] = x->shape[k];
        else if (nd->keepdims)
            nd->shape[nd->ndim++] = 1;
    if (nd->ndim == 0)
        nd->shape[nd->ndim++] = 1;
    return KL_OK;
}

/* gelu [approximate=none|tanh]. */
static int s_gelu(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd)
{
    const char *v = kl_mgraph__attr(c, from, "approximate");
    nd->gelu_tanh = v && !strcmp(v, "tanh");
    if (v && !nd->gelu_tanh && strcmp(v, "none"))
        return kl_mgraph__err(
            c, "layer '%s': bad value '%s' for approximate (none or tanh)",
            nd->name, v);
    return KL_OK;
}

int kl_mgraph__infer_general(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *x = nd->nin ? &c->g->nodes[nd->in[0]] : NULL;
    if (nd->op == KL_MOP_ADD || nd->op == KL_MOP_WHERE ||
        kl_mop_is_binary(nd->op))
        return s_broadcast(c, nd);
    if (nd->op == KL_MOP_GELU || kl_mop_is_unary(nd->op)) {
        nd->ndim = x->ndim;
        memcpy(nd->shape, x->shape, sizeof nd->shape);
        return nd->op == KL_MOP_GELU ? s_gelu(c, from, nd) : KL_OK;
    }
    switch (nd->op) {
    case KL_MOP_CONST: {
        const char *v = kl_mgraph__attr(c, from, "shape");
        if (!v)
            return kl_mgraph__err(c,
                                  "layer '%s': const needs shape=", nd->name);
        return kl_mgraph__dims(c, "shape", v, 'x', false, nd->shape, &nd->ndim);
    }
    case KL_MOP_CONCAT:
        return s_concat(c, from, nd);
    case KL_MOP_SLICE:
        return s_slice(c, from, nd, x);
    case KL_MOP_GATHER:
        return s_gather(c, from, nd, x);
    case KL_MOP_EXPAND:
        return s_expand(c, from, nd, x);
    case KL_MOP_REDUCE_MEAN:
    case KL_MOP_REDUCE_SUM:
        return s_reduce(c, from, nd, x);
    default:
        return kl_mgraph__err(c, "layer '%s': internal: op %d", nd->name,
                              (int)nd->op);
    }
}
