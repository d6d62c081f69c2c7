/* onnx_fx.h - what the ONNX import tests share (onnx_test.c,
 * onnx_params_test.c, onnx_tf_test.c): ONNX models built with the
 * importer's schema (onnx_min.proto) in an arena, written to a model file
 * under $TMPDIR, and checks of the tasks and parameters they load as. */
#ifndef ONNX_FX_H
#define ONNX_FX_H

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
#include "onnx_min.pb-c.h"

static inline kl_model_t *s_parse(const char *text)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_parse(text, "test", &m, err))
        fail_msg("kl_model_parse: %s", err);
    return m;
}

static void *s_arena[512];
static int s_narena;

static inline void *s_mem(size_t n)
{
    assert_true(s_narena < 512);
    return s_arena[s_narena++] = calloc(1, n);
}

static inline void s_arena_free(void)
{
    while (s_narena > 0)
        free(s_arena[--s_narena]);
}

static inline char **s_strs(const char *a, const char *b, const char *c3)
{
    char **v = s_mem(3 * sizeof(char *));
    v[0] = (char *)a;
    v[1] = (char *)b;
    v[2] = (char *)c3;
    return v;
}

static inline KilnOnnx__AttributeProto *
s_ints(const char *name, int n, int64_t a, int64_t b, int64_t c3, int64_t d)
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

static inline KilnOnnx__AttributeProto *s_int(const char *name, int64_t v)
{
    KilnOnnx__AttributeProto *at = s_mem(sizeof(*at));
    kiln_onnx__attribute_proto__init(at);
    at->name = (char *)name;
    at->has_i = 1;
    at->i = v;
    return at;
}

/* A string attribute, as ONNX stores it: bytes without a terminator. */
static inline KilnOnnx__AttributeProto *s_str(const char *name, const char *v)
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

static inline KilnOnnx__TensorProto *
s_tensor(const char *name, int n, int64_t a, int64_t b, int64_t c3, int64_t d)
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
static inline KilnOnnx__AttributeProto *s_float(const char *name, float v)
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
static inline KilnOnnx__TensorProto *s_scalar(const char *name, float v,
                                              bool raw)
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
static inline KilnOnnx__TensorProto *s_vec(const char *name, int n,
                                           const float *v, bool raw)
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
static inline KilnOnnx__TensorProto *s_data(KilnOnnx__TensorProto *t,
                                            const float *v, int n, bool raw)
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
static inline char **s_bn_in(const char *x)
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

static inline void s_onnx_init(s_onnx_t *o, const char *in, int n,
                               const int64_t *d)
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

static inline void s_onnx_node(s_onnx_t *o, const char *op, char **in, int nin,
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
static inline const char *s_onnx_write(s_onnx_t *o, const char *out)
{
    static char path[256];
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
    char name[64];
    snprintf(name, sizeof(name), "kiln_onnx_test_%d.onnx", (int)getpid());
    assert_non_null(kl_test_tmppath(path, sizeof(path), name));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
    return path;
}

static inline void s_same_tasks(const kl_model_t *a, const kl_model_t *b)
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

/* The parameters of the model at path (which must load). */
static inline kl_model_params_t s_params(const char *path)
{
    char err[KL_ERRMSG_LEN];
    kl_model_params_t ps;
    if (kl_model_params(path, &ps, err))
        fail_msg("kl_model_params: %s", err);
    return ps;
}

/* Parameter name has n floats equal (to 1e-5 relative) to want. */
static inline void s_param_is(const kl_model_params_t *ps, const char *name,
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

static inline void s_text_has(const char *path, const char *want)
{
    char err[KL_ERRMSG_LEN], *text = NULL;
    if (kl_model_text(path, &text, err))
        fail_msg("%s", err);
    if (!strstr(text, want))
        fail_msg("the graph text does not have '%s':\n%s", want, text);
    free(text);
}

#endif
