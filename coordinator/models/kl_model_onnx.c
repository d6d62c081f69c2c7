/* kl_model_onnx.c - ONNX import: a ModelProto (decoded with kiln's minimal
 * schema, onnx_min.proto) is written out as kiln graph text, which the
 * graph parser then reads like any other graph file, and, in the same
 * pass, the model's parameters (kl_model_params): each layer line keeps
 * its weight and bias as the named op reads them, and the nodes that fold
 * into it change those numbers (BatchNormalization, Add, Mul and Div of a
 * constant, Gemm's alpha and beta; docs/models.md, "The model's weights").
 * Weights are read only when the parameters are wanted; the text needs
 * their shapes alone. Clip is a clip layer (relu for min 0 and no max);
 * GELU's Erf form is a gelu layer; symbolic dimensions are 1 (batch 1).
 * Nodes kiln has no layer for are collected and named in one error. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

const s_tensor_t *s_init(const s_ctx_t *c, const char *name)
{
    if (!name || !*name)
        return NULL;
    for (int i = c->nconsts - 1; i >= 0; i--)
        if (strcmp(c->consts[i].name, name) == 0)
            return c->consts[i].t;
    for (size_t i = 0; i < c->g->n_initializer; i++)
        if (c->g->initializer[i]->name &&
            strcmp(c->g->initializer[i]->name, name) == 0)
            return c->g->initializer[i];
    /* A Constant node further down (a pattern looks ahead). */
    for (size_t i = 0; i < c->g->n_node; i++) {
        const s_node_t *nd = c->g->node[i];
        if (nd->op_type && !strcmp(nd->op_type, "Constant") && nd->n_output &&
            !strcmp(nd->output[0], name))
            for (size_t k = 0; k < nd->n_attribute; k++)
                if (nd->attribute[k]->name &&
                    !strcmp(nd->attribute[k]->name, "value"))
                    return nd->attribute[k]->t;
    }
    return NULL;
}

void s_add_const(s_ctx_t *c, const char *name, const s_tensor_t *t,
                 s_tensor_t *own)
{
    c->consts =
        kl_xrealloc(c->consts, (size_t)(c->nconsts + 1) * sizeof(s_const_t));
    c->consts[c->nconsts++] = (s_const_t){kl_xstrdup(name), t, own, NULL};
}

/* How many nodes (and graph outputs) read value name. */
int s_readers(const s_ctx_t *c, const char *name)
{
    int n = 0;
    if (name[0] == S_OWN) /* kiln's own, read by the line made with it */
        return 1;
    /* a Shape reads no values: folds and splits keep the shape */
    for (size_t i = 0; i < c->g->n_node; i++)
        for (size_t k = 0; k < c->g->node[i]->n_input; k++)
            n += strcmp(c->g->node[i]->input[k], name) == 0 &&
                 !(c->g->node[i]->op_type &&
                   !strcmp(c->g->node[i]->op_type, "Shape"));
    for (size_t i = 0; i < c->g->n_output; i++)
        n += c->g->output[i]->name && strcmp(c->g->output[i]->name, name) == 0;
    return n;
}

/* The node that reads name, when exactly one does (else -1). */
int s_reader(const s_ctx_t *c, const char *name)
{
    if (s_readers(c, name) != 1)
        return -1;
    for (size_t i = 0; i < c->g->n_node; i++)
        for (size_t k = 0; k < c->g->node[i]->n_input; k++)
            if (strcmp(c->g->node[i]->input[k], name) == 0 &&
                strcmp(c->g->node[i]->op_type ? c->g->node[i]->op_type : "",
                       "Shape"))
                return (int)i;
    return -1;
}

int64_t s_numel(const s_tensor_t *t)
{
    int64_t n = 1;
    for (size_t i = 0; i < t->n_dims; i++)
        n *= t->dims[i];
    return n;
}

int s_terr(s_ctx_t *c, const char *name, const char *what)
{
    return kl_seterr(c->err, KL_ERR_INVAL, "%s: initializer '%s': %s", c->src,
                     name && *name ? name : "(unnamed)", what);
}

/* Reads t's floats from external data: the file external_data names,
 * relative to the model's directory. */
static int s_external(s_ctx_t *c, const s_tensor_t *t, const char *name,
                      float *out, int64_t n)
{
    const char *loc = NULL;
    long long off = 0, len = -1;
    char msg[400];
    for (size_t i = 0; i < t->n_external_data; i++) {
        const KilnOnnx__StringStringEntryProto *e = t->external_data[i];
        if (!e->key || !e->value)
            continue;
        if (strcmp(e->key, "location") == 0)
            loc = e->value;
        else if (strcmp(e->key, "offset") == 0)
            off = strtoll(e->value, NULL, 10);
        else if (strcmp(e->key, "length") == 0)
            len = strtoll(e->value, NULL, 10);
    }
    if (!loc || !*loc)
        return s_terr(c, name, "external data without a location");
    if (len >= 0 && len != n * 4) {
        snprintf(msg, sizeof(msg),
                 "external data of %lld bytes for %lld floats", len,
                 (long long)n);
        return s_terr(c, name, msg);
    }
    const char *slash = strrchr(c->src, '/');
    char *path =
        loc[0] == '/' || !slash
            ? kl_xstrdup(loc)
            : kl_xasprintf("%.*s/%s", (int)(slash - c->src), c->src, loc);
    FILE *f = fopen(path, "rb");
    size_t got = 0;
    if (f && off >= 0 && fseek(f, (long)off, SEEK_SET) == 0)
        got = fread(out, 4, (size_t)n, f);
    if (f)
        fclose(f);
    int rc = KL_OK;
    if (!f) {
        snprintf(msg, sizeof(msg),
                 "cannot open its external data file '%.200s'", path);
        rc = s_terr(c, name, msg);
    } else if (got != (size_t)n) {
        snprintf(msg, sizeof(msg),
                 "external data file '%.200s' ends before its %lld floats at "
                 "offset %lld",
                 path, (long long)n, off);
        rc = s_terr(c, name, msg);
    }
    free(path);
    return rc;
}

/* The floats of constant t (named name): float_data, raw_data (little
 * endian) or external data. *out is heap, *n its count. */
int s_floats(s_ctx_t *c, const s_tensor_t *t, const char *name, float **out,
             int64_t *n)
{
    char msg[200];
    *out = NULL;
    *n = s_numel(t);
    if (t->data_type != 1) {
        snprintf(msg, sizeof(msg),
                 "not float32 (ONNX type %d); kiln models are f32",
                 (int)t->data_type);
        return s_terr(c, name, msg);
    }
    if (*n < 0 || *n > ((int64_t)1 << 31))
        return s_terr(c, name, "a bad size");
    float *d = kl_xmalloc((size_t)(*n ? *n : 1) * sizeof(float));
    int rc = KL_OK;
    if (t->has_data_location && t->data_location == 1)
        rc = s_external(c, t, name, d, *n);
    else if (t->has_raw_data) {
        if (t->raw_data.len != (size_t)*n * 4) {
            snprintf(msg, sizeof(msg),
                     "raw_data of %zu bytes for %lld floats (truncated?)",
                     t->raw_data.len, (long long)*n);
            rc = s_terr(c, name, msg);
        } else
            memcpy(d, t->raw_data.data, (size_t)*n * 4); /* little-endian */
    } else if (t->n_float_data == (size_t)*n)
        memcpy(d, t->float_data, (size_t)*n * 4);
    else {
        snprintf(msg, sizeof(msg), "%zu values in float_data for %lld",
                 t->n_float_data, (long long)*n);
        rc = s_terr(c, name, msg);
    }
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    return KL_OK;
}

/* The int64 values of constant t (at most max), or -1. */
int s_ints_of(const s_tensor_t *t, int64_t *d, int max)
{
    size_t n = 0;
    if (t->data_type != 7)
        return -1;
    if (t->n_int64_data) {
        n = t->n_int64_data;
        for (size_t i = 0; i < n && i < (size_t)max; i++)
            d[i] = t->int64_data[i];
    } else if (t->has_raw_data && t->raw_data.len % 8 == 0) {
        n = t->raw_data.len / 8;
        for (size_t i = 0; i < n && i < (size_t)max; i++)
            memcpy(&d[i], t->raw_data.data + 8 * i, 8); /* little-endian */
    } else if (s_numel(t) != 0)
        return -1;
    return n > (size_t)max ? -1 : (int)n;
}

s_val_t *s_val(const s_ctx_t *c, const char *onnx)
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
s_val_t *s_add_val(s_ctx_t *c, const char *onnx, char *kiln, int line,
                   bool owns)
{
    c->vals = kl_xrealloc(c->vals, (size_t)(c->nvals + 1) * sizeof(s_val_t));
    c->vals[c->nvals] = (s_val_t){.onnx = kl_xstrdup(onnx),
                                  .kiln = kiln,
                                  .line = line,
                                  .owns = owns,
                                  .sole = true};
    return &c->vals[c->nvals++];
}

/* Output `onnx` becomes another name of value v (Identity, a fold). */
void s_alias(s_ctx_t *c, const char *onnx, const s_val_t *v)
{
    bool sole = v->sole && s_readers(c, v->onnx) == 1;
    kl_dtype dt = v->dt; /* v moves when a value is added */
    s_val_t *a = s_add_val(c, onnx, v->kiln, v->line, false);
    a->sole = sole;
    a->dt = dt;
}

static const char *s_nname(const s_node_t *nd)
{
    return nd->name && *nd->name ? nd->name : "(unnamed)";
}

int s_fail(s_ctx_t *c, const s_node_t *nd, const char *what)
{
    return kl_seterr(c->err, KL_ERR_INVAL, "%s: node '%s' (%s): %s", c->src,
                     s_nname(nd), nd->op_type ? nd->op_type : "?", what);
}

/* The kiln name of value input k of nd, or NULL (and an error). */
const char *s_in(s_ctx_t *c, const s_node_t *nd, size_t k, int *rc)
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
s_line_t *s_line_for(s_ctx_t *c, const char *out, const char *in0,
                     const char *op)
{
    c->lines =
        kl_xrealloc(c->lines, (size_t)(c->nlines + 1) * sizeof(s_line_t));
    s_line_t *l = &c->lines[c->nlines];
    memset(l, 0, sizeof(*l));
    l->op = op;
    /* a value of kiln's own (S_OWN prefix) is named without it */
    l->name = s_kiln_name(c, out[0] == S_OWN ? out + 1 : out);
    l->in0 = kl_xstrdup(in0);
    l->out = kl_xstrdup(out);
    c->nlines++;
    s_add_val(c, out, l->name, c->nlines - 1, false);
    return l;
}

s_line_t *s_line(s_ctx_t *c, const s_node_t *nd, const char *op)
{
    return s_line_for(c, nd->n_output ? nd->output[0] : "v",
                      nd->n_input ? nd->input[0] : "", op);
}

const KilnOnnx__AttributeProto *s_attr(const s_node_t *nd, const char *name)
{
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (nd->attribute[i]->name && strcmp(nd->attribute[i]->name, name) == 0)
            return nd->attribute[i];
    return NULL;
}

int64_t s_aint(const s_node_t *nd, const char *name, int64_t def)
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
int s_window(s_ctx_t *c, const s_node_t *nd, int64_t *stride, int64_t *pad,
             int64_t *dil)
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

/* The bias of line l from constant input k of nd (Conv's B, Gemm's C),
 * times scale: [nout], [1,nout] or a scalar. */
int s_bias_in(s_ctx_t *c, const s_node_t *nd, size_t k, s_line_t *l,
              float scale)
{
    if (k >= nd->n_input || !nd->input[k][0])
        return KL_OK;
    const s_tensor_t *t = s_init(c, nd->input[k]);
    if (!t)
        return s_fail(c, nd, "the bias must be a constant");
    int64_t n = s_numel(t);
    bool ok = n == 1 || (n == l->nout && t->dims[t->n_dims - 1] == n);
    if (!ok) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "the bias '%.80s' has %lld values for %lld outputs",
                 nd->input[k], (long long)n, (long long)l->nout);
        return s_fail(c, nd, msg);
    }
    l->bias = true;
    if (!c->want)
        return KL_OK;
    float *v;
    int rc = s_floats(c, t, nd->input[k], &v, &n);
    if (rc)
        return rc;
    l->b = kl_xmalloc((size_t)l->nout * sizeof(float));
    for (int64_t i = 0; i < l->nout; i++)
        l->b[i] = v[n == 1 ? 0 : i] * scale;
    free(v);
    return KL_OK;
}

/* The weight of line l: constant input 1 of nd, times scale. */
int s_weight_in(s_ctx_t *c, const s_node_t *nd, const s_tensor_t *w,
                s_line_t *l, float scale)
{
    l->params = true;
    if (!c->want)
        return KL_OK;
    int rc = s_floats(c, w, nd->input[1], &l->w, &l->wn);
    for (int64_t i = 0; !rc && scale != 1.0f && i < l->wn; i++)
        l->w[i] *= scale;
    return rc;
}
bool s_is(const s_node_t *nd, const char *op)
{
    return nd->op_type && strcmp(nd->op_type, op) == 0;
}

static int s_node(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    bool done;
    if (!nd->op_type || nd->n_output < 1)
        return s_fail(c, nd, "a node without op_type or output");
    /* com.microsoft's QuantizeLinear / DequantizeLinear (the contrib
     * form) are ONNX's for the types kiln reads */
    if (nd->domain && *nd->domain && !strcmp(nd->domain, "com.microsoft") &&
        !s_is(nd, "QuantizeLinear") && !s_is(nd, "DequantizeLinear")) {
        if (s_is(nd, "QGemm"))
            return s_qgemm(c, nd);
        if (s_is(nd, "QLinearGlobalAveragePool"))
            return s_qgap(c, nd);
        if ((rc = s_qfloat(c, nd, &done)) || done)
            return rc;
        c->why = "a com.microsoft operator kiln has no layer for";
        return S_UNSUP;
    }
    if (nd->domain && *nd->domain && strcmp(nd->domain, "ai.onnx") &&
        strcmp(nd->domain, "com.microsoft"))
        return s_fail(c, nd, "an op outside the default ONNX domain");
    if (s_is(nd, "Constant")) {
        const KilnOnnx__AttributeProto *v = s_attr(nd, "value");
        if (!v || !v->t)
            return s_fail(c, nd, "a Constant without a tensor value");
        s_add_const(c, nd->output[0], v->t, NULL);
        return KL_OK;
    }
    if ((rc = s_const_view(c, nd, &done)) || done)
        return rc;
    if ((rc = s_const_eval(c, nd, &done)) || done)
        return rc;
    if (s_is(nd, "Unsqueeze") || s_is(nd, "Squeeze"))
        return s_squeeze(c, nd);
    if (s_is(nd, "Gather")) {
        if ((rc = s_gather_block(c, nd, &done)) || done)
            return rc;
        return S_UNSUP;
    }
    if (s_is(nd, "QuantizeLinear"))
        return s_quantize(c, nd);
    if (s_is(nd, "DequantizeLinear"))
        return s_dequantize(c, nd);
    if (s_is(nd, "QLinearConv") || s_is(nd, "QLinearMatMul"))
        return s_qlinear(c, nd);
    if (s_is(nd, "MatMulInteger") || s_is(nd, "ConvInteger"))
        return s_int_op(c, nd);
    if (s_is(nd, "DynamicQuantizeLinear"))
        return s_dynamic(c, nd);
    if (s_is(nd, "Cast") && ((rc = s_int_cast(c, nd, &done)) || done))
        return rc;
    if ((s_is(nd, "Conv") || s_is(nd, "Gemm") || s_is(nd, "MatMul")) &&
        nd->n_input > 1 && s_dq_const(c, nd->input[1]))
        return s_qlayer(c, nd);
    if (s_is(nd, "Conv"))
        return s_conv(c, nd);
    if (s_is(nd, "MaxPool") && ((rc = s_qmaxpool(c, nd, &done)) || done))
        return rc;
    if (s_is(nd, "MaxPool") || s_is(nd, "AveragePool"))
        return s_pool(c, nd, s_is(nd, "MaxPool"));
    if (s_is(nd, "Gemm") || s_is(nd, "MatMul"))
        return s_gemm(c, nd, s_is(nd, "Gemm"));
    if (s_is(nd, "BatchNormalization"))
        return s_fold_bn(c, nd);
    bool add = s_is(nd, "Add"), mul = s_is(nd, "Mul"), div = s_is(nd, "Div");
    if ((add || mul || div) && nd->n_input == 2) {
        for (size_t k = 0; k < 2; k++)
            if (s_init(c, nd->input[1 - k]) && (k == 0 || !div)) {
                if (div) {
                    bool m;
                    if ((rc = s_gelu_erf(c, nd, &m)) || m)
                        return rc;
                }
                return s_fold_const(c, nd, k, add ? '+' : mul ? '*' : '/');
            }
        if (!add)
            return S_UNSUP;
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
        const s_val_t *v = nd->n_input ? s_val(c, nd->input[0]) : NULL;
        if (!v)
            return s_in(c, nd, 0, &rc), rc;
        s_alias(c, nd->output[0], v);
        return KL_OK;
    }
    if (s_is(nd, "Flatten")) {
        if (s_aint(nd, "axis", 1) != 1)
            return s_fail(c, nd, "only axis=1");
        return s_simple(c, nd, "flatten");
    }
    if (s_is(nd, "Reshape")) {
        int64_t d[8];
        const s_tensor_t *t = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
        int n = t && s_aint(nd, "allowzero", 0) ? s_ints_of(t, d, 8) : 0;
        for (int k = 0; k < n; k++)
            if (d[k] == 0)
                return s_fail(c, nd, "allowzero=1 with a 0 in the shape");
        return s_reshape(c, nd);
    }
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
    if (s_is(nd, "ReduceMean"))
        return s_reduce_mean(c, nd);
    if (s_is(nd, "LayerNormalization"))
        return s_layer_norm(c, nd);
    if (s_is(nd, "Softmax") && s_aint(nd, "axis", -1) != -1)
        return s_fail(c, nd, "only axis=-1 (the last axis)");
    if (s_is(nd, "Gelu") && s_attr(nd, "approximate")) {
        const KilnOnnx__AttributeProto *ap = s_attr(nd, "approximate");
        if (ap->has_s && !(ap->s.len == 4 && !memcmp(ap->s.data, "none", 4)))
            return s_fail(c, nd, "only approximate=none");
    }
    static const char *same[][2] = {{"Relu", "relu"},
                                    {"GlobalAveragePool", "global_avg_pool"},
                                    {"Softmax", "softmax"},
                                    {"Gelu", "gelu"}};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
        if (s_is(nd, same[i][0]))
            return s_simple(c, nd, same[i][1]);
    return S_UNSUP;
}

/* Every node in order; those kiln has no layer for are listed in one
 * error, their outputs (and what is computed from them) skipped. */
static int s_nodes(s_ctx_t *c)
{
    static char bad[] = "?";
    kl_buf_t list = {0};
    int nbad = 0, shown = 0, rc = KL_OK;
    c->skip = kl_xcalloc(c->g->n_node + 1, sizeof(bool));
    for (size_t i = 0; !rc && i < c->g->n_node; i++) {
        const s_node_t *nd = c->g->node[i];
        if (c->skip[i])
            continue;
        bool tainted = false;
        for (size_t k = 0; k < nd->n_input; k++) {
            const s_val_t *v = nd->input[k][0] ? s_val(c, nd->input[k]) : NULL;
            tainted |= v && v->bad;
        }
        c->why = NULL;
        rc = tainted ? S_UNSUP : s_node(c, nd);
        if (rc != S_UNSUP)
            continue;
        rc = KL_OK;
        for (size_t k = 0; k < nd->n_output; k++)
            s_add_val(c, nd->output[k], bad, -1, false)->bad = true;
        if (tainted)
            continue;
        nbad++;
        if (list.len < 400) {
            kl_buf_printf(&list, "%s'%.60s' (%.30s%s%.120s)", shown ? ", " : "",
                          s_nname(nd), nd->op_type, c->why ? ": " : "",
                          c->why ? c->why : "");
            shown++;
        }
        c->why = NULL;
    }
    if (!rc && nbad > shown)
        kl_buf_printf(&list, ", ... and %d more", nbad - shown);
    if (!rc && nbad)
        rc = kl_seterr(c->err, KL_ERR_INVAL,
                       "%s: %d node%s kiln cannot import: %s; kiln imports "
                       "Conv, Gemm, MatMul, BatchNormalization, Relu, Clip, "
                       "Add, Mul and Div by a constant, MaxPool, AveragePool, "
                       "GlobalAveragePool, ReduceMean over H,W, Flatten, "
                       "Reshape, Transpose, Softmax, LayerNormalization, Gelu "
                       "(or its Erf form), Identity, Dropout, Constant, "
                       "QuantizeLinear, DequantizeLinear (QDQ around Conv, "
                       "Gemm, MatMul), QLinearConv, QLinearMatMul, QGemm, "
                       "QLinearGlobalAveragePool, QLinearAdd and "
                       "QLinearAveragePool (com.microsoft), MaxPool on u8, "
                       "MatMulInteger, ConvInteger (and Cast, Mul by a "
                       "constant after them)",
                       c->src, nbad, nbad > 1 ? "s" : "", list.data);
    kl_buf_free(&list);
    return rc;
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

/* The input lines and the layers so far (the dead ones too when dead). */
void s_lines_text(const s_ctx_t *c, kl_buf_t *b, bool dead)
{
    kl_buf_puts(b, c->head.data ? c->head.data : "");
    for (int i = 0; i < c->nlines; i++)
        if (dead || !c->lines[i].dead)
            kl_buf_printf(b, "%s = %s %s%s\n", c->lines[i].name, c->lines[i].op,
                          c->lines[i].args.data ? c->lines[i].args.data : "",
                          c->lines[i].bias &&
                                  strcmp(c->lines[i].op, "layer_norm")
                              ? " bias=1"
                              : "");
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
    s_lines_text(c, &b, false);
    for (size_t i = 0; i < c->g->n_output; i++) {
        const s_val_t *v =
            c->g->output[i]->name ? s_val(c, c->g->output[i]->name) : NULL;
        if (v)
            kl_buf_printf(&b, "output %s\n", v->kiln);
    }
    return kl_buf_take(&b);
}

/* The layers' parameters in graph order, each weight then its bias
 * (zeros when the model had none); the data moves out of the lines. */
static void s_params(s_ctx_t *c, kl_model_params_t *ps)
{
    memset(ps, 0, sizeof(*ps));
    for (int i = 0; i < c->nlines; i++) {
        s_line_t *l = &c->lines[i];
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
    kl_buf_free(&c->head);
}

int kl_model_onnx_import(const void *data, size_t len, const char *source,
                         char **text, kl_model_params_t *params, char *err)
{
    *text = NULL;
    if (params)
        memset(params, 0, sizeof(*params));
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
    s_ctx_t c = {.g = m->graph, .src = src, .err = err, .want = params};
    int rc = s_inputs(&c);
    if (!rc)
        rc = s_nodes(&c);
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
