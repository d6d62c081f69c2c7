/* kl_model_onnx.c - ONNX import: a ModelProto (decoded with kiln's minimal
 * schema, onnx_min.proto) is written out as kiln graph text, which the
 * graph parser then reads like any other graph file. Weights only lend
 * their shapes; batch normalisation and constant adds after a conv or a
 * dense layer become its bias; Clip is a clip layer (relu for min 0 and no
 * max); symbolic dimensions are 1 (batch 1). */
#include "kl_model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"
#include "onnx_min.pb-c.h"

#define S_MAXV 8

typedef KilnOnnx__NodeProto s_node_t;
typedef KilnOnnx__TensorProto s_tensor_t;

typedef struct {
    char *onnx; /* ONNX value name */
    char *kiln; /* its name in the graph text */
    int line;   /* layer that computes it, -1 for inputs and aliases */
    bool owns;  /* kiln is this entry's (a graph input's name) */
} s_val_t;

typedef struct {
    char *name;
    const char *op;
    kl_buf_t args; /* inputs and attributes after the op */
    bool bias;
} s_line_t;

typedef struct {
    const KilnOnnx__GraphProto *g;
    const char *src;
    char *err;
    s_val_t *vals;
    int nvals;
    s_line_t *lines;
    int nlines;
    const s_tensor_t **consts; /* outputs of Constant nodes */
    char **const_names;
    int nconsts;
    kl_buf_t head;
} s_ctx_t;

static const s_tensor_t *s_init(const s_ctx_t *c, const char *name)
{
    if (!name || !*name)
        return NULL;
    for (size_t i = 0; i < c->g->n_initializer; i++)
        if (c->g->initializer[i]->name &&
            strcmp(c->g->initializer[i]->name, name) == 0)
            return c->g->initializer[i];
    for (int i = 0; i < c->nconsts; i++)
        if (strcmp(c->const_names[i], name) == 0)
            return c->consts[i];
    return NULL;
}

static s_val_t *s_val(const s_ctx_t *c, const char *onnx)
{
    for (int i = c->nvals - 1; i >= 0; i--)
        if (strcmp(c->vals[i].onnx, onnx) == 0)
            return &c->vals[i];
    return NULL;
}

static bool s_name_taken(const s_ctx_t *c, const char *k)
{
    for (int i = 0; i < c->nlines; i++)
        if (strcmp(c->lines[i].name, k) == 0)
            return true;
    for (int i = 0; i < c->nvals; i++)
        if (c->vals[i].line < 0 && c->vals[i].kiln &&
            strcmp(c->vals[i].kiln, k) == 0)
            return true;
    return false;
}

/* A graph-format name for an ONNX value: other characters become '_', long
 * names are cut, clashes get a number. Heap string. */
static char *s_kiln_name(const s_ctx_t *c, const char *onnx)
{
    char base[48];
    size_t n = 0;
    for (const char *p = onnx; *p && n < sizeof(base) - 1; p++) {
        char ch = *p;
        bool ok = ch == '_' || ch == '.' || ch == '-' ||
                  (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9');
        base[n++] = ok ? ch : '_';
    }
    base[n] = '\0';
    if (n == 0)
        snprintf(base, sizeof(base), "v");
    char *k = kl_xstrdup(base);
    for (int i = 2; s_name_taken(c, k); i++) {
        free(k);
        k = kl_xasprintf("%s_%d", base, i);
    }
    return k;
}

/* Adds a value; kiln is borrowed (from a line or another value) unless
 * owns. */
static void s_add_val(s_ctx_t *c, const char *onnx, char *kiln, int line,
                      bool owns)
{
    c->vals = kl_xrealloc(c->vals, (size_t)(c->nvals + 1) * sizeof(s_val_t));
    c->vals[c->nvals++] = (s_val_t){kl_xstrdup(onnx), kiln, line, owns};
}

static int s_fail(s_ctx_t *c, const s_node_t *nd, const char *what)
{
    return kl_seterr(c->err, KL_ERR_INVAL, "%s: node '%s' (%s): %s", c->src,
                     nd->name && *nd->name ? nd->name : "(unnamed)",
                     nd->op_type ? nd->op_type : "?", what);
}

/* The kiln name of value input k of nd, or NULL (and an error). */
static const char *s_in(s_ctx_t *c, const s_node_t *nd, size_t k, int *rc)
{
    const s_val_t *v =
        k < nd->n_input && nd->input[k][0] ? s_val(c, nd->input[k]) : NULL;
    if (!v) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "input %zu ('%.80s') is not a computed "
                 "value or graph input",
                 k, k < nd->n_input ? nd->input[k] : "");
        *rc = s_fail(c, nd, msg);
        return NULL;
    }
    return v->kiln;
}

/* Opens a layer for output 0 of nd. */
static s_line_t *s_line(s_ctx_t *c, const s_node_t *nd, const char *op)
{
    c->lines =
        kl_xrealloc(c->lines, (size_t)(c->nlines + 1) * sizeof(s_line_t));
    s_line_t *l = &c->lines[c->nlines];
    memset(l, 0, sizeof(*l));
    l->op = op;
    l->name = s_kiln_name(c, nd->n_output ? nd->output[0] : "v");
    c->nlines++;
    s_add_val(c, nd->n_output ? nd->output[0] : "", l->name, c->nlines - 1,
              false);
    return l;
}

static const KilnOnnx__AttributeProto *s_attr(const s_node_t *nd,
                                              const char *name)
{
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (nd->attribute[i]->name && strcmp(nd->attribute[i]->name, name) == 0)
            return nd->attribute[i];
    return NULL;
}

static int64_t s_aint(const s_node_t *nd, const char *name, int64_t def)
{
    const KilnOnnx__AttributeProto *a = s_attr(nd, name);
    return a && a->has_i ? a->i : def;
}

/* All values of an ints attribute equal (or absent: def)? */
static bool s_auniform(const s_node_t *nd, const char *name, int64_t def,
                       int64_t *out)
{
    const KilnOnnx__AttributeProto *a = s_attr(nd, name);
    *out = def;
    if (!a || a->n_ints == 0)
        return true;
    *out = a->ints[0];
    for (size_t i = 1; i < a->n_ints; i++)
        if (a->ints[i] != a->ints[0])
            return false;
    return true;
}

/* strides / pads / dilations of a 2-D window op, one value each. */
static int s_window(s_ctx_t *c, const s_node_t *nd, int64_t *stride,
                    int64_t *pad, int64_t *dil)
{
    /* NOTSET (the default: the pads as given) and VALID (no padding) are
     * what kiln reads; the value is ONNX bytes, without a terminator, so
     * its length is that of the word. */
    const KilnOnnx__AttributeProto *ap = s_attr(nd, "auto_pad");
    if (ap && ap->has_s && ap->s.len &&
        !(ap->s.len == 6 && memcmp(ap->s.data, "NOTSET", 6) == 0) &&
        !(ap->s.len == 5 && memcmp(ap->s.data, "VALID", 5) == 0)) {
        char msg[120];
        snprintf(msg, sizeof(msg),
                 "auto_pad %.*s is not supported (export with explicit "
                 "pads)",
                 (int)(ap->s.len > 40 ? 40 : ap->s.len), ap->s.data);
        return s_fail(c, nd, msg);
    }
    if (!s_auniform(nd, "strides", 1, stride))
        return s_fail(c, nd, "different strides per axis");
    if (!s_auniform(nd, "pads", 0, pad))
        return s_fail(c, nd, "asymmetric or per-axis pads");
    if (!s_auniform(nd, "dilations", 1, dil))
        return s_fail(c, nd, "different dilations per axis");
    if (s_aint(nd, "ceil_mode", 0))
        return s_fail(c, nd, "ceil_mode=1 is not supported");
    return KL_OK;
}

static int s_conv(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    const s_tensor_t *w = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    if (!x)
        return rc;
    if (!w || w->n_dims != 4)
        return s_fail(c, nd, "the weight must be a 4-D initializer");
    int64_t st, pad, dil, g = s_aint(nd, "group", 1);
    if ((rc = s_window(c, nd, &st, &pad, &dil)))
        return rc;
    int64_t K = w->dims[0], R = w->dims[2], S = w->dims[3];
    bool dw = g > 1 && w->dims[1] == 1;
    if (dw && K % g)
        return s_fail(c, nd,
                      "depthwise: output channels not a multiple of "
                      "the groups");
    s_line_t *l = s_line(c, nd, dw ? "depthwise_conv2d" : "conv2d");
    kl_buf_printf(&l->args, "%s", x);
    if (!dw)
        kl_buf_printf(&l->args, " K=%lld", (long long)K);
    kl_buf_printf(&l->args, " R=%lld S=%lld stride=%lld pad=%lld", (long long)R,
                  (long long)S, (long long)st, (long long)pad);
    if (dil != 1)
        kl_buf_printf(&l->args, " dilation=%lld", (long long)dil);
    if (dw && K / g > 1)
        kl_buf_printf(&l->args, " multiplier=%lld", (long long)(K / g));
    if (!dw && g > 1)
        kl_buf_printf(&l->args, " groups=%lld", (long long)g);
    l->bias = nd->n_input > 2 && nd->input[2][0];
    return KL_OK;
}

static int s_pool(s_ctx_t *c, const s_node_t *nd, bool is_max)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    if (!x)
        return rc;
    const KilnOnnx__AttributeProto *k = s_attr(nd, "kernel_shape");
    if (!k || k->n_ints != 2)
        return s_fail(c, nd, "kernel_shape must have 2 values");
    int64_t st, pad, dil;
    if ((rc = s_window(c, nd, &st, &pad, &dil)))
        return rc;
    if (dil != 1)
        return s_fail(c, nd, "dilated pooling is not supported");
    if (!is_max && pad > 0 && !s_aint(nd, "count_include_pad", 0))
        return s_fail(c, nd,
                      "padding excluded from the average "
                      "(count_include_pad=0) is not supported");
    s_line_t *l = s_line(c, nd, is_max ? "max_pool2d" : "avg_pool2d");
    kl_buf_printf(&l->args, "%s R=%lld S=%lld stride=%lld pad=%lld", x,
                  (long long)k->ints[0], (long long)k->ints[1], (long long)st,
                  (long long)pad);
    return KL_OK;
}

/* Gemm and MatMul. */
static int s_gemm(s_ctx_t *c, const s_node_t *nd, bool gemm)
{
    int rc = KL_OK;
    const char *a = s_in(c, nd, 0, &rc);
    if (!a)
        return rc;
    const s_tensor_t *b = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    if (gemm) {
        const KilnOnnx__AttributeProto *al = s_attr(nd, "alpha"),
                                       *be = s_attr(nd, "beta");
        if (s_aint(nd, "transA", 0) || (al && al->has_f && al->f != 1.0f) ||
            (be && be->has_f && be->f != 1.0f))
            return s_fail(c, nd, "only transA=0, alpha=1, beta=1");
        if (!b || b->n_dims != 2)
            return s_fail(c, nd, "B must be a 2-D initializer");
    }
    if (!b) { /* two computed values: matmul A B (batched when 3-D) */
        const char *bb = s_in(c, nd, 1, &rc);
        if (!bb)
            return rc;
        s_line_t *l = s_line(c, nd, "matmul");
        kl_buf_printf(&l->args, "%s %s", a, bb);
        return KL_OK;
    }
    if (b->n_dims != 2)
        return s_fail(c, nd, "a weight that is not 2-D");
    bool tb = gemm && s_aint(nd, "transB", 0);
    s_line_t *l = s_line(c, nd, tb ? "dense" : "matmul");
    if (tb)
        kl_buf_printf(&l->args, "%s O=%lld", a, (long long)b->dims[0]);
    else
        kl_buf_printf(&l->args, "%s N=%lld", a, (long long)b->dims[1]);
    l->bias = gemm && nd->n_input > 2 && nd->input[2][0];
    return KL_OK;
}

/* An op that becomes its producer's bias (BatchNormalization, Add of a
 * constant): aliases the output to the producer's. */
static int s_fold_bias(s_ctx_t *c, const s_node_t *nd, size_t k)
{
    const s_val_t *v = k < nd->n_input ? s_val(c, nd->input[k]) : NULL;
    if (!v || v->line < 0)
        return s_fail(c, nd,
                      "folds into a bias only after a conv, dense or "
                      "matmul layer");
    s_line_t *l = &c->lines[v->line];
    if (strcmp(l->op, "conv2d") && strcmp(l->op, "depthwise_conv2d") &&
        strcmp(l->op, "dense") && strcmp(l->op, "matmul"))
        return s_fail(c, nd,
                      "folds into a bias only after a conv, dense or "
                      "matmul layer");
    if (strcmp(l->op, "matmul") == 0 && strchr(l->args.data, ' ') &&
        !strstr(l->args.data, "N="))
        return s_fail(c, nd, "a bias on a matmul of two computed values");
    l->bias = true;
    s_add_val(c, nd->n_output ? nd->output[0] : "", l->name, -1, false);
    return KL_OK;
}

/* Reshape's target shape as "AxBx..." (0 copies, -1 infers). */
static int s_reshape(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    const s_tensor_t *t = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    if (!x)
        return rc;
    int64_t d[KL_MODEL_MAX_DIMS];
    size_t n = 0;
    if (t && t->n_int64_data) {
        n = t->n_int64_data;
        for (size_t i = 0; i < n && i < KL_MODEL_MAX_DIMS; i++)
            d[i] = t->int64_data[i];
    } else if (t && t->has_raw_data && t->raw_data.len % 8 == 0) {
        n = t->raw_data.len / 8;
        for (size_t i = 0; i < n && i < KL_MODEL_MAX_DIMS; i++)
            memcpy(&d[i], t->raw_data.data + 8 * i, 8); /* little-endian */
    }
    if (n == 0 || n > KL_MODEL_MAX_DIMS)
        return s_fail(c, nd,
                      "the shape must be a constant int64 tensor of "
                      "1 to 8 values");
    s_line_t *l = s_line(c, nd, "reshape");
    kl_buf_printf(&l->args, "%s shape=", x);
    for (size_t i = 0; i < n; i++)
        kl_buf_printf(&l->args, "%s%lld", i ? "x" : "", (long long)d[i]);
    return KL_OK;
}

static int s_simple(s_ctx_t *c, const s_node_t *nd, const char *op)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    if (!x)
        return rc;
    s_line_t *l = s_line(c, nd, op);
    kl_buf_puts(&l->args, x);
    return KL_OK;
}

/* Bound k of a Clip (1: min, 2: max): a constant f32 scalar input (opset
 * 11 on), else the float attribute `what` (before 11). *has is false when
 * there is none; an infinite bound on its own side is none too. */
static int s_clip_bound(s_ctx_t *c, const s_node_t *nd, size_t k,
                        const char *what, bool *has, float *v)
{
    char msg[200];
    const KilnOnnx__AttributeProto *a = s_attr(nd, what);
    *has = false;
    if (k < nd->n_input && nd->input[k] && nd->input[k][0]) {
        const s_tensor_t *t = s_init(c, nd->input[k]);
        const char *why = NULL;
        if (!t)
            why = "is not a constant (an initializer or a Constant node)";
        else if (t->has_data_type && t->data_type != 1)
            why = "is not float32";
        else if (t->n_float_data == 1)
            *v = t->float_data[0];
        else if (t->has_raw_data && t->raw_data.len == 4)
            memcpy(v, t->raw_data.data, 4); /* little-endian */
        else
            why = "is not one float";
        if (why) {
            snprintf(msg, sizeof(msg), "%s ('%.80s') %s", what, nd->input[k],
                     why);
            return s_fail(c, nd, msg);
        }
        *has = true;
    } else if (a && a->has_f) {
        *v = a->f;
        *has = true;
    }
    bool lo = k == 1;
    if (*has && isinf(*v) && (*v < 0) == lo)
        *has = false;
    else if (*has && !isfinite(*v)) {
        snprintf(msg, sizeof(msg), "%s is %g", what, (double)*v);
        return s_fail(c, nd, msg);
    }
    return KL_OK;
}

/* Clip(min, max): the clip layer, clip lo=MIN hi=MAX; min 0 without a
 * max is relu. A bound alone otherwise has no kiln op (clip takes both),
 * nor does a Clip without bounds. */
static int s_clip(s_ctx_t *c, const s_node_t *nd)
{
    bool has_lo, has_hi;
    float lo = 0, hi = 0;
    int rc = s_clip_bound(c, nd, 1, "min", &has_lo, &lo);
    if (!rc)
        rc = s_clip_bound(c, nd, 2, "max", &has_hi, &hi);
    if (rc)
        return rc;
    if (!has_lo)
        return s_fail(c, nd,
                      "a Clip without a min is not supported (kiln's clip "
                      "takes both bounds; min 0 alone is relu)");
    if (!has_hi && lo != 0.0f)
        return s_fail(c, nd,
                      "a Clip without a max is supported only with min 0 "
                      "(relu)");
    if (!has_hi)
        return s_simple(c, nd, "relu");
    if (lo > hi) {
        char msg[120];
        snprintf(msg, sizeof(msg), "min %.9g is above max %.9g", (double)lo,
                 (double)hi);
        return s_fail(c, nd, msg);
    }
    if ((rc = s_simple(c, nd, "clip")))
        return rc;
    /* %.9g reads back as the same float. */
    kl_buf_printf(&c->lines[c->nlines - 1].args, " lo=%.9g hi=%.9g", (double)lo,
                  (double)hi);
    return KL_OK;
}

static bool s_is(const s_node_t *nd, const char *op)
{
    return strcmp(nd->op_type, op) == 0;
}

static int s_node(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    if (!nd->op_type || nd->n_output < 1)
        return s_fail(c, nd, "a node without op_type or output");
    if (nd->domain && *nd->domain && strcmp(nd->domain, "ai.onnx"))
        return s_fail(c, nd, "an op outside the default ONNX domain");
    if (s_is(nd, "Constant")) {
        const KilnOnnx__AttributeProto *v = s_attr(nd, "value");
        if (!v || !v->t)
            return s_fail(c, nd, "a Constant without a tensor value");
        c->consts = kl_xrealloc(c->consts,
                                (size_t)(c->nconsts + 1) * sizeof(*c->consts));
        c->const_names = kl_xrealloc(c->const_names,
                                     (size_t)(c->nconsts + 1) * sizeof(char *));
        c->consts[c->nconsts] = v->t;
        c->const_names[c->nconsts++] = kl_xstrdup(nd->output[0]);
        return KL_OK;
    }
    if (s_is(nd, "Conv"))
        return s_conv(c, nd);
    if (s_is(nd, "MaxPool") || s_is(nd, "AveragePool"))
        return s_pool(c, nd, s_is(nd, "MaxPool"));
    if (s_is(nd, "Gemm") || s_is(nd, "MatMul"))
        return s_gemm(c, nd, s_is(nd, "Gemm"));
    if (s_is(nd, "BatchNormalization"))
        return s_fold_bias(c, nd, 0);
    if (s_is(nd, "Add")) {
        for (size_t k = 0; k < 2 && nd->n_input == 2; k++)
            if (s_init(c, nd->input[1 - k]))
                return s_fold_bias(c, nd, k);
        const char *a = s_in(c, nd, 0, &rc), *b = a ? s_in(c, nd, 1, &rc) : 0;
        if (!b)
            return rc;
        s_line_t *l = s_line(c, nd, "add");
        kl_buf_printf(&l->args, "%s %s", a, b);
        return KL_OK;
    }
    if (s_is(nd, "Clip"))
        return s_clip(c, nd);
    if (s_is(nd, "Identity") || s_is(nd, "Dropout")) {
        const char *x = s_in(c, nd, 0, &rc);
        if (x)
            s_add_val(c, nd->output[0], (char *)x, -1, false);
        return rc;
    }
    if (s_is(nd, "Flatten")) {
        if (s_aint(nd, "axis", 1) != 1)
            return s_fail(c, nd, "only axis=1");
        return s_simple(c, nd, "flatten");
    }
    if (s_is(nd, "Reshape"))
        return s_reshape(c, nd);
    if (s_is(nd, "Transpose")) {
        const KilnOnnx__AttributeProto *p = s_attr(nd, "perm");
        if (!p || p->n_ints == 0)
            return s_fail(c, nd, "a Transpose without perm");
        if ((rc = s_simple(c, nd, "transpose")))
            return rc;
        kl_buf_t *b = &c->lines[c->nlines - 1].args;
        kl_buf_puts(b, " perm=");
        for (size_t i = 0; i < p->n_ints; i++)
            kl_buf_printf(b, "%s%lld", i ? "," : "", (long long)p->ints[i]);
        return KL_OK;
    }
    static const char *same[][2] = {{"Relu", "relu"},
                                    {"GlobalAveragePool", "global_avg_pool"},
                                    {"Softmax", "softmax"},
                                    {"LayerNormalization", "layer_norm"},
                                    {"Gelu", "gelu"}};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
        if (s_is(nd, same[i][0]))
            return s_simple(c, nd, same[i][1]);
    return s_fail(c, nd,
                  "unsupported op (kiln imports Conv, Gemm, MatMul, "
                  "BatchNormalization, Relu, Clip, Add, MaxPool, "
                  "AveragePool, GlobalAveragePool, Flatten, Reshape, "
                  "Transpose, Softmax, LayerNormalization, Gelu, "
                  "Identity, Dropout, Constant)");
}

/* "input NAME SHAPE" for the graph inputs that are not initializers. */
static int s_inputs(s_ctx_t *c)
{
    for (size_t i = 0; i < c->g->n_input; i++) {
        const KilnOnnx__ValueInfoProto *vi = c->g->input[i];
        if (!vi->name || s_init(c, vi->name))
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
        char *k = s_kiln_name(c, vi->name);
        s_add_val(c, vi->name, k, -1, true);
        kl_buf_printf(&c->head, "input %s ", k);
        for (size_t d = 0; d < tt->shape->n_dim; d++) {
            const KilnOnnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
            long long v =
                dm->value_case ==
                            KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                        dm->dim_value > 0
                    ? (long long)dm->dim_value
                    : 1;
            kl_buf_printf(&c->head, "%s%lld", d ? "x" : "", v);
        }
        kl_buf_puts(&c->head, "\n");
    }
    return KL_OK;
}

static char *s_emit(s_ctx_t *c)
{
    kl_buf_t b = {0};
    const char *base = strrchr(c->src, '/') ? strrchr(c->src, '/') + 1 : c->src;
    char *name = s_kiln_name(c, base);
    char *dot = strstr(name, ".onnx");
    if (dot && dot != name)
        *dot = '\0';
    kl_buf_printf(&b, "# imported from %s\nmodel %s\n", c->src, name);
    free(name);
    kl_buf_puts(&b, c->head.data ? c->head.data : "");
    for (int i = 0; i < c->nlines; i++)
        kl_buf_printf(&b, "%s = %s %s%s\n", c->lines[i].name, c->lines[i].op,
                      c->lines[i].args.data ? c->lines[i].args.data : "",
                      c->lines[i].bias ? " bias=1" : "");
    for (size_t i = 0; i < c->g->n_output; i++) {
        const s_val_t *v =
            c->g->output[i]->name ? s_val(c, c->g->output[i]->name) : NULL;
        if (v)
            kl_buf_printf(&b, "output %s\n", v->kiln);
    }
    return kl_buf_take(&b);
}

static void s_free(s_ctx_t *c)
{
    for (int i = 0; i < c->nvals; i++) {
        free(c->vals[i].onnx);
        if (c->vals[i].owns)
            free(c->vals[i].kiln);
    }
    free(c->vals);
    for (int i = 0; i < c->nlines; i++) {
        free(c->lines[i].name);
        kl_buf_free(&c->lines[i].args);
    }
    free(c->lines);
    for (int i = 0; i < c->nconsts; i++)
        free(c->const_names[i]);
    free(c->const_names);
    free(c->consts);
    kl_buf_free(&c->head);
}

int kl_model_onnx_to_text(const void *data, size_t len, const char *source,
                          char **text, char *err)
{
    *text = NULL;
    const char *src = source ? source : "model.onnx";
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
    s_ctx_t c = {.g = m->graph, .src = src, .err = err};
    int rc = s_inputs(&c);
    for (size_t i = 0; !rc && i < m->graph->n_node; i++)
        rc = s_node(&c, m->graph->node[i]);
    if (!rc)
        *text = s_emit(&c);
    s_free(&c);
    kiln_onnx__model_proto__free_unpacked(m, NULL);
    return rc;
}
