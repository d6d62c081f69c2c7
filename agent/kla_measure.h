/* kla_measure.h - what one measurement is, for every backend and the
 * agent's loop: the evaluator, the problem (the request's arguments), the
 * outcome of a build and the result of a run. The CPU backend's builder
 * and runner (cpu/kla_builder.h, cpu/kla_runner.h) and the CUDA backend
 * (cuda/kla_cuda.h) fill them; the agent (kla_backend.h) passes them. */
#ifndef KLA_MEASURE_H
#define KLA_MEASURE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.pb-c.h"

#define KLA_ERROR_MAX 4096
#define KLA_MAX_REPEAT 10000
/* Runs per sample at most (an evaluator asking for more gets this). */
#define KLA_MAX_NUMBER (1u << 30)

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

/* A build's outcome (a backend's build: kla_builder_build on the CPU, a
 * cubin of NVRTC's on CUDA), what measure then loads. */
#define KLA_BUILD_LOG_MAX 4096

typedef struct {
    bool ok;          /* true: so_path holds the shared object */
    bool cache_hit;   /* the compiler did not run for this call */
    double compile_s; /* compiler time, without time spent paused */
    double paused_s;  /* time this call waited at the gate or stopped */
    char so_path[PATH_MAX];
    /* When !ok: the compiler's stderr (bounded), or why it did not run,
     * e.g. "compiler killed after 60 s". NUL-terminated. */
    char log[KLA_BUILD_LOG_MAX + 1];
} kla_build_t;

#endif
