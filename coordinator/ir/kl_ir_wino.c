/* kl_ir_wino.c - recognising a Winograd-able convolution and its derived
 * batched product (kl_wino.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kl_wino.h"

#define NO(...) kl_seterr(err, KL_ERR_UNSUPPORTED, "winograd: " __VA_ARGS__)

/* The iterators with a nonzero coefficient in f: their count, the first
 * two in *a and *b. */
static int s_terms(const kl_workload_t *w, const kl_affine_t *f, int *a, int *b)
{
    int n = 0;
    for (int i = 0; i < w->niters; i++)
        if (f->coef[i]) {
            if (n == 0)
                *a = i;
            else if (n == 1)
                *b = i;
            n++;
        }
    return n;
}

/* f is exactly iterator it (coefficient 1, no offset, no division). */
static bool s_is(const kl_workload_t *w, const kl_affine_t *f, int it)
{
    int a = -1, b = -1;
    return s_terms(w, f, &a, &b) == 1 && a == it && f->coef[it] == 1 &&
           f->offset == 0 && f->div == 1;
}

/* f is out + red + offset with unit coefficients: a window dimension.
 * Returns the reduction iterator, or -1. */
static int s_window(const kl_workload_t *w, const kl_affine_t *f, int out)
{
    int a = -1, b = -1;
    if (s_terms(w, f, &a, &b) != 2 || f->div != 1 || f->coef[a] != 1 ||
        f->coef[b] != 1)
        return -1;
    if (a == out && w->iters[b].reduce)
        return b;
    if (b == out && w->iters[a].reduce)
        return a;
    return -1;
}

int kl_workload_winograd(const kl_workload_t *w, int m, kl_workload_t **out,
                         kl_wino_t *info, char *err)
{
    if (out)
        *out = NULL;
    if (m != 2 && m != 4)
        return NO("output tile %d: only 2 and 4 (F(2x2,3x3), F(4x4,3x3)) "
                  "are supported",
                  m);
    kl_wino_t z;
    memset(&z, 0, sizeof z);
    z.m = m;
    z.alpha = m + 2;
    z.y = kl_workload_output(w);
    if (kl_workload_is_int(w))
        return NO("an integer workload (the transform's fractions are not "
                  "exact in integers)");
    const kl_expr_t *b = w->body;
    if (w->reduce != KL_RED_SUM || !b || b->kind != KL_EX_MUL ||
        b->a->kind != KL_EX_LOAD || b->b->kind != KL_EX_LOAD ||
        w->tensors[z.y].ndim != 4 || w->niters != 7)
        return NO("not a sum of products over a 4-D output");
    for (int d = 0; d < 4; d++) {
        int a = -1, c = -1;
        if (s_terms(w, &w->out.idx[d], &a, &c) != 1 ||
            !s_is(w, &w->out.idx[d], a))
            return NO("output index %d is not one iterator", d);
        z.it[d] = a;
    }
    /* Which load is the input (read through a window)? */
    const kl_access_t *xa = &b->a->access, *wa = &b->b->access;
    if (!kl_access_is_window(w, xa)) {
        const kl_access_t *t = xa;
        xa = wa;
        wa = t;
    }
    z.x = xa->tensor;
    z.wt = wa->tensor;
    const kl_tensor_t *X = &w->tensors[z.x], *W = &w->tensors[z.wt];
    if (X->ndim != 4 || W->ndim != 4 || z.x == z.wt)
        return NO("not a conv2d over 4-D input and weights");
    int c = -1, r = -1, s = -1;
    for (int i = 0; i < w->niters; i++)
        if (w->iters[i].reduce && xa->idx[1].coef[i])
            c = i;
    if (!s_is(w, &xa->idx[0], z.it[0]) || c < 0 || !s_is(w, &xa->idx[1], c) ||
        (r = s_window(w, &xa->idx[2], z.it[2])) < 0 ||
        (s = s_window(w, &xa->idx[3], z.it[3])) < 0 || r == s)
        return NO("input %s is not read as [n, c, y + r - pad, x + s - pad]",
                  X->name);
    if (!s_is(w, &wa->idx[0], z.it[1]) || !s_is(w, &wa->idx[1], c) ||
        !s_is(w, &wa->idx[2], r) || !s_is(w, &wa->idx[3], s))
        return NO("weights %s are not read as [k, c, r, s]", W->name);
    if (w->iters[r].extent != 3 || w->iters[s].extent != 3)
        return NO("a %lldx%lld window (3x3 only)",
                  (long long)w->iters[r].extent, (long long)w->iters[s].extent);
    if (!W->is_const)
        return NO("weights %s are not const (they are transformed once)",
                  W->name);
    if (X->shape[0] < w->iters[z.it[0]].extent ||
        X->shape[1] < w->iters[c].extent ||
        W->shape[0] < w->iters[z.it[1]].extent ||
        W->shape[1] < w->iters[c].extent || W->shape[2] < 3 || W->shape[3] < 3)
        return NO("a read of %s or %s leaves its batch or channel range",
                  X->name, W->name);
    /* The transforms read epilogue tensors directly: every read in range. */
    for (int i = 0; i < w->nepi; i++) {
        const kl_access_t *ea = &w->epi[i].access;
        if (w->epi[i].kind != KL_EPI_ADD_TENSOR &&
            w->epi[i].kind != KL_EPI_MUL_TENSOR)
            continue;
        for (int d = 0; d < w->tensors[ea->tensor].ndim; d++) {
            const kl_affine_t *f = &ea->idx[d];
            int64_t lo = f->offset, hi = f->offset;
            for (int it = 0; it < w->niters; it++) {
                int64_t v = f->coef[it] * (w->iters[it].extent - 1);
                lo += v < 0 ? v : 0;
                hi += v > 0 ? v : 0;
            }
            if (f->div != 1 || lo < 0 || hi >= w->tensors[ea->tensor].shape[d])
                return NO("epilogue read of %s leaves the tensor or divides",
                          w->tensors[ea->tensor].name);
        }
    }
    z.n = w->iters[z.it[0]].extent;
    z.k = w->iters[z.it[1]].extent;
    z.p = w->iters[z.it[2]].extent;
    z.q = w->iters[z.it[3]].extent;
    z.c = w->iters[c].extent;
    z.h = X->shape[2];
    z.w = X->shape[3];
    z.ph = -xa->idx[2].offset;
    z.pw = -xa->idx[3].offset;
    z.th = (z.p + m - 1) / m;
    z.tw = (z.q + m - 1) / m;
    z.tiles = z.n * z.th * z.tw;
    if (info)
        *info = z;
    if (!out)
        return KL_OK;
    long long e = (long long)z.alpha * z.alpha, p = (long long)z.tiles,
              k = (long long)z.k, cc = (long long)z.c;
    char *text = kl_xasprintf(
        "kl_wm[e,p,k] += kl_wv[e,p,c] * kl_wu[e,c,k] where e=%lld, p=%lld, "
        "k=%lld, c=%lld; kl_wv: f32[%lld,%lld,%lld], kl_wu: const "
        "f32[%lld,%lld,%lld], kl_wm: f32[%lld,%lld,%lld]",
        e, p, k, cc, e, p, cc, e, cc, k, e, p, k);
    char perr[KL_ERRMSG_LEN];
    int rc = kl_workload_parse(text, out, perr);
    free(text);
    if (rc)
        return kl_seterr(err, KL_ERR_INTERNAL, "winograd: derived workload: %s",
                         perr);
    snprintf((*out)->op_kind, sizeof(*out)->op_kind, "winograd");
    free((*out)->name);
    (*out)->name = kl_xasprintf("%s_wino%d", w->name ? w->name : "custom", m);
    return KL_OK;
}
