/* postproc_cuda.c - the GPU launch plan of a scheduled nest and the GPU
 * postprocessors (kl_cuda_plan.h, kl_space.h). */
#include <stdio.h>
#include <string.h>

#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_space.h"

static kl_cuda_resource_fn s_resource_check;

void kl_postproc_cuda_set_resource_check(kl_cuda_resource_fn fn)
{
    s_resource_check = fn;
}

static bool s_is_bound(kl_loop_kind k)
{
    return k >= KL_LOOP_BLOCK_X && k <= KL_LOOP_VTHREAD;
}

static bool s_same_access(const kl_access_t *a, const kl_access_t *b, int nd,
                          int niters)
{
    for (int d = 0; d < nd; d++) {
        if (a->idx[d].offset != b->idx[d].offset ||
            a->idx[d].div != b->idx[d].div)
            return false;
        for (int k = 0; k < niters; k++)
            if (a->idx[d].coef[k] != b->idx[d].coef[k])
                return false;
    }
    return true;
}

/* Finds the body's reads of tensor; all must share one index map. Returns
 * the first in *acc, or NULL when there is none; *mixed when two differ. */
static void s_find_reads(const kl_workload_t *w, const kl_expr_t *e, int tensor,
                         const kl_access_t **acc, bool *mixed)
{
    if (!e)
        return;
    if (e->kind == KL_EX_LOAD && e->access.tensor == tensor) {
        if (!*acc)
            *acc = &e->access;
        else if (!s_same_access(*acc, &e->access, w->tensors[tensor].ndim,
                                w->niters))
            *mixed = true;
    }
    s_find_reads(w, e->a, tensor, acc, mixed);
    s_find_reads(w, e->b, tensor, acc, mixed);
}

static int s_plan_bindings(const kl_sched_t *s, kl_cuda_plan_t *p, char *err)
{
    const kl_workload_t *w = kl_sched_workload(s);
    for (int i = 0; i < 3; i++)
        p->grid[i] = p->block[i] = 1;
    p->vthreads = 1;
    for (int pos = 0; pos < p->nloops; pos++) {
        const kl_loop_t *l = kl_sched_loop(s, pos);
        if (l->kind == KL_LOOP_PARALLEL)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "cuda: loop l%d is parallel (a CPU binding)",
                             l->id);
        if (!s_is_bound(l->kind))
            continue;
        if (pos != p->prefix)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "cuda: loop l%d bound to %s is inside the "
                             "unbound loop l%d",
                             l->id, kl_loop_kind_name(l->kind),
                             kl_sched_loop(s, p->prefix)->id);
        p->prefix++;
        if (l->kind <= KL_LOOP_BLOCK_Z)
            p->grid[l->kind - KL_LOOP_BLOCK_X] = l->extent;
        else if (l->kind <= KL_LOOP_THREAD_Z)
            p->block[l->kind - KL_LOOP_THREAD_X] = l->extent;
        else
            p->vthreads *= l->extent;
    }
    if (p->prefix == 0) {
        /* Flat: the spatial loops before the first reduction. */
        p->flat = true;
        int64_t total = 1;
        while (p->nflat < p->nloops && !kl_sched_loop(s, p->nflat)->reduce) {
            total *= kl_sched_loop(s, p->nflat)->extent;
            p->nflat++;
        }
        p->block[0] = total < KL_CUDA_FLAT_BLOCK ? total : KL_CUDA_FLAT_BLOCK;
        p->grid[0] = (total + p->block[0] - 1) / p->block[0];
        if (total >= ((int64_t)1 << 31))
            p->wide_index = true;
    }
    p->threads = p->block[0] * p->block[1] * p->block[2];
    for (int i = 0; i < w->ntensors; i++)
        if (kl_tensor_numel(&w->tensors[i]) >= ((int64_t)1 << 31))
            p->wide_index = true;
    return KL_OK;
}

static int s_plan_write(const kl_sched_t *s, kl_cuda_plan_t *p, char *err)
{
    int lead = p->flat ? p->nflat : p->prefix;
    int first_red = p->nloops;
    for (int pos = p->nloops - 1; pos >= 0; pos--)
        if (kl_sched_loop(s, pos)->reduce)
            first_red = pos;
    p->wc_attach = first_red - 1;
    for (int i = 0; i < kl_sched_nstages(s); i++) {
        const kl_stage_t *st = kl_sched_stage(s, i);
        if (st->kind != KL_STAGE_WRITE)
            continue;
        if (st->scope != KL_SCOPE_LOCAL)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "cuda: write cache %d in scope %s (only local)",
                             st->id, kl_scope_name(st->scope));
        p->wc_explicit = true;
        p->wc_attach = kl_sched_stage_attach_pos(s, st);
    }
    if (p->wc_attach < lead - 1)
        p->wc_attach = lead - 1;
    for (int pos = 0; pos <= p->wc_attach && pos < p->nloops; pos++)
        if (kl_sched_loop(s, pos)->reduce)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "cuda: reduction loop l%d is outside the "
                             "accumulators (attached below loop position %d)",
                             kl_sched_loop(s, pos)->id, p->wc_attach);
    /* vthread loops first, then the spatial loops below the attach point. */
    p->nacc_loops = 0;
    for (int pos = 0; pos < p->nloops; pos++)
        if (kl_sched_loop(s, pos)->kind == KL_LOOP_VTHREAD)
            p->acc_pos[p->nacc_loops++] = pos;
    for (int pos = p->wc_attach + 1; pos < p->nloops; pos++)
        if (!kl_sched_loop(s, pos)->reduce)
            p->acc_pos[p->nacc_loops++] = pos;
    p->nacc = 1;
    for (int i = p->nacc_loops - 1; i >= 0; i--) {
        p->acc_mult[i] = p->nacc;
        p->nacc *= kl_sched_loop(s, p->acc_pos[i])->extent;
        if (p->nacc > ((int64_t)1 << 30))
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "cuda: register tile too large");
    }
    return KL_OK;
}

/* Whether loop position pos varies inside a shared copy attached at
 * position attach: below it, or bound to threads or vthreads. */
static bool s_relaxed(const kl_loop_t *l, int pos, int attach)
{
    if (l->kind >= KL_LOOP_THREAD_X && l->kind <= KL_LOOP_VTHREAD)
        return true;
    return pos > attach && !s_is_bound(l->kind);
}

/* The row padding of shared boxes the schedule asked for (floats). */
static int64_t s_smem_pad(const kl_sched_t *s, const kl_cuda_plan_t *p)
{
    for (int pos = 0; pos < p->prefix; pos++) {
        int64_t v = kl_loop_annot(kl_sched_loop(s, pos), "smem_pad");
        if (v > 0 && v <= 32)
            return v;
    }
    return 0;
}

static int s_plan_stage(const kl_sched_t *s, kl_cuda_plan_t *p,
                        const kl_stage_t *st, int idx, char *err)
{
    const kl_workload_t *w = kl_sched_workload(s);
    const char *name = w->tensors[st->tensor].name;
    if (st->scope != KL_SCOPE_SHARED)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda: read cache of %s in scope %s (only shared)",
                         name, kl_scope_name(st->scope));
    if (p->flat)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda: read cache of %s needs loops bound to "
                         "threads",
                         name);
    const kl_access_t *a = NULL;
    bool mixed = false;
    s_find_reads(w, w->body, st->tensor, &a, &mixed);
    if (!a || mixed)
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "cuda: read cache of %s: %s",
                         name,
                         a ? "read through two index maps" : "never read");
    kl_cuda_smem_t *sm = &p->smem[p->nsmem];
    memset(sm, 0, sizeof *sm);
    sm->stage = idx;
    sm->tensor = st->tensor;
    sm->ndim = w->tensors[st->tensor].ndim;
    sm->attach = kl_sched_stage_attach_pos(s, st);
    if (sm->attach < p->prefix - 1)
        sm->attach = p->prefix - 1;
    sm->size = 1;
    for (int d = 0; d < sm->ndim; d++) {
        if (a->idx[d].div > 1)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "cuda: read cache of %s: strided gather in "
                             "dimension %d",
                             name, d);
        int64_t lo = 0, hi = 0;
        for (int pos = 0; pos < p->nloops; pos++) {
            const kl_loop_t *l = kl_sched_loop(s, pos);
            if (!s_relaxed(l, pos, sm->attach))
                continue;
            for (int q = 0; q < l->nparts; q++) {
                int64_t c = a->idx[d].coef[l->parts[q].iter] *
                            l->parts[q].stride * (l->parts[q].extent - 1);
                if (c > 0)
                    hi += c;
                else
                    lo += c;
            }
        }
        sm->lo[d] = lo;
        sm->ext[d] = hi - lo + 1;
        sm->size *= sm->ext[d];
        if (sm->size > ((int64_t)1 << 30))
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "cuda: read cache of %s: box too large", name);
    }
    int last = sm->ndim - 1;
    int64_t pad = s_smem_pad(s, p);
    sm->pitch = sm->ext[last] + (sm->ndim > 1 && sm->ext[last] > 1 ? pad : 0);
    sm->alloc = sm->size / sm->ext[last] * sm->pitch;
    /* 16-byte aligned buffers, so that wide accesses stay possible. */
    int64_t off = 0;
    for (int i = 0; i < p->nsmem; i++)
        off = p->smem[i].offset + ((p->smem[i].alloc + 3) / 4) * 4;
    sm->offset = off;
    p->smem_bytes = (off + sm->alloc) * 4;
    p->nsmem++;
    return KL_OK;
}

int kl_cuda_plan(const kl_sched_t *s, const kl_target_t *t, kl_cuda_plan_t *p,
                 char *err)
{
    memset(p, 0, sizeof *p);
    const kl_workload_t *w = kl_sched_workload(s);
    if (t && t->kind != KL_TARGET_CUDA)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "target %s is not a CUDA target", t->name);
    /* Inputs may be f16 / bf16 (read as their bits, computed in f32); the
     * output is f32. */
    int o = kl_workload_output(w);
    if (w->tensors[o].dtype != KL_DT_F32)
        return kl_seterr(
            err, KL_ERR_UNSUPPORTED, "cuda: output %s is %s (only f32 outputs)",
            w->tensors[o].name, kl_dtype_name(w->tensors[o].dtype));
    p->nloops = kl_sched_nloops(s);
    int rc = s_plan_bindings(s, p, err);
    if (!rc)
        rc = s_plan_write(s, p, err);
    for (int i = 0; !rc && i < kl_sched_nstages(s); i++) {
        const kl_stage_t *st = kl_sched_stage(s, i);
        if (st->kind == KL_STAGE_READ)
            rc = s_plan_stage(s, p, st, i, err);
    }
    if (rc)
        return rc;
    p->smem_dynamic = p->smem_bytes > KL_CUDA_STATIC_SMEM;
    return KL_OK;
}

static int64_t s_spatial_points(const kl_workload_t *w)
{
    int64_t n = 1;
    for (int k = 0; k < w->niters; k++)
        if (!w->iters[k].reduce)
            n *= w->iters[k].extent;
    return n;
}

int kl_cuda_plan_check(const kl_cuda_plan_t *p, const kl_sched_t *s,
                       const kl_target_t *t, char *err)
{
    const kl_workload_t *w = kl_sched_workload(s);
    int64_t maxt =
        t->max_threads_per_block > 0 ? t->max_threads_per_block : 1024;
    int64_t points = s_spatial_points(w);
    int64_t mint = points < KL_CUDA_MIN_THREADS ? points : KL_CUDA_MIN_THREADS;
    if (p->threads > maxt)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%lld threads per block (at most %lld)",
                         (long long)p->threads, (long long)maxt);
    if (p->threads < mint)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%lld threads per block (fewer than a warp of %lld)",
                         (long long)p->threads, (long long)mint);
    if (p->block[2] > 64)
        return kl_seterr(err, KL_ERR_INVAL, "blockDim.z %lld (at most 64)",
                         (long long)p->block[2]);
    if (p->grid[0] > 2147483647LL || p->grid[1] > 65535 || p->grid[2] > 65535)
        return kl_seterr(err, KL_ERR_INVAL, "grid %lldx%lldx%lld too large",
                         (long long)p->grid[0], (long long)p->grid[1],
                         (long long)p->grid[2]);
    if (p->vthreads > KL_CUDA_MAX_VTHREADS)
        return kl_seterr(err, KL_ERR_INVAL, "%lld vthreads (at most %d)",
                         (long long)p->vthreads, KL_CUDA_MAX_VTHREADS);
    if (p->nacc > KL_CUDA_MAX_ACC)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%lld accumulators per thread (at most %d)",
                         (long long)p->nacc, KL_CUDA_MAX_ACC);
    int64_t maxs = t->max_shared_bytes > KL_CUDA_STATIC_SMEM
                       ? t->max_shared_bytes
                       : KL_CUDA_STATIC_SMEM;
    if (p->smem_bytes > maxs)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%lld bytes of shared memory per block (at most "
                         "%lld)",
                         (long long)p->smem_bytes, (long long)maxs);
    for (int pos = 0; pos < p->nloops; pos++) {
        const kl_loop_t *l = kl_sched_loop(s, pos);
        if (l->kind == KL_LOOP_VECTORIZE && l->extent * 4 > 16)
            return kl_seterr(err, KL_ERR_INVAL,
                             "vectorized loop l%d: %lld bytes per access "
                             "(at most 16)",
                             l->id, (long long)l->extent * 4);
    }
    return KL_OK;
}

/* Strides of access a into its tensor per iterator, when every dimension
 * is one iterator with coefficient 1 over the whole dimension. */
static bool s_plain_strides(const kl_workload_t *w, const kl_access_t *a,
                            int64_t *st)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const kl_affine_t *x = &a->idx[d];
        int it = -1;
        for (int k = 0; k < w->niters; k++) {
            if (!x->coef[k])
                continue;
            if (x->coef[k] != 1 || it >= 0)
                return false;
            it = k;
        }
        if (it < 0 || x->offset || x->div > 1 || st[it] ||
            t->shape[d] != w->iters[it].extent)
            return false;
        st[it] = stride;
        stride *= t->shape[d];
    }
    return true;
}

bool kl_cuda_mma_match(const kl_workload_t *w, kl_cuda_mma_match_t *m)
{
    memset(m, 0, sizeof *m);
    const kl_expr_t *e = w->body;
    if (w->reduce != KL_RED_SUM || !e || e->kind != KL_EX_MUL ||
        e->a->kind != KL_EX_LOAD || e->b->kind != KL_EX_LOAD)
        return false;
    int out = kl_workload_output(w);
    int ta = e->a->access.tensor, tb = e->b->access.tensor;
    kl_dtype dt = w->tensors[ta].dtype;
    if (ta == tb || w->tensors[out].dtype != KL_DT_F32 ||
        (dt != KL_DT_F16 && dt != KL_DT_BF16) || w->tensors[tb].dtype != dt)
        return false;
    for (int i = 0; i < w->nepi; i++) {
        int64_t se[KL_IR_MAX_ITERS] = {0};
        if ((w->epi[i].kind == KL_EPI_ADD_TENSOR ||
             w->epi[i].kind == KL_EPI_MUL_TENSOR) &&
            (w->tensors[w->epi[i].access.tensor].dtype != KL_DT_F32 ||
             !s_plain_strides(w, &w->epi[i].access, se)))
            return false;
    }
    int64_t s1[KL_IR_MAX_ITERS] = {0}, s2[KL_IR_MAX_ITERS] = {0};
    if (!s_plain_strides(w, &e->a->access, s1) ||
        !s_plain_strides(w, &e->b->access, s2) ||
        !s_plain_strides(w, &w->out, m->sc))
        return false;
    int p = -1, q = -1, k = -1;
    for (int it = 0; it < w->niters; it++) {
        if (w->iters[it].reduce) {
            if (k >= 0 || !s1[it] || !s2[it])
                return false;
            k = it;
        } else if (s1[it] && s2[it]) {
            m->batch[m->nbatch++] = it;
        } else if (s1[it]) {
            if (p >= 0)
                return false;
            p = it;
        } else if (s2[it]) {
            if (q >= 0)
                return false;
            q = it;
        } else {
            return false; /* a broadcast, not a product */
        }
    }
    if (p < 0 || q < 0 || k < 0)
        return false;
    m->in = dt;
    m->a = ta;
    m->b = tb;
    m->m = p;
    m->n = q;
    m->k = k;
    memcpy(m->sa, s1, sizeof s1);
    memcpy(m->sb, s2, sizeof s2);
    return true;
}

static bool s_mma_annotated(const kl_loop_t *l)
{
    return kl_loop_annot(l, KL_CUDA_MMA_ANNOT) == 1;
}

/* Loop at pos is one part of iterator it with stride and (when ext > 0)
 * that extent; returns its extent, or 0 when it is not. */
static int64_t s_mma_level(const kl_sched_t *s, int pos, int it, int64_t stride,
                           int64_t ext)
{
    const kl_loop_t *l = kl_sched_loop(s, pos);
    if (l->nparts != 1 || l->parts[0].iter != it ||
        l->parts[0].stride != stride || (ext > 0 && l->extent != ext) ||
        s_is_bound(l->kind) || l->kind == KL_LOOP_PARALLEL)
        return 0;
    return l->extent;
}

int kl_cuda_mma_plan(const kl_sched_t *s, const kl_target_t *t,
                     kl_cuda_mma_plan_t *p, char *err)
{
    memset(p, 0, sizeof *p);
    const kl_workload_t *w = kl_sched_workload(s);
    int n = kl_sched_nloops(s);
    bool any = false;
    for (int pos = 0; pos < n; pos++)
        any = any || s_mma_annotated(kl_sched_loop(s, pos));
    if (!any)
        return KL_ERR_NOTFOUND;
    if (t && t->kind != KL_TARGET_CUDA)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "target %s is not a CUDA target", t->name);
    if (t && t->sm < 80)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda: mma.sync m16n8k16 needs sm_80 or newer "
                         "(target %s)",
                         t->name);
    kl_cuda_mma_match_t *mm = &p->mm;
    if (!kl_cuda_mma_match(w, mm))
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda: %s is not a product of two f16 or bf16 "
                         "tensors into an f32 one (no tensor-core form)",
                         w->name ? w->name : "the workload");
    const kl_loop_t *blk = n == 10 ? kl_sched_loop(s, 0) : NULL;
    if (!blk || blk->kind != KL_LOOP_BLOCK_X || !s_mma_annotated(blk) ||
        kl_sched_nstages(s) || blk->nparts != mm->nbatch + 2)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda: the %s nest is not blk wm wn k0 k1 mt nt "
                         "m16 n8 k16 without stages",
                         KL_CUDA_MMA_ANNOT);
    p->tiles_m = s_mma_level(s, 5, mm->m, 16, 0);
    p->tiles_n = s_mma_level(s, 6, mm->n, 8, 0);
    p->warps_m = s_mma_level(s, 1, mm->m, 16 * p->tiles_m, 0);
    p->warps_n = s_mma_level(s, 2, mm->n, 8 * p->tiles_n, 0);
    p->ksteps = s_mma_level(s, 4, mm->k, 16, 0);
    p->kouter = s_mma_level(s, 3, mm->k, 16 * p->ksteps, 0);
    p->bm = 16 * p->warps_m * p->tiles_m;
    p->bn = 8 * p->warps_n * p->tiles_n;
    p->bk = 16 * p->ksteps;
    bool ok = p->tiles_m && p->tiles_n && p->warps_m && p->warps_n &&
              p->ksteps && p->kouter && s_mma_level(s, 7, mm->m, 1, 16) &&
              s_mma_level(s, 8, mm->n, 1, 8) && s_mma_level(s, 9, mm->k, 1, 16);
    for (int q = 0; ok && q < blk->nparts; q++) {
        const kl_loop_part_t *pt = &blk->parts[q];
        if (pt->iter == mm->m)
            ok = pt->stride == p->bm;
        else if (pt->iter == mm->n)
            ok = pt->stride == p->bn;
        else
            ok = pt->stride == 1 && pt->extent == w->iters[pt->iter].extent;
    }
    if (!ok)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cuda: the %s nest's levels do not tile m by "
                         "(blk, wm, mt, 16), n by (blk, wn, nt, 8) and k by "
                         "(k0, k1, 16)",
                         KL_CUDA_MMA_ANNOT);
    p->grid = blk->extent;
    if (kl_loop_annot(blk, KL_CUDA_LDMATRIX_ANNOT) == 1)
        p->ldmatrix = true;
    p->threads = 32 * p->warps_m * p->warps_n;
    p->pitch = p->bk + 8;
    p->smem_bytes = (p->bm + p->bn) * p->pitch * 2;
    return KL_OK;
}

static int s_postproc_mma(const kl_target_t *t, kl_sched_t *s,
                          const kl_cuda_mma_plan_t *p, char *err)
{
    int64_t maxt =
        t->max_threads_per_block > 0 ? t->max_threads_per_block : 1024;
    if (p->threads > maxt)
        return kl_seterr(err, KL_ERR_INVAL,
                         "postproc cuda: %lld threads per block (at most "
                         "%lld)",
                         (long long)p->threads, (long long)maxt);
    if (p->smem_bytes > KL_CUDA_STATIC_SMEM)
        return kl_seterr(err, KL_ERR_INVAL,
                         "postproc cuda: %lld bytes of shared memory per "
                         "block (at most %d)",
                         (long long)p->smem_bytes, KL_CUDA_STATIC_SMEM);
    if (p->tiles_m * p->tiles_n * 4 > KL_CUDA_MAX_ACC)
        return kl_seterr(err, KL_ERR_INVAL,
                         "postproc cuda: %lld accumulators per thread (at "
                         "most %d)",
                         (long long)(p->tiles_m * p->tiles_n * 4),
                         KL_CUDA_MAX_ACC);
    if (p->grid > 2147483647LL)
        return kl_seterr(err, KL_ERR_INVAL, "postproc cuda: grid too large");
    char why[KL_ERRMSG_LEN];
    if (s_resource_check && s_resource_check(s, t, why))
        return kl_seterr(err, KL_ERR_INVAL, "postproc cuda: %s", why);
    return KL_OK;
}

int kl_postproc_cuda(const kl_target_t *t, kl_sched_t *s, char *err)
{
    kl_cuda_plan_t p;
    char why[KL_ERRMSG_LEN];
    kl_cuda_mma_plan_t mp;
    int rc = kl_cuda_mma_plan(s, t, &mp, why);
    if (rc != KL_ERR_NOTFOUND)
        return rc ? kl_seterr(err, KL_ERR_INVAL, "postproc cuda: %s", why)
                  : s_postproc_mma(t, s, &mp, err);
    rc = kl_cuda_plan(s, t, &p, why);
    if (rc)
        return kl_seterr(err, KL_ERR_INVAL, "postproc cuda: %s", why);
    rc = kl_cuda_plan_check(&p, s, t, why);
    if (rc)
        return kl_seterr(err, KL_ERR_INVAL, "postproc cuda: %s", why);
    if (s_resource_check) {
        rc = s_resource_check(s, t, why);
        if (rc)
            return kl_seterr(err, KL_ERR_INVAL, "postproc cuda: %s", why);
    }
    return KL_OK;
}
