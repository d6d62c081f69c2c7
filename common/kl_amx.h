/* kl_amx.h - the AMX tile state: asking Linux for it.
 *
 * AMX's tile registers (8 tiles of 16 rows x 64 bytes, XFEATURE_XTILEDATA,
 * state component 18) are too large for Linux to save for every process:
 * since Linux 5.16 a process must ask for them once with
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), and a tile
 * instruction executed without that permission raises SIGILL. The
 * permission is the whole process's (every thread, those started later
 * too) and lasts until it exits or execs.
 *
 * Who asks: kiln-runner's harness before its seccomp filter, when the CPU
 * has AMX (agent/cpu/runner_harness.c), and the exported library's
 * initialisation when it holds an AMX kernel (that generated code makes
 * the same calls inline, without kiln's libraries). A kernel that uses the
 * tiles checks the permission in its prepare step (ARCH_GET_XCOMP_PERM)
 * and refuses there instead of faulting. docs/architecture.md, "AMX".
 */
#ifndef KL_AMX_H
#define KL_AMX_H

#include <stdbool.h>

/* The arch_prctl codes and the state component (Linux's
 * asm/prctl.h and fpu/xstate.h), for code that makes the calls itself. */
#define KL_AMX_ARCH_GET_XCOMP_SUPP 0x1021
#define KL_AMX_ARCH_GET_XCOMP_PERM 0x1022
#define KL_AMX_ARCH_REQ_XCOMP_PERM 0x1023
#define KL_AMX_XFEATURE_XTILEDATA 18

/* Asks Linux once per process for the AMX tile state and checks that it
 * was granted (ARCH_GET_XCOMP_PERM has bit 18); later calls return the
 * first call's answer. Detects the real CPU (KILN_CPU_FEATURES, which
 * plays a CPU for targets, does not play this). Returns KL_OK, or
 * KL_ERR_UNSUPPORTED with a message in err (KL_ERRMSG_LEN bytes, NULL for
 * none) naming why: "this CPU has no AMX (amx_tile not in
 * /proc/cpuinfo)", "Linux refused the AMX tile state (arch_prctl
 * ARCH_REQ_XCOMP_PERM: Invalid argument)" (a kernel before 5.16), a build
 * for another system. Thread-safe. */
int kl_amx_request(char *err);

/* Whether this CPU has AMX: amx-tile, amx-bf16 and amx-int8, whatever
 * Linux offers. */
bool kl_amx_cpu(void);

/* Whether this machine can run AMX code once a process asks: the CPU has
 * amx-tile, amx-bf16 and amx-int8 and Linux offers the tile data state
 * (ARCH_GET_XCOMP_SUPP lists it). Asks for nothing; cached. */
bool kl_amx_offered(void);

#endif
