/* kl_target.h - target strings.
 *
 * A target names what a kernel is built for: "cpu/x86_64-avx512",
 * "cpu/x86_64-avx2", "cpu/x86_64", "cpu/aarch64", "cuda/sm_90", ...
 * Records in the store are keyed by the exact target of the device that
 * measured them; a user may write "cpu" for this machine's CPU.
 */
#ifndef KL_TARGET_H
#define KL_TARGET_H

/* The exact target string of this machine's CPU, as kiln-agent reports it
 * in Hello: "cpu/x86_64-avx512" with avx512f, "cpu/x86_64-avx2" with avx2
 * and fma, else "cpu/x86_64" (other architectures: "cpu/aarch64",
 * "cpu/unknown"). Static string. */
const char *kl_cpu_target(void);

/* The target a user means: NULL or "cpu" is kl_cpu_target(), anything else
 * is itself. Static or borrowed string. */
const char *kl_target_resolve(const char *user_target);

#endif
