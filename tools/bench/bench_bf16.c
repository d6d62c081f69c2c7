/* bench_bf16 - bf16 matmul 1024^3 and ResNet-18's 3x3 convolutions:
 * oneDNN's bf16 primitives (bf16 source and weights, f32 accumulation and
 * destination) and their f32 twins against kiln's best f32 and bf16
 * records, all in one process, interleaved.
 *
 * Matmul (M = N = K = --size, 1024): four sides, timed in rounds
 * A B C D A B C D ..., caches flushed before every sample:
 *   oneDNN bf16  matmul, src bf16 [M,K] (reordered from f32 once, outside
 *                the timing: a network keeps its activations in bf16),
 *                weights bf16 in the layout it picks, dst f32;
 *   oneDNN f32   the same in f32;
 *   kiln f32     the best record of --f32-db's store (a tuned
 *                `matmul M=1024 N=1024 K=1024`), when given;
 *   kiln bf16    the best record of --db's store (a tuned `matmul M=1024
 *                N=1024 K=1024 in=bf16` on cpu/x86_64-avx512+bf16), when
 *                given; its A is f32 in memory (the C ABI stays float*),
 *                converted to bf16 in its packing, its weights once in its
 *                prepare step, outside the timing.
 * A missing kiln side prints "no record"; the oneDNN rows are printed all
 * the same. oneDNN's implementation (impl info string, e.g.
 * "brg:avx512_core_amx" where the CPU has AMX, "brg:avx512_core_bf16"
 * where it has AVX512-BF16) is printed. Every output is checked on 512
 * sampled points against an exact reference computed here in double (bf16
 * sides: inputs rounded to bf16 round-to-nearest-even, kl_dtype_round):
 * |y - ref| <= gamma_K * sum_k |a_k b_k| with gamma_K = K u / (1 - K u),
 * u = 2^-24 (f32 accumulation of K products, the classical bound), plus 2u
 * of |ref| for the store; a side over it fails the run (exit 1).
 * Printed: per side the median, min and max of the samples and GFLOP/s
 * (2 flops per multiply-add), and the ratios of medians (throughput):
 * kiln bf16 / oneDNN bf16, kiln bf16 / kiln f32, oneDNN bf16 / oneDNN f32.
 *
 * Convolutions (--conv, on by default): the conv2d 3x3 tasks of the
 * built-in resnet18 (what `kiln extract --model resnet18` lists), each
 * against oneDNN's bf16 and f32 convolutions (every memory descriptor
 * format_tag_any, convolution_auto, the task's bias inside the primitive
 * and its relu as a post-op; a residual task's add and relu are applied
 * after the timing, for the check only, so its oneDNN rows time a little
 * less than the task), interleaved the same way, and against kiln's best
 * bf16 record of that layer when a --conv-db store holds one (matched on
 * the shapes of its tensors; "no record" otherwise). Checked: kiln bf16
 * against oneDNN bf16 within 1e-3 of the largest output magnitude (both
 * round the same inputs to bf16; they differ in the order of the f32
 * sums); oneDNN bf16's difference from oneDNN f32 is printed, as what bf16
 * costs in accuracy.
 *
 * Threads: OMP_NUM_THREADS (2 in the figures: OMP_NUM_THREADS=2
 * OMP_PROC_BIND=close), as the other benchmarks; oneDNN's OpenMP runtime
 * reads the same variables.
 *
 * Usage: bench_bf16 [--db DIR] [--f32-db DIR] [--conv-db DIR ...]
 *                   [--size N] [--rounds N] [--no-conv] [--workdir DIR]
 */
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dnnl_util.h"
#include "bench_tune_util.h"
#include "kl_err.h"
#include "kl_model.h"
#include "kl_util.h"

#define MAXDB 16
#define NSIDE 4
#define NCHECK 512

/* A oneDNN primitive with up to 4 args (src, weights, [bias], dst). */
typedef struct {
    bd_ctx_t *d;
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[4];
    int nargs;
    const char *impl;
} dp_t;

static void s_dp_run(void *ctx)
{
    dp_t *p = ctx;
    BD_CK(dnnl_primitive_execute(p->prim, p->d->st, p->nargs, p->args));
    BD_CK(dnnl_stream_wait(p->d->st));
}

/* One side of a comparison: a name, how to run it, its samples. */
typedef struct {
    const char *name;
    void (*fn)(void *);
    void *ctx; /* NULL: no record, not timed */
    bt_stat_t st;
} side_t;

/* The present sides timed in rounds a b c d a b c d ..., after 3 warm-up
 * rounds, caches flushed before every sample. */
static void s_interleave(side_t *s, int n, int rounds)
{
    double *t = kl_xcalloc((size_t)(n * rounds), sizeof *t);
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < n; i++)
            if (s[i].ctx)
                s[i].fn(s[i].ctx);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            if (!s[i].ctx)
                continue;
            bt_flush_cache();
            double t0 = kl_now_s();
            s[i].fn(s[i].ctx);
            t[i * rounds + r] = kl_now_s() - t0;
        }
    for (int i = 0; i < n; i++) {
        if (!s[i].ctx)
            continue;
        const double *v = t + i * rounds;
        s[i].st.min = s[i].st.max = v[0];
        for (int r = 1; r < rounds; r++) {
            s[i].st.min = v[r] < s[i].st.min ? v[r] : s[i].st.min;
            s[i].st.max = v[r] > s[i].st.max ? v[r] : s[i].st.max;
        }
        s[i].st.med = kl_median(v, (size_t)rounds);
    }
    free(t);
}

static void s_print_side(const side_t *s, double flop, const char *extra)
{
    if (!s->ctx) {
        printf("%-12s %10s  %s\n", s->name, "no record", extra);
        return;
    }
    printf("%-12s %10.1f us median (min %.1f, max %.1f) = %7.1f GFLOP/s  %s\n",
           s->name, s->st.med * 1e6, s->st.min * 1e6, s->st.max * 1e6,
           flop / s->st.med / 1e9, extra);
}

/* Ratio of throughputs a / b (medians), or "-" when a side is missing. */
static void s_ratio(const char *what, const side_t *a, const side_t *b)
{
    if (a->ctx && b->ctx)
        printf("ratio %-26s %.2f\n", what, b->st.med / a->st.med);
    else
        printf("ratio %-26s - (%s: no record)\n", what,
               a->ctx ? b->name : a->name);
}

/* A kiln side from a store: the kernel, its buffers, its args. */
typedef struct {
    bd_kctx_t k;
    kl_workload_t *w;
    float **bufs;
    bt_run_t r;
} ks_t;

static bool s_kiln_load(const char *db, const char *workdir, ks_t *ks)
{
    char err[KL_ERRMSG_LEN];
    bt_run_read(db, &ks->r);
    if (kl_workload_from_string(ks->r.workload_text, &ks->w, err)) {
        fprintf(stderr, "bench_bf16: %s: %s\n", db, err);
        return false;
    }
    printf("kiln store %s: %s on %s, best of %zu trials (tuning measured "
           "%.1f GFLOP/s)\n",
           db, ks->r.workload_name, ks->r.target, ks->r.n,
           ks->w->flop / ks->r.best_s / 1e9);
    ks->k.k = bt_load_best(&ks->r, workdir);
    ks->bufs = bt_alloc_bufs(ks->w, 7);
    ks->k.args = bt_kernel_args(&ks->k.k, ks->w, ks->bufs);
    return true;
}

static void s_kiln_free(ks_t *ks)
{
    bt_args_free(ks->w, ks->k.args);
    bt_free_bufs(ks->w, ks->bufs);
    kl_workload_free(&ks->w);
    bt_run_free(&ks->r);
}

/* Whether a store's matmul is the one wanted: M N K, and bf16 or not. */
static bool s_is_matmul(const kl_workload_t *w, int64_t n, bool bf16)
{
    int ot = kl_workload_output(w);
    return w->ntensors == 3 && ot == 2 && w->nepi == 0 &&
           kl_workload_is_bf16(w) == bf16 && w->tensors[0].ndim == 2 &&
           w->tensors[0].shape[0] == n && w->tensors[0].shape[1] == n &&
           w->tensors[1].shape[1] == n;
}

/* oneDNN matmul n^3 in dt (bf16: src / weights bf16, dst f32) on the f32
 * inputs a, b, writing c. */
static void s_mm_dnnl(bd_ctx_t *d, int64_t n, dnnl_data_type_t dt, float *a,
                      float *b, float *c, dp_t *p)
{
    dnnl_memory_desc_t smd, wmd, dmd;
    dnnl_dims_t dims = {n, n};
    BD_CK(dnnl_memory_desc_init_by_tag(&smd, 2, dims, dt, dnnl_ab));
    BD_CK(dnnl_memory_desc_init_by_tag(&wmd, 2, dims, dt, dnnl_format_tag_any));
    BD_CK(dnnl_memory_desc_init_by_tag(&dmd, 2, dims, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t mmd;
    BD_CK(dnnl_matmul_desc_init(&mmd, &smd, &wmd, NULL, &dmd));
    dnnl_primitive_desc_t pd;
    BD_CK(dnnl_primitive_desc_create(&pd, &mmd, NULL, d->eng, NULL));
    BD_CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &p->impl));
    dnnl_memory_t ms =
        bd_prep(d, pd, dnnl_query_src_md, 2, dims, dnnl_f32, dnnl_ab, a);
    dnnl_memory_t mw =
        bd_prep(d, pd, dnnl_query_weights_md, 2, dims, dnnl_f32, dnnl_ab, b);
    dnnl_memory_t md;
    BD_CK(dnnl_memory_create(&md, &dmd, d->eng, c));
    BD_CK(dnnl_primitive_create(&p->prim, pd));
    p->d = d;
    p->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ms};
    p->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
    p->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, md};
    p->nargs = 3;
}

/* The largest |y - ref| over NCHECK sampled points of c = a b (n^3) as a
 * multiple of the bound in the header (> 1: outside it). */
static double s_mm_check(const float *a, const float *b, const float *c,
                         int64_t n, bool bf16)
{
    const double u = ldexp(1.0, -24), g = n * u / (1 - n * u);
    kl_rng_t rng;
    kl_rng_seed(&rng, 11);
    double worst = 0;
    kl_dtype dt = bf16 ? KL_DT_BF16 : KL_DT_F32;
    for (int s = 0; s < NCHECK; s++) {
        int64_t i = (int64_t)(kl_rng_double(&rng) * n) % n;
        int64_t j = (int64_t)(kl_rng_double(&rng) * n) % n;
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < n; k++) {
            double p = kl_dtype_round(dt, a[i * n + k]) *
                       kl_dtype_round(dt, b[k * n + j]);
            ref += p;
            mag += fabs(p);
        }
        double bound = g * mag + 2 * u * fabs(ref) + 1e-30;
        double q = fabs(c[i * n + j] - ref) / bound;
        worst = q > worst || isnan(q) ? q : worst;
    }
    return worst;
}

static bool s_check_line(const char *name, double q)
{
    printf("check %-12s largest error %.3g of the bound on %d sampled "
           "points: %s\n",
           name, q, NCHECK, q <= 1 ? "ok" : "OUTSIDE");
    return q <= 1;
}

/* Loads a kiln matmul store into ks when it holds the wanted matmul. */
static bool s_mm_kiln(const char *db, const char *workdir, int64_t n, bool bf16,
                      ks_t *ks)
{
    if (!db)
        return false;
    if (!s_kiln_load(db, workdir, ks))
        exit(2);
    if (!s_is_matmul(ks->w, n, bf16)) {
        fprintf(stderr,
                "bench_bf16: %s holds %s, not a plain%s matmul "
                "M=N=K=%lld\n",
                db, ks->r.workload_name, bf16 ? " in=bf16" : "", (long long)n);
        exit(2);
    }
    return true;
}

static bool s_matmul(bd_ctx_t *d, int64_t n, const char *db, const char *fdb,
                     const char *workdir, int rounds)
{
    double flop = 2.0 * (double)n * (double)n * (double)n;
    printf("== matmul %lld^3: oneDNN %d.%d bf16 and f32, kiln f32 and bf16; "
           "%d rounds\n",
           (long long)n, dnnl_version()->major, dnnl_version()->minor, rounds);
    kl_workload_t *w = NULL;
    char err[KL_ERRMSG_LEN], spec[128];
    snprintf(spec, sizeof spec, "matmul M=%lld N=%lld K=%lld", (long long)n,
             (long long)n, (long long)n);
    if (kl_workload_from_op(spec, &w, err)) {
        fprintf(stderr, "bench_bf16: %s\n", err);
        exit(2);
    }
    float **db_ = bt_alloc_bufs(w, 7), **df = bt_alloc_bufs(w, 7);
    dp_t pb, pf;
    s_mm_dnnl(d, n, dnnl_bf16, db_[0], db_[1], db_[2], &pb);
    s_mm_dnnl(d, n, dnnl_f32, df[0], df[1], df[2], &pf);
    printf("oneDNN bf16 matmul implementation: %s\n", pb.impl);
    printf("oneDNN f32 matmul implementation:  %s\n", pf.impl);
    char *wd[2] = {kl_xasprintf("%s/mm_f32", workdir),
                   kl_xasprintf("%s/mm_bf16", workdir)};
    ks_t kf = {0}, kb = {0};
    bool hf = s_mm_kiln(fdb, wd[0], n, false, &kf);
    bool hb = s_mm_kiln(db, wd[1], n, true, &kb);
    side_t s[NSIDE] = {{"oneDNN bf16", s_dp_run, &pb, {0, 0, 0}},
                       {"oneDNN f32", s_dp_run, &pf, {0, 0, 0}},
                       {"kiln f32", bd_kiln, hf ? &kf.k : NULL, {0, 0, 0}},
                       {"kiln bf16", bd_kiln, hb ? &kb.k : NULL, {0, 0, 0}}};
    s_interleave(s, NSIDE, rounds);
    s_print_side(&s[0], flop, pb.impl);
    s_print_side(&s[1], flop, pf.impl);
    s_print_side(&s[2], flop, hf ? kf.r.target : "(--f32-db not given)");
    s_print_side(&s[3], flop, hb ? kb.r.target : "(--db not given)");
    s_ratio("kiln bf16 / oneDNN bf16:", &s[3], &s[0]);
    s_ratio("kiln bf16 / kiln f32:", &s[3], &s[2]);
    s_ratio("oneDNN bf16 / oneDNN f32:", &s[0], &s[1]);
    s_ratio("kiln f32 / oneDNN f32:", &s[2], &s[1]);
    bool ok = s_check_line("oneDNN bf16",
                           s_mm_check(db_[0], db_[1], db_[2], n, true));
    ok =
        s_check_line("oneDNN f32", s_mm_check(df[0], df[1], df[2], n, false)) &&
        ok;
    if (hf) {
        ok = s_check_line("kiln f32", s_mm_check(kf.bufs[0], kf.bufs[1],
                                                 kf.bufs[2], n, false)) &&
             ok;
        s_kiln_free(&kf);
    }
    if (hb) {
        ok = s_check_line("kiln bf16", s_mm_check(kb.bufs[0], kb.bufs[1],
                                                  kb.bufs[2], n, true)) &&
             ok;
        s_kiln_free(&kb);
    }
    free(wd[0]);
    free(wd[1]);
    bt_free_bufs(w, db_);
    bt_free_bufs(w, df);
    kl_workload_free(&w);
    return ok;
}

/* A conv2d task: its workload and the parameters oneDNN needs. */
typedef struct {
    const kl_workload_t *w;
    const char *spec;
    bool nhwc, bias, relu, residual;
    int64_t n, c, h, wd, k, r, s, p, q, stride, pad;
    int ix, iw, ib, ires, iy; /* ABI indices (-1: none) */
} conv_t;

/* Integer parameter NAME= of spec (" NAME=V"), else def. */
static int64_t s_param(const char *spec, const char *name, int64_t def)
{
    char key[32];
    snprintf(key, sizeof key, " %s=", name);
    const char *p = strstr(spec, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : def;
}

/* The conv2d 3x3 task's parameters; false when it is none. */
static bool s_conv_of(const kl_model_task_t *t, conv_t *cv)
{
    const char *sp = t->spec;
    if (strncmp(sp, "conv2d ", 7) || s_param(sp, "R", 0) != 3 ||
        s_param(sp, "S", 0) != 3 || s_param(sp, "groups", 1) != 1 ||
        s_param(sp, "dilation", 1) != 1)
        return false;
    *cv = (conv_t){.w = t->w, .spec = sp};
    cv->nhwc = strstr(sp, "layout=NHWC") != NULL;
    cv->bias = s_param(sp, "bias", 0) == 1;
    cv->relu = s_param(sp, "relu", 0) == 1;
    cv->residual = s_param(sp, "residual", 0) == 1;
    cv->n = s_param(sp, "N", 1);
    cv->c = s_param(sp, "C", 0);
    cv->h = s_param(sp, "H", 0);
    cv->wd = s_param(sp, "W", 0);
    cv->k = s_param(sp, "K", 0);
    cv->r = cv->s = 3;
    cv->stride = s_param(sp, "stride", 1);
    cv->pad = s_param(sp, "pad", 0);
    cv->p = (cv->h + 2 * cv->pad - cv->r) / cv->stride + 1;
    cv->q = (cv->wd + 2 * cv->pad - cv->s) / cv->stride + 1;
    int i = 2;
    cv->ix = 0;
    cv->iw = 1;
    cv->ib = cv->bias ? i++ : -1;
    cv->ires = cv->residual ? i++ : -1;
    cv->iy = kl_workload_output(t->w);
    return cv->iy == i;
}

/* oneDNN's convolution of cv in dt (bf16: src / weights bf16; bias and
 * dst f32) on the f32 buffers b; its dst in p's args[nargs - 1]. */
static void s_conv_dnnl(bd_ctx_t *d, const conv_t *cv, dnnl_data_type_t dt,
                        float **b, dp_t *p, dnnl_memory_t *dst,
                        dnnl_memory_t *udst)
{
    dnnl_dims_t xd = {cv->n, cv->c, cv->h, cv->wd};
    dnnl_dims_t wd = {cv->k, cv->c, cv->r, cv->s};
    dnnl_dims_t yd = {cv->n, cv->k, cv->p, cv->q}, bd = {cv->k};
    dnnl_format_tag_t xt = cv->nhwc ? dnnl_nhwc : dnnl_nchw;
    dnnl_format_tag_t wt = cv->nhwc ? dnnl_hwio : dnnl_oihw;
    dnnl_memory_desc_t xm, wm, bm, ym, um;
    BD_CK(dnnl_memory_desc_init_by_tag(&xm, 4, xd, dt, dnnl_format_tag_any));
    BD_CK(dnnl_memory_desc_init_by_tag(&wm, 4, wd, dt, dnnl_format_tag_any));
    BD_CK(dnnl_memory_desc_init_by_tag(&bm, 1, bd, dnnl_f32, dnnl_a));
    BD_CK(dnnl_memory_desc_init_by_tag(&ym, 4, yd, dnnl_f32,
                                       dnnl_format_tag_any));
    dnnl_dims_t strides = {cv->stride, cv->stride}, pl = {cv->pad, cv->pad};
    dnnl_dims_t pr = {(cv->p - 1) * cv->stride + cv->r - cv->h - cv->pad,
                      (cv->q - 1) * cv->stride + cv->s - cv->wd - cv->pad};
    dnnl_convolution_desc_t cd;
    BD_CK(dnnl_convolution_forward_desc_init(
        &cd, dnnl_forward_inference, dnnl_convolution_auto, &xm, &wm,
        cv->bias ? &bm : NULL, &ym, strides, pl, pr));
    dnnl_primitive_attr_t attr;
    BD_CK(dnnl_primitive_attr_create(&attr));
    if (cv->relu && !cv->residual) {
        dnnl_post_ops_t po;
        BD_CK(dnnl_post_ops_create(&po));
        BD_CK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0));
        BD_CK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    BD_CK(dnnl_primitive_desc_create(&pd, &cd, attr, d->eng, NULL));
    dnnl_primitive_attr_destroy(attr);
    BD_CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &p->impl));
    BD_CK(dnnl_primitive_create(&p->prim, pd));
    p->d = d;
    p->nargs = 0;
    p->args[p->nargs++] =
        (dnnl_exec_arg_t){DNNL_ARG_SRC, bd_prep(d, pd, dnnl_query_src_md, 4, xd,
                                                dnnl_f32, xt, b[cv->ix])};
    p->args[p->nargs++] = (dnnl_exec_arg_t){
        DNNL_ARG_WEIGHTS,
        bd_prep(d, pd, dnnl_query_weights_md, 4, wd, dnnl_f32, wt, b[cv->iw])};
    if (cv->bias) {
        dnnl_memory_t mb;
        BD_CK(dnnl_memory_create(&mb, &bm, d->eng, b[cv->ib]));
        p->args[p->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
    }
    BD_CK(dnnl_memory_create(
        dst, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), d->eng,
        DNNL_MEMORY_ALLOCATE));
    p->args[p->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DST, *dst};
    BD_CK(dnnl_memory_desc_init_by_tag(&um, 4, yd, dnnl_f32, xt));
    BD_CK(dnnl_memory_create(udst, &um, d->eng, b[cv->iy]));
}

/* oneDNN's output into the task's buffer, then what the primitive left
 * out of the task's epilogue (a residual's add, and the relu after it). */
static void s_conv_output(bd_ctx_t *d, const conv_t *cv, float **b,
                          dnnl_memory_t dst, dnnl_memory_t udst)
{
    d->dst = dst;
    d->user_dst = udst;
    bd_output(d);
    if (!cv->residual)
        return;
    int64_t ny = kl_tensor_numel(&cv->w->tensors[cv->iy]);
    float *y = b[cv->iy];
    for (int64_t i = 0; i < ny; i++) {
        y[i] += b[cv->ires][i];
        if (cv->relu && y[i] < 0)
            y[i] = 0;
    }
}

/* Largest |x - y| over the largest |y|. */
static double s_rel_max(const float *x, const float *y, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - y[i]);
        d = e > d || isnan(e) ? e : d;
        m = fabs(y[i]) > m ? fabs(y[i]) : m;
    }
    return m > 0 ? d / m : d;
}

/* Whether store workload sw computes the layer's shapes in bf16. */
static bool s_conv_match(const kl_workload_t *sw, const conv_t *cv)
{
    const kl_workload_t *w = cv->w;
    if (!kl_workload_is_bf16(sw) || sw->ntensors != w->ntensors ||
        strcmp(sw->op_kind, "conv2d"))
        return false;
    for (int t = 0; t < w->ntensors; t++) {
        const kl_tensor_t *a = &sw->tensors[t], *b = &w->tensors[t];
        if (a->ndim != b->ndim)
            return false;
        for (int i = 0; i < a->ndim; i++)
            if (a->shape[i] != b->shape[i])
                return false;
    }
    return true;
}

typedef struct {
    char name[96];
    double med[3];  /* oneDNN bf16, oneDNN f32, kiln bf16 (0: none) */
    double dbf, dk; /* oneDNN bf16 vs f32; kiln bf16 vs oneDNN bf16 */
} crow_t;

/* The stores given with --conv-db: their runs and workloads. */
typedef struct {
    const char *db;
    bt_run_t r;
    kl_workload_t *w;
} cstore_t;

/* kiln's side of a layer, when a store matches it: loaded into ks, its
 * inputs the layer's (b). */
static bool s_conv_kiln(cstore_t *cs, int ncs, const conv_t *cv, float **b,
                        const char *workdir, ks_t *ks)
{
    for (int i = 0; i < ncs; i++) {
        if (!cs[i].w || !s_conv_match(cs[i].w, cv))
            continue;
        if (!s_kiln_load(cs[i].db, workdir, ks))
            return false;
        for (int t = 0; t < cv->w->ntensors; t++)
            if (t != cv->iy)
                memcpy(ks->bufs[t], b[t],
                       (size_t)kl_tensor_numel(&cv->w->tensors[t]) *
                           sizeof(float));
        bt_args_free(ks->w, ks->k.args); /* prepare again on these inputs */
        ks->k.args = bt_kernel_args(&ks->k.k, ks->w, ks->bufs);
        return true;
    }
    return false;
}

static bool s_conv_layer(bd_ctx_t *d, const conv_t *cv, cstore_t *cs, int ncs,
                         const char *workdir, int rounds, crow_t *row)
{
    double flop = cv->w->flop;
    printf("\n== %s (%s): %.1f MFLOP\n", cv->w->name, cv->spec, flop / 1e6);
    float **bb = bt_alloc_bufs(cv->w, 7), **bf = bt_alloc_bufs(cv->w, 7);
    dp_t pb, pf;
    dnnl_memory_t dstb, udb, dstf, udf;
    s_conv_dnnl(d, cv, dnnl_bf16, bb, &pb, &dstb, &udb);
    s_conv_dnnl(d, cv, dnnl_f32, bf, &pf, &dstf, &udf);
    ks_t ks = {0};
    bool hk = s_conv_kiln(cs, ncs, cv, bb, workdir, &ks);
    side_t s[3] = {{"oneDNN bf16", s_dp_run, &pb, {0, 0, 0}},
                   {"oneDNN f32", s_dp_run, &pf, {0, 0, 0}},
                   {"kiln bf16", bd_kiln, hk ? &ks.k : NULL, {0, 0, 0}}};
    s_interleave(s, 3, rounds);
    s_conv_output(d, cv, bb, dstb, udb);
    s_conv_output(d, cv, bf, dstf, udf);
    int64_t ny = kl_tensor_numel(&cv->w->tensors[cv->iy]);
    row->dbf = s_rel_max(bb[cv->iy], bf[cv->iy], ny);
    row->dk = hk ? s_rel_max(ks.bufs[cv->iy], bb[cv->iy], ny) : 0;
    s_print_side(&s[0], flop, pb.impl);
    s_print_side(&s[1], flop, pf.impl);
    s_print_side(&s[2], flop, hk ? ks.r.target : "(no --conv-db store)");
    s_ratio("kiln bf16 / oneDNN bf16:", &s[2], &s[0]);
    s_ratio("oneDNN bf16 / oneDNN f32:", &s[0], &s[1]);
    printf("oneDNN bf16 vs oneDNN f32: largest difference %.3g of the "
           "largest output\n",
           row->dbf);
    bool ok = true;
    if (hk) {
        ok = row->dk <= 1e-3;
        printf("check kiln bf16 vs oneDNN bf16: largest difference %.3g of "
               "the largest output (tolerance 1e-3): %s\n",
               row->dk, ok ? "ok" : "OUTSIDE");
        s_kiln_free(&ks);
    }
    snprintf(row->name, sizeof row->name, "%s", cv->w->name);
    for (int i = 0; i < 3; i++)
        row->med[i] = s[i].ctx ? s[i].st.med : 0;
    dnnl_primitive_destroy(pb.prim);
    dnnl_primitive_destroy(pf.prim);
    bt_free_bufs(cv->w, bb);
    bt_free_bufs(cv->w, bf);
    return ok;
}

static void s_conv_table(const crow_t *rows, int n)
{
    printf("\n%-48s %9s %9s %9s %7s %7s %9s\n", "layer (us, medians)",
           "dnnl bf16", "dnnl f32", "kiln bf16", "kb/db", "db/df", "bf16 diff");
    for (int i = 0; i < n; i++) {
        const crow_t *r = &rows[i];
        char kb[16] = "no record", q[16] = "-";
        if (r->med[2] > 0) {
            snprintf(kb, sizeof kb, "%.1f", r->med[2] * 1e6);
            snprintf(q, sizeof q, "%.2f", r->med[0] / r->med[2]);
        }
        printf("%-48s %9.1f %9.1f %9s %7s %7.2f %9.2g\n", r->name,
               r->med[0] * 1e6, r->med[1] * 1e6, kb, q, r->med[1] / r->med[0],
               r->dbf);
    }
    printf("(kb/db: kiln bf16 / oneDNN bf16 and db/df: oneDNN bf16 / oneDNN "
           "f32, throughput; bf16 diff: oneDNN bf16 vs f32, of the largest "
           "output)\n");
}

static bool s_convs(bd_ctx_t *d, const char **cdbs, int ncdb,
                    const char *workdir, int rounds)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_load("resnet18", &m, err)) {
        fprintf(stderr, "bench_bf16: %s\n", err);
        return false;
    }
    cstore_t cs[MAXDB] = {{0}};
    for (int i = 0; i < ncdb; i++) {
        cs[i].db = cdbs[i];
        bt_run_read(cdbs[i], &cs[i].r);
        if (kl_workload_from_string(cs[i].r.workload_text, &cs[i].w, err))
            fprintf(stderr, "bench_bf16: %s: %s (ignored)\n", cdbs[i], err);
    }
    crow_t rows[64];
    int nr = 0;
    bool ok = true;
    for (int t = 0; t < kl_model_ntasks(m) && nr < 64; t++) {
        conv_t cv;
        if (!s_conv_of(kl_model_task(m, t), &cv))
            continue;
        char *wd = kl_xasprintf("%s/conv%d", workdir, t);
        ok = s_conv_layer(d, &cv, cs, ncdb, wd, rounds, &rows[nr++]) && ok;
        free(wd);
    }
    s_conv_table(rows, nr);
    for (int i = 0; i < ncdb; i++) {
        kl_workload_free(&cs[i].w);
        bt_run_free(&cs[i].r);
    }
    kl_model_destroy(&m);
    return ok;
}

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

static void s_usage(void)
{
    fprintf(stderr, "usage: bench_bf16 [--db DIR] [--f32-db DIR] "
                    "[--conv-db DIR ...] [--size N] [--rounds N] "
                    "[--no-conv] [--no-matmul] [--workdir DIR]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    bd_prog = "bench_bf16";
    const char *db = NULL, *fdb = NULL, *workdir = NULL, *cdbs[MAXDB];
    int rounds = 15, ncdb = 0;
    int64_t size = 1024;
    bool conv = true, mm = true;
    for (int i = 1; i < argc; i++) {
        bool more = i + 1 < argc;
        if (!strcmp(argv[i], "--db") && more)
            db = argv[++i];
        else if (!strcmp(argv[i], "--f32-db") && more)
            fdb = argv[++i];
        else if (!strcmp(argv[i], "--conv-db") && more && ncdb < MAXDB)
            cdbs[ncdb++] = argv[++i];
        else if (!strcmp(argv[i], "--size") && more)
            size = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && more)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workdir") && more)
            workdir = argv[++i];
        else if (!strcmp(argv[i], "--no-conv"))
            conv = false;
        else if (!strcmp(argv[i], "--no-matmul"))
            mm = false;
        else
            s_usage();
    }
    if (rounds < 3 || rounds > 1000 || size < 16 || size > 8192)
        s_usage();
    char wbuf[512];
    if (!workdir) {
        snprintf(wbuf, sizeof wbuf, "%s/bench_bf16", s_tmpdir());
        workdir = wbuf;
    }
    bt_clean_env(argc, argv, false);
    const char *nth = getenv("OMP_NUM_THREADS");
    printf("bench_bf16: OMP_NUM_THREADS=%s, oneDNN %d.%d.%d\n",
           nth ? nth : "(unset)", dnnl_version()->major, dnnl_version()->minor,
           dnnl_version()->patch);
    bd_ctx_t d;
    memset(&d, 0, sizeof d);
    BD_CK(dnnl_engine_create(&d.eng, dnnl_cpu, 0));
    BD_CK(dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags));
    bool ok = true;
    if (mm)
        ok = s_matmul(&d, size, db, fdb, workdir, rounds) && ok;
    if (conv)
        ok = s_convs(&d, cdbs, ncdb, workdir, rounds) && ok;
    bt_print_load();
    printf("reproduce: OMP_NUM_THREADS=%s OMP_PROC_BIND=close nice %s",
           nth ? nth : "(unset)", argv[0]);
    for (int i = 1; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    return ok ? 0 : 1;
}
