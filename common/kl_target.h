/* kl_target.h - target strings.
 *
 * A target names what a kernel is built for: "cpu/x86_64-avx512",
 * "cpu/x86_64-avx2", "cpu/x86_64", "cpu/aarch64", "cuda/sm_90", ...
 * Records in the store are keyed by the exact target of the device that
 * measured them; a user may write "cpu" for this machine's CPU.
 *
 * A device that only pretends to measure (kiln-agent --simulate, the fake
 * GPU of KILN_FAKE_GPU_WORKER) reports the target it stands in for under
 * the prefix "sim/": "sim/cpu/x86_64-avx512", "sim/cuda/sm_90". It is
 * another target, not a flavour of the real one: a task for
 * "cpu/x86_64-avx512" (or "cpu") is never sent to it, and its records are
 * keyed apart, so they are never restored, ranked or exported as
 * measurements of the real target. Code for a simulated target is built
 * for the target it stands in for (kl_target_base).
 */
#ifndef KL_TARGET_H
#define KL_TARGET_H

#include <stdbool.h>
#include <stddef.h>

#define KL_TARGET_SIM "sim/"

/* The exact target string of this machine's CPU, as kiln-agent reports it
 * in Hello: "cpu/x86_64-avx512" with avx512f, "cpu/x86_64-avx2" with avx2
 * and fma, else "cpu/x86_64" (other architectures: "cpu/aarch64",
 * "cpu/unknown"). Static string. */
const char *kl_cpu_target(void);

/* The target a user means: NULL or "cpu" is kl_cpu_target(), "sim/cpu" is
 * "sim/" + kl_cpu_target(), anything else is itself. Static or borrowed
 * string. */
const char *kl_target_resolve(const char *user_target);

/* Whether target names a simulated device ("sim/..."). */
bool kl_target_is_sim(const char *target);

/* The target a simulated target stands in for ("sim/cuda/sm_90" ->
 * "cuda/sm_90"); any other target is itself. Borrowed from target. */
const char *kl_target_base(const char *target);

/* Writes the simulated target of what `target` means (kl_target_resolve;
 * "cpu" -> "sim/cpu/x86_64-avx512"; a simulated target stays itself) into
 * buf (len bytes, cut to fit) and returns buf. */
char *kl_target_sim(const char *target, char *buf, size_t len);

#endif
