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

int s_conv(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    const s_tensor_t *w = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    if (!x)
        return rc;
    if (!w || w->n_dims != 4)
        return s_fail(c, nd, "the weight must be a 4-D initializer");
    int64_t st, pad, dil, g = s_aint(nd, "group", 1);
    if ((rc = s_window(c, nd, &st, &pad, &dil)))
        return rc;
    int64_t K = w->dims[0], R = w->dims[2], S = w->dims[3];
    bool dw = g > 1 && w->dims[1] == 1;
    if (dw && K % g)
        return s_fail(c, nd,
                      "depthwise: output channels not a multiple of "
                      "the groups");
    s_line_t *l = s_line(c, nd, dw ? "depthwise_conv2d" : "conv2d");
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
    return s_weight_in(c, nd, w, l, 1.0f) ?: s_bias_in(c, nd, 2, l, 1.0f);
}

int s_pool(s_ctx_t *c, const s_node_t *nd, bool is_max)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    if (!x)
        return rc;
    const KilnOnnx__AttributeProto *k = s_attr(nd, "kernel_shape");
    if (!k || k->n_ints != 2)
        return s_fail(c, nd, "kernel_shape must have 2 values");
    int64_t st, pad, dil;
    if ((rc = s_window(c, nd, &st, &pad, &dil)))
        return rc;
    if (dil != 1)
        return s_fail(c, nd, "dilated pooling is not supported");
    if (!is_max && pad > 0 && !s_aint(nd, "count_include_pad", 0))
        return s_fail(c, nd,
                      "padding excluded from the average "
                      "(count_include_pad=0) is not supported");
    s_line_t *l = s_line(c, nd, is_max ? "max_pool2d" : "avg_pool2d");
    kl_buf_printf(&l->args, "%s R=%lld S=%lld stride=%lld pad=%lld", x,
                  (long long)k->ints[0], (long long)k->ints[1], (long long)st,
                  (long long)pad);
    return KL_OK;
}

float s_afloat(const s_node_t *nd, const char *name, float def)
{
    const KilnOnnx__AttributeProto *a = s_attr(nd, name);
    return a && a->has_f ? a->f : def;
}

/* Gemm and MatMul: by a weight, dense O= ([O,I], Gemm transB=1) or matmul
 * N= ([K,N]), alpha in the weight and beta in the bias; MatMul of two
 * computed values: matmul A B. */
int s_gemm(s_ctx_t *c, const s_node_t *nd, bool gemm)
{
    int rc = KL_OK;
    const char *a = s_in(c, nd, 0, &rc);
    if (!a)
        return rc;
    const s_tensor_t *b = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    if (gemm) {
        if (s_aint(nd, "transA", 0))
            return s_fail(c, nd, "transA=1 is not supported");
        if (!b || b->n_dims != 2)
            return s_fail(c, nd, "B must be a 2-D initializer");
    }
    if (!b) { /* two computed values: matmul A B (batched when 3-D) */
        const char *bb = s_in(c, nd, 1, &rc);
        if (!bb)
            return rc;
        s_line_t *l = s_line(c, nd, "matmul");
        kl_buf_printf(&l->args, "%s %s", a, bb);
        return KL_OK;
    }
    if (b->n_dims != 2)
        return s_fail(c, nd, "a weight that is not 2-D");
    bool tb = gemm && s_aint(nd, "transB", 0);
    s_line_t *l = s_line(c, nd, tb ? "dense" : "matmul");
    l->colw = !tb;
    l->nout = tb ? b->dims[0] : b->dims[1];
    if (tb)
        kl_buf_printf(&l->args, "%s O=%lld", a, (long long)l->nout);
    else
        kl_buf_printf(&l->args, "%s N=%lld", a, (long long)l->nout);
    float alpha = gemm ? s_afloat(nd, "alpha", 1.0f) : 1.0f,
          beta = gemm ? s_afloat(nd, "beta", 1.0f) : 1.0f;
    rc = s_weight_in(c, nd, b, l, alpha);
    if (!rc && gemm)
        rc = s_bias_in(c, nd, 2, l, beta);
    if (!rc && tb) /* dense has bias=1 by default: zeros when none */
        s_need_bias(c, l);
    return rc;
}

/* ---- folding constants into the layer before them ---- */

/* The layer that constants after value `in` of nd fold into: a conv,
 * dense or matmul by a weight whose output only nd reads; through views
 * (reshape, transpose, flatten) when views. -1 and an error else. */
static int s_fold_target(s_ctx_t *c, const s_node_t *nd, const char *in,
                         bool views, int *rc)
{
    const s_val_t *v = in ? s_val(c, in) : NULL;
    const char *why = NULL;
    while (v && v->line >= 0 && views && v->sole &&
           s_readers(c, v->onnx) == 1) {
        const s_line_t *l = &c->lines[v->line];
        if (strcmp(l->op, "reshape") && strcmp(l->op, "transpose") &&
            strcmp(l->op, "flatten"))
            break;
        v = s_val(c, l->in0);
    }
    if (!v || v->line < 0 || !c->lines[v->line].params || c->lines[v->line].q ||
        !strcmp(c->lines[v->line].op, "layer_norm"))
        why = views ? "folds only into a conv, dense or matmul by a weight "
                      "(through reshapes and transposes)"
                    : "folds only into a conv, dense or matmul by a weight "
                      "just before it";
    else if (!v->sole || s_readers(c, v->onnx) != 1)
        why = "folds into the layer before it only when nothing else reads "
              "that layer's output";
    if (why) {
        *rc = s_fail(c, nd, why);
        return -1;
    }
    return v->line;
}

/* Constant t (named name) as per-output-channel values of line l: a scalar
 * (*n = 1), or l->nout values on the channel axis (conv: [K,1,1],
 * [1,K,1,1]; dense and matmul: [N], [1,N], ...; any shape when flat). Values
 * read only when params are wanted (*v NULL else). */
static int s_chan(s_ctx_t *c, const s_node_t *nd, const s_tensor_t *t,
                  const char *name, const s_line_t *l, bool flat, float **v,
                  int64_t *n)
{
    *v = NULL;
    *n = s_numel(t);
    bool conv = strstr(l->op, "conv2d") != NULL;
    bool ok = *n == 1 || (flat && *n == l->nout);
    if (!ok && *n == l->nout) {
        size_t ax = conv ? t->n_dims - 3 : t->n_dims - 1;
        ok = t->n_dims >= (conv ? 3u : 1u) && t->n_dims <= 4 &&
             t->dims[ax] == l->nout;
    }
    if (!ok) {
        char msg[240];
        snprintf(msg, sizeof(msg),
                 "constant '%.80s' (%lld values) is neither a scalar nor "
                 "one value per output channel of '%.60s' (%lld)",
                 name, (long long)*n, l->name, (long long)l->nout);
        return s_fail(c, nd, msg);
    }
    return c->want ? s_floats(c, t, name, v, n) : KL_OK;
}

/* Scales line l's output channel k by s[k] (s[0] for all when ns is 1):
 * its weight and bias. */
static void s_scale(s_line_t *l, const float *s, int64_t ns)
{
    int64_t per = l->nout ? l->wn / l->nout : 0;
    for (int64_t i = 0; l->w && i < l->wn; i++) {
        int64_t k = l->colw ? i % l->nout : i / per;
        l->w[i] *= s[ns == 1 ? 0 : k];
    }
    for (int64_t k = 0; l->b && k < l->nout; k++)
        l->b[k] *= s[ns == 1 ? 0 : k];
}

void s_need_bias(s_ctx_t *c, s_line_t *l)
{
    l->bias = true;
    if (c->want && !l->b)
        l->b = kl_xcalloc((size_t)l->nout, sizeof(float));
}

/* Add, Mul or Div (op '+', '*', '/') of value input k of nd by constant
 * input 1-k: the bias (+), or a scale of weight and bias; a scalar scale
 * folds through views (attention's scaling of Q and K). */
int s_fold_const(s_ctx_t *c, const s_node_t *nd, size_t k, char op)
{
    int rc = KL_OK;
    int li = s_fold_target(c, nd, nd->input[k], op != '+', &rc);
    const s_tensor_t *t = s_init(c, nd->input[1 - k]);
    if (li < 0)
        return rc;
    s_line_t *l = &c->lines[li];
    float *v;
    int64_t n;
    if ((rc = s_chan(c, nd, t, nd->input[1 - k], l, false, &v, &n)))
        return rc;
    if (op != '+' && n > 1 && s_val(c, nd->input[k])->line != li) {
        free(v);
        return s_fail(c, nd,
                      "a per-channel scale folds only into the layer just "
                      "before it, not through views");
    }
    if (op == '+') {
        s_need_bias(c, l);
        for (int64_t i = 0; v && i < l->nout; i++)
            l->b[i] += v[n == 1 ? 0 : i];
    } else if (v) {
        for (int64_t i = 0; op == '/' && i < n; i++)
            v[i] = 1.0f / v[i];
        s_scale(l, v, n);
    }
    free(v);
    s_alias(c, nd->output[0], s_val(c, nd->input[k]));
    return KL_OK;
}

/* BatchNormalization after a conv, dense or matmul: s = gamma /
 * sqrt(var + eps); W[k] *= s[k]; b' = (b - mean) * s + beta. */
int s_fold_bn(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    int li =
        s_fold_target(c, nd, nd->n_input ? nd->input[0] : NULL, false, &rc);
    if (li < 0)
        return rc;
    s_line_t *l = &c->lines[li];
    float *p[4] = {NULL}; /* gamma, beta, mean, var */
    int64_t n[4];
    if (nd->n_input != 5)
        return s_fail(c, nd, "expects 5 inputs");
    for (int i = 0; i < 4 && !rc; i++) {
        const s_tensor_t *t = s_init(c, nd->input[i + 1]);
        if (!t)
            rc = s_fail(c, nd, "scale, B, mean and var must be constants");
        else
            rc = s_chan(c, nd, t, nd->input[i + 1], l, true, &p[i], &n[i]);
    }
    if (!rc && c->want) {
        double eps = s_afloat(nd, "epsilon", 1e-5f);
        float *s = kl_xmalloc((size_t)l->nout * sizeof(float));
        s_need_bias(c, l);
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
        s_need_bias(c, l);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    if (!rc)
        s_alias(c, nd->output[0], s_val(c, nd->input[0]));
    return rc;
}

/* Reshape's target shape as "AxBx..." (0 copies, -1 infers). */
int s_reshape(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    const s_tensor_t *t = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
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
        return s_fail(c, nd,
                      "the shape must be a constant int64 tensor of "
                      "1 to 8 values");
    kl_dtype dt = s_val(c, nd->input[0])->dt;
    s_line_t *l = s_line(c, nd, "reshape");
    c->vals[c->nvals - 1].dt = dt; /* a view keeps the type (u8) */
    kl_buf_printf(&l->args, "%s shape=", x);
    for (size_t i = 0; i < n; i++)
        kl_buf_printf(&l->args, "%s%lld", i ? "x" : "", (long long)d[i]);
    return KL_OK;
}

int s_simple(s_ctx_t *c, const s_node_t *nd, const char *op)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    if (!x)
        return rc;
    kl_dtype dt = s_val(c, nd->input[0])->dt;
    s_line_t *l = s_line(c, nd, op);
    kl_buf_puts(&l->args, x);
    if (!strcmp(op, "flatten") || !strcmp(op, "transpose"))
        c->vals[c->nvals - 1].dt = dt; /* a view keeps the type (u8) */
    return KL_OK;
}

/* Bound k of a Clip (1: min, 2: max): a constant f32 scalar input (opset
 * 11 on), else the float attribute `what` (before 11). *has is false when
 * there is none; an infinite bound on its own side is none too. */
int s_clip_bound(s_ctx_t *c, const s_node_t *nd, size_t k, const char *what,
                 bool *has, float *v)
{
    char msg[200];
    const KilnOnnx__AttributeProto *a = s_attr(nd, what);
    *has = false;
    if (k < nd->n_input && nd->input[k] && nd->input[k][0]) {
        const s_tensor_t *t = s_init(c, nd->input[k]);
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
            return s_fail(c, nd, msg);
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
        return s_fail(c, nd, msg);
    }
    return KL_OK;
}

/* Clip(min, max): the clip layer, clip lo=MIN hi=MAX; min 0 without a
 * max is relu. A bound alone otherwise has no kiln op (clip takes both),
 * nor does a Clip without bounds. */
int s_clip(s_ctx_t *c, const s_node_t *nd)
{
    bool has_lo, has_hi;
    float lo = 0, hi = 0;
    int rc = s_clip_bound(c, nd, 1, "min", &has_lo, &lo);
    if (!rc)
        rc = s_clip_bound(c, nd, 2, "max", &has_hi, &hi);
    if (rc)
        return rc;
    if (!has_lo)
        return s_fail(c, nd,
                      "a Clip without a min is not supported (kiln's clip "
                      "takes both bounds; min 0 alone is relu)");
    if (!has_hi && lo != 0.0f)
        return s_fail(c, nd,
                      "a Clip without a max is supported only with min 0 "
                      "(relu)");
    if (!has_hi)
        return s_simple(c, nd, "relu");
    if (lo > hi) {
        char msg[120];
        snprintf(msg, sizeof(msg), "min %.9g is above max %.9g", (double)lo,
                 (double)hi);
        return s_fail(c, nd, msg);
    }
    if ((rc = s_simple(c, nd, "clip")))
        return rc;
    /* %.9g reads back as the same float. */
    kl_buf_printf(&c->lines[c->nlines - 1].args, " lo=%.9g hi=%.9g", (double)lo,
                  (double)hi);
    return KL_OK;
}
