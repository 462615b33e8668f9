/* checkpoint/checksum.c - every record of the store carries a checksum, verified on every read.
 *
 * LMDB checks no page: a flipped byte in data.mdb is served as it is (a changed payload hash,
 * "input": null, a step key `work` read as `vork`, so that the step looks never run). So every
 * value the store writes ends in 8 bytes, XXH3-64 over the database's name, the key and the value
 * (each hash seeds the next), little-endian; index entries, whose values are empty, carry it too.
 * The three functions below are the only way the store's files read and write records (records.c,
 * index.c, store.c, map.c); mdb_get, mdb_put and mdb_cursor_get appear nowhere else.
 *
 * A record that fails is CAIRN_ECORRUPT, naming the database, the task and the record; it is
 * never served and never treated as absent. Absence needs care too: a lookup that misses may
 * have missed because the record's key was damaged (it is still in its page, under another
 * key), or because a branch page's separator sends the search to a neighbouring leaf. So a miss
 * is believed only once the records on both sides of where the key would be verify and sort
 * around it: a binary search over a page with one damaged key ends next to that key, whichever
 * way the damage compares; and a search misled to the right of its key finds, just before where
 * it landed, a record not smaller than the key. The same holds for the first record of a range
 * scan (MDB_SET_RANGE). What no neighbour shows - a damaged page header that hides a page's last
 * records - the task record's step count catches for step records (records.c), and `cairn check`
 * for everything (index.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/store_impl.h"
#include "common/xxh.h"

#define SUM 8 /* bytes of checksum after each value */

/* Seeded with the database's name, then the key: a record read through another database's
 * root (damage to LMDB's directory sends a database to another's pages) fails like any other. */
static uint64_t sum_of(cairn_store *s, MDB_dbi dbi, const MDB_val *k, const void *v, size_t n)
{
    uint64_t seed = XXH3_64bits_withSeed(k->mv_data, k->mv_size, cairn__db_seed(s, dbi));
    return XXH3_64bits_withSeed(v, n, seed);
}

static void sum_put(unsigned char *p, uint64_t h)
{
    for (int i = 0; i < SUM; i++, h >>= 8)
        p[i] = (unsigned char)h;
}

static uint64_t sum_read(const unsigned char *p)
{
    uint64_t h = 0;
    for (int i = SUM - 1; i >= 0; i--)
        h = h << 8 | p[i];
    return h;
}

int cairn__sum_ok(cairn_store *s, MDB_dbi dbi, const MDB_val *k, const MDB_val *v)
{
    return v->mv_size >= SUM && sum_read((const unsigned char *)v->mv_data + v->mv_size - SUM) ==
                                    sum_of(s, dbi, k, v->mv_data, v->mv_size - SUM);
}

/* Copies at most n bytes of p into out as printable text ('?' for the rest). */
static void printable(char *out, size_t cap, const unsigned char *p, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < cap; i++)
        out[j++] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'' ? (char)p[i] : '?';
    out[j] = 0;
}

/* "steps record of task 'T' (step 'S', generation G)": what a key names, as far as its bytes
 * can be read (keys are laid out in store.c's design comment). */
void cairn__describe_key(cairn_store *s, MDB_dbi dbi, const MDB_val *k, char *out, size_t cap)
{
    const unsigned char *p = k->mv_data;
    size_t n = k->mv_size, skip = 0;
    const char *db = cairn__db_name(s, dbi);
    char a[CAIRN__ID_MAX + 1] = "", b[CAIRN__NAME_MAX + 1] = "";
    if (dbi == s->meta) {
        printable(a, sizeof a, p, n);
        snprintf(out, cap, "meta record '%s'", a);
        return;
    }
    if (dbi == s->due)
        skip = 9;
    else if (dbi == s->finished || dbi == s->msgtime)
        skip = 8;
    else if (dbi == s->tenants) {
        const unsigned char *z = memchr(p, 0, n);
        skip = z ? (size_t)(z - p) + 1 : n;
    }
    skip = skip < n ? skip : n;
    const unsigned char *id = p + skip, *z = memchr(id, 0, n - skip);
    size_t idn = z ? (size_t)(z - id) : n - skip;
    printable(a, sizeof a, id, idn);
    const char *whose = dbi == s->msgs || dbi == s->msgtime ? "message" : "task";
    if (z && (dbi == s->steps || dbi == s->progress)) {
        const unsigned char *name = z + 1, *e = p + n;
        size_t nn = e - name >= 5 ? (size_t)(e - name) - 5 : 0;
        printable(b, sizeof b, name, nn);
        uint32_t gen = e - name >= 4 ? (uint32_t)e[-4] << 24 | (uint32_t)e[-3] << 16 |
                                           (uint32_t)e[-2] << 8 | e[-1]
                                     : 0;
        snprintf(out, cap, "%s record of task '%s' (step '%s', generation %u)", db, a, b, gen);
    } else if (z && dbi == s->audit && p + n - z == 9) {
        snprintf(out, cap, "audit record #%llu of task '%s'", (unsigned long long)rd_be64(z + 1),
                 a);
    } else {
        snprintf(out, cap, "%s record of %s '%s'", db, whose, a);
    }
}

size_t cairn__sum_len(size_t value_len) { return value_len + SUM; }

static int damaged_s(cairn_store *s, MDB_dbi dbi, const MDB_val *k, const char *why)
{
    char what[400];
    cairn__describe_key(s, dbi, k, what, sizeof what);
    return cairn__store_fail(s, CAIRN_ECORRUPT,
                             "store %s: the %s %s: the store is damaged (run `cairn check`)",
                             s->dir, what, why);
}

int cairn__sum_check(cairn_store *s, MDB_dbi dbi, const MDB_val *k, MDB_val *v)
{
    if (!cairn__sum_ok(s, dbi, k, v))
        return damaged_s(s, dbi, k, "fails its checksum");
    v->mv_size -= SUM;
    return 0;
}

static int damaged(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, const char *why)
{
    return damaged_s(t->s, dbi, k, why);
}

/* Verifies a record read from dbi and takes its checksum off v. */
static int unseal(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, MDB_val *v)
{
    return cairn__sum_check(t->s, dbi, k, v);
}

int cairn__put(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v, unsigned flags)
{
    return cairn__put2(t, dbi, k, v, NULL, 0, flags);
}

/* The value is v's bytes then tail's, each copied once, straight into the space LMDB reserves
 * (a step's output goes there from the step's buffer, not through the record's encoding). */
int cairn__put2(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v, const void *tail,
                size_t tail_len, unsigned flags)
{
    size_t n = v->mv_size + tail_len;
    MDB_val r = {n + SUM, NULL};
    int rc = mdb_put(t->txn, dbi, k, &r, flags | MDB_RESERVE);
    t->wrote |= rc != MDB_KEYEXIST;
    if (rc == MDB_KEYEXIST) { /* MDB_NOOVERWRITE: r is the record there */
        *v = r;
        return unseal(t, dbi, k, v) ? CAIRN_ECORRUPT : MDB_KEYEXIST;
    }
    if (rc)
        return rc;
    unsigned char *p = r.mv_data;
    if (v->mv_size)
        memcpy(p, v->mv_data, v->mv_size);
    if (tail_len)
        memcpy(p + v->mv_size, tail, tail_len);
    sum_put(p + n, sum_of(t->s, dbi, k, p, n));
    cairn__journal_note_put(t, dbi, k, &r);
    return 0;
}

/* rc of a cursor positioned (or not: MDB_NOTFOUND) at the first key >= want: the record there,
 * and the one before it, must verify, and that one must sort before want. The cursor is left
 * where the search put it (at the last record when there was none >= want). */
static int check_around(cairn__txn *t, MDB_cursor *c, const MDB_val *want, int rc)
{
    MDB_dbi dbi = mdb_cursor_dbi(c);
    MDB_val k, v;
    if (rc == 0) {
        if ((rc = mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT)) || (rc = unseal(t, dbi, &k, &v)))
            return rc;
        rc = mdb_cursor_get(c, &k, &v, MDB_PREV);
    } else if (rc == MDB_NOTFOUND) {
        rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
        if (rc == MDB_NOTFOUND)
            return 0; /* an empty database */
        if (rc == 0 && (rc = unseal(t, dbi, &k, &v)) == 0 && mdb_cmp(t->txn, dbi, &k, want) >= 0)
            return damaged(t, dbi, &k, "is out of order (a search missed it)");
        return rc;
    } else {
        return rc;
    }
    if (rc == MDB_NOTFOUND) { /* the first record: a PREV there leaves no position */
        MDB_val w = *want;
        rc = mdb_cursor_get(c, &w, &v, MDB_SET_RANGE);
        return rc == MDB_NOTFOUND ? 0 : rc;
    }
    if (rc)
        return rc;
    if ((rc = unseal(t, dbi, &k, &v)))
        return rc;
    if (mdb_cmp(t->txn, dbi, &k, want) >= 0)
        return damaged(t, dbi, &k, "is out of order (a search missed it)");
    return mdb_cursor_get(c, &k, &v, MDB_NEXT); /* back to where the search landed */
}

int cairn__cursor_get(cairn__txn *t, MDB_cursor *c, MDB_val *k, MDB_val *v, MDB_cursor_op op)
{
    MDB_val want = op == MDB_SET_RANGE ? *k : (MDB_val){0, NULL};
    int rc = mdb_cursor_get(c, k, v, op);
    if (op == MDB_SET_RANGE) {
        int crc = check_around(t, c, &want, rc);
        if (crc)
            return crc;
        if (rc == 0 && (rc = mdb_cursor_get(c, k, v, MDB_GET_CURRENT)))
            return rc;
    }
    return rc ? rc : unseal(t, mdb_cursor_dbi(c), k, v);
}

int cairn__get(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v)
{
    int rc = mdb_get(t->txn, dbi, k, v);
    if (rc == 0)
        return unseal(t, dbi, k, v);
    if (rc != MDB_NOTFOUND)
        return rc;
    /* a miss: believed once the neighbours agree (see above) */
    MDB_cursor *c;
    if ((rc = mdb_cursor_open(t->txn, dbi, &c)))
        return rc;
    MDB_val kk = *k, vv;
    rc = cairn__cursor_get(t, c, &kk, &vv, MDB_SET_RANGE);
    mdb_cursor_close(c);
    if (rc == 0 && mdb_cmp(t->txn, dbi, &kk, k) == 0)
        return damaged(t, dbi, k, "is found by a scan but not by a lookup");
    return rc == 0 ? MDB_NOTFOUND : rc;
}

/* Upgrading a store of schema 1 or 2, whose records carry no checksum: every record of dbi is
 * written again with one, in the caller's transaction (so the upgrade is all or nothing). The
 * cursor is placed again after each put, which may move records between pages. */
int cairn__sum_seal_all(cairn__txn *t, MDB_dbi dbi)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, dbi, &c);
    if (rc)
        return rc;
    unsigned char *buf = NULL;
    size_t cap = 0;
    MDB_val k, v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        size_t need = k.mv_size + v.mv_size;
        if (need > cap) {
            unsigned char *b = realloc(buf, need);
            if (!b) {
                rc = ENOMEM;
                break;
            }
            buf = b, cap = need;
        }
        memcpy(buf, k.mv_data, k.mv_size);
        memcpy(buf + k.mv_size, v.mv_data, v.mv_size);
        MDB_val kk = {k.mv_size, buf}, vv = {v.mv_size, buf + k.mv_size};
        if ((rc = cairn__put(t, dbi, &kk, &vv, 0)))
            break;
        kk = (MDB_val){k.mv_size, buf};
        if ((rc = mdb_cursor_get(c, &kk, &v, MDB_SET_KEY)))
            break;
    }
    free(buf);
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}
