/* Unit test of the ONNX QDQ import (kl_model_onnx.c) where a dequantized
 * activation has two kinds of readers, as in ResNet-18 quantized by
 * onnxruntime's quantize_static (after the max pool and after every
 * residual add): a Conv that folds it into a qconv2d and an Add that needs
 * the f32 tensor (a dequantize layer). The model is built here with the
 * generated protobuf code:
 *
 *   xq = QuantizeLinear(x, 0.05, 128)        x f32 [1, 4, 4, 4]
 *   xd = DequantizeLinear(xq, 0.05, 128)     read by c and by a
 *   c  = Conv(xd, DQ(w s8 [4,4,1,1]), DQ(b s32 [4]))
 *   cq = QuantizeLinear(c, 0.1, 100); cd = DequantizeLinear(cq, ...)
 *   a  = Add(cd, xd)
 *   y  = DequantizeLinear(QuantizeLinear(a, 0.2, 90), 0.2, 90)
 *
 * It must import as qconv2d (za 128) beside a dequantize layer of xq that
 * the add reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_model.h"
#include "kl_util.h"
#include "onnx_min.pb-c.h"

/* ONNX element types. */
enum { S_F32 = 1, S_U8 = 2, S_S8 = 3, S_S32 = 6 };

typedef struct {
    KilnOnnx__GraphProto g;
    KilnOnnx__NodeProto *nodes[16];
    KilnOnnx__TensorProto *inits[16];
    KilnOnnx__ValueInfoProto *io[2];
    void *mem[128];
    int nmem;
} s_m_t;

static void *s_mem(s_m_t *m, size_t n)
{
    assert_true(m->nmem < 128);
    return m->mem[m->nmem++] = kl_xcalloc(1, n);
}

/* An initializer of n values of type dt (raw little-endian), dims d. */
static void s_init(s_m_t *m, const char *name, int dt, int nd, const int64_t *d,
                   const void *v, size_t bytes)
{
    KilnOnnx__TensorProto *t = s_mem(m, sizeof *t);
    kiln_onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->n_dims = (size_t)nd;
    t->dims = s_mem(m, 4 * sizeof(int64_t));
    if (nd)
        memcpy(t->dims, d, (size_t)nd * sizeof(int64_t));
    t->has_data_type = 1;
    t->data_type = dt;
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = s_mem(m, bytes);
    memcpy(t->raw_data.data, v, bytes);
    m->inits[m->g.n_initializer++] = t;
}

static void s_node(s_m_t *m, const char *op, const char *out, const char *a,
                   const char *b, const char *c)
{
    KilnOnnx__NodeProto *nd = s_mem(m, sizeof *nd);
    kiln_onnx__node_proto__init(nd);
    nd->op_type = (char *)op;
    nd->name = (char *)out;
    nd->input = s_mem(m, 3 * sizeof(char *));
    const char *in[3] = {a, b, c};
    for (int i = 0; i < 3 && in[i]; i++)
        nd->input[nd->n_input++] = (char *)in[i];
    nd->output = s_mem(m, sizeof(char *));
    nd->output[0] = (char *)out;
    nd->n_output = 1;
    m->nodes[m->g.n_node++] = nd;
}

static KilnOnnx__ValueInfoProto *s_vi(s_m_t *m, const char *name, bool shape)
{
    KilnOnnx__ValueInfoProto *vi = s_mem(m, sizeof *vi);
    kiln_onnx__value_info_proto__init(vi);
    vi->name = (char *)name;
    if (!shape)
        return vi;
    vi->type = s_mem(m, sizeof *vi->type);
    kiln_onnx__type_proto__init(vi->type);
    vi->type->value_case = KILN_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    vi->type->tensor_type = s_mem(m, sizeof *vi->type->tensor_type);
    kiln_onnx__type_proto__tensor__init(vi->type->tensor_type);
    vi->type->tensor_type->has_elem_type = 1;
    vi->type->tensor_type->elem_type = S_F32;
    KilnOnnx__TensorShapeProto *sh = s_mem(m, sizeof *sh);
    kiln_onnx__tensor_shape_proto__init(sh);
    sh->n_dim = 4;
    sh->dim = s_mem(m, 4 * sizeof(*sh->dim));
    const int64_t d[4] = {1, 4, 4, 4};
    for (int i = 0; i < 4; i++) {
        sh->dim[i] = s_mem(m, sizeof(**sh->dim));
        kiln_onnx__tensor_shape_proto__dimension__init(sh->dim[i]);
        sh->dim[i]->value_case =
            KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        sh->dim[i]->dim_value = d[i];
    }
    vi->type->tensor_type->shape = sh;
    return vi;
}

/* A scalar scale and u8 zero point named P.s and P.z. */
static void s_qp(s_m_t *m, const char *s, const char *z, float scale,
                 uint8_t zp)
{
    s_init(m, s, S_F32, 0, NULL, &scale, 4);
    s_init(m, z, S_U8, 0, NULL, &zp, 1);
}

static void test_dequantized_read_by_conv_and_add(void **state)
{
    (void)state;
    s_m_t m;
    memset(&m, 0, sizeof m);
    kiln_onnx__graph_proto__init(&m.g);
    m.g.node = m.nodes;
    m.g.initializer = m.inits;
    s_qp(&m, "x.s", "x.z", 0.05f, 128);
    s_qp(&m, "c.s", "c.z", 0.1f, 100);
    s_qp(&m, "a.s", "a.z", 0.2f, 90);
    int8_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (int8_t)(i * 7 % 23 - 11);
    const int64_t wd[4] = {4, 4, 1, 1}, bd[1] = {4};
    s_init(&m, "w", S_S8, 4, wd, w, sizeof w);
    float ws = 0.02f, bs = 0.05f * 0.02f;
    int8_t wz = 0;
    int32_t bz = 0, b[4] = {10, -20, 30, -40};
    s_init(&m, "w.s", S_F32, 0, NULL, &ws, 4);
    s_init(&m, "w.z", S_S8, 0, NULL, &wz, 1);
    s_init(&m, "b", S_S32, 1, bd, b, sizeof b);
    s_init(&m, "b.s", S_F32, 0, NULL, &bs, 4);
    s_init(&m, "b.z", S_S32, 0, NULL, &bz, 4);
    s_node(&m, "QuantizeLinear", "xq", "x", "x.s", "x.z");
    s_node(&m, "DequantizeLinear", "xd", "xq", "x.s", "x.z");
    s_node(&m, "DequantizeLinear", "wd", "w", "w.s", "w.z");
    s_node(&m, "DequantizeLinear", "bd", "b", "b.s", "b.z");
    s_node(&m, "Conv", "c", "xd", "wd", "bd");
    s_node(&m, "QuantizeLinear", "cq", "c", "c.s", "c.z");
    s_node(&m, "DequantizeLinear", "cd", "cq", "c.s", "c.z");
    s_node(&m, "Add", "a", "cd", "xd", NULL);
    s_node(&m, "QuantizeLinear", "aq", "a", "a.s", "a.z");
    s_node(&m, "DequantizeLinear", "y", "aq", "a.s", "a.z");
    m.io[0] = s_vi(&m, "x", true);
    m.io[1] = s_vi(&m, "y", false);
    m.g.input = &m.io[0];
    m.g.n_input = 1;
    m.g.output = &m.io[1];
    m.g.n_output = 1;
    KilnOnnx__ModelProto mp = KILN_ONNX__MODEL_PROTO__INIT;
    mp.has_ir_version = 1;
    mp.ir_version = 8;
    mp.graph = &m.g;
    size_t n = kiln_onnx__model_proto__get_packed_size(&mp);
    uint8_t *buf = kl_xmalloc(n);
    kiln_onnx__model_proto__pack(&mp, buf);

    char err[KL_ERRMSG_LEN], *text = NULL;
    int rc = kl_model_onnx_to_text(buf, n, "shared.onnx", &text, err);
    if (rc)
        fail_msg("import: %s", err);
    printf("%s", text);
    /* The conv folds xq's dequantize (za 128, out zo 100); the add reads
     * a dequantize layer of xq. */
    const char *c = strstr(text, "c = qconv2d xq ");
    assert_non_null(c);
    assert_non_null(strstr(c, "za=128"));
    assert_non_null(strstr(c, "zo=100"));
    assert_non_null(strstr(text, "xd = dequantize xq scale=0.0500000007 "
                                 "zp=128"));
    assert_non_null(strstr(text, " = add "));
    kl_model_t *km = NULL;
    rc = kl_model_parse(text, "shared.onnx", &km, err);
    if (rc)
        fail_msg("parse: %s", err);
    kl_model_destroy(&km);
    free(text);
    free(buf);
    for (int i = 0; i < m.nmem; i++)
        free(m.mem[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequantized_read_by_conv_and_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
