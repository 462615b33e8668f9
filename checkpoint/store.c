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
 */
#include "checkpoint/store.h"

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

struct cairn_store {
    MDB_env *env;
    MDB_dbi meta, tasks, inputs, steps, progress, idem, due, tenants, finished, audit, msgs,
        msgtime;
    cairn_durability durability;
    uint64_t map_max, map_size;
    uint32_t inject_nth;
    int inject_err;
    char *dir;
    char errmsg[1024];
};

struct cairn__txn {
    cairn_store *s;
    MDB_txn *txn;
    int map_full;
    msgpack_sbuffer buf;
};

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

/* Translates an LMDB (or errno) code into a cairn code, keeping the original in the message. */
static int mdb_fail(cairn__txn *t, cairn_store *s, int rc, const char *what)
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
        return mdb_fail(NULL, s, rc, "begin open transaction");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        rc = mdb_dbi_open(txn, names[i], MDB_CREATE, dbis[i]);
        if (rc) {
            mdb_txn_abort(txn);
            return mdb_fail(NULL, s, rc, "open database");
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
    return rc ? mdb_fail(NULL, s, rc, "initialise store") : 0;
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
        return mdb_fail(NULL, s, rc, "create environment");
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
        int err = mdb_fail(NULL, s, rc, "open store");
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
        return mdb_fail(NULL, s, rc, "grow map");
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
        return rc ? mdb_fail(NULL, s, rc, "begin transaction") : 0;
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
            return mdb_fail(NULL, s, mrc, "commit");
        if (durable && s->durability == CAIRN_SYNC) {
            mrc = mdb_env_sync(s->env, 1);
            if (mrc)
                return mdb_fail(NULL, s, mrc, "flush to disk");
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

/* ------------------------------------------------------------------ keys */

typedef struct key {
    size_t len;
    char b[CAIRN__ID_MAX + CAIRN__NAME_MAX + CAIRN__ID_MAX + 16];
} key;

static void be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}
static uint64_t rd_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void key_str(key *k, const char *s)
{
    size_t n = strlen(s);
    memcpy(k->b + k->len, s, n);
    k->len += n;
}
static void key_nul(key *k) { k->b[k->len++] = 0; }
static void key_u64(key *k, uint64_t v)
{
    be64((unsigned char *)k->b + k->len, v);
    k->len += 8;
}
static void key_u32(key *k, uint32_t v)
{
    unsigned char *p = (unsigned char *)k->b + k->len;
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
    k->len += 4;
}
static MDB_val kv(key *k) { return (MDB_val){k->len, k->b}; }

static void step_key(key *k, const char *task, const char *step, uint32_t gen)
{
    k->len = 0;
    key_str(k, task), key_nul(k), key_str(k, step), key_nul(k), key_u32(k, gen);
}

/* The due time orders the status index: when a failed task is due again, else when the task
 * last changed state. A running task's key does not follow its lease, so renewing the lease at
 * each step commit does not rewrite the index. */
static int64_t due_of(const cairn__task_rec *r)
{
    return r->state == CAIRN_FAILED ? r->next_retry_ms : r->updated_ms;
}

static void due_key(key *k, const cairn__task_rec *r)
{
    k->len = 0;
    k->b[k->len++] = (char)r->state;
    key_u64(k, (uint64_t)due_of(r));
    key_str(k, r->id);
}

/* ------------------------------------------------------------------ record coding */

static void pk_str(msgpack_packer *pk, const char *k, const char *v)
{
    size_t n = strlen(k), m = strlen(v);
    msgpack_pack_str(pk, n), msgpack_pack_str_body(pk, k, n);
    msgpack_pack_str(pk, m), msgpack_pack_str_body(pk, v, m);
}
static void pk_int(msgpack_packer *pk, const char *k, int64_t v)
{
    size_t n = strlen(k);
    msgpack_pack_str(pk, n), msgpack_pack_str_body(pk, k, n);
    msgpack_pack_int64(pk, v);
}
static void pk_uint(msgpack_packer *pk, const char *k, uint64_t v)
{
    size_t n = strlen(k);
    msgpack_pack_str(pk, n), msgpack_pack_str_body(pk, k, n);
    msgpack_pack_uint64(pk, v);
}
static void pk_bin(msgpack_packer *pk, const char *k, const void *v, size_t len)
{
    size_t n = strlen(k);
    msgpack_pack_str(pk, n), msgpack_pack_str_body(pk, k, n);
    if (!v) {
        msgpack_pack_nil(pk);
        return;
    }
    msgpack_pack_bin(pk, len), msgpack_pack_bin_body(pk, v, len);
}

/* A decoded record: the fields are looked up by name. */
typedef struct rec {
    msgpack_unpacked u;
    const msgpack_object_map *map;
} rec;

/* 1 if p[0..n) starts with one msgpack object whose declared lengths fit in n bytes.
 * msgpack-c allocates a container's elements from its declared count before it reads them, so
 * a corrupt 5-byte value (0xdf ffffffff: a map of 4 billion pairs) would ask for 200 GB; every
 * object takes at least one byte, so a count beyond the bytes left is refused here first. */
static int mp_plausible(const void *data, size_t n)
{
    const unsigned char *p = data;
    size_t pos = 0;
    uint64_t pending = 1; /* objects still to read */
    while (pending) {
        if (pos >= n)
            return 0;
        unsigned b = p[pos++];
        uint64_t skip = 0, items = 0;
        int lenb = 0, kind = 0; /* a big-endian length of lenb bytes: 1 bytes, 2 ext, 3 array,
                                   4 map */
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
            ;
        else if (b <= 0x8f)
            items = 2 * (b & 0x0f);
        else if (b <= 0x9f)
            items = b & 0x0f;
        else if (b <= 0xbf)
            skip = b & 0x1f;
        else if (b == 0xcc || b == 0xd0)
            skip = 1;
        else if (b == 0xcd || b == 0xd1 || b == 0xd4)
            skip = 2;
        else if (b == 0xd5)
            skip = 3;
        else if (b == 0xca || b == 0xce || b == 0xd2)
            skip = 4;
        else if (b == 0xd6)
            skip = 5;
        else if (b == 0xcb || b == 0xcf || b == 0xd3)
            skip = 8;
        else if (b == 0xd7)
            skip = 9;
        else if (b == 0xd8)
            skip = 17;
        else if (b == 0xc4 || b == 0xd9)
            lenb = 1, kind = 1;
        else if (b == 0xc5 || b == 0xda)
            lenb = 2, kind = 1;
        else if (b == 0xc6 || b == 0xdb)
            lenb = 4, kind = 1;
        else if (b >= 0xc7 && b <= 0xc9)
            lenb = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4, kind = 2;
        else if (b == 0xdc || b == 0xdd)
            lenb = b == 0xdc ? 2 : 4, kind = 3;
        else if (b == 0xde || b == 0xdf)
            lenb = b == 0xde ? 2 : 4, kind = 4;
        else
            return 0; /* 0xc1: never used */
        if (lenb) {
            if (n - pos < (size_t)lenb)
                return 0;
            uint64_t l = 0;
            for (int i = 0; i < lenb; i++)
                l = l << 8 | p[pos++];
            if (kind == 1)
                skip = l;
            else if (kind == 2)
                skip = l + 1; /* the ext type byte */
            else
                items = kind == 4 ? 2 * l : l;
        }
        if (skip > n - pos)
            return 0;
        pos += (size_t)skip;
        pending += items - 1;
        if (pending > n - pos)
            return 0;
    }
    return 1;
}

static int rec_open(cairn__txn *t, rec *r, const MDB_val *v, const char *what, const char *id)
{
    size_t off = 0;
    msgpack_unpacked_init(&r->u);
    msgpack_unpack_return ur = mp_plausible(v->mv_data, v->mv_size)
                                   ? msgpack_unpack_next(&r->u, v->mv_data, v->mv_size, &off)
                                   : MSGPACK_UNPACK_PARSE_ERROR;
    if (ur != MSGPACK_UNPACK_SUCCESS || r->u.data.type != MSGPACK_OBJECT_MAP || off != v->mv_size) {
        msgpack_unpacked_destroy(&r->u);
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "corrupt %s record for '%s' in store %s (%zu bytes)", what, id,
                                 t->s->dir, (size_t)v->mv_size);
    }
    r->map = &r->u.data.via.map;
    return 0;
}

static const msgpack_object *rec_get(const rec *r, const char *k)
{
    size_t n = strlen(k);
    for (uint32_t i = 0; i < r->map->size; i++) {
        const msgpack_object *key = &r->map->ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == n &&
            memcmp(key->via.str.ptr, k, n) == 0)
            return &r->map->ptr[i].val;
    }
    return NULL;
}

static int64_t rec_int(const rec *r, const char *k)
{
    const msgpack_object *o = rec_get(r, k);
    if (!o)
        return 0;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (int64_t)o->via.u64;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return o->via.i64;
    return 0;
}

static void rec_str(const rec *r, const char *k, char *out, size_t cap)
{
    const msgpack_object *o = rec_get(r, k);
    size_t n = 0;
    if (o && o->type == MSGPACK_OBJECT_STR) {
        n = o->via.str.size < cap - 1 ? o->via.str.size : cap - 1;
        memcpy(out, o->via.str.ptr, n);
    }
    out[n] = 0;
}

static void rec_bin(const rec *r, const char *k, const void **p, size_t *len)
{
    const msgpack_object *o = rec_get(r, k);
    *p = NULL;
    *len = 0;
    if (o && o->type == MSGPACK_OBJECT_BIN) {
        *p = o->via.bin.ptr;
        *len = o->via.bin.size;
    }
}

static int rec_version(cairn__txn *t, rec *r, const char *what, const char *id)
{
    int64_t v = rec_int(r, "v");
    if (v > CAIRN__SCHEMA) {
        msgpack_unpacked_destroy(&r->u);
        return cairn__store_fail(t->s, CAIRN_ESCHEMA,
                                 "%s record for '%s' has schema version %lld; this cairn reads up "
                                 "to %d",
                                 what, id, (long long)v, CAIRN__SCHEMA);
    }
    return 0;
}

/* ------------------------------------------------------------------ tasks */

static int task_decode(cairn__txn *t, const MDB_val *v, const char *id, cairn__task_rec *o)
{
    rec r;
    int rc = rec_open(t, &r, v, "task", id);
    if (rc || (rc = rec_version(t, &r, "task", id)))
        return rc;
    memset(o, 0, sizeof *o);
    rec_str(&r, "id", o->id, sizeof o->id);
    rec_str(&r, "graph", o->graph, sizeof o->graph);
    rec_str(&r, "fp", o->fingerprint, sizeof o->fingerprint);
    rec_str(&r, "hash", o->payload_hash, sizeof o->payload_hash);
    rec_str(&r, "pin", o->steps_pin, sizeof o->steps_pin);
    rec_str(&r, "tenant", o->tenant, sizeof o->tenant);
    rec_str(&r, "err", o->error, sizeof o->error);
    rec_str(&r, "err_step", o->error_step, sizeof o->error_step);
    o->state = (uint8_t)rec_int(&r, "state");
    o->tombstone = (uint8_t)rec_int(&r, "tomb");
    o->attempt = (uint32_t)rec_int(&r, "attempt");
    o->generation = (uint32_t)rec_int(&r, "gen");
    o->audit_seq = (uint64_t)rec_int(&r, "aseq");
    o->created_ms = rec_int(&r, "created");
    o->updated_ms = rec_int(&r, "updated");
    o->finished_ms = rec_int(&r, "finished");
    o->next_retry_ms = rec_int(&r, "next_retry");
    rec_str(&r, "lhost", o->owner.host, sizeof o->owner.host);
    o->owner.pid = (int32_t)rec_int(&r, "lpid");
    o->owner.start = (uint64_t)rec_int(&r, "lstart");
    o->lease_token = (uint64_t)rec_int(&r, "ltoken");
    o->lease_expires_ms = rec_int(&r, "lexp");
    msgpack_unpacked_destroy(&r.u); /* bin pointers point into the LMDB value, not the zone */
    if (o->state >= CAIRN_STATE_COUNT)
        return cairn__store_fail(t->s, CAIRN_ECORRUPT, "task '%s' has invalid state %u", id,
                                 o->state);
    /* writes key a record by its id field: a mismatch would write a different task */
    if (strcmp(o->id, id) != 0)
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "task record under key '%s' names task '%s' in store %s", id,
                                 o->id, t->s->dir);
    return 0;
}

int cairn__task_get(cairn__txn *t, const char *id, cairn__task_rec *out)
{
    char key[CAIRN__ID_MAX + 1]; /* callers may pass out->id as id: decoding overwrites it */
    size_t n = strlen(id);
    if (n == 0 || n > CAIRN__ID_MAX)
        return CAIRN_ENOTFOUND;
    memcpy(key, id, n + 1);
    MDB_val k = {n, key}, v;
    int rc = mdb_get(t->txn, t->s->tasks, &k, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return mdb_fail(t, t->s, rc, "read task");
    return task_decode(t, &v, key, out);
}

static int put_empty(cairn__txn *t, MDB_dbi dbi, key *k)
{
    MDB_val kk = kv(k), v = {0, ""};
    int rc = mdb_put(t->txn, dbi, &kk, &v, 0);
    return rc ? mdb_fail(t, t->s, rc, "write index") : 0;
}

static int del_key(cairn__txn *t, MDB_dbi dbi, key *k)
{
    MDB_val kk = kv(k);
    int rc = mdb_del(t->txn, dbi, &kk, NULL);
    return rc && rc != MDB_NOTFOUND ? mdb_fail(t, t->s, rc, "delete index") : 0;
}

static void tenant_key(key *k, const cairn__task_rec *r)
{
    k->len = 0;
    key_str(k, r->tenant), key_nul(k), key_str(k, r->id);
}

static void finished_key(key *k, const cairn__task_rec *r)
{
    k->len = 0;
    key_u64(k, (uint64_t)r->finished_ms);
    key_str(k, r->id);
}

static int is_finished(const cairn__task_rec *r)
{
    return r->state == CAIRN_SUCCEEDED || r->state == CAIRN_DEAD;
}

/* Removes (old) or adds (new) the index entries of a task record. */
static int index_update(cairn__txn *t, const cairn__task_rec *r, int add)
{
    key k;
    int (*op)(cairn__txn *, MDB_dbi, key *) = add ? put_empty : del_key;
    due_key(&k, r);
    int rc = op(t, t->s->due, &k);
    if (!rc && r->tenant[0] && r->state == CAIRN_RUNNING) {
        tenant_key(&k, r);
        rc = op(t, t->s->tenants, &k);
    }
    if (!rc && is_finished(r)) {
        finished_key(&k, r);
        rc = op(t, t->s->finished, &k);
    }
    return rc;
}

int cairn__task_put(cairn__txn *t, const cairn__task_rec *r)
{
    cairn__task_rec old;
    int rc = cairn__task_get(t, r->id, &old);
    if (rc == 0)
        rc = index_update(t, &old, 0);
    else if (rc == CAIRN_ENOTFOUND)
        rc = 0;
    if (rc)
        return rc;
    /* `old` borrowed the LMDB value; the new record is encoded before it can be invalidated */
    msgpack_sbuffer_clear(&t->buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &t->buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 23);
    pk_uint(&pk, "v", CAIRN__SCHEMA);
    pk_str(&pk, "id", r->id);
    pk_str(&pk, "graph", r->graph);
    pk_str(&pk, "fp", r->fingerprint);
    pk_str(&pk, "hash", r->payload_hash);
    pk_str(&pk, "pin", r->steps_pin);
    pk_str(&pk, "tenant", r->tenant);
    pk_str(&pk, "err", r->error);
    pk_str(&pk, "err_step", r->error_step);
    pk_uint(&pk, "state", r->state);
    pk_uint(&pk, "tomb", r->tombstone);
    pk_uint(&pk, "attempt", r->attempt);
    pk_uint(&pk, "gen", r->generation);
    pk_uint(&pk, "aseq", r->audit_seq);
    pk_int(&pk, "created", r->created_ms);
    pk_int(&pk, "updated", r->updated_ms);
    pk_int(&pk, "finished", r->finished_ms);
    pk_int(&pk, "next_retry", r->next_retry_ms);
    pk_str(&pk, "lhost", r->owner.host);
    pk_int(&pk, "lpid", r->owner.pid);
    pk_uint(&pk, "lstart", r->owner.start);
    pk_uint(&pk, "ltoken", r->lease_token);
    pk_int(&pk, "lexp", r->lease_expires_ms);
    MDB_val k = {strlen(r->id), (void *)r->id}, v = {t->buf.size, t->buf.data};
    rc = mdb_put(t->txn, t->s->tasks, &k, &v, 0);
    if (rc)
        return mdb_fail(t, t->s, rc, "write task");
    return index_update(t, r, 1);
}

/* Deletes every key starting with `prefix` (prefix_len bytes) from dbi. */
static int del_prefix(cairn__txn *t, MDB_dbi dbi, const void *prefix, size_t prefix_len)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, dbi, &c);
    if (rc)
        return mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = {prefix_len, (void *)prefix}, v;
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size >= prefix_len && memcmp(k.mv_data, prefix, prefix_len) == 0) {
        rc = mdb_cursor_del(c, 0);
        if (rc)
            break;
        rc = mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT);
        if (rc == MDB_NOTFOUND || rc == EINVAL)
            rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
        else if (rc == 0 && (k.mv_size < prefix_len || memcmp(k.mv_data, prefix, prefix_len)))
            break;
    }
    mdb_cursor_close(c);
    return rc && rc != MDB_NOTFOUND ? mdb_fail(t, t->s, rc, "delete records") : 0;
}

static int input_del(cairn__txn *t, const char *id)
{
    MDB_val k = {strlen(id), (void *)id};
    int rc = mdb_del(t->txn, t->s->inputs, &k, NULL);
    return rc && rc != MDB_NOTFOUND ? mdb_fail(t, t->s, rc, "delete task input") : 0;
}

int cairn__task_del(cairn__txn *t, const char *id)
{
    cairn__task_rec old;
    int rc = cairn__task_get(t, id, &old);
    if (rc)
        return rc;
    if ((rc = index_update(t, &old, 0)))
        return rc;
    key p;
    p.len = 0;
    key_str(&p, id), key_nul(&p);
    if ((rc = del_prefix(t, t->s->steps, p.b, p.len)) ||
        (rc = del_prefix(t, t->s->progress, p.b, p.len)) ||
        (rc = del_prefix(t, t->s->audit, p.b, p.len)))
        return rc;
    if ((rc = input_del(t, id)))
        return rc;
    MDB_val k = {strlen(id), (void *)id};
    rc = mdb_del(t->txn, t->s->tasks, &k, NULL);
    return rc ? mdb_fail(t, t->s, rc, "delete task") : 0;
}

int cairn__input_get(cairn__txn *t, const char *id, const void **data, size_t *len)
{
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = mdb_get(t->txn, t->s->inputs, &k, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return mdb_fail(t, t->s, rc, "read task input");
    if (!mp_plausible(v.mv_data, v.mv_size))
        return cairn__store_fail(t->s, CAIRN_ECORRUPT, "corrupt input of task '%s' (%zu bytes)", id,
                                 (size_t)v.mv_size);
    *data = v.mv_data;
    *len = v.mv_size;
    return 0;
}

int cairn__input_put(cairn__txn *t, const char *id, const void *data, size_t len)
{
    MDB_val k = {strlen(id), (void *)id}, v = {len, (void *)data};
    int rc = mdb_put(t->txn, t->s->inputs, &k, &v, 0);
    return rc ? mdb_fail(t, t->s, rc, "write task input") : 0;
}

int cairn__task_drop_outputs(cairn__txn *t, const char *id)
{
    key p;
    p.len = 0;
    key_str(&p, id), key_nul(&p);
    int rc = del_prefix(t, t->s->steps, p.b, p.len);
    if (!rc)
        rc = del_prefix(t, t->s->progress, p.b, p.len);
    return rc ? rc : input_del(t, id);
}

int cairn__idem_reserve(cairn__txn *t, const char *id, const char *hash, char existing[65])
{
    MDB_val k = {strlen(id), (void *)id}, v = {64, (void *)hash};
    int rc = mdb_put(t->txn, t->s->idem, &k, &v, MDB_NOOVERWRITE);
    if (rc == 0)
        return 0;
    if (rc != MDB_KEYEXIST)
        return mdb_fail(t, t->s, rc, "reserve task ID");
    size_t n = v.mv_size < 64 ? v.mv_size : 64;
    memcpy(existing, v.mv_data, n);
    existing[n] = 0;
    return strcmp(existing, hash) == 0 ? 0 : CAIRN_ECONFLICT;
}

int cairn__idem_del(cairn__txn *t, const char *id)
{
    MDB_val k = {strlen(id), (void *)id};
    int rc = mdb_del(t->txn, t->s->idem, &k, NULL);
    return rc && rc != MDB_NOTFOUND ? mdb_fail(t, t->s, rc, "delete task ID") : 0;
}

/* ------------------------------------------------------------------ steps */

static int step_decode(cairn__txn *t, const MDB_val *v, const char *what, cairn__step_rec *o)
{
    rec r;
    int rc = rec_open(t, &r, v, "step", what);
    if (rc || (rc = rec_version(t, &r, "step", what)))
        return rc;
    memset(o, 0, sizeof *o);
    o->state = (uint8_t)rec_int(&r, "state");
    o->resolved = (uint8_t)rec_int(&r, "resolved");
    o->generation = (uint32_t)rec_int(&r, "gen");
    o->invocations = (uint32_t)rec_int(&r, "inv");
    o->updated_ms = rec_int(&r, "updated");
    o->intent_ms = rec_int(&r, "intent");
    rec_str(&r, "err", o->error, sizeof o->error);
    rec_bin(&r, "out", &o->output, &o->output_len);
    msgpack_unpacked_destroy(&r.u);
    if (o->output && !mp_plausible(o->output, o->output_len))
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "step '%s' has a corrupt output (%zu bytes) in store %s", what,
                                 o->output_len, t->s->dir);
    return 0;
}

int cairn__step_get(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                    cairn__step_rec *out)
{
    key want, prefix;
    step_key(&want, task, step, gen);
    prefix.len = want.len - 4;
    memcpy(prefix.b, want.b, prefix.len);
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->steps, &c);
    if (rc)
        return mdb_fail(t, t->s, rc, "open cursor");
    /* the record applying in `gen` is the last key <= prefix|gen */
    MDB_val k = kv(&want), v;
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && !(k.mv_size == want.len && memcmp(k.mv_data, want.b, want.len) == 0))
        rc = mdb_cursor_get(c, &k, &v, MDB_PREV);
    else if (rc == MDB_NOTFOUND)
        rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
    if (rc == 0 && (k.mv_size != want.len || memcmp(k.mv_data, prefix.b, prefix.len) != 0))
        rc = MDB_NOTFOUND;
    if (rc == 0)
        rc = step_decode(t, &v, step, out);
    else if (rc == MDB_NOTFOUND)
        rc = CAIRN_ENOTFOUND;
    else
        rc = mdb_fail(t, t->s, rc, "read step");
    mdb_cursor_close(c);
    return rc;
}

int cairn__step_put(cairn__txn *t, const char *task, const char *step, const cairn__step_rec *r)
{
    msgpack_sbuffer_clear(&t->buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &t->buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    pk_uint(&pk, "v", CAIRN__SCHEMA);
    pk_uint(&pk, "state", r->state);
    pk_uint(&pk, "resolved", r->resolved);
    pk_uint(&pk, "gen", r->generation);
    pk_uint(&pk, "inv", r->invocations);
    pk_int(&pk, "updated", r->updated_ms);
    pk_int(&pk, "intent", r->intent_ms);
    pk_str(&pk, "err", r->error);
    pk_bin(&pk, "out", r->output, r->output_len);
    key k;
    step_key(&k, task, step, r->generation);
    MDB_val kk = kv(&k), v = {t->buf.size, t->buf.data};
    int rc = mdb_put(t->txn, t->s->steps, &kk, &v, 0);
    return rc ? mdb_fail(t, t->s, rc, "write step") : 0;
}

int cairn__step_each(cairn__txn *t, const char *task, cairn__step_cb cb, void *arg)
{
    key p;
    p.len = 0;
    key_str(&p, task), key_nul(&p);
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->steps, &c);
    if (rc)
        return mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = kv(&p), v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size < p.len + 5 || memcmp(k.mv_data, p.b, p.len) != 0)
            break;
        char name[CAIRN__NAME_MAX + 1];
        size_t n = k.mv_size - p.len - 5;
        if (n > CAIRN__NAME_MAX)
            n = CAIRN__NAME_MAX;
        memcpy(name, (char *)k.mv_data + p.len, n);
        name[n] = 0;
        cairn__step_rec r;
        if ((rc = step_decode(t, &v, name, &r)))
            break;
        if ((rc = cb(name, &r, arg)))
            break;
    }
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND || rc == 1)
        rc = 0;
    return rc;
}

int cairn__progress_get(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                        const void **data, size_t *len)
{
    key k;
    step_key(&k, task, step, gen);
    MDB_val kk = kv(&k), v;
    int rc = mdb_get(t->txn, t->s->progress, &kk, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return mdb_fail(t, t->s, rc, "read progress");
    if (!mp_plausible(v.mv_data, v.mv_size))
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "corrupt progress record of task '%s' step '%s' in store %s", task,
                                 step, t->s->dir);
    *data = v.mv_data;
    *len = v.mv_size;
    return 0;
}

int cairn__progress_put(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                        const void *data, size_t len)
{
    key k;
    step_key(&k, task, step, gen);
    MDB_val kk = kv(&k), v = {len, (void *)data};
    int rc = data ? mdb_put(t->txn, t->s->progress, &kk, &v, 0)
                  : mdb_del(t->txn, t->s->progress, &kk, NULL);
    return rc && rc != MDB_NOTFOUND ? mdb_fail(t, t->s, rc, "write progress") : 0;
}

/* ------------------------------------------------------------------ audit, messages */

int cairn__audit_append(cairn__txn *t, cairn__task_rec *task, const cairn__audit_rec *a)
{
    msgpack_sbuffer_clear(&t->buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &t->buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 8);
    pk_uint(&pk, "v", CAIRN__SCHEMA);
    pk_int(&pk, "t", a->t_ms);
    pk_uint(&pk, "from", a->from);
    pk_uint(&pk, "to", a->to);
    pk_uint(&pk, "attempt", a->attempt);
    pk_uint(&pk, "gen", a->generation);
    pk_str(&pk, "step", a->step);
    pk_str(&pk, "reason", a->reason);
    /* The sequence number comes from the task's last audit key, not from the task record, so
     * appending an audit record does not force the task record to be rewritten (a step commit
     * then touches only the step and audit databases). */
    key k;
    k.len = 0;
    key_str(&k, task->id), key_nul(&k), key_u64(&k, UINT64_MAX);
    size_t plen = k.len - 8;
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->audit, &c);
    if (rc)
        return mdb_fail(t, t->s, rc, "open cursor");
    MDB_val kk = kv(&k), v;
    uint64_t last = 0;
    rc = mdb_cursor_get(c, &kk, &v, MDB_SET_RANGE);
    rc = rc == 0              ? mdb_cursor_get(c, &kk, &v, MDB_PREV)
         : rc == MDB_NOTFOUND ? mdb_cursor_get(c, &kk, &v, MDB_LAST)
                              : rc;
    if (rc == 0 && kk.mv_size == plen + 8 && memcmp(kk.mv_data, k.b, plen) == 0)
        last = rd_be64((unsigned char *)kk.mv_data + plen);
    mdb_cursor_close(c);
    if (rc && rc != MDB_NOTFOUND)
        return mdb_fail(t, t->s, rc, "read audit records");
    task->audit_seq = (last > task->audit_seq ? last : task->audit_seq) + 1;
    k.len = plen;
    key_u64(&k, task->audit_seq);
    kk = kv(&k);
    v = (MDB_val){t->buf.size, t->buf.data};
    rc = mdb_put(t->txn, t->s->audit, &kk, &v, 0);
    return rc ? mdb_fail(t, t->s, rc, "append audit record") : 0;
}

int cairn__audit_each(cairn__txn *t, const char *task, cairn__audit_cb cb, void *arg)
{
    key p;
    p.len = 0;
    key_str(&p, task), key_nul(&p);
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->audit, &c);
    if (rc)
        return mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = kv(&p), v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size != p.len + 8 || memcmp(k.mv_data, p.b, p.len) != 0)
            break;
        rec r;
        if ((rc = rec_open(t, &r, &v, "audit", task)))
            break;
        cairn__audit_rec a;
        memset(&a, 0, sizeof a);
        a.t_ms = rec_int(&r, "t");
        a.from = (uint8_t)rec_int(&r, "from");
        a.to = (uint8_t)rec_int(&r, "to");
        a.attempt = (uint32_t)rec_int(&r, "attempt");
        a.generation = (uint32_t)rec_int(&r, "gen");
        rec_str(&r, "step", a.step, sizeof a.step);
        rec_str(&r, "reason", a.reason, sizeof a.reason);
        msgpack_unpacked_destroy(&r.u);
        if ((rc = cb(&a, arg)))
            break;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND || rc == 1 ? 0 : rc;
}

int cairn__msg_get(cairn__txn *t, const char *msg_id, char task_out[CAIRN__ID_MAX + 1])
{
    MDB_val k = {strlen(msg_id), (void *)msg_id}, v;
    int rc = mdb_get(t->txn, t->s->msgs, &k, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return mdb_fail(t, t->s, rc, "read message record");
    size_t n = v.mv_size > CAIRN__ID_MAX ? CAIRN__ID_MAX : v.mv_size;
    memcpy(task_out, v.mv_data, n);
    task_out[n] = 0;
    return 0;
}

int cairn__msg_put(cairn__txn *t, const char *msg_id, const char *task)
{
    MDB_val k = {strlen(msg_id), (void *)msg_id}, v = {strlen(task), (void *)task};
    int rc = mdb_put(t->txn, t->s->msgs, &k, &v, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST)
        return 0; /* recorded before: keep its first time */
    if (rc)
        return mdb_fail(t, t->s, rc, "write message record");
    key tk;
    tk.len = 0;
    key_u64(&tk, (uint64_t)cairn__now_ms());
    key_str(&tk, msg_id);
    return put_empty(t, t->s->msgtime, &tk);
}

int cairn__msg_expire(cairn__txn *t, int64_t upto_ms, uint32_t limit, uint32_t *n_out)
{
    MDB_cursor *c;
    uint32_t n = 0;
    int rc = mdb_cursor_open(t->txn, t->s->msgtime, &c);
    if (rc)
        return mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k, v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && n < limit;) {
        if (k.mv_size < 8 || (int64_t)rd_be64(k.mv_data) > upto_ms)
            break;
        MDB_val mk = {k.mv_size - 8, (char *)k.mv_data + 8};
        int d = mdb_del(t->txn, t->s->msgs, &mk, NULL);
        if (d && d != MDB_NOTFOUND) {
            rc = d;
            break;
        }
        if ((rc = mdb_cursor_del(c, 0)))
            break;
        n++;
        rc = mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT);
        if (rc == MDB_NOTFOUND || rc == EINVAL)
            rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(c);
    *n_out = n;
    return rc && rc != MDB_NOTFOUND ? mdb_fail(t, t->s, rc, "forget old messages") : 0;
}

/* ------------------------------------------------------------------ index scans */

/* Collects matching ids first, then calls back: callbacks may write to the same databases,
 * which would invalidate a live cursor. */
typedef struct idlist {
    size_t n, cap;
    char (*ids)[CAIRN__ID_MAX + 1];
} idlist;

static int idlist_add(idlist *l, const void *p, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        void *ids = realloc(l->ids, cap * sizeof *l->ids);
        if (!ids)
            return CAIRN_ENOMEM;
        l->ids = ids, l->cap = cap;
    }
    if (n > CAIRN__ID_MAX)
        n = CAIRN__ID_MAX;
    memcpy(l->ids[l->n], p, n);
    l->ids[l->n++][n] = 0;
    return 0;
}

static int idlist_run(idlist *l, int rc, cairn__id_cb cb, void *arg)
{
    for (size_t i = 0; rc == 0 && i < l->n; i++)
        rc = cb(l->ids[i], arg);
    free(l->ids);
    return rc == 1 ? 0 : rc;
}

/* Scans dbi from `start` while keys begin with prefix[0..plen); `stop(k)` ends early. The id is
 * the key's bytes after `skip`. */
static int scan(cairn__txn *t, MDB_dbi dbi, const key *start, size_t plen, size_t skip,
                int64_t upto, int has_upto, cairn__id_cb cb, void *arg)
{
    idlist l = {0};
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, dbi, &c);
    if (rc)
        return mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = {start->len, (void *)start->b}, v;
    for (rc = mdb_cursor_get(c, &k, &v, start->len ? MDB_SET_RANGE : MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size < skip || memcmp(k.mv_data, start->b, plen) != 0)
            break;
        if (has_upto && (int64_t)rd_be64((unsigned char *)k.mv_data + skip - 8) > upto)
            break;
        if ((rc = idlist_add(&l, (char *)k.mv_data + skip, k.mv_size - skip)))
            break;
    }
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND)
        rc = 0;
    else if (rc > 0)
        rc = mdb_fail(t, t->s, rc, "scan index");
    return idlist_run(&l, rc, cb, arg);
}

int cairn__due_each(cairn__txn *t, cairn_state state, int64_t upto_ms, cairn__id_cb cb, void *arg)
{
    key k;
    k.len = 0;
    k.b[k.len++] = (char)state;
    return scan(t, t->s->due, &k, 1, 9, upto_ms, 1, cb, arg);
}

int cairn__tenant_each(cairn__txn *t, const char *tenant, cairn__id_cb cb, void *arg)
{
    key k;
    k.len = 0;
    key_str(&k, tenant), key_nul(&k);
    return scan(t, t->s->tenants, &k, k.len, k.len, 0, 0, cb, arg);
}

int cairn__finished_each(cairn__txn *t, int64_t upto_ms, cairn__id_cb cb, void *arg)
{
    key k;
    k.len = 0;
    return scan(t, t->s->finished, &k, 0, 8, upto_ms, 1, cb, arg);
}

static int count_cb(const char *id, void *arg)
{
    (void)id;
    ++*(uint64_t *)arg;
    return 0;
}

static int tomb_cb(const char *id, void *arg)
{
    cairn__txn *t = ((void **)arg)[0];
    cairn__task_rec r;
    if (cairn__task_get(t, id, &r) == 0 && r.tombstone)
        ++*(uint64_t *)((void **)arg)[1];
    return 0;
}

int cairn__store_stats_get(cairn__txn *t, cairn__store_stats *out)
{
    memset(out, 0, sizeof *out);
    int rc = 0;
    for (int s = 0; s < CAIRN_STATE_COUNT && !rc; s++)
        rc = cairn__due_each(t, (cairn_state)s, INT64_MAX, count_cb, &out->by_state[s]);
    void *targ[2] = {t, &out->tombstones};
    if (!rc)
        rc = cairn__finished_each(t, INT64_MAX, tomb_cb, targ);
    MDB_stat st;
    if (!rc && mdb_stat(t->txn, t->s->msgs, &st) == 0)
        out->messages = st.ms_entries;
    if (!rc && mdb_stat(t->txn, t->s->audit, &st) == 0)
        out->audit_records = st.ms_entries;
    if (!rc && mdb_stat(t->txn, t->s->steps, &st) == 0)
        out->step_records = st.ms_entries;
    MDB_envinfo info;
    MDB_stat est;
    if (!rc && mdb_env_info(t->s->env, &info) == 0 && mdb_env_stat(t->s->env, &est) == 0) {
        out->map_size = info.me_mapsize;
        out->page_size = est.ms_psize;
        out->map_used = (uint64_t)(info.me_last_pgno + 1) * est.ms_psize;
    }
    return rc;
}
