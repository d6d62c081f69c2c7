/* cuda_default.c - stands in for codegen_cuda.c until it is part of the
 * build (see meson.build), so that callers link and get a clear error. */
#include <string.h>

#include "kl_codegen.h"
#include "kl_err.h"

__attribute__((weak)) int kl_codegen_cuda(const kl_sched_t *s,
                                          const kl_target_t *t,
                                          const char *entry, kl_kernel_t *out,
                                          char *err)
{
    (void)s;
    (void)entry;
    memset(out, 0, sizeof *out);
    return kl_seterr(err, KL_ERR_UNSUPPORTED,
                     "target %s: the CUDA code generator is not built in",
                     t ? t->name : "cuda");
}
