/* bench_tune_util.c - see bench_tune_util.h. */
#include "bench_tune_util.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_store.h"
#include "kl_task.h"
#include "kl_util.h"

static void s_die(const char *what, const char *err)
{
    fprintf(stderr, "bench: %s: %s\n", what, err);
    exit(1);
}

static int s_workload(const Kiln__Workload *w, void *arg)
{
    bt_run_t *r = arg;
    if (r->workload_text)
        return 1; /* more than one */
    r->workload_text = kl_xstrdup(w->text);
    r->workload_name = kl_xstrdup(w->name);
    r->flop = w->flop;
    return 0;
}

static int s_record(const Kiln__TuningRecord *rec, void *arg)
{
    bt_run_t *r = arg;
    if (!r->target)
        r->target = kl_xstrdup(rec->target);
    if (strcmp(r->target, rec->target))
        return 0;
    r->lat = kl_xrealloc(r->lat, (r->n + 1) * sizeof *r->lat);
    r->t_s = kl_xrealloc(r->t_s, (r->n + 1) * sizeof *r->t_s);
    bool ok = kl_record_valid(rec) && rec->median_s > 0;
    r->lat[r->n] = ok ? rec->median_s : INFINITY;
    r->t_s[r->n] = (double)rec->time_us * 1e-6;
    r->n++;
    if (ok && rec->median_s < r->best_s) {
        r->best_s = rec->median_s;
        r->best_seq = rec->seq;
        free(r->best_trace);
        r->best_trace = kl_xmalloc(rec->trace.len ? rec->trace.len : 1);
        memcpy(r->best_trace, rec->trace.data, rec->trace.len);
        r->best_trace_len = rec->trace.len;
    }
    return 0;
}

void bt_run_read(const char *dir, bt_run_t *out)
{
    char err[KL_ERRMSG_LEN];
    memset(out, 0, sizeof *out);
    out->best_s = INFINITY;
    kl_store_t *st = NULL;
    if (kl_store_open(&st, dir, KL_STORE_RDONLY, err))
        s_die(dir, err);
    int rc = kl_store_foreach_workload(st, s_workload, out, err);
    if (rc == 1 || !out->workload_text)
        s_die(dir, "the store must hold exactly one workload");
    if (rc || kl_store_foreach_record(st, NULL, NULL, s_record, out, err))
        s_die(dir, err);
    kl_store_close(&st);
    if (!out->n)
        s_die(dir, "no records");
}

void bt_run_free(bt_run_t *r)
{
    free(r->workload_text);
    free(r->workload_name);
    free(r->target);
    free(r->lat);
    free(r->t_s);
    free(r->best_trace);
    memset(r, 0, sizeof *r);
}

double bt_best_after(const bt_run_t *r, size_t k)
{
    double b = INFINITY;
    for (size_t i = 0; i < k && i < r->n; i++)
        b = r->lat[i] < b ? r->lat[i] : b;
    return b;
}

size_t bt_trials_to_reach(const bt_run_t *r, double target_s)
{
    double b = INFINITY;
    for (size_t i = 0; i < r->n; i++) {
        b = r->lat[i] < b ? r->lat[i] : b;
        if (b <= target_s)
            return i + 1;
    }
    return 0;
}

void bt_clean_env(int argc, char **argv, bool keep)
{
    (void)argc;
    if (keep || getenv("KILN_BENCH_ENV_CLEAN") ||
        (!getenv("OPENBLAS_CORETYPE") && !getenv("OPENBLAS_L2_SIZE")))
        return;
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("OPENBLAS_L2_SIZE");
    setenv("KILN_BENCH_ENV_CLEAN", "1", 1);
    execv("/proc/self/exe", argv);
    perror("bench: re-exec without OPENBLAS_* failed");
}

void bt_force_core(char **argv, const char *core, const char *why)
{
    if (getenv("OPENBLAS_CORETYPE"))
        return;
    fprintf(stderr, "bench: %s; running again with OPENBLAS_CORETYPE=%s\n", why,
            core);
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("KILN_BENCH_ENV_CLEAN", "1", 1);
    execv("/proc/self/exe", argv);
    perror("bench: re-exec failed");
}

bt_kernel_t bt_load_entry(const char *c, const char *workdir, const char *entry)
{
    char err[KL_ERRMSG_LEN];
    const char *base = strrchr(c, '/') ? strrchr(c, '/') + 1 : c;
    char *so = kl_xasprintf("%s/%s.so", workdir, base);
    if (kl_mkdirs(workdir, err))
        s_die(workdir, err);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("cc", "cc", "-O3", "-march=native", "-fopenmp", "-shared",
               "-fPIC", "-o", so, c, "-lm", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        s_die(c, "cc failed");
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        s_die(so, dlerror());
    bt_kernel_t k;
    *(void **)&k.fn = dlsym(h, entry);
    if (!k.fn)
        s_die(so, "no entry symbol in it");
    k.prepare = kl_abi_find_prepare(h, entry);
    free(so);
    return k;
}

bt_kernel_t bt_load_source(const char *c, const char *workdir)
{
    return bt_load_entry(c, workdir, "kl_main");
}

bt_kernel_t bt_load_best(const bt_run_t *r, const char *workdir)
{
    char err[KL_ERRMSG_LEN], *src = NULL;
    if (!r->best_trace)
        s_die(r->workload_name, "no verified record");
    if (kl_trace_source(r->workload_text, r->target, r->best_trace,
                        r->best_trace_len, &src, err))
        s_die("regenerating the best source", err);
    char *c = kl_xasprintf("%s/best_%llu.c", workdir,
                           (unsigned long long)r->best_seq);
    if (kl_mkdirs(workdir, err) || kl_write_file(c, src, strlen(src), err))
        s_die(c, err);
    free(src);
    bt_kernel_t k = bt_load_source(c, workdir);
    printf("best kernel: record seq %llu of %s, source %s\n",
           (unsigned long long)r->best_seq, r->workload_name, c);
    free(c);
    return k;
}

void **bt_kernel_args(const bt_kernel_t *k, const kl_workload_t *w,
                      float **bufs)
{
    int n = w->ntensors;
    void **args = kl_xcalloc((size_t)n + 1, sizeof *args);
    for (int i = 0; i < n; i++)
        args[i] = bufs[i];
    if (!k->prepare)
        return args;
    bool cst[KL_IR_MAX_TENSORS] = {0};
    int nconst = 0;
    for (int i = 0; i < n; i++) {
        cst[i] = w->tensors[i].is_const;
        nconst += cst[i];
    }
    double t0 = kl_now_s();
    args[n] = kl_abi_prepare(k->prepare, n, args, cst);
    double took = kl_now_s() - t0;
    if (!args[n])
        s_die("kl_main_prepare", "returned NULL (out of memory)");
    printf("the kernel prepared its %d constant input%s once (kl_main_prepare, "
           "%.2f ms), outside the timing, as oneDNN's weights are reordered "
           "outside it\n",
           nconst, nconst == 1 ? "" : "s", took * 1e3);
    return args;
}

void bt_args_free(const kl_workload_t *w, void **args)
{
    if (!args)
        return;
    free(args[w->ntensors]);
    free(args);
}

float **bt_alloc_bufs(const kl_workload_t *w, uint64_t seed)
{
    float **b = kl_xcalloc((size_t)w->ntensors, sizeof *b);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    for (int i = 0; i < w->ntensors; i++) {
        size_t n = (size_t)kl_tensor_numel(&w->tensors[i]);
        b[i] = kl_xcalloc(n, sizeof **b);
        if (!w->tensors[i].is_output)
            for (size_t k = 0; k < n; k++)
                b[i][k] = (float)(2 * kl_rng_double(&rng) - 1);
    }
    return b;
}

void bt_free_bufs(const kl_workload_t *w, float **bufs)
{
    for (int i = 0; i < w->ntensors; i++)
        free(bufs[i]);
    free(bufs);
}

void bt_flush_cache(void)
{
    static char *buf;
    static const size_t n = 96u << 20;
    if (!buf)
        buf = kl_xcalloc(n, 1);
    for (size_t i = 0; i < n; i += 64)
        buf[i] = (char)(buf[i] + 1);
}

static bool s_flush = true;

void bt_set_flush(bool on)
{
    s_flush = on;
}

static double s_once(void (*f)(void *), void *ctx)
{
    if (s_flush)
        bt_flush_cache();
    double t0 = kl_now_s();
    f(ctx);
    return kl_now_s() - t0;
}

static void s_stat(const double *t, int n, bt_stat_t *s)
{
    s->min = s->max = t[0];
    for (int i = 1; i < n; i++) {
        s->min = t[i] < s->min ? t[i] : s->min;
        s->max = t[i] > s->max ? t[i] : s->max;
    }
    s->med = kl_median(t, (size_t)n);
}

void bt_interleave(void (*a)(void *), void *actx, void (*b)(void *), void *bctx,
                   int rounds, bt_stat_t *sa, bt_stat_t *sb)
{
    double *ta = kl_xcalloc((size_t)rounds, sizeof *ta);
    double *tb = kl_xcalloc((size_t)rounds, sizeof *tb);
    for (int w = 0; w < 3; w++) {
        a(actx);
        b(bctx);
    }
    for (int r = 0; r < rounds; r++) {
        ta[r] = s_once(a, actx);
        tb[r] = s_once(b, bctx);
    }
    s_stat(ta, rounds, sa);
    s_stat(tb, rounds, sb);
    free(ta);
    free(tb);
}

void bt_print_load(void)
{
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f))
            snprintf(buf, sizeof buf, "?\n");
        fclose(f);
    }
    printf("load average (1, 5, 15 min, runnable/threads): %s", buf);
}

double bt_max_rel_err(const float *x, const float *y, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - (double)y[i]) / (1.0 + fabs(y[i]));
        worst = d > worst || isnan(d) ? d : worst;
    }
    return worst;
}
