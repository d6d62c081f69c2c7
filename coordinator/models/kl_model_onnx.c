/* kl_model_onnx.c - ONNX import: a ModelProto (decoded with kiln's minimal
 * schema, onnx_min.proto) is written out as kiln graph text, which the
 * graph parser then reads like any other graph file, and, in the same
 * pass, the model's parameters (kl_model_params): each layer line keeps
 * its weight and bias as the named op reads them, and the nodes that fold
 * into it change those numbers (BatchNormalization, Add, Mul and Div of a
 * constant, Gemm's alpha and beta; docs/models.md, "The model's weights").
 * Weights are read only when the parameters are wanted; the text needs
 * their shapes alone. Clip is a clip layer (relu for min 0 and no max);
 * GELU's Erf form is a gelu layer, x * Sigmoid(x) a silu layer
 * (kl_model_onnx_act.c); symbolic dimensions are 1 (batch 1) unless
 * kl_model_opts_t overrides them (s_inputs, before any node). Nodes
 * kiln has no layer for are collected and named in one error, grouped
 * by op type (s_nodes). */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* The handler tables in the order a node is offered to them (see
 * kl_onnx__op_t). */
static const kl_onnx__op_t *const s_tables[] = {
    kl_onnx__const_ops,  kl_onnx__fold_ops, kl_onnx__q_ops,
    kl_onnx__qop_ops,    kl_onnx__qfp_ops,  kl_onnx__tf_ops,
    kl_onnx__layers_ops, kl_onnx__act_ops,  kl_onnx__ew_ops,
};

/* Offers nd to the rows for its op (of the com.microsoft ones when ms);
 * KL_ONNX__NEXT when none took it. */
static int s_dispatch(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, bool ms)
{
    unsigned want = ms ? KL_ONNX__MS : 0;
    for (size_t t = 0; t < sizeof(s_tables) / sizeof(s_tables[0]); t++)
        for (const kl_onnx__op_t *r = s_tables[t]; r->op; r++) {
            if ((r->flags & KL_ONNX__MS) != want || strcmp(r->op, nd->op_type))
                continue;
            int rc = r->fn(c, nd);
            if (rc != KL_ONNX__NEXT)
                return rc;
        }
    return KL_ONNX__NEXT;
}

static int s_node(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    if (!nd->op_type || nd->n_output < 1)
        return kl_onnx__fail(c, nd, "a node without op_type or output");
    /* com.microsoft's QuantizeLinear / DequantizeLinear (the contrib
     * form) are ONNX's for the types kiln reads */
    if (nd->domain && *nd->domain && !strcmp(nd->domain, "com.microsoft") &&
        !kl_onnx__is(nd, "QuantizeLinear") &&
        !kl_onnx__is(nd, "DequantizeLinear")) {
        int rc = s_dispatch(c, nd, true);
        if (rc != KL_ONNX__NEXT)
            return rc;
        c->why = "a com.microsoft operator kiln has no layer for";
        return KL_ONNX__UNSUP;
    }
    if (nd->domain && *nd->domain && strcmp(nd->domain, "ai.onnx") &&
        strcmp(nd->domain, "com.microsoft"))
        return kl_onnx__fail(c, nd, "an op outside the default ONNX domain");
    int rc = s_dispatch(c, nd, false);
    return rc == KL_ONNX__NEXT ? KL_ONNX__UNSUP : rc;
}

/* Whether some row takes nd's op (so a node computed from an unsupported
 * one is left unnamed: it may import once its input does); else *why
 * says what the node is when there is more to say than its op. */
static bool s_known(const kl_onnx__node_t *nd, const char **why)
{
    *why = NULL;
    if (!nd->op_type)
        return true;
    bool dflt = !nd->domain || !*nd->domain || !strcmp(nd->domain, "ai.onnx");
    bool ms = nd->domain && !strcmp(nd->domain, "com.microsoft");
    if (ms && (kl_onnx__is(nd, "QuantizeLinear") ||
               kl_onnx__is(nd, "DequantizeLinear")))
        ms = false, dflt = true;
    if (!dflt && !ms) {
        *why = "an op outside the default ONNX domain";
        return false;
    }
    unsigned want = ms ? KL_ONNX__MS : 0;
    for (size_t t = 0; t < sizeof(s_tables) / sizeof(s_tables[0]); t++)
        for (const kl_onnx__op_t *r = s_tables[t]; r->op; r++)
            if ((r->flags & KL_ONNX__MS) == want && !strcmp(r->op, nd->op_type))
                return true;
    if (ms)
        *why = "a com.microsoft operator kiln has no layer for";
    return false;
}

/* The unsupported nodes by op type: how many, the first few names, the
 * reason the first of them gave (if any). */
#define S_NAMES 3
typedef struct {
    const char *op;
    const char *why;
    int n;
    const char *name[S_NAMES];
} s_group_t;

typedef struct {
    s_group_t *g;
    int n, nodes;
} s_unsup_t;

static void s_unsup_add(s_unsup_t *u, const kl_onnx__node_t *nd,
                        const char *why)
{
    s_group_t *g = NULL;
    for (int i = 0; i < u->n && !g; i++)
        if (!strcmp(u->g[i].op, nd->op_type))
            g = &u->g[i];
    if (!g) {
        u->g = kl_xrealloc(u->g, (size_t)(u->n + 1) * sizeof(*u->g));
        g = memset(&u->g[u->n++], 0, sizeof(*g));
        g->op = nd->op_type;
    }
    if (g->n < S_NAMES)
        g->name[g->n] = kl_onnx__nname(nd);
    if (!g->why)
        g->why = why;
    g->n++;
    u->nodes++;
}

/* Most nodes first, then by op name. */
static int s_group_cmp(const void *pa, const void *pb)
{
    const s_group_t *a = pa, *b = pb;
    if (a->n != b->n)
        return a->n > b->n ? -1 : 1;
    return strcmp(a->op, b->op);
}

/* "Sigmoid (17 nodes: 'a', 'b', 'c', ...)" with up to names names. */
static void s_group_text(kl_buf_t *b, const s_group_t *g, int names)
{
    kl_buf_printf(b, "%.40s (%d node%s", g->op, g->n, g->n > 1 ? "s" : "");
    for (int k = 0; k < names && k < g->n && k < S_NAMES; k++)
        kl_buf_printf(b, "%s'%.60s'", k ? ", " : ": ", g->name[k]);
    if (names > 0 && g->n > names)
        kl_buf_puts(b, ", ...");
    if (g->why)
        kl_buf_printf(b, "; %.100s", g->why);
    kl_buf_puts(b, ")");
}

/* The groups within budget characters: as many names of each as fit
 * every group, none when even that does not, then as many groups as
 * fit and how many more there are. */
static char *s_unsup_text(const s_unsup_t *u, size_t budget)
{
    kl_buf_t b = {0};
    for (int names = S_NAMES; names >= 0; names--) {
        kl_buf_free(&b);
        b = (kl_buf_t){0};
        for (int i = 0; i < u->n; i++) {
            kl_buf_puts(&b, i ? ", " : "");
            s_group_text(&b, &u->g[i], names);
        }
        if (b.len <= budget)
            return kl_buf_take(&b);
    }
    kl_buf_free(&b);
    b = (kl_buf_t){0};
    int i = 0, left = u->nodes;
    for (; i < u->n; i++) {
        size_t at = b.len;
        kl_buf_puts(&b, i ? ", " : "");
        s_group_text(&b, &u->g[i], 0);
        if (i > 0 && b.len + 40 > budget) {
            b.len = at;
            b.data[at] = '\0';
            break;
        }
        left -= u->g[i].n;
    }
    if (i < u->n)
        kl_buf_printf(&b, ", and %d more op types (%d nodes)", u->n - i, left);
    return kl_buf_take(&b);
}

/* The one error naming every unsupported op type (s_unsup_text). */
static int s_unsup_err(kl_onnx__ctx_t *c, s_unsup_t *u)
{
    static const char tail[] = "; kiln imports Conv, Gemm, MatMul and the "
                               "other ops docs/models.md lists";
    qsort(u->g, (size_t)u->n, sizeof(*u->g), s_group_cmp);
    char *head = kl_xasprintf(
        "%s: ONNX import: %d op type%s %s not supported (%d node%s): ", c->src,
        u->n, u->n > 1 ? "s" : "", u->n > 1 ? "are" : "is", u->nodes,
        u->nodes > 1 ? "s" : "");
    size_t used = strlen(head) + sizeof(tail) - 1 + 1;
    size_t budget = used + 80 < KL_ERRMSG_LEN ? KL_ERRMSG_LEN - used : 80;
    char *list = s_unsup_text(u, budget);
    int rc = kl_seterr(c->err, KL_ERR_INVAL, "%s%s%s", head, list, tail);
    free(list);
    free(head);
    return rc;
}

/* Every node in order; those kiln has no layer for are named in one
 * error, by op type, their outputs skipped. A node computed from them is
 * named too when no row takes its op at all (nothing it could become). */
static int s_nodes(kl_onnx__ctx_t *c)
{
    static char bad[] = "?";
    s_unsup_t u = {0};
    int rc = KL_OK;
    c->skip = kl_xcalloc(c->g->n_node + 1, sizeof(bool));
    kl_onnx__gelu_tanh_scan(c);
    for (size_t i = 0; !rc && i < c->g->n_node; i++) {
        const kl_onnx__node_t *nd = c->g->node[i];
        if (c->skip[i])
            continue;
        bool tainted = false;
        for (size_t k = 0; k < nd->n_input; k++) {
            const kl_onnx__val_t *v =
                nd->input[k][0] ? kl_onnx__val(c, nd->input[k]) : NULL;
            tainted |= v && v->bad;
        }
        c->why = NULL;
        rc = tainted        ? KL_ONNX__UNSUP
             : c->gelu_x[i] ? kl_onnx__gelu_tanh(c, nd, c->gelu_x[i])
                            : s_node(c, nd);
        if (rc != KL_ONNX__UNSUP)
            continue;
        rc = KL_OK;
        for (size_t k = 0; k < nd->n_output; k++)
            kl_onnx__add_val(c, nd->output[k], bad, -1, false)->bad = true;
        const char *why = c->why;
        if (!tainted || !s_known(nd, &why))
            s_unsup_add(&u, nd, why);
        c->why = NULL;
    }
    if (!rc && u.n)
        rc = s_unsup_err(c, &u);
    free(u.g);
    return rc;
}

/* An input's shape as the model writes it, for errors: "[batch, 16, 64]"
 * (a symbolic dimension by its name, "?" when it has none). */
static char *s_shape_text(const KilnOnnx__TensorShapeProto *sh)
{
    kl_buf_t b = {0};
    kl_buf_puts(&b, "[");
    for (size_t k = 0; k < sh->n_dim; k++) {
        const KilnOnnx__TensorShapeProto__Dimension *dm = sh->dim[k];
        kl_buf_puts(&b, k ? ", " : "");
        if (dm->value_case ==
            KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            kl_buf_printf(&b, "%lld", (long long)dm->dim_value);
        else if (
            dm->value_case ==
                KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
            dm->dim_param && *dm->dim_param)
            kl_buf_printf(&b, "%.40s", dm->dim_param);
        else
            kl_buf_puts(&b, "?");
    }
    kl_buf_puts(&b, "]");
    return kl_buf_take(&b);
}

/* "input NAME SHAPE" for the graph inputs that are not initializers,
 * resized by c->dims (kl_model_opts_t). */
static int s_inputs(kl_onnx__ctx_t *c)
{
    for (size_t i = 0; i < c->g->n_input; i++) {
        const KilnOnnx__ValueInfoProto *vi = c->g->input[i];
        if (!vi->name || kl_onnx__init(c, vi->name))
            continue;
        const KilnOnnx__TypeProto__Tensor *tt =
            vi->type && vi->type->value_case ==
                            KILN_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE
                ? vi->type->tensor_type
                : NULL;
        if (!tt || !tt->shape || tt->shape->n_dim == 0)
            return kl_seterr(c->err, KL_ERR_INVAL,
                             "%s: input '%s' has no tensor shape", c->src,
                             vi->name);
        if (tt->has_elem_type && tt->elem_type != 1)
            return kl_seterr(c->err, KL_ERR_INVAL,
                             "%s: input '%s' is not float32 (ONNX type %d); "
                             "kiln models are f32",
                             c->src, vi->name, (int)tt->elem_type);
        int64_t d[KL_MODEL_MAX_DIMS];
        int n = (int)tt->shape->n_dim;
        if (n > KL_MODEL_MAX_DIMS)
            return kl_seterr(c->err, KL_ERR_INVAL,
                             "%s: input '%s' has %d dimensions (at most %d)",
                             c->src, vi->name, n, KL_MODEL_MAX_DIMS);
        for (int k = 0; k < n; k++) {
            const KilnOnnx__TensorShapeProto__Dimension *dm = tt->shape->dim[k];
            d[k] =
                dm->value_case ==
                            KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                        dm->dim_value > 0
                    ? dm->dim_value
                    : 1;
        }
        if (c->dims && (c->dims->batch || c->dims->seq)) {
            char *shape = s_shape_text(tt->shape);
            int rc = kl_model_dims_apply(c->dims, c->src, vi->name, shape, d, n,
                                         c->err);
            free(shape);
            if (rc)
                return rc;
        }
        char *k = kl_onnx__kiln_name(c, vi->name);
        kl_onnx__add_val(c, vi->name, k, -1, true);
        kl_buf_printf(&c->head, "input %s ", k);
        for (int i = 0; i < n; i++)
            kl_buf_printf(&c->head, "%s%lld", i ? "x" : "", (long long)d[i]);
        kl_buf_puts(&c->head, "\n");
    }
    return KL_OK;
}

/* rc (the import's result), or when the inputs were resized and the
 * layers so far no longer parse (a Reshape to a shape the exporter wrote
 * as a constant), the parser's error naming that layer and the
 * overrides: the node that then found no shape for its input, or the
 * parse of the finished text, would say less. */
static int s_resized_err(kl_onnx__ctx_t *c, int rc)
{
    const kl_model_opts_t *o = c->dims;
    if (!o || (!o->batch && !o->seq) || c->nlines == 0)
        return rc;
    kl_buf_t b = {0};
    kl_mgraph_t g;
    char perr[KL_ERRMSG_LEN];
    kl_onnx__lines_text(c, &b, true);
    int prc = kl_mgraph_parse(b.data, c->src, &g, perr);
    kl_buf_free(&b);
    kl_mgraph_free(&g); /* zeroed by a failed parse */
    if (prc == KL_OK)
        return rc;
    /* "SRC:LINE: " is a line of the text so far, not of the model */
    const char *msg = perr;
    size_t n = strlen(c->src);
    if (!strncmp(perr, c->src, n) && perr[n] == ':' && strstr(perr + n, ": "))
        msg = strstr(perr + n, ": ") + 2;
    char dims[64] = "";
    int k = 0;
    if (o->batch)
        k = snprintf(dims, sizeof dims, "--batch %lld", (long long)o->batch);
    if (o->seq)
        snprintf(dims + k, sizeof dims - (size_t)k, "%s--seq %lld",
                 k ? " " : "", (long long)o->seq);
    return kl_seterr(c->err, KL_ERR_INVAL,
                     "%s: with %s: %s (the model has this shape as a "
                     "constant; to resize it, export it with dynamic axes, "
                     "so that its shapes are computed from its inputs)",
                     c->src, dims, msg);
}

static char *s_emit(kl_onnx__ctx_t *c)
{
    kl_buf_t b = {0};
    const char *base = strrchr(c->src, '/') ? strrchr(c->src, '/') + 1 : c->src;
    char *name = kl_onnx__kiln_name(c, base);
    char *dot = strstr(name, ".onnx");
    if (dot && dot != name)
        *dot = '\0';
    kl_buf_printf(&b, "# imported from %s\nmodel %s\n", c->src, name);
    free(name);
    kl_onnx__lines_text(c, &b, false);
    for (size_t i = 0; i < c->g->n_output; i++) {
        const kl_onnx__val_t *v = c->g->output[i]->name
                                      ? kl_onnx__val(c, c->g->output[i]->name)
                                      : NULL;
        if (v)
            kl_buf_printf(&b, "output %s\n", v->kiln);
    }
    return kl_buf_take(&b);
}

/* The layers' parameters in graph order, each weight then its bias
 * (zeros when the model had none); the data moves out of the lines. */
static void s_params(kl_onnx__ctx_t *c, kl_model_params_t *ps)
{
    memset(ps, 0, sizeof(*ps));
    for (int i = 0; i < c->nlines; i++) {
        kl_onnx__line_t *l = &c->lines[i];
        if (!l->params || l->dead)
            continue;
        ps->p = kl_xrealloc(ps->p, (size_t)(ps->n + 3) * sizeof(*ps->p));
        if (l->q) {
            ps->p[ps->n++] =
                (kl_model_param_t){kl_xasprintf("%s.weight", l->name), l->wn,
                                   NULL, KL_DT_S8, l->w8};
            l->w8 = NULL;
            if (l->bias) {
                if (!l->b32)
                    l->b32 = kl_xcalloc((size_t)l->nout, sizeof(int32_t));
                ps->p[ps->n++] =
                    (kl_model_param_t){kl_xasprintf("%s.bias", l->name),
                                       l->nout, NULL, KL_DT_S32, l->b32};
                l->b32 = NULL;
            }
            if (l->nrq > 1) {
                ps->p[ps->n++] =
                    (kl_model_param_t){kl_xasprintf("%s.scale", l->name),
                                       l->nrq, l->rq, KL_DT_F32, NULL};
                l->rq = NULL;
            }
            continue;
        }
        ps->p[ps->n++] = (kl_model_param_t){kl_xasprintf("%s.weight", l->name),
                                            l->wn, l->w, KL_DT_F32, NULL};
        l->w = NULL;
        if (!l->bias)
            continue;
        if (!l->b)
            l->b = kl_xcalloc((size_t)l->nout, sizeof(float));
        ps->p[ps->n++] = (kl_model_param_t){kl_xasprintf("%s.bias", l->name),
                                            l->nout, l->b, KL_DT_F32, NULL};
        l->b = NULL;
    }
}

static void s_free(kl_onnx__ctx_t *c)
{
    for (int i = 0; i < c->nvals; i++) {
        free(c->vals[i].onnx);
        if (c->vals[i].owns)
            free(c->vals[i].kiln);
    }
    free(c->vals);
    for (int i = 0; i < c->nlines; i++) {
        free(c->lines[i].name);
        free(c->lines[i].in0);
        free(c->lines[i].out);
        free(c->lines[i].w);
        free(c->lines[i].b);
        free(c->lines[i].s_w);
        free(c->lines[i].w8);
        free(c->lines[i].b32);
        free(c->lines[i].rq);
        kl_buf_free(&c->lines[i].args);
    }
    free(c->lines);
    for (int i = 0; i < c->nconsts; i++) {
        free(c->consts[i].name);
        if (c->consts[i].own)
            free(c->consts[i].own->dims);
        free(c->consts[i].own);
        free(c->consts[i].data);
    }
    free(c->consts);
    free(c->skip);
    free(c->gelu_x);
    kl_buf_free(&c->head);
}

int kl_model_onnx_import(const void *data, size_t len, const char *source,
                         char **text, kl_model_params_t *params, char *err)
{
    return kl_model_onnx_import_opts(data, len, source, NULL, text, params,
                                     err);
}

int kl_model_onnx_import_opts(const void *data, size_t len, const char *source,
                              const kl_model_opts_t *opts, char **text,
                              kl_model_params_t *params, char *err)
{
    *text = NULL;
    if (params)
        memset(params, 0, sizeof(*params));
    const char *src = source ? source : "model.onnx";
    int rc = kl_model_dims_check(opts, src, err);
    if (rc)
        return rc;
    KilnOnnx__ModelProto *m = kiln_onnx__model_proto__unpack(NULL, len, data);
    if (!m)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: not an ONNX model (it does not decode as a "
                         "ModelProto)",
                         src);
    if (!m->graph || m->graph->n_node == 0) {
        kiln_onnx__model_proto__free_unpacked(m, NULL);
        return kl_seterr(err, KL_ERR_INVAL, "%s: an ONNX model without a graph",
                         src);
    }
    kl_onnx__ctx_t c = {
        .g = m->graph, .src = src, .err = err, .want = params, .dims = opts};
    rc = s_inputs(&c);
    if (!rc)
        rc = s_resized_err(&c, s_nodes(&c));
    if (!rc)
        *text = s_emit(&c);
    if (!rc && params)
        s_params(&c, params);
    s_free(&c);
    kiln_onnx__model_proto__free_unpacked(m, NULL);
    return rc;
}

int kl_model_onnx_to_text(const void *data, size_t len, const char *source,
                          char **text, char *err)
{
    return kl_model_onnx_import(data, len, source, text, NULL, err);
}
