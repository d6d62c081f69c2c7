/* cuda_run_test: generated CUDA kernels on a real GPU.
 *
 * For each operator (small shapes) the naive kernel and a few sampled
 * kernels of the CUDA design space are compiled with NVRTC for the
 * device's exact arch, loaded with cuModuleLoadData, launched with
 * cuLaunchKernel on pseudo-random inputs and compared with the reference
 * interpreter (kl_workload_eval). libcuda is opened with dlopen, so the
 * test builds everywhere; without a driver, a device or NVRTC it prints why
 * and exits 77 (SKIP). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_check.h"
#include "kl_codegen_cuda.h"
#include "kl_err.h"
#include "kl_nvrtc.h"
#include "kl_space.h"

#define NSAMPLED 5
#define SKIP 77

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static struct {
    CUresult (*init)(unsigned);
    CUresult (*count)(int *);
    CUresult (*get)(int *, int);
    CUresult (*attr)(int *, int, int);
    CUresult (*name)(char *, int, int);
    CUresult (*retain)(void **, int);
    CUresult (*release)(int);
    CUresult (*set_current)(void *);
    CUresult (*load)(void **, const void *);
    CUresult (*unload)(void *);
    CUresult (*function)(void **, void *, const char *);
    CUresult (*func_attr)(void *, int, int);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, unsigned, void *, void **, void **);
    CUresult (*sync)(void);
    CUresult (*errname)(CUresult, const char **);
} cu;

#define CU_ATTR_CC_MAJOR 75
#define CU_ATTR_CC_MINOR 76
#define CU_FUNC_ATTR_MAX_DYN_SMEM 8

static const char *s_ops[] = {
    "matmul M=64 N=48 K=40",
    "batch_matmul B=2 M=32 N=24 K=16",
    "dense N=16 I=64 O=40",
    "conv2d N=1 C=8 H=14 W=14 K=16 R=3 S=3 stride=1 pad=1 bias=1 relu=1",
    "depthwise_conv2d N=1 C=16 H=15 W=15 R=3 S=3 stride=2 pad=1",
    "max_pool2d N=1 C=8 H=15 W=15 R=3 S=3 stride=2 pad=1",
    "avg_pool2d N=1 C=8 H=14 W=14 R=2 S=2",
};

static int s_load_driver(char *why)
{
    void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        snprintf(why, KL_ERRMSG_LEN, "no CUDA driver (libcuda.so.1: %s)",
                 dlerror());
        return -1;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cuInit", (void **)&cu.init},
        {"cuDeviceGetCount", (void **)&cu.count},
        {"cuDeviceGet", (void **)&cu.get},
        {"cuDeviceGetAttribute", (void **)&cu.attr},
        {"cuDeviceGetName", (void **)&cu.name},
        {"cuDevicePrimaryCtxRetain", (void **)&cu.retain},
        {"cuDevicePrimaryCtxRelease_v2", (void **)&cu.release},
        {"cuCtxSetCurrent", (void **)&cu.set_current},
        {"cuModuleLoadData", (void **)&cu.load},
        {"cuModuleUnload", (void **)&cu.unload},
        {"cuModuleGetFunction", (void **)&cu.function},
        {"cuFuncSetAttribute", (void **)&cu.func_attr},
        {"cuMemAlloc_v2", (void **)&cu.alloc},
        {"cuMemFree_v2", (void **)&cu.free},
        {"cuMemcpyHtoD_v2", (void **)&cu.htod},
        {"cuMemcpyDtoH_v2", (void **)&cu.dtoh},
        {"cuMemsetD8_v2", (void **)&cu.memset8},
        {"cuLaunchKernel", (void **)&cu.launch},
        {"cuCtxSynchronize", (void **)&cu.sync},
        {"cuGetErrorName", (void **)&cu.errname},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(dl, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, KL_ERRMSG_LEN, "libcuda.so.1 lacks %s", syms[i].name);
            return -1;
        }
    }
    return 0;
}

static const char *s_cuerr(CUresult r)
{
    const char *n = NULL;
    if (cu.errname(r, &n) || !n)
        return "CUDA_ERROR_?";
    return n;
}

/* Launches k from module mod on w; compares with the reference. Returns 0
 * or 1 (and prints why). */
static int s_run_one(void *mod, const kl_kernel_t *k, const kl_workload_t *w)
{
    char err[KL_ERRMSG_LEN];
    void *fn = NULL;
    CUresult r = cu.function(&fn, mod, k->entry);
    if (r) {
        printf("FAIL %s: cuModuleGetFunction: %s\n", k->entry, s_cuerr(r));
        return 1;
    }
    if (k->shared_bytes > 48 * 1024 &&
        (r = cu.func_attr(fn, CU_FUNC_ATTR_MAX_DYN_SMEM,
                          (int)k->shared_bytes))) {
        printf("FAIL %s: cuFuncSetAttribute: %s\n", k->entry, s_cuerr(r));
        return 1;
    }
    float **bufs = kl_check_alloc(w, 3, err);
    float **ref = kl_check_alloc(w, 3, err);
    kl_workload_eval(w, ref);
    int out = kl_workload_output(w), fail = 0;
    CUdeviceptr dev[KL_IR_MAX_TENSORS] = {0};
    void *params[KL_IR_MAX_TENSORS];
    for (int i = 0; i < w->ntensors; i++) {
        size_t n = (size_t)kl_tensor_numel(&w->tensors[i]) * sizeof(float);
        if ((r = cu.alloc(&dev[i], n)) ||
            (r = i == out ? cu.memset8(dev[i], 0xff, n)
                          : cu.htod(dev[i], bufs[i], n))) {
            printf("FAIL %s: allocation/copy: %s\n", k->entry, s_cuerr(r));
            fail = 1;
        }
        params[i] = &dev[i];
    }
    if (!fail &&
        ((r = cu.launch(fn, (unsigned)k->grid[0], (unsigned)k->grid[1],
                        (unsigned)k->grid[2], (unsigned)k->block[0],
                        (unsigned)k->block[1], (unsigned)k->block[2],
                        (unsigned)k->shared_bytes, NULL, params, NULL)) ||
         (r = cu.sync()))) {
        printf("FAIL %s: launch: %s\n", k->entry, s_cuerr(r));
        fail = 1;
    }
    int64_t n = kl_tensor_numel(&w->tensors[out]), bad = 0, first = -1;
    if (!fail && (r = cu.dtoh(bufs[out], dev[out], (size_t)n * 4))) {
        printf("FAIL %s: copy back: %s\n", k->entry, s_cuerr(r));
        fail = 1;
    }
    for (int64_t i = 0; !fail && i < n; i++) {
        double o = bufs[out][i], e = ref[out][i];
        if (!(fabs(o - e) <= 1e-4 + 1e-4 * fabs(e)) && bad++ == 0)
            first = i;
    }
    if (!fail && bad) {
        printf("FAIL %s: %lld of %lld outputs wrong, first [%lld] = %g "
               "(expected %g)\n",
               k->entry, (long long)bad, (long long)n, (long long)first,
               bufs[out][first], ref[out][first]);
        fail = 1;
    }
    for (int i = 0; i < w->ntensors; i++)
        if (dev[i])
            cu.free(dev[i]);
    kl_check_free(w, &bufs);
    kl_check_free(w, &ref);
    return fail;
}

/* The naive kernel and NSAMPLED sampled ones of op, compiled together. */
static int s_run_op(kl_nvrtc_t *nv, const char *target, const char *arch,
                    int op)
{
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    kl_space_t *sp = NULL;
    if (kl_workload_from_string(s_ops[op], &w, err) ||
        kl_space_for_target(target, w, &sp, err)) {
        printf("FAIL %s: %s\n", s_ops[op], err);
        kl_workload_free(&w);
        return 1;
    }
    kl_kernel_t ks[NSAMPLED + 1];
    int nk = 0, fail = 0;
    kl_rng_t rng;
    kl_rng_seed(&rng, 77 + (uint64_t)op);
    kl_buf_t src = {0};
    for (int i = 0; i <= NSAMPLED && !fail; i++) {
        kl_sched_t *s = NULL;
        kl_trace_t *t = NULL;
        char entry[32];
        snprintf(entry, sizeof entry, "%s%d", i ? "sampled" : "naive", i);
        int rc = i ? kl_space_sample(sp, &rng, &t, &s, 0, NULL, err)
                   : kl_sched_create(&s, w, err);
        if (!rc)
            rc = kl_codegen_cuda(s, kl_space_target(sp), entry, &ks[nk], err);
        if (rc) {
            printf("FAIL %s: %s\n", w->name, err);
            fail = 1;
        } else {
            kl_buf_puts(&src, ks[nk++].source);
        }
        kl_sched_destroy(&s);
        kl_trace_free(&t);
    }
    kl_nvrtc_opts_t o = {.arch = arch};
    kl_nvrtc_result_t *res = NULL;
    void *mod = NULL;
    CUresult r;
    if (!fail && kl_nvrtc_compile(nv, src.data, &o, &res, err)) {
        printf("FAIL %s: %s\n", w->name, err);
        fail = 1;
    } else if (!fail && (r = cu.load(&mod, res->image))) {
        printf("FAIL %s: cuModuleLoadData: %s\n", w->name, s_cuerr(r));
        fail = 1;
    }
    for (int i = 0; !fail && i < nk; i++)
        fail |= s_run_one(mod, &ks[i], w);
    if (!fail)
        printf("ok %s: %d kernels match the interpreter\n", w->name, nk);
    if (mod)
        cu.unload(mod);
    kl_nvrtc_result_free(&res);
    kl_buf_free(&src);
    for (int i = 0; i < nk; i++)
        kl_kernel_free(&ks[i]);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
    return fail;
}

int main(void)
{
    char why[KL_ERRMSG_LEN];
    int n = 0, dev = 0;
    CUresult r;
    if (s_load_driver(why)) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    if ((r = cu.init(0)) || (r = cu.count(&n)) || n == 0) {
        printf("SKIP: no CUDA device (cuInit/cuDeviceGetCount: %s, %d "
               "devices)\n",
               r ? s_cuerr(r) : "ok", n);
        return SKIP;
    }
    kl_nvrtc_t *nv = kl_nvrtc_default(why);
    if (!nv) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    int major = 0, minor = 0;
    char name[128] = "";
    void *ctx = NULL;
    if ((r = cu.get(&dev, 0)) || (r = cu.attr(&major, CU_ATTR_CC_MAJOR, dev)) ||
        (r = cu.attr(&minor, CU_ATTR_CC_MINOR, dev)) ||
        (r = cu.name(name, sizeof name, dev)) || (r = cu.retain(&ctx, dev)) ||
        (r = cu.set_current(ctx))) {
        printf("FAIL: device setup: %s\n", s_cuerr(r));
        return 1;
    }
    char arch[16], target[32];
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    snprintf(target, sizeof target, "cuda/%s", arch);
    if (kl_nvrtc_check_arch(nv, arch, why)) {
        printf("SKIP: %s (device %s)\n", why, name);
        return SKIP;
    }
    printf("device %s (%s)\n", name, arch);
    int fail = 0;
    for (size_t op = 0; op < sizeof s_ops / sizeof s_ops[0]; op++)
        fail |= s_run_op(nv, target, arch, (int)op);
    cu.release(dev);
    return fail;
}
