/* cuda_device.c - GPU queries, launch and resource checks, and the input
 * generator shared with the device. */
#include "kla_cuda.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "kl_err.h"
#include "kl_target.h"
#include "kla_cuda_api.h"

bool kla_cuda_fake(void)
{
    const char *v = getenv("KILN_FAKE_GPU_WORKER");
    return v && *v && strcmp(v, "0") != 0;
}

static void s_fake_dev(int ordinal, kla_cuda_dev_t *d)
{
    memset(d, 0, sizeof *d);
    d->ordinal = ordinal;
    snprintf(d->name, sizeof d->name,
             "fake GPU %d (KILN_FAKE_GPU_WORKER, no CUDA)", ordinal);
    d->cc_major = 9;
    snprintf(d->arch, sizeof d->arch, "sm_90");
    /* A stand-in measures nothing: its target says so (kl_target.h). */
    snprintf(d->target, sizeof d->target, KL_TARGET_SIM "cuda/sm_90");
    d->sms = 132;
    d->memory_bytes = (uint64_t)1 << 32;
    d->clock_mhz = 1980;
    d->mem_clock_mhz = 3201;
    d->l2_bytes = 50u << 20;
    d->max_threads_per_block = 1024;
    d->max_shared_per_block = 48 << 10;
    d->max_shared_optin = 227 << 10;
    d->max_regs_per_block = 65536;
    snprintf(d->driver_version, sizeof d->driver_version, "fake");
    d->fake = true;
}

static int s_attr(kla_cu_t *cu, CUdevice dev, int attr, int *v, char *err)
{
    CUresult r = cu->DeviceGetAttribute(v, (CUdevice_attribute)attr, dev);
    if (r == CUDA_SUCCESS)
        return KL_OK;
    char m[256];
    return kl_seterr(err, KL_ERR_IO, "cuDeviceGetAttribute(%d): %s", attr,
                     kla_cu_strerror(cu, r, m, sizeof m));
}

static int s_describe(kla_cu_t *cu, int ordinal, int drv, kla_cuda_dev_t *d,
                      char *err)
{
    memset(d, 0, sizeof *d);
    d->ordinal = ordinal;
    CUdevice dev;
    char m[256];
    CUresult r = cu->DeviceGet(&dev, ordinal);
    if (r != CUDA_SUCCESS)
        return kl_seterr(err, KL_ERR_NOTFOUND, "cuda:%d: %s", ordinal,
                         kla_cu_strerror(cu, r, m, sizeof m));
    if (cu->DeviceGetName(d->name, (int)sizeof d->name - 1, dev) !=
        CUDA_SUCCESS)
        snprintf(d->name, sizeof d->name, "CUDA device %d", ordinal);
    size_t mem = 0;
    if (cu->DeviceTotalMem(&mem, dev) == CUDA_SUCCESS)
        d->memory_bytes = mem;
    int v[10] = {0};
    static const int attrs[10] = {
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
        CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
        CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
    };
    /* Only the compute capability is essential; an attribute a driver
     * no longer answers stays 0 (unknown). */
    for (int i = 0; i < 10; i++) {
        int rc = s_attr(cu, dev, attrs[i], &v[i], err);
        if (rc != KL_OK && i < 2)
            return rc;
        if (rc != KL_OK)
            v[i] = 0;
    }
    if (!v[6])
        v[6] = 1024;
    if (!v[7])
        v[7] = 48 << 10;
    if (!v[9])
        v[9] = 65536;
    d->cc_major = v[0];
    d->cc_minor = v[1];
    snprintf(d->arch, sizeof d->arch, "sm_%d%d", v[0], v[1]);
    snprintf(d->target, sizeof d->target, "cuda/%s", d->arch);
    d->sms = (uint32_t)v[2];
    d->clock_mhz = (uint32_t)(v[3] / 1000);
    d->mem_clock_mhz = (uint32_t)(v[4] / 1000);
    d->l2_bytes = (uint64_t)v[5];
    d->max_threads_per_block = (uint32_t)v[6];
    d->max_shared_per_block = (uint32_t)v[7];
    d->max_shared_optin = (uint32_t)(v[8] > v[7] ? v[8] : v[7]);
    d->max_regs_per_block = (uint32_t)v[9];
    snprintf(d->driver_version, sizeof d->driver_version, "%d.%d", drv / 1000,
             drv % 1000 / 10);
    /* Where it sits on the PCI bus: how a sandboxed worker finds its
     * device node and its device (kla_cuda_dev_nodes). Unknown stays "". */
    int dom = 0, bus = 0, slot = 0;
    char e2[KL_ERRMSG_LEN];
    if (s_attr(cu, dev, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &dom, e2) == KL_OK &&
        s_attr(cu, dev, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &bus, e2) == KL_OK &&
        s_attr(cu, dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &slot, e2) == KL_OK)
        snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "%04x:%02x:%02x.0",
                 (unsigned)dom & 0xffff, (unsigned)bus & 0xff,
                 (unsigned)slot & 0xff);
    return KL_OK;
}

int kla_cuda_ordinal_of(const char *pci_bus_id, int *ordinal, char *err)
{
    kla_cu_t *cu = NULL;
    int rc = kla_cu_open(&cu, NULL, err);
    if (rc != KL_OK)
        return rc;
    int count = 0;
    if (cu->DeviceGetCount(&count) != CUDA_SUCCESS)
        count = 0;
    int drv = 0;
    cu->DriverGetVersion(&drv);
    rc = kl_seterr(err, KL_ERR_NOTFOUND,
                   "no GPU at PCI %s among the %d the driver shows here",
                   pci_bus_id, count);
    for (int i = 0; i < count; i++) {
        kla_cuda_dev_t d;
        char e2[KL_ERRMSG_LEN];
        if (s_describe(cu, i, drv, &d, e2) == KL_OK &&
            !strcasecmp(d.pci_bus_id, pci_bus_id)) {
            *ordinal = i;
            rc = KL_OK;
            break;
        }
    }
    kla_cu_close(&cu);
    return rc;
}

/* The "Device Minor:" of the GPU at pci_bus_id in the driver's
 * ROOT/proc/driver/nvidia/gpus/BUS/information; -1 when not there. */
static int s_minor(const char *root, const char *pci_bus_id)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/proc/driver/nvidia/gpus", root);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int minor = -1;
    struct dirent *e;
    while (minor < 0 && (e = readdir(d))) {
        if (strcasecmp(e->d_name, pci_bus_id) != 0)
            continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s/information", dir, e->d_name);
        FILE *f = fopen(path, "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, " Device Minor: %d", &minor) == 1)
                break;
        if (f)
            fclose(f);
    }
    closedir(d);
    return minor >= 0 && minor < 256 ? minor : -1;
}

int kla_cuda_dev_nodes(const kla_cuda_dev_t *d, const char *root,
                       char (*out)[64], int max)
{
    if (!root)
        root = "";
    int minor = d->pci_bus_id[0] ? s_minor(root, d->pci_bus_id) : -1;
    char own[32];
    snprintf(own, sizeof own, "/dev/nvidia%d", minor >= 0 ? minor : d->ordinal);
    const char *const all[] = {own, "/dev/nvidiactl", "/dev/nvidia-uvm",
                               "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all && n < max; i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s%s", root, all[i]);
        struct stat st;
        if (stat(path, &st) == 0)
            snprintf(out[n++], 64, "%s", all[i]);
    }
    return n;
}

int kla_cuda_query(const kla_devsel_t *sel, kla_cuda_dev_t *out, int *n,
                   char *err)
{
    *n = 0;
    int given = sel->n < KLA_MAX_GPUS ? sel->n : KLA_MAX_GPUS;
    if (kla_cuda_fake()) {
        int count = sel->all ? 1 : given;
        for (int i = 0; i < count; i++)
            s_fake_dev(sel->all ? i : sel->id[i], &out[i]);
        *n = count;
        return KL_OK;
    }
    kla_cu_t *cu = NULL;
    int rc = kla_cu_open(&cu, NULL, err);
    if (rc != KL_OK)
        return rc;
    int count = 0, drv = 0;
    char m[256];
    CUresult r = cu->DeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count <= 0) {
        rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                       "the CUDA driver sees no GPU (%s)",
                       r != CUDA_SUCCESS ? kla_cu_strerror(cu, r, m, sizeof m)
                                         : "0 devices");
        kla_cu_close(&cu);
        return rc;
    }
    cu->DriverGetVersion(&drv);
    int want = sel->all ? (count < KLA_MAX_GPUS ? count : KLA_MAX_GPUS) : given;
    for (int i = 0; i < want && rc == KL_OK; i++) {
        int ord = sel->all ? i : sel->id[i];
        if (ord >= count)
            rc = kl_seterr(err, KL_ERR_NOTFOUND,
                           "cuda:%d: this machine has %d GPU%s (cuda:0..%d)",
                           ord, count, count == 1 ? "" : "s", count - 1);
        else
            rc = s_describe(cu, ord, drv, &out[i], err);
    }
    kla_cu_close(&cu);
    if (rc == KL_OK)
        *n = want;
    return rc;
}

int kla_cuda_check_launch(const kla_cuda_dev_t *d, const kla_cuda_res_t *res,
                          const kla_cuda_launch_t *l, char *err)
{
    static const uint32_t gmax[3] = {2147483647u, 65535, 65535};
    static const uint32_t bmax[3] = {1024, 1024, 64};
    static const char xyz[3] = {'x', 'y', 'z'};
    for (int i = 0; i < 3; i++) {
        if (l->grid[i] < 1 || l->grid[i] > gmax[i])
            return kl_seterr(err, KL_ERR_INVAL, "grid.%c is %u (allowed 1..%u)",
                             xyz[i], l->grid[i], gmax[i]);
        if (l->block[i] < 1 || l->block[i] > bmax[i])
            return kl_seterr(err, KL_ERR_INVAL,
                             "block.%c is %u (allowed 1..%u)", xyz[i],
                             l->block[i], bmax[i]);
    }
    uint64_t threads =
        (uint64_t)l->block[0] * l->block[1] * (uint64_t)l->block[2];
    if (threads > d->max_threads_per_block)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%llu threads per block, the device allows %u",
                         (unsigned long long)threads, d->max_threads_per_block);
    if (res->max_threads > 0 && threads > (uint64_t)res->max_threads)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%llu threads per block, the kernel allows %d "
                         "(launch bounds or registers)",
                         (unsigned long long)threads, res->max_threads);
    uint64_t regs =
        (uint64_t)((res->regs + 7) / 8 * 8) * ((threads + 31) / 32 * 32);
    if (regs > d->max_regs_per_block)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%d registers per thread x %llu threads = %llu "
                         "registers per block, the device has %u",
                         res->regs, (unsigned long long)threads,
                         (unsigned long long)regs, d->max_regs_per_block);
    uint64_t smem = (uint64_t)res->smem_static + l->shared_bytes;
    if (smem > d->max_shared_optin)
        return kl_seterr(err, KL_ERR_INVAL,
                         "%ld bytes of static + %u of dynamic shared memory "
                         "per block, the device allows %u",
                         res->smem_static, l->shared_bytes,
                         d->max_shared_optin);
    return KL_OK;
}

void kla_cuda_ref_launch(uint64_t n, kla_cuda_launch_t *out)
{
    uint64_t blocks = (n + KLA_CUDA_REF_BLOCK - 1) / KLA_CUDA_REF_BLOCK;
    *out = (kla_cuda_launch_t){
        .grid = {(uint32_t)(blocks ? blocks : 1), 1, 1},
        .block = {KLA_CUDA_REF_BLOCK, 1, 1},
    };
}

float kla_cuda_input_value(uint64_t seed, uint32_t arg, uint64_t i)
{
    /* The same arithmetic as kla_fill in cuda_worker.c. */
    uint64_t x = seed ^ ((uint64_t)arg << 48) ^ (i * 0x9E3779B97F4A7C15ull);
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (float)(x >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

size_t kla_cuda_dtype_size(Kiln__DType dt)
{
    return dt == KILN__DTYPE__DTYPE_F16 || dt == KILN__DTYPE__DTYPE_BF16 ? 2
                                                                         : 4;
}

uint16_t kla_cuda_half_bits(bool bf16, float v)
{
    /* The same arithmetic as kla_round16 in cuda_worker.c. */
    uint32_t x;
    memcpy(&x, &v, 4);
    if (bf16) {
        if ((x & 0x7fffffffu) > 0x7f800000u)
            return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
        return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: the quiet one */
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to 65536 or above: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {   /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) /* up to half the smallest subnormal */
            return (uint16_t)sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* 14..24 */
        uint32_t q = m >> shift, r = m & ((1u << shift) - 1u),
                 h = 1u << (shift - 1);
        if (r > h || (r == h && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t v16 = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13),
             r = a & 0x1fffu;
    if (r > 0x1000u || (r == 0x1000u && (v16 & 1u)))
        v16++;
    return (uint16_t)(sign | v16);
}

uint16_t kla_cuda_input_bits(Kiln__DType dt, uint64_t seed, uint32_t arg,
                             uint64_t i)
{
    return kla_cuda_half_bits(dt == KILN__DTYPE__DTYPE_BF16,
                              kla_cuda_input_value(seed, arg, i));
}
