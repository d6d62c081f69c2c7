/* Unit tests of the exported library's weights and layers
 * (kl_export.h, kl_export_write_graph; the generated kiln_model.h): the
 * library is built with the system compiler from reference kernels,
 * loaded with dlopen and checked against values computed here.
 *  - the model's own parameters: embedded as given (kiln_model_param_data,
 *    kiln_model.weights), kiln_model_trained, kiln_model_infer on them
 *    through a dense layer and an affine layer_norm with its eps;
 *  - a parameter the model lacks, or of another size: the error names it;
 *  - no parameters of the model's own: seeded random ones, the same in the
 *    naive build;
 *  - a model of two inputs: kiln_model_infer refuses, _infer_n runs;
 *  - layers: names, tasks and kiln_model_run_profiled's times;
 *  - the layers without a task (transposes of every kind, one a view,
 *    softmax, affine layer_norm, gelu), below and above the size from
 *    which they run on threads, against plain loops here. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_export.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

#include "export_fx.h"

/* d: dense 2x8 -> 2x4 with bias; l: layer_norm over the 4 outputs with
 * eps 0.5 and its weight and bias; sm: softmax. */
static const char s_graph[] = "model wts\n"
                              "input x 2x8\n"
                              "d = dense x O=4 bias=1\n"
                              "l = layer_norm d eps=0.5 affine=1\n"
                              "sm = softmax l\n";

/* Two inputs, no weight: y = a b. */
static const char s_two[] = "model two\n"
                            "input a 2x8\n"
                            "input b 8x4\n"
                            "y = matmul a b\n";

typedef struct {
    char dir[512];
    char err[KL_ERRMSG_LEN];
} fx_t;

typedef struct {
    void *h;
    int (*nparams)(void);
    const char *(*pname)(int);
    long long (*pnumel)(int);
    int (*pshape)(int, long long *);
    int (*oshape)(long long *);
    const float *(*pdata)(int);
    int (*trained)(void);
    int (*ninputs)(void);
    int (*infer)(const float *, float *);
    int (*infer_n)(const float *const *, float *);
    int (*run)(const float *const *, float *);
    int (*run_profiled)(const float *const *, float *, double *);
    int (*nlayers)(void);
    const char *(*lname)(int);
    int (*ltask)(int);
} lib_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    if (!kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-export-wts-XXXXXX"))
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    s_rmrf(fx->dir);
    free(fx);
    return 0;
}

/* Writes (and builds, with build) the graph `text` with reference kernels
 * and the parameters ps into fx->dir/sub; returns kl_export_write_graph's
 * code. */
static int s_export(fx_t *fx, const char *text, const char *sub,
                    const kl_model_params_t *ps, bool build)
{
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_parse(text, "test.graph", &m, fx->err), KL_OK);
    int n = kl_model_ntasks(m);
    kl_kernel_t *ks = kl_xcalloc((size_t)n, sizeof *ks);
    for (int t = 0; t < n; t++) {
        char entry[32];
        snprintf(entry, sizeof entry, "kiln_task_%02d", t);
        assert_int_equal(kl_codegen_reference(kl_model_task(m, t)->w, entry,
                                              &ks[t], fx->err),
                         KL_OK);
    }
    char *dir = kl_xasprintf("%s/%s", fx->dir, sub);
    assert_int_equal(kl_mkdirs(dir, fx->err), KL_OK);
    int rc = kl_export_write_graph(text, "test.graph", m, ks, false, ps, dir,
                                   build, NULL, fx->err);
    for (int t = 0; t < n; t++)
        kl_kernel_free(&ks[t]);
    free(ks);
    free(dir);
    kl_model_destroy(&m);
    return rc;
}

static void s_open(fx_t *fx, lib_t *l, const char *sub)
{
    char *p = kl_xasprintf("%s/%s/libkiln_model.so", fx->dir, sub);
    memset(l, 0, sizeof *l);
    l->h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!l->h)
        fail_msg("dlopen %s: %s", p, dlerror());
    free(p);
    *(void **)&l->nparams = dlsym(l->h, "kiln_model_nparams");
    *(void **)&l->pname = dlsym(l->h, "kiln_model_param_name");
    *(void **)&l->pnumel = dlsym(l->h, "kiln_model_param_numel");
    *(void **)&l->pshape = dlsym(l->h, "kiln_model_param_shape");
    *(void **)&l->oshape = dlsym(l->h, "kiln_model_output_shape");
    *(void **)&l->pdata = dlsym(l->h, "kiln_model_param_data");
    *(void **)&l->trained = dlsym(l->h, "kiln_model_trained");
    *(void **)&l->ninputs = dlsym(l->h, "kiln_model_ninputs");
    *(void **)&l->infer = dlsym(l->h, "kiln_model_infer");
    *(void **)&l->infer_n = dlsym(l->h, "kiln_model_infer_n");
    *(void **)&l->run = dlsym(l->h, "kiln_model_run");
    *(void **)&l->run_profiled = dlsym(l->h, "kiln_model_run_profiled");
    *(void **)&l->nlayers = dlsym(l->h, "kiln_model_nlayers");
    *(void **)&l->lname = dlsym(l->h, "kiln_model_layer_name");
    *(void **)&l->ltask = dlsym(l->h, "kiln_model_layer_task");
    assert_true(l->nparams && l->pname && l->pnumel && l->pshape && l->oshape &&
                l->pdata && l->trained && l->ninputs && l->infer &&
                l->infer_n && l->run && l->run_profiled && l->nlayers &&
                l->lname && l->ltask);
}

/* The parameters of s_graph, with values of their own. */
static void s_own(kl_model_params_t *ps)
{
    static const struct {
        const char *name;
        int64_t n;
    } defs[] = {
        {"d.weight", 32}, {"d.bias", 4}, {"l.weight", 4}, {"l.bias", 4}};
    ps->n = 4;
    ps->p = kl_xcalloc(4, sizeof *ps->p);
    for (int i = 0; i < 4; i++) {
        ps->p[i].name = kl_xstrdup(defs[i].name);
        ps->p[i].numel = defs[i].n;
        ps->p[i].data = kl_xmalloc((size_t)defs[i].n * sizeof(float));
        for (int k = 0; k < defs[i].n; k++)
            ps->p[i].data[k] = (float)((k * 5 + i * 3) % 11 - 5) * 0.125f;
    }
}

/* Frees what s_own made (not kl_model_params_free: these are the test's
 * own allocations). */
static void s_own_free(kl_model_params_t *ps)
{
    for (int i = 0; i < ps->n; i++) {
        free(ps->p[i].name);
        free(ps->p[i].data);
    }
    free(ps->p);
    memset(ps, 0, sizeof *ps);
}

/* s_graph in double: softmax(layer_norm(x W^T + b) * g + be). */
static void s_want(const float *x, const kl_model_params_t *ps, double *y)
{
    const float *W = ps->p[0].data, *b = ps->p[1].data;
    const float *g = ps->p[2].data, *be = ps->p[3].data;
    for (int n = 0; n < 2; n++) {
        double d[4], m = 0, v = 0, s = 0;
        for (int o = 0; o < 4; o++) {
            d[o] = b[o];
            for (int i = 0; i < 8; i++)
                d[o] += (double)x[n * 8 + i] * W[o * 8 + i];
            m += d[o] / 4;
        }
        for (int o = 0; o < 4; o++)
            v += (d[o] - m) * (d[o] - m) / 4;
        for (int o = 0; o < 4; o++) {
            d[o] = (d[o] - m) / sqrt(v + 0.5) * g[o] + be[o];
            s += exp(d[o]);
        }
        for (int o = 0; o < 4; o++)
            y[n * 4 + o] = exp(d[o]) / s;
    }
}

static void s_near(const float *got, const double *want, int n)
{
    for (int k = 0; k < n; k++)
        if (!(fabs(got[k] - want[k]) <= 1e-5))
            fail_msg("output %d is %.9g, expected %.9g", k, got[k], want[k]);
}

static void test_own_weights(void **state)
{
    fx_t *fx = *state;
    kl_model_params_t ps = {0};
    s_own(&ps);
    if (s_export(fx, s_graph, "own", &ps, true))
        fail_msg("%s", fx->err);
    lib_t l;
    s_open(fx, &l, "own");
    assert_int_equal(l.trained(), 1);
    assert_int_equal(l.ninputs(), 1);
    assert_int_equal(l.nparams(), 5);
    assert_string_equal(l.pname(0), "x");
    assert_null(l.pdata(0));
    assert_null(l.pdata(5));
    assert_null(l.pdata(-1));
    for (int i = 1; i < 5; i++) {
        const kl_model_param_t *q = kl_model_params_find(&ps, l.pname(i));
        if (!q)
            fail_msg("parameter %s is not the model's", l.pname(i));
        assert_int_equal(l.pnumel(i), q->numel);
        assert_non_null(l.pdata(i));
        assert_memory_equal(l.pdata(i), q->data,
                            (size_t)q->numel * sizeof(float));
        /* Every parameter at a multiple of 64 bytes. */
        assert_int_equal((uintptr_t)l.pdata(i) % 64, 0);
    }
    long long dims[8];
    assert_int_equal(l.pshape(1, dims), 2); /* d.weight [O, I] */
    assert_true(dims[0] == 4 && dims[1] == 8);
    assert_int_equal(l.pshape(3, dims), 1); /* l.weight [4] */
    assert_true(dims[0] == 4);
    assert_int_equal(l.pshape(9, dims), -1);
    assert_int_equal(l.oshape(dims), 2);
    assert_true(dims[0] == 2 && dims[1] == 4);
    /* kiln_model.weights: the same floats, d.bias at float 32 (after
     * d.weight's 32), l.weight at 48, l.bias at 64. */
    char *wp = kl_xasprintf("%s/own/kiln_model.weights", fx->dir), *w = NULL;
    size_t wlen = 0;
    assert_int_equal(kl_read_file(wp, &w, &wlen, fx->err), KL_OK);
    assert_int_equal(wlen, 68 * 4);
    assert_memory_equal(w + 32 * 4, ps.p[1].data, 16);
    assert_memory_equal(w + 64 * 4, ps.p[3].data, 16);
    free(w);
    free(wp);

    float x[16], got[8], again[8];
    double want[8];
    for (int k = 0; k < 16; k++)
        x[k] = (float)(k % 5) * 0.5f - 1.0f;
    s_want(x, &ps, want);
    assert_int_equal(l.infer(x, got), 0);
    s_near(got, want, 8);
    assert_int_equal(l.infer(NULL, got), 2);
    const float *in[1] = {x};
    assert_int_equal(l.infer_n(in, again), 0);
    assert_memory_equal(got, again, sizeof got);

    /* Layers: d (task 0), l and sm without a task; the profiled run gives
     * the same output and a time per layer. */
    assert_int_equal(l.nlayers(), 3);
    assert_string_equal(l.lname(0), "d");
    assert_string_equal(l.lname(1), "l");
    assert_string_equal(l.lname(2), "sm");
    assert_null(l.lname(3));
    assert_int_equal(l.ltask(0), 0);
    assert_int_equal(l.ltask(1), -1);
    assert_int_equal(l.ltask(2), -1);
    assert_int_equal(l.ltask(3), -1);
    double t[4] = {-1, -1, -1, -7};
    const float *p[5];
    for (int i = 0; i < 5; i++)
        p[i] = i ? l.pdata(i) : x;
    assert_int_equal(l.run_profiled(p, again, t), 0);
    assert_memory_equal(got, again, sizeof got);
    for (int k = 0; k < 3; k++)
        assert_true(t[k] >= 0 && t[k] < 10);
    assert_true(t[3] == -7); /* nothing written past the layers */
    dlclose(l.h);
    s_own_free(&ps);
}

static void test_missing_or_wrong_size(void **state)
{
    fx_t *fx = *state;
    kl_model_params_t ps = {0};
    s_own(&ps);
    free(ps.p[3].name);
    ps.p[3].name = kl_xstrdup("l.beta");
    assert_int_equal(s_export(fx, s_graph, "miss", &ps, false),
                     KL_ERR_INTERNAL);
    if (!strstr(fx->err, "'l.bias'") || !strstr(fx->err, "4 parameters"))
        fail_msg("does not name the missing parameter: %s", fx->err);
    free(ps.p[3].name);
    ps.p[3].name = kl_xstrdup("l.bias");
    ps.p[1].numel = 3;
    assert_int_equal(s_export(fx, s_graph, "size", &ps, false),
                     KL_ERR_INTERNAL);
    if (!strstr(fx->err, "'d.bias'") || !strstr(fx->err, "has 3 floats") ||
        !strstr(fx->err, "takes 4"))
        fail_msg("does not name both sizes: %s", fx->err);
    s_own_free(&ps);
}

static void test_random_weights(void **state)
{
    fx_t *fx = *state;
    kl_model_params_t none = {0};
    if (s_export(fx, s_graph, "rnd", &none, true))
        fail_msg("%s", fx->err);
    char *gpath = kl_xasprintf("%s/wts.graph", fx->dir);
    char *nvd = kl_xasprintf("%s/naive", fx->dir);
    assert_int_equal(kl_write_file(gpath, s_graph, strlen(s_graph), fx->err),
                     KL_OK);
    if (kl_export_naive(gpath, nvd, NULL, fx->err))
        fail_msg("%s", fx->err);
    lib_t l, nv;
    s_open(fx, &l, "rnd");
    s_open(fx, &nv, "naive");
    assert_int_equal(l.trained(), 0);
    assert_int_equal(nv.trained(), 0);
    /* Uniform in [-0.1, 0.1), kl_rng seeded with KL_EXPORT_WEIGHT_SEED,
     * parameter after parameter; the naive build has the same. */
    kl_rng_t r;
    kl_rng_seed(&r, KL_EXPORT_WEIGHT_SEED);
    kl_model_params_t ps = {0};
    s_own(&ps); /* the shapes; the values are replaced */
    for (int i = 1; i < 5; i++) {
        kl_model_param_t *q = &ps.p[i - 1];
        assert_string_equal(l.pname(i), q->name);
        for (int k = 0; k < q->numel; k++) {
            q->data[k] =
                (float)(KL_EXPORT_WEIGHT_SCALE * (2 * kl_rng_double(&r) - 1));
            assert_true(q->data[k] >= -0.1f && q->data[k] < 0.1f);
        }
        assert_memory_equal(l.pdata(i), q->data,
                            (size_t)q->numel * sizeof(float));
        assert_memory_equal(nv.pdata(i), q->data,
                            (size_t)q->numel * sizeof(float));
    }
    float x[16], got[8];
    double want[8];
    for (int k = 0; k < 16; k++)
        x[k] = (float)(k % 3) - 1.0f;
    s_want(x, &ps, want);
    assert_int_equal(l.infer(x, got), 0);
    s_near(got, want, 8);
    dlclose(l.h);
    dlclose(nv.h);
    s_own_free(&ps);
    free(gpath);
    free(nvd);
}

static void test_two_inputs(void **state)
{
    fx_t *fx = *state;
    if (s_export(fx, s_two, "two", NULL, true))
        fail_msg("%s", fx->err);
    lib_t l;
    s_open(fx, &l, "two");
    assert_int_equal(l.ninputs(), 2);
    assert_int_equal(l.nparams(), 2);
    assert_null(l.pdata(0));
    assert_null(l.pdata(1));
    float a[16], b[32], got[8];
    for (int k = 0; k < 16; k++)
        a[k] = (float)(k % 4) - 1.5f;
    for (int k = 0; k < 32; k++)
        b[k] = (float)(k % 7) * 0.25f;
    assert_int_equal(l.infer(a, got), 2); /* two inputs: refused */
    const float *in[2] = {a, b};
    assert_int_equal(l.infer_n(in, got), 0);
    for (int n = 0; n < 2; n++)
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int k = 0; k < 8; k++)
                s += (double)a[n * 8 + k] * b[k * 4 + j];
            if (!(fabs(got[n * 4 + j] - s) <= 1e-5))
                fail_msg("y[%d,%d] is %g, expected %g", n, j, got[n * 4 + j],
                         s);
        }
    dlclose(l.h);
}

/* Transposes that keep the last dim (t3), move it (t1, t2, t4, t5: the
 * last two merge to a 2-D transpose), move only a dim of size 1 (v, a
 * view), then softmax, affine layer_norm and gelu, on x of [A,B,1,C]; y
 * = x + x gives the graph a task. */
static const char s_untuned_fmt[] = "model untuned\n"
                                    "input x %dx%dx1x%d\n"
                                    "y = add x x\n"
                                    "t1 = transpose y perm=2,0,3,1\n"
                                    "t2 = transpose t1 perm=0,1,3,2\n"
                                    "v = transpose t2 perm=1,2,0,3\n"
                                    "t3 = transpose v perm=1,0,2,3\n"
                                    "sm = softmax t3\n"
                                    "ln = layer_norm sm eps=0.001 affine=1\n"
                                    "ge = gelu ln\n"
                                    "t4 = transpose ge perm=3,2,1,0\n"
                                    "t5 = transpose t4 perm=2,3,0,1\n";

/* y = x transposed through perm, x of 4 dims sh (sh is then y's). */
static void s_ref_transpose(const double *x, double *y, int64_t *sh,
                            const int *perm)
{
    int64_t st[4], n = 1, os[4];
    for (int k = 3; k >= 0; k--) {
        st[k] = n;
        n *= sh[k];
    }
    for (int k = 0; k < 4; k++)
        os[k] = sh[perm[k]];
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < os[0]; i0++)
        for (int64_t i1 = 0; i1 < os[1]; i1++)
            for (int64_t i2 = 0; i2 < os[2]; i2++)
                for (int64_t i3 = 0; i3 < os[3]; i3++)
                    y[o++] = x[i0 * st[perm[0]] + i1 * st[perm[1]] +
                               i2 * st[perm[2]] + i3 * st[perm[3]]];
    memcpy(sh, os, sizeof os);
}

/* s_untuned_fmt in double, in place in a (with room in b). */
static void s_ref_untuned(double *a, double *b, int64_t *sh, int64_t n,
                          const float *g, const float *be)
{
    static const int p1[] = {2, 0, 3, 1}, p2[] = {0, 1, 3, 2},
                     pv[] = {1, 2, 0, 3}, p3[] = {1, 0, 2, 3},
                     p4[] = {3, 2, 1, 0}, p5[] = {2, 3, 0, 1};
    for (int64_t i = 0; i < n; i++)
        a[i] += a[i];
    s_ref_transpose(a, b, sh, p1);
    s_ref_transpose(b, a, sh, p2);
    s_ref_transpose(a, b, sh, pv);
    s_ref_transpose(b, a, sh, p3);
    int64_t c = sh[3];
    for (double *r = a; r < a + n; r += c) {
        double m = r[0], s = 0, v = 0;
        for (int64_t j = 0; j < c; j++)
            m = r[j] > m ? r[j] : m;
        for (int64_t j = 0; j < c; j++)
            s += r[j] = exp(r[j] - m);
        for (int64_t j = 0; j < c; j++)
            r[j] /= s;
        m = 0;
        for (int64_t j = 0; j < c; j++)
            m += r[j] / (double)c;
        for (int64_t j = 0; j < c; j++)
            v += (r[j] - m) * (r[j] - m) / (double)c;
        for (int64_t j = 0; j < c; j++) {
            double z = (r[j] - m) / sqrt(v + 0.001) * g[j] + be[j];
            r[j] = 0.5 * z * (1 + erf(z / sqrt(2.0)));
        }
    }
    s_ref_transpose(a, b, sh, p4);
    s_ref_transpose(b, a, sh, p5);
}

static void s_untuned(fx_t *fx, int A, int B, int C)
{
    char *text = kl_xasprintf(s_untuned_fmt, A, B, C);
    char sub[32];
    snprintf(sub, sizeof sub, "u%d", A * B * C);
    if (s_export(fx, text, sub, NULL, true))
        fail_msg("%s", fx->err);
    lib_t l;
    s_open(fx, &l, sub);
    /* Every layer but the view v, in order; ln's parameters. */
    static const char *const names[] = {"y",  "t1", "t2", "t3", "sm",
                                        "ln", "ge", "t4", "t5"};
    assert_int_equal(l.nlayers(), 9);
    for (int i = 0; i < 9; i++)
        assert_string_equal(l.lname(i), names[i]);
    assert_int_equal(l.nparams(), 3);
    assert_string_equal(l.pname(1), "ln.weight");
    assert_string_equal(l.pname(2), "ln.bias");
    long long dims[8];
    assert_int_equal(l.oshape(dims), 4);
    assert_true(dims[0] == A && dims[1] == B && dims[2] == C && dims[3] == 1);

    int64_t n = (int64_t)A * B * C, sh[4] = {A, B, 1, C};
    float *x = kl_xmalloc((size_t)n * sizeof *x);
    float *got = kl_xmalloc((size_t)n * sizeof *got);
    double *a = kl_xmalloc((size_t)n * sizeof *a);
    double *b = kl_xmalloc((size_t)n * sizeof *b);
    for (int64_t i = 0; i < n; i++)
        a[i] = x[i] = (float)((i * 37 + i / 11) % 97) / 16.0f - 3.0f;
    s_ref_untuned(a, b, sh, n, l.pdata(1), l.pdata(2));
    assert_true(sh[0] == A && sh[1] == B && sh[2] == C && sh[3] == 1);
    assert_int_equal(l.infer(x, got), 0);
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - a[i]) <= 2e-5 * (1 + fabs(a[i]))))
            fail_msg("%s: output %lld is %.9g, expected %.9g", sub,
                     (long long)i, got[i], a[i]);
    free(x);
    free(got);
    free(a);
    free(b);
    free(text);
    dlclose(l.h);
}

/* Below the threads' size (105 elements) and above it (37800). */
static void test_untuned_layers(void **state)
{
    s_untuned(*state, 3, 5, 7);
    s_untuned(*state, 6, 70, 90);
}

/* The activations without a task, each of y = x + x, summed by adds
 * (tasks); then four 1x1 convolutions of y (B channels in, B out) with
 * an activation fused into each (silu after the bias, gelu in both forms,
 * hard_sigmoid with the layer's alpha and beta: tasks with act=, the
 * activation layers not run on their own), added in; against the ONNX
 * definitions in double, on the library's own (seeded) weights. */
static const char s_acts_fmt[] = "model acts\n"
                                 "input x %dx%dx1x%d\n"
                                 "y = add x x\n"
                                 "a1 = sigmoid y\n"
                                 "a2 = tanh y\n"
                                 "a3 = hard_sigmoid y alpha=0.25 beta=0.375\n"
                                 "a4 = hard_swish y\n"
                                 "a5 = leaky_relu y alpha=0.125\n"
                                 "a6 = elu y alpha=0.5\n"
                                 "a7 = silu y\n"
                                 "a8 = leaky_relu y\n"
                                 "s1 = add a1 a2\n"
                                 "s2 = add s1 a3\n"
                                 "s3 = add s2 a4\n"
                                 "s4 = add s3 a5\n"
                                 "s5 = add s4 a6\n"
                                 "s6 = add s5 a7\n"
                                 "s7 = add s6 a8\n"
                                 "c1 = conv2d y K=%d R=1 bias=1\n"
                                 "f1 = silu c1\n"
                                 "c2 = conv2d y K=%d R=1\n"
                                 "f2 = gelu c2 approximate=tanh\n"
                                 "c3 = conv2d y K=%d R=1\n"
                                 "f3 = gelu c3\n"
                                 "c4 = conv2d y K=%d R=1 bias=1\n"
                                 "f4 = hard_sigmoid c4 alpha=0.25 "
                                 "beta=0.375\n"
                                 "s8 = add s7 f1\n"
                                 "s9 = add s8 f2\n"
                                 "s10 = add s9 f3\n"
                                 "s11 = add s10 f4\n";

static double s_ref_acts(double x)
{
    double y = x + x, c3 = 0.25 * y + 0.375, c4 = y / 6 + 0.5;
    c3 = c3 < 0 ? 0 : c3 > 1 ? 1 : c3;
    c4 = c4 < 0 ? 0 : c4 > 1 ? 1 : c4;
    return 1 / (1 + exp(-y)) + tanh(y) + c3 + y * c4 +
           (y >= 0 ? y : 0.125 * y) + (y >= 0 ? y : 0.5 * (exp(y) - 1)) +
           y / (1 + exp(-y)) + (y >= 0 ? y : 0.01 * y);
}

/* The data of l's parameter name. */
static const float *s_pdata(const lib_t *l, const char *name)
{
    for (int i = 0; i < l->nparams(); i++)
        if (l->pname(i) && strcmp(l->pname(i), name) == 0)
            return l->pdata(i);
    fail_msg("the library has no parameter %s", name);
    return NULL;
}

/* The fused convolutions' part of output (n, k, w): ck = sum_c
 * W[k][c] 2 x[n][c][w] (+ b[k]) through each one's activation. */
static double s_ref_fused(const lib_t *l, const float *x, int B, int C,
                          int64_t i)
{
    int64_t n = i / ((int64_t)B * C), k = i / C % B, w = i % C;
    double s = 0;
    for (int v = 1; v <= 4; v++) {
        char nm[32];
        snprintf(nm, sizeof nm, "c%d.weight", v);
        const float *W = s_pdata(l, nm);
        double c = 0;
        if (v == 1 || v == 4) {
            snprintf(nm, sizeof nm, "c%d.bias", v);
            c = s_pdata(l, nm)[k];
        }
        for (int ci = 0; ci < B; ci++)
            c += (double)W[k * B + ci] * 2.0 * x[(n * B + ci) * C + w];
        if (v == 1)
            s += c / (1 + exp(-c));
        else if (v == 2)
            s += 0.5 * c *
                 (1 + tanh(sqrt(2 / M_PI) * (c + 0.044715 * c * c * c)));
        else if (v == 3)
            s += 0.5 * c * (1 + erf(c / sqrt(2)));
        else
            s += fmin(1, fmax(0, 0.25 * c + 0.375));
    }
    return s;
}

static void s_acts(fx_t *fx, int A, int B, int C)
{
    char *text = kl_xasprintf(s_acts_fmt, A, B, C, B, B, B, B);
    char sub[32];
    snprintf(sub, sizeof sub, "a%d", A * B * C);
    if (s_export(fx, text, sub, NULL, true))
        fail_msg("%s", fx->err);
    lib_t l;
    s_open(fx, &l, sub);
    /* 16 + four convolutions and their adds; no fused activation */
    assert_int_equal(l.nlayers(), 24);
    assert_string_equal(l.lname(1), "a1");
    assert_string_equal(l.lname(7), "a7");
    for (int i = 0; i < l.nlayers(); i++)
        assert_int_not_equal(l.lname(i)[0], 'f');
    int64_t n = (int64_t)A * B * C;
    float *x = kl_xmalloc((size_t)n * sizeof *x);
    float *got = kl_xmalloc((size_t)n * sizeof *got);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 37 + i / 11) % 97) / 12.0f - 4.0f;
    assert_int_equal(l.infer(x, got), 0);
    for (int64_t i = 0; i < n; i++) {
        double want = s_ref_acts(x[i]) + s_ref_fused(&l, x, B, C, i);
        if (!(fabs(got[i] - want) <= 2e-5 * (1 + fabs(want))))
            fail_msg("%s: output %lld (x %.9g) is %.9g, expected %.9g", sub,
                     (long long)i, x[i], got[i], want);
    }
    free(x);
    free(got);
    free(text);
    dlclose(l.h);
}

/* Below the threads' size and above it. */
static void test_activations(void **state)
{
    s_acts(*state, 3, 5, 7);
    s_acts(*state, 6, 70, 90);
}

int main(void)
{
    if (system("${CC:-cc} --version >/dev/null 2>&1") != 0) {
        printf("SKIP: no C compiler (cc or $CC) to build the library\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_own_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_or_wrong_size, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_inputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_untuned_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_activations, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
