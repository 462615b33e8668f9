/* tests/notify/test_notify_config.c - the notify step's configuration, signature and
 * Message-ID, without any network: every config error names its field, secrets never come
 * from the JSON (nor appear in messages), and the signature matches the Standard Webhooks
 * reference vector.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "steps/notify.h"
#include "tests/tap.h"

/* The reference vector of the Standard Webhooks specification. */
#define VEC_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define VEC_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define VEC_TS 1614265330
#define VEC_BODY "{\"test\": 2432232314}"
#define VEC_SIG "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

static int parse(const char *js, cairn__notify_target **t, char *err, size_t errlen)
{
    json_error_t je;
    json_t *cfg = json_loads(js, 0, &je);
    if (!cfg) {
        snprintf(err, errlen, "test bug: bad JSON: %s", je.text);
        return -9999;
    }
    int rc = cairn__notify_target_parse(cfg, "notify[1]", t, err, errlen);
    json_decref(cfg);
    return rc;
}

/* Expects parse failure with `code` and a message starting with `prefix`. */
static void expect_err(const char *js, int code, const char *prefix, const char *what)
{
    cairn__notify_target *t = NULL;
    char err[512] = "";
    int rc = parse(js, &t, err, sizeof err);
    ok(rc == code && t == NULL && strncmp(err, prefix, strlen(prefix)) == 0 &&
           !strstr(err, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") && !strstr(err, "hunter2-smtp"),
       "%s -> %s \"%s...\"", what, cairn_errname(code), prefix);
    if (rc != code || strncmp(err, prefix, strlen(prefix)) != 0)
        diag("got %s: %s", cairn_errname(rc), err);
    cairn__notify_target_free(t);
}

int main(void)
{
    setenv("NT_SECRET", VEC_SECRET, 1);
    setenv("NT_SHORT", "whsec_c2hvcnQ=", 1); /* "short": 5 bytes */
    setenv("NT_NOTB64", "whsec_not base64!", 1);
    setenv("NT_PASS", "hunter2-smtp", 1);
    unsetenv("NT_UNSET");
    char sf[] = "/tmp/cairn-nt-secret-XXXXXX";
    int fd = mkstemp(sf);
    if (fd < 0 || write(fd, VEC_SECRET "\r\nsecond line\n", strlen(VEC_SECRET) + 14) < 0)
        return 1;
    close(fd);

    /* ---- a good webhook target, from env and from file; the signature vector */
    char err[512], js[1024];
    cairn__notify_target *t = NULL;
    int rc = parse("{\"type\":\"webhook\",\"name\":\"shop\",\"url\":\"http://127.0.0.1:9/hook\","
                   "\"secret_env\":\"NT_SECRET\"}",
                   &t, err, sizeof err);
    ok(rc == 0 && t, "webhook target parses (%s)", rc ? err : "ok");
    ok(t && strcmp(cairn__notify_target_name(t), "shop") == 0, "name");
    ok(t && strcmp(cairn__notify_target_source(t), "postprocess") == 0,
       "source defaults to postprocess");
    ok(t && cairn__notify_target_delivery(t) == CAIRN_EFFECT, "delivery defaults to at most once");
    char sig[64] = "";
    rc =
        t ? cairn__notify_sign(t, VEC_ID, VEC_TS, VEC_BODY, strlen(VEC_BODY), sig, sizeof sig) : -1;
    ok(rc == 0 && strcmp(sig, VEC_SIG) == 0, "Standard Webhooks reference vector: %s", sig);
    ok(t && cairn__notify_sign(t, VEC_ID, VEC_TS, VEC_BODY, strlen(VEC_BODY), sig, 10) ==
                CAIRN_EINVAL,
       "sign refuses a short output buffer");
    cairn__notify_target_free(t);

    snprintf(js, sizeof js,
             "{\"type\":\"webhook\",\"name\":\"a.b-c_1\",\"url\":\"https://example.com/x?k=1\","
             "\"secret_file\":\"%s\",\"delivery\":\"at_least_once\",\"source\":\"generate\","
             "\"timeout_ms\":1500,\"connect_timeout_ms\":200}",
             sf);
    t = NULL;
    rc = parse(js, &t, err, sizeof err);
    ok(rc == 0 && t, "webhook target with secret_file parses (%s)", rc ? err : "ok");
    ok(t && cairn__notify_target_delivery(t) == CAIRN_EFFECT_AT_LEAST_ONCE, "at_least_once");
    ok(t && strcmp(cairn__notify_target_source(t), "generate") == 0, "source configured");
    sig[0] = 0;
    if (t)
        cairn__notify_sign(t, VEC_ID, VEC_TS, VEC_BODY, strlen(VEC_BODY), sig, sizeof sig);
    ok(strcmp(sig, VEC_SIG) == 0, "secret file: first line, CR/LF stripped");
    cairn__notify_target_free(t);

    /* the same key without the whsec_ prefix, and unpadded base64 */
    setenv("NT_BARE", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
    t = NULL;
    rc = parse(
        "{\"type\":\"webhook\",\"name\":\"b\",\"url\":\"http://h/\",\"secret_env\":\"NT_BARE\"}",
        &t, err, sizeof err);
    sig[0] = 0;
    if (t)
        cairn__notify_sign(t, VEC_ID, VEC_TS, VEC_BODY, strlen(VEC_BODY), sig, sizeof sig);
    ok(rc == 0 && strcmp(sig, VEC_SIG) == 0, "secret without whsec_ prefix");
    cairn__notify_target_free(t);

    /* ---- a good email target */
    t = NULL;
    rc = parse("{\"type\":\"email\",\"name\":\"ops\",\"url\":\"smtp://127.0.0.1:2525\","
               "\"from\":\"cairn@example.com\",\"to\":[\"a@example.com\",\"b@example.com\"],"
               "\"subject\":\"Ready: {{task}}\",\"body\":\"{{ result.text }} / {{result.a.b}} "
               "{{delivery_id}} {{result}}\",\"username\":\"u\",\"password_env\":\"NT_PASS\"}",
               &t, err, sizeof err);
    ok(rc == 0 && t, "email target parses (%s)", rc ? err : "ok");
    cairn__notify_target_free(t);
    t = NULL;
    rc = parse("{\"type\":\"email\",\"name\":\"ops\",\"url\":\"smtp://mail.example.com:587\","
               "\"starttls\":true,\"from\":\"c@example.com\",\"to\":\"a@example.com\","
               "\"username\":\"u\",\"password_env\":\"NT_PASS\"}",
               &t, err, sizeof err);
    ok(rc == 0 && t, "email with starttls to a remote host parses (%s)", rc ? err : "ok");
    cairn__notify_target_free(t);

    /* ---- errors name the field */
    expect_err("[1]", CAIRN_EJSON, "notify[1]: must be a JSON object", "not an object");
    expect_err("{\"name\":\"x\"}", CAIRN_EJSON, "notify[1].type: is required", "missing type");
    expect_err("{\"type\":\"sms\"}", CAIRN_EJSON, "notify[1].type: must be", "unknown type");
    expect_err("{\"type\":\"webhook\",\"url\":\"http://h/\",\"secret_env\":\"NT_SECRET\"}",
               CAIRN_EJSON, "notify[1].name: is required", "missing name");
    expect_err("{\"type\":\"webhook\",\"name\":\"a b\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SECRET\"}",
               CAIRN_EJSON, "notify[1].name: byte 1", "name with a space");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"secret_env\":\"NT_SECRET\"}", CAIRN_EJSON,
               "notify[1].url: is required", "missing url");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"ftp://h/x\",\"secret_env\":"
               "\"NT_SECRET\"}",
               CAIRN_EJSON, "notify[1].url: must be an http:// or https:// URL", "ftp url");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"not a url\",\"secret_env\":"
               "\"NT_SECRET\"}",
               CAIRN_EJSON, "notify[1].url: must be an http:// or https:// URL", "garbage url");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"https://u:pw@h/x\",\"secret_env\":"
               "\"NT_SECRET\"}",
               CAIRN_EJSON, "notify[1].url: must not contain credentials", "url with password");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\"}", CAIRN_EJSON,
               "notify[1].secret_env: is required", "missing secret");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret\":"
               "\"" VEC_SECRET "\"}",
               CAIRN_EJSON, "notify[1].secret: secrets are never read from the configuration",
               "inline secret refused (and not echoed)");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SECRET\",\"secret_file\":\"/x\"}",
               CAIRN_EJSON, "notify[1].secret_env: give either", "both secret sources");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_UNSET\"}",
               CAIRN_EINVAL, "notify[1].secret_env: environment variable NT_UNSET is not set",
               "unset secret variable");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SHORT\"}",
               CAIRN_EINVAL, "notify[1].secret_env: the secret decodes to 5 bytes", "short key");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_NOTB64\"}",
               CAIRN_EINVAL, "notify[1].secret_env: the secret is not base64", "not base64");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_file\":"
               "\"/nonexistent/cairn-secret\"}",
               CAIRN_ENOENT,
               "notify[1].secret_file: /nonexistent/cairn-secret:", "missing secret file");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SECRET\",\"delivery\":\"exactly_once\"}",
               CAIRN_EJSON, "notify[1].delivery: must be", "bad delivery");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SECRET\",\"timeout_ms\":\"10\"}",
               CAIRN_EJSON, "notify[1].timeout_ms: must be an integer", "string timeout");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SECRET\",\"connect_timeout_ms\":0}",
               CAIRN_EJSON, "notify[1].connect_timeout_ms: must be an integer", "zero timeout");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SECRET\",\"urll\":\"x\"}",
               CAIRN_EJSON, "notify[1].urll: unknown field", "typo field");
    expect_err("{\"type\":\"webhook\",\"name\":\"s\",\"url\":\"http://h/\",\"secret_env\":"
               "\"NT_SECRET\",\"to\":\"a@b\"}",
               CAIRN_EJSON, "notify[1].to: unknown field for a webhook target",
               "email field on a webhook");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"http://h/\",\"from\":\"a@b\","
               "\"to\":\"c@d\"}",
               CAIRN_EJSON, "notify[1].url: must be an smtp:// or smtps:// URL", "email http url");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"to\":\"c@d\"}",
               CAIRN_EJSON, "notify[1].from: is required", "missing from");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"from\":\"a@b\","
               "\"to\":[]}",
               CAIRN_EJSON, "notify[1].to: must name at least one", "empty to");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"from\":\"a@b\","
               "\"to\":[\"c@d\",\"x@y\\r\\nBcc: evil@z\"]}",
               CAIRN_EJSON, "notify[1].to[1]: must be a plain address", "header injection in to");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"from\":\"a@b\","
               "\"to\":\"c@d\",\"subject\":\"{{task}} {{taks}}\"}",
               CAIRN_EJSON, "notify[1].subject: unknown placeholder {{taks}} at byte 9",
               "unknown placeholder");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"from\":\"a@b\","
               "\"to\":\"c@d\",\"body\":\"x {{result.text\"}",
               CAIRN_EJSON, "notify[1].body: unterminated {{ at byte 2", "unterminated {{");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"from\":\"a@b\","
               "\"to\":\"c@d\",\"body\":\"{{result..x}}\"}",
               CAIRN_EJSON, "notify[1].body: unknown placeholder", "empty path segment");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"from\":\"a@b\","
               "\"to\":\"c@d\",\"password\":\"hunter2-smtp\"}",
               CAIRN_EJSON, "notify[1].password: secrets are never read",
               "inline password refused");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"from\":\"a@b\","
               "\"to\":\"c@d\",\"password_env\":\"NT_PASS\"}",
               CAIRN_EJSON, "notify[1].username: username and password_env",
               "password without username");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://mail.example.com\","
               "\"from\":\"a@b\",\"to\":\"c@d\",\"username\":\"u\",\"password_env\":\"NT_PASS\"}",
               CAIRN_EJSON, "notify[1].url: refusing to send a password over plain smtp://",
               "password in clear to a remote host");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtps://h\",\"starttls\":true,"
               "\"from\":\"a@b\",\"to\":\"c@d\"}",
               CAIRN_EJSON, "notify[1].starttls: is for smtp://", "starttls on smtps");
    expect_err("{\"type\":\"email\",\"name\":\"o\",\"url\":\"smtp://h\",\"starttls\":1,"
               "\"from\":\"a@b\",\"to\":\"c@d\"}",
               CAIRN_EJSON, "notify[1].starttls: must be true or false", "starttls not bool");
    {
        cairn__notify_target *x = (cairn__notify_target *)1;
        char e2[64];
        ok(cairn__notify_target_parse(NULL, NULL, &x, e2, sizeof e2) == CAIRN_EINVAL && !x,
           "NULL config -> CAIRN_EINVAL");
        json_t *cfg = json_pack("{s:s,s:s,s:s,s:s}", "type", "webhook", "name",
                                "n123456789012345678901234567890123456789012345678901234567890",
                                "url", "http://h/", "secret_env", "NT_SECRET");
        rc = cairn__notify_target_parse(cfg, NULL, &x, e2, sizeof e2);
        ok(rc == CAIRN_EJSON && strncmp(e2, "notify.name: is 61 bytes", 24) == 0,
           "over-long name; default 'where' (%s)", e2);
        json_decref(cfg);
    }
    cairn__notify_target_free(NULL); /* must not crash: free(NULL) is a no-op */

    /* ---- Message-ID */
    char mid[96];
    cairn__notify_message_id("dlv_0123456789abcdef0123456789abcdef", mid, sizeof mid);
    ok(strcmp(mid, "<dlv_0123456789abcdef0123456789abcdef@cairn>") == 0, "Message-ID %s", mid);
    cairn__notify_message_id("task:notify.shop:1:abcd", mid, sizeof mid);
    ok(strcmp(mid, "<task/notify.shop/1/abcd@cairn>") != 0 && strlen(mid) == 64 + 8 &&
           strchr(mid, ':') == NULL,
       "an ID that is not a dot-atom is hashed: %s", mid);
    char mid2[96];
    cairn__notify_message_id("task:notify.shop:1:abcd", mid2, sizeof mid2);
    ok(strcmp(mid, mid2) == 0, "... deterministically");

    unlink(sf);
    return tap_done();
}
