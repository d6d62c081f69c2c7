/* kla_runner_int.h - what runner.c (the runner, the reference cache) and
 * runner_sandbox.c (one run in the candidate sandbox: its host, the checks of
 * every claim) share. Private to agent/cpu/. */
#ifndef KLA_RUNNER_INT_H
#define KLA_RUNNER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kla_runner.h"

#define KLA_RUNNER__PAGE 4096u

/* A first call may take this many times a warm one (cold caches, page
 * faults of fresh mappings, OpenMP starting its threads): the kernel's CPU
 * account of the verified first call, divided by this and by the CPUs,
 * bounds from below what a sample may claim per call. */
#define KLA_RUNNER__FIRST_CALL_FACTOR 100.0
/* What OpenMP's idle threads may burn after a parallel region, per CPU
 * (libgomp spins 300,000 rounds, about 6-12 ms, before it sleeps), and
 * the harness's own messages: CPU time no claim has to account for. */
#define KLA_RUNNER__SPIN_CPU_S 0.025
#define KLA_RUNNER__HANDOFF_CPU_S 0.002
/* A thread that runs is charged its CPU time at the scheduler's tick or
 * when it stops, so another process's CPU clock lags a running thread's
 * by up to a tick (10 ms at HZ=100, 4 ms at 250). OpenMP's threads that
 * spin through a flush before a sample are charged inside the sample:
 * up to this much per CPU, and never more than the flush lasted. */
#define KLA_RUNNER__TICK_S 0.010

typedef struct kla_runner__ref {
    uint8_t key[16];
    void *buf[64];  /* outputs: the reference's, private to the agent */
    double rms[64]; /* outputs: root mean square of the reference's */
    uint64_t off[64];
    int in_fd, out_fd; /* sealed inputs; outputs (sealed against resize) */
    char *out_map;     /* the agent's mapping of out_fd */
    uint64_t in_bytes, out_bytes;
    size_t bytes;
    bool failed;
    char *error;
    struct kla_runner__ref *next; /* most recently used first */
} kla_runner__ref_t;

struct kla_runner_s {
    kla_runner_config_t cfg;
    kla_cores_t pin;
    kla_runner__ref_t *refs;
    size_t ref_bytes;
    unsigned ref_runs;
    _Atomic pid_t running; /* the sandbox's bwrap (or host) process */
    int host;              /* our end of the host's socket; -1: none */
    pid_t host_pid;
    int flush_fd; /* memfd, populated once, written by every harness */
    size_t flush_n;
    int ncpu; /* CPUs a timed harness may use */
    /* OMP_WAIT_POLICY=active or GOMP_SPINCOUNT: OpenMP's idle threads
     * may spin without bound, so a sample's CPU account says nothing. */
    bool spin_unbounded;
};

/* runner.c: a memfd of bytes (at least a page), close-on-exec, sealable;
 * -1 with errno. */
int kla_runner__memfd(const char *name, uint64_t bytes);
/* No process may resize fd again (a shrunk mapping would fault the
 * agent), nor change the seals; write too when writes is false. 0, or
 * -1 with errno (the caller must not hand fd to a sandbox then). */
int kla_runner__seal(int fd, bool writes);
/* Bytes per element of argument a (a problem made by hand, with esize
 * left 0, is f32). */
size_t kla_runner__esize(const kla_problem_t *p, int a);

/* runner_sandbox.c: runs so:entry on e's buffers in the sandbox (started
 * when it is not running): the reference run (timed false: one call, its
 * outputs copied into e->buf) or a candidate's; every failure is a status
 * in *out. */
void kla_runner__run(kla_runner_t *r, const kla_problem_t *p,
                     kla_runner__ref_t *e, const char *so, const char *entry,
                     bool timed, kla_result_t *out);
/* Stops the sandbox (SIGKILL to its bwrap; everything in it dies). */
void kla_runner__host_stop(kla_runner_t *r);

#endif
