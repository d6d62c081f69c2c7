/* cg_emit.h - the emitter under every code generator of this folder (C,
 * Winograd, tensorized, CUDA): lines of source at an indentation into a
 * growing buffer, the first error of a generation, and templates with
 * named placeholders. It knows no generator: each one keeps its buffer,
 * indentation and error in its own state and passes them in. Not part of
 * the public contract; private to coordinator/codegen. */
#ifndef CG_EMIT_H
#define CG_EMIT_H

#include <stdarg.h>

#include "kl_util.h"

/* Appends 4 * ind spaces (none when ind <= 0). */
void kl_codegen__indent(kl_buf_t *b, int ind);
/* One line: the indentation, fmt formatted (printf), a newline. */
void kl_codegen__line(kl_buf_t *b, int ind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kl_codegen__vline(kl_buf_t *b, int ind, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* One line made of the strings in ap up to a NULL, copied as they are:
 * the C generator's statements are its hot path, and printf copies long
 * strings slowly. */
void kl_codegen__vpieces(kl_buf_t *b, int ind, va_list ap);
/* Closes a block opened with a line ending in "{" and *ind++: *ind-- and
 * a "}" line. */
void kl_codegen__close(kl_buf_t *b, int *ind);

/* Records the first failure of a generation: when *rc is 0 it becomes
 * code and err (KL_ERRMSG_LEN bytes, may be NULL) gets "codegen: " and
 * fmt formatted. Returns *rc, so that a later failure keeps the first
 * one's code and message. */
int kl_codegen__fail(int *rc, char *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int kl_codegen__vfail(int *rc, char *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* One value of a template: the placeholder ${key} becomes str, or num as
 * a decimal integer when str is NULL. Build rows with KL_CG_S and
 * KL_CG_I; a table ends with a row whose key is NULL (KL_CG_END). */
typedef struct {
    const char *key;
    const char *str;
    long long num;
} kl_codegen__kv_t;

#define KL_CG_S(k, v)                                                          \
    {                                                                          \
        (k), (v), 0                                                            \
    }
#define KL_CG_I(k, v)                                                          \
    {                                                                          \
        (k), NULL, (long long)(v)                                              \
    }
#define KL_CG_END                                                              \
    {                                                                          \
        NULL, NULL, 0                                                          \
    }

/* Appends tmpl with every ${key} replaced by its value in kv; the rest of
 * tmpl is copied as it is ("%" included). A placeholder that kv lacks is
 * a programmer's mistake: it aborts with the key on stderr. */
void kl_codegen__template(kl_buf_t *b, const char *tmpl,
                          const kl_codegen__kv_t *kv);

#endif
