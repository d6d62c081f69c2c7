/* kl_ir_spec.c - the named operators' common ground: the "op K=V ..."
 * spec split into its parameters, each parameter read and checked (integers,
 * flags, numbers, the activation, the input dtype, a q-op's quantization),
 * and the pieces of text every operator writes (epilogues, names, window
 * indices); the builders (kl_ir_ops.c, kl_ir_ops_conv.c) sit on it. */
#include "kl_ir_ops_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"

/* Splits "op K=V K=V ..." into s. */
int kl_ir__spec_split(const char *spec, kl_ir__spec_t *s)
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
        if (s->n == KL_IR__MAX_KV)
            return kl_seterr(s->err, KL_ERR_INVAL, "%s: too many parameters",
                             s->op);
        kl_ir__kv_t *kv = &s->kv[s->n];
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

kl_ir__kv_t *kl_ir__spec_find(kl_ir__spec_t *s, const char *key)
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
int kl_ir__spec_int(kl_ir__spec_t *s, const char *key, int64_t def, int64_t min,
                    int64_t *out)
{
    kl_ir__kv_t *kv = kl_ir__spec_find(s, key);
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

int kl_ir__spec_flag(kl_ir__spec_t *s, const char *key, int64_t def,
                     int64_t *out)
{
    int rc = kl_ir__spec_int(s, key, def, 0, out);
    if (!rc && *out > 1)
        return kl_seterr(s->err, KL_ERR_INVAL, "%s: %s must be 0 or 1", s->op,
                         key);
    return rc;
}

/* Shortest of %.15g / %.17g that reads back to the same double (as the
 * canonical text prints numbers). */
void kl_ir__num_text(char out[40], double v)
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
int kl_ir__spec_num(kl_ir__spec_t *s, const char *key, double *out)
{
    kl_ir__kv_t *kv = kl_ir__spec_find(s, key);
    if (!kv)
        return kl_seterr(s->err, KL_ERR_INVAL, "%s: missing %s", s->op, key);
    if (!s_strnum(kv->val, out))
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for %s (a finite number)", s->op,
                         kv->val, key);
    return KL_OK;
}

/* act=NAME (and hard_sigmoid's alpha= and beta=) into a, after relu=
 * and clip=. */
static int s_spec_smooth(kl_ir__spec_t *s, kl_ir__act_t *a)
{
    kl_ir__kv_t *kv = kl_ir__spec_find(s, "act");
    kl_ir__kv_t *al = kl_ir__spec_find(s, "alpha");
    kl_ir__kv_t *be = kl_ir__spec_find(s, "beta");
    a->alpha = KL_ACT_HSIG_ALPHA;
    a->beta = KL_ACT_HSIG_BETA;
    if (!kv) {
        if (al || be)
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: %s= without act=hard_sigmoid", s->op,
                             al ? "alpha" : "beta");
        return KL_OK;
    }
    if (!kl_act_parse(kv->val, &a->act))
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for act (expected %s)", s->op,
                         kv->val, kl_act_list());
    if (a->relu || a->clip)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: %s and act=%s are both activations; give one",
                         s->op, a->relu ? "relu=1" : "clip=", kv->val);
    if ((al || be) && a->act != KL_ACT_HARD_SIGMOID)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: %s= is hard_sigmoid's, not act=%s's", s->op,
                         al ? "alpha" : "beta", kv->val);
    if (al && !s_strnum(al->val, &a->alpha))
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for alpha (a finite number)",
                         s->op, al->val);
    if (be && !s_strnum(be->val, &a->beta))
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for beta (a finite number)", s->op,
                         be->val);
    a->smooth = true;
    return KL_OK;
}

int kl_ir__spec_act(kl_ir__spec_t *s, kl_ir__act_t *a)
{
    memset(a, 0, sizeof(*a));
    int rc = kl_ir__spec_flag(s, "relu", 0, &a->relu);
    kl_ir__kv_t *kv = rc ? NULL : kl_ir__spec_find(s, "clip");
    if (!kv)
        return rc ? rc : s_spec_smooth(s, a);
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
    return s_spec_smooth(s, a);
}

/* The inputs' dtype "in=f32|f16|bf16" (default f32; the output and any
 * bias stay f32: f16/bf16 products are accumulated in f32). */
int kl_ir__spec_in_dtype(kl_ir__spec_t *s, const char **out)
{
    kl_ir__kv_t *kv = kl_ir__spec_find(s, "in");
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
void kl_ir__act_epilogue(kl_buf_t *b, const kl_ir__act_t *a)
{
    char lo[40], hi[40];
    if (a->relu)
        kl_buf_puts(b, " | relu");
    if (a->smooth) {
        kl_buf_printf(b, " | %s", kl_act_name(a->act));
        if (a->act == KL_ACT_HARD_SIGMOID) {
            kl_ir__num_text(lo, a->alpha);
            kl_ir__num_text(hi, a->beta);
            kl_buf_printf(b, "(%s, %s)", lo, hi);
        }
    }
    if (!a->clip)
        return;
    kl_ir__num_text(lo, a->lo);
    kl_ir__num_text(hi, a->hi);
    kl_buf_printf(b, " | clip(%s, %s)", lo, hi);
}

/* The activation's part of a name ("_relu", "_clip0_6" or ""). */
void kl_ir__act_name(kl_buf_t *b, const kl_ir__act_t *a)
{
    char lo[40], hi[40];
    if (a->relu)
        kl_buf_puts(b, "_relu");
    if (a->smooth) {
        kl_buf_printf(b, "_%s", kl_act_name(a->act));
        if (a->act == KL_ACT_HARD_SIGMOID &&
            (a->alpha != KL_ACT_HSIG_ALPHA || a->beta != KL_ACT_HSIG_BETA)) {
            kl_ir__num_text(lo, a->alpha);
            kl_ir__num_text(hi, a->beta);
            kl_buf_printf(b, "_a%s_b%s", lo, hi);
        }
    }
    if (!a->clip)
        return;
    kl_ir__num_text(lo, a->lo);
    kl_ir__num_text(hi, a->hi);
    kl_buf_printf(b, "_clip%s_%s", lo, hi);
}

static int s_unused(const kl_ir__spec_t *s)
{
    for (int i = 0; i < s->n; i++)
        if (!s->kv[i].used)
            return kl_seterr(s->err, KL_ERR_INVAL, "%s: unknown parameter '%s'",
                             s->op, s->kv[i].key);
    return KL_OK;
}

/* Parses the generated text and names the result. Takes text. */
int kl_ir__spec_finish(kl_ir__spec_t *s, char *text, const char *kind,
                       char *name, kl_workload_t **out)
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
char *kl_ir__window(const char *it, int64_t stride, const char *kt, int64_t dil,
                    int64_t pad)
{
    return kl_xasprintf("%s*%lld+%s*%lld-%lld", it, (long long)stride, kt,
                        (long long)dil, (long long)pad);
}

int kl_ir__spec_outsize(kl_ir__spec_t *s, const char *what, int64_t in,
                        int64_t k, int64_t stride, int64_t pad, int64_t dil,
                        int64_t *out)
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

int kl_ir__spec_quant(kl_ir__spec_t *s, kl_ir__quant_t *q,
                      const kl_ir__act_t *act)
{
    memset(q, 0, sizeof(*q));
    if (act->smooth)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: act=%s is not supported by a quantized op "
                         "(relu= and clip= are)",
                         s->op, kl_act_name(act->act));
    q->on = true;
    q->out = KL_DT_U8;
    q->per_channel = true;
    kl_ir__kv_t *kv = kl_ir__spec_find(s, "out");
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
    int rc = kl_ir__spec_int(s, "za", 0, 0, &q->za);
    if (rc)
        return rc;
    if (q->za > 255)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: za=%lld is out of range (0..255, a u8 zero "
                         "point)",
                         s->op, (long long)q->za);
    kv = kl_ir__spec_find(s, "zo");
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
    kv = kl_ir__spec_find(s, "scale");
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
void kl_ir__qinput(kl_buf_t *b, const kl_ir__quant_t *q, const char *access)
{
    if (q->za)
        kl_buf_printf(b, "(%s - %lld)", access, (long long)q->za);
    else
        kl_buf_puts(b, access);
}

/* Epilogue of a q-op: [+ bias[ch]], requant, then the activation as
 * quantized bounds (relu: clip(zo, max)). */
void kl_ir__qepilogue(kl_buf_t *b, const kl_ir__quant_t *q,
                      const kl_ir__act_t *act, bool bias, const char *ch)
{
    if (bias)
        kl_buf_printf(b, " | + bias[%s]", ch);
    if (q->out != KL_DT_S32) {
        char sc[40];
        kl_ir__num_text(sc, (float)q->scale);
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
void kl_ir__qdecls(kl_buf_t *b, const kl_ir__quant_t *q, bool bias, int64_t O,
                   const char *yname, const char *yshape)
{
    if (bias)
        kl_buf_printf(b, ", bias: const s32[%lld]", (long long)O);
    if (q->out != KL_DT_S32 && q->per_channel)
        kl_buf_printf(b, ", scale: const f32[%lld]", (long long)O);
    kl_buf_printf(b, ", %s: %s[%s]", yname, kl_dtype_name(q->out), yshape);
}

/* The quantization's part of a name ("_za3_zo5_s8"). */
void kl_ir__qname(kl_buf_t *b, const kl_ir__quant_t *q)
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
