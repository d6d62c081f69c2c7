/* Unit tests of the Winograd rewrite (kl_wino.h): which convolutions it
 * takes and why it refuses the others, the derived product, the schedule
 * primitive and its trace instruction, the CPU design space's branch, and
 * generated kernels checked against the reference on awkward shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_check.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_space.h"
#include "kl_trace.h"
#include "kl_util.h"
#include "kl_wino.h"
#include "kl_test_tmp.h"
#include "wl_fx.h"

static void test_takes(void **state)
{
    (void)state;
    kl_workload_t *w =
        fx_wl("conv2d N=2 C=32 H=15 W=14 K=48 R=3 S=3 pad=1 bias=1 relu=1");
    kl_workload_t *d = NULL;
    kl_wino_t z;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_workload_winograd(w, 2, &d, &z, err), KL_OK);
    assert_int_equal(z.alpha, 4);
    assert_int_equal(z.n, 2);
    assert_int_equal(z.c, 32);
    assert_int_equal(z.k, 48);
    assert_int_equal(z.p, 15);
    assert_int_equal(z.q, 14);
    assert_int_equal(z.ph, 1);
    assert_int_equal(z.th, 8); /* ceil(15 / 2) */
    assert_int_equal(z.tw, 7);
    assert_int_equal(z.tiles, 2 * 8 * 7);
    assert_string_equal(d->op_kind, "winograd");
    assert_non_null(strstr(d->canonical, "kl_wm[e,p,k] += kl_wv[e,p,c] * "
                                         "kl_wu[e,c,k]"));
    assert_non_null(strstr(d->canonical, "e=16, p=112, k=48, c=32"));
    assert_non_null(strstr(d->canonical, "kl_wu: const f32[16,32,48]"));
    /* 16 products of 112 x 48 x 32: 2.25x fewer multiplications per tile
     * than the direct 3x3 window (here over 8 x 7 tiles of 2 x 2). */
    assert_true(d->flop == 2.0 * 16 * 112 * 48 * 32);
    kl_workload_free(&d);
    /* Testing only. */
    assert_int_equal(kl_workload_winograd(w, 2, NULL, NULL, NULL), KL_OK);
    /* 4x4 output tiles: 6x6 input tiles, 36 products over ceil(15 / 4) x
     * ceil(14 / 4) tiles per image, 4x fewer multiplications per tile. */
    assert_int_equal(kl_workload_winograd(w, 4, &d, &z, err), KL_OK);
    assert_int_equal(z.m, 4);
    assert_int_equal(z.alpha, 6);
    assert_int_equal(z.th, 4);
    assert_int_equal(z.tw, 4);
    assert_int_equal(z.tiles, 2 * 4 * 4);
    assert_non_null(strstr(d->canonical, "e=36, p=32, k=48, c=32"));
    assert_non_null(strstr(d->canonical, "kl_wu: const f32[36,32,48]"));
    assert_true(d->flop == 2.0 * 36 * 32 * 48 * 32);
    assert_non_null(strstr(d->name, "_wino4"));
    kl_workload_free(&d);
    kl_workload_free(&w);
    /* Padding 0 and a residual. */
    w = fx_wl("conv2d N=1 C=8 H=9 W=9 K=8 R=3 S=3 residual=1");
    assert_int_equal(kl_workload_winograd(w, 2, NULL, &z, err), KL_OK);
    assert_int_equal(z.ph, 0);
    assert_int_equal(z.p, 7);
    kl_workload_free(&w);
}

static void test_refuses(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *why;
    } cases[] = {
        {"conv2d N=1 C=8 H=14 W=14 K=8 R=3 S=3 stride=2 pad=1",
         "is not read as"},
        {"conv2d N=1 C=8 H=14 W=14 K=8 R=3 S=3 dilation=2 pad=2",
         "is not read as"},
        {"conv2d N=1 C=8 H=14 W=14 K=8 R=5 S=5 pad=2", "5x5 window"},
        {"conv2d N=1 C=8 H=14 W=14 K=8 R=1 S=1", "1x1 window"},
        {"conv2d N=1 C=8 H=14 W=14 K=8 R=3 S=3 pad=1 layout=NHWC",
         "is not read as"},
        {"conv2d N=1 C=8 H=14 W=14 K=8 R=3 S=3 pad=1 groups=2", "4-D output"},
        {"depthwise_conv2d N=1 C=8 H=14 W=14 R=3 S=3 pad=1", "4-D"},
        {"matmul M=64 N=64 K=64", "4-D output"},
        {"max_pool2d N=1 C=8 H=14 W=14 R=3 S=3 stride=1 pad=1",
         "sum of products"},
        {"Y[n,f,y,x] += X[n,c,y+r,x+s] * W[f,c,r,s] where n=1, f=8, y=6, "
         "x=6, c=4, r=3, s=3",
         "not const"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kl_workload_t *w = fx_wl(cases[i].spec);
        kl_workload_t *d = (kl_workload_t *)&d; /* must come back NULL */
        char err[KL_ERRMSG_LEN] = "";
        assert_int_equal(kl_workload_winograd(w, 2, &d, NULL, err),
                         KL_ERR_UNSUPPORTED);
        assert_null(d);
        if (!strstr(err, cases[i].why) || strncmp(err, "winograd: ", 10))
            fail_msg("%s: '%s' does not say '%s'", cases[i].spec, err,
                     cases[i].why);
        kl_workload_free(&w);
    }
    kl_workload_t *w = fx_wl("conv2d N=1 C=8 H=14 W=14 K=8 R=3 S=3 pad=1");
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_workload_winograd(w, 3, NULL, NULL, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "output tile 3: only 2 and 4"));
    kl_workload_free(&w);
}

static void test_primitive(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("conv2d N=1 C=16 H=14 W=14 K=32 R=3 S=3 pad=1");
    kl_sched_t *s = NULL, *c = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_sched_nloops(s), 7);
    assert_int_equal(kl_sched_winograd_m(s), 0);
    assert_int_equal(kl_sched_winograd(s, 2, err), KL_OK);
    assert_int_equal(kl_sched_winograd_m(s), 2);
    assert_ptr_equal(kl_sched_origin(s), w);
    const kl_workload_t *d = kl_sched_workload(s);
    assert_ptr_not_equal(d, w);
    assert_string_equal(d->op_kind, "winograd");
    /* The product's naive nest: e, p, k, then c; ids never reused. */
    assert_int_equal(kl_sched_nloops(s), 4);
    assert_int_equal(kl_sched_loop(s, 0)->extent, 16);
    assert_int_equal(kl_sched_loop(s, 1)->extent, 49);
    assert_int_equal(kl_sched_loop(s, 2)->extent, 32);
    assert_int_equal(kl_sched_loop(s, 3)->extent, 16);
    assert_true(kl_sched_loop(s, 3)->reduce);
    assert_true(kl_sched_loop(s, 0)->id >= 7);
    assert_int_equal(kl_sched_winograd(s, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "already"));
    /* A clone owns its own copy of the product. */
    c = kl_sched_clone(s);
    assert_ptr_not_equal(kl_sched_workload(c), d);
    assert_string_equal(kl_sched_workload(c)->canonical, d->canonical);
    kl_sched_destroy(&s);
    assert_int_equal(kl_sched_nloops(c), 4);
    kl_sched_destroy(&c);
    /* Only first. */
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int64_t f[2] = {2, 16};
    int ids[2];
    assert_int_equal(kl_sched_split(s, 1, f, 2, ids, err), KL_OK);
    assert_int_equal(kl_sched_winograd(s, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "before any other primitive"));
    assert_int_equal(kl_sched_nloops(s), 8);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
    /* Not a 3x3 convolution: the reason, schedule unchanged. */
    w = fx_wl("matmul M=16 N=16 K=16");
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_sched_winograd(s, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "winograd: "));
    assert_ptr_equal(kl_sched_workload(s), w);
    assert_int_equal(kl_sched_nloops(s), 3);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

static void test_trace(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("conv2d N=1 C=16 H=8 W=8 K=16 R=3 S=3 pad=1");
    const char *text = "winograd(m=2)\n"
                       "l0, l1, l2, l3 = get_loops()\n"
                       "parallel(l0)\n";
    kl_trace_t *t = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_trace_from_text(text, &t, err), KL_OK);
    char *back = kl_trace_to_text(t);
    assert_non_null(strstr(back, "winograd(m=2)"));
    /* Proto round trip. */
    uint8_t *buf = NULL;
    size_t len = 0;
    kl_trace_to_proto(t, &buf, &len);
    kl_trace_t *t2 = NULL;
    assert_int_equal(kl_trace_from_proto(buf, len, &t2, err), KL_OK);
    char *back2 = kl_trace_to_text(t2);
    assert_string_equal(back, back2);
    /* Applied: the product's nest, parallel over e. */
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    bool rej = true;
    assert_int_equal(kl_trace_apply(t2, s, NULL, NULL, &rej, err), KL_OK);
    assert_false(rej);
    assert_int_equal(kl_sched_winograd_m(s), 2);
    assert_int_equal(kl_sched_loop(s, 0)->kind, KL_LOOP_PARALLEL);
    kl_sched_destroy(&s);
    /* After another primitive: an error naming the instruction. */
    kl_trace_t *bad = NULL;
    assert_int_equal(kl_trace_from_text("l0, l1, l2, l3, l4, l5, l6 = "
                                        "get_loops()\nparallel(l0)\n"
                                        "winograd(m=2)\n",
                                        &bad, err),
                     KL_OK);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_not_equal(kl_trace_apply(bad, s, NULL, NULL, &rej, err), KL_OK);
    assert_non_null(strstr(err, "winograd"));
    kl_sched_destroy(&s);
    /* No tile. */
    kl_trace_t *bad2 = NULL;
    assert_int_equal(kl_trace_from_text("winograd()\n", &bad2, err), KL_OK);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_not_equal(kl_trace_apply(bad2, s, NULL, NULL, &rej, err), KL_OK);
    assert_non_null(strstr(err, "needs m"));
    kl_sched_destroy(&s);
    kl_trace_free(&bad2);
    kl_trace_free(&bad);
    free(back);
    free(back2);
    free(buf);
    kl_trace_free(&t);
    kl_trace_free(&t2);
    kl_workload_free(&w);
}

/* The CPU space samples Winograd schedules of a 3x3 convolution (both
 * ways), never of anything else. */
static void test_space(void **state)
{
    (void)state;
    const char *ops[] = {"conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 pad=1",
                         "conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 stride=2 "
                         "pad=1",
                         "matmul M=64 N=64 K=64"};
    for (int o = 0; o < 3; o++) {
        kl_workload_t *w = fx_wl(ops[o]);
        kl_space_t *sp = NULL;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                         KL_OK);
        kl_rng_t rng;
        kl_rng_seed(&rng, 11);
        int wino = 0, wino4 = 0, n = 30;
        for (int i = 0; i < n; i++) {
            kl_trace_t *tr = NULL;
            kl_sched_t *s = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", ops[o], err);
            wino += kl_sched_winograd_m(s) == 2;
            wino4 += kl_sched_winograd_m(s) == 4;
            /* Replaying the trace gives the same form. */
            kl_sched_t *s2 = NULL;
            assert_int_equal(kl_space_replay(sp, tr, &s2, err), KL_OK);
            assert_int_equal(kl_sched_winograd_m(s2), kl_sched_winograd_m(s));
            kl_sched_destroy(&s2);
            kl_sched_destroy(&s);
            kl_trace_free(&tr);
        }
        /* p 0.3 each: 9 of 30 expected. */
        if (o == 0 &&
            (wino < n / 6 || wino > n / 2 || wino4 < n / 6 || wino4 > n / 2))
            fail_msg("%s: %d and %d of %d Winograd F(2x2) and F(4x4)", ops[o],
                     wino, wino4, n);
        if (o > 0)
            assert_int_equal(wino + wino4, 0);
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
}

/* The register tile of an F(4x4) product over the 16 tiles of a 14x14
 * output: rows of tiles (unrolled) x output-channel vectors. All 16 rows
 * with 1 vector loads each weight vector once for all of them (the tile
 * that made the 256-channel layer's kernel 20% faster); it is in the
 * space and sampled (11 of the 183 F(4x4) samples below). */
static void test_tall_tiles(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 pad=1");
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                     KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 5);
    int m4 = 0, tall = 0;
    for (int i = 0; i < 600; i++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("%s", err);
        if (kl_sched_winograd_m(s) == 4) {
            const kl_workload_t *d = kl_sched_workload(s);
            int64_t rows = 1, lanes = 0;
            for (int l = 0; l < kl_sched_nloops(s); l++) {
                const kl_loop_t *lp = kl_sched_loop(s, l);
                if (lp->kind == KL_LOOP_VECTORIZE)
                    lanes = lp->extent;
                else if (lp->kind == KL_LOOP_UNROLL && lp->nparts == 1 &&
                         !strcmp(d->iters[lp->parts[0].iter].name, "p"))
                    rows *= lp->extent;
            }
            m4++;
            tall += rows == 16 && lanes == 16;
        }
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    if (tall < 5)
        fail_msg("%d of %d F(4x4) samples with 16 x 1 register tiles", tall,
                 m4);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* Generated Winograd kernels, half of them with 2x2 output tiles and half
 * with 4x4, against the reference: two images, output sizes that are not
 * a multiple of the tile (part of a tile at the edge), no padding,
 * channels that are not a multiple of 16, and every epilogue kind the
 * named ops make. */
static void test_kernels(void **state)
{
    (void)state;
    const char *ops[] = {
        "conv2d N=2 C=12 H=9 W=11 K=8 R=3 S=3 residual=1 relu=1",
        "conv2d N=1 C=20 H=7 W=7 K=24 R=3 S=3 pad=1 bias=1",
        "conv2d N=1 C=16 H=6 W=5 K=16 R=3 S=3 pad=2",
        "conv2d N=1 C=17 H=19 W=35 K=18 R=3 S=3 pad=1 bias=1",
    };
    char dir[256];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kiln-wino-test-XXXXXX"));
    for (int o = 0; o < (int)(sizeof ops / sizeof *ops); o++) {
        kl_workload_t *w = fx_wl(ops[o]);
        kl_space_t *sp = NULL;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_space_for_target("cpu", w, &sp, err), KL_OK);
        kl_rng_t rng;
        kl_rng_seed(&rng, 5 + (uint64_t)o);
        enum { N = 6 };
        char *srcs[N], *ents[N];
        int n = 0, tries = 0, per[5] = {0};
        while (n < N && tries++ < 400) {
            kl_trace_t *tr = NULL;
            kl_sched_t *s = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", ops[o], err);
            int m = kl_sched_winograd_m(s);
            if (m && per[m] < N / 2) {
                per[m]++;
                char entry[32];
                snprintf(entry, sizeof entry, "kl_w%d", n);
                kl_kernel_t k;
                if (kl_codegen_c(s, kl_space_target(sp), entry, &k, err))
                    fail_msg("%s: %s", ops[o], err);
                assert_true(k.prepare);
                assert_non_null(strstr(k.source, m == 2
                                                     ? "Winograd F(2x2,3x3)"
                                                     : "Winograd F(4x4,3x3)"));
                srcs[n] = k.source;
                ents[n++] = k.entry;
            }
            kl_sched_destroy(&s);
            kl_trace_free(&tr);
        }
        assert_int_equal(n, N);
        char *so = NULL;
        if (kl_check_build_many((const char *const *)srcs, n, dir, &so, err))
            fail_msg("%s: build: %s", ops[o], err);
        int rcs[N];
        double maxerr[N];
        if (kl_check_run_many(so, (const char *const *)ents, n, w, 3, 1e-4,
                              1e-4, maxerr, rcs, err))
            fail_msg("%s: %s", ops[o], err);
        for (int i = 0; i < n; i++) {
            assert_int_equal(rcs[i], KL_OK);
            assert_true(maxerr[i] < 1e-4);
            free(srcs[i]);
            free(ents[i]);
        }
        unlink(so);
        free(so);
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
    kl_test_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_takes),      cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_primitive),  cmocka_unit_test(test_trace),
        cmocka_unit_test(test_space),      cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_tall_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
