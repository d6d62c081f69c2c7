/* kl_model_onnx_fold.c - ONNX import: constant folding. A node whose
 * inputs are all constants (initializers, Constant nodes, earlier folds)
 * is evaluated here, at import, into a new constant, whatever its size:
 * the element-wise arithmetic and comparisons with broadcasting, Where,
 * Cast, Transpose, Trilu, Concat, Slice, Gather, Expand, ConstantOfShape,
 * Range and Shape of a constant. That is how a causal mask (Trilu of
 * ones, Equal, Where), a weight transposed in the graph (an export
 * without constant folding) or shape arithmetic reach the layers as
 * plain constants. Values are held as doubles while folding; a result
 * is stored as float (ONNX type 1) or int64 (7; bool and int32 results
 * too, as 0/1 and their values).
 *
 * A constant that a computed layer reads without folding into it (the
 * mask of a Where, a per-element scale) becomes a `const` layer
 * (kl_onnx__operand): its values are that layer's parameter. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* The most values one folded constant may have. */
#define S_MAX_FOLD ((int64_t)1 << 24)

typedef struct {
    int type; /* 1 float, 7 int64, 9 bool */
    int nd;
    int64_t d[KL_MODEL_MAX_DIMS];
    int64_t n;
    double *v;
} s_ct_t;

static void s_ct_free(s_ct_t *t)
{
    free(t->v);
    t->v = NULL;
}

static int64_t s_numel(const int64_t *d, int nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= d[i];
    return n;
}

/* Element size of the integer ONNX types kiln folds (int32_data or
 * raw_data), 0 for others. */
static size_t s_isize(int type)
{
    switch (type) {
    case 2: /* uint8 */
    case 3: /* int8 */
    case 9: /* bool */
        return 1;
    case 4: /* uint16 */
    case 5: /* int16 */
        return 2;
    case 6: /* int32 */
        return 4;
    default:
        return 0;
    }
}

/* One integer of raw data of type type at element i. */
static double s_raw_int(const uint8_t *p, int type, int64_t i)
{
    switch (type) {
    case 2:
    case 9:
        return p[i];
    case 3:
        return (int8_t)p[i];
    case 4: {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        return x;
    }
    case 5: {
        int16_t x;
        memcpy(&x, p + 2 * i, 2);
        return x;
    }
    default: {
        int32_t x;
        memcpy(&x, p + 4 * i, 4);
        return x;
    }
    }
}

/* The values of the integer tensor t (types 6, 7, 9 and the small ones)
 * into v[n]; false when its data does not hold n of them. */
static bool s_ints(const kl_onnx__tensor_t *t, int64_t n, double *v)
{
    if (t->data_type == 7) {
        if (t->n_int64_data == (size_t)n) {
            for (int64_t i = 0; i < n; i++)
                v[i] = (double)t->int64_data[i];
            return true;
        }
        if (!t->has_raw_data || t->raw_data.len != (size_t)n * 8)
            return n == 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t x;
            memcpy(&x, t->raw_data.data + 8 * i, 8); /* little-endian */
            v[i] = (double)x;
        }
        return true;
    }
    size_t es = s_isize(t->data_type);
    if (t->n_int32_data == (size_t)n) {
        for (int64_t i = 0; i < n; i++)
            v[i] = t->data_type == 2 || t->data_type == 4
                       ? (double)(uint32_t)t->int32_data[i]
                       : (double)t->int32_data[i];
        return true;
    }
    if (!t->has_raw_data || t->raw_data.len != (size_t)n * es)
        return n == 0;
    for (int64_t i = 0; i < n; i++)
        v[i] = s_raw_int(t->raw_data.data, t->data_type, i);
    return true;
}

/* Constant t (named name) as doubles. 1: not a constant kiln folds (a
 * computed value, another element type: *out untouched); KL_OK; or an
 * error (a constant whose data is bad). s_get: by name. */
static int s_read(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                  const char *name, s_ct_t *out)
{
    if (!t || t->n_dims > KL_MODEL_MAX_DIMS)
        return 1;
    int type = t->data_type;
    if (type != 1 && type != 7 && !s_isize(type))
        return 1;
    int64_t n = kl_onnx__numel(t);
    if (n < 0 || n > S_MAX_FOLD)
        return 1;
    s_ct_t r = {.type = type == 1   ? 1
                        : type == 9 ? 9
                                    : 7,
                .nd = (int)t->n_dims};
    for (int i = 0; i < r.nd; i++)
        r.d[i] = t->dims[i];
    r.n = n;
    r.v = kl_xmalloc((size_t)(n ? n : 1) * sizeof(double));
    if (type == 1) {
        float *f;
        int64_t m;
        int rc = kl_onnx__floats(c, t, name, &f, &m);
        if (rc) {
            s_ct_free(&r);
            return rc;
        }
        for (int64_t i = 0; i < n; i++)
            r.v[i] = f[i];
        free(f);
    } else if (!s_ints(t, n, r.v)) {
        s_ct_free(&r);
        return kl_onnx__terr(c, name,
                             "its data does not hold its shape's "
                             "values (truncated?)");
    }
    *out = r;
    return KL_OK;
}

static int s_get(kl_onnx__ctx_t *c, const char *name, s_ct_t *out)
{
    return s_read(c, name && *name ? kl_onnx__init(c, name) : NULL, name, out);
}

/* Stores r (taken) as constant `name`. */
static void s_put(kl_onnx__ctx_t *c, const char *name, s_ct_t *r)
{
    kl_onnx__tensor_t *t = kl_xmalloc(sizeof(*t));
    kiln_onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = r->type == 1 ? 1 : 7;
    t->n_dims = (size_t)r->nd;
    t->dims = kl_xmalloc(KL_MODEL_MAX_DIMS * sizeof(int64_t));
    memcpy(t->dims, r->d, (size_t)r->nd * sizeof(int64_t));
    void *data;
    if (r->type == 1) {
        float *x = kl_xmalloc((size_t)(r->n ? r->n : 1) * sizeof(float));
        for (int64_t i = 0; i < r->n; i++)
            x[i] = (float)r->v[i];
        t->n_float_data = (size_t)r->n;
        t->float_data = x;
        data = x;
    } else {
        int64_t *x = kl_xmalloc((size_t)(r->n ? r->n : 1) * sizeof(int64_t));
        for (int64_t i = 0; i < r->n; i++)
            x[i] = (int64_t)r->v[i];
        t->n_int64_data = (size_t)r->n;
        t->int64_data = x;
        data = x;
    }
    kl_onnx__add_const(c, name, t, t);
    c->consts[c->nconsts - 1].data = data;
    s_ct_free(r);
}

/* A result of shape d[nd] and type, its values still to fill. */
static int s_new(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int type,
                 const int64_t *d, int rank, s_ct_t *r)
{
    int64_t n = s_numel(d, rank);
    if (rank > KL_MODEL_MAX_DIMS || n < 0 || n > S_MAX_FOLD) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "a constant of %lld values is too large to fold (at most "
                 "%lld)",
                 (long long)n, (long long)S_MAX_FOLD);
        return kl_onnx__fail(c, nd, msg);
    }
    *r = (s_ct_t){.type = type, .nd = rank, .n = n};
    memcpy(r->d, d, (size_t)rank * sizeof(int64_t));
    r->v = kl_xcalloc((size_t)(n ? n : 1), sizeof(double));
    return KL_OK;
}

/* ---- broadcasting ---- */

/* The broadcast shape of k tensors into d (rank *nd); false when they do
 * not broadcast. */
static bool s_bshape(const s_ct_t *const *t, int k, int64_t *d, int *nd)
{
    int r = 0;
    for (int i = 0; i < k; i++)
        r = t[i]->nd > r ? t[i]->nd : r;
    for (int j = 0; j < r; j++) {
        int64_t v = 1;
        for (int i = 0; i < k; i++) {
            int at = j - (r - t[i]->nd);
            int64_t x = at >= 0 ? t[i]->d[at] : 1;
            if (x != 1 && v != 1 && x != v)
                return false;
            v = x != 1 ? x : v;
        }
        d[j] = v;
    }
    *nd = r;
    return true;
}

/* The flat index into t of output element o of a broadcast to d[nd]. */
static int64_t s_bidx(const s_ct_t *t, const int64_t *d, int nd, int64_t o)
{
    int64_t idx = 0, stride = 1;
    for (int j = nd - 1; j >= 0; j--) {
        int64_t x = o % d[j];
        o /= d[j];
        int at = j - (nd - t->nd);
        if (at < 0)
            break;
        if (t->d[at] != 1)
            idx += x * stride;
        stride *= t->d[at];
    }
    return idx;
}

static double s_binop(const char *op, int type, double x, double y, bool *bad)
{
    if (!strcmp(op, "Add"))
        return x + y;
    if (!strcmp(op, "Sub"))
        return x - y;
    if (!strcmp(op, "Mul"))
        return x * y;
    if (!strcmp(op, "Div") || !strcmp(op, "Mod")) {
        if (type != 1 && y == 0) {
            *bad = true;
            return 0;
        }
        if (!strcmp(op, "Mod")) /* the sign of the divisor (fmod=0) */
            return type == 1 ? fmod(x, y) : x - floor(x / y) * y;
        return type == 1 ? x / y : trunc(x / y);
    }
    if (!strcmp(op, "Pow"))
        return pow(x, y);
    if (!strcmp(op, "Max"))
        return x != x || y != y ? NAN : x > y ? x : y;
    if (!strcmp(op, "Min"))
        return x != x || y != y ? NAN : x < y ? x : y;
    if (!strcmp(op, "Equal"))
        return x == y;
    if (!strcmp(op, "Less"))
        return x < y;
    if (!strcmp(op, "Greater"))
        return x > y;
    if (!strcmp(op, "LessOrEqual"))
        return x <= y;
    if (!strcmp(op, "GreaterOrEqual"))
        return x >= y;
    if (!strcmp(op, "And"))
        return x != 0 && y != 0;
    if (!strcmp(op, "Or"))
        return x != 0 || y != 0;
    return (x != 0) != (y != 0); /* Xor */
}

static bool s_is_cmp(const char *op)
{
    return !strcmp(op, "Equal") || !strcmp(op, "Less") ||
           !strcmp(op, "Greater") || !strcmp(op, "LessOrEqual") ||
           !strcmp(op, "GreaterOrEqual") || !strcmp(op, "And") ||
           !strcmp(op, "Or") || !strcmp(op, "Xor");
}

/* Binary element-wise ops (Max, Min and Sum variadic) and Where. */
static int s_fold_ew(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, s_ct_t *in,
                     int k, s_ct_t *r)
{
    const char *op = nd->op_type;
    const s_ct_t *p[3] = {&in[0], k > 1 ? &in[1] : &in[0],
                          k > 2 ? &in[2] : &in[0]};
    int64_t d[KL_MODEL_MAX_DIMS];
    int rank, rc;
    if (!s_bshape(p, k, d, &rank))
        return kl_onnx__fail(c, nd,
                             "constant inputs of shapes that do not "
                             "broadcast");
    bool where = !strcmp(op, "Where");
    int type = where                      ? p[1]->type
               : s_is_cmp(op)             ? 9
               : in[0].type == 1 || k < 2 ? in[0].type
               : in[1].type == 1          ? 1
                                          : 7;
    if ((rc = s_new(c, nd, type == 9 && !where && !s_is_cmp(op) ? 7 : type, d,
                    rank, r)))
        return rc;
    if (where && p[1]->type != p[2]->type &&
        (p[1]->type == 1 || p[2]->type == 1))
        r->type = 1;
    bool bad = false;
    for (int64_t o = 0; o < r->n; o++) {
        double a = in[0].v[s_bidx(&in[0], d, rank, o)];
        if (where) {
            r->v[o] = a != 0 ? p[1]->v[s_bidx(p[1], d, rank, o)]
                             : p[2]->v[s_bidx(p[2], d, rank, o)];
            continue;
        }
        for (int i = 1; i < k; i++)
            a = s_binop(op, type, a, in[i].v[s_bidx(&in[i], d, rank, o)], &bad);
        r->v[o] = a;
    }
    if (bad) {
        s_ct_free(r);
        return kl_onnx__fail(c, nd, "an integer division by zero");
    }
    return KL_OK;
}

static int s_fold_unary(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const s_ct_t *x, s_ct_t *r)
{
    const char *op = nd->op_type;
    int type = !strcmp(op, "Not") ? 9 : x->type == 9 ? 7 : x->type;
    if (!strcmp(op, "Sqrt") || !strcmp(op, "Exp") || !strcmp(op, "Log") ||
        !strcmp(op, "Reciprocal") || !strcmp(op, "Erf") ||
        !strcmp(op, "Tanh") || !strcmp(op, "Sigmoid"))
        type = 1;
    int rc = s_new(c, nd, type, x->d, x->nd, r);
    for (int64_t i = 0; !rc && i < x->n; i++) {
        double a = x->v[i];
        r->v[i] = !strcmp(op, "Neg")          ? -a
                  : !strcmp(op, "Abs")        ? fabs(a)
                  : !strcmp(op, "Not")        ? a == 0
                  : !strcmp(op, "Sqrt")       ? sqrt(a)
                  : !strcmp(op, "Exp")        ? exp(a)
                  : !strcmp(op, "Log")        ? log(a)
                  : !strcmp(op, "Reciprocal") ? 1.0 / a
                  : !strcmp(op, "Erf")        ? erf(a)
                  : !strcmp(op, "Tanh")       ? tanh(a)
                  : !strcmp(op, "Sigmoid")    ? 1.0 / (1.0 + exp(-a))
                  : !strcmp(op, "Relu")       ? (a > 0 ? a : 0)
                  : !strcmp(op, "Floor")      ? floor(a)
                                              : ceil(a);
    }
    return rc;
}

static int s_fold_cast(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                       const s_ct_t *x, s_ct_t *r)
{
    int64_t to = kl_onnx__aint(nd, "to", 0);
    int type = to == 1 || to == 11 ? 1 : to == 9 ? 9 : 7;
    if (to != 1 && to != 11 && to != 9 && to != 6 && to != 7)
        return KL_ONNX__NEXT;
    int rc = s_new(c, nd, type, x->d, x->nd, r);
    for (int64_t i = 0; !rc && i < x->n; i++)
        r->v[i] = type == 1   ? (double)(float)x->v[i]
                  : type == 9 ? x->v[i] != 0
                              : trunc(x->v[i]);
    return rc;
}

/* The strides of shape d[nd] (C order). */
static void s_strides(const int64_t *d, int nd, int64_t *st)
{
    int64_t s = 1;
    for (int j = nd - 1; j >= 0; j--) {
        st[j] = s;
        s *= d[j];
    }
}

static int s_fold_transpose(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                            const s_ct_t *x, s_ct_t *r)
{
    int perm[KL_MODEL_MAX_DIMS];
    const KilnOnnx__AttributeProto *p = kl_onnx__attr(nd, "perm");
    if (p && p->n_ints != (size_t)x->nd)
        return kl_onnx__fail(c, nd,
                             "perm does not have one entry per "
                             "dimension");
    bool seen[KL_MODEL_MAX_DIMS] = {false};
    int64_t d[KL_MODEL_MAX_DIMS], st[KL_MODEL_MAX_DIMS];
    for (int j = 0; j < x->nd; j++) {
        int64_t v = p ? p->ints[j] : x->nd - 1 - j;
        if (v < 0 || v >= x->nd || seen[v])
            return kl_onnx__fail(c, nd, "perm is not a permutation");
        seen[v] = true;
        perm[j] = (int)v;
        d[j] = x->d[v];
    }
    s_strides(x->d, x->nd, st);
    int rc = s_new(c, nd, x->type, d, x->nd, r);
    for (int64_t o = 0; !rc && o < r->n; o++) {
        int64_t rem = o, src = 0;
        for (int j = x->nd - 1; j >= 0; j--) {
            src += (rem % d[j]) * st[perm[j]];
            rem /= d[j];
        }
        r->v[o] = x->v[src];
    }
    return rc;
}

/* Trilu over the last two dims: upper keeps j - i >= k, lower j - i <= k. */
static int s_fold_trilu(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const s_ct_t *x, const s_ct_t *kk, s_ct_t *r)
{
    if (x->nd < 2)
        return kl_onnx__fail(c, nd, "an input of fewer than 2 dimensions");
    int64_t k = kk && kk->n ? (int64_t)kk->v[0] : 0;
    bool upper = kl_onnx__aint(nd, "upper", 1) != 0;
    int64_t rows = x->d[x->nd - 2], cols = x->d[x->nd - 1];
    int rc = s_new(c, nd, x->type, x->d, x->nd, r);
    for (int64_t o = 0; !rc && o < r->n; o++) {
        int64_t j = o % cols, i = (o / cols) % rows;
        bool keep = upper ? j - i >= k : j - i <= k;
        r->v[o] = keep ? x->v[o] : 0;
    }
    return rc;
}

static int s_axis(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int64_t a,
                  int rank, int *out)
{
    *out = 0;
    if (a < -rank || a >= rank)
        return kl_onnx__fail(c, nd, "an axis outside the input's dimensions");
    *out = (int)(a < 0 ? a + rank : a);
    return KL_OK;
}

static int s_fold_concat(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                         const s_ct_t *in, int k, s_ct_t *r)
{
    int ax, rc = s_axis(c, nd, kl_onnx__aint(nd, "axis", 0), in[0].nd, &ax);
    int64_t d[KL_MODEL_MAX_DIMS];
    memcpy(d, in[0].d, sizeof(d));
    d[ax] = 0;
    for (int i = 0; !rc && i < k; i++) {
        bool ok = in[i].nd == in[0].nd;
        for (int j = 0; ok && j < in[0].nd; j++)
            ok = j == ax || in[i].d[j] == in[0].d[j];
        if (!ok)
            return kl_onnx__fail(c, nd,
                                 "constant inputs whose other "
                                 "dimensions differ");
        d[ax] += in[i].d[ax];
    }
    if (rc || (rc = s_new(c, nd, in[0].type, d, in[0].nd, r)))
        return rc;
    int64_t outer = s_numel(d, ax),
            inner = s_numel(d + ax + 1, in[0].nd - ax - 1);
    int64_t at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < k; i++) {
            int64_t len = in[i].d[ax] * inner;
            memcpy(r->v + at, in[i].v + o * len, (size_t)len * sizeof(double));
            at += len;
        }
    return KL_OK;
}

int kl_onnx__slice_args(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const int64_t *d, int rank, kl_onnx__slice_t *sl)
{
    s_ct_t a[4] = {{0}};
    bool has[4] = {false};
    const char *what[4] = {"starts", "ends", "axes", "steps"};
    int rc = KL_OK;
    for (int i = 0; i < 4 && !rc; i++) {
        const KilnOnnx__AttributeProto *at = kl_onnx__attr(nd, what[i]);
        if (at && i < 3) { /* before opset 10 */
            a[i] = (s_ct_t){.type = 7, .nd = 1, .n = (int64_t)at->n_ints};
            a[i].d[0] = a[i].n;
            a[i].v = kl_xmalloc((at->n_ints + 1) * sizeof(double));
            for (size_t j = 0; j < at->n_ints; j++)
                a[i].v[j] = (double)at->ints[j];
            has[i] = true;
        } else if ((size_t)i + 1 < nd->n_input && nd->input[i + 1][0]) {
            int g = s_get(c, nd->input[i + 1], &a[i]);
            if (g == 1) {
                char msg[80];
                snprintf(msg, sizeof(msg), "%s must be a constant", what[i]);
                rc = kl_onnx__fail(c, nd, msg);
            } else
                rc = g;
            has[i] = !rc;
        }
    }
    if (!rc && (!has[0] || !has[1] || a[1].n != a[0].n ||
                (has[2] && a[2].n != a[0].n) || (has[3] && a[3].n != a[0].n)))
        rc = kl_onnx__fail(c, nd,
                           "starts, ends, axes and steps of "
                           "different lengths");
    for (int j = 0; j < rank; j++) {
        sl->start[j] = 0;
        sl->step[j] = 1;
        sl->len[j] = d[j];
    }
    for (int64_t i = 0; !rc && i < a[0].n; i++) {
        int ax;
        double st = has[3] ? a[3].v[i] : 1;
        if ((rc = s_axis(c, nd, has[2] ? (int64_t)a[2].v[i] : i, rank, &ax)))
            break;
        if (st == 0) {
            rc = kl_onnx__fail(c, nd, "a step of 0");
            break;
        }
        double dim = (double)d[ax], b = a[0].v[i], e = a[1].v[i];
        b = b < 0 ? b + dim : b;
        e = e < 0 ? e + dim : e;
        if (st > 0) {
            b = b < 0 ? 0 : b > dim ? dim : b;
            e = e < 0 ? 0 : e > dim ? dim : e;
        } else {
            b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
        }
        double len = ceil((e - b) / st);
        sl->start[ax] = (int64_t)b;
        sl->step[ax] = (int64_t)st;
        sl->len[ax] = len > 0 ? (int64_t)len : 0;
    }
    for (int i = 0; i < 4; i++)
        s_ct_free(&a[i]);
    return rc;
}

static int s_fold_slice(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const s_ct_t *x, s_ct_t *r)
{
    int64_t sts[KL_MODEL_MAX_DIMS];
    kl_onnx__slice_t sl;
    int rc = kl_onnx__slice_args(c, nd, x->d, x->nd, &sl);
    if (rc || (rc = s_new(c, nd, x->type, sl.len, x->nd, r)))
        return rc;
    s_strides(x->d, x->nd, sts);
    for (int64_t o = 0; o < r->n; o++) {
        int64_t rem = o, src = 0;
        for (int j = x->nd - 1; j >= 0; j--) {
            src += (sl.start[j] + (rem % sl.len[j]) * sl.step[j]) * sts[j];
            rem /= sl.len[j];
        }
        r->v[o] = x->v[src];
    }
    return KL_OK;
}

static int s_fold_gather(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                         const s_ct_t *x, const s_ct_t *idx, s_ct_t *r)
{
    int ax, rc = s_axis(c, nd, kl_onnx__aint(nd, "axis", 0), x->nd, &ax);
    int rank = x->nd - 1 + idx->nd;
    if (rc)
        return rc;
    if (rank > KL_MODEL_MAX_DIMS)
        return kl_onnx__fail(c, nd, "more than 8 dimensions");
    int64_t d[KL_MODEL_MAX_DIMS];
    int n = 0;
    for (int j = 0; j < ax; j++)
        d[n++] = x->d[j];
    for (int j = 0; j < idx->nd; j++)
        d[n++] = idx->d[j];
    for (int j = ax + 1; j < x->nd; j++)
        d[n++] = x->d[j];
    if ((rc = s_new(c, nd, x->type, d, rank, r)))
        return rc;
    int64_t outer = s_numel(x->d, ax),
            inner = s_numel(x->d + ax + 1, x->nd - ax - 1), dim = x->d[ax];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < idx->n; i++) {
            int64_t g = (int64_t)idx->v[i];
            g = g < 0 ? g + dim : g;
            if (g < 0 || g >= dim) {
                s_ct_free(r);
                return kl_onnx__fail(c, nd, "an index outside the constant");
            }
            memcpy(r->v + (o * idx->n + i) * inner,
                   x->v + (o * dim + g) * inner,
                   (size_t)inner * sizeof(double));
        }
    return KL_OK;
}

/* A 1-D int64 constant as a shape (at most 8 values). */
static int s_shape_of(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      const s_ct_t *s, int64_t *d, int *rank)
{
    if (s->nd > 1 || s->n > KL_MODEL_MAX_DIMS || s->type == 1)
        return kl_onnx__fail(c, nd,
                             "the shape must be a 1-D int64 constant "
                             "of at most 8 values");
    for (int64_t i = 0; i < s->n; i++) {
        d[i] = (int64_t)s->v[i];
        if (d[i] < 0)
            return kl_onnx__fail(c, nd, "a negative dimension");
    }
    *rank = (int)s->n;
    return KL_OK;
}

static int s_fold_expand(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                         const s_ct_t *x, const s_ct_t *s, s_ct_t *r)
{
    s_ct_t shp = {.type = 7};
    int rc = s_shape_of(c, nd, s, shp.d, &shp.nd);
    const s_ct_t *p[2] = {x, &shp};
    int64_t d[KL_MODEL_MAX_DIMS];
    int rank;
    if (rc)
        return rc;
    if (!s_bshape(p, 2, d, &rank))
        return kl_onnx__fail(c, nd,
                             "the shape does not broadcast with the "
                             "input's");
    if ((rc = s_new(c, nd, x->type, d, rank, r)))
        return rc;
    for (int64_t o = 0; o < r->n; o++)
        r->v[o] = x->v[s_bidx(x, d, rank, o)];
    return KL_OK;
}

static int s_fold_cos(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      const s_ct_t *s, s_ct_t *r)
{
    int64_t d[KL_MODEL_MAX_DIMS];
    int rank, rc = s_shape_of(c, nd, s, d, &rank);
    const KilnOnnx__AttributeProto *a = kl_onnx__attr(nd, "value");
    double v = 0;
    int type = 1;
    if (!rc && a && a->t) {
        s_ct_t one;
        int g = s_read(c, a->t, "value", &one);
        if (g > 1)
            return g;
        if (g == 1 || one.n != 1) {
            if (!g)
                s_ct_free(&one);
            return kl_onnx__fail(c, nd, "value is not one number");
        }
        v = one.v[0];
        type = one.type;
        s_ct_free(&one);
    }
    if (rc || (rc = s_new(c, nd, type, d, rank, r)))
        return rc;
    for (int64_t i = 0; i < r->n; i++)
        r->v[i] = v;
    return KL_OK;
}

static int s_fold_range(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const s_ct_t *in, s_ct_t *r)
{
    if (in[0].n != 1 || in[1].n != 1 || in[2].n != 1 || in[2].v[0] == 0)
        return kl_onnx__fail(c, nd,
                             "start, limit and delta must be scalars, "
                             "delta not 0");
    double n = ceil((in[1].v[0] - in[0].v[0]) / in[2].v[0]);
    int64_t d[1] = {n > 0 ? (int64_t)n : 0};
    int rc = s_new(c, nd, in[0].type, d, 1, r);
    for (int64_t i = 0; !rc && i < d[0]; i++)
        r->v[i] = in[0].v[0] + (double)i * in[2].v[0];
    return rc;
}

/* What each folded op takes: the number of inputs (-1 any). */
static int s_fold_one(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, s_ct_t *in,
                      int k, s_ct_t *r)
{
    const char *op = nd->op_type;
    if (!strcmp(op, "Where") ||
        (k >= 2 && (!strcmp(op, "Add") || !strcmp(op, "Sub") ||
                    !strcmp(op, "Mul") || !strcmp(op, "Div") ||
                    !strcmp(op, "Mod") || !strcmp(op, "Pow") || s_is_cmp(op))))
        return k == (strcmp(op, "Where") ? 2 : 3)
                   ? s_fold_ew(c, nd, in, k, r)
                   : kl_onnx__fail(c, nd, "a wrong number of inputs");
    if (!strcmp(op, "Max") || !strcmp(op, "Min"))
        return s_fold_ew(c, nd, in, k, r);
    if (!strcmp(op, "Cast"))
        return s_fold_cast(c, nd, &in[0], r);
    if (!strcmp(op, "Transpose"))
        return s_fold_transpose(c, nd, &in[0], r);
    if (!strcmp(op, "Trilu"))
        return s_fold_trilu(c, nd, &in[0], k > 1 ? &in[1] : NULL, r);
    if (!strcmp(op, "Concat"))
        return s_fold_concat(c, nd, in, k, r);
    if (!strcmp(op, "Slice"))
        return s_fold_slice(c, nd, &in[0], r);
    if (!strcmp(op, "Gather") && k == 2)
        return s_fold_gather(c, nd, &in[0], &in[1], r);
    if (!strcmp(op, "Expand") && k == 2)
        return s_fold_expand(c, nd, &in[0], &in[1], r);
    if (!strcmp(op, "ConstantOfShape"))
        return s_fold_cos(c, nd, &in[0], r);
    if (!strcmp(op, "Range") && k == 3)
        return s_fold_range(c, nd, in, r);
    if (!strcmp(op, "Shape")) {
        int64_t d[1] = {in[0].nd};
        int rc = s_new(c, nd, 7, d, 1, r);
        for (int j = 0; !rc && j < in[0].nd; j++)
            r->v[j] = (double)in[0].d[j];
        return rc;
    }
    if (k == 1)
        return s_fold_unary(c, nd, &in[0], r);
    return KL_ONNX__NEXT;
}

/* The row handler: every input a constant (KL_ONNX__NEXT else). */
static int s_fold(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    s_ct_t in[8];
    int k = 0, rc = KL_OK;
    if (nd->n_input < 1 || nd->n_input > 8 || nd->n_output != 1)
        return KL_ONNX__NEXT;
    for (size_t i = 0; i < nd->n_input && !rc; i++) {
        if (!nd->input[i][0]) { /* an omitted optional input: the end */
            if (i == 0)
                rc = KL_ONNX__NEXT;
            break;
        }
        int g = s_get(c, nd->input[i], &in[k]);
        if (g == 1)
            rc = KL_ONNX__NEXT;
        else if (g)
            rc = g;
        else
            k++;
    }
    s_ct_t r = {0};
    if (!rc)
        rc = s_fold_one(c, nd, in, k, &r);
    for (int i = 0; i < k; i++)
        s_ct_free(&in[i]);
    if (!rc)
        s_put(c, nd->output[0], &r);
    else
        s_ct_free(&r);
    return rc;
}

/* ---- constants read by computed layers ---- */

const char *kl_onnx__operand(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                             size_t k, int *rc)
{
    const char *name = k < nd->n_input ? nd->input[k] : "";
    const kl_onnx__val_t *v = *name ? kl_onnx__val(c, name) : NULL;
    if (v)
        return v->kiln;
    s_ct_t t;
    int g = *name ? s_get(c, name, &t) : 1;
    if (g == 1)
        return kl_onnx__in(c, nd, k, rc); /* its error */
    if (g) {
        *rc = g;
        return NULL;
    }
    kl_onnx__line_t *l = kl_onnx__line_for(c, name, "", "const");
    kl_buf_puts(&l->args, "shape=");
    for (int j = 0; j < t.nd; j++)
        kl_buf_printf(&l->args, "%s%lld", j ? "x" : "", (long long)t.d[j]);
    if (t.nd == 0)
        kl_buf_puts(&l->args, "1");
    l->params = true;
    l->wn = t.n;
    l->nout = t.n;
    if (c->want) {
        l->w = kl_xmalloc((size_t)(t.n ? t.n : 1) * sizeof(float));
        for (int64_t i = 0; i < t.n; i++)
            l->w[i] = (float)t.v[i];
    }
    s_ct_free(&t);
    return l->name;
}

int kl_onnx__const_values(kl_onnx__ctx_t *c, const char *name, double **v,
                          int64_t *d, int *nd)
{
    s_ct_t t;
    int g = s_get(c, name, &t);
    if (g)
        return g;
    *v = t.v;
    *nd = t.nd;
    memcpy(d, t.d, (size_t)t.nd * sizeof(int64_t));
    return KL_OK;
}

const kl_onnx__op_t kl_onnx__fold_ops[] = {
    {"Add", s_fold, 0},
    {"Sub", s_fold, 0},
    {"Mul", s_fold, 0},
    {"Div", s_fold, 0},
    {"Mod", s_fold, 0},
    {"Pow", s_fold, 0},
    {"Max", s_fold, 0},
    {"Min", s_fold, 0},
    {"Equal", s_fold, 0},
    {"Less", s_fold, 0},
    {"Greater", s_fold, 0},
    {"LessOrEqual", s_fold, 0},
    {"GreaterOrEqual", s_fold, 0},
    {"And", s_fold, 0},
    {"Or", s_fold, 0},
    {"Xor", s_fold, 0},
    {"Not", s_fold, 0},
    {"Neg", s_fold, 0},
    {"Abs", s_fold, 0},
    {"Sqrt", s_fold, 0},
    {"Exp", s_fold, 0},
    {"Log", s_fold, 0},
    {"Reciprocal", s_fold, 0},
    {"Erf", s_fold, 0},
    {"Tanh", s_fold, 0},
    {"Sigmoid", s_fold, 0},
    {"Relu", s_fold, 0},
    {"Floor", s_fold, 0},
    {"Ceil", s_fold, 0},
    {"Where", s_fold, 0},
    {"Cast", s_fold, 0},
    {"Transpose", s_fold, 0},
    {"Trilu", s_fold, 0},
    {"Concat", s_fold, 0},
    {"Slice", s_fold, 0},
    {"Gather", s_fold, 0},
    {"Expand", s_fold, 0},
    {"ConstantOfShape", s_fold, 0},
    {"Range", s_fold, 0},
    {"Shape", s_fold, 0},
    {NULL, NULL, 0},
};
