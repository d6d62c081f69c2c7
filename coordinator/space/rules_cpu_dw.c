/* rules_cpu_dw.c - the CPU design space of float depthwise convolutions
 * (kl_dw.h: depthwise_conv2d, NCHW or NHWC, multiplier 1, any stride, padding
 * and dilation; docs/architecture.md, "Depthwise convolutions").
 *
 * A depthwise convolution has one input plane per output plane and a few
 * taps per output (9 or 25): it is bound by loads and by how many vector
 * lanes do useful work, not by a reduction. The generic tiling
 * (rules_cpu.c) vectorizes the output's width (lanes wasted on a 14- or
 * 7-wide row, gathers for a stride of 2) and tests the padding on every
 * read. The program samples first a family (p 0.45 each, and 0.1 for the
 * generic tiling, which stays as a third branch), all three in every
 * program so that mutating that decision moves a trace between them:
 *
 * Row vectors (annotation pragma_dw = 1; codegen_dw.c):
 *     (n . c . yb) yt x0 r s [y1 x1]      y1: RT rows (unrolled),
 *                                         x1: XW = 1..4 vectors (lanes)
 * a task is one channel's rows of one block (yb of them per plane); it
 * packs the input rows it reads once, zero padding materialized and a
 * strided row split into its column phases (even / odd columns for a
 * stride of 2), so that every tap of a vector is one contiguous load with
 * no bounds test; the register tile is RT rows x XW lanes, each input
 * vector loaded once for all the rows it feeds, the weights broadcast.
 * The last vector of a row that does not fill it (14, 7, 28 wide) is
 * stored partially.
 *
 * Channel vectors (annotation pragma_dw = 2):
 *     (n . c0 . yb) yt x0 r s [y1 x1 c1]  c1: one vector of channels,
 *                                         y1 x x1: RT rows x PT pixels
 * the weights packed once (ENTRY_prepare: they are const) to
 * [C/L][R][S][L], the input rows of a task packed to [rows][Wp][L]
 * (channels innermost, padding materialized), the register tile RT x PT
 * output pixels of L channels each, one load per input pixel shared by
 * every tap that reads it; the tile goes back to NCHW lane by lane. It
 * wins where rows are short and channels many (14x14, 7x7). An NHWC
 * workload (layout=NHWC) samples it (p 0.9) or the generic tiling: its
 * rows of one channel would be gathers. The loops are taken in the
 * roles' order (s_loops), whatever the workload's order.
 *
 * Both run the whole epilogue (bias, residual, relu, clip, act=) on the
 * registers before the store. The sampled numbers (RT, the vectors or
 * pixels of a tile, the row blocks yb) are split factors of the trace;
 * codegen_dw.c reads them back from the nest, so a record replays to the
 * same kernel. reject_if keeps the tile within the register file. */
#include <stdio.h>
#include <string.h>

#include "kl_dw.h"
#include "kl_err.h"
#include "kl_space_priv.h"

typedef struct {
    const kl_dw_t *z;
    const kl_target_t *t;
    kl_trace_t *tr;
    char *err;
} dw_rule_t;

/* A categorical over the values of vals that are at most max (at least
 * the first), with their probabilities. */
static int64_t s_pick(dw_rule_t *r, const int64_t *vals, const double *ps,
                      int n, int64_t max)
{
    int64_t v[16];
    double p[16];
    int k = 0;
    for (int i = 0; i < n && k < 16; i++)
        if (i == 0 || vals[i] <= max) {
            v[k] = vals[i];
            p[k++] = ps[i];
        }
    return kl_tr_sample_categorical(r->tr, v, p, k);
}

/* y -> (yb, yt, y1): RT rows a tile, the plane's rows in blocks of yt
 * tiles; the row blocks are 1, 2, 4 or 8 a plane (fewer tiles than
 * blocks: rejected). out: yb, yt, y1. */
static int s_rows(dw_rule_t *r, int64_t ly, int64_t maxrt, int64_t *out)
{
    static const int64_t rt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const double prt[8] = {0.1, 0.15, 0.15, 0.2, 0.1, 0.1, 0.1, 0.1};
    static const int64_t bv[4] = {1, 2, 4, 8};
    static const double pb[4] = {0.4, 0.3, 0.2, 0.1};
    int64_t P = r->z->p;
    int64_t v = s_pick(r, rt, prt, 8, P < maxrt ? P : maxrt);
    int64_t f[2] = {KL_SPLIT_INFER, v}, o[2];
    kl_tr_split(r->tr, ly, f, 2, o);
    out[2] = o[1];
    int64_t b = s_pick(r, bv, pb, 4, P);
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld > l%lld", (long long)b, (long long)o[0]);
    int rc = kl_tr_reject_if(r->tr, pred, r->err);
    int64_t g[2] = {b, KL_SPLIT_INFER};
    kl_tr_split(r->tr, o[0], g, 2, out);
    return rc;
}

/* The six loops in the roles' order n, c, y, x, r, s (kl_dw.h): the
 * naive nest holds the iterators in the workload's order, which an NHWC
 * output changes (n, y, x, c). */
static void s_loops(dw_rule_t *r, int64_t *l)
{
    int64_t g[6];
    kl_tr_get_loops(r->tr, 6, g);
    int pos[6] = {0}, np = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 6; i++)
            for (int k = 0; k < 6; k++)
                if (r->z->it[k] == i && (k >= 4) == (pass == 1))
                    pos[np++] = k;
    for (int j = 0; j < 6; j++)
        l[pos[j]] = g[j];
}

/* The fused parallel loop of the three outer loops, the tile's loops
 * unrolled (inner[0..ni-1], reductions included) and the last one
 * vectorized, the family's annotation. */
static void s_finish(dw_rule_t *r, const int64_t *outer, const int64_t *inner,
                     int ni, int family)
{
    int64_t par = kl_tr_fuse(r->tr, outer, 3);
    kl_tr_parallel(r->tr, par);
    for (int i = 0; i < ni - 1; i++)
        kl_tr_unroll(r->tr, inner[i]);
    kl_tr_vectorize(r->tr, inner[ni - 1]);
    kl_tr_annotate(r->tr, par, "pragma_dw", family);
}

/* Row vectors: (n . c . yb) yt x0 r s [y1 x1]. */
static int s_row_family(dw_rule_t *r)
{
    int64_t l[6], y[3], x[2];
    int L = r->t->vec_lanes;
    s_loops(r, l);
    int64_t xv[4] = {L, 2 * L, 3 * L, 4 * L};
    double px[4] = {0.3, 0.35, 0.15, 0.2};
    int64_t qv = (r->z->q + L - 1) / L * L;
    int64_t xw = s_pick(r, xv, px, 4, qv);
    int64_t f[2] = {KL_SPLIT_INFER, xw};
    kl_tr_split(r->tr, l[3], f, 2, x);
    int rc = s_rows(r, l[2], 8, y);
    char pred[96];
    /* RT rows x XW / L vectors of accumulators, and a vector of input. */
    snprintf(pred, sizeof pred, "v%lld / %d * l%lld > %d", (long long)xw, L,
             (long long)y[2], r->t->vec_regs - 4);
    if (!rc)
        rc = kl_tr_reject_if(r->tr, pred, r->err);
    if (rc)
        return rc;
    int64_t ord[9] = {l[0], l[1], y[0], y[1], x[0], l[4], l[5], y[2], x[1]};
    kl_tr_reorder(r->tr, ord, 9);
    int64_t outer[3] = {l[0], l[1], y[0]}, inner[4] = {l[4], l[5], y[2], x[1]};
    s_finish(r, outer, inner, 4, 1);
    return KL_OK;
}

/* Channel vectors: (n . c0 . yb) yt x0 r s [y1 x1 c1]. */
static int s_chan_family(dw_rule_t *r)
{
    int64_t l[6], y[3], x[2], c[2];
    int L = r->t->vec_lanes;
    s_loops(r, l);
    int64_t fc[2] = {KL_SPLIT_INFER, -(int64_t)L};
    kl_tr_split(r->tr, l[1], fc, 2, c);
    /* Pixels a tile: a few, or the whole of a short row. */
    int64_t pv[8] = {2, 4, 6, 7, 8, 12, 14, 16};
    double pp[8] = {0.1, 0.15, 0.1, 0.15, 0.15, 0.1, 0.15, 0.1};
    int64_t pt = s_pick(r, pv, pp, 8, r->z->q);
    int64_t f[2] = {KL_SPLIT_INFER, pt};
    kl_tr_split(r->tr, l[3], f, 2, x);
    int rc = s_rows(r, l[2], 4, y);
    char pred[96];
    snprintf(pred, sizeof pred, "v%lld * l%lld > %d", (long long)pt,
             (long long)y[2], r->t->vec_regs - 4);
    if (!rc)
        rc = kl_tr_reject_if(r->tr, pred, r->err);
    if (rc)
        return rc;
    int64_t ord[10] = {l[0], c[0], y[0], y[1], x[0],
                       l[4], l[5], y[2], x[1], c[1]};
    kl_tr_reorder(r->tr, ord, 10);
    int64_t outer[3] = {l[0], c[0], y[0]};
    int64_t inner[5] = {l[4], l[5], y[2], x[1], c[1]};
    s_finish(r, outer, inner, 5, 2);
    return KL_OK;
}

int kl_space__cpu_dw_open(const kl_workload_t *w, const kl_target_t *t,
                          kl_trace_t *tr, int *open, char *err)
{
    *open = 0;
    kl_dw_t z;
    if (kl_workload_depthwise(w, &z, NULL) || z.quant || t->vec_lanes < 4 ||
        z.r * z.s > 64)
        return KL_OK;
    dw_rule_t r = {&z, t, tr, err};
    /* NHWC: channel vectors read and write whole vectors of channels;
     * rows of one channel would gather. */
    int64_t vals[3] = {0, 1, 2};
    double ps[3] = {0.1, 0.45, 0.45};
    if (z.nhwc) {
        vals[1] = 2;
        ps[1] = 0.9;
    }
    int64_t v = kl_tr_sample_categorical(tr, vals, ps, z.nhwc ? 2 : 3);
    char pred[48];
    snprintf(pred, sizeof pred, "v%lld == 1", (long long)v);
    int rc = kl_tr_if(tr, pred, err);
    if (!rc)
        rc = s_row_family(&r);
    if (!rc)
        rc = kl_tr_else(tr, err);
    snprintf(pred, sizeof pred, "v%lld == 2", (long long)v);
    if (!rc)
        rc = kl_tr_if(tr, pred, err);
    if (!rc)
        rc = s_chan_family(&r);
    if (!rc)
        rc = kl_tr_else(tr, err);
    *open = rc ? 0 : 2;
    return rc;
}

int kl_space__cpu_qdw(const kl_workload_t *w, const kl_target_t *t,
                      kl_trace_t *tr, char *err)
{
    kl_dw_t z;
    int rc = kl_workload_depthwise(w, &z, err);
    if (rc)
        return rc;
    if (!z.quant || t->vec_lanes < 4 || z.r * z.s > 64)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "depthwise: not a quantized one of at most 64 taps "
                         "on a target of 4 lanes or more");
    dw_rule_t r = {&z, t, tr, err};
    return s_row_family(&r);
}
