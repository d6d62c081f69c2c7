/* cuda_emu.h - runs generated CUDA kernels on the CPU for tests.
 *
 * The kernel source is compiled as C++ by the system compiler with a small
 * prelude that maps the CUDA built-ins onto the host: every thread of a
 * block is a pthread, __syncthreads() is a barrier over them, __shared__
 * memory is a static array (blocks run one after another), blockIdx is a
 * global and threadIdx a thread_local. That is enough to check, without a
 * GPU, that a generated kernel computes what the workload's interpreter
 * computes, including the cooperative shared-memory copies and their
 * barriers. Kernels that need dynamic shared memory are not supported.
 */
#ifndef CUDA_EMU_H
#define CUDA_EMU_H

#include "kl_codegen.h"
#include "kl_ir.h"

/* Compiles the n kernels (distinct entries; kernel i computes ws[i]) in
 * workdir into one shared object; *so_path is the caller's. Returns 0 or
 * KL_ERR_COMPILE with the compiler's first lines in err. */
int kl_emu_build(const kl_kernel_t *ks, int n, const kl_workload_t *const *ws,
                 const char *workdir, char **so_path, char *err);

/* Compiles text (CUDA C kernels and host C++ that calls them through
 * kl_emu_run(void (*fn)(void **), void **args, const long grid[3],
 * const long block[3])) after the prelude into a shared object in
 * workdir; blockDim and gridDim are those of the launch. As kl_emu_build
 * otherwise. */
int kl_emu_build_text(const char *text, const char *workdir, char **so_path,
                      char *err);

/* Runs kernel k of the object on inputs from kl_check_alloc(w, seed) and
 * compares with kl_workload_eval (|o - r| <= atol + rtol |r|). Returns 0 or
 * KL_ERR_RUNTIME naming the first bad element. */
int kl_emu_check(const char *so_path, const kl_kernel_t *k,
                 const kl_workload_t *w, uint64_t seed, double rtol,
                 double atol, char *err);

/* kl_emu_build of the n kernels (kernel i computes ws[i]) into one object
 * in workdir, then kl_emu_check of each with seed, rtol and atol; the
 * object is removed after. Returns KL_OK, or the first failure (of the
 * build or of a kernel) with its message in err, also printed to stderr
 * with the failing kernel's source. */
int kl_emu_check_all(const kl_kernel_t *ks, int n,
                     const kl_workload_t *const *ws, const char *workdir,
                     uint64_t seed, double rtol, double atol, char *err);

#endif
