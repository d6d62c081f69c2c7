/* Unit tests of the ONNX QDQ import (kl_model_onnx_q.c) on the committed
 * model tests/data/onnx/small_cnn_int8.onnx (onnxruntime's quantize_static,
 * QDQ, per-channel s8 weights, u8 activations; tools/onnx_models.py
 * small-cnn-int8): the graph text's quantized layers, zero points and
 * scales; the parameters against the model's initializers; and the
 * imported graph evaluated layer by layer (q-ops with
 * kl_workload_eval_typed, the float layers here) against ONNX Runtime's
 * output for the committed input (y, and the u8 output of the third conv
 * element by element). */
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
#include "kl_export.h"
#include "kl_model.h"
#include "kl_model_int.h"
#include "kl_npy.h"
#include "kl_util.h"
#include "onnx_min.pb-c.h"

#define S_DIR KL_TEST_DATA "/onnx/"
#define S_MODEL S_DIR "small_cnn_int8.onnx"

static KilnOnnx__ModelProto *s_onnx(void)
{
    FILE *f = fopen(S_MODEL, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    KilnOnnx__ModelProto *m = kiln_onnx__model_proto__unpack(NULL, n, buf);
    assert_non_null(m);
    return m;
}

static const KilnOnnx__TensorProto *s_init(const KilnOnnx__ModelProto *m,
                                           const char *name)
{
    for (size_t i = 0; i < m->graph->n_initializer; i++)
        if (!strcmp(m->graph->initializer[i]->name, name))
            return m->graph->initializer[i];
    fail_msg("no initializer '%s'", name);
    return NULL;
}

/* Value i of an initializer as a double (f32, u8, s8, s32; raw_data,
 * float_data or int32_data). */
static double s_at(const KilnOnnx__TensorProto *t, size_t i)
{
    const uint8_t *d = t->raw_data.data;
    if (!t->has_raw_data && t->data_type == 1) {
        assert_true(i < t->n_float_data);
        return t->float_data[i];
    }
    if (!t->has_raw_data) {
        assert_true(i < t->n_int32_data);
        return t->int32_data[i];
    }
    switch (t->data_type) {
    case 1: {
        float v;
        memcpy(&v, d + 4 * i, 4);
        return v;
    }
    case 2:
        return d[i];
    case 3:
        return (int8_t)d[i];
    case 6: {
        int32_t v;
        memcpy(&v, d + 4 * i, 4);
        return v;
    }
    }
    fail_msg("initializer '%s': type %d", t->name, (int)t->data_type);
    return 0;
}

static char *s_text(void)
{
    char err[KL_ERRMSG_LEN], *text = NULL;
    if (kl_model_text(S_MODEL, &text, err))
        fail_msg("%s", err);
    return text;
}

/* The graph text: one q-op per quantized Conv / Gemm with ORT's zero
 * points, a quantize layer at the input, and the float stretch (global
 * average pool) between a dequantize and a quantize. */
static void test_qdq_text(void **state)
{
    (void)state;
    char *text = s_text();
    static const char *const want[] = {
        "x_QuantizeLinear_Output = quantize x scale=0.0326072164 zp=125\n",
        "relu1 = qconv2d x_QuantizeLinear_Output K=16 R=3 S=3 stride=1 pad=1 "
        "za=125 zo=0 scale=channel bias=1\n",
        "relu2 = qdepthwise_conv2d relu1 R=3 S=3 stride=1 pad=1 za=0 zo=0 "
        "scale=channel bias=1\n",
        "conv3 = qconv2d relu2 K=32 R=1 S=1 stride=1 pad=0 za=0 zo=123 "
        "scale=channel bias=1\n",
        "conv3_DequantizeLinear_Output = dequantize conv3 scale=0.0595295168 "
        "zp=123\n",
        "gap = global_avg_pool conv3_DequantizeLinear_Output\n",
        "y_QuantizeLinear_Input = qdense flat_QuantizeLinear_Output O=10 "
        "za=133 zo=86 scale=channel bias=1\n",
        "y = dequantize y_QuantizeLinear_Input scale=0.00388954021 zp=86\n",
        "output y\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i]))
            fail_msg("graph text\n%s\nlacks '%s'", text, want[i]);
    free(text);
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(S_MODEL, &m, err), KL_OK);
    assert_int_equal(kl_model_ntasks(m), 5);
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "qconv2d N=1 C=3 H=32 W=32 K=16 R=3 S=3 stride=1 "
                        "pad=1 bias=1 za=125 zo=0 scale=channel");
    assert_string_equal(kl_model_task(m, 4)->spec,
                        "qdense N=1 I=32 O=10 bias=1 za=133 zo=86 "
                        "scale=channel");
    assert_string_equal(kl_model_untuned(m), "quantize x3, dequantize x3");
    kl_model_destroy(&m);
}

/* Each q-op's weight (s8) and bias (s32) are the model's initializers, and
 * its scale is s_in * s_w[o] / s_out in f32. */
static void test_qdq_params(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_model_params_t ps;
    assert_int_equal(kl_model_params(S_MODEL, &ps, err), KL_OK);
    KilnOnnx__ModelProto *m = s_onnx();
    static const struct {
        const char *layer, *onnx, *in, *out;
    } L[] = {{"relu1", "conv1", "x", "relu1"},
             {"relu2", "dw2", "relu1", "relu2"},
             {"conv3", "conv3", "relu2", "conv3"},
             {"y_QuantizeLinear_Input", "fc", "gap", "y"}};
    assert_int_equal(ps.n, 12);
    for (size_t l = 0; l < 4; l++) {
        char name[96], oname[96];
        snprintf(name, sizeof name, "%s.weight", L[l].layer);
        snprintf(oname, sizeof oname, "%s.w_quantized", L[l].onnx);
        const kl_model_param_t *p = kl_model_params_find(&ps, name);
        const KilnOnnx__TensorProto *t = s_init(m, oname);
        assert_non_null(p);
        assert_int_equal(p->dtype, KL_DT_S8);
        int64_t tn = 1;
        for (size_t d = 0; d < t->n_dims; d++)
            tn *= t->dims[d];
        assert_int_equal(p->numel, tn);
        for (int64_t i = 0; i < p->numel; i++)
            assert_int_equal(((int8_t *)p->idata)[i], (int)s_at(t, (size_t)i));
        snprintf(name, sizeof name, "%s.bias", L[l].layer);
        snprintf(oname, sizeof oname, "%s.b_quantized", L[l].onnx);
        p = kl_model_params_find(&ps, name);
        t = s_init(m, oname);
        assert_non_null(p);
        assert_int_equal(p->dtype, KL_DT_S32);
        int64_t nout = p->numel;
        for (int64_t i = 0; i < nout; i++)
            assert_int_equal(((int32_t *)p->idata)[i],
                             (int32_t)s_at(t, (size_t)i));
        snprintf(name, sizeof name, "%s.scale", L[l].layer);
        p = kl_model_params_find(&ps, name);
        assert_non_null(p);
        assert_int_equal(p->dtype, KL_DT_F32);
        assert_int_equal(p->numel, nout);
        snprintf(oname, sizeof oname, "%s.w_scale", L[l].onnx);
        const KilnOnnx__TensorProto *ws = s_init(m, oname);
        snprintf(oname, sizeof oname, "%s_scale", L[l].in);
        float si = (float)s_at(s_init(m, oname), 0);
        snprintf(oname, sizeof oname, "%s_scale", L[l].out);
        float so = (float)s_at(s_init(m, oname), 0);
        for (int64_t k = 0; k < nout; k++) {
            float want = si * (float)s_at(ws, (size_t)k);
            want = want / so;
            assert_true(p->data[k] == want);
        }
    }
    kiln_onnx__model_proto__free_unpacked(m, NULL);
    kl_model_params_free(&ps);
}

/* The imported graph run layer by layer: quantize and dequantize as ONNX
 * defines them (x / s rounded half to even + zp, saturated; (q - zp) * s),
 * q-ops by kl_workload_eval_typed with the imported parameters, float
 * layers in f32. conv3's u8 output (32768 values) is within one step of
 * ONNX Runtime's (CPU EP) on >= 99.9% of them, and y within one output
 * step on all 10. */
static void test_qdq_eval(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], *text = NULL;
    kl_model_params_t ps;
    if (kl_model_text_params(S_MODEL, &text, &ps, err))
        fail_msg("%s", err);
    kl_mgraph_t g;
    if (kl_mgraph_parse(text, "small_cnn_int8", &g, err))
        fail_msg("%s", err);
    kl_npy_t x, ort;
    int64_t xs[4] = {1, 3, 32, 32}, ys[2] = {1, 10};
    if (kl_npy_read(S_DIR "small_cnn_int8.input.npy", xs, 4, &x, err) ||
        kl_npy_read(S_DIR "small_cnn_int8.ort.npy", ys, 2, &ort, err))
        fail_msg("%s", err);
    void **buf = kl_xcalloc((size_t)g.n, sizeof(void *));
    int last = -1;
    double step = 0;
    for (int i = 0; i < g.n; i++) {
        kl_mnode_t *nd = &g.nodes[i];
        int64_t n = 1;
        for (int d = 0; d < nd->ndim; d++)
            n *= nd->shape[d];
        void *in = nd->nin ? buf[nd->in[0]] : NULL;
        const kl_mnode_t *xn = nd->nin ? &g.nodes[nd->in[0]] : NULL;
        float *f = kl_xcalloc((size_t)n, sizeof(float));
        uint8_t *u = kl_xcalloc((size_t)n, 1);
        float s = (float)nd->scale;
        switch (nd->op) {
        case KL_MOP_INPUT:
            memcpy(f, x.data, (size_t)n * sizeof(float));
            buf[i] = f;
            break;
        case KL_MOP_QUANTIZE:
            assert_int_equal(nd->qout, KL_DT_U8);
            for (int64_t k = 0; k < n; k++) {
                float v = nearbyintf(((float *)in)[k] / s) + (float)nd->zo;
                u[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
            buf[i] = u;
            break;
        case KL_MOP_DEQUANTIZE:
            for (int64_t k = 0; k < n; k++)
                f[k] = (float)((int)((uint8_t *)in)[k] - (int)nd->zo) * s;
            buf[i] = f;
            last = i;
            step = s;
            break;
        case KL_MOP_GLOBAL_AVG_POOL: {
            int64_t hw = xn->shape[2] * xn->shape[3];
            for (int64_t k = 0; k < n; k++) {
                float acc = 0;
                for (int64_t j = 0; j < hw; j++)
                    acc += ((float *)in)[k * hw + j];
                f[k] = acc / (float)hw;
            }
            buf[i] = f;
            break;
        }
        case KL_MOP_FLATTEN:
            buf[i] = in; /* a view: the same data */
            break;
        case KL_MOP_QCONV2D:
        case KL_MOP_QDEPTHWISE:
        case KL_MOP_QDENSE: {
            char *spec = kl_mgraph_spec(&g, nd);
            kl_workload_t *w = NULL;
            if (kl_workload_from_op(spec, &w, err))
                fail_msg("%s: %s", spec, err);
            char pn[3][96];
            const char *what[3] = {"weight", "bias", "scale"};
            void *args[5];
            int na = 0;
            args[na++] = in;
            for (int k = 0; k < 3; k++) {
                snprintf(pn[k], sizeof pn[k], "%s.%s", nd->name, what[k]);
                const kl_model_param_t *p = kl_model_params_find(&ps, pn[k]);
                assert_non_null(p);
                args[na++] = p->dtype == KL_DT_F32 ? (void *)p->data : p->idata;
            }
            args[na++] = u;
            kl_workload_eval_typed(w, args);
            kl_workload_free(&w);
            free(spec);
            buf[i] = u;
            break;
        }
        default:
            fail_msg("layer '%s': op %s is not in this model", nd->name,
                     kl_mop_name(nd->op));
        }
        if (buf[i] != f)
            free(f);
        if (buf[i] != u)
            free(u);
    }
    /* conv3's u8 output, element by element */
    kl_npy_t c3;
    int64_t cs[4] = {1, 32, 32, 32};
    if (kl_npy_read(S_DIR "small_cnn_int8.conv3.ort.npy", cs, 4, &c3, err))
        fail_msg("%s", err);
    int ic3 = -1, same = 0, near = 0;
    for (int i = 0; i < g.n; i++)
        ic3 = strcmp(g.nodes[i].name, "conv3") ? ic3 : i;
    assert_true(ic3 >= 0 && g.nodes[ic3].op == KL_MOP_QCONV2D);
    for (int64_t k = 0; k < c3.numel; k++) {
        int d = abs((int)((uint8_t *)buf[ic3])[k] - (int)c3.data[k]);
        same += d == 0;
        near += d <= 1;
    }
    printf("small_cnn_int8 conv3: %d of %lld u8 outputs equal ONNX "
           "Runtime's, %d within one step\n",
           same, (long long)c3.numel, near);
    assert_true(near >= 0.999 * (double)c3.numel);
    free(c3.data);
    assert_true(last >= 0 && g.nout == 1 && g.outputs[0] == last);
    const float *y = buf[last];
    int within = 0;
    double maxd = 0;
    for (int k = 0; k < 10; k++) {
        double d = fabs((double)y[k] - (double)ort.data[k]);
        maxd = d > maxd ? d : maxd;
        within += d <= step * 1.001;
    }
    printf("small_cnn_int8: %d of 10 outputs within one step (%.6g) of "
           "ONNX Runtime's, max |diff| %.6g\n",
           within, step, maxd);
    assert_int_equal(within, 10);
    for (int i = 0; i < g.n; i++)
        if (g.nodes[i].op != KL_MOP_FLATTEN)
            free(buf[i]);
    free(buf);
    free(x.data);
    free(ort.data);
    kl_mgraph_free(&g);
    kl_model_params_free(&ps);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qdq_text),
        cmocka_unit_test(test_qdq_params),
        cmocka_unit_test(test_qdq_eval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
