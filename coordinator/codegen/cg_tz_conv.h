/* cg_tz_conv.h - shared by the tensorized convolution generator's files
 * (codegen_tensorize_conv.c: the core; codegen_tensorize_nchw.c: the NCHW
 * repack and the tile-transposed store; codegen_tensorize_store.c: the
 * register tile's stores; codegen_tensorize_conv_bf16.c: the bf16
 * convolution; codegen_tensorize_base.c: what all use). Not part of the
 * public contract. */
#ifndef CG_TZ_CONV_H
#define CG_TZ_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "cg_tz.h"
#include "kl_intrin.h"

#define MAXT 32 /* accumulators in a register tile, at most */

typedef struct conv conv_t;
/* What differs between the int8 and bf16 convolutions' shared steps. */
typedef struct {
    const char *a_type; /* a tap row's element: "uint8_t", "uint32_t" */
    const char *w_type; /* a packed weight: "int8_t", "uint16_t" */
    int cgrp;           /* channels per group (per kl_dot lane) */
    /* The C template of the activations fed to kl_dot from tile ${t}'s
     * row a_${t} at channel c0. */
    const char *a_dot;
    /* The register tile's stores after the reduction run. */
    int (*stores)(kl_buf_t *b, const conv_t *c, const char *ind, char *err);
} kl_codegen__tzcfam_t;

struct conv {
    const kl_sched_t *s;
    const kl_workload_t *w;
    const kl_tensorize_t *tz;
    const kl_intrin_t *in;
    const kl_codegen__tzcfam_t *fam;
    const kl_access_t *xa, *wa; /* X[.., c], W[taps.., c, f] */
    int bpos, hp, tp, cp;
    int64_t ntile;
    /* X's channel index dc; repack when it is not the last (NCHW): X's
     * other indices then address the padded scratch, lo[d] padding before
     * and sh[d] points along index d, rows of cpad channels. fst: the
     * stride of Y's output channel index (1 in NHWC, P*Q in NCHW). */
    int dc;
    bool repack;
    int64_t lo[KL_IR_MAX_DIMS], sh[KL_IR_MAX_DIMS], cpad, fst;
    /* lx: the tile loop of a store by transposes (kl_codegen__tzc_tr_loop), or
     * -1; rp16: the repack goes 16 channels x 16 points a step
     * (kl_codegen__tzc_repack16). Both set once, read by every part. */
    int lx;
    bool rp16;
    /* pfg: with packed weights of KL_TZC_PF_BYTES or more, the K blocks
     * one register tile spans (0: no prefetch); pft[t]: tile t is the
     * first of its K block, the one whose weights it prefetches (the
     * block pfg further on, mod nkb, the K blocks). */
    int pfg;
    int64_t nkb;
    bool pft[MAXT];
};

/* Packed weights from this size on are prefetched a K group ahead. */
#define KL_TZC_PF_BYTES (256 * 1024)

/* Shared by the core and the NCHW parts (codegen_tensorize_base.c). The
 * iterator of access a's index d (its last with a coefficient). */
int kl_codegen__tzc_iter_of(const kl_workload_t *w, const kl_affine_t *a);
/* Whether the epilogue has the q-op form of the AVX-512 vector epilogue. */
bool kl_codegen__tzc_vec_epi_ok(const conv_t *c);
/* The C expression of Y's flat offset at tile t's output point. */
void kl_codegen__tzc_yoff(kl_buf_t *b, const conv_t *c, int64_t t);

/* The shared steps of both convolution generators
 * (codegen_tensorize_base.c). The access of tensor t in e (a load). */
const kl_access_t *kl_codegen__tzc_find_access(const kl_expr_t *e, int t);
/* The block's loops: hp, the reduction run; cp, the innermost loops that
 * run the channels only; [tp, hp) the register tile. */
void kl_codegen__tzc_plan_loops(conv_t *c);
/* W's flat index for (tap, c, f), tap decomposed over W's tap dims. */
void kl_codegen__tzc_widx(kl_buf_t *b, const conv_t *c);
/* The loops: above the tile, the tile's setup, the reduction run with the
 * taps' rows (ntap taps, cg channel groups), the block (c0: ek), then
 * the stores (c->fam->stores) where the tile ends. */
int kl_codegen__tzc_nest(kl_buf_t *b, const conv_t *c, const char *ek,
                         int64_t ntap, int64_t cg, char *err);

/* The stores of tile t's finished accumulator (codegen_tensorize_store.c):
 * the AVX-512 q-op epilogue on 16 lanes at once (kl_codegen__tzc_vec_epi_ok;
 * keep: left in kl_y<t> for the store by transposes), or one vector of
 * acc - comp (vstore) / the workload's epilogue lane by lane; 0, or the
 * epilogue's error. */
void kl_codegen__tzc_tile_store_vec(kl_buf_t *b, const conv_t *c, int64_t t,
                                    bool keep, const char *ind);
int kl_codegen__tzc_tile_store(kl_buf_t *b, const conv_t *c, int64_t t,
                               bool vstore, const char *ind, char *err);

/* The tile loop over pixels of a register tile stored by transposes, or
 * -1 (codegen_tensorize_nchw.c explains when). */
int kl_codegen__tzc_tr_loop(const conv_t *c);
/* The transposed stores of every block of the register tile (c->lx). */
void kl_codegen__tzc_tr_store(kl_buf_t *b, const conv_t *c, const char *ind);
/* Along X's index d, the step of the points the taps read (*off: their
 * phase). */
int64_t kl_codegen__tzc_read_step(const conv_t *c, int d, int64_t *off);
/* Whether the repack goes 16 channels x 16 points a step (jg: the read
 * step along the row). */
bool kl_codegen__tzc_repack16(const conv_t *c, int64_t jg);
/* kl_tr16, the 16x16 byte transpose the repack calls. */
extern const char kl_codegen__tzc_tr16_src[];
/* The per-call repack of X into the scratch at foff + 64 of the prepared
 * block (sb bytes), behind its busy flag at foff. */
void kl_codegen__tzc_repack(kl_buf_t *b, const conv_t *c, int64_t foff,
                            int64_t sb);

#endif
