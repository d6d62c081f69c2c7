/* Unit tests of the exported model library's prepare steps (kl_abi.h,
 * kl_export.h "kl_export_write_graph"): libkiln_model.so is built with the
 * system compiler, loaded with dlopen and run against the naive build of
 * the same graph.
 *  - graph code: a hand-written kernel whose prepare step lays the weights
 *    out in a block that its entry alone reads; every layer keeps its own
 *    block, prepared lazily, again when its weight pointer moves, again by
 *    kiln_model_prepare, and out of memory is a return value;
 *  - end to end: a record whose trace packs a dense layer's constant weight
 *    before the parallel loop, stored as that task's best, exported through
 *    the generator, and the library's output checked;
 *  - AMX: a record under a "+amx" target makes the library ask for the
 *    tile state first, and refuse cleanly where it is not granted;
 *  - kiln_model_release frees the kernels' shared scratch too. */
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

#include "kl_amx.h"
#include "kl_err.h"
#include "kl_export.h"
#include "kl_space.h"
#include "kl_store.h"
#include "kl_test_tmp.h"
#include "kl_trace.h"
#include "kl_util.h"

#include "export_fx.h"

/* Layers a and b share task 0 (dense 2x16 -> 16), c is task 1. */
static const char s_graph[] = "model prep\n"
                              "input x 2x16\n"
                              "a = dense x O=16\n"
                              "b = dense a O=16\n"
                              "c = dense b O=8 relu=1\n";

typedef struct {
    char dir[512];
    char *gpath;
    char err[KL_ERRMSG_LEN];
} fx_t;

typedef struct {
    void *h;
    int (*nparams)(void);
    const char *(*pname)(int);
    long long (*pnumel)(int);
    long long (*onumel)(void);
    int (*nprepare)(void);
    int (*prepare)(const float *const *);
    void (*release)(void);
    int (*run)(const float *const *, float *);
} lib_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    if (!kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-export-prep-XXXXXX"))
        return -1;
    fx->gpath = kl_xasprintf("%s/prep.graph", fx->dir);
    if (kl_write_file(fx->gpath, s_graph, strlen(s_graph), fx->err))
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    s_rmrf(fx->dir);
    free(fx->gpath);
    free(fx);
    return 0;
}

static void s_open(lib_t *l, const char *dir)
{
    char *p = kl_xasprintf("%s/libkiln_model.so", dir);
    memset(l, 0, sizeof *l);
    l->h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!l->h)
        fail_msg("dlopen %s: %s", p, dlerror());
    free(p);
    *(void **)&l->nparams = dlsym(l->h, "kiln_model_nparams");
    *(void **)&l->pname = dlsym(l->h, "kiln_model_param_name");
    *(void **)&l->pnumel = dlsym(l->h, "kiln_model_param_numel");
    *(void **)&l->onumel = dlsym(l->h, "kiln_model_output_numel");
    *(void **)&l->nprepare = dlsym(l->h, "kiln_model_nprepare");
    *(void **)&l->prepare = dlsym(l->h, "kiln_model_prepare");
    *(void **)&l->release = dlsym(l->h, "kiln_model_release");
    *(void **)&l->run = dlsym(l->h, "kiln_model_run");
    assert_true(l->nparams && l->pname && l->pnumel && l->onumel &&
                l->nprepare && l->prepare && l->release && l->run);
}

static void s_fill(float *p, long long n, kl_rng_t *r, float scale)
{
    for (long long k = 0; k < n; k++)
        p[k] = scale * (float)(2 * kl_rng_double(r) - 1);
}

static float **s_params(const lib_t *l, uint64_t seed)
{
    kl_rng_t r;
    kl_rng_seed(&r, seed);
    float **p = kl_xcalloc((size_t)l->nparams(), sizeof(float *));
    for (int i = 0; i < l->nparams(); i++) {
        p[i] = kl_xmalloc((size_t)l->pnumel(i) * sizeof(float));
        s_fill(p[i], l->pnumel(i), &r, strchr(l->pname(i), '.') ? 0.3f : 1);
    }
    return p;
}

static void s_free_params(const lib_t *l, float **p)
{
    for (int i = 0; i < l->nparams(); i++)
        free(p[i]);
    free(p);
}

static int s_param(const lib_t *l, const char *name)
{
    for (int i = 0; i < l->nparams(); i++)
        if (!strcmp(l->pname(i), name))
            return i;
    fail_msg("no parameter %s", name);
    return -1;
}

/* Runs both builds on p; the largest difference, relative to the naive
 * output's largest magnitude. */
static double s_diff(const lib_t *lib, const lib_t *nv, float **p)
{
    long long n = nv->onumel();
    assert_int_equal(lib->onumel(), n);
    float *got = kl_xcalloc((size_t)n, sizeof(float));
    float *ref = kl_xcalloc((size_t)n, sizeof(float));
    assert_int_equal(lib->run((const float *const *)p, got), 0);
    assert_int_equal(nv->run((const float *const *)p, ref), 0);
    double big = 1e-6, worst = 0;
    for (long long i = 0; i < n; i++) {
        big = fmax(big, fabs(ref[i]));
        double d = fabs((double)got[i] - ref[i]);
        worst = d <= worst ? worst : d; /* NaN is worst */
    }
    free(got);
    free(ref);
    return worst / big;
}

static char *s_read(fx_t *fx, const char *dir, const char *name)
{
    char *p = kl_xasprintf("%s/%s", dir, name), *text = NULL;
    assert_int_equal(kl_read_file(p, &text, NULL, fx->err), KL_OK);
    free(p);
    return text;
}

/* A dense kernel (Y[n,o] = X[n,i] W[o,i] + b[o]) whose prepare step copies
 * W transposed and b into its block; the entry reads the weights only
 * there, so a missing or stale block gives a wrong output. prep_calls
 * counts prepare steps; prep_fail makes them run out of memory. */
static char *s_dense_kernel(const kl_workload_t *w)
{
    long long N = w->tensors[0].shape[0], I = w->tensors[0].shape[1];
    long long O = w->tensors[1].shape[0];
    return kl_xasprintf(
        "#include <stdlib.h>\nint prep_calls, prep_fail;\n"
        "void *kiln_task_00_prepare(void *const *args)\n{\n"
        "    if (args[0] || args[3])\n        return 0;\n"
        "    const float *W = args[1], *b = args[2];\n"
        "    float *p = prep_fail ? 0 : malloc(%lld * sizeof(float));\n"
        "    if (!p)\n        return 0;\n    prep_calls++;\n"
        "    for (int o = 0; o < %lld; o++) {\n"
        "        for (int i = 0; i < %lld; i++)\n"
        "            p[i * %lld + o] = W[o * %lld + i];\n"
        "        p[%lld + o] = b[o];\n    }\n    return p;\n}\n\n"
        "void kiln_task_00(void *const *args)\n{\n"
        "    const float *X = args[0], *p = args[4];\n"
        "    float *Y = args[3];\n"
        "    for (int n = 0; n < %lld; n++)\n"
        "        for (int o = 0; o < %lld; o++) {\n"
        "            float s = p[%lld + o];\n"
        "            for (int i = 0; i < %lld; i++)\n"
        "                s += X[n * %lld + i] * p[i * %lld + o];\n"
        "            Y[n * %lld + o] = s;\n        }\n}\n",
        I * O + O, O, I, O, I, I * O, N, O, I * O, I, I, O, O);
}

/* Out of memory in a prepare step: a return value, no output written,
 * and the next run after memory is back prepares what is missing (both
 * layers: 2 more prepare calls after the 5 made before). */
static void s_out_of_memory(const lib_t *lib, const lib_t *nv, float **p,
                            int *calls, int *failp)
{
    *failp = 1;
    assert_int_equal(lib->prepare((const float *const *)p), 1);
    lib->release();
    float sentinel = 12345.0f, *o = kl_xmalloc((size_t)lib->onumel() * 4);
    for (long long k = 0; k < lib->onumel(); k++)
        o[k] = sentinel;
    assert_int_equal(lib->run((const float *const *)p, o), 1);
    assert_true(o[0] == sentinel);
    free(o);
    *failp = 0;
    assert_true(s_diff(lib, nv, p) < 1e-5);
    assert_int_equal(*calls, 7);
}

static void test_graph_code_prepares_per_layer(void **state)
{
    fx_t *fx = *state;
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_parse(s_graph, fx->gpath, &m, fx->err), KL_OK);
    assert_int_equal(kl_model_ntasks(m), 2);
    assert_string_equal(kl_model_task(m, 0)->w->name, "dense_2_16_16_bias");
    assert_true(kl_model_task(m, 0)->w->tensors[1].is_const);
    kl_kernel_t ks[2] = {{0}};
    ks[0].source = s_dense_kernel(kl_model_task(m, 0)->w);
    ks[0].entry = kl_xstrdup("kiln_task_00");
    ks[0].prepare = true;
    assert_int_equal(kl_codegen_reference(kl_model_task(m, 1)->w,
                                          "kiln_task_01", &ks[1], fx->err),
                     KL_OK);
    char *out = kl_xasprintf("%s/hand", fx->dir);
    char *nvd = kl_xasprintf("%s/naive", fx->dir);
    assert_int_equal(kl_mkdirs(out, fx->err), KL_OK);
    assert_int_equal(kl_export_write_graph(s_graph, fx->gpath, m, ks, false,
                                           NULL, out, true, NULL, fx->err),
                     KL_OK);
    assert_int_equal(kl_export_naive(fx->gpath, nvd, NULL, fx->err), KL_OK);
    char *mc = s_read(fx, out, "kiln_model.c");
    assert_non_null(strstr(mc, "void *kiln_task_00_prepare(void *const"));
    assert_null(strstr(mc, "kiln_task_01_prepare"));
    free(mc);

    lib_t lib, nv;
    s_open(&lib, out);
    s_open(&nv, nvd);
    int *calls = dlsym(lib.h, "prep_calls"), *failp = dlsym(lib.h, "prep_fail");
    assert_true(calls && failp);
    assert_int_equal(lib.nprepare(), 2); /* layers a and b */
    assert_int_equal(nv.nprepare(), 0);
    float **p = s_params(&lib, 7);
    /* Lazily, once per layer: the first run prepares both, the second
     * none. */
    assert_true(s_diff(&lib, &nv, p) < 1e-5);
    assert_int_equal(*calls, 2);
    assert_true(s_diff(&lib, &nv, p) < 1e-5);
    assert_int_equal(*calls, 2);
    /* b's weight moves to other memory with other values: b alone is
     * prepared again. */
    int bw = s_param(&lib, "b.weight");
    long long bn = lib.pnumel(bw);
    float *old = p[bw];
    kl_rng_t r;
    kl_rng_seed(&r, 99);
    p[bw] = kl_xmalloc((size_t)bn * sizeof(float));
    s_fill(p[bw], bn, &r, 0.3f);
    assert_true(s_diff(&lib, &nv, p) < 1e-5);
    assert_int_equal(*calls, 3);
    free(old);
    /* Changed in place: not noticed until kiln_model_prepare, which
     * prepares every layer again. */
    int aw = s_param(&lib, "a.weight");
    for (long long k = 0; k < lib.pnumel(aw); k++)
        p[aw][k] = -p[aw][k];
    assert_true(s_diff(&lib, &nv, p) > 1e-2);
    assert_int_equal(lib.prepare((const float *const *)p), 0);
    assert_int_equal(*calls, 5);
    assert_true(s_diff(&lib, &nv, p) < 1e-5);
    s_out_of_memory(&lib, &nv, p, calls, failp);
    s_free_params(&lib, p);
    lib.release();
    dlclose(lib.h);
    dlclose(nv.h);
    for (int i = 0; i < 2; i++)
        kl_kernel_free(&ks[i]);
    kl_model_destroy(&m);
    free(out);
    free(nvd);
}

/* The kernels' shared scratch (the C prelude's kl_scratch_claim) is
 * freed by kiln_model_release with the blocks: a probe appended to a
 * generated kernel's unit claims 1 MB of it and reads its size. */
static void test_release_frees_scratch(void **state)
{
    fx_t *fx = *state;
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_parse(s_graph, fx->gpath, &m, fx->err), KL_OK);
    kl_kernel_t ks[2] = {{0}};
    for (int t = 0; t < 2; t++) {
        char entry[32];
        snprintf(entry, sizeof entry, "kiln_task_%02d", t);
        assert_int_equal(kl_codegen_reference(kl_model_task(m, t)->w, entry,
                                              &ks[t], fx->err),
                         KL_OK);
    }
    assert_non_null(strstr(ks[1].source, "kl_scratch_claim"));
    char *src = kl_xasprintf(
        "%s\nsize_t kl_probe_n(void) { return kl_scratch_g.n; }\n"
        "int kl_probe_claim(void)\n{\n"
        "    if (!kl_scratch_claim((size_t)1 << 20))\n        return 1;\n"
        "    kl_scratch_release();\n    return 0;\n}\n",
        ks[1].source);
    free(ks[1].source);
    ks[1].source = src;
    char *out = kl_xasprintf("%s/scratch", fx->dir);
    assert_int_equal(kl_mkdirs(out, fx->err), KL_OK);
    assert_int_equal(kl_export_write_graph(s_graph, fx->gpath, m, ks, false,
                                           NULL, out, true, NULL, fx->err),
                     KL_OK);
    lib_t lib;
    s_open(&lib, out);
    size_t (*probe_n)(void);
    int (*probe_claim)(void);
    *(void **)&probe_n = dlsym(lib.h, "kl_probe_n");
    *(void **)&probe_claim = dlsym(lib.h, "kl_probe_claim");
    assert_true(probe_n && probe_claim);
    assert_int_equal(probe_n(), 0);
    assert_int_equal(probe_claim(), 0);
    assert_int_equal(probe_n(), (size_t)1 << 20);
    lib.release();
    assert_int_equal(probe_n(), 0);
    float **p = s_params(&lib, 3);
    float *o = kl_xmalloc((size_t)lib.onumel() * sizeof(float));
    assert_int_equal(lib.run((const float *const *)p, o), 0);
    assert_int_equal(probe_claim(), 0); /* grows again after a release */
    assert_int_equal(probe_n(), (size_t)1 << 20);
    lib.release();
    free(o);
    s_free_params(&lib, p);
    dlclose(lib.h);
    for (int i = 0; i < 2; i++)
        kl_kernel_free(&ks[i]);
    kl_model_destroy(&m);
    free(out);
}

/* The trace of a dense schedule whose constant weight W is packed before
 * the parallel loop: o split in two, its outer part outermost and
 * parallel, cache_read(tensor="W", scope="packed") left at the root. */
static kl_trace_t *s_packed_trace(const char *target)
{
    kl_trace_t *t = kl_trace_new(target);
    int64_t l[3], o[2];
    kl_tr_get_loops(t, 3, l); /* n, o, i */
    int64_t f[2] = {-2, KL_SPLIT_INFER};
    kl_tr_split(t, l[1], f, 2, o);
    int64_t ord[2] = {o[0], l[0]};
    kl_tr_reorder(t, ord, 2);
    kl_tr_parallel(t, o[0]);
    kl_tr_cache_read(t, "W", KL_SCOPE_PACKED);
    return t;
}

/* The premise: through the schedule API the trace's pack of W stays at
 * the root, before the parallel loop. */
static void s_premise(const kl_workload_t *w, const kl_trace_t *tr, char *err)
{
    kl_sched_t *s = NULL;
    bool rej = true;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_trace_apply(tr, s, NULL, NULL, &rej, err), KL_OK);
    assert_false(rej);
    assert_int_equal(kl_sched_nstages(s), 1);
    assert_int_equal(kl_sched_stage(s, 0)->attach, KL_ATTACH_ROOT);
    assert_int_equal(kl_sched_loop(s, 0)->kind, KL_LOOP_PARALLEL);
    kl_sched_destroy(&s);
}

static void test_packed_weight_exported(void **state)
{
    fx_t *fx = *state;
    const char *tgt = kl_cpu_target();
    kl_workload_t *w = NULL;
    assert_int_equal(
        kl_workload_from_op("dense N=2 I=16 O=16 bias=1", &w, fx->err), KL_OK);
    kl_trace_t *tr = s_packed_trace(tgt);
    s_premise(w, tr, fx->err);

    char *db = kl_xasprintf("%s/db", fx->dir);
    kl_store_t *st = NULL;
    assert_int_equal(kl_store_open(&st, db, 0, fx->err), KL_OK);
    s_commit_rec(st, w, tgt, tr, 1e-6, false, NULL, fx->err);
    Kiln__TuningRecord *rec = NULL;
    assert_int_equal(kl_export_best(st, w, "cpu", KL_COND_WARM, &rec, fx->err),
                     KL_OK);
    kl_kernel_t k = {0};
    int rc = kl_export_replay(w, rec, "kl_main", &k, fx->err);
    if (rc)
        fail_msg("replay: %s", fx->err);
    if (!k.source || !strstr(k.source, "void *kl_main_prepare("))
        fail_msg("expected kl_main_prepare in the source of a record that "
                 "packs constant W before the parallel loop");
    assert_true(k.prepare);
    kl_kernel_free(&k);
    kiln__tuning_record__free_unpacked(rec, NULL);

    /* The model: task 0 (layers a and b) from the record, task 1 naive. */
    char *out = kl_xasprintf("%s/out", fx->dir);
    char *nvd = kl_xasprintf("%s/naive", fx->dir);
    kl_export_cfg_t cfg = {.model = fx->gpath,
                           .target = "cpu",
                           .out_dir = out,
                           .fallback_naive = true,
                           .build = true};
    kl_export_result_t res;
    rc = kl_export_model(st, &cfg, &res, fx->err);
    if (rc)
        fail_msg("export: %s", fx->err);
    assert_int_equal(res.nmissing, 1);
    assert_int_equal(res.nprepare, 1);
    kl_export_result_free(&res);
    char *text = s_read(fx, out, "task_00.c");
    assert_non_null(strstr(text, "void *kiln_task_00_prepare("));
    free(text);
    text = s_read(fx, out, "manifest.json");
    char *t0 = strstr(text, "\"id\":0"), *t1 = strstr(text, "\"id\":1");
    assert_true(t0 && t1);
    char *p0 = strstr(t0, "\"prepare\":"), *p1 = strstr(t1, "\"prepare\":");
    assert_true(p0 && p0 < t1 && p1);
    assert_int_equal(strncmp(p0, "\"prepare\":true", 14), 0);
    assert_int_equal(strncmp(p1, "\"prepare\":false", 15), 0);
    free(text);
    assert_int_equal(kl_export_naive(fx->gpath, nvd, NULL, fx->err), KL_OK);
    lib_t lib, nv;
    s_open(&lib, out);
    s_open(&nv, nvd);
    assert_int_equal(lib.nprepare(), 2);
    float **p = s_params(&lib, 3);
    assert_int_equal(lib.prepare((const float *const *)p), 0);
    double d = s_diff(&lib, &nv, p);
    printf("exported with a prepare step vs naive: %.3g relative\n", d);
    assert_true(d < 1e-4);
    s_free_params(&lib, p);
    lib.release();
    dlclose(lib.h);
    dlclose(nv.h);
    kl_store_close(&st);
    kl_trace_free(&tr);
    kl_workload_free(&w);
    free(out);
    free(nvd);
    free(db);
}

/* A record under an AMX target ("+amx"): the library asks Linux for the
 * tile state before its first prepare step (kiln_model.h, "AMX"). Where
 * the CPU has no AMX every entry returns 3 without touching the output
 * and kiln_model_amx_error says why; where it has AMX the model runs. A
 * library without an AMX kernel has none of it. */
static void test_amx_export(void **state)
{
    fx_t *fx = *state;
    if (strcmp(kl_cpu_target(), "cpu/x86_64-avx512") != 0)
        skip(); /* the AMX target's kernels are AVX-512 code */
    const char *tgt = "cpu/x86_64-avx512+bf16+amx";
    kl_workload_t *w = NULL;
    assert_int_equal(
        kl_workload_from_op("dense N=2 I=16 O=16 bias=1", &w, fx->err), KL_OK);
    kl_trace_t *tr = s_packed_trace(tgt);
    char *db = kl_xasprintf("%s/db", fx->dir);
    kl_store_t *st = NULL;
    assert_int_equal(kl_store_open(&st, db, 0, fx->err), KL_OK);
    s_commit_rec(st, w, tgt, tr, 1e-6, false, NULL, fx->err);
    char *out = kl_xasprintf("%s/amx", fx->dir);
    kl_export_cfg_t cfg = {.model = fx->gpath,
                           .target = tgt,
                           .out_dir = out,
                           .fallback_naive = true,
                           .build = true};
    kl_export_result_t res;
    if (kl_export_model(st, &cfg, &res, fx->err))
        fail_msg("export: %s", fx->err);
    kl_export_result_free(&res);
    char *mc = s_read(fx, out, "kiln_model.c");
    assert_non_null(strstr(mc,
                           "ARCH_REQ_XCOMP_PERM */,\n"
                           "                     18 /* XFEATURE_XTILEDATA"));
    assert_non_null(strstr(mc, "ARCH_GET_XCOMP_PERM"));
    assert_non_null(strstr(mc, "static int s_prepare(const float *const *p)\n"
                               "{\n    (void)p;\n    if (s_amx())\n"
                               "        return 3;\n"));
    assert_non_null(strstr(mc, "float *output)\n{\n    if (s_amx())\n"
                               "        return 3;\n    if (s_prepare(p))"));
    free(mc);
    char *h = s_read(fx, out, "kiln_model.h");
    assert_non_null(strstr(h, "const char *kiln_model_amx_error(void);\n\n"
                              "#endif\n"));
    free(h);

    lib_t lib;
    s_open(&lib, out);
    const char *(*amx_error)(void) = NULL;
    *(void **)&amx_error = dlsym(lib.h, "kiln_model_amx_error");
    assert_non_null(amx_error);
    float **p = s_params(&lib, 5);
    float *o = kl_xmalloc((size_t)lib.onumel() * sizeof *o);
    o[0] = 12345.0f;
    if (kl_amx_offered()) {
        assert_null(amx_error());
        assert_int_equal(lib.prepare((const float *const *)p), 0);
        assert_int_equal(lib.run((const float *const *)p, o), 0);
        assert_true(o[0] != 12345.0f);
    } else {
        assert_int_equal(lib.prepare((const float *const *)p), 3);
        assert_int_equal(lib.run((const float *const *)p, o), 3);
        assert_true(o[0] == 12345.0f); /* nothing ran */
        assert_non_null(amx_error());
        assert_non_null(strstr(amx_error(), "AMX"));
        printf("AMX library here: %s\n", amx_error());
    }
    free(o);
    s_free_params(&lib, p);
    lib.release();
    dlclose(lib.h);

    /* The same model on the unrefined target: no AMX code at all. */
    char *out2 = kl_xasprintf("%s/plain", fx->dir);
    cfg.target = "cpu/x86_64-avx512";
    cfg.out_dir = out2;
    cfg.build = false;
    if (kl_export_model(st, &cfg, &res, fx->err))
        fail_msg("export: %s", fx->err);
    kl_export_result_free(&res);
    mc = s_read(fx, out2, "kiln_model.c");
    assert_null(strstr(mc, "s_amx"));
    free(mc);
    h = s_read(fx, out2, "kiln_model.h");
    assert_null(strstr(h, "amx"));
    free(h);
    kl_store_close(&st);
    kl_trace_free(&tr);
    kl_workload_free(&w);
    free(out);
    free(out2);
    free(db);
}

int main(void)
{
    if (kl_target_parse(kl_cpu_target(), &(kl_target_t){0}, NULL) != KL_OK) {
        printf("SKIP: no CPU design space for %s\n", kl_cpu_target());
        return 77;
    }
    if (system("${CC:-cc} --version >/dev/null 2>&1") != 0) {
        printf("SKIP: no C compiler\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_graph_code_prepares_per_layer,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_packed_weight_exported, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_amx_export, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_frees_scratch, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
