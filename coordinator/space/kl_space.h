/* kl_space.h - design spaces: per target, a rule program to sample and
 * the postprocessors that validate a sampled schedule.
 *
 * kl_space_for_target builds, for one workload and one target, the program
 * that the target's rules write (a trace without decisions, see
 * kl_trace.h). Sampling executes it with an RNG on the naive schedule,
 * then runs the target's postprocessors; samples that a reject_if or a
 * postprocessor refuses are drawn again.
 *
 * Each kind of target (kl_target.h) has its rules and its postprocessors,
 * registered in kl_space.c's table of kinds:
 *
 * CPU (rules_cpu.c, postproc_cpu.c): multi-level tiling SSRSRS, a local
 * write cache (register-tile accumulators) at a sampled level, optional
 * packing of the reused operand(s), parallel fused outer tiles, a
 * vectorized innermost spatial loop, unrolled register tiles, auto-unroll
 * annotations; a float depthwise convolution also samples the row vector
 * and channel vector families of rules_cpu_dw.c.
 *
 * CUDA (rules_cuda.c, postproc_cuda.c, kl_cuda_plan.h): blockIdx and
 * threadIdx tiles, virtual threads, shared-memory read caches, register
 * accumulators.
 */
#ifndef KL_SPACE_H
#define KL_SPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_trace.h"
#include "kl_util.h"

typedef struct kl_space_s kl_space_t;

/* Builds the design space of w for target ("cpu", "cpu/x86_64-avx512",
 * "cpu/x86_64-avx2", "cuda/sm_90", ...; a simulated target "sim/T" gets
 * the space of T). Borrows w (it must outlive the space). KL_ERR_INVAL for an
 * unknown target, KL_ERR_UNSUPPORTED when the target's rules cannot handle w.
 */
int kl_space_for_target(const char *target, const kl_workload_t *w,
                        kl_space_t **out, char *err);
void kl_space_destroy(kl_space_t **self_p);

const kl_target_t *kl_space_target(const kl_space_t *sp);
const kl_workload_t *kl_space_workload(const kl_space_t *sp);
/* The rule program (borrowed). */
const kl_trace_t *kl_space_program(const kl_space_t *sp);

/* Draws one valid sample: executes the program with rng, postprocesses,
 * and retries on rejection up to max_tries times (<= 0: 1000). On success
 * *trace (with decisions) and *sched (optional) are the caller's.
 * KL_ERR_EXHAUSTED when every try was rejected (err holds the last
 * reason). *tries (optional) receives the number of tries used. */
int kl_space_sample(const kl_space_t *sp, kl_rng_t *rng, kl_trace_t **trace,
                    kl_sched_t **sched, int max_tries, int *tries, char *err);

/* Replays a trace (with decisions) on a fresh naive schedule and
 * postprocesses it. *sched is the caller's. A trace that is rejected is
 * KL_ERR_INVAL with the reason. */
int kl_space_replay(const kl_space_t *sp, const kl_trace_t *trace,
                    kl_sched_t **sched, char *err);

/* Replays a trace whose decisions may have been changed (a mutated one, or
 * one from the store): every `if` is re-evaluated, sampling instructions of
 * a branch taken for the first time draw from rng, the target's
 * postprocessors run, and the executed trace is made canonical
 * (kl_trace_canonicalize), so that equal schedule choices hash equally.
 * On success *out (and *sched, optional) are the caller's; a rejected
 * trace is KL_ERR_INVAL with the reason. */
int kl_space_fix(const kl_space_t *sp, const kl_trace_t *t, kl_rng_t *rng,
                 kl_trace_t **out, kl_sched_t **sched, char *err);

/* Runs the target's postprocessors on s; 0 when s can run, KL_ERR_INVAL
 * with the reason otherwise. Postprocessors may finish s (they never change
 * what it computes). */
int kl_space_postproc(const kl_space_t *sp, kl_sched_t *s, char *err);

/* ---- postprocessors per kind of target ---- */

/* The rule programs of each kind are the module's own (kl_space_priv.h),
 * reached through kl_space_for_target. */

/* CPU postprocessors: one parallel loop at most, outermost, spatial; the
 * vectorized loop innermost, spatial, stride 1; a local write cache whose
 * spatial loops below are unrolled or vectorized and whose accumulators fit
 * (at most 2 x vec_regs vectors); packed buffers at most 8 MiB each. */
int kl_postproc_cpu(const kl_target_t *t, kl_sched_t *s, char *err);

/* CUDA postprocessors (postproc_cuda.c): the launch plan of kl_cuda_plan.h
 * and its limits. Same contract as the CPU's. */
int kl_postproc_cuda(const kl_target_t *t, kl_sched_t *s, char *err);

#endif
