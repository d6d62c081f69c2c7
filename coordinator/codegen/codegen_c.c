/* codegen_c.c - scheduled loop nest -> C11 with GCC/Clang vector
 * extensions and OpenMP (kl_codegen.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_act.h"
#include "cg_priv.h"
#include "kl_err.h"

/* A line made of the given pieces (NULL-terminated): the statements are
 * the generator's hot path, and printf copies long strings slowly. */
static void s_put(cg_t *g, ...)
{
    va_list ap;
    va_start(ap, g);
    kl_codegen__vpieces(&g->b, g->ind, ap);
    va_end(ap);
}

static const char *s_ident(const cg_t *g)
{
    return g->w->reduce == KL_RED_MAX ? "-INFINITY" : "0.0f";
}

static bool s_max(const cg_t *g)
{
    return g->w->reduce == KL_RED_MAX;
}

/* ---- symbols ---- */

static void s_set_loop_var(cg_t *g, int pos, const char *var)
{
    const kl_loop_t *l = g->L[pos];
    for (int q = 0; q < l->nparts; q++) {
        cg_sym_t *s = &g->sym[g->symbase[pos] + q];
        s->st = SYM_VAR;
        if (l->nparts == 1)
            snprintf(s->name, sizeof s->name, "%s", var);
        else
            snprintf(s->name, sizeof s->name, "%s_%d", var, q);
    }
}

/* ---- accumulators ---- */

/* Odometer over the spatial loops below the write cache: sets their
 * symbols to constants; returns the flat accumulator number, or -1 past
 * the end. state holds one counter per acc loop. */
static int64_t s_acc_combo(cg_t *g, int64_t *state, bool first)
{
    if (!first) {
        int i = g->nacc_pos - 1;
        for (; i >= 0; i--) {
            int p = g->acc_pos[i];
            int64_t ext =
                p == g->vpos ? g->L[p]->extent / g->lanes : g->L[p]->extent;
            if (++state[i] < ext)
                break;
            state[i] = 0;
        }
        if (i < 0)
            return -1;
    }
    int64_t flat = 0;
    for (int i = 0; i < g->nacc_pos; i++) {
        int p = g->acc_pos[i];
        int64_t ext =
            p == g->vpos ? g->L[p]->extent / g->lanes : g->L[p]->extent;
        flat = flat * ext + state[i];
        kl_codegen__set_loop_const(
            g, p, p == g->vpos ? state[i] * g->lanes : state[i]);
    }
    return flat;
}

/* "l0 == 0 && l3 == 0" over the reduction loops above the write cache
 * (value at = 0 for first, extent - 1 for last); "" when none. */
static void s_red_cond(cg_t *g, bool last, kl_buf_t *out)
{
    for (int p = 0; p <= g->wc_pos; p++) {
        if (!g->L[p]->reduce || g->L[p]->extent == 1)
            continue;
        if (out->len)
            kl_buf_puts(out, " && ");
        kl_buf_printf(out, "l%d == %lld", p,
                      (long long)(last ? g->L[p]->extent - 1 : 0));
    }
}

static const char *s_vtype(const cg_t *g, char *buf)
{
    if (g->lanes > 1)
        sprintf(buf, "kl_v%d", g->lanes);
    else
        strcpy(buf, "float");
    return buf;
}

/* Accumulator k through the epilogue in vector instructions
 * (kl_codegen__epilogue_vec), then one vector store when the output is
 * contiguous along the vector symbol, else its lanes one by one (a
 * channel-vector tile of an NCHW output). */
static void s_store_vec(cg_t *g, int64_t k, bool vst)
{
    const kl_workload_t *w = g->w;
    const char *on = w->tensors[kl_workload_output(w)].name;
    kl_codegen__c_line(g, "{");
    g->ind++;
    kl_codegen__c_line(g, "kl_v%d xs = acc%lld;", g->lanes, (long long)k);
    if (s_max(g)) /* an empty window's -INFINITY is 0 (a lane mask) */
        kl_codegen__c_line(g,
                           "xs = (kl_v%d)(~(xs == kl_bc%d(-INFINITY)) & "
                           "(kl_m%d)xs);",
                           g->lanes, g->lanes, g->lanes);
    kl_codegen__epilogue_vec(g, "xs");
    for (int e = 0; e < (vst ? 1 : g->lanes); e++) {
        kl_buf_t idx = {0};
        kl_codegen__access_index(g, &w->out, e, false, &idx);
        if (vst)
            kl_codegen__c_line(g, "kl_st%d(&%s[%s], xs);", g->lanes, on,
                               idx.data);
        else
            kl_codegen__c_line(g, "%s[%s] = xs[%d];", on, idx.data, e);
        kl_buf_free(&idx);
    }
    g->ind--;
    kl_codegen__c_line(g, "}");
}

static void s_store_lanes(cg_t *g, int64_t k, bool epi)
{
    char x[32];
    const kl_access_t *o = &g->w->out;
    const char *on = g->w->tensors[kl_workload_output(g->w)].name;
    for (int e = 0; e < g->lanes; e++) {
        kl_buf_t idx = {0};
        kl_codegen__access_index(g, o, e, false, &idx);
        if (g->lanes > 1)
            snprintf(x, sizeof x, "acc%lld[%d]", (long long)k, e);
        else
            snprintf(x, sizeof x, "acc%lld", (long long)k);
        if (!epi) {
            kl_codegen__c_line(g, "%s[%s] = %s;", on, idx.data, x);
        } else {
            kl_codegen__c_line(g, "{");
            g->ind++;
            kl_codegen__c_line(g, "float x = %s;", x);
            if (s_max(g))
                kl_codegen__c_line(g, "x = x == -INFINITY ? 0.0f : x;");
            kl_codegen__epilogue(g, "x", e);
            kl_codegen__c_line(g, "%s[%s] = x;", on, idx.data);
            g->ind--;
            kl_codegen__c_line(g, "}");
        }
        kl_buf_free(&idx);
    }
}

static void s_store_acc(cg_t *g, int64_t k, bool epi)
{
    const kl_access_t *o = &g->w->out;
    cg_lin_t ol;
    bool lin = kl_codegen__access_lin(g, o, false, &ol);
    bool vst = g->lanes > 1 && lin && kl_codegen__lin_vcoef(g, &ol) == 1;
    if (epi && g->lanes > 1) {
        s_store_vec(g, k, vst);
        return;
    }
    if (epi || !vst) {
        s_store_lanes(g, k, epi);
        return;
    }
    kl_buf_t idx = {0};
    kl_codegen__access_index(g, o, 0, false, &idx);
    kl_codegen__c_line(g, "kl_st%d(&%s[%s], acc%lld);", g->lanes,
                       g->w->tensors[kl_workload_output(g->w)].name, idx.data,
                       (long long)k);
    kl_buf_free(&idx);
}

static void s_emit_loop(cg_t *g, int pos);

/* Accumulator k loaded from the output (a reduction resumed: not its
 * first iteration), behind the spatial guards. */
static void s_acc_load(cg_t *g, int64_t k, const char *on)
{
    kl_buf_t gd = {0}, idx = {0};
    kl_codegen__guards(g, true, false, &gd);
    kl_codegen__access_index(g, &g->w->out, 0, false, &idx);
    cg_lin_t ol;
    bool lin = kl_codegen__access_lin(g, &g->w->out, false, &ol);
    if (gd.len) {
        kl_codegen__c_line(g, "if (%s) {", gd.data);
        g->ind++;
    }
    if (g->lanes > 1 && lin && kl_codegen__lin_vcoef(g, &ol) == 1)
        kl_codegen__c_line(g, "acc%lld = kl_ld%d(&%s[%s]);", (long long)k,
                           g->lanes, on, idx.data);
    else if (g->lanes == 1)
        kl_codegen__c_line(g, "acc%lld = %s[%s];", (long long)k, on, idx.data);
    else
        for (int e = 0; e < g->lanes; e++) {
            kl_buf_t ie = {0};
            kl_codegen__access_index(g, &g->w->out, e, false, &ie);
            kl_codegen__c_line(g, "acc%lld[%d] = %s[%s];", (long long)k, e, on,
                               ie.data);
            kl_buf_free(&ie);
        }
    if (gd.len) {
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    kl_buf_free(&gd);
    kl_buf_free(&idx);
}

/* Accumulator k stored behind the spatial guards, through the epilogue
 * when epi and the reduction is at its last iteration (last). */
static void s_acc_store(cg_t *g, int64_t k, bool epi, const kl_buf_t *last)
{
    kl_buf_t gd = {0};
    kl_codegen__guards(g, true, false, &gd);
    if (gd.len) {
        kl_codegen__c_line(g, "if (%s) {", gd.data);
        g->ind++;
    }
    if (epi && last->len) {
        kl_codegen__c_line(g, "if (%s) {", last->data);
        g->ind++;
        s_store_acc(g, k, true);
        g->ind--;
        kl_codegen__c_line(g, "} else {");
        g->ind++;
        s_store_acc(g, k, false);
        g->ind--;
        kl_codegen__c_line(g, "}");
    } else {
        s_store_acc(g, k, epi);
    }
    if (gd.len) {
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    kl_buf_free(&gd);
}

/* The write cache at pos: its accumulators set to the identity (or loaded
 * when the reduction resumes), the loops below, then the stores. */
static void s_emit_acc_region(cg_t *g, int pos)
{
    char vt[16];
    int64_t st[KL_SCHED_MAX_LOOPS] = {0};
    s_vtype(g, vt);
    kl_buf_t first = {0}, last = {0};
    s_red_cond(g, false, &first);
    s_red_cond(g, true, &last);
    const char *on = g->w->tensors[kl_workload_output(g->w)].name;
    char init[48];
    if (g->lanes > 1)
        snprintf(init, sizeof init, "kl_bc%d(%s)", g->lanes, s_ident(g));
    else
        snprintf(init, sizeof init, "%s", s_ident(g));
    for (int64_t k = s_acc_combo(g, st, true); k >= 0;
         k = s_acc_combo(g, st, false))
        kl_codegen__c_line(g, "%s acc%lld = %s;", vt, (long long)k, init);
    if (first.len) {
        kl_codegen__c_line(g, "if (!(%s)) {", first.data);
        g->ind++;
        memset(st, 0, sizeof st);
        for (int64_t k = s_acc_combo(g, st, true); k >= 0;
             k = s_acc_combo(g, st, false))
            s_acc_load(g, k, on);
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    for (int i = 0; i < g->nacc_pos; i++)
        kl_codegen__unset_loop(g, g->acc_pos[i]);
    g->in_acc = true;
    s_emit_loop(g, pos + 1);
    g->in_acc = false;
    memset(st, 0, sizeof st);
    bool epi = g->w->nepi > 0 || s_max(g);
    for (int64_t k = s_acc_combo(g, st, true); k >= 0;
         k = s_acc_combo(g, st, false))
        s_acc_store(g, k, epi, &last);
    for (int i = 0; i < g->nacc_pos; i++)
        kl_codegen__unset_loop(g, g->acc_pos[i]);
    kl_buf_free(&first);
    kl_buf_free(&last);
}

/* ---- the statement ---- */

static int64_t s_acc_index(cg_t *g)
{
    int64_t flat = 0;
    for (int i = 0; i < g->nacc_pos; i++) {
        int p = g->acc_pos[i];
        const cg_sym_t *s = &g->sym[g->symbase[p]];
        int64_t ext = g->L[p]->extent, v = 0;
        for (int q = 0; q < g->L[p]->nparts; q++)
            v += g->sym[g->symbase[p] + q].value *
                 g->sym[g->symbase[p] + q].inner;
        if (p == g->vpos) {
            ext /= g->lanes;
            v = s->value / g->lanes;
        }
        flat = flat * ext + v;
    }
    return flat;
}

static void s_emit_stmt(cg_t *g)
{
    bool vec = g->vpos >= 0 && g->lanes > 1;
    kl_buf_t gd = {0}, val = {0};
    kl_codegen__guards(g, !g->in_acc, true, &gd);
    if (gd.len) {
        kl_codegen__c_line(g, "if (%s) {", gd.data);
        g->ind++;
    }
    kl_codegen__body_value(g, vec, &val);
    const char *upd = s_max(g) ? "max" : NULL;
    if (g->in_acc) {
        int64_t k = s_acc_index(g);
        if (upd)
            kl_codegen__c_line(g, "acc%lld = kl_max%s(acc%lld, %s);",
                               (long long)k,
                               vec ? (g->lanes == 16  ? "16"
                                      : g->lanes == 8 ? "8"
                                                      : "4")
                                   : "f",
                               (long long)k, val.data);
        else {
            char a[32];
            snprintf(a, sizeof a, "acc%lld += ", (long long)k);
            s_put(g, a, val.data, ";", (const char *)NULL);
        }
    } else {
        const char *on = g->w->tensors[kl_workload_output(g->w)].name;
        cg_lin_t ol;
        bool lin = kl_codegen__access_lin(g, &g->w->out, false, &ol);
        kl_buf_t idx = {0};
        kl_codegen__access_index(g, &g->w->out, 0, false, &idx);
        if (!vec) {
            if (upd)
                kl_codegen__c_line(g, "%s[%s] = kl_maxf(%s[%s], %s);", on,
                                   idx.data, on, idx.data, val.data);
            else
                s_put(g, on, "[", idx.data, "] += ", val.data, ";",
                      (const char *)NULL);
        } else if (lin && kl_codegen__lin_vcoef(g, &ol) == 1) {
            if (upd)
                kl_codegen__c_line(
                    g, "kl_st%d(&%s[%s], kl_max%d(kl_ld%d(&%s[%s]), %s));",
                    g->lanes, on, idx.data, g->lanes, g->lanes, on, idx.data,
                    val.data);
            else
                kl_codegen__c_line(
                    g, "kl_st%d(&%s[%s], kl_ld%d(&%s[%s]) + %s);", g->lanes, on,
                    idx.data, g->lanes, on, idx.data, val.data);
        } else {
            kl_codegen__c_line(g, "{");
            g->ind++;
            kl_codegen__c_line(g, "kl_v%d v = %s;", g->lanes, val.data);
            for (int e = 0; e < g->lanes; e++) {
                kl_buf_t ie = {0};
                kl_codegen__access_index(g, &g->w->out, e, false, &ie);
                if (upd)
                    kl_codegen__c_line(g, "%s[%s] = kl_maxf(%s[%s], v[%d]);",
                                       on, ie.data, on, ie.data, e);
                else
                    kl_codegen__c_line(g, "%s[%s] += v[%d];", on, ie.data, e);
                kl_buf_free(&ie);
            }
            g->ind--;
            kl_codegen__c_line(g, "}");
        }
        kl_buf_free(&idx);
    }
    if (gd.len) {
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    kl_buf_free(&gd);
    kl_buf_free(&val);
}

/* ---- loops ---- */

static void s_emit_body(cg_t *g, int pos)
{
    kl_codegen__emit_packs_at(g, pos);
    if (g->wc_pos == pos)
        s_emit_acc_region(g, pos);
    else
        s_emit_loop(g, pos + 1);
}

static void s_emit_loop(cg_t *g, int pos)
{
    if (pos == g->n) {
        s_emit_stmt(g);
        return;
    }
    const kl_loop_t *l = g->L[pos];
    char var[16];
    snprintf(var, sizeof var, "l%d", pos);
    bool acc_here = g->in_acc;
    if (l->kind == KL_LOOP_VECTORIZE) {
        int64_t W = g->lanes, chunks = l->extent / W;
        if (acc_here || chunks == 1) {
            for (int64_t c = 0; c < chunks; c++) {
                kl_codegen__set_loop_const(g, pos, c * W);
                s_emit_body(g, pos);
            }
            kl_codegen__unset_loop(g, pos);
            return;
        }
        kl_codegen__c_line(g, "for (int64_t %s = 0; %s < %lld; %s += %lld) {",
                           var, var, (long long)l->extent, var, (long long)W);
        g->ind++;
        s_set_loop_var(g, pos, var);
        s_emit_body(g, pos);
        kl_codegen__unset_loop(g, pos);
        g->ind--;
        kl_codegen__c_line(g, "}");
        return;
    }
    if ((l->kind == KL_LOOP_UNROLL && acc_here && !l->reduce) ||
        (l->extent == 1 && l->kind != KL_LOOP_PARALLEL)) {
        for (int64_t c = 0; c < l->extent; c++) {
            kl_codegen__set_loop_const(g, pos, c);
            s_emit_body(g, pos);
        }
        kl_codegen__unset_loop(g, pos);
        return;
    }
    if (l->kind == KL_LOOP_PARALLEL)
        kl_codegen__c_line(g, "#pragma omp %s schedule(static)",
                           kl_codegen__has_inner_packs(g) ? "for"
                                                          : "parallel for");
    else if (l->kind == KL_LOOP_UNROLL)
        kl_codegen__c_line(g, "#pragma GCC unroll %lld", (long long)l->extent);
    else if (kl_loop_annot(l, "unroll_max_step") > 0)
        kl_codegen__c_line(g, "#pragma GCC unroll %lld",
                           (long long)kl_loop_annot(l, "unroll_max_step"));
    kl_codegen__c_line(g, "for (int64_t %s = 0; %s < %lld; ++%s) {", var, var,
                       (long long)l->extent, var);
    g->ind++;
    s_set_loop_var(g, pos, var);
    if (l->nparts > 1)
        for (int q = 0; q < l->nparts; q++) {
            const cg_sym_t *s = &g->sym[g->symbase[pos] + q];
            kl_codegen__c_line(g, "const int64_t %s = %s / %lld %% %lld;",
                               s->name, var, (long long)s->inner,
                               (long long)s->extent);
        }
    if (kl_loop_annot(l, "prefetch") > 0)
        kl_codegen__emit_prefetch(g, pos, kl_loop_annot(l, "prefetch"));
    s_emit_body(g, pos);
    kl_codegen__unset_loop(g, pos);
    g->ind--;
    kl_codegen__c_line(g, "}");
}

/* ---- whole function ---- */

/* Output elements from which the passes outside the write cache (the
 * identity fill, the epilogue) are shared by the threads. */
#define KL_CG_PAR_PASS 65536

/* Output set to the reduction's identity (no write cache). */
static void s_emit_prepass(cg_t *g)
{
    const kl_workload_t *w = g->w;
    int o = kl_workload_output(w);
    int64_t n = kl_tensor_numel(&w->tensors[o]);
    if (n >= KL_CG_PAR_PASS)
        kl_codegen__c_line(g, "#pragma omp parallel for schedule(static)");
    kl_codegen__c_line(g, "for (int64_t i = 0; i < %lld; ++i)", (long long)n);
    kl_codegen__c_line(g, "    %s[i] = %s;", w->tensors[o].name, s_ident(g));
}

/* Epilogue (and the MAX fix-up) over the output (no write cache): a naive
 * nest over the spatial iterators. */
static void s_emit_postpass(cg_t *g)
{
    const kl_workload_t *w = g->w;
    cg_t *h = kl_xmalloc(sizeof *h);
    memcpy(h, g, sizeof *h);
    memset(h->it, 0, sizeof h->it);
    h->nsym = 0;
    h->vpos = -1;
    h->lanes = 1;
    h->in_acc = false;
    h->b = (kl_buf_t){0};
    int opened = 0, nsp = 0;
    int64_t total = 1;
    for (int it = 0; it < w->niters; it++)
        if (!w->iters[it].reduce) {
            nsp++;
            total *= w->iters[it].extent;
        }
    /* All but the innermost loop shared by the threads (collapsed: the
     * outer ones are often 1, the batch), the innermost left to the
     * compiler's vectorizer. */
    if (total >= KL_CG_PAR_PASS)
        kl_codegen__c_line(h, "#pragma omp parallel for collapse(%d)",
                           nsp > 1 ? nsp - 1 : 1);
    for (int it = 0; it < w->niters; it++) {
        if (w->iters[it].reduce)
            continue;
        cg_sym_t *s = &h->sym[h->nsym];
        memset(s, 0, sizeof *s);
        s->iter = it;
        s->pos = -1;
        s->stride = s->inner = 1;
        s->extent = w->iters[it].extent;
        s->st = SYM_VAR;
        snprintf(s->name, sizeof s->name, "e%d", it);
        h->it[it].k[h->nsym++] = 1;
        kl_codegen__c_line(h, "for (int64_t e%d = 0; e%d < %lld; ++e%d) {", it,
                           it, (long long)w->iters[it].extent, it);
        h->ind++;
        opened++;
    }
    kl_buf_t idx = {0};
    kl_codegen__access_index(h, &w->out, 0, false, &idx);
    const char *on = w->tensors[kl_workload_output(w)].name;
    kl_codegen__c_line(h, "float x = %s[%s];", on, idx.data);
    if (s_max(h))
        kl_codegen__c_line(h, "x = x == -INFINITY ? 0.0f : x;");
    kl_codegen__epilogue(h, "x", 0);
    kl_codegen__c_line(h, "%s[%s] = x;", on, idx.data);
    kl_buf_free(&idx);
    for (int i = 0; i < opened; i++) {
        h->ind--;
        kl_codegen__c_line(h, "}");
    }
    kl_buf_puts(&g->b, h->b.data);
    kl_buf_free(&h->b);
    free(h);
}

void kl_codegen__emit_function(cg_t *g, const char *entry)
{
    const kl_workload_t *w = g->w;
    int o = kl_workload_output(w);
    if (!g->nested) {
        kl_buf_puts(&g->b, kl_codegen__prelude);
        kl_codegen__act_prelude_for(&g->b, w);
    }
    if (g->prep_elems)
        kl_codegen__emit_prepare(g, entry);
    kl_buf_printf(&g->b, "\n%svoid %s(void *const *args)\n{\n",
                  g->nested ? "static " : "", entry);
    g->ind = 1;
    for (int t = 0; t < w->ntensors; t++)
        kl_codegen__c_line(g, "%sfloat *restrict %s = (%sfloat *)args[%d];",
                           t == o ? "" : "const ", w->tensors[t].name,
                           t == o ? "" : "const ", t);
    if (g->wc_pos == -2)
        s_emit_prepass(g);
    bool par = g->n > 0 && g->L[0]->kind == KL_LOOP_PARALLEL;
    for (int t = 0; t < w->ntensors; t++)
        if (g->pk_prep[t]) {
            kl_codegen__c_line(g, "(void)%s;", w->tensors[t].name);
            kl_codegen__c_line(g, "float *pk_%s = (float *)args[%d] + %lld;",
                               w->tensors[t].name, w->ntensors,
                               (long long)g->pk_off[t]);
        } else if (g->pack_pos[t] != -2 && (g->pack_pos[t] == -1 || !par))
            kl_codegen__c_line(g, "float *pk_%s = kl_alloc(%lld);",
                               w->tensors[t].name,
                               (long long)kl_codegen__pack_elems(g, t));
    kl_codegen__emit_packs_at(g, -1);
    bool region = par && kl_codegen__has_inner_packs(g);
    if (region) {
        kl_codegen__c_line(g, "#pragma omp parallel");
        kl_codegen__c_line(g, "{");
        g->ind++;
        for (int t = 0; t < w->ntensors; t++)
            if (g->pack_pos[t] >= 0)
                kl_codegen__c_line(g, "float *pk_%s = kl_alloc(%lld);",
                                   w->tensors[t].name,
                                   (long long)kl_codegen__pack_elems(g, t));
    }
    if (g->wc_pos == -1)
        s_emit_acc_region(g, -1);
    else
        s_emit_loop(g, 0);
    if (region) {
        for (int t = 0; t < w->ntensors; t++)
            if (g->pack_pos[t] >= 0)
                kl_codegen__c_line(g, "free(pk_%s);", w->tensors[t].name);
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    for (int t = 0; t < w->ntensors; t++)
        if (!g->pk_prep[t] && g->pack_pos[t] != -2 &&
            (g->pack_pos[t] == -1 || !par))
            kl_codegen__c_line(g, "free(pk_%s);", w->tensors[t].name);
    if (g->wc_pos == -2 && (w->nepi > 0 || s_max(g)))
        s_emit_postpass(g);
    kl_buf_puts(&g->b, "}\n");
}
