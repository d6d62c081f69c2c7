/* kl_pred.c - the predicate language of reject_if and if (kl_trace.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_trace.h"
#include "kl_util.h"

typedef enum {
    P_NUM,
    P_RV,
    P_NOT,
    P_NEG,
    P_BIN,
} p_kind;

typedef struct p_node_s p_node_t;
struct p_node_s {
    p_kind kind;
    int64_t v; /* NUM value, RV number */
    char op[3];
    p_node_t *a, *b;
};

struct kl_pred_s {
    p_node_t *root;
};

typedef struct {
    const char *text;
    const char *p;
    char *err;
    int rc;
} p_parser_t;

static void s_free(p_node_t *n)
{
    if (!n)
        return;
    s_free(n->a);
    s_free(n->b);
    free(n);
}

static p_node_t *s_node(p_kind k)
{
    p_node_t *n = kl_xcalloc(1, sizeof *n);
    n->kind = k;
    return n;
}

static p_node_t *s_fail(p_parser_t *ps, const char *what)
{
    if (!ps->rc)
        ps->rc = kl_seterr(ps->err, KL_ERR_INVAL, "predicate column %d: %s",
                           (int)(ps->p - ps->text) + 1, what);
    return NULL;
}

static void s_ws(p_parser_t *ps)
{
    while (isspace((unsigned char)*ps->p))
        ps->p++;
}

static p_node_t *s_or(p_parser_t *ps);

static p_node_t *s_unary(p_parser_t *ps)
{
    s_ws(ps);
    const char *c = ps->p;
    if (*c == '!' && c[1] != '=') {
        ps->p++;
        p_node_t *a = s_unary(ps);
        if (!a)
            return NULL;
        p_node_t *n = s_node(P_NOT);
        n->kind = P_NOT;
        n->a = a;
        return n;
    }
    if (*c == '-') {
        ps->p++;
        p_node_t *a = s_unary(ps);
        if (!a)
            return NULL;
        p_node_t *n = s_node(P_NEG);
        n->kind = P_NEG;
        n->a = a;
        return n;
    }
    if (*c == '(') {
        ps->p++;
        p_node_t *n = s_or(ps);
        if (!n)
            return NULL;
        s_ws(ps);
        if (*ps->p != ')') {
            s_free(n);
            return s_fail(ps, "expected ')'");
        }
        ps->p++;
        return n;
    }
    if (isdigit((unsigned char)*c)) {
        char *end;
        long long v = strtoll(c, &end, 10);
        ps->p = end;
        p_node_t *n = s_node(P_NUM);
        n->kind = P_NUM;
        n->v = v;
        return n;
    }
    if ((*c == 'v' || *c == 'l' || *c == 'b') && isdigit((unsigned char)c[1])) {
        char *end;
        long long v = strtoll(c + 1, &end, 10);
        ps->p = end;
        p_node_t *n = s_node(P_RV);
        n->kind = P_RV;
        n->v = v;
        return n;
    }
    return s_fail(ps, "expected an operand (integer, vN, lN or '(')");
}

/* Binary levels, lowest precedence first. */
static const char *s_levels[][7] = {
    {"||", NULL},       {"&&", NULL},
    {"==", "!=", NULL}, {"<=", ">=", "<", ">", NULL},
    {"+", "-", NULL},   {"*", "/", "%", NULL},
};
#define NLEVELS 6

static p_node_t *s_level(p_parser_t *ps, int lv)
{
    if (lv == NLEVELS)
        return s_unary(ps);
    p_node_t *a = s_level(ps, lv + 1);
    while (a) {
        s_ws(ps);
        const char *op = NULL;
        for (int i = 0; s_levels[lv][i]; i++) {
            size_t n = strlen(s_levels[lv][i]);
            if (!strncmp(ps->p, s_levels[lv][i], n)) {
                op = s_levels[lv][i];
                break;
            }
        }
        if (!op)
            break;
        ps->p += strlen(op);
        p_node_t *b = s_level(ps, lv + 1);
        if (!b) {
            s_free(a);
            return NULL;
        }
        p_node_t *n = s_node(P_BIN);
        n->kind = P_BIN;
        strcpy(n->op, op);
        n->a = a;
        n->b = b;
        a = n;
    }
    return a;
}

static p_node_t *s_or(p_parser_t *ps)
{
    return s_level(ps, 0);
}

int kl_pred_parse(const char *text, kl_pred_t **out, char *err)
{
    p_parser_t ps = {text, text, err, 0};
    p_node_t *root = s_or(&ps);
    if (root) {
        s_ws(&ps);
        if (*ps.p) {
            s_free(root);
            root = s_fail(&ps, "unexpected text after the expression");
        }
    }
    if (!root)
        return ps.rc ? ps.rc : KL_ERR_INVAL;
    kl_pred_t *p = kl_xmalloc(sizeof *p);
    p->root = root;
    *out = p;
    return KL_OK;
}

void kl_pred_free(kl_pred_t **self_p)
{
    if (self_p && *self_p) {
        s_free((*self_p)->root);
        free(*self_p);
        *self_p = NULL;
    }
}

static int s_eval(const p_node_t *n, kl_pred_lookup_fn lookup, void *ctx,
                  int64_t *v, char *err)
{
    int64_t a = 0, b = 0;
    int rc;
    switch (n->kind) {
    case P_NUM:
        *v = n->v;
        return KL_OK;
    case P_RV:
        return lookup(ctx, n->v, v, err);
    case P_NOT:
    case P_NEG:
        if ((rc = s_eval(n->a, lookup, ctx, &a, err)))
            return rc;
        *v = n->kind == P_NOT ? !a : -a;
        return KL_OK;
    case P_BIN:
        break;
    }
    if ((rc = s_eval(n->a, lookup, ctx, &a, err)))
        return rc;
    /* Short-circuit like C. */
    if (!strcmp(n->op, "&&") && !a) {
        *v = 0;
        return KL_OK;
    }
    if (!strcmp(n->op, "||") && a) {
        *v = 1;
        return KL_OK;
    }
    if ((rc = s_eval(n->b, lookup, ctx, &b, err)))
        return rc;
    const char *o = n->op;
    if ((!strcmp(o, "/") || !strcmp(o, "%")) && b == 0)
        return kl_seterr(err, KL_ERR_INVAL, "predicate: division by zero");
    if (!strcmp(o, "||") || !strcmp(o, "&&"))
        *v = b != 0;
    else if (!strcmp(o, "=="))
        *v = a == b;
    else if (!strcmp(o, "!="))
        *v = a != b;
    else if (!strcmp(o, "<="))
        *v = a <= b;
    else if (!strcmp(o, ">="))
        *v = a >= b;
    else if (!strcmp(o, "<"))
        *v = a < b;
    else if (!strcmp(o, ">"))
        *v = a > b;
    else if (!strcmp(o, "+"))
        *v = (int64_t)((uint64_t)a + (uint64_t)b);
    else if (!strcmp(o, "-"))
        *v = (int64_t)((uint64_t)a - (uint64_t)b);
    else if (!strcmp(o, "*"))
        *v = (int64_t)((uint64_t)a * (uint64_t)b);
    else if (!strcmp(o, "/"))
        *v = (a == INT64_MIN && b == -1) ? a : a / b;
    else
        *v = (a == INT64_MIN && b == -1) ? 0 : a % b;
    return KL_OK;
}

int kl_pred_eval(const kl_pred_t *p, kl_pred_lookup_fn lookup, void *ctx,
                 int64_t *value, char *err)
{
    return s_eval(p->root, lookup, ctx, value, err);
}
