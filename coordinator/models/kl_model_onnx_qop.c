/* kl_model_onnx_qop.c - ONNX import: the operator form of quantized models
 * beyond QLinearConv / QLinearMatMul (kl_model_onnx_q.c), and the integer
 * ops. onnxruntime's quantize_static with QuantFormat.QOperator writes
 * QuantizeLinear at the input, QLinearConv, com.microsoft's
 * QLinearGlobalAveragePool and QGemm on u8 tensors (Flatten in between
 * keeps the u8 type), and DequantizeLinear at the output; MatMulInteger
 * and ConvInteger give the s32 accumulator, which a Cast to float and a
 * Mul by a constant scale turn back into real numbers. Dynamic
 * quantization (DynamicQuantizeLinear: scale and zero point computed at
 * run time) is refused. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* The u8 tensor input 0 of nd, or NULL (*rc an error, or KL_ONNX__UNSUP with
 * c->why). */
static const kl_onnx__val_t *s_u8_in(kl_onnx__ctx_t *c,
                                     const kl_onnx__node_t *nd, int *rc)
{
    const kl_onnx__val_t *x =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    *rc = KL_OK;
    if (!x) {
        kl_onnx__in(c, nd, 0, rc);
        return NULL;
    }
    if (x->dt != KL_DT_U8) {
        c->why = "an input that is not a u8 tensor (kiln's q-ops read u8 "
                 "activations)";
        *rc = KL_ONNX__UNSUP;
        return NULL;
    }
    return x;
}

/* com.microsoft QGemm (A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale,
 * y_zp): with a quantized output, a qdense (transB=1) or qmatmul like
 * QLinearMatMul's. */
static int s_qgemm(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc;
    const kl_onnx__val_t *x = s_u8_in(c, nd, &rc);
    if (!x)
        return rc;
    if (nd->n_input < 8 || !nd->input[7][0])
        return kl_onnx__fail(c, nd,
                             "a QGemm with a float output (no y_scale) is not "
                             "supported");
    float xs, so;
    int64_t xzp, zo;
    kl_dtype xdt, dt;
    if ((rc = kl_onnx__qparams_at(c, nd, 1, 2, &xs, &xzp, &xdt)) ||
        (rc = kl_onnx__qparams_at(c, nd, 7, 8, &so, &zo, &dt)))
        return rc;
    const kl_onnx__tensor_t *w = kl_onnx__opt_init(c, nd, 3),
                            *b = kl_onnx__opt_init(c, nd, 6);
    if (!w || (nd->n_input > 6 && nd->input[6][0] && !b))
        return kl_onnx__fail(c, nd,
                             "the weight B and the bias C must be constants");
    kl_onnx__qsrc_t q = {.xk = x->kiln,
                         .xs = xs,
                         .xzp = xzp,
                         .w = w,
                         .wn = nd->input[3],
                         .ts = kl_onnx__opt_init(c, nd, 4),
                         .tsn = kl_onnx__opt_name(nd, 4),
                         .tz = kl_onnx__opt_init(c, nd, 5),
                         .tzn = kl_onnx__opt_name(nd, 5),
                         .tb = b,
                         .tbn = kl_onnx__opt_name(nd, 6),
                         .axis = -1};
    kl_onnx__line_t *l;
    if ((rc = kl_onnx__qmake(c, nd, &q, &l)))
        return rc;
    kl_onnx__qout(l, so, zo, dt);
    c->vals[c->nvals - 1].dt = dt;
    return KL_OK;
}

/* com.microsoft QLinearGlobalAveragePool (X, x_scale, x_zp, y_scale,
 * y_zp), NCHW: onnxruntime sums each channel's H*W codes in int32, adds
 * -x_zp*H*W and requantizes by x_scale / (y_scale * H*W) (f32). That is a
 * qdepthwise_conv2d over the whole image with weights 1, za = x_zp and
 * that scale: the same integers, not a float average in between. */
static int s_qgap(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc;
    const kl_onnx__val_t *x = s_u8_in(c, nd, &rc);
    if (!x)
        return rc;
    if (kl_onnx__aint(nd, "channels_last", 0))
        return kl_onnx__fail(c, nd,
                             "channels_last=1 is not supported (NCHW only)");
    float xs, so;
    int64_t xzp, zo;
    kl_dtype xdt, dt;
    if ((rc = kl_onnx__qparams_at(c, nd, 1, 2, &xs, &xzp, &xdt)) ||
        (rc = kl_onnx__qparams_at(c, nd, 3, 4, &so, &zo, &dt)))
        return rc;
    if (dt != KL_DT_U8)
        return kl_onnx__fail(c, nd,
                             "an int8 output (kiln's q-ops here give u8)");
    int64_t d[KL_MODEL_MAX_DIMS];
    int n = 0;
    if (!kl_onnx__shape(c, x->kiln, d, &n) || n != 4)
        return kl_onnx__fail(c, nd,
                             "its input's shape is not known as N,C,H,W");
    int64_t C = d[1], hw = d[2] * d[3];
    float sc = xs / (so * (float)hw);
    if (!(sc > 0) || !isfinite(sc))
        return kl_onnx__fail(c, nd,
                             "its requant scale is not a positive number");
    const char *src = x->kiln; /* x moves when a value is added */
    kl_onnx__line_t *l = kl_onnx__line(c, nd, "qdepthwise_conv2d");
    kl_buf_printf(&l->args,
                  "%s R=%lld S=%lld stride=1 pad=0 za=%lld zo=%lld "
                  "scale=%.9g",
                  src, (long long)d[2], (long long)d[3], (long long)xzp,
                  (long long)zo, (double)sc);
    l->q = l->params = true;
    l->nout = C;
    if (c->want) {
        l->wn = C * hw;
        l->w8 = kl_xmalloc((size_t)(l->wn ? l->wn : 1));
        memset(l->w8, 1, (size_t)l->wn);
    }
    c->vals[c->nvals - 1].dt = KL_DT_U8;
    return KL_OK;
}

/* MatMulInteger (A, B, a_zero_point, b_zero_point) and ConvInteger (x, w,
 * x_zero_point, w_zero_point): a u8 activation by a constant int8 weight
 * with zero point 0, the s32 accumulator out (out=s32). */
static int s_int_op(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc;
    const kl_onnx__val_t *x = s_u8_in(c, nd, &rc);
    if (!x)
        return rc;
    const kl_onnx__tensor_t *w = kl_onnx__opt_init(c, nd, 1);
    if (!w)
        return kl_onnx__fail(c, nd,
                             "the weight (input 1) must be a constant (an "
                             "initializer)");
    int64_t xzp = 0;
    bool has_z = nd->n_input > 2 && nd->input[2][0];
    const kl_onnx__tensor_t *tz = has_z ? kl_onnx__init(c, nd->input[2]) : NULL;
    if (has_z && !tz) {
        char msg[240];
        snprintf(msg, sizeof(msg),
                 "dynamic quantization is not supported: the zero point "
                 "'%.80s' is computed at run time (kiln imports statically "
                 "quantized models)",
                 nd->input[2]);
        return kl_onnx__fail(c, nd, msg);
    }
    if (tz) {
        int64_t *z, n;
        if (kl_onnx__numel(tz) != 1 || tz->data_type != KL_ONNX__T_U8)
            return kl_onnx__fail(
                c, nd,
                "the activation's zero point must be one uint8 "
                "(per tensor)");
        if ((rc = kl_onnx__ivals(c, tz, nd->input[2], &z, &n)))
            return rc;
        xzp = z[0];
        free(z);
    }
    const kl_onnx__tensor_t *wz = kl_onnx__opt_init(c, nd, 3);
    if (nd->n_input > 3 && nd->input[3][0] && !wz)
        return kl_onnx__fail(c, nd,
                             "the weight's zero point must be a constant");
    kl_onnx__qsrc_t q = {.xk = x->kiln,
                         .xs = 1,
                         .xzp = xzp,
                         .w = w,
                         .wn = nd->input[1],
                         .tz = wz,
                         .tzn = kl_onnx__opt_name(nd, 3),
                         .axis = -1,
                         .acc = true};
    kl_onnx__line_t *l;
    if ((rc = kl_onnx__qmake(c, nd, &q, &l)))
        return rc;
    c->vals[c->nvals - 1].dt = KL_DT_S32;
    return KL_OK;
}

/* Cast to float of an s32 accumulator, and the Mul by a constant f32
 * scalar that alone reads it (onnxruntime: float(acc) * s): one
 * dequantize layer (scale s, or 1 without the Mul). KL_ONNX__NEXT for a
 * Cast of a float. */
static int s_int_cast(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const kl_onnx__val_t *x =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    if (!x || x->dt == KL_DT_F32)
        return KL_ONNX__NEXT;
    if (x->dt != KL_DT_S32) {
        c->why = "a Cast of a quantized tensor (kiln's dequantize takes "
                 "its scale and zero point)";
        return KL_ONNX__UNSUP;
    }
    if (kl_onnx__aint(nd, "to", 0) != KL_ONNX__T_F32)
        return kl_onnx__fail(
            c, nd,
            "a Cast of an int32 accumulator to a type other than "
            "float");
    float sc = 1;
    int r = kl_onnx__reader(c, nd->output[0]);
    const kl_onnx__node_t *m =
        r >= 0 && kl_onnx__is(c->g->node[r], "Mul") ? c->g->node[r] : NULL;
    const char *o = m ? kl_onnx__other(m, nd->output[0]) : NULL;
    if (o) {
        const kl_onnx__tensor_t *t = kl_onnx__init(c, o);
        char msg[240];
        if (!t) {
            snprintf(msg, sizeof(msg),
                     "dynamic quantization is not supported: the scale "
                     "'%.80s' of the int32 accumulator is computed at run "
                     "time",
                     o);
            return kl_onnx__fail(c, m, msg);
        }
        if (kl_onnx__numel(t) != 1 || t->data_type != KL_ONNX__T_F32) {
            snprintf(msg, sizeof(msg),
                     "the scale '%.80s' of an int32 accumulator must be one "
                     "float (kiln's dequantize takes one scale)",
                     o);
            return kl_onnx__fail(c, m, msg);
        }
        float *f;
        int64_t n;
        int rc = kl_onnx__floats(c, t, o, &f, &n);
        if (rc)
            return rc;
        sc = f[0];
        free(f);
        if (!(sc > 0) || !isfinite(sc))
            return kl_onnx__fail(c, m, "a scale that is not a positive number");
        c->skip[r] = true;
    }
    const char *src = x->kiln; /* x moves when a value is added */
    kl_onnx__line_t *l = kl_onnx__line_for(c, o ? m->output[0] : nd->output[0],
                                           nd->input[0], "dequantize");
    kl_buf_printf(&l->args, "%s scale=%.9g", src, (double)sc);
    return KL_OK;
}

/* DynamicQuantizeLinear: refused. */
static int s_dynamic(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    char msg[300];
    snprintf(msg, sizeof(msg),
             "dynamic quantization is not supported: DynamicQuantizeLinear "
             "computes the scale and zero point of '%.80s' at run time; kiln "
             "imports statically quantized models (quantize_static, QDQ or "
             "QOperator format)",
             nd->n_input ? nd->input[0] : "");
    return kl_onnx__fail(c, nd, msg);
}

const kl_onnx__op_t kl_onnx__qop_ops[] = {
    {"MatMulInteger", s_int_op, 0},
    {"ConvInteger", s_int_op, 0},
    {"DynamicQuantizeLinear", s_dynamic, 0},
    {"Cast", s_int_cast, 0},
    {"QGemm", s_qgemm, KL_ONNX__MS},
    {"QLinearGlobalAveragePool", s_qgap, KL_ONNX__MS},
    {NULL, NULL, 0},
};
