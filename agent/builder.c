/* builder.c - compile cache and build gate of kiln-agent.
 *
 * Locks, not actors, here: the gate must stop compilers synchronously
 * before the runner forks a timed child (a message round trip through the
 * actor would put the builder threads' scheduling on the timing path), and
 * builder threads sit inside blocking compiles where they cannot read a
 * socket. The mutexes guard small tables only and are never held across a
 * compile or a fork.
 */
#include "kla_builder.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"

/* ---- gate ------------------------------------------------------------ */

struct kla_gate_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool closed, aborted;
    double closed_total, closed_since;
    pid_t *groups; /* process groups of running compilers */
    int n, cap;
};

void kla_gate_new(kla_gate_t **out)
{
    kla_gate_t *g = kl_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
}

void kla_gate_destroy(kla_gate_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_gate_t *g = *self_p;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->groups);
    free(g);
    *self_p = NULL;
}

static void s_signal_all(kla_gate_t *g, int sig)
{
    for (int i = 0; i < g->n; i++)
        kill(-g->groups[i], sig);
}

void kla_gate_pause(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    if (!g->closed) {
        g->closed = true;
        g->closed_since = kl_now_s();
        s_signal_all(g, SIGSTOP);
    }
    pthread_mutex_unlock(&g->mu);
}

void kla_gate_resume(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->closed) {
        g->closed = false;
        g->closed_total += kl_now_s() - g->closed_since;
        s_signal_all(g, SIGCONT);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
}

void kla_gate_abort(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->aborted = true;
    s_signal_all(g, SIGKILL);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

double kla_gate_closed_s(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    double t = g->closed_total;
    if (g->closed)
        t += kl_now_s() - g->closed_since;
    pthread_mutex_unlock(&g->mu);
    return t;
}

/* Waits while the gate is closed. Returns -1 when aborted. */
static int s_gate_enter(kla_gate_t *g, double *waited)
{
    *waited = 0;
    if (!g)
        return 0;
    double t0 = kl_now_s();
    pthread_mutex_lock(&g->mu);
    while (g->closed && !g->aborted)
        pthread_cond_wait(&g->cv, &g->mu);
    int rc = g->aborted ? -1 : 0;
    pthread_mutex_unlock(&g->mu);
    *waited = kl_now_s() - t0;
    return rc;
}

/* Registers a running compiler; one that starts while the gate closed
 * again is stopped at once, one that starts after an abort is killed. */
static void s_gate_register(kla_gate_t *g, pid_t pgid)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->groups = kl_xrealloc(g->groups, (size_t)g->cap * sizeof(pid_t));
    }
    g->groups[g->n++] = pgid;
    if (g->aborted)
        kill(-pgid, SIGKILL);
    else if (g->closed)
        kill(-pgid, SIGSTOP);
    pthread_mutex_unlock(&g->mu);
}

static void s_gate_unregister(kla_gate_t *g, pid_t pgid)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n; i++)
        if (g->groups[i] == pgid) {
            g->groups[i] = g->groups[--g->n];
            break;
        }
    pthread_mutex_unlock(&g->mu);
}

static double s_gate_closed(kla_gate_t *g)
{
    return g ? kla_gate_closed_s(g) : 0.0;
}

/* ---- builder --------------------------------------------------------- */

enum { S_BUILDING, S_OK, S_FAILED };

typedef struct s_entry {
    uint8_t key[16];
    int state;
    char *log; /* S_FAILED */
    struct s_entry *next;
} s_entry_t;

#define S_BUCKETS 1024

struct kla_builder_s {
    char *workdir, *cc, *cflags;
    char **flags;
    int nflags;
    int timeout_ms;
    kla_cores_t cores;
    bool pin;
    kla_gate_t *gate;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    s_entry_t *buckets[S_BUCKETS];
    unsigned compiles;
};

int kla_builder_new(kla_builder_t **out, const kla_builder_config_t *cfg,
                    char *err)
{
    *out = NULL;
    struct stat st;
    if (!cfg->workdir || stat(cfg->workdir, &st) != 0 || !S_ISDIR(st.st_mode))
        return kl_seterr(err, KL_ERR_IO, "build workdir %s: not a directory",
                         cfg->workdir ? cfg->workdir : "(none)");
    if (access(cfg->workdir, W_OK) != 0)
        return kl_seterr(err, KL_ERR_IO, "build workdir %s: %s", cfg->workdir,
                         strerror(errno));
    if (cfg->cc && !*cfg->cc)
        return kl_seterr(err, KL_ERR_INVAL, "compiler name is empty");
    kla_builder_t *b = kl_xcalloc(1, sizeof *b);
    b->workdir = kl_xstrdup(cfg->workdir);
    b->cc = kl_xstrdup(cfg->cc ? cfg->cc : "cc");
    b->cflags =
        kl_xstrdup(cfg->cflags ? cfg->cflags : "-O3 -march=native -fopenmp");
    b->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
    if (cfg->cores && cfg->cores->n > 0) {
        b->cores = *cfg->cores;
        b->pin = true;
    }
    b->gate = cfg->gate;
    char *copy = kl_xstrdup(b->cflags), *save = NULL;
    for (char *t = strtok_r(copy, " \t\n", &save); t;
         t = strtok_r(NULL, " \t\n", &save)) {
        b->flags =
            kl_xrealloc(b->flags, (size_t)(b->nflags + 1) * sizeof(char *));
        b->flags[b->nflags++] = kl_xstrdup(t);
    }
    free(copy);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    *out = b;
    return KL_OK;
}

void kla_builder_destroy(kla_builder_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_builder_t *b = *self_p;
    for (int i = 0; i < S_BUCKETS; i++)
        for (s_entry_t *e = b->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e->log);
            free(e);
        }
    for (int i = 0; i < b->nflags; i++)
        free(b->flags[i]);
    free(b->flags);
    free(b->workdir);
    free(b->cc);
    free(b->cflags);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
    *self_p = NULL;
}

unsigned kla_builder_compiles(kla_builder_t *b)
{
    pthread_mutex_lock(&b->mu);
    unsigned n = b->compiles;
    pthread_mutex_unlock(&b->mu);
    return n;
}

static void s_key(kla_builder_t *b, const char *src, size_t len,
                  uint8_t key[16])
{
    kl_buf_t buf = {0};
    kl_buf_append(&buf, src, len);
    kl_buf_append(&buf, "\0", 1);
    kl_buf_puts(&buf, b->cc);
    kl_buf_append(&buf, "\0", 1);
    for (int i = 0; i < b->nflags; i++) {
        kl_buf_puts(&buf, b->flags[i]);
        kl_buf_append(&buf, " ", 1);
    }
    kl_hash128(buf.data, buf.len, key);
    kl_buf_free(&buf);
}

/* Reads the compiler's stderr until EOF, keeping the first
 * KLA_BUILD_LOG_MAX bytes, until the deadline (which moves on while the
 * gate is closed). Returns 1 when the deadline passed. */
static int s_drain(kla_builder_t *b, int fd, char *log, size_t *len,
                   double start, double closed0)
{
    for (;;) {
        double deadline =
            start + b->timeout_ms / 1000.0 + (s_gate_closed(b->gate) - closed0);
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
        if (*len + keep > KLA_BUILD_LOG_MAX)
            keep = KLA_BUILD_LOG_MAX - *len;
        memcpy(log + *len, chunk, keep);
        *len += keep;
    }
}

/* The compiler's argument vector (strings borrowed from b and the
 * caller); free() the array. */
static char **s_argv(kla_builder_t *b, const char *src_path, const char *tmp)
{
    int argc = 0;
    char **argv = kl_xcalloc((size_t)b->nflags + 8, sizeof(char *));
    argv[argc++] = b->cc;
    for (int i = 0; i < b->nflags; i++)
        argv[argc++] = b->flags[i];
    argv[argc++] = "-shared";
    argv[argc++] = "-fPIC";
    argv[argc++] = "-o";
    argv[argc++] = (char *)tmp;
    argv[argc++] = (char *)src_path;
    return argv;
}

/* Forks the compiler in its own process group, stderr into errfd. Between
 * fork and exec only system calls: other threads may hold locks. */
static pid_t s_spawn(kla_builder_t *b, char **argv, int errfd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the agent blocks SIGTERM */
    signal(SIGPIPE, SIG_DFL);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(errfd, 2);
    if (b->pin)
        kla_cores_pin(&b->cores);
    execvp(argv[0], argv);
    static const char msg[] = "cannot run the compiler\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
}

/* Says why a compiler that wrote nothing (or could not start) failed. */
static void s_status_msg(kla_builder_t *b, int status, size_t len,
                         kla_build_t *out)
{
    if (len > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 127))
        return; /* its own stderr says it */
    if (WIFSIGNALED(status))
        snprintf(out->log, sizeof out->log, "compiler %s killed by signal %d",
                 b->cc, WTERMSIG(status));
    else
        snprintf(out->log, sizeof out->log,
                 "compiler %s exited with status %d%s", b->cc,
                 WEXITSTATUS(status),
                 WEXITSTATUS(status) == 127 ? " (cannot run it)" : "");
}

/* Runs the compiler; fills out->log on failure. Returns KL_OK,
 * KL_ERR_COMPILE, KL_ERR_TIMEOUT, KL_ERR_IO or KL_ERR_CLOSED. */
static int s_compile(kla_builder_t *b, const char *src_path, const char *tmp,
                     kla_build_t *out)
{
    double waited;
    if (s_gate_enter(b->gate, &waited) != 0) {
        snprintf(out->log, sizeof out->log, "build aborted: agent stopping");
        return KL_ERR_CLOSED;
    }
    out->paused_s += waited;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(out->log, sizeof out->log, "pipe: %s", strerror(errno));
        return KL_ERR_IO;
    }
    char **argv = s_argv(b, src_path, tmp);
    double start = kl_now_s(), closed0 = s_gate_closed(b->gate);
    pid_t pid = s_spawn(b, argv, fds[1]);
    close(fds[1]);
    free(argv);
    if (pid < 0) {
        close(fds[0]);
        snprintf(out->log, sizeof out->log, "fork: %s", strerror(errno));
        return KL_ERR_IO;
    }
    setpgid(pid, pid);
    s_gate_register(b->gate, pid);
    size_t len = 0;
    int timed_out = s_drain(b, fds[0], out->log, &len, start, closed0);
    out->log[len] = '\0';
    close(fds[0]);
    if (timed_out)
        kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    s_gate_unregister(b->gate, pid);
    double stopped = s_gate_closed(b->gate) - closed0;
    out->compile_s = kl_now_s() - start - stopped;
    out->paused_s += stopped;
    pthread_mutex_lock(&b->mu);
    b->compiles++;
    pthread_mutex_unlock(&b->mu);
    if (timed_out) {
        snprintf(out->log, sizeof out->log,
                 "compiler still running after %.1f s: killed",
                 b->timeout_ms / 1000.0);
        return KL_ERR_TIMEOUT; /* maybe load, not the source: not cached */
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KL_OK;
    s_status_msg(b, status, len, out);
    return KL_ERR_COMPILE;
}

static s_entry_t **s_slot(kla_builder_t *b, const uint8_t key[16])
{
    uint64_t h;
    memcpy(&h, key, sizeof h);
    s_entry_t **p = &b->buckets[h % S_BUCKETS];
    while (*p && memcmp((*p)->key, key, 16) != 0)
        p = &(*p)->next;
    return p;
}

/* Builds the entry this thread owns (state S_BUILDING). */
static int s_build_new(kla_builder_t *b, const char *source, size_t len,
                       const char *hex, kla_build_t *out)
{
    char src_path[PATH_MAX], tmp[PATH_MAX];
    snprintf(src_path, sizeof src_path, "%s/%s.c", b->workdir, hex);
    snprintf(tmp, sizeof tmp, "%s/%s.so.tmp%lu", b->workdir, hex,
             (unsigned long)pthread_self());
    char err[KL_ERRMSG_LEN];
    /* A cleaner of /tmp may have removed the work directory under a
     * long-running agent: make it again rather than fail every build. */
    if (access(b->workdir, W_OK) != 0 && errno == ENOENT) {
        if (kl_mkdirs(b->workdir, err) != KL_OK) {
            snprintf(out->log, sizeof out->log, "%s", err);
            return KL_ERR_IO;
        }
        kl_warn("build workdir %s was gone: made it again", b->workdir);
    }
    int rc = kl_write_file(src_path, source, len, err);
    if (rc != KL_OK) {
        snprintf(out->log, sizeof out->log, "%s", err);
        return rc;
    }
    rc = s_compile(b, src_path, tmp, out);
    if (rc == KL_OK && rename(tmp, out->so_path) != 0) {
        snprintf(out->log, sizeof out->log, "rename %.1024s: %s", tmp,
                 strerror(errno));
        rc = KL_ERR_IO;
    }
    if (rc != KL_OK)
        unlink(tmp);
    return rc;
}

int kla_builder_build(kla_builder_t *b, const char *source, size_t len,
                      kla_build_t *out)
{
    memset(out, 0, sizeof *out);
    uint8_t key[16];
    char hex[33];
    s_key(b, source, len, key);
    kl_hex128(key, hex);
    snprintf(out->so_path, sizeof out->so_path, "%s/%s.so", b->workdir, hex);

    pthread_mutex_lock(&b->mu);
    s_entry_t **slot = s_slot(b, key);
    while (*slot && (*slot)->state == S_BUILDING) {
        pthread_cond_wait(&b->cv, &b->mu);
        slot = s_slot(b, key);
    }
    s_entry_t *e = *slot;
    if (e && e->state == S_OK && access(out->so_path, R_OK) != 0) {
        *slot = e->next; /* its library was deleted: build it again */
        free(e);
        e = NULL;
    }
    if (!e && access(out->so_path, R_OK) == 0) {
        e = kl_xcalloc(1, sizeof *e); /* built by an earlier agent */
        memcpy(e->key, key, 16);
        e->state = S_OK;
        *slot = e;
    }
    if (e) {
        out->cache_hit = true;
        out->ok = e->state == S_OK;
        if (!out->ok)
            snprintf(out->log, sizeof out->log, "%s", e->log);
        pthread_mutex_unlock(&b->mu);
        return out->ok ? KL_OK : KL_ERR_COMPILE;
    }
    e = kl_xcalloc(1, sizeof *e);
    memcpy(e->key, key, 16);
    e->state = S_BUILDING;
    *slot = e;
    pthread_mutex_unlock(&b->mu);

    int rc = s_build_new(b, source, len, hex, out);
    out->ok = rc == KL_OK;

    pthread_mutex_lock(&b->mu);
    slot = s_slot(b, key);
    if (rc == KL_OK || rc == KL_ERR_COMPILE) {
        (*slot)->state = rc == KL_OK ? S_OK : S_FAILED;
        if (rc != KL_OK)
            (*slot)->log = kl_xstrdup(out->log);
    } else { /* not the source's fault: forget it, a retry may work */
        s_entry_t *dead = *slot;
        *slot = dead->next;
        free(dead);
    }
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return rc == KL_ERR_TIMEOUT ? KL_ERR_COMPILE : rc;
}
