/* store_fx.h - the fixture of the store tests (store_test.c,
 * store_io_test.c): a real LMDB store in a fresh directory under /tmp per
 * test, and records with their own heap buffers. */
#ifndef STORE_FX_H
#define STORE_FX_H

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
#include "kl_test_tmp.h"

#define CPU "cpu/x86_64-avx512"
#define GPU "cuda/sm_90"

typedef struct {
    char dir[256];
    kl_store_t *st;
    char err[KL_ERRMSG_LEN];
} fx_t;

static inline int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    if (!kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-store-test-XXXXXX"))
        return -1;
    if (kl_store_open(&fx->st, fx->dir, 0, fx->err)) {
        fprintf(stderr, "setup: %s\n", fx->err);
        return -1;
    }
    *state = fx;
    return 0;
}

static inline void s_rmdir(const char *dir)
{
    char *cmd = kl_xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(cmd);
}

static inline int teardown(void **state)
{
    fx_t *fx = *state;
    kl_store_close(&fx->st);
    assert_null(fx->st);
    s_rmdir(fx->dir);
    free(fx);
    return 0;
}

static inline void s_key(int i, uint8_t key[16])
{
    char name[32];
    snprintf(name, sizeof name, "workload-%d", i);
    kl_hash128(name, strlen(name), key);
}

/* A record with its own heap buffers (free with free_unpacked). */
static inline Kiln__TuningRecord *s_rec(int wl, const char *target, int status,
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

/* An evaluator of the given condition (heap: the record that points at it
 * frees it); rtol and atol odd enough to show a lossy round trip. */
static inline Kiln__Evaluator *s_eval(kl_cond_t cond, bool skip_verify)
{
    Kiln__Evaluator *e = kl_xmalloc(sizeof *e);
    kiln__evaluator__init(e);
    e->number = 1;
    e->repeat = 5;
    e->min_repeat_ms = cond == KL_COND_COLD ? 0 : 50;
    e->flush_cache = true;
    e->timeout_ms = 7000;
    e->rtol = 1.0 / 3.0;
    e->atol = 1e-7;
    e->seed = 12345678901234ULL;
    e->skip_verify = skip_verify;
    return e;
}

static inline int s_commit1(kl_store_t *st, Kiln__TuningRecord *r, char *err)
{
    return kl_store_commit(st, &r, 1, err);
}

static inline void s_free(Kiln__TuningRecord *r)
{
    kiln__tuning_record__free_unpacked(r, NULL);
}

typedef struct {
    uint8_t last_key[16];
    char last_target[64];
    uint64_t last_seq;
    size_t n;
    size_t stop_at;
} walk_t;

static inline int s_walk(const Kiln__TuningRecord *r, void *arg)
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

/* Commits n records of (0, CPU) in batches of 64. */
static inline void s_fill(kl_store_t *st, int n, int trace_base, char *err)
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

#endif
