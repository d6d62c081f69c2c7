/* Unit tests of integer workloads (kl_ir.h, "Integer workloads"): the
 * u8 / s8 / s32 dtypes, the dtype rules, requant's canonical text, the
 * quantized named ops and the exact reference interpreter
 * (kl_workload_eval_typed) on small hand-computed cases: rounding ties,
 * saturation, zero points, per-channel scales, zero-point padding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_ir.h"
#include "kl_util.h"

static kl_workload_t *s_w(const char *spec)
{
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(spec, &w, err))
        fail_msg("%s: %s", spec, err);
    /* Every workload's canonical text parses back to itself. */
    kl_workload_t *back = NULL;
    if (kl_workload_parse(w->canonical, &back, err))
        fail_msg("canonical %s: %s", w->canonical, err);
    assert_string_equal(back->canonical, w->canonical);
    assert_memory_equal(back->key, w->key, 16);
    kl_workload_free(&back);
    return w;
}

/* The parse error of spec, which must contain want. */
static void s_bad(const char *spec, const char *want)
{
    char err[KL_ERRMSG_LEN] = "";
    kl_workload_t *w = NULL;
    int rc = kl_workload_from_string(spec, &w, err);
    if (rc != KL_ERR_INVAL || w)
        fail_msg("%s: accepted (%s)", spec, w ? w->canonical : "");
    if (!strstr(err, want))
        fail_msg("%s: error '%s' lacks '%s'", spec, err, want);
}

static void test_dtypes(void **state)
{
    (void)state;
    assert_int_equal(KL_DT_S32, 3);
    assert_int_equal(KL_DT_U8, 4);
    assert_int_equal(KL_DT_S8, 5);
    assert_int_equal(kl_dtype_size(KL_DT_U8), 1);
    assert_int_equal(kl_dtype_size(KL_DT_S8), 1);
    assert_int_equal(kl_dtype_size(KL_DT_S32), 4);
    assert_int_equal(kl_dtype_size(KL_DT_F32), 4);
    assert_int_equal(kl_dtype_size(KL_DT_F16), 2);
    assert_string_equal(kl_dtype_name(KL_DT_U8), "u8");
    assert_string_equal(kl_dtype_name(KL_DT_S8), "s8");
    assert_string_equal(kl_dtype_name(KL_DT_S32), "s32");
    kl_dtype dt;
    assert_true(kl_dtype_parse("i32", &dt));
    assert_int_equal(dt, KL_DT_S32);
    assert_true(kl_dtype_parse("s8", &dt));
    assert_int_equal(dt, KL_DT_S8);
    assert_false(kl_dtype_parse("u16", &dt));
    assert_true(kl_dtype_is_int(KL_DT_U8));
    assert_false(kl_dtype_is_int(KL_DT_BF16));

    /* i32 is spelled s32 in the canonical text; a u8 matmul and an f32
     * one have different keys. */
    kl_workload_t *a = s_w("C[i,j] += A[i,k] * B[k,j] where i=2, j=3, k=4; "
                           "A: u8[2,4], B: const i32[4,3], C: s32[2,3]");
    assert_true(kl_workload_is_int(a));
    assert_string_equal(a->canonical,
                        "C[i,j] += A[i,k] * B[k,j] where i=2, j=3, k=4; "
                        "A: u8[2,4], B: const s32[4,3], C: s32[2,3]");
    kl_workload_t *f = s_w("matmul M=2 N=3 K=4");
    assert_false(kl_workload_is_int(f));
    assert_memory_not_equal(a->key, f->key, 16);
    char *args = kl_workload_args_text(a);
    assert_string_equal(args, "A:u8[2,4] B:s32[4,3]:const C:s32[2,3]:out");
    free(args);
    kl_workload_free(&a);
    kl_workload_free(&f);
}

static void test_rules(void **state)
{
    (void)state;
    s_bad("C[i] += A[i,k] where i=2, k=2; A: u8[2,2]",
          "tensor A is u8 but the output C is f32");
    s_bad("C[i] += A[i,k] / 2 where i=2, k=2; A: u8[2,2], C: s32[2]",
          "'/' is not allowed in an integer workload");
    s_bad("C[i] += A[i,k] * 1.5 where i=2, k=2; A: u8[2,2], C: s32[2]",
          "constants are integers");
    s_bad("C[i] += A[i,k] * F[k] where i=2, k=2; A: u8[2,2], C: s32[2]",
          "tensor F is f32 but the output C is s32");
    s_bad("C[i] += A[i,k] | * 2 where i=2, k=2; A: u8[2,2], C: s32[2]",
          "'*' is not allowed in an integer workload's epilogue");
    s_bad("C[i] += A[i,k] | + 0.5 where i=2, k=2; A: u8[2,2], C: s32[2]",
          "epilogue constants are int32 integers");
    s_bad("C[i] += A[i,k] | requant(0.5, 0) where i=2, k=2",
          "requant needs an integer output");
    s_bad("C[i] += A[i,k] | requant(0, 0) where i=2, k=2; A: u8[2,2], "
          "C: u8[2]",
          "requant scale must be a positive f32 number");
    s_bad("C[i] += A[i,k] | requant(0.5, 1.5) where i=2, k=2; A: u8[2,2], "
          "C: u8[2]",
          "zero point must be an int32 integer");
    s_bad("C[i] += A[i,k] | requant(S[i], 0) where i=2, k=2; A: u8[2,2], "
          "S: s32[2], C: u8[2]",
          "requant scale S is s32 (expected f32)");
    s_bad("C[i] += A[i,k] | requant(S[k], 0) where i=2, k=2; A: u8[2,2], "
          "C: u8[2]",
          "epilogue reads with iterator k, which is not in the output");
    s_bad("C[i] += A[i,k] where i=2, k=2; A: u4[2,2]",
          "unknown dtype 'u4' (expected f32, f16, bf16, u8, s8 or s32)");
    s_bad("qmatmul M=2 N=2 K=2 za=256", "za=256 is out of range");
    s_bad("qmatmul M=2 N=2 K=2 zo=-1", "zo=-1 is out of range (0..255");
    s_bad("qmatmul M=2 N=2 K=2 out=s32 zo=3", "zo=3 with out=s32");
    s_bad("qmatmul M=2 N=2 K=2 out=f16", "bad value 'f16' for out");
    s_bad("qmatmul M=2 N=2 K=2 scale=-1", "bad value '-1' for scale");
    s_bad("qmatmul M=2 N=2 K=2 clip=0.5,6", "must be integers");
    s_bad("qconv2d N=1 C=2 H=4 W=4 K=2 R=3 S=3 residual=1",
          "qconv2d: residual=1 is not supported");
    s_bad("qconv2d N=1 C=3 H=4 W=4 K=2 R=3 S=3 groups=2",
          "qconv2d: groups=2 does not divide C=3");
}

static void test_ops_text(void **state)
{
    (void)state;
    kl_workload_t *w = s_w("qmatmul M=4 N=8 K=16 za=3 zo=5 bias=1 relu=1");
    assert_string_equal(w->op_kind, "qmatmul");
    assert_string_equal(
        w->canonical,
        "C[i,j] += (A[i,k] - 3) * B[k,j] | + bias[j] | requant(scale[j], 5) "
        "| clip(5, 255) where i=4, j=8, k=16; A: u8[4,16], B: const "
        "s8[16,8], bias: const s32[8], scale: const f32[8], C: u8[4,8]");
    /* (a - za) * w and the sum: 3 per point; + bias, requant, clip: 3 per
     * output element. */
    assert_true(w->flop == 3.0 * 4 * 8 * 16 + 3.0 * 4 * 8);
    char *args = kl_workload_args_text(w);
    assert_string_equal(args, "A:u8[4,16] B:s8[16,8]:const "
                              "bias:s32[8]:const scale:f32[8]:const "
                              "C:u8[4,8]:out");
    free(args);
    kl_workload_free(&w);

    /* Per-tensor scale, s8 output, za = 0: the plain product. */
    w = s_w("qmatmul M=2 N=2 K=2 scale=0.1 out=s8 zo=-3");
    assert_string_equal(w->canonical,
                        "C[i,j] += A[i,k] * B[k,j] | requant(0.1, -3)"
                        " where i=2, j=2, k=2; A: u8[2,2], B: const s8[2,2], "
                        "C: s8[2,2]");
    assert_true(w->flop == 2.0 * 8 + 4);
    /* The scale is an f32: spellings of one f32 share a key. */
    kl_workload_t *w2 =
        s_w("C[i,j] += A[i,k] * B[k,j] | requant(0.10000000149, -3) where "
            "i=2, j=2, k=2; A: u8[2,2], B: const s8[2,2], C: s8[2,2]");
    assert_memory_equal(w->key, w2->key, 16);
    kl_workload_free(&w2);
    kl_workload_free(&w);

    w = s_w("qdense N=2 I=3 O=4 za=1 out=s32");
    assert_string_equal(w->canonical,
                        "Y[n,o] += (X[n,i] - 1) * W[o,i] | + bias[o] where "
                        "n=2, o=4, i=3; X: u8[2,3], W: const s8[4,3], bias: "
                        "const s32[4], Y: s32[2,4]");
    kl_workload_free(&w);

    w = s_w("qconv2d N=1 C=4 H=6 W=6 K=8 R=3 S=3 pad=1 za=7 bias=1 "
            "layout=NHWC groups=2");
    assert_string_equal(w->op_kind, "qconv2d");
    assert_non_null(strstr(w->canonical, "(X[n,y+r-1,x+s-1,2*g+c] - 7) * "
                                         "W[r,s,c,4*g+f]"));
    assert_non_null(strstr(w->canonical, "Y: u8[1,6,6,2,4]"));
    assert_non_null(strstr(w->canonical, "| + bias[4*g+f] | "
                                         "requant(scale[4*g+f], 0) where"));
    kl_workload_t *f = s_w("conv2d N=1 C=4 H=6 W=6 K=8 R=3 S=3 pad=1 bias=1 "
                           "layout=NHWC groups=2");
    assert_memory_not_equal(w->key, f->key, 16);
    kl_workload_free(&f);
    kl_workload_free(&w);

    w = s_w("qdepthwise_conv2d N=1 C=3 H=5 W=5 R=3 S=3 pad=1 multiplier=2 "
            "za=2 zo=1");
    assert_string_equal(w->op_kind, "qdepthwise_conv2d");
    assert_non_null(strstr(w->canonical, "W: const s8[6,1,3,3]"));
    assert_non_null(strstr(w->canonical, "scale: const f32[6], "
                                         "Y: u8[1,3,2,5,5]"));
    kl_workload_free(&w);
}

/* Runs the typed interpreter on w with inputs ins (ABI order, the output
 * buffer last) and checks the output against want (as int64). */
static void s_run(const kl_workload_t *w, void **bufs, const int64_t *want)
{
    kl_workload_eval_typed(w, bufs);
    int ot = kl_workload_output(w);
    const kl_tensor_t *o = &w->tensors[ot];
    for (int64_t i = 0; i < kl_tensor_numel(o); i++) {
        int64_t got = o->dtype == KL_DT_U8   ? ((uint8_t *)bufs[ot])[i]
                      : o->dtype == KL_DT_S8 ? ((int8_t *)bufs[ot])[i]
                                             : ((int32_t *)bufs[ot])[i];
        if (got != want[i])
            fail_msg("%s: element %lld: got %lld, want %lld", w->canonical,
                     (long long)i, (long long)got, (long long)want[i]);
    }
}

static void test_eval_rounding(void **state)
{
    (void)state;
    /* acc * 0.5 with ties to even: 0.5->0, 1.5->2, 2.5->2, -0.5->0,
     * -1.5->-2, -2.5->-2, 3.5->4. */
    kl_workload_t *w =
        s_w("C[i,j] += A[i,k] * B[k,j] | requant(0.5, 0) where i=1, j=7, "
            "k=1; A: u8[1,1], B: const s8[1,7], C: s8[1,7]");
    uint8_t A[1] = {1};
    int8_t B[7] = {1, 3, 5, -1, -3, -5, 7};
    int8_t C[7];
    void *bufs[] = {A, B, C};
    s_run(w, bufs, (int64_t[]){0, 2, 2, 0, -2, -2, 4});
    kl_workload_free(&w);
}

static void test_eval_saturate(void **state)
{
    (void)state;
    /* u8 with zo = 10: 300 -> 255, -20 -> 0, 100 -> 110, -10 -> 0. */
    kl_workload_t *w =
        s_w("C[i,j] += A[i,k] * B[k,j] | requant(1, 10) where i=1, j=4, "
            "k=2; A: u8[1,2], B: const s8[2,4], C: u8[1,4]");
    uint8_t A[2] = {2, 1};
    int8_t B[8] = {100, -10, 50, -10, 100, 0, 0, 10};
    uint8_t C[4];
    void *bufs[] = {A, B, C};
    /* j0: 2*100+100 = 300; j1: -20; j2: 100; j3: -20+10 = -10. */
    s_run(w, bufs, (int64_t[]){255, 0, 110, 0});
    kl_workload_free(&w);

    /* s8 output saturates at -128 and 127. */
    w = s_w("qmatmul M=1 N=3 K=1 out=s8 scale=1");
    uint8_t A2[1] = {255};
    int8_t B2[3] = {-128, 127, 0};
    int8_t C2[3];
    void *b2[] = {A2, B2, C2};
    s_run(w, b2, (int64_t[]){-128, 127, 0});
    kl_workload_free(&w);
}

static void test_eval_zero_points(void **state)
{
    (void)state;
    /* qmatmul with za = 128, bias, per-channel scales, zo = 3:
     * C[0,j] = sat(rne((sum_k (A[k] - 128) * B[k,j] + bias[j]) * s[j]) + 3)
     * A = {0, 255, 128}: (a - za) = {-128, 127, 0}. */
    kl_workload_t *w = s_w("qmatmul M=1 N=3 K=3 za=128 zo=3 bias=1");
    uint8_t A[3] = {0, 255, 128};
    int8_t B[9] = {1, -2, 127,  /* k = 0 */
                   1, 2,  -128, /* k = 1 */
                   5, 9,  100}; /* k = 2: times 0 */
    int32_t bias[3] = {10, -7, 1000};
    float scale[3] = {0.25f, 0.125f, 0.001f};
    uint8_t C[3];
    void *bufs[] = {A, B, bias, scale, C};
    /* j0: -128 + 127 + 10 = 9 -> 2.25 -> 2 -> 5.
     * j1: 256 + 254 - 7 = 503 -> 62.875 -> 63 -> 66.
     * j2: -16256 - 16256 + 1000 = -31512 -> -31.512 -> -32 -> -29 -> 0. */
    s_run(w, bufs, (int64_t[]){5, 66, 0});

    /* The same with relu: clip(zo, 255) keeps 5 and 66, lifts 0 to 3. */
    kl_workload_free(&w);
    w = s_w("qmatmul M=1 N=3 K=3 za=128 zo=3 bias=1 relu=1");
    bufs[4] = C;
    s_run(w, bufs, (int64_t[]){5, 66, 3});
    kl_workload_free(&w);

    /* s8 output, negative zero point, per-channel scale on qdense. */
    w = s_w("qdense N=1 I=2 O=2 za=2 out=s8 zo=-5");
    uint8_t X[2] = {0, 10};
    int8_t W[4] = {3, 4, -1, -100}; /* W[o,i] */
    int32_t b2[2] = {1, -1};
    float s2[2] = {0.5f, 0.02f};
    int8_t Y[2];
    void *b[] = {X, W, b2, s2, Y};
    /* o0: (-2)*3 + 8*4 + 1 = 27 -> 13.5 -> 14 -> 9.
     * o1: (-2)*-1 + 8*-100 - 1 = -799 -> -15.98 -> -16 -> -21. */
    s_run(w, b, (int64_t[]){9, -21});
    kl_workload_free(&w);
}

static void test_eval_padding(void **state)
{
    (void)state;
    /* Zero-point padding: with pad = 1 only the centre of the 3x3 window
     * is inside a 1x1 input, so Y = (12 - 10) * 1 = 2 (reading padding as
     * 0 would give 2 + 8 * (0 - 10) = -78). */
    kl_workload_t *w =
        s_w("qconv2d N=1 C=1 H=1 W=1 K=1 R=3 S=3 pad=1 za=10 out=s32");
    uint8_t X[1] = {12};
    int8_t W[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    int32_t Y[1];
    void *bufs[] = {X, W, Y};
    s_run(w, bufs, (int64_t[]){2});
    /* FLOPs count only the valid point: 3 (sub, mul, sum). */
    assert_true(w->flop == 3.0);
    kl_workload_free(&w);

    /* Depthwise, 2x2 input, pad 1, 3x3 window: each output sees the
     * input points it overlaps. za = 1, X = {2,3;4,5} -> {1,2;3,4}, W all
     * 1 except centre 2. Output (0,0) reads X[0..1][0..1] with weights
     * W[1..2][1..2] = {2,1;1,1}: 2 + 2 + 3 + 4 = 11. */
    w = s_w("qdepthwise_conv2d N=1 C=1 H=2 W=2 R=3 S=3 pad=1 za=1 out=s32");
    uint8_t X2[4] = {2, 3, 4, 5};
    int8_t W2[9] = {1, 1, 1, 1, 2, 1, 1, 1, 1};
    int32_t Y2[4];
    void *b2[] = {X2, W2, Y2};
    /* Every output sees all 4 inputs (1+2+3+4 = 10) plus one extra for
     * the one under the centre weight: 10 + x. */
    s_run(w, b2, (int64_t[]){11, 12, 13, 14});
    kl_workload_free(&w);
}

static void test_eval_exact_s32(void **state)
{
    (void)state;
    /* 255 * -128 * 1000 = -32640000: beyond f32's exact integers. Then
     * + 1 must show. */
    kl_workload_t *w = s_w("qmatmul M=1 N=1 K=1000 out=s32 bias=1");
    uint8_t *A = kl_xmalloc(1000);
    int8_t *B = kl_xmalloc(1000);
    memset(A, 255, 1000);
    memset(B, 0x80, 1000);
    int32_t bias[1] = {1}, C[1];
    void *bufs[] = {A, B, bias, C};
    s_run(w, bufs, (int64_t[]){-32640000 + 1});
    free(A);
    free(B);
    kl_workload_free(&w);
}

static void test_eval_float_bufs(void **state)
{
    (void)state;
    /* kl_workload_eval (all-float buffers) gives the same integers. */
    kl_workload_t *w = s_w("qmatmul M=1 N=3 K=3 za=128 zo=3 bias=1");
    float A[3] = {0, 255, 128};
    float B[9] = {1, -2, 127, 1, 2, -128, 5, 9, 100};
    float bias[3] = {10, -7, 1000};
    float scale[3] = {0.25f, 0.125f, 0.001f};
    float C[3];
    float *bufs[] = {A, B, bias, scale, C};
    kl_workload_eval(w, bufs);
    assert_true(C[0] == 5 && C[1] == 66 && C[2] == 0);
    kl_workload_free(&w);

    /* max pooling over u8 stays u8. */
    w = s_w("Y[c,y] max= X[c,y*2+r] where c=1, y=2, r=2; X: u8[1,4], "
            "Y: u8[1,2]");
    uint8_t X[4] = {7, 200, 255, 3};
    uint8_t Y[2];
    void *b[] = {X, Y};
    s_run(w, b, (int64_t[]){200, 255});
    kl_workload_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_ops_text),
        cmocka_unit_test(test_eval_rounding),
        cmocka_unit_test(test_eval_saturate),
        cmocka_unit_test(test_eval_zero_points),
        cmocka_unit_test(test_eval_padding),
        cmocka_unit_test(test_eval_exact_s32),
        cmocka_unit_test(test_eval_float_bufs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
