/* kl_cgrun.h - compile-and-run harness for tests of integer (and other
 * typed) kernels: the workload's buffers in their declared dtypes, the
 * generated C built and loaded, run (after its ENTRY_prepare when it has
 * one) and compared bit for bit with the reference interpreter
 * (kl_workload_eval_typed). kl_check.h is the f32 harness with
 * tolerances; this one is exact.
 *
 * Test support, not a sandbox: a kernel that crashes takes the test with
 * it. */
#ifndef KL_CGRUN_H
#define KL_CGRUN_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_abi.h"
#include "kl_ir.h"

/* Buffers of w in ABI order, each in its dtype, plus one slot (NULL) at
 * [w->ntensors] for a prepared block. Inputs are seeded random in the
 * agent's ranges: u8 0..255, s8 -128..127, s32 -1000..1000, f32 (scales)
 * 1e-3..1e-2; outputs zero. Free with kl_cgrun_free, which frees the
 * prepared block too. */
void **kl_cgrun_alloc(const kl_workload_t *w, uint64_t seed);
void kl_cgrun_free(const kl_workload_t *w, void **bufs);

/* A built and loaded kernel. */
typedef struct {
    char *so;               /* the shared object (heap) */
    void *lib;              /* dlopen handle */
    kl_abi_kernel_fn fn;    /* the entry */
    kl_abi_prepare_fn prep; /* ENTRY_prepare, NULL when it has none */
} kl_cgrun_t;

/* Builds source in dir (kl_check_build) and loads it, finding entry and
 * ENTRY_prepare. KL_OK, or the build's error (KL_ERR_COMPILE with the
 * compiler's lines), KL_ERR_IO when it does not load, KL_ERR_NOTFOUND
 * when entry is missing. */
int kl_cgrun_load(kl_cgrun_t *r, const char *source, const char *entry,
                  const char *dir, char *err);
void kl_cgrun_close(kl_cgrun_t *r);

/* Runs r on kl_cgrun_alloc(w, seed) (prepared first when r has a
 * prepare step: the block goes into [w->ntensors]) and the interpreter on
 * the same inputs, the outputs starting as different garbage; *a gets the
 * kernel's buffers and *b the interpreter's (free both with
 * kl_cgrun_free). KL_OK when the outputs are equal byte for byte;
 * KL_ERR_RUNTIME when they differ (naming the first differing byte) or
 * the prepare step refuses. */
int kl_cgrun_compare(const kl_cgrun_t *r, const kl_workload_t *w, uint64_t seed,
                     void ***a, void ***b, char *err);

/* Runs r again on a (after kl_cgrun_compare: the same prepared block),
 * the output first set to other garbage; whether the output then equals
 * b's (the interpreter's) byte for byte. */
bool kl_cgrun_again(const kl_cgrun_t *r, const kl_workload_t *w, void **a,
                    void *const *b);

/* Whether the bytes of w's output in bufs are not all one value
 * (saturation alone would hide a wrong sum). */
bool kl_cgrun_varied(const kl_workload_t *w, void *const *bufs);

/* Bytes of w's output. */
size_t kl_cgrun_out_bytes(const kl_workload_t *w);

#endif
