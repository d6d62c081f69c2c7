/* bench_tune_util.h - what the tuning benchmarks share: reading a store
 * written by `kiln tune` (records in commit order, best-after-k curves),
 * regenerating, compiling and loading the best kernel, and timing kernels
 * side by side with a library baseline (docs/benchmarking.md). */
#ifndef BENCH_TUNE_UTIL_H
#define BENCH_TUNE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_abi.h"
#include "kl_ir.h"

typedef kl_abi_kernel_fn bt_kernel_fn;

/* A loaded kernel: kl_main and, when the source defines it,
 * kl_main_prepare (common/kl_abi.h). */
typedef struct {
    bt_kernel_fn fn;
    kl_abi_prepare_fn prepare; /* NULL: none */
} bt_kernel_t;

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
 * (docs/benchmarking.md) unless keep; call first in main. */
void bt_clean_env(int argc, char **argv, bool keep);

/* Re-executes the program with OPENBLAS_CORETYPE=core (once: not when it
 * is set), saying why on stderr. */
void bt_force_core(char **argv, const char *core, const char *why);

/* Regenerates the best kernel's C source (entry "kl_main"), compiles it
 * with cc -O3 -march=native -fopenmp into workdir and loads it. Exits with
 * a message on error. */
bt_kernel_t bt_load_best(const bt_run_t *r, const char *workdir);

/* Compiles C source file c (as the agent does) into workdir and returns
 * its kl_main and kl_main_prepare; exits with a message on error. */
bt_kernel_t bt_load_source(const char *c, const char *workdir);
/* The same for the entry symbol entry (and entry's prepare step). */
bt_kernel_t bt_load_entry(const char *c, const char *workdir,
                          const char *entry);

/* The kernel's args for bufs (bt_alloc_bufs of w): w->ntensors + 1 slots,
 * the tensors, then the block of k's prepare. When k has a prepare, calls
 * it once here, with only w's constant tensors (is_const) non-NULL, and
 * says so on stdout: the layout of constant inputs is prepared once,
 * outside the timing, as oneDNN's weights are reordered outside it.
 * Exits with a message when prepare returns NULL. Free with
 * bt_args_free. */
void **bt_kernel_args(const bt_kernel_t *k, const kl_workload_t *w,
                      float **bufs);
/* Frees args and the prepared block in it. */
void bt_args_free(const kl_workload_t *w, void **args);

/* Buffers of w in ABI order (inputs pseudo-random from seed, output
 * zeroed); free with bt_free_bufs. */
float **bt_alloc_bufs(const kl_workload_t *w, uint64_t seed);
void bt_free_bufs(const kl_workload_t *w, float **bufs);

/* Writes a buffer larger than the last-level cache. */
void bt_flush_cache(void);

/* Whether bt_interleave flushes the caches before every sample (the
 * default) or measures warm, back to back. */
void bt_set_flush(bool on);

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
