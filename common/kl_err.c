#include "kl_err.h"

#include <stdarg.h>
#include <stdio.h>

static const char *s_names[KL_ERR__COUNT] = {
    [KL_OK] = "ok",
    [KL_ERR_INVAL] = "invalid argument",
    [KL_ERR_NOMEM] = "out of memory",
    [KL_ERR_IO] = "input/output error",
    [KL_ERR_NOTFOUND] = "not found",
    [KL_ERR_EXISTS] = "already exists",
    [KL_ERR_NOSPC] = "no space left",
    [KL_ERR_PROTO] = "protocol error",
    [KL_ERR_VERSION] = "protocol version mismatch",
    [KL_ERR_AUTH] = "authentication refused",
    [KL_ERR_TIMEOUT] = "timed out",
    [KL_ERR_CLOSED] = "closed",
    [KL_ERR_COMPILE] = "compile error",
    [KL_ERR_RUNTIME] = "runtime error",
    [KL_ERR_UNSUPPORTED] = "not supported",
    [KL_ERR_EXHAUSTED] = "exhausted",
    [KL_ERR_CORRUPT] = "corrupt data",
    [KL_ERR_INTERNAL] = "internal error",
};

const char *kl_strerror(int code)
{
    if (code < 0 || code >= KL_ERR__COUNT || !s_names[code])
        return "unknown error";
    return s_names[code];
}

int kl_seterr(char *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, KL_ERRMSG_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}
