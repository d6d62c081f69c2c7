/* kl_ir_eval.c - the reference interpreter: a workload evaluated point
 * by point in double (kl_workload_eval, kl_workload_eval_typed), each
 * access compiled once to its nonzero terms; the slow, obviously right
 * answer the generated kernels are checked against. */
#include "kl_ir_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"

/* One index dimension with only its nonzero terms, for speed. */
typedef struct {
    int n;
    int it[KL_IR_MAX_ITERS];
    int64_t c[KL_IR_MAX_ITERS];
    int64_t off, div, dim, stride;
} s_cdim_t;

typedef struct {
    int tensor, ndim;
    s_cdim_t d[KL_IR_MAX_DIMS];
    /* When no index can leave its dimension, the flat offset is one affine
     * function of the iterators: flat.off + sum flat.c[j] * iv[flat.it[j]]. */
    bool always_in;
    s_cdim_t flat;
} s_cload_t;

/* The body in postfix form. */
typedef struct {
    kl_expr_kind kind;
    double value;
    int load;
} s_cop_t;

typedef struct {
    const kl_workload_t *w;
    void *const *bufs;
    /* Per tensor: its storage (KL_DT_F32 for float buffers, else the
     * integer dtype) and whether the workload is an integer one. */
    kl_dtype store[KL_IR_MAX_TENSORS];
    bool is_int;
    s_cload_t *loads;
    int nloads;
    s_cop_t *ops;
    int nops;
    double *stack;
    int64_t iv[KL_IR_MAX_ITERS];
} s_eval_t;

static void s_compile_access(const kl_workload_t *w, const kl_access_t *a,
                             s_cload_t *out)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    out->tensor = a->tensor;
    out->ndim = t->ndim;
    int64_t stride = 1;
    int64_t fc[KL_IR_MAX_ITERS] = {0};
    out->always_in = true;
    out->flat.off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        __int128 lo, hi;
        kl_ir__affine_range(w, &a->idx[d], &lo, &hi);
        if (a->idx[d].div > 1 || lo < 0 || hi >= t->shape[d])
            out->always_in = false;
        bool ovf = false;
        for (int k = 0; k < w->niters; k++) {
            int64_t m;
            ovf |= __builtin_mul_overflow(a->idx[d].coef[k], stride, &m) ||
                   __builtin_add_overflow(fc[k], m, &fc[k]);
        }
        int64_t m;
        ovf |= __builtin_mul_overflow(a->idx[d].offset, stride, &m) ||
               __builtin_add_overflow(out->flat.off, m, &out->flat.off);
        if (ovf)
            out->always_in = false;
        s_cdim_t *cd = &out->d[d];
        cd->n = 0;
        for (int k = 0; k < w->niters; k++) {
            if (a->idx[d].coef[k]) {
                cd->it[cd->n] = k;
                cd->c[cd->n++] = a->idx[d].coef[k];
            }
        }
        cd->off = a->idx[d].offset;
        cd->div = a->idx[d].div > 1 ? a->idx[d].div : 1;
        cd->dim = t->shape[d];
        cd->stride = stride;
        stride *= t->shape[d];
    }
    out->flat.n = 0;
    for (int k = 0; k < w->niters; k++) {
        if (fc[k]) {
            out->flat.it[out->flat.n] = k;
            out->flat.c[out->flat.n++] = fc[k];
        }
    }
}

/* Flat offset of the access at the current point, or -1 when it falls
 * outside the tensor or does not divide exactly. */
static int64_t s_offset(const s_cload_t *l, const int64_t *iv)
{
    if (l->always_in) {
        int64_t v = l->flat.off;
        for (int j = 0; j < l->flat.n; j++)
            v += l->flat.c[j] * iv[l->flat.it[j]];
        return v;
    }
    int64_t flat = 0;
    for (int d = 0; d < l->ndim; d++) {
        const s_cdim_t *cd = &l->d[d];
        int64_t v = cd->off;
        for (int j = 0; j < cd->n; j++)
            v += cd->c[j] * iv[cd->it[j]];
        if (cd->div > 1) {
            if (v % cd->div)
                return -1;
            v /= cd->div;
        }
        if (v < 0 || v >= cd->dim)
            return -1;
        flat += v * cd->stride;
    }
    return flat;
}

static void s_compile_expr(s_eval_t *ev, const kl_expr_t *e)
{
    if (e->a)
        s_compile_expr(ev, e->a);
    if (e->b)
        s_compile_expr(ev, e->b);
    s_cop_t *op = &ev->ops[ev->nops++];
    op->kind = e->kind;
    op->value = e->value;
    op->load = -1;
    if (e->kind == KL_EX_LOAD) {
        op->load = ev->nloads;
        s_compile_access(ev->w, &e->access, &ev->loads[ev->nloads++]);
    }
}

static int s_count_nodes(const kl_expr_t *e)
{
    return e ? 1 + s_count_nodes(e->a) + s_count_nodes(e->b) : 0;
}

static double s_read(const s_eval_t *ev, int t, int64_t off)
{
    switch (ev->store[t]) {
    case KL_DT_U8:
        return ((const uint8_t *)ev->bufs[t])[off];
    case KL_DT_S8:
        return ((const int8_t *)ev->bufs[t])[off];
    case KL_DT_S32:
        return ((const int32_t *)ev->bufs[t])[off];
    default: /* f16 / bf16 tensors are floats read at their precision */
        return kl_dtype_round(ev->w->tensors[t].dtype,
                              ((const float *)ev->bufs[t])[off]);
    }
}

/* Evaluates the body at ev->iv; *valid becomes false when a read falls
 * outside its tensor (that read gives zero). */
static double s_eval_body(s_eval_t *ev, bool *valid)
{
    double *st = ev->stack;
    int sp = 0;
    for (int i = 0; i < ev->nops; i++) {
        const s_cop_t *op = &ev->ops[i];
        switch (op->kind) {
        case KL_EX_CONST:
            st[sp++] = op->value;
            break;
        case KL_EX_LOAD: {
            const s_cload_t *l = &ev->loads[op->load];
            int64_t off = s_offset(l, ev->iv);
            if (off < 0)
                *valid = false;
            st[sp++] = off < 0 ? 0.0 : s_read(ev, l->tensor, off);
            break;
        }
        case KL_EX_NEG:
            st[sp - 1] = -st[sp - 1];
            break;
        default: {
            double b = st[--sp], a = st[sp - 1], r = 0;
            switch (op->kind) {
            case KL_EX_ADD:
                r = a + b;
                break;
            case KL_EX_SUB:
                r = a - b;
                break;
            case KL_EX_MUL:
                r = a * b;
                break;
            case KL_EX_DIV:
                r = a / b;
                break;
            case KL_EX_MAX:
                r = a > b ? a : b;
                break;
            default:
                r = a < b ? a : b;
                break;
            }
            st[sp - 1] = r;
        }
        }
    }
    return st[0];
}

/* Advances the odometer over the iterators in its[0..n) (last fastest);
 * returns false after the last point. */
static bool s_next(const kl_workload_t *w, int64_t *iv, const int *its, int n)
{
    for (int j = n - 1; j >= 0; j--) {
        if (++iv[its[j]] < w->iters[its[j]].extent)
            return true;
        iv[its[j]] = 0;
    }
    return false;
}

static double s_reduce_point(s_eval_t *ev, const int *rd, int nrd)
{
    const kl_workload_t *w = ev->w;
    double acc = 0;
    bool any = false;
    for (int j = 0; j < nrd; j++)
        ev->iv[rd[j]] = 0;
    do {
        bool valid = true;
        double v = s_eval_body(ev, &valid);
        if (w->reduce == KL_RED_MAX) {
            /* Out-of-range points are skipped (-inf padding). */
            if (valid && (!any || v > acc))
                acc = v;
            any = any || valid;
        } else if (w->reduce == KL_RED_SUM) {
            /* Integer: zero-point padding, the point contributes nothing. */
            if (valid || !ev->is_int)
                acc += v;
        } else {
            acc = v;
        }
    } while (nrd > 0 && s_next(w, ev->iv, rd, nrd));
    return acc;
}

/* The integer value v stored into dtype dt: saturated to its range. */
static double s_saturate(kl_dtype dt, double v)
{
    double lo = dt == KL_DT_U8 ? 0 : dt == KL_DT_S8 ? -128 : -2147483648.0;
    double hi = dt == KL_DT_U8 ? 255 : dt == KL_DT_S8 ? 127 : 2147483647.0;
    return v < lo ? lo : (v > hi ? hi : v);
}

/* requant (kl_ir.h): one f32 multiply, round half to even (nearbyintf in
 * the default rounding mode), clamped to the int32 range, plus zp. */
static double s_requant(double acc, float scale, int64_t zp)
{
    float f = (float)(int32_t)acc * scale;
    float r = nearbyintf(f);
    if (!(r >= -2147483648.0f))
        r = -2147483648.0f; /* also NaN */
    if (r > 2147483647.0f)
        r = 2147483647.0f; /* 2^31: clamped again on store */
    return (double)(int64_t)r + (double)zp;
}

static double s_apply_epilogue(s_eval_t *ev, const s_cload_t *epl, double v)
{
    const kl_workload_t *w = ev->w;
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        int64_t off;
        double t = 0;
        switch ((int)ep->kind) {
        case KL_EPI_ADD_TENSOR:
        case KL_EPI_MUL_TENSOR:
            off = s_offset(&epl[i], ev->iv);
            t = off < 0 ? 0.0 : s_read(ev, epl[i].tensor, off);
            v = ep->kind == KL_EPI_ADD_TENSOR ? v + t : v * t;
            break;
        case KL_EPI_REQUANT:
        case KL_EPI_REQUANT_TENSOR: {
            float sc = (float)ep->lo;
            if (ep->kind == KL_EPI_REQUANT_TENSOR) {
                off = s_offset(&epl[i], ev->iv);
                sc = off < 0 ? 0.0f : (float)s_read(ev, epl[i].tensor, off);
            }
            v = s_requant(s_saturate(KL_DT_S32, v), sc, ep->zp);
            break;
        }
        case KL_EPI_ADD_CONST:
            v += ep->lo;
            break;
        case KL_EPI_MUL_CONST:
            v *= ep->lo;
            break;
        case KL_EPI_RELU:
            v = v > 0 ? v : 0;
            break;
        case KL_EPI_CLIP:
            v = v < ep->lo ? ep->lo : (v > ep->hi ? ep->hi : v);
            break;
        case KL_EPI_ACT:
            v = kl_act_eval(ep->act, ep->lo, ep->hi, v);
            break;
        }
    }
    return v;
}

static void s_store(const s_eval_t *ev, int t, int64_t off, double v)
{
    switch (ev->store[t]) {
    case KL_DT_U8:
        ((uint8_t *)ev->bufs[t])[off] = (uint8_t)v;
        break;
    case KL_DT_S8:
        ((int8_t *)ev->bufs[t])[off] = (int8_t)v;
        break;
    case KL_DT_S32:
        ((int32_t *)ev->bufs[t])[off] = (int32_t)v;
        break;
    default:
        ((float *)ev->bufs[t])[off] = (float)v;
        break;
    }
}

static void s_eval(const kl_workload_t *w, void *const *bufs, bool typed)
{
    int nodes = s_count_nodes(w->body);
    s_eval_t ev = {.w = w, .bufs = bufs, .is_int = kl_workload_is_int(w)};
    for (int t = 0; t < w->ntensors; t++)
        ev.store[t] = typed && kl_dtype_is_int(w->tensors[t].dtype)
                          ? w->tensors[t].dtype
                          : KL_DT_F32;
    ev.loads = kl_xcalloc((size_t)nodes, sizeof(*ev.loads));
    ev.ops = kl_xcalloc((size_t)nodes, sizeof(*ev.ops));
    ev.stack = kl_xcalloc((size_t)nodes + 1, sizeof(*ev.stack));
    s_compile_expr(&ev, w->body);
    s_cload_t outl, epl[KL_IR_MAX_EPILOGUE];
    s_compile_access(w, &w->out, &outl);
    for (int i = 0; i < w->nepi; i++)
        if (w->epi[i].kind == KL_EPI_ADD_TENSOR ||
            w->epi[i].kind == KL_EPI_MUL_TENSOR ||
            w->epi[i].kind == KL_EPI_REQUANT_TENSOR)
            s_compile_access(w, &w->epi[i].access, &epl[i]);
    int sp[KL_IR_MAX_ITERS], rd[KL_IR_MAX_ITERS], nsp = 0, nrd = 0;
    for (int k = 0; k < w->niters; k++) {
        if (w->iters[k].reduce)
            rd[nrd++] = k;
        else
            sp[nsp++] = k;
    }
    memset(ev.iv, 0, sizeof(ev.iv));
    int ot = kl_workload_output(w);
    kl_dtype odt = w->tensors[ot].dtype;
    do {
        double v = s_reduce_point(&ev, rd, nrd);
        v = s_apply_epilogue(&ev, epl, v);
        if (ev.is_int)
            v = s_saturate(odt, v);
        int64_t off = s_offset(&outl, ev.iv);
        if (off >= 0)
            s_store(&ev, ot, off, v);
    } while (nsp > 0 && s_next(w, ev.iv, sp, nsp));
    free(ev.loads);
    free(ev.ops);
    free(ev.stack);
}

void kl_workload_eval(const kl_workload_t *w, float *const *bufs)
{
    s_eval(w, (void *const *)bufs, false);
}

void kl_workload_eval_typed(const kl_workload_t *w, void *const *bufs)
{
    s_eval(w, bufs, true);
}
