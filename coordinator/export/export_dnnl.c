/* export_dnnl.c - the oneDNN baseline of kiln run: the same layer graph
 * (fused as kiln fuses it) built from oneDNN primitives with the same
 * parameters in the same order, as a framework user of oneDNN builds it:
 * convolutions, pooling and inner products choose their layouts
 * (dnnl_format_tag_any) and pass them on, eltwise and pooling take their
 * producer's layout, so reorders run only at the graph's input and output
 * and where two layers' layouts differ; convolutions use
 * dnnl_convolution_auto; a fused residual add is a sum post-op into the
 * residual's own buffer when the convolution is its last reader (else one
 * copy or reorder of it per run, which describe names). Weights are
 * reordered once, at open, into the layout each primitive chose. */
#include "kl_export.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_err.h"
#include "kl_util.h"

#ifdef KL_HAVE_DNNL
#include <dnnl_debug.h>

#include "export_dnnl_int.h"

static int64_t s_numel(const kl_mnode_t *nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd->ndim; i++)
        n *= nd->shape[i];
    return n;
}

int kl_export__dnnl_vnode(const kl_mgraph_t *g, int i)
{
    return g->nodes[i].fused ? kl_export__dnnl_vnode(g, g->nodes[i].owner) : i;
}

static const dnnl_format_tag_t s_plain[] = {dnnl_format_tag_undef,
                                            dnnl_a,
                                            dnnl_ab,
                                            dnnl_abc,
                                            dnnl_abcd,
                                            dnnl_abcde,
                                            dnnl_abcdef,
                                            dnnl_abcdefg,
                                            dnnl_abcdefgh};
_Static_assert(sizeof s_plain / sizeof s_plain[0] == KL_MODEL_MAX_DIMS + 1,
               "a plain tag for every rank a model tensor has");

static dnnl_memory_desc_t s_md_tag(int nd, const int64_t *dims,
                                   dnnl_format_tag_t tag)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t d = {0};
    for (int i = 0; i < nd; i++)
        d[i] = dims[i];
    dnnl_memory_desc_init_by_tag(&md, nd, d, dnnl_f32, tag);
    return md;
}

dnnl_memory_desc_t kl_export__dnnl_md(int nd, const int64_t *dims)
{
    return s_md_tag(nd, dims, s_plain[nd]);
}

dnnl_memory_desc_t kl_export__dnnl_any(int nd, const int64_t *dims)
{
    return s_md_tag(nd, dims, dnnl_format_tag_any);
}

/* A layout as oneDNN's verbose mode writes it: dimensions outermost
 * first, blocked ones in capitals, then the inner blocks ("aBcd16b"). */
static void s_fmt(const dnnl_memory_desc_t *md, char *out, size_t cap)
{
    if (md->format_kind != dnnl_blocked) {
        snprintf(out, cap, "%s",
                 md->format_kind == dnnl_format_kind_wino ? "wino" : "opaque");
        return;
    }
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int ord[DNNL_MAX_NDIMS];
    for (int i = 0; i < md->ndims; i++)
        ord[i] = i;
    for (int i = 1; i < md->ndims; i++) /* stable, strides descending */
        for (int j = i; j > 0 && b->strides[ord[j]] > b->strides[ord[j - 1]];
             j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    size_t n = 0;
    for (int i = 0; i < md->ndims && n + 1 < cap; i++) {
        bool blocked = false;
        for (int k = 0; k < b->inner_nblks; k++)
            blocked |= b->inner_idxs[k] == ord[i];
        out[n++] = (char)((blocked ? 'A' : 'a') + ord[i]);
    }
    out[n] = 0;
    for (int k = 0; k < b->inner_nblks && n + 1 < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%lld%c",
                              (long long)b->inner_blks[k],
                              (char)('a' + b->inner_idxs[k]));
}

dnnl_memory_t kl_export__dnnl_mem(kl_dnnl_net_t *n,
                                  const dnnl_memory_desc_t *md, void *handle)
{
    dnnl_memory_t m = NULL;
    if (dnnl_memory_create(&m, md, n->eng, handle) != dnnl_success)
        return NULL;
    n->mems = kl_xrealloc(n->mems, (size_t)(n->nmems + 1) * sizeof m);
    n->mems[n->nmems++] = m;
    return m;
}

float *kl_export__dnnl_param(kl_dnnl_net_t *n)
{
    return n->np < n->nparams ? n->params[n->np++] : NULL;
}

kl_export__dnnl_step_t *kl_export__dnnl_add(kl_dnnl_net_t *n,
                                            const_dnnl_primitive_desc_t pd,
                                            const char *name, const char *why)
{
    dnnl_primitive_t p = NULL;
    if (dnnl_primitive_create(&p, pd) != dnnl_success)
        return NULL;
    n->steps = kl_xrealloc(n->steps, (size_t)(n->nsteps + 1) *
                                         sizeof(kl_export__dnnl_step_t));
    kl_export__dnnl_step_t *s = &n->steps[n->nsteps++];
    memset(s, 0, sizeof *s);
    s->p = p;
    s->name = name;
    s->why = why;
    const char *impl = NULL;
    dnnl_primitive_kind_t kind = dnnl_undefined_primitive;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind);
    snprintf(s->impl, sizeof s->impl, "%s", impl ? impl : "?");
    snprintf(s->kind, sizeof s->kind, "%s", dnnl_prim_kind2str(kind));
    const dnnl_memory_desc_t *src =
        dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *dst =
        dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    if (src)
        s_fmt(src, s->src, sizeof s->src);
    if (dst)
        s_fmt(dst, s->dst, sizeof s->dst);
    return s;
}

void kl_export__dnnl_arg(kl_export__dnnl_step_t *s, int what, dnnl_memory_t m)
{
    if (s->nargs < KL_EXPORT__DNNL_MAX_ARGS)
        s->args[s->nargs++] = (dnnl_exec_arg_t){what, m};
}

dnnl_memory_t kl_export__dnnl_reorder(kl_dnnl_net_t *n, dnnl_memory_t from,
                                      const dnnl_memory_desc_t *fmd,
                                      const dnnl_memory_desc_t *tmd,
                                      dnnl_memory_t to, const char *name,
                                      const char *why)
{
    dnnl_primitive_desc_t pd = NULL;
    if (!to)
        to = kl_export__dnnl_mem(n, tmd, DNNL_MEMORY_ALLOCATE);
    if (!to || dnnl_reorder_primitive_desc_create(&pd, fmd, n->eng, tmd, n->eng,
                                                  NULL) != dnnl_success)
        return NULL;
    kl_export__dnnl_step_t *s = kl_export__dnnl_add(n, pd, name, why);
    dnnl_primitive_desc_destroy(pd);
    if (!s)
        return NULL;
    kl_export__dnnl_arg(s, DNNL_ARG_FROM, from);
    kl_export__dnnl_arg(s, DNNL_ARG_TO, to);
    return to;
}

dnnl_memory_t kl_export__dnnl_in(kl_dnnl_net_t *n, int i,
                                 const dnnl_memory_desc_t *want)
{
    int v = kl_export__dnnl_vnode(&n->g, i);
    kl_export__dnnl_val_t *x = &n->val[v];
    if (!x->m)
        return NULL;
    if (dnnl_memory_desc_equal(&x->md, want))
        return x->m;
    if (x->alt && dnnl_memory_desc_equal(&x->alt_md, want))
        return x->alt;
    const kl_mnode_t *nd = &n->g.nodes[v];
    dnnl_memory_t m = kl_export__dnnl_reorder(
        n, x->m, &x->md, want, NULL, nd->name,
        nd->op == KL_MOP_INPUT ? "input" : "between layers");
    if (m) {
        x->alt = m;
        x->alt_md = *want;
    }
    return m;
}

dnnl_memory_t kl_export__dnnl_out(kl_dnnl_net_t *n, int i,
                                  const dnnl_memory_desc_t *md)
{
    n->val[i].md = *md;
    n->val[i].m = kl_export__dnnl_mem(n, md, DNNL_MEMORY_ALLOCATE);
    return n->val[i].m;
}

void kl_export_dnnl_close(kl_dnnl_net_t *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->nsteps; i++)
        dnnl_primitive_destroy(n->steps[i].p);
    for (int i = 0; i < n->nmems; i++)
        dnnl_memory_destroy(n->mems[i]);
    free(n->val);
    free(n->steps);
    free(n->mems);
    kl_buf_free(&n->why);
    if (n->st)
        dnnl_stream_destroy(n->st);
    if (n->eng)
        dnnl_engine_destroy(n->eng);
    if (n->g.nodes)
        kl_mgraph_free(&n->g);
    free(n->text);
    free(n);
}

int kl_export_dnnl_open(const char *model, float *const *params, int nparams,
                        kl_dnnl_net_t **out, char *err)
{
    return kl_export_dnnl_open_opts(model, NULL, params, nparams, out, err);
}

int kl_export_dnnl_open_opts(const char *model, const kl_model_opts_t *dims,
                             float *const *params, int nparams,
                             kl_dnnl_net_t **out, char *err)
{
    *out = NULL;
    kl_dnnl_net_t *n = kl_xcalloc(1, sizeof *n);
    int rc = kl_model_text_opts(model, dims, &n->text, err);
    if (!rc)
        rc = kl_mgraph_parse(n->text, model, &n->g, err);
    if (rc) {
        kl_export_dnnl_close(n);
        return rc;
    }
    int nq = 0, first = -1;
    for (int i = 0; i < n->g.n; i++) {
        const kl_mnode_t *nd = &n->g.nodes[i];
        if (kl_mop_is_q(nd->op) || nd->op == KL_MOP_QUANTIZE ||
            nd->op == KL_MOP_DEQUANTIZE) {
            first = nq++ ? first : i;
        }
    }
    if (nq) {
        rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                       "the oneDNN graph is built in f32 only; the model "
                       "has %d quantized layers (q-ops, quantize, "
                       "dequantize), the first '%s' (%s)",
                       nq, n->g.nodes[first].name,
                       kl_mop_name(n->g.nodes[first].op));
        kl_export_dnnl_close(n);
        return rc;
    }
    kl_mgraph_fuse(&n->g);
    n->params = params;
    n->nparams = nparams;
    n->val = kl_xcalloc((size_t)n->g.n, sizeof(kl_export__dnnl_val_t));
    if (dnnl_engine_create(&n->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&n->st, n->eng, dnnl_stream_default_flags) !=
            dnnl_success) {
        kl_export_dnnl_close(n);
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "oneDNN has no CPU engine");
    }
    int nbad = 0;
    for (int i = 0; i < n->g.n; i++)
        if (!kl_export__dnnl_layer(n, i))
            kl_buf_printf(&n->why, "%s'%s' (%s%s)", nbad++ ? ", " : "",
                          n->g.nodes[i].name, kl_mop_name(n->g.nodes[i].op),
                          n->g.nodes[i].op == KL_MOP_ADD && n->g.nodes[i].bcast
                              ? ", broadcast"
                              : "");
    int o = n->g.nout ? n->g.outputs[0] : n->g.n - 1;
    const kl_mnode_t *ond = &n->g.nodes[o];
    kl_export__dnnl_val_t *ov = &n->val[kl_export__dnnl_vnode(&n->g, o)];
    dnnl_memory_desc_t omd = kl_export__dnnl_md(ond->ndim, ond->shape);
    if (!nbad && (!(n->out = kl_export__dnnl_mem(n, &omd, DNNL_MEMORY_NONE)) ||
                  !kl_export__dnnl_reorder(n, ov->m, &ov->md, &omd, n->out,
                                           ond->name, "output")))
        kl_buf_printf(&n->why, "%s'%s' (the output)", nbad++ ? ", " : "",
                      ond->name);
    n->numel = s_numel(ond);
    if (nbad) {
        rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                       "oneDNN cannot express %d layer(s) as built here: %s",
                       nbad, n->why.data);
        kl_export_dnnl_close(n);
        return rc;
    }
    if (n->np != nparams) {
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "the oneDNN graph of %s takes %d parameters, %d given",
                       model, n->np, nparams);
        kl_export_dnnl_close(n);
        return rc;
    }
    *out = n;
    return KL_OK;
}

long long kl_export_dnnl_numel(const kl_dnnl_net_t *n)
{
    return n ? n->numel : 0;
}

int kl_export_dnnl_run(kl_dnnl_net_t *n, float *out, char *err)
{
    if (dnnl_memory_set_data_handle(n->out, out) != dnnl_success)
        return kl_seterr(err, KL_ERR_RUNTIME, "oneDNN: cannot set the output");
    for (int i = 0; i < n->nsteps; i++) {
        const kl_export__dnnl_step_t *s = &n->steps[i];
        if (dnnl_primitive_execute(s->p, n->st, s->nargs, s->args) !=
            dnnl_success)
            return kl_seterr(err, KL_ERR_RUNTIME,
                             "oneDNN's %s of '%s' failed to execute", s->kind,
                             s->name);
    }
    if (dnnl_stream_wait(n->st) != dnnl_success)
        return kl_seterr(err, KL_ERR_RUNTIME, "oneDNN's stream failed");
    return KL_OK;
}

void kl_export_dnnl_describe(const kl_dnnl_net_t *n, FILE *f)
{
    int layers = 0, reorders = 0, in = 0, between = 0, outs = 0;
    int res[3] = {0, 0, 0}; /* in place, copied, reordered */
    for (int i = 0; i < n->nsteps; i++) {
        const kl_export__dnnl_step_t *s = &n->steps[i];
        if (s->why) {
            reorders++;
            in += !strcmp(s->why, "input");
            outs += !strcmp(s->why, "output");
            between += !strcmp(s->why, "between layers");
            fprintf(f, "oneDNN reorder %s (%s): %s %s -> %s\n", s->name, s->why,
                    s->impl, s->src, s->dst);
            continue;
        }
        layers++;
        if (s->res)
            res[s->res[0] == 'i' ? 0 : s->res[0] == 'c' ? 1 : 2]++;
        fprintf(f, "oneDNN layer %s: %s %s (src %s, dst %s%s%s)\n", s->name,
                s->kind, s->impl, s->src, s->dst,
                s->res ? ", residual sum " : "", s->res ? s->res : "");
    }
    fprintf(f,
            "oneDNN runs %d primitives: %d layers, %d reorders (input %d, "
            "between layers %d, output %d, residual %d); residual sums: %d "
            "in place, %d copied, %d reordered per run\n",
            n->nsteps, layers, reorders, in, between, outs,
            reorders - in - between - outs, res[0], res[1], res[2]);
}

int kl_export_dnnl_check(kl_dnnl_net_t *n, const float *expect, long long numel,
                         double rtol, double *rel, char *err)
{
    if (numel != n->numel)
        return kl_seterr(err, KL_ERR_INVAL,
                         "oneDNN's output has %lld elements, %lld expected",
                         n->numel, numel);
    float *got = kl_xmalloc((size_t)numel * sizeof(float) + 1);
    int rc = kl_export_dnnl_run(n, got, err);
    double big = 0, worst = 0;
    long long at = 0;
    for (long long k = 0; !rc && k < numel; k++)
        big = fmax(big, fabs(expect[k]));
    for (long long k = 0; !rc && k < numel; k++) {
        double d = fabs((double)got[k] - expect[k]);
        if (!(d <= worst)) {
            worst = d;
            at = k;
        }
    }
    if (!rc && !(worst <= rtol * fmax(big, 1e-6)))
        rc = kl_seterr(err, KL_ERR_RUNTIME,
                       "oneDNN's output differs from the reference: element "
                       "%lld is %g, reference %g (largest |reference| %g, "
                       "rtol %g)",
                       at, got[at], expect[at], big, rtol);
    if (rel)
        *rel = big > 0 ? worst / big : 0.0;
    free(got);
    return rc;
}

#else

static const char s_none[] = "kiln was built without libdnnl (libdnnl-dev)";

int kl_export_dnnl_open(const char *model, float *const *params, int nparams,
                        kl_dnnl_net_t **out, char *err)
{
    (void)model, (void)params, (void)nparams;
    *out = NULL;
    return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", s_none);
}

int kl_export_dnnl_open_opts(const char *model, const kl_model_opts_t *dims,
                             float *const *params, int nparams,
                             kl_dnnl_net_t **out, char *err)
{
    (void)dims;
    return kl_export_dnnl_open(model, params, nparams, out, err);
}

long long kl_export_dnnl_numel(const kl_dnnl_net_t *n)
{
    (void)n;
    return 0;
}

int kl_export_dnnl_run(kl_dnnl_net_t *n, float *out, char *err)
{
    (void)n, (void)out;
    return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", s_none);
}

void kl_export_dnnl_describe(const kl_dnnl_net_t *n, FILE *f)
{
    (void)n;
    fprintf(f, "oneDNN: %s\n", s_none);
}

int kl_export_dnnl_check(kl_dnnl_net_t *n, const float *expect, long long numel,
                         double rtol, double *rel, char *err)
{
    (void)n, (void)expect, (void)numel, (void)rtol;
    if (rel)
        *rel = 0;
    return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", s_none);
}

void kl_export_dnnl_close(kl_dnnl_net_t *n)
{
    (void)n;
}

#endif
