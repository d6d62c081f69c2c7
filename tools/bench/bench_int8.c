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

#include "bench_tune_util.h"
#include "kl_err.h"
#include "kl_util.h"

#define CK(x)                                                                  \
    do {                                                                       \
        dnnl_status_t st_ = (x);                                               \
        if (st_ != dnnl_success) {                                             \
            fprintf(stderr, "bench_int8: %s failed (%d)\n", #x, (int)st_);     \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

typedef struct {
    bt_kernel_t k;
    void **args;
} kctx_t;

static void s_kiln(void *p)
{
    kctx_t *k = p;
    k->k.fn(k->args);
}

typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t mm;
    dnnl_exec_arg_t args[3];
} dctx_t;

static void s_dnnl(void *p)
{
    dctx_t *d = p;
    CK(dnnl_primitive_execute(d->mm, d->st, 3, d->args));
    CK(dnnl_stream_wait(d->st));
}

/* Typed buffers of w: u8 / s8 inputs random, s32 output zeroed. */
static void **s_bufs(const kl_workload_t *w, uint64_t seed)
{
    void **b = kl_xcalloc((size_t)w->ntensors, sizeof *b);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    for (int t = 0; t < w->ntensors; t++) {
        const kl_tensor_t *ts = &w->tensors[t];
        int64_t n = kl_tensor_numel(ts);
        b[t] = kl_xcalloc((size_t)n, kl_dtype_size(ts->dtype));
        if (ts->is_output)
            continue;
        for (int64_t i = 0; i < n; i++) {
            int v = (int)(kl_rng_double(&rng) * 256);
            if (ts->dtype == KL_DT_U8)
                ((uint8_t *)b[t])[i] = (uint8_t)v;
            else
                ((int8_t *)b[t])[i] = (int8_t)(v - 128);
        }
    }
    return b;
}

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

int main(int argc, char **argv)
{
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
    kctx_t k = {.k = source ? bt_load_source(source, workdir)
                            : bt_load_best(&rq, workdir)};
    if (source)
        printf("kernel: %s (--source, not the store's best)\n", source);
    void **kb = s_bufs(w, 7);
    k.args = bt_kernel_args(&k.k, w, (float **)kb);

    /* oneDNN u8 x s8 -> s32 matmul, weights in its preferred layout. */
    dctx_t d;
    CK(dnnl_engine_create(&d.eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t smd, wmd_any, wmd_user, dmd;
    dnnl_dims_t sd = {M, K}, wd = {K, N}, dd = {M, N};
    CK(dnnl_memory_desc_init_by_tag(&smd, 2, sd, dnnl_u8, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&wmd_any, 2, wd, dnnl_s8,
                                    dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&wmd_user, 2, wd, dnnl_s8, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&dmd, 2, dd, dnnl_s32, dnnl_ab));
    dnnl_matmul_desc_t mmd;
    CK(dnnl_matmul_desc_init(&mmd, &smd, &wmd_any, NULL, &dmd));
    dnnl_primitive_desc_t pd;
    CK(dnnl_primitive_desc_create(&pd, &mmd, NULL, d.eng, NULL));
    const char *impl = NULL;
    CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    const dnnl_memory_desc_t *wmd =
        dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    void **db_ = s_bufs(w, 7);
    dnnl_memory_t ms, mwu, mw, md;
    CK(dnnl_memory_create(&ms, &smd, d.eng, db_[0]));
    CK(dnnl_memory_create(&mwu, &wmd_user, d.eng, db_[1]));
    CK(dnnl_memory_create(&mw, wmd, d.eng, DNNL_MEMORY_ALLOCATE));
    CK(dnnl_memory_create(&md, &dmd, d.eng, db_[2]));
    dnnl_primitive_desc_t rpd;
    CK(dnnl_reorder_primitive_desc_create(&rpd, &wmd_user, d.eng, wmd, d.eng,
                                          NULL));
    dnnl_primitive_t r;
    CK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, mwu}, {DNNL_ARG_TO, mw}};
    CK(dnnl_primitive_execute(r, d.st, 2, ra));
    CK(dnnl_stream_wait(d.st));
    CK(dnnl_primitive_create(&d.mm, pd));
    d.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ms};
    d.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
    d.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, md};
    printf("oneDNN %d.%d matmul implementation: %s\n", dnnl_version()->major,
           dnnl_version()->minor, impl);

    bt_stat_t sk, sd1;
    bt_interleave(s_kiln, &k, s_dnnl, &d, rounds, &sk, &sd1);
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
        kctx_t kf = {.k = bt_load_best(&rf, workdir)};
        float **fb = bt_alloc_bufs(wf, 7);
        kf.args = bt_kernel_args(&kf.k, wf, fb);
        bt_stat_t sk2, sf;
        bt_interleave(s_kiln, &k, s_kiln, &kf, rounds, &sk2, &sf);
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
