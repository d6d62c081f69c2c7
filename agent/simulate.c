/* simulate.c - synthetic latencies for kiln-agent --simulate. */
#include "kla_simulate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kl_util.h"

void kla_simulate(const char *source, size_t len, kla_result_t *out)
{
    memset(out, 0, sizeof *out);
    if (memmem(source, len, KLA_SIMULATE_FAIL_MARK,
               sizeof KLA_SIMULATE_FAIL_MARK - 1)) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error,
                 "simulated failure (source contains %s)",
                 KLA_SIMULATE_FAIL_MARK);
        return;
    }
    uint64_t h = kl_hash64(source, len);
    /* 50 us * 100^u, u uniform in [0, 1): 50 us .. 5 ms. */
    double u = (double)(h >> 11) / (double)(UINT64_C(1) << 53);
    double base = 50e-6 * pow(100.0, u);
    out->status = KILN__STATUS__STATUS_OK;
    out->n_samples = 3;
    out->number = 1;
    out->samples = kl_xcalloc(3, sizeof(double));
    for (int i = 0; i < 3; i++) {
        int jitter = (int)((h >> (8 * i)) & 0xff) - 128; /* -128..127 */
        out->samples[i] = base * (1.0 + 0.01 * jitter / 128.0);
    }
    kla_result_stats(out);
}
