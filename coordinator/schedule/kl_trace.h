/* kl_trace.h - traces: programs of schedule instructions with random
 * variables, decisions and control flow.
 *
 * A *program* is what a design-space rule builds: a list of instructions
 * over random variables (RVs, numbered from 0), possibly with
 * `reject_if(pred)` and `if (pred) {...} else {...}`, and without
 * decisions. *Executing* it on a naive schedule with an RNG applies the
 * primitives and makes every sampling instruction draw a decision; the
 * result is a *trace*: the same instructions, each sampling instruction with
 * its decision, each `if` with the branch it took (decision [1] then,
 * [0] else). Executing a trace replays it: the decisions are used instead of
 * the RNG, the branch is re-evaluated (it must agree with the recorded one)
 * and only the taken branch runs; the other branch stays in the trace as
 * program text. Replaying a trace gives the same loop nest and so the same
 * source, byte for byte. A trace whose decisions were removed
 * (kl_trace_strip_decisions) samples fresh ones.
 *
 * RVs have three kinds, written with a letter in the text form: loops
 * (l7), integers (v3) and stages (b5). The number is the RV number; the
 * letter only helps the reader.
 *
 * Text form, one instruction per line (bodies of if/else on one line or
 * several):
 *
 *   l0, l1, l2 = get_loops()
 *   v3, v4, v5, v6 = sample_perfect_tile(l0, n=4, max_innermost=16) -> [4, 8,
 * 2, 16] l7, l8, l9, l10 = split(l0, v3, v4, v5, v6) v11 =
 * sample_categorical(values=[0, 1], probs=[0.5, 0.5]) -> 1 reject_if(v6 * v4 >
 * 24) if (v6 >= 8) { reorder(l7, l8) } else { reorder(l8, l7) } -> 1 b12 =
 * cache_write(scope="local") b13 = cache_read(tensor="B", scope="packed") l14 =
 * sample_compute_location(b13, l7, l8) -> 0 compute_at(b13, l14)
 *   reverse_compute_at(b12, l9)
 *   l15 = fuse(l7, l8)
 *   parallel(l15)
 *   vectorize(l10)
 *   unroll(l9)
 *   bind(l15, kind="blockIdx.x")
 *   annotate(l15, key="unroll_max_step", value=64)
 *   winograd(m=2)
 *   tensorize(l9, intrin="avx512_vnni")
 *
 * Split factors are RVs, integer literals (`split(l0, v3, 4)`) or, for at
 * most one factor, `?`: inferred as ceil(extent / product of the others),
 * which makes the split imperfect (guarded) when that does not divide.
 *
 * Predicates: integers, RV names (an integer RV stands for its value, a
 * loop RV for its extent), + - * / % (C semantics, division by zero is an
 * error), < <= > >= == !=, && || !, parentheses. Parse errors name the
 * 1-based column: "predicate column 7: expected an operand".
 *
 * Proto form: kiln.Trace (proto/kiln.proto), one kiln.Inst per
 * instruction: op, inputs (RV numbers; a split factor literal f is stored
 * as the input -f, an inferred factor as KL_SPLIT_INFER), int_attrs, str_attrs,
 * float_attrs, outputs, decision, predicate, then_body, else_body. The trace
 * hash is kl_hash128 of the packed proto bytes, which protobuf-c writes
 * deterministically.
 */
#ifndef KL_TRACE_H
#define KL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_sched.h"
#include "kl_util.h"

#define KL_INST_MAX 64
#define KL_PRED_MAX 256
/* A split factor inferred from the extent and the other factors. */
#define KL_SPLIT_INFER INT64_MIN

typedef enum {
    KL_OP_GET_LOOPS = 0,
    KL_OP_SPLIT,
    KL_OP_REORDER,
    KL_OP_FUSE,
    KL_OP_PARALLEL,
    KL_OP_VECTORIZE,
    KL_OP_UNROLL,
    KL_OP_BIND,
    KL_OP_CACHE_READ,
    KL_OP_CACHE_WRITE,
    KL_OP_COMPUTE_AT,
    KL_OP_REVERSE_COMPUTE_AT,
    KL_OP_ANNOTATE,
    KL_OP_SAMPLE_PERFECT_TILE,
    KL_OP_SAMPLE_CATEGORICAL,
    KL_OP_SAMPLE_COMPUTE_LOCATION,
    KL_OP_REJECT_IF,
    KL_OP_IF,
    KL_OP_WINOGRAD,
    KL_OP_TENSORIZE,
    KL_OP__COUNT
} kl_op;

/* The op's name as in the text and proto forms ("split"); NULL when out of
 * range. kl_op_parse returns 0 or KL_ERR_INVAL. */
const char *kl_op_name(kl_op op);
int kl_op_parse(const char *name, kl_op *out);

typedef struct kl_inst_s kl_inst_t;

/* One instruction. Which fields an op uses:
 *   get_loops               out: loops
 *   split                   in: loop, factors (RV or -literal); out: loops
 *   reorder                 in: loops
 *   fuse                    in: loops; out: loop
 *   parallel/vectorize/unroll in: loop
 *   bind                    in: loop; strs[0]: kind name
 *   cache_read              strs: tensor name, scope; out: stage
 *   cache_write             strs[0]: scope; out: stage
 *   compute_at, reverse_compute_at in: stage, loop
 *   annotate                in: loop; strs[0]: key; ints[0]: value
 *   sample_perfect_tile     in: loop; ints: n, max_innermost[, whole];
 *                           out: n ints; decision: the n factors. whole
 *                           (text `whole=P`, absent when 0): the percent
 *                           chance that a draw puts the whole extent
 *                           innermost ([1, .., 1, extent]) instead of
 *                           spreading its prime factors at random
 *   sample_categorical      ints: values; floats: probs; out: one int;
 *                           decision: [index into values]
 *   sample_compute_location in: stage, candidate loops; out: loop;
 *                           decision: [index into the candidates]
 *   reject_if               pred
 *   if                      pred, then_body, else_body; decision: [1|0]
 *   winograd                ints[0]: output tile m (kl_sched_winograd)
 *   tensorize               in: loop; strs[0]: intrinsic (kl_intrin.h)
 */
struct kl_inst_s {
    kl_op op;
    int nin;
    int64_t in[KL_INST_MAX];
    int nout;
    int64_t out[KL_INST_MAX];
    int nints;
    int64_t ints[KL_INST_MAX];
    int nfloats;
    double floats[KL_INST_MAX];
    int nstrs;
    char strs[2][32];
    bool has_decision;
    int ndec;
    int64_t dec[KL_INST_MAX];
    char pred[KL_PRED_MAX];
    int nthen, nelse;
    kl_inst_t *then_body; /* owned arrays */
    kl_inst_t *else_body;
};

typedef struct kl_trace_s kl_trace_t;

/* A new, empty program/trace; `space` names the design space that made it
 * (may be NULL). */
kl_trace_t *kl_trace_new(const char *space);
void kl_trace_free(kl_trace_t **self_p);
kl_trace_t *kl_trace_clone(const kl_trace_t *t);

const char *kl_trace_space(const kl_trace_t *t);
/* Top-level instructions. kl_trace_inst returns a pointer that the caller
 * may modify (mutators change decisions); valid until the trace changes. */
int kl_trace_ninsts(const kl_trace_t *t);
kl_inst_t *kl_trace_inst(kl_trace_t *t, int i);
const kl_inst_t *kl_trace_inst_c(const kl_trace_t *t, int i);
/* Number of sampling instructions (with decisions) in the taken path. */
int kl_trace_ndecisions(const kl_trace_t *t);
/* Removes every decision (including if branches taken). */
void kl_trace_strip_decisions(kl_trace_t *t);
/* Removes the decisions of every untaken branch (recursively), so that
 * traces of the same choices are equal (and hash equally). */
void kl_trace_canonicalize(kl_trace_t *t);

/* ---- building a program ----
 * Each builder appends one instruction to the innermost open body and
 * returns the RV numbers it defines through outs. The RV numbers are
 * fresh. Factors of split: an RV number >= 0, a literal f >= 1 passed as
 * -f, or KL_SPLIT_INFER (at most once). Builders return 0, or KL_ERR_INVAL for
 * a bad argument (a predicate that does not parse, a body nesting error). */
void kl_tr_get_loops(kl_trace_t *t, int nloops, int64_t *outs);
void kl_tr_split(kl_trace_t *t, int64_t loop, const int64_t *factors, int n,
                 int64_t *outs);
void kl_tr_reorder(kl_trace_t *t, const int64_t *loops, int n);
int64_t kl_tr_fuse(kl_trace_t *t, const int64_t *loops, int n);
void kl_tr_parallel(kl_trace_t *t, int64_t loop);
void kl_tr_vectorize(kl_trace_t *t, int64_t loop);
void kl_tr_unroll(kl_trace_t *t, int64_t loop);
void kl_tr_bind(kl_trace_t *t, int64_t loop, kl_loop_kind kind);
int64_t kl_tr_cache_read(kl_trace_t *t, const char *tensor, kl_scope scope);
int64_t kl_tr_cache_write(kl_trace_t *t, kl_scope scope);
void kl_tr_compute_at(kl_trace_t *t, int64_t stage, int64_t loop);
void kl_tr_reverse_compute_at(kl_trace_t *t, int64_t stage, int64_t loop);
void kl_tr_annotate(kl_trace_t *t, int64_t loop, const char *key,
                    int64_t value);
void kl_tr_winograd(kl_trace_t *t, int m);
void kl_tr_tensorize(kl_trace_t *t, int64_t loop, const char *intrin);
void kl_tr_sample_perfect_tile(kl_trace_t *t, int64_t loop, int n,
                               int64_t max_innermost, int64_t *outs);
/* The same with whole: the percent chance (0..100) of the whole extent
 * innermost (a matmul's rows all below a weight panel's loops). */
void kl_tr_sample_perfect_tile_whole(kl_trace_t *t, int64_t loop, int n,
                                     int64_t max_innermost, int64_t whole,
                                     int64_t *outs);
int64_t kl_tr_sample_categorical(kl_trace_t *t, const int64_t *values,
                                 const double *probs, int n);
int64_t kl_tr_sample_compute_location(kl_trace_t *t, int64_t stage,
                                      const int64_t *cands, int n);
int kl_tr_reject_if(kl_trace_t *t, const char *pred, char *err);
/* if (pred) { ... kl_tr_else ... } kl_tr_end: opens a then-body; builders
 * append to it until kl_tr_else switches to the else-body and kl_tr_end
 * closes the if. */
int kl_tr_if(kl_trace_t *t, const char *pred, char *err);
int kl_tr_else(kl_trace_t *t, char *err);
int kl_tr_end(kl_trace_t *t, char *err);

/* ---- executing ----
 * Runs t on s (normally a naive schedule). Sampling instructions with a
 * decision use it (after checking it: factors whose product is the extent,
 * an index in range); those without draw one from rng (error when rng is
 * NULL). *executed (optional) receives the trace with every decision
 * filled in (only when the result is 0 and not rejected). Returns:
 *   0 and *rejected = false: s holds the scheduled nest;
 *   0 and *rejected = true: a reject_if held (err says which); s is in an
 *     unspecified state and should be dropped;
 *   KL_ERR_INVAL: an instruction failed (a primitive's precondition, an
 *     RV of the wrong kind, a bad decision); err names the instruction
 *     ("inst 7 split: ...").
 * When sampling at random, callers treat KL_ERR_INVAL like a rejection. */
int kl_trace_apply(const kl_trace_t *t, kl_sched_t *s, kl_rng_t *rng,
                   kl_trace_t **executed, bool *rejected, char *err);

/* ---- serialization ---- */

/* Packed kiln.Trace bytes into a heap buffer (*buf, *len). */
void kl_trace_to_proto(const kl_trace_t *t, uint8_t **buf, size_t *len);
/* Decodes kiln.Trace bytes; KL_ERR_PROTO when they do not decode or name an
 * unknown op / exceed the limits above. */
int kl_trace_from_proto(const uint8_t *buf, size_t len, kl_trace_t **out,
                        char *err);
/* The text form described above; heap string. */
char *kl_trace_to_text(const kl_trace_t *t);
/* Parses the text form; KL_ERR_INVAL naming the 1-based line and column
 * on malformed text. */
int kl_trace_from_text(const char *text, kl_trace_t **out, char *err);
/* kl_hash128 of the proto bytes. */
void kl_trace_hash(const kl_trace_t *t, uint8_t out[16]);

/* ---- predicates ---- */

typedef struct kl_pred_s kl_pred_t;
/* Parses a predicate; KL_ERR_INVAL with "predicate column N: ..." */
int kl_pred_parse(const char *text, kl_pred_t **out, char *err);
void kl_pred_free(kl_pred_t **self_p);
/* Looks up the value of RV number rv; returns 0 or an error code with a
 * message in err. */
typedef int (*kl_pred_lookup_fn)(void *ctx, int64_t rv, int64_t *value,
                                 char *err);
/* Evaluates p; KL_ERR_INVAL on division by zero or an unknown RV. */
int kl_pred_eval(const kl_pred_t *p, kl_pred_lookup_fn lookup, void *ctx,
                 int64_t *value, char *err);

#endif
