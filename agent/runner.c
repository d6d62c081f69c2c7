/* runner.c - the trusted half of the candidate runner: inputs, the
 * reference cache, the sandbox (kla_cand.h), verification and the checks
 * of every timing claim. */
#include "kla_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_eval.h"
#include "kl_log.h"
#include "kl_util.h"
#include "kla_jail.h"
#include "kla_runner_exe.h"
#include "kla_sandbox.h"

#define S_MAX_NUMBER (1u << 30)
#define S_PAGE 4096u

/* A first call may take this many times a warm one (cold caches, page
 * faults of fresh mappings, OpenMP starting its threads): the kernel's CPU
 * account of the verified first call, divided by this and by the CPUs,
 * bounds from below what a sample may claim per call. */
#define S_FIRST_CALL_FACTOR 100.0
/* What OpenMP's idle threads may burn after a parallel region, per CPU
 * (libgomp spins 300,000 rounds, about 6-12 ms, before it sleeps), and
 * the harness's own messages: CPU time no claim has to account for. */
#define S_SPIN_CPU_S 0.025
#define S_HANDOFF_CPU_S 0.002

typedef struct s_ref {
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
    struct s_ref *next; /* most recently used first */
} s_ref_t;

struct kla_runner_s {
    kla_runner_config_t cfg;
    kla_cores_t pin;
    s_ref_t *refs;
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

void kla_eval_defaults(kla_eval_t *e)
{
    *e = (kla_eval_t){.number = KL_EVAL_DEF_NUMBER,
                      .repeat = KL_EVAL_DEF_REPEAT,
                      .min_repeat_ms = KL_EVAL_DEF_MIN_REPEAT_MS,
                      .flush_cache = KL_EVAL_DEF_FLUSH,
                      .timeout_ms = KL_EVAL_DEF_TIMEOUT_MS,
                      .rtol = KL_EVAL_DEF_RTOL,
                      .atol = KL_EVAL_DEF_ATOL};
}

void kla_eval_from_proto(kla_eval_t *e, const Kiln__Evaluator *pe)
{
    kla_eval_defaults(e);
    if (!pe)
        return;
    if (pe->number)
        e->number = pe->number > S_MAX_NUMBER ? S_MAX_NUMBER : pe->number;
    if (pe->repeat)
        e->repeat = pe->repeat > KLA_MAX_REPEAT ? KLA_MAX_REPEAT : pe->repeat;
    if (pe->timeout_ms) /* at most a day: it becomes an int of ms */
        e->timeout_ms = pe->timeout_ms > 86400000u ? 86400000u : pe->timeout_ms;
    e->min_repeat_ms = pe->min_repeat_ms;
    e->flush_cache = pe->flush_cache;
    if ((pe->rtol != 0 || pe->atol != 0) && isfinite(pe->rtol) &&
        isfinite(pe->atol) && pe->rtol >= 0 && pe->atol >= 0) {
        e->rtol = pe->rtol;
        e->atol = pe->atol;
    }
    e->seed = pe->seed;
    e->skip_verify = pe->skip_verify;
}

int kla_problem_from_request(kla_problem_t *p, const Kiln__MeasureRequest *req,
                             uint64_t max_bytes, char *err)
{
    memset(p, 0, sizeof *p);
    if (req->workload_key.len != 16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "workload key has %zu bytes, expected 16",
                         req->workload_key.len);
    memcpy(p->workload_key, req->workload_key.data, 16);
    if (req->n_args < 1 || req->n_args > 64)
        return kl_seterr(err, KL_ERR_INVAL,
                         "request has %zu arguments, expected 1..64",
                         req->n_args);
    uint64_t total = 0;
    int outputs = 0;
    for (size_t i = 0; i < req->n_args; i++) {
        const Kiln__KernelArg *a = req->args[i];
        const char *name = a->name && *a->name ? a->name : "?";
        switch (a->dtype) {
        case KILN__DTYPE__DTYPE_F32:
        case KILN__DTYPE__DTYPE_I32:
            p->esize[i] = 4;
            break;
        case KILN__DTYPE__DTYPE_F16:
        case KILN__DTYPE__DTYPE_BF16:
            p->esize[i] = 2; /* the backend decides (check_request) */
            break;
        case KILN__DTYPE__DTYPE_U8:
        case KILN__DTYPE__DTYPE_S8:
            p->esize[i] = 1;
            break;
        default:
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "argument %zu '%s' has dtype %d: not one this "
                             "agent knows (f32, f16, bf16, u8, s8, s32)",
                             i, name, (int)a->dtype);
        }
        p->dtype[i] = a->dtype;
        p->any_int |= p->esize[i] != 2 && a->dtype != KILN__DTYPE__DTYPE_F32;
        if (a->n_shape < 1 || a->n_shape > 8)
            return kl_seterr(err, KL_ERR_INVAL,
                             "argument %zu '%s' has %zu dimensions, expected "
                             "1..8",
                             i, name, a->n_shape);
        uint64_t n = 1;
        for (size_t d = 0; d < a->n_shape; d++) {
            if (a->shape[d] < 1 || a->shape[d] > (1ll << 32) ||
                n > (UINT64_C(1) << 40) / (uint64_t)a->shape[d])
                return kl_seterr(err, KL_ERR_INVAL,
                                 "argument %zu '%s': dimension %zu is %lld "
                                 "(or the tensor is too large)",
                                 i, name, d, (long long)a->shape[d]);
            n *= (uint64_t)a->shape[d];
        }
        p->nelem[i] = (size_t)n;
        p->is_output[i] = a->role == KILN__ARG_ROLE__ROLE_OUTPUT;
        p->is_const[i] = a->role == KILN__ARG_ROLE__ROLE_CONSTANT;
        outputs += p->is_output[i];
        total += n * p->esize[i];
    }
    p->n_args = (int)req->n_args;
    if (!outputs)
        return kl_seterr(err, KL_ERR_INVAL, "request has no output argument");
    if (max_bytes && total > max_bytes)
        return kl_seterr(err, KL_ERR_INVAL,
                         "arguments need %llu MiB, more than the %llu MiB "
                         "memory limit",
                         (unsigned long long)(total >> 20),
                         (unsigned long long)(max_bytes >> 20));
    kla_eval_from_proto(&p->eval, req->evaluator);
    return KL_OK;
}

void kla_result_clear(kla_result_t *r)
{
    free(r->samples);
    memset(r, 0, sizeof *r);
}

void kla_result_stats(kla_result_t *r)
{
    r->spread = 0;
    if (r->n_samples == 0)
        return;
    double lo = r->samples[0], hi = r->samples[0];
    for (uint32_t i = 1; i < r->n_samples; i++) {
        lo = fmin(lo, r->samples[i]);
        hi = fmax(hi, r->samples[i]);
    }
    double med = kl_median(r->samples, r->n_samples);
    r->spread = med > 0 ? (hi - lo) / med : 0;
}

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

static void s_host_stop(kla_runner_t *r)
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
    kla_argv_t a = {0};
    if (unsafe) {
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
        setpgid(0, 0);
        if (dup2(sv[1], 3) != 3 || dup2(exe, 4) != 4)
            _exit(126);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        syscall(SYS_close_range, 5u, ~0u, 0u);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (!unsafe && kla_jail_drop_root() != 0)
            _exit(126);
        execvp(a.v[0], a.v);
        _exit(127);
    }
    kla_argv_free(&a);
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

/* ---- memory the agent owns --------------------------------------------- */

static int s_memfd(const char *name, uint64_t bytes)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)(bytes ? bytes : S_PAGE)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* No process may resize fd again (a shrunk mapping would fault the
 * agent), nor change the seals; write too when writes is false. */
static void s_seal(int fd, bool writes)
{
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (!writes)
        seals |= F_SEAL_WRITE;
    fcntl(fd, F_ADD_SEALS, seals);
}

/* A sealed copy of the shared object at path: what the sandbox opens,
 * whatever happens to the file afterwards. -1 with err. */
static int s_so_memfd(const char *path, char *err)
{
    char *data = NULL;
    size_t len = 0;
    char e2[KL_ERRMSG_LEN];
    if (kl_read_file(path, &data, &len, e2) != KL_OK) {
        snprintf(err, KL_ERRMSG_LEN, "%s", e2);
        return -1;
    }
    int fd = memfd_create("kiln-candidate.so", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    bool ok = fd >= 0;
    for (size_t done = 0; ok && done < len;) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        done += ok ? (size_t)w : 0;
    }
    free(data);
    if (!ok) {
        snprintf(err, KL_ERRMSG_LEN, "memfd for %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    s_seal(fd, false);
    return fd;
}

static int s_flush_fd(kla_runner_t *r)
{
    if (r->flush_fd >= 0 || !r->flush_n)
        return r->flush_fd;
    int fd = s_memfd("kiln-flush", r->flush_n);
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
    s_seal(fd, true);
    r->flush_fd = fd;
    return fd;
}

int kla_runner_new(kla_runner_t **out, const kla_runner_config_t *cfg,
                   char *err)
{
    (void)err;
    kla_runner_t *r = kl_xcalloc(1, sizeof *r);
    r->cfg = *cfg;
    if (cfg->pin) {
        r->pin = *cfg->pin;
        r->cfg.pin = &r->pin;
    }
    if (!r->cfg.cache_bytes)
        r->cfg.cache_bytes = (size_t)1 << 30;
    if (!r->cfg.llc_bytes)
        r->cfg.llc_bytes = 32u << 20;
    /* Writing 2x the LLC evicts the candidate's data between samples. A
     * virtual machine often reports the whole host's L3 (260 MiB here),
     * and writing 520 MiB per sample costs more than most candidates run;
     * so the default is capped at KLA_FLUSH_CAP_BYTES. 64 MiB was not
     * enough here: after writing 64 MiB, reading 10 MiB took 380-410 us,
     * as without a flush (365), and 630-680 us after 128 or 192 MiB, so a
     * 10 MiB Winograd block was timed warm by a "flushed" sample. 128 MiB
     * costs about 5 ms a sample. --flush-mb sets any size. */
    r->flush_n = r->cfg.flush_bytes ? (size_t)r->cfg.flush_bytes
                                    : (size_t)(2 * r->cfg.llc_bytes);
    if (!r->cfg.flush_bytes && r->flush_n > KLA_FLUSH_CAP_BYTES)
        r->flush_n = KLA_FLUSH_CAP_BYTES;
    r->flush_n = (r->flush_n + S_PAGE - 1) / S_PAGE * S_PAGE;
    r->host = -1;
    r->flush_fd = -1;
    kla_cores_t mine;
    kla_cores_affinity(&mine);
    r->ncpu = r->cfg.pin && r->pin.n > 0 ? r->pin.n : mine.n;
    const char *wp = getenv("OMP_WAIT_POLICY");
    r->spin_unbounded =
        getenv("GOMP_SPINCOUNT") || (wp && strcasecmp(wp, "active") == 0);
    if (r->ncpu < 1)
        r->ncpu = 1;
    atomic_init(&r->running, 0);
    *out = r;
    return KL_OK;
}

static void s_ref_free(s_ref_t *e)
{
    for (int i = 0; i < 64; i++)
        free(e->buf[i]);
    if (e->out_map)
        munmap(e->out_map, e->out_bytes ? e->out_bytes : S_PAGE);
    if (e->in_fd >= 0)
        close(e->in_fd);
    if (e->out_fd >= 0)
        close(e->out_fd);
    free(e->error);
    free(e);
}

void kla_runner_destroy(kla_runner_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_runner_t *r = *self_p;
    s_host_stop(r);
    for (s_ref_t *e = r->refs, *next; e; e = next) {
        next = e->next;
        s_ref_free(e);
    }
    if (r->flush_fd >= 0)
        close(r->flush_fd);
    free(r);
    *self_p = NULL;
}

unsigned kla_runner_reference_runs(kla_runner_t *r)
{
    return r->ref_runs;
}

void kla_runner_abort(kla_runner_t *r)
{
    kla_sandbox_kill(&r->running);
}

/* ---- verification (in the agent, on its own mapping) -------------------- */

/* Bytes per element of argument a (a problem made by hand, with esize
 * left 0, is f32). */
static size_t s_esize(const kla_problem_t *p, int a)
{
    return p->esize[a] ? p->esize[a] : sizeof(float);
}

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
static bool s_verify(const kla_problem_t *p, const s_ref_t *ref,
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
static void s_poison(const kla_problem_t *p, s_ref_t *e)
{
    for (int a = 0; a < p->n_args; a++) {
        if (!p->is_output[a])
            continue;
        void *o = e->out_map + e->off[a];
        if (p->dtype[a] == KILN__DTYPE__DTYPE_F32)
            for (size_t i = 0; i < p->nelem[a]; i++)
                ((float *)o)[i] = NAN;
        else
            memset(o, 0xa5, p->nelem[a] * s_esize(p, a));
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
    if (!isfinite(t) || t < 0 || m->number < 1 || m->number > S_MAX_NUMBER ||
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
     * may spin away in the rest of the sample (at most S_SPIN_CPU_S per
     * CPU, and never more than the unclaimed wall time), plus the
     * handoff. Under it, a claim the machine's own clocks bear out. */
    double rest = m->t_w - t;
    double spin = rest < S_SPIN_CPU_S ? rest : S_SPIN_CPU_S;
    if (!r->spin_unbounded &&
        m->u > r->ncpu * (1.1 * t + spin) + S_HANDOFF_CPU_S) {
        snprintf(out->error, sizeof out->error,
                 "timing refused: sample %u claims %.6f s for %u calls, but "
                 "the kernel process used %.6f s of CPU time in it on %d "
                 "CPUs (the sandbox timed it at %.6f s)",
                 run->n + 1, t, m->number, m->u, r->ncpu, m->t_w);
        return false;
    }
    /* The verified first call, by the kernel's account. */
    double floor_s = (run->u_pre - r->ncpu * S_SPIN_CPU_S - S_HANDOFF_CPU_S) /
                     (S_FIRST_CALL_FACTOR * r->ncpu);
    if (per < floor_s) {
        snprintf(out->error, sizeof out->error,
                 "timing refused: sample %u claims %.3g s per call, but the "
                 "kernel process used %.6f s of CPU time in its first, "
                 "verified call (a call cannot be %gx faster than that on %d "
                 "CPUs)",
                 run->n + 1, per, run->u_pre, S_FIRST_CALL_FACTOR * r->ncpu,
                 r->ncpu);
        return false;
    }
    return true;
}

static void s_say(int fd, kla_cand_kind kind)
{
    kla_cand_msg_t m = {.magic = KLA_CAND_MAGIC, .kind = (uint32_t)kind};
    kla_cand_send(fd, &m, sizeof m, NULL, 0);
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
static void s_run(kla_runner_t *r, const kla_problem_t *p, s_ref_t *e,
                  const char *so, const char *entry, bool timed,
                  kla_result_t *out)
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
    int so_fd = s_so_memfd(so, err);
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
        job.bytes[a] = p->nelem[a] * s_esize(p, a);
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
        s_host_stop(r); /* the sandbox died since the last run */
    if (r->host < 0)
        rc = s_host_start(r, err);
    if (rc == KL_OK &&
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ws) != 0)
        rc = kl_seterr(err, KL_ERR_IO, "socketpair: %s", strerror(errno));
    if (rc == KL_OK) {
        int fds[KLA_CAND_NFDS] = {so_fd, e->in_fd, e->out_fd,
                                  flush_fd >= 0 ? flush_fd : so_fd, ws[1]};
        if (kla_cand_send(r->host, &job, sizeof job, fds, KLA_CAND_NFDS)) {
            /* A host that died just now: once more with a fresh one. */
            s_host_stop(r);
            rc = s_host_start(r, err);
            if (rc == KL_OK &&
                kla_cand_send(r->host, &job, sizeof job, fds, KLA_CAND_NFDS))
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
            s_host_stop(r);
            run.exited = true;
            run.exit.status = KLA_CE_TIMEOUT;
            break;
        }
        kla_cand_msg_t m;
        if (kla_cand_recv(ws[0], &m, sizeof m, NULL, 0) != 0 ||
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
                               p->nelem[a] * s_esize(p, a));
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

/* ---- the reference cache ------------------------------------------------ */

static void s_ref_key(const kla_problem_t *p, const char *ref_so,
                      const char *ref_entry, uint8_t key[16])
{
    kl_buf_t b = {0};
    kl_buf_append(&b, (const char *)p->workload_key, 16);
    kl_buf_printf(&b, "|%llu|%d|", (unsigned long long)p->eval.seed, p->n_args);
    for (int i = 0; i < p->n_args; i++)
        kl_buf_printf(&b, "%zu%c%d,", p->nelem[i], p->is_output[i] ? 'o' : 'i',
                      (int)p->dtype[i]);
    kl_buf_printf(&b, "|%s|%s", ref_so, ref_entry);
    kl_hash128(b.data, b.len, key);
    kl_buf_free(&b);
}

/* Lays the arguments out (page-aligned, inputs and outputs in a buffer
 * each), makes the buffers and fills the inputs. false with e->error. */
static bool s_ref_buffers(const kla_problem_t *p, s_ref_t *e)
{
    for (int a = 0; a < p->n_args; a++) {
        uint64_t n = p->nelem[a] * s_esize(p, a);
        uint64_t *at = p->is_output[a] ? &e->out_bytes : &e->in_bytes;
        e->off[a] = *at;
        *at += (n + S_PAGE - 1) / S_PAGE * S_PAGE;
        e->bytes += n;
        if (p->is_output[a])
            e->buf[a] = kl_xmalloc(n + 64);
    }
    e->in_fd = s_memfd("kiln-inputs", e->in_bytes);
    e->out_fd = s_memfd("kiln-outputs", e->out_bytes);
    size_t in_map = e->in_bytes ? e->in_bytes : S_PAGE;
    char *in = e->in_fd >= 0 ? mmap(NULL, in_map, PROT_READ | PROT_WRITE,
                                    MAP_SHARED, e->in_fd, 0)
                             : MAP_FAILED;
    void *om = e->out_fd >= 0
                   ? mmap(NULL, e->out_bytes ? e->out_bytes : S_PAGE,
                          PROT_READ | PROT_WRITE, MAP_SHARED, e->out_fd, 0)
                   : MAP_FAILED;
    e->out_map = om == MAP_FAILED ? NULL : om;
    if (in == MAP_FAILED || !e->out_map) {
        e->error =
            kl_xasprintf("cannot make buffers of %llu + %llu bytes: %s",
                         (unsigned long long)e->in_bytes,
                         (unsigned long long)e->out_bytes, strerror(errno));
        if (in != MAP_FAILED)
            munmap(in, in_map);
        return false;
    }
    for (int a = 0; a < p->n_args; a++) {
        if (p->is_output[a])
            continue;
        uint64_t seed_idx[2] = {p->eval.seed, (uint64_t)a};
        kl_rng_t rng;
        kl_rng_seed(&rng, kl_hash64(seed_idx, sizeof seed_idx));
        void *b = in + e->off[a];
        for (size_t i = 0; i < p->nelem[a]; i++) {
            double u = kl_rng_double(&rng);
            switch (p->dtype[a]) {
            case KILN__DTYPE__DTYPE_U8:
                ((uint8_t *)b)[i] = (uint8_t)(u * 256);
                break;
            case KILN__DTYPE__DTYPE_S8:
                ((int8_t *)b)[i] = (int8_t)((int)(u * 256) - 128);
                break;
            case KILN__DTYPE__DTYPE_I32:
                ((int32_t *)b)[i] = (int32_t)(u * 2001) - 1000;
                break;
            default: /* with integers about, f32 inputs are scales */
                ((float *)b)[i] = p->any_int ? (float)(1e-3 + 9e-3 * u)
                                             : (float)(2.0 * u - 1.0);
                break;
            }
        }
    }
    /* No writable mapping may remain for the write seal. */
    munmap(in, in_map);
    s_seal(e->in_fd, false);
    s_seal(e->out_fd, true);
    return true;
}

/* Runs the reference once (in the sandbox, like any candidate: it is
 * the tenant's code too) and keeps its outputs in the agent's memory. */
static void s_ref_run(kla_runner_t *r, const kla_problem_t *p, s_ref_t *e,
                      const char *ref_so, const char *ref_entry)
{
    kla_result_t res = {0};
    r->ref_runs++;
    s_run(r, p, e, ref_so, ref_entry, false, &res);
    if (res.status != KILN__STATUS__STATUS_OK) {
        e->failed = true;
        e->error = kl_xstrdup(res.error);
        kla_result_clear(&res);
        return;
    }
    kla_result_clear(&res);
    for (int a = 0; a < p->n_args && !e->failed; a++) {
        if (!p->is_output[a] || p->dtype[a] != KILN__DTYPE__DTYPE_F32)
            continue; /* integers are compared exactly: no rms, no NaN */
        const float *rb = e->buf[a];
        double ss = 0;
        for (size_t i = 0; i < p->nelem[a]; i++) {
            if (isnan(rb[i])) {
                e->failed = true;
                e->error = kl_xasprintf("its output %d element %zu is NaN "
                                        "(not written?)",
                                        a, i);
                break;
            }
            ss += (double)rb[i] * rb[i];
        }
        e->rms[a] = p->nelem[a] ? sqrt(ss / (double)p->nelem[a]) : 0;
    }
}

/* Finds or makes the cache entry for p (most recently used first). */
static s_ref_t *s_reference(kla_runner_t *r, const kla_problem_t *p,
                            const char *ref_so, const char *ref_entry)
{
    uint8_t key[16];
    s_ref_key(p, ref_so, ref_entry, key);
    for (s_ref_t **pp = &r->refs; *pp; pp = &(*pp)->next)
        if (memcmp((*pp)->key, key, 16) == 0) {
            s_ref_t *e = *pp;
            *pp = e->next;
            e->next = r->refs;
            r->refs = e;
            return e;
        }
    s_ref_t *e = kl_xcalloc(1, sizeof *e);
    e->in_fd = e->out_fd = -1;
    memcpy(e->key, key, 16);
    if (!s_ref_buffers(p, e))
        e->failed = true;
    else
        s_ref_run(r, p, e, ref_so, ref_entry);
    e->next = r->refs;
    r->refs = e;
    r->ref_bytes += e->bytes;
    /* Evict the least recently used beyond the bound (never the new one). */
    while (r->ref_bytes > r->cfg.cache_bytes && r->refs->next) {
        s_ref_t **last = &r->refs;
        while ((*last)->next)
            last = &(*last)->next;
        r->ref_bytes -= (*last)->bytes;
        s_ref_free(*last);
        *last = NULL;
    }
    return e;
}

void kla_runner_measure(kla_runner_t *r, const kla_problem_t *p,
                        const char *ref_so, const char *ref_entry,
                        const char *so, const char *entry, kla_result_t *out)
{
    memset(out, 0, sizeof *out);
    s_ref_t *ref = s_reference(r, p, ref_so, ref_entry);
    if (ref->failed) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "reference kernel failed: %s",
                 ref->error);
        return;
    }
    if (r->cfg.gate)
        kla_gate_pause(r->cfg.gate);
    s_run(r, p, ref, so, entry, true, out);
    if (r->cfg.gate)
        kla_gate_resume(r->cfg.gate);
}
