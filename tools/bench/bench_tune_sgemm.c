/* bench_tune_sgemm - what `kiln tune` achieves on SGEMM 1024^3 (f32).
 *
 * Reads the stores of two tuning runs of "matmul M=1024 N=1024 K=1024" on
 * target cpu, one per strategy, and reports:
 *  1. sample efficiency: replay's best after all its trials, and the
 *     number of trials the evolutionary run needed to reach it (goal
 *     <= 300 when replay ran 1000), with best-after-k for both;
 *  2. the evolutionary run's best kernel (regenerated from its trace,
 *     compiled with cc -O3 -march=native -fopenmp) against OpenBLAS
 *     cblas_sgemm in the same process, interleaved, caches flushed
 *     before every sample, on the threads of OMP_NUM_THREADS (run it with
 *     2, pinned: OMP_PROC_BIND=close); output checked against sgemm.
 * OpenBLAS runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (the
 * program re-executes itself without them; --keep-blas-env keeps them).
 *
 * Make the stores first, e.g.
 *   kiln tune --op "matmul M=1024 N=1024 K=1024" --strategy evolutionary \
 *       --max-trials-per-task 1000 --db EVO ...
 *   kiln tune --op "matmul M=1024 N=1024 K=1024" --strategy replay \
 *       --max-trials-per-task 1000 --db REPLAY ...
 * Usage: bench_tune_sgemm --evo EVO --replay REPLAY [--rounds N]
 *                         [--workdir DIR] [--keep-blas-env]
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tune_util.h"
#include "kl_err.h"
#include "kl_util.h"

typedef struct {
    bt_kernel_t k;
    void **args; /* the tensors, then the prepared block */
} kctx_t;

static void s_kiln(void *ctx)
{
    kctx_t *k = ctx;
    k->k.fn((void *const *)k->args);
}

static int s_n;

static void s_blas(void *ctx)
{
    float **b = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s_n, s_n, s_n, 1.0f,
                b[0], s_n, b[1], s_n, 0.0f, b[2], s_n);
}

static void s_curve(const char *name, const bt_run_t *r)
{
    static const size_t ks[] = {50, 100, 200, 300, 500, 700, 1000, 2000};
    printf("%-13s %5zu trials, best-after-k (GFLOP/s):", name, r->n);
    for (size_t i = 0; i < sizeof ks / sizeof *ks && ks[i] <= r->n; i++) {
        double b = bt_best_after(r, ks[i]);
        printf(" %zu:%.1f", ks[i], isfinite(b) ? r->flop / b / 1e9 : 0.0);
    }
    double b = bt_best_after(r, r->n);
    printf(" all:%.1f\n", isfinite(b) ? r->flop / b / 1e9 : 0.0);
}

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

int main(int argc, char **argv)
{
    const char *evo = NULL, *rep = NULL, *workdir = NULL;
    int rounds = 15;
    bool keep = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--evo") && i + 1 < argc)
            evo = argv[++i];
        else if (!strcmp(argv[i], "--replay") && i + 1 < argc)
            rep = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workdir") && i + 1 < argc)
            workdir = argv[++i];
        else if (!strcmp(argv[i], "--keep-blas-env"))
            keep = true;
        else {
            fprintf(stderr, "usage: bench_tune_sgemm --evo DIR --replay DIR "
                            "[--rounds N] [--workdir DIR] "
                            "[--keep-blas-env]\n");
            return 2;
        }
    }
    if (!evo || !rep || rounds < 3 || rounds > 1000) {
        fprintf(stderr, "bench_tune_sgemm: --evo and --replay are required "
                        "(--rounds 3..1000)\n");
        return 2;
    }
    char wbuf[512];
    if (!workdir) { /* the kernels' default work directory */
        snprintf(wbuf, sizeof wbuf, "%s/bench_tune_sgemm", s_tmpdir());
        workdir = wbuf;
    }
    bt_clean_env(argc, argv, keep);
    /* OpenBLAS's detection does not know every AVX-512 model; then it
     * falls back to old kernels, which is not its best (docs/benchmarking.md).
     */
    __builtin_cpu_init();
    if (!keep && __builtin_cpu_supports("avx512f") &&
        !strstr(openblas_get_corename(), "kylakex") &&
        !strstr(openblas_get_corename(), "ooperlake") &&
        !strstr(openblas_get_corename(), "apphire"))
        bt_force_core(argv, "SkylakeX", "OpenBLAS picked no AVX-512 kernels");
    bt_run_t re, rr;
    bt_run_read(evo, &re);
    bt_run_read(rep, &rr);
    printf("== sample efficiency (%s)\n", re.workload_name);
    s_curve("evolutionary", &re);
    s_curve("replay", &rr);
    double rbest = bt_best_after(&rr, rr.n);
    size_t need = bt_trials_to_reach(&re, rbest);
    if (need)
        printf("evolutionary reached replay's best-after-%zu (%.1f GFLOP/s) "
               "after %zu trials (goal <= 300 for 1000)\n",
               rr.n, rr.flop / rbest / 1e9, need);
    else
        printf("evolutionary did not reach replay's best-after-%zu (%.1f "
               "GFLOP/s) in its %zu trials\n",
               rr.n, rr.flop / rbest / 1e9, re.n);

    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(re.workload_text, &w, err)) {
        fprintf(stderr, "bench_tune_sgemm: %s\n", err);
        return 1;
    }
    s_n = (int)w->iters[0].extent;
    /* The same threads as the kernel's OpenMP (OMP_NUM_THREADS, else 2). */
    const char *omp = getenv("OMP_NUM_THREADS");
    openblas_set_num_threads(omp && atoi(omp) > 0 ? atoi(omp) : 2);
    printf("\n== best tuned kernel vs OpenBLAS (%d threads, core %s)\n",
           openblas_get_num_threads(), openblas_get_corename());
    kctx_t k = {.k = bt_load_best(&re, workdir)};
    float **kb = bt_alloc_bufs(w, 7), **bb = bt_alloc_bufs(w, 7);
    k.args = bt_kernel_args(&k.k, w, kb);
    bt_stat_t sk, sb;
    bt_interleave(s_kiln, &k, s_blas, bb, rounds, &sk, &sb);
    size_t nout = (size_t)kl_tensor_numel(&w->tensors[2]);
    double e = bt_max_rel_err(kb[2], bb[2], nout);
    double f = w->flop;
    printf("OpenBLAS sgemm: %7.1f GFLOP/s median (min %.1f, max %.1f) of %d "
           "samples\n",
           f / sb.med / 1e9, f / sb.max / 1e9, f / sb.min / 1e9, rounds);
    printf("kiln tuned:     %7.1f GFLOP/s median (min %.1f, max %.1f); "
           "tuning measured %.1f GFLOP/s; max rel. error %.2g\n",
           f / sk.med / 1e9, f / sk.max / 1e9, f / sk.min / 1e9,
           f / re.best_s / 1e9, e);
    printf("ratio kiln / OpenBLAS: %.2f (goal >= 0.9)\n", sb.med / sk.med);
    bt_print_load();
    printf("reproduce: OMP_NUM_THREADS=2 OMP_PROC_BIND=close %s --evo %s "
           "--replay %s --rounds %d\n",
           argv[0], evo, rep, rounds);
    bt_args_free(w, k.args);
    bt_free_bufs(w, kb);
    bt_free_bufs(w, bb);
    kl_workload_free(&w);
    bt_run_free(&re);
    bt_run_free(&rr);
    return e > 1e-3 ? 1 : 0;
}
