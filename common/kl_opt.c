#include "kl_opt.h"
#include "kl_err.h"
#include "kl_util.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    char *value; /* last value, NULL when unset */
    bool given;
    char **all; /* every flag value, in order */
    int nall;
} s_slot_t;

struct kl_opts_s {
    const kl_opt_t *table;
    int nopts;
    s_slot_t *slots;
    char **pos;
    int npos;
    bool help;
};

static int s_find(const kl_opt_t *table, const char *name, size_t len)
{
    for (int i = 0; table[i].name; i++)
        if (strlen(table[i].name) == len &&
            strncmp(table[i].name, name, len) == 0)
            return i;
    return -1;
}

static int s_check(const kl_opt_t *o, const char *v, const char *src, char *err)
{
    if (o->type == KL_OPT_STR || o->type == KL_OPT_BOOL)
        return KL_OK;
    char *end = NULL;
    errno = 0;
    double d =
        o->type == KL_OPT_INT ? (double)strtoll(v, &end, 10) : strtod(v, &end);
    if (!*v || *end || errno)
        return kl_seterr(err, KL_ERR_INVAL, "%s --%s: '%s' is not %s", src,
                         o->name, v,
                         o->type == KL_OPT_INT ? "an integer" : "a number");
    if (o->min <= o->max && (d < o->min || d > o->max))
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s --%s: %s is out of range [%g, %g]", src, o->name,
                         v, o->min, o->max);
    return KL_OK;
}

static void s_set(s_slot_t *s, const char *v, bool record)
{
    free(s->value);
    s->value = v ? kl_xstrdup(v) : NULL;
    s->given = true;
    if (record && v) {
        s->all = kl_xrealloc(s->all, sizeof(char *) * (size_t)(s->nall + 1));
        s->all[s->nall++] = kl_xstrdup(v);
    }
}

static void s_env_name(const char *name, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "KILN_");
    for (const char *p = name; *p && n + 1 < cap; p++)
        out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[n] = '\0';
}

int kl_opts_parse(const kl_opt_t *table, int argc, char **argv, kl_opts_t **out,
                  char *err)
{
    kl_opts_t *self = kl_xcalloc(1, sizeof *self);
    self->table = table;
    while (table[self->nopts].name)
        self->nopts++;
    self->slots = kl_xcalloc((size_t)self->nopts + 1, sizeof(s_slot_t));
    self->pos = kl_xcalloc((size_t)argc + 1, sizeof(char *));
    int rc = KL_OK;

    for (int i = 0; i < self->nopts; i++) {
        const kl_opt_t *o = &table[i];
        char env[128];
        s_env_name(o->name, env, sizeof env);
        const char *v = getenv(env);
        if (v) {
            if (o->type == KL_OPT_BOOL)
                v = (strcmp(v, "0") == 0 || strcmp(v, "") == 0) ? "0" : "1";
            if ((rc = s_check(o, v, env, err)) != KL_OK)
                goto fail;
            s_set(&self->slots[i], v, false);
        } else if (o->def) {
            self->slots[i].value = kl_xstrdup(o->def);
        }
    }

    bool opts_done = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (opts_done || a[0] != '-' || a[1] == '\0') {
            self->pos[self->npos++] = kl_xstrdup(a);
            continue;
        }
        if (strcmp(a, "--") == 0) {
            opts_done = true;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            self->help = true;
            continue;
        }
        if (a[1] != '-') {
            rc = kl_seterr(err, KL_ERR_INVAL,
                           "unknown option '%s' (options are --long)", a);
            goto fail;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int k = s_find(table, name, len);
        if (k < 0) {
            rc = kl_seterr(err, KL_ERR_INVAL, "unknown option '--%.*s'",
                           (int)len, name);
            goto fail;
        }
        const kl_opt_t *o = &table[k];
        const char *v;
        if (o->type == KL_OPT_BOOL) {
            v = eq ? eq + 1 : "1";
            if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "true") &&
                strcmp(v, "false")) {
                rc = kl_seterr(err, KL_ERR_INVAL,
                               "--%s takes no value (or 0/1), got '%s'",
                               o->name, v);
                goto fail;
            }
            v = (!strcmp(v, "0") || !strcmp(v, "false")) ? "0" : "1";
        } else if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            rc = kl_seterr(err, KL_ERR_INVAL, "--%s needs a value (%s)",
                           o->name, o->metavar ? o->metavar : "VALUE");
            goto fail;
        }
        if ((rc = s_check(o, v, "option", err)) != KL_OK)
            goto fail;
        s_set(&self->slots[k], v, true);
    }
    *out = self;
    return KL_OK;
fail:
    kl_opts_free(&self);
    return rc;
}

void kl_opts_free(kl_opts_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_opts_t *self = *self_p;
    for (int i = 0; i < self->nopts; i++) {
        free(self->slots[i].value);
        for (int j = 0; j < self->slots[i].nall; j++)
            free(self->slots[i].all[j]);
        free(self->slots[i].all);
    }
    for (int i = 0; i < self->npos; i++)
        free(self->pos[i]);
    free(self->pos);
    free(self->slots);
    free(self);
    *self_p = NULL;
}

static const s_slot_t *s_slot(const kl_opts_t *self, const char *name,
                              kl_opt_type *type)
{
    int k = s_find(self->table, name, strlen(name));
    assert(k >= 0 && "option not in table");
    if (type)
        *type = self->table[k].type;
    return &self->slots[k];
}

bool kl_opts_help_asked(const kl_opts_t *self)
{
    return self->help;
}

bool kl_opts_given(const kl_opts_t *self, const char *name)
{
    return s_slot(self, name, NULL)->given;
}

const char *kl_opts_str(const kl_opts_t *self, const char *name)
{
    return s_slot(self, name, NULL)->value;
}

int64_t kl_opts_int(const kl_opts_t *self, const char *name)
{
    const char *v = s_slot(self, name, NULL)->value;
    return v ? strtoll(v, NULL, 10) : 0;
}

double kl_opts_double(const kl_opts_t *self, const char *name)
{
    const char *v = s_slot(self, name, NULL)->value;
    return v ? strtod(v, NULL) : 0.0;
}

bool kl_opts_bool(const kl_opts_t *self, const char *name)
{
    const char *v = s_slot(self, name, NULL)->value;
    return v && strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "no");
}

int kl_opts_all(const kl_opts_t *self, const char *name,
                const char *const **values)
{
    const s_slot_t *s = s_slot(self, name, NULL);
    *values = (const char *const *)s->all;
    return s->nall;
}

int kl_opts_npos(const kl_opts_t *self)
{
    return self->npos;
}

const char *kl_opts_pos(const kl_opts_t *self, int i)
{
    return i >= 0 && i < self->npos ? self->pos[i] : NULL;
}

void kl_opts_print_help(FILE *f, const char *usage, const kl_opt_t *table)
{
    fprintf(f, "%s\n\nOptions:\n", usage);
    for (int i = 0; table[i].name; i++) {
        const kl_opt_t *o = &table[i];
        char flag[64], env[128];
        snprintf(flag, sizeof flag, "--%s%s%s", o->name,
                 o->type == KL_OPT_BOOL ? "" : " ",
                 o->type == KL_OPT_BOOL ? ""
                                        : (o->metavar ? o->metavar : "VALUE"));
        s_env_name(o->name, env, sizeof env);
        fprintf(f, "  %-28s %s", flag, o->help ? o->help : "");
        if (o->def && o->type != KL_OPT_BOOL)
            fprintf(f, " [default: %s]", o->def);
        if (o->min <= o->max && o->type != KL_OPT_STR && o->type != KL_OPT_BOOL)
            fprintf(f, " [%g..%g]", o->min, o->max);
        fprintf(f, " (env %s)\n", env);
    }
}
