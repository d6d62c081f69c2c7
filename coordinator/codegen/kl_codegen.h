/* kl_codegen.h - scheduled loop nest -> source code (docs/architecture.md,
 * "Kernel ABI and the evaluator" and "Tensor programs").
 *
 * Each kind of target (kl_target.h) has its generator, its reference
 * generator and its source language, registered in codegen_kinds.c;
 * callers go through kl_codegen_kernel and kl_codegen_reference_kernel,
 * which pick them by the target's kind.
 *
 * C (CPU, codegen_c.c): one C11 translation unit defining
 * `void ENTRY(void *const *args)` where args are the workload's tensors in
 * ABI order (inputs, then the output), all f32. It uses GCC/Clang vector
 * extensions (an unaligned vector type per lane count), OpenMP
 * `#pragma omp parallel for` on the parallel loop, named vector
 * accumulators for a local write cache (register tile), packed buffers per
 * thread for packed read caches, and applies the workload's epilogue where
 * the output is written back. Build it with `-O3 -march=native -fopenmp`
 * (GNU C mode, so that multiply-add contracts to FMA). Codegen is
 * deterministic: the same schedule gives the same bytes.
 *
 * CUDA (codegen_cuda.c, kl_codegen_cuda.h):
 * `extern "C" __global__ void ENTRY(float *__restrict__ a0, ...)` with
 * grid / block / dynamic shared bytes.
 *
 * The reference kernel of a workload on a CPU is (integer workloads:
 * kl_codegen_reference_int) the C code of its naive schedule: serial loops, the
 * output set to the reduction's identity first, the body accumulated in place,
 * the epilogue applied last. On a GPU it is the naive schedule's flat kernel
 * (kl_codegen_cuda.h).
 */
#ifndef KL_CODEGEN_H
#define KL_CODEGEN_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_space.h"
#include "kl_util.h"

typedef struct {
    char *source;              /* owned */
    char *entry;               /* owned */
    bool launched;             /* run as a grid of blocks (CUDA), not called */
    int64_t grid[3], block[3]; /* the launch; 1s for C */
    int64_t shared_bytes;      /* CUDA dynamic shared memory */
    bool prepare; /* C: the source also defines ENTRY_prepare (kl_abi.h) */
} kl_kernel_t;

/* Frees the strings and zeroes k (safe on a zeroed kernel). */
void kl_kernel_free(kl_kernel_t *k);

/* Generates the kernel of s for target t in the language of t's kind (C
 * for a CPU, CUDA C for a GPU). entry names the function (NULL:
 * "kl_main"). Returns 0 or KL_ERR_INVAL / KL_ERR_UNSUPPORTED with the
 * reason (e.g. a loop bound to a kind of hardware the target does not
 * have, a vectorized loop that is not innermost, a write cache whose
 * loops are not unrolled). Same bytes for the same schedule. */
int kl_codegen_kernel(const kl_sched_t *s, const kl_target_t *t,
                      const char *entry, kl_kernel_t *out, char *err);

/* The reference kernel of w for target t, in the language of t's kind and
 * launched as that kind's agent backend expects (entry NULL: "kl_ref"). */
int kl_codegen_reference_kernel(const kl_workload_t *w, const kl_target_t *t,
                                const char *entry, kl_kernel_t *out, char *err);

/* The file extension of generated sources of a kind: "c", "cu". Static. */
const char *kl_codegen_source_ext(kl_target_kind kind);

/* The C helpers of the smooth activations that generated kernels carry
 * (kl_expf: e^x in f32 in a form a loop vectorizes when compiled without
 * trapping math, as kiln export compiles kiln_model.c; kl_sigmoidf,
 * kl_siluf, ...), guarded so a file may hold them twice: the exported
 * library's own layers use the same kl_expf. */
const char *kl_codegen_act_helpers(void);

/* ---- replay: a trace to its kernel (codegen_replay.c) ----
 * The one way kiln turns a stored trace into source: the tuner's restored
 * records and its best's source (kl_task.h), `kiln db best --source` and
 * `kiln export` (kl_export.h) all come here, so the same trace gives the
 * same bytes everywhere. */

/* Replays trace on sp as the search does (kl_space_fix, drawing from an
 * RNG seeded 1: a trace that lacks decisions always gets the same ones)
 * and generates the kernel of the schedule, named entry (NULL: "kl_main").
 * On success *out is the caller's (kl_kernel_free), and so is *sched
 * (optional), the replayed schedule. *step (optional) names the step that
 * failed: "replay" or "codegen". */
int kl_codegen_replay(const kl_space_t *sp, const kl_trace_t *trace,
                      const char *entry, kl_kernel_t *out, kl_sched_t **sched,
                      const char **step, char *err);

/* The same from a stored record's fields: w's design space on target
 * (kl_space_for_target) and the trace as stored (kiln.Trace bytes,
 * kl_trace_from_proto). *step (optional) names the step that failed:
 * "design space", "trace", "replay" or "codegen"; err holds its reason
 * alone. */
int kl_codegen_replay_proto(const kl_workload_t *w, const char *target,
                            const uint8_t *trace, size_t len, const char *entry,
                            kl_kernel_t *out, const char **step, char *err);

/* ---- the generators of each kind ---- */

/* Generates C for s on a CPU target t (vector lanes; NULL: "cpu"). */
int kl_codegen_c(const kl_sched_t *s, const kl_target_t *t, const char *entry,
                 kl_kernel_t *out, char *err);

/* Generates CUDA C for s on a CUDA target t (codegen_cuda.c). */
int kl_codegen_cuda(const kl_sched_t *s, const kl_target_t *t,
                    const char *entry, kl_kernel_t *out, char *err);

/* The reference kernel: C of the naive schedule of w (entry NULL:
 * "kl_ref"). The CUDA reference is kl_codegen_cuda_reference
 * (kl_codegen_cuda.h). */
int kl_codegen_reference(const kl_workload_t *w, const char *entry,
                         kl_kernel_t *out, char *err);

/* The reference C of an integer workload (kl_workload_is_int; codegen_int.c):
 * serial loops, exact int64 reduction, requant and saturation as kl_ir.h
 * defines them, buffers typed uint8_t / int8_t / int32_t / float. Bit-equal
 * to kl_workload_eval_typed. kl_codegen_reference goes here for integer
 * workloads; kl_codegen_c (scheduled C) takes only tensorized integer
 * schedules (kl_codegen_tensorized) and refuses the others. */
int kl_codegen_reference_int(const kl_workload_t *w, const char *entry,
                             kl_kernel_t *out, char *err);

/* The C of a tensorized schedule (kl_sched_tensorize; codegen_tensorize.c):
 * the nest outside the block as loops, the block as the intrinsic's
 * <immintrin.h> code under `#pragma GCC target`, the weights packed and the
 * zero-point compensation computed once in ENTRY_prepare, the epilogue on
 * the int32 accumulators. kl_codegen_c comes here for a tensorized
 * schedule. */
int kl_codegen_tensorized(const kl_sched_t *s, const char *entry,
                          kl_kernel_t *out, char *err);

/* An AMX tile kernel (kl_intrin.h rows amx_bf16, amx_int8) for the
 * product w (dense in=bf16 with its weights const, or qmatmul / qdense),
 * one fixed tiling (codegen_amx.c); its ENTRY_prepare returns NULL on a
 * CPU without AMX or when Linux refuses the tile state. Not offered by
 * the design space yet. */
int kl_codegen_amx_product(const kl_workload_t *w, const char *intrin,
                           const char *entry, kl_kernel_t *out, char *err);

#endif
