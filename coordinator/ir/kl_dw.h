/* kl_dw.h - recognising a float depthwise convolution (depthwise_conv2d,
 * NCHW, multiplier 1) or pooling and its shape, for the depthwise design space
 * (rules_cpu_dw.c) and its generator (codegen_dw.c):
 *
 *   Y[n,c,y,x] += X[n,c,y*sh+r*dh-ph, x*sw+s*dw-pw] * W[c,0,r,s]
 *       | epilogue (bias, residual, relu, clip, act=)
 *
 * any stride, dilation and padding (rows and columns apart), W constant,
 * every tensor f32; or its NHWC form (layout=NHWC), X[n,y*sh+..,x*sw+..,c]
 * into Y[n,y,x,c], the weights the same. A channel multiplier above 1 is not
 * recognised: it keeps the generic schedules.
 *
 * The quantized form (qdepthwise_conv2d, quant 1):
 *
 *   Y[n,c,y,x] += (X[...] - za) * W[c,0,r,s] | + bias[c]
 *       | requant(scale[c] or a number, zo) | relu, clip
 *
 * X u8, W const s8, bias s32, Y u8 or s8 (s32 without requant); every
 * epilogue read indexed by the channel alone. Padding contributes
 * nothing (the reference skips the point), so a packed (x - za) is 0
 * there.
 *
 * Pooling has the same shape without weights, and is recognised too:
 *
 *   Y[n,c,y,x] max= X[n,c,y*sh+r*dh-ph, x*sw+s*dw-pw]      (max_pool2d)
 *   Y[n,c,y,x] += X[n,c,y*sh+r*dh-ph, x*sw+s*dw-pw] | * k  (avg_pool2d)
 *
 * (pool 1 and 2, wt -1). The op kinds are those (a "custom" workload,
 * read back from its text, by its structure alone). A max pooling whose window
 * lies wholly in the padding at some output is refused (the reference gives 0
 * there, which the kernels' -inf padding would not).
 */
#ifndef KL_DW_H
#define KL_DW_H

#include <stdint.h>

#include "kl_ir.h"

typedef struct {
    int x, wt, y;   /* tensor indices: input, weights (-1: pooling), output */
    int pool;       /* 0 convolution, 1 max pooling, 2 sum (avg) pooling */
    int quant;      /* 1: qdepthwise_conv2d (below) */
    int nhwc;       /* 1: X [N,H,W,C] and Y [N,P,Q,C] (layout=NHWC, float) */
    int64_t za;     /* quant: X's zero point */
    int it[6];      /* iterators n, c, y, x, r, s */
    int64_t n, c;   /* batch, channels */
    int64_t h, w;   /* input height, width */
    int64_t p, q;   /* output height, width */
    int64_t r, s;   /* window rows, columns */
    int64_t sh, sw; /* strides */
    int64_t dh, dw; /* dilations */
    int64_t ph, pw; /* padding (top, left) */
} kl_dw_t;

/* Whether w is such a convolution: 0 and its shape in *info (may be
 * NULL), or KL_ERR_UNSUPPORTED with the reason in err (may be NULL). */
int kl_workload_depthwise(const kl_workload_t *w, kl_dw_t *info, char *err);

#endif
