/* measure.c - the measurement's vocabulary (kla_measure.h): the
 * evaluator and the problem from the wire, the result's statistics. */
#include "kla_measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_eval.h"
#include "kl_util.h"

void kla_eval_defaults(kla_eval_t *e)
{
    *e = (kla_eval_t){.number = KL_EVAL_DEF_NUMBER,
                      .repeat = KL_EVAL_DEF_REPEAT,
                      .min_repeat_ms = KL_EVAL_DEF_MIN_REPEAT_MS,
                      .flush_cache = KL_EVAL_DEF_FLUSH,
                      .timeout_ms = KL_EVAL_DEF_TIMEOUT_MS,
                      .rtol = KL_EVAL_DEF_RTOL,
                      .atol = KL_EVAL_DEF_ATOL};
}

void kla_eval_from_proto(kla_eval_t *e, const Kiln__Evaluator *pe)
{
    kla_eval_defaults(e);
    if (!pe)
        return;
    if (pe->number)
        e->number = pe->number > KLA_MAX_NUMBER ? KLA_MAX_NUMBER : pe->number;
    if (pe->repeat)
        e->repeat = pe->repeat > KLA_MAX_REPEAT ? KLA_MAX_REPEAT : pe->repeat;
    if (pe->timeout_ms) /* at most a day: it becomes an int of ms */
        e->timeout_ms = pe->timeout_ms > 86400000u ? 86400000u : pe->timeout_ms;
    e->min_repeat_ms = pe->min_repeat_ms;
    e->flush_cache = pe->flush_cache;
    if ((pe->rtol != 0 || pe->atol != 0) && isfinite(pe->rtol) &&
        isfinite(pe->atol) && pe->rtol >= 0 && pe->atol >= 0) {
        e->rtol = pe->rtol;
        e->atol = pe->atol;
    }
    e->seed = pe->seed;
    e->skip_verify = pe->skip_verify;
}

int kla_problem_from_request(kla_problem_t *p, const Kiln__MeasureRequest *req,
                             uint64_t max_bytes, char *err)
{
    memset(p, 0, sizeof *p);
    if (req->workload_key.len != 16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "workload key has %zu bytes, expected 16",
                         req->workload_key.len);
    memcpy(p->workload_key, req->workload_key.data, 16);
    if (req->n_args < 1 || req->n_args > 64)
        return kl_seterr(err, KL_ERR_INVAL,
                         "request has %zu arguments, expected 1..64",
                         req->n_args);
    uint64_t total = 0;
    int outputs = 0;
    for (size_t i = 0; i < req->n_args; i++) {
        const Kiln__KernelArg *a = req->args[i];
        const char *name = a->name && *a->name ? a->name : "?";
        switch (a->dtype) {
        case KILN__DTYPE__DTYPE_F32:
        case KILN__DTYPE__DTYPE_I32:
            p->esize[i] = 4;
            break;
        case KILN__DTYPE__DTYPE_F16:
        case KILN__DTYPE__DTYPE_BF16:
            p->esize[i] = 2; /* the backend decides (check_request) */
            break;
        case KILN__DTYPE__DTYPE_U8:
        case KILN__DTYPE__DTYPE_S8:
            p->esize[i] = 1;
            break;
        default:
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "argument %zu '%s' has dtype %d: not one this "
                             "agent knows (f32, f16, bf16, u8, s8, s32)",
                             i, name, (int)a->dtype);
        }
        p->dtype[i] = a->dtype;
        p->any_int |= p->esize[i] != 2 && a->dtype != KILN__DTYPE__DTYPE_F32;
        if (a->n_shape < 1 || a->n_shape > 8)
            return kl_seterr(err, KL_ERR_INVAL,
                             "argument %zu '%s' has %zu dimensions, expected "
                             "1..8",
                             i, name, a->n_shape);
        uint64_t n = 1;
        for (size_t d = 0; d < a->n_shape; d++) {
            if (a->shape[d] < 1 || a->shape[d] > (1ll << 32) ||
                n > (UINT64_C(1) << 40) / (uint64_t)a->shape[d])
                return kl_seterr(err, KL_ERR_INVAL,
                                 "argument %zu '%s': dimension %zu is %lld "
                                 "(or the tensor is too large)",
                                 i, name, d, (long long)a->shape[d]);
            n *= (uint64_t)a->shape[d];
        }
        p->nelem[i] = (size_t)n;
        p->is_output[i] = a->role == KILN__ARG_ROLE__ROLE_OUTPUT;
        p->is_const[i] = a->role == KILN__ARG_ROLE__ROLE_CONSTANT;
        outputs += p->is_output[i];
        total += n * p->esize[i];
    }
    p->n_args = (int)req->n_args;
    if (!outputs)
        return kl_seterr(err, KL_ERR_INVAL, "request has no output argument");
    if (max_bytes && total > max_bytes)
        return kl_seterr(err, KL_ERR_INVAL,
                         "arguments need %llu MiB, more than the %llu MiB "
                         "memory limit",
                         (unsigned long long)(total >> 20),
                         (unsigned long long)(max_bytes >> 20));
    kla_eval_from_proto(&p->eval, req->evaluator);
    return KL_OK;
}

void kla_result_clear(kla_result_t *r)
{
    free(r->samples);
    memset(r, 0, sizeof *r);
}

void kla_result_stats(kla_result_t *r)
{
    r->spread = 0;
    if (r->n_samples == 0)
        return;
    double lo = r->samples[0], hi = r->samples[0];
    for (uint32_t i = 1; i < r->n_samples; i++) {
        lo = fmin(lo, r->samples[i]);
        hi = fmax(hi, r->samples[i]);
    }
    double med = kl_median(r->samples, r->n_samples);
    r->spread = med > 0 ? (hi - lo) / med : 0;
}
