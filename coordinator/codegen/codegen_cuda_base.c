/* codegen_cuda_base.c - what both CUDA generators print with (the
 * CUDA-core kernels of codegen_cuda.c and the tensor-core kernels of
 * codegen_cuda_mma.c; cg_cuda_priv.h): loop parts, float literals and
 * epilogue lines. Below both, so that calls go down only. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cg_act.h"
#include "cg_cuda_priv.h"

/* The value of part q of the loop at pos, as C text. */
void kl_codegen__cuda_part(const g_t *g, kl_buf_t *b, int pos, int q)
{
    const kl_loop_t *l = kl_sched_loop(g->s, pos);
    if (l->nparts == 1) {
        kl_buf_printf(b, "l%d", l->id);
        return;
    }
    int64_t inner = 1;
    for (int r = q + 1; r < l->nparts; r++)
        inner *= l->parts[r].extent;
    if (q == 0)
        kl_buf_printf(b, "(l%d / %" PRId64 ")", l->id, inner);
    else if (inner == 1)
        kl_buf_printf(b, "(l%d %% %" PRId64 ")", l->id, l->parts[q].extent);
    else
        kl_buf_printf(b, "(l%d / %" PRId64 " %% %" PRId64 ")", l->id, inner,
                      l->parts[q].extent);
}

void kl_codegen__cuda_num(kl_buf_t *b, double v)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.9g", v);
    bool frac = strpbrk(tmp, ".eEn") != NULL;
    kl_buf_printf(b, "%s%sf", tmp, frac ? "" : ".0");
}

void kl_codegen__cuda_epi(g_t *g, const kl_epilogue_t *ep, const char *value)
{
    kl_buf_t x = {0}, y = {0};
    switch (ep->kind) {
    case KL_EPI_ADD_TENSOR:
    case KL_EPI_MUL_TENSOR:
        kl_codegen__cuda_line(g, "v = v %s %s;",
                              ep->kind == KL_EPI_ADD_TENSOR ? "+" : "*", value);
        break;
    case KL_EPI_ADD_CONST:
    case KL_EPI_MUL_CONST:
        kl_codegen__cuda_num(&x, ep->lo);
        kl_codegen__cuda_line(g, "v = v %s %s;",
                              ep->kind == KL_EPI_ADD_CONST ? "+" : "*", x.data);
        break;
    case KL_EPI_RELU:
        kl_codegen__cuda_line(g, "v = fmaxf(v, 0.0f);");
        break;
    case KL_EPI_CLIP:
        kl_codegen__cuda_num(&x, ep->lo);
        kl_codegen__cuda_num(&y, ep->hi);
        kl_codegen__cuda_line(g, "v = fminf(fmaxf(v, %s), %s);", x.data,
                              y.data);
        break;
    case KL_EPI_ACT:
        kl_codegen__act_cuda(&x, ep, "v");
        kl_codegen__cuda_line(g, "v = %s;", x.data);
        break;
    }
    kl_buf_free(&x);
    kl_buf_free(&y);
}
