/* Unit tests of the arena of an exported model's intermediate values
 * (export_arena.c):
 *  - the plan: random values and lives; no two values alive at one layer
 *    share a byte, every offset is a multiple of 64, the arena is no
 *    larger than one buffer per value, and with share off it is exactly
 *    that; a name inside a longer identifier is not a use;
 *  - the code: one #define per value at its offset;
 *  - whole exports (naive kernels) of an f32 graph with a skip connection
 *    and a transpose, and of an int8 graph whose values are converted
 *    between NHWC and NCHW (bh_I, bn_I): the arena is smaller than one
 *    buffer per value, and the outputs are equal bit for bit to those of
 *    the same export with KILN_EXPORT_NO_ARENA=1 (one buffer per value). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "export_int.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

#include "export_fx.h"

#define S_NV 150
#define S_NL 60

typedef struct {
    long long bytes;
    int first, last;
} s_life_t;

static uint64_t s_rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* Declares S_NV values b_0 .. b_{S_NV-1} with random sizes, each named by
 * the code of two random layers (and, for a third of them, one between). */
static kl_export__arena_t *s_random(uint64_t seed, s_life_t *life)
{
    kl_export__arena_t *a = kl_export__arena_new(S_NV);
    for (int i = 0; i < S_NV; i++) {
        char name[16];
        snprintf(name, sizeof name, "b_%d", i);
        life[i].bytes = 1 + (long long)(s_rng(&seed) % 100000);
        kl_export__arena_decl(a, name, "float", life[i].bytes, "v");
        int x = (int)(s_rng(&seed) % S_NL), y = (int)(s_rng(&seed) % S_NL);
        life[i].first = x < y ? x : y;
        life[i].last = x < y ? y : x;
        char *code = kl_xasprintf("f(%s, xb_%d);", name, (i + 1) % S_NV);
        kl_export__arena_use(a, x, code);
        kl_export__arena_use(a, y, code);
        if (i % 3 == 0)
            kl_export__arena_use(a, (x + y) / 2, code);
        free(code);
    }
    return a;
}

static void test_arena_plan(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        s_life_t life[S_NV];
        kl_export__arena_t *a = s_random(seed, life);
        long long end = kl_export__arena_plan(a, true);
        long long sum = kl_export__arena_sum(a), off[S_NV];
        assert_true(end > 0 && end < sum);
        for (int i = 0; i < S_NV; i++) {
            char name[16];
            snprintf(name, sizeof name, "b_%d", i);
            off[i] = kl_export__arena_offset(a, name);
            assert_true(off[i] >= 0 && off[i] % 64 == 0);
            assert_true(off[i] + life[i].bytes <= end);
        }
        for (int i = 0; i < S_NV; i++)
            for (int j = i + 1; j < S_NV; j++) {
                bool alive = life[i].first <= life[j].last &&
                             life[j].first <= life[i].last;
                bool apart = off[i] + life[i].bytes <= off[j] ||
                             off[j] + life[j].bytes <= off[i];
                if (alive && !apart)
                    fail_msg("seed %llu: b_%d [%d, %d] and b_%d [%d, %d] "
                             "share bytes",
                             (unsigned long long)seed, i, life[i].first,
                             life[i].last, j, life[j].first, life[j].last);
            }
        assert_int_equal(kl_export__arena_offset(a, "b_999"), -1);
        assert_int_equal(kl_export__arena_offset(a, "bh_1"), -1);
        kl_export__arena_free(a);
        /* share off: one buffer per value */
        a = s_random(seed, life);
        assert_int_equal(kl_export__arena_plan(a, false), sum);
        kl_export__arena_free(a);
    }
}

static void test_arena_code(void **state)
{
    (void)state;
    kl_export__arena_t *a = kl_export__arena_new(4);
    kl_export__arena_decl(a, "b_0", "float", 400, "x0");
    kl_export__arena_decl(a, "b_1", "float", 400, "x1");
    kl_export__arena_decl(a, "bh_1", "uint8_t", 100, "x1, NHWC");
    kl_export__arena_decl(a, "b_2", "float", 400, "x2");
    kl_export__arena_use(a, 0, "k(p[0], b_0);");
    kl_export__arena_use(a, 1, "k(b_0, b_1);");
    kl_export__arena_use(a, 2, "s_to_nhwc(b_1, bh_1);");
    kl_export__arena_use(a, 3, "k(bh_1, b_2); /* b_0b_0 nb_0 */");
    /* b_0 [0,1], b_1 [1,2], bh_1 [2,3], b_2 [3,3]: b_2 takes b_0's or
     * b_1's bytes, never bh_1's */
    long long end = kl_export__arena_plan(a, true);
    assert_true(end < kl_export__arena_sum(a));
    long long o0 = kl_export__arena_offset(a, "b_0"),
              o1 = kl_export__arena_offset(a, "b_1"),
              oh = kl_export__arena_offset(a, "bh_1"),
              o2 = kl_export__arena_offset(a, "b_2");
    assert_true(o0 + 400 <= o1 || o1 + 400 <= o0);
    assert_true(oh + 100 <= o1 || o1 + 400 <= oh);
    assert_true(oh + 100 <= o2 || o2 + 400 <= oh);
    kl_buf_t b = {0};
    kl_export__arena_code(a, &b);
    char want[96];
    snprintf(want, sizeof want,
             "#define bh_1 ((uint8_t *)(s_arena + %lldLL)) /* x1, NHWC */", oh);
    assert_non_null(strstr(b.data, want));
    snprintf(want, sizeof want, "static unsigned char s_arena[%lld]", end);
    assert_non_null(strstr(b.data, want));
    kl_buf_free(&b);
    kl_export__arena_free(a);
}

/* f32: a skip connection over three layers, a transpose that moves data,
 * a long-lived branch. */
static const char s_f32[] = "model arena_f32\n"
                            "input x 1x8x12x12\n"
                            "c0 = conv2d x K=16 R=3 pad=1 bias=1 relu=1\n"
                            "c1 = conv2d c0 K=16 R=1 bias=1\n"
                            "c2 = depthwise_conv2d c1 R=3 pad=1 bias=1\n"
                            "c3 = conv2d c2 K=16 R=1 bias=1\n"
                            "s = add c3 c0\n"
                            "p = max_pool2d s R=2\n"
                            "t = transpose p perm=0,2,3,1\n"
                            "f = flatten t\n"
                            "y = dense f O=10\n";

/* int8 with NHWC values converted for NCHW readers (export_layout_test's
 * shape of graph, smaller). */
static const char s_q[] = "model arena_q\n"
                          "input x 1x8x10x10\n"
                          "qx = quantize x scale=0.05 zp=128\n"
                          "c1 = qconv2d qx K=16 R=3 S=3 pad=1 za=128 zo=3 "
                          "scale=0.002 bias=1\n"
                          "d1 = dequantize c1 scale=0.02 zp=3\n"
                          "q1 = quantize d1 scale=0.02 zp=3\n"
                          "c2 = qconv2d q1 K=16 R=1 S=1 za=3 zo=0 "
                          "scale=0.004\n"
                          "d2 = dequantize c2 scale=0.03 zp=0\n"
                          "s = add d2 d1\n"
                          "f = flatten s\n"
                          "y = dense f O=4\n";

typedef struct {
    char dir[512];
} fx_t;

static int s_setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    char *dir =
        kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-export-arena-XXXXXX");
    assert_non_null(dir);
    *state = fx;
    return 0;
}

static int s_teardown(void **state)
{
    fx_t *fx = *state;
    s_rmrf(fx->dir);
    free(fx);
    return 0;
}

/* The arena's size and the one-buffer-per-value size, from the comment
 * kiln_model.c starts its values with. */
static void s_sizes(const char *text, long long *arena, long long *sum)
{
    const char *p = strstr(text, "/* the intermediate values: ");
    assert_non_null(p);
    assert_int_equal(sscanf(p,
                            "/* the intermediate values: %lld bytes, where "
                            "one buffer each would take %lld",
                            arena, sum),
                     2);
}

static void s_same(const char *dir, const char *graph, const char *name,
                   long long in, int out)
{
    char n2[64];
    snprintf(n2, sizeof n2, "%s_own", name);
    fx_lib_t a, b;
    char *ta = fx_export(dir, name, graph, "KILN_EXPORT_NO_ARENA", false, &a);
    char *tb = fx_export(dir, n2, graph, "KILN_EXPORT_NO_ARENA", true, &b);
    long long ea, sa, eb, sb;
    s_sizes(ta, &ea, &sa);
    s_sizes(tb, &eb, &sb);
    assert_true(ea < sa);
    assert_int_equal(eb, sb);
    assert_int_equal(sa, sb);
    float *x = kl_xcalloc((size_t)in, sizeof *x);
    float ya[16], yb[16];
    uint64_t seed = 7;
    for (int r = 0; r < 5; r++) {
        for (long long i = 0; i < in; i++)
            x[i] = (float)(s_rng(&seed) % 2001) / 1000.0f - 1.0f;
        assert_int_equal(a.infer(x, ya), 0);
        assert_int_equal(b.infer(x, yb), 0);
        assert_memory_equal(ya, yb, (size_t)out * sizeof(float));
    }
    free(x);
    free(ta);
    free(tb);
}

static void test_arena_export_f32(void **state)
{
    fx_t *fx = *state;
    s_same(fx->dir, s_f32, "f32", 8 * 12 * 12, 10);
}

static void test_arena_export_q(void **state)
{
    fx_t *fx = *state;
    s_same(fx->dir, s_q, "q", 8 * 10 * 10, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_plan),
        cmocka_unit_test(test_arena_code),
        cmocka_unit_test_setup_teardown(test_arena_export_f32, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_arena_export_q, s_setup,
                                        s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
