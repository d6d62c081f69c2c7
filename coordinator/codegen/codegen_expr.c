/* codegen_expr.c - linear forms, tensor reads, guards and epilogues for the
 * C code generator. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cg_act.h"
#include "cg_priv.h"
#include "kl_err.h"

/* Range of iterator it, trimmed to its extent (guards or clamps keep it
 * there wherever a read happens). */
static void s_iter_range(const cg_t *g, int it, int64_t *lo, int64_t *hi)
{
    kl_codegen__lin_range(g, &g->it[it], lo, hi);
    int64_t ext = g->w->iters[it].extent;
    if (*hi > ext - 1)
        *hi = ext - 1;
}

static bool s_needs_clamp(const cg_t *g, int it)
{
    int64_t lo, hi;
    kl_codegen__lin_range(g, &g->it[it], &lo, &hi);
    return hi >= g->w->iters[it].extent;
}

/* Numerator of dimension d: linear part in *lin, clamped iterators as text
 * in *extra (" + c * kl_mini(...)"). */
static void s_dim(cg_t *g, const kl_access_t *a, int d, bool clamp,
                  cg_lin_t *lin, kl_buf_t *extra, int lane)
{
    const kl_affine_t *af = &a->idx[d];
    memset(lin, 0, sizeof *lin);
    lin->c = af->offset;
    for (int it = 0; it < g->w->niters; it++) {
        if (!af->coef[it])
            continue;
        if (clamp && s_needs_clamp(g, it)) {
            kl_buf_printf(extra, " + %lld * kl_mini(", (long long)af->coef[it]);
            kl_codegen__lin_print(g, &g->it[it], lane, extra);
            kl_buf_printf(extra, ", %lld)",
                          (long long)g->w->iters[it].extent - 1);
        } else {
            kl_codegen__lin_add(lin, &g->it[it], af->coef[it]);
        }
    }
}

static void s_dim_range(cg_t *g, const kl_access_t *a, int d, int64_t *lo,
                        int64_t *hi)
{
    const kl_affine_t *af = &a->idx[d];
    *lo = *hi = af->offset;
    for (int it = 0; it < g->w->niters; it++) {
        int64_t c = af->coef[it], ilo, ihi;
        if (!c)
            continue;
        s_iter_range(g, it, &ilo, &ihi);
        *lo += c > 0 ? c * ilo : c * ihi;
        *hi += c > 0 ? c * ihi : c * ilo;
    }
}

bool kl_codegen__access_lin(cg_t *g, const kl_access_t *a, bool clamp,
                            cg_lin_t *out)
{
    const kl_tensor_t *t = &g->w->tensors[a->tensor];
    memset(out, 0, sizeof *out);
    int64_t stride = 1;
    bool ok = true;
    for (int d = t->ndim - 1; d >= 0; d--) {
        cg_lin_t lin;
        kl_buf_t extra = {0};
        s_dim(g, a, d, clamp, &lin, &extra, 0);
        if (extra.len || a->idx[d].div != 1)
            ok = false;
        kl_buf_free(&extra);
        kl_codegen__lin_add(out, &lin, stride);
        stride *= t->shape[d];
    }
    return ok;
}

void kl_codegen__access_index(cg_t *g, const kl_access_t *a, int lane,
                              bool clamp, kl_buf_t *out)
{
    const kl_tensor_t *t = &g->w->tensors[a->tensor];
    cg_lin_t flat;
    memset(&flat, 0, sizeof flat);
    kl_buf_t extra = {0};
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        cg_lin_t lin;
        kl_buf_t ex = {0};
        s_dim(g, a, d, clamp, &lin, &ex, lane);
        if (a->idx[d].div != 1) {
            kl_buf_printf(&extra, " + %lld * ((", (long long)stride);
            kl_codegen__lin_print(g, &lin, lane, &extra);
            kl_buf_printf(&extra, "%s) / %lld)", ex.data ? ex.data : "",
                          (long long)a->idx[d].div);
        } else {
            kl_codegen__lin_add(&flat, &lin, stride);
            if (ex.len)
                kl_buf_printf(&extra, " + %lld * (0%s)", (long long)stride,
                              ex.data);
        }
        kl_buf_free(&ex);
        stride *= t->shape[d];
    }
    kl_codegen__lin_print(g, &flat, lane, out);
    if (extra.len)
        kl_buf_puts(out, extra.data);
    kl_buf_free(&extra);
}

void kl_codegen__access_check(cg_t *g, const kl_access_t *a, int lane,
                              bool clamp, kl_buf_t *out)
{
    const kl_tensor_t *t = &g->w->tensors[a->tensor];
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t lo, hi, div = a->idx[d].div;
        s_dim_range(g, a, d, &lo, &hi);
        if (div == 1 && lo >= 0 && hi <= t->shape[d] - 1)
            continue;
        cg_lin_t lin;
        kl_buf_t ex = {0}, num = {0};
        s_dim(g, a, d, clamp, &lin, &ex, lane);
        kl_codegen__lin_print(g, &lin, lane, &num);
        if (ex.len)
            kl_buf_puts(&num, ex.data);
        if (n++)
            kl_buf_puts(out, " && ");
        if (div == 1)
            kl_buf_printf(out, "(uint64_t)(%s) < %lldu", num.data,
                          (long long)t->shape[d]);
        else
            kl_buf_printf(out,
                          "(%s) %% %lld == 0 && (uint64_t)((%s) / %lld) < "
                          "%lldu",
                          num.data, (long long)div, num.data, (long long)div,
                          (long long)t->shape[d]);
        kl_buf_free(&ex);
        kl_buf_free(&num);
    }
}

static bool s_packed(const cg_t *g, int t)
{
    return g->pack_pos[t] != -2;
}

/* One read as a scalar at a lane (lane -1: not lane-dependent). */
static void s_load_scalar(cg_t *g, const kl_access_t *a, int lane,
                          kl_buf_t *out)
{
    const char *name = g->w->tensors[a->tensor].name;
    if (s_packed(g, a->tensor)) {
        cg_lin_t l;
        kl_codegen__pack_lin(g, a, &l);
        kl_buf_printf(out, "pk_%s[", name);
        kl_codegen__lin_print(g, &l, lane, out);
        kl_buf_puts(out, "]");
        return;
    }
    kl_buf_t chk = {0}, idx = {0};
    kl_codegen__access_check(g, a, lane, g->in_acc, &chk);
    kl_codegen__access_index(g, a, lane, g->in_acc, &idx);
    if (chk.len)
        kl_buf_printf(out, "(%s ? %s[%s] : 0.0f)", chk.data, name, idx.data);
    else
        kl_buf_printf(out, "%s[%s]", name, idx.data);
    kl_buf_free(&chk);
    kl_buf_free(&idx);
}

/* Whether the read depends on the lane; *contig when it is one vector
 * load (coefficient 1, no lane-dependent test). */
static bool s_load_shape(cg_t *g, const kl_access_t *a, bool *contig,
                         bool *edge)
{
    cg_lin_t l;
    *contig = false;
    if (edge)
        *edge = false;
    if (s_packed(g, a->tensor)) {
        kl_codegen__pack_lin(g, a, &l);
        int64_t vc = kl_codegen__lin_vcoef(g, &l);
        *contig = vc == 1;
        return vc != 0;
    }
    bool lin = kl_codegen__access_lin(g, a, g->in_acc, &l);
    int64_t vc = kl_codegen__lin_vcoef(g, &l);
    if (!vc)
        return false;
    if (!lin || vc != 1)
        return true;
    /* A bounds test on a dimension that moves with the lane (padding
     * along the vector) is tested at the first and the last lane: the
     * index grows with the lane, so when both are inside every lane is,
     * and the whole vector loads at once; only vectors that straddle the
     * border are gathered lane by lane (see s_expr). Tests that do not
     * move with the lane stay scalar. */
    const kl_tensor_t *t = &g->w->tensors[a->tensor];
    for (int d = 0; d < t->ndim; d++) {
        cg_lin_t dl;
        kl_buf_t ex = {0};
        s_dim(g, a, d, false, &dl, &ex, 0);
        kl_buf_free(&ex);
        int64_t vc = kl_codegen__lin_vcoef(g, &dl);
        if (!vc)
            continue;
        int64_t lo, hi;
        s_dim_range(g, a, d, &lo, &hi);
        if (lo < 0 || hi > t->shape[d] - 1) {
            if (vc < 0 || a->idx[d].div != 1)
                return true;
            if (edge)
                *edge = true;
        }
    }
    *contig = true;
    return true;
}

static bool s_expr_vec_ok(cg_t *g, const kl_expr_t *e, bool *any_check)
{
    if (!e)
        return true;
    if (e->kind == KL_EX_LOAD) {
        bool contig;
        bool dep = s_load_shape(g, &e->access, &contig, NULL);
        if (!s_packed(g, e->access.tensor)) {
            kl_buf_t chk = {0};
            kl_codegen__access_check(g, &e->access, 0, g->in_acc, &chk);
            if (chk.len)
                *any_check = true;
            kl_buf_free(&chk);
        }
        return !dep || contig;
    }
    return s_expr_vec_ok(g, e->a, any_check) &&
           s_expr_vec_ok(g, e->b, any_check);
}

bool kl_codegen__body_vectorizable(cg_t *g)
{
    if (g->lanes <= 1)
        return false;
    bool any_check = false;
    bool ok = s_expr_vec_ok(g, g->w->body, &any_check);
    if (g->w->reduce == KL_RED_MAX && any_check)
        return false;
    return ok;
}

static const char *s_binop(kl_expr_kind k)
{
    switch (k) {
    case KL_EX_ADD:
        return " + ";
    case KL_EX_SUB:
        return " - ";
    case KL_EX_MUL:
        return " * ";
    case KL_EX_DIV:
        return " / ";
    default:
        return NULL;
    }
}

/* A read of the body at lane (lane < 0: the whole vector, when it is
 * one); true when the text is a vector. */
static bool s_load(cg_t *g, const kl_access_t *a, int lane, kl_buf_t *out)
{
    if (lane >= 0) {
        s_load_scalar(g, a, lane, out);
        return false;
    }
    bool contig, edge;
    if (!s_load_shape(g, a, &contig, &edge)) {
        s_load_scalar(g, a, 0, out);
        return false;
    }
    const char *name = g->w->tensors[a->tensor].name;
    kl_buf_t idx = {0}, chk = {0};
    if (s_packed(g, a->tensor)) {
        cg_lin_t l;
        kl_codegen__pack_lin(g, a, &l);
        kl_codegen__lin_print(g, &l, 0, &idx);
        kl_buf_printf(out, "kl_ld%d(&pk_%s[%s])", g->lanes, name, idx.data);
    } else if (edge) {
        kl_buf_t last = {0};
        kl_codegen__access_index(g, a, 0, g->in_acc, &idx);
        kl_codegen__access_check(g, a, 0, g->in_acc, &chk);
        kl_codegen__access_check(g, a, g->lanes - 1, g->in_acc, &last);
        kl_buf_printf(out, "((%s && %s) ? kl_ld%d(&%s[%s]) : (kl_v%d){",
                      chk.data, last.data, g->lanes, name, idx.data, g->lanes);
        for (int l = 0; l < g->lanes; l++) {
            kl_buf_puts(out, l ? ", " : "");
            s_load_scalar(g, a, l, out);
        }
        kl_buf_puts(out, "})");
        kl_buf_free(&last);
    } else {
        kl_codegen__access_index(g, a, 0, g->in_acc, &idx);
        kl_codegen__access_check(g, a, 0, g->in_acc, &chk);
        if (chk.len)
            kl_buf_printf(out, "(%s ? kl_ld%d(&%s[%s]) : kl_bc%d(0.0f))",
                          chk.data, g->lanes, name, idx.data, g->lanes);
        else
            kl_buf_printf(out, "kl_ld%d(&%s[%s])", g->lanes, name, idx.data);
    }
    kl_buf_free(&idx);
    kl_buf_free(&chk);
    return true;
}

/* Emits e; returns whether the text is a vector. lane >= 0: scalar at that
 * lane; lane < 0: vector mode. */
static bool s_expr(cg_t *g, const kl_expr_t *e, int lane, kl_buf_t *out)
{
    switch (e->kind) {
    case KL_EX_CONST:
        kl_buf_printf(out, "((float)%.17g)", e->value);
        return false;
    case KL_EX_LOAD:
        return s_load(g, &e->access, lane, out);
    case KL_EX_NEG: {
        kl_buf_puts(out, "(-");
        bool v = s_expr(g, e->a, lane, out);
        kl_buf_puts(out, ")");
        return v;
    }
    default:
        break;
    }
    kl_buf_t a = {0}, b = {0};
    bool va = s_expr(g, e->a, lane, &a), vb = s_expr(g, e->b, lane, &b);
    const char *op = s_binop(e->kind);
    if (op) {
        kl_buf_printf(out, "(%s%s%s)", a.data, op, b.data);
    } else {
        const char *fn = e->kind == KL_EX_MAX ? "max" : "min";
        if (va || vb) {
            kl_buf_printf(out, "kl_%s%d(", fn, g->lanes);
            if (va)
                kl_buf_puts(out, a.data);
            else
                kl_buf_printf(out, "kl_bc%d(%s)", g->lanes, a.data);
            kl_buf_puts(out, ", ");
            if (vb)
                kl_buf_puts(out, b.data);
            else
                kl_buf_printf(out, "kl_bc%d(%s)", g->lanes, b.data);
            kl_buf_puts(out, ")");
        } else {
            kl_buf_printf(out, "kl_%sf(%s, %s)", fn, a.data, b.data);
        }
    }
    kl_buf_free(&a);
    kl_buf_free(&b);
    return va || vb;
}

static void s_checks(cg_t *g, const kl_expr_t *e, int lane, kl_buf_t *out)
{
    if (!e)
        return;
    if (e->kind == KL_EX_LOAD && !s_packed(g, e->access.tensor)) {
        kl_buf_t c = {0};
        kl_codegen__access_check(g, &e->access, lane, g->in_acc, &c);
        if (c.len)
            kl_buf_printf(out, "%s%s", out->len ? " && " : "", c.data);
        kl_buf_free(&c);
    }
    s_checks(g, e->a, lane, out);
    s_checks(g, e->b, lane, out);
}

void kl_codegen__body_lane(cg_t *g, int lane, kl_buf_t *out)
{
    kl_buf_t v = {0};
    s_expr(g, g->w->body, lane, &v);
    if (g->w->reduce == KL_RED_MAX) {
        kl_buf_t c = {0};
        s_checks(g, g->w->body, lane, &c);
        if (c.len)
            kl_buf_printf(out, "((%s) ? %s : -INFINITY)", c.data, v.data);
        else
            kl_buf_puts(out, v.data);
        kl_buf_free(&c);
    } else {
        kl_buf_puts(out, v.data);
    }
    kl_buf_free(&v);
}

void kl_codegen__body_value(cg_t *g, bool vec, kl_buf_t *out)
{
    if (!vec) {
        kl_codegen__body_lane(g, 0, out);
        return;
    }
    if (kl_codegen__body_vectorizable(g)) {
        kl_buf_t v = {0};
        bool isv = s_expr(g, g->w->body, -1, &v);
        if (isv)
            kl_buf_puts(out, v.data);
        else
            kl_buf_printf(out, "kl_bc%d(%s)", g->lanes, v.data);
        kl_buf_free(&v);
        return;
    }
    kl_buf_printf(out, "((kl_v%d){", g->lanes);
    for (int e = 0; e < g->lanes; e++) {
        kl_buf_puts(out, e ? ", " : "");
        kl_codegen__body_lane(g, e, out);
    }
    kl_buf_puts(out, "})");
}

void kl_codegen__guards(cg_t *g, bool spatial, bool reduce, kl_buf_t *out)
{
    for (int i = 0; i < kl_sched_nguards(g->s); i++) {
        const kl_guard_t *gd = kl_sched_guard(g->s, i);
        bool red = g->w->iters[gd->iter].reduce;
        if ((red && !reduce) || (!red && !spatial))
            continue;
        cg_lin_t l;
        memset(&l, 0, sizeof l);
        for (int k = 0; k < gd->nterms; k++) {
            int pos = kl_sched_loop_pos(g->s, gd->terms[k].loop);
            l.k[g->symbase[pos] + gd->terms[k].part] += gd->terms[k].coef;
        }
        int64_t lo, hi;
        kl_codegen__lin_range(g, &l, &lo, &hi);
        if (hi < gd->bound)
            continue;
        if (out->len)
            kl_buf_puts(out, " && ");
        kl_codegen__lin_print(g, &l, 0, out);
        kl_buf_printf(out, " < %lld", (long long)gd->bound);
    }
}

void kl_codegen__epilogue(cg_t *g, const char *var, int lane)
{
    for (int i = 0; i < g->w->nepi; i++) {
        kl_buf_t idx = {0};
        const kl_epilogue_t *ep = &g->w->epi[i];
        if (ep->kind == KL_EPI_ADD_TENSOR || ep->kind == KL_EPI_MUL_TENSOR)
            kl_codegen__access_index(g, &ep->access, lane, false, &idx);
        kl_codegen__epilogue_op(g, g->w, ep, var, idx.data);
        kl_buf_free(&idx);
    }
}

/* The vector (lanes > 1) value of epilogue tensor access a at the
 * current point: a broadcast when the vector symbol does not move it, a
 * vector load when it walks it contiguously, else its lanes gathered. */
static void s_epi_vec_load(cg_t *g, const kl_access_t *a, kl_buf_t *out)
{
    const char *tn = g->w->tensors[a->tensor].name;
    cg_lin_t l;
    kl_buf_t idx = {0};
    int64_t vc = kl_codegen__access_lin(g, a, false, &l)
                     ? kl_codegen__lin_vcoef(g, &l)
                     : -1;
    if (vc == 0 || vc == 1) {
        kl_codegen__access_index(g, a, 0, false, &idx);
        if (vc == 0)
            kl_buf_printf(out, "kl_bc%d(%s[%s])", g->lanes, tn, idx.data);
        else
            kl_buf_printf(out, "kl_ld%d(&%s[%s])", g->lanes, tn, idx.data);
        kl_buf_free(&idx);
        return;
    }
    kl_buf_printf(out, "(kl_v%d){", g->lanes);
    for (int e = 0; e < g->lanes; e++) {
        kl_codegen__access_index(g, a, e, false, &idx);
        kl_buf_printf(out, "%s%s[%s]", e ? ", " : "", tn, idx.data);
        kl_buf_free(&idx);
        idx = (kl_buf_t){0};
    }
    kl_buf_puts(out, "}");
}

void kl_codegen__epilogue_vec_op(cg_t *g, const kl_epilogue_t *ep,
                                 const char *var, int L, const char *tv)
{
    kl_buf_t e = {0};
    switch (ep->kind) {
    case KL_EPI_ADD_TENSOR:
    case KL_EPI_MUL_TENSOR:
        kl_codegen__c_line(g, "%s = %s %c %s;", var, var,
                           ep->kind == KL_EPI_ADD_TENSOR ? '+' : '*', tv);
        break;
    case KL_EPI_ADD_CONST:
    case KL_EPI_MUL_CONST:
        kl_codegen__c_line(g, "%s = %s %c kl_bc%d((float)%.17g);", var, var,
                           ep->kind == KL_EPI_ADD_CONST ? '+' : '*', L, ep->lo);
        break;
    case KL_EPI_RELU:
        kl_codegen__c_line(g, "%s = kl_max%d(%s, kl_bc%d(0.0f));", var, L, var,
                           L);
        break;
    case KL_EPI_CLIP:
        kl_codegen__c_line(g,
                           "%s = kl_min%d(kl_max%d(%s, kl_bc%d((float)%.17g)),"
                           " kl_bc%d((float)%.17g));",
                           var, L, L, var, L, ep->lo, L, ep->hi);
        break;
    case KL_EPI_ACT:
        kl_codegen__act_vec(&e, ep, L, var);
        kl_codegen__c_line(g, "%s = %s;", var, e.data);
        break;
    }
    kl_buf_free(&e);
}

void kl_codegen__epilogue_vec(cg_t *g, const char *var)
{
    for (int i = 0; i < g->w->nepi; i++) {
        const kl_epilogue_t *ep = &g->w->epi[i];
        kl_buf_t t = {0};
        if (ep->kind == KL_EPI_ADD_TENSOR || ep->kind == KL_EPI_MUL_TENSOR)
            s_epi_vec_load(g, &ep->access, &t);
        kl_codegen__epilogue_vec_op(g, ep, var, g->lanes, t.data);
        kl_buf_free(&t);
    }
}

void kl_codegen__epilogue_op(cg_t *g, const kl_workload_t *w,
                             const kl_epilogue_t *ep, const char *var,
                             const char *idx)
{
    switch (ep->kind) {
    case KL_EPI_ADD_TENSOR:
    case KL_EPI_MUL_TENSOR:
        kl_codegen__c_line(g, "%s = %s %c %s[%s];", var, var,
                           ep->kind == KL_EPI_ADD_TENSOR ? '+' : '*',
                           w->tensors[ep->access.tensor].name, idx);
        break;
    case KL_EPI_ADD_CONST:
        kl_codegen__c_line(g, "%s = %s + (float)%.17g;", var, var, ep->lo);
        break;
    case KL_EPI_MUL_CONST:
        kl_codegen__c_line(g, "%s = %s * (float)%.17g;", var, var, ep->lo);
        break;
    case KL_EPI_RELU:
        kl_codegen__c_line(g, "%s = %s > 0.0f ? %s : 0.0f;", var, var, var);
        break;
    case KL_EPI_CLIP:
        kl_codegen__c_line(
            g, "%s = kl_minf(kl_maxf(%s, (float)%.17g), (float)%.17g);", var,
            var, ep->lo, ep->hi);
        break;
    case KL_EPI_ACT: {
        kl_buf_t e = {0};
        kl_codegen__act_c(&e, ep, var);
        kl_codegen__c_line(g, "%s = %s;", var, e.data);
        kl_buf_free(&e);
        break;
    }
    }
}
