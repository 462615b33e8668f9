/* rawlmdb.h - helpers shared by the engine unit tests (scratch directories, raw LMDB access).
 *
 * Raw LMDB access exists so tests can reach under the store's API: bump the schema, plant a
 * corrupt record, take a dump to prove a failed write changed nothing. LMDB forbids opening one
 * environment twice in a process, so the store must be closed while a raw env is open.
 * Every record of a schema-3 store ends in its checksum (checkpoint/checksum.c: XXH3-64 of the
 * value seeded with that of the key, seeded with that of the database name; 8 bytes LE): tu_raw_put
 * writes one, so that a planted record reaches the decoder behind it; tu_raw_put_bare writes the
 * bytes as given.
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

/* The checksum a record of database db, key k and value v carries (checkpoint/checksum.c). */
static inline void tu_sum(const char *db, const void *k, size_t klen, const void *v, size_t vlen,
                          unsigned char out[8])
{
    uint64_t h =
        XXH3_64bits_withSeed(v, vlen, XXH3_64bits_withSeed(k, klen, XXH3_64bits(db, strlen(db))));
    for (int i = 0; i < 8; i++, h >>= 8)
        out[i] = (unsigned char)h;
}

/* Runs op on one named db in a raw write transaction, committed if op returns 0. */
static inline int tu__raw_write(const char *dir, const char *db,
                                int (*op)(MDB_txn *, MDB_dbi, void *), void *arg)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    MDB_dbi dbi;
    if (!env)
        return -1;
    int rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc && !(rc = mdb_dbi_open(txn, db, 0, &dbi)))
        rc = op(txn, dbi, arg);
    rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    mdb_env_close(env);
    return rc;
}

typedef struct tu__kv {
    MDB_val k, v;
    int del;
} tu__kv;

static inline int tu__put_op(MDB_txn *txn, MDB_dbi dbi, void *arg)
{
    tu__kv *a = arg;
    return a->del ? mdb_del(txn, dbi, &a->k, NULL) : mdb_put(txn, dbi, &a->k, &a->v, 0);
}

static inline int tu__drop_op(MDB_txn *txn, MDB_dbi dbi, void *arg)
{
    (void)arg;
    return mdb_drop(txn, dbi, 1);
}

/* Puts (val != NULL) or deletes one key of a named db, the value as given. 0 or an LMDB code. */
static inline int tu_raw_put_bare(const char *dir, const char *db, const void *k, size_t klen,
                                  const void *v, size_t vlen)
{
    tu__kv a = {{klen, (void *)k}, {vlen, (void *)v}, v == NULL};
    return tu__raw_write(dir, db, tu__put_op, &a);
}

/* Deletes database db from the store's file (as a store of an older schema lacks one). */
static inline int tu_raw_drop(const char *dir, const char *db)
{
    return tu__raw_write(dir, db, tu__drop_op, NULL);
}

/* As tu_raw_put_bare, the value followed by its checksum. */
static inline int tu_raw_put(const char *dir, const char *db, const void *k, size_t klen,
                             const void *v, size_t vlen)
{
    if (!v)
        return tu_raw_put_bare(dir, db, k, klen, NULL, 0);
    unsigned char *b = malloc(vlen + 8);
    if (!b)
        return -1;
    memcpy(b, v, vlen);
    tu_sum(db, k, klen, v, vlen, b + vlen);
    int rc = tu_raw_put_bare(dir, db, k, klen, b, vlen + 8);
    free(b);
    return rc;
}

/* Makes a schema-3 store what a schema-`schema` (1 or 2) cairn wrote: every record without its
 * checksum, the schema record bare. 0 or an LMDB code. */
static inline int tu_raw_downgrade(const char *dir, uint32_t schema)
{
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    if (!env)
        return -1;
    static const char *const all[] = {"meta",     "tasks", "inputs", "steps",
                                      "progress", "idem",  "due",    "tenants",
                                      "finished", "audit", "msgs",   "msgtime"};
    int rc = mdb_txn_begin(env, NULL, 0, &txn);
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

/* Copies the value of one key into buf (at most cap bytes), without a valid checksum;
 * returns its size or -1. */
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
        MDB_val kk = {klen, (void *)k}, vv;
        if (mdb_dbi_open(txn, db, 0, &dbi) == 0 && mdb_get(txn, dbi, &kk, &vv) == 0) {
            unsigned char sum[8];
            if (vv.mv_size >= 8) {
                tu_sum(db, k, klen, vv.mv_data, vv.mv_size - 8, sum);
                if (memcmp(sum, (unsigned char *)vv.mv_data + vv.mv_size - 8, 8) == 0)
                    vv.mv_size -= 8; /* its checksum is not the record's */
            }
            n = (long)vv.mv_size;
            memcpy(buf, vv.mv_data, vv.mv_size < cap ? vv.mv_size : cap);
        }
        mdb_txn_abort(txn);
    }
    mdb_env_close(env);
    return n;
}

typedef struct tu_dump {
    uint64_t hash;
    uint64_t entries[TU_NDBS];
} tu_dump;

/* A digest of every key and value of every database (FNV-1a over lengths and bytes). */
static inline int tu_raw_dump(const char *dir, tu_dump *d)
{
    memset(d, 0, sizeof *d);
    d->hash = 1469598103934665603ull;
    MDB_env *env = tu_raw_open(dir);
    MDB_txn *txn;
    if (!env)
        return -1;
    int rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    for (size_t i = 0; !rc && i < TU_NDBS; i++) {
        MDB_dbi dbi;
        MDB_cursor *c;
        MDB_val k, v;
        if ((rc = mdb_dbi_open(txn, tu_dbs[i], 0, &dbi)) == MDB_NOTFOUND) {
            rc = 0; /* a database an older schema lacks: empty */
            continue;
        }
        if (rc || (rc = mdb_cursor_open(txn, dbi, &c)))
            break;
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
            d->entries[i]++;
        }
        mdb_cursor_close(c);
    }
    if (!rc)
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
