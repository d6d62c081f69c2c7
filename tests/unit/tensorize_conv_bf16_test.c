/* Unit tests of bf16 convolutions tensorized with avx512_bf16
 * (codegen_tensorize_conv_bf16.c; the design-space branch in
 * rules_cpu_bf16.c): conv2d in=bf16 kernels sampled from the space of
 * "cpu/x86_64-avx512+bf16" (3x3 pad 1 stride 1 and stride 2, NCHW and
 * NHWC, bias + relu and residual epilogues) are compiled, prepared and
 * run against the reference interpreter (kl_workload_eval, which rounds
 * every bf16 read to nearest even) within f32 accumulation error and the
 * agent's bf16 tolerance (kl_workload_rtol); the prepared weights are
 * checked element by element; tensorize's refusal names what differs.
 * Running needs avx512_bf16 on this CPU; without it the source must still
 * compile and prepare must refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bf16_fx.h"
#include "kl_abi.h"
#include "kl_cgrun.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

static char s_dir[512];

static int s_setup(void **state)
{
    (void)state;
    if (!dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE))
        return -1;
    return kl_test_mkdtemp(s_dir, sizeof s_dir, "kl_tzcbf_test_XXXXXX") ? 0
                                                                        : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kl_test_rmdir(s_dir);
    return 0;
}

/* f32 buffers for every tensor (bf16 ones stored as f32), inputs in
 * [-1, 1) (most not bf16: the rounding matters), plus the prepared slot. */
static float **s_alloc(const kl_workload_t *w, uint64_t seed, bool absval)
{
    float **b = kl_xcalloc((size_t)w->ntensors + 1, sizeof *b);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    for (int t = 0; t < w->ntensors; t++) {
        int64_t n = kl_tensor_numel(&w->tensors[t]);
        b[t] = kl_xcalloc((size_t)n, 4);
        for (int64_t i = 0; !w->tensors[t].is_output && i < n; i++) {
            float v = (float)(2 * kl_rng_double(&rng) - 1);
            b[t][i] = absval ? fabsf(v) : v;
        }
    }
    return b;
}

static void s_free(const kl_workload_t *w, float **b)
{
    for (int t = 0; t < w->ntensors; t++)
        free(b[t]);
    free(b);
}

/* The reduction length (C R S) of w. */
static int64_t s_red(const kl_workload_t *w)
{
    int64_t n = 1;
    for (int i = 0; i < w->niters; i++)
        if (w->iters[i].reduce)
            n *= w->iters[i].extent;
    return n;
}

/* Runs kernel k of w (prepared, then called twice) against the reference;
 * false: no avx512_bf16 here (prepare refused). The error of f32 sums of
 * exact bf16 products is at most (C R S) u sum |x w| (+ the epilogue's
 * terms), which mag is; the agent's check, rtol (|ref| + rms) with
 * kl_workload_rtol, must hold too. */
static bool s_run(const kl_workload_t *w, const kl_kernel_t *k)
{
    char err[KL_ERRMSG_LEN];
    kl_cgrun_t r;
    if (kl_cgrun_load(&r, k->source, k->entry, s_dir, err))
        fail_msg("%s: %s\n%s", w->name, err, k->source);
    assert_non_null(r.prep);
    int nt = w->ntensors, ot = kl_workload_output(w);
    float **a = s_alloc(w, 7, false), **ref = s_alloc(w, 7, false),
          **mag = s_alloc(w, 7, true);
    bool cst[KL_IR_MAX_TENSORS];
    for (int t = 0; t < nt; t++)
        cst[t] = w->tensors[t].is_const;
    void *blk = kl_abi_prepare(r.prep, nt, (void *const *)a, cst);
    bool ran = kl_intrin_cpu_has(kl_intrin_find("avx512_bf16"));
    if (!ran) {
        assert_null(blk);
    } else {
        assert_non_null(blk);
        a[nt] = blk;
        kl_workload_eval(w, ref);
        kl_workload_eval(w, mag);
        int64_t n = kl_tensor_numel(&w->tensors[ot]);
        double rms = 0, u = ldexp(1.0, -24), rt = kl_workload_rtol(w, 1e-3);
        for (int64_t i = 0; i < n; i++)
            rms += (double)ref[ot][i] * ref[ot][i];
        rms = sqrt(rms / (double)n);
        for (int rep = 0; rep < 2; rep++) {
            for (int64_t i = 0; i < n; i++)
                a[ot][i] = -777.0f;
            r.fn((void *const *)a);
            for (int64_t i = 0; i < n; i++) {
                double d = fabs((double)a[ot][i] - ref[ot][i]);
                if (!(d <= 2.0 * (double)s_red(w) * u * mag[ot][i] + 1e-6) ||
                    !(d <= rt * (fabs(ref[ot][i]) + rms)))
                    fail_msg("%s: out[%lld] = %.9g, reference %.9g (scale "
                             "%g)\n%s",
                             w->name, (long long)i, a[ot][i], ref[ot][i],
                             mag[ot][i], k->source);
            }
        }
        free(blk);
        a[nt] = NULL;
    }
    s_free(w, a);
    s_free(w, ref);
    s_free(w, mag);
    kl_cgrun_close(&r);
    return ran;
}

/* tensorize on conv2d spec's innermost loop with intrin: rc and err. */
static int s_tz_naive(const char *spec, const char *intrin, char *err)
{
    kl_workload_t *w = NULL;
    assert_int_equal(kl_workload_from_string(spec, &w, err), KL_OK);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int n = kl_sched_nloops(s);
    int rc = kl_sched_tensorize(s, kl_sched_loop(s, n - 1)->id, intrin, err);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
    return rc;
}

/* The refusals name the tensor and the dtypes that differ. */
static void test_refusals(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *f32 = "conv2d N=1 C=16 H=8 W=8 K=16 R=3 S=3 pad=1";
    const char *bf = "conv2d N=1 C=16 H=8 W=8 K=16 R=3 S=3 pad=1 in=bf16";
    assert_int_not_equal(s_tz_naive(f32, "avx512_bf16", err), KL_OK);
    assert_non_null(strstr(err, "is f32, wants bf16"));
    assert_int_not_equal(s_tz_naive(bf, "avx512_vnni", err), KL_OK);
    assert_non_null(strstr(err, "is bf16, wants u8"));
}

/* A tensorized sample of spec on the +bf16 target (seeds from 1 on). */
static void s_sample_tz(const kl_workload_t *w, kl_kernel_t *k)
{
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cpu/x86_64-avx512+bf16", w, &sp, err),
                     KL_OK);
    bool got = false;
    for (uint64_t seed = 1; seed <= 40 && !got; seed++) {
        kl_rng_t rng;
        kl_rng_seed(&rng, seed);
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        assert_int_equal(kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err),
                         KL_OK);
        kl_tensorize_t tz;
        if (kl_sched_tensorized(s, &tz, err) == KL_OK) {
            assert_int_equal(kl_codegen_c(s, NULL, "kl_cbf", k, err), KL_OK);
            got = true;
        }
        kl_trace_free(&tr);
        kl_sched_destroy(&s);
    }
    kl_space_destroy(&sp);
    assert_true(got);
}

/* The prepared block: W[f][c][r][s] (NCHW's [K][C][R][S]) at
 * ((f/16 * taps + tap) * ceil(C/2) + c/2) * 32 + f%16 * 2 + c%2, tap =
 * r S + s, the bf16 bits rounded to nearest even, zeros past K and C. */
static void test_packed_layout(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    assert_int_equal(kl_workload_from_string("conv2d N=1 C=19 H=6 W=7 K=21 "
                                             "R=3 S=3 pad=1 bias=1 in=bf16",
                                             &w, err),
                     KL_OK);
    kl_kernel_t k;
    s_sample_tz(w, &k);
    if (!kl_intrin_cpu_has(kl_intrin_find("avx512_bf16"))) {
        s_run(w, &k); /* prepare refuses */
        kl_kernel_free(&k);
        kl_workload_free(&w);
        skip();
    }
    kl_cgrun_t r;
    assert_int_equal(kl_cgrun_load(&r, k.source, k.entry, s_dir, err), KL_OK);
    float **a = s_alloc(w, 3, false);
    int tw = -1;
    for (int t = 0; t < w->ntensors; t++)
        if (w->tensors[t].is_const && w->tensors[t].dtype == KL_DT_BF16)
            tw = t;
    assert_true(tw >= 0);
    const kl_tensor_t *W = &w->tensors[tw];
    assert_int_equal(W->ndim, 4);
    assert_int_equal(W->shape[0], 21);
    assert_int_equal(W->shape[1], 19);
    bool cst[KL_IR_MAX_TENSORS];
    for (int t = 0; t < w->ntensors; t++)
        cst[t] = w->tensors[t].is_const;
    const uint16_t *wp =
        kl_abi_prepare(r.prep, w->ntensors, (void *const *)a, cst);
    assert_non_null(wp);
    const int64_t K = 21, C = 19, cg = 10, taps = 9;
    for (int64_t f = 0; f < 32; f++)
        for (int64_t tap = 0; tap < taps; tap++)
            for (int64_t c = 0; c < 2 * cg; c++) {
                uint16_t want =
                    f < K && c < C
                        ? kl_dtype_bits(KL_DT_BF16,
                                        a[tw][(f * C + c) * taps + tap])
                        : 0;
                int64_t off = ((f / 16 * taps + tap) * cg + c / 2) * 32 +
                              f % 16 * 2 + c % 2;
                if (wp[off] != want)
                    fail_msg("W[%lld][%lld][tap %lld]: packed %#x, want %#x",
                             (long long)f, (long long)c, (long long)tap,
                             wp[off], want);
            }
    free((void *)wp);
    s_free(w, a);
    kl_cgrun_close(&r);
    assert_true(s_run(w, &k));
    kl_kernel_free(&k);
    kl_workload_free(&w);
}

/* Samples of the space on the +bf16 target: tensorized and float ones
 * both appear, every tensorized one matches the reference; without
 * "+bf16" the intrinsic is never offered. */
static void test_space(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *specs[] = {
        "conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 pad=1 bias=1 relu=1 in=bf16",
        "conv2d N=1 C=19 H=15 W=13 K=40 R=3 S=3 pad=1 stride=2 bias=1 "
        "relu=1 in=bf16",
        "conv2d N=1 C=16 H=9 W=9 K=16 R=3 S=3 pad=1 residual=1 relu=1 "
        "in=bf16",
        "conv2d N=1 C=24 H=8 W=8 K=32 R=3 S=3 pad=1 stride=2 layout=NHWC "
        "bias=1 in=bf16",
        /* X's scratch large enough for the parallel conversion */
        "conv2d N=1 C=64 H=28 W=28 K=16 R=3 S=3 pad=1 bias=1 relu=1 in=bf16",
    };
    int ntz = 0, nfl = 0, nran = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        kl_workload_t *w = NULL;
        assert_int_equal(kl_workload_from_string(specs[i], &w, err), KL_OK);
        assert_true(kl_workload_is_bf16(w));
        kl_space_t *sp = NULL;
        if (kl_space_for_target("cpu/x86_64-avx512+bf16", w, &sp, err))
            fail_msg("%s: %s", specs[i], err);
        int wtz = 0;
        for (uint64_t seed = 1; seed <= 10; seed++) {
            kl_rng_t rng;
            kl_rng_seed(&rng, seed);
            kl_trace_t *tr = NULL;
            kl_sched_t *s = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", specs[i], err);
            kl_tensorize_t tz;
            if (kl_sched_tensorized(s, &tz, err) == KL_OK) {
                assert_string_equal(tz.intrin, "avx512_bf16");
                assert_true(tz.conv);
                kl_kernel_t k;
                if (kl_codegen_c(s, NULL, "kl_cbf", &k, err))
                    fail_msg("%s: %s", specs[i], err);
                assert_non_null(strstr(k.source, "vdpbf16ps"));
                assert_non_null(
                    strstr(k.source, "__builtin_cpu_supports(\"avx512bf16\")"));
                nran += s_run(w, &k);
                kl_kernel_free(&k);
                ntz++;
                wtz++;
            } else {
                nfl++;
            }
            kl_trace_free(&tr);
            kl_sched_destroy(&s);
        }
        assert_true(wtz > 0);
        kl_space_destroy(&sp);
        fx_bf16_never_offered(w, specs[i], 4);
        kl_workload_free(&w);
    }
    print_message("conv bf16: %d tensorized (%d run), %d float samples\n", ntz,
                  nran, nfl);
    assert_true(nfl > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_packed_layout),
        cmocka_unit_test(test_space),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
