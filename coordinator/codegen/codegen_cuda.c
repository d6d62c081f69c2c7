/* codegen_cuda.c - scheduled loop nest -> CUDA C (kl_codegen.h,
 * kl_codegen_cuda.h). The mapping of loops onto the launch is decided by
 * kl_cuda_plan (coordinator/space/kl_cuda_plan.h); this file prints it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_cuda_priv.h"
#include "kl_codegen_cuda.h"
#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_util.h"

static const kl_loop_t *s_L(const g_t *g, int pos)
{
    return kl_sched_loop(g->s, pos);
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
            kl_codegen__cuda_part(g, b, pos, q);
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
        kl_codegen__cuda_num(b, e->value);
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
        int64_t u = kl_loop_annot(s_L(g, i), "unroll_max_step");
        best = u > best ? u : best;
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
        kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (%s l%d = 0; l%d < %" PRId64 "; ++l%d) {",
                          g->ity, l->id, l->id, l->extent, l->id);
    g->ind++;
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
    kl_codegen__cuda_line(g, "/* %s: %" PRId64 " floats%s */", t->name,
                          sm->size, vw == 4 ? ", 16 bytes per access" : "");
    kl_codegen__cuda_line(
        g, "for (%s f = kl_tid * %d; f < %" PRId64 "; f += %" PRId64 ") {",
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
        kl_codegen__cuda_line(
            g, "const %s c%d = %s + (f / %" PRId64 ") %% %" PRId64 ";", g->ity,
            d, x.data, inner, sm->ext[d]);
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
        kl_codegen__cuda_line(
            g, "*(float4 *)&kl_smem[%s] = %s%s%s*(const float4 *)&a%d[%s]%s;",
            dst, cond.len ? "(" : "", cond.len ? cond.data : "",
            cond.len ? ") ? " : "", sm->tensor, off.data,
            cond.len ? " : make_float4(0.0f, 0.0f, 0.0f, 0.0f)" : "");
    else {
        kl_buf_t rd = {0};
        s_gread(g, &rd, sm->tensor, off.data);
        if (cond.len)
            kl_codegen__cuda_line(g, "kl_smem[%s] = (%s) ? %s : 0.0f;", dst,
                                  cond.data, rd.data);
        else
            kl_codegen__cuda_line(g, "kl_smem[%s] = %s;", dst, rd.data);
        kl_buf_free(&rd);
    }
    kl_buf_free(&off);
    kl_buf_free(&cond);
    kl_codegen__cuda_close(g);
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
            kl_codegen__cuda_line(g, "__syncthreads();");
        any = true;
        s_emit_copy(g, &g->p.smem[i], pos);
    }
    if (any)
        kl_codegen__cuda_line(g, "__syncthreads();");
}

static void s_emit_statement(g_t *g)
{
    kl_buf_t v = {0}, cond = {0}, guard = {0}, idx = {0};
    s_expr(g, g->w->body, &v, &cond);
    s_guards(g, false, &guard);
    s_acc_index(g, &idx);
    if (guard.len) {
        kl_codegen__cuda_line(g, "if (%s) {", guard.data);
        g->ind++;
    }
    switch (g->w->reduce) {
    case KL_RED_SUM:
        kl_codegen__cuda_line(g, "acc[%s] += %s;", idx.data, v.data);
        break;
    case KL_RED_MAX:
        /* Out-of-range points do not take part (-inf padding). */
        if (cond.len)
            kl_codegen__cuda_line(g, "if (%s) acc[%s] = fmaxf(acc[%s], %s);",
                                  cond.data, idx.data, idx.data, v.data);
        else
            kl_codegen__cuda_line(g, "acc[%s] = fmaxf(acc[%s], %s);", idx.data,
                                  idx.data, v.data);
        break;
    default:
        kl_codegen__cuda_line(g, "acc[%s] = %s;", idx.data, v.data);
        break;
    }
    if (guard.len)
        kl_codegen__cuda_close(g);
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
        if (ep->kind == KL_EPI_ADD_TENSOR || ep->kind == KL_EPI_MUL_TENSOR) {
            s_access(g, &ep->access, &off, &cond);
            if (cond.len)
                kl_buf_printf(&x, "((%s) ? ", cond.data);
            s_gread(g, &x, ep->access.tensor, off.data);
            if (cond.len)
                kl_buf_puts(&x, " : 0.0f)");
        }
        kl_codegen__cuda_epi(g, ep, x.data);
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
        kl_codegen__cuda_line(g, "if (%s) {", guard.data);
        g->ind++;
    }
    s_acc_index(g, &idx);
    kl_codegen__cuda_line(g, "float v = acc[%s];", idx.data);
    if (g->w->reduce == KL_RED_MAX)
        kl_codegen__cuda_line(
            g, "if (v == -__int_as_float(0x7f800000)) v = 0.0f;");
    s_emit_epilogue(g);
    kl_codegen__cuda_line(g, "a%d[%s] = v;", g->out, off.data);
    if (guard.len)
        kl_codegen__cuda_close(g);
    for (int i = 0; i < g->p.nacc_loops; i++)
        kl_codegen__cuda_close(g);
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
        kl_codegen__cuda_line(
            g, "const %s kl_gid = (%s)blockIdx.x * %" PRId64 " + threadIdx.x;",
            g->ity, g->ity, g->p.block[0]);
        kl_codegen__cuda_line(g, "if (kl_gid >= %" PRId64 ") return;", total);
        int64_t inner = 1;
        for (int pos = g->p.nflat - 1; pos >= 0; pos--) {
            const kl_loop_t *l = s_L(g, pos);
            kl_codegen__cuda_line(
                g, "const %s l%d = kl_gid / %" PRId64 " %% %" PRId64 ";",
                g->ity, l->id, inner, l->extent);
            inner *= l->extent;
        }
        return;
    }
    kl_codegen__cuda_line(g,
                          "const int kl_tid = threadIdx.x + %" PRId64
                          " * (threadIdx.y + %" PRId64 " * threadIdx.z);",
                          g->p.block[0], g->p.block[1]);
    for (int pos = 0; pos < g->p.prefix; pos++) {
        const kl_loop_t *l = s_L(g, pos);
        if (l->kind != KL_LOOP_VTHREAD)
            kl_codegen__cuda_line(g, "const %s l%d = %s;", g->ity, l->id,
                                  names[l->kind - KL_LOOP_BLOCK_X]);
    }
    if (g->p.nsmem && g->p.smem_dynamic)
        kl_codegen__cuda_line(
            g, "extern __shared__ __align__(16) float kl_smem[];");
    else if (g->p.nsmem)
        kl_codegen__cuda_line(
            g, "__shared__ __align__(16) float kl_smem[%" PRId64 "];",
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
    kl_codegen__cuda_line(g, "float acc[%" PRId64 "];", g->p.nacc);
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int i = 0; i < %" PRId64 "; ++i)",
                          g->p.nacc);
    kl_codegen__cuda_line(
        g, "    acc[i] = %s;",
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
        kl_codegen__cuda_close(g);
    s_emit_writeback(g);
    while (opened--)
        kl_codegen__cuda_close(g);
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

int kl_codegen_cuda(const kl_sched_t *s, const kl_target_t *t,
                    const char *entry, kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    int mrc = kl_codegen__cuda_mma(s, t, entry ? entry : "kl_main", out, err);
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
