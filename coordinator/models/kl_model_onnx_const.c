/* kl_model_onnx_const.c - ONNX import: constants that are not
 * initializers (Constant nodes, views of a constant, shape arithmetic),
 * evaluated at import (the arithmetic on them: kl_model_onnx_fold.c),
 * Shape of a computed value; Squeeze / Unsqueeze of computed values. Its
 * rows come first: any node of constants is a constant. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* A Constant node: its tensor value. */
static int s_constant(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const KilnOnnx__AttributeProto *v = kl_onnx__attr(nd, "value");
    if (!v || !v->t)
        return kl_onnx__fail(c, nd, "a Constant without a tensor value");
    kl_onnx__add_const(c, nd->output[0], v->t, NULL);
    return KL_OK;
}

/* Identity, Cast to the same type, Reshape, Squeeze and Unsqueeze of a
 * constant: a constant (KL_ONNX__NEXT for other inputs). */
static int s_const_view(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const kl_onnx__tensor_t *t =
        nd->n_input ? kl_onnx__init(c, nd->input[0]) : NULL;
    if (!t)
        return KL_ONNX__NEXT;
    if (kl_onnx__is(nd, "Identity") ||
        (kl_onnx__is(nd, "Cast") &&
         kl_onnx__aint(nd, "to", 0) == t->data_type)) {
        kl_onnx__add_const(c, nd->output[0], t, NULL);
        return KL_OK;
    }
    bool re = kl_onnx__is(nd, "Reshape"), sq = kl_onnx__is(nd, "Squeeze"),
         un = kl_onnx__is(nd, "Unsqueeze");
    if (!re && !sq && !un)
        return KL_ONNX__NEXT;
    int64_t ax[8], d[8];
    int n = re ? (nd->n_input > 1 && kl_onnx__init(c, nd->input[1])
                      ? kl_onnx__ints_of(kl_onnx__init(c, nd->input[1]), ax, 8)
                      : -1)
               : kl_onnx__axes(c, nd, ax);
    int r = (int)t->n_dims, nd_out = 0;
    if (n < 0)
        return kl_onnx__fail(c, nd, "the shape or axes must be constant int64");
    if (re) {
        int64_t known = 1, infer = -1;
        for (int i = 0; i < n; i++) {
            d[i] = ax[i] == 0 && i < r ? t->dims[i] : ax[i];
            if (d[i] < 0)
                infer = i;
            else
                known *= d[i];
        }
        if (infer >= 0)
            d[infer] = known ? kl_onnx__numel(t) / known : 0;
        nd_out = n;
    } else if (sq) {
        for (int i = 0; i < r; i++) {
            bool drop = n == 0 && t->dims[i] == 1;
            for (int k = 0; k < n; k++)
                drop |= ax[k] == i || ax[k] + r == i;
            if (!drop)
                d[nd_out++] = t->dims[i];
        }
    } else {
        int ro = r + n, src = 0;
        if (ro > 8)
            return kl_onnx__fail(c, nd, "more than 8 dimensions");
        for (int i = 0; i < ro; i++) {
            bool ins = false;
            for (int k = 0; k < n; k++)
                ins |= ax[k] == i || ax[k] + ro == i;
            d[i] = ins ? 1 : t->dims[src++];
        }
        nd_out = ro;
    }
    kl_onnx__tensor_t *o = kl_xmalloc(sizeof(*o));
    *o = *t;
    o->n_dims = (size_t)nd_out;
    o->dims = kl_xmalloc(8 * sizeof(int64_t));
    memcpy(o->dims, d, (size_t)nd_out * sizeof(int64_t));
    if (kl_onnx__numel(o) != kl_onnx__numel(t))
        for (o->n_dims = 0; o->n_dims < t->n_dims; o->n_dims++)
            o->dims[o->n_dims] = t->dims[o->n_dims];
    kl_onnx__add_const(c, nd->output[0], o, o);
    return KL_OK;
}

/* The shape of the value kiln names `kiln` as the graph parser infers it
 * from the lines so far; false when it cannot. */
bool kl_onnx__shape(const kl_onnx__ctx_t *c, const char *kiln, int64_t *d,
                    int *n)
{
    kl_buf_t b = {0};
    kl_mgraph_t g;
    char err[KL_ERRMSG_LEN];
    bool ok = false;
    kl_onnx__lines_text(c, &b, true);
    if (b.data && kl_mgraph_parse(b.data, c->src, &g, err) == KL_OK) {
        for (int i = 0; i < g.n && !ok; i++)
            if (strcmp(g.nodes[i].name, kiln) == 0) {
                *n = g.nodes[i].ndim;
                memcpy(d, g.nodes[i].shape, sizeof(g.nodes[i].shape));
                ok = true;
            }
        kl_mgraph_free(&g);
    }
    kl_buf_free(&b);
    return ok;
}

#define S_MAXC 64 /* values in a constant kiln evaluates */

/* A constant of kiln's own: n values v of ONNX type (1 float, 7 int64). */
static void s_new_const(kl_onnx__ctx_t *c, const char *name, int type,
                        const int64_t *dims, int nd, const double *v, int n)
{
    kl_onnx__tensor_t *t = kl_xmalloc(sizeof(*t));
    kiln_onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)nd;
    t->dims = kl_xmalloc(8 * sizeof(int64_t));
    memcpy(t->dims, dims, (size_t)nd * sizeof(int64_t));
    void *data;
    if (type == 7) {
        int64_t *x = kl_xmalloc((size_t)(n ? n : 1) * sizeof(int64_t));
        for (int i = 0; i < n; i++)
            x[i] = (int64_t)v[i];
        t->n_int64_data = (size_t)n;
        t->int64_data = x;
        data = x;
    } else {
        float *x = kl_xmalloc((size_t)(n ? n : 1) * sizeof(float));
        for (int i = 0; i < n; i++)
            x[i] = (float)v[i];
        t->n_float_data = (size_t)n;
        t->float_data = x;
        data = x;
    }
    kl_onnx__add_const(c, name, t, t);
    c->consts[c->nconsts - 1].data = data;
}

/* The values of a small constant (int64 or float) as doubles: their count,
 * -1 when name is not one. */
int kl_onnx__nums(kl_onnx__ctx_t *c, const char *name, double *v, int *type,
                  int64_t *dims, int *nd)
{
    const kl_onnx__tensor_t *t = name && *name ? kl_onnx__init(c, name) : NULL;
    if (!t || kl_onnx__numel(t) > S_MAXC || t->n_dims > 8 ||
        (t->data_type != 1 && t->data_type != 7))
        return -1;
    *type = t->data_type;
    *nd = (int)t->n_dims;
    if (t->n_dims) /* a scalar's dims may be NULL */
        memcpy(dims, t->dims, t->n_dims * sizeof(int64_t));
    int64_t n = kl_onnx__numel(t);
    if (t->data_type == 7) {
        int64_t x[S_MAXC];
        if (kl_onnx__ints_of(t, x, S_MAXC) != n)
            return -1;
        for (int64_t i = 0; i < n; i++)
            v[i] = (double)x[i];
        return (int)n;
    }
    float *f;
    char keep[KL_ERRMSG_LEN];
    memcpy(keep, c->err ? c->err : "", c->err ? KL_ERRMSG_LEN : 1);
    int rc = kl_onnx__floats(c, t, name, &f, &n);
    if (c->err)
        memcpy(c->err, keep, KL_ERRMSG_LEN);
    if (rc)
        return -1;
    for (int64_t i = 0; i < n; i++)
        v[i] = f[i];
    free(f);
    return (int)n;
}

/* Shape of a computed value (as PyTorch's TorchScript exporter writes
 * shape arithmetic): a constant of its inferred dims (start, end as
 * ONNX's); the arithmetic on such constants is kl_model_onnx_fold.c's.
 * KL_ONNX__NEXT for a constant input (folded there too). */
static int s_const_shape(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    double r[KL_MODEL_MAX_DIMS];
    int64_t dr[1];
    int n = 0;
    const kl_onnx__val_t *v =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    int64_t d[KL_MODEL_MAX_DIMS];
    int k;
    if (!v || v->bad || !kl_onnx__shape(c, v->kiln, d, &k))
        return KL_ONNX__NEXT;
    int64_t st = kl_onnx__aint(nd, "start", 0),
            en = kl_onnx__aint(nd, "end", k);
    st = st < 0 ? st + k : st;
    en = en < 0 ? en + k : en > k ? k : en;
    for (int64_t i = st < 0 ? 0 : st; i < en; i++)
        r[n++] = (double)d[i];
    dr[0] = n;
    s_new_const(c, nd->output[0], 7, dr, 1, r, n);
    return KL_OK;
}

/* Unsqueeze and Squeeze of a computed value: a reshape to its new shape. */
static int s_squeeze(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    if (!x)
        return rc;
    int64_t d[KL_MODEL_MAX_DIMS], o[KL_MODEL_MAX_DIMS], ax[8];
    int r, n = kl_onnx__axes(c, nd, ax), no = 0;
    bool un = kl_onnx__is(nd, "Unsqueeze");
    if (!kl_onnx__shape(c, x, d, &r))
        return kl_onnx__fail(c, nd, "the input's shape is not known");
    if (n < 0 || (un && n == 0))
        return kl_onnx__fail(c, nd, "the axes must be constant int64");
    int ro = un ? r + n : r;
    if (ro > KL_MODEL_MAX_DIMS)
        return kl_onnx__fail(c, nd, "more than 8 dimensions");
    for (int i = 0, src = 0; i < ro; i++) {
        bool hit = n == 0 && !un && d[i] == 1;
        for (int k = 0; k < n; k++)
            hit |= ax[k] == i || ax[k] + ro == i;
        if (un)
            o[no++] = hit ? 1 : d[src++];
        else if (hit && d[i] != 1)
            return kl_onnx__fail(c, nd, "squeezes an axis that is not 1");
        else if (!hit)
            o[no++] = d[i];
    }
    kl_onnx__line_t *l = kl_onnx__line(c, nd, "reshape");
    kl_buf_printf(&l->args, "%s shape=", x);
    for (int i = 0; i < no; i++)
        kl_buf_printf(&l->args, "%s%lld", i ? "x" : "", (long long)o[i]);
    if (no == 0)
        kl_buf_puts(&l->args, "1");
    return KL_OK;
}

const kl_onnx__op_t kl_onnx__const_ops[] = {
    {"Constant", s_constant, 0},
    /* views of a constant */
    {"Identity", s_const_view, 0},
    {"Cast", s_const_view, 0},
    {"Reshape", s_const_view, 0},
    {"Squeeze", s_const_view, 0},
    {"Unsqueeze", s_const_view, 0},
    /* the shape of a computed value */
    {"Shape", s_const_shape, 0},
    /* of a computed value */
    {"Squeeze", s_squeeze, 0},
    {"Unsqueeze", s_squeeze, 0},
    {NULL, NULL, 0},
};
