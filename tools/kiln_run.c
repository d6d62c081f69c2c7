/* kiln run - runs an exported model (libkiln_model.so of kiln export) on
 * random parameters, checks its output against the naive build of the
 * same graph (every task's reference kernel), and times both, side by
 * side, and oneDNN where it can express every layer. The exported build's
 * constant inputs are prepared once (kiln_model_prepare) before the check
 * and the timed runs, as a deployment does at load time. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_export.h"
#include "kl_opt.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"lib", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "the exported library (DIR/libkiln_model.so)"},
    {"model", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME|FILE",
     "the model it was exported from"},
    {"repeat", KL_OPT_INT, "10", 1, 100000, "N",
     "timed runs of each build (the median is printed)"},
    {"seed", KL_OPT_INT, "1", 0, 9e18, "S", "seed of the random parameters"},
    {"rtol", KL_OPT_DOUBLE, "1e-3", 0, 1, "X",
     "largest difference allowed, relative to the naive output's largest "
     "magnitude"},
    {"cc", KL_OPT_STR, NULL, KL_NOBOUNDS, "CC",
     "C compiler for the naive build (default $CC, else cc)"},
    {"no-dnnl", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL, "do not time oneDNN"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln run --lib DIR/libkiln_model.so --model NAME [--repeat N]\n"
    "Runs the exported model on random parameters, checks it against the "
    "naive build of the\nsame graph, and prints the end-to-end latency "
    "(median of --repeat runs) of both.\n"
    "Exit codes: 0 ok, 1 failed or wrong output, 2 usage.";

typedef struct {
    void *h;
    const char *(*name)(void);
    int (*nparams)(void);
    const char *(*pname)(int);
    long long (*pnumel)(int);
    long long (*onumel)(void);
    int (*run)(const float *const *, float *);
    /* Libraries exported before prepare steps lack these three. */
    int (*nprepare)(void);
    int (*prepare)(const float *const *);
    void (*release)(void);
} s_lib_t;

static int s_open(s_lib_t *l, const char *path, char *err)
{
    memset(l, 0, sizeof *l);
    l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!l->h)
        return kl_seterr(err, KL_ERR_IO, "%s", dlerror());
    *(void **)&l->name = dlsym(l->h, "kiln_model_name");
    *(void **)&l->nparams = dlsym(l->h, "kiln_model_nparams");
    *(void **)&l->pname = dlsym(l->h, "kiln_model_param_name");
    *(void **)&l->pnumel = dlsym(l->h, "kiln_model_param_numel");
    *(void **)&l->onumel = dlsym(l->h, "kiln_model_output_numel");
    *(void **)&l->run = dlsym(l->h, "kiln_model_run");
    *(void **)&l->nprepare = dlsym(l->h, "kiln_model_nprepare");
    *(void **)&l->prepare = dlsym(l->h, "kiln_model_prepare");
    *(void **)&l->release = dlsym(l->h, "kiln_model_release");
    if (!l->nprepare || !l->prepare || !l->release)
        l->nprepare = NULL, l->prepare = NULL, l->release = NULL;
    if (!l->name || !l->nparams || !l->pname || !l->pnumel || !l->onumel ||
        !l->run)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s is not a kiln model library (no kiln_model_run "
                         "and friends)",
                         path);
    return KL_OK;
}

/* The two builds must have the same parameters and output. */
static int s_same(const s_lib_t *a, const s_lib_t *b, const char *lib,
                  const char *model, char *err)
{
    bool same = a->nparams() == b->nparams() && a->onumel() == b->onumel() &&
                !strcmp(a->name(), b->name());
    for (int i = 0; same && i < a->nparams(); i++)
        same =
            a->pnumel(i) == b->pnumel(i) && !strcmp(a->pname(i), b->pname(i));
    if (!same)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s (model %s, %d parameters) was not exported from "
                         "model %s (%d parameters)",
                         lib, a->name(), a->nparams(), model, b->nparams());
    return KL_OK;
}

static float **s_params(const s_lib_t *l, uint64_t seed)
{
    kl_rng_t r;
    kl_rng_seed(&r, seed);
    float **p = kl_xcalloc((size_t)l->nparams() + 1, sizeof(float *));
    for (int i = 0; i < l->nparams(); i++) {
        long long n = l->pnumel(i);
        p[i] = kl_xmalloc((size_t)n * sizeof(float) + 1);
        /* Inputs in [-1, 1), weights smaller so that deep graphs stay in
         * range. */
        float scale = strchr(l->pname(i), '.') ? 0.1f : 1.0f;
        for (long long k = 0; k < n; k++)
            p[i][k] = scale * (float)(2 * kl_rng_double(&r) - 1);
    }
    return p;
}

/* Prepares the constant inputs of every layer that has a prepare step,
 * once, outside the timed runs, and says so. */
static int s_prepare(const s_lib_t *l, float *const *p, char *err)
{
    if (!l->prepare) {
        printf("no kiln_model_prepare in the library (exported before "
               "prepare steps): nothing prepared\n");
        return KL_OK;
    }
    double t0 = kl_now_s();
    int rc = l->prepare((const float *const *)p);
    double dt = kl_now_s() - t0;
    if (rc)
        return kl_seterr(err, KL_ERR_NOMEM,
                         "kiln_model_prepare returned %d: a layer's prepare "
                         "step ran out of memory",
                         rc);
    printf("prepared the constant inputs of %d layer(s) with "
           "kiln_model_prepare in %.3f ms (outside the timed runs)\n",
           l->nprepare(), dt * 1e3);
    return KL_OK;
}

/* The output of one untimed run of each build. */
static int s_outputs(const s_lib_t *lib, const s_lib_t *nv, float *const *p,
                     float *got, float *ref, char *err)
{
    int a = lib->run((const float *const *)p, got);
    int b = a ? 0 : nv->run((const float *const *)p, ref);
    if (a || b)
        return kl_seterr(err, KL_ERR_NOMEM,
                         "kiln_model_run of the %s build returned %d: a "
                         "layer's prepare step ran out of memory",
                         a ? "exported" : "naive", a ? a : b);
    return KL_OK;
}

static double s_time(const s_lib_t *l, float *const *p, float *out)
{
    double t0 = kl_now_s();
    l->run((const float *const *)p, out);
    return kl_now_s() - t0;
}

static int s_check(const float *got, const float *ref, long long n, double rtol,
                   char *err)
{
    double big = 0, worst = 0;
    long long at = 0;
    for (long long i = 0; i < n; i++)
        big = fmax(big, fabs(ref[i]));
    for (long long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    if (!(worst <= rtol * fmax(big, 1e-6)))
        return kl_seterr(err, KL_ERR_RUNTIME,
                         "output differs from the naive build: element %lld "
                         "is %g, naive %g (largest |naive| %g, rtol %g)",
                         at, got[at], ref[at], big, rtol);
    printf("output matches the naive build: %lld elements, largest "
           "difference %.3g (%.3g of the largest magnitude)\n",
           n, worst, big > 0 ? worst / big : 0.0);
    return KL_OK;
}

/* The naive build in a fresh temporary directory (removed by the caller). */
static int s_naive(const char *model, const char *cc, char *dir, size_t n,
                   char *err)
{
    const char *tmp =
        getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, n, "%s/kiln-run-XXXXXX", tmp);
    if (!mkdtemp(dir))
        return kl_seterr(err, KL_ERR_IO, "mkdtemp %s failed", dir);
    printf("building the naive build of %s in %s ...\n", model, dir);
    fflush(stdout);
    return kl_export_naive(model, dir, cc, err);
}

static void s_rmdir(const char *dir)
{
    static const char *files[] = {"kiln_model.c", "kiln_model.h",
                                  "libkiln_model.so", "libkiln_model.so.log"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *p = kl_xasprintf("%s/%s", dir, files[i]);
        unlink(p);
        free(p);
    }
    for (int t = 0; t < 1000; t++) {
        char *p = kl_xasprintf("%s/task_%02d.c", dir, t);
        int gone = unlink(p);
        free(p);
        if (gone)
            break;
    }
    rmdir(dir);
}

static double s_time_dnnl(kl_dnnl_net_t *d, float *out, int *rc, char *err)
{
    double t0 = kl_now_s();
    if (!*rc)
        *rc = kl_export_dnnl_run(d, out, err);
    return kl_now_s() - t0;
}

static void s_line(const char *what, const double *t, int repeat)
{
    printf("%-16s %10.3f ms  (%.3f .. %.3f)", what,
           kl_median(t, (size_t)repeat) * 1e3,
           kl_percentile(t, (size_t)repeat, 0) * 1e3,
           kl_percentile(t, (size_t)repeat, 100) * 1e3);
}

/* oneDNN's graph of the model (kl_export_dnnl_open), checked against the
 * naive build's output: a wrong output is an error; a graph oneDNN cannot
 * express (or no libdnnl) is said, and *d stays NULL. */
static int s_dnnl(const char *model, float *const *p, int np, const float *ref,
                  long long n, double rtol, kl_dnnl_net_t **d, char *err)
{
    double rel = 0;
    int rc = kl_export_dnnl_open(model, p, np, d, err);
    if (rc) {
        printf("oneDNN           not measured: %s\n", err);
        return rc == KL_ERR_UNSUPPORTED ? KL_OK : rc;
    }
    rc = kl_export_dnnl_check(*d, ref, n, rtol, &rel, err);
    if (!rc)
        printf("oneDNN's output matches the naive build: largest difference "
               "%.3g of the largest magnitude\n",
               rel);
    return rc;
}

/* Times the builds interleaved (one run of each per round, after one
 * warm-up run of each) and prints the medians; d (oneDNN) may be NULL. */
static int s_bench(const s_lib_t *lib, const s_lib_t *nv, kl_dnnl_net_t *d,
                   float *const *p, float *out, int repeat, char *err)
{
    double *a = kl_xcalloc((size_t)repeat, sizeof(double));
    double *b = kl_xcalloc((size_t)repeat, sizeof(double));
    double *c = kl_xcalloc((size_t)repeat, sizeof(double));
    int rc = KL_OK;
    s_time(lib, p, out); /* warm-up */
    s_time(nv, p, out);
    if (d)
        s_time_dnnl(d, out, &rc, err);
    for (int i = 0; i < repeat; i++) {
        a[i] = s_time(lib, p, out);
        b[i] = s_time(nv, p, out);
        if (d)
            c[i] = s_time_dnnl(d, out, &rc, err);
    }
    double ma = kl_median(a, (size_t)repeat), mb = kl_median(b, (size_t)repeat);
    const char *th = getenv("OMP_NUM_THREADS");
    printf("end-to-end latency, median of %d interleaved runs (min .. max), "
           "OMP_NUM_THREADS=%s:\n",
           repeat, th ? th : "(OpenMP default)");
    s_line("kiln (exported)", a, repeat);
    printf("\n");
    s_line("naive", b, repeat);
    printf("  naive / kiln = %.2f\n", mb / ma);
    if (d && !rc) {
        s_line("oneDNN", c, repeat);
        printf("  oneDNN / kiln = %.2f\n", kl_median(c, (size_t)repeat) / ma);
        kl_export_dnnl_describe(d, stdout);
    }
    free(a);
    free(b);
    free(c);
    return rc;
}

static int s_run(kl_opts_t *o, char *err)
{
    const char *path = kl_opts_str(o, "lib"), *model = kl_opts_str(o, "model");
    s_lib_t lib, nv = {0};
    char dir[4096] = "";
    int rc = s_open(&lib, path, err);
    if (!rc)
        rc = s_naive(model, kl_opts_str(o, "cc"), dir, sizeof dir, err);
    if (!rc) {
        char *np = kl_xasprintf("%s/libkiln_model.so", dir);
        rc = s_open(&nv, np, err);
        free(np);
    }
    if (!rc)
        rc = s_same(&lib, &nv, path, model, err);
    if (!rc) {
        float **p = s_params(&lib, (uint64_t)kl_opts_int(o, "seed"));
        long long n = lib.onumel();
        float *got = kl_xmalloc((size_t)n * sizeof(float));
        float *ref = kl_xmalloc((size_t)n * sizeof(float));
        rc = s_prepare(&lib, p, err);
        if (!rc)
            rc = s_outputs(&lib, &nv, p, got, ref, err);
        if (!rc)
            rc = s_check(got, ref, n, kl_opts_double(o, "rtol"), err);
        kl_dnnl_net_t *d = NULL;
        if (!rc && !kl_opts_bool(o, "no-dnnl"))
            rc = s_dnnl(model, p, lib.nparams(), ref, n,
                        kl_opts_double(o, "rtol"), &d, err);
        if (!rc)
            rc = s_bench(&lib, &nv, d, p, got, (int)kl_opts_int(o, "repeat"),
                         err);
        kl_export_dnnl_close(d);
        for (int i = 0; i < lib.nparams(); i++)
            free(p[i]);
        free(p);
        free(got);
        free(ref);
    }
    if (lib.release)
        lib.release();
    if (nv.h)
        dlclose(nv.h);
    if (lib.h)
        dlclose(lib.h);
    if (*dir)
        s_rmdir(dir);
    return rc;
}

int kiln_cmd_run(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err)) {
        fprintf(stderr, "kiln run: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&o);
        return 0;
    }
    if (!kl_opts_str(o, "lib") || !kl_opts_str(o, "model") || kl_opts_npos(o)) {
        fprintf(stderr, "kiln run: %s\n%s\n",
                kl_opts_npos(o) ? "unexpected argument"
                                : "--lib and --model are required",
                s_usage);
        kl_opts_free(&o);
        return 2;
    }
    char *text = NULL;
    int rc = kl_model_text(kl_opts_str(o, "model"), &text, err);
    free(text);
    if (rc) {
        fprintf(stderr, "kiln run: %s\n", err);
        kl_opts_free(&o);
        return 2;
    }
    rc = s_run(o, err);
    if (rc)
        fprintf(stderr, "kiln run: %s\n", err);
    kl_opts_free(&o);
    return rc ? 1 : 0;
}
