/* postproc_cpu.c - CPU postprocessors: reject what the C code generator
 * cannot run well, with the reason (kl_space.h). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "kl_err.h"
#include "kl_space.h"

/* A packed buffer made on every call; a constant tensor packed at the
 * root is packed once, by ENTRY_prepare, and may be as large as the
 * weights of a large layer (512 x 512 x 3 x 3 floats is 9.4 MB, its
 * Winograd transform 16 MB). */
#define PACK_MAX_BYTES ((int64_t)8 << 20)
#define PREP_MAX_BYTES ((int64_t)256 << 20)
#define ACC_MAX_VARS 64

/* Elements of the packed buffer of a read stage (kl_codegen.h layout:
 * one dimension per loop below the attach point that reads the tensor). */
static int64_t s_pack_elems(const kl_sched_t *s, const kl_stage_t *st)
{
    int64_t n = 1;
    int ap = kl_sched_stage_attach_pos(s, st);
    for (int p = ap + 1; p < kl_sched_nloops(s); p++)
        if (kl_sched_loop_touches(s, p, st->tensor))
            n *= kl_sched_loop(s, p)->extent;
    return n;
}

static int s_check_loops(const kl_target_t *t, const kl_sched_t *s, char *err)
{
    int n = kl_sched_nloops(s);
    for (int p = 0; p < n; p++) {
        const kl_loop_t *l = kl_sched_loop(s, p);
        if (l->kind >= KL_LOOP_BLOCK_X)
            return kl_seterr(err, KL_ERR_INVAL,
                             "loop %d is bound to %s: not a CPU schedule",
                             l->id, kl_loop_kind_name(l->kind));
        if (l->kind == KL_LOOP_PARALLEL && p != 0)
            return kl_seterr(err, KL_ERR_INVAL,
                             "parallel loop %d is not the outermost loop",
                             l->id);
        if (l->kind == KL_LOOP_PARALLEL && l->reduce)
            return kl_seterr(err, KL_ERR_INVAL,
                             "parallel loop %d is a reduction", l->id);
        if (l->kind == KL_LOOP_VECTORIZE) {
            if (p != n - 1)
                return kl_seterr(err, KL_ERR_INVAL,
                                 "vectorized loop %d is not innermost", l->id);
            if (l->extent > 16 * t->vec_lanes)
                return kl_seterr(err, KL_ERR_INVAL,
                                 "vectorized loop %d has extent %lld (at "
                                 "most %d)",
                                 l->id, (long long)l->extent,
                                 16 * t->vec_lanes);
        }
    }
    const kl_loop_t *l0 = kl_sched_loop(s, 0);
    if (l0 && l0->kind == KL_LOOP_PARALLEL && l0->extent > 1 << 20)
        return kl_seterr(err, KL_ERR_INVAL,
                         "parallel extent %lld is not sane (at most 2^20)",
                         (long long)l0->extent);
    return KL_OK;
}

static int s_check_acc(const kl_target_t *t, const kl_sched_t *s,
                       const kl_stage_t *st, char *err)
{
    int ap = kl_sched_stage_attach_pos(s, st);
    int64_t vars = 1;
    for (int p = ap + 1; p < kl_sched_nloops(s); p++) {
        const kl_loop_t *l = kl_sched_loop(s, p);
        if (l->reduce)
            continue;
        if (l->kind == KL_LOOP_VECTORIZE) {
            int lanes = t->vec_lanes;
            while (lanes > 1 && l->extent % lanes)
                lanes /= 2;
            vars *= l->extent / lanes;
        } else if (l->kind == KL_LOOP_UNROLL) {
            vars *= l->extent;
        } else {
            return kl_seterr(err, KL_ERR_INVAL,
                             "write cache: spatial loop %d below its attach "
                             "point is %s (must be unrolled or vectorized)",
                             l->id, kl_loop_kind_name(l->kind));
        }
        if (vars > ACC_MAX_VARS)
            return kl_seterr(err, KL_ERR_INVAL,
                             "register tile needs more than %d "
                             "accumulators",
                             ACC_MAX_VARS);
    }
    return KL_OK;
}

/* Number of distinct accesses to tensor t in e (up to 2). */
static int s_reads(const kl_expr_t *e, int t, const kl_access_t **first)
{
    if (!e)
        return 0;
    int n = 0;
    if (e->kind == KL_EX_LOAD && e->access.tensor == t) {
        if (!*first) {
            *first = &e->access;
            n = 1;
        } else if (memcmp(*first, &e->access, sizeof **first)) {
            n = 1;
        }
    }
    return n + s_reads(e->a, t, first) + s_reads(e->b, t, first);
}

int kl_postproc_cpu(const kl_target_t *t, kl_sched_t *s, char *err)
{
    kl_tensorize_t tz;
    int rc = kl_sched_tensorized(s, &tz, err);
    if (rc != KL_ERR_NOTFOUND && rc)
        return rc;
    rc = s_check_loops(t, s, err);
    if (rc)
        return rc;
    for (int i = 0; i < kl_sched_nstages(s); i++) {
        const kl_stage_t *st = kl_sched_stage(s, i);
        if (st->scope == KL_SCOPE_SHARED)
            return kl_seterr(err, KL_ERR_INVAL,
                             "stage %d: shared memory is GPU only", st->id);
        if (st->kind == KL_STAGE_WRITE) {
            if ((rc = s_check_acc(t, s, st, err)))
                return rc;
            continue;
        }
        const kl_access_t *first = NULL;
        if (s_reads(kl_sched_workload(s)->body, st->tensor, &first) > 1)
            return kl_seterr(err, KL_ERR_INVAL,
                             "packed tensor %s is read with different "
                             "indices",
                             kl_sched_workload(s)->tensors[st->tensor].name);
        int64_t bytes = s_pack_elems(s, st) * 4;
        bool once = kl_sched_stage_attach_pos(s, st) < 0 &&
                    kl_sched_workload(s)->tensors[st->tensor].is_const;
        int64_t max = once ? PREP_MAX_BYTES : PACK_MAX_BYTES;
        if (bytes > max)
            return kl_seterr(err, KL_ERR_INVAL,
                             "packed buffer of %s needs %lld bytes (at most "
                             "%lld%s)",
                             kl_sched_workload(s)->tensors[st->tensor].name,
                             (long long)bytes, (long long)max,
                             once ? ", packed once" : " per call");
    }
    return KL_OK;
}
