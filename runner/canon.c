/* canon.c - task input: strict JSON in, one canonical byte form out.
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
 * Parsing is jansson with the I-JSON options (no duplicate keys; jansson already refuses bad
 * UTF-8, lone surrogates and non-finite numbers), plus a depth limit, because inputs travel
 * on as msgpack and msgpack-c cannot unpack more than 32 nested containers.
 *
 * The conversion between jansson and msgpack lives in jsonmp.c; it shares the string buffer
 * and the JCS member order defined here (runner/canon_internal.h), so that maps are packed in
 * the same key order as the canonical form.
 */
#include "runner/canon.h"
#include "runner/canon_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

/* Recursion bound for trees built in code (parsed ones are bounded by CAIRN__MAX_DEPTH). */
#define CANON_MAX_DEPTH 2048

static void seterr(char *err, size_t errlen, const char *fmt, ...) CAIRN_PRINTF(3, 4);
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Declared in canon.h: jsonmp.c and the steps decode with it too. */
size_t cairn__utf8_get(const unsigned char *s, size_t n, uint32_t *cp)
{
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    size_t len, i;
    uint32_t c;
    if (n == 0)
        return 0;
    len = s[0] < 0x80   ? 1
          : s[0] < 0xC2 ? 0
          : s[0] < 0xE0 ? 2
          : s[0] < 0xF0 ? 3
          : s[0] < 0xF5 ? 4
                        : 0;
    if (len == 0 || n < len)
        return 0;
    c = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < least[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

/* jansson quotes raw input in its messages ("near '...'"). Keep a message one visible line:
 * broken UTF-8, controls (C0, DEL, C1) and invisible or direction-changing characters
 * (zero-width, BOM, bidi overrides, line separators) each become a single '?'. */
static void sanitize(char *s)
{
    size_t n = strlen(s), i = 0, o = 0, k;
    uint32_t c;
    while (i < n) {
        k = cairn__utf8_get((const unsigned char *)s + i, n - i, &c);
        if (k == 0 || c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == 0xFEFF ||
            (c >= 0x200B && c <= 0x200F) || (c >= 0x2028 && c <= 0x202E) ||
            (c >= 0x2060 && c <= 0x206F)) {
            s[o++] = '?';
            i += k ? k : 1;
        } else {
            memmove(s + o, s + i, k);
            o += k;
            i += k;
        }
    }
    s[o] = '\0';
}

/* ------------------------------------------------------------------ parsing */

/* Finds where a (valid) JSON text first opens more than CAIRN__MAX_DEPTH containers.
 * Columns count characters, as jansson's do. Returns 1 and the place if it does. */
static int too_deep(const char *buf, size_t len, size_t *line, size_t *col)
{
    size_t i, ln = 1, c = 0;
    int depth = 0, in_str = 0, esc = 0;
    for (i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)buf[i];
        if ((ch & 0xC0) != 0x80)
            c++;
        if (ch == '\n') { /* never inside a string: JSON strings cannot hold a raw newline */
            ln++;
            c = 0;
        } else if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '[' || ch == '{') {
            if (++depth > CAIRN__MAX_DEPTH) {
                *line = ln;
                *col = c;
                return 1;
            }
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return 0;
}

int cairn__json_parse(const char *buf, size_t len, const char *source, json_t **out, char *err,
                      size_t errlen)
{
    const size_t flags = JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY;
    const char *src = source ? source : "<input>";
    json_error_t je;
    json_t *v;
    size_t line, col;

    if (!out || (!buf && len))
        return CAIRN_EINVAL;
    *out = NULL;
    if (!buf)
        buf = "";
    if (len > CAIRN__MAX_INPUT) {
        seterr(err, errlen, "%s: input is %zu bytes, limit is %u", src, len, CAIRN__MAX_INPUT);
        return CAIRN_ETOOBIG;
    }
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) {
        /* RFC 8259 8.1: a JSON text must not start with one; say so instead of "'?'". */
        seterr(err, errlen,
               "%s:1:1: byte-order mark (U+FEFF) at the start; JSON text must not begin with one",
               src);
        return CAIRN_EJSON;
    }
    v = json_loadb(buf, len, flags, &je);
    /* An integer beyond int64 is still a JSON number; JCS reads every number as a double,
     * so read the document that way rather than refuse it. */
    if (!v && json_error_code(&je) == json_error_numeric_overflow &&
        strncmp(je.text, "too big", 7) == 0)
        v = json_loadb(buf, len, flags | JSON_DECODE_INT_AS_REAL, &je);
    if (!v) {
        if (json_error_code(&je) == json_error_out_of_memory) {
            seterr(err, errlen, "%s: out of memory", src);
            return CAIRN_ENOMEM;
        }
        sanitize(je.text);
        seterr(err, errlen, "%s:%d:%d: %s", src, je.line < 1 ? 1 : je.line,
               je.column < 1 ? 1 : je.column, je.text);
        return CAIRN_EJSON;
    }
    if (too_deep(buf, len, &line, &col)) {
        json_decref(v);
        seterr(err, errlen, "%s:%zu:%zu: arrays/objects nested more than %d deep", src, line, col,
               CAIRN__MAX_DEPTH);
        return CAIRN_EJSON;
    }
    *out = v;
    return 0;
}

int cairn__json_load(const char *path, json_t **out, char *err, size_t errlen)
{
    int is_stdin, fd, rc = 0;
    const char *src;
    struct stat st;
    char *buf = NULL, *nb;
    size_t n = 0, cap = 0;
    ssize_t r;

    if (!path || !out)
        return CAIRN_EINVAL;
    *out = NULL;
    is_stdin = strcmp(path, "-") == 0;
    src = is_stdin ? "<stdin>" : path;
    fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        seterr(err, errlen, "%s: %s", path, strerror(e));
        return (e == ENOENT || e == ENOTDIR) ? CAIRN_ENOENT : CAIRN_EIO;
    }
    if (fstat(fd, &st) != 0) {
        st.st_mode = 0; /* unknown: just read it */
    } else if (S_ISDIR(st.st_mode)) {
        seterr(err, errlen, "%s: is a directory", src);
        rc = CAIRN_EINVAL;
    } else if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > CAIRN__MAX_INPUT) {
        seterr(err, errlen, "%s: input is %jd bytes, limit is %u", src, (intmax_t)st.st_size,
               CAIRN__MAX_INPUT);
        rc = CAIRN_ETOOBIG;
    }
    /* Read at most one byte beyond the limit: enough to know that the input is too big. */
    while (rc == 0 && n <= CAIRN__MAX_INPUT) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64 * 1024;
            cap = cap > (size_t)CAIRN__MAX_INPUT + 1 ? (size_t)CAIRN__MAX_INPUT + 1 : cap;
            if (!(nb = realloc(buf, cap))) {
                seterr(err, errlen, "%s: out of memory", src);
                rc = CAIRN_ENOMEM;
                break;
            }
            buf = nb;
        }
        if ((r = read(fd, buf + n, cap - n)) > 0) {
            n += (size_t)r;
        } else if (r == 0) {
            break;
        } else if (errno != EINTR) {
            seterr(err, errlen, "%s: %s", src, strerror(errno));
            rc = CAIRN_EIO;
        }
    }
    if (rc == 0 && n > CAIRN__MAX_INPUT) {
        seterr(err, errlen, "%s: input is more than %u bytes, limit is %u", src, CAIRN__MAX_INPUT,
               CAIRN__MAX_INPUT);
        rc = CAIRN_ETOOBIG;
    }
    if (rc == 0)
        rc = cairn__json_parse(buf, n, src, out, err, errlen);
    free(buf);
    if (!is_stdin)
        close(fd);
    return rc;
}

static const char *type_name(const json_t *v)
{
    static const char *names[] = {"an object", "an array", "a string", "an integer",
                                  "a number",  "true",     "false",    "null"};
    unsigned t = (unsigned)json_typeof(v);
    return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

int cairn__json_check_object(const json_t *v, const char *source, char *err, size_t errlen)
{
    if (!v)
        return CAIRN_EINVAL;
    if (json_is_object(v))
        return 0;
    seterr(err, errlen, "%s: task input must be a JSON object, not %s", source ? source : "<input>",
           type_name(v));
    return CAIRN_EJSON;
}

/* ------------------------------------------------------------------ canonical form */

/* The string buffer (canon.h) is shared with jsonmp.c and the steps, the member order
 * (canon_internal.h) with jsonmp.c. */
int cairn__sb_put(struct cairn__sbuf *b, const void *s, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *np;
        while (cap < b->len + n + 1)
            cap *= 2;
        if (!(np = realloc(b->p, cap))) {
            b->oom = 1;
            return -1;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int cairn__sb_puts(struct cairn__sbuf *b, const char *s) { return cairn__sb_put(b, s, strlen(s)); }

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

void cairn__sha256_hex(const void *data, size_t len, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0, i;
    out[0] = '\0';
    if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
        return;
    for (i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
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

/* ------------------------------------------------------------------ task IDs */

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
        seterr(err, errlen, "%s byte %zu is '%c' (0x%02x); allowed are A-Z a-z 0-9 . _ : -", what,
               off, c, c);
    else
        seterr(err, errlen, "%s byte %zu is 0x%02x; allowed are A-Z a-z 0-9 . _ : -", what, off, c);
}

int cairn__task_id_check(const char *id, char *err, size_t errlen)
{
    size_t len, bad;
    if (!id)
        return CAIRN_EINVAL;
    len = strlen(id);
    if (len == 0) {
        seterr(err, errlen, "task ID is empty");
        return CAIRN_ETASKID;
    }
    if (len > CAIRN__TASK_ID_MAX) {
        seterr(err, errlen, "task ID is %zu bytes, limit is %d", len, CAIRN__TASK_ID_MAX);
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
        seterr(err, errlen, "task input must be a JSON object, not %s", type_name(input));
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
            seterr(err, errlen, "empty field name in the task-ID field list \"%s\"", fields);
            rc = CAIRN_EINVAL;
        } else if (!(v = json_object_getn(input, p, nlen))) {
            seterr(err, errlen, "input has no %s (named in the task-ID fields)", what);
            rc = CAIRN_EJSON;
        } else if (!(text = id_text(v, num, &tlen))) {
            seterr(err, errlen, "task-ID %s is %s%s; only strings and integers can form a task ID",
                   what, type_name(v), json_is_real(v) ? " that is not an integer" : "");
            rc = CAIRN_EJSON;
        } else if (tlen == 0) {
            /* an empty business key identifies nothing, and "a_" + "" would collide with "a_" */
            seterr(err, errlen, "task-ID %s is an empty string", what);
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
        seterr(err, errlen, "derived task ID is empty (the task-ID fields hold empty strings)");
        rc = CAIRN_ETASKID;
    } else if (rc == 0 && b.len > CAIRN__TASK_ID_MAX) {
        seterr(err, errlen, "derived task ID is %zu bytes, limit is %d", b.len, CAIRN__TASK_ID_MAX);
        rc = CAIRN_ETASKID;
    } else if (rc == 0 && b.len + 1 > outlen) {
        seterr(err, errlen, "task ID buffer of %zu bytes is too small for %zu", outlen, b.len + 1);
        rc = CAIRN_EINVAL;
    } else if (rc == 0) {
        memcpy(out, b.p, b.len + 1);
    }
    free(b.p);
    return rc;
}
