/* codegen_kinds.c - the code generators of each kind of target
 * (kl_codegen.h): one row per kl_target_kind. */
#include <string.h>

#include "kl_codegen.h"
#include "kl_codegen_cuda.h"
#include "kl_err.h"

/* The C reference does not depend on the CPU's ISA. */
static int s_reference_c(const kl_workload_t *w, const kl_target_t *t,
                         const char *entry, kl_kernel_t *out, char *err)
{
    (void)t;
    return kl_codegen_reference(w, entry, out, err);
}

static const struct {
    int (*kernel)(const kl_sched_t *s, const kl_target_t *t, const char *entry,
                  kl_kernel_t *out, char *err);
    int (*reference)(const kl_workload_t *w, const kl_target_t *t,
                     const char *entry, kl_kernel_t *out, char *err);
    const char *ext;
} s_kinds[] = {
    [KL_TARGET_CPU] = {kl_codegen_c, s_reference_c, "c"},
    [KL_TARGET_CUDA] = {kl_codegen_cuda, kl_codegen_cuda_reference, "cu"},
};
_Static_assert(sizeof s_kinds / sizeof s_kinds[0] == KL_TARGET__KINDS,
               "a code generator per kind of target");

int kl_codegen_kernel(const kl_sched_t *s, const kl_target_t *t,
                      const char *entry, kl_kernel_t *out, char *err)
{
    return s_kinds[t->kind].kernel(s, t, entry, out, err);
}

int kl_codegen_reference_kernel(const kl_workload_t *w, const kl_target_t *t,
                                const char *entry, kl_kernel_t *out, char *err)
{
    return s_kinds[t->kind].reference(w, t, entry, out, err);
}

const char *kl_codegen_source_ext(kl_target_kind kind)
{
    return s_kinds[kind].ext;
}
