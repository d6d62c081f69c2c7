/* rules_cpu_int.c - the CPU design space of integer workloads
 * (docs/architecture.md, "Integer types and quantized operators" and "The
 * tensorize primitive"): every product and convolution schedule is
 * tensorized with the target's int8 intrinsic (kl_intrin.h).
 *
 *   products (qmatmul, qdense): (mo . no0) mi no1 ko0 ko1 [ni ki]
 *   convolutions (qconv2d NHWC or NCHW, groups 1, any R, S, stride,
 *   pad, dilation), im2col-free (NCHW: the kernel repacks X per call
 *   into a padded NHWC scratch, codegen_tensorize_conv.c; same tilings):
 *       (n . y . xo . fo0), or (fo0 . n . y . xo)   fused, parallel
 *       xi fm                                        register tile
 *       taps (r s) co                                the whole reduction
 *       [fi ci]                                      the intrinsic's block
 *     fi: the lanes (16 output channels for avx512_vnni), ci: 4 input
 *     channels; xi (output pixels along the row, any of 1..8 and the row's
 *     divisors up to 14: a non-divisor leaves a guarded remainder tile)
 *     and fm (channel blocks, a divisor up to 4) sampled, xi x fm at most
 *     24 accumulators (avx2: 12); the order of the parallel outer loops
 *     sampled (pixels outer, or channel blocks outer: a block's packed
 *     weights reused over every pixel of a thread's share).
 *
 * A quantized depthwise convolution (kl_dw.h) takes the depthwise
 * row-vector family in int32 lanes instead (rules_cpu_dw.c,
 * kl_space__cpu_qdw). Anything else integer (grouped convolutions,
 * pooling) is refused with the reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_dw.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_space_priv.h"

/* Try the program on the naive nest: refuse now with tensorize's reason
 * rather than at every sample. Takes tr. */
static int s_try(const kl_workload_t *w, const kl_target_t *t, kl_trace_t *tr,
                 kl_trace_t **out, char *err)
{
    kl_sched_t *s = NULL;
    int rc = kl_sched_create(&s, w, err);
    if (!rc) {
        kl_rng_t rng;
        kl_rng_seed(&rng, 1);
        bool rej = false;
        rc = kl_trace_apply(tr, s, &rng, NULL, &rej, err);
        kl_sched_destroy(&s);
    }
    if (rc) {
        kl_trace_free(&tr);
        char why[KL_ERRMSG_LEN];
        snprintf(why, sizeof why, "%s", err);
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s: %s", t->name, why);
    }
    *out = tr;
    return KL_OK;
}

/* The intrinsic of a CPU target for int8 products: the widest whose
 * feature every CPU of the target has. The features are in the target
 * ("cpu/x86_64-avx512+vnni", kl_target.h); an AVX-512 target without
 * "+vnni" (Skylake-SP) gets the exact AVX2 fallback, which every AVX-512
 * CPU runs. docs/architecture.md, "The tensorize primitive". */
static const kl_intrin_t *s_target_intrin(const kl_target_t *t)
{
    bool avx512 = !strcmp(t->isa, "x86_64-avx512");
    if (avx512 && (t->features & KL_CPU_FEAT_VNNI))
        return kl_intrin_find("avx512_vnni");
    if (!strcmp(t->isa, "x86_64-avx2") && (t->features & KL_CPU_FEAT_AVXVNNI))
        return kl_intrin_find("avx_vnni");
    if (avx512 || !strcmp(t->isa, "x86_64-avx2"))
        return kl_intrin_find("avx2_i8");
    return NULL;
}

/* Integer products (and bf16 ones, rules_cpu_bf16.c): the tensorized
 * tiling
 *     (mo . no0) mi no1 ko0 ko1 [ni ki]
 * or, for a batched product (batch_matmul in=bf16: Y[b,m,n], four
 * iterators), the same under the batch, fused with the outer tiles:
 *     (b . mo . no0) mi no1 ko0 ko1 [ni ki]
 * with [ni ki] the intrinsic's block (ni: its lanes of the output columns,
 * mi x no1 an unrolled register tile of at most 24 (avx2: 12) accumulators,
 * imperfect when N is not a multiple; ki: 4 reduction points, imperfect
 * when K is not), mo . no0 fused and parallel, the row tile mi and the
 * column tile no1 (in lanes) sampled, and the reduction either whole under
 * the row/column tiles (accumulators in registers over all of K) or split
 * into cache blocks ko0 ko1. Anything else integer is refused with the
 * reason tensorize gives. */
int kl_space__cpu_tz_mm(const kl_workload_t *w, const kl_target_t *t,
                        const kl_intrin_t *in, kl_trace_t *tr, char *err)
{
    /* Check the workload with the bare block first, for the message. */
    int64_t l[4], n[2], k[2], m2[2], n2[2], k2[2];
    int nsp = 0;
    for (int i = 0; i < w->niters; i++)
        nsp += !w->iters[i].reduce;
    bool bat = w->niters == 4 && nsp == 3;
    /* before l[] is filled: 3 (4) loops */
    if ((w->niters != 3 || nsp != 2) && !bat)
        return kl_seterr(err, KL_ERR_INTERNAL, "%s: not a product", t->name);
    kl_tr_get_loops(tr, w->niters, l);
    /* Naive nest: spatial iterators in workload order, then k. The column
     * iterator is the output's last index, the batch its first. */
    int nd = w->tensors[kl_workload_output(w)].ndim, itn = -1, itb = -1;
    for (int i = 0; i < w->niters; i++) {
        if (w->out.idx[nd - 1].coef[i])
            itn = i;
        if (bat && w->out.idx[0].coef[i])
            itb = i;
    }
    int64_t lm = -1, ln = -1, lb = -1, lk = l[w->niters - 1];
    for (int i = 0, p = 0; i < w->niters; i++)
        if (!w->iters[i].reduce) {
            if (i == itn)
                ln = l[p];
            else if (i == itb)
                lb = l[p];
            else
                lm = l[p];
            p++;
        }
    if (lm < 0 || ln < 0 || (bat && lb < 0))
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "%s: %s: no output column iterator", t->name,
                         w->name ? w->name : "?");
    int64_t fn[2] = {KL_SPLIT_INFER, -(int64_t)in->lanes};
    int64_t fk[2] = {KL_SPLIT_INFER, -(int64_t)in->red};
    kl_tr_split(tr, ln, fn, 2, n);
    kl_tr_split(tr, lk, fk, 2, k);
    kl_tr_sample_perfect_tile(tr, lm, 2, 8, m2);
    int64_t lm2[2];
    kl_tr_split(tr, lm, m2, 2, lm2);
    kl_tr_sample_perfect_tile(tr, n[0], 2, 4, n2);
    int64_t ln2[2];
    kl_tr_split(tr, n[0], n2, 2, ln2);
    kl_tr_sample_perfect_tile(tr, k[0], 2, 256, k2);
    int64_t lk2[2];
    kl_tr_split(tr, k[0], k2, 2, lk2);
    /* ko0 ko1 under the register tile, as the comment above says: the
     * accumulators stay in registers over both, are finished there and
     * stored with the epilogue. (ko0 above the tile reused nothing, the
     * tile reads the same A rows and B panel either way, and cost an
     * int32 buffer, its reloads and a last epilogue pass.) */
    int64_t order[9] = {lb,     lm2[0], ln2[0], lm2[1], ln2[1],
                        lk2[0], lk2[1], n[1],   k[1]};
    kl_tr_reorder(tr, order + !bat, 9 - !bat);
    int64_t fused = kl_tr_fuse(tr, order + !bat, 2 + bat);
    kl_tr_parallel(tr, fused);
    /* mi x no1 is the register tile: that many accumulators, one weight
     * vector load per no1 and one broadcast per mi per step of k. */
    kl_tr_unroll(tr, lm2[1]);
    kl_tr_unroll(tr, ln2[1]);
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld * v%lld > %d", (long long)m2[1],
             (long long)n2[1], in->lanes == 16 ? 24 : 12);
    int prc = kl_tr_reject_if(tr, pred, err);
    if (!prc)
        kl_tr_tensorize(tr, n[1], in->name);
    return prc;
}

static int s_program_mm(const kl_workload_t *w, const kl_target_t *t,
                        const kl_intrin_t *in, kl_trace_t **out, char *err)
{
    kl_trace_t *tr = kl_trace_new(t->name);
    int rc = kl_space__cpu_tz_mm(w, t, in, tr, err);
    if (rc) {
        kl_trace_free(&tr);
        return rc;
    }
    return s_try(w, t, tr, out, err);
}

/* The tail of one loop order of a convolution: fuse and parallelize the
 * outer loops, unroll the tile, bound it, tensorize. */
static int s_conv_tail(kl_trace_t *tr, const int64_t *order, int norder,
                       int nfuse, int64_t xi, int64_t fm, int64_t xrv,
                       int64_t fmrv, int64_t blk, const kl_intrin_t *in,
                       char *err)
{
    kl_tr_reorder(tr, order, norder);
    int64_t fused = kl_tr_fuse(tr, order, nfuse);
    kl_tr_parallel(tr, fused);
    kl_tr_unroll(tr, xi);
    kl_tr_unroll(tr, fm);
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld * v%lld > %d", (long long)xrv,
             (long long)fmrv, in->lanes == 16 ? 24 : 12);
    int rc = kl_tr_reject_if(tr, pred, err);
    if (!rc)
        kl_tr_tensorize(tr, blk, in->name);
    return rc;
}

/* The single iterator affine index a is (coef 1, no offset or division),
 * or -1. */
static int s_plain(const kl_affine_t *a, int niters)
{
    int it = -1;
    if (a->offset || a->div > 1)
        return -1;
    for (int i = 0; i < niters; i++) {
        if (!a->coef[i])
            continue;
        if (a->coef[i] != 1 || it >= 0)
            return -1;
        it = i;
    }
    return it;
}

/* qconv2d (or conv2d in=bf16, rules_cpu_bf16.c) NHWC or NCHW: the
 * tiling in the comment at the top, appended to tr. */
int kl_space__cpu_tz_conv(const kl_workload_t *w, const kl_target_t *t,
                          const kl_intrin_t *in, kl_trace_t *tr, char *err)
{
    const char *nm = w->name ? w->name : "?";
    int ot = kl_workload_output(w);
    const kl_tensor_t *Y = &w->tensors[ot];
    const kl_expr_t *e = w->body;
    const kl_expr_t *xa = e && e->kind == KL_EX_MUL ? e->a : NULL;
    if (xa && xa->kind == KL_EX_SUB)
        xa = xa->a;
    if (w->reduce != KL_RED_SUM || !xa || xa->kind != KL_EX_LOAD || Y->ndim < 2)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "%s: %s is an integer workload that the CPU design "
                         "space cannot tensorize (only products "
                         "Y[m,n] += (A[m,k] - za) * B[k,n] and NHWC or "
                         "NCHW convolutions Y[..,f,..] += (X[..,c,..] - "
                         "za) * W[..,c,f,..] are)",
                         t->name, nm);
    const kl_tensor_t *X = &w->tensors[xa->access.tensor];
    /* itf: the one spatial iterator that is a plain index of W and of Y
     * (the output channel); itc: a plain reduction index of X that W has
     * too (the input channel); itx: Y's last index other than itf (the
     * output pixel along the row). NHWC and NCHW alike. */
    const kl_expr_t *wl = e->b;
    int itf = -1, itc = -1, itx = -1;
    bool wok = wl && wl->kind == KL_EX_LOAD;
    const kl_tensor_t *W = wok ? &w->tensors[wl->access.tensor] : NULL;
    for (int d = 0; wok && d < W->ndim; d++) {
        int it = s_plain(&wl->access.idx[d], w->niters);
        if (it >= 0 && !w->iters[it].reduce)
            itf = itf < 0 ? it : -2;
    }
    bool fy = false;
    for (int d = 0; itf >= 0 && d < Y->ndim; d++)
        fy = fy || s_plain(&w->out.idx[d], w->niters) == itf;
    for (int d = Y->ndim - 1; fy && d >= 0 && itx < 0; d--) {
        int it = s_plain(&w->out.idx[d], w->niters);
        if (it != itf)
            itx = it;
    }
    for (int d = 0; wok && d < X->ndim; d++) {
        int it = s_plain(&xa->access.idx[d], w->niters);
        for (int k = 0; it >= 0 && w->iters[it].reduce && k < W->ndim; k++)
            if (s_plain(&wl->access.idx[k], w->niters) == it)
                itc = it;
    }
    if (!wok || !fy || itc < 0 || itx < 0 || w->iters[itx].reduce)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "%s: %s is an integer workload that the CPU design "
                         "space cannot tensorize: it tensorizes NHWC and "
                         "NCHW convolutions with groups=1 only (the output "
                         "channel a plain index of Y and W, the input "
                         "channel a plain index of X and W)",
                         t->name, nm);
    int64_t l[KL_IR_MAX_ITERS], lp[KL_IR_MAX_ITERS];
    kl_tr_get_loops(tr, w->niters, l);
    /* the naive nest: spatial iterators in workload order, then the
     * reductions */
    for (int pass = 0, p = 0; pass < 2; pass++)
        for (int i = 0; i < w->niters; i++)
            if (w->iters[i].reduce == (pass == 1))
                lp[i] = l[p++];
    int64_t f2[2], c2[2], fm2[2], lf2[2], x2[2];
    int64_t ff[2] = {KL_SPLIT_INFER, -(int64_t)in->lanes};
    int64_t fc[2] = {KL_SPLIT_INFER, -(int64_t)in->red};
    kl_tr_split(tr, lp[itf], ff, 2, f2);
    kl_tr_split(tr, lp[itc], fc, 2, c2);
    kl_tr_sample_perfect_tile(tr, f2[0], 2, 4, fm2);
    kl_tr_split(tr, f2[0], fm2, 2, lf2);
    /* pixels per tile: 1..8 (a non-divisor of the row leaves a guarded
     * remainder) and the row's divisors up to 14 */
    int64_t Q = w->iters[itx].extent, vals[24];
    double ps[24];
    int nv = 0;
    for (int64_t v = 1; v <= 14 && v <= Q; v++)
        if (v <= 8 || Q % v == 0)
            vals[nv++] = v;
    for (int i = 0; i < nv; i++)
        ps[i] = 1.0 / nv;
    int64_t xrv = kl_tr_sample_categorical(tr, vals, ps, nv);
    int64_t fx[2] = {KL_SPLIT_INFER, xrv};
    kl_tr_split(tr, lp[itx], fx, 2, x2);
    /* the loop order of the outer loops */
    int64_t ov[2] = {0, 1};
    double op[2] = {0.5, 0.5};
    int64_t orv = kl_tr_sample_categorical(tr, ov, op, 2);
    int64_t o[2][KL_SCHED_MAX_LOOPS];
    int no[2] = {0, 0};
    for (int b = 0; b < 2; b++) {
        if (b == 1)
            o[b][no[b]++] = lf2[0];
        for (int i = 0; i < w->niters; i++)
            if (!w->iters[i].reduce && i != itf)
                o[b][no[b]++] = i == itx ? x2[0] : lp[i];
        if (b == 0)
            o[b][no[b]++] = lf2[0];
    }
    int nfuse = no[0];
    for (int b = 0; b < 2; b++) {
        o[b][no[b]++] = x2[1];
        o[b][no[b]++] = lf2[1];
        for (int i = 0; i < w->niters; i++)
            if (w->iters[i].reduce && i != itc)
                o[b][no[b]++] = lp[i];
        o[b][no[b]++] = c2[0];
        o[b][no[b]++] = f2[1];
        o[b][no[b]++] = c2[1];
    }
    char pred[48];
    snprintf(pred, sizeof pred, "v%lld == 0", (long long)orv);
    int rc = kl_tr_if(tr, pred, err);
    for (int b = 0; b < 2 && !rc; b++) {
        rc = s_conv_tail(tr, o[b], no[b], nfuse, x2[1], lf2[1], xrv, fm2[1],
                         f2[1], in, err);
        if (!rc)
            rc = b == 0 ? kl_tr_else(tr, err) : kl_tr_end(tr, err);
    }
    return rc;
}

static int s_program_conv(const kl_workload_t *w, const kl_target_t *t,
                          const kl_intrin_t *in, kl_trace_t **out, char *err)
{
    kl_trace_t *tr = kl_trace_new(t->name);
    int rc = kl_space__cpu_tz_conv(w, t, in, tr, err);
    if (rc) {
        kl_trace_free(&tr);
        return rc;
    }
    return s_try(w, t, tr, out, err);
}

int kl_space__rules_cpu_int(const kl_workload_t *w, const kl_target_t *t,
                            kl_trace_t **out, char *err)
{
    *out = NULL;
    const kl_intrin_t *in = s_target_intrin(t);
    if (!in)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "%s: no int8 intrinsic for this CPU target (the "
                         "CPU design space has integer schedules on "
                         "x86_64-avx512 and x86_64-avx2 only)",
                         t->name);
    kl_dw_t dz;
    if (!strcmp(w->op_kind, "qdepthwise_conv2d") ||
        (kl_workload_depthwise(w, &dz, NULL) == KL_OK && dz.quant)) {
        /* One input channel per output channel: nothing for in->name to
         * sum 4 of; int32 lanes along the output row instead. */
        kl_trace_t *tr = kl_trace_new(t->name);
        char why[KL_ERRMSG_LEN];
        int rc = kl_space__cpu_qdw(w, t, tr, why);
        if (rc) {
            kl_trace_free(&tr);
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "%s: %s is a depthwise convolution the CPU "
                             "design space has no integer schedule for (the "
                             "reference kernel runs it): %s",
                             t->name, w->name ? w->name : "?", why);
        }
        return s_try(w, t, tr, out, err);
    }
    int nsp = 0;
    for (int i = 0; i < w->niters; i++)
        nsp += !w->iters[i].reduce;
    if (w->niters == 3 && nsp == 2)
        return s_program_mm(w, t, in, out, err);
    return s_program_conv(w, t, in, out, err);
}
