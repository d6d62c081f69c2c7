/* space_fx.h - a design space and its samples for the compiler's tests
 * (dw_test.c), failing the test (cmocka) with the reason when the space
 * cannot be made or sampled. */
#ifndef SPACE_FX_H
#define SPACE_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_ir.h"
#include "kl_space.h"

/* The design space of w on target; kl_space_destroy frees it. */
static inline kl_space_t *fx_space(const kl_workload_t *w, const char *target)
{
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    if (kl_space_for_target(target, w, &sp, err))
        fail_msg("%s on %s: %s", w->name, target, err);
    return sp;
}

/* A sample of sp drawn with rng: its schedule, and its trace in *tr (the
 * caller frees both). */
static inline kl_sched_t *fx_sample(const kl_space_t *sp, kl_rng_t *rng,
                                    kl_trace_t **tr)
{
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    if (kl_space_sample(sp, rng, tr, &s, 0, NULL, err))
        fail_msg("%s: %s", kl_space_workload(sp)->name, err);
    return s;
}

#endif
