/* codegen_tensorize_conv.c - C of a tensorized convolution (qconv2d NHWC
 * or NCHW, groups 1; kl_sched_tensorize's convolution form;
 * docs/architecture.md, "The tensorize primitive").
 *
 * im2col-free: the block is `lanes` output channels f x 4 input channels
 * c, one intrinsic call acc[f0..f0+lanes) += X[pixel, tap][c0..c0+4) .
 * Wp[f0/lanes][tap][c0/4][lanes][4]; the taps (r, s) and the channel
 * groups are the reduction loops right above the block, all of them, so
 * the register tile (unrolled spatial loops above them: output pixels x
 * channel blocks, at most 32 accumulators) holds whole sums and the
 * epilogue runs where the tile ends.
 *
 * ENTRY_prepare packs the const weights W[taps..,c,f] as
 * [ceil(K/lanes)][taps][ceil(C/4)][lanes][4] (zeros past K and C) and the
 * compensation comp[f] = za * sum over every tap and channel of W[..,f].
 *
 * Padding. A tap of an output pixel whose input point lies outside X (the
 * zero-point padding of the workload: the reference adds nothing for such
 * a point) reads a row of za bytes instead of X: it adds za * W to the
 * accumulator, and the full compensation takes za * W away again, so the
 * point contributes exactly 0, like the reference. Border pixels thus need
 * no separate path and the compensation stays one vector per channel
 * block. (The accumulator wraps in int32 like vpdpbusd; the true sum fits,
 * so the wrap is exact.)
 *
 * The tap's row pointer (X or the za row) is computed once per tap, above
 * the innermost loops that run the channels only. C not a multiple of 4:
 * the last group reads only the channels that exist (kl_a4), the rest are
 * zeros, against zero weights. Tile pixels past the output (an imperfect
 * split) read in-bounds rows or the za row and are never stored.
 *
 * NCHW (X's channel not its last index; the model importer's layout): the
 * weights W[f,c,r,s] are packed into the same layout in prepare, and each
 * call first repacks X into an NHWC scratch padded with za (s_repack), so
 * the same core runs on it and every tap is in bounds; a tile pixel's 16
 * output channels are then stored at Y's channel stride. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_emit.h"
#include "cg_tz.h"
#include "cg_tz_conv.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_util.h"

/* Tile t's offset along iterator it from the register tile's loops
 * [tp, hp) at t's constants (what the tile setup in
 * codegen_tensorize_base.c adds to the outer loops' part). */
static int64_t s_tile_off(const conv_t *c, int64_t t, int it)
{
    int64_t rem = t, off = 0;
    for (int q = c->hp - 1; q >= c->tp; q--) {
        const kl_loop_t *l = kl_sched_loop(c->s, q);
        int64_t v = rem % l->extent, inner = 1;
        rem /= l->extent;
        for (int p = l->nparts - 1; p >= 0; p--) {
            const kl_loop_part_t *pt = &l->parts[p];
            if (pt->iter == it)
                off += pt->stride *
                       (l->nparts == 1 ? v : (v / inner) % pt->extent);
            inner *= pt->extent;
        }
    }
    return off;
}

/* The weight prefetch (c->pfg, c->pft): in-model, a layer's packed
 * weights come from memory or L3, the layers between having evicted
 * them (ResNet-18's 7x7x512 layers, 2.3 MB each, 10-15 % slower in the
 * model than run alone, 23 % for the 14x14 -> 7x7 stride 2). Every
 * inner step then prefetches into L2 the line of the next K group's
 * weights at the same tap and channels: the group the thread's next
 * iteration reads when K is the inner index of the parallel loop, or
 * that it reads after its spatial tiles when K is the outer one. Below
 * KL_TZC_PF_BYTES the weights stay in L2 and the prefetches cost issue
 * slots for nothing (ResNet-18's 73 KB stride 2 layer measured slower
 * with them). */
static void s_prefetch_plan(conv_t *c, int64_t wbytes)
{
    c->pfg = 0;
    if (wbytes < KL_TZC_PF_BYTES || c->nkb < 2)
        return;
    int L = c->in->lanes;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t t = 0; t < c->ntile; t++) {
        int64_t kb = s_tile_off(c, t, c->tz->it_n) / L;
        c->pft[t] = true;
        for (int64_t u = 0; u < t; u++)
            if (s_tile_off(c, u, c->tz->it_n) / L == kb)
                c->pft[t] = false;
        lo = kb < lo ? kb : lo;
        hi = kb > hi ? kb : hi;
    }
    c->pfg = (int)(hi - lo + 1);
}

/* One convolution's generation: the plan shared with the NCHW parts (c),
 * the sizes of the packed weights and the prepared block, and the text. */
typedef struct {
    conv_t c;
    const char *entry;
    int64_t K, C;   /* output and input channels */
    int64_t ntap;   /* taps per output channel */
    int64_t np, cg; /* output channels padded to lanes; channel groups */
    int64_t wbytes; /* packed weights */
    int64_t cbytes; /* the compensation */
    int64_t sbytes; /* NCHW: busy flag and scratch (0: none) */
    kl_buf_t ek;    /* c0 over the loops above the block */
    kl_buf_t b;
} cgen_t;

/* NCHW: the padded scratch's shape (every point a tap reads in bounds)
 * and bytes, after a 64-byte busy flag; how the repack steps. */
static void s_plan_scratch(cgen_t *q)
{
    conv_t *c = &q->c;
    const kl_workload_t *w = c->w;
    const kl_tensor_t *X = &w->tensors[c->tz->ta];
    q->sbytes = 0;
    c->cpad = q->cg * 4;
    for (int d = 0; d < X->ndim; d++) {
        c->lo[d] = 0;
        c->sh[d] = X->shape[d];
        if (!c->repack || d == c->dc)
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
    }
    int64_t joff;
    c->rp16 = kl_codegen__tzc_repack16(
        c, kl_codegen__tzc_read_step(c, X->ndim - 1, &joff));
    if (c->repack) {
        q->sbytes = c->cpad;
        for (int d = 0; d < X->ndim; d++)
            q->sbytes *= d == c->dc ? 1 : c->sh[d];
        q->sbytes = 64 + (q->sbytes + 63) / 64 * 64;
    }
}

/* The layouts: X's channel index, Y's channel stride, the store by
 * transposes, the packed weights' sizes, the prefetch and the scratch. */
static void s_plan(cgen_t *q)
{
    conv_t *c = &q->c;
    const kl_workload_t *w = c->w;
    const kl_tensorize_t *tz = c->tz;
    int L = c->in->lanes;
    kl_codegen__tzc_plan_loops(c);
    const kl_tensor_t *X = &w->tensors[tz->ta], *W = &w->tensors[tz->tb];
    c->dc = X->ndim - 1;
    for (int d = X->ndim - 1; d >= 0; d--)
        if (c->xa->idx[d].coef[tz->it_k]) /* the match: c's index alone */
            c->dc = d;
    c->repack = c->dc != X->ndim - 1;
    const kl_tensor_t *Y = &w->tensors[kl_workload_output(w)];
    c->fst = 1;
    for (int d = Y->ndim - 1; d >= 0 && !w->out.idx[d].coef[tz->it_n]; d--)
        c->fst *= Y->shape[d];
    c->lx = kl_codegen__tzc_tr_loop(c);
    q->K = w->iters[tz->it_n].extent;
    q->C = X->shape[c->dc];
    q->ntap = kl_tensor_numel(W) / (q->K * q->C);
    kl_buf_t tmp = {0};
    int64_t fmax, cmax;
    kl_codegen__tz_iter_expr(c->s, tz->it_n, c->bpos, &tmp, &fmax);
    kl_codegen__tz_iter_expr(c->s, tz->it_k, c->bpos, &q->ek, &cmax);
    kl_buf_free(&tmp);
    q->np = (fmax / L + 1) * L;
    q->cg = cmax / 4 + 1;
    if (q->cg < (q->C + 3) / 4)
        q->cg = (q->C + 3) / 4;
    q->wbytes = (q->np * q->ntap * q->cg * 4 + 63) / 64 * 64;
    q->cbytes = (q->np * 4 + 63) / 64 * 64;
    c->nkb = q->np / L;
    s_prefetch_plan(c, q->wbytes);
    s_plan_scratch(q);
}

/* The file's head: the target, includes, the intrinsic, kl_a4 and the
 * repack's transpose. */
static void s_emit_head(cgen_t *q)
{
    const conv_t *c = &q->c;
    const kl_codegen__kv_t kv[] = {KL_CG_S("name", c->in->name),
                                   KL_CG_I("L", c->in->lanes),
                                   KL_CG_S("pragma", c->in->pragma),
                                   KL_CG_S("vl", c->lx >= 0 ? ",avx512vl" : ""),
                                   KL_CG_I("C", q->C),
                                   KL_CG_I("c4", q->C % 4 == 0 || c->repack),
                                   KL_CG_END};
    kl_codegen__template(
        &q->b,
        "/* Tensorized convolution with ${name}: the weights packed "
        "once, in prepare, as [K/${L}][taps][C/4][${L}][4]. */\n"
        "#pragma GCC target(\"${pragma}${vl}\")\n"
        "/* One allocation region for the whole kernel: with GCC's\n"
        " * default regions, small changes around the register\n"
        " * tile (the epilogue's kept codes) made it keep the\n"
        " * weight vectors of the innermost loop on the stack,\n"
        " * reloading them per tile (a 7x7x512 layer 64% slower). */\n"
        "#if defined(__GNUC__) && !defined(__clang__)\n"
        "#pragma GCC optimize(\"ira-region=one\")\n#endif\n"
        "#include <immintrin.h>\n"
        "#include <stdlib.h>\n#include <string.h>\n",
        kv);
    kl_buf_puts(&q->b, kl_codegen__int_prelude());
    kl_codegen__tz_intrin_macros(&q->b, c->in->name);
    kl_codegen__template(
        &q->b,
        "/* 4 input channels from c0 on, zeros past the last (${C}). */\n"
        "static inline int32_t kl_a4(const uint8_t *row, int64_t c0)\n"
        "{\n    int32_t v = 0;\n    if (${c4} || c0 + 4 <= ${C}) {\n"
        "        memcpy(&v, row + c0, 4);\n        return v;\n    }\n"
        "    uint32_t u = 0;\n"
        "    for (int64_t j = 0; c0 + j < ${C}; j++)\n"
        "        u |= (uint32_t)row[c0 + j] << (8 * j);\n"
        "    return (int32_t)u;\n}\n\n",
        kv);
    if (c->rp16)
        kl_buf_puts(&q->b, kl_codegen__tzc_tr16_src);
}

/* ENTRY_prepare: the weights packed, the compensation, the busy flag. */
static void s_emit_prepare(cgen_t *q)
{
    const conv_t *c = &q->c;
    kl_buf_t wi = {0};
    kl_codegen__tzc_widx(&wi, c);
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("entry", q->entry),
        KL_CG_S("builtin", c->in->builtin),
        KL_CG_S("vl",
                c->lx >= 0 ? " || !__builtin_cpu_supports(\"avx512vl\")" : ""),
        KL_CG_I("tb", c->tz->tb),
        KL_CG_I("blk", q->wbytes + q->cbytes + q->sbytes),
        KL_CG_I("flag", q->wbytes + q->cbytes),
        KL_CG_I("nflag", q->sbytes ? 64 : 0),
        KL_CG_I("wbytes", q->wbytes),
        KL_CG_I("nfo", q->np / c->in->lanes),
        KL_CG_I("ntap", q->ntap),
        KL_CG_I("cg", q->cg),
        KL_CG_I("L", c->in->lanes),
        KL_CG_I("K", q->K),
        KL_CG_I("C", q->C),
        KL_CG_S("wi", wi.data),
        KL_CG_I("np", q->np),
        KL_CG_I("za", c->tz->za),
        KL_CG_END};
    kl_codegen__template(
        &q->b,
        "void *${entry}_prepare(void *const *args)\n{\n"
        "    /* Refuse (NULL) on a CPU without the intrinsic. */\n"
        "    if (!__builtin_cpu_supports(\"${builtin}\")${vl})\n"
        "        return NULL;\n"
        "    const int8_t *B = (const int8_t *)args[${tb}];\n"
        "    char *blk = (char *)aligned_alloc(64, ${blk});\n"
        "    if (!blk)\n        return NULL;\n"
        "    memset(blk + ${flag}, 0, ${nflag}); /* the busy flag */\n"
        "    int8_t *wp = (int8_t *)blk;\n"
        "    int32_t *comp = (int32_t *)(blk + ${wbytes});\n"
        "    int64_t o = 0;\n"
        "    for (int64_t fo = 0; fo < ${nfo}; fo++)\n"
        "        for (int64_t tap = 0; tap < ${ntap}; tap++)\n"
        "            for (int64_t g = 0; g < ${cg}; g++)\n"
        "                for (int64_t l = 0; l < ${L}; l++)\n"
        "                    for (int64_t j = 0; j < 4; j++, o++) {\n"
        "                        int64_t f = fo * ${L} + l, c = g * 4 + j;\n"
        "                        wp[o] = f < ${K} && c < ${C} ? B[${wi}] : 0;\n"
        "                    }\n"
        "    for (int64_t f = 0; f < ${np}; f++) {\n"
        "        int64_t sum = 0;\n"
        "        for (int64_t tap = 0; f < ${K} && tap < ${ntap}; tap++)\n"
        "            for (int64_t c = 0; c < ${C}; c++)\n"
        "                sum += B[${wi}];\n"
        "        comp[f] = (int32_t)(uint32_t)(uint64_t)(sum * ${za});\n"
        "    }\n"
        "    return blk;\n}\n\n",
        kv);
    kl_buf_free(&wi);
}

/* The kernel's signature, its tensors, the prepared block, the padding
 * row and (NCHW) the repack. */
static void s_emit_kernel_open(cgen_t *q)
{
    const conv_t *c = &q->c;
    kl_buf_printf(&q->b, "void %s(void *const *args)\n{\n", q->entry);
    kl_codegen__tz_tensor_args(&q->b, c->w);
    const kl_codegen__kv_t kv[] = {
        KL_CG_I("nt", c->w->ntensors), KL_CG_I("wbytes", q->wbytes),
        KL_CG_I("row", q->cg * 4), KL_CG_I("za", c->tz->za), KL_CG_END};
    kl_codegen__template(&q->b,
                         "    const int8_t *wp = (const int8_t *)args[${nt}];\n"
                         "    const int32_t *comp = (const int32_t *)((const "
                         "char *)args[${nt}] + ${wbytes});\n"
                         "    /* The padding row: za in every channel. */\n"
                         "    uint8_t kl_zrow[${row}];\n"
                         "    memset(kl_zrow, ${za}, sizeof kl_zrow);\n",
                         kv);
    if (c->repack)
        kl_codegen__tzc_repack(&q->b, c, q->wbytes + q->cbytes, q->sbytes - 64);
}

/* The register tile's stores (vector epilogue, scalar epilogue or plain
 * s32 vectors; by transposes when c->lx). */
static int s_emit_stores(kl_buf_t *b, const conv_t *c, const char *ind,
                         char *err)
{
    const kl_workload_t *w = c->w;
    bool vstore = !w->nepi &&
                  w->tensors[kl_workload_output(w)].dtype == KL_DT_S32 &&
                  c->fst == 1;
    int rc = KL_OK;
    bool vepi = kl_codegen__tzc_vec_epi_ok(c);
    if (c->lx >= 0)
        for (int64_t t = 0; t < c->ntile; t++)
            kl_buf_printf(b, "%s__m128i kl_y%lld = _mm_setzero_si128();\n", ind,
                          (long long)t);
    for (int64_t t = 0; t < c->ntile && !rc; t++)
        if (vepi)
            kl_codegen__tzc_tile_store_vec(b, c, t, c->lx >= 0, ind);
        else
            rc = kl_codegen__tzc_tile_store(b, c, t, vstore, ind, err);
    if (c->lx >= 0)
        kl_codegen__tzc_tr_store(b, c, ind);
    return rc;
}

/* The int8 family: 4 channels a group as bytes (kl_a4). */
static const kl_codegen__tzcfam_t s_fam = {
    .a_type = "uint8_t",
    .w_type = "int8_t",
    .cgrp = 4,
    .a_dot = "kl_a4(a_${t}, c0)",
    .stores = s_emit_stores,
};

int kl_codegen_tensorized_conv(const kl_sched_t *s, const kl_tensorize_t *tz,
                               const char *entry, kl_kernel_t *out, char *err)
{
    cgen_t *q = kl_xcalloc(1, sizeof *q);
    conv_t *c = &q->c;
    c->s = s;
    c->w = kl_sched_workload(s);
    c->tz = tz;
    c->in = kl_intrin_find(tz->intrin);
    c->fam = &s_fam;
    c->xa = kl_codegen__tzc_find_access(c->w->body, tz->ta);
    c->wa = kl_codegen__tzc_find_access(c->w->body, tz->tb);
    q->entry = entry;
    s_plan(q);
    s_emit_head(q);
    s_emit_prepare(q);
    s_emit_kernel_open(q);
    int rc = kl_codegen__tzc_nest(&q->b, c, q->ek.data, q->ntap, q->cg, err);
    if (c->repack)
        kl_buf_puts(&q->b, "    if (kl_own)\n        free(kl_scr);\n"
                           "    else\n        __atomic_store_n(kl_busy, 0, "
                           "__ATOMIC_RELEASE);\n");
    kl_buf_puts(&q->b, "}\n");
    kl_buf_free(&q->ek);
    kl_buf_t b = q->b;
    free(q);
    return kl_codegen__tz_kernel(&b, entry, rc, out);
}
