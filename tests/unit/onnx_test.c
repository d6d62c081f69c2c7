/* Unit tests of coordinator/models' ONNX import (kl_model_onnx.c): models
 * built here with the importer's schema (onnx_min.proto), written to a
 * file and loaded like a user's: the tasks they give, their fusion, and an
 * error that names each node the importer does not take. */
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
#include "onnx_min.pb-c.h"

static kl_model_t *s_parse(const char *text)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_parse(text, "test", &m, err))
        fail_msg("kl_model_parse: %s", err);
    return m;
}

static void *s_arena[512];
static int s_narena;

static void *s_mem(size_t n)
{
    assert_true(s_narena < 512);
    return s_arena[s_narena++] = calloc(1, n);
}

static void s_arena_free(void)
{
    while (s_narena > 0)
        free(s_arena[--s_narena]);
}

static char **s_strs(const char *a, const char *b, const char *c3)
{
    char **v = s_mem(3 * sizeof(char *));
    v[0] = (char *)a;
    v[1] = (char *)b;
    v[2] = (char *)c3;
    return v;
}

static KilnOnnx__AttributeProto *s_ints(const char *name, int n, int64_t a,
                                        int64_t b, int64_t c3, int64_t d)
{
    KilnOnnx__AttributeProto *at = s_mem(sizeof(*at));
    kiln_onnx__attribute_proto__init(at);
    at->name = (char *)name;
    at->n_ints = (size_t)n;
    at->ints = s_mem(4 * sizeof(int64_t));
    int64_t v[4] = {a, b, c3, d};
    memcpy(at->ints, v, sizeof(v));
    return at;
}

static KilnOnnx__AttributeProto *s_int(const char *name, int64_t v)
{
    KilnOnnx__AttributeProto *at = s_mem(sizeof(*at));
    kiln_onnx__attribute_proto__init(at);
    at->name = (char *)name;
    at->has_i = 1;
    at->i = v;
    return at;
}

/* A string attribute, as ONNX stores it: bytes without a terminator. */
static KilnOnnx__AttributeProto *s_str(const char *name, const char *v)
{
    KilnOnnx__AttributeProto *at = s_mem(sizeof(*at));
    kiln_onnx__attribute_proto__init(at);
    at->name = (char *)name;
    at->has_s = 1;
    at->s.len = strlen(v);
    at->s.data = s_mem(at->s.len + 1);
    memcpy(at->s.data, v, at->s.len);
    return at;
}

static KilnOnnx__TensorProto *s_tensor(const char *name, int n, int64_t a,
                                       int64_t b, int64_t c3, int64_t d)
{
    KilnOnnx__TensorProto *t = s_mem(sizeof(*t));
    kiln_onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->n_dims = (size_t)n;
    t->dims = s_mem(4 * sizeof(int64_t));
    int64_t v[4] = {a, b, c3, d};
    memcpy(t->dims, v, sizeof(v));
    t->has_data_type = 1;
    t->data_type = 1;
    return t;
}

/* A float attribute (Clip's min and max before opset 11). */
static KilnOnnx__AttributeProto *s_float(const char *name, float v)
{
    KilnOnnx__AttributeProto *at = s_mem(sizeof(*at));
    kiln_onnx__attribute_proto__init(at);
    at->name = (char *)name;
    at->has_f = 1;
    at->f = v;
    return at;
}

/* A scalar float initializer: in float_data, or in raw_data (little
 * endian) as PyTorch writes it. */
static KilnOnnx__TensorProto *s_scalar(const char *name, float v, bool raw)
{
    KilnOnnx__TensorProto *t = s_tensor(name, 0, 0, 0, 0, 0);
    if (raw) {
        t->has_raw_data = 1;
        t->raw_data.len = 4;
        t->raw_data.data = s_mem(4);
        memcpy(t->raw_data.data, &v, 4);
    } else {
        t->n_float_data = 1;
        t->float_data = s_mem(sizeof(float));
        t->float_data[0] = v;
    }
    return t;
}

/* A 1-D float initializer of n values (v, or 1, 2, ... when NULL): in
 * float_data, or in raw_data when raw. */
static KilnOnnx__TensorProto *s_vec(const char *name, int n, const float *v,
                                    bool raw)
{
    KilnOnnx__TensorProto *t = s_tensor(name, 1, n, 0, 0, 0);
    float *d = s_mem((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++)
        d[i] = v ? v[i] : (float)(i + 1);
    if (raw) {
        t->has_raw_data = 1;
        t->raw_data.len = (size_t)n * 4;
        t->raw_data.data = (uint8_t *)d;
    } else {
        t->n_float_data = (size_t)n;
        t->float_data = d;
    }
    return t;
}

/* Gives initializer t the n floats v: float_data, or raw_data when raw. */
static KilnOnnx__TensorProto *s_data(KilnOnnx__TensorProto *t, const float *v,
                                     int n, bool raw)
{
    float *d = s_mem((size_t)n * sizeof(float));
    memcpy(d, v, (size_t)n * sizeof(float));
    if (raw) {
        t->has_raw_data = 1;
        t->raw_data.len = (size_t)n * 4;
        t->raw_data.data = (uint8_t *)d;
    } else {
        t->n_float_data = (size_t)n;
        t->float_data = d;
    }
    return t;
}

/* BatchNormalization's inputs: x, then g, be, mu, var. */
static char **s_bn_in(const char *x)
{
    char **v = s_mem(5 * sizeof(char *));
    const char *n[5] = {x, "g", "be", "mu", "var"};
    memcpy(v, n, sizeof(n));
    return v;
}

typedef struct {
    KilnOnnx__GraphProto g;
    KilnOnnx__NodeProto *nodes[32];
    KilnOnnx__TensorProto *inits[32];
    KilnOnnx__ValueInfoProto *io[4];
} s_onnx_t;

static void s_onnx_init(s_onnx_t *o, const char *in, int n, const int64_t *d)
{
    memset(o, 0, sizeof(*o));
    kiln_onnx__graph_proto__init(&o->g);
    o->g.node = o->nodes;
    o->g.initializer = o->inits;
    KilnOnnx__ValueInfoProto *vi = s_mem(sizeof(*vi));
    kiln_onnx__value_info_proto__init(vi);
    vi->name = (char *)in;
    vi->type = s_mem(sizeof(*vi->type));
    kiln_onnx__type_proto__init(vi->type);
    vi->type->value_case = KILN_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    vi->type->tensor_type = s_mem(sizeof(*vi->type->tensor_type));
    kiln_onnx__type_proto__tensor__init(vi->type->tensor_type);
    vi->type->tensor_type->has_elem_type = 1;
    vi->type->tensor_type->elem_type = 1;
    KilnOnnx__TensorShapeProto *sh = s_mem(sizeof(*sh));
    kiln_onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)n;
    sh->dim = s_mem((size_t)n * sizeof(*sh->dim));
    for (int i = 0; i < n; i++) {
        sh->dim[i] = s_mem(sizeof(**sh->dim));
        kiln_onnx__tensor_shape_proto__dimension__init(sh->dim[i]);
        if (d[i] > 0) {
            sh->dim[i]->value_case =
                KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            sh->dim[i]->dim_value = d[i];
        } else { /* a symbolic batch dimension */
            sh->dim[i]->value_case =
                KILN_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            sh->dim[i]->dim_param = "batch";
        }
    }
    vi->type->tensor_type->shape = sh;
    o->io[0] = vi;
    o->g.input = o->io;
    o->g.n_input = 1;
}

static void s_onnx_node(s_onnx_t *o, const char *op, char **in, int nin,
                        const char *out, KilnOnnx__AttributeProto *a0,
                        KilnOnnx__AttributeProto *a1,
                        KilnOnnx__AttributeProto *a2)
{
    KilnOnnx__NodeProto *nd = s_mem(sizeof(*nd));
    kiln_onnx__node_proto__init(nd);
    nd->op_type = (char *)op;
    nd->name = (char *)out;
    nd->input = in;
    nd->n_input = (size_t)nin;
    nd->output = s_strs(out, NULL, NULL);
    nd->n_output = 1;
    nd->attribute = s_mem(3 * sizeof(*nd->attribute));
    KilnOnnx__AttributeProto *a[3] = {a0, a1, a2};
    for (int i = 0; i < 3; i++)
        if (a[i])
            nd->attribute[nd->n_attribute++] = a[i];
    o->nodes[o->g.n_node++] = nd;
}

/* Packs the graph as a model file; returns its path (static). */
static const char *s_onnx_write(s_onnx_t *o, const char *out)
{
    static char path[64];
    KilnOnnx__ValueInfoProto *vo = s_mem(sizeof(*vo));
    kiln_onnx__value_info_proto__init(vo);
    vo->name = (char *)out;
    o->io[1] = vo;
    o->g.output = &o->io[1];
    o->g.n_output = 1;
    KilnOnnx__ModelProto m = KILN_ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = 1;
    m.ir_version = 7;
    m.graph = &o->g;
    size_t n = kiln_onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = malloc(n);
    kiln_onnx__model_proto__pack(&m, buf);
    snprintf(path, sizeof(path), "/tmp/kiln_onnx_test_%d.onnx", (int)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
    return path;
}

static void s_same_tasks(const kl_model_t *a, const kl_model_t *b)
{
    assert_int_equal(kl_model_ntasks(a), kl_model_ntasks(b));
    for (int i = 0; i < kl_model_ntasks(a); i++) {
        const kl_model_task_t *x = kl_model_task(a, i),
                              *y = kl_model_task(b, i);
        if (memcmp(x->w->key, y->w->key, 16) || x->weight != y->weight)
            fail_msg("task %d: %s x%d vs %s x%d", i, x->spec, x->weight,
                     y->spec, y->weight);
    }
    assert_true(kl_model_total_flop(a) == kl_model_total_flop(b));
}

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
    s_onnx_node(&o, "Erf", s_strs("p", 0, 0), 1, "/gelu/Erf", 0, 0, 0);
    path = s_onnx_write(&o, "/gelu/Erf");
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "1 node kiln cannot import: '/gelu/Erf' "
                                "(Erf); kiln imports Conv, Gemm"));
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

/* The parameters of the model at path (which must load). */
static kl_model_params_t s_params(const char *path)
{
    char err[KL_ERRMSG_LEN];
    kl_model_params_t ps;
    if (kl_model_params(path, &ps, err))
        fail_msg("kl_model_params: %s", err);
    return ps;
}

/* Parameter name has n floats equal (to 1e-5 relative) to want. */
static void s_param_is(const kl_model_params_t *ps, const char *name,
                       const double *want, int n)
{
    const kl_model_param_t *p = kl_model_params_find(ps, name);
    if (!p)
        fail_msg("no parameter '%s'", name);
    assert_int_equal(p->numel, n);
    for (int i = 0; i < n; i++)
        if (fabs(p->data[i] - want[i]) > 1e-5 * (1 + fabs(want[i])))
            fail_msg("%s[%d] is %.9g, want %.9g", name, i, (double)p->data[i],
                     want[i]);
}

static void s_text_has(const char *path, const char *want)
{
    char err[KL_ERRMSG_LEN], *text = NULL;
    if (kl_model_text(path, &text, err))
        fail_msg("%s", err);
    if (!strstr(text, want))
        fail_msg("the graph text does not have '%s':\n%s", want, text);
    free(text);
}

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
    char err[KL_ERRMSG_LEN], bin[96], loc[64];
    static const float file[7] = {9, 9, 9, 1.5f, -2, 0.25f, 8};
    snprintf(loc, sizeof(loc), "kiln_onnx_test_%d.bin", (int)getpid());
    snprintf(bin, sizeof(bin), "/tmp/%s", loc);
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
    assert_non_null(strstr(err, "initializer 'w': cannot open its external "
                                "data file '/tmp/kiln_onnx_test_"));
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
    snprintf(bin, sizeof(bin), "/tmp/kiln_onnx_test_%d.graph", (int)getpid());
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

/* Folding needs the layer's output to itself; a Mul of two computed
 * values has no layer. */
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
        assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
        unlink(path);
        const char *want =
            i == 0 ? "node 'bn' (BatchNormalization): folds into the layer "
                     "before it only when nothing else reads"
                   : "1 node kiln cannot import: 'bn' (Mul)";
        if (!strstr(err, want))
            fail_msg("error '%s' does not say '%s'", err, want);
        s_arena_free();
    }
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
                tail == 1 ? "1 node kiln cannot import: 'conv' (Conv: its "
                            "output is not read by one QuantizeLinear alone)"
                          : "1 node kiln cannot import: 'conv' (Conv: an int8 "
                            "weight on a float input";
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
    s_onnx_node(&o, "Erf", s_strs("x", 0, 0), 1, "/a", 0, 0, 0);
    s_onnx_node(&o, "Relu", s_strs("/a", 0, 0), 1, "/a2", 0, 0, 0);
    s_onnx_node(&o, "Pow", s_strs("x", "two", 0), 2, "/b", 0, 0, 0);
    s_onnx_node(&o, "ReduceMean", s_strs("x", 0, 0), 1, "/c",
                s_ints("axes", 1, 1, 0, 0, 0), 0, 0);
    s_onnx_node(&o, "Add", s_strs("/a2", "/c", 0), 2, "/d", 0, 0, 0);
    const char *path = s_onnx_write(&o, "/d");
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    unlink(path);
    const char *want = "kiln_onnx_test_";
    assert_non_null(strstr(err, want));
    want = ".onnx: 3 nodes kiln cannot import: '/a' (Erf), '/b' (Pow), "
           "'/c' (ReduceMean); kiln imports Conv, Gemm, MatMul";
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
    s_arena_free();
}

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
        assert_string_equal(kl_model_untuned(m), "layer_norm x1, gelu x1");
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
    assert_string_equal(kl_model_task(m, 0)->spec, "matmul M=4 N=8 K=8 bias=1");
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
    assert_string_equal(kl_model_task(m, 0)->spec, "matmul M=6 N=4 K=8 bias=1");
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
        cmocka_unit_test(test_onnx_cnn),
        cmocka_unit_test(test_onnx_attention_and_errors),
        cmocka_unit_test(test_onnx_auto_pad),
        cmocka_unit_test(test_onnx_clip),
        cmocka_unit_test(test_onnx_params_conv_bn),
        cmocka_unit_test(test_onnx_params_gemm),
        cmocka_unit_test(test_onnx_params_data),
        cmocka_unit_test(test_onnx_fold_refused),
        cmocka_unit_test(test_onnx_unsupported_all),
        cmocka_unit_test(test_onnx_qdq),
        cmocka_unit_test(test_onnx_qdq_float_island),
        cmocka_unit_test(test_onnx_gelu_layer_norm),
        cmocka_unit_test(test_onnx_attention_split),
        cmocka_unit_test(test_graph_nd_matmul_layer_norm),
        cmocka_unit_test(test_onnx_layer_norm_parts),
        cmocka_unit_test(test_onnx_shape_arithmetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
