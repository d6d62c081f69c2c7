/* codegen_dw_q.c - the quantized depthwise kernels' int32 helpers and
 * epilogue (codegen_dw.c's row family for qdepthwise_conv2d, kl_dw.h). */
#include <stdint.h>

#include "cg_priv.h"
#include "kl_ir.h"

/* The quantized form's helpers for L lanes of int32: loads, the clamp,
 * the bias add saturating at the int32 range (|x| <= a: plain int32 when
 * the bias leaves room, through int64 lanes otherwise), and requant, the
 * float round to nearest even of |f| <= 65536 by adding and taking away
 * 1.5 * 2^23 (never contracted into the multiply: the clamp is between,
 * nor reassociated without -ffast-math). */
void kl_codegen__dw_qprelude(cg_t *g, int L)
{
    kl_codegen__template(
        &g->b,
        "typedef int64_t kl_q${L} __attribute__((vector_size(${L8})));\n"
        "typedef uint8_t kl_qu${L} __attribute__((vector_size(${L})));\n"
        "typedef int8_t kl_qs${L} __attribute__((vector_size(${L})));\n"
        "static inline kl_m${L} kl_ldi${L}(const int32_t *p)\n"
        "{ kl_m${L} v; memcpy(&v, p, sizeof v); return v; }\n"
        "static inline kl_m${L} kl_qclamp${L}(kl_m${L} x, int32_t lo, "
        "int32_t hi)\n"
        "{ kl_m${L} l = (kl_m${L}){0} + lo, h = (kl_m${L}){0} + hi;\n"
        "  kl_m${L} m = x < l; x = (m & l) | (~m & x);\n"
        "  m = x > h; return (m & h) | (~m & x); }\n"
        "static inline kl_m${L} kl_qadd${L}(kl_m${L} x, int32_t b, "
        "int64_t a)\n"
        "{ if ((int64_t)b >= (int64_t)INT32_MIN + a && "
        "(int64_t)b <= (int64_t)INT32_MAX - a)\n"
        "      return x + b;\n"
        "  kl_q${L} q = __builtin_convertvector(x, kl_q${L}) + b;\n"
        "  kl_q${L} l = (kl_q${L}){0} + INT32_MIN, h = (kl_q${L}){0} + "
        "INT32_MAX;\n"
        "  kl_q${L} m = q < l; q = (m & l) | (~m & q);\n"
        "  m = q > h; q = (m & h) | (~m & q);\n"
        "  return __builtin_convertvector(q, kl_m${L}); }\n"
        "static inline kl_m${L} kl_qrequant${L}(kl_m${L} x, float sc, "
        "int32_t zp)\n"
        "{ kl_v${L} f = __builtin_convertvector(x, kl_v${L}) * sc;\n"
        "  f = kl_min${L}(kl_max${L}(f, kl_bc${L}(-65536.0f)), "
        "kl_bc${L}(65536.0f));\n"
        "  f = (f + 12582912.0f) - 12582912.0f;\n"
        "  return __builtin_convertvector(f, kl_m${L}) + zp; }\n",
        (const kl_codegen__kv_t[]){KL_CG_I("L", L), KL_CG_I("L8", 8 * L),
                                   KL_CG_END});
}

/* The quantized form's epilogue and store of the accumulator var (n of
 * its L lanes, along the output row, at kl_o), in int32 lanes: the sum is
 * exact there (|sum| <= R S 255 128), the bias add saturates as the
 * reference's sum does (kl_dw.h admits one, before any requant), and
 * every later step stays in range; clamped to Y's type, then narrowed. */
void kl_codegen__dw_qstore(cg_t *g, int L, int64_t taps, const char *var,
                           int64_t n)
{
    const kl_workload_t *w = g->w;
    kl_dtype yt = w->tensors[kl_workload_output(w)].dtype;
    kl_codegen__c_line(g, "kl_m%d q = %s;", L, var);
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        const char *tn = w->tensors[ep->access.tensor].name;
        switch ((int)ep->kind) {
        case KL_EPI_ADD_TENSOR:
            kl_codegen__c_line(g, "q = kl_qadd%d(q, %s[c], %lldLL);", L, tn,
                               (long long)(taps * 255 * 128));
            break;
        case KL_EPI_REQUANT:
            kl_codegen__c_line(g, "q = kl_qrequant%d(q, (float)%.17g, %lld);",
                               L, ep->lo, (long long)ep->zp);
            break;
        case KL_EPI_REQUANT_TENSOR:
            kl_codegen__c_line(g, "q = kl_qrequant%d(q, %s[c], %lld);", L, tn,
                               (long long)ep->zp);
            break;
        case KL_EPI_RELU:
            kl_codegen__c_line(g, "q = kl_qclamp%d(q, 0, INT32_MAX);", L);
            break;
        default: /* KL_EPI_CLIP (kl_dw.h admits no other) */
            kl_codegen__c_line(
                g, "q = kl_qclamp%d(q, %lld, %lld);", L,
                ep->lo < INT32_MIN ? (long long)INT32_MIN : (long long)ep->lo,
                ep->hi > INT32_MAX ? (long long)INT32_MAX : (long long)ep->hi);
            break;
        }
    }
    if (yt != KL_DT_S32)
        kl_codegen__c_line(g, "q = kl_qclamp%d(q, %d, %d);", L,
                           yt == KL_DT_U8 ? 0 : -128,
                           yt == KL_DT_U8 ? 255 : 127);
    const char *vt = yt == KL_DT_U8 ? "qu" : yt == KL_DT_S8 ? "qs" : "m";
    kl_codegen__c_line(g, "kl_%s%d o = __builtin_convertvector(q, kl_%s%d);",
                       vt, L, vt, L);
    kl_codegen__c_line(g, "memcpy(kl_o, &o, %lld);",
                       (long long)(n * (yt == KL_DT_S32 ? 4 : 1)));
}
