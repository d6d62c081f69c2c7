/* Unit tests of the value layouts (kl_model_layout.c) and their
 * conversions in kiln export (export_layout.c): which values of a
 * quantized graph are NHWC, the q-convs' layout=NHWC workloads, and the
 * exported graph equal bit for bit to its all-NCHW export
 * (KILN_LAYOUT_NCHW) on random inputs: its q-convs NHWC with their
 * weights permuted, its inputs and outputs converted where a reader wants
 * the other layout (both directions, 16 x 16 transposes and their
 * edges), a max pool and a residual add on NHWC codes. Broken
 * conversions and a broken weight permutation must differ. An f32
 * graph with KILN_LAYOUT_F32=NHWC: its convolutions and depthwise
 * convolutions NHWC, the export equal to the NCHW one within 1e-5; a
 * squeeze-excite block (global pool, scale, reduce_mean) on NHWC values
 * with nothing converted but the input. And the f32 layout chosen per
 * graph: NHWC for MobileNetV2 and the tiny EfficientNet, NCHW for a
 * ResNet and a bf16 graph. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_export.h"
#include "kl_graph.h"
#include "kl_model.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

#include "export_fx.h"

#define S_N (2 * 16 * 19 * 19)

/* x (NCHW, its codes converted for c1), c1 .. c3 NHWC, a code max pool
 * and a qadd between them, d3 NCHW (read by flatten: c3's codes
 * converted), and a branch c0 (NHWC) -> c4 (C = 3: NCHW, c0's codes
 * converted). 19x19: 361 points, bands of 64 points with a tail. */
static const char s_graph[] =
    "model layout\n"
    "input x 2x16x19x19\n"
    "qx = quantize x scale=0.05 zp=128\n"
    "c1 = qconv2d qx K=32 R=3 S=3 pad=1 za=128 zo=3 scale=0.002 bias=1\n"
    "d1 = dequantize c1 scale=0.02 zp=3\n"
    "m1 = max_pool2d d1 R=3 S=3 stride=2 pad=1\n"
    "q1 = quantize m1 scale=0.02 zp=3\n"
    "c2 = qconv2d q1 K=32 R=1 S=1 za=3 zo=0 scale=0.004\n"
    "d2 = dequantize c2 scale=0.03 zp=0\n"
    "dq = dequantize q1 scale=0.02 zp=3\n"
    "s = add d2 dq\n"
    "qs = quantize s scale=0.04 zp=1\n"
    "c3 = qconv2d qs K=16 R=3 S=3 pad=1 stride=2 za=1 zo=2 scale=0.003\n"
    "d3 = dequantize c3 scale=0.05 zp=2\n"
    "f = flatten d3\n"
    "xs = quantize x scale=0.07 zp=100\n"
    "c0 = qconv2d xs K=3 R=1 S=1 za=100 zo=0 scale=0.01\n"
    "c4 = qconv2d c0 K=8 R=3 S=3 za=0 zo=5 scale=0.01\n"
    "d4 = dequantize c4 scale=0.05 zp=5\n"
    "f4 = flatten d4\n"
    "y = dense f O=4\n"
    "z = dense f4 O=4\n"
    "w = add y z\n";

typedef struct {
    char dir[512];
    char err[KL_ERRMSG_LEN];
} fx_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    if (!kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-export-layout-XXXXXX"))
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    s_rmrf(fx->dir);
    free(fx);
    unsetenv("KILN_LAYOUT_NCHW");
    unsetenv("KILN_LAYOUT_F32");
    return 0;
}

static int s_node(const kl_mgraph_t *g, const char *name)
{
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name))
            return i;
    fail_msg("no node %s", name);
    return -1;
}

/* Which values are NHWC, and the workloads that say so. */
static void test_layout_plan(void **state)
{
    fx_t *fx = *state;
    kl_mgraph_t g;
    assert_int_equal(kl_mgraph_parse(s_graph, "layout", &g, fx->err), KL_OK);
    kl_mgraph_fuse(&g);
    static const char *nhwc[] = {"c1", "d1", "m1", "q1", "c2", "d2",
                                 "dq", "s",  "qs", "c3", "c0"};
    static const char *nchw[] = {"x",  "qx", "d3", "f", "xs", "c4",
                                 "d4", "f4", "y",  "z", "w"};
    for (size_t k = 0; k < sizeof nhwc / sizeof *nhwc; k++)
        if (!g.nodes[s_node(&g, nhwc[k])].nhwc)
            fail_msg("%s is not NHWC", nhwc[k]);
    for (size_t k = 0; k < sizeof nchw / sizeof *nchw; k++)
        if (g.nodes[s_node(&g, nchw[k])].nhwc)
            fail_msg("%s is NHWC", nchw[k]);
    char *s1 = kl_mgraph_spec(&g, &g.nodes[s_node(&g, "c1")]);
    char *s0 = kl_mgraph_spec(&g, &g.nodes[s_node(&g, "c4")]);
    assert_non_null(strstr(s1, " layout=NHWC"));
    assert_null(strstr(s0, "layout"));
    free(s1);
    free(s0);
    kl_mgraph_free(&g);
    /* the switch keeps everything NCHW */
    setenv("KILN_LAYOUT_NCHW", "1", 1);
    assert_int_equal(kl_mgraph_parse(s_graph, "layout", &g, fx->err), KL_OK);
    kl_mgraph_fuse(&g);
    for (int i = 0; i < g.n; i++)
        assert_false(g.nodes[i].nhwc);
    kl_mgraph_free(&g);
    unsetenv("KILN_LAYOUT_NCHW");
}

/* Exports the graph into fx->dir/NAME (naive kernels), NHWC or all
 * NCHW; returns kiln_model.c's text. */
static char *s_export(fx_t *fx, const char *name, bool nhwc, fx_lib_t *l)
{
    return fx_export(fx->dir, name, s_graph, "KILN_LAYOUT_NCHW", !nhwc, l);
}

/* n inputs uniform in [lo, hi) from the generator's state *seed. */
static void s_uniform(float *x, int n, uint64_t *seed, float lo, float hi)
{
    for (int i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(*seed >> 11) / 9007199254740992.0) * (hi - lo) +
               lo;
    }
}

/* How many of the rounds give outputs equal bit for bit (inputs uniform
 * in [-6, 6]). */
static int s_same(const fx_lib_t *a, const fx_lib_t *b, int rounds)
{
    static float x[S_N];
    float ya[8], yb[8];
    uint64_t seed = 11;
    int same = 0;
    for (int r = 0; r < rounds; r++) {
        s_uniform(x, S_N, &seed, -6, 6);
        assert_int_equal(a->infer(x, ya), 0);
        assert_int_equal(b->infer(x, yb), 0);
        same += !memcmp(ya, yb, sizeof ya);
    }
    return same;
}

static int s_count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

static void test_layout_equal(void **state)
{
    fx_t *fx = *state;
    fx_lib_t a, b, v;
    char *ta = s_export(fx, "nchw", false, &a);
    char *tb = s_export(fx, "nhwc", true, &b);
    /* the all-NCHW export converts nothing; the NHWC one converts x's
     * codes for c1 and for c0 (to NHWC), c3's for d3 and c0's for c4 (to
     * NCHW), once each (in kiln_model_run and kiln_model_run_profiled),
     * and pools c1's codes NHWC */
    assert_int_equal(s_count(ta, "    s_to_n"), 0);
    assert_int_equal(s_count(tb, "    s_to_nhwc(b_"), 4);
    assert_int_equal(s_count(tb, "    s_to_nchw(b_"), 4);
    assert_int_equal(s_count(tb, "/* qx.nhwc */"), 2);
    assert_int_equal(s_count(tb, "/* xs.nhwc */"), 2);
    assert_int_equal(s_count(tb, "/* c3.nchw */"), 2);
    assert_int_equal(s_count(tb, "/* c0.nchw */"), 2);
    assert_non_null(strstr(tb, "for (long long np = 0; np < N * P; np++)"));
    assert_int_equal(s_same(&a, &b, 20), 20);
    /* a wrong lane in the 16x16 transpose and a wrong tail differ (the
     * weights' permutation: test_layout_weights) */
    fx_variant(fx->dir, "nhwc", "_mm_unpackhi_epi64(lo, hi)",
               "_mm_unpacklo_epi64(lo, hi)", 0, &v);
    assert_int_equal(s_same(&a, &v, 4), 0);
    fx_variant(fx->dir, "nhwc", "y[c * sy + r] = x[r * sx + c];",
               "y[c * sy + r] = x[r * sx + c] ^ 1;", 1, &v);
    assert_int_equal(s_same(&a, &v, 4), 0);
    free(ta);
    free(tb);
}

/* The weights of an NHWC q-conv are the NCHW export's, permuted: the
 * two exports' weight files differ, and each layer's values are the
 * same multiset. */
static void test_layout_weights(void **state)
{
    fx_t *fx = *state;
    fx_lib_t a, b;
    free(s_export(fx, "wa", false, &a));
    free(s_export(fx, "wb", true, &b));
    long long (*na)(int) =
        (long long (*)(int))dlsym(a.h, "kiln_model_param_numel");
    const char *(*nm)(int) =
        (const char *(*)(int))dlsym(a.h, "kiln_model_param_name");
    const float *(*da)(int) =
        (const float *(*)(int))dlsym(a.h, "kiln_model_param_data");
    const float *(*db)(int) =
        (const float *(*)(int))dlsym(b.h, "kiln_model_param_data");
    int (*sa)(int, long long *) =
        (int (*)(int, long long *))dlsym(a.h, "kiln_model_param_shape");
    int (*nb)(int, long long *) =
        (int (*)(int, long long *))dlsym(b.h, "kiln_model_param_shape");
    assert_true(na && nm && da && db && sa && nb);
    int i1 = -1;
    for (int i = 0; nm(i); i++)
        if (!strcmp(nm(i), "c1.weight"))
            i1 = i;
    assert_true(i1 >= 0);
    long long sha[4], shb[4];
    assert_int_equal(sa(i1, sha), 4);
    assert_int_equal(nb(i1, shb), 4);
    /* [K,C,R,S] = 32x16x3x3 and [R,S,C,K] = 3x3x16x32 */
    assert_true(sha[0] == 32 && sha[1] == 16 && sha[2] == 3 && sha[3] == 3);
    assert_true(shb[0] == 3 && shb[1] == 3 && shb[2] == 16 && shb[3] == 32);
    const int8_t *wa = (const int8_t *)da(i1), *wb = (const int8_t *)db(i1);
    for (int f = 0; f < 32; f++)
        for (int c = 0; c < 16; c++)
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++)
                    assert_int_equal(wa[((f * 16 + c) * 3 + r) * 3 + s],
                                     wb[((r * 3 + s) * 16 + c) * 32 + f]);
    assert_true(memcmp(wa, wb, 32 * 16 * 9) != 0);
}

/* f32 with KILN_LAYOUT_F32=NHWC: a 3-channel stem, a depthwise and a
 * 1x1 conv with a fused residual, a strided depthwise, then NCHW readers
 * (a max pool, flatten). */
static const char s_f32[] =
    "model layout_f32\n"
    "input x 2x3x17x17\n"
    "c0 = conv2d x K=16 R=3 S=3 stride=2 pad=1 bias=1\n"
    "r0 = clip c0 lo=0 hi=6\n"
    "d1 = depthwise_conv2d r0 R=3 S=3 pad=1 bias=1 relu=1\n"
    "c2 = conv2d d1 K=16 R=1 S=1 bias=1\n"
    "s = add c2 r0\n"
    "d3 = depthwise_conv2d s R=3 S=3 stride=2 pad=1 bias=1\n"
    "p = max_pool2d d3 R=2 S=2 stride=2\n"
    "f = flatten p\n"
    "y = dense f O=8\n";

/* How many of the rounds give outputs within 1e-5 of the largest
 * (inputs uniform in [-1, 1)). */
static int s_close(const fx_lib_t *a, const fx_lib_t *b, int rounds)
{
    static float x[2 * 3 * 17 * 17];
    float ya[16], yb[16];
    uint64_t seed = 5;
    int close = 0;
    for (int r = 0; r < rounds; r++) {
        s_uniform(x, (int)(sizeof x / sizeof *x), &seed, -1, 1);
        assert_int_equal(a->infer(x, ya), 0);
        assert_int_equal(b->infer(x, yb), 0);
        float big = 0, diff = 0;
        for (int i = 0; i < 16; i++) {
            big = fmaxf(big, fabsf(ya[i]));
            diff = fmaxf(diff, fabsf(ya[i] - yb[i]));
        }
        close += big > 0 && diff <= 1e-5f * big;
    }
    return close;
}

/* graph exported all NCHW (a, its source ta) and with its f32 values
 * NHWC (b, tb): reference kernels; the input converted to NHWC in b, and
 * the two equal within 1e-5 on 10 random inputs. */
static void s_pair(fx_t *fx, const char *name, const char *graph, fx_lib_t *a,
                   fx_lib_t *b, char **ta, char **tb)
{
    char nm[64];
    snprintf(nm, sizeof nm, "%s_nchw", name);
    *ta = fx_export(fx->dir, nm, graph, "KILN_LAYOUT_NCHW", true, a);
    snprintf(nm, sizeof nm, "%s_nhwc", name);
    setenv("KILN_LAYOUT_F32", "NHWC", 1);
    *tb = fx_export(fx->dir, nm, graph, "KILN_LAYOUT_NCHW", false, b);
    unsetenv("KILN_LAYOUT_F32");
    assert_int_equal(s_count(*ta, "    s_to_n"), 0);
    assert_int_equal(s_count(*tb, "/* x.nhwc */"), 2);
    assert_int_equal(s_close(a, b, 10), 10);
}

static void test_layout_f32(void **state)
{
    fx_t *fx = *state;
    kl_mgraph_t g;
    /* NCHW by default: NHWC would convert x and d3 (1734 + 800
     * elements), more than an eighth of the 8576 its layers write */
    assert_int_equal(kl_mgraph_parse(s_f32, "f32", &g, fx->err), KL_OK);
    kl_mgraph_fuse(&g);
    for (int i = 0; i < g.n; i++)
        assert_false(g.nodes[i].nhwc);
    assert_int_equal(kl_mgraph_layout_converted(&g), 0);
    kl_mgraph_free(&g);
    setenv("KILN_LAYOUT_F32", "NHWC", 1);
    assert_int_equal(kl_mgraph_parse(s_f32, "f32", &g, fx->err), KL_OK);
    kl_mgraph_fuse(&g);
    assert_int_equal(kl_mgraph_layout_converted(&g), 1734 + 800);
    static const char *nhwc[] = {"c0", "d1", "c2", "d3"};
    static const char *nchw[] = {"x", "p", "f", "y"};
    for (size_t k = 0; k < 4; k++) {
        const kl_mnode_t *nd = &g.nodes[s_node(&g, nhwc[k])];
        if (!nd->nhwc)
            fail_msg("%s is not NHWC", nhwc[k]);
        char *sp = kl_mgraph_spec(&g, nd);
        assert_non_null(strstr(sp, " layout=NHWC"));
        free(sp);
        if (g.nodes[s_node(&g, nchw[k])].nhwc)
            fail_msg("%s is NHWC", nchw[k]);
    }
    kl_mgraph_free(&g);
    /* bf16 keeps NCHW */
    assert_int_equal(kl_mgraph_parse(s_f32, "f32", &g, fx->err), KL_OK);
    kl_mgraph_set_precision(&g, KL_DT_BF16);
    kl_mgraph_fuse(&g);
    for (int i = 0; i < g.n; i++)
        assert_false(g.nodes[i].nhwc);
    kl_mgraph_free(&g);
    /* the NHWC export against the NCHW one (reference kernels; the
     * conversions: x to NHWC, d3 back for the pool) */
    fx_lib_t a, b;
    char *ta, *tb;
    s_pair(fx, "f32", s_f32, &a, &b, &ta, &tb);
    assert_int_equal(s_count(tb, "/* d3.nchw */"), 2);
    /* c2's weight permuted to [R,S,C,K]; d1's kept [C,1,R,S] */
    int (*shb)(int, long long *) =
        (int (*)(int, long long *))dlsym(b.h, "kiln_model_param_shape");
    const char *(*nm)(int) =
        (const char *(*)(int))dlsym(b.h, "kiln_model_param_name");
    assert_true(shb && nm);
    long long sh[4];
    for (int i = 0; nm(i); i++) {
        if (!strcmp(nm(i), "c0.weight")) {
            assert_int_equal(shb(i, sh), 4);
            assert_true(sh[0] == 3 && sh[1] == 3 && sh[2] == 3 && sh[3] == 16);
        }
        if (!strcmp(nm(i), "d1.weight")) {
            assert_int_equal(shb(i, sh), 4);
            assert_true(sh[0] == 16 && sh[1] == 1 && sh[2] == 3 && sh[3] == 3);
        }
    }
    /* a wrong conversion differs */
    fx_lib_t v;
    fx_variant(fx->dir, "f32_nhwc", "memcpy(y + (c * sy + r) * 4,",
               "memcpy(y + (c * sy + (r ? r - 1 : r)) * 4,", 2, &v);
    assert_int_equal(s_close(&a, &v, 4), 0);
    free(ta);
    free(tb);
}

/* A squeeze-excite block between NHWC convolutions: a global pool, two
 * 1x1 convolutions on [N,C,1,1], the scale broadcast over the pixels,
 * and a reduce_mean over H and W to the classifier. */
static const char s_se[] = "model layout_se\n"
                           "input x 2x3x17x17\n"
                           "c0 = conv2d x K=16 R=3 S=3 stride=2 pad=1 bias=1\n"
                           "a0 = silu c0\n"
                           "d1 = depthwise_conv2d a0 R=3 S=3 pad=1 bias=1\n"
                           "p1 = global_avg_pool d1\n"
                           "e1 = conv2d p1 K=4 R=1 S=1 bias=1 relu=1\n"
                           "e2 = conv2d e1 K=16 R=1 S=1 bias=1\n"
                           "g2 = sigmoid e2\n"
                           "m = mul d1 g2\n"
                           "c3 = conv2d m K=16 R=1 S=1 bias=1\n"
                           "q = reduce_mean c3 axes=2,3 keepdims=0\n"
                           "y = dense q O=8\n";

/* The squeeze-excite's layers follow NHWC values: the pool is a reduction
 * of the export (no task), nothing but the input is converted, and the
 * export equals the all-NCHW one. */
static void test_layout_se(void **state)
{
    fx_t *fx = *state;
    kl_mgraph_t g;
    setenv("KILN_LAYOUT_F32", "NHWC", 1);
    assert_int_equal(kl_mgraph_parse(s_se, "se", &g, fx->err), KL_OK);
    kl_mgraph_fuse(&g);
    static const char *nhwc[] = {"c0", "d1", "p1", "m", "c3", "q"};
    for (size_t k = 0; k < 6; k++)
        if (!g.nodes[s_node(&g, nhwc[k])].nhwc)
            fail_msg("%s is not NHWC", nhwc[k]);
    assert_null(kl_mgraph_spec(&g, &g.nodes[s_node(&g, "p1")]));
    assert_int_equal(kl_mgraph_layout_converted(&g), 2 * 3 * 17 * 17);
    kl_mgraph_free(&g);
    /* NCHW: the pool is a task */
    setenv("KILN_LAYOUT_F32", "NCHW", 1);
    assert_int_equal(kl_mgraph_parse(s_se, "se", &g, fx->err), KL_OK);
    kl_mgraph_fuse(&g);
    char *sp = kl_mgraph_spec(&g, &g.nodes[s_node(&g, "p1")]);
    assert_non_null(sp);
    assert_non_null(strstr(sp, "avg_pool2d N=2 C=16 H=9 W=9 R=9 S=9"));
    free(sp);
    kl_mgraph_free(&g);
    fx_lib_t a, b;
    char *ta, *tb;
    s_pair(fx, "se", s_se, &a, &b, &ta, &tb);
    assert_int_equal(s_count(tb, "    s_to_nchw("), 0);
    assert_int_equal(s_count(tb, "/* p1: global_avg_pool */"), 2);
    /* every channel scaled by the first one's scale differs */
    fx_lib_t v;
    fx_variant(fx->dir, "se_nhwc",
               "sh[] = {2, 81, 16}, st[] = {1296, 16, 1, 16, 0, 1}",
               "sh[] = {2, 81, 16}, st[] = {1296, 16, 1, 16, 0, 0}", 3, &v);
    assert_int_equal(s_close(&a, &v, 4), 0);
    free(ta);
    free(tb);
}

/* How many of m's tasks are convolutions (conv2d, depthwise_conv2d),
 * and how many of those say layout=NHWC. */
static void s_conv_tasks(const char *model, kl_dtype prec, int *conv, int *nhwc)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_load_prec(model, prec, &m, err))
        fail_msg("%s: %s", model, err);
    *conv = *nhwc = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        if (strncmp(t->w->op_kind, "conv2d", 6) &&
            strcmp(t->w->op_kind, "depthwise_conv2d"))
            continue;
        (*conv)++;
        *nhwc += strstr(t->spec, " layout=NHWC") != NULL;
    }
    kl_model_destroy(&m);
}

/* The f32 layout chosen per graph, and KILN_LAYOUT_F32 deciding. */
static void test_layout_f32_auto(void **state)
{
    (void)state;
    const char *eff = KL_TEST_DATA "/onnx/tiny_efficientnet.onnx";
    int conv, nhwc;
    unsetenv("KILN_LAYOUT_F32");
    s_conv_tasks("mobilenet_v2", KL_DT_F32, &conv, &nhwc);
    assert_true(conv > 20);
    assert_int_equal(nhwc, conv);
    s_conv_tasks("mobilenet_v2", KL_DT_BF16, &conv, &nhwc);
    assert_int_equal(nhwc, 0);
    s_conv_tasks("resnet18", KL_DT_F32, &conv, &nhwc);
    assert_true(conv > 10);
    assert_int_equal(nhwc, 0);
    s_conv_tasks(eff, KL_DT_F32, &conv, &nhwc);
    assert_true(conv > 10);
    assert_int_equal(nhwc, conv);
    /* KILN_LAYOUT_F32 decides; auto is the default */
    setenv("KILN_LAYOUT_F32", "NCHW", 1);
    s_conv_tasks("mobilenet_v2", KL_DT_F32, &conv, &nhwc);
    assert_int_equal(nhwc, 0);
    setenv("KILN_LAYOUT_F32", "NHWC", 1);
    s_conv_tasks("resnet18", KL_DT_F32, &conv, &nhwc);
    assert_int_equal(nhwc, conv);
    setenv("KILN_LAYOUT_F32", "auto", 1);
    s_conv_tasks("mobilenet_v2", KL_DT_F32, &conv, &nhwc);
    assert_int_equal(nhwc, conv);
    /* a bad value is an error naming it */
    setenv("KILN_LAYOUT_F32", "nhwc", 1);
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load("mobilenet_v2", &m, err), KL_ERR_INVAL);
    assert_null(m);
    assert_non_null(strstr(err, "KILN_LAYOUT_F32: bad value 'nhwc'"));
    unsetenv("KILN_LAYOUT_F32");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_layout_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layout_equal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layout_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layout_f32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layout_se, setup, teardown),
        cmocka_unit_test(test_layout_f32_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
