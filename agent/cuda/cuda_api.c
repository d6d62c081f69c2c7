/* cuda_api.c - the CUDA driver API through dlopen; see kla_cuda_api.h. */
#include "kla_cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

#ifdef KLA_HAVE_CUDA_H
/* The fallback declarations must keep the toolkit's numbers. */
_Static_assert(CUDA_ERROR_ILLEGAL_ADDRESS == 700, "cuda.h");
_Static_assert(CUDA_ERROR_LAUNCH_FAILED == 719, "cuda.h");
_Static_assert(CUDA_ERROR_NO_DEVICE == 100, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK == 1, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID == 33, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID == 34, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID == 50, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK == 8, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK == 12, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_CLOCK_RATE == 13, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == 16, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE == 36, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE == 38, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == 75, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == 76, "cuda.h");
_Static_assert(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN == 97,
               "cuda.h");
_Static_assert(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK == 0, "cuda.h");
_Static_assert(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES == 1, "cuda.h");
_Static_assert(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES == 3, "cuda.h");
_Static_assert(CU_FUNC_ATTRIBUTE_NUM_REGS == 4, "cuda.h");
_Static_assert(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES == 8, "cuda.h");
_Static_assert(sizeof(CUdeviceptr) == 8, "cuda.h");
#endif

static int s_bind(kla_cu_t *cu, const char *path, char *err)
{
    /* name, fallback name (older or newer driver), slot */
    struct {
        const char *name, *alt;
        void **slot;
    } t[] = {
        {"cuInit", NULL, (void **)&cu->Init},
        {"cuDriverGetVersion", NULL, (void **)&cu->DriverGetVersion},
        {"cuDeviceGetCount", NULL, (void **)&cu->DeviceGetCount},
        {"cuDeviceGet", NULL, (void **)&cu->DeviceGet},
        {"cuDeviceGetName", NULL, (void **)&cu->DeviceGetName},
        {"cuDeviceGetAttribute", NULL, (void **)&cu->DeviceGetAttribute},
        {"cuDeviceTotalMem_v2", NULL, (void **)&cu->DeviceTotalMem},
        {"cuDevicePrimaryCtxRetain", NULL,
         (void **)&cu->DevicePrimaryCtxRetain},
        {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease",
         (void **)&cu->DevicePrimaryCtxRelease},
        {"cuCtxSetCurrent", NULL, (void **)&cu->CtxSetCurrent},
        {"cuCtxSynchronize", NULL, (void **)&cu->CtxSynchronize},
        {"cuModuleLoadData", NULL, (void **)&cu->ModuleLoadData},
        {"cuModuleUnload", NULL, (void **)&cu->ModuleUnload},
        {"cuModuleGetFunction", NULL, (void **)&cu->ModuleGetFunction},
        {"cuFuncGetAttribute", NULL, (void **)&cu->FuncGetAttribute},
        {"cuFuncSetAttribute", NULL, (void **)&cu->FuncSetAttribute},
        {"cuLaunchKernel", NULL, (void **)&cu->LaunchKernel},
        {"cuMemAlloc_v2", NULL, (void **)&cu->MemAlloc},
        {"cuMemFree_v2", NULL, (void **)&cu->MemFree},
        {"cuMemcpyHtoD_v2", NULL, (void **)&cu->MemcpyHtoD},
        {"cuMemcpyDtoH_v2", NULL, (void **)&cu->MemcpyDtoH},
        {"cuMemcpyDtoD_v2", NULL, (void **)&cu->MemcpyDtoD},
        {"cuMemsetD32_v2", NULL, (void **)&cu->MemsetD32},
        {"cuMemsetD8Async", NULL, (void **)&cu->MemsetD8Async},
        {"cuStreamCreate", NULL, (void **)&cu->StreamCreate},
        {"cuStreamDestroy_v2", "cuStreamDestroy", (void **)&cu->StreamDestroy},
        {"cuStreamSynchronize", NULL, (void **)&cu->StreamSynchronize},
        {"cuEventCreate", NULL, (void **)&cu->EventCreate},
        {"cuEventRecord", NULL, (void **)&cu->EventRecord},
        {"cuEventSynchronize", NULL, (void **)&cu->EventSynchronize},
        {"cuEventElapsedTime_v2", "cuEventElapsedTime",
         (void **)&cu->EventElapsedTime},
        {"cuEventDestroy_v2", "cuEventDestroy", (void **)&cu->EventDestroy},
        {"cuGetErrorName", NULL, (void **)&cu->GetErrorName},
        {"cuGetErrorString", NULL, (void **)&cu->GetErrorString},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        *t[i].slot = dlsym(cu->dl, t[i].name);
        if (!*t[i].slot && t[i].alt)
            *t[i].slot = dlsym(cu->dl, t[i].alt);
        if (!*t[i].slot)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "CUDA driver %s has no %s (driver too old?)", path,
                             t[i].name);
    }
    return KL_OK;
}

int kla_cu_open(kla_cu_t **out, const char *path, char *err)
{
    *out = NULL;
    if (!path || !*path)
        path = getenv("KILN_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "no CUDA driver: %s (no NVIDIA driver on this "
                         "machine, or set KILN_LIBCUDA to libcuda's path)",
                         why ? why : path);
    }
    kla_cu_t *cu = kl_xcalloc(1, sizeof *cu);
    cu->dl = dl;
    int rc = s_bind(cu, path, err);
    if (rc == KL_OK) {
        CUresult r = cu->Init(0);
        if (r != CUDA_SUCCESS) {
            char m[256];
            rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                           "CUDA driver %s: cuInit failed: %s", path,
                           kla_cu_strerror(cu, r, m, sizeof m));
        }
    }
    if (rc != KL_OK) {
        kla_cu_close(&cu);
        return rc;
    }
    *out = cu;
    return KL_OK;
}

void kla_cu_close(kla_cu_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    /* The driver is never unloaded: its threads may still run. */
    free(*self_p);
    *self_p = NULL;
}

const char *kla_cu_strerror(const kla_cu_t *cu, CUresult rc, char *buf,
                            size_t n)
{
    const char *name = NULL, *text = NULL;
    if (cu && cu->GetErrorName && cu->GetErrorName(rc, &name) != CUDA_SUCCESS)
        name = NULL;
    if (cu && cu->GetErrorString &&
        cu->GetErrorString(rc, &text) != CUDA_SUCCESS)
        text = NULL;
    if (name && text)
        snprintf(buf, n, "%s (%s)", name, text);
    else
        snprintf(buf, n, "CUDA error %d", (int)rc);
    return buf;
}

int kla_cu_is_sticky(CUresult rc)
{
    switch ((int)rc) {
    case 214: /* CUDA_ERROR_ECC_UNCORRECTABLE */
    case 700: /* CUDA_ERROR_ILLEGAL_ADDRESS */
    case 702: /* CUDA_ERROR_LAUNCH_TIMEOUT */
    case 710: /* CUDA_ERROR_ASSERT */
    case 714: /* CUDA_ERROR_HARDWARE_STACK_ERROR */
    case 715: /* CUDA_ERROR_ILLEGAL_INSTRUCTION */
    case 716: /* CUDA_ERROR_MISALIGNED_ADDRESS */
    case 717: /* CUDA_ERROR_INVALID_ADDRESS_SPACE */
    case 718: /* CUDA_ERROR_INVALID_PC */
    case 719: /* CUDA_ERROR_LAUNCH_FAILED */
        return 1;
    default:
        return 0;
    }
}
