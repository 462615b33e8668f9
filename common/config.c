/* common/config.c - the configuration reader (config.h): table rows applied to a struct.
 *
 * One idea: a row is both the rule and the documentation of a key, so the type check, the range,
 * the default, the message and the ownership of the member are decided in one place for every
 * step. Members are written through their offset and size (an INT row may fill an int or a
 * size_t); a row's range must fit its member, which the tables guarantee by construction.
 */
#include "common/config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/json.h"
#include "common/str.h"

int cairn__cfg_open(cairn__cfg *r, const json_t *obj, const char *path, const char *base_dir,
                    char *err, size_t errlen)
{
    *r = (cairn__cfg){obj, path, base_dir, err, errlen};
    if (err && errlen)
        err[0] = 0;
    if (obj && !json_is_object(obj))
        return cairn__cfg_fail(r, CAIRN_EJSON, NULL, "must be an object");
    return 0;
}

int cairn__cfg_fail(const cairn__cfg *r, int code, const char *field, const char *fmt, ...)
{
    if (!r->err || !r->errlen)
        return code;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *dot = field && r->path[0] ? "." : "";
    cairn__seterr(r->err, r->errlen, "%s%s%s: %s", r->path, dot, field ? field : "", msg);
    return code;
}

const cairn__cfg_field *cairn__cfg_declared(const cairn__cfg_field *const *tables, const char *key)
{
    for (; *tables; tables++)
        for (const cairn__cfg_field *f = *tables; f->key; f++)
            if (strcmp(f->key, key) == 0)
                return f;
    return NULL;
}

int cairn__cfg_version(const cairn__cfg *r, const cairn__cfg_field *const *tables,
                       uint32_t *version)
{
    *version = 1;
    if (!r->obj)
        return 0;
    json_t *what = json_copy((json_t *)r->obj); /* shallow: only keys are dropped */
    const char *key;
    json_t *v;
    void *tmp;
    char *canon = NULL, hex[65] = "";
    size_t n = 0;
    json_object_foreach_safe(what, tmp, key, v)
    {
        const cairn__cfg_field *f = cairn__cfg_declared(tables, key);
        if (f && f->tuning)
            json_object_del(what, key);
    }
    if (what && cairn__canon_json(what, &canon, &n) == 0)
        cairn__sha256_hex(canon, n, hex);
    free(canon);
    json_decref(what);
    if (!hex[0]) /* the section was checked: only memory can fail (OpenSSL's too) */
        return cairn__cfg_fail(r, CAIRN_ENOMEM, NULL, "out of memory");
    /* the first 32 bits of the hash, as a positive int32, from 1 (0 is no version) */
    *version = (uint32_t)(strtoul((char[9]){hex[0], hex[1], hex[2], hex[3], hex[4], hex[5], hex[6],
                                            hex[7], 0},
                                  NULL, 16) %
                          0x7fffffffu) +
               1;
    return 0;
}

int cairn__cfg_check_keys(const cairn__cfg *r, const cairn__cfg_field *const *tables,
                          const char *unknown)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)r->obj, key, v)
    {
        if (!cairn__cfg_declared(tables, key))
            return cairn__cfg_fail(r, CAIRN_EJSON, key, "%s", unknown ? unknown : "unknown field");
    }
    return 0;
}

/* ------------------------------------------------------------------ one value */

static void *member(void *base, const cairn__cfg_field *f) { return (char *)base + f->off; }

static int oom(const cairn__cfg *r, const char *field)
{
    return cairn__cfg_fail(r, CAIRN_ENOMEM, field, "out of memory");
}

/* A JSON string as a C string: the message for anything else, NULL when it is one. */
static const char *bad_string(const json_t *v, int nonempty)
{
    if (!json_is_string(v))
        return "must be a string";
    if (nonempty && json_string_length(v) == 0)
        return "must not be empty";
    if (strlen(json_string_value(v)) != json_string_length(v))
        return "must not contain NUL characters";
    return NULL;
}

/* "base/s" for a relative s when there is a base folder, else a copy of s. */
static char *resolve(const char *s, const char *base)
{
    if (s[0] == '/' || !base)
        return strdup(s);
    size_t n = strlen(base) + strlen(s) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", base, s);
    return p;
}

static int read_str(const cairn__cfg *r, const cairn__cfg_field *f, const json_t *v, void *base)
{
    const char *bad = v ? bad_string(v, f->nonempty) : NULL;
    if (bad)
        return cairn__cfg_fail(r, CAIRN_EJSON, f->key, "%s", bad);
    const char *s = v ? json_string_value(v) : f->sdef;
    char **out = member(base, f);
    if (!s)
        return 0;
    *out = f->type == CAIRN__CFG_PATH ? resolve(s, r->base_dir) : strdup(s);
    return *out ? 0 : oom(r, f->key);
}

/* "must be an integer from 1 to 1048576 (milliseconds)": an INT or NUM row's rule. */
static int range_fail(const cairn__cfg *r, const cairn__cfg_field *f)
{
    const int integer = f->type == CAIRN__CFG_INT;
    const char *unit = f->unit ? f->unit : "", *sp = *unit ? " " : "";
    if (integer && f->lo == 0 && f->hi == CAIRN__CFG_NO_MAX)
        return cairn__cfg_fail(r, CAIRN_EJSON, f->key, "must be a non-negative integer%s%s", sp,
                               unit);
    char lo[40], hi[40];
    snprintf(lo, sizeof lo, integer ? "%.0f" : "%g", f->lo);
    snprintf(hi, sizeof hi, integer ? "%.0f" : "%g", f->hi);
    return cairn__cfg_fail(r, CAIRN_EJSON, f->key, "must be %s from %s to %s%s%s",
                           integer ? "an integer" : "a number", lo, hi, sp, unit);
}

/* An INT or NUM row: the value is checked as a double (the ranges are far inside 2^53) and
 * stored in the member's own width. */
static int read_number(const cairn__cfg *r, const cairn__cfg_field *f, const json_t *v, void *base)
{
    const int integer = f->type == CAIRN__CFG_INT;
    double x = f->def;
    long long ix = (long long)f->def;
    if (v) {
        if (integer ? !json_is_integer(v) : !json_is_number(v))
            return range_fail(r, f);
        x = json_number_value(v);
        if (x < f->lo || x > f->hi)
            return range_fail(r, f);
        ix = integer ? json_integer_value(v) : 0;
    }
    void *m = member(base, f);
    if (integer && f->size == sizeof(int32_t))
        memcpy(m, &(int32_t){(int32_t)ix}, sizeof(int32_t));
    else if (integer)
        memcpy(m, &(int64_t){ix}, sizeof(int64_t));
    else if (f->size == sizeof(float))
        memcpy(m, &(float){(float)x}, sizeof(float));
    else
        memcpy(m, &x, sizeof x);
    return 0;
}

/* "must be "a", "b" or "c"" into b: the choices as the message lists them. */
static void list_choices(struct cairn__sbuf *b, const char *const *c)
{
    cairn__sb_puts(b, "must be ");
    for (size_t i = 0; c[i]; i++) {
        cairn__sb_puts(b, i == 0 ? "\"" : c[i + 1] ? ", \"" : " or \"");
        cairn__sb_puts(b, c[i]);
        cairn__sb_puts(b, "\"");
    }
}

static int read_enum(const cairn__cfg *r, const cairn__cfg_field *f, const json_t *v, void *base)
{
    const char *s = v && json_is_string(v) ? json_string_value(v) : f->sdef;
    int i = 0;
    while (f->choices[i] && (!s || strcmp(f->choices[i], s) != 0))
        i++;
    if (f->choices[i] && (!v || json_is_string(v))) {
        memcpy(member(base, f), &i, sizeof i);
        return 0;
    }
    struct cairn__sbuf b = {0};
    list_choices(&b, f->choices);
    if (v && json_is_string(v))
        cairn__sb_puts(&b, ", not \""), cairn__sb_put(&b, s, strnlen(s, 40)),
            cairn__sb_puts(&b, "\"");
    int rc = b.oom ? oom(r, f->key) : cairn__cfg_fail(r, CAIRN_EJSON, f->key, "%s", b.p);
    free(b.p);
    return rc;
}

static int read_strs(const cairn__cfg *r, const cairn__cfg_field *f, const json_t *v, void *base)
{
    if (!v)
        return 0;
    if (!json_is_array(v) || (f->nonempty && json_array_size(v) == 0))
        return cairn__cfg_fail(r, CAIRN_EJSON, f->key, "must be %s array of strings",
                               f->nonempty ? "a non-empty" : "an");
    char ***out = member(base, f);
    size_t *n = (size_t *)((char *)base + f->count_off);
    if (!(*out = calloc(json_array_size(v) + 1, sizeof **out)))
        return oom(r, f->key);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        char at[96];
        snprintf(at, sizeof at, "%s[%zu]", f->key, i);
        const char *bad = bad_string(e, 1);
        if (bad)
            return cairn__cfg_fail(
                r, CAIRN_EJSON, at, "%s",
                json_is_string(e) && json_string_length(e) ? bad : "must be a non-empty string");
        if (!((*out)[i] = strdup(json_string_value(e))))
            return oom(r, at);
        *n = i + 1;
    }
    return 0;
}

int cairn__cfg_read_field(const cairn__cfg *r, const cairn__cfg_field *f, void *base)
{
    const json_t *v = json_object_get(r->obj, f->key);
    if (!v && f->required)
        return cairn__cfg_fail(r, CAIRN_EJSON, f->key, "%s", f->required);
    switch (f->type) {
    case CAIRN__CFG_STR:
    case CAIRN__CFG_PATH:
        return read_str(r, f, v, base);
    case CAIRN__CFG_BOOL: {
        if (v && !json_is_boolean(v))
            return cairn__cfg_fail(r, CAIRN_EJSON, f->key, "must be true or false");
        int b = v ? json_is_true(v) : f->def != 0;
        memcpy(member(base, f), &b, sizeof b);
        return 0;
    }
    case CAIRN__CFG_INT:
    case CAIRN__CFG_NUM:
        return read_number(r, f, v, base);
    case CAIRN__CFG_ENUM:
        return read_enum(r, f, v, base);
    case CAIRN__CFG_STRS:
        return read_strs(r, f, v, base);
    case CAIRN__CFG_OTHER:
        break;
    }
    return 0;
}

int cairn__cfg_read(const cairn__cfg *r, const cairn__cfg_field *table, void *base)
{
    int rc = 0;
    for (const cairn__cfg_field *f = table; !rc && f->key; f++)
        rc = cairn__cfg_read_field(r, f, base);
    return rc;
}

int cairn__cfg_parse(const cairn__cfg_section *s, const json_t *obj, const char *base_dir,
                     void *out, char *err, size_t errlen)
{
    const cairn__cfg_field *const tables[] = {s->fields, NULL};
    cairn__cfg r;
    void *base = NULL;
    int rc = cairn__cfg_open(&r, obj, s->path, base_dir, err, errlen);
    if (!rc)
        rc = cairn__cfg_check_keys(&r, tables, NULL);
    if (!rc && !(base = calloc(1, s->size)))
        rc = cairn__cfg_fail(&r, CAIRN_ENOMEM, NULL, "out of memory");
    if (!rc)
        rc = cairn__cfg_read(&r, s->fields, base);
    if (!rc && s->finish)
        rc = s->finish(&r, base);
    if (rc && base) {
        cairn__cfg_release(s->fields, base);
        free(base);
        base = NULL;
    }
    memcpy(out, &base, sizeof base); /* out is a T **: a T * has a void *'s representation */
    return rc;
}

void cairn__cfg_release(const cairn__cfg_field *table, void *base)
{
    for (const cairn__cfg_field *f = table; f->key; f++) {
        if (f->type == CAIRN__CFG_STR || f->type == CAIRN__CFG_PATH) {
            char **s = member(base, f);
            free(*s);
            *s = NULL;
        } else if (f->type == CAIRN__CFG_STRS) {
            char ***a = member(base, f);
            size_t *n = (size_t *)((char *)base + f->count_off);
            for (size_t i = 0; *a && i < *n; i++)
                free((*a)[i]);
            free(*a);
            *a = NULL;
            *n = 0;
        }
    }
}
