/* runner_sandbox.c - one run in the candidate sandbox (kla_cand.h): the
 * sandbox's host started and stopped, the candidate's memfd, the
 * outputs poisoned before and verified after, every sample's claim
 * checked against the warden's clocks, and how the run ended. */
#include "kla_runner_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_jail.h"
#include "kla_runner_exe.h"
#include "kla_sandbox.h"

/* ---- the sandbox's host -------------------------------------------------- */

/* kiln-runner: config, $KILN_RUNNER, beside this executable, or in
 * ../libexec/kiln from it. */
static void s_runner_path(const kla_runner_t *r, char *out, size_t n)
{
    const char *env = getenv("KILN_RUNNER");
    if (r->cfg.runner_path && *r->cfg.runner_path) {
        snprintf(out, n, "%s", r->cfg.runner_path);
        return;
    }
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return;
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(out, n, "%.4000s/kiln-runner", self);
    if (access(out, X_OK) != 0)
        snprintf(out, n, "%.4000s/../libexec/kiln/kiln-runner", self);
}

void kla_runner__host_stop(kla_runner_t *r)
{
    if (r->host >= 0)
        close(r->host);
    r->host = -1;
    if (r->host_pid > 0) {
        kill(r->host_pid, SIGKILL);
        while (waitpid(r->host_pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    r->host_pid = 0;
    atomic_store(&r->running, 0);
}

/* The environment a kernel sees: OpenMP's settings, nothing else. */
static void s_host_env(kla_argv_t *a)
{
    extern char **environ;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "OMP_", 4) != 0 && strncmp(*e, "GOMP_", 5) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char *name = kl_xstrndup(*e, (size_t)(eq - *e));
        kla_argv_add(a, "--setenv");
        kla_argv_add(a, name);
        kla_argv_add(a, eq + 1);
        free(name);
    }
}

/* The same environment for --unsafe-no-sandbox, where bwrap does not
 * clear it: OpenMP's settings and a PATH, so that nothing else of the
 * agent's (its sanitizer options, say) reaches the harness. */
static void s_unsafe_env(kla_argv_t *env)
{
    extern char **environ;
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, "OMP_", 4) || !strncmp(*e, "GOMP_", 5))
            kla_argv_add(env, *e);
    kla_argv_add(env, "PATH=/usr/bin:/bin");
}

/* Starts the sandbox and its host (kla_cand.h). */
static int s_host_start(kla_runner_t *r, char *err)
{
    char path[PATH_MAX];
    s_runner_path(r, path, sizeof path);
    bool unsafe = kla_jail_unsafe();
    if (!unsafe && kla_jail_probe(err) != KL_OK)
        return KL_ERR_UNSUPPORTED;
    int exe = open(path, O_RDONLY | O_CLOEXEC);
    if (exe < 0)
        return kl_seterr(err, KL_ERR_IO,
                         "kiln-runner %s: %s (set KILN_RUNNER to its path)",
                         path, strerror(errno));
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        close(exe);
        return kl_seterr(err, KL_ERR_IO, "socketpair: %s", strerror(errno));
    }
    kla_argv_t a = {0}, env = {0};
    if (unsafe) {
        s_unsafe_env(&env);
        kla_argv_add(&a, path);
        kla_argv_add(&a, "host");
        kla_argv_add(&a, "--unsafe");
    } else {
        kla_jail_base(&a);
        /* In the sandbox's own user namespace only: the warden makes a
         * pid, mount and ipc namespace per candidate and drops it. */
        kla_argv_add(&a, "--cap-add");
        kla_argv_add(&a, "CAP_SYS_ADMIN");
        /* The host is pid 1 itself: no bubblewrap reaper, which would be
         * a dumpable process a candidate could open /proc/1/mem of. */
        kla_argv_add(&a, "--as-pid-1");
        s_host_env(&a);
        kla_argv_add(&a, "--perms");
        kla_argv_add(&a, "0555");
        kla_argv_add(&a, "--file");
        kla_argv_add(&a, "4");
        kla_argv_add(&a, "/kiln-runner");
        /* bwrap's root is a tmpfs the sandbox's user could write, and it
         * outlives one candidate: a file planted there (an
         * /etc/ld.so.preload) would run in the next tenant's harness. */
        kla_argv_add(&a, "--remount-ro");
        kla_argv_add(&a, "/");
        kla_argv_add(&a, "--");
        kla_argv_add(&a, "/kiln-runner");
        kla_argv_add(&a, "host");
    }
    pid_t pid = fork();
    if (pid == 0) {
        int fds[2] = {sv[1], exe};
        kla_jail_exec(fds, 2, a.v, env.v, unsafe);
    }
    kla_argv_free(&a);
    kla_argv_free(&env);
    close(sv[1]);
    close(exe);
    if (pid < 0) {
        close(sv[0]);
        return kl_seterr(err, KL_ERR_IO, "fork: %s", strerror(errno));
    }
    setpgid(pid, pid);
    r->host = sv[0];
    r->host_pid = pid;
    atomic_store(&r->running, pid);
    return KL_OK;
}

static int s_flush_fd(kla_runner_t *r)
{
    if (r->flush_fd >= 0 || !r->flush_n)
        return r->flush_fd;
    int fd = kla_runner__memfd("kiln-flush", r->flush_n);
    if (fd < 0)
        return -1;
    /* Populated once, so harnesses neither allocate nor zero it. */
    void *m = mmap(NULL, r->flush_n, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return -1;
    }
    munmap(m, r->flush_n);
    if (kla_runner__seal(fd, true) != 0) {
        close(fd);
        return -1;
    }
    r->flush_fd = fd;
    return fd;
}

/* ---- verification (in the agent, on its own mapping) -------------------- */

/* Element i of integer argument a stored at buf. */
static int64_t s_int_at(const kla_problem_t *p, int a, const void *buf,
                        size_t i)
{
    switch (p->dtype[a]) {
    case KILN__DTYPE__DTYPE_U8:
        return ((const uint8_t *)buf)[i];
    case KILN__DTYPE__DTYPE_S8:
        return ((const int8_t *)buf)[i];
    default:
        return ((const int32_t *)buf)[i];
    }
}

/* Compares the outputs in the shared buffer with the reference; fills
 * out on a mismatch, its message starting with `when` ("" for the check
 * of the first call). */
static bool s_verify(const kla_problem_t *p, const kla_runner__ref_t *ref,
                     const char *when, kla_result_t *out)
{
    const kla_eval_t *e = &p->eval;
    size_t bad = 0, total = 0;
    double max_err = 0;
    char msg[1024] = "";
    for (int a = 0; a < p->n_args; a++) {
        if (!p->is_output[a])
            continue;
        const void *o = ref->out_map + ref->off[a];
        if (p->dtype[a] != KILN__DTYPE__DTYPE_F32) {
            /* Integer outputs: exactly the reference's. */
            for (size_t i = 0; i < p->nelem[a]; i++, total++) {
                int64_t v = s_int_at(p, a, o, i);
                int64_t rv = s_int_at(p, a, ref->buf[a], i);
                double d = fabs((double)(v - rv));
                if (d > max_err)
                    max_err = d;
                if (v != rv && !bad++)
                    snprintf(msg, sizeof msg,
                             "%soutput %d element %zu is %lld, expected %lld "
                             "(integer outputs must match exactly)",
                             when, a, i, (long long)v, (long long)rv);
            }
            continue;
        }
        const float *of = o, *rf = ref->buf[a];
        double rms = ref->rms[a];
        for (size_t i = 0; i < p->nelem[a]; i++, total++) {
            double d = fabs((double)of[i] - (double)rf[i]);
            if (isnan(d))
                d = INFINITY;
            if (d > max_err)
                max_err = d;
            if (d > e->atol + e->rtol * (fabs((double)rf[i]) + rms)) {
                if (!bad++)
                    snprintf(msg, sizeof msg,
                             "%soutput %d element %zu is %g, expected %g "
                             "(rtol %g of |expected| + rms %g, atol %g)",
                             when, a, i, (double)of[i], (double)rf[i], e->rtol,
                             rms, e->atol);
            }
        }
    }
    out->max_abs_err = max_err;
    if (!bad)
        return true;
    snprintf(out->error, sizeof out->error,
             "%s; %zu of %zu elements wrong, max abs error %g", msg, bad, total,
             max_err);
    out->status = KILN__STATUS__STATUS_WRONG_RESULT;
    return false;
}

/* Fills every output with a value no kernel writes by accident: NaN for
 * f32, 0xa5 bytes otherwise. Before every run, so a kernel that writes
 * nothing never finds another's results there. */
static void s_poison(const kla_problem_t *p, kla_runner__ref_t *e)
{
    for (int a = 0; a < p->n_args; a++) {
        if (!p->is_output[a])
            continue;
        void *o = e->out_map + e->off[a];
        if (p->dtype[a] == KILN__DTYPE__DTYPE_F32)
            for (size_t i = 0; i < p->nelem[a]; i++)
                ((float *)o)[i] = NAN;
        else
            memset(o, 0xa5, p->nelem[a] * kla_runner__esize(p, a));
    }
}

/* ---- one run in the sandbox --------------------------------------------- */

/* Text from the sandbox (the candidate may have written it): printable
 * ASCII only. */
static void s_clean(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 32 || (unsigned char)*s > 126)
            *s = '?';
}

typedef struct {
    bool called, called_ok, ended, exited;
    kla_cand_msg_t exit;
    double u_pre; /* CPU seconds of the verified first call (the kernel's) */
    uint32_t n;
    double *samples;
    uint32_t number;
    bool refused;
} s_run_t;

/* Checks one sample against the warden's clocks; false with out->error
 * set when the claim is contradicted. */
static bool s_check_sample(const kla_runner_t *r, const s_run_t *run,
                           const kla_cand_msg_t *m, kla_result_t *out)
{
    double t = m->t_c, per = m->number ? t / m->number : 0;
    if (!isfinite(t) || t < 0 || m->number < 1 || m->number > KLA_MAX_NUMBER ||
        (run->n && m->number != run->number)) {
        snprintf(out->error, sizeof out->error,
                 "timing refused: sample %u is malformed (%g s for %u calls)",
                 run->n + 1, t, m->number);
        return false;
    }
    if (t > m->t_w + 1e-4) {
        snprintf(out->error, sizeof out->error,
                 "timing refused: sample %u claims %.6f s, but the sandbox "
                 "timed it at %.6f s",
                 run->n + 1, t, m->t_w);
        return false;
    }
    /* The kernel's CPU account in the sample against the claim: what the
     * claimed calls can burn on its CPUs, plus what idle OpenMP threads
     * may spin away in the rest of the sample (at most KLA_RUNNER__SPIN_CPU_S
     * per CPU, and never more than the unclaimed wall time), plus the handoff.
     * Under it, a claim the machine's own clocks bear out. */
    double rest = m->t_w - t;
    double spin = rest < KLA_RUNNER__SPIN_CPU_S ? rest : KLA_RUNNER__SPIN_CPU_S;
    /* and what they spun before it, charged late (KLA_RUNNER__TICK_S) */
    double gap = m->gap_us * 1e-6;
    spin += gap < KLA_RUNNER__TICK_S ? gap : KLA_RUNNER__TICK_S;
    if (!r->spin_unbounded &&
        m->u > r->ncpu * (1.1 * t + spin) + KLA_RUNNER__HANDOFF_CPU_S) {
        snprintf(out->error, sizeof out->error,
                 "timing refused: sample %u claims %.6f s for %u calls, but "
                 "the kernel process used %.6f s of CPU time in it on %d "
                 "CPUs (the sandbox timed it at %.6f s)",
                 run->n + 1, t, m->number, m->u, r->ncpu, m->t_w);
        return false;
    }
    /* The verified first call, by the kernel's account. */
    double floor_s = (run->u_pre - r->ncpu * KLA_RUNNER__SPIN_CPU_S -
                      KLA_RUNNER__HANDOFF_CPU_S) /
                     (KLA_RUNNER__FIRST_CALL_FACTOR * r->ncpu);
    if (per < floor_s) {
        snprintf(out->error, sizeof out->error,
                 "timing refused: sample %u claims %.3g s per call, but the "
                 "kernel process used %.6f s of CPU time in its first, "
                 "verified call (a call cannot be %gx faster than that on %d "
                 "CPUs)",
                 run->n + 1, per, run->u_pre,
                 KLA_RUNNER__FIRST_CALL_FACTOR * r->ncpu, r->ncpu);
        return false;
    }
    return true;
}

static void s_say(int fd, kla_cand_kind kind)
{
    kla_cand_msg_t m = {.magic = KLA_CAND_MAGIC, .kind = (uint32_t)kind};
    kla_runner__cand_send(fd, &m, sizeof m, NULL, 0);
}

/* How the run ended, as a status and error text in out (when nothing
 * else set one). */
static void s_fate(const kla_problem_t *p, bool timed, s_run_t *run,
                   int timeout_ms, kla_result_t *out)
{
    const kla_cand_msg_t *x = &run->exit;
    if (out->status != KILN__STATUS__STATUS_OK || out->error[0])
        return;
    if (!run->exited) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error,
                 "the sandbox ended without a result (killed?)");
        return;
    }
    switch (x->status) {
    case KLA_CE_TIMEOUT:
        out->status = KILN__STATUS__STATUS_TIMEOUT;
        snprintf(out->error, sizeof out->error,
                 "timed out after %d ms (killed)", timeout_ms);
        return;
    case KLA_CE_SIGNALED:
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        if (x->code == SIGXCPU)
            snprintf(out->error, sizeof out->error,
                     "killed by signal %d (SIGXCPU): CPU time limit", x->code);
        else
            snprintf(out->error, sizeof out->error, "killed by signal %u (%s)",
                     x->code, kla_signame((int)x->code));
        return;
    case KLA_CE_PROTOCOL:
    case KLA_CE_FAILED:
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "%s", x->msg);
        return;
    default:
        break;
    }
    if (x->code != 0) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "exited with status %u",
                 x->code);
        return;
    }
    if (!run->called || (timed && (!run->ended || run->n != p->eval.repeat))) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error,
                 "kernel process ended without a result (exit() inside the "
                 "kernel?)");
        return;
    }
}

/* Runs so:entry on e's buffers in the sandbox: the reference run (timed
 * false: one call, its outputs kept) or a candidate's. */
void kla_runner__run(kla_runner_t *r, const kla_problem_t *p,
                     kla_runner__ref_t *e, const char *so, const char *entry,
                     bool timed, kla_result_t *out)
{
    const kla_eval_t *ev = &p->eval;
    /* The reference is the naive kernel, often 10-100x slower than the
     * candidates the timeout is meant for (a naive 1024^3 matmul takes
     * tens of seconds), and it runs once per workload: it gets ten times
     * the candidate's limit, at least 10 minutes, at most a day. */
    uint64_t tmo = ev->timeout_ms;
    if (!timed) {
        tmo = tmo * 10 < 600000u ? 600000u : tmo * 10;
        tmo = tmo > 86400000u ? 86400000u : tmo;
    }
    char err[KL_ERRMSG_LEN];
    int so_fd = kla_jail_sealed_copy(so, "kiln-candidate.so", err);
    if (so_fd < 0) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "%s", err);
        return;
    }
    int flush_fd = timed && ev->flush_cache ? s_flush_fd(r) : -1;
    kla_cand_job_t job = {.magic = KLA_CAND_MAGIC,
                          .n_args = (uint32_t)p->n_args,
                          .timed = timed,
                          .number = ev->number,
                          .repeat = timed ? ev->repeat : 0,
                          .min_repeat_ms = ev->min_repeat_ms,
                          .flush = flush_fd >= 0,
                          .timeout_ms = (uint32_t)tmo,
                          .max_mem_bytes = r->cfg.max_mem_bytes,
                          .flush_n = flush_fd >= 0 ? r->flush_n : 0,
                          .in_bytes = e->in_bytes,
                          .out_bytes = e->out_bytes};
    for (int a = 0; a < p->n_args; a++) {
        job.off[a] = e->off[a];
        job.bytes[a] = p->nelem[a] * kla_runner__esize(p, a);
        job.is_output[a] = p->is_output[a];
        job.is_const[a] = p->is_const[a];
    }
    if (timed && r->cfg.pin)
        for (int i = 0; i < r->pin.n; i++)
            job.pin[r->pin.cpu[i] / 64] |= UINT64_C(1) << (r->pin.cpu[i] % 64);
    snprintf(job.entry, sizeof job.entry, "%s", entry);
    s_poison(p, e);

    int ws[2] = {-1, -1};
    int rc = KL_OK;
    if (r->host >= 0 && waitpid(r->host_pid, NULL, WNOHANG) != 0)
        kla_runner__host_stop(r); /* the sandbox died since the last run */
    if (r->host < 0)
        rc = s_host_start(r, err);
    if (rc == KL_OK &&
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ws) != 0)
        rc = kl_seterr(err, KL_ERR_IO, "socketpair: %s", strerror(errno));
    if (rc == KL_OK) {
        int fds[KLA_CAND_NFDS] = {so_fd, e->in_fd, e->out_fd,
                                  flush_fd >= 0 ? flush_fd : so_fd, ws[1]};
        if (kla_runner__cand_send(r->host, &job, sizeof job, fds,
                                  KLA_CAND_NFDS)) {
            /* A host that died just now: once more with a fresh one. */
            kla_runner__host_stop(r);
            rc = s_host_start(r, err);
            if (rc == KL_OK && kla_runner__cand_send(r->host, &job, sizeof job,
                                                     fds, KLA_CAND_NFDS))
                rc = kl_seterr(err, KL_ERR_IO,
                               "cannot hand the candidate to the sandbox");
        }
    }
    close(so_fd);
    if (ws[1] >= 0)
        close(ws[1]);
    if (rc != KL_OK) {
        if (ws[0] >= 0)
            close(ws[0]);
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "sandbox: %s", err);
        return;
    }

    s_run_t run = {0};
    if (timed)
        run.samples = kl_xcalloc(ev->repeat ? ev->repeat : 1, sizeof(double));
    double t0 = kl_now_s();
    double deadline = t0 + tmo / 1000.0 + 5.0;
    bool stopped = false;
    for (;;) {
        double left = deadline - kl_now_s();
        struct pollfd pf = {.fd = ws[0], .events = POLLIN};
        int prc = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (prc < 0 && errno == EINTR)
            continue;
        if (prc == 0) { /* the warden did not keep its own deadline */
            kla_runner__host_stop(r);
            run.exited = true;
            run.exit.status = KLA_CE_TIMEOUT;
            break;
        }
        kla_cand_msg_t m;
        if (kla_runner__cand_recv(ws[0], &m, sizeof m, NULL, 0) != 0 ||
            m.magic != KLA_CAND_MAGIC)
            break; /* the warden is gone: killed, or the sandbox was */
        m.msg[sizeof m.msg - 1] = '\0';
        s_clean(m.msg);
        if (m.kind == KLA_CM_EXIT) {
            run.exited = true;
            run.exit = m;
            break;
        }
        if (stopped)
            continue;
        if (m.kind == KLA_CM_CALLED && !run.called) {
            run.called = true;
            run.u_pre = m.u;
            if (m.status != KLA_CS_OK) {
                out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
                snprintf(out->error, sizeof out->error, "%s", m.msg);
                stopped = true;
                continue;
            }
            run.called_ok = true;
            if (timed && !ev->skip_verify && !s_verify(p, e, "", out)) {
                s_say(ws[0], KLA_CM_STOP);
                stopped = true;
                continue;
            }
            if (!timed) /* the reference: its outputs are what we keep */
                for (int a = 0; a < p->n_args; a++)
                    if (p->is_output[a])
                        memcpy(e->buf[a], e->out_map + e->off[a],
                               p->nelem[a] * kla_runner__esize(p, a));
            s_say(ws[0], KLA_CM_GO);
        } else if (m.kind == KLA_CM_SAMPLE && timed && run.called_ok &&
                   run.n < ev->repeat) {
            if (!s_check_sample(r, &run, &m, out)) {
                out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
                s_say(ws[0], KLA_CM_STOP);
                stopped = true;
                continue;
            }
            run.number = m.number;
            run.samples[run.n++] = m.t_c / m.number;
        } else if (m.kind == KLA_CM_END && run.called_ok) {
            run.ended = true;
        } else {
            out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
            snprintf(out->error, sizeof out->error,
                     "the sandbox sent message %u out of turn", m.kind);
            s_say(ws[0], KLA_CM_STOP);
            stopped = true;
        }
    }
    close(ws[0]);
    out->run_s =
        run.exited && run.exit.wall > 0 ? run.exit.wall : kl_now_s() - t0;
    s_fate(p, timed, &run, (int)tmo, out);
    if (out->status == KILN__STATUS__STATUS_OK && timed && !out->error[0]) {
        char when[96];
        snprintf(when, sizeof when,
                 "check after timing (output of the last of %u timed calls; "
                 "the first call's was right): ",
                 run.n * run.number);
        if (ev->skip_verify || s_verify(p, e, when, out)) {
            out->samples = run.samples;
            run.samples = NULL;
            out->n_samples = run.n;
            out->number = run.number;
            out->status = KILN__STATUS__STATUS_OK;
            kla_result_stats(out);
        }
    }
    free(run.samples);
}
