/* kl_amx.c - asking Linux for the AMX tile state; see kl_amx.h. */
#include "kl_amx.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kl_err.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define S_LINUX_X86 1
#endif

#define S_XTILEDATA (1ul << KL_AMX_XFEATURE_XTILEDATA)

static int s_rc;
static char s_msg[KL_ERRMSG_LEN];
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* CPUID leaf 7, subleaf 0, EDX: the AMX bits (AMX-BF16 22, AMX-TILE 24,
 * AMX-INT8 25). Read directly: not every compiler's
 * __builtin_cpu_supports knows "amx-tile". */
#define S_AMX_TILE (1u << 24)
#define S_AMX_ALL ((1u << 22) | (1u << 24) | (1u << 25))

static unsigned s_cpuid7_edx(void)
{
#ifdef S_LINUX_X86
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return d;
#endif
    return 0;
}

bool kl_amx_cpu(void)
{
    return (s_cpuid7_edx() & S_AMX_ALL) == S_AMX_ALL;
}

static void s_request(void)
{
#ifdef S_LINUX_X86
    if (!(s_cpuid7_edx() & S_AMX_TILE)) {
        s_rc = kl_seterr(s_msg, KL_ERR_UNSUPPORTED,
                         "this CPU has no AMX (amx_tile not in /proc/cpuinfo)");
        return;
    }
    if (syscall(SYS_arch_prctl, KL_AMX_ARCH_REQ_XCOMP_PERM,
                KL_AMX_XFEATURE_XTILEDATA) != 0) {
        int e = errno;
        s_rc = kl_seterr(s_msg, KL_ERR_UNSUPPORTED,
                         "Linux refused the AMX tile state (arch_prctl "
                         "ARCH_REQ_XCOMP_PERM: %s%s)",
                         strerror(e),
                         e == EINVAL ? "; Linux 5.16 or later grants it"
                         : e == ENOSPC
                             ? "; an alternate signal stack is too small for it"
                             : "");
        return;
    }
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, KL_AMX_ARCH_GET_XCOMP_PERM, &perm) != 0) {
        s_rc = kl_seterr(s_msg, KL_ERR_UNSUPPORTED,
                         "Linux did not confirm the AMX tile state (arch_prctl "
                         "ARCH_GET_XCOMP_PERM: %s)",
                         strerror(errno));
        return;
    }
    if (!(perm & S_XTILEDATA)) {
        s_rc = kl_seterr(s_msg, KL_ERR_UNSUPPORTED,
                         "Linux did not grant the AMX tile state (arch_prctl "
                         "ARCH_GET_XCOMP_PERM: 0x%lx lacks bit %d)",
                         perm, KL_AMX_XFEATURE_XTILEDATA);
        return;
    }
    s_rc = KL_OK;
#else
    s_rc = kl_seterr(s_msg, KL_ERR_UNSUPPORTED,
                     "this build is not for x86_64 Linux, which AMX needs");
#endif
}

int kl_amx_request(char *err)
{
    pthread_once(&s_once, s_request);
    if (s_rc && err)
        snprintf(err, KL_ERRMSG_LEN, "%s", s_msg);
    return s_rc;
}

static bool s_offered;
static pthread_once_t s_offered_once = PTHREAD_ONCE_INIT;

static void s_offer(void)
{
#ifdef S_LINUX_X86
    unsigned long supp = 0;
    s_offered =
        kl_amx_cpu() &&
        syscall(SYS_arch_prctl, KL_AMX_ARCH_GET_XCOMP_SUPP, &supp) == 0 &&
        (supp & S_XTILEDATA);
#endif
}

bool kl_amx_offered(void)
{
    pthread_once(&s_offered_once, s_offer);
    return s_offered;
}
