/* Unit tests of coordinator/export: the best record of a workload on an
 * exact target in a real LMDB store, its replay to source, a model
 * export's missing-task and fallback paths (sources only; the library
 * build and run of tuned exports are tests/integration/export_model.sh),
 * the naive build and oneDNN graph of clip layers, run against values
 * computed here, and oneDNN's residual sums (in place and copied) and its
 * check against a wrong reference. */
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
#include "kl_space.h"
#include "kl_store.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

#include "export_fx.h"

#define OP "matmul M=16 N=16 K=16"

typedef struct {
    char dir[512];
    kl_store_t *st;
    kl_workload_t *w;
    const char *tgt, *other;
    char err[KL_ERRMSG_LEN];
} fx_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    if (!kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-export-test-XXXXXX") ||
        kl_store_open(&fx->st, fx->dir, 0, fx->err) ||
        kl_workload_from_op(OP, &fx->w, fx->err))
        return -1;
    fx->tgt = kl_cpu_target();
    fx->other = strcmp(fx->tgt, "cpu/x86_64-avx512") ? "cpu/x86_64-avx512"
                                                     : "cpu/x86_64-avx2";
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    kl_store_close(&fx->st);
    kl_workload_free(&fx->w);
    s_rmrf(fx->dir);
    free(fx);
    return 0;
}

/* Commits one record of w on target: a real trace sampled from the
 * target's design space, status OK, the given median, measured with ev
 * (NULL: none, as before records kept it). */
static void s_commit_ev(fx_t *fx, const kl_workload_t *w, const char *target,
                        double median, bool simulated, uint64_t seed,
                        Kiln__Evaluator *ev)
{
    kl_space_t *sp = NULL;
    kl_trace_t *tr = NULL;
    kl_rng_t r;
    kl_rng_seed(&r, seed);
    assert_int_equal(kl_space_for_target(target, w, &sp, fx->err), KL_OK);
    assert_int_equal(kl_space_sample(sp, &r, &tr, NULL, 0, NULL, fx->err),
                     KL_OK);
    s_commit_rec(fx->st, w, target, tr, median, simulated, ev, fx->err);
    kl_trace_free(&tr);
    kl_space_destroy(&sp);
}

static void s_commit(fx_t *fx, const kl_workload_t *w, const char *target,
                     double median, bool simulated, uint64_t seed)
{
    s_commit_ev(fx, w, target, median, simulated, seed, NULL);
}

static void test_cpu_target(void **state)
{
    (void)state;
    const char *t = kl_cpu_target();
    assert_int_equal(strncmp(t, "cpu/", 4), 0);
    assert_string_equal(kl_export_target("cpu"), t);
    assert_string_equal(kl_export_target("cuda/sm_90"), "cuda/sm_90");
    assert_string_equal(kl_export_target("cpu/x86_64-avx2"), "cpu/x86_64-avx2");
}

static void test_best_missing_names_it(void **state)
{
    fx_t *fx = *state;
    Kiln__TuningRecord *rec = NULL;
    assert_int_equal(
        kl_export_best(fx->st, fx->w, "cpu", KL_COND_WARM, &rec, fx->err),
        KL_ERR_NOTFOUND);
    assert_null(rec);
    assert_non_null(strstr(fx->err, fx->w->name));
    assert_non_null(strstr(fx->err, fx->tgt));
    assert_non_null(strstr(fx->err, "no record at all"));
}

static void test_other_target_never_used(void **state)
{
    fx_t *fx = *state;
    s_commit(fx, fx->w, fx->other, 1e-9, false, 1);
    Kiln__TuningRecord *rec = NULL;
    assert_int_equal(
        kl_export_best(fx->st, fx->w, fx->tgt, KL_COND_WARM, &rec, fx->err),
        KL_ERR_NOTFOUND);
    assert_non_null(strstr(fx->err, fx->other));
    assert_non_null(strstr(fx->err, "never used"));
    s_commit(fx, fx->w, fx->tgt, 1e-3, false, 2);
    assert_int_equal(
        kl_export_best(fx->st, fx->w, "cpu", KL_COND_WARM, &rec, fx->err),
        KL_OK);
    assert_string_equal(rec->target, fx->tgt);
    assert_true(rec->median_s == 1e-3);
    kl_kernel_t k = {0};
    assert_int_equal(kl_export_replay(fx->w, rec, "my_entry", &k, fx->err),
                     KL_OK);
    assert_non_null(strstr(k.source, "void my_entry("));
    kl_kernel_free(&k);
    /* The record of another workload does not replay for this one. */
    kl_workload_t *w2 = NULL;
    assert_int_equal(kl_workload_from_op("matmul M=8 N=8 K=8", &w2, fx->err),
                     KL_OK);
    assert_int_equal(kl_export_replay(w2, rec, "e", &k, fx->err), KL_ERR_INVAL);
    assert_non_null(strstr(fx->err, "not of workload"));
    kl_workload_free(&w2);
    kiln__tuning_record__free_unpacked(rec, NULL);
}

static void test_simulated_is_not_a_result(void **state)
{
    fx_t *fx = *state;
    s_commit(fx, fx->w, fx->tgt, 1e-6, true, 3);
    Kiln__TuningRecord *rec = NULL;
    assert_int_equal(
        kl_export_best(fx->st, fx->w, fx->tgt, KL_COND_WARM, &rec, fx->err),
        KL_ERR_NOTFOUND);
    assert_non_null(strstr(fx->err, "simulated"));
}

/* Warm and cold records never compete: each condition exports its own
 * best; an unverified record (skip_verify) is never exported; a simulated
 * target has nothing to export. */
static void test_conditions_and_unverified(void **state)
{
    fx_t *fx = *state;
    Kiln__Evaluator warm = KILN__EVALUATOR__INIT, cold, unverified;
    warm.number = 1;
    warm.min_repeat_ms = 50;
    warm.flush_cache = true;
    cold = warm;
    cold.min_repeat_ms = 0;
    unverified = cold;
    unverified.skip_verify = true;
    s_commit_ev(fx, fx->w, fx->tgt, 3e-3, false, 11, &warm);
    s_commit_ev(fx, fx->w, fx->tgt, 1e-3, false, 12, &cold);
    s_commit_ev(fx, fx->w, fx->tgt, 1e-9, false, 13, &unverified);
    Kiln__TuningRecord *rec = NULL;
    assert_int_equal(
        kl_export_best(fx->st, fx->w, "cpu", KL_COND_WARM, &rec, fx->err),
        KL_OK);
    assert_true(rec->median_s == 3e-3);
    kiln__tuning_record__free_unpacked(rec, NULL);
    assert_int_equal(
        kl_export_best(fx->st, fx->w, "cpu", KL_COND_COLD, &rec, fx->err),
        KL_OK);
    assert_true(rec->median_s == 1e-3);
    kiln__tuning_record__free_unpacked(rec, NULL);
    /* Only an unverified record of another workload's size: missing, and
     * the message says why. */
    kl_workload_t *w2 = NULL;
    assert_int_equal(kl_workload_from_op("matmul M=32 N=16 K=16", &w2, fx->err),
                     KL_OK);
    s_commit_ev(fx, w2, fx->tgt, 1e-9, false, 14, &unverified);
    assert_int_equal(
        kl_export_best(fx->st, w2, "cpu", KL_COND_COLD, &rec, fx->err),
        KL_ERR_NOTFOUND);
    assert_non_null(strstr(fx->err, "unverified"));
    assert_non_null(strstr(fx->err, "cold"));
    kl_workload_free(&w2);
    /* A simulated target, even with records, exports nothing. */
    char sim[64];
    s_commit(fx, fx->w, kl_target_sim("cpu", sim, sizeof sim), 1e-9, true, 15);
    assert_int_equal(
        kl_export_best(fx->st, fx->w, sim, KL_COND_WARM, &rec, fx->err),
        KL_ERR_INVAL);
    assert_null(rec);
    assert_non_null(strstr(fx->err, "simulated"));
}

/* A CUDA record replays to CUDA source with its launch dimensions (no GPU
 * needed: only the design space and codegen run). */
static void test_cuda_replay(void **state)
{
    fx_t *fx = *state;
    kl_space_t *sp = NULL;
    if (kl_space_for_target("cuda/sm_90", fx->w, &sp, fx->err) != KL_OK) {
        printf("no CUDA design space here: %s\n", fx->err);
        skip();
    }
    kl_space_destroy(&sp);
    s_commit(fx, fx->w, "cuda/sm_90", 1e-6, false, 5);
    Kiln__TuningRecord *rec = NULL;
    assert_int_equal(
        kl_export_best(fx->st, fx->w, "cpu", KL_COND_WARM, &rec, fx->err),
        KL_ERR_NOTFOUND);
    assert_int_equal(kl_export_best(fx->st, fx->w, "cuda/sm_90", KL_COND_WARM,
                                    &rec, fx->err),
                     KL_OK);
    kl_kernel_t k = {0};
    assert_int_equal(kl_export_replay(fx->w, rec, "kiln_task_00", &k, fx->err),
                     KL_OK);
    assert_non_null(strstr(k.source, "__global__"));
    assert_non_null(strstr(k.source, "kiln_task_00"));
    assert_true(k.grid[0] * k.grid[1] * k.grid[2] >= 1);
    assert_true(k.block[0] * k.block[1] * k.block[2] > 1);
    kl_kernel_free(&k);
    kiln__tuning_record__free_unpacked(rec, NULL);
}

static const char s_graph[] = "model two\n"
                              "input x 1x64\n"
                              "a = dense x O=64\n"
                              "b = dense a O=16 relu=1\n";

static void test_model_missing_and_fallback(void **state)
{
    fx_t *fx = *state;
    char *gpath = kl_xasprintf("%s/two.graph", fx->dir);
    char *out = kl_xasprintf("%s/out", fx->dir);
    assert_int_equal(kl_write_file(gpath, s_graph, strlen(s_graph), fx->err),
                     KL_OK);
    /* Task 0 (dense 64 -> 64) has a record; task 1 has none. */
    kl_workload_t *w0 = NULL;
    assert_int_equal(
        kl_workload_from_op("dense N=1 I=64 O=64 bias=1", &w0, fx->err), KL_OK);
    s_commit(fx, w0, fx->tgt, 2e-6, false, 4);
    kl_export_cfg_t cfg = {.model = gpath, .target = "cpu", .out_dir = out};
    kl_export_result_t res;
    assert_int_equal(kl_export_model(fx->st, &cfg, &res, fx->err),
                     KL_ERR_NOTFOUND);
    assert_int_equal(res.ntasks, 2);
    assert_int_equal(res.nmissing, 1);
    assert_non_null(strstr(res.missing[0], "dense_1_64_16"));
    assert_non_null(strstr(fx->err, "1 of 2 tasks"));
    assert_int_equal(access(out, F_OK), -1);
    kl_export_result_free(&res);

    cfg.fallback_naive = true;
    assert_int_equal(kl_export_model(fx->st, &cfg, &res, fx->err), KL_OK);
    assert_int_equal(res.nmissing, 1);
    assert_null(res.lib_path);
    assert_true(res.tuned_s == 2e-6);
    kl_export_result_free(&res);
    char *man = kl_xasprintf("%s/manifest.json", out), *text = NULL;
    assert_int_equal(kl_read_file(man, &text, NULL, fx->err), KL_OK);
    assert_non_null(strstr(text, "\"source\":\"naive\""));
    assert_non_null(strstr(text, "\"source\":\"tuned\""));
    free(text);
    char *mc = kl_xasprintf("%s/kiln_model.c", out);
    assert_int_equal(kl_read_file(mc, &text, NULL, fx->err), KL_OK);
    assert_non_null(strstr(text, "kiln_task_00(a);"));
    assert_non_null(strstr(text, "kiln_task_01(a);"));
    free(text);
    free(mc);
    free(man);
    kl_workload_free(&w0);
    free(gpath);
    free(out);
}

/* --precision bf16: the dense tasks are looked up as their in=bf16 forms
 * (an f32 record does not serve them), the manifest says so, the weights
 * stay f32 parameters (kiln_model_param_dtype 0), and a GPU target is
 * refused before any lookup. */
static void test_model_bf16(void **state)
{
    fx_t *fx = *state;
    char *gpath = kl_xasprintf("%s/two.graph", fx->dir);
    char *out = kl_xasprintf("%s/out16", fx->dir);
    assert_int_equal(kl_write_file(gpath, s_graph, strlen(s_graph), fx->err),
                     KL_OK);
    kl_workload_t *w0 = NULL;
    assert_int_equal(
        kl_workload_from_op("dense N=1 I=64 O=64 bias=1", &w0, fx->err), KL_OK);
    s_commit(fx, w0, fx->tgt, 2e-6, false, 4); /* f32: not the bf16 task's */
    kl_export_cfg_t cfg = {.model = gpath,
                           .target = "cpu",
                           .out_dir = out,
                           .precision = KL_DT_BF16};
    kl_export_result_t res;
    assert_int_equal(kl_export_model(fx->st, &cfg, &res, fx->err),
                     KL_ERR_NOTFOUND);
    assert_int_equal(res.nmissing, 2);
    assert_non_null(strstr(res.missing[0], "dense_1_64_64_bias_bf16"));
    assert_non_null(strstr(res.missing[1], "dense_1_64_16_bias_relu_bf16"));
    kl_export_result_free(&res);
    cfg.fallback_naive = true;
    assert_int_equal(kl_export_model(fx->st, &cfg, &res, fx->err), KL_OK);
    assert_int_equal(res.nmissing, 2);
    kl_export_result_free(&res);
    char *man = kl_xasprintf("%s/manifest.json", out), *text = NULL;
    assert_int_equal(kl_read_file(man, &text, NULL, fx->err), KL_OK);
    assert_non_null(strstr(text, "\"precision\":\"bf16\""));
    assert_non_null(strstr(text, "in=bf16"));
    free(text);
    char *mc = kl_xasprintf("%s/kiln_model.c", out);
    assert_int_equal(kl_read_file(mc, &text, NULL, fx->err), KL_OK);
    /* x, a.weight, a.bias, b.weight, b.bias: every one f32 */
    assert_non_null(
        strstr(text, "static const int s_dtype[] = {0, 0, 0, 0, 0};"));
    assert_non_null(strstr(text, "kiln_task_01(a);"));
    free(text);
    free(mc);
    free(man);
    /* the f32 export of the same graph says no precision */
    cfg.precision = KL_DT_F32;
    assert_int_equal(kl_export_model(fx->st, &cfg, &res, fx->err), KL_OK);
    kl_export_result_free(&res);
    man = kl_xasprintf("%s/manifest.json", out);
    assert_int_equal(kl_read_file(man, &text, NULL, fx->err), KL_OK);
    assert_null(strstr(text, "precision"));
    free(text);
    free(man);
    cfg.precision = KL_DT_BF16;
    cfg.target = "cuda/sm_90";
    assert_int_equal(kl_export_model(fx->st, &cfg, &res, fx->err),
                     KL_ERR_INVAL);
    assert_true(res.bad_model);
    assert_non_null(
        strstr(fx->err, "precision bf16 exports to CPU targets only"));
    kl_export_result_free(&res);
    kl_workload_free(&w0);
    free(gpath);
    free(out);
}

/* A graph's naive build, loaded: written to a fresh directory, built by
 * kl_export_naive and dlopen'ed, with its run and parameter entries. */
typedef struct {
    char dir[512];
    char *gpath;
    void *h;
    int (*run)(const float *const *, float *);
    int (*nparams)(void);
    long long (*pnumel)(int);
} s_naive_t;

static void s_naive_open(s_naive_t *n, const char *tag, const char *graph)
{
    char err[KL_ERRMSG_LEN];
    memset(n, 0, sizeof *n);
    char tmpl[128];
    snprintf(tmpl, sizeof tmpl, "kiln-export-%s-XXXXXX", tag);
    assert_non_null(kl_test_mkdtemp(n->dir, sizeof n->dir, tmpl));
    n->gpath = kl_xasprintf("%s/%s.graph", n->dir, tag);
    char *nvd = kl_xasprintf("%s/naive", n->dir);
    char *lib = kl_xasprintf("%s/libkiln_model.so", nvd);
    assert_int_equal(kl_write_file(n->gpath, graph, strlen(graph), err), KL_OK);
    if (kl_export_naive(n->gpath, nvd, NULL, err))
        fail_msg("%s", err);
    n->h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!n->h)
        fail_msg("dlopen %s: %s", lib, dlerror());
    *(void **)&n->run = dlsym(n->h, "kiln_model_run");
    *(void **)&n->nparams = dlsym(n->h, "kiln_model_nparams");
    *(void **)&n->pnumel = dlsym(n->h, "kiln_model_param_numel");
    assert_true(n->run && n->nparams && n->pnumel);
    free(lib);
    free(nvd);
}

static void s_naive_close(s_naive_t *n)
{
    dlclose(n->h);
    char *cmd = kl_xasprintf("rm -rf '%s'", n->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", n->dir);
    free(cmd);
    free(n->gpath);
}

/* A standalone clip (of the input: nothing to fuse into) and one fused
 * into a dense layer: the naive build computes min(max(v, lo), hi), and so
 * does the oneDNN graph (an eltwise clip and a clip post-op). */
static const char s_clip_graph[] = "model clip\n"
                                   "input x 2x16\n"
                                   "c = clip x lo=-0.25 hi=0.5\n"
                                   "d = dense c O=16\n"
                                   "r = clip d lo=0 hi=6\n";

static void test_clip_naive_and_dnnl(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_naive_t nv;
    s_naive_open(&nv, "clip", s_clip_graph);
    const char *gpath = nv.gpath;
    int (*run)(const float *const *, float *) = nv.run;
    int (*nparams)(void) = nv.nparams;
    assert_int_equal(nparams(), 3); /* x, d.weight, d.bias */
    float x[32], w[256], b[16], want[32], got[32];
    for (int k = 0; k < 32; k++)
        x[k] = (float)(k % 7 - 1) * 0.25f; /* -0.25 .. 1.25 */
    for (int o = 0; o < 16; o++) {
        b[o] = 0.25f;
        for (int i = 0; i < 16; i++)
            w[o * 16 + i] = (float)(o - 7) * 0.5f;
    }
    int six = 0, zero = 0, between = 0;
    for (int n = 0; n < 2; n++)
        for (int o = 0; o < 16; o++) {
            float y = b[o];
            for (int i = 0; i < 16; i++)
                y += fminf(fmaxf(x[n * 16 + i], -0.25f), 0.5f) * w[o * 16 + i];
            want[n * 16 + o] = fminf(fmaxf(y, 0.0f), 6.0f);
            six += y > 6;
            zero += y < 0;
            between += y > 0 && y < 6;
        }
    assert_true(six > 0 && zero > 0 && between > 0);
    float *p[3] = {x, w, b};
    assert_int_equal(run((const float *const *)p, got), 0);
    for (int k = 0; k < 32; k++)
        if (fabsf(got[k] - want[k]) > 1e-5f)
            fail_msg("output %d is %g, expected %g", k, got[k], want[k]);
    /* oneDNN's graph of the same model, checked against these values. */
    kl_dnnl_net_t *net = NULL;
    int rc = kl_export_dnnl_open(gpath, p, 3, &net, err);
    if (rc == KL_ERR_UNSUPPORTED && strstr(err, "built without libdnnl")) {
        assert_null(net);
    } else {
        if (rc)
            fail_msg("oneDNN: %s", err);
        assert_int_equal(kl_export_dnnl_numel(net), 32);
        double rel = 1;
        if (kl_export_dnnl_check(net, want, 32, 1e-5, &rel, err))
            fail_msg("oneDNN: %s", err);
        assert_true(rel <= 1e-5);
        kl_export_dnnl_close(net);
    }
    s_naive_close(&nv);
}

/* An activation fused into each of six dense layers (all of kl_act, the
 * hard_sigmoid with its own alpha and beta), summed by adds: the naive
 * build (kernels with the epilogue) and the oneDNN graph (post-ops:
 * logistic, swish, hardswish, linear + clip, gelu_erf, gelu_tanh) both
 * match the definitions in double. */
static const char s_act_graph[] = "model act\n"
                                  "input x 2x16\n"
                                  "d1 = dense x O=16\n"
                                  "r1 = sigmoid d1\n"
                                  "d2 = dense x O=16\n"
                                  "r2 = silu d2\n"
                                  "d3 = dense x O=16\n"
                                  "r3 = hard_swish d3\n"
                                  "d4 = dense x O=16\n"
                                  "r4 = hard_sigmoid d4 alpha=0.25 beta=0.375\n"
                                  "d5 = dense x O=16\n"
                                  "r5 = gelu d5\n"
                                  "d6 = dense x O=16\n"
                                  "r6 = gelu d6 approximate=tanh\n"
                                  "s1 = add r1 r2\n"
                                  "s2 = add s1 r3\n"
                                  "s3 = add s2 r4\n"
                                  "s4 = add s3 r5\n"
                                  "s5 = add s4 r6\n";

static double s_act_ref(int v, double y)
{
    switch (v) {
    case 0:
        return 1 / (1 + exp(-y));
    case 1:
        return y / (1 + exp(-y));
    case 2:
        return y * fmin(fmax(y + 3, 0), 6) / 6;
    case 3:
        return fmin(fmax(0.25 * y + 0.375, 0), 1);
    case 4:
        return 0.5 * y * (1 + erf(y / sqrt(2)));
    default:
        return 0.5 * y *
               (1 + tanh(sqrt(2 / M_PI) * (y + 0.044715 * y * y * y)));
    }
}

static void test_fused_act_naive_and_dnnl(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_naive_t nv;
    s_naive_open(&nv, "act", s_act_graph);
    assert_int_equal(nv.nparams(), 13); /* x, then each dense's W and b */
    static float x[32], w[6][256], b[6][16], got[32];
    double want[32] = {0};
    const float *p[13] = {x};
    for (int k = 0; k < 32; k++)
        x[k] = (float)(k % 7 - 3) * 0.25f; /* -0.75 .. 0.75 */
    for (int v = 0; v < 6; v++) {
        for (int o = 0; o < 16; o++) {
            b[v][o] = 0.125f * (float)(v - 2);
            for (int i = 0; i < 16; i++)
                w[v][o * 16 + i] = (float)((o * 5 + i * 3 + v) % 9 - 4) * 0.25f;
        }
        p[1 + 2 * v] = w[v];
        p[2 + 2 * v] = b[v];
        for (int n = 0; n < 2; n++)
            for (int o = 0; o < 16; o++) {
                double y = b[v][o];
                for (int i = 0; i < 16; i++)
                    y += (double)x[n * 16 + i] * w[v][o * 16 + i];
                want[n * 16 + o] += s_act_ref(v, y);
            }
    }
    /* the activations are tasks' epilogues, not layers of their own */
    int (*nlayers)(void) = NULL;
    *(void **)&nlayers = dlsym(nv.h, "kiln_model_nlayers");
    assert_non_null(nlayers);
    assert_int_equal(nlayers(), 11);
    assert_int_equal(nv.run((const float *const *)p, got), 0);
    for (int k = 0; k < 32; k++)
        if (fabs(got[k] - want[k]) > 1e-5 * (1 + fabs(want[k])))
            fail_msg("output %d is %.9g, expected %.9g", k, got[k], want[k]);
    kl_dnnl_net_t *net = NULL;
    int rc = kl_export_dnnl_open(nv.gpath, (float *const *)p, 13, &net, err);
    if (rc == KL_ERR_UNSUPPORTED && strstr(err, "built without libdnnl")) {
        assert_null(net);
    } else {
        if (rc)
            fail_msg("oneDNN: %s", err);
        float wf[32];
        for (int k = 0; k < 32; k++)
            wf[k] = (float)want[k];
        double rel = 1;
        if (kl_export_dnnl_check(net, wf, 32, 1e-5, &rel, err))
            fail_msg("oneDNN: %s", err);
        assert_true(rel <= 1e-5);
        kl_export_dnnl_close(net);
    }
    s_naive_close(&nv);
}

/* An attention-shaped graph as a transformer export gives it: a matmul of a
 * 3-D activation by a weight (shared over the leading dim), a 4-D batch
 * matmul, softmax, and a layer_norm with its own scale and shift. The
 * parameters after the layer_norm (the last matmul's) must still reach
 * their layer: oneDNN's output agrees with the naive build's. */
static const char s_xf_graph[] = "model xf\n"
                                 "input x 1x8x16\n"
                                 "q = matmul x N=16 bias=1\n"
                                 "h = reshape q shape=1x2x8x8\n"
                                 "kt = transpose h perm=0,1,3,2\n"
                                 "s = matmul h kt\n"
                                 "p = softmax s\n"
                                 "a = matmul p h\n"
                                 "f = reshape a shape=1x8x16\n"
                                 "n = layer_norm f eps=1e-05 affine=1\n"
                                 "o = matmul n N=4 bias=1\n";

static void test_dnnl_nd_matmul_and_affine_layer_norm(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_naive_t nv;
    s_naive_open(&nv, "xf", s_xf_graph);
    const char *gpath = nv.gpath;
    int (*run)(const float *const *, float *) = nv.run;
    int (*nparams)(void) = nv.nparams;
    long long (*pnumel)(int) = nv.pnumel;
    /* x, q.weight, q.bias, n.weight, n.bias, o.weight, o.bias */
    assert_int_equal(nparams(), 7);
    float *p[7], want[32];
    kl_rng_t rng;
    kl_rng_seed(&rng, 11);
    for (int i = 0; i < 7; i++) {
        p[i] = kl_xmalloc((size_t)pnumel(i) * sizeof(float));
        for (long long k = 0; k < pnumel(i); k++)
            p[i][k] = (float)(2 * kl_rng_double(&rng) - 1);
    }
    assert_int_equal(run((const float *const *)p, want), 0);
    kl_dnnl_net_t *net = NULL;
    int rc = kl_export_dnnl_open(gpath, p, 7, &net, err);
    if (rc == KL_ERR_UNSUPPORTED && strstr(err, "built without libdnnl")) {
        assert_null(net);
    } else {
        if (rc)
            fail_msg("oneDNN: %s", err);
        assert_int_equal(kl_export_dnnl_numel(net), 32);
        double rel = 1;
        if (kl_export_dnnl_check(net, want, 32, 1e-4, &rel, err))
            fail_msg("oneDNN: %s", err);
        assert_true(rel <= 1e-4);
        kl_export_dnnl_close(net);
    }
    for (int i = 0; i < 7; i++)
        free(p[i]);
    s_naive_close(&nv);
}

/* Two residual blocks: the first convolution with a residual reads it as
 * its source too (so oneDNN copies it), the second is its residual's last
 * reader (so oneDNN sums into its buffer). oneDNN's output agrees with the
 * naive build's; against a wrong reference its check fails and names the
 * element. */
static const char s_res_graph[] = "model res\n"
                                  "input x 1x16x8x8\n"
                                  "c = conv2d x K=16 R=3 pad=1 bias=1\n"
                                  "r = relu c\n"
                                  "c2 = conv2d r K=16 R=3 pad=1 bias=1\n"
                                  "s = add c2 r\n"
                                  "c3 = conv2d s K=16 R=3 pad=1 bias=1\n"
                                  "r3 = relu c3\n"
                                  "c4 = conv2d r3 K=16 R=3 pad=1 bias=1\n"
                                  "s2 = add c4 s\n"
                                  "o = relu s2\n";

static void test_dnnl_residual_and_wrong_reference(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_naive_t nv;
    s_naive_open(&nv, "res", s_res_graph);
    const char *gpath = nv.gpath;
    int (*run)(const float *const *, float *) = nv.run;
    int (*nparams)(void) = nv.nparams;
    long long (*pnumel)(int) = nv.pnumel;
    assert_int_equal(nparams(), 9); /* x, then 4 x (weight, bias) */
    float *p[9], want[1024];
    kl_rng_t rng;
    kl_rng_seed(&rng, 7);
    for (int i = 0; i < 9; i++) {
        p[i] = kl_xmalloc((size_t)pnumel(i) * sizeof(float));
        for (long long k = 0; k < pnumel(i); k++)
            p[i][k] = (i ? 0.1f : 1.0f) * (float)(2 * kl_rng_double(&rng) - 1);
    }
    assert_int_equal(run((const float *const *)p, want), 0);
    kl_dnnl_net_t *net = NULL;
    int rc = kl_export_dnnl_open(gpath, p, 9, &net, err);
    if (rc == KL_ERR_UNSUPPORTED && strstr(err, "built without libdnnl")) {
        assert_null(net);
    } else {
        if (rc)
            fail_msg("oneDNN: %s", err);
        assert_int_equal(kl_export_dnnl_numel(net), 1024);
        double rel = 1;
        if (kl_export_dnnl_check(net, want, 1024, 1e-4, &rel, err))
            fail_msg("oneDNN: %s", err);
        assert_true(rel <= 1e-4);
        char out[4096] = "";
        FILE *f = fmemopen(out, sizeof out, "w");
        assert_non_null(f);
        kl_export_dnnl_describe(net, f);
        fclose(f);
        if (!strstr(out, "oneDNN layer c2: convolution ") ||
            !strstr(out, "residual sum copied") ||
            !strstr(out, "oneDNN layer c4: convolution ") ||
            !strstr(out, "residual sum in place") ||
            !strstr(out, "1 in place, 1 copied, 0 reordered"))
            fail_msg("describe: %s", out);
        /* A wrong reference: the check fails, naming the element. */
        float bad = want[517];
        want[517] = bad + 1.0f;
        assert_int_equal(kl_export_dnnl_check(net, want, 1024, 1e-4, &rel, err),
                         KL_ERR_RUNTIME);
        if (!strstr(err, "element 517 is "))
            fail_msg("the mismatch is not named: %s", err);
        assert_true(rel > 1e-4);
        want[517] = bad;
        assert_int_equal(kl_export_dnnl_check(net, want, 1023, 1e-4, NULL, err),
                         KL_ERR_INVAL);
        kl_export_dnnl_close(net);
    }
    for (int i = 0; i < 9; i++)
        free(p[i]);
    s_naive_close(&nv);
}

int main(void)
{
    if (kl_target_parse(kl_cpu_target(), &(kl_target_t){0}, NULL) != KL_OK) {
        printf("SKIP: no CPU design space for %s\n", kl_cpu_target());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_target),
        cmocka_unit_test_setup_teardown(test_best_missing_names_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_other_target_never_used, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_simulated_is_not_a_result, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_conditions_and_unverified, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cuda_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_missing_and_fallback, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_bf16, setup, teardown),
        cmocka_unit_test(test_clip_naive_and_dnnl),
        cmocka_unit_test(test_fused_act_naive_and_dnnl),
        cmocka_unit_test(test_dnnl_residual_and_wrong_reference),
        cmocka_unit_test(test_dnnl_nd_matmul_and_affine_layer_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
