/* rules_cpu.c - the CPU design space (docs/benchmarking.md): multi-level tiling
 * SSRSRS, a register-tile write cache, packing of reused operands, parallel
 * outer tiles, a vectorized innermost spatial loop, unrolled register
 * tiles, auto-unroll annotations.
 *
 * Tiling. Every spatial iterator s is split into s0 s1 s2 s3 and every
 * reduction r into r0 r1; the nest becomes
 *     S0 S1 R0 S2 R1 S3
 * S0 is fused and parallel, split between the threads by its first or
 * (sampled) its last iterator; S3 is the register tile: the vector
 * iterator (the one indexing the output's last dimension) is innermost and
 * vectorized, with a sampled multiple of the vector width; the "row"
 * iterator (the largest other spatial one) gets a sampled row count,
 * which may not divide its extent (an imperfect, guarded split), so that
 * shapes like 12 x 32 are in the space for 1024; the others get small
 * perfect tiles. The inner reduction tile R1 is a cache block (32 to 512)
 * where the extent has one, most likely the whole extent when it is 16
 * or less (a window's taps: outside the accumulators they only reload
 * them), any perfect tile otherwise. reject_if keeps rows x vectors
 * within the register file.
 * A sampled branch orders the S2 loops (row-major or column-major over the
 * register tiles) and attaches the local write cache (accumulators) at the
 * last S2 loop. Each reused input (one that some spatial iterator does not
 * index) may be packed at a sampled location (the last R0 or S1 loop),
 * or whole before the parallel loop when it is read through a window or is
 * constant (then packed once for all calls, by ENTRY_prepare).
 *
 * Channel vectors. When the output's last dimension does not fill whole
 * vectors (a 14-wide NCHW conv2d), or is read with a stride (a stride-2
 * conv2d's columns, whose vectors would gather every other input), and
 * another spatial iterator does fill them and is read directly, not
 * through a window (the output channels K, not the rows of a 112-row
 * image), a sampled branch builds the same nest with that
 * iterator as the vector one instead: its packed panels put K innermost
 * (contiguous weight vectors), the other operand is broadcast, and the
 * register tile is rows of output pixels x channel vectors, the GEMM
 * micro-kernel of a channel-blocked (NCHWc) convolution without changing
 * the tensors' layouts. Its row counts also include the extent's
 * divisors from 5 to 16, and rows of 5 to 7 (a 7x7 output: ResNet's last
 * stage) get a row tile too, up to the whole row (it was 1 row there, 7
 * being prime, which left random 7x7 channel-vector schedules at half the
 * speed). Packing is then likely, as the weights are read
 * with a stride otherwise. The input channels may be blocked as well (a
 * sampled block of 1, 4, 8 or 16 channels innermost of the reduction
 * loops): the weights packed [.., c-block, k-vector] and the input's
 * window pack [c / block][h][w][c % block] walk it contiguously.
 *
 * A float NHWC convolution (layout=NHWC) vectorizes its output
 * channels K, the output's last dimension, which its input does not
 * index: its nest is the same channel product (s_nhwc_product), with
 * the same row tiles (a 7x7 image's whole rows) and whole reductions.
 *
 * Winograd. A 3x3 stride-1 convolution with constant weights (kl_wino.h)
 * first samples its algorithm: the direct nest above (p 0.4), or
 * winograd(m=2) (p 0.3) or winograd(m=4) (p 0.3) and then the same rules
 * over the derived product M[e,p,k] += V[e,p,c] * U[e,c,k] (16 small
 * GEMMs, 2.25x fewer multiply-adds; or 36, 4x fewer, over a quarter of
 * the tiles but with U 2.25x larger), whose transformed weights U are
 * constant and so packed once. All three branches are in every program,
 * so mutating the first decision moves a trace from one algorithm to
 * another.
 *
 * Prefetch. The channel products of convolutions (channel vectors, the
 * Winograd product) use each packed panel for a few register tiles only;
 * their programs also sample a software prefetch distance for the packed
 * buffers (a "prefetch" annotation on the innermost reduction loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_space_priv.h"
#include "kl_wino.h"

#define MAXL KL_SCHED_MAX_LOOPS

typedef struct {
    const kl_workload_t *w;
    const kl_target_t *t;
    kl_trace_t *tr;
    int nsp, nrd;
    int sp[KL_IR_MAX_ITERS], rd[KL_IR_MAX_ITERS]; /* iterator indices */
    int vec, row;                                 /* positions in sp[] or -1 */
    bool chan;                                    /* vec is not the last dim */
    /* A convolution's channel product (channel vectors, or the product of
     * a Winograd rewrite): row tiles may be any divisor of the extent and
     * the reduction may stay whole in one tile. */
    bool fit;
    int64_t loop[KL_IR_MAX_ITERS]; /* naive loop RV per iter */
    int64_t s[KL_IR_MAX_ITERS][4], r[KL_IR_MAX_ITERS][2]; /* tiled loops */
    int64_t s3v[KL_IR_MAX_ITERS]; /* RV (or -literal) of the s3 factor */
    int64_t cb; /* channel vectors: the channel-block loop, or -1 */
    char err[KL_ERRMSG_LEN];
} rule_t;

static int s_vec_iter(const kl_workload_t *w)
{
    const kl_tensor_t *o = &w->tensors[kl_workload_output(w)];
    const kl_affine_t *a = &w->out.idx[o->ndim - 1];
    for (int i = 0; i < w->niters; i++)
        if (a->coef[i] == 1 && !w->iters[i].reduce)
            return i;
    return -1;
}

/* Channel vectors: the reduction's inner tile of iterator k (conv2d's
 * input channels) split once more, its last part innermost of all the
 * reduction loops (C1 R1 S1 -> C1a R1 S1 C1b): the weights' vectors and
 * the input's broadcasts then walk a block of channels contiguously, the
 * blocked (NCHWc) order, once the packs lay them out that way. Block 1
 * keeps the plain order. */
static void s_channel_block(rule_t *r, int k)
{
    int64_t vals[4] = {1, 4, 8, 16};
    double ps[4] = {0.25, 0.15, 0.25, 0.35};
    int64_t c = kl_tr_sample_categorical(r->tr, vals, ps, 4);
    int64_t f[2] = {KL_SPLIT_INFER, c}, o[2];
    kl_tr_split(r->tr, r->r[k][1], f, 2, o);
    r->r[k][1] = o[0];
    r->cb = o[1];
}

/* Spatial iterator k: a register tile of c (o[1]), the rest in three
 * perfect tiles S0 S1 S2 (whole: sample_perfect_tile's percent for all
 * of them in S2). */
static void s_split4(rule_t *r, int k, int64_t c, int64_t whole)
{
    int64_t f[2] = {KL_SPLIT_INFER, c}, o[2], v[3];
    kl_tr_split(r->tr, r->loop[r->sp[k]], f, 2, o);
    kl_tr_sample_perfect_tile_whole(r->tr, o[0], 3, 0, whole, v);
    kl_tr_split(r->tr, o[0], v, 3, r->s[k]);
    r->s[k][3] = o[1];
    r->s3v[k] = c;
}

/* Tiles every iterator; fills r->s, r->r, r->s3v. */
static void s_tile(rule_t *r)
{
    kl_trace_t *tr = r->tr;
    int L = r->t->vec_lanes;
    for (int k = 0; k < r->nsp; k++) {
        int it = r->sp[k];
        int64_t ext = r->w->iters[it].extent, v[4];
        /* The widest vector (of at least 4 lanes) whose width divides the
         * extent, e.g. 8 lanes for 56 on a 16-lane target. */
        int U = L;
        while (U > 4 && ext % U)
            U /= 2;
        if (k == r->vec && ext % U == 0 && ext >= U) {
            /* Vector width multiples that divide the extent. */
            int64_t vals[4];
            double probs[4] = {0.3, 0.45, 0.1, 0.15};
            int n = 0;
            for (int m = 1; m <= 4; m++)
                if (ext % (m * U) == 0)
                    vals[n++] = m * U;
            double ps[4];
            for (int i = 0; i < n; i++)
                ps[i] = probs[vals[i] / U - 1];
            s_split4(r, k, kl_tr_sample_categorical(tr, vals, ps, n), 0);
        } else if (k == r->row && (ext >= 8 || (r->fit && ext >= 5))) {
            int64_t vals[16] = {1, 2, 3, 4, 6, 8, 12, 16};
            double ps[16] = {0.02, 0.05, 0.05, 0.15, 0.18, 0.2, 0.25, 0.1};
            /* A channel product over rows of 5 to 7 (a 7x7 layer):
             * the tiles up to the extent, and the extent itself below. */
            int n = ext >= 8 ? 8 : 5;
            /* Channel vectors: also the divisors of the extent (7 and 14
             * for 14), which need no guard, at least as likely as the
             * others: the whole extent (a Winograd product's 16 tiles)
             * loads each panel vector once for all its rows. */
            for (int64_t d = 5; r->fit && d <= 16; d++) {
                int have = -1;
                for (int i = 0; i < n; i++)
                    have = vals[i] == d ? i : have;
                if (ext % d)
                    continue;
                if (have < 0) {
                    vals[n] = d;
                    ps[n++] = 0.3;
                } else if (ps[have] < 0.3) {
                    ps[have] = 0.3;
                }
            }
            /* A weight of 1 MiB or more read across the rows (a matmul's
             * B): p 0.3 for all row tiles in S2, its panels used by all. */
            s_split4(r, k, kl_tr_sample_categorical(tr, vals, ps, n),
                     kl_workload_const_across(r->w, it) >= (1 << 20) ? 30 : 0);
        } else {
            int64_t maxin = k == r->vec ? 4 * L : 4;
            kl_tr_sample_perfect_tile(tr, r->loop[it], 4, maxin, v);
            kl_tr_split(tr, r->loop[it], v, 4, r->s[k]);
            r->s3v[k] = v[3];
        }
    }
    for (int k = 0; k < r->nrd; k++) {
        int it = r->rd[k];
        int64_t ext = r->w->iters[it].extent, v[2];
        /* Inner reduction tiles that keep packed panels in L1/L2 (KC
         * 64..512), when the extent has such divisors. */
        static const int64_t kc[5] = {32, 64, 128, 256, 512};
        static const double kp[5] = {0.05, 0.15, 0.3, 0.35, 0.15};
        int64_t vals[6];
        double ps[6];
        int n = 0;
        for (int i = 0; i < 5; i++)
            if (ext % kc[i] == 0 && ext > kc[i]) {
                vals[n] = kc[i];
                ps[n++] = kp[i];
            }
        /* A channel product may keep its whole reduction, up to 1024, in
         * the tile (a conv2d's 256 channels, or MobileNetV2's 1x1
         * projections over 144, 384, 576 or 960): its accumulators,
         * stored lane by lane at the output's stride, are then never
         * loaded back. Split in 32s, 576 -> 96 at 14x14 reloaded and
         * stored them again every part and ran at 68 GFLOP/s. A whole
         * extent that is a cache block keeps that block's probability. */
        if (r->fit && ext > 16 && ext <= 1024 && ext % 16 == 0) {
            double p = 0.35;
            for (int i = 0; i < 5; i++)
                p = kc[i] == ext ? kp[i] : p;
            vals[n] = ext;
            ps[n++] = p;
        }
        if (n >= 2 || (n == 1 && vals[0] == ext)) {
            int64_t c = kl_tr_sample_categorical(tr, vals, ps, n);
            int64_t f[2] = {KL_SPLIT_INFER, c};
            kl_tr_split(tr, r->loop[it], f, 2, r->r[k]);
            if (r->chan && r->cb < 0 && ext % 16 == 0)
                s_channel_block(r, k);
        } else if (ext > 1 && ext <= 16) {
            /* A reduction this small (a window's 3 or 7 taps, an image's
             * 3 channels) blocks no cache: split outside the
             * accumulators, it only stores and reloads them. The whole
             * extent inside is the likely inner tile (the tuned ResNet-18
             * convolutions keep it whole in 14 of their 15 splits). */
            int64_t vals[16];
            double ps[16];
            int nd = 0;
            for (int64_t d = 1; d < ext; d++)
                if (ext % d == 0)
                    vals[nd++] = d;
            for (int i = 0; i < nd; i++)
                ps[i] = 0.4 / nd;
            vals[nd] = ext;
            ps[nd] = 0.6;
            int64_t c = kl_tr_sample_categorical(tr, vals, ps, nd + 1);
            int64_t f[2] = {KL_SPLIT_INFER, c};
            kl_tr_split(tr, r->loop[it], f, 2, r->r[k]);
        } else {
            kl_tr_sample_perfect_tile(tr, r->loop[it], 2, 512, v);
            kl_tr_split(tr, r->loop[it], v, 2, r->r[k]);
        }
    }
}

/* The SSRSRS order; S2 loops reversed when flip. Returns the count. */
static int s_order(const rule_t *r, bool flip, int64_t *ord)
{
    int n = 0;
    for (int k = 0; k < r->nsp; k++)
        ord[n++] = r->s[k][0];
    for (int k = 0; k < r->nsp; k++)
        ord[n++] = r->s[k][1];
    for (int k = 0; k < r->nrd; k++)
        ord[n++] = r->r[k][0];
    for (int k = 0; k < r->nsp; k++)
        ord[n++] = r->s[flip ? r->nsp - 1 - k : k][2];
    for (int k = 0; k < r->nrd; k++)
        ord[n++] = r->r[k][1];
    if (r->cb >= 0)
        ord[n++] = r->cb;
    /* S3: the vector iterator last. */
    for (int k = 0; k < r->nsp; k++)
        if (k != r->vec)
            ord[n++] = r->s[k][3];
    if (r->vec >= 0)
        ord[n++] = r->s[r->vec][3];
    return n;
}

/* Register pressure: rows x vectors <= usable registers. */
static int s_reject_pressure(rule_t *r)
{
    char pred[KL_PRED_MAX];
    int n = 0, regs = r->t->vec_regs - 4;
    n += snprintf(pred + n, sizeof pred - (size_t)n, "1");
    for (int k = 0; k < r->nsp; k++) {
        char rv[40];
        int64_t x = r->s3v[k];
        snprintf(rv, sizeof rv, x < 0 ? "%lld" : "v%lld",
                 (long long)(x < 0 ? -x : x));
        if (k == r->vec)
            n += snprintf(pred + n, sizeof pred - (size_t)n,
                          " * ((%s + %d) / %d)", rv, r->t->vec_lanes - 1,
                          r->t->vec_lanes);
        else
            n += snprintf(pred + n, sizeof pred - (size_t)n, " * %s", rv);
    }
    char small[KL_PRED_MAX + 8];
    snprintf(small, sizeof small, "%s < 8", pred);
    snprintf(pred + n, sizeof pred - (size_t)n, " > %d", regs);
    int rc = kl_tr_reject_if(r->tr, pred, r->err);
    /* A register tile of fewer than 8 vectors cannot hide the latency of
     * the multiply-adds (4 cycles, 2 per cycle); refuse it when the row
     * iterator alone could give 8. */
    if (!rc && r->row >= 0 && r->w->iters[r->sp[r->row]].extent >= 8)
        rc = kl_tr_reject_if(r->tr, small, r->err);
    return rc;
}

static int s_branch(rule_t *r, bool flip, int64_t acc)
{
    int64_t ord[MAXL];
    int n = s_order(r, flip, ord);
    kl_tr_reorder(r->tr, ord, n);
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld == 1", (long long)acc);
    int rc = kl_tr_if(r->tr, pred, r->err);
    if (rc)
        return rc;
    int64_t b = kl_tr_cache_write(r->tr, KL_SCOPE_LOCAL);
    int last = flip ? 0 : r->nsp - 1;
    kl_tr_reverse_compute_at(r->tr, b, r->s[last][2]);
    return kl_tr_end(r->tr, r->err);
}

/* Inputs that some spatial iterator does not index: reused, worth
 * packing. */
static int s_reused(const kl_workload_t *w, int *out)
{
    int n = 0;
    for (int t = 0; t < kl_workload_ninputs(w) && n < 2; t++) {
        kl_sched_t *s = NULL;
        if (kl_sched_create(&s, w, NULL))
            return n;
        bool in_body = false, reused = false;
        for (int p = 0; p < kl_sched_nloops(s); p++) {
            bool tch = kl_sched_loop_touches(s, p, t);
            in_body = in_body || tch;
            if (!kl_sched_loop(s, p)->reduce && !tch)
                reused = true;
        }
        kl_sched_destroy(&s);
        if (in_body && reused)
            out[n++] = t;
    }
    return n;
}

static int s_pack_at(rule_t *r, int t, int64_t v);

/* Whether some read of tensor t in e satisfies pred. */
static bool s_some_read(const kl_workload_t *w, const kl_expr_t *e, int t,
                        bool (*pred)(const kl_workload_t *,
                                     const kl_access_t *))
{
    if (!e)
        return false;
    if (e->kind == KL_EX_LOAD && e->access.tensor == t && pred(w, &e->access))
        return true;
    return s_some_read(w, e->a, t, pred) || s_some_read(w, e->b, t, pred);
}

static bool s_nontrivial(const kl_workload_t *w, const kl_access_t *a)
{
    return !kl_access_window_trivial(w, a);
}

/* Whether e reads tensor t through a window (kl_access_is_window). */
static bool s_window(const kl_workload_t *w, const kl_expr_t *e, int t)
{
    return s_some_read(w, e, t, kl_access_is_window);
}

/* A sampled flag (p0: off, p1: on): on, annotation key = 1 on loop. */
static int s_annot_flag(rule_t *r, int64_t loop, const char *key, double p0,
                        double p1)
{
    int64_t vals[2] = {0, 1};
    double ps[2] = {p0, p1};
    int64_t v = kl_tr_sample_categorical(r->tr, vals, ps, 2);
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld == 1", (long long)v);
    int rc = kl_tr_if(r->tr, pred, r->err);
    if (rc)
        return rc;
    kl_tr_annotate(r->tr, loop, key, 1);
    return kl_tr_end(r->tr, r->err);
}

/* A packed tensor read only through a trivial window (a 1x1
 * convolution's X[n, c, y + r, x + s], kl_access_window_trivial): its
 * pack in the loop layout (panels in the register tile's order) or in
 * the window layout (the tensor's own order), a sampled annotation
 * KL_ANNOT_LOOP_LAYOUT on the parallel loop that the C generator follows
 * (codegen_pack_layout.c). A 1x1 convolution's channel product over a
 * 7x7 image reads 7 rows at a stride of 7 from the window layout, 3
 * lines for 28 bytes, and streams its whole input from L2 for every
 * register tile; the loop layout puts them side by side (MobileNetV2's
 * 960 -> 320 at 7x7: its best of 40 samples 322 -> 197 us on an AVX2
 * EPYC). Traces without it keep the window layout they were measured
 * with. */
static int s_pack_layout(rule_t *r, int t, int64_t par)
{
    if (!s_window(r->w, r->w->body, t) ||
        s_some_read(r->w, r->w->body, t, s_nontrivial))
        return KL_OK;
    char key[32];
    snprintf(key, sizeof key, KL_ANNOT_LOOP_LAYOUT, t);
    return s_annot_flag(r, par, key, 0.4, 0.6);
}

static int s_pack(rule_t *r, int64_t par)
{
    int reused[2];
    int n = s_reused(r->w, reused);
    for (int i = 0; i < n; i++) {
        /* 1: packed per thread at a sampled loop; 2 (window reads and
         * constant tensors only): packed once, before the parallel loop,
         * whole. A window pack is the size of the tensor (plus its halo),
         * so packing it once is cheap; a panel layout of a whole operand
         * is not, unless the operand is constant: then the generator packs
         * it in ENTRY_prepare, once for all calls (kl_abi.h), and the
         * kernel reads its panels without packing anything. */
        int64_t vals[3] = {0, 1, 2};
        double ps[3] = {0.3, 0.7, 0.4};
        if (r->chan)
            ps[0] = 0.1, ps[1] = 0.9;
        bool win = s_window(r->w, r->w->body, reused[i]);
        bool cst = r->w->tensors[reused[i]].is_const;
        if (cst)
            ps[1] = 0.3, ps[2] = 0.6;
        else if (win)
            ps[1] -= ps[2];
        bool whole = win || cst;
        int64_t v = kl_tr_sample_categorical(r->tr, vals, ps, whole ? 3 : 2);
        int rc = KL_OK;
        if (whole) {
            char pred[64];
            snprintf(pred, sizeof pred, "v%lld == 2", (long long)v);
            if ((rc = kl_tr_if(r->tr, pred, r->err)))
                return rc;
            kl_tr_cache_read(r->tr, r->w->tensors[reused[i]].name,
                             KL_SCOPE_PACKED);
            rc = kl_tr_end(r->tr, r->err);
        }
        if (rc || (rc = s_pack_at(r, reused[i], v)) ||
            (rc = s_pack_layout(r, reused[i], par)))
            return rc;
    }
    return KL_OK;
}

/* if (v == 1) { cache_read; compute_at a sampled loop } */
static int s_pack_at(rule_t *r, int t, int64_t v)
{
    char pred[64];
    snprintf(pred, sizeof pred, "v%lld == 1", (long long)v);
    int rc = kl_tr_if(r->tr, pred, r->err);
    if (rc)
        return rc;
    int64_t b = kl_tr_cache_read(r->tr, r->w->tensors[t].name, KL_SCOPE_PACKED);
    int64_t cands[2];
    int nc = 0;
    if (r->nrd > 0)
        cands[nc++] = r->r[r->nrd - 1][0];
    cands[nc++] = r->s[r->nsp - 1][1];
    int64_t at = kl_tr_sample_compute_location(r->tr, b, cands, nc);
    kl_tr_compute_at(r->tr, b, at);
    return kl_tr_end(r->tr, r->err);
}

/* A sampled annotation of loop: one of 4 values (the first: none); the
 * decision picks the value, the annotation carries it. */
static int s_annot_choice(rule_t *r, int64_t loop, const char *key,
                          const int64_t *vals, const double *probs)
{
    int64_t v = kl_tr_sample_categorical(r->tr, vals, probs, 4);
    for (int i = 1; i < 4; i++) {
        char pred[64];
        snprintf(pred, sizeof pred, "v%lld == %lld", (long long)v,
                 (long long)vals[i]);
        int rc = kl_tr_if(r->tr, pred, r->err);
        if (rc)
            return rc;
        kl_tr_annotate(r->tr, loop, key, vals[i]);
        if ((rc = kl_tr_end(r->tr, r->err)))
            return rc;
    }
    return KL_OK;
}

static int s_build(rule_t *r)
{
    kl_trace_t *tr = r->tr;
    const kl_workload_t *w = r->w;
    s_tile(r);
    int rc = s_reject_pressure(r);
    if (rc)
        return rc;
    /* Parallel: fused outer tiles, at least one chunk per core when the
     * workload has that much spatial work. */
    int64_t s0[KL_IR_MAX_ITERS], total = 1;
    for (int i = 0; i < r->nsp; i++) {
        s0[i] = r->s[i][0];
        total *= w->iters[r->sp[i]].extent;
    }
    int64_t vals[2] = {0, 1};
    double pacc[2] = {0.1, 0.9}, pord[2] = {0.5, 0.5};
    int64_t acc = kl_tr_sample_categorical(tr, vals, pacc, 2);
    int64_t ord = kl_tr_sample_categorical(tr, vals, pord, 2);
    char pred[96];
    snprintf(pred, sizeof pred, "v%lld == 0 || %d < 2", (long long)ord, r->nsp);
    if ((rc = kl_tr_if(tr, pred, r->err)) || (rc = s_branch(r, false, acc)) ||
        (rc = kl_tr_else(tr, r->err)) || (rc = s_branch(r, true, acc)) ||
        (rc = kl_tr_end(tr, r->err)))
        return rc;
    int64_t par = r->nsp > 1 ? kl_tr_fuse(tr, s0, r->nsp) : s0[0];
    int64_t minpar = total < r->t->cores ? total : r->t->cores;
    /* Static scheduling: chunks that do not spread evenly over the cores
     * leave one idle, unless there are many. A workload of less than one
     * 16-lane vector a core (a squeeze-excite 1x1 conv on 1x1 pixels,
     * K=8) has nothing to spread: any chunk count, one included, else its
     * vector tile alone leaves no sample. */
    if (total < 16 * (int64_t)r->t->cores)
        snprintf(pred, sizeof pred, "l%lld > 4096", (long long)par);
    else
        snprintf(pred, sizeof pred,
                 "l%lld < %lld || l%lld > 4096 || (l%lld %% %d != 0 && "
                 "l%lld < %d)",
                 (long long)par, (long long)minpar, (long long)par,
                 (long long)par, r->t->cores, (long long)par, 8 * r->t->cores);
    if ((rc = kl_tr_reject_if(tr, pred, r->err)))
        return rc;
    kl_tr_parallel(tr, par);
    /* Threads split a matmul's rows (each reads all of B) or, annotated,
     * its columns (each reads its part of B once: weights from memory). */
    if (r->nsp > 1 &&
        (rc = s_annot_flag(r, par, KL_ANNOT_PARALLEL_ORDER, 0.6, 0.4)))
        return rc;
    for (int i = 0; i < r->nsp; i++)
        if (i != r->vec)
            kl_tr_unroll(tr, r->s[i][3]);
    if (r->vec >= 0)
        kl_tr_vectorize(tr, r->s[r->vec][3]);
    if ((rc = s_pack(r, par)))
        return rc;
    if (r->nrd > 0) {
        int64_t loop = r->cb >= 0 ? r->cb : r->r[r->nrd - 1][1];
        static const int64_t uv[4] = {0, 2, 4, 8},
                             pv[4] = {0, 1024, 2048, 4096};
        static const double up[4] = {0.4, 0.3, 0.2, 0.1},
                            pp[4] = {0.4, 0.2, 0.2, 0.2};
        if ((rc = s_annot_choice(r, loop, "unroll_max_step", uv, up)))
            return rc;
        /* A convolution's channel product: software prefetch of the packed
         * panels, some distance (floats) ahead. Its panels are used only a
         * few times each (49 tiles x 256 channels for the Winograd
         * product), so the next one is not in L1 when it is needed. */
        if (r->fit && (rc = s_annot_choice(r, loop, "prefetch", pv, pp)))
            return rc;
    }
    return KL_OK;
}

/* The two loads of a product body (A * B, a matmul's or a
 * convolution's) into acc; false when the body is not one. */
static bool s_operands(const kl_workload_t *w, const kl_access_t *acc[2])
{
    const kl_expr_t *b = w->body;
    if (!b || b->kind != KL_EX_MUL || b->a->kind != KL_EX_LOAD ||
        b->b->kind != KL_EX_LOAD)
        return false;
    acc[0] = &b->a->access;
    acc[1] = &b->b->access;
    return true;
}

/* Whether the product's operand that is read along the vector iterator
 * also reads iterator it (then rows along it would each load their own
 * vectors instead of sharing them). */
static bool s_vec_operand_reads(const rule_t *r, int it)
{
    const kl_access_t *acc[2];
    if (r->vec < 0 || !s_operands(r->w, acc))
        return false;
    int v = r->sp[r->vec];
    for (int o = 0; o < 2; o++) {
        const kl_tensor_t *t = &r->w->tensors[acc[o]->tensor];
        bool by_vec = false, by_it = false;
        for (int d = 0; d < t->ndim; d++) {
            by_vec = by_vec || acc[o]->idx[d].coef[v];
            by_it = by_it || acc[o]->idx[d].coef[it];
        }
        if (by_vec)
            return by_it;
    }
    return false;
}

/* Whether w is a float product whose vector iterator vit is the output
 * channel of a convolution in NHWC: one operand read through a window
 * (the input) does not index it. Its nest is then a channel product, as
 * the channel-vector branch's is (rule_t.fit): rows of a 7-wide image
 * are tiled whole, the reduction may stay whole. */
static bool s_nhwc_product(const kl_workload_t *w, int vit)
{
    const kl_access_t *acc[2];
    if (vit < 0 || !s_operands(w, acc))
        return false;
    for (int t = 0; t < w->ntensors; t++)
        if (w->tensors[t].dtype != KL_DT_F32)
            return false;
    for (int o = 0; o < 2; o++) {
        bool reads = false;
        for (int d = 0; d < w->tensors[acc[o]->tensor].ndim; d++)
            reads = reads || acc[o]->idx[d].coef[vit];
        if (!reads && kl_access_is_window(w, acc[o]))
            return true;
    }
    return false;
}

/* Whether an operand reads iterator it with a stride (X[.., 2x + s]) or,
 * when window, also through a window (X[.., y + r]): vectors along it
 * would gather their inputs. */
static bool s_iter_gathered(const rule_t *r, int it, bool window)
{
    const kl_access_t *acc[2];
    if (it < 0 || !s_operands(r->w, acc))
        return false;
    for (int o = 0; o < 2; o++) {
        const kl_tensor_t *t = &r->w->tensors[acc[o]->tensor];
        for (int d = 0; d < t->ndim; d++) {
            const kl_affine_t *f = &acc[o]->idx[d];
            if (!f->coef[it])
                continue;
            if (f->coef[it] != 1 || f->div != 1)
                return true;
            for (int i = 0; window && i < r->w->niters; i++)
                if (i != it && f->coef[i])
                    return true;
        }
    }
    return false;
}

/* The row iterator: the largest spatial one other than the vector's; in
 * a channel product, the largest that the vector's operand does not read
 * (a Winograd product's tiles p, not its 16 or 36 transform points e,
 * whose U panels differ), if there is one. */
static void s_pick_row(rule_t *r)
{
    int64_t best = 0;
    r->row = -1;
    for (int pass = r->fit ? 0 : 1; pass < 2 && r->row < 0; pass++)
        for (int k = 0; k < r->nsp; k++)
            if (k != r->vec && r->w->iters[r->sp[k]].extent > best &&
                (pass || !s_vec_operand_reads(r, r->sp[k]))) {
                best = r->w->iters[r->sp[k]].extent;
                r->row = k;
            }
}

/* The direct nest of w (from get_loops on) into tr. */
static int s_program(const kl_workload_t *w, const kl_target_t *t,
                     kl_trace_t *tr, char *err)
{
    rule_t r;
    memset(&r, 0, sizeof r);
    r.w = w;
    r.t = t;
    r.tr = tr;
    r.fit = !strcmp(w->op_kind, "winograd");
    r.vec = r.row = -1;
    r.cb = -1;
    int vit = s_vec_iter(w);
    for (int i = 0; i < w->niters; i++) {
        if (w->iters[i].reduce) {
            r.rd[r.nrd++] = i;
            continue;
        }
        if (i == vit)
            r.vec = r.nsp;
        r.sp[r.nsp++] = i;
    }
    if (r.nsp == 0)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cpu rules: workload %s has no spatial iterator",
                         w->name ? w->name : "?");
    r.fit = r.fit || s_nhwc_product(w, vit);
    /* 4 loops per spatial and 2 per reduction iterator must fit. */
    if (4 * r.nsp + 2 * r.nrd + 2 > KL_SCHED_MAX_LOOPS)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cpu rules: %d iterators is too many to tile",
                         w->niters);
    /* A channel vector: another spatial iterator that fills whole
     * vectors, when the last dimension does not or is read with a stride
     * (a strided convolution's columns); not one read with a stride or
     * through a window itself (the output rows of a 112 x 112 image are
     * not channels). */
    int alt = -1;
    int64_t L = t->vec_lanes;
    if (r.vec < 0 || w->iters[r.sp[r.vec]].extent % L ||
        s_iter_gathered(&r, r.sp[r.vec], false))
        for (int k = 0; k < r.nsp; k++) {
            int64_t e = w->iters[r.sp[k]].extent;
            if (k != r.vec && e % L == 0 &&
                !s_iter_gathered(&r, r.sp[k], true) &&
                (alt < 0 || e > w->iters[r.sp[alt]].extent))
                alt = k;
        }
    int64_t naive[KL_IR_MAX_ITERS];
    kl_tr_get_loops(r.tr, w->niters, naive);
    /* The naive nest lists spatial iterators, then reductions. */
    int n = 0;
    for (int i = 0; i < r.nsp; i++)
        r.loop[r.sp[i]] = naive[n++];
    for (int i = 0; i < r.nrd; i++)
        r.loop[r.rd[i]] = naive[n++];
    int rc;
    if (alt < 0) {
        s_pick_row(&r);
        rc = s_build(&r);
    } else {
        int64_t vals[2] = {0, 1};
        double ps[2] = {0.3, 0.7};
        int64_t c = kl_tr_sample_categorical(r.tr, vals, ps, 2);
        char pred[48];
        snprintf(pred, sizeof pred, "v%lld == 0", (long long)c);
        if (!(rc = kl_tr_if(r.tr, pred, r.err))) {
            s_pick_row(&r);
            rc = s_build(&r);
        }
        if (!rc && !(rc = kl_tr_else(r.tr, r.err))) {
            r.vec = alt;
            r.chan = r.fit = true;
            s_pick_row(&r);
            rc = s_build(&r);
        }
        if (!rc)
            rc = kl_tr_end(r.tr, r.err);
    }
    return rc ? kl_seterr(err, rc, "cpu rules: %s", r.err) : KL_OK;
}

int kl_space__rules_cpu(const kl_workload_t *w, const kl_target_t *t,
                        kl_trace_t **out, char *err)
{
    *out = NULL;
    for (int i = 0; i < w->ntensors; i++)
        if (kl_dtype_is_int(w->tensors[i].dtype))
            return kl_space__rules_cpu_int(w, t, out, err);
    kl_trace_t *tr = kl_trace_new(t->name);
    /* A 3x3 convolution: directly (0), or as the Winograd product with
     * output tiles ms[i] (i + 1), each branch nested in the last one's
     * else. */
    static const int ms[2] = {2, 4};
    kl_workload_t *d[2] = {NULL, NULL};
    bool wino = true;
    for (int i = 0; i < 2; i++)
        wino = wino && !kl_workload_winograd(w, ms[i], &d[i], NULL, NULL);
    int rc = KL_OK, open = 0;
    /* bf16 products: the tensorized schedule, or (else) the float ones. */
    rc = kl_space__cpu_bf16_open(w, t, tr, &open, err);
    /* Depthwise convolutions: the row and channel vector families, or
     * (else) the tiling below (rules_cpu_dw.c). */
    int dw = 0;
    if (!rc)
        rc = kl_space__cpu_dw_open(w, t, tr, &dw, err);
    open += dw;
    if (!rc && wino) {
        int64_t vals[3] = {0, 1, 2};
        double ps[3] = {0.4, 0.3, 0.3};
        long long v = (long long)kl_tr_sample_categorical(tr, vals, ps, 3);
        for (int i = 0; i < 2 && !rc; i++) {
            char pred[48];
            snprintf(pred, sizeof pred, "v%lld == %d", v, i + 1);
            if ((rc = kl_tr_if(tr, pred, err)))
                break;
            open++;
            kl_tr_winograd(tr, ms[i]);
            if (!(rc = s_program(d[i], t, tr, err)))
                rc = kl_tr_else(tr, err);
        }
    }
    if (!rc)
        rc = s_program(w, t, tr, err);
    while (!rc && open-- > 0)
        rc = kl_tr_end(tr, err);
    for (int i = 0; i < 2; i++)
        kl_workload_free(&d[i]);
    if (rc) {
        kl_trace_free(&tr);
        return rc;
    }
    *out = tr;
    return KL_OK;
}
