/* kl_model_onnx_layers.c - ONNX import: the layers with a weight (Conv,
 * Gemm, MatMul), pooling, Reshape, Clip, and the constants (BatchNormalization,
 * Add, Mul, Div) that fold into the layer before them. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

static int s_conv(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    const kl_onnx__tensor_t *w =
        nd->n_input > 1 ? kl_onnx__init(c, nd->input[1]) : NULL;
    if (!x)
        return rc;
    if (!w || w->n_dims != 4)
        return kl_onnx__fail(c, nd, "the weight must be a 4-D initializer");
    int64_t st, pad, dil, g = kl_onnx__aint(nd, "group", 1);
    if ((rc = kl_onnx__window(c, nd, &st, &pad, &dil)))
        return rc;
    int64_t K = w->dims[0], R = w->dims[2], S = w->dims[3];
    bool dw = g > 1 && w->dims[1] == 1;
    if (dw && K % g)
        return kl_onnx__fail(c, nd,
                             "depthwise: output channels not a multiple of "
                             "the groups");
    kl_onnx__line_t *l =
        kl_onnx__line(c, nd, dw ? "depthwise_conv2d" : "conv2d");
    kl_buf_printf(&l->args, "%s", x);
    if (!dw)
        kl_buf_printf(&l->args, " K=%lld", (long long)K);
    kl_buf_printf(&l->args, " R=%lld S=%lld stride=%lld pad=%lld", (long long)R,
                  (long long)S, (long long)st, (long long)pad);
    if (dil != 1)
        kl_buf_printf(&l->args, " dilation=%lld", (long long)dil);
    if (dw && K / g > 1)
        kl_buf_printf(&l->args, " multiplier=%lld", (long long)(K / g));
    if (!dw && g > 1)
        kl_buf_printf(&l->args, " groups=%lld", (long long)g);
    l->nout = K;
    return kl_onnx__weight_in(c, nd, w, l, 1.0f)
               ?: kl_onnx__bias_in(c, nd, 2, l, 1.0f);
}

/* MaxPool and AveragePool. */
static int s_pool(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    bool is_max = kl_onnx__is(nd, "MaxPool");
    int rc = KL_OK;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    if (!x)
        return rc;
    const KilnOnnx__AttributeProto *k = kl_onnx__attr(nd, "kernel_shape");
    if (!k || k->n_ints != 2)
        return kl_onnx__fail(c, nd, "kernel_shape must have 2 values");
    int64_t st, pad, dil;
    if ((rc = kl_onnx__window(c, nd, &st, &pad, &dil)))
        return rc;
    if (dil != 1)
        return kl_onnx__fail(c, nd, "dilated pooling is not supported");
    if (!is_max && pad > 0 && !kl_onnx__aint(nd, "count_include_pad", 0))
        return kl_onnx__fail(c, nd,
                             "padding excluded from the average "
                             "(count_include_pad=0) is not supported");
    kl_onnx__line_t *l =
        kl_onnx__line(c, nd, is_max ? "max_pool2d" : "avg_pool2d");
    kl_buf_printf(&l->args, "%s R=%lld S=%lld stride=%lld pad=%lld", x,
                  (long long)k->ints[0], (long long)k->ints[1], (long long)st,
                  (long long)pad);
    return KL_OK;
}

float kl_onnx__afloat(const kl_onnx__node_t *nd, const char *name, float def)
{
    const KilnOnnx__AttributeProto *a = kl_onnx__attr(nd, name);
    return a && a->has_f ? a->f : def;
}

/* Gemm and MatMul: by a weight, dense O= ([O,I], Gemm transB=1) or matmul
 * N= ([K,N]), alpha in the weight and beta in the bias; MatMul of two
 * computed values: matmul A B. */
static int s_gemm(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    bool gemm = kl_onnx__is(nd, "Gemm");
    int rc = KL_OK;
    const char *a = kl_onnx__in(c, nd, 0, &rc);
    if (!a)
        return rc;
    const kl_onnx__tensor_t *b =
        nd->n_input > 1 ? kl_onnx__init(c, nd->input[1]) : NULL;
    if (gemm) {
        if (kl_onnx__aint(nd, "transA", 0))
            return kl_onnx__fail(c, nd, "transA=1 is not supported");
        if (!b || b->n_dims != 2)
            return kl_onnx__fail(c, nd, "B must be a 2-D initializer");
    }
    if (!b) { /* two computed values: matmul A B (batched when 3-D) */
        const char *bb = kl_onnx__in(c, nd, 1, &rc);
        if (!bb)
            return rc;
        kl_onnx__line_t *l = kl_onnx__line(c, nd, "matmul");
        kl_buf_printf(&l->args, "%s %s", a, bb);
        return KL_OK;
    }
    if (b->n_dims != 2)
        return kl_onnx__fail(c, nd, "a weight that is not 2-D");
    bool tb = gemm && kl_onnx__aint(nd, "transB", 0);
    kl_onnx__line_t *l = kl_onnx__line(c, nd, tb ? "dense" : "matmul");
    l->colw = !tb;
    l->nout = tb ? b->dims[0] : b->dims[1];
    if (tb)
        kl_buf_printf(&l->args, "%s O=%lld", a, (long long)l->nout);
    else
        kl_buf_printf(&l->args, "%s N=%lld", a, (long long)l->nout);
    float alpha = gemm ? kl_onnx__afloat(nd, "alpha", 1.0f) : 1.0f,
          beta = gemm ? kl_onnx__afloat(nd, "beta", 1.0f) : 1.0f;
    rc = kl_onnx__weight_in(c, nd, b, l, alpha);
    if (!rc && gemm)
        rc = kl_onnx__bias_in(c, nd, 2, l, beta);
    if (!rc && tb) /* dense has bias=1 by default: zeros when none */
        kl_onnx__need_bias(c, l);
    return rc;
}

/* ---- folding constants into the layer before them ---- */

/* The layer that constants after value `in` of nd fold into: a conv,
 * dense or matmul by a weight whose output only nd reads; through views
 * (reshape, transpose, flatten) when views. -1 and an error else. */
static int s_fold_target(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                         const char *in, bool views, int *rc)
{
    const kl_onnx__val_t *v = in ? kl_onnx__val(c, in) : NULL;
    const char *why = NULL;
    while (v && v->line >= 0 && views && v->sole &&
           kl_onnx__readers(c, v->onnx) == 1) {
        const kl_onnx__line_t *l = &c->lines[v->line];
        if (strcmp(l->op, "reshape") && strcmp(l->op, "transpose") &&
            strcmp(l->op, "flatten"))
            break;
        v = kl_onnx__val(c, l->in0);
    }
    if (!v || v->line < 0 || !c->lines[v->line].params || c->lines[v->line].q ||
        !strcmp(c->lines[v->line].op, "layer_norm"))
        why = views ? "folds only into a conv, dense or matmul by a weight "
                      "(through reshapes and transposes)"
                    : "folds only into a conv, dense or matmul by a weight "
                      "just before it";
    else if (!v->sole || kl_onnx__readers(c, v->onnx) != 1)
        why = "folds into the layer before it only when nothing else reads "
              "that layer's output";
    if (why) {
        *rc = kl_onnx__fail(c, nd, why);
        return -1;
    }
    return v->line;
}

/* Whether constant t is a scalar or one value per output channel of line
 * l (s_chan's shapes). */
static bool s_chan_fits(const kl_onnx__tensor_t *t, const kl_onnx__line_t *l,
                        bool flat)
{
    int64_t n = kl_onnx__numel(t);
    bool conv = strstr(l->op, "conv2d") != NULL;
    if (n == 1 || (flat && n == l->nout))
        return true;
    size_t ax = conv ? t->n_dims - 3 : t->n_dims - 1;
    return n == l->nout && t->n_dims >= (conv ? 3u : 1u) && t->n_dims <= 4 &&
           t->dims[ax] == l->nout;
}

/* Constant t (named name) as per-output-channel values of line l: a scalar
 * (*n = 1), or l->nout values on the channel axis (conv: [K,1,1],
 * [1,K,1,1]; dense and matmul: [N], [1,N], ...; any shape when flat). Values
 * read only when params are wanted (*v NULL else). */
static int s_chan(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                  const kl_onnx__tensor_t *t, const char *name,
                  const kl_onnx__line_t *l, bool flat, float **v, int64_t *n)
{
    *v = NULL;
    *n = kl_onnx__numel(t);
    if (!s_chan_fits(t, l, flat)) {
        char msg[240];
        snprintf(msg, sizeof(msg),
                 "constant '%.80s' (%lld values) is neither a scalar nor "
                 "one value per output channel of '%.60s' (%lld)",
                 name, (long long)*n, l->name, (long long)l->nout);
        return kl_onnx__fail(c, nd, msg);
    }
    return c->want ? kl_onnx__floats(c, t, name, v, n) : KL_OK;
}

/* Scales line l's output channel k by s[k] (s[0] for all when ns is 1):
 * its weight and bias. */
static void s_scale(kl_onnx__line_t *l, const float *s, int64_t ns)
{
    int64_t per = l->nout ? l->wn / l->nout : 0;
    for (int64_t i = 0; l->w && i < l->wn; i++) {
        int64_t k = l->colw ? i % l->nout : i / per;
        l->w[i] *= s[ns == 1 ? 0 : k];
    }
    for (int64_t k = 0; l->b && k < l->nout; k++)
        l->b[k] *= s[ns == 1 ? 0 : k];
}

void kl_onnx__need_bias(kl_onnx__ctx_t *c, kl_onnx__line_t *l)
{
    l->bias = true;
    if (c->want && !l->b)
        l->b = kl_xcalloc((size_t)l->nout, sizeof(float));
}

/* Add, Mul or Div (op '+', '*', '/') of value input k of nd by constant
 * input 1-k: the bias (+), or a scale of weight and bias; a scalar scale
 * folds through views (attention's scaling of Q and K). */
static int s_fold_const(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                        char op)
{
    int rc = KL_OK;
    int li = s_fold_target(c, nd, nd->input[k], op != '+', &rc);
    const kl_onnx__tensor_t *t = kl_onnx__init(c, nd->input[1 - k]);
    if (li < 0)
        return rc;
    kl_onnx__line_t *l = &c->lines[li];
    float *v;
    int64_t n;
    if ((rc = s_chan(c, nd, t, nd->input[1 - k], l, false, &v, &n)))
        return rc;
    if (op != '+' && n > 1 && kl_onnx__val(c, nd->input[k])->line != li) {
        free(v);
        return kl_onnx__fail(
            c, nd,
            "a per-channel scale folds only into the layer just "
            "before it, not through views");
    }
    if (op == '+') {
        kl_onnx__need_bias(c, l);
        for (int64_t i = 0; v && i < l->nout; i++)
            l->b[i] += v[n == 1 ? 0 : i];
    } else if (v) {
        for (int64_t i = 0; op == '/' && i < n; i++)
            v[i] = 1.0f / v[i];
        s_scale(l, v, n);
    }
    free(v);
    kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[k]));
    return KL_OK;
}

/* BatchNormalization after a conv, dense or matmul: s = gamma /
 * sqrt(var + eps); W[k] *= s[k]; b' = (b - mean) * s + beta. */
static int s_fold_bn(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    int li =
        s_fold_target(c, nd, nd->n_input ? nd->input[0] : NULL, false, &rc);
    if (li < 0)
        return rc;
    kl_onnx__line_t *l = &c->lines[li];
    float *p[4] = {NULL}; /* gamma, beta, mean, var */
    int64_t n[4];
    if (nd->n_input != 5)
        return kl_onnx__fail(c, nd, "expects 5 inputs");
    for (int i = 0; i < 4 && !rc; i++) {
        const kl_onnx__tensor_t *t = kl_onnx__init(c, nd->input[i + 1]);
        if (!t)
            rc = kl_onnx__fail(c, nd,
                               "scale, B, mean and var must be constants");
        else
            rc = s_chan(c, nd, t, nd->input[i + 1], l, true, &p[i], &n[i]);
    }
    if (!rc && c->want) {
        double eps = kl_onnx__afloat(nd, "epsilon", 1e-5f);
        float *s = kl_xmalloc((size_t)l->nout * sizeof(float));
        kl_onnx__need_bias(c, l);
        for (int64_t k = 0; k < l->nout; k++) {
#define S_AT(i) ((double)p[i][n[i] == 1 ? 0 : k])
            s[k] = (float)(S_AT(0) / sqrt(S_AT(3) + eps));
            l->b[k] = (float)(((double)l->b[k] - S_AT(2)) * s[k] + S_AT(1));
#undef S_AT
        }
        float *keep = l->b;
        l->b = NULL; /* the bias is done; scale only the weight */
        s_scale(l, s, l->nout);
        l->b = keep;
        free(s);
    }
    if (!rc)
        kl_onnx__need_bias(c, l);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    if (!rc)
        kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[0]));
    return rc;
}

/* Reshape's target shape as "AxBx..." (0 copies, -1 infers; allowzero=1
 * only without a 0). */
static int s_reshape(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int64_t z[8];
    const kl_onnx__tensor_t *zt =
        nd->n_input > 1 ? kl_onnx__init(c, nd->input[1]) : NULL;
    int nz = zt && kl_onnx__aint(nd, "allowzero", 0)
                 ? kl_onnx__ints_of(zt, z, 8)
                 : 0;
    for (int k = 0; k < nz; k++)
        if (z[k] == 0)
            return kl_onnx__fail(c, nd, "allowzero=1 with a 0 in the shape");
    int rc = KL_OK;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    const kl_onnx__tensor_t *t =
        nd->n_input > 1 ? kl_onnx__init(c, nd->input[1]) : NULL;
    if (!x)
        return rc;
    int64_t d[KL_MODEL_MAX_DIMS];
    size_t n = 0;
    if (t && t->n_int64_data) {
        n = t->n_int64_data;
        for (size_t i = 0; i < n && i < KL_MODEL_MAX_DIMS; i++)
            d[i] = t->int64_data[i];
    } else if (t && t->has_raw_data && t->raw_data.len % 8 == 0) {
        n = t->raw_data.len / 8;
        for (size_t i = 0; i < n && i < KL_MODEL_MAX_DIMS; i++)
            memcpy(&d[i], t->raw_data.data + 8 * i, 8); /* little-endian */
    }
    if (n == 0 || n > KL_MODEL_MAX_DIMS)
        return kl_onnx__fail(c, nd,
                             "the shape must be a constant int64 tensor of "
                             "1 to 8 values");
    kl_dtype dt = kl_onnx__val(c, nd->input[0])->dt;
    kl_onnx__line_t *l = kl_onnx__line(c, nd, "reshape");
    c->vals[c->nvals - 1].dt = dt; /* a view keeps the type (u8) */
    kl_buf_printf(&l->args, "%s shape=", x);
    for (size_t i = 0; i < n; i++)
        kl_buf_printf(&l->args, "%s%lld", i ? "x" : "", (long long)d[i]);
    return KL_OK;
}

int kl_onnx__simple(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                    const char *op)
{
    int rc = KL_OK;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    if (!x)
        return rc;
    kl_dtype dt = kl_onnx__val(c, nd->input[0])->dt;
    kl_onnx__line_t *l = kl_onnx__line(c, nd, op);
    kl_buf_puts(&l->args, x);
    if (!strcmp(op, "flatten") || !strcmp(op, "transpose"))
        c->vals[c->nvals - 1].dt = dt; /* a view keeps the type (u8) */
    return KL_OK;
}

/* Bound k of a Clip (1: min, 2: max): a constant f32 scalar input (opset
 * 11 on), else the float attribute `what` (before 11). *has is false when
 * there is none; an infinite bound on its own side is none too. */
int kl_onnx__clip_bound(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                        const char *what, bool *has, float *v)
{
    char msg[200];
    const KilnOnnx__AttributeProto *a = kl_onnx__attr(nd, what);
    *has = false;
    if (k < nd->n_input && nd->input[k] && nd->input[k][0]) {
        const kl_onnx__tensor_t *t = kl_onnx__init(c, nd->input[k]);
        const char *why = NULL;
        if (!t)
            why = "is not a constant (an initializer or a Constant node)";
        else if (t->has_data_type && t->data_type != 1)
            why = "is not float32";
        else if (t->n_float_data == 1)
            *v = t->float_data[0];
        else if (t->has_raw_data && t->raw_data.len == 4)
            memcpy(v, t->raw_data.data, 4); /* little-endian */
        else
            why = "is not one float";
        if (why) {
            snprintf(msg, sizeof(msg), "%s ('%.80s') %s", what, nd->input[k],
                     why);
            return kl_onnx__fail(c, nd, msg);
        }
        *has = true;
    } else if (a && a->has_f) {
        *v = a->f;
        *has = true;
    }
    bool lo = k == 1;
    if (*has && isinf(*v) && (*v < 0) == lo)
        *has = false;
    else if (*has && !isfinite(*v)) {
        snprintf(msg, sizeof(msg), "%s is %g", what, (double)*v);
        return kl_onnx__fail(c, nd, msg);
    }
    return KL_OK;
}

/* Clip(min, max): the clip layer, clip lo=MIN hi=MAX; min 0 without a
 * max is relu. A bound alone otherwise has no kiln op (clip takes both),
 * nor does a Clip without bounds. */
static int s_clip(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    bool has_lo, has_hi;
    float lo = 0, hi = 0;
    int rc = kl_onnx__clip_bound(c, nd, 1, "min", &has_lo, &lo);
    if (!rc)
        rc = kl_onnx__clip_bound(c, nd, 2, "max", &has_hi, &hi);
    if (rc)
        return rc;
    if (!has_lo)
        return kl_onnx__fail(
            c, nd,
            "a Clip without a min is not supported (kiln's clip "
            "takes both bounds; min 0 alone is relu)");
    if (!has_hi && lo != 0.0f)
        return kl_onnx__fail(
            c, nd,
            "a Clip without a max is supported only with min 0 "
            "(relu)");
    if (!has_hi)
        return kl_onnx__simple(c, nd, "relu");
    if (lo > hi) {
        char msg[120];
        snprintf(msg, sizeof(msg), "min %.9g is above max %.9g", (double)lo,
                 (double)hi);
        return kl_onnx__fail(c, nd, msg);
    }
    if ((rc = kl_onnx__simple(c, nd, "clip")))
        return rc;
    /* %.9g reads back as the same float. */
    kl_buf_printf(&c->lines[c->nlines - 1].args, " lo=%.9g hi=%.9g", (double)lo,
                  (double)hi);
    return KL_OK;
}

/* Whether constant input 1-k of nd (op '+', '*' or '/') folds into the
 * layer before value input k (s_fold_const's rules), asked without an
 * error: when it does not, the node is a general element-wise layer
 * (kl_model_onnx_ew.c). */
static bool s_foldable(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                       char op)
{
    const kl_onnx__tensor_t *t = kl_onnx__init(c, nd->input[1 - k]);
    if (!t || t->data_type != KL_ONNX__T_F32)
        return false;
    char keep[KL_ERRMSG_LEN];
    if (c->err)
        memcpy(keep, c->err, KL_ERRMSG_LEN);
    int rc = KL_OK;
    int li = s_fold_target(c, nd, nd->input[k], op != '+', &rc);
    bool ok = li >= 0 && s_chan_fits(t, &c->lines[li], false) &&
              !(op != '+' && kl_onnx__numel(t) > 1 &&
                kl_onnx__val(c, nd->input[k])->line != li);
    if (c->err)
        memcpy(c->err, keep, KL_ERRMSG_LEN);
    return ok;
}

/* Add, Mul and Div by a constant fold into the layer before them when
 * they can (Div: or are GELU's Erf form); Add of two computed values is an
 * add layer. The rest is kl_model_onnx_ew.c's (KL_ONNX__NEXT). */
static int s_arith(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    bool add = kl_onnx__is(nd, "Add"), mul = kl_onnx__is(nd, "Mul"),
         div = kl_onnx__is(nd, "Div");
    char op = add ? '+' : mul ? '*' : '/';
    if (nd->n_input != 2)
        return KL_ONNX__NEXT;
    for (size_t k = 0; k < 2; k++)
        if (kl_onnx__init(c, nd->input[1 - k]) && (k == 0 || !div)) {
            if (div) {
                bool m;
                if ((rc = kl_onnx__gelu_erf(c, nd, &m)) || m)
                    return rc;
            }
            if (!kl_onnx__val(c, nd->input[k]) || !s_foldable(c, nd, k, op))
                return KL_ONNX__NEXT;
            return s_fold_const(c, nd, k, op);
        }
    if (!add || !kl_onnx__val(c, nd->input[0]) ||
        !kl_onnx__val(c, nd->input[1]))
        return KL_ONNX__NEXT;
    const char *a = kl_onnx__in(c, nd, 0, &rc),
               *b = a ? kl_onnx__in(c, nd, 1, &rc) : 0;
    if (!b)
        return rc;
    kl_onnx__line_t *l = kl_onnx__line(c, nd, "add");
    kl_buf_printf(&l->args, "%s %s", a, b);
    return KL_OK;
}

/* Identity and Dropout (inference: the identity) of a computed value: the
 * same value. */
static int s_identity(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    const kl_onnx__val_t *v =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    if (!v)
        return kl_onnx__in(c, nd, 0, &rc), rc;
    kl_onnx__alias(c, nd->output[0], v);
    return KL_OK;
}

static int s_flatten(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    if (kl_onnx__aint(nd, "axis", 1) != 1)
        return kl_onnx__fail(c, nd, "only axis=1");
    return kl_onnx__simple(c, nd, "flatten");
}

static int s_transpose(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc;
    const KilnOnnx__AttributeProto *p = kl_onnx__attr(nd, "perm");
    if (!p || p->n_ints == 0)
        return kl_onnx__fail(c, nd, "a Transpose without perm");
    if ((rc = kl_onnx__simple(c, nd, "transpose")))
        return rc;
    kl_buf_t *b = &c->lines[c->nlines - 1].args;
    kl_buf_puts(b, " perm=");
    for (size_t i = 0; i < p->n_ints; i++)
        kl_buf_printf(b, "%s%lld", i ? "," : "", (long long)p->ints[i]);
    return KL_OK;
}

static int s_relu(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return kl_onnx__simple(c, nd, "relu");
}

static int s_gap(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return kl_onnx__simple(c, nd, "global_avg_pool");
}

static int s_softmax(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    if (kl_onnx__aint(nd, "axis", -1) != -1)
        return kl_onnx__fail(c, nd, "only axis=-1 (the last axis)");
    return kl_onnx__simple(c, nd, "softmax");
}

/* Gelu: the erf form (approximate=none), or approximate=tanh. */
static int s_gelu(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const KilnOnnx__AttributeProto *ap = kl_onnx__attr(nd, "approximate");
    bool tanh_ =
        ap && ap->has_s && ap->s.len == 4 && !memcmp(ap->s.data, "tanh", 4);
    if (ap && ap->has_s && !tanh_ &&
        !(ap->s.len == 4 && !memcmp(ap->s.data, "none", 4)))
        return kl_onnx__fail(c, nd, "approximate is neither none nor tanh");
    int rc = kl_onnx__simple(c, nd, "gelu");
    if (!rc && tanh_)
        kl_buf_puts(&c->lines[c->nlines - 1].args, " approximate=tanh");
    return rc;
}

const kl_onnx__op_t kl_onnx__layers_ops[] = {
    {"Conv", s_conv, 0},
    {"MaxPool", s_pool, 0},
    {"AveragePool", s_pool, 0},
    {"Gemm", s_gemm, 0},
    {"MatMul", s_gemm, 0},
    {"BatchNormalization", s_fold_bn, 0},
    {"Add", s_arith, 0},
    {"Mul", s_arith, 0},
    {"Div", s_arith, 0},
    {"Clip", s_clip, 0},
    {"Identity", s_identity, 0},
    {"Dropout", s_identity, 0},
    {"Flatten", s_flatten, 0},
    {"Reshape", s_reshape, 0},
    {"Transpose", s_transpose, 0},
    {"Relu", s_relu, 0},
    {"GlobalAveragePool", s_gap, 0},
    {"Softmax", s_softmax, 0},
    {"Gelu", s_gelu, 0},
    {NULL, NULL, 0},
};
