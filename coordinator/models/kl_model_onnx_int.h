/* kl_model_onnx_int.h - private to the ONNX importer (kl_model_onnx*.c):
 * the import context, its values and layer lines, the table of node
 * handlers each file contributes its rows to, and the helpers the
 * importer's files share (kl_onnx__ names; nothing outside
 * coordinator/models includes this).
 *
 * The files, calls going down only: kl_model_onnx_base.c (the context:
 * constants, values, lines, attributes) below everything; then
 * kl_model_onnx_fold.c (constants as doubles, Slice's arguments, const
 * operands) below the handler files (kl_model_onnx_const.c, _fold_ops.c,
 * _layers.c, _tf.c, _act.c, _q.c, _qop.c, _qfp.c, _ew.c), each owning
 * the rows of its ops (_act.c uses _tf.c's kl_onnx__other);
 * kl_model_onnx.c on top (the dispatcher over the tables, the node loop,
 * the text and parameters). */
#ifndef KL_MODEL_ONNX_INT_H
#define KL_MODEL_ONNX_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_model_int.h"
#include "kl_util.h"
#include "onnx_min.pb-c.h"

typedef KilnOnnx__NodeProto kl_onnx__node_t;
typedef KilnOnnx__TensorProto kl_onnx__tensor_t;

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
} kl_onnx__val_t;

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
} kl_onnx__line_t;

/* A constant that is not an initializer: a Constant node's value, or a
 * view (Identity, Cast to float, Reshape, Squeeze, Unsqueeze) of a
 * constant; own is the derived tensor (its dims are owned, its data the
 * source's). */
typedef struct {
    char *name;
    const kl_onnx__tensor_t *t;
    kl_onnx__tensor_t *own;
    void *data; /* an evaluated constant's values (owned) */
} kl_onnx__const_t;

typedef struct {
    const KilnOnnx__GraphProto *g;
    const char *src;
    char *err;
    bool want; /* read and fold the parameters */
    /* The inputs' dimensions as kl_model_opts_t overrides them (NULL:
     * as the model has them). */
    const kl_model_opts_t *dims;
    kl_onnx__val_t *vals;
    int nvals;
    kl_onnx__line_t *lines;
    int nlines;
    kl_onnx__const_t *consts;
    int nconsts;
    bool *skip; /* nodes consumed by a pattern (gelu) */
    /* For the last node of GELU's tanh form (kl_onnx__gelu_tanh_scan):
     * its input x (an ONNX name, borrowed); NULL for other nodes. */
    const char **gelu_x;
    kl_buf_t head;
    const char *why; /* why the node just refused (KL_ONNX__UNSUP) was */
} kl_onnx__ctx_t;

/* ONNX element types. */
#define KL_ONNX__T_F32 1
#define KL_ONNX__T_U8 2
#define KL_ONNX__T_S8 3
#define KL_ONNX__T_S32 6

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
    const kl_onnx__tensor_t *w, *ts, *tz, *tb, *tbs, *tbz;
    const char *wn, *tsn, *tzn, *tbn, *tbsn, *tbzn;
    int64_t axis;
    bool acc;
} kl_onnx__qsrc_t;

/* Returned by a node handler for a node kiln has no layer for (c->why
 * may say why); the caller lists them all. */
#define KL_ONNX__UNSUP (-1000)
/* Returned by a node handler for a node that is not its after all (a Cast
 * of a computed value to the constant folder): the next row for the op is
 * tried, and when none is left the node is KL_ONNX__UNSUP. */
#define KL_ONNX__NEXT (-1001)

/* First character of the names of values kiln makes itself (no ONNX name
 * starts with it). */
#define KL_ONNX__OWN '\x01'

/* A node handler: imports node nd, whose op_type is its row's op. Returns
 * KL_OK, an error (c->err set), KL_ONNX__UNSUP or KL_ONNX__NEXT. */
typedef int kl_onnx__fn(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd);

/* Row flag: the op is com.microsoft's (the contrib domain); rows without
 * it are the default domain's (QuantizeLinear and DequantizeLinear of
 * com.microsoft are read as the default domain's). */
#define KL_ONNX__MS 1u

/* One row of the handler table: op_type, its handler, flags. */
typedef struct {
    const char *op;
    kl_onnx__fn *fn;
    unsigned flags;
} kl_onnx__op_t;

/* The rows of each handler file, ended by a row with op NULL. A node is
 * offered to the rows for its op in the order of the files below and,
 * within a file, of its rows, until one does not return KL_ONNX__NEXT:
 * the constants and the constant folder first (any node of constants is
 * a constant whatever its op), the quantized forms before the float
 * layers (a Conv of a DequantizeLinear weight is a q-op, a MaxPool of a u8
 * tensor a quantized pool), the general element-wise and shape ops last
 * (what the patterns before them did not take). Adding an op is a row and
 * its handler. */
extern const kl_onnx__op_t kl_onnx__const_ops[];
extern const kl_onnx__op_t kl_onnx__fold_ops[];
extern const kl_onnx__op_t kl_onnx__q_ops[];
extern const kl_onnx__op_t kl_onnx__qop_ops[];
extern const kl_onnx__op_t kl_onnx__qfp_ops[];
extern const kl_onnx__op_t kl_onnx__tf_ops[];
extern const kl_onnx__op_t kl_onnx__layers_ops[];
extern const kl_onnx__op_t kl_onnx__act_ops[];
extern const kl_onnx__op_t kl_onnx__ew_ops[];

/* kl_model_onnx_base.c: constants, values, lines, attributes */
const kl_onnx__tensor_t *kl_onnx__init(const kl_onnx__ctx_t *c,
                                       const char *name);
void kl_onnx__add_const(kl_onnx__ctx_t *c, const char *name,
                        const kl_onnx__tensor_t *t, kl_onnx__tensor_t *own);
int kl_onnx__readers(const kl_onnx__ctx_t *c, const char *name);
int kl_onnx__reader(const kl_onnx__ctx_t *c, const char *name);
int64_t kl_onnx__numel(const kl_onnx__tensor_t *t);
int kl_onnx__terr(kl_onnx__ctx_t *c, const char *name, const char *what);
int kl_onnx__floats(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                    const char *name, float **out, int64_t *n);
int kl_onnx__ints_of(const kl_onnx__tensor_t *t, int64_t *d, int max);
kl_onnx__val_t *kl_onnx__val(const kl_onnx__ctx_t *c, const char *onnx);
char *kl_onnx__kiln_name(const kl_onnx__ctx_t *c, const char *onnx);
kl_onnx__val_t *kl_onnx__add_val(kl_onnx__ctx_t *c, const char *onnx,
                                 char *kiln, int line, bool owns);
void kl_onnx__alias(kl_onnx__ctx_t *c, const char *onnx,
                    const kl_onnx__val_t *v);
const char *kl_onnx__nname(const kl_onnx__node_t *nd);
int kl_onnx__fail(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                  const char *what);
const char *kl_onnx__in(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                        int *rc);
kl_onnx__line_t *kl_onnx__line_for(kl_onnx__ctx_t *c, const char *out,
                                   const char *in0, const char *op);
kl_onnx__line_t *kl_onnx__line(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                               const char *op);
const KilnOnnx__AttributeProto *kl_onnx__attr(const kl_onnx__node_t *nd,
                                              const char *name);
int64_t kl_onnx__aint(const kl_onnx__node_t *nd, const char *name, int64_t def);
int kl_onnx__window(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                    int64_t *stride, int64_t *pad, int64_t *dil);
int kl_onnx__bias_in(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                     kl_onnx__line_t *l, float scale);
int kl_onnx__weight_in(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                       const kl_onnx__tensor_t *w, kl_onnx__line_t *l,
                       float scale);
bool kl_onnx__is(const kl_onnx__node_t *nd, const char *op);
void kl_onnx__lines_text(const kl_onnx__ctx_t *c, kl_buf_t *b, bool dead);

/* kl_model_onnx_layers.c: layers, and constants folded into them */
float kl_onnx__afloat(const kl_onnx__node_t *nd, const char *name, float def);
void kl_onnx__need_bias(kl_onnx__ctx_t *c, kl_onnx__line_t *l);
int kl_onnx__simple(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                    const char *op);
int kl_onnx__clip_bound(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t k,
                        const char *what, bool *has, float *v);

/* kl_model_onnx_tf.c: GELU, layer norm, packed attention patterns */
const char *kl_onnx__other(const kl_onnx__node_t *nd, const char *one);
int kl_onnx__gelu_erf(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                      bool *matched);
int kl_onnx__axes(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int64_t *ax);
/* Finds GELU's tanh form before the nodes are read: its nodes are
 * skipped (c->skip), and its last one's c->gelu_x is the input. */
void kl_onnx__gelu_tanh_scan(kl_onnx__ctx_t *c);
/* The gelu approximate=tanh layer of x for the pattern's last node nd. */
int kl_onnx__gelu_tanh(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                       const char *x);

/* kl_model_onnx_const.c: constants computed at import */
bool kl_onnx__shape(const kl_onnx__ctx_t *c, const char *kiln, int64_t *d,
                    int *n);
int kl_onnx__nums(kl_onnx__ctx_t *c, const char *name, double *v, int *type,
                  int64_t *dims, int *nd);

/* kl_model_onnx_fold.c: the constant folder's base (constants read as
 * doubles and stored back), and constants read by computed layers */
/* A constant being folded: its values as doubles, its shape, and its
 * type: 1 float, 7 int64 (int32 too), 9 bool (0 and 1). */
typedef struct {
    int type;
    int nd;
    int64_t d[KL_MODEL_MAX_DIMS];
    int64_t n;
    double *v;
} kl_onnx__ct_t;
void kl_onnx__ct_free(kl_onnx__ct_t *t);
/* Constant tensor t (named name) as doubles (kl_onnx__ct_get: the
 * constant named name): KL_OK; 1 when it is not a constant kiln folds (a
 * computed value, another element type; *out untouched); or an error (a
 * constant whose data is bad). */
int kl_onnx__ct_read(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                     const char *name, kl_onnx__ct_t *out);
int kl_onnx__ct_get(kl_onnx__ctx_t *c, const char *name, kl_onnx__ct_t *out);
/* Stores r (taken) as constant `name` (float, or int64 for the others). */
void kl_onnx__ct_put(kl_onnx__ctx_t *c, const char *name, kl_onnx__ct_t *r);
/* A result of shape d[rank] and type for node nd, its values zero; an
 * error naming nd when it would be too large to fold (2^24 values). */
int kl_onnx__ct_new(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int type,
                    const int64_t *d, int rank, kl_onnx__ct_t *r);
/* Axis a of a rank-dim input, negative from the end, into *out; an
 * error naming nd when it is outside. */
int kl_onnx__ct_axis(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, int64_t a,
                     int rank, int *out);
/* The kiln name of input k of nd: a computed value's, or, for a
 * constant, a `const` layer made for it (once; its values the layer's
 * parameter NAME.weight). NULL and *rc an error when it is neither. */
const char *kl_onnx__operand(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                             size_t k, int *rc);
/* Constant `name`'s values as doubles (*v heap, its shape d[*nd]): KL_OK,
 * 1 when it is not a constant kiln reads, or an error. */
int kl_onnx__const_values(kl_onnx__ctx_t *c, const char *name, double **v,
                          int64_t *d, int *nd);
/* A Slice's start, step and length in every dim of an input of shape
 * d[rank] (ONNX's clamping and negative indices resolved; opset 10's
 * inputs or the attributes before it). */
typedef struct {
    int64_t start[KL_MODEL_MAX_DIMS], step[KL_MODEL_MAX_DIMS],
        len[KL_MODEL_MAX_DIMS];
} kl_onnx__slice_t;
int kl_onnx__slice_args(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                        const int64_t *d, int rank, kl_onnx__slice_t *sl);
/* A Split's part sizes sz[nd->n_output] along an axis of dim elements
 * (the split input from opset 13, the attribute before, else equal parts
 * with the last one smaller); an error naming nd when they do not add
 * up, or there are not 1 to 64 outputs. */
int kl_onnx__split_sizes(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                         int64_t dim, int64_t *sz);

/* kl_model_onnx_q.c: quantized nodes */
int kl_onnx__ivals(kl_onnx__ctx_t *c, const kl_onnx__tensor_t *t,
                   const char *name, int64_t **out, int64_t *n);
int kl_onnx__qparams_at(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, size_t ks,
                        size_t kz, float *scale, int64_t *zp, kl_dtype *dt);
int kl_onnx__qmake(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd,
                   const kl_onnx__qsrc_t *q, kl_onnx__line_t **out);
void kl_onnx__qout(kl_onnx__line_t *l, float so, int64_t zo, kl_dtype dt);
const kl_onnx__tensor_t *kl_onnx__opt_init(const kl_onnx__ctx_t *c,
                                           const kl_onnx__node_t *nd, size_t k);
const char *kl_onnx__opt_name(const kl_onnx__node_t *nd, size_t k);

#endif
