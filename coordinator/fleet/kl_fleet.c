/* kl_fleet.c - local kiln-agent child processes; see kl_fleet.h. */
#include "kl_fleet.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"

struct kl_fleet_s {
    kl_fleet_config_t cfg;
    char agent[PATH_MAX];
    char *dir;
    char *coord_dir;
    char *allow_dir;
    char *coord_pub;
    char *log_path;
    kl_net_security_t sec;
    pid_t *pids;
    size_t n_pids;
    int exit_code; /* last non-zero exit status of an agent */
    char *device;  /* --device of the agents, or NULL */
};

static bool s_exec_ok(const char *p)
{
    return access(p, X_OK) == 0;
}

int kl_fleet_find_agent(char *out, size_t len, char *err)
{
    const char *env = getenv("KILN_AGENT");
    if (env && *env) {
        if (!s_exec_ok(env))
            return kl_seterr(err, KL_ERR_NOTFOUND,
                             "KILN_AGENT=%s is not an executable", env);
        snprintf(out, len, "%s", env);
        return KL_OK;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        static const char *rel[] = {"kiln-agent", "../agent/kiln-agent",
                                    "../../agent/kiln-agent"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%.3000s/%s", self, rel[i]);
            if (s_exec_ok(p)) {
                snprintf(out, len, "%s", p);
                return KL_OK;
            }
        }
    }
    const char *path = getenv("PATH");
    char *copy = kl_xstrdup(path ? path : "/usr/local/bin:/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d;
         d = strtok_r(NULL, ":", &save)) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%.3000s/kiln-agent", d);
        if (s_exec_ok(p)) {
            snprintf(out, len, "%s", p);
            free(copy);
            return KL_OK;
        }
    }
    free(copy);
    return kl_seterr(err, KL_ERR_NOTFOUND,
                     "kiln-agent not found ($KILN_AGENT, next to %s, "
                     "../agent/, PATH)",
                     n > 0 ? self : "this program");
}

static int s_rm_one(const char *p, const struct stat *st, int flag,
                    struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

int kl_fleet_rmtree(const char *path, char *err)
{
    if (nftw(path, s_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return kl_seterr(err, KL_ERR_IO, "remove %s: %s", path,
                         strerror(errno));
    return KL_OK;
}

static int s_copy(const char *from, const char *to, char *err)
{
    char *data = NULL;
    size_t len;
    int rc = kl_read_file(from, &data, &len, err);
    if (rc == KL_OK)
        rc = kl_write_file(to, data, len, err);
    free(data);
    return rc;
}

static int s_keys(kl_fleet_t *f, char *err)
{
    int rc = kl_net_keygen(f->coord_dir, "coordinator", err);
    if (rc == KL_OK)
        rc = kl_mkdirs(f->allow_dir, err);
    for (int i = 0; rc == KL_OK && i < f->cfg.n_agents; i++) {
        char name[32];
        snprintf(name, sizeof name, "agent-%d", i);
        char *dir = kl_xasprintf("%s/%s", f->dir, name);
        char *pub = kl_xasprintf("%s/%s.pub", dir, name);
        char *allowed = kl_xasprintf("%s/%s.pub", f->allow_dir, name);
        rc = kl_net_keygen(dir, name, err);
        if (rc == KL_OK)
            rc = s_copy(pub, allowed, err);
        free(dir);
        free(pub);
        free(allowed);
    }
    return rc;
}

void kl_fleet_destroy(kl_fleet_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_fleet_t *f = *self_p;
    for (size_t i = 0; i < f->n_pids; i++)
        if (f->pids[i] > 0)
            kill(f->pids[i], SIGTERM);
    double until = kl_now_s() + 2.0;
    while (kl_fleet_running(f) > 0 && kl_now_s() < until) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (size_t i = 0; i < f->n_pids; i++)
        if (f->pids[i] > 0) {
            kl_warn("fleet: agent pid %d ignored SIGTERM: SIGKILL",
                    (int)f->pids[i]);
            kill(f->pids[i], SIGKILL);
            waitpid(f->pids[i], NULL, 0);
        }
    if (f->dir) {
        char err[KL_ERRMSG_LEN];
        if (kl_fleet_rmtree(f->dir, err) != KL_OK)
            kl_warn("fleet: %s", err);
    }
    free(f->pids);
    free(f->dir);
    free(f->coord_dir);
    free(f->allow_dir);
    free(f->coord_pub);
    free(f->log_path);
    free(f->device);
    free(f);
    *self_p = NULL;
}

int kl_fleet_new(kl_fleet_t **out, const kl_fleet_config_t *cfg, char *err)
{
    if (cfg->n_agents < 0 || cfg->n_agents > 10000)
        return kl_seterr(err, KL_ERR_INVAL, "fleet: %d agents", cfg->n_agents);
    kl_fleet_t *f = kl_xcalloc(1, sizeof *f);
    f->cfg = *cfg;
    f->cfg.device = NULL;
    f->device = cfg->device ? kl_xstrdup(cfg->device) : NULL;
    f->cfg.agent_path = NULL;
    f->cfg.log_path = NULL;
    f->log_path = cfg->log_path ? kl_xstrdup(cfg->log_path) : NULL;
    int rc = KL_OK;
    if (cfg->agent_path)
        snprintf(f->agent, sizeof f->agent, "%s", cfg->agent_path);
    else if (cfg->n_agents > 0)
        rc = kl_fleet_find_agent(f->agent, sizeof f->agent, err);
    const char *tmp = getenv("TMPDIR");
    char *tmpl =
        kl_xasprintf("%s/kiln-fleet-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (rc == KL_OK && !mkdtemp(tmpl))
        rc = kl_seterr(err, KL_ERR_IO, "mkdtemp %s: %s", tmpl, strerror(errno));
    if (rc == KL_OK)
        f->dir = tmpl;
    else
        free(tmpl);
    if (rc == KL_OK) {
        f->coord_dir = kl_xasprintf("%s/coordinator", f->dir);
        f->allow_dir = kl_xasprintf("%s/allow", f->dir);
        f->coord_pub = kl_xasprintf("%s/coordinator.pub", f->coord_dir);
        f->sec.insecure = cfg->insecure;
        if (!cfg->insecure) {
            f->sec.keys_dir = f->coord_dir;
            f->sec.name = "coordinator";
            f->sec.allow_dir = f->allow_dir;
            rc = s_keys(f, err);
        }
    }
    if (rc != KL_OK) {
        kl_fleet_destroy(&f);
        return rc;
    }
    f->pids = kl_xcalloc((size_t)cfg->n_agents + 1, sizeof *f->pids);
    *out = f;
    return KL_OK;
}

const kl_net_security_t *kl_fleet_security(const kl_fleet_t *self)
{
    return &self->sec;
}

/* The argument vector of agent i (strings owned by the caller's buffer). */
static char **s_argv(kl_fleet_t *f, int i, const char *endpoint, char **own)
{
    size_t n = 0, o = 0;
    char **av = kl_xcalloc(32 + 64, sizeof *av);
    av[n++] = f->agent;
    av[n++] = "--connect";
    av[n++] = (char *)endpoint;
    av[n++] = "--name";
    av[n++] = own[o++] = kl_xasprintf("agent-%d", i);
    if (f->cfg.insecure) {
        av[n++] = "--insecure";
    } else {
        av[n++] = "--keys";
        av[n++] = own[o++] = kl_xasprintf("%s/agent-%d", f->dir, i);
        av[n++] = "--coordinator-key";
        av[n++] = f->coord_pub;
    }
    if (f->cfg.simulate)
        av[n++] = "--simulate";
    if (f->cfg.heartbeat_ms > 0) {
        av[n++] = "--heartbeat-ms";
        av[n++] = own[o++] = kl_xasprintf("%d", f->cfg.heartbeat_ms);
    }
    if (f->cfg.build_slots > 0) {
        av[n++] = "--build-slots";
        av[n++] = own[o++] = kl_xasprintf("%d", f->cfg.build_slots);
    }
    if (f->device) {
        av[n++] = "--device";
        av[n++] = f->device;
    }
    for (size_t k = 0; f->cfg.extra_args && f->cfg.extra_args[k] && n < 94; k++)
        av[n++] = (char *)f->cfg.extra_args[k];
    return av;
}

/* fork + execv rather than posix_spawn: the child asks for SIGTERM when
 * its parent dies (PR_SET_PDEATHSIG), so a killed kiln leaves no agents. */
static pid_t s_spawn(kl_fleet_t *f, char **av, int log_fd)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(0);
    if (log_fd >= 0)
        dup2(log_fd, 2);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
    }
    execv(f->agent, av);
    _exit(127);
}

int kl_fleet_start(kl_fleet_t *f, const char *endpoint, char *err)
{
    int log_fd = -1;
    if (f->log_path) {
        log_fd =
            open(f->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd < 0)
            return kl_seterr(err, KL_ERR_IO, "%s: %s", f->log_path,
                             strerror(errno));
    }
    int rc = KL_OK;
    for (int i = 0; i < f->cfg.n_agents && rc == KL_OK; i++) {
        char *own[8] = {0};
        char **av = s_argv(f, i, endpoint, own);
        pid_t pid = s_spawn(f, av, log_fd);
        if (pid < 0)
            rc = kl_seterr(err, KL_ERR_IO, "fork: %s", strerror(errno));
        else
            f->pids[f->n_pids++] = pid;
        for (int k = 0; k < 8; k++)
            free(own[k]);
        free(av);
    }
    if (log_fd >= 0)
        close(log_fd);
    if (rc == KL_OK)
        kl_info("fleet: started %d %s%s agent(s) (%s) for %s", f->cfg.n_agents,
                f->cfg.simulate ? "simulated " : "",
                f->cfg.insecure ? "insecure" : "CURVE", f->agent, endpoint);
    return rc;
}

size_t kl_fleet_running(kl_fleet_t *f)
{
    size_t n = 0;
    for (size_t i = 0; i < f->n_pids; i++) {
        if (f->pids[i] <= 0)
            continue;
        int status;
        pid_t r = waitpid(f->pids[i], &status, WNOHANG);
        if (r == f->pids[i] || (r < 0 && errno == ECHILD)) {
            if (r == f->pids[i] && WIFEXITED(status) &&
                WEXITSTATUS(status) != 0) {
                f->exit_code = WEXITSTATUS(status);
                kl_warn("fleet: agent pid %d exited with status %d",
                        (int)f->pids[i], WEXITSTATUS(status));
            }
            f->pids[i] = 0;
        } else {
            n++;
        }
    }
    return n;
}

int kl_fleet_exit_code(const kl_fleet_t *f)
{
    return f->exit_code;
}
