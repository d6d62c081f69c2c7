/* onnx_act_test.c - the activation family's ONNX import
 * (kl_model_onnx_act.c): Sigmoid, Tanh, HardSigmoid, HardSwish,
 * LeakyRelu, Elu as kiln's layers with their attributes (ONNX's defaults
 * when absent), x * Sigmoid(x) as one silu layer; a Mul of a Sigmoid and
 * another tensor stays a Mul (not imported, named). export_weights_test
 * runs the layers in an exported library. */
#include "onnx_fx.h"

static void s_has(const char *text, const char *line)
{
    if (!strstr(text, line))
        fail_msg("graph text\n%s\nlacks '%s'", text, line);
}

static void test_act_chain(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[4] = {1, 8, 4, 4};
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = s_tensor("w", 4, 8, 8, 1, 1);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "c", 0, 0, 0);
    s_onnx_node(&o, "Sigmoid", s_strs("c", 0, 0), 1, "sg", 0, 0, 0);
    s_onnx_node(&o, "Mul", s_strs("sg", "c", 0), 2, "m", 0, 0, 0);
    s_onnx_node(&o, "Tanh", s_strs("m", 0, 0), 1, "t", 0, 0, 0);
    s_onnx_node(&o, "HardSigmoid", s_strs("t", 0, 0), 1, "hs",
                s_float("alpha", 0.25f), s_float("beta", 0.375f), 0);
    s_onnx_node(&o, "HardSwish", s_strs("hs", 0, 0), 1, "hw", 0, 0, 0);
    s_onnx_node(&o, "LeakyRelu", s_strs("hw", 0, 0), 1, "lr", 0, 0, 0);
    s_onnx_node(&o, "Elu", s_strs("lr", 0, 0), 1, "e", s_float("alpha", 0.5f),
                0, 0);
    s_onnx_node(&o, "HardSigmoid", s_strs("e", 0, 0), 1, "hd", 0, 0, 0);
    s_onnx_node(&o, "Sigmoid", s_strs("hd", 0, 0), 1, "y", 0, 0, 0);
    const char *path = s_onnx_write(&o, "y");
    char *text = NULL;
    if (kl_model_text(path, &text, err))
        fail_msg("%s", err);
    s_has(text, "m = silu c\n");
    s_has(text, "t = tanh m\n");
    s_has(text, "hs = hard_sigmoid t alpha=0.25 beta=0.375\n");
    s_has(text, "hw = hard_swish hs\n");
    s_has(text, "lr = leaky_relu hw alpha=0.00999999978\n");
    s_has(text, "e = elu lr alpha=0.5\n");
    s_has(text, "hd = hard_sigmoid e alpha=0.200000003 beta=0.5\n");
    s_has(text, "y = sigmoid hd\n");
    assert_null(strstr(text, "sg ="));
    free(text);
    kl_model_t *m = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    unlink(path);
    assert_int_equal(kl_model_ntasks(m), 1);
    /* the silu fused into the convolution (extraction), the rest not */
    assert_non_null(strstr(kl_model_task(m, 0)->spec, " act=silu"));
    assert_string_equal(kl_model_untuned(m),
                        "sigmoid x1, tanh x1, hard_sigmoid x2, hard_swish x1, "
                        "leaky_relu x1, elu x1");
    kl_model_destroy(&m);
    s_arena_free();
}

/* A Sigmoid times another tensor is not SiLU: a sigmoid layer (which
 * extraction fuses into the convolution), then the Mul of two computed
 * values, a mul layer (untuned). */
static void test_act_not_silu(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[4] = {1, 8, 4, 4};
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = s_tensor("w", 4, 8, 8, 1, 1);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "c", 0, 0, 0);
    s_onnx_node(&o, "Sigmoid", s_strs("c", 0, 0), 1, "sg", 0, 0, 0);
    s_onnx_node(&o, "Mul", s_strs("sg", "x", 0), 2, "m", 0, 0, 0);
    const char *path = s_onnx_write(&o, "m");
    s_text_has(path, "sg = sigmoid c\nm = mul sg x\n");
    kl_model_t *m = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    unlink(path);
    assert_int_equal(kl_model_ntasks(m), 1);
    assert_non_null(strstr(kl_model_task(m, 0)->spec, " act=sigmoid"));
    assert_string_equal(kl_model_untuned(m), "mul x1");
    kl_model_destroy(&m);
    s_arena_free();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_act_chain),
        cmocka_unit_test(test_act_not_silu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
