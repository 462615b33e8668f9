/* steps/notify_call.c - one call of the `notify` step: what the webhook and email transports
 * share. notify.c parses targets; notify_webhook.c and notify_email.c do the sending.
 *
 * The one idea that matters is telling "nothing was delivered" apart from "maybe delivered".
 * A failure before the receiver had the whole request (connection refused, DNS, a timeout
 * while connecting or while sending, an explicit 408/429/5xx or SMTP 4xx) is TRANSIENT: the
 * runner may call again and nobody sees two. Once the whole request or message has left and
 * no answer came back, the receiver may have acted on it: that is UNKNOWN, which the runner
 * turns into in_doubt (at most once) or a resend with the same delivery ID (at least once).
 * For HTTP "has left" is curl's upload counter reaching the body size; for SMTP it is the read
 * callback having handed curl the last byte of the message (conservative: bytes still in
 * curl's buffer count as sent, which can only make us say UNKNOWN where TRANSIENT was true).
 * cairn__notify_no_answer makes that call for both.
 *
 * No secret reaches a message: messages are built from fixed text, the URL without query or
 * credentials, curl's error text and the receiver's answer, and cairn__notify_call_error (the
 * one way either transport reports a failed call) scrubs every form of the secret from them.
 * Each text is scrubbed before it is cut to fit, and a text that arrives already cut (a
 * 160-byte answer, curl's 256-byte buffer) also loses any start of a secret at its end.
 */
#include "steps/notify.h"
#include "steps/notify_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ messages */

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

/* Stars out `len` bytes at p: "***", or as many stars as bytes when fewer (never longer, so a
 * scrub cannot overflow the buffer it works in). */
static void star_out(char *p, size_t len)
{
    size_t k = len < 3 ? len : 3;
    memset(p, '*', k);
    memmove(p + k, p + len, strlen(p + len) + 1);
}

void cairn__notify_scrub(const cairn__notify_target *t, char *s, int cut)
{
    if (!t || !s)
        return;
    for (size_t f = 0; f < t->n_scrub; f++) {
        const char *secret = t->scrub[f];
        size_t sl = strlen(secret);
        char *p = s;
        if (!sl)
            continue;
        while ((p = strstr(p, secret)) != NULL) {
            star_out(p, sl);
            p += sl < 3 ? sl : 3;
        }
    }
    if (!cut)
        return;
    /* the longest tail that a form starts with: the head of a secret cut off with the text */
    size_t n = strlen(s), best = 0;
    for (size_t f = 0; f < t->n_scrub; f++) {
        size_t sl = strlen(t->scrub[f]);
        for (size_t k = (sl - 1 < n ? sl - 1 : n); k > best; k--)
            if (memcmp(s + n - k, t->scrub[f], k) == 0) {
                best = k;
                break;
            }
    }
    if (best)
        star_out(s + n - best, best);
}

void cairn__notify_snip(const cairn__notify_target *t, char *dst, size_t cap, const char *src,
                        int src_cut)
{
    size_t n = strlen(src);
    int cut = src_cut || n >= cap;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
    cairn__notify_scrub(t, dst, cut);
}

void cairn__notify_error_text(const cairn__notify_target *t, const char *what, const char *text,
                              int text_cut, char *out, size_t outlen)
{
    char url[161], body[CAIRN__NOTIFY_MSG_MAX];
    if (!out || !outlen)
        return;
    /* every part is scrubbed before it is shortened, or scrubbed knowing it was cut */
    cairn__notify_snip(t, url, sizeof url, t->url_safe ? t->url_safe : "", 0);
    cairn__notify_snip(t, body, sizeof body, text ? text : "", text_cut);
    int n = snprintf(out, outlen, "notify target '%s' (%s %s): %s", t->name, what, url, body);
    /* once more on the whole: a secret could span two parts */
    cairn__notify_scrub(t, out, n < 0 || (size_t)n >= outlen);
}

/* Sets the step's error: "<target> (<kind> <url>): <text>", scrubbed of the secret. */
void cairn__notify_call_error(cairn__notify_call *c, const char *fmt, ...)
{
    char text[CAIRN__NOTIFY_MSG_MAX], msg[CAIRN__NOTIFY_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cairn__notify_error_text(c->t, c->what, text, n < 0 || (size_t)n >= sizeof text, msg,
                             sizeof msg);
    cairn_ctx_set_error(c->ctx, "%s", msg);
}

/* ------------------------------------------------------------------ transfers and outcomes */

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

const char *cairn__notify_curl_text(cairn__notify_call *c, CURLcode rc)
{
    if (!c->errbuf[0])
        return curl_easy_strerror(rc);
    /* curl's text may quote the server, and curl cuts it at CURL_ERROR_SIZE - 1 */
    cairn__notify_scrub(c->t, c->errbuf, strlen(c->errbuf) >= sizeof c->errbuf - 1);
    return c->errbuf;
}

/* curl errors that no retry can cure: the configuration or the build is wrong. They are final
 * only before the request has left: once it has, the same codes also report an answer curl
 * cannot read (CURLE_UNSUPPORTED_PROTOCOL is "Received HTTP/0.9" too), and the receiver may
 * have acted on the request. */
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
    if (!sent && curl_permanent(rc)) {
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
    cairn_step_result r = t->kind == CAIRN__NOTIFY_WEBHOOK ? cairn__notify_webhook(&c, result)
                                                           : cairn__notify_email(&c, result);
    json_decref(result);
    return r;
}
