/* kl_ir_lex.c - lexer and affine-index parser of the expression language
 * (grammar in kl_ir.h); the statement parser is kl_ir_parse.c. */
#include "kl_ir_lex.h"

#include "kl_err.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_DIV_MAX ((int64_t)1 << 20)

typedef struct {
    int64_t c[KL_IR_MAX_ITERS];
    int64_t off;
} s_lin_t;

int kl_ir__fail(kl_ir__parser_t *p, size_t col, const char *fmt, ...)
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

const char *kl_ir__desc(const kl_ir__parser_t *p, char buf[48])
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
static void s_lex_number(kl_ir__parser_t *p)
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

void kl_ir__next(kl_ir__parser_t *p)
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

bool kl_ir__ident_is(const kl_ir__parser_t *p, const char *kw)
{
    return p->tok == T_IDENT && strlen(kw) == p->len &&
           memcmp(p->src + p->col - 1, kw, p->len) == 0;
}

int kl_ir__peek(const kl_ir__parser_t *p)
{
    size_t i = p->pos;
    while (isspace((unsigned char)p->src[i]))
        i++;
    return (unsigned char)p->src[i];
}

int kl_ir__ident(kl_ir__parser_t *p, char out[KL_IR_MAX_NAME], const char *what)
{
    char d[48];
    if (p->tok != T_IDENT)
        return kl_ir__fail(p, p->col, "expected %s, got %s", what,
                           kl_ir__desc(p, d));
    if (p->len >= KL_IR_MAX_NAME)
        return kl_ir__fail(p, p->col, "name %s is longer than %d characters",
                           kl_ir__desc(p, d), KL_IR_MAX_NAME - 1);
    memcpy(out, p->src + p->col - 1, p->len);
    out[p->len] = '\0';
    kl_ir__next(p);
    return 0;
}

int kl_ir__expect(kl_ir__parser_t *p, int tok, const char *what)
{
    char d[48];
    if (p->tok != tok)
        return kl_ir__fail(p, p->col, "expected %s, got %s", what,
                           kl_ir__desc(p, d));
    kl_ir__next(p);
    return 0;
}

int kl_ir__int(kl_ir__parser_t *p, int64_t *out, const char *what)
{
    char d[48];
    if (p->tok != T_NUM || !p->isint)
        return kl_ir__fail(p, p->col, "expected %s (an integer), got %s", what,
                           kl_ir__desc(p, d));
    if (p->ival < 0)
        return kl_ir__fail(p, p->col, "integer %s is too large (limit 2^40)",
                           kl_ir__desc(p, d));
    *out = p->ival;
    kl_ir__next(p);
    return 0;
}

/* An optionally signed number (epilogue constants). */
int kl_ir__signed_num(kl_ir__parser_t *p, double *out)
{
    char d[48];
    bool neg = false;
    if (p->tok == '-') {
        neg = true;
        kl_ir__next(p);
    }
    if (p->tok != T_NUM)
        return kl_ir__fail(p, p->col, "expected a number, got %s",
                           kl_ir__desc(p, d));
    if (!isfinite(p->num))
        return kl_ir__fail(p, p->col, "number %s is out of range",
                           kl_ir__desc(p, d));
    *out = neg ? -p->num : p->num;
    kl_ir__next(p);
    return 0;
}

/* ---- affine indices ------------------------------------------------------ */

static int s_slot(kl_ir__parser_t *p, const char *name, size_t col)
{
    for (int i = 0; i < p->nslots; i++)
        if (strcmp(p->slot[i], name) == 0)
            return i;
    if (p->nslots == KL_IR_MAX_ITERS) {
        kl_ir__fail(p, col, "more than %d iterators", KL_IR_MAX_ITERS);
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

static int s_lin_scale(kl_ir__parser_t *p, s_lin_t *l, int64_t m, size_t col)
{
    bool ovf = __builtin_mul_overflow(l->off, m, &l->off);
    for (int k = 0; k < KL_IR_MAX_ITERS; k++)
        ovf |= __builtin_mul_overflow(l->c[k], m, &l->c[k]);
    if (ovf)
        return kl_ir__fail(p, col, "index arithmetic overflows");
    return 0;
}

static int s_lin_add(kl_ir__parser_t *p, s_lin_t *l, const s_lin_t *r, int sign,
                     size_t col)
{
    s_lin_t t = *r;
    if (sign < 0 && s_lin_scale(p, &t, -1, col))
        return p->rc;
    bool ovf = __builtin_add_overflow(l->off, t.off, &l->off);
    for (int k = 0; k < KL_IR_MAX_ITERS; k++)
        ovf |= __builtin_add_overflow(l->c[k], t.c[k], &l->c[k]);
    if (ovf)
        return kl_ir__fail(p, col, "index arithmetic overflows");
    return 0;
}

static int s_aexpr(kl_ir__parser_t *p, s_lin_t *out, int depth);

static int s_aprim(kl_ir__parser_t *p, s_lin_t *out, int depth)
{
    char d[48];
    memset(out, 0, sizeof(*out));
    if (depth > 64)
        return kl_ir__fail(p, p->col, "index nested too deeply");
    if (p->tok == '-') {
        size_t col = p->col;
        kl_ir__next(p);
        if (s_aprim(p, out, depth + 1))
            return p->rc;
        return s_lin_scale(p, out, -1, col);
    }
    if (p->tok == '(') {
        kl_ir__next(p);
        if (s_aexpr(p, out, depth + 1))
            return p->rc;
        return kl_ir__expect(p, ')', "')' in index");
    }
    if (p->tok == T_NUM) {
        if (!p->isint)
            return kl_ir__fail(p, p->col, "index constant %s is not an integer",
                               kl_ir__desc(p, d));
        return kl_ir__int(p, &out->off, "an integer");
    }
    if (p->tok == T_IDENT) {
        size_t col = p->col;
        char name[KL_IR_MAX_NAME];
        if (kl_ir__ident(p, name, "an iterator"))
            return p->rc;
        int k = s_slot(p, name, col);
        if (k < 0)
            return p->rc;
        if (p->in_epilogue && !p->slot_out[k])
            return kl_ir__fail(p, col,
                               "epilogue reads with iterator %s, which is not "
                               "in the output",
                               name);
        out->c[k] = 1;
        return 0;
    }
    return kl_ir__fail(p, p->col,
                       "expected an index (iterator or integer), got %s",
                       kl_ir__desc(p, d));
}

static int s_aterm(kl_ir__parser_t *p, s_lin_t *out, int depth)
{
    if (s_aprim(p, out, depth))
        return p->rc;
    while (p->tok == '*') {
        size_t col = p->col;
        kl_ir__next(p);
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
            return kl_ir__fail(p, col,
                               "a product of iterators is not an affine index");
        }
    }
    return 0;
}

static int s_aexpr(kl_ir__parser_t *p, s_lin_t *out, int depth)
{
    if (s_aterm(p, out, depth))
        return p->rc;
    while (p->tok == '+' || p->tok == '-') {
        int sign = p->tok == '+' ? 1 : -1;
        size_t col = p->col;
        kl_ir__next(p);
        s_lin_t r;
        if (s_aterm(p, &r, depth) || s_lin_add(p, out, &r, sign, col))
            return p->rc;
    }
    return 0;
}

/* index := aexpr [ '/' INT ] */
int kl_ir__index(kl_ir__parser_t *p, kl_affine_t *a)
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
        return kl_ir__fail(p, col, "an index constant exceeds 2^40");
    memset(a, 0, sizeof(*a));
    memcpy(a->coef, l.c, sizeof(a->coef));
    a->offset = l.off;
    a->div = 1;
    if (p->tok == '/') {
        kl_ir__next(p);
        col = p->col;
        if (kl_ir__int(p, &a->div, "a divisor"))
            return p->rc;
        if (a->div < 1 || a->div > S_DIV_MAX)
            return kl_ir__fail(p, col, "divisor must be between 1 and %lld",
                               (long long)S_DIV_MAX);
    }
    return 0;
}
