/* export_qfuse.c - integer shortcuts of an exported quantized graph
 * (export_int.h; the groups: kl_mgraph_qfuse_plan, kl_model_qgroups.c).
 *
 * A QDQ model leaves the integer domain around the layers kiln has no
 * integer form of: a residual add is `dequantize a`, `dequantize b`,
 * `add`, `quantize`, and a max pool `dequantize`, `max_pool2d`,
 * `quantize`. Written layer by layer that is four (three) passes over
 * f32 tensors four times the size of the codes. The export writes each
 * such group as one loop over the codes instead, computing exactly what
 * the layers compute: the same f32 operations in the same order (no
 * contraction into fused multiply-adds), so the codes out are the
 * layers' bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_util.h"

static const char *s_t(kl_dtype t)
{
    return t == KL_DT_S8 ? "s8" : "u8";
}

char *kl_export__qfuse_call(const kl_mgraph_t *g, int i, const kl_qfuse_t *f,
                            const char *const *in, const char *out)
{
    const kl_mnode_t *nd = &g->nodes[i], *q = &g->nodes[f->q];
    if (f->kind == KL_QF_ADD) {
        const kl_mnode_t *a = &g->nodes[nd->in[0]], *b = &g->nodes[nd->in[1]];
        int64_t n = 1;
        for (int k = 0; k < nd->ndim; k++)
            n *= nd->shape[k];
        return kl_xasprintf(
            "    s_qadd_%s_%s_%s(%s, %.9gf, %lld, %s, %.9gf, %lld, %s, %.9gf, "
            "%lld, %lldLL); /* %s + %s -> %s */\n",
            s_t(g->nodes[a->in[0]].dt), s_t(g->nodes[b->in[0]].dt),
            s_t(q->qout), in[0], (double)(float)a->scale, (long long)a->zo,
            in[1], (double)(float)b->scale, (long long)b->zo, out,
            (double)(float)q->scale, (long long)q->zo, (long long)n, a->name,
            b->name, q->name);
    }
    return kl_xasprintf("    s_qmaxpool_%d(%s, %s); /* %s */\n", i, in[0], out,
                        q->name);
}

/* The helpers, per combination of types used (u8 / s8 in and out). The
 * add is written as the layers compute it: each input dequantized into
 * an f32 ((code - zp) * scale), their f32 sum v, then quantize (v / scale
 * rounded half to even plus zp, saturated); fp-contract off so that no
 * multiply-add is fused.
 *
 * With AVX-512, 16 codes a step divide by multiplying: q = v * (1 / sy)
 * differs from the quotient v / sy (both rounded to f32) by at most about
 * 3 ulp of q (2^-24 relative each: the reciprocal, the product, the
 * quotient), so the two round to one integer unless a half-integer lies
 * between them; a step whose every lane is farther than |q| 2^-22 +
 * 2^-24 from a half-integer keeps the product's, and any other step
 * divides (ties included: a tie is 0 from a half-integer). Exact, and
 * 30 % faster than dividing every step (the division's throughput
 * dominates the loop); export_qfuse_test's ties exercise the divisions. */
void kl_export__qfuse_helpers(const kl_mgraph_t *g, const kl_qfuse_t *plan,
                              kl_buf_t *b)
{
    static const struct {
        const char *name, *ctype, *cvt;
        int lo, hi;
    } ts[] = {{"u8", "uint8_t", "_mm512_cvtepu8_epi32", 0, 255},
              {"s8", "int8_t", "_mm512_cvtepi8_epi32", -128, 127}};
    bool add[2][2][2] = {{{false}}};
    for (int i = 0; i < g->n; i++) {
        const kl_mnode_t *nd = &g->nodes[i];
        if (plan[i].kind == KL_QF_ADD) {
            int ta = g->nodes[g->nodes[nd->in[0]].in[0]].dt == KL_DT_S8;
            int tb = g->nodes[g->nodes[nd->in[1]].in[0]].dt == KL_DT_S8;
            add[ta][tb][g->nodes[plan[i].q].qout == KL_DT_S8] = true;
        }
    }
    bool any = false;
    for (int k = 0; k < 8; k++)
        any = any || add[k >> 2][(k >> 1) & 1][k & 1];
    if (any)
        kl_buf_puts(b, "#if defined(__GNUC__) && !defined(__clang__)\n"
                       "#define S_NO_CONTRACT "
                       "__attribute__((optimize(\"fp-contract=off\")))\n"
                       "#else\n#define S_NO_CONTRACT\n#endif\n"
                       "#if defined(__AVX512F__)\n#include <immintrin.h>\n"
                       "#endif\n\n");
    for (int k = 0; k < 8; k++) {
        int ta = k >> 2, tb = (k >> 1) & 1, to = k & 1;
        if (!add[ta][tb][to])
            continue;
        kl_buf_printf(
            b,
            "S_NO_CONTRACT static void s_qadd_%s_%s_%s(\n"
            "    const %s *restrict a, float sa, int za, const %s *restrict "
            "b,\n    float sb, int zb, %s *restrict y, float sy, int zy,\n"
            "    long long n)\n{\n"
            "    long long n16 = 0;\n"
            "#if defined(__AVX512F__)\n"
            "    n16 = n / 16 * 16;\n"
            "    const float inv = 1.0f / sy;\n"
            "#pragma omp parallel for if (n >= S_PAR) schedule(static)\n"
            "    for (long long i = 0; i < n16; i += 16) {\n"
            "        __m512 fa = "
            "_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(\n"
            "            %s(_mm_loadu_si128((const __m128i *)(a + i))),\n"
            "            _mm512_set1_epi32(za))), _mm512_set1_ps(sa));\n"
            "        __m512 fb = "
            "_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(\n"
            "            %s(_mm_loadu_si128((const __m128i *)(b + i))),\n"
            "            _mm512_set1_epi32(zb))), _mm512_set1_ps(sb));\n"
            "        __m512 v = _mm512_add_ps(fa, fb);\n"
            "        __m512 q = _mm512_mul_ps(v, _mm512_set1_ps(inv));\n"
            "        __m512 r = _mm512_roundscale_ps(q, 8);\n"
            "        __m512 d = "
            "_mm512_abs_ps(_mm512_sub_ps(_mm512_set1_ps(0.5f),\n"
            "            _mm512_abs_ps(_mm512_sub_ps(q, r))));\n"
            "        __m512 bd = _mm512_fmadd_ps(_mm512_abs_ps(q),\n"
            "            _mm512_set1_ps(0x1p-22f), _mm512_set1_ps(0x1p-24f));\n"
            "        if (_mm512_cmp_ps_mask(d, bd, _CMP_NGT_UQ))\n"
            "            r = _mm512_roundscale_ps(\n"
            "                _mm512_div_ps(v, _mm512_set1_ps(sy)), 8);\n"
            "        r = _mm512_add_ps(r, _mm512_set1_ps((float)zy));\n"
            "        r = _mm512_min_ps(_mm512_max_ps(r, "
            "_mm512_set1_ps(%d.0f)),\n"
            "            _mm512_set1_ps(%d.0f));\n"
            "        _mm_storeu_si128((__m128i *)(y + i),\n"
            "            _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));\n"
            "    }\n"
            "#endif\n"
            "#pragma omp parallel for if (n - n16 >= S_PAR) schedule(static)\n"
            "    for (long long i = n16; i < n; i++) {\n"
            "        float fa = (float)((int)a[i] - za) * sa;\n"
            "        float fb = (float)((int)b[i] - zb) * sb;\n"
            "        float v = fa + fb;\n"
            "        v = nearbyintf(v / sy) + (float)zy;\n"
            "        y[i] = (%s)(v >= %d.0f ? (v <= %d.0f ? v : %d.0f) : "
            "%d.0f);\n    }\n}\n\n",
            ts[ta].name, ts[tb].name, ts[to].name, ts[ta].ctype, ts[tb].ctype,
            ts[to].ctype, ts[ta].cvt, ts[tb].cvt, ts[to].lo, ts[to].hi,
            ts[to].ctype, ts[to].lo, ts[to].hi, ts[to].hi, ts[to].lo);
    }
    for (int i = 0; i < g->n; i++) {
        if (plan[i].kind != KL_QF_MAXPOOL)
            continue;
        const kl_mnode_t *nd = &g->nodes[i], *x = &g->nodes[nd->in[0]];
        int t = g->nodes[plan[i].q].qout == KL_DT_S8;
        /* One function per pool, its sizes literals (#define'd around
         * it) so that the compiler vectorizes the loops over a row whole.
         * Per output row: the rows of the window reduced first into one
         * row of W codes (contiguous codes) with pad codes of the type's
         * least value (max's identity) on each side, then the window's
         * columns of that row, no bounds to test (a strided max the
         * compiler vectorizes too: ResNet-18's pool 0.15 -> 0.05 ms in the
         * model, 2 threads). */
        kl_buf_printf(b,
                      "#define N %lldLL\n#define C %lldLL\n#define H %lldLL\n"
                      "#define W %lldLL\n#define P %lldLL\n#define Q %lldLL\n"
                      "#define R %lldLL\n#define S %lldLL\n#define st %lldLL\n"
                      "#define pad %lldLL\n",
                      (long long)x->shape[0], (long long)x->shape[1],
                      (long long)x->shape[2], (long long)x->shape[3],
                      (long long)nd->shape[2], (long long)nd->shape[3],
                      (long long)nd->R, (long long)nd->S, (long long)nd->stride,
                      (long long)nd->pad);
        if (nd->nhwc) {
            /* NHWC (kl_mgraph_layout): per output pixel, the max over
             * the window's pixels in bounds of whole rows of C codes */
            kl_buf_printf(
                b,
                "static void s_qmaxpool_%d(const %s *restrict x, %s *restrict "
                "y)\n{\n"
                "#pragma omp parallel for collapse(2) if (N * C * P * Q >= "
                "S_PAR) schedule(static)\n"
                "    for (long long np = 0; np < N * P; np++)\n"
                "        for (long long q = 0; q < Q; q++) {\n"
                "            long long n = np / P, p = np %% P;\n"
                "            %s *restrict yc = y + (np * Q + q) * C;\n"
                "            for (long long c = 0; c < C; c++)\n"
                "                yc[c] = %d;\n"
                "            for (long long r = 0; r < R; r++) {\n"
                "                long long h = p * st - pad + r;\n"
                "                if (h < 0 || h >= H)\n"
                "                    continue;\n"
                "                for (long long s = 0; s < S; s++) {\n"
                "                    long long w = q * st - pad + s;\n"
                "                    if (w < 0 || w >= W)\n"
                "                        continue;\n"
                "                    const %s *restrict xc = x + ((n * H + h) "
                "* W + w) * C;\n"
                "                    for (long long c = 0; c < C; c++)\n"
                "                        yc[c] = xc[c] > yc[c] ? xc[c] : "
                "yc[c];\n"
                "                }\n            }\n        }\n}\n",
                i, ts[t].ctype, ts[t].ctype, ts[t].ctype, ts[t].lo,
                ts[t].ctype);
            kl_buf_puts(b, "#undef N\n#undef C\n#undef H\n#undef W\n"
                           "#undef P\n#undef Q\n#undef R\n#undef S\n"
                           "#undef st\n#undef pad\n\n");
            continue;
        }
        kl_buf_printf(
            b,
            "static void s_qmaxpool_%d(const %s *restrict x, %s *restrict y)\n"
            "{\n"
            "#pragma omp parallel for collapse(2) if (N * C * P * Q >= S_PAR) "
            "schedule(static)\n"
            "    for (long long nc = 0; nc < N * C; nc++)\n"
            "        for (long long p = 0; p < P; p++) {\n"
            "            %s v[pad + W + S + st * Q];\n"
            "            for (long long w = 0; w < pad + W + S + st * Q; w++)\n"
            "                v[w] = %d;\n"
            "            for (long long r = 0; r < R; r++) {\n"
            "                long long h = p * st - pad + r;\n"
            "                if (h < 0 || h >= H)\n"
            "                    continue;\n"
            "                const %s *restrict xr = x + (nc * H + h) * W;\n"
            "                for (long long w = 0; w < W; w++)\n"
            "                    v[pad + w] = xr[w] > v[pad + w] ? xr[w] : "
            "v[pad + w];\n"
            "            }\n"
            "            %s *restrict yc = y + (nc * P + p) * Q;\n"
            "            for (long long q = 0; q < Q; q++) {\n"
            "                %s m = v[q * st];\n"
            "                for (long long s = 1; s < S; s++)\n"
            "                    m = v[q * st + s] > m ? v[q * st + s] : m;\n"
            "                yc[q] = m;\n"
            "            }\n        }\n}\n"
            "#undef N\n#undef C\n#undef H\n#undef W\n#undef P\n#undef Q\n"
            "#undef R\n#undef S\n#undef st\n#undef pad\n\n",
            i, ts[t].ctype, ts[t].ctype, ts[t].ctype, ts[t].lo, ts[t].ctype,
            ts[t].ctype, ts[t].ctype);
    }
}
