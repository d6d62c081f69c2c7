/* cuda_default.c - stands in for rules_cuda.c and postproc_cuda.c while
 * they are not part of the build (see meson.build), so that every caller
 * of the CUDA design space links and gets a clear error. */
#include "kl_err.h"
#include "kl_space.h"

/* Keeps the file non-empty when both hooks are built in. */
typedef int kl_cuda_default_unused;

#ifndef KL_HAVE_RULES_CUDA
__attribute__((weak)) int kl_rules_cuda_program(const kl_workload_t *w,
                                                const kl_target_t *t,
                                                kl_trace_t **out, char *err)
{
    (void)w;
    (void)out;
    return kl_seterr(err, KL_ERR_UNSUPPORTED,
                     "target %s: the CUDA design space is not built in",
                     t ? t->name : "cuda");
}
#endif

#ifndef KL_HAVE_POSTPROC_CUDA
__attribute__((weak)) int kl_postproc_cuda(const kl_target_t *t, kl_sched_t *s,
                                           char *err)
{
    (void)s;
    return kl_seterr(err, KL_ERR_UNSUPPORTED,
                     "target %s: the CUDA postprocessors are not built in",
                     t ? t->name : "cuda");
}
#endif
