/* export_dnnl.c - the oneDNN baseline of kiln run: the same layer graph
 * (fused as kiln fuses it) built from oneDNN primitives with the same
 * parameters in the same order, checked against kiln's output and timed.
 * Activations are plain row-major (NCHW) tensors, as in the exported
 * library; weights are reordered once, before timing, into the layout each
 * primitive prefers. */
#include "kl_export.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_err.h"
#include "kl_util.h"

#ifdef KL_HAVE_DNNL
#include <dnnl.h>

#define S_MAX_ARGS 8

typedef struct {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[S_MAX_ARGS];
    const float *copy_from; /* residual: copied into dst before p */
    float *copy_to;
    size_t copy_n;
} s_step_t;

typedef struct {
    const kl_mgraph_t *g;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    float **buf;          /* per node: its memory (NULL: view/fused) */
    float *const *params; /* kiln_model parameter order */
    int nparams, np;      /* given, used so far */
    s_step_t *steps;
    int nsteps;
    dnnl_memory_t *mems; /* every memory object, to free */
    int nmems;
    kl_buf_t why;     /* layers oneDNN cannot express */
    const char *text; /* the graph text (transpose's perm=) */
} s_net_t;

static int64_t s_numel(const kl_mnode_t *nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd->ndim; i++)
        n *= nd->shape[i];
    return n;
}

static float *s_mem_of(s_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g->nodes[i];
    if (nd->fused)
        return s_mem_of(n, nd->owner);
    if (nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE)
        return s_mem_of(n, nd->in[0]);
    return n->buf[i];
}

static const dnnl_format_tag_t s_plain[] = {
    dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde};

static dnnl_memory_desc_t s_md(int nd, const int64_t *dims)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++)
        d[i] = dims[i];
    dnnl_memory_desc_init_by_tag(&md, nd, d, dnnl_f32, s_plain[nd]);
    return md;
}

static dnnl_memory_t s_mem(s_net_t *n, const dnnl_memory_desc_t *md,
                           void *handle)
{
    dnnl_memory_t m = NULL;
    if (dnnl_memory_create(&m, md, n->eng, handle) != dnnl_success)
        return NULL;
    n->mems = kl_xrealloc(n->mems, (size_t)(n->nmems + 1) * sizeof m);
    n->mems[n->nmems++] = m;
    return m;
}

static float *s_param(s_net_t *n)
{
    return n->np < n->nparams ? n->params[n->np++] : NULL;
}

/* The primitive's weights from the user's plain ones, reordered now. */
static dnnl_memory_t s_weights(s_net_t *n, const_dnnl_primitive_desc_t pd,
                               const dnnl_memory_desc_t *user, float *data)
{
    const dnnl_memory_desc_t *want =
        dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t um = s_mem(n, user, data);
    if (!um || dnnl_memory_desc_equal(user, want))
        return um;
    dnnl_memory_t wm = s_mem(n, want, DNNL_MEMORY_ALLOCATE);
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

/* Adds a step running the primitive of op desc `od` with attr. */
static s_step_t *s_step(s_net_t *n, const_dnnl_op_desc_t od,
                        const_dnnl_primitive_attr_t attr,
                        dnnl_primitive_desc_t *pd)
{
    if (dnnl_primitive_desc_create(pd, od, attr, n->eng, NULL) != dnnl_success)
        return NULL;
    n->steps =
        kl_xrealloc(n->steps, (size_t)(n->nsteps + 1) * sizeof(s_step_t));
    s_step_t *s = &n->steps[n->nsteps];
    memset(s, 0, sizeof *s);
    if (dnnl_primitive_create(&s->p, *pd) != dnnl_success)
        return NULL;
    n->nsteps++;
    return s;
}

static void s_arg(s_net_t *n, s_step_t *s, int what,
                  const dnnl_memory_desc_t *md, void *data)
{
    if (s->nargs < S_MAX_ARGS)
        s->args[s->nargs++] = (dnnl_exec_arg_t){what, s_mem(n, md, data)};
}

/* The post-ops of layer nd: the residual (a sum into dst, when sum),
 * then its relu or clip (alpha lo, beta hi: max(lo, min(hi, x))). */
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
    dnnl_primitive_attr_set_post_ops(a, po);
    dnnl_post_ops_destroy(po);
    return a;
}

static bool s_conv(s_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g->nodes[i], *x = &n->g->nodes[nd->in[0]];
    int64_t C = x->shape[1], K = nd->shape[1];
    int64_t G = nd->op == KL_MOP_DEPTHWISE ? C
                : nd->groups > 1           ? nd->groups
                                           : 1;
    int64_t wd[5] = {G, K / G, C / G, nd->R, nd->S}, kb[1] = {K};
    int wn = G > 1 ? 5 : 4;
    dnnl_memory_desc_t src = s_md(4, x->shape), dst = s_md(4, nd->shape);
    dnnl_memory_desc_t bias = s_md(1, kb), wu = s_md(wn, wd + 5 - wn), wany;
    dnnl_dims_t d;
    for (int k = 0; k < wn; k++)
        d[k] = wd[5 - wn + k];
    dnnl_memory_desc_init_by_tag(&wany, wn, d, dnnl_f32, dnnl_format_tag_any);
    dnnl_dims_t str = {nd->stride, nd->stride},
                dil = {nd->dil - 1, nd->dil - 1}, pad = {nd->pad, nd->pad};
    dnnl_convolution_desc_t cd;
    if (dnnl_dilated_convolution_forward_desc_init(
            &cd, dnnl_forward_inference, dnnl_convolution_direct, &src, &wany,
            nd->bias ? &bias : NULL, &dst, str, dil, pad, pad) != dnnl_success)
        return false;
    dnnl_primitive_attr_t attr = s_attr(nd->res, nd);
    dnnl_primitive_desc_t pd = NULL;
    s_step_t *s = s_step(n, &cd, attr, &pd);
    dnnl_primitive_attr_destroy(attr);
    float *w = s_param(n), *b = nd->bias ? s_param(n) : NULL;
    dnnl_memory_t wm = s && w ? s_weights(n, pd, &wu, w) : NULL;
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (!wm || (nd->bias && !b))
        return false;
    s_arg(n, s, DNNL_ARG_SRC, &src, s_mem_of(n, nd->in[0]));
    s->args[s->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wm};
    if (b)
        s_arg(n, s, DNNL_ARG_BIAS, &bias, b);
    s_arg(n, s, DNNL_ARG_DST, &dst, n->buf[i]);
    if (nd->res) {
        s->copy_from = s_mem_of(n, nd->res_from);
        s->copy_to = n->buf[i];
        s->copy_n = (size_t)s_numel(nd);
    }
    return true;
}

/* dense (inner product) and matmul / batch_matmul (matmul). */
static bool s_gemm(s_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g->nodes[i], *x = &n->g->nodes[nd->in[0]];
    bool dense = nd->op == KL_MOP_DENSE, two = nd->nin == 2;
    int r = x->ndim;
    int64_t wd[3], bd[3] = {1, 1, 1};
    if (dense) {
        wd[0] = nd->shape[1], wd[1] = x->shape[1], bd[0] = nd->shape[1];
    } else {
        for (int k = 0; k < r - 2; k++)
            wd[k] = x->shape[k];
        wd[r - 2] = x->shape[r - 1], wd[r - 1] = nd->shape[r - 1];
        bd[r - 1] = nd->shape[r - 1];
    }
    dnnl_memory_desc_t src = s_md(r, x->shape), dst = s_md(r, nd->shape);
    dnnl_memory_desc_t wu = s_md(r, wd), bias = s_md(dense ? 1 : r, bd), wany;
    dnnl_dims_t d;
    for (int k = 0; k < r; k++)
        d[k] = wd[k];
    dnnl_memory_desc_init_by_tag(&wany, r, d, dnnl_f32,
                                 two ? s_plain[r] : dnnl_format_tag_any);
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
    dnnl_primitive_attr_t attr = s_attr(false, nd);
    dnnl_primitive_desc_t pd = NULL;
    s_step_t *s = s_step(n, &od, attr, &pd);
    dnnl_primitive_attr_destroy(attr);
    float *w = two ? s_mem_of(n, nd->in[1]) : s_param(n);
    float *b = nd->bias ? s_param(n) : NULL;
    dnnl_memory_t wm = s && w ? s_weights(n, pd, &wu, w) : NULL;
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (!wm || (nd->bias && !b))
        return false;
    s_arg(n, s, DNNL_ARG_SRC, &src, s_mem_of(n, nd->in[0]));
    s->args[s->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wm};
    if (b)
        s_arg(n, s, DNNL_ARG_BIAS, &bias, b);
    s_arg(n, s, DNNL_ARG_DST, &dst, n->buf[i]);
    return true;
}

static bool s_pool(s_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g->nodes[i], *x = &n->g->nodes[nd->in[0]];
    bool glob = nd->op == KL_MOP_GLOBAL_AVG_POOL;
    dnnl_memory_desc_t src = s_md(4, x->shape), dst = s_md(4, nd->shape);
    dnnl_dims_t k = {glob ? x->shape[2] : nd->R, glob ? x->shape[3] : nd->S};
    dnnl_dims_t str = {glob ? k[0] : nd->stride, glob ? k[1] : nd->stride};
    dnnl_dims_t pad = {glob ? 0 : nd->pad, glob ? 0 : nd->pad};
    dnnl_pooling_desc_t pdsc;
    if (dnnl_pooling_forward_desc_init(
            &pdsc, dnnl_forward_inference,
            nd->op == KL_MOP_MAX_POOL ? dnnl_pooling_max
                                      : dnnl_pooling_avg_include_padding,
            &src, &dst, str, k, pad, pad) != dnnl_success)
        return false;
    dnnl_primitive_desc_t pd = NULL;
    s_step_t *s = s_step(n, &pdsc, NULL, &pd);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s_arg(n, s, DNNL_ARG_SRC, &src, s_mem_of(n, nd->in[0]));
    s_arg(n, s, DNNL_ARG_DST, &dst, n->buf[i]);
    return true;
}

/* add, relu, clip, gelu, softmax, layer_norm. */
static bool s_elementwise(s_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g->nodes[i];
    dnnl_memory_desc_t md = s_md(nd->ndim, nd->shape);
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
            &od.ln, dnnl_forward_inference, &md, NULL, 1e-5f, 0);
    else if (nd->op == KL_MOP_CLIP)
        st = dnnl_eltwise_forward_desc_init(&od.elt, dnnl_forward_inference,
                                            dnnl_eltwise_clip, &md,
                                            (float)nd->lo, (float)nd->hi);
    else
        st = dnnl_eltwise_forward_desc_init(
            &od.elt, dnnl_forward_inference,
            nd->op == KL_MOP_RELU ? dnnl_eltwise_relu : dnnl_eltwise_gelu_erf,
            &md, 0, 0);
    if (st != dnnl_success)
        return false;
    dnnl_primitive_desc_t pd = NULL;
    s_step_t *s = s_step(n, &od, NULL, &pd);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s_arg(n, s, nd->op == KL_MOP_ADD ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC, &md,
          s_mem_of(n, nd->in[0]));
    if (nd->op == KL_MOP_ADD)
        s_arg(n, s, DNNL_ARG_SRC_1, &md, s_mem_of(n, nd->in[1]));
    s_arg(n, s, DNNL_ARG_DST, &md, n->buf[i]);
    return true;
}

/* A transpose is a reorder from the input seen through permuted strides. */
static bool s_transpose(s_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g->nodes[i], *x = &n->g->nodes[nd->in[0]];
    int perm[KL_MODEL_MAX_DIMS];
    char err[KL_ERRMSG_LEN];
    if (kl_export_perm(n->text, nd, perm, err))
        return false;
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
    dnnl_memory_desc_t src, dst = s_md(nd->ndim, nd->shape);
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_strides(&src, nd->ndim, dims, dnnl_f32,
                                         strides) != dnnl_success ||
        dnnl_reorder_primitive_desc_create(&pd, &src, n->eng, &dst, n->eng,
                                           NULL) != dnnl_success)
        return false;
    n->steps =
        kl_xrealloc(n->steps, (size_t)(n->nsteps + 1) * sizeof(s_step_t));
    s_step_t *s = &n->steps[n->nsteps];
    memset(s, 0, sizeof *s);
    bool ok = dnnl_primitive_create(&s->p, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    if (!ok)
        return false;
    n->nsteps++;
    s_arg(n, s, DNNL_ARG_FROM, &src, s_mem_of(n, nd->in[0]));
    s_arg(n, s, DNNL_ARG_TO, &dst, n->buf[i]);
    return true;
}

static bool s_layer(s_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g->nodes[i];
    switch (nd->op) {
    case KL_MOP_INPUT:
        n->buf[i] = s_param(n);
        return n->buf[i] != NULL;
    case KL_MOP_FLATTEN:
    case KL_MOP_RESHAPE:
        return true;
    default:
        break;
    }
    if (nd->fused)
        return true;
    n->buf[i] = kl_xmalloc((size_t)s_numel(nd) * sizeof(float));
    switch (nd->op) {
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

static bool s_run(s_net_t *n)
{
    for (int i = 0; i < n->nsteps; i++) {
        s_step_t *s = &n->steps[i];
        if (s->copy_n)
            memcpy(s->copy_to, s->copy_from, s->copy_n * sizeof(float));
        if (dnnl_primitive_execute(s->p, n->st, s->nargs, s->args) !=
            dnnl_success)
            return false;
    }
    return dnnl_stream_wait(n->st) == dnnl_success;
}

static void s_free(s_net_t *n)
{
    for (int i = 0; i < n->nsteps; i++)
        dnnl_primitive_destroy(n->steps[i].p);
    for (int i = 0; i < n->nmems; i++)
        dnnl_memory_destroy(n->mems[i]);
    for (int i = 0; n->buf && i < n->g->n; i++)
        if (n->g->nodes[i].op != KL_MOP_INPUT)
            free(n->buf[i]);
    free(n->buf);
    free(n->steps);
    free(n->mems);
    kl_buf_free(&n->why);
    if (n->st)
        dnnl_stream_destroy(n->st);
    if (n->eng)
        dnnl_engine_destroy(n->eng);
}

/* Times the built net and compares its output with expect. */
static void s_measure(s_net_t *n, int out, int repeat, const float *expect,
                      long long numel, FILE *f)
{
    const float *got = s_mem_of(n, out);
    double *t = kl_xcalloc((size_t)repeat, sizeof(double));
    bool ok = s_run(n);
    for (int r = 0; ok && r < repeat; r++) {
        double t0 = kl_now_s();
        ok = s_run(n);
        t[r] = kl_now_s() - t0;
    }
    double big = 0, worst = 0;
    for (long long k = 0; ok && k < numel; k++) {
        big = fmax(big, fabs(expect[k]));
        worst = fmax(worst, fabs((double)got[k] - expect[k]));
    }
    if (!ok)
        fprintf(f, "oneDNN           not measured: a primitive failed to "
                   "execute\n");
    else
        fprintf(f,
                "oneDNN           %10.3f ms  (%.3f .. %.3f)  largest "
                "difference from the naive build %.3g (%.3g of its largest)\n",
                kl_median(t, (size_t)repeat) * 1e3,
                kl_percentile(t, (size_t)repeat, 0) * 1e3,
                kl_percentile(t, (size_t)repeat, 100) * 1e3, worst,
                big > 0 ? worst / big : 0.0);
    free(t);
}

void kl_export_dnnl_report(const char *model, int repeat, float *const *params,
                           int nparams, const float *expect, long long numel,
                           FILE *f)
{
    char *text = NULL, err[KL_ERRMSG_LEN];
    kl_mgraph_t g;
    if (kl_model_text(model, &text, err) ||
        kl_mgraph_parse(text, model, &g, err)) {
        fprintf(f, "oneDNN           not measured: %s\n", err);
        free(text);
        return;
    }
    kl_mgraph_fuse(&g);
    s_net_t n = {.g = &g, .params = params, .nparams = nparams, .text = text};
    n.buf = kl_xcalloc((size_t)g.n, sizeof(float *));
    if (dnnl_engine_create(&n.eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&n.st, n.eng, dnnl_stream_default_flags) !=
            dnnl_success) {
        fprintf(f, "oneDNN           not measured: no CPU engine\n");
        s_free(&n);
        kl_mgraph_free(&g);
        free(text);
        return;
    }
    for (int i = 0; i < g.n; i++)
        if (!s_layer(&n, i))
            kl_buf_printf(&n.why,
                          "oneDNN cannot express layer '%s' (%s) "
                          "as built here\n",
                          g.nodes[i].name, kl_mop_name(g.nodes[i].op));
    int out = g.nout ? g.outputs[0] : g.n - 1;
    if (n.why.len)
        fprintf(f, "%soneDNN           not measured (see above)\n", n.why.data);
    else
        s_measure(&n, out, repeat, expect, numel, f);
    s_free(&n);
    kl_mgraph_free(&g);
    free(text);
}

#else

void kl_export_dnnl_report(const char *model, int repeat, float *const *params,
                           int nparams, const float *expect, long long numel,
                           FILE *f)
{
    (void)model, (void)repeat, (void)params, (void)nparams, (void)expect;
    (void)numel;
    fprintf(f, "oneDNN           not measured: kiln was built without "
               "libdnnl (libdnnl-dev)\n");
}

#endif
