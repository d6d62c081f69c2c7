/* codegen_cpu.c - the CPU target's entry points (kl_codegen.h): kl_codegen_c
 * chooses the tensorized generator, a Winograd kernel, a depthwise
 * kernel (codegen_dw.c) or the scheduled nest (codegen_c.c) for a
 * schedule; kl_codegen_reference is the naive
 * nest of a workload. The top of the C generator: it calls every part
 * below and nothing calls back up into it. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cg_priv.h"
#include "kl_err.h"

/* The loops as symbols (checked for a CPU nest): 0, or the failure. */
static int s_setup_loops(cg_t *g)
{
    for (int p = 0; p < g->n; p++) {
        const kl_loop_t *l = kl_sched_loop(g->s, p);
        g->L[p] = l;
        g->symbase[p] = g->nsym;
        if (l->kind >= KL_LOOP_BLOCK_X)
            return kl_codegen__c_fail(g, KL_ERR_UNSUPPORTED,
                                      "loop %d is bound to %s (a GPU schedule)",
                                      l->id, kl_loop_kind_name(l->kind));
        if (l->kind == KL_LOOP_PARALLEL && p != 0)
            return kl_codegen__c_fail(g, KL_ERR_INVAL,
                                      "parallel loop %d is not the outermost",
                                      l->id);
        if (l->kind == KL_LOOP_VECTORIZE) {
            if (p != g->n - 1 || l->nparts != 1)
                return kl_codegen__c_fail(g, KL_ERR_INVAL,
                                          "vectorized loop %d is not innermost",
                                          l->id);
            g->vpos = p;
        }
        /* A fused loop's parts: the last varies fastest, unless the
         * parallel loop says the first does (KL_ANNOT_PARALLEL_ORDER). */
        bool first = l->kind == KL_LOOP_PARALLEL &&
                     kl_loop_annot(l, KL_ANNOT_PARALLEL_ORDER) == 1;
        int64_t inner = 1;
        for (int k = 0; k < l->nparts; k++) {
            int q = first ? k : l->nparts - 1 - k;
            if (g->nsym + l->nparts > CG_MAXSYM)
                return kl_codegen__c_fail(g, KL_ERR_UNSUPPORTED,
                                          "too many loop parts");
            cg_sym_t *s = &g->sym[g->nsym + q];
            s->pos = p;
            s->part = q;
            s->iter = l->parts[q].iter;
            s->stride = l->parts[q].stride;
            s->extent = l->parts[q].extent;
            s->inner = inner;
            inner *= s->extent;
            g->it[s->iter].k[g->nsym + q] += s->stride;
        }
        g->nsym += l->nparts;
    }
    return KL_OK;
}

/* The stages: the write cache's position and the spatial loops below it,
 * each packed tensor's attach position. 0, or the failure. */
static int s_setup_stages(cg_t *g)
{
    for (int i = 0; i < kl_sched_nstages(g->s); i++) {
        const kl_stage_t *st = kl_sched_stage(g->s, i);
        int ap = kl_sched_stage_attach_pos(g->s, st);
        if (st->attach != KL_ATTACH_ROOT && ap < 0)
            return kl_codegen__c_fail(g, KL_ERR_INVAL,
                                      "stage %d: attach loop is gone", st->id);
        if (st->scope == KL_SCOPE_SHARED)
            return kl_codegen__c_fail(g, KL_ERR_UNSUPPORTED,
                                      "stage %d: shared memory is GPU only",
                                      st->id);
        if (st->kind == KL_STAGE_WRITE)
            g->wc_pos = ap;
        else
            g->pack_pos[st->tensor] = ap;
    }
    if (g->wc_pos != -2) {
        for (int p = g->wc_pos + 1; p < g->n; p++) {
            if (g->L[p]->reduce)
                continue;
            if (g->L[p]->kind != KL_LOOP_UNROLL &&
                g->L[p]->kind != KL_LOOP_VECTORIZE)
                return kl_codegen__c_fail(
                    g, KL_ERR_INVAL,
                    "write cache: spatial loop %d below it is "
                    "not unrolled or vectorized",
                    g->L[p]->id);
            g->acc_pos[g->nacc_pos++] = p;
        }
    }
    return KL_OK;
}

/* The loops, symbols, stages and packed tensors of s, checked for a C
 * kernel: 0, or the kl_codegen__c_fail code. */
static int s_setup(cg_t *g)
{
    g->n = kl_sched_nloops(g->s);
    g->vpos = -1;
    g->wc_pos = -2;
    g->lanes = 1;
    g->lanes_on = true;
    for (int t = 0; t < KL_IR_MAX_TENSORS; t++)
        g->pack_pos[t] = -2;
    int rc = s_setup_loops(g);
    if (rc)
        return rc;
    for (int i = 0; i < kl_sched_nguards(g->s); i++)
        g->it_guarded[kl_sched_guard(g->s, i)->iter] = true;
    if (g->vpos >= 0) {
        const kl_loop_t *v = g->L[g->vpos];
        if (!g->it_guarded[v->parts[0].iter]) {
            for (int W = g->t->vec_lanes; W >= 4; W /= 2)
                if (v->extent % W == 0) {
                    g->lanes = W;
                    break;
                }
        }
    }
    return s_setup_stages(g);
}

void kl_kernel_free(kl_kernel_t *k)
{
    if (!k)
        return;
    free(k->source);
    free(k->entry);
    memset(k, 0, sizeof *k);
}

int kl_codegen_c(const kl_sched_t *s, const kl_target_t *t, const char *entry,
                 kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (t && t->kind != KL_TARGET_CPU)
        return kl_seterr(err, KL_ERR_INVAL,
                         "codegen: target %s is not a CPU target", t->name);
    kl_target_t def;
    if (!t) {
        if (kl_target_parse("cpu", &def, err))
            return KL_ERR_INTERNAL;
        t = &def;
    }
    const kl_workload_t *sw = kl_sched_workload(s);
    kl_tensorize_t tz;
    int trc = kl_sched_tensorized(s, &tz, err);
    if (trc != KL_ERR_NOTFOUND)
        return trc ? trc : kl_codegen_tensorized(s, entry, out, err);
    if (kl_workload_is_int(sw) && !kl_codegen__dw_family(s))
        return kl_seterr(
            err, KL_ERR_UNSUPPORTED,
            "codegen: %s has %s output %s: scheduled C is f32 "
            "only (integer workloads have a reference kernel; "
            "integer schedules are tensorized: kl_sched_tensorize)",
            sw->name ? sw->name : "?",
            kl_dtype_name(sw->tensors[kl_workload_output(sw)].dtype),
            sw->tensors[kl_workload_output(sw)].name);
    cg_t *g = kl_xcalloc(1, sizeof *g);
    g->s = s;
    g->w = kl_sched_workload(s);
    g->t = t;
    g->err = err;
    g->lin_ok = true;
    int rc = KL_OK;
    if (kl_codegen__dw_family(s))
        rc = kl_codegen__emit_dw(g, entry ? entry : "kl_main");
    else
        rc = s_setup(g);
    if (!rc && !kl_codegen__dw_family(s))
        rc = kl_codegen__pack_setup(g);
    if (!rc && !kl_codegen__dw_family(s)) {
        if (kl_sched_winograd_m(s))
            rc = kl_codegen__emit_winograd(g, entry ? entry : "kl_main");
        else
            kl_codegen__emit_function(g, entry ? entry : "kl_main");
        if (!g->lin_ok)
            rc = kl_codegen__c_fail(g, KL_ERR_INTERNAL,
                                    "an index used a loop outside its scope");
    }
    if (rc) {
        kl_buf_free(&g->b);
        free(g);
        return rc;
    }
    out->source = kl_buf_take(&g->b);
    out->entry = kl_xstrdup(entry ? entry : "kl_main");
    out->prepare = g->prep_elems > 0 || kl_sched_winograd_m(s) > 0;
    for (int i = 0; i < 3; i++)
        out->grid[i] = out->block[i] = 1;
    free(g);
    return KL_OK;
}

int kl_codegen_reference(const kl_workload_t *w, const char *entry,
                         kl_kernel_t *out, char *err)
{
    if (kl_workload_is_int(w))
        return kl_codegen_reference_int(w, entry, out, err);
    kl_sched_t *s = NULL;
    int rc = kl_sched_create(&s, w, err);
    if (rc)
        return rc;
    kl_target_t t;
    kl_target_parse("cpu/generic", &t, NULL);
    rc = kl_codegen_c(s, &t, entry ? entry : "kl_ref", out, err);
    kl_sched_destroy(&s);
    return rc;
}
