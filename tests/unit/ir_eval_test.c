/* Unit tests of the reference interpreter (kl_workload_eval) against
 * hand-written loops, and of the compile-and-check harness (kl_check.h)
 * with real compiler runs. */
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

#include "kl_check.h"
#include "kl_test_tmp.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_util.h"

typedef struct {
    kl_workload_t *w;
    float **bufs; /* ABI order, inputs random */
    float *ref;   /* hand-written result, numel of the output */
    int64_t on;
} s_case_t;

static void s_case_init(s_case_t *c, const char *spec, uint64_t seed)
{
    char err[KL_ERRMSG_LEN];
    if (kl_workload_from_string(spec, &c->w, err))
        fail_msg("%s: %s", spec, err);
    c->bufs = kl_check_alloc(c->w, seed, err);
    assert_non_null(c->bufs);
    c->on = kl_tensor_numel(&c->w->tensors[kl_workload_output(c->w)]);
    c->ref = kl_xcalloc((size_t)c->on, sizeof(float));
}

/* Runs the interpreter and compares with c->ref, then frees the case. */
static void s_case_check(s_case_t *c)
{
    float *out = c->bufs[kl_workload_output(c->w)];
    kl_workload_eval(c->w, c->bufs);
    for (int64_t i = 0; i < c->on; i++) {
        double d = fabs((double)out[i] - (double)c->ref[i]);
        if (!(d <= 1e-5 + 1e-5 * fabs((double)c->ref[i])))
            fail_msg("%s: element %lld: eval %.9g, loop %.9g", c->w->name,
                     (long long)i, (double)out[i], (double)c->ref[i]);
    }
    free(c->ref);
    kl_check_free(c->w, &c->bufs);
    kl_workload_free(&c->w);
}

static void test_eval_matmul(void **state)
{
    (void)state;
    s_case_t c;
    s_case_init(&c, "matmul M=7 N=5 K=13 bias=1 relu=1", 1);
    const float *A = c.bufs[0], *B = c.bufs[1], *bias = c.bufs[2];
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 5; j++) {
            double acc = 0;
            for (int k = 0; k < 13; k++)
                acc += (double)A[i * 13 + k] * B[k * 5 + j];
            acc += bias[j];
            c.ref[i * 5 + j] = (float)(acc > 0 ? acc : 0);
        }
    s_case_check(&c);

    s_case_init(&c, "batch_matmul B=2 M=3 N=4 K=5", 2);
    A = c.bufs[0];
    B = c.bufs[1];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                double acc = 0;
                for (int k = 0; k < 5; k++)
                    acc +=
                        (double)A[(b * 3 + i) * 5 + k] * B[(b * 5 + k) * 4 + j];
                c.ref[(b * 3 + i) * 4 + j] = (float)acc;
            }
    s_case_check(&c);

    s_case_init(&c, "dense N=3 I=6 O=4", 3);
    const float *X = c.bufs[0], *W = c.bufs[1];
    bias = c.bufs[2];
    for (int n = 0; n < 3; n++)
        for (int o = 0; o < 4; o++) {
            double acc = 0;
            for (int i = 0; i < 6; i++)
                acc += (double)X[n * 6 + i] * W[o * 6 + i];
            c.ref[n * 4 + o] = (float)(acc + bias[o]);
        }
    s_case_check(&c);

    s_case_init(&c, "add shape=7x3", 4);
    for (int i = 0; i < 21; i++)
        c.ref[i] = c.bufs[0][i] + c.bufs[1][i];
    s_case_check(&c);
    s_case_init(&c, "relu shape=1000", 5);
    for (int i = 0; i < 1000; i++)
        c.ref[i] = c.bufs[0][i] > 0 ? c.bufs[0][i] : 0;
    s_case_check(&c);
}

typedef struct {
    int N, C, H, W, K, R, S, st, pad, dil, G, P, Q;
    bool nhwc, bias, res, relu;
} s_conv_t;

/* Direct convolution, NCHW with weight [K,C/G,R,S] or NHWC with weight
 * [R,S,C/G,K]; argument order X, W, [bias], [Res]. */
static void s_conv_ref(const s_conv_t *p, float *const *bufs, float *Y)
{
    const float *X = bufs[0], *Wt = bufs[1];
    int a = 2;
    const float *bias = p->bias ? bufs[a++] : NULL;
    const float *res = p->res ? bufs[a++] : NULL;
    int Cg = p->C / p->G, Kg = p->K / p->G;
    for (int n = 0; n < p->N; n++)
        for (int k = 0; k < p->K; k++)
            for (int y = 0; y < p->P; y++)
                for (int x = 0; x < p->Q; x++) {
                    double acc = 0;
                    int g = k / Kg;
                    for (int c = 0; c < Cg; c++)
                        for (int r = 0; r < p->R; r++)
                            for (int s = 0; s < p->S; s++) {
                                int iy = y * p->st + r * p->dil - p->pad;
                                int ix = x * p->st + s * p->dil - p->pad;
                                if (iy < 0 || iy >= p->H || ix < 0 ||
                                    ix >= p->W)
                                    continue;
                                int ci = g * Cg + c;
                                size_t xi =
                                    p->nhwc ? (((size_t)n * p->H + iy) * p->W +
                                               ix) * p->C +
                                                  ci
                                            : (((size_t)n * p->C + ci) * p->H +
                                               iy) * p->W +
                                                  ix;
                                size_t wi =
                                    p->nhwc
                                        ? (((size_t)r * p->S + s) * Cg + c) *
                                                  p->K +
                                              k
                                        : (((size_t)k * Cg + c) * p->R + r) *
                                                  p->S +
                                              s;
                                acc += (double)X[xi] * Wt[wi];
                            }
                    size_t yi =
                        p->nhwc
                            ? (((size_t)n * p->P + y) * p->Q + x) * p->K + k
                            : (((size_t)n * p->K + k) * p->P + y) * p->Q + x;
                    if (bias)
                        acc += bias[k];
                    if (res)
                        acc += res[yi];
                    if (p->relu && acc < 0)
                        acc = 0;
                    Y[yi] = (float)acc;
                }
}

static void s_conv_case(s_conv_t p)
{
    p.P = (p.H + 2 * p.pad - p.dil * (p.R - 1) - 1) / p.st + 1;
    p.Q = (p.W + 2 * p.pad - p.dil * (p.S - 1) - 1) / p.st + 1;
    char spec[256];
    snprintf(spec, sizeof(spec),
             "conv2d N=%d C=%d H=%d W=%d K=%d R=%d S=%d stride=%d pad=%d "
             "dilation=%d groups=%d layout=%s bias=%d residual=%d relu=%d",
             p.N, p.C, p.H, p.W, p.K, p.R, p.S, p.st, p.pad, p.dil, p.G,
             p.nhwc ? "NHWC" : "NCHW", p.bias, p.res, p.relu);
    s_case_t c;
    s_case_init(&c, spec, 7);
    assert_int_equal(c.on, (int64_t)p.N * p.K * p.P * p.Q);
    s_conv_ref(&p, c.bufs, c.ref);
    s_case_check(&c);
}

static void test_eval_conv2d(void **state)
{
    (void)state;
    s_conv_case((s_conv_t){.N = 1,
                           .C = 3,
                           .H = 7,
                           .W = 7,
                           .K = 4,
                           .R = 3,
                           .S = 3,
                           .st = 1,
                           .pad = 1,
                           .dil = 1,
                           .G = 1});
    s_conv_case((s_conv_t){.N = 2,
                           .C = 4,
                           .H = 9,
                           .W = 8,
                           .K = 6,
                           .R = 3,
                           .S = 2,
                           .st = 2,
                           .pad = 2,
                           .dil = 2,
                           .G = 2,
                           .bias = true,
                           .relu = true});
    s_conv_case((s_conv_t){.N = 1,
                           .C = 6,
                           .H = 7,
                           .W = 5,
                           .K = 3,
                           .R = 3,
                           .S = 3,
                           .st = 2,
                           .pad = 1,
                           .dil = 1,
                           .G = 3,
                           .nhwc = true,
                           .res = true});
    s_conv_case((s_conv_t){.N = 1,
                           .C = 5,
                           .H = 6,
                           .W = 6,
                           .K = 5,
                           .R = 1,
                           .S = 1,
                           .st = 1,
                           .pad = 0,
                           .dil = 1,
                           .G = 1,
                           .nhwc = true,
                           .bias = true,
                           .res = true,
                           .relu = true});
}

/* conv2d in=bf16 is the f32 conv2d on X and W rounded to bf16 (nearest
 * even): the interpreter rounds each read of a bf16 tensor, and the bias,
 * the residual and the output stay f32. Unrounded inputs differ. */
static void test_eval_conv2d_bf16(void **state)
{
    (void)state;
    const char *base = "conv2d N=1 C=5 H=6 W=7 K=4 R=3 S=3 stride=1 pad=1 "
                       "layout=NHWC bias=1 residual=1 relu=1";
    char spec[256], err[KL_ERRMSG_LEN];
    snprintf(spec, sizeof spec, "%s in=bf16", base);
    kl_workload_t *wb, *wf;
    assert_int_equal(kl_workload_from_string(spec, &wb, err), KL_OK);
    assert_int_equal(kl_workload_from_string(base, &wf, err), KL_OK);
    assert_true(kl_workload_is_bf16(wb));
    /* the same shapes: wf's random buffers, copied for wb */
    float **bf = kl_check_alloc(wf, 11, err);
    assert_non_null(bf);
    float **bb = kl_xcalloc((size_t)wb->ntensors, sizeof *bb);
    int out = kl_workload_output(wb);
    for (int t = 0; t < wb->ntensors; t++) {
        int64_t n = kl_tensor_numel(&wb->tensors[t]);
        bb[t] = kl_xmalloc((size_t)n * sizeof(float));
        memcpy(bb[t], bf[t], (size_t)n * sizeof(float));
        if (t == out)
            continue;
        for (int64_t i = 0; i < n; i++)
            bf[t][i] = (float)kl_dtype_round(wb->tensors[t].dtype, bb[t][i]);
    }
    kl_workload_eval(wb, bb);
    kl_workload_eval(wf, bf);
    int64_t on = kl_tensor_numel(&wb->tensors[out]);
    for (int64_t i = 0; i < on; i++)
        assert_memory_equal(&bb[out][i], &bf[out][i], sizeof(float));
    /* the same f32 conv2d on the unrounded inputs is another result */
    for (int t = 0; t < wb->ntensors; t++)
        if (t != out)
            memcpy(bf[t], bb[t],
                   (size_t)kl_tensor_numel(&wb->tensors[t]) * sizeof(float));
    kl_workload_eval(wf, bf);
    int differ = 0;
    for (int64_t i = 0; i < on; i++)
        differ += bb[out][i] != bf[out][i];
    assert_true(differ > on / 2);
    kl_check_free(wb, &bb); /* frees what kl_xmalloc gave */
    kl_check_free(wf, &bf);
    kl_workload_free(&wb);
    kl_workload_free(&wf);
}

static void test_eval_depthwise_transpose(void **state)
{
    (void)state;
    /* depthwise, multiplier 2: output channel c*2+m reads input c. */
    s_case_t c;
    s_case_init(&c,
                "depthwise_conv2d N=1 C=3 H=7 W=6 R=3 S=3 stride=2 pad=1 "
                "multiplier=2",
                7);
    int P = (7 + 2 - 2 - 1) / 2 + 1, Q = (6 + 2 - 2 - 1) / 2 + 1;
    for (int ch = 0; ch < 3; ch++)
        for (int m = 0; m < 2; m++)
            for (int y = 0; y < P; y++)
                for (int x = 0; x < Q; x++) {
                    double acc = 0;
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 3; s++) {
                            int iy = 2 * y + r - 1, ix = 2 * x + s - 1;
                            if (iy >= 0 && iy < 7 && ix >= 0 && ix < 6)
                                acc +=
                                    (double)c.bufs[0][(ch * 7 + iy) * 6 + ix] *
                                    c.bufs[1][((ch * 2 + m) * 3 + r) * 3 + s];
                        }
                    c.ref[((ch * 2 + m) * P + y) * Q + x] = (float)acc;
                }
    s_case_check(&c);

    /* conv2d_transpose written as the forward scatter: input pixel (h, w)
     * adds into output (h*stride - pad + r, w*stride - pad + s). */
    s_case_init(&c,
                "conv2d_transpose N=1 C=3 H=5 W=4 K=2 R=3 S=4 stride=2 "
                "pad=1 output_pad=1",
                8);
    int Ho = 4 * 2 - 2 + 3 + 1, Wo = 3 * 2 - 2 + 4 + 1;
    assert_int_equal(c.on, 2 * Ho * Wo);
    for (int ci = 0; ci < 3; ci++)
        for (int h = 0; h < 5; h++)
            for (int w = 0; w < 4; w++)
                for (int k = 0; k < 2; k++)
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 4; s++) {
                            int y = h * 2 - 1 + r, x = w * 2 - 1 + s;
                            if (y < 0 || y >= Ho || x < 0 || x >= Wo)
                                continue;
                            c.ref[(k * Ho + y) * Wo + x] +=
                                c.bufs[0][(ci * 5 + h) * 4 + w] *
                                c.bufs[1][((ci * 2 + k) * 3 + r) * 4 + s];
                        }
    s_case_check(&c);
}

static void test_eval_pool(void **state)
{
    (void)state;
    for (int avg = 0; avg < 2; avg++) {
        s_case_t c;
        s_case_init(&c,
                    avg ? "avg_pool2d N=1 C=2 H=7 W=7 R=3 S=3 stride=2 pad=1"
                        : "max_pool2d N=1 C=2 H=7 W=7 R=3 S=3 stride=2 pad=1",
                    9);
        /* Negative inputs everywhere show that max padding is -inf, not 0. */
        for (int i = 0; i < 2 * 49; i++)
            c.bufs[0][i] = -1.0f - fabsf(c.bufs[0][i]);
        for (int ch = 0; ch < 2; ch++)
            for (int y = 0; y < 4; y++)
                for (int x = 0; x < 4; x++) {
                    double acc = avg ? 0 : -INFINITY;
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 3; s++) {
                            int iy = 2 * y + r - 1, ix = 2 * x + s - 1;
                            if (iy < 0 || iy >= 7 || ix < 0 || ix >= 7)
                                continue;
                            double v = c.bufs[0][(ch * 7 + iy) * 7 + ix];
                            acc = avg ? acc + v : (v > acc ? v : acc);
                        }
                    c.ref[(ch * 4 + y) * 4 + x] = (float)(avg ? acc / 9 : acc);
                }
        s_case_check(&c);
    }
}

/* The interpreter is meant for small shapes, but must not be so slow that
 * a kernel test on a 100^3 matmul drags. */
static void test_eval_speed(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w;
    assert_int_equal(kl_workload_from_op("matmul M=128 N=128 K=128", &w, err),
                     KL_OK);
    float **bufs = kl_check_alloc(w, 3, err);
    double t0 = kl_now_s();
    kl_workload_eval(w, bufs);
    double dt = kl_now_s() - t0;
    print_message("eval matmul 128^3: %.3f s, %.1f M body evaluations/s\n", dt,
                  128.0 * 128 * 128 / dt / 1e6);
    assert_true(dt < 10);
    assert_false(isnan(bufs[2][0]));
    kl_check_free(w, &bufs);
    kl_workload_free(&w);
}

/* ---- check harness ------------------------------------------------------ */

static char s_dir[512];

static int s_setup(void **state)
{
    (void)state;
    return kl_test_mkdtemp(s_dir, sizeof s_dir, "kl_ir_test_XXXXXX") ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    return kl_test_rmdir(s_dir);
}

#define S_MM(NAME, KEND)                                                       \
    "void " NAME "(void *const *args)\n"                                       \
    "{\n"                                                                      \
    "    const float *A = args[0], *B = args[1];\n"                            \
    "    float *C = args[2];\n"                                                \
    "#pragma omp parallel for\n"                                               \
    "    for (int i = 0; i < 33; i++)\n"                                       \
    "        for (int j = 0; j < 17; j++) {\n"                                 \
    "            float acc = 0;\n"                                             \
    "            for (int k = 0; k < " KEND "; k++)\n"                         \
    "                acc += A[i * 9 + k] * B[k * 17 + j];\n"                   \
    "            C[i * 17 + j] = acc;\n"                                       \
    "        }\n"                                                              \
    "}\n"

static void test_check_harness(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w;
    assert_int_equal(kl_workload_from_op("matmul M=33 N=17 K=9", &w, err), 0);
    const char *srcs[] = {
        S_MM("mm_ok", "9"),
        S_MM("mm_short", "8"), /* drops the last k: wrong */
        "void mm_nothing(void *const *args) { (void)args; }\n",
    };
    char *so = NULL;
    if (kl_check_build_many(srcs, 3, s_dir, &so, err))
        fail_msg("%s", err);
    const char *entries[] = {"mm_ok", "mm_short", "mm_nothing", "mm_absent"};
    int rcs[4];
    double me[4];
    int rc = kl_check_run_many(so, entries, 4, w, 42, 1e-4, 1e-5, me, rcs, err);
    assert_int_equal(rc, KL_ERR_RUNTIME);
    assert_int_equal(rcs[0], KL_OK);
    assert_true(me[0] < 1e-5);
    assert_int_equal(rcs[1], KL_ERR_RUNTIME);
    assert_true(me[1] > 1e-3 && isfinite(me[1]));
    assert_int_equal(rcs[2], KL_ERR_RUNTIME);
    assert_true(isinf(me[2]));
    assert_int_equal(rcs[3], KL_ERR_NOTFOUND);
    /* The message names the entry and the first bad element. */
    assert_non_null(strstr(err, "mm_short: wrong result at C[0,"));
    assert_non_null(strstr(err, "elements wrong"));
    double one;
    assert_int_equal(kl_check_run(so, "mm_ok", w, 7, 1e-4, 1e-5, &one, err),
                     KL_OK);
    assert_int_equal(
        kl_check_run(so, "mm_nothing", w, 7, 1e-4, 1e-5, &one, err),
        KL_ERR_RUNTIME);
    assert_non_null(strstr(err, "got nan"));
    free(so);

    /* One source on its own, and a compiler error. */
    assert_int_equal(kl_check_build(srcs[0], s_dir, &so, err), KL_OK);
    assert_int_equal(kl_check_run(so, "mm_ok", w, 1, 1e-4, 1e-5, NULL, err),
                     KL_OK);
    free(so);
    so = (char *)"untouched";
    assert_int_equal(
        kl_check_build("void f(void) { syntax error }", s_dir, &so, err),
        KL_ERR_COMPILE);
    assert_null(so);
    assert_non_null(strstr(err, "error"));
    assert_int_equal(
        kl_check_run("/nonexistent/x.so", "f", w, 1, 0, 0, NULL, err),
        KL_ERR_IO);
    kl_workload_free(&w);

    /* Non-f32 workloads are refused, not run. */
    assert_int_equal(
        kl_workload_parse("Y[i] = X[i] where i=4; X: f16[4]", &w, err), KL_OK);
    assert_null(kl_check_alloc(w, 1, err));
    assert_non_null(strstr(err, "f32 only"));
    kl_workload_free(&w);
}

/* 50 candidates, one compiler run: each source carries its own static
 * helper, so the concatenation compiles. */
static void test_check_many(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w;
    assert_int_equal(kl_workload_from_op("matmul M=33 N=17 K=9", &w, err), 0);
    enum { NC = 50 };
    char *srcs[NC], *entries[NC];
    for (int i = 0; i < NC; i++) {
        entries[i] = kl_xasprintf("cand_%d", i);
        /* Candidate 13 starts j one column late: wrong. */
        srcs[i] = kl_xasprintf(
            "static float dot_%d(const float *a, const float *b)\n"
            "{\n    float acc = 0;\n"
            "    for (int k = 0; k < 9; k++)\n"
            "        acc += a[k] * b[k * 17];\n    return acc;\n}\n"
            "void cand_%d(void *const *args)\n{\n"
            "    const float *A = args[0], *B = args[1];\n"
            "    float *C = args[2];\n"
            "    for (int i = 0; i < 33; i++)\n"
            "        for (int j = %d; j < 17; j++)\n"
            "            C[i * 17 + j] = dot_%d(A + i * 9, B + j);\n"
            "    for (int i = 0; i < 33 && %d; i++)\n"
            "        C[i * 17] = 0;\n}\n",
            i, i, i == 13 ? 1 : 0, i, i == 13);
    }
    char *so = NULL;
    double t0 = kl_now_s();
    if (kl_check_build_many((const char *const *)srcs, NC, s_dir, &so, err))
        fail_msg("%s", err);
    double t1 = kl_now_s();
    int rcs[NC];
    int rc = kl_check_run_many(so, (const char *const *)entries, NC, w, 5, 1e-4,
                               1e-5, NULL, rcs, err);
    print_message("%d candidates: one compile %.2f s, checking all %.3f s\n",
                  NC, t1 - t0, kl_now_s() - t1);
    assert_int_equal(rc, KL_ERR_RUNTIME);
    assert_non_null(strstr(err, "cand_13: wrong result at C[0,0]"));
    for (int i = 0; i < NC; i++) {
        assert_int_equal(rcs[i], i == 13 ? KL_ERR_RUNTIME : KL_OK);
        free(srcs[i]);
        free(entries[i]);
    }
    free(so);
    kl_workload_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_matmul),
        cmocka_unit_test(test_eval_conv2d),
        cmocka_unit_test(test_eval_conv2d_bf16),
        cmocka_unit_test(test_eval_depthwise_transpose),
        cmocka_unit_test(test_eval_pool),
        cmocka_unit_test(test_eval_speed),
        cmocka_unit_test_setup_teardown(test_check_harness, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_check_many, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
