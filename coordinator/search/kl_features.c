/* kl_features.c - fixed-length loop-nest features of a scheduled nest, the
 * input of the cost model.
 *
 * Layout (KL_FEATURES_N floats):
 *   [0, G)            global: loop counts and extents per kind, parallel
 *                     extent and balance, vector and register tile, unroll
 *                     annotations, stages, guards, arithmetic intensity;
 *   [G, G + 4*B)      per buffer (inputs 0..2, then the output): stride
 *                     classes of the two innermost loops, bytes touched
 *                     below five loop levels, reuse, packing;
 *   [.., + 10*P)      per loop position, innermost first (10 slots):
 *                     extent, kind, reduction, stride class per buffer.
 * Most values are log2(1 + x): the model splits on thresholds, and
 * latencies scale with the logs of extents.
 *
 * GPU nests (CUDA targets) use the same slots: blockIdx loops count as
 * parallel (the "par" level is the end of the blockIdx loops: one block's
 * work), threadIdx loops as parallel too, vthread loops as unrolled,
 * shared-memory read caches as packed ones, and the two target slots hold
 * threads per block and virtual threads instead of lanes and cores. A
 * cost model is trained per target, so the slots never mix meanings.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kl_search.h"

#define NG 36 /* global features */
#define NBUF 4
#define NB 13 /* features per buffer */
#define NPOS 10
#define NP 6 /* features per loop position */
#define NLEV 5

_Static_assert(NG + NBUF * NB + NPOS * NP == KL_FEATURES_N,
               "KL_FEATURES_N must match the layout");

/* The two target slots of the global features, per kind of target: what a
 * CPU kernel runs on (vector lanes, cores) and what a GPU kernel is cut
 * into (threads per block, virtual threads). */
typedef struct {
    int64_t threads, vthreads; /* bound loops' extents (GPU) */
    int cores;
} s_par_t;

static void s_slots_cpu(const kl_target_t *t, const s_par_t *p, float *f)
{
    f[0] = (float)t->vec_lanes;
    f[1] = (float)p->cores;
}

static void s_slots_cuda(const kl_target_t *t, const s_par_t *p, float *f)
{
    (void)t;
    f[0] = (float)p->threads;
    f[1] = (float)p->vthreads;
}

static void (*const s_target_slots[])(const kl_target_t *, const s_par_t *,
                                      float *) = {
    [KL_TARGET_CPU] = s_slots_cpu,
    [KL_TARGET_CUDA] = s_slots_cuda,
};
_Static_assert(sizeof s_target_slots / sizeof s_target_slots[0] ==
                   KL_TARGET__KINDS,
               "target slots per kind of target");

static float s_lg(double x)
{
    return (float)log2(1.0 + (x > 0 ? x : 0));
}

typedef struct {
    const kl_sched_t *s;
    const kl_workload_t *w;
    int n;            /* loops */
    int tensor[NBUF]; /* tensor index per buffer slot, -1 when none */
    const kl_access_t *acc[NBUF];
    int64_t dstride[NBUF][KL_IR_MAX_DIMS]; /* element stride per dim */
} ctx_t;

/* The first load of tensor t in the body (or the epilogue). */
static const kl_access_t *s_find_load(const kl_expr_t *e, int t)
{
    if (!e)
        return NULL;
    if (e->kind == KL_EX_LOAD)
        return e->access.tensor == t ? &e->access : NULL;
    const kl_access_t *a = s_find_load(e->a, t);
    return a ? a : s_find_load(e->b, t);
}

static void s_buffers(ctx_t *c)
{
    const kl_workload_t *w = c->w;
    int nin = kl_workload_ninputs(w);
    for (int b = 0; b < NBUF; b++) {
        c->tensor[b] = -1;
        c->acc[b] = NULL;
    }
    for (int i = 0; i < nin && i < NBUF - 1; i++) {
        const kl_access_t *a = s_find_load(w->body, i);
        for (int e = 0; !a && e < w->nepi; e++)
            if ((w->epi[e].kind == KL_EPI_ADD_TENSOR ||
                 w->epi[e].kind == KL_EPI_MUL_TENSOR) &&
                w->epi[e].access.tensor == i)
                a = &w->epi[e].access;
        c->tensor[i] = a ? i : -1;
        c->acc[i] = a;
    }
    c->tensor[NBUF - 1] = kl_workload_output(w);
    c->acc[NBUF - 1] = &w->out;
    for (int b = 0; b < NBUF; b++) {
        if (c->tensor[b] < 0)
            continue;
        const kl_tensor_t *t = &w->tensors[c->tensor[b]];
        int64_t st = 1;
        for (int d = t->ndim - 1; d >= 0; d--) {
            c->dstride[b][d] = st;
            st *= t->shape[d];
        }
    }
}

/* Element stride of one step of the innermost part of loop pos in b. */
static int64_t s_loop_stride(const ctx_t *c, int b, int pos)
{
    const kl_loop_t *l = kl_sched_loop(c->s, pos);
    const kl_loop_part_t *p = &l->parts[l->nparts - 1];
    const kl_tensor_t *t = &c->w->tensors[c->tensor[b]];
    int64_t st = 0;
    for (int d = 0; d < t->ndim; d++) {
        const kl_affine_t *a = &c->acc[b]->idx[d];
        st += a->coef[p->iter] * p->stride * c->dstride[b][d] /
              (a->div > 0 ? a->div : 1);
    }
    return st < 0 ? -st : st;
}

static float s_stride_class(int64_t st)
{
    return st == 0 ? 0.0f : st == 1 ? 1.0f : 2.0f;
}

/* Elements of b touched by the loops at positions >= from. */
static double s_footprint(const ctx_t *c, int b, int from)
{
    const kl_tensor_t *t = &c->w->tensors[c->tensor[b]];
    double el = 1;
    for (int d = 0; d < t->ndim; d++) {
        const kl_affine_t *a = &c->acc[b]->idx[d];
        double span = 0;
        for (int q = from; q < c->n; q++) {
            const kl_loop_t *l = kl_sched_loop(c->s, q);
            for (int k = 0; k < l->nparts; k++) {
                const kl_loop_part_t *p = &l->parts[k];
                int64_t cf = a->coef[p->iter];
                span += (double)(cf < 0 ? -cf : cf) * (double)p->stride *
                        (double)(p->extent - 1);
            }
        }
        span = span / (double)(a->div > 0 ? a->div : 1) + 1;
        if (span > (double)t->shape[d])
            span = (double)t->shape[d];
        el *= span;
    }
    return el;
}

/* Iterations of the loops at positions >= from. */
static double s_iters(const ctx_t *c, int from)
{
    double it = 1;
    for (int q = from; q < c->n; q++)
        it *= (double)kl_sched_loop(c->s, q)->extent;
    return it;
}

static bool s_block(const kl_loop_t *l)
{
    return l->kind >= KL_LOOP_BLOCK_X && l->kind <= KL_LOOP_BLOCK_Z;
}

static bool s_thread(const kl_loop_t *l)
{
    return l->kind >= KL_LOOP_THREAD_X && l->kind <= KL_LOOP_THREAD_Z;
}

/* A cache stage that stages data like a packed one (GPU: shared). */
static bool s_staged(const kl_stage_t *st)
{
    return st->scope == KL_SCOPE_PACKED || st->scope == KL_SCOPE_SHARED;
}

typedef struct {
    int par, reg, red, inner; /* level positions */
} levels_t;

static levels_t s_levels(const ctx_t *c)
{
    levels_t L = {.par = 0, .reg = c->n, .red = 0, .inner = c->n - 1};
    for (int q = 0; q < c->n; q++) {
        const kl_loop_t *l = kl_sched_loop(c->s, q);
        if (l->kind == KL_LOOP_PARALLEL || s_block(l))
            L.par = q + 1;
        if (l->reduce && l->kind == KL_LOOP_SERIAL)
            L.red = q;
    }
    while (L.reg > 0) {
        kl_loop_kind k = kl_sched_loop(c->s, L.reg - 1)->kind;
        if (k != KL_LOOP_UNROLL && k != KL_LOOP_VECTORIZE)
            break;
        L.reg--;
    }
    if (L.inner < 0)
        L.inner = 0;
    return L;
}

/* Cache stages: the write cache (depth, accumulators) and the packed read
 * caches (count, shallowest depth, bytes). */
static void s_stages(const ctx_t *c, float *f)
{
    int packed = 0;
    double packed_el = 0, packed_depth = 1;
    for (int i = 0; i < kl_sched_nstages(c->s); i++) {
        const kl_stage_t *st = kl_sched_stage(c->s, i);
        int pos = kl_sched_stage_attach_pos(c->s, st);
        double depth = (double)(pos + 1) / (c->n > 0 ? c->n : 1);
        if (st->kind == KL_STAGE_WRITE) {
            f[25] = 1;
            f[26] = (float)depth;
            double acc = 1;
            for (int q = pos + 1; q < c->n; q++)
                if (!kl_sched_loop(c->s, q)->reduce)
                    acc *= (double)kl_sched_loop(c->s, q)->extent;
            f[27] = s_lg(acc);
        } else if (s_staged(st)) {
            packed++;
            packed_depth = depth < packed_depth ? depth : packed_depth;
            for (int b = 0; b < NBUF; b++)
                if (c->tensor[b] == st->tensor)
                    packed_el += s_footprint(c, b, pos + 1);
        }
    }
    f[28] = (float)packed;
    f[29] = (float)packed_depth;
    f[30] = s_lg(packed_el * 4);
}

static void s_global(const ctx_t *c, const kl_target_t *t, const levels_t *L,
                     float *f)
{
    const kl_workload_t *w = c->w;
    double iters = s_iters(c, 0), ideal = 1;
    for (int i = 0; i < w->niters; i++)
        ideal *= (double)w->iters[i].extent;
    f[0] = (float)c->n;
    f[1] = s_lg(iters);
    f[2] = s_lg(w->flop);
    f[3] = (float)(iters / (ideal > 0 ? ideal : 1));
    f[4] = (float)kl_sched_nguards(c->s);
    /* Per kind: serial spatial, serial reduction, parallel, vectorize,
     * unroll: count and log2 of the product of extents. */
    double prod[5] = {1, 1, 1, 1, 1};
    int cnt[5] = {0};
    int64_t unroll_step = 0, annotated = 0;
    int par_pos = -1, first_red = -1;
    int64_t par_ext = 1, vec_ext = 1, threads = 1, vthreads = 1;
    for (int q = 0; q < c->n; q++) {
        const kl_loop_t *l = kl_sched_loop(c->s, q);
        bool par = l->kind == KL_LOOP_PARALLEL || s_block(l) || s_thread(l);
        bool unr = l->kind == KL_LOOP_UNROLL || l->kind == KL_LOOP_VTHREAD;
        int k = par                            ? 2
                : l->kind == KL_LOOP_VECTORIZE ? 3
                : unr                          ? 4
                : l->reduce                    ? 1
                                               : 0;
        cnt[k]++;
        prod[k] *= (double)l->extent;
        if (l->kind == KL_LOOP_PARALLEL && par_pos < 0) {
            par_pos = q;
            par_ext = l->extent;
        }
        if (s_block(l)) { /* GPU: the grid */
            par_pos = par_pos < 0 ? q : par_pos;
            par_ext *= l->extent;
        }
        if (s_thread(l))
            threads *= l->extent;
        if (l->kind == KL_LOOP_VTHREAD)
            vthreads *= l->extent;
        if (l->kind == KL_LOOP_VECTORIZE)
            vec_ext = l->extent;
        if (l->reduce && first_red < 0)
            first_red = q;
        int64_t u = kl_loop_annot(l, "unroll_max_step");
        unroll_step = u > unroll_step ? u : unroll_step;
        annotated += l->nannots; /* unroll steps, prefetches */
    }
    for (int k = 0; k < 5; k++) {
        f[5 + 2 * k] = (float)cnt[k];
        f[6 + 2 * k] = s_lg(prod[k]);
    }
    int cores = t->cores > 0 ? t->cores : 1;
    double chunks = ceil((double)par_ext / cores) * cores;
    f[15] = s_lg((double)par_ext);
    f[16] = (float)((double)par_ext / chunks);
    f[17] = (float)par_pos;
    f[18] = s_lg((double)vec_ext);
    f[19] = (float)((double)vec_ext / (t->vec_lanes > 0 ? t->vec_lanes : 1));
    f[20] = s_lg(prod[3] * prod[4]);
    f[21] = s_lg((double)unroll_step);
    f[22] = (float)annotated;
    f[23] = (float)first_red;
    f[24] = s_lg(s_iters(c, L->red));
    s_stages(c, f);
    /* Arithmetic intensity: FLOPs per byte touched below three levels. */
    int lev[3] = {L->par, L->red, L->reg};
    for (int k = 0; k < 3; k++) {
        double bytes = 0;
        for (int b = 0; b < NBUF; b++)
            if (c->tensor[b] >= 0)
                bytes += 4 * s_footprint(c, b, lev[k]);
        double fl = w->flop * s_iters(c, lev[k]) / (iters > 0 ? iters : 1);
        f[31 + k] = s_lg(fl / (bytes > 0 ? bytes : 1));
    }
    s_par_t par = {threads, vthreads, cores};
    s_target_slots[t->kind](t, &par, &f[34]);
}

static void s_buffer(const ctx_t *c, const levels_t *L, int b, float *f)
{
    if (c->tensor[b] < 0 || c->n == 0)
        return;
    f[0] = 1;
    int in = c->n - 1, in2 = c->n - 2;
    int64_t st = s_loop_stride(c, b, in);
    f[1] = s_stride_class(st);
    f[2] = s_lg((double)st);
    if (in2 >= 0) {
        st = s_loop_stride(c, b, in2);
        f[3] = s_stride_class(st);
        f[4] = s_lg((double)st);
    }
    int lev[NLEV] = {L->inner, L->reg, L->red, L->par, 0};
    for (int k = 0; k < NLEV; k++)
        f[5 + k] = s_lg(4 * s_footprint(c, b, lev[k]));
    double fp = s_footprint(c, b, L->par);
    f[10] = s_lg(s_iters(c, L->par) / (fp > 0 ? fp : 1));
    double fr = s_footprint(c, b, L->red);
    f[11] = s_lg(s_iters(c, L->red) / (fr > 0 ? fr : 1));
    for (int i = 0; i < kl_sched_nstages(c->s); i++) {
        const kl_stage_t *sg = kl_sched_stage(c->s, i);
        if (sg->tensor == c->tensor[b] && s_staged(sg))
            f[12] = 1;
    }
}

static void s_position(const ctx_t *c, int pos, float *f)
{
    const kl_loop_t *l = kl_sched_loop(c->s, pos);
    f[0] = s_lg((double)l->extent);
    f[1] = (float)l->kind;
    f[2] = l->reduce ? 1.0f : 0.0f;
    int slot = 3;
    int bufs[3] = {0, 1, NBUF - 1};
    for (int k = 0; k < 3; k++, slot++)
        f[slot] = c->tensor[bufs[k]] >= 0
                      ? s_stride_class(s_loop_stride(c, bufs[k], pos))
                      : -1.0f;
}

void kl_features_extract(const kl_sched_t *s, const kl_target_t *t, float *out)
{
    memset(out, 0, KL_FEATURES_N * sizeof *out);
    ctx_t c = {.s = s, .w = kl_sched_workload(s), .n = kl_sched_nloops(s)};
    s_buffers(&c);
    levels_t L = s_levels(&c);
    s_global(&c, t, &L, out);
    for (int b = 0; b < NBUF; b++)
        s_buffer(&c, &L, b, out + NG + b * NB);
    float *pf = out + NG + NBUF * NB;
    for (int k = 0; k < NPOS; k++) {
        int pos = c.n - 1 - k;
        if (pos >= 0)
            s_position(&c, pos, pf + k * NP);
        else
            for (int j = 0; j < NP; j++)
                pf[k * NP + j] = -1.0f;
    }
}

const char *kl_features_name(int i)
{
    static const char *g[NG] = {
        "nloops",         "iters",        "flop",           "guard_waste",
        "nguards",        "serial.n",     "serial.extent",  "reduce.n",
        "reduce.extent",  "par.n",        "par.extent_all", "vec.n",
        "vec.extent_all", "unroll.n",     "unroll.extent",  "par.extent",
        "par.balance",    "par.pos",      "vec.extent",     "vec.per_lanes",
        "regtile",        "unroll_step",  "annotated",      "first_reduce",
        "iters_in_red",   "wcache",       "wcache.depth",   "wcache.acc",
        "packed.n",       "packed.depth", "packed.bytes",   "ai.par",
        "ai.red",         "ai.reg",       "target.lanes",   "target.cores"};
    static const char *b[NB] = {
        "exists",    "s0.class",  "s0.stride", "s1.class", "s1.stride",
        "fp.inner",  "fp.reg",    "fp.red",    "fp.par",   "fp.all",
        "reuse.par", "reuse.red", "packed"};
    static const char *p[NP] = {"extent",    "kind",      "reduce",
                                "in0.class", "in1.class", "out.class"};
    static char buf[KL_FEATURES_N][32];
    if (i < 0 || i >= KL_FEATURES_N)
        return "?";
    if (i < NG)
        return g[i];
    if (!buf[i][0]) {
        if (i < NG + NBUF * NB) {
            int k = (i - NG) / NB, j = (i - NG) % NB;
            snprintf(buf[i], sizeof buf[i], "%s.%s",
                     k == NBUF - 1 ? "out"
                     : k == 0      ? "in0"
                     : k == 1      ? "in1"
                                   : "in2",
                     b[j]);
        } else {
            int r = i - NG - NBUF * NB;
            snprintf(buf[i], sizeof buf[i], "loop%d.%s", r / NP, p[r % NP]);
        }
    }
    return buf[i];
}
