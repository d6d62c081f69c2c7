/* kl_model_parse_int.h - private to the graph parser (kl_model_parse.c:
 * statements, layers and their attributes; kl_model_infer.c: each layer's
 * attributes checked and its output shape inferred, the general ops' in
 * kl_model_infer_general.c): the parse context
 * and the readers both use. */
#ifndef KL_MODEL_PARSE_INT_H
#define KL_MODEL_PARSE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_model_int.h"

#define KL_MGRAPH__MAX_TOK 32

/* The line being read (src:line for errors) split into tok[0..ntok), and
 * the graph so far. */
typedef struct {
    const char *src;
    int line;
    char *err;
    kl_mgraph_t *g;
    char *tok[KL_MGRAPH__MAX_TOK];
    int ntok;
} kl_mgraph__ctx_t;

/* The error "SRC:LINE: message" into c->err; returns KL_ERR_INVAL. */
__attribute__((format(printf, 2, 3))) int kl_mgraph__err(kl_mgraph__ctx_t *c,
                                                         const char *fmt, ...);
/* "1x3x224" of the nd dimensions d, into out (n bytes). */
void kl_mgraph__shape_text(const int64_t *d, int nd, char *out, size_t n);
/* "1x3x224x224" (or with sep ',' for perm lists) into d[*nd]; 0 allowed
 * when zero_ok. `what` names the list in the error. */
int kl_mgraph__dims(kl_mgraph__ctx_t *c, const char *what, const char *s,
                    char sep, bool zero_ok, int64_t *d, int *nd);
/* The value of attribute key among tok[from..), NULL when absent. */
const char *kl_mgraph__attr(const kl_mgraph__ctx_t *c, int from,
                            const char *key);
/* Integer attribute key of layer nd in min..2^40; def < 0: required. */
int kl_mgraph__int(kl_mgraph__ctx_t *c, int from, const kl_mnode_t *nd,
                   const char *key, int64_t def, int64_t min, int64_t *out);
/* Required number attribute (finite). */
int kl_mgraph__num(kl_mgraph__ctx_t *c, int from, const kl_mnode_t *nd,
                   const char *key, double *out);
/* A 0 / 1 attribute. */
int kl_mgraph__flag(kl_mgraph__ctx_t *c, int from, const kl_mnode_t *nd,
                    const char *key, bool def, bool *out);

/* kl_model_infer.c: the attributes (tok[from..)) and output shape of
 * layer nd, whose inputs are set. */
int kl_mgraph__infer(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd);
/* kl_model_infer_general.c: the same for add, gelu and the general ops
 * (kl_mop_is_general). */
int kl_mgraph__infer_general(kl_mgraph__ctx_t *c, int from, kl_mnode_t *nd);

#endif
