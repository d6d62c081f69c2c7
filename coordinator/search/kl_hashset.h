/* kl_hashset.h - a set of 16-byte hashes (trace hashes, source hashes),
 * open addressing, grows by doubling. Internal to coordinator/search. */
#ifndef KL_HASHSET_H
#define KL_HASHSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t (*slot)[16];
    bool *used;
    size_t n, cap;
} kl_hashset_t;

/* Adds h; returns true when it was not there yet. */
bool kl_hashset_add(kl_hashset_t *s, const uint8_t h[16]);
bool kl_hashset_has(const kl_hashset_t *s, const uint8_t h[16]);
/* Removes h when present. */
void kl_hashset_del(kl_hashset_t *s, const uint8_t h[16]);
void kl_hashset_clear(kl_hashset_t *s);
void kl_hashset_free(kl_hashset_t *s);

#endif
