/* kl_nvrtc.h - CUDA C compilation through NVRTC, loaded at run time.
 *
 * libnvrtc is opened with dlopen(); nothing of kiln links against it, so
 * every binary starts on a machine without CUDA and simply reports
 * KL_ERR_UNSUPPORTED here. The search order for the library is: the path
 * given to kl_nvrtc_open(), else $KILN_NVRTC, else libnvrtc.so,
 * libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so.11.2, then the same names under
 * /usr/local/cuda/lib64 and /usr/local/cuda/lib.
 *
 * A compilation targets one exact architecture: "sm_XY" (or "sm_XYa")
 * produces a cubin (machine code for that chip), "compute_XY" produces PTX.
 * For cubins the resource use of every kernel in the program (registers per
 * thread, static shared memory, stack frame and spills) is read from the
 * ptxas report that NVRTC writes into its log with --ptxas-options=-v.
 *
 * Thread safety: one kl_nvrtc_t may be used from several threads at once
 * (each compilation is its own NVRTC program).
 *
 * Home. NVRTC belongs to the agent's CUDA backend, its one user in kiln
 * proper: the builder compiles candidates and references (cuda_build.c),
 * the GPU worker its helper kernels (cuda_worker.c), and kiln-agent checks
 * that it loads before serving a GPU. The coordinator generates CUDA C but
 * never compiles it, and the include rules keep it apart from agent/ (and
 * agent/ from it), so the one thing that needs both the code generator and
 * NVRTC, the offline resource check of generated kernels
 * (tools/cuda_check.h), lives in tools/, for tests and benchmarks. The
 * API keeps its kl_nvrtc_ names from its days in common/.
 */
#ifndef KL_NVRTC_H
#define KL_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kl_nvrtc_s kl_nvrtc_t;

/* Log bytes kept by default in a result (the rest is cut, with a note). */
#define KL_NVRTC_LOG_MAX (16 * 1024)
#define KL_NVRTC_NAME_MAX 128

/* Loads libnvrtc. path: an explicit library path or NULL for the search
 * order above. Returns 0 and *out (free with kl_nvrtc_close), or
 * KL_ERR_UNSUPPORTED with a message naming what was tried when no library
 * can be loaded or a required symbol is missing. */
int kl_nvrtc_open(kl_nvrtc_t **out, const char *path, char *err);

/* Unloads; NULLs *self_p; safe on NULL. */
void kl_nvrtc_close(kl_nvrtc_t **self_p);

/* A process-wide instance, loaded on first call (search order above) and
 * kept until exit. Returns NULL with KL_ERR_UNSUPPORTED's message in err
 * (when err is not NULL) if NVRTC cannot be loaded. */
kl_nvrtc_t *kl_nvrtc_default(char *err);

/* The NVRTC version, e.g. 13 and 0. */
void kl_nvrtc_version(const kl_nvrtc_t *nv, int *major, int *minor);

/* The file the library was loaded from (as given to dlopen). Borrowed. */
const char *kl_nvrtc_path(const kl_nvrtc_t *nv);

/* Whether this NVRTC can emit code for arch ("sm_90", "compute_80", ...).
 * Returns 0 if so, KL_ERR_INVAL for a malformed name, KL_ERR_UNSUPPORTED
 * (with the list of supported sm_ values) for an arch it does not know. */
int kl_nvrtc_check_arch(const kl_nvrtc_t *nv, const char *arch, char *err);

/* Turns a target string "cuda/sm_90" (or a bare "sm_90") into the arch
 * name in out (size n). Returns 0 or KL_ERR_INVAL naming the bad text. */
int kl_nvrtc_arch_of_target(const char *target, char *out, size_t n, char *err);

/* Resource use of one kernel (entry function) of a compiled cubin, as
 * reported by ptxas. Every field is 0 when ptxas did not mention it. */
typedef struct {
    char name[KL_NVRTC_NAME_MAX]; /* entry symbol (the extern "C" name) */
    int registers;                /* per thread */
    int barriers;                 /* named barriers used */
    long smem_static;             /* bytes of static __shared__ */
    long stack_frame;             /* bytes of local memory per thread */
    long spill_stores;            /* bytes */
    long spill_loads;             /* bytes */
} kl_nvrtc_kernel_t;

/* What a compilation produced. On success image holds the cubin (or the
 * NUL-terminated PTX for compute_ archs; image_len then counts the NUL).
 * log is the NVRTC log, always NUL-terminated, bounded by log_max with a
 * note when it was cut. kernels lists each entry function in the order
 * ptxas reported them (cubin only, when resources were asked for). */
typedef struct {
    bool is_ptx;
    void *image;
    size_t image_len;
    char *log;
    int nkernels;
    kl_nvrtc_kernel_t *kernels;
    double seconds; /* wall time of the compilation */
} kl_nvrtc_result_t;

/* Options of one compilation; a zeroed struct is valid except for arch. */
typedef struct {
    const char *arch;         /* required: "sm_90", "sm_80", "compute_90" */
    const char *const *extra; /* more NVRTC options, e.g. "-lineinfo" */
    int nextra;
    size_t log_max;        /* 0: KL_NVRTC_LOG_MAX */
    bool no_resources;     /* true: skip --ptxas-options=-v */
    const char *prog_name; /* file name shown in the log; NULL: "kernel.cu" */
} kl_nvrtc_opts_t;

/* Compiles the CUDA C source src. Always uses -std=c++17 and, for an sm_
 * arch and unless opts->no_resources, --ptxas-options=-v.
 *
 * Returns:
 *   0                   *out holds image, log and kernels.
 *   KL_ERR_COMPILE      the source does not compile: *out is still set
 *                       (image NULL) so the caller can read the whole log,
 *                       and err holds the first error line of the log,
 *                       which names the source line ("kernel.cu(12): error:
 *                       expected a \";\"").
 *   KL_ERR_INVAL        NULL source, missing or malformed arch; *out NULL.
 *   KL_ERR_UNSUPPORTED  nv is NULL, or the arch is unknown to this NVRTC;
 *                       *out NULL.
 *   KL_ERR_INTERNAL     NVRTC failed otherwise (message in err); *out NULL.
 * The caller frees *out with kl_nvrtc_result_free. */
int kl_nvrtc_compile(kl_nvrtc_t *nv, const char *src,
                     const kl_nvrtc_opts_t *opts, kl_nvrtc_result_t **out,
                     char *err);

/* The resource record of kernel name in r, or NULL. */
const kl_nvrtc_kernel_t *kl_nvrtc_result_kernel(const kl_nvrtc_result_t *r,
                                                const char *name);

void kl_nvrtc_result_free(kl_nvrtc_result_t **self_p);

/* Parses a ptxas verbose report (the log text) into a heap array of
 * kernels (*out, freed by the caller with free()) and its count in *n.
 * Lines that are not ptxas resource lines are ignored. Exposed for tests
 * and for agents that run ptxas themselves. Returns 0 or KL_ERR_INVAL when
 * a resource line appears before any "Compiling entry function". */
int kl_nvrtc_parse_ptxas(const char *log, kl_nvrtc_kernel_t **out, int *n,
                         char *err);

#endif
