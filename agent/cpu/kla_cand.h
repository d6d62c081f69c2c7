/* kla_cand.h - what the agent's runner (runner.c, the trusted half) and
 * kiln-runner (runner_host.c, runner_harness.c) say to each other about
 * one candidate run. docs/architecture.md, "The candidate sandbox".
 *
 * Three processes of kiln-runner take part, all inside one bubblewrap
 * sandbox (kla_jail.h) that the agent starts once and keeps:
 *
 *   host     `kiln-runner host`: lives as long as the sandbox, reads jobs
 *            from the agent on fd 3 (SOCK_SEQPACKET, descriptors by
 *            SCM_RIGHTS), and for each job clones a warden in new pid,
 *            mount and ipc namespaces.
 *   warden   pid 1 of the job's pid namespace; never runs candidate code.
 *            Mounts a fresh /tmp, forks and execs the harness, and stands
 *            between it and the agent: it times each sample from outside
 *            and reads the harness's CPU clock around it (the kernel's
 *            account, which the candidate cannot change), and reports how
 *            the harness ended. When it exits the kernel kills every
 *            process left in its namespace. Non-dumpable, immune to
 *            signals from inside (pid 1).
 *   harness  `kiln-runner harness`: exec'd fresh (nothing inherited but
 *            its descriptors 3..7), no capabilities, rlimits, a seccomp
 *            allow-list (no exec, no fork, no sockets, no ptrace, signals
 *            to itself only); then it dlopens the candidate and runs it.
 *            Everything it says may be the candidate's forgery.
 *
 * The agent owns the memory: the inputs (a sealed memfd, read-only to
 * everyone), the outputs (a memfd that the agent poisons before each run
 * and reads itself to verify; sealed against resizing), the candidate's
 * shared object (a sealed memfd copy of the built file) and the cache
 * flush buffer. The reference outputs stay in the agent's own memory, which
 * no sandboxed process ever maps.
 *
 * One run, agent <-> warden (fd passed through the host):
 *   warden -> agent  CALLED  the first call returned (or status/msg says
 *                            why the candidate could not be called), with
 *                            the warden's wall time (t_w) and the
 *                            harness's CPU seconds (u) around that call
 *   agent  -> warden GO | STOP  after the agent verified the outputs
 *   warden -> agent  SAMPLE  per timed sample: the harness's claim (t_c,
 *                            number) with the warden's wall time around it
 *                            (t_w) and the harness's CPU seconds in it (u)
 *   warden -> agent  END     the harness finished its samples
 *   warden -> agent  EXIT    how the harness ended, its CPU and wall time
 * harness <-> warden: JOB (warden -> harness), READY / GO before the
 * first call, CALLED, then per sample READY (after the cache flush) / GO /
 * DONE, then END.
 */
#ifndef KLA_CAND_H
#define KLA_CAND_H

#include <stdint.h>

#define KLA_CAND_MAGIC 0x6b6c6a32u
#define KLA_CAND_MAX_ARGS 64
#define KLA_CAND_MSG 1024

/* The descriptors of a job, in this order (agent -> host, host ->
 * warden, warden -> harness at fds 3..7). */
enum {
    KLA_CAND_FD_SO,    /* sealed memfd: the shared object */
    KLA_CAND_FD_IN,    /* sealed memfd: every input at in_off[a] */
    KLA_CAND_FD_OUT,   /* memfd: every output at out_off[a] */
    KLA_CAND_FD_FLUSH, /* memfd of flush_n bytes, or the SO again */
    KLA_CAND_FD_PEER,  /* agent: warden's socket; harness: warden's */
    KLA_CAND_NFDS
};

typedef struct {
    uint32_t magic, n_args;
    uint32_t timed; /* 0: the reference run (one call, no timing) */
    uint32_t number, repeat, min_repeat_ms;
    uint32_t flush, timeout_ms;
    uint64_t max_mem_bytes; /* RLIMIT_AS; 0: none */
    uint64_t flush_n, in_bytes, out_bytes;
    uint64_t off[KLA_CAND_MAX_ARGS], bytes[KLA_CAND_MAX_ARGS];
    uint8_t is_output[KLA_CAND_MAX_ARGS], is_const[KLA_CAND_MAX_ARGS];
    uint64_t pin[16]; /* CPU bit mask (CPUs 0..1023); all 0: no pinning */
    char entry[256];
} kla_cand_job_t;

typedef enum {
    KLA_CM_CALLED = 1, /* harness/warden -> agent */
    KLA_CM_GO,         /* agent -> warden -> harness */
    KLA_CM_STOP,       /* agent -> warden */
    KLA_CM_READY,      /* harness -> warden */
    KLA_CM_DONE,       /* harness -> warden */
    KLA_CM_SAMPLE,     /* warden -> agent */
    KLA_CM_END,        /* harness -> warden -> agent */
    KLA_CM_EXIT,       /* warden -> agent */
} kla_cand_kind;

/* How the harness ended (KLA_CM_EXIT). */
typedef enum {
    KLA_CE_EXITED,   /* code: exit status */
    KLA_CE_SIGNALED, /* code: signal */
    KLA_CE_TIMEOUT,  /* killed by the warden at timeout_ms */
    KLA_CE_PROTOCOL, /* killed: it said something out of turn (msg) */
    KLA_CE_FAILED,   /* the warden could not start it (msg) */
} kla_cand_end;

/* status of CALLED: */
enum { KLA_CS_OK, KLA_CS_ERROR };

typedef struct {
    uint32_t magic, kind;
    uint32_t status, code; /* CALLED: status; EXIT: kla_cand_end, code */
    uint32_t number;       /* DONE / SAMPLE */
    uint32_t gap_us;       /* SAMPLE: the warden's wall time, microseconds
                              (saturating), from the harness's last CALLED or
                              DONE to this sample's READY: its flush */
    double t_c;            /* DONE / SAMPLE: the harness's claim, seconds */
    double t_w;     /* SAMPLE: the warden's wall time around the sample */
    double u;       /* SAMPLE: harness CPU seconds in it; EXIT: total */
    double wall;    /* EXIT: fork to reap, seconds */
    double child_s; /* CALLED / END: harness's own time from its start */
    char msg[KLA_CAND_MSG];
} kla_cand_msg_t;

#endif
