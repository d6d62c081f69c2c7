/* cuda_check.h - the resource check of generated CUDA kernels: compiled
 * by NVRTC (the agent's kl_nvrtc.h), each kernel's registers, spills and
 * static shared memory checked against the machine.
 *
 * It needs both the coordinator's CUDA code generator and the agent's
 * NVRTC, so it sits in tools/, which may include both; the tests and
 * benchmarks that check generated kernels link it. kiln itself never
 * compiles CUDA C: the agent compiles a candidate and checks its launch
 * against the device when it loads it (agent/cuda/kla_cuda.h).
 */
#ifndef KL_CUDA_CHECK_H
#define KL_CUDA_CHECK_H

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_nvrtc.h"

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

/* Turns on the resource check inside kl_postproc_cuda for this process
 * (kl_postproc_cuda_set_resource_check): each postprocessed schedule is
 * generated and compiled (one NVRTC call, a few hundred ms) and rejected
 * when kl_cuda_check_many refuses it. Returns 0, or KL_ERR_UNSUPPORTED
 * when NVRTC cannot be loaded (then the check stays off).
 * kl_cuda_disable_resource_check turns it off. */
int kl_cuda_enable_resource_check(char *err);
void kl_cuda_disable_resource_check(void);

#endif
