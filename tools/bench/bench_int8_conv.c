/* bench_int8_conv - kiln's best tensorized int8 convolutions against
 * oneDNN's u8 x s8 -> s32 convolution, layer by layer, in one process.
 *
 * Each --db is the store of a tuning run of one
 *   qconv2d N= C= H= W= K= R= S= stride= pad= out=s32 layout=NHWC
 * (u8 activations without a zero point x const s8 weights -> s32, no
 * epilogue: exactly what oneDNN's u8s8s32 convolution computes). Its best
 * kernel is regenerated (cc -O3 -march=native -fopenmp; the weights packed
 * once by its prepare step, outside the timing) and timed interleaved with
 * oneDNN's convolution (same threads: OMP_NUM_THREADS), caches flushed
 * before every sample. oneDNN is configured as its users do: every memory
 * descriptor format_tag_any (it picks its blocked layouts), algorithm
 * convolution_auto, the weights and the source reordered once into its
 * layouts outside the timing (a network keeps its activations in them);
 * kiln reads and writes plain NHWC. The outputs (oneDNN's reordered to
 * NHWC) must be equal. Medians over the samples, min / max as the spread,
 * the ratio of medians kiln / oneDNN in ops per second, and the ratio of
 * the fastest samples (the least disturbed on a shared machine). Operations are
 * counted 2 per multiply-add (padding taps not counted: the workload's exact
 * flop).
 *
 * Usage: bench_int8_conv --db DIR [--db DIR ...] [--rounds N]
 *                        [--workdir DIR]
 */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dnnl_util.h"
#include "bench_tune_util.h"
#include "kl_err.h"
#include "kl_util.h"

#define MAXDB 16

typedef struct {
    char name[128];
    double kmed, dmed, kmin, dmin;
    bool same;
} row_t;

/* One layer: false when the store's workload is not a plain NHWC u8s8s32
 * qconv2d. */
static bool s_layer(const char *db, int rounds, const char *workdir,
                    bd_ctx_t *d, row_t *row)
{
    char err[KL_ERRMSG_LEN];
    bt_run_t rq;
    bt_run_read(db, &rq);
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(rq.workload_text, &w, err)) {
        fprintf(stderr, "bench_int8_conv: %s\n", err);
        return false;
    }
    int ot = kl_workload_output(w);
    const kl_expr_t *b = w->body;
    if (w->ntensors != 3 || ot != 2 || w->tensors[0].dtype != KL_DT_U8 ||
        w->tensors[1].dtype != KL_DT_S8 || w->tensors[2].dtype != KL_DT_S32 ||
        w->nepi || !b || b->kind != KL_EX_MUL || b->a->kind != KL_EX_LOAD ||
        w->tensors[0].ndim != 4) {
        fprintf(stderr,
                "bench_int8_conv: %s is not a plain u8 x s8 -> s32 NHWC "
                "qconv2d (want qconv2d ... out=s32 layout=NHWC, no za)\n",
                rq.workload_name);
        return false;
    }
    const int64_t *xs = w->tensors[0].shape, *ws = w->tensors[1].shape,
                  *ys = w->tensors[2].shape;
    /* X[n, y*stride + r*dil - pad, ...]: stride, pad from row index. */
    const kl_affine_t *hi = &b->a->access.idx[1];
    int64_t stride = 1, pad = -hi->offset;
    for (int i = 0; i < w->niters; i++)
        if (hi->coef[i] && !w->iters[i].reduce)
            stride = hi->coef[i];
        else if (hi->coef[i] != 0 && hi->coef[i] != 1) {
            fprintf(stderr,
                    "bench_int8_conv: %s: dilation is not "
                    "supported here\n",
                    rq.workload_name);
            return false;
        }
    double ops = w->flop;
    snprintf(row->name, sizeof row->name, "%s", rq.workload_name);
    printf("== %s on %s: kiln's best of %zu trials (tuning measured %.1f "
           "GOP/s)\n",
           rq.workload_name, rq.target, rq.n, ops / rq.best_s / 1e9);
    bd_kctx_t k = {.k = bt_load_best(&rq, workdir)};
    void **kb = bd_int8_bufs(w, 7);
    k.args = bt_kernel_args(&k.k, w, (float **)kb);

    /* oneDNN: logical dims NCHW / OIHW whatever the layouts */
    dnnl_dims_t xd = {xs[0], xs[3], xs[1], xs[2]};
    dnnl_dims_t wd = {ws[3], ws[2], ws[0], ws[1]};
    dnnl_dims_t yd = {ys[0], ys[3], ys[1], ys[2]};
    dnnl_memory_desc_t xm, wm, ym;
    BD_CK(
        dnnl_memory_desc_init_by_tag(&xm, 4, xd, dnnl_u8, dnnl_format_tag_any));
    BD_CK(
        dnnl_memory_desc_init_by_tag(&wm, 4, wd, dnnl_s8, dnnl_format_tag_any));
    BD_CK(dnnl_memory_desc_init_by_tag(&ym, 4, yd, dnnl_s32,
                                       dnnl_format_tag_any));
    dnnl_dims_t strides = {stride, stride}, pl = {pad, pad}, pr;
    pr[0] = (ys[1] - 1) * stride + ws[0] - xs[1] - pad;
    pr[1] = (ys[2] - 1) * stride + ws[1] - xs[2] - pad;
    dnnl_convolution_desc_t cd;
    BD_CK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                             dnnl_convolution_auto, &xm, &wm,
                                             NULL, &ym, strides, pl, pr));
    dnnl_primitive_desc_t pd;
    BD_CK(dnnl_primitive_desc_create(&pd, &cd, NULL, d->eng, NULL));
    const char *impl = NULL;
    BD_CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    BD_CK(dnnl_primitive_create(&d->prim, pd));
    void **db_ = bd_int8_bufs(w, 7);
    dnnl_memory_t mx =
        bd_prep(d, pd, dnnl_query_src_md, 4, xd, dnnl_u8, dnnl_nhwc, db_[0]);
    dnnl_memory_t mw = bd_prep(d, pd, dnnl_query_weights_md, 4, wd, dnnl_s8,
                               dnnl_hwio, db_[1]);
    BD_CK(dnnl_memory_create(
        &d->dst, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), d->eng,
        DNNL_MEMORY_ALLOCATE));
    dnnl_memory_desc_t umd;
    BD_CK(dnnl_memory_desc_init_by_tag(&umd, 4, yd, dnnl_s32, dnnl_nhwc));
    BD_CK(dnnl_memory_create(&d->user_dst, &umd, d->eng, db_[2]));
    d->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mx};
    d->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
    d->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, d->dst};
    printf("oneDNN %d.%d convolution implementation: %s\n",
           dnnl_version()->major, dnnl_version()->minor, impl);

    bt_stat_t sk, sd;
    bt_interleave(bd_kiln, &k, bd_dnnl, d, rounds, &sk, &sd);
    bd_output(d);
    size_t obytes = (size_t)kl_tensor_numel(&w->tensors[2]) * 4;
    row->same = memcmp(kb[2], db_[2], obytes) == 0;
    printf("oneDNN u8s8s32: %8.1f us median (min %.1f, max %.1f) = %.1f "
           "GOP/s, %d samples\n",
           sd.med * 1e6, sd.min * 1e6, sd.max * 1e6, ops / sd.med / 1e9,
           rounds);
    printf("kiln int8:      %8.1f us median (min %.1f, max %.1f) = %.1f "
           "GOP/s; outputs %s\n",
           sk.med * 1e6, sk.min * 1e6, sk.max * 1e6, ops / sk.med / 1e9,
           row->same ? "equal" : "DIFFER");
    printf("ratio kiln / oneDNN (ops per second): %.2f\n", sd.med / sk.med);
    row->kmed = sk.med;
    row->dmed = sd.med;
    row->kmin = sk.min;
    row->dmin = sd.min;
    dnnl_primitive_destroy(d->prim);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(mx);
    dnnl_memory_destroy(mw);
    dnnl_memory_destroy(d->dst);
    dnnl_memory_destroy(d->user_dst);
    bt_args_free(w, k.args);
    for (int t = 0; t < w->ntensors; t++) {
        free(kb[t]);
        free(db_[t]);
    }
    free(kb);
    free(db_);
    kl_workload_free(&w);
    bt_run_free(&rq);
    return true;
}

int main(int argc, char **argv)
{
    bd_prog = "bench_int8_conv";
    const char *dbs[MAXDB], *workdir = "/tmp/bench_int8_conv";
    int ndb = 0, rounds = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--db") && i + 1 < argc && ndb < MAXDB)
            dbs[ndb++] = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workdir") && i + 1 < argc)
            workdir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_int8_conv --db DIR [--db DIR ...] "
                            "[--rounds N] [--workdir DIR]\n");
            return 2;
        }
    }
    if (!ndb || rounds < 3 || rounds > 1000) {
        fprintf(stderr,
                "bench_int8_conv: --db is required (--rounds 3..1000)\n");
        return 2;
    }
    bt_clean_env(argc, argv, false);
    bd_ctx_t d;
    BD_CK(dnnl_engine_create(&d.eng, dnnl_cpu, 0));
    BD_CK(dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags));
    row_t rows[MAXDB];
    bool ok = true;
    for (int i = 0; i < ndb; i++) {
        /* a directory per layer: two stores' best records may share a
         * sequence number, and so the kernel file's name */
        char *wd = kl_xasprintf("%s/%d", workdir, i);
        ok = s_layer(dbs[i], rounds, wd, &d, &rows[i]) && ok;
        free(wd);
    }
    if (!ok)
        return 2;
    /* medians, and the fastest samples (the least disturbed on a shared
     * machine) */
    printf("\n%-44s %9s %9s %6s %9s %9s %6s %s\n", "layer", "kiln med",
           "dnnl med", "ratio", "kiln min", "dnnl min", "ratio", "outputs");
    for (int i = 0; i < ndb; i++) {
        printf("%-44s %9.1f %9.1f %6.2f %9.1f %9.1f %6.2f %s\n", rows[i].name,
               rows[i].kmed * 1e6, rows[i].dmed * 1e6,
               rows[i].dmed / rows[i].kmed, rows[i].kmin * 1e6,
               rows[i].dmin * 1e6, rows[i].dmin / rows[i].kmin,
               rows[i].same ? "equal" : "DIFFER");
        ok = ok && rows[i].same;
    }
    bt_print_load();
    const char *nth = getenv("OMP_NUM_THREADS");
    printf("reproduce: OMP_NUM_THREADS=%s OMP_PROC_BIND=close nice %s",
           nth ? nth : "(unset)", argv[0]);
    for (int i = 0; i < ndb; i++)
        printf(" --db %s", dbs[i]);
    printf(" --rounds %d\n", rounds);
    return ok ? 0 : 1;
}
