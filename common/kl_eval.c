/* kl_eval.c - the evaluator's defaults and options. */
#include "kl_eval.h"

void kl_eval_default(Kiln__Evaluator *e)
{
    kiln__evaluator__init(e);
    e->number = KL_EVAL_DEF_NUMBER;
    e->repeat = KL_EVAL_DEF_REPEAT;
    e->min_repeat_ms = KL_EVAL_DEF_MIN_REPEAT_MS;
    e->timeout_ms = KL_EVAL_DEF_TIMEOUT_MS;
    e->rtol = KL_EVAL_DEF_RTOL;
    e->atol = KL_EVAL_DEF_ATOL;
    e->seed = KL_EVAL_DEF_SEED;
    e->flush_cache = KL_EVAL_DEF_FLUSH;
}

void kl_eval_cold(Kiln__Evaluator *e)
{
    e->flush_cache = 1;
    e->number = 1;
    e->min_repeat_ms = 0;
}

void kl_eval_from_opts(const kl_opts_t *o, Kiln__Evaluator *e)
{
    kl_eval_default(e);
    e->number = (uint32_t)kl_opts_int(o, "number");
    e->repeat = (uint32_t)kl_opts_int(o, "repeat");
    e->min_repeat_ms = (uint32_t)kl_opts_int(o, "min-repeat-ms");
    e->timeout_ms = (uint32_t)kl_opts_int(o, "timeout-ms");
    e->rtol = kl_opts_double(o, "rtol");
    e->atol = kl_opts_double(o, "atol");
    e->flush_cache = !kl_opts_bool(o, "no-flush");
    e->seed = (uint64_t)kl_opts_int(o, "data-seed");
}
