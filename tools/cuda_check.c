/* cuda_check.c - resource checks of generated CUDA kernels with NVRTC
 * (cuda_check.h). */
#include "cuda_check.h"

#include <stdio.h>
#include <string.h>

#include "kl_codegen_cuda.h"
#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_util.h"

int kl_cuda_check_many(kl_nvrtc_t *nv, const kl_kernel_t *ks, int n,
                       const char *arch, int *rcs, char (*why)[KL_ERRMSG_LEN],
                       kl_nvrtc_kernel_t *res, char *err)
{
    kl_buf_t src = {0};
    for (int i = 0; i < n; i++)
        kl_buf_puts(&src, ks[i].source);
    kl_nvrtc_opts_t o = {.arch = arch};
    kl_nvrtc_result_t *r = NULL;
    int rc = kl_nvrtc_compile(nv, src.data ? src.data : "", &o, &r, err);
    kl_buf_free(&src);
    if (rc) {
        kl_nvrtc_result_free(&r);
        return rc;
    }
    for (int i = 0; i < n; i++) {
        char tmp[KL_ERRMSG_LEN];
        char *msg = why ? why[i] : tmp;
        const kl_nvrtc_kernel_t *k = kl_nvrtc_result_kernel(r, ks[i].entry);
        int64_t threads = ks[i].block[0] * ks[i].block[1] * ks[i].block[2];
        if (res)
            memset(&res[i], 0, sizeof res[i]);
        if (!k) {
            rcs[i] =
                kl_seterr(msg, KL_ERR_INVAL,
                          "%s: no resource report from ptxas", ks[i].entry);
            continue;
        }
        if (res)
            res[i] = *k;
        if ((int64_t)k->registers * threads > KL_CUDA_REGFILE)
            rcs[i] = kl_seterr(
                msg, KL_ERR_INVAL, "%s: %d registers x %lld threads > %d",
                ks[i].entry, k->registers, (long long)threads, KL_CUDA_REGFILE);
        else if (k->spill_stores + k->spill_loads > KL_CUDA_MAX_SPILL_BYTES)
            rcs[i] = kl_seterr(msg, KL_ERR_INVAL,
                               "%s: %ld bytes of spills (at most %d)",
                               ks[i].entry, k->spill_stores + k->spill_loads,
                               KL_CUDA_MAX_SPILL_BYTES);
        else if (k->smem_static > KL_CUDA_STATIC_SMEM)
            rcs[i] = kl_seterr(msg, KL_ERR_INVAL,
                               "%s: %ld bytes of static shared memory",
                               ks[i].entry, k->smem_static);
        else
            rcs[i] = KL_OK;
    }
    kl_nvrtc_result_free(&r);
    return KL_OK;
}

static int s_resource_check(const kl_sched_t *s, const kl_target_t *t,
                            char *err)
{
    kl_nvrtc_t *nv = kl_nvrtc_default(NULL);
    char arch[32];
    if (!nv || kl_nvrtc_arch_of_target(t->name, arch, sizeof arch, NULL))
        return KL_OK; /* nothing to check with */
    kl_kernel_t k;
    int rc = kl_codegen_cuda(s, t, "kl_check", &k, err);
    if (rc)
        return rc;
    int one = 0;
    char why[1][KL_ERRMSG_LEN];
    rc = kl_cuda_check_many(nv, &k, 1, arch, &one, why, NULL, err);
    kl_kernel_free(&k);
    if (rc)
        return rc;
    if (one)
        return kl_seterr(err, one, "%s", why[0]);
    return KL_OK;
}

int kl_cuda_enable_resource_check(char *err)
{
    if (!kl_nvrtc_default(err))
        return KL_ERR_UNSUPPORTED;
    kl_postproc_cuda_set_resource_check(s_resource_check);
    return KL_OK;
}

void kl_cuda_disable_resource_check(void)
{
    kl_postproc_cuda_set_resource_check(NULL);
}
