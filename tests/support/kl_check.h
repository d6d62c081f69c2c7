/* kl_check.h - compile-and-check harness for tests: builds C kernels with
 * the system compiler, runs them in-process on pseudo-random inputs and
 * compares their output with the reference interpreter (kl_workload_eval).
 *
 * Kernels follow the CPU ABI of docs/architecture.md:
 *   void ENTRY(void *const *args);
 * args are the workload's tensors in ABI order (inputs, then the output),
 * all f32, dense row-major.
 *
 * This is test support, not a sandbox: a kernel that crashes takes the test
 * with it (the agent's runner is the sandboxed path). */
#ifndef KL_CHECK_H
#define KL_CHECK_H

#include <stdint.h>

#include "kl_ir.h"

/* Compiles source (a C11 translation unit) into a shared object under
 * workdir (which must exist) with
 *   cc -O2 -march=native -fopenmp -shared -fPIC -o SO SRC -lm
 * run as a child process (no shell). The compiler is `cc` unless the
 * environment variable KILN_CHECK_CC names another. On success *so_path is
 * a fresh heap string (caller frees) naming a file unique to this call.
 * Returns KL_OK, KL_ERR_IO (cannot write the source or start the compiler)
 * or KL_ERR_COMPILE with the first lines of the compiler's output in err. */
int kl_check_build(const char *source, const char *workdir, char **so_path,
                   char *err);

/* Builds n sources as ONE translation unit (concatenated in order, one
 * compiler run), so that 50 candidates cost one compile. The caller makes
 * the sources fit together: entry symbols must differ, and helper
 * definitions must be `static` with names unique per source, or guarded
 * with #ifndef so that the second copy drops out. Same results as
 * kl_check_build. */
int kl_check_build_many(const char *const *sources, int n, const char *workdir,
                        char **so_path, char *err);

/* Allocates the tensors of w in ABI order, inputs filled from seed with
 * kl_rng uniform values in [-1, 1) (tensor by tensor, element by element),
 * the output filled with NaN. Only f32 workloads; returns NULL (with a
 * message in err) otherwise. Free with kl_check_free. */
float **kl_check_alloc(const kl_workload_t *w, uint64_t seed, char *err);
void kl_check_free(const kl_workload_t *w, float ***bufs_p);

/* Loads so_path, calls entry on inputs made by kl_check_alloc(w, seed),
 * and compares each output element o with the reference r from
 * kl_workload_eval: it passes when |o - r| <= atol + rtol * |r| (NaN never
 * passes). *max_err (optional) receives the largest |o - r| (infinity for
 * NaN). Returns KL_OK; KL_ERR_RUNTIME with the first bad element's index
 * and values (and how many were bad) in err; KL_ERR_NOTFOUND when the
 * entry symbol is missing; KL_ERR_IO when the object does not load;
 * KL_ERR_UNSUPPORTED for a non-f32 workload. */
int kl_check_run(const char *so_path, const char *entry, const kl_workload_t *w,
                 uint64_t seed, double rtol, double atol, double *max_err,
                 char *err);

/* kl_check_run over n entries of one object, with the reference computed
 * once; each entry gets fresh copies of the inputs and a NaN output.
 * rcs[i] (optional) and max_err[i] (optional) receive each entry's result.
 * Returns KL_OK when all pass, else the first failure's code with its
 * message (naming the entry) in err. */
int kl_check_run_many(const char *so_path, const char *const *entries, int n,
                      const kl_workload_t *w, uint64_t seed, double rtol,
                      double atol, double *max_err, int *rcs, char *err);

#endif
