/* kl_model_dims.c - a model's input dimensions overridden at load
 * (kl_model_opts_t's batch and seq, kiln's --batch and --seq): the rule
 * applied to one input (graph text and ONNX import alike), and a graph
 * text's `input NAME SHAPE` lines rewritten by it. */
#include "kl_model_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* The graph parser's largest dimension (kl_model_parse.c). */
#define S_MAX_DIM ((int64_t)1 << 40)

int kl_model_dims_check(const kl_model_opts_t *opts, const char *src, char *err)
{
    if (!opts)
        return KL_OK;
    const char *bad = opts->batch < 0 ? "batch" : opts->seq < 0 ? "seq" : NULL;
    if (bad)
        return kl_seterr(
            err, KL_ERR_INVAL,
            "%s: --%s %lld: a dimension is at least 1 (0 keeps "
            "the model's own)",
            src, bad, (long long)(opts->batch < 0 ? opts->batch : opts->seq));
    return KL_OK;
}

int kl_model_dims_apply(const kl_model_opts_t *opts, const char *where,
                        const char *name, const char *shape, int64_t *d, int n,
                        char *err)
{
    if (!opts)
        return KL_OK;
    if (opts->seq && n != 2 && n != 3)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: --seq %lld: input '%s' is %s (%d-D); --seq "
                         "sets dimension 1 of a 2-D [batch, seq] or 3-D "
                         "[batch, seq, hidden] input",
                         where, (long long)opts->seq, name, shape, n);
    if (opts->batch && n >= 1)
        d[0] = opts->batch;
    if (opts->seq)
        d[1] = opts->seq;
    return KL_OK;
}

/* "1x3x224x224" (digits and 'x' alone, as the parser reads a shape) into
 * d; false for anything else, which the parser refuses itself. */
static bool s_shape(const char *s, size_t len, int64_t *d, int *n)
{
    *n = 0;
    size_t i = 0;
    while (i < len) {
        int64_t v = 0;
        size_t at = i;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            v = v * 10 + (s[i] - '0');
            if (v > S_MAX_DIM)
                return false;
        }
        if (i == at || v < 1 || *n == KL_MODEL_MAX_DIMS)
            return false;
        d[(*n)++] = v;
        if (i < len && (s[i] != 'x' || ++i == len))
            return false;
    }
    return *n > 0;
}

/* One line (len bytes, no newline) into b, its shape resized when it is
 * an input statement. */
static int s_line(kl_buf_t *b, const char *p, size_t len, const char *src,
                  int line, const kl_model_opts_t *opts, char *err)
{
    const char *tok[4];
    size_t tlen[4];
    int ntok = 0;
    for (size_t i = 0; i < len && p[i] != '#';) {
        if (p[i] == ' ' || p[i] == '\t' || p[i] == '\r') {
            i++;
            continue;
        }
        size_t at = i;
        while (i < len && p[i] != '#' && p[i] != ' ' && p[i] != '\t' &&
               p[i] != '\r')
            i++;
        if (ntok == 4) {
            ntok++;
            break;
        }
        tok[ntok] = p + at;
        tlen[ntok++] = i - at;
    }
    int64_t d[KL_MODEL_MAX_DIMS];
    int n = 0;
    if (ntok != 3 || tlen[0] != 5 || strncmp(tok[0], "input", 5) ||
        (tlen[1] == 1 && tok[1][0] == '=') ||
        !s_shape(tok[2], tlen[2], d, &n)) {
        kl_buf_append(b, p, len);
        return KL_OK;
    }
    char *where = kl_xasprintf("%s:%d", src, line);
    char *name = kl_xasprintf("%.*s", (int)tlen[1], tok[1]);
    char *shape = kl_xasprintf("%.*s", (int)tlen[2], tok[2]);
    int rc = kl_model_dims_apply(opts, where, name, shape, d, n, err);
    if (!rc) {
        kl_buf_append(b, p, (size_t)(tok[2] - p));
        for (int k = 0; k < n; k++)
            kl_buf_printf(b, "%s%lld", k ? "x" : "", (long long)d[k]);
        kl_buf_append(b, tok[2] + tlen[2],
                      len - (size_t)(tok[2] - p) - tlen[2]);
    }
    free(shape);
    free(name);
    free(where);
    return rc;
}

int kl_model_resize_text(const char *text, const char *source,
                         const kl_model_opts_t *opts, char **out, char *err)
{
    *out = NULL;
    const char *src = source ? source : "graph";
    int rc = kl_model_dims_check(opts, src, err);
    if (rc)
        return rc;
    if (!opts || (!opts->batch && !opts->seq)) {
        *out = kl_xstrdup(text ? text : "");
        return KL_OK;
    }
    kl_buf_t b = {0};
    const char *p = text ? text : "";
    for (int line = 1; *p && !rc; line++) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        rc = s_line(&b, p, len, src, line, opts, err);
        if (nl)
            kl_buf_puts(&b, "\n");
        p += len + (nl ? 1 : 0);
    }
    if (rc) {
        kl_buf_free(&b);
        return rc;
    }
    *out = kl_buf_take(&b);
    return KL_OK;
}
