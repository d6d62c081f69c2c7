/* builder.c - compile cache and build gate of kiln-agent (kla_builder.h):
 * the gate, the builder's life, the checked cache of libraries and their
 * sums, and the build itself (the source check first: builder_check.c;
 * the compiler's run in its sandbox: builder_run.c; the trimming of its
 * messages: builder_trim.c).
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
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"
#include "kla_builder_int.h"
#include "kla_jail.h"

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
int kla_builder__gate_enter(kla_gate_t *g, double *waited)
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
void kla_builder__gate_register(kla_gate_t *g, pid_t pgid)
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

void kla_builder__gate_unregister(kla_gate_t *g, pid_t pgid)
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

double kla_builder__gate_closed(kla_gate_t *g)
{
    return g ? kla_gate_closed_s(g) : 0.0;
}

/* ---- builder --------------------------------------------------------- */

enum { S_BUILDING, S_OK, S_FAILED };

typedef struct kla_builder__entry_s s_entry_t;
struct kla_builder__entry_s {
    uint8_t key[16];
    int state;
    unsigned long gen; /* tells a new entry from a freed one's address */
    uint8_t sum[16];   /* S_OK: kl_hash128 of the library's bytes */
    char *log;         /* S_FAILED */
    s_entry_t *next;
};

static void s_limit(struct rlimit *r, unsigned long long cur,
                    unsigned long long max)
{
    r->rlim_cur = (rlim_t)cur;
    r->rlim_max = (rlim_t)max;
}

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
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        kl_warn("build workdir %s may be written by group or others (mode "
                "%03o): the libraries cached there are the agent's alone "
                "only in a directory of mode 0700",
                cfg->workdir, (unsigned)(st.st_mode & 0777));
    kla_builder_t *b = kl_xcalloc(1, sizeof *b);
    b->workdir = kl_xstrdup(cfg->workdir);
    const char *cc = cfg->cc ? cfg->cc : "cc";
    char real[PATH_MAX];
    /* "./my-cc" means the agent's directory, not the sandbox's /build */
    if (cc[0] != '/' && strchr(cc, '/') && realpath(cc, real))
        cc = real;
    b->cc = kl_xstrdup(cc);
    b->cflags =
        kl_xstrdup(cfg->cflags ? cfg->cflags : "-O3 -march=native -fopenmp");
    b->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
    if (cfg->cores && cfg->cores->n > 0) {
        b->cores = *cfg->cores;
        b->pin = true;
    }
    b->gate = cfg->gate;
    unsigned long long mem =
                           cfg->max_mem_bytes ? cfg->max_mem_bytes : 2ull << 30,
                       fsz = cfg->max_file_bytes ? cfg->max_file_bytes
                                                 : 256ull << 20,
                       cpu = (unsigned long long)b->timeout_ms / 1000 + 2;
    b->max_file = (size_t)fsz;
    s_limit(&b->lim_as, mem, mem);
    s_limit(&b->lim_fsize, fsz, fsz);
    s_limit(&b->lim_cpu, cpu, cpu + 3); /* SIGXCPU, then SIGKILL */
    unsigned long long np =
        cfg->max_procs > 0 ? (unsigned)cfg->max_procs : 1024;
    s_limit(&b->lim_nproc, np, np);
    s_limit(&b->lim_core, 0, 0);
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
    for (int i = 0; i < KLA_BUILDER__BUCKETS; i++)
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

/* ---- the cache: stored libraries and their sums ---------------------- */

/* Reads the regular file open as fd (at most max bytes) into *data. */
static int s_read_fd(int fd, size_t max, char **data, size_t *len,
                     const char **why)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = "not a regular file";
        return -1;
    }
    if ((size_t)st.st_size > max) {
        *why = "too large";
        return -1;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *p = kl_xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(p);
                *why = "too large";
                return -1;
            }
            cap *= 2;
            p = kl_xrealloc(p, cap);
        }
        ssize_t r = read(fd, p + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(p);
            *why = "cannot read it";
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *data = p;
    *len = n;
    return 0;
}

/* Opens a cache file for reading: a regular file (no link), the agent's,
 * not writable by group or others. fd, 0 ... or -1 with *why (errno
 * ENOENT: it is not there). */
static int s_open_cached(const char *path, const char **why)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ENOENT ? "missing" : "cannot open it";
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = "not a regular file";
    } else if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        *why = "not the agent's own or writable by others";
    } else {
        return fd;
    }
    close(fd);
    errno = EPERM;
    return -1;
}

/* Whether the library at path hashes to sum: 0 yes, 1 it is missing, -1
 * it differs or is not fit (*why). */
static int s_verify(kla_builder_t *b, const char *path, const uint8_t sum[16],
                    const char **why)
{
    int fd = s_open_cached(path, why);
    if (fd < 0)
        return errno == ENOENT ? 1 : -1;
    char *data = NULL;
    size_t len = 0;
    int rc = s_read_fd(fd, b->max_file, &data, &len, why);
    close(fd);
    if (rc != 0)
        return -1;
    uint8_t got[16];
    kl_hash128(data, len, got);
    free(data);
    if (memcmp(got, sum, 16) != 0) {
        *why = "its bytes do not match the sum recorded when it was built";
        return -1;
    }
    return 0;
}

/* Reads WORKDIR/HEX.so.sum: 0, or -1 with *why. */
static int s_read_sum(const char *so_path, uint8_t sum[16], const char **why)
{
    char path[PATH_MAX + 8], text[40];
    snprintf(path, sizeof path, "%s.sum", so_path);
    int fd = s_open_cached(path, why);
    if (fd < 0)
        return -1; /* a library without its sum is not used */
    ssize_t n = read(fd, text, sizeof text);
    close(fd);
    if (n != 33 || text[32] != '\n') {
        *why = "its sum file is malformed";
        return -1;
    }
    text[32] = '\0';
    if (kl_unhex128(text, sum) != KL_OK) {
        *why = "its sum file is malformed";
        return -1;
    }
    return 0;
}

/* Writes data to path through a temporary file and a rename. */
static int s_write_atomic(const char *path, const void *data, size_t len,
                          mode_t mode, char *msg, size_t cap)
{
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, cap, "mkstemp %.1024s: %s", tmp, strerror(errno));
        return KL_ERR_IO;
    }
    const char *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int bad = done != len || fchmod(fd, mode) != 0;
    int saved = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        snprintf(msg, cap, "write %.1024s: %s", path,
                 strerror(bad ? saved : errno));
        unlink(tmp);
        return KL_ERR_IO;
    }
    return KL_OK;
}

/* Takes the compiler's output, open as fd, into the cache as so_path
 * with its sum: a regular file with something in it, copied (the
 * agent's file, not the compiler's). */
int kla_builder__store(kla_builder_t *b, int fd, const char *so_path,
                       uint8_t sum[16], kla_build_t *out)
{
    char *data = NULL;
    size_t len = 0;
    const char *why = NULL;
    if (lseek(fd, 0, SEEK_SET) != 0 ||
        s_read_fd(fd, b->max_file, &data, &len, &why) != 0) {
        snprintf(out->log, sizeof out->log,
                 "the compiler's output " KLA_BUILDER__OUT ": %s: refused",
                 why ? why : "cannot read it");
        return KL_ERR_COMPILE;
    }
    if (len == 0) {
        free(data);
        snprintf(out->log, sizeof out->log,
                 "the compiler wrote no " KLA_BUILDER__OUT);
        return KL_ERR_COMPILE;
    }
    kl_hash128(data, len, sum);
    int rc =
        s_write_atomic(so_path, data, len, 0755, out->log, sizeof out->log);
    free(data);
    if (rc != KL_OK)
        return rc;
    char sum_path[PATH_MAX + 8], hex[33];
    snprintf(sum_path, sizeof sum_path, "%s.sum", so_path);
    kl_hex128(sum, hex);
    hex[32] = '\n';
    return s_write_atomic(sum_path, hex, 33, 0644, out->log, sizeof out->log);
}

static s_entry_t **s_slot(kla_builder_t *b, const uint8_t key[16])
{
    uint64_t h;
    memcpy(&h, key, sizeof h);
    s_entry_t **p = &b->buckets[h % KLA_BUILDER__BUCKETS];
    while (*p && memcmp((*p)->key, key, 16) != 0)
        p = &(*p)->next;
    return p;
}

/* Builds the entry this thread owns (state S_BUILDING); *sum gets the
 * library's hash. */
static int s_build_new(kla_builder_t *b, const char *source, size_t len,
                       kla_build_t *out, uint8_t sum[16])
{
    if (kla_builder_check(source, len, out->log, sizeof out->log) != 0)
        return KL_ERR_COMPILE; /* refused: the compiler does not run */
    bool jail = !kla_jail_unsafe();
    char err[KL_ERRMSG_LEN];
    if (jail && kla_jail_probe(err) != KL_OK) {
        snprintf(out->log, sizeof out->log, "no sandbox for the compiler: %s",
                 err);
        return KL_ERR_UNSUPPORTED;
    }
    /* A cleaner of /tmp may have removed the work directory under a
     * long-running agent: make it again rather than fail every build. */
    if (access(b->workdir, W_OK) != 0 && errno == ENOENT) {
        if (kl_mkdirs(b->workdir, err) != KL_OK) {
            snprintf(out->log, sizeof out->log, "%s", err);
            return KL_ERR_IO;
        }
        chmod(b->workdir, 0700);
        kl_warn("build workdir %s was gone: made it again", b->workdir);
    }
    return jail ? kla_builder__build_jailed(b, source, len, out, sum)
                : kla_builder__build_unsafe(b, source, len, out, sum);
}

/* A library left in the workdir by an earlier agent: 0 when it is there
 * with a sum it matches (sum filled), 1 when it is not there, -1 when it
 * is but may not be used (*why). */
static int s_disk_hit(kla_builder_t *b, const char *so_path, uint8_t sum[16],
                      const char **why)
{
    if (access(so_path, F_OK) != 0)
        return 1;
    if (s_read_sum(so_path, sum, why) != 0) {
        if (strcmp(*why, "missing") == 0)
            *why = "it has no sum file";
        return -1;
    }
    return s_verify(b, so_path, sum, why) == 0 ? 0 : -1;
}

int kla_builder_build(kla_builder_t *b, const char *source, size_t len,
                      kla_build_t *out)
{
    memset(out, 0, sizeof *out);
    uint8_t key[16], sum[16];
    char hex[33];
    s_key(b, source, len, key);
    kl_hex128(key, hex);
    snprintf(out->so_path, sizeof out->so_path, "%s/%s.so", b->workdir, hex);

    bool fresh = false; /* no entry was there: look at the disk first */
    const char *why = NULL;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        s_entry_t **slot = s_slot(b, key);
        while (*slot && (*slot)->state == S_BUILDING) {
            pthread_cond_wait(&b->cv, &b->mu);
            slot = s_slot(b, key);
        }
        s_entry_t *e = *slot;
        if (!e) {
            e = kl_xcalloc(1, sizeof *e);
            memcpy(e->key, key, 16);
            e->state = S_BUILDING;
            e->gen = ++b->gen;
            *slot = e;
            pthread_mutex_unlock(&b->mu);
            fresh = true;
            break;
        }
        if (e->state == S_FAILED) {
            out->cache_hit = true;
            snprintf(out->log, sizeof out->log, "%s", e->log);
            pthread_mutex_unlock(&b->mu);
            return KL_ERR_COMPILE;
        }
        unsigned long gen = e->gen;
        memcpy(sum, e->sum, 16);
        pthread_mutex_unlock(&b->mu);
        /* hashed outside the lock: hits of other sources go on */
        int v = s_verify(b, out->so_path, sum, &why);
        if (v == 0) {
            out->cache_hit = out->ok = true;
            return KL_OK;
        }
        if (v < 0)
            kl_warn("build cache: %s: %s: building it again", out->so_path,
                    why);
        pthread_mutex_lock(&b->mu);
        slot = s_slot(b, key);
        bool mine = *slot && (*slot)->gen == gen && (*slot)->state == S_OK;
        if (mine)
            (*slot)->state = S_BUILDING; /* this thread builds it again */
        pthread_mutex_unlock(&b->mu);
        if (mine)
            break;
    }

    int rc = KL_ERR_INTERNAL,
        v = fresh ? s_disk_hit(b, out->so_path, sum, &why) : 1;
    if (v == 0) {
        out->cache_hit = true; /* built by an earlier agent */
        rc = KL_OK;
    } else {
        if (v < 0)
            kl_warn("build cache: %s: %s: building it again", out->so_path,
                    why);
        rc = s_build_new(b, source, len, out, sum);
    }
    out->ok = rc == KL_OK;

    pthread_mutex_lock(&b->mu);
    s_entry_t **slot = s_slot(b, key);
    if (rc == KL_OK || rc == KL_ERR_COMPILE) {
        (*slot)->state = rc == KL_OK ? S_OK : S_FAILED;
        if (rc == KL_OK)
            memcpy((*slot)->sum, sum, 16);
        else
            (*slot)->log = kl_xstrdup(out->log);
    } else { /* not the source's fault: forget it, a retry may work */
        s_entry_t *dead = *slot;
        *slot = dead->next;
        free(dead->log);
        free(dead);
    }
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return rc == KL_ERR_TIMEOUT ? KL_ERR_COMPILE : rc;
}
