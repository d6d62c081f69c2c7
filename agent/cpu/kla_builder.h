/* kla_builder.h - compiles candidate sources into shared objects, with a
 * cache, a time limit, and a gate that pauses builds while a candidate is
 * being timed.
 *
 * Every source is a tenant's code, so a compile is confined:
 *
 * - The source is checked before the compiler runs (kla_builder_check):
 *   only #include <name> / "name" of system headers (no absolute name, no
 *   ".." component), no computed #include, #include_next, #import, #embed,
 *   no #line with a file name, no __has_include of such names, no
 *   assembler .incbin / .include / .macro / .irp in the text or its string
 *   literals, no trigraphs, raw strings or digit separators (on which
 *   readers may disagree about where a comment or a string ends). A
 *   refusal is a compile error naming the line; the compiler
 *   does not run. The check is the clear message, not the protection: a
 *   file built by token pasting inside inline assembly passes it.
 * - The compiler runs in a bubblewrap sandbox (kla_jail.h: read-only
 *   system, no network, uid 65534, no view of the workdir, of /etc or of
 *   any file of the agent's). Its only writable places are tmpfs: a
 *   fresh /build per compile (at most max_file_bytes) holding the source
 *   as /build/candidate.c (copied in from a memfd), and /tmp. It writes
 *   the library through /proc/self/fd/4, a memfd of the agent's, which
 *   the agent then copies into the cache: no path of the host is bound
 *   in (bwrap resolves bind sources by path as uid 65534, which cannot
 *   reach a root agent's workdir) and nothing is left to swap for a
 *   link. The compiler needs a linker that writes its output in place
 *   (GNU ld does; lld, which renames a temporary onto it, does not). A
 *   compiler named by absolute path outside /usr (a wrapper script) is
 *   copied into the sandbox at the same path, that file alone. The
 *   compiler is found inside on PATH=/usr/bin:/bin; TMPDIR is /build,
 *   LC_ALL is C. With kla_jail_unsafe() (--unsafe-no-sandbox) it runs
 *   without bwrap, as the agent, in a fresh per-compile directory
 *   WORKDIR/build-XXXXXX holding the source alone, whose out.so must be
 *   a regular file (not a link), and which is removed afterwards; the
 *   limits, the check and the trimming below apply in both modes. When a
 *   sandbox is wanted and kla_jail_probe fails, every build fails with
 *   KL_ERR_UNSUPPORTED.
 * - Limits on every process of the compile: address space (max_mem_bytes),
 *   CPU seconds (the timeout plus a margin), file size (max_file_bytes),
 *   processes (max_procs, counted per uid), no core files; its process
 *   group is killed after the wall-clock timeout.
 * - Its messages are trimmed (kla_builder_trim): only diagnostics about
 *   the candidate's own source reach out->log, with the source named
 *   "candidate.c"; those about other files (their header lines, quoted
 *   lines and notes, include chains) are dropped and counted in one line,
 *   "(N messages about other files omitted)".
 *
 * A build of (source, cc, cflags) lands in WORKDIR/HEX.so where HEX is the
 * kl_hash128 of the three; a second build of the same triple is a cache
 * hit (the compiler does not run), also across agent restarts when the
 * workdir is kept. The kl_hash128 of every stored library is kept in
 * memory and in WORKDIR/HEX.so.sum (written atomically); a hit hashes the
 * library again and a mismatch, a missing or bad sum, a library not owned
 * by the agent or writable by group or others is a miss (a warning, and
 * the source builds again). The workdir should be the agent's alone
 * (mode 0700; kla_builder_new warns when group or others may write it):
 * the hash finds a changed library, it does not stop a writer who can
 * also write the sum. Failed builds are remembered too, with their
 * message (not those that timed out or failed for want of a pipe, a fork
 * or a sandbox). The compiler runs as a child process (fork + exec, never
 * a shell) in its own process group, with stdin and stdout on /dev/null
 * and stderr captured (the first 64 KiB, trimmed to KLA_BUILD_LOG_MAX).
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
#include "kla_measure.h"

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
    /* RLIMIT_AS of each compiler process, bytes; 0: 2 GiB. */
    size_t max_mem_bytes;
    /* RLIMIT_FSIZE (largest file a compile may write), bytes; 0: 256 MiB. */
    size_t max_file_bytes;
    /* RLIMIT_NPROC (processes of the compile's uid, which for an agent
     * started as root is 65534, shared with the agent's other sandboxes;
     * else the agent's own uid, its threads included); 0: 1024. */
    int max_procs;
} kla_builder_config_t;

typedef struct kla_builder_s kla_builder_t;

/* Checks the config (workdir exists, cc non-empty) and makes a builder.
 * KL_ERR_INVAL / KL_ERR_IO with a message. */
int kla_builder_new(kla_builder_t **out, const kla_builder_config_t *cfg,
                    char *err);
void kla_builder_destroy(kla_builder_t **self_p);

/* Builds source (len bytes, NUL not required) or finds it in the cache.
 * Fills *out and returns KL_OK, or KL_ERR_COMPILE when the source was
 * refused or the compiler failed or timed out (out->log says why), or
 * KL_ERR_IO / KL_ERR_CLOSED (gate aborted) / KL_ERR_UNSUPPORTED (no
 * sandbox can be made) with out->log set. Thread-safe. */
int kla_builder_build(kla_builder_t *self, const char *source, size_t len,
                      kla_build_t *out);

/* Number of times a compiler actually ran (tests, stats). */
unsigned kla_builder_compiles(kla_builder_t *self);

/* The source check every build does first (see above): 0 when source may
 * be compiled, else -1 with the reason in msg (n bytes), e.g. "line 3:
 * #include \"/etc/shadow\": only system headers may be included (no
 * absolute paths, no ..)". */
int kla_builder_check(const char *source, size_t len, char *msg, size_t n);

/* Trims the compiler's stderr raw (n bytes) to the diagnostics about the
 * candidate's own source, which the compiler saw as src_path (e.g.
 * "/build/candidate.c"): see above. Occurrences of src_path become
 * "candidate.c" and those of dir (src_path's directory with its '/', may
 * be NULL) disappear. Writes at most cap - 1 bytes and a NUL to out and
 * returns the length; *omitted (may be NULL) gets the number of messages
 * dropped. */
size_t kla_builder_trim(const char *raw, size_t n, const char *src_path,
                        const char *dir, char *out, size_t cap, int *omitted);

#endif
