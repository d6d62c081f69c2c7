/* Unit tests of common/kl_util: the 128-bit hash, the seeded generator,
 * the median and the growable buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash128_known),
        cmocka_unit_test(test_rng_deterministic),
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_buf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
