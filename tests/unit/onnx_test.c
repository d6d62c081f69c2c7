/* Unit tests of coordinator/models' ONNX import (kl_model_onnx.c): models
 * built here with the importer's schema (onnx_min.proto), written to a
 * file and loaded like a user's: the tasks they give, their fusion,
 * quantized (QDQ) graphs, and an error that names each node the importer
 * does not take. Parameters: onnx_params_test.c; transformer patterns:
 * onnx_tf_test.c. */
#include "onnx_fx.h"

/* A residual CNN as a PyTorch export writes it (conv + batch norm, a
 * Clip with min 0 and no max, Gemm with transB, a Reshape with 0 and -1)
 * against the graph file that says the same. */
static void test_onnx_cnn(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[4] = {0, 3, 32, 32};
    s_onnx_init(&o, "input.1", 4, in);
    KilnOnnx__TensorProto **t = o.inits;
    t[0] = s_tensor("w1", 4, 16, 3, 3, 3);
    t[1] = s_tensor("b1", 1, 16, 0, 0, 0);
    t[2] = s_tensor("w2", 4, 16, 1, 3, 3);
    t[3] = s_tensor("w3", 4, 16, 16, 1, 1);
    t[4] = s_tensor("w4", 2, 10, 16, 0, 0);
    t[5] = s_tensor("b4", 1, 10, 0, 0, 0);
    t[6] = s_tensor("zero", 0, 0, 0, 0, 0);
    t[6]->n_float_data = 1;
    t[6]->float_data = s_mem(sizeof(float));
    t[7] = s_tensor("shape", 1, 2, 0, 0, 0);
    t[7]->data_type = 7;
    t[7]->n_int64_data = 2;
    t[7]->int64_data = s_mem(2 * sizeof(int64_t));
    t[7]->int64_data[1] = -1;
    t[8] = s_vec("g", 16, NULL, false);
    t[9] = s_vec("be", 16, NULL, true);
    t[10] = s_vec("mu", 16, NULL, false);
    t[11] = s_vec("var", 16, NULL, true);
    o.g.n_initializer = 12;
    s_onnx_node(&o, "Conv", s_strs("input.1", "w1", "b1"), 3, "/c1/Conv",
                s_ints("pads", 4, 1, 1, 1, 1), s_ints("strides", 2, 1, 1, 0, 0),
                s_ints("kernel_shape", 2, 3, 3, 0, 0));
    s_onnx_node(&o, "Relu", s_strs("/c1/Conv", 0, 0), 1, "r1", 0, 0, 0);
    s_onnx_node(&o, "MaxPool", s_strs("r1", 0, 0), 1, "p1",
                s_ints("kernel_shape", 2, 2, 2, 0, 0),
                s_ints("strides", 2, 2, 2, 0, 0), 0);
    s_onnx_node(&o, "Conv", s_strs("p1", "w2", 0), 2, "dw",
                s_ints("pads", 4, 1, 1, 1, 1), s_int("group", 16), 0);
    s_onnx_node(&o, "BatchNormalization", s_bn_in("dw"), 5, "bn2", 0, 0, 0);
    s_onnx_node(&o, "Clip", s_strs("bn2", "zero", ""), 3, "r2", 0, 0, 0);
    s_onnx_node(&o, "Conv", s_strs("r2", "w3", 0), 2, "pw", 0, 0, 0);
    s_onnx_node(&o, "BatchNormalization", s_bn_in("pw"), 5, "bn3", 0, 0, 0);
    s_onnx_node(&o, "Add", s_strs("bn3", "p1", 0), 2, "s", 0, 0, 0);
    s_onnx_node(&o, "Relu", s_strs("s", 0, 0), 1, "o", 0, 0, 0);
    s_onnx_node(&o, "GlobalAveragePool", s_strs("o", 0, 0), 1, "g", 0, 0, 0);
    s_onnx_node(&o, "Flatten", s_strs("g", 0, 0), 1, "f", 0, 0, 0);
    s_onnx_node(&o, "Dropout", s_strs("f", 0, 0), 1, "fd", 0, 0, 0);
    s_onnx_node(&o, "Gemm", s_strs("fd", "w4", "b4"), 3, "fc",
                s_int("transB", 1), 0, 0);
    s_onnx_node(&o, "Reshape", s_strs("fc", "shape", 0), 2, "out", 0, 0, 0);
    const char *path = s_onnx_write(&o, "out");
    kl_model_t *m = NULL, *want = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    want = s_parse("input x 1x3x32x32\n"
                   "c1 = conv2d x K=16 R=3 pad=1 bias=1\n"
                   "r1 = relu c1\n"
                   "p1 = max_pool2d r1 R=2\n"
                   "dw = depthwise_conv2d p1 R=3 pad=1 bias=1\n"
                   "r2 = relu dw\n"
                   "pw = conv2d r2 K=16 R=1 bias=1\n"
                   "s = add pw p1\n"
                   "o = relu s\n"
                   "g = global_avg_pool o\n"
                   "f = flatten g\n"
                   "fc = dense f O=10 bias=1\n");
    s_same_tasks(m, want);
    assert_int_equal(kl_model_ntasks(m), 6);
    char *text = NULL;
    assert_int_equal(kl_model_text(path, &text, err), KL_OK);
    assert_non_null(strstr(text, "input input.1 1x3x32x32\n"));
    assert_non_null(strstr(text, "_c1_Conv = conv2d input.1 K=16 R=3 S=3 "
                                 "stride=1 pad=1 bias=1\n"));
    assert_non_null(strstr(text, "out = reshape fc shape=0x-1\n"));
    free(text);
    kl_model_destroy(&m);
    kl_model_destroy(&want);
    unlink(path);
    s_arena_free();
}

/* Attention scores: MatMul of two 3-D values is a batch matmul; the
 * Transpose and Softmax carry the shapes. Errors name the node. */
static void test_onnx_attention_and_errors(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[3] = {12, 128, 64};
    s_onnx_init(&o, "q", 3, in);
    s_onnx_node(&o, "Transpose", s_strs("q", 0, 0), 1, "kt",
                s_ints("perm", 3, 0, 2, 1, 0), 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("q", "kt", 0), 2, "scores", 0, 0, 0);
    s_onnx_node(&o, "Softmax", s_strs("scores", 0, 0), 1, "p", 0, 0, 0);
    const char *path = s_onnx_write(&o, "p");
    kl_model_t *m = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    assert_int_equal(kl_model_ntasks(m), 1);
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "batch_matmul B=12 M=128 N=128 K=64");
    assert_string_equal(kl_model_untuned(m), "softmax x1");
    kl_model_destroy(&m);

    /* An op kiln does not import is named with its node. */
    s_onnx_node(&o, "Softplus", s_strs("p", 0, 0), 1, "/sp/Softplus", 0, 0, 0);
    path = s_onnx_write(&o, "/sp/Softplus");
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "ONNX import: 1 op type is not supported (1 "
                                "node): Softplus (1 node: '/sp/Softplus'); "
                                "kiln imports Conv, Gemm"));
    /* Asymmetric padding. */
    o.g.n_node = 0;
    o.inits[0] = s_tensor("w", 4, 8, 128, 3, 3);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Conv", s_strs("q", "w", 0), 2, "c",
                s_ints("pads", 4, 0, 0, 1, 1), 0, 0);
    path = s_onnx_write(&o, "c");
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "node 'c' (Conv): asymmetric"));
    /* Bytes that are not a ModelProto. */
    FILE *f = fopen(path, "wb");
    fputs("\xff\xff\xff", f);
    fclose(f);
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not an ONNX model"));
    unlink(path);
    s_arena_free();
}

/* Loads x (1x8x8x8) -> Conv 3x3 (or MaxPool 2x2 when pool) -> Clip with
 * inputs lo and hi (names of the initializers zero, six, m1, one, or ""
 * for none; NULL: the input is left out) and attributes a0, a1. */
static int s_onnx_clip(bool pool, const char *lo, const char *hi,
                       KilnOnnx__AttributeProto *a0,
                       KilnOnnx__AttributeProto *a1, kl_model_t **m, char *err)
{
    s_onnx_t o;
    int64_t in[4] = {1, 8, 8, 8};
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = s_tensor("w", 4, 8, 8, 3, 3);
    o.inits[1] = s_scalar("zero", 0.0f, false);
    o.inits[2] = s_scalar("six", 6.0f, true);
    o.inits[3] = s_scalar("m1", -1.0f, false);
    o.inits[4] = s_scalar("one", 1.0f, true);
    o.g.n_initializer = 5;
    if (pool)
        s_onnx_node(&o, "MaxPool", s_strs("x", 0, 0), 1, "c",
                    s_ints("kernel_shape", 2, 2, 2, 0, 0),
                    s_ints("strides", 2, 2, 2, 0, 0), 0);
    else
        s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "c",
                    s_ints("pads", 4, 1, 1, 1, 1), 0, 0);
    s_onnx_node(&o, "Clip", s_strs("c", lo, hi), 1 + !!lo + !!hi, "r", a0, a1,
                0);
    const char *path = s_onnx_write(&o, "r");
    *m = NULL;
    int rc = kl_model_load(path, m, err);
    unlink(path);
    s_arena_free();
    return rc;
}

/* The conv task's output on X = 1 in the top four rows and -1 below,
 * every weight 0.1: sums from -7.2 to 7.2, some above 6, some between 0
 * and 6. Heap; the output's numel in *n. */
static float *s_eval(const kl_workload_t *w, int64_t *n)
{
    float *bufs[KL_IR_MAX_TENSORS];
    int out = kl_workload_output(w);
    for (int t = 0; t < w->ntensors; t++) {
        int64_t k = kl_tensor_numel(&w->tensors[t]);
        bufs[t] = calloc((size_t)k, sizeof(float));
        for (int64_t i = 0; i < k && t != out; i++)
            bufs[t][i] = t > 0 ? 0.1f : (i / 8) % 8 < 4 ? 1.0f : -1.0f;
    }
    kl_workload_eval(w, bufs);
    *n = kl_tensor_numel(&w->tensors[out]);
    for (int t = 0; t < w->ntensors; t++)
        if (t != out)
            free(bufs[t]);
    return bufs[out];
}

/* Clip: min 0 and max 6 (ReLU6) is clip(0, 6), fused into the conv before
 * it, whether the bounds are inputs (opset 11: float_data or raw_data) or
 * attributes (opset 6); min 0 without a max stays relu; other bounds are
 * clip(lo, hi); a Clip that cannot fuse is a clip layer of its own; bounds
 * kiln cannot read are errors that name the node. */
static void test_onnx_clip(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_model_t *m6 = NULL, *relu = NULL, *m = NULL;
    if (s_onnx_clip(false, "zero", "six", 0, 0, &m6, err))
        fail_msg("%s", err);
    assert_int_equal(kl_model_ntasks(m6), 1);
    const kl_model_task_t *t6 = kl_model_task(m6, 0);
    assert_string_equal(t6->spec, "conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 "
                                  "stride=1 pad=1 clip=0,6");
    assert_non_null(strstr(t6->w->canonical, "| clip(0, 6) where"));
    /* Min 0 and no max (an empty input name, or no input at all). */
    if (s_onnx_clip(false, "zero", "", 0, 0, &relu, err))
        fail_msg("%s", err);
    assert_string_equal(kl_model_task(relu, 0)->spec,
                        "conv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1 "
                        "relu=1");
    assert_non_null(strstr(kl_model_task(relu, 0)->w->canonical, "| relu"));
    assert_null(strstr(kl_model_task(relu, 0)->w->canonical, "clip"));
    if (s_onnx_clip(false, "zero", NULL, 0, 0, &m, err))
        fail_msg("%s", err);
    s_same_tasks(m, relu);
    kl_model_destroy(&m);
    /* What the two compute: relu's values above 6 are 6 under clip. */
    int64_t n, n2, above = 0, inside = 0;
    float *y6 = s_eval(t6->w, &n), *yr = s_eval(kl_model_task(relu, 0)->w, &n2);
    assert_int_equal(n, n2);
    for (int64_t i = 0; i < n; i++) {
        above += yr[i] > 6;
        inside += yr[i] > 0 && yr[i] < 6;
        if (y6[i] != fminf(yr[i], 6.0f))
            fail_msg("element %lld: clip %g, relu %g", (long long)i, y6[i],
                     yr[i]);
    }
    assert_true(above > 0 && inside > 0);
    free(y6);
    free(yr);
    /* Opset 6: min and max as attributes; the same task. */
    if (s_onnx_clip(false, NULL, NULL, s_float("min", 0), s_float("max", 6), &m,
                    err))
        fail_msg("%s", err);
    s_same_tasks(m, m6);
    kl_model_destroy(&m);
    /* Other bounds. */
    if (s_onnx_clip(false, "m1", "one", 0, 0, &m, err))
        fail_msg("%s", err);
    assert_non_null(strstr(kl_model_task(m, 0)->spec, " clip=-1,1"));
    assert_non_null(strstr(kl_model_task(m, 0)->w->canonical, "clip(-1, 1)"));
    kl_model_destroy(&m);
    /* After a pool there is nothing to fuse into. */
    if (s_onnx_clip(true, "zero", "six", 0, 0, &m, err))
        fail_msg("%s", err);
    assert_int_equal(kl_model_ntasks(m), 2);
    assert_string_equal(kl_model_task(m, 1)->spec,
                        "clip shape=1x8x4x4 lo=0 hi=6");
    kl_model_destroy(&m);
    /* Errors name the node. */
    static const struct {
        const char *lo, *hi, *msg;
    } bad[] = {
        {"", "six", "node 'r' (Clip): a Clip without a min"},
        {NULL, NULL, "node 'r' (Clip): a Clip without a min"},
        {"six", "one", "node 'r' (Clip): min 6 is above max 1"},
        {"m1", NULL, "node 'r' (Clip): a Clip without a max"},
        {"c", "six", "node 'r' (Clip): min ('c') is not a constant"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(
            s_onnx_clip(false, bad[i].lo, bad[i].hi, 0, 0, &m, err),
            KL_ERR_INVAL);
        if (!strstr(err, bad[i].msg))
            fail_msg("error '%s' does not say '%s'", err, bad[i].msg);
    }
    kl_model_destroy(&m6);
    kl_model_destroy(&relu);
}

/* auto_pad: an explicit NOTSET (the default, six letters) and VALID are
 * the pads as given, like a node without the attribute; SAME_* is still
 * refused with the node's name. */
static void test_onnx_auto_pad(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *pads[] = {NULL, "NOTSET", "VALID", "SAME_UPPER"};
    char *spec[3] = {NULL};
    for (int i = 0; i < 4; i++) {
        s_onnx_t o;
        int64_t in[4] = {1, 8, 16, 16};
        s_onnx_init(&o, "x", 4, in);
        o.inits[0] = s_tensor("w", 4, 8, 8, 3, 3);
        o.g.n_initializer = 1;
        /* VALID means no padding: its node has none to give. */
        s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "c",
                    pads[i] ? s_str("auto_pad", pads[i]) : NULL,
                    s_ints("pads", 4, i == 2 ? 0 : 1, i == 2 ? 0 : 1,
                           i == 2 ? 0 : 1, i == 2 ? 0 : 1),
                    0);
        const char *path = s_onnx_write(&o, "c");
        kl_model_t *m = NULL;
        int rc = kl_model_load(path, &m, err);
        unlink(path);
        if (i == 3) {
            assert_int_equal(rc, KL_ERR_INVAL);
            assert_non_null(
                strstr(err, "node 'c' (Conv): auto_pad SAME_UPPER is not "
                            "supported"));
        } else {
            if (rc)
                fail_msg("auto_pad %s: %s", pads[i] ? pads[i] : "(none)", err);
            assert_int_equal(kl_model_ntasks(m), 1);
            spec[i] = strdup(kl_model_task(m, 0)->spec);
            kl_model_destroy(&m);
        }
        s_arena_free();
    }
    assert_string_equal(spec[0], "conv2d N=1 C=8 H=16 W=16 K=8 R=3 S=3 "
                                 "stride=1 pad=1");
    assert_string_equal(spec[1], spec[0]);
    assert_string_equal(spec[2], "conv2d N=1 C=8 H=16 W=16 K=8 R=3 S=3 "
                                 "stride=1 pad=0");
    for (int i = 0; i < 3; i++)
        free(spec[i]);
}

/* An integer initializer (ONNX type ty: 2 uint8, 3 int8, 6 int32) of n
 * values v, 1-D [n] or a scalar when n is 0 (one value). */
static KilnOnnx__TensorProto *s_ivec(const char *name, int ty, int n,
                                     const int32_t *v)
{
    KilnOnnx__TensorProto *t = s_tensor(name, n ? 1 : 0, n, 0, 0, 0);
    int k = n ? n : 1;
    t->data_type = ty;
    t->n_int32_data = (size_t)k;
    t->int32_data = s_mem((size_t)k * sizeof(int32_t));
    memcpy(t->int32_data, v, (size_t)k * sizeof(int32_t));
    return t;
}

/* x -> QuantizeLinear -> DequantizeLinear -> Conv (by a DequantizeLinear'd
 * int8 weight with one scale) -> tail -> ... Tail 0: QuantizeLinear ->
 * DequantizeLinear: one qconv2d with a per-tensor scale between a
 * quantize and a dequantize layer. Tail 1: a Sigmoid reads the Conv's
 * output: the Conv cannot fold and the error names it (and says why).
 * Tail 2: the Conv reads x itself (weight-only quantization): refused.
 * Tail 3: the operator form, QuantizeLinear -> QLinearConv ->
 * DequantizeLinear, gives tail 0's graph. Tails 4 and 5: a Relu, a
 * Clip(0, 6) between the Conv and its QuantizeLinear fold in quantized
 * units. */
static void test_onnx_qdq(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    for (int tail = 0; tail < 6; tail++) {
        s_onnx_t o;
        int64_t in[4] = {1, 2, 4, 4};
        s_onnx_init(&o, "x", 4, in);
        int32_t w[8] = {1, -2, 3, -4, 5, -6, 7, -127}, z = 0, zx = 128, zy = 3;
        KilnOnnx__TensorProto *wt = s_ivec("w8", 3, 8, w);
        wt->n_dims = 4; /* [4,2,1,1] */
        wt->dims[0] = 4, wt->dims[1] = 2, wt->dims[2] = wt->dims[3] = 1;
        o.inits[0] = wt;
        o.inits[1] = s_scalar("ws", 0.5f, false);
        o.inits[2] = s_ivec("wz", 3, 0, &z);
        o.inits[3] = s_scalar("xs", 0.25f, false);
        o.inits[4] = s_ivec("xz", 2, 0, &zx);
        o.inits[5] = s_scalar("ys", 0.75f, true);
        o.inits[6] = s_ivec("yz", 2, 0, &zy);
        o.g.n_initializer = 7;
        s_onnx_node(&o, "QuantizeLinear", s_strs("x", "xs", "xz"), 3, "xq", 0,
                    0, 0);
        if (tail == 3) { /* the operator form: QLinearConv */
            char **qin = s_mem(8 * sizeof(char *));
            const char *names[8] = {"xq", "xs", "xz", "w8",
                                    "ws", "wz", "ys", "yz"};
            memcpy(qin, names, sizeof names);
            s_onnx_node(&o, "QLinearConv", qin, 8, "conv", 0, 0, 0);
            s_onnx_node(&o, "DequantizeLinear", s_strs("conv", "ys", "yz"), 3,
                        "y", 0, 0, 0);
        } else {
            s_onnx_node(&o, "DequantizeLinear", s_strs("xq", "xs", "xz"), 3,
                        "xd", 0, 0, 0);
            s_onnx_node(&o, "DequantizeLinear", s_strs("w8", "ws", "wz"), 3,
                        "wd", 0, 0, 0);
            s_onnx_node(&o, "Conv", s_strs(tail == 2 ? "x" : "xd", "wd", 0), 2,
                        "conv", 0, 0, 0);
        }
        const char *last = "y";
        if (tail == 1) {
            s_onnx_node(&o, "Sigmoid", s_strs("conv", 0, 0), 1, "sg", 0, 0, 0);
            last = "sg";
        } else if (tail != 3) {
            const char *qin = "conv";
            if (tail == 4)
                s_onnx_node(&o, "Relu", s_strs("conv", 0, 0), 1, "act", 0, 0,
                            0);
            if (tail == 5) {
                o.inits[o.g.n_initializer++] = s_scalar("lo", 0, false);
                o.inits[o.g.n_initializer++] = s_scalar("hi", 6, false);
                s_onnx_node(&o, "Clip", s_strs("conv", "lo", "hi"), 3, "act", 0,
                            0, 0);
            }
            if (tail >= 4)
                qin = "act";
            s_onnx_node(&o, "QuantizeLinear", s_strs(qin, "ys", "yz"), 3, "yq",
                        0, 0, 0);
            s_onnx_node(&o, "DequantizeLinear", s_strs("yq", "ys", "yz"), 3,
                        "y", 0, 0, 0);
        }
        const char *path = s_onnx_write(&o, last);
        kl_model_t *m = NULL;
        char *text = NULL;
        int rc = kl_model_text(path, &text, err);
        if (tail != 1 && tail != 2) {
            assert_int_equal(rc, KL_OK);
            /* 0.25 * 0.5 / 0.75 in f32; Relu: relu=1 (clip(zo, 255));
             * Clip(0, 6): Q(0) = 3, Q(6) = 6 / 0.75 + 3 = 11 */
            float sc = 0.25f * 0.5f;
            sc = sc / 0.75f;
            char want[200];
            snprintf(want, sizeof want,
                     "conv = qconv2d xq K=4 R=1 S=1 stride=1 pad=0 za=128 "
                     "zo=3 scale=%.9g%s\n",
                     (double)sc,
                     tail == 4   ? " relu=1"
                     : tail == 5 ? " clip=3,11"
                                 : "");
            const char *lines[] = {"xq = quantize x scale=0.25 zp=128\n", want,
                                   "y = dequantize conv scale=0.75 zp=3\n"};
            for (int i = 0; i < 3; i++)
                if (!strstr(text, lines[i]))
                    fail_msg("graph text\n%s\nlacks '%s'", text, lines[i]);
            assert_int_equal(kl_model_load(path, &m, err), KL_OK);
            assert_int_equal(kl_model_ntasks(m), 1);
            assert_non_null(strstr(kl_model_task(m, 0)->spec,
                                   "qconv2d N=1 C=2 H=4 W=4 K=4"));
            assert_string_equal(kl_model_untuned(m), "quantize x1, "
                                                     "dequantize x1");
            kl_model_params_t ps;
            assert_int_equal(kl_model_params(path, &ps, err), KL_OK);
            assert_int_equal(ps.n, 1); /* the weight: no bias, scale */
            assert_string_equal(ps.p[0].name, "conv.weight");
            assert_int_equal(ps.p[0].dtype, KL_DT_S8);
            assert_int_equal(ps.p[0].numel, 8);
            for (int i = 0; i < 8; i++)
                assert_int_equal(((int8_t *)ps.p[0].idata)[i], w[i]);
            kl_model_params_free(&ps);
            kl_model_destroy(&m);
        } else {
            assert_int_equal(rc, KL_ERR_INVAL);
            const char *want =
                tail == 1 ? "not supported (1 node): Conv (1 node: 'conv'; "
                            "its output is not read by one QuantizeLinear "
                            "alone);"
                          : "not supported (1 node): Conv (1 node: 'conv'; an "
                            "int8 weight on a float input";
            if (!strstr(err, want))
                fail_msg("error '%s' does not say '%s'", err, want);
        }
        free(text);
        unlink(path);
        s_arena_free();
    }
}

/* Pooling on quantized data (DequantizeLinear -> MaxPool ->
 * QuantizeLinear) leaves the integer domain explicitly: dequantize,
 * max_pool2d in f32, quantize. The graph parser types tensors: a float
 * layer on a u8 tensor and a q-op on an f32 one are errors naming them. */
static void test_onnx_qdq_float_island(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[4] = {1, 2, 4, 4};
    s_onnx_init(&o, "x", 4, in);
    int32_t zx = 7;
    o.inits[0] = s_scalar("xs", 0.5f, false);
    o.inits[1] = s_ivec("xz", 2, 0, &zx);
    o.g.n_initializer = 2;
    s_onnx_node(&o, "QuantizeLinear", s_strs("x", "xs", "xz"), 3, "xq", 0, 0,
                0);
    s_onnx_node(&o, "DequantizeLinear", s_strs("xq", "xs", "xz"), 3, "xd", 0, 0,
                0);
    s_onnx_node(&o, "MaxPool", s_strs("xd", 0, 0), 1, "p",
                s_ints("kernel_shape", 2, 2, 2, 0, 0),
                s_ints("strides", 2, 2, 2, 0, 0), 0);
    s_onnx_node(&o, "QuantizeLinear", s_strs("p", "xs", "xz"), 3, "pq", 0, 0,
                0);
    s_onnx_node(&o, "DequantizeLinear", s_strs("pq", "xs", "xz"), 3, "y", 0, 0,
                0);
    const char *path = s_onnx_write(&o, "y");
    char *text = NULL;
    assert_int_equal(kl_model_text(path, &text, err), KL_OK);
    unlink(path);
    const char *want = "xq = quantize x scale=0.5 zp=7\n"
                       "xd = dequantize xq scale=0.5 zp=7\n"
                       "p = max_pool2d xd R=2 S=2 stride=2 pad=0\n"
                       "pq = quantize p scale=0.5 zp=7\n"
                       "y = dequantize pq scale=0.5 zp=7\n";
    if (!strstr(text, want))
        fail_msg("graph text\n%s\nlacks\n%s", text, want);
    free(text);
    s_arena_free();
    static const char *const bad[][2] = {
        {"input x 1x4\nq = quantize x scale=0.5\nr = relu q\n",
         "test:3: layer 'r': relu needs an f32 input (dequantize it first), "
         "'q' is u8"},
        {"input x 1x4\nd = qdense x O=2 za=1 zo=2\n",
         "test:2: layer 'd': qdense needs a u8 input (quantize it first), 'x' "
         "is f32"},
        {"input x 1x4\nq = quantize x scale=0.5 zp=300\n",
         "test:2: layer 'q': bad value '300' for zp (u8: 0..255)"},
        {"input x 1x4\nq = quantize x scale=0.5\nd = qdense q O=2 out=s32 "
         "zo=1\n",
         "test:3: layer 'd': out=s32 has no zo= or scale="},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_model_t *m = NULL;
        assert_int_equal(kl_model_parse(bad[i][0], "test", &m, err),
                         KL_ERR_INVAL);
        if (!strstr(err, bad[i][1]))
            fail_msg("error '%s' does not say '%s'", err, bad[i][1]);
    }
}

/* Every node kiln cannot import is named in one error; what is computed
 * from them is not. */
static void test_onnx_unsupported_all(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[2] = {1, 8};
    s_onnx_init(&o, "x", 2, in);
    o.inits[0] = s_scalar("two", 2, false);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Softplus", s_strs("x", 0, 0), 1, "/a", 0, 0, 0);
    s_onnx_node(&o, "Relu", s_strs("/a", 0, 0), 1, "/a2", 0, 0, 0);
    s_onnx_node(&o, "Sign", s_strs("x", "two", 0), 2, "/b", 0, 0, 0);
    s_onnx_node(&o, "ReduceMax", s_strs("x", 0, 0), 1, "/c",
                s_ints("axes", 1, 1, 0, 0, 0), 0, 0);
    s_onnx_node(&o, "Add", s_strs("/a2", "/c", 0), 2, "/d", 0, 0, 0);
    const char *path = s_onnx_write(&o, "/d");
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    unlink(path);
    const char *want = "kiln_onnx_test_";
    assert_non_null(strstr(err, want));
    want = ".onnx: ONNX import: 3 op types are not supported (3 nodes): "
           "ReduceMax (1 node: '/c'), Sign (1 node: '/b'), Softplus (1 node: "
           "'/a'); kiln imports Conv, Gemm, MatMul";
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
    s_arena_free();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onnx_cnn),
        cmocka_unit_test(test_onnx_attention_and_errors),
        cmocka_unit_test(test_onnx_auto_pad),
        cmocka_unit_test(test_onnx_clip),
        cmocka_unit_test(test_onnx_unsupported_all),
        cmocka_unit_test(test_onnx_qdq),
        cmocka_unit_test(test_onnx_qdq_float_island),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
