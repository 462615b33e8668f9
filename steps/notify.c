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

int cairn__read_secret(const cairn__cfg *p, const json_t *cfg, const char *env_key,
                       const char *file_key, int required, char **out)
{
    json_t *e = json_object_get(cfg, env_key), *f = json_object_get(cfg, file_key);
    *out = NULL;
    if (e && f)
        return cairn__cfg_fail(p, CAIRN_EJSON, env_key, "give either %s or %s, not both", env_key,
                               file_key);
    if (!e && !f)
        return required ? cairn__cfg_fail(p, CAIRN_EJSON, env_key, "is required (or %s)", file_key)
                        : 0;
    if (e) {
        if (!json_is_string(e) || json_string_length(e) == 0)
            return cairn__cfg_fail(p, CAIRN_EJSON, env_key,
                                   "must be the name of an environment variable");
        const char *name = json_string_value(e);
        const char *v = getenv(name);
        if (!v || !*v)
            return cairn__cfg_fail(p, CAIRN_EINVAL, env_key,
                                   "environment variable %s is not set or empty", name);
        *out = strdup(v);
        return *out ? 0 : CAIRN_ENOMEM;
    }
    if (!json_is_string(f) || json_string_length(f) == 0)
        return cairn__cfg_fail(p, CAIRN_EJSON, file_key, "must be a file path");
    const char *path = json_string_value(f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cairn__cfg_fail(p, errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO, file_key, "%s: %s",
                               path, strerror(errno));
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
            return cairn__cfg_fail(p, CAIRN_EIO, file_key, "%s: %s", path, strerror(e2));
        }
        if (r == 0 || (have += (size_t)r) == sizeof tmp - 1 || memchr(tmp, '\n', have))
            break;
    }
    close(fd);
    tmp[have] = 0;
    tmp[strcspn(tmp, "\r\n")] = 0; /* the first line only */
    int rc = 0;
    if (!tmp[0])
        rc = cairn__cfg_fail(p, CAIRN_EINVAL, file_key, "%s: the first line is empty", path);
    else if (!(*out = strdup(tmp)))
        rc = CAIRN_ENOMEM;
    OPENSSL_cleanse(tmp, sizeof tmp);
    return rc;
}

/* Checks the URL with curl's own parser (so we accept exactly what curl will use), and builds
 * the form shown in messages: scheme://host[:port]/path, without query or fragment. */
static int check_url(const cairn__cfg *p, cairn__notify_target *t, const char *s1, const char *s2,
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
        rc = cairn__cfg_fail(p, CAIRN_EJSON, "url", "must be %s", what);
        goto out;
    }
    if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
        rc = cairn__cfg_fail(
            p, CAIRN_EJSON, "url", "must not contain credentials (user@ or user:password@); %s",
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

static int tpl_check(const cairn__cfg *p, const char *field, const char *tpl)
{
    const char *s = tpl, *o;
    while ((o = strstr(s, "{{")) != NULL) {
        const char *name, *next;
        size_t len;
        if (cairn__notify_tpl_name(o, &name, &len, &next) != 0)
            return cairn__cfg_fail(p, CAIRN_EJSON, field, "unterminated {{ at byte %zu",
                                   (size_t)(o - tpl));
        if (!tpl_known(name, len))
            return cairn__cfg_fail(p, CAIRN_EJSON, field,
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

/* In the order of the kinds (notify_impl.h): the index read is the kind. */
static const char *const kinds[] = {"webhook", "email", NULL};
/* In the order of at_least_once's values. */
static const char *const deliveries[] = {"at_most_once", "at_least_once", NULL};

#define AT(m) CAIRN__CFG_AT(cairn__notify_target, m)
/* timeouts are tuning: how long to wait for the receiver, not what it is sent */
#define MS(dflt, max) .lo = 1, .hi = (max), .def = (dflt), .unit = "(milliseconds)", .tuning = 1
static const cairn__cfg_field type_field = {"type", CAIRN__CFG_ENUM, AT(kind), .choices = kinds,
                                            .required = "is required (\"webhook\" or \"email\")"};
/* The settings both kinds have; what each means is in notify.h. */
static const cairn__cfg_field common_fields[] = {
    CAIRN__CFG_KNOWN("type"),
    {"name", CAIRN__CFG_STR, AT(name), .nonempty = 1, .required = "is required"},
    {"url", CAIRN__CFG_STR, AT(url), .nonempty = 1, .required = "is required"},
    {"source", CAIRN__CFG_STR, AT(source), .nonempty = 1, .sdef = "postprocess"},
    {"delivery", CAIRN__CFG_ENUM, AT(at_least_once), .choices = deliveries, .sdef = "at_most_once"},
    {"connect_timeout_ms", CAIRN__CFG_INT, AT(connect_timeout_ms), MS(5000, 600000)},
    {NULL},
};
static const cairn__cfg_field webhook_fields[] = {
    {"timeout_ms", CAIRN__CFG_INT, AT(timeout_ms), MS(10000, 3600000)},
    CAIRN__CFG_KNOWN("secret_env"),
    CAIRN__CFG_KNOWN("secret_file"),
    {NULL},
};
static const cairn__cfg_field email_fields[] = {
    {"timeout_ms", CAIRN__CFG_INT, AT(timeout_ms), MS(30000, 3600000)},
    {"starttls", CAIRN__CFG_BOOL, AT(starttls)},
    {"from", CAIRN__CFG_STR, AT(from), .nonempty = 1, .required = "is required"},
    CAIRN__CFG_KNOWN("to"),
    {"subject", CAIRN__CFG_STR, AT(subject), .nonempty = 1,
     .sdef = "cairn: task {{task}} completed"},
    {"body", CAIRN__CFG_STR, AT(body), .nonempty = 1, .sdef = "{{result}}"},
    {"username", CAIRN__CFG_STR, AT(username), .nonempty = 1},
    CAIRN__CFG_KNOWN("password_env"),
    CAIRN__CFG_KNOWN("password_file"),
    {NULL},
};
#undef MS
#undef AT

/* The checks of the common settings the table cannot make (after they are read). */
static int check_common(const cairn__cfg *p, const cairn__notify_target *t)
{
    size_t nl = strlen(t->name);
    for (size_t i = 0; i < nl; i++)
        if (!valid_name_char((unsigned char)t->name[i]))
            return cairn__cfg_fail(p, CAIRN_EJSON, "name",
                                   "byte %zu is not one of A-Z a-z 0-9 . _ - (it becomes part of "
                                   "the step name notify.<name>)",
                                   i);
    if (nl > CAIRN__NOTIFY_NAME_MAX)
        return cairn__cfg_fail(p, CAIRN_EJSON, "name", "is %zu bytes; at most %d", nl,
                               CAIRN__NOTIFY_NAME_MAX);
    for (const char *c = t->source; *c; c++)
        if (!valid_name_char((unsigned char)*c))
            return cairn__cfg_fail(p, CAIRN_EJSON, "source", "must be a step name");
    return 0;
}

static int parse_webhook(const cairn__cfg *p, const json_t *cfg, cairn__notify_target *t)
{
    int rc = check_url(p, t, "http", "https", "an http:// or https:// URL");
    if (rc)
        return rc;
    if ((rc = cairn__read_secret(p, cfg, "secret_env", "secret_file", 1, &t->secret_text)))
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
        return cairn__cfg_fail(
            p, CAIRN_EINVAL, field,
            "the secret is not base64 (a Standard Webhooks secret is \"whsec_\" followed "
            "by the base64 of 24 to 64 random bytes)");
    if (t->key_len < 24)
        return cairn__cfg_fail(
            p, CAIRN_EINVAL, field,
            "the secret decodes to %zu bytes; Standard Webhooks asks for at least 24", t->key_len);
    return 0;
}

static int parse_email(const cairn__cfg *p, const json_t *cfg, cairn__notify_target *t)
{
    int rc = check_url(p, t, "smtp", "smtps", "an smtp:// or smtps:// URL");
    if (rc)
        return rc;
    if (t->starttls && strncmp(t->url, "smtps:", 6) == 0)
        return cairn__cfg_fail(p, CAIRN_EJSON, "starttls",
                               "is for smtp:// URLs (smtps:// is TLS already)");
    if (!addr_ok(t->from))
        return cairn__cfg_fail(p, CAIRN_EJSON, "from",
                               "must be a plain address like name@example.com");
    json_t *to = json_object_get(cfg, "to");
    if (!to)
        return cairn__cfg_fail(p, CAIRN_EJSON, "to", "is required");
    size_t n = json_is_array(to) ? json_array_size(to) : 1;
    if (!json_is_array(to) && !json_is_string(to))
        return cairn__cfg_fail(p, CAIRN_EJSON, "to", "must be an address or an array of addresses");
    if (n == 0)
        return cairn__cfg_fail(p, CAIRN_EJSON, "to", "must name at least one address");
    if (n > 100)
        return cairn__cfg_fail(p, CAIRN_EJSON, "to", "has %zu addresses; at most 100", n);
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
            return cairn__cfg_fail(p, CAIRN_EJSON, field,
                                   "must be a plain address like name@example.com");
        if (!(t->to[i] = strdup(json_string_value(a))))
            return CAIRN_ENOMEM;
        t->n_to = i + 1;
    }
    if ((rc = tpl_check(p, "subject", t->subject)) || (rc = tpl_check(p, "body", t->body)))
        return rc;
    if ((rc = cairn__read_secret(p, cfg, "password_env", "password_file", 0, &t->secret_text)))
        return rc;
    if (!t->username != !t->secret_text)
        return cairn__cfg_fail(p, CAIRN_EJSON, t->username ? "password_env" : "username",
                               "username and password_env/password_file go together");
    if (t->secret_text && !t->starttls && strncmp(t->url, "smtps:", 6) != 0 &&
        !host_is_loopback(t->url))
        return cairn__cfg_fail(
            p, CAIRN_EJSON, "url",
            "refusing to send a password over plain smtp:// to a remote host; use "
            "smtps:// or \"starttls\": true");
    return scrub_forms(t);
}

int cairn__notify_target_parse(const json_t *cfg, const char *where, cairn__notify_target **out,
                               char *err, size_t errlen)
{
    cairn__cfg p = {NULL, where ? where : "notify", NULL, err, errlen};
    if (err && errlen)
        err[0] = 0;
    if (!out)
        return cairn__cfg_fail(&p, CAIRN_EINVAL, NULL, "no output pointer");
    *out = NULL;
    if (!cfg || !json_is_object(cfg))
        return cairn__cfg_fail(&p, cfg ? CAIRN_EJSON : CAIRN_EINVAL, NULL, "must be a JSON object");
    int rc = cairn__cfg_open(&p, cfg, p.path, NULL, err, errlen);
    cairn__notify_target *t = rc ? NULL : calloc(1, sizeof *t);
    if (!rc && !t)
        return cairn__cfg_fail(&p, CAIRN_ENOMEM, NULL, "out of memory");
    if (!rc)
        rc = cairn__cfg_read_field(&p, &type_field, t);
    if (rc) {
        free(t);
        return rc;
    }
    const int hook = t->kind == CAIRN__NOTIFY_WEBHOOK;
    const cairn__cfg_field *const tables[] = {common_fields, hook ? webhook_fields : email_fields,
                                              NULL};
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)cfg, k, v)
    {
        if (!rc && !cairn__cfg_declared(tables, k) &&
            (strstr(k, "secret") || strstr(k, "password") || strstr(k, "token")))
            rc = cairn__cfg_fail(
                &p, CAIRN_EJSON, k, "secrets are never read from the configuration; use %s",
                hook ? "secret_env or secret_file" : "password_env or password_file");
    }
    if (!rc)
        rc = cairn__cfg_check_keys(&p, tables,
                                   hook ? "unknown field for a webhook target"
                                        : "unknown field for an email target");
    if (!rc)
        rc = cairn__cfg_read(&p, common_fields, t);
    if (!rc)
        rc = check_common(&p, t);
    if (!rc)
        rc = cairn__cfg_read(&p, tables[1], t);
    if (!rc)
        rc = hook ? parse_webhook(&p, cfg, t) : parse_email(&p, cfg, t);
    if (!rc)
        rc = cairn__cfg_version(&p, tables, &t->version);
    if (rc) {
        if (rc == CAIRN_ENOMEM && err && errlen && !err[0])
            cairn__cfg_fail(&p, rc, NULL, "out of memory");
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
    cairn__cfg_release(common_fields, t);
    cairn__cfg_release(email_fields, t); /* a webhook's are NULL: nothing to free */
    free(t->url_safe);
    if (t->key) {
        OPENSSL_cleanse(t->key, t->key_len);
        free(t->key);
    }
    for (size_t i = 0; i < t->n_to; i++)
        free(t->to[i]);
    free(t->to);
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
uint32_t cairn__notify_target_version(const cairn__notify_target *t) { return t->version; }

cairn_delivery cairn__notify_target_delivery(const cairn__notify_target *t)
{
    return t && t->at_least_once ? CAIRN_EFFECT_AT_LEAST_ONCE : CAIRN_EFFECT;
}
