/* kl_ir_int.h - private helpers shared by the files of coordinator/ir.
 * Not part of the workload contract; only kl_ir*.c include it. */
#ifndef KL_IR_INT_H
#define KL_IR_INT_H

#include "kl_ir.h"
#include "kl_util.h"

/* Largest integer literal, extent or index magnitude the parser accepts;
 * it keeps every index computation inside int64_t. */
#define KL_IR__INT_MAX ((int64_t)1 << 40)
#define KL_IR__INDEX_MAX ((int64_t)1 << 60)
/* Largest number of elements of one tensor. */
#define KL_IR__NUMEL_MAX ((int64_t)1 << 40)

void kl_ir__expr_free(kl_expr_t *e);
kl_expr_t *kl_ir__expr_clone(const kl_expr_t *e);
kl_expr_t *kl_ir__expr_new(kl_expr_kind kind);

/* Smallest and largest value of the numerator of a (before the division)
 * over the iteration box of w, in 128-bit arithmetic. */
void kl_ir__affine_range(const kl_workload_t *w, const kl_affine_t *a,
                         __int128 *lo, __int128 *hi);

/* Fills w->canonical, w->key and w->flop from the structure (which the
 * parser has validated). Returns KL_ERR_INVAL when the FLOP count would
 * need an unreasonable amount of enumeration. */
int kl_ir__finish(kl_workload_t *w, char *err);

/* Appends the canonical text of w to b. */
void kl_ir__print(kl_buf_t *b, const kl_workload_t *w);

/* Exact FLOP count (see kl_ir.h); KL_ERR_INVAL when too costly. */
int kl_ir__count_flop(const kl_workload_t *w, double *flop, char *err);

/* Number of arithmetic operations in one evaluation of e. */
int kl_ir__expr_ops(const kl_expr_t *e);

#endif
