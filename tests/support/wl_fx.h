/* wl_fx.h - a workload from its text for the compiler's tests
 * (codegen_test.c, schedule_test.c, tensorize_test.c, trace_test.c,
 * wino_test.c): kl_workload_from_string, failing the test (cmocka) with
 * the spec and the parser's message when it does not parse. */
#ifndef WL_FX_H
#define WL_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_ir.h"

/* The workload of spec (e.g. "matmul M=64 N=64 K=64"); the caller frees
 * it with kl_workload_free. Never returns NULL. */
static inline kl_workload_t *fx_wl(const char *spec)
{
    kl_workload_t *w = NULL;
    char err[KL_ERRMSG_LEN];
    if (kl_workload_from_string(spec, &w, err))
        fail_msg("%s: %s", spec, err);
    return w;
}

#endif
