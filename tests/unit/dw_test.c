/* Unit tests of the depthwise design space (rules_cpu_dw.c) and its
 * generator (codegen_dw.c): which workloads kl_workload_depthwise takes,
 * the families the CPU space samples for them (and for no other op), a
 * record's trace replaying to the same source, and generated kernels of
 * both families checked against the reference on awkward shapes (widths
 * that are no multiple of the vector, channels that are no multiple of
 * 16, strides, dilation, two images, every epilogue kind), max and
 * average pooling through the same families, the quantized form
 * (qdepthwise_conv2d) in the row family against the exact reference, and
 * the NHWC form (layout=NHWC) in the channel family. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_cgrun.h"
#include "kl_check.h"
#include "kl_codegen.h"
#include "kl_dw.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_space.h"
#include "kl_test_tmp.h"
#include "kl_trace.h"
#include "kl_util.h"
#include "space_fx.h"
#include "wl_fx.h"

/* The family a schedule's pragma_dw annotation names (0: none). */
static int s_family(const kl_sched_t *s)
{
    const kl_loop_t *l = kl_sched_loop(s, 0);
    for (int i = 0; i < l->nannots; i++)
        if (!strcmp(l->annots[i].key, "pragma_dw"))
            return (int)l->annots[i].value;
    return 0;
}

/* The recognised shape's fields against the expected ones. */
static void s_fields(const int64_t *got, const int64_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("field %zu: %lld, not %lld", i, (long long)got[i],
                     (long long)want[i]);
}

static void test_takes(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("depthwise_conv2d N=2 C=24 H=15 W=14 R=5 S=3 "
                             "stride=2 pad=2 bias=1 relu=1");
    kl_dw_t z;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_workload_depthwise(w, &z, err), KL_OK);
    /* Output 8 x 8: (15 + 4 - 5) / 2 + 1 rows, (14 + 4 - 3) / 2 + 1
     * columns. */
    const int64_t got[] = {z.n,  z.c,  z.h,  z.w,  z.r, z.s,
                           z.sh, z.sw, z.dh, z.ph, z.p, z.q};
    const int64_t want[] = {2, 24, 15, 14, 5, 3, 2, 2, 1, 2, 8, 8};
    s_fields(got, want, sizeof want / sizeof *want);
    kl_workload_free(&w);
    w = fx_wl("depthwise_conv2d N=1 C=8 H=14 W=14 R=3 S=3 dilation=2 pad=2");
    assert_int_equal(kl_workload_depthwise(w, &z, err), KL_OK);
    assert_int_equal(z.dh, 2);
    assert_int_equal(z.dw, 2);
    kl_workload_free(&w);
    static const char *const no[] = {
        "depthwise_conv2d N=1 C=8 H=14 W=14 R=3 S=3 pad=1 multiplier=2",
        "conv2d N=1 C=8 H=14 W=14 K=8 R=3 S=3 pad=1 groups=8",
        "matmul M=64 N=64 K=64",
    };
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        w = fx_wl(no[i]);
        assert_int_equal(kl_workload_depthwise(w, NULL, err),
                         KL_ERR_UNSUPPORTED);
        assert_non_null(strstr(err, "depthwise: "));
        kl_workload_free(&w);
    }
    /* Pooling: no weights. */
    w = fx_wl("max_pool2d N=1 C=64 H=112 W=112 R=3 S=3 stride=2 pad=1");
    assert_int_equal(kl_workload_depthwise(w, &z, err), KL_OK);
    assert_int_equal(z.pool, 1);
    assert_int_equal(z.wt, -1);
    const int64_t gp[] = {z.c, z.h, z.r, z.s, z.sh, z.sw, z.ph, z.pw, z.p, z.q};
    const int64_t wp[] = {64, 112, 3, 3, 2, 2, 1, 1, 56, 56};
    s_fields(gp, wp, sizeof wp / sizeof *wp);
    kl_workload_free(&w);
    w = fx_wl("avg_pool2d N=1 C=1280 H=7 W=7 R=7 S=7");
    assert_int_equal(kl_workload_depthwise(w, &z, err), KL_OK);
    assert_int_equal(z.pool, 2);
    assert_int_equal(z.p * z.q, 1);
    kl_workload_free(&w);
    /* Written as an expression ("custom"), as a record's workload reads
     * back: its structure decides. A max whose bottom windows read only
     * padding (its reference gives 0 there) is refused; named ops never
     * make one. */
    w = fx_wl("Y[n,c,y,x] max= X[n,c,y+r-1,x+s-1] where n=1, c=4, y=6, x=4, "
              "r=2, s=2; X: f32[1,4,4,4]");
    assert_string_equal(w->op_kind, "custom");
    assert_int_equal(kl_workload_depthwise(w, NULL, err), KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "wholly in the padding"));
    w->iters[2].extent = 4; /* y < 4: every window reads a row */
    assert_int_equal(kl_workload_depthwise(w, &z, err), KL_OK);
    assert_int_equal(z.pool, 1);
    kl_workload_free(&w);
    w = fx_wl("Y[n,c,y,x] += X[n,c,y+r,x+s] * W[c,0,r,s] where n=1, c=4, "
              "y=4, x=4, r=3, s=3; X: f32[1,4,6,6], W: const f32[4,1,3,3]");
    assert_int_equal(kl_workload_depthwise(w, &z, err), KL_OK);
    assert_int_equal(z.pool, 0);
    assert_int_equal(z.wt, 1);
    kl_workload_free(&w);
}

/* Depthwise workloads sample all three branches; other ops none of the
 * two families. A sample's trace, printed and parsed back, replays to
 * the same source. */
static void test_space(void **state)
{
    (void)state;
    static const char *const ops[] = {
        "depthwise_conv2d N=1 C=40 H=28 W=28 R=3 S=3 pad=1 bias=1",
        "conv2d N=1 C=16 H=14 W=14 K=16 R=3 S=3 pad=1",
        "depthwise_conv2d N=1 C=16 H=14 W=14 R=3 S=3 pad=1 multiplier=2",
        "matmul M=64 N=64 K=64",
    };
    for (int o = 0; o < 4; o++) {
        kl_workload_t *w = fx_wl(ops[o]);
        kl_space_t *sp = fx_space(w, "cpu/x86_64-avx512");
        char err[KL_ERRMSG_LEN];
        kl_rng_t rng;
        kl_rng_seed(&rng, 3);
        int per[3] = {0};
        for (int i = 0; i < 40; i++) {
            kl_trace_t *tr = NULL;
            kl_sched_t *s = fx_sample(sp, &rng, &tr);
            int f = s_family(s);
            assert_true(f >= 0 && f <= 2);
            per[f]++;
            if (o == 0 && i < 12) {
                char *text = kl_trace_to_text(tr);
                kl_trace_t *back = NULL;
                kl_sched_t *s2 = NULL;
                kl_kernel_t k1, k2;
                assert_int_equal(kl_trace_from_text(text, &back, err), KL_OK);
                assert_int_equal(kl_space_replay(sp, back, &s2, err), KL_OK);
                assert_int_equal(s_family(s2), f);
                assert_int_equal(
                    kl_codegen_c(s, kl_space_target(sp), "e", &k1, err), KL_OK);
                assert_int_equal(
                    kl_codegen_c(s2, kl_space_target(sp), "e", &k2, err),
                    KL_OK);
                assert_string_equal(k1.source, k2.source);
                if (f) {
                    assert_non_null(strstr(
                        k1.source, f == 1 ? "row vectors" : "channel vectors"));
                    /* The register tile is the innermost row loop's (a
                     * tile of 1 row has a loop of tiles of stride 1 too):
                     * 1 to 8 rows, never a whole block. */
                    const char *t = strstr(k1.source, "tiles of ");
                    assert_non_null(t);
                    long rows = strtol(t + 9, NULL, 10);
                    assert_true(rows >= 1 && rows <= (f == 1 ? 8 : 4));
                }
                kl_kernel_free(&k1);
                kl_kernel_free(&k2);
                kl_sched_destroy(&s2);
                kl_trace_free(&back);
                free(text);
            }
            kl_sched_destroy(&s);
            kl_trace_free(&tr);
        }
        if (o == 0 && (per[1] < 8 || per[2] < 8 || per[0] < 1))
            fail_msg("%s: %d generic, %d row, %d channel samples of 40", ops[o],
                     per[0], per[1], per[2]);
        if (o > 0)
            assert_int_equal(per[1] + per[2], 0);
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
}

/* N kernels of each family of op on target, built together and checked
 * against the reference. */
static void s_check(const char *op, const char *target, const char *dir,
                    uint64_t seed)
{
    bool pool = strstr(op, "_pool2d") != NULL;
    /* NHWC: the channel family alone */
    bool nhwc = strstr(op, "layout=NHWC") != NULL;
    enum { N = 3 };
    kl_workload_t *w = fx_wl(op);
    kl_space_t *sp = fx_space(w, target);
    char err[KL_ERRMSG_LEN];
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    char *srcs[2 * N], *ents[2 * N];
    int n = 0, tries = 0, per[3] = {0};
    int want = nhwc ? N : 2 * N;
    while (n < want && tries++ < 400) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = fx_sample(sp, &rng, &tr);
        int f = s_family(s);
        assert_false(nhwc && f == 1);
        if (f && per[f] < N) {
            per[f]++;
            char entry[32];
            snprintf(entry, sizeof entry, "kl_dw%d", n);
            kl_kernel_t k;
            if (kl_codegen_c(s, kl_space_target(sp), entry, &k, err))
                fail_msg("%s: %s", op, err);
            assert_int_equal(k.prepare, f == 2 && !pool);
            srcs[n] = k.source;
            ents[n++] = k.entry;
        }
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    assert_int_equal(n, want);
    fx_check_kernels(srcs, ents, n, w, op, dir, seed, 1e-4);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* Generated kernels of both families against the reference. */
static void test_kernels(void **state)
{
    (void)state;
    static const char *const ops[] = {
        "depthwise_conv2d N=2 C=24 H=14 W=14 R=3 S=3 pad=1 bias=1 relu=1",
        "depthwise_conv2d N=2 C=40 H=28 W=28 R=5 S=5 stride=2 pad=2 bias=1 "
        "clip=0,6",
        "depthwise_conv2d N=2 C=17 H=7 W=7 R=5 S=5 pad=2 bias=1 act=silu",
        "depthwise_conv2d N=2 C=24 H=56 W=56 R=3 S=3 stride=2 pad=1 "
        "act=hard_swish",
        "depthwise_conv2d N=1 C=8 H=112 W=112 R=3 S=3 pad=1 bias=1",
        "depthwise_conv2d N=2 C=20 H=29 W=31 R=3 S=3 stride=2 bias=1 "
        "residual=1 relu=1",
        "depthwise_conv2d N=2 C=16 H=14 W=15 R=3 S=3 dilation=2 pad=2 "
        "act=sigmoid",
        /* 11 columns of which a stride-2 window of 2 reads 10: the
         * channel family's packed row still holds all 11. */
        "depthwise_conv2d N=1 C=20 H=9 W=11 R=2 S=2 stride=2 bias=1",
        /* Inputs in [-1, 1): a zero in place of -inf padding shows. */
        "max_pool2d N=2 C=24 H=112 W=112 R=3 S=3 stride=2 pad=1",
        "max_pool2d N=1 C=17 H=15 W=13 R=3 S=3 stride=2 pad=1",
        "max_pool2d N=1 C=20 H=9 W=11 R=2 S=2",
        "avg_pool2d N=2 C=20 H=14 W=14 R=3 S=3 stride=1 pad=1",
        "avg_pool2d N=1 C=32 H=7 W=7 R=7 S=7",
    };
    char dir[256];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kiln-dw-test-XXXXXX"));
    for (int o = 0; o < (int)(sizeof ops / sizeof *ops); o++)
        s_check(ops[o], "cpu", dir, 11 + (uint64_t)o);
    /* 8 lanes (avx2): the same shapes in half-width vectors. */
    s_check(ops[0], "cpu/x86_64-avx2", dir, 7);
    s_check(ops[1], "cpu/x86_64-avx2", dir, 8);
    kl_test_rmdir(dir);
}

/* layout=NHWC (X [N,H,W,C], Y [N,P,Q,C]): recognised as such, with the
 * same fields as its NCHW form, also read back from its text; sampled in
 * the channel family (or the generic tiling), never in rows of one
 * channel; its kernels against the reference: channels no multiple of
 * the vector (a part-filled last block, loaded and stored in part), a
 * stride, a residual read as vectors, on both vector widths. The
 * multiplier and the quantized form refuse it. */
static void test_nhwc(void **state)
{
    (void)state;
    const char *op = "depthwise_conv2d N=2 C=24 H=15 W=14 R=5 S=3 stride=2 "
                     "pad=2 bias=1 relu=1";
    char err[KL_ERRMSG_LEN], lop[160];
    snprintf(lop, sizeof lop, "%s layout=NHWC", op);
    kl_workload_t *a = fx_wl(op), *b = fx_wl(lop), *c = NULL;
    kl_dw_t za, zb, zc;
    assert_int_equal(kl_workload_depthwise(a, &za, err), KL_OK);
    assert_int_equal(kl_workload_depthwise(b, &zb, err), KL_OK);
    assert_int_equal(za.nhwc, 0);
    assert_int_equal(zb.nhwc, 1);
    const int64_t ga[] = {za.n,  za.c,  za.h,  za.w,  za.r, za.s,
                          za.sh, za.sw, za.ph, za.pw, za.p, za.q};
    const int64_t gb[] = {zb.n,  zb.c,  zb.h,  zb.w,  zb.r, zb.s,
                          zb.sh, zb.sw, zb.ph, zb.pw, zb.p, zb.q};
    s_fields(gb, ga, sizeof ga / sizeof *ga);
    assert_non_null(strstr(b->canonical, "Y[n,y,x,c]"));
    assert_int_equal(kl_workload_parse(b->canonical, &c, err), KL_OK);
    assert_int_equal(kl_workload_depthwise(c, &zc, err), KL_OK);
    assert_int_equal(zc.nhwc, 1);
    assert_int_equal(zc.c, 24);
    kl_workload_free(&c);
    kl_space_t *sp = fx_space(b, "cpu/x86_64-avx2");
    kl_rng_t rng;
    kl_rng_seed(&rng, 5);
    int per[3] = {0};
    for (int i = 0; i < 30; i++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = fx_sample(sp, &rng, &tr);
        per[s_family(s)]++;
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    if (per[1] || per[2] < 20)
        fail_msg("NHWC: %d generic, %d row, %d channel samples of 30", per[0],
                 per[1], per[2]);
    kl_space_destroy(&sp);
    kl_workload_free(&a);
    kl_workload_free(&b);
    static const char *const bad[] = {
        "depthwise_conv2d N=1 C=8 H=14 W=14 R=3 S=3 pad=1 multiplier=2 "
        "layout=NHWC",
        "qdepthwise_conv2d N=1 C=8 H=14 W=14 R=3 S=3 pad=1 za=3 zo=5 "
        "layout=NHWC",
    };
    for (int i = 0; i < 2; i++) {
        kl_workload_t *w = NULL;
        assert_int_equal(kl_workload_from_op(bad[i], &w, err), KL_ERR_INVAL);
        assert_non_null(strstr(err, "layout=NHWC is for the float"));
    }
    static const char *const ops[] = {
        "depthwise_conv2d N=2 C=24 H=15 W=14 R=5 S=3 stride=2 pad=2 bias=1 "
        "relu=1 layout=NHWC",
        "depthwise_conv2d N=1 C=20 H=29 W=31 R=3 S=3 stride=2 pad=1 bias=1 "
        "residual=1 clip=0,6 layout=NHWC",
        "depthwise_conv2d N=1 C=32 H=7 W=7 R=3 S=3 pad=1 bias=1 residual=1 "
        "act=hard_swish layout=NHWC",
    };
    char dir[256];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kiln-dwn-test-XXXXXX"));
    for (int o = 0; o < 3; o++) {
        s_check(ops[o], "cpu", dir, 31 + (uint64_t)o);
        s_check(ops[o], "cpu/x86_64-avx2", dir, 41 + (uint64_t)o);
    }
    kl_test_rmdir(dir);
}

/* Biases at the ends of the int32 range (the kernel's add then goes
 * through int64 lanes and saturates, as the reference's sum does): the
 * kernel again on a, the interpreter on b, equal byte for byte. */
static void s_bias_extremes(const kl_cgrun_t *r, const kl_workload_t *w,
                            void **a, void **b)
{
    int t = 0;
    while (t < w->ntensors && strcmp(w->tensors[t].name, "bias"))
        t++;
    assert_true(t < w->ntensors);
    const int32_t ext[3] = {INT32_MAX - 3, INT32_MIN + 5, 2147483000};
    for (int i = 0; i < 3; i++)
        ((int32_t *)a[t])[i] = ((int32_t *)b[t])[i] = ext[i];
    kl_workload_eval_typed(w, b);
    assert_true(kl_cgrun_again(r, w, a, b));
    /* Channel 0 (its plane first in Y) saturates somewhere. */
    int o = kl_workload_output(w);
    const kl_tensor_t *Y = &w->tensors[o];
    int64_t plane = Y->shape[2] * Y->shape[3], sat = 0;
    for (int64_t i = 0; i < plane; i++)
        sat += ((int32_t *)b[o])[i] == INT32_MAX;
    assert_true(sat > 0);
}

/* qdepthwise_conv2d: the integer space samples the row family alone, and
 * its kernels equal the reference interpreter byte for byte (u8, s8 and
 * s32 outputs, per-channel and per-tensor scales, zero points, strides,
 * relu and clip, widths that are no multiple of 16). */
static void test_quant(void **state)
{
    (void)state;
    static const char *const ops[] = {
        "qdepthwise_conv2d N=1 C=24 H=14 W=14 R=3 S=3 pad=1 za=3 zo=5 bias=1 "
        "relu=1",
        "qdepthwise_conv2d N=2 C=16 H=29 W=31 R=3 S=3 stride=2 pad=1 za=128 "
        "zo=-3 out=s8 bias=1",
        "qdepthwise_conv2d N=1 C=8 H=20 W=20 R=5 S=5 pad=2 zo=17 "
        "scale=0.0123 clip=20,200",
        "qdepthwise_conv2d N=1 C=16 H=7 W=7 R=3 S=3 pad=1 za=7 out=s32 bias=1",
    };
    char dir[256];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kiln-qdw-test-XXXXXX"));
    /* Read back from its canonical text (op "custom", as a record's
     * workload is, kiln db best --source): the same space. */
    {
        kl_workload_t *w = fx_wl(ops[0]), *c = NULL;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_workload_parse(w->canonical, &c, err), KL_OK);
        assert_string_equal(c->op_kind, "custom");
        kl_space_t *sp = fx_space(c, "cpu/x86_64-avx512+vnni");
        kl_rng_t rng;
        kl_rng_seed(&rng, 2);
        kl_trace_t *tr = NULL;
        kl_sched_t *s = fx_sample(sp, &rng, &tr);
        assert_int_equal(s_family(s), 1);
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
        kl_space_destroy(&sp);
        kl_workload_free(&c);
        kl_workload_free(&w);
    }
    /* The last round: the first op again on an AVX2 target (8 lanes). */
    int nops = (int)(sizeof ops / sizeof *ops);
    for (int o = 0; o <= nops; o++) {
        kl_workload_t *w = fx_wl(ops[o % nops]);
        kl_dw_t z;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_workload_depthwise(w, &z, err), KL_OK);
        assert_int_equal(z.quant, 1);
        kl_space_t *sp = fx_space(w, o < nops ? "cpu/x86_64-avx512+vnni"
                                              : "cpu/x86_64-avx2");
        kl_rng_t rng;
        kl_rng_seed(&rng, 21 + (uint64_t)o);
        for (int i = 0; i < 3; i++) {
            kl_trace_t *tr = NULL;
            kl_sched_t *s = fx_sample(sp, &rng, &tr);
            assert_int_equal(s_family(s), 1);
            kl_kernel_t k;
            if (kl_codegen_c(s, kl_space_target(sp), "kl_q", &k, err))
                fail_msg("%s: %s", ops[o % nops], err);
            if (o == nops)
                assert_non_null(strstr(k.source, "kl_qrequant8("));
            kl_cgrun_t r;
            if (kl_cgrun_load(&r, k.source, "kl_q", dir, err))
                fail_msg("%s: %s", ops[o % nops], err);
            void **a = NULL, **b = NULL;
            if (kl_cgrun_compare(&r, w, 5 + (uint64_t)i, &a, &b, err))
                fail_msg("%s, sample %d: %s", ops[o % nops], i, err);
            assert_true(kl_cgrun_varied(w, a));
            if (strstr(ops[o % nops], "out=s32") && i == 0)
                s_bias_extremes(&r, w, a, b);
            kl_cgrun_free(w, a);
            kl_cgrun_free(w, b);
            kl_cgrun_close(&r);
            kl_kernel_free(&k);
            kl_sched_destroy(&s);
            kl_trace_free(&tr);
        }
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
    kl_test_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_takes),   cmocka_unit_test(test_space),
        cmocka_unit_test(test_kernels), cmocka_unit_test(test_quant),
        cmocka_unit_test(test_nhwc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
