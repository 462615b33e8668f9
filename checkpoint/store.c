/* checkpoint/store.c - the LMDB checkpoint store.
 *
 * One LMDB environment per store directory, with named databases:
 *   meta      schema version
 *   tasks     id -> task record (msgpack map: state, lease, attempts, hashes, times)
 *   inputs    id -> the task input as msgpack (apart, so step commits never rewrite it)
 *   steps     id\0step\0gen(be32) -> step record (state, invocations, output bytes)
 *   progress  id\0step\0gen(be32) -> progress bytes of a long step
 *   idem      id -> payload hash, reserved with MDB_NOOVERWRITE: uniqueness in one atomic step
 *   due       state(1)|due(be64)|id -> ""   the status index `retry` and `list` read
 *   tenants   tenant\0id -> ""               running tasks per tenant
 *   finished  finished(be64)|id -> ""        what gc reads, oldest first
 *   audit     id\0seq(be64) -> audit record
 *   msgs      message id -> task id
 *   msgtime   recorded(be64)|message id -> ""   what gc reads to forget old messages
 * Every write goes through cairn__store_write(), which runs a callback inside one write
 * transaction, so a step's output, the step state, the lease renewal and the audit record
 * commit together or not at all. A full map aborts the transaction, grows the map (up to
 * map_max) and runs the callback again: nothing is half-written.
 *
 * Durability ("sync" mode). LMDB flushes twice per commit by default: the data pages, then the
 * meta page that makes them visible. We open with MDB_NOMETASYNC, so a commit costs one
 * fdatasync: the data pages are on disk, the new meta page is written but not yet flushed. A
 * power loss can therefore undo only the last commit, never corrupt the store (LMDB keeps two
 * meta pages and never reuses pages the previous meta references), and the next commit's
 * fdatasync flushes the pending meta page with its own data. Where losing the last commit would
 * break a promise we flush the meta page too (DURABLE writes): the intent record before an
 * effect is called (else a power loss could forget that an email went out), the output of a
 * step marked expensive (the LLM result), and the final state of a task.
 *
 * Why not fewer flushes, or cheaper ones: every LMDB commit must flush its data pages before
 * its meta page may reach the disk (LMDB pages carry no checksum, so a meta page that got there
 * first would point at garbage after a power cut), which makes one flush per commit the floor.
 * What a flush costs depends on how many separate writes it carries: a copy-on-write commit
 * rewrites the path from leaf to root of each database it touches, the main database's record
 * of that root, and the free list, at scattered places (5-6 pages), where SQLite's WAL appends
 * 1-2 pages in one run. On the benchmark machine a flush of 6 scattered pages took ~167 us
 * against ~100-115 us for 1-2 pages or 6 contiguous ones, hence cairn's sync mode at about
 * 0.6-0.7x SQLite's WAL FULL (bench/README.md). A commit log in front of LMDB would close that
 * gap at the price of a second storage format; that is a design decision, not a tuning knob.
 *
 * "nosync" stores (chosen when the store is created, recorded in the file `durability`) use
 * MDB_NOSYNC with MDB_WRITEMAP: a commit writes into the shared map, which reaches the page
 * cache at once and survives a process crash, with no system call. How the map is sized,
 * reserved on disk and kept from shrinking under another process is checkpoint/map.c's.
 *
 * This file holds the environment and the transactions; records.c the record coding and the
 * task/step/progress/audit records, index.c the index scans, messages and statistics.
 */
#include "checkpoint/store_impl.h"

#include <errno.h>
#include <lmdb.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int cairn__store_fail(cairn_store *s, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
    va_end(ap);
    return err;
}

cairn_store *cairn__txn_store(cairn__txn *t) { return t->s; }

int cairn__mdb_fail(cairn__txn *t, cairn_store *s, int rc, const char *what)
{
    int err = CAIRN_EIO;
    if (rc == MDB_MAP_FULL) {
        if (t)
            t->map_full = 1;
        err = CAIRN_EFULL;
    } else if (rc == ENOSPC || rc == EDQUOT) {
        err = CAIRN_EFULL;
    } else if (rc == ENOMEM) {
        err = CAIRN_ENOMEM;
    } else if (rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_INVALID) {
        err = CAIRN_ECORRUPT;
    } else if (rc == MDB_VERSION_MISMATCH) {
        err = CAIRN_ESCHEMA;
    }
    return cairn__store_fail(s, err, "%s: %s (LMDB %d) in store %s", what, mdb_strerror(rc), rc,
                             s->dir ? s->dir : "?");
}

/* ------------------------------------------------------------------ lifecycle */

cairn_store *cairn_store_new(void)
{
    cairn_store *s = calloc(1, sizeof *s);
    if (s) {
        s->map_max = DEFAULT_MAP_MAX;
        s->map_lock_fd = -1;
    }
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

const char *cairn_store_errmsg(const cairn_store *s) { return s ? s->errmsg : "no store"; }

void cairn__store_inject_write_failure(cairn_store *s, uint32_t nth, int err)
{
    s->inject_nth = nth;
    s->inject_err = err;
}

static int begin(cairn_store *s, unsigned flags, MDB_txn **txn);

static int open_dbs(cairn_store *s)
{
    static const char *names[] = {"meta", "tasks",   "inputs",   "steps", "progress", "idem",
                                  "due",  "tenants", "finished", "audit", "msgs",     "msgtime"};
    MDB_dbi *dbis[] = {&s->meta, &s->tasks,   &s->inputs,   &s->steps, &s->progress, &s->idem,
                       &s->due,  &s->tenants, &s->finished, &s->audit, &s->msgs,     &s->msgtime};
    MDB_txn *txn;
    int rc = begin(s, 0, &txn); /* adopts the map size if another process just grew it */
    if (rc)
        return rc;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        rc = mdb_dbi_open(txn, names[i], MDB_CREATE, dbis[i]);
        if (rc) {
            mdb_txn_abort(txn);
            return cairn__mdb_fail(NULL, s, rc, "open database");
        }
    }
    MDB_val k = {6, "schema"}, v;
    rc = mdb_get(txn, s->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        uint32_t schema = CAIRN__SCHEMA;
        v.mv_size = sizeof schema;
        v.mv_data = &schema;
        rc = mdb_put(txn, s->meta, &k, &v, 0);
    } else if (rc == 0) {
        uint32_t schema = 0;
        if (v.mv_size == sizeof schema)
            memcpy(&schema, v.mv_data, sizeof schema);
        if (schema > CAIRN__SCHEMA) {
            mdb_txn_abort(txn);
            return cairn__store_fail(s, CAIRN_ESCHEMA,
                                     "store %s has schema version %u; this cairn reads up to %u: "
                                     "upgrade cairn",
                                     s->dir, schema, CAIRN__SCHEMA);
        }
    }
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    return rc ? cairn__mdb_fail(NULL, s, rc, "initialise store") : 0;
}

/* Undoes a failed open, so that the handle can be opened again (or freed) cleanly. */
static int open_failed(cairn_store *s, int rc)
{
    if (s->env)
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
    int rc = mdb_env_create(&s->env);
    if (rc)
        return open_failed(s, cairn__mdb_fail(NULL, s, rc, "create environment"));
    if ((rc = cairn__map_settle_durability(s, dir)))
        return open_failed(s, rc);
    mdb_env_set_maxdbs(s->env, 16);
    mdb_env_set_maxreaders(s->env, 256);
    unsigned flags = MDB_NOTLS | MDB_NORDAHEAD;
    flags |= s->durability == CAIRN_NOSYNC ? MDB_NOSYNC | MDB_WRITEMAP : MDB_NOMETASYNC;
    if ((rc = cairn__map_open(s, dir, flags)))
        return open_failed(s, rc);
    int dead = 0;
    mdb_reader_check(s->env, &dead); /* clear reader slots of killed processes */
    if ((rc = open_dbs(s)))
        return open_failed(s, rc);
    cairn__map_note(s); /* now the main database has a key to find the map by */
    return 0;
}

void cairn_store_free(cairn_store *s)
{
    if (!s)
        return;
    if (s->env)
        mdb_env_close(s->env);
    if (s->map_lock_fd >= 0)
        close(s->map_lock_fd);
    free(s->tc_bytes);
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

static int begin(cairn_store *s, unsigned flags, MDB_txn **txn)
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
    msgpack_sbuffer_destroy(&t->buf);
    if (t->zone_ready)
        msgpack_zone_destroy(&t->zone);
}

static int broken(cairn_store *s)
{
    return cairn__store_fail(s, CAIRN_EIO,
                             "store %s: this handle lost its map in a failed remap; reopen the "
                             "store",
                             s->dir);
}

int cairn__store_write(cairn_store *s, int durable, cairn__txn_fn fn, void *arg)
{
    if (!s || !s->env)
        return CAIRN_EINVAL;
    if (s->broken)
        return broken(s);
    for (;;) {
        cairn__txn t = {.s = s};
        int rc = begin(s, 0, &t.txn);
        if (rc)
            return rc;
        cairn__map_prepare_ahead(s);
        msgpack_sbuffer_init(&t.buf);
        if (s->inject_nth && --s->inject_nth == 0) {
            rc = cairn__store_fail(s, s->inject_err, "injected write failure");
            mdb_txn_abort(t.txn);
            msgpack_sbuffer_destroy(&t.buf);
            return rc;
        }
        rc = fn(&t, arg);
        txn_buffers_free(&t);
        if (rc < 0 || rc > 0) {
            mdb_txn_abort(t.txn);
            if (t.map_full) {
                int g = grow_map(s);
                if (g)
                    return g;
                continue;
            }
            return rc;
        }
        int mrc = mdb_txn_commit(t.txn);
        if (mrc == MDB_MAP_FULL) {
            int g = grow_map(s);
            if (g)
                return g;
            continue;
        }
        if (mrc)
            return cairn__mdb_fail(NULL, s, mrc, "commit");
        if (durable && s->durability == CAIRN_SYNC) {
            mrc = mdb_env_sync(s->env, 1);
            if (mrc)
                return cairn__mdb_fail(NULL, s, mrc, "flush to disk");
        }
        return 0;
    }
}

int cairn__store_read(cairn_store *s, cairn__txn_fn fn, void *arg)
{
    if (!s || !s->env)
        return CAIRN_EINVAL;
    if (s->broken)
        return broken(s);
    cairn__txn t = {.s = s};
    int rc = begin(s, MDB_RDONLY, &t.txn);
    if (rc)
        return rc;
    msgpack_sbuffer_init(&t.buf);
    rc = fn(&t, arg);
    txn_buffers_free(&t);
    mdb_txn_abort(t.txn);
    return rc;
}
