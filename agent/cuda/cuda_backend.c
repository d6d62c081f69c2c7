/* cuda_backend.c - the CUDA backend (kla_backend.h): GPUs queried through
 * the driver (cuda_device.c), one NVRTC builder for all of them
 * (cuda_build.c), and one runner, that is one worker process, per GPU
 * (cuda_runner.c, cuda_worker.c). See kla_cuda.h. */
#include "kla_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

typedef struct {
    kla_cuda_dev_t dev;
    kla_cuda_builder_t *builder; /* shared; the first device's to free */
    kla_cuda_runner_t *runner;
} s_gpu_t;

static int s_check(const kla_devsel_t *sel, char *err)
{
    static kla_cuda_dev_t devs[KLA_MAX_GPUS];
    int n = 0;
    if (kla_cuda_query(sel, devs, &n, err) != KL_OK || !kl_nvrtc_default(err))
        return KL_ERR_UNSUPPORTED;
    return KL_OK;
}

static int s_probe(const kla_devsel_t *sel, const kla_env_t *env,
                   kla_dev_t *devs, int *n, char *err)
{
    (void)env;
    kla_cuda_dev_t *gpus = kl_xcalloc(KLA_MAX_GPUS, sizeof *gpus);
    int rc = kla_cuda_query(sel, gpus, n, err);
    for (int g = 0; rc == KL_OK && g < *n; g++) {
        s_gpu_t *s = kl_xcalloc(1, sizeof *s);
        s->dev = gpus[g];
        devs[g].impl = s;
        devs[g].stand_in = s->dev.fake;
        snprintf(devs[g].target, sizeof devs[g].target, "%s", s->dev.target);
    }
    free(gpus);
    return rc;
}

/* NVRTC and one runner (worker process) per GPU. */
static int s_open(kla_dev_t *devs, int n, const kla_env_t *env, char *err)
{
    kla_cuda_builder_t *b = NULL;
    int rc = kla_cuda_builder_new(&b, env->workdir, err);
    for (int g = 0; g < n; g++)
        ((s_gpu_t *)devs[g].impl)->builder = b;
    for (int g = 0; rc == KL_OK && g < n; g++) {
        s_gpu_t *s = devs[g].impl;
        kla_cuda_runner_config_t c = {.dev = &s->dev,
                                      .worker_path = env->worker_path};
        rc = kla_cuda_runner_new(&s->runner, &c, err);
    }
    return rc;
}

static void s_close(kla_dev_t *devs, int n)
{
    for (int g = 0; g < n; g++) {
        s_gpu_t *s = devs[g].impl;
        if (!s)
            continue;
        kla_cuda_runner_destroy(&s->runner);
        if (g == 0)
            kla_cuda_builder_destroy(&s->builder);
        free(s);
        devs[g].impl = NULL;
    }
}

static void s_info(kla_dev_t *d, const kla_env_t *env, Kiln__DeviceInfo *out)
{
    (void)env;
    const kla_cuda_dev_t *v = &((s_gpu_t *)d->impl)->dev;
    kiln__device_info__init(out);
    out->kind = (char *)kla_backend_name(d->backend);
    out->name = (char *)v->name;
    out->target = (char *)v->target;
    out->cores = v->sms;
    out->memory_bytes = v->memory_bytes;
    out->clock_mhz = v->clock_mhz;
    out->mem_clock_mhz = v->mem_clock_mhz;
    out->llc_bytes = v->l2_bytes;
    out->max_threads_per_block = v->max_threads_per_block;
    out->max_shared_per_block = v->max_shared_optin;
    out->max_registers_per_block = v->max_regs_per_block;
    out->driver_version = (char *)v->driver_version;
}

static void s_describe(const kla_dev_t *d, const kla_env_t *env, char *buf,
                       size_t n)
{
    (void)env;
    const kla_cuda_dev_t *v = &((const s_gpu_t *)d->impl)->dev;
    snprintf(buf, n,
             "cuda:%d %s (%s), %u SMs, %llu MiB, L2 %llu KiB, driver %s%s",
             v->ordinal, v->name, v->target, v->sms,
             (unsigned long long)(v->memory_bytes >> 20),
             (unsigned long long)(v->l2_bytes >> 10), v->driver_version,
             v->fake ? ", FAKE" : "");
}

static int s_check_request(const kla_dev_t *d, const Kiln__MeasureRequest *m,
                           char *err)
{
    (void)d;
    static const char *dnames[] = {"f32", "f16", "bf16", "s32", "u8", "s8"};
    for (size_t i = 0; i < m->n_args; i++) {
        const Kiln__KernelArg *a = m->args[i];
        bool half = a->dtype == KILN__DTYPE__DTYPE_F16 ||
                    a->dtype == KILN__DTYPE__DTYPE_BF16;
        if (a->dtype == KILN__DTYPE__DTYPE_F32 ||
            (half && a->role != KILN__ARG_ROLE__ROLE_OUTPUT))
            continue;
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "argument %zu '%s' has dtype %s%s: the CUDA agent "
                         "runs f32 arguments and f16 / bf16 inputs only "
                         "(outputs are f32)",
                         i, a->name && *a->name ? a->name : "?",
                         (unsigned)a->dtype < 6 ? dnames[a->dtype] : "?",
                         a->role == KILN__ARG_ROLE__ROLE_OUTPUT ? " (output)"
                                                                : "");
    }
    if (!strstr(m->reference_source, "__global__"))
        return kl_seterr(err, KL_ERR_INVAL,
                         "a CUDA request needs a CUDA C reference kernel "
                         "(__global__, launched with one thread per output "
                         "element, see kla_cuda.h)");
    return KL_OK;
}

static int s_build(kla_dev_t *d, const char *src, size_t len, const char *entry,
                   kla_build_t *out)
{
    s_gpu_t *s = d->impl;
    return kla_cuda_builder_build(s->builder, src, len, s->dev.arch, entry, out,
                                  NULL);
}

static void s_measure(kla_dev_t *d, const kla_problem_t *p, const char *ref_so,
                      const char *ref_entry, const char *so, const char *entry,
                      const kla_launch_t *l, kla_result_t *out)
{
    kla_cuda_runner_measure(((s_gpu_t *)d->impl)->runner, p, ref_so, ref_entry,
                            so, entry, l, out);
}

static void s_abort(kla_dev_t *d)
{
    s_gpu_t *s = d->impl;
    if (s && s->runner)
        kla_cuda_runner_abort(s->runner);
}

const kla_backend_t kla_backend_cuda = {
    .kind = KL_TARGET_CUDA,
    .forms = "cuda:N[,N...] or cuda:all",
    .unit = "GPU",
    .max_devices = KLA_MAX_GPUS,
    .check = s_check,
    .probe = s_probe,
    .open = s_open,
    .close = s_close,
    .info = s_info,
    .describe = s_describe,
    .check_request = s_check_request,
    .build = s_build,
    .measure = s_measure,
    .abort = s_abort,
    .worker_flag = "--gpu-worker",
    .worker_main = kla_cuda_worker_main,
};
