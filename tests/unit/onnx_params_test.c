/* Unit tests of coordinator/models' ONNX import (kl_model_onnx.c): the
 * parameters a model gives, with batch norms, constant adds and scales and
 * Gemm's alpha and beta folded into the layers' weights; external data
 * files; and the folds refused. */
#include "onnx_fx.h"

/* Conv (with and without its bias) + BatchNormalization + Add of a
 * [1,K,1,1] constant + Mul by a scalar: one conv2d bias=1 whose weight and
 * bias are the numbers folded here by hand; the BN vectors in float_data
 * and raw_data both. */
static void test_onnx_params_conv_bn(void **state)
{
    (void)state;
    static const float w[6] = {1, -2, 3, 0.5f, -1, 4}, cb[3] = {0.5f, -1, 2},
                       g[3] = {1, 2, 0.5f}, be[3] = {0.1f, 0.2f, 0.3f},
                       mu[3] = {1, -1, 0}, var[3] = {4, 0.25f, 1},
                       k4[3] = {10, 20, 30}, two = 2;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        s_onnx_t o;
        int64_t in[4] = {1, 2, 3, 3};
        s_onnx_init(&o, "x", 4, in);
        KilnOnnx__TensorProto **t = o.inits;
        t[0] = s_data(s_tensor("w", 4, 3, 2, 1, 1), w, 6, with_bias);
        t[1] = s_data(s_tensor("cb", 1, 3, 0, 0, 0), cb, 3, true);
        t[2] = s_data(s_tensor("g", 1, 3, 0, 0, 0), g, 3, false);
        t[3] = s_data(s_tensor("be", 1, 3, 0, 0, 0), be, 3, true);
        t[4] = s_data(s_tensor("mu", 1, 3, 0, 0, 0), mu, 3, false);
        t[5] = s_data(s_tensor("var", 1, 3, 0, 0, 0), var, 3, true);
        t[6] = s_data(s_tensor("k4", 4, 1, 3, 1, 1), k4, 3, false);
        t[7] = s_data(s_tensor("two", 0, 0, 0, 0, 0), &two, 1, true);
        o.g.n_initializer = 8;
        s_onnx_node(&o, "Conv", s_strs("x", "w", "cb"), 2 + with_bias, "c", 0,
                    0, 0);
        s_onnx_node(&o, "BatchNormalization", s_bn_in("c"), 5, "bn", 0, 0, 0);
        s_onnx_node(&o, "Add", s_strs("k4", "bn", 0), 2, "a", 0, 0, 0);
        s_onnx_node(&o, "Mul", s_strs("a", "two", 0), 2, "m", 0, 0, 0);
        const char *path = s_onnx_write(&o, "m");
        s_text_has(path, "c = conv2d x K=3 R=1 S=1 stride=1 pad=0 bias=1\n"
                         "output c\n");
        kl_model_params_t ps = s_params(path);
        assert_int_equal(ps.n, 2);
        assert_string_equal(ps.p[0].name, "c.weight");
        assert_string_equal(ps.p[1].name, "c.bias");
        double ww[6], wb[3];
        for (int k = 0; k < 3; k++) {
            double sc = g[k] / sqrt((double)var[k] + 1e-5);
            for (int i = 0; i < 2; i++)
                ww[2 * k + i] = w[2 * k + i] * sc * 2;
            wb[k] =
                (((with_bias ? cb[k] : 0) - mu[k]) * sc + be[k] + k4[k]) * 2;
        }
        s_param_is(&ps, "c.weight", ww, 6);
        s_param_is(&ps, "c.bias", wb, 3);
        kl_model_params_free(&ps);
        assert_int_equal(ps.n, 0);
        unlink(path);
        s_arena_free();
    }
}

/* Gemm transB=1 with alpha and beta (dense: [O,I], alpha in the weight,
 * beta in the bias), Gemm transB=0 with a scalar C (matmul N=, [K,N] as
 * is), MatMul by an initializer with an Add of a [1,N] constant and a Div
 * by one value per column. */
static void test_onnx_params_gemm(void **state)
{
    (void)state;
    float b1[12], c1[3] = {1, 2, 3}, b2[15], c2 = 7, b3[10];
    static const float ca[2] = {4, -4}, dv[2] = {2, 8};
    for (int i = 0; i < 15; i++) {
        if (i < 12)
            b1[i] = (float)i - 5;
        if (i < 10)
            b3[i] = (float)i * 0.5f;
        b2[i] = (float)(i % 4) - 1;
    }
    s_onnx_t o;
    int64_t in[2] = {1, 4};
    s_onnx_init(&o, "x", 2, in);
    KilnOnnx__TensorProto **t = o.inits;
    t[0] = s_data(s_tensor("b1", 2, 3, 4, 0, 0), b1, 12, true);
    t[1] = s_data(s_tensor("c1", 1, 3, 0, 0, 0), c1, 3, false);
    t[2] = s_data(s_tensor("b2", 2, 3, 5, 0, 0), b2, 15, false);
    t[3] = s_data(s_tensor("c2", 0, 0, 0, 0, 0), &c2, 1, false);
    t[4] = s_data(s_tensor("b3", 2, 5, 2, 0, 0), b3, 10, true);
    t[5] = s_data(s_tensor("ca", 2, 1, 2, 0, 0), ca, 2, false);
    t[6] = s_data(s_tensor("dv", 1, 2, 0, 0, 0), dv, 2, true);
    o.g.n_initializer = 7;
    s_onnx_node(&o, "Gemm", s_strs("x", "b1", "c1"), 3, "d", s_int("transB", 1),
                s_float("alpha", 2), s_float("beta", 0.5f));
    s_onnx_node(&o, "Gemm", s_strs("d", "b2", "c2"), 3, "e", 0, 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("e", "b3", 0), 2, "f", 0, 0, 0);
    s_onnx_node(&o, "Add", s_strs("ca", "f", 0), 2, "fa", 0, 0, 0);
    s_onnx_node(&o, "Div", s_strs("fa", "dv", 0), 2, "fd", 0, 0, 0);
    const char *path = s_onnx_write(&o, "fd");
    s_text_has(path, "d = dense x O=3 bias=1\n"
                     "e = matmul d N=5 bias=1\n"
                     "f = matmul e N=2 bias=1\n"
                     "output f\n");
    kl_model_params_t ps = s_params(path);
    assert_int_equal(ps.n, 6);
    double wd[12], bd[3], we[15], be[5], wf[10], bf[2];
    for (int i = 0; i < 15; i++) {
        if (i < 12)
            wd[i] = 2.0 * b1[i];
        if (i < 3)
            bd[i] = 0.5 * c1[i];
        we[i] = b2[i];
        if (i < 5)
            be[i] = c2;
        if (i < 10)
            wf[i] = b3[i] / dv[i % 2];
        if (i < 2)
            bf[i] = ca[i] / dv[i];
    }
    s_param_is(&ps, "d.weight", wd, 12);
    s_param_is(&ps, "d.bias", bd, 3);
    s_param_is(&ps, "e.weight", we, 15);
    s_param_is(&ps, "e.bias", be, 5);
    s_param_is(&ps, "f.weight", wf, 10);
    s_param_is(&ps, "f.bias", bf, 2);
    assert_string_equal(ps.p[4].name, "f.weight");
    kl_model_params_free(&ps);
    unlink(path);
    s_arena_free();
}

/* Loads x -> Conv "c" with weight w (2x2x1x1, set up by the caller) and
 * returns kl_model_params' code; *ps holds the parameters on success. */
static int s_conv_params(KilnOnnx__TensorProto *w, kl_model_params_t *ps,
                         char *err)
{
    s_onnx_t o;
    int64_t in[4] = {1, 2, 2, 2};
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = w;
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "c", 0, 0, 0);
    const char *path = s_onnx_write(&o, "c");
    int rc = kl_model_params(path, ps, err);
    /* The text needs only the shapes. */
    s_text_has(path, "c = conv2d x K=2 R=1 S=1");
    unlink(path);
    return rc;
}

/* Weights in an external data file beside the model (at an offset), and
 * the initializers that cannot be read: a missing file, not float32,
 * truncated raw data. Built-ins and graph files have no parameters. */
static void test_onnx_params_data(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], bin[256], loc[64], emsg[320];
    static const float file[7] = {9, 9, 9, 1.5f, -2, 0.25f, 8};
    snprintf(loc, sizeof(loc), "kiln_onnx_test_%d.bin", (int)getpid());
    assert_non_null(kl_test_tmppath(bin, sizeof(bin), loc));
    FILE *f = fopen(bin, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(file, 4, 7, f), 7);
    fclose(f);
    KilnOnnx__TensorProto *w = s_tensor("w", 4, 2, 2, 1, 1);
    w->has_data_location = 1;
    w->data_location = 1;
    w->n_external_data = 3;
    w->external_data = s_mem(3 * sizeof(*w->external_data));
    static const char *kv[3][2] = {
        {"location", NULL}, {"offset", "12"}, {"length", "16"}};
    for (int i = 0; i < 3; i++) {
        KilnOnnx__StringStringEntryProto *e = s_mem(sizeof(*e));
        kiln_onnx__string_string_entry_proto__init(e);
        e->key = (char *)kv[i][0];
        e->value = i ? (char *)kv[i][1] : loc;
        w->external_data[i] = e;
    }
    kl_model_params_t ps;
    if (s_conv_params(w, &ps, err))
        fail_msg("%s", err);
    static const double want[4] = {1.5, -2, 0.25, 8};
    s_param_is(&ps, "c.weight", want, 4);
    assert_null(kl_model_params_find(&ps, "c.bias"));
    kl_model_params_free(&ps);
    unlink(bin);
    assert_int_equal(s_conv_params(w, &ps, err), KL_ERR_INVAL);
    snprintf(emsg, sizeof(emsg),
             "initializer 'w': cannot open its external data file '%s", bin);
    assert_non_null(strstr(err, emsg));
    assert_int_equal(ps.n, 0);
    s_arena_free();

    static const float four[4] = {1, 2, 3, 4};
    w = s_data(s_tensor("w", 4, 2, 2, 1, 1), four, 4, true);
    w->data_type = 10; /* float16 */
    assert_int_equal(s_conv_params(w, &ps, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "initializer 'w': not float32 (ONNX type 10)"));
    w->data_type = 1;
    w->raw_data.len = 12;
    assert_int_equal(s_conv_params(w, &ps, err), KL_ERR_INVAL);
    assert_non_null(
        strstr(err, "initializer 'w': raw_data of 12 bytes for 4 floats"));
    w->raw_data.len = 16;
    if (s_conv_params(w, &ps, err))
        fail_msg("%s", err);
    static const double w4[4] = {1, 2, 3, 4};
    s_param_is(&ps, "c.weight", w4, 4);
    kl_model_params_free(&ps);
    s_arena_free();

    /* Built-ins and graph files: the caller's parameters. */
    if (kl_model_params("resnet18", &ps, err))
        fail_msg("%s", err);
    assert_int_equal(ps.n, 0);
    assert_null(ps.p);
    snprintf(loc, sizeof(loc), "kiln_onnx_test_%d.graph", (int)getpid());
    assert_non_null(kl_test_tmppath(bin, sizeof(bin), loc));
    f = fopen(bin, "w");
    fputs("input x 1x4\nd = dense x O=2\n", f);
    fclose(f);
    if (kl_model_params(bin, &ps, err))
        fail_msg("%s", err);
    assert_int_equal(ps.n, 0);
    unlink(bin);
    assert_int_equal(kl_model_params("no_such_model", &ps, err),
                     KL_ERR_NOTFOUND);
}

/* Folding needs the layer's output to itself: a BatchNormalization after
 * a conv whose output a Relu also reads is refused. A Mul of two computed
 * values has no layer to fold into: it is a mul layer, and the conv keeps
 * its weight. */
static void test_onnx_fold_refused(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    for (int i = 0; i < 2; i++) {
        s_onnx_t o;
        int64_t in[4] = {1, 3, 4, 4};
        s_onnx_init(&o, "x", 4, in);
        o.inits[0] = s_tensor("w", 4, 3, 3, 1, 1);
        o.inits[1] = s_vec("g", 3, NULL, false);
        o.inits[2] = s_vec("be", 3, NULL, false);
        o.inits[3] = s_vec("mu", 3, NULL, false);
        o.inits[4] = s_vec("var", 3, NULL, false);
        o.g.n_initializer = 5;
        s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "c", 0, 0, 0);
        s_onnx_node(&o, "Relu", s_strs("c", 0, 0), 1, "r", 0, 0, 0);
        if (i == 0)
            s_onnx_node(&o, "BatchNormalization", s_bn_in("c"), 5, "bn", 0, 0,
                        0);
        else
            s_onnx_node(&o, "Mul", s_strs("r", "c", 0), 2, "bn", 0, 0, 0);
        const char *path = s_onnx_write(&o, "bn");
        if (i == 0) {
            assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
            const char *want = "node 'bn' (BatchNormalization): folds into "
                               "the layer before it only when nothing else "
                               "reads";
            if (!strstr(err, want))
                fail_msg("error '%s' does not say '%s'", err, want);
        } else {
            s_text_has(path, "r = relu c\nbn = mul r c\n");
            if (kl_model_load(path, &m, err))
                fail_msg("%s", err);
            kl_model_destroy(&m);
        }
        unlink(path);
        s_arena_free();
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onnx_params_conv_bn),
        cmocka_unit_test(test_onnx_params_gemm),
        cmocka_unit_test(test_onnx_params_data),
        cmocka_unit_test(test_onnx_fold_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
