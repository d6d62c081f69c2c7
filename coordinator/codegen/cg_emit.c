/* cg_emit.c - the emitter under every code generator (cg_emit.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_emit.h"
#include "kl_err.h"

void kl_codegen__indent(kl_buf_t *b, int ind)
{
    static const char sp[] = "                                        ";
    for (int n = 4 * ind; n > 0; n -= 40)
        kl_buf_append(b, sp, (size_t)(n < 40 ? n : 40));
}

void kl_codegen__vline(kl_buf_t *b, int ind, const char *fmt, va_list ap)
{
    kl_codegen__indent(b, ind);
    char small[512];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0)
        abort();
    if ((size_t)n < sizeof small) {
        kl_buf_append(b, small, (size_t)n);
    } else {
        char *s = NULL;
        if (vasprintf(&s, fmt, ap2) < 0)
            abort();
        kl_buf_puts(b, s);
        free(s);
    }
    va_end(ap2);
    kl_buf_append(b, "\n", 1);
}

void kl_codegen__line(kl_buf_t *b, int ind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_codegen__vline(b, ind, fmt, ap);
    va_end(ap);
}

void kl_codegen__vpieces(kl_buf_t *b, int ind, va_list ap)
{
    kl_codegen__indent(b, ind);
    for (const char *p = va_arg(ap, const char *); p;
         p = va_arg(ap, const char *))
        kl_buf_puts(b, p);
    kl_buf_append(b, "\n", 1);
}

void kl_codegen__close(kl_buf_t *b, int *ind)
{
    (*ind)--;
    kl_codegen__line(b, *ind, "}");
}

int kl_codegen__vfail(int *rc, char *err, int code, const char *fmt, va_list ap)
{
    if (*rc)
        return *rc;
    char m[KL_ERRMSG_LEN];
    vsnprintf(m, sizeof m, fmt, ap);
    *rc = code;
    return kl_seterr(err, code, "codegen: %s", m);
}

int kl_codegen__fail(int *rc, char *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = kl_codegen__vfail(rc, err, code, fmt, ap);
    va_end(ap);
    return r;
}

static const kl_codegen__kv_t *s_lookup(const kl_codegen__kv_t *kv,
                                        const char *key, size_t n)
{
    for (; kv->key; kv++)
        if (strlen(kv->key) == n && !memcmp(kv->key, key, n))
            return kv;
    fprintf(stderr, "codegen: template placeholder ${%.*s} has no value\n",
            (int)n, key);
    abort();
}

void kl_codegen__template(kl_buf_t *b, const char *tmpl,
                          const kl_codegen__kv_t *kv)
{
    const char *p = tmpl;
    for (;;) {
        const char *d = strstr(p, "${");
        const char *e = d ? strchr(d + 2, '}') : NULL;
        if (!e) {
            kl_buf_puts(b, p);
            return;
        }
        kl_buf_append(b, p, (size_t)(d - p));
        const kl_codegen__kv_t *v = s_lookup(kv, d + 2, (size_t)(e - d - 2));
        if (v->str) {
            kl_buf_puts(b, v->str);
        } else {
            char num[32];
            int n = snprintf(num, sizeof num, "%lld", v->num);
            kl_buf_append(b, num, (size_t)n);
        }
        p = e + 1;
    }
}
