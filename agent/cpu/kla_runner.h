/* kla_runner.h - runs candidates: inputs, reference output, verification
 * and timing, each candidate in a sandboxed child (kla_sandbox.h).
 *
 * For a problem (argument shapes + evaluator) the runner makes the inputs
 * once in the parent (uniform in [-1, 1) from kl_rng seeded with kl_hash64
 * of (seed, argument index)) and runs the reference kernel once in a
 * sandbox to get the expected output; both are cached per (workload key,
 * seed, argument shapes, reference build) and inherited by every
 * candidate's child through fork. The candidate's child loads the shared
 * object, fills its output with NaN, calls ENTRY_prepare once when the
 * object defines it (common/kl_abi.h: only the constant inputs non-NULL;
 * its block goes to every call as args[n_args]; outside the timing; a NULL
 * block is a RUNTIME_ERROR), runs the kernel once, compares with
 * the reference (|out - ref| > atol + rtol * (|ref| + rms), rms the root
 * mean square of that reference output, or NaN, is wrong: the rounding
 * of a long sum scales with its terms, not with its result, so an
 * element that cancels to near zero is judged against the output's
 * scale, not its own),
 * then times it: `number` runs per sample (grown until one sample lasts
 * min_repeat_ms), `repeat` samples, the cache flushed before each sample by
 * writing a buffer of twice the last-level cache (mapped once by the
 * runner, populated, and shared with the children), and last compares
 * again, with the same test, the output of the last timed call (every call
 * writes the same output buffers, so nothing is recomputed): a kernel
 * whose first call was right and a later one wrong (state in a static) is
 * WRONG_RESULT, no samples, its error starting "check after timing".
 * skip_verify skips both compares. One runner runs one child at a time.
 */
#ifndef KLA_RUNNER_H
#define KLA_RUNNER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.pb-c.h"
#include "kla_builder.h"
#include "kla_device.h"

#define KLA_ERROR_MAX 4096
#define KLA_MAX_REPEAT 10000

typedef struct {
    uint32_t number;        /* runs per sample, >= 1 */
    uint32_t repeat;        /* samples, 1..KLA_MAX_REPEAT */
    uint32_t min_repeat_ms; /* 0: keep number as given */
    bool flush_cache;
    uint32_t timeout_ms; /* the whole child run */
    double rtol, atol;
    uint64_t seed;
    bool skip_verify;
} kla_eval_t;

/* The evaluator's defaults (kl_eval.h: number 1, repeat 5, min_repeat_ms
 * 50, flush on, timeout 10000 ms, rtol 1e-3, atol 1e-4), seed 0. */
void kla_eval_defaults(kla_eval_t *e);
/* From the wire. NULL gives the defaults. Fields where 0 makes no sense
 * (number, repeat, timeout_ms) take their default when 0, as do rtol and
 * atol when both are 0; min_repeat_ms and flush_cache are taken as sent.
 * repeat is capped at KLA_MAX_REPEAT, timeout_ms at one day. */
void kla_eval_from_proto(kla_eval_t *e, const Kiln__Evaluator *pe);

/* What a kernel is run on: arguments in ABI order, f32 or (integer
 * workloads) u8 / s8 / s32, or f16 / bf16 (esize 2; inputs of a CUDA
 * device only, whose worker fills them: kla_cuda.h; the CPU backend
 * refuses them in its check_request). A constant argument (ROLE_CONSTANT) is an
 * input in every respect, and the only kind that ENTRY_prepare sees.
 * Inputs are seeded random: f32 uniform in [-1, 1), but when any argument
 * is an integer, f32 inputs are quantization scales uniform in
 * [1e-3, 1e-2); u8 0..255, s8 -128..127, s32 -1000..1000 (a bias). Integer
 * outputs must equal the reference's exactly; f32 outputs within the
 * evaluator's tolerance. */
typedef struct {
    uint8_t workload_key[16];
    int n_args;
    size_t nelem[64];
    Kiln__DType dtype[64];
    size_t esize[64]; /* bytes per element */
    bool any_int;     /* some argument is u8, s8 or s32 */
    bool is_output[64];
    bool is_const[64];
    kla_eval_t eval;
} kla_problem_t;

/* Checks a request's arguments and evaluator: 16-byte workload key, 1..64
 * arguments, each f32, u8, s8 or s32 (I32) with 1..8 positive dimensions, at
 * least one output, no more than max_bytes of buffers in all (0: no bound).
 * KL_ERR_INVAL or KL_ERR_UNSUPPORTED with a message naming the argument. */
int kla_problem_from_request(kla_problem_t *out,
                             const Kiln__MeasureRequest *req,
                             uint64_t max_bytes, char *err);

typedef struct {
    Kiln__Status status;
    double *samples; /* seconds per run; heap, kla_result_clear frees */
    uint32_t n_samples;
    uint32_t number;
    double spread; /* (max - min) / median */
    double max_abs_err;
    /* The candidate child's run: its own time from the start of its body
     * to its report, or fork to reap when it sent none (crash, timeout).
     * Fork, pipe and reaping are the agent's overhead, not this. */
    double run_s;
    char error[KLA_ERROR_MAX + 1];
} kla_result_t;

void kla_result_clear(kla_result_t *r);
/* Fills spread from samples. */
void kla_result_stats(kla_result_t *r);

typedef struct {
    uint64_t llc_bytes;     /* flush buffer is twice this */
    uint64_t max_mem_bytes; /* RLIMIT_AS of children; 0: none */
    const kla_cores_t *pin; /* timed children pinned here; NULL: no */
    kla_gate_t *gate;       /* paused while a candidate runs; NULL: no */
    size_t cache_bytes;     /* bound of the reference cache; 0: 1 GiB */
    /* Bytes written before each sample when the evaluator flushes; 0:
     * twice llc_bytes, at most KLA_FLUSH_CAP_BYTES. The buffer is mapped
     * once, shared with children. */
    uint64_t flush_bytes;
    /* kiln-runner, the sandbox's executable; NULL: $KILN_RUNNER, else
     * beside this process's executable, else ../libexec/kiln from it. */
    const char *runner_path;
} kla_runner_config_t;

/* Default cap of the flush buffer (see runner.c). */
#define KLA_FLUSH_CAP_BYTES ((size_t)128 << 20)

typedef struct kla_runner_s kla_runner_t;

int kla_runner_new(kla_runner_t **out, const kla_runner_config_t *cfg,
                   char *err);
void kla_runner_destroy(kla_runner_t **self_p);

/* Measures the candidate (shared object so, symbol entry) of problem p
 * against the reference (ref_so, ref_entry) and fills *out (status, samples,
 * error ...). Never fails as a call: every failure is a status in *out.
 * When the reference itself fails, the status is RUNTIME_ERROR with
 * "reference kernel failed: ..." (remembered for the same problem). */
void kla_runner_measure(kla_runner_t *self, const kla_problem_t *p,
                        const char *ref_so, const char *ref_entry,
                        const char *so, const char *entry, kla_result_t *out);

/* How many times the reference kernel ran (each cache miss). */
unsigned kla_runner_reference_runs(kla_runner_t *self);
/* Kills the child running now, if any (any thread; shutdown). */
void kla_runner_abort(kla_runner_t *self);

#endif
