/* export_general.c - the calls of kiln_model.c for the general layers
 * (export_int.h; kl_mop_is_general but const, which is a parameter, and
 * an add of two shapes that broadcast): each layer's shapes reduced at
 * export to what its helper (export_text_general.c) loops over, the
 * helper called on NCHW values, or on NHWC ones (a squeeze-excite's
 * layers with f32 values NHWC, kl_model_layout.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_util.h"

static int64_t s_prod(const int64_t *d, int from, int to)
{
    int64_t n = 1;
    for (int k = from; k < to; k++)
        n *= d[k];
    return n;
}

/* The output of nd broadcast from the nk operands ops, simplified for
 * s_piece: the output's dims of size 1 dropped, and each pair of
 * neighbours that every operand reads alike (a stride is the next one's
 * times its size: both contiguous, or both broadcast) merged. sh gets the
 * dims, st[k * n + d] operand k's stride in dim d (0 along a dim it
 * broadcasts); returns n >= 1. */
static int s_bdims(const kl_mnode_t *nd, int nk, const kl_mnode_t *const *ops,
                   long long *sh, long long *st)
{
    long long s[3][KL_MODEL_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < nd->ndim; d++) {
        if (nd->shape[d] == 1)
            continue;
        sh[n] = nd->shape[d];
        bool merge = n > 0;
        for (int k = 0; k < nk; k++) {
            const kl_mnode_t *x = ops[k];
            int xd = d - (nd->ndim - x->ndim);
            s[k][n] = xd < 0 || x->shape[xd] == 1
                          ? 0
                          : s_prod(x->shape, xd + 1, x->ndim);
            merge = merge && s[k][n - 1] == s[k][n] * sh[n];
        }
        if (!merge) {
            n++;
            continue;
        }
        sh[n - 1] *= sh[n];
        for (int k = 0; k < nk; k++)
            s[k][n - 1] = s[k][n];
    }
    if (n == 0) { /* one element */
        sh[n] = 1;
        for (int k = 0; k < nk; k++)
            s[k][n] = 0;
        n = 1;
    }
    for (int k = 0; k < nk; k++)
        for (int d = 0; d < n; d++)
            st[k * n + d] = s[k][d];
    return n;
}

static void s_list(kl_buf_t *b, const char *name, const long long *v, int n)
{
    kl_buf_printf(b, "%s[] = {", name);
    for (int k = 0; k < n; k++)
        kl_buf_printf(b, "%s%lld", k ? ", " : "", v[k]);
    kl_buf_puts(b, n ? "}" : "0}");
}

/* add (broadcast), the binary ops, where, expand. */
static void s_bcast(kl_buf_t *b, const kl_mnode_t *nd,
                    const kl_mnode_t *const *ops, const char *const *in,
                    const char *out)
{
    long long sh[KL_MODEL_MAX_DIMS], st[3 * KL_MODEL_MAX_DIMS];
    int n = s_bdims(nd, nd->nin, ops, sh, st);
    kl_buf_puts(b, "        static const long long ");
    s_list(b, "sh", sh, n);
    kl_buf_puts(b, ", ");
    s_list(b, "st", st, n * nd->nin);
    kl_buf_puts(b, ";\n");
    if (nd->op == KL_MOP_EXPAND)
        kl_buf_printf(b, "        s_expand(%s, %s, %d, sh, st);\n", in[0], out,
                      n);
    else if (nd->op == KL_MOP_WHERE)
        kl_buf_printf(b, "        s_where(%s, %s, %s, %s, %d, sh, st);\n",
                      in[0], in[1], in[2], out, n);
    else
        kl_buf_printf(b, "        s_ew_%s(%s, %s, %s, %d, sh, st);\n",
                      kl_mop_name(nd->op), in[0], in[1], out, n);
}

/* reduce_mean, reduce_sum: x's dims of size 1 dropped, neighbours that
 * are both kept or both reduced merged; the last one apart, the others
 * listed as (size, stride) pairs, kept and reduced. */
static void s_reduce(kl_buf_t *b, const kl_mnode_t *nd, const kl_mnode_t *x,
                     const char *in, const char *out)
{
    long long sz[KL_MODEL_MAX_DIMS], kd[2 * KL_MODEL_MAX_DIMS],
        rd[2 * KL_MODEL_MAX_DIMS];
    bool red[KL_MODEL_MAX_DIMS];
    int n = 0, nk = 0, nr = 0;
    int64_t count = 1;
    for (int d = 0; d < x->ndim; d++) {
        bool r = nd->axes & 1u << d;
        count *= r ? x->shape[d] : 1;
        if (x->shape[d] == 1)
            continue;
        if (n > 0 && red[n - 1] == r) {
            sz[n - 1] *= x->shape[d];
            continue;
        }
        sz[n] = x->shape[d];
        red[n++] = r;
    }
    long long L = n ? sz[n - 1] : 1, stride = L;
    bool lastred = n && red[n - 1];
    for (int d = n - 2; d >= 0; d--) {
        long long *p = red[d] ? &rd[2 * nr++] : &kd[2 * nk++];
        p[0] = sz[d];
        p[1] = stride;
        stride *= sz[d];
    }
    /* listed innermost first: reverse to outermost first */
    for (int k = 0; k < nk / 2; k++)
        for (int e = 0; e < 2; e++) {
            long long t = kd[2 * k + e];
            kd[2 * k + e] = kd[2 * (nk - 1 - k) + e];
            kd[2 * (nk - 1 - k) + e] = t;
        }
    for (int k = 0; k < nr / 2; k++)
        for (int e = 0; e < 2; e++) {
            long long t = rd[2 * k + e];
            rd[2 * k + e] = rd[2 * (nr - 1 - k) + e];
            rd[2 * (nr - 1 - k) + e] = t;
        }
    kl_buf_puts(b, "        static const long long ");
    s_list(b, "kd", kd, 2 * nk);
    kl_buf_puts(b, ", ");
    s_list(b, "rd", rd, 2 * nr);
    kl_buf_printf(b,
                  ";\n        s_reduce(%s, %s, %lldLL, %d, %d, kd, %d, rd, "
                  "%.17g);\n",
                  in, out, L, lastred ? 1 : 0, nk, nr,
                  nd->op == KL_MOP_REDUCE_MEAN ? 1.0 / (double)count : 1.0);
}

/* slice, gather: x as [outer, dim, inner] around the axis. */
static void s_take(kl_buf_t *b, const kl_mnode_t *nd, const kl_mnode_t *x,
                   const char *in, const char *out)
{
    int a = (int)nd->axis;
    long long outer = s_prod(x->shape, 0, a),
              inner = s_prod(x->shape, a + 1, x->ndim);
    const char *ix = "0";
    if (nd->op == KL_MOP_GATHER) {
        long long v[KL_MODEL_MAX_GATHER];
        for (int k = 0; k < nd->nidx; k++)
            v[k] = nd->idx[k];
        kl_buf_puts(b, "        static const long long ");
        s_list(b, "ix", v, nd->nidx);
        kl_buf_puts(b, ";\n");
        ix = "ix";
    }
    kl_buf_printf(b,
                  "        s_take(%s, %s, %lldLL, %lldLL, %lldLL, %lldLL, "
                  "%lldLL, %lldLL, %s);\n",
                  in, out, outer, (long long)x->shape[a], inner,
                  (long long)nd->shape[a], (long long)nd->start,
                  (long long)(nd->op == KL_MOP_SLICE ? nd->step : 1), ix);
}

/* A node as the NHWC values it is stored in: a 4-D shape as [N,H,W,C],
 * and (a reduction's, of its 4-D input) the reduced axes likewise. */
static void s_nhwc(kl_mnode_t *nd)
{
    static const int from[4] = {0, 2, 3, 1};
    int64_t sh[4];
    unsigned axes = 0;
    for (int d = 0; d < 4; d++) {
        sh[d] = nd->shape[from[d]];
        axes |= (nd->axes >> from[d] & 1u) << d;
    }
    if (nd->ndim == 4)
        memcpy(nd->shape, sh, sizeof sh);
    nd->axes = axes;
}

char *kl_export__general_call(const kl_mgraph_t *g, int i,
                              const char *const *in, const char *out)
{
    const kl_mnode_t *nd = &g->nodes[i];
    /* A layer that computes NHWC (kl_model_layout.c: a squeeze-excite's
     * pool, reduction or scale) runs on [N,H,W,C] shapes: its 4-D
     * operands' values are NHWC, or of a layout that does not matter
     * ([N,C,1,1]: the same memory as [N,1,1,C]). A global average pool is
     * a reduce_mean over H and W. */
    kl_mnode_t me = *nd, ops[3];
    const kl_mnode_t *opp[3];
    if (nd->op == KL_MOP_GLOBAL_AVG_POOL) {
        me.op = KL_MOP_REDUCE_MEAN;
        me.axes = 1u << 2 | 1u << 3;
    }
    if (nd->nhwc)
        s_nhwc(&me);
    for (int k = 0; k < nd->nin && k < 3; k++) {
        ops[k] = g->nodes[nd->in[k]];
        if (nd->nhwc)
            s_nhwc(&ops[k]);
        opp[k] = &ops[k];
    }
    const kl_mnode_t *x = nd->nin ? opp[0] : NULL;
    kl_buf_t b = {0};
    kl_buf_printf(&b, "    { /* %s: %s%s */\n", nd->name, kl_mop_name(nd->op),
                  nd->op == KL_MOP_ADD ? " (broadcast)" : "");
    if (nd->op == KL_MOP_ADD || nd->op == KL_MOP_WHERE ||
        nd->op == KL_MOP_EXPAND || kl_mop_is_binary(nd->op)) {
        s_bcast(&b, &me, opp, in, out);
    } else if (kl_mop_is_unary(nd->op)) {
        kl_buf_printf(&b, "        s_ew_%s(%s, %s, %lldLL);\n",
                      kl_mop_name(nd->op), in[0], out,
                      (long long)s_prod(nd->shape, 0, nd->ndim));
    } else if (nd->op == KL_MOP_CONCAT) {
        const kl_mnode_t *y = &g->nodes[nd->in[1]];
        int a = (int)nd->axis;
        kl_buf_printf(&b,
                      "        s_concat(%s, %s, %s, %lldLL, %lldLL, "
                      "%lldLL);\n",
                      in[0], in[1], out, (long long)s_prod(nd->shape, 0, a),
                      (long long)s_prod(x->shape, a, x->ndim),
                      (long long)s_prod(y->shape, a, y->ndim));
    } else if (nd->op == KL_MOP_SLICE || nd->op == KL_MOP_GATHER) {
        s_take(&b, nd, x, in[0], out);
    } else if (me.op == KL_MOP_REDUCE_MEAN || me.op == KL_MOP_REDUCE_SUM) {
        s_reduce(&b, &me, x, in[0], out);
    }
    kl_buf_puts(&b, "    }\n");
    return kl_buf_take(&b);
}

bool kl_export__general_used(const kl_mgraph_t *g)
{
    for (int i = 0; i < g->n; i++) {
        const kl_mnode_t *nd = &g->nodes[i];
        if ((kl_mop_is_general(nd->op) && nd->op != KL_MOP_CONST) ||
            (nd->op == KL_MOP_ADD && nd->bcast) ||
            (nd->op == KL_MOP_GLOBAL_AVG_POOL && nd->nhwc) ||
            (nd->op == KL_MOP_GELU && nd->gelu_tanh))
            return true;
    }
    return false;
}
