/* kl_model_parse.c - the graph format (docs/models.md): one statement a
 * line, shapes inferred as the layers are read. */
#include "kl_model_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

#define S_MAX_TOK 32
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
    {"gelu", KL_MOP_GELU, 1, 1, ""},
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

typedef struct {
    const char *src;
    int line;
    char *err;
    kl_mgraph_t *g;
    char *tok[S_MAX_TOK];
    int ntok;
} s_ctx_t;

#define S_ERR(c, ...) s_err((c), __VA_ARGS__)

__attribute__((format(printf, 2, 3))) static int s_err(s_ctx_t *c,
                                                       const char *fmt, ...)
{
    char msg[KL_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return kl_seterr(c->err, KL_ERR_INVAL, "%s:%d: %s", c->src, c->line, msg);
}

static void s_shape_text(const int64_t *d, int nd, char *out, size_t n)
{
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "x" : "",
                              (long long)d[i]);
}

/* "1x3x224x224" (or with sep ',' for perm lists); 0 allowed when zero_ok. */
static int s_dims(s_ctx_t *c, const char *what, const char *s, char sep,
                  bool zero_ok, int64_t *d, int *nd)
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
            return S_ERR(c,
                         "bad %s '%s' (expected up to %d numbers separated "
                         "by '%c')",
                         what, s, KL_MODEL_MAX_DIMS, sep);
        d[(*nd)++] = v;
        p = *end ? end + 1 : end;
    }
    if (*nd == 0)
        return S_ERR(c, "empty %s", what);
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

static kl_mnode_t *s_add_node(s_ctx_t *c, const char *name, kl_mop op, int *rc)
{
    kl_mgraph_t *g = c->g;
    if (!s_name_ok(name)) {
        *rc = S_ERR(c,
                    "bad tensor name '%.80s' (letters, digits, '_', '.', "
                    "'-', at most %d characters)",
                    name, KL_MODEL_MAX_NAME - 1);
        return NULL;
    }
    if (s_find(g, name) >= 0) {
        *rc = S_ERR(c, "tensor '%s' is defined twice (line %d first)", name,
                    g->nodes[s_find(g, name)].line);
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
static const char *s_attr(const s_ctx_t *c, int from, const char *key)
{
    size_t kn = strlen(key);
    for (int i = from; i < c->ntok; i++)
        if (strncmp(c->tok[i], key, kn) == 0 && c->tok[i][kn] == '=')
            return c->tok[i] + kn + 1;
    return NULL;
}

/* Integer attribute; def < 0: required. */
static int s_int(s_ctx_t *c, int from, const kl_mnode_t *nd, const char *key,
                 int64_t def, int64_t min, int64_t *out)
{
    const char *v = s_attr(c, from, key);
    if (!v) {
        if (def < 0)
            return S_ERR(c, "layer '%s': %s needs %s=", nd->name,
                         kl_mop_name(nd->op), key);
        *out = def;
        return KL_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || *v == '+' || x < min || x > S_MAX_DIM)
        return S_ERR(c,
                     "layer '%s': bad value '%s' for %s (an integer >= %lld)",
                     nd->name, v, key, (long long)min);
    *out = x;
    return KL_OK;
}

/* Required number attribute (finite). */
static int s_num(s_ctx_t *c, int from, const kl_mnode_t *nd, const char *key,
                 double *out)
{
    const char *v = s_attr(c, from, key);
    if (!v)
        return S_ERR(c, "layer '%s': %s needs %s=", nd->name,
                     kl_mop_name(nd->op), key);
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(*out))
        return S_ERR(c, "layer '%s': bad value '%s' for %s (a finite number)",
                     nd->name, v, key);
    return KL_OK;
}

static int s_flag(s_ctx_t *c, int from, const kl_mnode_t *nd, const char *key,
                  bool def, bool *out)
{
    int64_t v;
    int rc = s_int(c, from, nd, key, def ? 1 : 0, 0, &v);
    if (!rc && v > 1)
        return S_ERR(c, "layer '%s': %s must be 0 or 1", nd->name, key);
    *out = v == 1;
    return rc;
}

/* ---- shapes ---- */

static int s_need_ndim(s_ctx_t *c, const kl_mnode_t *nd, const kl_mnode_t *in,
                       int want, const char *what)
{
    if (in->ndim == want)
        return KL_OK;
    char sh[160];
    s_shape_text(in->shape, in->ndim, sh, sizeof(sh));
    return S_ERR(c, "layer '%s': %s expects a %d-D %s input, got '%s' (%s)",
                 nd->name, kl_mop_name(nd->op), want, what, in->name, sh);
}

static int s_window(s_ctx_t *c, const kl_mnode_t *nd, int64_t in, int64_t k,
                    int64_t *out)
{
    int64_t span = in + 2 * nd->pad - nd->dil * (k - 1) - 1;
    if (span < 0)
        return S_ERR(c,
                     "layer '%s': the %lldx window does not fit the padded "
                     "input (%lld + 2*%lld)",
                     nd->name, (long long)k, (long long)in, (long long)nd->pad);
    *out = span / nd->stride + 1;
    return KL_OK;
}

/* conv2d, depthwise_conv2d and the pools: attributes and NCHW output. */
static int s_spatial(s_ctx_t *c, int from, kl_mnode_t *nd, const kl_mnode_t *x)
{
    bool pool = nd->op == KL_MOP_MAX_POOL || nd->op == KL_MOP_AVG_POOL;
    int rc = s_need_ndim(c, nd, x, 4, "NCHW");
    if (!rc)
        rc = s_int(c, from, nd, "R", -1, 1, &nd->R);
    if (!rc)
        rc = s_int(c, from, nd, "S", nd->R, 1, &nd->S) ?:
             s_int(c, from, nd, "stride", pool ? nd->R : 1, 1, &nd->stride) ?:
             s_int(c, from, nd, "pad", 0, 0, &nd->pad);
    if (rc)
        return rc;
    nd->dil = 1;
    if (!pool)
        rc = s_int(c, from, nd, "dilation", 1, 1, &nd->dil) ?:
             s_flag(c, from, nd, "bias", false, &nd->bias) ?:
             s_flag(c, from, nd, "relu", false, &nd->relu);
    if (!rc && nd->op == KL_MOP_CONV2D)
        rc = s_int(c, from, nd, "K", -1, 1, &nd->K)
                 ?: s_int(c, from, nd, "groups", 1, 1, &nd->groups);
    if (!rc && nd->op == KL_MOP_DEPTHWISE)
        rc = s_int(c, from, nd, "multiplier", 1, 1, &nd->mult);
    if (rc)
        return rc;
    int64_t ch = x->shape[1];
    if (nd->op == KL_MOP_CONV2D)
        ch = nd->K;
    else if (nd->op == KL_MOP_DEPTHWISE)
        ch = x->shape[1] * nd->mult;
    nd->ndim = 4;
    nd->shape[0] = x->shape[0];
    nd->shape[1] = ch;
    return s_window(c, nd, x->shape[2], nd->R, &nd->shape[2])
               ?: s_window(c, nd, x->shape[3], nd->S, &nd->shape[3]);
}

static int64_t s_numel(const int64_t *d, int nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= d[i];
    return n;
}

static bool s_same_shape(const kl_mnode_t *a, const kl_mnode_t *b)
{
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) == 0;
}

static int s_matmuls(s_ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *a = &c->g->nodes[nd->in[0]];
    if (nd->op == KL_MOP_DENSE) {
        int rc = s_need_ndim(c, nd, a, 2, "[N,I]") ?:
                 s_int(c, from, nd, "O", -1, 1, &nd->O) ?:
                 s_flag(c, from, nd, "bias", true, &nd->bias) ?:
                 s_flag(c, from, nd, "relu", false, &nd->relu);
        nd->ndim = 2;
        nd->shape[0] = a->shape[0];
        nd->shape[1] = nd->O;
        return rc;
    }
    const kl_mnode_t *b = nd->nin > 1 ? &c->g->nodes[nd->in[1]] : NULL;
    char sa[160], sb[160];
    s_shape_text(a->shape, a->ndim, sa, sizeof(sa));
    if (b)
        s_shape_text(b->shape, b->ndim, sb, sizeof(sb));
    /* numpy's matmul: two inputs of 3 or more dimensions are a batch */
    if (nd->op == KL_MOP_MATMUL && b && a->ndim >= 3 && b->ndim >= 3)
        nd->op = KL_MOP_BATCH_MATMUL;
    int rc = KL_OK;
    if (nd->op == KL_MOP_MATMUL) {
        /* by a weight, A may have any leading dims (M is their product);
         * two values are 2-D */
        rc = b             ? s_need_ndim(c, nd, a, 2, "[M,K]")
                                 ?: s_need_ndim(c, nd, b, 2, "[K,N]")
                         : a->ndim < 2 ? s_need_ndim(c, nd, a, 2, "[...,M,K]")
                           : KL_OK;
        if (!rc)
            rc = s_flag(c, from, nd, "bias", false, &nd->bias)
                     ?: s_flag(c, from, nd, "relu", false, &nd->relu);
        if (!rc && !b)
            rc = s_int(c, from, nd, "N", -1, 1, &nd->N);
        else if (!rc && s_attr(c, from, "N"))
            rc = S_ERR(c, "layer '%s': N= is for a matmul with one input",
                       nd->name);
        if (rc)
            return rc;
        if (b)
            nd->N = b->shape[1];
        if (b && b->shape[0] != a->shape[1])
            return S_ERR(c, "layer '%s': matmul of %s by %s", nd->name, sa, sb);
        nd->ndim = a->ndim;
        memcpy(nd->shape, a->shape, sizeof(nd->shape));
        nd->shape[a->ndim - 1] = nd->N;
        return KL_OK;
    }
    /* batch_matmul: [...,M,K] by [...,K,N], the same leading dims */
    rc = s_need_ndim(c, nd, a, a->ndim >= 3 ? a->ndim : 3, "[B,...,M,K]");
    if (!rc)
        rc = s_need_ndim(c, nd, b, a->ndim, "[B,...,K,N]");
    if (rc)
        return rc;
    int r = a->ndim;
    if (memcmp(a->shape, b->shape, (size_t)(r - 2) * sizeof(int64_t)) ||
        a->shape[r - 1] != b->shape[r - 2])
        return S_ERR(c, "layer '%s': batch_matmul of %s by %s", nd->name, sa,
                     sb);
    nd->ndim = r;
    memcpy(nd->shape, a->shape, sizeof(nd->shape));
    nd->shape[r - 1] = b->shape[r - 1];
    return KL_OK;
}

/* reshape's shape=: dims, where 0 copies the input's dim and one -1 takes
 * what is left (ONNX's rules). */
static int s_reshape_dims(s_ctx_t *c, const kl_mnode_t *nd, const kl_mnode_t *x,
                          const char *v, int64_t *d, int *n)
{
    char *copy = kl_xstrdup(v);
    int infer = -1, rc = KL_OK;
    *n = 0;
    for (char *p = copy, *tok; (tok = strsep(&p, "x")) && !rc;) {
        if (*n == KL_MODEL_MAX_DIMS)
            rc = S_ERR(c, "layer '%s': more than %d dims in shape=%s", nd->name,
                       KL_MODEL_MAX_DIMS, v);
        else if (strcmp(tok, "-1") == 0 && infer < 0)
            d[infer = (*n)++] = 1;
        else if (strcmp(tok, "0") == 0 && *n < x->ndim)
            d[*n] = x->shape[*n], (*n)++;
        else if ((rc = s_dims(c, "shape", tok, 'x', false, &d[*n], &(int){0})))
            break;
        else
            (*n)++;
    }
    free(copy);
    if (!rc && infer >= 0) {
        int64_t rest = s_numel(d, *n), all = s_numel(x->shape, x->ndim);
        if (all % rest)
            rc = S_ERR(c, "layer '%s': shape=%s does not divide %lld elements",
                       nd->name, v, (long long)all);
        else
            d[infer] = all / rest;
    }
    return rc;
}

static int s_views(s_ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *x = &c->g->nodes[nd->in[0]];
    if (nd->op == KL_MOP_FLATTEN) {
        if (x->ndim < 2)
            return s_need_ndim(c, nd, x, 2, "(at least)");
        nd->ndim = 2;
        nd->shape[0] = x->shape[0];
        nd->shape[1] = s_numel(x->shape + 1, x->ndim - 1);
        return KL_OK;
    }
    const char *v =
        s_attr(c, from, nd->op == KL_MOP_RESHAPE ? "shape" : "perm");
    if (!v)
        return S_ERR(c, "layer '%s': %s needs %s=", nd->name,
                     kl_mop_name(nd->op),
                     nd->op == KL_MOP_RESHAPE ? "shape" : "perm");
    int64_t d[KL_MODEL_MAX_DIMS];
    int n;
    if (nd->op == KL_MOP_RESHAPE) {
        int rc = s_reshape_dims(c, nd, x, v, d, &n);
        if (rc)
            return rc;
        if (s_numel(d, n) != s_numel(x->shape, x->ndim))
            return S_ERR(c, "layer '%s': reshape of %lld elements to %s",
                         nd->name, (long long)s_numel(x->shape, x->ndim), v);
        nd->ndim = n;
        memcpy(nd->shape, d, (size_t)n * sizeof(int64_t));
        return KL_OK;
    }
    int rc = s_dims(c, "perm", v, ',', true, d, &n);
    if (rc)
        return rc;
    bool seen[KL_MODEL_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        if (n != x->ndim || d[i] >= n || seen[d[i]])
            return S_ERR(c,
                         "layer '%s': perm=%s is not a permutation of the "
                         "%d dimensions of '%s'",
                         nd->name, v, x->ndim, x->name);
        seen[d[i]] = true;
    }
    nd->ndim = n;
    for (int i = 0; i < n; i++)
        nd->shape[i] = x->shape[d[i]];
    return KL_OK;
}

/* clip: its bounds, lo <= hi; the input's shape. */
static int s_clip(s_ctx_t *c, int from, kl_mnode_t *nd, const kl_mnode_t *x)
{
    int rc =
        s_num(c, from, nd, "lo", &nd->lo) ?: s_num(c, from, nd, "hi", &nd->hi);
    if (!rc && nd->lo > nd->hi)
        rc = S_ERR(c, "layer '%s': clip lo=%s is above hi=%s", nd->name,
                   s_attr(c, from, "lo"), s_attr(c, from, "hi"));
    nd->ndim = x->ndim;
    memcpy(nd->shape, x->shape, sizeof(nd->shape));
    return rc;
}

/* out=u8|s8 (|s32 when s32_ok), default u8. */
static int s_qtype(s_ctx_t *c, int from, const kl_mnode_t *nd, bool s32_ok,
                   kl_dtype *out)
{
    const char *v = s_attr(c, from, "out");
    *out = KL_DT_U8;
    if (!v || !strcmp(v, "u8"))
        return KL_OK;
    if (!strcmp(v, "s8"))
        *out = KL_DT_S8;
    else if (s32_ok && (!strcmp(v, "s32") || !strcmp(v, "i32")))
        *out = KL_DT_S32;
    else
        return S_ERR(c, "layer '%s': bad value '%s' for out (u8, s8%s)",
                     nd->name, v, s32_ok ? " or s32" : "");
    return KL_OK;
}

/* A positive finite f32 scale= (or "channel" when channel_ok). */
static int s_scale(s_ctx_t *c, int from, kl_mnode_t *nd, bool channel_ok)
{
    const char *v = s_attr(c, from, "scale");
    nd->per_channel = channel_ok && (!v || !strcmp(v, "channel"));
    if (nd->per_channel)
        return KL_OK;
    int rc = s_num(c, from, nd, "scale", &nd->scale);
    if (!rc &&
        !(nd->scale > 0 && isfinite((float)nd->scale) && (float)nd->scale > 0))
        rc = S_ERR(c, "layer '%s': scale=%s is not a positive f32 number",
                   nd->name, v);
    return rc;
}

/* A zero point of type dt in [lo, hi] (0 when absent). */
static int s_zero_point(s_ctx_t *c, int from, kl_mnode_t *nd, const char *key,
                        kl_dtype dt, int64_t *out)
{
    const char *v = s_attr(c, from, key);
    *out = 0;
    if (!v)
        return KL_OK;
    char *end;
    errno = 0;
    long long z = strtoll(v, &end, 10);
    long long lo = dt == KL_DT_U8 ? 0 : -128, hi = dt == KL_DT_U8 ? 255 : 127;
    if (errno || end == v || *end || dt == KL_DT_S32 || z < lo || z > hi)
        return S_ERR(c, "layer '%s': bad value '%s' for %s (%s: %lld..%lld)",
                     nd->name, v, key, kl_dtype_name(dt), lo, hi);
    *out = z;
    return KL_OK;
}

/* Element types: a q-op reads u8, dequantize an integer tensor, quantize
 * and every float layer f32 (views keep their input's type). */
static int s_types(s_ctx_t *c, kl_mnode_t *nd)
{
    bool view = nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE ||
                nd->op == KL_MOP_TRANSPOSE;
    for (int k = 0; k < nd->nin; k++) {
        const kl_mnode_t *x = &c->g->nodes[nd->in[k]];
        const char *want = NULL;
        if (kl_mop_is_q(nd->op))
            want = x->dt == KL_DT_U8 ? NULL : "a u8 input (quantize it first)";
        else if (nd->op == KL_MOP_DEQUANTIZE)
            want = x->dt == KL_DT_U8 || x->dt == KL_DT_S8 || x->dt == KL_DT_S32
                       ? NULL
                       : "a u8, s8 or s32 input";
        else if (!view && x->dt != KL_DT_F32)
            want = "an f32 input (dequantize it first)";
        if (want)
            return S_ERR(c, "layer '%s': %s needs %s, '%s' is %s", nd->name,
                         kl_mop_name(nd->op), want, x->name,
                         kl_dtype_name(x->dt));
        if (view)
            nd->dt = x->dt;
    }
    return KL_OK;
}

/* A q-op's quantization, or quantize's / dequantize's; shapes. */
static int s_quant(s_ctx_t *c, int from, kl_mnode_t *nd, const kl_mnode_t *x)
{
    int rc;
    if (nd->op == KL_MOP_QUANTIZE || nd->op == KL_MOP_DEQUANTIZE) {
        kl_dtype t = x->dt;
        rc =
            nd->op == KL_MOP_QUANTIZE ? s_qtype(c, from, nd, false, &t) : KL_OK;
        if (!rc)
            rc = s_scale(c, from, nd, false)
                     ?: s_zero_point(c, from, nd, "zp", t, &nd->zo);
        nd->qout = t;
        nd->dt = nd->op == KL_MOP_QUANTIZE ? t : KL_DT_F32;
        nd->ndim = x->ndim;
        memcpy(nd->shape, x->shape, sizeof(nd->shape));
        return rc;
    }
    nd->op = kl_mop_base(nd->op);
    kl_mop q = nd->op == KL_MOP_CONV2D      ? KL_MOP_QCONV2D
               : nd->op == KL_MOP_DEPTHWISE ? KL_MOP_QDEPTHWISE
               : nd->op == KL_MOP_DENSE     ? KL_MOP_QDENSE
                                            : KL_MOP_QMATMUL;
    rc = nd->op == KL_MOP_DENSE || nd->op == KL_MOP_MATMUL
             ? s_matmuls(c, from, nd)
             : s_spatial(c, from, nd, x);
    nd->op = q;
    if (!rc)
        rc = s_qtype(c, from, nd, true, &nd->qout)
                 ?: s_zero_point(c, from, nd, "za", KL_DT_U8, &nd->za);
    if (!rc && nd->qout == KL_DT_S32 &&
        (s_attr(c, from, "zo") || s_attr(c, from, "scale")))
        rc = S_ERR(c,
                   "layer '%s': out=s32 has no zo= or scale= (the "
                   "accumulator is not requantized)",
                   nd->name);
    if (!rc && nd->qout != KL_DT_S32)
        rc = s_zero_point(c, from, nd, "zo", nd->qout, &nd->zo)
                 ?: s_scale(c, from, nd, true);
    const char *cv = rc ? NULL : s_attr(c, from, "clip");
    if (cv) { /* clip=LO,HI in quantized units */
        char *e1, *e2 = NULL;
        errno = 0;
        long long lo = strtoll(cv, &e1, 10), hi = 0;
        if (*e1 == ',')
            hi = strtoll(e1 + 1, &e2, 10);
        if (errno || e1 == cv || *e1 != ',' || !e2 || e2 == e1 + 1 || *e2 ||
            lo > hi || nd->relu)
            rc = S_ERR(c,
                       "layer '%s': bad clip=%s (LO,HI integers, LO <= HI, "
                       "without relu=1)",
                       nd->name, cv);
        nd->clip = true;
        nd->lo = (double)lo;
        nd->hi = (double)hi;
    }
    nd->dt = nd->qout;
    return rc;
}

/* Attributes and output shape of a layer whose inputs are set. */
static int s_infer(s_ctx_t *c, int from, kl_mnode_t *nd)
{
    const kl_mnode_t *x = &c->g->nodes[nd->in[0]];
    int trc = s_types(c, nd);
    if (trc)
        return trc;
    if (kl_mop_is_q(nd->op) || nd->op == KL_MOP_QUANTIZE ||
        nd->op == KL_MOP_DEQUANTIZE)
        return s_quant(c, from, nd, x);
    switch (nd->op) {
    case KL_MOP_CONV2D:
    case KL_MOP_DEPTHWISE:
    case KL_MOP_MAX_POOL:
    case KL_MOP_AVG_POOL:
        return s_spatial(c, from, nd, x);
    case KL_MOP_DENSE:
    case KL_MOP_MATMUL:
    case KL_MOP_BATCH_MATMUL:
        return s_matmuls(c, from, nd);
    case KL_MOP_GLOBAL_AVG_POOL: {
        int rc = s_need_ndim(c, nd, x, 4, "NCHW");
        nd->ndim = 4;
        nd->shape[0] = x->shape[0];
        nd->shape[1] = x->shape[1];
        nd->shape[2] = nd->shape[3] = 1;
        return rc;
    }
    case KL_MOP_CLIP:
        return s_clip(c, from, nd, x);
    case KL_MOP_ADD:
        if (!s_same_shape(x, &c->g->nodes[nd->in[1]])) {
            char a[160], b[160];
            const kl_mnode_t *y = &c->g->nodes[nd->in[1]];
            s_shape_text(x->shape, x->ndim, a, sizeof(a));
            s_shape_text(y->shape, y->ndim, b, sizeof(b));
            return S_ERR(c, "layer '%s': add of '%s' (%s) and '%s' (%s)",
                         nd->name, x->name, a, y->name, b);
        }
        /* fall through */
    case KL_MOP_LAYER_NORM: {
        nd->eps = 1e-5;
        int rc = s_attr(c, from, "eps") ? s_num(c, from, nd, "eps", &nd->eps)
                                        : KL_OK;
        if (!rc && !(nd->eps > 0))
            rc = S_ERR(c, "layer '%s': eps=%s is not above 0", nd->name,
                       s_attr(c, from, "eps"));
        if (!rc)
            rc = s_flag(c, from, nd, "affine", false, &nd->affine);
        if (rc)
            return rc;
    }
        /* fall through */
    case KL_MOP_RELU:
    case KL_MOP_SOFTMAX:
    case KL_MOP_GELU:
        nd->ndim = x->ndim;
        memcpy(nd->shape, x->shape, sizeof(nd->shape));
        return KL_OK;
    case KL_MOP_FLATTEN:
    case KL_MOP_RESHAPE:
    case KL_MOP_TRANSPOSE:
        return s_views(c, from, nd);
    default:
        return S_ERR(c, "layer '%s': internal: op %d", nd->name, (int)nd->op);
    }
}

/* NAME = OP IN [IN] [KEY=VALUE ...] */
static int s_layer(s_ctx_t *c)
{
    if (c->ntok < 4 || strcmp(c->tok[1], "=") != 0)
        return S_ERR(c, "expected 'NAME = OP INPUT... [KEY=VALUE...]', "
                        "'input NAME SHAPE', 'output NAME...' or "
                        "'model NAME'");
    const s_opdef_t *def = NULL;
    for (int i = 1; i < S_NOPS; i++)
        if (strcmp(s_ops[i].name, c->tok[2]) == 0)
            def = &s_ops[i];
    if (!def)
        return S_ERR(c,
                     "unknown op '%s' (conv2d, depthwise_conv2d, dense, "
                     "matmul, batch_matmul, max_pool2d, avg_pool2d, "
                     "global_avg_pool, add, relu, clip, flatten, reshape, "
                     "transpose, softmax, layer_norm, gelu, qconv2d, "
                     "qdepthwise_conv2d, qdense, qmatmul, quantize, "
                     "dequantize)",
                     c->tok[2]);
    int rc;
    kl_mnode_t *nd = s_add_node(c, c->tok[0], def->op, &rc);
    if (!nd)
        return rc;
    int t = 3;
    for (; t < c->ntok && !strchr(c->tok[t], '='); t++) {
        int in = s_find(c->g, c->tok[t]);
        if (in < 0 || in == c->g->n - 1)
            return S_ERR(c,
                         "layer '%s': unknown tensor '%s' (a tensor is "
                         "defined above its first use)",
                         nd->name, c->tok[t]);
        if (nd->nin == def->nin_max)
            return S_ERR(c, "layer '%s': %s takes at most %d input%s", nd->name,
                         def->name, def->nin_max, def->nin_max > 1 ? "s" : "");
        nd->in[nd->nin++] = in;
    }
    if (nd->nin < def->nin_min)
        return S_ERR(c, "layer '%s': %s takes %d input%s", nd->name, def->name,
                     def->nin_min, def->nin_min > 1 ? "s" : "");
    for (int i = t; i < c->ntok; i++) {
        const char *eq = strchr(c->tok[i], '=');
        if (!eq || eq == c->tok[i] || !eq[1])
            return S_ERR(c, "layer '%s': expected KEY=VALUE, got '%s'",
                         nd->name, c->tok[i]);
        size_t kn = (size_t)(eq - c->tok[i]);
        if (!s_key_allowed(def->keys, c->tok[i], kn))
            return S_ERR(c, "layer '%s': %s has no attribute '%.*s'%s%s%s",
                         nd->name, def->name, (int)kn, c->tok[i],
                         *def->keys ? " (it takes: " : "", def->keys,
                         *def->keys ? ")" : "");
        for (int j = t; j < i; j++)
            if (strncmp(c->tok[j], c->tok[i], kn + 1) == 0)
                return S_ERR(c, "layer '%s': %.*s given twice", nd->name,
                             (int)kn, c->tok[i]);
    }
    return s_infer(c, t, nd);
}

static int s_statement(s_ctx_t *c)
{
    if (strcmp(c->tok[0], "model") == 0 && c->ntok > 1 &&
        strcmp(c->tok[1], "=") != 0) {
        if (c->ntok != 2 || c->g->name)
            return S_ERR(c, "expected one 'model NAME' line");
        c->g->name = kl_xstrdup(c->tok[1]);
        return KL_OK;
    }
    if (strcmp(c->tok[0], "input") == 0 && c->ntok > 1 &&
        strcmp(c->tok[1], "=") != 0) {
        if (c->ntok != 3)
            return S_ERR(c, "expected 'input NAME SHAPE' (SHAPE like "
                            "1x3x224x224)");
        int rc;
        kl_mnode_t *nd = s_add_node(c, c->tok[1], KL_MOP_INPUT, &rc);
        if (!nd)
            return rc;
        return s_dims(c, "shape", c->tok[2], 'x', false, nd->shape, &nd->ndim);
    }
    if (strcmp(c->tok[0], "output") == 0 && c->ntok > 1 &&
        strcmp(c->tok[1], "=") != 0) {
        for (int i = 1; i < c->ntok; i++) {
            int k = s_find(c->g, c->tok[i]);
            if (k < 0)
                return S_ERR(c, "output: unknown tensor '%s'", c->tok[i]);
            c->g->outputs = kl_xrealloc(c->g->outputs,
                                        (size_t)(c->g->nout + 1) * sizeof(int));
            c->g->outputs[c->g->nout++] = k;
        }
        return KL_OK;
    }
    return s_layer(c);
}

/* Splits one line (comment stripped) into c->tok; modifies it. */
static int s_tokens(s_ctx_t *c, char *line)
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
        if (c->ntok == S_MAX_TOK)
            return S_ERR(c, "more than %d words on one line", S_MAX_TOK);
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
    s_ctx_t c = {.src = source ? source : "graph", .err = err, .g = g};
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
