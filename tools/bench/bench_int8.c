/* bench_int8 - kiln's best tensorized int8 matmul against oneDNN's
 * u8 x s8 -> s32 matmul and against kiln's f32 sgemm, in one process.
 *
 * Reads the store of a tuning run of
 *   qmatmul M=1024 N=1024 K=1024 out=s32      (u8 x const s8 -> s32, no
 *                                              zero point: exactly what
 *                                              oneDNN's u8s8s32 computes)
 * regenerates its best kernel (cc -O3 -march=native -fopenmp; the weights
 * packed once by its prepare step, outside the timing, as oneDNN's weights
 * are reordered once into the layout it prefers), and times it interleaved
 * with oneDNN's matmul (same threads: OMP_NUM_THREADS), caches flushed
 * before every sample; the two s32 outputs must be equal. With --f32-db,
 * the best kernel of a tuned `matmul M=1024 N=1024 K=1024` (f32) is timed
 * the same way against the int8 kernel. Medians over the samples; ratios
 * of medians. Operations are counted 2 per multiply-add for both dtypes.
 *
 * Usage: bench_int8 --db DIR [--f32-db DIR] [--rounds N] [--workdir DIR]
 *                   [--source FILE.c]
 * --source times FILE.c (entry kl_main, with its prepare) instead of the
 * store's best: a hand-edited copy of a generated kernel, to try a change
 * of the generated code without tuning again.
 */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dnnl_util.h"
#include "bench_tune_util.h"
#include "kl_err.h"
#include "kl_util.h"

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

int main(int argc, char **argv)
{
    bd_prog = "bench_int8";
    const char *db = NULL, *fdb = NULL, *workdir = NULL;
    const char *source = NULL;
    int rounds = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--db") && i + 1 < argc)
            db = argv[++i];
        else if (!strcmp(argv[i], "--f32-db") && i + 1 < argc)
            fdb = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workdir") && i + 1 < argc)
            workdir = argv[++i];
        else if (!strcmp(argv[i], "--source") && i + 1 < argc)
            source = argv[++i];
        else {
            fprintf(stderr, "usage: bench_int8 --db DIR [--f32-db DIR] "
                            "[--rounds N] [--workdir DIR] [--source FILE.c]\n");
            return 2;
        }
    }
    if (!db || rounds < 3 || rounds > 1000) {
        fprintf(stderr, "bench_int8: --db is required (--rounds 3..1000)\n");
        return 2;
    }
    char wbuf[512];
    if (!workdir) { /* the kernels' default work directory */
        snprintf(wbuf, sizeof wbuf, "%s/bench_int8", s_tmpdir());
        workdir = wbuf;
    }
    bt_clean_env(argc, argv, false);
    char err[KL_ERRMSG_LEN];
    bt_run_t rq;
    bt_run_read(db, &rq);
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(rq.workload_text, &w, err)) {
        fprintf(stderr, "bench_int8: %s\n", err);
        return 1;
    }
    int ot = kl_workload_output(w);
    if (w->ntensors != 3 || w->tensors[0].dtype != KL_DT_U8 ||
        w->tensors[1].dtype != KL_DT_S8 || w->tensors[ot].dtype != KL_DT_S32 ||
        w->nepi != 0) {
        fprintf(stderr,
                "bench_int8: %s is not a plain u8 x s8 -> s32 qmatmul "
                "(want qmatmul M= N= K= out=s32)\n",
                rq.workload_name);
        return 2;
    }
    int64_t M = w->tensors[0].shape[0], K = w->tensors[0].shape[1],
            N = w->tensors[1].shape[1];
    double ops = 2.0 * (double)M * (double)N * (double)K;
    printf("== %s on %s: kiln's best of %zu trials (tuning measured %.1f "
           "GOP/s)\n",
           rq.workload_name, rq.target, rq.n, ops / rq.best_s / 1e9);
    bd_kctx_t k = {.k = source ? bt_load_source(source, workdir)
                               : bt_load_best(&rq, workdir)};
    if (source)
        printf("kernel: %s (--source, not the store's best)\n", source);
    void **kb = bd_int8_bufs(w, 7);
    k.args = bt_kernel_args(&k.k, w, (float **)kb);

    /* oneDNN u8 x s8 -> s32 matmul, weights in its preferred layout. */
    bd_ctx_t d;
    BD_CK(dnnl_engine_create(&d.eng, dnnl_cpu, 0));
    BD_CK(dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t smd, wmd_any, dmd;
    dnnl_dims_t sd = {M, K}, wd = {K, N}, dd = {M, N};
    BD_CK(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_u8, dnnl_ab));
    BD_CK(dnnl_memory_desc_init_by_tag(&wmd_any, 2, wd, dnnl_s8,
                                       dnnl_format_tag_any));
    BD_CK(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_s32, dnnl_ab));
    dnnl_matmul_desc_t mmd;
    BD_CK(dnnl_matmul_desc_init(&mmd, &smd, &wmd_any, NULL, &dmd));
    dnnl_primitive_desc_t pd;
    BD_CK(dnnl_primitive_desc_create(&pd, &mmd, NULL, d.eng, NULL));
    const char *impl = NULL;
    BD_CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    void **db_ = bd_int8_bufs(w, 7);
    dnnl_memory_t ms, md;
    BD_CK(dnnl_memory_create(&ms, &smd, d.eng, db_[0]));
    dnnl_memory_t mw =
        bd_prep(&d, pd, dnnl_query_weights_md, 2, wd, dnnl_s8, dnnl_ab, db_[1]);
    BD_CK(dnnl_memory_create(&md, &dmd, d.eng, db_[2]));
    BD_CK(dnnl_primitive_create(&d.prim, pd));
    d.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ms};
    d.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
    d.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, md};
    printf("oneDNN %d.%d matmul implementation: %s\n", dnnl_version()->major,
           dnnl_version()->minor, impl);

    bt_stat_t sk, sd1;
    bt_interleave(bd_kiln, &k, bd_dnnl, &d, rounds, &sk, &sd1);
    size_t obytes = (size_t)(M * N) * 4;
    bool same = memcmp(kb[2], db_[2], obytes) == 0;
    printf("oneDNN u8s8s32: %8.1f GOP/s median (min %.1f, max %.1f) of %d "
           "samples\n",
           ops / sd1.med / 1e9, ops / sd1.max / 1e9, ops / sd1.min / 1e9,
           rounds);
    printf("kiln int8:      %8.1f GOP/s median (min %.1f, max %.1f); "
           "outputs %s\n",
           ops / sk.med / 1e9, ops / sk.max / 1e9, ops / sk.min / 1e9,
           same ? "equal" : "DIFFER");
    printf("ratio kiln int8 / oneDNN u8s8s32: %.2f\n", sd1.med / sk.med);

    if (fdb) {
        bt_run_t rf;
        bt_run_read(fdb, &rf);
        kl_workload_t *wf = NULL;
        if (kl_workload_from_string(rf.workload_text, &wf, err)) {
            fprintf(stderr, "bench_int8: %s\n", err);
            return 1;
        }
        bd_kctx_t kf = {.k = bt_load_best(&rf, workdir)};
        float **fb = bt_alloc_bufs(wf, 7);
        kf.args = bt_kernel_args(&kf.k, wf, fb);
        bt_stat_t sk2, sf;
        bt_interleave(bd_kiln, &k, bd_kiln, &kf, rounds, &sk2, &sf);
        double fops = wf->flop;
        printf("kiln f32 (%s, best of %zu): %8.1f GFLOP/s median; kiln "
               "int8 in the same run %.1f GOP/s\n",
               rf.workload_name, rf.n, fops / sf.med / 1e9,
               ops / sk2.med / 1e9);
        printf("ratio kiln int8 / kiln f32 (ops per second): %.2f\n",
               (ops / sk2.med) / (fops / sf.med));
        bt_args_free(wf, kf.args);
        bt_free_bufs(wf, fb);
        kl_workload_free(&wf);
        bt_run_free(&rf);
    }
    bt_print_load();
    printf("reproduce: OMP_NUM_THREADS=2 OMP_PROC_BIND=close %s --db %s%s%s "
           "--rounds %d\n",
           argv[0], db, fdb ? " --f32-db " : "", fdb ? fdb : "", rounds);
    return same ? 0 : 1;
}
