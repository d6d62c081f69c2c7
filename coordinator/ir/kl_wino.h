/* kl_wino.h - Winograd convolution: a 3x3, stride-1 conv2d rewritten as a
 * batched matrix product between two small linear transforms
 * (Lavin & Gray: F(2x2, 3x3) and F(4x4, 3x3)).
 *
 * For Y[n,k,y,x] += X[n,c,y+r-ph,x+s-pw] * W[k,c,r,s] (NCHW, r and s of
 * extent 3, any padding, any epilogue) with W constant, each output tile of
 * m x m pixels (m = 2 or 4) is A^T [ (G g G^T) .* (B^T d B) ] A over the
 * alpha x alpha (alpha = m + 2) input tile d. Summed over the input
 * channels, the element-wise products become alpha^2 (16 or 36) independent
 * matrix products, the *derived workload*:
 *
 *   kl_wm[e,p,k] += kl_wv[e,p,c] * kl_wu[e,c,k]
 *       where e=alpha^2, p=N*TH*TW, k=K, c=C
 *
 * with kl_wu = G g G^T (the weights, transformed once: constant), kl_wv =
 * B^T d B (the input, transformed on each call) and kl_wm transformed back
 * to Y by A^T . A, with the epilogue. TH x TW = ceil(P/m) x ceil(Q/m)
 * tiles of each image; tile p = (n * TH + ty) * TW + tx. 2.25x (m = 2)
 * or 4x (m = 4) fewer multiplications than the direct convolution, but
 * the weights' transform is alpha^2 / 9 times their size (1.8x, 4x) and
 * is streamed once per call; the transforms round differently, within
 * float tolerance (m = 4's less closely: its points are 0, +-1, +-2).
 *
 * The schedule primitive kl_sched_winograd swaps a schedule's workload for
 * the derived one; the C generator wraps the derived nest's kernel in the
 * transforms.
 */
#ifndef KL_WINO_H
#define KL_WINO_H

#include <stdint.h>

#include "kl_ir.h"

typedef struct {
    int m, alpha;          /* output tile, input tile (m + 2) */
    int x, wt, y;          /* tensor indices: input, weights, output */
    int it[4];             /* output's iterators: n, k, y, x */
    int64_t n, c, k;       /* batch, input and output channels */
    int64_t h, w;          /* input height, width */
    int64_t p, q;          /* output height, width */
    int64_t ph, pw;        /* padding (top, left) */
    int64_t th, tw, tiles; /* tiles per image (rows, columns), in all */
} kl_wino_t;

/* Whether w is a convolution that the Winograd rewrite with output tile m
 * handles (m = 2 or 4) and, if so, its derived workload in
 * *out (owned by the caller; may be NULL to only test) and the shapes in
 * *info (may be NULL). Returns 0, or KL_ERR_UNSUPPORTED with the reason in
 * err (may be NULL): "not a 3x3 stride-1 NCHW convolution", "weights W are
 * not const", ... */
int kl_workload_winograd(const kl_workload_t *w, int m, kl_workload_t **out,
                         kl_wino_t *info, char *err);

#endif
