/* kl_codegen.h - scheduled loop nest -> source code (docs/architecture.md,
 * "Kernel ABI and the evaluator" and "Tensor programs").
 *
 * C (CPU): one C11 translation unit defining `void ENTRY(void *const *args)`
 * where args are the workload's tensors in ABI order (inputs, then the
 * output), all f32. It uses GCC/Clang vector extensions (an unaligned
 * vector type per lane count), OpenMP `#pragma omp parallel for` on the
 * parallel loop, named vector accumulators for a local write cache
 * (register tile), packed buffers per thread for packed read caches, and
 * applies the workload's epilogue where the output is written back. Build
 * it with `-O3 -march=native -fopenmp` (GNU C mode, so that multiply-add
 * contracts to FMA). Codegen is deterministic: the same schedule gives the
 * same bytes.
 *
 * CUDA: `extern "C" __global__ void ENTRY(float *__restrict__ a0, ...)`
 * with grid / block / dynamic shared bytes (codegen_cuda.c; until it is
 * built in, kl_codegen_cuda returns KL_ERR_UNSUPPORTED).
 *
 * The reference kernel of a workload is the C code of its naive schedule:
 * serial loops, the output set to the reduction's identity first, the body
 * accumulated in place, the epilogue applied last.
 */
#ifndef KL_CODEGEN_H
#define KL_CODEGEN_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_ir.h"
#include "kl_sched.h"

typedef struct {
    char *source;              /* owned */
    char *entry;               /* owned */
    int64_t grid[3], block[3]; /* CUDA launch; 1s for C */
    int64_t shared_bytes;      /* CUDA dynamic shared memory */
    bool prepare; /* C: the source also defines ENTRY_prepare (kl_abi.h) */
} kl_kernel_t;

/* Frees the strings and zeroes k (safe on a zeroed kernel). */
void kl_kernel_free(kl_kernel_t *k);

/* Generates C for s on target t (vector lanes). entry names the function
 * (NULL: "kl_main"). Returns 0 or KL_ERR_INVAL / KL_ERR_UNSUPPORTED with
 * the reason (e.g. a GPU-bound loop, a vectorized loop that is not
 * innermost, a write cache whose loops are not unrolled). */
int kl_codegen_c(const kl_sched_t *s, const kl_target_t *t, const char *entry,
                 kl_kernel_t *out, char *err);

/* Generates CUDA C for s (codegen_cuda.c). */
int kl_codegen_cuda(const kl_sched_t *s, const kl_target_t *t,
                    const char *entry, kl_kernel_t *out, char *err);

/* The reference kernel: C of the naive schedule of w (entry NULL:
 * "kl_ref"). */
int kl_codegen_reference(const kl_workload_t *w, const char *entry,
                         kl_kernel_t *out, char *err);

#endif
