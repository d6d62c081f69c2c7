/* Unit tests of common/kl_opt: a table of options parsed from argv and
 * the environment (KILN_*), repeated and positional arguments, bounds and
 * the errors that name the option. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_opt.h"

static const kl_opt_t s_table[] = {
    {"slots", KL_OPT_INT, "4", 1, 64, "N", "build slots"},
    {"rtol", KL_OPT_DOUBLE, "1e-3", KL_NOBOUNDS, "X", "tolerance"},
    {"name", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME", "a name"},
    {"insecure", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL, "no CURVE"},
    {"cflags", KL_OPT_STR, NULL, KL_NOBOUNDS, "FLAGS", "compiler flags"},
    KL_OPT_END,
};

static void test_opts(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    char *argv[] = {"--slots",  "8",        "pos1",  "--insecure",
                    "--name=x", "--cflags", "-O2",   "--cflags",
                    "-g",       "--",       "--pos2"};
    unsetenv("KILN_SLOTS");
    setenv("KILN_RTOL", "0.5", 1);
    assert_int_equal(kl_opts_parse(s_table, 11, argv, &o, err), KL_OK);
    assert_int_equal(kl_opts_int(o, "slots"), 8);
    assert_true(kl_opts_double(o, "rtol") == 0.5);
    assert_string_equal(kl_opts_str(o, "name"), "x");
    assert_true(kl_opts_bool(o, "insecure"));
    const char *const *all;
    assert_int_equal(kl_opts_all(o, "cflags", &all), 2);
    assert_string_equal(all[1], "-g");
    assert_int_equal(kl_opts_npos(o), 2);
    assert_string_equal(kl_opts_pos(o, 1), "--pos2");
    kl_opts_free(&o);
    assert_null(o);
    unsetenv("KILN_RTOL");

    char *bad1[] = {"--slots", "100"};
    assert_int_equal(kl_opts_parse(s_table, 2, bad1, &o, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "--slots"));
    char *bad2[] = {"--nope"};
    assert_int_equal(kl_opts_parse(s_table, 1, bad2, &o, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "--nope"));
    char *bad3[] = {"--slots", "x1"};
    assert_int_equal(kl_opts_parse(s_table, 2, bad3, &o, err), KL_ERR_INVAL);
    char *bad4[] = {"--name"};
    assert_int_equal(kl_opts_parse(s_table, 1, bad4, &o, err), KL_ERR_INVAL);
    assert_null(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
