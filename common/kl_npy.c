/* kl_npy.c - NumPy .npy files of f32 arrays (kl_npy.h). The format:
 * "\x93NUMPY", major and minor version bytes, the header's length (2
 * bytes little-endian in 1.0, 4 in 2.0 and 3.0), then the header, a
 * Python dict literal ending in '\n' ({'descr': '<f4', 'fortran_order':
 * False, 'shape': (2, 3), }), then the data. */
#include "kl_npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

#define S_MAGIC "\x93NUMPY"
#define S_MAGIC_LEN 6
#define S_MAX_HEADER (1 << 20)

char *kl_npy_shape_str(const int64_t *shape, int ndim, char *buf, size_t n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "",
                              (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "%s)", ndim == 1 ? "," : "");
    return buf;
}

void kl_npy_free(kl_npy_t *a)
{
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- the header dict ---- */

static const char *s_skip(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* The value after key ('key' or "key", then ':'), NULL when absent. */
static const char *s_value(const char *h, const char *key)
{
    size_t kn = strlen(key);
    for (const char *p = h; (p = strpbrk(p, "'\"")) != NULL; p++) {
        if (strncmp(p + 1, key, kn) == 0 && p[kn + 1] == p[0]) {
            const char *v = s_skip(p + kn + 2);
            if (*v == ':')
                return s_skip(v + 1);
        }
    }
    return NULL;
}

/* A quoted string value into out; false when the value is not one. */
static bool s_string(const char *v, char *out, size_t n)
{
    if (*v != '\'' && *v != '"')
        return false;
    const char *end = strchr(v + 1, *v);
    if (!end || (size_t)(end - v - 1) >= n)
        return false;
    memcpy(out, v + 1, (size_t)(end - v - 1));
    out[end - v - 1] = 0;
    return true;
}

/* A tuple of non-negative integers: (), (3,), (2, 3), (2, 3,). */
static bool s_tuple(const char *v, kl_npy_t *a)
{
    if (*v != '(')
        return false;
    const char *p = s_skip(v + 1);
    a->ndim = 0;
    while (*p != ')') {
        if (!isdigit((unsigned char)*p) || a->ndim == KL_NPY_MAX_DIMS)
            return false;
        errno = 0;
        char *end;
        long long d = strtoll(p, &end, 10);
        if (errno || d < 0)
            return false;
        a->shape[a->ndim++] = d;
        p = end;
        if (*p == 'L') /* written by Python 2 */
            p++;
        p = s_skip(p);
        if (*p == ',')
            p = s_skip(p + 1);
        else if (*p != ')')
            return false;
    }
    return true;
}

/* What to say about a dtype other than '<f4'. */
static const char *s_dtype_hint(const char *d)
{
    if (!strcmp(d, ">f4"))
        return "float32, big-endian: convert with arr.astype('<f4')";
    if (!strcmp(d, "<f8") || !strcmp(d, ">f8"))
        return "float64: convert with arr.astype(np.float32)";
    if (!strcmp(d, "<f2") || !strcmp(d, ">f2"))
        return "float16: convert with arr.astype(np.float32)";
    return "convert with arr.astype(np.float32)";
}

static int s_header(const char *path, const char *h, kl_npy_t *a, char *err)
{
    char descr[64] = "";
    const char *d = s_value(h, "descr"), *f = s_value(h, "fortran_order");
    const char *s = s_value(h, "shape");
    if (!d || !f || !s)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: the .npy header has no '%s' (header: %.120s)",
                         path,
                         !d   ? "descr"
                         : !f ? "fortran_order"
                              : "shape",
                         h);
    if (!s_string(d, descr, sizeof descr))
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: dtype %.60s is a structured type; kiln reads "
                         "only '<f4' (float32, little-endian)",
                         path, d);
    if (strcmp(descr, "<f4") != 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: dtype '%s', kiln reads only '<f4' (float32, "
                         "little-endian): %s",
                         path, descr, s_dtype_hint(descr));
    if (!strncmp(f, "True", 4))
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: fortran_order is True, kiln reads only C order: "
                         "write np.ascontiguousarray(arr)",
                         path);
    if (strncmp(f, "False", 5) != 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: fortran_order is neither True nor False "
                         "(header: %.120s)",
                         path, h);
    if (!s_tuple(s, a))
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: the .npy header's shape is not a tuple of at "
                         "most %d sizes (header: %.120s)",
                         path, KL_NPY_MAX_DIMS, h);
    a->numel = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] && a->numel > INT64_MAX / 4 / a->shape[i])
            return kl_seterr(err, KL_ERR_INVAL, "%s: shape too large", path);
        a->numel *= a->shape[i];
    }
    return KL_OK;
}

static uint32_t s_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* The header's text and where the data starts, from the file's bytes. */
static int s_preamble(const char *path, const unsigned char *b, size_t len,
                      char **header, size_t *data_at, char *err)
{
    if (len < S_MAGIC_LEN + 4 || memcmp(b, S_MAGIC, S_MAGIC_LEN) != 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: not an .npy file (it does not start with "
                         "\\x93NUMPY)",
                         path);
    int major = b[6];
    size_t hlen, at;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        at = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return kl_seterr(err, KL_ERR_INVAL,
                             "%s: truncated .npy header (%zu bytes)", path,
                             len);
        hlen = s_le32(b + 8);
        at = 12;
    } else {
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: .npy format version %d.%d, kiln reads 1.0, "
                         "2.0 and 3.0",
                         path, major, b[7]);
    }
    if (hlen > S_MAX_HEADER || at + hlen > len)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s: truncated .npy header (says %zu bytes, the "
                         "file has %zu after the preamble)",
                         path, hlen, len - at);
    *header = kl_xstrndup((const char *)b + at, hlen);
    *data_at = at + hlen;
    return KL_OK;
}

int kl_npy_read(const char *path, const int64_t *want, int want_ndim,
                kl_npy_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    char *file = NULL, *h = NULL;
    size_t len = 0, at = 0;
    int rc = kl_read_file(path, &file, &len, err);
    if (rc)
        return rc;
    const unsigned char *b = (const unsigned char *)file;
    kl_npy_t a = {0};
    rc = s_preamble(path, b, len, &h, &at, err);
    if (!rc)
        rc = s_header(path, h, &a, err);
    char got[400], exp[400];
    if (!rc && (size_t)(len - at) != (size_t)a.numel * 4)
        rc = kl_seterr(
            err, KL_ERR_INVAL,
            "%s: %s data: shape %s is %lld floats (%lld bytes), "
            "the file holds %zu bytes after its header",
            path, len - at < (size_t)a.numel * 4 ? "truncated" : "too much",
            kl_npy_shape_str(a.shape, a.ndim, got, sizeof got),
            (long long)a.numel, (long long)a.numel * 4, len - at);
    if (!rc && want) {
        int64_t n = 1;
        for (int i = 0; i < want_ndim; i++)
            n *= want[i];
        if (n != a.numel)
            rc = kl_seterr(
                err, KL_ERR_INVAL,
                "%s: shape %s (%lld elements) does not match the expected "
                "%s (%lld elements)",
                path, kl_npy_shape_str(a.shape, a.ndim, got, sizeof got),
                (long long)a.numel,
                kl_npy_shape_str(want, want_ndim, exp, sizeof exp),
                (long long)n);
    }
    if (!rc) {
        a.data = kl_xmalloc((size_t)a.numel * sizeof(float) + 1);
        for (int64_t i = 0; i < a.numel; i++) {
            uint32_t u = s_le32(b + at + 4 * (size_t)i);
            memcpy(&a.data[i], &u, 4);
        }
        *out = a;
    }
    free(h);
    free(file);
    return rc;
}

int kl_npy_write(const char *path, const float *data, const int64_t *shape,
                 int ndim, char *err)
{
    if (ndim < 0 || ndim > KL_NPY_MAX_DIMS)
        return kl_seterr(err, KL_ERR_INVAL, "%s: %d dimensions (at most %d)",
                         path, ndim, KL_NPY_MAX_DIMS);
    char sh[400];
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    kl_buf_t h = {0};
    kl_buf_printf(&h, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }",
                  kl_npy_shape_str(shape, ndim, sh, sizeof sh));
    /* Pad with spaces so that magic, version, length, header and its
     * '\n' end on a multiple of 64 bytes. */
    while ((10 + h.len + 1) % 64)
        kl_buf_puts(&h, " ");
    kl_buf_puts(&h, "\n");
    size_t bytes = 10 + h.len + (size_t)n * 4;
    unsigned char *b = kl_xmalloc(bytes);
    memcpy(b, S_MAGIC, S_MAGIC_LEN);
    b[6] = 1;
    b[7] = 0;
    b[8] = (unsigned char)(h.len & 0xff);
    b[9] = (unsigned char)(h.len >> 8);
    memcpy(b + 10, h.data, h.len);
    unsigned char *d = b + 10 + h.len;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &data[i], 4);
        for (int k = 0; k < 4; k++)
            d[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    int rc = kl_write_file(path, b, bytes, err);
    free(b);
    kl_buf_free(&h);
    return rc;
}
