/* Unit tests of common/kl_store's edges: JSON lines export and import
 * (lossless, malformed input), corrupt values, a missing or foreign
 * schema, a full disk. */
#include "store_fx.h"

typedef struct {
    Kiln__TuningRecord **recs;
    size_t n, cap;
} list_t;

static int s_collect(const Kiln__TuningRecord *r, void *arg)
{
    list_t *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->recs = kl_xrealloc(l->recs, l->cap * sizeof *l->recs);
    }
    size_t len = kiln__tuning_record__get_packed_size(r);
    uint8_t *buf = kl_xmalloc(len);
    kiln__tuning_record__pack(r, buf);
    l->recs[l->n++] = kiln__tuning_record__unpack(NULL, len, buf);
    free(buf);
    return 0;
}

static void s_list_free(list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        s_free(l->recs[i]);
    free(l->recs);
}

static void s_assert_same_record(const Kiln__TuningRecord *a,
                                 const Kiln__TuningRecord *b)
{
    size_t na = kiln__tuning_record__get_packed_size(a);
    size_t nb = kiln__tuning_record__get_packed_size(b);
    assert_int_equal(na, nb);
    uint8_t *pa = kl_xmalloc(na), *pb = kl_xmalloc(nb);
    kiln__tuning_record__pack(a, pa);
    kiln__tuning_record__pack(b, pb);
    assert_memory_equal(pa, pb, na);
    free(pa);
    free(pb);
}

static void test_export_import(void **state)
{
    fx_t *fx = *state;
    Kiln__Workload w = KILN__WORKLOAD__INIT;
    uint8_t key[16];
    s_key(0, key);
    w.key = (ProtobufCBinaryData){16, key};
    w.name = "conv";
    w.op_kind = "conv2d";
    w.flop = 1.0 / 3.0;
    Kiln__KernelArg a = KILN__KERNEL_ARG__INIT, *args[1] = {&a};
    int64_t shape[3] = {1, -2, 3000000000LL};
    a.name = "X";
    a.dtype = KILN__DTYPE__DTYPE_BF16;
    a.shape = shape;
    a.n_shape = 3;
    a.role = KILN__ARG_ROLE__ROLE_OUTPUT;
    w.args = args;
    w.n_args = 1;
    assert_int_equal(kl_store_put_workload(fx->st, &w, fx->err), KL_OK);
    for (int i = 0; i < 300; i++) {
        Kiln__TuningRecord *r = s_rec(i % 4, i % 3 ? CPU : GPU, i % 5 ? 0 : 4,
                                      1e-3 / (1 + i % 7), i % 11 == 0, i % 250);
        r->spread = i % 13 ? 0.1 * i : INFINITY;
        r->number = (uint32_t)i;
        r->compile_s = NAN;
        /* Old records (no evaluator), warm, cold and unverified ones. */
        if ((i / 4) % 4)
            r->evaluator = s_eval(
                (i / 4) % 4 == 1 ? KL_COND_COLD : KL_COND_WARM, i % 17 == 0);
        assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
        s_free(r);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/export.jsonl", fx->dir);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    assert_int_equal(kl_store_export_jsonl(fx->st, f, fx->err), KL_OK);
    rewind(f);
    char dir2[256];
    assert_non_null(
        kl_test_mkdtemp(dir2, sizeof dir2, "kiln-store-test2-XXXXXX"));
    kl_store_t *st2 = NULL;
    assert_int_equal(kl_store_open(&st2, dir2, 0, fx->err), KL_OK);
    size_t imported = 0;
    assert_int_equal(kl_store_import_jsonl(st2, f, &imported, fx->err), KL_OK);
    assert_int_equal(imported, 301);
    /* Every record, byte for byte, in the same order with the same seq. */
    list_t l1 = {0}, l2 = {0};
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, NULL, s_collect, &l1, fx->err),
        KL_OK);
    assert_int_equal(
        kl_store_foreach_record(st2, NULL, NULL, s_collect, &l2, fx->err),
        KL_OK);
    assert_int_equal(l1.n, 300);
    assert_int_equal(l2.n, 300);
    for (size_t i = 0; i < l1.n; i++)
        s_assert_same_record(l1.recs[i], l2.recs[i]);
    /* Same best of each condition and seen for every (workload, target). */
    size_t nbest = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t kk[16];
        s_key(k, kk);
        for (int t = 0; t < 2 * KL_COND_COUNT; t++) {
            const char *tg = t % 2 ? GPU : CPU;
            kl_cond_t cond = t / 2 ? KL_COND_COLD : KL_COND_WARM;
            Kiln__TuningRecord *b1 = NULL, *b2 = NULL;
            int rc1 = kl_store_best(fx->st, kk, tg, cond, &b1, fx->err);
            int rc2 = kl_store_best(st2, kk, tg, cond, &b2, fx->err);
            assert_int_equal(rc2, rc1);
            if (rc1 == KL_ERR_NOTFOUND)
                continue;
            assert_int_equal(rc1, KL_OK);
            s_assert_same_record(b1, b2);
            assert_int_equal(kl_record_cond(b2), cond);
            assert_true(kl_record_valid(b2));
            nbest++;
            s_free(b1);
            s_free(b2);
        }
    }
    assert_true(nbest >= 12);
    size_t nevaluator = 0;
    for (size_t i = 0; i < l1.n; i++) {
        const Kiln__TuningRecord *r = l1.recs[i];
        bool s1 = false, s2 = false;
        kl_cond_t cond = kl_record_cond(r);
        assert_int_equal(kl_store_seen(fx->st, r->workload_key.data, r->target,
                                       cond, r->trace_hash.data, &s1, fx->err),
                         KL_OK);
        assert_int_equal(kl_store_seen(st2, r->workload_key.data, r->target,
                                       cond, r->trace_hash.data, &s2, fx->err),
                         KL_OK);
        assert_true(s1 == s2);
        if (kl_record_kind(r) == KL_RECORD_MEASURED)
            assert_true(s2);
        /* The evaluator made it through JSON, every field of it. */
        nevaluator += l2.recs[i]->evaluator != NULL;
        if (r->evaluator) {
            assert_non_null(l2.recs[i]->evaluator);
            assert_true(l2.recs[i]->evaluator->rtol == 1.0 / 3.0);
            assert_int_equal(l2.recs[i]->evaluator->seed, 12345678901234ULL);
        }
    }
    assert_int_equal(nevaluator, 224);
    Kiln__Workload *w2 = NULL;
    assert_int_equal(kl_store_get_workload(st2, key, &w2, fx->err), KL_OK);
    assert_true(w2->flop == w.flop);
    assert_int_equal(w2->args[0]->shape[2], 3000000000LL);
    assert_int_equal(w2->args[0]->dtype, KILN__DTYPE__DTYPE_BF16);
    kiln__workload__free_unpacked(w2, NULL);
    /* Importing the same file again changes nothing. */
    rewind(f);
    assert_int_equal(kl_store_import_jsonl(st2, f, &imported, fx->err), KL_OK);
    assert_int_equal(imported, 1); /* the workload is rewritten */
    size_t n = 0;
    assert_int_equal(kl_store_count(st2, NULL, NULL, &n, fx->err), KL_OK);
    assert_int_equal(n, 300);
    fclose(f);
    s_list_free(&l1);
    s_list_free(&l2);
    kl_store_close(&st2);
    s_rmdir(dir2);
}

static int s_import_text(kl_store_t *st, const char *text, size_t *imported,
                         char *err)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    int rc = kl_store_import_jsonl(st, f, imported, err);
    fclose(f);
    return rc;
}

static void test_import_malformed(void **state)
{
    fx_t *fx = *state;
    Kiln__TuningRecord *r = s_rec(2, CPU, 0, 1e-3, false, 5);
    r->seq = 0;
    char *line = kl_store_json_line("record", &r->base);
    char *text = kl_xasprintf("%s\n\n%s\n{\"type\":\"record\",\"target\":\n",
                              line, line);
    size_t imported = 9;
    assert_int_equal(s_import_text(fx->st, text, &imported, fx->err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(fx->err, "line 4"));
    assert_int_equal(imported, 2); /* the lines before stay, seq 0 -> new */
    size_t n = 0;
    assert_int_equal(kl_store_count(fx->st, NULL, NULL, &n, fx->err), KL_OK);
    assert_int_equal(n, 2);
    struct {
        const char *text, *want;
    } bad[] = {
        {"{\"type\":\"record\",\"bogus\":1}\n", "bogus"},
        {"{\"type\":\"record\",\"trace\":\"zz\"}\n", "trace"},
        {"{\"type\":\"record\",\"seq\":-1}\n", "seq"},
        {"{\"type\":\"record\",\"status\":\"STATUS_NOPE\"}\n", "status"},
        {"{\"type\":\"record\",\"samples\":[1,\"x\"]}\n", "samples"},
        {"{\"type\":\"car\"}\n", "line 1"},
        {"[1,2]\n", "line 1"},
        {"{\"type\":\"record\"} trailing\n", "line 1"},
        {"{\"type\":\"record\",\"workload_key\":\"00\",\"target\":\"t\"}\n",
         "workload_key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fx->err[0] = '\0';
        assert_int_not_equal(s_import_text(fx->st, bad[i].text, NULL, fx->err),
                             KL_OK);
        if (!strstr(fx->err, bad[i].want))
            fail_msg("case %zu: '%s' lacks '%s'", i, fx->err, bad[i].want);
        assert_non_null(strstr(fx->err, "line 1"));
    }
    /* A slot holding another record is refused. */
    r->seq = 1;
    r->median_s = 9;
    free(line);
    line = kl_store_json_line("record", &r->base);
    assert_int_equal(s_import_text(fx->st, line, NULL, fx->err), KL_ERR_EXISTS);
    assert_non_null(strstr(fx->err, "line 1"));
    free(line);
    free(text);
    s_free(r);
}

static void test_corrupt_value(void **state)
{
    fx_t *fx = *state;
    Kiln__TuningRecord *r = s_rec(1, CPU, 0, 1e-3, false, 1);
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
    s_free(r);
    kl_store_close(&fx->st);
    /* Garbage bytes written straight into the records database. */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
    assert_int_equal(mdb_env_open(env, fx->dir, 0, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "records", 0, &dbi), 0);
    uint8_t k[32];
    memset(k, 0xee, sizeof k);
    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x99};
    MDB_val mk = {32, k}, mv = {sizeof junk, junk};
    assert_int_equal(mdb_put(txn, dbi, &mk, &mv, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    assert_int_equal(kl_store_open(&fx->st, fx->dir, 0, fx->err), KL_OK);
    walk_t w = {0};
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, NULL, s_walk, &w, fx->err),
        KL_ERR_CORRUPT);
    assert_non_null(strstr(fx->err, "does not decode"));
    assert_int_equal(w.n, 1); /* the good record came first */
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(kl_store_export_jsonl(fx->st, devnull, fx->err),
                     KL_ERR_CORRUPT);
    fclose(devnull);
}

static void test_schema_and_missing(void **state)
{
    fx_t *fx = *state;
    kl_store_close(&fx->st);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
    assert_int_equal(mdb_env_open(env, fx->dir, 0, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    uint8_t v2[4] = {0, 0, 0, KL_STORE_SCHEMA + 1};
    MDB_val k = {6, "schema"}, v = {4, v2};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    assert_int_equal(kl_store_open(&fx->st, fx->dir, 0, fx->err),
                     KL_ERR_CORRUPT);
    assert_null(fx->st);
    char want[32];
    snprintf(want, sizeof want, "schema version %d", KL_STORE_SCHEMA + 1);
    assert_non_null(strstr(fx->err, want));
    kl_store_t *st = NULL;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no-such-store-dir", fx->dir);
    assert_int_equal(kl_store_open(&st, missing, KL_STORE_RDONLY, fx->err),
                     KL_ERR_NOTFOUND);
    assert_non_null(strstr(fx->err, missing));
}

static void s_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* A store of schema 1 (records without an evaluator; a simulated record
 * could be the best; best and seen without a condition): a reader is told
 * how to upgrade it, a writer upgrades it, and best and seen come out as
 * schema 2 has them. */
static void test_upgrade_schema1(void **state)
{
    fx_t *fx = *state;
    Kiln__TuningRecord *r[3] = {s_rec(0, CPU, 0, 1e-6, true, 1),
                                s_rec(0, CPU, 0, 5e-3, false, 2),
                                s_rec(0, CPU, 0, 2e-3, false, 3)};
    assert_int_equal(kl_store_commit(fx->st, r, 3, fx->err), KL_OK);
    kl_store_close(&fx->st);
    /* Rewrite the indexes the way schema 1 had them. */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, best, seen;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
    assert_int_equal(mdb_env_open(env, fx->dir, 0, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &meta), 0);
    assert_int_equal(mdb_dbi_open(txn, "best", 0, &best), 0);
    assert_int_equal(mdb_dbi_open(txn, "seen", 0, &seen), 0);
    assert_int_equal(mdb_drop(txn, best, 0), 0);
    assert_int_equal(mdb_drop(txn, seen, 0), 0);
    uint8_t pre[24], bv[17] = {0}, sk[40], sv[8];
    s_key(0, pre);
    s_be64(pre + 16, kl_hash64(CPU, strlen(CPU)));
    /* best: the simulated seq 1, as schema 1 kept it while alone. */
    s_be64(bv, 1);
    uint64_t bits;
    memcpy(&bits, &r[0]->median_s, 8);
    s_be64(bv + 8, bits);
    bv[16] = 1;
    MDB_val k = {24, pre}, v = {17, bv};
    assert_int_equal(mdb_put(txn, best, &k, &v, 0), 0);
    for (int i = 0; i < 3; i++) {
        memcpy(sk, pre, 24);
        memcpy(sk + 24, r[i]->trace_hash.data, 16);
        s_be64(sv, r[i]->seq);
        k = (MDB_val){40, sk};
        v = (MDB_val){8, sv};
        assert_int_equal(mdb_put(txn, seen, &k, &v, 0), 0);
    }
    uint8_t one[4] = {0, 0, 0, 1};
    k = (MDB_val){6, "schema"};
    v = (MDB_val){4, one};
    assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    assert_int_equal(kl_store_open(&fx->st, fx->dir, KL_STORE_RDONLY, fx->err),
                     KL_ERR_VERSION);
    assert_non_null(strstr(fx->err, "schema version 1"));
    assert_non_null(strstr(fx->err, "kiln db upgrade"));
    assert_int_equal(kl_store_open(&fx->st, fx->dir, 0, fx->err), KL_OK);
    assert_int_equal(kl_store_schema_found(fx->st), 1);
    Kiln__TuningRecord *b = NULL;
    assert_int_equal(kl_store_best(fx->st, r[0]->workload_key.data, CPU,
                                   KL_COND_WARM, &b, fx->err),
                     KL_OK);
    assert_int_equal(b->seq, 3);
    s_free(b);
    for (int i = 0; i < 3; i++) {
        bool seen_it = true;
        assert_int_equal(kl_store_seen(fx->st, r[i]->workload_key.data, CPU,
                                       KL_COND_WARM, r[i]->trace_hash.data,
                                       &seen_it, fx->err),
                         KL_OK);
        assert_true(seen_it == (i > 0)); /* the simulated one is not */
    }
    kl_store_close(&fx->st);
    assert_int_equal(kl_store_open(&fx->st, fx->dir, KL_STORE_RDONLY, fx->err),
                     KL_OK);
    assert_int_equal(kl_store_schema_found(fx->st), KL_STORE_SCHEMA);
    size_t n = 0;
    assert_int_equal(kl_store_count(fx->st, NULL, NULL, &n, fx->err), KL_OK);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++)
        s_free(r[i]);
}

/* A file size limit makes the disk refuse: KL_ERR_NOSPC naming the
 * directory, and every commit made before it is still there. */
static void test_disk_full(void **state)
{
    fx_t *fx = *state;
    s_fill(fx->st, 640, 0, fx->err);
    kl_store_close(&fx->st);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        char err[KL_ERRMSG_LEN];
        kl_store_t *st = NULL;
        if (kl_store_open(&st, fx->dir, 0, err))
            _exit(10);
        char *path = kl_xasprintf("%s/data.mdb", fx->dir);
        FILE *f = fopen(path, "r");
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        free(path);
        struct rlimit rl = {(rlim_t)size + 65536, (rlim_t)size + 65536};
        setrlimit(RLIMIT_FSIZE, &rl);
        int rc = KL_OK;
        for (int i = 0; i < 1000 && rc == KL_OK; i++) {
            Kiln__TuningRecord *b[64];
            for (int j = 0; j < 64; j++)
                b[j] = s_rec(0, CPU, 0, 1e-3, false, 1000 + 64 * i + j);
            rc = kl_store_commit(st, b, 64, err);
            for (int j = 0; j < 64; j++)
                s_free(b[j]);
        }
        if (rc != KL_ERR_NOSPC) {
            fprintf(stderr, "got %d: %s\n", rc, err);
            _exit(11);
        }
        if (!strstr(err, fx->dir) || !strstr(err, "MiB"))
            _exit(12);
        kl_store_close(&st);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(kl_store_open(&fx->st, fx->dir, 0, fx->err), KL_OK);
    walk_t w = {0};
    assert_int_equal(
        kl_store_foreach_record(fx->st, NULL, NULL, s_walk, &w, fx->err),
        KL_OK);
    assert_true(w.n >= 640);
    assert_int_equal(w.n % 64, 0); /* whole batches only */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_export_import, setup, teardown),
        cmocka_unit_test_setup_teardown(test_import_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_and_missing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upgrade_schema1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
