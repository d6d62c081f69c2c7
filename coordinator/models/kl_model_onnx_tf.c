/* kl_model_onnx_tf.c - ONNX import: patterns a transformer's export spells
 * out in several nodes: GELU's Erf form and its tanh form, layer norm from
 * ReduceMean, a packed attention projection split by Gathers or by a
 * Split. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* Constant t is one float within 1e-4 (relative) of want? */
static bool s_scalar_is(kl_onnx__ctx_t *c, const char *name, double want)
{
    const kl_onnx__tensor_t *t = kl_onnx__init(c, name);
    float *v = NULL;
    int64_t n = 0;
    char keep[KL_ERRMSG_LEN];
    if (!t || kl_onnx__numel(t) != 1)
        return false;
    memcpy(keep, c->err ? c->err : "", c->err ? KL_ERRMSG_LEN : 1);
    bool ok = kl_onnx__floats(c, t, name, &v, &n) == KL_OK &&
              fabs(v[0] - want) <= 1e-4 * fabs(want);
    if (c->err) /* a failed read is just no match */
        memcpy(c->err, keep, KL_ERRMSG_LEN);
    free(v);
    return ok;
}

/* The other input of two-input node nd, given one of them; NULL when nd
 * does not read `one`. */
const char *kl_onnx__other(const kl_onnx__node_t *nd, const char *one)
{
    if (nd->n_input != 2)
        return NULL;
    if (strcmp(nd->input[0], one) == 0)
        return nd->input[1];
    if (strcmp(nd->input[1], one) == 0)
        return nd->input[0];
    return NULL;
}

/* The node that alone reads node i's output and is an `op`, or NULL. */
static const kl_onnx__node_t *s_next(const kl_onnx__ctx_t *c,
                                     const kl_onnx__node_t *nd, const char *op,
                                     int *idx)
{
    int k = nd->n_output ? kl_onnx__reader(c, nd->output[0]) : -1;
    *idx = k;
    return k >= 0 && kl_onnx__is(c->g->node[k], op) ? c->g->node[k] : NULL;
}

/* GELU spelled out from Div nd: x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5
 * (or * 0.5, then * x): a gelu layer. *matched false when it is not. */
int kl_onnx__gelu_erf(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      bool *matched)
{
    *matched = false;
    int ie, ia, i1, i2;
    const char *x = nd->input[0];
    const kl_onnx__node_t *e = s_next(c, nd, "Erf", &ie);
    const kl_onnx__node_t *a = e ? s_next(c, e, "Add", &ia) : NULL;
    const char *one = a ? kl_onnx__other(a, e->output[0]) : NULL;
    const kl_onnx__node_t *m1 =
        one && s_scalar_is(c, one, 1.0) ? s_next(c, a, "Mul", &i1) : NULL;
    const char *o1 = m1 ? kl_onnx__other(m1, a->output[0]) : NULL;
    const kl_onnx__node_t *m2 = o1 ? s_next(c, m1, "Mul", &i2) : NULL;
    const char *o2 = m2 ? kl_onnx__other(m2, m1->output[0]) : NULL;
    if (!o2 || !s_scalar_is(c, nd->input[1], sqrt(2.0)) ||
        !((strcmp(o1, x) == 0 && s_scalar_is(c, o2, 0.5)) ||
          (strcmp(o2, x) == 0 && s_scalar_is(c, o1, 0.5))))
        return KL_OK;
    int rc = KL_OK;
    const char *xk = kl_onnx__in(c, nd, 0, &rc);
    if (!xk)
        return rc;
    kl_onnx__line_t *l = kl_onnx__line(c, m2, "gelu");
    kl_buf_puts(&l->args, xk);
    free(l->in0);
    l->in0 = kl_xstrdup(x);
    c->skip[ie] = c->skip[ia] = c->skip[i1] = c->skip[i2] = true;
    *matched = true;
    return KL_OK;
}

/* ---- GELU's tanh form ---- */

/* The node whose output 0 is name, or -1. */
static int s_producer(const kl_onnx__ctx_t *c, const char *name)
{
    for (size_t i = 0; name && *name && i < c->g->n_node; i++)
        if (c->g->node[i]->n_output && !strcmp(c->g->node[i]->output[0], name))
            return (int)i;
    return -1;
}

/* Node i is an `op` of two inputs, one a scalar constant within 1e-4 of
 * want: the other input, else NULL. */
static const char *s_by_const(kl_onnx__ctx_t *c, int i, const char *op,
                              double want)
{
    const kl_onnx__node_t *nd = i >= 0 ? c->g->node[i] : NULL;
    if (!nd || !kl_onnx__is(nd, op) || nd->n_input != 2)
        return NULL;
    for (int k = 0; k < 2; k++)
        if (s_scalar_is(c, nd->input[k], want))
            return nd->input[1 - k];
    return NULL;
}

/* A value read by one node only. */
static bool s_sole(const kl_onnx__ctx_t *c, const char *name)
{
    return kl_onnx__readers(c, name) == 1;
}

/* Value p is x cubed: Pow(x, 3), x * (x * x) or (x * x) * x, the square
 * read only there; its nodes go to at[*n]. */
static bool s_cube(kl_onnx__ctx_t *c, const char *p, const char *x, int *at,
                   int *n)
{
    int i = s_producer(c, p);
    const kl_onnx__node_t *nd = i >= 0 ? c->g->node[i] : NULL;
    if (!nd || nd->n_input != 2 || !s_sole(c, p))
        return false;
    at[(*n)++] = i;
    if (kl_onnx__is(nd, "Pow"))
        return !strcmp(nd->input[0], x) && s_scalar_is(c, nd->input[1], 3.0);
    const char *sq = kl_onnx__is(nd, "Mul") ? kl_onnx__other(nd, x) : NULL;
    int j = sq ? s_producer(c, sq) : -1;
    const kl_onnx__node_t *m = j >= 0 ? c->g->node[j] : NULL;
    if (!m || !kl_onnx__is(m, "Mul") || m->n_input != 2 || !s_sole(c, sq) ||
        strcmp(m->input[0], x) || strcmp(m->input[1], x))
        return false;
    at[(*n)++] = j;
    return true;
}

/* From Tanh node ti: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as
 * PyTorch's exporters write GELU(approximate='tanh') before opset 20 (the
 * scalars on either side; 0.5 times x first, or times x last, or times
 * (1 + tanh) then x, as the dynamo exporter writes it). Returns the last
 * node (its output is the GELU's) and *x, the input; the pattern's nodes
 * in at[*n]. -1 when it is not that. */
static int s_gelu_tanh_at(kl_onnx__ctx_t *c, int ti, const char **x, int *at,
                          int *n)
{
    const kl_onnx__node_t *t = c->g->node[ti];
    *n = 0;
    at[(*n)++] = ti;
    int im = t->n_input == 1 ? s_producer(c, t->input[0]) : -1;
    const char *u = im >= 0 && s_sole(c, t->input[0])
                        ? s_by_const(c, im, "Mul", 0.7978845608028654)
                        : NULL;
    int ia = u && s_sole(c, u) ? s_producer(c, u) : -1;
    const kl_onnx__node_t *a = ia >= 0 ? c->g->node[ia] : NULL;
    if (!a || !kl_onnx__is(a, "Add") || a->n_input != 2)
        return -1;
    at[(*n)++] = im;
    at[(*n)++] = ia;
    bool found = false;
    for (int k = 0; k < 2 && !found; k++) {
        int keep = *n, iv = s_producer(c, a->input[1 - k]);
        const char *p = s_sole(c, a->input[1 - k])
                            ? s_by_const(c, iv, "Mul", 0.044715)
                            : NULL;
        *x = a->input[k];
        at[(*n)++] = iv;
        found = p && s_cube(c, p, *x, at, n);
        if (!found)
            *n = keep;
    }
    int k1 = found && s_sole(c, t->output[0]) ? kl_onnx__reader(c, t->output[0])
                                              : -1;
    if (k1 < 0 || !s_by_const(c, k1, "Add", 1.0))
        return -1;
    at[(*n)++] = k1;
    const char *w = c->g->node[k1]->output[0];
    int k2 = s_sole(c, w) ? kl_onnx__reader(c, w) : -1;
    const kl_onnx__node_t *m = k2 >= 0 ? c->g->node[k2] : NULL;
    const char *o = m && kl_onnx__is(m, "Mul") ? kl_onnx__other(m, w) : NULL;
    if (!o)
        return -1;
    if (!strcmp(o, *x) || s_scalar_is(c, o, 0.5)) {
        /* x * w then * 0.5, or 0.5 * w then * x */
        at[(*n)++] = k2;
        int k3 =
            s_sole(c, m->output[0]) ? kl_onnx__reader(c, m->output[0]) : -1;
        if (k3 < 0)
            return -1;
        const char *r =
            strcmp(o, *x) ? kl_onnx__other(c->g->node[k3], m->output[0]) : NULL;
        if (r)
            return kl_onnx__is(c->g->node[k3], "Mul") && !strcmp(r, *x) ? k3
                                                                        : -1;
        return s_by_const(c, k3, "Mul", 0.5) ? k3 : -1;
    }
    int ih = s_sole(c, o) ? s_producer(c, o) : -1; /* (0.5 x) * w */
    const char *hx = s_by_const(c, ih, "Mul", 0.5);
    if (!hx || strcmp(hx, *x))
        return -1;
    at[(*n)++] = ih;
    return k2;
}

void kl_onnx__gelu_tanh_scan(kl_onnx__ctx_t *c)
{
    c->gelu_x = kl_xcalloc(c->g->n_node + 1, sizeof(char *));
    for (size_t i = 0; i < c->g->n_node; i++) {
        int at[16], n;
        const char *x;
        if (!kl_onnx__is(c->g->node[i], "Tanh"))
            continue;
        int last = s_gelu_tanh_at(c, (int)i, &x, at, &n);
        if (last < 0)
            continue;
        for (int k = 0; k < n; k++)
            c->skip[at[k]] = true;
        c->gelu_x[last] = x;
    }
}

int kl_onnx__gelu_tanh(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                       const char *x)
{
    const kl_onnx__val_t *v = kl_onnx__val(c, x);
    if (!v)
        return kl_onnx__fail(c, nd,
                             "GELU's tanh form of a value that is not "
                             "computed");
    char *xk = kl_xstrdup(v->kiln);
    kl_onnx__line_t *l = kl_onnx__line(c, nd, "gelu");
    kl_buf_printf(&l->args, "%s approximate=tanh", xk);
    free(l->in0);
    l->in0 = kl_xstrdup(x);
    free(xk);
    return KL_OK;
}

/* The int64 axes of nd: input 1 (opset 13 and 18 on) or the attribute. */
int kl_onnx__axes(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int64_t *ax)
{
    const KilnOnnx__AttributeProto *a = kl_onnx__attr(nd, "axes");
    if (a) {
        for (size_t i = 0; i < a->n_ints && i < 8; i++)
            ax[i] = a->ints[i];
        return a->n_ints > 8 ? -1 : (int)a->n_ints;
    }
    const kl_onnx__tensor_t *t =
        nd->n_input > 1 ? kl_onnx__init(c, nd->input[1]) : NULL;
    return t ? kl_onnx__ints_of(t, ax, 8) : nd->n_input > 1 ? -1 : 0;
}

/* ReduceMean over H and W with keepdims: global_avg_pool. */

/* A ReduceMean over the last axis (keepdims) of the node's input? */
static bool s_mean_last(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const char *x)
{
    int64_t ax[8];
    return nd && kl_onnx__is(nd, "ReduceMean") && nd->n_input >= 1 &&
           !strcmp(nd->input[0], x) && kl_onnx__axes(c, nd, ax) == 1 &&
           ax[0] == -1 && kl_onnx__aint(nd, "keepdims", 1);
}

/* Layer norm spelled out from ReduceMean nd: d = x - mean(x); d / sqrt(
 * mean(d^2) + eps), then optionally * gamma (+ beta): layer_norm eps=
 * (affine=1, gamma and beta its weight and bias). *matched false when it
 * is not that. */
static int s_layer_norm_parts(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                              bool *matched)
{
    const KilnOnnx__GraphProto *g = c->g;
    const char *x = nd->input[0];
    int is, ip = -1, iv, ie, iq, id = -1, im, ia;
    *matched = false;
    const kl_onnx__node_t *sub = s_next(c, nd, "Sub", &is);
    if (!sub || sub->n_input != 2 || strcmp(sub->input[0], x) ||
        strcmp(sub->input[1], nd->output[0]) ||
        kl_onnx__readers(c, sub->output[0]) != 2)
        return KL_OK;
    for (size_t i = 0; i < g->n_node; i++) { /* d's two readers */
        const kl_onnx__node_t *n = g->node[i];
        if (n->n_input == 2 && !strcmp(n->input[0], sub->output[0]) &&
            kl_onnx__is(n, "Pow") && s_scalar_is(c, n->input[1], 2.0))
            ip = (int)i;
        else if (n->n_input == 2 && !strcmp(n->input[0], sub->output[0]) &&
                 kl_onnx__is(n, "Div"))
            id = (int)i;
    }
    if (ip < 0 || id < 0)
        return KL_OK;
    const kl_onnx__node_t *var = s_next(c, g->node[ip], "ReduceMean", &iv);
    const kl_onnx__node_t *add =
        var && s_mean_last(c, var, g->node[ip]->output[0])
            ? s_next(c, var, "Add", &ie)
            : NULL;
    const char *eps = add ? kl_onnx__other(add, var->output[0]) : NULL;
    const kl_onnx__node_t *sq = eps ? s_next(c, add, "Sqrt", &iq) : NULL;
    double ev[1];
    int64_t dd[8];
    int et, end;
    if (!sq || kl_onnx__nums(c, eps, ev, &et, dd, &end) != 1 || !(ev[0] > 0) ||
        kl_onnx__reader(c, sq->output[0]) != id ||
        strcmp(g->node[id]->input[1], sq->output[0]))
        return KL_OK;
    /* The affine part: * gamma, then + beta, constants of one shape. */
    const kl_onnx__node_t *last = g->node[id],
                          *mul = s_next(c, last, "Mul", &im);
    const char *gam = mul ? kl_onnx__other(mul, last->output[0]) : NULL;
    const kl_onnx__tensor_t *gt = gam ? kl_onnx__init(c, gam) : NULL;
    const kl_onnx__node_t *badd = gt ? s_next(c, mul, "Add", &ia) : NULL;
    const char *bet = badd ? kl_onnx__other(badd, mul->output[0]) : NULL;
    const kl_onnx__tensor_t *bt = bet ? kl_onnx__init(c, bet) : NULL;
    if (!gt)
        mul = NULL;
    if (!bt || kl_onnx__numel(bt) != kl_onnx__numel(gt))
        badd = NULL, bt = NULL;
    last = badd ? badd : mul ? mul : last;
    int rc = KL_OK;
    const char *xk = kl_onnx__in(c, nd, 0, &rc);
    if (!xk)
        return rc;
    kl_onnx__line_t *l = kl_onnx__line_for(c, last->output[0], x, "layer_norm");
    kl_buf_printf(&l->args, "%s eps=%.9g%s", xk, ev[0], mul ? " affine=1" : "");
    if (mul) {
        l->nout = kl_onnx__numel(gt);
        l->params = true;
        l->bias = true;
        if (c->want && (rc = kl_onnx__floats(c, gt, gam, &l->w, &l->wn)))
            return rc;
        if (c->want && bt) {
            int64_t n;
            if ((rc = kl_onnx__floats(c, bt, bet, &l->b, &n)))
                return rc;
        } else if (c->want)
            l->b = kl_xcalloc((size_t)l->nout, sizeof(float));
        c->skip[im] = true;
        if (badd)
            c->skip[ia] = true;
    }
    c->skip[is] = c->skip[ip] = c->skip[iv] = c->skip[ie] = c->skip[iq] =
        c->skip[id] = true;
    *matched = true;
    return KL_OK;
}

/* ReduceMean over H and W with keepdims: global_avg_pool; over the last
 * axis, the start of a layer norm spelled out. */
static int s_reduce_mean(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int64_t ax[8];
    int n = kl_onnx__axes(c, nd, ax);
    bool m;
    int rc;
    if (s_mean_last(c, nd, nd->input[0]))
        return (rc = s_layer_norm_parts(c, nd, &m)) || m ? rc : KL_ONNX__NEXT;
    /* {2, 3} or {-2, -1}, in either order (4-D: the parser checks) */
    int64_t lo = n == 2 && ax[0] > ax[1] ? ax[1] : ax[0],
            hi = n == 2 && ax[0] > ax[1] ? ax[0] : ax[1];
    bool hw = n == 2 && ((lo == 2 && hi == 3) || (lo == -2 && hi == -1));
    if (!hw || !kl_onnx__aint(nd, "keepdims", 1))
        return KL_ONNX__NEXT; /* a reduce_mean layer (kl_model_onnx_ew.c) */
    return kl_onnx__simple(c, nd, "global_avg_pool");
}

/* LayerNormalization over the last axis: layer_norm eps= affine=1, its
 * weight the scale and its bias B (zeros when none). */
static int s_layer_norm(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int64_t axis = kl_onnx__aint(nd, "axis", -1);
    if (axis != -1)
        return kl_onnx__fail(c, nd, "only axis=-1 (the last axis)");
    const kl_onnx__tensor_t *sc =
        nd->n_input > 1 ? kl_onnx__init(c, nd->input[1]) : NULL;
    if (!sc)
        return kl_onnx__fail(c, nd, "the scale must be a constant");
    int rc = kl_onnx__simple(c, nd, "layer_norm");
    if (rc)
        return rc;
    kl_onnx__line_t *l = &c->lines[c->nlines - 1];
    kl_buf_printf(&l->args, " eps=%.9g affine=1",
                  (double)kl_onnx__afloat(nd, "epsilon", 1e-5f));
    l->nout = kl_onnx__numel(sc);
    return kl_onnx__weight_in(c, nd, sc, l, 1.0f)
               ?: kl_onnx__bias_in(c, nd, 2, l, 1.0f);
}

/* The dims of d other than 1, in order. */
static int s_non1(const int64_t *d, int n, int *at)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (d[i] != 1)
            at[k++] = i;
    return k;
}

/* Gather on axis 0, by a constant index, of a packed projection's output
 * seen through views (PyTorch's MultiheadAttention: Q, K and V in one
 * weight [H, G*D], its output viewed as [..., G, D] and G brought to the
 * front): a matmul N=D by the index's block of the weight and bias, and a
 * reshape to the Gather's shape. The packed layer and its views are
 * dropped. KL_ONNX__NEXT when the Gather is not that. */
/* A matmul for output out of x by columns [at, at + D) of packed line
 * li's [K,N] weight and the same part of its bias: one part of a packed
 * projection (by a Gather or a Split). */
static kl_onnx__line_t *s_part_matmul(kl_onnx__ctx_t *c, int li,
                                      const char *out, const char *x,
                                      int64_t at, int64_t D)
{
    char *pin0 = kl_xstrdup(c->lines[li].in0);
    kl_onnx__line_t *l = kl_onnx__line_for(c, out, pin0, "matmul");
    const kl_onnx__line_t *p = &c->lines[li]; /* lines moved */
    free(pin0);
    kl_buf_printf(&l->args, "%s N=%lld", x, (long long)D);
    l->params = l->colw = true;
    l->nout = D;
    l->bias = p->bias;
    if (p->w) {
        int64_t H = p->wn / p->nout;
        l->wn = H * D;
        l->w = kl_xmalloc((size_t)l->wn * sizeof(float));
        for (int64_t i = 0; i < H; i++)
            memcpy(l->w + i * D, p->w + i * p->nout + at,
                   (size_t)D * sizeof(float));
    }
    if (p->b) {
        l->b = kl_xmalloc((size_t)D * sizeof(float));
        memcpy(l->b, p->b + at, (size_t)D * sizeof(float));
    } else if (l->bias)
        kl_onnx__need_bias(c, l);
    return l;
}

static int s_gather_block(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const kl_onnx__tensor_t *it =
        nd->n_input == 2 ? kl_onnx__init(c, nd->input[1]) : NULL;
    const kl_onnx__val_t *v = kl_onnx__val(c, nd->input[0]);
    int64_t idx;
    if (!v || v->line < 0 || !it || it->n_dims != 0 ||
        kl_onnx__ints_of(it, &idx, 1) != 1 || kl_onnx__aint(nd, "axis", 0) != 0)
        return KL_ONNX__NEXT;
    /* Walk the views back to the packed layer. */
    int chain[16], nch = 0, li = v->line;
    /* Every reader of the Gather's input is a Gather, and each value on
     * the way back is read only by the next. */
    for (size_t i = 0; i < c->g->n_node; i++)
        for (size_t k = 0; k < c->g->node[i]->n_input; k++)
            if (!strcmp(c->g->node[i]->input[k], nd->input[0]) &&
                (k || !kl_onnx__is(c->g->node[i], "Gather")))
                return KL_ONNX__NEXT;
    while (nch < 16 && (!strcmp(c->lines[li].op, "reshape") ||
                        !strcmp(c->lines[li].op, "transpose"))) {
        chain[nch++] = li;
        const kl_onnx__val_t *u = kl_onnx__val(c, c->lines[li].in0);
        if (!u || u->line < 0 || !u->sole || kl_onnx__readers(c, u->onnx) != 1)
            return KL_ONNX__NEXT;
        li = u->line;
    }
    kl_onnx__line_t *p = &c->lines[li];
    if (nch == 0 || !p->params || !p->colw)
        return KL_ONNX__NEXT;
    /* Follow the axes from the packed output: tags -2 the block axis G,
     * -3 the block's D, >= 0 the leading dims in order, -1 a 1. */
    int64_t d[KL_MODEL_MAX_DIMS], pd[KL_MODEL_MAX_DIMS], tag[8], G = 0, D = 0;
    int n, pn, at[8];
    if (!kl_onnx__shape(c, p->name, pd, &pn))
        return KL_ONNX__NEXT;
    for (int k = nch - 1; k >= 0; k--) {
        const kl_onnx__line_t *l = &c->lines[chain[k]];
        int64_t t2[8];
        if (!kl_onnx__shape(c, l->name, d, &n))
            return KL_ONNX__NEXT;
        if (k == nch - 1) { /* the split: [..., nout] to [..., G, D] */
            if (strcmp(l->op, "reshape") || n < 2 ||
                d[n - 1] * d[n - 2] != p->nout || d[n - 2] < 2 ||
                d[n - 1] == p->nout)
                return KL_ONNX__NEXT;
            G = d[n - 2];
            D = d[n - 1];
            for (int i = 0; i < n; i++)
                t2[i] = i == n - 2 ? -2 : i == n - 1 ? -3 : d[i] == 1 ? -1 : i;
        } else if (!strcmp(l->op, "transpose")) {
            char *pm = strstr(l->args.data, "perm=") + 5;
            for (int i = 0; i < n; i++) {
                long a = strtol(pm, &pm, 10);
                if (a < 0 || a >= n)
                    return KL_ONNX__NEXT;
                t2[i] = tag[a];
                pm += *pm == ',';
            }
        } else { /* a reshape that only adds or drops 1s */
            int a1[8], a2[8];
            int m1 = s_non1(pd, pn, a1), m2 = s_non1(d, n, a2);
            if (m1 != m2)
                return KL_ONNX__NEXT;
            for (int i = 0; i < n; i++)
                t2[i] = -1;
            for (int i = 0; i < m1; i++) {
                if (pd[a1[i]] != d[a2[i]])
                    return KL_ONNX__NEXT;
                t2[a2[i]] = tag[a1[i]];
            }
        }
        memcpy(tag, t2, sizeof(t2));
        memcpy(pd, d, sizeof(d));
        pn = n;
    }
    /* G first; the rest keeps its order with D last. */
    int m = s_non1(pd, pn, at);
    if (tag[0] != -2 || m < 2 || tag[at[m - 1]] != -3 || idx < 0 || idx >= G)
        return KL_ONNX__NEXT;
    for (int i = 2; i < m - 1; i++)
        if (tag[at[i]] <= tag[at[i - 1]] && i > 1)
            return KL_ONNX__NEXT;
    for (int i = 1; i < m - 1; i++)
        if (tag[at[i]] < 0)
            return KL_ONNX__NEXT;
    /* The block's layer. */
    size_t xl = strcspn(p->args.data, " ");
    char *x = kl_xstrndup(p->args.data, xl);
    char *own = kl_xasprintf("%c%s_mm", KL_ONNX__OWN, nd->output[0]);
    const char *mm = s_part_matmul(c, li, own, x, idx * D, D)->name;
    kl_onnx__line_t *rs = kl_onnx__line_for(c, nd->output[0], own, "reshape");
    kl_buf_printf(&rs->args, "%s shape=", mm);
    for (int i = 1; i < pn; i++)
        kl_buf_printf(&rs->args, "%s%lld", i > 1 ? "x" : "", (long long)pd[i]);
    c->lines[li].dead = true;
    for (int k = 0; k < nch; k++)
        c->lines[chain[k]].dead = true;
    free(x);
    free(own);
    return KL_OK;
}

/* A Split along the last axis of a matmul by a weight that only the Split
 * reads (GPT-2's packed QKV projection, split in three): one matmul per
 * part, its columns of the weight and its part of the bias, instead of
 * the packed one and a copy per part. KL_ONNX__NEXT when it is not that
 * (kl_model_onnx_ew.c slices it). */
static int s_split_proj(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const kl_onnx__val_t *v =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    int64_t d[KL_MODEL_MAX_DIMS], sz[64];
    int rank;
    if (!v || v->line < 0 || !v->sole || kl_onnx__readers(c, v->onnx) != 1)
        return KL_ONNX__NEXT;
    int li = v->line;
    kl_onnx__line_t *p = &c->lines[li];
    if (strcmp(p->op, "matmul") || !p->params || !p->colw || p->q ||
        !kl_onnx__shape(c, p->name, d, &rank) || rank < 1 ||
        d[rank - 1] != p->nout)
        return KL_ONNX__NEXT;
    int64_t ax = kl_onnx__aint(nd, "axis", 0);
    if (ax != -1 && ax != rank - 1)
        return KL_ONNX__NEXT;
    for (size_t k = 0; k < nd->n_output; k++)
        if (!nd->output[k][0])
            return KL_ONNX__NEXT;
    int rc = kl_onnx__split_sizes(c, nd, p->nout, sz);
    if (rc)
        return rc;
    size_t xl = strcspn(p->args.data, " ");
    char *x = kl_xstrndup(p->args.data, xl);
    int64_t at = 0;
    for (size_t k = 0; k < nd->n_output; k++) {
        s_part_matmul(c, li, nd->output[k], x, at, sz[k]);
        at += sz[k];
    }
    c->lines[li].dead = true;
    free(x);
    return KL_OK;
}

const kl_onnx__op_t kl_onnx__tf_ops[] = {
    {"Gather", s_gather_block, 0},
    {"Split", s_split_proj, 0},
    {"ReduceMean", s_reduce_mean, 0},
    {"LayerNormalization", s_layer_norm, 0},
    {NULL, NULL, 0},
};
