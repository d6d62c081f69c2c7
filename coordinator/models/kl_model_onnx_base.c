/* kl_model_onnx_base.c - ONNX import, the base below the node handlers:
 * the import context's constants (initializers, Constant nodes, folded
 * views), its values and their graph-text names, the layer lines, node
 * attributes and the readers of a value. Everything here only reads the
 * graph or appends to the context; nothing calls up into the handlers. */
#include "kl_model_onnx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

const kl_onnx__tensor_t *kl_onnx__init(const kl_onnx__ctx_t *c,
                                       const char *name)
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
        const kl_onnx__node_t *nd = c->g->node[i];
        if (nd->op_type && !strcmp(nd->op_type, "Constant") && nd->n_output &&
            !strcmp(nd->output[0], name))
            for (size_t k = 0; k < nd->n_attribute; k++)
                if (nd->attribute[k]->name &&
                    !strcmp(nd->attribute[k]->name, "value"))
                    return nd->attribute[k]->t;
    }
    return NULL;
}

void kl_onnx__add_const(kl_onnx__ctx_t *c, const char *name,
                        const kl_onnx__tensor_t *t, kl_onnx__tensor_t *own)
{
    c->consts = kl_xrealloc(c->consts, (size_t)(c->nconsts + 1) *
                                           sizeof(kl_onnx__const_t));
    c->consts[c->nconsts++] =
        (kl_onnx__const_t){kl_xstrdup(name), t, own, NULL};
}

/* How many nodes (and graph outputs) read value name. */
int kl_onnx__readers(const kl_onnx__ctx_t *c, const char *name)
{
    int n = 0;
    if (name[0] == KL_ONNX__OWN) /* kiln's own, read by the line made with it */
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
int kl_onnx__reader(const kl_onnx__ctx_t *c, const char *name)
{
    if (kl_onnx__readers(c, name) != 1)
        return -1;
    for (size_t i = 0; i < c->g->n_node; i++)
        for (size_t k = 0; k < c->g->node[i]->n_input; k++)
            if (strcmp(c->g->node[i]->input[k], name) == 0 &&
                strcmp(c->g->node[i]->op_type ? c->g->node[i]->op_type : "",
                       "Shape"))
                return (int)i;
    return -1;
}

int64_t kl_onnx__numel(const kl_onnx__tensor_t *t)
{
    int64_t n = 1;
    for (size_t i = 0; i < t->n_dims; i++)
        n *= t->dims[i];
    return n;
}

int kl_onnx__terr(kl_onnx__ctx_t *c, const char *name, const char *what)
{
    return kl_seterr(c->err, KL_ERR_INVAL, "%s: initializer '%s': %s", c->src,
                     name && *name ? name : "(unnamed)", what);
}

/* Reads t's floats from external data: the file external_data names,
 * relative to the model's directory. */
static int s_external(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                      const char *name, float *out, int64_t n)
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
        return kl_onnx__terr(c, name, "external data without a location");
    if (len >= 0 && len != n * 4) {
        snprintf(msg, sizeof(msg),
                 "external data of %lld bytes for %lld floats", len,
                 (long long)n);
        return kl_onnx__terr(c, name, msg);
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
        rc = kl_onnx__terr(c, name, msg);
    } else if (got != (size_t)n) {
        snprintf(msg, sizeof(msg),
                 "external data file '%.200s' ends before its %lld floats at "
                 "offset %lld",
                 path, (long long)n, off);
        rc = kl_onnx__terr(c, name, msg);
    }
    free(path);
    return rc;
}

/* The floats of constant t (named name): float_data, raw_data (little
 * endian) or external data. *out is heap, *n its count. */
int kl_onnx__floats(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                    const char *name, float **out, int64_t *n)
{
    char msg[200];
    *out = NULL;
    *n = kl_onnx__numel(t);
    if (t->data_type != 1) {
        snprintf(msg, sizeof(msg),
                 "not float32 (ONNX type %d); kiln models are f32",
                 (int)t->data_type);
        return kl_onnx__terr(c, name, msg);
    }
    if (*n < 0 || *n > ((int64_t)1 << 31))
        return kl_onnx__terr(c, name, "a bad size");
    float *d = kl_xmalloc((size_t)(*n ? *n : 1) * sizeof(float));
    int rc = KL_OK;
    if (t->has_data_location && t->data_location == 1)
        rc = s_external(c, t, name, d, *n);
    else if (t->has_raw_data) {
        if (t->raw_data.len != (size_t)*n * 4) {
            snprintf(msg, sizeof(msg),
                     "raw_data of %zu bytes for %lld floats (truncated?)",
                     t->raw_data.len, (long long)*n);
            rc = kl_onnx__terr(c, name, msg);
        } else
            memcpy(d, t->raw_data.data, (size_t)*n * 4); /* little-endian */
    } else if (t->n_float_data == (size_t)*n)
        memcpy(d, t->float_data, (size_t)*n * 4);
    else {
        snprintf(msg, sizeof(msg), "%zu values in float_data for %lld",
                 t->n_float_data, (long long)*n);
        rc = kl_onnx__terr(c, name, msg);
    }
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    return KL_OK;
}

/* The int64 values of constant t (at most max), or -1. */
int kl_onnx__ints_of(const kl_onnx__tensor_t *t, int64_t *d, int max)
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
    } else if (kl_onnx__numel(t) != 0)
        return -1;
    return n > (size_t)max ? -1 : (int)n;
}

kl_onnx__val_t *kl_onnx__val(const kl_onnx__ctx_t *c, const char *onnx)
{
    for (int i = c->nvals - 1; i >= 0; i--)
        if (strcmp(c->vals[i].onnx, onnx) == 0)
            return &c->vals[i];
    return NULL;
}

static bool s_name_taken(const kl_onnx__ctx_t *c, const char *k)
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
char *kl_onnx__kiln_name(const kl_onnx__ctx_t *c, const char *onnx)
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
kl_onnx__val_t *kl_onnx__add_val(kl_onnx__ctx_t *c, const char *onnx,
                                 char *kiln, int line, bool owns)
{
    c->vals =
        kl_xrealloc(c->vals, (size_t)(c->nvals + 1) * sizeof(kl_onnx__val_t));
    c->vals[c->nvals] = (kl_onnx__val_t){.onnx = kl_xstrdup(onnx),
                                         .kiln = kiln,
                                         .line = line,
                                         .owns = owns,
                                         .sole = true};
    return &c->vals[c->nvals++];
}

/* Output `onnx` becomes another name of value v (Identity, a fold). */
void kl_onnx__alias(kl_onnx__ctx_t *c, const char *onnx,
                    const kl_onnx__val_t *v)
{
    bool sole = v->sole && kl_onnx__readers(c, v->onnx) == 1;
    kl_dtype dt = v->dt; /* v moves when a value is added */
    kl_onnx__val_t *a = kl_onnx__add_val(c, onnx, v->kiln, v->line, false);
    a->sole = sole;
    a->dt = dt;
}

const char *kl_onnx__nname(const kl_onnx__node_t *nd)
{
    return nd->name && *nd->name ? nd->name : "(unnamed)";
}

int kl_onnx__fail(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                  const char *what)
{
    return kl_seterr(c->err, KL_ERR_INVAL, "%s: node '%s' (%s): %s", c->src,
                     kl_onnx__nname(nd), nd->op_type ? nd->op_type : "?", what);
}

/* The kiln name of value input k of nd, or NULL (and an error). */
const char *kl_onnx__in(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                        int *rc)
{
    const kl_onnx__val_t *v = k < nd->n_input && nd->input[k][0]
                                  ? kl_onnx__val(c, nd->input[k])
                                  : NULL;
    if (!v) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "input %zu ('%.80s') is not a computed "
                 "value or graph input",
                 k, k < nd->n_input ? nd->input[k] : "");
        *rc = kl_onnx__fail(c, nd, msg);
        return NULL;
    }
    return v->kiln;
}

/* Opens a layer for output 0 of nd. */
kl_onnx__line_t *kl_onnx__line_for(kl_onnx__ctx_t *c, const char *out,
                                   const char *in0, const char *op)
{
    c->lines = kl_xrealloc(c->lines,
                           (size_t)(c->nlines + 1) * sizeof(kl_onnx__line_t));
    kl_onnx__line_t *l = &c->lines[c->nlines];
    memset(l, 0, sizeof(*l));
    l->op = op;
    /* a value of kiln's own (KL_ONNX__OWN prefix) is named without it */
    l->name = kl_onnx__kiln_name(c, out[0] == KL_ONNX__OWN ? out + 1 : out);
    l->in0 = kl_xstrdup(in0);
    l->out = kl_xstrdup(out);
    c->nlines++;
    kl_onnx__add_val(c, out, l->name, c->nlines - 1, false);
    return l;
}

kl_onnx__line_t *kl_onnx__line(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                               const char *op)
{
    return kl_onnx__line_for(c, nd->n_output ? nd->output[0] : "v",
                             nd->n_input ? nd->input[0] : "", op);
}

const KilnOnnx__AttributeProto *kl_onnx__attr(const kl_onnx__node_t *nd,
                                              const char *name)
{
    for (size_t i = 0; i < nd->n_attribute; i++)
        if (nd->attribute[i]->name && strcmp(nd->attribute[i]->name, name) == 0)
            return nd->attribute[i];
    return NULL;
}

int64_t kl_onnx__aint(const kl_onnx__node_t *nd, const char *name, int64_t def)
{
    const KilnOnnx__AttributeProto *a = kl_onnx__attr(nd, name);
    return a && a->has_i ? a->i : def;
}

/* All values of an ints attribute equal (or absent: def)? */
static bool s_auniform(const kl_onnx__node_t *nd, const char *name, int64_t def,
                       int64_t *out)
{
    const KilnOnnx__AttributeProto *a = kl_onnx__attr(nd, name);
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
int kl_onnx__window(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                    int64_t *stride, int64_t *pad, int64_t *dil)
{
    /* NOTSET (the default: the pads as given) and VALID (no padding) are
     * what kiln reads; the value is ONNX bytes, without a terminator, so
     * its length is that of the word. */
    const KilnOnnx__AttributeProto *ap = kl_onnx__attr(nd, "auto_pad");
    if (ap && ap->has_s && ap->s.len &&
        !(ap->s.len == 6 && memcmp(ap->s.data, "NOTSET", 6) == 0) &&
        !(ap->s.len == 5 && memcmp(ap->s.data, "VALID", 5) == 0)) {
        char msg[120];
        snprintf(msg, sizeof(msg),
                 "auto_pad %.*s is not supported (export with explicit "
                 "pads)",
                 (int)(ap->s.len > 40 ? 40 : ap->s.len), ap->s.data);
        return kl_onnx__fail(c, nd, msg);
    }
    if (!s_auniform(nd, "strides", 1, stride))
        return kl_onnx__fail(c, nd, "different strides per axis");
    if (!s_auniform(nd, "pads", 0, pad))
        return kl_onnx__fail(c, nd, "asymmetric or per-axis pads");
    if (!s_auniform(nd, "dilations", 1, dil))
        return kl_onnx__fail(c, nd, "different dilations per axis");
    if (kl_onnx__aint(nd, "ceil_mode", 0))
        return kl_onnx__fail(c, nd, "ceil_mode=1 is not supported");
    return KL_OK;
}

/* The bias of line l from constant input k of nd (Conv's B, Gemm's C),
 * times scale: [nout], [1,nout] or a scalar. */
int kl_onnx__bias_in(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                     kl_onnx__line_t *l, float scale)
{
    if (k >= nd->n_input || !nd->input[k][0])
        return KL_OK;
    const kl_onnx__tensor_t *t = kl_onnx__init(c, nd->input[k]);
    if (!t)
        return kl_onnx__fail(c, nd, "the bias must be a constant");
    int64_t n = kl_onnx__numel(t);
    bool ok = n == 1 || (n == l->nout && t->dims[t->n_dims - 1] == n);
    if (!ok) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "the bias '%.80s' has %lld values for %lld outputs",
                 nd->input[k], (long long)n, (long long)l->nout);
        return kl_onnx__fail(c, nd, msg);
    }
    l->bias = true;
    if (!c->want)
        return KL_OK;
    float *v;
    int rc = kl_onnx__floats(c, t, nd->input[k], &v, &n);
    if (rc)
        return rc;
    l->b = kl_xmalloc((size_t)l->nout * sizeof(float));
    for (int64_t i = 0; i < l->nout; i++)
        l->b[i] = v[n == 1 ? 0 : i] * scale;
    free(v);
    return KL_OK;
}

/* The weight of line l: constant input 1 of nd, times scale. */
int kl_onnx__weight_in(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                       const kl_onnx__tensor_t *w, kl_onnx__line_t *l,
                       float scale)
{
    l->params = true;
    if (!c->want)
        return KL_OK;
    int rc = kl_onnx__floats(c, w, nd->input[1], &l->w, &l->wn);
    for (int64_t i = 0; !rc && scale != 1.0f && i < l->wn; i++)
        l->w[i] *= scale;
    return rc;
}
bool kl_onnx__is(const kl_onnx__node_t *nd, const char *op)
{
    return nd->op_type && strcmp(nd->op_type, op) == 0;
}

/* The input lines and the layers so far (the dead ones too when dead). */
void kl_onnx__lines_text(const kl_onnx__ctx_t *c, kl_buf_t *b, bool dead)
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
