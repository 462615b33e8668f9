/* steps/template.h - what the built-in steps share: "{{name}}" placeholders, msgpack lookups,
 * and the maps they write as output. */
#ifndef CAIRN_STEPS_TEMPLATE_H
#define CAIRN_STEPS_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <msgpack.h>

/* Returns the text for placeholder `name` (malloc'd), or NULL if there is none. */
typedef char *(*cairn__template_lookup)(const char *name, void *arg);

/* Renders tpl, replacing each {{name}} (name: letters, digits, '_', '.', '-'; spaces inside the
 * braces ignored) with lookup(name). *out is malloc'd. Returns 0, CAIRN_EINVAL with err naming
 * the placeholder and its character offset when lookup has no value or a brace is unclosed,
 * or CAIRN_ENOMEM. */
int cairn__template_render(const char *tpl, cairn__template_lookup lookup, void *arg, char **out,
                           char *err, size_t errlen);

/* The text form of a msgpack value for a template: strings as they are, numbers and booleans in
 * decimal, arrays of scalars joined by ", ", nil as "". NULL for maps and nested arrays. */
char *cairn__template_value(const msgpack_object *o);

/* The value of the str key key[0..n) in msgpack map m (the first, if the key repeats); NULL if
 * m is NULL or not a map, or has no such key. The key is taken whole: a '.' in it is no path. */
const msgpack_object *cairn__mp_get(const msgpack_object *m, const char *key, size_t n);

/* Looks up a dotted path ("result.text") in nested msgpack maps; NULL if absent. */
const msgpack_object *cairn__mp_path(const msgpack_object *o, const char *path);

/* One key/value of a msgpack map the steps write (cairn__mp_pack_map): the value's kind and,
 * for the kinds that point, its bytes or elements. */
typedef struct cairn__mp_kv {
    const char *key;
    enum {
        CAIRN__MP_STR,
        CAIRN__MP_BIN,
        CAIRN__MP_UINT,
        CAIRN__MP_INT,
        CAIRN__MP_DOUBLE,
        CAIRN__MP_I32S,
        CAIRN__MP_MAP
    } type;
    const void *p; /* STR, BIN: the bytes; I32S: int32_t[n]; MAP: cairn__mp_kv[n] */
    size_t n;
    uint64_t u;
    int64_t i;
    double d;
} cairn__mp_kv;

#define CAIRN__MP_S(k, s, len)                                                                     \
    {                                                                                              \
        (k), CAIRN__MP_STR, .p = (s), .n = (len)                                                   \
    }
#define CAIRN__MP_U(k, v)                                                                          \
    {                                                                                              \
        (k), CAIRN__MP_UINT, .u = (v)                                                              \
    }
#define CAIRN__MP_I(k, v)                                                                          \
    {                                                                                              \
        (k), CAIRN__MP_INT, .i = (v)                                                               \
    }
#define CAIRN__MP_D(k, v)                                                                          \
    {                                                                                              \
        (k), CAIRN__MP_DOUBLE, .d = (v)                                                            \
    }
/* a nested map of the kv array `a`, counted by its declaration */
#define CAIRN__MP_M(k, a)                                                                          \
    {                                                                                              \
        (k), CAIRN__MP_MAP, .p = (a), .n = sizeof(a) / sizeof *(a)                                 \
    }

/* Packs the map of kv[0..n): its size is the number of entries, so a map written from an array
 * (CAIRN__MP_PACK) cannot announce more or fewer values than it holds. */
void cairn__mp_pack_map(msgpack_packer *pk, const cairn__mp_kv *kv, size_t n);
#define CAIRN__MP_PACK(pk, a) cairn__mp_pack_map((pk), (a), sizeof(a) / sizeof *(a))

#endif
