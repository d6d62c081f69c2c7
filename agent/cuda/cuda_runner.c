/* cuda_runner.c - the agent's side of a GPU: starts the worker process
 * in its sandbox, hands it one candidate at a time (the cubins as sealed
 * memfds), enforces the timeout, and restarts the worker after it dies
 * (poisoned context, crash, kill). */
#include "kla_cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"
#include "kla_cuda_wire.h"
#include "kla_jail.h"
#include "kla_sandbox.h"

#define S_MAX_DIRS 8

struct kla_cuda_runner_s {
    kla_cuda_dev_t dev;
    char worker_path[PATH_MAX];
    char dirs[S_MAX_DIRS][PATH_MAX]; /* library directories bound in */
    int n_dirs;
    double setup_s;
    pid_t pid;
    int fd;
    _Atomic pid_t running;
    _Atomic unsigned starts;
};

static void s_find_dirs(kla_cuda_runner_t *r);

int kla_cuda_runner_new(kla_cuda_runner_t **out,
                        const kla_cuda_runner_config_t *cfg, char *err)
{
    *out = NULL;
    kla_cuda_runner_t *r = kl_xcalloc(1, sizeof *r);
    r->dev = *cfg->dev;
    r->setup_s = cfg->setup_s > 0 ? cfg->setup_s : 120;
    r->fd = -1;
    if (cfg->worker_path && *cfg->worker_path) {
        snprintf(r->worker_path, sizeof r->worker_path, "%s", cfg->worker_path);
    } else {
        ssize_t n = readlink("/proc/self/exe", r->worker_path,
                             sizeof r->worker_path - 1);
        if (n <= 0) {
            free(r);
            return kl_seterr(err, KL_ERR_IO,
                             "GPU worker: cannot find this executable "
                             "(/proc/self/exe)");
        }
        r->worker_path[n] = '\0';
    }
    if (access(r->worker_path, X_OK) != 0) {
        int e = errno;
        kl_seterr(err, KL_ERR_IO, "GPU worker %s: %s", r->worker_path,
                  strerror(e));
        free(r);
        return KL_ERR_IO;
    }
    s_find_dirs(r);
    atomic_init(&r->running, 0);
    atomic_init(&r->starts, 0);
    *out = r;
    return KL_OK;
}

/* Kills the worker's process group and reaps it; says how it ended. */
static void s_stop(kla_cuda_runner_t *r, char *how, size_t n)
{
    if (r->pid <= 0)
        return;
    int st = 0;
    kill(-r->pid, SIGKILL);
    kill(r->pid, SIGKILL);
    while (waitpid(r->pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (how && WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)
        snprintf(how, n, "killed by signal %d (%s)", WTERMSIG(st),
                 kla_signame(WTERMSIG(st)));
    else if (how && WIFEXITED(st))
        snprintf(how, n, "exited with status %d", WEXITSTATUS(st));
    else if (how)
        snprintf(how, n, "killed");
    atomic_store(&r->running, 0);
    r->pid = 0;
    close(r->fd);
    r->fd = -1;
}

void kla_cuda_runner_destroy(kla_cuda_runner_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    s_stop(*self_p, NULL, 0);
    free(*self_p);
    *self_p = NULL;
}

void kla_cuda_runner_abort(kla_cuda_runner_t *r)
{
    pid_t p = atomic_load(&r->running);
    if (p > 0) {
        kill(-p, SIGKILL);
        kill(p, SIGKILL);
    }
}

pid_t kla_cuda_runner_pid(kla_cuda_runner_t *r)
{
    return atomic_load(&r->running);
}

unsigned kla_cuda_runner_starts(kla_cuda_runner_t *r)
{
    return atomic_load(&r->starts);
}

/* Reads exactly n bytes before deadline (kl_now_s). 0, or -1 on end of
 * file / error (*timed_out false) or at the deadline (*timed_out true). */
static int s_read(int fd, void *buf, size_t n, double deadline, bool *timed_out)
{
    *timed_out = false;
    size_t got = 0;
    while (got < n) {
        double left = deadline - kl_now_s();
        if (left <= 0) {
            *timed_out = true;
            return -1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return -1;
        if (pr == 0)
            continue;
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Writes all of buf; a worker that is gone is an error, not SIGPIPE. */
static int s_write(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

/* ---- the sandbox ------------------------------------------------------ */

/* Adds dir (a directory of the driver's or NVRTC's libraries) to the
 * runner's binds when the sandbox does not see it already; "/" never. */
static void s_add_dir(kla_cuda_runner_t *r, const char *dir)
{
    char real[PATH_MAX];
    if (!dir || dir[0] != '/' || !realpath(dir, real) || !strcmp(real, "/") ||
        kla_jail_sees(real))
        return;
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    for (int i = 0; i < r->n_dirs; i++)
        if (!strcmp(r->dirs[i], real))
            return;
    if (r->n_dirs < S_MAX_DIRS)
        snprintf(r->dirs[r->n_dirs++], PATH_MAX, "%s", real);
}

/* Adds the directory of the file at path. */
static void s_add_dir_of(kla_cuda_runner_t *r, const char *path)
{
    char real[PATH_MAX];
    if (!path || path[0] != '/' || !realpath(path, real))
        return;
    char *slash = strrchr(real, '/');
    if (slash && slash != real) {
        *slash = '\0';
        s_add_dir(r, real);
    }
}

static int s_loaded_lib(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    if (base &&
        (!strncmp(base, "/libnvrtc", 9) || !strncmp(base, "/libcuda", 8) ||
         !strncmp(base, "/libnvidia", 10)))
        s_add_dir_of(arg, name);
    return 0;
}

/* The library directories a sandboxed worker needs beyond the system the
 * sandbox sees (kla_jail_sees): those of KILN_LIBCUDA and KILN_NVRTC, of
 * LD_LIBRARY_PATH, and where the libcuda and libnvrtc this process loads
 * lie. */
static void s_find_dirs(kla_cuda_runner_t *r)
{
    s_add_dir_of(r, getenv("KILN_LIBCUDA"));
    s_add_dir_of(r, getenv("KILN_NVRTC"));
    const char *lp = getenv("LD_LIBRARY_PATH");
    char *copy = kl_xstrdup(lp ? lp : "");
    for (char *save = NULL, *d = strtok_r(copy, ":", &save); d;
         d = strtok_r(NULL, ":", &save))
        s_add_dir(r, d);
    free(copy);
    if (r->dev.fake)
        return;
    const char *lc = getenv("KILN_LIBCUDA");
    void *dl = dlopen(lc && *lc ? lc : "libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    struct link_map *lm = NULL;
    if (dl && dlinfo(dl, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        s_add_dir_of(r, lm->l_name);
    if (dl)
        dlclose(dl);
    dl_iterate_phdr(s_loaded_lib, r); /* NVRTC, loaded by the builder */
}

/* Whether the environment variable name (of len bytes) goes into the
 * sandbox (--clearenv empties it): what the driver, NVRTC and the dynamic
 * loader read, the test stand-in, logging and the sanitizers' options. */
static bool s_keep_env(const kla_cuda_runner_t *r, const char *name, size_t len)
{
    static const char *const exact[] = {
        "LD_LIBRARY_PATH",      "KILN_LIBCUDA", "KILN_NVRTC",
        "KILN_FAKE_GPU_WORKER", "KILN_LOG",     "ASAN_OPTIONS",
        "UBSAN_OPTIONS",        "LSAN_OPTIONS"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strlen(exact[i]) == len && !strncmp(name, exact[i], len))
            return true;
    /* CUDA_VISIBLE_DEVICES names GPUs by the host's enumeration; inside,
     * where only this GPU's node exists, the worker finds its GPU by PCI
     * address (KILN_GPU_PCI_BUS_ID) and the indices would name none. */
    if (len == 20 && !strncmp(name, "CUDA_VISIBLE_DEVICES", 20))
        return !r->dev.pci_bus_id[0];
    return (len > 5 && !strncmp(name, "CUDA_", 5)) ||
           (len > 7 && !strncmp(name, "NVIDIA_", 7));
}

/* The command line of a worker: bwrap and its options, or (unsafe) the
 * worker itself. */
static void s_argv(const kla_cuda_runner_t *r, bool unsafe, kla_argv_t *a)
{
    char ord[16];
    snprintf(ord, sizeof ord, "%d", r->dev.ordinal);
    if (unsafe) {
        kla_argv_add(a, r->worker_path);
        kla_argv_add(a, "--gpu-worker");
        kla_argv_add(a, ord);
        return;
    }
    kla_jail_base(a);
    /* The worker is pid 1 itself: no bubblewrap reaper, a dumpable
     * process that could be opened from inside. */
    kla_argv_add(a, "--as-pid-1");
    char nodes[8][64];
    int nn = kla_cuda_dev_nodes(&r->dev, NULL, nodes, 8);
    for (int i = 0; i < nn; i++) {
        kla_argv_add(a, "--dev-bind");
        kla_argv_add(a, nodes[i]);
        kla_argv_add(a, nodes[i]);
    }
    if (!r->dev.fake) {
        /* The driver reads the GPU's PCI and NUMA facts from sysfs. */
        static const char *const sys[] = {"/sys/bus/pci", "/sys/devices"};
        for (size_t i = 0; i < sizeof sys / sizeof *sys; i++)
            if (access(sys[i], F_OK) == 0)
                kla_jail_bind(a, sys[i], sys[i], false);
    }
    for (int i = 0; i < r->n_dirs; i++)
        kla_jail_bind(a, r->dirs[i], r->dirs[i], false);
    extern char **environ;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || !s_keep_env(r, *e, (size_t)(eq - *e)))
            continue;
        char *name = kl_xstrndup(*e, (size_t)(eq - *e));
        kla_argv_add(a, "--setenv");
        kla_argv_add(a, name);
        kla_argv_add(a, eq + 1);
        free(name);
    }
    if (r->dev.pci_bus_id[0]) {
        kla_argv_add(a, "--setenv");
        kla_argv_add(a, "KILN_GPU_PCI_BUS_ID");
        kla_argv_add(a, r->dev.pci_bus_id);
    }
    /* By descriptor: a root agent's worker is uid 65534, which may not
     * reach the build tree or the install's directory. */
    kla_argv_add(a, "--perms");
    kla_argv_add(a, "0555");
    kla_argv_add(a, "--file");
    kla_argv_add(a, "4");
    kla_argv_add(a, "/kiln-gpu-worker");
    kla_argv_add(a, "--");
    kla_argv_add(a, "/kiln-gpu-worker");
    kla_argv_add(a, "--gpu-worker");
    kla_argv_add(a, ord);
}

/* The child's side of the fork: the socket at fd 3, the worker's
 * executable (sandboxed) at fd 4, nothing else (kla_jail_exec). */
static void s_child_exec(char *const *argv, int sock, int exe, bool unsafe)
{
    int fds[2] = {sock, exe};
    kla_jail_exec(fds, exe >= 0 ? 2 : 1, argv, NULL, unsafe);
}

/* Starts a worker and waits for its hello. */
static int s_start(kla_cuda_runner_t *r, char *msg, size_t n)
{
    bool unsafe = kla_jail_unsafe();
    char err[KL_ERRMSG_LEN];
    if (!unsafe && kla_jail_probe(err) != KL_OK) {
        snprintf(msg, n, "GPU worker for cuda:%d: no sandbox: %.900s",
                 r->dev.ordinal, err);
        return KL_ERR_UNSUPPORTED;
    }
    int exe = -1;
    if (!unsafe && (exe = open(r->worker_path, O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(msg, n, "GPU worker %.1000s: %s", r->worker_path,
                 strerror(errno));
        return KL_ERR_IO;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(msg, n, "GPU worker: socketpair: %s", strerror(errno));
        if (exe >= 0)
            close(exe);
        return KL_ERR_IO;
    }
    kla_argv_t a = {0};
    s_argv(r, unsafe, &a);
    pid_t pid = fork();
    if (pid == 0)
        s_child_exec(a.v, sv[1], exe, unsafe);
    int fork_errno = errno;
    kla_argv_free(&a);
    close(sv[1]);
    if (exe >= 0)
        close(exe);
    if (pid < 0) {
        snprintf(msg, n, "GPU worker: fork: %s", strerror(fork_errno));
        close(sv[0]);
        return KL_ERR_IO;
    }
    setpgid(pid, pid);
    r->pid = pid;
    r->fd = sv[0];
    atomic_store(&r->running, pid);
    atomic_fetch_add(&r->starts, 1);
    kla_cw_hello_t h;
    memset(&h, 0, sizeof h);
    bool to;
    if (s_read(r->fd, &h, sizeof h, kl_now_s() + r->setup_s, &to) != 0 ||
        h.magic != KLA_CW_MAGIC || h.status != KILN__STATUS__STATUS_OK) {
        char how[128] = "";
        s_stop(r, how, sizeof how);
        h.msg[sizeof h.msg - 1] = '\0';
        snprintf(msg, n, "GPU worker %.1000s for cuda:%d %s: %s",
                 r->worker_path, r->dev.ordinal,
                 to ? "did not start in time" : "could not start", how);
        if (!to && h.magic == KLA_CW_MAGIC)
            snprintf(msg, n, "GPU worker for cuda:%d: %s", r->dev.ordinal,
                     h.msg);
        return KL_ERR_RUNTIME;
    }
    return KL_OK;
}

static void s_fill_req(const kla_problem_t *p, const char *ref_cubin,
                       const char *ref_entry, const char *entry,
                       const kla_cuda_launch_t *l, kla_cw_req_t *q)
{
    memset(q, 0, sizeof *q);
    q->magic = KLA_CW_MAGIC;
    q->n_args = (uint32_t)p->n_args;
    for (int a = 0; a < p->n_args; a++) {
        q->nelem[a] = p->nelem[a];
        q->is_output[a] = p->is_output[a];
        q->dtype[a] = (uint8_t)p->dtype[a];
    }
    const kla_eval_t *e = &p->eval;
    q->number = e->number;
    q->repeat = e->repeat;
    q->min_repeat_ms = e->min_repeat_ms;
    q->flush = e->flush_cache;
    q->skip_verify = e->skip_verify;
    q->rtol = e->rtol;
    q->atol = e->atol;
    q->seed = e->seed;
    memcpy(q->grid, l->grid, sizeof q->grid);
    memcpy(q->block, l->block, sizeof q->block);
    q->shared_bytes = l->shared_bytes;
    snprintf(q->entry, sizeof q->entry, "%s", entry);
    snprintf(q->ref_entry, sizeof q->ref_entry, "%s", ref_entry);
    /* The reference's identity on the device: workload, seed, shapes,
     * reference build. */
    kl_buf_t b = {0};
    kl_buf_append(&b, (const char *)p->workload_key, 16);
    kl_buf_printf(&b, "|%llu|%d|", (unsigned long long)e->seed, p->n_args);
    for (int i = 0; i < p->n_args; i++)
        kl_buf_printf(&b, "%zu%c%d,", p->nelem[i], p->is_output[i] ? 'o' : 'i',
                      (int)p->dtype[i]);
    kl_buf_printf(&b, "|%s|%s", ref_cubin, ref_entry);
    kl_hash128(b.data, b.len, q->ref_key);
    kl_buf_free(&b);
}

/* A sealed memfd copy of the cubin at path (kla_jail_sealed_copy): what
 * the worker reads, whatever happens to the file, with no way back to the
 * workdir. -1 with msg. */
static int s_cubin_fd(const char *path, char *msg, size_t n)
{
    char err[KL_ERRMSG_LEN];
    int fd = kla_jail_sealed_copy(path, "kiln-cubin", err);
    if (fd < 0)
        snprintf(msg, n, "cubin: %s", err);
    return fd;
}

/* Sends a request with its two cubins (SCM_RIGHTS on the first bytes;
 * the rest of a partial write as plain bytes). */
static int s_send_req(int fd, const kla_cw_req_t *q, const int cubins[2])
{
    struct iovec iov = {.iov_base = (void *)q, .iov_len = sizeof *q};
    union {
        char b[CMSG_SPACE(sizeof(int) * KLA_CW_NFDS)];
        struct cmsghdr align;
    } cb;
    memset(&cb, 0, sizeof cb);
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = cb.b,
                       .msg_controllen = sizeof cb.b};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * KLA_CW_NFDS);
    memcpy(CMSG_DATA(c), cubins, sizeof(int) * KLA_CW_NFDS);
    ssize_t k;
    do
        k = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k <= 0)
        return -1;
    return s_write(fd, (const char *)q + k, sizeof *q - (size_t)k);
}

/* Turns the worker's response into out; false when it makes no sense. */
static bool s_take(kla_cuda_runner_t *r, const kla_cw_res_t *h,
                   const kla_eval_t *e, double deadline, kla_result_t *out)
{
    if (h->magic != KLA_CW_MAGIC || h->status > KILN__STATUS__STATUS_INVALID ||
        (h->status == KILN__STATUS__STATUS_OK &&
         (h->n_samples != e->repeat || h->number < 1)) ||
        (h->status != KILN__STATUS__STATUS_OK && h->n_samples) ||
        !isfinite(h->run_s) || h->run_s < 0)
        return false;
    out->status = (Kiln__Status)h->status;
    out->number = h->number;
    out->max_abs_err = h->max_abs_err;
    out->run_s = h->run_s;
    snprintf(out->error, sizeof out->error, "%.1023s", h->msg);
    if (!h->n_samples)
        return true;
    out->samples = kl_xcalloc(h->n_samples, sizeof(double));
    bool to;
    if (s_read(r->fd, out->samples, h->n_samples * sizeof(double), deadline,
               &to) != 0)
        return false;
    for (uint32_t i = 0; i < h->n_samples; i++)
        if (!isfinite(out->samples[i]) || out->samples[i] < 0)
            return false;
    out->n_samples = h->n_samples;
    kla_result_stats(out);
    return true;
}

/* The worker is gone or useless: end it and say why in out. */
static void s_lost(kla_cuda_runner_t *r, kla_result_t *out, Kiln__Status st,
                   const char *what)
{
    char how[128] = "";
    s_stop(r, how, sizeof how);
    kla_result_clear(out);
    out->status = st;
    snprintf(out->error, sizeof out->error, "%s (GPU worker %s; restarted)",
             what, how);
}

void kla_cuda_runner_measure(kla_cuda_runner_t *r, const kla_problem_t *p,
                             const char *ref_cubin, const char *ref_entry,
                             const char *cubin, const char *entry,
                             const kla_cuda_launch_t *l, kla_result_t *out)
{
    memset(out, 0, sizeof *out);
    int fds[KLA_CW_NFDS] = {-1, -1};
    fds[KLA_CW_FD_CUBIN] = s_cubin_fd(cubin, out->error, sizeof out->error);
    if (fds[KLA_CW_FD_CUBIN] >= 0)
        fds[KLA_CW_FD_REF] =
            s_cubin_fd(ref_cubin, out->error, sizeof out->error);
    if (fds[KLA_CW_FD_REF] < 0 ||
        (r->pid <= 0 && s_start(r, out->error, sizeof out->error) != KL_OK)) {
        for (int i = 0; i < KLA_CW_NFDS; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        return;
    }
    kla_cw_req_t q;
    s_fill_req(p, ref_cubin, ref_entry, entry, l, &q);
    double t0 = kl_now_s();
    int wr = s_send_req(r->fd, &q, fds);
    bool restarted = true;
    if (wr != 0) {
        /* The worker died between candidates (killed from outside): not
         * this candidate's doing; one new worker, one more try. */
        s_stop(r, NULL, 0);
        restarted = s_start(r, out->error, sizeof out->error) == KL_OK;
        if (restarted)
            wr = s_send_req(r->fd, &q, fds);
    }
    for (int i = 0; i < KLA_CW_NFDS; i++)
        close(fds[i]); /* the worker has its own now */
    if (!restarted) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        return;
    }
    if (wr != 0) {
        s_lost(r, out, KILN__STATUS__STATUS_RUNTIME_ERROR,
               "GPU worker gone before the candidate was sent");
        return;
    }
    uint32_t word = 0;
    bool to = false;
    if (s_read(r->fd, &word, sizeof word,
               t0 + r->setup_s + 1e-3 * p->eval.timeout_ms, &to) != 0 ||
        (word != KLA_CW_START && word != KLA_CW_MAGIC)) {
        s_lost(r, out, KILN__STATUS__STATUS_RUNTIME_ERROR,
               to ? "reference kernel failed: no result in time"
                  : "GPU worker died while preparing the reference");
        return;
    }
    double ts = kl_now_s();
    double deadline = ts + 1e-3 * p->eval.timeout_ms;
    kla_cw_res_t h;
    memset(&h, 0, sizeof h);
    /* A response may come without START (the reference failed). */
    size_t off = 0;
    if (word == KLA_CW_MAGIC) {
        h.magic = word;
        off = sizeof word;
    }
    if (s_read(r->fd, (char *)&h + off, sizeof h - off, deadline, &to) != 0) {
        char m[160];
        if (to)
            snprintf(m, sizeof m, "timed out after %u ms", p->eval.timeout_ms);
        else
            snprintf(m, sizeof m, "GPU worker died while running the kernel");
        s_lost(r, out,
               to ? KILN__STATUS__STATUS_TIMEOUT
                  : KILN__STATUS__STATUS_RUNTIME_ERROR,
               m);
        out->run_s = kl_now_s() - ts;
        return;
    }
    h.msg[sizeof h.msg - 1] = '\0';
    if (!s_take(r, &h, &p->eval, deadline + 1, out)) {
        s_lost(r, out, KILN__STATUS__STATUS_RUNTIME_ERROR,
               "GPU worker sent a malformed result");
        return;
    }
    if (h.poisoned) {
        /* The context is lost; the worker is exiting. Keep its message. */
        char how[128] = "";
        s_stop(r, how, sizeof how);
        size_t len = strlen(out->error);
        snprintf(out->error + len, sizeof out->error - len,
                 " (context lost: GPU worker restarted)");
        kl_warn("agent: cuda:%d: %s", r->dev.ordinal, out->error);
    }
}
