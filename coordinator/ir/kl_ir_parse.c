/* kl_ir_parse.c - lexer and recursive-descent parser of the expression
 * language (grammar in kl_ir.h). Every error names the 1-based column of
 * the offending token and what was expected there. */
#include "kl_ir_int.h"

#include "kl_err.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_EOF = 256, T_IDENT, T_NUM, T_PLUSEQ };

#define S_DIV_MAX ((int64_t)1 << 20)

typedef struct {
    kl_access_t *acc;
    size_t col;
} s_use_t;

typedef struct {
    const char *src;
    size_t pos; /* next unread byte */
    int tok;
    size_t col; /* 1-based column of tok */
    size_t len;
    double num;
    bool isint;
    int64_t ival;
    char *err;
    int rc;
    kl_workload_t *w;
    /* Iterators, in order of first use. */
    int nslots;
    char slot[KL_IR_MAX_ITERS][KL_IR_MAX_NAME];
    size_t slot_col[KL_IR_MAX_ITERS];
    bool slot_out[KL_IR_MAX_ITERS];
    int64_t extent[KL_IR_MAX_ITERS]; /* 0 until 'where' gives it */
    size_t extent_col[KL_IR_MAX_ITERS];
    /* Tensors in order of first use; the output is number 0 here. */
    int ntens;
    kl_tensor_t tens[KL_IR_MAX_TENSORS];
    size_t tcol[KL_IR_MAX_TENSORS];
    bool tdecl[KL_IR_MAX_TENSORS];
    size_t tdecl_col[KL_IR_MAX_TENSORS];
    /* Every access, for the checks that need the extents. */
    s_use_t *uses;
    int nuses, capuses;
    bool in_epilogue;
} s_p_t;

typedef struct {
    int64_t c[KL_IR_MAX_ITERS];
    int64_t off;
} s_lin_t;

static int s_fail(s_p_t *p, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_fail(s_p_t *p, size_t col, const char *fmt, ...)
{
    if (p->rc)
        return p->rc;
    char msg[KL_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->rc = kl_seterr(p->err, KL_ERR_INVAL, "column %zu: %s", col, msg);
    return p->rc;
}

/* A printable description of the current token, for messages. */
static const char *s_desc(const s_p_t *p, char buf[48])
{
    if (p->tok == T_EOF)
        return "end of input";
    if (p->tok < 256 && !isprint(p->tok)) {
        snprintf(buf, 48, "byte 0x%02x", (unsigned)p->tok);
        return buf;
    }
    size_t n = p->len > 30 ? 30 : p->len;
    snprintf(buf, 48, "'%.*s'", (int)n, p->src + p->col - 1);
    return buf;
}

static bool s_is_ident(int c, bool first)
{
    return c == '_' || isalpha(c) || (!first && isdigit(c));
}

/* Scans a number at p->pos: digits [. digits] [e [+-] digits]. */
static void s_lex_number(s_p_t *p)
{
    const char *s = p->src + p->pos;
    size_t n = 0;
    bool isint = true;
    while (isdigit((unsigned char)s[n]))
        n++;
    if (s[n] == '.') {
        isint = false;
        n++;
        while (isdigit((unsigned char)s[n]))
            n++;
    }
    if ((s[n] == 'e' || s[n] == 'E') &&
        (isdigit((unsigned char)s[n + 1]) ||
         ((s[n + 1] == '+' || s[n + 1] == '-') &&
          isdigit((unsigned char)s[n + 2])))) {
        isint = false;
        n += 2;
        while (isdigit((unsigned char)s[n]))
            n++;
    }
    p->tok = T_NUM;
    p->len = n;
    p->isint = isint;
    char tmp[64];
    size_t m = n < sizeof(tmp) - 1 ? n : sizeof(tmp) - 1;
    memcpy(tmp, s, m);
    tmp[m] = '\0';
    p->num = n < sizeof(tmp) - 1 ? strtod(tmp, NULL) : HUGE_VAL;
    p->ival = -1;
    if (isint) {
        int64_t v = 0;
        for (size_t i = 0; i < n && v >= 0; i++) {
            v = v * 10 + (s[i] - '0');
            if (v > KL_IR__INT_MAX)
                v = -1;
        }
        p->ival = v;
    }
}

static void s_next(s_p_t *p)
{
    const char *s = p->src;
    while (s[p->pos] == ' ' || s[p->pos] == '\t' || s[p->pos] == '\n' ||
           s[p->pos] == '\r')
        p->pos++;
    p->col = p->pos + 1;
    int c = (unsigned char)s[p->pos];
    if (c == '\0') {
        p->tok = T_EOF;
        p->len = 0;
    } else if (s_is_ident(c, true)) {
        size_t n = 0;
        while (s_is_ident((unsigned char)s[p->pos + n], false))
            n++;
        p->tok = T_IDENT;
        p->len = n;
    } else if (isdigit(c) ||
               (c == '.' && isdigit((unsigned char)s[p->pos + 1]))) {
        s_lex_number(p);
    } else if (c == '+' && s[p->pos + 1] == '=') {
        p->tok = T_PLUSEQ;
        p->len = 2;
    } else {
        p->tok = c;
        p->len = 1;
    }
    p->pos += p->len;
}

static bool s_ident_is(const s_p_t *p, const char *kw)
{
    return p->tok == T_IDENT && strlen(kw) == p->len &&
           memcmp(p->src + p->col - 1, kw, p->len) == 0;
}

/* The character after the current token, skipping whitespace. */
static int s_peek_char(const s_p_t *p)
{
    size_t i = p->pos;
    while (isspace((unsigned char)p->src[i]))
        i++;
    return (unsigned char)p->src[i];
}

static int s_ident(s_p_t *p, char out[KL_IR_MAX_NAME], const char *what)
{
    char d[48];
    if (p->tok != T_IDENT)
        return s_fail(p, p->col, "expected %s, got %s", what, s_desc(p, d));
    if (p->len >= KL_IR_MAX_NAME)
        return s_fail(p, p->col, "name %s is longer than %d characters",
                      s_desc(p, d), KL_IR_MAX_NAME - 1);
    memcpy(out, p->src + p->col - 1, p->len);
    out[p->len] = '\0';
    s_next(p);
    return 0;
}

static int s_expect(s_p_t *p, int tok, const char *what)
{
    char d[48];
    if (p->tok != tok)
        return s_fail(p, p->col, "expected %s, got %s", what, s_desc(p, d));
    s_next(p);
    return 0;
}

static int s_int(s_p_t *p, int64_t *out, const char *what)
{
    char d[48];
    if (p->tok != T_NUM || !p->isint)
        return s_fail(p, p->col, "expected %s (an integer), got %s", what,
                      s_desc(p, d));
    if (p->ival < 0)
        return s_fail(p, p->col, "integer %s is too large (limit 2^40)",
                      s_desc(p, d));
    *out = p->ival;
    s_next(p);
    return 0;
}

/* An optionally signed number (epilogue constants). */
static int s_signed_num(s_p_t *p, double *out)
{
    char d[48];
    bool neg = false;
    if (p->tok == '-') {
        neg = true;
        s_next(p);
    }
    if (p->tok != T_NUM)
        return s_fail(p, p->col, "expected a number, got %s", s_desc(p, d));
    if (!isfinite(p->num))
        return s_fail(p, p->col, "number %s is out of range", s_desc(p, d));
    *out = neg ? -p->num : p->num;
    s_next(p);
    return 0;
}

/* ---- affine indices ------------------------------------------------------ */

static int s_slot(s_p_t *p, const char *name, size_t col)
{
    for (int i = 0; i < p->nslots; i++)
        if (strcmp(p->slot[i], name) == 0)
            return i;
    if (p->nslots == KL_IR_MAX_ITERS) {
        s_fail(p, col, "more than %d iterators", KL_IR_MAX_ITERS);
        return -1;
    }
    strcpy(p->slot[p->nslots], name);
    p->slot_col[p->nslots] = col;
    return p->nslots++;
}

static bool s_lin_const(const s_lin_t *l)
{
    for (int k = 0; k < KL_IR_MAX_ITERS; k++)
        if (l->c[k])
            return false;
    return true;
}

static int s_lin_scale(s_p_t *p, s_lin_t *l, int64_t m, size_t col)
{
    bool ovf = __builtin_mul_overflow(l->off, m, &l->off);
    for (int k = 0; k < KL_IR_MAX_ITERS; k++)
        ovf |= __builtin_mul_overflow(l->c[k], m, &l->c[k]);
    if (ovf)
        return s_fail(p, col, "index arithmetic overflows");
    return 0;
}

static int s_lin_add(s_p_t *p, s_lin_t *l, const s_lin_t *r, int sign,
                     size_t col)
{
    s_lin_t t = *r;
    if (sign < 0 && s_lin_scale(p, &t, -1, col))
        return p->rc;
    bool ovf = __builtin_add_overflow(l->off, t.off, &l->off);
    for (int k = 0; k < KL_IR_MAX_ITERS; k++)
        ovf |= __builtin_add_overflow(l->c[k], t.c[k], &l->c[k]);
    if (ovf)
        return s_fail(p, col, "index arithmetic overflows");
    return 0;
}

static int s_aexpr(s_p_t *p, s_lin_t *out, int depth);

static int s_aprim(s_p_t *p, s_lin_t *out, int depth)
{
    char d[48];
    memset(out, 0, sizeof(*out));
    if (depth > 64)
        return s_fail(p, p->col, "index nested too deeply");
    if (p->tok == '-') {
        size_t col = p->col;
        s_next(p);
        if (s_aprim(p, out, depth + 1))
            return p->rc;
        return s_lin_scale(p, out, -1, col);
    }
    if (p->tok == '(') {
        s_next(p);
        if (s_aexpr(p, out, depth + 1))
            return p->rc;
        return s_expect(p, ')', "')' in index");
    }
    if (p->tok == T_NUM) {
        if (!p->isint)
            return s_fail(p, p->col, "index constant %s is not an integer",
                          s_desc(p, d));
        return s_int(p, &out->off, "an integer");
    }
    if (p->tok == T_IDENT) {
        size_t col = p->col;
        char name[KL_IR_MAX_NAME];
        if (s_ident(p, name, "an iterator"))
            return p->rc;
        int k = s_slot(p, name, col);
        if (k < 0)
            return p->rc;
        if (p->in_epilogue && !p->slot_out[k])
            return s_fail(p, col,
                          "epilogue reads with iterator %s, which is not "
                          "in the output",
                          name);
        out->c[k] = 1;
        return 0;
    }
    return s_fail(p, p->col, "expected an index (iterator or integer), got %s",
                  s_desc(p, d));
}

static int s_aterm(s_p_t *p, s_lin_t *out, int depth)
{
    if (s_aprim(p, out, depth))
        return p->rc;
    while (p->tok == '*') {
        size_t col = p->col;
        s_next(p);
        s_lin_t r;
        if (s_aprim(p, &r, depth))
            return p->rc;
        if (s_lin_const(&r)) {
            if (s_lin_scale(p, out, r.off, col))
                return p->rc;
        } else if (s_lin_const(out)) {
            int64_t m = out->off;
            *out = r;
            if (s_lin_scale(p, out, m, col))
                return p->rc;
        } else {
            return s_fail(p, col,
                          "a product of iterators is not an affine index");
        }
    }
    return 0;
}

static int s_aexpr(s_p_t *p, s_lin_t *out, int depth)
{
    if (s_aterm(p, out, depth))
        return p->rc;
    while (p->tok == '+' || p->tok == '-') {
        int sign = p->tok == '+' ? 1 : -1;
        size_t col = p->col;
        s_next(p);
        s_lin_t r;
        if (s_aterm(p, &r, depth) || s_lin_add(p, out, &r, sign, col))
            return p->rc;
    }
    return 0;
}

/* index := aexpr [ '/' INT ] */
static int s_index(s_p_t *p, kl_affine_t *a)
{
    s_lin_t l;
    size_t col = p->col;
    if (s_aexpr(p, &l, 0))
        return p->rc;
    /* Keeps the canonical spelling within what the lexer reads back. */
    bool big = l.off > KL_IR__INT_MAX || l.off < -KL_IR__INT_MAX;
    for (int k = 0; k < KL_IR_MAX_ITERS; k++)
        big |= l.c[k] > KL_IR__INT_MAX || l.c[k] < -KL_IR__INT_MAX;
    if (big)
        return s_fail(p, col, "an index constant exceeds 2^40");
    memset(a, 0, sizeof(*a));
    memcpy(a->coef, l.c, sizeof(a->coef));
    a->offset = l.off;
    a->div = 1;
    if (p->tok == '/') {
        s_next(p);
        col = p->col;
        if (s_int(p, &a->div, "a divisor"))
            return p->rc;
        if (a->div < 1 || a->div > S_DIV_MAX)
            return s_fail(p, col, "divisor must be between 1 and %lld",
                          (long long)S_DIV_MAX);
    }
    return 0;
}

/* ---- accesses and expressions ------------------------------------------ */

static int s_tensor(s_p_t *p, const char *name, size_t col, int ndim)
{
    for (int t = 0; t < p->ntens; t++) {
        if (strcmp(p->tens[t].name, name) != 0)
            continue;
        if (t == 0)
            return s_fail(p, col, "tensor %s is the output and cannot be read",
                          name);
        if (p->tens[t].ndim != ndim)
            return s_fail(p, col, "tensor %s used with %d and %d dimensions",
                          name, p->tens[t].ndim, ndim);
        return t;
    }
    if (p->ntens == KL_IR_MAX_TENSORS)
        return s_fail(p, col, "more than %d tensors", KL_IR_MAX_TENSORS);
    kl_tensor_t *t = &p->tens[p->ntens];
    memset(t, 0, sizeof(*t));
    strcpy(t->name, name);
    t->ndim = ndim;
    p->tcol[p->ntens] = col;
    return p->ntens++;
}

static void s_add_use(s_p_t *p, kl_access_t *acc, size_t col)
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
static int s_access(s_p_t *p, kl_access_t *acc, size_t *cols)
{
    char name[KL_IR_MAX_NAME];
    size_t col = p->col;
    if (s_ident(p, name, "a tensor name"))
        return p->rc;
    if (p->tok != '[')
        return s_expect(p, '[', "'[' after the tensor name");
    s_next(p);
    int nd = 0;
    memset(acc, 0, sizeof(*acc));
    for (;;) {
        if (nd == KL_IR_MAX_DIMS)
            return s_fail(p, p->col, "more than %d dimensions", KL_IR_MAX_DIMS);
        if (cols)
            cols[nd] = p->col;
        if (s_index(p, &acc->idx[nd++]))
            return p->rc;
        if (p->tok == ']')
            break;
        if (p->tok != ',')
            return s_fail(p, p->col, "expected ']' after index list");
        s_next(p);
    }
    s_next(p);
    int t = s_tensor(p, name, col, nd);
    if (p->rc)
        return p->rc;
    acc->tensor = t;
    s_add_use(p, acc, col);
    return 0;
}

static kl_expr_t *s_expr(s_p_t *p, int depth);

static kl_expr_t *s_bin(kl_expr_kind kind, kl_expr_t *a, kl_expr_t *b)
{
    kl_expr_t *e = kl_ir__expr_new(kind);
    e->a = a;
    e->b = b;
    return e;
}

static kl_expr_t *s_func(s_p_t *p, int depth)
{
    kl_expr_kind kind = s_ident_is(p, "max") ? KL_EX_MAX : KL_EX_MIN;
    s_next(p);
    s_next(p); /* '(' */
    kl_expr_t *a = s_expr(p, depth + 1);
    if (!a || s_expect(p, ',', "',' between the two operands")) {
        kl_ir__expr_free(a);
        return NULL;
    }
    kl_expr_t *b = s_expr(p, depth + 1);
    if (!b || s_expect(p, ')', "')' after the second operand")) {
        kl_ir__expr_free(a);
        kl_ir__expr_free(b);
        return NULL;
    }
    return s_bin(kind, a, b);
}

static kl_expr_t *s_factor(s_p_t *p, int depth)
{
    char d[48];
    if (depth > 200) {
        s_fail(p, p->col, "expression nested too deeply");
        return NULL;
    }
    if (p->tok == T_NUM) {
        if (!isfinite(p->num)) {
            s_fail(p, p->col, "number %s is out of range", s_desc(p, d));
            return NULL;
        }
        kl_expr_t *e = kl_ir__expr_new(KL_EX_CONST);
        e->value = p->num;
        s_next(p);
        return e;
    }
    if (p->tok == '-') {
        s_next(p);
        kl_expr_t *a = s_factor(p, depth + 1);
        return a ? s_bin(KL_EX_NEG, a, NULL) : NULL;
    }
    if (p->tok == '(') {
        s_next(p);
        kl_expr_t *e = s_expr(p, depth + 1);
        if (e && s_expect(p, ')', "')'")) {
            kl_ir__expr_free(e);
            return NULL;
        }
        return e;
    }
    if ((s_ident_is(p, "max") || s_ident_is(p, "min")) && s_peek_char(p) == '(')
        return s_func(p, depth);
    if (p->tok == T_IDENT && !s_ident_is(p, "where")) {
        kl_expr_t *e = kl_ir__expr_new(KL_EX_LOAD);
        if (s_access(p, &e->access, NULL)) {
            free(e);
            return NULL;
        }
        return e;
    }
    s_fail(p, p->col, "expected a number, a tensor access or '(', got %s",
           s_desc(p, d));
    return NULL;
}

static kl_expr_t *s_term(s_p_t *p, int depth)
{
    kl_expr_t *e = s_factor(p, depth);
    while (e && (p->tok == '*' || p->tok == '/')) {
        kl_expr_kind k = p->tok == '*' ? KL_EX_MUL : KL_EX_DIV;
        s_next(p);
        kl_expr_t *b = s_factor(p, depth);
        if (!b) {
            kl_ir__expr_free(e);
            return NULL;
        }
        e = s_bin(k, e, b);
    }
    return e;
}

static kl_expr_t *s_expr(s_p_t *p, int depth)
{
    kl_expr_t *e = s_term(p, depth);
    while (e && (p->tok == '+' || p->tok == '-')) {
        kl_expr_kind k = p->tok == '+' ? KL_EX_ADD : KL_EX_SUB;
        s_next(p);
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
static int s_output(s_p_t *p)
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
            return s_fail(p, cols[d],
                          "output index %d must be a single iterator", d + 1);
        if (p->slot_out[k])
            return s_fail(p, cols[d], "iterator %s appears twice in the output",
                          p->slot[k]);
        p->slot_out[k] = true;
    }
    return 0;
}

static int s_assign(s_p_t *p)
{
    char d[48];
    if (p->tok == T_PLUSEQ) {
        p->w->reduce = KL_RED_SUM;
    } else if (p->tok == '=') {
        p->w->reduce = KL_RED_NONE;
    } else if (s_ident_is(p, "max") && p->src[p->pos] == '=') {
        p->w->reduce = KL_RED_MAX;
        s_next(p);
    } else {
        return s_fail(p, p->col,
                      "expected '=', '+=' or 'max=' after the output, got %s",
                      s_desc(p, d));
    }
    s_next(p);
    return 0;
}

static int s_epilogue(s_p_t *p)
{
    char d[48];
    kl_workload_t *w = p->w;
    if (w->nepi == KL_IR_MAX_EPILOGUE)
        return s_fail(p, p->col, "more than %d epilogue operations",
                      KL_IR_MAX_EPILOGUE);
    kl_epilogue_t *ep = &w->epi[w->nepi];
    memset(ep, 0, sizeof(*ep));
    if (p->tok == '+' || p->tok == '*') {
        bool add = p->tok == '+';
        s_next(p);
        if (p->tok == T_NUM || p->tok == '-') {
            ep->kind = add ? KL_EPI_ADD_CONST : KL_EPI_MUL_CONST;
            if (s_signed_num(p, &ep->lo))
                return p->rc;
        } else if (p->tok == T_IDENT) {
            ep->kind = add ? KL_EPI_ADD_TENSOR : KL_EPI_MUL_TENSOR;
            p->in_epilogue = true;
            int rc = s_access(p, &ep->access, NULL);
            p->in_epilogue = false;
            if (rc)
                return rc;
        } else {
            return s_fail(p, p->col,
                          "expected a number or a tensor access after '%c', "
                          "got %s",
                          add ? '+' : '*', s_desc(p, d));
        }
    } else if (s_ident_is(p, "relu")) {
        ep->kind = KL_EPI_RELU;
        s_next(p);
    } else if (s_ident_is(p, "clip")) {
        ep->kind = KL_EPI_CLIP;
        s_next(p);
        size_t col = p->col;
        if (s_expect(p, '(', "'(' after clip") || s_signed_num(p, &ep->lo) ||
            s_expect(p, ',', "',' between the clip bounds") ||
            s_signed_num(p, &ep->hi) ||
            s_expect(p, ')', "')' after the clip bounds"))
            return p->rc;
        if (ep->lo > ep->hi)
            return s_fail(p, col, "clip bounds are reversed");
    } else {
        return s_fail(p, p->col,
                      "expected '+', '*', 'relu' or 'clip(lo, hi)' after "
                      "'|', got %s",
                      s_desc(p, d));
    }
    w->nepi++;
    return 0;
}

static int s_where(s_p_t *p)
{
    char d[48];
    if (!s_ident_is(p, "where"))
        return s_fail(p, p->col,
                      "expected 'where' after the expression, got %s",
                      s_desc(p, d));
    s_next(p);
    for (;;) {
        char name[KL_IR_MAX_NAME];
        size_t col = p->col;
        if (s_ident(p, name, "an iterator name"))
            return p->rc;
        if (s_expect(p, '=', "'=' after the iterator name"))
            return p->rc;
        size_t ecol = p->col;
        int64_t ext;
        if (s_int(p, &ext, "an extent"))
            return p->rc;
        int k = 0;
        while (k < p->nslots && strcmp(p->slot[k], name) != 0)
            k++;
        if (k == p->nslots)
            return s_fail(p, col, "iterator %s in 'where' is not used", name);
        if (p->extent[k])
            return s_fail(p, col, "iterator %s is given twice in 'where'",
                          name);
        if (ext < 1)
            return s_fail(p, ecol, "extent of %s must be at least 1", name);
        p->extent[k] = ext;
        p->extent_col[k] = ecol;
        if (p->tok != ',')
            return 0;
        s_next(p);
    }
}

static int s_decl(s_p_t *p)
{
    char name[KL_IR_MAX_NAME], dt[KL_IR_MAX_NAME], d[48];
    size_t col = p->col;
    if (s_ident(p, name, "a tensor name") ||
        s_expect(p, ':', "':' after the tensor name"))
        return p->rc;
    size_t dcol = p->col;
    if (s_ident(p, dt, "a dtype (f32, f16 or bf16)"))
        return p->rc;
    kl_dtype dtype = KL_DT_F32;
    if (strcmp(dt, "f16") == 0)
        dtype = KL_DT_F16;
    else if (strcmp(dt, "bf16") == 0)
        dtype = KL_DT_BF16;
    else if (strcmp(dt, "f32") != 0)
        return s_fail(p, dcol, "unknown dtype '%s' (expected f32, f16 or bf16)",
                      dt);
    if (s_expect(p, '[', "'[' after the dtype"))
        return p->rc;
    int64_t shape[KL_IR_MAX_DIMS];
    int nd = 0;
    for (;;) {
        if (nd == KL_IR_MAX_DIMS)
            return s_fail(p, p->col, "more than %d dimensions", KL_IR_MAX_DIMS);
        size_t c = p->col;
        if (s_int(p, &shape[nd], "a dimension"))
            return p->rc;
        if (shape[nd++] < 1)
            return s_fail(p, c, "dimension %d of %s must be at least 1", nd,
                          name);
        if (p->tok == ']')
            break;
        if (p->tok != ',')
            return s_fail(p, p->col, "expected ']' after the shape, got %s",
                          s_desc(p, d));
        s_next(p);
    }
    s_next(p);
    int t = 0;
    while (t < p->ntens && strcmp(p->tens[t].name, name) != 0)
        t++;
    if (t == p->ntens)
        return s_fail(p, col, "tensor %s is declared but not used", name);
    if (p->tdecl[t])
        return s_fail(p, col, "tensor %s is declared twice", name);
    if (p->tens[t].ndim != nd)
        return s_fail(p, col, "tensor %s used with %d and %d dimensions", name,
                      p->tens[t].ndim, nd);
    p->tdecl[t] = true;
    p->tdecl_col[t] = col;
    p->tens[t].dtype = dtype;
    memcpy(p->tens[t].shape, shape, sizeof(shape[0]) * (size_t)nd);
    return 0;
}

static int s_statement(s_p_t *p)
{
    char d[48];
    if (s_output(p) || s_assign(p))
        return p->rc;
    p->w->body = s_expr(p, 0);
    if (!p->w->body)
        return p->rc;
    while (p->tok == '|') {
        s_next(p);
        if (s_epilogue(p))
            return p->rc;
    }
    if (s_where(p))
        return p->rc;
    if (p->tok == ';') {
        s_next(p);
        do {
            if (p->tok == ',')
                s_next(p);
            if (s_decl(p))
                return p->rc;
        } while (p->tok == ',');
    }
    if (p->tok != T_EOF)
        return s_fail(p, p->col, "unexpected %s after the workload",
                      s_desc(p, d));
    return 0;
}

/* Renumbers the iterators in order of first nonzero use (output first,
 * then the body and the epilogue as written; inside one index in the
 * current order), which is how the canonical text prints them, so that
 * the canonical text parses back to the same order. An iterator whose
 * every coefficient cancels ("0*r", "r-r") has no place and is an error. */
static int s_order_slots(s_p_t *p)
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
            return s_fail(p, p->slot_col[k],
                          "iterator %s cancels out of every index", p->slot[k]);
    s_p_t old = *p;
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

static int s_iters(s_p_t *p)
{
    kl_workload_t *w = p->w;
    for (int k = 0; k < p->nslots; k++) {
        if (!p->extent[k])
            return s_fail(p, p->slot_col[k],
                          "unknown iterator '%s': iterator %s has no extent "
                          "in 'where'",
                          p->slot[k], p->slot[k]);
        if (!p->slot_out[k] && w->reduce == KL_RED_NONE)
            return s_fail(p, p->slot_col[k],
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
static int s_shapes(s_p_t *p)
{
    kl_workload_t *w = p->w;
    for (int i = 0; i < p->nuses; i++) {
        const kl_access_t *acc = p->uses[i].acc;
        kl_tensor_t *t = &p->tens[acc->tensor];
        for (int d = 0; d < t->ndim; d++) {
            __int128 lo, hi;
            kl_ir__affine_range(w, &acc->idx[d], &lo, &hi);
            if (lo < -KL_IR__INDEX_MAX || hi > KL_IR__INDEX_MAX)
                return s_fail(p, p->uses[i].col,
                              "index %d of %s can reach beyond 2^60", d + 1,
                              t->name);
            if (p->tdecl[acc->tensor] || acc->tensor == 0)
                continue;
            if (lo < 0)
                return s_fail(p, p->uses[i].col,
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
            return s_fail(p, p->tdecl_col[0],
                          "output %s is declared with %lld in dimension %d "
                          "but iterator %s has extent %lld",
                          o->name, (long long)o->shape[d], d + 1,
                          w->iters[k].name, (long long)w->iters[k].extent);
        o->shape[d] = w->iters[k].extent;
    }
    for (int t = 0; t < p->ntens; t++) {
        __int128 n = 1;
        for (int d = 0; d < p->tens[t].ndim; d++)
            n *= p->tens[t].shape[d];
        if (n > KL_IR__NUMEL_MAX)
            return s_fail(p, p->tcol[t],
                          "tensor %s has more than 2^40 "
                          "elements",
                          p->tens[t].name);
    }
    return 0;
}

/* Moves the output (number 0 while parsing) to the end: ABI order. */
static void s_reorder(s_p_t *p)
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
    s_p_t p = {.src = text, .err = err};
    p.w = kl_xcalloc(1, sizeof(*p.w));
    s_next(&p);
    int rc = s_statement(&p);
    if (!rc)
        rc = s_order_slots(&p);
    if (!rc)
        rc = s_iters(&p);
    if (!rc)
        rc = s_shapes(&p);
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
