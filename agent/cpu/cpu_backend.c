/* cpu_backend.c - the CPU backend (kla_backend.h): this machine's CPU
 * (device.c), cc builds (builder.c) and sandboxed runs (runner.c) that
 * share a gate, so that builds pause while a candidate is timed unless
 * they have cores of their own. */
#include "kla_backend.h"

#include <stdio.h>
#include <stdlib.h>

#include "kl_err.h"
#include "kl_target.h"
#include "kl_util.h"
#include "kla_builder.h"
#include "kla_runner.h"

typedef struct {
    kla_device_t dev;
    uint32_t cores[KLA_MAX_CORES]; /* Hello's measure_cores */
    char *features[8];             /* Hello's features: static names */
    kla_gate_t *gate;              /* NULL when builds never pause */
    kla_builder_t *builder;
    kla_runner_t *runner;
} s_cpu_t;

static int s_probe(const kla_devsel_t *sel, const kla_env_t *env,
                   kla_dev_t *devs, int *n, char *err)
{
    (void)sel;
    (void)err;
    s_cpu_t *c = kl_xcalloc(1, sizeof *c);
    c->dev = *env->host;
    devs[0].impl = c;
    snprintf(devs[0].target, sizeof devs[0].target, "%s", c->dev.target);
    *n = 1;
    return KL_OK;
}

static int s_open(kla_dev_t *devs, int n, const kla_env_t *env, char *err)
{
    (void)n;
    s_cpu_t *c = devs[0].impl;
    if (!env->disjoint)
        kla_gate_new(&c->gate);
    kla_builder_config_t bc = {.workdir = env->workdir,
                               .cc = env->cc,
                               .cflags = env->cflags,
                               .cores = env->disjoint ? env->build : NULL,
                               .gate = c->gate};
    int rc = kla_builder_new(&c->builder, &bc, err);
    if (rc != KL_OK)
        return rc;
    kla_runner_config_t rcfg = {.llc_bytes = c->dev.llc_bytes,
                                .max_mem_bytes = env->max_mem_mb << 20,
                                .flush_bytes = env->flush_mb << 20,
                                .pin = env->measure_given ? env->measure : NULL,
                                .gate = c->gate};
    return kla_runner_new(&c->runner, &rcfg, err);
}

static void s_close(kla_dev_t *devs, int n)
{
    for (int i = 0; i < n; i++) {
        s_cpu_t *c = devs[i].impl;
        if (!c)
            continue;
        kla_runner_destroy(&c->runner);
        kla_builder_destroy(&c->builder);
        kla_gate_destroy(&c->gate);
        free(c);
        devs[i].impl = NULL;
    }
}

static void s_info(kla_dev_t *d, const kla_env_t *env, Kiln__DeviceInfo *out)
{
    s_cpu_t *c = d->impl;
    kiln__device_info__init(out);
    out->kind = (char *)kla_backend_name(d->backend);
    out->name = c->dev.name;
    out->target = c->dev.target;
    out->cores = c->dev.cores;
    out->memory_bytes = c->dev.memory_bytes;
    out->llc_bytes = c->dev.llc_bytes;
    out->clock_mhz = c->dev.clock_mhz;
    for (int i = 0; i < env->measure->n; i++)
        c->cores[i] = (uint32_t)env->measure->cpu[i];
    out->n_measure_cores = (size_t)env->measure->n;
    out->measure_cores = c->cores;
    /* The features that refine CPU targets ("vnni"): a task for
     * "cpu/x86_64-avx512+vnni" comes only to a device listing them. */
    unsigned bits = kl_cpu_features();
    size_t n = 0;
    for (int i = 0; kl_cpu_feature_name(i) && n < 8; i++)
        if (bits & kl_cpu_feature_bit(i))
            c->features[n++] = (char *)kl_cpu_feature_name(i);
    out->n_features = n;
    out->features = c->features;
}

static void s_describe(const kla_dev_t *d, const kla_env_t *env, char *buf,
                       size_t n)
{
    const s_cpu_t *c = d->impl;
    char cores[256];
    kla_cores_format(env->measure, cores, sizeof cores);
    snprintf(buf, n, "%s (%s), %u cores, measuring on %s, %d build slots%s",
             c->dev.name, c->dev.target, c->dev.cores, cores, env->build_slots,
             env->simulate ? ", simulated" : "");
}

static int s_build(kla_dev_t *d, const char *src, size_t len, const char *entry,
                   kla_build_t *out)
{
    (void)entry;
    return kla_builder_build(((s_cpu_t *)d->impl)->builder, src, len, out);
}

static void s_measure(kla_dev_t *d, const kla_problem_t *p, const char *ref_so,
                      const char *ref_entry, const char *so, const char *entry,
                      const kla_launch_t *l, kla_result_t *out)
{
    (void)l;
    kla_runner_measure(((s_cpu_t *)d->impl)->runner, p, ref_so, ref_entry, so,
                       entry, out);
}

/* The CPU runner fills and compares f32, u8, s8 and s32 buffers; f16 and
 * bf16 arguments are measured on GPUs only (the CPU codegen has none). */
static int s_check_request(const kla_dev_t *d, const Kiln__MeasureRequest *m,
                           char *err)
{
    (void)d;
    for (size_t i = 0; i < m->n_args; i++) {
        const Kiln__KernelArg *a = m->args[i];
        if (a->dtype == KILN__DTYPE__DTYPE_F16 ||
            a->dtype == KILN__DTYPE__DTYPE_BF16)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "argument %zu '%s' has dtype %s: the CPU agent "
                             "runs f32, u8, s8 and s32 arguments only",
                             i, a->name && *a->name ? a->name : "?",
                             a->dtype == KILN__DTYPE__DTYPE_F16 ? "f16"
                                                                : "bf16");
    }
    return KL_OK;
}

static void s_abort(kla_dev_t *d)
{
    s_cpu_t *c = d->impl;
    if (!c)
        return;
    if (c->gate) /* none when builds never pause */
        kla_gate_abort(c->gate);
    if (c->runner)
        kla_runner_abort(c->runner);
}

const kla_backend_t kla_backend_cpu = {
    .kind = KL_TARGET_CPU,
    .forms = "cpu",
    .unit = NULL,
    .max_devices = 1,
    .check = NULL,
    .probe = s_probe,
    .open = s_open,
    .close = s_close,
    .info = s_info,
    .describe = s_describe,
    .check_request = s_check_request,
    .build = s_build,
    .measure = s_measure,
    .abort = s_abort,
};
