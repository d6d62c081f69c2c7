/* kl_model_onnx_q.c - ONNX import: quantized nodes. QDQ groups and
 * QLinearConv / QLinearMatMul become q-ops (kl_ir_ops.c), other
 * QuantizeLinear / DequantizeLinear nodes quantize / dequantize layers. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* ---- QDQ: QuantizeLinear / DequantizeLinear around Conv, Gemm, MatMul ----
 *
 * onnxruntime's quantize_static (QDQ format) writes every quantized layer
 * as DequantizeLinear(activation) and DequantizeLinear(int8 weight, int32
 * bias) into a float Conv / Gemm / MatMul whose output goes to a
 * QuantizeLinear. Each such group folds into one q-op (kl_ir_ops.c):
 * za = the input's zero point, zo = the output's, requant scale
 * s_in * s_w[o] / s_out, the int8 weight and int32 bias as they are. A
 * QuantizeLinear of anything else is a quantize layer, and a
 * DequantizeLinear whose readers do not all fold a dequantize layer: the
 * graph leaves the integer domain there. */

/* The integer values of constant t (u8, s8 or s32) as int64, *n many. */
int kl_onnx__ivals(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                   const char *name, int64_t **out, int64_t *n)
{
    int dt = t->data_type;
    size_t sz = dt == KL_ONNX__T_S32 ? 4 : 1;
    *out = NULL;
    *n = kl_onnx__numel(t);
    if (dt != KL_ONNX__T_U8 && dt != KL_ONNX__T_S8 && dt != KL_ONNX__T_S32)
        return kl_onnx__terr(c, name, "not uint8, int8 or int32");
    if (*n < 0 || *n > ((int64_t)1 << 31))
        return kl_onnx__terr(c, name, "a bad size");
    int64_t *d = kl_xmalloc((size_t)(*n ? *n : 1) * sizeof(int64_t));
    if (t->has_raw_data && t->raw_data.len == (size_t)*n * sz) {
        for (int64_t i = 0; i < *n; i++) {
            const uint8_t *p = t->raw_data.data + (size_t)i * sz;
            if (dt == KL_ONNX__T_U8)
                d[i] = p[0];
            else if (dt == KL_ONNX__T_S8)
                d[i] = (int8_t)p[0];
            else {
                int32_t v;
                memcpy(&v, p, 4); /* little-endian */
                d[i] = v;
            }
        }
    } else if (!t->has_raw_data && t->n_int32_data == (size_t)*n) {
        for (int64_t i = 0; i < *n; i++)
            d[i] = t->int32_data[i];
    } else {
        free(d);
        return kl_onnx__terr(c, name,
                             "integer data of the wrong size (truncated?)");
    }
    *out = d;
    return KL_OK;
}

/* The DequantizeLinear node whose output is name and whose input is an
 * initializer (a quantized weight or bias), or NULL. */
static const kl_onnx__node_t *s_dq_const(const kl_onnx__ctx_t *c,
                                         const char *name)
{
    for (size_t i = 0; name && i < c->g->n_node; i++) {
        const kl_onnx__node_t *nd = c->g->node[i];
        if (kl_onnx__is(nd, "DequantizeLinear") && nd->n_output &&
            !strcmp(nd->output[0], name) && nd->n_input >= 2 &&
            kl_onnx__init(c, nd->input[0]))
            return nd;
    }
    return NULL;
}

/* Scale (f32) and zero point (inputs ks and kz of nd) of a per-tensor
 * quantization: *dt the zero point's kiln type (u8 when there is none).
 * Values that are not scalars or not constants: an error naming nd. */
int kl_onnx__qparams_at(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t ks,
                        size_t kz, float *scale, int64_t *zp, kl_dtype *dt)
{
    bool has_z = nd->n_input > kz && nd->input[kz][0];
    const kl_onnx__tensor_t *ts =
        nd->n_input > ks ? kl_onnx__init(c, nd->input[ks]) : NULL;
    const kl_onnx__tensor_t *tz =
        has_z ? kl_onnx__init(c, nd->input[kz]) : NULL;
    if ((nd->n_input > ks && nd->input[ks][0] && !ts) || (has_z && !tz)) {
        char msg[240];
        snprintf(msg, sizeof(msg),
                 "dynamic quantization is not supported: the scale or zero "
                 "point '%.80s' is computed at run time (kiln imports "
                 "statically quantized models)",
                 ts                 ? nd->input[kz]
                 : nd->n_input > ks ? nd->input[ks]
                                    : "");
        return kl_onnx__fail(c, nd, msg);
    }
    if (!ts || kl_onnx__numel(ts) != 1 || ts->data_type != KL_ONNX__T_F32 ||
        (has_z && kl_onnx__numel(tz) != 1))
        return kl_onnx__fail(
            c, nd,
            "the scale and zero point of a quantized activation "
            "must be constant scalars (per tensor)");
    float *f;
    int64_t n, *z = NULL;
    int rc = kl_onnx__floats(c, ts, nd->input[ks], &f, &n);
    if (rc)
        return rc;
    *scale = f[0];
    free(f);
    *zp = 0;
    *dt = KL_DT_U8;
    if (tz) {
        if (tz->data_type != KL_ONNX__T_U8 && tz->data_type != KL_ONNX__T_S8)
            return kl_onnx__fail(
                c, nd, "a quantized activation must be uint8 or int8");
        if ((rc = kl_onnx__ivals(c, tz, nd->input[kz], &z, &n)))
            return rc;
        *zp = z[0];
        *dt = tz->data_type == KL_ONNX__T_U8 ? KL_DT_U8 : KL_DT_S8;
        free(z);
    }
    if (!(*scale > 0) || !isfinite(*scale))
        return kl_onnx__fail(c, nd, "a scale that is not a positive number");
    return KL_OK;
}

static int s_qparams(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, float *scale,
                     int64_t *zp, kl_dtype *dt)
{
    return kl_onnx__qparams_at(c, nd, 1, 2, scale, zp, dt);
}

/* Does node nd (a reader of the dequantized value v) fold into a q-op:
 * Conv / Gemm / MatMul reading v as its input 0 with a DequantizeLinear'd
 * constant weight? */
static bool s_qreader(const kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      const char *v)
{
    return (kl_onnx__is(nd, "Conv") || kl_onnx__is(nd, "Gemm") ||
            kl_onnx__is(nd, "MatMul")) &&
           nd->n_input > 1 && !strcmp(nd->input[0], v) &&
           strcmp(nd->input[1], v) && s_dq_const(c, nd->input[1]);
}

static int s_dequantize(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    if (nd->n_input && kl_onnx__init(c, nd->input[0]))
        return KL_OK; /* a weight or bias: read by the q-op */
    const kl_onnx__val_t *x =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    if (!x)
        return kl_onnx__in(c, nd, 0, &rc), rc;
    if (x->dt != KL_DT_U8 && x->dt != KL_DT_S8) {
        c->why = "dequantizes a value that is not a quantized tensor";
        return KL_ONNX__UNSUP;
    }
    float sc;
    int64_t zp;
    kl_dtype dt;
    if ((rc = s_qparams(c, nd, &sc, &zp, &dt)))
        return rc;
    if (dt != x->dt)
        return kl_onnx__fail(c, nd, "its zero point's type is not its input's");
    /* Does every reader fold it (no float tensor needed)? */
    const char *out = nd->output[0];
    bool all = true;
    for (size_t i = 0; i < c->g->n_output; i++)
        all &= !(c->g->output[i]->name && !strcmp(c->g->output[i]->name, out));
    for (size_t i = 0; all && i < c->g->n_node; i++)
        for (size_t k = 0; k < c->g->node[i]->n_input; k++)
            if (!strcmp(c->g->node[i]->input[k], out) &&
                !s_qreader(c, c->g->node[i], out))
                all = false;
    const char *src = x->kiln; /* x moves when a value is added */
    kl_dtype xdt = x->dt;
    kl_onnx__val_t *v;
    if (all) {
        v = kl_onnx__add_val(c, out, x->kiln, x->line, false);
        v->virt = true;
        v->dt = xdt;
    } else {
        kl_onnx__line_t *l = kl_onnx__line(c, nd, "dequantize");
        kl_buf_printf(&l->args, "%s scale=%.9g zp=%lld", src, (double)sc,
                      (long long)zp);
        v = &c->vals[c->nvals - 1];
    }
    v->qkiln = src;
    v->qdt = xdt;
    v->qs = sc;
    v->qzp = zp;
    return KL_OK;
}

/* QuantizeLinear: folds into the pending q-op whose output it reads, else
 * a quantize layer. */
static int s_quantize(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    const kl_onnx__val_t *x =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    if (!x)
        return kl_onnx__in(c, nd, 0, &rc), rc;
    if (x->dt != KL_DT_F32 || x->virt) {
        c->why = "quantizes a value that is not f32";
        return KL_ONNX__UNSUP;
    }
    float so;
    int64_t zo;
    kl_dtype dt;
    if ((rc = s_qparams(c, nd, &so, &zo, &dt)))
        return rc;
    kl_onnx__line_t *l = x->line >= 0 ? &c->lines[x->line] : NULL;
    if (l && l->q && l->pending && c->g->node[l->qnode] == nd) {
        kl_onnx__qout(l, so, zo, dt);
        kl_onnx__alias(c, nd->output[0], x);
        c->vals[c->nvals - 1].dt = dt;
        return KL_OK;
    }
    const char *src = x->kiln; /* x moves when a value is added */
    kl_onnx__line_t *q = kl_onnx__line(c, nd, "quantize");
    kl_buf_printf(&q->args, "%s scale=%.9g zp=%lld%s", src, (double)so,
                  (long long)zo, dt == KL_DT_S8 ? " out=s8" : "");
    c->vals[c->nvals - 1].dt = dt;
    return KL_OK;
}

/* A q-op line for nd (Conv / QLinearConv / ConvInteger: qconv2d or
 * qdepthwise_conv2d, Gemm / QGemm transB=1: qdense, else qmatmul N=) from
 * q; pending its output's quantization (kl_onnx__qout), or (q->acc) the s32
 * accumulator out. */
int kl_onnx__qmake(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                   const kl_onnx__qsrc_t *q, kl_onnx__line_t **out)
{
    int rc = KL_OK;
    bool conv = kl_onnx__is(nd, "Conv") || kl_onnx__is(nd, "QLinearConv") ||
                kl_onnx__is(nd, "ConvInteger"),
         gemm = kl_onnx__is(nd, "Gemm") || kl_onnx__is(nd, "QGemm");
    const kl_onnx__tensor_t *w = q->w;
    if (w->data_type != KL_ONNX__T_S8)
        return kl_onnx__fail(c, nd, "a quantized weight that is not int8");
    if (gemm && (kl_onnx__aint(nd, "transA", 0) ||
                 kl_onnx__afloat(nd, "alpha", 1) != 1 ||
                 kl_onnx__afloat(nd, "beta", 1) != 1))
        return kl_onnx__fail(c, nd,
                             "a quantized Gemm with transA, alpha or beta");
    if ((conv && w->n_dims != 4) || (!conv && w->n_dims != 2))
        return kl_onnx__fail(c, nd, "a weight of the wrong rank");
    bool tb = gemm && kl_onnx__aint(nd, "transB", 0);
    int64_t nout = conv || tb ? w->dims[0] : w->dims[1];
    int64_t axis = q->axis < 0 ? (conv || tb ? 0 : 1) : q->axis;
    /* weight scales: one, or one per output channel on its axis */
    const kl_onnx__tensor_t *ts = q->ts, *tz = q->tz;
    if (q->acc
            ? ts != NULL
            : !ts || ts->data_type != KL_ONNX__T_F32 ||
                  (kl_onnx__numel(ts) != 1 && (kl_onnx__numel(ts) != nout ||
                                               axis != (conv || tb ? 0 : 1))))
        return kl_onnx__fail(c, nd,
                             "the weight's scale is neither one number nor one "
                             "per output channel");
    int64_t n, *zv = NULL;
    if (tz && (rc = kl_onnx__ivals(c, tz, q->tzn, &zv, &n)))
        return rc;
    for (int64_t i = 0; zv && i < n; i++)
        if (zv[i]) {
            char msg[240];
            snprintf(msg, sizeof(msg),
                     "an int8 weight with a zero point other than 0 ('%.80s' "
                     "is %lld at %lld; kiln's q-ops take symmetric weights)",
                     q->tzn, (long long)zv[i], (long long)i);
            free(zv);
            return kl_onnx__fail(c, nd, msg);
        }
    free(zv);
    const char *op = "qmatmul";
    int64_t st = 1, pad = 0, dil = 1,
            g = conv ? kl_onnx__aint(nd, "group", 1) : 1;
    bool dw = conv && g > 1 && w->dims[1] == 1;
    if (conv) {
        if ((rc = kl_onnx__window(c, nd, &st, &pad, &dil)))
            return rc;
        if (g > 1 && !dw)
            return kl_onnx__fail(c, nd, "a quantized grouped convolution");
        op = dw ? "qdepthwise_conv2d" : "qconv2d";
    } else if (tb)
        op = "qdense";
    kl_onnx__line_t *l = kl_onnx__line(c, nd, op);
    *out = l;
    l->q = l->params = true;
    l->pending = !q->acc;
    l->nout = nout;
    l->s_in = q->xs;
    kl_buf_printf(&l->args, "%s", q->xk);
    if (conv) {
        if (!dw)
            kl_buf_printf(&l->args, " K=%lld", (long long)nout);
        kl_buf_printf(&l->args, " R=%lld S=%lld stride=%lld pad=%lld",
                      (long long)w->dims[2], (long long)w->dims[3],
                      (long long)st, (long long)pad);
        if (dil != 1)
            kl_buf_printf(&l->args, " dilation=%lld", (long long)dil);
        if (dw && nout / g > 1)
            kl_buf_printf(&l->args, " multiplier=%lld", (long long)(nout / g));
    } else
        kl_buf_printf(&l->args, " %s=%lld", tb ? "O" : "N", (long long)nout);
    kl_buf_printf(&l->args, " za=%lld%s", (long long)q->xzp,
                  q->acc ? " out=s32" : "");
    if (ts && (rc = kl_onnx__floats(c, ts, q->tsn, &l->s_w, &l->ns_w)))
        return rc;
    if (c->want) {
        int64_t *wv;
        if ((rc = kl_onnx__ivals(c, w, q->wn, &wv, &l->wn)))
            return rc;
        l->w8 = kl_xmalloc((size_t)(l->wn ? l->wn : 1));
        for (int64_t i = 0; i < l->wn; i++)
            l->w8[i] = (int8_t)wv[i];
        free(wv);
    }
    /* the bias: int32, one a channel; QDQ's of scale s_in * s_w, zp 0 */
    const kl_onnx__tensor_t *tb32 = q->tb, *tbs = q->tbs, *bz = q->tbz;
    if (tb32) {
        if (tb32->data_type != KL_ONNX__T_S32 || kl_onnx__numel(tb32) != nout ||
            (tbs &&
             (tbs->data_type != KL_ONNX__T_F32 ||
              (kl_onnx__numel(tbs) != 1 && kl_onnx__numel(tbs) != nout))))
            return kl_onnx__fail(c, nd,
                                 "the bias of a quantized layer must be int32, "
                                 "one value per output");
        float *bs = NULL;
        int64_t nbs = 0, *bv = NULL;
        if (tbs && (rc = kl_onnx__floats(c, tbs, q->tbsn, &bs, &nbs)))
            return rc;
        for (int64_t k = 0; bs && k < nout && !rc; k++) {
            float want = l->s_in * l->s_w[l->ns_w == 1 ? 0 : k];
            float got = bs[nbs == 1 ? 0 : k];
            if (fabsf(got - want) > 1e-6f * want)
                rc = kl_onnx__fail(
                    c, nd,
                    "the bias's scale is not the input's times the "
                    "weight's");
        }
        free(bs);
        if (!rc && bz && (rc = kl_onnx__ivals(c, bz, q->tbzn, &bv, &nbs)) == 0)
            for (int64_t k = 0; k < nbs && !rc; k++)
                if (bv[k])
                    rc =
                        kl_onnx__fail(c, nd, "an int32 bias with a zero point");
        free(bv);
        if (rc)
            return rc;
        l->bias = true;
        if (c->want) {
            if ((rc = kl_onnx__ivals(c, tb32, q->tbn, &bv, &nbs)))
                return rc;
            l->b32 = kl_xmalloc((size_t)nout * sizeof(int32_t));
            for (int64_t k = 0; k < nout; k++)
                l->b32[k] = (int32_t)bv[k];
            free(bv);
        }
    } else if (tb) /* qdense has bias=1 by default: zeros */
        l->bias = true;
    return KL_OK;
}

/* The q-op l's output quantization (scale so, zero point zo, type dt):
 * requant scale (s_in * s_w[o]) / s_out in f32, as onnxruntime computes
 * it. */
void kl_onnx__qout(kl_onnx__line_t *l, float so, int64_t zo, kl_dtype dt)
{
    l->pending = false;
    l->nrq = l->ns_w;
    l->rq = kl_xmalloc((size_t)l->nrq * sizeof(float));
    for (int64_t k = 0; k < l->nrq; k++) {
        float t = l->s_in * l->s_w[k];
        l->rq[k] = t / so;
    }
    kl_buf_printf(&l->args, " zo=%lld", (long long)zo);
    if (l->nrq > 1)
        kl_buf_puts(&l->args, " scale=channel");
    else
        kl_buf_printf(&l->args, " scale=%.9g", (double)l->rq[0]);
    if (dt == KL_DT_S8)
        kl_buf_puts(&l->args, " out=s8");
    /* A Relu or Clip before the QuantizeLinear: Q is monotonic, so
     * Q(clip(y, lo, hi)) = clip(Q(y), Q(lo), Q(hi)) in quantized units
     * (relu: clip(zo, max)). */
    float omin = dt == KL_DT_U8 ? 0 : -128, omax = dt == KL_DT_U8 ? 255 : 127;
    float qlo = l->has_lo ? nearbyintf(l->clo / so) + (float)zo : omin;
    float qhi = l->has_hi ? nearbyintf(l->chi / so) + (float)zo : omax;
    qlo = qlo < omin ? omin : qlo > omax ? omax : qlo;
    qhi = qhi < omin ? omin : qhi > omax ? omax : qhi;
    if (l->act == 1 || (l->act == 2 && qlo == (float)zo && qhi == omax))
        kl_buf_puts(&l->args, " relu=1");
    else if (l->act == 2)
        kl_buf_printf(&l->args, " clip=%lld,%lld", (long long)qlo,
                      (long long)qhi);
}

const kl_onnx__tensor_t *kl_onnx__opt_init(const kl_onnx__ctx_t *c,
                                           const kl_onnx__node_t *nd, size_t k)
{
    return k < nd->n_input && nd->input[k][0] ? kl_onnx__init(c, nd->input[k])
                                              : NULL;
}

const char *kl_onnx__opt_name(const kl_onnx__node_t *nd, size_t k)
{
    return k < nd->n_input ? nd->input[k] : "";
}

/* Conv / Gemm / MatMul of a dequantized u8 activation by a dequantized s8
 * weight (and int32 bias), whose output one QuantizeLinear reads: a q-op,
 * its requant scale set when that QuantizeLinear folds (s_quantize). */
static int s_qlayer(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const kl_onnx__val_t *x = kl_onnx__val(c, nd->input[0]);
    const kl_onnx__node_t *wdq = s_dq_const(c, nd->input[1]);
    /* the quantized tensor's type (x is f32 when a dequantize layer was
     * written for other readers, a residual Add's) */
    if (!x || !x->qkiln || x->qdt != KL_DT_U8) {
        c->why = !x || !x->qkiln
                     ? "an int8 weight on a float input (only QDQ on both)"
                     : "an int8 input (kiln's q-ops read u8 activations)";
        return KL_ONNX__UNSUP;
    }
    int r = kl_onnx__reader(c, nd->output[0]), act = 0, ar = -1;
    bool has_lo = false, has_hi = false;
    float lo = 0, hi = 0;
    int rc = KL_OK;
    if (r >= 0 && (kl_onnx__is(c->g->node[r], "Relu") ||
                   kl_onnx__is(c->g->node[r], "Clip"))) {
        const kl_onnx__node_t *a = c->g->node[r];
        act = kl_onnx__is(a, "Relu") ? 1 : 2;
        if (act == 1)
            has_lo = true;
        else if ((rc = kl_onnx__clip_bound(c, a, 1, "min", &has_lo, &lo)) ||
                 (rc = kl_onnx__clip_bound(c, a, 2, "max", &has_hi, &hi)))
            return rc;
        ar = r;
        r = kl_onnx__reader(c, a->output[0]);
    }
    if (r < 0 || !kl_onnx__is(c->g->node[r], "QuantizeLinear")) {
        c->why = act ? "its Relu / Clip is not read by one QuantizeLinear "
                       "alone"
                     : "its output is not read by one QuantizeLinear alone";
        return KL_ONNX__UNSUP;
    }
    kl_onnx__qsrc_t q = {.xk = x->qkiln,
                         .xs = x->qs,
                         .xzp = x->qzp,
                         .w = kl_onnx__init(c, wdq->input[0]),
                         .wn = wdq->input[0],
                         .ts = kl_onnx__opt_init(c, wdq, 1),
                         .tsn = kl_onnx__opt_name(wdq, 1),
                         .tz = kl_onnx__opt_init(c, wdq, 2),
                         .tzn = kl_onnx__opt_name(wdq, 2),
                         .axis = kl_onnx__aint(wdq, "axis", 1)};
    if (nd->n_input > 2 && nd->input[2][0]) {
        const kl_onnx__node_t *bdq = s_dq_const(c, nd->input[2]);
        if (!bdq)
            return kl_onnx__fail(
                c, nd,
                "the bias of a quantized layer must be an int32 "
                "DequantizeLinear");
        q.tb = kl_onnx__init(c, bdq->input[0]);
        q.tbn = bdq->input[0];
        q.tbs = kl_onnx__opt_init(c, bdq, 1);
        q.tbsn = kl_onnx__opt_name(bdq, 1);
        q.tbz = kl_onnx__opt_init(c, bdq, 2);
        q.tbzn = kl_onnx__opt_name(bdq, 2);
        if (!q.tbs)
            return kl_onnx__fail(c, nd,
                                 "the bias's DequantizeLinear has no scale");
    }
    kl_onnx__line_t *l;
    if ((rc = kl_onnx__qmake(c, nd, &q, &l)))
        return rc;
    l->qnode = r;
    l->act = act;
    l->has_lo = has_lo;
    l->has_hi = has_hi;
    l->clo = lo;
    l->chi = hi;
    if (ar >= 0) { /* the Relu / Clip folds: its output is the layer's */
        c->skip[ar] = true;
        kl_onnx__alias(c, c->g->node[ar]->output[0],
                       kl_onnx__val(c, nd->output[0]));
    }
    return KL_OK;
}

/* QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B]) and
 * QLinearMatMul (a, .., b, .., y_scale, y_zp) by constant int8 weights on
 * a u8 tensor: one q-op, its output quantization at once. */
static int s_qlinear(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    const kl_onnx__val_t *x =
        nd->n_input ? kl_onnx__val(c, nd->input[0]) : NULL;
    if (!x)
        return kl_onnx__in(c, nd, 0, &rc), rc;
    if (x->dt != KL_DT_U8 || nd->n_input < 8) {
        c->why = x->dt != KL_DT_U8 ? "an input that is not a u8 tensor"
                                   : "fewer than 8 inputs";
        return KL_ONNX__UNSUP;
    }
    const kl_onnx__tensor_t *t[9];
    for (size_t k = 0; k < 9; k++)
        t[k] = kl_onnx__opt_init(c, nd, k);
    if (!t[1] || !t[3] || !t[4] || !t[6] || kl_onnx__numel(t[1]) != 1 ||
        kl_onnx__numel(t[6]) != 1 || t[1]->data_type != KL_ONNX__T_F32 ||
        t[6]->data_type != KL_ONNX__T_F32 ||
        (t[2] && kl_onnx__numel(t[2]) != 1) ||
        (t[7] && kl_onnx__numel(t[7]) != 1) ||
        (nd->n_input > 8 && nd->input[8][0] && !t[8]))
        return kl_onnx__fail(
            c, nd,
            "scales, zero points, the weight and the bias must be "
            "constants (the input's and output's scalars)");
    float *f, xs, so;
    int64_t n, *z = NULL, xzp = 0, zo = 0;
    if ((rc = kl_onnx__floats(c, t[1], nd->input[1], &f, &n)))
        return rc;
    xs = f[0];
    free(f);
    if ((rc = kl_onnx__floats(c, t[6], nd->input[6], &f, &n)))
        return rc;
    so = f[0];
    free(f);
    kl_dtype dt = KL_DT_U8;
    if (t[2] && !(rc = kl_onnx__ivals(c, t[2], nd->input[2], &z, &n)))
        xzp = z[0];
    free(z);
    z = NULL;
    if (!rc && t[7] && !(rc = kl_onnx__ivals(c, t[7], nd->input[7], &z, &n))) {
        zo = z[0];
        dt = t[7]->data_type == KL_ONNX__T_S8 ? KL_DT_S8 : KL_DT_U8;
    }
    free(z);
    if (rc)
        return rc;
    kl_onnx__qsrc_t q = {.xk = x->kiln,
                         .xs = xs,
                         .xzp = xzp,
                         .w = t[3],
                         .wn = nd->input[3],
                         .ts = t[4],
                         .tsn = nd->input[4],
                         .tz = t[5],
                         .tzn = kl_onnx__opt_name(nd, 5),
                         .tb = t[8],
                         .tbn = kl_onnx__opt_name(nd, 8),
                         .axis = -1};
    kl_onnx__line_t *l;
    if ((rc = kl_onnx__qmake(c, nd, &q, &l)))
        return rc;
    kl_onnx__qout(l, so, zo, dt);
    c->vals[c->nvals - 1].dt = dt; /* the line's output value */
    return KL_OK;
}

/* Conv, Gemm and MatMul by a DequantizeLinear of a constant (QDQ): a
 * q-op; KL_ONNX__NEXT for a float weight. */
static int s_qdq(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    if (nd->n_input > 1 && s_dq_const(c, nd->input[1]))
        return s_qlayer(c, nd);
    return KL_ONNX__NEXT;
}

const kl_onnx__op_t kl_onnx__q_ops[] = {
    {"QuantizeLinear", s_quantize, 0},
    {"DequantizeLinear", s_dequantize, 0},
    {"QLinearConv", s_qlinear, 0},
    {"QLinearMatMul", s_qlinear, 0},
    {"Conv", s_qdq, 0},
    {"Gemm", s_qdq, 0},
    {"MatMul", s_qdq, 0},
    {NULL, NULL, 0},
};
