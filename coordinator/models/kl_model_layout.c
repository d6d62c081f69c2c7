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
 * readers that want it).
 *
 * An f32 graph's convolutions and depthwise convolutions compute NHWC too
 * when that is cheap (s_f32_mode): the graph has a depthwise convolution
 * (a MobileNet: its 1x1 convolutions then read a pixel's channels
 * contiguously and the depthwise kernels load and store whole channel
 * vectors, and an EfficientNet's squeeze-excite follows: s_follows_f32),
 * and the conversions the plan needs move at most an eighth of the
 * elements those layers write (a ResNet, with no depthwise layer, keeps
 * its NCHW Winograd kernels). KILN_LAYOUT_F32=NHWC or NCHW decides
 * instead. */
#include <stdlib.h>
#include <string.h>

#include "kl_model_int.h"
#include "kl_err.h"
#include "kl_util.h"

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

/* With f32 values NHWC (s_f32_mode), a squeeze-excite's layers follow
 * too: a global average pool and a reduce_mean / reduce_sum over H and W
 * with C kept (their [N,C,1,1] or [N,C] output is the same memory in
 * either layout), and the element-wise general ops whose operands are
 * all 4-D (a [N,C,1,1] scale broadcasts over the pixels in either
 * layout). kiln export computes them on [N,H,W,C] shapes
 * (export_general.c); the pool is then no task. */
static bool s_follows_f32(const kl_mgraph_t *g, const kl_mnode_t *nd)
{
    const kl_mnode_t *x = &g->nodes[nd->in[0]];
    if (nd->fused || nd->nin < 1 || x->ndim != 4 || x->dt != KL_DT_F32)
        return false;
    if (nd->op == KL_MOP_GLOBAL_AVG_POOL)
        return true;
    if (nd->op == KL_MOP_REDUCE_MEAN || nd->op == KL_MOP_REDUCE_SUM)
        return (nd->axes & 0xeu) == 0xcu; /* H, W reduced; C kept */
    if (nd->ndim != 4 ||
        !(kl_mop_is_binary(nd->op) || kl_mop_is_unary(nd->op) ||
          (nd->op == KL_MOP_ADD && nd->bcast)))
        return false;
    for (int k = 0; k < nd->nin; k++)
        if (g->nodes[nd->in[k]].ndim != 4)
            return false;
    return true;
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

/* A float convolution that may compute NHWC: in an f32 graph, conv2d
 * not grouped and depthwise_conv2d of multiplier 1. */
static bool s_nhwc_float(const kl_mgraph_t *g, const kl_mnode_t *nd)
{
    const kl_mnode_t *x = &g->nodes[nd->in[0]];
    bool op = (nd->op == KL_MOP_CONV2D && nd->groups <= 1) ||
              (nd->op == KL_MOP_DEPTHWISE && nd->mult <= 1);
    return op && !nd->fused && g->prec == KL_DT_F32 && x->dt == KL_DT_F32 &&
           nd->dt == KL_DT_F32 && x->ndim == 4;
}

int kl_mgraph_layout_f32_env(char *err)
{
    const char *e = getenv("KILN_LAYOUT_F32");
    if (!e || !*e || !strcmp(e, "NHWC") || !strcmp(e, "NCHW") ||
        !strcmp(e, "auto"))
        return KL_OK;
    return kl_seterr(err, KL_ERR_INVAL,
                     "KILN_LAYOUT_F32: bad value '%s' (NHWC, NCHW or auto)", e);
}

static int64_t s_numel(const kl_mnode_t *nd)
{
    int64_t n = 1;
    for (int k = 0; k < nd->ndim; k++)
        n *= nd->shape[k];
    return n;
}

/* The node whose buffer holds value i (a fused layer's is its owner's). */
static int s_holder(const kl_mgraph_t *g, int i)
{
    const kl_mnode_t *nd = &g->nodes[i];
    return nd->op != KL_MOP_INPUT && nd->fused ? nd->owner : i;
}

/* Marks value i converted when a reader wants it in layout nhwc. */
static void s_read(const kl_mgraph_t *g, int i, bool nhwc, unsigned char *cv)
{
    i = s_holder(g, i);
    const kl_mnode_t *nd = &g->nodes[i];
    if (nd->nhwc != nhwc && kl_mgraph_layout_matters(nd))
        cv[i] |= nhwc ? 1 : 2;
}

/* The elements the plan converts (each value at most once a direction,
 * as kiln export does), as kiln export's readers read them: a computing
 * layer its inputs and residual in its own layout, a view and every
 * output NCHW. */
int64_t kl_mgraph_layout_converted(const kl_mgraph_t *g)
{
    unsigned char *cv = kl_xcalloc((size_t)g->n + 1, 1);
    for (int j = 0; j < g->n; j++) {
        const kl_mnode_t *nd = &g->nodes[j];
        if (nd->op == KL_MOP_INPUT || nd->op == KL_MOP_CONST || nd->fused)
            continue;
        for (int k = 0; k < nd->nin; k++)
            s_read(g, nd->in[k], nd->nhwc, cv);
        if (nd->res)
            s_read(g, nd->res_from, nd->nhwc, cv);
    }
    for (int o = 0; o < g->nout; o++)
        s_read(g, g->outputs[o], false, cv);
    int64_t n = 0;
    for (int i = 0; i < g->n; i++)
        n += ((cv[i] & 1) + (cv[i] >> 1)) * s_numel(&g->nodes[i]);
    free(cv);
    return n;
}

/* The plan: q-convs NHWC, f32 convolutions too when f32, and the
 * layers between them following. */
static void s_plan(kl_mgraph_t *g, bool f32)
{
    /* Forward: a q-conv is NHWC; a layer that follows its input is NHWC
     * when one of its inputs is (the others converted). */
    for (int i = 0; i < g->n; i++) {
        kl_mnode_t *nd = &g->nodes[i];
        nd->nhwc = false;
        if (nd->fused)
            nd->nhwc = g->nodes[nd->owner].nhwc;
        else if (s_nhwc_conv(g, nd) || (f32 && s_nhwc_float(g, nd)))
            nd->nhwc = true;
        else if (s_follows(g, i))
            for (int k = 0; k < nd->nin; k++)
                nd->nhwc = nd->nhwc || g->nodes[nd->in[k]].nhwc;
        else if (f32 && s_follows_f32(g, nd)) /* by the inputs that matter */
            for (int k = 0; k < nd->nin; k++) {
                const kl_mnode_t *x = &g->nodes[nd->in[k]];
                nd->nhwc = nd->nhwc || (x->nhwc && kl_mgraph_layout_matters(x));
            }
    }
    /* Backward: a following layer none of whose readers reads NHWC (an
     * output is read NCHW) computes NCHW, converting its input instead
     * of its output (a dequantize before a pool: codes, a quarter of the
     * bytes). */
    for (int i = g->n - 1; i >= 0; i--) {
        kl_mnode_t *nd = &g->nodes[i];
        if (!nd->nhwc || !(s_follows(g, i) || (f32 && s_follows_f32(g, nd))))
            continue;
        /* a reduction to [N,C,1,1] reads its NHWC input as it is */
        if (!kl_mgraph_layout_matters(nd))
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

/* Whether the f32 convolutions compute NHWC: KILN_LAYOUT_F32's word, else
 * (auto) a depthwise layer and the plan's conversions at most an eighth
 * of what the NHWC layers write. */
static bool s_f32_mode(kl_mgraph_t *g)
{
    const char *e = getenv("KILN_LAYOUT_F32");
    if (e && (!strcmp(e, "NHWC") || !strcmp(e, "NCHW")))
        return !strcmp(e, "NHWC");
    bool dw = false;
    for (int i = 0; i < g->n && !dw; i++)
        dw =
            g->nodes[i].op == KL_MOP_DEPTHWISE && s_nhwc_float(g, &g->nodes[i]);
    if (!dw)
        return false;
    s_plan(g, true);
    int64_t written = 0;
    for (int i = 0; i < g->n; i++)
        if (s_nhwc_float(g, &g->nodes[i]))
            written += s_numel(&g->nodes[i]);
    return 8 * kl_mgraph_layout_converted(g) <= written;
}

void kl_mgraph_layout(kl_mgraph_t *g)
{
    if (getenv("KILN_LAYOUT_NCHW")) {
        for (int i = 0; i < g->n; i++)
            g->nodes[i].nhwc = false;
        return;
    }
    s_plan(g, s_f32_mode(g));
}
