/* bench_tune_conv2d - what `kiln tune` achieves on a conv2d, against
 * oneDNN (C API) in the same process.
 *
 * Reads the store of a tuning run of
 *   conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 pad=1   (any NCHW conv2d:
 *   stride and padding are read from the workload)
 * and reports:
 *  1. wall time to 90 % of the final best speed: from the first record's
 *     commit to the commit of the first record at least 0.9 x as fast as
 *     the best (record times; the first batch's own measuring time before
 *     its commit is not counted), goal <= 5 minutes;
 *  2. the best kernel (regenerated from its trace, compiled with cc -O3
 *     -march=native -fopenmp) against oneDNN's forward convolution with
 *     the layouts it prefers (format any: blocked; inputs reordered once,
 *     outside the timing), interleaved, caches flushed before every
 *     sample, on the threads of OMP_NUM_THREADS (run it with 2, pinned);
 *     the output is checked against oneDNN's; then the same pair with warm
 *     caches (no flush), for information.
 *  Both of oneDNN's algorithms are tried: direct and Winograd (kiln's
 *  space has both for a 3x3 stride-1 convolution); the goal's ratio is
 *  against the faster of those this oneDNN build implements on this CPU.
 *  The implementation oneDNN picks by itself (algorithm auto, what a
 *  framework asks for) is printed too.
 *
 * Usage: bench_tune_conv2d --db DIR [--rounds N] [--workdir DIR]
 *                          [--source FILE]
 * --source times the C kernel in FILE (same ABI) instead of the store's
 * best, e.g. one printed by `kiln db best --source` and edited by hand.
 */
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dnnl_util.h"
#include "bench_tune_util.h"
#include "kl_err.h"
#include "kl_util.h"

/* oneDNN's convolution of X[N,C,H,W] * W[K,C,R,S] -> Y (stride 1,
 * symmetric padding pad) with algorithm alg and its preferred layouts, as a
 * primitive descriptor. Returns false when this build has no
 * implementation of alg for it. */
static bool s_dnnl_pd(dnnl_engine_t eng, dnnl_alg_kind_t alg, const int64_t *xs,
                      const int64_t *ws, const int64_t *ys, int64_t stride,
                      int64_t pad, dnnl_primitive_desc_t *pd)
{
    dnnl_dims_t xd = {xs[0], xs[1], xs[2], xs[3]};
    dnnl_dims_t wd = {ws[0], ws[1], ws[2], ws[3]};
    dnnl_dims_t yd = {ys[0], ys[1], ys[2], ys[3]};
    dnnl_memory_desc_t xm, wm, ym;
    BD_CK(dnnl_memory_desc_init_by_tag(&xm, 4, xd, dnnl_f32,
                                       dnnl_format_tag_any));
    BD_CK(dnnl_memory_desc_init_by_tag(&wm, 4, wd, dnnl_f32,
                                       dnnl_format_tag_any));
    BD_CK(dnnl_memory_desc_init_by_tag(&ym, 4, yd, dnnl_f32,
                                       dnnl_format_tag_any));
    dnnl_dims_t strides = {stride, stride}, pl = {pad, pad}, pr = {pad, pad};
    pr[0] = (ys[2] - 1) * stride + ws[2] - xs[2] - pad;
    pr[1] = (ys[3] - 1) * stride + ws[3] - xs[3] - pad;
    dnnl_convolution_desc_t cd;
    return dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, alg,
                                              &xm, &wm, NULL, &ym, strides, pl,
                                              pr) == dnnl_success &&
           dnnl_primitive_desc_create(pd, &cd, NULL, eng, NULL) == dnnl_success;
}

/* The convolution of s_dnnl_pd as a primitive on d's engine, its inputs
 * reordered from the user's plain buffers once; false as s_dnnl_pd. */
static bool s_dnnl_setup(bd_ctx_t *d, dnnl_alg_kind_t alg, const int64_t *xs,
                         const int64_t *ws, const int64_t *ys, int64_t stride,
                         int64_t pad, float *x, float *wt, float *y)
{
    dnnl_primitive_desc_t pd;
    if (!s_dnnl_pd(d->eng, alg, xs, ws, ys, stride, pad, &pd))
        return false;
    dnnl_dims_t xd = {xs[0], xs[1], xs[2], xs[3]};
    dnnl_dims_t wd = {ws[0], ws[1], ws[2], ws[3]};
    dnnl_dims_t yd = {ys[0], ys[1], ys[2], ys[3]};
    BD_CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &d->impl));
    BD_CK(dnnl_primitive_create(&d->prim, pd));
    dnnl_memory_t mx =
        bd_prep(d, pd, dnnl_query_src_md, 4, xd, dnnl_f32, dnnl_nchw, x);
    dnnl_memory_t mw =
        bd_prep(d, pd, dnnl_query_weights_md, 4, wd, dnnl_f32, dnnl_oihw, wt);
    const dnnl_memory_desc_t *ymd =
        dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    BD_CK(dnnl_memory_create(&d->dst, ymd, d->eng, DNNL_MEMORY_ALLOCATE));
    dnnl_memory_desc_t umd;
    BD_CK(dnnl_memory_desc_init_by_tag(&umd, 4, yd, dnnl_f32, dnnl_nchw));
    BD_CK(dnnl_memory_create(&d->user_dst, &umd, d->eng, y));
    d->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mx};
    d->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
    d->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, d->dst};
    return true;
}

static void s_time_to_90(const bt_run_t *r)
{
    double target = r->best_s / 0.9, best = INFINITY;
    for (size_t i = 0; i < r->n; i++) {
        best = r->lat[i] < best ? r->lat[i] : best;
        if (best <= target) {
            printf("time to 90%% of the final best: %.0f s (trial %zu of %zu; "
                   "the whole run took %.0f s from its first commit; goal "
                   "<= 300 s)\n",
                   r->t_s[i] - r->t_s[0], i + 1, r->n,
                   r->t_s[r->n - 1] - r->t_s[0]);
            return;
        }
    }
}

/* The stride and (top) padding of conv2d w: X's row index is
 * y * stride + r - pad. */
static void s_stride_pad(const kl_workload_t *w, int64_t *stride, int64_t *pad)
{
    const kl_expr_t *b = w->body;
    const kl_access_t *xa = NULL;
    if (b && b->kind == KL_EX_MUL) {
        if (b->a->kind == KL_EX_LOAD && b->a->access.tensor == 0)
            xa = &b->a->access;
        else if (b->b->kind == KL_EX_LOAD && b->b->access.tensor == 0)
            xa = &b->b->access;
    }
    for (int i = 0; xa && i < w->niters; i++)
        if (w->out.idx[2].coef[i] && xa->idx[2].coef[i] > 0) {
            *stride = xa->idx[2].coef[i];
            *pad = -xa->idx[2].offset;
        }
}

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

int main(int argc, char **argv)
{
    bd_prog = "bench_tune_conv2d";
    const char *db = NULL, *workdir = NULL, *source = NULL;
    int rounds = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--db") && i + 1 < argc)
            db = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workdir") && i + 1 < argc)
            workdir = argv[++i];
        else if (!strcmp(argv[i], "--source") && i + 1 < argc)
            source = argv[++i];
        else {
            fprintf(stderr, "usage: bench_tune_conv2d --db DIR [--rounds N] "
                            "[--workdir DIR] [--source FILE]\n");
            return 2;
        }
    }
    if (!db || rounds < 3 || rounds > 1000) {
        fprintf(stderr, "bench_tune_conv2d: --db is required (--rounds "
                        "3..1000)\n");
        return 2;
    }
    char wbuf[512];
    if (!workdir) { /* the kernels' default work directory */
        snprintf(wbuf, sizeof wbuf, "%s/bench_tune_conv2d", s_tmpdir());
        workdir = wbuf;
    }
    bt_run_t r;
    bt_run_read(db, &r);
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(r.workload_text, &w, err) || w->ntensors != 3 ||
        w->tensors[0].ndim != 4 || w->tensors[1].ndim != 4 ||
        w->tensors[2].ndim != 4) {
        fprintf(stderr, "bench_tune_conv2d: %s is not a plain conv2d\n",
                r.workload_name);
        return 1;
    }
    printf("== %s: %zu trials, best %.1f GFLOP/s during tuning\n",
           r.workload_name, r.n, r.flop / r.best_s / 1e9);
    s_time_to_90(&r);
    bd_kctx_t k = {.k = source ? bt_load_source(source, workdir)
                               : bt_load_best(&r, workdir)};
    if (source)
        printf("kernel: %s (instead of the store's best)\n", source);
    float **kb = bt_alloc_bufs(w, 7), **db_ = bt_alloc_bufs(w, 7);
    k.args = bt_kernel_args(&k.k, w, kb);
    const kl_tensor_t *X = &w->tensors[0], *W = &w->tensors[1],
                      *Y = &w->tensors[2];
    int64_t stride = 1, pad = 0;
    s_stride_pad(w, &stride, &pad);
    printf("stride %lld, padding %lld\n", (long long)stride, (long long)pad);
    const dnnl_version_t *v = dnnl_version();
    dnnl_engine_t eng;
    dnnl_stream_t st;
    BD_CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    BD_CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_primitive_desc_t apd;
    if (s_dnnl_pd(eng, dnnl_convolution_auto, X->shape, W->shape, Y->shape,
                  stride, pad, &apd)) {
        const char *impl = NULL;
        BD_CK(
            dnnl_primitive_desc_query(apd, dnnl_query_impl_info_str, 0, &impl));
        printf("\n(oneDNN's own choice, algorithm auto: impl %s)\n", impl);
        dnnl_primitive_desc_destroy(apd);
    }
    static const dnnl_alg_kind_t algs[2] = {dnnl_convolution_direct,
                                            dnnl_convolution_winograd};
    static const char *names[2] = {"direct", "winograd"};
    double f = w->flop, e = 0, best_ratio = INFINITY;
    bd_ctx_t dd[2] = {{.eng = eng, .st = st}, {.eng = eng, .st = st}};
    bd_ctx_t *fast = NULL;
    for (int a = 0; a < 2; a++) {
        bd_ctx_t *d = &dd[a];
        if (!s_dnnl_setup(d, algs[a], X->shape, W->shape, Y->shape, stride, pad,
                          db_[0], db_[1], db_[2])) {
            printf("\n== oneDNN %d.%d.%d has no %s convolution for this "
                   "shape on this CPU\n",
                   v->major, v->minor, v->patch, names[a]);
            continue;
        }
        printf("\n== best tuned kernel vs oneDNN %d.%d.%d %s (impl %s)\n",
               v->major, v->minor, v->patch, names[a], d->impl);
        bt_stat_t sk, sd;
        bt_interleave(bd_kiln, &k, bd_dnnl, d, rounds, &sk, &sd);
        bd_output(d);
        double ea = bt_max_rel_err(kb[2], db_[2], (size_t)kl_tensor_numel(Y));
        e = ea > e ? ea : e;
        printf("oneDNN:     %7.1f GFLOP/s median (min %.1f, max %.1f) of %d "
               "samples\n",
               f / sd.med / 1e9, f / sd.max / 1e9, f / sd.min / 1e9, rounds);
        printf("kiln tuned: %7.1f GFLOP/s median (min %.1f, max %.1f); max "
               "rel. error vs oneDNN %.2g\n",
               f / sk.med / 1e9, f / sk.max / 1e9, f / sk.min / 1e9, ea);
        printf("ratio kiln / oneDNN %s: %.2f\n", names[a], sd.med / sk.med);
        if (sd.med / sk.med < best_ratio) {
            best_ratio = sd.med / sk.med;
            fast = d;
        }
    }
    if (!fast) {
        fprintf(stderr, "bench_tune_conv2d: oneDNN has no convolution\n");
        return 1;
    }
    printf("\nratio kiln / oneDNN (its faster algorithm): %.2f (goal >= "
           "1.0)\n",
           best_ratio);
    /* The same pair with warm caches (back-to-back calls, the weights
     * already in L2/L3): not the goal's figure, but it tells how much of
     * a gap is streaming the weights in. */
    bt_set_flush(false);
    bt_stat_t wk, wd;
    bt_interleave(bd_kiln, &k, bd_dnnl, fast, rounds, &wk, &wd);
    bt_set_flush(true);
    printf("warm caches: oneDNN %.1f, kiln %.1f GFLOP/s median, ratio %.2f\n",
           f / wd.med / 1e9, f / wk.med / 1e9, wd.med / wk.med);
    bt_print_load();
    printf("reproduce: OMP_NUM_THREADS=2 OMP_PROC_BIND=close %s --db %s "
           "--rounds %d%s%s\n",
           argv[0], db, rounds, source ? " --source " : "",
           source ? source : "");
    bt_args_free(w, k.args);
    bt_free_bufs(w, kb);
    bt_free_bufs(w, db_);
    kl_workload_free(&w);
    bt_run_free(&r);
    return e > 1e-3 ? 1 : 0;
}
