/* Unit tests of common/kl_store: records, best, seen, filters, meta, map
 * growth, readers in other processes (store_io_test.c: export, import,
 * corruption, full disk). */
#include "store_fx.h"

static void test_workload_put_get(void **state)
{
    fx_t *fx = *state;
    Kiln__Workload w = KILN__WORKLOAD__INIT;
    uint8_t key[16];
    s_key(1, key);
    w.key.data = key;
    w.key.len = 16;
    w.name = "matmul_64_64_64";
    w.op_kind = "matmul";
    w.text = "C[i,j] += A[i,k] * B[k,j]  where i=64, j=64, k=64";
    w.flop = 2.0 * 64 * 64 * 64;
    Kiln__Workload *got = NULL;
    assert_int_equal(kl_store_get_workload(fx->st, key, &got, fx->err),
                     KL_ERR_NOTFOUND);
    assert_int_equal(kl_store_put_workload(fx->st, &w, fx->err), KL_OK);
    assert_int_equal(kl_store_get_workload(fx->st, key, &got, fx->err), KL_OK);
    assert_string_equal(got->name, w.name);
    assert_string_equal(got->text, w.text);
    assert_true(got->flop == w.flop);
    kiln__workload__free_unpacked(got, NULL);
    w.key.len = 3;
    assert_int_equal(kl_store_put_workload(fx->st, &w, fx->err), KL_ERR_INVAL);
    assert_non_null(strstr(fx->err, "16"));
}

static void test_commit_seq_order(void **state)
{
    fx_t *fx = *state;
    /* Two workloads x two targets, interleaved in each batch. */
    for (int batch = 0; batch < 5; batch++) {
        Kiln__TuningRecord *b[8];
        for (int i = 0; i < 8; i++)
            b[i] = s_rec(i % 2, (i / 2) % 2 ? GPU : CPU, 0, 1e-3, false,
                         batch * 8 + i);
        assert_int_equal(kl_store_commit(fx->st, b, 8, fx->err), KL_OK);
        for (int i = 0; i < 8; i++) {
            /* Each (workload, target) gets 2 per batch: seqs 1, 2, 3 ... */
            assert_int_equal(b[i]->seq, (uint64_t)(batch * 2 + i / 4 + 1));
            assert_true(b[i]->time_us > 0);
            s_free(b[i]);
        }
    }
    uint8_t k0[16];
    s_key(0, k0);
    size_t n = 0;
    assert_int_equal(kl_store_count(fx->st, k0, CPU, &n, fx->err), KL_OK);
    assert_int_equal(n, 10);
    assert_int_equal(kl_store_count(fx->st, k0, NULL, &n, fx->err), KL_OK);
    assert_int_equal(n, 20);
    assert_int_equal(kl_store_count(fx->st, NULL, NULL, &n, fx->err), KL_OK);
    assert_int_equal(n, 40);
    /* A bad record fails the whole batch and leaves seqs alone. */
    Kiln__TuningRecord *b2[2] = {s_rec(0, CPU, 0, 1, false, 999),
                                 s_rec(0, CPU, 0, 1, false, 998)};
    b2[1]->trace_hash.len = 5;
    assert_int_equal(kl_store_commit(fx->st, b2, 2, fx->err), KL_ERR_INVAL);
    assert_non_null(strstr(fx->err, "record 1"));
    assert_int_equal(b2[0]->seq, 0);
    assert_int_equal(kl_store_count(fx->st, NULL, NULL, &n, fx->err), KL_OK);
    assert_int_equal(n, 40);
    s_free(b2[0]);
    s_free(b2[1]);
}

static void s_check_best(fx_t *fx, int wl, const char *target, uint64_t seq)
{
    uint8_t key[16];
    s_key(wl, key);
    Kiln__TuningRecord *b = NULL;
    assert_int_equal(
        kl_store_best(fx->st, key, target, KL_COND_WARM, &b, fx->err), KL_OK);
    assert_int_equal(b->seq, seq);
    s_free(b);
}

static void test_best(void **state)
{
    fx_t *fx = *state;
    uint8_t key[16];
    s_key(3, key);
    Kiln__TuningRecord *b = NULL;
    assert_int_equal(kl_store_best(fx->st, key, CPU, KL_COND_WARM, &b, fx->err),
                     KL_ERR_NOTFOUND);
    struct {
        int status;
        double median;
        bool sim;
        uint64_t best_after;
    } steps[] = {
        {KILN__STATUS__STATUS_WRONG_RESULT, 1e-6, false, 0}, /* 1: never */
        {KILN__STATUS__STATUS_OK, NAN, false, 0},            /* 2: never */
        /* 3: simulated on a real target: never a result, even alone */
        {KILN__STATUS__STATUS_OK, 1e-6, true, 0},
        {KILN__STATUS__STATUS_OK, 5e-3, false, 4}, /* 4: the first real */
        {KILN__STATUS__STATUS_OK, 1e-9, true, 4},  /* 5: sim never wins */
        {KILN__STATUS__STATUS_OK, 6e-3, false, 4}, /* 6: slower */
        {KILN__STATUS__STATUS_TIMEOUT, 1e-9, false, 4},
        {KILN__STATUS__STATUS_OK, 2e-3, false, 8}, /* 8: faster */
        {KILN__STATUS__STATUS_OK, 2e-3, false, 8}, /* 9: a tie keeps 8 */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        Kiln__TuningRecord *r = s_rec(3, CPU, steps[i].status, steps[i].median,
                                      steps[i].sim, (int)i);
        assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
        assert_int_equal(r->seq, i + 1);
        s_free(r);
        if (steps[i].best_after == 0)
            assert_int_equal(
                kl_store_best(fx->st, key, CPU, KL_COND_WARM, &b, fx->err),
                KL_ERR_NOTFOUND);
        else
            s_check_best(fx, 3, CPU, steps[i].best_after);
    }
    /* Another target has its own best, and so has the other condition. */
    assert_int_equal(kl_store_best(fx->st, key, GPU, KL_COND_WARM, &b, fx->err),
                     KL_ERR_NOTFOUND);
    assert_int_equal(kl_store_best(fx->st, key, CPU, KL_COND_COLD, &b, fx->err),
                     KL_ERR_NOTFOUND);
}

/* Warm and cold records of one (workload, target) never compete for best;
 * an unverified record (skip_verify) is never best, in either condition;
 * a record without an evaluator (written before records had one) is
 * warm; a simulated target ranks its own records. */
static void test_best_conditions(void **state)
{
    fx_t *fx = *state;
    uint8_t key[16];
    s_key(4, key);
    struct {
        int cond; /* -1: no evaluator (an old record) */
        bool skip_verify;
        double median;
        uint64_t warm_after, cold_after;
    } steps[] = {
        {-1, false, 4e-3, 1, 0},           /* 1: old: warm by default */
        {KL_COND_COLD, false, 9e-3, 1, 2}, /* 2: the first cold */
        {KL_COND_WARM, false, 3e-3, 3, 2}, /* 3: faster warm */
        {KL_COND_COLD, false, 1e-3, 3, 4}, /* 4: faster than every warm */
        {KL_COND_WARM, true, 1e-9, 3, 4},  /* 5: unverified: never */
        {KL_COND_COLD, true, 1e-9, 3, 4},  /* 6: unverified: never */
        {KL_COND_WARM, false, 2e-3, 7, 4}, /* 7: faster warm */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        Kiln__TuningRecord *r = s_rec(4, CPU, KILN__STATUS__STATUS_OK,
                                      steps[i].median, false, 100 + (int)i);
        if (steps[i].cond >= 0)
            r->evaluator = s_eval(steps[i].cond, steps[i].skip_verify);
        assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
        s_free(r);
        Kiln__TuningRecord *b = NULL;
        assert_int_equal(
            kl_store_best(fx->st, key, CPU, KL_COND_WARM, &b, fx->err), KL_OK);
        assert_int_equal(b->seq, steps[i].warm_after);
        assert_int_equal(kl_record_cond(b), KL_COND_WARM);
        s_free(b);
        int rc = kl_store_best(fx->st, key, CPU, KL_COND_COLD, &b, fx->err);
        if (steps[i].cold_after == 0) {
            assert_int_equal(rc, KL_ERR_NOTFOUND);
            continue;
        }
        assert_int_equal(rc, KL_OK);
        assert_int_equal(b->seq, steps[i].cold_after);
        assert_int_equal(kl_record_cond(b), KL_COND_COLD);
        assert_non_null(b->evaluator);
        assert_int_equal(b->evaluator->min_repeat_ms, 0);
        s_free(b);
    }
    /* A simulated target has a best of its own; the real one is unmoved. */
    Kiln__TuningRecord *r =
        s_rec(4, "sim/" CPU, KILN__STATUS__STATUS_OK, 1e-12, true, 200);
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
    s_free(r);
    Kiln__TuningRecord *b = NULL;
    assert_int_equal(
        kl_store_best(fx->st, key, "sim/" CPU, KL_COND_WARM, &b, fx->err),
        KL_OK);
    assert_true(b->simulated && b->median_s == 1e-12);
    s_free(b);
    s_check_best(fx, 4, CPU, 7);
}

/* What each evaluator means (kl_record.h). */
static void test_record_meaning(void **state)
{
    (void)state;
    Kiln__Evaluator e = KILN__EVALUATOR__INIT;
    e.flush_cache = true;
    e.number = 1;
    assert_int_equal(kl_cond_of(&e), KL_COND_COLD);
    e.number = 0; /* the agent's default: one run */
    assert_int_equal(kl_cond_of(&e), KL_COND_COLD);
    e.number = 2;
    assert_int_equal(kl_cond_of(&e), KL_COND_WARM);
    e.number = 1;
    e.min_repeat_ms = 50;
    assert_int_equal(kl_cond_of(&e), KL_COND_WARM);
    e.min_repeat_ms = 0;
    e.flush_cache = false;
    assert_int_equal(kl_cond_of(&e), KL_COND_WARM);
    /* A record without an evaluator reads as the defaults of its time. */
    Kiln__TuningRecord r = KILN__TUNING_RECORD__INIT;
    r.target = CPU;
    r.status = KILN__STATUS__STATUS_OK;
    r.median_s = 1e-3;
    Kiln__Evaluator got;
    kl_record_evaluator(&r, &got);
    assert_true(got.flush_cache && !got.skip_verify);
    assert_int_equal(got.min_repeat_ms, 50);
    assert_int_equal(got.number, 1);
    assert_int_equal(got.repeat, 5);
    assert_int_equal(kl_record_cond(&r), KL_COND_WARM);
    assert_int_equal(kl_record_kind(&r), KL_RECORD_MEASURED);
    assert_true(kl_record_valid(&r));
    r.simulated = true;
    assert_int_equal(kl_record_kind(&r), KL_RECORD_SIMULATED);
    assert_false(kl_record_valid(&r));
    r.target = "sim/" CPU;
    assert_int_equal(kl_record_kind(&r), KL_RECORD_MEASURED);
    r.simulated = false;
    r.target = CPU;
    Kiln__Evaluator sv = KILN__EVALUATOR__INIT;
    sv.skip_verify = true;
    r.evaluator = &sv;
    assert_int_equal(kl_record_kind(&r), KL_RECORD_UNVERIFIED);
    assert_false(kl_record_valid(&r));
    kl_cond_t c;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_cond_parse("cold", &c, err), KL_OK);
    assert_int_equal(c, KL_COND_COLD);
    assert_int_equal(kl_cond_parse("hot", &c, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "hot"));
}

static bool s_seen(fx_t *fx, const uint8_t key[16], const char *target,
                   kl_cond_t cond, const uint8_t hash[16])
{
    bool seen = true;
    assert_int_equal(
        kl_store_seen(fx->st, key, target, cond, hash, &seen, fx->err), KL_OK);
    return seen;
}

static void test_seen(void **state)
{
    fx_t *fx = *state;
    Kiln__TuningRecord *r = s_rec(1, CPU, 0, 1e-3, false, 42);
    uint8_t hash[16], key[16];
    memcpy(hash, r->trace_hash.data, 16);
    s_key(1, key);
    assert_false(s_seen(fx, key, CPU, KL_COND_WARM, hash));
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
    assert_true(s_seen(fx, key, CPU, KL_COND_WARM, hash));
    assert_false(s_seen(fx, key, GPU, KL_COND_WARM, hash));
    /* Measured warm is not measured cold: a cold job measures it. */
    assert_false(s_seen(fx, key, CPU, KL_COND_COLD, hash));
    s_free(r);
    /* Simulated (on a real target) and unverified records are no
     * measurement: their traces stay to be measured. */
    r = s_rec(1, CPU, 0, 1e-3, true, 43);
    memcpy(hash, r->trace_hash.data, 16);
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
    assert_false(s_seen(fx, key, CPU, KL_COND_WARM, hash));
    s_free(r);
    r = s_rec(1, CPU, 0, 1e-3, false, 44);
    r->evaluator = s_eval(KL_COND_COLD, true);
    memcpy(hash, r->trace_hash.data, 16);
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
    assert_false(s_seen(fx, key, CPU, KL_COND_COLD, hash));
    s_free(r);
}

static int s_only_gpu(const Kiln__TuningRecord *r, void *arg)
{
    assert_string_equal(r->target, GPU);
    (*(size_t *)arg)++;
    return 0;
}

/* A callback may read the same store (its own read transaction). */
static int s_nested(const Kiln__TuningRecord *r, void *arg)
{
    fx_t *fx = arg;
    size_t n = 0;
    assert_int_equal(
        kl_store_count(fx->st, r->workload_key.data, r->target, &n, fx->err),
        KL_OK);
    assert_int_equal(n, 5);
    return 0;
}

static void test_foreach_filter(void **state)
{
    fx_t *fx = *state;
    Kiln__TuningRecord *b[30];
    for (int i = 0; i < 30; i++)
        b[i] = s_rec(i % 3, i % 2 ? GPU : CPU, 0, 1e-3, false, i);
    assert_int_equal(kl_store_commit(fx->st, b, 30, fx->err), KL_OK);
    for (int i = 0; i < 30; i++)
        s_free(b[i]);
    walk_t w = {0};
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, NULL, s_walk, &w, fx->err),
        KL_OK);
    assert_int_equal(w.n, 30);
    size_t n = 0;
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, GPU, s_only_gpu, &n, fx->err),
        KL_OK);
    assert_int_equal(n, 15);
    uint8_t k1[16];
    s_key(1, k1);
    n = 0;
    assert_int_equal(
        kl_store_foreach_record(fx->st, k1, GPU, s_only_gpu, &n, fx->err),
        KL_OK);
    assert_int_equal(n, 5);
    walk_t stop = {.stop_at = 4};
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, NULL, s_walk, &stop, fx->err), 7);
    assert_int_equal(stop.n, 4);
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, NULL, s_nested, fx, fx->err),
        KL_OK);
    assert_int_equal(kl_store_count(fx->st, NULL, GPU, &n, fx->err), KL_OK);
    assert_int_equal(n, 15);
    uint8_t none[16] = {0};
    assert_int_equal(kl_store_count(fx->st, none, NULL, &n, fx->err), KL_OK);
    assert_int_equal(n, 0);
}

static void test_meta(void **state)
{
    fx_t *fx = *state;
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(kl_store_meta_get(fx->st, "job", &v, &len, fx->err),
                     KL_ERR_NOTFOUND);
    assert_int_equal(kl_store_meta_put(fx->st, "job", "abc", 3, fx->err),
                     KL_OK);
    assert_int_equal(kl_store_meta_get(fx->st, "job", &v, &len, fx->err),
                     KL_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "abc", 3);
    free(v);
    assert_int_equal(kl_store_meta_put(fx->st, "schema", "x", 1, fx->err),
                     KL_ERR_INVAL);
    assert_int_equal(kl_store_meta_get(fx->st, "schema", &v, &len, fx->err),
                     KL_OK);
    assert_int_equal(len, 4);
    assert_int_equal(((uint8_t *)v)[3], KL_STORE_SCHEMA);
    free(v);
}

static void test_map_growth_and_reopen(void **state)
{
    fx_t *fx = *state;
    kl_store_close(&fx->st);
    s_rmdir(fx->dir); /* the fixture's store starts at 64 MiB */
    assert_int_equal(
        kl_store_open_sized(&fx->st, fx->dir, 0, (size_t)1 << 20, fx->err),
        KL_OK);
    size_t before = kl_store_map_size(fx->st);
    /* 1 MiB start; ~15 MB of records: at least three doublings. */
    s_fill(fx->st, 40000, 0, fx->err);
    size_t after = kl_store_map_size(fx->st);
    assert_true(after >= 8 * before);
    walk_t w = {0};
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, NULL, s_walk, &w, fx->err),
        KL_OK);
    assert_int_equal(w.n, 40000);
    /* Reopen: same records, the map kept, seqs continue. */
    kl_store_close(&fx->st);
    assert_int_equal(kl_store_open(&fx->st, fx->dir, 0, fx->err), KL_OK);
    assert_true(kl_store_map_size(fx->st) >= after);
    Kiln__TuningRecord *r = s_rec(0, CPU, 0, 1e-3, false, -1);
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
    assert_int_equal(r->seq, 40001);
    s_free(r);
    kl_store_close(&fx->st);
    assert_int_equal(kl_store_open(&fx->st, fx->dir, KL_STORE_RDONLY, fx->err),
                     KL_OK);
    size_t n = 0;
    assert_int_equal(kl_store_count(fx->st, NULL, CPU, &n, fx->err), KL_OK);
    assert_int_equal(n, 40001);
    r = s_rec(0, CPU, 0, 1e-3, false, -1);
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_ERR_INVAL);
    assert_non_null(strstr(fx->err, "read-only"));
    s_free(r);
}

/* The child reads while the parent commits: counts never go back, seqs
 * are always 1..count, and the child follows the map as it grows. */
static int s_reader(const char *dir, size_t want)
{
    char err[KL_ERRMSG_LEN];
    kl_store_t *st = NULL;
    if (kl_store_open(&st, dir, KL_STORE_RDONLY, err))
        return 10;
    size_t map0 = kl_store_map_size(st), last = 0;
    double t0 = kl_now_s();
    int rc = 0;
    while (rc == 0 && last < want) {
        if (kl_now_s() - t0 > 50) {
            rc = 11;
            break;
        }
        size_t n = 0;
        if (kl_store_count(st, NULL, NULL, &n, err))
            rc = 12;
        else if (n < last)
            rc = 13;
        walk_t w = {0};
        if (!rc && kl_store_foreach_record(st, NULL, NULL, s_walk, &w, err))
            rc = 14;
        if (!rc && w.n < n)
            rc = 15;
        last = n;
        usleep(2000);
    }
    if (rc == 0 && kl_store_map_size(st) <= map0)
        rc = 16;
    kl_store_close(&st);
    return rc;
}

static void test_reader_process(void **state)
{
    fx_t *fx = *state;
    kl_store_close(&fx->st);
    s_rmdir(fx->dir);
    assert_int_equal(
        kl_store_open_sized(&fx->st, fx->dir, 0, (size_t)1 << 20, fx->err),
        KL_OK);
    kl_store_close(&fx->st); /* no LMDB handle crosses fork() */
    const size_t want = 8000;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(s_reader(fx->dir, want));
    assert_int_equal(
        kl_store_open_sized(&fx->st, fx->dir, 0, (size_t)1 << 20, fx->err),
        KL_OK);
    s_fill(fx->st, (int)want, 0, fx->err);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- export / import ---------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_workload_put_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_seq_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_best, setup, teardown),
        cmocka_unit_test_setup_teardown(test_best_conditions, setup, teardown),
        cmocka_unit_test(test_record_meaning),
        cmocka_unit_test_setup_teardown(test_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreach_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_growth_and_reopen, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reader_process, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
