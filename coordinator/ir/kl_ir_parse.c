/* kl_ir_parse.c - recursive-descent parser of the expression language
 * (grammar in kl_ir.h) and the checks that need the whole statement. Every
 * error names the 1-based column of the offending token and what was
 * expected there. The lexer and index parser are in kl_ir_lex.c. */
#include "kl_ir_lex.h"

#include "kl_err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- accesses and expressions ------------------------------------------ */

static int s_tensor(kl_ir__parser_t *p, const char *name, size_t col, int ndim)
{
    for (int t = 0; t < p->ntens; t++) {
        if (strcmp(p->tens[t].name, name) != 0)
            continue;
        if (t == 0)
            return kl_ir__fail(
                p, col, "tensor %s is the output and cannot be read", name);
        if (p->tens[t].ndim != ndim)
            return kl_ir__fail(p, col,
                               "tensor %s used with %d and %d dimensions", name,
                               p->tens[t].ndim, ndim);
        return t;
    }
    if (p->ntens == KL_IR_MAX_TENSORS)
        return kl_ir__fail(p, col, "more than %d tensors", KL_IR_MAX_TENSORS);
    kl_tensor_t *t = &p->tens[p->ntens];
    memset(t, 0, sizeof(*t));
    strcpy(t->name, name);
    t->ndim = ndim;
    p->tcol[p->ntens] = col;
    return p->ntens++;
}

static void s_add_use(kl_ir__parser_t *p, kl_access_t *acc, size_t col)
{
    if (p->nuses == p->capuses) {
        p->capuses = p->capuses ? 2 * p->capuses : 16;
        p->uses = kl_xrealloc(p->uses, (size_t)p->capuses * sizeof(*p->uses));
    }
    p->uses[p->nuses].acc = acc;
    p->uses[p->nuses++].col = col;
}

/* access := NAME '[' index { ',' index } ']'; tensor numbers are resolved
 * (the output, first seen, is 0) and the access is recorded for checks.
 * cols (optional) receives the column of each index. */
static int s_access(kl_ir__parser_t *p, kl_access_t *acc, size_t *cols)
{
    char name[KL_IR_MAX_NAME];
    size_t col = p->col;
    if (kl_ir__ident(p, name, "a tensor name"))
        return p->rc;
    if (p->tok != '[')
        return kl_ir__expect(p, '[', "'[' after the tensor name");
    kl_ir__next(p);
    int nd = 0;
    memset(acc, 0, sizeof(*acc));
    for (;;) {
        if (nd == KL_IR_MAX_DIMS)
            return kl_ir__fail(p, p->col, "more than %d dimensions",
                               KL_IR_MAX_DIMS);
        if (cols)
            cols[nd] = p->col;
        if (kl_ir__index(p, &acc->idx[nd++]))
            return p->rc;
        if (p->tok == ']')
            break;
        if (p->tok != ',')
            return kl_ir__fail(p, p->col, "expected ']' after index list");
        kl_ir__next(p);
    }
    kl_ir__next(p);
    int t = s_tensor(p, name, col, nd);
    if (p->rc)
        return p->rc;
    acc->tensor = t;
    s_add_use(p, acc, col);
    return 0;
}

static kl_expr_t *s_expr(kl_ir__parser_t *p, int depth);

static kl_expr_t *s_bin(kl_expr_kind kind, kl_expr_t *a, kl_expr_t *b)
{
    kl_expr_t *e = kl_ir__expr_new(kind);
    e->a = a;
    e->b = b;
    return e;
}

static kl_expr_t *s_func(kl_ir__parser_t *p, int depth)
{
    kl_expr_kind kind = kl_ir__ident_is(p, "max") ? KL_EX_MAX : KL_EX_MIN;
    kl_ir__next(p);
    kl_ir__next(p); /* '(' */
    kl_expr_t *a = s_expr(p, depth + 1);
    if (!a || kl_ir__expect(p, ',', "',' between the two operands")) {
        kl_ir__expr_free(a);
        return NULL;
    }
    kl_expr_t *b = s_expr(p, depth + 1);
    if (!b || kl_ir__expect(p, ')', "')' after the second operand")) {
        kl_ir__expr_free(a);
        kl_ir__expr_free(b);
        return NULL;
    }
    return s_bin(kind, a, b);
}

static kl_expr_t *s_factor(kl_ir__parser_t *p, int depth)
{
    char d[48];
    if (depth > 200) {
        kl_ir__fail(p, p->col, "expression nested too deeply");
        return NULL;
    }
    if (p->tok == T_NUM) {
        if (!isfinite(p->num)) {
            kl_ir__fail(p, p->col, "number %s is out of range",
                        kl_ir__desc(p, d));
            return NULL;
        }
        kl_expr_t *e = kl_ir__expr_new(KL_EX_CONST);
        e->value = p->num;
        if (!p->frac_col && p->num != floor(p->num))
            p->frac_col = p->col;
        kl_ir__next(p);
        return e;
    }
    if (p->tok == '-') {
        kl_ir__next(p);
        kl_expr_t *a = s_factor(p, depth + 1);
        return a ? s_bin(KL_EX_NEG, a, NULL) : NULL;
    }
    if (p->tok == '(') {
        kl_ir__next(p);
        kl_expr_t *e = s_expr(p, depth + 1);
        if (e && kl_ir__expect(p, ')', "')'")) {
            kl_ir__expr_free(e);
            return NULL;
        }
        return e;
    }
    if ((kl_ir__ident_is(p, "max") || kl_ir__ident_is(p, "min")) &&
        kl_ir__peek(p) == '(')
        return s_func(p, depth);
    if (p->tok == T_IDENT && !kl_ir__ident_is(p, "where")) {
        kl_expr_t *e = kl_ir__expr_new(KL_EX_LOAD);
        if (s_access(p, &e->access, NULL)) {
            free(e);
            return NULL;
        }
        return e;
    }
    kl_ir__fail(p, p->col, "expected a number, a tensor access or '(', got %s",
                kl_ir__desc(p, d));
    return NULL;
}

static kl_expr_t *s_term(kl_ir__parser_t *p, int depth)
{
    kl_expr_t *e = s_factor(p, depth);
    while (e && (p->tok == '*' || p->tok == '/')) {
        kl_expr_kind k = p->tok == '*' ? KL_EX_MUL : KL_EX_DIV;
        if (k == KL_EX_DIV && !p->div_col)
            p->div_col = p->col;
        kl_ir__next(p);
        kl_expr_t *b = s_factor(p, depth);
        if (!b) {
            kl_ir__expr_free(e);
            return NULL;
        }
        e = s_bin(k, e, b);
    }
    return e;
}

static kl_expr_t *s_expr(kl_ir__parser_t *p, int depth)
{
    kl_expr_t *e = s_term(p, depth);
    while (e && (p->tok == '+' || p->tok == '-')) {
        kl_expr_kind k = p->tok == '+' ? KL_EX_ADD : KL_EX_SUB;
        kl_ir__next(p);
        kl_expr_t *b = s_term(p, depth);
        if (!b) {
            kl_ir__expr_free(e);
            return NULL;
        }
        e = s_bin(k, e, b);
    }
    return e;
}

/* ---- statement ---------------------------------------------------------- */

/* The output access: each index a single iterator, each iterator once. */
static int s_output(kl_ir__parser_t *p)
{
    size_t cols[KL_IR_MAX_DIMS];
    kl_access_t *acc = &p->w->out;
    if (s_access(p, acc, cols))
        return p->rc;
    for (int d = 0; d < p->tens[0].ndim; d++) {
        const kl_affine_t *a = &acc->idx[d];
        int k = -1, n = 0;
        for (int j = 0; j < KL_IR_MAX_ITERS; j++) {
            if (a->coef[j]) {
                n++;
                k = j;
            }
        }
        if (n != 1 || a->coef[k] != 1 || a->offset != 0 || a->div != 1)
            return kl_ir__fail(
                p, cols[d], "output index %d must be a single iterator", d + 1);
        if (p->slot_out[k])
            return kl_ir__fail(p, cols[d],
                               "iterator %s appears twice in the output",
                               p->slot[k]);
        p->slot_out[k] = true;
    }
    return 0;
}

static int s_assign(kl_ir__parser_t *p)
{
    char d[48];
    if (p->tok == T_PLUSEQ) {
        p->w->reduce = KL_RED_SUM;
    } else if (p->tok == '=') {
        p->w->reduce = KL_RED_NONE;
    } else if (kl_ir__ident_is(p, "max") && p->src[p->pos] == '=') {
        p->w->reduce = KL_RED_MAX;
        kl_ir__next(p);
    } else {
        return kl_ir__fail(
            p, p->col, "expected '=', '+=' or 'max=' after the output, got %s",
            kl_ir__desc(p, d));
    }
    kl_ir__next(p);
    return 0;
}

/* An activation (kl_act) at the current identifier into ep: true when
 * the identifier names one (p->rc then says whether its bounds parsed). */
static bool s_epi_act(kl_ir__parser_t *p, kl_epilogue_t *ep)
{
    kl_act a = KL_ACT_SIGMOID;
    bool hit = false;
    for (int i = 0; i < KL_ACT_COUNT && !hit; i++)
        if (kl_ir__ident_is(p, kl_act_name((kl_act)i))) {
            a = (kl_act)i;
            hit = true;
        }
    if (!hit)
        return false;
    ep->kind = KL_EPI_ACT;
    ep->act = a;
    kl_ir__next(p);
    if (a != KL_ACT_HARD_SIGMOID)
        return true;
    ep->lo = KL_ACT_HSIG_ALPHA;
    ep->hi = KL_ACT_HSIG_BETA;
    if (p->tok == '(') /* a failure stays in p->rc */
        (void)(kl_ir__expect(p, '(', "'(' after hard_sigmoid") ||
               kl_ir__signed_num(p, &ep->lo) ||
               kl_ir__expect(p, ',',
                             "',' between hard_sigmoid's alpha and beta") ||
               kl_ir__signed_num(p, &ep->hi) ||
               kl_ir__expect(p, ')', "')' after hard_sigmoid's beta"));
    return true;
}

static int s_epilogue(kl_ir__parser_t *p)
{
    char d[48];
    kl_workload_t *w = p->w;
    if (w->nepi == KL_IR_MAX_EPILOGUE)
        return kl_ir__fail(p, p->col, "more than %d epilogue operations",
                           KL_IR_MAX_EPILOGUE);
    kl_epilogue_t *ep = &w->epi[w->nepi];
    memset(ep, 0, sizeof(*ep));
    p->epi_col[w->nepi] = p->col;
    if (p->tok == '+' || p->tok == '*') {
        bool add = p->tok == '+';
        kl_ir__next(p);
        if (p->tok == T_NUM || p->tok == '-') {
            ep->kind = add ? KL_EPI_ADD_CONST : KL_EPI_MUL_CONST;
            if (kl_ir__signed_num(p, &ep->lo))
                return p->rc;
        } else if (p->tok == T_IDENT) {
            ep->kind = add ? KL_EPI_ADD_TENSOR : KL_EPI_MUL_TENSOR;
            p->in_epilogue = true;
            int rc = s_access(p, &ep->access, NULL);
            p->in_epilogue = false;
            if (rc)
                return rc;
        } else {
            return kl_ir__fail(
                p, p->col,
                "expected a number or a tensor access after '%c', "
                "got %s",
                add ? '+' : '*', kl_ir__desc(p, d));
        }
    } else if (kl_ir__ident_is(p, "relu")) {
        ep->kind = KL_EPI_RELU;
        kl_ir__next(p);
    } else if (kl_ir__ident_is(p, "clip")) {
        ep->kind = KL_EPI_CLIP;
        kl_ir__next(p);
        size_t col = p->col;
        if (kl_ir__expect(p, '(', "'(' after clip") ||
            kl_ir__signed_num(p, &ep->lo) ||
            kl_ir__expect(p, ',', "',' between the clip bounds") ||
            kl_ir__signed_num(p, &ep->hi) ||
            kl_ir__expect(p, ')', "')' after the clip bounds"))
            return p->rc;
        if (ep->lo > ep->hi)
            return kl_ir__fail(p, col, "clip bounds are reversed");
    } else if (p->tok == T_IDENT && s_epi_act(p, ep)) {
        if (p->rc)
            return p->rc;
    } else if (kl_ir__ident_is(p, "requant")) {
        kl_ir__next(p);
        if (kl_ir__expect(p, '(', "'(' after requant"))
            return p->rc;
        size_t col = p->col;
        if (p->tok == T_IDENT) {
            ep->kind = KL_EPI_REQUANT_TENSOR;
            p->in_epilogue = true;
            int rc = s_access(p, &ep->access, NULL);
            p->in_epilogue = false;
            if (rc)
                return rc;
        } else {
            ep->kind = KL_EPI_REQUANT;
            if (kl_ir__signed_num(p, &ep->lo))
                return p->rc;
            float f = (float)ep->lo;
            if (!(ep->lo > 0) || !isfinite(f) || f == 0.0f)
                return kl_ir__fail(p, col,
                                   "requant scale must be a positive f32 "
                                   "number");
            ep->lo = f; /* the f32 value: canonical text prints it */
        }
        if (kl_ir__expect(p, ',',
                          "',' between the requant scale and zero "
                          "point"))
            return p->rc;
        col = p->col;
        double zp;
        if (kl_ir__signed_num(p, &zp))
            return p->rc;
        if (zp != floor(zp) || zp < -2147483648.0 || zp > 2147483647.0)
            return kl_ir__fail(p, col,
                               "requant zero point must be an int32 integer");
        ep->zp = (int64_t)zp;
        if (kl_ir__expect(p, ')', "')' after the requant zero point"))
            return p->rc;
    } else {
        return kl_ir__fail(p, p->col,
                           "expected '+', '*', 'relu', 'clip(lo, hi)', "
                           "an activation (%s) or 'requant(scale, zp)' "
                           "after '|', got %s",
                           kl_act_list(), kl_ir__desc(p, d));
    }
    w->nepi++;
    return 0;
}

static int s_where(kl_ir__parser_t *p)
{
    char d[48];
    if (!kl_ir__ident_is(p, "where"))
        return kl_ir__fail(p, p->col,
                           "expected 'where' after the expression, got %s",
                           kl_ir__desc(p, d));
    kl_ir__next(p);
    for (;;) {
        char name[KL_IR_MAX_NAME];
        size_t col = p->col;
        if (kl_ir__ident(p, name, "an iterator name"))
            return p->rc;
        if (kl_ir__expect(p, '=', "'=' after the iterator name"))
            return p->rc;
        size_t ecol = p->col;
        int64_t ext;
        if (kl_ir__int(p, &ext, "an extent"))
            return p->rc;
        int k = 0;
        while (k < p->nslots && strcmp(p->slot[k], name) != 0)
            k++;
        if (k == p->nslots)
            return kl_ir__fail(p, col, "iterator %s in 'where' is not used",
                               name);
        if (p->extent[k])
            return kl_ir__fail(p, col, "iterator %s is given twice in 'where'",
                               name);
        if (ext < 1)
            return kl_ir__fail(p, ecol, "extent of %s must be at least 1",
                               name);
        p->extent[k] = ext;
        p->extent_col[k] = ecol;
        if (p->tok != ',')
            return 0;
        kl_ir__next(p);
    }
}

static int s_decl(kl_ir__parser_t *p)
{
    char name[KL_IR_MAX_NAME], dt[KL_IR_MAX_NAME], d[48];
    size_t col = p->col;
    if (kl_ir__ident(p, name, "a tensor name") ||
        kl_ir__expect(p, ':', "':' after the tensor name"))
        return p->rc;
    size_t dcol = p->col;
    if (kl_ir__ident(p, dt, "a dtype (f32, f16, bf16, u8, s8 or s32)"))
        return p->rc;
    bool is_const = strcmp(dt, "const") == 0;
    if (is_const) {
        dcol = p->col;
        if (kl_ir__ident(p, dt,
                         "a dtype (f32, f16, bf16, u8, s8 or s32) after "
                         "'const'"))
            return p->rc;
    }
    kl_dtype dtype = KL_DT_F32;
    if (!kl_dtype_parse(dt, &dtype))
        return kl_ir__fail(p, dcol,
                           "unknown dtype '%s' (expected f32, f16, bf16, u8, "
                           "s8 or s32)",
                           dt);
    if (kl_ir__expect(p, '[', "'[' after the dtype"))
        return p->rc;
    int64_t shape[KL_IR_MAX_DIMS];
    int nd = 0;
    for (;;) {
        if (nd == KL_IR_MAX_DIMS)
            return kl_ir__fail(p, p->col, "more than %d dimensions",
                               KL_IR_MAX_DIMS);
        size_t c = p->col;
        if (kl_ir__int(p, &shape[nd], "a dimension"))
            return p->rc;
        if (shape[nd++] < 1)
            return kl_ir__fail(p, c, "dimension %d of %s must be at least 1",
                               nd, name);
        if (p->tok == ']')
            break;
        if (p->tok != ',')
            return kl_ir__fail(p, p->col,
                               "expected ']' after the shape, got %s",
                               kl_ir__desc(p, d));
        kl_ir__next(p);
    }
    kl_ir__next(p);
    int t = 0;
    while (t < p->ntens && strcmp(p->tens[t].name, name) != 0)
        t++;
    if (t == p->ntens)
        return kl_ir__fail(p, col, "tensor %s is declared but not used", name);
    if (p->tdecl[t])
        return kl_ir__fail(p, col, "tensor %s is declared twice", name);
    if (p->tens[t].ndim != nd)
        return kl_ir__fail(p, col, "tensor %s used with %d and %d dimensions",
                           name, p->tens[t].ndim, nd);
    if (is_const && t == 0)
        return kl_ir__fail(p, col, "the output %s cannot be const", name);
    p->tdecl[t] = true;
    p->tdecl_col[t] = col;
    p->tens[t].dtype = dtype;
    p->tens[t].is_const = is_const;
    memcpy(p->tens[t].shape, shape, sizeof(shape[0]) * (size_t)nd);
    return 0;
}

static int s_statement(kl_ir__parser_t *p)
{
    char d[48];
    if (s_output(p) || s_assign(p))
        return p->rc;
    p->w->body = s_expr(p, 0);
    if (!p->w->body)
        return p->rc;
    while (p->tok == '|') {
        kl_ir__next(p);
        if (s_epilogue(p))
            return p->rc;
    }
    if (s_where(p))
        return p->rc;
    if (p->tok == ';') {
        kl_ir__next(p);
        do {
            if (p->tok == ',')
                kl_ir__next(p);
            if (s_decl(p))
                return p->rc;
        } while (p->tok == ',');
    }
    if (p->tok != T_EOF)
        return kl_ir__fail(p, p->col, "unexpected %s after the workload",
                           kl_ir__desc(p, d));
    return 0;
}

/* Renumbers the iterators in order of first nonzero use (output first,
 * then the body and the epilogue as written; inside one index in the
 * current order), which is how the canonical text prints them, so that
 * the canonical text parses back to the same order. An iterator whose
 * every coefficient cancels ("0*r", "r-r") has no place and is an error. */
static int s_order_slots(kl_ir__parser_t *p)
{
    int order[KL_IR_MAX_ITERS], placed = 0;
    int pos[KL_IR_MAX_ITERS];
    for (int k = 0; k < p->nslots; k++)
        pos[k] = -1;
    for (int i = 0; i < p->nuses; i++) {
        const kl_access_t *acc = p->uses[i].acc;
        for (int d = 0; d < p->tens[acc->tensor].ndim; d++)
            for (int k = 0; k < p->nslots; k++)
                if (acc->idx[d].coef[k] && pos[k] < 0) {
                    pos[k] = placed;
                    order[placed++] = k;
                }
    }
    for (int k = 0; k < p->nslots; k++)
        if (pos[k] < 0)
            return kl_ir__fail(p, p->slot_col[k],
                               "iterator %s cancels out of every index",
                               p->slot[k]);
    kl_ir__parser_t old = *p;
    for (int j = 0; j < placed; j++) {
        int k = order[j];
        strcpy(p->slot[j], old.slot[k]);
        p->slot_col[j] = old.slot_col[k];
        p->slot_out[j] = old.slot_out[k];
        p->extent[j] = old.extent[k];
        p->extent_col[j] = old.extent_col[k];
    }
    for (int i = 0; i < p->nuses; i++) {
        kl_access_t *acc = p->uses[i].acc;
        for (int d = 0; d < KL_IR_MAX_DIMS; d++) {
            int64_t c[KL_IR_MAX_ITERS] = {0};
            for (int k = 0; k < p->nslots; k++)
                if (pos[k] >= 0)
                    c[pos[k]] = acc->idx[d].coef[k];
            memcpy(acc->idx[d].coef, c, sizeof(c));
        }
    }
    return 0;
}

/* ---- checks that need the extents ---------------------------------------- */

static int s_iters(kl_ir__parser_t *p)
{
    kl_workload_t *w = p->w;
    for (int k = 0; k < p->nslots; k++) {
        if (!p->extent[k])
            return kl_ir__fail(
                p, p->slot_col[k],
                "unknown iterator '%s': iterator %s has no extent "
                "in 'where'",
                p->slot[k], p->slot[k]);
        if (!p->slot_out[k] && w->reduce == KL_RED_NONE)
            return kl_ir__fail(p, p->slot_col[k],
                               "reduction with '=': iterator %s is not in the "
                               "output (use '+=' or 'max=')",
                               p->slot[k]);
        kl_iter_t *it = &w->iters[k];
        strcpy(it->name, p->slot[k]);
        it->extent = p->extent[k];
        it->reduce = !p->slot_out[k];
    }
    w->niters = p->nslots;
    return 0;
}

/* Index bounds and the shapes of undeclared tensors. */
static int s_shapes(kl_ir__parser_t *p)
{
    kl_workload_t *w = p->w;
    for (int i = 0; i < p->nuses; i++) {
        const kl_access_t *acc = p->uses[i].acc;
        kl_tensor_t *t = &p->tens[acc->tensor];
        for (int d = 0; d < t->ndim; d++) {
            __int128 lo, hi;
            kl_ir__affine_range(w, &acc->idx[d], &lo, &hi);
            if (lo < -KL_IR__INDEX_MAX || hi > KL_IR__INDEX_MAX)
                return kl_ir__fail(p, p->uses[i].col,
                                   "index %d of %s can reach beyond 2^60",
                                   d + 1, t->name);
            if (p->tdecl[acc->tensor] || acc->tensor == 0)
                continue;
            if (lo < 0)
                return kl_ir__fail(
                    p, p->uses[i].col,
                    "tensor %s needs a declaration: its index %d "
                    "can be negative",
                    t->name, d + 1);
            int64_t n = (int64_t)(hi / acc->idx[d].div) + 1;
            if (n > t->shape[d])
                t->shape[d] = n;
        }
    }
    kl_tensor_t *o = &p->tens[0];
    for (int d = 0; d < o->ndim; d++) {
        int k = 0;
        while (!w->out.idx[d].coef[k])
            k++;
        if (p->tdecl[0] && o->shape[d] != w->iters[k].extent)
            return kl_ir__fail(
                p, p->tdecl_col[0],
                "output %s is declared with %lld in dimension %d "
                "but iterator %s has extent %lld",
                o->name, (long long)o->shape[d], d + 1, w->iters[k].name,
                (long long)w->iters[k].extent);
        o->shape[d] = w->iters[k].extent;
    }
    for (int t = 0; t < p->ntens; t++) {
        __int128 n = 1;
        for (int d = 0; d < p->tens[t].ndim; d++)
            n *= p->tens[t].shape[d];
        if (n > KL_IR__NUMEL_MAX)
            return kl_ir__fail(p, p->tcol[t],
                               "tensor %s has more than 2^40 "
                               "elements",
                               p->tens[t].name);
    }
    return 0;
}

/* The tensor numbers the body reads, into seen[]. */
static void s_body_tensors(const kl_expr_t *e, bool *seen)
{
    if (!e)
        return;
    if (e->kind == KL_EX_LOAD)
        seen[e->access.tensor] = true;
    s_body_tensors(e->a, seen);
    s_body_tensors(e->b, seen);
}

/* The dtype rules of integer and float workloads (kl_ir.h). Runs while
 * the output is still tensor 0. */
static int s_dtypes(kl_ir__parser_t *p)
{
    const kl_workload_t *w = p->w;
    const kl_tensor_t *o = &p->tens[0];
    bool is_int = kl_dtype_is_int(o->dtype);
    if (!is_int) {
        for (int t = 1; t < p->ntens; t++)
            if (kl_dtype_is_int(p->tens[t].dtype))
                return kl_ir__fail(
                    p, p->tdecl_col[t],
                    "tensor %s is %s but the output %s is %s: a float "
                    "workload reads no integer tensor",
                    p->tens[t].name, kl_dtype_name(p->tens[t].dtype), o->name,
                    kl_dtype_name(o->dtype));
        for (int i = 0; i < w->nepi; i++)
            if (w->epi[i].kind == KL_EPI_REQUANT ||
                w->epi[i].kind == KL_EPI_REQUANT_TENSOR)
                return kl_ir__fail(p, p->epi_col[i],
                                   "requant needs an integer output (%s is "
                                   "%s)",
                                   o->name, kl_dtype_name(o->dtype));
        return 0;
    }
    bool seen[KL_IR_MAX_TENSORS] = {0};
    s_body_tensors(w->body, seen);
    for (int t = 1; t < p->ntens; t++)
        if (seen[t] && !kl_dtype_is_int(p->tens[t].dtype))
            return kl_ir__fail(
                p, p->tcol[t],
                "tensor %s is %s but the output %s is %s: an integer "
                "workload's body reads only u8, s8 and s32 tensors",
                p->tens[t].name, kl_dtype_name(p->tens[t].dtype), o->name,
                kl_dtype_name(o->dtype));
    if (p->div_col)
        return kl_ir__fail(p, p->div_col,
                           "'/' is not allowed in an integer workload (%s is "
                           "%s)",
                           o->name, kl_dtype_name(o->dtype));
    if (p->frac_col)
        return kl_ir__fail(p, p->frac_col,
                           "an integer workload's constants are integers");
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        size_t col = p->epi_col[i];
        const kl_tensor_t *t = ep->kind == KL_EPI_ADD_TENSOR ||
                                       ep->kind == KL_EPI_MUL_TENSOR ||
                                       ep->kind == KL_EPI_REQUANT_TENSOR
                                   ? &p->tens[ep->access.tensor]
                                   : NULL;
        switch ((int)ep->kind) {
        case KL_EPI_MUL_TENSOR:
        case KL_EPI_MUL_CONST:
            return kl_ir__fail(p, col,
                               "'*' is not allowed in an integer workload's "
                               "epilogue (use requant(scale, zp))");
        case KL_EPI_ADD_TENSOR:
            if (!kl_dtype_is_int(t->dtype))
                return kl_ir__fail(p, col,
                                   "tensor %s is %s: an integer workload adds "
                                   "only u8, s8 and s32 tensors",
                                   t->name, kl_dtype_name(t->dtype));
            break;
        case KL_EPI_ADD_CONST:
        case KL_EPI_CLIP:
            if (ep->lo != floor(ep->lo) || ep->hi != floor(ep->hi) ||
                fabs(ep->lo) > 2147483648.0 || fabs(ep->hi) > 2147483648.0)
                return kl_ir__fail(p, col,
                                   "an integer workload's epilogue constants "
                                   "are int32 integers");
            break;
        case KL_EPI_ACT:
            return kl_ir__fail(p, col,
                               "%s is not allowed in an integer workload's "
                               "epilogue (float workloads only)",
                               kl_act_name(ep->act));
        case KL_EPI_REQUANT_TENSOR:
            if (t->dtype != KL_DT_F32)
                return kl_ir__fail(p, col,
                                   "requant scale %s is %s (expected f32)",
                                   t->name, kl_dtype_name(t->dtype));
            break;
        default:
            break;
        }
    }
    return 0;
}

/* Moves the output (number 0 while parsing) to the end: ABI order. */
static void s_reorder(kl_ir__parser_t *p)
{
    kl_workload_t *w = p->w;
    int n = p->ntens;
    w->ntensors = n;
    for (int t = 1; t < n; t++)
        w->tensors[t - 1] = p->tens[t];
    w->tensors[n - 1] = p->tens[0];
    w->tensors[n - 1].is_output = true;
    for (int i = 0; i < p->nuses; i++) {
        kl_access_t *acc = p->uses[i].acc;
        acc->tensor = acc->tensor == 0 ? n - 1 : acc->tensor - 1;
    }
}

int kl_workload_parse(const char *text, kl_workload_t **out, char *err)
{
    *out = NULL;
    if (!text)
        return kl_seterr(err, KL_ERR_INVAL, "no workload text");
    kl_ir__parser_t p = {.src = text, .err = err};
    p.w = kl_xcalloc(1, sizeof(*p.w));
    kl_ir__next(&p);
    int rc = s_statement(&p);
    if (!rc)
        rc = s_order_slots(&p);
    if (!rc)
        rc = s_iters(&p);
    if (!rc)
        rc = s_shapes(&p);
    if (!rc)
        rc = s_dtypes(&p);
    if (!rc) {
        s_reorder(&p);
        rc = kl_ir__finish(p.w, err);
    }
    free(p.uses);
    if (rc) {
        kl_workload_free(&p.w);
        return rc;
    }
    char hex[33];
    kl_hex128(p.w->key, hex);
    strcpy(p.w->op_kind, "custom");
    p.w->name = kl_xasprintf("custom_%.8s", hex);
    *out = p.w;
    return KL_OK;
}
