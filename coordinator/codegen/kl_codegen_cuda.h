/* kl_codegen_cuda.h - what the CUDA code generator offers beyond
 * kl_codegen_cuda() (kl_codegen.h): resource checks of generated kernels
 * with NVRTC.
 *
 * Generated kernels (codegen_cuda.c) follow the CUDA ABI of
 * docs/architecture.md ("Kernel ABI and the evaluator"):
 *
 *   extern "C" __global__ void __launch_bounds__(THREADS)
 *   ENTRY(const float *__restrict__ a0, ..., float *__restrict__ aN)
 *
 * with the workload's tensors in ABI order (inputs, then the output; the
 * const on inputs does not change the launch ABI). The launch is
 * grid x block with shared_bytes of dynamic shared memory: 0 unless the
 * shared stages need more than 48 KiB, in which case the runner must raise
 * CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to shared_bytes before
 * launching. A source defines nothing but its kernel, so several sources
 * with distinct entries can be compiled as one NVRTC program.
 */
#ifndef KL_CODEGEN_CUDA_H
#define KL_CODEGEN_CUDA_H

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_nvrtc.h"

/* The reference kernel of w for a CUDA target t (agent/kla_cuda.h): the
 * naive schedule's flat kernel, one thread per output element, launched
 * with block (256, 1, 1) and grid (ceil(n / 256), 1, 1) for n output
 * elements (out->grid and out->block say so; no dynamic shared memory).
 * Thread blockIdx.x * 256 + threadIdx.x computes spatial point number
 * that index of the naive nest (one output element) and returns past n. entry
 * NULL: "kl_ref". Returns 0, or the errors of kl_cuda_plan (e.g.
 * KL_ERR_UNSUPPORTED for a dtype other than f32). */
int kl_codegen_cuda_reference(const kl_workload_t *w, const kl_target_t *t,
                              const char *entry, kl_kernel_t *out, char *err);

/* Register file per multiprocessor (32-bit registers) on sm_50..sm_90. */
#define KL_CUDA_REGFILE 65536

/* Compiles n generated kernels (distinct entries) as ONE NVRTC program for
 * arch ("sm_90") and checks each against the machine: registers per
 * thread * threads per block <= KL_CUDA_REGFILE, spill stores + loads <=
 * KL_CUDA_MAX_SPILL_BYTES, static shared memory <= 48 KiB. rcs[i] receives
 * 0 or KL_ERR_INVAL, why[i] (optional, n messages of KL_ERRMSG_LEN) the
 * reason; res[i] (optional) each kernel's resources. Returns 0 when the
 * program compiled (whatever the checks said), KL_ERR_COMPILE with the
 * first error line in err when it did not, or kl_nvrtc_compile's other
 * errors. */
int kl_cuda_check_many(kl_nvrtc_t *nv, const kl_kernel_t *ks, int n,
                       const char *arch, int *rcs, char (*why)[KL_ERRMSG_LEN],
                       kl_nvrtc_kernel_t *res, char *err);

/* Turns on the resource check inside kl_postproc_cuda for this process:
 * each postprocessed schedule is generated and compiled (one NVRTC call,
 * a few hundred ms) and rejected when kl_cuda_check_many refuses it.
 * Returns 0, or KL_ERR_UNSUPPORTED when NVRTC cannot be loaded (then the
 * check stays off). kl_cuda_disable_resource_check turns it off. */
int kl_cuda_enable_resource_check(char *err);
void kl_cuda_disable_resource_check(void);

#endif
