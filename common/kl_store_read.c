/* kl_store_read.c - the read side of the record store: best, seen,
 * counts and the foreach walks (see kl_store.h for the contract). */
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_store_priv.h"
#include "kl_util.h"

static int s_corrupt_record(kl_store_t *self, const MDB_val *k, size_t vlen,
                            char *err)
{
    if (k->mv_size != 32)
        return kl_seterr(err, KL_ERR_CORRUPT,
                         "store %s: a records key is %zu bytes, want 32",
                         self->dir, k->mv_size);
    char hex[33];
    kl_hex128(k->mv_data, hex);
    const uint8_t *p = k->mv_data;
    return kl_seterr(err, KL_ERR_CORRUPT,
                     "store %s: record %s target-id %016llx seq %llu does not "
                     "decode (%zu bytes)",
                     self->dir, hex,
                     (unsigned long long)kl_store__get_be64(p + 16),
                     (unsigned long long)kl_store__get_be64(p + 24), vlen);
}

int kl_store_best(kl_store_t *self, const uint8_t key[16], const char *target,
                  kl_cond_t cond, Kiln__TuningRecord **out, char *err)
{
    *out = NULL;
    MDB_txn *txn;
    int rc = kl_store__begin_read(self, &txn, err);
    if (rc)
        return rc;
    uint8_t pre[24], bk[25], rk[32];
    kl_store__prefix(pre, key, kl_store__tid(target));
    kl_store__best_key(bk, pre, cond);
    MDB_val k = {25, bk}, v;
    int mrc = mdb_get(txn, self->db_best, &k, &v);
    if (mrc == 0 && v.mv_size != KL_STORE_BEST_LEN)
        rc = kl_seterr(err, KL_ERR_CORRUPT, "store %s: best entry is %zu bytes",
                       self->dir, v.mv_size);
    else if (mrc)
        rc = kl_store__lmdb(self, mrc, "best record", err);
    if (rc == KL_OK) {
        memcpy(rk, pre, 24);
        memcpy(rk + 24, v.mv_data, 8);
        k = (MDB_val){32, rk};
        mrc = mdb_get(txn, self->db_records, &k, &v);
        if (mrc == MDB_NOTFOUND)
            rc = kl_seterr(err, KL_ERR_CORRUPT,
                           "store %s: best of %s points at a missing record",
                           self->dir, target);
        else if (mrc)
            rc = kl_store__lmdb(self, mrc, "best record", err);
        else if (!(*out =
                       kiln__tuning_record__unpack(NULL, v.mv_size, v.mv_data)))
            rc = s_corrupt_record(self, &k, v.mv_size, err);
    }
    mdb_txn_abort(txn);
    return rc;
}

int kl_store_seen(kl_store_t *self, const uint8_t key[16], const char *target,
                  kl_cond_t cond, const uint8_t trace_hash[16], bool *seen,
                  char *err)
{
    *seen = false;
    MDB_txn *txn;
    int rc = kl_store__begin_read(self, &txn, err);
    if (rc)
        return rc;
    uint8_t pre[24], sk[41];
    kl_store__prefix(pre, key, kl_store__tid(target));
    kl_store__seen_key(sk, pre, cond, trace_hash);
    MDB_val k = {41, sk}, v;
    int mrc = mdb_get(txn, self->db_seen, &k, &v);
    if (mrc == 0)
        *seen = true;
    else if (mrc != MDB_NOTFOUND)
        rc = kl_store__lmdb(self, mrc, "seen", err);
    mdb_txn_abort(txn);
    return rc;
}

/* Walks records whose key starts with pre[0..plen) (plen 0: all). With
 * fn NULL it only counts keys (of target, when given) into *count. */
static int s_walk_records(kl_store_t *self, MDB_txn *txn, const uint8_t *pre,
                          size_t plen, const char *target,
                          kl_store_record_fn fn, void *arg, size_t *count,
                          char *err)
{
    MDB_cursor *cur;
    int mrc = mdb_cursor_open(txn, self->db_records, &cur);
    if (mrc)
        return kl_store__lmdb(self, mrc, "cursor", err);
    uint8_t tid[8];
    if (target)
        kl_store__be64(tid, kl_store__tid(target));
    MDB_val k = {plen, (void *)pre}, v;
    mrc = mdb_cursor_get(cur, &k, &v, plen ? MDB_SET_RANGE : MDB_FIRST);
    int rc = KL_OK;
    for (; mrc == 0; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 32) {
            rc = s_corrupt_record(self, &k, v.mv_size, err);
            break;
        }
        if (plen && memcmp(k.mv_data, pre, plen) != 0)
            break;
        if (target && memcmp((uint8_t *)k.mv_data + 16, tid, 8) != 0)
            continue;
        if (!fn) {
            (*count)++;
            continue;
        }
        Kiln__TuningRecord *r =
            kiln__tuning_record__unpack(NULL, v.mv_size, v.mv_data);
        if (!r) {
            rc = s_corrupt_record(self, &k, v.mv_size, err);
            break;
        }
        /* target-ids could collide; the stored string decides. */
        if (!target || strcmp(r->target, target) == 0)
            rc = fn(r, arg);
        kiln__tuning_record__free_unpacked(r, NULL);
        if (rc)
            break;
    }
    if (mrc && mrc != MDB_NOTFOUND && rc == KL_OK)
        rc = kl_store__lmdb(self, mrc, "records", err);
    mdb_cursor_close(cur);
    return rc;
}

static void s_range(const uint8_t *key, const char *target, uint8_t pre[24],
                    size_t *plen)
{
    *plen = 0;
    if (key && target) {
        kl_store__prefix(pre, key, kl_store__tid(target));
        *plen = 24;
    } else if (key) {
        memcpy(pre, key, 16);
        *plen = 16;
    }
}

int kl_store_foreach_record(kl_store_t *self, const uint8_t *key,
                            const char *target, kl_store_record_fn fn,
                            void *arg, char *err)
{
    MDB_txn *txn;
    int rc = kl_store__begin_read(self, &txn, err);
    if (rc)
        return rc;
    uint8_t pre[24];
    size_t plen;
    s_range(key, target, pre, &plen);
    rc = s_walk_records(self, txn, pre, plen, target, fn, arg, NULL, err);
    mdb_txn_abort(txn);
    return rc;
}

int kl_store_count(kl_store_t *self, const uint8_t key[16], const char *target,
                   size_t *count, char *err)
{
    *count = 0;
    MDB_txn *txn;
    int rc = kl_store__begin_read(self, &txn, err);
    if (rc)
        return rc;
    uint8_t pre[24];
    size_t plen;
    s_range(key, target, pre, &plen);
    rc = s_walk_records(self, txn, pre, plen, target, NULL, NULL, count, err);
    mdb_txn_abort(txn);
    return rc;
}

static int s_walk_workloads(kl_store_t *self, MDB_txn *txn,
                            kl_store_workload_fn fn, void *arg, char *err)
{
    MDB_cursor *cur;
    int mrc = mdb_cursor_open(txn, self->db_workloads, &cur);
    if (mrc)
        return kl_store__lmdb(self, mrc, "cursor", err);
    MDB_val k, v;
    int rc = KL_OK;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0 && !rc;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        Kiln__Workload *w = kiln__workload__unpack(NULL, v.mv_size, v.mv_data);
        if (!w || k.mv_size != 16) {
            if (w)
                kiln__workload__free_unpacked(w, NULL);
            rc = kl_seterr(err, KL_ERR_CORRUPT,
                           "store %s: a workload (%zu-byte key) does not "
                           "decode",
                           self->dir, k.mv_size);
            break;
        }
        rc = fn(w, arg);
        kiln__workload__free_unpacked(w, NULL);
    }
    if (mrc && mrc != MDB_NOTFOUND && rc == KL_OK)
        rc = kl_store__lmdb(self, mrc, "workloads", err);
    mdb_cursor_close(cur);
    return rc;
}

int kl_store_foreach_workload(kl_store_t *self, kl_store_workload_fn fn,
                              void *arg, char *err)
{
    return kl_store__foreach_all(self, fn, NULL, arg, err);
}

int kl_store__foreach_all(kl_store_t *self, kl_store_workload_fn wfn,
                          kl_store_record_fn rfn, void *arg, char *err)
{
    MDB_txn *txn;
    int rc = kl_store__begin_read(self, &txn, err);
    if (rc)
        return rc;
    if (wfn)
        rc = s_walk_workloads(self, txn, wfn, arg, err);
    if (rc == KL_OK && rfn)
        rc = s_walk_records(self, txn, NULL, 0, NULL, rfn, arg, NULL, err);
    mdb_txn_abort(txn);
    return rc;
}
