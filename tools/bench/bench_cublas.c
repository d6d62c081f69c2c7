/* bench_cublas - the cuBLAS baseline of the GPU check (tests/gpu/run.sh):
 * row-major C = A x B in f32 with cublasSgemm, TF32 off
 * (CUBLAS_PEDANTIC_MATH: strict FP32), timed like kiln's CUDA agent:
 * CUDA events around `number` launches per sample, the L2 flushed (a
 * memset of twice its size) before each sample, the median of `repeat`
 * samples after a warm-up.
 *
 * usage: bench_cublas [M N K [repeat [KERNEL.cu ENTRY GX GY GZ BX BY BZ
 * SHARED]]] Prints "cublas_gflops X", "cublas_us X" (median per call) and the
 * spread; exits 77 when there is no GPU. Built only when the CUDA toolkit
 * (cuBLAS, cudart) is found at build time.
 *
 * With a kiln kernel (CUDA C of the ABI kernel(A, B, C), e.g. the best of
 * a tuning run, its launch as kiln-agent uses it), the program compiles it
 * with NVRTC for this GPU, checks its output against cuBLAS's (rtol and
 * atol 1e-3), and times both interleaved (cuBLAS sample, kiln sample, ...,
 * each after an L2 flush): "kiln_gflops", "ratio" (kiln / cuBLAS). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_nvrtc.h"
#include "kl_util.h"
#include "kla_cuda_api.h"

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "bench_cublas: %s: %s\n", #x,                      \
                    cudaGetErrorString(e_));                                   \
            return 1;                                                          \
        }                                                                      \
    } while (0)
#define CB(x)                                                                  \
    do {                                                                       \
        cublasStatus_t s_ = (x);                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                     \
            fprintf(stderr, "bench_cublas: %s: status %d\n", #x, (int)s_);     \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A kiln kernel loaded through the driver API into the runtime's primary
 * context (both use the legacy default stream, so they are ordered). */
typedef struct {
    kla_cu_t *cu;
    CUmodule mod;
    CUfunction f;
    unsigned g[3], b[3], shared;
} s_kiln_t;

static int s_kiln_load(s_kiln_t *k, char **av, const struct cudaDeviceProp *p)
{
    char err[KL_ERRMSG_LEN], arch[16];
    char *src = NULL;
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        k->g[i] = (unsigned)atoi(av[2 + i]);
        k->b[i] = (unsigned)atoi(av[5 + i]);
    }
    k->shared = (unsigned)atoi(av[8]);
    snprintf(arch, sizeof arch, "sm_%d%d", p->major, p->minor);
    kl_nvrtc_t *nv = kl_nvrtc_default(err);
    kl_nvrtc_opts_t o = {.arch = arch, .no_resources = true};
    kl_nvrtc_result_t *r = NULL;
    if (kl_read_file(av[0], &src, &len, err) != KL_OK || !nv ||
        kl_nvrtc_compile(nv, src, &o, &r, err) != KL_OK ||
        kla_cu_open(&k->cu, NULL, err) != KL_OK) {
        fprintf(stderr, "bench_cublas: kernel %s: %s\n", av[0], err);
        free(src);
        kl_nvrtc_result_free(&r);
        return 1;
    }
    free(src);
    CUresult rc = k->cu->ModuleLoadData(&k->mod, r->image);
    kl_nvrtc_result_free(&r);
    if (!rc)
        rc = k->cu->ModuleGetFunction(&k->f, k->mod, av[1]);
    if (!rc && k->shared > 48 * 1024)
        rc = k->cu->FuncSetAttribute(
            k->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            (int)k->shared);
    if (rc) {
        fprintf(stderr, "bench_cublas: kernel %s: %s\n", av[1],
                kla_cu_strerror(k->cu, rc, err, sizeof err));
        return 1;
    }
    return 0;
}

static int s_kiln_launch(s_kiln_t *k, float *a, float *b, float *c)
{
    CUdeviceptr pa = (CUdeviceptr)(uintptr_t)a, pb = (CUdeviceptr)(uintptr_t)b,
                pc = (CUdeviceptr)(uintptr_t)c;
    void *params[] = {&pa, &pb, &pc};
    CUresult rc =
        k->cu->LaunchKernel(k->f, k->g[0], k->g[1], k->g[2], k->b[0], k->b[1],
                            k->b[2], k->shared, NULL, params, NULL);
    if (rc) {
        char m[256];
        fprintf(stderr, "bench_cublas: kiln kernel: %s\n",
                kla_cu_strerror(k->cu, rc, m, sizeof m));
    }
    return rc ? 1 : 0;
}

/* The kiln kernel's output against cuBLAS's (c_ref). */
static int s_kiln_check(s_kiln_t *k, float *a, float *b, float *c,
                        const float *c_ref, size_t n)
{
    float *x = malloc(n * 4), *y = malloc(n * 4);
    int bad = 0;
    double maxerr = 0;
    if (!x || !y || cudaMemset(c, 0xff, n * 4) != cudaSuccess ||
        s_kiln_launch(k, a, b, c) || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(x, c, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(y, c_ref, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
        bad = -1;
    for (size_t i = 0; !bad && i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= 1e-3 + 1e-3 * fabs(y[i])))
            bad = 1;
        maxerr = d > maxerr ? d : maxerr;
    }
    printf("kiln_check %s (max abs error vs cuBLAS %g)\n", bad ? "WRONG" : "ok",
           maxerr);
    free(x);
    free(y);
    return bad;
}

typedef struct {
    cublasHandle_t h;
    int m, n, k;
    float *a, *b, *c;
    s_kiln_t *kiln; /* NULL: cuBLAS only */
    char *flush;
    size_t flush_n;
    cudaEvent_t e0, e1;
} s_bench_t;

/* `number` calls of cuBLAS (which 0) or the kiln kernel (1) between two
 * events, after a flush when flush_val >= 0; seconds per call in *sec. */
static int s_sample(s_bench_t *x, int which, int number, int flush_val,
                    double *sec)
{
    const float alpha = 1.0f, beta = 0.0f;
    if (flush_val >= 0)
        CK(cudaMemsetAsync(x->flush, flush_val, x->flush_n, 0));
    CK(cudaEventRecord(x->e0, 0));
    for (int i = 0; i < number; i++) {
        /* Row-major C = A B is column-major C^T = B^T A^T. */
        if (which == 0)
            CB(cublasSgemm(x->h, CUBLAS_OP_N, CUBLAS_OP_N, x->n, x->m, x->k,
                           &alpha, x->b, x->n, x->a, x->k, &beta, x->c, x->n));
        else if (s_kiln_launch(x->kiln, x->a, x->b, x->c))
            return 1;
    }
    CK(cudaEventRecord(x->e1, 0));
    CK(cudaEventSynchronize(x->e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, x->e0, x->e1));
    *sec = ms * 1e-3 / number;
    return 0;
}

/* Warm-up, then `number` for 20 ms samples. */
static int s_number(s_bench_t *x, int which, int *number)
{
    double t = 0;
    if (s_sample(x, which, 10, -1, &t) || s_sample(x, which, 1, -1, &t))
        return 1;
    *number = t > 0 ? (int)(0.02 / t) + 1 : 100;
    return 0;
}

static void s_report(const char *who, double *s, int repeat, double flop)
{
    qsort(s, (size_t)repeat, sizeof *s, s_cmp);
    double med = s[repeat / 2];
    printf("%s_us %.3f\n%s_gflops %.1f\n%s_spread %.3f\n", who, med * 1e6, who,
           flop / med * 1e-9, who, (s[repeat - 1] - s[0]) / med);
}

int main(int argc, char **argv)
{
    s_bench_t x = {.m = argc > 3 ? atoi(argv[1]) : 1024,
                   .n = argc > 3 ? atoi(argv[2]) : 1024,
                   .k = argc > 3 ? atoi(argv[3]) : 1024};
    int repeat = argc > 4 ? atoi(argv[4]) : 20;
    if (x.m < 1 || x.n < 1 || x.k < 1 || repeat < 1 || repeat > 10000 ||
        (argc > 5 && argc != 14)) {
        fprintf(stderr, "usage: bench_cublas [M N K [repeat [KERNEL.cu ENTRY "
                        "GX GY GZ BX BY BZ SHARED]]]\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_cublas: SKIP: no CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    size_t na = (size_t)x.m * x.k, nb = (size_t)x.k * x.n,
           nc = (size_t)x.m * x.n;
    x.flush_n =
        2 * (size_t)(prop.l2CacheSize > 0 ? prop.l2CacheSize : 64 << 20);
    float *c_ref, *host = malloc((na > nb ? na : nb) * 4);
    CK(cudaMalloc((void **)&x.a, na * 4));
    CK(cudaMalloc((void **)&x.b, nb * 4));
    CK(cudaMalloc((void **)&x.c, nc * 4));
    CK(cudaMalloc((void **)&c_ref, nc * 4));
    CK(cudaMalloc((void **)&x.flush, x.flush_n));
    uint64_t st = 1;
    for (int t = 0; t < 2; t++) { /* uniform in [-1, 1) */
        size_t cnt = t ? nb : na;
        for (size_t i = 0; i < cnt; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            host[i] = (float)(st >> 40) * (1.0f / 8388608.0f) - 1.0f;
        }
        CK(cudaMemcpy(t ? x.b : x.a, host, cnt * 4, cudaMemcpyHostToDevice));
    }
    free(host);
    CB(cublasCreate(&x.h));
    CB(cublasSetMathMode(x.h, CUBLAS_PEDANTIC_MATH)); /* no TF32 */
    CK(cudaEventCreate(&x.e0));
    CK(cudaEventCreate(&x.e1));
    s_kiln_t kiln = {0};
    if (argc == 14) {
        CK(cudaFree(0)); /* the runtime's context, current for the driver */
        if (s_kiln_load(&kiln, argv + 5, &prop))
            return 1;
        x.kiln = &kiln;
    }
    int num[2] = {0, 0}, ways = x.kiln ? 2 : 1;
    double t;
    for (int w = 0; w < ways; w++)
        if (s_number(&x, w, &num[w]))
            return 1;
    if (x.kiln) { /* cuBLAS's output is the reference */
        if (s_sample(&x, 0, 1, -1, &t))
            return 1;
        CK(cudaMemcpy(c_ref, x.c, nc * 4, cudaMemcpyDeviceToDevice));
        if (s_kiln_check(&kiln, x.a, x.b, x.c, c_ref, nc))
            return 1;
    }
    double *s[2] = {calloc((size_t)repeat, sizeof(double)),
                    calloc((size_t)repeat, sizeof(double))};
    for (int r = 0; r < repeat; r++)
        for (int w = 0; w < ways; w++) {
            if (s_sample(&x, w, num[w], r & 0xff, &t))
                return 1;
            s[w][r] = t;
        }
    double flop = 2.0 * x.m * x.n * x.k;
    printf("device %s\n", prop.name);
    s_report("cublas", s[0], repeat, flop);
    if (x.kiln) {
        s_report("kiln", s[1], repeat, flop);
        printf("ratio %.3f (kiln / cuBLAS, interleaved)\n",
               s[0][repeat / 2] / s[1][repeat / 2]);
    }
    printf("command: bench_cublas %d %d %d %d%s (TF32 off, L2 flushed)\n", x.m,
           x.n, x.k, repeat, x.kiln ? " KERNEL ..." : "");
    free(s[0]);
    free(s[1]);
    cublasDestroy(x.h);
    return 0;
}
