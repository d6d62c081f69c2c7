/* Unit tests of the ONNX import of a quantized residual CNN
 * (kl_model_onnx_qfp.c; tests/data/onnx/README.md, tools/onnx_models.py
 * residual-cnn): Conv+Relu, MaxPool, Conv+Relu, Conv, residual Add, Relu,
 * AveragePool, Conv 1x1, GlobalAveragePool, Flatten, Gemm, quantized by
 * onnxruntime's quantize_static
 * - in operator form (residual_cnn_qop.onnx): QLinearConv, MaxPool on
 *   u8, com.microsoft QLinearAdd, QLinearAveragePool,
 *   QLinearGlobalAveragePool and QGemm;
 * - in QDQ form (residual_cnn_qdq.onnx): DequantizeLinear -> Add ->
 *   QuantizeLinear, the skip's DequantizeLinear read by a Conv and the Add.
 * The imported graphs run layer by layer (every layer with a workload by
 * kl_workload_eval_typed, the q-ops with the imported parameters; quantize,
 * dequantize and flatten as ONNX defines them) and are compared with ONNX
 * Runtime's outputs for the committed input: the u8 output of the residual
 * add (4096 values) and y, in quantization steps. */
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
#include "kl_model.h"
#include "kl_model_int.h"
#include "kl_npy.h"
#include "kl_util.h"
#include "onnx_min.pb-c.h"

#include "onnx_qfx.h"

#define S_NADD (16 * 16 * 16)

/* How text's run compares with ONNX Runtime's for model base: the add's
 * u8 output (layer addq) equal (*same) and within 1 step (*near) of
 * base.add.ort.npy, and y's largest difference in steps of y's scale. */
static void s_compare(const char *text, const kl_model_params_t *ps,
                      const char *base, const char *addq, int *same, int *near,
                      double *ysteps)
{
    char name[128];
    kl_npy_t x = s_npy("residual_cnn.input.npy", 3 * 32 * 32);
    snprintf(name, sizeof name, "%s.add.ort.npy", base);
    kl_npy_t a = s_npy(name, S_NADD);
    snprintf(name, sizeof name, "%s.ort.npy", base);
    kl_npy_t y = s_npy(name, 10);
    kl_mgraph_t g;
    void **buf = s_run(text, ps, x.data, &g);
    const uint8_t *aq = buf[s_node(&g, addq)];
    *same = *near = 0;
    for (int k = 0; k < S_NADD; k++) {
        int d = abs((int)aq[k] - (int)a.data[k]);
        *same += d == 0;
        *near += d <= 1;
    }
    int iy = s_node(&g, "y");
    const kl_mnode_t *yn = &g.nodes[iy];
    assert_int_equal(yn->op, KL_MOP_DEQUANTIZE);
    const float *yk = buf[iy];
    *ysteps = 0;
    for (int k = 0; k < 10; k++)
        *ysteps = fmax(*ysteps, fabs((double)yk[k] - y.data[k]) / yn->scale);
    s_free(buf, &g);
    free(x.data);
    free(a.data);
    free(y.data);
}

/* Within 1 step on at least 99.9% of the add's values; y within 1 step. */
static void s_check(const char *text, const kl_model_params_t *ps,
                    const char *base, const char *addq)
{
    int same, near;
    double ys;
    s_compare(text, ps, base, addq, &same, &near, &ys);
    printf("%s: add output %d of %d u8 values equal ONNX Runtime's, %d "
           "within 1 step; y within %.3g steps\n",
           base, same, S_NADD, near, ys);
    assert_true(near * 1000 >= S_NADD * 999);
    assert_true(ys <= 1.0 + 1e-6);
}

/* Operator form: MaxPool on u8 and QLinearAveragePool are max_pool2d /
 * avg_pool2d between a dequantize and a quantize with their scales,
 * QLinearAdd dequantizes both inputs, adds and quantizes. */
static void test_qop_text(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "residual_cnn_qop.onnx", &ps);
    static const char *const want[] = {
        "conv1_quantized_dq = dequantize conv1_quantized scale=0.0309799872 "
        "zp=0\n"
        "pool1_quantized_f32 = max_pool2d conv1_quantized_dq R=2 S=2 "
        "stride=2 pad=0\n"
        "pool1_quantized = quantize pool1_quantized_f32 scale=0.0309799872 "
        "zp=0\n"
        "conv2a_quantized = qconv2d pool1_quantized K=16 ",
        "conv2b_quantized_dq = dequantize conv2b_quantized "
        "scale=0.0666913763 zp=129\n"
        "pool1_quantized_dq = dequantize pool1_quantized scale=0.0309799872 "
        "zp=0\n"
        "add2_quantized_f32 = add conv2b_quantized_dq pool1_quantized_dq\n"
        "add2_quantized = quantize add2_quantized_f32 scale=0.0419246927 "
        "zp=0\n",
        "add2_quantized_dq = dequantize add2_quantized scale=0.0419246927 "
        "zp=0\n"
        "apool_quantized_f32 = avg_pool2d add2_quantized_dq R=2 S=2 "
        "stride=2 pad=0\n"
        "apool_quantized = quantize apool_quantized_f32 scale=0.0279507134 "
        "zp=0\n"
        "conv3_quantized = qconv2d apool_quantized K=32 R=1 S=1 ",
        "y = dequantize y_quantized scale=0.0280359872 zp=122\n",
    };
    s_has_lines(text, want, sizeof want / sizeof want[0]);
    kl_model_params_free(&ps);
    free(text);
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(S_DIR "residual_cnn_qop.onnx", &m, err),
                     KL_OK);
    /* 4 qconv2d, avg_pool2d, the pool's qdepthwise_conv2d, qdense; the
     * max pool and the add on codes are integer shortcuts of the export
     * (kl_mgraph_qfuse_plan): no task, not tuned */
    assert_int_equal(kl_model_ntasks(m), 7);
    for (int t = 0; t < kl_model_ntasks(m); t++) {
        const char *nm = kl_model_task(m, t)->w->name;
        if (!strncmp(nm, "add_", 4) || !strncmp(nm, "max_pool2d", 10))
            fail_msg("task %d (%s) is an integer shortcut's", t, nm);
    }
    kl_model_destroy(&m);
    /* without the shortcuts they are tasks again */
    setenv("KILN_EXPORT_NO_QFUSE", "1", 1);
    int rc = kl_model_load(S_DIR "residual_cnn_qop.onnx", &m, err);
    unsetenv("KILN_EXPORT_NO_QFUSE");
    assert_int_equal(rc, KL_OK);
    assert_int_equal(kl_model_ntasks(m), 9);
    kl_model_destroy(&m);
}

static void test_qop_eval(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "residual_cnn_qop.onnx", &ps);
    s_check(text, &ps, "residual_cnn_qop", "add2_quantized");
    kl_model_params_free(&ps);
    free(text);
}

/* QDQ: the skip's DequantizeLinear is a dequantize layer (the Add reads
 * it) and folds into conv2a as well. */
static void test_qdq_eval(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "residual_cnn_qdq.onnx", &ps);
    static const char *const want[] = {
        "pool1_DequantizeLinear_Output = dequantize "
        "pool1_QuantizeLinear_Output scale=0.0309799872 zp=0\n"
        "relu2a = qconv2d pool1_QuantizeLinear_Output K=16 ",
        "relu2 = add conv2b_DequantizeLinear_Output "
        "pool1_DequantizeLinear_Output\n"
        "relu2_QuantizeLinear_Output = quantize relu2 scale=0.0419246927 "
        "zp=0\n",
    };
    s_has_lines(text, want, sizeof want / sizeof want[0]);
    s_check(text, &ps, "residual_cnn_qdq", "relu2_QuantizeLinear_Output");
    kl_model_params_free(&ps);
    free(text);
}

/* The comparison sees a wrong add: the add's output zero point 0 -> 2,
 * or the skip dequantized with the conv's scale. */
static void test_qop_broken(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "residual_cnn_qop.onnx", &ps);
    static const char *const from[] = {
        "add2_quantized_f32 scale=0.0419246927 zp=0",
        "pool1_quantized_dq = dequantize pool1_quantized scale=0.0309799872"};
    static const char *const to[] = {
        "add2_quantized_f32 scale=0.0419246927 zp=2",
        "pool1_quantized_dq = dequantize pool1_quantized scale=0.0666913763"};
    for (int i = 0; i < 2; i++) {
        size_t off = 0, nf = strlen(from[i]);
        while (text[off] && strncmp(text + off, from[i], nf))
            off++;
        assert_true(text[off]);
        kl_buf_t b = {0};
        kl_buf_printf(&b, "%.*s%s%s", (int)off, text, to[i], text + off + nf);
        int same, near;
        double ys;
        s_compare(b.data, &ps, "residual_cnn_qop", "add2_quantized", &same,
                  &near, &ys);
        printf("broken %d: %d of %d within 1 step, y within %.3g steps\n", i,
               near, S_NADD, ys);
        assert_true(near * 1000 < S_NADD * 999);
        kl_buf_free(&b);
    }
    kl_model_params_free(&ps);
    free(text);
}

/* residual_cnn_qop.onnx with node 'node''s op_type set to op, imported
 * from memory. */
static int s_as(const char *node, const char *op, char *err)
{
    FILE *f = fopen(S_DIR "residual_cnn_qop.onnx", "rb");
    assert_non_null(f);
    static uint8_t in[1 << 15], out[1 << 15];
    size_t n = fread(in, 1, sizeof in, f);
    fclose(f);
    assert_true(n < sizeof in);
    KilnOnnx__ModelProto *m = kiln_onnx__model_proto__unpack(NULL, n, in);
    assert_non_null(m);
    char *keep = NULL, opbuf[64];
    KilnOnnx__NodeProto *nd = NULL;
    for (size_t i = 0; i < m->graph->n_node; i++)
        if (!strcmp(m->graph->node[i]->name, node))
            nd = m->graph->node[i];
    assert_non_null(nd);
    keep = nd->op_type;
    snprintf(opbuf, sizeof opbuf, "%s", op);
    nd->op_type = opbuf;
    size_t len = kiln_onnx__model_proto__get_packed_size(m);
    assert_true(len <= sizeof out);
    kiln_onnx__model_proto__pack(m, out);
    nd->op_type = keep;
    kiln_onnx__model_proto__free_unpacked(m, NULL);
    char *t = NULL;
    int rc = kl_model_onnx_import(out, len, "changed.onnx", &t, NULL, err);
    free(t);
    return rc;
}

/* The quantized ops kiln has no layer for are listed with the reason. */
static void test_qop_refused(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(s_as("add2_quant", "QLinearAdd", err), KL_OK);
    static const char *const ops[][2] = {
        {"QLinearMul", "QLinearMul (1 node: 'add2_quant'; kiln's graph has "
                       "no elementwise product of two tensors)"},
        {"QLinearSoftmax", "QLinearSoftmax (1 node: 'add2_quant'; a "
                           "com.microsoft operator kiln "
                           "has no layer for)"},
    };
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s_as("add2_quant", ops[i][0], err), KL_ERR_INVAL);
        if (!strstr(err, "ONNX import: 1 op type is not supported (1 "
                         "node): ") ||
            !strstr(err, ops[i][1]))
            fail_msg("error '%s'", err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qop_text),    cmocka_unit_test(test_qop_eval),
        cmocka_unit_test(test_qdq_eval),    cmocka_unit_test(test_qop_broken),
        cmocka_unit_test(test_qop_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
