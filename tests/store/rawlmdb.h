/* rawlmdb.h - helpers shared by the engine unit tests (scratch directories, raw LMDB access).
 *
 * Raw LMDB access exists so tests can reach under the store's API: bump the schema, plant a
 * corrupt record, take a dump to prove a failed write changed nothing. LMDB forbids opening one
 * environment twice in a process, so the store must be closed while a raw env is open.
 * Every record of a schema-3 store ends in its checksum (checkpoint/checksum.c: XXH3-64 of the
 * value seeded with that of the key, seeded with that of the database name; 8 bytes LE): tu_raw_put
 * writes one, so that a planted record reaches the decoder behind it; tu_raw_put_bare writes the
 * bytes as given.
 *
 * Two layouts, one way to name a record. Tests name a record as schema 5 kept it: a database
 * and a key there - inputs and idem `ID`, steps and tails `ID \0 STEP \0 GEN(be32)`, audit
 * `ID \0 SEQ(be64)`. Schema 6 retired those five databases (progress stays): a task's own
 * records live in tasks with its task record, under the ID, its NUL, a kind byte and the rest of
 * schema 5's key (`ID \0 i`, `ID \0 h`, `ID \0 s STEP \0 GEN`, `ID \0 t ...` for the tail of
 * the `s` record, `ID \0 a SEQ`), each sealed as a record of tasks (seed "tasks" and that key; a
 * split step record's one checksum, at the end of its tail, over the whole record and the `s` key).
 * So the helpers below read the store's meta "schema" record (a u32, the first 4 bytes of its
 * value) in the transaction they work in, and on a store of schema 6 or later translate: a record
 * of one of those five databases is read, written, deleted and sealed in tasks under its schema-6
 * key (tu_raw_where); on an older store, and for every other database, the name and key are
 * used as given. tu_raw_home5 is the other way: which schema-5 database a key of schema 6's
 * tasks belongs in, and its key there. Where the translation cannot follow:
 *   - tu_raw_drop of one of the five databases on a schema-6 store deletes every record of its
 *     kind from tasks (tails: every tail), and no other; the store keeps tasks;
 *   - tu_raw_dump digests the databases as they are (one that does not exist is skipped), but
 *     counts each record under the schema-5 database it belongs in: entries[i] is tu_dbs[i]'s
 *     count in either layout (a key of tasks that is none of a task's records counts as tasks);
 *   - a test that needs a store as schema 5 or before wrote it (an upgrade's) first calls
 *     tu_raw_to_schema5, which moves the records back and marks the store schema 5; it does
 *     nothing to an older store. tu_raw_downgrade calls it.
 * A test that opens LMDB itself finds a record with tu_raw_schema_txn and tu_raw_where.
 */
#ifndef CAIRN_TESTS_RAWLMDB_H
#define CAIRN_TESTS_RAWLMDB_H

#include <ftw.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/store.h"
#include "common/xxh.h"

static int tu__rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes a directory tree (best effort). */
static inline void tu_rmtree(const char *dir) { nftw(dir, tu__rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A fresh scratch directory under $TMPDIR (or /tmp), written to `out`. */
static inline void tu_tmpdir(char out[256], const char *tag)
{
    const char *base = getenv("TMPDIR");
    snprintf(out, 256, "%s/cairn-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(out)) {
        perror("mkdtemp");
        exit(2);
    }
}

/* A new directory path (not created) under root: root/tagN, N counting up in this program. */
static inline void tu_subdir(char out[300], const char *root, const char *tag)
{
    static int n;
    snprintf(out, 300, "%s/%s%d", root, tag, ++n);
}

/* Opens (creating if need be) the store at dir with durability d (asked only for a nosync
 * store: a sync one takes the store's own) and map_max (0: the default); NULL with the reason
 * on stderr. */
static inline cairn_store *tu_store_open(const char *dir, cairn_durability d, uint64_t map_max)
{
    cairn_store *s = cairn_store_new();
    if (d == CAIRN_NOSYNC)
        cairn_store_set_durability(s, CAIRN_NOSYNC);
    if (map_max)
        cairn_store_set_map_max(s, map_max);
    int rc = cairn_store_open(s, dir);
    if (rc) {
        fprintf(stderr, "# open %s: %s: %s\n", dir, cairn_errname(rc), cairn_store_errmsg(s));
        cairn_store_free(s);
        return NULL;
    }
    return s;
}

static const char *const tu_dbs[] = {"meta",   "tasks",   "steps",    "progress", "idem",
                                     "due",    "tenants", "finished", "audit",    "msgs",
                                     "inputs", "msgtime", "tails"};
#define TU_NDBS (sizeof tu_dbs / sizeof *tu_dbs)

/* Schema 5's databases that schema 6 folded into tasks, and the kind byte of their records. */
static const char *const tu__moved[] = {"inputs", "steps", "audit", "tails", "idem"};
static const char tu__kinds[] = "isath";
#define TU__NMOVED (sizeof tu__moved / sizeof *tu__moved)

/* The kind byte schema 6 gives the records of schema 5's database db (0: db is not one of
 * those it folded into tasks). */
static inline int tu__kind(const char *db)
{
    for (size_t i = 0; i < TU__NMOVED; i++)
        if (strcmp(db, tu__moved[i]) == 0)
            return tu__kinds[i];
    return 0;
}

/* The schema-5 database of the records of a kind byte (NULL: no kind). */
static inline const char *tu__kind_db(int kind)
{
    for (size_t i = 0; i < TU__NMOVED; i++)
        if (kind == tu__kinds[i])
            return tu__moved[i];
    return NULL;
}

/* tu_dbs' index of a database name (that of tasks for a name not there). */
static inline size_t tu__db_index(const char *db)
{
    for (size_t i = 0; i < TU_NDBS; i++)
        if (strcmp(db, tu_dbs[i]) == 0)
            return i;
    return 1;
}

/* The store's schema as its meta "schema" record says, read in txn (0: no such record). */
static inline uint32_t tu_raw_schema_txn(MDB_txn *txn)
{
    MDB_dbi dbi;
    MDB_val k = {6, "schema"}, v;
    if (mdb_dbi_open(txn, "meta", 0, &dbi) || mdb_get(txn, dbi, &k, &v) || v.mv_size < 4)
        return 0;
    const unsigned char *p = v.mv_data;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define TU_KEY_MAX 520 /* LMDB's longest key (511 bytes) and room for a kind byte */

/* Where a record lives: its database and its key there. */
typedef struct tu_rawkey {
    const char *db;
    size_t n;
    unsigned char k[TU_KEY_MAX];
} tu_rawkey;

/* Where the record that schema 5 keeps in db under key k is in a store of `schema`: in a store
 * of schema 6 or later, a record of inputs, steps, progress, audit or tails is in tasks, its key
 * the ID, a NUL, the kind byte and the rest of k after the ID's NUL (inputs, whose key is the
 * ID: ID \0 i); any other, and any record of an older store, is in db under k. 0, or -1 when
 * the key is too long. */
static inline int tu_raw_where(uint32_t schema, const char *db, const void *k, size_t klen,
                               tu_rawkey *out)
{
    const int kind = schema >= 6 ? tu__kind(db) : 0;
    if (klen + 2 > sizeof out->k)
        return -1;
    if (!kind) {
        out->db = db;
        memcpy(out->k, k, klen);
        out->n = klen;
        return 0;
    }
    const unsigned char *p = k, *z = memchr(p, 0, klen);
    const size_t id = z ? (size_t)(z - p) : klen, rest = z ? klen - id - 1 : 0;
    out->db = "tasks";
    memcpy(out->k, p, id);
    out->k[id] = 0;
    out->k[id + 1] = (unsigned char)kind;
    if (rest)
        memcpy(out->k + id + 2, p + id + 1, rest);
    out->n = id + 2 + rest;
    return 0;
}

/* The other way: the schema-5 database a key k of schema 6's tasks belongs in ("tasks" for a
 * task record, whose key has no NUL; NULL for a key that is no record of a task's), and, if out
 * is given (room for klen bytes), its key there into out and *outn. */
static inline const char *tu_raw_home5(const void *k, size_t klen, unsigned char *out, size_t *outn)
{
    const unsigned char *p = k, *z = memchr(p, 0, klen);
    const size_t id = z ? (size_t)(z - p) : klen;
    const char *db = !z ? "tasks" : id + 1 < klen ? tu__kind_db(p[id + 1]) : NULL;
    if (!db || !out)
        return db;
    if (!z || ((p[id + 1] == 'i' || p[id + 1] == 'h') && klen == id + 2)) {
        memcpy(out, p, id); /* the ID: a task record's key, an input's, a reservation's */
        *outn = id;
    } else {
        memcpy(out, p, id + 1);
        memcpy(out + id + 1, p + id + 2, klen - id - 2);
        *outn = klen - 1;
    }
    return db;
}

/* Opens the store directory as a plain LMDB environment. */
static inline MDB_env *tu_raw_open(const char *dir)
{
    MDB_env *env = NULL;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 16) ||
        mdb_env_set_mapsize(env, (size_t)1 << 30) ||
        mdb_env_open(env, dir, MDB_NOSYNC | MDB_NOTLS, 0600)) {
        fprintf(stderr, "raw open of %s failed\n", dir);
        if (env)
            mdb_env_close(env);
        return NULL;
    }
    return env;
}

/* The store's schema (tu_raw_schema_txn) in a read transaction of its own: 0 when there is no
 * store or no schema record. */
static inline uint32_t tu_raw_schema(const char *dir)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    uint32_t v = 0;
    if (env && mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0) {
        v = tu_raw_schema_txn(txn);
        mdb_txn_abort(txn);
    }
    if (env)
        mdb_env_close(env);
    return v;
}

/* The checksum a record of database db, key k and value v carries (checkpoint/checksum.c). */
static inline void tu_sum(const char *db, const void *k, size_t klen, const void *v, size_t vlen,
                          unsigned char out[8])
{
    uint64_t h =
        XXH3_64bits_withSeed(v, vlen, XXH3_64bits_withSeed(k, klen, XXH3_64bits(db, strlen(db))));
    for (int i = 0; i < 8; i++, h >>= 8)
        out[i] = (unsigned char)h;
}

/* 1 if the value v (n bytes) of db's key k ends in its checksum. */
static inline int tu__sealed(const char *db, const void *k, size_t klen, const unsigned char *v,
                             size_t n)
{
    unsigned char sum[8];
    if (n < 8)
        return 0;
    tu_sum(db, k, klen, v, n - 8, sum);
    return memcmp(sum, v + n - 8, 8) == 0;
}

/* Deletes, from schema 6's tasks (dbi), every record of schema-5 database db's kind. */
static inline int tu__drop_kind(MDB_txn *txn, MDB_dbi dbi, const char *db)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, dbi, &c), r;
    if (rc)
        return rc;
    for (r = mdb_cursor_get(c, &k, &v, MDB_FIRST); r == 0 && !rc;
         r = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const char *home = tu_raw_home5(k.mv_data, k.mv_size, NULL, NULL);
        if (home && strcmp(home, db) == 0)
            rc = mdb_cursor_del(c, 0); /* the cursor is then at the next record */
    }
    mdb_cursor_close(c);
    return rc ? rc : r == MDB_NOTFOUND ? 0 : r;
}

enum { TU__BARE, TU__SEAL, TU__DROP };

/* In one raw write transaction, committed if it succeeds: puts (v != NULL) or deletes the
 * record that schema 5 keeps in db under k - the value as given (TU__BARE) or followed by its
 * checksum (TU__SEAL) - or (TU__DROP) deletes database db; translated for the store's schema
 * (tu_raw_where). 0 or an LMDB code (-1: no environment, no memory, a key too long). */
static inline int tu__raw_write(const char *dir, const char *db, const void *k, size_t klen,
                                const void *v, size_t vlen, int how)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    if (!env)
        return -1;
    int rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc) {
        mdb_env_close(env);
        return rc;
    }
    const uint32_t schema = tu_raw_schema_txn(txn);
    tu_rawkey rk;
    if (how == TU__DROP) {
        const int kind = schema >= 6 ? tu__kind(db) : 0;
        if (!(rc = mdb_dbi_open(txn, kind ? "tasks" : db, 0, &dbi)))
            rc = kind ? tu__drop_kind(txn, dbi, db) : mdb_drop(txn, dbi, 1);
    } else if (tu_raw_where(schema, db, k, klen, &rk)) {
        rc = -1;
    } else if (!(rc = mdb_dbi_open(txn, rk.db, 0, &dbi))) {
        MDB_val kk = {rk.n, rk.k}, vv = {vlen, (void *)v};
        unsigned char *b = NULL;
        if (v && how == TU__SEAL && (b = malloc(vlen + 8)) != NULL) {
            if (vlen)
                memcpy(b, v, vlen);
            tu_sum(rk.db, rk.k, rk.n, v, vlen, b + vlen);
            vv = (MDB_val){vlen + 8, b};
        }
        if (v && how == TU__SEAL && !b)
            rc = -1;
        else
            rc = v ? mdb_put(txn, dbi, &kk, &vv, 0) : mdb_del(txn, dbi, &kk, NULL);
        free(b);
    }
    rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc;
}

/* Puts (val != NULL) or deletes one key of a named db, the value as given. 0 or an LMDB code. */
static inline int tu_raw_put_bare(const char *dir, const char *db, const void *k, size_t klen,
                                  const void *v, size_t vlen)
{
    return tu__raw_write(dir, db, k, klen, v, vlen, TU__BARE);
}

/* Deletes database db from the store's file (as a store of an older schema lacks one); in a
 * schema-6 store, for inputs, steps, idem, audit or tails, every record of that kind from
 * tasks instead (tails: every tail of a split step record). */
static inline int tu_raw_drop(const char *dir, const char *db)
{
    return tu__raw_write(dir, db, NULL, 0, NULL, 0, TU__DROP);
}

/* As tu_raw_put_bare, the value followed by its checksum (for the database and key the record
 * is written under: tasks and its schema-6 key in a schema-6 store). */
static inline int tu_raw_put(const char *dir, const char *db, const void *k, size_t klen,
                             const void *v, size_t vlen)
{
    return tu__raw_write(dir, db, k, klen, v, vlen, TU__SEAL);
}

/* One record of schema 6's tasks that is a task's own, copied out of its page. */
typedef struct tu__rec {
    unsigned char *k, *v;
    size_t kn, vn;
} tu__rec;

/* LMDB's default order of keys: bytes, then the shorter first. */
static inline int tu__key_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

/* The record of recs (n of them, in key order) under r's key with its kind byte replaced by
 * `kind` (NULL: none). */
static inline const tu__rec *tu__partner(const tu__rec *recs, size_t n, const tu__rec *r, int kind)
{
    unsigned char k[TU_KEY_MAX];
    const unsigned char *z = memchr(r->k, 0, r->kn);
    if (!z || r->kn > sizeof k)
        return NULL;
    memcpy(k, r->k, r->kn);
    k[z - r->k + 1] = (unsigned char)kind;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = tu__key_cmp(recs[mid].k, recs[mid].kn, k, r->kn);
        if (c == 0)
            return &recs[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The bytes of head h and then tail t, in a new buffer (NULL: no memory). */
static inline unsigned char *tu__join(const tu__rec *h, const tu__rec *t)
{
    unsigned char *b = malloc(h->vn + t->vn + 1);
    if (b) {
        memcpy(b, h->v, h->vn);
        memcpy(b + h->vn, t->v, t->vn);
    }
    return b;
}

/* 1 if head h (an `s` record) and tail t (its `t` record, NULL: none) are one split record:
 * h does not verify on its own, and the two verify together (seed "tasks", h's key). */
static inline int tu__split(const tu__rec *h, const tu__rec *t)
{
    if (!h || !t || tu__sealed("tasks", h->k, h->kn, h->v, h->vn))
        return 0;
    unsigned char *b = tu__join(h, t);
    int ok = b && tu__sealed("tasks", h->k, h->kn, b, h->vn + t->vn);
    free(b);
    return ok;
}

/* Puts the schema-5 form of schema 6's record r (one of recs, n of them) into the database it
 * belongs in (dbi: the handles of tu__moved's databases): under its schema-5 key, its checksum
 * recomputed for that database and key if it verified; a split step record's head as it is, and
 * its tail with the checksum over the whole record (seed "steps", the schema-5 key). A record
 * that does not verify is moved as it is: it stays damaged. */
static inline int tu__move5(MDB_txn *txn, const MDB_dbi dbi[TU__NMOVED], const tu__rec *recs,
                            size_t n, const tu__rec *r)
{
    unsigned char k5[TU_KEY_MAX];
    size_t k5n = 0;
    const char *db = tu_raw_home5(r->k, r->kn, k5, &k5n);
    const int kind = tu__kind(db);
    unsigned char *b = malloc(r->vn + 1);
    if (!b)
        return -1;
    memcpy(b, r->v, r->vn);
    const tu__rec *h = kind == 't' ? tu__partner(recs, n, r, 's') : NULL;
    if (tu__sealed("tasks", r->k, r->kn, r->v, r->vn)) {
        tu_sum(db, k5, k5n, r->v, r->vn - 8, b + r->vn - 8);
    } else if (h && tu__split(h, r)) {
        unsigned char *whole = tu__join(h, r);
        if (!whole) {
            free(b);
            return -1;
        }
        tu_sum("steps", k5, k5n, whole, h->vn + r->vn - 8, b + r->vn - 8);
        free(whole);
    } /* else a split record's head (no checksum of its own), or a damaged record: as it is */
    size_t at = 0;
    while (at < TU__NMOVED && tu__kinds[at] != kind)
        at++;
    MDB_val kk = {k5n, k5}, vv = {r->vn, b};
    int rc = mdb_put(txn, dbi[at], &kk, &vv, 0);
    free(b);
    return rc;
}

/* The part of tu_raw_to_schema5 inside its write transaction. */
static inline int tu__to_schema5(MDB_txn *txn)
{
    MDB_dbi tasks, meta, dbi[TU__NMOVED];
    MDB_cursor *c;
    MDB_val k, v;
    tu__rec *recs = NULL;
    size_t n = 0, cap = 0;
    int rc = mdb_dbi_open(txn, "tasks", 0, &tasks);
    rc = rc ? rc : mdb_dbi_open(txn, "meta", 0, &meta);
    for (size_t i = 0; !rc && i < TU__NMOVED; i++)
        rc = mdb_dbi_open(txn, tu__moved[i], MDB_CREATE, &dbi[i]);
    /* a task's own records, copied: the moves below rewrite the pages they are in */
    rc = rc ? rc : mdb_cursor_open(txn, tasks, &c);
    if (rc)
        return rc;
    for (int r = mdb_cursor_get(c, &k, &v, MDB_FIRST); r == 0 && !rc;
         r = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const char *home = tu_raw_home5(k.mv_data, k.mv_size, NULL, NULL);
        if (!home || strcmp(home, "tasks") == 0)
            continue; /* a task record, or a key that is no record of a task's: it stays */
        tu__rec *grown = n < cap ? recs : realloc(recs, (cap = cap ? 2 * cap : 64) * sizeof *recs);
        if (!grown) {
            rc = -1;
            break;
        }
        recs = grown;
        tu__rec *e = &recs[n];
        e->kn = k.mv_size, e->vn = v.mv_size;
        e->k = malloc(k.mv_size + 1), e->v = malloc(v.mv_size + 1);
        if (!e->k || !e->v) {
            free(e->k), free(e->v);
            rc = -1;
            break;
        }
        memcpy(e->k, k.mv_data, k.mv_size);
        memcpy(e->v, v.mv_data, v.mv_size);
        n++;
    }
    mdb_cursor_close(c);
    for (size_t i = 0; !rc && i < n; i++)
        rc = tu__move5(txn, dbi, recs, n, &recs[i]);
    for (size_t i = 0; !rc && i < n; i++) {
        MDB_val kk = {recs[i].kn, recs[i].k};
        rc = mdb_del(txn, tasks, &kk, NULL);
    }
    for (size_t i = 0; i < n; i++)
        free(recs[i].k), free(recs[i].v);
    free(recs);

    /* the counts record as schema 5's: tasks by state, tombstones */
    const size_t c5 = (CAIRN_STATE_COUNT + 1) * 8;
    unsigned char b[(CAIRN_STATE_COUNT + 1) * 8 + 8];
    MDB_val ck = {6, "counts"}, cv;
    int got = rc ? rc : mdb_get(txn, meta, &ck, &cv);
    if (got == 0 && cv.mv_size >= c5) {
        memcpy(b, cv.mv_data, c5);
        tu_sum("meta", "counts", 6, b, c5, b + c5);
        cv = (MDB_val){c5 + 8, b};
        rc = mdb_put(txn, meta, &ck, &cv, 0);
    } else if (got && got != MDB_NOTFOUND) {
        rc = got; /* none, or one shorter than schema 5's: left as it is */
    }
    if (!rc) {
        MDB_val sk = {6, "schema"}, sv = {12, b};
        memcpy(b, "\5\0\0\0", 4);
        tu_sum("meta", "schema", 6, b, 4, b + 4);
        rc = mdb_put(txn, meta, &sk, &sv, 0);
    }
    return rc;
}

/* Makes a store of schema 6 (or later) exactly what schema 5 wrote: the databases inputs, steps,
 * progress, audit and tails created, each of a task's own records moved from tasks into its
 * database under its schema-5 key (tu_raw_home5), sealed for that database and key (a split step
 * record: the head as it is in steps, the tail in tails ending in the checksum over the whole
 * record, seed "steps"; a record that did not verify moves as it is), the counts record cut to
 * schema 5's (CAIRN_STATE_COUNT + 1 counts) and sealed again, the schema record 5, sealed. A
 * store of an older schema is left as it is. 0 or an LMDB code (-1: no environment, no
 * memory). */
static inline int tu_raw_to_schema5(const char *dir)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    if (!env)
        return -1;
    int rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc) {
        if (tu_raw_schema_txn(txn) < 6)
            mdb_txn_abort(txn);
        else
            rc = (rc = tu__to_schema5(txn)) ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    }
    mdb_env_close(env);
    return rc;
}

/* Makes a store what a schema-`schema` (1 or 2) cairn wrote: every record without its checksum,
 * the schema record bare (a store of schema 6 first laid out as schema 5's, tu_raw_to_schema5).
 * 0 or an LMDB code. */
static inline int tu_raw_downgrade(const char *dir, uint32_t schema)
{
    int rc = tu_raw_to_schema5(dir);
    if (rc)
        return rc;
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    if (!env)
        return -1;
    static const char *const all[] = {"meta",     "tasks", "inputs", "steps",
                                      "progress", "idem",  "due",    "tenants",
                                      "finished", "audit", "msgs",   "msgtime"};
    rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc) {
        mdb_env_close(env);
        return rc;
    }
    for (size_t i = 0; !rc && i < sizeof all / sizeof *all; i++) {
        MDB_dbi dbi;
        MDB_cursor *c;
        MDB_val k, v;
        if ((rc = mdb_dbi_open(txn, all[i], 0, &dbi)) || (rc = mdb_cursor_open(txn, dbi, &c)))
            break;
        for (int r = mdb_cursor_get(c, &k, &v, MDB_FIRST); r == 0 && !rc;
             r = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            unsigned char *b = malloc(k.mv_size + v.mv_size + 1);
            memcpy(b, k.mv_data, k.mv_size);
            memcpy(b + k.mv_size, v.mv_data, v.mv_size);
            MDB_val kk = {k.mv_size, b}, vv = {v.mv_size >= 8 ? v.mv_size - 8 : 0, b + k.mv_size};
            if (i == 0 && k.mv_size == 6 && memcmp(b, "schema", 6) == 0)
                vv = (MDB_val){sizeof schema, &schema};
            rc = mdb_cursor_put(c, &kk, &vv, MDB_CURRENT);
            free(b);
        }
        mdb_cursor_close(c);
    }
    rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc;
}

/* Copies the value of the record that schema 5 keeps in db under k (translated, tu_raw_where)
 * into buf (at most cap bytes), without its checksum if it ends in a valid one; returns its size
 * or -1. */
static inline long tu_raw_get(const char *dir, const char *db, const void *k, size_t klen,
                              void *buf, size_t cap)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    long n = -1;
    if (!env)
        return -1;
    if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0) {
        tu_rawkey rk;
        MDB_val kk, vv;
        if (tu_raw_where(tu_raw_schema_txn(txn), db, k, klen, &rk) == 0 &&
            mdb_dbi_open(txn, rk.db, 0, &dbi) == 0 &&
            (kk = (MDB_val){rk.n, rk.k}, mdb_get(txn, dbi, &kk, &vv) == 0)) {
            if (tu__sealed(rk.db, rk.k, rk.n, vv.mv_data, vv.mv_size))
                vv.mv_size -= 8; /* its checksum is not the record's */
            n = (long)vv.mv_size;
            memcpy(buf, vv.mv_data, vv.mv_size < cap ? vv.mv_size : cap);
        }
        mdb_txn_abort(txn);
    }
    mdb_env_close(env);
    return n;
}

/* Adds delta to count i of the meta "counts" record (u64 LE each: tasks by state, tombstones;
 * schema 6: then step records, audit records), sealed again: for a plant that removes or adds
 * records and must leave the counts true. 0, -1 when the record has no count i, or an LMDB
 * code. */
static inline int tu_raw_counts_add(const char *dir, size_t i, int64_t delta)
{
    unsigned char c[(CAIRN_STATE_COUNT + 8) * 8];
    long n = tu_raw_get(dir, "meta", "counts", 6, c, sizeof c);
    if (n < 0 || (size_t)n >= sizeof c || (size_t)n < (i + 1) * 8)
        return -1;
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | c[i * 8 + (size_t)b];
    v += (uint64_t)delta;
    for (int b = 0; b < 8; b++, v >>= 8)
        c[i * 8 + (size_t)b] = (unsigned char)v;
    return tu_raw_put(dir, "meta", "counts", 6, c, (size_t)n);
}

typedef struct tu_dump {
    uint64_t hash;
    uint64_t entries[TU_NDBS]; /* the records of tu_dbs[i], in either layout */
} tu_dump;

/* A digest of every key and value of every database (FNV-1a over lengths and bytes), and how
 * many records each schema-5 database holds (in a schema-6 store, tasks' records counted by
 * kind). */
static inline int tu_raw_dump(const char *dir, tu_dump *d)
{
    memset(d, 0, sizeof *d);
    d->hash = 1469598103934665603ull;
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    if (!env)
        return -1;
    int rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        mdb_env_close(env);
        return rc;
    }
    const int by_kind = tu_raw_schema_txn(txn) >= 6;
    for (size_t i = 0; !rc && i < TU_NDBS; i++) {
        MDB_dbi dbi;
        MDB_cursor *c;
        MDB_val k, v;
        if ((rc = mdb_dbi_open(txn, tu_dbs[i], 0, &dbi)) == MDB_NOTFOUND) {
            rc = 0; /* a database an older schema lacks, or schema 6 retired: empty */
            continue;
        }
        if (rc || (rc = mdb_cursor_open(txn, dbi, &c)))
            break;
        const int split = by_kind && strcmp(tu_dbs[i], "tasks") == 0;
        for (int r = mdb_cursor_get(c, &k, &v, MDB_FIRST); r == 0;
             r = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            const MDB_val *parts[2] = {&k, &v};
            for (int p = 0; p < 2; p++) {
                uint64_t len = parts[p]->mv_size;
                for (int b = 0; b < 8; b++)
                    d->hash = (d->hash ^ ((len >> (8 * b)) & 0xff)) * 1099511628211ull;
                for (size_t b = 0; b < parts[p]->mv_size; b++)
                    d->hash =
                        (d->hash ^ ((unsigned char *)parts[p]->mv_data)[b]) * 1099511628211ull;
            }
            const char *home = split ? tu_raw_home5(k.mv_data, k.mv_size, NULL, NULL) : NULL;
            d->entries[home ? tu__db_index(home) : i]++;
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

static inline int tu_dump_eq(const tu_dump *a, const tu_dump *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

/* Reading one task record back through the store (a read transaction). */
typedef struct {
    const char *id;
    int rc;
    cairn__task_rec rec;
} tu__task_arg;

/* A step output: a msgpack bin32 of n bytes in all (n >= 5), its payload a pattern of `seed`
 * (malloc'ed: the caller frees it). */
static inline unsigned char *tu_make_output(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n);
    if (!p)
        return NULL;
    size_t len = n - 5;
    p[0] = 0xc6;
    p[1] = (unsigned char)(len >> 24), p[2] = (unsigned char)(len >> 16);
    p[3] = (unsigned char)(len >> 8), p[4] = (unsigned char)len;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 5; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return p;
}

static inline int tu__task_txn(cairn__txn *t, void *arg)
{
    tu__task_arg *a = arg;
    a->rc = cairn__task_get(t, a->id, &a->rec);
    return 0;
}

/* Task id's record into *rec (zeroed when there is none): 0, cairn__task_get's code
 * (CAIRN_ENOTFOUND, CAIRN_ESCHEMA, ...), or the read's own error. */
static inline int tu_task_get(cairn_store *s, const char *id, cairn__task_rec *rec)
{
    tu__task_arg a = {.id = id, .rc = -1};
    const int rc = cairn__store_read(s, tu__task_txn, &a);
    *rec = rc == 0 && a.rc == 0 ? a.rec : (cairn__task_rec){0};
    return rc ? rc : a.rc;
}

#endif
