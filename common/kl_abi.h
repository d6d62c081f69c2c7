/* kl_abi.h - the CPU kernel ABI, shared by the C generator, the agent's
 * runner, the exported model library and the benchmarks.
 *
 *   void ENTRY(void *const *args);
 *   void *ENTRY_prepare(void *const *args);          (optional)
 *
 * args[i] points to tensor i of the workload, in its declared order
 * (inputs, then the output), dense row-major, of its declared dtype: float
 * for f32, uint8_t / int8_t / int32_t for u8 / s8 / s32 (integer
 * workloads, kl_ir.h; a quantized kernel may prepare its zero-point
 * compensation, za * the weights' channel sums, in ENTRY_prepare).
 *
 * Constant inputs. A workload may declare tensors `const` (the weights and
 * biases of conv2d, depthwise_conv2d, conv2d_transpose and dense): their
 * contents do not change between calls. A kernel may rewrite their layout
 * once, ahead of the calls, instead of on every call (the layout rewrite of
 * constant weights that a deployed model does at load time). Such a kernel
 * defines ENTRY_prepare, and its caller:
 *  1. calls ENTRY_prepare once with an args array of the workload's size in
 *     which only the constant tensors are non-NULL (every other slot NULL);
 *  2. gets a block from malloc / aligned_alloc, or NULL when memory ran out
 *     (an error to report, not a reason to call ENTRY without it);
 *  3. passes that block as args[ntensors] (one slot past the tensors) to
 *     every call of ENTRY;
 *  4. frees it with free() when done, and prepares again after changing
 *     the contents of a constant tensor.
 * A kernel without ENTRY_prepare ignores args[ntensors]. The time spent in
 * ENTRY_prepare is not part of a measured latency. A kernel may keep its
 * per-call scratch in the block too (an int8 tensorized convolution with
 * NCHW input does), or in the library's one scratch that all its kernels
 * share (a Winograd kernel: kl_scratch_claim in the C prelude); calls
 * that share one block or library may still run at the same time: such
 * a kernel then gives the later call buffers of its own.
 */
#ifndef KL_ABI_H
#define KL_ABI_H

#include <stdbool.h>

/* The prepare function's name is the entry's name with this suffix. */
#define KL_ABI_PREPARE_SUFFIX "_prepare"

/* C text declaring the library's shared per-call scratch: one weak,
 * hidden object, so that every unit of a library naming it (each kernel's
 * prelude, which claims it with kl_scratch_claim, and kiln_model.c, whose
 * kiln_model_release frees it) names the same one. */
#define KL_ABI_SCRATCH_DECL                                                    \
    "struct kl_scratch { int busy; size_t n; void *p; };\n"                    \
    "__attribute__((weak, visibility(\"hidden\"))) struct kl_scratch "         \
    "kl_scratch_g;\n"

typedef void (*kl_abi_kernel_fn)(void *const *args);
typedef void *(*kl_abi_prepare_fn)(void *const *args);

/* ENTRY_prepare of entry in lib (a dlopen handle), NULL when it has none. */
kl_abi_prepare_fn kl_abi_find_prepare(void *lib, const char *entry);

/* Step 1 above: calls prep with n + 1 slots where args[i] is passed only
 * when is_const[i], every other slot NULL. Returns prep's block (NULL: out
 * of memory). */
void *kl_abi_prepare(kl_abi_prepare_fn prep, int n, void *const *args,
                     const bool *is_const);

#endif
