/* kl_store.c - the record store on LMDB (see kl_store.h for the contract).
 *
 * Every LMDB return code is translated in kl_store__lmdb(), and nowhere else.
 * Write transactions go through s_write(), which owns the MDB_MAP_FULL policy:
 * abort, double the map, run the whole transaction again. */
#include <errno.h>
#include <lmdb.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "kl_err.h"
#include "kl_store_priv.h"
#include "kl_util.h"

/* Growth stops here: past it the store says KL_ERR_NOSPC. */
#define KL_STORE_MAX_MAP ((size_t)1 << 40)

/* ---- errors -------------------------------------------------------------- */

/* LMDB reports a short write as EIO ("filesystem full?"): tell a full
 * disk or a file size limit from a real I/O error. */
static bool s_disk_full(const kl_store_t *self)
{
    struct statvfs vfs;
    if (statvfs(self->dir, &vfs) == 0 &&
        (unsigned long long)vfs.f_bavail * vfs.f_frsize < (1ull << 20))
        return true;
    struct rlimit rl;
    char *path = kl_xasprintf("%s/data.mdb", self->dir);
    struct stat st;
    bool full = getrlimit(RLIMIT_FSIZE, &rl) == 0 &&
                rl.rlim_cur != RLIM_INFINITY && stat(path, &st) == 0 &&
                (rlim_t)st.st_size + (1u << 20) >= rl.rlim_cur;
    free(path);
    return full;
}

int kl_store__lmdb(kl_store_t *self, int rc, const char *what, char *err)
{
    const char *dir = self->dir;
    size_t mib = self->map_size >> 20;
    if (rc == EIO && s_disk_full(self))
        rc = ENOSPC;
    switch (rc) {
    case MDB_NOTFOUND:
        return kl_seterr(err, KL_ERR_NOTFOUND, "store %s: %s: not found", dir,
                         what);
    case MDB_MAP_FULL:
        self->map_full = true;
        return kl_seterr(err, KL_ERR_NOSPC, "store %s: %s: map full at %zu MiB",
                         dir, what, mib);
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return kl_seterr(err, KL_ERR_NOSPC,
                         "store %s: %s: the disk refused the write (%s); map "
                         "size %zu MiB; nothing of this transaction was kept",
                         dir, what, mdb_strerror(rc), mib);
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
        return kl_seterr(err, KL_ERR_CORRUPT, "store %s: %s: %s", dir, what,
                         mdb_strerror(rc));
    case ENOENT:
        return kl_seterr(err, KL_ERR_NOTFOUND, "store %s: %s: %s", dir, what,
                         mdb_strerror(rc));
    default:
        return kl_seterr(err, KL_ERR_IO, "store %s: %s: %s", dir, what,
                         mdb_strerror(rc));
    }
}

static void s_refresh_map_size(kl_store_t *self)
{
    MDB_envinfo info;
    if (mdb_env_info(self->env, &info) == 0)
        self->map_size = info.me_mapsize;
}

/* ---- transactions ------------------------------------------------------- */

/* A read transaction. Another process may have grown the map since this
 * one last looked: adopt its size and try again. */
int kl_store__begin_read(kl_store_t *self, MDB_txn **txn, char *err)
{
    for (int tries = 0;; tries++) {
        int rc = mdb_txn_begin(self->env, NULL, MDB_RDONLY, txn);
        if (rc == MDB_MAP_RESIZED && tries < 8) {
            rc = mdb_env_set_mapsize(self->env, 0);
            if (rc)
                return kl_store__lmdb(self, rc, "adopt the new map size", err);
            s_refresh_map_size(self);
            continue;
        }
        return rc ? kl_store__lmdb(self, rc, "begin read", err) : KL_OK;
    }
}

static int s_grow(kl_store_t *self, char *err)
{
    size_t cur = self->map_size, next = cur * 2;
    if (next > KL_STORE_MAX_MAP)
        return kl_seterr(err, KL_ERR_NOSPC,
                         "store %s: map full at %zu MiB, the largest allowed",
                         self->dir, cur >> 20);
    int rc = mdb_env_set_mapsize(self->env, next);
    if (rc)
        return kl_seterr(
            err, KL_ERR_NOSPC,
            "store %s: cannot grow the map from %zu to %zu MiB: %s", self->dir,
            cur >> 20, next >> 20, mdb_strerror(rc));
    s_refresh_map_size(self);
    return KL_OK;
}

/* fn does the writes and returns a kl_err; an LMDB failure inside it goes
 * through kl_store__lmdb(), which flags MDB_MAP_FULL for the retry below. */
typedef int (*s_write_fn)(kl_store_t *self, MDB_txn *txn, void *ctx, char *err);

static int s_write(kl_store_t *self, s_write_fn fn, void *ctx, char *err)
{
    if (self->rdonly)
        return kl_seterr(err, KL_ERR_INVAL, "store %s: opened read-only",
                         self->dir);
    for (int tries = 0;; tries++) {
        MDB_txn *txn;
        int rc = mdb_txn_begin(self->env, NULL, 0, &txn);
        if (rc == MDB_MAP_RESIZED && tries < 8) {
            mdb_env_set_mapsize(self->env, 0);
            s_refresh_map_size(self);
            continue;
        }
        if (rc)
            return kl_store__lmdb(self, rc, "begin write", err);
        self->map_full = false;
        rc = fn(self, txn, ctx, err);
        if (rc == KL_OK) {
            int mrc = mdb_txn_commit(txn);
            if (mrc == 0)
                return KL_OK;
            rc = kl_store__lmdb(self, mrc, "commit", err);
        } else {
            mdb_txn_abort(txn);
        }
        if (!self->map_full)
            return rc;
        rc = s_grow(self, err);
        if (rc)
            return rc;
    }
}

static uint8_t *s_pack_buf(kl_store_t *self, size_t n)
{
    if (n > self->pack_cap) {
        self->pack_cap = n * 2;
        free(self->pack);
        self->pack = kl_xmalloc(self->pack_cap);
    }
    return self->pack;
}

/* ---- open / close ------------------------------------------------------- */

static int s_upgrade_fn(kl_store_t *self, MDB_txn *txn, void *ctx, char *err);

static int s_open_dbs(kl_store_t *self, char *err)
{
    static const char *names[] = {"workloads", "records", "best", "seen",
                                  "meta"};
    MDB_dbi *dbis[] = {&self->db_workloads, &self->db_records, &self->db_best,
                       &self->db_seen, &self->db_meta};
    MDB_txn *txn;
    int rc;
    if (self->rdonly) {
        rc = kl_store__begin_read(self, &txn, err);
    } else {
        rc = mdb_txn_begin(self->env, NULL, 0, &txn);
        if (rc)
            rc = kl_store__lmdb(self, rc, "begin write", err);
    }
    if (rc)
        return rc;
    for (int i = 0; i < 5; i++) {
        int mrc =
            mdb_dbi_open(txn, names[i], self->rdonly ? 0 : MDB_CREATE, dbis[i]);
        if (mrc == MDB_NOTFOUND) {
            mdb_txn_abort(txn);
            return kl_seterr(err, KL_ERR_CORRUPT,
                             "store %s: no '%s' database: not a kiln store",
                             self->dir, names[i]);
        }
        if (mrc) {
            mdb_txn_abort(txn);
            return kl_store__lmdb(self, mrc, names[i], err);
        }
    }
    /* The schema: written by the first writer, checked by everyone. */
    MDB_val k = {6, "schema"}, v;
    int mrc = mdb_get(txn, self->db_meta, &k, &v);
    uint8_t mine[4] = {0, 0, 0, KL_STORE_SCHEMA};
    const uint8_t *p = mrc == 0 ? v.mv_data : NULL;
    unsigned got = p && v.mv_size == 4
                       ? (unsigned)p[0] << 24 | (unsigned)p[1] << 16 |
                             (unsigned)p[2] << 8 | p[3]
                       : 0;
    self->schema_found = mrc == MDB_NOTFOUND ? KL_STORE_SCHEMA : got;
    if (mrc == MDB_NOTFOUND && !self->rdonly) {
        MDB_val nv = {4, mine};
        mrc = mdb_put(txn, self->db_meta, &k, &nv, 0);
    } else if (mrc == MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return kl_seterr(err, KL_ERR_CORRUPT,
                         "store %s: no schema version: not a kiln store",
                         self->dir);
    } else if (mrc == 0 && got == 1 && self->rdonly) {
        mdb_txn_abort(txn);
        return kl_seterr(err, KL_ERR_VERSION,
                         "store %s: schema version 1 (from before records "
                         "kept their evaluator settings), this kiln reads "
                         "schema %d: upgrade it once with 'kiln db upgrade "
                         "--db %s' (kiln tune and kiln db import on it "
                         "upgrade it too)",
                         self->dir, KL_STORE_SCHEMA, self->dir);
    } else if (mrc == 0 && got != 1 &&
               (v.mv_size != 4 || memcmp(v.mv_data, mine, 4))) {
        mdb_txn_abort(txn);
        return kl_seterr(err, KL_ERR_CORRUPT,
                         "store %s: schema version %u, this kiln reads "
                         "schema %d",
                         self->dir, got, KL_STORE_SCHEMA);
    }
    if (mrc) {
        mdb_txn_abort(txn);
        return kl_store__lmdb(self, mrc, "schema", err);
    }
    mrc = mdb_txn_commit(txn);
    return mrc ? kl_store__lmdb(self, mrc, "open", err) : KL_OK;
}

int kl_store_open_sized(kl_store_t **out, const char *dir, unsigned flags,
                        size_t initial_map, char *err)
{
    *out = NULL;
    if (!dir || !*dir)
        return kl_seterr(err, KL_ERR_INVAL, "store: no directory given");
    struct stat st;
    if (flags & KL_STORE_RDONLY) {
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return kl_seterr(err, KL_ERR_NOTFOUND,
                             "store %s: no such directory", dir);
    } else {
        int rc = kl_mkdirs(dir, err);
        if (rc)
            return rc;
    }
    kl_store_t *self = kl_xcalloc(1, sizeof *self);
    self->dir = kl_xstrdup(dir);
    self->rdonly = flags & KL_STORE_RDONLY;
    int rc = mdb_env_create(&self->env);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(self->env, 8);
    if (rc == 0)
        rc = mdb_env_open(self->env, dir,
                          MDB_NOTLS | (self->rdonly ? MDB_RDONLY : 0) |
                              (flags & KL_STORE_NOSYNC ? MDB_NOSYNC : 0),
                          0644);
    if (rc) {
        int code = rc == ENOENT && self->rdonly
                       ? kl_seterr(err, KL_ERR_NOTFOUND,
                                   "store %s: no store in this directory", dir)
                       : kl_store__lmdb(self, rc, "open", err);
        kl_store_close(&self);
        return code;
    }
    if (!self->rdonly) {
        /* Read slots of crashed readers would pin old pages forever. */
        int dead = 0;
        mdb_reader_check(self->env, &dead);
    }
    s_refresh_map_size(self);
    if (!self->rdonly && self->map_size < initial_map) {
        rc = mdb_env_set_mapsize(self->env, initial_map);
        if (rc) {
            int code = kl_store__lmdb(self, rc, "set map size", err);
            kl_store_close(&self);
            return code;
        }
        s_refresh_map_size(self);
    }
    rc = s_open_dbs(self, err);
    if (rc == KL_OK && self->schema_found == 1)
        rc = s_write(self, s_upgrade_fn, NULL, err);
    if (rc) {
        kl_store_close(&self);
        return rc;
    }
    *out = self;
    return KL_OK;
}

unsigned kl_store_schema_found(const kl_store_t *self)
{
    return self->schema_found;
}

int kl_store_open(kl_store_t **out, const char *dir, unsigned flags, char *err)
{
    return kl_store_open_sized(out, dir, flags, KL_STORE_INITIAL_MAP, err);
}

void kl_store_close(kl_store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_store_t *self = *self_p;
    if (self->env)
        mdb_env_close(self->env);
    free(self->pack);
    free(self->dir);
    free(self);
    *self_p = NULL;
}

size_t kl_store_map_size(const kl_store_t *self)
{
    return self->map_size;
}

const char *kl_store__dir(const kl_store_t *self)
{
    return self->dir;
}

/* ---- workloads ----------------------------------------------------------- */

static int s_put_workload(kl_store_t *self, MDB_txn *txn,
                          const Kiln__Workload *w, char *err)
{
    if (w->key.len != 16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "workload '%s': key is %zu bytes, want 16",
                         w->name ? w->name : "", w->key.len);
    size_t n = kiln__workload__get_packed_size(w);
    uint8_t *buf = s_pack_buf(self, n);
    kiln__workload__pack(w, buf);
    MDB_val k = {16, w->key.data}, v = {n, buf};
    int rc = mdb_put(txn, self->db_workloads, &k, &v, 0);
    return rc ? kl_store__lmdb(self, rc, "put workload", err) : KL_OK;
}

static int s_put_workload_fn(kl_store_t *self, MDB_txn *txn, void *ctx,
                             char *err)
{
    return s_put_workload(self, txn, ctx, err);
}

int kl_store_put_workload(kl_store_t *self, const Kiln__Workload *w, char *err)
{
    return s_write(self, s_put_workload_fn, (void *)w, err);
}

int kl_store_get_workload(kl_store_t *self, const uint8_t key[16],
                          Kiln__Workload **out, char *err)
{
    *out = NULL;
    MDB_txn *txn;
    int rc = kl_store__begin_read(self, &txn, err);
    if (rc)
        return rc;
    MDB_val k = {16, (void *)key}, v;
    int mrc = mdb_get(txn, self->db_workloads, &k, &v);
    if (mrc == 0) {
        *out = kiln__workload__unpack(NULL, v.mv_size, v.mv_data);
        if (!*out) {
            char hex[33];
            kl_hex128(key, hex);
            rc = kl_seterr(err, KL_ERR_CORRUPT,
                           "store %s: workload %s does not decode (%zu bytes)",
                           self->dir, hex, v.mv_size);
        }
    } else {
        rc = kl_store__lmdb(self, mrc, "workload", err);
    }
    mdb_txn_abort(txn);
    return rc;
}

/* ---- commit ---------------------------------------------------------------
 * best value: seq(8, BE) | median_s bits(8, BE), so that a new record is
 * ranked without unpacking the old best. Which records count is
 * kl_record.h's. */

static int s_update_best(kl_store_t *self, MDB_txn *txn,
                         const Kiln__TuningRecord *r, const uint8_t pre[24],
                         char *err)
{
    uint8_t bk[25];
    kl_store__best_key(bk, pre, kl_record_cond(r));
    MDB_val k = {25, bk}, old;
    int mrc = mdb_get(txn, self->db_best, &k, &old);
    if (mrc && mrc != MDB_NOTFOUND)
        return kl_store__lmdb(self, mrc, "best", err);
    if (mrc == 0 && old.mv_size != KL_STORE_BEST_LEN)
        return kl_seterr(err, KL_ERR_CORRUPT,
                         "store %s: best entry of %s is %zu bytes, want %d",
                         self->dir, r->target, old.mv_size, KL_STORE_BEST_LEN);
    if (mrc == 0) {
        /* The strictly lower median wins; a tie keeps the older best. */
        uint64_t bits = kl_store__get_be64((const uint8_t *)old.mv_data + 8);
        double old_median;
        memcpy(&old_median, &bits, sizeof bits);
        if (!(r->median_s < old_median))
            return KL_OK;
    }
    uint8_t val[KL_STORE_BEST_LEN];
    uint64_t bits;
    memcpy(&bits, &r->median_s, sizeof bits);
    kl_store__be64(val, r->seq);
    kl_store__be64(val + 8, bits);
    MDB_val v = {KL_STORE_BEST_LEN, val};
    mrc = mdb_put(txn, self->db_best, &k, &v, 0);
    return mrc ? kl_store__lmdb(self, mrc, "put best", err) : KL_OK;
}

static int s_update_seen(kl_store_t *self, MDB_txn *txn,
                         const Kiln__TuningRecord *r, const uint8_t pre[24],
                         char *err)
{
    uint8_t sk[41], sv[8];
    kl_store__seen_key(sk, pre, kl_record_cond(r), r->trace_hash.data);
    kl_store__be64(sv, r->seq);
    MDB_val k = {41, sk}, v = {8, sv};
    /* The first record of a trace stays the one seen points at. */
    int mrc = mdb_put(txn, self->db_seen, &k, &v, MDB_NOOVERWRITE);
    if (mrc && mrc != MDB_KEYEXIST)
        return kl_store__lmdb(self, mrc, "put seen", err);
    return KL_OK;
}

/* The indexes of one stored record: seen and best, when it counts. */
static int s_index_record(kl_store_t *self, MDB_txn *txn,
                          const Kiln__TuningRecord *r, const uint8_t pre[24],
                          char *err)
{
    if (kl_record_kind(r) != KL_RECORD_MEASURED)
        return KL_OK;
    if (r->trace_hash.len == 16) {
        int rc = s_update_seen(self, txn, r, pre, err);
        if (rc)
            return rc;
    }
    return kl_record_valid(r) ? s_update_best(self, txn, r, pre, err) : KL_OK;
}

/* The last seq of (key, target) in this transaction, 0 when none. */
static int s_last_seq(kl_store_t *self, MDB_cursor *cur, const uint8_t pre[24],
                      uint64_t *seq, char *err)
{
    uint8_t probe[32];
    memcpy(probe, pre, 24);
    memset(probe + 24, 0xff, 8);
    MDB_val k = {32, probe}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (mrc == 0)
        mrc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
    else if (mrc == MDB_NOTFOUND)
        mrc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    *seq = 0;
    if (mrc == MDB_NOTFOUND)
        return KL_OK;
    if (mrc)
        return kl_store__lmdb(self, mrc, "find last seq", err);
    if (k.mv_size == 32 && memcmp(k.mv_data, pre, 24) == 0)
        *seq = kl_store__get_be64((const uint8_t *)k.mv_data + 24);
    return KL_OK;
}

static int s_check_record(const Kiln__TuningRecord *r, char *err)
{
    if (!r)
        return kl_seterr(err, KL_ERR_INVAL, "record is NULL");
    if (r->workload_key.len != 16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "record: workload_key is %zu bytes, want 16",
                         r->workload_key.len);
    if (!r->target || !*r->target)
        return kl_seterr(err, KL_ERR_INVAL, "record: empty target");
    if (r->trace_hash.len != 0 && r->trace_hash.len != 16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "record: trace_hash is %zu bytes, want 16 or none",
                         r->trace_hash.len);
    return KL_OK;
}

typedef struct {
    kl_store__item_t *items;
    size_t n;
    bool keep_seq;
    size_t written;
    size_t failed;
    MDB_cursor *cur;
    uint8_t last_pre[24]; /* (key, target) of last_seq, when have_last */
    uint64_t last_seq;
    bool have_last;
} s_batch_t;

/* Puts one record; S_SKIPPED (not an error) means an identical record
 * already held its slot and nothing was written. */
#define S_SKIPPED (-1)

static int s_put_record(kl_store_t *self, MDB_txn *txn, s_batch_t *b,
                        Kiln__TuningRecord *r, char *err)
{
    int rc = s_check_record(r, err);
    if (rc)
        return rc;
    uint8_t pre[24], rk[32];
    kl_store__prefix(pre, r->workload_key.data, kl_store__tid(r->target));
    bool explicit_seq = b->keep_seq && r->seq != 0;
    if (!explicit_seq) {
        if (!b->have_last || memcmp(pre, b->last_pre, 24) != 0) {
            rc = s_last_seq(self, b->cur, pre, &b->last_seq, err);
            if (rc)
                return rc;
        }
        r->seq = ++b->last_seq;
        memcpy(b->last_pre, pre, 24);
        b->have_last = true;
    } else {
        b->have_last = false; /* may no longer be the last seq */
    }
    if (r->time_us == 0 && !b->keep_seq)
        r->time_us = kl_unix_us();
    memcpy(rk, pre, 24);
    kl_store__be64(rk + 24, r->seq);
    size_t n = kiln__tuning_record__get_packed_size(r);
    uint8_t *buf = s_pack_buf(self, n);
    kiln__tuning_record__pack(r, buf);
    MDB_val k = {32, rk}, v = {n, buf};
    int mrc = mdb_put(txn, self->db_records, &k, &v, MDB_NOOVERWRITE);
    if (mrc == MDB_KEYEXIST) {
        if (v.mv_size == n && memcmp(v.mv_data, buf, n) == 0)
            return S_SKIPPED;
        return kl_seterr(err, KL_ERR_EXISTS,
                         "store %s: target %s already has another record "
                         "with seq %llu",
                         self->dir, r->target, (unsigned long long)r->seq);
    }
    if (mrc)
        return kl_store__lmdb(self, mrc, "put record", err);
    return s_index_record(self, txn, r, pre, err);
}

/* Schema 1 -> 2: best and seen rebuilt from the records under the rules
 * of kl_record.h (conditions; simulated and unverified records out). The
 * records themselves are not touched. */
static int s_upgrade_fn(kl_store_t *self, MDB_txn *txn, void *ctx, char *err)
{
    (void)ctx;
    int mrc = mdb_drop(txn, self->db_best, 0);
    if (mrc == 0)
        mrc = mdb_drop(txn, self->db_seen, 0);
    MDB_cursor *cur = NULL;
    if (mrc == 0)
        mrc = mdb_cursor_open(txn, self->db_records, &cur);
    if (mrc)
        return kl_store__lmdb(self, mrc, "upgrade from schema 1", err);
    MDB_val k, v;
    int rc = KL_OK;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0 && !rc;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        Kiln__TuningRecord *r =
            k.mv_size == 32
                ? kiln__tuning_record__unpack(NULL, v.mv_size, v.mv_data)
                : NULL;
        if (!r) {
            rc = kl_seterr(err, KL_ERR_CORRUPT,
                           "store %s: upgrade from schema 1: a record "
                           "(%zu-byte key, %zu bytes) does not decode",
                           self->dir, k.mv_size, v.mv_size);
            break;
        }
        rc = s_index_record(self, txn, r, k.mv_data, err);
        kiln__tuning_record__free_unpacked(r, NULL);
    }
    mdb_cursor_close(cur);
    if (rc)
        return rc;
    if (mrc != MDB_NOTFOUND)
        return kl_store__lmdb(self, mrc, "upgrade from schema 1", err);
    uint8_t mine[4] = {0, 0, 0, KL_STORE_SCHEMA};
    MDB_val sk = {6, "schema"}, sv = {4, mine};
    mrc = mdb_put(txn, self->db_meta, &sk, &sv, 0);
    return mrc ? kl_store__lmdb(self, mrc, "upgrade from schema 1", err)
               : KL_OK;
}

static int s_batch_fn(kl_store_t *self, MDB_txn *txn, void *ctx, char *err)
{
    s_batch_t *b = ctx;
    b->written = 0;
    b->have_last = false;
    int mrc = mdb_cursor_open(txn, self->db_records, &b->cur);
    if (mrc)
        return kl_store__lmdb(self, mrc, "cursor", err);
    int rc = KL_OK;
    for (size_t i = 0; i < b->n && rc == KL_OK; i++) {
        kl_store__item_t *it = &b->items[i];
        rc = it->w ? s_put_workload(self, txn, it->w, err)
                   : s_put_record(self, txn, b, it->r, err);
        if (rc == S_SKIPPED)
            rc = KL_OK;
        else if (rc == KL_OK)
            b->written++;
        b->failed = i;
    }
    mdb_cursor_close(b->cur);
    if (rc == KL_OK)
        b->failed = b->n;
    return rc;
}

int kl_store__write_items(kl_store_t *self, kl_store__item_t *items, size_t n,
                          bool keep_seq, size_t *written, size_t *failed,
                          char *err)
{
    /* A retry or a failure must not leave seqs or times of a batch that was
     * not written in the caller's records. */
    uint64_t *saved = kl_xmalloc(2 * (n ? n : 1) * sizeof *saved);
    for (size_t i = 0; i < n; i++)
        if (items[i].r) {
            saved[2 * i] = items[i].r->seq;
            saved[2 * i + 1] = items[i].r->time_us;
        }
    s_batch_t b = {.items = items, .n = n, .keep_seq = keep_seq};
    int rc = s_write(self, s_batch_fn, &b, err);
    if (rc) {
        for (size_t i = 0; i < n; i++)
            if (items[i].r) {
                items[i].r->seq = saved[2 * i];
                items[i].r->time_us = saved[2 * i + 1];
            }
    }
    free(saved);
    if (written)
        *written = rc ? 0 : b.written;
    if (failed)
        *failed = rc && rc != KL_ERR_NOSPC ? b.failed : n;
    return rc;
}

int kl_store_commit(kl_store_t *self, Kiln__TuningRecord **recs, size_t n,
                    char *err)
{
    if (n == 0)
        return KL_OK;
    kl_store__item_t *items = kl_xcalloc(n, sizeof *items);
    for (size_t i = 0; i < n; i++)
        items[i].r = recs[i];
    size_t failed = n;
    int rc = kl_store__write_items(self, items, n, false, NULL, &failed, err);
    free(items);
    if (rc && failed < n && err) {
        char msg[KL_ERRMSG_LEN];
        snprintf(msg, sizeof msg, "%s", err);
        kl_seterr(err, rc, "record %zu of the batch: %s", failed, msg);
    }
    return rc;
}

/* ---- meta ------------------------------------------------------------------
 */

typedef struct {
    const char *name;
    const void *val;
    size_t len;
} s_meta_t;

static int s_meta_fn(kl_store_t *self, MDB_txn *txn, void *ctx, char *err)
{
    s_meta_t *m = ctx;
    MDB_val k = {strlen(m->name), (void *)m->name},
            v = {m->len, (void *)m->val};
    int mrc = mdb_put(txn, self->db_meta, &k, &v, 0);
    return mrc ? kl_store__lmdb(self, mrc, "put meta", err) : KL_OK;
}

static int s_check_meta_name(const char *name, char *err)
{
    if (!name || !*name || strlen(name) > 256)
        return kl_seterr(err, KL_ERR_INVAL,
                         "meta name must be 1 to 256 characters");
    return KL_OK;
}

int kl_store_meta_put(kl_store_t *self, const char *name, const void *val,
                      size_t len, char *err)
{
    int rc = s_check_meta_name(name, err);
    if (rc)
        return rc;
    if (strcmp(name, "schema") == 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "meta 'schema' is the store's own; pick another name");
    s_meta_t m = {name, val, len};
    return s_write(self, s_meta_fn, &m, err);
}

int kl_store_meta_get(kl_store_t *self, const char *name, void **val,
                      size_t *len, char *err)
{
    *val = NULL;
    *len = 0;
    int rc = s_check_meta_name(name, err);
    if (rc)
        return rc;
    MDB_txn *txn;
    rc = kl_store__begin_read(self, &txn, err);
    if (rc)
        return rc;
    MDB_val k = {strlen(name), (void *)name}, v;
    int mrc = mdb_get(txn, self->db_meta, &k, &v);
    if (mrc == 0) {
        *val = kl_xmalloc(v.mv_size ? v.mv_size : 1);
        memcpy(*val, v.mv_data, v.mv_size);
        *len = v.mv_size;
    } else {
        rc = kl_store__lmdb(self, mrc, name, err);
    }
    mdb_txn_abort(txn);
    return rc;
}
