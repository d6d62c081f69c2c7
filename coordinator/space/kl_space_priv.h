/* kl_space_priv.h - the rule programs of each kind of target, shared by
 * kl_space.c (its table of kinds) and the rules_*.c that write them; not
 * part of the public contract (a design space is made with
 * kl_space_for_target, kl_space.h). */
#ifndef KL_SPACE_PRIV_H
#define KL_SPACE_PRIV_H

#include "kl_intrin.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_target.h"
#include "kl_trace.h"

/* The CPU rule program for w (kl_space.h, "CPU"); *out is the caller's.
 * Errors are kl_space_for_target's, with the reason in err. */
int kl_space__rules_cpu(const kl_workload_t *w, const kl_target_t *t,
                        kl_trace_t **out, char *err);
/* Its integer part (rules_cpu_int.c): products and NHWC convolutions
 * tensorized with the target's int8 intrinsic; other integer workloads
 * are refused with the reason. */
int kl_space__rules_cpu_int(const kl_workload_t *w, const kl_target_t *t,
                            kl_trace_t **out, char *err);
/* The tensorized product steps of rules_cpu_int.c appended to tr:
 *     (mo . no0) mi no1 ko0 ko1 [ni ki] tensorized with in
 * (any row of kl_intrin.h whose block is lanes x red: int8 or bf16). */
int kl_space__cpu_tz_mm(const kl_workload_t *w, const kl_target_t *t,
                        const kl_intrin_t *in, kl_trace_t *tr, char *err);
/* The tensorized convolution steps of rules_cpu_int.c appended to tr
 * (NHWC or NCHW, groups 1; int8 or bf16 rows alike). */
int kl_space__cpu_tz_conv(const kl_workload_t *w, const kl_target_t *t,
                          const kl_intrin_t *in, kl_trace_t *tr, char *err);
/* bf16 products on a target whose CPU has a bf16 intrinsic
 * (rules_cpu_bf16.c): when w is one (kl_workload_is_bf16, a product whose
 * block tensorize accepts), opens a sampled choice on tr, the tensorized
 * schedule in its first branch, and leaves tr in the second (*open = 1:
 * the caller writes the float schedule there and ends the choice); *open
 * = 0 and tr untouched otherwise. */
int kl_space__cpu_bf16_open(const kl_workload_t *w, const kl_target_t *t,
                            kl_trace_t *tr, int *open, char *err);
/* Float depthwise convolutions (kl_dw.h; rules_cpu_dw.c): opens a sampled
 * choice of three on tr, the row vector and the channel vector families
 * in the first two branches, and leaves tr in the third (*open = 2: the
 * caller writes the generic schedule there and ends both); *open = 0 and
 * tr untouched for any other workload. */
int kl_space__cpu_dw_open(const kl_workload_t *w, const kl_target_t *t,
                          kl_trace_t *tr, int *open, char *err);
/* The quantized depthwise program (kl_dw.h's quant form): the row-vector
 * family alone, int32 lanes (rules_cpu_dw.c; opened by the integer rules,
 * rules_cpu_int.c). KL_ERR_UNSUPPORTED with the reason otherwise. */
int kl_space__cpu_qdw(const kl_workload_t *w, const kl_target_t *t,
                      kl_trace_t *tr, char *err);
/* The CUDA rule program for w (rules_cuda.c); contract as the CPU's. */
int kl_space__rules_cuda(const kl_workload_t *w, const kl_target_t *t,
                         kl_trace_t **out, char *err);

#endif
