/* Unit tests of the fused activation epilogues (kl_act, KL_EPI_ACT in
 * kl_ir.h): their text and named-op parameter act= (and the errors), the
 * reference interpreter's values at a few points, and generated kernels
 * with each activation built and run against the interpreter: the
 * reference C, sampled CPU schedules (vectorized C), Winograd, the
 * avx512_bf16 tensorized C (dense and convolution) and the AMX bf16
 * product, each run where this CPU has the instructions (built always).
 * The CUDA forms are in cuda_codegen_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_abi.h"
#include "kl_cgrun.h"
#include "kl_check.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_test_tmp.h"
#include "kl_util.h"
#include "wl_fx.h"

static char s_dir[256];

static int s_setup(void **state)
{
    (void)state;
    if (!dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE))
        return -1;
    return kl_test_mkdtemp(s_dir, sizeof s_dir, "kiln-act-test-XXXXXX") ? 0
                                                                        : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kl_test_rmdir(s_dir);
    return 0;
}

/* The message of spec's error (which must fail). */
static const char *s_err(const char *spec)
{
    static char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    int rc = kl_workload_from_string(spec, &w, err);
    if (rc == KL_OK)
        fail_msg("%s: parsed (expected an error)", spec);
    assert_int_equal(rc, KL_ERR_INVAL);
    assert_null(w);
    return err;
}

static void s_err_has(const char *spec, const char *what)
{
    const char *e = s_err(spec);
    if (!strstr(e, what))
        fail_msg("%s: error '%s' does not say '%s'", spec, e, what);
}

static void test_parse(void **state)
{
    (void)state;
    char text[256];
    for (int a = 0; a < KL_ACT_COUNT; a++) {
        const char *n = kl_act_name((kl_act)a);
        kl_act back;
        assert_true(kl_act_parse(n, &back));
        assert_int_equal(back, a);
        assert_non_null(strstr(kl_act_list(), n));
        snprintf(text, sizeof text,
                 "Y[i,j] += A[i,k] * B[k,j] | + b[j] | %s where i=4, j=8, "
                 "k=3",
                 n);
        kl_workload_t *w = fx_wl(text);
        assert_int_equal(w->nepi, 2);
        assert_int_equal(w->epi[1].kind, KL_EPI_ACT);
        assert_int_equal(w->epi[1].act, a);
        char want[64];
        snprintf(want, sizeof want, "| + b[j] | %s%s", n,
                 a == KL_ACT_HARD_SIGMOID ? "(0.2, 0.5)" : " where");
        if (!strstr(w->canonical, want))
            fail_msg("%s: canonical '%s' lacks '%s'", n, w->canonical, want);
        /* The canonical text parses to itself. */
        kl_workload_t *w2 = fx_wl(w->canonical);
        assert_string_equal(w2->canonical, w->canonical);
        assert_memory_equal(w2->key, w->key, 16);
        kl_workload_free(&w2);
        kl_workload_free(&w);
    }
    assert_false(kl_act_parse("swish", &(kl_act){0}));
    assert_null(kl_act_name(KL_ACT_COUNT));
    /* hard_sigmoid's bounds: the default spelled out is the same key;
     * others differ. */
    kl_workload_t *d = fx_wl("Y[i] = X[i] | hard_sigmoid where i=8");
    kl_workload_t *e = fx_wl("Y[i] = X[i] | hard_sigmoid(0.2, 0.5) where i=8");
    kl_workload_t *f =
        fx_wl("Y[i] = X[i] | hard_sigmoid(0.1666, -0.5) where i=8");
    assert_memory_equal(d->key, e->key, 16);
    assert_memory_not_equal(d->key, f->key, 16);
    assert_non_null(strstr(f->canonical, "hard_sigmoid(0.1666, -0.5)"));
    assert_true(f->epi[0].lo == 0.1666 && f->epi[0].hi == -0.5);
    kl_workload_free(&d);
    kl_workload_free(&e);
    kl_workload_free(&f);
    /* Errors. */
    s_err_has("Y[i] = X[i] | swish where i=8",
              "an activation (sigmoid, silu, hard_swish, hard_sigmoid, gelu "
              "or gelu_tanh)");
    s_err_has("Y[i] = X[i] | hard_sigmoid(0.2 where i=8",
              "',' between hard_sigmoid's alpha and beta");
    s_err_has("Y[i] = X[i] | silu where i=4; X: u8[4], Y: u8[4]",
              "silu is not allowed in an integer workload's epilogue");
}

static void test_named_ops(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *suffix, *epi;
    } ok[] = {
        {"conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 pad=1 bias=1 act=silu", "_silu",
         "| + bias[f] | silu where"},
        {"conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 pad=1 residual=1 act=gelu",
         "_gelu", "] | gelu where"},
        {"depthwise_conv2d N=1 C=8 H=7 W=7 R=3 S=3 act=hard_swish",
         "_hard_swish", "| hard_swish where"},
        {"dense N=2 I=16 O=8 act=gelu_tanh", "_gelu_tanh",
         "| + b[o] | gelu_tanh where"},
        {"matmul M=4 N=4 K=4 act=sigmoid", "_sigmoid", "| sigmoid where"},
        {"matmul M=4 N=4 K=4 act=hard_sigmoid", "_hard_sigmoid",
         "| hard_sigmoid(0.2, 0.5) where"},
        {"matmul M=4 N=4 K=4 act=hard_sigmoid alpha=0.25 beta=0.4",
         "_hard_sigmoid_a0.25_b0.4", "| hard_sigmoid(0.25, 0.4) where"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kl_workload_t *w = fx_wl(ok[i].spec);
        size_t nl = strlen(w->name), sl = strlen(ok[i].suffix);
        if (nl < sl || strcmp(w->name + nl - sl, ok[i].suffix))
            fail_msg("%s: name %s does not end %s", ok[i].spec, w->name,
                     ok[i].suffix);
        if (!strstr(w->canonical, ok[i].epi))
            fail_msg("%s: canonical '%s' lacks '%s'", ok[i].spec, w->canonical,
                     ok[i].epi);
        /* The activation changes the key. */
        char plain[160];
        snprintf(plain, sizeof plain, "%s", ok[i].spec);
        *strstr(plain, " act=") = '\0';
        kl_workload_t *p = fx_wl(plain);
        assert_memory_not_equal(p->key, w->key, 16);
        assert_int_equal(p->nepi + 1, w->nepi);
        kl_workload_free(&p);
        kl_workload_free(&w);
    }
    s_err_has("conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 act=swish",
              "conv2d: bad value 'swish' for act (expected sigmoid, silu, "
              "hard_swish, hard_sigmoid, gelu or gelu_tanh)");
    s_err_has("conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 relu=1 act=silu",
              "conv2d: relu=1 and act=silu are both activations");
    s_err_has("dense N=1 I=8 O=8 clip=0,6 act=hard_swish",
              "dense: clip= and act=hard_swish are both activations");
    s_err_has("matmul M=4 N=4 K=4 act=silu alpha=1",
              "matmul: alpha= is hard_sigmoid's, not act=silu's");
    s_err_has("matmul M=4 N=4 K=4 beta=1", "matmul: beta= without act");
    s_err_has("matmul M=4 N=4 K=4 act=hard_sigmoid alpha=x",
              "bad value 'x' for alpha");
    s_err_has("qconv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 act=silu",
              "qconv2d: act=silu is not supported by a quantized op");
    s_err_has("batch_matmul B=2 M=4 N=4 K=4 act=silu",
              "unknown parameter 'act'");
}

static void test_reference_values(void **state)
{
    (void)state;
    static const struct {
        kl_act a;
        double x, y;
    } pts[] = {
        {KL_ACT_SIGMOID, 0, 0.5},
        {KL_ACT_SIGMOID, 2, 0.88079707797788231},
        {KL_ACT_SIGMOID, -800, 0},
        {KL_ACT_SILU, -1, -0.26894142136999512},
        {KL_ACT_SILU, 3, 2.8577223804673},
        {KL_ACT_HARD_SWISH, 1, 2.0 / 3.0},
        {KL_ACT_HARD_SWISH, -4, 0},
        {KL_ACT_HARD_SWISH, 4, 4},
        {KL_ACT_HARD_SWISH, -1.5, -0.375},
        {KL_ACT_HARD_SIGMOID, 1, 0.7},
        {KL_ACT_HARD_SIGMOID, -3, 0},
        {KL_ACT_HARD_SIGMOID, 3, 1},
        {KL_ACT_GELU, 1, 0.84134474606854293},
        {KL_ACT_GELU, -1, -0.15865525393145707},
        {KL_ACT_GELU, 0, 0},
        {KL_ACT_GELU_TANH, 1, 0.84119199060827677},
        {KL_ACT_GELU_TANH, -2, -0.04540230591222494},
    };
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        double y = kl_act_eval(pts[i].a, KL_ACT_HSIG_ALPHA, KL_ACT_HSIG_BETA,
                               pts[i].x);
        if (!(fabs(y - pts[i].y) <= 1e-12 * fmax(1, fabs(pts[i].y))))
            fail_msg("%s(%g) = %.17g, expected %.17g", kl_act_name(pts[i].a),
                     pts[i].x, y, pts[i].y);
    }
    assert_true(kl_act_eval(KL_ACT_HARD_SIGMOID, 0.25, 0.4, 1) == 0.65);
    /* Through the interpreter: after the bias, in order. */
    kl_workload_t *w = fx_wl("Y[i] = X[i] | + 1 | gelu | * 2 | silu where i=3");
    float x[3] = {-2, -1, 0}, y[3] = {0};
    float *bufs[2] = {x, y};
    kl_workload_eval(w, bufs);
    for (int i = 0; i < 3; i++) {
        double g = 2 * kl_act_eval(KL_ACT_GELU, 0, 0, x[i] + 1.0);
        double want = g / (1 + exp(-g));
        assert_true(fabs(y[i] - want) <= 1e-6);
    }
    assert_true(y[1] == 0.0f); /* gelu(0) */
    kl_workload_free(&w);
}

/* Kernels of several workloads built in one compile (the compiler is
 * most of these tests' time), then each workload's run against the
 * interpreter. */
#define MAXK 48
#define MAXW 12
typedef struct {
    char *srcs[MAXK], *ents[MAXK];
    int n;
    kl_workload_t *ws[MAXW];
    int first[MAXW], cnt[MAXW];
    int nw;
    int nvec; /* kernels with an activation on a whole vector */
} batch_t;

/* Adds the C of spec's reference and of n sampled schedules on target
 * (all Winograd ones when wino, none otherwise), each of which must call
 * the activation's helper (need: "= kl_silu", which the prelude's
 * definitions do not hold). */
static void s_add(batch_t *b, const char *spec, const char *target, int n,
                  const char *need, bool wino)
{
    char err[KL_ERRMSG_LEN], entry[32];
    kl_workload_t *w = fx_wl(spec);
    kl_space_t *sp = NULL;
    if (kl_space_for_target(target, w, &sp, err))
        fail_msg("%s: %s", spec, err);
    assert_true(b->nw < MAXW && b->n + n + 1 <= MAXK);
    b->ws[b->nw] = w;
    b->first[b->nw] = b->n;
    kl_kernel_t k;
    snprintf(entry, sizeof entry, "kl_ref%d", b->n);
    assert_int_equal(kl_codegen_reference(w, entry, &k, err), KL_OK);
    b->srcs[b->n] = k.source;
    b->ents[b->n++] = k.entry;
    kl_rng_t rng;
    kl_rng_seed(&rng, 17);
    int m = 0;
    for (int tries = 0; m < n && tries < 60; tries++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("%s: %s", spec, err);
        if ((kl_sched_winograd_m(s) > 0) == wino) {
            snprintf(entry, sizeof entry, "kl_c%d", b->n);
            if (kl_codegen_c(s, kl_space_target(sp), entry, &k, err))
                fail_msg("%s: %s", spec, err);
            b->nvec += strstr(k.source, "xs = kl_") != NULL;
            b->srcs[b->n] = k.source;
            b->ents[b->n++] = k.entry;
            m++;
        }
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    assert_int_equal(m, n);
    b->cnt[b->nw++] = n + 1;
    for (int i = b->first[b->nw - 1]; i < b->n; i++)
        if (!strstr(b->srcs[i], need))
            fail_msg("%s: kernel %d lacks %s\n%s", spec, i, need, b->srcs[i]);
    if (wino)
        for (int i = b->first[b->nw - 1] + 1; i < b->n; i++)
            assert_non_null(strstr(b->srcs[i], "Winograd F("));
    kl_space_destroy(&sp);
}

static void s_run(batch_t *b)
{
    char err[KL_ERRMSG_LEN], *so = NULL;
    if (kl_check_build_many((const char *const *)b->srcs, b->n, s_dir, &so,
                            err))
        fail_msg("build: %s", err);
    /* A few ulp of f32 through the activation; the f32 sums of up to 144
     * products dominate. */
    for (int i = 0; i < b->nw; i++)
        if (kl_check_run_many(so, (const char *const *)b->ents + b->first[i],
                              b->cnt[i], b->ws[i], 7, 1e-4, 1e-5, NULL, NULL,
                              err))
            fail_msg("%s: %s", b->ws[i]->canonical, err);
    unlink(so);
    free(so);
    for (int i = 0; i < b->n; i++) {
        free(b->srcs[i]);
        free(b->ents[i]);
    }
    for (int i = 0; i < b->nw; i++)
        kl_workload_free(&b->ws[i]);
}

/* Each activation through the reference C, sampled vectorized C and the
 * Winograd form (which applies the epilogue to its output tiles). */
static void test_kernels_c(void **state)
{
    (void)state;
    char spec[200], need[40];
    batch_t b = {0};
    for (int a = 0; a < KL_ACT_COUNT; a++) {
        const char *n = kl_act_name((kl_act)a);
        snprintf(need, sizeof need, "= kl_%s", n);
        /* Sums of 72 products of [-1, 1): about +-3, both sides of every
         * kink and tail. */
        snprintf(spec, sizeof spec,
                 "conv2d N=1 C=8 H=6 W=6 K=16 R=3 S=3 pad=1 bias=1 act=%s%s", n,
                 a == KL_ACT_HARD_SIGMOID ? " alpha=0.3 beta=0.4" : "");
        s_add(&b, spec, "cpu", 2, need, false);
    }
    /* Far tails: the exp's clamp (|x| beyond 88) and its underflow. */
    s_add(&b, "Y[i,j] += A[i,k] * B[k,j] | * 60 | silu where i=16, j=32, k=8",
          "cpu", 2, "= kl_silu", false);
    s_add(&b,
          "Y[i,j] += A[i,k] * B[k,j] | * 60 | gelu_tanh | sigmoid where "
          "i=16, j=32, k=8",
          "cpu", 1, "= kl_sigmoid", false);
    /* gelu's own erf in the vector form, over [-12, 12] */
    s_add(&b, "Y[i,j] += A[i,k] * B[k,j] | * 12 | gelu where i=16, j=64, k=1",
          "cpu", 2, "= kl_gelu", false);
    s_add(&b, "conv2d N=1 C=16 H=8 W=8 K=16 R=3 S=3 pad=1 bias=1 act=gelu",
          "cpu/x86_64-avx512", 2, "= kl_gelu", true);
    /* the vector form (xs = kl_silu16(xs)) was among them */
    if (b.nvec < 3)
        fail_msg("%d kernels with a vector activation", b.nvec);
    s_run(&b);
}

/* Builds kernel k of w and, when this CPU has intrin, runs it (prepared)
 * against the interpreter, which reads the same bf16 values: only the f32
 * sums' order differs. Whether it ran. */
static bool s_run_bf16(const kl_workload_t *w, const kl_kernel_t *k,
                       const char *intrin)
{
    char err[KL_ERRMSG_LEN];
    kl_cgrun_t r;
    if (kl_cgrun_load(&r, k->source, k->entry, s_dir, err))
        fail_msg("%s: %s\n%s", w->name, err, k->source);
    bool can = kl_intrin_cpu_has(kl_intrin_find(intrin));
    if (can) {
        int nt = w->ntensors, ot = kl_workload_output(w);
        float *a[KL_IR_MAX_TENSORS + 1] = {0}, *ref[KL_IR_MAX_TENSORS];
        bool cst[KL_IR_MAX_TENSORS];
        kl_rng_t rng;
        kl_rng_seed(&rng, 9);
        for (int t = 0; t < nt; t++) {
            int64_t n = kl_tensor_numel(&w->tensors[t]);
            a[t] = kl_xcalloc((size_t)n, 4);
            ref[t] = kl_xcalloc((size_t)n, 4);
            for (int64_t e = 0; t != ot && e < n; e++)
                a[t][e] = ref[t][e] = (float)(2 * kl_rng_double(&rng) - 1);
            cst[t] = w->tensors[t].is_const;
        }
        a[nt] = kl_abi_prepare(r.prep, nt, (void *const *)a, cst);
        assert_non_null(a[nt]);
        r.fn((void *const *)a);
        kl_workload_eval(w, ref);
        int64_t n = kl_tensor_numel(&w->tensors[ot]);
        double big = 0;
        for (int64_t e = 0; e < n; e++)
            big = fmax(big, fabs(ref[ot][e]));
        assert_true(big > 0.5);
        for (int64_t e = 0; e < n; e++)
            if (!(fabs(a[ot][e] - ref[ot][e]) <= 2e-5 * big))
                fail_msg("%s: out[%lld] = %.9g, reference %.9g", w->name,
                         (long long)e, a[ot][e], ref[ot][e]);
        for (int t = 0; t <= nt; t++)
            free(a[t]);
        for (int t = 0; t < nt; t++)
            free(ref[t]);
    }
    kl_cgrun_close(&r);
    return can;
}

/* The bf16 tensorized C: avx512_bf16 (sampled until tensorized; a
 * dense and a convolution, two generators) and the AMX product. */
static void test_kernels_bf16(void **state)
{
    (void)state;
    const char *specs[] = {
        "dense N=5 I=40 O=32 in=bf16 act=gelu",
        "conv2d N=1 C=16 H=6 W=6 K=16 R=3 S=3 pad=1 bias=1 in=bf16 "
        "act=hard_swish",
    };
    char err[KL_ERRMSG_LEN];
    int ran = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        kl_workload_t *w = fx_wl(specs[i]);
        kl_space_t *sp = NULL;
        if (kl_space_for_target("cpu/x86_64-avx512+bf16", w, &sp, err))
            fail_msg("%s: %s", specs[i], err);
        kl_rng_t rng;
        kl_rng_seed(&rng, 3);
        kl_kernel_t k = {0};
        for (int t = 0; t < 80 && !k.source; t++) {
            kl_trace_t *tr = NULL;
            kl_sched_t *s = NULL;
            kl_tensorize_t tz;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", specs[i], err);
            if (kl_sched_tensorized(s, &tz, err) == KL_OK &&
                kl_codegen_c(s, NULL, "kl_bf", &k, err))
                fail_msg("%s: %s", specs[i], err);
            kl_trace_free(&tr);
            kl_sched_destroy(&s);
        }
        if (!k.source)
            fail_msg("%s: no tensorized sample", specs[i]);
        assert_non_null(strstr(k.source, "vdpbf16ps"));
        assert_non_null(strstr(k.source, "static inline float kl_expf("));
        ran += s_run_bf16(w, &k, "avx512_bf16");
        kl_kernel_free(&k);
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
    kl_workload_t *w = fx_wl("dense N=20 I=70 O=40 in=bf16 act=silu");
    kl_kernel_t k;
    if (kl_codegen_amx_product(w, "amx_bf16", "kl_amx", &k, err))
        fail_msg("%s", err);
    assert_non_null(strstr(k.source, "x = kl_siluf(x);"));
    ran += s_run_bf16(w, &k, "amx_bf16");
    kl_kernel_free(&k);
    kl_workload_free(&w);
    print_message("%d of 3 bf16 kernels run (the rest built)\n", ran);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_named_ops),
        cmocka_unit_test(test_reference_values),
        cmocka_unit_test_setup_teardown(test_kernels_c, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_kernels_bf16, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
