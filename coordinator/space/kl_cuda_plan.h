/* kl_cuda_plan.h - how a scheduled loop nest maps onto a CUDA launch.
 *
 * The GPU postprocessors (postproc_cuda.c) and the CUDA code generator
 * (coordinator/codegen/codegen_cuda.c) share this one analysis, so that a
 * schedule the postprocessors accept is exactly one the generator can emit.
 *
 * Execution model of a scheduled nest on the GPU:
 *
 *   - Loops bound to blockIdx.* / threadIdx.* / vthread must form a prefix
 *     of the nest (outermost loops). blockIdx loops give the grid,
 *     threadIdx loops the block; their values come from the indices.
 *   - vthread loops are virtual threads: each thread runs all their
 *     iterations, fully unrolled, as the outermost dimension of its
 *     register tile. In the compute nest they sit innermost (just around
 *     the statement), so that data loaded once serves every virtual thread.
 *   - A schedule without any bound loop (the naive one) maps its spatial
 *     loops, which must all come before the first reduction loop, onto one
 *     flat index blockIdx.x * blockDim.x + threadIdx.x ("flat" plan).
 *   - The output is accumulated in registers (a local write cache): either
 *     the schedule's cache_write(local), attached at a loop of the prefix or
 *     below it, or an implicit one just above the first reduction loop. The
 *     accumulators cover every spatial loop below the attach point plus the
 *     vthread loops; no reduction loop may be at or above the attach point.
 *     They are written back with the epilogue after the loops below it.
 *   - A cache_read(shared) attached at loop L (or at the root, meaning the
 *     end of the prefix) is filled cooperatively by all threads of the block
 *     at the start of each iteration of L, between two __syncthreads. It
 *     holds the box of the tensor that the loops below L, every threadIdx
 *     loop and every vthread loop read, with the loops above L and the
 *     blockIdx loops fixed. Reads outside the tensor are stored as zero.
 *     An annotation "smem_pad" = P on a bound loop pads every innermost
 *     row of every box by P floats (P = 4 keeps 16-byte copies aligned).
 *   - Loops of kind unroll (and vectorize, which the GPU treats as unroll)
 *     get `#pragma unroll`; parallel is a CPU binding and is refused.
 */
#ifndef KL_CUDA_PLAN_H
#define KL_CUDA_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_sched.h"

/* Bounds the plan and the postprocessors enforce. */
#define KL_CUDA_MAX_ACC 128         /* accumulators per thread */
#define KL_CUDA_MAX_VTHREADS 16     /* product of vthread extents */
#define KL_CUDA_STATIC_SMEM 49152   /* static __shared__ limit per block */
#define KL_CUDA_FLAT_BLOCK 256      /* threads per block of a flat plan */
#define KL_CUDA_MIN_THREADS 32      /* one warp (fewer: only if no more) */
#define KL_CUDA_MAX_SPILL_BYTES 256 /* spill stores + loads per thread */

typedef struct {
    int stage;  /* index into kl_sched_stage() */
    int tensor; /* the cached input */
    int attach; /* effective attach position (>= prefix - 1) */
    int ndim;
    /* The box: coordinate d runs over [base_d + lo[d], base_d + lo[d] +
     * ext[d]) where base_d is the part of the index fixed at the attach
     * point (offset included). */
    int64_t lo[KL_IR_MAX_DIMS];
    int64_t ext[KL_IR_MAX_DIMS];
    int64_t size;   /* floats: product of ext */
    int64_t pitch;  /* floats from one innermost row to the next: ext of
                     * the last dimension plus the padding the schedule
                     * asked for ("smem_pad" annotation, against bank
                     * conflicts) */
    int64_t alloc;  /* floats allocated: size / ext[last] * pitch */
    int64_t offset; /* floats from the start of the block's shared memory */
} kl_cuda_smem_t;

typedef struct {
    int nloops;
    bool flat;  /* no bound loops: flat index over the spatial loops */
    int nflat;  /* flat: the spatial loops at positions [0, nflat) */
    int prefix; /* number of bound loops at the front of the nest */
    int64_t grid[3], block[3];
    int64_t threads;  /* block[0] * block[1] * block[2] */
    int64_t vthreads; /* product of vthread extents */
    int wc_attach;    /* accumulators cover loops at positions > this */
    bool wc_explicit; /* a cache_write(local) stage exists */
    int nacc_loops;   /* vthread loops first, then spatial loops below */
    int acc_pos[KL_SCHED_MAX_LOOPS];
    int64_t acc_mult[KL_SCHED_MAX_LOOPS]; /* stride in the acc array */
    int64_t nacc;                         /* accumulators per thread */
    int nsmem;
    kl_cuda_smem_t smem[KL_SCHED_MAX_STAGES];
    int64_t smem_bytes; /* all shared stages together */
    bool smem_dynamic;  /* over KL_CUDA_STATIC_SMEM: extern __shared__ */
    bool wide_index;    /* some tensor has >= 2^31 elements: 64-bit math */
} kl_cuda_plan_t;

/* Analyses s for a CUDA target t. Returns 0 and fills *p, or
 * KL_ERR_UNSUPPORTED with the reason when the nest cannot be run by the
 * model above (a bound loop after a serial one, a reduction loop above the
 * write cache, a packed or local read cache, a shared write cache, a cached
 * tensor read through a strided gather or through two different index maps,
 * a parallel loop, an output other than f32; f16 / bf16 inputs are read
 * as f32). Limits are not checked here:
 * see kl_cuda_plan_check. */
int kl_cuda_plan(const kl_sched_t *s, const kl_target_t *t, kl_cuda_plan_t *p,
                 char *err);

/* Checks the plan against the machine: threads per block in
 * [min(32, spatial points), max_threads_per_block], block.z <= 64, grid.y
 * and grid.z <= 65535, vthreads <= KL_CUDA_MAX_VTHREADS, accumulators <=
 * KL_CUDA_MAX_ACC, shared memory <= 48 KiB static or, dynamically, <= the
 * target's max_shared_bytes, vectorized loops <= 16 bytes. Returns 0 or
 * KL_ERR_INVAL naming the limit. */
int kl_cuda_plan_check(const kl_cuda_plan_t *p, const kl_sched_t *s,
                       const kl_target_t *t, char *err);

/* ---- Tensor-core tiling (mma.sync.aligned.m16n8k16) ----
 *
 * A matmul-like workload (C[batch.., m, n] += A[..] * B[..], the two
 * inputs f16 or both bf16, indexed each dimension by one iterator, the
 * output f32, any epilogue) on sm_80 or newer may be scheduled by the rules
 * (rules_cuda.c) as
 *
 *   blk(batch.., m0, n0) wm wn k0 k1 mt nt m16 n8 k16
 *
 * with m split (?, WM, MT, 16), n split (?, WN, NT, 8), k split (?, KS, 16)
 * (imperfect: ragged edges are guarded) and the fused block loop bound to
 * blockIdx.x and annotated KL_CUDA_MMA_ANNOT = 1. The block has WM x WN
 * warps; warp (wm, wn) computes MT x NT tiles of 16x8 outputs with one
 * mma.sync m16n8k16 per tile and k16 step, keeping the accumulators in the
 * documented C/D fragment registers. A and B are staged in shared memory
 * per k0 step (BK = 16 KS columns of k, zero outside the tensors). */
#define KL_CUDA_MMA_ANNOT "mma_m16n8k16"
/* On the block loop too, = 1: fragments are loaded with ldmatrix.sync
 * (x4 for A, x2 for B) instead of 32-bit shared reads per register. */
#define KL_CUDA_LDMATRIX_ANNOT "mma_ldmatrix"

typedef struct {
    kl_dtype in; /* KL_DT_F16 or KL_DT_BF16 */
    int a, b;    /* tensors: a is read by (.., m, k), b by (.., k, n) */
    int m, n, k; /* iterators */
    int nbatch;  /* iterators indexing a, b and the output */
    int batch[KL_IR_MAX_ITERS];
    /* Element strides of a, b and the output per iterator (0 where the
     * iterator does not index that tensor). */
    int64_t sa[KL_IR_MAX_ITERS], sb[KL_IR_MAX_ITERS], sc[KL_IR_MAX_ITERS];
} kl_cuda_mma_match_t;

/* Whether w is matmul-like as above; fills *m when it is. */
bool kl_cuda_mma_match(const kl_workload_t *w, kl_cuda_mma_match_t *m);

typedef struct {
    kl_cuda_mma_match_t mm;
    int64_t warps_m, warps_n; /* WM, WN */
    int64_t tiles_m, tiles_n; /* MT, NT: 16x8 tiles per warp */
    int64_t ksteps;           /* KS: k16 steps per shared stage */
    int64_t bm, bn, bk;       /* block tile: 16 WM MT, 8 WN NT, 16 KS */
    int64_t kouter;           /* k0 extent */
    int64_t grid, threads;    /* blockIdx.x extent, 32 WM WN */
    int64_t pitch;            /* 16-bit elements per shared row: bk + 8 */
    int64_t smem_bytes;       /* (bm + bn) * pitch * 2 */
    bool ldmatrix;            /* KL_CUDA_LDMATRIX_ANNOT */
} kl_cuda_mma_plan_t;

/* Analyses a tensor-core schedule. Returns KL_ERR_NOTFOUND (no message)
 * when s carries no KL_CUDA_MMA_ANNOT; KL_ERR_UNSUPPORTED naming the
 * problem when it does but the nest is not the form above, the workload is
 * not matmul-like or the target is older than sm_80; 0 with *p filled. */
int kl_cuda_mma_plan(const kl_sched_t *s, const kl_target_t *t,
                     kl_cuda_mma_plan_t *p, char *err);

/* An optional resource check run by kl_postproc_cuda after the static
 * checks (see kl_cuda_enable_resource_check in tools/cuda_check.h, which
 * compiles the kernel with NVRTC and checks registers and spills). NULL
 * disables it (the default). Set it once, before sampling starts; it is
 * process-wide. */
typedef int (*kl_cuda_resource_fn)(const kl_sched_t *s, const kl_target_t *t,
                                   char *err);
void kl_postproc_cuda_set_resource_check(kl_cuda_resource_fn fn);

#endif
