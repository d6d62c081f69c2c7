/* kl_ir_dw.c - recognising a float depthwise convolution (kl_dw.h). */
#include <string.h>

#include "kl_dw.h"
#include "kl_err.h"

#define NO(...) kl_seterr(err, KL_ERR_UNSUPPORTED, "depthwise: " __VA_ARGS__)

/* f is coef_a * a + coef_b * b + offset (b may be -1: absent), nothing
 * else, no division. */
static bool s_form(const kl_workload_t *w, const kl_affine_t *f, int a, int b)
{
    if (f->div != 1)
        return false;
    for (int i = 0; i < w->niters; i++)
        if (f->coef[i] && i != a && i != b)
            return false;
    return f->coef[a] > 0 && (b < 0 || f->coef[b] > 0);
}

int kl_workload_depthwise(const kl_workload_t *w, kl_dw_t *info, char *err)
{
    kl_dw_t z;
    memset(&z, 0, sizeof z);
    z.y = kl_workload_output(w);
    if (strcmp(w->op_kind, "depthwise_conv2d"))
        return NO("op %s is not depthwise_conv2d", w->op_kind);
    for (int t = 0; t < w->ntensors; t++)
        if (w->tensors[t].dtype != KL_DT_F32)
            return NO("tensor %s is not f32", w->tensors[t].name);
    const kl_expr_t *b = w->body;
    if (w->reduce != KL_RED_SUM || !b || b->kind != KL_EX_MUL ||
        b->a->kind != KL_EX_LOAD || b->b->kind != KL_EX_LOAD ||
        w->niters != 6 || w->tensors[z.y].ndim != 4)
        return NO("a channel multiplier above 1, or not a sum of products "
                  "over a 4-D output");
    for (int d = 0; d < 4; d++) {
        z.it[d] = -1;
        for (int i = 0; i < w->niters; i++)
            if (w->out.idx[d].coef[i])
                z.it[d] = i;
        if (z.it[d] < 0 || !s_form(w, &w->out.idx[d], z.it[d], -1) ||
            w->out.idx[d].coef[z.it[d]] != 1 || w->out.idx[d].offset)
            return NO("output index %d is not one iterator", d);
    }
    const kl_access_t *xa = &b->a->access, *wa = &b->b->access;
    z.x = xa->tensor;
    z.wt = wa->tensor;
    const kl_tensor_t *X = &w->tensors[z.x], *W = &w->tensors[z.wt];
    if (X->ndim != 4 || W->ndim != 4 || !W->is_const)
        return NO("X or W is not 4-D, or W is not const");
    /* W[c,0,r,s]: its last two indices name the window's iterators. */
    z.it[4] = z.it[5] = -1;
    for (int i = 0; i < w->niters; i++) {
        if (wa->idx[2].coef[i])
            z.it[4] = i;
        if (wa->idx[3].coef[i])
            z.it[5] = i;
    }
    if (z.it[4] < 0 || z.it[5] < 0 || !s_form(w, &wa->idx[0], z.it[1], -1) ||
        !s_form(w, &wa->idx[2], z.it[4], -1) ||
        !s_form(w, &wa->idx[3], z.it[5], -1) || wa->idx[0].offset ||
        wa->idx[2].offset || wa->idx[3].offset || wa->idx[1].offset ||
        wa->idx[0].coef[z.it[1]] != 1 || wa->idx[2].coef[z.it[4]] != 1 ||
        wa->idx[3].coef[z.it[5]] != 1 || W->shape[1] != 1)
        return NO("weights not read as W[c,0,r,s]");
    for (int i = 0; i < w->niters; i++)
        if (wa->idx[1].coef[i])
            return NO("weights not read as W[c,0,r,s]");
    if (!s_form(w, &xa->idx[0], z.it[0], -1) ||
        !s_form(w, &xa->idx[1], z.it[1], -1) || xa->idx[0].offset ||
        xa->idx[1].offset || xa->idx[0].coef[z.it[0]] != 1 ||
        xa->idx[1].coef[z.it[1]] != 1 ||
        !s_form(w, &xa->idx[2], z.it[2], z.it[4]) ||
        !s_form(w, &xa->idx[3], z.it[3], z.it[5]) || xa->idx[2].offset > 0 ||
        xa->idx[3].offset > 0)
        return NO("input not read as X[n,c,y*sh+r*dh-ph,x*sw+s*dw-pw]");
    z.n = w->iters[z.it[0]].extent;
    z.c = w->iters[z.it[1]].extent;
    z.p = w->iters[z.it[2]].extent;
    z.q = w->iters[z.it[3]].extent;
    z.r = w->iters[z.it[4]].extent;
    z.s = w->iters[z.it[5]].extent;
    z.h = X->shape[2];
    z.w = X->shape[3];
    z.sh = xa->idx[2].coef[z.it[2]];
    z.dh = xa->idx[2].coef[z.it[4]];
    z.ph = -xa->idx[2].offset;
    z.sw = xa->idx[3].coef[z.it[3]];
    z.dw = xa->idx[3].coef[z.it[5]];
    z.pw = -xa->idx[3].offset;
    if (X->shape[0] != z.n || X->shape[1] != z.c || W->shape[0] != z.c)
        return NO("X or W does not match the iterators");
    if (info)
        *info = z;
    return KL_OK;
}
