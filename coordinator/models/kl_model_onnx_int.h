/* kl_model_onnx_int.h - private to the ONNX importer (kl_model_onnx*.c):
 * the import context, its values and layer lines, and the functions the
 * importer's files share (s_ names like the file-local ones; nothing
 * outside coordinator/models includes this). */
#ifndef KL_MODEL_ONNX_INT_H
#define KL_MODEL_ONNX_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_model_int.h"
#include "kl_util.h"
#include "onnx_min.pb-c.h"

typedef KilnOnnx__NodeProto s_node_t;
typedef KilnOnnx__TensorProto s_tensor_t;

typedef struct {
    char *onnx; /* ONNX value name */
    char *kiln; /* its name in the graph text */
    int line;   /* layer that computes it (aliases: their source's), -1 for
                   inputs */
    bool owns;  /* kiln is this entry's (a graph input's name) */
    /* Every value from the layer's own output to this one was read by one
     * node only: a constant may fold into the layer through it. */
    bool sole;
    bool bad;    /* computed by a node kiln cannot import */
    kl_dtype dt; /* f32, or u8 / s8 (a quantize layer's or q-op's output) */
    /* A DequantizeLinear's output: the integer tensor (its kiln name,
     * borrowed), its type, scale and zero point it dequantizes; virt when
     * no dequantize layer was written (every reader folds it). */
    const char *qkiln;
    kl_dtype qdt;
    float qs;
    int64_t qzp;
    bool virt;
} s_val_t;

typedef struct {
    char *name;
    const char *op;
    kl_buf_t args; /* inputs and attributes after the op */
    bool bias;
    char *in0; /* ONNX name of the first input (views walk back) */
    /* The layer's parameters: a weight laid out as the named op reads it
     * (w, wn floats; colw: [K,N], the output channel is the column) and a
     * bias of nout floats (NULL: zeros). Data only when params are
     * wanted. */
    bool params;
    bool colw;
    bool dead; /* replaced (a packed projection split by its Gathers) */
    char *out; /* ONNX name of its output */
    int64_t nout;
    float *w;
    int64_t wn;
    float *b;
    /* A q-op (QDQ folded): s8 weight w8 (wn values), s32 bias b32 (nout),
     * the input and weight scales, and once its QuantizeLinear is folded
     * (pending until then) the requant scale rq (nout values, or one when
     * the weight is per tensor). */
    bool q, pending;
    float s_in;
    float *s_w;
    int64_t ns_w;
    int8_t *w8;
    int32_t *b32;
    float *rq;
    int64_t nrq;
    /* The QuantizeLinear node that folds into it (QDQ), and the Relu or
     * Clip between them (bounds clo, chi; has_lo / has_hi). */
    int qnode;
    int act; /* 0 none, 1 Relu, 2 Clip */
    bool has_lo, has_hi;
    float clo, chi;
} s_line_t;

/* A constant that is not an initializer: a Constant node's value, or a
 * view (Identity, Cast to float, Reshape, Squeeze, Unsqueeze) of a
 * constant; own is the derived tensor (its dims are owned, its data the
 * source's). */
typedef struct {
    char *name;
    const s_tensor_t *t;
    s_tensor_t *own;
    void *data; /* an evaluated constant's values (owned) */
} s_const_t;

typedef struct {
    const KilnOnnx__GraphProto *g;
    const char *src;
    char *err;
    bool want; /* read and fold the parameters */
    s_val_t *vals;
    int nvals;
    s_line_t *lines;
    int nlines;
    s_const_t *consts;
    int nconsts;
    bool *skip; /* nodes consumed by a pattern (gelu) */
    kl_buf_t head;
    const char *why; /* why the node just refused (S_UNSUP) was */
} s_ctx_t;

/* ONNX element types. */
#define S_T_F32 1
#define S_T_U8 2
#define S_T_S8 3
#define S_T_S32 6

/* Where a q-op's numbers come from: its input (kiln name, scale, zero
 * point), the int8 weight, its scale and zero point (names for errors),
 * the weight scale's axis (-1: the output channel's), and the int32 bias
 * with (QDQ) or without (QLinearConv) a scale to check; acc: the s32
 * accumulator is the output (MatMulInteger, ConvInteger: no weight scale,
 * no requant). */
typedef struct {
    const char *xk;
    float xs;
    int64_t xzp;
    const s_tensor_t *w, *ts, *tz, *tb, *tbs, *tbz;
    const char *wn, *tsn, *tzn, *tbn, *tbsn, *tbzn;
    int64_t axis;
    bool acc;
} s_qsrc_t;

/* Returned by a node handler for a node kiln has no layer for; the caller
 * lists them all. */
#define S_UNSUP (-1000)

/* First character of the names of values kiln makes itself (no ONNX name
 * starts with it). */
#define S_OWN '\x01'

/* kl_model_onnx.c: constants, values, lines, attributes; nodes, text */
const s_tensor_t *s_init(const s_ctx_t *c, const char *name);
void s_add_const(s_ctx_t *c, const char *name, const s_tensor_t *t,
                 s_tensor_t *own);
int s_readers(const s_ctx_t *c, const char *name);
int s_reader(const s_ctx_t *c, const char *name);
int64_t s_numel(const s_tensor_t *t);
int s_terr(s_ctx_t *c, const char *name, const char *what);
int s_floats(s_ctx_t *c, const s_tensor_t *t, const char *name, float **out,
             int64_t *n);
int s_ints_of(const s_tensor_t *t, int64_t *d, int max);
s_val_t *s_val(const s_ctx_t *c, const char *onnx);
s_val_t *s_add_val(s_ctx_t *c, const char *onnx, char *kiln, int line,
                   bool owns);
void s_alias(s_ctx_t *c, const char *onnx, const s_val_t *v);
int s_fail(s_ctx_t *c, const s_node_t *nd, const char *what);
const char *s_in(s_ctx_t *c, const s_node_t *nd, size_t k, int *rc);
s_line_t *s_line_for(s_ctx_t *c, const char *out, const char *in0,
                     const char *op);
s_line_t *s_line(s_ctx_t *c, const s_node_t *nd, const char *op);
const KilnOnnx__AttributeProto *s_attr(const s_node_t *nd, const char *name);
int64_t s_aint(const s_node_t *nd, const char *name, int64_t def);
int s_window(s_ctx_t *c, const s_node_t *nd, int64_t *stride, int64_t *pad,
             int64_t *dil);
int s_bias_in(s_ctx_t *c, const s_node_t *nd, size_t k, s_line_t *l,
              float scale);
int s_weight_in(s_ctx_t *c, const s_node_t *nd, const s_tensor_t *w,
                s_line_t *l, float scale);
bool s_is(const s_node_t *nd, const char *op);
void s_lines_text(const s_ctx_t *c, kl_buf_t *b, bool dead);

/* kl_model_onnx_layers.c: layers, and constants folded into them */
int s_conv(s_ctx_t *c, const s_node_t *nd);
int s_pool(s_ctx_t *c, const s_node_t *nd, bool is_max);
float s_afloat(const s_node_t *nd, const char *name, float def);
int s_gemm(s_ctx_t *c, const s_node_t *nd, bool gemm);
void s_need_bias(s_ctx_t *c, s_line_t *l);
int s_fold_const(s_ctx_t *c, const s_node_t *nd, size_t k, char op);
int s_fold_bn(s_ctx_t *c, const s_node_t *nd);
int s_reshape(s_ctx_t *c, const s_node_t *nd);
int s_simple(s_ctx_t *c, const s_node_t *nd, const char *op);
int s_clip_bound(s_ctx_t *c, const s_node_t *nd, size_t k, const char *what,
                 bool *has, float *v);
int s_clip(s_ctx_t *c, const s_node_t *nd);

/* kl_model_onnx_tf.c: GELU, layer norm, packed attention patterns */
const char *s_other(const s_node_t *nd, const char *one);
int s_gelu_erf(s_ctx_t *c, const s_node_t *nd, bool *matched);
int s_axes(s_ctx_t *c, const s_node_t *nd, int64_t *ax);
int s_reduce_mean(s_ctx_t *c, const s_node_t *nd);
int s_layer_norm(s_ctx_t *c, const s_node_t *nd);
int s_gather_block(s_ctx_t *c, const s_node_t *nd, bool *matched);

/* kl_model_onnx_const.c: constants computed at import */
int s_const_view(s_ctx_t *c, const s_node_t *nd, bool *done);
bool s_shape(const s_ctx_t *c, const char *kiln, int64_t *d, int *n);
int s_nums(s_ctx_t *c, const char *name, double *v, int *type, int64_t *dims,
           int *nd);
int s_const_eval(s_ctx_t *c, const s_node_t *nd, bool *done);
int s_squeeze(s_ctx_t *c, const s_node_t *nd);

/* kl_model_onnx_q.c: quantized nodes */
const s_node_t *s_dq_const(const s_ctx_t *c, const char *name);
int s_dequantize(s_ctx_t *c, const s_node_t *nd);
int s_quantize(s_ctx_t *c, const s_node_t *nd);
int s_qlayer(s_ctx_t *c, const s_node_t *nd);
int s_qlinear(s_ctx_t *c, const s_node_t *nd);
int s_ivals(s_ctx_t *c, const s_tensor_t *t, const char *name, int64_t **out,
            int64_t *n);
int s_qparams_at(s_ctx_t *c, const s_node_t *nd, size_t ks, size_t kz,
                 float *scale, int64_t *zp, kl_dtype *dt);
int s_qmake(s_ctx_t *c, const s_node_t *nd, const s_qsrc_t *q, s_line_t **out);
void s_qout(s_line_t *l, float so, int64_t zo, kl_dtype dt);
const s_tensor_t *s_opt_init(const s_ctx_t *c, const s_node_t *nd, size_t k);
const char *s_opt_name(const s_node_t *nd, size_t k);

/* kl_model_onnx_qop.c: the operator form's nodes beyond QLinearConv and
 * QLinearMatMul (com.microsoft QGemm, QLinearGlobalAveragePool), the
 * integer ops (MatMulInteger, ConvInteger) and their scaling back */
int s_qgemm(s_ctx_t *c, const s_node_t *nd);
int s_qgap(s_ctx_t *c, const s_node_t *nd);
int s_int_op(s_ctx_t *c, const s_node_t *nd);
int s_int_cast(s_ctx_t *c, const s_node_t *nd, bool *done);
int s_dynamic(s_ctx_t *c, const s_node_t *nd);

/* kl_model_onnx_qfp.c: quantized nodes run in float between dequantize
 * and quantize layers (com.microsoft QLinearAdd, QLinearAveragePool;
 * MaxPool of a u8 / s8 tensor); *done false for other nodes */
int s_qfloat(s_ctx_t *c, const s_node_t *nd, bool *done);
int s_qmaxpool(s_ctx_t *c, const s_node_t *nd, bool *done);

#endif
