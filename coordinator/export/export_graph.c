/* export_graph.c - the layer graph of an exported model as C (kiln_model.c
 * and kiln_model.h), written with the tasks' sources and the weights, then
 * built into libkiln_model.so (export_cc.c).
 *
 * The graph is parsed again from the model's text and fused with the rules
 * of kl_model.c (kl_model.h, "Extraction"), so that every computing layer
 * maps to the task of its workload key; a layer whose key is not one of
 * the model's tasks is an internal error, never a silent guess. */
#include "kl_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_abi.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_util.h"

/* ---- code of the graph ---- */

static int64_t s_numel(const kl_mnode_t *nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd->ndim; i++)
        n *= nd->shape[i];
    return n;
}

/* A layer that runs code of its own (kiln_model.h, "Layers"). */
typedef struct {
    char name[KL_MODEL_MAX_NAME];
    int task; /* -1: no task */
} s_layer_t;

typedef struct {
    const kl_mgraph_t *g;
    const kl_model_t *m;
    const kl_kernel_t *kernels; /* [ntasks] */
    int *param;                 /* node -> its param index (inputs), -1 */
    bool *view; /* node -> a transpose that moves only dims of size 1 */
    kl_export__arena_t *arena; /* the intermediate values (b_I ...) */
    kl_buf_t run;              /* body of kiln_model_run */
    kl_buf_t prun;             /* body of kiln_model_run_profiled */
    kl_buf_t prep; /* body of s_prepare: one block per prepared layer */
    kl_export__param_t *params;
    int nparams, ninputs;
    s_layer_t *layers;
    int nlayers;
    int nprep;           /* layers whose kernel has a prepare step */
    bool qcasts;         /* quantize / dequantize layers: their helpers */
    kl_qfuse_t *qf;      /* [g->n]: integer shortcuts (kl_mgraph_qfuse_plan) */
    unsigned char *conv; /* [g->n]: copies made in NHWC (1), NCHW (2) */
    char oex[64];        /* the output's values, NCHW */
    bool trained;
    bool amx; /* a kernel uses AMX tiles: ask for their state (s_amx) */
    const char *src;
    const char *text; /* the graph text (transpose's perm=) */
} s_gen_t;

/* The C expression of node i's memory. */
static void s_bufexpr(const s_gen_t *c, int i, char *out, size_t n)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    if (nd->op == KL_MOP_INPUT || nd->op == KL_MOP_CONST)
        snprintf(out, n, "(float *)p[%d]", c->param[i]);
    else if (nd->fused)
        s_bufexpr(c, nd->owner, out, n);
    else if (nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE || c->view[i])
        s_bufexpr(c, nd->in[0], out, n);
    else
        snprintf(out, n, "b_%d", i);
}

static void s_emit(s_gen_t *c, const char *name, int task, const char *code);

/* Value PREFIX_I (b_I, or the layout copies bh_I, bn_I) of numel
 * elements of type dt, in the arena (export_arena.c). */
static void s_decl(s_gen_t *c, const char *prefix, int i, kl_dtype dt,
                   long long numel, const char *comment)
{
    char name[32];
    snprintf(name, sizeof name, "%s_%d", prefix, i);
    kl_export__arena_decl(c->arena, name, kl_dtype_ctype(dt),
                          numel * (long long)kl_dtype_size(dt), comment);
}

/* Node i's values as a reader that wants them NHWC (nhwc) or NCHW
 * reads them (kl_model_layout.c): i's own buffer when its layout is
 * that one or does not matter, else a copy in the other layout, made
 * (a layer of its own, "NAME.nhwc" / "NAME.nchw") before the first reader
 * that wants it. A view (flatten, reshape, a transpose moving dims of
 * size 1) reads its input NCHW. */
static void s_inexpr(s_gen_t *c, int i, bool nhwc, char *out, size_t n)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    char ex[64];
    bool have = false;
    if (nd->op != KL_MOP_INPUT && nd->fused) {
        s_inexpr(c, nd->owner, nhwc, out, n);
        return;
    }
    if (nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE || c->view[i]) {
        s_inexpr(c, nd->in[0], false, ex, sizeof ex);
    } else {
        s_bufexpr(c, i, ex, sizeof ex);
        have = nd->nhwc;
    }
    if (have == nhwc || !kl_mgraph_layout_matters(nd)) {
        snprintf(out, n, "%s", ex);
        return;
    }
    snprintf(out, n, "%s_%d", nhwc ? "bh" : "bn", i);
    if (c->conv[i] & (nhwc ? 1 : 2))
        return;
    c->conv[i] |= nhwc ? 1 : 2;
    char name[KL_MODEL_MAX_NAME + 8];
    snprintf(name, sizeof name, "%s.%s", nd->name, nhwc ? "nhwc" : "nchw");
    char what[KL_MODEL_MAX_NAME + 8];
    snprintf(what, sizeof what, "%s, %s", nd->name, nhwc ? "NHWC" : "NCHW");
    s_decl(c, nhwc ? "bh" : "bn", i, nd->dt, (long long)s_numel(nd), what);
    int e = nd->dt == KL_DT_U8 || nd->dt == KL_DT_S8 ? 1 : 4;
    char *code = kl_xasprintf(
        "    s_to_%s(%s, %s, %lldLL, %lldLL, %lldLL, %d); /* %s */\n",
        nhwc ? "nhwc" : "nchw", ex, out, (long long)nd->shape[0],
        (long long)nd->shape[1], (long long)(nd->shape[2] * nd->shape[3]), e,
        name);
    s_emit(c, name, -1, code);
    free(code);
}

/* A new parameter NAME.WHAT (an input when what is NULL) of the given
 * shape and element type; its index. */
static int s_new_param(s_gen_t *c, const char *name, const char *what, int ndim,
                       const int64_t *shape, kl_dtype dt)
{
    c->params =
        kl_xrealloc(c->params, (size_t)(c->nparams + 1) * sizeof *c->params);
    kl_export__param_t *p = &c->params[c->nparams];
    memset(p, 0, sizeof *p);
    p->dt = dt;
    p->name = what ? kl_xasprintf("%s.%s", name, what) : kl_xstrdup(name);
    p->input = !what;
    p->offset = -1;
    p->ndim = ndim < KL_IR_MAX_DIMS ? ndim : KL_IR_MAX_DIMS;
    p->numel = 1;
    for (int k = 0; k < ndim; k++) {
        p->numel *= shape[k];
        if (k < KL_IR_MAX_DIMS)
            p->shape[k] = shape[k];
    }
    c->ninputs += p->input;
    return c->nparams++;
}

/* Code of one layer, in kiln_model_run as it is and in
 * kiln_model_run_profiled between two readings of the clock. */
static void s_emit(s_gen_t *c, const char *name, int task, const char *code)
{
    kl_export__arena_use(c->arena, c->nlayers, code);
    kl_buf_puts(&c->run, code);
    kl_buf_printf(&c->prun,
                  "    t = s_now();\n%s    layer_s[%d] = s_now() - t;\n", code,
                  c->nlayers);
    c->layers =
        kl_xrealloc(c->layers, (size_t)(c->nlayers + 1) * sizeof *c->layers);
    snprintf(c->layers[c->nlayers].name, sizeof c->layers[0].name, "%s", name);
    c->layers[c->nlayers++].task = task;
}

/* A layer's tensors in ABI order, as C expressions. */
typedef struct {
    int n;
    char ex[KL_IR_MAX_TENSORS][64];
    bool param[KL_IR_MAX_TENSORS]; /* a parameter of the model (p[i]) */
} s_args_t;

static void s_push(s_args_t *a, const char *ex)
{
    if (a->n < KL_IR_MAX_TENSORS)
        snprintf(a->ex[a->n], sizeof a->ex[0], "%s", ex);
    a->n++;
}

static void s_push_param(s_gen_t *c, s_args_t *a, const kl_mnode_t *nd,
                         const char *what, const kl_workload_t *w)
{
    const kl_tensor_t *t = &w->tensors[a->n < KL_IR_MAX_TENSORS ? a->n : 0];
    /* a bf16 weight stays f32 in kiln_model.weights: its kernel reads
     * float * and converts it (in its prepare step) */
    kl_dtype dt = t->dtype == KL_DT_BF16 ? KL_DT_F32 : t->dtype;
    int pi = s_new_param(c, nd->name, what, t->ndim, t->shape, dt);
    /* an NHWC conv's weight: [R,S,C,K] from the model's [K,C,R,S] (a
     * depthwise one keeps [C,1,R,S]) */
    if (nd->nhwc && (nd->op == KL_MOP_QCONV2D || nd->op == KL_MOP_CONV2D) &&
        !strcmp(what, "weight") && t->ndim == 4) {
        kl_export__param_t *q = &c->params[pi];
        q->kcrs[0] = t->shape[3];
        q->kcrs[1] = t->shape[2];
        q->kcrs[2] = t->shape[0];
        q->kcrs[3] = t->shape[1];
    }
    char ex[64];
    snprintf(ex, sizeof ex, "p[%d]", pi);
    if (a->n < KL_IR_MAX_TENSORS)
        a->param[a->n] = true;
    s_push(a, ex);
}

/* The tensors of computing layer nd, whose workload is w. */
static void s_layer_args(s_gen_t *c, const kl_mnode_t *nd,
                         const kl_workload_t *w, s_args_t *a)
{
    char ex[64];
    s_inexpr(c, nd->in[0], nd->nhwc, ex, sizeof ex);
    s_push(a, ex);
    bool two = nd->nin == 2;
    bool weight = nd->op == KL_MOP_CONV2D || nd->op == KL_MOP_DEPTHWISE ||
                  nd->op == KL_MOP_DENSE || (nd->op == KL_MOP_MATMUL && !two);
    if (two) {
        s_inexpr(c, nd->in[1], nd->nhwc, ex, sizeof ex);
        s_push(a, ex);
    }
    if (weight && a->n < w->ntensors - 1)
        s_push_param(c, a, nd, "weight", w);
    /* A q-op's constants (kl_ir_ops.c): W, then bias and scale when it
     * has them, named after the workload's tensors. */
    while (kl_mop_is_q(nd->op) && a->n < w->ntensors - 1 &&
           a->n < KL_IR_MAX_TENSORS)
        s_push_param(c, a, nd, a->n == 1 ? "weight" : w->tensors[a->n].name, w);
    if (nd->bias && a->n < w->ntensors - 1)
        s_push_param(c, a, nd, "bias", w);
    if (nd->res) {
        s_inexpr(c, nd->res_from, nd->nhwc, ex, sizeof ex);
        s_push(a, ex);
    }
    s_bufexpr(c, (int)(nd - c->g->nodes), ex, sizeof ex);
    s_push(a, ex);
}

/* "(void *)x, ..." of a's expressions; with consts_only, 0 in place of
 * every tensor that is not constant (ENTRY_prepare's arguments). */
static void s_join(kl_buf_t *b, const s_args_t *a, const kl_workload_t *w,
                   bool consts_only)
{
    for (int k = 0; k < a->n; k++) {
        kl_buf_puts(b, k ? ", " : "");
        if (consts_only && !w->tensors[k].is_const)
            kl_buf_puts(b, "0");
        else
            kl_buf_printf(b, "(void *)%s", a->ex[k]);
    }
}

/* A layer whose kernel has a prepare step: its block in s_prepare, made
 * from its constant tensors, which must be parameters of the model (a
 * computed tensor changes between runs). */
static int s_prep_layer(s_gen_t *c, const kl_mnode_t *nd,
                        const kl_workload_t *w, int task, const s_args_t *a,
                        char *err)
{
    for (int k = 0; k < a->n; k++)
        if (w->tensors[k].is_const && !a->param[k])
            return kl_seterr(err, KL_ERR_INTERNAL,
                             "%s: layer '%s': constant tensor %s of %s is "
                             "not a parameter of the model",
                             c->src, nd->name, w->tensors[k].name, w->name);
    kl_buf_t k = {0};
    s_join(&k, a, w, true);
    kl_buf_printf(&c->prep,
                  "    { /* %s: %s */\n        void *k[] = {%s};\n"
                  "        if (s_prepared(&s_prep[%d], kiln_task_%02d"
                  "%s, k, %d))\n            return 1;\n    }\n",
                  nd->name, w->name, k.data, c->nprep, task,
                  KL_ABI_PREPARE_SUFFIX, a->n);
    kl_buf_free(&k);
    c->nprep++;
    return KL_OK;
}

/* One computing layer: its task's kernel with its tensors in ABI order,
 * and its prepared block after them when the kernel has a prepare step. */
static int s_task_call(s_gen_t *c, int i, char *err)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    char *spec = kl_mgraph_spec(c->g, nd);
    kl_workload_t *w = NULL;
    char e2[KL_ERRMSG_LEN];
    int rc = kl_workload_from_op(spec, &w, e2);
    free(spec);
    if (rc)
        return kl_seterr(err, rc, "%s: layer '%s': %s", c->src, nd->name, e2);
    int task = -1;
    for (int t = 0; t < kl_model_ntasks(c->m); t++)
        if (!memcmp(kl_model_task(c->m, t)->w->key, w->key, 16))
            task = t;
    s_args_t a = {0};
    s_layer_args(c, nd, w, &a);
    if (task < 0 || a.n != w->ntensors) {
        rc = kl_seterr(err, KL_ERR_INTERNAL,
                       "%s: layer '%s': %s (%d tensors, %d arguments made)",
                       c->src, nd->name,
                       task < 0 ? "its workload is none of the model's tasks"
                                : "argument count",
                       w->ntensors, a.n);
        kl_workload_free(&w);
        return rc;
    }
    bool prep = c->kernels[task].prepare;
    kl_buf_t l = {0};
    s_join(&l, &a, w, false);
    if (prep) {
        kl_buf_printf(&l, ", s_prep[%d].block", c->nprep);
        rc = s_prep_layer(c, nd, w, task, &a, err);
    }
    if (!rc) {
        char *code = kl_xasprintf("    { /* %s: %s */\n        void *a[] = "
                                  "{%s};\n        kiln_task_%02d(a);\n    }\n",
                                  nd->name, w->name, l.data, task);
        s_emit(c, nd->name, task, code);
        free(code);
    }
    kl_buf_free(&l);
    kl_workload_free(&w);
    return rc;
}

/* Layers without a task: softmax, layer_norm, gelu (s_gelu_tanh for
 * approximate=tanh), the activations (kl_mop_is_act: alpha and beta
 * after the sizes) over the last dim;
 * an affine layer_norm has parameters LAYER.weight and LAYER.bias of the
 * last dim. */
static void s_untuned_call(s_gen_t *c, int i)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    char in[64], out[64], ln[128] = "";
    s_inexpr(c, nd->in[0], false, in, sizeof in);
    s_bufexpr(c, i, out, sizeof out);
    long long cols = nd->shape[nd->ndim - 1];
    long long rows = s_numel(nd) / cols;
    if (nd->op == KL_MOP_LAYER_NORM && nd->affine) {
        int64_t sh[1] = {cols};
        int wi = s_new_param(c, nd->name, "weight", 1, sh, KL_DT_F32);
        int bi = s_new_param(c, nd->name, "bias", 1, sh, KL_DT_F32);
        snprintf(ln, sizeof ln, ", %.17g, p[%d], p[%d]", nd->eps, wi, bi);
    } else if (nd->op == KL_MOP_LAYER_NORM) {
        snprintf(ln, sizeof ln, ", %.17g, 0, 0", nd->eps);
    } else if (kl_mop_is_act(nd->op)) {
        snprintf(ln, sizeof ln, ", %.9g, %.9g", nd->alpha, nd->beta);
    }
    char *code = kl_xasprintf("    s_%s(%s, %s, %lld, %lld%s); /* %s */\n",
                              nd->op == KL_MOP_GELU && nd->gelu_tanh
                                  ? "gelu_tanh"
                                  : kl_mop_name(nd->op),
                              in, out, rows, cols, ln, nd->name);
    s_emit(c, nd->name, -1, code);
    free(code);
}

/* A transpose: a copy through the permutation (kiln_model.c's
 * s_transpose, on the simplified permutation), or a view of its input
 * when it moves only dims of size 1. */
static int s_transpose_call(s_gen_t *c, int i, char *err)
{
    const kl_mnode_t *nd = &c->g->nodes[i], *x = &c->g->nodes[nd->in[0]];
    int perm[KL_MODEL_MAX_DIMS], pm[KL_MODEL_MAX_DIMS];
    long long sh[KL_MODEL_MAX_DIMS];
    int rc = kl_export__perm(c->text, nd, perm, err);
    if (rc)
        return rc;
    int rd = kl_export__perm_reduce(x->ndim, x->shape, perm, sh, pm);
    if (rd <= 1) {
        c->view[i] = true;
        return KL_OK;
    }
    if (x->dt != KL_DT_F32)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "%s: layer '%s': a transpose of a %s tensor that "
                         "moves data (kiln export copies f32 only)",
                         c->src, nd->name, kl_dtype_name(x->dt));
    char in[64];
    s_inexpr(c, nd->in[0], false, in, sizeof in);
    s_decl(c, "b", i, KL_DT_F32, (long long)s_numel(nd), nd->name);
    kl_buf_t b = {0};
    kl_buf_printf(&b,
                  "    { /* %s */\n        static const long long "
                  "sh[] = {",
                  nd->name);
    for (int k = 0; k < rd; k++)
        kl_buf_printf(&b, "%s%lld", k ? ", " : "", sh[k]);
    kl_buf_puts(&b, "};\n        static const int pm[] = {");
    for (int k = 0; k < rd; k++)
        kl_buf_printf(&b, "%s%d", k ? ", " : "", pm[k]);
    kl_buf_printf(&b,
                  "};\n        s_transpose(%s, b_%d, %d, sh, pm);\n"
                  "    }\n",
                  in, i, rd);
    s_emit(c, nd->name, -1, b.data);
    kl_buf_free(&b);
    return KL_OK;
}

/* A general layer (kl_mop_is_general, a broadcasting add): its helper
 * on its inputs' NCHW values (export_general.c). */
static void s_general_call(s_gen_t *c, int i)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    char in[3][64], out[64];
    const char *ins[3] = {in[0], in[1], in[2]};
    for (int k = 0; k < nd->nin; k++)
        s_inexpr(c, nd->in[k], nd->nhwc, in[k], sizeof in[k]);
    s_bufexpr(c, i, out, sizeof out);
    char *code = kl_export__general_call(c->g, i, ins, out);
    s_emit(c, nd->name, -1, code);
    free(code);
}

/* A quantize or dequantize layer (docs/models.md): kiln_model.c's
 * s_quantize_T / s_dequantize_T on the whole tensor, with the layer's
 * f32 scale and its zero point. */
static void s_qcast_call(s_gen_t *c, int i)
{
    const kl_mnode_t *nd = &c->g->nodes[i], *x = &c->g->nodes[nd->in[0]];
    char in[64], out[64];
    s_inexpr(c, nd->in[0], nd->nhwc, in, sizeof in);
    s_bufexpr(c, i, out, sizeof out);
    bool q = nd->op == KL_MOP_QUANTIZE;
    kl_dtype t = q ? nd->qout : x->dt;
    char *code =
        kl_xasprintf("    s_%s_%s(%s, %s, %lldLL, %.9gf, %lld); /* %s */\n",
                     kl_mop_name(nd->op), t == KL_DT_S8 ? "s8" : "u8", in, out,
                     (long long)s_numel(nd), (double)(float)nd->scale,
                     (long long)nd->zo, nd->name);
    s_emit(c, nd->name, -1, code);
    free(code);
    c->qcasts = true;
}

static int s_layer(s_gen_t *c, int i, char *err)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    switch (nd->op) {
    case KL_MOP_INPUT:
        c->param[i] =
            s_new_param(c, nd->name, NULL, nd->ndim, nd->shape, nd->dt);
        return KL_OK;
    case KL_MOP_CONST: /* its values: the parameter NAME.weight */
        c->param[i] =
            s_new_param(c, nd->name, "weight", nd->ndim, nd->shape, KL_DT_F32);
        return KL_OK;
    case KL_MOP_FLATTEN:
    case KL_MOP_RESHAPE:
        return KL_OK;
    case KL_MOP_TRANSPOSE:
        return s_transpose_call(c, i, err);
    default:
        break;
    }
    if (nd->fused || c->qf[i].kind == KL_QF_SKIP)
        return KL_OK;
    if (c->qf[i].kind != KL_QF_NONE) {
        int q = c->qf[i].q;
        s_decl(c, "b", q, c->g->nodes[q].dt,
               (long long)s_numel(&c->g->nodes[q]), c->g->nodes[q].name);
        char in[2][64], out[64];
        const char *ins[2] = {in[0], in[1]};
        for (int k = 0; k < nd->nin; k++)
            s_inexpr(c, c->g->nodes[nd->in[k]].in[0], nd->nhwc, in[k],
                     sizeof in[k]);
        s_bufexpr(c, q, out, sizeof out);
        char *code = kl_export__qfuse_call(c->g, i, &c->qf[i], ins, out);
        s_emit(c, nd->name, -1, code);
        free(code);
        return KL_OK;
    }
    s_decl(c, "b", i, nd->dt, (long long)s_numel(nd), nd->name);
    if (nd->op == KL_MOP_QUANTIZE || nd->op == KL_MOP_DEQUANTIZE) {
        s_qcast_call(c, i);
        return KL_OK;
    }
    if (kl_mop_is_general(nd->op) || nd->bcast ||
        (nd->op == KL_MOP_GLOBAL_AVG_POOL && nd->nhwc)) {
        s_general_call(c, i);
        return KL_OK;
    }
    if (nd->op == KL_MOP_SOFTMAX || nd->op == KL_MOP_LAYER_NORM ||
        nd->op == KL_MOP_GELU || kl_mop_is_act(nd->op)) {
        s_untuned_call(c, i);
        return KL_OK;
    }
    return s_task_call(c, i, err);
}

/* What kiln_model_run, kiln_model_run_profiled and s_prepare start with:
 * with an AMX kernel, the tile state or 3 (kiln_model.h, "AMX"). */
#define S_AMX_CHECK(c) ((c)->amx ? "    if (s_amx())\n        return 3;\n" : "")

/* The prepared blocks (kiln_model.h, "Constant inputs"): s_prepared
 * makes one layer's block unless it is there and was made from the same
 * constant pointers; s_prepare runs it for every such layer. */
static void s_prep_code(const s_gen_t *c, kl_buf_t *b)
{
    if (c->amx)
        kl_buf_puts(b, kl_export__amx_c);
    kl_buf_printf(b,
                  "typedef struct {\n    void *block;\n    const void "
                  "*from[%d];\n} s_prep_t;\n\nstatic s_prep_t s_prep[%d];\n\n",
                  KL_IR_MAX_TENSORS, c->nprep > 0 ? c->nprep : 1);
    if (c->nprep)
        kl_buf_puts(b, kl_export__prepared_c);
    kl_buf_puts(b, kl_export__scratch_c);
    kl_buf_printf(b,
                  "static int s_prepare(const float *const *p)\n"
                  "{\n    (void)p;\n%s%s    return 0;\n}\n\n"
                  "int kiln_model_nprepare(void)\n{\n    return %d;\n}\n\n"
                  "void kiln_model_release(void)\n{\n"
                  "    for (int i = 0; i < %d; i++) {\n"
                  "        free(s_prep[i].block);\n"
                  "        memset(&s_prep[i], 0, sizeof s_prep[i]);\n"
                  "    }\n    free(kl_scratch_g.p);\n"
                  "    kl_scratch_g.p = NULL;\n    kl_scratch_g.n = 0;\n}\n\n"
                  "int kiln_model_prepare(const float *const *params)\n{\n"
                  "    kiln_model_release();\n"
                  "    return s_prepare(params);\n}\n\n"
                  "__attribute__((destructor)) static void s_unload(void)\n"
                  "{\n    kiln_model_release();\n}\n\n",
                  S_AMX_CHECK(c), c->prep.data ? c->prep.data : "", c->nprep,
                  c->nprep);
}

/* The layers' tables and the weights' functions. */
static void s_api_code(const s_gen_t *c, const kl_mnode_t *out, kl_buf_t *b)
{
    kl_buf_puts(b, "static const char *const s_layer_names[] = {\n");
    for (int i = 0; i < c->nlayers; i++)
        kl_buf_printf(b, "    \"%s\",\n", c->layers[i].name);
    kl_buf_puts(b, "};\nstatic const int s_layer_tasks[] = {");
    for (int i = 0; i < c->nlayers; i++)
        kl_buf_printf(b, "%s%d", i ? ", " : "", c->layers[i].task);
    kl_buf_puts(b, "};\nstatic const long long s_oshape[] = {");
    for (int k = 0; k < out->ndim; k++)
        kl_buf_printf(b, "%s%lld", k ? ", " : "", (long long)out->shape[k]);
    kl_buf_printf(
        b,
        "};\n\nint kiln_model_param_shape(int i, long long *dims)\n{\n"
        "    if (i < 0 || i >= %d)\n        return -1;\n"
        "    memcpy(dims, s_shape[i], (size_t)s_ndim[i] * sizeof *dims);\n"
        "    return s_ndim[i];\n}\n\n"
        "int kiln_model_output_shape(long long *dims)\n{\n"
        "    memcpy(dims, s_oshape, sizeof s_oshape);\n    return %d;\n}\n\n"
        "const float *kiln_model_param_data(int i)\n{\n"
        "    return i >= 0 && i < %d && s_offset[i] >= 0\n"
        "               ? (const float *)(kiln_model_weights_ + s_offset[i])\n"
        "               : 0;\n}\n\n"
        "int kiln_model_param_dtype(int i)\n{\n"
        "    return i >= 0 && i < %d ? s_dtype[i] : -1;\n}\n\n"
        "int kiln_model_output_dtype(void)\n{\n    return %d;\n}\n\n"
        "int kiln_model_trained(void)\n{\n    return %d;\n}\n\n"
        "int kiln_model_ninputs(void)\n{\n    return %d;\n}\n\n"
        "static int s_infer(const float *const *in, float *output)\n{\n"
        "    const float *p[%d];\n    int k = 0;\n"
        "    for (int i = 0; i < %d; i++) {\n"
        "        p[i] = s_offset[i] >= 0\n"
        "                   ? (const float *)(kiln_model_weights_ + "
        "s_offset[i])"
        "\n                   : in[k++];\n"
        "        if (!p[i])\n            return 2;\n    }\n"
        "    return kiln_model_run(p, output);\n}\n\n"
        "int kiln_model_infer(const float *input, float *output)\n{\n"
        "    if (kiln_model_ninputs() != 1 || !input || !output)\n"
        "        return 2;\n"
        "    return s_infer(&input, output);\n}\n\n"
        "int kiln_model_infer_n(const float *const *inputs, float *output)\n"
        "{\n    if (!inputs || !output)\n        return 2;\n"
        "    return s_infer(inputs, output);\n}\n\n"
        "int kiln_model_nlayers(void)\n{\n    return %d;\n}\n\n"
        "const char *kiln_model_layer_name(int i)\n{\n"
        "    return i >= 0 && i < %d ? s_layer_names[i] : 0;\n}\n\n"
        "int kiln_model_layer_task(int i)\n{\n"
        "    return i >= 0 && i < %d ? s_layer_tasks[i] : -1;\n}\n\n",
        c->nparams, out->ndim, c->nparams, c->nparams, (int)out->dt,
        c->trained ? 1 : 0, c->ninputs, c->nparams, c->nparams, c->nlayers,
        c->nlayers, c->nlayers);
}

static char *s_model_c(s_gen_t *c)
{
    const kl_mgraph_t *g = c->g;
    int out = g->nout ? g->outputs[0] : g->n - 1;
    const char *oex = c->oex;
    kl_buf_t b = {0};
    kl_buf_printf(
        &b,
        "/* kiln_model.c - the layer graph of model %s, written "
        "by kiln export. */\n#define _POSIX_C_SOURCE 200809L\n"
        "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include "
        "<string.h>\n#include <time.h>\n\n#include "
        "\"kiln_model.h\"\n\n" KL_EXPORT_NO_TRAP,
        kl_model_name(c->m));
    for (int t = 0; t < kl_model_ntasks(c->m); t++) {
        kl_buf_printf(&b, "void kiln_task_%02d(void *const *args);\n", t);
        if (c->kernels[t].prepare)
            kl_buf_printf(&b,
                          "void *kiln_task_%02d" KL_ABI_PREPARE_SUFFIX
                          "(void *const *args);\n",
                          t);
    }
    kl_buf_puts(&b, "\n");
    kl_export__arena_code(c->arena, &b);
    kl_buf_printf(&b, "\n%s%s", kl_codegen_act_helpers(), kl_export__helpers_c);
    if (c->qcasts)
        kl_export__qcast_helpers(&b);
    for (int i = 0; i < g->n; i++)
        if (kl_mop_is_act(g->nodes[i].op)) {
            kl_buf_puts(&b, kl_export__act_helpers_c);
            break;
        }
    if (kl_export__general_used(g))
        kl_buf_puts(&b, kl_export__general_helpers_c);
    for (int i = 0; i < g->n; i++)
        if (c->conv[i]) {
            kl_buf_puts(&b, kl_export__layout_helpers_c);
            break;
        }
    kl_export__qfuse_helpers(g, c->qf, &b);
    kl_export__param_tables(c->params, c->nparams, &b);
    kl_buf_printf(&b,
                  "const char *kiln_model_name(void)\n{\n    return "
                  "\"%s\";\n}\n\nint kiln_model_nparams(void)\n{\n    "
                  "return %d;\n}\n\nconst char *kiln_model_param_name(int "
                  "i)\n{\n    return i >= 0 && i < %d ? s_names[i] : 0;\n}\n\n"
                  "long long kiln_model_param_numel(int i)\n{\n    return "
                  "i >= 0 && i < %d ? s_numel[i] : -1;\n}\n\nlong long "
                  "kiln_model_output_numel(void)\n{\n    return %lldLL;\n}\n\n",
                  kl_model_name(c->m), c->nparams, c->nparams, c->nparams,
                  (long long)s_numel(&g->nodes[out]));
    s_prep_code(c, &b);
    /* The output in f32: an integer output's codes converted. */
    long long on = (long long)s_numel(&g->nodes[out]);
    char *ocopy =
        g->nodes[out].dt == KL_DT_F32
            ? kl_xasprintf("    memcpy(output, %s, %lldULL * sizeof(float));\n",
                           oex, on)
            : kl_xasprintf("    for (long long i = 0; i < %lldLL; i++)\n"
                           "        output[i] = (float)%s[i];\n",
                           on, oex);
    kl_buf_printf(&b,
                  "int kiln_model_run(const float *const *p, float *output)"
                  "\n{\n%s    if (s_prepare(p))\n        return 1;\n%s%s"
                  "    return 0;\n}\n\n",
                  S_AMX_CHECK(c), c->run.data ? c->run.data : "", ocopy);
    kl_buf_printf(&b,
                  "int kiln_model_run_profiled(const float *const *p, float "
                  "*output,\n                            double *layer_s)\n"
                  "{\n    double t;\n%s    if (s_prepare(p))\n        return "
                  "1;\n%s%s    return 0;\n}\n\n",
                  S_AMX_CHECK(c), c->prun.data ? c->prun.data : "", ocopy);
    free(ocopy);
    s_api_code(c, &g->nodes[out], &b);
    return kl_buf_take(&b);
}

static int s_write(const char *dir, const char *name, const char *text,
                   char ***paths, int *n, char *err)
{
    char *p = kl_xasprintf("%s/%s", dir, name);
    int rc = kl_write_file(p, text, strlen(text), err);
    if (rc || !paths) {
        free(p);
        return rc;
    }
    *paths = kl_xrealloc(*paths, (size_t)(*n + 1) * sizeof(char *));
    (*paths)[(*n)++] = p;
    return KL_OK;
}

/* kiln_model.h: the fixed text, with the "AMX" paragraph before its
 * #endif for a library with an AMX kernel. */
static int s_write_header(const char *dir, bool amx, char *err)
{
    if (!amx)
        return s_write(dir, "kiln_model.h", kl_export__model_h, NULL, NULL,
                       err);
    size_t n = strlen(kl_export__model_h) - strlen("#endif\n");
    char *h = kl_xasprintf("%.*s%s#endif\n", (int)n, kl_export__model_h,
                           kl_export__amx_h);
    int rc = s_write(dir, "kiln_model.h", h, NULL, NULL, err);
    free(h);
    return rc;
}

static int s_gen(s_gen_t *c, const kl_model_params_t *ps, char **model_c,
                 char *err)
{
    for (int i = 0; i < c->g->n; i++) {
        int rc = s_layer(c, i, err);
        if (rc)
            return rc;
    }
    const kl_mgraph_t *g = c->g;
    s_inexpr(c, g->nout ? g->outputs[0] : g->n - 1, false, c->oex,
             sizeof c->oex);
    /* the output lives on to the copy after the last layer */
    kl_export__arena_use(c->arena, c->nlayers, c->oex);
    /* KILN_EXPORT_NO_ARENA=1: one buffer per value (the tests' reference) */
    const char *na = getenv("KILN_EXPORT_NO_ARENA");
    kl_export__arena_plan(c->arena, !(na && !strcmp(na, "1")));
    int rc = kl_export__weights_plan(c->params, c->nparams, ps, c->src,
                                     &c->trained, err);
    if (rc)
        return rc;
    *model_c = s_model_c(c);
    return KL_OK;
}

static void s_gen_free(s_gen_t *c)
{
    free(c->param);
    free(c->view);
    free(c->qf);
    free(c->conv);
    kl_export__arena_free(c->arena);
    kl_buf_free(&c->run);
    kl_buf_free(&c->prun);
    kl_buf_free(&c->prep);
    for (int i = 0; i < c->nparams; i++)
        free(c->params[i].name);
    free(c->params);
    free(c->layers);
}

int kl_export_write_graph(const char *text, const char *source,
                          const kl_model_t *m, const kl_kernel_t *kernels,
                          bool amx, const kl_model_params_t *params,
                          const char *dir, bool build, const char *cc,
                          char *err)
{
    kl_mgraph_t g;
    int rc = kl_mgraph_parse(text, source, &g, err);
    if (rc)
        return rc;
    /* each layer's workload, hence its task, in the model's precision */
    kl_mgraph_set_precision(&g, kl_model_prec(m));
    kl_mgraph_fuse(&g);
    s_gen_t c = {.g = &g,
                 .m = m,
                 .kernels = kernels,
                 .amx = amx,
                 .src = source,
                 .text = text};
    c.param = kl_xcalloc((size_t)g.n, sizeof(int));
    c.view = kl_xcalloc((size_t)g.n, sizeof(bool));
    c.qf = kl_xcalloc((size_t)g.n, sizeof *c.qf);
    c.conv = kl_xcalloc((size_t)g.n, 1);
    c.arena = kl_export__arena_new(g.n);
    kl_mgraph_qfuse_plan(&g, c.qf);
    char *model_c = NULL, **paths = NULL;
    int np = 0;
    rc = s_gen(&c, params, &model_c, err);
    for (int t = 0; !rc && t < kl_model_ntasks(m); t++) {
        char name[32];
        snprintf(name, sizeof name, "task_%02d.c", t);
        rc = s_write(dir, name, kernels[t].source, &paths, &np, err);
    }
    if (!rc)
        rc = s_write_header(dir, amx, err);
    if (!rc)
        rc = s_write(dir, "kiln_model.c", model_c, &paths, &np, err);
    if (!rc)
        rc = kl_export__weights_write(c.params, c.nparams, params, c.trained,
                                      dir, &paths, &np, err);
    if (!rc && build) {
        char *lib = kl_xasprintf("%s/libkiln_model.so", dir);
        rc = kl_export_cc(cc, paths, np, lib, err);
        free(lib);
    }
    for (int i = 0; i < np; i++)
        free(paths[i]);
    free(paths);
    free(model_c);
    s_gen_free(&c);
    kl_mgraph_free(&g);
    return rc;
}
