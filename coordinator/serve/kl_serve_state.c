/* kl_serve_state.c - what an operator set, kept by the head: the names of
 * the agents drained (kl_serve.h, cfg.state_dir). In memory for the
 * head's life; with a state directory also in DIR/drained, one name a
 * line, so that a restarted head keeps them drained as they reconnect. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_serve_int.h"
#include "kl_util.h"

static ssize_t s_find(const kl_serve_t *s, const char *name)
{
    for (size_t i = 0; i < s->n_drained; i++)
        if (strcmp(s->drained[i], name) == 0)
            return (ssize_t)i;
    return -1;
}

static void s_add(kl_serve_t *s, const char *name)
{
    s->drained =
        kl_xrealloc(s->drained, (s->n_drained + 1) * sizeof *s->drained);
    s->drained[s->n_drained++] = kl_xstrdup(name);
}

/* DIR/NAME, written whole to DIR/NAME.tmp (by put(s, f)), flushed, then
 * renamed over the old one: a reader (or a head restarted after a crash)
 * sees the old file or the new one, never half of one. */
static int s_write(const kl_serve_t *s, const char *name,
                   void (*put)(const kl_serve_t *, FILE *), char *err)
{
    const char *dir = s->cfg.state_dir;
    if (!dir)
        return KL_OK;
    char *path = kl_xasprintf("%s/%s", dir, name);
    char *tmp = kl_xasprintf("%s/%s.tmp", dir, name);
    int rc = KL_OK;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rc = kl_seterr(err, KL_ERR_IO, "--state: cannot write %s: %s", tmp,
                       strerror(errno));
        goto out;
    }
    put(s, f);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        rc = kl_seterr(err, KL_ERR_IO, "--state: cannot write %s: %s",
                       ok ? path : tmp, strerror(ok ? errno : e));
        unlink(tmp);
    }
out:
    free(path);
    free(tmp);
    return rc;
}

static void s_put_drained(const kl_serve_t *s, FILE *f)
{
    for (size_t i = 0; i < s->n_drained; i++)
        fprintf(f, "%s\n", s->drained[i]);
}

/* DIR/drained: the names of the agents drained, one a line. */
static int s_save(const kl_serve_t *s, char *err)
{
    return s_write(s, "drained", s_put_drained, err);
}

int kl_serve__state_load(kl_serve_t *s, char *err)
{
    const char *dir = s->cfg.state_dir;
    if (!dir)
        return KL_OK;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return kl_seterr(err, KL_ERR_IO, "--state %s: cannot create it: %s",
                         dir, strerror(errno));
    char *path = kl_xasprintf("%s/drained", dir);
    FILE *f = fopen(path, "r");
    if (!f && errno != ENOENT) {
        int rc = kl_seterr(err, KL_ERR_IO, "--state: cannot read %s: %s", path,
                           strerror(errno));
        free(path);
        return rc;
    }
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] && s_find(s, line) < 0)
            s_add(s, line);
    }
    if (f)
        fclose(f);
    if (s->n_drained)
        kl_info("serve: %zu agent(s) drained as they register (%s)",
                s->n_drained, path);
    free(path);
    return s_save(s, err);
}

bool kl_serve__state_has(const kl_serve_t *s, const char *name)
{
    return s_find(s, name) >= 0;
}

bool kl_serve__state_set(kl_serve_t *s, const char *name, bool drained)
{
    ssize_t i = s_find(s, name);
    bool had = i >= 0;
    if (drained == had)
        return had;
    if (drained) {
        if (strchr(name, '\n')) {
            kl_warn("serve: agent name with a newline not kept in --state");
            return had;
        }
        s_add(s, name);
    } else {
        free(s->drained[i]);
        s->drained[i] = s->drained[--s->n_drained];
    }
    char err[KL_ERRMSG_LEN];
    if (s_save(s, err) != KL_OK)
        kl_warn("serve: %s (the drain holds until the head restarts)", err);
    return had;
}

void kl_serve__state_apply(kl_serve_t *s)
{
    for (size_t i = 0; i < s->n_agents; i++) {
        kl_dispatch_agent_info_t *a = &s->agents[i];
        if (a->drained || s_find(s, a->name) < 0)
            continue;
        if (kl_dispatch_drain(s->disp, a->name, true, NULL, NULL) == KL_OK) {
            kl_info("serve: agent %s registered: drained, as an operator "
                    "set it",
                    a->name);
            a->drained = true;
        }
    }
}

void kl_serve__state_free(kl_serve_t *s)
{
    for (size_t i = 0; i < s->n_drained; i++)
        free(s->drained[i]);
    free(s->drained);
    s->drained = NULL;
    s->n_drained = 0;
}

/* ---- job names bound to keys (kl_serve_tenants.c) ------------------------ */

/* DIR/names, one "KEY GONE NAME" a line: KEY the 40 Z85 characters, GONE
 * the wall-clock second the job went (0: live when written), NAME the
 * rest of the line. */
static void s_put_names(const kl_serve_t *s, FILE *f)
{
    double now = kl_now_s();
    long long wall = (long long)time(NULL);
    for (size_t i = 0; i < s->n_names; i++) {
        const kl_sname_t *b = &s->names[i];
        if (strlen(b->key) != 40 || strchr(b->name, '\n'))
            continue;
        long long gone = 0; /* live */
        if (b->gone_at > 0) {
            gone = wall - (long long)(now - b->gone_at);
            gone = gone > 0 ? gone : 1;
        }
        fprintf(f, "%s %lld %s\n", b->key, gone, b->name);
    }
}

int kl_serve__names_load(kl_serve_t *s, char *err)
{
    if (!s->cfg.state_dir || !s->ops_dir)
        return KL_OK; /* insecure: no keys to bind names to */
    char *path = kl_xasprintf("%s/names", s->cfg.state_dir);
    FILE *f = fopen(path, "r");
    if (!f && errno != ENOENT) {
        int rc = kl_seterr(err, KL_ERR_IO, "--state: cannot read %s: %s", path,
                           strerror(errno));
        free(path);
        return rc;
    }
    double now = kl_now_s();
    long long wall = (long long)time(NULL);
    size_t n = 0;
    char line[KL_NET_MAX_STRING + 128];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char key[41], *rest = NULL;
        long long gone = -1;
        if (strlen(line) < 44 || line[40] != ' ')
            continue;
        memcpy(key, line, 40);
        key[40] = '\0';
        gone = strtoll(line + 41, &rest, 10);
        if (!rest || *rest != ' ' || !rest[1] || gone < 0)
            continue;
        /* A job live when the head stopped went now, as far as the hold
         * is concerned. */
        double ago = gone == 0 ? 0 : (double)(wall - gone);
        if (ago < 0)
            ago = 0;
        if (ago >= s->cfg.name_hold_s)
            continue;
        kl_serve__name_live(s, rest + 1, key);
        kl_serve__name_gone(s, rest + 1, now - ago);
        n++;
    }
    if (f)
        fclose(f);
    if (n)
        kl_info("serve: %zu job name(s) held for their keys (%s)", n, path);
    free(path);
    s->names_dirty = false;
    return s_write(s, "names", s_put_names, err);
}

void kl_serve__names_save(kl_serve_t *s, double now, bool force)
{
    if (!s->names_dirty || !s->ops_dir ||
        (!force && now - s->names_saved_at < 1.0))
        return;
    char err[KL_ERRMSG_LEN];
    if (s_write(s, "names", s_put_names, err) != KL_OK)
        kl_warn("serve: %s (job names stay bound until the head restarts)",
                err);
    s->names_dirty = false;
    s->names_saved_at = now;
}
