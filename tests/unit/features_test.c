/* Unit tests of coordinator/search/kl_features: fixed length, stable names,
 * determinism (same nest, same bytes, also after a trace round trip), and
 * features that tell schedules apart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_search.h"
#include "kl_space.h"
#include "kl_util.h"

typedef struct {
    kl_workload_t *w;
    kl_space_t *sp;
} fx_t;

static int s_setup(void **state, const char *op)
{
    char err[KL_ERRMSG_LEN];
    fx_t *f = kl_xcalloc(1, sizeof *f);
    if (kl_workload_from_string(op, &f->w, err) ||
        kl_space_for_target("cpu/x86_64-avx512", f->w, &f->sp, err)) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

static int s_setup_mm(void **state)
{
    return s_setup(state, "matmul M=128 N=128 K=128");
}

static int s_setup_conv(void **state)
{
    return s_setup(state, "conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 pad=1");
}

static int s_teardown(void **state)
{
    fx_t *f = *state;
    kl_space_destroy(&f->sp);
    kl_workload_free(&f->w);
    free(f);
    return 0;
}

static void test_names(void **state)
{
    (void)state;
    for (int i = 0; i < KL_FEATURES_N; i++) {
        const char *n = kl_features_name(i);
        assert_non_null(n);
        assert_string_not_equal(n, "?");
        for (int j = 0; j < i; j++)
            assert_string_not_equal(n, kl_features_name(j));
    }
    assert_string_equal(kl_features_name(KL_FEATURES_N), "?");
    assert_string_equal(kl_features_name(-1), "?");
}

/* Same trace -> same bytes, also after text and proto round trips; every
 * value finite; the vector has exactly KL_FEATURES_N entries (a guard
 * after it stays untouched). */
static void test_deterministic(void **state)
{
    fx_t *f = *state;
    char err[KL_ERRMSG_LEN];
    kl_rng_t rng;
    kl_rng_seed(&rng, 7);
    for (int k = 0; k < 20; k++) {
        kl_trace_t *t = NULL;
        kl_sched_t *s = NULL;
        assert_int_equal(kl_space_sample(f->sp, &rng, &t, &s, 0, NULL, err),
                         KL_OK);
        float a[KL_FEATURES_N + 1], b[KL_FEATURES_N + 1];
        a[KL_FEATURES_N] = b[KL_FEATURES_N] = 12345.0f;
        kl_features_extract(s, kl_space_target(f->sp), a);
        assert_true(a[KL_FEATURES_N] == 12345.0f);
        for (int i = 0; i < KL_FEATURES_N; i++)
            assert_true(isfinite(a[i]));
        /* Through text and proto, replayed on a fresh nest. */
        char *text = kl_trace_to_text(t);
        kl_trace_t *t2 = NULL;
        assert_int_equal(kl_trace_from_text(text, &t2, err), KL_OK);
        uint8_t *buf;
        size_t len;
        kl_trace_to_proto(t2, &buf, &len);
        kl_trace_t *t3 = NULL;
        assert_int_equal(kl_trace_from_proto(buf, len, &t3, err), KL_OK);
        kl_sched_t *s3 = NULL;
        assert_int_equal(kl_space_replay(f->sp, t3, &s3, err), KL_OK);
        kl_features_extract(s3, kl_space_target(f->sp), b);
        assert_memory_equal(a, b, sizeof(float) * KL_FEATURES_N);
        free(text);
        free(buf);
        kl_trace_free(&t);
        kl_trace_free(&t2);
        kl_trace_free(&t3);
        kl_sched_destroy(&s);
        kl_sched_destroy(&s3);
    }
}

/* Different samples give different vectors (the model needs that), and
 * the naive nest differs from any tiled one. */
static void test_distinguishes(void **state)
{
    fx_t *f = *state;
    char err[KL_ERRMSG_LEN];
    kl_rng_t rng;
    kl_rng_seed(&rng, 11);
    enum { N = 30 };
    static float v[N][KL_FEATURES_N];
    int distinct = 0;
    for (int k = 0; k < N; k++) {
        kl_trace_t *t = NULL;
        kl_sched_t *s = NULL;
        assert_int_equal(kl_space_sample(f->sp, &rng, &t, &s, 0, NULL, err),
                         KL_OK);
        kl_features_extract(s, kl_space_target(f->sp), v[k]);
        bool same = false;
        for (int j = 0; j < k && !same; j++)
            same = !memcmp(v[j], v[k], sizeof v[k]);
        distinct += !same;
        kl_trace_free(&t);
        kl_sched_destroy(&s);
    }
    assert_true(distinct >= N * 2 / 3);
    kl_sched_t *naive = NULL;
    assert_int_equal(kl_sched_create(&naive, f->w, err), KL_OK);
    float nv[KL_FEATURES_N];
    kl_features_extract(naive, kl_space_target(f->sp), nv);
    assert_true(nv[0] == (float)f->w->niters); /* nloops */
    assert_true(nv[9] == 0.0f);                /* no parallel loop */
    for (int k = 0; k < N; k++)
        assert_memory_not_equal(nv, v[k], sizeof nv);
    kl_sched_destroy(&naive);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test_setup_teardown(test_deterministic, s_setup_mm,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_distinguishes, s_setup_mm,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_deterministic, s_setup_conv,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_distinguishes, s_setup_conv,
                                        s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
