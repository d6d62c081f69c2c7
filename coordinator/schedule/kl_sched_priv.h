/* kl_sched_priv.h - the schedule state, shared by kl_sched.c (the
 * primitives) and kl_sched_tz.c (the tensorize match). */
#ifndef KL_SCHED_PRIV_H
#define KL_SCHED_PRIV_H

#include "kl_intrin.h"
#include "kl_sched.h"

struct kl_sched_s {
    const kl_workload_t *w;
    const kl_workload_t *origin; /* what it was created for */
    kl_workload_t *own;          /* the derived workload, or NULL */
    int wino_m;                  /* kl_sched_winograd's tile, 0: none */
    int nloops;
    kl_loop_t loops[KL_SCHED_MAX_LOOPS];
    int nguards;
    kl_guard_t guards[KL_SCHED_MAX_GUARDS];
    int nstages;
    kl_stage_t stages[KL_SCHED_MAX_STAGES];
    int next_id;
    int tz_loop;           /* kl_sched_tensorize's loop id */
    const kl_intrin_t *tz; /* its intrinsic, NULL: none */
};

/* Whether the loops from `loop` to the innermost are one call of `in`
 * (kl_sched_tensorize's check); fills *tz, or an error naming what
 * differs. */
int kl_sched__tz_match(const kl_sched_t *s, int loop, const kl_intrin_t *in,
                       kl_tensorize_t *tz, char *err);

#endif
