/* checkpoint/store.c - the LMDB checkpoint store.
 *
 * One LMDB environment per store directory, with named databases:
 *   meta      schema version; store_id (16 random bytes made at creation); counts (tasks by
 *             state, tombstones, step and audit records: records.c); gc_mark (where gc's
 *             pruning resumes: records.c)
 *   tasks     a task's records, side by side under its ID (schema 6):
 *               id                       -> task record (msgpack array: state, lease, attempts,
 *                                           hashes, times)
 *               id\0 'a' seq(be64)        -> audit record
 *               id\0 'h'                  -> payload hash, reserved with MDB_NOOVERWRITE:
 *                                           uniqueness in one atomic step
 *               id\0 'i'                  -> the task input as msgpack (apart from the task
 *                                           record, so step commits never rewrite it)
 *               id\0 's' step\0gen(be32)  -> step record (state, invocations, output bytes)
 *               id\0 't' step\0gen(be32)  -> the last bytes of a step record that would take an
 *                                           LMDB page of its own (checksum.c splits and joins)
 *   progress  id\0step\0gen(be32) -> progress bytes of a long step (apart: a resume's lookup
 *             of a step that keeps none is a miss in an empty database, which needs no look at
 *             its neighbours: checksum.c)
 *   due       state(1)|due(be64)|id -> ""   the status index `retry` and `list` read
 *   tenants   tenant\0id -> ""               running tasks per tenant
 *   finished  finished(be64)|id -> ""        what gc reads, oldest first
 *   msgs      message id -> task id
 *   msgtime   recorded(be64)|message id -> ""   what gc reads to forget old messages
 * Until schema 5 a task's own records had a database per kind (inputs, steps, idem, audit,
 * tails, keyed as above without the kind byte). A write transaction copies the path from the
 * root to the leaf of every tree it changes, so a step commit that touched steps, audit and
 * tasks copied three paths where one now does (bench/README.md, consume section: "one tree for
 * a task's records"); an older store's records are moved when a writer first opens it
 * (create_dbs).
 * Every write goes through cairn__store_write(), which runs a callback inside one write
 * transaction, so a step's output, the step state, the lease renewal and the audit record
 * commit together or not at all. A full map aborts the transaction, grows the map (up to
 * map_max) and runs the callback again: nothing is half-written.
 *
 * Durability ("sync" mode, the default). LMDB flushes twice per commit by default: the data
 * pages, then the meta page that makes them visible. A sync store instead commits with
 * MDB_NOSYNC and flushes only at durable points: the intent record before an effect is called
 * (else a power loss could forget that an email went out), the output of a step marked
 * expensive (the LLM result), the final state of a task, operator commands, and a process's
 * first write. Every commit also appends its changes to the redo journal (journal.c), unflushed;
 * a durable point is one flush of that journal, appended in order, and now and then a fold
 * flushes data.mdb and writes the small file `synced` (the marker), after which the journal
 * starts over. A RELAXED commit - a compute step's output, admission, a lease - costs no flush.
 * A power cut can therefore undo relaxed commits back to the last durable point (those steps
 * run again), never a durable one, and never corrupts the store: the pages of the marker's
 * snapshot are kept from reuse by a read transaction every writer holds, and after a reboot its
 * meta pages are written back from `synced` and the journal's whole entries after it applied.
 * The argument, and what it costs in file growth, is in synced.c and journal.c.
 * The earlier design (MDB_NOMETASYNC: one flush per commit, of 5-6 scattered pages) ran at
 * 0.6-0.7x SQLite's WAL FULL; a flush of scattered pages costs ~1.6x an appended one.
 *
 * "nosync" stores (chosen when the store is created, recorded in the file `durability`) use
 * MDB_NOSYNC with MDB_WRITEMAP: a commit writes into the shared map, which reaches the page
 * cache at once and survives a process crash, with no system call. How the map is sized,
 * reserved on disk and kept from shrinking under another process is checkpoint/map.c's.
 *
 * This file holds the environment and the transactions; synced.c the power-loss protocol of sync
 * stores; records.c the record coding and the task/step/progress/audit records, index.c the
 * index scans, messages and statistics.
 */

#include "checkpoint/store_impl.h"

#include "common/lock.h"
#include "common/mdb.h"
#include "common/xxh.h"

#include <errno.h>
#include <lmdb.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAP_MAX (64ull << 30)

int64_t cairn__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The message of this thread's last failure and the handle it was on: a handle serves several
 * threads at once, and each reads its own failure's message. The handle keeps a copy for the
 * other threads (the last failure on it, whichever thread it was). */
static _Thread_local struct {
    const cairn_store *s;
    char msg[sizeof((cairn_store *)0)->errmsg];
} tl_err;

static void err_set(cairn_store *s, const char *msg)
{
    snprintf(tl_err.msg, sizeof tl_err.msg, "%s", msg);
    tl_err.s = s;
    pthread_mutex_lock(&s->err_mu);
    memcpy(s->errmsg, tl_err.msg, sizeof s->errmsg);
    pthread_mutex_unlock(&s->err_mu);
}

int cairn__store_fail(cairn_store *s, int err, const char *fmt, ...)
{
    char msg[sizeof s->errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(s, msg);
    return err;
}

cairn_store *cairn__txn_store(cairn__txn *t) { return t->s; }

int cairn__mdb_fail(cairn__txn *t, cairn_store *s, int rc, const char *what)
{
    if (rc < 0 && rc > -1000)
        return rc; /* a cairn code (a record that fails its checksum): its message is set */
    int err = cairn__mdb_code(rc);
    if (rc == MDB_MAP_FULL && t)
        t->map_full = 1;
    return cairn__store_fail(s, err, "%s: %s (LMDB %d) in store %s", what, mdb_strerror(rc), rc,
                             s->dir ? s->dir : "?");
}

/* ------------------------------------------------------------------ lifecycle */

cairn_store *cairn_store_new(void)
{
    cairn_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->map_max = DEFAULT_MAP_MAX;
    s->map_lock_fd = -1;
    /* a remap waits for the transactions in flight, not for every one that comes after it */
    if (cairn__rwlock_init_writers_first(&s->use) != 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->err_mu, NULL);
    pthread_mutex_init(&s->wq_mu, NULL);
    return s;
}

int cairn_store_set_durability(cairn_store *s, cairn_durability d)
{
    if (!s || (d != CAIRN_SYNC && d != CAIRN_NOSYNC) || s->env)
        return CAIRN_EINVAL;
    s->durability = d;
    s->durability_asked = 1;
    return 0;
}

int cairn_store_set_map_max(cairn_store *s, uint64_t bytes)
{
    if (!s || s->env)
        return CAIRN_EINVAL;
    s->map_max = bytes ? bytes : DEFAULT_MAP_MAX;
    return 0;
}

const char *cairn_store_errmsg(const cairn_store *s)
{
    return !s ? "no store" : tl_err.s == s ? tl_err.msg : s->errmsg;
}

void cairn__store_inject_flush_failure(cairn_store *s, int err) { s->inject_flush_err = err; }

void cairn__store_inject_write_failure(cairn_store *s, uint32_t nth, int err)
{
    s->inject_nth = nth;
    s->inject_err = err;
}

static const char *const db_names[] = {"meta", "tasks",   "inputs",  "steps",    "progress",
                                       "idem", "due",     "tenants", "finished", "audit",
                                       "msgs", "msgtime", "tails"};

/* The list keeps schema 5's databases where they were: the journal names a database by its
 * place in it, and a journal written before an upgrade is replayed after it. */
static MDB_dbi *db_handle(cairn_store *s, size_t i)
{
    MDB_dbi *dbis[] = {&s->meta,     &s->tasks,   &s->old_inputs, &s->old_steps, &s->progress,
                       &s->old_idem, &s->due,     &s->tenants,    &s->finished,  &s->old_audit,
                       &s->msgs,     &s->msgtime, &s->old_tails};
    return dbis[i];
}

/* One of schema 5's databases, which schema 6 retired */
static int db_old(size_t i) { return i == 2 || i == 3 || i == 5 || i == 9 || i == 12; }

#define N_DBS (sizeof db_names / sizeof *db_names)
_Static_assert(sizeof db_names / sizeof *db_names == CAIRN__N_DBS, "store_impl.h counts them");

int cairn__db_index(cairn_store *s, MDB_dbi dbi)
{
    if (dbi < CAIRN__DBI_MAX && s->dbi_ix[dbi])
        return s->dbi_ix[dbi] - 1; /* (every record's checksum asks: a table, once open) */
    for (size_t i = 0; i < N_DBS; i++)
        if (*db_handle(s, i) == dbi && (!db_old(i) || s->old_open))
            return (int)i;
    return -1;
}

const char *cairn__db_name(cairn_store *s, MDB_dbi dbi)
{
    int i = cairn__db_index(s, dbi);
    return i < 0 ? "?" : db_names[i];
}

uint64_t cairn__db_seed(cairn_store *s, MDB_dbi dbi)
{
    int i = cairn__db_index(s, dbi);
    if (i >= 0 && s->db_seeded[i])
        return s->db_seed[i];
    const char *db = i < 0 ? "?" : db_names[i];
    return XXH3_64bits(db, strlen(db));
}

/* The handles are final once the databases are open: index them, with each name's hash. */
static void index_dbs(cairn_store *s)
{
    memset(s->dbi_ix, 0, sizeof s->dbi_ix);
    for (size_t i = 0; i < N_DBS; i++) {
        MDB_dbi d = *db_handle(s, i);
        if (d < CAIRN__DBI_MAX && !db_old(i))
            s->dbi_ix[d] = (signed char)(i + 1);
        s->db_seed[i] = XXH3_64bits(db_names[i], strlen(db_names[i]));
        s->db_seeded[i] = 1;
    }
}

size_t cairn__db_count(void) { return N_DBS; }

const char *cairn__db_name_at(size_t i) { return i < N_DBS ? db_names[i] : NULL; }

int cairn__db_retired(size_t i) { return db_old(i); }

static int newer_schema(cairn_store *s, uint32_t schema)
{
    return cairn__store_fail(s, CAIRN_ESCHEMA,
                             "store %s has schema version %u; this cairn reads up to %u: "
                             "upgrade cairn",
                             s->dir, schema, CAIRN__SCHEMA);
}

/* The stored schema version: 0 if none, else the number (<0: an error). Up to schema 2 the
 * meta records carry no checksum (4 bytes); from 3 on they do, like every record. */
static int64_t schema_of(cairn_store *s, MDB_txn *txn)
{
    MDB_val k = {6, "schema"}, v;
    int rc = mdb_get(txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return cairn__mdb_fail(NULL, s, rc, "read the schema version");
    uint32_t schema = 0;
    int sealed = v.mv_size == cairn__sum_len(sizeof schema);
    if (sealed && (rc = cairn__sum_check(s, s->meta, &k, &v)))
        return rc;
    if (v.mv_size == sizeof schema)
        memcpy(&schema, v.mv_data, sizeof schema);
    if (v.mv_size != sizeof schema || schema == 0 || (schema >= 3) != sealed)
        return cairn__store_fail(s, CAIRN_ECORRUPT,
                                 "store %s: its schema record (%u, %zu bytes) is damaged", s->dir,
                                 schema, (size_t)v.mv_size);
    return schema;
}

/* Reads meta "store_id" into the handle if it is there (0), else 0 with has_store_id unset. */
static int store_id_read(cairn_store *s, MDB_txn *txn)
{
    MDB_val k = {8, "store_id"}, v;
    int rc = mdb_get(txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return cairn__mdb_fail(NULL, s, rc, "read the store ID");
    if ((rc = cairn__sum_check(s, s->meta, &k, &v)))
        return rc;
    if (v.mv_size != sizeof s->store_id)
        return cairn__store_fail(s, CAIRN_ECORRUPT, "store %s: its store ID has %zu bytes, not %zu",
                                 s->dir, v.mv_size, sizeof s->store_id);
    memcpy(s->store_id, v.mv_data, sizeof s->store_id);
    s->has_store_id = 1;
    return 0;
}

/* Makes the store ID if the store has none (a new store, or one an older cairn wrote). */
static int store_id_make(cairn__txn *t)
{
    cairn_store *s = t->s;
    s->has_store_id = 0; /* a run again after a full map starts over */
    int rc = store_id_read(s, t->txn);
    if (rc || s->has_store_id)
        return rc;
    unsigned char id[sizeof s->store_id];
    if (getrandom(id, sizeof id, 0) != (ssize_t)sizeof id)
        return cairn__store_fail(s, CAIRN_EIO, "store %s: no random bytes for its ID: %s", s->dir,
                                 strerror(errno));
    MDB_val k = {8, "store_id"}, v = {sizeof id, id};
    if ((rc = cairn__put(t, s->meta, &k, &v, 0)))
        return cairn__mdb_fail(t, s, rc, "record the store ID");
    memcpy(s->store_id, id, sizeof id);
    s->has_store_id = 1; /* undone by the caller if the commit fails */
    return 0;
}

static int store_id_txn(cairn__txn *t, void *arg)
{
    (void)arg;
    return store_id_make(t);
}

int cairn__store_id(cairn_store *s, unsigned char out[16])
{
    if (!s->has_store_id) {
        int rc = cairn__store_write(s, CAIRN__DURABLE, store_id_txn, NULL);
        if (rc) {
            s->has_store_id = 0;
            return rc;
        }
    }
    memcpy(out, s->store_id, sizeof s->store_id);
    return 0;
}

/* Schema 5's databases, in a store of schema 5 or before: opened (created where missing: schema
 * 4 had no tails) for the upgrade to move their records (*had: whether any was there). */
static int old_dbs_open(cairn__txn *t, int *had)
{
    cairn_store *s = t->s;
    *had = 0;
    for (size_t i = 0; i < N_DBS; i++) {
        if (!db_old(i))
            continue;
        int rc = mdb_dbi_open(t->txn, db_names[i], 0, db_handle(s, i));
        if (rc == MDB_NOTFOUND)
            rc = mdb_dbi_open(t->txn, db_names[i], MDB_CREATE, db_handle(s, i));
        else
            *had |= rc == 0;
        if (rc)
            return cairn__mdb_fail(t, s, rc, "open a database to upgrade");
    }
    s->old_open = 1;
    return 0;
}

/* Drops schema 5's databases from the file (their records moved, or a power cut during the
 * upgrade left them beside its replayed moves: the journal does not record a drop). */
static int old_dbs_drop(cairn__txn *t)
{
    cairn_store *s = t->s;
    for (size_t i = 0; i < N_DBS; i++) {
        if (!db_old(i))
            continue;
        int rc = mdb_drop(t->txn, *db_handle(s, i), 1);
        if (rc)
            return cairn__mdb_fail(t, s, rc, "drop a database of schema 5");
    }
    s->old_open = 0;
    return 0;
}

/* Creates the databases and records the schema version (a new store, or one an older cairn
 * wrote): a write like any other, so a sync store's protocol covers it (synced.c). An older
 * store is upgraded in the same transaction: all or nothing. */
static int create_dbs(cairn__txn *t)
{
    cairn_store *s = t->s;
    t->wrote = 1; /* creating a database writes the main database: it needs the pin */
    for (size_t i = 0; i < N_DBS; i++) {
        if (db_old(i))
            continue;
        int rc = mdb_dbi_open(t->txn, db_names[i], MDB_CREATE, db_handle(s, i));
        if (rc)
            return cairn__mdb_fail(t, s, rc, "create database");
    }
    int64_t schema = schema_of(s, t->txn);
    if (schema < 0)
        return (int)schema;
    if (schema > CAIRN__SCHEMA)
        return newer_schema(s, (uint32_t)schema);
    int rc = 0, had = 0;
    if (schema == CAIRN__SCHEMA) /* schema 5's databases beside their moved records */
        return (rc = old_dbs_open(t, &had)) ? rc : had ? old_dbs_drop(t) : 0;
    t->unjournaled = schema > 0; /* every record is rewritten: see cairn__txn */
    if (schema > 0 && (rc = old_dbs_open(t, &had)))
        return rc;
    /* schema 1 and 2: no record has a checksum yet; every one gets it, in this transaction
     * (tails, new, holds only what those puts split off) */
    for (size_t i = 0; i < N_DBS && schema > 0 && schema < 3 && !rc; i++)
        if (*db_handle(s, i) != s->old_tails && (rc = cairn__sum_seal_all(t, *db_handle(s, i))))
            return cairn__mdb_fail(t, s, rc, "upgrade the store to schema 3 (checksums)");
    /* before schema 4 records were maps keyed by field name: each is written in its array form */
    if (schema > 0 && schema < 4 && (rc = cairn__records_upgrade(t)))
        return rc;
    /* before schema 6 a task's own records had databases of their own: they move into tasks.
     * From schema 4 to 5 nothing was rewritten: 5 only added tails, which 4 never needed. */
    uint64_t steps = 0, audit = 0;
    if (schema > 0 && ((rc = cairn__records_move(t, &steps, &audit)) || (rc = old_dbs_drop(t))))
        return rc;
    if ((rc = store_id_make(t)))
        return rc;
    /* a new store's counts are zeros; one of schema 1 or 2 has none and is counted once, here;
     * schema 3 on kept them (a damaged task record then stays for cairn check to name), and
     * schema 6 added the step and audit records moved */
    uint64_t counts[CAIRN__COUNTS];
    if (schema < 3 && ((rc = cairn__counts_scan(t, counts)) || (rc = cairn__counts_put(t, counts))))
        return rc;
    if (schema >= 3 && (rc = cairn__counts_widen(t, steps, audit)))
        return rc;
    uint32_t now = CAIRN__SCHEMA;
    MDB_val k = {6, "schema"}, v = {sizeof now, &now};
    rc = cairn__put(t, s->meta, &k, &v, 0);
    return rc ? cairn__mdb_fail(t, s, rc, "record the schema version") : 0;
}

static int create_dbs_txn(cairn__txn *t, void *arg)
{
    (void)arg;
    int rc = create_dbs(t);
    t->s->old_open = 0; /* their handles end with the transaction */
    return rc;
}

/* Opens the databases in a read transaction, which writes nothing (a read-only command on an
 * existing store never takes the writer lock); only a store that lacks one, or an older
 * schema, goes through a write. */
static int open_dbs(cairn_store *s)
{
    MDB_txn *txn;
    int rc = cairn__store_begin(s, MDB_RDONLY, &txn); /* adopts a map another process grew */
    if (rc)
        return rc;
    int missing = 0, old = 0;
    const char *lost = NULL, *old_lost = NULL;
    for (size_t i = 0; i < N_DBS && !rc; i++) {
        MDB_dbi scratch;
        rc = mdb_dbi_open(txn, db_names[i], 0, db_old(i) ? &scratch : db_handle(s, i));
        if (rc == MDB_NOTFOUND && !db_old(i) && !missing)
            missing = 1, lost = db_names[i];
        else if (rc == MDB_NOTFOUND && !old_lost)
            old_lost = db_names[i];
        else if (rc == 0 && db_old(i))
            old = 1;
        rc = rc == MDB_NOTFOUND ? 0 : rc;
    }
    int64_t schema = 0;
    if (!rc && (!missing || strcmp(lost, "meta") != 0) && (schema = schema_of(s, txn)) < 0) {
        mdb_txn_abort(txn);
        return (int)schema;
    }
    /* A schema-3 store has every database from its creation: one missing from LMDB's directory
     * is a damaged directory record (its name), never a database to create empty (schema 5's
     * own are missing from a schema-6 store: their records moved into tasks). */
    if (!rc && !missing && schema >= 3 && schema < CAIRN__SCHEMA && old_lost &&
        !(schema < 5 && strcmp(old_lost, "tails") == 0))
        missing = 1, lost = old_lost; /* schema 3 to 5 had them all (but 5's tails) */
    if (!rc && missing && schema >= 3) {
        mdb_txn_abort(txn);
        return cairn__store_fail(s, CAIRN_ECORRUPT,
                                 "store %s: its database '%s' is missing from LMDB's directory: "
                                 "the store is damaged (run `cairn check`)",
                                 s->dir, lost);
    }
    if (!rc && !missing && schema == CAIRN__SCHEMA && (rc = store_id_read(s, txn))) {
        mdb_txn_abort(txn);
        return rc;
    }
    if (rc) {
        mdb_txn_abort(txn);
        return cairn__mdb_fail(NULL, s, rc, "open database");
    }
    if (schema > CAIRN__SCHEMA) {
        mdb_txn_abort(txn);
        return newer_schema(s, (uint32_t)schema);
    }
    /* schema 5's databases left in a schema-6 store (a power cut in its upgrade): dropped by the
     * next writer; a reader ignores them */
    if (!missing && schema == CAIRN__SCHEMA && (!old || s->readonly)) {
        rc = mdb_txn_commit(txn); /* a read transaction's commit keeps its database handles */
        return rc ? cairn__mdb_fail(NULL, s, rc, "open database") : 0;
    }
    mdb_txn_abort(txn);
    if (s->readonly)
        return cairn__store_fail(s, CAIRN_EIO,
                                 "store %s %s, which takes write access to it: run any command on "
                                 "it once as a user who may write it",
                                 s->dir,
                                 missing ? "lacks some of its databases"
                                         : "was written by an older cairn and must be upgraded");
    return cairn__store_write(s, CAIRN__DURABLE, create_dbs_txn, NULL);
}

/* The kept read transaction goes before the environment does. */
static void rtxn_drop(cairn_store *s)
{
    MDB_txn *txn = __atomic_exchange_n(&s->rtxn, NULL, __ATOMIC_ACQ_REL);
    if (txn)
        mdb_txn_abort(txn);
}

/* Undoes a failed open, so that the handle can be opened again (or freed) cleanly. */
static int open_failed(cairn_store *s, int rc)
{
    if (s->broken != 2)
        rtxn_drop(s);
    cairn__synced_close(s);
    if (s->env && s->broken != 2) /* not after a fault (guard.c): LMDB is not to be trusted */
        mdb_env_close(s->env);
    s->env = NULL;
    if (s->map_lock_fd >= 0)
        close(s->map_lock_fd);
    s->map_lock_fd = -1;
    return rc;
}

int cairn_store_open(cairn_store *s, const char *dir)
{
    if (!s || !dir || s->env)
        return CAIRN_EINVAL;
    s->broken = 0;
    s->has_store_id = 0;
    s->old_open = 0;
    memset(s->dbi_ix, 0, sizeof s->dbi_ix);
    free(s->dir);
    s->dir = strdup(dir);
    if (!s->dir)
        return CAIRN_ENOMEM;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return cairn__store_fail(s, errno == ENOSPC ? CAIRN_EFULL : CAIRN_EIO,
                                 "cannot create store directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cairn__store_fail(s, CAIRN_EIO, "store path %s is not a directory", dir);
    /* a user who may read the store but not write it (a read-only mount, a group that reads)
     * opens it read-only: show, list, audit, stats and check work; writes are refused */
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    s->readonly = access(data, F_OK) == 0 && (access(data, W_OK) != 0 || access(dir, W_OK) != 0) &&
                  (errno == EACCES || errno == EROFS || errno == EPERM);
    int rc = mdb_env_create(&s->env);
    if (rc)
        return open_failed(s, cairn__mdb_fail(NULL, s, rc, "create environment"));
    if ((rc = cairn__map_settle_durability(s, dir)))
        return open_failed(s, rc);
    mdb_env_set_maxdbs(s->env, 16);
    mdb_env_set_assert(s->env, cairn__guard_lmdb_assert);
    mdb_env_set_maxreaders(s->env, 256);
    unsigned flags = MDB_NOTLS | MDB_NORDAHEAD;
    /* both commit without a flush: a nosync store never flushes, a sync store at its durable
     * points (synced.c) */
    flags |= s->durability == CAIRN_NOSYNC ? MDB_NOSYNC | MDB_WRITEMAP : MDB_NOSYNC;
    if (s->readonly) {
        char lock[4200];
        snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
        /* without write access to lock.mdb either, LMDB reads without its reader table: a
         * writer may then reuse pages a read is using, which a record's checksum or the fault
         * guard turns into exit 74 (run the command again), never into a wrong answer */
        flags = (flags & ~(unsigned)MDB_WRITEMAP) | MDB_RDONLY |
                (access(lock, W_OK) != 0 ? MDB_NOLOCK : 0);
    }
    if ((rc = cairn__map_open(s, dir, flags)))
        return open_failed(s, rc);
    MDB_stat est;
    s->psize = mdb_env_stat(s->env, &est) == 0 ? est.ms_psize : 4096;
    int dead = 0;
    if (!s->readonly)
        mdb_reader_check(s->env, &dead); /* clear reader slots of killed processes */
    cairn__guard g;
    if (sigsetjmp(g.jb, 0))
        return open_failed(s, cairn__guard_fault(s, &g));
    cairn__guard_push(&g);
    int orc = open_dbs(s);
    if (!orc) {
        index_dbs(s);
        cairn__map_note(s); /* now the main database has a key to find the map by */
    }
    cairn__guard_pop(&g);
    if (orc)
        return open_failed(s, orc);
    if (!s->readonly)
        cairn__file_mark_created(s, dir); /* from now on an empty data.mdb is a lost store */
    return 0;
}

void cairn_store_free(cairn_store *s)
{
    if (!s)
        return;
    cairn__synced_close(s); /* ends the pin before the environment goes */
    if (s->broken != 2)
        rtxn_drop(s);
    if (s->env && s->broken != 2)
        mdb_env_close(s->env); /* not after a fault: LMDB's state is not to be trusted */
    if (s->map_lock_fd >= 0)
        close(s->map_lock_fd);
    pthread_rwlock_destroy(&s->use);
    pthread_mutex_destroy(&s->err_mu);
    pthread_mutex_destroy(&s->wq_mu);
    if (tl_err.s == s)
        tl_err.s = NULL;
    free(s->dir);
    free(s);
}

/* ------------------------------------------------------------------ transactions */

static int grow_map(cairn_store *s)
{
    /* A process killed inside a read transaction leaves a reader slot that pins its snapshot:
     * no page freed since can be reused, and the file would grow without bound. Clear such
     * slots first; if there were any, retry before growing. */
    int dead = 0;
    if (mdb_reader_check(s->env, &dead) == 0 && dead > 0)
        return 0;
    return cairn__map_grow(s);
}

int cairn__store_begin(cairn_store *s, unsigned flags, MDB_txn **txn)
{
    for (int tries = 0;; tries++) {
        int rc = mdb_txn_begin(s->env, NULL, flags, txn);
        if (rc == MDB_MAP_RESIZED && tries < 4) { /* another process grew the map */
            if ((rc = cairn__map_adopt(s)))
                return rc;
            continue;
        }
        if (rc == MDB_READERS_FULL && tries < 4) {
            int dead;
            mdb_reader_check(s->env, &dead);
            continue;
        }
        return rc ? cairn__mdb_fail(NULL, s, rc, "begin transaction") : 0;
    }
}

static void txn_buffers_free(cairn__txn *t)
{
    if (t->steps_cur)
        mdb_cursor_close(t->steps_cur);
    msgpack_sbuffer_destroy(&t->buf);
    if (t->zone_ready)
        msgpack_zone_destroy(&t->zone);
    cairn__txn_joins_free(t, NULL);
}

/* A handle closed for use by an earlier failure (a remap that left no map, a failed flush):
 * its message said why; later calls repeat that it is closed. */
static int broken(cairn_store *s)
{
    return cairn__store_fail(s, CAIRN_EIO,
                             "store %s: this handle was closed for use by an earlier failure (a "
                             "failed remap or flush, reported then)",
                             s->dir);
}

/* ------------------------------------------------------------------ threads */

/* The handle whose `use` lock this thread holds shared (one at a time is tracked: a thread
 * inside a transaction of one handle does not start another of the same). */
static _Thread_local const cairn_store *tl_use;

void cairn__use_enter(cairn_store *s, cairn__use *u)
{
    u->prev = tl_use;
    u->took = tl_use != s;
    if (u->took) {
        pthread_rwlock_rdlock(&s->use);
        tl_use = s;
    }
}

void cairn__use_leave(cairn_store *s, cairn__use *u)
{
    if (u->took) {
        tl_use = u->prev;
        pthread_rwlock_unlock(&s->use);
    }
}

/* The locks are taken in one order, the synced mutex (a sync store's writes and its pin) before
 * `use`, and nobody waits for the mutex while holding `use`: a reader holds nothing else, and a
 * writer takes the mutex first. So the thread that remaps lets go of `use`, takes the mutex
 * (again: it is recursive) and then `use` alone. */
int cairn__use_alone(cairn_store *s)
{
    int held = tl_use == s;
    if (held)
        pthread_rwlock_unlock(&s->use);
    cairn__synced_lock(s);
    pthread_rwlock_wrlock(&s->use);
    return held;
}

void cairn__use_back(cairn_store *s, int held)
{
    pthread_rwlock_unlock(&s->use);
    cairn__synced_unlock(s);
    if (held)
        pthread_rwlock_rdlock(&s->use);
}

/* ------------------------------------------------------------------ writes */

/* A write asked for (cairn__store_write), queued until a leader runs it. */
struct cairn__wreq {
    cairn__txn_fn fn;
    void *arg;
    int durable;
    int rc;
    int ran;        /* rc is its outcome (set by the leader) */
    uint32_t state; /* W_WAIT, then W_DONE (its asker may return) or W_LEAD (set by a leader) */
    char *msg;      /* the asker's buffer for the message of a failure */
    cairn__wreq *next;
};

enum { W_WAIT, W_DONE, W_LEAD };

#define BATCH_MAX 64 /* writes in one batch at most (its transactions share one flush) */
#define ALONE 2      /* write_once: a callback of several failed; run each on its own */

/* One attempt of the writes w[0..n) in one transaction: 0 done, 1 run them again (the map grew,
 * or a fold came first), ALONE (n > 1: a callback failed, and what it left is not to be
 * committed with the others'), else an error. Durable if any of them is: the flush that makes
 * it so is made here, or, when `flush` is given, left to the caller (*flush = 1, the commit in
 * *upto, 0 when nothing was written). */
static int write_once(cairn_store *s, cairn__wreq *const *w, size_t n, cairn__txn *tp, int *flush,
                      uint64_t *upto)
{
    /* A sync store writes pages only under a pin (synced.c). Without one (a process's first
     * write, or the pin was dropped for a remap or its age) the transaction runs anyway: if it
     * wrote nothing (a run of a finished task, a refusal) its commit writes no page and needs
     * none; else it is dropped, a fold takes the pin, and it runs again. Whether there is a pin
     * is read once the transaction has begun: beginning may adopt a map another process grew,
     * which drops the pin. */
    cairn__txn *t = tp;
    int rc = cairn__store_begin(s, 0, &t->txn);
    if (rc)
        return rc;
    int pinned = cairn__synced_pinned(s), durable = 0;
    cairn__map_prepare_ahead(s);
    msgpack_sbuffer_init(&t->buf);
    if (s->inject_nth && --s->inject_nth == 0) {
        rc = cairn__store_fail(s, s->inject_err, "injected write failure");
        mdb_txn_abort(t->txn);
        msgpack_sbuffer_destroy(&t->buf);
        return rc;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        durable |= w[i]->durable;
        rc = w[i]->fn(t, w[i]->arg);
    }
    if (rc == 0) /* the step and audit records they added or removed, into the counts record */
        rc = cairn__counts_settle(t);
    txn_buffers_free(t);
    if (rc < 0 || rc > 0) {
        mdb_txn_abort(t->txn);
        if (t->map_full) {
            int g = grow_map(s);
            return g ? g : 1;
        }
        return n > 1 ? ALONE : rc;
    }
    if (!t->wrote) {
        /* Nothing written: nothing to commit (an abort is the same, and surely writes no page
         * or journal entry); a durable write still makes what it read durable. */
        mdb_txn_abort(t->txn);
        if (durable && s->synced && flush) {
            *flush = 1, *upto = 0;
            return 0;
        }
        return durable && s->synced ? cairn__synced_flush(s, 0) : 0;
    }
    if (!pinned) { /* dropped; it runs again after a fold */
        mdb_txn_abort(t->txn);
        return (rc = cairn__synced_point(s)) ? rc : 1;
    }
    uint64_t txnid = (uint64_t)mdb_txn_id(t->txn);
    if (s->journal && !t->unjournaled && (rc = cairn__journal_append(t)) != 0) {
        mdb_txn_abort(t->txn);
        if (rc == 1) /* the journal does not chain, or is full: a fold starts it over */
            return (rc = cairn__synced_point(s)) ? rc : 1;
        return rc;
    }
    int mrc = mdb_txn_commit(t->txn);
    if (mrc && s->journal)
        cairn__journal_undo(t);
    if (mrc == MDB_MAP_FULL) {
        int g = grow_map(s);
        return g ? g : 1;
    }
    if (mrc)
        return cairn__mdb_fail(NULL, s, mrc, "commit");
    /* test hook CAIRN_TEST_CUT_UPGRADE=1: the process ends between an upgrade's commit and the
     * fold that makes it durable (tests/store/test_synced.c, after which a reboot must find the
     * store as it was before the upgrade) */
    const char *cut = t->unjournaled && s->synced ? getenv("CAIRN_TEST_CUT_UPGRADE") : NULL;
    if (cut && *cut == '1')
        _exit(86);
    if (durable && s->synced && flush) {
        *flush = 1, *upto = txnid;
        return 0;
    }
    return durable && s->synced ? cairn__synced_flush(s, txnid) : 0;
}

static int write_locked(cairn_store *s, cairn__wreq *const *w, size_t n, int *flush, uint64_t *upto)
{
    for (;;) {
        cairn__txn t = {.s = s};
        int rc = write_once(s, w, n, &t, flush, upto);
        free(t.jb);
        if (rc != 1)
            return rc;
    }
}

static void ran(cairn_store *s, cairn__wreq *w, int rc)
{
    w->rc = rc;
    w->ran = 1;
    if (rc) /* this thread's message, for the asker's */
        snprintf(w->msg, sizeof s->errmsg, "%s", cairn_store_errmsg(s));
}

static void wake(cairn__wreq *w, uint32_t state);

/* Takes the writes queued behind the batch w[0..n) into it (the whole batch when n is 0), up to
 * BATCH_MAX in all, as one more transaction of it; the new n. */
static size_t take_more(cairn_store *s, cairn__wreq **w, size_t n)
{
    size_t m = n;
    pthread_mutex_lock(&s->wq_mu);
    while (s->wq_head && m < BATCH_MAX) {
        w[m++] = s->wq_head;
        s->wq_head = s->wq_head->next;
    }
    if (!s->wq_head)
        s->wq_tail = NULL;
    if (m > n)
        s->batches++, s->batched += m - n;
    pthread_mutex_unlock(&s->wq_mu);
    return m;
}

/* The leader's part: the writes w[0..*np) in one transaction, or each in its own when one of
 * their callbacks failed (the others then commit as they would have alone, and the failure is
 * the failing one's). When the batch is durable, the flush waits for two things first:
 *   - its relaxed writes are done once it commits: their askers (but `me`, the leader's own)
 *     are woken then, told[i] set, and go on while the flush runs (a relaxed write alone would
 *     not have waited for a flush either);
 *   - the writes queued while it committed join it (*np grows), in a transaction of their own,
 *     and so on until none is queued or BATCH_MAX have joined; the one flush covers the
 *     durable writes of every round (they would otherwise wait for it to end and then make
 *     one of their own).
 * A told request lived on its asker's stack, which may have moved on: it is not touched again. */
static void write_batch(cairn_store *s, cairn__wreq **w, size_t *np, const cairn__wreq *me,
                        unsigned char *told)
{
    cairn__synced_lock(s); /* the pin cannot be dropped under a commit that relies on it */
    cairn__use u;
    cairn__use_enter(s, &u);
    cairn__guard g;
    if (sigsetjmp(g.jb, 0)) {
        int rc = cairn__guard_fault(s, &g);
        for (size_t i = 0; i < *np; i++)
            if (!told[i] && !w[i]->ran)
                ran(s, w[i], rc);
        cairn__use_leave(s, &u);
        cairn__synced_unlock(s);
        return;
    }
    cairn__guard_push(&g);
    int flush = 0;
    uint64_t upto = 0;
    int rc = s->broken ? broken(s) /* an earlier batch may have failed so */
                       : write_locked(s, w, *np, &flush, &upto);
    if (rc == 0 && flush) {
        unsigned char owed[BATCH_MAX] = {0}; /* durable, committed, waiting for the flush */
        for (size_t from = 0;;) {
            for (size_t i = from; i < *np; i++) {
                if (w[i]->ran) /* failed on its own (below) */
                    continue;
                if (w[i]->durable) {
                    owed[i] = 1;
                    continue;
                }
                ran(s, w[i], 0);
                if (w[i] != me) {
                    told[i] = 1;
                    wake(w[i], W_DONE);
                }
            }
            size_t n = take_more(s, w, *np);
            if (n == *np)
                break;
            from = *np, *np = n;
            int more = 0;
            uint64_t at = 0;
            int mrc = s->broken ? broken(s) : write_locked(s, w + from, n - from, &more, &at);
            if (mrc == ALONE) /* each alone, their flushes still owed to this one */
                for (size_t i = from; i < n; i++) {
                    int one = 0;
                    uint64_t at1 = 0;
                    int orc = s->broken ? broken(s) : write_locked(s, &w[i], 1, &one, &at1);
                    if (orc)
                        ran(s, w[i], orc);
                    else if (one && at1 > upto)
                        upto = at1;
                }
            else if (mrc)
                for (size_t i = from; i < n; i++)
                    ran(s, w[i], mrc);
            else if (more && at > upto)
                upto = at;
        }
        /* (a round that failed a flush broke the handle: no later flush may vouch for it) */
        rc = s->broken ? broken(s) : cairn__synced_flush(s, upto);
        for (size_t i = 0; i < *np; i++)
            if (owed[i])
                ran(s, w[i], rc);
    } else if (rc == ALONE) {
        for (size_t i = 0; i < *np; i++)
            ran(s, w[i], write_locked(s, &w[i], 1, NULL, NULL));
    } else {
        for (size_t i = 0; i < *np; i++)
            ran(s, w[i], rc);
    }
    cairn__guard_pop(&g);
    cairn__use_leave(s, &u);
    cairn__synced_unlock(s);
}

/* Tells a waiting asker its write's fate. It may return as soon as it sees the state, so the
 * wake may reach a word that is no longer its (lock.h: waiters recheck). */
static void wake(cairn__wreq *w, uint32_t state)
{
    __atomic_store_n(&w->state, state, __ATOMIC_RELEASE);
    cairn__futex_wake(&w->state, 1, 0);
}

/* Group commit: a writer that finds no write running leads. It takes the writes queued by then
 * (its own among them) and runs them in one transaction; the ones that arrive meanwhile wait
 * and form the next batch, whose first the lead passes to. Each waiter sleeps on a word of its
 * own and is woken once (to return, or to lead): woken all at once, most waiters would only go
 * back to sleep, two context switches each. A batch writes the trees' upper pages, the
 * free list, the meta page and the journal entry once for all its writes, and a durable one
 * among them flushes once for all; its relaxed writes return at the commit, before that flush
 * (their askers run on while the leader waits for the disk). Alone, a writer leads a batch of
 * one: the transaction it would have had. */
int cairn__store_write(cairn_store *s, int durable, cairn__txn_fn fn, void *arg)
{
    if (!s || !s->env)
        return CAIRN_EINVAL;
    if (s->broken)
        return broken(s);
    if (s->readonly)
        return cairn__store_fail(s, CAIRN_EIO,
                                 "store %s is open read-only (no write access to it): this command "
                                 "writes to it",
                                 s->dir);
    char msg[sizeof s->errmsg];
    cairn__wreq me = {.fn = fn, .arg = arg, .durable = durable, .msg = msg};
    pthread_mutex_lock(&s->wq_mu);
    if (s->wq_tail)
        s->wq_tail->next = &me;
    else
        s->wq_head = &me;
    s->wq_tail = &me;
    int lead = !s->wq_led; /* none running: the queue held no other write */
    s->wq_led = 1;
    pthread_mutex_unlock(&s->wq_mu);
    uint32_t st = lead ? W_LEAD : W_WAIT;
    while (st == W_WAIT) {
        cairn__futex_wait(&me.state, W_WAIT, -1, 0);
        st = __atomic_load_n(&me.state, __ATOMIC_ACQUIRE);
    }
    if (st == W_LEAD) { /* it heads the queue: its batch holds its own write */
        cairn__wreq *batch[BATCH_MAX];
        unsigned char told[BATCH_MAX] = {0};
        size_t n = take_more(s, batch, 0);
        write_batch(s, batch, &n, &me, told);
        pthread_mutex_lock(&s->wq_mu);
        cairn__wreq *next = s->wq_head; /* leads the next batch: the lead passes, never races */
        if (!next)
            s->wq_led = 0;
        pthread_mutex_unlock(&s->wq_mu);
        if (next)
            wake(next, W_LEAD);
        for (size_t i = 0; i < n; i++)
            if (batch[i] != &me && !told[i])
                wake(batch[i], W_DONE);
    }
    if (me.rc)
        err_set(s, msg);
    return me.rc;
}

void cairn__store_batches(cairn_store *s, uint64_t *batches, uint64_t *writes)
{
    pthread_mutex_lock(&s->wq_mu);
    *batches = s->batches;
    *writes = s->batched;
    pthread_mutex_unlock(&s->wq_mu);
}

int cairn__store_settle(cairn_store *s, uint64_t upto)
{
    if (!s || !s->env)
        return CAIRN_EINVAL;
    if (s->broken)
        return broken(s);
    if (!s->synced || s->readonly)
        return 0;
    cairn__synced_lock(s); /* before `use`: the order cairn__use_alone explains */
    cairn__use u;
    cairn__use_enter(s, &u);
    int rc = cairn__synced_settle(s, upto);
    cairn__use_leave(s, &u);
    cairn__synced_unlock(s);
    return rc;
}

uint64_t cairn__store_reads(const cairn_store *s)
{
    return s ? __atomic_load_n(&s->reads, __ATOMIC_RELAXED) : 0;
}

int cairn__store_read(cairn_store *s, cairn__txn_fn fn, void *arg)
{
    if (!s || !s->env)
        return CAIRN_EINVAL;
    if (s->broken)
        return broken(s);
    cairn__use u;
    cairn__use_enter(s, &u);
    cairn__guard g;
    if (sigsetjmp(g.jb, 0)) {
        cairn__use_leave(s, &u);
        return cairn__guard_fault(s, &g);
    }
    cairn__guard_push(&g);
    cairn__txn t = {.s = s};
    /* A read transaction costs an allocation and a reader slot to begin; the one kept from the
     * last read is renewed instead (it fails after another process grew the map: a new one
     * then adopts the size). */
    int rc = 0;
    t.txn = __atomic_exchange_n(&s->rtxn, NULL, __ATOMIC_ACQ_REL);
    if (t.txn && mdb_txn_renew(t.txn) != 0) {
        mdb_txn_abort(t.txn);
        t.txn = NULL;
    }
    if (!t.txn)
        rc = cairn__store_begin(s, MDB_RDONLY, &t.txn);
    if (!rc) {
        __atomic_add_fetch(&s->reads, 1, __ATOMIC_RELAXED);
        msgpack_sbuffer_init(&t.buf);
        rc = fn(&t, arg);
        txn_buffers_free(&t);
        mdb_txn_reset(t.txn);
        MDB_txn *none = NULL;
        if (!__atomic_compare_exchange_n(&s->rtxn, &none, t.txn, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            mdb_txn_abort(t.txn);
    }
    cairn__guard_pop(&g);
    cairn__use_leave(s, &u);
    return rc;
}
