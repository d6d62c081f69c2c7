/* kl_serve_tenants.c - the head node's clients kept apart (kl_serve.h,
 * "Tenants"): job names bound to the client key that opened them, the
 * operator keys of KEYS/operators, and the per-job limits on what a job's
 * requests may hold. A client is the key kl_net_recv reports for each
 * message (the ZAP handler's User-Id), never a name it claims. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_serve_int.h"
#include "kl_util.h"

/* ---- operators ----------------------------------------------------------- */

static void s_ops_read(kl_serve_t *s, double now)
{
    char **keys = NULL, err[KL_ERRMSG_LEN];
    size_t n = 0;
    int rc = kl_net_read_key_dir(s->ops_dir, &keys, &n, err);
    s->ops_at = now;
    if (rc != KL_OK && rc != KL_ERR_NOTFOUND) {
        kl_warn("serve: operators: %s (keeping the %zu key(s) read before)",
                err, s->n_ops);
        return;
    }
    kl_net_keys_free(s->ops, s->n_ops);
    s->ops = keys;
    s->n_ops = n;
}

void kl_serve__operators_load(kl_serve_t *s)
{
    if (!s->ops_dir)
        return;
    s_ops_read(s, kl_now_s());
    if (s->n_ops)
        kl_info("serve: %zu operator key(s) in %s", s->n_ops, s->ops_dir);
    else
        kl_info("serve: no operator key in %s: no client can drain agents "
                "or see other clients' jobs until one is added",
                s->ops_dir);
}

bool kl_serve__is_operator(kl_serve_t *s, const char *key, double now)
{
    if (!s->ops_dir)
        return true; /* insecure: no keys to tell clients apart */
    if (!key || !*key)
        return false;
    if (now - s->ops_at >= KL_SERVE_OPERATORS_EVERY_S)
        s_ops_read(s, now);
    for (size_t i = 0; i < s->n_ops; i++)
        if (strcmp(s->ops[i], key) == 0)
            return true;
    return false;
}

void kl_serve__log_refusal(kl_serve_t *s, const char *tag, const char *what,
                           double now)
{
    if (strcmp(tag, s->refused) == 0 && now - s->refused_at < 60) {
        kl_debug("serve: %s", what);
        return;
    }
    kl_warn("serve: %s", what);
    snprintf(s->refused, sizeof s->refused, "%s", tag);
    s->refused_at = now;
}

/* ---- job names ----------------------------------------------------------- */

static kl_sname_t *s_name_find(kl_serve_t *s, const char *name)
{
    for (size_t i = 0; i < s->n_names; i++)
        if (strcmp(s->names[i].name, name) == 0)
            return &s->names[i];
    return NULL;
}

static void s_name_del(kl_serve_t *s, size_t i)
{
    s->names_dirty = true;
    free(s->names[i].name);
    s->names[i] = s->names[--s->n_names];
}

/* Forgets the names whose jobs went name_hold_s ago or more. */
static void s_names_prune(kl_serve_t *s, double now)
{
    for (size_t i = s->n_names; i-- > 0;)
        if (s->names[i].gone_at > 0 &&
            now - s->names[i].gone_at >= s->cfg.name_hold_s)
            s_name_del(s, i);
}

static size_t s_live_jobs_of(const kl_serve_t *s, const char *key)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_jobs; i++)
        n += !s->jobs[i]->gone && strcmp(s->jobs[i]->owner_key, key) == 0;
    return n;
}

bool kl_serve__job_refused(kl_serve_t *s, const char *name, const char *key,
                           double now, char *why, size_t len)
{
    s_names_prune(s, now);
    const kl_sname_t *b = s_name_find(s, name);
    if (b && strcmp(b->key, key) != 0) {
        /* A live job of another key is refused before this (s_on_hello);
         * gone_at 0 here would be a job still being forgotten. */
        double ago = b->gone_at > 0 ? now - b->gone_at : 0;
        snprintf(why, len,
                 "job %.200s belongs to another client key: its job went "
                 "%.1f s ago and the name stays that key's for %g s after "
                 "(kiln serve --name-hold-s)",
                 name, ago, s->cfg.name_hold_s);
        return true;
    }
    size_t live = s_live_jobs_of(s, key);
    if (live >= s->cfg.max_jobs_per_key) {
        snprintf(why, len,
                 "job %.200s refused: this client key has %zu live jobs on "
                 "the head, its limit (kiln serve --max-jobs-per-key %zu)",
                 name, live, s->cfg.max_jobs_per_key);
        return true;
    }
    return false;
}

void kl_serve__name_live(kl_serve_t *s, const char *name, const char *key)
{
    kl_sname_t *b = s_name_find(s, name);
    if (!b) {
        if (s->n_names == s->cap_names) {
            s->cap_names = s->cap_names ? 2 * s->cap_names : 64;
            s->names = kl_xrealloc(s->names, s->cap_names * sizeof *s->names);
        }
        b = &s->names[s->n_names++];
        b->name = kl_xstrdup(name);
    }
    if (b->gone_at != 0 || strcmp(b->key, key) != 0)
        s->names_dirty = true;
    snprintf(b->key, sizeof b->key, "%s", key);
    b->gone_at = 0;
}

void kl_serve__name_gone(kl_serve_t *s, const char *name, double now)
{
    kl_sname_t *b = s_name_find(s, name);
    if (!b)
        return;
    b->gone_at = now > 0 ? now : 1e-9;
    s->names_dirty = true;
    /* A key that opens and leaves names without end keeps at most
     * KL_SERVE_NAMES_PER_KEY of them bound: its own oldest go first. */
    char key[41];
    snprintf(key, sizeof key, "%s", b->key);
    for (;;) {
        size_t n = 0, oldest = s->n_names;
        for (size_t i = 0; i < s->n_names; i++) {
            const kl_sname_t *x = &s->names[i];
            if (x->gone_at == 0 || strcmp(x->key, key) != 0)
                continue;
            n++;
            if (oldest == s->n_names || x->gone_at < s->names[oldest].gone_at)
                oldest = i;
        }
        if (n <= KL_SERVE_NAMES_PER_KEY)
            break;
        s_name_del(s, oldest);
    }
}

/* ---- per-job limits ------------------------------------------------------ */

bool kl_serve__request_refused(const kl_serve_t *s, const kl_sjob_t *j,
                               const Kiln__MeasureRequest *m, size_t bytes,
                               char *why, size_t len, const char **limit)
{
    const kl_serve_config_t *c = &s->cfg;
    unsigned long long id = (unsigned long long)m->request_id;
    if (m->evaluator && m->evaluator->timeout_ms > c->max_timeout_ms) {
        *limit = "max-timeout-ms";
        snprintf(why, len,
                 "request %llu refused: its evaluator timeout of %u ms is over "
                 "the head's limit (kiln serve --max-timeout-ms %u)",
                 id, m->evaluator->timeout_ms, c->max_timeout_ms);
        return true;
    }
    for (size_t i = 0; i < m->n_candidates; i++) {
        const Kiln__Candidate *k = m->candidates[i];
        size_t n = (k->source ? strlen(k->source) : 0) +
                   (k->entry ? strlen(k->entry) : 0) + k->trace.len;
        if (n > c->max_candidate_bytes) {
            *limit = "max-candidate-bytes";
            snprintf(why, len,
                     "request %llu refused: its candidate %zu (id %llu) is "
                     "%zu bytes (source, entry and trace), over the head's "
                     "limit (kiln serve --max-candidate-bytes %zu)",
                     id, i, (unsigned long long)k->id, n,
                     c->max_candidate_bytes);
            return true;
        }
    }
    if (j->held_cands + m->n_candidates > c->max_queued_per_job) {
        *limit = "max-queued-per-job";
        snprintf(why, len,
                 "request %llu refused: job %.200s holds %zu candidates at "
                 "the head and %zu more would pass its limit (kiln serve "
                 "--max-queued-per-job %zu)",
                 id, j->name, j->held_cands, m->n_candidates,
                 c->max_queued_per_job);
        return true;
    }
    if (j->held_bytes + bytes > c->max_bytes_per_job) {
        *limit = "max-bytes-per-job";
        snprintf(why, len,
                 "request %llu refused: job %.200s holds %zu bytes of "
                 "requests at the head and this one's %zu would pass its "
                 "limit (kiln serve --max-bytes-per-job %zu)",
                 id, j->name, j->held_bytes, bytes, c->max_bytes_per_job);
        return true;
    }
    return false;
}

void kl_serve__tenants_free(kl_serve_t *s)
{
    for (size_t i = 0; i < s->n_names; i++)
        free(s->names[i].name);
    free(s->names);
    s->names = NULL;
    s->n_names = s->cap_names = 0;
    kl_net_keys_free(s->ops, s->n_ops);
    s->ops = NULL;
    s->n_ops = 0;
    free(s->ops_dir);
    s->ops_dir = NULL;
}
