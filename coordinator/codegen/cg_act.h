/* cg_act.h - the smooth activations of an epilogue (KL_EPI_ACT, kl_act in
 * kl_ir.h) in generated code: the C helpers both preludes carry (the
 * float prelude, codegen_prelude.c, and the integer one that the bf16
 * kernels start with, codegen_int.c), the C call of one activation, and
 * its CUDA C expression. Private to coordinator/codegen. */
#ifndef CG_ACT_H
#define CG_ACT_H

#include <stdbool.h>

#include "kl_ir.h"
#include "kl_util.h"

/* The helpers: kl_expf (e^x in f32, Cephes' polynomial after a range
 * reduction, within 2 ulp; written without calls or branches that stop
 * gcc from vectorizing a loop of it; 0 below -87.3, NaN kept) and one
 * static inline function per activation, each in f32 with kl_expf (gelu
 * with erff). Guarded, so a file may hold it twice. */
extern const char kl_codegen__act_prelude[];

/* Appends kl_codegen__act_prelude to b when w's epilogue has an
 * activation (a kernel without one stays as it was). */
void kl_codegen__act_prelude_for(kl_buf_t *b, const kl_workload_t *w);

/* Appends the C expression of ep (a KL_EPI_ACT) on the float expression
 * v: "kl_siluf(x)". */
void kl_codegen__act_c(kl_buf_t *b, const kl_epilogue_t *ep, const char *v);

/* Appends the expression of ep (a KL_EPI_ACT) on the kl_v<lanes> vector
 * v ("kl_silu16(xs)"), with the float prelude's vector helpers (gelu's
 * with its own erf, within 1.5e-7); false (nothing appended) for an
 * activation without a vector form (none now). */
bool kl_codegen__act_vec(kl_buf_t *b, const kl_epilogue_t *ep, int lanes,
                         const char *v);

/* Appends the CUDA C expression of ep (a KL_EPI_ACT) on the float v,
 * with expf, erff and tanhf. */
void kl_codegen__act_cuda(kl_buf_t *b, const kl_epilogue_t *ep, const char *v);

#endif
