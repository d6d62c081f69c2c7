/* sandbox.c - forked, limited children for untrusted kernels. */
#include "kla_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define KLA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KLA_ASAN 1
#endif
#endif

const char *kla_signame(int sig)
{
    static __thread char buf[24];
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, sizeof buf, "SIG%s", abbrev);
    else
        snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

int kla_write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void s_limit(int resource, rlim_t value)
{
    struct rlimit rl = {value, value};
    setrlimit(resource, &rl);
}

/* In the child, between fork and the body: only simple system calls. */
static void s_child_setup(const kla_sandbox_opts_t *o, int rfd)
{
    close(rfd);
    setpgid(0, 0);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (null > 2)
            close(null);
    }
    /* Handlers and the signal mask of the agent (or of a test harness)
     * must not survive: a crash has to kill the child. */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    s_limit(RLIMIT_CORE, 0);
    /* CPU seconds: the wall-clock budget on every CPU we may use, plus a
     * margin; the wall-clock timeout in the parent is the real limit. */
    kla_cores_t mine;
    kla_cores_affinity(&mine);
    rlim_t cpu_s = (rlim_t)((o->timeout_ms + 999) / 1000) * (rlim_t)mine.n + 2;
    s_limit(RLIMIT_CPU, cpu_s);
#ifndef KLA_ASAN
    if (o->max_mem_bytes)
        s_limit(RLIMIT_AS, (rlim_t)o->max_mem_bytes);
#endif
    if (o->pin && o->pin->n > 0)
        kla_cores_pin(o->pin);
}

static int s_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

typedef struct {
    int rfd;
    char *buf;
    size_t cap, len;
    int overflow;
} s_reader_t;

/* Reads what is available; returns 0 at EOF, 1 when more may come. */
static int s_read_some(s_reader_t *r)
{
    char scratch[4096];
    for (;;) {
        char *dst = r->len < r->cap ? r->buf + r->len : scratch;
        size_t room = r->len < r->cap ? r->cap - r->len : sizeof scratch;
        ssize_t n = read(r->rfd, dst, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN ? 1 : 0;
        if (n == 0)
            return 0;
        if (dst == scratch)
            r->overflow = 1;
        else
            r->len += (size_t)n;
        if (r->overflow)
            return 1;
    }
}

static void s_describe(kla_sandbox_result_t *res, int status)
{
    if (WIFSIGNALED(status)) {
        res->outcome = KLA_SB_SIGNALED;
        res->code = WTERMSIG(status);
        snprintf(res->error, sizeof res->error, "killed by signal %d (%s)",
                 res->code, kla_signame(res->code));
        if (res->code == SIGXCPU)
            snprintf(res->error, sizeof res->error,
                     "killed by signal %d (SIGXCPU): CPU time limit",
                     res->code);
    } else {
        res->outcome = KLA_SB_EXITED;
        res->code = WEXITSTATUS(status);
        if (res->code != 0)
            snprintf(res->error, sizeof res->error, "exited with status %d",
                     res->code);
    }
}

/* Waits for the child: reads the pipe until EOF and the child is gone, or
 * the deadline passes. Returns 1 on timeout/overflow (child still alive). */
static int s_watch(pid_t pid, int pidfd, s_reader_t *r, double deadline,
                   int *status)
{
    int open_pipe = 1;
    for (;;) {
        double left = deadline - kl_now_s();
        if (left <= 0 || r->overflow)
            return 1;
        struct pollfd p[2];
        int np = 0;
        if (open_pipe)
            p[np++] = (struct pollfd){.fd = r->rfd, .events = POLLIN};
        if (pidfd >= 0)
            p[np++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
        int ms = (int)(left * 1000.0) + 1;
        if (pidfd < 0 && ms > 5)
            ms = 5; /* no pidfd: look at the child now and then */
        int rc = np ? poll(p, (nfds_t)np, ms) : (usleep(1000), 0);
        if (rc < 0 && errno != EINTR)
            return 1;
        if (open_pipe && rc > 0 && (p[0].revents & (POLLIN | POLLHUP)))
            open_pipe = s_read_some(r);
        /* The child is a zombie once it exits: its group id is still
         * ours to kill, so stray grandchildren die with it. */
        if (waitpid(pid, status, WNOHANG) == pid) {
            kill(-pid, SIGKILL);
            while (open_pipe && !r->overflow) {
                struct pollfd q = {.fd = r->rfd, .events = POLLIN};
                if (poll(&q, 1, 0) <= 0)
                    break;
                open_pipe = s_read_some(r);
            }
            return r->overflow;
        }
    }
}

void kla_sandbox_run(const kla_sandbox_opts_t *opts, kla_child_fn fn, void *arg,
                     void *buf, size_t cap, kla_sandbox_result_t *res)
{
    memset(res, 0, sizeof *res);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        res->outcome = KLA_SB_FAILED;
        snprintf(res->error, sizeof res->error, "pipe: %s", strerror(errno));
        return;
    }
    double t0 = kl_now_s();
    pid_t pid = fork();
    if (pid < 0) {
        res->outcome = KLA_SB_FAILED;
        snprintf(res->error, sizeof res->error, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (pid == 0) {
        s_child_setup(opts, fds[0]);
        _exit(fn(arg, fds[1]));
    }
    close(fds[1]);
    setpgid(pid, pid); /* also done by the child; whichever runs first */
    if (opts->running)
        atomic_store(opts->running, pid);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    int pidfd = s_pidfd_open(pid);
    s_reader_t r = {.rfd = fds[0], .buf = buf, .cap = cap};
    int status = 0;
    double deadline = t0 + opts->timeout_ms / 1000.0;
    if (s_watch(pid, pidfd, &r, deadline, &status)) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (r.overflow) {
            res->outcome = KLA_SB_OVERFLOW;
            snprintf(res->error, sizeof res->error,
                     "child wrote more than %zu bytes of results (killed)",
                     cap);
        } else {
            res->outcome = KLA_SB_TIMEOUT;
            snprintf(res->error, sizeof res->error,
                     "timed out after %d ms (killed)", opts->timeout_ms);
        }
    } else {
        s_describe(res, status);
    }
    if (opts->running)
        atomic_store(opts->running, 0);
    res->wall_s = kl_now_s() - t0;
    res->len = r.len;
    if (pidfd >= 0)
        close(pidfd);
    close(fds[0]);
}

void kla_sandbox_kill(_Atomic pid_t *running)
{
    pid_t pid = atomic_load(running);
    if (pid > 0) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    }
}
