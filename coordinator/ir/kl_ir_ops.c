/* kl_ir_ops.c - named operators. Each one writes its workload in the
 * expression language (every tensor declared) and parses it, so a named
 * operator and the same text typed by hand are one workload with one key. */
#include "kl_ir_int.h"

#include "kl_err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_KV 24

typedef struct {
    char key[32];
    char val[64];
    bool used;
} s_kv_t;

typedef struct {
    char op[KL_IR_MAX_NAME];
    s_kv_t kv[S_MAX_KV];
    int n;
    char *err;
} s_spec_t;

/* Splits "op K=V K=V ..." into s. */
static int s_split(const char *spec, s_spec_t *s)
{
    const char *p = spec;
    int first = 1;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, " \t\n");
        if (first) {
            if (n >= sizeof(s->op))
                return kl_seterr(s->err, KL_ERR_INVAL,
                                 "unknown operator '%.*s'",
                                 (int)(n > 40 ? 40 : n), p);
            memcpy(s->op, p, n);
            s->op[n] = '\0';
            first = 0;
            p += n;
            continue;
        }
        const char *eq = memchr(p, '=', n);
        size_t kn = eq ? (size_t)(eq - p) : 0;
        if (!eq || kn == 0 || kn >= sizeof(s->kv[0].key) ||
            n - kn - 1 >= sizeof(s->kv[0].val) || n - kn - 1 == 0)
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: expected NAME=VALUE, got '%.*s'", s->op,
                             (int)(n > 40 ? 40 : n), p);
        if (s->n == S_MAX_KV)
            return kl_seterr(s->err, KL_ERR_INVAL, "%s: too many parameters",
                             s->op);
        s_kv_t *kv = &s->kv[s->n];
        memcpy(kv->key, p, kn);
        kv->key[kn] = '\0';
        memcpy(kv->val, eq + 1, n - kn - 1);
        kv->val[n - kn - 1] = '\0';
        for (int i = 0; i < s->n; i++)
            if (strcmp(s->kv[i].key, kv->key) == 0)
                return kl_seterr(s->err, KL_ERR_INVAL, "%s: %s given twice",
                                 s->op, kv->key);
        s->n++;
        p += n;
    }
    return KL_OK;
}

static s_kv_t *s_find(s_spec_t *s, const char *key)
{
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->kv[i].key, key) == 0) {
            s->kv[i].used = true;
            return &s->kv[i];
        }
    }
    return NULL;
}

/* Integer parameter key; def < 0 means required. */
static int s_int(s_spec_t *s, const char *key, int64_t def, int64_t min,
                 int64_t *out)
{
    s_kv_t *kv = s_find(s, key);
    if (!kv) {
        if (def < 0)
            return kl_seterr(s->err, KL_ERR_INVAL, "%s: missing %s", s->op,
                             key);
        *out = def;
        return KL_OK;
    }
    char *end;
    errno = 0;
    long long v = strtoll(kv->val, &end, 10);
    if (errno || *end || end == kv->val || kv->val[0] == '+' ||
        kv->val[0] == ' ')
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for %s (expected an integer)",
                         s->op, kv->val, key);
    if (v < min || v > KL_IR__INT_MAX)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: %s=%lld is out of range (%lld..2^40)", s->op, key,
                         v, (long long)min);
    *out = v;
    return KL_OK;
}

static int s_flag(s_spec_t *s, const char *key, int64_t def, int64_t *out)
{
    int rc = s_int(s, key, def, 0, out);
    if (!rc && *out > 1)
        return kl_seterr(s->err, KL_ERR_INVAL, "%s: %s must be 0 or 1", s->op,
                         key);
    return rc;
}

/* Shortest of %.15g / %.17g that reads back to the same double (as the
 * canonical text prints numbers). */
static void s_num_text(char out[40], double v)
{
    snprintf(out, 40, "%.15g", v);
    if (strtod(out, NULL) != v)
        snprintf(out, 40, "%.17g", v);
}

/* A finite number from text t (all of it); false when it is not one. */
static bool s_strnum(const char *t, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(t, &end);
    return end != t && !*end && !errno && isfinite(*out);
}

/* Required number parameter key (a finite double). */
static int s_num(s_spec_t *s, const char *key, double *out)
{
    s_kv_t *kv = s_find(s, key);
    if (!kv)
        return kl_seterr(s->err, KL_ERR_INVAL, "%s: missing %s", s->op, key);
    if (!s_strnum(kv->val, out))
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for %s (a finite number)", s->op,
                         kv->val, key);
    return KL_OK;
}

/* The activation of a layer's epilogue: relu=1, or clip=LO,HI (a clamp
 * to [LO, HI], as ReLU6 is clip=0,6); at most one of them. */
typedef struct {
    int64_t relu;
    bool clip;
    double lo, hi;
} s_act_t;

static int s_act(s_spec_t *s, s_act_t *a)
{
    memset(a, 0, sizeof(*a));
    int rc = s_flag(s, "relu", 0, &a->relu);
    s_kv_t *kv = rc ? NULL : s_find(s, "clip");
    if (!kv)
        return rc;
    char lo[64], *comma = strchr(kv->val, ',');
    size_t n = comma ? (size_t)(comma - kv->val) : 0;
    if (n < sizeof(lo)) {
        memcpy(lo, kv->val, n);
        lo[n] = '\0';
    }
    if (!comma || n >= sizeof(lo) || !s_strnum(lo, &a->lo) ||
        !s_strnum(comma + 1, &a->hi) || a->lo > a->hi)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for clip (LO,HI: two finite "
                         "numbers, LO <= HI)",
                         s->op, kv->val);
    if (a->relu)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: relu=1 and clip= are both activations; give "
                         "one (clip=0,HI clamps at zero too)",
                         s->op);
    a->clip = true;
    return KL_OK;
}

/* The inputs' dtype "in=f32|f16|bf16" (default f32; the output and any
 * bias stay f32: f16/bf16 products are accumulated in f32). */
static int s_in_dtype(s_spec_t *s, const char **out)
{
    s_kv_t *kv = s_find(s, "in");
    *out = "f32";
    if (!kv)
        return KL_OK;
    if (strcmp(kv->val, "f32") && strcmp(kv->val, "f16") &&
        strcmp(kv->val, "bf16"))
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for in (expected f32, f16 or "
                         "bf16)",
                         s->op, kv->val);
    *out = strcmp(kv->val, "f32") ? kv->val : "f32";
    return KL_OK;
}

/* The activation's epilogue text (" | relu", " | clip(0, 6)" or ""). */
static void s_act_epilogue(kl_buf_t *b, const s_act_t *a)
{
    char lo[40], hi[40];
    if (a->relu)
        kl_buf_puts(b, " | relu");
    if (!a->clip)
        return;
    s_num_text(lo, a->lo);
    s_num_text(hi, a->hi);
    kl_buf_printf(b, " | clip(%s, %s)", lo, hi);
}

/* The activation's part of a name ("_relu", "_clip0_6" or ""). */
static void s_act_name(kl_buf_t *b, const s_act_t *a)
{
    char lo[40], hi[40];
    if (a->relu)
        kl_buf_puts(b, "_relu");
    if (!a->clip)
        return;
    s_num_text(lo, a->lo);
    s_num_text(hi, a->hi);
    kl_buf_printf(b, "_clip%s_%s", lo, hi);
}

static int s_unused(const s_spec_t *s)
{
    for (int i = 0; i < s->n; i++)
        if (!s->kv[i].used)
            return kl_seterr(s->err, KL_ERR_INVAL, "%s: unknown parameter '%s'",
                             s->op, s->kv[i].key);
    return KL_OK;
}

/* Parses the generated text and names the result. Takes text. */
static int s_finish(s_spec_t *s, char *text, const char *kind, char *name,
                    kl_workload_t **out)
{
    int rc = s_unused(s);
    if (!rc) {
        char perr[KL_ERRMSG_LEN];
        rc = kl_workload_parse(text, out, perr);
        if (rc)
            rc = kl_seterr(s->err, rc, "%s: %s", s->op, perr);
    }
    if (!rc) {
        snprintf((*out)->op_kind, sizeof((*out)->op_kind), "%s", kind);
        free((*out)->name);
        (*out)->name = name;
        name = NULL;
    }
    free(text);
    free(name);
    return rc;
}

/* "y*2+r*1-3": the input row read by output row it and kernel row kt. */
static char *s_window(const char *it, int64_t stride, const char *kt,
                      int64_t dil, int64_t pad)
{
    return kl_xasprintf("%s*%lld+%s*%lld-%lld", it, (long long)stride, kt,
                        (long long)dil, (long long)pad);
}

static int s_outsize(s_spec_t *s, const char *what, int64_t in, int64_t k,
                     int64_t stride, int64_t pad, int64_t dil, int64_t *out)
{
    int64_t span = in + 2 * pad - dil * (k - 1) - 1;
    if (span < 0)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: the kernel (%lld with dilation %lld) does not "
                         "fit the padded input %s (%lld + 2*%lld)",
                         s->op, (long long)k, (long long)dil, what,
                         (long long)in, (long long)pad);
    *out = span / stride + 1;
    return KL_OK;
}

/* The quantization of a q-op (kl_ir.h, "Integer workloads"): activation
 * zero point za, output zero point zo, output dtype, scale per channel
 * (a const f32 tensor `scale`) or per tensor (a number), and the
 * activation as integer bounds on the quantized output. */
typedef struct {
    bool on; /* a q-op */
    int64_t za, zo;
    kl_dtype out;
    bool per_channel;
    double scale;
} s_quant_t;

static int s_quant(s_spec_t *s, s_quant_t *q, const s_act_t *act)
{
    memset(q, 0, sizeof(*q));
    q->on = true;
    q->out = KL_DT_U8;
    q->per_channel = true;
    s_kv_t *kv = s_find(s, "out");
    if (kv) {
        if (strcmp(kv->val, "u8") == 0)
            q->out = KL_DT_U8;
        else if (strcmp(kv->val, "s8") == 0)
            q->out = KL_DT_S8;
        else if (strcmp(kv->val, "s32") == 0 || strcmp(kv->val, "i32") == 0)
            q->out = KL_DT_S32;
        else
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: bad value '%s' for out (u8, s8 or s32)",
                             s->op, kv->val);
    }
    int64_t omin = q->out == KL_DT_U8 ? 0 : -128;
    int64_t omax = q->out == KL_DT_U8 ? 255 : 127;
    int rc = s_int(s, "za", 0, 0, &q->za);
    if (rc)
        return rc;
    if (q->za > 255)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: za=%lld is out of range (0..255, a u8 zero "
                         "point)",
                         s->op, (long long)q->za);
    kv = s_find(s, "zo");
    if (kv) {
        char *end;
        errno = 0;
        long long v = strtoll(kv->val, &end, 10);
        if (errno || *end || end == kv->val)
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: bad value '%s' for zo (expected an integer)",
                             s->op, kv->val);
        if (q->out == KL_DT_S32 && v != 0)
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: zo=%lld with out=s32 (an s32 output is the "
                             "accumulator: no requant, no zero point)",
                             s->op, v);
        if (v < omin || v > omax)
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: zo=%lld is out of range (%lld..%lld for "
                             "out=%s)",
                             s->op, v, (long long)omin, (long long)omax,
                             kl_dtype_name(q->out));
        q->zo = v;
    }
    kv = s_find(s, "scale");
    if (kv && strcmp(kv->val, "channel") != 0) {
        if (!s_strnum(kv->val, &q->scale) || !(q->scale > 0) ||
            (float)q->scale == 0.0f || !isfinite((float)q->scale))
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: bad value '%s' for scale (channel, or a "
                             "positive f32 number)",
                             s->op, kv->val);
        q->per_channel = false;
    }
    if (kv && q->out == KL_DT_S32)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: scale= with out=s32 (an s32 output has no "
                         "requant)",
                         s->op);
    if (act->clip &&
        (act->lo != floor(act->lo) || act->hi != floor(act->hi) ||
         (q->out != KL_DT_S32 && (act->lo < omin || act->hi > omax))))
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: clip=%g,%g must be integers in the output's "
                         "range (quantized bounds)",
                         s->op, act->lo, act->hi);
    return KL_OK;
}

/* "(X[idx] - za)" or "X[idx]". */
static void s_qinput(kl_buf_t *b, const s_quant_t *q, const char *access)
{
    if (q->za)
        kl_buf_printf(b, "(%s - %lld)", access, (long long)q->za);
    else
        kl_buf_puts(b, access);
}

/* Epilogue of a q-op: [+ bias[ch]], requant, then the activation as
 * quantized bounds (relu: clip(zo, max)). */
static void s_qepilogue(kl_buf_t *b, const s_quant_t *q, const s_act_t *act,
                        bool bias, const char *ch)
{
    if (bias)
        kl_buf_printf(b, " | + bias[%s]", ch);
    if (q->out != KL_DT_S32) {
        char sc[40];
        s_num_text(sc, (float)q->scale);
        if (q->per_channel)
            kl_buf_printf(b, " | requant(scale[%s], %lld)", ch,
                          (long long)q->zo);
        else
            kl_buf_printf(b, " | requant(%s, %lld)", sc, (long long)q->zo);
        if (act->relu)
            kl_buf_printf(b, " | clip(%lld, %d)", (long long)q->zo,
                          q->out == KL_DT_U8 ? 255 : 127);
    } else if (act->relu) {
        kl_buf_puts(b, " | relu");
    }
    if (act->clip)
        kl_buf_printf(b, " | clip(%lld, %lld)", (long long)act->lo,
                      (long long)act->hi);
}

/* The declarations after X and W: bias, scale and the output Y of shape
 * yshape ("1,64,56,56"); O output channels. */
static void s_qdecls(kl_buf_t *b, const s_quant_t *q, bool bias, int64_t O,
                     const char *yname, const char *yshape)
{
    if (bias)
        kl_buf_printf(b, ", bias: const s32[%lld]", (long long)O);
    if (q->out != KL_DT_S32 && q->per_channel)
        kl_buf_printf(b, ", scale: const f32[%lld]", (long long)O);
    kl_buf_printf(b, ", %s: %s[%s]", yname, kl_dtype_name(q->out), yshape);
}

/* The quantization's part of a name ("_za3_zo5_s8"). */
static void s_qname(kl_buf_t *b, const s_quant_t *q)
{
    if (q->za)
        kl_buf_printf(b, "_za%lld", (long long)q->za);
    if (q->zo)
        kl_buf_printf(b, "_zo%lld", (long long)q->zo);
    if (q->out != KL_DT_U8)
        kl_buf_printf(b, "_%s", kl_dtype_name(q->out));
    if (!q->per_channel)
        kl_buf_puts(b, "_pt");
}

/* qmatmul / qdense: A[M,K] u8 x B[K,N] const s8 (qdense: X[N,I] x W[O,I]). */
static int s_qmatmul(s_spec_t *s, bool dense, kl_workload_t **out)
{
    int64_t M, N, K, bias;
    s_act_t act;
    s_quant_t q;
    int rc = dense ? (s_int(s, "N", -1, 1, &M) ?: s_int(s, "I", -1, 1, &K)
                                               ?: s_int(s, "O", -1, 1, &N)
                                               ?: s_flag(s, "bias", 1, &bias))
                   : (s_int(s, "M", -1, 1, &M) ?: s_int(s, "N", -1, 1, &N)
                                               ?: s_int(s, "K", -1, 1, &K)
                                               ?: s_flag(s, "bias", 0, &bias));
    if (rc || (rc = s_act(s, &act)) || (rc = s_quant(s, &q, &act)))
        return rc;
    kl_buf_t t = {0}, n = {0};
    char *ysh = kl_xasprintf("%lld,%lld", (long long)M, (long long)N);
    if (dense) {
        kl_buf_puts(&t, "Y[n,o] += ");
        s_qinput(&t, &q, "X[n,i]");
        kl_buf_puts(&t, " * W[o,i]");
        s_qepilogue(&t, &q, &act, bias, "o");
        kl_buf_printf(&t,
                      " where n=%lld, o=%lld, i=%lld; X: u8[%lld,%lld], "
                      "W: const s8[%lld,%lld]",
                      (long long)M, (long long)N, (long long)K, (long long)M,
                      (long long)K, (long long)N, (long long)K);
        s_qdecls(&t, &q, bias, N, "Y", ysh);
        kl_buf_printf(&n, "qdense_%lld_%lld_%lld", (long long)M, (long long)K,
                      (long long)N);
    } else {
        kl_buf_puts(&t, "C[i,j] += ");
        s_qinput(&t, &q, "A[i,k]");
        kl_buf_puts(&t, " * B[k,j]");
        s_qepilogue(&t, &q, &act, bias, "j");
        kl_buf_printf(&t,
                      " where i=%lld, j=%lld, k=%lld; A: u8[%lld,%lld], "
                      "B: const s8[%lld,%lld]",
                      (long long)M, (long long)N, (long long)K, (long long)M,
                      (long long)K, (long long)K, (long long)N);
        s_qdecls(&t, &q, bias, N, "C", ysh);
        kl_buf_printf(&n, "qmatmul_%lld_%lld_%lld", (long long)M, (long long)N,
                      (long long)K);
    }
    free(ysh);
    if (bias)
        kl_buf_puts(&n, "_bias");
    s_qname(&n, &q);
    s_act_name(&n, &act);
    return s_finish(s, kl_buf_take(&t), s->op, kl_buf_take(&n), out);
}

static int s_matmul(s_spec_t *s, kl_workload_t **out)
{
    int64_t M, N, K, bias;
    s_act_t act;
    const char *in;
    int rc = s_int(s, "M", -1, 1, &M) ?: s_int(s, "N", -1, 1, &N)
                                        ?: s_int(s, "K", -1, 1, &K)
                                        ?: s_flag(s, "bias", 0, &bias)
                                        ?: s_act(s, &act)
                                        ?: s_in_dtype(s, &in);
    if (rc)
        return rc;
    kl_buf_t t = {0}, n = {0};
    kl_buf_printf(&t, "C[i,j] += A[i,k] * B[k,j]%s",
                  bias ? " | + bias[j]" : "");
    s_act_epilogue(&t, &act);
    kl_buf_printf(&t, " where i=%lld, j=%lld, k=%lld", (long long)M,
                  (long long)N, (long long)K);
    if (strcmp(in, "f32"))
        kl_buf_printf(&t, "; A: %s[%lld,%lld], B: %s[%lld,%lld]", in,
                      (long long)M, (long long)K, in, (long long)K,
                      (long long)N);
    kl_buf_printf(&n, "matmul_%lld_%lld_%lld%s", (long long)M, (long long)N,
                  (long long)K, bias ? "_bias" : "");
    s_act_name(&n, &act);
    if (strcmp(in, "f32"))
        kl_buf_printf(&n, "_%s", in);
    return s_finish(s, kl_buf_take(&t), "matmul", kl_buf_take(&n), out);
}

static int s_batch_matmul(s_spec_t *s, kl_workload_t **out)
{
    int64_t B, M, N, K;
    const char *in;
    int rc = s_int(s, "B", -1, 1, &B) ?: s_int(s, "M", -1, 1, &M)
                                        ?: s_int(s, "N", -1, 1, &N)
                                        ?: s_int(s, "K", -1, 1, &K)
                                        ?: s_in_dtype(s, &in);
    if (rc)
        return rc;
    bool half = strcmp(in, "f32") != 0;
    char decl[160] = "";
    if (half)
        snprintf(decl, sizeof decl,
                 "; A: %s[%lld,%lld,%lld], B: %s[%lld,%lld,"
                 "%lld]",
                 in, (long long)B, (long long)M, (long long)K, in, (long long)B,
                 (long long)K, (long long)N);
    char *text = kl_xasprintf("C[b,i,j] += A[b,i,k] * B[b,k,j] where b=%lld, "
                              "i=%lld, j=%lld, k=%lld%s",
                              (long long)B, (long long)M, (long long)N,
                              (long long)K, decl);
    char *name = kl_xasprintf("batch_matmul_%lld_%lld_%lld_%lld%s%s",
                              (long long)B, (long long)M, (long long)N,
                              (long long)K, half ? "_" : "", half ? in : "");
    return s_finish(s, text, "batch_matmul", name, out);
}

static int s_dense(s_spec_t *s, kl_workload_t **out)
{
    int64_t N, I, O, bias;
    s_act_t act;
    const char *in;
    int rc = s_int(s, "N", -1, 1, &N) ?: s_int(s, "I", -1, 1, &I)
                                        ?: s_int(s, "O", -1, 1, &O)
                                        ?: s_flag(s, "bias", 1, &bias)
                                        ?: s_act(s, &act)
                                        ?: s_in_dtype(s, &in);
    if (rc)
        return rc;
    kl_buf_t t = {0}, n = {0};
    kl_buf_printf(&t, "Y[n,o] += X[n,i] * W[o,i]%s", bias ? " | + b[o]" : "");
    s_act_epilogue(&t, &act);
    kl_buf_printf(&t, " where n=%lld, o=%lld, i=%lld; W: const %s[%lld,%lld]",
                  (long long)N, (long long)O, (long long)I, in, (long long)O,
                  (long long)I);
    if (strcmp(in, "f32"))
        kl_buf_printf(&t, ", X: %s[%lld,%lld]", in, (long long)N, (long long)I);
    if (bias)
        kl_buf_printf(&t, ", b: const f32[%lld]", (long long)O);
    kl_buf_printf(&n, "dense_%lld_%lld_%lld%s", (long long)N, (long long)I,
                  (long long)O, bias ? "_bias" : "");
    s_act_name(&n, &act);
    if (strcmp(in, "f32"))
        kl_buf_printf(&n, "_%s", in);
    return s_finish(s, kl_buf_take(&t), "dense", kl_buf_take(&n), out);
}

typedef struct {
    int64_t N, C, H, W, K, R, S, stride, pad, dil, groups, bias, res;
    s_act_t act;
    bool nhwc;
    s_quant_t q; /* q.on for qconv2d / qdepthwise_conv2d */
} s_conv_t;

static int s_conv_params(s_spec_t *s, s_conv_t *c, bool has_k)
{
    int rc = s_int(s, "N", -1, 1, &c->N) ?: s_int(s, "C", -1, 1, &c->C)
                                           ?: s_int(s, "H", -1, 1, &c->H)
                                           ?: s_int(s, "W", -1, 1, &c->W)
                                           ?: s_int(s, "R", -1, 1, &c->R)
                                           ?: s_int(s, "S", -1, 1, &c->S)
                                           ?: s_int(s, "stride", 1, 1,
                                                    &c->stride)
                                           ?: s_int(s, "pad", 0, 0, &c->pad)
                                           ?: s_int(s, "dilation", 1, 1,
                                                    &c->dil)
                                           ?: s_flag(s, "bias", 0, &c->bias)
                                           ?: s_act(s, &c->act)
                                           ?: s_flag(s, "residual", 0,
                                                     &c->res);
    if (!rc && has_k)
        rc = s_int(s, "K", -1, 1, &c->K);
    if (!rc && s->op[0] == 'q') {
        rc = s_quant(s, &c->q, &c->act);
        if (!rc && c->res)
            rc = kl_seterr(s->err, KL_ERR_INVAL,
                           "%s: residual=1 is not supported (a quantized "
                           "residual needs its own scale)",
                           s->op);
    }
    return rc;
}

/* Epilogue text of bias / residual / relu or clip; ch is the output
 * channel index expression, outidx the output access indices. */
static void s_conv_epilogue(kl_buf_t *b, const s_conv_t *c, const char *ch,
                            const char *outidx)
{
    if (c->q.on) {
        s_qepilogue(b, &c->q, &c->act, c->bias, ch);
        return;
    }
    if (c->bias)
        kl_buf_printf(b, " | + bias[%s]", ch);
    if (c->res)
        kl_buf_printf(b, " | + Res[%s]", outidx);
    s_act_epilogue(b, &c->act);
}

static char *s_conv_name(const char *op, const s_conv_t *c, bool has_k)
{
    kl_buf_t b = {0};
    kl_buf_printf(&b, "%s_%lld_%lld_%lld_%lld", op, (long long)c->N,
                  (long long)c->C, (long long)c->H, (long long)c->W);
    if (has_k)
        kl_buf_printf(&b, "_%lld", (long long)c->K);
    kl_buf_printf(&b, "_%lld_%lld_s%lld_p%lld", (long long)c->R,
                  (long long)c->S, (long long)c->stride, (long long)c->pad);
    if (c->dil != 1)
        kl_buf_printf(&b, "_d%lld", (long long)c->dil);
    if (c->groups > 1)
        kl_buf_printf(&b, "_g%lld", (long long)c->groups);
    if (c->nhwc)
        kl_buf_puts(&b, "_nhwc");
    if (c->bias)
        kl_buf_puts(&b, "_bias");
    if (c->res)
        kl_buf_puts(&b, "_res");
    if (c->q.on)
        s_qname(&b, &c->q);
    s_act_name(&b, &c->act);
    return kl_buf_take(&b);
}

/* conv2d. With groups > 1 the output channel is split into (g, f) so that
 * the output access stays a list of iterators: Y is then declared
 * [N,G,K/G,P,Q] (NCHW) or [N,P,Q,G,K/G] (NHWC), the same memory as the
 * 4-D tensor. NHWC takes its weight as [R,S,C/G,K]. */
static int s_conv2d(s_spec_t *s, kl_workload_t **out)
{
    s_conv_t c = {0};
    int rc = s_conv_params(s, &c, true) ?: s_int(s, "groups", 1, 1, &c.groups);
    if (rc)
        return rc;
    s_kv_t *lay = s_find(s, "layout");
    if (lay && strcmp(lay->val, "NHWC") == 0)
        c.nhwc = true;
    else if (lay && strcmp(lay->val, "NCHW") != 0)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for layout (NCHW or NHWC)", s->op,
                         lay->val);
    if (c.C % c.groups)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: groups=%lld does not divide C=%lld", s->op,
                         (long long)c.groups, (long long)c.C);
    if (c.K % c.groups)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: groups=%lld does not divide K=%lld", s->op,
                         (long long)c.groups, (long long)c.K);
    int64_t P = 0, Q = 0, G = c.groups, Cg = c.C / G, Kg = c.K / G;
    if ((rc = s_outsize(s, "height", c.H, c.R, c.stride, c.pad, c.dil, &P)) ||
        (rc = s_outsize(s, "width", c.W, c.S, c.stride, c.pad, c.dil, &Q)))
        return rc;
    char *iy = s_window("y", c.stride, "r", c.dil, c.pad);
    char *ix = s_window("x", c.stride, "s", c.dil, c.pad);
    char cin[64] = "c", cout[64] = "f";
    if (G > 1) {
        snprintf(cin, sizeof(cin), "g*%lld+c", (long long)Cg);
        snprintf(cout, sizeof(cout), "g*%lld+f", (long long)Kg);
    }
    const char *oi = c.nhwc ? (G > 1 ? "n,y,x,g,f" : "n,y,x,f")
                            : (G > 1 ? "n,g,f,y,x" : "n,f,y,x");
    kl_buf_t b = {0}, xa = {0};
    if (c.nhwc)
        kl_buf_printf(&xa, "X[n,%s,%s,%s]", iy, ix, cin);
    else
        kl_buf_printf(&xa, "X[n,%s,%s,%s]", cin, iy, ix);
    kl_buf_printf(&b, "Y[%s] += ", oi);
    if (c.q.on)
        s_qinput(&b, &c.q, xa.data);
    else
        kl_buf_puts(&b, xa.data);
    kl_buf_free(&xa);
    if (c.nhwc)
        kl_buf_printf(&b, " * W[r,s,c,%s]", cout);
    else
        kl_buf_printf(&b, " * W[%s,c,r,s]", cout);
    const char *xt = c.q.on ? "u8" : "f32", *wt = c.q.on ? "s8" : "f32";
    s_conv_epilogue(&b, &c, cout, oi);
    kl_buf_printf(&b,
                  " where n=%lld, f=%lld, y=%lld, x=%lld, c=%lld, r=%lld, "
                  "s=%lld",
                  (long long)c.N, (long long)Kg, (long long)P, (long long)Q,
                  (long long)Cg, (long long)c.R, (long long)c.S);
    if (G > 1)
        kl_buf_printf(&b, ", g=%lld", (long long)G);
    if (c.nhwc)
        kl_buf_printf(
            &b,
            "; X: %s[%lld,%lld,%lld,%lld], W: const %s[%lld,%lld,%lld,"
            "%lld]",
            xt, (long long)c.N, (long long)c.H, (long long)c.W, (long long)c.C,
            wt, (long long)c.R, (long long)c.S, (long long)Cg, (long long)c.K);
    else
        kl_buf_printf(
            &b,
            "; X: %s[%lld,%lld,%lld,%lld], W: const %s[%lld,%lld,%lld,"
            "%lld]",
            xt, (long long)c.N, (long long)c.C, (long long)c.H, (long long)c.W,
            wt, (long long)c.K, (long long)Cg, (long long)c.R, (long long)c.S);
    if (c.q.on) {
        char *ysh;
        if (c.nhwc)
            ysh =
                G > 1
                    ? kl_xasprintf("%lld,%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)P, (long long)Q, (long long)G,
                                   (long long)Kg)
                    : kl_xasprintf("%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)P, (long long)Q, (long long)c.K);
        else
            ysh =
                G > 1
                    ? kl_xasprintf("%lld,%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)G, (long long)Kg, (long long)P,
                                   (long long)Q)
                    : kl_xasprintf("%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)c.K, (long long)P, (long long)Q);
        s_qdecls(&b, &c.q, c.bias, c.K, "Y", ysh);
        free(ysh);
    } else if (c.bias) {
        kl_buf_printf(&b, ", bias: const f32[%lld]", (long long)c.K);
    }
    free(iy);
    free(ix);
    return s_finish(s, kl_buf_take(&b), s->op, s_conv_name(s->op, &c, true),
                    out);
}

/* depthwise_conv2d (NCHW): each input channel c makes `multiplier`
 * output channels c*M+m, weight [C*M,1,R,S]. With M > 1 the output is
 * declared [N,C,M,P,Q], the same memory as [N,C*M,P,Q]. */
static int s_depthwise(s_spec_t *s, kl_workload_t **out)
{
    s_conv_t c = {0};
    int64_t M, P = 0, Q = 0;
    int rc = s_conv_params(s, &c, false) ?: s_int(s, "multiplier", 1, 1, &M);
    if (rc ||
        (rc = s_outsize(s, "height", c.H, c.R, c.stride, c.pad, c.dil, &P)) ||
        (rc = s_outsize(s, "width", c.W, c.S, c.stride, c.pad, c.dil, &Q)))
        return rc;
    char *iy = s_window("y", c.stride, "r", c.dil, c.pad);
    char *ix = s_window("x", c.stride, "s", c.dil, c.pad);
    char ch[64] = "c";
    if (M > 1)
        snprintf(ch, sizeof(ch), "c*%lld+m", (long long)M);
    const char *oi = M > 1 ? "n,c,m,y,x" : "n,c,y,x";
    kl_buf_t b = {0}, xa = {0};
    kl_buf_printf(&xa, "X[n,c,%s,%s]", iy, ix);
    kl_buf_printf(&b, "Y[%s] += ", oi);
    if (c.q.on)
        s_qinput(&b, &c.q, xa.data);
    else
        kl_buf_puts(&b, xa.data);
    kl_buf_free(&xa);
    kl_buf_printf(&b, " * W[%s,0,r,s]", ch);
    const char *xt = c.q.on ? "u8" : "f32", *wt = c.q.on ? "s8" : "f32";
    s_conv_epilogue(&b, &c, ch, oi);
    kl_buf_printf(&b, " where n=%lld, c=%lld, y=%lld, x=%lld, r=%lld, s=%lld",
                  (long long)c.N, (long long)c.C, (long long)P, (long long)Q,
                  (long long)c.R, (long long)c.S);
    if (M > 1)
        kl_buf_printf(&b, ", m=%lld", (long long)M);
    kl_buf_printf(
        &b, "; X: %s[%lld,%lld,%lld,%lld], W: const %s[%lld,1,%lld,%lld]", xt,
        (long long)c.N, (long long)c.C, (long long)c.H, (long long)c.W, wt,
        (long long)(c.C * M), (long long)c.R, (long long)c.S);
    if (c.q.on) {
        char *ysh =
            M > 1 ? kl_xasprintf("%lld,%lld,%lld,%lld,%lld", (long long)c.N,
                                 (long long)c.C, (long long)M, (long long)P,
                                 (long long)Q)
                  : kl_xasprintf("%lld,%lld,%lld,%lld", (long long)c.N,
                                 (long long)c.C, (long long)P, (long long)Q);
        s_qdecls(&b, &c.q, c.bias, c.C * M, "Y", ysh);
        free(ysh);
    } else if (c.bias) {
        kl_buf_printf(&b, ", bias: const f32[%lld]", (long long)(c.C * M));
    }
    free(iy);
    free(ix);
    char *name = s_conv_name(s->op, &c, false);
    if (M > 1) {
        char *n2 = kl_xasprintf("%s_m%lld", name, (long long)M);
        free(name);
        name = n2;
    }
    return s_finish(s, kl_buf_take(&b), s->op, name, out);
}

/* conv2d_transpose: X [N,C,H,W], W [C,K,R,S] (PyTorch's ConvTranspose2d),
 * Y [N,K,Ho,Wo] with Ho = (H-1)*stride - 2*pad + R + output_pad. Output
 * row y gathers input row (y+pad-r)/stride where that divides exactly. */
static int s_conv2d_transpose(s_spec_t *s, kl_workload_t **out)
{
    int64_t N, C, H, W, K, R, S, st, pad, opad;
    int rc = s_int(s, "N", -1, 1, &N) ?: s_int(s, "C", -1, 1, &C)
                                        ?: s_int(s, "H", -1, 1, &H)
                                        ?: s_int(s, "W", -1, 1, &W)
                                        ?: s_int(s, "K", -1, 1, &K)
                                        ?: s_int(s, "R", -1, 1, &R)
                                        ?: s_int(s, "S", -1, 1, &S)
                                        ?: s_int(s, "stride", 1, 1, &st)
                                        ?: s_int(s, "pad", 0, 0, &pad)
                                        ?: s_int(s, "output_pad", 0, 0, &opad);
    if (rc)
        return rc;
    if (opad >= st)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "conv2d_transpose: output_pad=%lld must be less than "
                         "stride=%lld",
                         (long long)opad, (long long)st);
    int64_t Ho = (H - 1) * st - 2 * pad + R + opad;
    int64_t Wo = (W - 1) * st - 2 * pad + S + opad;
    if (Ho < 1 || Wo < 1)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "conv2d_transpose: pad=%lld leaves an empty output "
                         "(%lldx%lld)",
                         (long long)pad, (long long)Ho, (long long)Wo);
    char *text = kl_xasprintf(
        "Y[n,k,y,x] += X[n,c,(y+%lld-r)/%lld,(x+%lld-s)/%lld] * W[c,k,r,s] "
        "where n=%lld, k=%lld, y=%lld, x=%lld, c=%lld, r=%lld, s=%lld; "
        "X: f32[%lld,%lld,%lld,%lld], W: const f32[%lld,%lld,%lld,%lld]",
        (long long)pad, (long long)st, (long long)pad, (long long)st,
        (long long)N, (long long)K, (long long)Ho, (long long)Wo, (long long)C,
        (long long)R, (long long)S, (long long)N, (long long)C, (long long)H,
        (long long)W, (long long)C, (long long)K, (long long)R, (long long)S);
    char *name = kl_xasprintf(
        "conv2d_transpose_%lld_%lld_%lld_%lld_%lld_%lld_%lld_s%lld_p%lld%s",
        (long long)N, (long long)C, (long long)H, (long long)W, (long long)K,
        (long long)R, (long long)S, (long long)st, (long long)pad,
        opad ? "_op" : "");
    return s_finish(s, text, "conv2d_transpose", name, out);
}

/* max_pool2d / avg_pool2d, NCHW. max: out-of-range window points are
 * skipped (-inf padding). avg: sum times 1/(R*S), padding counted
 * (count_include_pad). */
static int s_pool(s_spec_t *s, bool is_max, kl_workload_t **out)
{
    int64_t N, C, H, W, R, S, st, pad, P = 0, Q = 0;
    int rc = s_int(s, "N", -1, 1, &N) ?: s_int(s, "C", -1, 1, &C)
                                        ?: s_int(s, "H", -1, 1, &H)
                                        ?: s_int(s, "W", -1, 1, &W)
                                        ?: s_int(s, "R", -1, 1, &R)
                                        ?: s_int(s, "S", -1, 1, &S);
    if (!rc)
        rc = s_int(s, "stride", R, 1, &st) ?: s_int(s, "pad", 0, 0, &pad);
    if (rc)
        return rc;
    if (pad >= R || pad >= S)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: pad=%lld must be less than the window (R=%lld, "
                         "S=%lld)",
                         s->op, (long long)pad, (long long)R, (long long)S);
    if ((rc = s_outsize(s, "height", H, R, st, pad, 1, &P)) ||
        (rc = s_outsize(s, "width", W, S, st, pad, 1, &Q)))
        return rc;
    char *iy = s_window("y", st, "r", 1, pad);
    char *ix = s_window("x", st, "s", 1, pad);
    kl_buf_t b = {0};
    kl_buf_printf(&b, "Y[n,c,y,x] %s X[n,c,%s,%s]", is_max ? "max=" : "+=", iy,
                  ix);
    if (!is_max)
        kl_buf_printf(&b, " | * %.17g", 1.0 / (double)(R * S));
    kl_buf_printf(&b,
                  " where n=%lld, c=%lld, y=%lld, x=%lld, r=%lld, s=%lld; "
                  "X: f32[%lld,%lld,%lld,%lld]",
                  (long long)N, (long long)C, (long long)P, (long long)Q,
                  (long long)R, (long long)S, (long long)N, (long long)C,
                  (long long)H, (long long)W);
    free(iy);
    free(ix);
    char *name =
        kl_xasprintf("%s_%lld_%lld_%lld_%lld_%lld_%lld_s%lld_p%lld", s->op,
                     (long long)N, (long long)C, (long long)H, (long long)W,
                     (long long)R, (long long)S, (long long)st, (long long)pad);
    return s_finish(s, kl_buf_take(&b), s->op, name, out);
}

/* add / relu / clip over shape=AxBxC; clip's bounds are lo= and hi=,
 * its workload the clip(lo, hi) epilogue on a copy. */
static int s_elementwise(s_spec_t *s, kl_workload_t **out)
{
    bool is_add = strcmp(s->op, "add") == 0;
    s_act_t clip = {.clip = strcmp(s->op, "clip") == 0};
    char lo[40] = "", hi[40] = "";
    if (clip.clip) {
        int rc = s_num(s, "lo", &clip.lo) ?: s_num(s, "hi", &clip.hi);
        if (rc)
            return rc;
        s_num_text(lo, clip.lo);
        s_num_text(hi, clip.hi);
        if (clip.lo > clip.hi)
            return kl_seterr(s->err, KL_ERR_INVAL, "clip: lo=%s is above hi=%s",
                             lo, hi);
    }
    s_kv_t *kv = s_find(s, "shape");
    if (!kv)
        return kl_seterr(s->err, KL_ERR_INVAL, "%s: missing shape", s->op);
    int64_t dims[KL_IR_MAX_DIMS];
    int nd = 0;
    const char *p = kv->val;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > KL_IR__INT_MAX ||
            nd == KL_IR_MAX_DIMS || (*end && *end != 'x') ||
            (*end == 'x' && !end[1]) || *p == '+' || *p == ' ')
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: bad value '%s' for shape (expected AxBxC, "
                             "at most %d positive sizes)",
                             s->op, kv->val, KL_IR_MAX_DIMS);
        dims[nd++] = v;
        p = *end ? end + 1 : end;
    }
    kl_buf_t idx = {0}, where = {0}, shp = {0};
    for (int d = 0; d < nd; d++) {
        kl_buf_printf(&idx, "%sd%d", d ? "," : "", d);
        kl_buf_printf(&where, "%sd%d=%lld", d ? ", " : "", d,
                      (long long)dims[d]);
        kl_buf_printf(&shp, "%s%lld", d ? "x" : "", (long long)dims[d]);
    }
    kl_buf_t t = {0}, n = {0};
    if (is_add)
        kl_buf_printf(&t, "Y[%s] = A[%s] + B[%s]", idx.data, idx.data,
                      idx.data);
    else if (clip.clip)
        kl_buf_printf(&t, "Y[%s] = X[%s]", idx.data, idx.data);
    else
        kl_buf_printf(&t, "Y[%s] = max(X[%s], 0)", idx.data, idx.data);
    s_act_epilogue(&t, &clip);
    kl_buf_printf(&t, " where %s", where.data);
    kl_buf_printf(&n, "%s_%s", s->op, shp.data);
    if (clip.clip)
        kl_buf_printf(&n, "_%s_%s", lo, hi);
    char *text = kl_buf_take(&t), *name = kl_buf_take(&n);
    kl_buf_free(&idx);
    kl_buf_free(&where);
    kl_buf_free(&shp);
    return s_finish(s, text, s->op, name, out);
}

static const char *s_ops[] = {
    "matmul",
    "batch_matmul",
    "dense",
    "conv2d",
    "depthwise_conv2d",
    "conv2d_transpose",
    "max_pool2d",
    "avg_pool2d",
    "add",
    "relu",
    "clip",
    "qmatmul",
    "qdense",
    "qconv2d",
    "qdepthwise_conv2d",
};

int kl_workload_from_op(const char *spec, kl_workload_t **out, char *err)
{
    *out = NULL;
    s_spec_t s = {.err = err};
    if (!spec)
        return kl_seterr(err, KL_ERR_INVAL, "no operator given");
    int rc = s_split(spec, &s);
    if (rc)
        return rc;
    const char *op = s.op;
    if (strcmp(op, "matmul") == 0)
        return s_matmul(&s, out);
    if (strcmp(op, "batch_matmul") == 0)
        return s_batch_matmul(&s, out);
    if (strcmp(op, "dense") == 0)
        return s_dense(&s, out);
    if (strcmp(op, "conv2d") == 0 || strcmp(op, "qconv2d") == 0)
        return s_conv2d(&s, out);
    if (strcmp(op, "depthwise_conv2d") == 0 ||
        strcmp(op, "qdepthwise_conv2d") == 0)
        return s_depthwise(&s, out);
    if (strcmp(op, "qmatmul") == 0 || strcmp(op, "qdense") == 0)
        return s_qmatmul(&s, op[1] == 'd', out);
    if (strcmp(op, "conv2d_transpose") == 0)
        return s_conv2d_transpose(&s, out);
    if (strcmp(op, "max_pool2d") == 0 || strcmp(op, "avg_pool2d") == 0)
        return s_pool(&s, op[1] == 'a', out);
    if (strcmp(op, "add") == 0 || strcmp(op, "relu") == 0 ||
        strcmp(op, "clip") == 0)
        return s_elementwise(&s, out);
    return kl_seterr(
        err, KL_ERR_INVAL,
        "unknown operator '%s' (expected matmul, batch_matmul, "
        "dense, conv2d, depthwise_conv2d, conv2d_transpose, "
        "max_pool2d, avg_pool2d, add, relu, clip, qmatmul, qdense, "
        "qconv2d or qdepthwise_conv2d)",
        op);
}

int kl_workload_from_string(const char *s, kl_workload_t **out, char *err)
{
    *out = NULL;
    if (!s)
        return kl_seterr(err, KL_ERR_INVAL, "no workload given");
    while (*s == ' ' || *s == '\t' || *s == '\n')
        s++;
    size_t n = strcspn(s, " \t\n");
    for (size_t i = 0; i < sizeof(s_ops) / sizeof(s_ops[0]); i++)
        if (strlen(s_ops[i]) == n && strncmp(s, s_ops[i], n) == 0)
            return kl_workload_from_op(s, out, err);
    return kl_workload_parse(s, out, err);
}
