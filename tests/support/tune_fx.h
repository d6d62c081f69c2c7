/* tune_fx.h - what the tests of coordinator/tune's task (task_test.c) and
 * conductor (job_test.c) share: a store in a temp dir, a dispatch and n
 * simulated kiln-agents (tools/fleet.c) behind the dispatch's port, and a
 * walk over the store's records that counts them, their OK ones and
 * repeated traces. Every helper fails the test (cmocka) on an error. */
#ifndef TUNE_FX_H
#define TUNE_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_fleet.h"
#include "kl_err.h"
#include "kl_hashset.h"
#include "kl_job.h"
#include "kl_store.h"
#include "kl_task.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

typedef struct {
    char dir[512];
    kl_store_t *st;
    kl_fleet_t *fleet;
    kl_dispatch_t *d;
    kl_port_t port;
} fx_tune_t;

/* A store in a temp dir, a dispatch and n_agents simulated kiln-agents
 * (0: none; candidates then wait in the dispatch's queue). */
static inline fx_tune_t *fx_tune_new(int n_agents)
{
    char err[KL_ERRMSG_LEN];
    fx_tune_t *f = kl_xcalloc(1, sizeof *f);
    assert_non_null(
        kl_test_mkdtemp(f->dir, sizeof f->dir, "kiln-tune-test-XXXXXX"));
    assert_int_equal(kl_store_open(&f->st, f->dir, KL_STORE_NOSYNC, err),
                     KL_OK);
    kl_fleet_config_t fc = {.n_agents = n_agents, .simulate = true};
    assert_int_equal(kl_fleet_new(&f->fleet, &fc, err), KL_OK);
    kl_dispatch_config_t dc = {.endpoint = "tcp://127.0.0.1:*",
                               .security = *kl_fleet_security(f->fleet)};
    assert_int_equal(kl_dispatch_new(&f->d, &dc, err), KL_OK);
    if (n_agents > 0)
        assert_int_equal(
            kl_fleet_start(f->fleet, kl_dispatch_endpoint(f->d), err), KL_OK);
    f->port = kl_port_dispatch(f->d);
    return f;
}

static inline void fx_tune_free(fx_tune_t *f)
{
    kl_dispatch_destroy(&f->d);
    kl_fleet_destroy(&f->fleet);
    kl_store_close(&f->st);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
}

typedef struct {
    kl_hashset_t h;
    size_t n, dups, ok;
} fx_recs_t;

static inline int fx_rec_hash(const Kiln__TuningRecord *r, void *arg)
{
    fx_recs_t *c = arg;
    assert_int_equal(r->trace_hash.len, 16);
    assert_true(r->trace.len > 0);
    c->dups += !kl_hashset_add(&c->h, r->trace_hash.data);
    c->ok += r->status == KILN__STATUS__STATUS_OK;
    c->n++;
    return 0;
}

#endif
