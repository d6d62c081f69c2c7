/* bench_space_cuda - the CUDA design space, measured on a machine without a
 * GPU.
 *
 * For each workload:
 *   1. candidates sampled (rule program + reject_if), postprocessed (launch
 *      plan and limits) and turned into CUDA C per CPU second, one core;
 *   2. the same with the NVRTC resource check: every candidate also
 *      compiled to a cubin for the arch (batches of --batch kernels per
 *      NVRTC program) and checked for registers x threads and spills;
 *      reported per CPU second and per wall second, with the share of
 *      candidates the check refused and the register / shared-memory
 *      spread.
 *
 * Usage: bench_space_cuda [--samples N] [--nvrtc-samples N] [--batch N]
 *                         [--arch sm_90] [--seed S]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_check.h"
#include "kl_codegen_cuda.h"
#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_space.h"

static const char *s_ops[] = {
    "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1",
    "matmul M=1024 N=1024 K=1024",
    "depthwise_conv2d N=1 C=128 H=56 W=56 R=3 S=3 stride=1 pad=1",
};

static double s_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Samples and generates n kernels; fills ks when not NULL. */
static int s_generate(const kl_space_t *sp, kl_rng_t *rng, int n,
                      kl_kernel_t *ks, long *tries_total, char *err)
{
    for (int i = 0; i < n; i++) {
        kl_trace_t *t = NULL;
        kl_sched_t *s = NULL;
        int tries = 0;
        int rc = kl_space_sample(sp, rng, &t, &s, 0, &tries, err);
        *tries_total += tries;
        kl_kernel_t k;
        char entry[32];
        snprintf(entry, sizeof entry, "c%d", i);
        if (!rc)
            rc = kl_codegen_cuda(s, kl_space_target(sp), entry, &k, err);
        kl_sched_destroy(&s);
        kl_trace_free(&t);
        if (rc)
            return rc;
        if (ks)
            ks[i] = k;
        else
            kl_kernel_free(&k);
    }
    return KL_OK;
}

static int s_cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static int s_bench(const char *op, const char *arch, int n, int nn, int batch,
                   uint64_t seed, kl_nvrtc_t *nv)
{
    char err[KL_ERRMSG_LEN], target[32];
    snprintf(target, sizeof target, "cuda/%s", arch);
    kl_workload_t *w = NULL;
    kl_space_t *sp = NULL;
    if (kl_workload_from_string(op, &w, err) ||
        kl_space_for_target(target, w, &sp, err)) {
        fprintf(stderr, "bench_space_cuda: %s: %s\n", op, err);
        kl_workload_free(&w);
        return 1;
    }
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    long tries = 0;
    double c0 = s_cpu();
    int rc = s_generate(sp, &rng, n, NULL, &tries, err);
    double cpu = s_cpu() - c0;
    if (rc) {
        fprintf(stderr, "bench_space_cuda: %s: %s\n", w->name, err);
        goto done;
    }
    printf("%s (%s)\n  sampled+postprocessed+generated: %d in %.3f CPU s = "
           "%.0f candidates/s (%.1f tries per valid sample)\n",
           w->name, target, n, cpu, n / cpu, (double)tries / n);
    if (!nv || nn <= 0)
        goto done;
    int refused = 0, nk = 0;
    int *regs = kl_xcalloc((size_t)nn, sizeof(int));
    long smem_max = 0;
    double w0 = kl_now_s(), nvrtc_wall = 0;
    c0 = s_cpu();
    for (int done_n = 0; done_n < nn; done_n += batch) {
        int m = nn - done_n < batch ? nn - done_n : batch;
        kl_kernel_t *ks = kl_xcalloc((size_t)m, sizeof *ks);
        int *rcs = kl_xcalloc((size_t)m, sizeof(int));
        kl_nvrtc_kernel_t *res = kl_xcalloc((size_t)m, sizeof *res);
        rc = s_generate(sp, &rng, m, ks, &tries, err);
        double t1 = kl_now_s();
        if (!rc)
            rc = kl_cuda_check_many(nv, ks, m, arch, rcs, NULL, res, err);
        nvrtc_wall += kl_now_s() - t1;
        for (int i = 0; !rc && i < m; i++) {
            refused += rcs[i] != 0;
            regs[nk++] = res[i].registers;
            if (res[i].smem_static > smem_max)
                smem_max = res[i].smem_static;
        }
        for (int i = 0; i < m; i++)
            kl_kernel_free(&ks[i]);
        free(ks);
        free(rcs);
        free(res);
        if (rc) {
            fprintf(stderr, "bench_space_cuda: %s: %s\n", w->name, err);
            free(regs);
            goto done;
        }
    }
    cpu = s_cpu() - c0;
    double wall = kl_now_s() - w0;
    qsort(regs, (size_t)nk, sizeof(int), s_cmp_int);
    printf("  with the NVRTC resource check (%s, %d per program): %d in "
           "%.2f CPU s / %.2f wall s = %.2f candidates/CPU s, %.2f/wall s "
           "(NVRTC %.0f ms per kernel)\n",
           arch, batch, nk, cpu, wall, nk / cpu, nk / wall,
           1e3 * nvrtc_wall / nk);
    printf("  refused by the check: %d of %d; registers per thread min %d "
           "median %d max %d; static shared memory max %ld bytes\n",
           refused, nk, regs[0], regs[nk / 2], regs[nk - 1], smem_max);
    free(regs);
done:
    kl_space_destroy(&sp);
    kl_workload_free(&w);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    int n = 2000, nn = 40, batch = 20;
    uint64_t seed = 1;
    const char *arch = "sm_90";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--samples") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nvrtc-samples") && i + 1 < argc)
            nn = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--arch") && i + 1 < argc)
            arch = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (uint64_t)atoll(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: bench_space_cuda [--samples N] [--nvrtc-samples "
                    "N] [--batch N] [--arch sm_90] [--seed S]\n");
            return 2;
        }
    }
    if (n < 1 || batch < 1) {
        fprintf(stderr, "bench_space_cuda: --samples and --batch must be "
                        ">= 1\n");
        return 2;
    }
    char err[KL_ERRMSG_LEN];
    kl_nvrtc_t *nv = kl_nvrtc_default(err);
    if (!nv)
        printf("NVRTC not available (%s): resource checks skipped\n", err);
    int rc = 0;
    for (size_t i = 0; i < sizeof s_ops / sizeof s_ops[0]; i++)
        rc |= s_bench(s_ops[i], arch, n, nn, batch, seed, nv);
    printf("reproduce: bench_space_cuda --samples %d --nvrtc-samples %d "
           "--batch %d --arch %s --seed %llu\n",
           n, nn, batch, arch, (unsigned long long)seed);
    return rc;
}
