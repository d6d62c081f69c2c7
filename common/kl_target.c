#include "kl_target.h"

#include <string.h>

const char *kl_cpu_target(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return "cpu/x86_64-avx512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "cpu/x86_64-avx2";
    return "cpu/x86_64";
#elif defined(__aarch64__)
    return "cpu/aarch64";
#else
    return "cpu/unknown";
#endif
}

const char *kl_target_resolve(const char *user_target)
{
    if (!user_target || !strcmp(user_target, "cpu"))
        return kl_cpu_target();
    return user_target;
}
