/* bench_dnnl_util.c - see bench_dnnl_util.h. */
#include "bench_dnnl_util.h"

#include <stdio.h>
#include <stdlib.h>

#include "kl_util.h"

const char *bd_prog = "bench";

void bd_check(dnnl_status_t st, const char *call)
{
    if (st == dnnl_success)
        return;
    fprintf(stderr, "%s: %s failed (oneDNN status %d)\n", bd_prog, call,
            (int)st);
    exit(1);
}

void bd_kiln(void *ctx)
{
    bd_kctx_t *k = ctx;
    k->k.fn((void *const *)k->args);
}

void bd_dnnl(void *ctx)
{
    bd_ctx_t *d = ctx;
    BD_CK(dnnl_primitive_execute(d->prim, d->st, 3, d->args));
    BD_CK(dnnl_stream_wait(d->st));
}

dnnl_memory_t bd_prep(bd_ctx_t *d, const_dnnl_primitive_desc_t pd,
                      dnnl_query_t what, int nd, const dnnl_dims_t dims,
                      dnnl_data_type_t dt, dnnl_format_tag_t tag, void *user)
{
    dnnl_memory_desc_t umd;
    BD_CK(dnnl_memory_desc_init_by_tag(&umd, nd, dims, dt, tag));
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
    dnnl_memory_t um, m;
    BD_CK(dnnl_memory_create(&um, &umd, d->eng, user));
    BD_CK(dnnl_memory_create(&m, md, d->eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_desc_t rpd;
    BD_CK(dnnl_reorder_primitive_desc_create(&rpd, &umd, d->eng, md, d->eng,
                                             NULL));
    dnnl_primitive_t r;
    BD_CK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, m}};
    BD_CK(dnnl_primitive_execute(r, d->st, 2, a));
    BD_CK(dnnl_stream_wait(d->st));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(um);
    return m;
}

void bd_output(bd_ctx_t *d)
{
    const dnnl_memory_desc_t *from, *to;
    BD_CK(dnnl_memory_get_memory_desc(d->dst, &from));
    BD_CK(dnnl_memory_get_memory_desc(d->user_dst, &to));
    dnnl_primitive_desc_t rpd;
    BD_CK(dnnl_reorder_primitive_desc_create(&rpd, from, d->eng, to, d->eng,
                                             NULL));
    dnnl_primitive_t r;
    BD_CK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, d->dst},
                            {DNNL_ARG_TO, d->user_dst}};
    BD_CK(dnnl_primitive_execute(r, d->st, 2, a));
    BD_CK(dnnl_stream_wait(d->st));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
}

void **bd_int8_bufs(const kl_workload_t *w, uint64_t seed)
{
    void **b = kl_xcalloc((size_t)w->ntensors, sizeof *b);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    for (int t = 0; t < w->ntensors; t++) {
        const kl_tensor_t *ts = &w->tensors[t];
        int64_t n = kl_tensor_numel(ts);
        b[t] = kl_xcalloc((size_t)n, kl_dtype_size(ts->dtype));
        if (ts->is_output)
            continue;
        for (int64_t i = 0; i < n; i++) {
            int v = (int)(kl_rng_double(&rng) * 256);
            if (ts->dtype == KL_DT_U8)
                ((uint8_t *)b[t])[i] = (uint8_t)v;
            else
                ((int8_t *)b[t])[i] = (int8_t)(v - 128);
        }
    }
    return b;
}
