/* common/json.c - strict JSON in.
 *
 * Parsing is jansson with the I-JSON options (no duplicate keys; jansson already refuses bad
 * UTF-8, lone surrogates and non-finite numbers), plus a depth limit, because inputs travel
 * on as msgpack and msgpack-c cannot unpack more than 32 nested containers. jansson quotes raw
 * input in its messages, so they are sanitized to one visible line before they reach a user.
 *
 * Integers beyond +-(2^53-1) are refused (I-JSON, RFC 7493 2.2), not rounded: the payload hash
 * reads every number as a double (RFC 8785), where 9007199254740993 is 9007199254740992, so two
 * different inputs would be one task, and a reader in JavaScript would see another number. The
 * message names the field's path; an integer too big for jansson itself (beyond int64) fails
 * inside jansson, whose tree is then gone, so that one is named by line:column instead.
 */
#include "common/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/str.h"
#include "common/utf8.h"

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

/* The largest integer magnitude JSON numbers hold exactly (I-JSON, RFC 7493 2.2). */
#define EXACT_INT_MAX 9007199254740991LL
#define INEXACT_INT_TEXT                                                                           \
    "is outside [-(2^53-1), 2^53-1], where JSON numbers stay exact (I-JSON, RFC 7493); send it "   \
    "as a string"

/* Appends an object member's name to a path: ".name" (no dot first) when it is a plain word,
 * else ["name"], the name made one visible line. Cut to fit `cap`. */
static void path_key(char *path, size_t cap, const char *key)
{
    size_t n = strlen(path);
    if (key[0] && strspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
                      strlen(key)) {
        snprintf(path + n, cap - n, "%s%s", n ? "." : "", key);
        return;
    }
    snprintf(path + n, cap - n, "[\"%s\"]", key);
    sanitize(path + n + 2);
}

/* The first integer, in document order, beyond +-(2^53-1), with its path written into `path`
 * ("order.ids[2]"; "" for the document itself); NULL if there is none. */
static const json_t *inexact_int(const json_t *v, char *path, size_t cap)
{
    size_t n = strlen(path), i;
    const char *key;
    const json_t *found = NULL, *e;
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        return x > EXACT_INT_MAX || x < -EXACT_INT_MAX ? v : NULL;
    }
    if (json_is_array(v)) {
        json_array_foreach(v, i, e)
        {
            snprintf(path + n, cap - n, "[%zu]", i);
            if ((found = inexact_int(e, path, cap)))
                return found;
        }
    } else if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, e) /* jansson keeps the document's order */
        {
            path[n] = '\0';
            path_key(path, cap, key);
            if ((found = inexact_int(e, path, cap)))
                return found;
        }
    }
    path[n] = '\0';
    return NULL;
}

/* jansson's overflow error ends at the end of the integer: the literal, for the message. */
static void overflow_literal(const char *buf, size_t len, const json_error_t *je, char *out,
                             size_t cap)
{
    size_t end = je->position > 0 && (size_t)je->position <= len ? (size_t)je->position : 0,
           start = end;
    while (start > 0 && ((buf[start - 1] >= '0' && buf[start - 1] <= '9') || buf[start - 1] == '-'))
        start--;
    snprintf(out, cap, "%.*s%s", (int)(end - start < 40 ? end - start : 40), buf + start,
             end - start > 40 ? "..." : "");
}

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
    char path[256] = "", lit[48];
    const json_t *big;

    if (!out || (!buf && len))
        return CAIRN_EINVAL;
    *out = NULL;
    if (!buf)
        buf = "";
    if (len > CAIRN__MAX_INPUT) {
        cairn__seterr(err, errlen, "%s: input is %zu bytes, limit is %u", src, len,
                      CAIRN__MAX_INPUT);
        return CAIRN_ETOOBIG;
    }
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) {
        /* RFC 8259 8.1: a JSON text must not start with one; say so instead of "'?'". */
        cairn__seterr(
            err, errlen,
            "%s:1:1: byte-order mark (U+FEFF) at the start; JSON text must not begin with one",
            src);
        return CAIRN_EJSON;
    }
    v = json_loadb(buf, len, flags, &je);
    if (!v && json_error_code(&je) == json_error_numeric_overflow &&
        strncmp(je.text, "too big", 7) == 0) { /* an integer beyond int64 ("too big integer") */
        overflow_literal(buf, len, &je, lit, sizeof lit);
        cairn__seterr(err, errlen, "%s:%d:%d: integer %s " INEXACT_INT_TEXT, src,
                      je.line < 1 ? 1 : je.line, je.column < 1 ? 1 : je.column, lit);
        return CAIRN_EJSON;
    }
    if (!v) {
        if (json_error_code(&je) == json_error_out_of_memory) {
            cairn__seterr(err, errlen, "%s: out of memory", src);
            return CAIRN_ENOMEM;
        }
        sanitize(je.text);
        cairn__seterr(err, errlen, "%s:%d:%d: %s", src, je.line < 1 ? 1 : je.line,
                      je.column < 1 ? 1 : je.column, je.text);
        return CAIRN_EJSON;
    }
    if (too_deep(buf, len, &line, &col)) {
        json_decref(v);
        cairn__seterr(err, errlen, "%s:%zu:%zu: arrays/objects nested more than %d deep", src, line,
                      col, CAIRN__MAX_DEPTH);
        return CAIRN_EJSON;
    }
    if ((big = inexact_int(v, path, sizeof path))) {
        cairn__seterr(err, errlen, "%s: %s%sinteger %lld " INEXACT_INT_TEXT, src, path,
                      path[0] ? ": " : "", (long long)json_integer_value(big));
        json_decref(v);
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
        cairn__seterr(err, errlen, "%s: %s", path, strerror(e));
        return (e == ENOENT || e == ENOTDIR) ? CAIRN_ENOENT : CAIRN_EIO;
    }
    if (fstat(fd, &st) != 0) {
        st.st_mode = 0; /* unknown: just read it */
    } else if (S_ISDIR(st.st_mode)) {
        cairn__seterr(err, errlen, "%s: is a directory", src);
        rc = CAIRN_EINVAL;
    } else if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > CAIRN__MAX_INPUT) {
        cairn__seterr(err, errlen, "%s: input is %jd bytes, limit is %u", src, (intmax_t)st.st_size,
                      CAIRN__MAX_INPUT);
        rc = CAIRN_ETOOBIG;
    }
    /* Read at most one byte beyond the limit: enough to know that the input is too big. */
    while (rc == 0 && n <= CAIRN__MAX_INPUT) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64 * 1024;
            cap = cap > (size_t)CAIRN__MAX_INPUT + 1 ? (size_t)CAIRN__MAX_INPUT + 1 : cap;
            if (!(nb = realloc(buf, cap))) {
                cairn__seterr(err, errlen, "%s: out of memory", src);
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
            cairn__seterr(err, errlen, "%s: %s", src, strerror(errno));
            rc = CAIRN_EIO;
        }
    }
    if (rc == 0 && n > CAIRN__MAX_INPUT) {
        cairn__seterr(err, errlen, "%s: input is more than %u bytes, limit is %u", src,
                      CAIRN__MAX_INPUT, CAIRN__MAX_INPUT);
        rc = CAIRN_ETOOBIG;
    }
    if (rc == 0)
        rc = cairn__json_parse(buf, n, src, out, err, errlen);
    free(buf);
    if (!is_stdin)
        close(fd);
    return rc;
}

const char *cairn__json_type_name(const json_t *v)
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
    cairn__seterr(err, errlen, "%s: task input must be a JSON object, not %s",
                  source ? source : "<input>", cairn__json_type_name(v));
    return CAIRN_EJSON;
}
