/* kl_model_onnx_ew.c - ONNX import of the general element-wise and shape
 * ops on computed values, what the patterns before these rows (folds
 * into a layer, layer norm, GELU, SiLU, a packed projection) did not
 * take: Add, Sub, Mul, Div, Pow, Max, Min with broadcasting (a constant
 * operand becomes a `const` layer); Sqrt, Exp, Erf, Neg, Reciprocal;
 * Where; Concat (a chain of two-input concats); Split and Slice (one
 * `slice` per sliced axis); Gather with constant indices (a slice, a
 * gather, and a reshape where ONNX drops the axis); Expand; ReduceMean
 * and ReduceSum; Cast of an f32 value to f32. The comparisons, Not and
 * Trilu are folded on constants (kl_model_onnx_fold.c); on computed
 * values they are named as unsupported, with that reason. */
#include "kl_model_onnx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* A name of kiln's own for step k of node output out (KL_ONNX__OWN
 * first, so no ONNX value has it). Heap string. */
static char *s_own(const char *out, int k)
{
    return kl_xasprintf("%c%s_%d", KL_ONNX__OWN, out, k);
}

static const struct {
    const char *onnx, *kiln;
} s_bin[] = {
    {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"},
    {"Pow", "pow"}, {"Max", "max"}, {"Min", "min"}, {"Sum", "add"},
};

/* Binary ops (Max, Min and Sum variadic: a chain). */
static int s_binary(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    const char *op = NULL;
    for (size_t i = 0; i < sizeof(s_bin) / sizeof(s_bin[0]); i++)
        if (kl_onnx__is(nd, s_bin[i].onnx))
            op = s_bin[i].kiln;
    int rc = KL_OK;
    if (!op || nd->n_input < 1)
        return KL_ONNX__UNSUP;
    const char *acc = kl_onnx__operand(c, nd, 0, &rc);
    if (!acc)
        return rc;
    if (nd->n_input == 1) {
        kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[0]));
        return KL_OK;
    }
    for (size_t k = 1; k < nd->n_input; k++) {
        const char *b = kl_onnx__operand(c, nd, k, &rc);
        if (!b)
            return rc;
        /* acc may name a line that moves when lines are added */
        char *a = kl_xstrdup(acc);
        char *out = k + 1 < nd->n_input ? s_own(nd->output[0], (int)k) : NULL;
        kl_onnx__line_t *l =
            kl_onnx__line_for(c, out ? out : nd->output[0], nd->input[0], op);
        kl_buf_printf(&l->args, "%s %s", a, b);
        acc = l->name;
        free(a);
        free(out);
    }
    return KL_OK;
}

static int s_unary(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    static const char *const map[][2] = {
        {"Sqrt", "sqrt"},
        {"Exp", "exp"},
        {"Erf", "erf"},
        {"Neg", "neg"},
        {"Reciprocal", "reciprocal"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (kl_onnx__is(nd, map[i][0]))
            return kl_onnx__simple(c, nd, map[i][1]);
    return KL_ONNX__UNSUP;
}

static int s_where(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    if (nd->n_input != 3)
        return kl_onnx__fail(c, nd, "expects 3 inputs");
    char *in[3] = {NULL};
    for (size_t k = 0; k < 3 && !rc; k++) {
        const char *x = kl_onnx__operand(c, nd, k, &rc);
        in[k] = x ? kl_xstrdup(x) : NULL;
    }
    if (!rc) {
        kl_onnx__line_t *l = kl_onnx__line(c, nd, "where");
        kl_buf_printf(&l->args, "%s %s %s", in[0], in[1], in[2]);
    }
    for (int k = 0; k < 3; k++)
        free(in[k]);
    return rc;
}

/* The shape of the value kiln names x, or an error naming nd. */
static int s_shape(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, const char *x,
                   int64_t *d, int *n)
{
    if (kl_onnx__shape(c, x, d, n))
        return KL_OK;
    return kl_onnx__fail(c, nd, "the input's shape is not known");
}

static int s_norm_axis(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int64_t a,
                       int rank, int *out)
{
    *out = 0;
    if (a < -rank || a >= rank)
        return kl_onnx__fail(c, nd, "an axis outside the input's dimensions");
    *out = (int)(a < 0 ? a + rank : a);
    return KL_OK;
}

static int s_concat(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK, rank, ax;
    int64_t d[KL_MODEL_MAX_DIMS];
    const char *x = kl_onnx__operand(c, nd, 0, &rc);
    if (!x)
        return rc;
    char *acc = kl_xstrdup(x);
    if (!(rc = s_shape(c, nd, acc, d, &rank)))
        rc = s_norm_axis(c, nd, kl_onnx__aint(nd, "axis", 0), rank, &ax);
    if (!rc && nd->n_input == 1)
        kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[0]));
    for (size_t k = 1; !rc && k < nd->n_input; k++) {
        const char *b = kl_onnx__operand(c, nd, k, &rc);
        if (!b)
            break;
        char *out = k + 1 < nd->n_input ? s_own(nd->output[0], (int)k) : NULL;
        kl_onnx__line_t *l = kl_onnx__line_for(c, out ? out : nd->output[0],
                                               nd->input[0], "concat");
        kl_buf_printf(&l->args, "%s %s axis=%d", acc, b, ax);
        free(acc);
        acc = kl_xstrdup(l->name);
        free(out);
    }
    free(acc);
    return rc;
}

/* A slice line of x on axis ax (start, len, step), writing out. */
static const char *s_slice_line(kl_onnx__ctx_t *c, const char *out,
                                const char *in0, const char *x, int ax,
                                int64_t start, int64_t len, int64_t step)
{
    char *xs = kl_xstrdup(x);
    kl_onnx__line_t *l = kl_onnx__line_for(c, out, in0, "slice");
    kl_buf_printf(&l->args, "%s axis=%d start=%lld end=%lld", xs, ax,
                  (long long)start, (long long)(start + (len - 1) * step + 1));
    if (step != 1)
        kl_buf_printf(&l->args, " step=%lld", (long long)step);
    free(xs);
    return l->name;
}

static int s_split(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK, rank, ax;
    int64_t d[KL_MODEL_MAX_DIMS], sz[64];
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    size_t n = nd->n_output;
    if (!x)
        return rc;
    if ((rc = s_shape(c, nd, x, d, &rank)) ||
        (rc = s_norm_axis(c, nd, kl_onnx__aint(nd, "axis", 0), rank, &ax)))
        return rc;
    if ((rc = kl_onnx__split_sizes(c, nd, d[ax], sz)))
        return rc;
    char *xs = kl_xstrdup(x);
    int64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (nd->output[i][0])
            s_slice_line(c, nd->output[i], nd->input[0], xs, ax, at, sz[i], 1);
        at += sz[i];
    }
    free(xs);
    return KL_OK;
}

static int s_slice(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK, rank;
    int64_t d[KL_MODEL_MAX_DIMS];
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    kl_onnx__slice_t sl;
    if (!x)
        return rc;
    if ((rc = s_shape(c, nd, x, d, &rank)) ||
        (rc = kl_onnx__slice_args(c, nd, d, rank, &sl)))
        return rc;
    int last = -1;
    for (int j = 0; j < rank; j++) {
        if (sl.len[j] == 0)
            return kl_onnx__fail(c, nd, "an empty slice");
        if (sl.step[j] < 0)
            return kl_onnx__fail(c, nd,
                                 "a negative step (kiln slices "
                                 "computed values forward only)");
        if (sl.start[j] != 0 || sl.len[j] != d[j] || sl.step[j] != 1)
            last = j;
    }
    if (last < 0) {
        kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[0]));
        return KL_OK;
    }
    char *acc = kl_xstrdup(x);
    for (int j = 0; j <= last; j++) {
        if (sl.start[j] == 0 && sl.len[j] == d[j] && sl.step[j] == 1)
            continue;
        char *out = j < last ? s_own(nd->output[0], j) : NULL;
        const char *k =
            s_slice_line(c, out ? out : nd->output[0], nd->input[0], acc, j,
                         sl.start[j], sl.len[j], sl.step[j]);
        free(acc);
        acc = kl_xstrdup(k);
        free(out);
    }
    free(acc);
    return KL_OK;
}

/* A reshape line of x to d[n] for out. */
static void s_reshape_line(kl_onnx__ctx_t *c, const char *out, const char *in0,
                           const char *x, const int64_t *d, int n)
{
    char *xs = kl_xstrdup(x);
    kl_onnx__line_t *l = kl_onnx__line_for(c, out, in0, "reshape");
    kl_buf_printf(&l->args, "%s shape=", xs);
    for (int i = 0; i < n; i++)
        kl_buf_printf(&l->args, "%s%lld", i ? "x" : "", (long long)d[i]);
    if (n == 0)
        kl_buf_puts(&l->args, "1");
    free(xs);
}

/* Gather of a computed value by constant indices of any shape: a slice
 * for an evenly spaced run (nothing when it is the whole axis), else a
 * gather (at most 64 indices); then a reshape to ONNX's shape (the axis
 * replaced by the indices' dims) where that differs (a scalar index
 * drops the axis; PyTorch's as_strided gathers a flat run into 4-D). */
static int s_gather(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK, rank, ax, ind;
    int64_t d[KL_MODEL_MAX_DIMS], id[KL_MODEL_MAX_DIMS];
    double *v = NULL;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    if (!x)
        return rc;
    if ((rc = s_shape(c, nd, x, d, &rank)) ||
        (rc = s_norm_axis(c, nd, kl_onnx__aint(nd, "axis", 0), rank, &ax)))
        return rc;
    int g = nd->n_input == 2
                ? kl_onnx__const_values(c, nd->input[1], &v, id, &ind)
                : 1;
    if (g)
        return g > 1 ? g
                     : kl_onnx__fail(c, nd,
                                     "indices must be a constant "
                                     "(kiln gathers by constant "
                                     "indices only)");
    int64_t n = 1;
    for (int j = 0; j < ind; j++)
        n *= id[j];
    int64_t o[KL_MODEL_MAX_DIMS];
    int no = 0;
    for (int j = 0; j < ax; j++)
        o[no++] = d[j];
    for (int j = 0; j < ind && no < KL_MODEL_MAX_DIMS; j++)
        o[no++] = id[j];
    for (int j = ax + 1; j < rank && no < KL_MODEL_MAX_DIMS; j++)
        o[no++] = d[j];
    if (n < 1 || rank - 1 + ind > KL_MODEL_MAX_DIMS) {
        free(v);
        return kl_onnx__fail(c, nd, "no indices, or more than 8 dimensions");
    }
    int64_t *ix = kl_xmalloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        ix[i] = (int64_t)v[i] < 0 ? (int64_t)v[i] + d[ax] : (int64_t)v[i];
        if (ix[i] < 0 || ix[i] >= d[ax]) {
            free(v);
            free(ix);
            return kl_onnx__fail(c, nd, "an index outside the axis");
        }
    }
    free(v);
    int64_t step = n > 1 ? ix[1] - ix[0] : 1;
    bool run = step >= 1;
    for (int64_t i = 2; run && i < n; i++)
        run = ix[i] - ix[i - 1] == step;
    if (!run && n > 64) {
        free(ix);
        return kl_onnx__fail(c, nd,
                             "more than 64 indices that are not an "
                             "evenly spaced run");
    }
    /* the shape after the slice or gather, before the reshape */
    bool same = ind == 1;
    char *out = same ? kl_xstrdup(nd->output[0]) : s_own(nd->output[0], 0);
    char *xs = kl_xstrdup(x), *name;
    if (run && ix[0] == 0 && n == d[ax] && step == 1)
        name = kl_xstrdup(xs); /* the whole axis */
    else if (run)
        name = kl_xstrdup(
            s_slice_line(c, out, nd->input[0], xs, ax, ix[0], n, step));
    else {
        kl_onnx__line_t *l = kl_onnx__line_for(c, out, nd->input[0], "gather");
        kl_buf_printf(&l->args, "%s axis=%d indices=", xs, ax);
        for (int64_t i = 0; i < n; i++)
            kl_buf_printf(&l->args, "%s%lld", i ? "," : "", (long long)ix[i]);
        name = kl_xstrdup(l->name);
    }
    free(ix);
    if (!same)
        s_reshape_line(c, nd->output[0], nd->input[0], name, o, no);
    else if (!strcmp(name, xs))
        kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[0]));
    free(name);
    free(xs);
    free(out);
    return KL_OK;
}

static int s_expand(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK, rank, sn;
    int64_t d[KL_MODEL_MAX_DIMS], sd[KL_MODEL_MAX_DIMS];
    double *v = NULL;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    if (!x)
        return rc;
    if ((rc = s_shape(c, nd, x, d, &rank)))
        return rc;
    int g = nd->n_input == 2
                ? kl_onnx__const_values(c, nd->input[1], &v, sd, &sn)
                : 1;
    if (g)
        return g > 1 ? g : kl_onnx__fail(c, nd, "the shape must be a constant");
    int64_t n = sn ? sd[0] : 1;
    if (sn > 1 || n > KL_MODEL_MAX_DIMS) {
        free(v);
        return kl_onnx__fail(c, nd,
                             "the shape must be 1-D, at most 8 "
                             "values");
    }
    bool same = n <= rank;
    for (int64_t i = 0; i < n; i++)
        same &= v[i] == 1 || v[i] == (double)d[rank - n + i];
    if (same) {
        free(v);
        kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[0]));
        return KL_OK;
    }
    char *xs = kl_xstrdup(x);
    kl_onnx__line_t *l = kl_onnx__line(c, nd, "expand");
    kl_buf_printf(&l->args, "%s shape=", xs);
    for (int64_t i = 0; i < n; i++)
        kl_buf_printf(&l->args, "%s%lld", i ? "x" : "", (long long)v[i]);
    free(xs);
    free(v);
    return KL_OK;
}

/* ReduceMean and ReduceSum over any axes (an attribute, or input 1 from
 * opset 13 / 18 on; none: all of them unless noop_with_empty_axes). */
static int s_reduce(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK, rank, n;
    int64_t d[KL_MODEL_MAX_DIMS], ax[8];
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    if (!x)
        return rc;
    if ((rc = s_shape(c, nd, x, d, &rank)))
        return rc;
    if ((n = kl_onnx__axes(c, nd, ax)) < 0)
        return kl_onnx__fail(c, nd, "the axes must be a constant of at most 8");
    if (n == 0 && kl_onnx__aint(nd, "noop_with_empty_axes", 0)) {
        kl_onnx__alias(c, nd->output[0], kl_onnx__val(c, nd->input[0]));
        return KL_OK;
    }
    bool on[KL_MODEL_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int a = 0;
        if ((rc = s_norm_axis(c, nd, ax[i], rank, &a)))
            return rc;
        on[a] = true;
    }
    char *xs = kl_xstrdup(x);
    kl_onnx__line_t *l = kl_onnx__line(
        c, nd, kl_onnx__is(nd, "ReduceSum") ? "reduce_sum" : "reduce_mean");
    kl_buf_printf(&l->args, "%s axes=", xs);
    for (int j = 0, k = 0; j < rank; j++)
        if (on[j] || n == 0)
            kl_buf_printf(&l->args, "%s%d", k++ ? "," : "", j);
    kl_buf_printf(&l->args, " keepdims=%d",
                  kl_onnx__aint(nd, "keepdims", 1) ? 1 : 0);
    free(xs);
    return KL_OK;
}

/* Cast of an f32 value to f32 is the value; to another type kiln has no
 * value for. */
static int s_cast(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int rc = KL_OK;
    const char *x = kl_onnx__in(c, nd, 0, &rc);
    if (!x)
        return rc;
    const kl_onnx__val_t *v = kl_onnx__val(c, nd->input[0]);
    if (kl_onnx__aint(nd, "to", 0) == KL_ONNX__T_F32 && v->dt == KL_DT_F32) {
        kl_onnx__alias(c, nd->output[0], v);
        return KL_OK;
    }
    c->why = "a Cast of a computed value to another type than float (kiln's "
             "values between layers are f32)";
    return KL_ONNX__UNSUP;
}

/* Ops kiln evaluates on constants only. */
static int s_const_only(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    (void)nd;
    c->why = "of a computed value (kiln folds it on constants only)";
    return KL_ONNX__UNSUP;
}

const kl_onnx__op_t kl_onnx__ew_ops[] = {
    {"Add", s_binary, 0},         {"Sub", s_binary, 0},
    {"Mul", s_binary, 0},         {"Div", s_binary, 0},
    {"Pow", s_binary, 0},         {"Max", s_binary, 0},
    {"Min", s_binary, 0},         {"Sum", s_binary, 0},
    {"Sqrt", s_unary, 0},         {"Exp", s_unary, 0},
    {"Erf", s_unary, 0},          {"Neg", s_unary, 0},
    {"Reciprocal", s_unary, 0},   {"Where", s_where, 0},
    {"Concat", s_concat, 0},      {"Split", s_split, 0},
    {"Slice", s_slice, 0},        {"Gather", s_gather, 0},
    {"Expand", s_expand, 0},      {"ReduceMean", s_reduce, 0},
    {"ReduceSum", s_reduce, 0},   {"Cast", s_cast, 0},
    {"Equal", s_const_only, 0},   {"Less", s_const_only, 0},
    {"Greater", s_const_only, 0}, {"Not", s_const_only, 0},
    {"Trilu", s_const_only, 0},   {"ConstantOfShape", s_const_only, 0},
    {"Range", s_const_only, 0},   {NULL, NULL, 0},
};
