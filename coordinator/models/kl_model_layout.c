/* kl_model_layout.c - which values of a graph are stored NHWC
 * (kl_mgraph_layout, kl_model_int.h).
 *
 * Graphs are NCHW. A tensorized qconv2d reads 4 channels of one pixel
 * per 32-bit lane, so in NCHW it repacks its input into a padded
 * channels-last scratch on every call, and stores its output back at the
 * channel stride: in ResNet-18 INT8 the repacks alone were 7 % of the
 * model. So the q-convolutions compute in NHWC (their workloads say
 * layout=NHWC), and the values between them stay NHWC where the layers
 * between do not care: quantize, dequantize, relu, clip and an add of
 * two same-shaped tensors work element by element, and a max pool on
 * codes (kl_mgraph_code_pool) is written for either layout. Every other
 * layer reads NCHW (the general ops too: a broadcasting add, concat,
 * reduce_mean ... index the NCHW shape the graph gives); kiln export converts a
 * value where a reader wants the other layout (one transpose, shared by the
 * readers that want it). With KILN_LAYOUT_F32=NHWC an f32 graph's
 * convolutions and depthwise convolutions compute NHWC as well
 * (s_nhwc_float). */
#include <stdlib.h>
#include <string.h>

#include "kl_model_int.h"

bool kl_mgraph_layout_matters(const kl_mnode_t *nd)
{
    return nd->ndim == 4 && nd->shape[1] > 1 && nd->shape[2] * nd->shape[3] > 1;
}

/* A layer that computes in whichever layout its input has. */
static bool s_follows(const kl_mgraph_t *g, int i)
{
    const kl_mnode_t *nd = &g->nodes[i];
    if (nd->fused || nd->ndim != 4)
        return false;
    switch (nd->op) {
    case KL_MOP_QUANTIZE:
    case KL_MOP_DEQUANTIZE:
    case KL_MOP_RELU:
    case KL_MOP_CLIP:
        return true;
    case KL_MOP_ADD: {
        const kl_mnode_t *a = &g->nodes[nd->in[0]], *b = &g->nodes[nd->in[1]];
        return nd->nin == 2 && !nd->bcast && a->ndim == 4 && b->ndim == 4 &&
               !memcmp(a->shape, b->shape, 4 * sizeof a->shape[0]);
    }
    case KL_MOP_MAX_POOL:
        return kl_mgraph_code_pool(g, i) >= 0;
    default:
        return false;
    }
}

/* A q-convolution that computes NHWC: not grouped, and C a multiple of 4
 * of at least 16 (a C = 3 stem stays NCHW, where its kernel reads whole
 * rows of one channel). */
static bool s_nhwc_conv(const kl_mgraph_t *g, const kl_mnode_t *nd)
{
    const kl_mnode_t *x = &g->nodes[nd->in[0]];
    return nd->op == KL_MOP_QCONV2D && !nd->fused && nd->groups <= 1 &&
           x->ndim == 4 && x->shape[1] % 4 == 0 && x->shape[1] >= 16;
}

/* A float convolution that computes NHWC, with KILN_LAYOUT_F32=NHWC in
 * the environment: in an f32 graph, conv2d not grouped and
 * depthwise_conv2d of multiplier 1 (its channel vectors then load and
 * store whole vectors, and a 1x1 conv2d's reduction walks a pixel's
 * channels contiguously). Not the default yet: it changes the tasks'
 * keys, so a store tuned NCHW does not export it. */
static bool s_nhwc_float(const kl_mgraph_t *g, const kl_mnode_t *nd)
{
    const char *e = getenv("KILN_LAYOUT_F32");
    if (!e || strcmp(e, "NHWC"))
        return false;
    const kl_mnode_t *x = &g->nodes[nd->in[0]];
    bool op = (nd->op == KL_MOP_CONV2D && nd->groups <= 1) ||
              (nd->op == KL_MOP_DEPTHWISE && nd->mult <= 1);
    return op && !nd->fused && g->prec == KL_DT_F32 && x->dt == KL_DT_F32 &&
           nd->dt == KL_DT_F32 && x->ndim == 4;
}

void kl_mgraph_layout(kl_mgraph_t *g)
{
    if (getenv("KILN_LAYOUT_NCHW")) {
        for (int i = 0; i < g->n; i++)
            g->nodes[i].nhwc = false;
        return;
    }
    /* Forward: a q-conv is NHWC; a layer that follows its input is NHWC
     * when one of its inputs is (the others converted). */
    for (int i = 0; i < g->n; i++) {
        kl_mnode_t *nd = &g->nodes[i];
        nd->nhwc = false;
        if (nd->fused)
            nd->nhwc = g->nodes[nd->owner].nhwc;
        else if (s_nhwc_conv(g, nd) || s_nhwc_float(g, nd))
            nd->nhwc = true;
        else if (s_follows(g, i))
            for (int k = 0; k < nd->nin; k++)
                nd->nhwc = nd->nhwc || g->nodes[nd->in[k]].nhwc;
    }
    /* Backward: a following layer none of whose readers reads NHWC (an
     * output is read NCHW) computes NCHW, converting its input instead
     * of its output (a dequantize before a pool: codes, a quarter of the
     * bytes). */
    for (int i = g->n - 1; i >= 0; i--) {
        kl_mnode_t *nd = &g->nodes[i];
        if (!nd->nhwc || !s_follows(g, i))
            continue;
        bool any = false;
        for (int j = i + 1; j < g->n && !any; j++)
            for (int k = 0; k < g->nodes[j].nin; k++)
                if (g->nodes[j].in[k] == i && g->nodes[j].nhwc)
                    any = true;
        for (int o = 0; o < g->nout; o++)
            if (g->outputs[o] == i)
                any = false;
        nd->nhwc = any;
    }
}
