/* kl_ir_dw.c - recognising a float depthwise convolution or pooling
 * (kl_dw.h). */
#include <string.h>

#include "kl_dw.h"
#include "kl_err.h"

#define NO(...) kl_seterr(err, KL_ERR_UNSUPPORTED, "depthwise: " __VA_ARGS__)

/* f is coef_a * a + coef_b * b + offset (b may be -1: absent), nothing
 * else, no division. */
static bool s_form(const kl_workload_t *w, const kl_affine_t *f, int a, int b)
{
    if (f->div != 1)
        return false;
    for (int i = 0; i < w->niters; i++)
        if (f->coef[i] && i != a && i != b)
            return false;
    return f->coef[a] > 0 && (b < 0 || f->coef[b] > 0);
}

/* The iterator other than skip that index f of the input reads, or -1. */
static int s_other(const kl_workload_t *w, const kl_affine_t *f, int skip)
{
    for (int i = 0; i < w->niters; i++)
        if (f->coef[i] && i != skip)
            return i;
    return -1;
}

/* W[c,0,r,s]: the window's iterators from the weights' last two indices. */
static int s_weights(const kl_workload_t *w, kl_dw_t *z, const kl_access_t *wa,
                     char *err)
{
    const kl_tensor_t *W = &w->tensors[z->wt];
    if (W->ndim != 4 || !W->is_const)
        return NO("W is not 4-D, or not const");
    z->it[4] = z->it[5] = -1;
    for (int i = 0; i < w->niters; i++) {
        if (wa->idx[2].coef[i])
            z->it[4] = i;
        if (wa->idx[3].coef[i])
            z->it[5] = i;
    }
    if (z->it[4] < 0 || z->it[5] < 0 || !s_form(w, &wa->idx[0], z->it[1], -1) ||
        !s_form(w, &wa->idx[2], z->it[4], -1) ||
        !s_form(w, &wa->idx[3], z->it[5], -1) || wa->idx[0].offset ||
        wa->idx[2].offset || wa->idx[3].offset || wa->idx[1].offset ||
        wa->idx[0].coef[z->it[1]] != 1 || wa->idx[2].coef[z->it[4]] != 1 ||
        wa->idx[3].coef[z->it[5]] != 1 || W->shape[1] != 1)
        return NO("weights not read as W[c,0,r,s]");
    for (int i = 0; i < w->niters; i++)
        if (wa->idx[1].coef[i])
            return NO("weights not read as W[c,0,r,s]");
    if (W->shape[0] != z->c)
        return NO("W does not match the iterators");
    return KL_OK;
}

/* Whether every output index o < n along one axis reads a point in
 * [0, len) for some tap t < taps. */
static bool s_covered(int64_t n, int64_t taps, int64_t st, int64_t dil,
                      int64_t pad, int64_t len)
{
    for (int64_t o = 0; o < n; o++) {
        bool any = false;
        for (int64_t t = 0; t < taps && !any; t++) {
            int64_t i = o * st + t * dil - pad;
            any = i >= 0 && i < len;
        }
        if (!any)
            return false;
    }
    return true;
}

/* Whether a reads a 1-D tensor at the channel iterator c alone. */
static bool s_per_channel(const kl_workload_t *w, const kl_access_t *a, int c)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    return t->ndim == 1 && s_form(w, &a->idx[0], c, -1) &&
           a->idx[0].coef[c] == 1 && !a->idx[0].offset;
}

/* The quantized form's dtypes and epilogue (kl_dw.h). */
static int s_quant(const kl_workload_t *w, const kl_dw_t *z, char *err)
{
    kl_dtype yt = w->tensors[z->y].dtype;
    if (w->tensors[z->x].dtype != KL_DT_U8 ||
        w->tensors[z->wt].dtype != KL_DT_S8 ||
        (yt != KL_DT_U8 && yt != KL_DT_S8 && yt != KL_DT_S32))
        return NO("quantized: X u8, W s8 and Y u8, s8 or s32 expected");
    if (z->za < 0 || z->za > 255)
        return NO("quantized: the zero point %lld is not a u8",
                  (long long)z->za);
    bool requant = false, bias = false;
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        if (ep->kind == KL_EPI_ADD_TENSOR && (bias || requant))
            return NO("quantized: a second bias, or one after the requant");
        bias |= ep->kind == KL_EPI_ADD_TENSOR;
        requant |=
            ep->kind == KL_EPI_REQUANT || ep->kind == KL_EPI_REQUANT_TENSOR;
        bool tensor =
            ep->kind == KL_EPI_ADD_TENSOR || ep->kind == KL_EPI_REQUANT_TENSOR;
        bool kind = tensor || ep->kind == KL_EPI_REQUANT ||
                    ep->kind == KL_EPI_RELU || ep->kind == KL_EPI_CLIP;
        kl_dtype want = ep->kind == KL_EPI_ADD_TENSOR ? KL_DT_S32 : KL_DT_F32;
        if (!kind || (tensor && (!s_per_channel(w, &ep->access, z->it[1]) ||
                                 w->tensors[ep->access.tensor].dtype != want)))
            return NO("quantized: epilogue %d is not a per-channel bias, "
                      "a requant, relu or clip",
                      i);
        if ((ep->kind == KL_EPI_REQUANT || ep->kind == KL_EPI_REQUANT_TENSOR) &&
            yt == KL_DT_S32)
            return NO("quantized: a requant into an s32 output");
    }
    return KL_OK;
}

int kl_workload_depthwise(const kl_workload_t *w, kl_dw_t *info, char *err)
{
    kl_dw_t z;
    memset(&z, 0, sizeof z);
    z.y = kl_workload_output(w);
    z.wt = -1;
    /* A workload read back from its text (a record's, kiln db best
     * --source) is "custom": its structure decides. */
    bool custom = !strcmp(w->op_kind, "custom");
    bool load = w->body && w->body->kind == KL_EX_LOAD;
    z.quant = !strcmp(w->op_kind, "qdepthwise_conv2d") ||
              (custom && kl_workload_is_int(w) && !load);
    if (!strcmp(w->op_kind, "max_pool2d") ||
        (custom && load && w->reduce == KL_RED_MAX))
        z.pool = 1;
    else if (!strcmp(w->op_kind, "avg_pool2d") || (custom && load))
        z.pool = 2;
    else if (strcmp(w->op_kind, "depthwise_conv2d") && !custom && !z.quant)
        return NO("op %s is not depthwise_conv2d or a pooling", w->op_kind);
    for (int t = 0; t < w->ntensors && !z.quant; t++)
        if (w->tensors[t].dtype != KL_DT_F32)
            return NO("tensor %s is not f32", w->tensors[t].name);
    const kl_expr_t *b = w->body;
    /* The quantized body: (X - za) * W, or X * W when za is 0. */
    const kl_expr_t *xe = b && b->kind == KL_EX_MUL ? b->a : NULL;
    if (z.quant && xe && xe->kind == KL_EX_SUB && xe->b->kind == KL_EX_CONST) {
        z.za = (int64_t)xe->b->value;
        xe = xe->a;
    }
    if (z.pool) {
        if (!b || b->kind != KL_EX_LOAD ||
            w->reduce != (z.pool == 1 ? KL_RED_MAX : KL_RED_SUM) ||
            w->niters != 6 || w->tensors[z.y].ndim != 4)
            return NO("a pooling that is not one input's %s over a 4-D "
                      "output",
                      z.pool == 1 ? "max" : "sum");
    } else if (w->reduce != KL_RED_SUM || !b || b->kind != KL_EX_MUL ||
               xe->kind != KL_EX_LOAD || b->b->kind != KL_EX_LOAD ||
               w->niters != 6 || w->tensors[z.y].ndim != 4) {
        return NO("a channel multiplier above 1, or not a sum of products "
                  "over a 4-D output");
    }
    const kl_access_t *xa = z.pool ? &b->access : &xe->access;
    z.x = xa->tensor;
    const kl_tensor_t *X = &w->tensors[z.x];
    if (X->ndim != 4)
        return NO("X is not 4-D");
    /* NHWC: X's second index is the window's rows (two iterators), not
     * the channel; d[] is the dimension of n, c, y, x in X and Y. */
    int nz = 0;
    for (int i = 0; i < w->niters; i++)
        nz += xa->idx[1].coef[i] != 0;
    z.nhwc = nz > 1 && !z.pool && !z.quant;
    const int d_nchw[4] = {0, 1, 2, 3}, d_nhwc[4] = {0, 3, 1, 2};
    const int *dm = z.nhwc ? d_nhwc : d_nchw;
    for (int d = 0; d < 4; d++) {
        const kl_affine_t *o = &w->out.idx[dm[d]];
        z.it[d] = -1;
        for (int i = 0; i < w->niters; i++)
            if (o->coef[i])
                z.it[d] = i;
        if (z.it[d] < 0 || !s_form(w, o, z.it[d], -1) ||
            o->coef[z.it[d]] != 1 || o->offset)
            return NO("output index %d is not one iterator", dm[d]);
    }
    z.c = w->iters[z.it[1]].extent;
    if (z.pool) {
        z.it[4] = s_other(w, &xa->idx[2], z.it[2]);
        z.it[5] = s_other(w, &xa->idx[3], z.it[3]);
        if (z.it[4] < 0 || z.it[5] < 0)
            return NO("input not read as X[n,c,y*sh+r*dh-ph,x*sw+s*dw-pw]");
    } else {
        z.wt = b->b->access.tensor;
        int rc = s_weights(w, &z, &b->b->access, err);
        if (rc)
            return rc;
    }
    const kl_affine_t *xn = &xa->idx[0], *xc = &xa->idx[dm[1]],
                      *xy = &xa->idx[dm[2]], *xx = &xa->idx[dm[3]];
    if (!s_form(w, xn, z.it[0], -1) || !s_form(w, xc, z.it[1], -1) ||
        xn->offset || xc->offset || xn->coef[z.it[0]] != 1 ||
        xc->coef[z.it[1]] != 1 || !s_form(w, xy, z.it[2], z.it[4]) ||
        !s_form(w, xx, z.it[3], z.it[5]) || xy->offset > 0 || xx->offset > 0)
        return NO("input not read as X[n,c,y*sh+r*dh-ph,x*sw+s*dw-pw] "
                  "(or its NHWC form)");
    z.n = w->iters[z.it[0]].extent;
    z.p = w->iters[z.it[2]].extent;
    z.q = w->iters[z.it[3]].extent;
    z.r = w->iters[z.it[4]].extent;
    z.s = w->iters[z.it[5]].extent;
    z.h = X->shape[dm[2]];
    z.w = X->shape[dm[3]];
    z.sh = xy->coef[z.it[2]];
    z.dh = xy->coef[z.it[4]];
    z.ph = -xy->offset;
    z.sw = xx->coef[z.it[3]];
    z.dw = xx->coef[z.it[5]];
    z.pw = -xx->offset;
    if (X->shape[0] != z.n || X->shape[dm[1]] != z.c)
        return NO("X does not match the iterators");
    if (z.pool == 1 && (!s_covered(z.p, z.r, z.sh, z.dh, z.ph, z.h) ||
                        !s_covered(z.q, z.s, z.sw, z.dw, z.pw, z.w)))
        return NO("a max pooling window lies wholly in the padding");
    if (z.quant) {
        int rc = s_quant(w, &z, err);
        if (rc)
            return rc;
    }
    if (info)
        *info = z;
    return KL_OK;
}
