/* amx_test.c - asking Linux for the AMX tile state (common/kl_amx.h). On a
 * CPU with AMX the request is granted and a tile instruction runs; on one
 * without, it is refused with a message naming AMX (the other case says
 * SKIP). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kl_amx.h"
#include "kl_err.h"
#include "kl_target.h"

/* Whether /proc/cpuinfo lists amx_tile: what the message names, read
 * apart from kl_amx's own detection (CPUID). */
static bool s_cpu_has_tiles(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    bool has = false;
    while (f && !has && fgets(line, sizeof line, f))
        has = !strncmp(line, "flags", 5) && strstr(line, " amx_tile");
    if (f)
        fclose(f);
    return has;
}

/* No AMX on this CPU: refused, the message says why, every time; the
 * machine's features and targets never carry "+amx" then. */
static void test_refused(void **state)
{
    (void)state;
    if (s_cpu_has_tiles())
        skip();
    char err[KL_ERRMSG_LEN] = "";
    assert_int_equal(kl_amx_request(err), KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "AMX"));
#if defined(__x86_64__) && defined(__linux__)
    assert_string_equal(err,
                        "this CPU has no AMX (amx_tile not in /proc/cpuinfo)");
#endif
    char again[KL_ERRMSG_LEN] = "";
    assert_int_equal(kl_amx_request(again), KL_ERR_UNSUPPORTED);
    assert_string_equal(again, err);
    assert_int_equal(kl_amx_request(NULL), KL_ERR_UNSUPPORTED);
    assert_false(kl_amx_offered());
    unsetenv("KILN_CPU_FEATURES");
    assert_int_equal(kl_cpu_features() & KL_CPU_FEAT_AMX, 0);
    assert_null(
        strstr(kl_cpu_target_for(KL_CPU_FEAT_BF16 | KL_CPU_FEAT_AMX), "+amx"));
}

/* AMX here: granted when Linux offers the tile state (5.16 on), and then
 * the permission is the process's and a tile instruction runs; refused
 * by the kernel otherwise, with a message naming Linux. */
static void test_granted(void **state)
{
    (void)state;
    if (!s_cpu_has_tiles())
        skip();
    char err[KL_ERRMSG_LEN] = "";
    int rc = kl_amx_request(err);
    if (!kl_amx_offered()) {
        assert_int_equal(rc, KL_ERR_UNSUPPORTED);
        assert_non_null(strstr(err, "Linux"));
        assert_non_null(strstr(err, "AMX"));
        return;
    }
    assert_int_equal(rc, KL_OK);
    assert_int_equal(kl_amx_request(NULL), KL_OK);
#if defined(__x86_64__) && defined(__linux__)
    unsigned long perm = 0;
    assert_int_equal(syscall(SYS_arch_prctl, KL_AMX_ARCH_GET_XCOMP_PERM, &perm),
                     0);
    assert_true(perm & (1ul << KL_AMX_XFEATURE_XTILEDATA));
    /* tilerelease: SIGILL without the permission. */
    __asm__ volatile(".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0" ::: "memory");
#endif
    unsetenv("KILN_CPU_FEATURES");
    assert_true(kl_cpu_features() & KL_CPU_FEAT_AMX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_granted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
