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
#include "kla_measure.h"

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
