/* kiln run - runs an exported model (libkiln_model.so of kiln export) on
 * the weights it embeds and the input of an .npy file (else random),
 * checks its output against the naive build of the same graph (every
 * task's reference kernel, run once) and, when given, a file of expected
 * values, writes it as .npy, times it, and oneDNN where it can express
 * every layer; with --profile, every layer's time beside its task's tuned
 * latency. The exported build's constant inputs are prepared once
 * (kiln_model_prepare) before the check and the timed runs, as a
 * deployment does at load time. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "kiln_cmds.h"
#include "kiln_run_int.h"
#include "kl_err.h"
#include "kl_export.h"
#include "kl_npy.h"
#include "kl_opt.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"lib", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "the exported library (DIR/libkiln_model.so)"},
    {"model", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME|FILE",
     "the model it was exported from"},
    KILN_DIM_OPTS,
    {"repeat", KL_OPT_INT, "10", 1, 100000, "N",
     "timed runs of the exported build (the median is printed)"},
    {"seed", KL_OPT_INT, "1", 0, 9e18, "S",
     "seed of the random inputs (and of every parameter of a library "
     "without embedded weights)"},
    {"input", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE.npy",
     "the model's input ('<f4', its element count); once per input of the "
     "model, in order"},
    {"output", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE.npy",
     "write the exported build's output there"},
    {"expect", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE.npy",
     "fail unless the output matches these values (within --rtol)"},
    {"rtol", KL_OPT_DOUBLE, "1e-3", 0, 1, "X",
     "largest difference allowed, relative to the reference's largest "
     "magnitude (default 1e-3 against the naive build, 1e-4 against "
     "--expect, 1.6e-2 against both for a library whose manifest says "
     "precision bf16; given, it applies to both)"},
    {"profile", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "time every layer (median of --repeat runs) beside its task's tuned "
     "latency (manifest.json beside the library)"},
    {"cc", KL_OPT_STR, NULL, KL_NOBOUNDS, "CC",
     "C compiler for the naive build (default $CC, else cc)"},
    {"no-dnnl", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL, "do not time oneDNN"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln run --lib DIR/libkiln_model.so --model NAME|FILE "
    "[--batch N] [--seq N]\n"
    "                [--input x.npy] [--output y.npy] [--expect ref.npy "
    "[--rtol X]]\n"
    "                [--profile] [--repeat N]\n"
    "Runs the exported model on its embedded weights and the input (else "
    "random), checks\nit against the naive build of the same graph (and "
    "--expect), writes --output, and\nprints the end-to-end latency "
    "(median of --repeat runs); --profile: every layer's.\n--batch and "
    "--seq default to the library's manifest.json (a different value is "
    "an error).\n"
    "Exit codes: 0 ok, 1 failed, wrong output or a bad .npy, 2 usage.";

/* The default --rtol against --expect. */
#define S_EXPECT_RTOL 1e-4
/* The default --rtol of a bf16 library (its manifest's "precision"),
 * against the naive build and --expect alike: 4 x 2^-8 of the largest
 * magnitude (docs/cli.md, "Precision"). */
#define S_BF16_RTOL 1.6e-2

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
    /* Libraries exported before weights were embedded lack these; a
     * member may be NULL alone. */
    const float *(*pdata)(int);
    int (*trained)(void);
    int (*pshape)(int, long long *);
    int (*oshape)(long long *);
    int (*run_profiled)(const float *const *, float *, double *);
    int (*nlayers)(void);
    const char *(*lname)(int);
    int (*ltask)(int);
    /* The output's element type (0 f32; 3, 4, 5: integer codes written
     * as floats); libraries exported before quantized models lack it. */
    int (*odtype)(void);
    /* Only in a library with an AMX kernel: why Linux did not grant the
     * tile state (NULL: granted); its entries then return 3. */
    const char *(*amx_error)(void);
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
    *(void **)&l->pdata = dlsym(l->h, "kiln_model_param_data");
    *(void **)&l->trained = dlsym(l->h, "kiln_model_trained");
    *(void **)&l->pshape = dlsym(l->h, "kiln_model_param_shape");
    *(void **)&l->oshape = dlsym(l->h, "kiln_model_output_shape");
    *(void **)&l->run_profiled = dlsym(l->h, "kiln_model_run_profiled");
    *(void **)&l->nlayers = dlsym(l->h, "kiln_model_nlayers");
    *(void **)&l->lname = dlsym(l->h, "kiln_model_layer_name");
    *(void **)&l->ltask = dlsym(l->h, "kiln_model_layer_task");
    *(void **)&l->odtype = dlsym(l->h, "kiln_model_output_dtype");
    *(void **)&l->amx_error = dlsym(l->h, "kiln_model_amx_error");
    if (!l->pdata || !l->trained)
        l->pdata = NULL, l->trained = NULL;
    if (!l->run_profiled || !l->nlayers || !l->lname || !l->ltask)
        l->run_profiled = NULL;
    if (!l->name || !l->nparams || !l->pname || !l->pnumel || !l->onumel ||
        !l->run)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s is not a kiln model library (no kiln_model_run "
                         "and friends)",
                         path);
    return KL_OK;
}

/* The parameters of one run: the library's embedded weights (borrowed),
 * the inputs of the --input files, and random values for the rest
 * (inputs in [-1, 1), the weights of a library without embedded ones
 * smaller, so that deep graphs stay in range). */
typedef struct {
    float **p; /* [nparams] */
    bool *own; /* p[i] is ours to free */
    int n;
} s_params_t;

static void s_params_free(s_params_t *ps)
{
    for (int i = 0; i < ps->n; i++)
        if (ps->own[i])
            free(ps->p[i]);
    free(ps->p);
    free(ps->own);
    memset(ps, 0, sizeof *ps);
}

/* Whether parameter i is an input of the graph (weights are "L.weight",
 * "L.bias"; a library with data says it exactly). */
static bool s_is_input(const s_lib_t *l, int i)
{
    return l->pdata ? l->pdata(i) == NULL : strchr(l->pname(i), '.') == NULL;
}

/* The shape of parameter i (its element count, 1-D, for old libraries). */
static int s_pshape(const s_lib_t *l, int i, int64_t *dims)
{
    long long d[8];
    int nd = l->pshape ? l->pshape(i, d) : -1;
    if (nd < 0 || nd > 8) {
        dims[0] = l->pnumel(i);
        return 1;
    }
    for (int k = 0; k < nd; k++)
        dims[k] = d[k];
    return nd;
}

/* The two builds must have the same parameters, of the same shapes, and
 * output. A weight of another shape (the same elements) is a library
 * exported with other value layouts: an NHWC convolution's weight is
 * [R,S,C,K]. */
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
    for (int i = 0; i < a->nparams(); i++) {
        int64_t da[8], db[8];
        int na = s_pshape(a, i, da), nb = s_pshape(b, i, db);
        if (na == nb && !memcmp(da, db, (size_t)na * sizeof da[0]))
            continue;
        if (na == 1 || nb == 1) /* a library from before shapes */
            continue;
        char sa[128], sb[128];
        kl_npy_shape_str(da, na, sa, sizeof sa);
        kl_npy_shape_str(db, nb, sb, sizeof sb);
        return kl_seterr(err, KL_ERR_INVAL,
                         "parameter '%s' is %s in %s but %s in the naive "
                         "build of %s: the library was exported with other "
                         "value layouts (KILN_LAYOUT_F32, KILN_LAYOUT_NCHW); "
                         "run kiln run in the environment kiln export ran in",
                         a->pname(i), sa, lib, sb, model);
    }
    return KL_OK;
}

static int s_params(const s_lib_t *l, kl_opts_t *o, s_params_t *ps, char *err)
{
    const char *const *files = NULL;
    int nfiles = kl_opts_all(o, "input", &files), ninputs = 0;
    for (int i = 0; i < l->nparams(); i++)
        ninputs += s_is_input(l, i);
    if (nfiles && nfiles != ninputs)
        return kl_seterr(err, KL_ERR_INVAL,
                         "the model has %d input%s, %d --input given (one "
                         "per input, in order)",
                         ninputs, ninputs == 1 ? "" : "s", nfiles);
    kl_rng_t r;
    kl_rng_seed(&r, (uint64_t)kl_opts_int(o, "seed"));
    ps->n = l->nparams();
    ps->p = kl_xcalloc((size_t)ps->n + 1, sizeof(float *));
    ps->own = kl_xcalloc((size_t)ps->n + 1, sizeof(bool));
    for (int i = 0, k = 0; i < ps->n; i++) {
        bool input = s_is_input(l, i);
        if (!input && l->pdata) {
            ps->p[i] = (float *)l->pdata(i);
            continue;
        }
        ps->own[i] = true;
        if (input && nfiles) {
            int64_t want[8];
            int nd = s_pshape(l, i, want);
            kl_npy_t a;
            char e2[KL_ERRMSG_LEN];
            int rc = kl_npy_read(files[k], want, nd, &a, e2);
            if (rc)
                return kl_seterr(err, rc, "--input for input '%s': %s",
                                 l->pname(i), e2);
            ps->p[i] = a.data;
            printf("input %s: %s\n", l->pname(i), files[k++]);
            continue;
        }
        long long n = l->pnumel(i);
        ps->p[i] = kl_xmalloc((size_t)n * sizeof(float) + 1);
        float scale = input ? 1.0f : 0.1f;
        for (long long j = 0; j < n; j++)
            ps->p[i][j] = scale * (float)(2 * kl_rng_double(&r) - 1);
    }
    if (!l->pdata)
        printf("no kiln_model_param_data in the library (exported before "
               "weights were embedded): random weights (seed %lld)\n",
               (long long)kl_opts_int(o, "seed"));
    else if (l->trained())
        printf("weights: the model's own, embedded in the library\n");
    else
        printf("weights: kiln export's seeded random ones, embedded in the "
               "library (the model carries none)\n");
    if (!nfiles)
        printf("input%s: random (seed %lld)\n", ninputs == 1 ? "" : "s",
               (long long)kl_opts_int(o, "seed"));
    return KL_OK;
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
    if (rc == 3 && l->amx_error && l->amx_error())
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "kiln_model_prepare returned 3: the library's "
                         "kernels use AMX tiles and %s",
                         l->amx_error());
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

/* The output of one run of each build: the naive build runs this once,
 * never between timed runs. */
static int s_outputs(const s_lib_t *lib, const s_lib_t *nv, float *const *p,
                     float *got, float *ref, char *err)
{
    int a = lib->run((const float *const *)p, got);
    double t0 = kl_now_s();
    int b = a ? 0 : nv->run((const float *const *)p, ref);
    if (!a && !b)
        printf("naive build: one run for the check, %.3f ms (not a "
               "benchmark)\n",
               (kl_now_s() - t0) * 1e3);
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

/* The output's shape (its element count, 1-D, for old libraries). */
static int s_oshape(const s_lib_t *l, int64_t *dims)
{
    long long d[8];
    int nd = l->oshape ? l->oshape(d) : -1;
    if (nd < 0 || nd > 8) {
        dims[0] = l->onumel();
        return 1;
    }
    for (int k = 0; k < nd; k++)
        dims[k] = d[k];
    return nd;
}

/* Fails unless the largest difference of got from ref is at most rtol of
 * ref's largest magnitude; the error names the element (flat and by
 * index), both values and the tolerance. what names the reference. */
static int s_check(const s_lib_t *l, const float *got, const float *ref,
                   long long n, double rtol, const char *what, char *err)
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
    if (!(worst <= rtol * fmax(big, 1e-6))) {
        int64_t sh[8], ix[8];
        int nd = s_oshape(l, sh);
        long long r = at;
        for (int k = nd - 1; k >= 0; k--) {
            ix[k] = sh[k] ? r % sh[k] : 0;
            r = sh[k] ? r / sh[k] : 0;
        }
        char idx[200];
        kl_npy_shape_str(ix, nd, idx, sizeof idx);
        return kl_seterr(err, KL_ERR_RUNTIME,
                         "output differs from %s: element %lld %s is %.9g, "
                         "expected %.9g: difference %.3g > rtol %g x largest "
                         "|expected| %.6g%s",
                         what, at, idx, got[at], ref[at], worst, rtol, big,
                         l->trained && !l->trained()
                             ? " (the library's weights are random: the "
                               "model carried none when it was exported)"
                             : "");
    }
    printf("output matches %s: %lld elements, largest difference %.3g (%.3g "
           "of the largest magnitude, rtol %g)\n",
           what, n, worst, big > 0 ? worst / big : 0.0, rtol);
    return KL_OK;
}

/* --expect: read (its element count must be the output's) before the
 * naive build, so that a bad file fails at once. */
static int s_read_expect(const s_lib_t *l, const char *path, kl_npy_t *a,
                         char *err)
{
    int64_t sh[8];
    int nd = s_oshape(l, sh);
    char e2[KL_ERRMSG_LEN];
    int rc = kl_npy_read(path, sh, nd, a, e2);
    if (rc)
        return kl_seterr(err, rc, "--expect: %s", e2);
    return KL_OK;
}

static int s_write_output(const s_lib_t *l, const char *path, const float *got,
                          char *err)
{
    int64_t sh[8];
    int nd = s_oshape(l, sh);
    int rc = kl_npy_write(path, got, sh, nd, err);
    if (!rc) {
        char s[200];
        printf("wrote the output %s to %s\n",
               kl_npy_shape_str(sh, nd, s, sizeof s), path);
    }
    return rc;
}

/* The naive build in a fresh temporary directory (removed by the caller),
 * of the model resized by dims. */
static int s_naive(const char *model, const kl_model_opts_t *dims,
                   const char *cc, char *dir, size_t n, char *err)
{
    const char *tmp =
        getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, n, "%s/kiln-run-XXXXXX", tmp);
    if (!mkdtemp(dir))
        return kl_seterr(err, KL_ERR_IO, "mkdtemp %s failed", dir);
    printf("building the naive build of %s in %s ...\n", model, dir);
    fflush(stdout);
    return kl_export_naive_opts(model, dims, dir, cc, err);
}

static void s_rmdir(const char *dir)
{
    static const char *files[] = {"kiln_model.c",       "kiln_model.h",
                                  "libkiln_model.so",   "libkiln_model.so.log",
                                  "kiln_model.weights", "kiln_weights.S"};
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
static int s_dnnl(const char *model, const kl_model_opts_t *dims,
                  float *const *p, int np, const float *ref, long long n,
                  double rtol, kl_dnnl_net_t **d, char *err)
{
    double rel = 0;
    int rc = kl_export_dnnl_open_opts(model, dims, p, np, d, err);
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

/* Times the exported build and oneDNN (d, may be NULL) interleaved, one run
 * of each per round after one warm-up run of each (the naive build ran
 * once, for the check, and is not timed), prints the medians and sets *e2e
 * to kiln's. */
static int s_bench(const s_lib_t *lib, kl_dnnl_net_t *d, float *const *p,
                   float *out, int repeat, double *e2e, char *err)
{
    double *a = kl_xcalloc((size_t)repeat, sizeof(double));
    double *c = kl_xcalloc((size_t)repeat, sizeof(double));
    int rc = KL_OK;
    s_time(lib, p, out); /* warm-up */
    if (d)
        s_time_dnnl(d, out, &rc, err);
    for (int i = 0; i < repeat; i++) {
        a[i] = s_time(lib, p, out);
        if (d)
            c[i] = s_time_dnnl(d, out, &rc, err);
    }
    double ma = kl_median(a, (size_t)repeat);
    const char *th = getenv("OMP_NUM_THREADS"), *bind = getenv("OMP_PROC_BIND");
    printf("end-to-end latency, median of %d runs (min .. max), "
           "OMP_NUM_THREADS=%s, OMP_PROC_BIND=%s:\n",
           repeat, th ? th : "(OpenMP default)",
           bind ? bind : "(unset: threads not pinned)");
    s_line("kiln (exported)", a, repeat);
    printf("\n");
    if (d && !rc) {
        s_line("oneDNN", c, repeat);
        printf("  oneDNN / kiln = %.2f\n", kl_median(c, (size_t)repeat) / ma);
        kl_export_dnnl_describe(d, stdout);
    }
    free(a);
    free(c);
    *e2e = ma;
    return rc;
}

/* ---- --profile ---- */

/* Every layer's median time over repeat runs of kiln_model_run_profiled,
 * beside its task's tuned latency, and the totals. */
static int s_profile(const s_lib_t *l, const char *lib, float *const *p,
                     float *out, int repeat, double e2e, char *err)
{
    if (!l->run_profiled)
        return kl_seterr(err, KL_ERR_INVAL,
                         "--profile: %s has no kiln_model_run_profiled "
                         "(exported before per-layer profiling): export it "
                         "again",
                         lib);
    int nl = l->nlayers(), nt = 0;
    double *row = kl_xcalloc((size_t)nl + 1, sizeof(double));
    double *t = kl_xcalloc((size_t)nl * (size_t)repeat + 1, sizeof(double));
    int rc = l->run_profiled((const float *const *)p, out, row); /* warm */
    for (int r = 0; !rc && r < repeat; r++) {
        rc = l->run_profiled((const float *const *)p, out, row);
        for (int k = 0; k < nl; k++)
            t[(size_t)k * (size_t)repeat + (size_t)r] = row[k];
    }
    if (rc) {
        free(row);
        free(t);
        return kl_seterr(err, KL_ERR_NOMEM,
                         "kiln_model_run_profiled returned %d: a layer's "
                         "prepare step ran out of memory",
                         rc);
    }
    kiln_run__mtask_t *mt = kiln_run__manifest_tasks(lib, &nt);
    printf("profile: every layer's median of %d runs of "
           "kiln_model_run_profiled, beside its task's tuned latency "
           "(manifest.json):\n",
           repeat);
    printf("  %-20s %5s  %-44s %10s %10s\n", "layer", "task", "workload",
           "layer ms", "tuned ms");
    double sum = 0, tuned = 0;
    int naive = 0;
    for (int k = 0; k < nl; k++) {
        double med = kl_median(t + (size_t)k * (size_t)repeat, (size_t)repeat);
        int task = l->ltask(k);
        const kiln_run__mtask_t *m = task >= 0 && task < nt ? &mt[task] : NULL;
        char tk[16] = "-", tl[32] = "-";
        if (task >= 0)
            snprintf(tk, sizeof tk, "%d", task);
        if (m && !isnan(m->latency))
            snprintf(tl, sizeof tl, "%.4f", m->latency * 1e3);
        else if (m)
            snprintf(tl, sizeof tl, "naive");
        printf("  %-20s %5s  %-44s %10.4f %10s\n", l->lname(k), tk,
               m           ? m->name
               : task >= 0 ? "?"
                           : "(no task)",
               med * 1e3, tl);
        sum += med;
    }
    for (int i = 0; i < nt; i++) {
        if (isnan(mt[i].latency))
            naive++;
        else
            tuned += mt[i].weight * mt[i].latency;
    }
    printf("total: sum of layer medians             %10.4f ms\n", sum * 1e3);
    printf("total: end-to-end median                %10.4f ms "
           "(kiln_model_run, layers not timed)\n",
           e2e * 1e3);
    if (nt)
        printf("total: sum of weighted tuned latencies  %10.4f ms "
               "(%d tasks; %d naive, without a latency)\n",
               tuned * 1e3, nt, naive);
    else
        printf("total: sum of weighted tuned latencies  %10s (no "
               "manifest.json)\n",
               "-");
    free(mt);
    free(row);
    free(t);
    return KL_OK;
}

/* The checks and the timings, once both builds are loaded. */
static int s_checks(kl_opts_t *o, const kl_model_opts_t *dims,
                    const s_lib_t *lib, const s_lib_t *nv, const s_params_t *ps,
                    const kl_npy_t *expect, char *err)
{
    const char *model = kl_opts_str(o, "model");
    const char *epath = kl_opts_str(o, "expect"),
               *opath = kl_opts_str(o, "output");
    double rtol = kl_opts_double(o, "rtol"), ertol = S_EXPECT_RTOL;
    if (!kl_opts_given(o, "rtol") &&
        kiln_run__lib_bf16(kl_opts_str(o, "lib"))) {
        rtol = ertol = S_BF16_RTOL;
        printf("precision bf16 (manifest.json): rtol %g\n", rtol);
    }
    /* Integer outputs (a graph ending in a q-op or quantize): the naive
     * build's exactly, unless --rtol says otherwise. */
    double nrtol =
        lib->odtype && lib->odtype() != 0 && !kl_opts_given(o, "rtol") ? 0
                                                                       : rtol;
    int repeat = (int)kl_opts_int(o, "repeat");
    float **p = ps->p;
    long long n = lib->onumel();
    float *got = kl_xmalloc((size_t)n * sizeof(float));
    float *ref = kl_xmalloc((size_t)n * sizeof(float));
    int rc = s_prepare(lib, p, err);
    if (!rc)
        rc = s_outputs(lib, nv, p, got, ref, err);
    if (!rc && opath)
        rc = s_write_output(lib, opath, got, err);
    if (!rc)
        rc = s_check(lib, got, ref, n, nrtol, "the naive build", err);
    if (!rc && epath)
        rc = s_check(lib, got, expect->data, n,
                     kl_opts_given(o, "rtol") ? rtol : ertol, epath, err);
    double e2e = 0;
    kl_dnnl_net_t *d = NULL;
    if (!rc && !kl_opts_bool(o, "no-dnnl"))
        rc = s_dnnl(model, dims, p, lib->nparams(), ref, n, rtol, &d, err);
    if (!rc)
        rc = s_bench(lib, d, p, got, repeat, &e2e, err);
    kl_export_dnnl_close(d);
    if (!rc && kl_opts_bool(o, "profile"))
        rc = s_profile(lib, kl_opts_str(o, "lib"), p, got, repeat, e2e, err);
    free(got);
    free(ref);
    return rc;
}

static int s_run(kl_opts_t *o, const kl_model_opts_t *dims, char *err)
{
    const char *path = kl_opts_str(o, "lib"), *model = kl_opts_str(o, "model");
    s_lib_t lib, nv = {0};
    s_params_t ps = {0};
    kl_npy_t expect = {0};
    char dir[4096] = "";
    int rc = s_open(&lib, path, err);
    /* The .npy files first: a bad one fails before the naive build. */
    if (!rc)
        rc = s_params(&lib, o, &ps, err);
    if (!rc && kl_opts_str(o, "expect"))
        rc = s_read_expect(&lib, kl_opts_str(o, "expect"), &expect, err);
    if (!rc)
        rc = s_naive(model, dims, kl_opts_str(o, "cc"), dir, sizeof dir, err);
    if (!rc) {
        char *np = kl_xasprintf("%s/libkiln_model.so", dir);
        rc = s_open(&nv, np, err);
        free(np);
    }
    if (!rc)
        rc = s_same(&lib, &nv, path, model, err);
    if (!rc)
        rc = s_checks(o, dims, &lib, &nv, &ps, &expect, err);
    s_params_free(&ps);
    kl_npy_free(&expect);
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
    kl_model_opts_t dims = {0};
    char *text = NULL;
    int rc = kiln_run__lib_dims(o, &dims, err);
    if (!rc)
        rc = kl_model_text_opts(kl_opts_str(o, "model"), &dims, &text, err);
    free(text);
    if (rc) {
        fprintf(stderr, "kiln run: %s\n", err);
        kl_opts_free(&o);
        return 2;
    }
    rc = s_run(o, &dims, err);
    if (rc)
        fprintf(stderr, "kiln run: %s\n", err);
    kl_opts_free(&o);
    return rc ? 1 : 0;
}
