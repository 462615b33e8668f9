/* steps/template.c - "{{name}}" placeholders for prompts, subjects and bodies, and the msgpack
 * reading and writing the steps share.
 *
 * Deliberately small: no logic, no escaping, no partials. A placeholder with no value is an
 * error naming it, never an empty string, so a typo in a template fails the task permanently
 * instead of sending a prompt with a hole in it. A map a step writes is packed from an array of
 * key/value entries, so its announced size is the array's and cannot drift from what follows.
 */
#include "steps/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "common/str.h"

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

int cairn__template_render(const char *tpl, cairn__template_lookup lookup, void *arg, char **out,
                           char *err, size_t errlen)
{
    struct cairn__sbuf b = {0};
    *out = NULL;
    if (cairn__sb_put(&b, "", 0))
        return CAIRN_ENOMEM;
    const char *p = tpl;
    while (*p) {
        const char *open = strstr(p, "{{");
        if (!open) {
            if (cairn__sb_put(&b, p, strlen(p)))
                goto oom;
            break;
        }
        if (cairn__sb_put(&b, p, (size_t)(open - p)))
            goto oom;
        const char *s = open + 2, *close = strstr(s, "}}");
        if (!close) {
            snprintf(err, errlen, "unclosed '{{' at character %zu", (size_t)(open - tpl));
            free(b.p);
            return CAIRN_EINVAL;
        }
        while (s < close && *s == ' ')
            s++;
        const char *e = close;
        while (e > s && e[-1] == ' ')
            e--;
        char name[128];
        size_t n = (size_t)(e - s);
        int ok = n > 0 && n < sizeof name;
        for (size_t i = 0; ok && i < n; i++)
            ok = name_char(s[i]);
        if (!ok) {
            snprintf(err, errlen, "bad placeholder '%.*s' at character %zu",
                     (int)(close + 2 - open), open, (size_t)(open - tpl));
            free(b.p);
            return CAIRN_EINVAL;
        }
        memcpy(name, s, n);
        name[n] = 0;
        char *v = lookup(name, arg);
        if (!v) {
            snprintf(err, errlen, "placeholder '{{%s}}' at character %zu has no value", name,
                     (size_t)(open - tpl));
            free(b.p);
            return CAIRN_EINVAL;
        }
        int bad = cairn__sb_put(&b, v, strlen(v));
        free(v);
        if (bad)
            goto oom;
        p = close + 2;
    }
    *out = b.p;
    return 0;
oom:
    free(b.p);
    snprintf(err, errlen, "out of memory");
    return CAIRN_ENOMEM;
}

static char *scalar(const msgpack_object *o)
{
    char buf[64];
    switch (o->type) {
    case MSGPACK_OBJECT_STR: {
        char *s = malloc(o->via.str.size + 1);
        if (s) {
            if (o->via.str.size)
                memcpy(s, o->via.str.ptr, o->via.str.size);
            s[o->via.str.size] = 0;
        }
        return s;
    }
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)o->via.u64);
        return strdup(buf);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        snprintf(buf, sizeof buf, "%lld", (long long)o->via.i64);
        return strdup(buf);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        snprintf(buf, sizeof buf, "%.17g", o->via.f64);
        return strdup(buf);
    case MSGPACK_OBJECT_BOOLEAN:
        return strdup(o->via.boolean ? "true" : "false");
    case MSGPACK_OBJECT_NIL:
        return strdup("");
    default:
        return NULL;
    }
}

char *cairn__template_value(const msgpack_object *o)
{
    if (!o)
        return NULL;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return scalar(o);
    struct cairn__sbuf b = {0};
    if (cairn__sb_put(&b, "", 0))
        return NULL;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        char *v = scalar(&o->via.array.ptr[i]);
        if (!v || (i && cairn__sb_put(&b, ", ", 2)) || cairn__sb_put(&b, v, strlen(v))) {
            free(v);
            free(b.p);
            return NULL;
        }
        free(v);
    }
    return b.p;
}

const msgpack_object *cairn__mp_get(const msgpack_object *m, const char *key, size_t n)
{
    if (!m || m->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0)
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

const msgpack_object *cairn__mp_path(const msgpack_object *o, const char *path)
{
    while (o && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        o = cairn__mp_get(o, path, n);
        path += n + (dot != NULL);
    }
    return o;
}

void cairn__mp_pack_map(msgpack_packer *pk, const cairn__mp_kv *kv, size_t n)
{
    msgpack_pack_map(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++, kv++) {
        msgpack_pack_str(pk, strlen(kv->key));
        msgpack_pack_str_body(pk, kv->key, strlen(kv->key));
        switch (kv->type) {
        case CAIRN__MP_STR:
            msgpack_pack_str(pk, kv->n);
            msgpack_pack_str_body(pk, kv->p, kv->n);
            break;
        case CAIRN__MP_BIN:
            msgpack_pack_bin(pk, kv->n);
            msgpack_pack_bin_body(pk, kv->p, kv->n);
            break;
        case CAIRN__MP_UINT:
            msgpack_pack_uint64(pk, kv->u);
            break;
        case CAIRN__MP_INT:
            msgpack_pack_int64(pk, kv->i);
            break;
        case CAIRN__MP_DOUBLE:
            msgpack_pack_double(pk, kv->d);
            break;
        case CAIRN__MP_I32S:
            msgpack_pack_array(pk, (uint32_t)kv->n);
            for (size_t j = 0; j < kv->n; j++)
                msgpack_pack_int32(pk, ((const int32_t *)kv->p)[j]);
            break;
        case CAIRN__MP_MAP:
            cairn__mp_pack_map(pk, kv->p, kv->n);
            break;
        }
    }
}
