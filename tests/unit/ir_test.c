/* Unit tests of coordinator/ir (kl_ir.h): named operators, canonical text,
 * keys, FLOPs and parse errors. The interpreter and the check harness are
 * tested in ir_eval_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_ir.h"
#include "kl_target.h"
#include "kl_util.h"

static kl_workload_t *s_op(const char *spec)
{
    char err[KL_ERRMSG_LEN] = "";
    kl_workload_t *w = NULL;
    int rc = kl_workload_from_string(spec, &w, err);
    if (rc)
        fail_msg("%s: %s", spec, err);
    return w;
}

/* ---- named operators, canonical text, keys ------------------------------ */

static const struct {
    const char *spec, *kind;
} s_ops[] = {
    {"matmul M=1024 N=1024 K=1024", "matmul"},
    {"matmul M=7 N=7 K=7", "matmul"},
    {"matmul M=1000 N=1 K=13 bias=1 relu=1", "matmul"},
    {"batch_matmul B=3 M=7 N=9 K=1000", "batch_matmul"},
    {"batch_matmul B=1 M=64 N=64 K=64", "batch_matmul"},
    {"dense N=1 I=512 O=1000", "dense"},
    {"dense N=7 I=7 O=7 bias=0 relu=1", "dense"},
    {"conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1", "conv2d"},
    {"conv2d N=1 C=3 H=224 W=224 K=64 R=7 S=7 stride=2 pad=3 bias=1 relu=1",
     "conv2d"},
    {"conv2d N=2 C=8 H=7 W=7 K=16 R=3 S=3 pad=2 dilation=2 groups=4", "conv2d"},
    {"conv2d N=1 C=16 H=7 W=7 K=8 R=1 S=1 layout=NHWC residual=1 relu=1",
     "conv2d"},
    {"conv2d N=1 C=6 H=9 W=11 K=6 R=3 S=3 stride=2 pad=1 groups=3 "
     "layout=NHWC bias=1",
     "conv2d"},
    {"depthwise_conv2d N=1 C=32 H=112 W=112 R=3 S=3 pad=1", "depthwise_conv2d"},
    {"depthwise_conv2d N=1 C=4 H=7 W=7 R=3 S=3 stride=2 pad=1 multiplier=3 "
     "bias=1",
     "depthwise_conv2d"},
    {"conv2d_transpose N=1 C=8 H=7 W=7 K=4 R=3 S=3 stride=2 pad=1 "
     "output_pad=1",
     "conv2d_transpose"},
    {"conv2d_transpose N=1 C=3 H=5 W=6 K=2 R=4 S=4 stride=3",
     "conv2d_transpose"},
    {"max_pool2d N=1 C=64 H=112 W=112 R=3 S=3 stride=2 pad=1", "max_pool2d"},
    {"max_pool2d N=2 C=3 H=7 W=7 R=2 S=2", "max_pool2d"},
    {"avg_pool2d N=1 C=8 H=7 W=7 R=3 S=3 stride=1 pad=1", "avg_pool2d"},
    {"avg_pool2d N=1 C=1000 H=7 W=7 R=7 S=7", "avg_pool2d"},
    {"add shape=4x1000", "add"},
    {"add shape=7x7x3", "add"},
    {"relu shape=1000", "relu"},
    {"relu shape=1x64x56x56", "relu"},
    {"clip shape=1x32x112x112 lo=0 hi=6", "clip"},
    {"clip shape=7 lo=-0.5 hi=0.25", "clip"},
    {"matmul M=8 N=8 K=8 bias=1 clip=-1,1", "matmul"},
    {"dense N=1 I=64 O=10 clip=0,6", "dense"},
    {"conv2d N=1 C=16 H=7 W=7 K=8 R=3 S=3 pad=1 bias=1 residual=1 clip=0,6",
     "conv2d"},
    {"depthwise_conv2d N=1 C=32 H=56 W=56 R=3 S=3 pad=1 bias=1 clip=0,6",
     "depthwise_conv2d"},
    {"matmul M=128 N=768 K=3072 bias=1 residual=1", "matmul"},
    {"dense N=8 I=32 O=32 residual=1 act=gelu", "dense"},
};

static void test_ops_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(s_ops) / sizeof(s_ops[0]); i++) {
        kl_workload_t *w = s_op(s_ops[i].spec);
        assert_string_equal(w->op_kind, s_ops[i].kind);
        assert_true(strncmp(w->name, s_ops[i].kind, strlen(s_ops[i].kind)) ==
                    0);
        assert_true(w->flop > 0);
        char err[KL_ERRMSG_LEN];
        kl_workload_t *back = NULL;
        if (kl_workload_parse(w->canonical, &back, err))
            fail_msg("%s: canonical does not parse: %s\n%s", s_ops[i].spec, err,
                     w->canonical);
        assert_string_equal(back->canonical, w->canonical);
        assert_memory_equal(back->key, w->key, 16);
        assert_true(back->flop == w->flop);
        assert_string_equal(back->op_kind, "custom");
        kl_workload_t *again = s_op(s_ops[i].spec);
        assert_memory_equal(again->key, w->key, 16);
        kl_workload_t *c = kl_workload_clone(w);
        assert_string_equal(c->canonical, w->canonical);
        assert_string_equal(c->name, w->name);
        assert_true(c->body != w->body);
        kl_workload_free(&c);
        assert_null(c);
        kl_workload_free(&again);
        kl_workload_free(&back);
        kl_workload_free(&w);
    }
    kl_workload_free(NULL);
}

static void s_assert_key(const char *spec, const char *hex)
{
    kl_workload_t *w = s_op(spec);
    char got[33];
    kl_hex128(w->key, got);
    if (strcmp(got, hex) != 0)
        fail_msg("%s: key %s, expected %s\n%s", spec, got, hex, w->canonical);
    kl_workload_free(&w);
}

static void test_golden_keys(void **state)
{
    (void)state;
    s_assert_key("matmul M=1024 N=1024 K=1024",
                 "85a640b298b161ae13838d2d2baf46a2");
    s_assert_key("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1",
                 "85deab576fb45b9f5a5d0fd2014d458c");
    /* Other spellings of the same operators. */
    s_assert_key("C[i,j]+=A[i,k]*B[k,j] where k=1024,j=1024,i=1024",
                 "85a640b298b161ae13838d2d2baf46a2");
    s_assert_key("  C[ i , j ] += A[i, k] * B[k ,j]\n where j=1024, i=1024, "
                 "k=1024; C: f32[1024,1024], A: f32[1024,1024]",
                 "85a640b298b161ae13838d2d2baf46a2");
    s_assert_key("Y[n,f,y,x] += X[n,c,r+y*1-1,-1+s+1*x] * W[f,c,r,s] where "
                 "s=3, r=3, c=64, x=56, y=56, f=64, n=1; X: f32[1,64,56,56], "
                 "W: const f32[64,64,3,3]",
                 "85deab576fb45b9f5a5d0fd2014d458c");
    /* The example of kl_ir.h is the named ResNet stem. */
    kl_workload_t *hdr =
        s_op("Y[n,f,y,x] += X[n,c,y*2+r-3,x*2+s-3] * W[f,c,r,s] | + bias[f] | "
             "relu\n    where n=1, f=64, y=112, x=112, c=3, r=7, s=7;\n    "
             "X: f32[1,3,224,224], W: const f32[64,3,7,7], bias: const "
             "f32[64]");
    kl_workload_t *named = s_op("conv2d N=1 C=3 H=224 W=224 K=64 R=7 S=7 "
                                "stride=2 pad=3 bias=1 relu=1");
    assert_string_equal(hdr->canonical, named->canonical);
    kl_workload_free(&hdr);
    kl_workload_free(&named);
    /* clip=LO,HI is the clip(lo, hi) epilogue, after bias and residual;
     * the clip op is that epilogue on a copy. */
    hdr = s_op("Y[n,c,y,x] += X[n,c,y+r-1,x+s-1] * W[c,0,r,s] | + bias[c] "
               "| clip(0, 6) where n=1, c=32, y=56, x=56, r=3, s=3; X: "
               "f32[1,32,56,56], W: const f32[32,1,3,3], bias: const f32[32]");
    named = s_op("depthwise_conv2d N=1 C=32 H=56 W=56 R=3 S=3 pad=1 bias=1 "
                 "clip=0,6");
    assert_string_equal(hdr->canonical, named->canonical);
    kl_workload_free(&hdr);
    kl_workload_free(&named);
    /* residual=1 on matmul and dense: Res, the output's shape, after the
     * bias and before the activation; the name ends "_res" */
    hdr = s_op("C[i,j] += A[i,k] * B[k,j] | + bias[j] | + Res[i,j] | relu "
               "where i=4, j=8, k=3");
    named = s_op("matmul M=4 N=8 K=3 bias=1 residual=1 relu=1");
    assert_string_equal(hdr->canonical, named->canonical);
    assert_string_equal(named->name, "matmul_4_8_3_bias_res_relu");
    kl_workload_free(&hdr);
    kl_workload_free(&named);
    hdr = s_op("Y[n,o] += X[n,i] * W[o,i] | + b[o] | + Res[n,o] where n=2, "
               "o=5, i=3; W: const f32[5,3], b: const f32[5]");
    named = s_op("dense N=2 I=3 O=5 residual=1");
    assert_string_equal(hdr->canonical, named->canonical);
    assert_string_equal(named->name, "dense_2_3_5_bias_res");
    kl_workload_free(&hdr);
    kl_workload_free(&named);
    hdr = s_op("Y[d0,d1] = X[d0,d1] | clip(-0.5, 6) where d0=2, d1=3");
    named = s_op("clip shape=2x3 lo=-0.5 hi=6");
    assert_string_equal(hdr->canonical, named->canonical);
    assert_true(named->flop == 6);
    kl_workload_free(&hdr);
    kl_workload_free(&named);
    kl_workload_t *a = s_op("Y[y] += X[2*y+r] where y=4, r=3");
    kl_workload_t *b = s_op("Y[y] += X[y*2+r] where r=3, y=4");
    kl_workload_t *c = s_op("Y[y] += X[(y+r)*2-r] where r=3, y=4");
    assert_string_equal(a->canonical, b->canonical);
    assert_string_equal(a->canonical, c->canonical);
    assert_string_equal(a->canonical,
                        "Y[y] += X[2*y+r] where y=4, r=3; X: f32[9], Y: "
                        "f32[4]");
    kl_workload_free(&a);
    kl_workload_free(&b);
    kl_workload_free(&c);
}

static void test_parse_forms(void **state)
{
    (void)state;
    kl_workload_t *w = s_op("Y[y] += X[-x+4, (y+1-r)/2] * K[r] | * 0.5 | + 1 "
                            "| clip(-1, 2) | relu where y=5, x=3, r=3; "
                            "X: f16[5,3]");
    /* Spatial iterators first in output order, then reductions in order of
     * first use. */
    assert_int_equal(w->niters, 3);
    assert_string_equal(w->iters[0].name, "y");
    assert_false(w->iters[0].reduce);
    assert_string_equal(w->iters[1].name, "x");
    assert_true(w->iters[1].reduce);
    assert_int_equal(w->ntensors, 3);
    assert_string_equal(w->tensors[0].name, "X");
    assert_int_equal(w->tensors[0].dtype, KL_DT_F16);
    assert_string_equal(w->tensors[2].name, "Y");
    assert_true(w->tensors[2].is_output);
    const kl_affine_t *a0 = &w->body->a->access.idx[0];
    assert_int_equal(a0->coef[1], -1);
    assert_int_equal(a0->offset, 4);
    const kl_affine_t *a1 = &w->body->a->access.idx[1];
    assert_int_equal(a1->div, 2);
    assert_int_equal(a1->coef[0], 1);
    assert_int_equal(a1->coef[2], -1);
    assert_int_equal(w->nepi, 4);
    assert_int_equal(w->epi[2].kind, KL_EPI_CLIP);
    assert_true(w->epi[2].lo == -1 && w->epi[2].hi == 2);
    assert_int_equal(kl_workload_output(w), 2);
    assert_int_equal(kl_workload_ninputs(w), 2);
    assert_int_equal(kl_dtype_size(KL_DT_BF16), 2);
    assert_string_equal(kl_dtype_name(KL_DT_BF16), "bf16");
    char err[KL_ERRMSG_LEN];
    /* bf16 workloads: bf16 inputs, a float output; not f32, not int8.
     * The CPU features their kernels may use, and what "cpu" resolves to
     * for them on a CPU with every feature (KILN_CPU_FEATURES plays it). */
    const unsigned int8 =
        KL_CPU_FEAT_VNNI | KL_CPU_FEAT_AVXVNNI | KL_CPU_FEAT_AMX;
    const struct {
        const char *op;
        bool bf16;
        unsigned feats;
        const char *suffix;
    } kinds[] = {
        {"matmul M=4 N=4 K=4 in=bf16", true, KL_CPU_FEAT_BF16 | KL_CPU_FEAT_AMX,
         "+bf16+amx"},
        {"matmul M=4 N=4 K=4", false, 0, ""},
        {"matmul M=4 N=4 K=4 in=f16", false, 0, ""},
        {"qmatmul M=4 N=4 K=4", false, int8, "+vnni+amx"},
        {"conv2d N=1 C=4 H=5 W=5 K=4 R=3 S=3 in=bf16", true,
         KL_CPU_FEAT_BF16 | KL_CPU_FEAT_AMX, "+bf16+amx"},
        {"conv2d N=1 C=4 H=5 W=5 K=4 R=3 S=3", false, 0, ""},
    };
    bool avx512 = !strcmp(kl_cpu_target(), "cpu/x86_64-avx512");
    setenv("KILN_CPU_FEATURES", "vnni,bf16,amx", 1);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        kl_workload_t *k;
        assert_int_equal(kl_workload_from_string(kinds[i].op, &k, err), KL_OK);
        assert_int_equal(kl_workload_is_bf16(k), kinds[i].bf16);
        assert_int_equal(kl_workload_cpu_feats(k), kinds[i].feats);
        char want[64];
        snprintf(want, sizeof want, "cpu/x86_64-avx512%s", kinds[i].suffix);
        if (avx512)
            assert_string_equal(
                kl_target_resolve_for("cpu", kl_workload_cpu_feats(k)), want);
        kl_workload_free(&k);
    }
    unsetenv("KILN_CPU_FEATURES");
    kl_workload_t *back;
    assert_int_equal(kl_workload_parse(w->canonical, &back, err), KL_OK);
    assert_string_equal(back->canonical, w->canonical);
    kl_workload_free(&back);
    kl_workload_free(&w);

    w = s_op("M[i] max= max(A[i,k], -B[k]) - min(A[i,k], 2.5e-1) / (1 + "
             "A[i,k]) where i=3, k=4");
    assert_int_equal(w->reduce, KL_RED_MAX);
    assert_int_equal(kl_workload_parse(w->canonical, &back, err), KL_OK);
    assert_string_equal(back->canonical, w->canonical);
    kl_workload_free(&back);
    kl_workload_free(&w);
}

static void test_args_text(void **state)
{
    (void)state;
    kl_workload_t *w = s_op("matmul M=256 N=256 K=256");
    char *a = kl_workload_args_text(w);
    assert_string_equal(a, "A:f32[256,256] B:f32[256,256] C:f32[256,256]:out");
    free(a);
    kl_workload_free(&w);
    w = s_op("conv2d N=1 C=3 H=8 W=8 K=4 R=3 S=3 bias=1");
    a = kl_workload_args_text(w);
    assert_string_equal(a, "X:f32[1,3,8,8] W:f32[4,3,3,3]:const "
                           "bias:f32[4]:const Y:f32[1,4,6,6]:out");
    free(a);
    kl_workload_free(&w);
}

/* ---- FLOPs --------------------------------------------------------------- */

/* Valid (y, r) pairs of one spatial dimension of a convolution. */
static int64_t s_valid_1d(int64_t H, int64_t P, int64_t R, int64_t st,
                          int64_t pad, int64_t dil)
{
    int64_t n = 0;
    for (int64_t y = 0; y < P; y++)
        for (int64_t r = 0; r < R; r++) {
            int64_t iy = y * st + r * dil - pad;
            n += iy >= 0 && iy < H;
        }
    return n;
}

static void test_flops(void **state)
{
    (void)state;
    kl_workload_t *w = s_op("matmul M=1024 N=1024 K=1024");
    assert_true(w->flop == 2.0 * 1073741824.0);
    kl_workload_free(&w);

    /* 3x3, pad 1 on 56x56: the no-padding formula minus the padded border
     * points, counted here by brute force over (y, x, r, s). */
    w = s_op("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1");
    int64_t border = 0;
    for (int y = 0; y < 56; y++)
        for (int x = 0; x < 56; x++)
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++) {
                    int iy = y + r - 1, ix = x + s - 1;
                    border += iy < 0 || iy >= 56 || ix < 0 || ix >= 56;
                }
    double nopad = 2.0 * 64 * 64 * 56 * 56 * 9;
    assert_int_equal(border, 668);
    assert_true(w->flop == nopad - 2.0 * 64 * 64 * (double)border);
    kl_workload_free(&w);

    /* Stride, dilation, groups, epilogue ops. */
    w = s_op("conv2d N=2 C=8 H=7 W=9 K=6 R=3 S=2 stride=2 pad=2 dilation=2 "
             "groups=2 bias=1 relu=1");
    int64_t P = (7 + 4 - 4 - 1) / 2 + 1, Q = (9 + 4 - 2 - 1) / 2 + 1;
    double valid = (double)s_valid_1d(7, P, 3, 2, 2, 2) *
                   (double)s_valid_1d(9, Q, 2, 2, 2, 2);
    assert_true(w->flop == 2.0 * 2 * 6 * 4 * valid + 2.0 * (2 * 6 * P * Q));
    kl_workload_free(&w);

    /* Transposed convolution: count the (h, r) pairs of the forward
     * scatter, y = h*stride - pad + r inside the output. */
    w = s_op("conv2d_transpose N=1 C=5 H=7 W=6 K=3 R=3 S=4 stride=2 pad=1 "
             "output_pad=1");
    int64_t Ho = 6 * 2 - 2 + 3 + 1, Wo = 5 * 2 - 2 + 4 + 1, vy = 0, vx = 0;
    for (int h = 0; h < 7; h++)
        for (int r = 0; r < 3; r++)
            vy += h * 2 - 1 + r >= 0 && h * 2 - 1 + r < Ho;
    for (int h = 0; h < 6; h++)
        for (int s = 0; s < 4; s++)
            vx += h * 2 - 1 + s >= 0 && h * 2 - 1 + s < Wo;
    assert_true(w->flop == 2.0 * 5 * 3 * (double)(vy * vx));
    kl_workload_free(&w);

    w = s_op("max_pool2d N=1 C=2 H=7 W=7 R=3 S=3 stride=2 pad=1");
    int64_t pv = s_valid_1d(7, 4, 3, 2, 1, 1);
    assert_true(w->flop == 2.0 * (double)(pv * pv));
    kl_workload_free(&w);
    w = s_op("avg_pool2d N=1 C=2 H=7 W=7 R=3 S=3 stride=2 pad=1");
    assert_true(w->flop == 2.0 * (double)(pv * pv) + 2 * 16);
    kl_workload_free(&w);
    w = s_op("add shape=7x1000");
    assert_true(w->flop == 7000);
    kl_workload_free(&w);

    /* A constant index outside its tensor: nothing is ever computed. */
    w = s_op("Y[i] += X[i,5] where i=4; X: f32[4,3]");
    assert_true(w->flop == 0);
    kl_workload_free(&w);

    /* ResNet-50's convolutions: exact counts (the padded border left out)
     * of the closed form, not of an enumeration of their points. How long
     * that takes is printed, not asserted (speed is for benchmarks). */
    static const struct {
        const char *text;
        int64_t C, H, K, R, stride, pad;
    } resnet[] = {
        {"conv2d N=1 C=3 H=224 W=224 K=64 R=7 S=7 stride=2 pad=3", 3, 224, 64,
         7, 2, 3},
        {"conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 pad=1", 64, 56, 64, 3, 1, 1},
        {"conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 pad=1", 128, 28, 128, 3, 1,
         1},
        {"conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 pad=1", 256, 14, 256, 3, 1,
         1},
        {"conv2d N=1 C=512 H=7 W=7 K=512 R=3 S=3 pad=1", 512, 7, 512, 3, 1, 1},
        {"conv2d N=1 C=1024 H=14 W=14 K=2048 R=1 S=1 stride=2", 1024, 14, 2048,
         1, 2, 0},
    };
    enum { NRESNET = sizeof(resnet) / sizeof(resnet[0]) };
    double flop[NRESNET];
    double t0 = kl_now_s();
    for (size_t i = 0; i < NRESNET; i++) {
        w = s_op(resnet[i].text);
        flop[i] = w->flop;
        kl_workload_free(&w);
    }
    double dt = kl_now_s() - t0;
    print_message("parse + exact FLOPs of %d ResNet-50 convolutions: "
                  "%.2f ms\n",
                  (int)NRESNET, dt * 1e3);
    for (size_t i = 0; i < NRESNET; i++) {
        int64_t P =
            (resnet[i].H + 2 * resnet[i].pad - resnet[i].R) / resnet[i].stride +
            1;
        double v = (double)s_valid_1d(resnet[i].H, P, resnet[i].R,
                                      resnet[i].stride, resnet[i].pad, 1);
        double want = 2.0 * (double)resnet[i].K * (double)resnet[i].C * v * v;
        if (flop[i] != want)
            fail_msg("%s: flop %.0f, want %.0f", resnet[i].text, flop[i], want);
    }
}

/* Brute force over the whole iteration space of a small workload: a
 * point counts when every read of the body lands inside its tensor. */
static bool s_loads_valid(const kl_workload_t *w, const kl_expr_t *e,
                          const int64_t *iv)
{
    if (!e)
        return true;
    if (e->kind == KL_EX_LOAD) {
        const kl_tensor_t *t = &w->tensors[e->access.tensor];
        for (int d = 0; d < t->ndim; d++) {
            const kl_affine_t *a = &e->access.idx[d];
            int64_t v = a->offset;
            for (int k = 0; k < w->niters; k++)
                v += a->coef[k] * iv[k];
            if (a->div > 1 && v % a->div)
                return false;
            v /= a->div > 1 ? a->div : 1;
            if (v < 0 || v >= t->shape[d])
                return false;
        }
    }
    return s_loads_valid(w, e->a, iv) && s_loads_valid(w, e->b, iv);
}

static double s_brute_points(const kl_workload_t *w)
{
    int64_t iv[KL_IR_MAX_ITERS] = {0};
    double n = 0;
    for (;;) {
        n += s_loads_valid(w, w->body, iv);
        int k = w->niters - 1;
        for (; k >= 0; k--) {
            if (++iv[k] < w->iters[k].extent)
                break;
            iv[k] = 0;
        }
        if (k < 0)
            return n;
    }
}

static void test_flops_brute_force(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int ops; /* body ops + reduction */
    } cases[] = {
        {"Y[y,x] += X[2*y+r-2,3*x+s-1] * W[r,s] where y=5, x=4, r=4, s=3; "
         "X: f32[9,10]",
         2},
        {"Y[y] += X[(y+2-r)/3] * W[r] where y=11, r=5; X: f32[4]", 2},
        {"Y[y,x] += X[(2*y+1-r)/2,(x-s+4)/3] where y=6, x=7, r=5, s=4; "
         "X: f32[5,3]",
         1},
        {"Y[i,j] max= A[i+k-1,j-k+2] + B[k,(k+j-1)/2] where i=4, j=5, k=6; "
         "A: f32[5,6], B: f32[6,3]",
         2},
        {"Y[y] += X[y+r+s-4] * X[y-r+1] where y=6, r=3, s=3; X: f32[6]", 2},
        {"Y[y] += X[(y+r)/2] * Z[(y-r+1)/3] + X[(3*y+2*r-7)/5] where y=17, "
         "r=11; X: f32[9], Z: f32[6]",
         3},
        {"Y[y] += X[(5*y-3*r+2)/7] where y=23, r=19; X: f32[14]", 1},
        {"Y[a,b,c] = A[a-b,c] - B[c+b-2] * 2 where a=3, b=4, c=5; "
         "A: f32[3,5], B: f32[5]",
         2},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kl_workload_t *w = s_op(cases[i].text);
        double want = cases[i].ops * s_brute_points(w);
        if (w->flop != want)
            fail_msg("%s: flop %.0f, brute force %.0f", cases[i].text, w->flop,
                     want);
        kl_workload_free(&w);
    }
}

/* ---- malformed input -------------------------------------------------- */

static const struct {
    const char *text;
    int col;
    const char *frag;
} s_bad[] = {
    {"Y[i] += A[i,k] * B[k] where i=4, k=5; Y: const f32[4]", 39,
     "the output Y cannot be const"},
    {"Y[i] += A[i,k] * B[k] where i=4, k=5; B: const [5]", 48,
     "a dtype (f32, f16, bf16, u8, s8 or s32) after 'const'"},
    {"Y[i] += A[i,k] * B[k] where i=4, k=5; B: const f64[5]", 48,
     "unknown dtype 'f64'"},
    {"C[i,j] += A[i,k] * B[k,j where i=4, j=4, k=4", 26,
     "expected ']' after index list"},
    {"C[i,j] += A[i,k] * B[k,q] where i=4, j=4, k=4", 24,
     "unknown iterator 'q'"},
    {"C[i,j] += A[i,k] * B[k,j] where i=4, j=4", 15,
     "iterator k has no extent in 'where'"},
    {"Y[n,y] += X[n,y*r] * W[r] where n=1, y=4, r=3", 16,
     "product of iterators"},
    {"C[i,j] = A[i,k] * B[k,j] where i=4, j=4, k=4", 14,
     "reduction with '=': iterator k"},
    {"C[i,j] += A[i,k] * A[k,j,i] where i=4, j=4, k=4", 20,
     "tensor A used with 2 and 3 dimensions"},
    {"C[i+1,j] += A[i,j] where i=4, j=4", 3,
     "output index 1 must be a single iterator"},
    {"C[i,i] += A[i] where i=4", 5, "iterator i appears twice"},
    {"C[i] += A[i] where i=0", 22, "extent of i must be at least 1"},
    {"C[i] += A[i] where i=4, j=5", 25, "iterator j in 'where' is not used"},
    {"C[i] += A[i] where i=4, i=5", 25, "given twice"},
    {"C[i] += A[i] * where i=4", 16, "expected a number, a tensor access"},
    {"C[i] += A[i] where i=4; A: f64[4]", 28, "unknown dtype 'f64'"},
    {"C[i] += A[i] where i=4; B: f32[4]", 25,
     "tensor B is declared but not used"},
    {"C[i] += A[i-1] where i=4", 9, "tensor A needs a declaration"},
    {"C[i] += A[i] | + bias[k] where i=4", 23,
     "epilogue reads with iterator k"},
    {"C[i] += C[i] where i=4", 9, "is the output and cannot be read"},
    {"C[i] ++ A[i] where i=4", 6, "expected '=', '+=' or 'max='"},
    {"C[i] += A[i] where i=4 extra", 24, "unexpected 'extra'"},
    {"C[i] += A[i] | sqrt where i=4", 16, "expected '+', '*', 'relu'"},
    {"C[i] += A[(i+1)/0] where i=4", 17, "divisor must be between"},
    {"C[i] += A[i] where i=4; C: f32[5]", 25, "output C is declared with 5"},
    {"C[i] += A[1.5] where i=4", 11, "is not an integer"},
    {"C[i] += A[i] where i=4;", 24, "expected a tensor name, got end"},
    {"C[i] += A[i] | clip(6, 0) where i=4", 20, "clip bounds are reversed"},
    {"", 1, "expected a tensor name"},
    {"C[i] += A[i] where i=99999999999999", 22, "too large"},
    {"C[i] += max(A[i] A[i]) where i=4", 18, "expected ',' between"},
    {"C[i] += A[i]) where i=4", 13, "expected 'where'"},
    {"C[i] += A i where i=4", 11, "expected '[' after the tensor name"},
    {"C[i] += A[(i+1] where i=4", 15, "expected ')' in index"},
};

static void test_bad_inputs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(s_bad) / sizeof(s_bad[0]); i++) {
        char err[KL_ERRMSG_LEN] = "", want[32];
        kl_workload_t *w = (kl_workload_t *)1;
        int rc = kl_workload_parse(s_bad[i].text, &w, err);
        if (rc != KL_ERR_INVAL || w != NULL)
            fail_msg("'%s' was accepted", s_bad[i].text);
        snprintf(want, sizeof(want), "column %d: ", s_bad[i].col);
        if (strncmp(err, want, strlen(want)) != 0 ||
            !strstr(err, s_bad[i].frag))
            fail_msg("'%s': got \"%s\", expected \"%s... %s\"", s_bad[i].text,
                     err, want, s_bad[i].frag);
    }
}

static void test_op_errors(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"conv2d N=1 C=64 H=56 W=56 R=3 S=3", "conv2d: missing K"},
        {"conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 groups=3",
         "conv2d: groups=3 does not divide C=64"},
        {"conv2d N=1 C=63 H=56 W=56 K=64 R=3 S=3 groups=3",
         "conv2d: groups=3 does not divide K=64"},
        {"conv2d N=1 C=64 H=2 W=56 K=64 R=3 S=3",
         "conv2d: the kernel (3 with dilation 1) does not fit"},
        {"conv2d N=1 C=64 H=5 W=5 K=64 R=3 S=3 layout=CHWN",
         "conv2d: bad value 'CHWN' for layout"},
        {"matmul M=4 N=4 K=4 bogus=1", "matmul: unknown parameter 'bogus'"},
        {"matmul M=4 N=x K=4", "matmul: bad value 'x' for N"},
        {"matmul M=0 N=4 K=4", "matmul: M=0 is out of range"},
        {"matmul M=4 N=4 K", "matmul: expected NAME=VALUE, got 'K'"},
        {"matmul M=4 M=5 N=4 K=4", "matmul: M given twice"},
        {"matmul M=4 N=4 K=4 relu=2", "matmul: relu must be 0 or 1"},
        {"max_pool2d N=1 C=1 H=7 W=7 R=3 S=3 pad=3",
         "max_pool2d: pad=3 must be less than the window"},
        {"conv2d_transpose N=1 C=1 H=7 W=7 K=1 R=3 S=3 stride=2 output_pad=2",
         "conv2d_transpose: output_pad=2 must be less than stride=2"},
        {"add shape=4xx5", "add: bad value '4xx5' for shape"},
        {"relu", "relu: missing shape"},
        {"clip shape=4 lo=0", "clip: missing hi"},
        {"clip shape=4 lo=1 hi=0", "clip: lo=1 is above hi=0"},
        {"clip shape=4 lo=x hi=1", "clip: bad value 'x' for lo (a finite "
                                   "number)"},
        {"conv2d N=1 C=8 H=5 W=5 K=8 R=3 S=3 relu=1 clip=0,6",
         "conv2d: relu=1 and clip= are both activations"},
        {"matmul M=4 N=4 K=4 clip=0", "matmul: bad value '0' for clip "
                                      "(LO,HI: two finite numbers, LO <= HI)"},
        {"dense N=1 I=4 O=4 clip=6,0", "dense: bad value '6,0' for clip"},
        /* the whole text: its list of names is read from the op table */
        {"softmax N=4",
         "unknown operator 'softmax' (expected matmul, batch_matmul, dense, "
         "conv2d, depthwise_conv2d, conv2d_transpose, max_pool2d, "
         "avg_pool2d, add, relu, clip, qmatmul, qdense, qconv2d or "
         "qdepthwise_conv2d)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char err[KL_ERRMSG_LEN] = "";
        kl_workload_t *w = NULL;
        assert_int_equal(kl_workload_from_op(bad[i].spec, &w, err),
                         KL_ERR_INVAL);
        assert_null(w);
        if (strncmp(err, bad[i].msg, strlen(bad[i].msg)) != 0)
            fail_msg("'%s': got \"%s\", expected \"%s...\"", bad[i].spec, err,
                     bad[i].msg);
    }
}

/* Every operator of the table is a named op to _from_string (its missing
 * parameter is named, it does not go to the parser) and has a parameter
 * list. */
static void test_op_table(void **state)
{
    (void)state;
    int n = 0;
    const char *name, *params = NULL;
    for (; (name = kl_workload_op(n, &params)); n++) {
        char err[KL_ERRMSG_LEN] = "", want[KL_IR_MAX_NAME + 16];
        kl_workload_t *w = NULL;
        assert_non_null(params);
        assert_true(params[0] != '\0');
        assert_int_equal(kl_workload_from_string(name, &w, err), KL_ERR_INVAL);
        assert_null(w);
        snprintf(want, sizeof(want), "%s: missing ", name);
        if (strncmp(err, want, strlen(want)) != 0)
            fail_msg("'%s': got \"%s\"", name, err);
    }
    assert_int_equal(n, 15);
    assert_null(kl_workload_op(-1, NULL));
}

/* matmul const_b=1: B and the bias const (a model's matmul by a weight),
 * A and the output not; its own name and key; in=bf16 keeps B's dtype. */
static void test_matmul_const_b(void **state)
{
    (void)state;
    kl_workload_t *w = s_op("matmul M=4 N=6 K=5 const_b=1 bias=1");
    kl_workload_t *v = s_op("matmul M=4 N=6 K=5 bias=1");
    assert_string_equal(w->name, "matmul_4_6_5_bias_constb");
    const char *names[] = {"A", "B", "bias"};
    for (int t = 0; t < 3; t++) {
        assert_string_equal(w->tensors[t].name, names[t]);
        assert_string_equal(v->tensors[t].name, names[t]);
        assert_int_equal(w->tensors[t].is_const, t > 0); /* B, bias */
        assert_false(v->tensors[t].is_const);
    }
    assert_memory_not_equal(w->key, v->key, 16);
    assert_true(w->flop == v->flop);
    kl_workload_free(&w);
    kl_workload_free(&v);
    w = s_op("matmul M=4 N=6 K=5 const_b=1 residual=1 in=bf16");
    assert_string_equal(w->name, "matmul_4_6_5_res_constb_bf16");
    assert_string_equal(w->tensors[1].name, "B");
    assert_true(w->tensors[1].is_const);
    assert_int_equal(w->tensors[1].dtype, KL_DT_BF16);
    assert_int_equal(w->tensors[0].dtype, KL_DT_BF16); /* A */
    assert_false(w->tensors[0].is_const);
    assert_string_equal(w->tensors[2].name, "Res");
    assert_false(w->tensors[2].is_const);
    kl_workload_free(&w);
}

/* conv2d in=bf16: X and W bf16 (NCHW and NHWC, grouped), the bias, the
 * residual and the output f32, the name ending "_bf16", the canonical form
 * reading back to itself; a q-conv has no in=. */
static void test_conv2d_bf16(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w, *back;
    assert_int_equal(
        kl_workload_from_string("conv2d N=1 C=8 H=6 W=6 K=16 R=3 S=3 pad=1 "
                                "layout=NHWC bias=1 residual=1 relu=1 in=bf16",
                                &w, err),
        KL_OK);
    assert_string_equal(w->name,
                        "conv2d_1_8_6_6_16_3_3_s1_p1_nhwc_bias_res_relu_bf16");
    assert_string_equal(w->op_kind, "conv2d");
    assert_true(kl_workload_is_bf16(w));
    assert_false(kl_workload_is_int(w));
    assert_int_equal(w->ntensors, 5);
    assert_string_equal(w->tensors[0].name, "X");
    assert_int_equal(w->tensors[0].dtype, KL_DT_BF16);
    assert_string_equal(w->tensors[1].name, "W");
    assert_int_equal(w->tensors[1].dtype, KL_DT_BF16);
    assert_true(w->tensors[1].is_const);
    for (int t = 2; t < 5; t++) /* bias, Res, Y */
        assert_int_equal(w->tensors[t].dtype, KL_DT_F32);
    assert_true(w->tensors[4].is_output);
    assert_non_null(strstr(w->canonical, "bf16"));
    assert_int_equal(kl_workload_parse(w->canonical, &back, err), KL_OK);
    assert_string_equal(back->canonical, w->canonical);
    assert_memory_equal(back->key, w->key, 16);
    kl_workload_free(&back);
    /* a different workload from the f32 conv2d, of the same FLOPs */
    kl_workload_t *f;
    assert_int_equal(
        kl_workload_from_string("conv2d N=1 C=8 H=6 W=6 K=16 R=3 S=3 pad=1 "
                                "layout=NHWC bias=1 residual=1 relu=1",
                                &f, err),
        KL_OK);
    assert_memory_not_equal(f->key, w->key, 16);
    assert_true(f->flop == w->flop);
    kl_workload_free(&f);
    kl_workload_free(&w);
    assert_int_equal(
        kl_workload_from_string(
            "conv2d N=1 C=4 H=5 W=5 K=4 R=3 S=3 groups=2 in=bf16", &w, err),
        KL_OK);
    assert_string_equal(w->name, "conv2d_1_4_5_5_4_3_3_s1_p0_g2_bf16");
    assert_int_equal(w->tensors[0].dtype, KL_DT_BF16);
    kl_workload_free(&w);
    /* in=f32 is the default, and changes nothing */
    assert_int_equal(kl_workload_from_string(
                         "conv2d N=1 C=4 H=5 W=5 K=4 R=3 S=3 in=f32", &w, err),
                     KL_OK);
    assert_string_equal(w->name, "conv2d_1_4_5_5_4_3_3_s1_p0");
    assert_false(kl_workload_is_bf16(w));
    kl_workload_free(&w);
    assert_int_equal(kl_workload_from_string(
                         "conv2d N=1 C=4 H=5 W=5 K=4 R=3 S=3 in=s8", &w, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "bad value 's8' for in"));
    assert_int_equal(
        kl_workload_from_string("qconv2d N=1 C=4 H=5 W=5 K=4 R=3 S=3 in=bf16",
                                &w, err),
        KL_ERR_INVAL);
    assert_non_null(strstr(err, "unknown parameter 'in'"));
}

/* The bf16 verification tolerance: max(rtol, 8 K 2^-24) from the
 * reduction length K; every other workload keeps the given rtol exactly. */
static void test_bf16_rtol(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    struct {
        const char *op;
        int64_t k;
        double rtol, want;
    } c[] = {
        {"matmul M=4 N=4 K=64 in=bf16", 64, 1e-3, 1e-3},
        {"matmul M=4 N=4 K=64 in=bf16", 64, 1e-6, 8.0 * 64 / 16777216.0},
        {"conv2d N=1 C=64 H=8 W=8 K=64 R=3 S=3 pad=1 in=bf16", 576, 1e-3, 1e-3},
        {"conv2d N=1 C=64 H=8 W=8 K=64 R=3 S=3 pad=1 in=bf16", 576, 1e-5,
         8.0 * 576 / 16777216.0},
        {"conv2d N=1 C=512 H=7 W=7 K=8 R=3 S=3 pad=1 in=bf16", 4608, 1e-3,
         0.002197265625},
        {"dense N=1 I=4608 O=8 in=bf16", 4608, 1e-3, 0.002197265625},
        {"batch_matmul B=2 M=4 N=4 K=576 in=bf16", 576, 1e-3, 1e-3},
        /* not bf16: the given rtol, however long the reduction */
        {"conv2d N=1 C=512 H=7 W=7 K=8 R=3 S=3 pad=1", 4608, 1e-3, 1e-3},
        {"matmul M=4 N=4 K=4608", 4608, 1e-7, 1e-7},
        {"matmul M=4 N=4 K=4608 in=f16", 4608, 1e-3, 1e-3},
        {"qmatmul M=4 N=4 K=4608", 4608, 0.25, 0.25},
        {"relu shape=4x4", 1, 1e-3, 1e-3},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kl_workload_t *w;
        assert_int_equal(kl_workload_from_string(c[i].op, &w, err), KL_OK);
        assert_int_equal(kl_workload_red_len(w), c[i].k);
        double got = kl_workload_rtol(w, c[i].rtol);
        if (got != c[i].want)
            fail_msg("%s rtol %g: %.9g, expected %.9g", c[i].op, c[i].rtol, got,
                     c[i].want);
        kl_workload_free(&w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_round_trip),
        cmocka_unit_test(test_golden_keys),
        cmocka_unit_test(test_parse_forms),
        cmocka_unit_test(test_args_text),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_flops_brute_force),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_op_errors),
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_matmul_const_b),
        cmocka_unit_test(test_conv2d_bf16),
        cmocka_unit_test(test_bf16_rtol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
