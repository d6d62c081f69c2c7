/* Unit tests of common/kl_hashset: the set of 16-byte hashes keeps its
 * lookups exact through collisions and deletions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_hashset.h"

/* The hash set keeps lookups exact through collisions and deletions. */
static void test_hashset(void **state)
{
    (void)state;
    kl_hashset_t s = {0};
    uint8_t h[300][16];
    for (int i = 0; i < 300; i++) {
        memset(h[i], 0, 16);
        h[i][0] = (uint8_t)(i % 3); /* many share a home slot */
        h[i][8] = (uint8_t)i;
        h[i][9] = (uint8_t)(i >> 8);
        assert_true(kl_hashset_add(&s, h[i]));
        assert_false(kl_hashset_add(&s, h[i]));
    }
    assert_int_equal(s.n, 300);
    for (int i = 0; i < 300; i += 2)
        kl_hashset_del(&s, h[i]);
    for (int i = 0; i < 300; i++)
        assert_true(kl_hashset_has(&s, h[i]) == (i % 2 == 1));
    assert_int_equal(s.n, 150);
    kl_hashset_clear(&s);
    assert_false(kl_hashset_has(&s, h[1]));
    kl_hashset_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hashset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
