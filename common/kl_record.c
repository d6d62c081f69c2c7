/* kl_record.c - see kl_record.h. */
#include "kl_record.h"

#include <math.h>
#include <string.h>

#include "kl_err.h"
#include "kl_target.h"

const char *kl_cond_name(kl_cond_t c)
{
    return c == KL_COND_COLD ? "cold" : "warm";
}

int kl_cond_parse(const char *text, kl_cond_t *out, char *err)
{
    if (text && !strcmp(text, "warm"))
        *out = KL_COND_WARM;
    else if (text && !strcmp(text, "cold"))
        *out = KL_COND_COLD;
    else
        return kl_seterr(err, KL_ERR_INVAL,
                         "condition '%s': expected warm or cold",
                         text ? text : "");
    return KL_OK;
}

kl_cond_t kl_cond_of(const Kiln__Evaluator *e)
{
    return e->flush_cache && e->number <= 1 && e->min_repeat_ms == 0
               ? KL_COND_COLD
               : KL_COND_WARM;
}

void kl_record_evaluator(const Kiln__TuningRecord *r, Kiln__Evaluator *out)
{
    if (r->evaluator) {
        *out = *r->evaluator;
        /* Unknown fields of a newer kiln belong to r. */
        out->base.n_unknown_fields = 0;
        out->base.unknown_fields = NULL;
        return;
    }
    kiln__evaluator__init(out);
    out->number = 1;
    out->repeat = 5;
    out->min_repeat_ms = 50;
    out->flush_cache = true;
    out->timeout_ms = 10000;
    out->rtol = 1e-3;
    out->atol = 1e-4;
    out->seed = 1;
}

kl_cond_t kl_record_cond(const Kiln__TuningRecord *r)
{
    Kiln__Evaluator e;
    kl_record_evaluator(r, &e);
    return kl_cond_of(&e);
}

kl_record_kind_t kl_record_kind(const Kiln__TuningRecord *r)
{
    if (r->simulated && !kl_target_is_sim(r->target))
        return KL_RECORD_SIMULATED;
    if (r->evaluator && r->evaluator->skip_verify)
        return KL_RECORD_UNVERIFIED;
    return KL_RECORD_MEASURED;
}

const char *kl_record_kind_name(kl_record_kind_t k)
{
    return k == KL_RECORD_SIMULATED    ? "simulated"
           : k == KL_RECORD_UNVERIFIED ? "unverified"
                                       : "measured";
}

bool kl_record_valid(const Kiln__TuningRecord *r)
{
    return kl_record_kind(r) == KL_RECORD_MEASURED &&
           r->status == KILN__STATUS__STATUS_OK && isfinite(r->median_s) &&
           r->median_s >= 0;
}
