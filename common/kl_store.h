/* kl_store.h - the record store: one LMDB environment (a directory).
 *
 * Named databases (docs/store.md):
 *   workloads  key(16)                        -> Workload
 *   records    key(16) | target-id(8) | seq(8, big-endian) -> TuningRecord
 *   best       key(16) | target-id(8) | cond(1) -> the best valid record
 *              of that condition (value: seq(8, BE) | median_s bits(8, BE))
 *   seen       key(16) | target-id(8) | cond(1) | trace-hash(16) -> seq
 *   meta       text -> bytes (schema version, jobs)
 * target-id is kl_hash64 of the target string, big-endian; cond is the
 * record's measurement condition (kl_record.h: 0 warm, 1 cold). Seqs start
 * at 1 per (workload, target), so records iterate in commit order. What
 * counts as valid, and which condition a record has, is kl_record.h's.
 *
 * Schema 2 added the condition to best and seen and stopped counting
 * simulated and unverified records in them. A writer that opens a schema 1
 * store upgrades it in one transaction (best and seen rebuilt from the
 * records, which are not touched); a read-only open of a schema 1 store is
 * KL_ERR_VERSION with a message saying how to upgrade it.
 *
 * Only the coordinator writes; any number of processes may read at the same
 * time (open with KL_STORE_RDONLY); a reader adopts a map grown by the
 * writer on its next read. LMDB errors are translated once, here:
 * MDB_MAP_FULL doubles the map and retries the whole transaction; a disk
 * that cannot take it (ENOSPC, EDQUOT, EFBIG) is KL_ERR_NOSPC with a
 * message naming the directory and the map size, and nothing committed
 * before is lost. Every commit is durable (fsync) when it returns, unless
 * the store was opened with KL_STORE_NOSYNC. A write through a RDONLY
 * handle is KL_ERR_INVAL.
 *
 * Open a directory at most once per process (LMDB's rule: closing a second
 * handle would drop the locks of the first); share the handle instead. A
 * handle is used by one thread at a time. Callbacks of the foreach
 * functions may read the store (other reads are separate transactions) but
 * must not write to it.
 *
 * Messages returned to the caller are heap copies owned by the caller; free
 * them with the protobuf-c free_unpacked functions.
 */
#ifndef KL_STORE_H
#define KL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln.pb-c.h"
#include "kl_record.h"

#define KL_STORE_SCHEMA 2
/* Map size of a new store; it doubles each time it fills. */
#define KL_STORE_INITIAL_MAP ((size_t)64 << 20)

typedef struct kl_store_s kl_store_t;

enum {
    KL_STORE_RDONLY = 1 << 0,
    /* Commits return before they reach the disk (MDB_NOSYNC): a crash of
     * the machine may lose the last commits. For benchmarks and stores
     * that can be thrown away; never the default. */
    KL_STORE_NOSYNC = 1 << 1,
};

/* Opens (creating if needed, unless RDONLY) the store in directory dir. A
 * writer upgrades a schema 1 store (see the top); a read-only open of one
 * is KL_ERR_VERSION; a store of any other schema version is
 * KL_ERR_CORRUPT with a message; with RDONLY, a missing directory or store
 * is KL_ERR_NOTFOUND. */
int kl_store_open(kl_store_t **out, const char *dir, unsigned flags, char *err);
/* The same with the map of a writer made at least initial_map bytes
 * (kl_store_open uses KL_STORE_INITIAL_MAP); tests start small to exercise
 * growth. An existing larger map is kept. */
int kl_store_open_sized(kl_store_t **out, const char *dir, unsigned flags,
                        size_t initial_map, char *err);
void kl_store_close(kl_store_t **self_p);
/* The schema version the store had when it was opened: KL_STORE_SCHEMA,
 * or 1 when this open upgraded it. */
unsigned kl_store_schema_found(const kl_store_t *self);

/* Inserts or replaces a workload (keyed by w->key, 16 bytes). */
int kl_store_put_workload(kl_store_t *self, const Kiln__Workload *w, char *err);
/* KL_ERR_NOTFOUND when absent. */
int kl_store_get_workload(kl_store_t *self, const uint8_t key[16],
                          Kiln__Workload **out, char *err);

/* Commits n records in ONE write transaction: each gets the next seq of its
 * (workload, target) (written back into recs[i]->seq; time_us is set to
 * now when 0). A measurement (kl_record_kind) is added to seen under its
 * condition (when it has a 16-byte trace_hash; seen keeps the first seq
 * of a trace) and becomes the best of its condition when it is valid
 * (kl_record_valid) and there is no best yet or its median is strictly
 * lower. Simulated records of a real target and unverified ones are
 * stored, and that is all. Each record needs a 16-byte workload_key, a
 * target and a trace_hash of 0 or 16 bytes (else KL_ERR_INVAL naming the
 * record's index in the batch). Returns only after the commit is
 * durable. On failure nothing of the batch is written and the records'
 * seq and time_us are as they were. */
int kl_store_commit(kl_store_t *self, Kiln__TuningRecord **recs, size_t n,
                    char *err);

/* The best valid record of (key, target) measured in condition cond:
 * KL_ERR_NOTFOUND when none. Records of the other condition never
 * compete. */
int kl_store_best(kl_store_t *self, const uint8_t key[16], const char *target,
                  kl_cond_t cond, Kiln__TuningRecord **out, char *err);
/* Whether a trace with this hash was measured for (key, target) in
 * condition cond (simulated records of a real target and unverified ones
 * do not count). */
int kl_store_seen(kl_store_t *self, const uint8_t key[16], const char *target,
                  kl_cond_t cond, const uint8_t trace_hash[16], bool *seen,
                  char *err);

/* Calls fn for every record of key (all keys when key is NULL) on target
 * (every target when NULL), in (key, target, seq) order, inside one read
 * transaction. The record is borrowed for the call only. fn returns
 * non-zero to stop (that value is returned). */
typedef int (*kl_store_record_fn)(const Kiln__TuningRecord *rec, void *arg);
int kl_store_foreach_record(kl_store_t *self, const uint8_t *key,
                            const char *target, kl_store_record_fn fn,
                            void *arg, char *err);
typedef int (*kl_store_workload_fn)(const Kiln__Workload *w, void *arg);
int kl_store_foreach_workload(kl_store_t *self, kl_store_workload_fn fn,
                              void *arg, char *err);
/* Number of records of (key, target); target NULL counts every target of
 * key, key NULL every record (of target, when given). */
int kl_store_count(kl_store_t *self, const uint8_t key[16], const char *target,
                   size_t *count, char *err);

/* Small values in meta. get: KL_ERR_NOTFOUND when absent; *val is heap. */
int kl_store_meta_put(kl_store_t *self, const char *name, const void *val,
                      size_t len, char *err);
int kl_store_meta_get(kl_store_t *self, const char *name, void **val,
                      size_t *len, char *err);

/* Current map size in bytes (grows on MDB_MAP_FULL). */
size_t kl_store_map_size(const kl_store_t *self);

/* JSON lines interchange: one object per line, {"type":"workload",...} or
 * {"type":"record",...}, every field of the message under its proto
 * name; bytes as lower-case hex, enums by name ("STATUS_OK"), doubles
 * with 17 digits ("nan", "inf", "-inf" as strings), uint64 as numbers.
 * Export writes every workload, then every record in (key, target, seq)
 * order, from one snapshot. Import of an export is lossless (same
 * records, same seqs, same best, same seen); it commits many lines per
 * transaction. A record with seq 0 gets the next seq; one whose slot
 * holds the same bytes is skipped (re-importing a file is harmless), one
 * whose slot holds another record is KL_ERR_EXISTS. Records whose
 * workload is missing are accepted. A malformed line (bad JSON, unknown
 * type or field, wrong value type, bad hex) is an error naming its line
 * number; lines before it stay imported. *imported (optional) counts the
 * workloads and records written. */
int kl_store_export_jsonl(kl_store_t *self, FILE *out, char *err);
int kl_store_import_jsonl(kl_store_t *self, FILE *in, size_t *imported,
                          char *err);

/* One JSON line (without the newline) for a Workload or TuningRecord, in
 * the export format, with "type" first. Returns a heap string. */
char *kl_store_json_line(const char *type, const ProtobufCMessage *msg);

#endif
