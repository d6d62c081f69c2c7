/* codegen_tensorize_nchw.c - the NCHW parts of a tensorized convolution
 * (codegen_tensorize_conv.c; docs/architecture.md, "NCHW convolutions"):
 * the per-call repack of X into the padded NHWC scratch and the store of
 * u8 / s8 outputs by tile transposes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_emit.h"
#include "cg_tz_conv.h"
#include "kl_util.h"

/* NCHW u8 / s8 stores by tile transpose. A tile pixel's 16 output
 * channels lie P*Q bytes apart in NCHW: stored lane by lane, that is 16
 * byte stores (and 16 loads back from a spill) per accumulator, a tenth of
 * the instructions of a 3x3 layer. When the register tile is xi pixels
 * along the output row (one tile loop over Y's last index, step 1) by
 * channel blocks (the other tile loops feed f alone) and the blocks are
 * whole, the vector epilogue keeps each pixel's 16 codes (kl_y<t>) and
 * kl_codegen__tzc_tr_store transposes every 8 pixels of a block (unpacks of 8,
 * 16 and 32 bits: 16 channels x 8 codes) and writes each channel's codes along
 * the row with one masked store (the pixels whose ok_ holds).
 * Returns the tile loop's position over the pixels, or -1. */
int kl_codegen__tzc_tr_loop(const conv_t *c)
{
    const kl_workload_t *w = c->w;
    const kl_tensor_t *Y = &w->tensors[kl_workload_output(w)];
    int64_t K = w->iters[c->tz->it_n].extent;
    if (!c->repack || c->fst == 1 || K % 16 || c->in->lanes != 16 ||
        !kl_codegen__tzc_vec_epi_ok(c))
        return -1;
    const kl_affine_t *ya = &w->out.idx[Y->ndim - 1];
    int itx = kl_codegen__tzc_iter_of(w, ya);
    if (itx < 0 || ya->coef[itx] != 1 || ya->div > 1)
        return -1;
    for (int it = 0; it < w->niters; it++)
        if (it != itx && ya->coef[it])
            return -1;
    int lx = -1;
    for (int q = c->tp; q < c->hp; q++) {
        const kl_loop_t *l = kl_sched_loop(c->s, q);
        if (l->nparts != 1)
            return -1;
        if (l->parts[0].iter == itx && l->parts[0].stride == 1 && lx < 0)
            lx = q;
        else if (l->parts[0].iter != c->tz->it_n)
            return -1;
    }
    return lx >= 0 && kl_sched_loop(c->s, lx)->extent > 1 ? lx : -1;
}

/* Tile t's value of loop position q of the register tile. */
static int64_t s_tile_val(const conv_t *c, int64_t t, int q)
{
    for (int p = c->hp - 1; p > q; p--)
        t /= kl_sched_loop(c->s, p)->extent;
    return t % kl_sched_loop(c->s, q)->extent;
}

void kl_codegen__tzc_tr_store(kl_buf_t *b, const conv_t *c, const char *ind)
{
    const kl_workload_t *w = c->w;
    int ot = kl_workload_output(w), lx = c->lx;
    const kl_tensor_t *Y = &w->tensors[ot];
    int64_t xi = kl_sched_loop(c->s, lx)->extent;
    for (int64_t t0 = 0; t0 < c->ntile; t0++) {
        if (s_tile_val(c, t0, lx) != 0)
            continue; /* one group per block: its pixel-0 tile */
        /* the tiles of this block, by pixel */
        int64_t tt[MAXT];
        for (int64_t t = 0; t < c->ntile; t++) {
            bool same = true;
            for (int q = c->tp; q < c->hp; q++)
                same = same &&
                       (q == lx || s_tile_val(c, t, q) == s_tile_val(c, t0, q));
            if (same)
                tt[s_tile_val(c, t, lx)] = t;
        }
        for (int64_t p0 = 0; p0 < xi; p0 += 8) {
            kl_buf_printf(b, "%s{\n%s    const __mmask16 mk = (__mmask16)(0",
                          ind, ind);
            for (int64_t p = p0; p < p0 + 8 && p < xi; p++)
                kl_buf_printf(b, " | (ok_%lld ? %du : 0u)", (long long)tt[p],
                              1 << (p - p0));
            kl_buf_printf(b, ");\n%s    const __m128i", ind);
            for (int64_t p = p0; p < p0 + 8; p++)
                if (p < xi)
                    kl_buf_printf(b, "%s r%lld = kl_y%lld", p > p0 ? "," : "",
                                  (long long)(p - p0), (long long)tt[p]);
                else
                    kl_buf_printf(b, ", r%lld = _mm_setzero_si128()",
                                  (long long)(p - p0));
            kl_buf_printf(
                b,
                ";\n"
                "%s    const __m128i a0 = _mm_unpacklo_epi8(r0, r1), a1 = "
                "_mm_unpackhi_epi8(r0, r1), a2 = _mm_unpacklo_epi8(r2, r3), "
                "a3 = _mm_unpackhi_epi8(r2, r3), a4 = _mm_unpacklo_epi8(r4, "
                "r5), a5 = _mm_unpackhi_epi8(r4, r5), a6 = "
                "_mm_unpacklo_epi8(r6, r7), a7 = _mm_unpackhi_epi8(r6, r7);\n"
                "%s    const __m128i b0 = _mm_unpacklo_epi16(a0, a2), b1 = "
                "_mm_unpackhi_epi16(a0, a2), b2 = _mm_unpacklo_epi16(a1, a3), "
                "b3 = _mm_unpackhi_epi16(a1, a3), b4 = _mm_unpacklo_epi16(a4, "
                "a6), b5 = _mm_unpackhi_epi16(a4, a6), b6 = "
                "_mm_unpacklo_epi16(a5, a7), b7 = _mm_unpackhi_epi16(a5, "
                "a7);\n"
                "%s    const __m128i d[8] = {_mm_unpacklo_epi32(b0, b4), "
                "_mm_unpackhi_epi32(b0, b4), _mm_unpacklo_epi32(b1, b5), "
                "_mm_unpackhi_epi32(b1, b5), _mm_unpacklo_epi32(b2, b6), "
                "_mm_unpackhi_epi32(b2, b6), _mm_unpacklo_epi32(b3, b7), "
                "_mm_unpackhi_epi32(b3, b7)};\n",
                ind, ind, ind);
            kl_buf_t yo = {0};
            kl_codegen__tzc_yoff(&yo, c, tt[p0]);
            kl_codegen__template(
                b,
                "${i}    ${ty} *yp = t${ot} + ${yo};\n"
                "${i}    if (mk)\n"
                "${i}        for (int q = 0; q < 8; q++) {\n"
                "${i}            _mm_mask_storeu_epi8(yp + (2 * q) * "
                "${fst}LL, mk, d[q]);\n"
                "${i}            _mm_mask_storeu_epi8(yp + (2 * q + 1) "
                "* ${fst}LL, mk, _mm_srli_si128(d[q], 8));\n"
                "${i}        }\n${i}}\n",
                (const kl_codegen__kv_t[]){
                    KL_CG_S("i", ind), KL_CG_S("ty", kl_dtype_ctype(Y->dtype)),
                    KL_CG_I("ot", ot), KL_CG_S("yo", yo.data),
                    KL_CG_I("fst", c->fst), KL_CG_END});
            kl_buf_free(&yo);
        }
    }
}

/* NCHW: takes the scratch (the prepared block's, or a buffer of its own
 * while another call holds that one: kl_abi.h lets calls that share a
 * block run at the same time; kiln's exported model and the agent give
 * each thread its own block, so the fallback is rare) and repacks X into
 * it, [other indices of X, each padded by lo before and to sh][cpad
 * channels], za in the padding and in the channels past C (their weights
 * are zero), so that every tap of every output pixel reads in bounds.
 * Rows (every index but the channel and the last) in parallel; a row reads
 * X along its last index, contiguous in NCHW. */
/* Along X's index d, the taps read only the points i with (i - *off) a
 * multiple of the returned step: the gcd of the index's coefficients (of
 * iterators with more than one value). 1x1 stride 2: every other row and
 * column, which the repack then skips (they are never read). */
int64_t kl_codegen__tzc_read_step(const conv_t *c, int d, int64_t *off)
{
    const kl_workload_t *w = c->w;
    const kl_affine_t *a = &c->xa->idx[d];
    int64_t g = 0;
    for (int it = 0; it < w->niters; it++) {
        int64_t k = a->coef[it] < 0 ? -a->coef[it] : a->coef[it];
        if (!k || w->iters[it].extent < 2)
            continue;
        while (k) {
            int64_t t = g % k;
            g = k;
            k = t;
        }
    }
    if (a->div > 1 || g < 1)
        g = 1;
    *off = ((a->offset % g) + g) % g;
    return g;
}

/* Whether the repack goes 16 channels at a time (s_repack): every channel
 * a whole group of 16 (no za channels past C), every point of a row read
 * and rows of 16 points or more (ResNet-18's 14- and 7-point rows measured
 * 0-4% slower that way, through a zero-filled copy, than 4 channels a
 * store). */
bool kl_codegen__tzc_repack16(const conv_t *c, int64_t jg)
{
    const kl_tensor_t *X = &c->w->tensors[c->xa->tensor];
    return c->repack && jg == 1 && X->shape[c->dc] % 16 == 0 &&
           c->cpad == X->shape[c->dc] && X->shape[X->ndim - 1] >= 16;
}

/* A 16x16 byte transpose: r[k] (16 points of channel k) becomes r[p] (the
 * 16 channels of point p). Unpacks of 8, 16, 32 and 64 bits. */
const char kl_codegen__tzc_tr16_src[] =
    "static inline void kl_tr16(__m128i r[16])\n"
    "{\n"
    "    __m128i s1[16], s2[16], s3[16];\n"
    "    for (int k = 0; k < 8; k++) {\n"
    "        s1[2 * k] = _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]);\n"
    "        s1[2 * k + 1] = _mm_unpackhi_epi8(r[2 * k], r[2 * k + 1]);\n"
    "    }\n"
    "    for (int m = 0; m < 4; m++)\n"
    "        for (int h = 0; h < 2; h++) {\n"
    "            s2[4 * m + 2 * h] = _mm_unpacklo_epi16(s1[4 * m + h], "
    "s1[4 * m + 2 + h]);\n"
    "            s2[4 * m + 2 * h + 1] = _mm_unpackhi_epi16(s1[4 * m + h], "
    "s1[4 * m + 2 + h]);\n"
    "        }\n"
    "    for (int u = 0; u < 2; u++)\n"
    "        for (int q = 0; q < 4; q++) {\n"
    "            s3[8 * u + 2 * q] = _mm_unpacklo_epi32(s2[8 * u + q], "
    "s2[8 * u + 4 + q]);\n"
    "            s3[8 * u + 2 * q + 1] = _mm_unpackhi_epi32(s2[8 * u + q], "
    "s2[8 * u + 4 + q]);\n"
    "        }\n"
    "    for (int e = 0; e < 8; e++) {\n"
    "        r[2 * e] = _mm_unpacklo_epi64(s3[e], s3[8 + e]);\n"
    "        r[2 * e + 1] = _mm_unpackhi_epi64(s3[e], s3[8 + e]);\n"
    "    }\n"
    "}\n\n";

/* The scratch claimed (its busy flag, or a fresh allocation when another
 * call holds it), the za line, and the parallel loop over its rows. */
static void s_repack_open(kl_buf_t *b, const conv_t *c, int64_t foff,
                          int64_t sb)
{
    const kl_tensor_t *X = &c->w->tensors[c->xa->tensor];
    int dl = X->ndim - 1;
    long long za = (long long)c->tz->za;
    int64_t rows = 1;
    for (int d = 0; d < dl; d++)
        rows *= d == c->dc ? 1 : c->sh[d];
    kl_buf_printf(
        b,
        "    char *kl_pre = (char *)args[%d];\n"
        "    int *kl_busy = (int *)(kl_pre + %lld);\n"
        "    int kl_own = __atomic_exchange_n(kl_busy, 1, __ATOMIC_ACQUIRE);\n"
        "    uint8_t *kl_scr = kl_own ? (uint8_t *)aligned_alloc(64, %lld) "
        ": (uint8_t *)(kl_pre + %lld);\n"
        "    if (!kl_scr)\n        abort();\n"
        "    uint8_t kl_zl[%lld]; /* za: the channels past C */\n"
        "    memset(kl_zl, %lld, sizeof kl_zl);\n"
        "#pragma omp parallel for\n"
        "    for (int64_t row = 0; row < %lld; row++) {\n"
        "        uint8_t *d = kl_scr + row * %lldLL;\n"
        "        int64_t rem = row, xo = 0;\n        int in_ = 1, rd_ = 1;\n"
        "        (void)rd_;\n",
        c->w->ntensors, (long long)foff, (long long)sb, (long long)(foff + 64),
        (long long)X->shape[dl], za, (long long)rows,
        (long long)(c->sh[dl] * c->cpad));
}

/* The row's point in X from its index in the scratch (in_: inside X;
 * rd_: read by some tap), then its padding, or all za outside X. */
static void s_repack_row(kl_buf_t *b, const conv_t *c, const int64_t *xst)
{
    const kl_tensor_t *X = &c->w->tensors[c->xa->tensor];
    int dl = X->ndim - 1;
    long long za = (long long)c->tz->za, cp = (long long)c->cpad;
    bool skip = false;
    for (int d = dl - 1; d >= 0; d--) {
        if (d == c->dc)
            continue;
        int64_t off, g = kl_codegen__tzc_read_step(c, d, &off);
        kl_buf_printf(b,
                      "        { int64_t i = rem %% %lld - %lld; rem /= %lld; "
                      "in_ &= i >= 0 && i < %lld; xo += i * %lldLL;",
                      (long long)c->sh[d], (long long)c->lo[d],
                      (long long)c->sh[d], (long long)X->shape[d],
                      (long long)xst[d]);
        if (g > 1) /* a row no tap reads */
            kl_buf_printf(b, " rd_ &= ((i %% %lld) + %lld) %% %lld == %lld;",
                          (long long)g, (long long)g, (long long)g,
                          (long long)off);
        skip = skip || g > 1;
        kl_buf_puts(b, " }\n");
    }
    if (skip)
        kl_buf_puts(b, "        if (!rd_)\n            continue;\n");
    long long lo = (long long)c->lo[dl], n = (long long)X->shape[dl];
    kl_buf_printf(
        b,
        "        if (!in_) {\n"
        "            memset(d, %lld, %lld);\n            continue;\n        }\n"
        "        memset(d, %lld, %lld);\n"
        "        memset(d + %lld, %lld, %lld);\n",
        za, (long long)(c->sh[dl] * c->cpad), za, lo * cp, (lo + n) * cp, za,
        (long long)(c->sh[dl] - lo - n) * cp);
}

/* 16 channels x 16 points a step: 16 loads along the planes' rows, a
 * 16x16 byte transpose (kl_tr16), 16 stores of a point's 16 channels;
 * the last step of a row overlaps the one before. */
static void s_repack_copy16(kl_buf_t *b, const conv_t *c, const int64_t *xst)
{
    const kl_tensor_t *X = &c->w->tensors[c->xa->tensor];
    int dl = X->ndim - 1;
    int xt = c->xa->tensor;
    long long cp = (long long)c->cpad;
    long long lo = (long long)c->lo[dl], n = (long long)X->shape[dl];
    long long C = (long long)X->shape[c->dc], cst = (long long)xst[c->dc];
    kl_buf_printf(
        b,
        "        for (int64_t c16 = 0; c16 < %lld; c16++) {\n"
        "            const uint8_t *src = t%d + xo + c16 * %lldLL;\n"
        "            uint8_t *dst = d + %lld + c16 * 16;\n"
        "            for (int64_t j0 = 0; j0 < %lld; j0 += 16) {\n"
        "                const int64_t j = j0 + 16 <= %lld ? j0 : %lld;\n"
        "                __m128i r[16];\n"
        "                for (int k = 0; k < 16; k++)\n"
        "                    r[k] = _mm_loadu_si128((const __m128i *)(src "
        "+ k * %lldLL + j));\n"
        "                kl_tr16(r);\n"
        "                for (int64_t p = 0; p < 16; p++)\n"
        "                    _mm_storeu_si128((__m128i *)(dst + (j + p) * "
        "%lldLL), r[p]);\n"
        "            }\n        }\n    }\n",
        C / 16, xt, 16 * cst, lo * cp, n, n, n - 16, cst, cp);
}

/* 4 channels a store: a group's 4 planes read along the row, one 32-bit
 * store per point (channels past C read the za line). */
static void s_repack_copy4(kl_buf_t *b, const conv_t *c, const int64_t *xst)
{
    const kl_tensor_t *X = &c->w->tensors[c->xa->tensor];
    int dl = X->ndim - 1;
    int xt = c->xa->tensor;
    long long cp = (long long)c->cpad;
    long long lo = (long long)c->lo[dl], n = (long long)X->shape[dl];
    long long C = (long long)X->shape[c->dc], cst = (long long)xst[c->dc];
    int64_t joff, jg = kl_codegen__tzc_read_step(c, dl, &joff);
    kl_buf_printf(
        b,
        "        for (int64_t g = 0; g < %lld; g++) {\n"
        "            const uint8_t *s[4];\n"
        "            for (int64_t k = 0; k < 4; k++)\n"
        "                s[k] = 4 * g + k < %lld ? t%d + xo + (4 * g + k) * "
        "%lldLL : kl_zl;\n"
        "            uint32_t *dd = (uint32_t *)(d + %lld) + g;\n"
        "            for (int64_t j = %lld; j < %lld; j += %lld)\n"
        "                dd[j * %lld] = (uint32_t)s[0][j] | (uint32_t)s[1][j] "
        "<< 8 | (uint32_t)s[2][j] << 16 | (uint32_t)s[3][j] << 24;\n"
        "        }\n    }\n",
        cp / 4, C, xt, cst, lo * cp, (long long)joff, n, (long long)jg, cp / 4);
}

void kl_codegen__tzc_repack(kl_buf_t *b, const conv_t *c, int64_t foff,
                            int64_t sb)
{
    const kl_tensor_t *X = &c->w->tensors[c->xa->tensor];
    int64_t xst[KL_IR_MAX_DIMS], st = 1;
    for (int d = X->ndim - 1; d >= 0; d--) {
        xst[d] = st;
        st *= X->shape[d];
    }
    s_repack_open(b, c, foff, sb);
    s_repack_row(b, c, xst);
    if (c->rp16)
        s_repack_copy16(b, c, xst);
    else
        s_repack_copy4(b, c, xst);
}
