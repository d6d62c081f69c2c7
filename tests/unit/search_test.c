/* Unit tests of coordinator/search: strategy names and config checks,
 * mutators (each changes what it says, thread binding has nothing to do
 * on a CPU trace), canonical replay, replay's exhaustion bound, the
 * evolutionary proposal (distinct, unknown, model-guided), and the cost
 * model on a shipped data set of real measurements (Kendall tau on held-out
 * records). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_costmodel.h"
#include "kl_err.h"
#include "kl_hashset.h"
#include "kl_search.h"
#include "kl_store.h"
#include "kl_util.h"
#include "kl_test_tmp.h"

#ifndef KL_TEST_DATA
#define KL_TEST_DATA "tests/data"
#endif

typedef struct {
    kl_workload_t *w;
    kl_space_t *sp;
} fx_t;

static fx_t *s_fx(const char *op)
{
    char err[KL_ERRMSG_LEN];
    fx_t *f = kl_xcalloc(1, sizeof *f);
    assert_int_equal(kl_workload_from_string(op, &f->w, err), KL_OK);
    assert_int_equal(
        kl_space_for_target("cpu/x86_64-avx512", f->w, &f->sp, err), KL_OK);
    return f;
}

static void s_fx_free(fx_t *f)
{
    kl_space_destroy(&f->sp);
    kl_workload_free(&f->w);
    free(f);
}

static void test_names_and_config(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_strategy s;
    assert_int_equal(kl_strategy_parse("replay", &s, err), KL_OK);
    assert_int_equal(s, KL_STRATEGY_REPLAY);
    assert_int_equal(kl_strategy_parse("evolutionary", &s, err), KL_OK);
    assert_int_equal(s, KL_STRATEGY_EVOLUTIONARY);
    assert_int_equal(kl_strategy_parse("annealing", &s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "annealing"));
    kl_search_cfg_t cfg;
    kl_search_cfg_default(&cfg);
    assert_int_equal(cfg.population, 512);
    assert_int_equal(cfg.generations, 4);
    assert_true(cfg.mutate_prob == 0.85 && cfg.eps_greedy == 0.05);
    fx_t *f = s_fx("matmul M=64 N=64 K=64");
    kl_search_t *se = NULL;
    cfg.population = 0;
    assert_int_equal(kl_search_new(&se, f->sp, &cfg, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "population"));
    kl_search_cfg_default(&cfg);
    cfg.eps_greedy = 1.5;
    assert_int_equal(kl_search_new(&se, f->sp, &cfg, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "eps_greedy"));
    assert_null(se);
    s_fx_free(f);
}

static int64_t s_par_extent(const kl_sched_t *s)
{
    for (int i = 0; i < kl_sched_nloops(s); i++)
        if (kl_sched_loop(s, i)->kind == KL_LOOP_PARALLEL)
            return kl_sched_loop(s, i)->extent;
    return 0;
}

static int64_t s_unroll_step(const kl_sched_t *s)
{
    for (int i = 0; i < kl_sched_nloops(s); i++) {
        const kl_loop_t *l = kl_sched_loop(s, i);
        for (int a = 0; a < l->nannots; a++)
            if (!strcmp(l->annots[a].key, "unroll_max_step"))
                return l->annots[a].value;
    }
    return 0;
}

static int s_packed_at(const kl_sched_t *s)
{
    int sum = 0;
    for (int i = 0; i < kl_sched_nstages(s); i++)
        if (kl_sched_stage(s, i)->scope == KL_SCOPE_PACKED)
            sum += 1 + kl_sched_stage_attach_pos(s, kl_sched_stage(s, i));
    return sum;
}

/* Each mutator, over many sampled traces, yields valid traces that differ
 * from the parent in the way it claims. */
static void test_mutators(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_t *f = s_fx("matmul M=128 N=128 K=128");
    kl_rng_t rng;
    kl_rng_seed(&rng, 3);
    int changed[KL_MUT__COUNT] = {0}, what[KL_MUT__COUNT] = {0};
    for (int k = 0; k < 40; k++) {
        kl_trace_t *t = NULL;
        kl_sched_t *s = NULL;
        assert_int_equal(kl_space_sample(f->sp, &rng, &t, &s, 0, NULL, err),
                         KL_OK);
        uint8_t h0[16];
        kl_trace_hash(t, h0);
        for (int m = 0; m < KL_MUT__COUNT; m++) {
            kl_trace_t *mt = NULL, *fixed = NULL;
            kl_sched_t *ms = NULL;
            int rc = kl_mutate(t, (kl_mutator)m, &rng, &mt, err);
            if (m == KL_MUT_THREAD_BINDING) {
                assert_int_equal(rc, KL_ERR_NOTFOUND);
                assert_non_null(strstr(err, "thread_binding"));
                continue;
            }
            if (rc) {
                assert_int_equal(rc, KL_ERR_NOTFOUND);
                continue;
            }
            if (kl_space_fix(f->sp, mt, &rng, &fixed, &ms, err) == KL_OK) {
                uint8_t h1[16];
                kl_trace_hash(fixed, h1);
                changed[m] += memcmp(h0, h1, 16) != 0;
                what[m] +=
                    m == KL_MUT_PARALLEL ? s_par_extent(ms) != s_par_extent(s)
                    : m == KL_MUT_UNROLL ? s_unroll_step(ms) != s_unroll_step(s)
                    : m == KL_MUT_COMPUTE_LOCATION
                        ? s_packed_at(ms) != s_packed_at(s)
                        : memcmp(h0, h1, 16) != 0;
            }
            kl_trace_free(&mt);
            kl_trace_free(&fixed);
            kl_sched_destroy(&ms);
        }
        kl_trace_free(&t);
        kl_sched_destroy(&s);
    }
    for (int m = 0; m < KL_MUT__COUNT; m++) {
        if (m == KL_MUT_THREAD_BINDING)
            continue;
        fprintf(stderr, "mutator %-16s changed %2d, as claimed %2d (of 40)\n",
                kl_mutator_name((kl_mutator)m), changed[m], what[m]);
        assert_true(changed[m] >= 5);
        assert_true(what[m] >= 3);
    }
    s_fx_free(f);
}

static int64_t s_threads(const kl_sched_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < kl_sched_nloops(s); i++) {
        kl_loop_kind k = kl_sched_loop(s, i)->kind;
        if (k == KL_LOOP_THREAD_X || k == KL_LOOP_THREAD_Y ||
            k == KL_LOOP_THREAD_Z)
            n *= kl_sched_loop(s, i)->extent;
    }
    return n;
}

/* On a CUDA trace the thread-binding mutator changes the extent of the
 * threadIdx-bound loops (the tiles split from the changed one are drawn
 * again). Sampling a CUDA space needs no GPU. */
static void test_thread_binding(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    kl_space_t *sp = NULL;
    assert_int_equal(
        kl_workload_from_string("matmul M=256 N=256 K=256", &w, err), KL_OK);
    if (kl_space_for_target("cuda/sm_90", w, &sp, err) == KL_ERR_UNSUPPORTED) {
        kl_workload_free(&w);
        skip();
    }
    assert_non_null(sp);
    kl_rng_t rng;
    kl_rng_seed(&rng, 1);
    int changed = 0;
    for (int k = 0; k < 20; k++) {
        kl_trace_t *t = NULL, *m = NULL, *f = NULL;
        kl_sched_t *s = NULL, *fs = NULL;
        assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err),
                         KL_OK);
        assert_int_equal(kl_mutate(t, KL_MUT_THREAD_BINDING, &rng, &m, err),
                         KL_OK);
        if (kl_space_fix(sp, m, &rng, &f, &fs, err) == KL_OK)
            changed += s_threads(fs) != s_threads(s);
        kl_trace_free(&t);
        kl_trace_free(&m);
        kl_trace_free(&f);
        kl_sched_destroy(&s);
        kl_sched_destroy(&fs);
    }
    fprintf(stderr, "thread binding: threads per block changed in %d of 20\n",
            changed);
    assert_true(changed >= 5);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* A sampled trace is canonical; fixing it changes nothing. */
static void test_canonical(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_t *f = s_fx("conv2d N=1 C=16 H=8 W=8 K=16 R=3 S=3 pad=1");
    kl_rng_t rng;
    kl_rng_seed(&rng, 5);
    for (int k = 0; k < 20; k++) {
        kl_trace_t *t = NULL, *c = NULL, *fx = NULL;
        assert_int_equal(kl_space_sample(f->sp, &rng, &t, NULL, 0, NULL, err),
                         KL_OK);
        uint8_t a[16], b[16], d[16];
        kl_trace_hash(t, a);
        c = kl_trace_clone(t);
        kl_trace_canonicalize(c);
        kl_trace_hash(c, b);
        assert_memory_equal(a, b, 16);
        assert_int_equal(kl_space_fix(f->sp, t, NULL, &fx, NULL, err), KL_OK);
        kl_trace_hash(fx, d);
        assert_memory_equal(a, d, 16);
        kl_trace_free(&t);
        kl_trace_free(&c);
        kl_trace_free(&fx);
    }
    s_fx_free(f);
}

static bool s_known(void *ctx, const uint8_t h[16])
{
    return kl_hashset_has(ctx, h);
}

/* Replay on a tiny space: distinct proposals until it says exhausted,
 * within the bound, never hanging. */
static void test_replay_exhausts(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_t *f = s_fx("matmul M=2 N=16 K=2");
    kl_search_cfg_t cfg;
    kl_search_cfg_default(&cfg);
    cfg.strategy = KL_STRATEGY_REPLAY;
    cfg.max_known_draws = 64;
    cfg.seed = 9;
    kl_search_t *se = NULL;
    assert_int_equal(kl_search_new(&se, f->sp, &cfg, err), KL_OK);
    kl_hashset_t known = {0};
    kl_search_cand_t out[8];
    int total = 0, rc = KL_OK, rounds = 0;
    double t0 = kl_now_s();
    while (rc == KL_OK && rounds++ < 1000) {
        int n = 0;
        rc = kl_search_propose(se, 8, s_known, &known, out, &n, err);
        for (int i = 0; i < n; i++) {
            assert_true(out[i].random);
            assert_true(kl_hashset_add(&known, out[i].hash));
            kl_search_cand_free(&out[i]);
        }
        total += n;
    }
    fprintf(stderr, "tiny space: %d distinct traces, then: %s (%.2f s)\n",
            total, err, kl_now_s() - t0);
    assert_int_equal(rc, KL_ERR_EXHAUSTED);
    assert_non_null(strstr(err, "exhausted"));
    assert_true(total > 0 && rounds < 1000);
    kl_hashset_free(&known);
    kl_search_destroy(&se);
    s_fx_free(f);
}

/* Before the cost model is trained a batch follows the design space's
 * own probabilities: a bf16 product on a +bf16 target samples the
 * tensorized tiling with p 0.6 beside the many float schedules, and
 * evolving on random scores used to leave it a few picks in 32. */
static void test_untrained_follows_space(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_t *f = kl_xcalloc(1, sizeof *f);
    assert_int_equal(
        kl_workload_from_string("matmul M=64 N=64 K=64 in=bf16", &f->w, err),
        KL_OK);
    assert_int_equal(
        kl_space_for_target("cpu/x86_64-avx512+bf16", f->w, &f->sp, err),
        KL_OK);
    kl_search_cfg_t cfg;
    kl_search_cfg_default(&cfg);
    cfg.population = 128;
    cfg.seed = 7;
    kl_search_t *se = NULL;
    assert_int_equal(kl_search_new(&se, f->sp, &cfg, err), KL_OK);
    kl_search_cand_t out[32];
    int n = 0, tz = 0;
    assert_int_equal(kl_search_propose(se, 32, NULL, NULL, out, &n, err),
                     KL_OK);
    assert_int_equal(n, 32);
    for (int i = 0; i < n; i++) {
        kl_tensorize_t t;
        assert_true(out[i].random);
        tz += kl_sched_tensorized(out[i].sched, &t, err) == KL_OK;
        kl_search_cand_free(&out[i]);
    }
    fprintf(stderr, "untrained batch: %d of %d tensorized\n", tz, n);
    assert_true(tz >= 13 && tz < n); /* p 0.6 of 32: 19 expected */
    kl_search_destroy(&se);
    s_fx_free(f);
}

/* A made-up latency of a schedule: fast with a big register tile, a
 * parallel extent that is a multiple of 2 and packing. */
static double s_fake_latency(const float *x)
{
    return 1e-3 / (1.0 + x[20] + 2.0 * x[16] + x[28]);
}

static void test_evolutionary(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    fx_t *f = s_fx("matmul M=128 N=128 K=128");
    kl_search_cfg_t cfg;
    kl_search_cfg_default(&cfg);
    cfg.population = 96;
    cfg.generations = 2;
    cfg.eps_greedy = 0;
    cfg.model_min_rows = 32;
    cfg.seed = 4;
    kl_search_t *se = NULL;
    assert_int_equal(kl_search_new(&se, f->sp, &cfg, err), KL_OK);
    kl_hashset_t known = {0};
    kl_search_cand_t out[32];
    double best_first = INFINITY, best_later = INFINITY;
    for (int round = 0; round < 4; round++) {
        int n = 0;
        assert_int_equal(
            kl_search_propose(se, 32, s_known, &known, out, &n, err), KL_OK);
        assert_int_equal(n, 32);
        int guided = 0;
        for (int i = 0; i < n; i++) {
            uint8_t h[16];
            kl_trace_hash(out[i].trace, h);
            assert_memory_equal(h, out[i].hash, 16);
            assert_true(kl_hashset_add(&known, h));
            guided += !out[i].random;
            double lat = s_fake_latency(out[i].features);
            if (round == 0)
                best_first = fmin(best_first, lat);
            else
                best_later = fmin(best_later, lat);
            kl_search_observe(se, out[i].trace, out[i].features, true, lat);
            kl_search_cand_free(&out[i]);
        }
        /* The model is trained after 32 results: from the second batch
         * on, every pick is the model's (eps 0). */
        if (round > 0) {
            assert_true(kl_search_model_trained(se));
            assert_int_equal(guided, n);
        }
    }
    assert_int_equal(kl_search_observed(se), 128);
    assert_true(best_later <= best_first);
    kl_hashset_free(&known);
    kl_search_destroy(&se);
    s_fx_free(f);
}

typedef struct {
    char *text;
    kl_workload_t *w;
    kl_space_t *sp;
    float *x;
    double *lat;
    size_t n, cap;
} ds_t;

static int s_ds_workload(const Kiln__Workload *w, void *arg)
{
    ds_t *d = arg;
    if (!d->text)
        d->text = kl_xstrdup(w->text);
    return 0;
}

static int s_ds_rec(const Kiln__TuningRecord *r, void *arg)
{
    ds_t *d = arg;
    if (r->status != KILN__STATUS__STATUS_OK || !(r->median_s > 0))
        return 0;
    kl_trace_t *t = NULL, *fx = NULL;
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    int rc = kl_trace_from_proto(r->trace.data, r->trace.len, &t, err);
    /* The space the trace was sampled from (its target's vector width). */
    if (!rc && !d->sp)
        rc = kl_space_for_target(kl_trace_space(t), d->w, &d->sp, err);
    if (!rc)
        rc = kl_space_fix(d->sp, t, NULL, &fx, &s, err);
    if (rc) {
        fprintf(stderr, "record %llu: %s\n", (unsigned long long)r->seq, err);
        kl_trace_free(&t);
        return 1;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 256;
        d->x = kl_xrealloc(d->x, d->cap * KL_FEATURES_N * sizeof *d->x);
        d->lat = kl_xrealloc(d->lat, d->cap * sizeof *d->lat);
    }
    kl_features_extract(s, kl_space_target(d->sp), d->x + d->n * KL_FEATURES_N);
    d->lat[d->n++] = r->median_s;
    kl_trace_free(&t);
    kl_trace_free(&fx);
    kl_sched_destroy(&s);
    return 0;
}

/* The cost model ranks held-out records of a real tuning run better than
 * chance. tests/data/costmodel_matmul.jsonl is `kiln db export` of the
 * first 250 records of `kiln tune --op "matmul M=1024 N=1024 K=1024"
 * --strategy evolutionary --seed 1` on a 2-core machine shared with other
 * jobs (so the latencies are noisy): features recomputed by replaying the
 * stored traces, a fixed 70/30 split, Kendall tau of predicted scores vs
 * measured speed. */
static void test_costmodel_dataset(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    char dir[256];
    assert_non_null(
        kl_test_mkdtemp(dir, sizeof dir, "kiln-search-test-XXXXXX"));
    kl_store_t *st = NULL;
    assert_int_equal(kl_store_open(&st, dir, KL_STORE_NOSYNC, err), KL_OK);
    FILE *in = fopen(KL_TEST_DATA "/costmodel_matmul.jsonl", "r");
    assert_non_null(in);
    size_t imported = 0;
    assert_int_equal(kl_store_import_jsonl(st, in, &imported, err), KL_OK);
    fclose(in);
    ds_t d = {0};
    assert_int_equal(kl_store_foreach_workload(st, s_ds_workload, &d, err),
                     KL_OK);
    assert_non_null(d.text);
    assert_int_equal(kl_workload_from_string(d.text, &d.w, err), KL_OK);
    assert_int_equal(
        kl_store_foreach_record(st, d.w->key, NULL, s_ds_rec, &d, err), KL_OK);
    kl_store_close(&st);
    assert_true(d.n >= 150);

    kl_costmodel_cfg_t mc;
    kl_costmodel_cfg_default(&mc, KL_FEATURES_N);
    mc.seed = 1;
    kl_costmodel_t *m = NULL;
    assert_int_equal(kl_costmodel_new(&m, &mc, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 1);
    bool *test = kl_xcalloc(d.n, sizeof *test);
    float *tx = kl_xmalloc(d.n * KL_FEATURES_N * sizeof *tx);
    float *pred = kl_xmalloc(d.n * sizeof *pred);
    double *truth = kl_xmalloc(d.n * sizeof *truth);
    double *pd = kl_xmalloc(d.n * sizeof *pd);
    size_t nt = 0;
    for (size_t i = 0; i < d.n; i++) {
        test[i] = kl_rng_double(&rng) < 0.3;
        if (!test[i]) {
            kl_costmodel_add(m, d.x + i * KL_FEATURES_N, 1e-3 / d.lat[i], 0);
            continue;
        }
        memcpy(tx + nt * KL_FEATURES_N, d.x + i * KL_FEATURES_N,
               KL_FEATURES_N * sizeof *tx);
        truth[nt++] = 1.0 / d.lat[i];
    }
    assert_int_equal(kl_costmodel_train(m, err), KL_OK);
    assert_int_equal(kl_costmodel_predict(m, tx, nt, pred, err), KL_OK);
    for (size_t i = 0; i < nt; i++)
        pd[i] = pred[i];
    double tau = kl_kendall_tau(truth, pd, nt);
    fprintf(stderr, "cost model: %zu records, %zu held out, Kendall tau %.3f\n",
            d.n, nt, tau);
    assert_true(tau > 0.3);
    kl_costmodel_destroy(&m);
    free(test);
    free(tx);
    free(pred);
    free(truth);
    free(pd);
    free(d.x);
    free(d.lat);
    free(d.text);
    kl_space_destroy(&d.sp);
    kl_workload_free(&d.w);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_config),
        cmocka_unit_test(test_mutators),
        cmocka_unit_test(test_thread_binding),
        cmocka_unit_test(test_canonical),
        cmocka_unit_test(test_replay_exhausts),
        cmocka_unit_test(test_evolutionary),
        cmocka_unit_test(test_untrained_follows_space),
        cmocka_unit_test(test_costmodel_dataset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
