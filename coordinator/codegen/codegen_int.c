/* codegen_int.c - the reference C kernel of an integer workload (kl_ir.h,
 * "Integer workloads"): serial loops over the spatial iterators, the
 * reduction in int64_t (exact: a valid workload keeps it inside int32, so
 * this equals int32 arithmetic without overflow traps), a point with a
 * padding read skipped under '+=' and 'max=', the epilogue with requant
 * exactly as the reference interpreter (kl_workload_eval_typed) computes
 * it, and a saturating store. Scheduled integer C is the tensorized kind
 * (codegen_tensorize.c), which shares the epilogue below. */
#include <string.h>

#include "cg_int.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_util.h"

static const char s_prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "/* requant (kl_ir.h): one f32 multiply, round half to even, the int32\n"
    " * range, plus the zero point. */\n"
    "static inline int64_t kl_requant(int64_t acc, float scale, int64_t zp)\n"
    "{\n"
    "    acc = acc < INT32_MIN ? INT32_MIN : acc > INT32_MAX ? INT32_MAX : "
    "acc;\n"
    "    float r = nearbyintf((float)(int32_t)acc * scale);\n"
    "    if (!(r >= -2147483648.0f))\n"
    "        r = -2147483648.0f;\n"
    "    if (r > 2147483647.0f)\n"
    "        r = 2147483647.0f;\n"
    "    return (int64_t)r + zp;\n"
    "}\n"
    "static inline int64_t kl_clampi(int64_t v, int64_t lo, int64_t hi)\n"
    "{ return v < lo ? lo : v > hi ? hi : v; }\n"
    "static inline int64_t kl_maxi(int64_t a, int64_t b)\n"
    "{ return a > b ? a : b; }\n"
    "static inline int64_t kl_mini(int64_t a, int64_t b)\n"
    "{ return a < b ? a : b; }\n";

/* The numerator of index dimension d of a: "3 + 2*i0 - i2". */
static void s_affine(kl_buf_t *b, const kl_workload_t *w, const kl_affine_t *a)
{
    kl_buf_printf(b, "(int64_t)%lld", (long long)a->offset);
    for (int k = 0; k < w->niters; k++)
        if (a->coef[k])
            kl_buf_printf(b, " + %lld * i%d", (long long)a->coef[k], k);
}

/* Declares int64_t o<id> (flat offset) and int ok<id> (inside the tensor,
 * exact division) for access a. */
static void s_access(kl_buf_t *b, const kl_workload_t *w, const kl_access_t *a,
                     int id, const char *ind)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    kl_buf_printf(b, "%sint64_t o%d = 0;\n%sint ok%d = 1;\n", ind, id, ind, id);
    for (int d = 0; d < t->ndim; d++) {
        kl_buf_printf(b, "%s{ int64_t n = ", ind);
        s_affine(b, w, &a->idx[d]);
        kl_buf_puts(b, ";");
        if (a->idx[d].div > 1)
            kl_buf_printf(b,
                          " if (n %% %lld) ok%d = 0; n = n >= 0 ? n / %lld : "
                          "-1;",
                          (long long)a->idx[d].div, id,
                          (long long)a->idx[d].div);
        kl_buf_printf(b,
                      " if (n < 0 || n >= %lld) ok%d = 0; o%d = o%d * %lld + "
                      "n; }\n",
                      (long long)t->shape[d], id, id, id,
                      (long long)t->shape[d]);
    }
}

/* Emits the loads of e (pre-order, numbering them from *id) and returns
 * nothing; s_expr prints the expression with the same numbering. */
static void s_loads(kl_buf_t *b, const kl_workload_t *w, const kl_expr_t *e,
                    int *id, const char *ind)
{
    if (!e)
        return;
    if (e->kind == KL_EX_LOAD) {
        s_access(b, w, &e->access, *id, ind);
        kl_buf_printf(b, "%sint64_t v%d = ok%d ? (int64_t)t%d[o%d] : 0;\n", ind,
                      *id, *id, e->access.tensor, *id);
        (*id)++;
    }
    s_loads(b, w, e->a, id, ind);
    s_loads(b, w, e->b, id, ind);
}

static void s_expr(kl_buf_t *b, const kl_expr_t *e, int *id)
{
    switch (e->kind) {
    case KL_EX_CONST:
        kl_buf_printf(b, "(int64_t)%lld", (long long)e->value);
        return;
    case KL_EX_LOAD:
        kl_buf_printf(b, "v%d", (*id)++);
        return;
    case KL_EX_NEG:
        kl_buf_puts(b, "(-");
        s_expr(b, e->a, id);
        kl_buf_puts(b, ")");
        return;
    case KL_EX_MAX:
    case KL_EX_MIN:
        kl_buf_puts(b, e->kind == KL_EX_MAX ? "kl_maxi(" : "kl_mini(");
        s_expr(b, e->a, id);
        kl_buf_puts(b, ", ");
        s_expr(b, e->b, id);
        kl_buf_puts(b, ")");
        return;
    default: {
        /* Loads are numbered in pre-order: this node, then a, then b. */
        const char *op = e->kind == KL_EX_ADD   ? " + "
                         : e->kind == KL_EX_SUB ? " - "
                                                : " * ";
        kl_buf_puts(b, "(");
        s_expr(b, e->a, id);
        kl_buf_puts(b, op);
        s_expr(b, e->b, id);
        kl_buf_puts(b, ")");
        return;
    }
    }
}

/* The epilogue and the saturating store of the int64_t x at the spatial
 * point named by the variables i<iterator> (shared with the tensorized C,
 * codegen_tensorize.c). */
int kl_codegen__int_epilogue(kl_buf_t *b, const kl_workload_t *w, char *ind,
                             char *err)
{
    int ot = kl_workload_output(w);
    for (int i = 0; i < w->nepi; i++) {
        const kl_epilogue_t *ep = &w->epi[i];
        int eid = 1000 + i;
        switch ((int)ep->kind) {
        case KL_EPI_ADD_TENSOR:
            kl_buf_printf(b, "%s{\n", ind);
            s_access(b, w, &ep->access, eid, ind);
            kl_buf_printf(b, "%sif (ok%d) x += (int64_t)t%d[o%d];\n%s}\n", ind,
                          eid, ep->access.tensor, eid, ind);
            break;
        case KL_EPI_ADD_CONST:
            kl_buf_printf(b, "%sx += (int64_t)%lld;\n", ind, (long long)ep->lo);
            break;
        case KL_EPI_RELU:
            kl_buf_printf(b, "%sx = x > 0 ? x : 0;\n", ind);
            break;
        case KL_EPI_CLIP:
            kl_buf_printf(b, "%sx = kl_clampi(x, %lld, %lld);\n", ind,
                          (long long)ep->lo, (long long)ep->hi);
            break;
        case KL_EPI_REQUANT:
            kl_buf_printf(b, "%sx = kl_requant(x, (float)%.17g, %lld);\n", ind,
                          ep->lo, (long long)ep->zp);
            break;
        case KL_EPI_REQUANT_TENSOR:
            kl_buf_printf(b, "%s{\n", ind);
            s_access(b, w, &ep->access, eid, ind);
            kl_buf_printf(b,
                          "%sx = kl_requant(x, ok%d ? t%d[o%d] : 0.0f, "
                          "%lld);\n%s}\n",
                          ind, eid, ep->access.tensor, eid, (long long)ep->zp,
                          ind);
            break;
        default:
            return kl_seterr(err, KL_ERR_INTERNAL,
                             "codegen: epilogue operation %d in an integer "
                             "workload",
                             (int)ep->kind);
        }
    }
    kl_dtype odt = w->tensors[ot].dtype;
    long long lo = odt == KL_DT_U8 ? 0 : odt == KL_DT_S8 ? -128 : INT32_MIN;
    long long hi = odt == KL_DT_U8 ? 255 : odt == KL_DT_S8 ? 127 : INT32_MAX;
    kl_buf_printf(b, "%s{\n", ind);
    s_access(b, w, &w->out, 2000, ind);
    kl_buf_printf(b, "%st%d[o2000] = (%s)kl_clampi(x, %lldLL, %lldLL);\n%s}\n",
                  ind, ot, kl_dtype_ctype(odt), lo, hi, ind);
    return KL_OK;
}

const char *kl_codegen__int_prelude(void)
{
    return s_prelude;
}

/* The loops over the spatial (reduce false) or the reduction iterators,
 * ind growing; returns how many it opened. */
static int s_ref_loops(kl_buf_t *b, const kl_workload_t *w, bool reduce,
                       char *ind)
{
    int n = 0;
    for (int k = 0; k < w->niters; k++) {
        if ((bool)w->iters[k].reduce != reduce)
            continue;
        kl_buf_printf(b, "%sfor (int64_t i%d = 0; i%d < %lld; ++i%d) {\n", ind,
                      k, k, (long long)w->iters[k].extent, k);
        strcat(ind, "    ");
        n++;
    }
    return n;
}

/* One point of the nest: the loads, then the body's value into acc
 * (behind the loads' padding tests when it reduces). */
static void s_ref_point(kl_buf_t *b, const kl_workload_t *w, char *ind)
{
    int id = 0;
    kl_buf_printf(b, "%s{\n", ind);
    strcat(ind, "    ");
    s_loads(b, w, w->body, &id, ind);
    int nloads = id;
    if (w->reduce != KL_RED_NONE) {
        /* Zero-point padding: a point with a padding read adds nothing. */
        kl_buf_printf(b, "%sif (1", ind);
        for (int i = 0; i < nloads; i++)
            kl_buf_printf(b, " && ok%d", i);
        kl_buf_puts(b, ") {\n");
    } else {
        kl_buf_printf(b, "%s{\n", ind);
    }
    kl_buf_printf(b, "%s    int64_t v = ", ind);
    id = 0;
    s_expr(b, w->body, &id);
    kl_buf_puts(b, ";\n");
    if (w->reduce == KL_RED_SUM)
        kl_buf_printf(b, "%s    acc += v;\n", ind);
    else if (w->reduce == KL_RED_MAX)
        kl_buf_printf(b,
                      "%s    if (!any || v > acc) acc = v;\n%s    any = 1;\n",
                      ind, ind);
    else
        kl_buf_printf(b, "%s    acc = v;\n", ind);
    kl_buf_printf(b, "%s}\n", ind);
    ind[strlen(ind) - 4] = '\0';
    kl_buf_printf(b, "%s}\n", ind);
}

int kl_codegen_reference_int(const kl_workload_t *w, const char *entry,
                             kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!kl_workload_is_int(w))
        return kl_seterr(err, KL_ERR_INVAL,
                         "codegen: %s is not an integer workload",
                         w->name ? w->name : "?");
    entry = entry ? entry : "kl_ref";
    kl_buf_t b = {0};
    kl_buf_puts(&b, s_prelude);
    kl_buf_printf(&b, "\nvoid %s(void *const *args)\n{\n", entry);
    int ot = kl_workload_output(w);
    for (int t = 0; t < w->ntensors; t++)
        kl_buf_printf(
            &b, "    %s%s *restrict t%d = (%s%s *)args[%d];\n",
            t == ot ? "" : "const ", kl_dtype_ctype(w->tensors[t].dtype), t,
            t == ot ? "" : "const ", kl_dtype_ctype(w->tensors[t].dtype), t);
    char ind[4 * KL_IR_MAX_ITERS + 8] = "    ";
    int nsp = s_ref_loops(&b, w, false, ind);
    kl_buf_printf(&b, "%sint64_t acc = 0;\n%sint any = 0;\n%s(void)any;\n", ind,
                  ind, ind);
    int nrd = s_ref_loops(&b, w, true, ind);
    s_ref_point(&b, w, ind);
    for (int i = 0; i < nrd; i++) {
        ind[strlen(ind) - 4] = '\0';
        kl_buf_printf(&b, "%s}\n", ind);
    }
    kl_buf_printf(&b, "%sint64_t x = acc;\n", ind);
    int rc = kl_codegen__int_epilogue(&b, w, ind, err);
    if (rc) {
        kl_buf_free(&b);
        return rc;
    }
    for (int i = 0; i < nsp; i++) {
        ind[strlen(ind) - 4] = '\0';
        kl_buf_printf(&b, "%s}\n", ind);
    }
    kl_buf_puts(&b, "}\n");
    out->source = kl_buf_take(&b);
    out->entry = kl_xstrdup(entry);
    for (int i = 0; i < 3; i++)
        out->grid[i] = out->block[i] = 1;
    return KL_OK;
}
