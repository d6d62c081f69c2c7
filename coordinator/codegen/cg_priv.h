/* cg_priv.h - the C code generator's insides, shared by its files (not
 * part of the public contract). Calls go down only, from the top:
 *   codegen_cpu.c          kl_codegen_c, kl_codegen_reference (entries)
 *   codegen_wino.c         Winograd kernels around a nested product
 *   codegen_dw.c           depthwise convolution kernels
 *   codegen_dw_q.c         their quantized form's int32 epilogue
 *   codegen_c.c            the scheduled nest (kl_codegen__emit_function)
 *   codegen_pack.c         the loops that fill packed buffers, prepare
 *   codegen_expr.c         tensor reads, the body, guards, epilogues
 *   codegen_pack_layout.c  packed buffers' layouts and indices
 *   codegen_lin.c          linear forms and symbol states
 *   cg_emit.c              lines, failures, templates (cg_emit.h)
 *
 * Every loop part is a *symbol*; iterator values, tensor indices and
 * guards are linear forms over symbols. While the generator walks the nest
 * each symbol is unset, a C variable, or a constant (a loop unrolled at
 * generation time). The vectorized loop's symbol additionally spans
 * `lanes` consecutive values starting at its base. */
#ifndef CG_PRIV_H
#define CG_PRIV_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "cg_emit.h"
#include "kl_codegen.h"
#include "kl_util.h"

#define CG_MAXSYM 64

typedef enum { SYM_UNSET = 0, SYM_VAR, SYM_CONST } sym_state;

typedef struct {
    int pos, part;  /* loop position and part index */
    int iter;       /* workload iterator it feeds */
    int64_t stride; /* into that iterator */
    int64_t extent; /* of the part */
    int64_t inner;  /* product of the extents of later parts */
    sym_state st;
    int64_t value; /* SYM_CONST */
    char name[48]; /* SYM_VAR (a C expression) */
} cg_sym_t;

typedef struct {
    int64_t c;
    int64_t k[CG_MAXSYM];
} cg_lin_t;

typedef struct {
    const kl_sched_t *s;
    const kl_workload_t *w;
    const kl_target_t *t;
    kl_buf_t b;
    int ind;
    int n;
    const kl_loop_t *L[KL_SCHED_MAX_LOOPS];
    int nsym;
    cg_sym_t sym[CG_MAXSYM];
    int symbase[KL_SCHED_MAX_LOOPS]; /* first symbol of each loop */
    cg_lin_t it[KL_IR_MAX_ITERS];    /* iterator value */
    bool it_guarded[KL_IR_MAX_ITERS];
    int vpos;      /* position of the vectorized loop, -1 */
    int lanes;     /* lanes of the vector loop (1: scalar) */
    int wc_pos;    /* write cache attach position; -2: none */
    bool in_acc;   /* emitting below the write cache */
    bool lanes_on; /* the vector symbol spans lanes (off while packing) */
    bool lin_ok;   /* cleared when a linear form meets an unset symbol */
    int acc_pos[KL_SCHED_MAX_LOOPS]; /* spatial positions below wc */
    int nacc_pos;
    int pack_pos[KL_IR_MAX_TENSORS]; /* attach position, -2: none */
    /* Packed tensors (kl_codegen__pack_setup): the read, and the window
     * layout's box when pk_window. */
    const kl_access_t *pk_access[KL_IR_MAX_TENSORS];
    bool pk_window[KL_IR_MAX_TENSORS];
    int64_t pk_ilo[KL_IR_MAX_TENSORS][KL_IR_MAX_DIMS];
    int64_t pk_ext[KL_IR_MAX_TENSORS][KL_IR_MAX_DIMS];
    /* A constant tensor packed before the parallel loop is packed once, by
     * ENTRY_prepare (kl_abi.h), at pk_off floats into its block. */
    bool pk_prep[KL_IR_MAX_TENSORS];
    /* A window pack's channel block (1: none): pk_blk_n > 1 splits dimension
     * pk_blk_dim into [/ n] in place and [% n] innermost, walked by symbol
     * pk_blk_sym (the innermost reduction loop). */
    int64_t pk_blk_n[KL_IR_MAX_TENSORS];
    int pk_blk_dim[KL_IR_MAX_TENSORS], pk_blk_sym[KL_IR_MAX_TENSORS];
    int64_t pk_off[KL_IR_MAX_TENSORS];
    int64_t prep_elems; /* floats in the prepared block; 0: no prepare */
    bool in_prep;       /* emitting ENTRY_prepare */
    /* Emitting the inner product of a Winograd kernel (codegen_wino.c):
     * the function is static, its prepare step fills a block it is
     * given, and the prelude is already out. */
    bool nested;
    int rc;
    char *err;
} cg_t;

/* One line of source at g's indentation (kl_codegen__line). */
__attribute__((format(printf, 2, 3))) static inline void
kl_codegen__c_line(cg_t *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_codegen__vline(&g->b, g->ind, fmt, ap);
    va_end(ap);
}

/* Records g's first failure (kl_codegen__fail) and returns its code. */
__attribute__((format(printf, 3, 4))) static inline int
kl_codegen__c_fail(cg_t *g, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = kl_codegen__vfail(&g->rc, g->err, code, fmt, ap);
    va_end(ap);
    return rc;
}

/* Linear forms and symbols (codegen_lin.c): dst += mult * src. */
void kl_codegen__lin_add(cg_lin_t *dst, const cg_lin_t *src, int64_t mult);
/* The C text of f + lane * (coefficient of the vector symbol), folded. */
void kl_codegen__lin_print(const cg_t *g, const cg_lin_t *f, int lane,
                           kl_buf_t *out);
/* Range of f over the current symbol states (lanes included). */
void kl_codegen__lin_range(const cg_t *g, const cg_lin_t *f, int64_t *lo,
                           int64_t *hi);
/* Coefficient of the vector symbol in f (0 without a vector loop). */
int64_t kl_codegen__lin_vcoef(const cg_t *g, const cg_lin_t *f);
/* Symbols of the loop at pos: constants for value v, or unset. */
void kl_codegen__set_loop_const(cg_t *g, int pos, int64_t v);
void kl_codegen__unset_loop(cg_t *g, int pos);

/* Expressions (codegen_expr.c): the body's value at the current point as a C
 * expression of vector type (lanes > 1 and vec) or float. *valid (MAX
 * reductions) gets the validity condition text, or "" when always valid. */
void kl_codegen__body_value(cg_t *g, bool vec, kl_buf_t *out);
/* Scalar value at one lane with the validity test folded in (invalid
 * reads give 0; for MAX reductions an invalid point gives -INFINITY). */
void kl_codegen__body_lane(cg_t *g, int lane, kl_buf_t *out);
/* Whether the body can be evaluated as whole vectors (every read
 * contiguous or broadcast along the vector symbol, without per-lane
 * bounds tests, and not a MAX reduction with padding). */
bool kl_codegen__body_vectorizable(cg_t *g);
/* Flat index of an access as a linear form; false when a dimension
 * divides (strided gather) or an iterator needs clamping. */
bool kl_codegen__access_lin(cg_t *g, const kl_access_t *a, bool clamp,
                            cg_lin_t *out);
/* Flat index of an access at the current point and lane, as text.
 * Iterators that may exceed their extent are clamped when clamp. */
void kl_codegen__access_index(cg_t *g, const kl_access_t *a, int lane,
                              bool clamp, kl_buf_t *out);
/* Condition that the access is inside its tensor ("" when always). */
void kl_codegen__access_check(cg_t *g, const kl_access_t *a, int lane,
                              bool clamp, kl_buf_t *out);
/* Guards that can fail at this point, joined with &&, "" when none.
 * spatial / reduce select which guards to include. */
void kl_codegen__guards(cg_t *g, bool spatial, bool reduce, kl_buf_t *out);
/* Scalar epilogue applied to variable `var` at output lane `lane`. */
void kl_codegen__epilogue(cg_t *g, const char *var, int lane);
/* The whole epilogue on the vector variable var (g->lanes lanes) at the
 * current point: tensor reads broadcast, loaded or gathered along the
 * vector symbol, relu and clip as vector max / min, activations in their
 * vector forms; the same values as kl_codegen__epilogue lane by lane. */
void kl_codegen__epilogue_vec(cg_t *g, const char *var);
/* One operation of it on the vector var of L lanes; tv is the C vector
 * expression of a tensor operation's operand (unused by the others). */
void kl_codegen__epilogue_vec_op(cg_t *g, const kl_epilogue_t *ep,
                                 const char *var, int L, const char *tv);
/* One epilogue operation of w on var; idx is the flat index text of its
 * tensor read (*_TENSOR kinds). */
void kl_codegen__epilogue_op(cg_t *g, const kl_workload_t *w,
                             const kl_epilogue_t *ep, const char *var,
                             const char *idx);

/* Packed buffers' layouts (codegen_pack_layout.c). The body's read of tensor t:
 * the first one found; *count grows for each different one. */
const kl_access_t *kl_codegen__find_access(const kl_expr_t *e, int t,
                                           int *count,
                                           const kl_access_t *first);
/* Checks each packed tensor (read once, with one index) and chooses its
 * layout; 0, or the kl_codegen__c_fail code. Call once pack_pos is set. */
int kl_codegen__pack_setup(cg_t *g);
/* Elements of tensor t's packed buffer. */
int64_t kl_codegen__pack_elems(const cg_t *g, int t);
/* Index into the packed buffer of read a at the current point. */
void kl_codegen__pack_lin(const cg_t *g, const kl_access_t *a, cg_lin_t *out);
/* Whether symbol si is a dimension of t's loop layout. */
bool kl_codegen__pack_layout_sym(const cg_t *g, int t, int si);
/* Index d of read a split at the attach point pa: the part over the
 * symbols of loops below it (*in, no constant) and the rest (*out). */
void kl_codegen__pack_dim_parts(const cg_t *g, const kl_access_t *a, int d,
                                int pa, cg_lin_t *in, cg_lin_t *out);
/* The loops that fill packed buffers (codegen_pack.c). */
/* The loops that fill the packed buffers attached at pos (-1: root). */
void kl_codegen__emit_packs_at(cg_t *g, int pos);
/* Prefetches for the "prefetch" annotation of the loop at pos (dist
 * floats ahead in each packed buffer read below it). */
void kl_codegen__emit_prefetch(cg_t *g, int pos, int64_t dist);
/* Whether some buffer is packed below the root (per thread). */
bool kl_codegen__has_inner_packs(const cg_t *g);

/* Emits ENTRY_prepare (kl_abi.h): the constant tensors packed before the
 * parallel loop, packed once into one block. Call when prep_elems > 0. */
void kl_codegen__emit_prepare(cg_t *g, const char *entry);

/* The prelude every C kernel starts with (codegen_prelude.c). */
extern const char kl_codegen__prelude[];
/* The scheduled nest as `void entry(void *const *args)` (static when
 * g->nested), after its prepare step when it has one. */
void kl_codegen__emit_function(cg_t *g, const char *entry);
/* A Winograd kernel (codegen_wino.c): the derived product's nest as
 * ENTRY_gemm, wrapped in the transforms as ENTRY and ENTRY_prepare. */
int kl_codegen__emit_winograd(cg_t *g, const char *entry);
/* Appends `static inline void kl_tr16(kl_v16 *r)` (r[i][j] = r[j][i];
 * guarded, so a file may hold it twice); codegen_wino.c. */
void kl_codegen__transpose16_fn(cg_t *g);
/* Emits the loop that turns one row (w floats) of 16 channels from c0
 * (C variables src: channel c0's row, and c0) of tensor x (end floats;
 * c channels, plane floats apart) into pixel vectors of 16 channels,
 * through kl_tr16: pixel q goes to dst + (q + pw) * cs. Channels from c
 * on read as zeros. */
void kl_codegen__rows_to_pixels(cg_t *g, const char *x, long long c,
                                long long plane, long long w, long long end,
                                const char *dst, long long pw, long long cs);
/* Depthwise kernels (codegen_dw.c): the family that the outermost loop's
 * pragma_dw annotation names (rules_cpu_dw.c), 0 for none; the kernel
 * of that family as ENTRY (and ENTRY_prepare for channel vectors). */
int kl_codegen__dw_family(const kl_sched_t *s);
int kl_codegen__emit_dw(cg_t *g, const char *entry);
/* The quantized form's (codegen_dw_q.c): the int32 helpers for L lanes,
 * and the epilogue and store of accumulator var (n of its L lanes, at
 * kl_o) for a window of taps points. */
void kl_codegen__dw_qprelude(cg_t *g, int L);
void kl_codegen__dw_qstore(cg_t *g, int L, int64_t taps, const char *var,
                           int64_t n);

#endif
