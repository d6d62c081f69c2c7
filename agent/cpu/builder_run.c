/* builder_run.c - the compiler's run (kla_builder.h, kla_builder_int.h):
 * its command line (bubblewrap and the compiler, or the compiler alone
 * with --unsafe-no-sandbox), its process (own process group, limits,
 * descriptors, at the gate), its stderr and exit status turned into the
 * build's message, and the two kinds of build around it: source and
 * output in memfds (sandboxed) or in a fresh per-compile directory
 * (unsafe).
 */
#include "kla_builder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"
#include "kla_builder_int.h"
#include "kla_jail.h"

#define S_RAW_MAX (64u << 10) /* compiler stderr kept before trimming */
#define S_IN_DIR "/build"     /* the per-compile directory, inside */
#define S_SRC "candidate.c"
#define S_OUT_FD "/proc/self/fd/4" /* the output, inside the sandbox */

/* Reads the compiler's stderr until EOF, keeping the first S_RAW_MAX
 * bytes, until the deadline (which moves on while the gate is closed).
 * Returns 1 when the deadline passed. */
static int s_drain(kla_builder_t *b, int fd, char *log, size_t *len,
                   double start, double closed0)
{
    for (;;) {
        double deadline = start + b->timeout_ms / 1000.0 +
                          (kla_builder__gate_closed(b->gate) - closed0);
        double left = deadline - kl_now_s();
        if (left <= 0)
            return 1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = left > 0.2 ? 200 : (int)(left * 1000) + 1;
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno != EINTR)
            return 0;
        if (rc <= 0)
            continue;
        char chunk[4096];
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        size_t keep = (size_t)n;
        if (*len + keep > S_RAW_MAX)
            keep = S_RAW_MAX - *len;
        memcpy(log + *len, chunk, keep);
        *len += keep;
    }
}

/* What the child needs; everything is made before the fork. */
typedef struct {
    char **argv; /* argv[0] is looked up on the agent's PATH */
    int errfd;   /* becomes stderr */
    int keep[3]; /* >= 0: become fds 3, 4, 5 (bwrap --file 3 ...) */
    bool drop;   /* kla_jail_drop_root */
} s_child_t;

static void s_child_fail(const char *msg)
{
    (void)!write(2, msg, strlen(msg));
    _exit(126);
}

static void s_close_from(int fd)
{
    if (close_range((unsigned)fd, ~0u, 0) == 0)
        return;
    struct rlimit r;
    int hi = getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < 65536
                 ? (int)r.rlim_cur
                 : 65536;
    for (int i = fd; i < hi; i++)
        close(i);
}

/* Forks the compiler (or bwrap) in its own process group, without a
 * terminal, stderr into c->errfd, c->keep as fds 3.., every other
 * descriptor closed, under the builder's limits. Between fork and exec
 * only system calls: other threads may hold locks. */
static pid_t s_spawn(kla_builder_t *b, const s_child_t *c)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the agent blocks SIGTERM */
    signal(SIGPIPE, SIG_DFL);
    kla_jail_detach_tty();
    /* copies above the targets first, so no dup2 overwrites a source */
    int e = fcntl(c->errfd, F_DUPFD_CLOEXEC, 10), k[3], n = 0;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (e < 0 || null < 0)
        _exit(126);
    for (int i = 0; i < 3; i++) {
        k[i] = c->keep[i] >= 0 ? fcntl(c->keep[i], F_DUPFD_CLOEXEC, 10) : -1;
        if (c->keep[i] >= 0 && k[i] < 0)
            _exit(126);
    }
    /* dup2 clears close-on-exec on the copies the compiler keeps */
    if (dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(e, 2) < 0)
        _exit(126);
    for (int i = 0; i < 3; i++)
        if (k[i] >= 0) {
            if (dup2(k[i], 3 + i) < 0)
                _exit(126);
            n = i + 1;
        }
    s_close_from(3 + n);
    if (c->drop && kla_jail_drop_root() != 0)
        s_child_fail("cannot become uid 65534 for the compiler\n");
    if (setrlimit(RLIMIT_AS, &b->lim_as) != 0 ||
        setrlimit(RLIMIT_CPU, &b->lim_cpu) != 0 ||
        setrlimit(RLIMIT_FSIZE, &b->lim_fsize) != 0 ||
        setrlimit(RLIMIT_NPROC, &b->lim_nproc) != 0 ||
        setrlimit(RLIMIT_CORE, &b->lim_core) != 0)
        s_child_fail("cannot set the compiler's limits\n");
    /* after the uid change, which clears it; dies with the agent */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    if (b->pin)
        kla_cores_pin(&b->cores);
    execvp(c->argv[0], c->argv);
    static const char msg[] = "cannot run the compiler\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
}

/* The command line: bwrap and the compiler, or the compiler alone
 * (unsafe). In the sandbox fd 3 holds the source, copied to
 * /build/candidate.c on a fresh tmpfs; the compiler writes its output
 * through /proc/self/fd/4, a memfd of the agent's (bwrap resolves bind
 * sources by path as uid 65534, which cannot reach a root agent's
 * workdir, and a descriptor leaves no path to race); fd 5, when set,
 * holds a compiler outside the system, copied to its own path. */
static void s_command(kla_builder_t *b, bool jail, bool copy_cc,
                      const char *src, const char *so, kla_argv_t *a)
{
    if (jail) {
        kla_jail_base_group(a);
        kla_argv_add(a, "--size");
        kla_argv_addf(a, "%zu", b->max_file);
        kla_argv_add(a, "--tmpfs");
        kla_argv_add(a, S_IN_DIR);
        kla_argv_add(a, "--file");
        kla_argv_add(a, "3");
        kla_argv_add(a, S_IN_DIR "/" S_SRC);
        if (copy_cc) {
            kla_argv_add(a, "--perms");
            kla_argv_add(a, "0555");
            kla_argv_add(a, "--file");
            kla_argv_add(a, "5");
            kla_argv_add(a, b->cc);
        }
        static const char *const env[] = {"--setenv", "PATH",   "/usr/bin:/bin",
                                          "--setenv", "TMPDIR", S_IN_DIR,
                                          "--setenv", "LC_ALL", "C",
                                          "--chdir",  S_IN_DIR, "--"};
        for (size_t i = 0; i < sizeof env / sizeof *env; i++)
            kla_argv_add(a, env[i]);
    }
    kla_argv_add(a, b->cc);
    for (int i = 0; i < b->nflags; i++)
        kla_argv_add(a, b->flags[i]);
    kla_argv_add(a, "-shared");
    kla_argv_add(a, "-fPIC");
    kla_argv_add(a, "-o");
    kla_argv_add(a, so);
    kla_argv_add(a, src);
}

/* Says why a compiler that wrote nothing (or could not start) failed. */
static void s_status_msg(kla_builder_t *b, int status, size_t len,
                         kla_build_t *out)
{
    if (len > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 127))
        return; /* its own stderr says it */
    if (WIFSIGNALED(status))
        snprintf(out->log, sizeof out->log, "compiler %s killed by signal %d%s",
                 b->cc, WTERMSIG(status),
                 WTERMSIG(status) == SIGXCPU ? " (CPU time limit)" : "");
    else
        snprintf(out->log, sizeof out->log,
                 "compiler %s exited with status %d%s", b->cc,
                 WEXITSTATUS(status),
                 WEXITSTATUS(status) == 127 ? " (cannot run it)" : "");
}

/* bwrap's own failure on the first line of raw: "bwrap: execvp cc: No
 * such file or directory" is the compiler's (KL_ERR_COMPILE), any other
 * ("bwrap: Creating new namespace failed: ...") the machine's
 * (KL_ERR_IO); KL_OK when raw is not from bwrap. */
static int s_bwrap_failed(kla_builder_t *b, const char *raw, size_t len,
                          kla_build_t *out)
{
    static const char pre[] = "bwrap: ";
    if (len < sizeof pre - 1 || memcmp(raw, pre, sizeof pre - 1) != 0)
        return KL_OK;
    const char *nl = memchr(raw, '\n', len);
    int n = (int)((nl ? (size_t)(nl - raw) : len) - (sizeof pre - 1));
    const char *l = raw + sizeof pre - 1;
    if (n > 7 && memcmp(l, "execvp ", 7) == 0) {
        const char *why = memchr(l, ':', (size_t)n);
        snprintf(out->log, sizeof out->log,
                 "cannot run the compiler %s in the sandbox%.*s", b->cc,
                 why ? n - (int)(why - l) : 0, why ? why : "");
        return KL_ERR_COMPILE;
    }
    snprintf(out->log, sizeof out->log, "the compiler's sandbox failed: %.*s",
             n, l);
    return KL_ERR_IO;
}

/* Replaces every "from" in the NUL-terminated log by the shorter "to". */
static void s_rewrite(char *log, const char *from, const char *to)
{
    size_t fn = strlen(from), tn = strlen(to);
    for (char *p = strstr(log, from); p; p = strstr(p + tn, from)) {
        memmove(p + tn, p + fn, strlen(p + fn) + 1);
        memcpy(p, to, tn);
    }
}

/* Runs the compiler: in a sandbox (jail) on the source in srcfd, writing
 * into outfd; else on dir/candidate.c, writing dir/out.so. Fills
 * out->log. Returns KL_OK, KL_ERR_COMPILE, KL_ERR_TIMEOUT, KL_ERR_IO or
 * KL_ERR_CLOSED. */
static int s_compile(kla_builder_t *b, bool jail, const char *dir, int srcfd,
                     int outfd, kla_build_t *out)
{
    char src[PATH_MAX + 16], so[PATH_MAX + 16], shown_dir[PATH_MAX + 2];
    snprintf(src, sizeof src, "%s/" S_SRC, jail ? S_IN_DIR : dir);
    if (jail)
        snprintf(so, sizeof so, "%s", S_OUT_FD);
    else
        snprintf(so, sizeof so, "%s/" KLA_BUILDER__OUT, dir);
    snprintf(shown_dir, sizeof shown_dir, "%s/", jail ? S_IN_DIR : dir);
    int ccfd = -1;
    if (jail && b->cc[0] == '/' && !kla_jail_sees(b->cc)) {
        ccfd = open(b->cc, O_RDONLY | O_CLOEXEC);
        if (ccfd < 0) {
            snprintf(out->log, sizeof out->log,
                     "cannot run the compiler %s: %s", b->cc, strerror(errno));
            return KL_ERR_COMPILE;
        }
    }
    double waited;
    if (kla_builder__gate_enter(b->gate, &waited) != 0) {
        snprintf(out->log, sizeof out->log, "build aborted: agent stopping");
        if (ccfd >= 0)
            close(ccfd);
        return KL_ERR_CLOSED;
    }
    out->paused_s += waited;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(out->log, sizeof out->log, "pipe: %s", strerror(errno));
        if (ccfd >= 0)
            close(ccfd);
        return KL_ERR_IO;
    }
    kla_argv_t argv = {0};
    s_command(b, jail, ccfd >= 0, src, so, &argv);
    s_child_t child = {.argv = argv.v,
                       .errfd = fds[1],
                       .keep = {jail ? srcfd : -1, jail ? outfd : -1, ccfd},
                       .drop = jail};
    double start = kl_now_s(), closed0 = kla_builder__gate_closed(b->gate);
    pid_t pid = s_spawn(b, &child);
    close(fds[1]);
    if (ccfd >= 0)
        close(ccfd);
    kla_argv_free(&argv);
    if (pid < 0) {
        close(fds[0]);
        snprintf(out->log, sizeof out->log, "fork: %s", strerror(errno));
        return KL_ERR_IO;
    }
    setpgid(pid, pid);
    kla_builder__gate_register(b->gate, pid);
    char *raw = kl_xmalloc(S_RAW_MAX);
    size_t len = 0;
    int timed_out = s_drain(b, fds[0], raw, &len, start, closed0);
    close(fds[0]);
    if (timed_out)
        kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    kla_builder__gate_unregister(b->gate, pid);
    double stopped = kla_builder__gate_closed(b->gate) - closed0;
    out->compile_s = kl_now_s() - start - stopped;
    out->paused_s += stopped;
    pthread_mutex_lock(&b->mu);
    b->compiles++;
    pthread_mutex_unlock(&b->mu);
    int rc = jail && !timed_out && !(WIFEXITED(status) && !WEXITSTATUS(status))
                 ? s_bwrap_failed(b, raw, len, out)
                 : KL_OK;
    size_t shown = 0;
    if (rc == KL_OK) {
        kla_builder_trim(raw, len, src, shown_dir, out->log, sizeof out->log,
                         NULL);
        if (jail)
            s_rewrite(out->log, S_OUT_FD, KLA_BUILDER__OUT);
        shown = strlen(out->log);
    }
    free(raw);
    if (rc != KL_OK)
        return rc;
    if (timed_out) {
        snprintf(out->log, sizeof out->log,
                 "compiler still running after %.1f s: killed",
                 b->timeout_ms / 1000.0);
        return KL_ERR_TIMEOUT; /* maybe load, not the source: not cached */
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KL_OK;
    s_status_msg(b, status, shown, out);
    return KL_ERR_COMPILE;
}

/* The output the unsafe compile left in dir/out.so (dirfd): opened
 * without following links (kla_builder__store then wants a regular file). fd,
 * or -1 with out->log and *rc. */
static int s_open_output(int dirfd, kla_build_t *out, int *rc)
{
    int fd = openat(dirfd, KLA_BUILDER__OUT,
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(out->log, sizeof out->log, "%s",
                 e == ELOOP ? "the compiler's output " KLA_BUILDER__OUT
                              " is a symbolic link: refused"
                 : e == ENOENT ? "the compiler wrote no " KLA_BUILDER__OUT
                               : "cannot open the compiler's output");
        *rc = e == ELOOP || e == ENOENT ? KL_ERR_COMPILE : KL_ERR_IO;
    }
    return fd;
}

/* Removes everything in the directory open as fd (not fd itself), not
 * following links; depth bounded. */
static void s_rm_contents(int fd, int depth)
{
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = copy >= 0 ? fdopendir(copy) : NULL;
    if (!d) {
        if (copy >= 0)
            close(copy);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (unlinkat(fd, n, 0) == 0 || errno == ENOENT)
            continue;
        if (depth >= 32)
            continue;
        fchmodat(fd, n, 0700, 0); /* a directory the compiler locked */
        int sub =
            openat(fd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
            s_rm_contents(sub, depth + 1);
            close(sub);
            unlinkat(fd, n, AT_REMOVEDIR);
        }
    }
    closedir(d);
}

/* Writes source as candidate.c in the fresh directory open as dirfd. */
static int s_put_source(int dirfd, const char *source, size_t len,
                        kla_build_t *out)
{
    int fd = openat(dirfd, S_SRC,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    size_t done = 0;
    while (fd >= 0 && done < len) {
        ssize_t w = write(fd, source + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    /* readable by uid 65534 whatever the agent's umask */
    if (fd < 0 || done != len || fchmod(fd, 0644) != 0) {
        snprintf(out->log, sizeof out->log, "write " S_SRC ": %s",
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return KL_ERR_IO;
    }
    close(fd);
    return KL_OK;
}

/* The sandboxed build: source and output in memfds, nothing of the
 * agent's on disk until the output is taken. */
int kla_builder__build_jailed(kla_builder_t *b, const char *source, size_t len,
                              kla_build_t *out, uint8_t sum[16])
{
    int srcfd = memfd_create("candidate.c", MFD_CLOEXEC);
    int outfd = memfd_create("out.so", MFD_CLOEXEC);
    size_t done = 0;
    while (srcfd >= 0 && done < len) {
        ssize_t w = write(srcfd, source + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int rc = KL_ERR_IO;
    if (srcfd < 0 || outfd < 0 || done != len || lseek(srcfd, 0, SEEK_SET) != 0)
        snprintf(out->log, sizeof out->log, "memfd: %s", strerror(errno));
    else
        rc = s_compile(b, true, NULL, srcfd, outfd, out);
    if (rc == KL_OK)
        rc = kla_builder__store(b, outfd, out->so_path, sum, out);
    if (srcfd >= 0)
        close(srcfd);
    if (outfd >= 0)
        close(outfd);
    return rc;
}

/* The unsafe build (--unsafe-no-sandbox): in a fresh per-compile
 * directory WORKDIR/build-XXXXXX holding the source alone, removed after
 * its output is taken. */
int kla_builder__build_unsafe(kla_builder_t *b, const char *source, size_t len,
                              kla_build_t *out, uint8_t sum[16])
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/build-XXXXXX", b->workdir);
    if (!mkdtemp(dir)) {
        snprintf(out->log, sizeof out->log, "mkdtemp %.1024s: %s", dir,
                 strerror(errno));
        return KL_ERR_IO;
    }
    int rc = KL_ERR_IO;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        snprintf(out->log, sizeof out->log, "build directory %.1024s: %s", dir,
                 strerror(errno));
    else
        rc = s_put_source(dirfd, source, len, out);
    if (rc == KL_OK)
        rc = s_compile(b, false, dir, -1, -1, out);
    if (rc == KL_OK) {
        int fd = s_open_output(dirfd, out, &rc);
        if (fd >= 0) {
            rc = kla_builder__store(b, fd, out->so_path, sum, out);
            close(fd);
        }
    }
    if (dirfd >= 0) {
        s_rm_contents(dirfd, 0);
        close(dirfd);
    }
    if (rmdir(dir) != 0)
        kl_warn("build directory %s: cannot remove it: %s", dir,
                strerror(errno));
    return rc;
}
