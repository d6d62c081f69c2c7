/* kl_codegen_cuda.h - what the CUDA code generator offers beyond
 * kl_codegen_cuda() (kl_codegen.h): the reference kernel. The resource
 * check of generated kernels with NVRTC is tools/cuda_check.h.
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

/* The reference kernel of w for a CUDA target t (agent/cuda/kla_cuda.h): the
 * naive schedule's flat kernel, one thread per output element, launched
 * with block (256, 1, 1) and grid (ceil(n / 256), 1, 1) for n output
 * elements (out->grid and out->block say so; no dynamic shared memory).
 * Thread blockIdx.x * 256 + threadIdx.x computes spatial point number
 * that index of the naive nest (one output element) and returns past n. entry
 * NULL: "kl_ref". Returns 0, or the errors of kl_cuda_plan (e.g.
 * KL_ERR_UNSUPPORTED for a dtype other than f32). */
int kl_codegen_cuda_reference(const kl_workload_t *w, const kl_target_t *t,
                              const char *entry, kl_kernel_t *out, char *err);

#endif
