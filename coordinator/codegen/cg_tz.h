/* cg_tz.h - helpers shared by the tensorized C generators
 * (codegen_tensorize.c: products; codegen_tensorize_conv.c: convolutions),
 * defined below both in codegen_tensorize_base.c. Not part of the public
 * contract. */
#ifndef CG_TZ_H
#define CG_TZ_H

#include <stdbool.h>
#include <stdint.h>

#include "cg_int.h"
#include "kl_codegen.h"
#include "kl_intrin.h"
#include "kl_util.h"

/* Hands b's text to out as a CPU kernel named entry with a prepare step
 * (grid and block 1), or frees b when rc is an error; returns rc. */
int kl_codegen__tz_kernel(kl_buf_t *b, const char *entry, int rc,
                          kl_kernel_t *out);
/* The intrinsic's C: kl_vacc_t, KL_VLOAD / KL_VSTORE / KL_VZERO / KL_VSUB
 * and kl_dot(acc, 4 activations, 4 x lanes weights). */
void kl_codegen__tz_intrin_macros(kl_buf_t *b, const char *name);
/* The value of iterator it fed by loops [0, upto) as a C expression over
 * the loop variables l<id>; its largest value into *max. */
void kl_codegen__tz_iter_expr(const kl_sched_t *s, int it, int upto,
                              kl_buf_t *b, int64_t *max);
/* " && (.. < bound)" for each guard whose deepest term above the block
 * (position bpos) sits in loops [lo, hi); the block's loops count as 0. */
void kl_codegen__tz_guards(const kl_sched_t *s, int lo, int hi, int bpos,
                           kl_buf_t *b);
/* A loop above the block: `omp parallel for` on the first parallel loop
 * (*par records it), `GCC unroll` on unrolled loops; ind (256 bytes)
 * grows by 4 spaces. kl_codegen__tz_close ends it, ind shrinks back. */
void kl_codegen__tz_open(kl_buf_t *b, const kl_loop_t *l, char *ind, bool *par);
void kl_codegen__tz_close(kl_buf_t *b, char *ind);
/* The kernel's tensor arguments, t<i> for tensor i (the output not
 * const). */
void kl_codegen__tz_tensor_args(kl_buf_t *b, const kl_workload_t *w);
/* The C of a tensorized convolution (codegen_tensorize_conv.c). */
int kl_codegen_tensorized_conv(const kl_sched_t *s, const kl_tensorize_t *tz,
                               const char *entry, kl_kernel_t *out, char *err);
/* The C of a product tensorized with avx512_bf16
 * (codegen_tensorize_bf16.c). */
int kl_codegen__tensorized_bf16(const kl_sched_t *s, const kl_tensorize_t *tz,
                                const char *entry, kl_kernel_t *out, char *err);
/* The C of a convolution tensorized with avx512_bf16
 * (codegen_tensorize_conv_bf16.c). */
int kl_codegen__tensorized_conv_bf16(const kl_sched_t *s,
                                     const kl_tensorize_t *tz,
                                     const char *entry, kl_kernel_t *out,
                                     char *err);
/* The f32 epilogue of the float x at the point named by i<iterator>,
 * then its store into the output, lines at indentation ind
 * (codegen_tensorize_epi.c, under the bf16 products and convolutions;
 * the AMX kernels run it too). */
int kl_codegen__bf16_epilogue(kl_buf_t *b, const kl_workload_t *w,
                              const char *ind, char *err);
/* Whether the epilogue and store of w can run on 16 lanes at once along
 * iterator it (kl_codegen__bf16_epilogue_vec): every tensor it reads and
 * the output at a constant stride along it, and no activation. */
bool kl_codegen__bf16_epilogue_vec_ok(const kl_workload_t *w, int it);
/* The same epilogue and store on the 16 f32 lanes of the __m512 acc at
 * once, lane q at i<it> + q for q < nv (a C expression), the other
 * iterators at the point named by i<iterator>: bias and residual reads
 * broadcast, loaded or gathered, relu and clip as max / min (the scalar
 * form's values, NaN included), a masked store, or the lanes at the
 * output's stride. Lines at indentation ind. */
void kl_codegen__bf16_epilogue_vec(kl_buf_t *b, const kl_workload_t *w, int it,
                                   const char *acc, const char *nv,
                                   const char *ind);

/* The product generators' shared plan and nest (codegen_tensorize.c:
 * int8, codegen_tensorize_bf16.c: bf16), defined in
 * codegen_tensorize_base.c, parameterized by the intrinsic family. */
typedef struct kl_codegen__tzp kl_codegen__tzp_t;
typedef struct {
    const char *a_type; /* an activation row's element: "uint8_t" */
    /* C templates (${ab}: the activations' base, ${as}: a row's stride,
     * ${t}: the accumulator) of the activations fed to kl_dot: at m, k0
     * (no tile) and on accumulator t's row a_t at k0. */
    const char *a_at, *a_tile;
    /* The tile's stores after its reduction run. */
    int (*tile_store)(kl_codegen__tzp_t *p, char *err);
} kl_codegen__tzfam_t;
struct kl_codegen__tzp {
    const kl_sched_t *s;
    const kl_workload_t *w;
    const kl_tensorize_t *tz;
    const kl_intrin_t *in;
    const kl_codegen__tzfam_t *fam;
    const char *entry;
    /* The block's position; hp: the first of the reduction loops right
     * above it; tp: the register tile's loops [tp, hp) (tp = hp: one
     * tile), ntile accumulators. */
    int bpos, hp, tp;
    int64_t ntile;
    int nt, ot;
    int64_t M, N, K;
    /* acc's rows and padded columns, the weights' K groups; the packed
     * weights' and the compensation's bytes (set by the generator). */
    int64_t rows, np, kg, wbytes, cbytes;
    /* A batched product (tz->it_b >= 0, bf16 only): nb batches, each with
     * its rows of acc (rows x np), of the activations (M x as) and its
     * packed weights at KL_WBAT(b) (a macro of the generator's head); the
     * tile's b_<t> (bc_<t>: clamped to nb - 1 for the reads). nb = 1 and
     * no b otherwise. */
    int64_t nb;
    bool bconst; /* bf16: B packed once in prepare */
    bool full;   /* the run [hp, bpos) covers the whole reduction */
    bool fused;  /* the epilogue runs at the tile's store: no acc buffer */
    bool vstore; /* ... as one vector store per accumulator (generator) */
    bool par;    /* a loop got `omp parallel for` */
    char ab[32]; /* the activations' base (fam->a_at's ${ab}) */
    int64_t as;  /* and a row's stride */
    kl_buf_t em, en, ek; /* m, n0 and k0 over the loops above the block */
    kl_buf_t eb;         /* and b, when batched */
    char ind[256];       /* the current indentation */
    kl_buf_t b;
};
/* The plan shared by both: the block, the reduction run, the register
 * tile, m/n0/k0 (and b), rows, np, kg, nb, full and fused. */
void kl_codegen__tzp_plan(kl_codegen__tzp_t *p);
/* The loops above the block, the tile unrolled at tp, the block, and the
 * loops closed with the tile's stores (fam->tile_store). */
int kl_codegen__tzp_nest(kl_codegen__tzp_t *p, char *err);
/* The acc buffer's allocation ("malloc(..)", "calloc(.., 4)"), NULL when
 * fused; the caller frees it. */
char *kl_codegen__tzp_acc_alloc(const kl_codegen__tzp_t *p);
/* Frees the plan's expressions, hands the text to out (tz_kernel) and
 * frees p. */
int kl_codegen__tzp_finish(kl_codegen__tzp_t *p, int rc, kl_kernel_t *out);

#endif
