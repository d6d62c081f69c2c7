/* kl_store_priv.h - what the files of the store (kl_store.c, kl_store_read.c,
 * kl_store_json.c) share. Not part of the public contract: only they
 * include it. */
#ifndef KL_STORE_PRIV_H
#define KL_STORE_PRIV_H

#include <lmdb.h>
#include <string.h>

#include "kl_store.h"
#include "kl_util.h"

/* Length of a best value: seq(8) | median_s bits(8). */
#define KL_STORE_BEST_LEN 16

struct kl_store_s {
    MDB_env *env;
    MDB_dbi db_workloads, db_records, db_best, db_seen, db_meta;
    char *dir;
    size_t map_size;
    bool rdonly;
    bool map_full; /* set by kl_store__lmdb() when LMDB said MDB_MAP_FULL */
    unsigned schema_found; /* the schema version found at open */
    uint8_t *pack;         /* reusable buffer for packed values */
    size_t pack_cap;
};

/* ---- keys (all integers big-endian) ---- */

static inline void kl_store__be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint64_t kl_store__get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static inline uint64_t kl_store__tid(const char *target)
{
    return kl_hash64(target, strlen(target));
}

/* key(16) | target-id(8): the prefix of records, best and seen keys. */
static inline void kl_store__prefix(uint8_t out[24], const uint8_t key[16],
                                    uint64_t tid)
{
    memcpy(out, key, 16);
    kl_store__be64(out + 16, tid);
}

/* prefix(24) | condition(1): a best key. */
static inline void kl_store__best_key(uint8_t out[25], const uint8_t pre[24],
                                      kl_cond_t cond)
{
    memcpy(out, pre, 24);
    out[24] = (uint8_t)cond;
}

/* prefix(24) | condition(1) | trace hash(16): a seen key. */
static inline void kl_store__seen_key(uint8_t out[41], const uint8_t pre[24],
                                      kl_cond_t cond, const uint8_t hash[16])
{
    kl_store__best_key(out, pre, cond);
    memcpy(out + 25, hash, 16);
}

/* Translates an LMDB return code (never 0) into a kl_err with a message
 * naming the store and what was being done; flags MDB_MAP_FULL. */
int kl_store__lmdb(kl_store_t *self, int rc, const char *what, char *err);
/* Begins a read transaction, adopting a map grown by another process. */
int kl_store__begin_read(kl_store_t *self, MDB_txn **txn, char *err);

/* One value to write: exactly one of w and r is set. line is the JSON
 * line it came from (0 when none), used only in messages. */
typedef struct {
    Kiln__Workload *w;
    Kiln__TuningRecord *r;
    size_t line;
} kl_store__item_t;

/* Writes items[0..n) in ONE write transaction, in order, growing the map
 * as needed. With keep_seq, a record whose seq is not 0 keeps it (a slot
 * already holding the same bytes is skipped, one holding other bytes is
 * KL_ERR_EXISTS); otherwise every record gets the next seq of its
 * (workload, target). *written (optional) counts the items written. On
 * failure nothing is written and *failed (optional) is the index of the
 * item that failed, or n when the commit itself failed. */
int kl_store__write_items(kl_store_t *self, kl_store__item_t *items, size_t n,
                          bool keep_seq, size_t *written, size_t *failed,
                          char *err);

/* Calls wfn for every workload, then rfn for every record, in one read
 * transaction (one consistent snapshot). Either fn may be NULL. */
int kl_store__foreach_all(kl_store_t *self, kl_store_workload_fn wfn,
                          kl_store_record_fn rfn, void *arg, char *err);

/* The store's directory, for messages. */
const char *kl_store__dir(const kl_store_t *self);

#endif
