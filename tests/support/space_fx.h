/* space_fx.h - a design space, its samples and their kernels checked
 * against the reference, for the compiler's tests (dw_test.c), failing
 * the test (cmocka) with the reason. */
#ifndef SPACE_FX_H
#define SPACE_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_check.h"
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

/* Builds the n kernels (sources srcs, entries ents: heap strings, freed
 * here) in dir, runs them on w's data from seed and fails unless each
 * is within tol of the reference (naming spec, the kernel and its
 * source). */
static inline void fx_check_kernels(char **srcs, char **ents, int n,
                                    const kl_workload_t *w, const char *spec,
                                    const char *dir, uint64_t seed, double tol)
{
    char err[KL_ERRMSG_LEN], *so = NULL;
    int rcs[64];
    double maxerr[64];
    assert_true(n <= 64);
    if (kl_check_build_many((const char *const *)srcs, n, dir, &so, err))
        fail_msg("%s: build: %s", spec, err);
    if (kl_check_run_many(so, (const char *const *)ents, n, w, seed, tol, tol,
                          maxerr, rcs, err))
        fail_msg("%s: %s", spec, err);
    for (int i = 0; i < n; i++) {
        if (rcs[i] != KL_OK || !(maxerr[i] < tol))
            fail_msg("%s: kernel %d (%s): rc %d, max error %g\n%s", spec, i,
                     ents[i], rcs[i], maxerr[i], srcs[i]);
        free(srcs[i]);
        free(ents[i]);
    }
    unlink(so);
    free(so);
}

#endif
