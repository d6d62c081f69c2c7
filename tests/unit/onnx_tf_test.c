/* Unit tests of coordinator/models' ONNX import (kl_model_onnx.c):
 * transformer patterns as PyTorch's exporters write them (GELU, layer norm
 * whole or spelled out, packed QKV attention, shape arithmetic) and the
 * graph format's N-D matmul and layer_norm. */
#include "onnx_fx.h"

/* GELU in its Erf form is a gelu layer; LayerNormalization is layer_norm
 * with its epsilon and its scale and bias as parameters; an Unsqueeze of
 * an initializer is a constant (the MatMul's bias). */
static void test_onnx_gelu_layer_norm(void **state)
{
    (void)state;
    float w[8 * 16], bias[16], sc[16], lb[16];
    for (int i = 0; i < 8 * 16; i++) {
        w[i] = (float)(i % 7) - 3;
        if (i < 16) {
            bias[i] = (float)i;
            sc[i] = 1.0f + (float)i / 16;
            lb[i] = -(float)i;
        }
    }
    for (int order = 0; order < 2; order++) {
        s_onnx_t o;
        int64_t in[2] = {4, 8};
        s_onnx_init(&o, "x", 2, in);
        KilnOnnx__TensorProto **t = o.inits;
        t[0] = s_data(s_tensor("w", 2, 8, 16, 0, 0), w, 128, true);
        t[1] = s_data(s_tensor("bias", 1, 16, 0, 0, 0), bias, 16, false);
        t[2] = s_scalar("sqrt2", 1.41421356f, true);
        t[3] = s_scalar("one", 1, false);
        t[4] = s_scalar("half", 0.5f, true);
        t[5] = s_data(s_tensor("sc", 1, 16, 0, 0, 0), sc, 16, false);
        t[6] = s_data(s_tensor("lb", 1, 16, 0, 0, 0), lb, 16, true);
        t[7] = s_tensor("ax", 1, 1, 0, 0, 0);
        t[7]->data_type = 7;
        t[7]->n_int64_data = 1;
        t[7]->int64_data = s_mem(sizeof(int64_t));
        o.g.n_initializer = 8;
        s_onnx_node(&o, "Unsqueeze", s_strs("bias", "ax", 0), 2, "bias2", 0, 0,
                    0);
        s_onnx_node(&o, "MatMul", s_strs("x", "w", 0), 2, "h", 0, 0, 0);
        s_onnx_node(&o, "Add", s_strs("h", "bias2", 0), 2, "hb", 0, 0, 0);
        s_onnx_node(&o, "Div", s_strs("hb", "sqrt2", 0), 2, "/g/Div", 0, 0, 0);
        s_onnx_node(&o, "Erf", s_strs("/g/Div", 0, 0), 1, "/g/Erf", 0, 0, 0);
        s_onnx_node(&o, "Add", s_strs("one", "/g/Erf", 0), 2, "/g/Add", 0, 0,
                    0);
        if (order == 0) { /* (x * (erf + 1)) * 0.5 */
            s_onnx_node(&o, "Mul", s_strs("hb", "/g/Add", 0), 2, "/g/Mul", 0, 0,
                        0);
            s_onnx_node(&o, "Mul", s_strs("/g/Mul", "half", 0), 2, "gelu", 0, 0,
                        0);
        } else { /* x * (0.5 * (erf + 1)) */
            s_onnx_node(&o, "Mul", s_strs("half", "/g/Add", 0), 2, "/g/Mul", 0,
                        0, 0);
            s_onnx_node(&o, "Mul", s_strs("hb", "/g/Mul", 0), 2, "gelu", 0, 0,
                        0);
        }
        s_onnx_node(&o, "LayerNormalization", s_strs("gelu", "sc", "lb"), 3,
                    "ln", s_float("epsilon", 1e-6f), s_int("axis", -1), 0);
        const char *path = s_onnx_write(&o, "ln");
        s_text_has(path, "h = matmul x N=16 bias=1\n"
                         "gelu = gelu h\n"
                         "ln = layer_norm gelu eps=9.99999997e-07 affine=1\n");
        kl_model_params_t ps = s_params(path);
        assert_int_equal(ps.n, 4);
        assert_string_equal(ps.p[2].name, "ln.weight");
        assert_string_equal(ps.p[3].name, "ln.bias");
        double want[16];
        for (int i = 0; i < 16; i++)
            want[i] = bias[i];
        s_param_is(&ps, "h.bias", want, 16);
        for (int i = 0; i < 16; i++)
            want[i] = sc[i];
        s_param_is(&ps, "ln.weight", want, 16);
        for (int i = 0; i < 16; i++)
            want[i] = lb[i];
        s_param_is(&ps, "ln.bias", want, 16);
        kl_model_params_free(&ps);
        kl_model_t *m = NULL;
        char err[KL_ERRMSG_LEN];
        if (kl_model_load(path, &m, err))
            fail_msg("%s", err);
        /* the gelu fused into the matmul */
        assert_string_equal(kl_model_untuned(m), "layer_norm x1");
        kl_model_destroy(&m);
        unlink(path);
        s_arena_free();
    }
}

/* An int64 initializer of n values (n_dims 0 when scalar). */
static KilnOnnx__TensorProto *s_i64(const char *name, bool scalar, int n,
                                    int64_t a, int64_t b, int64_t c3, int64_t d)
{
    KilnOnnx__TensorProto *t = s_tensor(name, scalar ? 0 : 1, n, 0, 0, 0);
    int64_t v[4] = {a, b, c3, d};
    t->data_type = 7;
    t->n_int64_data = (size_t)n;
    t->int64_data = s_mem(4 * sizeof(int64_t));
    memcpy(t->int64_data, v, sizeof(v));
    return t;
}

/* Self-attention as PyTorch's dynamo exporter writes it: one packed QKV
 * projection of a [1,S,H] input split by Reshape, Unsqueeze, Transpose,
 * Squeeze and Gather becomes three matmuls by their blocks of the weight
 * and bias; the scale (a Mul through the head views) folds into Q's; the
 * 4-D scores are a batch_matmul over batch x heads. */
static void test_onnx_attention_split(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    float w[8 * 24], b[24];
    for (int i = 0; i < 8 * 24; i++) {
        w[i] = (float)(i % 11) - 5;
        if (i < 24)
            b[i] = (float)i;
    }
    s_onnx_t o;
    int64_t in[3] = {1, 4, 8};
    s_onnx_init(&o, "x", 3, in);
    KilnOnnx__TensorProto **t = o.inits;
    t[0] = s_data(s_tensor("w", 2, 8, 24, 0, 0), w, 192, true);
    t[1] = s_data(s_tensor("b", 1, 24, 0, 0, 0), b, 24, false);
    t[2] = s_i64("sh", false, 4, 1, 4, 3, 8);
    t[3] = s_i64("zero", false, 1, 0, 0, 0, 0);
    t[4] = s_i64("three", false, 1, 3, 0, 0, 0);
    t[5] = s_i64("i0", true, 1, 0, 0, 0, 0);
    t[6] = s_i64("i1", true, 1, 1, 0, 0, 0);
    t[7] = s_i64("i2", true, 1, 2, 0, 0, 0);
    t[8] = s_i64("heads", false, 4, 1, 4, 2, 4);
    t[9] = s_scalar("half", 0.5f, true);
    o.g.n_initializer = 10;
    s_onnx_node(&o, "MatMul", s_strs("x", "w", 0), 2, "qkv", 0, 0, 0);
    s_onnx_node(&o, "Add", s_strs("qkv", "b", 0), 2, "qkvb", 0, 0, 0);
    s_onnx_node(&o, "Reshape", s_strs("qkvb", "sh", 0), 2, "v1",
                s_int("allowzero", 1), 0, 0);
    s_onnx_node(&o, "Unsqueeze", s_strs("v1", "zero", 0), 2, "u", 0, 0, 0);
    KilnOnnx__AttributeProto *p5 = s_ints("perm", 4, 0, 0, 0, 0);
    static const int64_t perm5[5] = {3, 1, 2, 0, 4};
    p5->ints = s_mem(sizeof(perm5));
    memcpy(p5->ints, perm5, sizeof(perm5));
    p5->n_ints = 5;
    s_onnx_node(&o, "Transpose", s_strs("u", 0, 0), 1, "tr", p5, 0, 0);
    s_onnx_node(&o, "Squeeze", s_strs("tr", "three", 0), 2, "sq", 0, 0, 0);
    s_onnx_node(&o, "Gather", s_strs("sq", "i0", 0), 2, "q", 0, 0, 0);
    s_onnx_node(&o, "Gather", s_strs("sq", "i1", 0), 2, "k", 0, 0, 0);
    s_onnx_node(&o, "Gather", s_strs("sq", "i2", 0), 2, "v", 0, 0, 0);
    s_onnx_node(&o, "Reshape", s_strs("q", "heads", 0), 2, "qh", 0, 0, 0);
    s_onnx_node(&o, "Transpose", s_strs("qh", 0, 0), 1, "qt",
                s_ints("perm", 4, 0, 2, 1, 3), 0, 0);
    s_onnx_node(&o, "Mul", s_strs("qt", "half", 0), 2, "qs", 0, 0, 0);
    s_onnx_node(&o, "Reshape", s_strs("k", "heads", 0), 2, "kh", 0, 0, 0);
    s_onnx_node(&o, "Transpose", s_strs("kh", 0, 0), 1, "kt",
                s_ints("perm", 4, 0, 2, 3, 1), 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("qs", "kt", 0), 2, "sc", 0, 0, 0);
    s_onnx_node(&o, "Softmax", s_strs("sc", 0, 0), 1, "p", 0, 0, 0);
    const char *path = s_onnx_write(&o, "p");
    s_text_has(path, "q_mm = matmul x N=8 bias=1\n"
                     "q = reshape q_mm shape=1x4x8\n"
                     "k_mm = matmul x N=8 bias=1\n");
    kl_model_t *m = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    assert_int_equal(kl_model_ntasks(m), 2);
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "matmul M=4 N=8 K=8 const_b=1 bias=1");
    assert_int_equal(kl_model_task(m, 0)->weight, 3);
    assert_string_equal(kl_model_task(m, 1)->spec,
                        "batch_matmul B=2 M=4 N=4 K=4");
    kl_model_destroy(&m);
    kl_model_params_t ps = s_params(path);
    assert_int_equal(ps.n, 6);
    double want[64];
    for (int blk = 0; blk < 3; blk++) {
        char name[32];
        double sc = blk == 0 ? 0.5 : 1.0;
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++)
                want[i * 8 + j] = w[i * 24 + blk * 8 + j] * sc;
        snprintf(name, sizeof(name), "%c_mm.weight", "qkv"[blk]);
        s_param_is(&ps, name, want, 64);
        for (int j = 0; j < 8; j++)
            want[j] = b[blk * 8 + j] * sc;
        snprintf(name, sizeof(name), "%c_mm.bias", "qkv"[blk]);
        s_param_is(&ps, name, want, 8);
    }
    kl_model_params_free(&ps);
    unlink(path);
    s_arena_free();
}

/* The graph format: a matmul by a weight takes any leading dims (M is
 * their product), batch_matmul any rank from 3 with equal leading dims;
 * layer_norm's eps and affine. */
static void test_graph_nd_matmul_layer_norm(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = s_parse("input x 2x3x8\n"
                            "input y 1x2x8x5\n"
                            "input z 1x2x5x4\n"
                            "a = matmul x N=4 bias=1\n"
                            "n = layer_norm a eps=1e-6 affine=1\n"
                            "r = relu n\n"
                            "b = matmul y z\n");
    assert_int_equal(kl_model_ntasks(m), 3);
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "matmul M=6 N=4 K=8 const_b=1 bias=1");
    assert_string_equal(kl_model_task(m, 2)->spec,
                        "batch_matmul B=2 M=8 N=4 K=5");
    kl_model_destroy(&m);
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"input x 2x8\nn = layer_norm x eps=0\n", "eps=0 is not above 0"},
        {"input x 2x8\nn = layer_norm x affine=2\n", "affine must be 0 or 1"},
        {"input y 1x2x8x5\ninput z 1x3x5x4\nb = matmul y z\n",
         "batch_matmul of 1x2x8x5 by 1x3x5x4"},
        {"input x 8\na = matmul x N=4\n", "expects a 2-D [...,M,K] input"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(kl_model_parse(bad[i].text, "t", &m, err),
                         KL_ERR_INVAL);
        if (!strstr(err, bad[i].msg))
            fail_msg("error '%s' does not say '%s'", err, bad[i].msg);
    }
}

/* Layer norm spelled out in elementwise ops (PyTorch before opset 17):
 * ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, then * gamma and
 * + beta: layer_norm eps= affine=1 with gamma and beta as its parameters;
 * without them, affine stays 0 and there are no parameters. */
static void test_onnx_layer_norm_parts(void **state)
{
    (void)state;
    float gam[8], bet[8];
    for (int i = 0; i < 8; i++) {
        gam[i] = 1.0f + (float)i;
        bet[i] = (float)i - 4;
    }
    for (int affine = 0; affine < 2; affine++) {
        s_onnx_t o;
        int64_t in[2] = {2, 8};
        s_onnx_init(&o, "x", 2, in);
        KilnOnnx__TensorProto **t = o.inits;
        t[0] = s_scalar("two", 2, true);
        t[1] = s_scalar("eps", 1e-6f, false);
        t[2] = s_data(s_tensor("gam", 1, 8, 0, 0, 0), gam, 8, true);
        t[3] = s_data(s_tensor("bet", 1, 8, 0, 0, 0), bet, 8, false);
        o.g.n_initializer = 4;
        s_onnx_node(&o, "Relu", s_strs("x", 0, 0), 1, "r", 0, 0, 0);
        s_onnx_node(&o, "ReduceMean", s_strs("r", 0, 0), 1, "/ln/mean",
                    s_ints("axes", 1, -1, 0, 0, 0), 0, 0);
        s_onnx_node(&o, "Sub", s_strs("r", "/ln/mean", 0), 2, "/ln/d", 0, 0, 0);
        s_onnx_node(&o, "Pow", s_strs("/ln/d", "two", 0), 2, "/ln/p", 0, 0, 0);
        s_onnx_node(&o, "ReduceMean", s_strs("/ln/p", 0, 0), 1, "/ln/var",
                    s_ints("axes", 1, -1, 0, 0, 0), 0, 0);
        s_onnx_node(&o, "Add", s_strs("/ln/var", "eps", 0), 2, "/ln/ve", 0, 0,
                    0);
        s_onnx_node(&o, "Sqrt", s_strs("/ln/ve", 0, 0), 1, "/ln/sd", 0, 0, 0);
        s_onnx_node(&o, "Div", s_strs("/ln/d", "/ln/sd", 0), 2, "/ln/n", 0, 0,
                    0);
        const char *out = "/ln/n";
        if (affine) {
            s_onnx_node(&o, "Mul", s_strs("/ln/n", "gam", 0), 2, "/ln/g", 0, 0,
                        0);
            s_onnx_node(&o, "Add", s_strs("/ln/g", "bet", 0), 2, "/ln/y", 0, 0,
                        0);
            out = "/ln/y";
        }
        const char *path = s_onnx_write(&o, out);
        s_text_has(path, affine ? "_ln_y = layer_norm r eps=9.99999997e-07 "
                                  "affine=1\n"
                                : "_ln_n = layer_norm r eps=9.99999997e-07\n");
        kl_model_params_t ps = s_params(path);
        assert_int_equal(ps.n, affine ? 2 : 0);
        if (affine) {
            double want[8];
            for (int i = 0; i < 8; i++)
                want[i] = gam[i];
            s_param_is(&ps, "_ln_y.weight", want, 8);
            for (int i = 0; i < 8; i++)
                want[i] = bet[i];
            s_param_is(&ps, "_ln_y.bias", want, 8);
        }
        kl_model_params_free(&ps);
        unlink(path);
        s_arena_free();
    }
}

/* Shape arithmetic as the TorchScript exporter writes it: Shape of a
 * computed value, Slice, Concat, Gather, Cast, Sqrt and Div of constants
 * are constants, so a Reshape gets its shape and 1/sqrt(d) folds into the
 * MatMul before it; Constant nodes may come after their users. */
static void test_onnx_shape_arithmetic(void **state)
{
    (void)state;
    float w[36];
    for (int i = 0; i < 36; i++)
        w[i] = (float)i;
    s_onnx_t o;
    int64_t in[3] = {1, 4, 6};
    s_onnx_init(&o, "x", 3, in);
    KilnOnnx__TensorProto **t = o.inits;
    t[0] = s_data(s_tensor("w", 2, 6, 6, 0, 0), w, 36, true);
    t[1] = s_i64("s0", false, 1, 0, 0, 0, 0);
    t[2] = s_i64("s2", false, 1, 2, 0, 0, 0);
    t[3] = s_i64("heads", false, 2, 2, 3, 0, 0);
    t[4] = s_i64("last", true, 1, -1, 0, 0, 0);
    t[5] = s_scalar("one", 1, false);
    o.g.n_initializer = 6;
    s_onnx_node(&o, "MatMul", s_strs("x", "w", 0), 2, "h", 0, 0, 0);
    s_onnx_node(&o, "Shape", s_strs("h", 0, 0), 1, "sh", 0, 0, 0);
    s_onnx_node(&o, "Gather", s_strs("sh", "last", 0), 2, "d", 0, 0, 0);
    s_onnx_node(&o, "Cast", s_strs("d", 0, 0), 1, "df", s_int("to", 1), 0, 0);
    s_onnx_node(&o, "Sqrt", s_strs("df", 0, 0), 1, "sd", 0, 0, 0);
    s_onnx_node(&o, "Div", s_strs("one", "sd", 0), 2, "inv", 0, 0, 0);
    s_onnx_node(&o, "Mul", s_strs("h", "inv", 0), 2, "hs", 0, 0, 0);
    s_onnx_node(&o, "Slice", s_strs("sh", "s0", "s2"), 3, "lead", 0, 0, 0);
    s_onnx_node(&o, "Concat", s_strs("lead", "heads", 0), 2, "nsh",
                s_int("axis", 0), 0, 0);
    s_onnx_node(&o, "Reshape", s_strs("hs", "nsh", 0), 2, "r", 0, 0, 0);
    /* A Relu whose constant bound comes later: Clip(r, zero) with the
     * Constant node after it. */
    s_onnx_node(&o, "Clip", s_strs("r", "zero", 0), 2, "c", 0, 0, 0);
    KilnOnnx__AttributeProto *val = s_mem(sizeof(*val));
    kiln_onnx__attribute_proto__init(val);
    val->name = "value";
    val->t = s_scalar("", 0, false);
    s_onnx_node(&o, "Constant", NULL, 0, "zero", val, 0, 0);
    const char *path = s_onnx_write(&o, "c");
    s_text_has(path, "h = matmul x N=6\n"
                     "r = reshape h shape=1x4x2x3\n"
                     "c = relu r\n");
    kl_model_params_t ps = s_params(path);
    double want[36];
    for (int i = 0; i < 36; i++)
        want[i] = w[i] / sqrt(6.0);
    s_param_is(&ps, "h.weight", want, 36);
    assert_int_equal(ps.n, 1);
    kl_model_params_free(&ps);
    unlink(path);
    s_arena_free();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onnx_gelu_layer_norm),
        cmocka_unit_test(test_onnx_attention_split),
        cmocka_unit_test(test_graph_nd_matmul_layer_norm),
        cmocka_unit_test(test_onnx_layer_norm_parts),
        cmocka_unit_test(test_onnx_shape_arithmetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
