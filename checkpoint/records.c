/* checkpoint/records.c - the store's records: how tasks, steps, progress and audit entries are
 * encoded, and how writing a task keeps its secondary indexes in step.
 *
 * Records (schema 4) are msgpack arrays with every field at a fixed position, nothing repeated
 * that the key already says, hashes as their 32 bytes and a task's times as distances from its
 * creation: a small task's records take about half what schema 3's maps keyed by field name
 * took, and a read takes each field in place, without building an object tree. Every declared
 * length is checked against the bytes there, so a corrupt record is CAIRN_ECORRUPT naming it,
 * never a huge allocation or a crash; a store of an older schema is converted when a writer
 * first opens it (store.c), a newer one refused there. Every index entry of a task (status/due,
 * tenant, finished) is derived from the task record: cairn__task_put deletes the old record's
 * entries and adds the new one's in the same transaction, so the indexes cannot drift from the
 * records.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/store_impl.h"
#include "common/hash.h"

/* A step record's key: the task's ID, NUL, the kind CAIRN__K_STEP, the step's name, NUL, the
 * generation (be32). A progress record's (in its own database) is the same without the kind. */
static void step_key(key *k, int kind, const char *task, const char *step, uint32_t gen)
{
    if (kind)
        key_sub(k, task, kind);
    else
        k->len = 0, key_str(k, task), key_nul(k);
    key_str(k, step), key_nul(k), key_u32(k, gen);
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

/* Schema 4 records are msgpack arrays whose fields sit at fixed positions (the layouts are at
 * each encoder), written with msgpack-c's packer. They are read in place by the small reader
 * below rather than by msgpack-c's unpacker, which builds an object tree in a zone for every
 * record: a resume read wants a handful of integers and strings at known positions, and the
 * reader takes each straight from the LMDB value, checking every declared length against the
 * bytes left. A record whose first byte is a map was written by schema 3 or before
 * (records3.c reads it). What a field that repeats what the key says (the task ID, a step's
 * generation) would add, the checksum already binds: it covers the key (checksum.c). */

typedef struct rd {
    const unsigned char *p, *e;
    int bad; /* a field was not of its type, or ran past the end */
} rd;

static uint64_t rd_be(rd *r, unsigned n)
{
    if ((size_t)(r->e - r->p) < n) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = v << 8 | *r->p++;
    return v;
}

static unsigned rd_byte(rd *r)
{
    if (r->p >= r->e) {
        r->bad = 1;
        return 0xc1; /* never a valid msgpack type byte: every reader refuses it */
    }
    return *r->p++;
}

static int64_t rd_int(rd *r)
{
    unsigned b = rd_byte(r);
    if (b <= 0x7f)
        return b;
    if (b >= 0xe0)
        return (int64_t)b - 0x100;
    switch (b) {
    case 0xcc:
        return (int64_t)rd_be(r, 1);
    case 0xcd:
        return (int64_t)rd_be(r, 2);
    case 0xce:
        return (int64_t)rd_be(r, 4);
    case 0xcf:
        return (int64_t)rd_be(r, 8);
    case 0xd0:
        return (int8_t)rd_be(r, 1);
    case 0xd1:
        return (int16_t)rd_be(r, 2);
    case 0xd2:
        return (int32_t)rd_be(r, 4);
    case 0xd3:
        return (int64_t)rd_be(r, 8);
    }
    r->bad = 1;
    return 0;
}

/* A time stored relative to `base` (nil: none, 0). */
static int64_t rd_time(rd *r, int64_t base)
{
    if (r->p < r->e && *r->p == 0xc0) {
        r->p++;
        return 0;
    }
    return (int64_t)((uint64_t)base + (uint64_t)rd_int(r)); /* wraps as pk_time's difference */
}

/* The length of a str (bin: 0) or bin (bin: 1) whose type byte is b; the bytes must be there. */
static size_t rd_len(rd *r, unsigned b, int bin)
{
    uint64_t n;
    if (!bin && b >= 0xa0 && b <= 0xbf)
        n = b & 0x1f;
    else if (b == (bin ? 0xc4u : 0xd9u))
        n = rd_be(r, 1);
    else if (b == (bin ? 0xc5u : 0xdau))
        n = rd_be(r, 2);
    else if (b == (bin ? 0xc6u : 0xdbu))
        n = rd_be(r, 4);
    else
        r->bad = 1, n = 0;
    if (n > (uint64_t)(r->e - r->p))
        r->bad = 1, n = 0;
    return (size_t)n;
}

/* A string into out (cap bytes, NUL-terminated; a longer one is cut, as schema 3 did). */
static void rd_str(rd *r, char *out, size_t cap)
{
    size_t n = rd_len(r, rd_byte(r), 0), m = n < cap - 1 ? n : cap - 1;
    memcpy(out, r->p, m);
    out[m] = 0;
    r->p += n;
}

static void rd_bin(rd *r, const void **p, size_t *len)
{
    *p = NULL, *len = 0;
    if (r->p < r->e && *r->p == 0xc0) {
        r->p++;
        return;
    }
    size_t n = rd_len(r, rd_byte(r), 1);
    if (!r->bad)
        *p = r->p, *len = n;
    r->p += n;
}

/* A SHA-256 in hex: 32 bytes (pk_hex), or a string as it was given. */
static void rd_hex(rd *r, char out[65])
{
    if (r->p < r->e && *r->p == 0xc4) {
        const void *b;
        size_t n;
        rd_bin(r, &b, &n);
        if (n != 32)
            r->bad = 1, n = 0;
        cairn__hex(b, n, out);
        return;
    }
    rd_str(r, out, 65);
}

/* Opens a schema-4 record of `fields` fields: 1 if v is one, 0 if it is a map (schema 3),
 * CAIRN_ECORRUPT (naming the record) if it is neither. */
static int rd_open(cairn__txn *t, rd *r, const MDB_val *v, uint32_t fields, const char *what,
                   const char *id)
{
    r->p = v->mv_data, r->e = r->p + v->mv_size, r->bad = 0;
    unsigned b = v->mv_size ? *r->p : 0xc1;
    if ((b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf)
        return 0;
    r->p++;
    uint64_t n = b >= 0x90 && b <= 0x9f ? b & 0x0f : b == 0xdc ? rd_be(r, 2) : UINT64_MAX;
    if (n != fields)
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "corrupt %s record for '%s' in store %s (%zu bytes)", what, id,
                                 t->s->dir, (size_t)v->mv_size);
    return 1;
}

/* 0 if the whole record was read as its fields, else CAIRN_ECORRUPT naming it. */
static int rd_close(cairn__txn *t, const rd *r, const MDB_val *v, const char *what, const char *id)
{
    if (!r->bad && r->p == r->e)
        return 0;
    return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                             "corrupt %s record for '%s' in store %s (%zu bytes)", what, id,
                             t->s->dir, (size_t)v->mv_size);
}

static void pk_s(msgpack_packer *pk, const char *v)
{
    size_t n = strlen(v);
    msgpack_pack_str(pk, n), msgpack_pack_str_body(pk, v, n);
}

/* 64 lowercase hex digits (every hash cairn makes) as their 32 bytes, anything else as given. */
/* The 32 bytes of n characters that are 64 lowercase hex digits: 1, else 0. */
static int unhex64(const char *v, size_t n, unsigned char out[32])
{
    if (n != 64)
        return 0;
    for (size_t i = 0; i < 64; i++) {
        int c = v[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return 0;
        out[i / 2] = (unsigned char)(i % 2 ? out[i / 2] << 4 | d : d);
    }
    return 1;
}

static void pk_hex(msgpack_packer *pk, const char *v)
{
    unsigned char b[32];
    if (!unhex64(v, strnlen(v, 65), b)) {
        pk_s(pk, v);
        return;
    }
    msgpack_pack_bin(pk, 32), msgpack_pack_bin_body(pk, b, 32);
}

/* A time as its distance from `base` (a task's times are near its creation): a few bytes, not
 * nine; 0 (none) is nil. */
static void pk_time(msgpack_packer *pk, int64_t v, int64_t base)
{
    if (v == 0)
        msgpack_pack_nil(pk);
    else
        msgpack_pack_int64(pk, (int64_t)((uint64_t)v - (uint64_t)base)); /* no overflow */
}

static void pk_begin(cairn__txn *t, msgpack_packer *pk, uint32_t fields)
{
    msgpack_sbuffer_clear(&t->buf);
    msgpack_packer_init(pk, &t->buf, msgpack_sbuffer_write);
    msgpack_pack_array(pk, fields);
}

/* 1 if p[0..n) starts with one msgpack object whose declared lengths fit in n bytes.
 * msgpack-c allocates a container's elements from its declared count before it reads them, so
 * a corrupt 5-byte value (0xdf ffffffff: a map of 4 billion pairs) would ask for 200 GB; every
 * object takes at least one byte, so a count beyond the bytes left is refused here first. */
int cairn__mp_plausible(const void *data, size_t n)
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

/* ------------------------------------------------------------------ tasks */

/* A task record (schema 4), 22 fields: graph, fingerprint, payload hash (pk_hex), pin, tenant,
 * error, error step, state, tombstone, attempt, generation, audit seq, created, then updated,
 * finished, next retry relative to created (pk_time), lease host, pid, start, token, expiry
 * (relative to created), and the transaction that wrote it. The ID is the key. */
#define TASK_FIELDS 22

static void task_encode(cairn__txn *t, const cairn__task_rec *r, uint64_t txn)
{
    msgpack_packer pk;
    pk_begin(t, &pk, TASK_FIELDS);
    pk_s(&pk, r->graph);
    pk_hex(&pk, r->fingerprint);
    pk_hex(&pk, r->payload_hash);
    pk_s(&pk, r->steps_pin);
    pk_s(&pk, r->tenant);
    pk_s(&pk, r->error);
    pk_s(&pk, r->error_step);
    msgpack_pack_uint8(&pk, r->state);
    msgpack_pack_uint8(&pk, r->tombstone);
    msgpack_pack_uint32(&pk, r->attempt);
    msgpack_pack_uint32(&pk, r->generation);
    msgpack_pack_uint64(&pk, r->audit_seq);
    msgpack_pack_int64(&pk, r->created_ms);
    pk_time(&pk, r->updated_ms, r->created_ms);
    pk_time(&pk, r->finished_ms, r->created_ms);
    pk_time(&pk, r->next_retry_ms, r->created_ms);
    pk_s(&pk, r->owner.host);
    msgpack_pack_int32(&pk, r->owner.pid);
    msgpack_pack_uint64(&pk, r->owner.start);
    msgpack_pack_uint64(&pk, r->lease_token);
    pk_time(&pk, r->lease_expires_ms, r->created_ms);
    msgpack_pack_uint64(&pk, txn);
}

static int task_decode(cairn__txn *t, const MDB_val *v, const char *id, cairn__task_rec *o)
{
    rd r;
    int rc = rd_open(t, &r, v, TASK_FIELDS, "task", id);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        if ((rc = cairn__task_decode3(t, v, id, o)))
            return rc;
    } else {
        /* every field is set below: no memset of the 2 KB record on the resume path */
        memcpy(o->id, id, strlen(id) + 1);
        rd_str(&r, o->graph, sizeof o->graph);
        rd_hex(&r, o->fingerprint);
        rd_hex(&r, o->payload_hash);
        rd_str(&r, o->steps_pin, sizeof o->steps_pin);
        rd_str(&r, o->tenant, sizeof o->tenant);
        rd_str(&r, o->error, sizeof o->error);
        rd_str(&r, o->error_step, sizeof o->error_step);
        o->state = (uint8_t)rd_int(&r);
        o->tombstone = (uint8_t)rd_int(&r);
        o->attempt = (uint32_t)rd_int(&r);
        o->generation = (uint32_t)rd_int(&r);
        o->audit_seq = (uint64_t)rd_int(&r);
        o->created_ms = rd_int(&r);
        o->updated_ms = rd_time(&r, o->created_ms);
        o->finished_ms = rd_time(&r, o->created_ms);
        o->next_retry_ms = rd_time(&r, o->created_ms);
        rd_str(&r, o->owner.host, sizeof o->owner.host);
        o->owner.pid = (int32_t)rd_int(&r);
        o->owner.start = (uint64_t)rd_int(&r);
        o->lease_token = (uint64_t)rd_int(&r);
        o->lease_expires_ms = rd_time(&r, o->created_ms);
        o->txn = (uint64_t)rd_int(&r);
        if ((rc = rd_close(t, &r, v, "task", id)))
            return rc;
    }
    if (o->state >= CAIRN_STATE_COUNT)
        return cairn__store_fail(t->s, CAIRN_ECORRUPT, "task '%s' has invalid state %u", id,
                                 o->state);
    return 0;
}

/* The last task record this thread read or wrote and its exact bytes. A step reads its task at
 * load and again at the fenced commit; bytes that match need no decoding. The same bytes decode
 * to the same record in any store, so the cache is the thread's, not a handle's (a handle serves
 * several threads at once: store.c). Records longer than its buffer are not kept. */
static _Thread_local struct {
    size_t len;
    int valid;
    unsigned char bytes[2048];
    cairn__task_rec rec;
} tc;

static void task_cache_set(const void *bytes, size_t len, const cairn__task_rec *r)
{
    tc.valid = len <= sizeof tc.bytes;
    if (!tc.valid)
        return;
    memcpy(tc.bytes, bytes, len);
    tc.len = len;
    tc.rec = *r;
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
    if (tc.valid && v.mv_size == tc.len && memcmp(v.mv_data, tc.bytes, tc.len) == 0 &&
        strcmp(tc.rec.id, key) == 0) {
        *out = tc.rec; /* the same bytes decode to the same record */
        return 0;
    }
    if ((rc = task_decode(t, &v, key, out)))
        return rc;
    task_cache_set(v.mv_data, v.mv_size, out);
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

/* The store keeps its tasks' counts by state, its tombstones, and (schema 6) its step and audit
 * records, in one meta record ("counts": CAIRN__COUNTS little-endian u64 in store_impl.h's
 * order), changed in the transaction that changes them: `stats` (and a metrics scrape) reads one
 * record at any size. A store of schema 3 has it from its creation; a miss is damage. */
#define COUNTS_KEY "counts"

/* The counts record's first n counts (it must hold exactly n: CAIRN__COUNTS, or schema 5's
 * CAIRN__C_STEPS in an upgrade). */
static int counts_read(cairn__txn *t, uint64_t *c, int n)
{
    MDB_val k = {sizeof COUNTS_KEY - 1, COUNTS_KEY}, v;
    int rc = cairn__get(t, t->s->meta, &k, &v);
    if (rc == MDB_NOTFOUND || (rc == 0 && v.mv_size != (size_t)n * 8))
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "store %s: its task counts record is %s: the store is damaged "
                                 "(run `cairn check`)",
                                 t->s->dir, rc ? "missing" : "malformed");
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read the task counts");
    const unsigned char *p = v.mv_data;
    for (int i = 0; i < n; i++) {
        uint64_t x = 0;
        for (int b = 7; b >= 0; b--)
            x = x << 8 | p[i * 8 + b];
        c[i] = x;
    }
    return 0;
}

int cairn__counts_get(cairn__txn *t, uint64_t c[CAIRN__COUNTS])
{
    return counts_read(t, c, CAIRN__COUNTS);
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

/* gc's mark ("gc_mark", little-endian u64 ms): every finished task that finished before it is a
 * tombstone already, so a gc run's pruning starts there instead of walking every tombstone
 * again (a month of them, read once a day). A task whose finish time lands before the mark
 * after it was set (a clock behind the others) keeps its outputs until its tombstone's age
 * removes it: kept longer, never dropped early. Absent: 0. */
#define GC_MARK_KEY "gc_mark"

int cairn__gc_mark_get(cairn__txn *t, int64_t *ms)
{
    MDB_val k = {sizeof GC_MARK_KEY - 1, GC_MARK_KEY}, v;
    *ms = 0;
    int rc = cairn__get(t, t->s->meta, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read gc's mark");
    if (v.mv_size != 8)
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "store %s: gc's mark record is malformed: the store is damaged "
                                 "(run `cairn check`)",
                                 t->s->dir);
    const unsigned char *p = v.mv_data;
    uint64_t x = 0;
    for (int b = 7; b >= 0; b--)
        x = x << 8 | p[b];
    *ms = (int64_t)x;
    return 0;
}

int cairn__gc_mark_put(cairn__txn *t, int64_t ms)
{
    unsigned char p[8];
    for (int b = 0; b < 8; b++)
        p[b] = (unsigned char)((uint64_t)ms >> (8 * b));
    MDB_val k = {sizeof GC_MARK_KEY - 1, GC_MARK_KEY}, v = {sizeof p, p};
    int rc = cairn__put(t, t->s->meta, &k, &v, 0);
    return rc ? cairn__mdb_fail(t, t->s, rc, "write gc's mark") : 0;
}

/* The counts from a scan of the tasks tree: for an upgraded store of schema 1 or 2, and cairn
 * check's comparison. Only the task records are read (and verified); the others are counted by
 * their keys, so that a damaged step record (which check reports) leaves the comparison. */
int cairn__counts_scan(cairn__txn *t, uint64_t c[CAIRN__COUNTS])
{
    memset(c, 0, CAIRN__COUNTS * sizeof *c);
    MDB_cursor *cur;
    int rc = mdb_cursor_open(t->txn, t->s->tasks, &cur);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        int kind = cairn__key_kind(&k, NULL);
        c[CAIRN__C_STEPS] += kind == CAIRN__K_STEP;
        c[CAIRN__C_AUDIT] += kind == CAIRN__K_AUDIT;
        if (kind != 0)
            continue;
        char id[CAIRN__ID_MAX + 1];
        size_t n = k.mv_size < CAIRN__ID_MAX ? k.mv_size : CAIRN__ID_MAX;
        memcpy(id, k.mv_data, n);
        id[n] = 0;
        cairn__task_rec r;
        if ((rc = cairn__sum_check(t->s, t->s->tasks, &k, &v)) || (rc = task_decode(t, &v, id, &r)))
            break;
        c[r.state]++;
        c[CAIRN__C_TOMBSTONES] += r.tombstone != 0;
    }
    mdb_cursor_close(cur);
    return cairn__scan_end(t, rc, "count tasks");
}

int cairn__counts_settle(cairn__txn *t)
{
    if (!t->d_steps && !t->d_audit)
        return 0;
    uint64_t c[CAIRN__COUNTS];
    int rc = cairn__counts_get(t, c);
    if (rc)
        return rc;
    c[CAIRN__C_STEPS] = t->d_steps < 0 && (uint64_t)-t->d_steps > c[CAIRN__C_STEPS]
                            ? 0
                            : c[CAIRN__C_STEPS] + (uint64_t)t->d_steps;
    c[CAIRN__C_AUDIT] = t->d_audit < 0 && (uint64_t)-t->d_audit > c[CAIRN__C_AUDIT]
                            ? 0
                            : c[CAIRN__C_AUDIT] + (uint64_t)t->d_audit;
    t->d_steps = t->d_audit = 0;
    return cairn__counts_put(t, c);
}

int cairn__counts_widen(cairn__txn *t, uint64_t steps, uint64_t audit)
{
    uint64_t c[CAIRN__COUNTS];
    int rc = counts_read(t, c, CAIRN__C_STEPS);
    if (rc)
        return rc;
    c[CAIRN__C_STEPS] = steps;
    c[CAIRN__C_AUDIT] = audit;
    return cairn__counts_put(t, c);
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
        c[CAIRN__C_TOMBSTONES] -= old->tombstone && c[CAIRN__C_TOMBSTONES] > 0;
    }
    if (r) {
        c[r->state]++;
        c[CAIRN__C_TOMBSTONES] += r->tombstone != 0;
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
    uint64_t txn = mdb_txn_id(t->txn);
    task_encode(t, r, txn);
    MDB_val k = {strlen(r->id), (void *)r->id}, v = {t->buf.size, t->buf.data};
    rc = cairn__put(t, t->s->tasks, &k, &v, 0);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "write task");
    task_cache_set(t->buf.data, t->buf.size, r);
    tc.rec.txn = txn; /* as a read of these bytes decodes it */
    return index_move(t, had ? &old : NULL, r);
}

/* Deletes the task's records of one kind from the tasks tree (a split step record's tail with
 * its head), counting the step and audit records gone; kind 0: its progress records, in their
 * own database. */
static int del_kind(cairn__txn *t, const char *id, int kind)
{
    key p;
    if (kind)
        key_sub(&p, id, kind);
    else
        p.len = 0, key_str(&p, id), key_nul(&p);
    const void *prefix = p.b;
    size_t prefix_len = p.len;
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, kind ? t->s->tasks : t->s->progress, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = {prefix_len, (void *)prefix}, v;
    const cairn__join *mark = t->joins;
    rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size >= prefix_len && memcmp(k.mv_data, prefix, prefix_len) == 0) {
        rc = cairn__cursor_del(t, c);
        t->d_steps -= rc == 0 && kind == CAIRN__K_STEP;
        t->d_audit -= rc == 0 && kind == CAIRN__K_AUDIT;
        cairn__txn_joins_free(t, mark); /* the record just deleted was the only one read */
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
    key p;
    key_sub(&p, id, CAIRN__K_INPUT);
    MDB_val k = kv(&p);
    int rc = cairn__del(t, t->s->tasks, &k);
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
    if ((rc = del_kind(t, id, CAIRN__K_STEP)) || (rc = del_kind(t, id, 0)) ||
        (rc = del_kind(t, id, CAIRN__K_AUDIT)))
        return rc;
    if ((rc = input_del(t, id)))
        return rc;
    MDB_val k = {strlen(id), (void *)id};
    rc = cairn__del(t, t->s->tasks, &k);
    return rc ? cairn__mdb_fail(t, t->s, rc, "delete task") : 0;
}

int cairn__input_get(cairn__txn *t, const char *id, const void **data, size_t *len)
{
    key p;
    key_sub(&p, id, CAIRN__K_INPUT);
    MDB_val k = kv(&p), v;
    int rc = cairn__get(t, t->s->tasks, &k, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read task input");
    if (!cairn__mp_plausible(v.mv_data, v.mv_size))
        return cairn__store_fail(t->s, CAIRN_ECORRUPT, "corrupt input of task '%s' (%zu bytes)", id,
                                 (size_t)v.mv_size);
    *data = v.mv_data;
    *len = v.mv_size;
    return 0;
}

int cairn__input_put(cairn__txn *t, const char *id, const void *data, size_t len)
{
    key p;
    key_sub(&p, id, CAIRN__K_INPUT);
    MDB_val k = kv(&p), v = {len, (void *)data};
    int rc = cairn__put(t, t->s->tasks, &k, &v, 0);
    return rc ? cairn__mdb_fail(t, t->s, rc, "write task input") : 0;
}

int cairn__task_drop_outputs(cairn__txn *t, const char *id)
{
    int rc = del_kind(t, id, CAIRN__K_STEP);
    if (!rc)
        rc = del_kind(t, id, 0); /* progress */
    return rc ? rc : input_del(t, id);
}

/* An idem record holds the payload hash: its 32 bytes (schema 4), or 64 characters (a hash
 * that is not lowercase hex, and every schema-3 record). */
static size_t idem_encode(const char *hash, unsigned char out[64])
{
    if (unhex64(hash, 64, out))
        return 32;
    memcpy(out, hash, 64);
    return 64;
}

static void idem_decode(const MDB_val *v, char out[65])
{
    if (v->mv_size == 32) {
        cairn__hex(v->mv_data, 32, out);
        return;
    }
    size_t n = v->mv_size < 64 ? v->mv_size : 64;
    memcpy(out, v->mv_data, n);
    out[n] = 0;
}

int cairn__idem_reserve(cairn__txn *t, const char *id, const char *hash, char existing[65])
{
    unsigned char b[64];
    key kk;
    key_sub(&kk, id, CAIRN__K_IDEM);
    MDB_val k = kv(&kk), v = {idem_encode(hash, b), b};
    int rc = cairn__put(t, t->s->tasks, &k, &v, MDB_NOOVERWRITE);
    if (rc == 0)
        return 0;
    if (rc != MDB_KEYEXIST)
        return cairn__mdb_fail(t, t->s, rc, "reserve task ID");
    idem_decode(&v, existing);
    return strcmp(existing, hash) == 0 ? 0 : CAIRN_ECONFLICT;
}

int cairn__idem_del(cairn__txn *t, const char *id)
{
    key kk;
    key_sub(&kk, id, CAIRN__K_IDEM);
    MDB_val k = kv(&kk);
    int rc = cairn__del(t, t->s->tasks, &k);
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "delete task ID") : 0;
}

/* ------------------------------------------------------------------ steps */

/* A step record (schema 4), 7 fields: state, resolved, invocations, updated, intent, error,
 * output (bin, nil: none). The generation is the key's last four bytes. */
#define STEP_FIELDS 7

/* The record up to its output's bytes, which cairn__step_put copies in after it (once). */
static void step_encode(cairn__txn *t, const cairn__step_rec *r)
{
    msgpack_packer pk;
    pk_begin(t, &pk, STEP_FIELDS);
    msgpack_pack_uint8(&pk, r->state);
    msgpack_pack_uint8(&pk, r->resolved);
    msgpack_pack_uint32(&pk, r->invocations);
    msgpack_pack_int64(&pk, r->updated_ms);
    msgpack_pack_int64(&pk, r->intent_ms);
    pk_s(&pk, r->error);
    if (r->output) /* the header only: the output's bytes follow it in cairn__put2 */
        msgpack_pack_bin(&pk, r->output_len);
    else
        msgpack_pack_nil(&pk);
}

/* k: the record's key (id\0step\0gen), whose generation the record does not repeat. */
static int step_decode(cairn__txn *t, const MDB_val *k, const MDB_val *v, const char *what,
                       cairn__step_rec *o)
{
    rd r;
    int rc = rd_open(t, &r, v, STEP_FIELDS, "step", what);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        if ((rc = cairn__step_decode3(t, v, what, o)))
            return rc;
    } else {
        const unsigned char *g = (const unsigned char *)k->mv_data + k->mv_size - 4;
        o->generation = (uint32_t)g[0] << 24 | (uint32_t)g[1] << 16 | (uint32_t)g[2] << 8 | g[3];
        o->state = (uint8_t)rd_int(&r);
        o->resolved = (uint8_t)rd_int(&r);
        o->invocations = (uint32_t)rd_int(&r);
        o->updated_ms = rd_int(&r);
        o->intent_ms = rd_int(&r);
        rd_str(&r, o->error, sizeof o->error);
        rd_bin(&r, &o->output, &o->output_len);
        if ((rc = rd_close(t, &r, v, "step", what)))
            return rc;
    }
    if (o->output && !cairn__mp_plausible(o->output, o->output_len))
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "step '%s' has a corrupt output (%zu bytes) in store %s", what,
                                 o->output_len, t->s->dir);
    return 0;
}

int cairn__step_get(cairn__txn *t, const char *task, const char *step, uint32_t gen,
                    cairn__step_rec *out)
{
    key want, prefix;
    step_key(&want, CAIRN__K_STEP, task, step, gen);
    prefix.len = want.len - 4;
    memcpy(prefix.b, want.b, prefix.len);
    int rc = t->steps_cur ? 0 : mdb_cursor_open(t->txn, t->s->tasks, &t->steps_cur);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_cursor *c = t->steps_cur;
    /* The record applying in `gen` is the last key <= prefix|gen: usually gen's own, found by
     * an exact lookup, which needs no look at its neighbours. A miss there proves nothing (the
     * key may be damaged), so it goes on to the range search, whose misses are checked. */
    MDB_val k = kv(&want), v;
    rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_KEY);
    if (rc == MDB_NOTFOUND) {
        k = kv(&want);
        rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE);
        if (rc == 0 && !(k.mv_size == want.len && memcmp(k.mv_data, want.b, want.len) == 0))
            rc = cairn__cursor_get(t, c, &k, &v, MDB_PREV);
        else if (rc == MDB_NOTFOUND)
            rc = cairn__cursor_get(t, c, &k, &v, MDB_LAST);
        if (rc == 0 && (k.mv_size != want.len || memcmp(k.mv_data, prefix.b, prefix.len) != 0))
            rc = MDB_NOTFOUND;
    }
    if (rc == 0)
        rc = step_decode(t, &k, &v, step, out);
    else if (rc == MDB_NOTFOUND)
        rc = CAIRN_ENOTFOUND;
    else
        rc = cairn__mdb_fail(t, t->s, rc, "read step");
    return rc;
}

int cairn__step_put(cairn__txn *t, const char *task, const char *step, const cairn__step_rec *r)
{
    step_encode(t, r);
    key k;
    step_key(&k, CAIRN__K_STEP, task, step, r->generation);
    MDB_val kk = kv(&k), v = {t->buf.size, t->buf.data};
    int rc = cairn__put2(t, t->s->tasks, &kk, &v, r->output, r->output ? r->output_len : 0, 0);
    t->d_steps += rc == 0 && t->created;
    return rc ? cairn__mdb_fail(t, t->s, rc, "write step") : 0;
}

int cairn__step_each(cairn__txn *t, const char *task, cairn__step_cb cb, void *arg)
{
    key p;
    key_sub(&p, task, CAIRN__K_STEP);
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->tasks, &c);
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
        if ((rc = step_decode(t, &k, &v, name, &r)))
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
    step_key(&k, 0, task, step, gen);
    MDB_val kk = kv(&k), v;
    int rc = cairn__get(t, t->s->progress, &kk, &v);
    if (rc == MDB_NOTFOUND)
        return CAIRN_ENOTFOUND;
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "read progress");
    if (!cairn__mp_plausible(v.mv_data, v.mv_size))
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
    step_key(&k, 0, task, step, gen);
    MDB_val kk = kv(&k), v = {len, (void *)data};
    int rc = data ? cairn__put(t, t->s->progress, &kk, &v, 0) : cairn__del(t, t->s->progress, &kk);
    return rc && rc != MDB_NOTFOUND ? cairn__mdb_fail(t, t->s, rc, "write progress") : 0;
}

/* ------------------------------------------------------------------ audit, messages */

/* An audit record (schema 4), 7 fields: time, from, to, attempt, generation, step, reason. */
#define AUDIT_FIELDS 7

static void audit_encode(cairn__txn *t, const cairn__audit_rec *a)
{
    msgpack_packer pk;
    pk_begin(t, &pk, AUDIT_FIELDS);
    msgpack_pack_int64(&pk, a->t_ms);
    msgpack_pack_uint8(&pk, a->from);
    msgpack_pack_uint8(&pk, a->to);
    msgpack_pack_uint32(&pk, a->attempt);
    msgpack_pack_uint32(&pk, a->generation);
    pk_s(&pk, a->step);
    pk_s(&pk, a->reason);
}

static int audit_decode(cairn__txn *t, const MDB_val *v, const char *task, cairn__audit_rec *a)
{
    rd r;
    int rc = rd_open(t, &r, v, AUDIT_FIELDS, "audit", task);
    if (rc <= 0)
        return rc < 0 ? rc : cairn__audit_decode3(t, v, task, a);
    a->t_ms = rd_int(&r);
    a->from = (uint8_t)rd_int(&r);
    a->to = (uint8_t)rd_int(&r);
    a->attempt = (uint32_t)rd_int(&r);
    a->generation = (uint32_t)rd_int(&r);
    rd_str(&r, a->step, sizeof a->step);
    rd_str(&r, a->reason, sizeof a->reason);
    return rd_close(t, &r, v, "audit", task);
}

int cairn__audit_append(cairn__txn *t, cairn__task_rec *task, const cairn__audit_rec *a)
{
    audit_encode(t, a);
    /* The sequence number comes from the task's last audit key, not from the task record, so
     * appending an audit record does not force the task record to be rewritten. */
    key k;
    key_sub(&k, task->id, CAIRN__K_AUDIT);
    key_u64(&k, UINT64_MAX);
    size_t plen = k.len - 8;
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->tasks, &c);
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
    rc = cairn__put(t, t->s->tasks, &kk, &v, 0);
    t->d_audit += rc == 0;
    return rc ? cairn__mdb_fail(t, t->s, rc, "append audit record") : 0;
}

int cairn__audit_each(cairn__txn *t, const char *task, cairn__audit_cb cb, void *arg)
{
    key p;
    key_sub(&p, task, CAIRN__K_AUDIT);
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, t->s->tasks, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k = kv(&p), v;
    for (rc = cairn__cursor_get(t, c, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT)) {
        if (k.mv_size != p.len + 8 || memcmp(k.mv_data, p.b, p.len) != 0)
            break;
        cairn__audit_rec a;
        if ((rc = audit_decode(t, &v, task, &a)))
            break;
        if ((rc = cb(&a, arg)))
            break;
    }
    mdb_cursor_close(c);
    return cairn__scan_end(t, rc, "read audit records");
}
/* ------------------------------------------------------------------ the upgrade to schema 4 */

/* Record r of dbi in the schema-4 form, in t->buf (out): 1 if it has one that differs from v, 0
 * if it is already in it or is left as it is - a record that does not decode stays, to be
 * reported where it is read, as it would have been (cairn check names it). */
static int recode(cairn__txn *t, MDB_dbi dbi, const MDB_val *k, const MDB_val *v, MDB_val *out)
{
    cairn_store *s = t->s;
    char id[CAIRN__ID_MAX + 1];
    size_t n = k->mv_size < CAIRN__ID_MAX ? k->mv_size : CAIRN__ID_MAX;
    memcpy(id, k->mv_data, n);
    id[n] = 0; /* the task ID, up to its NUL in a step or audit key */
    if (dbi == s->tasks) {
        cairn__task_rec r;
        if (task_decode(t, v, id, &r))
            return 0;
        task_encode(t, &r, r.txn);
    } else if (dbi == s->old_steps) {
        cairn__step_rec r;
        if (k->mv_size < 6 || step_decode(t, k, v, "", &r))
            return 0;
        step_encode(t, &r);
        if (r.output) /* the whole record here: its output is read from the map */
            msgpack_sbuffer_write(&t->buf, r.output, r.output_len);
    } else if (dbi == s->old_audit) {
        cairn__audit_rec a;
        if (audit_decode(t, v, id, &a))
            return 0;
        audit_encode(t, &a);
    } else {
        unsigned char b[64];
        if (v->mv_size != 64 || idem_encode(v->mv_data, b) != 32)
            return 0;
        msgpack_sbuffer_clear(&t->buf);
        msgpack_sbuffer_write(&t->buf, (const char *)b, 32);
    }
    *out = (MDB_val){t->buf.size, t->buf.data};
    return out->mv_size != v->mv_size || memcmp(out->mv_data, v->mv_data, v->mv_size) != 0;
}

/* Rewrites every record of dbi that has a schema-4 form it is not in. The cursor is placed
 * again after each put, which may move records between pages (as cairn__sum_seal_all does). */
static int upgrade_db(cairn__txn *t, MDB_dbi dbi)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, dbi, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    MDB_val k, v;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (!cairn__sum_ok(t->s, dbi, &k, &v))
            continue; /* damaged: left for cairn check to name */
        key kb;
        if (k.mv_size > sizeof kb.b)
            continue;
        memcpy(kb.b, k.mv_data, k.mv_size);
        kb.len = k.mv_size;
        MDB_val kk = kv(&kb), body = {v.mv_size - cairn__sum_len(0), v.mv_data}, out;
        if (!recode(t, dbi, &kk, &body, &out))
            continue;
        if ((rc = cairn__put(t, dbi, &kk, &out, 0)) ||
            (rc = mdb_cursor_get(c, &kk, &v, MDB_SET_KEY)))
            break;
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : cairn__mdb_fail(t, t->s, rc, "upgrade the store to schema 4");
}

int cairn__records_upgrade(cairn__txn *t)
{
    const MDB_dbi dbis[] = {t->s->tasks, t->s->old_steps, t->s->old_audit, t->s->old_idem};
    int rc = 0;
    for (size_t i = 0; i < sizeof dbis / sizeof *dbis && !rc; i++)
        rc = upgrade_db(t, dbis[i]);
    return rc;
}

/* ------------------------------------------------------------------ the upgrade to schema 6 */

/* Moves every record of schema 5's database `from` into tasks, the kind byte put after its key's
 * ID (an input's key is the ID alone: NUL and kind appended). A record that verifies (a split one
 * joined with its tail) is written again, sealed under its new key and split there as its size
 * asks; one that does not is moved as it is, to be reported where it is read (cairn check names
 * it), as it would have been. A tail goes with its head: those left over name no record. */
static int move_db(cairn__txn *t, MDB_dbi from, int kind, uint64_t *moved)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(t->txn, from, &c);
    if (rc)
        return cairn__mdb_fail(t, t->s, rc, "open cursor");
    const cairn__join *mark = t->joins;
    unsigned char *buf = NULL;
    size_t cap = 0;
    MDB_val k, v;
    for (rc = cairn__cursor_get(t, c, &k, &v, MDB_FIRST); rc == 0 || rc == CAIRN_ECORRUPT;
         rc = cairn__cursor_get(t, c, &k, &v, MDB_NEXT)) {
        int bad = rc == CAIRN_ECORRUPT;
        if (bad && (rc = mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT)))
            break;
        size_t idn;
        cairn__key_kind(&k, &idn);
        size_t rest = idn < k.mv_size ? k.mv_size - idn - 1 : 0, nk = idn + 2 + rest;
        if (nk + v.mv_size > cap) {
            unsigned char *b = realloc(buf, nk + v.mv_size);
            if (!b) {
                rc = cairn__store_fail(t->s, CAIRN_ENOMEM, "out of memory upgrading store %s",
                                       t->s->dir);
                break;
            }
            buf = b, cap = nk + v.mv_size;
        }
        memcpy(buf, k.mv_data, idn);
        buf[idn] = 0, buf[idn + 1] = (unsigned char)kind;
        memcpy(buf + idn + 2, (const unsigned char *)k.mv_data + idn + 1, rest);
        memcpy(buf + nk, v.mv_data, v.mv_size);
        MDB_val kk = {nk, buf}, vv = {v.mv_size, buf + nk};
        rc = bad ? cairn__put_bare(t, t->s->tasks, &kk, &vv)
                 : cairn__put(t, t->s->tasks, &kk, &vv, 0);
        cairn__txn_joins_free(t, mark);
        if (rc) {
            rc = cairn__mdb_fail(t, t->s, rc, "upgrade the store to schema 6");
            break;
        }
        ++*moved;
    }
    free(buf);
    mdb_cursor_close(c);
    return cairn__scan_end(t, rc, "upgrade the store to schema 6");
}

int cairn__records_move(cairn__txn *t, uint64_t *steps, uint64_t *audit)
{
    cairn_store *s = t->s;
    uint64_t inputs = 0, idem = 0;
    *steps = *audit = 0;
    int rc = move_db(t, s->old_inputs, CAIRN__K_INPUT, &inputs);
    if (!rc)
        rc = move_db(t, s->old_idem, CAIRN__K_IDEM, &idem);
    if (!rc)
        rc = move_db(t, s->old_steps, CAIRN__K_STEP, steps);
    if (!rc)
        rc = move_db(t, s->old_audit, CAIRN__K_AUDIT, audit);
    return rc;
}
