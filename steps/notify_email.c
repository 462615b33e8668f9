/* steps/notify_email.c - the `notify` step's email transport: one SMTP transaction per call,
 * through libcurl (targets are parsed in notify.c, calls set up in notify_call.c).
 *
 * "Delivered or not" is decided as for webhooks (notify_call.c): a failure before the server had
 * the whole message is TRANSIENT, a failure after it is UNKNOWN. "Had the whole message" is our
 * read callback having handed curl the last byte (conservative: bytes still in curl's buffer
 * count as sent, which can only make us say UNKNOWN where TRANSIENT was true). An SMTP reply
 * decides by itself: 4xx is TRANSIENT, 5xx PERMANENT; the server's own reply line goes into the
 * message, as it says more than curl's text.
 *
 * The Message-ID is derived from the delivery ID, so a resend (at least once) carries the same
 * one and a receiving system can drop the duplicate. The message is built in full before the
 * transfer starts: headers with RFC 2047 encoded subjects, the body as 7bit when it can be and
 * base64 otherwise, so no relay needs 8BITMIME.
 */
#include "steps/notify.h"
#include "steps/notify_impl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "common/hash.h"

/* 1 if s is an RFC 5322 dot-atom-text: atoms of atext joined by single dots. */
static int dot_atom(const char *s)
{
    if (!*s || *s == '.' || s[strlen(s) - 1] == '.' || strstr(s, ".."))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-/=?^_`{|}~.", *s))
            return 0;
    return 1;
}

void cairn__notify_message_id(const char *delivery_id, char *out, size_t outlen)
{
    if (!out || !outlen)
        return;
    if (delivery_id && strlen(delivery_id) <= 64 && dot_atom(delivery_id)) {
        snprintf(out, outlen, "<%s@cairn>", delivery_id);
    } else {
        char hex[65];
        cairn__sha256_hex(delivery_id ? delivery_id : "", delivery_id ? strlen(delivery_id) : 0,
                          hex);
        snprintf(out, outlen, "<%s@cairn>", hex);
    }
}

/* Looks up result.A.B in the source output. */
static const json_t *json_path(const json_t *v, const char *path, size_t len)
{
    while (v && len) {
        const char *dot = memchr(path, '.', len);
        size_t seg = dot ? (size_t)(dot - path) : len;
        char key[256];
        if (!json_is_object(v) || seg >= sizeof key)
            return NULL;
        memcpy(key, path, seg);
        key[seg] = 0;
        v = json_object_get(v, key);
        path += seg + (dot ? 1 : 0);
        len -= seg + (dot ? 1 : 0);
    }
    return v;
}

static void render_value(struct cairn__sbuf *b, const json_t *v)
{
    if (!v || json_is_null(v))
        return;
    if (json_is_string(v)) {
        cairn__sb_put(b, json_string_value(v), json_string_length(v));
        return;
    }
    char *s = NULL;
    size_t n = 0;
    if (cairn__canon_json(v, &s, &n) == 0)
        cairn__sb_put(b, s, n);
    else
        b->oom = 1;
    free(s);
}

/* Renders a template (already checked by tpl_check). */
static void render(struct cairn__sbuf *b, const char *tpl, cairn_ctx *ctx, const json_t *result)
{
    const char *s = tpl, *o;
    while ((o = strstr(s, "{{")) != NULL) {
        const char *name, *next;
        size_t len;
        cairn__sb_put(b, s, (size_t)(o - s));
        if (cairn__notify_tpl_name(o, &name, &len, &next) != 0)
            break;
        if (len == 4 && memcmp(name, "task", 4) == 0)
            cairn__sb_puts(b, cairn_ctx_task_id(ctx));
        else if (len == 11 && memcmp(name, "delivery_id", 11) == 0)
            cairn__sb_puts(b, cairn_ctx_delivery_id(ctx));
        else if (len == 6)
            render_value(b, result);
        else
            render_value(b, json_path(result, name + 7, len - 7));
        s = next;
    }
    cairn__sb_puts(b, s);
}

static void add_b64_lines(struct cairn__sbuf *b, const unsigned char *p, size_t n)
{
    unsigned char line[80];
    for (size_t i = 0; i < n; i += 57) { /* 57 bytes -> 76 characters per line */
        int k = EVP_EncodeBlock(line, p + i, (int)(n - i < 57 ? n - i : 57));
        cairn__sb_put(b, line, (size_t)k);
        cairn__sb_puts(b, "\r\n");
    }
}

/* The Subject header: plain when it is short printable ASCII, otherwise RFC 2047 encoded
 * words of at most 45 input bytes each (split between UTF-8 characters), folded. Control
 * characters (a CR/LF from a template value could inject headers) become spaces. */
static void add_subject(struct cairn__sbuf *b, const char *subject)
{
    size_t n = strlen(subject);
    char *s = malloc(n + 1);
    if (!s) {
        b->oom = 1;
        return;
    }
    int ascii = n <= 200;
    for (size_t i = 0; i <= n; i++) {
        unsigned char ch = (unsigned char)subject[i];
        s[i] = (char)(i < n && (ch < 32 || ch == 127) ? ' ' : ch);
        if (i < n && ch >= 127)
            ascii = 0;
    }
    cairn__sb_puts(b, "Subject: ");
    if (ascii) {
        cairn__sb_puts(b, s);
    } else {
        for (size_t i = 0; i < n;) {
            size_t k = n - i < 45 ? n - i : 45;
            while (k < n - i && k > 1 && ((unsigned char)s[i + k] & 0xC0) == 0x80)
                k--; /* do not cut a UTF-8 sequence */
            unsigned char enc[64];
            int e = EVP_EncodeBlock(enc, (const unsigned char *)s + i, (int)k);
            cairn__sb_puts(b, i ? "\r\n =?UTF-8?B?" : "=?UTF-8?B?");
            cairn__sb_put(b, enc, (size_t)e);
            cairn__sb_puts(b, "?=");
            i += k;
        }
    }
    cairn__sb_puts(b, "\r\n");
    free(s);
}

/* Builds the RFC 5322 message. Bodies that are 7-bit with short lines go as they are (with
 * CRLF line ends); anything else is base64, so no relay has to support 8BITMIME. */
static int build_message(struct cairn__sbuf *m, cairn__notify_call *c, const json_t *result,
                         const char *mid)
{
    static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const cairn__notify_target *t = c->t;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    struct cairn__sbuf subject = {0}, body = {0};
    render(&subject, t->subject, c->ctx, result);
    render(&body, t->body, c->ctx, result);
    if (subject.oom || body.oom) {
        free(subject.p), free(body.p);
        return CAIRN_ENOMEM;
    }
    cairn__notify_fmt(m, "Date: %s, %02d %s %04d %02d:%02d:%02d +0000\r\n", days[tm.tm_wday],
                      tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                      tm.tm_sec);
    cairn__notify_fmt(m, "From: %s\r\nTo: ", t->from);
    for (size_t i = 0; i < t->n_to; i++) {
        cairn__sb_puts(m, i ? ",\r\n " : "");
        cairn__sb_puts(m, t->to[i]);
    }
    cairn__sb_puts(m, "\r\n");
    add_subject(m, subject.p ? subject.p : "");
    cairn__notify_fmt(m, "Message-ID: %s\r\n", mid);
    cairn__notify_fmt(m, "X-Cairn-Delivery-ID: %s\r\n", cairn_ctx_delivery_id(c->ctx));
    cairn__sb_puts(m, "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n");
    /* normalize line ends to CRLF; note whether the text is 7-bit with lines <= 998 */
    struct cairn__sbuf crlf = {0};
    int seven = 1;
    size_t line = 0;
    const char *p = body.p ? body.p : "";
    for (size_t i = 0; p[i]; i++) {
        if (p[i] == '\r' || p[i] == '\n') {
            cairn__sb_puts(&crlf, "\r\n");
            if (p[i] == '\r' && p[i + 1] == '\n')
                i++;
            line = 0;
            continue;
        }
        if ((unsigned char)p[i] >= 128 || ++line > 998)
            seven = 0;
        cairn__sb_put(&crlf, p + i, 1);
    }
    if (crlf.len < 2 || memcmp(crlf.p + crlf.len - 2, "\r\n", 2) != 0)
        cairn__sb_puts(&crlf, "\r\n");
    if (seven) {
        cairn__sb_puts(m, "Content-Transfer-Encoding: 7bit\r\n\r\n");
        cairn__sb_put(m, crlf.p, crlf.len);
    } else {
        cairn__sb_puts(m, "Content-Transfer-Encoding: base64\r\n\r\n");
        add_b64_lines(m, (const unsigned char *)crlf.p, crlf.len);
    }
    int oom = m->oom || crlf.oom;
    free(subject.p), free(body.p), free(crlf.p);
    return oom ? CAIRN_ENOMEM : 0;
}

static size_t on_read(char *dst, size_t sz, size_t n, void *u)
{
    cairn__notify_call *c = u;
    size_t room = sz * n, left = c->msg_len - c->msg_off;
    size_t k = left < room ? left : room;
    memcpy(dst, c->msg + c->msg_off, k);
    c->msg_off += k;
    /* curl has every byte (it may not ask again once it has INFILESIZE of them): from now
     * on a failure without an SMTP reply leaves us in doubt */
    if (c->msg_off == c->msg_len)
        c->msg_eof = 1;
    return k;
}

/* Keeps the SMTP server's last reply line ("550 5.1.1 no such user"), which says more than
 * curl's "Weird server reply". Only incoming lines: outgoing ones carry the AUTH exchange. */
static int on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *u)
{
    (void)h;
    cairn__notify_call *c = u;
    if (type != CURLINFO_HEADER_IN)
        return 0;
    while (size && (data[size - 1] == '\r' || data[size - 1] == '\n'))
        size--;
    size_t n = size < CAIRN__NOTIFY_SNIPPET_MAX ? size : CAIRN__NOTIFY_SNIPPET_MAX;
    for (size_t i = 0; i < n; i++)
        c->reply[i] = (unsigned char)data[i] < 32 || (unsigned char)data[i] >= 127 ? ' ' : data[i];
    c->reply[n] = 0;
    /* a server may quote what it was sent (an AUTH line): scrubbed now, knowing where it was cut */
    cairn__notify_scrub(c->t, c->reply, size > n);
    return 0;
}

static cairn_step_result email_outcome(cairn__notify_call *c, CURL *h, CURLcode rc, const char *mid)
{
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code); /* the last SMTP reply code */
    if (rc == CURLE_OK) {
        cairn__notify_pack_ok(c->ctx, c->t, code ? code : 250, mid);
        return CAIRN_STEP_OK;
    }
    if (code >= 500 && code < 600) {
        cairn__notify_call_error(c, "SMTP %ld (not retried): %s", code,
                                 c->reply[0] ? c->reply : cairn__notify_curl_text(c, rc));
        return CAIRN_STEP_PERMANENT;
    }
    if (code >= 400 && code < 500) {
        cairn__notify_call_error(c, "SMTP %ld (will retry; nothing was delivered): %s", code,
                                 c->reply[0] ? c->reply : cairn__notify_curl_text(c, rc));
        return CAIRN_STEP_TRANSIENT;
    }
    return cairn__notify_no_answer(c, rc, c->msg_eof, "message", "server");
}

cairn_step_result cairn__notify_email(cairn__notify_call *c, json_t *result)
{
    const cairn__notify_target *t = c->t;
    char mid[96], from[300];
    cairn__notify_message_id(cairn_ctx_delivery_id(c->ctx), mid, sizeof mid);
    struct cairn__sbuf m = {0};
    if (build_message(&m, c, result, mid) != 0) {
        free(m.p);
        cairn__notify_call_error(c, "out of memory building the message");
        return CAIRN_STEP_TRANSIENT;
    }
    c->msg = m.p, c->msg_len = m.len;
    snprintf(from, sizeof from, "<%s>", t->from);
    struct curl_slist *rcpt = NULL, *tmp;
    CURL *h = curl_easy_init();
    for (size_t i = 0; h && i < t->n_to; i++) {
        char a[300];
        snprintf(a, sizeof a, "<%s>", t->to[i]);
        if (!(tmp = curl_slist_append(rcpt, a))) {
            curl_easy_cleanup(h);
            h = NULL;
            break;
        }
        rcpt = tmp;
    }
    cairn_step_result res;
    if (!h) {
        cairn__notify_call_error(c, "cannot create a curl handle (out of memory)");
        res = CAIRN_STEP_TRANSIENT;
        goto out;
    }
    cairn__notify_curl_opts(h, c);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
    if (t->starttls)
        curl_easy_setopt(h, CURLOPT_USE_SSL, (long)CURLUSESSL_ALL);
    if (t->username) {
        curl_easy_setopt(h, CURLOPT_USERNAME, t->username);
        curl_easy_setopt(h, CURLOPT_PASSWORD, t->secret_text);
    }
    curl_easy_setopt(h, CURLOPT_MAIL_FROM, from);
    curl_easy_setopt(h, CURLOPT_MAIL_RCPT, rcpt);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)m.len);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, c);
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, c);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 1L); /* needed for the debug callback; prints nothing */
    CURLcode crc = curl_easy_perform(h);
    res = email_outcome(c, h, crc, mid);
    curl_easy_cleanup(h);
out:
    curl_slist_free_all(rcpt);
    free(m.p);
    return res;
}
