/* bench_store - records committed per second by the record store.
 *
 * Realistic records (10 samples, a 400-byte serialized Trace, a 16-byte
 * trace_hash, 50 workloads x 2 targets) are committed in batches into a
 * fresh store under --dir, --runs times; the figure is the median rate
 * over the runs, with min and max. The store is durable by default (one
 * fsync per batch); --nosync also runs the same with KL_STORE_NOSYNC for
 * comparison. Then the last durable store is exported to JSON lines and
 * imported into a fresh store, and both are timed.
 *
 * Only the kl_store_commit calls are timed, not the making of records. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h>

#include "kl_err.h"
#include "kl_opt.h"
#include "kl_store.h"
#include "kl_util.h"

#define S_GOAL 100000.0

static const kl_opt_t s_opts[] = {
    {"records", KL_OPT_INT, "200000", 64, 1e9, "N", "records per run"},
    {"batch", KL_OPT_INT, "64", 1, 100000, "N", "records per commit"},
    {"runs", KL_OPT_INT, "5", 1, 100, "N", "runs per mode"},
    {"dir", KL_OPT_STR, "", KL_NOBOUNDS, "DIR",
     "where the fresh stores are made (default: $TMPDIR, else /tmp)"},
    {"spread", KL_OPT_BOOL, "false", KL_NOBOUNDS, NULL,
     "every record of a batch on another (workload, target) (default: one "
     "task per batch, as a tuning round commits)"},
    {"nosync", KL_OPT_BOOL, "true", KL_NOBOUNDS, NULL,
     "also measure with KL_STORE_NOSYNC (not durable) for comparison"},
    {"import", KL_OPT_BOOL, "true", KL_NOBOUNDS, NULL,
     "also time export and import of the last store"},
    KL_OPT_END,
};

/* The directory for temporary files: $TMPDIR when set, else /tmp. */
static const char *s_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

static const char *s_ops[] = {
    "sample_perfect_tile", "split",   "reorder", "parallel",
    "vectorize",           "annotate"};

/* A record like the coordinator commits (a trace of ~400 bytes) for task
 * number task (50 workloads x 2 targets). */
static Kiln__TuningRecord *s_record(kl_rng_t *rng, uint64_t task)
{
    Kiln__Inst insts[16], *ip[16];
    int64_t ins[16][3], dec[16][4];
    Kiln__Trace t = KILN__TRACE__INIT;
    for (int j = 0; j < 16; j++) {
        kiln__inst__init(&insts[j]);
        ip[j] = &insts[j];
        insts[j].op = (char *)s_ops[j % 6];
        for (int k = 0; k < 3; k++)
            ins[j][k] = j + k;
        insts[j].inputs = ins[j];
        insts[j].n_inputs = 3;
        if (j % 6 == 0) {
            for (int k = 0; k < 4; k++)
                dec[j][k] = 1 << kl_rng_below(rng, 6);
            insts[j].decision = dec[j];
            insts[j].n_decision = 4;
            insts[j].has_decision = 1;
        }
    }
    t.insts = ip;
    t.n_insts = 16;
    t.space = "";
    size_t base = kiln__trace__get_packed_size(&t);
    char pad[400];
    size_t want = base < 396 ? 396 - base : 0;
    memset(pad, 's', want);
    pad[want] = '\0';
    t.space = pad;
    Kiln__TuningRecord *r = kl_xmalloc(sizeof *r);
    kiln__tuning_record__init(r);
    r->trace.len = kiln__trace__get_packed_size(&t);
    r->trace.data = kl_xmalloc(r->trace.len);
    kiln__trace__pack(&t, r->trace.data);
    r->trace_hash.data = kl_xmalloc(16);
    r->trace_hash.len = 16;
    kl_hash128(r->trace.data, r->trace.len, r->trace_hash.data);
    char name[32];
    snprintf(name, sizeof name, "bench-workload-%llu",
             (unsigned long long)(task / 2 % 50));
    r->workload_key.data = kl_xmalloc(16);
    r->workload_key.len = 16;
    kl_hash128(name, strlen(name), r->workload_key.data);
    r->target = kl_xstrdup(task % 2 ? "cuda/sm_90" : "cpu/x86_64-avx512");
    r->status = kl_rng_below(rng, 10) ? KILN__STATUS__STATUS_OK
                                      : KILN__STATUS__STATUS_COMPILE_ERROR;
    r->n_samples = 10;
    r->samples = kl_xmalloc(10 * sizeof(double));
    for (int k = 0; k < 10; k++)
        r->samples[k] = 1e-4 * (1 + kl_rng_double(rng));
    r->median_s = kl_median(r->samples, 10);
    r->agent = kl_xstrdup("agent-bench-01");
    r->device_name = kl_xstrdup("Intel Xeon (bench)");
    r->job = kl_xstrdup("bench");
    r->number = 8;
    r->compile_s = 0.25;
    return r;
}

/* One run: returns records per second of commit time, or -1. */
static double s_run(const char *dir, unsigned flags, long n, long batch,
                    bool spread, uint64_t seed)
{
    char err[KL_ERRMSG_LEN];
    kl_store_t *st = NULL;
    if (kl_store_open(&st, dir, flags, err)) {
        fprintf(stderr, "bench_store: %s\n", err);
        return -1;
    }
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    Kiln__TuningRecord **b = kl_xcalloc((size_t)batch, sizeof *b);
    double spent = 0;
    for (long done = 0; done < n; done += batch) {
        long k = n - done < batch ? n - done : batch;
        /* A round of the tuner measures one task per batch; --spread
         * gives every record of a batch its own task (the worst case). */
        for (long i = 0; i < k; i++)
            b[i] = s_record(&rng, (uint64_t)(spread ? done + i : done / batch));
        double t0 = kl_now_s();
        int rc = kl_store_commit(st, b, (size_t)k, err);
        spent += kl_now_s() - t0;
        for (long i = 0; i < k; i++)
            kiln__tuning_record__free_unpacked(b[i], NULL);
        if (rc) {
            fprintf(stderr, "bench_store: %s\n", err);
            free(b);
            kl_store_close(&st);
            return -1;
        }
    }
    free(b);
    kl_store_close(&st);
    return (double)n / spent;
}

/* The baseline: bare LMDB, durable, the same packed records appended
 * under 8-byte sequential keys, one transaction per batch; no seq lookup,
 * no best, no seen. It shows what the disk allows. */
static double s_run_lmdb(const char *dir, long n, long batch, uint64_t seed)
{
    MDB_env *env = NULL;
    MDB_txn *txn;
    MDB_dbi dbi;
    int rc = kl_mkdirs(dir, NULL) ? -1 : mdb_env_create(&env);
    if (rc == 0)
        rc = mdb_env_set_mapsize(env, (size_t)4 << 30);
    if (rc == 0)
        rc = mdb_env_open(env, dir, 0, 0644);
    if (rc == 0 && (rc = mdb_txn_begin(env, NULL, 0, &txn)) == 0) {
        rc = mdb_dbi_open(txn, NULL, 0, &dbi);
        mdb_txn_commit(txn);
    }
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    double spent = 0;
    uint8_t *buf = kl_xmalloc(4096);
    Kiln__TuningRecord **b = kl_xcalloc((size_t)batch, sizeof *b);
    for (long done = 0; rc == 0 && done < n; done += batch) {
        long k = n - done < batch ? n - done : batch;
        for (long i = 0; i < k; i++)
            b[i] = s_record(&rng, (uint64_t)(done / batch));
        double t0 = kl_now_s();
        rc = mdb_txn_begin(env, NULL, 0, &txn);
        for (long i = 0; rc == 0 && i < k; i++) {
            uint64_t key = __builtin_bswap64((uint64_t)(done + i));
            MDB_val mk = {8, &key},
                    mv = {kiln__tuning_record__pack(b[i], buf), buf};
            rc = mdb_put(txn, dbi, &mk, &mv, 0);
        }
        rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
        spent += kl_now_s() - t0;
        for (long i = 0; i < k; i++)
            kiln__tuning_record__free_unpacked(b[i], NULL);
    }
    free(buf);
    free(b);
    if (env)
        mdb_env_close(env);
    if (rc)
        fprintf(stderr, "bench_store: bare LMDB: %s\n", mdb_strerror(rc));
    return rc ? -1 : (double)n / spent;
}

static void s_rm(const char *path)
{
    char *cmd = kl_xasprintf("rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_store: could not remove %s\n", path);
    free(cmd);
}

static int s_mode(const char *label, const char *root, unsigned flags,
                  const kl_opts_t *o, bool keep_last, char *last_dir)
{
    int runs = (int)kl_opts_int(o, "runs");
    long n = (long)kl_opts_int(o, "records"), batch = kl_opts_int(o, "batch");
    double rates[100], base[100];
    bool with_base = flags == 0;
    printf("%s, %ld records in batches of %ld%s:\n", label, n, batch,
           kl_opts_bool(o, "spread") ? ", each record on another task"
                                     : ", one task per batch");
    for (int i = 0; i < runs; i++) {
        char *dir = kl_xasprintf("%s/kiln-bench-store-%d-%x-%d", root,
                                 (int)getpid(), flags, i);
        s_rm(dir);
        if (with_base) {
            base[i] = s_run_lmdb(dir, n, batch, 1234 + (uint64_t)i);
            s_rm(dir);
            if (base[i] < 0)
                return 1;
        }
        rates[i] = s_run(dir, flags, n, batch, kl_opts_bool(o, "spread"),
                         1234 + (uint64_t)i);
        if (rates[i] < 0)
            return 1;
        printf("  run %d: %.0f records/s", i + 1, rates[i]);
        if (with_base)
            printf("   (bare LMDB baseline: %.0f)", base[i]);
        printf("\n");
        if (keep_last && i == runs - 1)
            snprintf(last_dir, 256, "%s", dir);
        else
            s_rm(dir);
        free(dir);
    }
    double lo = rates[0], hi = rates[0], med = kl_median(rates, (size_t)runs);
    for (int i = 1; i < runs; i++) {
        lo = rates[i] < lo ? rates[i] : lo;
        hi = rates[i] > hi ? rates[i] : hi;
    }
    printf("  min %.0f  median %.0f  max %.0f records/s  (goal >= %.0f: %s)\n",
           lo, med, hi, S_GOAL, med >= S_GOAL ? "met" : "NOT met");
    if (with_base) {
        double bmed = kl_median(base, (size_t)runs);
        printf("  bare LMDB baseline median %.0f records/s; store / baseline "
               "= %.2f\n",
               bmed, med / bmed);
    }
    return 0;
}

/* Exports dir to a file and imports it into a fresh store, timing both. */
static int s_import_bench(const char *root, const char *dir)
{
    char err[KL_ERRMSG_LEN];
    char *file = kl_xasprintf("%s.jsonl", dir);
    char *dir2 = kl_xasprintf("%s-imported", dir);
    kl_store_t *st = NULL;
    int rc = kl_store_open(&st, dir, KL_STORE_RDONLY, err);
    FILE *f = rc ? NULL : fopen(file, "w");
    double t0 = kl_now_s();
    if (f) {
        rc = kl_store_export_jsonl(st, f, err);
        fclose(f);
    }
    double t_exp = kl_now_s() - t0;
    kl_store_close(&st);
    size_t n = 0, bytes = 0;
    struct stat sb;
    if (stat(file, &sb) == 0)
        bytes = (size_t)sb.st_size;
    if (rc == KL_OK && (f = fopen(file, "r"))) {
        s_rm(dir2);
        rc = kl_store_open(&st, dir2, 0, err);
        t0 = kl_now_s();
        if (rc == KL_OK)
            rc = kl_store_import_jsonl(st, f, &n, err);
        fclose(f);
        kl_store_close(&st);
    }
    double t_imp = kl_now_s() - t0;
    if (rc)
        fprintf(stderr, "bench_store: export/import: %s\n", err);
    else
        printf("export: %.1f MB of JSON lines in %.2f s; import (durable): "
               "%zu lines in %.2f s = %.0f lines/s\n",
               (double)bytes / 1e6, t_exp, n, t_imp, (double)n / t_imp);
    s_rm(dir2);
    s_rm(file);
    (void)root;
    free(file);
    free(dir2);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc - 1, argv + 1, &o, err)) {
        fprintf(stderr, "bench_store: %s\n", err);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, "usage: bench_store [options]", s_opts);
        kl_opts_free(&o);
        return 0;
    }
    const char *root = kl_opts_str(o, "dir");
    if (!root || !*root)
        root = s_tmpdir();
    char last[256] = "";
    bool imp = kl_opts_bool(o, "import");
    int rc =
        s_mode("durable (default: fsync per commit)", root, 0, o, imp, last);
    if (rc == 0 && kl_opts_bool(o, "nosync"))
        rc = s_mode("KL_STORE_NOSYNC (not durable, comparison only)", root,
                    KL_STORE_NOSYNC, o, false, NULL);
    if (rc == 0 && imp) {
        rc = s_import_bench(root, last);
        s_rm(last);
    }
    printf("reproduce: ninja -C build bench_store && build/tools/bench_store "
           "--records %lld --batch %lld --runs %lld --dir %s%s\n",
           (long long)kl_opts_int(o, "records"),
           (long long)kl_opts_int(o, "batch"),
           (long long)kl_opts_int(o, "runs"), root,
           kl_opts_bool(o, "spread") ? " --spread" : "");
    kl_opts_free(&o);
    return rc;
}
