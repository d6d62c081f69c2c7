/* codegen_act.c - the smooth activations in generated C and CUDA C
 * (cg_act.h). */
#include "cg_act.h"
#include "kl_codegen.h"

const char kl_codegen__act_prelude[] =
    "#ifndef KL_ACT_PRELUDE_H\n"
    "#define KL_ACT_PRELUDE_H\n"
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "/* e^x in f32 (Cephes' expf: k = round(x log2 e) by the 1.5 * 2^23\n"
    " * trick, r = x - k ln 2 in two parts, a degree-6 polynomial, 2^k from\n"
    " * k's bits): within 2 ulp, 0 below -87.33654, NaN kept; the callers\n"
    " * hold x at 88 (e^88 is finite). */\n"
    "static inline float kl_expf(float x)\n"
    "{\n"
    "    float c = x < -87.33654f ? -87.33654f : x;\n"
    "    float kf = c * 1.44269504f + 12582912.0f, k = kf - 12582912.0f;\n"
    "    float r = c - k * 0.693359375f - k * -2.12194440e-4f;\n"
    "    float p = 1.9875691500e-4f;\n"
    "    p = p * r + 1.3981999507e-3f;\n"
    "    p = p * r + 8.3334519073e-3f;\n"
    "    p = p * r + 4.1665795894e-2f;\n"
    "    p = p * r + 1.6666665459e-1f;\n"
    "    p = p * r + 5.0000001201e-1f;\n"
    "    p = p * r * r + r + 1.0f;\n"
    "    uint32_t kb, e;\n"
    "    __builtin_memcpy(&kb, &kf, 4);\n"
    "    e = (kb - 0x4b400000u + 127u) << 23;\n"
    "    float t;\n"
    "    __builtin_memcpy(&t, &e, 4);\n"
    "    return x != x ? x : x < -87.33654f ? 0.0f : p * t;\n"
    "}\n"
    "/* e^-v, the argument held at 88. */\n"
    "static inline float kl_expnf(float v)\n"
    "{ return kl_expf(-v > 88.0f ? 88.0f : -v); }\n"
    "static inline float kl_sigmoidf(float v)\n"
    "{ return 1.0f / (1.0f + kl_expnf(v)); }\n"
    "static inline float kl_siluf(float v)\n"
    "{ return v / (1.0f + kl_expnf(v)); }\n"
    "static inline float kl_hard_swishf(float v)\n"
    "{ float t = v + 3.0f; t = t < 0.0f ? 0.0f : t > 6.0f ? 6.0f : t;\n"
    "  return v * t / 6.0f; }\n"
    "static inline float kl_hard_sigmoidf(float v, float a, float b)\n"
    "{ float t = a * v + b; return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t; }\n"
    "static inline float kl_geluf(float v)\n"
    "{ return 0.5f * v * (1.0f + erff(v * 0.707106781f)); }\n"
    "/* 0.5 v (1 + tanh u) = v sigmoid(2u) = v / (1 + e^-2u). */\n"
    "static inline float kl_gelu_tanhf(float v)\n"
    "{ float e = -1.595769122f * (v + 0.044715f * v * v * v);\n"
    "  return v / (1.0f + kl_expf(e > 88.0f ? 88.0f : e)); }\n"
    "#ifdef KL_PRELUDE_H\n"
    "/* The same on the float prelude's vectors (kl_vW), all lanes at once in\n"
    " * vector instructions: the scalar forms above, called lane by lane in\n"
    " * unrolled code, stay scalar. kl_sel picks a where m, else b. gelu\n"
    " * without erff (scalar only): 1 + erf(x / sqrt 2) is 2 - q for x >= 0\n"
    " * and q below, q = erfc(|x| / sqrt 2) by Abramowitz and Stegun 7.1.26\n"
    " * (within 1.5e-7; no cancellation for negative x). */\n"
    "#define KL_VACT(W) \\\n"
    "typedef uint32_t kl_u##W __attribute__((vector_size(4 * W))); \\\n"
    "static inline kl_v##W kl_sel##W(kl_m##W m, kl_v##W a, kl_v##W b) \\\n"
    "{ return (kl_v##W)((m & (kl_m##W)a) | (~m & (kl_m##W)b)); } \\\n"
    "static inline kl_v##W kl_exp##W(kl_v##W x) \\\n"
    "{ kl_v##W lo = kl_bc##W(-87.33654f); \\\n"
    "  kl_v##W c = kl_sel##W(x < lo, lo, x); \\\n"
    "  kl_v##W kf = c * 1.44269504f + 12582912.0f, k = kf - 12582912.0f; \\\n"
    "  kl_v##W r = c - k * 0.693359375f - k * -2.12194440e-4f; \\\n"
    "  kl_v##W p = kl_bc##W(1.9875691500e-4f); \\\n"
    "  p = p * r + 1.3981999507e-3f; \\\n"
    "  p = p * r + 8.3334519073e-3f; \\\n"
    "  p = p * r + 4.1665795894e-2f; \\\n"
    "  p = p * r + 1.6666665459e-1f; \\\n"
    "  p = p * r + 5.0000001201e-1f; \\\n"
    "  p = p * r * r + r + 1.0f; \\\n"
    "  kl_u##W e = ((kl_u##W)kf - 0x4b400000u + 127u) << 23; \\\n"
    "  kl_v##W y = kl_sel##W(x < lo, kl_bc##W(0.0f), p * (kl_v##W)e); \\\n"
    "  return kl_sel##W(x != x, x, y); } \\\n"
    "static inline kl_v##W kl_expn##W(kl_v##W v) \\\n"
    "{ kl_v##W h = kl_bc##W(88.0f); return kl_exp##W(kl_sel##W(-v > h, h, "
    "-v)); } \\\n"
    "static inline kl_v##W kl_sigmoid##W(kl_v##W v) \\\n"
    "{ return kl_bc##W(1.0f) / (1.0f + kl_expn##W(v)); } \\\n"
    "static inline kl_v##W kl_silu##W(kl_v##W v) \\\n"
    "{ return v / (1.0f + kl_expn##W(v)); } \\\n"
    "static inline kl_v##W kl_hard_swish##W(kl_v##W v) \\\n"
    "{ kl_v##W t = kl_min##W(kl_max##W(v + 3.0f, kl_bc##W(0.0f)), "
    "kl_bc##W(6.0f)); \\\n"
    "  return v * t / 6.0f; } \\\n"
    "static inline kl_v##W kl_hard_sigmoid##W(kl_v##W v, float a, float b) \\\n"
    "{ return kl_min##W(kl_max##W(v * a + b, kl_bc##W(0.0f)), kl_bc##W(1.0f)); "
    "} \\\n"
    "static inline kl_v##W kl_gelu_tanh##W(kl_v##W v) \\\n"
    "{ kl_v##W h = kl_bc##W(88.0f), e = -1.595769122f * (v + 0.044715f * v * v "
    "* v); \\\n"
    "  return v / (1.0f + kl_exp##W(kl_sel##W(e > h, h, e))); } \\\n"
    "static inline kl_v##W kl_gelu##W(kl_v##W v) \\\n"
    "{ kl_v##W z = kl_max##W(v, -v) * 0.707106781f; \\\n"
    "  kl_v##W t = 1.0f / (1.0f + 0.3275911f * z); \\\n"
    "  kl_v##W p = 1.061405429f * t - 1.453152027f; \\\n"
    "  p = p * t + 1.421413741f; \\\n"
    "  p = p * t - 0.284496736f; \\\n"
    "  p = p * t + 0.254829592f; \\\n"
    "  kl_v##W q = p * t * kl_exp##W(-(z * z)); \\\n"
    "  return 0.5f * v * kl_sel##W(v < kl_bc##W(0.0f), q, 2.0f - q); }\n"
    "KL_VACT(4)\n"
    "KL_VACT(8)\n"
    "KL_VACT(16)\n"
    "#endif\n"
    "#endif\n";

const char *kl_codegen_act_helpers(void)
{
    return kl_codegen__act_prelude;
}

void kl_codegen__act_prelude_for(kl_buf_t *b, const kl_workload_t *w)
{
    for (int i = 0; i < w->nepi; i++)
        if (w->epi[i].kind == KL_EPI_ACT) {
            kl_buf_puts(b, kl_codegen__act_prelude);
            return;
        }
}

void kl_codegen__act_c(kl_buf_t *b, const kl_epilogue_t *ep, const char *v)
{
    if (ep->act == KL_ACT_HARD_SIGMOID)
        kl_buf_printf(b, "kl_hard_sigmoidf(%s, (float)%.17g, (float)%.17g)", v,
                      ep->lo, ep->hi);
    else
        kl_buf_printf(b, "kl_%sf(%s)", kl_act_name(ep->act), v);
}

bool kl_codegen__act_vec(kl_buf_t *b, const kl_epilogue_t *ep, int lanes,
                         const char *v)
{
    if (ep->act == KL_ACT_HARD_SIGMOID)
        kl_buf_printf(b, "kl_hard_sigmoid%d(%s, (float)%.17g, (float)%.17g)",
                      lanes, v, ep->lo, ep->hi);
    else
        kl_buf_printf(b, "kl_%s%d(%s)", kl_act_name(ep->act), lanes, v);
    return true;
}

void kl_codegen__act_cuda(kl_buf_t *b, const kl_epilogue_t *ep, const char *v)
{
    switch (ep->act) {
    case KL_ACT_SIGMOID:
        kl_buf_printf(b, "1.0f / (1.0f + expf(-%s))", v);
        break;
    case KL_ACT_SILU:
        kl_buf_printf(b, "%s / (1.0f + expf(-%s))", v, v);
        break;
    case KL_ACT_HARD_SWISH:
        kl_buf_printf(b, "%s * fminf(fmaxf(%s + 3.0f, 0.0f), 6.0f) / 6.0f", v,
                      v);
        break;
    case KL_ACT_HARD_SIGMOID:
        kl_buf_printf(b,
                      "fminf(fmaxf((float)%.17g * %s + (float)%.17g, 0.0f), "
                      "1.0f)",
                      ep->lo, v, ep->hi);
        break;
    case KL_ACT_GELU:
        kl_buf_printf(b, "0.5f * %s * (1.0f + erff(%s * 0.707106781f))", v, v);
        break;
    case KL_ACT_GELU_TANH:
        kl_buf_printf(b,
                      "0.5f * %s * (1.0f + tanhf(0.797884561f * (%s + "
                      "0.044715f * %s * %s * %s)))",
                      v, v, v, v, v);
        break;
    case KL_ACT_COUNT:
        break;
    }
}
