/* codegen_pack.c - the loops that fill the C code generator's packed
 * buffers where their stages are attached, ENTRY_prepare for the
 * constant tensors packed once (kl_abi.h), and prefetches into packed
 * buffers. Their layouts and the indices a read uses are chosen below,
 * in codegen_pack_layout.c. */
#include <stdio.h>
#include <string.h>

#include "cg_priv.h"
#include "kl_abi.h"
#include "kl_err.h"

/* A pack before the parallel loop of a parallel kernel is itself shared
 * out over the threads (its outermost loop), in the kernel, not in
 * ENTRY_prepare. */
static void s_root_pragma(cg_t *g, int t)
{
    if (g->pack_pos[t] == -1 && !g->in_prep && g->n > 0 &&
        g->L[0]->kind == KL_LOOP_PARALLEL)
        kl_codegen__c_line(g, "#pragma omp parallel for schedule(static)");
}

/* The window layout: one loop per tensor dimension over the box, the
 * channel block's inner loop innermost. */
static void s_emit_window_pack(cg_t *g, int t, const kl_access_t *a,
                               const int64_t *ilo, const int64_t *ext)
{
    const kl_tensor_t *T = &g->w->tensors[t];
    int64_t e = g->pk_blk_n[t];
    int bd = e > 1 ? g->pk_blk_dim[t] : -1;
    bool saved_lanes = g->lanes_on;
    g->lanes_on = false;
    kl_codegen__c_line(g, "/* pack %s (window%s) */", T->name,
                       bd >= 0 ? ", channel blocks innermost" : "");
    kl_buf_t cond = {0}, src = {0}, dst = {0};
    int64_t tstride = 1, pstride = e;
    if (bd >= 0)
        kl_buf_puts(&dst, "qb");
    for (int d = T->ndim - 1; d >= 0; d--) {
        cg_lin_t in, out;
        kl_codegen__pack_dim_parts(g, a, d, g->pack_pos[t], &in, &out);
        out.c += ilo[d];
        int64_t lo, hi, pext = d == bd ? ext[d] / e : ext[d];
        kl_codegen__lin_range(g, &out, &lo, &hi);
        hi += ext[d] - 1;
        kl_buf_t x = {0};
        kl_codegen__lin_print(g, &out, 0, &x);
        if (d == bd && pext > 1)
            kl_buf_printf(&x, " + q%d * %lld + qb", d, (long long)e);
        else if (d == bd)
            kl_buf_puts(&x, " + qb");
        else if (ext[d] > 1)
            kl_buf_printf(&x, " + q%d", d);
        if (lo < 0 || hi > T->shape[d] - 1)
            kl_buf_printf(&cond, "%s(uint64_t)(%s) < %lldu",
                          cond.len ? " && " : "", x.data,
                          (long long)T->shape[d]);
        kl_buf_printf(&src, "%s(%s) * %lld", src.len ? " + " : "", x.data,
                      (long long)tstride);
        if (pext > 1)
            kl_buf_printf(&dst, "%sq%d * %lld", dst.len ? " + " : "", d,
                          (long long)pstride);
        tstride *= T->shape[d];
        pstride *= pext;
        kl_buf_free(&x);
    }
    int open = 0;
    for (int d = 0; d <= T->ndim; d++) {
        int64_t n = d == T->ndim ? (bd >= 0 ? e : 1)
                    : d == bd    ? ext[d] / e
                                 : ext[d];
        if (n < 2)
            continue;
        if (!open)
            s_root_pragma(g, t);
        if (d == T->ndim)
            kl_codegen__c_line(g, "for (int64_t qb = 0; qb < %lld; ++qb) {",
                               (long long)n);
        else
            kl_codegen__c_line(g, "for (int64_t q%d = 0; q%d < %lld; ++q%d) {",
                               d, d, (long long)n, d);
        g->ind++;
        open++;
    }
    if (cond.len)
        kl_codegen__c_line(g, "pk_%s[%s] = (%s) ? %s[%s] : 0.0f;", T->name,
                           dst.len ? dst.data : "0", cond.data, T->name,
                           src.data);
    else
        kl_codegen__c_line(g, "pk_%s[%s] = %s[%s];", T->name,
                           dst.len ? dst.data : "0", T->name, src.data);
    while (open--) {
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    g->lanes_on = saved_lanes;
    kl_buf_free(&cond);
    kl_buf_free(&src);
    kl_buf_free(&dst);
}

/* The loop layout: one dimension per loop part below the attach point
 * that feeds an index of the tensor, in nest order. */
static void s_emit_loop_pack(cg_t *g, int t, const kl_access_t *a)
{
    const kl_workload_t *w = g->w;
    int pa = g->pack_pos[t];
    bool saved_lanes = g->lanes_on, saved_acc = g->in_acc;
    g->lanes_on = false;
    g->in_acc = false;
    kl_codegen__c_line(g, "/* pack %s */", w->tensors[t].name);
    int open = 0;
    for (int p = pa + 1; p < g->n; p++)
        for (int q = 0; q < g->L[p]->nparts; q++) {
            int si = g->symbase[p] + q;
            cg_sym_t *s = &g->sym[si];
            if (!kl_codegen__pack_layout_sym(g, t, si)) {
                s->st = SYM_CONST;
                s->value = 0;
                continue;
            }
            snprintf(s->name, sizeof s->name, "p%d", si);
            s->st = SYM_VAR;
            if (!open)
                s_root_pragma(g, t);
            kl_codegen__c_line(g, "for (int64_t %s = 0; %s < %lld; ++%s) {",
                               s->name, s->name, (long long)s->extent, s->name);
            g->ind++;
            open++;
        }
    kl_buf_t cond = {0}, idx = {0}, chk = {0}, pidx = {0};
    for (int it = 0; it < w->niters; it++) {
        bool used = false;
        for (int d = 0; d < w->tensors[t].ndim; d++)
            used = used || a->idx[d].coef[it];
        int64_t lo, hi;
        kl_codegen__lin_range(g, &g->it[it], &lo, &hi);
        if (!used || hi < w->iters[it].extent)
            continue;
        if (cond.len)
            kl_buf_puts(&cond, " && ");
        kl_codegen__lin_print(g, &g->it[it], 0, &cond);
        kl_buf_printf(&cond, " < %lld", (long long)w->iters[it].extent);
    }
    kl_codegen__access_check(g, a, 0, false, &chk);
    if (chk.len)
        kl_buf_printf(&cond, "%s%s", cond.len ? " && " : "", chk.data);
    kl_codegen__access_index(g, a, 0, false, &idx);
    cg_lin_t pl;
    kl_codegen__pack_lin(g, a, &pl);
    kl_codegen__lin_print(g, &pl, 0, &pidx);
    if (cond.len)
        kl_codegen__c_line(g, "pk_%s[%s] = (%s) ? %s[%s] : 0.0f;",
                           w->tensors[t].name, pidx.data, cond.data,
                           w->tensors[t].name, idx.data);
    else
        kl_codegen__c_line(g, "pk_%s[%s] = %s[%s];", w->tensors[t].name,
                           pidx.data, w->tensors[t].name, idx.data);
    while (open--) {
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    for (int p = pa + 1; p < g->n; p++)
        kl_codegen__unset_loop(g, p);
    g->lanes_on = saved_lanes;
    g->in_acc = saved_acc;
    kl_buf_free(&cond);
    kl_buf_free(&idx);
    kl_buf_free(&chk);
    kl_buf_free(&pidx);
}

void kl_codegen__emit_packs_at(cg_t *g, int pos)
{
    for (int t = 0; t < g->w->ntensors; t++) {
        if (g->pack_pos[t] != pos || pos == -2 ||
            (pos == -1 && g->pk_prep[t] != g->in_prep))
            continue;
        if (g->pk_window[t])
            s_emit_window_pack(g, t, g->pk_access[t], g->pk_ilo[t],
                               g->pk_ext[t]);
        else
            s_emit_loop_pack(g, t, g->pk_access[t]);
    }
}

/* ENTRY_prepare (kl_abi.h): packs the constant tensors whose pack sits
 * before the parallel loop into one block, once. */
void kl_codegen__emit_prepare(cg_t *g, const char *entry)
{
    const kl_workload_t *w = g->w;
    if (g->nested) /* the Winograd product's: the caller owns the block */
        kl_buf_printf(
            &g->b,
            "\n/* Lays the constant inputs out once, into kl_pre "
            "(args[%d] of\n * %s). */\nstatic void %s" KL_ABI_PREPARE_SUFFIX
            "_into(void *const *args, float "
            "*kl_pre)\n{\n",
            w->ntensors, entry, entry);
    else
        kl_buf_printf(&g->b,
                      "\n/* Lays the constant inputs out once (kl_abi.h): "
                      "only they are\n * read; the block goes to every call "
                      "as args[%d]. */\nvoid *%s" KL_ABI_PREPARE_SUFFIX
                      "(void *const *args)\n{\n",
                      w->ntensors, entry);
    g->ind = 1;
    for (int t = 0; t < w->ntensors; t++)
        if (g->pk_prep[t])
            kl_codegen__c_line(
                g, "const float *restrict %s = (const float *)args[%d];",
                w->tensors[t].name, t);
    if (!g->nested) {
        kl_codegen__c_line(g, "float *kl_pre = kl_alloc_block(%lld);",
                           (long long)(g->prep_elems * 4));
        kl_codegen__c_line(g, "if (!kl_pre)");
        kl_codegen__c_line(g, "    return NULL;");
    }
    for (int t = 0; t < w->ntensors; t++)
        if (g->pk_prep[t])
            kl_codegen__c_line(g, "float *pk_%s = kl_pre + %lld;",
                               w->tensors[t].name, (long long)g->pk_off[t]);
    g->in_prep = true;
    kl_codegen__emit_packs_at(g, -1);
    g->in_prep = false;
    if (!g->nested)
        kl_codegen__c_line(g, "return kl_pre;");
    kl_buf_puts(&g->b, "}\n");
}

bool kl_codegen__has_inner_packs(const cg_t *g)
{
    for (int t = 0; t < g->w->ntensors; t++)
        if (g->pack_pos[t] >= 0)
            return true;
    return false;
}

/* The "prefetch" annotation of the loop at pos: at the top of each of its
 * iterations, prefetch each packed buffer read below it dist floats ahead
 * of where the iteration starts reading it, one line per 16 floats that
 * one iteration reads there (a register tile's panel step; a buffer read
 * over more than 8 lines per iteration is left alone). A prefetch is a
 * hint: an address past the buffer's end does not fault. */
void kl_codegen__emit_prefetch(cg_t *g, int pos, int64_t dist)
{
    for (int t = 0; t < g->w->ntensors; t++) {
        if (g->pack_pos[t] == -2 || g->pack_pos[t] >= pos || !g->pk_access[t])
            continue;
        cg_lin_t f, below;
        kl_codegen__pack_lin(g, g->pk_access[t], &f);
        memset(&below, 0, sizeof below);
        for (int p = pos + 1; p < g->n; p++)
            for (int q = 0; q < g->L[p]->nparts; q++)
                below.k[g->symbase[p] + q] = f.k[g->symbase[p] + q];
        int64_t lo, hi;
        kl_codegen__lin_range(g, &below, &lo, &hi);
        if (hi - lo >= 128)
            continue;
        for (int p = pos + 1; p < g->n; p++)
            kl_codegen__set_loop_const(g, p, 0);
        kl_buf_t base = {0};
        kl_codegen__lin_print(g, &f, 0, &base);
        for (int p = pos + 1; p < g->n; p++)
            kl_codegen__unset_loop(g, p);
        for (int64_t off = lo; off <= hi; off += 16)
            kl_codegen__c_line(
                g, "__builtin_prefetch(pk_%s + (%s) + %lld, 0, 3);",
                g->w->tensors[t].name, base.data, (long long)(dist + off));
        kl_buf_free(&base);
    }
}
