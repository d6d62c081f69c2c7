/* kl_model.c - task extraction: fusion of relu, clip, the activations
 * (sigmoid, silu, hard_swish, hard_sigmoid, gelu) and residual add into
 * their producers, one workload per computing layer, identical workloads
 * merged into weighted tasks. The graph format is kl_model_parse.c. */
#include "kl_model_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

struct kl_model_s {
    char *name;
    kl_model_task_t *tasks;
    int ntasks;
    char **layers; /* task layer names (owned) */
    int nlayers, ntuned;
    double flop;
    char *untuned;
    kl_dtype prec; /* KL_DT_F32 or KL_DT_BF16 */
};

/* ---- fusion ---- */

static bool s_fuses_relu(kl_mop op)
{
    return op == KL_MOP_CONV2D || op == KL_MOP_DEPTHWISE ||
           op == KL_MOP_DENSE || op == KL_MOP_MATMUL;
}

static bool s_fuses_res(kl_mop op)
{
    return op == KL_MOP_CONV2D || op == KL_MOP_DEPTHWISE ||
           op == KL_MOP_DENSE || op == KL_MOP_MATMUL;
}

/* Whether node nd only renames its input's memory: a reshape, a flatten,
 * or a transpose that moves dims of size 1 only (the others keep their
 * order). */
static bool s_keeps_order(const kl_mgraph_t *g, const kl_mnode_t *nd)
{
    if (nd->op == KL_MOP_RESHAPE || nd->op == KL_MOP_FLATTEN)
        return true;
    if (nd->op != KL_MOP_TRANSPOSE)
        return false;
    const kl_mnode_t *x = &g->nodes[nd->in[0]];
    int last = -1;
    for (int i = 0; i < nd->ndim; i++) {
        if (x->shape[nd->perm[i]] == 1)
            continue;
        if (nd->perm[i] < last)
            return false;
        last = nd->perm[i];
    }
    return true;
}

/* The node whose output the add's operand v is: v itself, or, when v is
 * read through views that keep the memory order and nothing else reads
 * them, the dense or matmul under them (a transformer's projection
 * reshaped back to [seq, batch, d] before its residual add). */
static int s_res_producer(const kl_mgraph_t *g, int v)
{
    int u = v;
    while (s_keeps_order(g, &g->nodes[u]) && g->nodes[u].uses == 1)
        u = g->nodes[u].in[0];
    if (u == v)
        return v;
    const kl_mnode_t *p = &g->nodes[u];
    return (p->op == KL_MOP_DENSE || p->op == KL_MOP_MATMUL) && !p->fused ? u
                                                                          : v;
}

static void s_count_uses(kl_mgraph_t *g)
{
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            g->nodes[g->nodes[i].in[k]].uses++;
    for (int k = 0; k < g->nout; k++)
        g->nodes[g->outputs[k]].uses++;
}

bool kl_mgraph_fused_act(const kl_mnode_t *nd, kl_act *out)
{
    switch (nd->op) {
    case KL_MOP_SIGMOID:
        *out = KL_ACT_SIGMOID;
        return true;
    case KL_MOP_SILU:
        *out = KL_ACT_SILU;
        return true;
    case KL_MOP_HARD_SWISH:
        *out = KL_ACT_HARD_SWISH;
        return true;
    case KL_MOP_HARD_SIGMOID:
        *out = KL_ACT_HARD_SIGMOID;
        return true;
    case KL_MOP_GELU:
        *out = nd->gelu_tanh ? KL_ACT_GELU_TANH : KL_ACT_GELU;
        return true;
    default:
        return false;
    }
}

/* Folds relu, clip, the activations and residual adds into the producers
 * (see kl_model.h). A producer takes one activation (relu, clip or one
 * of kl_mgraph_fused_act's), last. */
void kl_mgraph_fuse(kl_mgraph_t *g)
{
    s_count_uses(g);
    for (int i = 0; i < g->n; i++) {
        kl_mnode_t *nd = &g->nodes[i];
        kl_act act;
        bool smooth = kl_mgraph_fused_act(nd, &act);
        if (nd->op == KL_MOP_RELU || nd->op == KL_MOP_CLIP || smooth) {
            const kl_mnode_t *x = &g->nodes[nd->in[0]];
            kl_mnode_t *p = &g->nodes[x->owner];
            if (s_fuses_relu(p->op) && !p->relu && !p->clip && !p->smooth &&
                x->uses == 1) {
                p->relu = nd->op == KL_MOP_RELU;
                p->clip = nd->op == KL_MOP_CLIP;
                if (p->clip) {
                    p->lo = nd->lo;
                    p->hi = nd->hi;
                }
                p->smooth = smooth;
                if (smooth) {
                    p->act = act;
                    p->alpha = nd->alpha;
                    p->beta = nd->beta;
                }
                nd->owner = x->owner;
                nd->fused = true;
            }
        } else if (nd->op == KL_MOP_ADD && !nd->bcast) {
            for (int k = 0; k < 2; k++) {
                const kl_mnode_t *x = &g->nodes[s_res_producer(g, nd->in[k])];
                kl_mnode_t *p = &g->nodes[x->owner];
                /* The residual must be computed before the layer it is
                 * fused into, which runs in node order. */
                if (s_fuses_res(p->op) && !p->res && !p->relu && !p->clip &&
                    !p->smooth && x->uses == 1 && nd->in[1 - k] < x->owner) {
                    p->res = true;
                    p->res_from = nd->in[1 - k];
                    nd->owner = x->owner;
                    nd->fused = true;
                    break;
                }
            }
        }
    }
    kl_mgraph_layout(g);
}

/* ---- one workload per computing layer ---- */

static void s_shape_x(kl_buf_t *b, const kl_mnode_t *nd)
{
    for (int i = 0; i < nd->ndim; i++)
        kl_buf_printf(b, "%s%lld", i ? "x" : "", (long long)nd->shape[i]);
}

/* A number as the shortest text that reads back to it. */
static void s_num(char out[40], double v)
{
    snprintf(out, 40, "%.15g", v);
    if (strtod(out, NULL) != v)
        snprintf(out, 40, "%.17g", v);
}

/* relu=1, clip=LO,HI or act=NAME (hard_sigmoid with its alpha= and
 * beta= when they are not the defaults) of a producer. */
static void s_activation(kl_buf_t *b, const kl_mnode_t *nd)
{
    char lo[40], hi[40];
    if (nd->relu)
        kl_buf_puts(b, " relu=1");
    if (nd->smooth) {
        kl_buf_printf(b, " act=%s", kl_act_name(nd->act));
        if (nd->act == KL_ACT_HARD_SIGMOID &&
            (nd->alpha != KL_ACT_HSIG_ALPHA || nd->beta != KL_ACT_HSIG_BETA)) {
            s_num(lo, nd->alpha);
            s_num(hi, nd->beta);
            kl_buf_printf(b, " alpha=%s beta=%s", lo, hi);
        }
    }
    if (nd->clip) {
        s_num(lo, nd->lo);
        s_num(hi, nd->hi);
        kl_buf_printf(b, " clip=%s,%s", lo, hi);
    }
}

static void s_epilogue(kl_buf_t *b, const kl_mnode_t *nd)
{
    if (nd->bias)
        kl_buf_puts(b, " bias=1");
    if (nd->res)
        kl_buf_puts(b, " residual=1");
    s_activation(b, nd);
}

/* A q-op's quantization: " za=.. zo=.. scale=.. out=.." as
 * kl_workload_from_op reads it. */
static void s_qspec(kl_buf_t *b, const kl_mnode_t *nd)
{
    kl_buf_printf(b, " za=%lld", (long long)nd->za);
    if (nd->qout == KL_DT_S32) {
        kl_buf_puts(b, " out=s32");
        return;
    }
    kl_buf_printf(b, " zo=%lld", (long long)nd->zo);
    if (nd->per_channel)
        kl_buf_puts(b, " scale=channel");
    else
        kl_buf_printf(b, " scale=%.9g", (double)(float)nd->scale);
    if (nd->qout == KL_DT_S8)
        kl_buf_puts(b, " out=s8");
}

void kl_mgraph_set_precision(kl_mgraph_t *g, kl_dtype prec)
{
    g->prec = prec;
}

/* Whether op computes in the graph's precision (kl_model.h, "Precision"):
 * the multiplying layers but depthwise convolutions. */
static bool s_takes_prec(kl_mop op)
{
    return op == KL_MOP_CONV2D || op == KL_MOP_DENSE || op == KL_MOP_MATMUL ||
           op == KL_MOP_BATCH_MATMUL;
}

static char *s_spec(const kl_mgraph_t *g, const kl_mnode_t *nd, bool q);

/* The kl_workload_from_op spec of layer nd, NULL for views and for the
 * ops without a named operator (a broadcasting add among them, and a
 * global pool of NHWC values: a reduction of the export). */
char *kl_mgraph_spec(const kl_mgraph_t *g, const kl_mnode_t *nd)
{
    if (nd->bcast || (nd->op == KL_MOP_GLOBAL_AVG_POOL && nd->nhwc))
        return NULL;
    char *f = s_spec(g, nd, false);
    if (!f || g->prec == KL_DT_F32 || !s_takes_prec(nd->op))
        return f;
    char *r = kl_xasprintf("%s in=%s", f, kl_dtype_name(g->prec));
    free(f);
    return r;
}

/* kl_mgraph_spec in f32. */
/* q: nd is the float form of a q-op (whose weight is always const) */
static char *s_spec(const kl_mgraph_t *g, const kl_mnode_t *nd, bool q)
{
    const kl_mnode_t *x = nd->nin ? &g->nodes[nd->in[0]] : NULL;
    const int64_t *s = x ? x->shape : NULL;
    kl_buf_t b = {0};
    if (kl_mop_is_q(nd->op)) {
        kl_mnode_t base = *nd;
        base.op = kl_mop_base(nd->op);
        char *f = s_spec(g, &base, true);
        kl_buf_printf(&b, "q%s", f);
        free(f);
        s_qspec(&b, nd);
        return kl_buf_take(&b);
    }
    switch (nd->op) {
    case KL_MOP_CONV2D:
    case KL_MOP_DEPTHWISE:
        kl_buf_printf(&b, "%s N=%lld C=%lld H=%lld W=%lld",
                      nd->op == KL_MOP_CONV2D ? "conv2d" : "depthwise_conv2d",
                      (long long)s[0], (long long)s[1], (long long)s[2],
                      (long long)s[3]);
        if (nd->op == KL_MOP_CONV2D)
            kl_buf_printf(&b, " K=%lld", (long long)nd->K);
        kl_buf_printf(&b, " R=%lld S=%lld stride=%lld pad=%lld",
                      (long long)nd->R, (long long)nd->S, (long long)nd->stride,
                      (long long)nd->pad);
        if (nd->dil != 1)
            kl_buf_printf(&b, " dilation=%lld", (long long)nd->dil);
        if (nd->groups > 1)
            kl_buf_printf(&b, " groups=%lld", (long long)nd->groups);
        if (nd->mult > 1)
            kl_buf_printf(&b, " multiplier=%lld", (long long)nd->mult);
        s_epilogue(&b, nd);
        if (nd->nhwc)
            kl_buf_puts(&b, " layout=NHWC");
        break;
    case KL_MOP_DENSE:
        kl_buf_printf(&b, "dense N=%lld I=%lld O=%lld bias=%d", (long long)s[0],
                      (long long)s[1], (long long)nd->O, nd->bias ? 1 : 0);
        if (nd->res)
            kl_buf_puts(&b, " residual=1");
        s_activation(&b, nd);
        break;
    case KL_MOP_MATMUL: {
        /* an N-D A is [M, K] with M the product of its leading dims */
        int64_t m = 1;
        for (int i = 0; i < x->ndim - 1; i++)
            m *= s[i];
        kl_buf_printf(&b, "matmul M=%lld N=%lld K=%lld", (long long)m,
                      (long long)nd->N, (long long)s[x->ndim - 1]);
        if (nd->nin == 1 && !q) /* B is the layer's weight */
            kl_buf_puts(&b, " const_b=1");
        s_epilogue(&b, nd);
        break;
    }
    case KL_MOP_BATCH_MATMUL: {
        /* B is the product of the dims before the last two */
        int64_t bt = 1;
        int r = x->ndim;
        for (int i = 0; i < r - 2; i++)
            bt *= s[i];
        kl_buf_printf(&b, "batch_matmul B=%lld M=%lld N=%lld K=%lld",
                      (long long)bt, (long long)s[r - 2],
                      (long long)nd->shape[r - 1], (long long)s[r - 1]);
        break;
    }
    case KL_MOP_MAX_POOL:
    case KL_MOP_AVG_POOL:
        kl_buf_printf(&b,
                      "%s N=%lld C=%lld H=%lld W=%lld R=%lld S=%lld "
                      "stride=%lld pad=%lld",
                      nd->op == KL_MOP_MAX_POOL ? "max_pool2d" : "avg_pool2d",
                      (long long)s[0], (long long)s[1], (long long)s[2],
                      (long long)s[3], (long long)nd->R, (long long)nd->S,
                      (long long)nd->stride, (long long)nd->pad);
        break;
    case KL_MOP_GLOBAL_AVG_POOL:
        /* The window is the whole input; the stride is left at its
         * default (R), as one would write it for `kiln tune --op`. */
        kl_buf_printf(&b,
                      "avg_pool2d N=%lld C=%lld H=%lld W=%lld R=%lld "
                      "S=%lld",
                      (long long)s[0], (long long)s[1], (long long)s[2],
                      (long long)s[3], (long long)s[2], (long long)s[3]);
        break;
    case KL_MOP_ADD:
    case KL_MOP_RELU:
    case KL_MOP_CLIP:
        kl_buf_printf(&b, "%s shape=", kl_mop_name(nd->op));
        s_shape_x(&b, nd);
        if (nd->op == KL_MOP_CLIP) {
            char lo[40], hi[40];
            s_num(lo, nd->lo);
            s_num(hi, nd->hi);
            kl_buf_printf(&b, " lo=%s hi=%s", lo, hi);
        }
        break;
    default:
        return NULL;
    }
    return kl_buf_take(&b);
}

static bool s_is_view(kl_mop op)
{
    return op == KL_MOP_INPUT || op == KL_MOP_FLATTEN || op == KL_MOP_RESHAPE ||
           op == KL_MOP_TRANSPOSE;
}

/* Adds w to the tasks (merging by key); takes w and spec. */
static void s_add_task(kl_model_t *m, kl_workload_t *w, char *spec,
                       const kl_mgraph_t *g, const kl_mnode_t *nd)
{
    m->flop += w->flop;
    for (int i = 0; i < m->ntasks; i++) {
        if (memcmp(m->tasks[i].w->key, w->key, sizeof(w->key)) == 0) {
            m->tasks[i].weight++;
            kl_workload_free(&w);
            free(spec);
            return;
        }
    }
    m->tasks = kl_xrealloc(m->tasks,
                           (size_t)(m->ntasks + 1) * sizeof(kl_model_task_t));
    m->layers =
        kl_xrealloc(m->layers, (size_t)(m->ntasks + 1) * sizeof(char *));
    m->layers[m->ntasks] = kl_xstrdup(nd->name);
    int64_t pw, pb;
    kl_model_param_sizes(g, nd, &pw, &pb);
    int64_t bytes = kl_mop_is_q(nd->op) ? pw + 4 * pb : 4 * (pw + pb);
    m->tasks[m->ntasks] =
        (kl_model_task_t){w, spec, 1, m->layers[m->ntasks], bytes};
    m->ntasks++;
}

/* "softmax x1, layer_norm x2" over the layers without a named operator:
 * softmax, layer_norm, gelu, the activations (those not fused into a
 * producer), then the general ops
 * (a broadcasting add is "add (broadcast)"; const computes nothing and,
 * like a view, is not listed), then quantize and dequantize. */
static char *s_untuned(const kl_mgraph_t *g)
{
    kl_buf_t b = {0};
    int nb = 0;
    for (int i = 0; i < g->n; i++)
        nb += g->nodes[i].op == KL_MOP_ADD && g->nodes[i].bcast;
    /* kl_graph.h's order: softmax ... silu, const ... reduce_sum, the
     * q-ops, quantize, dequantize */
    for (int op = KL_MOP_SOFTMAX; op <= KL_MOP_DEQUANTIZE; op++) {
        if (op == KL_MOP_CONST || kl_mop_is_q((kl_mop)op))
            continue;
        int n = 0;
        for (int i = 0; i < g->n; i++) /* a fused activation is tuned */
            n += g->nodes[i].op == (kl_mop)op && !g->nodes[i].fused;
        if (n)
            kl_buf_printf(&b, "%s%s x%d", b.len ? ", " : "",
                          kl_mop_name((kl_mop)op), n);
        if (op == KL_MOP_SILU && nb)
            kl_buf_printf(&b, "%sadd (broadcast) x%d", b.len ? ", " : "", nb);
    }
    char *r = kl_buf_take(&b);
    return r ? r : kl_xstrdup("");
}

static int s_extract(kl_model_t *m, kl_mgraph_t *g, const char *src, char *err)
{
    kl_mgraph_fuse(g);
    /* The add or max pool of an integer shortcut group runs as one loop
     * over the codes in the export: no task (counted as fused). */
    kl_qfuse_t *qf = kl_xcalloc((size_t)g->n, sizeof *qf);
    kl_mgraph_qfuse_plan(g, qf);
    for (int i = 0; i < g->n; i++) {
        const kl_mnode_t *nd = &g->nodes[i];
        if (nd->op != KL_MOP_INPUT)
            m->nlayers++;
        if (nd->fused || qf[i].kind == KL_QF_ADD ||
            qf[i].kind == KL_QF_MAXPOOL) {
            m->ntuned++;
            continue;
        }
        if (s_is_view(nd->op))
            continue;
        char *spec = kl_mgraph_spec(g, nd);
        if (!spec)
            continue;
        kl_workload_t *w = NULL;
        char werr[KL_ERRMSG_LEN];
        int rc = kl_workload_from_op(spec, &w, werr);
        if (rc) {
            free(spec);
            free(qf);
            return kl_seterr(err, rc, "%s:%d: layer '%s': %s", src, nd->line,
                             nd->name, werr);
        }
        m->ntuned++;
        s_add_task(m, w, spec, g, nd);
    }
    free(qf);
    if (m->ntasks == 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: no layer computes anything kiln can tune", src);
    m->untuned = s_untuned(g);
    return KL_OK;
}

int kl_model_precision(const char *name, kl_dtype *out, char *err)
{
    if (name && strcmp(name, "f32") == 0)
        *out = KL_DT_F32;
    else if (name && strcmp(name, "bf16") == 0)
        *out = KL_DT_BF16;
    else
        return kl_seterr(err, KL_ERR_INVAL,
                         "unknown precision '%s' (expected f32 or bf16)",
                         name ? name : "");
    return KL_OK;
}

int kl_model_parse(const char *text, const char *source, kl_model_t **out,
                   char *err)
{
    return kl_model_parse_prec(text, source, KL_DT_F32, out, err);
}

int kl_model_parse_prec(const char *text, const char *source, kl_dtype prec,
                        kl_model_t **out, char *err)
{
    *out = NULL;
    const char *src = source ? source : "graph";
    if (prec != KL_DT_F32 && prec != KL_DT_BF16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: precision %s (expected f32 or bf16)", src,
                         kl_dtype_name(prec));
    kl_mgraph_t g;
    int rc = kl_mgraph_layout_f32_env(err);
    if (rc || (rc = kl_mgraph_parse(text, src, &g, err)))
        return rc;
    kl_mgraph_set_precision(&g, prec);
    kl_model_t *m = kl_xcalloc(1, sizeof(*m));
    m->name = kl_xstrdup(g.name ? g.name : src);
    m->prec = prec;
    rc = s_extract(m, &g, src, err);
    kl_mgraph_free(&g);
    if (rc) {
        kl_model_destroy(&m);
        return rc;
    }
    *out = m;
    return KL_OK;
}

void kl_model_destroy(kl_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_model_t *m = *self_p;
    for (int i = 0; i < m->ntasks; i++) {
        kl_workload_free(&m->tasks[i].w);
        free(m->tasks[i].spec);
        free(m->layers[i]);
    }
    free(m->tasks);
    free(m->layers);
    free(m->name);
    free(m->untuned);
    free(m);
    *self_p = NULL;
}

/* ---- built-ins and files ---- */

const char *const *kl_model_builtin_names(void)
{
    static const char *names[16];
    if (!names[0]) {
        int n = 0;
        for (const kl_model_builtin_t *b = kl_model_builtins; b->name && n < 15;
             b++)
            names[n++] = b->name;
        names[n] = NULL;
    }
    return names;
}

const char *kl_model_builtin_text(const char *name)
{
    for (const kl_model_builtin_t *b = kl_model_builtins; name && b->name; b++)
        if (strcmp(b->name, name) == 0)
            return b->text;
    return NULL;
}

/* The text of a model (see kl_model_text) and, when params is not NULL,
 * its parameters (an ONNX model's; none for the others), its inputs
 * resized by opts (may be NULL). */
static int s_text_params(const char *name_or_path, const kl_model_opts_t *opts,
                         char **text, kl_model_params_t *params, char *err)
{
    *text = NULL;
    if (params)
        memset(params, 0, sizeof *params);
    if (!name_or_path || !*name_or_path)
        return kl_seterr(err, KL_ERR_INVAL, "no model given");
    int rc = kl_model_dims_check(opts, name_or_path, err);
    if (rc)
        return rc;
    const char *builtin = kl_model_builtin_text(name_or_path);
    if (builtin)
        return kl_model_resize_text(builtin, name_or_path, opts, text, err);
    char *data = NULL;
    size_t len = 0;
    char rerr[KL_ERRMSG_LEN];
    if (kl_read_file(name_or_path, &data, &len, rerr) != KL_OK) {
        kl_buf_t b = {0};
        for (const kl_model_builtin_t *m = kl_model_builtins; m->name; m++)
            kl_buf_printf(&b, "%s%s", b.len ? ", " : "", m->name);
        rc = kl_seterr(err, KL_ERR_NOTFOUND,
                       "model '%s' is neither a built-in (%s) nor a "
                       "readable graph file: %s",
                       name_or_path, b.data ? b.data : "", rerr);
        kl_buf_free(&b);
        return rc;
    }
    size_t pl = strlen(name_or_path);
    if (memchr(data, '\0', len) ||
        (pl > 5 && strcmp(name_or_path + pl - 5, ".onnx") == 0))
        rc = kl_model_onnx_import_opts(data, len, name_or_path, opts, text,
                                       params, err);
    else
        rc = kl_model_resize_text(data, name_or_path, opts, text, err);
    free(data);
    return rc;
}

int kl_model_text(const char *name_or_path, char **text, char *err)
{
    return s_text_params(name_or_path, NULL, text, NULL, err);
}

int kl_model_text_opts(const char *name_or_path, const kl_model_opts_t *opts,
                       char **text, char *err)
{
    return s_text_params(name_or_path, opts, text, NULL, err);
}

int kl_model_load(const char *name_or_path, kl_model_t **out, char *err)
{
    return kl_model_load_prec(name_or_path, KL_DT_F32, out, err);
}

int kl_model_load_prec(const char *name_or_path, kl_dtype prec,
                       kl_model_t **out, char *err)
{
    kl_model_opts_t o = {.prec = prec};
    return kl_model_load_opts(name_or_path, &o, out, err);
}

int kl_model_load_opts(const char *name_or_path, const kl_model_opts_t *opts,
                       kl_model_t **out, char *err)
{
    *out = NULL;
    char *text = NULL;
    int rc = kl_model_text_opts(name_or_path, opts, &text, err);
    if (!rc)
        rc = kl_model_parse_prec(text, name_or_path,
                                 opts ? opts->prec : KL_DT_F32, out, err);
    free(text);
    return rc;
}

/* ---- the measurement condition of each task ---- */

int kl_model_cond_parse(const char *text, kl_model_cond_t *out, char *err)
{
    static const char *const names[] = {"warm", "cold", "auto"};
    for (int i = 0; i < 3; i++)
        if (text && !strcmp(text, names[i])) {
            *out = (kl_model_cond_t)i;
            return KL_OK;
        }
    return kl_seterr(err, KL_ERR_INVAL,
                     "condition '%s': expected warm, cold or auto",
                     text ? text : "");
}

bool kl_model_task_cold(const kl_model_task_t *t, kl_model_cond_t c)
{
    return c == KL_MODEL_COND_COLD ||
           (c == KL_MODEL_COND_AUTO && t->param_bytes >= KL_MODEL_COLD_BYTES);
}

/* ---- accessors ---- */

const char *kl_model_name(const kl_model_t *m)
{
    return m->name;
}

kl_dtype kl_model_prec(const kl_model_t *m)
{
    return m->prec;
}

int kl_model_ntasks(const kl_model_t *m)
{
    return m->ntasks;
}

const kl_model_task_t *kl_model_task(const kl_model_t *m, int i)
{
    return i >= 0 && i < m->ntasks ? &m->tasks[i] : NULL;
}

int kl_model_nlayers(const kl_model_t *m)
{
    return m->nlayers;
}

int kl_model_ntuned_layers(const kl_model_t *m)
{
    return m->ntuned;
}

double kl_model_total_flop(const kl_model_t *m)
{
    return m->flop;
}

const char *kl_model_untuned(const kl_model_t *m)
{
    return m->untuned;
}

/* ---- parameters ---- */
int kl_model_text_params(const char *name_or_path, char **text,
                         kl_model_params_t *params, char *err)
{
    return kl_model_text_params_opts(name_or_path, NULL, text, params, err);
}

int kl_model_text_params_opts(const char *name_or_path,
                              const kl_model_opts_t *opts, char **text,
                              kl_model_params_t *params, char *err)
{
    int rc = s_text_params(name_or_path, opts, text, params, err);
    if (!rc && params->n)
        rc = kl_model_params_check(*text, name_or_path, params, err);
    if (rc) {
        kl_model_params_free(params);
        free(*text);
        *text = NULL;
    }
    return rc;
}

int kl_model_params(const char *name_or_path, kl_model_params_t *out, char *err)
{
    char *text = NULL;
    int rc = kl_model_text_params(name_or_path, &text, out, err);
    free(text);
    return rc;
}
