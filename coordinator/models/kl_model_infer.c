/* kl_model_infer.c - the graph parser's layer semantics: each layer's
 * attributes read and checked against its inputs, and its output shape
 * and element type inferred (docs/models.md, the graph format), as the
 * parser (kl_model_parse.c) reads the layer. */
#include "kl_model_parse_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* ---- shapes ---- */

static int s_need_ndim(kl_mgraph__ctx_t *c, const kl_mnode_t *nd,
                       const kl_mnode_t *in, int want, const char *what)
{
    if (in->ndim == want)
        return KL_OK;
    char sh[160];
    kl_mgraph__shape_text(in->shape, in->ndim, sh, sizeof(sh));
    return kl_mgraph__err(
        c, "layer '%s': %s expects a %d-D %s input, got '%s' (%s)", nd->name,
        kl_mop_name(nd->op), want, what, in->name, sh);
}

static int s_window(kl_mgraph__ctx_t *c, const kl_mnode_t *nd, int64_t in,
                    int64_t k, int64_t *out)
{
    int64_t span = in + 2 * nd->pad - nd->dil * (k - 1) - 1;
    if (span < 0)
        return kl_mgraph__err(
            c,
            "layer '%s': the %lldx window does not fit the padded "
            "input (%lld + 2*%lld)",
            nd->name, (long long)k, (long long)in, (long long)nd->pad);
    *out = span / nd->stride + 1;
    return KL_OK;
}

/* conv2d, depthwise_conv2d and the pools: attributes and NCHW output. */
static int s_spatial(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                     const kl_mnode_t *x)
{
    bool pool = nd->op == KL_MOP_MAX_POOL || nd->op == KL_MOP_AVG_POOL;
    int rc = s_need_ndim(c, nd, x, 4, "NCHW");
    if (!rc)
        rc = kl_mgraph__int(c, from, nd, "R", -1, 1, &nd->R);
    if (!rc)
        rc = kl_mgraph__int(c, from, nd, "S", nd->R, 1, &nd->S) ?:
             kl_mgraph__int(c, from, nd, "stride", pool ? nd->R : 1, 1, &nd->stride) ?:
             kl_mgraph__int(c, from, nd, "pad", 0, 0, &nd->pad);
    if (rc)
        return rc;
    nd->dil = 1;
    if (!pool)
        rc = kl_mgraph__int(c, from, nd, "dilation", 1, 1, &nd->dil) ?:
             kl_mgraph__flag(c, from, nd, "bias", false, &nd->bias) ?:
             kl_mgraph__flag(c, from, nd, "relu", false, &nd->relu);
    if (!rc && nd->op == KL_MOP_CONV2D)
        rc = kl_mgraph__int(c, from, nd, "K", -1, 1, &nd->K)
                 ?: kl_mgraph__int(c, from, nd, "groups", 1, 1, &nd->groups);
    if (!rc && nd->op == KL_MOP_DEPTHWISE)
        rc = kl_mgraph__int(c, from, nd, "multiplier", 1, 1, &nd->mult);
    if (rc)
        return rc;
    int64_t ch = x->shape[1];
    if (nd->op == KL_MOP_CONV2D)
        ch = nd->K;
    else if (nd->op == KL_MOP_DEPTHWISE)
        ch = x->shape[1] * nd->mult;
    nd->ndim = 4;
    nd->shape[0] = x->shape[0];
    nd->shape[1] = ch;
    return s_window(c, nd, x->shape[2], nd->R, &nd->shape[2])
               ?: s_window(c, nd, x->shape[3], nd->S, &nd->shape[3]);
}

static int64_t s_numel(const int64_t *d, int nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= d[i];
    return n;
}

static int s_matmuls(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *a = &c->g->nodes[nd->in[0]];
    if (nd->op == KL_MOP_DENSE) {
        int rc = s_need_ndim(c, nd, a, 2, "[N,I]") ?:
                 kl_mgraph__int(c, from, nd, "O", -1, 1, &nd->O) ?:
                 kl_mgraph__flag(c, from, nd, "bias", true, &nd->bias) ?:
                 kl_mgraph__flag(c, from, nd, "relu", false, &nd->relu);
        nd->ndim = 2;
        nd->shape[0] = a->shape[0];
        nd->shape[1] = nd->O;
        return rc;
    }
    const kl_mnode_t *b = nd->nin > 1 ? &c->g->nodes[nd->in[1]] : NULL;
    char sa[160], sb[160];
    kl_mgraph__shape_text(a->shape, a->ndim, sa, sizeof(sa));
    if (b)
        kl_mgraph__shape_text(b->shape, b->ndim, sb, sizeof(sb));
    /* numpy's matmul: two inputs of 3 or more dimensions are a batch */
    if (nd->op == KL_MOP_MATMUL && b && a->ndim >= 3 && b->ndim >= 3)
        nd->op = KL_MOP_BATCH_MATMUL;
    int rc = KL_OK;
    if (nd->op == KL_MOP_MATMUL) {
        /* by a weight, A may have any leading dims (M is their product);
         * two values are 2-D */
        rc = b             ? s_need_ndim(c, nd, a, 2, "[M,K]")
                                 ?: s_need_ndim(c, nd, b, 2, "[K,N]")
                         : a->ndim < 2 ? s_need_ndim(c, nd, a, 2, "[...,M,K]")
                           : KL_OK;
        if (!rc)
            rc = kl_mgraph__flag(c, from, nd, "bias", false, &nd->bias)
                     ?: kl_mgraph__flag(c, from, nd, "relu", false, &nd->relu);
        if (!rc && !b)
            rc = kl_mgraph__int(c, from, nd, "N", -1, 1, &nd->N);
        else if (!rc && kl_mgraph__attr(c, from, "N"))
            rc = kl_mgraph__err(
                c, "layer '%s': N= is for a matmul with one input", nd->name);
        if (rc)
            return rc;
        if (b)
            nd->N = b->shape[1];
        if (b && b->shape[0] != a->shape[1])
            return kl_mgraph__err(c, "layer '%s': matmul of %s by %s", nd->name,
                                  sa, sb);
        nd->ndim = a->ndim;
        memcpy(nd->shape, a->shape, sizeof(nd->shape));
        nd->shape[a->ndim - 1] = nd->N;
        return KL_OK;
    }
    /* batch_matmul: [...,M,K] by [...,K,N], the same leading dims */
    rc = s_need_ndim(c, nd, a, a->ndim >= 3 ? a->ndim : 3, "[B,...,M,K]");
    if (!rc)
        rc = s_need_ndim(c, nd, b, a->ndim, "[B,...,K,N]");
    if (rc)
        return rc;
    int r = a->ndim;
    if (memcmp(a->shape, b->shape, (size_t)(r - 2) * sizeof(int64_t)) ||
        a->shape[r - 1] != b->shape[r - 2])
        return kl_mgraph__err(c, "layer '%s': batch_matmul of %s by %s",
                              nd->name, sa, sb);
    nd->ndim = r;
    memcpy(nd->shape, a->shape, sizeof(nd->shape));
    nd->shape[r - 1] = b->shape[r - 1];
    return KL_OK;
}

/* reshape's shape=: dims, where 0 copies the input's dim and one -1 takes
 * what is left (ONNX's rules). */
static int s_reshape_dims(kl_mgraph__ctx_t *c, const kl_mnode_t *nd,
                          const kl_mnode_t *x, const char *v, int64_t *d,
                          int *n)
{
    char *copy = kl_xstrdup(v);
    int infer = -1, rc = KL_OK;
    *n = 0;
    for (char *p = copy, *tok; (tok = strsep(&p, "x")) && !rc;) {
        if (*n == KL_MODEL_MAX_DIMS)
            rc = kl_mgraph__err(c, "layer '%s': more than %d dims in shape=%s",
                                nd->name, KL_MODEL_MAX_DIMS, v);
        else if (strcmp(tok, "-1") == 0 && infer < 0)
            d[infer = (*n)++] = 1;
        else if (strcmp(tok, "0") == 0 && *n < x->ndim)
            d[*n] = x->shape[*n], (*n)++;
        else if ((rc = kl_mgraph__dims(c, "shape", tok, 'x', false, &d[*n],
                                       &(int){0})))
            break;
        else
            (*n)++;
    }
    free(copy);
    if (!rc && infer >= 0) {
        int64_t rest = s_numel(d, *n), all = s_numel(x->shape, x->ndim);
        if (all % rest)
            rc = kl_mgraph__err(
                c, "layer '%s': shape=%s does not divide %lld elements",
                nd->name, v, (long long)all);
        else
            d[infer] = all / rest;
    }
    return rc;
}

static int s_views(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *x = &c->g->nodes[nd->in[0]];
    if (nd->op == KL_MOP_FLATTEN) {
        if (x->ndim < 2)
            return s_need_ndim(c, nd, x, 2, "(at least)");
        nd->ndim = 2;
        nd->shape[0] = x->shape[0];
        nd->shape[1] = s_numel(x->shape + 1, x->ndim - 1);
        return KL_OK;
    }
    const char *v =
        kl_mgraph__attr(c, from, nd->op == KL_MOP_RESHAPE ? "shape" : "perm");
    if (!v)
        return kl_mgraph__err(c, "layer '%s': %s needs %s=", nd->name,
                              kl_mop_name(nd->op),
                              nd->op == KL_MOP_RESHAPE ? "shape" : "perm");
    int64_t d[KL_MODEL_MAX_DIMS];
    int n;
    if (nd->op == KL_MOP_RESHAPE) {
        int rc = s_reshape_dims(c, nd, x, v, d, &n);
        if (rc)
            return rc;
        if (s_numel(d, n) != s_numel(x->shape, x->ndim))
            return kl_mgraph__err(
                c, "layer '%s': reshape of %lld elements to %s", nd->name,
                (long long)s_numel(x->shape, x->ndim), v);
        nd->ndim = n;
        memcpy(nd->shape, d, (size_t)n * sizeof(int64_t));
        return KL_OK;
    }
    int rc = kl_mgraph__dims(c, "perm", v, ',', true, d, &n);
    if (rc)
        return rc;
    bool seen[KL_MODEL_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        if (n != x->ndim || d[i] >= n || seen[d[i]])
            return kl_mgraph__err(
                c,
                "layer '%s': perm=%s is not a permutation of the "
                "%d dimensions of '%s'",
                nd->name, v, x->ndim, x->name);
        seen[d[i]] = true;
    }
    nd->ndim = n;
    for (int i = 0; i < n; i++) {
        nd->shape[i] = x->shape[d[i]];
        nd->perm[i] = (int)d[i];
    }
    return KL_OK;
}

/* clip: its bounds, lo <= hi; the input's shape. */
static int s_clip(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                  const kl_mnode_t *x)
{
    int rc = kl_mgraph__num(c, from, nd, "lo", &nd->lo)
                 ?: kl_mgraph__num(c, from, nd, "hi", &nd->hi);
    if (!rc && nd->lo > nd->hi)
        rc = kl_mgraph__err(c, "layer '%s': clip lo=%s is above hi=%s",
                            nd->name, kl_mgraph__attr(c, from, "lo"),
                            kl_mgraph__attr(c, from, "hi"));
    nd->ndim = x->ndim;
    memcpy(nd->shape, x->shape, sizeof(nd->shape));
    return rc;
}

/* An activation: its input's shape; alpha and beta where the op has
 * them, ONNX's defaults when not given (hard_sigmoid 0.2 and 0.5,
 * leaky_relu 0.01, elu 1). */
static int s_act(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                 const kl_mnode_t *x)
{
    nd->alpha = nd->op == KL_MOP_HARD_SIGMOID ? 0.2
                : nd->op == KL_MOP_LEAKY_RELU ? 0.01
                                              : 1.0;
    nd->beta = 0.5;
    int rc = KL_OK;
    if (kl_mgraph__attr(c, from, "alpha"))
        rc = kl_mgraph__num(c, from, nd, "alpha", &nd->alpha);
    if (!rc && kl_mgraph__attr(c, from, "beta"))
        rc = kl_mgraph__num(c, from, nd, "beta", &nd->beta);
    nd->ndim = x->ndim;
    memcpy(nd->shape, x->shape, sizeof(nd->shape));
    return rc;
}

/* out=u8|s8 (|s32 when s32_ok), default u8. */
static int s_qtype(kl_mgraph__ctx_t *c, int from, const kl_mnode_t *nd,
                   bool s32_ok, kl_dtype *out)
{
    const char *v = kl_mgraph__attr(c, from, "out");
    *out = KL_DT_U8;
    if (!v || !strcmp(v, "u8"))
        return KL_OK;
    if (!strcmp(v, "s8"))
        *out = KL_DT_S8;
    else if (s32_ok && (!strcmp(v, "s32") || !strcmp(v, "i32")))
        *out = KL_DT_S32;
    else
        return kl_mgraph__err(c,
                              "layer '%s': bad value '%s' for out (u8, s8%s)",
                              nd->name, v, s32_ok ? " or s32" : "");
    return KL_OK;
}

/* A positive finite f32 scale= (or "channel" when channel_ok). */
static int s_scale(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                   bool channel_ok)
{
    const char *v = kl_mgraph__attr(c, from, "scale");
    nd->per_channel = channel_ok && (!v || !strcmp(v, "channel"));
    if (nd->per_channel)
        return KL_OK;
    int rc = kl_mgraph__num(c, from, nd, "scale", &nd->scale);
    if (!rc &&
        !(nd->scale > 0 && isfinite((float)nd->scale) && (float)nd->scale > 0))
        rc = kl_mgraph__err(c,
                            "layer '%s': scale=%s is not a positive f32 number",
                            nd->name, v);
    return rc;
}

/* A zero point of type dt in [lo, hi] (0 when absent). */
static int s_zero_point(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                        const char *key, kl_dtype dt, int64_t *out)
{
    const char *v = kl_mgraph__attr(c, from, key);
    *out = 0;
    if (!v)
        return KL_OK;
    char *end;
    errno = 0;
    long long z = strtoll(v, &end, 10);
    long long lo = dt == KL_DT_U8 ? 0 : -128, hi = dt == KL_DT_U8 ? 255 : 127;
    if (errno || end == v || *end || dt == KL_DT_S32 || z < lo || z > hi)
        return kl_mgraph__err(
            c, "layer '%s': bad value '%s' for %s (%s: %lld..%lld)", nd->name,
            v, key, kl_dtype_name(dt), lo, hi);
    *out = z;
    return KL_OK;
}

/* Element types: a q-op reads u8, dequantize an integer tensor, quantize
 * and every float layer f32 (views keep their input's type). */
static int s_types(kl_mgraph__ctx_t *c, kl_mnode_t *nd)
{
    bool view = nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE ||
                nd->op == KL_MOP_TRANSPOSE;
    for (int k = 0; k < nd->nin; k++) {
        const kl_mnode_t *x = &c->g->nodes[nd->in[k]];
        const char *want = NULL;
        if (kl_mop_is_q(nd->op))
            want = x->dt == KL_DT_U8 ? NULL : "a u8 input (quantize it first)";
        else if (nd->op == KL_MOP_DEQUANTIZE)
            want = x->dt == KL_DT_U8 || x->dt == KL_DT_S8 || x->dt == KL_DT_S32
                       ? NULL
                       : "a u8, s8 or s32 input";
        else if (!view && x->dt != KL_DT_F32)
            want = "an f32 input (dequantize it first)";
        if (want)
            return kl_mgraph__err(c, "layer '%s': %s needs %s, '%s' is %s",
                                  nd->name, kl_mop_name(nd->op), want, x->name,
                                  kl_dtype_name(x->dt));
        if (view)
            nd->dt = x->dt;
    }
    return KL_OK;
}

/* A q-op's quantization, or quantize's / dequantize's; shapes. */
static int s_quant(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd,
                   const kl_mnode_t *x)
{
    int rc;
    if (nd->op == KL_MOP_QUANTIZE || nd->op == KL_MOP_DEQUANTIZE) {
        kl_dtype t = x->dt;
        rc =
            nd->op == KL_MOP_QUANTIZE ? s_qtype(c, from, nd, false, &t) : KL_OK;
        if (!rc)
            rc = s_scale(c, from, nd, false)
                     ?: s_zero_point(c, from, nd, "zp", t, &nd->zo);
        nd->qout = t;
        nd->dt = nd->op == KL_MOP_QUANTIZE ? t : KL_DT_F32;
        nd->ndim = x->ndim;
        memcpy(nd->shape, x->shape, sizeof(nd->shape));
        return rc;
    }
    nd->op = kl_mop_base(nd->op);
    kl_mop q = nd->op == KL_MOP_CONV2D      ? KL_MOP_QCONV2D
               : nd->op == KL_MOP_DEPTHWISE ? KL_MOP_QDEPTHWISE
               : nd->op == KL_MOP_DENSE     ? KL_MOP_QDENSE
                                            : KL_MOP_QMATMUL;
    rc = nd->op == KL_MOP_DENSE || nd->op == KL_MOP_MATMUL
             ? s_matmuls(c, from, nd)
             : s_spatial(c, from, nd, x);
    nd->op = q;
    if (!rc)
        rc = s_qtype(c, from, nd, true, &nd->qout)
                 ?: s_zero_point(c, from, nd, "za", KL_DT_U8, &nd->za);
    if (!rc && nd->qout == KL_DT_S32 &&
        (kl_mgraph__attr(c, from, "zo") || kl_mgraph__attr(c, from, "scale")))
        rc = kl_mgraph__err(c,
                            "layer '%s': out=s32 has no zo= or scale= (the "
                            "accumulator is not requantized)",
                            nd->name);
    if (!rc && nd->qout != KL_DT_S32)
        rc = s_zero_point(c, from, nd, "zo", nd->qout, &nd->zo)
                 ?: s_scale(c, from, nd, true);
    const char *cv = rc ? NULL : kl_mgraph__attr(c, from, "clip");
    if (cv) { /* clip=LO,HI in quantized units */
        char *e1, *e2 = NULL;
        errno = 0;
        long long lo = strtoll(cv, &e1, 10), hi = 0;
        if (*e1 == ',')
            hi = strtoll(e1 + 1, &e2, 10);
        if (errno || e1 == cv || *e1 != ',' || !e2 || e2 == e1 + 1 || *e2 ||
            lo > hi || nd->relu)
            rc = kl_mgraph__err(
                c,
                "layer '%s': bad clip=%s (LO,HI integers, LO <= HI, "
                "without relu=1)",
                nd->name, cv);
        nd->clip = true;
        nd->lo = (double)lo;
        nd->hi = (double)hi;
    }
    nd->dt = nd->qout;
    return rc;
}

/* Attributes and output shape of a layer whose inputs are set; add, gelu
 * and the general ops are kl_model_infer_general.c's. */
int kl_mgraph__infer(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *x = &c->g->nodes[nd->in[0]];
    int trc = s_types(c, nd);
    if (trc)
        return trc;
    if (kl_mop_is_q(nd->op) || nd->op == KL_MOP_QUANTIZE ||
        nd->op == KL_MOP_DEQUANTIZE)
        return s_quant(c, from, nd, x);
    if (nd->op == KL_MOP_ADD || nd->op == KL_MOP_GELU ||
        kl_mop_is_general(nd->op))
        return kl_mgraph__infer_general(c, from, nd);
    switch (nd->op) {
    case KL_MOP_CONV2D:
    case KL_MOP_DEPTHWISE:
    case KL_MOP_MAX_POOL:
    case KL_MOP_AVG_POOL:
        return s_spatial(c, from, nd, x);
    case KL_MOP_DENSE:
    case KL_MOP_MATMUL:
    case KL_MOP_BATCH_MATMUL:
        return s_matmuls(c, from, nd);
    case KL_MOP_GLOBAL_AVG_POOL: {
        int rc = s_need_ndim(c, nd, x, 4, "NCHW");
        nd->ndim = 4;
        nd->shape[0] = x->shape[0];
        nd->shape[1] = x->shape[1];
        nd->shape[2] = nd->shape[3] = 1;
        return rc;
    }
    case KL_MOP_CLIP:
        return s_clip(c, from, nd, x);
    case KL_MOP_SIGMOID:
    case KL_MOP_TANH:
    case KL_MOP_HARD_SIGMOID:
    case KL_MOP_HARD_SWISH:
    case KL_MOP_LEAKY_RELU:
    case KL_MOP_ELU:
    case KL_MOP_SILU:
        return s_act(c, from, nd, x);
    case KL_MOP_LAYER_NORM: {
        nd->eps = 1e-5;
        int rc = kl_mgraph__attr(c, from, "eps")
                     ? kl_mgraph__num(c, from, nd, "eps", &nd->eps)
                     : KL_OK;
        if (!rc && !(nd->eps > 0))
            rc = kl_mgraph__err(c, "layer '%s': eps=%s is not above 0",
                                nd->name, kl_mgraph__attr(c, from, "eps"));
        if (!rc)
            rc = kl_mgraph__flag(c, from, nd, "affine", false, &nd->affine);
        if (rc)
            return rc;
    }
        /* fall through */
    case KL_MOP_RELU:
    case KL_MOP_SOFTMAX:
        nd->ndim = x->ndim;
        memcpy(nd->shape, x->shape, sizeof(nd->shape));
        return KL_OK;
    case KL_MOP_FLATTEN:
    case KL_MOP_RESHAPE:
    case KL_MOP_TRANSPOSE:
        return s_views(c, from, nd);
    default:
        return kl_mgraph__err(c, "layer '%s': internal: op %d", nd->name,
                              (int)nd->op);
    }
}
