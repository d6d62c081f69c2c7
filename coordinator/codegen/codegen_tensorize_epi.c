/* codegen_tensorize_epi.c - the f32 epilogue of the bf16 kernels (the
 * products and convolutions tensorized with avx512_bf16, and the AMX
 * kernels; cg_tz.h): on one value at the point named by i<iterator>, or on
 * the 16 lanes of a finished accumulator at once in AVX-512 instructions,
 * the lanes walking the vector iterator. Below the generators that call
 * it. */
#include <stdio.h>
#include <string.h>

#include "cg_act.h"
#include "cg_tz.h"
#include "kl_err.h"

/* The flat offset of access a at the point named by i<iterator>. */
static void s_bf16_offset(kl_buf_t *b, const kl_workload_t *w,
                          const kl_access_t *a)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    kl_buf_puts(b, "(0");
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const kl_affine_t *x = &a->idx[d];
        kl_buf_printf(b, " + %lld * ((%lld", (long long)stride,
                      (long long)x->offset);
        for (int i = 0; i < w->niters; i++)
            if (x->coef[i])
                kl_buf_printf(b, " + %lld * i%d", (long long)x->coef[i], i);
        kl_buf_printf(b, ") / %lld)", (long long)(x->div > 1 ? x->div : 1));
        stride *= t->shape[d];
    }
    kl_buf_puts(b, ")");
}

/* The f32 epilogue of the float x at the point i<iterator>, and its
 * store. */
int kl_codegen__bf16_epilogue(kl_buf_t *b, const kl_workload_t *w,
                              const char *ind, char *err)
{
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        kl_buf_printf(b, "%s", ind);
        switch ((int)ep->kind) {
        case KL_EPI_ADD_TENSOR:
        case KL_EPI_MUL_TENSOR:
            kl_buf_printf(b, "x = x %c t%d[",
                          ep->kind == KL_EPI_ADD_TENSOR ? '+' : '*',
                          ep->access.tensor);
            s_bf16_offset(b, w, &ep->access);
            kl_buf_puts(b, "];\n");
            break;
        case KL_EPI_ADD_CONST:
        case KL_EPI_MUL_CONST:
            kl_buf_printf(b, "x = x %c (float)%.17g;\n",
                          ep->kind == KL_EPI_ADD_CONST ? '+' : '*', ep->lo);
            break;
        case KL_EPI_RELU:
            kl_buf_puts(b, "x = x > 0.0f ? x : 0.0f;\n");
            break;
        case KL_EPI_CLIP:
            kl_buf_printf(b,
                          "x = x < (float)%.17g ? (float)%.17g : x > "
                          "(float)%.17g ? (float)%.17g : x;\n",
                          ep->lo, ep->lo, ep->hi, ep->hi);
            break;
        case KL_EPI_ACT:
            kl_buf_puts(b, "x = ");
            kl_codegen__act_c(b, ep, "x");
            kl_buf_puts(b, ";\n");
            break;
        default:
            return kl_seterr(err, KL_ERR_INTERNAL,
                             "codegen: epilogue operation %d in a bf16 "
                             "workload",
                             (int)ep->kind);
        }
    }
    kl_buf_printf(b, "%st%d[", ind, kl_workload_output(w));
    s_bf16_offset(b, w, &w->out);
    kl_buf_puts(b, "] = x;\n");
    return KL_OK;
}

/* The flat stride of access a along iterator it, or -1 when a dimension
 * that it indexes divides (no constant stride). */
static int64_t s_stride(const kl_workload_t *w, const kl_access_t *a, int it)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    int64_t stride = 1, s = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const kl_affine_t *x = &a->idx[d];
        if (x->coef[it] && x->div > 1)
            return -1;
        s += x->coef[it] * stride;
        stride *= t->shape[d];
    }
    return s;
}

bool kl_codegen__bf16_epilogue_vec_ok(const kl_workload_t *w, int it)
{
    if (s_stride(w, &w->out, it) < 0)
        return false;
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        switch ((int)ep->kind) {
        case KL_EPI_ADD_TENSOR:
        case KL_EPI_MUL_TENSOR:
            if (s_stride(w, &ep->access, it) < 0)
                return false;
            break;
        case KL_EPI_ADD_CONST:
        case KL_EPI_MUL_CONST:
        case KL_EPI_RELU:
        case KL_EPI_CLIP:
            break;
        default: /* an activation: scalar in these kernels */
            return false;
        }
    }
    return true;
}

/* The lanes of tensor access a along it as an __m512 (lanes past nv 0). */
static void s_vload(kl_buf_t *b, const kl_workload_t *w, const kl_access_t *a,
                    int it)
{
    int64_t s = s_stride(w, a, it);
    if (s == 0)
        kl_buf_printf(b, "_mm512_set1_ps(t%d[", a->tensor);
    else if (s == 1)
        kl_buf_printf(b, "_mm512_maskz_loadu_ps(m, t%d + ", a->tensor);
    else
        kl_buf_printf(b,
                      "_mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, "
                      "_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, "
                      "6, 7, 8, 9, 10, 11, 12, 13, 14, 15), "
                      "_mm512_set1_epi32(%lld)), t%d + ",
                      (long long)s, a->tensor);
    s_bf16_offset(b, w, a);
    kl_buf_puts(b, s == 0 ? "])" : s == 1 ? ")" : ", 4)");
}

void kl_codegen__bf16_epilogue_vec(kl_buf_t *b, const kl_workload_t *w, int it,
                                   const char *acc, const char *nv,
                                   const char *ind)
{
    kl_buf_printf(b,
                  "%s{\n%s    const __mmask16 m = %s >= 16 ? (__mmask16)0xffff "
                  ": (__mmask16)((1u << (%s)) - 1u);\n"
                  "%s    __m512 x = %s;\n",
                  ind, ind, nv, nv, ind, acc);
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        kl_buf_printf(b, "%s    x = ", ind);
        switch ((int)ep->kind) {
        case KL_EPI_ADD_TENSOR:
        case KL_EPI_MUL_TENSOR:
            kl_buf_printf(b, "_mm512_%s_ps(x, ",
                          ep->kind == KL_EPI_ADD_TENSOR ? "add" : "mul");
            s_vload(b, w, &ep->access, it);
            kl_buf_puts(b, ");\n");
            break;
        case KL_EPI_ADD_CONST:
        case KL_EPI_MUL_CONST:
            kl_buf_printf(b, "_mm512_%s_ps(x, _mm512_set1_ps((float)%.17g));\n",
                          ep->kind == KL_EPI_ADD_CONST ? "add" : "mul", ep->lo);
            break;
        case KL_EPI_RELU: /* x > 0 ? x : 0 (a NaN gives 0) */
            kl_buf_puts(b, "_mm512_max_ps(x, _mm512_setzero_ps());\n");
            break;
        default: /* KL_EPI_CLIP: a NaN stays NaN, as in the scalar form */
            kl_buf_printf(b,
                          "_mm512_min_ps(_mm512_set1_ps((float)%.17g), "
                          "_mm512_max_ps(_mm512_set1_ps((float)%.17g), x));\n",
                          ep->hi, ep->lo);
            break;
        }
    }
    int o = kl_workload_output(w);
    int64_t ys = s_stride(w, &w->out, it);
    if (ys == 1) {
        kl_buf_printf(b, "%s    _mm512_mask_storeu_ps(t%d + ", ind, o);
        s_bf16_offset(b, w, &w->out);
        kl_buf_printf(b, ", m, x);\n%s}\n", ind);
        return;
    }
    /* Lanes at the output's stride (an NCHW convolution's channels). */
    kl_buf_printf(b,
                  "%s    float lane[16];\n%s    _mm512_storeu_ps(lane, x);\n"
                  "%s    float *yp = t%d + ",
                  ind, ind, ind, o);
    s_bf16_offset(b, w, &w->out);
    kl_buf_printf(b,
                  ";\n%s    for (int64_t q = 0; q < 16 && q < %s; q++)\n"
                  "%s        yp[q * %lldLL] = lane[q];\n%s}\n",
                  ind, nv, ind, (long long)ys, ind);
}
