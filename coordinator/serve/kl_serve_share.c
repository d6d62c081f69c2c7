/* kl_serve_share.c - the fair share between jobs: the targets asked for
 * and their room, the chunks of requests handed to dispatch (stride
 * scheduling, least pass first), and their results sent on to the jobs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_serve_int.h"
#include "kl_util.h"

/* ---- chunks and targets ------------------------------------------------- */

/* disp_id -> index in s->chunks: open addressing, linear probing,
 * backward-shift delete (dispatch's ids are never 0). */
static size_t s_mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static void s_cmap_put(kl_serve_t *s, uint64_t key, size_t idx);

static void s_cmap_grow(kl_serve_t *s)
{
    uint64_t *keys = s->chunk_keys;
    size_t *idx = s->chunk_idx, cap = s->chunk_map_cap;
    s->chunk_map_cap = cap ? 2 * cap : 256;
    s->chunk_keys = kl_xcalloc(s->chunk_map_cap, sizeof *s->chunk_keys);
    s->chunk_idx = kl_xcalloc(s->chunk_map_cap, sizeof *s->chunk_idx);
    for (size_t i = 0; i < cap; i++)
        if (keys[i])
            s_cmap_put(s, keys[i], idx[i]);
    free(keys);
    free(idx);
}

/* Sets (or adds) key; the map holds at most n_chunks entries. */
static void s_cmap_put(kl_serve_t *s, uint64_t key, size_t idx)
{
    if (2 * (s->n_chunks + 1) > s->chunk_map_cap)
        s_cmap_grow(s);
    size_t mask = s->chunk_map_cap - 1, i = s_mix(key) & mask;
    while (s->chunk_keys[i] && s->chunk_keys[i] != key)
        i = (i + 1) & mask;
    s->chunk_keys[i] = key;
    s->chunk_idx[i] = idx;
}

/* Index in s->chunks of disp_id, or s->n_chunks when not there. */
static size_t s_cmap_get(const kl_serve_t *s, uint64_t key)
{
    if (!s->chunk_map_cap)
        return s->n_chunks;
    size_t mask = s->chunk_map_cap - 1, i = s_mix(key) & mask;
    for (; s->chunk_keys[i]; i = (i + 1) & mask)
        if (s->chunk_keys[i] == key)
            return s->chunk_idx[i];
    return s->n_chunks;
}

static void s_cmap_del(kl_serve_t *s, uint64_t key)
{
    if (!s->chunk_map_cap)
        return;
    size_t mask = s->chunk_map_cap - 1, i = s_mix(key) & mask;
    while (s->chunk_keys[i] && s->chunk_keys[i] != key)
        i = (i + 1) & mask;
    if (!s->chunk_keys[i])
        return;
    s->chunk_keys[i] = 0;
    for (size_t j = (i + 1) & mask; s->chunk_keys[j]; j = (j + 1) & mask) {
        size_t home = s_mix(s->chunk_keys[j]) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            s->chunk_keys[i] = s->chunk_keys[j];
            s->chunk_idx[i] = s->chunk_idx[j];
            s->chunk_keys[j] = 0;
            i = j;
        }
    }
}

/* Removes chunk k (answered in full): the last one takes its place. */
static void s_chunk_remove(kl_serve_t *s, size_t k)
{
    s_cmap_del(s, s->chunks[k].disp_id);
    s->chunks[k] = s->chunks[--s->n_chunks];
    if (k < s->n_chunks)
        s_cmap_put(s, s->chunks[k].disp_id, k);
}

/* The index in s->tgts of target, added when new. */
size_t kl_serve__target(kl_serve_t *s, const char *target)
{
    for (size_t i = 0; i < s->n_tgts; i++)
        if (strcmp(s->tgts[i].name, target) == 0)
            return i;
    s->tgts = kl_xrealloc(s->tgts, (s->n_tgts + 1) * sizeof *s->tgts);
    s->tgts[s->n_tgts] = (kl_starget_t){.name = kl_xstrdup(target)};
    return s->n_tgts++;
}

/* Cancels at the agents what dispatch holds of r. */
void kl_serve__cancel_out(kl_serve_t *s, kl_sreq_t *r)
{
    for (size_t i = 0; i < s->n_chunks; i++)
        if (s->chunks[i].req == r)
            kl_dispatch_cancel(s->disp, s->chunks[i].disp_id, NULL);
}

/* ---- the fair share ----------------------------------------------------- */

/* Free credit of target t for the head: its agents' credit (as of the last
 * read of the agent list) minus what the head has out at dispatch. */
static size_t s_room(kl_serve_t *s, kl_starget_t *t)
{
    if (t->cap_gen != s->agents_gen) {
        t->cap = kl_serve__capacity(s, t->name, NULL);
        t->cap_gen = s->agents_gen;
    }
    return t->out < t->cap ? t->cap - t->out : 0;
}

/* The first request of j with queued candidates whose target has room. */
static kl_sreq_t *s_ready(kl_serve_t *s, kl_sjob_t *j, size_t *room)
{
    /* A request's queue only shrinks: the ones handed out in full stay
     * behind q_from until answered. */
    while (j->q_from < j->n_reqs &&
           j->reqs[j->q_from]->next >=
               j->reqs[j->q_from]->env->request->n_candidates)
        j->q_from++;
    for (size_t i = j->q_from; i < j->n_reqs; i++) {
        kl_sreq_t *r = j->reqs[i];
        if (r->next >= r->env->request->n_candidates)
            continue;
        size_t n = s_room(s, &s->tgts[r->tgt]);
        if (n) {
            *room = n;
            return r;
        }
    }
    return NULL;
}

static void s_submit_chunk(kl_serve_t *s, kl_sreq_t *r, size_t n)
{
    const Kiln__MeasureRequest *m = r->env->request;
    kl_dispatch_batch_t b = {.workload_key = m->workload_key.data,
                             .target = m->target,
                             .args = m->args,
                             .n_args = m->n_args,
                             .reference_source = m->reference_source,
                             .reference_entry = m->reference_entry,
                             .evaluator = m->evaluator,
                             .candidates = m->candidates + r->next,
                             .n_candidates = n};
    char err[KL_ERRMSG_LEN];
    uint64_t id = 0;
    size_t off = r->next;
    r->next += n;
    if (m->workload_key.len != 16 ||
        kl_dispatch_submit(s->disp, &b, &id, err) != KL_OK) {
        if (m->workload_key.len != 16)
            snprintf(err, sizeof err, "workload_key of %zu bytes (want 16)",
                     m->workload_key.len);
        for (size_t i = off; i < off + n; i++)
            kl_serve__answer(s, r, i, KILN__STATUS__STATUS_INVALID, err);
        r->n_done += n;
        return;
    }
    if (s->n_chunks == s->cap_chunks) {
        s->cap_chunks = s->cap_chunks ? 2 * s->cap_chunks : 64;
        s->chunks = kl_xrealloc(s->chunks, s->cap_chunks * sizeof *s->chunks);
    }
    s->chunks[s->n_chunks] = (kl_schunk_t){id, r, off, n, 0};
    s_cmap_put(s, id, s->n_chunks);
    s->n_chunks++;
    s->tgts[r->tgt].out += n;
    r->n_out += n;
}

/* Hands out work while some target has room: each time to the job of
 * least pass among those with a ready request. */
void kl_serve__schedule(kl_serve_t *s)
{
    for (;;) {
        bool room = false;
        for (size_t t = 0; t < s->n_tgts && !room; t++)
            room = s_room(s, &s->tgts[t]) > 0;
        if (!room)
            return; /* every agent busy: nothing to decide */
        kl_sjob_t *best = NULL;
        kl_sreq_t *best_r = NULL;
        size_t best_room = 0;
        for (size_t i = 0; i < s->n_jobs; i++) {
            kl_sjob_t *j = s->jobs[i];
            size_t room;
            kl_sreq_t *r;
            if (j->gone || j->n_backlog || (best && j->pass >= best->pass) ||
                !(r = s_ready(s, j, &room)))
                continue;
            best = j;
            best_r = r;
            best_room = room;
        }
        if (!best)
            return;
        size_t left = best_r->env->request->n_candidates - best_r->next;
        size_t n = left < best_room ? left : best_room;
        if (n > KL_SERVE_CHUNK)
            n = KL_SERVE_CHUNK;
        s_submit_chunk(s, best_r, n);
        best->pass += (double)n / best->weight;
        kl_serve__maybe_free(s, best_r);
    }
}

/* The least pass of the jobs with queued work (a job that comes back from
 * idle starts there, so that it gets no burst for the time it was idle). */
double kl_serve__min_pass(const kl_serve_t *s, const kl_sjob_t *except)
{
    double m = -1;
    for (size_t i = 0; i < s->n_jobs; i++) {
        const kl_sjob_t *j = s->jobs[i];
        bool queued = false;
        for (size_t k = j->q_from; k < j->n_reqs && !queued; k++)
            queued = j->reqs[k]->next < j->reqs[k]->env->request->n_candidates;
        if (j != except && !j->gone && queued && (m < 0 || j->pass < m))
            m = j->pass;
    }
    return m;
}

/* ---- results from dispatch ---------------------------------------------- */

static void s_forward(kl_serve_t *s, kl_dispatch_result_t *dr)
{
    size_t k = s_cmap_get(s, dr->request_id);
    if (k == s->n_chunks)
        return; /* not ours any more */
    kl_schunk_t *c = &s->chunks[k];
    kl_sreq_t *r = c->req;
    size_t index = c->off + dr->index;
    c->answered++;
    s->tgts[r->tgt].out--;
    r->n_out--;
    r->n_done++;
    if (c->answered == c->n)
        s_chunk_remove(s, k);
    if (!r->job->gone) {
        Kiln__Envelope env = KILN__ENVELOPE__INIT;
        Kiln__JobResult jr = KILN__JOB_RESULT__INIT;
        dr->result->request_id = r->id;
        dr->result->candidate_id = dr->candidate_id;
        jr.result = dr->result;
        jr.index = (uint32_t)index;
        jr.agent = (char *)(dr->agent ? dr->agent : "");
        jr.hostname = (char *)(dr->hostname ? dr->hostname : "");
        jr.device_name = (char *)(dr->device_name ? dr->device_name : "");
        jr.device_target = (char *)(dr->device_target ? dr->device_target : "");
        jr.attempts = dr->attempts;
        jr.turnaround_s = kl_now_s() - r->t_recv;
        env.body_case = KILN__ENVELOPE__BODY_JOB_RESULT;
        env.job_result = &jr;
        kl_serve__send_job(s, r->job, &env);
        s->n_forwarded++;
        if (!r->job->done++)
            r->job->t_first = kl_now_s();
    }
    kl_serve__maybe_free(s, r);
}

void kl_serve__drain_results(kl_serve_t *s)
{
    kl_dispatch_result_t *dr = NULL;
    size_t n = 0;
    while (kl_dispatch_recv(s->disp, &dr, 0, NULL) == KL_OK) {
        s_forward(s, dr);
        kl_dispatch_result_free(&dr);
        /* Credit freed goes back out before the rest of a long batch is
         * forwarded, so that agents wait less. */
        if (++n % 64 == 0)
            kl_serve__schedule(s);
    }
}
