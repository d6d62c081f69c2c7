/* kl_model_qgroups.c - the integer shortcut groups of a quantized graph
 * (kl_mgraph_qfuse_plan, kl_model_int.h).
 *
 * A QDQ model leaves the integer domain around the layers kiln has no
 * integer form of: a residual add is `dequantize a`, `dequantize b`,
 * `add`, `quantize`, and a max pool `dequantize`, `max_pool2d`,
 * `quantize`. kiln export writes each such group as one loop over the
 * codes (coordinator/export/export_qfuse.c), bit-equal to the layers, so
 * the group's add or pool runs no task: extraction leaves them out (they
 * are not tuned) and the layout pass lets a code max pool follow its
 * input. */
#include <stdlib.h>

#include "kl_model_int.h"

int kl_mgraph_sole_reader(const kl_mgraph_t *g, int i)
{
    if (g->nodes[i].uses != 1)
        return -1;
    for (int o = 0; o < g->nout; o++)
        if (g->outputs[o] == i)
            return -1;
    for (int j = i + 1; j < g->n; j++)
        for (int k = 0; k < g->nodes[j].nin; k++)
            if (g->nodes[j].in[k] == i)
                return j;
    return -1;
}

bool kl_mgraph_code_deq(const kl_mgraph_t *g, int i)
{
    const kl_mnode_t *d = &g->nodes[i];
    if (d->op != KL_MOP_DEQUANTIZE || d->fused)
        return false;
    kl_dtype t = g->nodes[d->in[0]].dt;
    return t == KL_DT_U8 || t == KL_DT_S8;
}

int kl_mgraph_code_pool(const kl_mgraph_t *g, int i)
{
    const kl_mnode_t *nd = &g->nodes[i];
    if (getenv("KILN_EXPORT_NO_QFUSE") || nd->op != KL_MOP_MAX_POOL ||
        nd->fused || !kl_mgraph_code_deq(g, nd->in[0]))
        return -1;
    /* max commutes with the monotone dequantize, and quantizing a
     * dequantized code with the same numbers gives it back (|code - zp|
     * <= 255: k * s / s is within 2^-22 k of k). */
    const kl_mnode_t *d = &g->nodes[nd->in[0]];
    int q = kl_mgraph_sole_reader(g, i);
    if (q < 0 || g->nodes[q].op != KL_MOP_QUANTIZE || g->nodes[q].fused)
        return -1;
    const kl_mnode_t *qn = &g->nodes[q];
    if ((float)qn->scale != (float)d->scale || qn->zo != d->zo ||
        qn->qout != g->nodes[d->in[0]].dt || !((float)d->scale > 0))
        return -1;
    return q;
}

/* The quantize that alone reads node i (into u8 / s8), or -1. */
static int s_quant_after(const kl_mgraph_t *g, int i)
{
    int q = kl_mgraph_sole_reader(g, i);
    if (q < 0 || g->nodes[q].op != KL_MOP_QUANTIZE || g->nodes[q].fused)
        return -1;
    kl_dtype t = g->nodes[q].qout;
    return t == KL_DT_U8 || t == KL_DT_S8 ? q : -1;
}

int kl_mgraph_qfuse_plan(const kl_mgraph_t *g, kl_qfuse_t *plan)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        plan[i] = (kl_qfuse_t){.kind = KL_QF_NONE, .q = -1};
    if (getenv("KILN_EXPORT_NO_QFUSE"))
        return 0;
    for (int i = 0; i < g->n; i++) {
        const kl_mnode_t *nd = &g->nodes[i];
        if (nd->fused || nd->res || nd->clip || nd->relu || nd->smooth)
            continue;
        if (nd->op == KL_MOP_ADD && nd->nin == 2 && !nd->bcast &&
            kl_mgraph_code_deq(g, nd->in[0]) &&
            kl_mgraph_code_deq(g, nd->in[1])) {
            int q = s_quant_after(g, i);
            if (q < 0)
                continue;
            plan[i] = (kl_qfuse_t){.kind = KL_QF_ADD, .q = q};
            plan[q].kind = KL_QF_SKIP;
            for (int k = 0; k < 2; k++)
                if (nd->in[0] != nd->in[1] &&
                    kl_mgraph_sole_reader(g, nd->in[k]) == i)
                    plan[nd->in[k]].kind = KL_QF_SKIP;
            n++;
        } else if (nd->op == KL_MOP_MAX_POOL) {
            int q = kl_mgraph_code_pool(g, i);
            if (q < 0)
                continue;
            plan[i] = (kl_qfuse_t){.kind = KL_QF_MAXPOOL, .q = q};
            plan[q].kind = KL_QF_SKIP;
            if (kl_mgraph_sole_reader(g, nd->in[0]) == i)
                plan[nd->in[0]].kind = KL_QF_SKIP;
            n++;
        }
    }
    return n;
}
