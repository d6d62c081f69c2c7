/* kl_sched.h - the schedule state: one workload's loop nest after
 * primitives (docs/architecture.md, "Tensor
 * programs").
 *
 * A schedule starts as the naive nest of its workload: one loop per
 * iterator, spatial iterators first (in workload order), then reductions.
 * The nest is always a single perfect nest (a list of loops, outermost
 * first); the statement (the workload's body) sits inside the innermost
 * loop. Primitives rewrite that list:
 *
 *   loop       one level of the nest. Its value runs over [0, extent). A
 *              loop is made of one or more *parts* (more than one after
 *              fuse); part p of loop L has value (L / inner_p) % extent_p
 *              where inner_p is the product of the extents of the parts
 *              after p. Each part feeds one iterator of the workload:
 *              iterator value = sum over every part feeding it of
 *              part value * part stride.
 *   guard      an imperfect split (factors whose product exceeds the
 *              extent) adds a guard: sum of coef * part value < bound.
 *              The statement runs only where every guard holds.
 *   stage      a cache: cache_read of an input tensor (scope shared,
 *              local, or packed: a copy of the region the loops below the
 *              attach point read, laid out in the order those loops walk
 *              it, so the innermost loop reads contiguous memory), or
 *              cache_write of the output (scope local: accumulators that
 *              live across the loops below the attach point and are
 *              written back, with the workload's epilogue, after them;
 *              shared for GPU). A stage is attached at a loop (compute_at
 *              for reads, reverse_compute_at for writes) or at the root
 *              (before the whole nest) until attached.
 *   annotation key/value pairs on a loop ("unroll_max_step", "pragma_..."):
 *              hints to codegen.
 *
 * Loops and stages have ids that are never reused inside one schedule;
 * primitives take ids, so a trace can name loops by random variables.
 *
 * Every primitive checks its preconditions first and, when they fail,
 * returns KL_ERR_INVAL with a message naming the loop and the reason and
 * leaves the schedule unchanged: a primitive never produces a broken nest.
 */
#ifndef KL_SCHED_H
#define KL_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_ir.h"
#include "kl_target.h" /* kl_target_t, kl_target_parse */

#define KL_SCHED_MAX_LOOPS 64
#define KL_LOOP_MAX_PARTS 8
#define KL_SCHED_MAX_STAGES 8
#define KL_SCHED_MAX_GUARDS 16
#define KL_GUARD_MAX_TERMS 8
#define KL_LOOP_MAX_ANNOTS 4

typedef enum {
    KL_LOOP_SERIAL = 0,
    KL_LOOP_PARALLEL,  /* OpenMP parallel for (CPU) */
    KL_LOOP_VECTORIZE, /* innermost, spatial; lanes chosen by codegen */
    KL_LOOP_UNROLL,    /* fully unrolled by codegen */
    KL_LOOP_BLOCK_X,   /* bind: blockIdx.x (GPU) */
    KL_LOOP_BLOCK_Y,
    KL_LOOP_BLOCK_Z,
    KL_LOOP_THREAD_X, /* bind: threadIdx.x (GPU) */
    KL_LOOP_THREAD_Y,
    KL_LOOP_THREAD_Z,
    KL_LOOP_VTHREAD, /* virtual thread (GPU): unrolled, strided */
    KL_LOOP__COUNT
} kl_loop_kind;

/* "serial", "parallel", "vectorize", "unroll", "blockIdx.x", ...,
 * "threadIdx.z", "vthread". */
const char *kl_loop_kind_name(kl_loop_kind k);
/* Parses the names above; returns 0 or KL_ERR_INVAL. */
int kl_loop_kind_parse(const char *name, kl_loop_kind *out);

typedef struct {
    int iter;       /* index into kl_workload_t.iters */
    int64_t stride; /* contribution of one step of this part */
    int64_t extent;
} kl_loop_part_t;

typedef struct {
    char key[32];
    int64_t value;
} kl_annot_t;

typedef struct {
    int id;
    int64_t extent; /* product of the parts' extents */
    kl_loop_kind kind;
    bool reduce; /* every part feeds a reduction iterator */
    int nparts;
    kl_loop_part_t parts[KL_LOOP_MAX_PARTS]; /* outermost part first */
    int nannots;
    kl_annot_t annots[KL_LOOP_MAX_ANNOTS];
} kl_loop_t;

typedef struct {
    int nterms;
    struct {
        int loop; /* loop id */
        int part; /* part index inside that loop */
        int64_t coef;
    } terms[KL_GUARD_MAX_TERMS];
    int64_t bound; /* holds where sum coef * part value < bound */
    int iter;      /* the iterator whose split made it */
} kl_guard_t;

typedef enum {
    KL_SCOPE_GLOBAL = 0,
    KL_SCOPE_SHARED,
    KL_SCOPE_LOCAL,
    KL_SCOPE_PACKED, /* global memory, region re-laid out contiguously */
} kl_scope;

/* "global", "shared", "local", "packed". */
const char *kl_scope_name(kl_scope s);
int kl_scope_parse(const char *name, kl_scope *out);

typedef enum {
    KL_STAGE_READ = 0,
    KL_STAGE_WRITE,
} kl_stage_kind;

#define KL_ATTACH_ROOT (-1)

typedef struct {
    int id;
    kl_stage_kind kind;
    int tensor; /* index into kl_workload_t.tensors */
    kl_scope scope;
    int attach; /* loop id, or KL_ATTACH_ROOT */
} kl_stage_t;

typedef struct kl_sched_s kl_sched_t;

/* Creates the naive schedule of w. The schedule borrows w: w must outlive
 * it (and its clones). Returns 0; *out is freed with kl_sched_destroy. */
int kl_sched_create(kl_sched_t **out, const kl_workload_t *w, char *err);
void kl_sched_destroy(kl_sched_t **self_p);
kl_sched_t *kl_sched_clone(const kl_sched_t *s);

const kl_workload_t *kl_sched_workload(const kl_sched_t *s);

/* Loops, outermost first. kl_sched_loop returns a borrowed pointer valid
 * until the next primitive; kl_sched_loop_pos returns the position of the
 * loop with that id, or -1 when there is none (any more). */
int kl_sched_nloops(const kl_sched_t *s);
const kl_loop_t *kl_sched_loop(const kl_sched_t *s, int pos);
int kl_sched_loop_pos(const kl_sched_t *s, int loop_id);
const kl_loop_t *kl_sched_loop_by_id(const kl_sched_t *s, int loop_id);

int kl_sched_nguards(const kl_sched_t *s);
const kl_guard_t *kl_sched_guard(const kl_sched_t *s, int i);

int kl_sched_nstages(const kl_sched_t *s);
const kl_stage_t *kl_sched_stage(const kl_sched_t *s, int i);
const kl_stage_t *kl_sched_stage_by_id(const kl_sched_t *s, int stage_id);

/* Position of a stage's attach loop in the nest (-1 for the root). */
int kl_sched_stage_attach_pos(const kl_sched_t *s, const kl_stage_t *st);

/* Whether loop (by position) feeds an iterator that the access of tensor
 * reads or writes (with a non-zero coefficient). */
bool kl_sched_loop_touches(const kl_sched_t *s, int pos, int tensor);

/* ---- primitives ----
 * All return 0 or KL_ERR_INVAL with a message in err (schedule unchanged).
 */

/* Splits loop into n loops with the given extents (outermost first).
 * The loop must have a single part (split a fused loop: error). Each
 * factor must be >= 1; their product must be >= the extent: when it is
 * larger the split is imperfect and adds a guard. out_ids (n entries)
 * receives the new loops' ids. The new loops inherit the kind serial. */
int kl_sched_split(kl_sched_t *s, int loop, const int64_t *factors, int n,
                   int *out_ids, char *err);

/* Puts the n loops (distinct) into the order given, in the positions they
 * occupy now (other loops stay where they are). Errors: a loop that is not
 * in the nest, a loop named twice, or a move across the attach point of a
 * stage. */
int kl_sched_reorder(kl_sched_t *s, const int *loops, int n, char *err);

/* Fuses n >= 2 loops, which must be adjacent and in nest order, into one
 * (its parts are theirs, in order). All spatial or all reduction. Error on
 * non-adjacent loops, on loops that carry a kind other than serial, or on
 * a stage attached to one of the inner loops. */
int kl_sched_fuse(kl_sched_t *s, const int *loops, int n, int *out_id,
                  char *err);

/* Marks a loop parallel (spatial only; error on a reduction loop). */
int kl_sched_parallel(kl_sched_t *s, int loop, char *err);

/* Marks a loop vectorized: spatial, one part, stride 1 and currently the
 * innermost loop. Errors name which condition failed. */
int kl_sched_vectorize(kl_sched_t *s, int loop, char *err);

/* Marks a loop to be fully unrolled (extent <= 64). */
int kl_sched_unroll(kl_sched_t *s, int loop, char *err);

/* Binds a loop to a GPU index (kind one of BLOCK_*, THREAD_*, VTHREAD).
 * Spatial loops only; one loop per index. */
int kl_sched_bind(kl_sched_t *s, int loop, kl_loop_kind kind, char *err);

/* Adds a read cache of input tensor `tensor` (not the output) in scope,
 * attached at the root. out_stage receives its id. */
int kl_sched_cache_read(kl_sched_t *s, int tensor, kl_scope scope,
                        int *out_stage, char *err);

/* Adds a write cache of the output in scope (local or shared), attached
 * at the root. At most one write cache. */
int kl_sched_cache_write(kl_sched_t *s, kl_scope scope, int *out_stage,
                         char *err);

/* Attaches a read stage inside loop (its copy runs at the start of each
 * iteration of that loop, covering what the loops below read). Use
 * KL_ATTACH_ROOT for the root. Errors: a write stage, a loop that is not
 * in the nest. */
int kl_sched_compute_at(kl_sched_t *s, int stage, int loop, char *err);

/* Attaches a write stage inside loop: accumulators cover the spatial
 * loops below it; they start at the reduction's identity (or, when a
 * reduction loop at or above the attach point is past its first
 * iteration, at the output's current value) at the start of an iteration
 * and are written back at its end (with the epilogue once every such
 * reduction loop is at its last iteration). Every spatial loop below must
 * be unrolled or vectorized by codegen time (postprocessors check that).
 * Errors: a read stage, a loop not in the nest, a vectorized loop. */
int kl_sched_reverse_compute_at(kl_sched_t *s, int stage, int loop, char *err);

/* Sets (or replaces) an annotation on a loop. Keys: "unroll_max_step"
 * (codegen puts `#pragma GCC unroll value` on that loop), "prefetch" (C:
 * each iteration prefetches the packed buffers read below the loop value
 * floats ahead of where it reads them), KL_ANNOT_LOOP_LAYOUT with tensor
 * T's index, value 1 (C: T, read through a trivial window, is packed in
 * the loop layout, not its own; codegen_pack_layout.c),
 * KL_ANNOT_PARALLEL_ORDER value 1 on a fused parallel loop (C: its first
 * part varies fastest, not its last, so each thread's static chunk is a
 * range of the last part: a matmul fused (rows, columns) splits the
 * columns between the threads, and each reads only its columns of B),
 * "pragma_..." (free-form hints). At most KL_LOOP_MAX_ANNOTS per loop. */
int kl_sched_annotate(kl_sched_t *s, int loop, const char *key, int64_t value,
                      char *err);
/* The value of l's annotation key, 0 when it has none. */
int64_t kl_loop_annot(const kl_loop_t *l, const char *key);
/* printf format of the loop-layout key, of one int: the tensor's index. */
#define KL_ANNOT_LOOP_LAYOUT "loop_layout_%d"
/* The fused parallel loop's part order (value 1: the first fastest). */
#define KL_ANNOT_PARALLEL_ORDER "parallel_order"

/* Rewrites a naive schedule of a 3x3 stride-1 convolution into Winograd
 * form with output tile m (kl_wino.h): its workload becomes the derived
 * batched product (owned by the schedule and its clones) and its nest that
 * product's naive nest, with new loop ids; the C generator wraps it in the
 * transforms. Errors: another primitive came first, the schedule is
 * already rewritten, or the workload is not one kl_workload_winograd takes
 * (its reason). */
int kl_sched_winograd(kl_sched_t *s, int m, char *err);
/* The workload the schedule was created for (kl_sched_workload is the
 * derived one after kl_sched_winograd), and the rewrite's tile (0: none). */
const kl_workload_t *kl_sched_origin(const kl_sched_t *s);
int kl_sched_winograd_m(const kl_sched_t *s);

/* ---- tensorize (kl_intrin.h; docs/architecture.md, "The tensorize
 * primitive") ---- */

/* What a tensorized block computes, as kl_sched_tensorized finds it. */
typedef struct {
    const char *intrin;   /* the kl_intrin_t row's name (static) */
    int lanes, red;       /* the block: lanes output columns x red points */
    int loop;             /* id of the block's outer (lanes) loop */
    int it_m, it_n, it_k; /* iterators: rows, output columns, reduction */
    int ta, tb;           /* tensors: u8 activations A[m,k], s8 weights */
    bool b_nk;            /* weights indexed [n,k] (qdense) instead of [k,n] */
    int64_t za;           /* activation zero point (0: none) */
    /* A convolution (qconv2d NHWC or NCHW): it_n is the output channel f,
     * it_k the input channel c, it_m -1; the taps are the other
     * reductions. */
    bool conv;
    /* A batched product (avx512_bf16 only): the batch iterator, the first
     * index of A, B and Y; -1 otherwise. */
    int it_b;
} kl_tensorize_t;

/* Replaces the block under `loop` (that loop and the loops below it) by
 * the intrinsic named intrin (kl_intrin.h). The workload must be a
 * product Y[m,n] += (A[m,k] - za) * B[k,n] (or B[n,k]) with A u8, B const
 * s8, a batched product Y[b,m,n] += A[b,m,k] * B[b,k,n] (or B[b,n,k]; the
 * batch the first index of all three; avx512_bf16 only), or a convolution
 * Y[..,f] += (X[..,c] - za) * W[taps..,c,f] (NHWC, or NCHW Y[n,f,y,x] +=
 * (X[n,c,..] - za) * W[f,c,r,s]; groups 1; n is then f and k is c, and every
 * reduction loop must sit right above the block, under the register tile); the
 * block must be exactly two serial loops: the output column n with the
 * intrinsic's lanes, stride 1, then the reduction k with its red points, stride
 * 1; every other loop over n (k) must step by a multiple of the lanes (red); no
 * cache stages. Errors name the dimension (name, extent vs wanted) or the
 * tensor (name, dtype vs wanted) that differs. */
int kl_sched_tensorize(kl_sched_t *s, int loop, const char *intrin, char *err);

/* The recorded tensorize re-checked against the nest as it is now: 0 and
 * *out; KL_ERR_NOTFOUND (no message) when the schedule has none;
 * KL_ERR_INVAL when a later primitive broke the block. */
int kl_sched_tensorized(const kl_sched_t *s, kl_tensorize_t *out, char *err);

/* A readable dump of the nest (one loop per line, with kinds, parts,
 * guards and stages); heap string. */
char *kl_sched_print(const kl_sched_t *s);

#endif
