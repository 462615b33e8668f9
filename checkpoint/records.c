/* checkpoint/records.c - the store's records: how tasks, steps, progress and audit entries are
 * encoded, and how writing a task keeps its secondary indexes in step.
 *
 * Records are msgpack maps with short keys and a schema version; decoding looks fields up by
 * name, so a newer writer's extra fields are ignored and a record from a newer schema is
 * refused. Bytes from the file are checked for plausibility (declared lengths against what is
 * there) before msgpack-c sees them, so a corrupt record is an error naming the task, never a
 * huge allocation or a crash. Every index entry of a task (status/due, tenant, finished) is
 * derived from the task record: cairn__task_put deletes the old record's entries and adds the
 * new one's in the same transaction, so the indexes cannot drift from the records.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/store_impl.h"

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

/* A decoded record: the fields are looked up by name. The objects live in the transaction's
 * zone (reused from record to record, cleared by rec_close); strings and bins point into the
 * LMDB value. Decoders read fields in the order the encoders write them, so a lookup that
 * starts where the previous one matched finds its field at once. */
typedef struct rec {
    msgpack_zone *zone;
    msgpack_object_map map;
    uint32_t hint;
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
    if (!t->zone_ready) {
        if (!msgpack_zone_init(&t->zone, 2048))
            return cairn__store_fail(t->s, CAIRN_ENOMEM, "out of memory decoding a record");
        t->zone_ready = 1;
    }
    size_t off = 0;
    msgpack_object o;
    msgpack_unpack_return ur = mp_plausible(v->mv_data, v->mv_size)
                                   ? msgpack_unpack(v->mv_data, v->mv_size, &off, &t->zone, &o)
                                   : MSGPACK_UNPACK_PARSE_ERROR;
    if (ur < 0 || o.type != MSGPACK_OBJECT_MAP || off != v->mv_size) {
        msgpack_zone_clear(&t->zone);
        return cairn__store_fail(t->s,
                                 ur == MSGPACK_UNPACK_NOMEM_ERROR ? CAIRN_ENOMEM : CAIRN_ECORRUPT,
                                 "corrupt %s record for '%s' in store %s (%zu bytes)", what, id,
                                 t->s->dir, (size_t)v->mv_size);
    }
    r->zone = &t->zone;
    r->map = o.via.map;
    r->hint = 0;
    return 0;
}

static void rec_close(rec *r) { msgpack_zone_clear(r->zone); }

static const msgpack_object *rec_getn(rec *r, const char *k, size_t n)
{
    uint32_t size = r->map.size;
    for (uint32_t j = 0; j < size; j++) {
        uint32_t i = r->hint + j < size ? r->hint + j : r->hint + j - size;
        const msgpack_object *key = &r->map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == n &&
            memcmp(key->via.str.ptr, k, n) == 0) {
            r->hint = i + 1 < size ? i + 1 : 0;
            return &r->map.ptr[i].val;
        }
    }
    return NULL;
}

static int64_t rec_intn(rec *r, const char *k, size_t kn)
{
    const msgpack_object *o = rec_getn(r, k, kn);
    if (!o)
        return 0;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (int64_t)o->via.u64;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return o->via.i64;
    return 0;
}

static void rec_strn(rec *r, const char *k, size_t kn, char *out, size_t cap)
{
    const msgpack_object *o = rec_getn(r, k, kn);
    size_t n = 0;
    if (o && o->type == MSGPACK_OBJECT_STR) {
        n = o->via.str.size < cap - 1 ? o->via.str.size : cap - 1;
        memcpy(out, o->via.str.ptr, n);
    }
    out[n] = 0;
}

static void rec_binn(rec *r, const char *k, size_t kn, const void **p, size_t *len)
{
    const msgpack_object *o = rec_getn(r, k, kn);
    *p = NULL;
    *len = 0;
    if (o && o->type == MSGPACK_OBJECT_BIN) {
        *p = o->via.bin.ptr;
        *len = o->via.bin.size;
    }
}

/* k is always a string literal: its length is known at compile time */
#define rec_int(r, k) rec_intn((r), (k), sizeof(k) - 1)
#define rec_str(r, k, out, cap) rec_strn((r), (k), sizeof(k) - 1, (out), (cap))
#define rec_bin(r, k, p, len) rec_binn((r), (k), sizeof(k) - 1, (p), (len))

static int rec_version(cairn__txn *t, rec *r, const char *what, const char *id)
{
    int64_t v = rec_int(r, "v");
    if (v > CAIRN__SCHEMA) {
        rec_close(r);
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
    o->txn = (uint64_t)rec_int(&r, "txn");
    rec_close(&r); /* bin pointers point into the LMDB value, not the zone */
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

static void task_cache_set(cairn_store *s, const void *bytes, size_t len, const cairn__task_rec *r)
{
    s->tc_valid = 0;
    if (len > s->tc_cap) {
        unsigned char *b = realloc(s->tc_bytes, len);
        if (!b)
            return; /* no cache, no harm */
        s->tc_bytes = b;
        s->tc_cap = len;
    }
    memcpy(s->tc_bytes, bytes, len);
    s->tc_len = len;
    s->tc_rec = *r;
    s->tc_valid = 1;
}

int cairn__task_get(cairn__txn *t, const char *id, cairn__task_rec *out)
{
    char key[CAIRN__ID_MAX + 1]; /* callers may pass out->id as id: decoding overwrites it */
    size_t n = strlen(id);
    if (n == 0 || n > CAIRN__ID_MAX)
        return CAIRN_ENOTFOUND;
    memcpy(key, id, n + 1);
    MDB_val k = {n, key}, v;
    int rc = cairn__get(t, t->s->tasks, &k, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read task");
    cairn_store *s = t->s;
    if (s->tc_valid && v.mv_size == s->tc_len && memcmp(v.mv_data, s->tc_bytes, s->tc_len) == 0 &&
        strcmp(s->tc_rec.id, key) == 0) {
        *out = s->tc_rec; /* the same bytes decode to the same record */
        return 0;
    }
    if ((rc = task_decode(t, &v, key, out)))
        return rc;
    task_cache_set(s, v.mv_data, v.mv_size, out);
    return 0;
}

int cairn__put_empty(cairn__txn *t, MDB_dbi dbi, key *k)
{
    MDB_val kk = kv(k), v = {0, ""};
    int rc = cairn__put(t, dbi, &kk, &v, 0);
    return rc ? cairn__mdb_fail(t, t->s, rc, "write index") : 0;
}

static int del_key(cairn__txn *t, MDB_dbi dbi, key *k)
{
    MDB_val kk = kv(k);
    int rc = cairn__del(t, dbi, &kk);
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "delete index") : 0;
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

static int is_tenant_running(const cairn__task_rec *r)
{
    return r->tenant[0] && r->state == CAIRN_RUNNING;
}
static int always(const cairn__task_rec *r) { return r != NULL; }

/* ------------------------------------------------------------------ counts */

/* The store keeps its tasks' counts by state, and its tombstones, in one meta record ("counts":
 * CAIRN__COUNTS little-endian u64, by_state first, tombstones last), changed in the transaction
 * that changes a task's state: `stats` (and a metrics scrape) reads one record at any size. A
 * store of schema 3 has it from its creation (cairn__counts_init); a miss is damage. */
#define COUNTS_KEY "counts"

int cairn__counts_get(cairn__txn *t, uint64_t c[CAIRN__COUNTS])
{
    MDB_val k = {sizeof COUNTS_KEY - 1, COUNTS_KEY}, v;
    int rc = cairn__get(t, t->s->meta, &k, &v);
    if (rc == MDB_NOTFOUND || (rc == 0 && v.mv_size != CAIRN__COUNTS * 8))
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "store %s: its task counts record is %s: the store is damaged "
                                 "(run `cairn check`)",
                                 t->s->dir, rc ? "missing" : "malformed");
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read the task counts");
    const unsigned char *p = v.mv_data;
    for (int i = 0; i < CAIRN__COUNTS; i++) {
        uint64_t x = 0;
        for (int b = 7; b >= 0; b--)
            x = x << 8 | p[i * 8 + b];
        c[i] = x;
    }
    return 0;
}

int cairn__counts_put(cairn__txn *t, const uint64_t c[CAIRN__COUNTS])
{
    unsigned char p[CAIRN__COUNTS * 8];
    for (int i = 0; i < CAIRN__COUNTS; i++)
        for (int b = 0; b < 8; b++)
            p[i * 8 + b] = (unsigned char)(c[i] >> (8 * b));
    MDB_val k = {sizeof COUNTS_KEY - 1, COUNTS_KEY}, v = {sizeof p, p};
    int rc = cairn__put(t, t->s->meta, &k, &v, 0);
    return rc ? cairn__mdb_fail(t, t->s, rc, "write the task counts") : 0;
}

/* The counts from a scan of every task record: for a new store (none), an upgraded one, and
 * cairn check's comparison. */
int cairn__counts_scan(cairn__txn *t, uint64_t c[CAIRN__COUNTS])
{
    memset(c, 0, CAIRN__COUNTS * sizeof *c);
    MDB_cursor *cur;
    int rc = mdb_cursor_open(t->txn, t->s->tasks, &cur);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k, v;
    for (rc = cairn__cursor_get(t, cur, &k, &v, MDB_FIRST); rc == 0;
         rc = cairn__cursor_get(t, cur, &k, &v, MDB_NEXT)) {
        char id[CAIRN__ID_MAX + 1];
        size_t n = k.mv_size < CAIRN__ID_MAX ? k.mv_size : CAIRN__ID_MAX;
        memcpy(id, k.mv_data, n);
        id[n] = 0;
        cairn__task_rec r;
        if ((rc = task_decode(t, &v, id, &r)))
            break;
        c[r.state]++;
        c[CAIRN__COUNTS - 1] += r.tombstone != 0;
    }
    mdb_cursor_close(cur);
    return cairn__scan_end(t, rc, "count tasks");
}

/* The counts as task `old` (NULL: a new one) becomes `r` (NULL: it goes). */
static int counts_move(cairn__txn *t, const cairn__task_rec *old, const cairn__task_rec *r)
{
    if (old && r && old->state == r->state && !old->tombstone == !r->tombstone)
        return 0; /* a lease renewal, a step's progress: no count changes */
    uint64_t c[CAIRN__COUNTS];
    int rc = cairn__counts_get(t, c);
    if (rc)
        return rc;
    if (old) {
        c[old->state] -= c[old->state] > 0;
        c[CAIRN__COUNTS - 1] -= old->tombstone && c[CAIRN__COUNTS - 1] > 0;
    }
    if (r) {
        c[r->state]++;
        c[CAIRN__COUNTS - 1] += r->tombstone != 0;
    }
    return cairn__counts_put(t, c);
}

/* Moves a task's index entries from `old` (NULL: none yet) to `r` (NULL: the task goes). An
 * entry whose key does not change is left alone, so a lease renewal rewrites the task record
 * and nothing else (fewer pages for the commit to flush). */
static int index_move(cairn__txn *t, const cairn__task_rec *old, const cairn__task_rec *r)
{
    static const struct {
        size_t dbi; /* offset of the MDB_dbi in cairn_store */
        void (*make)(key *, const cairn__task_rec *);
        int (*has)(const cairn__task_rec *);
    } ix[] = {{offsetof(cairn_store, due), due_key, always},
              {offsetof(cairn_store, tenants), tenant_key, is_tenant_running},
              {offsetof(cairn_store, finished), finished_key, is_finished}};
    for (size_t i = 0; i < sizeof ix / sizeof *ix; i++) {
        MDB_dbi dbi = *(const MDB_dbi *)((const char *)t->s + ix[i].dbi);
        key a, b;
        int ha = old && ix[i].has(old), hb = r && ix[i].has(r), rc;
        if (ha)
            ix[i].make(&a, old);
        if (hb)
            ix[i].make(&b, r);
        if (ha && hb && a.len == b.len && memcmp(a.b, b.b, a.len) == 0)
            continue;
        if (ha && (rc = del_key(t, dbi, &a)))
            return rc;
        if (hb && (rc = cairn__put_empty(t, dbi, &b)))
            return rc;
    }
    return counts_move(t, old, r);
}

/* cairn check: whether the index entries task r implies are all there (0), else
 * CAIRN_ECORRUPT with why[] saying which is missing; a lookup's own error as it is. */
int cairn__task_check_indexes(cairn__txn *t, const cairn__task_rec *r, char *why, size_t cap)
{
    static const struct {
        size_t dbi;
        void (*make)(key *, const cairn__task_rec *);
        int (*has)(const cairn__task_rec *);
        const char *name;
    } ix[] = {{offsetof(cairn_store, due), due_key, always, "status (due)"},
              {offsetof(cairn_store, tenants), tenant_key, is_tenant_running, "tenant"},
              {offsetof(cairn_store, finished), finished_key, is_finished, "finished"}};
    for (size_t i = 0; i < sizeof ix / sizeof *ix; i++) {
        if (!ix[i].has(r))
            continue;
        MDB_dbi dbi = *(const MDB_dbi *)((const char *)t->s + ix[i].dbi);
        key k;
        ix[i].make(&k, r);
        MDB_val kk = kv(&k), v;
        int rc = cairn__get(t, dbi, &kk, &v);
        if (rc == MDB_NOTFOUND) {
            snprintf(why, cap, "task '%s' (state %u) has no entry in the %s index", r->id, r->state,
                     ix[i].name);
            return CAIRN_ECORRUPT;
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* cairn check: a task that succeeded (and kept its outputs) has a done record of every step of
 * the graph it is pinned to ("a@1,b@2"). A database whose root was sent back to an older page
 * by damage to LMDB's own directory (which no record's checksum covers) reads as a consistent
 * older tree; what it lacks shows here. */
int cairn__task_check_steps(cairn__txn *t, const cairn__task_rec *r, char *why, size_t cap)
{
    if (r->state != CAIRN_SUCCEEDED || r->tombstone)
        return 0;
    for (const char *p = r->steps_pin; *p;) {
        size_t len = strcspn(p, "@,");
        char name[CAIRN__NAME_MAX + 1];
        snprintf(name, sizeof name, "%.*s", (int)(len < CAIRN__NAME_MAX ? len : CAIRN__NAME_MAX),
                 p);
        cairn__step_rec s;
        int rc = cairn__step_get(t, r->id, name, r->generation, &s);
        if (rc == CAIRN_ENOTFOUND || (rc == 0 && s.state != CAIRN_STEP_DONE)) {
            snprintf(why, cap,
                     "task '%s' succeeded, but its step '%s' has %s: the store is damaged", r->id,
                     name, rc ? "no record" : "no done record");
            return CAIRN_ECORRUPT;
        }
        if (rc == CAIRN_ECORRUPT || rc == CAIRN_ESCHEMA)
            return 0; /* a damaged record: reported where the scan meets it */
        if (rc)
            return rc;
        p += strcspn(p, ",");
        p += *p == ',';
    }
    return 0;
}

/* cairn check: whether an entry of the due, tenants or finished index is one its task implies
 * (0), else CAIRN_ECORRUPT with why[]. */
int cairn__index_entry_check(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, char *why, size_t cap)
{
    size_t skip = dbi == t->s->due ? 9 : dbi == t->s->finished ? 8 : 0;
    const char *p = k->mv_data;
    if (dbi == t->s->tenants) {
        const char *z = memchr(p, 0, k->mv_size);
        skip = z ? (size_t)(z - p) + 1 : k->mv_size;
    }
    char id[CAIRN__ID_MAX + 1];
    size_t n = k->mv_size > skip ? k->mv_size - skip : 0;
    if (k->mv_size < skip || n == 0 || n > CAIRN__ID_MAX) {
        snprintf(why, cap, "an entry of the %s index has a malformed key (%zu bytes)",
                 cairn__db_name(t->s, dbi), (size_t)k->mv_size);
        return CAIRN_ECORRUPT;
    }
    memcpy(id, p + skip, n);
    id[n] = 0;
    cairn__task_rec r;
    int rc = cairn__task_get(t, id, &r);
    if (rc == CAIRN_ENOTFOUND) {
        snprintf(why, cap, "the %s index lists task '%s', which has no record",
                 cairn__db_name(t->s, dbi), id);
        return CAIRN_ECORRUPT;
    }
    if (rc)
        return rc;
    key want;
    int has = dbi == t->s->due        ? (due_key(&want, &r), 1)
              : dbi == t->s->finished ? (is_finished(&r) ? (finished_key(&want, &r), 1) : 0)
                                      : (is_tenant_running(&r) ? (tenant_key(&want, &r), 1) : 0);
    if (!has || want.len != k->mv_size || memcmp(want.b, k->mv_data, want.len) != 0) {
        snprintf(why, cap, "the %s index entry of task '%s' does not match its record (state %u)",
                 cairn__db_name(t->s, dbi), id, r.state);
        return CAIRN_ECORRUPT;
    }
    return 0;
}

int cairn__task_put(cairn__txn *t, const cairn__task_rec *r)
{
    cairn__task_rec old;
    int rc = cairn__task_get(t, r->id, &old);
    if (rc && rc != CAIRN_ENOTFOUND)
        return rc;
    int had = rc == 0;
    /* `old` borrowed the LMDB value; the new record is encoded before it can be invalidated */
    msgpack_sbuffer_clear(&t->buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &t->buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 24);
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
    uint64_t txn = mdb_txn_id(t->txn);
    pk_uint(&pk, "txn", txn);
    MDB_val k = {strlen(r->id), (void *)r->id}, v = {t->buf.size, t->buf.data};
    rc = cairn__put(t, t->s->tasks, &k, &v, 0);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "write task");
    task_cache_set(t->s, t->buf.data, t->buf.size, r);
    t->s->tc_rec.txn = txn; /* as a read of these bytes decodes it */
    return index_move(t, had ? &old : NULL, r);
}

/* Deletes every key starting with `prefix` (prefix_len bytes) from dbi. */
static int del_prefix(cairn__txn *t, MDB_dbi dbi, const void *prefix, size_t prefix_len)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, dbi, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = {prefix_len, (void *)prefix}, v;
    rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size >= prefix_len && memcmp(k.mv_data, prefix, prefix_len) == 0) {
        rc = cairn__cursor_del(t, c);
        if (rc)
            break;
        rc = cairn__cursor_get(t, c, &k, &v, MDB_GET_CURRENT);
        if (rc == MDB_NOTFOUND || rc == EINVAL)
            rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT);
        else if (rc == 0 && (k.mv_size < prefix_len || memcmp(k.mv_data, prefix, prefix_len)))
            break;
    }
    mdb_cursor_close(c);
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "delete records") : 0;
}

static int input_del(cairn__txn *t, const char *id)
{
    MDB_val k = {strlen(id), (void *)id};
    int rc = cairn__del(t, t->s->inputs, &k);
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "delete task input") : 0;
}

int cairn__task_del(cairn__txn *t, const char *id)
{
    cairn__task_rec old;
    int rc = cairn__task_get(t, id, &old);
    if (rc)
        return rc;
    if ((rc = index_move(t, &old, NULL)))
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
    rc = cairn__del(t, t->s->tasks, &k);
    return rc ? cairn__mdb_fail(t, t->s, rc, "delete task") : 0;
}

int cairn__input_get(cairn__txn *t, const char *id, const void **data, size_t *len)
{
    MDB_val k = {strlen(id), (void *)id}, v;
    int rc = cairn__get(t, t->s->inputs, &k, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read task input");
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
    int rc = cairn__put(t, t->s->inputs, &k, &v, 0);
    return rc ? cairn__mdb_fail(t, t->s, rc, "write task input") : 0;
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
    int rc = cairn__put(t, t->s->idem, &k, &v, MDB_NOOVERWRITE);
    if (rc == 0)
        return 0;
    if (rc != MDB_KEYEXIST)
        return cairn__mdb_fail(t, t->s, rc, "reserve task ID");
    size_t n = v.mv_size < 64 ? v.mv_size : 64;
    memcpy(existing, v.mv_data, n);
    existing[n] = 0;
    return strcmp(existing, hash) == 0 ? 0 : CAIRN_ECONFLICT;
}

int cairn__idem_del(cairn__txn *t, const char *id)
{
    MDB_val k = {strlen(id), (void *)id};
    int rc = cairn__del(t, t->s->idem, &k);
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "delete task ID") : 0;
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
    rec_close(&r);
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
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    /* the record applying in `gen` is the last key <= prefix|gen */
    MDB_val k = kv(&want), v;
    rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && !(k.mv_size == want.len && memcmp(k.mv_data, want.b, want.len) == 0))
        rc = cairn__cursor_get(t, c, &k, &v, MDB_PREV);
    else if (rc == MDB_NOTFOUND)
        rc = cairn__cursor_get(t, c, &k, &v, MDB_LAST);
    if (rc == 0 && (k.mv_size != want.len || memcmp(k.mv_data, prefix.b, prefix.len) != 0))
        rc = MDB_NOTFOUND;
    if (rc == 0)
        rc = step_decode(t, &v, step, out);
    else if (rc == MDB_NOTFOUND)
        rc = CAIRN_ENOTFOUND;
    else
        rc = cairn__mdb_fail(t, t->s, rc, "read step");
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
    int rc = cairn__put(t, t->s->steps, &kk, &v, 0);
    return rc ? cairn__mdb_fail(t, t->s, rc, "write step") : 0;
}

int cairn__step_each(cairn__txn *t, const char *task, cairn__step_cb cb, void *arg)
{
    key p;
    p.len = 0;
    key_str(&p, task), key_nul(&p);
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->steps, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = kv(&p), v;
    for (rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT)) {
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
    return cairn__scan_end(t, rc, "read steps");
}

int cairn__progress_get(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                        const void **data, size_t *len)
{
    key k;
    step_key(&k, task, step, gen);
    MDB_val kk = kv(&k), v;
    int rc = cairn__get(t, t->s->progress, &kk, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read progress");
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
    int rc = data ? cairn__put(t, t->s->progress, &kk, &v, 0) : cairn__del(t, t->s->progress, &kk);
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "write progress") : 0;
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
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val kk = kv(&k), v;
    uint64_t last = 0;
    rc = cairn__cursor_get(t, c, &kk, &v, MDB_SET_RANGE);
    rc = rc == 0              ? cairn__cursor_get(t, c, &kk, &v, MDB_PREV)
         : rc == MDB_NOTFOUND ? cairn__cursor_get(t, c, &kk, &v, MDB_LAST)
                              : rc;
    if (rc == 0 && kk.mv_size == plen + 8 && memcmp(kk.mv_data, k.b, plen) == 0)
        last = rd_be64((unsigned char *)kk.mv_data + plen);
    mdb_cursor_close(c);
    if (rc && rc != MDB_NOTFOUND)
        return cairn__mdb_fail(t, t->s, rc, "read audit records");
    task->audit_seq = (last > task->audit_seq ? last : task->audit_seq) + 1;
    k.len = plen;
    key_u64(&k, task->audit_seq);
    kk = kv(&k);
    v = (MDB_val){t->buf.size, t->buf.data};
    rc = cairn__put(t, t->s->audit, &kk, &v, 0);
    return rc ? cairn__mdb_fail(t, t->s, rc, "append audit record") : 0;
}

int cairn__audit_each(cairn__txn *t, const char *task, cairn__audit_cb cb, void *arg)
{
    key p;
    p.len = 0;
    key_str(&p, task), key_nul(&p);
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->audit, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = kv(&p), v;
    for (rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT)) {
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
        rec_close(&r);
        if ((rc = cb(&a, arg)))
            break;
    }
    mdb_cursor_close(c);
    return cairn__scan_end(t, rc, "read audit records");
}
