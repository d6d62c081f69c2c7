/* kla_builder.h - compiles candidate sources into shared objects, with a
 * cache, a time limit, and a gate that pauses builds while a candidate is
 * being timed.
 *
 * A build of (source, cc, cflags) lands in WORKDIR/HEX.so where HEX is the
 * kl_hash128 of the three; a second build of the same triple is a cache
 * hit (the compiler does not run), also across agent restarts when the
 * workdir is kept. Failed builds are remembered too, with their message
 * (not those that timed out or failed for want of a pipe or a fork).
 * The compiler runs as a child process (fork + execvp, never a shell) in
 * its own process group, with stdout on /dev/null and stderr captured (the
 * first KLA_BUILD_LOG_MAX bytes). A compiler still running after the
 * timeout is killed.
 *
 * kla_builder_build() may be called from several threads at once (one per
 * build slot); two threads building the same source share one compile.
 */
#ifndef KLA_BUILDER_H
#define KLA_BUILDER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "kla_device.h"

#define KLA_BUILD_LOG_MAX 4096

/* ---- gate: pauses builds while a measurement runs -------------------- */

typedef struct kla_gate_s kla_gate_t;

void kla_gate_new(kla_gate_t **out);
void kla_gate_destroy(kla_gate_t **self_p);
/* Closes the gate: compiles not yet started wait, running compilers get
 * SIGSTOP (their whole process group). Not nested: one runner calls it. */
void kla_gate_pause(kla_gate_t *self);
/* Opens the gate: stopped compilers get SIGCONT, waiters go on. */
void kla_gate_resume(kla_gate_t *self);
/* Makes every current and future compile fail at once (shutdown): running
 * compilers are killed, waiters return. */
void kla_gate_abort(kla_gate_t *self);
/* Seconds the gate has been closed since it was made (monotonic sum,
 * including the current closure). */
double kla_gate_closed_s(kla_gate_t *self);

/* ---- builder --------------------------------------------------------- */

typedef struct {
    const char *workdir; /* must exist and be writable */
    const char *cc;      /* NULL: "cc" */
    /* Extra flags, split on white space (no shell quoting); NULL: the
     * default "-O3 -march=native -fopenmp". "-shared -fPIC" are always
     * added. */
    const char *cflags;
    int timeout_ms; /* per compile; 0: 60000 */
    /* When set, compiler processes are pinned to these CPUs. */
    const kla_cores_t *cores;
    /* When set, builds honour it (borrowed; outlives the builder). */
    kla_gate_t *gate;
} kla_builder_config_t;

typedef struct kla_builder_s kla_builder_t;

/* Checks the config (workdir exists, cc non-empty) and makes a builder.
 * KL_ERR_INVAL / KL_ERR_IO with a message. */
int kla_builder_new(kla_builder_t **out, const kla_builder_config_t *cfg,
                    char *err);
void kla_builder_destroy(kla_builder_t **self_p);

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

/* Builds source (len bytes, NUL not required) or finds it in the cache.
 * Fills *out and returns KL_OK, or KL_ERR_COMPILE when the compiler failed
 * or timed out (out->log says why), or KL_ERR_IO / KL_ERR_CLOSED (gate
 * aborted) with out->log set. Thread-safe. */
int kla_builder_build(kla_builder_t *self, const char *source, size_t len,
                      kla_build_t *out);

/* Number of times a compiler actually ran (tests, stats). */
unsigned kla_builder_compiles(kla_builder_t *self);

#endif
