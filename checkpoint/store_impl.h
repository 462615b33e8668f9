/* checkpoint/store_impl.h - what the store's own files share (store.c: environment and
 * transactions; records.c: record coding, tasks, steps, progress, audit; index.c: scans of the
 * secondary indexes, messages, statistics; records3.c: schema 3's record form). runner/ never
 * includes it: LMDB stays behind checkpoint/store.h. */
#ifndef CAIRN_CHECKPOINT_STORE_IMPL_H
#define CAIRN_CHECKPOINT_STORE_IMPL_H

#include <lmdb.h>
#include <msgpack.h>
#include <pthread.h>
#include <setjmp.h>
#include <string.h>

#include "checkpoint/store.h"

typedef struct cairn__synced cairn__synced;
typedef struct cairn__journal cairn__journal;
typedef struct cairn__wreq cairn__wreq;
#define CAIRN__DBI_MAX 64 /* handles below this are indexed (LMDB numbers them from 2) */
#define CAIRN__N_DBS 13   /* store.c's databases */

struct cairn_store {
    MDB_env *env;
    /* the databases (store.c's design comment). old_*: schema 5's, which schema 6 retired (a
     * task's own records moved into tasks); open only in the transaction that upgrades a store
     * of schema 5 or before (old_open), their handles meaningless otherwise */
    MDB_dbi meta, tasks, progress, due, tenants, finished, msgs, msgtime;
    MDB_dbi old_inputs, old_steps, old_idem, old_audit, old_tails;
    int old_open;
    unsigned psize; /* LMDB's page size: where checksum.c splits a step record */
    /* store.c: a read transaction kept reset between cairn__store_read calls and renewed by
     * the next (taken and given back atomically: calls on several threads each get their own) */
    MDB_txn *rtxn;
    cairn_durability durability; /* the store's own once open (store.c settle_durability) */
    int durability_asked;        /* cairn_store_set_durability was called */
    uint64_t reads;              /* cairn__store_read's transactions begun */
    /* map.c: the lock every change of a map size is made under; this process's map (nosync:
     * found after every remap, for the seal and for prepare_ahead) and how far past the used
     * pages it is ready (written and populated); broken after a remap that left no map */
    int map_lock_fd;
    void *map_addr;
    uint64_t map_len, ready;
    int broken;
    /* opened by a user who may only read it (no write access to the directory or data.mdb): no
     * write, no marker or lock file written, LMDB read-only (without its lock file if that is
     * not writable either) */
    int readonly;
    uint64_t map_max, map_size;
    cairn__synced *synced;   /* synced.c: sync stores only (the marker, the pin, their mutex) */
    cairn__journal *journal; /* journal.c: a sync store open for writing */
    /* store.c: each open database's index by handle (+1; 0: unknown), and its name's hash */
    signed char dbi_ix[CAIRN__DBI_MAX];
    uint64_t db_seed[CAIRN__N_DBS];
    unsigned char db_seeded[CAIRN__N_DBS];
    uint32_t inject_nth;
    int inject_err;
    int inject_flush_err; /* the next durable point's data flush fails with this errno */
    char *dir;
    /* the message of the last failure; the thread that failed reads its own copy (store.c) */
    char errmsg[1024];
    pthread_mutex_t err_mu;
    /* store.c: a handle serves several threads at once. Writes that overlap are combined: the
     * first writer leads, running the callbacks queued behind it in one transaction (wq);
     * batches and batched count those transactions and the writes they held. Every transaction
     * holds `use` shared; a remap (map.c) takes it alone, since LMDB may move the map only
     * while no other thread of the process is inside a transaction. */
    pthread_mutex_t wq_mu;
    cairn__wreq *wq_head, *wq_tail;
    int wq_led;
    uint64_t batches, batched;
    pthread_rwlock_t use;
    unsigned char store_id[16]; /* meta "store_id", once read or made (has_store_id) */
    int has_store_id;
};

struct cairn__txn {
    cairn_store *s;
    MDB_txn *txn;
    int map_full;
    int wrote; /* a put or del was made: the commit writes pages (synced.c: it needs the pin) */
    msgpack_sbuffer buf;
    msgpack_zone zone; /* decoded records' objects (records.c); zone_ready once initialised */
    int zone_ready;
    /* journal.c: this transaction's entry as it is built (a sync store), and whether a change
     * could not be recorded in it (the commit is then refused) */
    unsigned char *jb;
    size_t jlen, jcap;
    int jfail;
    /* a commit the journal does not record (a store's upgrade, which rewrites every record: its
     * entry would hold the whole store in memory). The journal then no longer chains, so the
     * commit's durable point, and the next write, is a fold; a power cut before that fold
     * returns the store to the marker's snapshot and the entries before the commit. */
    int unjournaled;
    /* records.c: the steps cursor step lookups share, closed with the transaction: a resume
     * reads its step's record and its dependency's, keys side by side, and LMDB finds a key
     * on the page its cursor is on without searching from the root */
    MDB_cursor *steps_cur;
    /* checksum.c: split step records read in this transaction, joined, newest first (freed
     * with it, or by a scan that keeps no record past its turn: those newer than its mark) */
    struct cairn__join *joins;
    /* records.c: step and audit records this transaction added (>0) or removed, for the counts
     * record (cairn__counts_settle); checksum.c: whether cairn__put2's last put of a step record
     * made a new key */
    int64_t d_steps, d_audit;
    int created;
};
typedef struct cairn__join {
    struct cairn__join *next;
    unsigned char b[];
} cairn__join;
void cairn__txn_joins_free(cairn__txn *t, const cairn__join *mark);

/* store.c: every transaction of a handle runs inside enter/leave (its `use` lock, shared; a
 * thread already inside the handle's does not take it again). A remap (map.c) runs between
 * alone, which waits until no other thread of the process is inside one, and back. */
typedef struct cairn__use {
    const cairn_store *prev;
    int took;
} cairn__use;
void cairn__use_enter(cairn_store *s, cairn__use *u);
void cairn__use_leave(cairn_store *s, cairn__use *u);
int cairn__use_alone(cairn_store *s);
void cairn__use_back(cairn_store *s, int held);

/* Translates an LMDB (or errno) code into a cairn code, keeping the original in the message; a
 * full map is flagged on the txn so that cairn__store_write grows it and runs the callback
 * again. */
int cairn__mdb_fail(cairn__txn *t, cairn_store *s, int rc, const char *what);

/* checksum.c: every record ends in a checksum over its database, key and value (see its design
 * comment); these are the only way the store reads and writes records. put seals v (which must
 * not point into the map) and notes that the transaction wrote pages; with MDB_NOOVERWRITE and
 * an existing key it returns MDB_KEYEXIST with v the record there, verified. get and cursor_get
 * return the value without its checksum: 0, MDB_NOTFOUND (a miss whose neighbours agree), an
 * LMDB code, or CAIRN_ECORRUPT with the message naming the record. */
int cairn__put(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v, unsigned flags);
/* put2: the value is v's bytes followed by tail's (neither in the map), each copied once */
int cairn__put2(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v, const void *tail,
                size_t tail_len, unsigned flags);
/* put_bare: v's bytes as they are, no checksum added (the upgrade moves a damaged record so) */
int cairn__put_bare(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v);
int cairn__get(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v);
int cairn__cursor_get(cairn__txn *t, MDB_cursor *c, MDB_val *k, MDB_val *v, MDB_cursor_op op);
/* For reads outside a cairn__txn (store.c's meta records at open): verifies and strips. */
int cairn__sum_check(cairn_store *s, MDB_dbi dbi, const MDB_val *k, MDB_val *v);
/* 1 if the record's checksum matches (v still carries it); the bytes a value takes on disk. */
int cairn__sum_ok(cairn_store *s, MDB_dbi dbi, const MDB_val *k, const MDB_val *v);
size_t cairn__sum_len(size_t value_len);
void cairn__describe_key(cairn_store *s, MDB_dbi dbi, const MDB_val *k, char *out, size_t cap);
/* Writes every record of dbi again with a checksum (the upgrade from schema 2): 0 or an LMDB
 * code. */
int cairn__sum_seal_all(cairn__txn *t, MDB_dbi dbi);
/* store.c: the database's name ("tasks", "steps", ...); its index in the store's list of
 * databases (-1: not one of them), and that list, for the journal's replay. */
const char *cairn__db_name(cairn_store *s, MDB_dbi dbi);
int cairn__db_index(cairn_store *s, MDB_dbi dbi);
uint64_t cairn__db_seed(cairn_store *s, MDB_dbi dbi); /* XXH3-64 of its name */
size_t cairn__db_count(void);
const char *cairn__db_name_at(size_t i);
int cairn__db_retired(size_t i); /* one of schema 5's, which schema 6 retired */

/* journal.c: the redo journal of a sync store (its design comment). open/close with the
 * handle; append writes the transaction's entry before its commit (0; 1: the journal does not
 * chain or is full, so a fold must come first; <0 an error), undo takes it back after a failed
 * commit; flush makes every entry up to `upto` durable; bounds reads the epoch's first commit
 * and the last entry's; reset starts an epoch after a fold's marker is flushed; truncate empties
 * the file (a recovery's fold); replay applies, in one transaction, the entries of epoch
 * `nonce` (or `prev`) that follow commit `base`, counting them. */
int cairn__journal_open(cairn_store *s, const char *dir);
void cairn__journal_close(cairn_store *s);
int cairn__journal_usable(cairn_store *s);
int cairn__journal_append(cairn__txn *t);
void cairn__journal_undo(cairn__txn *t);
int cairn__journal_flush(cairn_store *s, uint64_t upto);
void cairn__journal_bounds(cairn_store *s, uint64_t *base, uint64_t *last);
uint64_t cairn__journal_nonce(cairn_store *s);
uint64_t cairn__journal_new_nonce(void);
uint64_t cairn__journal_flushes(cairn_store *s);
uint64_t cairn__journal_flushed(cairn_store *s);
void cairn__journal_reset(cairn_store *s, uint64_t nonce, uint64_t base);
int cairn__journal_truncate(cairn_store *s);
int cairn__journal_replay(cairn_store *s, uint64_t nonce, uint64_t prev, uint64_t base,
                          uint64_t *applied);

/* Deletes go through these two, never mdb_del/mdb_cursor_del directly: they note that the
 * transaction wrote pages, which a sync store commits only under a pin (synced.c). A delete of
 * a missing key writes none. */
void cairn__journal_note_put(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, const MDB_val *sealed);
void cairn__journal_note_del(cairn__txn *t, MDB_dbi dbi, const MDB_val *k);
/* checksum.c: a step record's delete takes its tail with it (a split record). */
int cairn__del(cairn__txn *t, MDB_dbi dbi, MDB_val *k);
int cairn__cursor_del(cairn__txn *t, MDB_cursor *c);

/* How a cursor loop ended: 0 at the end (MDB_NOTFOUND) or when a callback stopped it (1); an
 * LMDB or errno code (a corrupt page: MDB_CORRUPTED, MDB_PAGE_NOTFOUND) translated by
 * cairn__mdb_fail; a cairn code (a record that did not decode, a callback's error) as it is. */
static inline int cairn__scan_end(cairn__txn *t, int rc, const char *what)
{
    if (rc == 0 || rc == MDB_NOTFOUND || rc == 1)
        return 0;
    if (rc > 0 || (rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE))
        return cairn__mdb_fail(t, cairn__txn_store(t), rc, what);
    return rc;
}

/* Keys are built in a fixed buffer: ids (<= 128), names (<= 64) and big-endian numbers. */
typedef struct key {
    size_t len;
    char b[CAIRN__ID_MAX + CAIRN__NAME_MAX + CAIRN__ID_MAX + 16];
} key;

static inline void be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}
static inline uint64_t rd_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static inline void key_str(key *k, const char *s)
{
    size_t n = strlen(s);
    if (n > sizeof k->b - 16 - k->len) /* callers validate lengths; never write past the end */
        n = sizeof k->b - 16 - k->len;
    memcpy(k->b + k->len, s, n);
    k->len += n;
}
static inline void key_nul(key *k) { k->b[k->len++] = 0; }
static inline void key_u64(key *k, uint64_t v)
{
    be64((unsigned char *)k->b + k->len, v);
    k->len += 8;
}
static inline void key_u32(key *k, uint32_t v)
{
    unsigned char *p = (unsigned char *)k->b + k->len;
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
    k->len += 4;
}
static inline MDB_val kv(key *k) { return (MDB_val){k->len, k->b}; }

/* Schema 6: a task's own records share the tasks tree with its task record, each under the ID,
 * a NUL and a kind byte, so that a transaction that changes a task copies one path of pages, not
 * one per database (store.c's design comment has the keys). */
#define CAIRN__K_AUDIT 'a'
#define CAIRN__K_IDEM 'h' /* the payload hash its ID is reserved for */
#define CAIRN__K_INPUT 'i'
#define CAIRN__K_STEP 's'
#define CAIRN__K_TAIL 't'

/* k = id, NUL, kind: the start of every key of that kind of the task's records */
static inline void key_sub(key *k, const char *id, int kind)
{
    k->len = 0;
    key_str(k, id);
    key_nul(k);
    k->b[k->len++] = (char)kind;
}

/* What schema 5 called the database that held records of this kind: how `cairn check` and the
 * messages name them ("steps record of task ...") */
static inline const char *cairn__kind_name(int kind)
{
    return kind == CAIRN__K_AUDIT   ? "audit"
           : kind == CAIRN__K_IDEM  ? "idem"
           : kind == CAIRN__K_INPUT ? "inputs"
           : kind == CAIRN__K_STEP  ? "steps"
           : kind == CAIRN__K_TAIL  ? "tails"
                                    : "tasks";
}

/* The kind of a key of the tasks database: 0 for a task record (no NUL), else the byte after the
 * ID's NUL (-1: the key ends at the NUL); *id_len, if asked, the ID's length. */
static inline int cairn__key_kind(const MDB_val *k, size_t *id_len)
{
    const unsigned char *p = k->mv_data, *z = memchr(p, 0, k->mv_size);
    size_t n = z ? (size_t)(z - p) : k->mv_size;
    if (id_len)
        *id_len = n;
    return !z ? 0 : n + 1 < k->mv_size ? p[n + 1] : -1;
}

/* map.c: durability, map size, disk space (see its design comment). */
int cairn__map_settle_durability(cairn_store *s, const char *dir);
int cairn__map_open(cairn_store *s, const char *dir, unsigned flags);
int cairn__map_grow(cairn_store *s);
int cairn__map_adopt(cairn_store *s);
void cairn__map_note(cairn_store *s); /* after a remap: the map's size and address */
void cairn__map_prepare_ahead(cairn_store *s);

/* filecheck.c: data.mdb against the store's witnesses before LMDB maps it (see its design
 * comment): 0, CAIRN_ECORRUPT or CAIRN_EIO, the message set. mark_created records, once the
 * databases exist, that the store is no longer new. */
int cairn__file_check(cairn_store *s, const char *dir);
void cairn__file_mark_created(cairn_store *s, const char *dir);

/* synced.c: power-loss safety of sync stores (see its design comment). open and recover run
 * before LMDB opens the file (recover under the map lock), replay right after it (the journal
 * of a recovered store, still under the map lock); point is a fold (data.mdb flushed, the
 * marker, a new journal epoch, a new pin); flush is a durable point (the journal flushed, or a
 * fold where the journal cannot cover the commits); a write holds lock/unlock around its
 * transaction and its durable point; unpin before LMDB remaps. */
int cairn__synced_open(cairn_store *s, const char *dir);
int cairn__synced_recover(cairn_store *s, const char *dir);
int cairn__synced_replay(cairn_store *s);
int cairn__synced_point(cairn_store *s);
int cairn__synced_flush(cairn_store *s, uint64_t upto);
int cairn__synced_flush_failed(cairn_store *s, const char *what, int err);
/* a durable point unless a marker or a journal flush covers commit `upto` (0: the last) */
int cairn__synced_settle(cairn_store *s, uint64_t upto);
int cairn__synced_pinned(cairn_store *s);
void cairn__synced_unpin(cairn_store *s);
void cairn__synced_lock(cairn_store *s);
void cairn__synced_unlock(cairn_store *s);
void cairn__synced_close(cairn_store *s);
uint64_t cairn__synced_durable_txn(cairn_store *s); /* the marker's commit; 0: none */
/* the newest commit known durable: the marker's, or a later one a journal flush covered */
uint64_t cairn__synced_durable_commit(cairn_store *s);

/* guard.c: a fault inside a transaction (LMDB following a damaged page) returns to the
 * sigsetjmp of the store function that pushed the guard, instead of killing the process:
 *     cairn__guard g;
 *     if (sigsetjmp(g.jb, 0)) return cairn__guard_fault(s, &g);  (the handle is then broken)
 *     cairn__guard_push(&g); ... cairn__guard_pop(&g);
 * Guards nest (a store function called inside another's transaction pushes its own). The
 * signal mask need not be saved (savemask 0: no system call per store call): the handler runs
 * with SA_NODEFER and an empty sa_mask, so jumping out of it leaves the mask as it was. */
typedef struct cairn__guard {
    sigjmp_buf jb;
    struct cairn__guard *prev;
    volatile int sig;
    char what[160]; /* an LMDB assertion's text */
} cairn__guard;
/* mdb_env_set_assert's callback: an LMDB assertion under a guard returns like a fault. */
void cairn__guard_lmdb_assert(MDB_env *env, const char *msg);
void cairn__guard_push(cairn__guard *g);
void cairn__guard_pop(cairn__guard *g);
int cairn__guard_fault(cairn_store *s, cairn__guard *g);

/* store.c: begins an LMDB transaction, adopting a map another process grew. */
int cairn__store_begin(cairn_store *s, unsigned flags, MDB_txn **txn);

/* records.c: the task counts record (by state, then tombstones) the store keeps in meta, kept in
 * step by cairn__task_put/_del; scan counts them from the task records. */
#define CAIRN__C_TOMBSTONES CAIRN_STATE_COUNT
#define CAIRN__C_STEPS (CAIRN_STATE_COUNT + 1) /* step records (schema 6) */
#define CAIRN__C_AUDIT (CAIRN_STATE_COUNT + 2) /* audit records (schema 6) */
#define CAIRN__COUNTS (CAIRN_STATE_COUNT + 3)
int cairn__counts_get(cairn__txn *t, uint64_t c[CAIRN__COUNTS]);
int cairn__counts_put(cairn__txn *t, const uint64_t c[CAIRN__COUNTS]);
int cairn__counts_scan(cairn__txn *t, uint64_t c[CAIRN__COUNTS]);
/* The step and audit records a transaction added or removed (cairn__txn's d_steps, d_audit)
 * into the counts record: store.c calls it before a commit. */
int cairn__counts_settle(cairn__txn *t);
/* The upgrade to schema 6: schema 5's counts record (tasks by state, tombstones) widened with
 * the step and audit records the upgrade moved. */
int cairn__counts_widen(cairn__txn *t, uint64_t steps, uint64_t audit);
/* The upgrade to schema 6 (records.c): every record of schema 5's inputs, steps, idem, audit
 * and tails databases (open: s->old_open) moved into tasks under its schema-6 key; the
 * counts of step and audit records moved. */
int cairn__records_move(cairn__txn *t, uint64_t *steps, uint64_t *audit);

/* records.c, for cairn check: a task's index entries are there; an index entry is its task's. */
int cairn__task_check_indexes(cairn__txn *t, const cairn__task_rec *r, char *why, size_t cap);
int cairn__index_entry_check(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, char *why, size_t cap);
int cairn__task_check_steps(cairn__txn *t, const cairn__task_rec *r, char *why, size_t cap);

/* records.c: 1 if p[0..n) is one msgpack object whose declared lengths fit in n bytes. */
int cairn__mp_plausible(const void *data, size_t n);
/* records.c: converts every task, step, audit and idem record to schema 4's form, in the
 * caller's transaction (the upgrade from schema 3 or before): 0 or a cairn code. */
int cairn__records_upgrade(cairn__txn *t);
/* records3.c: the map records of schema 3 and before (records.c sends any it meets here). */
int cairn__task_decode3(cairn__txn *t, const MDB_val *v, const char *id, cairn__task_rec *o);
int cairn__step_decode3(cairn__txn *t, const MDB_val *v, const char *what, cairn__step_rec *o);
int cairn__audit_decode3(cairn__txn *t, const MDB_val *v, const char *task, cairn__audit_rec *a);

/* Writes an empty value under k (an index entry). */
int cairn__put_empty(cairn__txn *t, MDB_dbi dbi, key *k);

#endif
