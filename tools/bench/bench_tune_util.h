/* bench_tune_util.h - what the tuning benchmarks share: reading a store
 * written by `kiln tune` (records in commit order, best-after-k curves),
 * regenerating, compiling and loading the best kernel, and timing kernels
 * side by side with a library baseline (BENCHMARKING.md). */
#ifndef BENCH_TUNE_UTIL_H
#define BENCH_TUNE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_ir.h"

typedef void (*bt_kernel_fn)(void *const *args);

/* One store's records of one workload (the store's only one) on one
 * target: latency per trial in commit order (INFINITY when the trial
 * failed), commit times, and the best record's trace bytes. */
typedef struct {
    char *workload_text, *workload_name, *target;
    double flop;
    size_t n;
    double *lat; /* seconds; INFINITY for a failed trial */
    double *t_s; /* commit time, unix seconds */
    uint8_t *best_trace;
    size_t best_trace_len;
    double best_s;
    uint64_t best_seq;
} bt_run_t;

/* Reads the run from store dir; exits with a message on error. */
void bt_run_read(const char *dir, bt_run_t *out);
void bt_run_free(bt_run_t *r);
/* Best latency among the first k trials (INFINITY when none is valid). */
double bt_best_after(const bt_run_t *r, size_t k);
/* The first k (1-based) at which the best latency is <= target_s, or 0. */
size_t bt_trials_to_reach(const bt_run_t *r, double target_s);

/* Re-executes the program without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE
 * (BENCHMARKING.md) unless keep; call first in main. */
void bt_clean_env(int argc, char **argv, bool keep);

/* Re-executes the program with OPENBLAS_CORETYPE=core (once: not when it
 * is set), saying why on stderr. */
void bt_force_core(char **argv, const char *core, const char *why);

/* Regenerates the best kernel's C source (entry "kl_main"), compiles it
 * with cc -O3 -march=native -fopenmp into workdir and loads it. Exits with
 * a message on error. */
bt_kernel_fn bt_load_best(const bt_run_t *r, const char *workdir);

/* Buffers of w in ABI order (inputs pseudo-random from seed, output
 * zeroed); free with bt_free_bufs. */
float **bt_alloc_bufs(const kl_workload_t *w, uint64_t seed);
void bt_free_bufs(const kl_workload_t *w, float **bufs);

/* Writes a buffer larger than the last-level cache. */
void bt_flush_cache(void);

typedef struct {
    double med, min, max; /* seconds */
} bt_stat_t;

/* Times a and b interleaved (a, b, a, b, ...): `rounds` samples each after
 * a warm-up, caches flushed before every sample. */
void bt_interleave(void (*a)(void *), void *actx, void (*b)(void *), void *bctx,
                   int rounds, bt_stat_t *sa, bt_stat_t *sb);

/* Prints /proc/loadavg: a figure taken on a busy machine says so. */
void bt_print_load(void);

/* Max |x - y| / (1 + |y|) over n floats. */
double bt_max_rel_err(const float *x, const float *y, size_t n);

#endif
