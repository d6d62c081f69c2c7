/* codegen_pack.c - packed buffers of the C code generator: their layout,
 * their size, the index a read uses and the loops that fill them.
 *
 * A packed input is copied, where its stage is attached, into a buffer
 * private to the thread. Two layouts:
 *  - the loop layout: one dimension per loop part below the attach point
 *    that feeds an index of the tensor, in nest order, so that the
 *    register tile walks it contiguously (matmul panels, conv2d weights
 *    with K innermost); the parts of a fused loop that the tensor does not
 *    depend on (conv2d's row tiles, for the weights) add no copies;
 *  - the window layout, for a tensor read through a window (a dimension
 *    indexed by two iterators or more, conv2d's h + r): the tensor's own
 *    dimensions over the box of indices the loops below read, zero
 *    outside the tensor. The loop layout would copy each input element
 *    R x S times (an im2col); this one copies it once and removes the
 *    padding tests from the body. Used when the box is not larger than
 *    the loop layout.
 * A constant tensor (kl_ir.h) packed before the parallel loop is packed
 * once, by ENTRY_prepare (kl_abi.h), into the block the caller then passes
 * to every call: a deployed model lays its weights out once, at load.
 */
#include <stdio.h>
#include <string.h>

#include "cg_priv.h"
#include "kl_abi.h"
#include "kl_err.h"

const kl_access_t *cg_find_access(const kl_expr_t *e, int t, int *count,
                                  const kl_access_t *first)
{
    if (!e)
        return first;
    if (e->kind == KL_EX_LOAD && e->access.tensor == t) {
        if (!first)
            first = &e->access;
        else if (memcmp(first, &e->access, sizeof *first))
            (*count)++;
    }
    first = cg_find_access(e->a, t, count, first);
    return cg_find_access(e->b, t, count, first);
}

/* Whether symbol si is a dimension of t's loop layout: a part of a loop
 * below the attach point that feeds an iterator t's read uses (a fused
 * loop's other parts do not multiply the layout). */
static bool s_layout_sym(const cg_t *g, int t, int si)
{
    const cg_sym_t *s = &g->sym[si];
    const kl_access_t *a = g->pk_access[t];
    if (s->pos <= g->pack_pos[t] || s->extent < 2)
        return false;
    for (int d = 0; d < g->w->tensors[t].ndim; d++)
        if (a->idx[d].coef[s->iter])
            return true;
    return false;
}

static int64_t s_loop_elems(const cg_t *g, int t)
{
    int64_t n = 1;
    for (int si = 0; si < g->nsym; si++)
        if (s_layout_sym(g, t, si))
            n *= g->sym[si].extent;
    return n;
}

/* Dimension d of a split at the attach point pa: the part over the
 * symbols of loops below it (*in, no constant) and the rest (*out, with
 * the offset). */
static void s_dim_parts(const cg_t *g, const kl_access_t *a, int d, int pa,
                        cg_lin_t *in, cg_lin_t *out)
{
    const kl_affine_t *af = &a->idx[d];
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    out->c = af->offset;
    for (int it = 0; it < g->w->niters; it++)
        if (af->coef[it])
            cg_lin_add(out, &g->it[it], af->coef[it]);
    for (int i = 0; i < g->nsym; i++)
        if (g->sym[i].pos > pa) {
            in->k[i] = out->k[i];
            out->k[i] = 0;
        }
}

/* Whether a's packed buffer takes the window layout; fills, per tensor
 * dimension, the lowest index the loops below the attach point add and
 * the extent of the box. */
static bool s_window(const cg_t *g, const kl_access_t *a, int64_t *ilo,
                     int64_t *ext)
{
    const kl_tensor_t *t = &g->w->tensors[a->tensor];
    if (!kl_access_is_window(g->w, a))
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (a->idx[d].div != 1)
            return false;
    int pa = g->pack_pos[a->tensor];
    int64_t elems = 1;
    for (int d = 0; d < t->ndim; d++) {
        cg_lin_t in, out;
        s_dim_parts(g, a, d, pa, &in, &out);
        int64_t lo = 0, hi = 0;
        for (int i = 0; i < g->nsym; i++) {
            int64_t k = in.k[i], e = g->sym[i].extent - 1;
            lo += k < 0 ? k * e : 0;
            hi += k > 0 ? k * e : 0;
        }
        ilo[d] = lo;
        ext[d] = hi - lo + 1;
        elems *= ext[d];
    }
    return elems <= s_loop_elems(g, a->tensor);
}

/* The channel block of t's window layout: the innermost reduction loop,
 * when it walks, with stride 1, a dimension that only its iterator indexes
 * (conv2d's input channels) and its extent divides the box there. */
static void s_window_block(cg_t *g, int t)
{
    int p = g->n - 1;
    while (p > g->pack_pos[t] && !g->L[p]->reduce)
        p--;
    if (p <= g->pack_pos[t] || g->L[p]->nparts != 1)
        return;
    int si = g->symbase[p], it = g->sym[si].iter, d = -1;
    int64_t e = g->sym[si].extent;
    const kl_access_t *a = g->pk_access[t];
    if (g->sym[si].stride != 1 || e < 2)
        return;
    for (int dd = 0; dd < g->w->tensors[t].ndim; dd++)
        if (a->idx[dd].coef[it]) {
            if (d >= 0)
                return;
            d = dd;
        }
    if (d < 0 || a->idx[d].coef[it] != 1 || g->pk_ext[t][d] % e ||
        g->pk_ilo[t][d] % e)
        return;
    for (int j = 0; j < g->w->niters; j++)
        if (j != it && a->idx[d].coef[j])
            return;
    for (int j = 0; j < g->nsym; j++)
        if (j != si && g->sym[j].iter == it && g->sym[j].pos > g->pack_pos[t] &&
            g->sym[j].stride % e)
            return;
    g->pk_blk_n[t] = e;
    g->pk_blk_dim[t] = d;
    g->pk_blk_sym[t] = si;
}

int cg_pack_setup(cg_t *g)
{
    for (int t = 0; t < g->w->ntensors; t++) {
        int cnt = 0;
        if (g->pack_pos[t] == -2)
            continue;
        const kl_access_t *a = cg_find_access(g->w->body, t, &cnt, NULL);
        if (!a)
            return cg_fail(g, KL_ERR_INVAL, "packed tensor %s is not read",
                           g->w->tensors[t].name);
        if (cnt)
            return cg_fail(g, KL_ERR_UNSUPPORTED,
                           "packed tensor %s is read with different indices",
                           g->w->tensors[t].name);
        g->pk_access[t] = a;
        g->pk_window[t] = s_window(g, a, g->pk_ilo[t], g->pk_ext[t]);
        g->pk_blk_n[t] = 1;
        if (g->pk_window[t])
            s_window_block(g, t);
        if (g->pack_pos[t] == -1 && g->w->tensors[t].is_const) {
            g->pk_prep[t] = true;
            g->pk_off[t] = g->prep_elems;
            g->prep_elems += (cg_pack_elems(g, t) + 15) / 16 * 16;
        }
    }
    return KL_OK;
}

int64_t cg_pack_elems(const cg_t *g, int t)
{
    if (!g->pk_window[t])
        return s_loop_elems(g, t);
    int64_t n = 1;
    for (int d = 0; d < g->w->tensors[t].ndim; d++)
        n *= g->pk_ext[t][d];
    return n;
}

void cg_pack_lin(const cg_t *g, const kl_access_t *a, cg_lin_t *out)
{
    int t = a->tensor;
    int64_t stride = 1;
    memset(out, 0, sizeof *out);
    if (g->pk_window[t]) {
        int64_t e = g->pk_blk_n[t];
        int bd = e > 1 ? g->pk_blk_dim[t] : -1;
        if (bd >= 0) {
            out->k[g->pk_blk_sym[t]] = 1;
            stride = e;
        }
        for (int d = g->w->tensors[t].ndim - 1; d >= 0; d--) {
            cg_lin_t in, rest;
            s_dim_parts(g, a, d, g->pack_pos[t], &in, &rest);
            in.c = -g->pk_ilo[t][d];
            if (d == bd) { /* the block's outer part: (index - c) / e */
                in.k[g->pk_blk_sym[t]] = 0;
                in.c /= e;
                for (int i = 0; i < g->nsym; i++)
                    in.k[i] /= e;
            }
            cg_lin_add(out, &in, stride);
            stride *= d == bd ? g->pk_ext[t][d] / e : g->pk_ext[t][d];
        }
        return;
    }
    for (int si = g->nsym - 1; si >= 0; si--)
        if (s_layout_sym(g, t, si)) {
            out->k[si] += stride;
            stride *= g->sym[si].extent;
        }
}

/* A pack before the parallel loop of a parallel kernel is itself shared
 * out over the threads (its outermost loop), in the kernel, not in
 * ENTRY_prepare. */
static void s_root_pragma(cg_t *g, int t)
{
    if (g->pack_pos[t] == -1 && !g->in_prep && g->n > 0 &&
        g->L[0]->kind == KL_LOOP_PARALLEL)
        cg_line(g, "#pragma omp parallel for schedule(static)");
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
    cg_line(g, "/* pack %s (window%s) */", T->name,
            bd >= 0 ? ", channel blocks innermost" : "");
    kl_buf_t cond = {0}, src = {0}, dst = {0};
    int64_t tstride = 1, pstride = e;
    if (bd >= 0)
        kl_buf_puts(&dst, "qb");
    for (int d = T->ndim - 1; d >= 0; d--) {
        cg_lin_t in, out;
        s_dim_parts(g, a, d, g->pack_pos[t], &in, &out);
        out.c += ilo[d];
        int64_t lo, hi, pext = d == bd ? ext[d] / e : ext[d];
        cg_lin_range(g, &out, &lo, &hi);
        hi += ext[d] - 1;
        kl_buf_t x = {0};
        cg_lin_print(g, &out, 0, &x);
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
            cg_line(g, "for (int64_t qb = 0; qb < %lld; ++qb) {", (long long)n);
        else
            cg_line(g, "for (int64_t q%d = 0; q%d < %lld; ++q%d) {", d, d,
                    (long long)n, d);
        g->ind++;
        open++;
    }
    if (cond.len)
        cg_line(g, "pk_%s[%s] = (%s) ? %s[%s] : 0.0f;", T->name,
                dst.len ? dst.data : "0", cond.data, T->name, src.data);
    else
        cg_line(g, "pk_%s[%s] = %s[%s];", T->name, dst.len ? dst.data : "0",
                T->name, src.data);
    while (open--) {
        g->ind--;
        cg_line(g, "}");
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
    cg_line(g, "/* pack %s */", w->tensors[t].name);
    int open = 0;
    for (int p = pa + 1; p < g->n; p++)
        for (int q = 0; q < g->L[p]->nparts; q++) {
            int si = g->symbase[p] + q;
            cg_sym_t *s = &g->sym[si];
            if (!s_layout_sym(g, t, si)) {
                s->st = SYM_CONST;
                s->value = 0;
                continue;
            }
            snprintf(s->name, sizeof s->name, "p%d", si);
            s->st = SYM_VAR;
            if (!open)
                s_root_pragma(g, t);
            cg_line(g, "for (int64_t %s = 0; %s < %lld; ++%s) {", s->name,
                    s->name, (long long)s->extent, s->name);
            g->ind++;
            open++;
        }
    kl_buf_t cond = {0}, idx = {0}, chk = {0}, pidx = {0};
    for (int it = 0; it < w->niters; it++) {
        bool used = false;
        for (int d = 0; d < w->tensors[t].ndim; d++)
            used = used || a->idx[d].coef[it];
        int64_t lo, hi;
        cg_lin_range(g, &g->it[it], &lo, &hi);
        if (!used || hi < w->iters[it].extent)
            continue;
        if (cond.len)
            kl_buf_puts(&cond, " && ");
        cg_lin_print(g, &g->it[it], 0, &cond);
        kl_buf_printf(&cond, " < %lld", (long long)w->iters[it].extent);
    }
    cg_access_check(g, a, 0, false, &chk);
    if (chk.len)
        kl_buf_printf(&cond, "%s%s", cond.len ? " && " : "", chk.data);
    cg_access_index(g, a, 0, false, &idx);
    cg_lin_t pl;
    cg_pack_lin(g, a, &pl);
    cg_lin_print(g, &pl, 0, &pidx);
    if (cond.len)
        cg_line(g, "pk_%s[%s] = (%s) ? %s[%s] : 0.0f;", w->tensors[t].name,
                pidx.data, cond.data, w->tensors[t].name, idx.data);
    else
        cg_line(g, "pk_%s[%s] = %s[%s];", w->tensors[t].name, pidx.data,
                w->tensors[t].name, idx.data);
    while (open--) {
        g->ind--;
        cg_line(g, "}");
    }
    for (int p = pa + 1; p < g->n; p++)
        cg_unset_loop(g, p);
    g->lanes_on = saved_lanes;
    g->in_acc = saved_acc;
    kl_buf_free(&cond);
    kl_buf_free(&idx);
    kl_buf_free(&chk);
    kl_buf_free(&pidx);
}

void cg_emit_packs_at(cg_t *g, int pos)
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
void cg_emit_prepare(cg_t *g, const char *entry)
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
            cg_line(g, "const float *restrict %s = (const float *)args[%d];",
                    w->tensors[t].name, t);
    if (!g->nested) {
        cg_line(g, "float *kl_pre = kl_alloc_block(%lld);",
                (long long)(g->prep_elems * 4));
        cg_line(g, "if (!kl_pre)");
        cg_line(g, "    return NULL;");
    }
    for (int t = 0; t < w->ntensors; t++)
        if (g->pk_prep[t])
            cg_line(g, "float *pk_%s = kl_pre + %lld;", w->tensors[t].name,
                    (long long)g->pk_off[t]);
    g->in_prep = true;
    cg_emit_packs_at(g, -1);
    g->in_prep = false;
    if (!g->nested)
        cg_line(g, "return kl_pre;");
    kl_buf_puts(&g->b, "}\n");
}

bool cg_has_inner_packs(const cg_t *g)
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
void cg_emit_prefetch(cg_t *g, int pos, int64_t dist)
{
    for (int t = 0; t < g->w->ntensors; t++) {
        if (g->pack_pos[t] == -2 || g->pack_pos[t] >= pos || !g->pk_access[t])
            continue;
        cg_lin_t f, below;
        cg_pack_lin(g, g->pk_access[t], &f);
        memset(&below, 0, sizeof below);
        for (int p = pos + 1; p < g->n; p++)
            for (int q = 0; q < g->L[p]->nparts; q++)
                below.k[g->symbase[p] + q] = f.k[g->symbase[p] + q];
        int64_t lo, hi;
        cg_lin_range(g, &below, &lo, &hi);
        if (hi - lo >= 128)
            continue;
        for (int p = pos + 1; p < g->n; p++)
            cg_set_loop_const(g, p, 0);
        kl_buf_t base = {0};
        cg_lin_print(g, &f, 0, &base);
        for (int p = pos + 1; p < g->n; p++)
            cg_unset_loop(g, p);
        for (int64_t off = lo; off <= hi; off += 16)
            cg_line(g, "__builtin_prefetch(pk_%s + (%s) + %lld, 0, 3);",
                    g->w->tensors[t].name, base.data, (long long)(dist + off));
        kl_buf_free(&base);
    }
}
