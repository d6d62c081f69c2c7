/* kla_cuda_api.h - the part of the CUDA driver API that kiln-agent uses,
 * loaded at run time with dlopen("libcuda.so.1"): nothing links against
 * libcuda, so the same binary starts on a machine without a GPU.
 *
 * Types come from the toolkit's cuda.h when meson found it at build time
 * (KLA_HAVE_CUDA_H); otherwise from the minimal declarations below, whose
 * values are checked against cuda.h by static assertions in every build
 * that has the header (cuda_api.c).
 *
 * Function pointers are bound by their exported, versioned symbol names
 * (cuMemAlloc_v2, ...), the names cuda.h's macros select, so the ABI is
 * the one of the current API and not a legacy entry point.
 */
#ifndef KLA_CUDA_API_H
#define KLA_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef KLA_HAVE_CUDA_H
#include <cuda.h>
#else
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice_attribute;
typedef int CUfunction_attribute;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701
#define CUDA_ERROR_LAUNCH_TIMEOUT 702
#define CUDA_ERROR_ASSERT 710
#define CUDA_ERROR_HARDWARE_STACK_ERROR 714
#define CUDA_ERROR_ILLEGAL_INSTRUCTION 715
#define CUDA_ERROR_MISALIGNED_ADDRESS 716
#define CUDA_ERROR_INVALID_PC 718
#define CUDA_ERROR_LAUNCH_FAILED 719
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK 8
#define CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK 12
#define CU_DEVICE_ATTRIBUTE_CLOCK_RATE 13
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_PCI_BUS_ID 33
#define CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID 34
#define CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE 36
#define CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE 38
#define CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID 50
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK 0
#define CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 1
#define CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES 3
#define CU_FUNC_ATTRIBUTE_NUM_REGS 4
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DEFAULT 0
#endif

/* The driver entry points kiln uses. */
typedef struct {
    void *dl;
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemsetD32)(CUdeviceptr, unsigned, size_t);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
} kla_cu_t;

/* Loads the driver library: path, else $KILN_LIBCUDA, else libcuda.so.1,
 * then binds every entry point above and calls cuInit(0). Returns 0 and
 * *out (free with kla_cu_close), KL_ERR_UNSUPPORTED when there is no
 * driver ("libcuda.so.1: cannot open shared object file ...: no NVIDIA
 * driver on this machine"), a symbol is missing or cuInit fails (the
 * message names the CUDA error, e.g. CUDA_ERROR_NO_DEVICE). */
int kla_cu_open(kla_cu_t **out, const char *path, char *err);
void kla_cu_close(kla_cu_t **self_p);

/* "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"
 * into buf (n bytes); works with cu NULL ("CUDA error 700"). Returns
 * buf. */
const char *kla_cu_strerror(const kla_cu_t *cu, CUresult rc, char *buf,
                            size_t n);

/* True for the errors after which the context is unusable (sticky: an
 * illegal address, a trap, a kernel fault); the process must end. */
int kla_cu_is_sticky(CUresult rc);

#endif
