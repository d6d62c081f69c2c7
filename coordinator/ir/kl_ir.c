/* kl_ir.c - workloads: ownership, dtypes, canonical text, key and
 * argument list. Parsing is in kl_ir_parse.c, named operators in
 * kl_ir_ops.c, FLOP counting in kl_ir_flop.c, the reference interpreter in
 * kl_ir_eval.c. */
#include "kl_ir_int.h"

#include "kl_err.h"
#include "kl_target.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kl_expr_t *kl_ir__expr_new(kl_expr_kind kind)
{
    kl_expr_t *e = kl_xcalloc(1, sizeof(*e));
    e->kind = kind;
    return e;
}

void kl_ir__expr_free(kl_expr_t *e)
{
    if (!e)
        return;
    kl_ir__expr_free(e->a);
    kl_ir__expr_free(e->b);
    free(e);
}

kl_expr_t *kl_ir__expr_clone(const kl_expr_t *e)
{
    if (!e)
        return NULL;
    kl_expr_t *c = kl_xmalloc(sizeof(*c));
    *c = *e;
    c->a = kl_ir__expr_clone(e->a);
    c->b = kl_ir__expr_clone(e->b);
    return c;
}

int kl_ir__expr_ops(const kl_expr_t *e)
{
    if (!e)
        return 0;
    switch (e->kind) {
    case KL_EX_CONST:
    case KL_EX_LOAD:
        return 0;
    case KL_EX_NEG:
        return 1 + kl_ir__expr_ops(e->a);
    default:
        return 1 + kl_ir__expr_ops(e->a) + kl_ir__expr_ops(e->b);
    }
}

void kl_workload_free(kl_workload_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_workload_t *w = *self_p;
    kl_ir__expr_free(w->body);
    free(w->name);
    free(w->canonical);
    free(w);
    *self_p = NULL;
}

kl_workload_t *kl_workload_clone(const kl_workload_t *w)
{
    if (!w)
        return NULL;
    kl_workload_t *c = kl_xmalloc(sizeof(*c));
    *c = *w;
    c->body = kl_ir__expr_clone(w->body);
    c->name = w->name ? kl_xstrdup(w->name) : NULL;
    c->canonical = w->canonical ? kl_xstrdup(w->canonical) : NULL;
    return c;
}

int kl_workload_output(const kl_workload_t *w)
{
    return w->ntensors - 1;
}

int kl_workload_ninputs(const kl_workload_t *w)
{
    return w->ntensors - 1;
}

/* Whether some dimension of a's tensor is indexed by two iterators or
 * more of at least min_extent points each. */
static bool s_shared_dim(const kl_workload_t *w, const kl_access_t *a,
                         int64_t min_extent)
{
    for (int d = 0; d < w->tensors[a->tensor].ndim; d++) {
        int n = 0;
        for (int it = 0; it < w->niters; it++)
            n += a->idx[d].coef[it] != 0 && w->iters[it].extent >= min_extent;
        if (n >= 2)
            return true;
    }
    return false;
}

bool kl_access_is_window(const kl_workload_t *w, const kl_access_t *a)
{
    return s_shared_dim(w, a, 1);
}

bool kl_access_window_trivial(const kl_workload_t *w, const kl_access_t *a)
{
    return !s_shared_dim(w, a, 2);
}

/* The bytes of the largest constant tensor that e reads without
 * iterator it. */
static int64_t s_const_across(const kl_workload_t *w, const kl_expr_t *e,
                              int it)
{
    if (!e)
        return 0;
    int64_t a = s_const_across(w, e->a, it), b = s_const_across(w, e->b, it);
    int64_t m = a > b ? a : b;
    if (e->kind != KL_EX_LOAD || !w->tensors[e->access.tensor].is_const)
        return m;
    const kl_tensor_t *t = &w->tensors[e->access.tensor];
    for (int d = 0; d < t->ndim; d++)
        if (e->access.idx[d].coef[it])
            return m;
    int64_t n = kl_tensor_numel(t) * (int64_t)kl_dtype_size(t->dtype);
    return n > m ? n : m;
}

int64_t kl_workload_const_across(const kl_workload_t *w, int it)
{
    return it < 0 || it >= w->niters ? 0 : s_const_across(w, w->body, it);
}

int64_t kl_tensor_numel(const kl_tensor_t *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

size_t kl_dtype_size(kl_dtype dt)
{
    switch (dt) {
    case KL_DT_F32:
    case KL_DT_S32:
        return 4;
    case KL_DT_F16:
    case KL_DT_BF16:
        return 2;
    case KL_DT_U8:
    case KL_DT_S8:
        return 1;
    }
    return 4;
}

bool kl_dtype_is_int(kl_dtype dt)
{
    return dt == KL_DT_S32 || dt == KL_DT_U8 || dt == KL_DT_S8;
}

bool kl_dtype_parse(const char *name, kl_dtype *out)
{
    static const struct {
        const char *name;
        kl_dtype dt;
    } tab[] = {{"f32", KL_DT_F32}, {"f16", KL_DT_F16}, {"bf16", KL_DT_BF16},
               {"u8", KL_DT_U8},   {"s8", KL_DT_S8},   {"s32", KL_DT_S32},
               {"i32", KL_DT_S32}};
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        if (strcmp(name, tab[i].name) == 0) {
            *out = tab[i].dt;
            return true;
        }
    }
    return false;
}

bool kl_workload_is_int(const kl_workload_t *w)
{
    return w->ntensors > 0 &&
           kl_dtype_is_int(w->tensors[kl_workload_output(w)].dtype);
}

bool kl_workload_is_bf16(const kl_workload_t *w)
{
    if (kl_workload_is_int(w))
        return false;
    for (int i = 0; i < w->ntensors; i++)
        if (w->tensors[i].dtype == KL_DT_BF16)
            return true;
    return false;
}

unsigned kl_workload_cpu_feats(const kl_workload_t *w)
{
    if (kl_workload_is_int(w))
        return KL_CPU_FEAT_VNNI | KL_CPU_FEAT_AVXVNNI | KL_CPU_FEAT_AMX;
    if (kl_workload_is_bf16(w))
        return KL_CPU_FEAT_BF16 | KL_CPU_FEAT_AMX;
    return 0;
}

int64_t kl_workload_red_len(const kl_workload_t *w)
{
    int64_t k = 1;
    for (int i = 0; i < w->niters; i++)
        if (w->iters[i].reduce)
            k *= w->iters[i].extent;
    return k;
}

double kl_workload_rtol(const kl_workload_t *w, double rtol)
{
    if (!kl_workload_is_bf16(w))
        return rtol;
    double k = ldexp(KL_BF16_RTOL_C * (double)kl_workload_red_len(w), -24);
    return k > rtol ? k : rtol;
}

uint16_t kl_dtype_bits(kl_dtype dt, float v)
{
    uint32_t x;
    memcpy(&x, &v, 4);
    if (dt == KL_DT_BF16) {
        if ((x & 0x7fffffffu) > 0x7f800000u)
            return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
        return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
    }
    /* f16: round to nearest even, subnormals and overflow to infinity. */
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00u;
    if (a >= 0x477ff000u) /* rounds to 65536 or above */
        return sign | 0x7c00u;
    if (a < 0x38800000u) {   /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) /* below half the smallest subnormal */
            return sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* 14..24 */
        uint32_t q = m >> shift, r = m & ((1u << shift) - 1),
                 h = 1u << (shift - 1);
        if (r > h || (r == h && (q & 1)))
            q++;
        return sign | (uint16_t)q;
    }
    uint32_t e = (a >> 23) - 112, m = a & 0x7fffffu;
    uint32_t v16 = (e << 10) | (m >> 13), r = m & 0x1fffu;
    if (r > 0x1000u || (r == 0x1000u && (v16 & 1)))
        v16++;
    return sign | (uint16_t)v16;
}

float kl_dtype_value(kl_dtype dt, uint16_t bits)
{
    uint32_t x;
    if (dt == KL_DT_BF16) {
        x = (uint32_t)bits << 16;
    } else {
        uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
        uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
        if (e == 0x1f) {
            x = sign | 0x7f800000u | (m << 13);
        } else if (e) {
            x = sign | ((e + 112) << 23) | (m << 13);
        } else if (!m) {
            x = sign;
        } else { /* subnormal: m * 2^-24 */
            float f = (float)m * 0x1p-24f;
            memcpy(&x, &f, 4);
            x |= sign;
        }
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

double kl_dtype_round(kl_dtype dt, double v)
{
    if (dt != KL_DT_F16 && dt != KL_DT_BF16)
        return v;
    return kl_dtype_value(dt, kl_dtype_bits(dt, (float)v));
}

const char *kl_dtype_ctype(kl_dtype dt)
{
    switch (dt) {
    case KL_DT_U8:
        return "uint8_t";
    case KL_DT_S8:
        return "int8_t";
    case KL_DT_S32:
        return "int32_t";
    default:
        return "float";
    }
}

const char *kl_dtype_name(kl_dtype dt)
{
    switch (dt) {
    case KL_DT_F32:
        return "f32";
    case KL_DT_F16:
        return "f16";
    case KL_DT_BF16:
        return "bf16";
    case KL_DT_S32:
        return "s32";
    case KL_DT_U8:
        return "u8";
    case KL_DT_S8:
        return "s8";
    }
    return "?";
}

void kl_ir__affine_range(const kl_workload_t *w, const kl_affine_t *a,
                         __int128 *lo, __int128 *hi)
{
    __int128 l = a->offset, h = a->offset;
    for (int k = 0; k < w->niters; k++) {
        __int128 t = (__int128)a->coef[k] * (w->iters[k].extent - 1);
        if (t < 0)
            l += t;
        else
            h += t;
    }
    *lo = l;
    *hi = h;
}

/* ---- canonical text ---------------------------------------------------- */

/* Shortest of %.15g / %.17g that reads back to the same double. */
static void s_fmt_num(char out[40], double v)
{
    snprintf(out, 40, "%.15g", v);
    if (strtod(out, NULL) != v)
        snprintf(out, 40, "%.17g", v);
}

/* Shortest %.Ng that reads back to the same f32 (requant scales are f32:
 * the parser rounds them so). */
static void s_fmt_f32(char out[40], double v)
{
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(out, 40, "%.*g", prec, v);
        if ((float)strtod(out, NULL) == (float)v)
            return;
    }
}

static void s_print_affine(kl_buf_t *b, const kl_workload_t *w,
                           const kl_affine_t *a)
{
    bool first = true;
    if (a->div > 1)
        kl_buf_puts(b, "(");
    for (int k = 0; k < w->niters; k++) {
        int64_t c = a->coef[k];
        if (c == 0)
            continue;
        if (c < 0)
            kl_buf_puts(b, "-");
        else if (!first)
            kl_buf_puts(b, "+");
        int64_t m = c < 0 ? -c : c;
        if (m != 1)
            kl_buf_printf(b, "%lld*", (long long)m);
        kl_buf_puts(b, w->iters[k].name);
        first = false;
    }
    if (first)
        kl_buf_printf(b, "%lld", (long long)a->offset);
    else if (a->offset != 0)
        kl_buf_printf(b, "%+lld", (long long)a->offset);
    if (a->div > 1)
        kl_buf_printf(b, ")/%lld", (long long)a->div);
}

static void s_print_access(kl_buf_t *b, const kl_workload_t *w,
                           const kl_access_t *acc)
{
    const kl_tensor_t *t = &w->tensors[acc->tensor];
    kl_buf_printf(b, "%s[", t->name);
    for (int d = 0; d < t->ndim; d++) {
        if (d)
            kl_buf_puts(b, ",");
        s_print_affine(b, w, &acc->idx[d]);
    }
    kl_buf_puts(b, "]");
}

static int s_prec(const kl_expr_t *e)
{
    switch (e->kind) {
    case KL_EX_ADD:
    case KL_EX_SUB:
        return 1;
    case KL_EX_MUL:
    case KL_EX_DIV:
        return 2;
    default:
        return 3;
    }
}

static void s_print_expr(kl_buf_t *b, const kl_workload_t *w,
                         const kl_expr_t *e, int minprec)
{
    static const char *ops[] = {
        [KL_EX_ADD] = " + ",
        [KL_EX_SUB] = " - ",
        [KL_EX_MUL] = " * ",
        [KL_EX_DIV] = " / ",
    };
    int p = s_prec(e);
    if (p < minprec)
        kl_buf_puts(b, "(");
    char num[40];
    switch (e->kind) {
    case KL_EX_CONST:
        s_fmt_num(num, e->value);
        kl_buf_puts(b, num);
        break;
    case KL_EX_LOAD:
        s_print_access(b, w, &e->access);
        break;
    case KL_EX_NEG:
        kl_buf_puts(b, "-");
        s_print_expr(b, w, e->a, 3);
        break;
    case KL_EX_MAX:
    case KL_EX_MIN:
        kl_buf_puts(b, e->kind == KL_EX_MAX ? "max(" : "min(");
        s_print_expr(b, w, e->a, 1);
        kl_buf_puts(b, ", ");
        s_print_expr(b, w, e->b, 1);
        kl_buf_puts(b, ")");
        break;
    default: /* binary, left-associative */
        s_print_expr(b, w, e->a, p);
        kl_buf_puts(b, ops[e->kind]);
        s_print_expr(b, w, e->b, p + 1);
        break;
    }
    if (p < minprec)
        kl_buf_puts(b, ")");
}

static void s_print_epilogue(kl_buf_t *b, const kl_workload_t *w,
                             const kl_epilogue_t *ep)
{
    char lo[40], hi[40];
    s_fmt_num(lo, ep->lo);
    s_fmt_num(hi, ep->hi);
    switch ((int)ep->kind) {
    case KL_EPI_ADD_TENSOR:
    case KL_EPI_MUL_TENSOR:
        kl_buf_puts(b, ep->kind == KL_EPI_ADD_TENSOR ? " | + " : " | * ");
        s_print_access(b, w, &ep->access);
        break;
    case KL_EPI_ADD_CONST:
        kl_buf_printf(b, " | + %s", lo);
        break;
    case KL_EPI_MUL_CONST:
        kl_buf_printf(b, " | * %s", lo);
        break;
    case KL_EPI_RELU:
        kl_buf_puts(b, " | relu");
        break;
    case KL_EPI_CLIP:
        kl_buf_printf(b, " | clip(%s, %s)", lo, hi);
        break;
    case KL_EPI_ACT:
        kl_buf_printf(b, " | %s", kl_act_name(ep->act));
        if (ep->act == KL_ACT_HARD_SIGMOID)
            kl_buf_printf(b, "(%s, %s)", lo, hi);
        break;
    case KL_EPI_REQUANT:
        s_fmt_f32(lo, ep->lo);
        kl_buf_printf(b, " | requant(%s, %lld)", lo, (long long)ep->zp);
        break;
    case KL_EPI_REQUANT_TENSOR:
        kl_buf_puts(b, " | requant(");
        s_print_access(b, w, &ep->access);
        kl_buf_printf(b, ", %lld)", (long long)ep->zp);
        break;
    }
}

void kl_ir__print(kl_buf_t *b, const kl_workload_t *w)
{
    static const char *assign[] = {
        [KL_RED_NONE] = " = ",
        [KL_RED_SUM] = " += ",
        [KL_RED_MAX] = " max= ",
    };
    s_print_access(b, w, &w->out);
    kl_buf_puts(b, assign[w->reduce]);
    s_print_expr(b, w, w->body, 1);
    for (int i = 0; i < w->nepi; i++)
        s_print_epilogue(b, w, &w->epi[i]);
    kl_buf_puts(b, " where ");
    for (int k = 0; k < w->niters; k++)
        kl_buf_printf(b, "%s%s=%lld", k ? ", " : "", w->iters[k].name,
                      (long long)w->iters[k].extent);
    kl_buf_puts(b, "; ");
    for (int t = 0; t < w->ntensors; t++) {
        const kl_tensor_t *ts = &w->tensors[t];
        kl_buf_printf(b, "%s%s: %s%s[", t ? ", " : "", ts->name,
                      ts->is_const ? "const " : "", kl_dtype_name(ts->dtype));
        for (int d = 0; d < ts->ndim; d++)
            kl_buf_printf(b, "%s%lld", d ? "," : "", (long long)ts->shape[d]);
        kl_buf_puts(b, "]");
    }
}

int kl_ir__finish(kl_workload_t *w, char *err)
{
    kl_buf_t b = {0};
    kl_ir__print(&b, w);
    free(w->canonical);
    w->canonical = kl_buf_take(&b);
    kl_hash128(w->canonical, strlen(w->canonical), w->key);
    return kl_ir__count_flop(w, &w->flop, err);
}

char *kl_workload_args_text(const kl_workload_t *w)
{
    kl_buf_t b = {0};
    for (int t = 0; t < w->ntensors; t++) {
        const kl_tensor_t *ts = &w->tensors[t];
        kl_buf_printf(&b, "%s%s:%s[", t ? " " : "", ts->name,
                      kl_dtype_name(ts->dtype));
        for (int d = 0; d < ts->ndim; d++)
            kl_buf_printf(&b, "%s%lld", d ? "," : "", (long long)ts->shape[d]);
        kl_buf_puts(&b, ts->is_output  ? "]:out"
                        : ts->is_const ? "]:const"
                                       : "]");
    }
    return kl_buf_take(&b);
}
