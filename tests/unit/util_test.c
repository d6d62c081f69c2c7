/* Unit tests of common/kl_util, kl_opt and kl_err. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_opt.h"
#include "kl_util.h"

static void test_hash128_known(void **state)
{
    (void)state;
    uint8_t a[16], b[16], c[16];
    kl_hash128("", 0, a);
    /* MurmurHash3 x64_128 of the empty string with seed 0 is all zeros. */
    for (int i = 0; i < 16; i++)
        assert_int_equal(a[i], 0);
    kl_hash128("hello world, this is kiln", 25, b);
    kl_hash128("hello world, this is kilm", 25, c);
    assert_memory_not_equal(b, c, 16);
    char hex[33];
    kl_hex128(b, hex);
    uint8_t back[16];
    assert_int_equal(kl_unhex128(hex, back), KL_OK);
    assert_memory_equal(b, back, 16);
    assert_int_equal(kl_unhex128("zz", back), KL_ERR_INVAL);
}

static void test_rng_deterministic(void **state)
{
    (void)state;
    kl_rng_t r1, r2;
    kl_rng_seed(&r1, 42);
    kl_rng_seed(&r2, 42);
    for (int i = 0; i < 100; i++)
        assert_int_equal(kl_rng_next(&r1), kl_rng_next(&r2));
    int hist[5] = {0};
    for (int i = 0; i < 5000; i++)
        hist[kl_rng_below(&r1, 5)]++;
    for (int i = 0; i < 5; i++)
        assert_in_range(hist[i], 800, 1200);
    double d = kl_rng_double(&r1);
    assert_true(d >= 0.0 && d < 1.0);
}

static void test_median(void **state)
{
    (void)state;
    double v[] = {5, 1, 3, 2, 4};
    assert_true(kl_median(v, 5) == 3.0);
    double w[] = {4, 1, 3, 2};
    assert_true(kl_median(w, 4) == 2.5);
    assert_true(kl_percentile(v, 5, 100) == 5.0);
    assert_true(v[0] == 5); /* input untouched */
}

static void test_buf(void **state)
{
    (void)state;
    kl_buf_t b = {0};
    kl_buf_puts(&b, "ab");
    kl_buf_printf(&b, "%d-%s", 42, "x");
    for (int i = 0; i < 1000; i++)
        kl_buf_puts(&b, "z");
    assert_int_equal(b.len, 2 + 4 + 1000);
    char *s = kl_buf_take(&b);
    assert_memory_equal(s, "ab42-x", 6);
    free(s);
    assert_null(b.data);
}

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
        cmocka_unit_test(test_hash128_known),
        cmocka_unit_test(test_rng_deterministic),
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_opts),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
