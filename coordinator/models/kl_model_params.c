/* kl_model_params.c - the parameters each layer needs (their sizes, and
 * the check that an import's parameters are exactly those), finding and
 * freeing them. See kl_model.h, "the model's own parameters". */
#include "kl_model_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"

/* The values layer nd's weight and bias need (0: it has none); a q-op's
 * are s8 and s32, and a per-channel q-op has a scale (f32, one a
 * channel: its bias's count). */
void kl_model_param_sizes(const kl_mgraph_t *g, const kl_mnode_t *nd,
                          int64_t *w, int64_t *b)
{
    const kl_mnode_t *x = nd->nin ? &g->nodes[nd->in[0]] : NULL;
    int64_t last = x && x->ndim ? x->shape[x->ndim - 1] : 0;
    *w = *b = 0;
    switch (kl_mop_base(nd->op)) {
    case KL_MOP_CONV2D:
        *w = nd->K * (x->shape[1] / nd->groups) * nd->R * nd->S;
        *b = nd->K;
        break;
    case KL_MOP_DEPTHWISE:
        *w = x->shape[1] * nd->mult * nd->R * nd->S;
        *b = x->shape[1] * nd->mult;
        break;
    case KL_MOP_DENSE:
        *w = nd->O * last;
        *b = nd->O;
        break;
    case KL_MOP_MATMUL:
        *w = nd->nin == 1 ? last * nd->N : 0;
        *b = nd->nin == 1 ? nd->N : 0;
        break;
    case KL_MOP_LAYER_NORM:
        *w = *b = nd->affine ? last : 0;
        return;
    case KL_MOP_CONST: /* its values */
        *w = 1;
        for (int k = 0; k < nd->ndim; k++)
            *w *= nd->shape[k];
        return;
    default:
        return;
    }
    if (!nd->bias)
        *b = 0;
}

/* Every parameter the graph's layers need is in ps with its size, and
 * nothing else: the import's text and parameters agree. */
int kl_model_params_check(const char *text, const char *src,
                          const kl_model_params_t *ps, char *err)
{
    kl_mgraph_t g;
    int rc = kl_mgraph_parse(text, src, &g, err), n = 0;
    for (int i = 0; !rc && i < g.n; i++) {
        const kl_mnode_t *nd = &g.nodes[i];
        int64_t want[3];
        bool q = kl_mop_is_q(nd->op);
        kl_model_param_sizes(&g, nd, &want[0], &want[1]);
        want[2] = q && nd->qout != KL_DT_S32 && nd->per_channel
                      ? (nd->op == KL_MOP_QDENSE || nd->op == KL_MOP_QMATMUL
                             ? nd->shape[nd->ndim - 1]
                             : nd->shape[1])
                      : 0;
        static const char *const what[] = {"weight", "bias", "scale"};
        const kl_dtype types[] = {q ? KL_DT_S8 : KL_DT_F32,
                                  q ? KL_DT_S32 : KL_DT_F32, KL_DT_F32};
        for (int k = 0; k < 3 && !rc; k++) {
            if (!want[k])
                continue;
            char name[KL_MODEL_MAX_NAME + 8];
            snprintf(name, sizeof name, "%s.%s", nd->name, what[k]);
            const kl_model_param_t *p = kl_model_params_find(ps, name);
            n++;
            if (!p || p->numel != want[k] || p->dtype != types[k])
                rc = kl_seterr(err, KL_ERR_INTERNAL,
                               "%s: layer '%s' needs %lld %s values in "
                               "'%s', the import gave %lld %s",
                               src, nd->name, (long long)want[k],
                               kl_dtype_name(types[k]), name,
                               p ? (long long)p->numel : 0LL,
                               p ? kl_dtype_name(p->dtype) : "");
        }
    }
    if (!rc && n != ps->n)
        rc = kl_seterr(err, KL_ERR_INTERNAL,
                       "%s: the import gave %d parameters, the layers need "
                       "%d",
                       src, ps->n, n);
    kl_mgraph_free(&g); /* zeroed by a failed parse */
    return rc;
}

const kl_model_param_t *kl_model_params_find(const kl_model_params_t *ps,
                                             const char *name)
{
    for (int i = 0; ps && i < ps->n; i++)
        if (strcmp(ps->p[i].name, name) == 0)
            return &ps->p[i];
    return NULL;
}

void kl_model_params_free(kl_model_params_t *ps)
{
    for (int i = 0; ps && i < ps->n; i++) {
        free(ps->p[i].name);
        free(ps->p[i].data);
        free(ps->p[i].idata);
    }
    if (ps) {
        free(ps->p);
        memset(ps, 0, sizeof *ps);
    }
}
