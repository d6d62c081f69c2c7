/* kl_hashset.c - a set of 16-byte hashes (linear probing; deletion
 * re-inserts the rest of the cluster so lookups stay exact). */
#include <stdlib.h>
#include <string.h>

#include "kl_hashset.h"
#include "kl_util.h"

static size_t s_home(const kl_hashset_t *s, const uint8_t h[16])
{
    uint64_t x;
    memcpy(&x, h, sizeof x);
    return (size_t)(x & (s->cap - 1));
}

static void s_put(kl_hashset_t *s, const uint8_t h[16])
{
    size_t i = s_home(s, h);
    while (s->used[i])
        i = (i + 1) & (s->cap - 1);
    memcpy(s->slot[i], h, 16);
    s->used[i] = true;
    s->n++;
}

static void s_grow(kl_hashset_t *s)
{
    kl_hashset_t old = *s;
    s->cap = old.cap ? old.cap * 2 : 64;
    s->slot = kl_xcalloc(s->cap, sizeof *s->slot);
    s->used = kl_xcalloc(s->cap, sizeof *s->used);
    s->n = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.used[i])
            s_put(s, old.slot[i]);
    free(old.slot);
    free(old.used);
}

bool kl_hashset_has(const kl_hashset_t *s, const uint8_t h[16])
{
    if (!s->cap)
        return false;
    for (size_t i = s_home(s, h); s->used[i]; i = (i + 1) & (s->cap - 1))
        if (!memcmp(s->slot[i], h, 16))
            return true;
    return false;
}

bool kl_hashset_add(kl_hashset_t *s, const uint8_t h[16])
{
    if (kl_hashset_has(s, h))
        return false;
    if (2 * (s->n + 1) > s->cap)
        s_grow(s);
    s_put(s, h);
    return true;
}

void kl_hashset_del(kl_hashset_t *s, const uint8_t h[16])
{
    if (!s->cap)
        return;
    size_t i = s_home(s, h);
    while (s->used[i] && memcmp(s->slot[i], h, 16))
        i = (i + 1) & (s->cap - 1);
    if (!s->used[i])
        return;
    s->used[i] = false;
    s->n--;
    for (size_t j = (i + 1) & (s->cap - 1); s->used[j];
         j = (j + 1) & (s->cap - 1)) {
        uint8_t tmp[16];
        memcpy(tmp, s->slot[j], 16);
        s->used[j] = false;
        s->n--;
        s_put(s, tmp);
    }
}

void kl_hashset_clear(kl_hashset_t *s)
{
    if (s->cap)
        memset(s->used, 0, s->cap * sizeof *s->used);
    s->n = 0;
}

void kl_hashset_free(kl_hashset_t *s)
{
    free(s->slot);
    free(s->used);
    memset(s, 0, sizeof *s);
}
