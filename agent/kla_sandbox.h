/* kla_sandbox.h - runs a function in a forked, limited child process.
 *
 * The child gets its own process group, stdin and stdout on /dev/null,
 * RLIMIT_CORE 0, RLIMIT_CPU, RLIMIT_AS (skipped under AddressSanitizer,
 * which reserves terabytes of address space) and, optionally, a CPU
 * affinity. It reports to the parent through a pipe; the parent reads at
 * most `cap` bytes, kills the whole process group when the wall-clock
 * timeout passes, and tells how the child ended. The caller validates the
 * bytes: they come from code kiln does not trust.
 */
#ifndef KLA_SANDBOX_H
#define KLA_SANDBOX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kla_device.h"

typedef struct {
    int timeout_ms;         /* wall clock for the whole child; > 0 */
    uint64_t max_mem_bytes; /* RLIMIT_AS; 0: no limit */
    const kla_cores_t *pin; /* NULL: inherit the parent's affinity */
    /* Optional: the child's pid is stored here while it runs (0 before and
     * after), so that another thread can kill it (kla_sandbox_kill). */
    _Atomic pid_t *running;
} kla_sandbox_opts_t;

typedef enum {
    KLA_SB_EXITED,   /* exited by itself; exit status in code */
    KLA_SB_SIGNALED, /* killed by signal `code` */
    KLA_SB_TIMEOUT,  /* still running after timeout_ms: killed */
    KLA_SB_OVERFLOW, /* wrote more than cap bytes: killed */
    KLA_SB_FAILED,   /* pipe or fork failed: nothing ran */
} kla_sb_outcome;

typedef struct {
    kla_sb_outcome outcome;
    int code;      /* exit status or signal number */
    size_t len;    /* bytes received from the child (<= cap) */
    double wall_s; /* fork to reap, seconds */
    /* Human text for anything but "exited with status 0", e.g. "killed by
     * signal 11 (SIGSEGV)", "timed out after 1000 ms (killed)". */
    char error[256];
} kla_sandbox_result_t;

/* The child's body: runs in the child with fd, the write end of the result
 * pipe. Its return value becomes the child's exit status. */
typedef int (*kla_child_fn)(void *arg, int fd);

/* Forks, runs fn(arg, fd) in the child, collects up to cap bytes into buf
 * and the child's fate into *res. Blocks until the child is gone. */
void kla_sandbox_run(const kla_sandbox_opts_t *opts, kla_child_fn fn, void *arg,
                     void *buf, size_t cap, kla_sandbox_result_t *res);

/* Kills the child whose pid is in *running, if any (another thread's
 * kla_sandbox_run then returns KLA_SB_SIGNALED). */
void kla_sandbox_kill(_Atomic pid_t *running);

/* Writes all n bytes to fd (retrying short writes); 0 or -1. For child
 * bodies. */
int kla_write_all(int fd, const void *data, size_t n);

/* "SIGSEGV" for 11; a static string. */
const char *kla_signame(int sig);

#endif
