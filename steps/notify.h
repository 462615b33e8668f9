/* steps/notify.h - the `notify` built-in step (effect): webhooks and email.
 *
 * One configured target is one effect step (the default pipeline names it "notify.<name>" and
 * passes the target as the step's user pointer), so a target that fails is retried alone and
 * never makes the others send twice. Each call delivers the output of one dependency (`source`,
 * default "postprocess") once:
 *
 *   webhook  POST of {"type":"cairn.task.completed","task":ID,"delivery_id":D,"result":R}
 *            (compact JSON, R = the source output converted from msgpack) signed per Standard
 *            Webhooks: webhook-id = the delivery ID (the same on every attempt, so a receiver
 *            can deduplicate), webhook-timestamp = unix seconds, webhook-signature =
 *            "v1," base64(HMAC-SHA256(key, id "." timestamp "." body)), key = the base64-decoded
 *            secret after its optional "whsec_" prefix.
 *   email    one SMTP transaction (smtp:// or smtps://, optional STARTTLS) of a text/plain
 *            message whose Message-ID is derived from the delivery ID.
 *
 * Outcome classes (what the runner does with them is in cairn.h):
 *   CAIRN_STEP_OK         2xx / SMTP 250 after DATA. Output {"status","target","delivery_id"}
 *                         (email adds "message_id").
 *   CAIRN_STEP_TRANSIENT  nothing was delivered: connection refused, DNS failure, a timeout or
 *                         error before the whole request/message was sent; HTTP 408, 429 and 5xx;
 *                         SMTP 4xx. For 429 the Retry-After wait (seconds or an HTTP date,
 *                         capped at a day) is honoured: cairn_ctx_set_retry_after makes the
 *                         runner wait at least that long before the next call.
 *   CAIRN_STEP_PERMANENT  HTTP 3xx (redirects are not followed) and 4xx other than 408/429;
 *                         SMTP 5xx; a source step that is not a declared dependency.
 *   CAIRN_STEP_UNKNOWN    the request/message was sent completely but no answer came (timeout,
 *                         reset): at most once the task becomes in_doubt; at least once the
 *                         runner calls again, with the same webhook-id / Message-ID.
 * Error messages name the target, its URL without credentials, and curl's text or the
 * status; they never contain a secret or password.
 */
#ifndef CAIRN_STEPS_NOTIFY_H
#define CAIRN_STEPS_NOTIFY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cairn.h"
#include "common/config.h"

/* Reads a secret from the environment variable or file (its first line) named by the keys
 * `env_key` / `file_key` of section `cfg`, read through `p` (exactly one of the two must be
 * present if `required`; both is an error). *out is malloc'd, or NULL when absent; the caller
 * wipes it before freeing. 0, CAIRN_EJSON, CAIRN_EINVAL (unset or empty), CAIRN_ENOENT,
 * CAIRN_EIO or CAIRN_ENOMEM, with the message naming the key. The notify targets and the
 * generate step's "openai" backend (api_key_env / api_key_file) share it. */
int cairn__read_secret(const cairn__cfg *p, const json_t *cfg, const char *env_key,
                       const char *file_key, int required, char **out);

typedef struct cairn__notify_target cairn__notify_target;

/* Longest target name: the step is called "notify.<name>" and step names have <= 64 bytes. */
#define CAIRN__NOTIFY_NAME_MAX 57

/* Parses one target from its config object. `where` names it in messages ("notify[1]"; NULL
 * means "notify"). Unknown fields are refused, so a typo never silently drops a setting.
 *
 * Webhook:
 *   {"type": "webhook", "name": "shop", "url": "https://host/hook",
 *    "secret_env": "NAME" | "secret_file": "/path",            (exactly one; required)
 *    "connect_timeout_ms": 5000, "timeout_ms": 10000,          (optional; whole request)
 *    "source": "postprocess", "delivery": "at_most_once" | "at_least_once"}
 * Email:
 *   {"type": "email", "name": "ops", "url": "smtp://host:25" | "smtps://host:465",
 *    "starttls": false,                                         (smtp:// only: require STARTTLS)
 *    "from": "a@b", "to": "c@d" | ["c@d", ...],
 *    "subject": "cairn task {{task}}", "body": "{{result}}",     (these are the defaults)
 *    "username": "u", "password_env": "NAME" | "password_file": "/path",
 *    "connect_timeout_ms", "timeout_ms", "source", "delivery"  (as for webhooks)}
 *   Templates know {{task}}, {{delivery_id}}, {{result}} (the whole source output as compact
 *   JSON) and {{result.FIELD}} / {{result.A.B}} (a string as itself, other values as JSON, a
 *   missing field as the empty string). An unknown placeholder is a config error.
 *   A password is only sent over TLS (smtps:// or "starttls": true) or to a loopback host.
 *
 * Secrets are never read from the JSON: a "secret" or "password" field is refused. A secret
 * file's first line is used (trailing CR/LF stripped). The secret is read now, once.
 *
 * On success *out is a new target the caller frees with cairn__notify_target_free().
 * Returns 0, or with `err` (may be NULL) naming the field, e.g.
 * "notify[1].url: must be an http:// or https:// URL":
 *   CAIRN_EJSON    a missing, mistyped, unknown or invalid field
 *   CAIRN_EINVAL   the secret/password environment variable is unset or empty, or the secret
 *                  is not base64 or is shorter than 24 bytes; NULL cfg/out
 *   CAIRN_ENOENT   the secret/password file does not exist
 *   CAIRN_EIO      it cannot be read
 *   CAIRN_ENOMEM */
int cairn__notify_target_parse(const json_t *cfg, const char *where, cairn__notify_target **out,
                               char *err, size_t errlen);

/* Frees a target (wiping its secret from memory); NULL is a no-op. */
void cairn__notify_target_free(cairn__notify_target *t);

/* The target's name ("shop"); valid until the target is freed. */
const char *cairn__notify_target_name(const cairn__notify_target *t);

/* The dependency whose output is delivered ("postprocess" unless configured). */
const char *cairn__notify_target_source(const cairn__notify_target *t);

/* CAIRN_EFFECT for "at_most_once" (the default), CAIRN_EFFECT_AT_LEAST_ONCE for
 * "at_least_once". */
cairn_delivery cairn__notify_target_delivery(const cairn__notify_target *t);

/* The step version: the target's settings without the timeouts (tuning: common/config.h). */
uint32_t cairn__notify_target_version(const cairn__notify_target *t);

/* The step function; `target` is a cairn__notify_target (borrowed). Thread-compatible: one
 * target may serve concurrent calls (nothing in it is written after parsing). */
cairn_step_result cairn__notify_step(cairn_ctx *ctx, void *target);

/* The Standard Webhooks signature of one delivery with a webhook target's key:
 * "v1,<base64 HMAC-SHA256(key, id "." timestamp "." body)>" into out (>= 64 bytes).
 * Returns 0, CAIRN_EINVAL (not a webhook target, out too small) or CAIRN_ENOMEM. */
int cairn__notify_sign(const cairn__notify_target *t, const char *id, int64_t timestamp,
                       const void *body, size_t len, char *out, size_t outlen);

/* The Message-ID (with angle brackets) an email delivery with this delivery ID carries:
 * "<DELIVERY_ID@cairn>" when the ID is a valid RFC 5322 dot-atom (cairn's "dlv_<hex>" IDs
 * are), else "<sha256-hex-of-the-ID@cairn>". out needs >= 80 bytes. */
void cairn__notify_message_id(const char *delivery_id, char *out, size_t outlen);

#endif
