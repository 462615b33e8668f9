/* steps/notify.c - the `notify` effect step: signed webhooks and email, through libcurl. This
 * file parses targets, holds what both transports share, and sends webhooks; notify_email.c
 * sends email (SMTP).
 *
 * The one idea that matters is telling "nothing was delivered" apart from "maybe delivered".
 * A failure before the receiver had the whole request (connection refused, DNS, a timeout
 * while connecting or while sending, an explicit 408/429/5xx or SMTP 4xx) is TRANSIENT: the
 * runner may call again and nobody sees two. Once the whole request or message has left and
 * no answer came back, the receiver may have acted on it: that is UNKNOWN, which the runner
 * turns into in_doubt (at most once) or a resend with the same delivery ID (at least once).
 * For HTTP "has left" is curl's upload counter reaching the body size; for SMTP it is our
 * read callback having handed curl the last byte of the message (conservative: bytes still in
 * curl's buffer count as sent, which can only make us say UNKNOWN where TRANSIENT was true).
 *
 * The second idea: the delivery ID is the receiver's deduplication key. It goes out unchanged
 * on every attempt as webhook-id and inside the Message-ID, and the webhook body is built in
 * RFC 8785 canonical form, so a resend carries the same bytes (only the timestamp differs).
 *
 * Secrets (webhook key, SMTP password) are read from the environment or a file when the
 * target is parsed, never from the config JSON, and never reach an error message: messages
 * are built from fixed text, the URL without query or credentials, curl's error text and the
 * receiver's answer, and are scrubbed of the secret's text (cairn__notify_call_error, the one
 * way either file reports a failed call) before they leave the step.
 */
#include "steps/notify.h"
#include "steps/notify_impl.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

/* ------------------------------------------------------------------ small helpers */

void cairn__notify_fmt(struct cairn__sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        cairn__sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void wipe_free(char *s)
{
    if (s) {
        OPENSSL_cleanse(s, strlen(s));
        free(s);
    }
}

static int valid_name_char(int c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

/* Replaces every occurrence of `secret` in msg (NUL-terminated) by "***". */
static void scrub(char *msg, const char *secret)
{
    if (!secret || strlen(secret) < 4)
        return;
    size_t sl = strlen(secret);
    char *p;
    while ((p = strstr(msg, secret)) != NULL) {
        memcpy(p, "***", 3);
        memmove(p + 3, p + sl, strlen(p + sl) + 1);
    }
}

/* ------------------------------------------------------------------ config parsing */

typedef struct {
    const char *where;
    char *err;
    size_t errlen;
} pctx;

static int fail(pctx *p, int code, const char *field, const char *fmt, ...) CAIRN_PRINTF(4, 5);
static int fail(pctx *p, int code, const char *field, const char *fmt, ...)
{
    if (p->err && p->errlen) {
        char msg[CAIRN__NOTIFY_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (field)
            snprintf(p->err, p->errlen, "%s.%s: %s", p->where, field, msg);
        else
            snprintf(p->err, p->errlen, "%s: %s", p->where, msg);
    }
    return code;
}

/* An optional string field: 0 with *out = NULL when absent, a malloc'd copy when present. */
static int get_str(pctx *p, const json_t *cfg, const char *key, int required, char **out)
{
    json_t *v = json_object_get(cfg, key);
    *out = NULL;
    if (!v) {
        if (required)
            return fail(p, CAIRN_EJSON, key, "is required");
        return 0;
    }
    if (!json_is_string(v))
        return fail(p, CAIRN_EJSON, key, "must be a string");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0)
        return fail(p, CAIRN_EJSON, key, "must not be empty");
    if (strlen(s) != n)
        return fail(p, CAIRN_EJSON, key, "must not contain NUL characters");
    *out = strdup(s);
    return *out ? 0 : CAIRN_ENOMEM;
}

static int get_ms(pctx *p, const json_t *cfg, const char *key, long def, long max, long *out)
{
    json_t *v = json_object_get(cfg, key);
    *out = def;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
        return fail(p, CAIRN_EJSON, key, "must be an integer from 1 to %ld (milliseconds)", max);
    *out = (long)json_integer_value(v);
    return 0;
}

/* Strict base64 (RFC 4648, padding optional) to bytes, via OpenSSL's decoder. */
static int b64_decode(const char *s, unsigned char **out, size_t *out_len)
{
    size_t n = strlen(s), data = n;
    while (data > 0 && s[data - 1] == '=')
        data--;
    if (n - data > 2 || data == 0)
        return -1;
    for (size_t i = 0; i < data; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '+' && s[i] != '/')
            return -1;
    if (data % 4 == 1)
        return -1;
    /* re-pad to a multiple of 4 so EVP_DecodeBlock accepts it */
    size_t padded = (data + 3) / 4 * 4;
    if (n != data && n != padded)
        return -1;
    char *tmp = malloc(padded + 1);
    unsigned char *bytes = malloc(padded / 4 * 3 + 1);
    if (!tmp || !bytes) {
        free(tmp), free(bytes);
        return -2;
    }
    memcpy(tmp, s, data);
    memset(tmp + data, '=', padded - data);
    tmp[padded] = 0;
    int got = EVP_DecodeBlock(bytes, (const unsigned char *)tmp, (int)padded);
    OPENSSL_cleanse(tmp, padded);
    free(tmp);
    if (got < 0) {
        free(bytes);
        return -1;
    }
    /* EVP_DecodeBlock counts the padding as zero bytes: each character carries 6 bits */
    *out_len = data * 3 / 4;
    *out = bytes;
    return 0;
}

/* Reads a secret from the environment variable or file named by `env_key` / `file_key`
 * (exactly one must be present if `required`). *out is malloc'd, or NULL when absent. */
static int read_secret(pctx *p, const json_t *cfg, const char *env_key, const char *file_key,
                       int required, char **out)
{
    json_t *e = json_object_get(cfg, env_key), *f = json_object_get(cfg, file_key);
    *out = NULL;
    if (e && f)
        return fail(p, CAIRN_EJSON, env_key, "give either %s or %s, not both", env_key, file_key);
    if (!e && !f)
        return required ? fail(p, CAIRN_EJSON, env_key, "is required (or %s)", file_key) : 0;
    if (e) {
        if (!json_is_string(e) || json_string_length(e) == 0)
            return fail(p, CAIRN_EJSON, env_key, "must be the name of an environment variable");
        const char *name = json_string_value(e);
        const char *v = getenv(name);
        if (!v || !*v)
            return fail(p, CAIRN_EINVAL, env_key, "environment variable %s is not set or empty",
                        name);
        *out = strdup(v);
        return *out ? 0 : CAIRN_ENOMEM;
    }
    if (!json_is_string(f) || json_string_length(f) == 0)
        return fail(p, CAIRN_EJSON, file_key, "must be a file path");
    const char *path = json_string_value(f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(p, errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO, file_key, "%s: %s", path,
                    strerror(errno));
    char tmp[8192];
    size_t have = 0;
    for (;;) {
        ssize_t r = read(fd, tmp + have, sizeof tmp - 1 - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e2 = errno;
            close(fd);
            OPENSSL_cleanse(tmp, sizeof tmp);
            return fail(p, CAIRN_EIO, file_key, "%s: %s", path, strerror(e2));
        }
        if (r == 0 || (have += (size_t)r) == sizeof tmp - 1 || memchr(tmp, '\n', have))
            break;
    }
    close(fd);
    tmp[have] = 0;
    tmp[strcspn(tmp, "\r\n")] = 0; /* the first line only */
    int rc = 0;
    if (!tmp[0])
        rc = fail(p, CAIRN_EINVAL, file_key, "%s: the first line is empty", path);
    else if (!(*out = strdup(tmp)))
        rc = CAIRN_ENOMEM;
    OPENSSL_cleanse(tmp, sizeof tmp);
    return rc;
}

/* Checks the URL with curl's own parser (so we accept exactly what curl will use), and builds
 * the form shown in messages: scheme://host[:port]/path, without query or fragment. */
static int check_url(pctx *p, cairn__notify_target *t, const char *s1, const char *s2,
                     const char *what)
{
    CURLU *u = curl_url();
    if (!u)
        return CAIRN_ENOMEM;
    char *scheme = NULL, *host = NULL, *user = NULL, *port = NULL, *path = NULL;
    int rc = 0;
    if (curl_url_set(u, CURLUPART_URL, t->url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, s1) != 0 && strcmp(scheme, s2) != 0) ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
        rc = fail(p, CAIRN_EJSON, "url", "must be %s", what);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
        rc = fail(p, CAIRN_EJSON, "url",
                  "must not contain credentials (user@ or user:password@); %s",
                  t->kind == CAIRN__NOTIFY_EMAIL ? "use username and password_env/password_file"
                                                 : "secrets are never read from the configuration");
        goto out;
    }
    curl_url_get(u, CURLUPART_PORT, &port, 0);
    curl_url_get(u, CURLUPART_PATH, &path, 0);
    struct cairn__sbuf b = {0};
    cairn__notify_fmt(&b, "%s://%s", scheme, host);
    if (port)
        cairn__notify_fmt(&b, ":%s", port);
    if (path && strcmp(path, "/") != 0)
        cairn__sb_puts(&b, path);
    char *q = NULL;
    if (curl_url_get(u, CURLUPART_QUERY, &q, 0) == CURLUE_OK) {
        cairn__sb_puts(&b, "?..."); /* a query may carry a token: never shown */
        curl_free(q);
    }
    if (b.oom || !b.p) {
        free(b.p);
        rc = CAIRN_ENOMEM;
        goto out;
    }
    t->url_safe = b.p;
out:
    curl_free(scheme), curl_free(host), curl_free(user), curl_free(port), curl_free(path);
    curl_url_cleanup(u);
    return rc;
}

static int host_is_loopback(const char *url)
{
    CURLU *u = curl_url();
    char *host = NULL;
    int lo = 0;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        struct in_addr a4;
        /* an address in 127.0.0.0/8, not a name that merely starts with "127." */
        lo = strcmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0 ||
             (inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127);
    }
    curl_free(host);
    curl_url_cleanup(u);
    return lo;
}

/* Template placeholders: {{task}}, {{delivery_id}}, {{result}}, {{result.A.B}} (spaces inside
 * the braces allowed). Checked at parse time so a typo is a config error, not a bad email. */
int cairn__notify_tpl_name(const char *open, const char **name, size_t *len, const char **next)
{
    const char *s = open + 2, *e = strstr(s, "}}");
    if (!e)
        return -1;
    while (s < e && *s == ' ')
        s++;
    const char *t = e;
    while (t > s && t[-1] == ' ')
        t--;
    *name = s, *len = (size_t)(t - s), *next = e + 2;
    return 0;
}

static int tpl_known(const char *n, size_t len)
{
    if ((len == 4 && memcmp(n, "task", 4) == 0) ||
        (len == 11 && memcmp(n, "delivery_id", 11) == 0) ||
        (len == 6 && memcmp(n, "result", 6) == 0))
        return 1;
    if (len <= 7 || memcmp(n, "result.", 7) != 0)
        return 0;
    /* result.A.B: non-empty segments without spaces or braces */
    for (size_t i = 7, seg = 0; i <= len; i++) {
        if (i == len || n[i] == '.') {
            if (seg == 0)
                return 0;
            seg = 0;
        } else if (n[i] == ' ' || n[i] == '{' || n[i] == '}') {
            return 0;
        } else {
            seg++;
        }
    }
    return 1;
}

static int tpl_check(pctx *p, const char *field, const char *tpl)
{
    const char *s = tpl, *o;
    while ((o = strstr(s, "{{")) != NULL) {
        const char *name, *next;
        size_t len;
        if (cairn__notify_tpl_name(o, &name, &len, &next) != 0)
            return fail(p, CAIRN_EJSON, field, "unterminated {{ at byte %zu", (size_t)(o - tpl));
        if (!tpl_known(name, len))
            return fail(p, CAIRN_EJSON, field,
                        "unknown placeholder {{%.*s}} at byte %zu (known: {{task}}, "
                        "{{delivery_id}}, {{result}}, {{result.FIELD}})",
                        (int)(len > 64 ? 64 : len), name, (size_t)(o - tpl));
        s = next;
    }
    return 0;
}

/* An email address as used in the envelope and headers: local@domain, printable ASCII without
 * spaces, quotes, angle brackets, commas or semicolons (so it cannot inject a header or a
 * second recipient). */
static int addr_ok(const char *a)
{
    const char *at = strchr(a, '@');
    if (!at || at == a || !at[1] || strchr(at + 1, '@') || strlen(a) > 254)
        return 0;
    for (const char *c = a; *c; c++)
        if (*c <= ' ' || *c >= 127 || strchr("<>()[]\\,;:\"", *c))
            return 0;
    return 1;
}

static const char *const common_keys[] = {"type",       "name",   "url",      "connect_timeout_ms",
                                          "timeout_ms", "source", "delivery", NULL};
static const char *const webhook_keys[] = {"secret_env", "secret_file", NULL};
static const char *const email_keys[] = {
    "starttls", "from", "to", "subject", "body", "username", "password_env", "password_file", NULL};

static int in_list(const char *k, const char *const *l)
{
    for (; *l; l++)
        if (strcmp(k, *l) == 0)
            return 1;
    return 0;
}

static int parse_common(pctx *p, const json_t *cfg, cairn__notify_target *t)
{
    int rc;
    if ((rc = get_str(p, cfg, "name", 1, &t->name)))
        return rc;
    size_t nl = strlen(t->name);
    for (size_t i = 0; i < nl; i++)
        if (!valid_name_char((unsigned char)t->name[i]))
            return fail(p, CAIRN_EJSON, "name",
                        "byte %zu is not one of A-Z a-z 0-9 . _ - (it becomes part of the step "
                        "name notify.<name>)",
                        i);
    if (nl > CAIRN__NOTIFY_NAME_MAX)
        return fail(p, CAIRN_EJSON, "name", "is %zu bytes; at most %d", nl, CAIRN__NOTIFY_NAME_MAX);
    if ((rc = get_str(p, cfg, "url", 1, &t->url)))
        return rc;
    if ((rc = get_str(p, cfg, "source", 0, &t->source)))
        return rc;
    if (!t->source && !(t->source = strdup("postprocess")))
        return CAIRN_ENOMEM;
    for (const char *c = t->source; *c; c++)
        if (!valid_name_char((unsigned char)*c))
            return fail(p, CAIRN_EJSON, "source", "must be a step name");
    char *d = NULL;
    if ((rc = get_str(p, cfg, "delivery", 0, &d)))
        return rc;
    t->delivery = CAIRN_EFFECT;
    if (d && strcmp(d, "at_least_once") == 0)
        t->delivery = CAIRN_EFFECT_AT_LEAST_ONCE;
    else if (d && strcmp(d, "at_most_once") != 0)
        rc = fail(p, CAIRN_EJSON, "delivery", "must be \"at_most_once\" or \"at_least_once\"");
    free(d);
    if (rc)
        return rc;
    if ((rc = get_ms(p, cfg, "connect_timeout_ms", 5000, 600000, &t->connect_timeout_ms)))
        return rc;
    return get_ms(p, cfg, "timeout_ms", t->kind == CAIRN__NOTIFY_EMAIL ? 30000 : 10000, 3600000,
                  &t->timeout_ms);
}

static int parse_webhook(pctx *p, const json_t *cfg, cairn__notify_target *t)
{
    int rc = check_url(p, t, "http", "https", "an http:// or https:// URL");
    if (rc)
        return rc;
    if ((rc = read_secret(p, cfg, "secret_env", "secret_file", 1, &t->secret_text)))
        return rc;
    const char *field = json_object_get(cfg, "secret_env") ? "secret_env" : "secret_file";
    const char *b64 = t->secret_text;
    if (strncmp(b64, "whsec_", 6) == 0)
        b64 += 6;
    rc = b64_decode(b64, &t->key, &t->key_len);
    if (rc == -2)
        return CAIRN_ENOMEM;
    if (rc)
        return fail(p, CAIRN_EINVAL, field,
                    "the secret is not base64 (a Standard Webhooks secret is \"whsec_\" followed "
                    "by the base64 of 24 to 64 random bytes)");
    if (t->key_len < 24)
        return fail(p, CAIRN_EINVAL, field,
                    "the secret decodes to %zu bytes; Standard Webhooks asks for at least 24",
                    t->key_len);
    return 0;
}

static int parse_email(pctx *p, const json_t *cfg, cairn__notify_target *t)
{
    int rc = check_url(p, t, "smtp", "smtps", "an smtp:// or smtps:// URL");
    if (rc)
        return rc;
    json_t *tls = json_object_get(cfg, "starttls");
    if (tls && !json_is_boolean(tls))
        return fail(p, CAIRN_EJSON, "starttls", "must be true or false");
    t->starttls = tls && json_is_true(tls);
    if (t->starttls && strncmp(t->url, "smtps:", 6) == 0)
        return fail(p, CAIRN_EJSON, "starttls", "is for smtp:// URLs (smtps:// is TLS already)");
    if ((rc = get_str(p, cfg, "from", 1, &t->from)))
        return rc;
    if (!addr_ok(t->from))
        return fail(p, CAIRN_EJSON, "from", "must be a plain address like name@example.com");
    json_t *to = json_object_get(cfg, "to");
    if (!to)
        return fail(p, CAIRN_EJSON, "to", "is required");
    size_t n = json_is_array(to) ? json_array_size(to) : 1;
    if (!json_is_array(to) && !json_is_string(to))
        return fail(p, CAIRN_EJSON, "to", "must be an address or an array of addresses");
    if (n == 0)
        return fail(p, CAIRN_EJSON, "to", "must name at least one address");
    if (n > 100)
        return fail(p, CAIRN_EJSON, "to", "has %zu addresses; at most 100", n);
    if (!(t->to = calloc(n, sizeof *t->to)))
        return CAIRN_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_is_array(to) ? json_array_get(to, i) : to;
        char field[32];
        if (json_is_array(to))
            snprintf(field, sizeof field, "to[%zu]", i);
        else
            snprintf(field, sizeof field, "to");
        if (!json_is_string(a) || !addr_ok(json_string_value(a)))
            return fail(p, CAIRN_EJSON, field, "must be a plain address like name@example.com");
        if (!(t->to[i] = strdup(json_string_value(a))))
            return CAIRN_ENOMEM;
        t->n_to = i + 1;
    }
    if ((rc = get_str(p, cfg, "subject", 0, &t->subject)) ||
        (rc = get_str(p, cfg, "body", 0, &t->body)))
        return rc;
    if (!t->subject && !(t->subject = strdup("cairn: task {{task}} completed")))
        return CAIRN_ENOMEM;
    if (!t->body && !(t->body = strdup("{{result}}")))
        return CAIRN_ENOMEM;
    if ((rc = tpl_check(p, "subject", t->subject)) || (rc = tpl_check(p, "body", t->body)))
        return rc;
    if ((rc = get_str(p, cfg, "username", 0, &t->username)))
        return rc;
    if ((rc = read_secret(p, cfg, "password_env", "password_file", 0, &t->secret_text)))
        return rc;
    if (!t->username != !t->secret_text)
        return fail(p, CAIRN_EJSON, t->username ? "password_env" : "username",
                    "username and password_env/password_file go together");
    if (t->secret_text && !t->starttls && strncmp(t->url, "smtps:", 6) != 0 &&
        !host_is_loopback(t->url))
        return fail(p, CAIRN_EJSON, "url",
                    "refusing to send a password over plain smtp:// to a remote host; use "
                    "smtps:// or \"starttls\": true");
    return 0;
}

int cairn__notify_target_parse(const json_t *cfg, const char *where, cairn__notify_target **out,
                               char *err, size_t errlen)
{
    pctx p = {where ? where : "notify", err, errlen};
    if (err && errlen)
        err[0] = 0;
    if (!out)
        return fail(&p, CAIRN_EINVAL, NULL, "no output pointer");
    *out = NULL;
    if (!cfg || !json_is_object(cfg))
        return fail(&p, cfg ? CAIRN_EJSON : CAIRN_EINVAL, NULL, "must be a JSON object");
    json_t *type = json_object_get(cfg, "type");
    int kind = 0;
    if (json_is_string(type) && strcmp(json_string_value(type), "webhook") == 0)
        kind = CAIRN__NOTIFY_WEBHOOK;
    else if (json_is_string(type) && strcmp(json_string_value(type), "email") == 0)
        kind = CAIRN__NOTIFY_EMAIL;
    else
        return fail(&p, CAIRN_EJSON, "type",
                    type ? "must be \"webhook\" or \"email\""
                         : "is required (\"webhook\" or \"email\")");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)cfg, k, v)
    {
        if (in_list(k, common_keys) ||
            in_list(k, kind == CAIRN__NOTIFY_WEBHOOK ? webhook_keys : email_keys))
            continue;
        if (strstr(k, "secret") || strstr(k, "password") || strstr(k, "token"))
            return fail(&p, CAIRN_EJSON, k, "secrets are never read from the configuration; use %s",
                        kind == CAIRN__NOTIFY_WEBHOOK ? "secret_env or secret_file"
                                                      : "password_env or password_file");
        return fail(&p, CAIRN_EJSON, k, "unknown field for a %s target",
                    kind == CAIRN__NOTIFY_WEBHOOK ? "webhook" : "email");
    }
    cairn__notify_target *t = calloc(1, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    t->kind = kind;
    int rc = parse_common(&p, cfg, t);
    if (!rc)
        rc = kind == CAIRN__NOTIFY_WEBHOOK ? parse_webhook(&p, cfg, t) : parse_email(&p, cfg, t);
    if (rc) {
        if (rc == CAIRN_ENOMEM && err && errlen && !err[0])
            fail(&p, rc, NULL, "out of memory");
        cairn__notify_target_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void cairn__notify_target_free(cairn__notify_target *t)
{
    if (!t)
        return;
    free(t->name), free(t->url), free(t->url_safe), free(t->source);
    if (t->key) {
        OPENSSL_cleanse(t->key, t->key_len);
        free(t->key);
    }
    free(t->from);
    for (size_t i = 0; i < t->n_to; i++)
        free(t->to[i]);
    free(t->to);
    free(t->subject), free(t->body), free(t->username);
    wipe_free(t->secret_text);
    free(t);
}

const char *cairn__notify_target_name(const cairn__notify_target *t) { return t ? t->name : NULL; }
const char *cairn__notify_target_source(const cairn__notify_target *t)
{
    return t ? t->source : NULL;
}
cairn_delivery cairn__notify_target_delivery(const cairn__notify_target *t)
{
    return t ? t->delivery : CAIRN_EFFECT;
}

/* ------------------------------------------------------------------ webhook signing */

int cairn__notify_sign(const cairn__notify_target *t, const char *id, int64_t timestamp,
                       const void *body, size_t len, char *out, size_t outlen)
{
    if (!t || t->kind != CAIRN__NOTIFY_WEBHOOK || !id || (len && !body) || !out || outlen < 64)
        return CAIRN_EINVAL;
    char ts[24];
    int tn = snprintf(ts, sizeof ts, "%lld", (long long)timestamp);
    size_t il = strlen(id), n = il + 1 + (size_t)tn + 1 + len;
    unsigned char *msg = malloc(n ? n : 1);
    if (!msg)
        return CAIRN_ENOMEM;
    /* signed content: id "." timestamp "." body */
    memcpy(msg, id, il);
    msg[il] = '.';
    memcpy(msg + il + 1, ts, (size_t)tn);
    msg[il + 1 + (size_t)tn] = '.';
    if (len)
        memcpy(msg + il + 2 + (size_t)tn, body, len);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned mac_len = 0;
    unsigned char *r = HMAC(EVP_sha256(), t->key, (int)t->key_len, msg, n, mac, &mac_len);
    free(msg);
    if (!r)
        return CAIRN_ENOMEM;
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)mac_len); /* 32 bytes -> 44 chars + NUL */
    return 0;
}

/* ------------------------------------------------------------------ a call's state */

/* Sets the step's error: "<target> (<kind> <url>): <text>", scrubbed of the secret. */
void cairn__notify_call_error(cairn__notify_call *c, const char *fmt, ...)
{
    char text[CAIRN__NOTIFY_MSG_MAX], msg[CAIRN__NOTIFY_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "notify target '%s' (%s %.160s): %s", c->t->name, c->what,
             c->t->url_safe, text);
    scrub(msg, c->t->secret_text);
    if (c->t->kind == CAIRN__NOTIFY_WEBHOOK && strncmp(c->t->secret_text, "whsec_", 6) == 0)
        scrub(msg, c->t->secret_text + 6);
    cairn_ctx_set_error(c->ctx, "%s", msg);
}

static size_t on_answer(char *p, size_t sz, size_t n, void *u)
{
    cairn__notify_call *c = u;
    size_t len = sz * n, room = CAIRN__NOTIFY_SNIPPET_MAX - c->answer_len;
    memcpy(c->answer + c->answer_len, p, len < room ? len : room);
    c->answer_len += len < room ? len : room;
    c->answer[c->answer_len] = 0;
    return len; /* the rest is read and dropped */
}

/* Abort on a stop request only while the request is incomplete (then nothing was delivered);
 * once it has left, wait for the answer: aborting then would turn a success into a doubt. */
static int on_progress(void *u, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal;
    cairn__notify_call *c = u;
    int sent = c->t->kind == CAIRN__NOTIFY_WEBHOOK ? ulnow >= c->body_len : c->msg_eof;
    if (!sent && cairn_ctx_stopping(c->ctx)) {
        c->stopped = 1;
        return 1;
    }
    return 0;
}

/* The receiver's answer as printable ASCII, for messages. */
static const char *answer_text(cairn__notify_call *c)
{
    for (size_t i = 0; i < c->answer_len; i++)
        if ((unsigned char)c->answer[i] < 32 || (unsigned char)c->answer[i] >= 127)
            c->answer[i] = ' ';
    return c->answer;
}

const char *cairn__notify_curl_text(cairn__notify_call *c, CURLcode rc)
{
    return c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc);
}

/* curl errors that no retry can cure: the configuration or the build is wrong. */
static int curl_permanent(CURLcode rc)
{
    return rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
           rc == CURLE_NOT_BUILT_IN || rc == CURLE_BAD_FUNCTION_ARGUMENT ||
           rc == CURLE_UNKNOWN_OPTION || rc == CURLE_USE_SSL_FAILED;
}

cairn_step_result cairn__notify_no_answer(cairn__notify_call *c, CURLcode rc, int sent,
                                          const char *what, const char *who)
{
    if (c->stopped) {
        cairn__notify_call_error(c, "stopped before the %s was sent; nothing was delivered", what);
        return CAIRN_STEP_TRANSIENT;
    }
    if (curl_permanent(rc)) {
        cairn__notify_call_error(c, "%s", cairn__notify_curl_text(c, rc));
        return CAIRN_STEP_PERMANENT;
    }
    if (!sent) {
        cairn__notify_call_error(c, "%s (before the %s was sent: nothing was delivered)",
                                 cairn__notify_curl_text(c, rc), what);
        return CAIRN_STEP_TRANSIENT;
    }
    cairn__notify_call_error(c, "%s after the %s was sent; the %s may have it",
                             cairn__notify_curl_text(c, rc), what, who);
    return CAIRN_STEP_UNKNOWN;
}

void cairn__notify_curl_opts(CURL *h, cairn__notify_call *c)
{
    curl_easy_setopt(h, CURLOPT_URL, c->t->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM for DNS timeouts: we may be a thread */
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->t->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->t->timeout_ms);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
}

/* Packs {"status": code, "target": name, "delivery_id": id[, "message_id": mid]}. */
static void pack_kv(msgpack_packer *pk, const char *k, const char *v)
{
    size_t kl = strlen(k), vl = strlen(v);
    msgpack_pack_str(pk, kl);
    msgpack_pack_str_body(pk, k, kl);
    msgpack_pack_str(pk, vl);
    msgpack_pack_str_body(pk, v, vl);
}

void cairn__notify_pack_ok(cairn_ctx *ctx, const cairn__notify_target *t, long status,
                           const char *mid)
{
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, mid ? 4 : 3);
    msgpack_pack_str(pk, 6);
    msgpack_pack_str_body(pk, "status", 6);
    msgpack_pack_long(pk, status);
    pack_kv(pk, "target", t->name);
    pack_kv(pk, "delivery_id", cairn_ctx_delivery_id(ctx));
    if (mid)
        pack_kv(pk, "message_id", mid);
}

/* ------------------------------------------------------------------ webhook */

static cairn_step_result webhook_outcome(cairn__notify_call *c, CURL *h, CURLcode rc)
{
    long status = 0;
    curl_off_t up = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &up);
    if (status >= 200 && status < 300) {
        cairn__notify_pack_ok(c->ctx, c->t, status, NULL);
        return CAIRN_STEP_OK;
    }
    if (status == 429) {
        curl_off_t wait = -1;
        curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &wait);
        if (wait > 0) {
            /* honoured: the next attempt waits at least this long (capped at a day) */
            cairn_ctx_set_retry_after(c->ctx,
                                      wait > 86400 ? 86400u * 1000u : (uint32_t)wait * 1000u);
            cairn__notify_call_error(
                c, "HTTP 429 Too Many Requests; retrying after %lld s as the receiver asks: %s",
                (long long)wait, answer_text(c));
        } else
            cairn__notify_call_error(c, "HTTP 429 Too Many Requests: %s", answer_text(c));
        return CAIRN_STEP_TRANSIENT;
    }
    if (status == 408 || (status >= 500 && status < 600)) {
        cairn__notify_call_error(c, "HTTP %ld (will retry): %s", status, answer_text(c));
        return CAIRN_STEP_TRANSIENT;
    }
    if (status >= 300 && status < 400) {
        char *loc = NULL;
        curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &loc);
        int n = loc ? (int)strcspn(loc, "?#") : 0; /* a query may carry a token */
        cairn__notify_call_error(
            c, "HTTP %ld redirect%s%.*s not followed (not retried); configure the final URL",
            status, loc ? " to " : "", n > 200 ? 200 : n, loc ? loc : "");
        return CAIRN_STEP_PERMANENT;
    }
    if (status >= 200) { /* a 1xx is interim: without a final answer the outcome is unknown */
        cairn__notify_call_error(c, "HTTP %ld (not retried): %s", status, answer_text(c));
        return CAIRN_STEP_PERMANENT;
    }
    return cairn__notify_no_answer(c, rc, up >= c->body_len, "request", "receiver");
}

static cairn_step_result do_webhook(cairn__notify_call *c, json_t *result)
{
    const char *id = cairn_ctx_delivery_id(c->ctx);
    json_t *doc = json_object();
    if (!doc || json_object_set_new(doc, "type", json_string("cairn.task.completed")) ||
        json_object_set_new(doc, "task", json_string(cairn_ctx_task_id(c->ctx))) ||
        json_object_set_new(doc, "delivery_id", json_string(id)) ||
        json_object_set(doc, "result", result)) {
        json_decref(doc);
        cairn__notify_call_error(c, "out of memory building the body");
        return CAIRN_STEP_TRANSIENT;
    }
    char *body = NULL;
    size_t len = 0;
    int rc = cairn__canon_json(doc, &body, &len);
    json_decref(doc);
    if (rc) {
        cairn__notify_call_error(c, "cannot serialize the body: %s", cairn_strerror(rc));
        return rc == CAIRN_ENOMEM ? CAIRN_STEP_TRANSIENT : CAIRN_STEP_PERMANENT;
    }
    char sig[64], hdr_id[200], hdr_ts[64], hdr_sig[96];
    int64_t now = (int64_t)time(NULL);
    if (cairn__notify_sign(c->t, id, now, body, len, sig, sizeof sig) != 0) {
        free(body);
        cairn__notify_call_error(c, "cannot compute the signature (out of memory)");
        return CAIRN_STEP_TRANSIENT;
    }
    snprintf(hdr_id, sizeof hdr_id, "webhook-id: %s", id);
    snprintf(hdr_ts, sizeof hdr_ts, "webhook-timestamp: %lld", (long long)now);
    snprintf(hdr_sig, sizeof hdr_sig, "webhook-signature: %s", sig);
    struct curl_slist *hl = NULL, *tmp;
    const char *hdrs[] = {"Content-Type: application/json", hdr_id, hdr_ts, hdr_sig,
                          "Expect:" /* no 100-continue round trip */};
    CURL *h = curl_easy_init();
    cairn_step_result res;
    for (size_t i = 0; h && i < sizeof hdrs / sizeof *hdrs; i++) {
        if (!(tmp = curl_slist_append(hl, hdrs[i]))) {
            curl_easy_cleanup(h);
            h = NULL;
            break;
        }
        hl = tmp;
    }
    if (!h) {
        cairn__notify_call_error(c, "cannot create a curl handle (out of memory)");
        res = CAIRN_STEP_TRANSIENT;
        goto out;
    }
    c->body_len = (curl_off_t)len;
    cairn__notify_curl_opts(h, c);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "cairn/0.1");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_answer);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    CURLcode crc = curl_easy_perform(h);
    res = webhook_outcome(c, h, crc);
    curl_easy_cleanup(h);
out:
    curl_slist_free_all(hl);
    free(body);
    return res;
}

/* ------------------------------------------------------------------ the step */

cairn_step_result cairn__notify_step(cairn_ctx *ctx, void *target)
{
    const cairn__notify_target *t = target;
    if (!t) {
        cairn_ctx_set_error(ctx, "notify step '%s' has no target", cairn_ctx_step_name(ctx));
        return CAIRN_STEP_PERMANENT;
    }
    cairn__notify_call c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx, c.t = t, c.what = t->kind == CAIRN__NOTIFY_WEBHOOK ? "webhook" : "email";
    const msgpack_object *src = cairn_ctx_dep(ctx, t->source);
    if (!src) {
        cairn__notify_call_error(&c, "source step '%s' is not a dependency of step '%s'", t->source,
                                 cairn_ctx_step_name(ctx));
        return CAIRN_STEP_PERMANENT;
    }
    json_t *result = cairn__msgpack_to_json(src);
    if (!result) {
        cairn__notify_call_error(&c, "cannot convert the output of '%s' to JSON (out of memory)",
                                 t->source);
        return CAIRN_STEP_TRANSIENT;
    }
    cairn_step_result r =
        t->kind == CAIRN__NOTIFY_WEBHOOK ? do_webhook(&c, result) : cairn__notify_email(&c, result);
    json_decref(result);
    return r;
}
