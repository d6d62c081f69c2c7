/* export_arena.c - where an exported model keeps its intermediate values
 * (kiln_model.c's b_I, bh_I, bn_I): one static arena, each value at an
 * offset, values whose lives do not overlap sharing bytes.
 *
 * A value lives from the first layer whose code names it to the last one
 * (the output: to the copy after the last layer), both ends included, so
 * a layer never writes over what it reads. The offsets are first-fit in
 * order of decreasing size (the greedy placement of graph runtimes'
 * memory planners): each value goes at the lowest multiple of 64 bytes
 * where it overlaps no placed value that is alive at the same time.
 *
 * Why: one buffer per value made MobileNetV2's values 27 MB, more than
 * the caches; each layer then wrote into lines it had to fetch from
 * memory first, and ran about 1.5x slower in the model than tuned. */
#include "export_int.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define S_ALIGN 64

typedef struct {
    const char *ctype;
    char *comment;
    long long bytes;
    long long off;
    int first, last; /* layers; first > last: never named */
    bool decl;
} s_val_t;

struct kl_export__arena {
    int n;         /* nodes: slots 3 * n, one per prefix and node */
    s_val_t *v;    /* [3 * n] */
    long long end; /* bytes of the arena, after kl_export__arena_plan */
};

static const char *const s_prefix[3] = {"b", "bh", "bn"};

kl_export__arena_t *kl_export__arena_new(int nnodes)
{
    kl_export__arena_t *a = kl_xcalloc(1, sizeof *a);
    a->n = nnodes;
    a->v = kl_xcalloc((size_t)(3 * (nnodes > 0 ? nnodes : 1)), sizeof *a->v);
    for (int i = 0; i < 3 * nnodes; i++) {
        a->v[i].first = INT_MAX;
        a->v[i].last = -1;
    }
    return a;
}

void kl_export__arena_free(kl_export__arena_t *a)
{
    if (!a)
        return;
    for (int i = 0; i < 3 * a->n; i++)
        free(a->v[i].comment);
    free(a->v);
    free(a);
}

/* The slot of value NAME (PREFIX_I), or -1 when it names none. */
static int s_slot(const kl_export__arena_t *a, const char *name)
{
    for (int k = 0; k < 3; k++) {
        size_t pl = strlen(s_prefix[k]);
        if (strncmp(name, s_prefix[k], pl) || name[pl] != '_' ||
            !isdigit((unsigned char)name[pl + 1]))
            continue;
        char *e;
        long i = strtol(name + pl + 1, &e, 10);
        return *e || i < 0 || i >= a->n ? -1 : k * a->n + (int)i;
    }
    return -1;
}

void kl_export__arena_decl(kl_export__arena_t *a, const char *name,
                           const char *ctype, long long bytes,
                           const char *comment)
{
    int k = s_slot(a, name);
    if (k < 0)
        return;
    s_val_t *v = &a->v[k];
    v->ctype = ctype;
    v->bytes = bytes > 0 ? bytes : 1;
    free(v->comment);
    v->comment = kl_xstrdup(comment ? comment : "");
    v->decl = true;
}

void kl_export__arena_use(kl_export__arena_t *a, int layer, const char *code)
{
    const char *s = code;
    while (*s) {
        if (!(isalpha((unsigned char)*s) || *s == '_')) {
            s++;
            continue;
        }
        const char *t = s;
        while (isalnum((unsigned char)*s) || *s == '_')
            s++;
        char id[32];
        size_t len = (size_t)(s - t);
        if (len >= sizeof id)
            continue;
        memcpy(id, t, len);
        id[len] = 0;
        int k = s_slot(a, id);
        if (k < 0)
            continue;
        s_val_t *v = &a->v[k];
        if (layer < v->first)
            v->first = layer;
        if (layer > v->last)
            v->last = layer;
    }
}

static bool s_alive_together(const s_val_t *p, const s_val_t *q)
{
    return p->first <= p->last && q->first <= q->last && p->first <= q->last &&
           q->first <= p->last;
}

/* The slots ix by decreasing size, a stable insertion sort (qsort would
 * need the values as context; they are a few thousand at most). */
static void s_sort(int *ix, int n, const s_val_t *v)
{
    for (int i = 1; i < n; i++) {
        int x = ix[i], j = i;
        for (; j > 0 && v[ix[j - 1]].bytes < v[x].bytes; j--)
            ix[j] = ix[j - 1];
        ix[j] = x;
    }
}

long long kl_export__arena_plan(kl_export__arena_t *a, bool share)
{
    int *ix = kl_xcalloc((size_t)(3 * a->n + 1), sizeof *ix);
    int np = 0;
    for (int i = 0; i < 3 * a->n; i++)
        if (a->v[i].decl)
            ix[np++] = i;
    s_sort(ix, np, a->v);
    /* each value at the lowest offset found by moving past every placed
     * value alive together with it that it overlaps */
    a->end = 0;
    for (int k = 0; k < np; k++) {
        s_val_t *p = &a->v[ix[k]];
        long long off = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (int j = 0; j < k; j++) {
                const s_val_t *q = &a->v[ix[j]];
                if ((share && !s_alive_together(p, q)) ||
                    off >= q->off + q->bytes || q->off >= off + p->bytes)
                    continue;
                off = (q->off + q->bytes + S_ALIGN - 1) / S_ALIGN * S_ALIGN;
                moved = true;
            }
        }
        p->off = off;
        long long e = (off + p->bytes + S_ALIGN - 1) / S_ALIGN * S_ALIGN;
        if (e > a->end)
            a->end = e;
    }
    free(ix);
    return a->end;
}

long long kl_export__arena_sum(const kl_export__arena_t *a)
{
    long long s = 0;
    for (int i = 0; i < 3 * a->n; i++)
        if (a->v[i].decl)
            s += (a->v[i].bytes + S_ALIGN - 1) / S_ALIGN * S_ALIGN;
    return s;
}

long long kl_export__arena_offset(const kl_export__arena_t *a, const char *name)
{
    int k = s_slot(a, name);
    return k >= 0 && a->v[k].decl ? a->v[k].off : -1;
}

void kl_export__arena_code(const kl_export__arena_t *a, kl_buf_t *b)
{
    kl_buf_printf(b,
                  "/* the intermediate values: %lld bytes, where one buffer "
                  "each would take %lld */\nstatic unsigned char "
                  "s_arena[%lld] __attribute__((aligned(%d)));\n",
                  a->end, kl_export__arena_sum(a), a->end > 0 ? a->end : 1,
                  S_ALIGN);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < a->n; i++) {
            const s_val_t *v = &a->v[k * a->n + i];
            if (v->decl)
                kl_buf_printf(b,
                              "#define %s_%d ((%s *)(s_arena + %lldLL)) "
                              "/* %s */\n",
                              s_prefix[k], i, v->ctype, v->off, v->comment);
        }
}
