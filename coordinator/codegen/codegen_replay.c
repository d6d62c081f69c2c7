/* codegen_replay.c - a trace replayed on its design space and turned into
 * source: the one path of the tuner, kiln db and kiln export. */
#include "kl_codegen.h"
#include "kl_err.h"

static void s_step(const char **step, const char *name)
{
    if (step)
        *step = name;
}

int kl_codegen_replay(const kl_space_t *sp, const kl_trace_t *trace,
                      const char *entry, kl_kernel_t *out, kl_sched_t **sched,
                      const char **step, char *err)
{
    kl_rng_t r;
    kl_rng_seed(&r, 1);
    kl_sched_t *s = NULL;
    kl_trace_t *ex = NULL;
    s_step(step, "replay");
    int rc = kl_space_fix(sp, trace, &r, &ex, &s, err);
    kl_trace_free(&ex);
    if (!rc) {
        s_step(step, "codegen");
        rc = kl_codegen_kernel(s, kl_space_target(sp), entry, out, err);
    }
    if (!rc && sched)
        *sched = s;
    else
        kl_sched_destroy(&s);
    return rc;
}

int kl_codegen_replay_proto(const kl_workload_t *w, const char *target,
                            const uint8_t *trace, size_t len, const char *entry,
                            kl_kernel_t *out, const char **step, char *err)
{
    kl_space_t *sp = NULL;
    kl_trace_t *tr = NULL;
    s_step(step, "design space");
    int rc = kl_space_for_target(target, w, &sp, err);
    if (!rc) {
        s_step(step, "trace");
        rc = kl_trace_from_proto(trace, len, &tr, err);
    }
    if (!rc)
        rc = kl_codegen_replay(sp, tr, entry, out, NULL, step, err);
    kl_trace_free(&tr);
    kl_space_destroy(&sp);
    return rc;
}
