/* export_weights.c - the weights of an exported model: kiln_model.weights
 * (every parameter that is not an input, in its own element type),
 * kiln_weights.S, which embeds it in libkiln_model.so, and kiln_model.c's
 * tables of the parameters. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_err.h"
#include "kl_export.h"
#include "kl_util.h"

static size_t s_size(kl_dtype dt)
{
    return dt == KL_DT_U8 || dt == KL_DT_S8 ? 1 : 4;
}

/* What a count of values of dt is called in messages. */
static const char *s_unit(kl_dtype dt)
{
    switch (dt) {
    case KL_DT_U8:
        return "u8 values";
    case KL_DT_S8:
        return "s8 values";
    case KL_DT_S32:
        return "s32 values";
    default:
        return "floats";
    }
}

int kl_export__weights_plan(kl_export__param_t *params, int n,
                            const kl_model_params_t *ps, const char *src,
                            bool *trained, char *err)
{
    *trained = ps && ps->n > 0;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        kl_export__param_t *p = &params[i];
        if (p->input)
            continue;
        off = (off + 63) / 64 * 64;
        p->offset = off;
        off += p->numel * (int64_t)s_size(p->dt);
        if (!*trained)
            continue;
        const kl_model_param_t *q = kl_model_params_find(ps, p->name);
        if (!q)
            return kl_seterr(err, KL_ERR_INTERNAL,
                             "%s: parameter '%s' of the exported graph is "
                             "not among the model's %d parameters",
                             src, p->name, ps->n);
        if (q->numel != p->numel || q->dtype != p->dt)
            return kl_seterr(err, KL_ERR_INTERNAL,
                             "%s: parameter '%s': the model's has %lld %s, "
                             "the exported graph's layer takes %lld %s",
                             src, p->name, (long long)q->numel,
                             s_unit(q->dtype), (long long)p->numel,
                             s_unit(p->dt));
    }
    return KL_OK;
}

static int s_fwrite(FILE *f, const void *data, size_t n, const char *path,
                    char *err)
{
    if (n && fwrite(data, 1, n, f) != n)
        return kl_seterr(err, KL_ERR_IO, "%s: write failed: %s", path,
                         strerror(errno));
    return KL_OK;
}

/* Value k of parameter p as 32 bits (its low s_size bytes are the value):
 * the model's own, else a seeded random one (kiln_model.h, "Weights"):
 * f32 uniform in [-0.1, 0.1) (a q-op's requant scale "L.scale" in
 * [1e-3, 1e-2)), s8 uniform in [-127, 127], s32 in [-1000, 1000]. */
static uint32_t s_value(const kl_export__param_t *p, const kl_model_param_t *q,
                        int64_t k, kl_rng_t *r)
{
    uint32_t u = 0;
    if (p->dt == KL_DT_S8 || p->dt == KL_DT_U8 || p->dt == KL_DT_S32) {
        int32_t v;
        if (q && p->dt == KL_DT_S32)
            v = ((const int32_t *)q->idata)[k];
        else if (q && p->dt == KL_DT_S8)
            v = ((const int8_t *)q->idata)[k];
        else if (q)
            v = ((const uint8_t *)q->idata)[k];
        else if (p->dt == KL_DT_S32)
            v = (int32_t)(kl_rng_double(r) * 2001) - 1000;
        else if (p->dt == KL_DT_S8)
            v = (int32_t)(kl_rng_double(r) * 255) - 127;
        else
            v = (int32_t)(kl_rng_double(r) * 256);
        memcpy(&u, &v, 4);
        return u;
    }
    size_t len = strlen(p->name);
    bool scale = len > 6 && !strcmp(p->name + len - 6, ".scale");
    float v =
        q       ? q->data[k]
        : scale ? (float)(1e-3 + 9e-3 * kl_rng_double(r))
                : (float)(KL_EXPORT_WEIGHT_SCALE * (2 * kl_rng_double(r) - 1));
    memcpy(&u, &v, 4);
    return u;
}

/* The index in the model's own values of value k of p: k, or for a
 * weight laid out [R,S,C,K] (an NHWC q-conv's, W[r,s,c,f]) the index of
 * W[f,c,r,s] in the model's [K,C,R,S]. */
static int64_t s_src(const kl_export__param_t *p, int64_t k)
{
    if (!p->kcrs[0])
        return k;
    int64_t K = p->kcrs[0], C = p->kcrs[1], R = p->kcrs[2], S = p->kcrs[3];
    int64_t f = k % K, c = k / K % C, s = k / (K * C) % S, r = k / (K * C * S);
    return ((f * C + c) * R + r) * S + s;
}

/* One parameter's values as little-endian bytes of its type. */
static int s_param(FILE *f, const kl_export__param_t *p,
                   const kl_model_params_t *ps, kl_rng_t *r, const char *path,
                   char *err)
{
    const kl_model_param_t *q = ps ? kl_model_params_find(ps, p->name) : NULL;
    size_t sz = s_size(p->dt);
    unsigned char buf[4096];
    size_t n = 0;
    /* Random values of a permuted weight: drawn in the model's order, so
     * that a graph exported NHWC gets the weights its NCHW export gets. */
    uint32_t *rnd = NULL;
    if (!q && p->kcrs[0]) {
        rnd = kl_xcalloc((size_t)p->numel, sizeof *rnd);
        for (int64_t k = 0; k < p->numel; k++)
            rnd[k] = s_value(p, NULL, k, r);
    }
    for (int64_t k = 0; k < p->numel; k++) {
        uint32_t u = rnd ? rnd[s_src(p, k)] : s_value(p, q, s_src(p, k), r);
        for (size_t b = 0; b < sz; b++)
            buf[n++] = (unsigned char)(u >> (8 * b));
        if (n == sizeof buf) {
            int rc = s_fwrite(f, buf, n, path, err);
            if (rc) {
                free(rnd);
                return rc;
            }
            n = 0;
        }
    }
    free(rnd);
    return s_fwrite(f, buf, n, path, err);
}

/* DIR/kiln_model.weights, as kl_export__weights_plan laid it out. */
static int s_file(const kl_export__param_t *params, int np,
                  const kl_model_params_t *ps, const char *path, char *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kl_seterr(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
    kl_rng_t r;
    kl_rng_seed(&r, KL_EXPORT_WEIGHT_SEED);
    static const unsigned char zeros[64];
    int64_t at = 0;
    int rc = KL_OK;
    for (int i = 0; !rc && i < np; i++) {
        const kl_export__param_t *p = &params[i];
        if (p->input)
            continue;
        rc = s_fwrite(f, zeros, (size_t)(p->offset - at), path, err);
        if (!rc)
            rc = s_param(f, p, ps, &r, path, err);
        at = p->offset + p->numel * (int64_t)s_size(p->dt);
    }
    if (fclose(f) && !rc)
        rc = kl_seterr(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
    return rc;
}

/* kiln_weights.S: the weights file, embedded with .incbin (which is fast
 * for any size), named by its absolute path so that the assembler finds
 * it from any directory. */
static char *s_asm(const char *wpath, char *err)
{
    char abs[PATH_MAX];
    if (!realpath(wpath, abs)) {
        kl_seterr(err, KL_ERR_IO, "%s: %s", wpath, strerror(errno));
        return NULL;
    }
    if (strchr(abs, '\n')) {
        kl_seterr(err, KL_ERR_INVAL,
                  "%s: a newline in the path of the output directory", abs);
        return NULL;
    }
    kl_buf_t q = {0};
    for (const char *p = abs; *p; p++) {
        if (*p == '"' || *p == '\\')
            kl_buf_puts(&q, "\\");
        kl_buf_append(&q, p, 1);
    }
    char *text = kl_xasprintf(
        "/* kiln_weights.S - kiln_model.weights in the library, written by "
        "kiln export. */\n"
        "    .section .rodata.kiln_weights,\"a\",@progbits\n"
        "    .balign 64\n"
        "    .globl kiln_model_weights_\n"
        "    .hidden kiln_model_weights_\n"
        "    .type kiln_model_weights_, @object\n"
        "kiln_model_weights_:\n"
        "    .incbin \"%s\"\n"
        "    .balign 64\n"
        "    .size kiln_model_weights_, . - kiln_model_weights_\n"
        "    .section .note.GNU-stack,\"\",@progbits\n",
        q.data);
    kl_buf_free(&q);
    return text;
}

int kl_export__weights_write(const kl_export__param_t *params, int n,
                             const kl_model_params_t *ps, bool trained,
                             const char *dir, char ***paths, int *np, char *err)
{
    char *wpath = kl_xasprintf("%s/kiln_model.weights", dir);
    int rc = s_file(params, n, trained ? ps : NULL, wpath, err);
    char *text = rc ? NULL : s_asm(wpath, err);
    if (!rc && !text)
        rc = KL_ERR_IO;
    char *spath = kl_xasprintf("%s/kiln_weights.S", dir);
    if (!rc)
        rc = kl_write_file(spath, text, strlen(text), err);
    if (!rc) {
        *paths = kl_xrealloc(*paths, (size_t)(*np + 1) * sizeof(char *));
        (*paths)[(*np)++] = spath;
        spath = NULL;
    }
    free(spath);
    free(text);
    free(wpath);
    return rc;
}

void kl_export__param_tables(const kl_export__param_t *params, int n,
                             kl_buf_t *b)
{
    kl_buf_puts(b, "static const char *const s_names[] = {\n");
    for (int i = 0; i < n; i++)
        kl_buf_printf(b, "    \"%s\",\n", params[i].name);
    kl_buf_puts(b, "};\nstatic const long long s_numel[] = {\n");
    for (int i = 0; i < n; i++)
        kl_buf_printf(b, "    %lldLL,\n", (long long)params[i].numel);
    kl_buf_puts(b, "};\nstatic const int s_ndim[] = {");
    for (int i = 0; i < n; i++)
        kl_buf_printf(b, "%s%d", i ? ", " : "", params[i].ndim);
    kl_buf_puts(b, "};\nstatic const long long s_shape[][8] = {\n");
    for (int i = 0; i < n; i++) {
        kl_buf_puts(b, "    {");
        for (int k = 0; k < params[i].ndim; k++)
            kl_buf_printf(b, "%s%lld", k ? ", " : "",
                          (long long)params[i].shape[k]);
        kl_buf_puts(b, params[i].ndim ? "},\n" : "0},\n");
    }
    kl_buf_puts(b, "};\n/* Element types (kiln_model_param_dtype). */\n"
                   "static const int s_dtype[] = {");
    for (int i = 0; i < n; i++)
        kl_buf_printf(b, "%s%d", i ? ", " : "", (int)params[i].dt);
    kl_buf_puts(b, "};\n/* Bytes into kiln_model_weights_; -1: an input. */\n"
                   "static const long long s_offset[] = {\n");
    for (int i = 0; i < n; i++)
        kl_buf_printf(b, "    %lldLL,\n", (long long)params[i].offset);
    kl_buf_puts(b, "};\n/* kiln_model.weights, embedded by kiln_weights.S. */\n"
                   "extern const unsigned char kiln_model_weights_[]\n"
                   "    __attribute__((visibility(\"hidden\")));\n\n");
}
