/* kl_ir_lex.h - private to coordinator/ir: the parser's state, lexer and
 * affine-index parser (kl_ir_lex.c) shared with the statement parser
 * (kl_ir_parse.c). Every function that fails records the first error (with
 * its column) in p->rc / p->err and returns it; later failures keep it. */
#ifndef KL_IR_LEX_H
#define KL_IR_LEX_H

#include "kl_ir_int.h"

#include <stdbool.h>
#include <stddef.h>

enum { T_EOF = 256, T_IDENT, T_NUM, T_PLUSEQ };

typedef struct {
    kl_access_t *acc;
    size_t col;
} kl_ir__use_t;

typedef struct {
    const char *src;
    size_t pos; /* next unread byte */
    int tok;
    size_t col; /* 1-based column of tok */
    size_t len;
    double num;
    bool isint;
    int64_t ival;
    char *err;
    int rc;
    kl_workload_t *w;
    /* Iterators, in order of first use. */
    int nslots;
    char slot[KL_IR_MAX_ITERS][KL_IR_MAX_NAME];
    size_t slot_col[KL_IR_MAX_ITERS];
    bool slot_out[KL_IR_MAX_ITERS];
    int64_t extent[KL_IR_MAX_ITERS]; /* 0 until 'where' gives it */
    size_t extent_col[KL_IR_MAX_ITERS];
    /* Tensors in order of first use; the output is number 0 here. */
    int ntens;
    kl_tensor_t tens[KL_IR_MAX_TENSORS];
    size_t tcol[KL_IR_MAX_TENSORS];
    bool tdecl[KL_IR_MAX_TENSORS];
    size_t tdecl_col[KL_IR_MAX_TENSORS];
    /* Every access, for the checks that need the extents. */
    kl_ir__use_t *uses;
    int nuses, capuses;
    bool in_epilogue;
    /* Columns of the first '/' and non-integer constant of the body and of
     * each epilogue operation (0: none), for the integer-workload checks. */
    size_t div_col, frac_col;
    size_t epi_col[KL_IR_MAX_EPILOGUE];
} kl_ir__parser_t;

int kl_ir__fail(kl_ir__parser_t *p, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A printable description of the current token, for messages. */
const char *kl_ir__desc(const kl_ir__parser_t *p, char buf[48]);
/* Reads the next token into p->tok (T_* or a punctuation character). */
void kl_ir__next(kl_ir__parser_t *p);
/* True when the current token is the identifier kw. */
bool kl_ir__ident_is(const kl_ir__parser_t *p, const char *kw);
/* The character after the current token, skipping whitespace. */
int kl_ir__peek(const kl_ir__parser_t *p);
/* Consumes an identifier into out (what names it in messages). */
int kl_ir__ident(kl_ir__parser_t *p, char out[KL_IR_MAX_NAME],
                 const char *what);
/* Consumes token tok or fails with "expected WHAT, got ...". */
int kl_ir__expect(kl_ir__parser_t *p, int tok, const char *what);
/* Consumes a non-negative integer up to 2^40. */
int kl_ir__int(kl_ir__parser_t *p, int64_t *out, const char *what);
/* Consumes an optionally negative finite number. */
int kl_ir__signed_num(kl_ir__parser_t *p, double *out);
/* index := affine [ '/' INT ]; iterators get slots in order of use. */
int kl_ir__index(kl_ir__parser_t *p, kl_affine_t *a);

#endif
