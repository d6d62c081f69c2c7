/* kl_target.h - targets: the kinds of device kiln builds for, and the
 * value a target string parses to.
 *
 * A target names what a kernel is built for: "cpu/x86_64-avx512",
 * "cpu/x86_64-avx2", "cpu/x86_64", "cpu/aarch64", "cuda/sm_90", ...: a
 * kind, a slash, and the ISA or architecture inside that kind. Records in
 * the store are keyed by the exact target of the device that measured
 * them; a user may write "cpu" for this machine's CPU.
 *
 * The kinds live in ONE table (kl_target.c): each row holds the kind's
 * name (the prefix of its target strings), how an ISA of that kind parses
 * and which device limits it implies, and what a bare kind means. Every
 * module with per-kind code (design spaces, code generators, features,
 * exports, the agent's backends) keeps a table indexed by kl_target_kind
 * and nowhere tests a kind by name: adding a kind is a row here and a row
 * in each of those tables (docs/architecture.md, "Adding a target kind").
 *
 * A device that only pretends to measure (kiln-agent --simulate, the fake
 * GPU of KILN_FAKE_GPU_WORKER) reports the target it stands in for under
 * the prefix "sim/": "sim/cpu/x86_64-avx512", "sim/cuda/sm_90". It is
 * another target, not a flavour of the real one: a task for
 * "cpu/x86_64-avx512" (or "cpu") is never sent to it, and its records are
 * keyed apart, so they are never restored, ranked or exported as
 * measurements of the real target. Code for a simulated target is built
 * for the target it stands in for (kl_target_base).
 *
 * A CPU target may be refined by ISA features after a '+':
 * "cpu/x86_64-avx512+vnni" (AVX-512 VNNI), "cpu/x86_64-avx2+avxvnni"
 * (AVX-VNNI). Float work never uses them: its targets, records and stores
 * are the unrefined names. An integer workload's "cpu" resolves to the
 * refined target of this machine (kl_target_resolve_for), so its records
 * are keyed apart from those of a CPU without the feature; a device serves
 * a refined task only when it reports every feature (DeviceInfo.features,
 * kl_target_features_match), and the CPU design space picks the int8
 * intrinsic from them (docs/architecture.md, "The tensorize primitive").
 */
#ifndef KL_TARGET_H
#define KL_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CPU features that refine a target ("+vnni"), as bits. */
#define KL_CPU_FEAT_VNNI 1u    /* "+vnni": avx512vnni, on x86_64-avx512 */
#define KL_CPU_FEAT_AVXVNNI 2u /* "+avxvnni": avxvnni, on x86_64-avx2 */
#define KL_CPU_FEAT_BF16 4u    /* "+bf16": avx512bf16, on x86_64-avx512 */
/* "+amx": AMX tiles with bf16 and int8 products (amx-tile, amx-bf16,
 * amx-int8), on x86_64-avx512. */
#define KL_CPU_FEAT_AMX 8u

/* The kinds of target, in the order of the kind table. */
typedef enum {
    KL_TARGET_CPU = 0, /* C with vector extensions and OpenMP */
    KL_TARGET_CUDA,    /* CUDA C compiled by NVRTC */
    KL_TARGET__KINDS
} kl_target_kind;

/* What a design space and a code generator know about the machine: the
 * parsed target. */
typedef struct {
    char name[64]; /* exact: "cpu/x86_64-avx512", "cuda/sm_90" */
    kl_target_kind kind;
    char isa[64];      /* the part after "KIND/": "x86_64-avx512", "sm_90" */
    int vec_lanes;     /* f32 lanes of the widest vector: 16, 8, 4 (CPU) */
    int vec_regs;      /* vector registers: 32 (avx512), 16 (avx2) */
    unsigned features; /* KL_CPU_FEAT_* of the "+..." suffix */
    int cores;         /* CPU cores the kernel will run on (default 2) */
    int sm;            /* CUDA compute capability * 10, e.g. 90 */
    int max_threads_per_block;
    int64_t max_shared_bytes;
} kl_target_t;

/* One row of the kind table. */
typedef struct {
    const char *name; /* "cpu", "cuda": the prefix before '/' */
    /* The target strings of the kind, for messages:
     * "cpu, cpu/x86_64-avx512, ...". */
    const char *forms;
    /* Fills the limits of out, whose kind and isa are set (isa empty for
     * the bare kind, which the function may resolve by setting isa).
     * Returns 0, KL_ERR_NOTFOUND (no message) for an ISA the kind does
     * not have, or KL_ERR_INVAL with a message naming text. */
    int (*parse)(const char *text, kl_target_t *out, char *err);
    /* The exact target of this machine's device of the kind, which the
     * bare kind means (kl_target_resolve); NULL: the bare kind names no
     * one device. */
    const char *(*here)(void);
    /* Why the bare kind cannot stand for an exact target, for a task that
     * needs one; NULL when here is set. */
    const char *bare_hint;
    /* The kiln-agent --device value that serves every device of the kind
     * ("cuda:all"); NULL: the agent's default. */
    const char *agent_device;
} kl_target_kind_t;

/* The row of kind k (k < KL_TARGET__KINDS). Static. */
const kl_target_kind_t *kl_target_kind_info(kl_target_kind k);

/* The kind a target string belongs to, by its prefix: "cuda/sm_90" and
 * "cuda" are KL_TARGET_CUDA. Returns 0, or KL_ERR_NOTFOUND when no kind
 * has that name (text NULL included). */
int kl_target_kind_of(const char *text, kl_target_kind *out);

/* Parses "cpu" (this machine: avx512 when the CPU has it, else avx2),
 * "cpu/x86_64-avx512", "cpu/x86_64-avx2", "cpu/generic" (4 lanes),
 * "cuda/sm_NN". Unknown text is KL_ERR_INVAL naming it and the forms
 * every kind accepts. */
int kl_target_parse(const char *text, kl_target_t *out, char *err);
#define KL_TARGET_SIM "sim/"

/* The exact target string of this machine's CPU, as kiln-agent reports it
 * in Hello: "cpu/x86_64-avx512" with avx512f, "cpu/x86_64-avx2" with avx2
 * and fma, else "cpu/x86_64" (other architectures: "cpu/aarch64",
 * "cpu/unknown"). Static string. */
const char *kl_cpu_target(void);

/* The features of this machine's CPU (KL_CPU_FEAT_* bits), which
 * kiln-agent lists in DeviceInfo.features. KILN_CPU_FEATURES, when set,
 * stands in for detection: a comma list of feature names ("vnni",
 * "bf16", "amx", "avxvnni"; "" for none). */
unsigned kl_cpu_features(void);

/* The name ("vnni") and bit of feature i (0, 1, ...), NULL / 0 past the
 * last. */
const char *kl_cpu_feature_name(int i);
unsigned kl_cpu_feature_bit(int i);

/* The names of the features of bits, comma-separated ("vnni,avxvnni"),
 * into buf; returns buf. */
char *kl_cpu_features_text(unsigned bits, char *buf, size_t len);

/* kl_cpu_target() refined by the features of this machine that refine
 * it: "cpu/x86_64-avx512+vnni" on a CPU with AVX-512 VNNI,
 * "cpu/x86_64-avx2+avxvnni" on an AVX2 CPU with AVX-VNNI, else
 * kl_cpu_target(). Static string. */
const char *kl_cpu_target_int(void);

/* The target a user means: NULL or "cpu" is kl_cpu_target(), "sim/cpu" is
 * "sim/" + kl_cpu_target(), anything else is itself. Static or borrowed
 * string. */
const char *kl_target_resolve(const char *user_target);

/* kl_target_resolve for a workload: for an integer one (integer true),
 * NULL / "cpu" is kl_cpu_target_int() and "sim/cpu" its simulated twin;
 * anything else as kl_target_resolve. */
const char *kl_target_resolve_for(const char *user_target, bool integer);

/* Whether a device reporting features dev_features (names separated by
 * ',' or '+', NULL or "" for none) has every feature that task_target's
 * "+..." suffix names: always for an unrefined target. */
bool kl_target_features_match(const char *task_target,
                              const char *dev_features);

/* The length of target without its feature suffix
 * ("cpu/x86_64-avx512+vnni" -> 17). */
size_t kl_target_unrefined_len(const char *target);

/* Checks that text can key records: 0, or KL_ERR_INVAL with the kind's
 * bare_hint when text is a bare kind that names no one device ("cuda"). */
int kl_target_check_exact(const char *text, char *err);
/* Whether target names a simulated device ("sim/..."). */
bool kl_target_is_sim(const char *target);

/* The target a simulated target stands in for ("sim/cuda/sm_90" ->
 * "cuda/sm_90"); any other target is itself. Borrowed from target. */
const char *kl_target_base(const char *target);

/* Writes the simulated target of what `target` means (kl_target_resolve;
 * "cpu" -> "sim/cpu/x86_64-avx512"; a simulated target stays itself) into
 * buf (len bytes, cut to fit) and returns buf. */
char *kl_target_sim(const char *target, char *buf, size_t len);
/* The same with kl_target_resolve_for(target, integer). */
char *kl_target_sim_for(const char *target, bool integer, char *buf,
                        size_t len);

#endif
