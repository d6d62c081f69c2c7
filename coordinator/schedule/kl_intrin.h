/* kl_intrin.h - the tensor intrinsics `tensorize` can put in place of a
 * block of the loop nest (docs/architecture.md, "The tensorize primitive").
 *
 * One row per ISA. Each row describes the block it replaces: the loop
 * extents (`lanes` output columns x `red` reduction points, the lanes
 * outermost), the operand dtypes (u8 activations A, s8 weights B, s32
 * accumulator), the layout the weights must be packed in (done once in
 * ENTRY_prepare, kl_abi.h), the CPU feature it needs (as /proc/cpuinfo
 * spells it) and the compiler flags (-m...) / the `#pragma GCC target`
 * string generated code carries.
 *
 *   avx512_vnni   vpdpbusd zmm: 16 int32 lanes, each += 4 u8 x s8 products
 *   avx_vnni      vpdpbusd ymm (VEX, _mm256_dpbusd_avx_epi32): 8 lanes x 4
 *   avx2_i8       AVX2 fallback, 8 lanes x 4, exact: the s8 weights are
 *                 sign-extended to int16 (shifts), the u8 activations are
 *                 int16 too, and vpmaddwd sums products pairwise in int32
 *                 (two vpmaddwd + adds per block). vpmaddubsw is NOT used:
 *                 it saturates its int16 pair sums (255*127*2 > 32767).
 *
 * Generated code checks the feature when it prepares (ENTRY_prepare
 * returns NULL on a CPU without it, so a kernel fails instead of trapping).
 *
 * All three take the weights as [K/4][N][4] (for each group of 4
 * reduction points, the 4 s8 weights of one output column contiguous) and
 * wrap in int32 like the workload's accumulator.
 *
 *   avx512_bf16   vdpbf16ps zmm (_mm512_dpbf16_ps): 16 f32 lanes, each +=
 *                 2 bf16 x bf16 products (exact in f32) added in f32. A and
 *                 B are bf16 workload inputs stored as f32 (kl_ir.h: a read
 *                 means the value rounded to bf16): the kernel converts the
 *                 activations to bf16 pairs (round to nearest even, the
 *                 integer RNE of kl_dtype_bits) when it packs them, and the
 *                 weights to [K/2][N][2] uint16_t bf16 bits (the 2 weights
 *                 of one column for k, k+1 contiguous) once, in prepare
 *                 when B is const (dense), per call otherwise (matmul).
 *                 The output is f32.
 *   amx_bf16      AMX tdpbf16ps (_tile_dpbf16ps) on tiles: C[16][16] f32 +=
 *                 A[16][32] bf16 . B[16][16][2] bf16 (the [K/2][N][2]
 *                 layout again, one tile row = 16 column pairs = 64 bytes).
 *   amx_int8      AMX tdpbusd (_tile_dpbusd): C[16][16] s32 += A[16][64] u8
 *                 . B[16][16][4] s8 ([K/4][N][4], as the VNNI rows).
 *
 * The AMX rows' tiles: tile_rows 16 rows of tile_colsb 64 bytes, ntiles 8
 * (the register file: tmm0..7, so a grid of up to 2x2 accumulator tiles
 * with 2 A and 2 B tiles); lanes x red is one accumulator tile row's block
 * (16 columns x red). Their kernels configure the tiles (a 64-byte
 * palette-1 config, _tile_loadconfig) and must ask Linux for the tile
 * state first (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): their
 * ENTRY_prepare returns NULL without AMX or without the permission.
 */
#ifndef KL_INTRIN_H
#define KL_INTRIN_H

#include <stdbool.h>

#include "kl_ir.h"

typedef struct {
    const char *name;    /* "avx512_vnni": what tensorize(..) names */
    int lanes;           /* output columns of the block (spatial loop) */
    int red;             /* reduction points per lane (reduction loop) */
    kl_dtype a_dtype;    /* activations: u8 */
    kl_dtype b_dtype;    /* weights: s8 (const) */
    kl_dtype acc_dtype;  /* accumulator: s32 */
    const char *layout;  /* the weights' packed layout, for docs/messages */
    const char *feature; /* /proc/cpuinfo flag the CPU needs */
    const char *pragma;  /* #pragma GCC target string */
    const char *mflags;  /* the same as -m flags */
    const char *builtin; /* __builtin_cpu_supports name of the feature */
    /* AMX only (0 otherwise): rows and bytes per row of a tile, tiles. */
    int tile_rows, tile_colsb, ntiles;
} kl_intrin_t;

int kl_intrin_count(void);
const kl_intrin_t *kl_intrin_at(int i);
/* The row named name, or NULL. */
const kl_intrin_t *kl_intrin_find(const char *name);
/* Whether this machine's CPU has the feature of in (/proc/cpuinfo). */
bool kl_intrin_cpu_has(const kl_intrin_t *in);

#endif
