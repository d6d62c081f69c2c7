/* kl_trace_text.c - the readable text form of traces (kl_trace.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_trace.h"
#include "kl_trace_priv.h"

/* Letter of the RVs an op defines. */
static char s_out_letter(kl_op op)
{
    switch (op) {
    case KL_OP_SAMPLE_PERFECT_TILE:
    case KL_OP_SAMPLE_CATEGORICAL:
        return 'v';
    case KL_OP_CACHE_READ:
    case KL_OP_CACHE_WRITE:
        return 'b';
    default:
        return 'l';
    }
}

/* Letter of input k of op. */
static char s_in_letter(kl_op op, int k)
{
    switch (op) {
    case KL_OP_SPLIT:
        return k == 0 ? 'l' : 'v';
    case KL_OP_COMPUTE_AT:
    case KL_OP_REVERSE_COMPUTE_AT:
    case KL_OP_SAMPLE_COMPUTE_LOCATION:
        return k == 0 ? 'b' : 'l';
    default:
        return 'l';
    }
}

static void s_print_body(kl_buf_t *b, const kl_inst_t *v, int n,
                         const char *sep);

/* The shortest text that reads back as exactly x. */
static void s_print_double(kl_buf_t *b, const char *pre, double x)
{
    char t[40];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, x);
        if (strtod(t, NULL) == x)
            break;
    }
    kl_buf_printf(b, "%s%s", pre, t);
}

static void s_print_inst(kl_buf_t *b, const kl_inst_t *in)
{
    if (in->op == KL_OP_IF) {
        kl_buf_printf(b, "if (%s) { ", in->pred);
        s_print_body(b, in->then_body, in->nthen, "; ");
        kl_buf_puts(b, in->nthen ? " } else { " : "} else { ");
        s_print_body(b, in->else_body, in->nelse, "; ");
        kl_buf_puts(b, in->nelse ? " }" : "}");
        if (in->has_decision && in->ndec == 1)
            kl_buf_printf(b, " -> %lld", (long long)in->dec[0]);
        return;
    }
    if (in->op == KL_OP_REJECT_IF) {
        kl_buf_printf(b, "reject_if(%s)", in->pred);
        return;
    }
    for (int k = 0; k < in->nout; k++)
        kl_buf_printf(b, "%s%c%lld", k ? ", " : "", s_out_letter(in->op),
                      (long long)in->out[k]);
    if (in->nout)
        kl_buf_puts(b, " = ");
    kl_buf_printf(b, "%s(", kl_op_name(in->op));
    int nargs = 0;
    for (int k = 0; k < in->nin; k++, nargs++) {
        kl_buf_puts(b, nargs ? ", " : "");
        int64_t x = in->in[k];
        if (x == KL_SPLIT_INFER && in->op == KL_OP_SPLIT && k > 0)
            kl_buf_puts(b, "?");
        else if (x < 0 && in->op == KL_OP_SPLIT && k > 0)
            kl_buf_printf(b, "%lld", (long long)-x);
        else if (x < 0)
            kl_buf_puts(b, "root");
        else
            kl_buf_printf(b, "%c%lld", s_in_letter(in->op, k), (long long)x);
    }
    switch (in->op) {
    case KL_OP_BIND:
        kl_buf_printf(b, "%skind=\"%s\"", nargs++ ? ", " : "", in->strs[0]);
        break;
    case KL_OP_TENSORIZE:
        kl_buf_printf(b, "%sintrin=\"%s\"", nargs++ ? ", " : "", in->strs[0]);
        break;
    case KL_OP_CACHE_READ:
        kl_buf_printf(b, "tensor=\"%s\", scope=\"%s\"", in->strs[0],
                      in->strs[1]);
        break;
    case KL_OP_CACHE_WRITE:
        kl_buf_printf(b, "scope=\"%s\"", in->strs[0]);
        break;
    case KL_OP_ANNOTATE:
        kl_buf_printf(b, ", key=\"%s\", value=%lld", in->strs[0],
                      (long long)in->ints[0]);
        break;
    case KL_OP_WINOGRAD:
        kl_buf_printf(b, "m=%lld", (long long)in->ints[0]);
        break;
    case KL_OP_SAMPLE_PERFECT_TILE:
        kl_buf_printf(b, ", n=%lld, max_innermost=%lld", (long long)in->ints[0],
                      (long long)in->ints[1]);
        if (in->nints > 2)
            kl_buf_printf(b, ", whole=%lld", (long long)in->ints[2]);
        break;
    case KL_OP_SAMPLE_CATEGORICAL:
        kl_buf_puts(b, "values=[");
        for (int k = 0; k < in->nints; k++)
            kl_buf_printf(b, "%s%lld", k ? ", " : "", (long long)in->ints[k]);
        kl_buf_puts(b, "], probs=[");
        for (int k = 0; k < in->nfloats; k++)
            s_print_double(b, k ? ", " : "", in->floats[k]);
        kl_buf_puts(b, "]");
        break;
    default:
        break;
    }
    kl_buf_puts(b, ")");
    if (in->has_decision) {
        if (in->op == KL_OP_SAMPLE_PERFECT_TILE) {
            kl_buf_puts(b, " -> [");
            for (int k = 0; k < in->ndec; k++)
                kl_buf_printf(b, "%s%lld", k ? ", " : "",
                              (long long)in->dec[k]);
            kl_buf_puts(b, "]");
        } else if (in->ndec == 1) {
            kl_buf_printf(b, " -> %lld", (long long)in->dec[0]);
        }
    }
}

static void s_print_body(kl_buf_t *b, const kl_inst_t *v, int n,
                         const char *sep)
{
    for (int i = 0; i < n; i++) {
        s_print_inst(b, &v[i]);
        if (i + 1 < n || sep[0] == '\n')
            kl_buf_puts(b, sep);
    }
}

char *kl_trace_to_text(const kl_trace_t *t)
{
    kl_buf_t b = {0};
    if (t->space[0])
        kl_buf_printf(&b, "# space: %s\n", t->space);
    s_print_body(&b, t->insts, t->n, "\n");
    if (!b.data)
        kl_buf_puts(&b, "");
    return kl_buf_take(&b);
}

/* ---- parser ---- */

typedef struct {
    const char *text;
    const char *p;
    char *err;
    int rc;
} tp_t;

static int s_fail(tp_t *tp, const char *what)
{
    if (tp->rc)
        return tp->rc;
    int line = 1, col = 1;
    for (const char *c = tp->text; c < tp->p; c++) {
        if (*c == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return tp->rc = kl_seterr(tp->err, KL_ERR_INVAL,
                              "trace line %d column %d: %s", line, col, what);
}

/* Skips spaces and tabs (and newlines when nl). */
static void s_ws(tp_t *tp, bool nl)
{
    for (;;) {
        while (*tp->p == ' ' || *tp->p == '\t' || *tp->p == '\r' ||
               (nl && *tp->p == '\n'))
            tp->p++;
        if (*tp->p == '#' && nl) {
            while (*tp->p && *tp->p != '\n')
                tp->p++;
            continue;
        }
        return;
    }
}

static bool s_eat(tp_t *tp, const char *tok)
{
    s_ws(tp, false);
    size_t n = strlen(tok);
    if (strncmp(tp->p, tok, n))
        return false;
    tp->p += n;
    return true;
}

static int s_ident(tp_t *tp, char *out, size_t cap)
{
    s_ws(tp, false);
    size_t n = 0;
    while (isalnum((unsigned char)tp->p[n]) || tp->p[n] == '_' ||
           tp->p[n] == '.')
        n++;
    if (n == 0 || n >= cap)
        return s_fail(tp, "expected a name");
    memcpy(out, tp->p, n);
    out[n] = 0;
    tp->p += n;
    return KL_OK;
}

static int s_int(tp_t *tp, int64_t *v)
{
    s_ws(tp, false);
    char *end;
    long long x = strtoll(tp->p, &end, 10);
    if (end == tp->p)
        return s_fail(tp, "expected an integer");
    tp->p = end;
    *v = x;
    return KL_OK;
}

static int s_rv(tp_t *tp, int64_t *v)
{
    s_ws(tp, false);
    if (!strchr("lvb", *tp->p) || !isdigit((unsigned char)tp->p[1]))
        return s_fail(tp, "expected a random variable (lN, vN, bN)");
    tp->p++;
    return s_int(tp, v);
}

static int s_string(tp_t *tp, char *out, size_t cap)
{
    if (!s_eat(tp, "\""))
        return s_fail(tp, "expected '\"'");
    const char *q = strchr(tp->p, '"');
    if (!q || (size_t)(q - tp->p) >= cap)
        return s_fail(tp, "unterminated or too long string");
    memcpy(out, tp->p, (size_t)(q - tp->p));
    out[q - tp->p] = 0;
    tp->p = q + 1;
    return KL_OK;
}

/* Copies the balanced text between '(' (already eaten) and ')' into pred. */
static int s_pred(tp_t *tp, char *pred)
{
    int depth = 1;
    const char *s = tp->p;
    while (*tp->p && depth) {
        if (*tp->p == '(')
            depth++;
        else if (*tp->p == ')')
            depth--;
        if (depth)
            tp->p++;
    }
    if (!*tp->p)
        return s_fail(tp, "expected ')' after the predicate");
    size_t n = (size_t)(tp->p - s);
    if (n >= KL_PRED_MAX)
        return s_fail(tp, "predicate too long");
    memcpy(pred, s, n);
    pred[n] = 0;
    tp->p++;
    kl_pred_t *p = NULL;
    char perr[KL_ERRMSG_LEN];
    if (kl_pred_parse(pred, &p, perr)) {
        tp->p = s;
        return s_fail(tp, perr);
    }
    kl_pred_free(&p);
    return KL_OK;
}

static int s_decision(tp_t *tp, kl_inst_t *in)
{
    if (!s_eat(tp, "->"))
        return KL_OK;
    in->has_decision = true;
    if (s_eat(tp, "[")) {
        while (!s_eat(tp, "]")) {
            if (in->ndec && !s_eat(tp, ","))
                return s_fail(tp, "expected ',' or ']'");
            if (in->ndec >= KL_INST_MAX)
                return s_fail(tp, "too many decision values");
            if (s_int(tp, &in->dec[in->ndec++]))
                return tp->rc;
        }
        return KL_OK;
    }
    in->ndec = 1;
    return s_int(tp, &in->dec[0]);
}

static int s_body(tp_t *tp, kl_trace_t *t, bool nested);

static int s_keyword_arg(tp_t *tp, kl_inst_t *in, const char *key)
{
    if (!strcmp(key, "kind") || !strcmp(key, "tensor") ||
        !strcmp(key, "scope") || !strcmp(key, "key") ||
        !strcmp(key, "intrin")) {
        if (in->nstrs >= 2)
            return s_fail(tp, "too many string arguments");
        return s_string(tp, in->strs[in->nstrs++], sizeof in->strs[0]);
    }
    if (!strcmp(key, "n") || !strcmp(key, "max_innermost") ||
        !strcmp(key, "whole") || !strcmp(key, "value") || !strcmp(key, "m")) {
        if (in->nints >= KL_INST_MAX)
            return s_fail(tp, "too many integer arguments");
        return s_int(tp, &in->ints[in->nints++]);
    }
    if (!strcmp(key, "values") || !strcmp(key, "probs")) {
        if (!s_eat(tp, "["))
            return s_fail(tp, "expected '['");
        int k = 0;
        while (!s_eat(tp, "]")) {
            if (k++ && !s_eat(tp, ","))
                return s_fail(tp, "expected ',' or ']'");
            if (in->nints >= KL_INST_MAX || in->nfloats >= KL_INST_MAX)
                return s_fail(tp, "list too long");
            if (key[0] == 'v') {
                if (s_int(tp, &in->ints[in->nints++]))
                    return tp->rc;
            } else {
                s_ws(tp, false);
                char *end;
                in->floats[in->nfloats++] = strtod(tp->p, &end);
                if (end == tp->p)
                    return s_fail(tp, "expected a number");
                tp->p = end;
            }
        }
        return KL_OK;
    }
    return s_fail(tp, "unknown keyword argument");
}

static int s_args(tp_t *tp, kl_inst_t *in)
{
    int k = 0;
    while (!s_eat(tp, ")")) {
        if (k++ && !s_eat(tp, ","))
            return s_fail(tp, "expected ',' or ')'");
        s_ws(tp, false);
        if (in->nin >= KL_INST_MAX)
            return s_fail(tp, "too many arguments");
        if (*tp->p == '?') {
            tp->p++;
            in->in[in->nin++] = KL_SPLIT_INFER;
        } else if (isdigit((unsigned char)*tp->p)) {
            int64_t v;
            if (s_int(tp, &v))
                return tp->rc;
            if (v < 1)
                return s_fail(tp, "literal factors must be >= 1");
            in->in[in->nin++] = -v;
        } else if (!strncmp(tp->p, "root", 4) && !isalnum(tp->p[4])) {
            tp->p += 4;
            in->in[in->nin++] = -1;
        } else if (strchr("lvb", *tp->p) && isdigit((unsigned char)tp->p[1])) {
            if (s_rv(tp, &in->in[in->nin++]))
                return tp->rc;
        } else {
            char key[32];
            if (s_ident(tp, key, sizeof key))
                return tp->rc;
            if (!s_eat(tp, "="))
                return s_fail(tp, "expected '='");
            if (s_keyword_arg(tp, in, key))
                return tp->rc;
        }
    }
    return KL_OK;
}

static int s_inst(tp_t *tp, kl_trace_t *t)
{
    s_ws(tp, false);
    if (!strncmp(tp->p, "if", 2) && (tp->p[2] == ' ' || tp->p[2] == '(')) {
        tp->p += 2;
        if (!s_eat(tp, "("))
            return s_fail(tp, "expected '(' after if");
        char pred[KL_PRED_MAX];
        if (s_pred(tp, pred))
            return tp->rc;
        char e[KL_ERRMSG_LEN];
        if (kl_tr_if(t, pred, e))
            return s_fail(tp, e);
        if (!s_eat(tp, "{"))
            return s_fail(tp, "expected '{'");
        if (s_body(tp, t, true))
            return tp->rc;
        kl_tr_else(t, e);
        if (s_eat(tp, "else")) {
            if (!s_eat(tp, "{"))
                return s_fail(tp, "expected '{' after else");
            if (s_body(tp, t, true))
                return tp->rc;
        }
        kl_tr_end(t, e);
        /* The if is now the last instruction of the current body. */
        kl_inst_t **arr;
        int *n;
        kl_trace__cur_body(t, &arr, &n);
        return s_decision(tp, &(*arr)[*n - 1]);
    }
    int64_t outs[KL_INST_MAX];
    int nouts = 0;
    if (strchr("lvb", *tp->p) && isdigit((unsigned char)tp->p[1])) {
        do {
            if (nouts >= KL_INST_MAX)
                return s_fail(tp, "too many outputs");
            if (s_rv(tp, &outs[nouts++]))
                return tp->rc;
        } while (s_eat(tp, ","));
        if (!s_eat(tp, "="))
            return s_fail(tp, "expected '=' after the outputs");
    }
    char name[32];
    if (s_ident(tp, name, sizeof name))
        return tp->rc;
    kl_op op;
    if (kl_op_parse(name, &op) || op == KL_OP_IF)
        return s_fail(tp, "unknown instruction");
    if (!s_eat(tp, "("))
        return s_fail(tp, "expected '('");
    if (op == KL_OP_REJECT_IF) {
        char pred[KL_PRED_MAX];
        if (s_pred(tp, pred))
            return tp->rc;
        char e[KL_ERRMSG_LEN];
        if (kl_tr_reject_if(t, pred, e))
            return s_fail(tp, e);
        return KL_OK;
    }
    kl_inst_t in;
    memset(&in, 0, sizeof in);
    in.op = op;
    if (s_args(tp, &in) || s_decision(tp, &in))
        return tp->rc;
    if (in.nin > 0 && op != KL_OP_SPLIT) {
        /* Only split takes literals; "root" is -1 for compute_at. */
        for (int k = 0; k < in.nin; k++)
            if (in.in[k] < -1 || (in.in[k] == -1 && op != KL_OP_COMPUTE_AT &&
                                  op != KL_OP_REVERSE_COMPUTE_AT))
                return s_fail(tp, "this instruction takes no literals");
    }
    memcpy(in.out, outs, (size_t)nouts * sizeof(int64_t));
    in.nout = nouts;
    kl_inst_t *dst = kl_trace__append(t, op);
    *dst = in;
    if (nouts && outs[nouts - 1] >= t->next_rv)
        t->next_rv = outs[nouts - 1] + 1;
    return KL_OK;
}

/* Reads instructions until end of text (top level) or '}' (nested). */
static int s_body(tp_t *tp, kl_trace_t *t, bool nested)
{
    for (;;) {
        s_ws(tp, true);
        while (*tp->p == ';') {
            tp->p++;
            s_ws(tp, true);
        }
        if (!*tp->p) {
            if (nested)
                return s_fail(tp, "expected '}'");
            return KL_OK;
        }
        if (*tp->p == '}') {
            if (!nested)
                return s_fail(tp, "unexpected '}'");
            tp->p++;
            return KL_OK;
        }
        int rc = s_inst(tp, t);
        if (rc)
            return rc;
        s_ws(tp, false);
        if (*tp->p && *tp->p != '\n' && *tp->p != ';' && *tp->p != '}' &&
            *tp->p != '#')
            return s_fail(tp, "expected the end of the instruction");
    }
}

int kl_trace_from_text(const char *text, kl_trace_t **out, char *err)
{
    tp_t tp = {text, text, err, 0};
    char space[64] = "";
    const char *sp = strstr(text, "# space: ");
    if (sp) {
        sp += 9;
        size_t n = strcspn(sp, "\n");
        if (n >= sizeof space)
            n = sizeof space - 1;
        memcpy(space, sp, n);
        space[n] = 0;
    }
    kl_trace_t *t = kl_trace_new(space);
    if (s_body(&tp, t, false)) {
        kl_trace_free(&t);
        return tp.rc ? tp.rc : KL_ERR_INVAL;
    }
    t->next_rv = kl_trace__insts_max_rv(t->insts, t->n) + 1;
    *out = t;
    return KL_OK;
}
