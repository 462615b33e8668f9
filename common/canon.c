/* common/canon.c - one canonical byte form for a task input, and its hash.
 *
 * A task's identity is its input. Two submissions of "the same" input must hash the same
 * however they were spelled (key order, whitespace, 1.50 vs 1.5, "\u0041" vs "A"), so the
 * payload hash is SHA-256 over the RFC 8785 (JCS) canonical form: members sorted by UTF-16
 * code units, minimal string escapes, and numbers written as ECMAScript writes the IEEE
 * double. The one hard part is the number: ES wants the *shortest* digit string that reads
 * back as the same double. glibc's printf/strtod are exact, so we ask printf for the correctly
 * rounded p-digit form for p = 1, 2, ... and stop at the first one strtod maps back to the
 * same double (checking the one neighbour that can win where the rounding interval is
 * lopsided, at powers of two).
 *
 * The conversion between jansson and msgpack (jsonmp.c) shares the JCS member order defined here
 * (common/canon_internal.h), so that maps are packed in the same key order as the canonical form.
 */
#include "common/json.h"
#include "common/canon_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/str.h"
#include "common/utf8.h"

/* Recursion bound for trees built in code (parsed ones are bounded by CAIRN__MAX_DEPTH). */
#define CANON_MAX_DEPTH 2048

/* Where a code point sorts among UTF-16 code units: below U+D800 and U+E000..U+FFFF a code
 * point is its own unit; U+10000 and up start with a high surrogate (D800..DBFF), so they
 * sort after U+D7FF and before U+E000, among themselves in code point order. */
static uint32_t utf16_weight(uint32_t c)
{
    if (c < 0xD800)
        return c;
    if (c >= 0x10000)
        return 0xD800 + (c - 0x10000);
    return c + 0x110000;
}

static int member_cmp(const void *pa, const void *pb)
{
    const struct cairn__member *a = pa, *b = pb;
    const unsigned char *x = (const unsigned char *)a->key, *y = (const unsigned char *)b->key;
    size_t i = 0, j = 0;
    while (i < a->klen && j < b->klen) {
        uint32_t cx, cy, wx, wy;
        size_t kx = cairn__utf8_get(x + i, a->klen - i, &cx);
        size_t ky = cairn__utf8_get(y + j, b->klen - j, &cy);
        /* Invalid bytes (only in *_nocheck trees, which canon refuses anyway) sort last. */
        wx = kx ? utf16_weight(cx) : 0x220000u + x[i];
        wy = ky ? utf16_weight(cy) : 0x220000u + y[j];
        if (wx != wy)
            return wx < wy ? -1 : 1;
        i += kx ? kx : 1;
        j += ky ? ky : 1;
    }
    return (i < a->klen) - (j < b->klen);
}

long cairn__sorted_members(const json_t *obj, struct cairn__member **out)
{
    size_t n = json_object_size(obj), i = 0, klen;
    const char *key;
    json_t *val;
    struct cairn__member *m;
    *out = NULL;
    if (n == 0)
        return 0;
    if (!(m = malloc(n * sizeof *m)))
        return -1;
    json_object_keylen_foreach((json_t *)obj, key, klen, val)
    {
        m[i].key = key;
        m[i].klen = klen;
        m[i].val = val;
        i++;
    }
    qsort(m, n, sizeof *m, member_cmp);
    *out = m;
    return (long)n;
}

/* Shortest decimal digits of a finite a > 0: a = 0.d1d2..dk x 10^n, digits NUL-terminated,
 * no trailing zeros. Among several shortest strings the nearest to a wins (ES 7.1.12.1). */
static void shortest_digits(double a, char digits[24], int *k, int *n)
{
    char buf[48];
    int p, e, len;
    for (p = 1;; p++) { /* ends by p = 17: 17 significant digits identify any double */
        unsigned long long d = 0, pow10 = 1;
        int i, delta;
        char *s;
        snprintf(buf, sizeof buf, "%.*e", p - 1, a);
        /* buf is "D.DDDe[+-]XX": collect the mantissa digits and the exponent. */
        for (s = buf; *s != 'e'; s++)
            if (*s != '.')
                d = d * 10 + (unsigned long long)(*s - '0');
        e = atoi(s + 1) - (p - 1); /* a ~ d x 10^e */
        for (i = 1; i < p; i++)
            pow10 *= 10;
        if (p == 17 || strtod(buf, NULL) == a)
            goto found;
        /* The correctly rounded d does not read back; if a p-digit string does, it lies on
         * the other side of a, and is d's neighbour there. */
        for (delta = 1; delta >= -1; delta -= 2) {
            unsigned long long dn = d + (unsigned long long)(long long)delta;
            int en = e;
            if (delta < 0 && d == pow10) { /* below 10^(p-1) the p-digit grid is finer */
                dn = pow10 * 10 - 1;
                en = e - 1;
            }
            snprintf(buf, sizeof buf, "%llue%d", dn, en);
            if (strtod(buf, NULL) == a) {
                d = dn;
                e = en;
                goto found;
            }
        }
        continue;
    found:
        len = snprintf(digits, 24, "%llu", d);
        *n = len + e;
        while (len > 1 && digits[len - 1] == '0')
            digits[--len] = '\0';
        *k = len;
        return;
    }
}

/* ECMAScript Number::toString(v) of a finite double (ES 2024 6.1.6.1.20) into out[32]. */
static size_t es_number(double v, char *out)
{
    char dig[24], *o = out;
    int k, n, i;
    if (v == 0) { /* both zeros */
        out[0] = '0';
        out[1] = '\0';
        return 1;
    }
    if (v < 0) {
        *o++ = '-';
        v = -v;
    }
    shortest_digits(v, dig, &k, &n);
    if (k <= n && n <= 21) { /* integer: digits then n-k zeros */
        memcpy(o, dig, (size_t)k);
        o += k;
        for (i = 0; i < n - k; i++)
            *o++ = '0';
    } else if (0 < n && n <= 21) { /* point inside the digits */
        memcpy(o, dig, (size_t)n);
        o += n;
        *o++ = '.';
        memcpy(o, dig + n, (size_t)(k - n));
        o += k - n;
    } else if (-6 < n && n <= 0) { /* 0.000ddd */
        *o++ = '0';
        *o++ = '.';
        for (i = 0; i < -n; i++)
            *o++ = '0';
        memcpy(o, dig, (size_t)k);
        o += k;
    } else { /* d.ddde+x */
        *o++ = dig[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)(k - 1));
            o += k - 1;
        }
        o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    *o = '\0';
    return (size_t)(o - out);
}

/* A JSON string per JCS 3.2.2.2: only '"', '\\' and controls are escaped, controls with the
 * short forms where JSON has them, else \u00xx in lowercase hex. */
static int put_string(struct cairn__sbuf *b, const char *str, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    size_t i, run = 0, k;
    uint32_t cp;
    char esc[7] = "\\u00";
    for (i = 0; i < n; i += k)
        if (!(k = cairn__utf8_get(s + i, n - i, &cp)))
            return CAIRN_EJSON;
    cairn__sb_put(b, "\"", 1);
    for (i = 0; i < n; i++) {
        if (s[i] >= 0x20 && s[i] != '"' && s[i] != '\\')
            continue;
        cairn__sb_put(b, str + run, i - run);
        run = i + 1;
        if (s[i] == '"' || s[i] == '\\') {
            esc[1] = (char)s[i];
            cairn__sb_put(b, esc, 2);
        } else if (s[i] >= '\b' && s[i] <= '\r' && s[i] != '\v') {
            esc[1] = "btn?fr"[s[i] - '\b'];
            cairn__sb_put(b, esc, 2);
        } else {
            esc[1] = 'u';
            esc[4] = hex[s[i] >> 4];
            esc[5] = hex[s[i] & 15];
            cairn__sb_put(b, esc, 6);
        }
    }
    cairn__sb_put(b, str + run, n - run);
    cairn__sb_put(b, "\"", 1);
    return 0;
}

static int canon(struct cairn__sbuf *b, const json_t *v, int depth)
{
    char num[32];
    size_t i, n;
    int rc;
    if (depth > CANON_MAX_DEPTH)
        return CAIRN_EINVAL;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        struct cairn__member *m;
        long cnt = cairn__sorted_members(v, &m);
        if (cnt < 0)
            return CAIRN_ENOMEM;
        cairn__sb_put(b, "{", 1);
        for (rc = 0, i = 0; rc == 0 && i < (size_t)cnt; i++) {
            if (i)
                cairn__sb_put(b, ",", 1);
            if ((rc = put_string(b, m[i].key, m[i].klen)) == 0) {
                cairn__sb_put(b, ":", 1);
                rc = canon(b, m[i].val, depth + 1);
            }
        }
        free(m);
        if (rc)
            return rc;
        cairn__sb_put(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        cairn__sb_put(b, "[", 1);
        for (i = 0, n = json_array_size(v); i < n; i++) {
            if (i)
                cairn__sb_put(b, ",", 1);
            if ((rc = canon(b, json_array_get(v, i), depth + 1)))
                return rc;
        }
        cairn__sb_put(b, "]", 1);
        break;
    case JSON_STRING:
        return put_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: /* JCS: every number is a double, so 2^53+1 prints as 2^53 */
        cairn__sb_put(b, num, es_number((double)json_integer_value(v), num));
        break;
    case JSON_REAL:
        if (!isfinite(json_real_value(v)))
            return CAIRN_EINVAL;
        cairn__sb_put(b, num, es_number(json_real_value(v), num));
        break;
    case JSON_TRUE:
        cairn__sb_puts(b, "true");
        break;
    case JSON_FALSE:
        cairn__sb_puts(b, "false");
        break;
    case JSON_NULL:
        cairn__sb_puts(b, "null");
        break;
    }
    return 0;
}

int cairn__canon_json(const json_t *v, char **out, size_t *len)
{
    struct cairn__sbuf b = {0};
    int rc;
    if (!v || !out)
        return CAIRN_EINVAL;
    *out = NULL;
    if (len)
        *len = 0;
    rc = canon(&b, v, 0);
    if (!rc && b.oom)
        rc = CAIRN_ENOMEM;
    if (rc) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return 0;
}

int cairn__payload_hash(const json_t *input, char out[65])
{
    char *c;
    size_t n;
    int rc = cairn__canon_json(input, &c, &n);
    if (rc)
        return rc;
    cairn__sha256_hex(c, n, out);
    free(c);
    return out[0] ? 0 : CAIRN_ENOMEM;
}
