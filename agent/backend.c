/* backend.c - the registry of the agent's backends and the --device
 * grammar (kla_backend.h). */
#include "kla_backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"

/* The registry: one backend per kind of target, in kind order (the order
 * of devices in Hello). */
static const kla_backend_t *const s_backends[] = {
    [KL_TARGET_CPU] = &kla_backend_cpu,
    [KL_TARGET_CUDA] = &kla_backend_cuda,
};
_Static_assert(sizeof s_backends / sizeof s_backends[0] == KL_TARGET__KINDS,
               "a row per kind of target (NULL: no agent backend)");

const kla_backend_t *kla_backend_of(kl_target_kind k)
{
    return s_backends[k];
}

const char *kla_backend_name(const kla_backend_t *b)
{
    return kl_target_kind_info(b->kind)->name;
}

bool kla_backend_worker(int argc, char **argv, int *rc)
{
    for (int k = 0; argc == 3 && k < KL_TARGET__KINDS; k++) {
        const kla_backend_t *b = s_backends[k];
        if (b && b->worker_flag && !strcmp(argv[1], b->worker_flag)) {
            kl_log_init(b->worker_flag + 2);
            *rc = b->worker_main(atoi(argv[2]), 3);
            return true;
        }
    }
    return false;
}

/* ---- --device ------------------------------------------------------------ */

bool kla_devsel_any(const kla_devsel_t *sel)
{
    return sel->all || sel->n > 0;
}

/* "--device: 'TOK': expected cpu, cuda:N[,N...] or cuda:all". */
static int s_expected(const char *tok, char *err)
{
    kl_buf_t forms = {0};
    for (int k = 0; k < KL_TARGET__KINDS; k++)
        if (s_backends[k])
            kl_buf_printf(&forms, "%s%s", forms.len ? ", " : "",
                          s_backends[k]->forms);
    int rc = kl_seterr(err, KL_ERR_INVAL, "--device: '%s': expected %s", tok,
                       forms.data ? forms.data : "");
    kl_buf_free(&forms);
    return rc;
}

static int s_add(const kla_backend_t *b, kla_devsel_t *s, const char *tok,
                 const char *num, char *err)
{
    char *end;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (!*num || *end || errno || v < 0 || v > 1023)
        return s_expected(tok, err);
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == (int)v)
            return kl_seterr(err, KL_ERR_INVAL,
                             "--device: %s %ld is named twice", b->unit, v);
    if (s->n == b->max_devices || s->n == KLA_MAX_DEVICES)
        return kl_seterr(err, KL_ERR_INVAL, "--device: more than %d %ss", s->n,
                         b->unit);
    s->id[s->n++] = (int)v;
    return KL_OK;
}

/* One token: KIND, KIND:all, KIND:N, or N continuing *cur's list. */
static int s_token(kla_devspec_t *out, const char *tok, int *cur, char *err)
{
    for (int k = 0; k < KL_TARGET__KINDS; k++) {
        const kla_backend_t *b = s_backends[k];
        if (!b)
            continue;
        const char *name = kla_backend_name(b);
        size_t n = strlen(name);
        if (strncmp(tok, name, n) != 0 || (tok[n] && tok[n] != ':'))
            continue;
        kla_devsel_t *s = &out->sel[k];
        const char *rest = tok[n] ? tok + n + 1 : NULL;
        if (!b->unit) { /* one device: KIND alone */
            *cur = -1;
            if (rest)
                return s_expected(tok, err);
            if (s->all)
                return kl_seterr(err, KL_ERR_INVAL,
                                 "--device: %s is named twice", name);
            s->all = true;
            return KL_OK;
        }
        if (!rest || !strcmp(rest, "all")) {
            *cur = -1;
            s->all = true;
            return KL_OK;
        }
        *cur = k;
        return s_add(b, s, tok, rest, err);
    }
    if (*cur >= 0)
        return s_add(s_backends[*cur], &out->sel[*cur], tok, tok, err);
    return s_expected(tok, err);
}

int kla_devspec_parse(const char *text, kla_devspec_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return kl_seterr(err, KL_ERR_INVAL, "--device: empty");
    char *copy = kl_xstrdup(text), *save = NULL;
    int rc = KL_OK, cur = -1;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == KL_OK;
         tok = strtok_r(NULL, ",", &save))
        rc = s_token(out, tok, &cur, err);
    free(copy);
    bool any = false;
    for (int k = 0; rc == KL_OK && k < KL_TARGET__KINDS; k++) {
        const kla_devsel_t *s = &out->sel[k];
        if (s->all && s->n)
            rc = kl_seterr(
                err, KL_ERR_INVAL, "--device: %s:all and a %s number together",
                kla_backend_name(s_backends[k]), s_backends[k]->unit);
        any = any || kla_devsel_any(s);
    }
    if (rc == KL_OK && !any)
        rc =
            kl_seterr(err, KL_ERR_INVAL, "--device '%s' names no device", text);
    return rc;
}
