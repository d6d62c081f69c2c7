/* rules_cpu_bf16.c - the CPU design space of bf16 products
 * (docs/architecture.md, "The tensorize primitive"): a product whose two
 * multiplied inputs are bf16 (matmul / dense in=bf16; kl_workload_is_bf16)
 * on a target whose CPU has avx512_bf16 ("+bf16", kl_target.h) samples
 * either the tensorized schedule
 *     (mo . no0) mi no1 ko0 ko1 [ni ki]      ni: 16 lanes, ki: 2 (a pair)
 * ((b . mo . no0) .. for batch_matmul in=bf16, the batch fused with the
 * outer tiles)
 * (rules_cpu_int.c's tiling, with vdpbf16ps in the block) or the float
 * schedules every f32 product has (rules_cpu.c), so that the search
 * picks. A target without "+bf16" never offers the intrinsic.
 * A bf16 convolution (conv2d in=bf16, NCHW or NHWC, groups 1) samples the
 * int8 convolution's tiling (rules_cpu_int.c) with vdpbf16ps in the block
 * (codegen_tensorize_conv_bf16.c) the same way. */
#include <stdio.h>
#include <string.h>

#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_space_priv.h"

/* The bf16 intrinsic of a CPU target, or NULL. */
static const kl_intrin_t *s_target_intrin(const kl_target_t *t)
{
    if (!strcmp(t->isa, "x86_64-avx512") && (t->features & KL_CPU_FEAT_BF16))
        return kl_intrin_find("avx512_bf16");
    return NULL;
}

/* Whether w is a batched product: four iterators, three spatial, and the
 * output and every bf16 input of three dimensions (batch_matmul in=bf16;
 * tensorize names what else differs). A broadcast B (B[k,n] of two
 * dimensions) is not: it is a 1x1 convolution. */
static bool s_batched(const kl_workload_t *w)
{
    int nsp = 0;
    for (int i = 0; i < w->niters; i++)
        nsp += !w->iters[i].reduce;
    if (w->niters != 4 || nsp != 3)
        return false;
    for (int i = 0; i < w->ntensors; i++)
        if ((w->tensors[i].is_output || w->tensors[i].dtype == KL_DT_BF16) &&
            w->tensors[i].ndim != 3)
            return false;
    return true;
}

/* The tensorized steps of w: a product's (batched or not) or a
 * convolution's. */
static int s_steps(const kl_workload_t *w, const kl_target_t *t,
                   const kl_intrin_t *in, kl_trace_t *tr, char *err)
{
    int nsp = 0;
    for (int i = 0; i < w->niters; i++)
        nsp += !w->iters[i].reduce;
    if ((w->niters == 3 && nsp == 2) || s_batched(w))
        return kl_space__cpu_tz_mm(w, t, in, tr, err);
    return kl_space__cpu_tz_conv(w, t, in, tr, err);
}

/* Whether the tensorized steps apply to w's naive nest. */
static bool s_applies(const kl_workload_t *w, const kl_target_t *t,
                      const kl_intrin_t *in)
{
    char err[KL_ERRMSG_LEN];
    kl_trace_t *tr = kl_trace_new(t->name);
    int rc = s_steps(w, t, in, tr, err);
    kl_sched_t *s = NULL;
    if (!rc)
        rc = kl_sched_create(&s, w, err);
    if (!rc) {
        kl_rng_t rng;
        kl_rng_seed(&rng, 1);
        bool rej = false;
        rc = kl_trace_apply(tr, s, &rng, NULL, &rej, err);
        kl_sched_destroy(&s);
    }
    kl_trace_free(&tr);
    return rc == KL_OK;
}

int kl_space__cpu_bf16_open(const kl_workload_t *w, const kl_target_t *t,
                            kl_trace_t *tr, int *open, char *err)
{
    *open = 0;
    const kl_intrin_t *in = s_target_intrin(t);
    if (!in || !kl_workload_is_bf16(w) || !s_applies(w, t, in))
        return KL_OK;
    int64_t vals[2] = {0, 1};
    double ps[2] = {0.6, 0.4};
    int64_t v = kl_tr_sample_categorical(tr, vals, ps, 2);
    char pred[48];
    snprintf(pred, sizeof pred, "v%lld == 0", (long long)v);
    int rc = kl_tr_if(tr, pred, err);
    if (!rc)
        rc = s_steps(w, t, in, tr, err);
    if (!rc)
        rc = kl_tr_else(tr, err);
    *open = !rc;
    return rc;
}
