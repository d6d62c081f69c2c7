/* codegen_lin.c - the C code generator's linear forms over loop-part
 * symbols, and the symbols' states (cg_priv.h). The bottom of the C
 * generator: every other part of it reads indices through these. */
#include <stdio.h>
#include <string.h>

#include "cg_priv.h"

void kl_codegen__lin_add(cg_lin_t *dst, const cg_lin_t *src, int64_t mult)
{
    dst->c += src->c * mult;
    for (int i = 0; i < CG_MAXSYM; i++)
        dst->k[i] += src->k[i] * mult;
}

static bool s_is_vsym(const cg_t *g, int i)
{
    return g->lanes_on && g->vpos >= 0 && g->sym[i].pos == g->vpos;
}

/* Appends the decimal text of v (printf is the generator's hot spot). */
static void s_put_i64(kl_buf_t *b, int64_t v)
{
    char t[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        t[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        t[n++] = '-';
    char r[24];
    for (int i = 0; i < n; i++)
        r[i] = t[n - 1 - i];
    kl_buf_append(b, r, (size_t)n);
}

void kl_codegen__lin_print(const cg_t *g, const cg_lin_t *f, int lane,
                           kl_buf_t *out)
{
    int64_t c = f->c;
    int nterms = 0;
    for (int i = 0; i < g->nsym; i++) {
        int64_t k = f->k[i];
        if (!k)
            continue;
        const cg_sym_t *s = &g->sym[i];
        if (s_is_vsym(g, i) && lane > 0)
            c += k * lane;
        if (s->st == SYM_CONST) {
            c += k * s->value;
        } else if (s->st == SYM_VAR) {
            if (nterms++)
                kl_buf_append(out, " + ", 3);
            else
                kl_buf_append(out, "(", 1);
            kl_buf_puts(out, s->name);
            if (k != 1) {
                kl_buf_append(out, " * ", 3);
                s_put_i64(out, k);
            }
        } else {
            ((cg_t *)g)->lin_ok = false;
        }
    }
    if (!nterms) {
        s_put_i64(out, c);
    } else {
        if (c) {
            kl_buf_append(out, " + ", 3);
            s_put_i64(out, c);
        }
        kl_buf_append(out, ")", 1);
    }
}

void kl_codegen__lin_range(const cg_t *g, const cg_lin_t *f, int64_t *lo,
                           int64_t *hi)
{
    int64_t a = f->c, b = f->c;
    for (int i = 0; i < g->nsym; i++) {
        int64_t k = f->k[i];
        if (!k)
            continue;
        const cg_sym_t *s = &g->sym[i];
        int64_t slo, shi;
        if (s->st == SYM_CONST) {
            slo = shi = s->value;
            if (s_is_vsym(g, i))
                shi += g->lanes - 1;
        } else {
            slo = 0;
            shi = s->extent - 1;
        }
        a += k > 0 ? k * slo : k * shi;
        b += k > 0 ? k * shi : k * slo;
    }
    *lo = a;
    *hi = b;
}

int64_t kl_codegen__lin_vcoef(const cg_t *g, const cg_lin_t *f)
{
    if (g->vpos < 0 || !g->lanes_on)
        return 0;
    return f->k[g->symbase[g->vpos]];
}

/* ---- symbols ---- */

void kl_codegen__set_loop_const(cg_t *g, int pos, int64_t v)
{
    const kl_loop_t *l = g->L[pos];
    for (int q = 0; q < l->nparts; q++) {
        cg_sym_t *s = &g->sym[g->symbase[pos] + q];
        s->st = SYM_CONST;
        s->value = (v / s->inner) % s->extent;
    }
}

void kl_codegen__unset_loop(cg_t *g, int pos)
{
    const kl_loop_t *l = g->L[pos];
    for (int q = 0; q < l->nparts; q++)
        g->sym[g->symbase[pos] + q].st = SYM_UNSET;
}
