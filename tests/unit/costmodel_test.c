/* Unit tests of coordinator/search/kl_costmodel (XGBoost rank:pairwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <cmocka.h>

#include "kl_costmodel.h"
#include "kl_err.h"
#include "kl_util.h"

#define NF 8

/* A made-up latency landscape with interactions and a non-linearity, so a
 * linear ranker would not do well. */
static double s_truth(const float *x)
{
    return x[0] * x[1] + sin(3.0 * x[2]) - x[3] * x[3] + 0.5 * x[4];
}

static void s_row(kl_rng_t *rng, float *x)
{
    for (int i = 0; i < NF; i++)
        x[i] = (float)(2.0 * kl_rng_double(rng) - 1.0);
}

static void test_kendall(void **state)
{
    (void)state;
    double a[] = {1, 2, 3, 4, 5};
    double b[] = {10, 20, 30, 40, 50};
    double c[] = {5, 4, 3, 2, 1};
    assert_true(fabs(kl_kendall_tau(a, b, 5) - 1.0) < 1e-12);
    assert_true(fabs(kl_kendall_tau(a, c, 5) + 1.0) < 1e-12);
    double d[] = {1, 1, 1, 1, 1};
    assert_true(kl_kendall_tau(a, d, 5) == 0.0);
}

static void test_untrained(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_costmodel_cfg_t cfg;
    kl_costmodel_cfg_default(&cfg, 0);
    kl_costmodel_t *m = NULL;
    assert_int_equal(kl_costmodel_new(&m, &cfg, err), KL_ERR_INVAL);
    kl_costmodel_cfg_default(&cfg, NF);
    assert_int_equal(kl_costmodel_new(&m, &cfg, err), KL_OK);
    float x[NF] = {0}, out[1];
    assert_int_equal(kl_costmodel_predict(m, x, 1, out, err), KL_ERR_INVAL);
    assert_int_equal(kl_costmodel_train(m, err), KL_ERR_INVAL);
    assert_false(kl_costmodel_wants_training(m));
    kl_costmodel_destroy(&m);
    assert_null(m);
}

static void test_ranks_held_out(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_costmodel_cfg_t cfg;
    kl_costmodel_cfg_default(&cfg, NF);
    kl_costmodel_t *m = NULL;
    assert_int_equal(kl_costmodel_new(&m, &cfg, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 7);
    float x[NF];
    for (int i = 0; i < 600; i++) {
        s_row(&rng, x);
        kl_costmodel_add(m, x, s_truth(x), (uint32_t)(i % 3));
        if (i == 62)
            assert_false(kl_costmodel_wants_training(m));
    }
    assert_true(kl_costmodel_wants_training(m));
    assert_int_equal(kl_costmodel_train(m, err), KL_OK);
    assert_true(kl_costmodel_trained(m));
    assert_false(kl_costmodel_wants_training(m));

    enum { N = 300 };
    float *tx = kl_xmalloc(sizeof(float) * N * NF);
    float pred[N];
    double truth[N], predd[N];
    for (int i = 0; i < N; i++) {
        s_row(&rng, tx + i * NF);
        truth[i] = s_truth(tx + i * NF);
    }
    assert_int_equal(kl_costmodel_predict(m, tx, N, pred, err), KL_OK);
    for (int i = 0; i < N; i++)
        predd[i] = pred[i];
    double tau = kl_kendall_tau(truth, predd, N);
    assert_true(tau > 0.5);

    /* 20 % more data asks for a retrain. */
    for (int i = 0; i < 120; i++) {
        s_row(&rng, x);
        kl_costmodel_add(m, x, s_truth(x), 0);
    }
    assert_true(kl_costmodel_wants_training(m));
    free(tx);
    kl_costmodel_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kendall),
        cmocka_unit_test(test_untrained),
        cmocka_unit_test(test_ranks_held_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
