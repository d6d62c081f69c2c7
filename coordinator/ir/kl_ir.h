/* kl_ir.h - workloads: one tensor operator with fixed shapes and dtypes.
 *
 * A workload is written in kiln's expression language (docs/architecture.md,
 * "Tensor programs"):
 *
 *   C[i,j] += A[i,k] * B[k,j] where i=1024, j=1024, k=1024
 *   Y[n,f,y,x] += X[n,c,y*2+r-3,x*2+s-3] * W[f,c,r,s] | + bias[f] | relu
 *       where n=1, f=64, y=112, x=112, c=3, r=7, s=7;
 *       X: f32[1,3,224,224], W: const f32[64,3,7,7], bias: const f32[64]
 *
 * Grammar (whitespace free-form, identifiers [A-Za-z_][A-Za-z0-9_]*):
 *
 *   workload := access assign expr { '|' epilogue } 'where' iters
 *               [ ';' decl { ',' decl } ]
 *   assign   := '=' | '+=' | 'max='
 *   expr     := term { ('+' | '-') term }
 *   term     := factor { ('*' | '/') factor }
 *   factor   := NUMBER | access | '(' expr ')' | ('max'|'min') '(' expr ','
 *               expr ')' | '-' factor
 *   access   := NAME '[' index { ',' index } ']'
 *   index    := affine expression of iterators and integers (c*v, v*c,
 *               v+c, ...), optionally wrapped as '(' affine ')' '/' INT for
 *               a strided gather (valid only where it divides exactly)
 *   epilogue := '+' access | '*' access | '*' NUMBER | '+' NUMBER |
 *               'relu' | 'clip' '(' NUMBER ',' NUMBER ')' | 'sigmoid' |
 *               'silu' | 'hard_swish' | 'gelu' | 'gelu_tanh' |
 *               'hard_sigmoid' [ '(' NUMBER ',' NUMBER ')' ] |
 *               'requant' '(' (access | NUMBER) ',' ['-'] INT ')'
 *   iters    := NAME '=' INT { ',' NAME '=' INT }
 *   decl     := NAME ':' [ 'const' ] dtype '[' INT { ',' INT } ']'
 *               dtype f32|f16|bf16|u8|s8|s32 (i32 reads as s32)
 *
 * Iterators that index the output are spatial; the others are reductions
 * (with '+=' summed, with 'max=' maxed; '=' allows none). Output indices
 * are exactly the spatial iterators, each once, in any order. A read whose
 * index falls outside the tensor (or does not divide exactly) reads zero:
 * that is how padding is written. Under 'max=' a reduction point with such
 * a read is skipped instead (-inf padding, so max pooling is exact for any
 * input); an output whose every point is skipped is 0. A tensor without a
 * decl is f32 with the shape its indices reach (each index must then stay
 * >= 0); a tensor whose index can go negative must be declared. Epilogue
 * accesses may only use spatial iterators; epilogue operations apply in
 * order to the reduced value. Every iterator of 'where' must appear in an
 * index with a nonzero coefficient. Limits: integers and index constants up
 * to 2^40, divisors up to 2^20, tensors up to 2^40 elements. The smooth
 * activations (sigmoid ... gelu_tanh, kl_act below) are float-only;
 * hard_sigmoid without bounds is hard_sigmoid(0.2, 0.5), and the canonical
 * text always writes its alpha and beta.
 *
 * A `const` input's contents never change between calls (a model's weights
 * and biases; the named conv2d, depthwise_conv2d, conv2d_transpose and
 * dense declare theirs so, matmul none): a kernel may rewrite its layout
 * once, ahead of the calls (kl_abi.h). Constness is part of the canonical
 * text and so of the key. The output cannot be const.
 *
 * The canonical text is the workload printed back in one fixed form (all
 * shapes and dtypes declared); its key is kl_hash128 of that text, so two
 * spellings of the same operator share one key: the order of 'where', the
 * spacing, the spelling of coefficients (y*2, 2*y) and optional decls do not
 * change it; tensor and iterator names do. Parsing a canonical text gives
 * the same canonical text. Example:
 *   C[i,j] += A[i,k] * B[k,j] where i=1024, j=1024, k=1024; A: f32[1024,1024],
 *   B: f32[1024,1024], C: f32[1024,1024]
 *
 * FLOPs are exact: each iteration point whose body reads are all inside
 * their tensors counts the body's operations (+, -, *, /, max, min,
 * negation) plus one for the reduction ('+=' or 'max='); points with a
 * padding read count nothing. Each epilogue operation counts one per output
 * element. Matmul MxNxK is 2*M*N*K; a padded convolution is less than
 * 2*N*K*C*P*Q*R*S by exactly its padded points.
 *
 * Integer workloads. A workload whose output is u8, s8 or s32 is an
 * integer workload; one whose output is a float is a float workload and
 * may not read integer tensors (no implicit dequantization). In an integer
 * workload:
 *  - every tensor the body reads is u8, s8 or s32; body constants are
 *    integers; '/' is not allowed. Each read is widened to int32 and the
 *    body and its reduction are computed in int32. Overflow (wrapping) is
 *    undefined: a workload must keep every intermediate and accumulated
 *    value inside int32, as the quantized named ops do for any realistic
 *    size (|u8 * s8| <= 2^15, so 2^16 reduction points fit);
 *  - under '+=' a reduction point with a padding read contributes nothing
 *    (as under 'max='). This is zero-point padding: the quantized
 *    convolution's padded input is the activation zero point za, whose
 *    (X - za) is 0. (A float workload sums such a point with the read as 0.)
 *  - epilogue operations: '+ T' (T u8/s8/s32), '+ INT', relu, clip(INT,
 *    INT), and requant(S, zp): S is a positive number or an access of an
 *    f32 tensor (per-channel scale, spatial iterators only), zp an integer.
 *    requant maps the int32 value v to nearbyintf((float)v * (float)S) + zp:
 *    one f32 multiply, then round half to even (ONNX QuantizeLinear; the
 *    default rounding mode), the rounded float clamped to the int32 range
 *    before conversion. A number S is rounded to f32 when parsed (so the
 *    canonical text holds the f32 value). '*' is not allowed (use requant);
 *  - the value stored into the output saturates to its dtype: u8 to
 *    [0, 255], s8 to [-128, 127], s32 to the int32 range.
 * relu after requant is max(v, 0) on the quantized value; the named q-ops
 * write a quantized relu as clip(zp, 255) instead (zp being where real 0
 * lands). Operations count as FLOPs exactly as for floats (an op is an op;
 * requant is one per output element).
 *
 * Quantized named ops (qmatmul, qdense, qconv2d, qdepthwise_conv2d) read u8
 * activations X with zero point za and const s8 weights W (symmetric, zero
 * point 0), and write their body as (X[..] - za) * W[..] (just X * W when
 * za = 0). A kernel computes this exactly as sum X*W - za * sum W: the
 * second sum is a per-output-channel constant of the const weights, so a
 * kernel may compute it once when it prepares W (kl_abi.h) and subtract it
 * in the epilogue; this is what a VNNI tensorize (u8 x s8 -> s32 dot
 * products) plugs into. Only output points whose window touches padding
 * need a different compensation (their padded points contribute nothing).
 * The epilogue is + bias (const s32 [O], optional), requant(scale, zo)
 * with a const f32 per-channel scale [O] (scale=channel, default) or a
 * number (scale=NUMBER), then the clip of relu / clip=, then saturation to
 * u8 (or s8 with out=s8; out=s32 keeps the int32 accumulator + bias and has
 * no requant).
 */
#ifndef KL_IR_H
#define KL_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KL_IR_MAX_ITERS 16
#define KL_IR_MAX_DIMS 8
#define KL_IR_MAX_TENSORS 8
#define KL_IR_MAX_EPILOGUE 8
#define KL_IR_MAX_NAME 32

typedef enum {
    KL_DT_F32 = 0, /* same numbers as kiln.DType */
    KL_DT_F16 = 1,
    KL_DT_BF16 = 2,
    KL_DT_S32 = 3, /* kiln.DType I32 */
    KL_DT_U8 = 4,
    KL_DT_S8 = 5,
} kl_dtype;

typedef enum {
    KL_RED_NONE, /* '=' : no reduction iterators */
    KL_RED_SUM,  /* '+=' */
    KL_RED_MAX,  /* 'max=' */
} kl_reduce;

typedef struct {
    char name[KL_IR_MAX_NAME];
    int64_t extent;
    bool reduce;
} kl_iter_t;

/* index = (sum_k coef[k] * iter_k + offset) / div, where div >= 1; with
 * div > 1 the read is valid only where the numerator divides exactly. */
typedef struct {
    int64_t coef[KL_IR_MAX_ITERS];
    int64_t offset;
    int64_t div;
} kl_affine_t;

typedef struct {
    int tensor; /* index into kl_workload_t.tensors */
    kl_affine_t idx[KL_IR_MAX_DIMS];
} kl_access_t;

typedef struct {
    char name[KL_IR_MAX_NAME];
    kl_dtype dtype;
    int ndim;
    int64_t shape[KL_IR_MAX_DIMS];
    bool is_output;
    bool is_const; /* declared `const`: an input whose contents never
                    * change between calls (weights, biases) */
} kl_tensor_t;

typedef enum {
    KL_EX_CONST,
    KL_EX_LOAD,
    KL_EX_ADD,
    KL_EX_SUB,
    KL_EX_MUL,
    KL_EX_DIV,
    KL_EX_MAX,
    KL_EX_MIN,
    KL_EX_NEG,
} kl_expr_kind;

typedef struct kl_expr_s kl_expr_t;
struct kl_expr_s {
    kl_expr_kind kind;
    double value;       /* CONST */
    kl_access_t access; /* LOAD */
    kl_expr_t *a, *b;   /* operands (NEG uses a) */
};

typedef enum {
    KL_EPI_ADD_TENSOR, /* out = out + T[spatial access] */
    KL_EPI_MUL_TENSOR, /* out = out * T[...] */
    KL_EPI_ADD_CONST,
    KL_EPI_MUL_CONST,
    KL_EPI_RELU,
    KL_EPI_CLIP, /* lo, hi */
    KL_EPI_ACT,  /* a smooth activation: act (kl_act); lo, hi its alpha,
                  * beta (hard_sigmoid) */
} kl_epi_kind;

/* The activations an epilogue computes beyond relu and clip, with their
 * epilogue names (the graph format's layer names, docs/models.md), each
 * defined on the real x:
 *   sigmoid       1 / (1 + e^-x)
 *   silu          x * sigmoid(x)
 *   hard_swish    x * clamp(x + 3, 0, 6) / 6
 *   hard_sigmoid  clamp(alpha x + beta, 0, 1) (ONNX's alpha 0.2, beta 0.5
 *                 unless written hard_sigmoid(ALPHA, BETA))
 *   gelu          0.5 x (1 + erf(x / sqrt(2)))
 *   gelu_tanh     0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * Float workloads only. A kernel computes them in f32 (an exp or erf
 * within a few ulp); the reference interpreter in double. */
typedef enum {
    KL_ACT_SIGMOID,
    KL_ACT_SILU,
    KL_ACT_HARD_SWISH,
    KL_ACT_HARD_SIGMOID,
    KL_ACT_GELU,
    KL_ACT_GELU_TANH,
    KL_ACT_COUNT
} kl_act;

#define KL_ACT_HSIG_ALPHA 0.2
#define KL_ACT_HSIG_BETA 0.5

/* The activation's name ("silu"); NULL for a bad value. */
const char *kl_act_name(kl_act a);
/* The activation named name; false when none is. */
bool kl_act_parse(const char *name, kl_act *out);
/* "sigmoid, silu, hard_swish, hard_sigmoid, gelu or gelu_tanh", for
 * messages. */
const char *kl_act_list(void);
/* The activation at x, in double, from its definition above (alpha and
 * beta used by hard_sigmoid only). */
double kl_act_eval(kl_act a, double alpha, double beta, double x);

/* Integer workloads only: v = nearbyintf((float)v * scale) + zp, the scale
 * a number (lo, an f32 value) or an f32 tensor (access). Defined beside the
 * enum, not in it, for now: the CUDA generator switches over kl_epi_kind
 * without a default and never sees an integer workload (its rules refuse
 * every non-f32 dtype); move them into the enum once it handles them. */
#define KL_EPI_REQUANT ((kl_epi_kind)(KL_EPI_ACT + 1))
#define KL_EPI_REQUANT_TENSOR ((kl_epi_kind)(KL_EPI_ACT + 2))

typedef struct {
    kl_epi_kind kind;
    kl_access_t access; /* *_TENSOR */
    double lo, hi;      /* CLIP; *_CONST and REQUANT use lo; ACT */
    int64_t zp;         /* REQUANT*: the output zero point */
    kl_act act;         /* ACT */
} kl_epilogue_t;

typedef struct {
    /* Spatial iterators first, in output order, then the reductions in
     * order of first use in the body. */
    int niters;
    kl_iter_t iters[KL_IR_MAX_ITERS];
    int ntensors; /* inputs in order of appearance, output last */
    kl_tensor_t tensors[KL_IR_MAX_TENSORS];
    kl_access_t out; /* output access: spatial iterators only */
    kl_reduce reduce;
    kl_expr_t *body; /* owned */
    int nepi;
    kl_epilogue_t epi[KL_IR_MAX_EPILOGUE];
    char op_kind[KL_IR_MAX_NAME]; /* "matmul", "conv2d", ... or "custom" */
    /* "conv2d_1_64_56_56_64_3_3_s1_p1"; for parsed text "custom_" and the
     * key's first 8 hex digits. Owned. */
    char *name;
    char *canonical; /* owned */
    uint8_t key[16];
    double flop; /* exact; padding reads are not FLOPs */
} kl_workload_t;

/* Parses text. On error returns KL_ERR_INVAL (with *out NULL) and a message
 * that starts with the 1-based column and says what was expected, e.g.
 * "column 17: expected ']' after index list", "column 9: unknown iterator
 * 'q': iterator q has no extent in 'where'", "column 20: tensor A used with
 * 2 and 3 dimensions". On success *out is owned by the caller
 * (kl_workload_free); op_kind is "custom". */
int kl_workload_parse(const char *text, kl_workload_t **out, char *err);

/* Builds a named operator from its CLI form, e.g.
 *   "matmul M=1024 N=1024 K=1024"
 *   "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1"
 * Ops and parameters (defaults in brackets):
 *   matmul M N K [bias=0 residual=0 relu=0 in=f32]
 *                                          C[M,N] = A[M,K] B[K,N]
 *   batch_matmul B M N K [in=f32]          C[b,M,N] = A[b,M,K] B[b,K,N]
 *   dense N I O [bias=1 residual=0 relu=0 in=f32]
 *                                          Y[N,O] = X[N,I] W[O,I] (+ b[O])
 * residual=1 adds Res (the output's shape, f32) after the bias and before
 * the activation, as conv2d's does (names end "_res").
 * in=f16 or in=bf16 declares the two multiplied inputs with that dtype;
 * the output (and a bias) stay f32: the products are accumulated in f32
 * (the tensor-core form, docs/architecture.md). The name ends "_f16" /
 * "_bf16"; in=f32 is the default and changes nothing.
 *   conv2d N C H W K R S [stride=1 pad=0 dilation=1 groups=1
 *          layout=NCHW|NHWC bias=0 relu=0 residual=0 in=f32]
 *          (in=bf16 / f16: X and W of that dtype, as above; bias,
 *          residual and output f32)
 *   depthwise_conv2d N C H W R S [stride pad dilation multiplier=1 ...]
 *   conv2d_transpose N C H W K R S [stride pad output_pad=0]
 *          (the gradient of conv2d w.r.t. its input: C input channels of
 *          size HxW, K output channels)
 *   max_pool2d / avg_pool2d N C H W R S [stride=R pad=0]
 *   add shape=AxBxC, relu shape=AxBxC        (up to 8 dimensions)
 *   clip shape=AxBxC lo=LO hi=HI             Y = X | clip(LO, HI)
 *   qmatmul M N K, qdense N I O, qconv2d (conv2d's parameters),
 *   qdepthwise_conv2d (depthwise_conv2d's): quantized (see "Integer
 *          workloads" above), with za=0 (activation zero point, 0..255),
 *          zo=0 (output zero point, in the output's range), out=u8|s8|s32,
 *          scale=channel|NUMBER (per-channel f32 [O] tensor `scale`, or
 *          one positive number), bias= (const s32 [O]; default as the
 *          float op: 1 for qdense, 0 otherwise) and relu= / clip=
 *          (quantized bounds: relu is clip(zo, max), clip=LO,HI integers;
 *          with out=s32 relu is relu). ABI order: X (A), W (B), [bias],
 *          [scale], Y (C); X u8, W const s8 (qmatmul's B too), the output
 *          declared with its dtype. qconv2d takes groups and layout too;
 *          residual is refused.
 * Layouts (all NCHW unless said): conv2d weight [K,C/groups,R,S]; NHWC
 * takes X [N,H,W,C] and weight [R,S,C/groups,K] (HWIO). With groups > 1
 * the output channel is split into (group, channel) iterators, so Y is
 * declared [N,G,K/G,P,Q] (NHWC: [N,P,Q,G,K/G]): the same memory as the 4-D
 * tensor. bias is bias[K]; residual is a tensor Res shaped like Y; the
 * epilogue order is bias, residual, relu. matmul, dense, conv2d and
 * depthwise_conv2d also take clip=LO,HI (two finite numbers, LO <= HI):
 * the epilogue clip(LO, HI) in relu's place, a clamp to [LO, HI] (ReLU6 is
 * clip=0,6); relu=1 and clip= together are an error. They take act=A
 * too, A one of kl_act's names (sigmoid, silu, hard_swish, hard_sigmoid,
 * gelu, gelu_tanh): the epilogue A in relu's place, the name ending "_A"
 * (hard_sigmoid takes alpha= and beta=, default 0.2 and 0.5, and a name
 * ending "_hard_sigmoid_aALPHA_bBETA" when they differ); act= with relu=1
 * or clip= is an error, as is act= on a q-op. depthwise_conv2d
 * has weight [C*M,1,R,S] (M = multiplier; with M > 1, Y is
 * [N,C,M,P,Q]).
 * conv2d_transpose is PyTorch's ConvTranspose2d: weight [C,K,R,S],
 * Y [N,K,(H-1)*stride-2*pad+R+output_pad, ...], output_pad < stride,
 * written with the exact '(y+pad-r)/stride' gather. max_pool2d skips padded
 * points (pad < R and S); avg_pool2d sums the window and multiplies by
 * 1/(R*S) (padding counted, count_include_pad). The ABI argument order is
 * X, W, [bias], [Res], Y (conv); A, B, [bias], C (matmul); X, W, [b], Y
 * (dense).
 * Sets op_kind (the op's name) and name. Errors return KL_ERR_INVAL with a
 * message naming the bad parameter: "conv2d: missing K", "conv2d: groups=3
 * does not divide C=64", "matmul: unknown parameter 'bogus'". */
int kl_workload_from_op(const char *spec, kl_workload_t **out, char *err);

/* Either form: text starting with a known op name goes to _from_op, the
 * rest to _parse. */
int kl_workload_from_string(const char *s, kl_workload_t **out, char *err);

/* The named operators kl_workload_from_op builds, for a list or a help
 * text: the name of operator i (0, 1, ...) and, when params is not NULL,
 * its parameters as above ("M N K [bias=0 ...]"); NULL past the last.
 * The strings are static. */
const char *kl_workload_op(int i, const char **params);

void kl_workload_free(kl_workload_t **self_p);
kl_workload_t *kl_workload_clone(const kl_workload_t *w);

/* Index helpers. */
int kl_workload_output(const kl_workload_t *w);  /* tensor index */
int kl_workload_ninputs(const kl_workload_t *w); /* = ntensors - 1 */
int64_t kl_tensor_numel(const kl_tensor_t *t);
/* The bytes of the largest constant input that w's body reads without
 * iterator it (a matmul's B across its rows: every row tile reads all of
 * it again), 0 when there is none. */
int64_t kl_workload_const_across(const kl_workload_t *w, int it);
/* Whether a reads its tensor through a window: some dimension indexed by
 * two iterators or more (conv2d's h + r). */
bool kl_access_is_window(const kl_workload_t *w, const kl_access_t *a);
/* Whether a's window, if any, is trivial: no dimension indexed by two
 * iterators of more than one point (a 1x1 convolution reads X[n, c, y +
 * r, x + s] with r and s of extent 1: the pixels directly). */
bool kl_access_window_trivial(const kl_workload_t *w, const kl_access_t *a);
size_t kl_dtype_size(kl_dtype dt);
const char *kl_dtype_name(kl_dtype dt); /* "f32", "u8", "s32" */
/* The C type of an element of dt in generated C: "uint8_t", "int8_t",
 * "int32_t", "float" for any other. */
const char *kl_dtype_ctype(kl_dtype dt);
bool kl_dtype_is_int(kl_dtype dt); /* u8, s8, s32 */
/* Parses a dtype name (f32 f16 bf16 u8 s8 s32, i32 = s32); false when it
 * is none. */
bool kl_dtype_parse(const char *name, kl_dtype *out);
/* An integer workload: its output is u8, s8 or s32 (see above). */
bool kl_workload_is_int(const kl_workload_t *w);
/* A bf16 workload: an input is bf16 (in=bf16: the multiplied inputs),
 * its output is not an integer. On the CPU its tensors are stored as f32
 * and each read of a bf16 one means the value rounded to bf16. */
bool kl_workload_is_bf16(const kl_workload_t *w);
/* The CPU features (KL_CPU_FEAT_* of common/kl_target.h) a kernel of w
 * may use, which refine its "cpu" target (kl_target_resolve_for): an
 * integer workload VNNI | AVXVNNI | AMX, a bf16 one BF16 | AMX, any other
 * 0. */
unsigned kl_workload_cpu_feats(const kl_workload_t *w);
/* The reduction length: the product of w's reduction extents (K of a
 * matmul, C/groups * R * S of a conv2d; 1 without reductions). */
int64_t kl_workload_red_len(const kl_workload_t *w);
/* The relative tolerance the verification of w's kernels uses, given the
 * evaluator's rtol (docs/cli.md, "Verification"; the one place it is
 * derived): rtol itself for every workload but a bf16 one, and for a bf16
 * one max(rtol, KL_BF16_RTOL_C * K * 2^-24), K = kl_workload_red_len(w).
 * Why: a bf16 kernel reads the same bf16 values the reference does (the
 * agent's inputs are bf16-representable), and a product of two bf16 is
 * exact in f32 (8 + 8 significant bits), so the two differ only in how
 * they add K products in f32. Each of the K - 1 additions of one sum
 * rounds by at most u = 2^-24 of its partial sum; with partial sums within
 * S of zero the sum errs by at most (K - 1) u S, the difference of two
 * sums (kernel, reference) by 2 K u S. The agent compares
 * |got - expected| with rtol (|expected| + rms); for its zero-mean random
 * inputs the partial sums stay within 4 (|expected| + rms) (a random
 * walk's running maximum is a few times its end's spread), hence
 * c = 2 x 4 = 8. With the default rtol 1e-3 it rules from K = 2098 on:
 * K = 64 and 576 keep 1e-3, K = 4608 (a 3x3 conv of 512 channels) gets
 * 8 * 4608 * 2^-24 = 2.197e-3. */
#define KL_BF16_RTOL_C 8
double kl_workload_rtol(const kl_workload_t *w, double rtol);
/* f16 / bf16 storage: the 16 bits of v rounded to nearest even (f16
 * overflows to infinity, keeps subnormals), and the float those bits hold.
 * kl_dtype_round(dt, v) is v as dt holds it (v itself for f32). */
uint16_t kl_dtype_bits(kl_dtype dt, float v);
float kl_dtype_value(kl_dtype dt, uint16_t bits);
double kl_dtype_round(kl_dtype dt, double v);

/* The argument list in ABI order (inputs, then the output) as the
 * "A:f32[256,256] B:f32[256,256] C:f32[256,256]:out" text used by
 * `kiln measure --args`; heap string. */
char *kl_workload_args_text(const kl_workload_t *w);

/* Reference interpreter: computes the output from the inputs in double
 * precision, straight from the definition (zero for out-of-range reads,
 * respecting the division form; skipped points under 'max='), and stores
 * it as f32. Slow (some 3*10^7 body evaluations a second); for tests and
 * small shapes. bufs follow ABI order, all f32 (whatever the declared
 * dtype), dense row-major; every read of an f16 or bf16 tensor is first
 * rounded to that dtype (kl_dtype_round), so the result is the operator on
 * the values such tensors can hold, accumulated in double, stored as f32. */
void kl_workload_eval(const kl_workload_t *w, float *const *bufs);

/* The same with each buffer in its declared type: uint8_t / int8_t /
 * int32_t for u8 / s8 / s32, float for f32 (f16 and bf16 tensors are
 * float here too, as above). Integer workloads are exact: the body, its
 * reduction and the epilogue as defined above (int32 arithmetic, requant's
 * rounding, saturation on store), bit-equal to any correct kernel. */
void kl_workload_eval_typed(const kl_workload_t *w, void *const *bufs);

#endif
