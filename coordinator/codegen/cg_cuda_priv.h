/* cg_cuda_priv.h - shared between codegen_cuda.c (the CUDA-core
 * kernels) and codegen_cuda_mma.c (the tensor-core kernels). Calls go
 * down only: codegen_cuda.c -> codegen_cuda_mma.c -> codegen_cuda_base.c
 * (what both print with) -> cg_emit.c. */
#ifndef KL_CG_CUDA_PRIV_H
#define KL_CG_CUDA_PRIV_H

#include <stdarg.h>

#include "cg_emit.h"
#include "kl_codegen.h"
#include "kl_cuda_plan.h"
#include "kl_util.h"

typedef struct {
    const kl_sched_t *s;
    const kl_workload_t *w;
    kl_cuda_plan_t p;
    kl_buf_t b;
    int ind;
    const char *ity; /* index type: int or long long */
    int out;         /* output tensor index */
} g_t;

/* Coefficients of a linear form over loop parts, plus a constant. */
typedef struct {
    int64_t c;
    int64_t k[KL_SCHED_MAX_LOOPS][KL_LOOP_MAX_PARTS];
} lin_t;

/* One line of source at g's indentation (kl_codegen__line). */
__attribute__((format(printf, 2, 3))) static inline void
kl_codegen__cuda_line(g_t *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_codegen__vline(&g->b, g->ind, fmt, ap);
    va_end(ap);
}
/* Closes a block opened with kl_codegen__cuda_line("... {") and g->ind++. */
static inline void kl_codegen__cuda_close(g_t *g)
{
    kl_codegen__close(&g->b, &g->ind);
}

/* What both generators print with (codegen_cuda_base.c). */
/* A float literal ("1.0f", "0.5f"). */
void kl_codegen__cuda_num(kl_buf_t *b, double v);
/* The value of part q of the loop at pos, as C text. */
void kl_codegen__cuda_part(const g_t *g, kl_buf_t *b, int pos, int q);

/* The line of one epilogue operation on v; value is the C expression of
 * the tensor element an ADD_TENSOR / MUL_TENSOR reads (unused for the
 * others). */
void kl_codegen__cuda_epi(g_t *g, const kl_epilogue_t *ep, const char *value);

/* Generates a tensor-core schedule (codegen_cuda_mma.c); KL_ERR_NOTFOUND
 * when s is not one. */
int kl_codegen__cuda_mma(const kl_sched_t *s, const kl_target_t *t,
                         const char *entry, kl_kernel_t *out, char *err);

#endif
