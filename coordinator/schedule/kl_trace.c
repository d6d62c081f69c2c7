/* kl_trace.c - trace storage, program builders and the proto form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.pb-c.h"
#include "kl_err.h"
#include "kl_trace.h"
#include "kl_trace_priv.h"

static const char *s_op_names[KL_OP__COUNT] = {
    "get_loops",
    "split",
    "reorder",
    "fuse",
    "parallel",
    "vectorize",
    "unroll",
    "bind",
    "cache_read",
    "cache_write",
    "compute_at",
    "reverse_compute_at",
    "annotate",
    "sample_perfect_tile",
    "sample_categorical",
    "sample_compute_location",
    "reject_if",
    "if",
    "winograd",
    "tensorize",
};

const char *kl_op_name(kl_op op)
{
    return (op >= 0 && op < KL_OP__COUNT) ? s_op_names[op] : NULL;
}

int kl_op_parse(const char *name, kl_op *out)
{
    for (int i = 0; i < KL_OP__COUNT; i++)
        if (!strcmp(name, s_op_names[i])) {
            *out = (kl_op)i;
            return KL_OK;
        }
    return KL_ERR_INVAL;
}

kl_trace_t *kl_trace_new(const char *space)
{
    kl_trace_t *t = kl_xcalloc(1, sizeof *t);
    snprintf(t->space, sizeof t->space, "%s", space ? space : "");
    return t;
}

void kl_trace__insts_free(kl_inst_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        kl_trace__insts_free(v[i].then_body, v[i].nthen);
        kl_trace__insts_free(v[i].else_body, v[i].nelse);
    }
    free(v);
}

kl_inst_t *kl_trace__insts_clone(const kl_inst_t *v, int n)
{
    if (n == 0)
        return NULL;
    kl_inst_t *c = kl_xmalloc((size_t)n * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    for (int i = 0; i < n; i++) {
        c[i].then_body = kl_trace__insts_clone(v[i].then_body, v[i].nthen);
        c[i].else_body = kl_trace__insts_clone(v[i].else_body, v[i].nelse);
    }
    return c;
}

void kl_trace_free(kl_trace_t **self_p)
{
    if (self_p && *self_p) {
        kl_trace__insts_free((*self_p)->insts, (*self_p)->n);
        free(*self_p);
        *self_p = NULL;
    }
}

kl_trace_t *kl_trace_clone(const kl_trace_t *t)
{
    kl_trace_t *c = kl_xmalloc(sizeof *c);
    memcpy(c, t, sizeof *c);
    c->insts = kl_trace__insts_clone(t->insts, t->n);
    c->cap = t->n;
    return c;
}

const char *kl_trace_space(const kl_trace_t *t)
{
    return t->space;
}

int kl_trace_ninsts(const kl_trace_t *t)
{
    return t->n;
}

kl_inst_t *kl_trace_inst(kl_trace_t *t, int i)
{
    return (i >= 0 && i < t->n) ? &t->insts[i] : NULL;
}

const kl_inst_t *kl_trace_inst_c(const kl_trace_t *t, int i)
{
    return (i >= 0 && i < t->n) ? &t->insts[i] : NULL;
}

static int s_ndec(const kl_inst_t *v, int n)
{
    int c = 0;
    for (int i = 0; i < n; i++) {
        if (v[i].op == KL_OP_IF) {
            if (v[i].has_decision)
                c += v[i].dec[0] ? s_ndec(v[i].then_body, v[i].nthen)
                                 : s_ndec(v[i].else_body, v[i].nelse);
        } else if (v[i].has_decision) {
            c++;
        }
    }
    return c;
}

int kl_trace_ndecisions(const kl_trace_t *t)
{
    return s_ndec(t->insts, t->n);
}

static void s_strip(kl_inst_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        v[i].has_decision = false;
        v[i].ndec = 0;
        s_strip(v[i].then_body, v[i].nthen);
        s_strip(v[i].else_body, v[i].nelse);
    }
}

void kl_trace_strip_decisions(kl_trace_t *t)
{
    s_strip(t->insts, t->n);
}

static void s_canon(kl_inst_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        kl_inst_t *in = &v[i];
        if (in->op != KL_OP_IF)
            continue;
        if (!in->has_decision || in->ndec != 1) {
            s_strip(in->then_body, in->nthen);
            s_strip(in->else_body, in->nelse);
        } else if (in->dec[0]) {
            s_canon(in->then_body, in->nthen);
            s_strip(in->else_body, in->nelse);
        } else {
            s_strip(in->then_body, in->nthen);
            s_canon(in->else_body, in->nelse);
        }
    }
}

void kl_trace_canonicalize(kl_trace_t *t)
{
    s_canon(t->insts, t->n);
}

/* ---- builders ---- */

/* The body that builders append to: the root, or the open branch of the
 * innermost open if (found by walking the stack of indices from the
 * root, since parents may have moved when they grew). */
void kl_trace__cur_body(kl_trace_t *t, kl_inst_t ***arr, int **n)
{
    kl_inst_t **a = &t->insts;
    int *cnt = &t->n;
    for (int d = 0; d < t->depth; d++) {
        kl_inst_t *ifi = &(*a)[t->stack[d].index];
        if (t->stack[d].in_else) {
            a = &ifi->else_body;
            cnt = &ifi->nelse;
        } else {
            a = &ifi->then_body;
            cnt = &ifi->nthen;
        }
    }
    *arr = a;
    *n = cnt;
}

kl_inst_t *kl_trace__append(kl_trace_t *t, kl_op op)
{
    kl_inst_t **arr;
    int *n;
    kl_trace__cur_body(t, &arr, &n);
    if (arr == &t->insts) {
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 32;
            t->insts =
                kl_xrealloc(t->insts, (size_t)t->cap * sizeof(kl_inst_t));
        }
    } else {
        *arr = kl_xrealloc(*arr, (size_t)(*n + 1) * sizeof(kl_inst_t));
    }
    kl_inst_t *in = &(*arr)[(*n)++];
    memset(in, 0, sizeof *in);
    in->op = op;
    return in;
}

static int64_t s_rv(kl_trace_t *t)
{
    return t->next_rv++;
}

void kl_tr_get_loops(kl_trace_t *t, int nloops, int64_t *outs)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_GET_LOOPS);
    for (int i = 0; i < nloops && i < KL_INST_MAX; i++)
        outs[i] = in->out[in->nout++] = s_rv(t);
}

void kl_tr_split(kl_trace_t *t, int64_t loop, const int64_t *factors, int n,
                 int64_t *outs)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_SPLIT);
    in->in[in->nin++] = loop;
    for (int i = 0; i < n && i < KL_INST_MAX - 1; i++) {
        in->in[in->nin++] = factors[i];
        outs[i] = in->out[in->nout++] = s_rv(t);
    }
}

void kl_tr_reorder(kl_trace_t *t, const int64_t *loops, int n)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_REORDER);
    for (int i = 0; i < n && i < KL_INST_MAX; i++)
        in->in[in->nin++] = loops[i];
}

int64_t kl_tr_fuse(kl_trace_t *t, const int64_t *loops, int n)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_FUSE);
    for (int i = 0; i < n && i < KL_INST_MAX; i++)
        in->in[in->nin++] = loops[i];
    return in->out[in->nout++] = s_rv(t);
}

static void s_one(kl_trace_t *t, kl_op op, int64_t loop)
{
    kl_inst_t *in = kl_trace__append(t, op);
    in->in[in->nin++] = loop;
}

void kl_tr_parallel(kl_trace_t *t, int64_t loop)
{
    s_one(t, KL_OP_PARALLEL, loop);
}

void kl_tr_vectorize(kl_trace_t *t, int64_t loop)
{
    s_one(t, KL_OP_VECTORIZE, loop);
}

void kl_tr_unroll(kl_trace_t *t, int64_t loop)
{
    s_one(t, KL_OP_UNROLL, loop);
}

static void s_str(kl_inst_t *in, const char *s)
{
    snprintf(in->strs[in->nstrs++], sizeof in->strs[0], "%s", s);
}

void kl_tr_bind(kl_trace_t *t, int64_t loop, kl_loop_kind kind)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_BIND);
    in->in[in->nin++] = loop;
    s_str(in, kl_loop_kind_name(kind));
}

int64_t kl_tr_cache_read(kl_trace_t *t, const char *tensor, kl_scope scope)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_CACHE_READ);
    s_str(in, tensor);
    s_str(in, kl_scope_name(scope));
    return in->out[in->nout++] = s_rv(t);
}

int64_t kl_tr_cache_write(kl_trace_t *t, kl_scope scope)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_CACHE_WRITE);
    s_str(in, kl_scope_name(scope));
    return in->out[in->nout++] = s_rv(t);
}

void kl_tr_compute_at(kl_trace_t *t, int64_t stage, int64_t loop)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_COMPUTE_AT);
    in->in[in->nin++] = stage;
    in->in[in->nin++] = loop;
}

void kl_tr_reverse_compute_at(kl_trace_t *t, int64_t stage, int64_t loop)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_REVERSE_COMPUTE_AT);
    in->in[in->nin++] = stage;
    in->in[in->nin++] = loop;
}

void kl_tr_annotate(kl_trace_t *t, int64_t loop, const char *key, int64_t value)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_ANNOTATE);
    in->in[in->nin++] = loop;
    s_str(in, key);
    in->ints[in->nints++] = value;
}

void kl_tr_winograd(kl_trace_t *t, int m)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_WINOGRAD);
    in->ints[in->nints++] = m;
}

void kl_tr_tensorize(kl_trace_t *t, int64_t loop, const char *intrin)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_TENSORIZE);
    in->in[in->nin++] = loop;
    s_str(in, intrin);
}

void kl_tr_sample_perfect_tile_whole(kl_trace_t *t, int64_t loop, int n,
                                     int64_t max_innermost, int64_t whole,
                                     int64_t *outs)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_SAMPLE_PERFECT_TILE);
    in->in[in->nin++] = loop;
    in->ints[in->nints++] = n;
    in->ints[in->nints++] = max_innermost;
    if (whole > 0)
        in->ints[in->nints++] = whole;
    for (int i = 0; i < n && i < KL_INST_MAX; i++)
        outs[i] = in->out[in->nout++] = s_rv(t);
}

void kl_tr_sample_perfect_tile(kl_trace_t *t, int64_t loop, int n,
                               int64_t max_innermost, int64_t *outs)
{
    kl_tr_sample_perfect_tile_whole(t, loop, n, max_innermost, 0, outs);
}

int64_t kl_tr_sample_categorical(kl_trace_t *t, const int64_t *values,
                                 const double *probs, int n)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_SAMPLE_CATEGORICAL);
    for (int i = 0; i < n && i < KL_INST_MAX; i++) {
        in->ints[in->nints++] = values[i];
        in->floats[in->nfloats++] = probs[i];
    }
    return in->out[in->nout++] = s_rv(t);
}

int64_t kl_tr_sample_compute_location(kl_trace_t *t, int64_t stage,
                                      const int64_t *cands, int n)
{
    kl_inst_t *in = kl_trace__append(t, KL_OP_SAMPLE_COMPUTE_LOCATION);
    in->in[in->nin++] = stage;
    for (int i = 0; i < n && i < KL_INST_MAX - 1; i++)
        in->in[in->nin++] = cands[i];
    return in->out[in->nout++] = s_rv(t);
}

static int s_pred_ok(const char *pred, char *err)
{
    if (strlen(pred) >= KL_PRED_MAX)
        return kl_seterr(err, KL_ERR_INVAL, "predicate longer than %d bytes",
                         KL_PRED_MAX - 1);
    kl_pred_t *p = NULL;
    int rc = kl_pred_parse(pred, &p, err);
    kl_pred_free(&p);
    return rc;
}

int kl_tr_reject_if(kl_trace_t *t, const char *pred, char *err)
{
    int rc = s_pred_ok(pred, err);
    if (rc)
        return rc;
    kl_inst_t *in = kl_trace__append(t, KL_OP_REJECT_IF);
    snprintf(in->pred, sizeof in->pred, "%s", pred);
    return KL_OK;
}

int kl_tr_if(kl_trace_t *t, const char *pred, char *err)
{
    if (t->depth >= KL_TRACE_MAX_DEPTH)
        return kl_seterr(err, KL_ERR_INVAL, "if: nested deeper than %d",
                         KL_TRACE_MAX_DEPTH);
    int rc = s_pred_ok(pred, err);
    if (rc)
        return rc;
    kl_inst_t *in = kl_trace__append(t, KL_OP_IF);
    snprintf(in->pred, sizeof in->pred, "%s", pred);
    kl_inst_t **arr;
    int *n;
    kl_trace__cur_body(t, &arr, &n);
    t->stack[t->depth].index = *n - 1;
    t->stack[t->depth].in_else = false;
    t->depth++;
    return KL_OK;
}

int kl_tr_else(kl_trace_t *t, char *err)
{
    if (t->depth == 0 || t->stack[t->depth - 1].in_else)
        return kl_seterr(err, KL_ERR_INVAL, "else: no open if");
    t->stack[t->depth - 1].in_else = true;
    return KL_OK;
}

int kl_tr_end(kl_trace_t *t, char *err)
{
    if (t->depth == 0)
        return kl_seterr(err, KL_ERR_INVAL, "end: no open if");
    t->depth--;
    return KL_OK;
}

/* ---- proto ---- */

static Kiln__Inst **s_to_pb(const kl_inst_t *v, int n)
{
    if (n == 0)
        return NULL;
    Kiln__Inst **out = kl_xcalloc((size_t)n, sizeof *out);
    for (int i = 0; i < n; i++) {
        const kl_inst_t *in = &v[i];
        Kiln__Inst *m = kl_xmalloc(sizeof *m);
        kiln__inst__init(m);
        m->op = (char *)kl_op_name(in->op);
        m->n_inputs = (size_t)in->nin;
        m->inputs = (int64_t *)in->in;
        m->n_outputs = (size_t)in->nout;
        m->outputs = (int64_t *)in->out;
        m->n_int_attrs = (size_t)in->nints;
        m->int_attrs = (int64_t *)in->ints;
        m->n_float_attrs = (size_t)in->nfloats;
        m->float_attrs = (double *)in->floats;
        m->n_str_attrs = (size_t)in->nstrs;
        m->str_attrs = kl_xcalloc(2, sizeof(char *));
        for (int k = 0; k < in->nstrs; k++)
            m->str_attrs[k] = (char *)in->strs[k];
        m->has_decision = in->has_decision;
        m->n_decision = (size_t)in->ndec;
        m->decision = (int64_t *)in->dec;
        m->predicate = (char *)in->pred;
        m->n_then_body = (size_t)in->nthen;
        m->then_body = s_to_pb(in->then_body, in->nthen);
        m->n_else_body = (size_t)in->nelse;
        m->else_body = s_to_pb(in->else_body, in->nelse);
        out[i] = m;
    }
    return out;
}

static void s_pb_free(Kiln__Inst **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s_pb_free(v[i]->then_body, v[i]->n_then_body);
        s_pb_free(v[i]->else_body, v[i]->n_else_body);
        free(v[i]->str_attrs);
        free(v[i]);
    }
    free(v);
}

void kl_trace_to_proto(const kl_trace_t *t, uint8_t **buf, size_t *len)
{
    Kiln__Trace m;
    kiln__trace__init(&m);
    m.space = (char *)t->space;
    m.n_insts = (size_t)t->n;
    m.insts = s_to_pb(t->insts, t->n);
    size_t n = kiln__trace__get_packed_size(&m);
    *buf = kl_xmalloc(n ? n : 1);
    *len = kiln__trace__pack(&m, *buf);
    s_pb_free(m.insts, m.n_insts);
}

static int s_copy_ints(int64_t *dst, int *n, const int64_t *src, size_t m,
                       const char *what, char *err)
{
    if (m > KL_INST_MAX)
        return kl_seterr(err, KL_ERR_PROTO, "trace: %zu %s (at most %d)", m,
                         what, KL_INST_MAX);
    if (m)
        memcpy(dst, src, m * sizeof(int64_t));
    *n = (int)m;
    return KL_OK;
}

static int s_from_pb(Kiln__Inst **v, size_t n, kl_inst_t **out, int *nout,
                     int depth, char *err)
{
    *out = NULL;
    *nout = 0;
    if (n == 0)
        return KL_OK;
    if (depth > KL_TRACE_MAX_DEPTH || n > 100000)
        return kl_seterr(err, KL_ERR_PROTO, "trace: too deep or too long");
    kl_inst_t *r = kl_xcalloc(n, sizeof *r);
    int rc = KL_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        const Kiln__Inst *m = v[i];
        kl_inst_t *in = &r[i];
        *nout = (int)i + 1;
        if (kl_op_parse(m->op ? m->op : "", &in->op)) {
            rc = kl_seterr(err, KL_ERR_PROTO, "trace: unknown op '%s'",
                           m->op ? m->op : "");
            break;
        }
        if ((rc = s_copy_ints(in->in, &in->nin, m->inputs, m->n_inputs,
                              "inputs", err)) ||
            (rc = s_copy_ints(in->out, &in->nout, m->outputs, m->n_outputs,
                              "outputs", err)) ||
            (rc = s_copy_ints(in->ints, &in->nints, m->int_attrs,
                              m->n_int_attrs, "int attrs", err)) ||
            (rc = s_copy_ints(in->dec, &in->ndec, m->decision, m->n_decision,
                              "decisions", err)))
            break;
        if (m->n_float_attrs > KL_INST_MAX || m->n_str_attrs > 2) {
            rc = kl_seterr(err, KL_ERR_PROTO, "trace: too many attributes");
            break;
        }
        in->nfloats = (int)m->n_float_attrs;
        for (size_t k = 0; k < m->n_float_attrs; k++)
            in->floats[k] = m->float_attrs[k];
        in->nstrs = (int)m->n_str_attrs;
        for (size_t k = 0; k < m->n_str_attrs; k++)
            snprintf(in->strs[k], sizeof in->strs[k], "%s", m->str_attrs[k]);
        in->has_decision = m->has_decision;
        if (m->predicate && strlen(m->predicate) >= KL_PRED_MAX) {
            rc = kl_seterr(err, KL_ERR_PROTO, "trace: predicate too long");
            break;
        }
        snprintf(in->pred, sizeof in->pred, "%s",
                 m->predicate ? m->predicate : "");
        if ((rc = s_from_pb(m->then_body, m->n_then_body, &in->then_body,
                            &in->nthen, depth + 1, err)) ||
            (rc = s_from_pb(m->else_body, m->n_else_body, &in->else_body,
                            &in->nelse, depth + 1, err)))
            break;
    }
    if (rc) {
        kl_trace__insts_free(r, *nout);
        *nout = 0;
        return rc;
    }
    *out = r;
    return KL_OK;
}

int kl_trace_from_proto(const uint8_t *buf, size_t len, kl_trace_t **out,
                        char *err)
{
    Kiln__Trace *m = kiln__trace__unpack(NULL, len, buf);
    if (!m)
        return kl_seterr(err, KL_ERR_PROTO,
                         "trace: %zu bytes do not decode as kiln.Trace", len);
    kl_trace_t *t = kl_trace_new(m->space);
    int rc = s_from_pb(m->insts, m->n_insts, &t->insts, &t->n, 0, err);
    kiln__trace__free_unpacked(m, NULL);
    if (rc) {
        kl_trace_free(&t);
        return rc;
    }
    t->cap = t->n;
    t->next_rv = kl_trace__insts_max_rv(t->insts, t->n) + 1;
    *out = t;
    return KL_OK;
}

int64_t kl_trace__insts_max_rv(const kl_inst_t *v, int n)
{
    int64_t m = -1;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < v[i].nout; k++)
            if (v[i].out[k] > m)
                m = v[i].out[k];
        int64_t a = kl_trace__insts_max_rv(v[i].then_body, v[i].nthen);
        int64_t b = kl_trace__insts_max_rv(v[i].else_body, v[i].nelse);
        m = a > m ? a : m;
        m = b > m ? b : m;
    }
    return m;
}

void kl_trace_hash(const kl_trace_t *t, uint8_t out[16])
{
    uint8_t *buf;
    size_t len;
    kl_trace_to_proto(t, &buf, &len);
    kl_hash128(buf, len, out);
    free(buf);
}
