/* steps/notify_webhook.c - the `notify` step's webhook transport: a signed POST per call,
 * through libcurl (targets are parsed in notify.c; outcomes shared with email are decided in
 * notify_call.c).
 *
 * The delivery ID is the receiver's deduplication key. It goes out unchanged on every attempt
 * as webhook-id, and the body is built in RFC 8785 canonical form, so a resend carries the same
 * bytes (only the timestamp, and so the signature, differs). The signature follows Standard
 * Webhooks: HMAC-SHA256 over id "." timestamp "." body with the decoded secret. An HTTP answer
 * decides by itself (2xx OK; 408, 429, 5xx TRANSIENT, with 429's Retry-After honoured; other
 * 3xx/4xx PERMANENT, redirects never followed); no answer goes to cairn__notify_no_answer.
 */
#include "steps/notify.h"
#include "steps/notify_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

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

/* ------------------------------------------------------------------ the request */

static size_t on_answer(char *p, size_t sz, size_t n, void *u)
{
    cairn__notify_call *c = u;
    size_t len = sz * n, room = CAIRN__NOTIFY_SNIPPET_MAX - c->answer_len;
    memcpy(c->answer + c->answer_len, p, len < room ? len : room);
    c->answer_len += len < room ? len : room;
    c->answer[c->answer_len] = 0;
    if (len > room)
        c->answer_cut = 1;
    return len; /* the rest is read and dropped */
}

/* The receiver's answer as printable ASCII, for messages; scrubbed, knowing where it was cut. */
static const char *answer_text(cairn__notify_call *c)
{
    for (size_t i = 0; i < c->answer_len; i++)
        if ((unsigned char)c->answer[i] < 32 || (unsigned char)c->answer[i] >= 127)
            c->answer[i] = ' ';
    c->answer_len = strlen(c->answer);
    cairn__notify_scrub(c->t, c->answer, c->answer_cut);
    return c->answer;
}

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
        if (wait > 86400) {
            /* honoured up to a day: the message says the wait that is kept, not the one asked */
            cairn_ctx_set_retry_after(c->ctx, 86400u * 1000u);
            cairn__notify_call_error(c,
                                     "HTTP 429 Too Many Requests; retrying after 86400 s (the "
                                     "receiver asked for %lld s; a day at most): %s",
                                     (long long)wait, answer_text(c));
        } else if (wait > 0) {
            /* honoured: the next attempt waits at least this long */
            cairn_ctx_set_retry_after(c->ctx, (uint32_t)wait * 1000u);
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
    if (status == 301 || status == 302 || status == 303 || status == 307 || status == 308) {
        char *loc = NULL, where[201] = "";
        curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &loc);
        if (loc) {
            /* a query may carry a token: never shown; the rest scrubbed before it is cut */
            size_t n = strcspn(loc, "?#");
            char *path = strndup(loc, n);
            cairn__notify_snip(c->t, where, sizeof where, path ? path : "", !path);
            free(path);
        }
        cairn__notify_call_error(
            c, "HTTP %ld redirect%s%s not followed (not retried); configure the final URL", status,
            loc ? " to " : "", where);
        return CAIRN_STEP_PERMANENT;
    }
    /* 300, 304 (Not Modified), 305 and the rest: answers, not redirects */
    if (status >= 200) { /* a 1xx is interim: without a final answer the outcome is unknown */
        cairn__notify_call_error(c, "HTTP %ld (not retried): %s", status, answer_text(c));
        return CAIRN_STEP_PERMANENT;
    }
    return cairn__notify_no_answer(c, rc, up >= c->body_len, "request", "receiver");
}

cairn_step_result cairn__notify_webhook(cairn__notify_call *c, json_t *result)
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
