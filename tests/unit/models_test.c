/* Unit tests of coordinator/models: the graph format, fusion, task
 * extraction and the built-in models. The expected tasks of ResNet-18 are
 * written here from the architecture (He et al., torchvision's layout), and
 * their FLOPs counted here from the layer list, independently of both the
 * graph file and kl_ir's counter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_model.h"
#include "kl_test_tmp.h"

static kl_model_t *s_parse(const char *text)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_parse(text, "test", &m, err))
        fail_msg("kl_model_parse: %s", err);
    return m;
}

static void s_parse_fails(const char *text, const char *want)
{
    char err[KL_ERRMSG_LEN] = "";
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_parse(text, "t.graph", &m, err), KL_ERR_INVAL);
    assert_null(m);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

/* Input rows (or columns) a kernel of size k, stride s, padding p reads
 * inside an input of size n, summed over the outputs: the points that are
 * not padding. */
static int64_t s_valid(int64_t n, int64_t k, int64_t s, int64_t p)
{
    int64_t out = (n + 2 * p - k) / s + 1, v = 0;
    for (int64_t y = 0; y < out; y++)
        for (int64_t r = 0; r < k; r++)
            v += (y * s + r - p >= 0 && y * s + r - p < n);
    return v;
}

typedef struct {
    const char *spec; /* as `kiln tune --op` takes it */
    int weight;
    double flop; /* counted here */
    double macs; /* multiply-adds with padding, as papers count them */
} s_want_t;

static double s_macs(int64_t c, int64_t h, int64_t k, int64_t r, int64_t s,
                     int64_t p)
{
    int64_t out = (h + 2 * p - r) / s + 1;
    return (double)(k * c * r * r * out * out);
}

/* conv2d at batch 1, square input: 2 FLOPs per multiply-add that does not
 * read padding, plus one per output element and epilogue op. */
static double s_conv(int64_t c, int64_t h, int64_t k, int64_t r, int64_t s,
                     int64_t p, int epi)
{
    int64_t v = s_valid(h, r, s, p), out = (h + 2 * p - r) / s + 1;
    return 2.0 * (double)(k * c * v * v) + (double)(epi * k * out * out);
}

static void test_resnet18(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    /* Stem; per stage: conv1 (stride 2 except stage 1, +relu), conv2
     * (+residual +relu, twice), downsample 1x1 (stages 2-4), the second
     * block's conv1 (stride 1); head. bias is the folded batch norm. */
    s_want_t want[18];
    int n = 0;
    want[n++] = (s_want_t){"conv2d N=1 C=3 H=224 W=224 K=64 R=7 S=7 "
                           "stride=2 pad=3 bias=1 relu=1",
                           1, s_conv(3, 224, 64, 7, 2, 3, 2),
                           s_macs(3, 224, 64, 7, 2, 3)};
    want[n++] =
        (s_want_t){"max_pool2d N=1 C=64 H=112 W=112 R=3 S=3 "
                   "stride=2 pad=1",
                   1, 64.0 * s_valid(112, 3, 2, 1) * s_valid(112, 3, 2, 1), 0};
    static char specs[16][160];
    int64_t ch[4] = {64, 128, 256, 512}, hw[4] = {56, 28, 14, 7};
    for (int st = 0; st < 4; st++) {
        int64_t c = ch[st], h = hw[st];
        int64_t cin = st ? ch[st - 1] : 64, hin = st ? hw[st - 1] : 56;
        int64_t s = st ? 2 : 1;
        /* The downsample 1x1 conv comes first in the graph: the block's
         * residual must be computed before the conv it is fused into. */
        if (st) {
            char *sp = specs[4 * st + 2];
            snprintf(sp, 160,
                     "conv2d N=1 C=%lld H=%lld W=%lld K=%lld R=1 S=1 stride=2 "
                     "bias=1",
                     (long long)cin, (long long)hin, (long long)hin,
                     (long long)c);
            want[n++] = (s_want_t){sp, 1, s_conv(cin, hin, c, 1, 2, 0, 1),
                                   s_macs(cin, hin, c, 1, 2, 0)};
        }
        char *sp = specs[4 * st];
        snprintf(sp, 160,
                 "conv2d N=1 C=%lld H=%lld W=%lld K=%lld R=3 S=3 stride=%lld "
                 "pad=1 bias=1 relu=1",
                 (long long)cin, (long long)hin, (long long)hin, (long long)c,
                 (long long)s);
        want[n++] = (s_want_t){sp, st ? 1 : 2, s_conv(cin, hin, c, 3, s, 1, 2),
                               s_macs(cin, hin, c, 3, s, 1)};
        sp = specs[4 * st + 1];
        snprintf(sp, 160,
                 "conv2d N=1 C=%lld H=%lld W=%lld K=%lld R=3 S=3 pad=1 "
                 "bias=1 residual=1 relu=1",
                 (long long)c, (long long)h, (long long)h, (long long)c);
        want[n++] = (s_want_t){sp, 2, s_conv(c, h, c, 3, 1, 1, 3),
                               s_macs(c, h, c, 3, 1, 1)};
        if (!st)
            continue;
        sp = specs[4 * st + 3];
        snprintf(sp, 160,
                 "conv2d N=1 C=%lld H=%lld W=%lld K=%lld R=3 S=3 pad=1 "
                 "bias=1 relu=1",
                 (long long)c, (long long)h, (long long)h, (long long)c);
        want[n++] = (s_want_t){sp, 1, s_conv(c, h, c, 3, 1, 1, 2),
                               s_macs(c, h, c, 3, 1, 1)};
    }
    /* Global average pool: 49 additions and one scaling per channel. */
    want[n++] =
        (s_want_t){"avg_pool2d N=1 C=512 H=7 W=7 R=7 S=7", 1, 512.0 * 50, 0};
    want[n++] = (s_want_t){"dense N=1 I=512 O=1000 bias=1", 1,
                           2.0 * 512 * 1000 + 1000, 512.0 * 1000};
    assert_int_equal(n, 18);

    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load("resnet18", &m, err), KL_OK);
    assert_string_equal(kl_model_name(m), "resnet18");
    assert_int_equal(kl_model_ntasks(m), 18);
    double total = 0, macs = 0;
    int layers = 0;
    for (int i = 0; i < n; i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        kl_workload_t *w = NULL;
        if (kl_workload_from_op(want[i].spec, &w, err))
            fail_msg("%s: %s", want[i].spec, err);
        if (memcmp(w->key, t->w->key, 16) != 0)
            fail_msg("task %d is %s, expected %s", i, t->spec, want[i].spec);
        assert_int_equal(t->weight, want[i].weight);
        if (t->w->flop != want[i].flop)
            fail_msg("task %d (%s): kiln counts %.0f FLOPs, expected %.0f", i,
                     t->spec, t->w->flop, want[i].flop);
        total += want[i].weight * want[i].flop;
        macs += want[i].weight * want[i].macs;
        layers += want[i].weight;
        kl_workload_free(&w);
    }
    /* 20 convolutions, a max pool, the head's pool and dense. */
    assert_int_equal(layers, 23);
    assert_true(kl_model_total_flop(m) == total);
    /* The layer list is ResNet-18's: 1.814 G multiply-adds as the
     * literature counts them (padding included, epilogues not). */
    if (!(macs > 1.813e9 && macs < 1.816e9))
        fail_msg("resnet18: %.0f multiply-adds", macs);
    /* kiln counts 2 FLOPs per multiply-add that reads no padding (the 3x3
     * layers at 7x7 lose 18% of theirs), plus bias, residual and relu:
     * 3,368,137,768 (3.63 G without the padding exclusion). */
    assert_true(total == 3368137768.0);
    assert_true(kl_model_task(m, 18) == NULL);
    assert_string_equal(kl_model_task(m, 2)->layer, "layer1.0.conv1");
    assert_string_equal(kl_model_untuned(m), "");
    kl_model_destroy(&m);
    assert_null(m);
}

/* Sum of weights and the op kinds present, for the larger models. */
static void s_census(const char *name, int ntasks, int layers, double lo,
                     double hi)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(name, &m, err), KL_OK);
    int sum = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        sum += t->weight;
        /* Every relu and residual add fused. */
        assert_string_not_equal(t->w->op_kind, "relu");
        if (strcmp(name, "bert_base") != 0)
            assert_string_not_equal(t->w->op_kind, "add");
    }
    if (kl_model_ntasks(m) != ntasks || sum != layers)
        fail_msg("%s: %d tasks of %d layers, expected %d of %d", name,
                 kl_model_ntasks(m), sum, ntasks, layers);
    double f = kl_model_total_flop(m);
    if (!(f > lo && f < hi))
        fail_msg("%s: %.4g FLOPs, expected %.4g..%.4g", name, f, lo, hi);
    kl_model_destroy(&m);
}

static void test_builtins(void **state)
{
    (void)state;
    const char *const *names = kl_model_builtin_names();
    int k = 0;
    while (names[k])
        k++;
    assert_int_equal(k, 4);
    assert_non_null(kl_model_builtin_text("mobilenet_v2"));
    assert_null(kl_model_builtin_text("vgg16"));
    /* ResNet-50: 53 convolutions (4 downsamples), max pool, avg pool,
     * dense; about 4.1 G multiply-adds. */
    s_census("resnet50", 27, 56, 7.9e9, 8.3e9);
    /* MobileNetV2: 52 convolutions (17 depthwise), avg pool, dense; about
     * 300 M multiply-adds. Distinct: stem 1, first block 2, then per stage
     * (24, 32, 64, 96, 160, 320 channels) 6, 5, 5, 4, 5, 1 new ones (the
     * first expansion of a stage is the last one of the stage before, and
     * a stride-1 stage start shares its depthwise layer), head 3: 32. Its
     * f32 values are NHWC (kl_model_layout.c), where the global pool is a
     * reduction of the export, not a task: 31 of 53; 32 of 54 NCHW. */
    s_census("mobilenet_v2", 31, 53, 0.55e9, 0.65e9);
    setenv("KILN_LAYOUT_F32", "NCHW", 1);
    s_census("mobilenet_v2", 32, 54, 0.55e9, 0.65e9);
    unsetenv("KILN_LAYOUT_F32");
    /* BERT layer: q, k, v (one task of weight 3), out and down (each with
     * its residual add fused), up (with its gelu fused), two batch
     * matmuls.
     * 2*128*768*768*4 + 2*128*768*3072*2 + 2*12*128*128*64*2 =
     * 1,862,270,976 FLOPs, plus biases (5*128*768 + 128*3072), adds
     * (2*128*768, now residual epilogues) and the fused gelu (128*3072):
     * 1,863,745,536. */
    s_census("bert_base", 6, 8, 1863745535.0, 1863745537.0);
}

static void test_bert(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load("bert_base", &m, err), KL_OK);
    const char *want[][2] = {
        {"dense N=128 I=768 O=768", "3"},
        {"batch_matmul B=12 M=128 N=128 K=64", "1"},
        {"batch_matmul B=12 M=128 N=64 K=128", "1"},
        {"dense N=128 I=768 O=768 residual=1", "1"},
        {"dense N=128 I=768 O=3072 act=gelu", "1"},
        {"dense N=128 I=3072 O=768 residual=1", "1"},
    };
    assert_int_equal(kl_model_ntasks(m), 6);
    for (int i = 0; i < 6; i++) {
        kl_workload_t *w = NULL;
        assert_int_equal(kl_workload_from_op(want[i][0], &w, err), KL_OK);
        const kl_model_task_t *t = kl_model_task(m, i);
        if (memcmp(w->key, t->w->key, 16) != 0)
            fail_msg("task %d is %s, expected %s", i, t->spec, want[i][0]);
        assert_int_equal(t->weight, atoi(want[i][1]));
        kl_workload_free(&w);
    }
    /* the gelu fused into the up projection */
    assert_string_equal(kl_model_untuned(m), "softmax x1, layer_norm x2");
    /* 22 layers and the two views that take the [1,128,768] input to
     * 128 tokens (x.seq, x.tokens) */
    assert_int_equal(kl_model_nlayers(m), 24);
    kl_model_destroy(&m);
}

static int s_count_kind(const kl_model_t *m, const char *kind)
{
    int n = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++)
        if (strcmp(kl_model_task(m, i)->w->op_kind, kind) == 0)
            n += kl_model_task(m, i)->weight;
    return n;
}

static void test_fusion_rules(void **state)
{
    (void)state;
    /* relu fuses into conv; the add into the first conv that qualifies
     * (b, whose output has one use), then the final relu as well. */
    kl_model_t *m = s_parse("input x 1x8x8x8\n"
                            "a = conv2d x K=8 R=3 pad=1\n"
                            "ar = relu a\n"
                            "b = conv2d ar K=8 R=3 pad=1 bias=1\n"
                            "s = add b x\n"
                            "o = relu s\n");
    assert_int_equal(kl_model_ntasks(m), 2);
    assert_non_null(strstr(kl_model_task(m, 0)->spec, "relu=1"));
    assert_null(strstr(kl_model_task(m, 0)->spec, "bias"));
    assert_non_null(
        strstr(kl_model_task(m, 1)->spec, "bias=1 residual=1 relu=1"));
    assert_int_equal(kl_model_ntuned_layers(m), 5);
    kl_model_destroy(&m);

    /* A conv output read twice keeps its relu and add apart; relu before
     * an add stops the add (bias, residual, relu is the only order); an
     * add of two non-conv tensors and a relu after batch_matmul stay. */
    m = s_parse("input x 1x8x8x8\n"
                "a = conv2d x K=8 R=1\n"
                "ar = relu a\n"
                "b = conv2d x K=8 R=1 relu=1\n"
                "a2 = conv2d a K=8 R=1\n"
                "s = add b a2\n"
                "input p 2x4x4\n"
                "input q 2x4x4\n"
                "pq = batch_matmul p q\n"
                "pr = relu pq\n"
                "pp = add p q\n");
    assert_int_equal(s_count_kind(m, "relu"), 2);
    assert_int_equal(s_count_kind(m, "conv2d"), 3);
    assert_int_equal(s_count_kind(m, "add"), 1);
    /* a2 takes the residual b (b has relu, so it cannot; and b is
     * computed before a2, as a fused residual must be). */
    assert_non_null(strstr(kl_model_task(m, 3)->spec, "residual=1"));
    kl_model_destroy(&m);

    /* Identical layers merge; dense keeps its relu; views are free. */
    m = s_parse("model tiny\n"
                "input data 1x3x32x32\n"
                "c1 = conv2d data K=16 R=3 pad=1 bias=1\n"
                "r1 = relu c1\n"
                "p1 = max_pool2d r1 R=2\n"
                "f = flatten p1\n"
                "fc = dense f O=4096\n"
                "fr = relu fc\n"
                "fc2 = dense fr O=10  # comment\n"
                "t = transpose fc2 perm=1,0\n"
                "u = reshape t shape=5x2\n"
                "output u\n");
    assert_string_equal(kl_model_name(m), "tiny");
    assert_int_equal(kl_model_ntasks(m), 4);
    assert_string_equal(kl_model_task(m, 2)->spec,
                        "dense N=1 I=4096 O=4096 bias=1 relu=1");
    assert_int_equal(kl_model_nlayers(m), 9);
    kl_model_destroy(&m);
    m = s_parse("input x 4x64\n"
                "a = dense x O=64\n"
                "b = dense a O=64\n"
                "c = matmul b N=64 relu=1\n");
    assert_int_equal(kl_model_ntasks(m), 2);
    assert_int_equal(kl_model_task(m, 0)->weight, 2);
    assert_string_equal(kl_model_task(m, 1)->spec,
                        "matmul M=4 N=64 K=64 const_b=1 relu=1");
    kl_model_destroy(&m);

    /* A transformer's residual adds fold into the dense or matmul that
     * produces them, through views that keep the memory order (a reshape,
     * a transpose of a size-1 dim); a transpose that moves data, or a
     * view read twice, stops it (the add stays a task). */
    m = s_parse("input x 1x4x8\n"
                "f = reshape x shape=4x8\n"
                "a = dense f O=8\n"
                "ar = reshape a shape=4x1x8\n"
                "at = transpose ar perm=1,0,2\n"
                "s = add x at\n"
                "b = matmul s N=8 bias=1\n"
                "t = add s b\n");
    assert_int_equal(s_count_kind(m, "add"), 0);
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "dense N=4 I=8 O=8 bias=1 residual=1");
    assert_string_equal(kl_model_task(m, 1)->spec,
                        "matmul M=4 N=8 K=8 const_b=1 bias=1 residual=1");
    kl_model_destroy(&m);
    m = s_parse("input x 8x1x4\n"
                "f = reshape x shape=8x4\n"
                "a = dense f O=4\n"
                "ar = reshape a shape=4x1x8\n"
                "at = transpose ar perm=2,1,0\n"
                "s = add x at\n"
                "input y 1x4x8\n"
                "c = dense f O=4\n"
                "cr = reshape c shape=1x4x8\n"
                "u = add y cr\n"
                "v = add cr y\n");
    assert_int_equal(s_count_kind(m, "add"), 3);
    assert_null(strstr(kl_model_task(m, 0)->spec, "residual"));
    kl_model_destroy(&m);
}

/* clip LO HI: fused into the layer before it like a relu (one
 * activation per layer: after a relu it stays a layer of its own, and a
 * residual add does not fuse after it); the bounds are its workload's
 * clip(lo, hi) epilogue. */
static void test_clip_layers(void **state)
{
    (void)state;
    kl_model_t *m = s_parse("input x 1x8x8x8\n"
                            "c = conv2d x K=8 R=3 pad=1 bias=1\n"
                            "r = clip c lo=0 hi=6\n"
                            "d = depthwise_conv2d r R=3 pad=1\n"
                            "dr = relu d\n"
                            "q = clip dr lo=-0.5 hi=0.25\n"
                            "e = conv2d q K=8 R=1\n"
                            "ec = clip e lo=0 hi=6\n"
                            "s = add ec x\n");
    assert_int_equal(kl_model_ntasks(m), 5);
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1 "
                        "bias=1 clip=0,6");
    assert_non_null(strstr(kl_model_task(m, 0)->w->canonical,
                           "| + bias[f] | clip(0, 6) where"));
    assert_string_equal(kl_model_task(m, 1)->spec,
                        "depthwise_conv2d N=1 C=8 H=8 W=8 R=3 S=3 stride=1 "
                        "pad=1 relu=1");
    assert_string_equal(kl_model_task(m, 2)->spec,
                        "clip shape=1x8x8x8 lo=-0.5 hi=0.25");
    assert_non_null(
        strstr(kl_model_task(m, 2)->w->canonical, "| clip(-0.5, 0.25) where"));
    assert_string_equal(kl_model_task(m, 3)->spec,
                        "conv2d N=1 C=8 H=8 W=8 K=8 R=1 S=1 stride=1 pad=0 "
                        "clip=0,6");
    /* No residual after an activation: the add stays a layer. */
    assert_string_equal(kl_model_task(m, 4)->spec, "add shape=1x8x8x8");
    assert_int_equal(kl_model_ntuned_layers(m), 8);
    kl_model_destroy(&m);
    m = s_parse("input x 2x16\n"
                "fc = dense x O=10\n"
                "fo = clip fc lo=-1 hi=1\n");
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "dense N=2 I=16 O=10 bias=1 clip=-1,1");
    kl_model_destroy(&m);

    s_parse_fails("input x 1x8\nr = clip x lo=0\n", "clip needs hi=");
    s_parse_fails("input x 1x8\nr = clip x lo=7 hi=6\n",
                  "layer 'r': clip lo=7 is above hi=6");
    s_parse_fails("input x 1x8\nr = clip x lo=zero hi=6\n",
                  "layer 'r': bad value 'zero' for lo (a finite number)");
    s_parse_fails("input x 1x8\nr = clip x lo=0 hi=inf\n",
                  "bad value 'inf' for hi");
}

static void test_errors(void **state)
{
    (void)state;
    /* the whole text: its list is read from the parser's op table */
    s_parse_fails("input x 1x3x8x8\ny = conv3d x K=1 R=1\n",
                  "t.graph:2: unknown op 'conv3d' (conv2d, depthwise_conv2d, "
                  "dense, matmul, batch_matmul, max_pool2d, avg_pool2d, "
                  "global_avg_pool, add, relu, clip, flatten, reshape, "
                  "transpose, softmax, layer_norm, gelu, sigmoid, tanh, "
                  "hard_sigmoid, hard_swish, leaky_relu, elu, silu, const, "
                  "sub, mul, div, pow, max, min, where, sqrt, exp, erf, neg, "
                  "reciprocal, concat, slice, gather, expand, reduce_mean, "
                  "reduce_sum, qconv2d, qdepthwise_conv2d, qdense, qmatmul, "
                  "quantize, dequantize)");
    s_parse_fails("input x 1x3x8x8\ny = conv2d z K=1 R=1\n",
                  "t.graph:2: layer 'y': unknown tensor 'z'");
    s_parse_fails("input x 1x3x8x8\nx = relu x\n", "defined twice");
    s_parse_fails("input x 128x768\ny = conv2d x K=1 R=1\n",
                  "conv2d expects a 4-D NCHW input, got 'x' (128x768)");
    s_parse_fails("input x 1x3x8x8\ny = conv2d x R=1\n", "conv2d needs K=");
    s_parse_fails("input x 1x3x8x8\ny = conv2d x K=4 R=1 bogus=2\n",
                  "conv2d has no attribute 'bogus'");
    s_parse_fails("input x 1x3x8x8\ny = conv2d x K=4 R=1 K=5\n",
                  "K given twice");
    s_parse_fails("input x 1x3x8x8\ny = conv2d x K=4 R=9\n",
                  "does not fit the padded input");
    s_parse_fails("input x 1x4x8x8\ny = conv2d x K=6 R=1 groups=4\n",
                  "t.graph:2: layer 'y': conv2d: groups=4 does not divide");
    s_parse_fails("input x 1x3x8x8\ny = add x\n", "add takes 2 inputs");
    s_parse_fails("input x 2x3\ninput z 3x2\ny = add x z\n",
                  "t.graph:3: layer 'y': add: shapes 2x3 and 3x2 do not "
                  "broadcast");
    s_parse_fails("input x 2x3\ny = reshape x shape=4x2\n",
                  "reshape of 6 elements");
    s_parse_fails("input x 2x3\ny = transpose x perm=0,0\n",
                  "not a permutation");
    s_parse_fails("input x 2x3x4\ny = softmax x\n", "no layer computes");
    s_parse_fails("input x 0x3\n", "bad shape '0x3'");
    s_parse_fails("input x 2x3\ny=relu x\n", "expected 'NAME = OP");
    s_parse_fails("# only a comment\n", "no layers");
    s_parse_fails("input x 2x3\ny = dense x O=4 bias=2\n",
                  "bias must be 0 or 1");

    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load("no-such-model", &m, err), KL_ERR_NOTFOUND);
    assert_non_null(strstr(err, "resnet18"));
    /* A graph file on disk, and a binary file. */
    char path[256];
    assert_non_null(
        kl_test_tmppath(path, sizeof path, "kiln_models_test_XXXXXX"));
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *g = "input x 2x8\ny = dense x O=4\n";
    assert_int_equal(write(fd, g, strlen(g)), (ssize_t)strlen(g));
    close(fd);
    assert_int_equal(kl_model_load(path, &m, err), KL_OK);
    assert_int_equal(kl_model_ntasks(m), 1);
    kl_model_destroy(&m);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "\x08\x07\0\x12", 4), 4);
    close(fd);
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not an ONNX model"));
    unlink(path);
}

/* --precision bf16: the conv2d, dense, matmul and batch_matmul tasks are
 * their in=bf16 forms (the same shapes and epilogues as in f32); depthwise
 * convolutions, pools, elementwise layers and the int8 q-ops stay as they
 * are; f32 is the default and an unknown precision names the accepted. */
static int s_bf16_tasks(const kl_model_t *m)
{
    int n = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++)
        n += kl_workload_is_bf16(kl_model_task(m, i)->w);
    return n;
}

static void s_prec_pair(const char *model, int want_bf16)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *f = NULL, *b = NULL;
    assert_int_equal(kl_model_load_prec(model, KL_DT_F32, &f, err), KL_OK);
    assert_int_equal(kl_model_load_prec(model, KL_DT_BF16, &b, err), KL_OK);
    assert_int_equal(kl_model_ntasks(b), kl_model_ntasks(f));
    assert_int_equal(s_bf16_tasks(f), 0);
    assert_int_equal(s_bf16_tasks(b), want_bf16);
    for (int i = 0; i < kl_model_ntasks(f); i++) {
        const kl_model_task_t *tf = kl_model_task(f, i),
                              *tb = kl_model_task(b, i);
        const char *k = tf->w->op_kind;
        bool mult = !strcmp(k, "conv2d") || !strcmp(k, "dense") ||
                    !strcmp(k, "matmul") || !strcmp(k, "batch_matmul");
        assert_int_equal(tb->weight, tf->weight);
        assert_true(tb->w->flop == tf->w->flop);
        if (!mult) { /* the very same task */
            assert_memory_equal(tb->w->key, tf->w->key, 16);
            assert_false(kl_workload_is_bf16(tb->w));
            continue;
        }
        assert_true(kl_workload_is_bf16(tb->w));
        char want[256];
        snprintf(want, sizeof want, "%s_bf16", tf->w->name);
        assert_string_equal(tb->w->name, want);
        snprintf(want, sizeof want, "%s in=bf16", tf->spec);
        assert_string_equal(tb->spec, want);
    }
    kl_model_destroy(&f);
    kl_model_destroy(&b);
}

static void test_precision(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_prec_pair("resnet18", 16); /* 15 conv2d + the dense */
    s_prec_pair("bert_base", 6); /* 4 dense, 2 batch_matmul */
    /* in the layout of the bf16 graph (f32 MobileNetV2 is NHWC by
     * default: export_layout_test) */
    setenv("KILN_LAYOUT_F32", "NCHW", 1);
    s_prec_pair("mobilenet_v2", 21); /* conv2d, dense; not depthwise */
    unsetenv("KILN_LAYOUT_F32");
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load_prec("mobilenet_v2", KL_DT_BF16, &m, err),
                     KL_OK);
    int bf = 0, dw = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_workload_t *w = kl_model_task(m, i)->w;
        bf += kl_workload_is_bf16(w);
        if (!strcmp(w->op_kind, "depthwise_conv2d")) {
            dw++;
            assert_false(kl_workload_is_bf16(w));
        }
    }
    assert_true(dw > 0 && bf > 0);
    kl_model_destroy(&m);
    /* the q-ops of an int8 graph stay int8; its dense becomes bf16 */
    const char *q = "input x 1x16x8x8\n"
                    "qx = quantize x scale=0.05 zp=128\n"
                    "c1 = qconv2d qx K=16 R=3 S=3 pad=1 za=128 zo=3 "
                    "scale=0.002 bias=1\n"
                    "d1 = dequantize c1 scale=0.02 zp=3\n"
                    "c2 = conv2d d1 K=8 R=1 S=1\n"
                    "f = flatten c2\n"
                    "y = dense f O=4\n";
    assert_int_equal(kl_model_parse_prec(q, "q", KL_DT_BF16, &m, err), KL_OK);
    assert_int_equal(kl_model_ntasks(m), 3);
    assert_true(kl_workload_is_int(kl_model_task(m, 0)->w));
    assert_null(strstr(kl_model_task(m, 0)->spec, "in="));
    assert_string_equal(kl_model_task(m, 1)->w->name,
                        "conv2d_1_16_8_8_8_1_1_s1_p0_bf16");
    assert_string_equal(kl_model_task(m, 2)->w->name,
                        "dense_1_512_4_bias_bf16");
    kl_model_destroy(&m);
    kl_dtype p = KL_DT_S8;
    assert_int_equal(kl_model_precision("bf16", &p, err), KL_OK);
    assert_int_equal(p, KL_DT_BF16);
    assert_int_equal(kl_model_precision("f32", &p, err), KL_OK);
    assert_int_equal(p, KL_DT_F32);
    assert_int_equal(kl_model_precision("f16", &p, err), KL_ERR_INVAL);
    assert_string_equal(err, "unknown precision 'f16' (expected f32 or bf16)");
    assert_int_equal(kl_model_parse_prec(q, "q", KL_DT_F16, &m, err),
                     KL_ERR_INVAL);
    assert_null(m);
}

/* The activations fuse into their producer as act= (after bias and
 * residual), one per producer, only into a sole consumer, never after a
 * relu or clip, and a fused one stops a later add from fusing. */
static void test_fusion_acts(void **state)
{
    (void)state;
    kl_model_t *m = s_parse("input x 1x8x8x8\n"
                            "a = conv2d x K=8 R=3 pad=1 bias=1\n"
                            "s = add a x\n"
                            "as = silu s\n"
                            "b = conv2d as K=8 R=1\n"
                            "bg = hard_sigmoid b alpha=0.25 beta=0.375\n"
                            "c = depthwise_conv2d bg R=3 pad=1\n"
                            "cs = hard_swish c\n"
                            "cq = sigmoid cs\n"
                            "f = flatten cq\n"
                            "d = dense f O=16\n"
                            "dg = gelu d approximate=tanh\n"
                            "e = matmul dg N=4\n"
                            "eg = gelu e\n");
    assert_int_equal(kl_model_ntasks(m), 5);
    const char *want[] = {
        "bias=1 residual=1 act=silu",
        "R=1 S=1 stride=1 pad=0 act=hard_sigmoid alpha=0.25 beta=0.375",
        "pad=1 act=hard_swish",
        "bias=1 act=gelu_tanh",
        "N=4 K=16 const_b=1 act=gelu",
    };
    for (int i = 0; i < 5; i++)
        if (!strstr(kl_model_task(m, i)->spec, want[i]))
            fail_msg("task %d: %s lacks %s", i, kl_model_task(m, i)->spec,
                     want[i]);
    /* the second activation after the depthwise convolution stays */
    assert_string_equal(kl_model_untuned(m), "sigmoid x1");
    kl_model_destroy(&m);
    /* a's output read twice: nothing fuses into a; not after a relu;
     * a silu before an add keeps the add out. */
    m = s_parse("input x 1x8x8x8\n"
                "a = conv2d x K=8 R=3 pad=1\n"
                "as = silu a\n"
                "o = add as a\n"
                "b = conv2d o K=8 R=1\n"
                "br = relu b\n"
                "bs = sigmoid br\n"
                "c = conv2d bs K=8 R=1 bias=1\n"
                "cs = silu c\n"
                "r = add cs bs\n");
    int nact = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const char *sp = kl_model_task(m, i)->spec;
        assert_null(strstr(sp, "residual"));
        if (strstr(sp, "act=")) {
            assert_non_null(strstr(sp, "R=1 S=1 stride=1 pad=0 bias=1 "
                                       "act=silu"));
            nact++;
        }
    }
    assert_int_equal(nact, 1); /* only c's silu */
    assert_string_equal(kl_model_untuned(m), "sigmoid x1, silu x1");
    kl_model_destroy(&m);
}

/* Each task's parameter bytes (one layer's weight and bias, f32 4 bytes,
 * a q-op's s8 weight 1 and s32 bias 4) and the condition --condition
 * auto gives it: cold from KL_MODEL_COLD_BYTES (1 MiB) up. */
static void test_task_cond(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = s_parse("input x 1x1024\n"
                            "d = dense x O=256 bias=1\n"
                            "e = dense d O=255\n"
                            "f = matmul e N=1028\n");
    assert_int_equal(kl_model_ntasks(m), 3);
    /* (a dense has a bias unless bias=0) */
    const int64_t bytes[] = {(1024 * 256 + 256) * 4, (256 * 255 + 255) * 4,
                             255 * 1028 * 4};
    /* 1 MiB and 1 KiB; 255 KiB; 16 bytes under 1 MiB */
    const bool cold[] = {true, false, false};
    for (int i = 0; i < 3; i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        assert_int_equal(t->param_bytes, bytes[i]);
        assert_int_equal(kl_model_task_cold(t, KL_MODEL_COND_AUTO), cold[i]);
        assert_false(kl_model_task_cold(t, KL_MODEL_COND_WARM));
        assert_true(kl_model_task_cold(t, KL_MODEL_COND_COLD));
    }
    /* the threshold itself is cold, one byte less is not */
    kl_model_task_t t = {.param_bytes = KL_MODEL_COLD_BYTES};
    assert_true(kl_model_task_cold(&t, KL_MODEL_COND_AUTO));
    t.param_bytes--;
    assert_false(kl_model_task_cold(&t, KL_MODEL_COND_AUTO));
    kl_model_destroy(&m);
    /* a q-op: s8 weight, s32 bias */
    m = s_parse("input x 1x16x8x8\n"
                "qx = quantize x scale=0.05 zp=128\n"
                "c = qconv2d qx K=32 R=3 S=3 pad=1 za=128 zo=3 scale=0.002 "
                "bias=1\n");
    assert_int_equal(kl_model_task(m, 0)->param_bytes, 32 * 16 * 9 + 32 * 4);
    kl_model_destroy(&m);
    /* ResNet-18's largest 3x3 convolution: 512 x 512 x 3 x 3 f32 weights
     * and a bias (folded batch norm), and no layer without parameters
     * has any */
    assert_int_equal(kl_model_load("resnet18", &m, err), KL_OK);
    int64_t most = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++)
        if (kl_model_task(m, i)->param_bytes > most)
            most = kl_model_task(m, i)->param_bytes;
    assert_int_equal(most, (512 * 512 * 9 + 512) * 4);
    kl_model_destroy(&m);

    kl_model_cond_t c = KL_MODEL_COND_WARM;
    assert_int_equal(kl_model_cond_parse("auto", &c, err), KL_OK);
    assert_int_equal(c, KL_MODEL_COND_AUTO);
    assert_int_equal(kl_model_cond_parse("cold", &c, err), KL_OK);
    assert_int_equal(c, KL_MODEL_COND_COLD);
    assert_int_equal(kl_model_cond_parse("hot", &c, err), KL_ERR_INVAL);
    assert_string_equal(err, "condition 'hot': expected warm, cold or auto");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet18),    cmocka_unit_test(test_builtins),
        cmocka_unit_test(test_bert),        cmocka_unit_test(test_fusion_rules),
        cmocka_unit_test(test_clip_layers), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_precision),   cmocka_unit_test(test_fusion_acts),
        cmocka_unit_test(test_task_cond),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
