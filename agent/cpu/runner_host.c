/* runner_host.c - kiln-runner's host and warden (kla_cand.h): the trusted
 * processes inside the candidate sandbox. Neither ever loads candidate
 * code. */
#include "kla_runner_exe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kla_cand.h"

#if defined(__SANITIZE_ADDRESS__)
#define S_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define S_ASAN 1
#endif
#endif

extern char **environ;

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds as whole microseconds, 0 .. UINT32_MAX. */
static uint32_t s_us(double s)
{
    return !(s > 0) ? 0 : s >= 4294.0 ? UINT32_MAX : (uint32_t)(s * 1e6);
}

/* ---- the warden -------------------------------------------------------- */

typedef struct {
    const kla_cand_job_t *job;
    int agent, harness; /* sockets */
    pid_t pid;
    int pidfd;
    clockid_t cpu;
    bool has_cpu;
    double t0, deadline;
} s_warden_t;

static double s_cpu_s(const s_warden_t *w)
{
    struct timespec ts;
    if (!w->has_cpu || clock_gettime(w->cpu, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void s_limit(int res, rlim_t v)
{
    struct rlimit rl = {v, v};
    setrlimit(res, &rl);
}

/* Drops every capability the warden had in the sandbox's user namespace
 * (it needs CAP_SYS_ADMIN for its namespaces and mounts). */
static void s_drop_caps(void)
{
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    for (int c = 0; c <= 63; c++)
        prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
    struct {
        uint32_t version;
        int pid;
    } hdr = {0x20080522, 0}; /* _LINUX_CAPABILITY_VERSION_3 */
    uint32_t data[6] = {0};
    syscall(SYS_capset, &hdr, data);
}

/* The harness's side of the fork: limits, descriptors 3..7, exec. */
static void s_exec_harness(const kla_cand_job_t *j, const int *fds, int sock)
{
    int want[KLA_CAND_NFDS];
    for (int i = 0; i < KLA_CAND_NFDS; i++) {
        int src = i == KLA_CAND_FD_PEER ? sock : fds[i];
        want[i] = fcntl(src, F_DUPFD, 100);
        if (want[i] < 0)
            _exit(120);
    }
    for (int i = 0; i < KLA_CAND_NFDS; i++)
        if (dup2(want[i], 3 + i) != 3 + i)
            _exit(120);
    syscall(SYS_close_range, 3 + KLA_CAND_NFDS, ~0u, 0);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    cpu_set_t set;
    CPU_ZERO(&set);
    int ncpu = 0;
    for (int c = 0; c < 1024; c++)
        if (j->pin[c / 64] >> (c % 64) & 1) {
            CPU_SET(c, &set);
            ncpu++;
        }
    if (ncpu)
        sched_setaffinity(0, sizeof set, &set);
    else
        ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    s_limit(RLIMIT_CORE, 0);
    s_limit(RLIMIT_CPU,
            (rlim_t)((j->timeout_ms + 999) / 1000) * (rlim_t)(ncpu + 1) + 2);
    s_limit(RLIMIT_FSIZE, (rlim_t)64 << 20);
    s_limit(RLIMIT_NOFILE, 64);
    s_limit(RLIMIT_NPROC, 512);
#ifndef S_ASAN
    if (j->max_mem_bytes)
        s_limit(RLIMIT_AS, (rlim_t)j->max_mem_bytes);
#endif
    s_drop_caps();
    char *argv[] = {"kiln-runner", "harness", NULL};
    execve("/proc/self/exe", argv, environ);
    _exit(121);
}

static void s_exit_msg(s_warden_t *w, kla_cand_end end, int code,
                       const char *msg, double cpu)
{
    kla_cand_msg_t m = {.magic = KLA_CAND_MAGIC,
                        .kind = KLA_CM_EXIT,
                        .status = end,
                        .code = (uint32_t)code,
                        .u = cpu,
                        .wall = s_now() - w->t0};
    if (msg)
        snprintf(m.msg, sizeof m.msg, "%s", msg);
    kla_runner__cand_send(w->agent, &m, sizeof m, NULL, 0);
}

/* Kills the harness (once more: everything in the namespace dies with
 * the warden anyway), reaps it and reports end. */
static int s_finish(s_warden_t *w, kla_cand_end end, const char *msg)
{
    struct rusage ru = {0};
    int status = 0;
    if (w->pid > 0 && end == KLA_CE_EXITED && w->pidfd >= 0) {
        /* It closed its socket, or says it is done: it has until the
         * deadline to be gone. */
        for (;;) {
            double left = w->deadline - s_now();
            struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
            int rc = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
            if (rc < 0 && errno == EINTR)
                continue;
            if (rc == 0) {
                end = KLA_CE_TIMEOUT;
                msg = NULL;
            }
            break;
        }
    }
    if (w->pid > 0) {
        if (end != KLA_CE_EXITED)
            kill(w->pid, SIGKILL);
        while (wait4(w->pid, &status, 0, &ru) < 0 && errno == EINTR)
            ;
    }
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    if (end == KLA_CE_EXITED) {
        if (WIFSIGNALED(status))
            s_exit_msg(w, KLA_CE_SIGNALED, WTERMSIG(status), NULL, cpu);
        else
            s_exit_msg(w, KLA_CE_EXITED, WEXITSTATUS(status), NULL, cpu);
    } else {
        s_exit_msg(w, end, 0, msg, cpu);
    }
    return 0;
}

/* Waits for a message from the harness (or its end, or the deadline);
 * 1: got one in *m; 0: the harness ended (reaped by the caller); -1:
 * deadline; -2: the agent went away. */
static int s_wait_harness(s_warden_t *w, kla_cand_msg_t *m)
{
    for (;;) {
        double left = w->deadline - s_now();
        if (left <= 0)
            return -1;
        struct pollfd p[3] = {{.fd = w->harness, .events = POLLIN},
                              {.fd = w->pidfd, .events = POLLIN},
                              {.fd = w->agent, .events = POLLIN}};
        int ms = (int)(left * 1000) + 1;
        int rc = poll(p, w->pidfd >= 0 ? 3 : 1, w->pidfd >= 0 ? ms : 5);
        if (rc < 0 && errno != EINTR)
            return -1;
        if (p[0].revents & POLLIN) {
            ssize_t n = recv(w->harness, m, sizeof *m, MSG_DONTWAIT);
            if (n == (ssize_t)sizeof *m && m->magic == KLA_CAND_MAGIC) {
                m->msg[sizeof m->msg - 1] = '\0';
                return 1;
            }
            if (n > 0) { /* malformed: say so */
                m->kind = 0;
                return 1;
            }
        }
        if (p[0].revents & (POLLHUP | POLLERR))
            return 0;
        if (w->pidfd >= 0 && (p[1].revents & POLLIN))
            return 0;
        if (w->pidfd >= 0 && (p[2].revents & (POLLIN | POLLHUP | POLLERR))) {
            /* The agent says something only when asked: anything now
             * (or its end) means stop. */
            return -2;
        }
        if (w->pidfd < 0 && waitpid(w->pid, NULL, WNOHANG | WNOWAIT) == w->pid)
            return 0;
    }
}

/* Waits for the agent's GO or STOP. 1: GO; 0: STOP or gone. */
static int s_wait_agent(s_warden_t *w)
{
    for (;;) {
        double left = w->deadline - s_now();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = w->agent, .events = POLLIN};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        kla_cand_msg_t m;
        ssize_t n = recv(w->agent, &m, sizeof m, 0);
        if (n != (ssize_t)sizeof m || m.magic != KLA_CAND_MAGIC)
            return 0;
        return m.kind == KLA_CM_GO ? 1 : 0;
    }
}

static int s_protocol(s_warden_t *w, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof msg,
             "the kernel process broke the harness protocol (%s): killed",
             what);
    return s_finish(w, KLA_CE_PROTOCOL, msg);
}

/* What the warden does when s_wait_harness returned rc other than 1: the
 * deadline, the agent gone, or the harness ended. */
static int s_ended(s_warden_t *w, int rc)
{
    if (rc == -1)
        return s_finish(w, KLA_CE_TIMEOUT, NULL);
    if (rc == -2)
        return s_finish(w, KLA_CE_PROTOCOL, "the agent went away");
    return s_finish(w, KLA_CE_EXITED, NULL);
}

/* The warden's conversation; returns its exit status. */
static int s_warden_run(s_warden_t *w)
{
    const kla_cand_job_t *j = w->job;
    kla_cand_msg_t go = {.magic = KLA_CAND_MAGIC, .kind = KLA_CM_GO};
    kla_cand_msg_t m;
    /* READY before the first call (or CALLED with an error: it could not
     * load or prepare the kernel). */
    int rc = s_wait_harness(w, &m);
    if (rc != 1)
        return s_ended(w, rc);
    double u0 = 0, t0 = 0;
    if (m.kind == KLA_CM_READY) {
        u0 = s_cpu_s(w);
        t0 = s_now();
        kla_runner__cand_send(w->harness, &go, sizeof go, NULL, 0);
        rc = s_wait_harness(w, &m);
        if (rc != 1)
            return s_ended(w, rc);
        if (m.kind != KLA_CM_CALLED || m.status != KLA_CS_OK)
            return s_protocol(w, "expected CALLED");
    } else if (m.kind != KLA_CM_CALLED || m.status == KLA_CS_OK) {
        return s_protocol(w, "expected READY");
    }
    /* The kernel's account of the first call (from outside, like a
     * sample): a bound on what one call can take, whatever the samples
     * claim. */
    m.u = t0 > 0 ? s_cpu_s(w) - u0 : 0;
    m.t_w = t0 > 0 ? s_now() - t0 : 0;
    kla_runner__cand_send(w->agent, &m, sizeof m, NULL, 0);
    if (m.status != KLA_CS_OK) {
        /* It says it could not run the kernel: it exits by itself, or is
         * ended after a moment. */
        double grace = s_now() + 1.0;
        if (grace < w->deadline)
            w->deadline = grace;
        while ((rc = s_wait_harness(w, &m)) == 1)
            ;
        return s_finish(w, rc == 0 ? KLA_CE_EXITED : KLA_CE_PROTOCOL,
                        "the kernel process did not exit after its error");
    }
    rc = s_wait_agent(w);
    if (rc == -1)
        return s_finish(w, KLA_CE_TIMEOUT, NULL);
    if (rc == 0)
        return s_finish(w, KLA_CE_PROTOCOL, "stopped by the agent");
    kla_runner__cand_send(w->harness, &go, sizeof go, NULL, 0);
    uint32_t samples = 0;
    double t_last = s_now(); /* the last call's end, about */
    for (;;) {
        rc = s_wait_harness(w, &m);
        if (rc != 1)
            return s_ended(w, rc);
        if (m.kind == KLA_CM_END) {
            if (j->timed && samples != j->repeat)
                return s_protocol(w, "END before every sample");
            kla_runner__cand_send(w->agent, &m, sizeof m, NULL, 0);
            break;
        }
        if (m.kind != KLA_CM_READY || !j->timed || samples >= j->repeat)
            return s_protocol(w, "expected READY");
        double u0 = s_cpu_s(w), t0 = s_now();
        kla_runner__cand_send(w->harness, &go, sizeof go, NULL, 0);
        rc = s_wait_harness(w, &m);
        double t1 = s_now(), u1 = s_cpu_s(w);
        if (rc != 1)
            return s_ended(w, rc);
        if (m.kind != KLA_CM_DONE)
            return s_protocol(w, "expected DONE");
        kla_cand_msg_t s = {.magic = KLA_CAND_MAGIC,
                            .kind = KLA_CM_SAMPLE,
                            .number = m.number,
                            .t_c = m.t_c,
                            .t_w = t1 - t0,
                            .u = u1 - u0,
                            .gap_us = s_us(t0 - t_last)};
        t_last = t1;
        kla_runner__cand_send(w->agent, &s, sizeof s, NULL, 0);
        samples++;
    }
    /* After END the harness exits by itself. */
    double grace = s_now() + 2.0;
    if (grace < w->deadline)
        w->deadline = grace;
    rc = s_wait_harness(w, &m);
    return rc == 1 ? s_protocol(w, "a message after END") : s_ended(w, rc);
}

/* Runs in the clone: pid 1 of a new pid namespace. */
static int s_warden(const kla_cand_job_t *j, int *fds, bool unsafe)
{
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    s_warden_t w = {.job = j, .agent = fds[KLA_CAND_FD_PEER], .pidfd = -1};
    w.t0 = s_now();
    w.deadline = w.t0 + j->timeout_ms / 1000.0;
    if (!unsafe) {
        /* Nothing a candidate writes outlives it: the root is read-only
         * (bwrap --remount-ro), /dev becomes so in this mount namespace,
         * and /tmp and /dev/shm are fresh for each candidate. */
        const char *what = "/";
        int rc = mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
        if (!rc && (what = "/dev", 1))
            rc = mount(NULL, "/dev", NULL,
                       MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                       NULL);
        if (!rc && (what = "/tmp", 1))
            rc = mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
                       "size=64m,mode=0700");
        if (!rc && access("/dev/shm", F_OK) == 0 && (what = "/dev/shm", 1))
            rc = mount("tmpfs", "/dev/shm", "tmpfs",
                       MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16m,mode=0700");
        if (rc != 0) {
            char msg[256];
            snprintf(msg, sizeof msg, "warden: mount %s: %s", what,
                     strerror(errno));
            s_exit_msg(&w, KLA_CE_FAILED, 0, msg, 0);
            return 1;
        }
    }
    int hs[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hs) != 0) {
        s_exit_msg(&w, KLA_CE_FAILED, 0, "warden: socketpair failed", 0);
        return 1;
    }
    w.pid = fork();
    if (w.pid == 0)
        s_exec_harness(j, fds, hs[1]);
    close(hs[1]);
    if (w.pid < 0) {
        s_exit_msg(&w, KLA_CE_FAILED, 0, "warden: fork failed", 0);
        return 1;
    }
    w.harness = hs[0];
    w.pidfd = (int)syscall(SYS_pidfd_open, w.pid, 0);
    w.has_cpu = clock_getcpuclockid(w.pid, &w.cpu) == 0;
    kla_cand_job_t copy = *j;
    if (kla_runner__cand_send(w.harness, &copy, sizeof copy, NULL, 0) != 0) {
        s_finish(&w, KLA_CE_EXITED, NULL);
        return 0;
    }
    return s_warden_run(&w);
}

/* ---- the host ---------------------------------------------------------- */

int kla_runner__host_main(bool unsafe)
{
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        kla_cand_job_t job;
        int fds[KLA_CAND_NFDS];
        if (kla_runner__cand_recv(3, &job, sizeof job, fds, KLA_CAND_NFDS) !=
            0) {
            /* EOF (the agent closed the sandbox) or a malformed job. */
            char probe;
            if (recv(3, &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0 ||
                errno != EAGAIN)
                return 0;
            continue;
        }
        if (!kla_runner__cand_job_ok(&job)) {
            for (int i = 0; i < KLA_CAND_NFDS; i++)
                close(fds[i]);
            continue;
        }
        long flags = SIGCHLD;
        if (!unsafe)
            flags |= CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC;
        pid_t pid = (pid_t)syscall(SYS_clone, flags, 0, 0, 0, 0);
        if (pid == 0)
            _exit(s_warden(&job, fds, unsafe));
        if (pid < 0) {
            kla_cand_msg_t m = {.magic = KLA_CAND_MAGIC,
                                .kind = KLA_CM_EXIT,
                                .status = KLA_CE_FAILED};
            snprintf(m.msg, sizeof m.msg, "host: clone: %s", strerror(errno));
            kla_runner__cand_send(fds[KLA_CAND_FD_PEER], &m, sizeof m, NULL, 0);
        }
        for (int i = 0; i < KLA_CAND_NFDS; i++)
            close(fds[i]);
        while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}
