/* kl_model_onnx_act.c - ONNX import of the activation family: Sigmoid,
 * Tanh, HardSigmoid (alpha, beta), HardSwish, LeakyRelu (alpha), Elu
 * (alpha) as kiln's elementwise layers of the same names, and SiLU as
 * PyTorch exports it, x * Sigmoid(x) (a Sigmoid whose output only that
 * Mul reads, the Mul's other input the Sigmoid's), as one silu layer.
 * The attributes are written into the layer line, ONNX's defaults when
 * the node has none (%.9g reads back as the same float). */
#include "kl_model_onnx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* The Mul that makes nd's output x * sigmoid(x), or NULL (*idx its
 * node). */
static const kl_onnx__node_t *s_silu_mul(const kl_onnx__ctx_t *c,
                                         const kl_onnx__node_t *nd, int *idx)
{
    *idx = nd->n_output && nd->n_input ? kl_onnx__reader(c, nd->output[0]) : -1;
    const kl_onnx__node_t *m = *idx >= 0 ? c->g->node[*idx] : NULL;
    if (!m || !kl_onnx__is(m, "Mul") || m->n_input != 2 ||
        (m->domain && *m->domain && strcmp(m->domain, "ai.onnx")))
        return NULL;
    const char *o = kl_onnx__other(m, nd->output[0]);
    return o && !strcmp(o, nd->input[0]) ? m : NULL;
}

static int s_sigmoid(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    int im;
    const kl_onnx__node_t *m = s_silu_mul(c, nd, &im);
    if (!m)
        return kl_onnx__simple(c, nd, "sigmoid");
    int rc = KL_OK;
    const char *xk = kl_onnx__in(c, nd, 0, &rc);
    if (!xk)
        return rc;
    kl_onnx__line_t *l = kl_onnx__line(c, m, "silu");
    kl_buf_puts(&l->args, xk);
    free(l->in0);
    l->in0 = kl_xstrdup(nd->input[0]);
    c->skip[im] = true;
    return KL_OK;
}

/* op with alpha (and beta when has_beta) from nd, defaults da, db. */
static int s_alpha(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd, const char *op,
                   float da, bool has_beta, float db)
{
    int rc = kl_onnx__simple(c, nd, op);
    if (rc)
        return rc;
    kl_buf_t *a = &c->lines[c->nlines - 1].args;
    kl_buf_printf(a, " alpha=%.9g", (double)kl_onnx__afloat(nd, "alpha", da));
    if (has_beta)
        kl_buf_printf(a, " beta=%.9g", (double)kl_onnx__afloat(nd, "beta", db));
    return KL_OK;
}

static int s_tanh(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return kl_onnx__simple(c, nd, "tanh");
}

static int s_hard_swish(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return kl_onnx__simple(c, nd, "hard_swish");
}

static int s_hard_sigmoid(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return s_alpha(c, nd, "hard_sigmoid", 0.2f, true, 0.5f);
}

static int s_leaky_relu(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return s_alpha(c, nd, "leaky_relu", 0.01f, false, 0);
}

static int s_elu(kl_onnx__ctx_t *c, const kl_onnx__node_t *nd)
{
    return s_alpha(c, nd, "elu", 1.0f, false, 0);
}

const kl_onnx__op_t kl_onnx__act_ops[] = {
    {"Sigmoid", s_sigmoid, 0},
    {"Tanh", s_tanh, 0},
    {"HardSigmoid", s_hard_sigmoid, 0},
    {"HardSwish", s_hard_swish, 0},
    {"LeakyRelu", s_leaky_relu, 0},
    {"Elu", s_elu, 0},
    {NULL, NULL, 0},
};
