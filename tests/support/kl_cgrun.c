/* kl_cgrun.c - see kl_cgrun.h. */
#include "kl_cgrun.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_check.h"
#include "kl_err.h"
#include "kl_util.h"

void **kl_cgrun_alloc(const kl_workload_t *w, uint64_t seed)
{
    void **bufs = kl_xcalloc((size_t)w->ntensors + 1, sizeof(*bufs));
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    for (int t = 0; t < w->ntensors; t++) {
        const kl_tensor_t *ts = &w->tensors[t];
        int64_t n = kl_tensor_numel(ts);
        bufs[t] = kl_xcalloc((size_t)n, kl_dtype_size(ts->dtype));
        if (ts->is_output)
            continue;
        for (int64_t i = 0; i < n; i++) {
            double u = kl_rng_double(&rng);
            switch (ts->dtype) {
            case KL_DT_U8:
                ((uint8_t *)bufs[t])[i] = (uint8_t)(u * 256);
                break;
            case KL_DT_S8:
                ((int8_t *)bufs[t])[i] = (int8_t)((int)(u * 256) - 128);
                break;
            case KL_DT_S32:
                ((int32_t *)bufs[t])[i] = (int32_t)(u * 2001) - 1000;
                break;
            default:
                ((float *)bufs[t])[i] = (float)(1e-3 + 9e-3 * u);
                break;
            }
        }
    }
    return bufs;
}

void kl_cgrun_free(const kl_workload_t *w, void **bufs)
{
    if (!bufs)
        return;
    for (int t = 0; t <= w->ntensors; t++)
        free(bufs[t]);
    free(bufs);
}

int kl_cgrun_load(kl_cgrun_t *r, const char *source, const char *entry,
                  const char *dir, char *err)
{
    memset(r, 0, sizeof *r);
    int rc = kl_check_build(source, dir, &r->so, err);
    if (rc)
        return rc;
    r->lib = dlopen(r->so, RTLD_NOW | RTLD_LOCAL);
    if (!r->lib) {
        rc = kl_seterr(err, KL_ERR_IO, "dlopen %s: %s", r->so, dlerror());
        kl_cgrun_close(r);
        return rc;
    }
    *(void **)&r->fn = dlsym(r->lib, entry);
    if (!r->fn) {
        rc = kl_seterr(err, KL_ERR_NOTFOUND, "%s: no symbol %s", r->so, entry);
        kl_cgrun_close(r);
        return rc;
    }
    r->prep = kl_abi_find_prepare(r->lib, entry);
    return KL_OK;
}

void kl_cgrun_close(kl_cgrun_t *r)
{
    if (r->lib)
        dlclose(r->lib);
    free(r->so);
    memset(r, 0, sizeof *r);
}

size_t kl_cgrun_out_bytes(const kl_workload_t *w)
{
    const kl_tensor_t *o = &w->tensors[kl_workload_output(w)];
    return (size_t)kl_tensor_numel(o) * kl_dtype_size(o->dtype);
}

int kl_cgrun_compare(const kl_cgrun_t *r, const kl_workload_t *w, uint64_t seed,
                     void ***a_p, void ***b_p, char *err)
{
    void **a = kl_cgrun_alloc(w, seed), **b = kl_cgrun_alloc(w, seed);
    *a_p = a;
    *b_p = b;
    if (r->prep) {
        bool cst[KL_IR_MAX_TENSORS];
        for (int t = 0; t < w->ntensors; t++)
            cst[t] = w->tensors[t].is_const;
        a[w->ntensors] = kl_abi_prepare(r->prep, w->ntensors, a, cst);
        if (!a[w->ntensors])
            return kl_seterr(err, KL_ERR_RUNTIME,
                             "the prepare step returned NULL");
    }
    int ot = kl_workload_output(w);
    size_t bytes = kl_cgrun_out_bytes(w);
    memset(a[ot], 0xa5, bytes);
    memset(b[ot], 0x5a, bytes);
    r->fn(a);
    kl_workload_eval_typed(w, b);
    const uint8_t *x = a[ot], *y = b[ot];
    for (size_t i = 0; i < bytes; i++)
        if (x[i] != y[i])
            return kl_seterr(err, KL_ERR_RUNTIME,
                             "generated C and the interpreter differ (output "
                             "byte %zu of %zu: 0x%02x, expected 0x%02x)",
                             i, bytes, x[i], y[i]);
    return KL_OK;
}

bool kl_cgrun_again(const kl_cgrun_t *r, const kl_workload_t *w, void **a,
                    void *const *b)
{
    int ot = kl_workload_output(w);
    size_t bytes = kl_cgrun_out_bytes(w);
    memset(a[ot], 0x11, bytes);
    r->fn(a);
    return memcmp(a[ot], b[ot], bytes) == 0;
}

bool kl_cgrun_varied(const kl_workload_t *w, void *const *bufs)
{
    const uint8_t *o = bufs[kl_workload_output(w)];
    size_t bytes = kl_cgrun_out_bytes(w);
    for (size_t i = 1; i < bytes; i++)
        if (o[i] != o[0])
            return true;
    return false;
}
