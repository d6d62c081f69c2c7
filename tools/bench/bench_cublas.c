/* bench_cublas - the cuBLAS baseline of the GPU check (tests/gpu/run.sh):
 * row-major C = A x B in f32 with cublasSgemm, TF32 off
 * (CUBLAS_PEDANTIC_MATH: strict FP32), timed like kiln's CUDA agent:
 * CUDA events around `number` launches per sample, the L2 flushed (a
 * memset of twice its size) before each sample, the median of `repeat`
 * samples after a warm-up.
 *
 * usage: bench_cublas [M N K] [repeat]
 * Prints "cublas_gflops X", "cublas_us X" (median per call) and the
 * spread; exits 77 when there is no GPU. Built only when the CUDA toolkit
 * (cuBLAS, cudart) is found at build time. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv)
{
    int m = argc > 3 ? atoi(argv[1]) : 1024,
        n = argc > 3 ? atoi(argv[2]) : 1024,
        k = argc > 3 ? atoi(argv[3]) : 1024;
    int repeat = argc > 4 ? atoi(argv[4]) : 20;
    if (m < 1 || n < 1 || k < 1 || repeat < 1 || repeat > 10000) {
        fprintf(stderr, "usage: bench_cublas [M N K] [repeat]\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_cublas: SKIP: no CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    float *a, *b, *c;
    char *flush;
    size_t flush_n =
        2 * (size_t)(prop.l2CacheSize > 0 ? prop.l2CacheSize : 64 << 20);
    CK(cudaMalloc((void **)&a, (size_t)m * k * 4));
    CK(cudaMalloc((void **)&b, (size_t)k * n * 4));
    CK(cudaMalloc((void **)&c, (size_t)m * n * 4));
    CK(cudaMalloc((void **)&flush, flush_n));
    CK(cudaMemset(a, 0x3c, (size_t)m * k * 4)); /* ~0.0117f */
    CK(cudaMemset(b, 0x3c, (size_t)k * n * 4));
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    const float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    /* Row-major C = A B is column-major C^T = B^T A^T. */
#define GEMM()                                                                 \
    CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, n, a, k,   \
                   &beta, c, n))
    for (int i = 0; i < 10; i++)
        GEMM();
    CK(cudaDeviceSynchronize());
    /* number: enough calls for 20 ms per sample. */
    float ms = 0;
    CK(cudaEventRecord(e0, 0));
    GEMM();
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    int number = ms > 0 ? (int)(20.0 / ms) + 1 : 100;
    double *s = calloc((size_t)repeat, sizeof *s);
    for (int r = 0; r < repeat; r++) {
        CK(cudaMemsetAsync(flush, r & 0xff, flush_n, 0));
        CK(cudaEventRecord(e0, 0));
        for (int i = 0; i < number; i++)
            GEMM();
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        s[r] = ms * 1e-3 / number;
    }
    qsort(s, (size_t)repeat, sizeof *s, s_cmp);
    double med = s[repeat / 2], flop = 2.0 * m * n * k;
    printf("device %s\n", prop.name);
    printf("cublas_us %.3f\ncublas_gflops %.1f\ncublas_spread %.3f\n",
           med * 1e6, flop / med * 1e-9, (s[repeat - 1] - s[0]) / med);
    printf("command: bench_cublas %d %d %d %d (TF32 off, L2 flushed)\n", m, n,
           k, repeat);
    free(s);
    cublasDestroy(h);
    return 0;
}
