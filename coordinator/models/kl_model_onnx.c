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
#include "kl_model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"
#include "onnx_min.pb-c.h"

typedef KilnOnnx__NodeProto s_node_t;
typedef KilnOnnx__TensorProto s_tensor_t;

typedef struct {
    char *onnx; /* ONNX value name */
    char *kiln; /* its name in the graph text */
    int line;   /* layer that computes it (aliases: their source's), -1 for
                   inputs */
    bool owns;  /* kiln is this entry's (a graph input's name) */
    /* Every value from the layer's own output to this one was read by one
     * node only: a constant may fold into the layer through it. */
    bool sole;
    bool bad;    /* computed by a node kiln cannot import */
    kl_dtype dt; /* f32, or u8 / s8 (a quantize layer's or q-op's output) */
    /* A DequantizeLinear's output: the integer tensor (its kiln name,
     * borrowed), scale and zero point it dequantizes; virt when no
     * dequantize layer was written (every reader folds it). */
    const char *qkiln;
    kl_dtype qdt; /* the integer tensor's type (u8 / s8) */
    float qs;
    int64_t qzp;
    bool virt;
} s_val_t;

typedef struct {
    char *name;
    const char *op;
    kl_buf_t args; /* inputs and attributes after the op */
    bool bias;
    char *in0; /* ONNX name of the first input (views walk back) */
    /* The layer's parameters: a weight laid out as the named op reads it
     * (w, wn floats; colw: [K,N], the output channel is the column) and a
     * bias of nout floats (NULL: zeros). Data only when params are
     * wanted. */
    bool params;
    bool colw;
    bool dead; /* replaced (a packed projection split by its Gathers) */
    char *out; /* ONNX name of its output */
    int64_t nout;
    float *w;
    int64_t wn;
    float *b;
    /* A q-op (QDQ folded): s8 weight w8 (wn values), s32 bias b32 (nout),
     * the input and weight scales, and once its QuantizeLinear is folded
     * (pending until then) the requant scale rq (nout values, or one when
     * the weight is per tensor). */
    bool q, pending;
    float s_in;
    float *s_w;
    int64_t ns_w;
    int8_t *w8;
    int32_t *b32;
    float *rq;
    int64_t nrq;
    /* The QuantizeLinear node that folds into it (QDQ), and the Relu or
     * Clip between them (bounds clo, chi; has_lo / has_hi). */
    int qnode;
    int act; /* 0 none, 1 Relu, 2 Clip */
    bool has_lo, has_hi;
    float clo, chi;
} s_line_t;

/* A constant that is not an initializer: a Constant node's value, or a
 * view (Identity, Cast to float, Reshape, Squeeze, Unsqueeze) of a
 * constant; own is the derived tensor (its dims are owned, its data the
 * source's). */
typedef struct {
    char *name;
    const s_tensor_t *t;
    s_tensor_t *own;
    void *data; /* an evaluated constant's values (owned) */
} s_const_t;

typedef struct {
    const KilnOnnx__GraphProto *g;
    const char *src;
    char *err;
    bool want; /* read and fold the parameters */
    s_val_t *vals;
    int nvals;
    s_line_t *lines;
    int nlines;
    s_const_t *consts;
    int nconsts;
    bool *skip; /* nodes consumed by a pattern (gelu) */
    kl_buf_t head;
    const char *why; /* why the node just refused (S_UNSUP) was */
} s_ctx_t;

/* Returned by a node handler for a node kiln has no layer for; the caller
 * lists them all. */
#define S_UNSUP (-1000)

/* First character of the names of values kiln makes itself (no ONNX name
 * starts with it). */
#define S_OWN '\x01'

static const s_tensor_t *s_init(const s_ctx_t *c, const char *name)
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

static void s_add_const(s_ctx_t *c, const char *name, const s_tensor_t *t,
                        s_tensor_t *own)
{
    c->consts =
        kl_xrealloc(c->consts, (size_t)(c->nconsts + 1) * sizeof(s_const_t));
    c->consts[c->nconsts++] = (s_const_t){kl_xstrdup(name), t, own, NULL};
}

/* How many nodes (and graph outputs) read value name. */
static int s_readers(const s_ctx_t *c, const char *name)
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
static int s_reader(const s_ctx_t *c, const char *name)
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

static int64_t s_numel(const s_tensor_t *t)
{
    int64_t n = 1;
    for (size_t i = 0; i < t->n_dims; i++)
        n *= t->dims[i];
    return n;
}

static int s_terr(s_ctx_t *c, const char *name, const char *what)
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
static int s_floats(s_ctx_t *c, const s_tensor_t *t, const char *name,
                    float **out, int64_t *n)
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
static int s_ints_of(const s_tensor_t *t, int64_t *d, int max)
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
static s_val_t *s_add_val(s_ctx_t *c, const char *onnx, char *kiln, int line,
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
static void s_alias(s_ctx_t *c, const char *onnx, const s_val_t *v)
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

static int s_fail(s_ctx_t *c, const s_node_t *nd, const char *what)
{
    return kl_seterr(c->err, KL_ERR_INVAL, "%s: node '%s' (%s): %s", c->src,
                     s_nname(nd), nd->op_type ? nd->op_type : "?", what);
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
static s_line_t *s_line_for(s_ctx_t *c, const char *out, const char *in0,
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

static void s_lines_text(const s_ctx_t *c, kl_buf_t *b, bool dead);

static s_line_t *s_line(s_ctx_t *c, const s_node_t *nd, const char *op)
{
    return s_line_for(c, nd->n_output ? nd->output[0] : "v",
                      nd->n_input ? nd->input[0] : "", op);
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

/* The bias of line l from constant input k of nd (Conv's B, Gemm's C),
 * times scale: [nout], [1,nout] or a scalar. */
static int s_bias_in(s_ctx_t *c, const s_node_t *nd, size_t k, s_line_t *l,
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
static int s_weight_in(s_ctx_t *c, const s_node_t *nd, const s_tensor_t *w,
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
    l->nout = K;
    return s_weight_in(c, nd, w, l, 1.0f) ?: s_bias_in(c, nd, 2, l, 1.0f);
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

static void s_need_bias(s_ctx_t *c, s_line_t *l);

static float s_afloat(const s_node_t *nd, const char *name, float def)
{
    const KilnOnnx__AttributeProto *a = s_attr(nd, name);
    return a && a->has_f ? a->f : def;
}

static bool s_is(const s_node_t *nd, const char *op);
static const char *s_other(const s_node_t *nd, const char *one);
static int s_axes(s_ctx_t *c, const s_node_t *nd, int64_t *ax);

/* Gemm and MatMul: by a weight, dense O= ([O,I], Gemm transB=1) or matmul
 * N= ([K,N]), alpha in the weight and beta in the bias; MatMul of two
 * computed values: matmul A B. */
static int s_gemm(s_ctx_t *c, const s_node_t *nd, bool gemm)
{
    int rc = KL_OK;
    const char *a = s_in(c, nd, 0, &rc);
    if (!a)
        return rc;
    const s_tensor_t *b = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    if (gemm) {
        if (s_aint(nd, "transA", 0))
            return s_fail(c, nd, "transA=1 is not supported");
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
    l->colw = !tb;
    l->nout = tb ? b->dims[0] : b->dims[1];
    if (tb)
        kl_buf_printf(&l->args, "%s O=%lld", a, (long long)l->nout);
    else
        kl_buf_printf(&l->args, "%s N=%lld", a, (long long)l->nout);
    float alpha = gemm ? s_afloat(nd, "alpha", 1.0f) : 1.0f,
          beta = gemm ? s_afloat(nd, "beta", 1.0f) : 1.0f;
    rc = s_weight_in(c, nd, b, l, alpha);
    if (!rc && gemm)
        rc = s_bias_in(c, nd, 2, l, beta);
    if (!rc && tb) /* dense has bias=1 by default: zeros when none */
        s_need_bias(c, l);
    return rc;
}

/* ---- folding constants into the layer before them ---- */

/* The layer that constants after value `in` of nd fold into: a conv,
 * dense or matmul by a weight whose output only nd reads; through views
 * (reshape, transpose, flatten) when views. -1 and an error else. */
static int s_fold_target(s_ctx_t *c, const s_node_t *nd, const char *in,
                         bool views, int *rc)
{
    const s_val_t *v = in ? s_val(c, in) : NULL;
    const char *why = NULL;
    while (v && v->line >= 0 && views && v->sole &&
           s_readers(c, v->onnx) == 1) {
        const s_line_t *l = &c->lines[v->line];
        if (strcmp(l->op, "reshape") && strcmp(l->op, "transpose") &&
            strcmp(l->op, "flatten"))
            break;
        v = s_val(c, l->in0);
    }
    if (!v || v->line < 0 || !c->lines[v->line].params || c->lines[v->line].q ||
        !strcmp(c->lines[v->line].op, "layer_norm"))
        why = views ? "folds only into a conv, dense or matmul by a weight "
                      "(through reshapes and transposes)"
                    : "folds only into a conv, dense or matmul by a weight "
                      "just before it";
    else if (!v->sole || s_readers(c, v->onnx) != 1)
        why = "folds into the layer before it only when nothing else reads "
              "that layer's output";
    if (why) {
        *rc = s_fail(c, nd, why);
        return -1;
    }
    return v->line;
}

/* Constant t (named name) as per-output-channel values of line l: a scalar
 * (*n = 1), or l->nout values on the channel axis (conv: [K,1,1],
 * [1,K,1,1]; dense and matmul: [N], [1,N], ...; any shape when flat). Values
 * read only when params are wanted (*v NULL else). */
static int s_chan(s_ctx_t *c, const s_node_t *nd, const s_tensor_t *t,
                  const char *name, const s_line_t *l, bool flat, float **v,
                  int64_t *n)
{
    *v = NULL;
    *n = s_numel(t);
    bool conv = strstr(l->op, "conv2d") != NULL;
    bool ok = *n == 1 || (flat && *n == l->nout);
    if (!ok && *n == l->nout) {
        size_t ax = conv ? t->n_dims - 3 : t->n_dims - 1;
        ok = t->n_dims >= (conv ? 3u : 1u) && t->n_dims <= 4 &&
             t->dims[ax] == l->nout;
    }
    if (!ok) {
        char msg[240];
        snprintf(msg, sizeof(msg),
                 "constant '%.80s' (%lld values) is neither a scalar nor "
                 "one value per output channel of '%.60s' (%lld)",
                 name, (long long)*n, l->name, (long long)l->nout);
        return s_fail(c, nd, msg);
    }
    return c->want ? s_floats(c, t, name, v, n) : KL_OK;
}

/* Scales line l's output channel k by s[k] (s[0] for all when ns is 1):
 * its weight and bias. */
static void s_scale(s_line_t *l, const float *s, int64_t ns)
{
    int64_t per = l->nout ? l->wn / l->nout : 0;
    for (int64_t i = 0; l->w && i < l->wn; i++) {
        int64_t k = l->colw ? i % l->nout : i / per;
        l->w[i] *= s[ns == 1 ? 0 : k];
    }
    for (int64_t k = 0; l->b && k < l->nout; k++)
        l->b[k] *= s[ns == 1 ? 0 : k];
}

static void s_need_bias(s_ctx_t *c, s_line_t *l)
{
    l->bias = true;
    if (c->want && !l->b)
        l->b = kl_xcalloc((size_t)l->nout, sizeof(float));
}

/* Add, Mul or Div (op '+', '*', '/') of value input k of nd by constant
 * input 1-k: the bias (+), or a scale of weight and bias; a scalar scale
 * folds through views (attention's scaling of Q and K). */
static int s_fold_const(s_ctx_t *c, const s_node_t *nd, size_t k, char op)
{
    int rc = KL_OK;
    int li = s_fold_target(c, nd, nd->input[k], op != '+', &rc);
    const s_tensor_t *t = s_init(c, nd->input[1 - k]);
    if (li < 0)
        return rc;
    s_line_t *l = &c->lines[li];
    float *v;
    int64_t n;
    if ((rc = s_chan(c, nd, t, nd->input[1 - k], l, false, &v, &n)))
        return rc;
    if (op != '+' && n > 1 && s_val(c, nd->input[k])->line != li) {
        free(v);
        return s_fail(c, nd,
                      "a per-channel scale folds only into the layer just "
                      "before it, not through views");
    }
    if (op == '+') {
        s_need_bias(c, l);
        for (int64_t i = 0; v && i < l->nout; i++)
            l->b[i] += v[n == 1 ? 0 : i];
    } else if (v) {
        for (int64_t i = 0; op == '/' && i < n; i++)
            v[i] = 1.0f / v[i];
        s_scale(l, v, n);
    }
    free(v);
    s_alias(c, nd->output[0], s_val(c, nd->input[k]));
    return KL_OK;
}

/* BatchNormalization after a conv, dense or matmul: s = gamma /
 * sqrt(var + eps); W[k] *= s[k]; b' = (b - mean) * s + beta. */
static int s_fold_bn(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    int li =
        s_fold_target(c, nd, nd->n_input ? nd->input[0] : NULL, false, &rc);
    if (li < 0)
        return rc;
    s_line_t *l = &c->lines[li];
    float *p[4] = {NULL}; /* gamma, beta, mean, var */
    int64_t n[4];
    if (nd->n_input != 5)
        return s_fail(c, nd, "expects 5 inputs");
    for (int i = 0; i < 4 && !rc; i++) {
        const s_tensor_t *t = s_init(c, nd->input[i + 1]);
        if (!t)
            rc = s_fail(c, nd, "scale, B, mean and var must be constants");
        else
            rc = s_chan(c, nd, t, nd->input[i + 1], l, true, &p[i], &n[i]);
    }
    if (!rc && c->want) {
        double eps = s_afloat(nd, "epsilon", 1e-5f);
        float *s = kl_xmalloc((size_t)l->nout * sizeof(float));
        s_need_bias(c, l);
        for (int64_t k = 0; k < l->nout; k++) {
#define S_AT(i) ((double)p[i][n[i] == 1 ? 0 : k])
            s[k] = (float)(S_AT(0) / sqrt(S_AT(3) + eps));
            l->b[k] = (float)(((double)l->b[k] - S_AT(2)) * s[k] + S_AT(1));
#undef S_AT
        }
        float *keep = l->b;
        l->b = NULL; /* the bias is done; scale only the weight */
        s_scale(l, s, l->nout);
        l->b = keep;
        free(s);
    }
    if (!rc)
        s_need_bias(c, l);
    for (int i = 0; i < 4; i++)
        free(p[i]);
    if (!rc)
        s_alias(c, nd->output[0], s_val(c, nd->input[0]));
    return rc;
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
    return nd->op_type && strcmp(nd->op_type, op) == 0;
}

/* Constant t is one float within 1e-4 (relative) of want? */
static bool s_scalar_is(s_ctx_t *c, const char *name, double want)
{
    const s_tensor_t *t = s_init(c, name);
    float *v = NULL;
    int64_t n = 0;
    char keep[KL_ERRMSG_LEN];
    if (!t || s_numel(t) != 1)
        return false;
    memcpy(keep, c->err ? c->err : "", c->err ? KL_ERRMSG_LEN : 1);
    bool ok = s_floats(c, t, name, &v, &n) == KL_OK &&
              fabs(v[0] - want) <= 1e-4 * fabs(want);
    if (c->err) /* a failed read is just no match */
        memcpy(c->err, keep, KL_ERRMSG_LEN);
    free(v);
    return ok;
}

/* The other input of two-input node nd, given one of them; NULL when nd
 * does not read `one`. */
static const char *s_other(const s_node_t *nd, const char *one)
{
    if (nd->n_input != 2)
        return NULL;
    if (strcmp(nd->input[0], one) == 0)
        return nd->input[1];
    if (strcmp(nd->input[1], one) == 0)
        return nd->input[0];
    return NULL;
}

/* The node that alone reads node i's output and is an `op`, or NULL. */
static const s_node_t *s_next(const s_ctx_t *c, const s_node_t *nd,
                              const char *op, int *idx)
{
    int k = nd->n_output ? s_reader(c, nd->output[0]) : -1;
    *idx = k;
    return k >= 0 && s_is(c->g->node[k], op) ? c->g->node[k] : NULL;
}

/* GELU spelled out from Div nd: x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5
 * (or * 0.5, then * x): a gelu layer. *matched false when it is not. */
static int s_gelu_erf(s_ctx_t *c, const s_node_t *nd, bool *matched)
{
    *matched = false;
    int ie, ia, i1, i2;
    const char *x = nd->input[0];
    const s_node_t *e = s_next(c, nd, "Erf", &ie);
    const s_node_t *a = e ? s_next(c, e, "Add", &ia) : NULL;
    const char *one = a ? s_other(a, e->output[0]) : NULL;
    const s_node_t *m1 =
        one && s_scalar_is(c, one, 1.0) ? s_next(c, a, "Mul", &i1) : NULL;
    const char *o1 = m1 ? s_other(m1, a->output[0]) : NULL;
    const s_node_t *m2 = o1 ? s_next(c, m1, "Mul", &i2) : NULL;
    const char *o2 = m2 ? s_other(m2, m1->output[0]) : NULL;
    if (!o2 || !s_scalar_is(c, nd->input[1], sqrt(2.0)) ||
        !((strcmp(o1, x) == 0 && s_scalar_is(c, o2, 0.5)) ||
          (strcmp(o2, x) == 0 && s_scalar_is(c, o1, 0.5))))
        return KL_OK;
    int rc = KL_OK;
    const char *xk = s_in(c, nd, 0, &rc);
    if (!xk)
        return rc;
    s_line_t *l = s_line(c, m2, "gelu");
    kl_buf_puts(&l->args, xk);
    free(l->in0);
    l->in0 = kl_xstrdup(x);
    c->skip[ie] = c->skip[ia] = c->skip[i1] = c->skip[i2] = true;
    *matched = true;
    return KL_OK;
}

/* The int64 axes of nd: input 1 (opset 13 and 18 on) or the attribute. */
static int s_axes(s_ctx_t *c, const s_node_t *nd, int64_t *ax)
{
    const KilnOnnx__AttributeProto *a = s_attr(nd, "axes");
    if (a) {
        for (size_t i = 0; i < a->n_ints && i < 8; i++)
            ax[i] = a->ints[i];
        return a->n_ints > 8 ? -1 : (int)a->n_ints;
    }
    const s_tensor_t *t = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    return t ? s_ints_of(t, ax, 8) : nd->n_input > 1 ? -1 : 0;
}

/* ReduceMean over H and W with keepdims: global_avg_pool. */
static int s_nums(s_ctx_t *c, const char *name, double *v, int *type,
                  int64_t *dims, int *nd);

/* A ReduceMean over the last axis (keepdims) of the node's input? */
static bool s_mean_last(s_ctx_t *c, const s_node_t *nd, const char *x)
{
    int64_t ax[8];
    return nd && s_is(nd, "ReduceMean") && nd->n_input >= 1 &&
           !strcmp(nd->input[0], x) && s_axes(c, nd, ax) == 1 && ax[0] == -1 &&
           s_aint(nd, "keepdims", 1);
}

/* Layer norm spelled out from ReduceMean nd: d = x - mean(x); d / sqrt(
 * mean(d^2) + eps), then optionally * gamma (+ beta): layer_norm eps=
 * (affine=1, gamma and beta its weight and bias). *matched false when it
 * is not that. */
static int s_layer_norm_parts(s_ctx_t *c, const s_node_t *nd, bool *matched)
{
    const KilnOnnx__GraphProto *g = c->g;
    const char *x = nd->input[0];
    int is, ip = -1, iv, ie, iq, id = -1, im, ia;
    *matched = false;
    const s_node_t *sub = s_next(c, nd, "Sub", &is);
    if (!sub || sub->n_input != 2 || strcmp(sub->input[0], x) ||
        strcmp(sub->input[1], nd->output[0]) ||
        s_readers(c, sub->output[0]) != 2)
        return KL_OK;
    for (size_t i = 0; i < g->n_node; i++) { /* d's two readers */
        const s_node_t *n = g->node[i];
        if (n->n_input == 2 && !strcmp(n->input[0], sub->output[0]) &&
            s_is(n, "Pow") && s_scalar_is(c, n->input[1], 2.0))
            ip = (int)i;
        else if (n->n_input == 2 && !strcmp(n->input[0], sub->output[0]) &&
                 s_is(n, "Div"))
            id = (int)i;
    }
    if (ip < 0 || id < 0)
        return KL_OK;
    const s_node_t *var = s_next(c, g->node[ip], "ReduceMean", &iv);
    const s_node_t *add = var && s_mean_last(c, var, g->node[ip]->output[0])
                              ? s_next(c, var, "Add", &ie)
                              : NULL;
    const char *eps = add ? s_other(add, var->output[0]) : NULL;
    const s_node_t *sq = eps ? s_next(c, add, "Sqrt", &iq) : NULL;
    double ev[1];
    int64_t dd[8];
    int et, end;
    if (!sq || s_nums(c, eps, ev, &et, dd, &end) != 1 || !(ev[0] > 0) ||
        s_reader(c, sq->output[0]) != id ||
        strcmp(g->node[id]->input[1], sq->output[0]))
        return KL_OK;
    /* The affine part: * gamma, then + beta, constants of one shape. */
    const s_node_t *last = g->node[id], *mul = s_next(c, last, "Mul", &im);
    const char *gam = mul ? s_other(mul, last->output[0]) : NULL;
    const s_tensor_t *gt = gam ? s_init(c, gam) : NULL;
    const s_node_t *badd = gt ? s_next(c, mul, "Add", &ia) : NULL;
    const char *bet = badd ? s_other(badd, mul->output[0]) : NULL;
    const s_tensor_t *bt = bet ? s_init(c, bet) : NULL;
    if (!gt)
        mul = NULL;
    if (!bt || s_numel(bt) != s_numel(gt))
        badd = NULL, bt = NULL;
    last = badd ? badd : mul ? mul : last;
    int rc = KL_OK;
    const char *xk = s_in(c, nd, 0, &rc);
    if (!xk)
        return rc;
    s_line_t *l = s_line_for(c, last->output[0], x, "layer_norm");
    kl_buf_printf(&l->args, "%s eps=%.9g%s", xk, ev[0], mul ? " affine=1" : "");
    if (mul) {
        l->nout = s_numel(gt);
        l->params = true;
        l->bias = true;
        if (c->want && (rc = s_floats(c, gt, gam, &l->w, &l->wn)))
            return rc;
        if (c->want && bt) {
            int64_t n;
            if ((rc = s_floats(c, bt, bet, &l->b, &n)))
                return rc;
        } else if (c->want)
            l->b = kl_xcalloc((size_t)l->nout, sizeof(float));
        c->skip[im] = true;
        if (badd)
            c->skip[ia] = true;
    }
    c->skip[is] = c->skip[ip] = c->skip[iv] = c->skip[ie] = c->skip[iq] =
        c->skip[id] = true;
    *matched = true;
    return KL_OK;
}

/* ReduceMean over H and W with keepdims: global_avg_pool; over the last
 * axis, the start of a layer norm spelled out. */
static int s_reduce_mean(s_ctx_t *c, const s_node_t *nd)
{
    int64_t ax[8];
    int n = s_axes(c, nd, ax);
    bool m;
    int rc;
    if (s_mean_last(c, nd, nd->input[0]))
        return (rc = s_layer_norm_parts(c, nd, &m)) || m ? rc : S_UNSUP;
    /* {2, 3} or {-2, -1}, in either order (4-D: the parser checks) */
    int64_t lo = n == 2 && ax[0] > ax[1] ? ax[1] : ax[0],
            hi = n == 2 && ax[0] > ax[1] ? ax[0] : ax[1];
    bool hw = n == 2 && ((lo == 2 && hi == 3) || (lo == -2 && hi == -1));
    if (!hw || !s_aint(nd, "keepdims", 1))
        return S_UNSUP;
    return s_simple(c, nd, "global_avg_pool");
}

/* LayerNormalization over the last axis: layer_norm eps= affine=1, its
 * weight the scale and its bias B (zeros when none). */
static int s_layer_norm(s_ctx_t *c, const s_node_t *nd)
{
    int64_t axis = s_aint(nd, "axis", -1);
    if (axis != -1)
        return s_fail(c, nd, "only axis=-1 (the last axis)");
    const s_tensor_t *sc = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    if (!sc)
        return s_fail(c, nd, "the scale must be a constant");
    int rc = s_simple(c, nd, "layer_norm");
    if (rc)
        return rc;
    s_line_t *l = &c->lines[c->nlines - 1];
    kl_buf_printf(&l->args, " eps=%.9g affine=1",
                  (double)s_afloat(nd, "epsilon", 1e-5f));
    l->nout = s_numel(sc);
    return s_weight_in(c, nd, sc, l, 1.0f) ?: s_bias_in(c, nd, 2, l, 1.0f);
}

/* Identity, Cast to the same type, Reshape, Squeeze and Unsqueeze of a
 * constant: a constant (*done). */
static int s_const_view(s_ctx_t *c, const s_node_t *nd, bool *done)
{
    const s_tensor_t *t = nd->n_input ? s_init(c, nd->input[0]) : NULL;
    *done = false;
    if (!t)
        return KL_OK;
    if (s_is(nd, "Identity") ||
        (s_is(nd, "Cast") && s_aint(nd, "to", 0) == t->data_type)) {
        s_add_const(c, nd->output[0], t, NULL);
        *done = true;
        return KL_OK;
    }
    bool re = s_is(nd, "Reshape"), sq = s_is(nd, "Squeeze"),
         un = s_is(nd, "Unsqueeze");
    if (!re && !sq && !un)
        return KL_OK;
    int64_t ax[8], d[8];
    int n = re ? (nd->n_input > 1 && s_init(c, nd->input[1])
                      ? s_ints_of(s_init(c, nd->input[1]), ax, 8)
                      : -1)
               : s_axes(c, nd, ax);
    int r = (int)t->n_dims, nd_out = 0;
    if (n < 0)
        return s_fail(c, nd, "the shape or axes must be constant int64");
    if (re) {
        int64_t known = 1, infer = -1;
        for (int i = 0; i < n; i++) {
            d[i] = ax[i] == 0 && i < r ? t->dims[i] : ax[i];
            if (d[i] < 0)
                infer = i;
            else
                known *= d[i];
        }
        if (infer >= 0)
            d[infer] = known ? s_numel(t) / known : 0;
        nd_out = n;
    } else if (sq) {
        for (int i = 0; i < r; i++) {
            bool drop = n == 0 && t->dims[i] == 1;
            for (int k = 0; k < n; k++)
                drop |= ax[k] == i || ax[k] + r == i;
            if (!drop)
                d[nd_out++] = t->dims[i];
        }
    } else {
        int ro = r + n, src = 0;
        if (ro > 8)
            return s_fail(c, nd, "more than 8 dimensions");
        for (int i = 0; i < ro; i++) {
            bool ins = false;
            for (int k = 0; k < n; k++)
                ins |= ax[k] == i || ax[k] + ro == i;
            d[i] = ins ? 1 : t->dims[src++];
        }
        nd_out = ro;
    }
    s_tensor_t *o = kl_xmalloc(sizeof(*o));
    *o = *t;
    o->n_dims = (size_t)nd_out;
    o->dims = kl_xmalloc(8 * sizeof(int64_t));
    memcpy(o->dims, d, (size_t)nd_out * sizeof(int64_t));
    if (s_numel(o) != s_numel(t))
        for (o->n_dims = 0; o->n_dims < t->n_dims; o->n_dims++)
            o->dims[o->n_dims] = t->dims[o->n_dims];
    s_add_const(c, nd->output[0], o, o);
    *done = true;
    return KL_OK;
}

/* The shape of the value kiln names `kiln` as the graph parser infers it
 * from the lines so far; false when it cannot. */
static bool s_shape(const s_ctx_t *c, const char *kiln, int64_t *d, int *n)
{
    kl_buf_t b = {0};
    kl_mgraph_t g;
    char err[KL_ERRMSG_LEN];
    bool ok = false;
    s_lines_text(c, &b, true);
    if (b.data && kl_mgraph_parse(b.data, c->src, &g, err) == KL_OK) {
        for (int i = 0; i < g.n && !ok; i++)
            if (strcmp(g.nodes[i].name, kiln) == 0) {
                *n = g.nodes[i].ndim;
                memcpy(d, g.nodes[i].shape, sizeof(g.nodes[i].shape));
                ok = true;
            }
        kl_mgraph_free(&g);
    }
    kl_buf_free(&b);
    return ok;
}

#define S_MAXC 64 /* values in a constant kiln evaluates */

/* A constant of kiln's own: n values v of ONNX type (1 float, 7 int64). */
static void s_new_const(s_ctx_t *c, const char *name, int type,
                        const int64_t *dims, int nd, const double *v, int n)
{
    s_tensor_t *t = kl_xmalloc(sizeof(*t));
    kiln_onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)nd;
    t->dims = kl_xmalloc(8 * sizeof(int64_t));
    memcpy(t->dims, dims, (size_t)nd * sizeof(int64_t));
    void *data;
    if (type == 7) {
        int64_t *x = kl_xmalloc((size_t)(n ? n : 1) * sizeof(int64_t));
        for (int i = 0; i < n; i++)
            x[i] = (int64_t)v[i];
        t->n_int64_data = (size_t)n;
        t->int64_data = x;
        data = x;
    } else {
        float *x = kl_xmalloc((size_t)(n ? n : 1) * sizeof(float));
        for (int i = 0; i < n; i++)
            x[i] = (float)v[i];
        t->n_float_data = (size_t)n;
        t->float_data = x;
        data = x;
    }
    s_add_const(c, name, t, t);
    c->consts[c->nconsts - 1].data = data;
}

/* The values of a small constant (int64 or float) as doubles: their count,
 * -1 when name is not one. */
static int s_nums(s_ctx_t *c, const char *name, double *v, int *type,
                  int64_t *dims, int *nd)
{
    const s_tensor_t *t = name && *name ? s_init(c, name) : NULL;
    if (!t || s_numel(t) > S_MAXC || t->n_dims > 8 ||
        (t->data_type != 1 && t->data_type != 7))
        return -1;
    *type = t->data_type;
    *nd = (int)t->n_dims;
    if (t->n_dims) /* a scalar's dims may be NULL */
        memcpy(dims, t->dims, t->n_dims * sizeof(int64_t));
    int64_t n = s_numel(t);
    if (t->data_type == 7) {
        int64_t x[S_MAXC];
        if (s_ints_of(t, x, S_MAXC) != n)
            return -1;
        for (int64_t i = 0; i < n; i++)
            v[i] = (double)x[i];
        return (int)n;
    }
    float *f;
    char keep[KL_ERRMSG_LEN];
    memcpy(keep, c->err ? c->err : "", c->err ? KL_ERRMSG_LEN : 1);
    int rc = s_floats(c, t, name, &f, &n);
    if (c->err)
        memcpy(c->err, keep, KL_ERRMSG_LEN);
    if (rc)
        return -1;
    for (int64_t i = 0; i < n; i++)
        v[i] = f[i];
    free(f);
    return (int)n;
}

/* Shape arithmetic (as PyTorch's TorchScript exporter writes it): Shape of
 * a computed value, and Mod, Add, Sub, Mul, Div, Sqrt, Cast, Concat, Slice
 * and Gather of small constants are constants (*done). */
static int s_const_eval(s_ctx_t *c, const s_node_t *nd, bool *done)
{
    double a[S_MAXC], b[S_MAXC], r[S_MAXC];
    int64_t da[8], db[8], dr[8];
    int ta = 7, tb = 7, na = 0, nb = 0, nra = 0, nrb = 0, n = 0, nd_r = 1;
    *done = false;
    if (s_is(nd, "Shape")) {
        const s_val_t *v = nd->n_input ? s_val(c, nd->input[0]) : NULL;
        int64_t d[KL_MODEL_MAX_DIMS];
        int k;
        if (!v || v->bad || !s_shape(c, v->kiln, d, &k))
            return KL_OK;
        int64_t st = s_aint(nd, "start", 0), en = s_aint(nd, "end", k);
        st = st < 0 ? st + k : st;
        en = en < 0 ? en + k : en > k ? k : en;
        for (int64_t i = st < 0 ? 0 : st; i < en; i++)
            r[n++] = (double)d[i];
        dr[0] = n;
        s_new_const(c, nd->output[0], 7, dr, 1, r, n);
        *done = true;
        return KL_OK;
    }
    static const char *ops[] = {"Mod",  "Add",  "Sub",    "Mul",   "Div",
                                "Sqrt", "Cast", "Concat", "Slice", "Gather"};
    bool known = false;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        known |= s_is(nd, ops[i]);
    if (!known || nd->n_input < 1)
        return KL_OK;
    for (size_t k = 0; k < nd->n_input; k++)
        if (nd->input[k][0] && !s_init(c, nd->input[k]))
            return KL_OK; /* not all constant */
    na = s_nums(c, nd->input[0], a, &ta, da, &nra);
    if (na < 0)
        return KL_OK;
    if (nd->n_input > 1 && !s_is(nd, "Concat") &&
        (nb = s_nums(c, nd->input[1], b, &tb, db, &nrb)) < 0)
        return KL_OK;
    int type = ta;
    memcpy(dr, da, sizeof(da));
    nd_r = nra;
    if (s_is(nd, "Sqrt")) {
        for (n = 0; n < na; n++)
            r[n] = sqrt(a[n]);
    } else if (s_is(nd, "Cast")) {
        type = (int)s_aint(nd, "to", 0);
        if (type != 1 && type != 7)
            return KL_OK;
        for (n = 0; n < na; n++)
            r[n] = type == 7 ? trunc(a[n]) : a[n];
    } else if (s_is(nd, "Concat")) {
        for (size_t k = 0; k < nd->n_input; k++) {
            double x[S_MAXC];
            int64_t dx[8];
            int tx, nx, m = s_nums(c, nd->input[k], x, &tx, dx, &nx);
            if (m < 0 || nx != 1 || n + m > S_MAXC)
                return KL_OK;
            memcpy(r + n, x, (size_t)m * sizeof(double));
            n += m;
        }
        dr[0] = n;
        nd_r = 1;
    } else if (s_is(nd, "Slice")) {
        /* data, starts, ends[, axes[, steps]]: 1-D data only */
        double e[S_MAXC], ax[S_MAXC], stp[S_MAXC];
        int64_t dd[8];
        int tt, ndd;
        bool has_ax = nd->n_input > 3 && nd->input[3][0],
             has_st = nd->n_input > 4 && nd->input[4][0];
        if (nra != 1 || nb != 1 || nd->n_input < 3 ||
            s_nums(c, nd->input[2], e, &tt, dd, &ndd) != 1 ||
            (has_ax && (s_nums(c, nd->input[3], ax, &tt, dd, &ndd) != 1 ||
                        (ax[0] != 0 && ax[0] != -1))) ||
            (has_st &&
             (s_nums(c, nd->input[4], stp, &tt, dd, &ndd) != 1 || stp[0] != 1)))
            return KL_OK;
        double st = b[0] < 0 ? b[0] + na : b[0],
               en = e[0] < 0 ? e[0] + na : e[0];
        st = st < 0 ? 0 : st > na ? na : st;
        en = en < 0 ? 0 : en > na ? na : en;
        for (int i = (int)st; i < (int)en; i++)
            r[n++] = a[i];
        dr[0] = n;
    } else if (s_is(nd, "Gather")) {
        if (s_aint(nd, "axis", 0) != 0 || nra != 1)
            return KL_OK;
        for (n = 0; n < nb; n++) {
            int64_t i = (int64_t)b[n] < 0 ? (int64_t)b[n] + na : (int64_t)b[n];
            if (i < 0 || i >= na)
                return s_fail(c, nd, "an index outside the constant");
            r[n] = a[i];
        }
        nd_r = nrb;
        memcpy(dr, db, sizeof(db));
    } else { /* Mod, Add, Sub, Mul, Div: a scalar broadcasts */
        if (nb != na && nb != 1 && na != 1)
            return KL_OK;
        if (na == 1 && nb > 1) {
            memcpy(dr, db, sizeof(db));
            nd_r = nrb;
        }
        n = na > nb ? na : nb;
        for (int i = 0; i < n; i++) {
            double x = a[na == 1 ? 0 : i], y = b[nb == 1 ? 0 : i];
            if ((s_is(nd, "Mod") || (s_is(nd, "Div") && type == 7)) && y == 0)
                return s_fail(c, nd, "an integer division by zero");
            if (s_is(nd, "Mod")) /* the sign of the divisor (fmod=0) */
                r[i] = x - floor(x / y) * y;
            else if (s_is(nd, "Add"))
                r[i] = x + y;
            else if (s_is(nd, "Sub"))
                r[i] = x - y;
            else if (s_is(nd, "Mul"))
                r[i] = x * y;
            else
                r[i] = type == 7 ? trunc(x / y) : x / y;
        }
    }
    s_new_const(c, nd->output[0], type, dr, nd_r, r, n);
    *done = true;
    return KL_OK;
}

/* Unsqueeze and Squeeze of a computed value: a reshape to its new shape. */
static int s_squeeze(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    const char *x = s_in(c, nd, 0, &rc);
    if (!x)
        return rc;
    int64_t d[KL_MODEL_MAX_DIMS], o[KL_MODEL_MAX_DIMS], ax[8];
    int r, n = s_axes(c, nd, ax), no = 0;
    bool un = s_is(nd, "Unsqueeze");
    if (!s_shape(c, x, d, &r))
        return s_fail(c, nd, "the input's shape is not known");
    if (n < 0 || (un && n == 0))
        return s_fail(c, nd, "the axes must be constant int64");
    int ro = un ? r + n : r;
    if (ro > KL_MODEL_MAX_DIMS)
        return s_fail(c, nd, "more than 8 dimensions");
    for (int i = 0, src = 0; i < ro; i++) {
        bool hit = n == 0 && !un && d[i] == 1;
        for (int k = 0; k < n; k++)
            hit |= ax[k] == i || ax[k] + ro == i;
        if (un)
            o[no++] = hit ? 1 : d[src++];
        else if (hit && d[i] != 1)
            return s_fail(c, nd, "squeezes an axis that is not 1");
        else if (!hit)
            o[no++] = d[i];
    }
    s_line_t *l = s_line(c, nd, "reshape");
    kl_buf_printf(&l->args, "%s shape=", x);
    for (int i = 0; i < no; i++)
        kl_buf_printf(&l->args, "%s%lld", i ? "x" : "", (long long)o[i]);
    if (no == 0)
        kl_buf_puts(&l->args, "1");
    return KL_OK;
}

/* The dims of d other than 1, in order. */
static int s_non1(const int64_t *d, int n, int *at)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (d[i] != 1)
            at[k++] = i;
    return k;
}

/* Gather on axis 0, by a constant index, of a packed projection's output
 * seen through views (PyTorch's MultiheadAttention: Q, K and V in one
 * weight [H, G*D], its output viewed as [..., G, D] and G brought to the
 * front): a matmul N=D by the index's block of the weight and bias, and a
 * reshape to the Gather's shape. The packed layer and its views are
 * dropped. *matched false when the Gather is not that. */
static int s_gather_block(s_ctx_t *c, const s_node_t *nd, bool *matched)
{
    *matched = false;
    const s_tensor_t *it = nd->n_input == 2 ? s_init(c, nd->input[1]) : NULL;
    const s_val_t *v = s_val(c, nd->input[0]);
    int64_t idx;
    if (!v || v->line < 0 || !it || it->n_dims != 0 ||
        s_ints_of(it, &idx, 1) != 1 || s_aint(nd, "axis", 0) != 0)
        return KL_OK;
    /* Walk the views back to the packed layer. */
    int chain[16], nch = 0, li = v->line;
    /* Every reader of the Gather's input is a Gather, and each value on
     * the way back is read only by the next. */
    for (size_t i = 0; i < c->g->n_node; i++)
        for (size_t k = 0; k < c->g->node[i]->n_input; k++)
            if (!strcmp(c->g->node[i]->input[k], nd->input[0]) &&
                (k || !s_is(c->g->node[i], "Gather")))
                return KL_OK;
    while (nch < 16 && (!strcmp(c->lines[li].op, "reshape") ||
                        !strcmp(c->lines[li].op, "transpose"))) {
        chain[nch++] = li;
        const s_val_t *u = s_val(c, c->lines[li].in0);
        if (!u || u->line < 0 || !u->sole || s_readers(c, u->onnx) != 1)
            return KL_OK;
        li = u->line;
    }
    s_line_t *p = &c->lines[li];
    if (nch == 0 || !p->params || !p->colw)
        return KL_OK;
    /* Follow the axes from the packed output: tags -2 the block axis G,
     * -3 the block's D, >= 0 the leading dims in order, -1 a 1. */
    int64_t d[KL_MODEL_MAX_DIMS], pd[KL_MODEL_MAX_DIMS], tag[8], G = 0, D = 0;
    int n, pn, at[8];
    if (!s_shape(c, p->name, pd, &pn))
        return KL_OK;
    for (int k = nch - 1; k >= 0; k--) {
        const s_line_t *l = &c->lines[chain[k]];
        int64_t t2[8];
        if (!s_shape(c, l->name, d, &n))
            return KL_OK;
        if (k == nch - 1) { /* the split: [..., nout] to [..., G, D] */
            if (strcmp(l->op, "reshape") || n < 2 ||
                d[n - 1] * d[n - 2] != p->nout || d[n - 2] < 2 ||
                d[n - 1] == p->nout)
                return KL_OK;
            G = d[n - 2];
            D = d[n - 1];
            for (int i = 0; i < n; i++)
                t2[i] = i == n - 2 ? -2 : i == n - 1 ? -3 : d[i] == 1 ? -1 : i;
        } else if (!strcmp(l->op, "transpose")) {
            char *pm = strstr(l->args.data, "perm=") + 5;
            for (int i = 0; i < n; i++) {
                long a = strtol(pm, &pm, 10);
                if (a < 0 || a >= n)
                    return KL_OK;
                t2[i] = tag[a];
                pm += *pm == ',';
            }
        } else { /* a reshape that only adds or drops 1s */
            int a1[8], a2[8];
            int m1 = s_non1(pd, pn, a1), m2 = s_non1(d, n, a2);
            if (m1 != m2)
                return KL_OK;
            for (int i = 0; i < n; i++)
                t2[i] = -1;
            for (int i = 0; i < m1; i++) {
                if (pd[a1[i]] != d[a2[i]])
                    return KL_OK;
                t2[a2[i]] = tag[a1[i]];
            }
        }
        memcpy(tag, t2, sizeof(t2));
        memcpy(pd, d, sizeof(d));
        pn = n;
    }
    /* G first; the rest keeps its order with D last. */
    int m = s_non1(pd, pn, at);
    if (tag[0] != -2 || m < 2 || tag[at[m - 1]] != -3 || idx < 0 || idx >= G)
        return KL_OK;
    for (int i = 2; i < m - 1; i++)
        if (tag[at[i]] <= tag[at[i - 1]] && i > 1)
            return KL_OK;
    for (int i = 1; i < m - 1; i++)
        if (tag[at[i]] < 0)
            return KL_OK;
    /* The block's layer. */
    size_t xl = strcspn(p->args.data, " ");
    char *x = kl_xstrndup(p->args.data, xl);
    char *own = kl_xasprintf("%c%s_mm", S_OWN, nd->output[0]);
    char *pin0 = kl_xstrdup(p->in0);
    s_line_t *l = s_line_for(c, own, pin0, "matmul");
    p = &c->lines[li]; /* lines moved */
    const char *mm = l->name;
    kl_buf_printf(&l->args, "%s N=%lld", x, (long long)D);
    l->params = l->colw = true;
    l->nout = D;
    l->bias = p->bias;
    if (p->w) {
        int64_t H = p->wn / p->nout;
        l->wn = H * D;
        l->w = kl_xmalloc((size_t)l->wn * sizeof(float));
        for (int64_t i = 0; i < H; i++)
            memcpy(l->w + i * D, p->w + i * p->nout + idx * D,
                   (size_t)D * sizeof(float));
    }
    if (p->b) {
        l->b = kl_xmalloc((size_t)D * sizeof(float));
        memcpy(l->b, p->b + idx * D, (size_t)D * sizeof(float));
    } else if (l->bias)
        s_need_bias(c, l);
    s_line_t *rs = s_line_for(c, nd->output[0], own, "reshape");
    kl_buf_printf(&rs->args, "%s shape=", mm);
    for (int i = 1; i < pn; i++)
        kl_buf_printf(&rs->args, "%s%lld", i > 1 ? "x" : "", (long long)pd[i]);
    c->lines[li].dead = true;
    for (int k = 0; k < nch; k++)
        c->lines[chain[k]].dead = true;
    free(x);
    free(own);
    free(pin0);
    *matched = true;
    return KL_OK;
}

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

/* ONNX element types. */
#define S_T_F32 1
#define S_T_U8 2
#define S_T_S8 3
#define S_T_S32 6

/* The integer values of constant t (u8, s8 or s32) as int64, *n many. */
static int s_ivals(s_ctx_t *c, const s_tensor_t *t, const char *name,
                   int64_t **out, int64_t *n)
{
    int dt = t->data_type;
    size_t sz = dt == S_T_S32 ? 4 : 1;
    *out = NULL;
    *n = s_numel(t);
    if (dt != S_T_U8 && dt != S_T_S8 && dt != S_T_S32)
        return s_terr(c, name, "not uint8, int8 or int32");
    if (*n < 0 || *n > ((int64_t)1 << 31))
        return s_terr(c, name, "a bad size");
    int64_t *d = kl_xmalloc((size_t)(*n ? *n : 1) * sizeof(int64_t));
    if (t->has_raw_data && t->raw_data.len == (size_t)*n * sz) {
        for (int64_t i = 0; i < *n; i++) {
            const uint8_t *p = t->raw_data.data + (size_t)i * sz;
            if (dt == S_T_U8)
                d[i] = p[0];
            else if (dt == S_T_S8)
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
        return s_terr(c, name, "integer data of the wrong size (truncated?)");
    }
    *out = d;
    return KL_OK;
}

/* The DequantizeLinear node whose output is name and whose input is an
 * initializer (a quantized weight or bias), or NULL. */
static const s_node_t *s_dq_const(const s_ctx_t *c, const char *name)
{
    for (size_t i = 0; name && i < c->g->n_node; i++) {
        const s_node_t *nd = c->g->node[i];
        if (s_is(nd, "DequantizeLinear") && nd->n_output &&
            !strcmp(nd->output[0], name) && nd->n_input >= 2 &&
            s_init(c, nd->input[0]))
            return nd;
    }
    return NULL;
}

/* Scale (f32) and zero point (input k+1, k+2 of nd) of a per-tensor
 * Q/DQ: *dt the zero point's kiln type (u8 when there is none). Values
 * that are not scalars or not constants: an error naming nd. */
static int s_qparams(s_ctx_t *c, const s_node_t *nd, float *scale, int64_t *zp,
                     kl_dtype *dt)
{
    const s_tensor_t *ts = nd->n_input > 1 ? s_init(c, nd->input[1]) : NULL;
    const s_tensor_t *tz =
        nd->n_input > 2 && nd->input[2][0] ? s_init(c, nd->input[2]) : NULL;
    if (!ts || s_numel(ts) != 1 || ts->data_type != S_T_F32 ||
        (nd->n_input > 2 && nd->input[2][0] && (!tz || s_numel(tz) != 1)))
        return s_fail(c, nd,
                      "the scale and zero point of a quantized activation "
                      "must be constant scalars (per tensor)");
    float *f;
    int64_t n, *z = NULL;
    int rc = s_floats(c, ts, nd->input[1], &f, &n);
    if (rc)
        return rc;
    *scale = f[0];
    free(f);
    *zp = 0;
    *dt = KL_DT_U8;
    if (tz) {
        if (tz->data_type != S_T_U8 && tz->data_type != S_T_S8)
            return s_fail(c, nd,
                          "a quantized activation must be uint8 or int8");
        if ((rc = s_ivals(c, tz, nd->input[2], &z, &n)))
            return rc;
        *zp = z[0];
        *dt = tz->data_type == S_T_U8 ? KL_DT_U8 : KL_DT_S8;
        free(z);
    }
    if (!(*scale > 0) || !isfinite(*scale))
        return s_fail(c, nd, "a scale that is not a positive number");
    return KL_OK;
}

/* Does node nd (a reader of the dequantized value v) fold into a q-op:
 * Conv / Gemm / MatMul reading v as its input 0 with a DequantizeLinear'd
 * constant weight? */
static bool s_qreader(const s_ctx_t *c, const s_node_t *nd, const char *v)
{
    return (s_is(nd, "Conv") || s_is(nd, "Gemm") || s_is(nd, "MatMul")) &&
           nd->n_input > 1 && !strcmp(nd->input[0], v) &&
           strcmp(nd->input[1], v) && s_dq_const(c, nd->input[1]);
}

static int s_dequantize(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    if (nd->n_input && s_init(c, nd->input[0]))
        return KL_OK; /* a weight or bias: read by the q-op */
    const s_val_t *x = nd->n_input ? s_val(c, nd->input[0]) : NULL;
    if (!x)
        return s_in(c, nd, 0, &rc), rc;
    if (x->dt != KL_DT_U8 && x->dt != KL_DT_S8) {
        c->why = "dequantizes a value that is not a quantized tensor";
        return S_UNSUP;
    }
    float sc;
    int64_t zp;
    kl_dtype dt;
    if ((rc = s_qparams(c, nd, &sc, &zp, &dt)))
        return rc;
    if (dt != x->dt)
        return s_fail(c, nd, "its zero point's type is not its input's");
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
    s_val_t *v;
    if (all) {
        v = s_add_val(c, out, x->kiln, x->line, false);
        v->virt = true;
        v->dt = xdt;
    } else {
        s_line_t *l = s_line(c, nd, "dequantize");
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

static void s_qout(s_line_t *l, float so, int64_t zo, kl_dtype dt);

/* QuantizeLinear: folds into the pending q-op whose output it reads, else
 * a quantize layer. */
static int s_quantize(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    const s_val_t *x = nd->n_input ? s_val(c, nd->input[0]) : NULL;
    if (!x)
        return s_in(c, nd, 0, &rc), rc;
    if (x->dt != KL_DT_F32 || x->virt) {
        c->why = "quantizes a value that is not f32";
        return S_UNSUP;
    }
    float so;
    int64_t zo;
    kl_dtype dt;
    if ((rc = s_qparams(c, nd, &so, &zo, &dt)))
        return rc;
    s_line_t *l = x->line >= 0 ? &c->lines[x->line] : NULL;
    if (l && l->q && l->pending && c->g->node[l->qnode] == nd) {
        s_qout(l, so, zo, dt);
        s_alias(c, nd->output[0], x);
        c->vals[c->nvals - 1].dt = dt;
        return KL_OK;
    }
    const char *src = x->kiln; /* x moves when a value is added */
    s_line_t *q = s_line(c, nd, "quantize");
    kl_buf_printf(&q->args, "%s scale=%.9g zp=%lld%s", src, (double)so,
                  (long long)zo, dt == KL_DT_S8 ? " out=s8" : "");
    c->vals[c->nvals - 1].dt = dt;
    return KL_OK;
}

/* Where a q-op's numbers come from: its input (kiln name, scale, zero
 * point), the int8 weight, its scale and zero point (names for errors),
 * the weight scale's axis (-1: the output channel's), and the int32 bias
 * with (QDQ) or without (QLinearConv) a scale to check. */
typedef struct {
    const char *xk;
    float xs;
    int64_t xzp;
    const s_tensor_t *w, *ts, *tz, *tb, *tbs, *tbz;
    const char *wn, *tsn, *tzn, *tbn, *tbsn, *tbzn;
    int64_t axis;
} s_qsrc_t;

/* A q-op line for nd (Conv / QLinearConv: qconv2d or qdepthwise_conv2d,
 * Gemm transB=1: qdense, else qmatmul N=) from q; pending its output's
 * quantization (s_qout). */
static int s_qmake(s_ctx_t *c, const s_node_t *nd, const s_qsrc_t *q,
                   s_line_t **out)
{
    int rc = KL_OK;
    bool conv = s_is(nd, "Conv") || s_is(nd, "QLinearConv"),
         gemm = s_is(nd, "Gemm");
    const s_tensor_t *w = q->w;
    if (w->data_type != S_T_S8)
        return s_fail(c, nd, "a quantized weight that is not int8");
    if (gemm && (s_aint(nd, "transA", 0) || s_afloat(nd, "alpha", 1) != 1 ||
                 s_afloat(nd, "beta", 1) != 1))
        return s_fail(c, nd, "a quantized Gemm with transA, alpha or beta");
    if ((conv && w->n_dims != 4) || (!conv && w->n_dims != 2))
        return s_fail(c, nd, "a weight of the wrong rank");
    bool tb = gemm && s_aint(nd, "transB", 0);
    int64_t nout = conv || tb ? w->dims[0] : w->dims[1];
    int64_t axis = q->axis < 0 ? (conv || tb ? 0 : 1) : q->axis;
    /* weight scales: one, or one per output channel on its axis */
    const s_tensor_t *ts = q->ts, *tz = q->tz;
    if (!ts || ts->data_type != S_T_F32 ||
        (s_numel(ts) != 1 &&
         (s_numel(ts) != nout || axis != (conv || tb ? 0 : 1))))
        return s_fail(c, nd,
                      "the weight's scale is neither one number nor one "
                      "per output channel");
    int64_t n, *zv = NULL;
    if (tz && (rc = s_ivals(c, tz, q->tzn, &zv, &n)))
        return rc;
    for (int64_t i = 0; zv && i < n; i++)
        if (zv[i]) {
            free(zv);
            return s_fail(c, nd,
                          "an int8 weight with a zero point other than 0 "
                          "(kiln's q-ops take symmetric weights)");
        }
    free(zv);
    const char *op = "qmatmul";
    int64_t st = 1, pad = 0, dil = 1, g = conv ? s_aint(nd, "group", 1) : 1;
    bool dw = conv && g > 1 && w->dims[1] == 1;
    if (conv) {
        if ((rc = s_window(c, nd, &st, &pad, &dil)))
            return rc;
        if (g > 1 && !dw)
            return s_fail(c, nd, "a quantized grouped convolution");
        op = dw ? "qdepthwise_conv2d" : "qconv2d";
    } else if (tb)
        op = "qdense";
    s_line_t *l = s_line(c, nd, op);
    *out = l;
    l->q = l->pending = l->params = true;
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
    kl_buf_printf(&l->args, " za=%lld", (long long)q->xzp);
    if ((rc = s_floats(c, ts, q->tsn, &l->s_w, &l->ns_w)))
        return rc;
    if (c->want) {
        int64_t *wv;
        if ((rc = s_ivals(c, w, q->wn, &wv, &l->wn)))
            return rc;
        l->w8 = kl_xmalloc((size_t)(l->wn ? l->wn : 1));
        for (int64_t i = 0; i < l->wn; i++)
            l->w8[i] = (int8_t)wv[i];
        free(wv);
    }
    /* the bias: int32, one a channel; QDQ's of scale s_in * s_w, zp 0 */
    const s_tensor_t *tb32 = q->tb, *tbs = q->tbs, *bz = q->tbz;
    if (tb32) {
        if (tb32->data_type != S_T_S32 || s_numel(tb32) != nout ||
            (tbs && (tbs->data_type != S_T_F32 ||
                     (s_numel(tbs) != 1 && s_numel(tbs) != nout))))
            return s_fail(c, nd,
                          "the bias of a quantized layer must be int32, "
                          "one value per output");
        float *bs = NULL;
        int64_t nbs = 0, *bv = NULL;
        if (tbs && (rc = s_floats(c, tbs, q->tbsn, &bs, &nbs)))
            return rc;
        for (int64_t k = 0; bs && k < nout && !rc; k++) {
            float want = l->s_in * l->s_w[l->ns_w == 1 ? 0 : k];
            float got = bs[nbs == 1 ? 0 : k];
            if (fabsf(got - want) > 1e-6f * want)
                rc = s_fail(c, nd,
                            "the bias's scale is not the input's times the "
                            "weight's");
        }
        free(bs);
        if (!rc && bz && (rc = s_ivals(c, bz, q->tbzn, &bv, &nbs)) == 0)
            for (int64_t k = 0; k < nbs && !rc; k++)
                if (bv[k])
                    rc = s_fail(c, nd, "an int32 bias with a zero point");
        free(bv);
        if (rc)
            return rc;
        l->bias = true;
        if (c->want) {
            if ((rc = s_ivals(c, tb32, q->tbn, &bv, &nbs)))
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
static void s_qout(s_line_t *l, float so, int64_t zo, kl_dtype dt)
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

static const s_tensor_t *s_opt_init(const s_ctx_t *c, const s_node_t *nd,
                                    size_t k)
{
    return k < nd->n_input && nd->input[k][0] ? s_init(c, nd->input[k]) : NULL;
}

static const char *s_opt_name(const s_node_t *nd, size_t k)
{
    return k < nd->n_input ? nd->input[k] : "";
}

/* Conv / Gemm / MatMul of a dequantized u8 activation by a dequantized s8
 * weight (and int32 bias), whose output one QuantizeLinear reads: a q-op,
 * its requant scale set when that QuantizeLinear folds (s_quantize). */
static int s_qlayer(s_ctx_t *c, const s_node_t *nd)
{
    const s_val_t *x = s_val(c, nd->input[0]);
    const s_node_t *wdq = s_dq_const(c, nd->input[1]);
    /* The dequantized tensor's type: a dequantize layer's own output
     * (also read by a float layer) is f32. */
    if (!x || !x->qkiln || x->qdt != KL_DT_U8) {
        c->why = !x || !x->qkiln
                     ? "an int8 weight on a float input (only QDQ on both)"
                     : "an int8 input (kiln's q-ops read u8 activations)";
        return S_UNSUP;
    }
    int r = s_reader(c, nd->output[0]), act = 0, ar = -1;
    bool has_lo = false, has_hi = false;
    float lo = 0, hi = 0;
    int rc = KL_OK;
    if (r >= 0 &&
        (s_is(c->g->node[r], "Relu") || s_is(c->g->node[r], "Clip"))) {
        const s_node_t *a = c->g->node[r];
        act = s_is(a, "Relu") ? 1 : 2;
        if (act == 1)
            has_lo = true;
        else if ((rc = s_clip_bound(c, a, 1, "min", &has_lo, &lo)) ||
                 (rc = s_clip_bound(c, a, 2, "max", &has_hi, &hi)))
            return rc;
        ar = r;
        r = s_reader(c, a->output[0]);
    }
    if (r < 0 || !s_is(c->g->node[r], "QuantizeLinear")) {
        c->why = act ? "its Relu / Clip is not read by one QuantizeLinear "
                       "alone"
                     : "its output is not read by one QuantizeLinear alone";
        return S_UNSUP;
    }
    s_qsrc_t q = {.xk = x->qkiln,
                  .xs = x->qs,
                  .xzp = x->qzp,
                  .w = s_init(c, wdq->input[0]),
                  .wn = wdq->input[0],
                  .ts = s_opt_init(c, wdq, 1),
                  .tsn = s_opt_name(wdq, 1),
                  .tz = s_opt_init(c, wdq, 2),
                  .tzn = s_opt_name(wdq, 2),
                  .axis = s_aint(wdq, "axis", 1)};
    if (nd->n_input > 2 && nd->input[2][0]) {
        const s_node_t *bdq = s_dq_const(c, nd->input[2]);
        if (!bdq)
            return s_fail(c, nd,
                          "the bias of a quantized layer must be an int32 "
                          "DequantizeLinear");
        q.tb = s_init(c, bdq->input[0]);
        q.tbn = bdq->input[0];
        q.tbs = s_opt_init(c, bdq, 1);
        q.tbsn = s_opt_name(bdq, 1);
        q.tbz = s_opt_init(c, bdq, 2);
        q.tbzn = s_opt_name(bdq, 2);
        if (!q.tbs)
            return s_fail(c, nd, "the bias's DequantizeLinear has no scale");
    }
    s_line_t *l;
    if ((rc = s_qmake(c, nd, &q, &l)))
        return rc;
    l->qnode = r;
    l->act = act;
    l->has_lo = has_lo;
    l->has_hi = has_hi;
    l->clo = lo;
    l->chi = hi;
    if (ar >= 0) { /* the Relu / Clip folds: its output is the layer's */
        c->skip[ar] = true;
        s_alias(c, c->g->node[ar]->output[0], s_val(c, nd->output[0]));
    }
    return KL_OK;
}

/* QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B]) and
 * QLinearMatMul (a, .., b, .., y_scale, y_zp) by constant int8 weights on
 * a u8 tensor: one q-op, its output quantization at once. */
static int s_qlinear(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    const s_val_t *x = nd->n_input ? s_val(c, nd->input[0]) : NULL;
    if (!x)
        return s_in(c, nd, 0, &rc), rc;
    if (x->dt != KL_DT_U8 || nd->n_input < 8) {
        c->why = x->dt != KL_DT_U8 ? "an input that is not a u8 tensor"
                                   : "fewer than 8 inputs";
        return S_UNSUP;
    }
    const s_tensor_t *t[9];
    for (size_t k = 0; k < 9; k++)
        t[k] = s_opt_init(c, nd, k);
    if (!t[1] || !t[3] || !t[4] || !t[6] || s_numel(t[1]) != 1 ||
        s_numel(t[6]) != 1 || t[1]->data_type != S_T_F32 ||
        t[6]->data_type != S_T_F32 || (t[2] && s_numel(t[2]) != 1) ||
        (t[7] && s_numel(t[7]) != 1) ||
        (nd->n_input > 8 && nd->input[8][0] && !t[8]))
        return s_fail(c, nd,
                      "scales, zero points, the weight and the bias must be "
                      "constants (the input's and output's scalars)");
    float *f, xs, so;
    int64_t n, *z = NULL, xzp = 0, zo = 0;
    if ((rc = s_floats(c, t[1], nd->input[1], &f, &n)))
        return rc;
    xs = f[0];
    free(f);
    if ((rc = s_floats(c, t[6], nd->input[6], &f, &n)))
        return rc;
    so = f[0];
    free(f);
    kl_dtype dt = KL_DT_U8;
    if (t[2] && !(rc = s_ivals(c, t[2], nd->input[2], &z, &n)))
        xzp = z[0];
    free(z);
    z = NULL;
    if (!rc && t[7] && !(rc = s_ivals(c, t[7], nd->input[7], &z, &n))) {
        zo = z[0];
        dt = t[7]->data_type == S_T_S8 ? KL_DT_S8 : KL_DT_U8;
    }
    free(z);
    if (rc)
        return rc;
    s_qsrc_t q = {.xk = x->kiln,
                  .xs = xs,
                  .xzp = xzp,
                  .w = t[3],
                  .wn = nd->input[3],
                  .ts = t[4],
                  .tsn = nd->input[4],
                  .tz = t[5],
                  .tzn = s_opt_name(nd, 5),
                  .tb = t[8],
                  .tbn = s_opt_name(nd, 8),
                  .axis = -1};
    s_line_t *l;
    if ((rc = s_qmake(c, nd, &q, &l)))
        return rc;
    s_qout(l, so, zo, dt);
    c->vals[c->nvals - 1].dt = dt; /* the line's output value */
    return KL_OK;
}

static int s_node(s_ctx_t *c, const s_node_t *nd)
{
    int rc = KL_OK;
    bool done;
    if (!nd->op_type || nd->n_output < 1)
        return s_fail(c, nd, "a node without op_type or output");
    if (nd->domain && *nd->domain && strcmp(nd->domain, "ai.onnx"))
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
    if ((s_is(nd, "Conv") || s_is(nd, "Gemm") || s_is(nd, "MatMul")) &&
        nd->n_input > 1 && s_dq_const(c, nd->input[1]))
        return s_qlayer(c, nd);
    if (s_is(nd, "Conv"))
        return s_conv(c, nd);
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
                       "Gemm, MatMul), QLinearConv, QLinearMatMul",
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
static void s_lines_text(const s_ctx_t *c, kl_buf_t *b, bool dead)
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
