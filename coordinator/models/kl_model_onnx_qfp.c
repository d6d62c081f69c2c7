/* kl_model_onnx_qfp.c - ONNX import: quantized nodes of the operator form
 * that kiln runs in float between a dequantize and a quantize layer.
 *
 * onnxruntime's quantize_static with QuantFormat.QOperator writes a
 * residual Add as com.microsoft QLinearAdd (A, A_scale, A_zp, B, B_scale,
 * B_zp, C_scale, C_zp), an AveragePool as QLinearAveragePool (X, x_scale,
 * x_zp, y_scale, y_zp) and leaves MaxPool on the u8 tensor (max commutes
 * with the monotone quantization, so the output has its input's scale and
 * zero point). kiln's graph has no integer add or pooling: each becomes
 * dequantize (per input) -> the float layer (add, avg_pool2d, max_pool2d)
 * -> quantize with the output's scale and zero point. For MaxPool that is
 * exact (dequantizing and quantizing again with the same scale gives the
 * code back); for the add and the average it is the float definition of
 * the op, which onnxruntime's kernels compute with their own f32 rounding
 * (docs/models.md, "Quantized models in operator form"). QLinearMul,
 * QLinearConcat, QLinearLeakyRelu and QLinearSigmoid are refused by name:
 * kiln's graph has no product of two tensors, no concatenation and no such
 * activations. */
#include "kl_model_onnx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* The node whose output 0 is name, or NULL. */
static const kl_onnx__node_t *s_producer(const kl_onnx__ctx_t *c,
                                         const char *name)
{
    for (size_t i = 0; i < c->g->n_node; i++) {
        const kl_onnx__node_t *nd = c->g->node[i];
        if (nd->n_output && !strcmp(nd->output[0], name))
            return nd;
    }
    return NULL;
}

/* The scale and zero point of the quantized tensor name, read from the
 * node that makes it (through MaxPool and views, which keep them). */
static int s_qof(kl_onnx__ctx_t *c, const kl_onnx__node_t *user,
                 const char *name, float *s, int64_t *zp, kl_dtype *dt)
{
    static const struct {
        const char *op;
        size_t ks, kz;
    } at[] = {{"QuantizeLinear", 1, 2},
              {"QLinearConv", 6, 7},
              {"QLinearMatMul", 6, 7},
              {"QLinearAdd", 6, 7},
              {"QGemm", 7, 8},
              {"QLinearGlobalAveragePool", 3, 4},
              {"QLinearAveragePool", 3, 4}};
    static const char *const keep[] = {"MaxPool",   "Flatten", "Reshape",
                                       "Identity",  "Squeeze", "Unsqueeze",
                                       "Transpose", "Dropout"};
    for (int depth = 0; depth < 64; depth++) {
        const kl_onnx__node_t *p = s_producer(c, name);
        for (size_t i = 0; p && i < sizeof(at) / sizeof(at[0]); i++)
            if (kl_onnx__is(p, at[i].op))
                return kl_onnx__qparams_at(c, p, at[i].ks, at[i].kz, s, zp, dt);
        bool view = false;
        for (size_t i = 0; p && i < sizeof(keep) / sizeof(keep[0]); i++)
            view |= kl_onnx__is(p, keep[i]);
        if (!view || !p->n_input)
            break;
        name = p->input[0];
    }
    char msg[240];
    snprintf(msg, sizeof(msg),
             "the scale and zero point of its quantized input '%.80s' are "
             "not known (it is not made by a QuantizeLinear or a QLinear "
             "node)",
             name);
    return kl_onnx__fail(c, user, msg);
}

/* The kiln name of a dequantize layer of value input k of nd (scale s,
 * zero point zp): an existing one of the same tensor and numbers, or a
 * new one. NULL: *rc an error, or KL_ONNX__UNSUP with c->why. */
static const char *s_deq(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                         float s, int64_t zp, int *rc)
{
    *rc = KL_OK;
    if (k < nd->n_input && kl_onnx__init(c, nd->input[k])) {
        c->why = "a constant input (kiln's layers here read computed "
                 "tensors)";
        *rc = KL_ONNX__UNSUP;
        return NULL;
    }
    const kl_onnx__val_t *x = kl_onnx__val(c, nd->input[k]);
    if (!x) {
        kl_onnx__in(c, nd, k, rc);
        return NULL;
    }
    if (x->dt != KL_DT_U8 && x->dt != KL_DT_S8) {
        c->why = "an input that is not a u8 or s8 tensor";
        *rc = KL_ONNX__UNSUP;
        return NULL;
    }
    kl_buf_t a = {0};
    kl_buf_printf(&a, "%s scale=%.9g zp=%lld", x->kiln, (double)s,
                  (long long)zp);
    for (int i = 0; i < c->nlines; i++) {
        const kl_onnx__line_t *l = &c->lines[i];
        if (!l->dead && !strcmp(l->op, "dequantize") && l->args.data &&
            !strcmp(l->args.data, a.data)) {
            kl_buf_free(&a);
            return l->name;
        }
    }
    char *own = kl_xasprintf("%c%s_dq", KL_ONNX__OWN, nd->input[k]);
    kl_onnx__line_t *l = kl_onnx__line_for(c, own, nd->input[k], "dequantize");
    free(own);
    kl_buf_puts(&l->args, a.data);
    kl_buf_free(&a);
    return l->name;
}

/* The float layer op for nd's output (its args from the caller), a value
 * of kiln's own; then nd's output is quantize of it (scale s, zero point
 * zp, type dt). */
static kl_onnx__line_t *s_float_op(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                                   const char *op)
{
    char *own = kl_xasprintf("%c%s_f32", KL_ONNX__OWN, nd->output[0]);
    kl_onnx__line_t *l = kl_onnx__line_for(c, own, nd->input[0], op);
    free(own);
    return l;
}

static void s_requant(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      const char *src, float s, int64_t zp, kl_dtype dt)
{
    kl_onnx__line_t *q = kl_onnx__line(c, nd, "quantize");
    kl_buf_printf(&q->args, "%s scale=%.9g zp=%lld%s", src, (double)s,
                  (long long)zp, dt == KL_DT_S8 ? " out=s8" : "");
    c->vals[c->nvals - 1].dt = dt;
}

/* QLinearAdd: dequantize A and B, add, quantize by C's. */
static int s_qadd(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    if (nd->n_input < 8)
        return kl_onnx__fail(c, nd, "fewer than 8 inputs");
    float sa, sb, so;
    int64_t za, zb, zo;
    kl_dtype ta, tb, to;
    int rc;
    if ((rc = kl_onnx__qparams_at(c, nd, 1, 2, &sa, &za, &ta)) ||
        (rc = kl_onnx__qparams_at(c, nd, 4, 5, &sb, &zb, &tb)) ||
        (rc = kl_onnx__qparams_at(c, nd, 6, 7, &so, &zo, &to)))
        return rc;
    const char *a = s_deq(c, nd, 0, sa, za, &rc);
    const char *b = a ? s_deq(c, nd, 3, sb, zb, &rc) : NULL;
    if (!b)
        return rc;
    int64_t da[KL_MODEL_MAX_DIMS], db[KL_MODEL_MAX_DIMS];
    int na = 0, nb = 0;
    if (kl_onnx__shape(c, a, da, &na) && kl_onnx__shape(c, b, db, &nb) &&
        (na != nb || memcmp(da, db, (size_t)na * sizeof(int64_t))))
        return kl_onnx__fail(c, nd,
                             "inputs of different shapes (kiln's add does not "
                             "broadcast)");
    kl_onnx__line_t *l = s_float_op(c, nd, "add");
    kl_buf_printf(&l->args, "%s %s", a, b);
    s_requant(c, nd, l->name, so, zo, to);
    return KL_OK;
}

/* kernel_shape, strides, pads of a 2-D pooling node: "R= S= stride= pad="
 * after src. */
static int s_pool_args(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                       bool is_max, const char *src, kl_buf_t *b)
{
    const KilnOnnx__AttributeProto *k = kl_onnx__attr(nd, "kernel_shape");
    if (!k || k->n_ints != 2)
        return kl_onnx__fail(c, nd, "kernel_shape must have 2 values");
    int64_t st, pad, dil;
    int rc = kl_onnx__window(c, nd, &st, &pad, &dil);
    if (rc)
        return rc;
    if (dil != 1)
        return kl_onnx__fail(c, nd, "dilated pooling is not supported");
    if (is_max && nd->n_output > 1 && nd->output[1][0])
        return kl_onnx__fail(c, nd,
                             "MaxPool's Indices output is not supported");
    if (!is_max && pad > 0 && !kl_onnx__aint(nd, "count_include_pad", 0))
        return kl_onnx__fail(c, nd,
                             "padding excluded from the average "
                             "(count_include_pad=0) is not supported");
    kl_buf_printf(b, "%s R=%lld S=%lld stride=%lld pad=%lld", src,
                  (long long)k->ints[0], (long long)k->ints[1], (long long)st,
                  (long long)pad);
    return KL_OK;
}

/* QLinearAveragePool (NCHW), and MaxPool of a quantized tensor (the
 * output keeps the input's scale and zero point). */
static int s_qpool(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, bool is_max)
{
    float si, so;
    int64_t zi, zo;
    kl_dtype ti, to;
    int rc;
    if (is_max) {
        if ((rc = s_qof(c, nd, nd->input[0], &si, &zi, &ti)))
            return rc;
        so = si, zo = zi, to = ti;
    } else {
        if (kl_onnx__aint(nd, "channels_last", 0))
            return kl_onnx__fail(
                c, nd, "channels_last=1 is not supported (NCHW only)");
        if ((rc = kl_onnx__qparams_at(c, nd, 1, 2, &si, &zi, &ti)) ||
            (rc = kl_onnx__qparams_at(c, nd, 3, 4, &so, &zo, &to)))
            return rc;
    }
    const char *x = s_deq(c, nd, 0, si, zi, &rc);
    if (!x)
        return rc;
    kl_buf_t args = {0};
    if ((rc = s_pool_args(c, nd, is_max, x, &args))) {
        kl_buf_free(&args);
        return rc;
    }
    kl_onnx__line_t *l =
        s_float_op(c, nd, is_max ? "max_pool2d" : "avg_pool2d");
    kl_buf_puts(&l->args, args.data);
    kl_buf_free(&args);
    s_requant(c, nd, l->name, so, zo, to);
    return KL_OK;
}

/* MaxPool of a u8 / s8 tensor; KL_ONNX__NEXT for a float one. */
static int s_qmaxpool(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const kl_onnx__val_t *x =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    if (x && (x->dt == KL_DT_U8 || x->dt == KL_DT_S8))
        return s_qpool(c, nd, true);
    return KL_ONNX__NEXT;
}

static int s_qavgpool(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return s_qpool(c, nd, false);
}

/* The operator form's nodes kiln has no layer for, and why. */
static int s_no_qmul(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    (void)nd;
    c->why = "kiln's graph has no elementwise product of two tensors";
    return KL_ONNX__UNSUP;
}

static int s_no_qconcat(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    (void)nd;
    c->why = "kiln's graph has no concatenation";
    return KL_ONNX__UNSUP;
}

static int s_no_qact(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    (void)nd;
    c->why = "kiln's graph has no leaky relu or sigmoid layer";
    return KL_ONNX__UNSUP;
}

const kl_onnx__op_t kl_onnx__qfp_ops[] = {
    {"MaxPool", s_qmaxpool, 0},
    {"QLinearAdd", s_qadd, KL_ONNX__MS},
    {"QLinearAveragePool", s_qavgpool, KL_ONNX__MS},
    {"QLinearMul", s_no_qmul, KL_ONNX__MS},
    {"QLinearConcat", s_no_qconcat, KL_ONNX__MS},
    {"QLinearLeakyRelu", s_no_qact, KL_ONNX__MS},
    {"QLinearSigmoid", s_no_qact, KL_ONNX__MS},
    {NULL, NULL, 0},
};
