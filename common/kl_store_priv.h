/* kl_store_priv.h - what kl_store.c shares with kl_store_json.c. Not part
 * of the public contract: only the two halves of the store include it. */
#ifndef KL_STORE_PRIV_H
#define KL_STORE_PRIV_H

#include "kl_store.h"

/* One value to write: exactly one of w and r is set. line is the JSON
 * line it came from (0 when none), used only in messages. */
typedef struct {
    Kiln__Workload *w;
    Kiln__TuningRecord *r;
    size_t line;
} kl_store_item_t;

/* Writes items[0..n) in ONE write transaction, in order, growing the map
 * as needed. With keep_seq, a record whose seq is not 0 keeps it (a slot
 * already holding the same bytes is skipped, one holding other bytes is
 * KL_ERR_EXISTS); otherwise every record gets the next seq of its
 * (workload, target). *written (optional) counts the items written. On
 * failure nothing is written and *failed (optional) is the index of the
 * item that failed, or n when the commit itself failed. */
int kl_store__write_items(kl_store_t *self, kl_store_item_t *items, size_t n,
                          bool keep_seq, size_t *written, size_t *failed,
                          char *err);

/* Calls wfn for every workload, then rfn for every record, in one read
 * transaction (one consistent snapshot). Either fn may be NULL. */
int kl_store__foreach_all(kl_store_t *self, kl_store_workload_fn wfn,
                          kl_store_record_fn rfn, void *arg, char *err);

/* The store's directory, for messages. */
const char *kl_store__dir(const kl_store_t *self);

#endif
