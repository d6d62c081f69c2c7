/* bf16_fx.h - what the bf16 kernel tests (tensorize_bf16_test.c,
 * tensorize_conv_bf16_test.c) check of every workload's design space:
 * that a target without "+bf16" never offers the avx512_bf16 intrinsic. */
#ifndef BF16_FX_H
#define BF16_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_ir.h"
#include "kl_space.h"

/* Samples w's space on cpu/x86_64-avx512 (no "+bf16") with seeds 1 ..
 * nseeds and fails the test (naming spec) when a sample does not draw or
 * its trace names avx512_bf16. */
static inline void fx_bf16_never_offered(const kl_workload_t *w,
                                         const char *spec, int nseeds)
{
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                     KL_OK);
    for (uint64_t seed = 1; seed <= (uint64_t)nseeds; seed++) {
        kl_rng_t rng;
        kl_rng_seed(&rng, seed);
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("%s (no +bf16): %s", spec, err);
        char *text = kl_trace_to_text(tr);
        assert_null(strstr(text, "avx512_bf16"));
        free(text);
        kl_trace_free(&tr);
        kl_sched_destroy(&s);
    }
    kl_space_destroy(&sp);
}

#endif
