/* Unit tests of kiln-agent's CPU detection and core lists (agent/device.c,
 * kla_device.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kla_device.h"

static void test_device_and_cores(void **state)
{
    (void)state;
    kla_device_t d;
    kla_device_detect(&d);
    assert_true(d.cores >= 1);
    assert_true(d.memory_bytes > (64u << 20));
    assert_true(d.llc_bytes > 0);
    assert_true(strncmp(d.target, "cpu/", 4) == 0);
    assert_string_not_equal(d.name, "");
    char err[KL_ERRMSG_LEN], text[64];
    kla_cores_t c, e;
    assert_int_equal(kla_cores_parse("0-3,6,2", &c, err), KL_OK);
    assert_int_equal(c.n, 5);
    kla_cores_format(&c, text, sizeof text);
    assert_string_equal(text, "0-3,6");
    assert_int_equal(kla_cores_parse("4-5", &e, err), KL_OK);
    assert_true(kla_cores_disjoint(&c, &e));
    assert_int_equal(kla_cores_parse("3-1", &e, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "'3-1'"));
    assert_int_equal(kla_cores_parse("a", &e, err), KL_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_and_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
