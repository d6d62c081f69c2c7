/* Unit tests of kiln export on quantized (QDQ) models (kl_export.h,
 * docs/cli.md "Export and run"): libkiln_model.so is built with the
 * system compiler, loaded with dlopen and run.
 *  - the committed tests/data/onnx/small_cnn_int8.onnx exported with the
 *    naive fallback (every q-op the exact reference C): typed parameters,
 *    its output on the committed input against ONNX Runtime's (within one
 *    quantization step of the output's DequantizeLinear on >= 99.9% of
 *    the elements, the same top-1); the generated code broken on purpose
 *    (a quantize layer's zero point off by one, truncation instead of
 *    rounding) fails that check;
 *  - quantize / dequantize layers on inputs that are exact ties (x / scale
 *    = k + 0.5), u8 and s8, with saturation: ONNX's round half to even;
 *    a graph whose output is a quantize layer returns its codes as floats
 *    (kiln_model_output_dtype u8);
 *  - the qdense task from a record of the int8 CPU design space (a
 *    tensorized kernel with a prepare step), the others naive: the same
 *    output as the all-naive export, bit for bit. */
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
#include "kl_model.h"
#include "kl_npy.h"
#include "kl_space.h"
#include "kl_store.h"
#include "kl_target.h"
#include "kl_trace.h"
#include "kl_util.h"

#include "export_fx.h"

#define S_DIR KL_TEST_DATA "/onnx/"
#define S_MODEL S_DIR "small_cnn_int8.onnx"

typedef struct {
    char dir[512];
    char err[KL_ERRMSG_LEN];
    kl_store_t *st;
} fx_t;

typedef struct {
    void *h;
    int (*nparams)(void);
    const char *(*pname)(int);
    int (*pdtype)(int);
    int (*odtype)(void);
    long long (*onumel)(void);
    int (*nprepare)(void);
    int (*prepare)(const float *const *);
    const float *(*pdata)(int);
    int (*infer)(const float *, float *);
} lib_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    const char *tmp =
        getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(fx->dir, sizeof fx->dir, "%s/kiln-export-qdq-XXXXXX", tmp);
    if (!mkdtemp(fx->dir))
        return -1;
    char *db = kl_xasprintf("%s/db", fx->dir);
    int rc = kl_store_open(&fx->st, db, 0, fx->err);
    free(db);
    if (rc)
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    kl_store_close(&fx->st);
    s_rmrf(fx->dir);
    free(fx);
    return 0;
}

static void s_open(lib_t *l, const char *path)
{
    memset(l, 0, sizeof *l);
    l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!l->h)
        fail_msg("dlopen %s: %s", path, dlerror());
    *(void **)&l->nparams = dlsym(l->h, "kiln_model_nparams");
    *(void **)&l->pname = dlsym(l->h, "kiln_model_param_name");
    *(void **)&l->pdtype = dlsym(l->h, "kiln_model_param_dtype");
    *(void **)&l->odtype = dlsym(l->h, "kiln_model_output_dtype");
    *(void **)&l->onumel = dlsym(l->h, "kiln_model_output_numel");
    *(void **)&l->nprepare = dlsym(l->h, "kiln_model_nprepare");
    *(void **)&l->prepare = dlsym(l->h, "kiln_model_prepare");
    *(void **)&l->pdata = dlsym(l->h, "kiln_model_param_data");
    *(void **)&l->infer = dlsym(l->h, "kiln_model_infer");
    assert_true(l->nparams && l->pname && l->pdtype && l->odtype && l->onumel &&
                l->nprepare && l->prepare && l->pdata && l->infer);
}

static int s_param(const lib_t *l, const char *name)
{
    for (int i = 0; i < l->nparams(); i++)
        if (!strcmp(l->pname(i), name))
            return i;
    fail_msg("no parameter %s", name);
    return -1;
}

/* Exports S_MODEL into fx->dir/NAME (fallback naive) and opens it. */
static void s_export(fx_t *fx, const char *name, int nmissing, lib_t *l)
{
    char *out = kl_xasprintf("%s/%s", fx->dir, name);
    kl_export_cfg_t cfg = {.model = S_MODEL,
                           .target = "cpu",
                           .out_dir = out,
                           .fallback_naive = true,
                           .build = true};
    kl_export_result_t res;
    int rc = kl_export_model(fx->st, &cfg, &res, fx->err);
    if (rc)
        fail_msg("export: %s", fx->err);
    assert_int_equal(res.ntasks, 5);
    assert_int_equal(res.nmissing, nmissing);
    assert_true(res.trained);
    s_open(l, res.lib_path);
    kl_export_result_free(&res);
    free(out);
}

/* The scale of the graph's output dequantize (y = dequantize ...). */
static double s_ystep(fx_t *fx)
{
    char *text = NULL;
    assert_int_equal(kl_model_text(S_MODEL, &text, fx->err), KL_OK);
    const char *y = strstr(text, "\ny = dequantize ");
    assert_non_null(y);
    const char *s = strstr(y, "scale=");
    assert_non_null(s);
    double v = strtod(s + 6, NULL);
    free(text);
    assert_true(v > 0);
    return v;
}

static int s_argmax(const float *y, int n)
{
    int k = 0;
    for (int i = 1; i < n; i++)
        k = y[i] > y[k] ? i : k;
    return k;
}

/* Runs l on the committed input; whether its output is within one step of
 * ONNX Runtime's on >= 99.9% of the elements with the same top-1. */
static bool s_vs_ort(fx_t *fx, const lib_t *l, bool verbose)
{
    int64_t xs[] = {1, 3, 32, 32}, ys[] = {1, 10};
    kl_npy_t x, ort;
    assert_int_equal(
        kl_npy_read(S_DIR "small_cnn_int8.input.npy", xs, 4, &x, fx->err),
        KL_OK);
    assert_int_equal(
        kl_npy_read(S_DIR "small_cnn_int8.ort.npy", ys, 2, &ort, fx->err),
        KL_OK);
    assert_int_equal(l->onumel(), 10);
    float y[10];
    assert_int_equal(l->infer(x.data, y), 0);
    double step = s_ystep(fx);
    int within = 0, exact = 0;
    for (int i = 0; i < 10; i++) {
        double d = fabs((double)y[i] - ort.data[i]);
        within += d <= step * 1.001;
        exact += y[i] == ort.data[i];
    }
    bool top = s_argmax(y, 10) == s_argmax(ort.data, 10);
    if (verbose)
        printf("vs ONNX Runtime: %d of 10 within one step (%.9g), %d equal, "
               "top-1 %s\n",
               within, step, exact, top ? "the same" : "differs");
    kl_npy_free(&x);
    kl_npy_free(&ort);
    return within >= 0.999 * 10 && top;
}

/* fx->dir/naive's kiln_model.c with `from` replaced by `to` (which must be
 * there), built with its kernels (fx_variant_lib, tag NAME), opened. */
static void s_variant(fx_t *fx, const char *from, const char *to,
                      const char *name, lib_t *l)
{
    char *lib = fx_variant_lib(fx->dir, "naive", from, to, name);
    s_open(l, lib);
    free(lib);
}

static void test_small_cnn_int8_vs_ort(void **state)
{
    fx_t *fx = *state;
    lib_t l;
    s_export(fx, "naive", 5, &l);
    /* Typed parameters: the first conv's weight s8, bias s32, requant
     * scale f32; the input and the output f32. */
    assert_int_equal(l.pdtype(s_param(&l, "relu1.weight")), 5);
    assert_int_equal(l.pdtype(s_param(&l, "relu1.bias")), 3);
    assert_int_equal(l.pdtype(s_param(&l, "relu1.scale")), 0);
    assert_int_equal(l.pdtype(0), 0);
    assert_null(l.pdata(0));
    assert_int_equal(l.odtype(), 0);
    assert_int_equal(l.nprepare(), 0);
    assert_true(s_vs_ort(fx, &l, true));
    dlclose(l.h);

    /* Broken on purpose: the check must see it. */
    static const struct {
        const char *from, *to, *name;
    } bad[] = {
        {"+ (float)zp;", "+ (float)(zp + 1);", "zp"},
        {"nearbyintf(x[i] / scale)", "truncf(x[i] / scale)", "trunc"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        s_variant(fx, bad[k].from, bad[k].to, bad[k].name, &l);
        printf("variant %s: ", bad[k].name);
        if (s_vs_ort(fx, &l, true))
            fail_msg("variant %s passes the check against ONNX Runtime",
                     bad[k].name);
        dlclose(l.h);
    }
}

/* Exact ties (x / 0.5 = k + 0.5), out of range values, u8 and s8. */
static const char s_ties[] = "model qties\n"
                             "input x 1x8\n"
                             "q = quantize x scale=0.5 zp=3\n"
                             "d = dequantize q scale=0.5 zp=3\n"
                             "s = quantize x scale=0.5 zp=-3 out=s8\n"
                             "e = dequantize s scale=0.5 zp=-3\n"
                             "y = add d e\n";
static const char s_codes[] = "model qcodes\n"
                              "input x 1x8\n"
                              "r = relu x\n"
                              "q = quantize r scale=0.5 zp=3\n";

static void s_graph_lib(fx_t *fx, const char *name, const char *text, lib_t *l)
{
    char *g = kl_xasprintf("%s/%s.graph", fx->dir, name);
    char *d = kl_xasprintf("%s/%s", fx->dir, name);
    assert_int_equal(kl_write_file(g, text, strlen(text), fx->err), KL_OK);
    if (kl_export_naive(g, d, NULL, fx->err))
        fail_msg("%s: %s", name, fx->err);
    char *lib = kl_xasprintf("%s/libkiln_model.so", d);
    s_open(l, lib);
    free(lib);
    free(d);
    free(g);
}

static void test_quantize_half_even(void **state)
{
    fx_t *fx = *state;
    static const float x[8] = {0.25f,  0.75f,  -0.25f,  1.25f,
                               -0.75f, 200.0f, -200.0f, 0.5f};
    /* u8 zp 3: rint(x / 0.5) = 0 2 -0 2 -2 400 -400 1, + 3, saturated:
     * 3 5 3 5 1 255 0 4, back: 0 1 0 1 -1 126 -1.5 0.5; s8 zp -3:
     * -3 -1 -3 -1 -5 127 -128 -2, back: 0 1 0 1 -1 65 -62.5 0.5. */
    static const float want[8] = {0, 2, 0, 2, -2, 191, -64, 1};
    lib_t l;
    s_graph_lib(fx, "ties", s_ties, &l);
    float y[8];
    assert_int_equal(l.infer(x, y), 0);
    for (int i = 0; i < 8; i++)
        if (y[i] != want[i])
            fail_msg("element %d (x = %g): %g, expected %g", i, (double)x[i],
                     (double)y[i], (double)want[i]);
    dlclose(l.h);

    /* An integer output: its codes as floats. */
    static const float codes[8] = {3, 5, 3, 5, 3, 255, 3, 4};
    s_graph_lib(fx, "codes", s_codes, &l);
    assert_int_equal(l.odtype(), 4);
    assert_int_equal(l.infer(x, y), 0);
    assert_memory_equal(y, codes, sizeof codes);
    dlclose(l.h);
}

static void test_tuned_qdense(void **state)
{
    fx_t *fx = *state;
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(S_MODEL, &m, fx->err), KL_OK);
    const kl_workload_t *w = NULL;
    for (int i = 0; i < kl_model_ntasks(m); i++)
        if (!strncmp(kl_model_task(m, i)->spec, "qdense ", 7))
            w = kl_model_task(m, i)->w;
    assert_non_null(w);
    /* A sample of the int8 design space on this CPU's refined target, as
     * kiln tune keys it. */
    const char *target = kl_target_resolve_for("cpu", kl_workload_cpu_feats(w));
    kl_space_t *sp = NULL;
    int rc = kl_space_for_target(target, w, &sp, fx->err);
    if (rc == KL_ERR_UNSUPPORTED || rc == KL_ERR_INVAL) {
        kl_model_destroy(&m);
        skip();
    }
    assert_int_equal(rc, KL_OK);
    kl_rng_t r;
    kl_rng_seed(&r, 7);
    kl_trace_t *tr = NULL;
    assert_int_equal(kl_space_sample(sp, &r, &tr, NULL, 0, NULL, fx->err),
                     KL_OK);
    s_commit_rec(fx->st, w, target, tr, 1e-6, false, NULL, fx->err);

    lib_t l, nv;
    s_export(fx, "tuned", 4, &l);
    char *mf = kl_xasprintf("%s/tuned/manifest.json", fx->dir), *text = NULL;
    size_t len = 0;
    assert_int_equal(kl_read_file(mf, &text, &len, fx->err), KL_OK);
    const char *t4 = strstr(text, "\"id\":4");
    assert_non_null(t4);
    assert_non_null(strstr(t4, "\"source\":\"tuned\""));
    assert_non_null(strstr(t4, "\"prepare\":true"));
    assert_int_equal(l.nprepare(), 1);
    char *t4src = kl_xasprintf("%s/tuned/task_04.c", fx->dir), *ksrc = NULL;
    assert_int_equal(kl_read_file(t4src, &ksrc, &len, fx->err), KL_OK);
    assert_non_null(strstr(ksrc, "kiln_task_04_prepare"));
    assert_true(s_vs_ort(fx, &l, true));

    /* The naive build of kiln run: every task's reference kernel. */
    char *nd = kl_xasprintf("%s/naive2", fx->dir);
    if (kl_export_naive(S_MODEL, nd, NULL, fx->err))
        fail_msg("naive build: %s", fx->err);
    char *nlib = kl_xasprintf("%s/libkiln_model.so", nd);
    s_open(&nv, nlib);
    free(nlib);
    free(nd);
    int64_t xs[] = {1, 3, 32, 32};
    kl_npy_t x;
    assert_int_equal(
        kl_npy_read(S_DIR "small_cnn_int8.input.npy", xs, 4, &x, fx->err),
        KL_OK);
    float a[10], b[10];
    assert_int_equal(l.infer(x.data, a), 0);
    assert_int_equal(nv.infer(x.data, b), 0);
    assert_memory_equal(a, b, sizeof a);
    kl_npy_free(&x);
    dlclose(l.h);
    dlclose(nv.h);
    free(ksrc);
    free(t4src);
    free(text);
    free(mf);
    kl_trace_free(&tr);
    kl_space_destroy(&sp);
    kl_model_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_small_cnn_int8_vs_ort, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_quantize_half_even, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tuned_qdense, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
