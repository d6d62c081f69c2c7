/* kl_abi.c - calling a kernel's prepare step (kl_abi.h). */
#include "kl_abi.h"

#include <dlfcn.h>
#include <stdlib.h>

#include "kl_util.h"

kl_abi_prepare_fn kl_abi_find_prepare(void *lib, const char *entry)
{
    char *name = kl_xasprintf("%s" KL_ABI_PREPARE_SUFFIX, entry);
    kl_abi_prepare_fn prep;
    *(void **)&prep = dlsym(lib, name);
    free(name);
    return prep;
}

void *kl_abi_prepare(kl_abi_prepare_fn prep, int n, void *const *args,
                     const bool *is_const)
{
    void **cargs = kl_xcalloc((size_t)n + 1, sizeof *cargs);
    for (int i = 0; i < n; i++)
        if (is_const[i])
            cargs[i] = args[i];
    void *block = prep((void *const *)cargs);
    free(cargs);
    return block;
}
