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
 *
 * Split records (schema 5). LMDB keeps a value of more than about half a page on overflow pages
 * of its own, ceil((16 + n) / page) of them. An 8 KB output makes a step record of 8,232 bytes,
 * 56 past two pages: the third page, a new one written for 56 bytes, was a fifth of a step's
 * cost at process-crash durability (bench/README.md, "Where 8 KB stands"), and 4 KB of file.
 * So a step record whose last page would hold at most a quarter page is split where that page
 * begins: the head, exactly whole pages less their header, stays under the step's key; the
 * rest, which ends in the checksum, is a tail record under the same key with the kind byte 't'
 * for 's' (schema 6; schema 5 kept it in a database `tails` under the same key), inline in a
 * leaf page beside the task's other records. The one checksum covers the record as if whole,
 * so the head carries none of its own: a step record that fills its pages exactly and fails its
 * checksum is joined with its tail (into memory the transaction owns) and verified again. A record
 * that happens to fill its pages exactly verifies at once; a damaged one finds no tail, or a tail
 * that does not verify with it, and is CAIRN_ECORRUPT like any other. Deleting a head deletes its
 * tail, and writing a record whole over a split one deletes the old tail, so a tail exists exactly
 * while its head does; a tail read on its own (`cairn check`'s scan) is verified through its head.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include "checkpoint/store_impl.h"
#include "common/xxh.h"

#define SUM 8 /* bytes of checksum after each value */
/* LMDB's page header (MDB_page: a page number, two 16-bit fields, a 32-bit union) */
#define PAGE_HEADER (sizeof(size_t) + 8)

/* Seeded with the database's name, then the key: a record read through another database's
 * root (damage to LMDB's directory sends a database to another's pages) fails like any other. */
static uint64_t sum_of(cairn_store *s, MDB_dbi dbi, const MDB_val *k, const void *v, size_t n)
{
    uint64_t seed = XXH3_64bits_withSeed(k->mv_data, k->mv_size, cairn__db_seed(s, dbi));
    return XXH3_64bits_withSeed(v, n, seed);
}

/* sum_of over a's bytes followed by b's (a value written from two buffers): the same hash */
static uint64_t sum_of2(cairn_store *s, MDB_dbi dbi, const MDB_val *k, const void *a, size_t an,
                        const void *b, size_t bn)
{
    XXH3_state_t st;
    XXH3_64bits_reset_withSeed(
        &st, XXH3_64bits_withSeed(k->mv_data, k->mv_size, cairn__db_seed(s, dbi)));
    XXH3_64bits_update(&st, a, an);
    XXH3_64bits_update(&st, b, bn);
    return XXH3_64bits_digest(&st);
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
    /* a task's own records: described by their kind, after the kind byte as schema 5's were */
    int kind = dbi == s->tasks && z ? cairn__key_kind(k, NULL) : 0;
    int old = s->old_open && z;
    if (kind > 0)
        db = cairn__kind_name(kind);
    if (kind > 0 && z + 1 < p + n)
        z++; /* the kind byte */
    if (kind == CAIRN__K_STEP || kind == CAIRN__K_TAIL || (z && dbi == s->progress) ||
        (old && (dbi == s->old_steps || dbi == s->old_tails))) {
        const unsigned char *name = z + 1, *e = p + n;
        size_t nn = e - name >= 5 ? (size_t)(e - name) - 5 : 0;
        printable(b, sizeof b, name, nn);
        uint32_t gen = e - name >= 4 ? (uint32_t)e[-4] << 24 | (uint32_t)e[-3] << 16 |
                                           (uint32_t)e[-2] << 8 | e[-1]
                                     : 0;
        snprintf(out, cap, "%s record of task '%s' (step '%s', generation %u)", db, a, b, gen);
    } else if ((kind == CAIRN__K_AUDIT || (old && dbi == s->old_audit)) && p + n - z == 9) {
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

/* ------------------------------------------------------------------ split records */

/* The other half of a split step record: from k's record in dbi, the key and database where its
 * tail (to: CAIRN__K_TAIL) or its head (to: CAIRN__K_STEP) would be. 1 if k names a record of
 * the other kind - a step record (kind CAIRN__K_STEP of tasks), whose tail is the key with
 * CAIRN__K_TAIL there, or such a tail; in an upgrade, a record of schema 5's steps, whose tail
 * is under the same key in schema 5's tails, or such a tail - else 0. */
static int half_ref(cairn_store *s, MDB_dbi dbi, const MDB_val *k, int to, MDB_dbi *odbi, key *ok)
{
    const int tail = to == CAIRN__K_TAIL;
    size_t n;
    if (!s->psize || k->mv_size > sizeof ok->b)
        return 0;
    if (dbi == s->tasks && cairn__key_kind(k, &n) == (tail ? CAIRN__K_STEP : CAIRN__K_TAIL))
        *odbi = s->tasks;
    else if (s->old_open && dbi == (tail ? s->old_steps : s->old_tails))
        *odbi = tail ? s->old_tails : s->old_steps, n = (size_t)-1;
    else
        return 0;
    memcpy(ok->b, k->mv_data, k->mv_size);
    ok->len = k->mv_size;
    if (n != (size_t)-1)
        ok->b[n + 1] = (char)to;
    return 1;
}

static int tail_ref(cairn_store *s, MDB_dbi dbi, const MDB_val *k, MDB_dbi *tdbi, key *tk)
{
    return half_ref(s, dbi, k, CAIRN__K_TAIL, tdbi, tk);
}

static int head_ref(cairn_store *s, MDB_dbi dbi, const MDB_val *k, MDB_dbi *hdbi, key *hk)
{
    return half_ref(s, dbi, k, CAIRN__K_STEP, hdbi, hk);
}

static int join(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, MDB_val *v);
static int tail_check(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, MDB_val *v);
static int head_sized(cairn_store *s, size_t n);

/* Verifies a record read from dbi and takes its checksum off v (a split one: joined). */
static int unseal(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, MDB_val *v)
{
    cairn_store *s = t->s;
    if (cairn__sum_ok(s, dbi, k, v)) {
        v->mv_size -= SUM;
        return 0;
    }
    MDB_dbi other;
    key ok;
    if (head_ref(s, dbi, k, &other, &ok))
        return tail_check(t, dbi, k, v);
    if (head_sized(s, v->mv_size) && tail_ref(s, dbi, k, &other, &ok))
        return join(t, dbi, k, v);
    return damaged(t, dbi, k, "fails its checksum");
}

int cairn__put(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v, unsigned flags)
{
    return cairn__put2(t, dbi, k, v, NULL, 0, flags);
}

/* Where a record of `total` bytes (value and checksum) is split: the head's length, or 0 to keep
 * it whole (split: whether k's record may be split at all). */
static size_t split_at(cairn_store *s, int split, size_t total)
{
    if (!split || !s->psize)
        return 0;
    size_t used = total + PAGE_HEADER, whole = used / s->psize * s->psize;
    if (whole == 0 || used == whole || used - whole > s->psize / 4)
        return 0;
    return whole - PAGE_HEADER;
}

/* A step record's value of this length may be the head of a split record. */
static int head_sized(cairn_store *s, size_t n)
{
    return s->psize && n + PAGE_HEADER >= s->psize && (n + PAGE_HEADER) % s->psize == 0;
}

/* Memory for a joined record, the transaction's until it ends (or a scan frees it). */
static unsigned char *join_alloc(cairn__txn *t, size_t n)
{
    cairn__join *j = malloc(sizeof *j + n);
    if (!j)
        return NULL;
    j->next = t->joins;
    t->joins = j;
    return j->b;
}

void cairn__txn_joins_free(cairn__txn *t, const cairn__join *mark)
{
    while (t->joins && t->joins != mark) {
        cairn__join *j = t->joins;
        t->joins = j->next;
        free(j);
    }
}

/* The head h (of record hk in hdbi) joined with its tail tl: the joined value, without its
 * checksum, in *out; CAIRN_ECORRUPT, naming the record read (k of `whose`), when they do not
 * verify together. */
static int join_check(cairn__txn *t, MDB_dbi hdbi, const MDB_val *hk, const MDB_val *h,
                      const MDB_val *tl, MDB_val *out, MDB_dbi whose, const MDB_val *k)
{
    cairn_store *s = t->s;
    size_t total = h->mv_size + tl->mv_size;
    unsigned char *p = join_alloc(t, total);
    if (!p)
        return cairn__store_fail(s, CAIRN_ENOMEM, "out of memory reading a step record");
    memcpy(p, h->mv_data, h->mv_size);
    memcpy(p + h->mv_size, tl->mv_data, tl->mv_size);
    if (total < SUM || sum_read(p + total - SUM) != sum_of(s, hdbi, hk, p, total - SUM))
        return damaged(t, whose, k,
                       k == hk ? "fails its checksum (with its tail)"
                               : "fails its checksum with its head");
    *out = (MDB_val){total - SUM, p};
    return 0;
}

/* A step record's value that failed its checksum and may be a head: joined with its tail. */
static int join(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, MDB_val *v)
{
    MDB_dbi tdbi;
    key tk;
    tail_ref(t->s, dbi, k, &tdbi, &tk);
    MDB_val tkv = kv(&tk), tl;
    int rc = mdb_get(t->txn, tdbi, &tkv, &tl);
    if (rc == MDB_NOTFOUND)
        return damaged(t, dbi, k, "fails its checksum");
    return rc ? rc : join_check(t, dbi, k, v, &tl, v, dbi, k);
}

/* A tail read on its own: it must complete its head. v is left the tail's bytes. */
static int tail_check(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, MDB_val *v)
{
    MDB_dbi hdbi;
    key hk;
    head_ref(t->s, dbi, k, &hdbi, &hk);
    MDB_val hkv = kv(&hk), h, whole;
    int rc = mdb_get(t->txn, hdbi, &hkv, &h);
    if (rc == MDB_NOTFOUND || (rc == 0 && !head_sized(t->s, h.mv_size)))
        return damaged(t, dbi, k, "is the tail of no split step record");
    hkv = kv(&hk);
    if (rc || (rc = join_check(t, hdbi, &hkv, &h, v, &whole, dbi, k)))
        return rc;
    v->mv_size = v->mv_size > SUM ? v->mv_size - SUM : 0;
    return 0;
}

/* Deletes the tail of dbi's record k if it has one (its head, of head_sized length, is
 * going). */
static int tail_del(cairn__txn *t, MDB_dbi dbi, const MDB_val *k)
{
    MDB_dbi tdbi;
    key tk; /* a copy: k may be in a page the delete moves */
    if (!tail_ref(t->s, dbi, k, &tdbi, &tk))
        return 0;
    MDB_val tkv = kv(&tk);
    int rc = mdb_del(t->txn, tdbi, &tkv, NULL);
    if (rc == 0) {
        t->wrote = 1;
        cairn__journal_note_del(t, tdbi, &tkv);
    }
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int cairn__del(cairn__txn *t, MDB_dbi dbi, MDB_val *k)
{
    int rc = tail_del(t, dbi, k);
    if (rc)
        return rc;
    rc = mdb_del(t->txn, dbi, k, NULL);
    t->wrote |= rc != MDB_NOTFOUND;
    if (rc == 0)
        cairn__journal_note_del(t, dbi, k);
    return rc;
}

int cairn__cursor_del(cairn__txn *t, MDB_cursor *c)
{
    MDB_val k, v;
    int rc = mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT);
    if (rc)
        return rc;
    MDB_dbi dbi = mdb_cursor_dbi(c);
    if (head_sized(t->s, v.mv_size)) {
        if ((rc = tail_del(t, dbi, &k)) || (rc = mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT)))
            return rc;
    }
    t->wrote = 1;
    cairn__journal_note_del(t, dbi, &k); /* before the delete: k is in the map */
    return mdb_cursor_del(c, 0);
}

int cairn__put_bare(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v)
{
    int rc = mdb_put(t->txn, dbi, k, v, 0);
    if (rc == 0) {
        t->wrote = 1;
        cairn__journal_note_put(t, dbi, k, v);
    }
    return rc;
}

/* Copies bytes [from, from + n) of the record made of a (an bytes), b (bn), c (cn) to out. */
static void copy_range(unsigned char *out, size_t from, size_t n, const void *a, size_t an,
                       const void *b, size_t bn, const void *c)
{
    const void *part[3] = {a, b, c};
    size_t len[3] = {an, bn, SUM};
    for (int i = 0; i < 3 && n; i++) {
        if (from >= len[i]) {
            from -= len[i];
            continue;
        }
        size_t m = len[i] - from < n ? len[i] - from : n;
        memcpy(out, (const unsigned char *)part[i] + from, m);
        out += m, n -= m, from = 0;
    }
}

/* The value is v's bytes then tail's, each copied once, straight into the space LMDB reserves
 * (a step's output goes there from the step's buffer, not through the record's encoding); a
 * step record is split where checksum.c's design comment says. */
int cairn__put2(cairn__txn *t, MDB_dbi dbi, MDB_val *k, MDB_val *v, const void *tail,
                size_t tail_len, unsigned flags)
{
    cairn_store *s = t->s;
    MDB_dbi tdbi;
    key tk;
    int split = tail_ref(s, dbi, k, &tdbi, &tk);
    size_t n = v->mv_size + tail_len, head = split_at(s, split, n + SUM);
    MDB_val r = {head ? head : n + SUM, NULL};
    int rc;
    t->created = 0;
    if (split && !(flags & MDB_NOOVERWRITE)) {
        /* a step record: whether it is new (the counts), and if it is written whole over one
         * that may be split, that one's tail goes with it (a split one's is written over) */
        rc = mdb_put(t->txn, dbi, k, &r, MDB_NOOVERWRITE | MDB_RESERVE);
        t->created = rc == 0;
        if (rc == MDB_KEYEXIST) {
            if (!head && head_sized(s, r.mv_size) && (rc = tail_del(t, dbi, k)))
                return rc;
            r = (MDB_val){head ? head : n + SUM, NULL};
            rc = mdb_put(t->txn, dbi, k, &r, flags | MDB_RESERVE);
        }
    } else {
        rc = mdb_put(t->txn, dbi, k, &r, flags | MDB_RESERVE);
    }
    t->wrote |= rc != MDB_KEYEXIST;
    if (rc == MDB_KEYEXIST) { /* MDB_NOOVERWRITE: r is the record there */
        *v = r;
        return unseal(t, dbi, k, v) ? CAIRN_ECORRUPT : MDB_KEYEXIST;
    }
    if (rc)
        return rc;
    unsigned char sum[SUM];
    if (!head) {
        unsigned char *p = r.mv_data;
        if (v->mv_size)
            memcpy(p, v->mv_data, v->mv_size);
        if (tail_len)
            memcpy(p + v->mv_size, tail, tail_len);
        sum_put(p + n, sum_of(s, dbi, k, p, n));
        cairn__journal_note_put(t, dbi, k, &r);
        return 0;
    }
    /* split: the head filled before the tail's put (which may move dirty pages) */
    sum_put(sum, sum_of2(s, dbi, k, v->mv_data, v->mv_size, tail, tail_len));
    copy_range(r.mv_data, 0, head, v->mv_data, v->mv_size, tail, tail_len, sum);
    cairn__journal_note_put(t, dbi, k, &r);
    MDB_val tkv = kv(&tk), tr = {n + SUM - head, NULL};
    if ((rc = mdb_put(t->txn, tdbi, &tkv, &tr, MDB_RESERVE)))
        return rc;
    copy_range(tr.mv_data, head, tr.mv_size, v->mv_data, v->mv_size, tail, tail_len, sum);
    cairn__journal_note_put(t, tdbi, &tkv, &tr);
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
    /* a miss in an empty database has no neighbours to ask (the scan below would find none:
     * the database has no root); a resume's progress lookup is usually this one */
    MDB_stat st;
    if (mdb_stat(t->txn, dbi, &st) == 0 && st.ms_entries == 0 && st.ms_depth == 0 &&
        st.ms_leaf_pages == 0 && st.ms_branch_pages == 0)
        return MDB_NOTFOUND;
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
