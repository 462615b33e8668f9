/* checkpoint/records3.c - the records of schema 3 and before: msgpack maps keyed by field name.
 *
 * Schema 4 packs records as arrays with fixed positions (records.c); this file only reads the old
 * form, for the one transaction that converts a store when a writer first opens it, and for any
 * map record met later (a store a test planted one in): records.c sends every record whose first
 * byte is a map here. Fields are looked up by name, so a record missing one reads it as zero or
 * empty, as before, and a record that names a newer schema version is refused (CAIRN_ESCHEMA).
 */
#include <string.h>

#include "checkpoint/store_impl.h"

/* A decoded record: the fields are looked up by name. The objects live in the transaction's
 * zone (reused from record to record, cleared by rec_close); strings and bins point into the
 * LMDB value. Decoders read fields in the order the encoders write them, so a lookup that
 * starts where the previous one matched finds its field at once. */
typedef struct rec {
    msgpack_zone *zone;
    msgpack_object_map map;
    uint32_t hint;
} rec;

static int rec_open(cairn__txn *t, rec *r, const MDB_val *v, const char *what, const char *id)
{
    if (!t->zone_ready) {
        if (!msgpack_zone_init(&t->zone, 2048))
            return cairn__store_fail(t->s, CAIRN_ENOMEM, "out of memory decoding a record");
        t->zone_ready = 1;
    }
    size_t off = 0;
    msgpack_object o;
    msgpack_unpack_return ur = cairn__mp_plausible(v->mv_data, v->mv_size)
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

int cairn__task_decode3(cairn__txn *t, const MDB_val *v, const char *id, cairn__task_rec *o)
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
    /* writes key a record by its id field: a mismatch would write a different task */
    if (strcmp(o->id, id) != 0)
        return cairn__store_fail(t->s, CAIRN_ECORRUPT,
                                 "task record under key '%s' names task '%s' in store %s", id,
                                 o->id, t->s->dir);
    return 0;
}

int cairn__step_decode3(cairn__txn *t, const MDB_val *v, const char *what, cairn__step_rec *o)
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
    rec_close(&r); /* the output points into the LMDB value, not the zone */
    return 0;
}

int cairn__audit_decode3(cairn__txn *t, const MDB_val *v, const char *task, cairn__audit_rec *a)
{
    rec r;
    int rc = rec_open(t, &r, v, "audit", task);
    if (rc)
        return rc;
    memset(a, 0, sizeof *a);
    a->t_ms = rec_int(&r, "t");
    a->from = (uint8_t)rec_int(&r, "from");
    a->to = (uint8_t)rec_int(&r, "to");
    a->attempt = (uint32_t)rec_int(&r, "attempt");
    a->generation = (uint32_t)rec_int(&r, "gen");
    rec_str(&r, "step", a->step, sizeof a->step);
    rec_str(&r, "reason", a->reason, sizeof a->reason);
    rec_close(&r);
    return 0;
}
