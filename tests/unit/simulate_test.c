/* Unit tests of kiln-agent --simulate's synthetic latencies
 * (agent/simulate.c, kla_simulate.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kla_simulate.h"

static void test_simulate(void **state)
{
    (void)state;
    kla_result_t a, b, c;
    const char *s1 = "void k(void *const *a) { /* 1 */ }";
    kla_simulate(s1, strlen(s1), &a);
    kla_simulate(s1, strlen(s1), &b);
    assert_int_equal(a.status, KILN__STATUS__STATUS_OK);
    assert_int_equal(a.n_samples, 3);
    assert_memory_equal(a.samples, b.samples, 3 * sizeof(double));
    for (int i = 0; i < 3; i++)
        assert_true(a.samples[i] >= 49e-6 && a.samples[i] <= 5.1e-3);
    const char *s2 = "/* KILN_SIMULATE_FAIL */";
    kla_simulate(s2, strlen(s2), &c);
    assert_int_equal(c.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    kla_result_clear(&a);
    kla_result_clear(&b);
    kla_result_clear(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simulate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
