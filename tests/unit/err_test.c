/* Unit tests of common/kl_err: every code has a message, and kl_seterr
 * formats into the caller's buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"

static void test_strerror(void **state)
{
    (void)state;
    for (int i = 0; i < KL_ERR__COUNT; i++)
        assert_string_not_equal(kl_strerror(i), "unknown error");
    assert_string_equal(kl_strerror(-5), "unknown error");
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_seterr(err, KL_ERR_IO, "x %d", 3), KL_ERR_IO);
    assert_string_equal(err, "x 3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
