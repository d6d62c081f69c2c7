/* codegen_tensorize_bf16.c - C of a product tensorized with avx512_bf16
 * (kl_intrin.h; docs/architecture.md, "The tensorize primitive").
 *
 * The same nest as the int8 products (codegen_tensorize.c): the loops
 * above the block become C loops (`omp parallel for` on the first parallel
 * loop, `GCC unroll` on unrolled ones), the unrolled spatial loops right
 * above the reduction run a register tile of f32 accumulators, and the
 * block (16 output columns x 2 reduction points) is one vdpbf16ps:
 * acc[m][n0..n0+16) += A2[m][k0/2] . Wp[k0/2][n0..][2].
 *
 * A and B are bf16 inputs stored as f32 (kl_ir.h: a read is the value
 * rounded to bf16). The weights are packed as column panels
 * [Np/16][Kp/2][16][2] of uint16_t bf16 bits (each panel in the
 * intrinsic's [K/2][N][2] layout, zeros past K and N), rounded to
 * nearest even like kl_dtype_bits: once in ENTRY_prepare when B is const
 * (dense), at each call into a buffer of the call's otherwise (matmul,
 * whose B is an input: K x N conversions against M x N x K products). The
 * activations are packed per call as bf16 pairs A2[m][k/2] (uint32_t:
 * k in the low half, k + 1 in the high half, zero past K). Accumulation
 * is f32 (vdpbf16ps adds each lane's two exact products in f32); the
 * epilogue (bias, relu, residual, clip) runs in f32 on the whole sums,
 * the output is f32.
 *
 * A batched product (batch_matmul in=bf16: Y[b][m][n] += A[b][m][k] .
 * B[b][k][n], or B[b][n][k]; tz->it_b) is the same kernel over a batch
 * loop: the batch is an iterator of the loops above the block like m and
 * n (the space fuses it with the outer tiles, parallel), A is packed as
 * nb x M pair rows, B (an input) per call batch after batch, each batch's
 * panels at KL_WBAT(b), and the tile's accumulators each read and store
 * at their own batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_act.h"
#include "cg_emit.h"
#include "cg_tz.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_util.h"

typedef kl_codegen__tzp_t bfp_t;

static int s_emit_tile_store(bfp_t *p, char *err);

/* The bf16 family: activations packed as bf16 pairs a2[m][k/2]. */
static const kl_codegen__tzfam_t s_fam = {
    .a_type = "uint32_t",
    .a_at = "${ab}[m * ${as} + k0 / 2]",
    .a_tile = "a_${t}[k0 / 2]",
    .tile_store = s_emit_tile_store,
};

/* Whether the output is a plain f32 Y[m][n] ([M][N]; batched Y[b][m][n],
 * [nb][M][N]) with no epilogue. */
static bool s_plain_out(const bfp_t *p)
{
    const kl_tensor_t *t = &p->w->tensors[p->ot];
    int o = p->tz->it_b >= 0;
    const int its[3] = {p->tz->it_b, p->tz->it_m, p->tz->it_n};
    const int64_t ext[3] = {p->nb, p->M, p->N};
    if (p->w->nepi || t->ndim != 2 + o)
        return false;
    for (int d = 0; d < 2 + o; d++) {
        const kl_affine_t *a = &p->w->out.idx[d];
        if (a->offset || a->div != 1 || t->shape[d] != ext[d + 1 - o])
            return false;
        for (int i = 0; i < p->w->niters; i++)
            if (a->coef[i] != (i == its[d + 1 - o]))
                return false;
    }
    return true;
}

/* One batch's packed weights, in uint16_t (64-byte aligned). */
static int64_t s_wbat(const bfp_t *p)
{
    return (p->kg * p->np * 4 + 63) / 64 * 32;
}

/* The shared plan, then the packed weights' bytes, B const or not and
 * whether a fused store is one vector. */
static void s_plan(bfp_t *p)
{
    kl_codegen__tzp_plan(p);
    p->bconst = p->w->tensors[p->tz->tb].is_const;
    p->wbytes = p->nb * s_wbat(p) * 2;
    p->vstore = p->fused && s_plain_out(p);
    snprintf(p->ab, sizeof p->ab, "a2");
    p->as = p->kg;
}

/* The head: the intrinsic, the RNE conversion (scalar and 16 lanes). */
static void s_emit_head(bfp_t *p)
{
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("name", p->in->name), KL_CG_S("pragma", p->in->pragma),
        KL_CG_I("K", p->K),           KL_CG_I("N", p->N),
        KL_CG_I("M", p->M),           KL_CG_I("kg", p->kg),
        KL_CG_I("np", p->np),         KL_CG_END};
    kl_codegen__template(
        &p->b,
        "/* Tensorized with ${name}: bf16 pairs, f32 accumulators; the "
        "weights packed as column panels in the [K/2][N][2] layout. */\n"
        "#pragma GCC target(\"${pragma}\")\n#include <immintrin.h>\n"
        "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
        "typedef __m512 kl_vacc_t;\n"
        "#define KL_VLOAD(p) _mm512_loadu_ps((const float *)(p))\n"
        "#define KL_VSTORE(p, v) _mm512_storeu_ps((float *)(p), v)\n"
        "#define KL_VZERO() _mm512_setzero_ps()\n"
        "/* vdpbf16ps with the accumulator tied (as the VNNI kernels). */\n"
        "static inline kl_vacc_t kl_dot(kl_vacc_t c, uint32_t a2,\n"
        "                               const uint16_t *w)\n{\n"
        "    __m512i a = _mm512_set1_epi32((int)a2), wv = "
        "_mm512_loadu_si512((const void *)w);\n"
        "    __asm__(\"vdpbf16ps %2, %1, %0\" : \"+v\"(c) : \"v\"(a), "
        "\"v\"(wv));\n    return c;\n}\n"
        "/* f32 -> bf16 bits, round to nearest even (NaN kept quiet). */\n"
        "static inline uint16_t kl_bf16(float v)\n{\n    uint32_t x;\n"
        "    memcpy(&x, &v, 4);\n"
        "    if ((x & 0x7fffffffu) > 0x7f800000u)\n"
        "        return (uint16_t)((x >> 16) | 0x40);\n"
        "    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);\n}\n"
        "/* 16 floats -> their bf16 bits in the low half of each 32-bit "
        "lane: the same RNE, integer, NaN kept quiet. */\n"
        "static inline __m512i kl_bf16v(__m512 v)\n{\n"
        "    __m512i x = _mm512_castps_si512(v);\n"
        "    __m512i h = _mm512_srli_epi32(x, 16);\n"
        "    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, "
        "_mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(h, "
        "_mm512_set1_epi32(1)))), 16);\n"
        "    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, "
        "_mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));\n"
        "    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(h, "
        "_mm512_set1_epi32(0x40)));\n}\n"
        "#define KL_WOFF(k0, n0) ((((n0) / 16) * ${kg}LL + (k0) / 2) * "
        "32)\n",
        kv);
    if (p->tz->it_b >= 0)
        kl_buf_printf(&p->b,
                      "/* Batch b's packed weights. */\n"
                      "#define KL_WBAT(b) ((b) * %lldLL)\n",
                      (long long)s_wbat(p));
    kl_codegen__act_prelude_for(&p->b, p->w);
}

/* The packers. A: per row, 32 values a step (two kl_bf16v narrowed to
 * 16 bits: k order is the pairs' order), the rest scalar, zero past K.
 * B [K][N] (matmul): blocks of 16 pairs of rows x 16 columns (one
 * panel's 1 KiB written in order, 32 rows read as streams), a pair's 16
 * columns one vector (its two rows in each 32-bit lane), the ragged and
 * padding columns scalar.
 * B [N][K] (dense, packed once in prepare): scalar along k.
 * Batched (A [nb][M][K], B [nb][K][N] or [nb][N][K], all inputs): A is
 * nb x M rows; B's batches are packed one after the other (KL_WBAT(b)),
 * the batch loop collapsed with the first parallel one. */
static void s_emit_packers(bfp_t *p)
{
    bool bat = p->tz->it_b >= 0;
    /* The batch loop, B's batch offset and the packed batch's (all empty
     * unless batched). */
    char bl[96] = "", bo[64] = "";
    if (bat) {
        snprintf(bl, sizeof bl, "    for (int64_t b = 0; b < %lld; b++)\n",
                 (long long)p->nb);
        snprintf(bo, sizeof bo, "b * %lldLL + ", (long long)(p->K * p->N));
    }
    const kl_codegen__kv_t kv[] = {KL_CG_I("K", p->K),
                                   KL_CG_I("N", p->N),
                                   KL_CG_I("MB", p->nb * p->M),
                                   KL_CG_I("kg", p->kg),
                                   KL_CG_I("np", p->np),
                                   KL_CG_S("co", bat ? " collapse(2)" : ""),
                                   KL_CG_S("bl", bl),
                                   KL_CG_S("bo", bo),
                                   KL_CG_S("wb", bat ? "KL_WBAT(b) + " : ""),
                                   KL_CG_END};
    kl_codegen__template(
        &p->b,
        "static void kl_packa(const float *A, uint32_t *a2)\n{\n"
        "    #pragma omp parallel for\n"
        "    for (int64_t m = 0; m < ${MB}; m++) {\n"
        "        const float *r = A + m * ${K};\n"
        "        uint16_t *o = (uint16_t *)(a2 + m * ${kg});\n"
        "        int64_t k = 0;\n"
        "        for (; k + 32 <= ${K}; k += 32) {\n"
        "            __m256i lo = _mm512_cvtepi32_epi16(kl_bf16v("
        "_mm512_loadu_ps(r + k)));\n"
        "            __m256i hi = _mm512_cvtepi32_epi16(kl_bf16v("
        "_mm512_loadu_ps(r + k + 16)));\n"
        "            _mm512_storeu_si512((void *)(o + k), "
        "_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));\n"
        "        }\n"
        "        for (; k < 2 * ${kg}; k++)\n"
        "            o[k] = k < ${K} ? kl_bf16(r[k]) : 0;\n"
        "    }\n}\n\n",
        kv);
    if (p->tz->b_nk) {
        kl_codegen__template(
            &p->b,
            "static void kl_packb(const float *B, uint16_t *wp)\n{\n"
            "    #pragma omp parallel for${co}\n${bl}"
            "    for (int64_t n = 0; n < ${np}; n++)\n"
            "        for (int64_t k = 0; k < 2 * ${kg}; k++)\n"
            "            wp[${wb}KL_WOFF(k - k % 2, n - n % 16) + n % 16 * 2 + "
            "k % 2] =\n"
            "                k < ${K} && n < ${N} ? kl_bf16(B[${bo}n * ${K} + "
            "k]) : 0;\n}\n\n",
            kv);
        return;
    }
    kl_codegen__template(
        &p->b,
        "static void kl_packb(const float *B, uint16_t *wp)\n{\n"
        "    #pragma omp parallel for${co}\n${bl}"
        "    for (int64_t gb = 0; gb < ${kg}; gb += 16)\n"
        "    for (int64_t n = 0; n < ${np}; n += 16)\n"
        "    for (int64_t g = gb; g < gb + 16 && g < ${kg}; g++) {\n"
        "        const float *r0 = B + ${bo}2 * g * ${N}, *r1 = r0 + ${N};\n"
        "        uint16_t *w0 = wp + ${wb}KL_WOFF(2 * g, n);\n"
        "        int two = 2 * g + 1 < ${K};\n"
        "        if (n + 16 <= ${N}) {\n"
        "            __m512i lo = kl_bf16v(_mm512_loadu_ps(r0 + n));\n"
        "            __m512i hi = two ? kl_bf16v(_mm512_loadu_ps(r1 + n)) : "
        "_mm512_setzero_si512();\n"
        "            _mm512_storeu_si512((void *)w0, "
        "_mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));\n"
        "            continue;\n"
        "        }\n"
        "        for (int64_t q = n; q < n + 16; q++) {\n"
        "            uint16_t *o = w0 + (q - n) * 2;\n"
        "            o[0] = q < ${N} ? kl_bf16(r0[q]) : 0;\n"
        "            o[1] = q < ${N} && two ? kl_bf16(r1[q]) : 0;\n"
        "        }\n"
        "    }\n}\n\n",
        kv);
}

/* ENTRY_prepare: the CPU check, and the packed weights when B is const.
 * B an input: the block only answers the check (calls may share a block
 * at once, kl_abi.h: each packs B into a buffer of its own). */
static void s_emit_prepare(bfp_t *p)
{
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("entry", p->entry), KL_CG_S("builtin", p->in->builtin),
        KL_CG_I("tb", p->tz->tb), KL_CG_I("wbytes", p->wbytes), KL_CG_END};
    kl_codegen__template(
        &p->b,
        "void *${entry}_prepare(void *const *args)\n{\n"
        "    /* Refuse (NULL) on a CPU without the intrinsic. */\n"
        "    if (!__builtin_cpu_supports(\"${builtin}\"))\n"
        "        return NULL;\n",
        kv);
    kl_codegen__template(
        &p->b,
        p->bconst ? "    uint16_t *wp = (uint16_t *)aligned_alloc(64, "
                    "${wbytes});\n    if (wp)\n"
                    "        kl_packb((const float *)args[${tb}], wp);\n"
                    "    return wp;\n}\n\n"
                  : "    (void)args;\n    return aligned_alloc(64, 64);\n"
                    "}\n\n",
        kv);
}

/* The kernel's signature, its tensors, the packed operands and acc. */
static void s_emit_kernel_open(bfp_t *p)
{
    kl_buf_printf(&p->b, "void %s(void *const *args)\n{\n", p->entry);
    kl_codegen__tz_tensor_args(&p->b, p->w);
    char *alloc = kl_codegen__tzp_acc_alloc(p);
    const kl_codegen__kv_t kv[] = {KL_CG_I("nt", p->nt),
                                   KL_CG_I("ta", p->tz->ta),
                                   KL_CG_I("tb", p->tz->tb),
                                   KL_CG_I("abytes", p->nb * p->M * p->kg * 4),
                                   KL_CG_I("wbytes", p->wbytes),
                                   KL_CG_S("alloc", alloc ? alloc : ""),
                                   KL_CG_S("fw", p->bconst ? "" : "free(wp); "),
                                   KL_CG_END};
    kl_codegen__template(
        &p->b,
        p->bconst ? "    const uint16_t *wp = (const uint16_t *)args[${nt}];\n"
                  : "    uint16_t *wp = (uint16_t *)aligned_alloc(64, "
                    "${wbytes});\n    if (!wp)\n        return;\n"
                    "    kl_packb(t${tb}, wp);\n",
        kv);
    kl_codegen__template(&p->b,
                         "    uint32_t *a2 = (uint32_t *)malloc(${abytes});\n"
                         "    if (!a2) {\n        ${fw}return;\n    }\n"
                         "    kl_packa(t${ta}, a2);\n",
                         kv);
    if (alloc)
        kl_codegen__template(&p->b,
                             "    float *acc = (float *)${alloc};\n"
                             "    if (!acc) {\n        free(a2);\n"
                             "        ${fw}return;\n    }\n",
                             kv);
    free(alloc);
}

/* The register tile's stores after its reduction run (batched: at
 * accumulator t's batch b_t too). */
static int s_emit_tile_store(bfp_t *p, char *err)
{
    int rc = KL_OK;
    bool bat = p->tz->it_b >= 0;
    for (int64_t t = 0; t < p->ntile && !rc; t++) {
        char ar[96], yr[96], ib[48] = "";
        if (bat) {
            snprintf(ar, sizeof ar, "(b_%lld * %lld + m_%lld)", (long long)t,
                     (long long)p->rows, (long long)t);
            snprintf(yr, sizeof yr, "(b_%lld * %lld + m_%lld)", (long long)t,
                     (long long)p->M, (long long)t);
            snprintf(ib, sizeof ib, ", i%d = b_%lld", p->tz->it_b,
                     (long long)t);
        } else {
            snprintf(ar, sizeof ar, "m_%lld", (long long)t);
            snprintf(yr, sizeof yr, "m_%lld", (long long)t);
        }
        const kl_codegen__kv_t kv[] = {KL_CG_S("i", p->ind),
                                       KL_CG_I("t", t),
                                       KL_CG_I("N", p->N),
                                       KL_CG_I("ot", p->ot),
                                       KL_CG_I("np", p->np),
                                       KL_CG_I("im", p->tz->it_m),
                                       KL_CG_I("in", p->tz->it_n),
                                       KL_CG_S("ar", ar),
                                       KL_CG_S("yr", yr),
                                       KL_CG_S("ib", ib),
                                       KL_CG_END};
        if (!p->fused) {
            kl_codegen__template(&p->b,
                                 "${i}if (ok_${t})\n${i}    KL_VSTORE(acc + "
                                 "${ar} * ${np} + n0_${t}, c_${t});\n",
                                 kv);
            continue;
        }
        if (kl_codegen__bf16_epilogue_vec_ok(p->w, p->tz->it_n)) {
            kl_codegen__template(&p->b,
                                 "${i}if (ok_${t}) {\n"
                                 "${i}    const int64_t i${im} = m_${t}, "
                                 "i${in} = n0_${t}${ib};\n",
                                 kv);
            char acc[32], nv[64], ind2[300];
            snprintf(acc, sizeof acc, "c_%lld", (long long)t);
            snprintf(nv, sizeof nv, "(%lld - n0_%lld)", (long long)p->N,
                     (long long)t);
            snprintf(ind2, sizeof ind2, "%s    ", p->ind);
            kl_codegen__bf16_epilogue_vec(&p->b, p->w, p->tz->it_n, acc, nv,
                                          ind2);
            kl_buf_printf(&p->b, "%s}\n", p->ind);
            continue;
        }
        if (p->vstore)
            kl_codegen__template(&p->b,
                                 "${i}if (ok_${t} && n0_${t} + 16 <= ${N})\n"
                                 "${i}    KL_VSTORE(t${ot} + ${yr} * ${N} + "
                                 "n0_${t}, c_${t});\n${i}else ",
                                 kv);
        else
            kl_buf_puts(&p->b, p->ind);
        kl_codegen__template(
            &p->b,
            "if (ok_${t}) {\n${i}    float lane[16];\n"
            "${i}    KL_VSTORE(lane, c_${t});\n"
            "${i}    for (int64_t q = 0; q < 16 && n0_${t} + q < ${N}; q++) {\n"
            "${i}        const int64_t i${im} = m_${t}, i${in} = n0_${t} + "
            "q${ib};\n"
            "${i}        float x = lane[q];\n",
            kv);
        char ind2[300];
        snprintf(ind2, sizeof ind2, "%s        ", p->ind);
        rc = kl_codegen__bf16_epilogue(&p->b, p->w, ind2, err);
        kl_buf_printf(&p->b, "%s    }\n%s}\n", p->ind, p->ind);
    }
    return rc;
}

/* Not fused: every output point from acc, through the epilogue (batched:
 * over the batches too, acc's batch b at rows b * rows). */
static int s_emit_epilogue_pass(bfp_t *p, char *err)
{
    bool bat = p->tz->it_b >= 0;
    if (p->par)
        kl_buf_printf(&p->b, "    #pragma omp parallel for%s\n",
                      bat ? " collapse(2)" : "");
    char ar[64];
    if (bat) {
        kl_buf_printf(&p->b, "    for (int64_t i%d = 0; i%d < %lld; ++i%d)\n",
                      p->tz->it_b, p->tz->it_b, (long long)p->nb, p->tz->it_b);
        snprintf(ar, sizeof ar, "(i%d * %lld + i%d)", p->tz->it_b,
                 (long long)p->rows, p->tz->it_m);
    } else {
        snprintf(ar, sizeof ar, "i%d", p->tz->it_m);
    }
    const kl_codegen__kv_t kv[] = {KL_CG_I("im", p->tz->it_m),
                                   KL_CG_I("in", p->tz->it_n),
                                   KL_CG_I("M", p->M),
                                   KL_CG_I("N", p->N),
                                   KL_CG_I("np", p->np),
                                   KL_CG_S("ar", ar),
                                   KL_CG_END};
    kl_codegen__template(
        &p->b,
        "    for (int64_t i${im} = 0; i${im} < ${M}; ++i${im})\n"
        "        for (int64_t i${in} = 0; i${in} < ${N}; ++i${in}) {\n"
        "            float x = acc[${ar} * ${np} + i${in}];\n",
        kv);
    int rc = kl_codegen__bf16_epilogue(&p->b, p->w, "            ", err);
    kl_buf_puts(&p->b, "        }\n    free(acc);\n");
    return rc;
}

int kl_codegen__tensorized_bf16(const kl_sched_t *s, const kl_tensorize_t *tz,
                                const char *entry, kl_kernel_t *out, char *err)
{
    if (tz->conv)
        return kl_codegen__tensorized_conv_bf16(s, tz, entry, out, err);
    bfp_t *p = kl_xcalloc(1, sizeof *p);
    p->s = s;
    p->w = kl_sched_workload(s);
    p->tz = tz;
    p->in = kl_intrin_find(tz->intrin);
    p->fam = &s_fam;
    p->entry = entry ? entry : "kl_main";
    s_plan(p);
    s_emit_head(p);
    s_emit_packers(p);
    s_emit_prepare(p);
    s_emit_kernel_open(p);
    strcpy(p->ind, "    ");
    int rc = kl_codegen__tzp_nest(p, err);
    if (!rc && !p->fused)
        rc = s_emit_epilogue_pass(p, err);
    kl_buf_puts(&p->b, p->bconst ? "    free(a2);\n}\n"
                                 : "    free(a2);\n    free(wp);\n}\n");
    return kl_codegen__tzp_finish(p, rc, out);
}
