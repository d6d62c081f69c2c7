#include "kl_target.h"

#include <stdio.h>
#include <string.h>

/* This machine's CPU target, or its simulated twin: literals, so that
 * both are static strings. */
#define S_CPU(sim, t) ((sim) ? KL_TARGET_SIM t : t)

static const char *s_cpu(bool sim)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return S_CPU(sim, "cpu/x86_64-avx512");
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return S_CPU(sim, "cpu/x86_64-avx2");
    return S_CPU(sim, "cpu/x86_64");
#elif defined(__aarch64__)
    return S_CPU(sim, "cpu/aarch64");
#else
    return S_CPU(sim, "cpu/unknown");
#endif
}

const char *kl_cpu_target(void)
{
    return s_cpu(false);
}

const char *kl_target_resolve(const char *user_target)
{
    if (!user_target || !strcmp(user_target, "cpu"))
        return s_cpu(false);
    if (!strcmp(user_target, KL_TARGET_SIM "cpu"))
        return s_cpu(true);
    return user_target;
}

bool kl_target_is_sim(const char *target)
{
    return target && !strncmp(target, KL_TARGET_SIM, strlen(KL_TARGET_SIM));
}

const char *kl_target_base(const char *target)
{
    return kl_target_is_sim(target) ? target + strlen(KL_TARGET_SIM) : target;
}

char *kl_target_sim(const char *target, char *buf, size_t len)
{
    const char *t = kl_target_resolve(target);
    snprintf(buf, len, "%s%s", kl_target_is_sim(t) ? "" : KL_TARGET_SIM, t);
    return buf;
}
