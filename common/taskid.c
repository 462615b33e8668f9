/* common/taskid.c - task IDs: a small alphabet that is safe in file names, URLs, shell words and
 * LMDB keys, and IDs derived from the input (its payload hash, or named business fields), so that
 * the same business action always gets the same ID. */
#include "common/taskid.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "common/json.h"
#include "common/str.h"

static int id_byte_ok(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

/* Offset of the first byte not allowed in a task ID, or len if all are allowed. */
static size_t id_bad_byte(const char *id, size_t len)
{
    size_t i;
    for (i = 0; i < len && id_byte_ok((unsigned char)id[i]); i++)
        ;
    return i;
}

static void describe_bad_byte(char *err, size_t errlen, const char *what, size_t off,
                              unsigned char c)
{
    if (c > 0x20 && c < 0x7F)
        cairn__seterr(err, errlen, "%s byte %zu is '%c' (0x%02x); allowed are A-Z a-z 0-9 . _ : -",
                      what, off, c, c);
    else
        cairn__seterr(err, errlen, "%s byte %zu is 0x%02x; allowed are A-Z a-z 0-9 . _ : -", what,
                      off, c);
}

int cairn__task_id_check(const char *id, char *err, size_t errlen)
{
    size_t len, bad;
    if (!id)
        return CAIRN_EINVAL;
    len = strlen(id);
    if (len == 0) {
        cairn__seterr(err, errlen, "task ID is empty");
        return CAIRN_ETASKID;
    }
    if (len > CAIRN__TASK_ID_MAX) {
        cairn__seterr(err, errlen, "task ID is %zu bytes, limit is %d", len, CAIRN__TASK_ID_MAX);
        return CAIRN_ETASKID;
    }
    if ((bad = id_bad_byte(id, len)) < len) {
        describe_bad_byte(err, errlen, "task ID", bad, (unsigned char)id[bad]);
        return CAIRN_ETASKID;
    }
    return 0;
}

/* The task-ID text of a field value: a string as-is, an integer in decimal (in num). A real
 * with an integral value up to 2^53 counts as that integer: JCS, and so the payload hash, does
 * not tell 7.0 from 7. NULL for any other value. */
static const char *id_text(const json_t *v, char num[32], size_t *len)
{
    double r = json_is_real(v) ? json_real_value(v) : 0.5;
    if (json_is_string(v)) {
        *len = json_string_length(v);
        return json_string_value(v);
    }
    if (json_is_integer(v))
        *len = (size_t)snprintf(num, 32, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (r == floor(r) && fabs(r) <= 9007199254740992.0)
        *len = (size_t)snprintf(num, 32, "%lld", (long long)r);
    else
        return NULL;
    return num;
}

/* Appends one piece of a derived ID, checking it first so that an error can say where the
 * offending byte came from (`what`: "the graph name", "field \"tenant\""). */
static int put_id_piece(struct cairn__sbuf *b, const char *s, size_t n, const char *what, char *err,
                        size_t errlen)
{
    size_t bad = id_bad_byte(s, n);
    char w[160];
    if (bad < n) {
        snprintf(w, sizeof w, "derived task ID (from %s)", what);
        describe_bad_byte(err, errlen, w, b->len + bad, (unsigned char)s[bad]);
        return CAIRN_ETASKID;
    }
    cairn__sb_put(b, s, n);
    return 0;
}

int cairn__task_id_derive(const char *graph, const json_t *input, const char *fields, char *out,
                          size_t outlen, char *err, size_t errlen)
{
    struct cairn__sbuf b = {0};
    char what[160], num[32], h[65];
    const char *p, *q, *text;
    size_t nlen, tlen;
    const json_t *v;
    int rc = 0;

    if (!graph || !input || !out)
        return CAIRN_EINVAL;
    if (!json_is_object(input)) {
        cairn__seterr(err, errlen, "task input must be a JSON object, not %s",
                      cairn__json_type_name(input));
        return CAIRN_EJSON;
    }
    if (!fields && (rc = cairn__payload_hash(input, h)) == 0 &&
        (rc = put_id_piece(&b, graph, strlen(graph), "the graph name", err, errlen)) == 0) {
        cairn__sb_put(&b, "_", 1);
        cairn__sb_put(&b, h, 16);
    }
    for (p = fields; rc == 0 && p; p = q ? q + 1 : NULL) {
        q = strchr(p, ',');
        nlen = q ? (size_t)(q - p) : strlen(p);
        snprintf(what, sizeof what, "field \"%.*s\"", (int)(nlen > 100 ? 100 : nlen), p);
        if (nlen == 0) {
            cairn__seterr(err, errlen, "empty field name in the task-ID field list \"%s\"", fields);
            rc = CAIRN_EINVAL;
        } else if (!(v = json_object_getn(input, p, nlen))) {
            cairn__seterr(err, errlen, "input has no %s (named in the task-ID fields)", what);
            rc = CAIRN_EJSON;
        } else if (!(text = id_text(v, num, &tlen))) {
            cairn__seterr(
                err, errlen, "task-ID %s is %s%s; only strings and integers can form a task ID",
                what, cairn__json_type_name(v), json_is_real(v) ? " that is not an integer" : "");
            rc = CAIRN_EJSON;
        } else if (tlen == 0) {
            /* an empty business key identifies nothing, and "a_" + "" would collide with "a_" */
            cairn__seterr(err, errlen, "task-ID %s is an empty string", what);
            rc = CAIRN_ETASKID;
        } else {
            if (p != fields)
                cairn__sb_put(&b, "_", 1);
            rc = put_id_piece(&b, text, tlen, what, err, errlen);
        }
    }
    if (rc == 0 && b.oom) {
        rc = CAIRN_ENOMEM;
    } else if (rc == 0 && b.len == 0) {
        cairn__seterr(err, errlen,
                      "derived task ID is empty (the task-ID fields hold empty strings)");
        rc = CAIRN_ETASKID;
    } else if (rc == 0 && b.len > CAIRN__TASK_ID_MAX) {
        cairn__seterr(err, errlen, "derived task ID is %zu bytes, limit is %d", b.len,
                      CAIRN__TASK_ID_MAX);
        rc = CAIRN_ETASKID;
    } else if (rc == 0 && b.len + 1 > outlen) {
        cairn__seterr(err, errlen, "task ID buffer of %zu bytes is too small for %zu", outlen,
                      b.len + 1);
        rc = CAIRN_EINVAL;
    } else if (rc == 0) {
        memcpy(out, b.p, b.len + 1);
    }
    free(b.p);
    return rc;
}
