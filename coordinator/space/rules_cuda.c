/* rules_cuda.c - the GPU design space (kl_space.h): multi-level tiling
 * SSSRRSRS in the style of MetaSchedule.
 *
 * Every spatial loop is split in 5 (S0..S4), every reduction loop in 3
 * (R0..R2), and the nest reordered to
 *
 *   S0* S1* S2* R0* R1* S3* R2* S4*
 *
 * S0 (fused) is bound to blockIdx.x, S1 to vthread, S2 to threadIdx.x.
 * The output is accumulated in registers (cache_write local at S2); every
 * input that the body reads through plain affine indices is staged in
 * shared memory (cache_read shared) at a sampled level: the last R0 loop
 * (big tiles, loaded once per outer reduction step) or the last R1 loop
 * (small tiles). The inner reduction loops are unrolled, an auto-unroll
 * depth is sampled, and whether the rows of the shared boxes are padded by
 * 16 bytes (bank conflicts). reject_if keeps the sample inside the machine:
 * threads per block in [min(32, points), 1024], at most 8 vthreads, at
 * most 64 accumulators per thread, and threads x (accumulators + 40)
 * registers within the 64 K register file. The epilogue is applied at
 * write-back by the code generator (epilogue fusion).
 *
 * f16 / bf16 inputs are read and computed as f32 (the output is f32). A
 * product of two f16 or bf16 tensors into an f32 one (kl_cuda_mma_match)
 * on sm_80 or newer samples between this tiling and the tensor-core one
 * (s_mma_tiling, kl_cuda_plan.h: warps of mma.sync m16n8k16 with sampled
 * warp and tile counts); the trace's if/else records which.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_space_priv.h"

#define S_LEVELS 5
#define R_LEVELS 3
#define S_MAX_ACC 64

/* Whether the body reads tensor only through affine indices without a
 * strided gather (so a shared box can hold what it reads). */
static bool s_cacheable(const kl_workload_t *w, const kl_expr_t *e, int tensor,
                        bool *seen)
{
    if (!e)
        return true;
    if (e->kind == KL_EX_LOAD && e->access.tensor == tensor) {
        for (int d = 0; d < w->tensors[tensor].ndim; d++)
            if (e->access.idx[d].div > 1)
                return false;
        if (*seen)
            return false; /* read twice: keep it simple, no cache */
        *seen = true;
    }
    return s_cacheable(w, e->a, tensor, seen) &&
           s_cacheable(w, e->b, tensor, seen);
}

static int s_reject(kl_trace_t *t, char *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_reject(kl_trace_t *t, char *err, const char *fmt, ...)
{
    char pred[KL_PRED_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pred, sizeof pred, fmt, ap);
    va_end(ap);
    return kl_tr_reject_if(t, pred, err);
}

/* Appends " * vN" for each RV to b (bounded). */
static void s_prod(char *b, size_t n, const int64_t *rvs, int k)
{
    for (int i = 0; i < k; i++) {
        size_t len = strlen(b);
        snprintf(b + len, n - len, " * v%lld", (long long)rvs[i]);
    }
}

/* Largest factor of each inner level (index 1 ..): the tiles are peeled
 * from the inside out, one two-way perfect tile at a time, so that each
 * level's factor is capped on its own. One n-way draw would put each prime
 * factor at a uniform level, and for 1024 nearly every sample would have
 * too many vthreads or accumulators. */
static const int64_t s_smax[S_LEVELS] = {0, 2, 64, 2, 4};
static const int64_t s_rmax[R_LEVELS] = {0, 8, 4};

/* Splits loop into n levels (outermost first): fs receives the factor RVs,
 * ls the loop RVs. */
static void s_tile(kl_trace_t *t, int64_t loop, int n, const int64_t *max,
                   int64_t *fs, int64_t *ls)
{
    int64_t rest = loop;
    for (int lv = n - 1; lv >= 1; lv--) {
        int64_t f[2], l[2];
        kl_tr_sample_perfect_tile(t, rest, 2, max[lv], f);
        kl_tr_split(t, rest, f, 2, l);
        fs[lv] = f[1];
        ls[lv] = l[1];
        fs[lv - 1] = f[0];
        ls[lv - 1] = l[0];
        rest = l[0];
    }
}

/* Tiles, reorders to SSSRRSRS and binds; bound[] receives the loop RVs of
 * blockIdx.x, vthread and threadIdx.x, sv the spatial factor RVs, rl the
 * reduction loop RVs. */
static void s_tiling(kl_trace_t *t, int ns, int nr, int64_t bound[3],
                     int64_t sv[][S_LEVELS], int64_t rl[][R_LEVELS])
{
    int64_t loops[KL_IR_MAX_ITERS];
    kl_tr_get_loops(t, ns + nr, loops);
    int64_t sl[KL_IR_MAX_ITERS][S_LEVELS], rv[KL_IR_MAX_ITERS][R_LEVELS];
    for (int i = 0; i < ns; i++)
        s_tile(t, loops[i], S_LEVELS, s_smax, sv[i], sl[i]);
    for (int j = 0; j < nr; j++)
        s_tile(t, loops[ns + j], R_LEVELS, s_rmax, rv[j], rl[j]);
    /* S0 S1 S2 R0 R1 S3 R2 S4 */
    static const int order[] = {0, 1, 2, -1, -2, 3, -3, 4};
    int64_t nest[KL_SCHED_MAX_LOOPS];
    int nn = 0;
    for (int o = 0; o < 8; o++) {
        if (order[o] >= 0)
            for (int i = 0; i < ns; i++)
                nest[nn++] = sl[i][order[o]];
        else
            for (int j = 0; j < nr; j++)
                nest[nn++] = rl[j][-order[o] - 1];
    }
    kl_tr_reorder(t, nest, nn);
    int64_t lvl[KL_IR_MAX_ITERS];
    static const kl_loop_kind kinds[3] = {KL_LOOP_BLOCK_X, KL_LOOP_VTHREAD,
                                          KL_LOOP_THREAD_X};
    for (int lv = 0; lv < 3; lv++) {
        for (int i = 0; i < ns; i++)
            lvl[i] = sl[i][lv];
        bound[lv] = ns > 1 ? kl_tr_fuse(t, lvl, ns) : lvl[0];
        kl_tr_bind(t, bound[lv], kinds[lv]);
    }
}

/* The reject_if guards of the machine's limits. */
static int s_limits(kl_trace_t *t, const kl_target_t *tg, int ns,
                    int64_t points, const int64_t bound[3],
                    int64_t sv[][S_LEVELS], char *err)
{
    int64_t lo = points < 32 ? points : 32;
    int rc = s_reject(t, err, "l%lld < %lld || l%lld > %d", (long long)bound[2],
                      (long long)lo, (long long)bound[2],
                      tg->max_threads_per_block > 0 ? tg->max_threads_per_block
                                                    : 1024);
    if (!rc)
        rc = s_reject(t, err, "l%lld > 8", (long long)bound[1]);
    /* Accumulators: vthreads x S3 x S4 tiles. */
    char acc[KL_PRED_MAX];
    snprintf(acc, sizeof acc, "l%lld", (long long)bound[1]);
    for (int i = 0; i < ns; i++)
        s_prod(acc, sizeof acc, &sv[i][3], 2);
    if (!rc)
        rc = s_reject(t, err, "%s > %d", acc, S_MAX_ACC);
    /* Registers: the accumulators plus about 40 for indices and operands
     * per thread must fit the 64 K register file with the whole block, or
     * __launch_bounds__ makes ptxas spill. */
    if (!rc)
        rc = s_reject(t, err, "l%lld * (%s + 40) > 65536", (long long)bound[2],
                      acc);
    return rc;
}

/* Register accumulators at threadIdx.x, shared boxes of the inputs at a
 * sampled reduction level, unrolled inner reduction loops. */
static void s_caching(kl_trace_t *t, const kl_workload_t *w, int nr,
                      const int64_t bound[3], int64_t rl[][R_LEVELS])
{
    int64_t wc = kl_tr_cache_write(t, KL_SCOPE_LOCAL);
    kl_tr_reverse_compute_at(t, wc, bound[2]);
    if (nr == 0)
        return;
    int64_t cands[2] = {rl[nr - 1][0], rl[nr - 1][1]};
    for (int k = 0; k < w->ntensors; k++) {
        bool seen = false;
        if (w->tensors[k].is_output || !s_cacheable(w, w->body, k, &seen) ||
            !seen)
            continue;
        int64_t st = kl_tr_cache_read(t, w->tensors[k].name, KL_SCOPE_SHARED);
        int64_t at = kl_tr_sample_compute_location(t, st, cands, 2);
        kl_tr_compute_at(t, st, at);
    }
    for (int j = 0; j < nr; j++)
        kl_tr_unroll(t, rl[j][2]);
}

/* A sampled auto-unroll depth on the block loop. annotate takes a
 * literal, so the sampled value selects one annotate through an if chain
 * and the trace records which one ran. */
static int s_auto_unroll(kl_trace_t *t, int64_t loop, char *err)
{
    static const int64_t steps[] = {0, 16, 64, 512, 1024};
    static const double probs[] = {0.2, 0.2, 0.2, 0.2, 0.2};
    int64_t u = kl_tr_sample_categorical(t, steps, probs, 5);
    for (int i = 1; i < 5; i++) {
        char pred[64];
        snprintf(pred, sizeof pred, "v%lld == %lld", (long long)u,
                 (long long)steps[i]);
        int rc = kl_tr_if(t, pred, err);
        if (rc)
            return rc;
        kl_tr_annotate(t, loop, "unroll_max_step", steps[i]);
        if ((rc = kl_tr_end(t, err)) != 0)
            return rc;
    }
    return KL_OK;
}

/* Sampled row padding of the shared boxes (none, or 4 floats: one
 * 16-byte access, against bank conflicts). */
static int s_smem_pad(kl_trace_t *t, int64_t loop, char *err)
{
    static const int64_t pads[] = {0, 4};
    static const double probs[] = {0.5, 0.5};
    int64_t v = kl_tr_sample_categorical(t, pads, probs, 2);
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld == 4", (long long)v);
    int rc = kl_tr_if(t, pred, err);
    if (rc)
        return rc;
    kl_tr_annotate(t, loop, "smem_pad", 4);
    return kl_tr_end(t, err);
}

/* A sampled tile factor among {1, 2, 4}, keeping only the values whose
 * tile (unit elements each) does not start past extent. */
static int64_t s_mma_factor(kl_trace_t *t, int64_t extent, int64_t unit)
{
    static const int64_t all[] = {1, 2, 4};
    int64_t vals[3];
    double probs[3];
    int n = 0;
    for (int i = 0; i < 3; i++)
        if ((all[i] - 1) * unit < extent)
            vals[n++] = all[i];
    for (int i = 0; i < n; i++)
        probs[i] = 1.0 / n;
    return kl_tr_sample_categorical(t, vals, probs, n);
}

/* The tensor-core tiling (kl_cuda_plan.h): m split (?, WM, MT, 16), n
 * (?, WN, NT, 8), k (?, KS, 16), every factor but the 16/8/16 of the
 * mma.sync shape sampled; the block loop fuses the batch iterators and
 * the outer m and n levels. reject_if drops tiles whose last 16x8 row or
 * column of tiles would lie wholly outside the output. */
static int s_mma_tiling(kl_trace_t *t, const kl_workload_t *w,
                        const kl_cuda_mma_match_t *mm, char *err)
{
    int64_t loops[KL_IR_MAX_ITERS];
    kl_tr_get_loops(t, w->niters, loops);
    int64_t M = w->iters[mm->m].extent, N = w->iters[mm->n].extent,
            K = w->iters[mm->k].extent;
    int64_t wm = s_mma_factor(t, M, 16), mt = s_mma_factor(t, M, 16);
    int64_t wn = s_mma_factor(t, N, 8), nt = s_mma_factor(t, N, 8);
    int64_t ks = s_mma_factor(t, K, 16);
    int64_t lm[4], ln[4], lk[3];
    kl_tr_split(t, loops[mm->m], (int64_t[]){KL_SPLIT_INFER, wm, mt, -16}, 4,
                lm);
    kl_tr_split(t, loops[mm->n], (int64_t[]){KL_SPLIT_INFER, wn, nt, -8}, 4,
                ln);
    kl_tr_split(t, loops[mm->k], (int64_t[]){KL_SPLIT_INFER, ks, -16}, 3, lk);
    int64_t nest[KL_IR_MAX_ITERS + 12], fused[KL_IR_MAX_ITERS + 2];
    int nn = 0;
    for (int i = 0; i < mm->nbatch; i++)
        nest[nn++] = fused[i] = loops[mm->batch[i]];
    fused[mm->nbatch] = lm[0];
    fused[mm->nbatch + 1] = ln[0];
    int64_t rest[] = {lm[0], ln[0], lm[1], ln[1], lk[0], lk[1],
                      lm[2], ln[2], lm[3], ln[3], lk[2]};
    for (int i = 0; i < 11; i++)
        nest[nn++] = rest[i];
    kl_tr_reorder(t, nest, nn);
    int64_t blk = kl_tr_fuse(t, fused, mm->nbatch + 2);
    kl_tr_bind(t, blk, KL_LOOP_BLOCK_X);
    kl_tr_annotate(t, blk, KL_CUDA_MMA_ANNOT, 1);
    /* Fragments through ldmatrix or plain shared reads: sampled. */
    static const int64_t ldsm[] = {0, 1};
    static const double pl[] = {0.5, 0.5};
    int64_t v = kl_tr_sample_categorical(t, ldsm, pl, 2);
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld == 1", (long long)v);
    int rc = kl_tr_if(t, pred, err);
    if (rc)
        return rc;
    kl_tr_annotate(t, blk, KL_CUDA_LDMATRIX_ANNOT, 1);
    if ((rc = kl_tr_end(t, err)))
        return rc;
    rc = s_reject(t, err, "(v%lld * v%lld - 1) * 16 >= %lld", (long long)wm,
                  (long long)mt, (long long)M);
    if (!rc)
        rc = s_reject(t, err, "(v%lld * v%lld - 1) * 8 >= %lld", (long long)wn,
                      (long long)nt, (long long)N);
    return rc;
}

/* The SSSRRSRS tiling (CUDA cores, f32 arithmetic). */
static int s_simt_tiling(kl_trace_t *t, const kl_workload_t *w,
                         const kl_target_t *tg, int ns, int nr, int64_t points,
                         char *err)
{
    int64_t bound[3], sv[KL_IR_MAX_ITERS][S_LEVELS];
    int64_t rl[KL_IR_MAX_ITERS][R_LEVELS];
    s_tiling(t, ns, nr, bound, sv, rl);
    int rc = s_limits(t, tg, ns, points, bound, sv, err);
    if (!rc) {
        s_caching(t, w, nr, bound, rl);
        rc = s_auto_unroll(t, bound[0], err);
        if (!rc && nr > 0)
            rc = s_smem_pad(t, bound[0], err);
    }
    return rc;
}

int kl_space__rules_cuda(const kl_workload_t *w, const kl_target_t *tg,
                         kl_trace_t **out, char *err)
{
    *out = NULL;
    const kl_tensor_t *o = &w->tensors[kl_workload_output(w)];
    if (o->dtype != KL_DT_F32)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "%s: output %s is %s (the CUDA space computes f32 "
                         "outputs; f16/bf16 inputs are read as f32)",
                         tg->name, o->name, kl_dtype_name(o->dtype));
    int ns = 0, nr = 0;
    int64_t points = 1;
    for (int k = 0; k < w->niters; k++) {
        if (w->iters[k].reduce) {
            nr++;
        } else {
            ns++;
            points *= w->iters[k].extent;
        }
    }
    if (ns == 0 || ns * S_LEVELS + nr * R_LEVELS > KL_SCHED_MAX_LOOPS)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "%s: %d spatial and %d reduction loops do not fit "
                         "the GPU tiling",
                         tg->name, ns, nr);
    kl_cuda_mma_match_t mm;
    bool mma = tg->sm >= 80 && kl_cuda_mma_match(w, &mm);
    kl_trace_t *t = kl_trace_new(mma ? "cuda-sssrrsrs-mma" : "cuda-sssrrsrs");
    int rc = KL_OK;
    if (mma) {
        /* Tensor cores or CUDA cores: a sampled choice, tensor cores 3 in
         * 4. */
        static const int64_t kinds[] = {0, 1};
        static const double probs[] = {0.25, 0.75};
        int64_t v = kl_tr_sample_categorical(t, kinds, probs, 2);
        char pred[64];
        snprintf(pred, sizeof pred, "v%lld == 1", (long long)v);
        rc = kl_tr_if(t, pred, err);
        if (!rc)
            rc = s_mma_tiling(t, w, &mm, err);
        if (!rc)
            rc = kl_tr_else(t, err);
    }
    if (!rc)
        rc = s_simt_tiling(t, w, tg, ns, nr, points, err);
    if (!rc && mma)
        rc = kl_tr_end(t, err);
    if (rc) {
        kl_trace_free(&t);
        return rc;
    }
    *out = t;
    return KL_OK;
}
