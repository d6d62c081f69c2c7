/* kl_model_onnx_fold.c - ONNX import: constant folding's base. A node
 * whose inputs are all constants (initializers, Constant nodes, earlier
 * folds) is evaluated at import into a new constant, whatever its size
 * (the evaluators are kl_model_onnx_fold_ops.c's: the element-wise
 * arithmetic and comparisons with broadcasting, Where, Cast, Transpose,
 * Trilu, Concat, Slice, Gather, Expand, ConstantOfShape, Range, Shape of
 * a constant). That is how a causal mask (Trilu of ones, Equal, Where), a
 * weight transposed in the graph (an export without constant folding) or
 * shape arithmetic reach the layers as plain constants. Here: constants
 * read as doubles and stored back as float (ONNX type 1) or int64 (7;
 * bool and int32 results too, as 0/1 and their values), Slice's
 * arguments, and the `const` layer that a constant read by a computed
 * layer without folding into it becomes (kl_onnx__operand). */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* The most values one folded constant may have. */
#define S_MAX_FOLD ((int64_t)1 << 24)

void kl_onnx__ct_free(kl_onnx__ct_t *t)
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
int kl_onnx__ct_read(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                     const char *name, kl_onnx__ct_t *out)
{
    if (!t || t->n_dims > KL_MODEL_MAX_DIMS)
        return 1;
    int type = t->data_type;
    if (type != 1 && type != 7 && !s_isize(type))
        return 1;
    int64_t n = kl_onnx__numel(t);
    if (n < 0 || n > S_MAX_FOLD)
        return 1;
    kl_onnx__ct_t r = {.type = type == 1   ? 1
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
            kl_onnx__ct_free(&r);
            return rc;
        }
        for (int64_t i = 0; i < n; i++)
            r.v[i] = f[i];
        free(f);
    } else if (!s_ints(t, n, r.v)) {
        kl_onnx__ct_free(&r);
        return kl_onnx__terr(c, name,
                             "its data does not hold its shape's "
                             "values (truncated?)");
    }
    *out = r;
    return KL_OK;
}

int kl_onnx__ct_get(kl_onnx__ctx_t *c, const char *name, kl_onnx__ct_t *out)
{
    return kl_onnx__ct_read(c, name && *name ? kl_onnx__init(c, name) : NULL,
                            name, out);
}

/* Stores r (taken) as constant `name`. */
void kl_onnx__ct_put(kl_onnx__ctx_t *c, const char *name, kl_onnx__ct_t *r)
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
    kl_onnx__ct_free(r);
}

/* A result of shape d[nd] and type, its values still to fill. */
int kl_onnx__ct_new(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int type,
                    const int64_t *d, int rank, kl_onnx__ct_t *r)
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
    *r = (kl_onnx__ct_t){.type = type, .nd = rank, .n = n};
    memcpy(r->d, d, (size_t)rank * sizeof(int64_t));
    r->v = kl_xcalloc((size_t)(n ? n : 1), sizeof(double));
    return KL_OK;
}

int kl_onnx__ct_axis(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int64_t a,
                     int rank, int *out)
{
    *out = 0;
    if (a < -rank || a >= rank)
        return kl_onnx__fail(c, nd, "an axis outside the input's dimensions");
    *out = (int)(a < 0 ? a + rank : a);
    return KL_OK;
}

int kl_onnx__slice_args(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const int64_t *d, int rank, kl_onnx__slice_t *sl)
{
    kl_onnx__ct_t a[4] = {{0}};
    bool has[4] = {false};
    const char *what[4] = {"starts", "ends", "axes", "steps"};
    int rc = KL_OK;
    for (int i = 0; i < 4 && !rc; i++) {
        const KilnOnnx__AttributeProto *at = kl_onnx__attr(nd, what[i]);
        if (at && i < 3) { /* before opset 10 */
            a[i] =
                (kl_onnx__ct_t){.type = 7, .nd = 1, .n = (int64_t)at->n_ints};
            a[i].d[0] = a[i].n;
            a[i].v = kl_xmalloc((at->n_ints + 1) * sizeof(double));
            for (size_t j = 0; j < at->n_ints; j++)
                a[i].v[j] = (double)at->ints[j];
            has[i] = true;
        } else if ((size_t)i + 1 < nd->n_input && nd->input[i + 1][0]) {
            int g = kl_onnx__ct_get(c, nd->input[i + 1], &a[i]);
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
        if ((rc = kl_onnx__ct_axis(c, nd, has[2] ? (int64_t)a[2].v[i] : i, rank,
                                   &ax)))
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
        kl_onnx__ct_free(&a[i]);
    return rc;
}

int kl_onnx__split_sizes(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                         int64_t dim, int64_t *sz)
{
    size_t n = nd->n_output;
    if (n < 1 || n > 64)
        return kl_onnx__fail(c, nd, "1 to 64 outputs");
    const KilnOnnx__AttributeProto *sa = kl_onnx__attr(nd, "split");
    if (sa && sa->n_ints == n) {
        for (size_t i = 0; i < n; i++)
            sz[i] = sa->ints[i];
    } else if (nd->n_input > 1 && nd->input[1][0]) {
        kl_onnx__ct_t v;
        int g = kl_onnx__ct_get(c, nd->input[1], &v);
        if (g > 1)
            return g;
        bool ok = !g && v.nd == 1 && v.n == (int64_t)n;
        for (size_t i = 0; ok && i < n; i++)
            sz[i] = (int64_t)v.v[i];
        if (!g)
            kl_onnx__ct_free(&v);
        if (!ok)
            return kl_onnx__fail(c, nd,
                                 "split must be a constant of one size per "
                                 "output");
    } else { /* equal parts, the last one smaller (opset 18) */
        int64_t per = (dim + (int64_t)n - 1) / (int64_t)n;
        for (size_t i = 0; i < n; i++)
            sz[i] = i + 1 < n ? per : dim - per * (int64_t)(n - 1);
    }
    int64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (sz[i] <= 0 || at + sz[i] > dim)
            return kl_onnx__fail(c, nd,
                                 "split sizes that do not add up to the "
                                 "axis (or an empty part)");
        at += sz[i];
    }
    if (at != dim)
        return kl_onnx__fail(c, nd,
                             "split sizes that do not add up to the axis");
    return KL_OK;
}

/* ---- constants read by computed layers ---- */

const char *kl_onnx__operand(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                             size_t k, int *rc)
{
    const char *name = k < nd->n_input ? nd->input[k] : "";
    const kl_onnx__val_t *v = *name ? kl_onnx__val(c, name) : NULL;
    if (v)
        return v->kiln;
    kl_onnx__ct_t t;
    int g = *name ? kl_onnx__ct_get(c, name, &t) : 1;
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
    kl_onnx__ct_free(&t);
    return l->name;
}

int kl_onnx__const_values(kl_onnx__ctx_t *c, const char *name, double **v,
                          int64_t *d, int *nd)
{
    kl_onnx__ct_t t;
    int g = kl_onnx__ct_get(c, name, &t);
    if (g)
        return g;
    *v = t.v;
    *nd = t.nd;
    memcpy(d, t.d, (size_t)t.nd * sizeof(int64_t));
    return KL_OK;
}
