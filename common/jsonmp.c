/* jsonmp.c - task inputs and step outputs between jansson and msgpack.
 *
 * Inputs are parsed as JSON (json.c) but travel to steps and into the store as msgpack. Packing
 * writes object members in RFC 8785 (JCS) key order, the order the payload hash sees, so equal
 * inputs give equal bytes however their keys were ordered.
 *
 * Unpacking (for `cairn show` and for steps that post JSON, such as notify) reads msgpack that
 * steps wrote, which can say things JSON cannot: bin, ext, uints above INT64_MAX, NaN, non-string
 * keys, invalid UTF-8 in a str. Each gets one fixed JSON form (documented in common/json.h) instead
 * of an error, so a record can always be shown; only running out of memory or nesting deeper than
 * 1024 fails.
 */
#include "common/json.h"
#include "common/canon_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/str.h"
#include "common/utf8.h"

/* Recursion bound for msgpack objects built in code (unpacked ones are bounded by msgpack-c). */
#define MP_TO_JSON_MAX_DEPTH 1024

static int pack(const json_t *v, msgpack_packer *pk, int depth)
{
    struct cairn__member *m;
    long cnt;
    size_t i, n;
    int rc = 0;
    if ((json_is_object(v) || json_is_array(v)) && depth >= CAIRN__MAX_DEPTH)
        return CAIRN_EINVAL; /* msgpack-c could not unpack it */
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        if ((cnt = cairn__sorted_members(v, &m)) < 0)
            return CAIRN_ENOMEM;
        rc = msgpack_pack_map(pk, (size_t)cnt) ? CAIRN_ENOMEM : 0;
        for (i = 0; rc == 0 && i < (size_t)cnt; i++) {
            if (msgpack_pack_str(pk, m[i].klen) || msgpack_pack_str_body(pk, m[i].key, m[i].klen))
                rc = CAIRN_ENOMEM;
            else
                rc = pack(m[i].val, pk, depth + 1);
        }
        free(m);
        return rc;
    case JSON_ARRAY:
        rc = msgpack_pack_array(pk, n = json_array_size(v)) ? CAIRN_ENOMEM : 0;
        for (i = 0; rc == 0 && i < n; i++)
            rc = pack(json_array_get(v, i), pk, depth + 1);
        return rc;
    case JSON_STRING:
        n = json_string_length(v);
        rc = msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, json_string_value(v), n);
        break;
    case JSON_INTEGER:
        rc = msgpack_pack_int64(pk, json_integer_value(v));
        break;
    case JSON_REAL:
        rc = msgpack_pack_double(pk, json_real_value(v));
        break;
    case JSON_TRUE:
    case JSON_FALSE:
        rc = json_is_true(v) ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
        break;
    case JSON_NULL:
        rc = msgpack_pack_nil(pk);
        break;
    }
    return rc ? CAIRN_ENOMEM : 0;
}

int cairn__json_to_msgpack(const json_t *v, msgpack_packer *pk)
{
    if (!v || !pk)
        return CAIRN_EINVAL;
    return pack(v, pk, 0);
}

/* A jansson string from msgpack str bytes, each invalid UTF-8 byte replaced by U+FFFD. */
static json_t *json_from_str(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    struct cairn__sbuf b = {0};
    size_t i = 0, k, run = 0;
    uint32_t cp;
    json_t *j;
    while (i < n) {
        if ((k = cairn__utf8_get(u + i, n - i, &cp))) {
            i += k;
            continue;
        }
        cairn__sb_put(&b, s + run, i - run);
        cairn__sb_put(&b, "\xEF\xBF\xBD", 3);
        run = ++i;
    }
    if (run == 0) /* msgpack-c gives a NULL ptr for an empty str; jansson refuses NULL */
        return json_stringn_nocheck(n ? s : "", n);
    cairn__sb_put(&b, s + run, n - run);
    j = b.oom ? NULL : json_stringn_nocheck(b.p, b.len);
    free(b.p);
    return j;
}

static json_t *json_base64(const char *data, size_t n)
{
    /* EVP_EncodeBlock takes an int length: encode in slices of whole 3-byte groups. */
    const size_t slice = 3u << 20;
    size_t outcap = 4 * ((n + 2) / 3) + 1, o = 0, i;
    unsigned char *buf = malloc(outcap);
    json_t *j;
    if (!buf)
        return NULL;
    for (i = 0; i < n; i += slice) {
        size_t m = n - i < slice ? n - i : slice;
        o += (size_t)EVP_EncodeBlock(buf + o, (const unsigned char *)data + i, (int)m);
    }
    j = json_stringn_nocheck((const char *)buf, o);
    free(buf);
    return j;
}

static json_t *mp_to_json(const msgpack_object *o, int depth)
{
    uint32_t i;
    json_t *j;
    if (depth > MP_TO_JSON_MAX_DEPTH)
        return NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return json_null();
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 <= (uint64_t)INT64_MAX)
            return json_integer((json_int_t)o->via.u64);
        return json_real((double)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return isfinite(o->via.f64) ? json_real(o->via.f64) : json_null();
    case MSGPACK_OBJECT_STR:
        return json_from_str(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_BIN:
        return json_base64(o->via.bin.ptr, o->via.bin.size);
    case MSGPACK_OBJECT_EXT:
        return json_base64(o->via.ext.ptr, o->via.ext.size);
    case MSGPACK_OBJECT_ARRAY:
        if (!(j = json_array()))
            return NULL;
        for (i = 0; i < o->via.array.size; i++) {
            if (json_array_append_new(j, mp_to_json(&o->via.array.ptr[i], depth + 1))) {
                json_decref(j);
                return NULL;
            }
        }
        return j;
    case MSGPACK_OBJECT_MAP:
        if (!(j = json_object()))
            return NULL;
        for (i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            json_t *k = mp_to_json(&kv->key, depth + 1), *v = NULL;
            char *text = NULL; /* a key that is not a string becomes its JSON text */
            size_t tlen = 0;
            int rc = -1;
            if (k && (json_is_string(k) || cairn__canon_json(k, &text, &tlen) == 0) &&
                (v = mp_to_json(&kv->val, depth + 1)))
                rc = json_object_setn_new_nocheck(j, text ? text : json_string_value(k),
                                                  text ? tlen : json_string_length(k), v);
            json_decref(k);
            free(text);
            if (rc) {
                json_decref(j);
                return NULL;
            }
        }
        return j;
    }
    return NULL;
}

json_t *cairn__msgpack_to_json(const msgpack_object *o) { return o ? mp_to_json(o, 0) : NULL; }
