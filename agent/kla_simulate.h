/* kla_simulate.h - kiln-agent --simulate: synthetic results without
 * compiling or running anything, for coordinator tests at scale.
 *
 * The latency is a pure function of the source text: kl_hash64(source)
 * picks a value between 50 us and 5 ms (log-uniform), and three samples
 * lie within +-1% of it. Every source that contains the text
 * "KILN_SIMULATE_FAIL" answers RUNTIME_ERROR instead, so a test chooses
 * its own failure fraction. Nothing sleeps: an answer takes microseconds.
 */
#ifndef KLA_SIMULATE_H
#define KLA_SIMULATE_H

#include <stddef.h>

#include "kla_measure.h"

#define KLA_SIMULATE_FAIL_MARK "KILN_SIMULATE_FAIL"

/* Fills *out (samples allocated; kla_result_clear frees). */
void kla_simulate(const char *source, size_t len, kla_result_t *out);

#endif
