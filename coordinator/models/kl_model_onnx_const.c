/* kl_model_onnx_const.c - ONNX import: constants that are not
 * initializers (Constant nodes, views of a constant, shape arithmetic),
 * evaluated at import; Squeeze / Unsqueeze of computed values. Its rows
 * come first: any node of constants is a constant. */
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

/* Shape arithmetic (as PyTorch's TorchScript exporter writes it): Shape of
 * a computed value, and Mod, Add, Sub, Mul, Div, Sqrt, Cast, Concat, Slice
 * and Gather of small constants are constants (KL_ONNX__NEXT for other
 * inputs). */
static int s_const_eval(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    double a[S_MAXC], b[S_MAXC], r[S_MAXC];
    int64_t da[8], db[8], dr[8];
    int ta = 7, tb = 7, na = 0, nb = 0, nra = 0, nrb = 0, n = 0, nd_r = 1;
    if (kl_onnx__is(nd, "Shape")) {
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
    /* the other ops of its rows in kl_onnx__const_ops */
    if (nd->n_input < 1)
        return KL_ONNX__NEXT;
    for (size_t k = 0; k < nd->n_input; k++)
        if (nd->input[k][0] && !kl_onnx__init(c, nd->input[k]))
            return KL_ONNX__NEXT; /* not all constant */
    na = kl_onnx__nums(c, nd->input[0], a, &ta, da, &nra);
    if (na < 0)
        return KL_ONNX__NEXT;
    if (nd->n_input > 1 && !kl_onnx__is(nd, "Concat") &&
        (nb = kl_onnx__nums(c, nd->input[1], b, &tb, db, &nrb)) < 0)
        return KL_ONNX__NEXT;
    int type = ta;
    memcpy(dr, da, sizeof(da));
    nd_r = nra;
    if (kl_onnx__is(nd, "Sqrt")) {
        for (n = 0; n < na; n++)
            r[n] = sqrt(a[n]);
    } else if (kl_onnx__is(nd, "Cast")) {
        type = (int)kl_onnx__aint(nd, "to", 0);
        if (type != 1 && type != 7)
            return KL_ONNX__NEXT;
        for (n = 0; n < na; n++)
            r[n] = type == 7 ? trunc(a[n]) : a[n];
    } else if (kl_onnx__is(nd, "Concat")) {
        for (size_t k = 0; k < nd->n_input; k++) {
            double x[S_MAXC];
            int64_t dx[8];
            int tx, nx, m = kl_onnx__nums(c, nd->input[k], x, &tx, dx, &nx);
            if (m < 0 || nx != 1 || n + m > S_MAXC)
                return KL_ONNX__NEXT;
            memcpy(r + n, x, (size_t)m * sizeof(double));
            n += m;
        }
        dr[0] = n;
        nd_r = 1;
    } else if (kl_onnx__is(nd, "Slice")) {
        /* data, starts, ends[, axes[, steps]]: 1-D data only */
        double e[S_MAXC], ax[S_MAXC], stp[S_MAXC];
        int64_t dd[8];
        int tt, ndd;
        bool has_ax = nd->n_input > 3 && nd->input[3][0],
             has_st = nd->n_input > 4 && nd->input[4][0];
        if (nra != 1 || nb != 1 || nd->n_input < 3 ||
            kl_onnx__nums(c, nd->input[2], e, &tt, dd, &ndd) != 1 ||
            (has_ax &&
             (kl_onnx__nums(c, nd->input[3], ax, &tt, dd, &ndd) != 1 ||
              (ax[0] != 0 && ax[0] != -1))) ||
            (has_st &&
             (kl_onnx__nums(c, nd->input[4], stp, &tt, dd, &ndd) != 1 ||
              stp[0] != 1)))
            return KL_ONNX__NEXT;
        double st = b[0] < 0 ? b[0] + na : b[0],
               en = e[0] < 0 ? e[0] + na : e[0];
        st = st < 0 ? 0 : st > na ? na : st;
        en = en < 0 ? 0 : en > na ? na : en;
        for (int i = (int)st; i < (int)en; i++)
            r[n++] = a[i];
        dr[0] = n;
    } else if (kl_onnx__is(nd, "Gather")) {
        if (kl_onnx__aint(nd, "axis", 0) != 0 || nra != 1)
            return KL_ONNX__NEXT;
        for (n = 0; n < nb; n++) {
            int64_t i = (int64_t)b[n] < 0 ? (int64_t)b[n] + na : (int64_t)b[n];
            if (i < 0 || i >= na)
                return kl_onnx__fail(c, nd, "an index outside the constant");
            r[n] = a[i];
        }
        nd_r = nrb;
        memcpy(dr, db, sizeof(db));
    } else { /* Mod, Add, Sub, Mul, Div: a scalar broadcasts */
        if (nb != na && nb != 1 && na != 1)
            return KL_ONNX__NEXT;
        if (na == 1 && nb > 1) {
            memcpy(dr, db, sizeof(db));
            nd_r = nrb;
        }
        n = na > nb ? na : nb;
        for (int i = 0; i < n; i++) {
            double x = a[na == 1 ? 0 : i], y = b[nb == 1 ? 0 : i];
            if ((kl_onnx__is(nd, "Mod") ||
                 (kl_onnx__is(nd, "Div") && type == 7)) &&
                y == 0)
                return kl_onnx__fail(c, nd, "an integer division by zero");
            if (kl_onnx__is(nd, "Mod")) /* the sign of the divisor (fmod=0) */
                r[i] = x - floor(x / y) * y;
            else if (kl_onnx__is(nd, "Add"))
                r[i] = x + y;
            else if (kl_onnx__is(nd, "Sub"))
                r[i] = x - y;
            else if (kl_onnx__is(nd, "Mul"))
                r[i] = x * y;
            else
                r[i] = type == 7 ? trunc(x / y) : x / y;
        }
    }
    s_new_const(c, nd->output[0], type, dr, nd_r, r, n);
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
    /* shape arithmetic */
    {"Shape", s_const_eval, 0},
    {"Mod", s_const_eval, 0},
    {"Add", s_const_eval, 0},
    {"Sub", s_const_eval, 0},
    {"Mul", s_const_eval, 0},
    {"Div", s_const_eval, 0},
    {"Sqrt", s_const_eval, 0},
    {"Cast", s_const_eval, 0},
    {"Concat", s_const_eval, 0},
    {"Slice", s_const_eval, 0},
    {"Gather", s_const_eval, 0},
    /* of a computed value */
    {"Squeeze", s_squeeze, 0},
    {"Unsqueeze", s_squeeze, 0},
    {NULL, NULL, 0},
};
