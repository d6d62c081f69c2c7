/* codegen_dw.c - depthwise convolution kernels (kl_dw.h) of the two
 * families of rules_cpu_dw.c, chosen by the parallel loop's pragma_dw
 * annotation; every size (RT rows a tile, its vectors or pixels, the rows
 * of a task) is read back from the scheduled nest.
 *
 * Both families share a task layout: the parallel loop runs over (image,
 * channel or block of L channels, block of rows); a task packs the input
 * rows its output rows read into a per-thread buffer, padding
 * materialized (rows above and below, columns left and right are zeros),
 * then walks its rows RT at a time (the rows left over one at a time) and
 * the row's columns a tile at a time (the last tile narrower). A tile's
 * taps are unrolled: for each input row the tile reads, each input vector
 * is loaded once and multiplied into every accumulator (output row and
 * tap) that it feeds. The epilogue runs on the accumulators (vectors)
 * before the store.
 *
 * Row vectors (pragma_dw = 1): lanes along the output's width. A packed
 * row holds the input row's sw column phases one after the other (phase
 * p: padded columns p, p + sw, ...), each QV + (S-1)dw/sw wide (QV: the
 * width rounded up to whole vectors), so that tap s of output columns x
 * .. x+L-1 is the contiguous load at phase (s dw) % sw, offset x + (s
 * dw) / sw. The weights are scalars broadcast into the multiplies. A
 * last vector past the row's end is stored in part.
 *
 * Channel vectors (pragma_dw = 2): lanes along L channels. ENTRY_prepare
 * packs the const weights to [C/L][R][S][L] (zeros past C); a packed row
 * is [Wp][L], Wp the padded width, so the pixel that output x's tap s
 * reads is the vector at (x sw + s dw) L: one load per input pixel of the
 * tile, whichever taps read it. The results go to NCHW lane by lane (with
 * 16 lanes, staged and transposed). An NHWC workload (kl_dw.h: nhwc) has
 * this family alone: a pixel's L channels are packed as one vector and
 * stored as one (in part for a last block past C).
 *
 * The quantized form (kl_dw.h: qdepthwise_conv2d) takes the row family
 * alone: rows packed as int32 x - za, int32 multiply-adds, and the q-op
 * epilogue in int32 lanes (codegen_dw_q.c), equal to the reference
 * byte for byte.
 *
 * Pooling (kl_dw.h: max_pool2d, avg_pool2d) runs through both families
 * too, without weights: the padding holds -inf for a max (0 for a sum),
 * the accumulators start there, and each tap is a max (or an add) in
 * place of the multiply-add; avg's 1/(R S) is its epilogue.
 *
 * Loops over the data have constant trip counts printed into the source. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_act.h"
#include "cg_priv.h"
#include "kl_abi.h"
#include "kl_dw.h"
#include "kl_err.h"

typedef struct {
    kl_dw_t z;
    int fam;    /* 1: row vectors, 2: channel vectors */
    int L;      /* lanes */
    int64_t rt; /* rows of a register tile */
    int64_t xt; /* lanes (row vectors) or pixels (channel vectors) a tile */
    int64_t yb; /* rows of a task */
    int64_t nb; /* row blocks of a plane */
    int64_t cb; /* channel blocks (the channels for row vectors) */
    int64_t wph, rs; /* row vectors: a phase's and a packed row's floats */
    int64_t wp;      /* channel vectors: a packed row's pixels */
} dwk_t;

/* The annotation's family on the outermost loop of s, 0 when none. */
int kl_codegen__dw_family(const kl_sched_t *s)
{
    return kl_sched_nloops(s)
               ? (int)kl_loop_annot(kl_sched_loop(s, 0), "pragma_dw")
               : 0;
}

/* The extent of the innermost loop part with stride 1 over iterator it
 * below the outermost loop (the register tile's: with a tile of 1 row,
 * the loop of tiles above it has stride 1 too), or 0. */
static int64_t s_inner(const kl_sched_t *s, int it)
{
    for (int p = kl_sched_nloops(s) - 1; p >= 1; p--) {
        const kl_loop_t *l = kl_sched_loop(s, p);
        for (int q = 0; q < l->nparts; q++)
            if (l->parts[q].iter == it && l->parts[q].stride == 1)
                return l->parts[q].extent;
    }
    return 0;
}

/* Reads the family's sizes back from the nest: 0, or the failure. */
static int s_params(cg_t *g, dwk_t *k)
{
    char e[KL_ERRMSG_LEN];
    if (kl_workload_depthwise(g->w, &k->z, e))
        return kl_codegen__c_fail(g, KL_ERR_INVAL, "%s", e);
    const kl_dw_t *z = &k->z;
    const kl_loop_t *l0 = kl_sched_loop(g->s, 0);
    k->fam = kl_codegen__dw_family(g->s);
    k->L = g->t->vec_lanes;
    k->rt = s_inner(g->s, z->it[2]);
    k->xt = s_inner(g->s, z->it[3]);
    if (k->fam == 2)
        k->L = (int)s_inner(g->s, z->it[1]);
    if ((k->fam != 1 && k->fam != 2) || (z->nhwc && k->fam != 2) ||
        l0->kind != KL_LOOP_PARALLEL || l0->nparts != 3 ||
        l0->parts[0].iter != z->it[0] || l0->parts[1].iter != z->it[1] ||
        l0->parts[2].iter != z->it[2] || k->rt < 1 || k->xt < 1 ||
        (k->L != 4 && k->L != 8 && k->L != 16) || (k->fam == 1 && k->xt % k->L))
        return kl_codegen__c_fail(
            g, KL_ERR_INVAL,
            "depthwise: the nest is not one of rules_cpu_dw.c's families");
    if (z->quant && k->fam != 1)
        return kl_codegen__c_fail(
            g, KL_ERR_INVAL,
            "depthwise: the quantized form has the row-vector family only");
    k->yb = l0->parts[2].stride;
    k->nb = l0->parts[2].extent;
    k->cb = l0->parts[1].extent;
    int64_t qv = (z->q + k->L - 1) / k->L * k->L;
    k->wph = qv + (z->s - 1) * z->dw / z->sw;
    k->rs = z->sw * k->wph;
    /* The pixels the taps read, and at least the whole input row the
     * pack copies (a stride-2 window of 2 over 11 columns reads 10). */
    k->wp = (z->q - 1) * z->sw + (z->s - 1) * z->dw + 1;
    if (k->wp < z->pw + z->w)
        k->wp = z->pw + z->w;
    return KL_OK;
}

/* Channel vectors with 16 lanes: the staging rows' pixels (the width
 * in whole vectors). */
static int64_t s_qx(const dwk_t *k)
{
    return (k->z.q + 15) / 16 * 16;
}

/* Channel vectors with 16 lanes: the task's staged rows back to NCHW, 16
 * pixels x 16 channels through kl_tr16, the first nl channels. */
static void s_unstage(cg_t *g, const dwk_t *k, const char *nl)
{
    const kl_dw_t *z = &k->z;
    long long Q = z->q, PQ = z->p * z->q, QX = s_qx(k);
    kl_codegen__c_line(g, "for (int64_t yy = 0; yy < y_hi - y_lo; ++yy) {");
    g->ind++;
    kl_codegen__c_line(
        g, "float *kl_yr = %s + ((n * %lld + c) * %lld + y_lo + yy) * %lld;",
        g->w->tensors[z->y].name, (long long)z->c, (long long)z->p, Q);
    kl_codegen__c_line(g, "for (int64_t x0 = 0; x0 < %lld; x0 += 16) {", Q);
    g->ind++;
    kl_codegen__c_line(g, "kl_v16 v[16];");
    kl_codegen__c_line(g, "for (int l = 0; l < 16; ++l)");
    kl_codegen__c_line(
        g, "    v[l] = kl_ld16(kl_ob + (yy * %lld + x0 + l) * 16);", QX);
    kl_codegen__c_line(g, "kl_tr16(v);");
    kl_codegen__c_line(g, "for (int64_t l = 0; l < %s; ++l)", nl);
    if (Q % 16 == 0)
        kl_codegen__c_line(g, "    kl_st16(kl_yr + l * %lld + x0, v[l]);", PQ);
    else
        kl_codegen__c_line(g,
                           "    memcpy(kl_yr + l * %lld + x0, &v[l], "
                           "(size_t)kl_mini(16, %lld - x0) * 4);",
                           PQ, Q);
    g->ind--;
    kl_codegen__c_line(g, "}");
    g->ind--;
    kl_codegen__c_line(g, "}");
}

/* The packed rows' element type: (x - za) as int32 for the quantized
 * form, else float. */
static const char *s_bt(const dwk_t *k)
{
    return k->z.quant ? "int32_t" : "float";
}

/* Input rows a task of yb output rows reads. */
static int64_t s_task_rows(const dwk_t *k)
{
    return (k->yb - 1) * k->z.sh + (k->z.r - 1) * k->z.dh + 1;
}

/* The flat index of an epilogue read a over the variables n, c, y, x
 * (the output's iterators), into out; *fc gets the index's step per unit
 * of iterator vit. */
static void s_index(const kl_workload_t *w, const kl_dw_t *z,
                    const kl_access_t *a, int vit, kl_buf_t *out, int64_t *fc)
{
    static const char *names[4] = {"n", "c", "y", "x"};
    const kl_tensor_t *t = &w->tensors[a->tensor];
    int64_t st = 1;
    *fc = 0;
    kl_buf_puts(out, "0");
    for (int d = t->ndim - 1; d >= 0; d--) {
        kl_buf_printf(out, " + %lld * (%lld", (long long)st,
                      (long long)a->idx[d].offset);
        for (int v = 0; v < 4; v++)
            if (a->idx[d].coef[z->it[v]])
                kl_buf_printf(out, " + %lld * %s",
                              (long long)a->idx[d].coef[z->it[v]], names[v]);
        kl_buf_puts(out, ")");
        *fc += a->idx[d].coef[vit] * st;
        st *= t->shape[d];
    }
}

/* The epilogue on the vector var (L lanes along iterator vit, of which
 * the first nl, a C expression, are outputs; full: all L are). */
static void s_epilogue(cg_t *g, const dwk_t *k, const char *var, int vit,
                       const char *nl, bool full)
{
    const kl_workload_t *w = g->w;
    int L = k->L;
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        kl_buf_t a = {0};
        switch (ep->kind) {
        case KL_EPI_ADD_TENSOR:
        case KL_EPI_MUL_TENSOR: {
            int64_t fc;
            char op = ep->kind == KL_EPI_ADD_TENSOR ? '+' : '*';
            const char *tn = w->tensors[ep->access.tensor].name;
            s_index(w, &k->z, &ep->access, vit, &a, &fc);
            if (!fc || (fc == 1 && full)) {
                kl_buf_t tv = {0};
                kl_buf_printf(&tv, !fc ? "kl_bc%d(%s[%s])" : "kl_ld%d(%s + %s)",
                              L, tn, a.data);
                kl_codegen__epilogue_vec_op(g, ep, var, L, tv.data);
                kl_buf_free(&tv);
            } else {
                kl_codegen__c_line(g, "{");
                kl_codegen__c_line(g, "    kl_v%d kl_e = kl_bc%d(0.0f);", L, L);
                kl_codegen__c_line(g, "    for (int64_t e = 0; e < %s; ++e)",
                                   nl);
                kl_codegen__c_line(g, "        kl_e[e] = %s[%s + e * %lld];",
                                   tn, a.data, (long long)fc);
                kl_codegen__c_line(g, "    %s = %s %c kl_e;", var, var, op);
                kl_codegen__c_line(g, "}");
            }
            break;
        }
        default: /* relu, clip, the constants, the activations */
            kl_codegen__epilogue_vec_op(g, ep, var, L, NULL);
            break;
        }
        kl_buf_free(&a);
    }
}

/* Whether output row j of a tile reads input row i of it through tap
 * row r (*r). */
static bool s_tap_row(const dwk_t *k, int64_t i, int64_t j, int64_t *r)
{
    int64_t d = i - j * k->z.sh;
    if (d < 0 || d % k->z.dh)
        return false;
    *r = d / k->z.dh;
    return *r < k->z.r;
}

/* Channel vectors: a tile's pixel (y, x) of L channels, after its
 * epilogue, to NHWC: one vector (the first nl lanes of the last block);
 * to NCHW: with 16 lanes into the task's staging rows (kl_ob,
 * [rows][QX][16]) that s_unstage turns back; lane by lane otherwise. */
static void s_store_chan(cg_t *g, const dwk_t *k, const char *var,
                         const char *nl)
{
    if (k->z.nhwc && k->z.c % k->L == 0) {
        kl_codegen__c_line(g, "kl_st%d(kl_o, %s);", k->L, var);
        return;
    }
    if (k->z.nhwc) {
        kl_codegen__c_line(g, "memcpy(kl_o, &%s, (size_t)%s * 4);", var, nl);
        return;
    }
    if (k->L == 16) {
        kl_codegen__c_line(g, "(void)kl_o;");
        kl_codegen__c_line(g,
                           "kl_st16(kl_ob + ((y - y_lo) * %lld + x) * 16, %s);",
                           (long long)s_qx(k), var);
        return;
    }
    kl_codegen__c_line(g, "for (int64_t l = 0; l < %s; ++l)", nl);
    kl_codegen__c_line(g, "    kl_o[l * %lld] = %s[l];",
                       (long long)(k->z.p * k->z.q), var);
}

/* One tap into accumulator a<j>_<v> from the input vector kl_t: times
 * the weight at kl_w + w (a scalar, or a vector when vw), or a max or an
 * add for a pooling. */
static void s_tap(kl_buf_t *b, const dwk_t *k, int64_t j, int64_t v, int64_t w,
                  bool vw)
{
    long long jj = (long long)j, vv = (long long)v;
    if (k->z.pool == 1)
        kl_buf_printf(b, " a%lld_%lld = kl_max%d(a%lld_%lld, kl_t);", jj, vv,
                      k->L, jj, vv);
    else if (k->z.pool)
        kl_buf_printf(b, " a%lld_%lld += kl_t;", jj, vv);
    else if (vw)
        kl_buf_printf(b, " a%lld_%lld += kl_t * kl_ld%d(kl_w + %lld);", jj, vv,
                      k->L, (long long)w);
    else if (k->z.quant)
        kl_buf_printf(b, " a%lld_%lld += kl_t * (int32_t)kl_w[%lld];", jj, vv,
                      (long long)w);
    else
        kl_buf_printf(b, " a%lld_%lld += kl_t * kl_w[%lld];", jj, vv,
                      (long long)w);
}

/* One register tile: nr output rows from y0, nv vectors (row vectors)
 * or pixels (channel vectors) from x0, the last vector's lanes (row
 * vectors) last; loads, multiply-adds, epilogue, stores. */
static void s_tile(cg_t *g, const dwk_t *k, int64_t nr, int64_t nv,
                   int64_t last)
{
    const kl_dw_t *z = &k->z;
    int L = k->L;
    bool row = k->fam == 1;
    kl_codegen__c_line(g, "{");
    g->ind++;
    for (int64_t j = 0; j < nr; j++)
        for (int64_t v = 0; v < nv; v++)
            if (z->quant)
                kl_codegen__c_line(g, "kl_m%d a%lld_%lld = {0};", L,
                                   (long long)j, (long long)v);
            else
                kl_codegen__c_line(g, "kl_v%d a%lld_%lld = kl_bc%d(%s);", L,
                                   (long long)j, (long long)v, L,
                                   z->pool == 1 ? "-INFINITY" : "0.0f");
    int64_t nin = (nr - 1) * z->sh + (z->r - 1) * z->dh + 1;
    /* Input columns (channel vectors: pixels past the tile's first
     * one's x0 sw) a tile reads; row vectors: taps x vectors. */
    int64_t ncol = row ? z->s * nv : (nv - 1) * z->sw + (z->s - 1) * z->dw + 1;
    for (int64_t i = 0; i < nin; i++) {
        for (int64_t u = 0; u < ncol; u++) {
            kl_buf_t fma = {0};
            for (int64_t j = 0; j < nr; j++) {
                int64_t r;
                if (!s_tap_row(k, i, j, &r))
                    continue;
                if (row) {
                    int64_t s = u / nv, v = u % nv;
                    s_tap(&fma, k, j, v, (r * z->s + s), false);
                    continue;
                }
                for (int64_t p = 0; p < nv; p++) {
                    int64_t s = (u - p * z->sw) / z->dw;
                    if (u < p * z->sw || (u - p * z->sw) % z->dw || s >= z->s)
                        continue;
                    s_tap(&fma, k, j, p, (r * z->s + s) * L, true);
                }
            }
            if (!fma.len) {
                kl_buf_free(&fma);
                continue;
            }
            int64_t off;
            if (row) {
                int64_t s = u / nv, v = u % nv;
                off = i * k->rs + (s * z->dw) % z->sw * k->wph +
                      s * z->dw / z->sw + v * L;
            } else {
                off = (i * k->wp + u) * L;
            }
            kl_codegen__c_line(g,
                               "{ kl_%c%d kl_t = kl_ld%s%d(kl_b + %lld);%s }",
                               z->quant ? 'm' : 'v', L, z->quant ? "i" : "", L,
                               (long long)off, fma.data);
            kl_buf_free(&fma);
        }
    }
    const char *on = g->w->tensors[z->y].name;
    char nl[32], var[48];
    for (int64_t j = 0; j < nr; j++)
        for (int64_t v = 0; v < nv; v++) {
            kl_codegen__c_line(g, "{");
            g->ind++;
            snprintf(var, sizeof var, "a%lld_%lld", (long long)j, (long long)v);
            kl_codegen__c_line(g, "const int64_t y = y0 + %lld, x = x0 + %lld;",
                               (long long)j, (long long)(row ? v * L : v));
            kl_codegen__c_line(g, "(void)y;");
            if (z->nhwc)
                kl_codegen__c_line(g,
                                   "float *kl_o = %s + ((n * %lld + y) * %lld "
                                   "+ x) * %lld + c;",
                                   on, (long long)z->p, (long long)z->q,
                                   (long long)z->c);
            else
                kl_codegen__c_line(
                    g,
                    "%s *kl_o = %s + ((n * %lld + c) * %lld + y) * %lld + x;",
                    kl_dtype_ctype(g->w->tensors[z->y].dtype), on,
                    (long long)z->c, (long long)z->p, (long long)z->q);
            if (row && z->quant) {
                kl_codegen__dw_qstore(g, L, z->r * z->s, var,
                                      v == nv - 1 ? last : L);
            } else if (row) {
                int64_t n = v == nv - 1 ? last : L;
                snprintf(nl, sizeof nl, "%lld", (long long)n);
                s_epilogue(g, k, var, z->it[3], nl, n == L);
                if (n == L)
                    kl_codegen__c_line(g, "kl_st%d(kl_o, %s);", L, var);
                else
                    kl_codegen__c_line(g, "memcpy(kl_o, &%s, %lld);", var,
                                       (long long)n * 4);
            } else {
                bool full = z->c % L == 0;
                snprintf(nl, sizeof nl, full ? "%d" : "kl_nl", L);
                s_epilogue(g, k, var, z->it[1], nl, full);
                s_store_chan(g, k, var, nl);
            }
            g->ind--;
            kl_codegen__c_line(g, "}");
        }
    g->ind--;
    kl_codegen__c_line(g, "}");
}

/* The tiles of nr rows from y0 along a whole output row. */
static void s_row_tiles(cg_t *g, const dwk_t *k, int64_t nr)
{
    const kl_dw_t *z = &k->z;
    bool row = k->fam == 1;
    int64_t step = row ? k->xt : k->xt * z->sw * k->L, nf = z->q / k->xt,
            rem = z->q % k->xt;
    kl_codegen__c_line(g, "const %s *kl_b0 = kl_buf + (y0 - y_lo) * %lld;",
                       s_bt(k),
                       (long long)(z->sh * (row ? k->rs : k->wp * k->L)));
    kl_codegen__c_line(g, "for (int64_t x0 = 0; x0 < %lld; x0 += %lld) {",
                       (long long)(nf * k->xt), (long long)k->xt);
    g->ind++;
    kl_codegen__c_line(g, "const %s *kl_b = kl_b0 + x0 / %lld * %lld;", s_bt(k),
                       (long long)k->xt, (long long)step);
    s_tile(g, k, nr, row ? k->xt / k->L : k->xt, k->L);
    g->ind--;
    kl_codegen__c_line(g, "}");
    if (!rem)
        return;
    kl_codegen__c_line(g, "{");
    g->ind++;
    kl_codegen__c_line(g, "const int64_t x0 = %lld;", (long long)(nf * k->xt));
    kl_codegen__c_line(g, "const %s *kl_b = kl_b0 + %lld;", s_bt(k),
                       (long long)(nf * step));
    if (row)
        s_tile(g, k, nr, (rem + k->L - 1) / k->L,
               rem - (rem - 1) / k->L * k->L);
    else
        s_tile(g, k, nr, rem, k->L);
    g->ind--;
    kl_codegen__c_line(g, "}");
}

/* n floats of padding at kl_d + off: zeros, or -inf for a max pooling. */
static void s_pad(cg_t *g, const dwk_t *k, long long off, long long n)
{
    if (k->z.pool == 1)
        kl_codegen__c_line(g,
                           "for (int64_t j = 0; j < %lld; ++j) kl_d[%lld + j] "
                           "= -INFINITY;",
                           n, off);
    else
        kl_codegen__c_line(g, "memset(kl_d + %lld, 0, %lld);", off, n * 4);
}

/* Row vectors: packs input row yi (kl_d) as its column phases. */
static void s_pack_row_phases(cg_t *g, const dwk_t *k)
{
    const kl_dw_t *z = &k->z;
    for (int64_t ph = 0; ph < z->sw; ph++) {
        /* Phase column j is input column j sw + ph - pw. */
        int64_t lo = 0, hi = 0;
        while (lo < k->wph && lo * z->sw + ph - z->pw < 0)
            lo++;
        hi = lo;
        while (hi < k->wph && hi * z->sw + ph - z->pw < z->w)
            hi++;
        long long base = ph * k->wph;
        if (lo)
            s_pad(g, k, base, (long long)lo);
        if (z->quant)
            kl_codegen__c_line(
                g,
                "for (int64_t j = %lld; j < %lld; ++j) kl_d[%lld "
                "+ j] = (int32_t)kl_s[j * %lld + %lld] - %lld;",
                (long long)lo, (long long)hi, base, (long long)z->sw,
                (long long)(ph - z->pw), (long long)z->za);
        else if (z->sw == 1)
            kl_codegen__c_line(g, "memcpy(kl_d + %lld, kl_s + %lld, %lld);",
                               base + lo, (long long)(lo + ph - z->pw),
                               (long long)(hi - lo) * 4);
        else
            kl_codegen__c_line(
                g,
                "for (int64_t j = %lld; j < %lld; ++j) kl_d[%lld "
                "+ j] = kl_s[j * %lld + %lld];",
                (long long)lo, (long long)hi, base, (long long)z->sw,
                (long long)(ph - z->pw));
        if (hi < k->wph)
            s_pad(g, k, base + hi, (long long)(k->wph - hi));
    }
}

/* Channel vectors: packs input row yi of the block's channels (kl_d,
 * [Wp][L]). */
static void s_pack_row_chan(cg_t *g, const dwk_t *k)
{
    const kl_dw_t *z = &k->z;
    long long L = k->L, W = z->w, pw = z->pw;
    if (pw)
        s_pad(g, k, 0, pw * L);
    if (k->wp > pw + W)
        s_pad(g, k, (pw + W) * L, (k->wp - pw - W) * L);
    if (z->nhwc) { /* each pixel's L channels are contiguous already */
        kl_codegen__c_line(g, "for (int64_t xi = 0; xi < %lld; ++xi) {", W);
        if (z->c % L) {
            kl_codegen__c_line(g,
                               "    memcpy(kl_d + (%lld + xi) * %lld, "
                               "kl_s + xi * %lld, (size_t)kl_nl * 4);",
                               pw, L, (long long)z->c);
            kl_codegen__c_line(g,
                               "    memset(kl_d + (%lld + xi) * %lld + "
                               "kl_nl, 0, (size_t)(%lld - kl_nl) * 4);",
                               pw, L, L);
        } else {
            kl_codegen__c_line(g,
                               "    kl_st%lld(kl_d + (%lld + xi) * %lld, "
                               "kl_ld%lld(kl_s + xi * %lld));",
                               L, pw, L, L, (long long)z->c);
        }
        kl_codegen__c_line(g, "}");
        return;
    }
    if (L == 16) {
        kl_codegen__c_line(g, "const float *src = kl_s;");
        kl_codegen__c_line(g, "const int64_t c0 = c;");
        kl_codegen__c_line(g, "(void)c0;");
        kl_codegen__rows_to_pixels(g, g->w->tensors[z->x].name, z->c,
                                   z->h * z->w, W, z->n * z->c * z->h * W,
                                   "kl_d", pw, 16);
        return;
    }
    kl_codegen__c_line(g, "for (int64_t l = 0; l < %lld; ++l) {", L);
    g->ind++;
    kl_codegen__c_line(g, "float *kl_e = kl_d + %lld + l;", pw * L);
    if (z->c % L) {
        kl_codegen__c_line(g, "if (c + l >= %lld) {", (long long)z->c);
        kl_codegen__c_line(g, "    for (int64_t xi = 0; xi < %lld; ++xi)", W);
        kl_codegen__c_line(g, "        kl_e[xi * %lld] = 0.0f;", L);
        kl_codegen__c_line(g, "    continue;");
        kl_codegen__c_line(g, "}");
    }
    kl_codegen__c_line(g, "const float *kl_r = kl_s + l * %lld;",
                       (long long)(z->h * z->w));
    kl_codegen__c_line(g, "for (int64_t xi = 0; xi < %lld; ++xi)", W);
    kl_codegen__c_line(g, "    kl_e[xi * %lld] = kl_r[xi];", L);
    g->ind--;
    kl_codegen__c_line(g, "}");
}

/* One task: its channel (block) and rows, the pack, the tiles. */
static void s_task(cg_t *g, const dwk_t *k)
{
    const kl_dw_t *z = &k->z;
    bool row = k->fam == 1;
    long long NB = k->nb, CB = k->cb, L = k->L;
    long long stride = row ? k->rs : k->wp * L;
    kl_codegen__c_line(
        g, "const int64_t n = t / %lld, c = t / %lld %% %lld * %lld;", CB * NB,
        NB, CB, row ? 1 : L);
    kl_codegen__c_line(g, "const int64_t y_lo = t %% %lld * %lld;", NB,
                       (long long)k->yb);
    kl_codegen__c_line(g, "if (y_lo >= %lld)", (long long)z->p);
    kl_codegen__c_line(g, "    continue;");
    kl_codegen__c_line(g, "const int64_t y_hi = kl_mini(y_lo + %lld, %lld);",
                       (long long)k->yb, (long long)z->p);
    if (!row && z->c % L)
        kl_codegen__c_line(g, "const int64_t kl_nl = kl_mini(%lld, %lld - c);",
                           L, (long long)z->c);
    if (!z->pool && row)
        kl_codegen__c_line(g, "const %s *kl_w = %s + c * %lld;",
                           kl_dtype_ctype(g->w->tensors[z->wt].dtype),
                           g->w->tensors[z->wt].name, (long long)(z->r * z->s));
    else if (!z->pool)
        kl_codegen__c_line(g, "const float *kl_w = kl_pre + c * %lld;",
                           (long long)(z->r * z->s));
    kl_codegen__c_line(g,
                       "const int64_t kl_nr = (y_hi - 1 - y_lo) * %lld + %lld;",
                       (long long)z->sh, (long long)((z->r - 1) * z->dh + 1));
    kl_codegen__c_line(g, "for (int64_t i = 0; i < kl_nr; ++i) {");
    g->ind++;
    kl_codegen__c_line(g, "const int64_t yi = y_lo * %lld - %lld + i;",
                       (long long)z->sh, (long long)z->ph);
    kl_codegen__c_line(g, "%s *kl_d = kl_buf + i * %lld;", s_bt(k), stride);
    kl_codegen__c_line(g, "if (yi < 0 || yi >= %lld) {", (long long)z->h);
    g->ind++;
    s_pad(g, k, 0, stride);
    kl_codegen__c_line(g, "continue;");
    g->ind--;
    kl_codegen__c_line(g, "}");
    if (z->nhwc)
        kl_codegen__c_line(
            g, "const float *kl_s = %s + (n * %lld + yi) * %lld + c;",
            g->w->tensors[z->x].name, (long long)z->h,
            (long long)(z->w * z->c));
    else
        kl_codegen__c_line(
            g, "const %s *kl_s = %s + ((n * %lld + c) * %lld + yi) * %lld;",
            kl_dtype_ctype(g->w->tensors[z->x].dtype), g->w->tensors[z->x].name,
            (long long)z->c, (long long)z->h, (long long)z->w);
    if (row)
        s_pack_row_phases(g, k);
    else
        s_pack_row_chan(g, k);
    g->ind--;
    kl_codegen__c_line(g, "}");
    kl_codegen__c_line(g, "int64_t y0 = y_lo;");
    kl_codegen__c_line(g, "for (; y0 + %lld <= y_hi; y0 += %lld) {",
                       (long long)k->rt, (long long)k->rt);
    g->ind++;
    s_row_tiles(g, k, k->rt);
    g->ind--;
    kl_codegen__c_line(g, "}");
    if (k->rt > 1) {
        kl_codegen__c_line(g, "for (; y0 < y_hi; ++y0) {");
        g->ind++;
        s_row_tiles(g, k, 1);
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
    if (!row && L == 16 && !z->nhwc)
        s_unstage(g, k, z->c % 16 ? "kl_nl" : "16");
}

/* Channel vectors' ENTRY_prepare: the weights to [C/L][R][S][L]. */
static void s_prepare(cg_t *g, const dwk_t *k, const char *entry)
{
    const kl_dw_t *z = &k->z;
    long long L = k->L, RS = z->r * z->s, CB = (z->c + L - 1) / L;
    const char *wn = g->w->tensors[z->wt].name;
    kl_buf_printf(&g->b,
                  "\n/* The weights in channel blocks, once (kl_abi.h). */\n"
                  "void *%s" KL_ABI_PREPARE_SUFFIX "(void *const *args)\n{\n",
                  entry);
    g->ind = 1;
    kl_codegen__c_line(g, "const float *restrict %s = (const float *)args[%d];",
                       wn, z->wt);
    kl_codegen__c_line(g, "float *kl_pre = kl_alloc_block(%lld);",
                       CB * RS * L * 4);
    kl_codegen__c_line(g, "if (!kl_pre)");
    kl_codegen__c_line(g, "    return NULL;");
    kl_codegen__c_line(g, "for (int64_t c = 0; c < %lld; ++c)", CB * L);
    kl_codegen__c_line(g, "    for (int64_t e = 0; e < %lld; ++e)", RS);
    kl_codegen__c_line(
        g,
        "        kl_pre[(c / %lld * %lld + e) * %lld + c %% %lld] "
        "= c < %lld ? %s[c * %lld + e] : 0.0f;",
        L, RS, L, L, (long long)z->c, wn, RS);
    kl_codegen__c_line(g, "return kl_pre;");
    kl_buf_puts(&g->b, "}\n");
    g->prep_elems = CB * RS * L;
}

int kl_codegen__emit_dw(cg_t *g, const char *entry)
{
    dwk_t k;
    memset(&k, 0, sizeof k);
    int rc = s_params(g, &k);
    if (rc)
        return rc;
    const kl_workload_t *w = g->w;
    const kl_dw_t *z = &k.z;
    bool row = k.fam == 1;
    kl_buf_puts(&g->b, kl_codegen__prelude);
    kl_codegen__act_prelude_for(&g->b, w);
    if (z->quant)
        kl_codegen__dw_qprelude(g, k.L);
    kl_buf_printf(&g->b,
                  "\n/* %s: depthwise, %s, tiles of %lld rows x %lld %s, "
                  "%lld rows a task. */\n",
                  w->name ? w->name : "a depthwise convolution",
                  row ? "row vectors" : "channel vectors", (long long)k.rt,
                  (long long)k.xt, row ? "lanes" : "pixels", (long long)k.yb);
    if (!row && k.L == 16 && !z->nhwc)
        kl_codegen__transpose16_fn(g);
    if (!row && !z->pool)
        s_prepare(g, &k, entry);
    kl_buf_printf(&g->b, "\nvoid %s(void *const *args)\n{\n", entry);
    g->ind = 1;
    for (int t = 0; t < w->ntensors; t++) {
        const char *ct = kl_dtype_ctype(w->tensors[t].dtype);
        kl_codegen__c_line(g, "%s%s *restrict %s = (%s%s *)args[%d];",
                           t == z->y ? "" : "const ", ct, w->tensors[t].name,
                           t == z->y ? "" : "const ", ct, t);
    }
    if (!row && !z->pool)
        kl_codegen__c_line(g, "const float *kl_pre = (const float *)args[%d];",
                           w->ntensors);
    kl_codegen__c_line(g, "#pragma omp parallel");
    kl_codegen__c_line(g, "{");
    g->ind++;
    kl_codegen__c_line(
        g, "%s *kl_buf = (%s *)kl_alloc(%lld);", s_bt(&k), s_bt(&k),
        (long long)(s_task_rows(&k) * (row ? k.rs : k.wp * k.L)));
    bool stage = !row && k.L == 16 && !z->nhwc;
    if (stage)
        kl_codegen__c_line(g, "float *kl_ob = kl_alloc(%lld);",
                           (long long)(k.yb * s_qx(&k) * 16));
    kl_codegen__c_line(g, "#pragma omp for schedule(static)");
    kl_codegen__c_line(g, "for (int64_t t = 0; t < %lld; ++t) {",
                       (long long)(z->n * k.cb * k.nb));
    g->ind++;
    s_task(g, &k);
    g->ind--;
    kl_codegen__c_line(g, "}");
    kl_codegen__c_line(g, "free(kl_buf);");
    if (stage)
        kl_codegen__c_line(g, "free(kl_ob);");
    g->ind--;
    kl_codegen__c_line(g, "}");
    kl_buf_puts(&g->b, "}\n");
    return g->rc;
}
