/* codegen_tensorize_store.c - the stores of a tensorized convolution's
 * register tile (cg_tz_conv.h): the AVX-512 vector q-op epilogue, and the
 * plain s32 vector or lane-by-lane epilogue otherwise. Called by the core
 * (codegen_tensorize_conv.c); below it, above codegen_tensorize_base.c. */
#include <stdio.h>
#include <string.h>

#include "cg_emit.h"
#include "cg_tz_conv.h"
#include "kl_err.h"
#include "kl_util.h"

/* One operation of the vector epilogue on x (the lanes of mask m). */
static void s_vec_epi_op(kl_buf_t *b, const conv_t *c, const kl_epilogue_t *ep,
                         int64_t t, const char *ind)
{
    int f = c->tz->it_n;
    long long T = (long long)t;
    switch ((int)ep->kind) {
    case KL_EPI_ADD_TENSOR:
        kl_codegen__template(
            b,
            "${i}    {\n${i}        const __m512i bv = "
            "_mm512_maskz_loadu_epi32(m, t${bt} + v${f}_${t});\n"
            "${i}        const __m512i s = _mm512_add_epi32(x, bv);\n"
            "${i}        const __mmask16 o = _mm512_cmplt_epi32_mask("
            "_mm512_and_si512(_mm512_xor_si512(x, s), "
            "_mm512_xor_si512(bv, s)), _mm512_setzero_si512());\n"
            "${i}        x = _mm512_mask_mov_epi32(s, o, _mm512_xor_si512("
            "_mm512_srai_epi32(x, 31), _mm512_set1_epi32(INT32_MAX)));"
            "\n${i}    }\n",
            (const kl_codegen__kv_t[]){
                KL_CG_S("i", ind), KL_CG_I("bt", ep->access.tensor),
                KL_CG_I("f", f), KL_CG_I("t", T), KL_CG_END});
        break;
    case KL_EPI_REQUANT:
    case KL_EPI_REQUANT_TENSOR:
        kl_buf_printf(b, "%s    {\n%s        const __m512 sv = ", ind, ind);
        if (ep->kind == KL_EPI_REQUANT)
            kl_buf_printf(b, "_mm512_set1_ps((float)%.17g);\n", ep->lo);
        else
            kl_buf_printf(b, "_mm512_maskz_loadu_ps(m, t%d + v%d_%lld);\n",
                          ep->access.tensor, f, T);
        kl_buf_printf(
            b,
            "%s        __m512 r = _mm512_mul_ps(_mm512_cvtepi32_ps(x), "
            "sv);\n"
            "%s        r = _mm512_roundscale_ps(r, "
            "_MM_FROUND_TO_NEAREST_INT "
            "| _MM_FROUND_NO_EXC);\n"
            "%s        r = _mm512_min_ps(_mm512_max_ps(r, "
            "_mm512_set1_ps(-65536.0f)), _mm512_set1_ps(65536.0f));\n"
            "%s        x = _mm512_add_epi32(_mm512_cvttps_epi32(r), "
            "_mm512_set1_epi32(%lld));\n%s    }\n",
            ind, ind, ind, ind, (long long)ep->zp, ind);
        break;
    case KL_EPI_RELU:
        kl_buf_printf(b,
                      "%s    x = _mm512_max_epi32(x, "
                      "_mm512_setzero_si512());\n",
                      ind);
        break;
    default: /* KL_EPI_CLIP */
        kl_buf_printf(b,
                      "%s    x = _mm512_min_epi32(_mm512_max_epi32(x, "
                      "_mm512_set1_epi32(%lld)), _mm512_set1_epi32(%lld));"
                      "\n",
                      ind, (long long)ep->lo, (long long)ep->hi);
        break;
    }
}

/* x stored into Y: kept for the transposed store, or a masked byte store
 * (NHWC), or the lanes at the channel stride (NCHW). */
static void s_vec_store(kl_buf_t *b, const conv_t *c, int64_t t, bool keep,
                        const char *ind)
{
    const kl_workload_t *w = c->w;
    int ot = kl_workload_output(w), f = c->tz->it_n;
    const kl_tensor_t *Y = &w->tensors[ot];
    int64_t K = w->iters[f].extent;
    long long T = (long long)t;
    kl_buf_t yo = {0};
    kl_codegen__tzc_yoff(&yo, c, t);
    /* keep: stored by kl_codegen__tzc_tr_store with the tile's other
     * pixels. */
    if (keep)
        kl_buf_printf(b, "%s    kl_y%lld = _mm512_cvtepi32_epi8(x);\n%s}\n",
                      ind, T, ind);
    else if (c->fst == 1)
        kl_buf_printf(b,
                      "%s    _mm512_mask_cvtepi32_storeu_epi8(t%d + %s, m, "
                      "x);\n%s}\n",
                      ind, ot, yo.data, ind);
    else if (K % 16 == 0) { /* NCHW, whole blocks: 16 stores unrolled */
        kl_buf_printf(
            b,
            "%s    uint8_t yb[16];\n"
            "%s    _mm_storeu_si128((__m128i *)yb, _mm512_cvtepi32_epi8(x));"
            "\n%s    %s *yp = t%d + %s;\n",
            ind, ind, ind, kl_dtype_ctype(Y->dtype), ot, yo.data);
        for (int q = 0; q < 16; q++)
            kl_buf_printf(b, "%s    yp[%lldLL] = (%s)yb[%d];\n", ind,
                          (long long)(q * c->fst), kl_dtype_ctype(Y->dtype), q);
        kl_buf_printf(b, "%s}\n", ind);
    } else /* NCHW: the lanes' bytes at the channel stride */
        kl_codegen__template(
            b,
            "${i}    uint8_t yb[16];\n"
            "${i}    _mm_storeu_si128((__m128i *)yb, _mm512_cvtepi32_epi8(x));"
            "\n${i}    ${ty} *yp = t${ot} + ${yo};\n"
            "${i}    for (int64_t q = 0; q < 16 && v${f}_${t} + q < ${K}; "
            "q++)\n"
            "${i}        yp[q * ${fst}LL] = (${ty})yb[q];\n${i}}\n",
            (const kl_codegen__kv_t[]){
                KL_CG_S("i", ind), KL_CG_S("ty", kl_dtype_ctype(Y->dtype)),
                KL_CG_I("ot", ot), KL_CG_S("yo", yo.data), KL_CG_I("f", f),
                KL_CG_I("t", T), KL_CG_I("K", K), KL_CG_I("fst", c->fst),
                KL_CG_END});
    kl_buf_free(&yo);
}

/* The q-op epilogue of tile t on 16 lanes at once (kl_codegen__tzc_vec_epi_ok),
 * exactly what the scalar epilogue computes: the bias added with int32
 * saturation (the scalar adds in int64 and requant clamps to int32 first), the
 * int32 converted to f32 and multiplied by the scale, rounded to nearest even
 * (nearbyintf), clamped to +-65536 (beyond that, whatever the zero point in
 * -255..255 and the clips, the u8 / s8 store saturates the same way), the
 * zero point added, the clips, the output range, and a masked byte store
 * (vpmovdb) of the lanes below K. */
void kl_codegen__tzc_tile_store_vec(kl_buf_t *b, const conv_t *c, int64_t t,
                                    bool keep, const char *ind)
{
    const kl_workload_t *w = c->w;
    int ot = kl_workload_output(w), f = c->tz->it_n;
    const kl_tensor_t *Y = &w->tensors[ot];
    int64_t K = w->iters[f].extent;
    long long T = (long long)t;
    kl_buf_printf(b, "%sif (ok_%lld) {\n", ind, T);
    if (K % 16)
        kl_buf_printf(b,
                      "%s    const __mmask16 m = v%d_%lld + 16 <= %lld ? "
                      "(__mmask16)0xffff : (__mmask16)((1u << (%lld - "
                      "v%d_%lld)) - 1u);\n",
                      ind, f, T, (long long)K, (long long)K, f, T);
    else
        kl_buf_printf(b, "%s    const __mmask16 m = (__mmask16)0xffff;\n", ind);
    kl_buf_printf(b,
                  "%s    __m512i x = _mm512_sub_epi32(c_%lld, "
                  "_mm512_maskz_loadu_epi32(m, comp + v%d_%lld));\n",
                  ind, T, f, T);
    for (int i = 0; i < w->nepi; i++)
        s_vec_epi_op(b, c, &w->epi[i], t, ind);
    bool u8 = Y->dtype == KL_DT_U8;
    kl_buf_printf(b,
                  "%s    x = _mm512_min_epi32(_mm512_max_epi32(x, "
                  "_mm512_set1_epi32(%d)), _mm512_set1_epi32(%d));\n",
                  ind, u8 ? 0 : -128, u8 ? 255 : 127);
    s_vec_store(b, c, t, keep, ind);
}

/* The finished accumulator of tile t: one vector store of acc - comp when
 * the output is a plain s32 with no epilogue and the block is whole, the
 * workload's epilogue lane by lane otherwise. */
int kl_codegen__tzc_tile_store(kl_buf_t *b, const conv_t *c, int64_t t,
                               bool vstore, const char *ind, char *err)
{
    const kl_workload_t *w = c->w;
    int ot = kl_workload_output(w), f = c->tz->it_n, L = c->in->lanes;
    const kl_tensor_t *Y = &w->tensors[ot];
    int64_t K = w->iters[f].extent;
    if (vstore) {
        kl_buf_printf(b, "%sif (ok_%lld && v%d_%lld + %d <= %lld)\n", ind,
                      (long long)t, f, (long long)t, L, (long long)K);
        kl_buf_printf(b, "%s    KL_VSTORE(t%d + (int64_t)0", ind, ot);
        int64_t st = 1;
        for (int d = Y->ndim - 1; d >= 0; d--) {
            int it = -1;
            for (int k = 0; k < w->niters; k++)
                if (w->out.idx[d].coef[k])
                    it = k;
            kl_buf_printf(b, " + %lld * v%d_%lld", (long long)st, it,
                          (long long)t);
            st *= Y->shape[d];
        }
        kl_buf_printf(b, ", KL_VSUB(c_%lld, KL_VLOAD(comp + v%d_%lld)));\n",
                      (long long)t, f, (long long)t);
        if (K % L == 0)
            return KL_OK;
        kl_buf_printf(b, "%selse ", ind);
    } else {
        kl_buf_puts(b, ind);
    }
    kl_codegen__template(
        b,
        "if (ok_${t}) {\n${i}    int32_t lane[${L}];\n"
        "${i}    KL_VSTORE(lane, c_${t});\n"
        "${i}    for (int64_t q = 0; q < ${L} && v${f}_${t} + q < ${K}; q++) "
        "{\n",
        (const kl_codegen__kv_t[]){KL_CG_S("i", ind), KL_CG_I("t", t),
                                   KL_CG_I("L", L), KL_CG_I("f", f),
                                   KL_CG_I("K", K), KL_CG_END});
    for (int it = 0; it < w->niters; it++)
        if (!w->iters[it].reduce)
            kl_buf_printf(b, "%s        const int64_t i%d = v%d_%lld%s;\n", ind,
                          it, it, (long long)t, it == f ? " + q" : "");
    kl_buf_printf(b,
                  "%s        int64_t x = (int32_t)((uint32_t)lane[q] - "
                  "(uint32_t)comp[i%d]);\n",
                  ind, f);
    char ind2[300];
    snprintf(ind2, sizeof ind2, "%s        ", ind);
    int rc = kl_codegen__int_epilogue(b, w, ind2, err);
    kl_buf_printf(b, "%s    }\n%s}\n", ind, ind);
    return rc;
}
