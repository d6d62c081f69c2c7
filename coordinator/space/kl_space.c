/* kl_space.c - design spaces: rule program + postprocessors per target
 * kind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_space_priv.h"
#include "kl_target.h"

/* The design space of each kind of target. */
static const struct {
    int (*rules)(const kl_workload_t *w, const kl_target_t *t, kl_trace_t **out,
                 char *err);
    int (*postproc)(const kl_target_t *t, kl_sched_t *s, char *err);
} s_kinds[] = {
    [KL_TARGET_CPU] = {kl_space__rules_cpu, kl_postproc_cpu},
    [KL_TARGET_CUDA] = {kl_space__rules_cuda, kl_postproc_cuda},
};
_Static_assert(sizeof s_kinds / sizeof s_kinds[0] == KL_TARGET__KINDS,
               "a design space per kind of target");

struct kl_space_s {
    kl_target_t target;
    const kl_workload_t *w;
    kl_trace_t *program;
};

int kl_space_for_target(const char *target, const kl_workload_t *w,
                        kl_space_t **out, char *err)
{
    kl_target_t t;
    /* A simulated target ("sim/...") builds the code of the real one. */
    int rc = kl_target_parse(kl_target_base(target), &t, err);
    if (rc)
        return rc;
    kl_trace_t *prog = NULL;
    rc = s_kinds[t.kind].rules(w, &t, &prog, err);
    if (rc)
        return rc;
    kl_space_t *sp = kl_xcalloc(1, sizeof *sp);
    sp->target = t;
    sp->w = w;
    sp->program = prog;
    *out = sp;
    return KL_OK;
}

void kl_space_destroy(kl_space_t **self_p)
{
    if (self_p && *self_p) {
        kl_trace_free(&(*self_p)->program);
        free(*self_p);
        *self_p = NULL;
    }
}

const kl_target_t *kl_space_target(const kl_space_t *sp)
{
    return &sp->target;
}

const kl_workload_t *kl_space_workload(const kl_space_t *sp)
{
    return sp->w;
}

const kl_trace_t *kl_space_program(const kl_space_t *sp)
{
    return sp->program;
}

int kl_space_postproc(const kl_space_t *sp, kl_sched_t *s, char *err)
{
    return s_kinds[sp->target.kind].postproc(&sp->target, s, err);
}

int kl_space_sample(const kl_space_t *sp, kl_rng_t *rng, kl_trace_t **trace,
                    kl_sched_t **sched, int max_tries, int *tries, char *err)
{
    if (max_tries <= 0)
        max_tries = 1000;
    for (int i = 0; i < max_tries; i++) {
        kl_sched_t *s = NULL;
        kl_trace_t *ex = NULL;
        bool rej = false;
        int rc = kl_sched_create(&s, sp->w, err);
        if (rc)
            return rc;
        rc = kl_trace_apply(sp->program, s, rng, &ex, &rej, err);
        if (!rc && !rej)
            rc = kl_space_postproc(sp, s, err);
        if (!rc && !rej) {
            if (tries)
                *tries = i + 1;
            *trace = ex;
            if (sched)
                *sched = s;
            else
                kl_sched_destroy(&s);
            return KL_OK;
        }
        kl_trace_free(&ex);
        kl_sched_destroy(&s);
        if (rc == KL_ERR_UNSUPPORTED)
            return rc;
    }
    if (tries)
        *tries = max_tries;
    char last[KL_ERRMSG_LEN];
    snprintf(last, sizeof last, "%s", err ? err : "");
    return kl_seterr(err, KL_ERR_EXHAUSTED,
                     "no valid sample in %d tries (last: %s)", max_tries, last);
}

int kl_space_replay(const kl_space_t *sp, const kl_trace_t *trace,
                    kl_sched_t **sched, char *err)
{
    kl_sched_t *s = NULL;
    bool rej = false;
    int rc = kl_sched_create(&s, sp->w, err);
    if (rc)
        return rc;
    rc = kl_trace_apply(trace, s, NULL, NULL, &rej, err);
    if (!rc && rej)
        rc = KL_ERR_INVAL; /* err already says which reject_if held */
    if (!rc)
        rc = kl_space_postproc(sp, s, err);
    if (rc) {
        kl_sched_destroy(&s);
        return rc;
    }
    *sched = s;
    return KL_OK;
}

/* Removes the branch taken by every `if` (recursively), so that replaying
 * evaluates each one again. */
static void s_strip_ifs(kl_inst_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i].op == KL_OP_IF) {
            v[i].has_decision = false;
            v[i].ndec = 0;
            s_strip_ifs(v[i].then_body, v[i].nthen);
            s_strip_ifs(v[i].else_body, v[i].nelse);
        }
}

int kl_space_fix(const kl_space_t *sp, const kl_trace_t *t, kl_rng_t *rng,
                 kl_trace_t **out, kl_sched_t **sched, char *err)
{
    kl_trace_t *in = kl_trace_clone(t);
    int n = kl_trace_ninsts(in);
    if (n > 0)
        s_strip_ifs(kl_trace_inst(in, 0), n);
    kl_sched_t *s = NULL;
    kl_trace_t *ex = NULL;
    bool rej = false;
    int rc = kl_sched_create(&s, sp->w, err);
    if (!rc)
        rc = kl_trace_apply(in, s, rng, &ex, &rej, err);
    kl_trace_free(&in);
    if (!rc && rej)
        rc = KL_ERR_INVAL; /* err names the reject_if */
    if (!rc)
        rc = kl_space_postproc(sp, s, err);
    if (rc) {
        kl_trace_free(&ex);
        kl_sched_destroy(&s);
        return rc;
    }
    kl_trace_canonicalize(ex);
    *out = ex;
    if (sched)
        *sched = s;
    else
        kl_sched_destroy(&s);
    return KL_OK;
}
