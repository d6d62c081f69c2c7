/* kl_graph.h - the model graph as coordinator/models hands it to the
 * modules that compile it (export): the parsed graph text, one node per
 * layer or input, with its inferred shape, its attributes and, once
 * fused, which kernel computes it.
 *
 * Read-only for its users: kl_mgraph_parse fills a kl_mgraph_t that the
 * caller owns (kl_mgraph_free releases it); kl_mgraph_fuse and
 * kl_mgraph_layout annotate it as task extraction does, so that what is
 * exported runs exactly as its tasks were tuned; the rest only reads it.
 * A user reads the fields and never writes them. The graph format itself
 * (ops, attributes, errors) is kl_model.h's and docs/models.md's; the
 * parser's and extraction's internals stay in kl_model_int.h, which
 * nothing outside coordinator/models includes. */
#ifndef KL_GRAPH_H
#define KL_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_model.h"

#define KL_MODEL_MAX_NAME 64
#define KL_MODEL_MAX_DIMS 8

typedef enum {
    KL_MOP_INPUT,
    KL_MOP_CONV2D,
    KL_MOP_DEPTHWISE,
    KL_MOP_DENSE,
    KL_MOP_MATMUL,
    KL_MOP_BATCH_MATMUL,
    KL_MOP_MAX_POOL,
    KL_MOP_AVG_POOL,
    KL_MOP_GLOBAL_AVG_POOL,
    KL_MOP_ADD,
    KL_MOP_RELU,
    KL_MOP_CLIP,
    KL_MOP_FLATTEN,
    KL_MOP_RESHAPE,
    KL_MOP_TRANSPOSE,
    KL_MOP_SOFTMAX,
    KL_MOP_LAYER_NORM,
    KL_MOP_GELU,
    /* The elementwise activations without a task (kl_mop_is_act), run by
     * the exported library's own loops: hard_sigmoid (alpha, beta),
     * leaky_relu and elu (alpha) with ONNX's defaults. */
    KL_MOP_SIGMOID,
    KL_MOP_TANH,
    KL_MOP_HARD_SIGMOID,
    KL_MOP_HARD_SWISH,
    KL_MOP_LEAKY_RELU,
    KL_MOP_ELU,
    KL_MOP_SILU,
    /* The general ops without a task (kl_mop_is_general), all f32, run
     * by the exported library's own loops: const (no loop: a parameter
     * NAME.weight of its shape=), the element-wise ops of two inputs
     * that broadcast (kl_mop_is_binary; add too, when its inputs differ
     * in shape), where (three inputs, broadcast), the element-wise ops of
     * one (kl_mop_is_unary), and concat, slice, gather, expand,
     * reduce_mean, reduce_sum. Broadcasting is numpy's: shapes aligned at
     * the right, each dim equal or 1, the output's the larger. */
    KL_MOP_CONST,
    KL_MOP_SUB,
    KL_MOP_MUL,
    KL_MOP_DIV,
    KL_MOP_POW,
    KL_MOP_MAX,
    KL_MOP_MIN,
    KL_MOP_WHERE,
    KL_MOP_SQRT,
    KL_MOP_EXP,
    KL_MOP_ERF,
    KL_MOP_NEG,
    KL_MOP_RECIPROCAL,
    KL_MOP_CONCAT,
    KL_MOP_SLICE,
    KL_MOP_GATHER,
    KL_MOP_EXPAND,
    KL_MOP_REDUCE_MEAN,
    KL_MOP_REDUCE_SUM,
    /* Quantized layers (kl_ir_ops.c's q-ops: u8 input, const s8 weight,
     * s32 bias, requant to out) and the casts between f32 and integers
     * (ONNX QuantizeLinear / DequantizeLinear). */
    KL_MOP_QCONV2D,
    KL_MOP_QDEPTHWISE,
    KL_MOP_QDENSE,
    KL_MOP_QMATMUL,
    KL_MOP_QUANTIZE,
    KL_MOP_DEQUANTIZE,
} kl_mop;

/* A q-op (qconv2d, qdepthwise_conv2d, qdense, qmatmul)? */
bool kl_mop_is_q(kl_mop op);

/* An activation without a task (sigmoid, tanh, hard_sigmoid, hard_swish,
 * leaky_relu, elu, silu)? */
bool kl_mop_is_act(kl_mop op);

/* A general op (const ... reduce_sum, above)? */
bool kl_mop_is_general(kl_mop op);
/* A broadcasting element-wise op of two inputs (sub, mul, div, pow, max,
 * min; not add, which is one only when its node says bcast)? */
bool kl_mop_is_binary(kl_mop op);
/* An element-wise op of one input (sqrt, exp, erf, neg, reciprocal)? */
bool kl_mop_is_unary(kl_mop op);

/* At most this many indices in a gather layer. */
#define KL_MODEL_MAX_GATHER 64

typedef struct {
    char name[KL_MODEL_MAX_NAME];
    kl_mop op;
    int line;
    int in[3]; /* node indexes (three: where) */
    int nin;
    int ndim; /* output shape */
    int64_t shape[KL_MODEL_MAX_DIMS];
    /* Attributes (those of the op; the rest stay 0). */
    int64_t K, R, S, stride, pad, dil, groups, mult, O, N;
    bool bias, res, relu;
    /* A clip layer's bounds; on a producer, clip says that a clip layer
     * was fused into it, with these bounds. */
    bool clip;
    double lo, hi;
    /* On a producer: a sigmoid, silu, hard_swish, hard_sigmoid or gelu
     * (either form) layer was fused into it, as act (hard_sigmoid's alpha
     * and beta in alpha, beta: a producer has none of its own). */
    bool smooth;
    kl_act act;
    /* layer_norm: epsilon (default 1e-5) and affine (its own weight and
     * bias, each [last dim]). */
    double eps;
    bool affine;
    /* hard_sigmoid: y = clamp(alpha x + beta, 0, 1); leaky_relu, elu:
     * alpha of the negative side. */
    double alpha, beta;
    /* gelu approximate=tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
     * x^3))); false: the erf form. */
    bool gelu_tanh;
    /* An element-wise layer (add, the binary ops, where) one of whose
     * inputs differs in shape from its output: it broadcasts. Such an add
     * is no task and never a residual. */
    bool bcast;
    /* concat, slice, gather: the axis; slice: start, end (0 <= start <
     * end <= dim) and step (>= 1); gather: nidx indices into the axis,
     * idx[0..nidx). */
    int64_t axis, start, end, step;
    /* transpose: output dim i is input dim perm[i]. */
    int perm[KL_MODEL_MAX_DIMS];
    int nidx;
    int64_t idx[KL_MODEL_MAX_GATHER];
    /* reduce_mean, reduce_sum: bit a of axes set for each reduced axis a
     * of the input; keepdims: those axes stay as 1 (else they are
     * dropped; all dropped is shape 1). */
    unsigned axes;
    bool keepdims;
    /* The output's element type (f32 unless a q-op or quantize says);
     * q-ops: za, zo, out (qout), scale (per_channel: a LAYER.scale
     * parameter, else the number); quantize / dequantize: scale, zo (the
     * zero point) and, for quantize, qout. */
    kl_dtype dt;
    int64_t za, zo;
    kl_dtype qout;
    bool per_channel;
    double scale;
    /* Filled by extraction. */
    int uses;     /* layers (and outputs) that read this value */
    int owner;    /* node whose kernel computes this value */
    bool fused;   /* folded into owner's epilogue */
    int res_from; /* the residual operand's node, -1 when none */
    /* Filled by kl_mgraph_layout: the value is stored NHWC (a 4-D one;
     * else NCHW, as the graph gives its shape). */
    bool nhwc;
} kl_mnode_t;

/* The activation of kl_act that layer nd computes and extraction fuses
 * into its producer (sigmoid, silu, hard_swish, hard_sigmoid, gelu in
 * either form); false for every other layer (tanh, leaky_relu and elu
 * included: no epilogue computes them). */
bool kl_mgraph_fused_act(const kl_mnode_t *nd, kl_act *out);

typedef struct {
    char *name; /* "model" line; NULL when none */
    kl_mnode_t *nodes;
    int n, cap;
    int *outputs; /* nodes named by "output" lines */
    int nout;
    /* The precision its multiplying layers compute in (kl_model.h,
     * "Precision"): KL_DT_F32 (what kl_mgraph_parse sets), or KL_DT_BF16:
     * kl_mgraph_spec then gives conv2d, dense, matmul and batch_matmul
     * their in=bf16 form. Set with kl_mgraph_set_precision. */
    kl_dtype prec;
} kl_mgraph_t;

/* Parses the graph text into g (inferring every shape). Errors as
 * kl_model_parse documents them. On error g is freed. */
int kl_mgraph_parse(const char *text, const char *source, kl_mgraph_t *g,
                    char *err);
void kl_mgraph_free(kl_mgraph_t *g);

/* Folds relu, clip, the activations of kl_mgraph_fused_act and residual
 * adds into their producers (kl_model.h; a broadcasting add never is one,
 * and nothing folds into a general op): sets uses, owner, fused, relu,
 * clip (lo, hi), smooth (act, alpha, beta), res and res_from of g's
 * nodes. Task extraction
 * and export both call it, so a graph runs exactly as its tasks were
 * extracted. */
void kl_mgraph_fuse(kl_mgraph_t *g);
/* Which values are stored NHWC (kl_model_layout.c): every q-conv that is
 * not grouped and has C a multiple of 4, at least 16, computes NHWC (its
 * spec says layout=NHWC); quantize, dequantize, relu, clip, a same-shape
 * add and a max pool on codes (kl_mgraph_code_pool) follow their input
 * when a reader of theirs reads NHWC; everything else is NCHW. Called by
 * kl_mgraph_fuse, after the folds. In an f32 graph with a depthwise
 * convolution, the convolutions and depthwise convolutions compute NHWC
 * too when the plan's conversions move at most an eighth of what they
 * write; KILN_LAYOUT_F32=NHWC or NCHW decides instead. The environment
 * variable KILN_LAYOUT_NCHW (any value) keeps every value NCHW (tuning and
 * export must see the same environment: it changes the workloads). */
void kl_mgraph_layout(kl_mgraph_t *g);
/* KL_OK, or KL_ERR_INVAL naming a KILN_LAYOUT_F32 that is not NHWC, NCHW,
 * auto or empty. */
int kl_mgraph_layout_f32_env(char *err);
/* The elements kiln export converts between layouts under g's plan
 * (each value at most once a direction; the graph's outputs are read
 * NCHW). */
int64_t kl_mgraph_layout_converted(const kl_mgraph_t *g);
/* Whether a value's layout changes its memory: 4-D with C > 1 and
 * H * W > 1. */
bool kl_mgraph_layout_matters(const kl_mnode_t *nd);

/* Integer shortcuts (kl_model_qgroups.c): a `dequantize`, `dequantize`,
 * `add`, `quantize` group as one loop over the codes at the add
 * (KL_QF_ADD), a `dequantize`, `max_pool2d`, `quantize` group with the
 * same scale and zero point as a max pool over the codes at the pool
 * (KL_QF_MAXPOOL); the quantize, and each dequantize read by nothing
 * else, are not layers of their own (KL_QF_SKIP). Bit-equal to the
 * layers. */
enum { KL_QF_NONE = 0, KL_QF_SKIP, KL_QF_ADD, KL_QF_MAXPOOL };
typedef struct {
    int kind;
    int q; /* KL_QF_ADD / KL_QF_MAXPOOL: the quantize node it writes */
} kl_qfuse_t;

/* Fills plan[g->n]; returns the number of groups. The environment
 * variable KILN_EXPORT_NO_QFUSE (any value) turns the shortcuts off (for
 * tuning and export alike: the group's add and pool are then tasks). */
int kl_mgraph_qfuse_plan(const kl_mgraph_t *g, kl_qfuse_t *plan);

/* Sets the graph's precision (KL_DT_F32 or KL_DT_BF16, as
 * kl_model_precision reads it); before kl_mgraph_spec is asked. */
void kl_mgraph_set_precision(kl_mgraph_t *g, kl_dtype prec);

/* The named-op spec (kl_workload_from_op form) of computing node nd after
 * fusion, in the graph's precision; heap string. */
char *kl_mgraph_spec(const kl_mgraph_t *g, const kl_mnode_t *nd);

/* The op's name in the graph format. */
const char *kl_mop_name(kl_mop op);

#endif
