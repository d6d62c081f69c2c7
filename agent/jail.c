/* jail.c - bubblewrap command lines and the probe (kla_jail.h). */
#include "kla_jail.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_util.h"

void kla_argv_add(kla_argv_t *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 32;
        a->v = kl_xrealloc(a->v, (size_t)a->cap * sizeof(char *));
    }
    a->v[a->n++] = kl_xstrdup(s);
    a->v[a->n] = NULL;
}

void kla_argv_addf(kla_argv_t *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    kla_argv_add(a, s ? s : "");
    free(s);
}

void kla_argv_free(kla_argv_t *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

const char *kla_jail_bwrap(void)
{
    const char *b = getenv("KILN_BWRAP");
    return b && *b ? b : "bwrap";
}

static atomic_bool s_unsafe;

void kla_jail_set_unsafe(bool on)
{
    atomic_store(&s_unsafe, on);
}

bool kla_jail_unsafe(void)
{
    return atomic_load(&s_unsafe);
}

/* The parts of the system a sandbox sees, read-only. A top-level name
 * that is a symbolic link on the host (/lib -> usr/lib on a merged-/usr
 * system) is the same link inside. */
static const char *const s_system[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                       "/lib32", "/lib64", "/libx32"};
static const char *const s_etc[] = {"/etc/ld.so.cache", "/etc/ld.so.conf",
                                    "/etc/ld.so.conf.d", "/etc/alternatives"};

static void s_base(kla_argv_t *a, bool new_session)
{
    /* No --hostname: systemd's ProtectHostname= (tools/deploy/systemd)
     * forbids sethostname even in a new UTS namespace. */
    static const char *const fixed[] = {"--unshare-all", "--die-with-parent",
                                        "--clearenv"};
    kla_argv_add(a, kla_jail_bwrap());
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        kla_argv_add(a, fixed[i]);
        if (i == 1 && new_session)
            kla_argv_add(a, "--new-session");
    }
    kla_argv_addf(a, "--uid");
    kla_argv_addf(a, "%d", KLA_JAIL_UID);
    kla_argv_addf(a, "--gid");
    kla_argv_addf(a, "%d", KLA_JAIL_GID);
    for (size_t i = 0; i < sizeof s_system / sizeof *s_system; i++) {
        struct stat st;
        if (lstat(s_system[i], &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char target[256];
            ssize_t n = readlink(s_system[i], target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            kla_argv_add(a, "--symlink");
            kla_argv_add(a, target);
            kla_argv_add(a, s_system[i]);
        } else if (S_ISDIR(st.st_mode)) {
            kla_jail_bind(a, s_system[i], s_system[i], false);
        }
    }
    for (size_t i = 0; i < sizeof s_etc / sizeof *s_etc; i++)
        if (access(s_etc[i], F_OK) == 0)
            kla_jail_bind(a, s_etc[i], s_etc[i], false);
    kla_argv_add(a, "--proc");
    kla_argv_add(a, "/proc");
    kla_argv_add(a, "--dev");
    kla_argv_add(a, "/dev");
    kla_argv_add(a, "--tmpfs");
    kla_argv_add(a, "/tmp");
}

void kla_jail_base(kla_argv_t *a)
{
    s_base(a, true);
}

void kla_jail_base_group(kla_argv_t *a)
{
    s_base(a, false);
}

bool kla_jail_sees(const char *path)
{
    if (!path || path[0] != '/' || strstr(path, "/../") || strstr(path, "/./"))
        return false;
    for (size_t i = 0; i < sizeof s_system / sizeof *s_system; i++) {
        size_t n = strlen(s_system[i]);
        if (strncmp(path, s_system[i], n) == 0 && path[n] == '/')
            return access(s_system[i], F_OK) == 0;
    }
    return false;
}

int kla_jail_detach_tty(void)
{
    int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENXIO || errno == ENOENT ? 0 : -1;
    int rc = ioctl(fd, TIOCNOTTY);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

void kla_jail_bind(kla_argv_t *a, const char *src, const char *dst,
                   bool writable)
{
    kla_argv_add(a, writable ? "--bind" : "--ro-bind");
    kla_argv_add(a, src);
    kla_argv_add(a, dst);
}

void kla_jail_hide(kla_argv_t *a, const char *path)
{
    if (!path || path[0] != '/')
        return;
    char real[4096];
    const char *p = realpath(path, real) ? real : path;
    for (size_t i = 0; i < sizeof s_system / sizeof *s_system; i++) {
        size_t n = strlen(s_system[i]);
        if (strncmp(p, s_system[i], n) == 0 && (p[n] == '/' || !p[n])) {
            kla_argv_add(a, "--tmpfs");
            kla_argv_add(a, p);
            return;
        }
    }
}

int kla_jail_sealed_copy(const char *path, const char *name, char *err)
{
    char *data = NULL;
    size_t len = 0;
    char e2[KL_ERRMSG_LEN];
    if (kl_read_file(path, &data, &len, e2) != KL_OK) {
        snprintf(err, KL_ERRMSG_LEN, "%s", e2);
        return -1;
    }
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    bool ok = fd >= 0;
    for (size_t done = 0; ok && done < len;) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        done += ok ? (size_t)w : 0;
    }
    free(data);
    ok = ok &&
         fcntl(fd, F_ADD_SEALS,
               F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0;
    if (!ok) {
        snprintf(err, KL_ERRMSG_LEN, "%.300s: sealed copy: %s", path,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

void kla_jail_exec(const int *fds, int nfds, char *const *argv,
                   char *const *envp, bool unsafe)
{
    setpgid(0, 0);
    /* Above every target first, so that no dup2 lands on a source. */
    int high[8];
    for (int i = 0; i < nfds && i < 8; i++)
        if ((high[i] = fcntl(fds[i], F_DUPFD, 16)) < 0)
            _exit(126);
    for (int i = 0; i < nfds && i < 8; i++)
        if (dup2(high[i], 3 + i) != 3 + i)
            _exit(126);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
    }
    unsigned first = 3u + (unsigned)nfds;
    if (syscall(SYS_close_range, first, ~0u, 0u) != 0)
        for (int fd = (int)first; fd < 1024; fd++)
            close(fd);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (!unsafe && kla_jail_drop_root() != 0)
        _exit(126);
    if (!unsafe)
        execvp(argv[0], argv);
    else if (envp)
        execve(argv[0], argv, envp);
    else
        execv(argv[0], argv);
    _exit(127);
}

int kla_jail_drop_root(void)
{
    if (geteuid() != 0)
        return 0;
    if (setgroups(0, NULL) != 0 ||
        setresgid(KLA_JAIL_GID, KLA_JAIL_GID, KLA_JAIL_GID) != 0 ||
        setresuid(KLA_JAIL_UID, KLA_JAIL_UID, KLA_JAIL_UID) != 0)
        return -1;
    return 0;
}

int kla_jail_own(const char *path)
{
    if (geteuid() != 0)
        return 0;
    return chown(path, KLA_JAIL_UID, KLA_JAIL_GID);
}

/* ---- the probe ------------------------------------------------------- */

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static int s_probe_rc;
static char s_probe_err[KL_ERRMSG_LEN];

static void s_probe(void)
{
    kla_argv_t a = {0};
    kla_jail_base(&a);
    kla_argv_add(&a, "--");
    kla_argv_add(&a, "true");
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        s_probe_rc = kl_seterr(s_probe_err, KL_ERR_UNSUPPORTED,
                               "sandbox probe: pipe: %s", strerror(errno));
        kla_argv_free(&a);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(fds[1], 2);
        if (kla_jail_drop_root() != 0) {
            static const char m[] = "cannot become uid 65534\n";
            (void)!write(2, m, sizeof m - 1);
            _exit(126);
        }
        execvp(a.v[0], a.v);
        static const char m[] = "cannot run it\n";
        (void)!write(2, m, sizeof m - 1);
        _exit(127);
    }
    close(fds[1]);
    kla_argv_free(&a);
    char msg[512] = "";
    size_t len = 0;
    if (pid > 0) {
        double deadline = kl_now_s() + 20;
        for (;;) {
            struct pollfd p = {.fd = fds[0], .events = POLLIN};
            int left = (int)((deadline - kl_now_s()) * 1000);
            if (left <= 0 || poll(&p, 1, left) <= 0)
                break;
            ssize_t n = read(fds[0], msg + len, sizeof msg - 1 - len);
            if (n <= 0)
                break;
            len += (size_t)n;
            if (len == sizeof msg - 1)
                break;
        }
    }
    close(fds[0]);
    msg[len] = '\0';
    for (char *e = msg + len; e > msg && (e[-1] == '\n' || e[-1] == ' ');)
        *--e = '\0';
    int status = -1;
    if (pid > 0) {
        kill(pid, SIGKILL); /* a hung probe; no-op when it is a zombie */
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        s_probe_rc = KL_OK;
    } else if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        s_probe_rc = kl_seterr(s_probe_err, KL_ERR_UNSUPPORTED,
                               "bwrap not found (%s: install bubblewrap, or "
                               "set KILN_BWRAP)",
                               kla_jail_bwrap());
    } else {
        s_probe_rc = kl_seterr(
            s_probe_err, KL_ERR_UNSUPPORTED,
            "%s cannot make a sandbox: %s (unprivileged user namespaces "
            "must be allowed: sysctl kernel.unprivileged_userns_clone=1 "
            "or user.max_user_namespaces > 0)",
            kla_jail_bwrap(), *msg ? msg : "it failed");
    }
}

int kla_jail_probe(char *err)
{
    pthread_once(&s_once, s_probe);
    if (s_probe_rc != KL_OK && err)
        snprintf(err, KL_ERRMSG_LEN, "%s", s_probe_err);
    return s_probe_rc;
}
