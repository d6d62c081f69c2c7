/* kl_space_priv.h - the rule programs of each kind of target, shared by
 * kl_space.c (its table of kinds) and the rules_*.c that write them; not
 * part of the public contract (a design space is made with
 * kl_space_for_target, kl_space.h). */
#ifndef KL_SPACE_PRIV_H
#define KL_SPACE_PRIV_H

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
/* The CUDA rule program for w (rules_cuda.c); contract as the CPU's. */
int kl_space__rules_cuda(const kl_workload_t *w, const kl_target_t *t,
                         kl_trace_t **out, char *err);

#endif
