/* export_fx.h - what the export tests share (export_test.c,
 * export_prep_test.c, export_qdq_test.c, export_qfuse_test.c,
 * export_weights_test.c): a tuning record committed to a real store, and
 * the fixture's directory removed with what is in it. */
#ifndef EXPORT_FX_H
#define EXPORT_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_store.h"
#include "kl_trace.h"
#include "kl_util.h"

/* Commits trace tr as a record of w on target: status OK, the given
 * median, simulated or not, measured with ev (NULL: none). */
static inline void s_commit_rec(kl_store_t *st, const kl_workload_t *w,
                                const char *target, const kl_trace_t *tr,
                                double median, bool simulated,
                                Kiln__Evaluator *ev, char *err)
{
    uint8_t *buf = NULL, hash[16];
    size_t len = 0;
    kl_trace_to_proto(tr, &buf, &len);
    kl_trace_hash(tr, hash);
    Kiln__TuningRecord rec = KILN__TUNING_RECORD__INIT;
    rec.workload_key = (ProtobufCBinaryData){16, (uint8_t *)w->key};
    rec.target = (char *)target;
    rec.trace = (ProtobufCBinaryData){len, buf};
    rec.trace_hash = (ProtobufCBinaryData){16, hash};
    rec.status = KILN__STATUS__STATUS_OK;
    rec.median_s = median;
    rec.simulated = simulated;
    rec.evaluator = ev;
    Kiln__TuningRecord *p = &rec;
    assert_int_equal(kl_store_commit(st, &p, 1, err), KL_OK);
    free(buf);
}

/* Removes dir and everything in it (a store's files too), saying so on
 * stderr when it cannot. */
static inline void s_rmrf(const char *dir)
{
    char *cmd = kl_xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(cmd);
}

#endif
