/* kl_sched_tz.c - tensorize's match: the loops under a block against an
 * intrinsic's description (kl_intrin.h), for products and convolutions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_sched_priv.h"
#include "kl_util.h"

/* Whether a is exactly iterator it: coef 1, no offset, no division. */
static bool s_plain(const kl_affine_t *a, int niters, int it)
{
    if (a->offset || a->div > 1)
        return false;
    for (int k = 0; k < niters; k++)
        if (a->coef[k] != (k == it))
            return false;
    return true;
}

/* The single iterator a reads (coef 1, no offset or division), or -1. */
static int s_plain_iter(const kl_affine_t *a, int niters)
{
    for (int k = 0; k < niters; k++)
        if (a->coef[k] && s_plain(a, niters, k))
            return k;
    return -1;
}

static int s_tz_block(const kl_sched_t *s, int loop, const kl_intrin_t *in,
                      int n, int k, char *err);

/* The batch iterator when w has the form of a batched product (four
 * iterators, one a reduction, A, B and Y of three dimensions each, and a
 * spatial iterator that is an index (plain) of all three: the batch; where
 * it sits is checked by the match, which names what differs), or -1. */
static int s_batched(const kl_workload_t *w, const kl_access_t *aa,
                     const kl_access_t *ab)
{
    const kl_access_t *a3[3] = {aa, ab, &w->out};
    int nred = 0;
    for (int i = 0; i < w->niters; i++)
        nred += w->iters[i].reduce;
    if (w->niters != 4 || nred != 1)
        return -1;
    for (int i = 0; i < 3; i++)
        if (w->tensors[a3[i]->tensor].ndim != 3)
            return -1;
    for (int it = 0; it < w->niters; it++) {
        bool all = !w->iters[it].reduce;
        for (int i = 0; all && i < 3; i++) {
            bool in = false;
            for (int d = 0; d < 3; d++)
                in = in || s_plain(&a3[i]->idx[d], w->niters, it);
            all = in;
        }
        if (all)
            return it;
    }
    return -1;
}

/* The convolution form (qconv2d NHWC or NCHW, groups 1):
 * Y[.., f, ..] += (X[.., c, ..] - za) * W[.., c, .., f, ..] where f, the
 * output channel, is a plain index of Y and of W and nowhere else; c, the
 * input channel, is a plain index of X (the last one in NHWC, the codegen
 * repacks X per call otherwise) and one index of W; W's other indices are
 * the other reduction iterators (the taps), each once; Y's indices are the
 * spatial iterators, each once; X's other indices are affine in the
 * spatial iterators and taps (no division). Every reduction loop of the
 * nest must sit in the run of loops right above the block: the codegen
 * keeps the whole reduction in the register tile's accumulators
 * (codegen_tensorize_conv.c). */
static int s_tz_match_conv(const kl_sched_t *s, int loop, const kl_intrin_t *in,
                           const kl_access_t *aa, const kl_access_t *ab,
                           kl_tensorize_t *out, char *err)
{
    const kl_workload_t *w = s->w;
    const char *nm = in->name;
    const kl_tensor_t *A = &w->tensors[aa->tensor],
                      *B = &w->tensors[ab->tensor],
                      *Y = &w->tensors[kl_workload_output(w)];
    int nsp = 0, nred = 0;
    for (int i = 0; i < w->niters; i++) {
        nsp += !w->iters[i].reduce;
        nred += w->iters[i].reduce;
    }
    /* f: the one spatial iterator that indexes W; c: the last plain
     * reduction index of X that W has too */
    int f = -1, c = -1;
    bool fy = false;
    for (int d = 0; d < B->ndim; d++) {
        int it = s_plain_iter(&ab->idx[d], w->niters);
        if (it >= 0 && !w->iters[it].reduce)
            f = f < 0 ? it : -2;
    }
    for (int d = 0; f >= 0 && d < Y->ndim; d++)
        fy = fy || s_plain(&w->out.idx[d], w->niters, f);
    for (int d = 0; d < A->ndim; d++) {
        int it = s_plain_iter(&aa->idx[d], w->niters);
        for (int e = 0; it >= 0 && w->iters[it].reduce && e < B->ndim; e++)
            if (s_plain(&ab->idx[e], w->niters, it))
                c = it;
    }
    if (f < 0 || !fy)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: no output channel indexes both %s "
                         "and %s alone (a grouped convolution? groups=1 is "
                         "wanted)",
                         nm, Y->name, B->name);
    if (c < 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: no index of %s is a reduction "
                         "iterator alone that %s has too (the input "
                         "channel; groups=1 wanted)",
                         nm, A->name, B->name);
    bool ok = B->ndim == nred + 1 && Y->ndim == nsp;
    for (int d = 0; ok && d < Y->ndim; d++) {
        int it = s_plain_iter(&w->out.idx[d], w->niters);
        ok = it >= 0 && !w->iters[it].reduce;
        for (int e = 0; ok && e < d; e++)
            ok = s_plain_iter(&w->out.idx[e], w->niters) != it;
    }
    bool hasc = false;
    for (int d = 0; ok && d < B->ndim; d++) {
        int it = s_plain_iter(&ab->idx[d], w->niters);
        ok = it >= 0 && (it == f || w->iters[it].reduce);
        hasc = hasc || it == c;
        for (int e = 0; ok && e < d; e++)
            ok = s_plain_iter(&ab->idx[e], w->niters) != it;
    }
    int nc = 0;
    for (int d = 0; ok && d < A->ndim; d++) {
        if (s_plain(&aa->idx[d], w->niters, c) && !nc++)
            continue;
        ok = aa->idx[d].div == 1 && !aa->idx[d].coef[f] && !aa->idx[d].coef[c];
    }
    if (!ok || !hasc)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: the accesses are not %s[..,c,..], "
                         "%s[taps..,c,f in any order], %s[..,f,..] of a "
                         "convolution",
                         nm, A->name, B->name, Y->name);
    /* Every convolution kernel packs W once, in prepare (a bf16 product's
     * input B is packed per call; a convolution's is not). */
    if (!B->is_const)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: tensor %s is not const (a "
                         "convolution's weights are packed once in prepare)",
                         nm, B->name);
    out->intrin = in->name;
    out->lanes = in->lanes;
    out->red = in->red;
    out->loop = loop;
    out->it_m = -1;
    out->it_n = f;
    out->it_k = c;
    out->ta = aa->tensor;
    out->tb = ab->tensor;
    out->conv = true;
    int rc = s_tz_block(s, loop, in, f, c, err);
    if (rc)
        return rc;
    int hp = kl_sched_loop_pos(s, loop);
    while (hp > 0 && s->loops[hp - 1].reduce)
        hp--;
    for (int p = 0; p < hp; p++)
        if (s->loops[p].reduce && s->loops[p].extent > 1)
            return kl_seterr(err, KL_ERR_INVAL,
                             "tensorize %s: reduction loop %d is above a "
                             "spatial loop: a tensorized convolution keeps "
                             "the whole reduction under the register tile",
                             nm, s->loops[p].id);
    return KL_OK;
}

int kl_sched__tz_match(const kl_sched_t *s, int loop, const kl_intrin_t *in,
                       kl_tensorize_t *out, char *err)
{
    const kl_workload_t *w = s->w;
    const char *nm = in->name;
    memset(out, 0, sizeof *out);
    out->it_b = -1;
    if (s->own)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: the schedule is a Winograd rewrite",
                         nm);
    int nred = 0;
    for (int k = 0; k < w->niters; k++)
        nred += w->iters[k].reduce;
    const kl_expr_t *e = w->body, *ea = NULL, *eb = NULL;
    if (e && e->kind == KL_EX_MUL) {
        ea = e->a;
        eb = e->b;
        if (ea->kind == KL_EX_SUB && ea->a->kind == KL_EX_LOAD &&
            ea->b->kind == KL_EX_CONST) {
            out->za = (int64_t)ea->b->value;
            ea = ea->a;
        }
    }
    bool prod = w->niters == 3 && nred == 1;
    int it_b = ea && ea->kind == KL_EX_LOAD && eb->kind == KL_EX_LOAD
                   ? s_batched(w, &ea->access, &eb->access)
                   : -1;
    bool bat = it_b >= 0;
    if (w->reduce != KL_RED_SUM || !ea || ea->kind != KL_EX_LOAD ||
        eb->kind != KL_EX_LOAD || (!prod && !bat && w->niters < 3))
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: workload %s is not a product "
                         "Y[m,n] += (A[m,k] - za) * B[k,n] nor a convolution "
                         "Y[..,f] += (X[..,c] - za) * W[..,c,f]",
                         nm, w->name ? w->name : "?");
    const kl_access_t *aa = &ea->access, *ab = &eb->access;
    const kl_tensor_t *A = &w->tensors[aa->tensor],
                      *B = &w->tensors[ab->tensor];
    if (A->dtype != in->a_dtype)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: tensor %s is %s, wants %s", nm, A->name,
                         kl_dtype_name(A->dtype), kl_dtype_name(in->a_dtype));
    if (B->dtype != in->b_dtype)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: tensor %s is %s, wants %s", nm, B->name,
                         kl_dtype_name(B->dtype), kl_dtype_name(in->b_dtype));
    /* bf16: a B that is an input (matmul) is packed at each call. */
    if (!B->is_const && in->b_dtype != KL_DT_BF16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: tensor %s is not const (its layout "
                         "%s is packed once in prepare)",
                         nm, B->name, in->layout);
    const kl_tensor_t *Y = &w->tensors[kl_workload_output(w)];
    if (in->acc_dtype == KL_DT_F32 && Y->dtype != KL_DT_F32)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: output %s is %s, wants f32", nm,
                         Y->name, kl_dtype_name(Y->dtype));
    if (!prod && !bat)
        return s_tz_match_conv(s, loop, in, aa, ab, out, err);
    /* A batched product: the batch is the first index of all three, the
     * product's indices follow it (o = 1). */
    int o = bat;
    if (bat && (in->acc_dtype != KL_DT_F32 || in->ntiles))
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: workload %s is a batched product "
                         "(batch %s): only avx512_bf16 tensorizes one",
                         nm, w->name ? w->name : "?", w->iters[it_b].name);
    const kl_access_t *acc3[3] = {aa, ab, &w->out};
    const kl_tensor_t *ten3[3] = {A, B, Y};
    for (int i = 0; bat && i < 3; i++)
        if (!s_plain(&acc3[i]->idx[0], w->niters, it_b))
            return kl_seterr(err, KL_ERR_INVAL,
                             "tensorize %s: the first index of %s is not the "
                             "batch %s (a batched product wants %s[%s,..])",
                             nm, ten3[i]->name, w->iters[it_b].name,
                             ten3[i]->name, w->iters[it_b].name);
    int m = A->ndim == 2 + o ? s_plain_iter(&aa->idx[o], w->niters) : -1;
    int k = A->ndim == 2 + o ? s_plain_iter(&aa->idx[o + 1], w->niters) : -1;
    int b0 = B->ndim == 2 + o ? s_plain_iter(&ab->idx[o], w->niters) : -1;
    int b1 = B->ndim == 2 + o ? s_plain_iter(&ab->idx[o + 1], w->niters) : -1;
    int n = b0 == k ? b1 : b0;
    if (m < 0 || k < 0 || n < 0 || w->iters[m].reduce || !w->iters[k].reduce ||
        w->iters[n].reduce || m == n || m == it_b || n == it_b ||
        (b0 != k && b1 != k) || Y->ndim != 2 + o ||
        !s_plain(&w->out.idx[o], w->niters, m) ||
        !s_plain(&w->out.idx[o + 1], w->niters, n))
        return kl_seterr(err, KL_ERR_INVAL,
                         bat ? "tensorize %s: the accesses are not A[b,m,k], "
                               "B[b,k,n] or B[b,n,k], %s[b,m,n]"
                             : "tensorize %s: the accesses are not A[m,k], "
                               "B[k,n] or B[n,k], %s[m,n]",
                         nm, Y->name);
    out->it_b = it_b;
    out->intrin = in->name;
    out->lanes = in->lanes;
    out->red = in->red;
    out->loop = loop;
    out->it_m = m;
    out->it_n = n;
    out->it_k = k;
    out->ta = aa->tensor;
    out->tb = ab->tensor;
    out->b_nk = b0 == n;
    return s_tz_block(s, loop, in, n, k, err);
}

/* The block under loop: the lanes loop over n, the red loop over k, every
 * loop above stepping n (k) by a multiple of lanes (red), no stages. */
static int s_tz_block(const kl_sched_t *s, int loop, const kl_intrin_t *in,
                      int n, int k, char *err)
{
    const kl_workload_t *w = s->w;
    const char *nm = in->name;
    int pos = kl_sched_loop_pos(s, loop);
    if (pos < 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: loop %d is not in the nest", nm, loop);
    if (s->nloops - pos != 2)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: the block under loop %d has %d loops, "
                         "wants 2 (%s lanes x %s reduction)",
                         nm, loop, s->nloops - pos, w->iters[n].name,
                         w->iters[k].name);
    const int want_it[2] = {n, k};
    const int64_t want_ext[2] = {in->lanes, in->red};
    for (int i = 0; i < 2; i++) {
        const kl_loop_t *l = &s->loops[pos + i];
        const char *wn = w->iters[want_it[i]].name;
        if (l->nparts != 1 || l->parts[0].iter != want_it[i])
            return kl_seterr(err, KL_ERR_INVAL,
                             "tensorize %s: block loop %d runs %s, wants "
                             "dimension %s alone",
                             nm, l->id, w->iters[l->parts[0].iter].name, wn);
        if (l->extent != want_ext[i])
            return kl_seterr(err, KL_ERR_INVAL,
                             "tensorize %s: dimension %s has extent %lld, "
                             "wants %lld",
                             nm, wn, (long long)l->extent,
                             (long long)want_ext[i]);
        if (l->parts[0].stride != 1)
            return kl_seterr(err, KL_ERR_INVAL,
                             "tensorize %s: dimension %s steps by %lld in "
                             "the block, wants 1",
                             nm, wn, (long long)l->parts[0].stride);
        if (l->kind != KL_LOOP_SERIAL)
            return kl_seterr(err, KL_ERR_INVAL,
                             "tensorize %s: block loop %d is %s, wants serial",
                             nm, l->id, kl_loop_kind_name(l->kind));
    }
    for (int i = 0; i < pos; i++)
        for (int p = 0; p < s->loops[i].nparts; p++) {
            const kl_loop_part_t *pt = &s->loops[i].parts[p];
            int64_t step = pt->iter == n   ? in->lanes
                           : pt->iter == k ? in->red
                                           : 1;
            if (pt->stride % step)
                return kl_seterr(err, KL_ERR_INVAL,
                                 "tensorize %s: loop %d steps %s by %lld, not "
                                 "a multiple of %lld",
                                 nm, s->loops[i].id, w->iters[pt->iter].name,
                                 (long long)pt->stride, (long long)step);
        }
    if (s->nstages)
        return kl_seterr(err, KL_ERR_INVAL,
                         "tensorize %s: cache stages are not supported in a "
                         "tensorized nest",
                         nm);
    return KL_OK;
}
