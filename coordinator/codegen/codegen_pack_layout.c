/* codegen_pack_layout.c - packed buffers of the C code generator: their
 * layout, their size and the index a read uses (the loops that fill them:
 * codegen_pack.c).
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
 *    the loop layout, and, for a trivial window (a 1x1 convolution's),
 *    unless the schedule's "loop_layout_T" annotation asks for the loop
 *    layout.
 * A constant tensor (kl_ir.h) packed before the parallel loop is packed
 * once, by ENTRY_prepare (kl_abi.h), into the block the caller then passes
 * to every call: a deployed model lays its weights out once, at load.
 */
#include <stdio.h>
#include <string.h>

#include "cg_priv.h"
#include "kl_abi.h"
#include "kl_err.h"

const kl_access_t *kl_codegen__find_access(const kl_expr_t *e, int t,
                                           int *count, const kl_access_t *first)
{
    if (!e)
        return first;
    if (e->kind == KL_EX_LOAD && e->access.tensor == t) {
        if (!first)
            first = &e->access;
        else if (memcmp(first, &e->access, sizeof *first))
            (*count)++;
    }
    first = kl_codegen__find_access(e->a, t, count, first);
    return kl_codegen__find_access(e->b, t, count, first);
}

/* Whether symbol si is a dimension of t's loop layout: a part of a loop
 * below the attach point that feeds an iterator t's read uses (a fused
 * loop's other parts do not multiply the layout). */
bool kl_codegen__pack_layout_sym(const cg_t *g, int t, int si)
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
        if (kl_codegen__pack_layout_sym(g, t, si))
            n *= g->sym[si].extent;
    return n;
}

/* Dimension d of a split at the attach point pa: the part over the
 * symbols of loops below it (*in, no constant) and the rest (*out, with
 * the offset). */
void kl_codegen__pack_dim_parts(const cg_t *g, const kl_access_t *a, int d,
                                int pa, cg_lin_t *in, cg_lin_t *out)
{
    const kl_affine_t *af = &a->idx[d];
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    out->c = af->offset;
    for (int it = 0; it < g->w->niters; it++)
        if (af->coef[it])
            kl_codegen__lin_add(out, &g->it[it], af->coef[it]);
    for (int i = 0; i < g->nsym; i++)
        if (g->sym[i].pos > pa) {
            in->k[i] = out->k[i];
            out->k[i] = 0;
        }
}

/* Whether a loop of the nest carries "loop_layout_T" for tensor t: its
 * trivial window (kl_access_window_trivial) packed in the loop layout
 * (rules_cpu.c samples it). */
static bool s_loop_layout(const cg_t *g, int t)
{
    char key[32];
    snprintf(key, sizeof key, KL_ANNOT_LOOP_LAYOUT, t);
    for (int p = 0; p < g->n; p++)
        if (kl_loop_annot(g->L[p], key))
            return true;
    return false;
}

/* Whether a's packed buffer takes the window layout; fills, per tensor
 * dimension, the lowest index the loops below the attach point add and
 * the extent of the box. */
static bool s_window(const cg_t *g, const kl_access_t *a, int64_t *ilo,
                     int64_t *ext)
{
    const kl_tensor_t *t = &g->w->tensors[a->tensor];
    if (!kl_access_is_window(g->w, a) ||
        (kl_access_window_trivial(g->w, a) && s_loop_layout(g, a->tensor)))
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (a->idx[d].div != 1)
            return false;
    int pa = g->pack_pos[a->tensor];
    int64_t elems = 1;
    for (int d = 0; d < t->ndim; d++) {
        cg_lin_t in, out;
        kl_codegen__pack_dim_parts(g, a, d, pa, &in, &out);
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

int kl_codegen__pack_setup(cg_t *g)
{
    for (int t = 0; t < g->w->ntensors; t++) {
        int cnt = 0;
        if (g->pack_pos[t] == -2)
            continue;
        const kl_access_t *a =
            kl_codegen__find_access(g->w->body, t, &cnt, NULL);
        if (!a)
            return kl_codegen__c_fail(g, KL_ERR_INVAL,
                                      "packed tensor %s is not read",
                                      g->w->tensors[t].name);
        if (cnt)
            return kl_codegen__c_fail(
                g, KL_ERR_UNSUPPORTED,
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
            g->prep_elems += (kl_codegen__pack_elems(g, t) + 15) / 16 * 16;
        }
    }
    return KL_OK;
}

int64_t kl_codegen__pack_elems(const cg_t *g, int t)
{
    if (!g->pk_window[t])
        return s_loop_elems(g, t);
    int64_t n = 1;
    for (int d = 0; d < g->w->tensors[t].ndim; d++)
        n *= g->pk_ext[t][d];
    return n;
}

void kl_codegen__pack_lin(const cg_t *g, const kl_access_t *a, cg_lin_t *out)
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
            kl_codegen__pack_dim_parts(g, a, d, g->pack_pos[t], &in, &rest);
            in.c = -g->pk_ilo[t][d];
            if (d == bd) { /* the block's outer part: (index - c) / e */
                in.k[g->pk_blk_sym[t]] = 0;
                in.c /= e;
                for (int i = 0; i < g->nsym; i++)
                    in.k[i] /= e;
            }
            kl_codegen__lin_add(out, &in, stride);
            stride *= d == bd ? g->pk_ext[t][d] / e : g->pk_ext[t][d];
        }
        return;
    }
    for (int si = g->nsym - 1; si >= 0; si--)
        if (kl_codegen__pack_layout_sym(g, t, si)) {
            out->k[si] += stride;
            stride *= g->sym[si].extent;
        }
}
