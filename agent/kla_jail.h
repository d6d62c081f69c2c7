/* kla_jail.h - the sandboxes of kiln-agent, made with bubblewrap (bwrap).
 *
 * Every compiler and every candidate of kiln-agent runs inside a bwrap
 * sandbox: new user, mount, pid, ipc, uts, cgroup and network namespaces
 * (no network at all: only the namespace's own loopback), no capabilities, a
 * read-only view of the system (/usr and the /bin, /sbin, /lib* links or
 * directories, /etc/ld.so.cache, /etc/alternatives; nothing else of /etc,
 * no /home, no /root, no /var), a private /proc and /dev, an empty /tmp,
 * a cleared environment, the identity 65534 (nobody) inside, its own
 * session and death with its parent. What a sandbox may write is only
 * what its caller binds in with kla_jail_bind.
 *
 * An agent started as root becomes uid and gid 65534 before it runs
 * bwrap (kla_jail_drop_root in the child), so bwrap always takes the
 * unprivileged user-namespace path and a sandbox never holds a uid that
 * owns anything outside it.
 *
 * Where bwrap is missing or the kernel refuses unprivileged user
 * namespaces, kla_jail_probe says so and kiln-agent refuses to run
 * candidates unless started with --unsafe-no-sandbox (kla_jail_set_unsafe),
 * which every record and the agent's status then say.
 */
#ifndef KLA_JAIL_H
#define KLA_JAIL_H

#include <stdbool.h>
#include <sys/types.h>

/* The identity inside (and, for an agent started as root, outside). */
#define KLA_JAIL_UID 65534
#define KLA_JAIL_GID 65534

/* A growable, NULL-terminated argument vector; kla_argv_t a = {0} is
 * empty. Strings are copied. */
typedef struct {
    char **v;
    int n, cap;
} kla_argv_t;

void kla_argv_add(kla_argv_t *a, const char *s);
void kla_argv_addf(kla_argv_t *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void kla_argv_free(kla_argv_t *a);

/* Checks once per process (the answer is kept) that bwrap runs a trivial
 * sandbox of the kind kla_jail_base makes. KL_OK, or KL_ERR_UNSUPPORTED
 * with the reason ("bwrap not found ...", "bwrap: setting up uid map:
 * Permission denied ..."). $KILN_BWRAP names another bwrap. */
int kla_jail_probe(char *err);
/* The bwrap executable in use ("bwrap" or $KILN_BWRAP). */
const char *kla_jail_bwrap(void);

/* --unsafe-no-sandbox: candidates and compilers run without bwrap. Every
 * record's error text and the agent's Hello name it (kla_jail_unsafe). */
void kla_jail_set_unsafe(bool on);
bool kla_jail_unsafe(void);

/* Appends bwrap and the options of every sandbox (see above) to a. The
 * caller adds its own binds, then "--" and the command. */
void kla_jail_base(kla_argv_t *a);
/* As kla_jail_base but without --new-session: the sandbox stays in the
 * caller's process group, so that signalling the group (the build gate's
 * SIGSTOP / SIGCONT, a timeout's SIGKILL) reaches every process inside.
 * The caller gives the child its own group (setpgid) and no controlling
 * terminal (kla_jail_detach_tty), which is what --new-session guards. */
void kla_jail_base_group(kla_argv_t *a);
/* Whether the absolute path lies in the read-only part of the system
 * every sandbox sees (under /usr, /bin, /lib, ...), so a program there
 * runs inside without a bind. False for relative paths and paths with
 * "." or ".." components. */
bool kla_jail_sees(const char *path);
/* In a child between fork and exec (async-signal-safe): gives up the
 * controlling terminal, if any, so nothing it runs can open /dev/tty.
 * 0, or -1 with errno. */
int kla_jail_detach_tty(void);
/* Binds the host path src at dst inside: read-only unless writable. */
void kla_jail_bind(kla_argv_t *a, const char *src, const char *dst,
                   bool writable);
/* Hides path (a directory) under an empty tmpfs when it lies in a part of
 * the system the sandbox sees (e.g. keys under /usr/local/etc); no-op
 * otherwise. */
void kla_jail_hide(kla_argv_t *a, const char *path);

/* A sealed memfd copy of the file at path (no process can write, resize
 * or unseal it), close-on-exec, named name: how a sandbox gets a file of
 * the agent's (a candidate's library, a cubin) without a path back to it,
 * and without seeing a later change to the file. The descriptor, or -1
 * with err (KL_ERRMSG_LEN bytes) naming path. */
int kla_jail_sealed_copy(const char *path, const char *name, char *err);

/* The child's side of starting a sandbox, between fork and exec
 * (async-signal-safe calls only): its own process group; fds[i] becomes
 * descriptor 3 + i, stdin and stdout /dev/null, every descriptor past
 * the given ones closed; an empty signal mask and SIGPIPE at its
 * default; root dropped (kla_jail_drop_root) unless unsafe; then argv:
 * sandboxed, bwrap looked up on PATH; unsafe, argv[0] a path, run with
 * envp (NULL: this environment). Never returns (exit 126, 127). */
void kla_jail_exec(const int *fds, int nfds, char *const *argv,
                   char *const *envp, bool unsafe) __attribute__((noreturn));

/* In a child between fork and exec (async-signal-safe): when the
 * effective uid is 0, drops every supplementary group and becomes
 * KLA_JAIL_UID / KLA_JAIL_GID for real, effective and saved ids. 0, or -1
 * with errno. No-op for any other uid. */
int kla_jail_drop_root(void);
/* For files the caller makes for a sandbox (a build directory): when the
 * agent runs as root, gives path to KLA_JAIL_UID / KLA_JAIL_GID so the
 * dropped identity may write it. 0 or -1 with errno. */
int kla_jail_own(const char *path);

#endif
