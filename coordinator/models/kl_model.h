/* kl_model.h - models and their tuning tasks (docs/models.md): task
 * extraction, a model -> its tasks and their weights.
 *
 * A model is a graph of layers written in kiln's graph format (the manual
 * is docs/models.md), e.g.
 *
 *   model tiny
 *   input data 1x3x32x32
 *   c1 = conv2d data K=16 R=3 pad=1 bias=1
 *   r1 = relu c1
 *   p1 = max_pool2d r1 R=2
 *   f  = flatten p1
 *   fc = dense f O=10
 *
 * Every tensor is f32 (but the u8 / s8 / s32 outputs of quantize and the
 * q-ops) and 4-D tensors are NCHW; shapes are inferred layer by
 * layer from the inputs. Extraction then:
 *  1. fuses into its producer every `relu` or `clip` (one of them per
 *     producer; a clip becomes its clip=LO,HI) that follows a conv2d,
 *     depthwise_conv2d, dense or matmul, in relu's place a `sigmoid`,
 *     `silu`, `hard_swish`, `hard_sigmoid` or `gelu` (either form) that
 *     does (its act=NAME, kl_ir.h; hard_sigmoid with its alpha and beta),
 *     and every `add` of a conv2d or depthwise_conv2d output with a tensor
 *     of its shape (the residual; the first operand that qualifies gets
 *     it), when the producer's output has no other consumer; bias is an
 *     attribute of the producer itself. The epilogue order is bias,
 *     residual, relu (or clip, or activation), as kl_ir.h has it, so a
 *     relu, clip or activation fused before an add stops the add from
 *     fusing;
 *  2. turns every remaining layer that computes into a workload with
 *     kl_workload_from_op (so a task's key is the key `kiln tune --op`
 *     gives the same operator); reshape, flatten and transpose are views,
 *     softmax, layer_norm, gelu and the activations (kl_mop_is_act) not
 *     fused, and the general ops (kl_mop_is_general: sub, mul, where,
 *     concat, slice, reduce_mean, ..., and an add of two shapes that
 *     broadcast) have no named operator and are counted as not tuned (a
 *     const layer is a parameter and computes nothing);
 *  3. merges the layers whose workloads have the same key into one task
 *     whose weight is their count, in order of first appearance.
 *
 * Built-in models (batch 1, f32, batch norm folded into the convolution
 * bias): resnet18, resnet50 (torchvision's v1.5), mobilenet_v2 (224x224),
 * bert_base (one encoder layer, input 1x128x768: batch 1, sequence 128).
 * Their graph files live in coordinator/models/graphs/ and are compiled
 * into kiln.
 */
#ifndef KL_MODEL_H
#define KL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_ir.h"

typedef struct {
    kl_workload_t *w;  /* owned by the model */
    char *spec;        /* the kl_workload_from_op form ("conv2d N=1 ...") */
    int weight;        /* how many layers of the model run it, >= 1 */
    const char *layer; /* the first layer that runs it */
    /* Bytes of one of its layers' weight and bias as the model stores
     * them (f32 4 bytes a value; a q-op's s8 weight 1, s32 bias 4); 0 for
     * a layer without parameters (batch_matmul, pools, ...). */
    int64_t param_bytes;
} kl_model_task_t;

typedef struct kl_model_s kl_model_t;

/* Parses a graph file's text and extracts its tasks. `source` names the
 * text in error messages (a path or "resnet18"). Errors are KL_ERR_INVAL
 * with a message "SOURCE:LINE: ..." that says what is wrong: an unknown
 * op, an undefined or redefined tensor, a shape that does not fit
 * ("conv2d expects a 4-D NCHW input, got 128x768"), a bad attribute, or
 * the operator's own complaint from kl_workload_from_op. A graph with no
 * task is an error too. On success *out is the caller's
 * (kl_model_destroy). */
int kl_model_parse(const char *text, const char *source, kl_model_t **out,
                   char *err);

/* ---- precision ------------------------------------------------------------
 *
 * A model computes in f32 (the default) or in bf16, the way an inference
 * runtime's precision hint runs an f32 model: with bf16 every conv2d,
 * dense, matmul and batch_matmul task is its in=bf16 form (kl_ir.h: the
 * two multiplied inputs read as bf16, f32 accumulation, epilogue and
 * output; the name ends "_bf16"), and every other layer (depthwise
 * convolutions, pools, elementwise layers, softmax, layer_norm, gelu, the
 * int8 q-ops and casts) stays as it is. Tensors between layers stay f32
 * in memory: a bf16 kernel converts its activations when it packs them
 * and its constant weights once, in its prepare step. */

/* Reads a precision name: "f32" (KL_DT_F32) or "bf16" (KL_DT_BF16);
 * anything else is KL_ERR_INVAL naming the accepted values. */
int kl_model_precision(const char *name, kl_dtype *out, char *err);

/* kl_model_parse / kl_model_load in precision prec (KL_DT_F32 or
 * KL_DT_BF16): the same graph, the multiplying layers' tasks in prec. */
int kl_model_parse_prec(const char *text, const char *source, kl_dtype prec,
                        kl_model_t **out, char *err);
int kl_model_load_prec(const char *name_or_path, kl_dtype prec,
                       kl_model_t **out, char *err);

/* ---- options: precision and input dimensions -----------------------------
 *
 * A model loads as its file has it, or with its inputs resized the way an
 * inference runtime resizes them (reshape, free dimension overrides):
 * batch replaces dimension 0 of every model input, seq dimension 1 of
 * every input of 2 dimensions ([batch, seq], token ids) or 3 ([batch,
 * seq, hidden], activations); every layer's shape is then inferred from
 * the new inputs. A graph text's `input NAME SHAPE` lines are rewritten
 * (a built-in's, a graph file's); an ONNX model's inputs are resized at
 * import, fixed or symbolic, before any node, so shapes the model
 * computes from its inputs (Shape, and the arithmetic the importer folds
 * on it) follow the new size, while a shape the exporter wrote as a
 * constant does not: the first layer it no longer fits (a reshape) is
 * the error, KL_ERR_INVAL naming the layer and the overrides ("x.onnx:
 * with --seq 8: layer 'r': reshape of 512 elements to 1x16x4x16 ...").
 * Other errors: KL_ERR_INVAL for a negative batch or seq ("--batch -1:
 * ..."), and for seq on an input of another rank, naming the input and
 * its shape ("x.graph:2: --seq 8: input 'data' is 1x3x224x224 (4-D);
 * ..."). */
typedef struct {
    kl_dtype prec; /* KL_DT_F32 (0) or KL_DT_BF16 (kl_model_load_prec) */
    int64_t batch; /* >= 1: dim 0 of every input; 0: unchanged */
    int64_t seq;   /* >= 1: dim 1 of every 2-D or 3-D input; 0: unchanged */
} kl_model_opts_t;

/* kl_model_load_prec and kl_model_text with opts (NULL: f32, the
 * model's own dimensions); kl_model_text_opts ignores opts->prec. (And
 * kl_model_text_params_opts, below.) */
int kl_model_load_opts(const char *name_or_path, const kl_model_opts_t *opts,
                       kl_model_t **out, char *err);
int kl_model_text_opts(const char *name_or_path, const kl_model_opts_t *opts,
                       char **text, char *err);

/* Graph text with its `input NAME SHAPE` lines resized by opts (above;
 * opts->prec is ignored), everything else as it was; source names the
 * text in errors ("SOURCE:LINE: ..."). A line the parser would refuse is
 * left for it to refuse. *out is the caller's (free). */
int kl_model_resize_text(const char *text, const char *source,
                         const kl_model_opts_t *opts, char **out, char *err);

/* Loads a built-in model by name, or else a file by path: an ONNX model
 * when its name ends in ".onnx" or it holds binary data (see
 * kl_model_onnx_to_text), a graph file otherwise. Errors: as
 * kl_model_parse, KL_ERR_NOTFOUND for a name that is neither a built-in
 * nor a readable file (the message lists the built-ins). */
int kl_model_load(const char *name_or_path, kl_model_t **out, char *err);

/* The graph text of a model as kl_model_load reads it: a built-in's, a
 * graph file's, or an ONNX model's conversion. *text is the caller's
 * (free). Errors as kl_model_load. */
int kl_model_text(const char *name_or_path, char **text, char *err);

/* Writes an ONNX model (the bytes of a .onnx file) as kiln graph text
 * (docs/models.md, "ONNX models"): Conv (group = channels:
 * depthwise_conv2d), Gemm (transB: dense, else matmul), MatMul, MaxPool,
 * AveragePool, GlobalAveragePool (and ReduceMean over H, W), Relu, Clip
 * (with constant min and max: clip lo=MIN hi=MAX, so ReLU6 is clip 0..6;
 * min 0 and no max: relu), Add, Flatten (axis 1), Reshape (constant
 * shape), Transpose, Softmax, LayerNormalization (layer_norm eps= affine=1)
 * and Gelu (also its Erf form) map to the ops of the same meaning;
 * QDQ groups (DequantizeLinear of a u8 activation and of an int8 weight
 * and int32 bias into a Conv, Gemm or MatMul whose output one
 * QuantizeLinear reads) fold into one qconv2d / qdepthwise_conv2d /
 * qdense / qmatmul with za, zo and the requant scale s_in * s_w[o] /
 * s_out; other QuantizeLinear / DequantizeLinear nodes are quantize /
 * dequantize layers (docs/models.md, "Quantized (QDQ) models");
 * BatchNormalization and an Add, Mul or Div of a constant after a conv,
 * dense or matmul fold into it; Identity and Dropout vanish, and views of
 * constants are constants; symbolic dimensions are 1 (unless
 * kl_model_onnx_import_opts sets them); value names keep
 * [A-Za-z0-9_.-] and the rest becomes '_'. Nodes kiln has no layer for are
 * KL_ERR_INVAL naming all of them ("x.onnx: 3 nodes kiln cannot import:
 * '/a' (Erf), ..."); asymmetric pads, SAME_* auto_pad, ceil_mode, a Clip
 * with one bound (other than min 0), none, or one that is not a constant
 * float, a fold into a layer whose output is read elsewhere, and inputs
 * that are not float32 are KL_ERR_INVAL naming the node. *text is the
 * caller's (free). */
int kl_model_onnx_to_text(const void *data, size_t len, const char *source,
                          char **text, char *err);

/* ---- the model's own parameters ------------------------------------------
 *
 * An ONNX model carries trained weights (its initializers). Import folds
 * them the way the graph text it writes expects: BatchNormalization (and an
 * Add or Mul of a constant, and other chains of constants) into the
 * weight and bias of the conv, dense or matmul before it, Gemm's alpha and
 * beta into its weight and bias, and lays every weight out as kl_ir.h's
 * named operator reads it (conv2d [K,C/groups,R,S], depthwise_conv2d
 * [C*M,1,R,S], dense [O,I], matmul [K,N]). A parameter is named as the
 * exported library names it (kiln_model.h): "LAYER.weight", "LAYER.bias",
 * LAYER being the layer's name in the graph text. A layer with bias=1
 * whose model had no bias gets zeros. */
typedef struct {
    char *name;    /* "LAYER.weight" / "LAYER.bias" / "LAYER.scale" */
    int64_t numel; /* values in data (f32) or idata (s8, s32) */
    float *data;   /* the values when dtype is f32, else NULL */
    /* KL_DT_F32 (0, every float layer's), or a quantized layer's (qconv2d,
     * qdepthwise_conv2d, qdense, qmatmul): weight KL_DT_S8 (int8_t),
     * bias KL_DT_S32 (int32_t) in idata; its per-channel requant scale
     * "LAYER.scale" is f32 (s_in * s_w[o] / s_out, one an output
     * channel). */
    kl_dtype dtype;
    void *idata;
} kl_model_param_t;

typedef struct {
    kl_model_param_t *p;
    int n;
} kl_model_params_t;

/* The parameters of the model kl_model_load(name_or_path) would load: an
 * ONNX model's folded initializers (as above, external data read from
 * beside the file); none (n == 0) for built-ins and graph files, whose
 * users pick their own (kiln export makes seeded random ones). Errors as
 * kl_model_load, and KL_ERR_INVAL naming the initializer that cannot be
 * read (not float32, truncated, missing external file). out is the
 * caller's (kl_model_params_free) on success. */
int kl_model_params(const char *name_or_path, kl_model_params_t *out,
                    char *err);
/* kl_model_text and kl_model_params from one read and one import (an
 * ONNX file of hundreds of MB is decoded once): *text as kl_model_text
 * gives it, params as kl_model_params (checked against the text). On
 * error both are empty. */
int kl_model_text_params(const char *name_or_path, char **text,
                         kl_model_params_t *params, char *err);
/* kl_model_text_params of the model resized by opts (kl_model_opts_t;
 * opts->prec is ignored): an ONNX model's constants computed from shapes,
 * such as a causal mask, follow the new size. */
int kl_model_text_params_opts(const char *name_or_path,
                              const kl_model_opts_t *opts, char **text,
                              kl_model_params_t *params, char *err);
/* The parameter called name, or NULL. */
const kl_model_param_t *kl_model_params_find(const kl_model_params_t *ps,
                                             const char *name);
void kl_model_params_free(kl_model_params_t *ps);

/* kl_model_onnx_to_text, and when params is not NULL the model's
 * parameters as kl_model_params describes them (external data read
 * relative to source's directory), from the same pass: the text and the
 * parameters always agree. On error params is empty. */
int kl_model_onnx_import(const void *data, size_t len, const char *source,
                         char **text, kl_model_params_t *params, char *err);
/* kl_model_onnx_import with the inputs resized by opts (NULL: as the
 * model has them; opts->prec is ignored), before any node is imported. */
int kl_model_onnx_import_opts(const void *data, size_t len, const char *source,
                              const kl_model_opts_t *opts, char **text,
                              kl_model_params_t *params, char *err);

void kl_model_destroy(kl_model_t **self_p);

/* The built-in models: names in a NULL-terminated static array, and the
 * text of one (NULL when there is no such built-in). */
const char *const *kl_model_builtin_names(void);
const char *kl_model_builtin_text(const char *name);

/* The model's name ("model" line, else the source). */
const char *kl_model_name(const kl_model_t *m);
/* The precision it was loaded in (KL_DT_F32 or KL_DT_BF16). */
kl_dtype kl_model_prec(const kl_model_t *m);
int kl_model_ntasks(const kl_model_t *m);
/* Task i, borrowed until kl_model_destroy. */
const kl_model_task_t *kl_model_task(const kl_model_t *m, int i);

/* ---- the measurement condition of each task --------------------------------
 *
 * kl_record.h's warm and cold are two ways to measure a kernel; a model
 * runs some of its layers closer to one, some closer to the other. A
 * layer's weights were last read one inference earlier, after every other
 * layer's: when they are larger than a core's L2 (512 KiB to 2 MiB on
 * today's server cores) they come from L3 or memory in the model, as in a
 * cold measurement, where a warm one finds them in the L2 on every call
 * after the first. Its input was just written by the layer before, in
 * cache as in a warm measurement. So `--condition auto` (kiln tune
 * --model, kiln export --model) measures and picks cold exactly the tasks
 * whose layers' parameters take KL_MODEL_COLD_BYTES or more, and warm the
 * others; warm and cold apply one condition to every task. */
#define KL_MODEL_COLD_BYTES ((int64_t)1 << 20)

typedef enum {
    KL_MODEL_COND_WARM = 0,
    KL_MODEL_COND_COLD,
    KL_MODEL_COND_AUTO,
} kl_model_cond_t;

/* Parses "warm", "cold" or "auto"; KL_ERR_INVAL naming text otherwise. */
int kl_model_cond_parse(const char *text, kl_model_cond_t *out, char *err);
/* Whether task t is measured (and picked) cold under c. */
bool kl_model_task_cold(const kl_model_task_t *t, kl_model_cond_t c);

/* Layers in the graph (inputs not counted), and how many of them became
 * part of a task (fused ones included). */
int kl_model_nlayers(const kl_model_t *m);
int kl_model_ntuned_layers(const kl_model_t *m);
/* Sum over tasks of weight * FLOPs: the model's FLOPs as kiln counts
 * them (padding reads excluded). */
double kl_model_total_flop(const kl_model_t *m);
/* The layers that are not tasks and compute (softmax, layer_norm, gelu,
 * the activations, the general ops but const, a broadcasting add as
 * "add (broadcast)", quantize, dequantize), as "softmax x1, layer_norm
 * x2" ("" when none); borrowed. */
const char *kl_model_untuned(const kl_model_t *m);

#endif
