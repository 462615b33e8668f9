/* steps/notify.c - the `notify` effect step's targets: parsing and checking one target's
 * configuration, and holding its secret. The step itself is in notify_call.c (what both
 * transports share: outcomes, messages), notify_webhook.c (signed webhooks) and notify_email.c
 * (SMTP).
 *
 * Every check that can be made before anything is sent is made here, once, when the pipeline
 * loads: unknown fields are refused (a typo never silently drops a setting), templates are
 * checked for unknown placeholders, URLs are parsed with curl's own parser (so exactly what curl
 * will use is accepted) and a password is refused for plain SMTP to a remote host.
 *
 * Secrets (webhook key, SMTP password) are read from the environment or a file here, never from
 * the config JSON. Along with the secret the target keeps every form it could come back in
 * (without "whsec_", the SMTP AUTH encodings), so notify_call.c can scrub each of them from
 * messages; all of it is wiped when the target is freed.
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
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* ------------------------------------------------------------------ small helpers */

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

static char *b64_text(const unsigned char *p, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}

static int add_form(cairn__notify_target *t, char *form)
{
    if (!form)
        return CAIRN_ENOMEM;
    size_t i = t->n_scrub++;
    while (i > 0 && strlen(t->scrub[i - 1]) < strlen(form)) {
        t->scrub[i] = t->scrub[i - 1];
        i--;
    }
    t->scrub[i] = form;
    return 0;
}

/* Fills t->scrub with the forms of its secret (see notify_impl.h), longest first. */
static int scrub_forms(cairn__notify_target *t)
{
    const char *sec = t->secret_text;
    int rc;
    if (!sec)
        return 0;
    if ((rc = add_form(t, strdup(sec))))
        return rc;
    if (t->kind == CAIRN__NOTIFY_WEBHOOK)
        return strncmp(sec, "whsec_", 6) == 0 && sec[6] ? add_form(t, strdup(sec + 6)) : 0;
    if ((rc = add_form(t, b64_text((const unsigned char *)sec, strlen(sec)))))
        return rc;
    /* SASL PLAIN as curl sends it: an empty authzid, then NUL user NUL password */
    const char *user = t->username ? t->username : "";
    size_t ul = strlen(user), pl = strlen(sec), n = 1 + ul + 1 + pl;
    unsigned char *plain = malloc(n);
    if (!plain)
        return CAIRN_ENOMEM;
    plain[0] = 0;
    memcpy(plain + 1, user, ul);
    plain[1 + ul] = 0;
    memcpy(plain + 2 + ul, sec, pl);
    rc = add_form(t, b64_text(plain, n));
    OPENSSL_cleanse(plain, n);
    free(plain);
    return rc;
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
    if ((rc = scrub_forms(t)))
        return rc;
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
    return scrub_forms(t);
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
    for (size_t i = 0; i < t->n_scrub; i++)
        wipe_free(t->scrub[i]);
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
