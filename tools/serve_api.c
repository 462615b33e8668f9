/* tools/serve_api.c - what `serve --model` answers: the OpenAI-compatible routes, their
 * responses and streamed events, and the engine's callbacks that make them.
 *
 * A generation request is parsed (serve_request.c) and queued (serve_sched.c) on its
 * connection's thread (runner/http.c, a thread per connection), which then waits on the job's
 * condition variable: a stream sends each buffered event as a chunk as it comes, a plain
 * request waits for the end and answers the whole text. The events are written on the
 * scheduler thread, by the engine's token callback inside a batch step and at the job's end,
 * into the job's output buffer under the server mutex. A connection that cannot write (the
 * stream was cut) or whose socket reads as closed marks its job cancelled.
 *
 * The text is sent in whole UTF-8 characters (a token may end inside one; invalid bytes become
 * U+FFFD), so every JSON chunk is valid. Because batched sequences get the bits they would get
 * alone, a request's text does not depend on what else is running.
 *
 * The cairn extension makes a generation resumable exactly: every progress_every tokens the
 * stream carries a checkpoint event, {"cairn": {"tokens": the tokens so far, "state": the
 * sampler state, base64}}, sent when the text streamed so far is exactly those tokens' (no
 * character held back), and a request with "cairn": {"resume": that checkpoint} continues the
 * generation from it: the rest of the text is what the interrupted stream would have sent, as
 * the in-process engine's resume gives. The first event of such a stream says {"cairn":
 * {"resumed": N}}, so the client knows the server understood (another server would ignore the
 * field and start over).
 *
 * Every error is OpenAI's {"error": {"message", "type", "param", "code"}}, the refusals
 * runner/http.c makes before any route runs (401, 404, 405, 413) included, so that an OpenAI
 * client can read each one.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "common/utf8.h"
#include "tools/serve_model.h"

/* The longest run of whole characters at the start of b (final: all of it), appended to out
 * with each byte that cannot begin one as U+FFFD; what is taken leaves b. Taken piece by piece
 * or all at once, the result is the same. */
static void utf8_take(struct cairn__sbuf *b, int final, struct cairn__sbuf *out)
{
    size_t i = 0;
    const unsigned char *s = (const unsigned char *)b->p;
    while (i < b->len) {
        uint32_t cp;
        size_t n = cairn__utf8_get(s + i, b->len - i, &cp);
        if (n) {
            cairn__sb_put(out, s + i, n);
            i += n;
            continue;
        }
        /* a lead byte whose sequence may still be completed by the next token's bytes */
        size_t want = s[i] >= 0xF0 && s[i] <= 0xF4 ? 4 : s[i] >= 0xE0 ? 3 : s[i] >= 0xC2 ? 2 : 0;
        if (!final && want && b->len - i < want && s[i] < 0xF5) {
            int prefix = 1;
            for (size_t k = i + 1; k < b->len; k++)
                prefix &= (s[k] & 0xC0) == 0x80;
            if (prefix)
                break;
        }
        cairn__sb_put(out, "\xEF\xBF\xBD", 3);
        i++;
    }
    memmove(b->p, b->p + i, b->len - i);
    b->len -= i;
}

json_t *cairn__serve_error(const char *type, const char *param, const char *code, const char *fmt,
                           ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", msg, "type", type, "param",
                     param, "code", code);
}

json_t *cairn__serve_refusal_body(void *user, unsigned status, const char *type,
                                  const char *message)
{
    (void)user;
    /* OpenAI's codes where it has one (a wrong key, an unknown URL), so a client that looks at
     * the code, not only at the status, reads them as OpenAI's own */
    static const struct {
        unsigned status;
        const char *code;
    } codes[] = {{401, "invalid_api_key"},
                 {404, "unknown_url"},
                 {405, "method_not_allowed"},
                 {413, "request_too_large"}};
    const char *code = type;
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        if (codes[i].status == status)
            code = codes[i].code;
    return cairn__serve_error("invalid_request_error", NULL, code, "%s", message);
}

/* Appends `data: <o>` (o released) to the job's stream and wakes its connection. Under mu. */
/* Events are handed to the connection in groups: a wake-up per token put a thread on a core
 * the decode's threads were using, and on a 2-core machine the whole step waited for it (a
 * quarter of the tokens/s at concurrency 1). The first token goes at once; later ones when
 * STREAM_GROUP_S has passed since the last wake-up, or with the end (job_done, job_fail wake
 * it themselves), or at the connection's own look every 100 ms (stream_read). */
#define STREAM_GROUP_S 0.025
static void emit(job *j, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s) {
        cairn__sb_puts(&j->out, "data: ");
        cairn__sb_puts(&j->out, s);
        cairn__sb_puts(&j->out, "\n\n");
        free(s);
    }
    const double now = cairn__serve_now();
    if (j->n_new <= 1 || now - j->woken >= STREAM_GROUP_S) {
        j->woken = now;
        pthread_cond_broadcast(&j->cv);
    }
}

/* A stream chunk: piece (NULL: none), finish (NULL: null). */
static json_t *chunk(const job *j, const char *piece, size_t n, const char *finish)
{
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(0));
    if (j->chat) {
        json_t *d = json_object();
        if (piece)
            json_object_set_new(d, "content", json_stringn(piece, n));
        json_object_set_new(c, "delta", d);
    } else {
        json_object_set_new(c, "text", json_stringn(piece ? piece : "", piece ? n : 0));
        json_object_set_new(c, "logprobs", json_null());
    }
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                     j->chat ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)j->created, "model", j->sv->name, "choices", c);
}

static char *b64(const uint8_t *p, size_t n)
{
    char *s = malloc(4 * ((n + 2) / 3) + 1);
    if (s)
        EVP_EncodeBlock((unsigned char *)s, p, (int)n);
    return s;
}

/* OpenAI's finish reasons: the end of the turn and a stop string are both "stop" */
static const char *finish_reason(int fin)
{
    return fin == CAIRN__FINISH_LENGTH || fin == CAIRN__FINISH_CONTEXT ? "length" : "stop";
}

static json_t *usage_of(const job *j)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)j->n_ids, "completion_tokens",
                     (json_int_t)j->n_new, "total_tokens", (json_int_t)(j->n_ids + j->n_new));
}

/* ------------------------------------------------------------------ the engine's callbacks */

static int on_token(void *user, int32_t token, const char *bytes, size_t len)
{
    (void)token;
    job *j = user;
    server *sv = j->sv;
    pthread_mutex_lock(&sv->mu);
    if (j->n_new++ == 0) {
        sv->ttft_n++;
        sv->ttft_sum += cairn__serve_now() - j->t_queued;
    }
    sv->tokens_out++;
    cairn__sb_put(&j->utf, bytes, len);
    struct cairn__sbuf piece = {0};
    utf8_take(&j->utf, 0, &piece);
    if (piece.len && j->stream)
        emit(j, chunk(j, piece.p, piece.len, NULL));
    else if (piece.len)
        cairn__sb_put(&j->text, piece.p, piece.len);
    free(piece.p);
    const int stop = j->cancelled || sv->cancel_all;
    pthread_mutex_unlock(&sv->mu);
    return stop;
}

static int on_progress(void *user, const int32_t *gen, size_t n, const uint8_t *state,
                       size_t state_len)
{
    job *j = user;
    server *sv = j->sv;
    pthread_mutex_lock(&sv->mu);
    /* only where the text sent so far is exactly these tokens' text: none held back */
    if (j->stream && j->ext && j->utf.len == 0) {
        json_t *toks = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(toks, json_integer(gen[i]));
        char *st = b64(state, state_len);
        json_t *c = chunk(j, NULL, 0, NULL);
        json_object_set_new(c, "cairn", json_pack("{s:o, s:s?}", "tokens", toks, "state", st));
        free(st);
        emit(j, c);
    }
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

/* ------------------------------------------------------------------ a job's end */

void cairn__serve_job_fail(job *j, unsigned status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof j->err, fmt, ap);
    va_end(ap);
    j->err_status = status;
    j->st = J_DONE;
    j->sv->failed++;
    if (j->stream) {
        char code[8];
        snprintf(code, sizeof code, "%u", status);
        json_t *e = cairn__serve_error(status == 503 ? "server_unavailable" : "server_error", NULL,
                                       code, "%s", j->err);
        json_object_set_new(json_object_get(e, "error"), "code", json_integer(status));
        emit(j, e);
    }
    pthread_cond_broadcast(&j->cv);
}

/* The last chunk, with usage (and the cairn extension's finish), then [DONE]. */
void cairn__serve_job_done(job *j, const cairn__gen_result *r)
{
    struct cairn__sbuf piece = {0};
    utf8_take(&j->utf, 1, &piece);
    j->finish = r->finish;
    if (j->stream) {
        if (piece.len)
            emit(j, chunk(j, piece.p, piece.len, NULL));
        json_t *c = chunk(j, NULL, 0, finish_reason(r->finish));
        json_object_set_new(c, "usage", usage_of(j));
        if (j->ext)
            json_object_set_new(c, "cairn",
                                json_pack("{s:s, s:I}", "finish", cairn__finish_name(r->finish),
                                          "tokens", (json_int_t)r->n_tokens));
        emit(j, c);
        cairn__sb_puts(&j->out, "data: [DONE]\n\n");
    } else if (piece.len)
        cairn__sb_put(&j->text, piece.p, piece.len);
    free(piece.p);
    j->st = J_DONE;
    pthread_cond_broadcast(&j->cv);
}

/* ------------------------------------------------------------------ the routes */

static ssize_t stream_read(void *user, char *buf, size_t max)
{
    job *j = user;
    server *sv = j->sv;
    pthread_mutex_lock(&sv->mu);
    if (j->out_off == j->out.len && j->st != J_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L; /* then http.c looks at the client's socket */
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&j->cv, &sv->mu, &ts);
    }
    size_t avail = j->out.len - j->out_off, n = avail < max ? avail : max;
    memcpy(buf, j->out.p + j->out_off, n);
    j->out_off += n;
    if (j->out_off == j->out.len)
        j->out_off = j->out.len = 0;
    const int end = !n && j->st == J_DONE;
    pthread_mutex_unlock(&sv->mu);
    return end ? -1 : (ssize_t)n;
}

static void stream_done(void *user, int complete)
{
    job *j = user;
    server *sv = j->sv;
    pthread_mutex_lock(&sv->mu);
    if (!complete && j->st != J_DONE) {
        j->cancelled = 1; /* the client went away: its sequence leaves at the next step */
        pthread_cond_signal(&sv->work);
    }
    cairn__serve_unref(j);
    pthread_mutex_unlock(&sv->mu);
}

/* A plain request waits for its end, looking at the client now and then. */
static void wait_plain(server *sv, job *j, const cairn__http_req *q, cairn__http_resp *r)
{
    pthread_mutex_lock(&sv->mu);
    while (j->st != J_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&j->cv, &sv->mu, &ts);
        if (j->st != J_DONE && !j->cancelled) {
            pthread_mutex_unlock(&sv->mu);
            int gone = cairn__http_client_gone(q);
            pthread_mutex_lock(&sv->mu);
            if (gone) {
                j->cancelled = 1;
                pthread_cond_signal(&sv->work);
            }
        }
    }
    if (j->err_status) {
        r->status = j->err_status;
        r->retry_after_s = j->err_status == 503 ? 1 : 0;
        r->body = cairn__serve_error(j->err_status == 503 ? "server_unavailable" : "server_error",
                                     NULL, NULL, "%s", j->err);
    } else if (j->cancelled) {
        r->status = 499; /* nobody reads it */
    } else {
        json_t *c = json_pack("{s:i}", "index", 0);
        json_t *txt = json_stringn(j->text.p ? j->text.p : "", j->text.len);
        if (j->chat)
            json_object_set_new(c, "message",
                                json_pack("{s:s, s:o}", "role", "assistant", "content", txt));
        else {
            json_object_set_new(c, "text", txt);
            json_object_set_new(c, "logprobs", json_null());
        }
        json_object_set_new(c, "finish_reason", json_string(finish_reason(j->finish)));
        r->status = 200;
        r->body = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", j->id, "object",
                            j->chat ? "chat.completion" : "text_completion", "created",
                            (json_int_t)j->created, "model", sv->name, "choices", c, "usage",
                            usage_of(j));
    }
    cairn__serve_unref(j);
    pthread_mutex_unlock(&sv->mu);
}

static void generate(server *sv, const cairn__http_req *q, cairn__http_resp *r, int chat)
{
    pthread_mutex_lock(&sv->mu);
    sv->requests[chat]++;
    pthread_mutex_unlock(&sv->mu);
    job *j = calloc(1, sizeof *j);
    if (!j) {
        r->status = 503;
        r->body = cairn__serve_error("server_unavailable", NULL, NULL, "out of memory");
        return;
    }
    j->sv = sv;
    j->chat = chat;
    pthread_cond_init(&j->cv, NULL);
    const int bad = cairn__serve_parse(sv, q->body, q->body_len, j, r) != 0;
    j->o.on_token = on_token;
    j->o.on_progress = on_progress;
    j->o.user = j;
    pthread_mutex_lock(&sv->mu);
    const unsigned refused = bad ? 0 : cairn__serve_refusal(sv);
    if (bad)
        sv->rejected_invalid++;
    if (bad || refused) {
        pthread_mutex_unlock(&sv->mu);
        cairn__serve_job_free(j);
        if (refused) {
            r->status = refused;
            r->retry_after_s = 1;
            r->body =
                refused == 503
                    ? cairn__serve_error("server_unavailable", NULL, NULL, "the server is stopping")
                    : cairn__serve_error("rate_limit_error", NULL, "queue_full",
                                         "%d requests are generating and %d waiting (the "
                                         "most this server takes); retry later",
                                         sv->max_seqs, sv->queue_max);
        }
        return;
    }
    snprintf(j->id, sizeof j->id, "%s-%lld", chat ? "chatcmpl" : "cmpl", ++sv->next_id);
    j->created = (long long)time(NULL);
    if (j->stream && (chat || j->ext)) { /* the role first (OpenAI's), and what was resumed */
        json_t *c = chunk(j, NULL, 0, NULL);
        if (chat)
            json_object_set_new(
                json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta"), "role",
                json_string("assistant"));
        if (j->ext)
            json_object_set_new(c, "cairn", json_pack("{s:I}", "resumed", (json_int_t)j->n_prev));
        emit(j, c);
    }
    cairn__serve_enqueue(sv, j);
    pthread_mutex_unlock(&sv->mu);
    if (j->stream) {
        r->status = 200;
        r->stream = stream_read;
        r->stream_done = stream_done;
        r->stream_user = j;
        return;
    }
    wait_plain(sv, j, q, r);
}

static void post_completions(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    generate(user, q, r, EP_COMPLETIONS);
}

static void post_chat(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    generate(user, q, r, EP_CHAT);
}

static void get_models(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    (void)q;
    server *sv = user;
    r->status = 200;
    r->body = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", sv->name,
                        "object", "model", "created", (json_int_t)0, "owned_by", "cairn");
}

static void get_health(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    (void)q;
    server *sv = user;
    pthread_mutex_lock(&sv->mu);
    int stopping = sv->stopping;
    pthread_mutex_unlock(&sv->mu);
    r->status = stopping ? 503 : 200;
    r->body = json_pack("{s:s}", "status", stopping ? "stopping" : "ok");
}

static void get_metrics(void *user, const cairn__http_req *q, cairn__http_resp *r)
{
    (void)q;
    server *sv = user;
    struct cairn__sbuf sb = {0};
    char line[4096];
    pthread_mutex_lock(&sv->mu);
    snprintf(line, sizeof line,
             "# HELP cairn_serve_requests_total Generation requests received.\n"
             "# TYPE cairn_serve_requests_total counter\n"
             "cairn_serve_requests_total{endpoint=\"completions\"} %llu\n"
             "cairn_serve_requests_total{endpoint=\"chat\"} %llu\n"
             "# HELP cairn_serve_rejected_total Requests refused before generating.\n"
             "# TYPE cairn_serve_rejected_total counter\n"
             "cairn_serve_rejected_total{reason=\"invalid\"} %llu\n"
             "cairn_serve_rejected_total{reason=\"queue_full\"} %llu\n"
             "cairn_serve_rejected_total{reason=\"stopping\"} %llu\n"
             "# HELP cairn_serve_cancelled_total Requests whose client went away.\n"
             "# TYPE cairn_serve_cancelled_total counter\ncairn_serve_cancelled_total %llu\n"
             "# HELP cairn_serve_failed_total Requests that ended in an error after admission.\n"
             "# TYPE cairn_serve_failed_total counter\ncairn_serve_failed_total %llu\n"
             "# HELP cairn_serve_tokens_in_total Prompt tokens of admitted requests.\n"
             "# TYPE cairn_serve_tokens_in_total counter\ncairn_serve_tokens_in_total %llu\n"
             "# HELP cairn_serve_tokens_out_total Tokens generated.\n"
             "# TYPE cairn_serve_tokens_out_total counter\ncairn_serve_tokens_out_total %llu\n"
             "# HELP cairn_serve_sequences_active Sequences in the batch.\n"
             "# TYPE cairn_serve_sequences_active gauge\ncairn_serve_sequences_active %d\n"
             "# HELP cairn_serve_sequences_queued Requests waiting for a place in the batch.\n"
             "# TYPE cairn_serve_sequences_queued gauge\ncairn_serve_sequences_queued %d\n"
             "# HELP cairn_serve_batch_size Sequences in the last batch step.\n"
             "# TYPE cairn_serve_batch_size gauge\ncairn_serve_batch_size %d\n"
             "# HELP cairn_serve_time_to_first_token_seconds From admission to the first token.\n"
             "# TYPE cairn_serve_time_to_first_token_seconds summary\n"
             "cairn_serve_time_to_first_token_seconds_sum %.6f\n"
             "cairn_serve_time_to_first_token_seconds_count %llu\n"
             "# HELP cairn_serve_tokens_per_second Tokens generated per second of batch steps.\n"
             "# TYPE cairn_serve_tokens_per_second gauge\ncairn_serve_tokens_per_second %.3f\n",
             sv->requests[EP_COMPLETIONS], sv->requests[EP_CHAT], sv->rejected_invalid,
             sv->rejected_full, sv->rejected_stopping, sv->cancelled, sv->failed, sv->tokens_in,
             sv->tokens_out, sv->n_active, sv->q_len, sv->last_batch, sv->ttft_sum, sv->ttft_n,
             sv->step_seconds > 0 ? (double)sv->step_tokens / sv->step_seconds : 0.0);
    pthread_mutex_unlock(&sv->mu);
    cairn__sb_puts(&sb, line);
    r->status = 200;
    r->text = sb.p;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

const cairn__http_route cairn__serve_routes[] = {
    {"POST", "/v1/completions", 0, 1, post_completions},
    {"POST", "/v1/chat/completions", 0, 1, post_chat},
    {"GET", "/v1/models", 0, 0, get_models},
    {"GET", "/health", 0, 0, get_health},
    {"GET", "/metrics", 0, 0, get_metrics},
};
const size_t cairn__serve_n_routes = sizeof cairn__serve_routes / sizeof *cairn__serve_routes;
