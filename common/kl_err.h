/* kl_err.h - the one error enum of kiln.
 *
 * Every fallible function returns an int: 0 (KL_OK) on success or one of the
 * codes below. A failure a user will see also carries a human message,
 * written into a caller-supplied buffer of KL_ERRMSG_LEN bytes (Redis'
 * anetSetError habit): see kl_seterr().
 */
#ifndef KL_ERR_H
#define KL_ERR_H

#include <stddef.h>

#define KL_ERRMSG_LEN 512

typedef enum {
    KL_OK = 0,
    KL_ERR_INVAL,       /* bad argument or malformed input */
    KL_ERR_NOMEM,       /* out of memory (only where not aborting) */
    KL_ERR_IO,          /* file or system call failed */
    KL_ERR_NOTFOUND,    /* no such key, file, record */
    KL_ERR_EXISTS,      /* already present */
    KL_ERR_NOSPC,       /* store or disk full and could not grow */
    KL_ERR_PROTO,       /* a message that does not decode or is out of bounds */
    KL_ERR_VERSION,     /* peer speaks another major protocol version */
    KL_ERR_AUTH,        /* authentication refused */
    KL_ERR_TIMEOUT,     /* a deadline passed */
    KL_ERR_CLOSED,      /* peer or object already closed */
    KL_ERR_COMPILE,     /* a compiler said no */
    KL_ERR_RUNTIME,     /* a program crashed */
    KL_ERR_UNSUPPORTED, /* valid but not supported here (no GPU, ...) */
    KL_ERR_EXHAUSTED,   /* a design space or budget has nothing left */
    KL_ERR_CORRUPT,     /* stored data does not decode */
    KL_ERR_INTERNAL,    /* a bug in kiln */
    KL_ERR__COUNT
} kl_err;

/* Returns a static, human name for code (never NULL). */
const char *kl_strerror(int code);

/* Formats a message into err (KL_ERRMSG_LEN bytes) when err is not NULL and
 * returns code, so callers can write `return kl_seterr(err, KL_ERR_IO,
 * "open %s: %s", path, strerror(errno));`. */
int kl_seterr(char *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
