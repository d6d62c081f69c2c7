/* kl_model_parse.c - the graph format (docs/models.md): one statement a
 * line, shapes inferred as the layers are read (each layer's semantics
 * are kl_model_infer.c's). The op table below is the format's list of
 * layers: names, inputs, attributes. */
#include "kl_model_parse_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

#define S_MAX_DIM ((int64_t)1 << 40)

typedef struct {
    const char *name;
    kl_mop op;
    int nin_min, nin_max;
    const char *keys; /* allowed attributes, space separated */
} s_opdef_t;

static const s_opdef_t s_ops[] = {
    {"input", KL_MOP_INPUT, 0, 0, ""},
    {"conv2d", KL_MOP_CONV2D, 1, 1,
     "K R S stride pad dilation groups bias relu"},
    {"depthwise_conv2d", KL_MOP_DEPTHWISE, 1, 1,
     "R S stride pad dilation multiplier bias relu"},
    {"dense", KL_MOP_DENSE, 1, 1, "O bias relu"},
    {"matmul", KL_MOP_MATMUL, 1, 2, "N bias relu"},
    {"batch_matmul", KL_MOP_BATCH_MATMUL, 2, 2, ""},
    {"max_pool2d", KL_MOP_MAX_POOL, 1, 1, "R S stride pad"},
    {"avg_pool2d", KL_MOP_AVG_POOL, 1, 1, "R S stride pad"},
    {"global_avg_pool", KL_MOP_GLOBAL_AVG_POOL, 1, 1, ""},
    {"add", KL_MOP_ADD, 2, 2, ""},
    {"relu", KL_MOP_RELU, 1, 1, ""},
    {"clip", KL_MOP_CLIP, 1, 1, "lo hi"},
    {"flatten", KL_MOP_FLATTEN, 1, 1, ""},
    {"reshape", KL_MOP_RESHAPE, 1, 1, "shape"},
    {"transpose", KL_MOP_TRANSPOSE, 1, 1, "perm"},
    {"softmax", KL_MOP_SOFTMAX, 1, 1, ""},
    {"layer_norm", KL_MOP_LAYER_NORM, 1, 1, "eps affine"},
    {"gelu", KL_MOP_GELU, 1, 1, "approximate"},
    {"sigmoid", KL_MOP_SIGMOID, 1, 1, ""},
    {"tanh", KL_MOP_TANH, 1, 1, ""},
    {"hard_sigmoid", KL_MOP_HARD_SIGMOID, 1, 1, "alpha beta"},
    {"hard_swish", KL_MOP_HARD_SWISH, 1, 1, ""},
    {"leaky_relu", KL_MOP_LEAKY_RELU, 1, 1, "alpha"},
    {"elu", KL_MOP_ELU, 1, 1, "alpha"},
    {"silu", KL_MOP_SILU, 1, 1, ""},
    {"const", KL_MOP_CONST, 0, 0, "shape"},
    {"sub", KL_MOP_SUB, 2, 2, ""},
    {"mul", KL_MOP_MUL, 2, 2, ""},
    {"div", KL_MOP_DIV, 2, 2, ""},
    {"pow", KL_MOP_POW, 2, 2, ""},
    {"max", KL_MOP_MAX, 2, 2, ""},
    {"min", KL_MOP_MIN, 2, 2, ""},
    {"where", KL_MOP_WHERE, 3, 3, ""},
    {"sqrt", KL_MOP_SQRT, 1, 1, ""},
    {"exp", KL_MOP_EXP, 1, 1, ""},
    {"erf", KL_MOP_ERF, 1, 1, ""},
    {"neg", KL_MOP_NEG, 1, 1, ""},
    {"reciprocal", KL_MOP_RECIPROCAL, 1, 1, ""},
    {"concat", KL_MOP_CONCAT, 2, 2, "axis"},
    {"slice", KL_MOP_SLICE, 1, 1, "axis start end step"},
    {"gather", KL_MOP_GATHER, 1, 1, "axis indices"},
    {"expand", KL_MOP_EXPAND, 1, 1, "shape"},
    {"reduce_mean", KL_MOP_REDUCE_MEAN, 1, 1, "axes keepdims"},
    {"reduce_sum", KL_MOP_REDUCE_SUM, 1, 1, "axes keepdims"},
    {"qconv2d", KL_MOP_QCONV2D, 1, 1,
     "K R S stride pad dilation groups bias relu clip za zo scale out"},
    {"qdepthwise_conv2d", KL_MOP_QDEPTHWISE, 1, 1,
     "R S stride pad dilation multiplier bias relu clip za zo scale "
     "out"},
    {"qdense", KL_MOP_QDENSE, 1, 1, "O bias relu clip za zo scale out"},
    {"qmatmul", KL_MOP_QMATMUL, 1, 1, "N bias relu clip za zo scale out"},
    {"quantize", KL_MOP_QUANTIZE, 1, 1, "scale zp out"},
    {"dequantize", KL_MOP_DEQUANTIZE, 1, 1, "scale zp"},
};
#define S_NOPS ((int)(sizeof(s_ops) / sizeof(s_ops[0])))

const char *kl_mop_name(kl_mop op)
{
    for (int i = 0; i < S_NOPS; i++)
        if (s_ops[i].op == op)
            return s_ops[i].name;
    return "?";
}

kl_mop kl_mop_base(kl_mop op)
{
    switch (op) {
    case KL_MOP_QCONV2D:
        return KL_MOP_CONV2D;
    case KL_MOP_QDEPTHWISE:
        return KL_MOP_DEPTHWISE;
    case KL_MOP_QDENSE:
        return KL_MOP_DENSE;
    case KL_MOP_QMATMUL:
        return KL_MOP_MATMUL;
    default:
        return op;
    }
}

bool kl_mop_is_q(kl_mop op)
{
    return kl_mop_base(op) != op;
}

bool kl_mop_is_act(kl_mop op)
{
    return op >= KL_MOP_SIGMOID && op <= KL_MOP_SILU;
}

bool kl_mop_is_general(kl_mop op)
{
    return op >= KL_MOP_CONST && op <= KL_MOP_REDUCE_SUM;
}

bool kl_mop_is_binary(kl_mop op)
{
    return op >= KL_MOP_SUB && op <= KL_MOP_MIN;
}

bool kl_mop_is_unary(kl_mop op)
{
    return op >= KL_MOP_SQRT && op <= KL_MOP_RECIPROCAL;
}

int kl_mgraph__err(kl_mgraph__ctx_t *c, const char *fmt, ...)
{
    char msg[KL_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return kl_seterr(c->err, KL_ERR_INVAL, "%s:%d: %s", c->src, c->line, msg);
}

void kl_mgraph__shape_text(const int64_t *d, int nd, char *out, size_t n)
{
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "x" : "",
                              (long long)d[i]);
}

/* "1x3x224x224" (or with sep ',' for perm lists); 0 allowed when zero_ok. */
int kl_mgraph__dims(kl_mgraph__ctx_t *c, const char *what, const char *s,
                    char sep, bool zero_ok, int64_t *d, int *nd)
{
    *nd = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < (zero_ok ? 0 : 1) || v > S_MAX_DIM ||
            *nd == KL_MODEL_MAX_DIMS || (*end && *end != sep) ||
            (*end == sep && !end[1]) || *p == '+' || *p == '-')
            return kl_mgraph__err(
                c,
                "bad %s '%s' (expected up to %d numbers separated "
                "by '%c')",
                what, s, KL_MODEL_MAX_DIMS, sep);
        d[(*nd)++] = v;
        p = *end ? end + 1 : end;
    }
    if (*nd == 0)
        return kl_mgraph__err(c, "empty %s", what);
    return KL_OK;
}

static bool s_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= KL_MODEL_MAX_NAME)
        return false;
    for (const char *p = s; *p; p++)
        if (!(*p == '_' || *p == '.' || *p == '-' || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

static int s_find(const kl_mgraph_t *g, const char *name)
{
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->nodes[i].name, name) == 0)
            return i;
    return -1;
}

static kl_mnode_t *s_add_node(kl_mgraph__ctx_t *c, const char *name, kl_mop op,
                              int *rc)
{
    kl_mgraph_t *g = c->g;
    if (!s_name_ok(name)) {
        *rc = kl_mgraph__err(
            c,
            "bad tensor name '%.80s' (letters, digits, '_', '.', "
            "'-', at most %d characters)",
            name, KL_MODEL_MAX_NAME - 1);
        return NULL;
    }
    if (s_find(g, name) >= 0) {
        *rc = kl_mgraph__err(c, "tensor '%s' is defined twice (line %d first)",
                             name, g->nodes[s_find(g, name)].line);
        return NULL;
    }
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->nodes = kl_xrealloc(g->nodes, (size_t)g->cap * sizeof(kl_mnode_t));
    }
    kl_mnode_t *nd = &g->nodes[g->n++];
    memset(nd, 0, sizeof(*nd));
    snprintf(nd->name, sizeof(nd->name), "%s", name);
    nd->op = op;
    nd->line = c->line;
    nd->owner = g->n - 1;
    nd->res_from = -1;
    *rc = KL_OK;
    return nd;
}

/* ---- attributes ---- */

static bool s_key_allowed(const char *keys, const char *k, size_t kn)
{
    const char *p = keys;
    while (*p) {
        size_t n = strcspn(p, " ");
        if (n == kn && strncmp(p, k, kn) == 0)
            return true;
        p += n;
        while (*p == ' ')
            p++;
    }
    return false;
}

/* The value of attribute key among tok[from..), NULL when absent. */
const char *kl_mgraph__attr(const kl_mgraph__ctx_t *c, int from,
                            const char *key)
{
    size_t kn = strlen(key);
    for (int i = from; i < c->ntok; i++)
        if (strncmp(c->tok[i], key, kn) == 0 && c->tok[i][kn] == '=')
            return c->tok[i] + kn + 1;
    return NULL;
}

/* Integer attribute; def < 0: required. */
int kl_mgraph__int(kl_mgraph__ctx_t *c, int from, const kl_mnode_t *nd,
                   const char *key, int64_t def, int64_t min, int64_t *out)
{
    const char *v = kl_mgraph__attr(c, from, key);
    if (!v) {
        if (def < 0)
            return kl_mgraph__err(c, "layer '%s': %s needs %s=", nd->name,
                                  kl_mop_name(nd->op), key);
        *out = def;
        return KL_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || *v == '+' || x < min || x > S_MAX_DIM)
        return kl_mgraph__err(
            c, "layer '%s': bad value '%s' for %s (an integer >= %lld)",
            nd->name, v, key, (long long)min);
    *out = x;
    return KL_OK;
}

/* Required number attribute (finite). */
int kl_mgraph__num(kl_mgraph__ctx_t *c, int from, const kl_mnode_t *nd,
                   const char *key, double *out)
{
    const char *v = kl_mgraph__attr(c, from, key);
    if (!v)
        return kl_mgraph__err(c, "layer '%s': %s needs %s=", nd->name,
                              kl_mop_name(nd->op), key);
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(*out))
        return kl_mgraph__err(
            c, "layer '%s': bad value '%s' for %s (a finite number)", nd->name,
            v, key);
    return KL_OK;
}

int kl_mgraph__flag(kl_mgraph__ctx_t *c, int from, const kl_mnode_t *nd,
                    const char *key, bool def, bool *out)
{
    int64_t v;
    int rc = kl_mgraph__int(c, from, nd, key, def ? 1 : 0, 0, &v);
    if (!rc && v > 1)
        return kl_mgraph__err(c, "layer '%s': %s must be 0 or 1", nd->name,
                              key);
    *out = v == 1;
    return rc;
}

/* NAME = OP IN [IN] [KEY=VALUE ...] */
static int s_layer(kl_mgraph__ctx_t *c)
{
    if (c->ntok < 4 || strcmp(c->tok[1], "=") != 0)
        return kl_mgraph__err(c,
                              "expected 'NAME = OP INPUT... [KEY=VALUE...]', "
                              "'input NAME SHAPE', 'output NAME...' or "
                              "'model NAME'");
    const s_opdef_t *def = NULL;
    for (int i = 1; i < S_NOPS; i++)
        if (strcmp(s_ops[i].name, c->tok[2]) == 0)
            def = &s_ops[i];
    int rc;
    if (!def) {
        /* the layers of s_ops (after input), in its order */
        kl_buf_t ops = {0};
        for (int i = 1; i < S_NOPS; i++)
            kl_buf_printf(&ops, "%s%s", i > 1 ? ", " : "", s_ops[i].name);
        rc = kl_mgraph__err(c, "unknown op '%s' (%s)", c->tok[2], ops.data);
        kl_buf_free(&ops);
        return rc;
    }
    kl_mnode_t *nd = s_add_node(c, c->tok[0], def->op, &rc);
    if (!nd)
        return rc;
    int t = 3;
    for (; t < c->ntok && !strchr(c->tok[t], '='); t++) {
        int in = s_find(c->g, c->tok[t]);
        if (in < 0 || in == c->g->n - 1)
            return kl_mgraph__err(
                c,
                "layer '%s': unknown tensor '%s' (a tensor is "
                "defined above its first use)",
                nd->name, c->tok[t]);
        if (nd->nin == def->nin_max && !def->nin_max)
            return kl_mgraph__err(c, "layer '%s': %s takes no input", nd->name,
                                  def->name);
        if (nd->nin == def->nin_max)
            return kl_mgraph__err(c, "layer '%s': %s takes at most %d input%s",
                                  nd->name, def->name, def->nin_max,
                                  def->nin_max > 1 ? "s" : "");
        nd->in[nd->nin++] = in;
    }
    if (nd->nin < def->nin_min)
        return kl_mgraph__err(c, "layer '%s': %s takes %d input%s", nd->name,
                              def->name, def->nin_min,
                              def->nin_min > 1 ? "s" : "");
    for (int i = t; i < c->ntok; i++) {
        const char *eq = strchr(c->tok[i], '=');
        if (!eq || eq == c->tok[i] || !eq[1])
            return kl_mgraph__err(c, "layer '%s': expected KEY=VALUE, got '%s'",
                                  nd->name, c->tok[i]);
        size_t kn = (size_t)(eq - c->tok[i]);
        if (!s_key_allowed(def->keys, c->tok[i], kn))
            return kl_mgraph__err(
                c, "layer '%s': %s has no attribute '%.*s'%s%s%s", nd->name,
                def->name, (int)kn, c->tok[i], *def->keys ? " (it takes: " : "",
                def->keys, *def->keys ? ")" : "");
        for (int j = t; j < i; j++)
            if (strncmp(c->tok[j], c->tok[i], kn + 1) == 0)
                return kl_mgraph__err(c, "layer '%s': %.*s given twice",
                                      nd->name, (int)kn, c->tok[i]);
    }
    return kl_mgraph__infer(c, t, nd);
}

static int s_statement(kl_mgraph__ctx_t *c)
{
    if (strcmp(c->tok[0], "model") == 0 && c->ntok > 1 &&
        strcmp(c->tok[1], "=") != 0) {
        if (c->ntok != 2 || c->g->name)
            return kl_mgraph__err(c, "expected one 'model NAME' line");
        c->g->name = kl_xstrdup(c->tok[1]);
        return KL_OK;
    }
    if (strcmp(c->tok[0], "input") == 0 && c->ntok > 1 &&
        strcmp(c->tok[1], "=") != 0) {
        if (c->ntok != 3)
            return kl_mgraph__err(c, "expected 'input NAME SHAPE' (SHAPE like "
                                     "1x3x224x224)");
        int rc;
        kl_mnode_t *nd = s_add_node(c, c->tok[1], KL_MOP_INPUT, &rc);
        if (!nd)
            return rc;
        return kl_mgraph__dims(c, "shape", c->tok[2], 'x', false, nd->shape,
                               &nd->ndim);
    }
    if (strcmp(c->tok[0], "output") == 0 && c->ntok > 1 &&
        strcmp(c->tok[1], "=") != 0) {
        for (int i = 1; i < c->ntok; i++) {
            int k = s_find(c->g, c->tok[i]);
            if (k < 0)
                return kl_mgraph__err(c, "output: unknown tensor '%s'",
                                      c->tok[i]);
            c->g->outputs = kl_xrealloc(c->g->outputs,
                                        (size_t)(c->g->nout + 1) * sizeof(int));
            c->g->outputs[c->g->nout++] = k;
        }
        return KL_OK;
    }
    return s_layer(c);
}

/* Splits one line (comment stripped) into c->tok; modifies it. */
static int s_tokens(kl_mgraph__ctx_t *c, char *line)
{
    c->ntok = 0;
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    for (char *p = line; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (!*p)
            break;
        if (c->ntok == KL_MGRAPH__MAX_TOK)
            return kl_mgraph__err(c, "more than %d words on one line",
                                  KL_MGRAPH__MAX_TOK);
        c->tok[c->ntok++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
        if (*p)
            *p++ = '\0';
    }
    return KL_OK;
}

void kl_mgraph_free(kl_mgraph_t *g)
{
    free(g->name);
    free(g->nodes);
    free(g->outputs);
    memset(g, 0, sizeof(*g));
}

int kl_mgraph_parse(const char *text, const char *source, kl_mgraph_t *g,
                    char *err)
{
    memset(g, 0, sizeof(*g));
    kl_mgraph__ctx_t c = {.src = source ? source : "graph", .err = err, .g = g};
    char *copy = kl_xstrdup(text ? text : "");
    int rc = KL_OK;
    char *save = NULL;
    char *p = copy;
    for (c.line = 1; p && !rc; c.line++) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        save = nl ? nl + 1 : NULL;
        rc = s_tokens(&c, p);
        if (!rc && c.ntok > 0)
            rc = s_statement(&c);
        p = save;
    }
    free(copy);
    if (!rc && g->n == 0)
        rc = kl_seterr(err, KL_ERR_INVAL, "%s: no layers", c.src);
    if (rc)
        kl_mgraph_free(g);
    return rc;
}
