/* cg_tz.h - helpers shared by the tensorized C generators
 * (codegen_tensorize.c: products; codegen_tensorize_conv.c: convolutions),
 * defined below both in codegen_tensorize_base.c. Not part of the public
 * contract. */
#ifndef CG_TZ_H
#define CG_TZ_H

#include <stdbool.h>
#include <stdint.h>

#include "cg_int.h"
#include "kl_codegen.h"
#include "kl_util.h"

/* Hands b's text to out as a CPU kernel named entry with a prepare step
 * (grid and block 1), or frees b when rc is an error; returns rc. */
int kl_codegen__tz_kernel(kl_buf_t *b, const char *entry, int rc,
                          kl_kernel_t *out);
/* The intrinsic's C: kl_vacc_t, KL_VLOAD / KL_VSTORE / KL_VZERO / KL_VSUB
 * and kl_dot(acc, 4 activations, 4 x lanes weights). */
void kl_codegen__tz_intrin_macros(kl_buf_t *b, const char *name);
/* The value of iterator it fed by loops [0, upto) as a C expression over
 * the loop variables l<id>; its largest value into *max. */
void kl_codegen__tz_iter_expr(const kl_sched_t *s, int it, int upto,
                              kl_buf_t *b, int64_t *max);
/* " && (.. < bound)" for each guard whose deepest term above the block
 * (position bpos) sits in loops [lo, hi); the block's loops count as 0. */
void kl_codegen__tz_guards(const kl_sched_t *s, int lo, int hi, int bpos,
                           kl_buf_t *b);
/* A loop above the block: `omp parallel for` on the first parallel loop
 * (*par records it), `GCC unroll` on unrolled loops; ind (256 bytes)
 * grows by 4 spaces. kl_codegen__tz_close ends it, ind shrinks back. */
void kl_codegen__tz_open(kl_buf_t *b, const kl_loop_t *l, char *ind, bool *par);
void kl_codegen__tz_close(kl_buf_t *b, char *ind);
/* The kernel's tensor arguments, t<i> for tensor i (the output not
 * const). */
void kl_codegen__tz_tensor_args(kl_buf_t *b, const kl_workload_t *w);
/* The C of a tensorized convolution (codegen_tensorize_conv.c). */
int kl_codegen_tensorized_conv(const kl_sched_t *s, const kl_tensorize_t *tz,
                               const char *entry, kl_kernel_t *out, char *err);
/* The C of a product tensorized with avx512_bf16
 * (codegen_tensorize_bf16.c). */
int kl_codegen__tensorized_bf16(const kl_sched_t *s, const kl_tensorize_t *tz,
                                const char *entry, kl_kernel_t *out, char *err);
/* The C of a convolution tensorized with avx512_bf16
 * (codegen_tensorize_conv_bf16.c). */
int kl_codegen__tensorized_conv_bf16(const kl_sched_t *s,
                                     const kl_tensorize_t *tz,
                                     const char *entry, kl_kernel_t *out,
                                     char *err);
/* The f32 epilogue of the float x at the point named by i<iterator>,
 * then its store into the output, lines at indentation ind
 * (codegen_tensorize_bf16.c; the AMX kernels run it too). */
int kl_codegen__bf16_epilogue(kl_buf_t *b, const kl_workload_t *w,
                              const char *ind, char *err);

#endif
