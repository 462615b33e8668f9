/* steps/notify_impl.h - what the notify step's files share (internal to steps/): the parsed
 * target, the state of one call, and the helpers both transports use. notify.c parses targets,
 * notify_call.c holds what a call of either transport shares (messages, outcomes, the step
 * function), notify_webhook.c sends webhooks and notify_email.c email over SMTP. Nothing else
 * includes this.
 */
#ifndef CAIRN_STEPS_NOTIFY_IMPL_H
#define CAIRN_STEPS_NOTIFY_IMPL_H

#include <stddef.h>

#include <curl/curl.h>
#include <msgpack.h>

#include "common/config.h"
#include "common/json.h"
#include "common/str.h"
#include "steps/notify.h"

/* in the order of notify.c's names for them ("webhook", "email") */
enum { CAIRN__NOTIFY_WEBHOOK = 0, CAIRN__NOTIFY_EMAIL = 1 };

#define CAIRN__NOTIFY_SCRUB_FORMS 4

struct cairn__notify_target {
    int kind;
    char *name, *url, *url_safe, *source;
    int at_least_once; /* "delivery": 0 at_most_once (CAIRN_EFFECT), 1 at_least_once */
    long connect_timeout_ms, timeout_ms;
    uint32_t version; /* cairn__notify_target_version */
    /* webhook */
    unsigned char *key;
    size_t key_len;
    /* email */
    char *from;
    char **to;
    size_t n_to;
    char *subject, *body;
    char *username;
    int starttls;
    /* the secret's text as configured (webhook secret or SMTP password); wiped on free */
    char *secret_text;
    /* every form in which the secret could come back in a receiver's answer or curl's text,
     * longest first: the text as configured, without "whsec_", and for SMTP the base64 of the
     * password (AUTH LOGIN) and of "\0user\0password" (AUTH PLAIN). Scrubbed from every
     * message; wiped on free. */
    char *scrub[CAIRN__NOTIFY_SCRUB_FORMS];
    size_t n_scrub;
};

/* The longest error message (= the runner's stored error size). */
#define CAIRN__NOTIFY_MSG_MAX 512
/* How much of a receiver's answer goes into an error message. */
#define CAIRN__NOTIFY_SNIPPET_MAX 160

/* The state of one call of the step (one delivery attempt to one target). */
typedef struct cairn__notify_call {
    cairn_ctx *ctx;
    const cairn__notify_target *t;
    const char *what; /* "webhook" or "email" */
    char errbuf[CURL_ERROR_SIZE];
    char answer[CAIRN__NOTIFY_SNIPPET_MAX + 1]; /* the start of the receiver's response body */
    size_t answer_len;
    int answer_cut;                            /* the body went on past `answer` */
    char reply[CAIRN__NOTIFY_SNIPPET_MAX + 1]; /* email: the server's last reply line (scrubbed) */
    /* email upload */
    const char *msg;
    size_t msg_len, msg_off;
    int msg_eof;
    /* webhook upload */
    curl_off_t body_len;
    int stopped;
} cairn__notify_call;

/* Appends printf-style text (at most 511 bytes of it). */
void cairn__notify_fmt(struct cairn__sbuf *b, const char *fmt, ...) CAIRN_PRINTF(2, 3);

/* Removes the target's secret from s (NUL-terminated, edited in place, never lengthened): each
 * occurrence of any of its forms becomes "***". When `cut` is set, s is the head of a longer
 * text, so a secret may have been cut in two at its end: a tail of s that is the start of a
 * form (however short) is starred out too. Scrub before shortening a text, or pass `cut`. */
void cairn__notify_scrub(const cairn__notify_target *t, char *s, int cut);

/* Copies src into dst (cap >= 1 bytes, NUL-terminated), shortened to fit and scrubbed
 * (cairn__notify_scrub, with `cut` when it was shortened or `src_cut` says src itself is the
 * head of a longer text). */
void cairn__notify_snip(const cairn__notify_target *t, char *dst, size_t cap, const char *src,
                        int src_cut);

/* Builds a call's error message into out (outlen bytes): "notify target '<name>' (<kind>
 * <url>): <text>", scrubbed, then shortened to fit with a cut secret's head removed. */
void cairn__notify_error_text(const cairn__notify_target *t, const char *what, const char *text,
                              int text_cut, char *out, size_t outlen);

/* Sets the step's error: "notify target '<name>' (<kind> <url>): <text>", scrubbed of the
 * secret (cairn__notify_error_text). */
void cairn__notify_call_error(cairn__notify_call *c, const char *fmt, ...) CAIRN_PRINTF(2, 3);

/* curl's text for a failed transfer: its error buffer if it wrote one, else the code's text. */
const char *cairn__notify_curl_text(cairn__notify_call *c, CURLcode rc);

/* The outcome of a transfer that got no answer: before the whole request had left (`sent` 0),
 * PERMANENT if curl's error is one no retry cures (bad URL, protocol not built in), else
 * TRANSIENT (also when it was stopped); after, UNKNOWN whatever curl says (no answer, a reset,
 * an answer that is not HTTP): the receiver may have acted on it. Sets the error,
 * naming the `what` ("request", "message") and the `who` ("receiver", "server"). */
cairn_step_result cairn__notify_no_answer(cairn__notify_call *c, CURLcode rc, int sent,
                                          const char *what, const char *who);

/* The options both transports set: URL, timeouts, error buffer, and the progress callback that
 * aborts on a stop request only while nothing has been delivered. */
void cairn__notify_curl_opts(CURL *h, cairn__notify_call *c);

/* Writes the step's output {"status", "target", "delivery_id"[, "message_id" if mid]}. */
void cairn__notify_pack_ok(cairn_ctx *ctx, const cairn__notify_target *t, long status,
                           const char *mid);

/* Finds the placeholder of a template at `open` ("{{"): its name without the surrounding
 * spaces in name/len, and in *next what follows the "}}". -1 if it is not closed. */
int cairn__notify_tpl_name(const char *open, const char **name, size_t *len, const char **next);

/* Sends the webhook of one call (notify_webhook.c); `result` is the source step's output. */
cairn_step_result cairn__notify_webhook(cairn__notify_call *c, json_t *result);

/* Sends the email of one call (notify_email.c); `result` is the source step's output. */
cairn_step_result cairn__notify_email(cairn__notify_call *c, json_t *result);

#endif
