/* bench_sandbox - what the candidate sandbox costs per candidate.
 *
 * One tiny kernel (c = a + b over 256 floats, so that the run itself is
 * microseconds), built once, measured N times by the agent's runner
 * (kla_runner_measure: poisoned outputs, the harness, verification, 3
 * samples, the checks of every sample) in three ways, round-robin in one
 * process so that drift hits all three alike:
 *   fork      the baseline: the way kiln ran candidates before the
 *             sandbox, a fork of the calling process that dlopens the
 *             library, calls it once, times 3 samples and reports
 *             through a pipe (rebuilt here, since the runner has none);
 *   exec      kiln-runner without namespaces (--unsafe-no-sandbox);
 *   sandbox   kiln-runner in its bubblewrap sandbox, as every agent runs.
 * Prints each median and p90 per candidate, and sandbox - fork against the
 * goal of 5 ms. With --flush the evaluator flushes the caches between
 * samples (the tuning default; 2 x LLC, capped at 128 MiB), a cost all
 * three pay.
 * Usage: bench_sandbox [N] [--flush]   (default 200; KILN_RUNNER names
 * kiln-runner, else build/agent/kiln-runner beside this build) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_builder.h"
#include "kla_jail.h"
#include "kla_runner.h"

#define GOAL_S 5e-3

static const char *s_kernel =
    "void add(void *const *args) {\n"
    "  const float *a = args[0], *b = args[1]; float *c = args[2];\n"
    "  for (int i = 0; i < 256; i++) c[i] = a[i] + b[i];\n"
    "}\n";

typedef void (*s_fn)(void *const *);

/* The old way: fork, dlopen, one call, 3 timed samples, a report. */
static double s_fork_once(const char *so, char *flush, size_t flush_n)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    double t0 = kl_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
        s_fn fn;
        *(void **)&fn = lib ? dlsym(lib, "add") : NULL;
        float a[256], b[256], c[256];
        for (int i = 0; i < 256; i++)
            a[i] = b[i] = (float)i;
        void *args[4] = {a, b, c, NULL};
        double s[3] = {0};
        if (fn) {
            fn(args);
            for (int r = 0; r < 3; r++) {
                if (flush)
                    memset(flush, r + 1, flush_n);
                double t = kl_now_s();
                fn(args);
                s[r] = kl_now_s() - t;
            }
        }
        (void)!write(fds[1], s, sizeof s);
        _exit(fn ? 0 : 1);
    }
    close(fds[1]);
    double s[3];
    ssize_t got = read(fds[0], s, sizeof s);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return got == sizeof s && WIFEXITED(st) && !WEXITSTATUS(st)
               ? kl_now_s() - t0
               : -1;
}

static double s_runner_once(kla_runner_t *r, const kla_problem_t *p,
                            const char *so)
{
    kla_result_t res;
    double t0 = kl_now_s();
    kla_runner_measure(r, p, so, "add", so, "add", &res);
    double t = kl_now_s() - t0;
    bool ok = res.status == KILN__STATUS__STATUS_OK;
    if (!ok)
        fprintf(stderr, "bench_sandbox: %s\n", res.error);
    kla_result_clear(&res);
    return ok ? t : -1;
}

static void s_row(const char *what, double *v, int n, double base)
{
    double med = kl_median(v, (size_t)n), p90 = kl_percentile(v, (size_t)n, 90);
    printf("  %-9s median %7.3f ms  p90 %7.3f ms", what, 1e3 * med, 1e3 * p90);
    if (base > 0)
        printf("  (%+.3f ms, %.2fx fork)", 1e3 * (med - base), med / base);
    printf("\n");
}

int main(int argc, char **argv)
{
    int n = 200;
    bool flush = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--flush"))
            flush = true;
        else
            n = atoi(argv[i]);
    }
    if (n < 10 || n > 100000) {
        fprintf(stderr, "usage: bench_sandbox [N] [--flush]   (N 10..100000, "
                        "default 200)\n");
        return 2;
    }
    if (!getenv("KILN_RUNNER")) {
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        self[len > 0 ? len : 0] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        char *path = kl_xasprintf("%s/../agent/kiln-runner", self);
        setenv("KILN_RUNNER", path, 1);
        free(path);
    }
    char err[KL_ERRMSG_LEN];
    if (kla_jail_probe(err) != KL_OK) {
        fprintf(stderr, "bench_sandbox: no sandbox here: %s\n", err);
        return 1;
    }
    char dir[] = "/tmp/bench-sandbox-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {.workdir = dir};
    kla_build_t bd;
    if (kla_builder_new(&b, &bc, err) != KL_OK ||
        kla_builder_build(b, s_kernel, strlen(s_kernel), &bd) != KL_OK) {
        fprintf(stderr, "bench_sandbox: build: %s %s\n", err, bd.log);
        return 1;
    }
    kla_problem_t p = {.n_args = 3,
                       .nelem = {256, 256, 256},
                       .is_output = {false, false, true}};
    kla_eval_defaults(&p.eval);
    p.eval.repeat = 3;
    p.eval.min_repeat_ms = 0;
    p.eval.flush_cache = flush;
    p.eval.timeout_ms = 5000;
    kla_runner_config_t rc = {.max_mem_bytes = 8192ull << 20};
    kla_runner_t *sand = NULL, *exec = NULL;
    kla_runner_new(&sand, &rc, err);
    kla_runner_new(&exec, &rc, err);
    size_t flush_n = (size_t)128 << 20;
    char *fbuf = NULL;
    if (flush) {
        fbuf = mmap(NULL, flush_n, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        fbuf = fbuf == MAP_FAILED ? NULL : fbuf;
    }
    /* Warm-up: each runner's reference run and its sandbox's start. */
    s_runner_once(sand, &p, bd.so_path);
    kla_jail_set_unsafe(true);
    s_runner_once(exec, &p, bd.so_path);
    kla_jail_set_unsafe(false);
    double *vf = kl_xcalloc((size_t)n, sizeof(double));
    double *ve = kl_xcalloc((size_t)n, sizeof(double));
    double *vs = kl_xcalloc((size_t)n, sizeof(double));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        vf[i] = s_fork_once(bd.so_path, fbuf, flush_n);
        kla_jail_set_unsafe(true);
        ve[i] = s_runner_once(exec, &p, bd.so_path);
        kla_jail_set_unsafe(false);
        vs[i] = s_runner_once(sand, &p, bd.so_path);
        bad += vf[i] < 0 || ve[i] < 0 || vs[i] < 0;
    }
    double base = kl_median(vf, (size_t)n);
    printf("bench_sandbox: %d candidates each way, round-robin, %s\n", n,
           flush ? "caches flushed between samples (128 MiB)" : "no flush");
    s_row("fork", vf, n, 0);
    s_row("exec", ve, n, base);
    s_row("sandbox", vs, n, base);
    double cost = kl_median(vs, (size_t)n) - base;
    printf("sandbox cost per candidate: %.3f ms over the fork baseline; goal "
           "<= %.1f ms: %s%s\n",
           1e3 * cost, 1e3 * GOAL_S, cost <= GOAL_S ? "met" : "NOT met",
           bad ? " (some runs failed: see above)" : "");
    printf("reproduce: ninja -C build tools/bench_sandbox && "
           "./build/tools/bench_sandbox %d%s\n",
           n, flush ? " --flush" : "");
    kla_runner_destroy(&sand);
    kla_runner_destroy(&exec);
    kla_builder_destroy(&b);
    char *cmd = kl_xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_sandbox: could not remove %s\n", dir);
    free(cmd);
    free(vf);
    free(ve);
    free(vs);
    return bad ? 1 : 0;
}
