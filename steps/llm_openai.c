/* steps/llm_openai.c - the generate step's "openai" backend: one streamed POST to an
 * OpenAI-compatible server (cairn serve, llama.cpp's llama-server, vLLM, a load balancer in
 * front of several) per invocation, through libcurl.
 *
 * The reply is read as it streams: libcurl's write callback cuts the body into Server-Sent
 * Events lines, each `data: {...}` chunk is parsed with jansson and its text appended, and every
 * progress_every chunks the text so far is saved as the step's progress. That is what makes a
 * crash cheap on the completions endpoint: the next invocation sends the prompt followed by the
 * saved text, with max_tokens reduced by the chunks already received, and the server continues
 * the text. It is a continuation, not the bit-exact resume of the in-process engine: the server
 * re-tokenizes the text and draws afresh, so the rest may differ from what the interrupted
 * stream would have sent. The chat endpoint has no portable way to continue an assistant turn
 * (a trailing assistant message opens a new turn on most servers), so it saves no progress and
 * a retry asks again from the start.
 *
 * Against `cairn serve` (tools/serve_model.c) the resume is exact instead, on both endpoints:
 * every request carries {"cairn": {"progress_every": N}}, and that server answers with a first
 * event saying so and, every N tokens, a checkpoint event (the tokens so far and the sampler
 * state). The step saves each checkpoint with the text received up to it (progress v2, in place
 * of the text-only saves), and the next invocation sends the original prompt with {"cairn":
 * {"resume": the checkpoint}}: the server replays the tokens and streams the rest, which is what
 * the interrupted stream would have sent. A server that does not acknowledge the resume in its
 * first event (another server behind the same URL after a restart) has started afresh: the saved
 * text is dropped and its whole answer taken.
 *
 * Failures are classed by what a retry can change: no connection, a timeout, 408/429/5xx, a
 * stream cut before its end or an error event of the server's own (5xx) are TRANSIENT (429's
 * Retry-After is honoured through cairn_ctx_set_retry_after); any other 4xx is PERMANENT with
 * the server's own message quoted, and so is a reply that is not an event stream of JSON
 * chunks: a server that speaks something else will speak it again. The API key (api_key_env or
 * api_key_file, as notify's secrets) travels only in the Authorization header.
 */
#include "steps/llm_impl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "common/hash.h"
#include "common/json.h"
#include "common/str.h"
#include "gpu/chat.h"
#include "steps/notify.h"
#include "steps/template.h"

/* the longest SSE line and the most of an error answer kept */
#define LINE_MAX_BYTES (4u << 20)
#define ANSWER_MAX 2048

#define AT(m) CAIRN__CFG_AT(cairn__llm_cfg, m)
const cairn__cfg_field cairn__llm_openai_fields[] = {
    {"model", CAIRN__CFG_STR, AT(model), .nonempty = 1,
     .required = "required (the name of a model the server serves)"},
    {"url", CAIRN__CFG_STR, AT(url), .nonempty = 1,
     .required = "required for \"backend\": \"openai\" (the server's base URL, such as "
                 "http://127.0.0.1:8080/v1)"},
    CAIRN__CFG_KNOWN("endpoint"),
    CAIRN__CFG_KNOWN("api_key_env"),
    CAIRN__CFG_KNOWN("api_key_file"),
    {"request_timeout_s", CAIRN__CFG_INT, AT(request_timeout_s), .lo = 1, .hi = 86400, .def = 600,
     .unit = "(seconds)", .tuning = 1},
    {"connect_timeout_s", CAIRN__CFG_INT, AT(connect_timeout_s), .lo = 1, .hi = 600, .def = 10,
     .unit = "(seconds)", .tuning = 1},
    /* 0: not sent (OpenAI's own API has no top_k; llama.cpp and vLLM read it) */
    {"top_k", CAIRN__CFG_INT, AT(sp.top_k), .lo = 0, .hi = 1 << 20, .def = 0},
    {NULL},
};
#undef AT

static int once_ok;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { once_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }

/* The URL as messages show it (scheme://host[:port]/path), parsed with curl's own parser so
 * exactly what curl will use is checked; credentials in it are refused. */
static int check_url(const cairn__cfg *r, cairn__llm_cfg *c)
{
    if (strncmp(c->url, "http://", 7) && strncmp(c->url, "https://", 8))
        return cairn__cfg_fail(r, CAIRN_EJSON, "url", "must start with http:// or https://");
    CURLU *u = curl_url();
    char *user = NULL, *host = NULL, *path = NULL, *port = NULL, *scheme = NULL, *q = NULL;
    int rc = 0;
    if (!u)
        rc = cairn__cfg_fail(r, CAIRN_ENOMEM, "url", "out of memory");
    else if (curl_url_set(u, CURLUPART_URL, c->url, 0) != CURLUE_OK)
        rc = cairn__cfg_fail(r, CAIRN_EJSON, "url", "not a valid URL");
    else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK)
        rc = cairn__cfg_fail(r, CAIRN_EJSON, "url",
                             "must not carry credentials; name the API key with api_key_env or "
                             "api_key_file");
    else if (curl_url_get(u, CURLUPART_QUERY, &q, 0) == CURLUE_OK)
        rc = cairn__cfg_fail(r, CAIRN_EJSON, "url",
                             "must be a base URL without a query (\"/completions\" is added)");
    else {
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
        curl_url_get(u, CURLUPART_HOST, &host, 0);
        curl_url_get(u, CURLUPART_PORT, &port, 0);
        curl_url_get(u, CURLUPART_PATH, &path, 0);
        size_t n = 8 + strlen(scheme) + strlen(host) + (port ? strlen(port) : 0) + strlen(path);
        if (!(c->url_safe = malloc(n)))
            rc = cairn__cfg_fail(r, CAIRN_ENOMEM, "url", "out of memory");
        else /* without the trailing '/', so that "/completions" can follow */
            snprintf(c->url_safe, n, "%s://%s%s%s%.*s", scheme, host, port ? ":" : "",
                     port ? port : "",
                     (int)(strlen(path) - (strlen(path) && path[strlen(path) - 1] == '/')), path);
    }
    curl_free(user), curl_free(host), curl_free(path), curl_free(port);
    curl_free(scheme), curl_free(q);
    curl_url_cleanup(u);
    return rc;
}

int cairn__llm_openai_setup(const cairn__cfg *r, cairn__llm_cfg *c)
{
    const json_t *ep = json_object_get(r->obj, "endpoint");
    /* with a chat format the server's own template is meant; raw text is a completion */
    c->endpoint = c->chat == CAIRN__CHAT_RAW ? CAIRN__LLM_COMPLETIONS : CAIRN__LLM_CHAT;
    if (ep && json_is_string(ep) && strcmp(json_string_value(ep), "completions") == 0)
        c->endpoint = CAIRN__LLM_COMPLETIONS;
    else if (ep && json_is_string(ep) && strcmp(json_string_value(ep), "chat") == 0)
        c->endpoint = CAIRN__LLM_CHAT;
    else if (ep)
        return cairn__cfg_fail(r, CAIRN_EJSON, "endpoint", "must be \"completions\" or \"chat\"");
    int rc = check_url(r, c);
    if (rc)
        return rc;
    char *key = NULL;
    if ((rc = cairn__read_secret(r, r->obj, "api_key_env", "api_key_file", 0, &key)))
        return rc == CAIRN_ENOMEM ? cairn__cfg_fail(r, rc, "api_key_env", "out of memory") : rc;
    if (key) {
        size_t n = strlen(key) + 32;
        c->auth = malloc(n);
        if (c->auth)
            snprintf(c->auth, n, "Authorization: Bearer %s", key);
        OPENSSL_cleanse(key, strlen(key));
        free(key);
        if (!c->auth)
            return cairn__cfg_fail(r, CAIRN_ENOMEM, "api_key_env", "out of memory");
    }
    pthread_once(&curl_once, curl_init_once);
    return once_ok ? 0 : cairn__cfg_fail(r, CAIRN_EJSON, NULL, "libcurl failed to initialize");
}

void cairn__llm_openai_release(cairn__llm_cfg *c)
{
    free(c->url_safe);
    c->url_safe = NULL;
    if (c->auth) {
        OPENSSL_cleanse(c->auth, strlen(c->auth)); /* a secret: not left in freed memory */
        free(c->auth);
        c->auth = NULL;
    }
}

/* ------------------------------------------------------------------ one call */

typedef struct call {
    cairn_ctx *ctx;
    const cairn__llm_cfg *c;
    CURL *h;
    long status;                 /* the HTTP status, read at the first body byte */
    struct cairn__sbuf line;     /* the SSE line being received */
    struct cairn__sbuf text;     /* the saved text, then what this request streamed */
    char answer[ANSWER_MAX + 1]; /* the start of a non-2xx answer */
    size_t answer_len;
    size_t line_no, offset, line_off; /* for messages: lines and bytes of the stream so far */
    size_t chunks, resumed, unsaved;  /* text chunks of this request, tokens resumed, unsaved */
    char prompt_sha[65];
    char finish[32];
    int got_done, stopped;
    /* the cairn extension: the saved checkpoint sent (resume: its tokens and state), whether the
     * server acknowledged it (first event), and the first event seen */
    json_t *resume_ids;
    char *resume_state;
    int cairn_srv, first_seen;
    cairn_step_result fault; /* OK, or what the stream's own fault makes of the call */
    char why[400];
    json_int_t usage_prompt, usage_completion; /* -1: the server gave none */
} call;

/* Saves the text so far as progress: v1, the text alone (its token count: the chunks); v2 with
 * a checkpoint of `cairn serve` (ids: its tokens, state: the sampler state in base64 as the
 * server sent it), which a resume hands back. */
static void save(call *k, json_t *ids, const char *state)
{
    size_t n = ids ? json_array_size(ids) : k->resumed + k->chunks;
    int32_t *t = ids ? malloc((n ? n : 1) * sizeof *t) : NULL;
    if (ids && !t)
        return; /* progress is an optimisation */
    for (size_t i = 0; ids && i < n; i++)
        t[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    const cairn__mp_kv kv[] = {
        CAIRN__MP_U("v", ids ? 2 : 1),
        CAIRN__MP_S("prompt_sha", k->prompt_sha, 64),
        CAIRN__MP_S("text", k->text.p ? k->text.p : "", k->text.len),
        CAIRN__MP_U("tokens", n),
        {"ids", CAIRN__MP_I32S, .p = t, .n = n},
        CAIRN__MP_S("state", state, state ? strlen(state) : 0),
    };
    cairn__mp_pack_map(&pk, kv, ids ? 6 : 4);
    int rc = cairn_ctx_save_progress(k->ctx, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    free(t);
    if (rc == CAIRN_EINTR)
        k->stopped = 1; /* the run is stopping: the write callback ends the transfer */
    k->unsaved = 0;     /* a failed save is an optimisation lost, not a failed generation */
}

/* The cairn object of an event (NULL: none): the acknowledgement, a checkpoint. */
static void on_cairn(call *k, json_t *x)
{
    int first = !k->first_seen;
    k->first_seen = 1;
    if (first && json_is_object(x) && json_is_integer(json_object_get(x, "resumed")))
        k->cairn_srv = 1;
    else if (first && k->resume_ids) { /* not understood: the server started from the prompt */
        k->text.len = 0;
        k->text.p[0] = 0;
        k->resumed = 0;
    }
    json_t *ids = json_object_get(x, "tokens");
    const char *st = json_string_value(json_object_get(x, "state"));
    if (k->cairn_srv && json_is_array(ids) && st)
        save(k, ids, st);
}

/* A printable excerpt of s (n bytes) into out. */
static void excerpt(const char *s, size_t n, char *out, size_t outlen)
{
    size_t j = 0, i;
    for (i = 0; i < n && j + 4 < outlen && i < 160; i++)
        out[j++] = (unsigned char)s[i] < 0x20 ? ' ' : s[i];
    if (i < n && j + 4 < outlen)
        out[j++] = '.', out[j++] = '.', out[j++] = '.';
    out[j] = 0;
}

static int malformed(call *k, const char *what, const char *s, size_t n)
{
    char ex[200];
    excerpt(s, n, ex, sizeof ex);
    snprintf(k->why, sizeof k->why,
             "malformed stream from %s: line %zu (byte %zu): %s: '%s' (not retried)",
             k->c->url_safe, k->line_no, k->line_off, what, ex);
    k->fault = CAIRN_STEP_PERMANENT;
    return -1;
}

/* One `data:` payload: a JSON chunk, an error event, or the end. -1 ends the transfer. */
static int on_event(call *k, const char *d, size_t n)
{
    if (n == 6 && memcmp(d, "[DONE]", 6) == 0) {
        k->got_done = 1;
        return 0;
    }
    json_error_t je;
    json_t *j = json_loadb(d, n, JSON_ALLOW_NUL, &je); /* llama.cpp streams "\u0000" */
    if (!j || !json_is_object(j)) {
        char what[200];
        snprintf(what, sizeof what, "%s", j ? "a chunk is not a JSON object" : je.text);
        json_decref(j);
        return malformed(k, what, d, n);
    }
    json_t *e = json_object_get(j, "error");
    if (e) { /* the server failed mid-stream and says so (llama.cpp, vLLM) */
        json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
        json_int_t code = json_integer_value(json_object_get(e, "code"));
        snprintf(k->why, sizeof k->why, "%s: error event after %zu tokens: %s", k->c->url_safe,
                 k->resumed + k->chunks, json_is_string(m) ? json_string_value(m) : "(no message)");
        k->fault = code >= 400 && code < 500 && code != 408 && code != 429 ? CAIRN_STEP_PERMANENT
                                                                           : CAIRN_STEP_TRANSIENT;
        json_decref(j);
        return -1;
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        if (json_is_integer(json_object_get(u, "prompt_tokens")))
            k->usage_prompt = json_integer_value(json_object_get(u, "prompt_tokens"));
        if (json_is_integer(json_object_get(u, "completion_tokens")))
            k->usage_completion = json_integer_value(json_object_get(u, "completion_tokens"));
    }
    on_cairn(k, json_object_get(j, "cairn"));
    json_t *choices = json_object_get(j, "choices");
    if (!json_is_array(choices)) {
        json_decref(j);
        return malformed(k, "a chunk has no \"choices\" array", d, n);
    }
    json_t *ch = json_array_get(choices, 0); /* none: the usage chunk */
    json_t *piece = k->c->endpoint == CAIRN__LLM_CHAT
                        ? json_object_get(json_object_get(ch, "delta"), "content")
                        : json_object_get(ch, "text");
    json_t *fin = json_object_get(ch, "finish_reason");
    if (ch && piece && !json_is_null(piece) && !json_is_string(piece)) {
        json_decref(j);
        return malformed(k, "the chunk's text is not a string", d, n);
    }
    if (json_is_string(fin))
        snprintf(k->finish, sizeof k->finish, "%s", json_string_value(fin));
    if (json_is_string(piece) && json_string_length(piece)) {
        if (cairn__sb_put(&k->text, json_string_value(piece), json_string_length(piece))) {
            json_decref(j);
            snprintf(k->why, sizeof k->why, "out of memory for the text");
            k->fault = CAIRN_STEP_TRANSIENT;
            return -1;
        }
        k->chunks++;
        /* the chat endpoint cannot continue a turn (file comment): nothing worth saving; cairn
         * serve's checkpoints are saved as they come */
        if (k->c->endpoint == CAIRN__LLM_COMPLETIONS && k->c->progress_every && !k->cairn_srv &&
            ++k->unsaved >= (size_t)k->c->progress_every)
            save(k, NULL, NULL);
    }
    json_decref(j);
    return k->stopped ? -1 : 0;
}

/* One line of the event stream (without its end of line). -1 ends the transfer. */
static int on_line(call *k, const char *s, size_t n)
{
    if (n && s[n - 1] == '\r')
        n--;
    if (n == 0 || s[0] == ':')
        return 0; /* an event's end, or a comment (a keep-alive) */
    const char *colon = memchr(s, ':', n);
    size_t fl = colon ? (size_t)(colon - s) : n;
    if (fl == 4 && memcmp(s, "data", 4) == 0) {
        const char *d = colon + 1;
        if (d < s + n && *d == ' ')
            d++;
        return on_event(k, d, (size_t)(s + n - d));
    }
    if ((fl == 5 && !memcmp(s, "event", 5)) || (fl == 2 && !memcmp(s, "id", 2)) ||
        (fl == 5 && !memcmp(s, "retry", 5)))
        return 0;
    return malformed(k, "not an event-stream line (does the server stream?)", s, n);
}

static size_t on_body(char *p, size_t sz, size_t nm, void *u)
{
    call *k = u;
    size_t len = sz * nm;
    if (!k->status)
        curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &k->status);
    if (k->status < 200 || k->status >= 300) {
        size_t room = ANSWER_MAX - k->answer_len, take = len < room ? len : room;
        memcpy(k->answer + k->answer_len, p, take);
        k->answer[k->answer_len += take] = 0;
        return len; /* the rest is read and dropped */
    }
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(p + i, '\n', len - i);
        size_t take = nl ? (size_t)(nl - (p + i)) : len - i;
        if (k->line.len + take > LINE_MAX_BYTES) {
            malformed(k, "a line longer than 4 MiB", k->line.p ? k->line.p : "", k->line.len);
            return 0;
        }
        if (cairn__sb_put(&k->line, p + i, take)) {
            snprintf(k->why, sizeof k->why, "out of memory reading the stream");
            k->fault = CAIRN_STEP_TRANSIENT;
            return 0;
        }
        i += take;
        if (!nl)
            break;
        i++;
        k->line_no++;
        int rc = on_line(k, k->line.p, k->line.len);
        k->offset += k->line.len + 1;
        k->line_off = k->offset;
        k->line.len = 0;
        k->line.p[0] = 0;
        if (rc)
            return 0;
    }
    return len;
}

/* A stop request ends the transfer: the runner is shutting down, the progress is saved. */
static int on_xfer(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    call *k = u;
    if (cairn_ctx_stopping(k->ctx))
        k->stopped = 1;
    return k->stopped;
}

/* ------------------------------------------------------------------ the request */

static json_t *messages(const cairn__llm_cfg *c, const char *user)
{
    json_t *m = json_array();
    if (m && c->system)
        json_array_append_new(m, json_pack("{s:s, s:s}", "role", "system", "content", c->system));
    if (m)
        json_array_append_new(m, json_pack("{s:s, s:s}", "role", "user", "content", user));
    return m;
}

/* The prompt's identity, which saved progress must match: the endpoint, the model name and
 * the prompt or messages (not the URL: the same model behind another server or a balancer
 * continues the same text). */
static int prompt_sha(const cairn__llm_cfg *c, const json_t *prompt, char out[65])
{
    json_t *id = json_pack("{s:s, s:s, s:O}", "endpoint",
                           c->endpoint == CAIRN__LLM_CHAT ? "chat" : "completions", "model",
                           c->model, "prompt", prompt);
    char *canon = NULL;
    size_t n = 0;
    int rc = id ? cairn__canon_json(id, &canon, &n) : CAIRN_ENOMEM;
    json_decref(id);
    if (!rc)
        cairn__sha256_hex(canon, n, out);
    free(canon);
    return rc;
}

/* A v2 checkpoint's tokens (a JSON array) and state, for the resume extension. */
static void saved_checkpoint(const msgpack_object *p, call *k)
{
    const msgpack_object *ids = cairn__mp_path(p, "ids"), *st = cairn__mp_path(p, "state");
    if (!ids || ids->type != MSGPACK_OBJECT_ARRAY || !st || st->type != MSGPACK_OBJECT_STR)
        return;
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < ids->via.array.size; i++) {
        const msgpack_object *t = &ids->via.array.ptr[i];
        if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
            json_decref(a);
            return;
        }
        json_array_append_new(a, json_integer((json_int_t)t->via.u64));
    }
    k->resume_state = strndup(st->via.str.ptr, st->via.str.size);
    if (!a || !k->resume_state) {
        json_decref(a);
        free(k->resume_state);
        k->resume_state = NULL;
        return;
    }
    k->resume_ids = a;
}

/* Saved text and token count, if the progress belongs to this prompt. */
static int saved_text(const msgpack_object *p, const char *sha, struct cairn__sbuf *text,
                      size_t *tokens)
{
    const msgpack_object *s = cairn__mp_path(p, "prompt_sha"), *t = cairn__mp_path(p, "text"),
                         *n = cairn__mp_path(p, "tokens");
    if (!s || s->type != MSGPACK_OBJECT_STR || s->via.str.size != 64 ||
        memcmp(s->via.str.ptr, sha, 64) != 0 || !t || t->type != MSGPACK_OBJECT_STR || !n ||
        n->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return 0;
    *tokens = (size_t)n->via.u64;
    return cairn__sb_put(text, t->via.str.ptr, t->via.str.size) == 0;
}

/* A float setting as the user wrote it (0.7, not 0.699999988): what a server logs and echoes. */
static double as_written(float x)
{
    char s[32];
    snprintf(s, sizeof s, "%.7g", (double)x);
    return strtod(s, NULL);
}

static json_t *request_body(const cairn__llm_cfg *c, const call *k, const json_t *prompt,
                            const char *so_far, size_t sl, size_t max_tokens, uint64_t seed)
{
    json_t *b = json_pack("{s:s, s:b, s:{s:b}, s:I, s:f, s:f, s:I}", "model", c->model, "stream", 1,
                          "stream_options", "include_usage", 1, "max_tokens",
                          (json_int_t)max_tokens, "temperature", as_written(c->sp.temperature),
                          "top_p", as_written(c->sp.top_p), "seed", (json_int_t)seed);
    if (!b)
        return NULL;
    if (c->progress_every) { /* other servers ignore it; cairn serve checkpoints */
        json_t *x = json_pack("{s:i}", "progress_every", c->progress_every);
        if (k->resume_ids)
            json_object_set_new(
                x, "resume",
                json_pack("{s:O, s:s}", "tokens", k->resume_ids, "state", k->resume_state));
        json_object_set_new(b, "cairn", x);
    }
    if (c->endpoint == CAIRN__LLM_CHAT)
        json_object_set(b, "messages", (json_t *)prompt);
    else { /* a continuation is the prompt followed by the text so far */
        size_t pl = json_string_length(prompt);
        char *p = malloc(pl + sl + 1);
        if (p) {
            memcpy(p, json_string_value(prompt), pl);
            memcpy(p + pl, so_far, sl);
        }
        json_t *s = p ? json_stringn(p, pl + sl) : NULL;
        free(p);
        if (!s || json_object_set_new(b, "prompt", s)) {
            json_decref(b);
            return NULL;
        }
    }
    if (c->sp.top_k > 0) /* llama.cpp's and vLLM's extra field */
        json_object_set_new(b, "top_k", json_integer(c->sp.top_k));
    if (c->sp.repeat_penalty != 1.0f) { /* llama.cpp's name, and vLLM's */
        json_object_set_new(b, "repeat_penalty", json_real(as_written(c->sp.repeat_penalty)));
        json_object_set_new(b, "repetition_penalty", json_real(as_written(c->sp.repeat_penalty)));
    }
    if (c->n_stop) {
        json_t *st = json_array();
        for (size_t i = 0; st && i < c->n_stop; i++)
            json_array_append_new(st, json_string(c->stop[i]));
        json_object_set_new(b, "stop", st);
    }
    return b;
}

/* The server's own words from an error answer: error.message, error (a string) or message;
 * else the answer's start. */
static void server_message(const call *k, char *out, size_t outlen)
{
    json_t *j = json_loadb(k->answer, k->answer_len, 0, NULL);
    json_t *e = json_object_get(j, "error");
    json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    if (!json_is_string(m))
        m = json_object_get(j, "message");
    if (json_is_string(m))
        excerpt(json_string_value(m), json_string_length(m), out, outlen);
    else
        excerpt(k->answer, k->answer_len, out, outlen);
    json_decref(j);
}

/* curl errors that no retry can cure: the configuration or the build is wrong. */
static int curl_permanent(CURLcode rc)
{
    return rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
           rc == CURLE_NOT_BUILT_IN || rc == CURLE_BAD_FUNCTION_ARGUMENT ||
           rc == CURLE_UNKNOWN_OPTION || rc == CURLE_PEER_FAILED_VERIFICATION ||
           rc == CURLE_SSL_CACERT_BADFILE;
}

static cairn_step_result failed(cairn_ctx *ctx, cairn_step_result r, const char *fmt, ...)
    CAIRN_PRINTF(3, 4);
static cairn_step_result failed(cairn_ctx *ctx, cairn_step_result r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cairn_ctx_set_error(ctx, "generate: %s", msg);
    return r;
}

/* The outcome of a transfer that did not end in a whole stream. */
static cairn_step_result outcome(call *k, CURLcode cc, const char *errbuf)
{
    const char *u = k->c->url_safe;
    size_t toks = k->resumed + k->chunks;
    if (k->stopped)
        return failed(k->ctx, CAIRN_STEP_TRANSIENT, "stopped after %zu tokens%s", toks,
                      k->c->endpoint == CAIRN__LLM_COMPLETIONS ? " (progress saved)" : "");
    if (k->fault != CAIRN_STEP_OK)
        return failed(k->ctx, k->fault, "%s", k->why);
    if (k->status == 429) {
        curl_off_t wait = -1;
        curl_easy_getinfo(k->h, CURLINFO_RETRY_AFTER, &wait);
        char m[200];
        server_message(k, m, sizeof m);
        if (wait > 0) {
            wait = wait > 86400 ? 86400 : wait; /* a day at most, as notify honours it */
            cairn_ctx_set_retry_after(k->ctx, (uint32_t)wait * 1000u);
            return failed(k->ctx, CAIRN_STEP_TRANSIENT,
                          "%s: HTTP 429 Too Many Requests; retrying after %lld s as the server "
                          "asks: %s",
                          u, (long long)wait, m);
        }
        return failed(k->ctx, CAIRN_STEP_TRANSIENT, "%s: HTTP 429 Too Many Requests: %s", u, m);
    }
    if (k->status == 408 || (k->status >= 500 && k->status < 600)) {
        char m[200];
        server_message(k, m, sizeof m);
        return failed(k->ctx, CAIRN_STEP_TRANSIENT, "%s: HTTP %ld (will retry): %s", u, k->status,
                      m);
    }
    if (k->status && (k->status < 200 || k->status >= 300)) {
        char m[200];
        server_message(k, m, sizeof m);
        return failed(k->ctx, CAIRN_STEP_PERMANENT, "%s: HTTP %ld (not retried): %s", u, k->status,
                      m);
    }
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return failed(k->ctx, CAIRN_STEP_TRANSIENT,
                      "%s: no whole answer within request_timeout_s (%ld s) after %zu tokens: %s",
                      u, k->c->request_timeout_s, toks,
                      errbuf[0] ? errbuf : curl_easy_strerror(cc));
    if (cc != CURLE_OK && !k->status)
        return failed(k->ctx, curl_permanent(cc) ? CAIRN_STEP_PERMANENT : CAIRN_STEP_TRANSIENT,
                      "%s: %s", u, errbuf[0] ? errbuf : curl_easy_strerror(cc));
    return failed(k->ctx, CAIRN_STEP_TRANSIENT,
                  "%s: the stream ended after %zu tokens without its end (%s)%s", u, toks,
                  cc == CURLE_OK ? "no [DONE]" : (errbuf[0] ? errbuf : curl_easy_strerror(cc)),
                  k->c->endpoint == CAIRN__LLM_COMPLETIONS ? "; progress saved" : "");
}

static cairn_step_result pack_output(call *k, double seconds, uint64_t seed)
{
    const cairn__llm_cfg *c = k->c;
    /* OpenAI's "stop" covers both the model's end and a stop string */
    const char *fin = k->finish[0] ? k->finish : "stop";
    size_t gen = k->usage_completion >= 0 ? (size_t)k->usage_completion : k->chunks;
    const char *ep = c->endpoint == CAIRN__LLM_CHAT ? "chat" : "completions";
    const cairn__mp_kv sampler[] = {
        CAIRN__MP_D("temperature", c->sp.temperature),
        CAIRN__MP_D("top_p", c->sp.top_p),
        CAIRN__MP_I("top_k", c->sp.top_k),
        CAIRN__MP_D("repeat_penalty", c->sp.repeat_penalty),
    };
    const cairn__mp_kv kv[] = {
        CAIRN__MP_S("text", k->text.p ? k->text.p : "", k->text.len),
        CAIRN__MP_S("finish_reason", fin, strlen(fin)),
        CAIRN__MP_U("prompt_tokens", k->usage_prompt >= 0 ? (uint64_t)k->usage_prompt : 0),
        CAIRN__MP_U("completion_tokens", k->resumed + gen),
        CAIRN__MP_U("resumed_tokens", k->resumed),
        CAIRN__MP_U("generated_tokens", gen),
        CAIRN__MP_S("model", c->model, strlen(c->model)),
        CAIRN__MP_S("backend", "openai", 6),
        CAIRN__MP_S("endpoint", ep, strlen(ep)),
        CAIRN__MP_S("server", c->url_safe, strlen(c->url_safe)),
        CAIRN__MP_M("sampler", sampler),
        CAIRN__MP_U("seed", seed),
        CAIRN__MP_D("tokens_per_s", seconds > 0 ? (double)k->chunks / seconds : 0),
    };
    CAIRN__MP_PACK(cairn_ctx_packer(k->ctx), kv);
    return CAIRN_STEP_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

cairn_step_result cairn__llm_openai_step(cairn_ctx *ctx, const cairn__llm_cfg *c, const char *user,
                                         uint64_t seed)
{
    call k = {
        .ctx = ctx, .c = c, .fault = CAIRN_STEP_OK, .usage_prompt = -1, .usage_completion = -1};
    json_t *prompt = NULL;
    if (c->endpoint == CAIRN__LLM_CHAT)
        prompt = messages(c, user);
    else { /* the chat format, if any, rendered here as text: the server sees one string */
        cairn__chat_msg msgs[2];
        size_t nm = 0, len = 0;
        if (c->system)
            msgs[nm++] = (cairn__chat_msg){"system", c->system};
        msgs[nm++] = (cairn__chat_msg){"user", user};
        char *s = NULL;
        if (cairn__chat_render(c->chat, msgs, nm, 1, &s, &len) == 0)
            prompt = json_stringn(s, len);
        free(s);
    }
    if (!prompt) /* jansson refuses text that is not UTF-8 (a task's msgpack str may be any) */
        return failed(ctx, CAIRN_STEP_PERMANENT,
                      "the prompt is not valid UTF-8 (or out of memory building it)");
    if (prompt_sha(c, prompt, k.prompt_sha)) {
        json_decref(prompt);
        return failed(ctx, CAIRN_STEP_TRANSIENT, "out of memory");
    }
    const msgpack_object *p = cairn_ctx_progress(ctx);
    const int have = p && saved_text(p, k.prompt_sha, &k.text, &k.resumed);
    if (have)
        saved_checkpoint(p, &k);
    /* text alone continues only a completion; a checkpoint resumes either endpoint exactly */
    if (!have || (c->endpoint == CAIRN__LLM_CHAT && !k.resume_ids)) {
        free(k.text.p);
        k.text = (struct cairn__sbuf){0};
        k.resumed = 0;
    }
    cairn__sb_put(&k.text, "", 0);
    cairn__sb_put(&k.line, "", 0);
    if (k.text.oom || k.line.oom) {
        json_decref(prompt);
        free(k.text.p), free(k.line.p), free(k.resume_state), json_decref(k.resume_ids);
        return failed(ctx, CAIRN_STEP_TRANSIENT, "out of memory");
    }
    /* killed after the last chunk was saved (a checkpoint goes back: the server releases the
     * bytes it held back at the end) */
    if (k.resumed >= (size_t)c->max_tokens && !k.resume_ids) {
        snprintf(k.finish, sizeof k.finish, "length");
        cairn_step_result r = pack_output(&k, 0, seed);
        json_decref(prompt);
        free(k.text.p), free(k.line.p), free(k.resume_state), json_decref(k.resume_ids);
        return r;
    }
    /* a resume sends the prompt as it was and the whole max_tokens: the server counts the
     * replayed tokens in it, as the engine does */
    json_t *req = k.resume_ids ? request_body(c, &k, prompt, "", 0, (size_t)c->max_tokens, seed)
                               : request_body(c, &k, prompt, k.text.p, k.text.len,
                                              (size_t)c->max_tokens - k.resumed, seed);
    json_decref(prompt);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    char url[4200], errbuf[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s/%s", c->url_safe,
             c->endpoint == CAIRN__LLM_CHAT ? "chat/completions" : "completions");
    struct curl_slist *hl = NULL, *t = NULL;
    const char *hdrs[] = {"Content-Type: application/json", "Accept: text/event-stream",
                          "Expect:", c->auth};
    for (size_t i = 0; body && i < sizeof hdrs / sizeof *hdrs && hdrs[i]; i++) {
        if (!(t = curl_slist_append(hl, hdrs[i])))
            break;
        hl = t;
    }
    k.h = t ? curl_easy_init() : NULL;
    if (!k.h) {
        curl_slist_free_all(hl);
        free(body), free(k.text.p), free(k.line.p), free(k.resume_state), json_decref(k.resume_ids);
        return failed(ctx, CAIRN_STEP_TRANSIENT, "out of memory building the request");
    }
    /* the URL as configured, less a query (none allowed) - and with any credentials refused */
    curl_easy_setopt(k.h, CURLOPT_URL, url);
    curl_easy_setopt(k.h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(k.h, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: we may be a thread */
    curl_easy_setopt(k.h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_s * 1000L);
    curl_easy_setopt(k.h, CURLOPT_TIMEOUT_MS, c->request_timeout_s * 1000L);
    curl_easy_setopt(k.h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(k.h, CURLOPT_POST, 1L);
    curl_easy_setopt(k.h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(k.h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(k.h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(k.h, CURLOPT_USERAGENT, "cairn/0.1");
    curl_easy_setopt(k.h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(k.h, CURLOPT_WRITEDATA, &k);
    curl_easy_setopt(k.h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(k.h, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(k.h, CURLOPT_XFERINFODATA, &k);
    double t0 = now_s();
    CURLcode cc = curl_easy_perform(k.h);
    if (!k.status)
        curl_easy_getinfo(k.h, CURLINFO_RESPONSE_CODE, &k.status);
    if (k.line.len && k.fault == CAIRN_STEP_OK && !k.stopped && k.status >= 200 && k.status < 300) {
        k.line_no++; /* a last line without its end of line: whole if the transfer was */
        if (cc == CURLE_OK)
            on_line(&k, k.line.p, k.line.len);
    }
    int whole = k.fault == CAIRN_STEP_OK && !k.stopped && k.status >= 200 && k.status < 300 &&
                (k.got_done || (cc == CURLE_OK && k.finish[0]));
    /* a cut stream keeps what it brought: the retry continues from there */
    if (!whole && k.unsaved && !k.stopped && k.fault != CAIRN_STEP_PERMANENT && !k.cairn_srv)
        save(&k, NULL, NULL);
    cairn_step_result r = whole ? pack_output(&k, now_s() - t0, seed) : outcome(&k, cc, errbuf);
    curl_easy_cleanup(k.h);
    curl_slist_free_all(hl);
    free(body), free(k.text.p), free(k.line.p), free(k.resume_state), json_decref(k.resume_ids);
    return r;
}
