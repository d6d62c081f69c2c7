/* export_dnnl_layers.c - one layer of the oneDNN baseline (kl_export.h,
 * kl_export_dnnl_open): its primitive, with the layouts it may choose,
 * its weights reordered once into the layout it chose, its post-ops and
 * the residual sum into the residual's own buffer when it may write
 * there. Built only with libdnnl (KL_HAVE_DNNL). */
#include <stdbool.h>
#include <stdint.h>

#include "export_dnnl_int.h"
#include "kl_err.h"

/* The node whose memory node i reads, through views. */
static int s_root(const kl_mgraph_t *g, int i)
{
    const kl_mnode_t *nd = &g->nodes[kl_export__dnnl_vnode(g, i)];
    if (nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE)
        return s_root(g, nd->in[0]);
    return kl_export__dnnl_vnode(g, i);
}

/* Whether computing node i may write its output into the buffer of value
 * r: i is r's last reader (a fused layer reads where its owner runs), r
 * is no graph input or output, and i does not read r as its source. */
static bool s_inplace(const kl_mgraph_t *g, int r, int i)
{
    if (g->nodes[r].op == KL_MOP_INPUT || s_root(g, g->nodes[i].in[0]) == r)
        return false;
    for (int k = 0; k < g->nout; k++)
        if (s_root(g, g->outputs[k]) == r)
            return false;
    int last = r;
    for (int j = 0; j < g->n; j++) {
        const kl_mnode_t *nd = &g->nodes[j];
        int at = nd->fused ? nd->owner : j;
        for (int k = 0; k < nd->nin; k++)
            if (s_root(g, nd->in[k]) == r && at > last)
                last = at;
    }
    return last == i;
}

/* The primitive's weights from the user's plain ones, reordered now. */
static dnnl_memory_t s_weights(kl_dnnl_net_t *n, const_dnnl_primitive_desc_t pd,
                               const dnnl_memory_desc_t *user, float *data)
{
    const dnnl_memory_desc_t *want =
        dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t um = kl_export__dnnl_mem(n, user, data);
    if (!um || dnnl_memory_desc_equal(user, want))
        return um;
    dnnl_memory_t wm = kl_export__dnnl_mem(n, want, DNNL_MEMORY_ALLOCATE);
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    bool ok = wm &&
              dnnl_reorder_primitive_desc_create(
                  &rpd, user, n->eng, want, n->eng, NULL) == dnnl_success &&
              dnnl_primitive_create(&r, rpd) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, wm}};
        ok = dnnl_primitive_execute(r, n->st, 2, a) == dnnl_success &&
             dnnl_stream_wait(n->st) == dnnl_success;
    }
    if (r)
        dnnl_primitive_destroy(r);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    return ok ? wm : NULL;
}

/* The chosen layout of what of pd (a copy: pd goes away). */
static dnnl_memory_desc_t s_query(const_dnnl_primitive_desc_t pd,
                                  dnnl_query_t what)
{
    return *dnnl_primitive_desc_query_md(pd, what, 0);
}

/* The post-op of a fused activation (kl_act): oneDNN 2.6's logistic,
 * swish (alpha 1: x sigmoid(x)), hardswish, gelu_erf and gelu_tanh are
 * the definitions exactly; hard_sigmoid, which 2.6 lacks, is linear
 * (alpha x + beta) then clip to [0, 1]. */
static void s_act_post_op(dnnl_post_ops_t po, const kl_mnode_t *nd)
{
    switch (nd->act) {
    case KL_ACT_SIGMOID:
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_logistic, 0, 0);
        break;
    case KL_ACT_SILU:
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_swish, 1.0f, 0);
        break;
    case KL_ACT_HARD_SWISH:
        /* alpha, beta: ignored by 2.6; 1/6 and 1/2 from 3.0 on */
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_hardswish,
                                     1.0f / 6.0f, 0.5f);
        break;
    case KL_ACT_HARD_SIGMOID:
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear,
                                     (float)nd->alpha, (float)nd->beta);
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, 0.0f, 1.0f);
        break;
    case KL_ACT_GELU:
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_erf, 0, 0);
        break;
    case KL_ACT_GELU_TANH:
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0, 0);
        break;
    case KL_ACT_COUNT:
        break;
    }
}

/* The post-ops of layer nd: the residual (a sum into dst, when sum),
 * then its relu or clip (alpha lo, beta hi: max(lo, min(hi, x))) or
 * fused activation (s_act_post_op). */
static dnnl_primitive_attr_t s_attr(bool sum, const kl_mnode_t *nd)
{
    dnnl_primitive_attr_t a = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_attr_create(&a);
    dnnl_post_ops_create(&po);
    if (sum)
        dnnl_post_ops_append_sum(po, 1.0f);
    if (nd->relu)
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0);
    if (nd->clip)
        dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip, (float)nd->lo,
                                     (float)nd->hi);
    if (nd->smooth)
        s_act_post_op(po, nd);
    dnnl_primitive_attr_set_post_ops(a, po);
    dnnl_post_ops_destroy(po);
    return a;
}

/* The destination of layer i (a convolution, dense or matmul) with a
 * residual sum, in layout dmd:
 * the residual's own buffer when i may write there (s_inplace), else a
 * new buffer that a copy (same layout) or reorder of the residual fills
 * before every run. *how says which. */
static dnnl_memory_t s_res_dst(kl_dnnl_net_t *n, int i,
                               const dnnl_memory_desc_t *dmd, const char **how)
{
    const kl_mnode_t *nd = &n->g.nodes[i];
    int r = kl_export__dnnl_vnode(&n->g, nd->res_from);
    kl_export__dnnl_val_t *x = &n->val[r];
    if (!x->m)
        return NULL;
    bool same = dnnl_memory_desc_equal(&x->md, dmd);
    if (same && r == s_root(&n->g, r) && s_inplace(&n->g, r, i)) {
        *how = "in place";
        n->val[i].md = *dmd;
        n->val[i].m = x->m;
        return x->m;
    }
    *how = same ? "copied" : "reordered";
    dnnl_memory_t m = kl_export__dnnl_out(n, i, dmd);
    return m ? kl_export__dnnl_reorder(
                   n, x->m, &x->md, dmd, m, n->g.nodes[r].name,
                   same ? "residual copy" : "residual reorder")
             : NULL;
}

static bool s_conv(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i], *x = &n->g.nodes[nd->in[0]];
    int64_t C = x->shape[1], K = nd->shape[1];
    int64_t G = nd->op == KL_MOP_DEPTHWISE ? C
                : nd->groups > 1           ? nd->groups
                                           : 1;
    int64_t wd[5] = {G, K / G, C / G, nd->R, nd->S}, kb[1] = {K};
    int wn = G > 1 ? 5 : 4;
    dnnl_memory_desc_t src = kl_export__dnnl_any(4, x->shape),
                       dst = kl_export__dnnl_any(4, nd->shape);
    dnnl_memory_desc_t bias = kl_export__dnnl_md(1, kb),
                       wu = kl_export__dnnl_md(wn, wd + 5 - wn);
    dnnl_memory_desc_t wany = kl_export__dnnl_any(wn, wd + 5 - wn);
    dnnl_dims_t str = {nd->stride, nd->stride},
                dil = {nd->dil - 1, nd->dil - 1}, pad = {nd->pad, nd->pad};
    dnnl_convolution_desc_t cd;
    if (dnnl_dilated_convolution_forward_desc_init(
            &cd, dnnl_forward_inference, dnnl_convolution_auto, &src, &wany,
            nd->bias ? &bias : NULL, &dst, str, dil, pad, pad) != dnnl_success)
        return false;
    dnnl_primitive_attr_t attr = s_attr(nd->res, nd);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &cd, attr, n->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return false;
    float *w = kl_export__dnnl_param(n),
          *b = nd->bias ? kl_export__dnnl_param(n) : NULL;
    dnnl_memory_desc_t smd = s_query(pd, dnnl_query_src_md);
    dnnl_memory_desc_t dmd = s_query(pd, dnnl_query_dst_md);
    dnnl_memory_t wm = w ? s_weights(n, pd, &wu, w) : NULL;
    dnnl_memory_t bm = b ? kl_export__dnnl_mem(n, &bias, b) : NULL;
    dnnl_memory_t sm = kl_export__dnnl_in(n, nd->in[0], &smd);
    const char *how = NULL;
    dnnl_memory_t dm =
        nd->res ? s_res_dst(n, i, &dmd, &how) : kl_export__dnnl_out(n, i, &dmd);
    kl_export__dnnl_step_t *s = wm && sm && dm && (b || !nd->bias)
                                    ? kl_export__dnnl_add(n, pd, nd->name, NULL)
                                    : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s->res = how;
    kl_export__dnnl_arg(s, DNNL_ARG_SRC, sm);
    kl_export__dnnl_arg(s, DNNL_ARG_WEIGHTS, wm);
    if (bm)
        kl_export__dnnl_arg(s, DNNL_ARG_BIAS, bm);
    kl_export__dnnl_arg(s, DNNL_ARG_DST, dm);
    return true;
}

/* dense (inner product, layouts its choice) and matmul / batch_matmul
 * (matmul, plain activations). */
static bool s_gemm(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i], *x = &n->g.nodes[nd->in[0]];
    bool dense = nd->op == KL_MOP_DENSE, two = nd->nin == 2;
    int r = x->ndim;
    int64_t wd[KL_MODEL_MAX_DIMS], bd[KL_MODEL_MAX_DIMS];
    for (int k = 0; k < KL_MODEL_MAX_DIMS; k++)
        bd[k] = 1;
    if (dense) {
        wd[0] = nd->shape[1], wd[1] = x->shape[1], bd[0] = nd->shape[1];
    } else {
        for (int k = 0; k < r - 2; k++)
            wd[k] = two ? x->shape[k] : 1; /* a weight is shared */
        wd[r - 2] = x->shape[r - 1], wd[r - 1] = nd->shape[r - 1];
        bd[r - 1] = nd->shape[r - 1];
    }
    dnnl_memory_desc_t src = dense ? kl_export__dnnl_any(r, x->shape)
                                   : kl_export__dnnl_md(r, x->shape);
    dnnl_memory_desc_t dst = dense ? kl_export__dnnl_any(r, nd->shape)
                                   : kl_export__dnnl_md(r, nd->shape);
    dnnl_memory_desc_t wu = kl_export__dnnl_md(r, wd),
                       bias = kl_export__dnnl_md(dense ? 1 : r, bd);
    dnnl_memory_desc_t wany = two ? wu : kl_export__dnnl_any(r, wd);
    union {
        dnnl_inner_product_desc_t ip;
        dnnl_matmul_desc_t mm;
    } od;
    dnnl_status_t st =
        dense ? dnnl_inner_product_forward_desc_init(
                    &od.ip, dnnl_forward_inference, &src, &wany,
                    nd->bias ? &bias : NULL, &dst)
              : dnnl_matmul_desc_init(&od.mm, &src, &wany,
                                      nd->bias ? &bias : NULL, &dst);
    if (st != dnnl_success)
        return false;
    dnnl_primitive_attr_t attr = s_attr(nd->res, nd);
    dnnl_primitive_desc_t pd = NULL;
    st = dnnl_primitive_desc_create(&pd, &od, attr, n->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return false;
    float *w = two ? NULL : kl_export__dnnl_param(n),
          *b = nd->bias ? kl_export__dnnl_param(n) : NULL;
    dnnl_memory_desc_t smd = s_query(pd, dnnl_query_src_md);
    dnnl_memory_desc_t dmd = s_query(pd, dnnl_query_dst_md);
    dnnl_memory_t sm = kl_export__dnnl_in(n, nd->in[0], &smd);
    dnnl_memory_t wm = two ? kl_export__dnnl_in(n, nd->in[1], &wu)
                       : w ? s_weights(n, pd, &wu, w)
                           : NULL;
    dnnl_memory_t bm = b ? kl_export__dnnl_mem(n, &bias, b) : NULL;
    const char *how = NULL;
    dnnl_memory_t dm =
        nd->res ? s_res_dst(n, i, &dmd, &how) : kl_export__dnnl_out(n, i, &dmd);
    kl_export__dnnl_step_t *s = wm && sm && dm && (b || !nd->bias)
                                    ? kl_export__dnnl_add(n, pd, nd->name, NULL)
                                    : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s->res = how;
    kl_export__dnnl_arg(s, DNNL_ARG_SRC, sm);
    kl_export__dnnl_arg(s, DNNL_ARG_WEIGHTS, wm);
    if (bm)
        kl_export__dnnl_arg(s, DNNL_ARG_BIAS, bm);
    kl_export__dnnl_arg(s, DNNL_ARG_DST, dm);
    return true;
}

/* Pooling reads its producer's layout and chooses its own. */
static bool s_pool(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i], *x = &n->g.nodes[nd->in[0]];
    const kl_export__dnnl_val_t *xv =
        &n->val[kl_export__dnnl_vnode(&n->g, nd->in[0])];
    bool glob = nd->op == KL_MOP_GLOBAL_AVG_POOL;
    dnnl_memory_desc_t src = xv->md, dst = kl_export__dnnl_any(4, nd->shape);
    dnnl_dims_t k = {glob ? x->shape[2] : nd->R, glob ? x->shape[3] : nd->S};
    dnnl_dims_t str = {glob ? k[0] : nd->stride, glob ? k[1] : nd->stride};
    dnnl_dims_t pad = {glob ? 0 : nd->pad, glob ? 0 : nd->pad};
    dnnl_pooling_desc_t pdsc;
    dnnl_primitive_desc_t pd = NULL;
    if (!xv->m ||
        dnnl_pooling_forward_desc_init(
            &pdsc, dnnl_forward_inference,
            nd->op == KL_MOP_MAX_POOL ? dnnl_pooling_max
                                      : dnnl_pooling_avg_include_padding,
            &src, &dst, str, k, pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &pdsc, NULL, n->eng, NULL) !=
            dnnl_success)
        return false;
    dnnl_memory_desc_t dmd = s_query(pd, dnnl_query_dst_md);
    dnnl_memory_t dm = kl_export__dnnl_out(n, i, &dmd);
    kl_export__dnnl_step_t *s =
        dm ? kl_export__dnnl_add(n, pd, nd->name, NULL) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    kl_export__dnnl_arg(s, DNNL_ARG_SRC, xv->m);
    kl_export__dnnl_arg(s, DNNL_ARG_DST, dm);
    return true;
}

/* oneDNN's eltwise algorithm for relu, gelu (either form) and the
 * activations it has (sigmoid, tanh, leaky_relu, elu, silu; alpha in *a);
 * false for hard_sigmoid and hard_swish, which this net does not build. */
static bool s_eltwise_alg(const kl_mnode_t *nd, dnnl_alg_kind_t *alg, float *a)
{
    *a = nd->op == KL_MOP_LEAKY_RELU || nd->op == KL_MOP_ELU ? (float)nd->alpha
         : nd->op == KL_MOP_SILU                             ? 1.0f
                                                             : 0.0f;
    switch (nd->op) {
    case KL_MOP_RELU:
    case KL_MOP_LEAKY_RELU:
        *alg = dnnl_eltwise_relu;
        return true;
    case KL_MOP_GELU:
        *alg = nd->gelu_tanh ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf;
        return true;
    case KL_MOP_SIGMOID:
        *alg = dnnl_eltwise_logistic;
        return true;
    case KL_MOP_TANH:
        *alg = dnnl_eltwise_tanh;
        return true;
    case KL_MOP_ELU:
        *alg = dnnl_eltwise_elu;
        return true;
    case KL_MOP_SILU:
        *alg = dnnl_eltwise_swish;
        return true;
    default:
        return false;
    }
}

/* add, relu, clip, gelu, the activations in their input's layout;
 * softmax and layer_norm on plain tensors. */
static bool s_elementwise(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i];
    dnnl_alg_kind_t alg = dnnl_eltwise_relu;
    float alpha = 0;
    if ((nd->op == KL_MOP_RELU || nd->op == KL_MOP_GELU ||
         kl_mop_is_act(nd->op)) &&
        !s_eltwise_alg(nd, &alg, &alpha))
        return false;
    const kl_export__dnnl_val_t *xv =
        &n->val[kl_export__dnnl_vnode(&n->g, nd->in[0])];
    bool plain = nd->op == KL_MOP_SOFTMAX || nd->op == KL_MOP_LAYER_NORM;
    if (!xv->m)
        return false;
    dnnl_memory_desc_t md =
        plain ? kl_export__dnnl_md(nd->ndim, nd->shape) : xv->md;
    union {
        dnnl_binary_desc_t bin;
        dnnl_eltwise_desc_t elt;
        dnnl_softmax_desc_t sm;
        dnnl_layer_normalization_desc_t ln;
    } od;
    dnnl_status_t st;
    if (nd->op == KL_MOP_ADD)
        st = dnnl_binary_desc_init(&od.bin, dnnl_binary_add, &md, &md, &md);
    else if (nd->op == KL_MOP_SOFTMAX)
        st = dnnl_softmax_forward_desc_init(&od.sm, dnnl_forward_inference, &md,
                                            nd->ndim - 1);
    else if (nd->op == KL_MOP_LAYER_NORM)
        st = dnnl_layer_normalization_forward_desc_init(
            &od.ln, dnnl_forward_inference, &md, NULL,
            nd->eps > 0 ? (float)nd->eps : 1e-5f,
            nd->affine ? (unsigned)(dnnl_use_scale | dnnl_use_shift) : 0u);
    else if (nd->op == KL_MOP_CLIP)
        st = dnnl_eltwise_forward_desc_init(&od.elt, dnnl_forward_inference,
                                            dnnl_eltwise_clip, &md,
                                            (float)nd->lo, (float)nd->hi);
    else
        st = dnnl_eltwise_forward_desc_init(&od.elt, dnnl_forward_inference,
                                            alg, &md, alpha, 0);
    dnnl_primitive_desc_t pd = NULL;
    if (st != dnnl_success || dnnl_primitive_desc_create(&pd, &od, NULL, n->eng,
                                                         NULL) != dnnl_success)
        return false;
    dnnl_memory_t a = kl_export__dnnl_in(n, nd->in[0], &md);
    dnnl_memory_t b =
        nd->op == KL_MOP_ADD ? kl_export__dnnl_in(n, nd->in[1], &md) : a;
    dnnl_memory_t dm = kl_export__dnnl_out(n, i, &md);
    kl_export__dnnl_step_t *s =
        a && b && dm ? kl_export__dnnl_add(n, pd, nd->name, NULL) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    kl_export__dnnl_arg(s, nd->op == KL_MOP_ADD ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC,
                        a);
    if (nd->op == KL_MOP_ADD)
        kl_export__dnnl_arg(s, DNNL_ARG_SRC_1, b);
    kl_export__dnnl_arg(s, DNNL_ARG_DST, dm);
    if (nd->op == KL_MOP_LAYER_NORM && nd->affine) {
        /* Its weight and bias follow in the parameters (kiln_model.h),
         * each [last dim]. */
        int64_t c = nd->shape[nd->ndim - 1];
        dnnl_memory_desc_t cmd = kl_export__dnnl_md(1, &c);
        float *w = kl_export__dnnl_param(n), *bi = kl_export__dnnl_param(n);
        dnnl_memory_t wm = w ? kl_export__dnnl_mem(n, &cmd, w) : NULL;
        dnnl_memory_t bm = bi ? kl_export__dnnl_mem(n, &cmd, bi) : NULL;
        if (!wm || !bm)
            return false;
        kl_export__dnnl_arg(s, DNNL_ARG_SCALE, wm);
        kl_export__dnnl_arg(s, DNNL_ARG_SHIFT, bm);
    }
    return true;
}

/* flatten and reshape view the plain form of their input. */
static bool s_view(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i], *x = &n->g.nodes[nd->in[0]];
    dnnl_memory_desc_t xmd = kl_export__dnnl_md(x->ndim, x->shape);
    dnnl_memory_t m = kl_export__dnnl_in(n, nd->in[0], &xmd);
    void *h = NULL;
    if (!m || dnnl_memory_get_data_handle(m, &h) != dnnl_success)
        return false;
    n->val[i].md = kl_export__dnnl_md(nd->ndim, nd->shape);
    n->val[i].m = kl_export__dnnl_mem(n, &n->val[i].md, h);
    return n->val[i].m != NULL;
}

/* A transpose is a reorder from the (plain) input seen through permuted
 * strides; one that moves only dims of size 1 keeps every element in
 * place and is a view, as in kiln_model.c. */
static bool s_transpose(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i], *x = &n->g.nodes[nd->in[0]];
    int perm[KL_MODEL_MAX_DIMS], last = -1;
    bool view = true;
    char err[KL_ERRMSG_LEN];
    if (kl_export__perm(n->text, nd, perm, err))
        return false;
    for (int k = 0; k < nd->ndim; k++)
        if (x->shape[perm[k]] != 1) {
            view = view && perm[k] > last;
            last = perm[k];
        }
    if (view)
        return s_view(n, i);
    dnnl_dims_t dims, strides;
    int64_t st[KL_MODEL_MAX_DIMS], acc = 1;
    for (int k = x->ndim - 1; k >= 0; k--) {
        st[k] = acc;
        acc *= x->shape[k];
    }
    for (int k = 0; k < nd->ndim; k++) {
        dims[k] = nd->shape[k];
        strides[k] = st[perm[k]];
    }
    dnnl_memory_desc_t xmd = kl_export__dnnl_md(x->ndim, x->shape), src;
    dnnl_memory_desc_t dst = kl_export__dnnl_md(nd->ndim, nd->shape);
    dnnl_memory_t xm = kl_export__dnnl_in(n, nd->in[0], &xmd), sm = NULL;
    void *h = NULL;
    if (!xm || dnnl_memory_get_data_handle(xm, &h) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&src, nd->ndim, dims, dnnl_f32,
                                         strides) != dnnl_success ||
        !(sm = kl_export__dnnl_mem(n, &src, h)))
        return false;
    dnnl_memory_t dm = kl_export__dnnl_out(n, i, &dst);
    return dm && kl_export__dnnl_reorder(n, sm, &src, &dst, dm, nd->name, NULL);
}

bool kl_export__dnnl_layer(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i];
    if (nd->fused)
        return true;
    /* the general ops (and an add that broadcasts): this net does not
     * build them; the caller names them */
    if (kl_mop_is_general(nd->op) || nd->bcast)
        return false;
    switch (nd->op) {
    case KL_MOP_INPUT: {
        float *x = kl_export__dnnl_param(n);
        n->val[i].md = kl_export__dnnl_md(nd->ndim, nd->shape);
        n->val[i].m = x ? kl_export__dnnl_mem(n, &n->val[i].md, x) : NULL;
        return n->val[i].m != NULL;
    }
    case KL_MOP_FLATTEN:
    case KL_MOP_RESHAPE:
        return s_view(n, i);
    case KL_MOP_CONV2D:
    case KL_MOP_DEPTHWISE:
        return s_conv(n, i);
    case KL_MOP_DENSE:
    case KL_MOP_MATMUL:
    case KL_MOP_BATCH_MATMUL:
        return s_gemm(n, i);
    case KL_MOP_MAX_POOL:
    case KL_MOP_AVG_POOL:
    case KL_MOP_GLOBAL_AVG_POOL:
        return s_pool(n, i);
    case KL_MOP_TRANSPOSE:
        return s_transpose(n, i);
    default:
        return s_elementwise(n, i);
    }
}
