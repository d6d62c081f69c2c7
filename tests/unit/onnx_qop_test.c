/* Unit tests of the ONNX import of quantized nodes in operator form
 * (kl_model_onnx_q.c, kl_model_onnx_qop.c) on committed models
 * (tools/onnx_models.py; tests/data/onnx/README.md):
 * - small_cnn_qop.onnx: onnxruntime's quantize_static, QuantFormat.QOperator
 *   (QLinearConv, com.microsoft QLinearGlobalAveragePool and QGemm, Flatten
 *   on u8, QuantizeLinear / DequantizeLinear at the ends);
 * - int_ops.onnx: ConvInteger and MatMulInteger by hand, each s32 result
 *   scaled by Cast and Mul by a constant;
 * - qlinear_matmul.onnx: QLinearMatMul, per-column weight scale;
 * - int_ops_wzp.onnx, int_ops_dynamic.onnx: refused.
 * The imported graphs are run layer by layer (q-ops by
 * kl_workload_eval_typed with the imported parameters; quantize,
 * dequantize and relu as ONNX defines them) and compared with ONNX
 * Runtime's outputs for the committed inputs: the integer tensors and the
 * outputs are expected bit-equal (tolerance 0). */
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

/* The QOperator model: one q-op per QLinearConv, the global average pool
 * as a whole-image qdepthwise_conv2d with weights 1, the QGemm a qdense;
 * quantize and dequantize only at the ends. */
static void test_qop_text(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "small_cnn_qop.onnx", &ps);
    static const char *const want[] = {
        "x_quantized = quantize x scale=0.0326072164 zp=125\n",
        "conv1_quantized = qconv2d x_quantized K=16 R=3 S=3 stride=1 pad=1 "
        "za=125 zo=0 scale=channel bias=1\n",
        "dw2_quantized = qdepthwise_conv2d conv1_quantized R=3 S=3 stride=1 "
        "pad=1 za=0 zo=0 scale=channel bias=1\n",
        "conv3_quantized = qconv2d dw2_quantized K=32 R=1 S=1 stride=1 pad=0 "
        "za=0 zo=123 scale=channel bias=1\n",
        "gap_quantized = qdepthwise_conv2d conv3_quantized R=32 S=32 stride=1 "
        "pad=0 za=123 zo=133 scale=",
        "flat_quantized = flatten gap_quantized\n",
        "y_quantized = qdense flat_quantized O=10 za=133 zo=86 scale=channel "
        "bias=1\n",
        "y = dequantize y_quantized scale=0.00388954021 zp=86\n",
        "output y\n",
    };
    s_has_lines(text, want, sizeof want / sizeof want[0]);
    /* the pool's weights are 32 channels of 32*32 ones */
    const kl_model_param_t *p =
        kl_model_params_find(&ps, "gap_quantized.weight");
    assert_non_null(p);
    assert_int_equal(p->dtype, KL_DT_S8);
    assert_int_equal(p->numel, 32 * 32 * 32);
    for (int64_t i = 0; i < p->numel; i++)
        assert_int_equal(((int8_t *)p->idata)[i], 1);
    assert_null(kl_model_params_find(&ps, "gap_quantized.bias"));
    kl_model_params_free(&ps);
    free(text);
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(S_DIR "small_cnn_qop.onnx", &m, err), KL_OK);
    assert_int_equal(kl_model_ntasks(m), 5);
    assert_string_equal(kl_model_untuned(m), "quantize x1, dequantize x1");
    kl_model_destroy(&m);
}

/* Run: the pool's u8 output equals ONNX Runtime's on all 32 channels and
 * y on all 10 values, bit for bit. */
static void test_qop_eval(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "small_cnn_qop.onnx", &ps);
    kl_npy_t x = s_npy("small_cnn_qop.input.npy", 3 * 32 * 32);
    kl_npy_t gap = s_npy("small_cnn_qop.gap.ort.npy", 32);
    kl_npy_t y = s_npy("small_cnn_qop.ort.npy", 10);
    kl_mgraph_t g;
    void **buf = s_run(text, &ps, x.data, &g);
    const uint8_t *gq = buf[s_node(&g, "gap_quantized")];
    int same = 0;
    for (int k = 0; k < 32; k++)
        same += gq[k] == (uint8_t)gap.data[k];
    const float *yk = buf[s_node(&g, "y")];
    int ysame = 0;
    double maxd = 0;
    for (int k = 0; k < 10; k++) {
        ysame += yk[k] == y.data[k];
        maxd = fmax(maxd, fabs((double)yk[k] - y.data[k]));
    }
    printf("small_cnn_qop: pool %d of 32 u8 outputs and y %d of 10 equal "
           "ONNX Runtime's (max |diff| %.6g)\n",
           same, ysame, maxd);
    assert_int_equal(same, 32);
    assert_int_equal(ysame, 10);
    s_free(buf, &g);
    free(x.data);
    free(gap.data);
    free(y.data);
    kl_model_params_free(&ps);
    free(text);
}

/* ConvInteger and MatMulInteger: q-ops with out=s32, each Cast + Mul one
 * dequantize layer; ConvInteger's s32 output (512 values) and y equal
 * ONNX Runtime's bit for bit. */
static void test_int_ops(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "int_ops.onnx", &ps);
    static const char *const want[] = {
        "xq = quantize x scale=0.0399999991 zp=120\n",
        "acc1 = qconv2d xq K=8 R=3 S=3 stride=1 pad=1 za=120 out=s32\n",
        "c = dequantize acc1 scale=0.00039999999\n",
        "r = relu c\n",
        "rq = quantize r scale=0.0500000007 zp=0\n",
        "flat = flatten rq\n",
        "acc2 = qmatmul flat N=10 za=0 out=s32\n",
        "y = dequantize acc2 scale=9.99999975e-05\n",
        "output y\n",
    };
    s_has_lines(text, want, sizeof want / sizeof want[0]);
    assert_null(strstr(text, "cast"));
    kl_npy_t x = s_npy("int_ops.input.npy", 4 * 8 * 8);
    kl_npy_t acc = s_npy("int_ops.acc1.ort.npy", 8 * 8 * 8);
    kl_npy_t y = s_npy("int_ops.ort.npy", 10);
    kl_mgraph_t g;
    void **buf = s_run(text, &ps, x.data, &g);
    int ia = s_node(&g, "acc1");
    assert_int_equal(g.nodes[ia].dt, KL_DT_S32);
    const int32_t *a = buf[ia];
    int same = 0;
    for (int k = 0; k < 512; k++)
        same += a[k] == (int32_t)acc.data[k];
    const float *yk = buf[s_node(&g, "y")];
    int ysame = 0;
    for (int k = 0; k < 10; k++)
        ysame += yk[k] == y.data[k];
    printf("int_ops: ConvInteger %d of 512 s32 outputs and y %d of 10 equal "
           "ONNX Runtime's\n",
           same, ysame);
    assert_int_equal(same, 512);
    assert_int_equal(ysame, 10);
    s_free(buf, &g);
    free(x.data);
    free(acc.data);
    free(y.data);
    kl_model_params_free(&ps);
    free(text);
}

/* QLinearMatMul with a per-column weight scale: a qmatmul whose scale is
 * per channel; y equals ONNX Runtime's bit for bit. */
static void test_qlinear_matmul(void **state)
{
    (void)state;
    kl_model_params_t ps;
    char *text = s_import(S_DIR "qlinear_matmul.onnx", &ps);
    static const char *const want[] = {
        "xf = flatten x\n",
        "xq = quantize xf scale=0.0399999991 zp=120\n",
        "yq = qmatmul xq N=10 za=120 zo=128 scale=channel\n",
        "y = dequantize yq scale=0.300000012 zp=128\n",
    };
    s_has_lines(text, want, sizeof want / sizeof want[0]);
    const kl_model_param_t *p = kl_model_params_find(&ps, "yq.scale");
    assert_non_null(p);
    assert_int_equal(p->numel, 10);
    kl_npy_t x = s_npy("int_ops.input.npy", 4 * 8 * 8);
    kl_npy_t y = s_npy("qlinear_matmul.ort.npy", 10);
    kl_mgraph_t g;
    void **buf = s_run(text, &ps, x.data, &g);
    const float *yk = buf[s_node(&g, "y")];
    int ysame = 0;
    for (int k = 0; k < 10; k++)
        ysame += yk[k] == y.data[k];
    printf("qlinear_matmul: y %d of 10 equal ONNX Runtime's\n", ysame);
    assert_int_equal(ysame, 10);
    s_free(buf, &g);
    free(x.data);
    free(y.data);
    kl_model_params_free(&ps);
    free(text);
}

static void s_refused(const char *path, const char *want)
{
    char err[KL_ERRMSG_LEN], *text = NULL;
    assert_int_equal(kl_model_text(path, &text, err), KL_ERR_INVAL);
    assert_null(text);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

/* small_cnn_qop.onnx with a change: initializer iname's first value set
 * to v, or node 'node''s op_type replaced by op (NULL: kept) and its
 * domain by domain (NULL: kept); imported from memory, the text in *text
 * when text. */
static int s_changed(const char *iname, int v, const char *node, const char *op,
                     const char *domain, char **text, char *err)
{
    FILE *f = fopen(S_DIR "small_cnn_qop.onnx", "rb");
    assert_non_null(f);
    static uint8_t in[1 << 14], out[1 << 14];
    size_t n = fread(in, 1, sizeof in, f);
    fclose(f);
    KilnOnnx__ModelProto *m = kiln_onnx__model_proto__unpack(NULL, n, in);
    assert_non_null(m);
    bool hit = false;
    for (size_t i = 0; iname && i < m->graph->n_initializer; i++)
        if (!strcmp(m->graph->initializer[i]->name, iname)) {
            KilnOnnx__TensorProto *t = m->graph->initializer[i];
            if (t->has_raw_data)
                t->raw_data.data[0] = (uint8_t)v;
            else {
                assert_true(t->n_int32_data > 0);
                t->int32_data[0] = v;
            }
            hit = true;
        }
    char *keep = NULL, *keepd = NULL, opbuf[64], dbuf[64];
    KilnOnnx__NodeProto *changed = NULL;
    for (size_t i = 0; node && i < m->graph->n_node; i++)
        if (!strcmp(m->graph->node[i]->name, node)) {
            changed = m->graph->node[i];
            keep = changed->op_type;
            keepd = changed->domain;
            snprintf(opbuf, sizeof opbuf, "%s", op ? op : keep);
            snprintf(dbuf, sizeof dbuf, "%s",
                     domain  ? domain
                     : keepd ? keepd
                             : "");
            changed->op_type = opbuf;
            changed->domain = dbuf;
            hit = true;
        }
    assert_true(hit);
    size_t len = kiln_onnx__model_proto__get_packed_size(m);
    assert_true(len <= sizeof out);
    kiln_onnx__model_proto__pack(m, out);
    if (changed) {
        changed->op_type = keep;
        changed->domain = keepd;
    }
    kiln_onnx__model_proto__free_unpacked(m, NULL);
    char *t = NULL;
    int rc = kl_model_onnx_import(out, len, "changed.onnx", &t, NULL, err);
    if (text)
        *text = t;
    else
        free(t);
    return rc;
}

/* Refused, each with a message that names the node and the reason: a
 * weight zero point other than 0 (ConvInteger; QLinearConv), dynamic
 * quantization, a com.microsoft operator kiln has no layer for. */
static void test_qop_refused(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_refused(S_DIR "int_ops_wzp.onnx",
              "node 'conv' (ConvInteger): an int8 weight with a zero point "
              "other than 0 ('cw_zp' is 3 at 0; kiln's q-ops take symmetric "
              "weights)");
    s_refused(S_DIR "int_ops_dynamic.onnx",
              "node 'dql' (DynamicQuantizeLinear): dynamic quantization is "
              "not supported: DynamicQuantizeLinear computes the scale and "
              "zero point of 'xf' at run time");
    /* the unchanged model imports from memory too */
    assert_int_equal(
        s_changed("conv1.w_zero_point", 0, NULL, NULL, NULL, NULL, err), KL_OK);
    assert_int_equal(
        s_changed("conv1.w_zero_point", 5, NULL, NULL, NULL, NULL, err),
        KL_ERR_INVAL);
    if (!strstr(err, "changed.onnx: node '") ||
        !strstr(err, "(QLinearConv): an int8 weight with a zero point other "
                     "than 0 ('conv1.w_zero_point' is 5 at 0;"))
        fail_msg("error '%s'", err);
    /* QLinearSoftmax (com.microsoft) in place of the pool: listed by
     * name */
    assert_int_equal(
        s_changed(NULL, 0, "gap_quant", "QLinearSoftmax", NULL, NULL, err),
        KL_ERR_INVAL);
    if (!strstr(err, "1 op type is not supported (1 node)") ||
        !strstr(err, "QLinearSoftmax (1 node: 'gap_quant'; a com.microsoft "
                     "operator kiln has no layer for)"))
        fail_msg("error '%s'", err);
    /* QLinearAdd there has the pool's 5 inputs, not 8 */
    assert_int_equal(
        s_changed(NULL, 0, "gap_quant", "QLinearAdd", NULL, NULL, err),
        KL_ERR_INVAL);
    if (!strstr(err, "node 'gap_quant' (QLinearAdd): fewer than 8 inputs"))
        fail_msg("error '%s'", err);
}

/* The contrib (com.microsoft) QuantizeLinear and DequantizeLinear are
 * ONNX's; another domain is refused. */
static void test_qop_domains(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], *text = NULL;
    if (s_changed(NULL, 0, "x_QuantizeLinear", NULL, "com.microsoft", &text,
                  err) ||
        s_changed(NULL, 0, "y_DequantizeLinear", NULL, "com.microsoft", NULL,
                  err))
        fail_msg("%s", err);
    assert_non_null(
        strstr(text, "x_quantized = quantize x scale=0.0326072164 zp=125\n"));
    free(text);
    assert_int_equal(
        s_changed(NULL, 0, "x_QuantizeLinear", NULL, "com.example", NULL, err),
        KL_ERR_INVAL);
    if (!strstr(err, "node 'x_QuantizeLinear' (QuantizeLinear): an op "
                     "outside the default ONNX domain"))
        fail_msg("error '%s'", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qop_text),
        cmocka_unit_test(test_qop_eval),
        cmocka_unit_test(test_int_ops),
        cmocka_unit_test(test_qlinear_matmul),
        cmocka_unit_test(test_qop_refused),
        cmocka_unit_test(test_qop_domains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
