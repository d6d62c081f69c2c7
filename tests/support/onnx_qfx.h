/* onnx_qfx.h - what the tests of the quantized ONNX import share
 * (onnx_qop_test.c, onnx_qres_test.c): the graph text and parameters of a
 * committed model, and the imported graph evaluated layer by layer (every
 * layer with a workload by kl_workload_eval_typed, the q-ops with the
 * imported parameters; quantize, dequantize, relu and flatten as ONNX
 * defines them), to compare with ONNX Runtime's outputs. */
#ifndef ONNX_QFX_H
#define ONNX_QFX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_model.h"
#include "kl_model_int.h"
#include "kl_npy.h"
#include "kl_util.h"

#define S_DIR KL_TEST_DATA "/onnx/"

static inline void s_has_lines(const char *text, const char *const *want,
                               size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strstr(text, want[i]))
            fail_msg("graph text\n%s\nlacks '%s'", text, want[i]);
}

/* The graph text of model path, and its parameters. */
static inline char *s_import(const char *path, kl_model_params_t *ps)
{
    char err[KL_ERRMSG_LEN], *text = NULL;
    if (kl_model_text_params(path, &text, ps, err))
        fail_msg("%s", err);
    return text;
}

/* Runs layer nd of g (a workload) on the outputs buf of its inputs and
 * the parameters ps of a q-op, into out. */
static inline void s_run_workload(const kl_mgraph_t *g, const kl_mnode_t *nd,
                                  const kl_model_params_t *ps, void **buf,
                                  void *out)
{
    char err[KL_ERRMSG_LEN];
    char *spec = kl_mgraph_spec(g, nd);
    if (!spec)
        fail_msg("layer '%s': op %s has no workload", nd->name,
                 kl_mop_name(nd->op));
    kl_workload_t *w = NULL;
    if (kl_workload_from_op(spec, &w, err))
        fail_msg("%s: %s", spec, err);
    void *args[8];
    int na = 0;
    for (int k = 0; k < nd->nin; k++)
        args[na++] = buf[nd->in[k]];
    static const char *const what[3] = {"weight", "bias", "scale"};
    for (int k = 0; kl_mop_is_q(nd->op) && k < 3; k++) {
        char pn[128];
        snprintf(pn, sizeof pn, "%s.%s", nd->name, what[k]);
        const kl_model_param_t *p = kl_model_params_find(ps, pn);
        if (k == 0)
            assert_non_null(p);
        if (p)
            args[na++] = p->dtype == KL_DT_F32 ? (void *)p->data : p->idata;
    }
    args[na++] = out;
    kl_workload_eval_typed(w, args);
    kl_workload_free(&w);
    free(spec);
}

/* Runs graph text with parameters ps on input x (f32); buf[i] is node i's
 * output in its type (f32, u8 or s32). The caller frees with s_free. */
static inline void **s_run(const char *text, const kl_model_params_t *ps,
                           const float *x, kl_mgraph_t *g)
{
    char err[KL_ERRMSG_LEN];
    if (kl_mgraph_parse(text, "onnx_q", g, err))
        fail_msg("%s", err);
    void **buf = kl_xcalloc((size_t)g->n, sizeof(void *));
    for (int i = 0; i < g->n; i++) {
        kl_mnode_t *nd = &g->nodes[i];
        int64_t n = 1;
        for (int d = 0; d < nd->ndim; d++)
            n *= nd->shape[d];
        const void *in = nd->nin ? buf[nd->in[0]] : NULL;
        const kl_mnode_t *xn = nd->nin ? &g->nodes[nd->in[0]] : NULL;
        float s = (float)nd->scale;
        void *out = kl_xcalloc((size_t)n, 4);
        float *f = out;
        uint8_t *u = out;
        switch (nd->op) {
        case KL_MOP_INPUT:
            memcpy(f, x, (size_t)n * sizeof(float));
            break;
        case KL_MOP_QUANTIZE: /* x / s rounded half to even + zp, u8 */
            assert_int_equal(nd->qout, KL_DT_U8);
            for (int64_t k = 0; k < n; k++) {
                float v =
                    nearbyintf(((const float *)in)[k] / s) + (float)nd->zo;
                u[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
            break;
        case KL_MOP_DEQUANTIZE: /* (q - zp) * s; an s32 input has no zp */
            assert_true(xn->dt == KL_DT_U8 || xn->dt == KL_DT_S32);
            for (int64_t k = 0; k < n; k++)
                f[k] =
                    xn->dt == KL_DT_S32
                        ? (float)((const int32_t *)in)[k] * s
                        : (float)((int)((const uint8_t *)in)[k] - (int)nd->zo) *
                              s;
            break;
        case KL_MOP_RELU:
            for (int64_t k = 0; k < n; k++)
                f[k] = fmaxf(((const float *)in)[k], 0.0f);
            break;
        case KL_MOP_FLATTEN:
            memcpy(out, in, (size_t)n * (xn->dt == KL_DT_U8 ? 1 : 4));
            break;
        default:
            s_run_workload(g, nd, ps, buf, out);
        }
        buf[i] = out;
    }
    return buf;
}

static inline void s_free(void **buf, kl_mgraph_t *g)
{
    for (int i = 0; i < g->n; i++)
        free(buf[i]);
    free(buf);
    kl_mgraph_free(g);
}

/* The index of layer name in g. */
static inline int s_node(const kl_mgraph_t *g, const char *name)
{
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name))
            return i;
    fail_msg("no layer '%s'", name);
    return -1;
}

/* Reads S_DIR/name (f32) with numel n, whatever its shape. */
static inline kl_npy_t s_npy(const char *name, int64_t n)
{
    char path[512], err[KL_ERRMSG_LEN];
    kl_npy_t t;
    snprintf(path, sizeof path, S_DIR "%s", name);
    if (kl_npy_read(path, &n, 1, &t, err))
        fail_msg("%s", err);
    return t;
}

#endif
