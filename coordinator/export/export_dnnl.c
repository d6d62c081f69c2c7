/* export_dnnl.c - the oneDNN baseline of kiln run: the same layer graph
 * (fused as kiln fuses it) built from oneDNN primitives with the same
 * parameters in the same order, as a framework user of oneDNN builds it:
 * convolutions, pooling and inner products choose their layouts
 * (dnnl_format_tag_any) and pass them on, eltwise and pooling take their
 * producer's layout, so reorders run only at the graph's input and output
 * and where two layers' layouts differ; convolutions use
 * dnnl_convolution_auto; a fused residual add is a sum post-op into the
 * residual's own buffer when the convolution is its last reader (else one
 * copy or reorder of it per run, which describe names). Weights are
 * reordered once, at open, into the layout each primitive chose. */
#include "kl_export.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_err.h"
#include "kl_util.h"

#ifdef KL_HAVE_DNNL
#include <dnnl.h>
#include <dnnl_debug.h>

#define S_MAX_ARGS 8

typedef struct {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[S_MAX_ARGS];
    const char *name; /* the layer, or the value a reorder converts */
    const char *why;  /* a reorder's reason ("input", ...); NULL: a layer */
    const char *res;  /* a residual sum: "in place", "copied", "reordered" */
    char kind[32], impl[64], src[32], dst[32];
} s_step_t;

/* A node's value: its memory in the layout its producer chose, and the
 * last copy of it reordered into another layout (reused by later
 * readers that want that one). */
typedef struct {
    dnnl_memory_t m;
    dnnl_memory_desc_t md;
    dnnl_memory_t alt;
    dnnl_memory_desc_t alt_md;
} s_val_t;

struct kl_dnnl_net_s {
    kl_mgraph_t g;
    char *text; /* the graph text (transpose's perm=) */
    dnnl_engine_t eng;
    dnnl_stream_t st;
    s_val_t *val;         /* per node */
    float *const *params; /* kiln_model parameter order */
    int nparams, np;      /* given, used so far */
    s_step_t *steps;
    int nsteps;
    dnnl_memory_t *mems; /* every memory object, to free */
    int nmems;
    dnnl_memory_t out; /* plain, the caller's buffer at each run */
    long long numel;
    kl_buf_t why; /* layers oneDNN cannot express */
};

static int64_t s_numel(const kl_mnode_t *nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd->ndim; i++)
        n *= nd->shape[i];
    return n;
}

/* The node whose value node i is: its owner when fused. */
static int s_vnode(const kl_mgraph_t *g, int i)
{
    return g->nodes[i].fused ? s_vnode(g, g->nodes[i].owner) : i;
}

/* The node whose memory node i reads, through views. */
static int s_root(const kl_mgraph_t *g, int i)
{
    const kl_mnode_t *nd = &g->nodes[s_vnode(g, i)];
    if (nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE)
        return s_root(g, nd->in[0]);
    return s_vnode(g, i);
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

static const dnnl_format_tag_t s_plain[] = {dnnl_format_tag_undef,
                                            dnnl_a,
                                            dnnl_ab,
                                            dnnl_abc,
                                            dnnl_abcd,
                                            dnnl_abcde,
                                            dnnl_abcdef,
                                            dnnl_abcdefg,
                                            dnnl_abcdefgh};
_Static_assert(sizeof s_plain / sizeof s_plain[0] == KL_MODEL_MAX_DIMS + 1,
               "a plain tag for every rank a model tensor has");

static dnnl_memory_desc_t s_md_tag(int nd, const int64_t *dims,
                                   dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t d = {0};
    for (int i = 0; i < nd; i++)
        d[i] = dims[i];
    dnnl_memory_desc_init_by_tag(&md, nd, d, dnnl_f32, tag);
    return md;
}

static dnnl_memory_desc_t s_md(int nd, const int64_t *dims)
{
    return s_md_tag(nd, dims, s_plain[nd]);
}

static dnnl_memory_desc_t s_any(int nd, const int64_t *dims)
{
    return s_md_tag(nd, dims, dnnl_format_tag_any);
}

/* A layout as oneDNN's verbose mode writes it: dimensions outermost
 * first, blocked ones in capitals, then the inner blocks ("aBcd16b"). */
static void s_fmt(const dnnl_memory_desc_t *md, char *out, size_t cap)
{
    if (md->format_kind != dnnl_blocked) {
        snprintf(out, cap, "%s",
                 md->format_kind == dnnl_format_kind_wino ? "wino" : "opaque");
        return;
    }
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int ord[DNNL_MAX_NDIMS];
    for (int i = 0; i < md->ndims; i++)
        ord[i] = i;
    for (int i = 1; i < md->ndims; i++) /* stable, strides descending */
        for (int j = i; j > 0 && b->strides[ord[j]] > b->strides[ord[j - 1]];
             j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    size_t n = 0;
    for (int i = 0; i < md->ndims && n + 1 < cap; i++) {
        bool blocked = false;
        for (int k = 0; k < b->inner_nblks; k++)
            blocked |= b->inner_idxs[k] == ord[i];
        out[n++] = (char)((blocked ? 'A' : 'a') + ord[i]);
    }
    out[n] = 0;
    for (int k = 0; k < b->inner_nblks && n + 1 < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%lld%c",
                              (long long)b->inner_blks[k],
                              (char)('a' + b->inner_idxs[k]));
}

static dnnl_memory_t s_mem(kl_dnnl_net_t *n, const dnnl_memory_desc_t *md,
                           void *handle)
{
    dnnl_memory_t m = NULL;
    if (dnnl_memory_create(&m, md, n->eng, handle) != dnnl_success)
        return NULL;
    n->mems = kl_xrealloc(n->mems, (size_t)(n->nmems + 1) * sizeof m);
    n->mems[n->nmems++] = m;
    return m;
}

static float *s_param(kl_dnnl_net_t *n)
{
    return n->np < n->nparams ? n->params[n->np++] : NULL;
}

/* Adds a step running the primitive of pd (which stays the caller's),
 * noting its kind, implementation and layouts. */
static s_step_t *s_add(kl_dnnl_net_t *n, const_dnnl_primitive_desc_t pd,
                       const char *name, const char *why)
{
    dnnl_primitive_t p = NULL;
    if (dnnl_primitive_create(&p, pd) != dnnl_success)
        return NULL;
    n->steps =
        kl_xrealloc(n->steps, (size_t)(n->nsteps + 1) * sizeof(s_step_t));
    s_step_t *s = &n->steps[n->nsteps++];
    memset(s, 0, sizeof *s);
    s->p = p;
    s->name = name;
    s->why = why;
    const char *impl = NULL;
    dnnl_primitive_kind_t kind = dnnl_undefined_primitive;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind);
    snprintf(s->impl, sizeof s->impl, "%s", impl ? impl : "?");
    snprintf(s->kind, sizeof s->kind, "%s", dnnl_prim_kind2str(kind));
    const dnnl_memory_desc_t *src =
        dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *dst =
        dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    if (src)
        s_fmt(src, s->src, sizeof s->src);
    if (dst)
        s_fmt(dst, s->dst, sizeof s->dst);
    return s;
}

static void s_arg(s_step_t *s, int what, dnnl_memory_t m)
{
    if (s->nargs < S_MAX_ARGS)
        s->args[s->nargs++] = (dnnl_exec_arg_t){what, m};
}

/* A reorder step from `from` (layout fmd) into `to` (layout tmd; NULL:
 * a new buffer), run at every run. */
static dnnl_memory_t s_reorder(kl_dnnl_net_t *n, dnnl_memory_t from,
                               const dnnl_memory_desc_t *fmd,
                               const dnnl_memory_desc_t *tmd, dnnl_memory_t to,
                               const char *name, const char *why)
{
    dnnl_primitive_desc_t pd = NULL;
    if (!to)
        to = s_mem(n, tmd, DNNL_MEMORY_ALLOCATE);
    if (!to || dnnl_reorder_primitive_desc_create(&pd, fmd, n->eng, tmd, n->eng,
                                                  NULL) != dnnl_success)
        return NULL;
    s_step_t *s = s_add(n, pd, name, why);
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return NULL;
    s_arg(s, DNNL_ARG_FROM, from);
    s_arg(s, DNNL_ARG_TO, to);
    return to;
}

/* The value of node i in layout `want`: its own memory, or a reorder of
 * it (one per layout a reader wants, kept for the next reader). */
static dnnl_memory_t s_in(kl_dnnl_net_t *n, int i,
                          const dnnl_memory_desc_t *want)
{
    int v = s_vnode(&n->g, i);
    s_val_t *x = &n->val[v];
    if (!x->m)
        return NULL;
    if (dnnl_memory_desc_equal(&x->md, want))
        return x->m;
    if (x->alt && dnnl_memory_desc_equal(&x->alt_md, want))
        return x->alt;
    const kl_mnode_t *nd = &n->g.nodes[v];
    dnnl_memory_t m =
        s_reorder(n, x->m, &x->md, want, NULL, nd->name,
                  nd->op == KL_MOP_INPUT ? "input" : "between layers");
    if (m) {
        x->alt = m;
        x->alt_md = *want;
    }
    return m;
}

/* Node i's output: a new buffer in layout md. */
static dnnl_memory_t s_out(kl_dnnl_net_t *n, int i,
                           const dnnl_memory_desc_t *md)
{
    n->val[i].md = *md;
    n->val[i].m = s_mem(n, md, DNNL_MEMORY_ALLOCATE);
    return n->val[i].m;
}

/* The primitive's weights from the user's plain ones, reordered now. */
static dnnl_memory_t s_weights(kl_dnnl_net_t *n, const_dnnl_primitive_desc_t pd,
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

/* The chosen layout of what of pd (a copy: pd goes away). */
static dnnl_memory_desc_t s_query(const_dnnl_primitive_desc_t pd,
                                  dnnl_query_t what)
{
    return *dnnl_primitive_desc_query_md(pd, what, 0);
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

/* The destination of convolution i with a residual sum, in layout dmd:
 * the residual's own buffer when i may write there (s_inplace), else a
 * new buffer that a copy (same layout) or reorder of the residual fills
 * before every run. *how says which. */
static dnnl_memory_t s_res_dst(kl_dnnl_net_t *n, int i,
                               const dnnl_memory_desc_t *dmd, const char **how)
{
    const kl_mnode_t *nd = &n->g.nodes[i];
    int r = s_vnode(&n->g, nd->res_from);
    s_val_t *x = &n->val[r];
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
    dnnl_memory_t m = s_out(n, i, dmd);
    return m ? s_reorder(n, x->m, &x->md, dmd, m, n->g.nodes[r].name,
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
    dnnl_memory_desc_t src = s_any(4, x->shape), dst = s_any(4, nd->shape);
    dnnl_memory_desc_t bias = s_md(1, kb), wu = s_md(wn, wd + 5 - wn);
    dnnl_memory_desc_t wany = s_any(wn, wd + 5 - wn);
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
    float *w = s_param(n), *b = nd->bias ? s_param(n) : NULL;
    dnnl_memory_desc_t smd = s_query(pd, dnnl_query_src_md);
    dnnl_memory_desc_t dmd = s_query(pd, dnnl_query_dst_md);
    dnnl_memory_t wm = w ? s_weights(n, pd, &wu, w) : NULL;
    dnnl_memory_t bm = b ? s_mem(n, &bias, b) : NULL;
    dnnl_memory_t sm = s_in(n, nd->in[0], &smd);
    const char *how = NULL;
    dnnl_memory_t dm =
        nd->res ? s_res_dst(n, i, &dmd, &how) : s_out(n, i, &dmd);
    s_step_t *s = wm && sm && dm && (b || !nd->bias)
                      ? s_add(n, pd, nd->name, NULL)
                      : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s->res = how;
    s_arg(s, DNNL_ARG_SRC, sm);
    s_arg(s, DNNL_ARG_WEIGHTS, wm);
    if (bm)
        s_arg(s, DNNL_ARG_BIAS, bm);
    s_arg(s, DNNL_ARG_DST, dm);
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
    dnnl_memory_desc_t src = dense ? s_any(r, x->shape) : s_md(r, x->shape);
    dnnl_memory_desc_t dst = dense ? s_any(r, nd->shape) : s_md(r, nd->shape);
    dnnl_memory_desc_t wu = s_md(r, wd), bias = s_md(dense ? 1 : r, bd);
    dnnl_memory_desc_t wany = two ? wu : s_any(r, wd);
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
    st = dnnl_primitive_desc_create(&pd, &od, attr, n->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return false;
    float *w = two ? NULL : s_param(n), *b = nd->bias ? s_param(n) : NULL;
    dnnl_memory_desc_t smd = s_query(pd, dnnl_query_src_md);
    dnnl_memory_desc_t dmd = s_query(pd, dnnl_query_dst_md);
    dnnl_memory_t sm = s_in(n, nd->in[0], &smd);
    dnnl_memory_t wm = two ? s_in(n, nd->in[1], &wu)
                       : w ? s_weights(n, pd, &wu, w)
                           : NULL;
    dnnl_memory_t bm = b ? s_mem(n, &bias, b) : NULL;
    dnnl_memory_t dm = s_out(n, i, &dmd);
    s_step_t *s = wm && sm && dm && (b || !nd->bias)
                      ? s_add(n, pd, nd->name, NULL)
                      : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s_arg(s, DNNL_ARG_SRC, sm);
    s_arg(s, DNNL_ARG_WEIGHTS, wm);
    if (bm)
        s_arg(s, DNNL_ARG_BIAS, bm);
    s_arg(s, DNNL_ARG_DST, dm);
    return true;
}

/* Pooling reads its producer's layout and chooses its own. */
static bool s_pool(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i], *x = &n->g.nodes[nd->in[0]];
    const s_val_t *xv = &n->val[s_vnode(&n->g, nd->in[0])];
    bool glob = nd->op == KL_MOP_GLOBAL_AVG_POOL;
    dnnl_memory_desc_t src = xv->md, dst = s_any(4, nd->shape);
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
    dnnl_memory_t dm = s_out(n, i, &dmd);
    s_step_t *s = dm ? s_add(n, pd, nd->name, NULL) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s_arg(s, DNNL_ARG_SRC, xv->m);
    s_arg(s, DNNL_ARG_DST, dm);
    return true;
}

/* add, relu, clip, gelu in their input's layout; softmax and layer_norm
 * on plain tensors. */
static bool s_elementwise(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i];
    const s_val_t *xv = &n->val[s_vnode(&n->g, nd->in[0])];
    bool plain = nd->op == KL_MOP_SOFTMAX || nd->op == KL_MOP_LAYER_NORM;
    if (!xv->m)
        return false;
    dnnl_memory_desc_t md = plain ? s_md(nd->ndim, nd->shape) : xv->md;
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
        st = dnnl_eltwise_forward_desc_init(
            &od.elt, dnnl_forward_inference,
            nd->op == KL_MOP_RELU ? dnnl_eltwise_relu : dnnl_eltwise_gelu_erf,
            &md, 0, 0);
    dnnl_primitive_desc_t pd = NULL;
    if (st != dnnl_success || dnnl_primitive_desc_create(&pd, &od, NULL, n->eng,
                                                         NULL) != dnnl_success)
        return false;
    dnnl_memory_t a = s_in(n, nd->in[0], &md);
    dnnl_memory_t b = nd->op == KL_MOP_ADD ? s_in(n, nd->in[1], &md) : a;
    dnnl_memory_t dm = s_out(n, i, &md);
    s_step_t *s = a && b && dm ? s_add(n, pd, nd->name, NULL) : NULL;
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return false;
    s_arg(s, nd->op == KL_MOP_ADD ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC, a);
    if (nd->op == KL_MOP_ADD)
        s_arg(s, DNNL_ARG_SRC_1, b);
    s_arg(s, DNNL_ARG_DST, dm);
    if (nd->op == KL_MOP_LAYER_NORM && nd->affine) {
        /* Its weight and bias follow in the parameters (kiln_model.h),
         * each [last dim]. */
        int64_t c = nd->shape[nd->ndim - 1];
        dnnl_memory_desc_t cmd = s_md(1, &c);
        float *w = s_param(n), *bi = s_param(n);
        dnnl_memory_t wm = w ? s_mem(n, &cmd, w) : NULL;
        dnnl_memory_t bm = bi ? s_mem(n, &cmd, bi) : NULL;
        if (!wm || !bm)
            return false;
        s_arg(s, DNNL_ARG_SCALE, wm);
        s_arg(s, DNNL_ARG_SHIFT, bm);
    }
    return true;
}

/* flatten and reshape view the plain form of their input. */
static bool s_view(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i], *x = &n->g.nodes[nd->in[0]];
    dnnl_memory_desc_t xmd = s_md(x->ndim, x->shape);
    dnnl_memory_t m = s_in(n, nd->in[0], &xmd);
    void *h = NULL;
    if (!m || dnnl_memory_get_data_handle(m, &h) != dnnl_success)
        return false;
    n->val[i].md = s_md(nd->ndim, nd->shape);
    n->val[i].m = s_mem(n, &n->val[i].md, h);
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
    dnnl_memory_desc_t xmd = s_md(x->ndim, x->shape), src;
    dnnl_memory_desc_t dst = s_md(nd->ndim, nd->shape);
    dnnl_memory_t xm = s_in(n, nd->in[0], &xmd), sm = NULL;
    void *h = NULL;
    if (!xm || dnnl_memory_get_data_handle(xm, &h) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&src, nd->ndim, dims, dnnl_f32,
                                         strides) != dnnl_success ||
        !(sm = s_mem(n, &src, h)))
        return false;
    dnnl_memory_t dm = s_out(n, i, &dst);
    return dm && s_reorder(n, sm, &src, &dst, dm, nd->name, NULL);
}

static bool s_layer(kl_dnnl_net_t *n, int i)
{
    const kl_mnode_t *nd = &n->g.nodes[i];
    if (nd->fused)
        return true;
    switch (nd->op) {
    case KL_MOP_INPUT: {
        float *x = s_param(n);
        n->val[i].md = s_md(nd->ndim, nd->shape);
        n->val[i].m = x ? s_mem(n, &n->val[i].md, x) : NULL;
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

void kl_export_dnnl_close(kl_dnnl_net_t *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->nsteps; i++)
        dnnl_primitive_destroy(n->steps[i].p);
    for (int i = 0; i < n->nmems; i++)
        dnnl_memory_destroy(n->mems[i]);
    free(n->val);
    free(n->steps);
    free(n->mems);
    kl_buf_free(&n->why);
    if (n->st)
        dnnl_stream_destroy(n->st);
    if (n->eng)
        dnnl_engine_destroy(n->eng);
    if (n->g.nodes)
        kl_mgraph_free(&n->g);
    free(n->text);
    free(n);
}

int kl_export_dnnl_open(const char *model, float *const *params, int nparams,
                        kl_dnnl_net_t **out, char *err)
{
    *out = NULL;
    kl_dnnl_net_t *n = kl_xcalloc(1, sizeof *n);
    int rc = kl_model_text(model, &n->text, err);
    if (!rc)
        rc = kl_mgraph_parse(n->text, model, &n->g, err);
    if (rc) {
        kl_export_dnnl_close(n);
        return rc;
    }
    int nq = 0, first = -1;
    for (int i = 0; i < n->g.n; i++) {
        const kl_mnode_t *nd = &n->g.nodes[i];
        if (kl_mop_is_q(nd->op) || nd->op == KL_MOP_QUANTIZE ||
            nd->op == KL_MOP_DEQUANTIZE) {
            first = nq++ ? first : i;
        }
    }
    if (nq) {
        rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                       "the oneDNN graph is built in f32 only; the model "
                       "has %d quantized layers (q-ops, quantize, "
                       "dequantize), the first '%s' (%s)",
                       nq, n->g.nodes[first].name,
                       kl_mop_name(n->g.nodes[first].op));
        kl_export_dnnl_close(n);
        return rc;
    }
    kl_mgraph_fuse(&n->g);
    n->params = params;
    n->nparams = nparams;
    n->val = kl_xcalloc((size_t)n->g.n, sizeof(s_val_t));
    if (dnnl_engine_create(&n->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&n->st, n->eng, dnnl_stream_default_flags) !=
            dnnl_success) {
        kl_export_dnnl_close(n);
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "oneDNN has no CPU engine");
    }
    int nbad = 0;
    for (int i = 0; i < n->g.n; i++)
        if (!s_layer(n, i))
            kl_buf_printf(&n->why, "%s'%s' (%s)", nbad++ ? ", " : "",
                          n->g.nodes[i].name, kl_mop_name(n->g.nodes[i].op));
    int o = n->g.nout ? n->g.outputs[0] : n->g.n - 1;
    const kl_mnode_t *ond = &n->g.nodes[o];
    s_val_t *ov = &n->val[s_vnode(&n->g, o)];
    dnnl_memory_desc_t omd = s_md(ond->ndim, ond->shape);
    if (!nbad &&
        (!(n->out = s_mem(n, &omd, DNNL_MEMORY_NONE)) ||
         !s_reorder(n, ov->m, &ov->md, &omd, n->out, ond->name, "output")))
        kl_buf_printf(&n->why, "%s'%s' (the output)", nbad++ ? ", " : "",
                      ond->name);
    n->numel = s_numel(ond);
    if (nbad) {
        rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                       "oneDNN cannot express %d layer(s) as built here: %s",
                       nbad, n->why.data);
        kl_export_dnnl_close(n);
        return rc;
    }
    if (n->np != nparams) {
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "the oneDNN graph of %s takes %d parameters, %d given",
                       model, n->np, nparams);
        kl_export_dnnl_close(n);
        return rc;
    }
    *out = n;
    return KL_OK;
}

long long kl_export_dnnl_numel(const kl_dnnl_net_t *n)
{
    return n ? n->numel : 0;
}

int kl_export_dnnl_run(kl_dnnl_net_t *n, float *out, char *err)
{
    if (dnnl_memory_set_data_handle(n->out, out) != dnnl_success)
        return kl_seterr(err, KL_ERR_RUNTIME, "oneDNN: cannot set the output");
    for (int i = 0; i < n->nsteps; i++) {
        const s_step_t *s = &n->steps[i];
        if (dnnl_primitive_execute(s->p, n->st, s->nargs, s->args) !=
            dnnl_success)
            return kl_seterr(err, KL_ERR_RUNTIME,
                             "oneDNN's %s of '%s' failed to execute", s->kind,
                             s->name);
    }
    if (dnnl_stream_wait(n->st) != dnnl_success)
        return kl_seterr(err, KL_ERR_RUNTIME, "oneDNN's stream failed");
    return KL_OK;
}

void kl_export_dnnl_describe(const kl_dnnl_net_t *n, FILE *f)
{
    int layers = 0, reorders = 0, in = 0, between = 0, outs = 0;
    int res[3] = {0, 0, 0}; /* in place, copied, reordered */
    for (int i = 0; i < n->nsteps; i++) {
        const s_step_t *s = &n->steps[i];
        if (s->why) {
            reorders++;
            in += !strcmp(s->why, "input");
            outs += !strcmp(s->why, "output");
            between += !strcmp(s->why, "between layers");
            fprintf(f, "oneDNN reorder %s (%s): %s %s -> %s\n", s->name, s->why,
                    s->impl, s->src, s->dst);
            continue;
        }
        layers++;
        if (s->res)
            res[s->res[0] == 'i' ? 0 : s->res[0] == 'c' ? 1 : 2]++;
        fprintf(f, "oneDNN layer %s: %s %s (src %s, dst %s%s%s)\n", s->name,
                s->kind, s->impl, s->src, s->dst,
                s->res ? ", residual sum " : "", s->res ? s->res : "");
    }
    fprintf(f,
            "oneDNN runs %d primitives: %d layers, %d reorders (input %d, "
            "between layers %d, output %d, residual %d); residual sums: %d "
            "in place, %d copied, %d reordered per run\n",
            n->nsteps, layers, reorders, in, between, outs,
            reorders - in - between - outs, res[0], res[1], res[2]);
}

int kl_export_dnnl_check(kl_dnnl_net_t *n, const float *expect, long long numel,
                         double rtol, double *rel, char *err)
{
    if (numel != n->numel)
        return kl_seterr(err, KL_ERR_INVAL,
                         "oneDNN's output has %lld elements, %lld expected",
                         n->numel, numel);
    float *got = kl_xmalloc((size_t)numel * sizeof(float) + 1);
    int rc = kl_export_dnnl_run(n, got, err);
    double big = 0, worst = 0;
    long long at = 0;
    for (long long k = 0; !rc && k < numel; k++)
        big = fmax(big, fabs(expect[k]));
    for (long long k = 0; !rc && k < numel; k++) {
        double d = fabs((double)got[k] - expect[k]);
        if (!(d <= worst)) {
            worst = d;
            at = k;
        }
    }
    if (!rc && !(worst <= rtol * fmax(big, 1e-6)))
        rc = kl_seterr(err, KL_ERR_RUNTIME,
                       "oneDNN's output differs from the reference: element "
                       "%lld is %g, reference %g (largest |reference| %g, "
                       "rtol %g)",
                       at, got[at], expect[at], big, rtol);
    if (rel)
        *rel = big > 0 ? worst / big : 0.0;
    free(got);
    return rc;
}

#else

static const char s_none[] = "kiln was built without libdnnl (libdnnl-dev)";

int kl_export_dnnl_open(const char *model, float *const *params, int nparams,
                        kl_dnnl_net_t **out, char *err)
{
    (void)model, (void)params, (void)nparams;
    *out = NULL;
    return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", s_none);
}

long long kl_export_dnnl_numel(const kl_dnnl_net_t *n)
{
    (void)n;
    return 0;
}

int kl_export_dnnl_run(kl_dnnl_net_t *n, float *out, char *err)
{
    (void)n, (void)out;
    return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", s_none);
}

void kl_export_dnnl_describe(const kl_dnnl_net_t *n, FILE *f)
{
    (void)n;
    fprintf(f, "oneDNN: %s\n", s_none);
}

int kl_export_dnnl_check(kl_dnnl_net_t *n, const float *expect, long long numel,
                         double rtol, double *rel, char *err)
{
    (void)n, (void)expect, (void)numel, (void)rtol;
    if (rel)
        *rel = 0;
    return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", s_none);
}

void kl_export_dnnl_close(kl_dnnl_net_t *n)
{
    (void)n;
}

#endif
