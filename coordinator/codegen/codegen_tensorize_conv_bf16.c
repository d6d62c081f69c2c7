/* codegen_tensorize_conv_bf16.c - C of a convolution tensorized with
 * avx512_bf16 (conv2d in=bf16 NCHW or NHWC, groups 1; kl_sched_tensorize's
 * convolution form; docs/architecture.md, "The tensorize primitive").
 *
 * The int8 convolution's structure (codegen_tensorize_conv.c) with bf16
 * pairs in place of 4 bytes: the block is 16 output channels f x 2 input
 * channels c, one vdpbf16ps acc[f0..f0+16) += X2[pixel, tap][c0/2] .
 * Wp[f0/16][tap][c0/2][16][2]; the taps and the channel pairs are the
 * reduction loops right above the block, so the register tile (unrolled
 * spatial loops above them: output pixels x channel blocks, at most 32
 * accumulators) holds whole f32 sums and the f32 epilogue (bias, relu,
 * residual) runs where the tile ends, lane by lane, at Y's layout.
 *
 * X and W are bf16 inputs stored as f32 (kl_ir.h: a read is the value
 * rounded to bf16, nearest even). ENTRY_prepare converts the const weights
 * once into the packed layout [ceil(K/16)][taps][ceil(C/2)][16][2] of
 * uint16_t bf16 bits (zeros past K and C). Each call converts X into a
 * padded scratch of bf16 pairs, one row of ceil(C/2) uint32_t per input
 * point (channel 2g in the low half, 2g + 1 in the high half, zero past
 * C), with zero rows for the padding: a zero adds exactly nothing, so no
 * compensation is needed and every tap reads in bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_emit.h"
#include "cg_tz.h"
#include "cg_tz_conv.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_util.h"

typedef struct {
    const kl_sched_t *s;
    const kl_workload_t *w;
    const kl_tensorize_t *tz;
    const kl_intrin_t *in;
    const kl_access_t *xa, *wa; /* X[.., c, ..], W[.., c, taps.., f] */
    const char *entry;
    int bpos, hp, tp, cp; /* block; reduction run; tile; channel loops */
    int64_t ntile;
    int dc;                                         /* X's channel index */
    int64_t lo[KL_IR_MAX_DIMS], sh[KL_IR_MAX_DIMS]; /* scratch padding */
    int64_t K, C, ntap, np, cg, wbytes, npts;
    kl_buf_t ek; /* c0 over the loops above the block */
    kl_buf_t b;
} cbf_t;

static const kl_access_t *s_find_access(const kl_expr_t *e, int t)
{
    if (!e)
        return NULL;
    if (e->kind == KL_EX_LOAD && e->access.tensor == t)
        return &e->access;
    const kl_access_t *a = s_find_access(e->a, t);
    return a ? a : s_find_access(e->b, t);
}

/* hp: the reduction run; cp: the innermost loops that run the channels
 * only; [tp, hp): the register tile (unrolled spatial loops). */
static void s_plan_loops(cbf_t *c)
{
    const kl_sched_t *s = c->s;
    c->bpos = kl_sched_loop_pos(s, c->tz->loop);
    c->hp = c->bpos;
    while (c->hp > 0 && kl_sched_loop(s, c->hp - 1)->reduce)
        c->hp--;
    c->cp = c->bpos;
    while (c->cp > c->hp) {
        const kl_loop_t *l = kl_sched_loop(s, c->cp - 1);
        bool only_c = true;
        for (int p = 0; p < l->nparts; p++)
            only_c = only_c && l->parts[p].iter == c->tz->it_k;
        if (!only_c)
            break;
        c->cp--;
    }
    c->tp = c->hp;
    c->ntile = 1;
    while (c->tp > 0 && kl_sched_loop(s, c->tp - 1)->kind == KL_LOOP_UNROLL &&
           !kl_sched_loop(s, c->tp - 1)->reduce &&
           c->ntile * kl_sched_loop(s, c->tp - 1)->extent <= MAXT) {
        c->tp--;
        c->ntile *= kl_sched_loop(s, c->tp)->extent;
    }
}

/* The layouts: X's channel index, the scratch's padded shape (every
 * point a tap reads in bounds), the packed weights' sizes. */
static void s_plan(cbf_t *c)
{
    const kl_workload_t *w = c->w;
    const kl_tensorize_t *tz = c->tz;
    s_plan_loops(c);
    const kl_tensor_t *X = &w->tensors[tz->ta], *W = &w->tensors[tz->tb];
    c->dc = X->ndim - 1;
    for (int d = X->ndim - 1; d >= 0; d--)
        if (c->xa->idx[d].coef[tz->it_k])
            c->dc = d;
    c->K = w->iters[tz->it_n].extent;
    c->C = X->shape[c->dc];
    c->ntap = kl_tensor_numel(W) / (c->K * c->C);
    kl_buf_t tmp = {0};
    int64_t fmax, cmax;
    kl_codegen__tz_iter_expr(c->s, tz->it_n, c->bpos, &tmp, &fmax);
    kl_codegen__tz_iter_expr(c->s, tz->it_k, c->bpos, &c->ek, &cmax);
    kl_buf_free(&tmp);
    c->np = (fmax / 16 + 1) * 16;
    c->cg = cmax / 2 + 1;
    if (c->cg < (c->C + 1) / 2)
        c->cg = (c->C + 1) / 2;
    c->wbytes = (c->np * c->ntap * c->cg * 4 + 63) / 64 * 64;
    c->npts = 1;
    for (int d = 0; d < X->ndim; d++) {
        c->lo[d] = 0;
        c->sh[d] = X->shape[d];
        if (d == c->dc)
            continue;
        const kl_affine_t *a = &c->xa->idx[d];
        int64_t mn = a->offset, mx = a->offset;
        for (int it = 0; it < w->niters; it++) {
            int64_t v = a->coef[it] * (w->iters[it].extent - 1);
            mn += v < 0 ? v : 0;
            mx += v > 0 ? v : 0;
        }
        c->lo[d] = mn < 0 ? -mn : 0;
        c->sh[d] = c->lo[d] + X->shape[d] +
                   (mx > X->shape[d] - 1 ? mx - (X->shape[d] - 1) : 0);
        c->npts *= c->sh[d];
    }
}

static void s_emit_head(cbf_t *c)
{
    const kl_codegen__kv_t kv[] = {KL_CG_S("name", c->in->name),
                                   KL_CG_S("pragma", c->in->pragma), KL_CG_END};
    kl_codegen__template(
        &c->b,
        "/* Convolution tensorized with ${name}: bf16 pairs, f32 "
        "accumulators; the weights packed once, in prepare, as "
        "[K/16][taps][C/2][16][2]. */\n"
        "#pragma GCC target(\"${pragma}\")\n"
        "#if defined(__GNUC__) && !defined(__clang__)\n"
        "#pragma GCC optimize(\"ira-region=one\")\n#endif\n"
        "#include <immintrin.h>\n#include <stdint.h>\n"
        "#include <stdlib.h>\n#include <string.h>\n"
        "typedef __m512 kl_vacc_t;\n"
        "#define KL_VSTORE(p, v) _mm512_storeu_ps((float *)(p), v)\n"
        "#define KL_VZERO() _mm512_setzero_ps()\n"
        "static inline kl_vacc_t kl_dot(kl_vacc_t c, uint32_t a2,\n"
        "                               const uint16_t *w)\n{\n"
        "    __m512i a = _mm512_set1_epi32((int)a2), wv = "
        "_mm512_loadu_si512((const void *)w);\n"
        "    __asm__(\"vdpbf16ps %2, %1, %0\" : \"+v\"(c) : \"v\"(a), "
        "\"v\"(wv));\n    return c;\n}\n"
        "/* f32 -> bf16 bits, round to nearest even (NaN kept quiet). */\n"
        "static inline uint32_t kl_bf16(float v)\n{\n    uint32_t x;\n"
        "    memcpy(&x, &v, 4);\n"
        "    if ((x & 0x7fffffffu) > 0x7f800000u)\n"
        "        return (x >> 16) | 0x40;\n"
        "    return (x + 0x7fffu + ((x >> 16) & 1)) >> 16;\n}\n\n",
        kv);
}

/* W's flat index for (tap, c, f), tap decomposed over W's tap dims. */
static void s_widx(kl_buf_t *b, const cbf_t *c)
{
    const kl_workload_t *w = c->w;
    const kl_tensor_t *W = &w->tensors[c->wa->tensor];
    int64_t tst = 1, wst = 1;
    kl_buf_puts(b, "(int64_t)0");
    for (int d = W->ndim - 1; d >= 0; d--) {
        int it = kl_codegen__tzc_iter_of(w, &c->wa->idx[d]);
        if (it == c->tz->it_n)
            kl_buf_printf(b, " + f * %lldLL", (long long)wst);
        else if (it == c->tz->it_k)
            kl_buf_printf(b, " + c * %lldLL", (long long)wst);
        else {
            kl_buf_printf(b, " + (tap / %lld %% %lld) * %lldLL", (long long)tst,
                          (long long)W->shape[d], (long long)wst);
            tst *= W->shape[d];
        }
        wst *= W->shape[d];
    }
}

/* ENTRY_prepare: the CPU check, the weights converted and packed. */
static void s_emit_prepare(cbf_t *c)
{
    kl_buf_t wi = {0};
    s_widx(&wi, c);
    const kl_codegen__kv_t kv[] = {KL_CG_S("entry", c->entry),
                                   KL_CG_S("builtin", c->in->builtin),
                                   KL_CG_I("tb", c->tz->tb),
                                   KL_CG_I("wbytes", c->wbytes),
                                   KL_CG_I("nfo", c->np / 16),
                                   KL_CG_I("ntap", c->ntap),
                                   KL_CG_I("cg", c->cg),
                                   KL_CG_I("K", c->K),
                                   KL_CG_I("C", c->C),
                                   KL_CG_S("wi", wi.data),
                                   KL_CG_END};
    kl_codegen__template(
        &c->b,
        "void *${entry}_prepare(void *const *args)\n{\n"
        "    /* Refuse (NULL) on a CPU without the intrinsic. */\n"
        "    if (!__builtin_cpu_supports(\"${builtin}\"))\n"
        "        return NULL;\n"
        "    const float *B = (const float *)args[${tb}];\n"
        "    uint16_t *wp = (uint16_t *)aligned_alloc(64, ${wbytes});\n"
        "    if (!wp)\n        return NULL;\n"
        "    int64_t o = 0;\n"
        "    for (int64_t fo = 0; fo < ${nfo}; fo++)\n"
        "        for (int64_t tap = 0; tap < ${ntap}; tap++)\n"
        "            for (int64_t g = 0; g < ${cg}; g++)\n"
        "                for (int64_t l = 0; l < 16; l++)\n"
        "                    for (int64_t j = 0; j < 2; j++, o++) {\n"
        "                        int64_t f = fo * 16 + l, c = g * 2 + j;\n"
        "                        wp[o] = f < ${K} && c < ${C} ? "
        "(uint16_t)kl_bf16(B[${wi}]) : 0;\n"
        "                    }\n"
        "    return wp;\n}\n\n",
        kv);
    kl_buf_free(&wi);
}

/* Scratch words from which the conversion runs in parallel. */
#define KL_TZCB_PAR_WORDS 16384

/* The per-call conversion of X into the padded scratch of bf16 pairs, a
 * scratch row (X's last index other than the channel, dl) at a time:
 * channel pair by channel pair, so that NCHW reads two rows of X in order
 * and the writes stay within the row's few KiB. */
static void s_emit_repack(cbf_t *c)
{
    const kl_tensor_t *X = &c->w->tensors[c->tz->ta];
    int64_t st[KL_IR_MAX_DIMS], acc = 1;
    for (int d = X->ndim - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= X->shape[d];
    }
    int dl = X->ndim - 1 == c->dc ? X->ndim - 2 : X->ndim - 1;
    /* A small input is converted by one thread: a parallel region costs
     * more than its few thousand conversions (and a barrier waits for a
     * descheduled thread on a shared machine). */
    bool big = c->npts * c->cg >= KL_TZCB_PAR_WORDS;
    const kl_codegen__kv_t kv[] = {KL_CG_I("nrows", c->npts / c->sh[dl]),
                                   KL_CG_I("shl", c->sh[dl]),
                                   KL_CG_I("lol", c->lo[dl]),
                                   KL_CG_I("xl", X->shape[dl]),
                                   KL_CG_I("stl", st[dl]),
                                   KL_CG_I("cg", c->cg),
                                   KL_CG_I("C", c->C),
                                   KL_CG_I("xs", st[c->dc]),
                                   KL_CG_I("ta", c->tz->ta),
                                   KL_CG_I("sb", c->npts * c->cg * 4),
                                   KL_CG_S("par", big ? "    #pragma omp "
                                                        "parallel for\n"
                                                      : ""),
                                   KL_CG_END};
    kl_codegen__template(
        &c->b,
        "    uint32_t *kl_scr = (uint32_t *)malloc(${sb});\n"
        "    if (!kl_scr)\n        return;\n"
        "${par}"
        "    for (int64_t rr = 0; rr < ${nrows}; rr++) {\n"
        "        int64_t r = rr, xo = 0;\n        int in_ = 1;\n",
        kv);
    for (int d = X->ndim - 1; d >= 0; d--) {
        if (d == c->dc || d == dl)
            continue;
        kl_buf_printf(&c->b,
                      "        { int64_t h = r %% %lld - %lld; r /= %lld; "
                      "in_ &= h >= 0 && h < %lld; xo += h * %lld; }\n",
                      (long long)c->sh[d], (long long)c->lo[d],
                      (long long)c->sh[d], (long long)X->shape[d],
                      (long long)st[d]);
    }
    kl_codegen__template(
        &c->b,
        "        uint32_t *o = kl_scr + rr * ${shl} * ${cg};\n"
        "        if (!in_) {\n"
        "            memset(o, 0, ${shl} * ${cg} * 4);\n"
        "            continue;\n        }\n"
        "        for (int64_t g = 0; g < ${cg}; g++) {\n"
        "            const float *x0 = t${ta} + xo + 2 * g * ${xs};\n"
        "            const float *x1 = x0 + ${xs};\n"
        "            const int one = 2 * g < ${C}, two = 2 * g + 1 < ${C};\n"
        "            for (int64_t j = 0; j < ${shl}; j++) {\n"
        "                const int64_t h = j - ${lol};\n"
        "                uint32_t v = 0;\n"
        "                if (h >= 0 && h < ${xl})\n"
        "                    v = (one ? kl_bf16(x0[h * ${stl}]) : 0) |\n"
        "                        (two ? kl_bf16(x1[h * ${stl}]) : 0) << 16;\n"
        "                o[j * ${cg} + g] = v;\n"
        "            }\n        }\n    }\n",
        kv);
}

/* Tile t's spatial iterator values v<it>_t, its guards ok_t and its
 * accumulator. */
static void s_tile_setup(cbf_t *c, int64_t t, const char *ind)
{
    const kl_workload_t *w = c->w;
    kl_buf_t *b = &c->b;
    for (int it = 0; it < w->niters; it++)
        if (!w->iters[it].reduce)
            kl_buf_printf(b, "%sint64_t v%d_%lld;\n", ind, it, (long long)t);
    kl_buf_printf(b, "%sint ok_%lld;\n%s{\n", ind, (long long)t, ind);
    int64_t rem = t;
    for (int q = c->hp - 1; q >= c->tp; q--) {
        const kl_loop_t *lq = kl_sched_loop(c->s, q);
        kl_buf_printf(b, "%s    const int64_t l%d = %lld;\n", ind, lq->id,
                      (long long)(rem % lq->extent));
        rem /= lq->extent;
    }
    for (int it = 0; it < w->niters; it++) {
        if (w->iters[it].reduce)
            continue;
        kl_buf_t e = {0};
        int64_t mx;
        kl_codegen__tz_iter_expr(c->s, it, c->hp, &e, &mx);
        kl_buf_printf(b, "%s    v%d_%lld = %s;\n", ind, it, (long long)t,
                      e.data);
        kl_buf_free(&e);
    }
    kl_buf_t g = {0};
    kl_codegen__tz_guards(c->s, 0, c->hp, c->bpos, &g);
    kl_buf_printf(b, "%s    ok_%lld = 1%s;\n%s}\n", ind, (long long)t,
                  g.data ? g.data : "", ind);
    kl_buf_free(&g);
    kl_buf_printf(b, "%skl_vacc_t c_%lld = KL_VZERO();\n", ind, (long long)t);
}

static void s_affine_part(kl_buf_t *b, const kl_workload_t *w,
                          const kl_affine_t *a, bool reduce, int64_t t)
{
    for (int it = 0; it < w->niters; it++) {
        if (!a->coef[it] || w->iters[it].reduce != reduce)
            continue;
        if (reduce)
            kl_buf_printf(b, " + %lld * rv%d", (long long)a->coef[it], it);
        else
            kl_buf_printf(b, " + %lld * v%d_%lld", (long long)a->coef[it], it,
                          (long long)t);
    }
}

/* At cp: the taps' values, the tap index and, per tile, the scratch row
 * a_t of the pixel's input point and the weights w_t of the tap. */
static void s_tap_setup(cbf_t *c, const char *ind)
{
    const kl_workload_t *w = c->w;
    kl_buf_t *b = &c->b;
    const kl_tensor_t *X = &w->tensors[c->xa->tensor],
                      *W = &w->tensors[c->wa->tensor];
    for (int it = 0; it < w->niters; it++) {
        if (!w->iters[it].reduce || it == c->tz->it_k)
            continue;
        kl_buf_t e = {0};
        int64_t mx;
        kl_codegen__tz_iter_expr(c->s, it, c->bpos, &e, &mx);
        kl_buf_printf(b, "%sconst int64_t rv%d = %s;\n", ind, it, e.data);
        kl_buf_free(&e);
    }
    kl_buf_printf(b, "%sconst int64_t tap = (int64_t)0", ind);
    int64_t st = 1;
    for (int d = W->ndim - 1; d >= 0; d--) {
        int it = kl_codegen__tzc_iter_of(w, &c->wa->idx[d]);
        if (it == c->tz->it_k || it == c->tz->it_n)
            continue;
        kl_buf_printf(b, " + %lld * rv%d", (long long)st, it);
        st *= W->shape[d];
    }
    kl_buf_puts(b, ";\n");
    for (int64_t t = 0; t < c->ntile; t++) {
        kl_buf_printf(b, "%sconst uint32_t *a_%lld;\n%s{\n", ind, (long long)t,
                      ind);
        kl_buf_printf(b, "%s    int in_ = 1;\n%s    int64_t o_ = 0;\n", ind,
                      ind);
        for (int d = 0; d < X->ndim; d++) {
            if (d == c->dc)
                continue;
            kl_buf_printf(b, "%s    { int64_t h = (int64_t)%lld", ind,
                          (long long)(c->xa->idx[d].offset + c->lo[d]));
            s_affine_part(b, w, &c->xa->idx[d], false, t);
            s_affine_part(b, w, &c->xa->idx[d], true, t);
            kl_buf_printf(b,
                          "; in_ &= h >= 0 && h < %lld; o_ = o_ * %lld + h; "
                          "}\n",
                          (long long)c->sh[d], (long long)c->sh[d]);
        }
        kl_buf_printf(
            b, "%s    a_%lld = in_ ? kl_scr + o_ * %lld : kl_zrow;\n%s}\n", ind,
            (long long)t, (long long)c->cg, ind);
        kl_buf_printf(b,
                      "%sconst uint16_t *w_%lld = wp + ((v%d_%lld / 16) * "
                      "%lldLL + tap) * %lldLL;\n",
                      ind, (long long)t, c->tz->it_n, (long long)t,
                      (long long)c->ntap, (long long)(c->cg * 32));
    }
}

/* The block: one vdpbf16ps per accumulator. */
static void s_emit_block(cbf_t *c, const char *ind)
{
    kl_buf_t g = {0};
    kl_codegen__tz_guards(c->s, c->hp, c->bpos, c->bpos, &g);
    kl_buf_printf(&c->b, "%sconst int64_t c0 = %s;\n%sif (1%s) {\n", ind,
                  c->ek.data, ind, g.data ? g.data : "");
    kl_buf_free(&g);
    for (int64_t t = 0; t < c->ntile; t++)
        kl_buf_printf(&c->b,
                      "%s    c_%lld = kl_dot(c_%lld, a_%lld[c0 / 2], w_%lld + "
                      "c0 * 16);\n",
                      ind, (long long)t, (long long)t, (long long)t,
                      (long long)t);
    kl_buf_printf(&c->b, "%s}\n", ind);
}

/* Tile t's finished sums through the f32 epilogue into Y, lane by lane. */
static int s_emit_store(cbf_t *c, int64_t t, const char *ind, char *err)
{
    const kl_workload_t *w = c->w;
    kl_buf_t *b = &c->b;
    int itn = c->tz->it_n;
    kl_buf_printf(b,
                  "%sif (ok_%lld) {\n%s    float lane[16];\n"
                  "%s    KL_VSTORE(lane, c_%lld);\n"
                  "%s    for (int64_t q = 0; q < 16 && v%d_%lld + q < %lld; "
                  "q++) {\n",
                  ind, (long long)t, ind, ind, (long long)t, ind, itn,
                  (long long)t, (long long)c->K);
    for (int it = 0; it < w->niters; it++)
        if (!w->iters[it].reduce)
            kl_buf_printf(b, "%s        const int64_t i%d = v%d_%lld%s;\n", ind,
                          it, it, (long long)t, it == itn ? " + q" : "");
    kl_buf_printf(b, "%s        float x = lane[q];\n", ind);
    char ind2[300];
    snprintf(ind2, sizeof ind2, "%s        ", ind);
    int rc = kl_codegen__bf16_epilogue(b, w, ind2, err);
    kl_buf_printf(b, "%s    }\n%s}\n", ind, ind);
    return rc;
}

static int s_emit_nest(cbf_t *c, char *err)
{
    char ind[256] = "    ";
    bool par = false;
    for (int p = 0; p < c->tp; p++)
        kl_codegen__tz_open(&c->b, kl_sched_loop(c->s, p), ind, &par);
    for (int64_t t = 0; t < c->ntile; t++)
        s_tile_setup(c, t, ind);
    for (int p = c->hp; p < c->cp; p++)
        kl_codegen__tz_open(&c->b, kl_sched_loop(c->s, p), ind, &par);
    s_tap_setup(c, ind);
    for (int p = c->cp; p < c->bpos; p++)
        kl_codegen__tz_open(&c->b, kl_sched_loop(c->s, p), ind, &par);
    s_emit_block(c, ind);
    for (int p = c->bpos - 1; p >= c->hp; p--)
        kl_codegen__tz_close(&c->b, ind);
    int rc = KL_OK;
    for (int64_t t = 0; t < c->ntile && !rc; t++)
        rc = s_emit_store(c, t, ind, err);
    for (int p = c->tp - 1; p >= 0; p--)
        kl_codegen__tz_close(&c->b, ind);
    return rc;
}

int kl_codegen__tensorized_conv_bf16(const kl_sched_t *s,
                                     const kl_tensorize_t *tz,
                                     const char *entry, kl_kernel_t *out,
                                     char *err)
{
    cbf_t *c = kl_xcalloc(1, sizeof *c);
    c->s = s;
    c->w = kl_sched_workload(s);
    c->tz = tz;
    c->in = kl_intrin_find(tz->intrin);
    c->xa = s_find_access(c->w->body, tz->ta);
    c->wa = s_find_access(c->w->body, tz->tb);
    c->entry = entry ? entry : "kl_main";
    if (c->in->lanes != 16 || c->in->red != 2) {
        free(c);
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "codegen: %s: a bf16 convolution wants a block of "
                         "16 lanes x 2 (avx512_bf16)",
                         tz->intrin);
    }
    s_plan(c);
    s_emit_head(c);
    s_emit_prepare(c);
    kl_buf_printf(&c->b, "void %s(void *const *args)\n{\n", c->entry);
    kl_codegen__tz_tensor_args(&c->b, c->w);
    kl_buf_printf(&c->b,
                  "    const uint16_t *wp = (const uint16_t *)args[%d];\n"
                  "    uint32_t kl_zrow[%lld];\n"
                  "    memset(kl_zrow, 0, sizeof kl_zrow);\n",
                  c->w->ntensors, (long long)c->cg);
    s_emit_repack(c);
    int rc = s_emit_nest(c, err);
    kl_buf_puts(&c->b, "    free(kl_scr);\n}\n");
    kl_buf_free(&c->ek);
    kl_buf_t b = c->b;
    const char *e = c->entry;
    free(c);
    return kl_codegen__tz_kernel(&b, e, rc, out);
}
