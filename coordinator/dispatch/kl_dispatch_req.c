/* kl_dispatch_req.c - requests (deep copies of submitted batches) and the
 * result objects handed to the caller. */
#include "kl_dispatch_core.h"

#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_target.h"
#include "kl_util.h"

static char *s_dup(const char *s)
{
    return kl_xstrdup(s ? s : "");
}

static void *s_memdup(const void *p, size_t n)
{
    if (n == 0)
        return NULL;
    void *q = kl_xmalloc(n);
    memcpy(q, p, n);
    return q;
}

static int s_check(const kl_dispatch_batch_t *b, char *err)
{
    if (!b || !b->workload_key)
        return kl_seterr(err, KL_ERR_INVAL, "submit: no workload key");
    if (!b->target || !*b->target)
        return kl_seterr(err, KL_ERR_INVAL, "submit: no target");
    if (b->n_candidates == 0 || !b->candidates)
        return kl_seterr(err, KL_ERR_INVAL, "submit: no candidates");
    if (b->n_args > KL_NET_MAX_ARGS)
        return kl_seterr(err, KL_ERR_INVAL, "submit: %zu args (at most %d)",
                         b->n_args, KL_NET_MAX_ARGS);
    for (size_t i = 0; i < b->n_args; i++)
        if (!b->args[i] || b->args[i]->n_shape > KL_NET_MAX_DIMS)
            return kl_seterr(err, KL_ERR_INVAL,
                             "submit: arg %zu is missing or has more than %d "
                             "dimensions",
                             i, KL_NET_MAX_DIMS);
    if (strlen(b->target) > KL_NET_MAX_STRING ||
        (b->reference_entry && strlen(b->reference_entry) > KL_NET_MAX_STRING))
        return kl_seterr(err, KL_ERR_INVAL,
                         "submit: target or reference entry over %d bytes",
                         KL_NET_MAX_STRING);
    if (b->reference_source && strlen(b->reference_source) > KL_NET_MAX_SOURCE)
        return kl_seterr(err, KL_ERR_INVAL,
                         "submit: reference source over %u bytes",
                         KL_NET_MAX_SOURCE);
    if (b->evaluator && b->evaluator->repeat > KL_NET_MAX_SAMPLES)
        return kl_seterr(err, KL_ERR_INVAL, "submit: repeat %u over %u",
                         b->evaluator->repeat, KL_NET_MAX_SAMPLES);
    for (size_t i = 0; i < b->n_args; i++)
        if (b->args[i] && b->args[i]->name &&
            strlen(b->args[i]->name) > KL_NET_MAX_STRING)
            return kl_seterr(err, KL_ERR_INVAL, "submit: arg %zu: long name",
                             i);
    for (size_t i = 0; i < b->n_candidates; i++) {
        const Kiln__Candidate *c = b->candidates[i];
        if (!c || !c->source || !*c->source)
            return kl_seterr(err, KL_ERR_INVAL,
                             "submit: candidate %zu has no source", i);
        if (!c->entry || !*c->entry)
            return kl_seterr(err, KL_ERR_INVAL,
                             "submit: candidate %zu has no entry", i);
        if (strlen(c->entry) > KL_NET_MAX_STRING)
            return kl_seterr(err, KL_ERR_INVAL,
                             "submit: candidate %zu: entry over %d bytes", i,
                             KL_NET_MAX_STRING);
        if (c->trace.len > KL_NET_MAX_SOURCE)
            return kl_seterr(err, KL_ERR_INVAL,
                             "submit: candidate %zu: trace over %u bytes", i,
                             KL_NET_MAX_SOURCE);
        if (strlen(c->source) > KL_NET_MAX_SOURCE)
            return kl_seterr(err, KL_ERR_INVAL,
                             "submit: candidate %zu: source over %u bytes", i,
                             KL_NET_MAX_SOURCE);
    }
    return KL_OK;
}

/* Distinct caller ids: sort a copy and look at neighbours. */
static int s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int s_check_ids(const kl_dispatch_batch_t *b, char *err)
{
    uint64_t *ids = kl_xmalloc(b->n_candidates * sizeof *ids);
    for (size_t i = 0; i < b->n_candidates; i++)
        ids[i] = b->candidates[i]->id;
    qsort(ids, b->n_candidates, sizeof *ids, s_cmp_u64);
    int rc = KL_OK;
    for (size_t i = 1; i < b->n_candidates && rc == KL_OK; i++)
        if (ids[i] == ids[i - 1])
            rc = kl_seterr(err, KL_ERR_INVAL,
                           "submit: candidate id %llu given twice",
                           (unsigned long long)ids[i]);
    free(ids);
    return rc;
}

static void s_copy_cand(Kiln__Candidate *d, const Kiln__Candidate *s,
                        size_t idx)
{
    kiln__candidate__init(d);
    d->id = idx;
    d->source = s_dup(s->source);
    d->entry = s_dup(s->entry);
    d->n_grid = s->n_grid;
    d->grid = s_memdup(s->grid, s->n_grid * sizeof *s->grid);
    d->n_block = s->n_block;
    d->block = s_memdup(s->block, s->n_block * sizeof *s->block);
    d->shared_bytes = s->shared_bytes;
    d->trace.len = s->trace.len;
    d->trace.data = s_memdup(s->trace.data, s->trace.len);
}

static Kiln__KernelArg *s_copy_arg(const Kiln__KernelArg *s)
{
    Kiln__KernelArg *d = kl_xmalloc(sizeof *d);
    kiln__kernel_arg__init(d);
    d->name = s_dup(s->name);
    d->dtype = s->dtype;
    d->role = s->role;
    d->n_shape = s->n_shape;
    d->shape = s_memdup(s->shape, s->n_shape * sizeof *s->shape);
    return d;
}

int kl_dreq_new(kl_dreq_t **out, const kl_dispatch_batch_t *b, char *err)
{
    int rc = s_check(b, err);
    if (rc == KL_OK)
        rc = s_check_ids(b, err);
    if (rc != KL_OK)
        return rc;
    kl_dreq_t *r = kl_xcalloc(1, sizeof *r);
    memcpy(r->key, b->workload_key, 16);
    r->target = s_dup(b->target);
    r->n_args = b->n_args;
    r->args = kl_xcalloc(b->n_args + 1, sizeof *r->args);
    r->need_minor = 1;
    for (size_t i = 0; i < b->n_args; i++) {
        r->args[i] = s_copy_arg(b->args[i]);
        if (b->args[i]->dtype == KILN__DTYPE__DTYPE_U8 ||
            b->args[i]->dtype == KILN__DTYPE__DTYPE_S8)
            r->need_minor = 4;
    }
    r->ref_source = s_dup(b->reference_source);
    r->ref_entry = s_dup(b->reference_entry);
    kiln__evaluator__init(&r->evaluator);
    if (b->evaluator) {
        r->evaluator = *b->evaluator;
        r->has_evaluator = true;
    }
    r->run_s = r->evaluator.timeout_ms ? r->evaluator.timeout_ms / 1e3 : 10.0;
    r->n = b->n_candidates;
    r->cands = kl_xcalloc(r->n, sizeof *r->cands);
    r->cand_ptrs = kl_xcalloc(r->n, sizeof *r->cand_ptrs);
    r->user_ids = kl_xcalloc(r->n, sizeof *r->user_ids);
    r->cand_bytes = kl_xcalloc(r->n, sizeof *r->cand_bytes);
    r->state = kl_xcalloc(r->n, 1);
    r->attempts = kl_xcalloc(r->n, 1);
    for (size_t i = 0; i < r->n; i++) {
        s_copy_cand(&r->cands[i], b->candidates[i], i);
        r->cand_ptrs[i] = &r->cands[i];
        r->user_ids[i] = b->candidates[i]->id;
        r->cand_bytes[i] =
            (uint32_t)(strlen(r->cands[i].source) + r->cands[i].trace.len + 64);
    }
    *out = r;
    return KL_OK;
}

void kl_dreq_free(kl_dreq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_dreq_t *r = *self_p;
    for (size_t i = 0; i < r->n_args; i++) {
        free(r->args[i]->name);
        free(r->args[i]->shape);
        free(r->args[i]);
    }
    free(r->args);
    for (size_t i = 0; i < r->n; i++) {
        free(r->cands[i].source);
        free(r->cands[i].entry);
        free(r->cands[i].grid);
        free(r->cands[i].block);
        free(r->cands[i].trace.data);
    }
    free(r->cands);
    free(r->cand_ptrs);
    free(r->user_ids);
    free(r->cand_bytes);
    free(r->state);
    free(r->attempts);
    free(r->target);
    free(r->ref_source);
    free(r->ref_entry);
    free(r);
    *self_p = NULL;
}

/* A result and its strings in one allocation. */
static kl_dispatch_result_t *s_result_alloc(const char *agent, const char *host,
                                            const char *dev_name,
                                            const char *dev_target)
{
    const char *s[4] = {agent ? agent : "", host ? host : "",
                        dev_name ? dev_name : "", dev_target ? dev_target : ""};
    size_t len[4], total = sizeof(kl_dispatch_result_t);
    for (int i = 0; i < 4; i++) {
        len[i] = strlen(s[i]) + 1;
        total += len[i];
    }
    kl_dispatch_result_t *r = kl_xcalloc(1, total);
    char *p = (char *)(r + 1);
    const char **dst[4] = {&r->agent, &r->hostname, &r->device_name,
                           &r->device_target};
    for (int i = 0; i < 4; i++) {
        memcpy(p, s[i], len[i]);
        *dst[i] = p;
        p += len[i];
    }
    return r;
}

kl_dispatch_result_t *kl_dcore_make_result(const kl_dreq_t *req, size_t idx,
                                           int status, const char *error,
                                           double now)
{
    kl_dispatch_result_t *r = s_result_alloc(NULL, NULL, NULL, NULL);
    Kiln__MeasureResult *m = kl_xmalloc(sizeof *m);
    kiln__measure_result__init(m);
    m->request_id = req->id;
    m->candidate_id = req->user_ids[idx];
    m->status = (Kiln__Status)status;
    m->error = kl_xstrdup(error ? error : "");
    r->result = m;
    r->request_id = req->id;
    r->candidate_id = req->user_ids[idx];
    r->index = idx;
    r->attempts = req->attempts[idx];
    r->turnaround_s = now - req->t_submit;
    return r;
}

kl_dispatch_result_t *kl_dcore_wrap_result(const kl_dreq_t *req, size_t idx,
                                           const kl_dagent_t *a,
                                           Kiln__Envelope *env, double now)
{
    uint32_t dev = 0;
    for (size_t i = 0; i < a->n_dev; i++)
        if (kl_dispatch_device_match(req->target, a->dev_target[i],
                                     a->dev_features[i])) {
            dev = (uint32_t)i;
            break;
        }
    kl_dispatch_result_t *r =
        s_result_alloc(a->name, a->hostname, a->n_dev ? a->dev_name[dev] : "",
                       a->n_dev ? a->dev_target[dev] : "");
    r->result = env->result;
    r->result->candidate_id = req->user_ids[idx];
    r->request_id = req->id;
    r->candidate_id = req->user_ids[idx];
    r->index = idx;
    r->attempts = req->attempts[idx];
    r->turnaround_s = now - req->t_submit;
    r->priv_ = env;
    return r;
}

void kl_dispatch_result_free(kl_dispatch_result_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_dispatch_result_t *r = *self_p;
    if (r->priv_) {
        Kiln__Envelope *env = r->priv_;
        kl_net_envelope_free(&env);
    } else if (r->result) {
        free(r->result->error);
        free(r->result);
    }
    free(r);
    *self_p = NULL;
}

bool kl_dispatch_target_match(const char *task, const char *dev)
{
    return kl_dispatch_device_match(task, dev, NULL);
}

static bool s_base_match(const char *task, const char *dev);

bool kl_dispatch_device_match(const char *task, const char *dev,
                              const char *features)
{
    if (!task || !dev)
        return false;
    char base[160];
    size_t n = kl_target_unrefined_len(task);
    if (n >= sizeof base)
        return false;
    memcpy(base, task, n);
    base[n] = '\0';
    /* The device's own target is never refined: its features come apart. */
    return !strchr(dev, '+') && s_base_match(base, dev) &&
           kl_target_features_match(task, features);
}

static bool s_base_match(const char *task, const char *dev)
{
    if (!task || !dev || !*task)
        return false;
    /* A simulated device serves simulated tasks only, and the other way
     * round (kl_target.h); within each, the same rule. */
    if (kl_target_is_sim(task) != kl_target_is_sim(dev))
        return false;
    task = kl_target_base(task);
    dev = kl_target_base(dev);
    if (!*task)
        return false;
    if (strcmp(task, dev) == 0)
        return true;
    /* A bare kind ("cpu", "cuda") matches every device of that kind. */
    if (strchr(task, '/'))
        return false;
    size_t n = strlen(task);
    return strncmp(task, dev, n) == 0 && dev[n] == '/';
}
