/* checkpoint/store.h - the checkpoint store's internal API (runner/ reaches LMDB only here).
 *
 * Work happens in transactions run as callbacks: cairn__store_write(s, fn, arg) runs fn inside
 * one LMDB write transaction and commits it. If the map is full the transaction is aborted, the
 * map grown and fn run again from scratch, so fn must only read and write through the txn (and
 * its own arg) and must tolerate being called twice. Records are msgpack arrays of fixed
 * layout (the store's schema version says which); the typed get/put functions below encode and
 * decode them and keep the secondary indexes (status/due, tenant, finished) consistent with the
 * task records.
 */
#ifndef CAIRN_CHECKPOINT_STORE_H
#define CAIRN_CHECKPOINT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cairn.h"

/* The store's schema version. 6: a task's input, step, progress and audit records (and split
 * tails) are in the tasks database beside its task record, under its ID, a NUL and a kind byte
 * (checkpoint/store.c); opening an older store moves them there, in one transaction. 5: a step
 * record whose last LMDB page would hold only a few of its
 * bytes keeps those in the database `tails`, under the same key and one checksum
 * (checkpoint/checksum.c); opening a schema-4 store only creates that database. 4: records are
 * msgpack arrays with fixed positions, hashes as their bytes, a task's times relative to its
 * creation (records.c); opening an older store converts every record, in one transaction. 3: every
 * record ends in a checksum over its database, key and value (checkpoint/checksum.c); opening an
 * older store adds them, in one transaction. 2: a sync store follows checkpoint/synced.c's protocol
 * (relaxed commits unflushed under a pin), which a cairn of schema 1 would break by reusing the
 * pages of the last durable snapshot; opening a schema-1 store upgrades it, after which such a
 * cairn refuses it. */
#define CAIRN__SCHEMA 6
#define CAIRN__ID_MAX 128
#define CAIRN__NAME_MAX 64
#define CAIRN__ERR_MAX 512
_Static_assert(CAIRN__ID_MAX >= CAIRN_TASK_ID_MAX, "a task record holds any valid task ID");

typedef struct cairn__txn cairn__txn;
typedef int (*cairn__txn_fn)(cairn__txn *t, void *arg);

/* Whether a write survives a power loss once it returns (see the durability argument in
 * store.c and synced.c): a DURABLE write of a sync store is a durable point, flushed before the
 * function returns; a RELAXED one is not flushed and may be undone by a power cut back to the
 * last durable point (never torn). nosync stores flush neither. */
enum { CAIRN__RELAXED = 0, CAIRN__DURABLE = 1 };

/* fn runs on whichever thread leads the batch (group commit, store.c), so it must not start
 * another write on the same handle (that write would wait for the batch it is in) and must
 * leave its messages through the cairn__txn, not in thread-local state. */
int cairn__store_write(cairn_store *s, int durable, cairn__txn_fn fn, void *arg);
int cairn__store_read(cairn_store *s, cairn__txn_fn fn, void *arg);
/* How many read transactions this handle has begun (what a test counts a run's reads by). */
uint64_t cairn__store_reads(const cairn_store *s);
/* Group commit (store.c, cairn__store_write): the write transactions this handle committed or
 * tried, and the writes they held (more writes than transactions: several threads' writes went
 * into one). */
void cairn__store_batches(cairn_store *s, uint64_t *batches, uint64_t *writes);
/* Makes what was committed up to transaction `upto` (0: everything so far; a task record's
 * `txn` says when it was written) survive a power loss: in a sync store, a durable point unless
 * one covers it already. For a caller about to report a state it read rather than wrote - a
 * task that already succeeded, died or is in doubt - which another process may have committed
 * a moment ago and not flushed yet. */
int cairn__store_settle(cairn_store *s, uint64_t upto);
/* Sets the store's error message (printf-style) and returns err. */
int cairn__store_fail(cairn_store *s, int err, const char *fmt, ...) CAIRN_PRINTF(3, 4);
cairn_store *cairn__txn_store(cairn__txn *t);
int64_t cairn__now_ms(void);
/* In a forked child that must not touch the store: makes the map read-only in this process, so
 * that a wild write in the child faults instead of reaching a nosync store's writable map. */
void cairn__store_seal(cairn_store *s);
/* 1 if the directory holds the witnesses of a store that had commits (its file `created`, or a
 * sync store's marker), whatever became of data.mdb (checkpoint/filecheck.c): a command that
 * must not create a store then opens it, to be refused, instead of saying there is none. */
int cairn__store_was_created(const char *dir);
/* The store's ID: 16 random bytes made when the store was created (a store an older cairn made
 * gets one on the first call, in a write of its own), so that what names a delivery differs
 * between stores that hold the same task ID. Read once per handle. */
int cairn__store_id(cairn_store *s, unsigned char out[16]);
/* A callback of the library's user (a public view's row function) runs inside a store
 * transaction but outside its fault guard (checkpoint/guard.c): a fault there is the user's
 * bug, to crash as it would anywhere, not a damaged page to report. */
void *cairn__guard_suspend(void);
void cairn__guard_resume(void *saved);
/* Fault injection for tests: fail the Nth write transaction from now with `err` (0 = off). */
void cairn__store_inject_write_failure(cairn_store *s, uint32_t nth, int err);
/* Fault injection for tests: the next flush of a sync store's data fails with errno `err`. */
void cairn__store_inject_flush_failure(cairn_store *s, int err);

/* A process identity for leases: host, pid and the process start time (clock ticks since
 * boot, from /proc), so a reused pid is not mistaken for the owner. */
typedef struct cairn__owner {
    char host[64];
    int32_t pid;
    uint64_t start;
} cairn__owner;

typedef struct cairn__task_rec {
    char id[CAIRN__ID_MAX + 1];
    char graph[CAIRN__NAME_MAX + 1];
    char fingerprint[65];
    char payload_hash[65];
    char steps_pin[1024]; /* "name@version,..." of the graph that started the task */
    char tenant[CAIRN__ID_MAX + 1];
    char error[CAIRN__ERR_MAX];
    char error_step[CAIRN__NAME_MAX + 1];
    uint8_t state;
    uint8_t tombstone;
    uint32_t attempt;
    uint32_t generation;
    uint64_t audit_seq;
    int64_t created_ms, updated_ms, finished_ms, next_retry_ms;
    /* lease: valid while lease_expires_ms > now and the owner lives */
    cairn__owner owner;
    uint64_t lease_token;
    int64_t lease_expires_ms;
    /* the transaction that last wrote the record (0: unknown, a record written before it was
     * kept): whether a durable point covers its state is then a comparison */
    uint64_t txn;
} cairn__task_rec;

typedef struct cairn__step_rec {
    uint8_t state;    /* cairn_step_state */
    uint8_t resolved; /* set by an operator's resolve */
    uint32_t generation;
    uint32_t invocations;
    int64_t updated_ms, intent_ms;
    char error[CAIRN__ERR_MAX];
    const void *output; /* msgpack bytes, valid until the txn ends; NULL = none */
    size_t output_len;
} cairn__step_rec;

typedef struct cairn__audit_rec {
    int64_t t_ms;
    uint8_t from, to; /* task states; from == to for step-level events */
    uint32_t attempt, generation;
    char step[CAIRN__NAME_MAX + 1];
    char reason[CAIRN__ERR_MAX];
} cairn__audit_rec;

/* Tasks. get: 0, CAIRN_ENOTFOUND, CAIRN_ECORRUPT, CAIRN_ESCHEMA. put keeps the indexes. */
int cairn__task_get(cairn__txn *t, const char *id, cairn__task_rec *out);
int cairn__task_put(cairn__txn *t, const cairn__task_rec *rec);
int cairn__task_del(cairn__txn *t, const char *id); /* the record, its steps, progress, audit */
/* A task's input (msgpack), kept apart from the task record so that the record, rewritten at
 * every step commit, stays small. get: 0 (data valid until the txn ends), CAIRN_ENOTFOUND,
 * CAIRN_ECORRUPT. */
int cairn__input_get(cairn__txn *t, const char *id, const void **data, size_t *len);
int cairn__input_put(cairn__txn *t, const char *id, const void *data, size_t len);
/* Deletes a task's step records, progress and input (gc keeps the task record as a tombstone). */
int cairn__task_drop_outputs(cairn__txn *t, const char *id);
/* Reserves the task ID for this payload hash in one atomic step. 0 if newly reserved or
 * already reserved with the same hash; CAIRN_ECONFLICT with *existing set otherwise. */
int cairn__idem_reserve(cairn__txn *t, const char *id, const char *hash, char existing[65]);
int cairn__idem_del(cairn__txn *t, const char *id);

/* Steps: the record of `step` that applies in generation `gen` (the latest with generation
 * <= gen). ENOTFOUND if none. */
int cairn__step_get(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                    cairn__step_rec *out);
int cairn__step_put(cairn__txn *t, const char *task, const char *step, const cairn__step_rec *rec);
/* Every record of a task's step, all generations, oldest first. */
typedef int (*cairn__step_cb)(const char *step, const cairn__step_rec *rec, void *arg);
int cairn__step_each(cairn__txn *t, const char *task, cairn__step_cb cb, void *arg);

int cairn__progress_get(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                        const void **data, size_t *len);
int cairn__progress_put(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                        const void *data, size_t len);

int cairn__audit_append(cairn__txn *t, cairn__task_rec *task, const cairn__audit_rec *rec);
typedef int (*cairn__audit_cb)(const cairn__audit_rec *rec, void *arg);
int cairn__audit_each(cairn__txn *t, const char *task, cairn__audit_cb cb, void *arg);

/* Consumed queue messages: 0 and the task that consumed it, or ENOTFOUND. */
int cairn__msg_get(cairn__txn *t, const char *msg_id, char task_out[CAIRN__ID_MAX + 1]);
int cairn__msg_put(cairn__txn *t, const char *msg_id, const char *task);
/* Forgets messages recorded at or before upto_ms (at most `limit` in this transaction); *n says
 * how many. gc calls it with the tombstone window: a redelivery later than that runs again. */
int cairn__msg_expire(cairn__txn *t, int64_t upto_ms, uint32_t limit, uint32_t *n);

/* Iteration over the status index: tasks in `state` whose due time <= upto_ms, in due order.
 * The due time is next_retry_ms for failed tasks and updated_ms (the last state change)
 * otherwise. The callback returns 0 to go on, 1 to stop, <0 for an error. */
typedef int (*cairn__id_cb)(const char *id, void *arg);
int cairn__due_each(cairn__txn *t, cairn_state state, int64_t upto_ms, cairn__id_cb cb, void *arg);
/* Counts the tasks in `state` due at or before upto_ms, stopping at cap (no ids are read: the
 * cost is the count's, at most cap keys), and *first_ms the earliest due time in that state
 * (0: none), read from the first key. */
int cairn__due_count(cairn__txn *t, cairn_state state, int64_t upto_ms, uint64_t cap, uint64_t *n,
                     int64_t *first_ms);
/* Running tasks of a tenant. */
int cairn__tenant_each(cairn__txn *t, const char *tenant, cairn__id_cb cb, void *arg);
/* Finished tasks (succeeded or dead) with from_ms <= finished_ms <= upto_ms, oldest first. */
int cairn__finished_each(cairn__txn *t, int64_t from_ms, int64_t upto_ms, cairn__id_cb cb,
                         void *arg);
/* gc's mark: finished tasks that finished before it are tombstones (records.c). 0: none. */
int cairn__gc_mark_get(cairn__txn *t, int64_t *ms);
int cairn__gc_mark_put(cairn__txn *t, int64_t ms);
/* Counts of tasks per state, plus store size figures. */
typedef struct cairn__store_stats {
    uint64_t by_state[CAIRN_STATE_COUNT];
    uint64_t tombstones, messages, audit_records, step_records;
    uint64_t map_size, map_used, page_size;
    cairn_durability durability; /* the store's own (fixed at creation) */
    /* commits: the last one, and (sync) the last durable point's, from the marker (0 if none) */
    uint64_t last_txn, durable_txn;
    /* other processes' read transactions (a sync store's writers hold one each: their pins),
     * and the oldest snapshot one of them holds, with its process: a snapshot far behind the
     * last commit stops page reuse, and the file grows */
    uint32_t readers;
    uint64_t oldest_reader_txn;
    int oldest_reader_pid;
    /* from the status index's first keys, and a count bounded by CAIRN_STATS_DUE_MAX */
    int64_t oldest_in_doubt_ms, next_retry_ms;
    uint64_t retry_due;
} cairn__store_stats;
int cairn__store_stats_get(cairn__txn *t, cairn__store_stats *out);

/* cairn check (checkpoint/check.c): reads every record of every database, and calls cb once per
 * problem found - a record that fails its checksum, keys out of order, a record that does not
 * decode, an index entry without its task or a task without its entries, a step, progress,
 * input or audit record of no task. `database` and `task` ("" if none) say where. *records
 * counts what was read. 0 (problems or not: *problems says), or an error that stopped it. */
typedef int (*cairn__check_cb)(const char *database, const char *task, const char *message,
                               void *arg);
int cairn__store_check(cairn__txn *t, cairn__check_cb cb, void *arg, uint64_t *records,
                       uint64_t *problems);

#endif
