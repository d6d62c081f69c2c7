/* export_int.h - shared between the files of coordinator/export. */
#ifndef KL_EXPORT_INT_H
#define KL_EXPORT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_ir.h"
#include "kl_graph.h"
#include "kl_util.h"

/* The perm= of transpose layer nd, read again from its line of the graph
 * text (the parsed graph keeps only the output shape). */
int kl_export__perm(const char *text, const kl_mnode_t *nd, int *perm,
                    char *err);
/* The permutation perm of a tensor of nd dims shape, simplified into sh
 * and pm: the dims of size 1 dropped, then each run of x's dims that stay
 * neighbours in the output merged into one. Returns the number of dims
 * left; 0 or 1 when the transpose keeps every element where it was (a
 * view of its input). */
int kl_export__perm_reduce(int nd, const int64_t *shape, const int *perm,
                           long long *sh, int *pm);

/* A parameter of an exported model: a graph input, or a layer's weight,
 * bias or requant scale (whose values go into kiln_model.weights). */
typedef struct {
    char *name;
    int64_t numel;
    int ndim;
    int64_t shape[KL_IR_MAX_DIMS];
    bool input;
    kl_dtype dt;    /* f32; a q-op's weight s8, its bias s32 */
    int64_t offset; /* bytes into the weights; -1 for an input */
    /* An NHWC q-conv's weight, laid out [R,S,C,K] from the model's own
     * [K,C,R,S] (these four; kcrs[0] == 0: the same order). */
    int64_t kcrs[4];
} kl_export__param_t;

/* Lays the weights out (each at a multiple of 64 bytes, setting every
 * non-input's offset) and checks the model's own parameters ps, when it
 * has any (*trained), against the graph's: each found by name, with the
 * same count and element type (else KL_ERR_INTERNAL naming it). */
int kl_export__weights_plan(kl_export__param_t *params, int n,
                            const kl_model_params_t *ps, const char *src,
                            bool *trained, char *err);

/* Writes DIR/kiln_model.weights (the model's own values when trained,
 * else seeded random ones, kiln_model.h "Weights") and DIR/kiln_weights.S,
 * whose path is appended to *paths. */
int kl_export__weights_write(const kl_export__param_t *params, int n,
                             const kl_model_params_t *ps, bool trained,
                             const char *dir, char ***paths, int *np,
                             char *err);

/* Value layouts (kl_mgraph_layout): the helpers kiln_model.c's
 * conversions call, s_to_nhwc / s_to_nchw (arguments x, y, N, C, H*W and
 * the element's bytes, 1 or 4). */
extern const char kl_export__layout_helpers_c[];

/* Integer shortcuts (export_qfuse.c; the groups: kl_mgraph_qfuse_plan).
 * The call of group plan[i] (in: the C expressions of the integer tensors
 * the dequantize layers read, out: the quantize's buffer); heap string. */
char *kl_export__qfuse_call(const kl_mgraph_t *g, int i, const kl_qfuse_t *f,
                            const char *const *in, const char *out);
/* The helpers the plan's groups call (after kiln_model.c's S_PAR). */
void kl_export__qfuse_helpers(const kl_mgraph_t *g, const kl_qfuse_t *plan,
                              kl_buf_t *b);

/* The general layers (export_general.c): the call of layer i of g, a
 * general op but const, or an add of two shapes that broadcast (in: the C
 * expressions of its inputs' NCHW values, out: its buffer); heap string.
 * kl_export__general_used: whether g has such a layer or a gelu
 * approximate=tanh, whose helpers (export_text_general.c,
 * kl_export__general_helpers_c) kiln_model.c then has after S_PAR. */
char *kl_export__general_call(const kl_mgraph_t *g, int i,
                              const char *const *in, const char *out);
bool kl_export__general_used(const kl_mgraph_t *g);
extern const char kl_export__general_helpers_c[];

/* kiln_model.c's tables of the n parameters (names, sizes, shapes,
 * element types, offsets into the embedded weights; export_weights.c). */
void kl_export__param_tables(const kl_export__param_t *params, int n,
                             kl_buf_t *b);

/* kiln_model.h as written (the library's API, its documentation), and the
 * helpers kiln_model.c starts with (clock, threads' threshold S_PAR, the
 * untuned layers); export_text.c. */
extern const char kl_export__model_h[];
extern const char kl_export__helpers_c[];
/* After kiln_model.c's includes: its functions (the untuned layers; no
 * tuned kernel is in this file) compile without trapping math. GCC then
 * turns the float selects of kl_expf, the clamps and the NaN test, into
 * blends and vectorizes softmax, sigmoid, silu and gelu_tanh; with
 * trapping math it keeps them as branches and those loops scalar (the
 * encoder's softmax 0.55 ms against 0.11 on Zen 3). Nothing reads the
 * floating-point exception flags; clang already compiles so. */
#define KL_EXPORT_NO_TRAP                                                      \
    "#if defined(__GNUC__) && !defined(__clang__)\n"                           \
    "#pragma GCC optimize(\"no-trapping-math\")\n"                             \
    "#endif\n\n"
/* The activations' helpers (s_sigmoid ... s_silu; kl_mop_is_act), only
 * in a library with such a layer. */
extern const char kl_export__act_helpers_c[];
/* For a library with an AMX kernel only: kiln_model.h's "AMX" paragraph
 * and kiln_model_amx_error (before its #endif), and kiln_model.c's s_amx,
 * which asks Linux for the tile state once (the arch_prctl calls of
 * common/kl_amx.c, inline: the library needs none of kiln's) and returns
 * 0, or 3 with the reason in kiln_model_amx_error. */
extern const char kl_export__amx_h[];
extern const char kl_export__amx_c[];
/* s_prepared, the helper of the prepared blocks (kiln_model.h, "Constant
 * inputs"), and the kernels' shared per-call scratch (the C prelude's
 * kl_scratch_claim: the same object, named in kiln_model.c so that
 * kiln_model_release frees it with the blocks). */
extern const char kl_export__prepared_c[];
extern const char kl_export__scratch_c[];

/* Appends kiln_model.c's quantize / dequantize helpers for u8 and s8
 * (after S_PAR; ONNX QuantizeLinear and DequantizeLinear, per tensor):
 * x / scale in f32 (a division, as ONNX defines it), rounded half to even
 * by nearbyintf in the default rounding mode, plus the zero point,
 * saturated to the type (NaN to its lowest); (x - zp) * scale back. */
void kl_export__qcast_helpers(kl_buf_t *b);

/* The arena of kiln_model.c's intermediate values (export_arena.c): the
 * values b_I, bh_I and bn_I of a graph of nnodes nodes, declared with
 * their C element type and size; each layer's code, in order, to find
 * where each value is alive; then kl_export__arena_plan gives each an
 * offset (values alive at the same layer never share bytes; with share
 * false none do: one buffer per value) and returns
 * the arena's size, and kl_export__arena_code writes the arena and one
 * #define per value. _sum: the bytes one buffer per value would take;
 * _offset: a value's offset after the plan, -1 for an undeclared name. */
typedef struct kl_export__arena kl_export__arena_t;
kl_export__arena_t *kl_export__arena_new(int nnodes);
void kl_export__arena_free(kl_export__arena_t *a);
void kl_export__arena_decl(kl_export__arena_t *a, const char *name,
                           const char *ctype, long long bytes,
                           const char *comment);
void kl_export__arena_use(kl_export__arena_t *a, int layer, const char *code);
long long kl_export__arena_plan(kl_export__arena_t *a, bool share);
long long kl_export__arena_sum(const kl_export__arena_t *a);
long long kl_export__arena_offset(const kl_export__arena_t *a,
                                  const char *name);
void kl_export__arena_code(const kl_export__arena_t *a, kl_buf_t *b);

#endif
