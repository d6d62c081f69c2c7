/* kla_builder_int.h - what builder.c (the gate, the cache, the build)
 * and builder_run.c (the compiler's run) share. Private to agent/cpu/. */
#ifndef KLA_BUILDER_INT_H
#define KLA_BUILDER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "kla_builder.h"
#include "kla_device.h"

#define KLA_BUILDER__BUCKETS 1024
#define KLA_BUILDER__OUT "out.so" /* the compiler's output, by name */

struct kla_builder__entry_s; /* one source's cache entry (builder.c) */

struct kla_builder_s {
    char *workdir, *cc, *cflags;
    char **flags;
    int nflags;
    int timeout_ms;
    kla_cores_t cores;
    bool pin;
    kla_gate_t *gate;
    size_t max_file;
    struct rlimit lim_as, lim_cpu, lim_fsize, lim_nproc, lim_core;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct kla_builder__entry_s *buckets[KLA_BUILDER__BUCKETS];
    unsigned long gen;
    unsigned compiles;
};

/* ---- the gate, as the compiler's run sees it (builder.c) ------------- */

/* Waits while the gate (may be NULL) is closed; *waited gets the seconds.
 * Returns -1 when aborted. */
int kla_builder__gate_enter(kla_gate_t *g, double *waited);
/* Registers a running compiler's process group; one that starts while the
 * gate is closed is stopped at once, one that starts after an abort is
 * killed. */
void kla_builder__gate_register(kla_gate_t *g, pid_t pgid);
void kla_builder__gate_unregister(kla_gate_t *g, pid_t pgid);
/* kla_gate_closed_s, 0 for no gate. */
double kla_builder__gate_closed(kla_gate_t *g);

/* ---- the cache (builder.c) ------------------------------------------- */

/* Takes the compiler's output, open as fd, into the cache as so_path with
 * its sum (a regular file with something in it, copied). KL_OK, or
 * KL_ERR_COMPILE / KL_ERR_IO with out->log. */
int kla_builder__store(kla_builder_t *b, int fd, const char *so_path,
                       uint8_t sum[16], kla_build_t *out);

/* ---- the compiler's run (builder_run.c) ------------------------------ */

/* Compiles source (checked already) into out->so_path, *sum its hash:
 * sandboxed (source and output in memfds), or unsafe (in a fresh
 * WORKDIR/build-XXXXXX, removed afterwards). Returns KL_OK,
 * KL_ERR_COMPILE, KL_ERR_TIMEOUT, KL_ERR_IO or KL_ERR_CLOSED with
 * out->log. */
int kla_builder__build_jailed(kla_builder_t *b, const char *source, size_t len,
                              kla_build_t *out, uint8_t sum[16]);
int kla_builder__build_unsafe(kla_builder_t *b, const char *source, size_t len,
                              kla_build_t *out, uint8_t sum[16]);

#endif
