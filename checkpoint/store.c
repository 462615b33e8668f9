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
 * step marked expensive (the LLM result), and the final state of a task. "nosync" mode uses
 * MDB_NOSYNC: writes reach the OS page cache at commit, which survives a process crash.
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
#define INITIAL_MAP (8ull << 20)

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
    if (s)
        s->map_max = DEFAULT_MAP_MAX;
    return s;
}

int cairn_store_set_durability(cairn_store *s, cairn_durability d)
{
    if (!s || (d != CAIRN_SYNC && d != CAIRN_NOSYNC) || s->env)
        return CAIRN_EINVAL;
    s->durability = d;
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

static int open_dbs(cairn_store *s)
{
    static const char *names[] = {"meta", "tasks",   "inputs",   "steps", "progress", "idem",
                                  "due",  "tenants", "finished", "audit", "msgs",     "msgtime"};
    MDB_dbi *dbis[] = {&s->meta, &s->tasks,   &s->inputs,   &s->steps, &s->progress, &s->idem,
                       &s->due,  &s->tenants, &s->finished, &s->audit, &s->msgs,     &s->msgtime};
    MDB_txn *txn;
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc)
        return cairn__mdb_fail(NULL, s, rc, "begin open transaction");
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
        return cairn__mdb_fail(NULL, s, rc, "create environment");
    mdb_env_set_maxdbs(s->env, 16);
    mdb_env_set_maxreaders(s->env, 256);
    /* Start from the current file size (a store bigger than INITIAL_MAP) or INITIAL_MAP. */
    char path[4096];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    uint64_t want = INITIAL_MAP;
    if (stat(path, &st) == 0 && (uint64_t)st.st_size > want)
        want = (uint64_t)st.st_size;
    if (want > s->map_max)
        want = s->map_max;
    s->map_size = want;
    mdb_env_set_mapsize(s->env, (size_t)want);
    unsigned flags = MDB_NOTLS | MDB_NORDAHEAD;
    flags |= s->durability == CAIRN_NOSYNC ? MDB_NOSYNC : MDB_NOMETASYNC;
    rc = mdb_env_open(s->env, dir, flags, 0600);
    if (rc) {
        int err = cairn__mdb_fail(NULL, s, rc, "open store");
        mdb_env_close(s->env);
        s->env = NULL;
        return err;
    }
    MDB_envinfo info;
    if (mdb_env_info(s->env, &info) == 0)
        s->map_size = info.me_mapsize;
    int dead = 0;
    mdb_reader_check(s->env, &dead); /* clear reader slots of killed processes */
    rc = open_dbs(s);
    if (rc) {
        mdb_env_close(s->env);
        s->env = NULL;
    }
    return rc;
}

void cairn_store_free(cairn_store *s)
{
    if (!s)
        return;
    if (s->env)
        mdb_env_close(s->env);
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
    if (s->map_size >= s->map_max)
        return cairn__store_fail(s, CAIRN_EFULL,
                                 "store %s is full: map limit of %llu bytes reached (nothing was "
                                 "written)",
                                 s->dir, (unsigned long long)s->map_max);
    uint64_t next = s->map_size * 2;
    if (next > s->map_max)
        next = s->map_max;
    int rc = mdb_env_set_mapsize(s->env, (size_t)next);
    if (rc)
        return cairn__mdb_fail(NULL, s, rc, "grow map");
    MDB_envinfo info;
    s->map_size = mdb_env_info(s->env, &info) == 0 ? info.me_mapsize : next;
    return 0;
}

static int begin(cairn_store *s, unsigned flags, MDB_txn **txn)
{
    for (int tries = 0;; tries++) {
        int rc = mdb_txn_begin(s->env, NULL, flags, txn);
        if (rc == MDB_MAP_RESIZED && tries < 4) {
            /* another process grew the map: adopt its size */
            mdb_env_set_mapsize(s->env, 0);
            MDB_envinfo info;
            if (mdb_env_info(s->env, &info) == 0)
                s->map_size = info.me_mapsize;
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

/* Keeps data.mdb ahead of its used pages with zero-filled space (sync mode). A commit that
 * grows the file makes its fdatasync flush the file's size and extent metadata as well;
 * writing into space that already exists flushes only the pages. Run right after a write
 * transaction begins: we hold the writer lock and nothing of ours is written yet, so no process
 * can be writing past the end of the file. Failures are harmless (the commit grows the file). */
static void extend_ahead(cairn_store *s)
{
    enum { MIN_AHEAD = 1 << 20, AHEAD = 4 << 20, CHUNK = 1 << 16 };
    static const char zeros[CHUNK];
    int fd;
    struct stat st;
    MDB_envinfo info;
    MDB_stat est;
    if (s->durability != CAIRN_SYNC || mdb_env_get_fd(s->env, &fd) || fstat(fd, &st) ||
        mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &est))
        return;
    uint64_t used = (uint64_t)(info.me_last_pgno + 1) * est.ms_psize;
    uint64_t size = (uint64_t)st.st_size, want = used + AHEAD;
    if (want > s->map_size)
        want = s->map_size;
    if (size >= used + MIN_AHEAD || size >= want)
        return;
    for (uint64_t off = size; off < want;) {
        size_t n = want - off < CHUNK ? (size_t)(want - off) : CHUNK;
        ssize_t w = pwrite(fd, zeros, n, (off_t)off);
        if (w <= 0)
            return;
        off += (uint64_t)w;
    }
}

int cairn__store_write(cairn_store *s, int durable, cairn__txn_fn fn, void *arg)
{
    if (!s || !s->env)
        return CAIRN_EINVAL;
    for (;;) {
        cairn__txn t = {.s = s};
        int rc = begin(s, 0, &t.txn);
        if (rc)
            return rc;
        extend_ahead(s);
        msgpack_sbuffer_init(&t.buf);
        if (s->inject_nth && --s->inject_nth == 0) {
            rc = cairn__store_fail(s, s->inject_err, "injected write failure");
            mdb_txn_abort(t.txn);
            msgpack_sbuffer_destroy(&t.buf);
            return rc;
        }
        rc = fn(&t, arg);
        msgpack_sbuffer_destroy(&t.buf);
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
    cairn__txn t = {.s = s};
    int rc = begin(s, MDB_RDONLY, &t.txn);
    if (rc)
        return rc;
    msgpack_sbuffer_init(&t.buf);
    rc = fn(&t, arg);
    msgpack_sbuffer_destroy(&t.buf);
    mdb_txn_abort(t.txn);
    return rc;
}
