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

#include "cg_act.h"
#include "cg_emit.h"
#include "cg_tz.h"
#include "cg_tz_conv.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_util.h"

/* One bf16 convolution's generation: the plan of the shared steps (z)
 * and the sizes of the packed weights and the scratch. */
typedef struct {
    conv_t z;
    const char *entry;
    int64_t K, C, ntap, np, cg, wbytes, npts;
    kl_buf_t ek; /* c0 over the loops above the block */
    kl_buf_t b;
} cbf_t;

/* The layouts: X's channel index, the scratch's padded shape (every
 * point a tap reads in bounds), the packed weights' sizes. */
static void s_plan(cbf_t *c)
{
    const kl_workload_t *w = c->z.w;
    const kl_tensorize_t *tz = c->z.tz;
    kl_codegen__tzc_plan_loops(&c->z);
    const kl_tensor_t *X = &w->tensors[tz->ta], *W = &w->tensors[tz->tb];
    c->z.dc = X->ndim - 1;
    for (int d = X->ndim - 1; d >= 0; d--)
        if (c->z.xa->idx[d].coef[tz->it_k])
            c->z.dc = d;
    c->K = w->iters[tz->it_n].extent;
    c->C = X->shape[c->z.dc];
    c->ntap = kl_tensor_numel(W) / (c->K * c->C);
    kl_buf_t tmp = {0};
    int64_t fmax, cmax;
    kl_codegen__tz_iter_expr(c->z.s, tz->it_n, c->z.bpos, &tmp, &fmax);
    kl_codegen__tz_iter_expr(c->z.s, tz->it_k, c->z.bpos, &c->ek, &cmax);
    kl_buf_free(&tmp);
    c->np = (fmax / 16 + 1) * 16;
    c->cg = cmax / 2 + 1;
    if (c->cg < (c->C + 1) / 2)
        c->cg = (c->C + 1) / 2;
    c->wbytes = (c->np * c->ntap * c->cg * 4 + 63) / 64 * 64;
    c->npts = 1;
    for (int d = 0; d < X->ndim; d++) {
        c->z.lo[d] = 0;
        c->z.sh[d] = X->shape[d];
        if (d == c->z.dc)
            continue;
        const kl_affine_t *a = &c->z.xa->idx[d];
        int64_t mn = a->offset, mx = a->offset;
        for (int it = 0; it < w->niters; it++) {
            int64_t v = a->coef[it] * (w->iters[it].extent - 1);
            mn += v < 0 ? v : 0;
            mx += v > 0 ? v : 0;
        }
        c->z.lo[d] = mn < 0 ? -mn : 0;
        c->z.sh[d] = c->z.lo[d] + X->shape[d] +
                     (mx > X->shape[d] - 1 ? mx - (X->shape[d] - 1) : 0);
        c->npts *= c->z.sh[d];
    }
}

static void s_emit_head(cbf_t *c)
{
    const kl_codegen__kv_t kv[] = {KL_CG_S("name", c->z.in->name),
                                   KL_CG_S("pragma", c->z.in->pragma),
                                   KL_CG_END};
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
    kl_codegen__act_prelude_for(&c->b, c->z.w);
}

/* ENTRY_prepare: the CPU check, the weights converted and packed. */
static void s_emit_prepare(cbf_t *c)
{
    kl_buf_t wi = {0};
    kl_codegen__tzc_widx(&wi, &c->z);
    const kl_codegen__kv_t kv[] = {KL_CG_S("entry", c->entry),
                                   KL_CG_S("builtin", c->z.in->builtin),
                                   KL_CG_I("tb", c->z.tz->tb),
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
    const kl_tensor_t *X = &c->z.w->tensors[c->z.tz->ta];
    int64_t st[KL_IR_MAX_DIMS], acc = 1;
    for (int d = X->ndim - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= X->shape[d];
    }
    int dl = X->ndim - 1 == c->z.dc ? X->ndim - 2 : X->ndim - 1;
    /* A small input is converted by one thread: a parallel region costs
     * more than its few thousand conversions (and a barrier waits for a
     * descheduled thread on a shared machine). */
    bool big = c->npts * c->cg >= KL_TZCB_PAR_WORDS;
    const kl_codegen__kv_t kv[] = {KL_CG_I("nrows", c->npts / c->z.sh[dl]),
                                   KL_CG_I("shl", c->z.sh[dl]),
                                   KL_CG_I("lol", c->z.lo[dl]),
                                   KL_CG_I("xl", X->shape[dl]),
                                   KL_CG_I("stl", st[dl]),
                                   KL_CG_I("cg", c->cg),
                                   KL_CG_I("C", c->C),
                                   KL_CG_I("xs", st[c->z.dc]),
                                   KL_CG_I("ta", c->z.tz->ta),
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
        if (d == c->z.dc || d == dl)
            continue;
        kl_buf_printf(&c->b,
                      "        { int64_t h = r %% %lld - %lld; r /= %lld; "
                      "in_ &= h >= 0 && h < %lld; xo += h * %lld; }\n",
                      (long long)c->z.sh[d], (long long)c->z.lo[d],
                      (long long)c->z.sh[d], (long long)X->shape[d],
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

/* Tile t's finished sums through the f32 epilogue into Y: 16 lanes at
 * once where kl_codegen__bf16_epilogue_vec_ok, else lane by lane. */
static int s_emit_store(kl_buf_t *b, const conv_t *c, int64_t t,
                        const char *ind, char *err)
{
    const kl_workload_t *w = c->w;
    int itn = c->tz->it_n;
    if (kl_codegen__bf16_epilogue_vec_ok(w, itn)) {
        kl_buf_printf(b, "%sif (ok_%lld) {\n", ind, (long long)t);
        for (int it = 0; it < w->niters; it++)
            if (!w->iters[it].reduce)
                kl_buf_printf(b, "%s    const int64_t i%d = v%d_%lld;\n", ind,
                              it, it, (long long)t);
        char acc[32], nv[64], ind2[300];
        snprintf(acc, sizeof acc, "c_%lld", (long long)t);
        snprintf(nv, sizeof nv, "(%lld - v%d_%lld)",
                 (long long)w->iters[itn].extent, itn, (long long)t);
        snprintf(ind2, sizeof ind2, "%s    ", ind);
        kl_codegen__bf16_epilogue_vec(b, w, itn, acc, nv, ind2);
        kl_buf_printf(b, "%s}\n", ind);
        return KL_OK;
    }
    kl_buf_printf(b,
                  "%sif (ok_%lld) {\n%s    float lane[16];\n"
                  "%s    KL_VSTORE(lane, c_%lld);\n"
                  "%s    for (int64_t q = 0; q < 16 && v%d_%lld + q < %lld; "
                  "q++) {\n",
                  ind, (long long)t, ind, ind, (long long)t, ind, itn,
                  (long long)t, (long long)w->iters[itn].extent);
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

/* The register tile's stores, tile by tile. */
static int s_emit_stores(kl_buf_t *b, const conv_t *c, const char *ind,
                         char *err)
{
    int rc = KL_OK;
    for (int64_t t = 0; t < c->ntile && !rc; t++)
        rc = s_emit_store(b, c, t, ind, err);
    return rc;
}

/* The bf16 family: channel pairs as uint32_t rows of the scratch. */
static const kl_codegen__tzcfam_t s_fam = {
    .a_type = "uint32_t",
    .w_type = "uint16_t",
    .cgrp = 2,
    .a_dot = "a_${t}[c0 / 2]",
    .stores = s_emit_stores,
};

int kl_codegen__tensorized_conv_bf16(const kl_sched_t *s,
                                     const kl_tensorize_t *tz,
                                     const char *entry, kl_kernel_t *out,
                                     char *err)
{
    cbf_t *c = kl_xcalloc(1, sizeof *c);
    c->z.s = s;
    c->z.w = kl_sched_workload(s);
    c->z.tz = tz;
    c->z.in = kl_intrin_find(tz->intrin);
    c->z.fam = &s_fam;
    c->z.xa = kl_codegen__tzc_find_access(c->z.w->body, tz->ta);
    c->z.wa = kl_codegen__tzc_find_access(c->z.w->body, tz->tb);
    /* Every tap reads the scratch (rows of cg pairs); no store by
     * transposes, no prefetch. */
    c->z.repack = true;
    c->z.lx = -1;
    c->entry = entry ? entry : "kl_main";
    if (c->z.in->lanes != 16 || c->z.in->red != 2) {
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
    kl_codegen__tz_tensor_args(&c->b, c->z.w);
    kl_buf_printf(&c->b,
                  "    const uint16_t *wp = (const uint16_t *)args[%d];\n"
                  "    uint32_t kl_zrow[%lld];\n"
                  "    memset(kl_zrow, 0, sizeof kl_zrow);\n",
                  c->z.w->ntensors, (long long)c->cg);
    s_emit_repack(c);
    c->z.cpad = c->cg;
    int rc =
        kl_codegen__tzc_nest(&c->b, &c->z, c->ek.data, c->ntap, c->cg, err);
    kl_buf_puts(&c->b, "    free(kl_scr);\n}\n");
    kl_buf_free(&c->ek);
    kl_buf_t b = c->b;
    const char *e = c->entry;
    free(c);
    return kl_codegen__tz_kernel(&b, e, rc, out);
}
