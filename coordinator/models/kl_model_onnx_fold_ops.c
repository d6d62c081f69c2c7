/* kl_model_onnx_fold_ops.c - ONNX import: the constant folder's
 * evaluators (kl_model_onnx_fold.c reads and stores the constants): a
 * node whose inputs are all constants is evaluated here in doubles, with
 * ONNX's broadcasting, into a new constant; KL_ONNX__NEXT for a node with
 * a computed input. Its rows (kl_onnx__fold_ops) come right after the
 * constants' own. */
#include "kl_model_onnx_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

static int64_t s_numel(const int64_t *d, int nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= d[i];
    return n;
}

/* ---- broadcasting ---- */

/* The broadcast shape of k tensors into d (rank *nd); false when they do
 * not broadcast. */
static bool s_bshape(const kl_onnx__ct_t *const *t, int k, int64_t *d, int *nd)
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
static int64_t s_bidx(const kl_onnx__ct_t *t, const int64_t *d, int nd,
                      int64_t o)
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
static int s_fold_ew(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                     kl_onnx__ct_t *in, int k, kl_onnx__ct_t *r)
{
    const char *op = nd->op_type;
    const kl_onnx__ct_t *p[3] = {&in[0], k > 1 ? &in[1] : &in[0],
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
    if ((rc = kl_onnx__ct_new(c, nd,
                              type == 9 && !where && !s_is_cmp(op) ? 7 : type,
                              d, rank, r)))
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
        kl_onnx__ct_free(r);
        return kl_onnx__fail(c, nd, "an integer division by zero");
    }
    return KL_OK;
}

static int s_fold_unary(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const kl_onnx__ct_t *x, kl_onnx__ct_t *r)
{
    const char *op = nd->op_type;
    int type = !strcmp(op, "Not") ? 9 : x->type == 9 ? 7 : x->type;
    if (!strcmp(op, "Sqrt") || !strcmp(op, "Exp") || !strcmp(op, "Log") ||
        !strcmp(op, "Reciprocal") || !strcmp(op, "Erf") ||
        !strcmp(op, "Tanh") || !strcmp(op, "Sigmoid"))
        type = 1;
    int rc = kl_onnx__ct_new(c, nd, type, x->d, x->nd, r);
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
                       const kl_onnx__ct_t *x, kl_onnx__ct_t *r)
{
    int64_t to = kl_onnx__aint(nd, "to", 0);
    int type = to == 1 || to == 11 ? 1 : to == 9 ? 9 : 7;
    if (to != 1 && to != 11 && to != 9 && to != 6 && to != 7)
        return KL_ONNX__NEXT;
    int rc = kl_onnx__ct_new(c, nd, type, x->d, x->nd, r);
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
                            const kl_onnx__ct_t *x, kl_onnx__ct_t *r)
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
    int rc = kl_onnx__ct_new(c, nd, x->type, d, x->nd, r);
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
                        const kl_onnx__ct_t *x, const kl_onnx__ct_t *kk,
                        kl_onnx__ct_t *r)
{
    if (x->nd < 2)
        return kl_onnx__fail(c, nd, "an input of fewer than 2 dimensions");
    int64_t k = kk && kk->n ? (int64_t)kk->v[0] : 0;
    bool upper = kl_onnx__aint(nd, "upper", 1) != 0;
    int64_t rows = x->d[x->nd - 2], cols = x->d[x->nd - 1];
    int rc = kl_onnx__ct_new(c, nd, x->type, x->d, x->nd, r);
    for (int64_t o = 0; !rc && o < r->n; o++) {
        int64_t j = o % cols, i = (o / cols) % rows;
        bool keep = upper ? j - i >= k : j - i <= k;
        r->v[o] = keep ? x->v[o] : 0;
    }
    return rc;
}

static int s_fold_concat(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                         const kl_onnx__ct_t *in, int k, kl_onnx__ct_t *r)
{
    int ax, rc = kl_onnx__ct_axis(c, nd, kl_onnx__aint(nd, "axis", 0), in[0].nd,
                                  &ax);
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
    if (rc || (rc = kl_onnx__ct_new(c, nd, in[0].type, d, in[0].nd, r)))
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

static int s_fold_slice(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const kl_onnx__ct_t *x, kl_onnx__ct_t *r)
{
    int64_t sts[KL_MODEL_MAX_DIMS];
    kl_onnx__slice_t sl;
    int rc = kl_onnx__slice_args(c, nd, x->d, x->nd, &sl);
    if (rc || (rc = kl_onnx__ct_new(c, nd, x->type, sl.len, x->nd, r)))
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
                         const kl_onnx__ct_t *x, const kl_onnx__ct_t *idx,
                         kl_onnx__ct_t *r)
{
    int ax,
        rc = kl_onnx__ct_axis(c, nd, kl_onnx__aint(nd, "axis", 0), x->nd, &ax);
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
    if ((rc = kl_onnx__ct_new(c, nd, x->type, d, rank, r)))
        return rc;
    int64_t outer = s_numel(x->d, ax),
            inner = s_numel(x->d + ax + 1, x->nd - ax - 1), dim = x->d[ax];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < idx->n; i++) {
            int64_t g = (int64_t)idx->v[i];
            g = g < 0 ? g + dim : g;
            if (g < 0 || g >= dim) {
                kl_onnx__ct_free(r);
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
                      const kl_onnx__ct_t *s, int64_t *d, int *rank)
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
                         const kl_onnx__ct_t *x, const kl_onnx__ct_t *s,
                         kl_onnx__ct_t *r)
{
    kl_onnx__ct_t shp = {.type = 7};
    int rc = s_shape_of(c, nd, s, shp.d, &shp.nd);
    const kl_onnx__ct_t *p[2] = {x, &shp};
    int64_t d[KL_MODEL_MAX_DIMS];
    int rank;
    if (rc)
        return rc;
    if (!s_bshape(p, 2, d, &rank))
        return kl_onnx__fail(c, nd,
                             "the shape does not broadcast with the "
                             "input's");
    if ((rc = kl_onnx__ct_new(c, nd, x->type, d, rank, r)))
        return rc;
    for (int64_t o = 0; o < r->n; o++)
        r->v[o] = x->v[s_bidx(x, d, rank, o)];
    return KL_OK;
}

static int s_fold_cos(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      const kl_onnx__ct_t *s, kl_onnx__ct_t *r)
{
    int64_t d[KL_MODEL_MAX_DIMS];
    int rank, rc = s_shape_of(c, nd, s, d, &rank);
    const KilnOnnx__AttributeProto *a = kl_onnx__attr(nd, "value");
    double v = 0;
    int type = 1;
    if (!rc && a && a->t) {
        kl_onnx__ct_t one;
        int g = kl_onnx__ct_read(c, a->t, "value", &one);
        if (g > 1)
            return g;
        if (g == 1 || one.n != 1) {
            if (!g)
                kl_onnx__ct_free(&one);
            return kl_onnx__fail(c, nd, "value is not one number");
        }
        v = one.v[0];
        type = one.type;
        kl_onnx__ct_free(&one);
    }
    if (rc || (rc = kl_onnx__ct_new(c, nd, type, d, rank, r)))
        return rc;
    for (int64_t i = 0; i < r->n; i++)
        r->v[i] = v;
    return KL_OK;
}

static int s_fold_range(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const kl_onnx__ct_t *in, kl_onnx__ct_t *r)
{
    if (in[0].n != 1 || in[1].n != 1 || in[2].n != 1 || in[2].v[0] == 0)
        return kl_onnx__fail(c, nd,
                             "start, limit and delta must be scalars, "
                             "delta not 0");
    double n = ceil((in[1].v[0] - in[0].v[0]) / in[2].v[0]);
    int64_t d[1] = {n > 0 ? (int64_t)n : 0};
    int rc = kl_onnx__ct_new(c, nd, in[0].type, d, 1, r);
    for (int64_t i = 0; !rc && i < d[0]; i++)
        r->v[i] = in[0].v[0] + (double)i * in[2].v[0];
    return rc;
}

/* What each folded op takes: the number of inputs (-1 any). */
static int s_fold_one(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      kl_onnx__ct_t *in, int k, kl_onnx__ct_t *r)
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
        int rc = kl_onnx__ct_new(c, nd, 7, d, 1, r);
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
    kl_onnx__ct_t in[8];
    int k = 0, rc = KL_OK;
    if (nd->n_input < 1 || nd->n_input > 8 || nd->n_output != 1)
        return KL_ONNX__NEXT;
    for (size_t i = 0; i < nd->n_input && !rc; i++) {
        if (!nd->input[i][0]) { /* an omitted optional input: the end */
            if (i == 0)
                rc = KL_ONNX__NEXT;
            break;
        }
        int g = kl_onnx__ct_get(c, nd->input[i], &in[k]);
        if (g == 1)
            rc = KL_ONNX__NEXT;
        else if (g)
            rc = g;
        else
            k++;
    }
    kl_onnx__ct_t r = {0};
    if (!rc)
        rc = s_fold_one(c, nd, in, k, &r);
    for (int i = 0; i < k; i++)
        kl_onnx__ct_free(&in[i]);
    if (!rc)
        kl_onnx__ct_put(c, nd->output[0], &r);
    else
        kl_onnx__ct_free(&r);
    return rc;
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
