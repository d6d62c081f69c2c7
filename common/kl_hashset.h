/* kl_hashset.h - a set of 16-byte hashes (trace hashes, source hashes).
 *
 * The search keeps its pools and the trace hashes it has already proposed
 * in one; a tuning task keeps the traces it has measured or has in flight
 * and the sources it has built. Open addressing with linear probing: the
 * table doubles when it would become more than half full, and a deletion
 * re-inserts the rest of its cluster, so lookups stay exact through
 * collisions and deletions.
 *
 * A kl_hashset_t is a plain value, not a handle: it lives inside its
 * owner's struct, and `kl_hashset_t s = {0};` is an empty set that needs
 * no allocation until the first kl_hashset_add. The hashes are copied in;
 * the set keeps no pointer to the caller's memory. One set is not safe to
 * change from two threads at once. */
#ifndef KL_HASHSET_H
#define KL_HASHSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t (*slot)[16];
    bool *used;
    size_t n;   /* hashes in the set; read it, never write it */
    size_t cap; /* slots (0 or a power of two) */
} kl_hashset_t;

/* Adds a copy of h. Returns true when h was not in the set yet, false when
 * it was (the set is then unchanged). Allocates (aborting on OOM, as
 * kl_xmalloc) when the table grows. */
bool kl_hashset_add(kl_hashset_t *s, const uint8_t h[16]);

/* Whether h is in the set. An empty set ({0}) has nothing. */
bool kl_hashset_has(const kl_hashset_t *s, const uint8_t h[16]);

/* Removes h when it is in the set; does nothing otherwise. */
void kl_hashset_del(kl_hashset_t *s, const uint8_t h[16]);

/* Removes every hash and keeps the table for reuse. */
void kl_hashset_clear(kl_hashset_t *s);

/* Frees the table and leaves *s an empty set ({0}), usable again. Safe on
 * an empty set. */
void kl_hashset_free(kl_hashset_t *s);

#endif
