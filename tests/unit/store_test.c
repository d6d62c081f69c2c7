/* Unit tests of common/kl_store: a real LMDB environment in a fresh
 * directory under /tmp for every test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <signal.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <lmdb.h>

#include "kl_err.h"
#include "kl_store.h"
#include "kl_util.h"

#define CPU "cpu/x86_64-avx512"
#define GPU "cuda/sm_90"

typedef struct {
    char dir[64];
    kl_store_t *st;
    char err[KL_ERRMSG_LEN];
} fx_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/kiln-store-test-XXXXXX");
    if (!mkdtemp(fx->dir))
        return -1;
    if (kl_store_open(&fx->st, fx->dir, 0, fx->err)) {
        fprintf(stderr, "setup: %s\n", fx->err);
        return -1;
    }
    *state = fx;
    return 0;
}

static void s_rmdir(const char *dir)
{
    char *cmd = kl_xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(cmd);
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    kl_store_close(&fx->st);
    assert_null(fx->st);
    s_rmdir(fx->dir);
    free(fx);
    return 0;
}

static void s_key(int i, uint8_t key[16])
{
    char name[32];
    snprintf(name, sizeof name, "workload-%d", i);
    kl_hash128(name, strlen(name), key);
}

/* A record with its own heap buffers (free with free_unpacked). */
static Kiln__TuningRecord *s_rec(int wl, const char *target, int status,
                                 double median, bool sim, int trace_id)
{
    Kiln__TuningRecord *r = kl_xmalloc(sizeof *r);
    kiln__tuning_record__init(r);
    r->workload_key.data = kl_xmalloc(16);
    r->workload_key.len = 16;
    s_key(wl, r->workload_key.data);
    r->target = kl_xstrdup(target);
    r->status = status;
    r->median_s = median;
    r->simulated = sim;
    r->n_samples = 10;
    r->samples = kl_xmalloc(10 * sizeof(double));
    for (int i = 0; i < 10; i++)
        r->samples[i] = median * (1 + 0.01 * i);
    r->trace.len = 64 + (size_t)(trace_id % 50);
    r->trace.data = kl_xmalloc(r->trace.len);
    for (size_t i = 0; i < r->trace.len; i++)
        r->trace.data[i] = (uint8_t)(trace_id * 7 + i);
    if (trace_id >= 0) {
        r->trace_hash.data = kl_xmalloc(16);
        r->trace_hash.len = 16;
        kl_hash128(&trace_id, sizeof trace_id, r->trace_hash.data);
    }
    r->agent = kl_xstrdup("agent-1");
    r->job = kl_xstrdup("job \"quoted\"\n\\ and unicode \xc3\xa9");
    return r;
}

static int s_commit1(kl_store_t *st, Kiln__TuningRecord *r, char *err)
{
    return kl_store_commit(st, &r, 1, err);
}

static void s_free(Kiln__TuningRecord *r)
{
    kiln__tuning_record__free_unpacked(r, NULL);
}

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
    assert_int_equal(kl_store_best(fx->st, key, target, &b, fx->err), KL_OK);
    assert_int_equal(b->seq, seq);
    s_free(b);
}

static void test_best(void **state)
{
    fx_t *fx = *state;
    uint8_t key[16];
    s_key(3, key);
    Kiln__TuningRecord *b = NULL;
    assert_int_equal(kl_store_best(fx->st, key, CPU, &b, fx->err),
                     KL_ERR_NOTFOUND);
    struct {
        int status;
        double median;
        bool sim;
        uint64_t best_after;
    } steps[] = {
        {KILN__STATUS__STATUS_WRONG_RESULT, 1e-6, false, 0}, /* 1: never */
        {KILN__STATUS__STATUS_OK, NAN, false, 0},            /* 2: never */
        {KILN__STATUS__STATUS_OK, 1e-6, true, 3},  /* 3: simulated, alone */
        {KILN__STATUS__STATUS_OK, 5e-3, false, 4}, /* 4: real beats sim */
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
            assert_int_equal(kl_store_best(fx->st, key, CPU, &b, fx->err),
                             KL_ERR_NOTFOUND);
        else
            s_check_best(fx, 3, CPU, steps[i].best_after);
    }
    /* Another target has its own best. */
    assert_int_equal(kl_store_best(fx->st, key, GPU, &b, fx->err),
                     KL_ERR_NOTFOUND);
}

static void test_seen(void **state)
{
    fx_t *fx = *state;
    Kiln__TuningRecord *r = s_rec(1, CPU, 0, 1e-3, false, 42);
    uint8_t hash[16], key[16];
    memcpy(hash, r->trace_hash.data, 16);
    s_key(1, key);
    bool seen = true;
    assert_int_equal(kl_store_seen(fx->st, key, CPU, hash, &seen, fx->err),
                     KL_OK);
    assert_false(seen);
    assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
    assert_int_equal(kl_store_seen(fx->st, key, CPU, hash, &seen, fx->err),
                     KL_OK);
    assert_true(seen);
    assert_int_equal(kl_store_seen(fx->st, key, GPU, hash, &seen, fx->err),
                     KL_OK);
    assert_false(seen);
    s_free(r);
}

typedef struct {
    uint8_t last_key[16];
    char last_target[64];
    uint64_t last_seq;
    size_t n;
    size_t stop_at;
} walk_t;

static int s_walk(const Kiln__TuningRecord *r, void *arg)
{
    walk_t *w = arg;
    w->n++;
    if (w->n > 1 && memcmp(w->last_key, r->workload_key.data, 16) == 0 &&
        strcmp(w->last_target, r->target) == 0)
        assert_int_equal(r->seq, w->last_seq + 1);
    else
        assert_int_equal(r->seq, 1);
    memcpy(w->last_key, r->workload_key.data, 16);
    snprintf(w->last_target, sizeof w->last_target, "%s", r->target);
    w->last_seq = r->seq;
    return w->stop_at && w->n == w->stop_at ? 7 : 0;
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

/* Commits n records of (0, CPU) in batches of 64. */
static void s_fill(kl_store_t *st, int n, int trace_base, char *err)
{
    for (int done = 0; done < n;) {
        Kiln__TuningRecord *b[64];
        int k = n - done < 64 ? n - done : 64;
        for (int i = 0; i < k; i++)
            b[i] = s_rec(0, CPU, 0, 1e-3, false, trace_base + done + i);
        assert_int_equal(kl_store_commit(st, b, (size_t)k, err), KL_OK);
        for (int i = 0; i < k; i++)
            s_free(b[i]);
        done += k;
    }
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
        assert_int_equal(s_commit1(fx->st, r, fx->err), KL_OK);
        s_free(r);
    }
    char path[96];
    snprintf(path, sizeof path, "%s/export.jsonl", fx->dir);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    assert_int_equal(kl_store_export_jsonl(fx->st, f, fx->err), KL_OK);
    rewind(f);
    char dir2[64] = "/tmp/kiln-store-test2-XXXXXX";
    assert_non_null(mkdtemp(dir2));
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
    /* Same best and seen for every (workload, target). */
    for (int k = 0; k < 4; k++) {
        uint8_t kk[16];
        s_key(k, kk);
        for (int t = 0; t < 2; t++) {
            const char *tg = t ? GPU : CPU;
            Kiln__TuningRecord *b1 = NULL, *b2 = NULL;
            int rc1 = kl_store_best(fx->st, kk, tg, &b1, fx->err);
            int rc2 = kl_store_best(st2, kk, tg, &b2, fx->err);
            assert_int_equal(rc1, KL_OK);
            assert_int_equal(rc2, rc1);
            s_assert_same_record(b1, b2);
            s_free(b1);
            s_free(b2);
        }
    }
    for (size_t i = 0; i < l1.n; i++) {
        const Kiln__TuningRecord *r = l1.recs[i];
        bool s2 = false;
        assert_int_equal(kl_store_seen(st2, r->workload_key.data, r->target,
                                       r->trace_hash.data, &s2, fx->err),
                         KL_OK);
        assert_true(s2);
    }
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
    uint8_t v2[4] = {0, 0, 0, 2};
    MDB_val k = {6, "schema"}, v = {4, v2};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    assert_int_equal(kl_store_open(&fx->st, fx->dir, 0, fx->err),
                     KL_ERR_CORRUPT);
    assert_null(fx->st);
    assert_non_null(strstr(fx->err, "schema version 2"));
    kl_store_t *st = NULL;
    assert_int_equal(kl_store_open(&st, "/tmp/kiln-no-such-store-dir",
                                   KL_STORE_RDONLY, fx->err),
                     KL_ERR_NOTFOUND);
    assert_non_null(strstr(fx->err, "/tmp/kiln-no-such-store-dir"));
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
        cmocka_unit_test_setup_teardown(test_workload_put_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_seq_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_best, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreach_filter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_growth_and_reopen, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reader_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_import, setup, teardown),
        cmocka_unit_test_setup_teardown(test_import_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_and_missing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
