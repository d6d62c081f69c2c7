/* codegen_cuda.c - scheduled loop nest -> CUDA C (kl_codegen.h,
 * kl_codegen_cuda.h). The mapping of loops onto the launch is decided by
 * kl_cuda_plan (coordinator/schedule/kl_cuda_plan.h); this file prints it. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_codegen_cuda.h"
#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_util.h"

typedef struct {
    const kl_sched_t *s;
    const kl_workload_t *w;
    kl_cuda_plan_t p;
    kl_buf_t b;
    int ind;
    const char *ity; /* index type: int or long long */
    int out;         /* output tensor index */
} g_t;

/* Coefficients of a linear form over loop parts, plus a constant. */
typedef struct {
    int64_t c;
    int64_t k[KL_SCHED_MAX_LOOPS][KL_LOOP_MAX_PARTS];
} lin_t;

static void s_line(g_t *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void s_line(g_t *g, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *tmp = kl_xmalloc((size_t)n + 1);
    vsnprintf(tmp, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    kl_buf_printf(&g->b, "%*s%s\n", 4 * g->ind, "", tmp);
    free(tmp);
}

static const kl_loop_t *s_L(const g_t *g, int pos)
{
    return kl_sched_loop(g->s, pos);
}

/* The value of part q of the loop at pos, as C text. */
static void s_part(const g_t *g, kl_buf_t *b, int pos, int q)
{
    const kl_loop_t *l = s_L(g, pos);
    if (l->nparts == 1) {
        kl_buf_printf(b, "l%d", l->id);
        return;
    }
    int64_t inner = 1;
    for (int r = q + 1; r < l->nparts; r++)
        inner *= l->parts[r].extent;
    if (q == 0)
        kl_buf_printf(b, "(l%d / %" PRId64 ")", l->id, inner);
    else if (inner == 1)
        kl_buf_printf(b, "(l%d %% %" PRId64 ")", l->id, l->parts[q].extent);
    else
        kl_buf_printf(b, "(l%d / %" PRId64 " %% %" PRId64 ")", l->id, inner,
                      l->parts[q].extent);
}

static void s_lin_print(const g_t *g, kl_buf_t *b, const lin_t *f)
{
    bool any = false;
    kl_buf_puts(b, "(");
    for (int pos = 0; pos < g->p.nloops; pos++)
        for (int q = 0; q < s_L(g, pos)->nparts; q++) {
            int64_t c = f->k[pos][q];
            if (!c)
                continue;
            if (any)
                kl_buf_puts(b, c < 0 ? " - " : " + ");
            else if (c < 0)
                kl_buf_puts(b, "-");
            int64_t a = c < 0 ? -c : c;
            if (a != 1)
                kl_buf_printf(b, "%" PRId64 " * ", a);
            s_part(g, b, pos, q);
            any = true;
        }
    if (f->c || !any)
        kl_buf_printf(b, "%s%" PRId64, any ? (f->c < 0 ? " - " : " + ") : "",
                      any && f->c < 0 ? -f->c : f->c);
    kl_buf_puts(b, ")");
}

/* Linear form of the numerator of index d of access a. */
static void s_lin_access(const g_t *g, const kl_access_t *a, int d, lin_t *f)
{
    memset(f, 0, sizeof *f);
    f->c = a->idx[d].offset;
    for (int pos = 0; pos < g->p.nloops; pos++) {
        const kl_loop_t *l = s_L(g, pos);
        for (int q = 0; q < l->nparts; q++)
            f->k[pos][q] =
                a->idx[d].coef[l->parts[q].iter] * l->parts[q].stride;
    }
}

/* Range of f over every part's full extent. */
static void s_lin_range(const g_t *g, const lin_t *f, int64_t *lo, int64_t *hi)
{
    *lo = *hi = f->c;
    for (int pos = 0; pos < g->p.nloops; pos++) {
        const kl_loop_t *l = s_L(g, pos);
        for (int q = 0; q < l->nparts; q++) {
            int64_t v = f->k[pos][q] * (l->parts[q].extent - 1);
            if (v > 0)
                *hi += v;
            else
                *lo += v;
        }
    }
}

/* Prints the flat offset of access a into b and the validity condition
 * (empty when always valid) into cond. */
static void s_access(const g_t *g, const kl_access_t *a, kl_buf_t *b,
                     kl_buf_t *cond)
{
    const kl_tensor_t *t = &g->w->tensors[a->tensor];
    int64_t stride[KL_IR_MAX_DIMS], st = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        stride[d] = st;
        st *= t->shape[d];
    }
    kl_buf_puts(b, "(");
    for (int d = 0; d < t->ndim; d++) {
        lin_t f;
        s_lin_access(g, a, d, &f);
        int64_t lo, hi, div = a->idx[d].div > 1 ? a->idx[d].div : 1;
        s_lin_range(g, &f, &lo, &hi);
        kl_buf_t num = {0};
        s_lin_print(g, &num, &f);
        if (d)
            kl_buf_puts(b, " + ");
        if (div > 1)
            kl_buf_printf(b, "%s / %" PRId64, num.data, div);
        else
            kl_buf_puts(b, num.data);
        if (stride[d] != 1)
            kl_buf_printf(b, " * %" PRId64, stride[d]);
        const char *sep = cond->len ? " && " : "";
        if (div > 1) {
            kl_buf_printf(cond,
                          "%s%s %% %" PRId64 " == 0 && %s >= 0 && %s / "
                          "%" PRId64 " < %" PRId64,
                          sep, num.data, div, num.data, num.data, div,
                          t->shape[d]);
        } else {
            if (lo < 0) {
                kl_buf_printf(cond, "%s%s >= 0", sep, num.data);
                sep = " && ";
            }
            if (hi >= t->shape[d])
                kl_buf_printf(cond, "%s%s < %" PRId64, sep, num.data,
                              t->shape[d]);
        }
        kl_buf_free(&num);
    }
    kl_buf_puts(b, ")");
}

static const kl_cuda_smem_t *s_smem_of(const g_t *g, int tensor)
{
    for (int i = 0; i < g->p.nsmem; i++)
        if (g->p.smem[i].tensor == tensor)
            return &g->p.smem[i];
    return NULL;
}

static bool s_thread_or_vthread(const kl_loop_t *l)
{
    return l->kind >= KL_LOOP_THREAD_X && l->kind <= KL_LOOP_VTHREAD;
}

/* Offset into a shared box of a read at the current point. */
static void s_smem_index(const g_t *g, const kl_cuda_smem_t *sm,
                         const kl_access_t *a, kl_buf_t *b)
{
    int64_t st = 1, stride[KL_IR_MAX_DIMS];
    for (int d = sm->ndim - 1; d >= 0; d--) {
        stride[d] = st;
        st *= d == sm->ndim - 1 ? sm->pitch : sm->ext[d];
    }
    lin_t tot;
    memset(&tot, 0, sizeof tot);
    for (int d = 0; d < sm->ndim; d++) {
        lin_t f;
        s_lin_access(g, a, d, &f);
        for (int pos = 0; pos < g->p.nloops; pos++) {
            const kl_loop_t *l = s_L(g, pos);
            bool relaxed = s_thread_or_vthread(l) ||
                           (pos > sm->attach && pos >= g->p.prefix);
            for (int q = 0; relaxed && q < l->nparts; q++)
                tot.k[pos][q] += f.k[pos][q] * stride[d];
        }
        tot.c -= sm->lo[d] * stride[d];
    }
    kl_buf_printf(b, "kl_smem[%" PRId64 " + ", sm->offset);
    s_lin_print(g, b, &tot);
    kl_buf_puts(b, "]");
}

static void s_num(kl_buf_t *b, double v)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.9g", v);
    bool frac = strpbrk(tmp, ".eEn") != NULL;
    kl_buf_printf(b, "%s%sf", tmp, frac ? "" : ".0");
}

/* A read of global tensor t at offset off, as float: f16 / bf16 tensors
 * are passed as their 16 bits and converted (kl_f16, kl_bf16). */
static void s_gread(const g_t *g, kl_buf_t *b, int t, const char *off)
{
    kl_dtype dt = g->w->tensors[t].dtype;
    if (dt == KL_DT_F16 || dt == KL_DT_BF16)
        kl_buf_printf(b, "%s(a%d[%s])", dt == KL_DT_F16 ? "kl_f16" : "kl_bf16",
                      t, off);
    else
        kl_buf_printf(b, "a%d[%s]", t, off);
}

/* Prints expression e; the validity of its reads goes into cond. */
static void s_expr(const g_t *g, const kl_expr_t *e, kl_buf_t *b,
                   kl_buf_t *cond)
{
    static const char *ops[] = {[KL_EX_ADD] = " + ",
                                [KL_EX_SUB] = " - ",
                                [KL_EX_MUL] = " * ",
                                [KL_EX_DIV] = " / "};
    switch (e->kind) {
    case KL_EX_CONST:
        s_num(b, e->value);
        return;
    case KL_EX_LOAD: {
        kl_buf_t off = {0}, c = {0};
        s_access(g, &e->access, &off, &c);
        const kl_cuda_smem_t *sm = s_smem_of(g, e->access.tensor);
        if (sm)
            s_smem_index(g, sm, &e->access, b);
        else if (c.len) {
            kl_buf_printf(b, "(%s ? ", c.data);
            s_gread(g, b, e->access.tensor, off.data);
            kl_buf_puts(b, " : 0.0f)");
        } else {
            s_gread(g, b, e->access.tensor, off.data);
        }
        if (c.len)
            kl_buf_printf(cond, "%s(%s)", cond->len ? " && " : "", c.data);
        kl_buf_free(&off);
        kl_buf_free(&c);
        return;
    }
    case KL_EX_NEG:
        kl_buf_puts(b, "(-");
        s_expr(g, e->a, b, cond);
        kl_buf_puts(b, ")");
        return;
    case KL_EX_MAX:
    case KL_EX_MIN:
        kl_buf_puts(b, e->kind == KL_EX_MAX ? "fmaxf(" : "fminf(");
        s_expr(g, e->a, b, cond);
        kl_buf_puts(b, ", ");
        s_expr(g, e->b, b, cond);
        kl_buf_puts(b, ")");
        return;
    default:
        kl_buf_puts(b, "(");
        s_expr(g, e->a, b, cond);
        kl_buf_puts(b, ops[e->kind]);
        s_expr(g, e->b, b, cond);
        kl_buf_puts(b, ")");
        return;
    }
}

/* Guards (imperfect splits) as a C condition; spatial_only for the
 * write-back. Empty when none applies. */
static void s_guards(const g_t *g, bool spatial_only, kl_buf_t *b)
{
    for (int i = 0; i < kl_sched_nguards(g->s); i++) {
        const kl_guard_t *gd = kl_sched_guard(g->s, i);
        if (spatial_only && g->w->iters[gd->iter].reduce)
            continue;
        lin_t f;
        memset(&f, 0, sizeof f);
        for (int k = 0; k < gd->nterms; k++) {
            int pos = kl_sched_loop_pos(g->s, gd->terms[k].loop);
            if (pos >= 0)
                f.k[pos][gd->terms[k].part] += gd->terms[k].coef;
        }
        kl_buf_puts(b, b->len ? " && " : "");
        s_lin_print(g, b, &f);
        kl_buf_printf(b, " < %" PRId64, gd->bound);
    }
}

/* Accumulator index of the current point. */
static void s_acc_index(const g_t *g, kl_buf_t *b)
{
    lin_t f;
    memset(&f, 0, sizeof f);
    for (int i = 0; i < g->p.nacc_loops; i++) {
        int pos = g->p.acc_pos[i];
        const kl_loop_t *l = s_L(g, pos);
        int64_t inner = 1;
        for (int q = l->nparts - 1; q >= 0; q--) {
            f.k[pos][q] = g->p.acc_mult[i] * inner;
            inner *= l->parts[q].extent;
        }
    }
    s_lin_print(g, b, &f);
}

/* The auto-unroll budget in force at pos (largest unroll_max_step of an
 * enclosing loop; 0 when none). */
static int64_t s_unroll_budget(const g_t *g, int pos)
{
    int64_t best = 0;
    for (int i = 0; i < pos; i++) {
        const kl_loop_t *l = s_L(g, i);
        for (int a = 0; a < l->nannots; a++)
            if (!strcmp(l->annots[a].key, "unroll_max_step") &&
                l->annots[a].value > best)
                best = l->annots[a].value;
    }
    return best;
}

static bool s_is_acc(const g_t *g, int pos)
{
    for (int i = 0; i < g->p.nacc_loops; i++)
        if (g->p.acc_pos[i] == pos)
            return true;
    return false;
}

static void s_open_loop(g_t *g, int pos, bool force_unroll)
{
    const kl_loop_t *l = s_L(g, pos);
    int64_t inner = 1;
    for (int i = pos; i < g->p.nloops; i++)
        inner *= s_L(g, i)->extent;
    /* Auto-unroll stops at loops that hold a shared copy: unrolling those
     * only repeats the copy loop and its barriers. */
    bool holds_copy = false;
    for (int i = 0; i < g->p.nsmem; i++)
        holds_copy = holds_copy || g->p.smem[i].attach >= pos;
    if (force_unroll || l->kind == KL_LOOP_UNROLL ||
        l->kind == KL_LOOP_VECTORIZE ||
        (!holds_copy && inner <= s_unroll_budget(g, pos) && inner > 1))
        s_line(g, "#pragma unroll");
    s_line(g, "for (%s l%d = 0; l%d < %" PRId64 "; ++l%d) {", g->ity, l->id,
           l->id, l->extent, l->id);
    g->ind++;
}

static void s_close(g_t *g)
{
    g->ind--;
    s_line(g, "}");
}

/* The body's (one) index map of the tensor a shared box caches. */
static const kl_access_t *s_read_of(const g_t *g, int tensor)
{
    const kl_expr_t *stack[64];
    int sp = 0;
    stack[sp++] = g->w->body;
    while (sp) {
        const kl_expr_t *e = stack[--sp];
        if (e->kind == KL_EX_LOAD && e->access.tensor == tensor)
            return &e->access;
        if (e->a && sp < 63)
            stack[sp++] = e->a;
        if (e->b && sp < 63)
            stack[sp++] = e->b;
    }
    return NULL;
}

/* The box's start in dimension d: the index with only the parts that are
 * fixed at attach position pos (above it, not threads or vthreads). */
static void s_box_start(const g_t *g, const kl_cuda_smem_t *sm,
                        const kl_access_t *a, int pos, int d, lin_t *f)
{
    s_lin_access(g, a, d, f);
    for (int q = 0; q < g->p.nloops; q++) {
        const kl_loop_t *l = s_L(g, q);
        bool relaxed = s_thread_or_vthread(l) || (q > pos && q >= g->p.prefix);
        for (int r = 0; relaxed && r < l->nparts; r++)
            f->k[q][r] = 0;
    }
    f->c += sm->lo[d];
}

/* Whether the copy can move 16 bytes at a time: the box's rows start on a
 * multiple of 4 floats, span a multiple of 4 and never leave the tensor in
 * the innermost dimension. */
static bool s_copy_vec4(const g_t *g, const kl_cuda_smem_t *sm,
                        const kl_access_t *a, int pos)
{
    int d = sm->ndim - 1;
    const kl_tensor_t *t = &g->w->tensors[sm->tensor];
    if (t->dtype != KL_DT_F32 || sm->ext[d] % 4 || sm->pitch % 4 ||
        t->shape[d] % 4 || sm->offset % 4)
        return false;
    lin_t f, full;
    int64_t lo, hi;
    s_lin_access(g, a, d, &full);
    s_lin_range(g, &full, &lo, &hi);
    if (lo < 0 || hi >= t->shape[d])
        return false;
    s_box_start(g, sm, a, pos, d, &f);
    if (f.c % 4)
        return false;
    for (int q = 0; q < g->p.nloops; q++)
        for (int r = 0; r < s_L(g, q)->nparts; r++)
            if (f.k[q][r] % 4)
                return false;
    return true;
}

/* Cooperative copy of one shared box, attached at pos. */
static void s_emit_copy(g_t *g, const kl_cuda_smem_t *sm, int pos)
{
    const kl_tensor_t *t = &g->w->tensors[sm->tensor];
    const kl_access_t *a = s_read_of(g, sm->tensor);
    int vw = s_copy_vec4(g, sm, a, pos) ? 4 : 1;
    s_line(g, "/* %s: %" PRId64 " floats%s */", t->name, sm->size,
           vw == 4 ? ", 16 bytes per access" : "");
    s_line(g, "for (%s f = kl_tid * %d; f < %" PRId64 "; f += %" PRId64 ") {",
           g->ity, vw, sm->size, g->p.threads * vw);
    g->ind++;
    kl_buf_t off = {0}, cond = {0};
    int64_t st[KL_IR_MAX_DIMS], tst = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        st[d] = tst;
        tst *= t->shape[d];
    }
    for (int d = 0; d < sm->ndim; d++) {
        lin_t f, full;
        int64_t lo, hi;
        s_lin_access(g, a, d, &full);
        s_lin_range(g, &full, &lo, &hi);
        s_box_start(g, sm, a, pos, d, &f);
        int64_t inner = 1;
        for (int e = d + 1; e < sm->ndim; e++)
            inner *= sm->ext[e];
        kl_buf_t x = {0};
        s_lin_print(g, &x, &f);
        s_line(g, "const %s c%d = %s + (f / %" PRId64 ") %% %" PRId64 ";",
               g->ity, d, x.data, inner, sm->ext[d]);
        kl_buf_free(&x);
        kl_buf_printf(&off, "%sc%d * %" PRId64, d ? " + " : "", d, st[d]);
        const char *sep = cond.len ? " && " : "";
        if (lo < 0) {
            kl_buf_printf(&cond, "%sc%d >= 0", sep, d);
            sep = " && ";
        }
        if (hi >= t->shape[d])
            kl_buf_printf(&cond, "%sc%d < %" PRId64, sep, d, t->shape[d]);
    }
    int64_t row = sm->ext[sm->ndim - 1];
    char dst[128];
    if (sm->pitch == row)
        snprintf(dst, sizeof dst, "%" PRId64 " + f", sm->offset);
    else
        snprintf(dst, sizeof dst,
                 "%" PRId64 " + f / %" PRId64 " * %" PRId64 " + f %% %" PRId64,
                 sm->offset, row, sm->pitch, row);
    if (vw == 4)
        s_line(g,
               "*(float4 *)&kl_smem[%s] = %s%s%s*(const float4 *)&a%d[%s]%s;",
               dst, cond.len ? "(" : "", cond.len ? cond.data : "",
               cond.len ? ") ? " : "", sm->tensor, off.data,
               cond.len ? " : make_float4(0.0f, 0.0f, 0.0f, 0.0f)" : "");
    else {
        kl_buf_t rd = {0};
        s_gread(g, &rd, sm->tensor, off.data);
        if (cond.len)
            s_line(g, "kl_smem[%s] = (%s) ? %s : 0.0f;", dst, cond.data,
                   rd.data);
        else
            s_line(g, "kl_smem[%s] = %s;", dst, rd.data);
        kl_buf_free(&rd);
    }
    kl_buf_free(&off);
    kl_buf_free(&cond);
    s_close(g);
}

/* Cooperative copies of the shared stages attached at pos, between
 * barriers (the first one only inside a loop, where the previous
 * iteration may still read the boxes). */
static void s_emit_copies(g_t *g, int pos, bool in_loop)
{
    bool any = false;
    for (int i = 0; i < g->p.nsmem; i++) {
        if (g->p.smem[i].attach != pos)
            continue;
        if (!any && in_loop)
            s_line(g, "__syncthreads();");
        any = true;
        s_emit_copy(g, &g->p.smem[i], pos);
    }
    if (any)
        s_line(g, "__syncthreads();");
}

static void s_emit_statement(g_t *g)
{
    kl_buf_t v = {0}, cond = {0}, guard = {0}, idx = {0};
    s_expr(g, g->w->body, &v, &cond);
    s_guards(g, false, &guard);
    s_acc_index(g, &idx);
    if (guard.len) {
        s_line(g, "if (%s) {", guard.data);
        g->ind++;
    }
    switch (g->w->reduce) {
    case KL_RED_SUM:
        s_line(g, "acc[%s] += %s;", idx.data, v.data);
        break;
    case KL_RED_MAX:
        /* Out-of-range points do not take part (-inf padding). */
        if (cond.len)
            s_line(g, "if (%s) acc[%s] = fmaxf(acc[%s], %s);", cond.data,
                   idx.data, idx.data, v.data);
        else
            s_line(g, "acc[%s] = fmaxf(acc[%s], %s);", idx.data, idx.data,
                   v.data);
        break;
    default:
        s_line(g, "acc[%s] = %s;", idx.data, v.data);
        break;
    }
    if (guard.len)
        s_close(g);
    kl_buf_free(&v);
    kl_buf_free(&cond);
    kl_buf_free(&guard);
    kl_buf_free(&idx);
}

static void s_emit_epilogue(g_t *g)
{
    for (int i = 0; i < g->w->nepi; i++) {
        const kl_epilogue_t *ep = &g->w->epi[i];
        kl_buf_t x = {0}, off = {0}, cond = {0};
        switch (ep->kind) {
        case KL_EPI_ADD_TENSOR:
        case KL_EPI_MUL_TENSOR:
            s_access(g, &ep->access, &off, &cond);
            if (cond.len)
                kl_buf_printf(&x, "((%s) ? ", cond.data);
            s_gread(g, &x, ep->access.tensor, off.data);
            if (cond.len)
                kl_buf_puts(&x, " : 0.0f)");
            s_line(g, "v = v %s %s;", ep->kind == KL_EPI_ADD_TENSOR ? "+" : "*",
                   x.data);
            break;
        case KL_EPI_ADD_CONST:
        case KL_EPI_MUL_CONST:
            s_num(&x, ep->lo);
            s_line(g, "v = v %s %s;", ep->kind == KL_EPI_ADD_CONST ? "+" : "*",
                   x.data);
            break;
        case KL_EPI_RELU:
            s_line(g, "v = fmaxf(v, 0.0f);");
            break;
        case KL_EPI_CLIP: {
            kl_buf_t y = {0};
            s_num(&x, ep->lo);
            s_num(&y, ep->hi);
            s_line(g, "v = fminf(fmaxf(v, %s), %s);", x.data, y.data);
            kl_buf_free(&y);
            break;
        }
        }
        kl_buf_free(&x);
        kl_buf_free(&off);
        kl_buf_free(&cond);
    }
}

static void s_emit_writeback(g_t *g)
{
    for (int i = 0; i < g->p.nacc_loops; i++)
        s_open_loop(g, g->p.acc_pos[i], true);
    kl_buf_t guard = {0}, idx = {0}, off = {0}, cond = {0};
    s_guards(g, true, &guard);
    s_access(g, &g->w->out, &off, &cond);
    if (cond.len)
        kl_buf_printf(&guard, "%s%s", guard.len ? " && " : "", cond.data);
    if (guard.len) {
        s_line(g, "if (%s) {", guard.data);
        g->ind++;
    }
    s_acc_index(g, &idx);
    s_line(g, "float v = acc[%s];", idx.data);
    if (g->w->reduce == KL_RED_MAX)
        s_line(g, "if (v == -__int_as_float(0x7f800000)) v = 0.0f;");
    s_emit_epilogue(g);
    s_line(g, "a%d[%s] = v;", g->out, off.data);
    if (guard.len)
        s_close(g);
    for (int i = 0; i < g->p.nacc_loops; i++)
        s_close(g);
    kl_buf_free(&guard);
    kl_buf_free(&idx);
    kl_buf_free(&off);
    kl_buf_free(&cond);
}

/* The f16 / bf16 -> f32 conversions of global reads, once per source
 * (a batch of kernels is compiled as one program). */
static void s_emit_half_helpers(kl_buf_t *b, const kl_workload_t *w)
{
    bool any = false;
    for (int i = 0; i < w->ntensors; i++)
        any = any || w->tensors[i].dtype == KL_DT_F16 ||
              w->tensors[i].dtype == KL_DT_BF16;
    if (!any)
        return;
    kl_buf_puts(b, "#ifndef KL_HALF_READS\n"
                   "#define KL_HALF_READS\n"
                   "#if defined(KL_CUDA_EMU)\n"
                   "static inline float kl_f16(unsigned short h) { return "
                   "kl_emu_h2f(0, h); }\n"
                   "static inline float kl_bf16(unsigned short h) { return "
                   "kl_emu_h2f(1, h); }\n"
                   "#else\n"
                   "static __device__ __forceinline__ float kl_f16(unsigned "
                   "short h)\n{\n    float f;\n    asm(\"cvt.f32.f16 %0, "
                   "%1;\" : \"=f\"(f) : \"h\"(h));\n    return f;\n}\n"
                   "static __device__ __forceinline__ float kl_bf16(unsigned "
                   "short h)\n{\n    return __uint_as_float((unsigned)h << "
                   "16);\n}\n"
                   "#endif\n"
                   "#endif\n");
}

static void s_emit_signature(g_t *g, const char *entry)
{
    s_emit_half_helpers(&g->b, g->w);
    kl_buf_printf(&g->b,
                  "/* kiln cuda kernel: %s; grid (%" PRId64 ", %" PRId64
                  ", %" PRId64 "), block (%" PRId64 ", %" PRId64 ", %" PRId64
                  "), %" PRId64 " bytes shared */\n",
                  g->w->name ? g->w->name : g->w->op_kind, g->p.grid[0],
                  g->p.grid[1], g->p.grid[2], g->p.block[0], g->p.block[1],
                  g->p.block[2], g->p.smem_bytes);
    kl_buf_printf(&g->b,
                  "extern \"C\" __global__ void __launch_bounds__(%" PRId64
                  ")\n%s(",
                  g->p.threads, entry);
    for (int i = 0; i < g->w->ntensors; i++)
        kl_buf_printf(&g->b, "%s%s%s *__restrict__ a%d", i ? ", " : "",
                      i == g->out ? "" : "const ",
                      g->w->tensors[i].dtype == KL_DT_F32 ? "float"
                                                          : "unsigned short",
                      i);
    kl_buf_puts(&g->b, ")\n{\n");
    g->ind = 1;
}

/* Index setup: bound loops, or the flat decomposition. */
static void s_emit_indices(g_t *g)
{
    static const char *names[] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                                  "threadIdx.x", "threadIdx.y", "threadIdx.z"};
    if (g->p.flat) {
        int64_t total = 1;
        for (int pos = 0; pos < g->p.nflat; pos++)
            total *= s_L(g, pos)->extent;
        s_line(g,
               "const %s kl_gid = (%s)blockIdx.x * %" PRId64 " + threadIdx.x;",
               g->ity, g->ity, g->p.block[0]);
        s_line(g, "if (kl_gid >= %" PRId64 ") return;", total);
        int64_t inner = 1;
        for (int pos = g->p.nflat - 1; pos >= 0; pos--) {
            const kl_loop_t *l = s_L(g, pos);
            s_line(g, "const %s l%d = kl_gid / %" PRId64 " %% %" PRId64 ";",
                   g->ity, l->id, inner, l->extent);
            inner *= l->extent;
        }
        return;
    }
    s_line(g,
           "const int kl_tid = threadIdx.x + %" PRId64
           " * (threadIdx.y + %" PRId64 " * threadIdx.z);",
           g->p.block[0], g->p.block[1]);
    for (int pos = 0; pos < g->p.prefix; pos++) {
        const kl_loop_t *l = s_L(g, pos);
        if (l->kind != KL_LOOP_VTHREAD)
            s_line(g, "const %s l%d = %s;", g->ity, l->id,
                   names[l->kind - KL_LOOP_BLOCK_X]);
    }
    if (g->p.nsmem && g->p.smem_dynamic)
        s_line(g, "extern __shared__ __align__(16) float kl_smem[];");
    else if (g->p.nsmem)
        s_line(g, "__shared__ __align__(16) float kl_smem[%" PRId64 "];",
               g->p.smem_bytes / 4);
}

static void s_emit_body(g_t *g)
{
    int lead = g->p.flat ? g->p.nflat : g->p.prefix;
    s_emit_copies(g, lead - 1, false);
    int opened = 0;
    for (int pos = lead; pos <= g->p.wc_attach; pos++) {
        s_open_loop(g, pos, false);
        s_emit_copies(g, pos, true);
        opened++;
    }
    s_line(g, "float acc[%" PRId64 "];", g->p.nacc);
    s_line(g, "#pragma unroll");
    s_line(g, "for (int i = 0; i < %" PRId64 "; ++i)", g->p.nacc);
    s_line(g, "    acc[i] = %s;",
           g->w->reduce == KL_RED_MAX ? "-__int_as_float(0x7f800000)" : "0.0f");
    int inner = 0;
    for (int pos = g->p.wc_attach + 1; pos < g->p.nloops; pos++) {
        s_open_loop(g, pos, s_is_acc(g, pos));
        s_emit_copies(g, pos, true);
        inner++;
    }
    for (int pos = 0; pos < g->p.prefix; pos++)
        if (s_L(g, pos)->kind == KL_LOOP_VTHREAD) {
            s_open_loop(g, pos, true);
            inner++;
        }
    s_emit_statement(g);
    while (inner--)
        s_close(g);
    s_emit_writeback(g);
    while (opened--)
        s_close(g);
}

/* The kernel's text and launch from a planned g. */
static void s_finish(g_t *g, const char *entry, kl_kernel_t *out)
{
    g->ity = g->p.wide_index ? "long long" : "int";
    s_emit_signature(g, entry);
    s_emit_indices(g);
    s_emit_body(g);
    kl_buf_puts(&g->b, "}\n");
    out->source = kl_buf_take(&g->b);
    out->entry = kl_xstrdup(entry);
    out->launched = true;
    for (int i = 0; i < 3; i++) {
        out->grid[i] = g->p.grid[i];
        out->block[i] = g->p.block[i];
    }
    out->shared_bytes = g->p.smem_dynamic ? g->p.smem_bytes : 0;
}
/* ---- tensor-core kernels (kl_cuda_mma_plan) ---- */

/* The flat offset of a plain access (kl_cuda_mma_match: one iterator per
 * dimension) with iterator values named by names[]. */
static void s_mma_offset(const kl_workload_t *w, const kl_access_t *a,
                         char names[][24], kl_buf_t *b)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    int64_t st = 1;
    bool any = false;
    kl_buf_puts(b, "(");
    for (int d = t->ndim - 1; d >= 0; d--) {
        for (int k = 0; k < w->niters; k++) {
            if (!a->idx[d].coef[k])
                continue;
            kl_buf_printf(b, "%s%s", any ? " + " : "", names[k]);
            if (st != 1)
                kl_buf_printf(b, " * %" PRId64, st);
            any = true;
        }
        st *= t->shape[d];
    }
    kl_buf_puts(b, any ? ")" : "0)");
}

/* Copies the block's m (or n) x BK slab of input tensor ti into shared
 * array dst (row r = m or n offset, column = k offset; zero outside). The
 * threads walk the slab along the tensor's unit-stride iterator (k, or the
 * row iterator of a tensor stored k-major, as B of a row-major matmul), so
 * that neighbouring threads read neighbouring elements. */
static void s_mma_copy(g_t *g, const kl_cuda_mma_plan_t *p, int ti, int row_it,
                       int64_t rows, const char *dst, char names[][24])
{
    const kl_workload_t *w = g->w;
    const kl_cuda_mma_match_t *mm = &p->mm;
    const char *base = row_it == mm->m ? "kl_m0" : "kl_n0";
    const int64_t *st = ti == mm->a ? mm->sa : mm->sb;
    bool rows_inner = st[row_it] == 1;
    s_line(g, "for (int f = kl_tid; f < %" PRId64 "; f += %" PRId64 ") {",
           rows * p->bk, p->threads);
    g->ind++;
    char rr[64], cc[64];
    if (rows_inner) {
        snprintf(rr, sizeof rr, "f %% %" PRId64, rows);
        snprintf(cc, sizeof cc, "f / %" PRId64, rows);
    } else {
        snprintf(rr, sizeof rr, "f / %" PRId64, p->bk);
        snprintf(cc, sizeof cc, "f %% %" PRId64, p->bk);
    }
    s_line(g, "const %s r = %s + %s, c = k0 * %" PRId64 " + %s;", g->ity, base,
           rr, p->bk, cc);
    char saved_r[24], saved_k[24];
    memcpy(saved_r, names[row_it], 24);
    memcpy(saved_k, names[mm->k], 24);
    snprintf(names[row_it], 24, "r");
    snprintf(names[mm->k], 24, "c");
    kl_buf_t off = {0};
    const kl_access_t *a =
        &(g->w->body->a->access.tensor == ti ? g->w->body->a : g->w->body->b)
             ->access;
    s_mma_offset(w, a, names, &off);
    s_line(g,
           "%s[%s * %" PRId64 " + %s] = r < %" PRId64 " && c < %" PRId64
           " ? a%d[%s] : (unsigned short)0;",
           dst, rr, p->pitch, cc, w->iters[row_it].extent,
           w->iters[mm->k].extent, ti, off.data);
    kl_buf_free(&off);
    memcpy(names[row_it], saved_r, 24);
    memcpy(names[mm->k], saved_k, 24);
    s_close(g);
}

static void s_mma_epilogue(g_t *g, char names[][24])
{
    for (int i = 0; i < g->w->nepi; i++) {
        const kl_epilogue_t *ep = &g->w->epi[i];
        kl_buf_t x = {0}, y = {0};
        switch (ep->kind) {
        case KL_EPI_ADD_TENSOR:
        case KL_EPI_MUL_TENSOR:
            s_mma_offset(g->w, &ep->access, names, &x);
            s_line(g, "v = v %s a%d[%s];",
                   ep->kind == KL_EPI_ADD_TENSOR ? "+" : "*", ep->access.tensor,
                   x.data);
            break;
        case KL_EPI_ADD_CONST:
        case KL_EPI_MUL_CONST:
            s_num(&x, ep->lo);
            s_line(g, "v = v %s %s;", ep->kind == KL_EPI_ADD_CONST ? "+" : "*",
                   x.data);
            break;
        case KL_EPI_RELU:
            s_line(g, "v = fmaxf(v, 0.0f);");
            break;
        case KL_EPI_CLIP:
            s_num(&x, ep->lo);
            s_num(&y, ep->hi);
            s_line(g, "v = fminf(fmaxf(v, %s), %s);", x.data, y.data);
            break;
        }
        kl_buf_free(&x);
        kl_buf_free(&y);
    }
}

static void s_emit_mma(g_t *g, const kl_cuda_mma_plan_t *p, const char *entry)
{
    const kl_workload_t *w = g->w;
    const kl_cuda_mma_match_t *mm = &p->mm;
    const char *dt = mm->in == KL_DT_BF16 ? "bf16" : "f16";
    kl_buf_printf(&g->b,
                  "/* kiln cuda kernel: %s; grid (%" PRId64
                  ", 1, 1), block (%" PRId64 ", 1, 1), %" PRId64
                  " bytes shared; tensor cores: mma.sync m16n8k16 %s x %s -> "
                  "f32, block tile %" PRId64 "x%" PRId64 "x%" PRId64
                  ", %" PRId64 "x%" PRId64 " warps of %" PRId64 "x%" PRId64
                  " tiles */\n",
                  w->name ? w->name : w->op_kind, p->grid, p->threads,
                  p->smem_bytes, dt, dt, p->bm, p->bn, p->bk, p->warps_m,
                  p->warps_n, p->tiles_m, p->tiles_n);
    /* One warp-wide m16n8k16: d (this lane's C/D fragment, c0..c3) +=
     * A (a0..a7 in 4 registers) * B (b0..b3 in 2). The CPU emulation of
     * the tests (KL_CUDA_EMU) runs the same fragments through a C model
     * of the instruction. */
    kl_buf_printf(
        &g->b,
        "static __device__ __forceinline__ void kl_mma_%s(float *d, "
        "const unsigned *a, const unsigned *b)\n{\n"
        "#if defined(KL_CUDA_EMU)\n"
        "    kl_emu_mma_m16n8k16(%d, d, a, b);\n"
        "#else\n"
        "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s."
        "%s.f32 {%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, "
        "%%9}, {%%0, %%1, %%2, %%3};\"\n"
        "                 : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), "
        "\"+f\"(d[3])\n"
        "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), "
        "\"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
        "#endif\n}\n",
        entry, mm->in == KL_DT_BF16 ? 1 : 0, dt, dt);
    if (p->ldmatrix)
        /* ldmatrix.sync m8n8 .xN: lanes 8j..8j+7 give the row addresses of
         * matrix j; lane 4g+t receives row g, elements 2t, 2t+1 of each
         * matrix in register j. */
        kl_buf_printf(
            &g->b,
            "static __device__ __forceinline__ void kl_ldsm_%s(int x, unsigned "
            "*r, const unsigned short *p)\n{\n"
            "#if defined(KL_CUDA_EMU)\n"
            "    kl_emu_ldmatrix(x, r, p);\n"
            "#else\n"
            "    unsigned a;\n"
            "    asm(\"{ .reg .u64 s; cvta.to.shared.u64 s, %%1; cvt.u32.u64 "
            "%%0, s; }\" : \"=r\"(a) : \"l\"(p));\n"
            "    if (x == 4)\n"
            "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
            "{%%0, %%1, %%2, %%3}, [%%4];\"\n"
            "                     : \"=r\"(r[0]), \"=r\"(r[1]), "
            "\"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(a));\n"
            "    else\n"
            "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 "
            "{%%0, %%1}, [%%2];\"\n"
            "                     : \"=r\"(r[0]), \"=r\"(r[1]) : "
            "\"r\"(a));\n"
            "#endif\n}\n",
            entry);
    kl_buf_printf(&g->b,
                  "extern \"C\" __global__ void __launch_bounds__(%" PRId64
                  ")\n%s(",
                  p->threads, entry);
    for (int i = 0; i < w->ntensors; i++) {
        bool half = w->tensors[i].dtype != KL_DT_F32;
        kl_buf_printf(&g->b, "%s%s%s *__restrict__ a%d", i ? ", " : "",
                      i == g->out ? "" : "const ",
                      half ? "unsigned short" : "float", i);
    }
    kl_buf_puts(&g->b, ")\n{\n");
    g->ind = 1;
    char names[KL_IR_MAX_ITERS][24];
    for (int k = 0; k < w->niters; k++)
        snprintf(names[k], sizeof names[k], "kl_i%d", k);
    s_line(g, "/* %s, %s: %s bits; lane = 4 * group + t */",
           w->tensors[mm->a].name, w->tensors[mm->b].name, dt);
    s_line(g, "const int kl_tid = threadIdx.x, kl_lane = kl_tid %% 32, "
              "kl_warp = kl_tid / 32;");
    s_line(g, "const int kl_g = kl_lane / 4, kl_t = kl_lane %% 4;");
    s_line(g,
           "const int kl_wm = kl_warp / %" PRId64
           ", kl_wn = kl_warp %% %" PRId64 ";",
           p->warps_n, p->warps_n);
    const kl_loop_t *blk = s_L(g, 0);
    s_line(g, "const %s l%d = blockIdx.x;", g->ity, blk->id);
    for (int q = 0; q < blk->nparts; q++) {
        kl_buf_t x = {0};
        s_part(g, &x, 0, q);
        int it = blk->parts[q].iter;
        const char *nm = it == mm->m ? "kl_m0" : it == mm->n ? "kl_n0" : NULL;
        if (nm)
            s_line(g, "const %s %s = %s * %" PRId64 ";", g->ity, nm, x.data,
                   blk->parts[q].stride);
        else
            s_line(g, "const %s %s = %s;", g->ity, names[it], x.data);
        kl_buf_free(&x);
    }
    s_line(g, "__shared__ __align__(16) unsigned short kl_sa[%" PRId64 "];",
           p->bm * p->pitch);
    s_line(g, "__shared__ __align__(16) unsigned short kl_sb[%" PRId64 "];",
           p->bn * p->pitch);
    s_line(g, "float acc[%" PRId64 "][%" PRId64 "][4];", p->tiles_m,
           p->tiles_n);
    s_line(g, "#pragma unroll");
    s_line(g, "for (int i = 0; i < %" PRId64 "; ++i)",
           p->tiles_m * p->tiles_n * 4);
    s_line(g, "    (&acc[0][0][0])[i] = 0.0f;");
    s_line(g, "for (int k0 = 0; k0 < %" PRId64 "; ++k0) {", p->kouter);
    g->ind++;
    s_line(g, "__syncthreads();");
    s_line(g, "/* %s: rows m, columns k; %s: rows n, columns k */",
           w->tensors[mm->a].name, w->tensors[mm->b].name);
    s_mma_copy(g, p, mm->a, mm->m, p->bm, "kl_sa", names);
    s_mma_copy(g, p, mm->b, mm->n, p->bn, "kl_sb", names);
    s_line(g, "__syncthreads();");
    s_line(g, "#pragma unroll");
    s_line(g, "for (int k1 = 0; k1 < %" PRId64 "; ++k1) {", p->ksteps);
    g->ind++;
    s_line(g, "unsigned fa[%" PRId64 "][4], fb[%" PRId64 "][2];", p->tiles_m,
           p->tiles_n);
    s_line(g, "#pragma unroll");
    s_line(g, "for (int mt = 0; mt < %" PRId64 "; ++mt) {", p->tiles_m);
    g->ind++;
    s_line(g, "/* A 16x16 row: a0,a1 (g, 2t..2t+1) a2,a3 (g+8, 2t..) a4,a5 "
              "(g, 2t+8..) a6,a7 (g+8, 2t+8..) */");
    if (p->ldmatrix) {
        s_line(g, "/* matrices (rows 0-7, k 0-7) (8-15, 0-7) (0-7, 8-15) "
                  "(8-15, 8-15) */");
        s_line(g,
               "kl_ldsm_%s(4, fa[mt], &kl_sa[(kl_wm * %" PRId64
               " + mt * 16 + kl_lane %% 16) * %" PRId64
               " + k1 * 16 + kl_lane / 16 * 8]);",
               entry, 16 * p->tiles_m, p->pitch);
    } else {
        s_line(g,
               "const unsigned short *s = &kl_sa[(kl_wm * %" PRId64
               " + mt * 16 + kl_g) * %" PRId64 " + k1 * 16 + kl_t * 2];",
               16 * p->tiles_m, p->pitch);
        s_line(g, "fa[mt][0] = s[0] | (unsigned)s[1] << 16;");
        s_line(g,
               "fa[mt][1] = s[%" PRId64 "] | (unsigned)s[%" PRId64 "] << 16;",
               8 * p->pitch, 8 * p->pitch + 1);
        s_line(g, "fa[mt][2] = s[8] | (unsigned)s[9] << 16;");
        s_line(g,
               "fa[mt][3] = s[%" PRId64 "] | (unsigned)s[%" PRId64 "] << 16;",
               8 * p->pitch + 8, 8 * p->pitch + 9);
    }
    s_close(g);
    s_line(g, "#pragma unroll");
    s_line(g, "for (int nt = 0; nt < %" PRId64 "; ++nt) {", p->tiles_n);
    g->ind++;
    s_line(g, "/* B 16x8 col: b0,b1 (k 2t..2t+1, n g) b2,b3 (k 2t+8.., n g) "
              "*/");
    if (p->ldmatrix) {
        s_line(g, "/* matrices (n 0-7, k 0-7) (n 0-7, k 8-15) */");
        s_line(g,
               "kl_ldsm_%s(2, fb[nt], &kl_sb[(kl_wn * %" PRId64
               " + nt * 8 + kl_lane %% 8) * %" PRId64
               " + k1 * 16 + kl_lane / 8 %% 2 * 8]);",
               entry, 8 * p->tiles_n, p->pitch);
    } else {
        s_line(g,
               "const unsigned short *s = &kl_sb[(kl_wn * %" PRId64
               " + nt * 8 + kl_g) * %" PRId64 " + k1 * 16 + kl_t * 2];",
               8 * p->tiles_n, p->pitch);
        s_line(g, "fb[nt][0] = s[0] | (unsigned)s[1] << 16;");
        s_line(g, "fb[nt][1] = s[8] | (unsigned)s[9] << 16;");
    }
    s_close(g);
    s_line(g, "#pragma unroll");
    s_line(g, "for (int mt = 0; mt < %" PRId64 "; ++mt)", p->tiles_m);
    s_line(g, "#pragma unroll");
    s_line(g, "    for (int nt = 0; nt < %" PRId64 "; ++nt)", p->tiles_n);
    s_line(g, "        kl_mma_%s(acc[mt][nt], fa[mt], fb[nt]);", entry);
    s_close(g);
    s_close(g);
    s_line(g, "/* C/D 16x8: c0,c1 (g, 2t..2t+1) c2,c3 (g+8, 2t..) */");
    s_line(g, "#pragma unroll");
    s_line(g, "for (int mt = 0; mt < %" PRId64 "; ++mt)", p->tiles_m);
    s_line(g, "#pragma unroll");
    s_line(g, "for (int nt = 0; nt < %" PRId64 "; ++nt)", p->tiles_n);
    s_line(g, "#pragma unroll");
    s_line(g, "for (int i = 0; i < 4; ++i) {");
    g->ind++;
    snprintf(names[mm->m], sizeof names[mm->m], "m");
    snprintf(names[mm->n], sizeof names[mm->n], "n");
    s_line(g,
           "const %s m = kl_m0 + kl_wm * %" PRId64
           " + mt * 16 + kl_g + i / 2 * 8;",
           g->ity, 16 * p->tiles_m);
    s_line(g,
           "const %s n = kl_n0 + kl_wn * %" PRId64
           " + nt * 8 + kl_t * 2 + i %% 2;",
           g->ity, 8 * p->tiles_n);
    s_line(g, "if (m < %" PRId64 " && n < %" PRId64 ") {",
           w->iters[mm->m].extent, w->iters[mm->n].extent);
    g->ind++;
    s_line(g, "float v = acc[mt][nt][i];");
    s_mma_epilogue(g, names);
    kl_buf_t off = {0};
    s_mma_offset(w, &w->out, names, &off);
    s_line(g, "a%d[%s] = v;", g->out, off.data);
    kl_buf_free(&off);
    s_close(g);
    s_close(g);
    kl_buf_puts(&g->b, "}\n");
}

/* Generates a tensor-core schedule; KL_ERR_NOTFOUND when s is not one. */
static int s_codegen_mma(const kl_sched_t *s, const kl_target_t *t,
                         const char *entry, kl_kernel_t *out, char *err)
{
    kl_cuda_mma_plan_t p;
    int rc = kl_cuda_mma_plan(s, t, &p, err);
    if (rc)
        return rc;
    g_t g;
    memset(&g, 0, sizeof g);
    g.s = s;
    g.w = kl_sched_workload(s);
    g.out = kl_workload_output(g.w);
    g.p.nloops = kl_sched_nloops(s);
    g.ity = "int";
    for (int i = 0; i < g.w->ntensors; i++)
        if (kl_tensor_numel(&g.w->tensors[i]) >= ((int64_t)1 << 31))
            g.ity = "long long";
    s_emit_mma(&g, &p, entry);
    out->source = kl_buf_take(&g.b);
    out->entry = kl_xstrdup(entry);
    out->launched = true;
    out->grid[0] = p.grid;
    out->grid[1] = out->grid[2] = 1;
    out->block[0] = p.threads;
    out->block[1] = out->block[2] = 1;
    out->shared_bytes = 0;
    return KL_OK;
}

int kl_codegen_cuda(const kl_sched_t *s, const kl_target_t *t,
                    const char *entry, kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    int mrc = s_codegen_mma(s, t, entry ? entry : "kl_main", out, err);
    if (mrc != KL_ERR_NOTFOUND)
        return mrc;
    memset(out, 0, sizeof *out);
    if (kl_sched_winograd_m(s))
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda: Winograd schedules are generated for CPUs "
                         "only");
    g_t g;
    memset(&g, 0, sizeof g);
    g.s = s;
    g.w = kl_sched_workload(s);
    g.out = kl_workload_output(g.w);
    int rc = kl_cuda_plan(s, t, &g.p, err);
    if (rc)
        return rc;
    if (g.w->reduce == KL_RED_NONE && g.p.nloops > 0 &&
        kl_sched_loop(s, g.p.nloops - 1)->reduce)
        return kl_seterr(err, KL_ERR_INTERNAL, "cuda: '=' with reductions");
    s_finish(&g, entry ? entry : "kl_main", out);
    return KL_OK;
}

int kl_codegen_cuda_reference(const kl_workload_t *w, const kl_target_t *t,
                              const char *entry, kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    kl_sched_t *s = NULL;
    int rc = kl_sched_create(&s, w, err);
    g_t g;
    memset(&g, 0, sizeof g);
    g.s = s;
    g.w = w;
    g.out = kl_workload_output(w);
    if (!rc)
        rc = kl_cuda_plan(s, t, &g.p, err);
    if (!rc && !g.p.flat)
        rc = kl_seterr(err, KL_ERR_INTERNAL, "cuda: naive schedule not flat");
    if (rc) {
        kl_sched_destroy(&s);
        return rc;
    }
    /* The agent's reference launch: KLA_CUDA_REF_BLOCK threads per block
     * whatever the element count, so the bound and the flat index use
     * KL_CUDA_FLAT_BLOCK even below one block. */
    int64_t n = 1;
    for (int pos = 0; pos < g.p.nflat; pos++)
        n *= kl_sched_loop(s, pos)->extent;
    if (n != kl_tensor_numel(&w->tensors[g.out])) {
        kl_sched_destroy(&s);
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda reference: %lld spatial points for %lld "
                         "output elements",
                         (long long)n,
                         (long long)kl_tensor_numel(&w->tensors[g.out]));
    }
    g.p.block[0] = g.p.threads = KL_CUDA_FLAT_BLOCK;
    g.p.grid[0] = (n + KL_CUDA_FLAT_BLOCK - 1) / KL_CUDA_FLAT_BLOCK;
    s_finish(&g, entry ? entry : "kl_ref", out);
    kl_sched_destroy(&s);
    return KL_OK;
}
