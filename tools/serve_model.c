/* tools/serve_model.c - `cairn serve --model`: one loaded model served as an OpenAI-compatible
 * HTTP service (completions and chat completions, streamed or not), batched.
 *
 * One scheduler thread owns the engine and its batch (gpu/batch.h, batch-invariant) and loops:
 * admit queued requests while fewer than --max-seqs are active, run one cairn__batch_step, and
 * move each finished sequence's result to its request. The engine's callbacks run inside that
 * step, on the scheduler thread: each hands its token's bytes to the request's own output
 * buffer under the server mutex and wakes the request's condition variable, which the
 * connection's thread (runner/http.c, a thread per connection) waits on: a stream sends each
 * buffered event as a chunk, a plain request waits for the end. A request whose client went
 * away (the stream could not be written, or the socket reads as closed) is marked cancelled,
 * and the token callback's answer removes it from the batch at the next step. Admission is
 * counted, not timed: at most --max-seqs active and --queue waiting, and beyond that 429 with
 * Retry-After, so a client backs off rather than piling up.
 *
 * The text is sent in whole UTF-8 characters (a token may end inside one; invalid bytes become
 * U+FFFD), so every JSON chunk is valid. Because batched sequences get the bits they would get
 * alone, a request's text does not depend on what else is running.
 *
 * The cairn extension (a "cairn" object in the request) makes a generation resumable exactly:
 * every progress_every tokens the stream carries a checkpoint event, {"cairn": {"tokens": the
 * tokens so far, "state": the sampler state, base64}}, sent when the text streamed so far is
 * exactly those tokens' (no character held back), and a request with "cairn": {"resume": that
 * checkpoint} continues the generation from it (cairn__batch_add_resume): the rest of the text
 * is what the interrupted stream would have sent, as the in-process engine's resume gives. The
 * first event of such a stream says {"cairn": {"resumed": N}}, so the client knows the server
 * understood (another server would ignore the field and start over).
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "cairn.h"
#include "common/str.h"
#include "common/utf8.h"
#include "gpu/batch.h"
#include "gpu/chat.h"
#include "gpu/engine.h"
#include "runner/cli.h"
#include "runner/http.h"
#include "tools/tools.h"

static const char usage[] =
    "usage: cairn serve --model FILE.gguf [--listen ADDR:PORT | --socket PATH] [options]\n"
    "\n"
    "Loads the model once (on the GPU when there is one: --backend auto) and serves it over an\n"
    "OpenAI-compatible HTTP API, batching the requests that run at once:\n"
    "  POST /v1/completions        {\"prompt\": TEXT, ...}\n"
    "  POST /v1/chat/completions   {\"messages\": [{\"role\", \"content\"}...]} (the model's chat\n"
    "                              template, or --chat)\n"
    "  GET /v1/models, GET /health, GET /metrics (Prometheus text)\n"
    "Request fields: max_tokens (default 256), temperature (0.8), top_p (0.95), top_k (40; 0:\n"
    "off), seed (default: random), stop (a string or up to 16), repetition_penalty or\n"
    "repeat_penalty (1: off), repeat_last_n (64), ignore_eos, stream (server-sent events\n"
    "ending in `data: [DONE]`); other fields are ignored. A bad value is 400 with an OpenAI error "
    "naming\n"
    "the field. The \"cairn\" field (progress_every, resume) makes a generation resumable\n"
    "exactly: see README, Scaling generation.\n"
    "\n"
    "      --listen ADDR:PORT  where to listen (default 127.0.0.1:8080; port 0: any free port);\n"
    "                          prints `listening ADDRESS` on stdout once it does\n"
    "      --socket PATH       listen on a Unix socket instead\n"
    "      --api-key-file F    every request needs 'Authorization: Bearer <the file's key>'\n"
    "                          (required for an address other than loopback)\n"
    "      --max-seqs N        sequences generated at once (default 8)\n"
    "      --queue N           requests waiting beyond those (default 32); more is 429\n"
    "      --model-name NAME   the model's id in /v1/models and responses (default: the file's\n"
    "                          name without .gguf)\n"
    "      --chat FORMAT       chat template: auto (default, from the model), chatml, llama3,\n"
    "                          gemma, phi3, mistral, raw\n"
    "      --backend NAME      cpu, cuda or auto (default auto)\n"
    "  -t, --threads N         CPU threads (default: all online CPUs)\n"
    "  -c, --ctx N             context length per sequence (default: min(model's, 4096))\n"
    "      --prompt-chunks N   prompt chunks run per batch step beside the decodes (default 1:\n"
    "                          long steps delay every stream; more may suit a GPU)\n"
    "      --kv-blocks N       KV cache blocks of 16 positions shared by all sequences\n"
    "                          (default: --max-seqs full contexts)\n"
    "      --grace S           on SIGTERM: seconds the running requests get to finish before\n"
    "                          they are cancelled (default 30)\n"
    "      --step-delay-ms MS  sleep before each batch step (for tests: a slow server)\n"
    "\n"
    "SIGTERM, SIGINT and SIGHUP stop it: new requests get 503, the running ones finish (or are\n"
    "cancelled after --grace), then it exits 0. Exit: 64 usage; 65/66/69 the model cannot be\n"
    "loaded (as `cairn generate`); 66 key file unreadable; 69 cannot listen.\n";

#define bad_usage(...) cairn__cli_usage_error("serve", usage, __VA_ARGS__)

#define MAX_STOP 16
#define MAX_MESSAGES 256

/* ------------------------------------------------------------------ requests */

enum { J_QUEUED, J_ACTIVE, J_DONE };
enum { EP_COMPLETIONS, EP_CHAT, EP_N };

typedef struct server server;

typedef struct job {
    server *sv;
    int chat, stream, ext; /* ext: the request carried the cairn extension */
    int32_t *ids, *prev;   /* the prompt; a resume's generated tokens */
    size_t n_ids, n_prev;
    uint8_t state[CAIRN__SAMPLER_STATE_BYTES];
    cairn__gen_opts o;
    char *stop[MAX_STOP];
    char id[48];
    long long created;
    /* the rest under sv->mu */
    int st, cancelled, refs, bid;
    unsigned err_status; /* a failure after admission: 500, 503 */
    char err[256];
    struct cairn__sbuf out; /* SSE bytes not yet handed to the connection, from out_off */
    size_t out_off;
    struct cairn__sbuf utf;  /* released bytes that are not a whole character yet */
    struct cairn__sbuf text; /* a plain request's text */
    size_t n_new;            /* tokens generated by this request */
    int finish;
    double t_queued;
    pthread_cond_t cv;
} job;

struct server {
    cairn__engine *e;
    cairn__batch *b;
    const char *name;
    int chat_fmt, max_seqs, queue_max, n_ctx;
    unsigned step_delay_ms;
    pthread_mutex_t mu;
    pthread_cond_t work; /* the scheduler's: a request queued or cancelled, a stop */
    job **queue;         /* a ring of queue_max + max_seqs */
    int q_head, q_len, q_cap;
    job **active;
    int n_active;
    int stopping, cancel_all, quit;
    long long next_id;
    /* /metrics, under mu */
    unsigned long long requests[EP_N], rejected_invalid, rejected_full, rejected_stopping;
    unsigned long long tokens_in, tokens_out, cancelled, failed, ttft_n;
    double ttft_sum, step_seconds;
    unsigned long long step_tokens;
    int last_batch;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void job_free(job *j)
{
    free(j->ids);
    free(j->prev);
    for (size_t i = 0; i < MAX_STOP; i++)
        free(j->stop[i]);
    free(j->out.p);
    free(j->utf.p);
    free(j->text.p);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Under mu. */
static void unref(job *j)
{
    if (--j->refs == 0)
        job_free(j);
}

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

static json_t *openai_error(const char *type, const char *param, const char *code, const char *fmt,
                            ...) CAIRN_PRINTF(4, 5);
static json_t *openai_error(const char *type, const char *param, const char *code, const char *fmt,
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

/* Appends `data: <o>` (o released) to the job's stream and wakes its connection. Under mu. */
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
    pthread_cond_broadcast(&j->cv);
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
        sv->ttft_sum += now_s() - j->t_queued;
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

/* ------------------------------------------------------------------ the scheduler */

/* The request ends with an error (status: what a plain request is answered; a stream gets an
 * error event with it as the code). Under mu. */
static void job_fail(job *j, unsigned status, const char *fmt, ...) CAIRN_PRINTF(3, 4);
static void job_fail(job *j, unsigned status, const char *fmt, ...)
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
        json_t *e = openai_error(status == 503 ? "server_unavailable" : "server_error", NULL, code,
                                 "%s", j->err);
        json_object_set_new(json_object_get(e, "error"), "code", json_integer(status));
        emit(j, e);
    }
    pthread_cond_broadcast(&j->cv);
}

/* The request is over: its last chunk, usage and [DONE]. Under mu. */
static void job_done(job *j, const cairn__gen_result *r)
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

/* Queued requests into the batch while there is room. Under mu. */
static void admit(server *sv)
{
    while (sv->q_len && sv->n_active < sv->max_seqs) {
        job *j = sv->queue[sv->q_head];
        if (j->cancelled || sv->cancel_all) {
            sv->q_head = (sv->q_head + 1) % sv->q_cap, sv->q_len--;
            if (sv->cancel_all)
                job_fail(j, 503, "the server is stopping");
            else
                sv->cancelled++, j->st = J_DONE;
            unref(j);
            continue;
        }
        int rc = j->n_prev ? cairn__batch_add_resume(sv->b, j->ids, j->n_ids, j->prev, j->n_prev,
                                                     j->state, sizeof j->state, &j->o, &j->bid)
                           : cairn__batch_add(sv->b, j->ids, j->n_ids, &j->o, &j->bid);
        if (rc == CAIRN_ENOMEM && sv->n_active)
            break; /* not enough free KV blocks now: it waits for some to come back */
        sv->q_head = (sv->q_head + 1) % sv->q_cap, sv->q_len--;
        if (rc) {
            job_fail(j, rc == CAIRN_ENOMEM ? 503 : 500, "cannot start the generation: %s",
                     cairn__batch_errmsg(sv->b));
            unref(j);
            continue;
        }
        j->st = J_ACTIVE;
        sv->active[sv->n_active++] = j;
    }
}

/* Finished, cancelled and failed sequences leave the batch. Under mu. */
static void reap(server *sv, int step_rc)
{
    int k = 0;
    for (int i = 0; i < sv->n_active; i++) {
        job *j = sv->active[i];
        cairn__gen_result r;
        int state = cairn__batch_seq_state(sv->b, j->bid);
        if (state == CAIRN__SEQ_DONE && cairn__batch_result(sv->b, j->bid, &r) == 0) {
            if (r.finish == CAIRN__FINISH_CANCEL && sv->cancel_all)
                job_fail(j, 503, "the server is stopping: cancelled after %zu tokens", j->n_new);
            else if (r.finish == CAIRN__FINISH_CANCEL)
                sv->cancelled++, j->st = J_DONE, pthread_cond_broadcast(&j->cv);
            else
                job_done(j, &r);
            cairn__gen_result_free(&r);
        } else if (j->cancelled || sv->cancel_all || step_rc < 0) {
            if (step_rc < 0 && !j->cancelled)
                job_fail(j, step_rc == CAIRN_ENOMEM ? 503 : 500, "generation failed: %s",
                         cairn__batch_errmsg(sv->b));
            else if (sv->cancel_all && !j->cancelled)
                job_fail(j, 503, "the server is stopping: cancelled after %zu tokens", j->n_new);
            else
                sv->cancelled++, j->st = J_DONE, pthread_cond_broadcast(&j->cv);
        } else {
            sv->active[k++] = j;
            continue;
        }
        cairn__batch_remove(sv->b, j->bid);
        unref(j);
    }
    sv->n_active = k;
}

static void *scheduler(void *arg)
{
    server *sv = arg;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        reap(sv, 0);
        admit(sv);
        if (sv->quit && !sv->n_active && !sv->q_len)
            break;
        if (!sv->n_active) {
            pthread_cond_wait(&sv->work, &sv->mu);
            continue;
        }
        sv->last_batch = sv->n_active;
        pthread_mutex_unlock(&sv->mu);
        if (sv->step_delay_ms)
            usleep(sv->step_delay_ms * 1000u);
        const unsigned long long before = sv->tokens_out; /* read racily: a rate, not a count */
        const double t0 = now_s();
        int rc = cairn__batch_step(sv->b);
        const double dt = now_s() - t0;
        pthread_mutex_lock(&sv->mu);
        sv->step_seconds += dt;
        sv->step_tokens += sv->tokens_out - before;
        if (rc == CAIRN_ENOMEM) {
            /* every sequence waits for a KV block: the newest gives its blocks back */
            job *j = sv->active[sv->n_active - 1];
            job_fail(j, 503, "the KV cache is full (raise --kv-blocks); retry");
            cairn__batch_remove(sv->b, j->bid);
            unref(j);
            sv->n_active--;
            rc = 0;
        }
        reap(sv, rc < 0 ? rc : 0);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* ------------------------------------------------------------------ the request's fields */

/* 400 with the OpenAI error naming the field; returns -1. */
static int bad_field(cairn__http_resp *r, const char *param, const char *fmt, ...)
    CAIRN_PRINTF(3, 4);
static int bad_field(cairn__http_resp *r, const char *param, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->status = 400;
    r->body =
        openai_error("invalid_request_error", param, param ? "invalid_value" : NULL, "%s", msg);
    return -1;
}

/* A number field into *out when present and within [lo, hi] (lo_open: lo excluded). */
static int num_field(json_t *b, const char *k, double lo, int lo_open, double hi, float *out,
                     cairn__http_resp *r)
{
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v))
        return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || !isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
        return bad_field(r, k, "'%s' must be a number %s %g and <= %g", k, lo_open ? ">" : ">=", lo,
                         hi);
    *out = (float)x;
    return 0;
}

static int int_field(json_t *b, const char *k, long long lo, long long hi, long long *out,
                     cairn__http_resp *r)
{
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return bad_field(r, k, "'%s' must be an integer from %lld to %lld", k, lo, hi);
    *out = json_integer_value(v);
    return 0;
}

static int b64_decode(const char *s, uint8_t *out, size_t cap, size_t *n)
{
    size_t len = strlen(s);
    unsigned char tmp[3 * (CAIRN__SAMPLER_STATE_BYTES / 3 + 2)];
    if (len == 0 || len % 4 || len / 4 * 3 > sizeof tmp)
        return -1;
    int got = EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)len);
    if (got < 0)
        return -1;
    got -= (len >= 1 && s[len - 1] == '=') + (len >= 2 && s[len - 2] == '=');
    if ((size_t)got > cap)
        return -1;
    memcpy(out, tmp, (size_t)got);
    *n = (size_t)got;
    return 0;
}

/* The "cairn" extension: {"progress_every": N, "resume": {"tokens": [...], "state": B64}}. */
static int ext_field(server *sv, json_t *b, job *j, cairn__http_resp *r)
{
    json_t *x = json_object_get(b, "cairn");
    if (!x || json_is_null(x))
        return 0;
    if (!json_is_object(x))
        return bad_field(r, "cairn", "'cairn' must be an object");
    j->ext = 1;
    long long every = 16;
    if (int_field(x, "progress_every", 0, 1 << 20, &every, r))
        return -1;
    j->o.progress_every = (int)every;
    json_t *res = json_object_get(x, "resume");
    if (!res || json_is_null(res))
        return 0;
    json_t *toks = json_object_get(res, "tokens");
    const char *st = json_string_value(json_object_get(res, "state"));
    size_t n = json_array_size(toks), sl = 0;
    if (!json_is_object(res) || !json_is_array(toks) || !st)
        return bad_field(r, "cairn.resume",
                         "'cairn.resume' must be {\"tokens\": [...], \"state\": base64}");
    if (b64_decode(st, j->state, sizeof j->state, &sl) || sl != sizeof j->state)
        return bad_field(r, "cairn.resume.state",
                         "'cairn.resume.state' is not a sampler state (%d bytes, base64)",
                         CAIRN__SAMPLER_STATE_BYTES);
    if (n > (size_t)sv->n_ctx + 1)
        return bad_field(r, "cairn.resume.tokens", "more tokens than the context holds");
    if (n && !(j->prev = malloc(n * sizeof *j->prev)))
        return bad_field(r, NULL, "out of memory");
    const int nv = cairn__engine_model(sv->e)->n_vocab;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= nv)
            return bad_field(r, "cairn.resume.tokens",
                             "'cairn.resume.tokens'[%zu] is not a token id of this model", i);
        j->prev[i] = (int32_t)json_integer_value(t);
    }
    j->n_prev = n;
    return 0;
}

/* A message's text: a string, or an array of {"type": "text", "text"} parts (joined). */
static char *content_of(json_t *c)
{
    if (json_is_string(c))
        return strdup(json_string_value(c));
    if (!json_is_array(c))
        return NULL;
    struct cairn__sbuf sb = {0};
    size_t i;
    json_t *p;
    cairn__sb_put(&sb, "", 0);
    json_array_foreach(c, i, p)
    {
        const char *ty = json_string_value(json_object_get(p, "type"));
        const char *t = json_string_value(json_object_get(p, "text"));
        if (!ty || strcmp(ty, "text") || !t) {
            free(sb.p);
            return NULL;
        }
        cairn__sb_puts(&sb, t);
    }
    if (sb.oom) {
        free(sb.p);
        return NULL;
    }
    return sb.p;
}

/* The prompt's tokens: a completion's text (special-token text parsed, as llama.cpp's server
 * does, so a client's rendered chat format means its markers), or the messages through the chat
 * template (their contents plain text: a message cannot forge a turn). */
static int prompt_field(server *sv, json_t *b, job *j, cairn__http_resp *r)
{
    const cairn__tok *tok = cairn__engine_tok(sv->e);
    int rc;
    if (!j->chat) {
        json_t *p = json_object_get(b, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1)
            p = json_array_get(p, 0);
        if (!json_is_string(p))
            return bad_field(r, "prompt", "'prompt' is required: a string (or an array of one)");
        rc = cairn__tok_encode(tok, json_string_value(p), json_string_length(p), 1, 1, &j->ids,
                               &j->n_ids);
    } else {
        json_t *ms = json_object_get(b, "messages");
        size_t n = json_array_size(ms);
        if (!json_is_array(ms) || n == 0 || n > MAX_MESSAGES)
            return bad_field(r, "messages", "'messages' is required: an array of 1 to %d messages",
                             MAX_MESSAGES);
        cairn__chat_msg msgs[MAX_MESSAGES];
        char *texts[MAX_MESSAGES] = {0};
        int bad = -1;
        for (size_t i = 0; i < n && bad < 0; i++) {
            json_t *m = json_array_get(ms, i);
            const char *role = json_string_value(json_object_get(m, "role"));
            texts[i] = content_of(json_object_get(m, "content"));
            if (!role || (strcmp(role, "system") && strcmp(role, "user") &&
                          strcmp(role, "assistant") && strcmp(role, "developer")))
                bad = (int)i;
            else if (!texts[i] && !json_is_null(json_object_get(m, "content")))
                bad = (int)i;
            msgs[i] = (cairn__chat_msg){strcmp(role ? role : "", "developer") ? role : "system",
                                        texts[i]};
        }
        rc = bad < 0 ? cairn__chat_encode(tok, sv->chat_fmt, msgs, n, 1, 0, &j->ids, &j->n_ids) : 0;
        for (size_t i = 0; i < n; i++)
            free(texts[i]);
        if (bad >= 0)
            return bad_field(r, "messages",
                             "'messages'[%d] needs a role (system, user, assistant) and a content "
                             "(a string or text parts)",
                             bad);
    }
    if (rc)
        return bad_field(r, j->chat ? "messages" : "prompt", "cannot tokenize it: %s",
                         cairn_strerror(rc));
    if (j->n_ids == 0)
        return bad_field(r, "prompt", "the prompt is empty (no tokens)");
    if (j->n_ids > (size_t)sv->n_ctx)
        return bad_field(r, j->chat ? "messages" : "prompt",
                         "the prompt is %zu tokens; the context holds %d", j->n_ids, sv->n_ctx);
    return 0;
}

/* Every field that means something here; the others are ignored, as OpenAI clients expect. */
static int parse_request(server *sv, json_t *b, job *j, cairn__http_resp *r)
{
    cairn__gen_opts_default(&j->o);
    long long max_tokens = 256, top_k = j->o.sampling.top_k, last_n = j->o.sampling.repeat_last_n;
    long long seed = -1;
    json_t *st = json_object_get(b, "stream"), *stop = json_object_get(b, "stop");
    json_t *n = json_object_get(b, "n");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return bad_field(r, "stream", "'stream' must be true or false");
    j->stream = json_is_true(st);
    json_t *ie = json_object_get(b, "ignore_eos"); /* llama.cpp's: for benchmarks */
    if (ie && !json_is_null(ie) && !json_is_boolean(ie))
        return bad_field(r, "ignore_eos", "'ignore_eos' must be true or false");
    j->o.ignore_eos = json_is_true(ie);
    if (n && !json_is_null(n) && (!json_is_integer(n) || json_integer_value(n) != 1))
        return bad_field(r, "n", "only 'n': 1 is supported");
    if (int_field(b, "max_tokens", 1, 1 << 24, &max_tokens, r) ||
        int_field(b, "max_completion_tokens", 1, 1 << 24, &max_tokens, r) ||
        num_field(b, "temperature", 0, 0, 100, &j->o.sampling.temperature, r) ||
        num_field(b, "top_p", 0, 1, 1, &j->o.sampling.top_p, r) ||
        int_field(b, "top_k", 0, 1 << 24, &top_k, r) ||
        num_field(b, "repetition_penalty", 0, 1, 100, &j->o.sampling.repeat_penalty, r) ||
        num_field(b, "repeat_penalty", 0, 1, 100, &j->o.sampling.repeat_penalty, r) ||
        int_field(b, "repeat_last_n", -1, 1 << 24, &last_n, r) ||
        int_field(b, "seed", 0, INT64_MAX, &seed, r))
        return -1;
    j->o.max_tokens = (int)max_tokens;
    j->o.sampling.top_k = (int)top_k;
    j->o.sampling.repeat_last_n = (int)last_n;
    if (seed < 0 && getrandom(&j->o.sampling.seed, sizeof j->o.sampling.seed, 0) < 0)
        j->o.sampling.seed = (uint64_t)time(NULL);
    else if (seed >= 0)
        j->o.sampling.seed = (uint64_t)seed;
    size_t ns = json_is_array(stop) ? json_array_size(stop) : json_is_string(stop);
    if (stop && !json_is_null(stop) &&
        ((!json_is_string(stop) && !json_is_array(stop)) || ns > MAX_STOP))
        return bad_field(r, "stop", "'stop' must be a string or an array of up to %d strings",
                         MAX_STOP);
    for (size_t i = 0; i < ns; i++) {
        json_t *s = json_is_array(stop) ? json_array_get(stop, i) : stop;
        if (!json_is_string(s) || !json_string_length(s))
            return bad_field(r, "stop", "'stop' strings must be non-empty strings");
        j->stop[i] = strdup(json_string_value(s));
    }
    j->o.stop = (const char *const *)j->stop;
    j->o.n_stop = ns;
    j->o.on_token = on_token;
    j->o.on_progress = on_progress;
    j->o.user = j;
    j->o.host_sampling = 1;
    return ext_field(sv, b, j, r) || prompt_field(sv, b, j, r) ? -1 : 0;
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
    unref(j);
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
        r->body = openai_error(j->err_status == 503 ? "server_unavailable" : "server_error", NULL,
                               NULL, "%s", j->err);
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
    unref(j);
    pthread_mutex_unlock(&sv->mu);
}

static void generate(server *sv, const cairn__http_req *q, cairn__http_resp *r, int chat)
{
    json_error_t je;
    json_t *b = json_loadb(q->body, q->body_len, 0, &je);
    pthread_mutex_lock(&sv->mu);
    sv->requests[chat]++;
    pthread_mutex_unlock(&sv->mu);
    job *j = calloc(1, sizeof *j);
    int bad = 0;
    if (!j) {
        r->status = 503;
        r->body = openai_error("server_unavailable", NULL, NULL, "out of memory");
        json_decref(b);
        return;
    }
    j->sv = sv;
    j->chat = chat;
    pthread_cond_init(&j->cv, NULL);
    if (!json_is_object(b)) {
        r->status = 400;
        r->body = b ? openai_error("invalid_request_error", NULL, "invalid_json",
                                   "the body must be a JSON object")
                    : openai_error("invalid_request_error", NULL, "invalid_json",
                                   "the body is not JSON: %s (line %d, column %d)", je.text,
                                   je.line, je.column);
        bad = 1;
    } else
        bad = parse_request(sv, b, j, r) != 0;
    json_decref(b);
    pthread_mutex_lock(&sv->mu);
    if (bad) {
        sv->rejected_invalid++;
        pthread_mutex_unlock(&sv->mu);
        job_free(j);
        return;
    }
    if (sv->stopping) {
        sv->rejected_stopping++;
        pthread_mutex_unlock(&sv->mu);
        job_free(j);
        r->status = 503;
        r->retry_after_s = 1;
        r->body = openai_error("server_unavailable", NULL, NULL, "the server is stopping");
        return;
    }
    if (sv->n_active + sv->q_len >= sv->max_seqs + sv->queue_max) {
        sv->rejected_full++;
        pthread_mutex_unlock(&sv->mu);
        job_free(j);
        r->status = 429;
        r->retry_after_s = 1;
        r->body = openai_error("rate_limit_error", NULL, "queue_full",
                               "%d requests are generating and %d waiting (the most this server "
                               "takes); retry later",
                               sv->max_seqs, sv->queue_max);
        return;
    }
    snprintf(j->id, sizeof j->id, "%s-%lld", chat ? "chatcmpl" : "cmpl", ++sv->next_id);
    j->created = (long long)time(NULL);
    j->t_queued = now_s();
    j->refs = 2; /* the scheduler's and the connection's */
    sv->tokens_in += j->n_ids;
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
    sv->queue[(sv->q_head + sv->q_len++) % sv->q_cap] = j;
    pthread_cond_signal(&sv->work);
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

static const cairn__http_route routes[] = {
    {"POST", "/v1/completions", 0, 1, post_completions},
    {"POST", "/v1/chat/completions", 0, 1, post_chat},
    {"GET", "/v1/models", 0, 0, get_models},
    {"GET", "/health", 0, 0, get_health},
    {"GET", "/metrics", 0, 0, get_metrics},
};

/* ------------------------------------------------------------------ the command */

typedef struct {
    const char *model, *listen, *socket, *key_file, *name, *chat, *backend;
    const char *max_seqs, *queue, *threads, *ctx, *kv_blocks, *grace, *delay, *chunks;
} options;

#define AT(f) offsetof(options, f)
static const cairn__opt opts[] = {
    {"model", 'm', 1, 0, 0, AT(model)},
    {"listen", 0, 1, 0, 0, AT(listen)},
    {"socket", 0, 1, 0, 0, AT(socket)},
    {"api-key-file", 0, 1, 0, 0, AT(key_file)},
    {"model-name", 0, 1, 0, 0, AT(name)},
    {"chat", 0, 1, 0, 0, AT(chat)},
    {"backend", 0, 1, 0, 0, AT(backend)},
    {"max-seqs", 0, 1, 0, 0, AT(max_seqs)},
    {"queue", 0, 1, 0, 0, AT(queue)},
    {"threads", 't', 1, 0, 0, AT(threads)},
    {"ctx", 'c', 1, 0, 0, AT(ctx)},
    {"kv-blocks", 0, 1, 0, 0, AT(kv_blocks)},
    {"prompt-chunks", 0, 1, 0, 0, AT(chunks)},
    {"grace", 0, 1, 0, 0, AT(grace)},
    {"step-delay-ms", 0, 1, 0, 0, AT(delay)},
    {NULL, 0, 0, 0, 0, 0},
};
#undef AT
static const cairn__opt_cmd cmd = {"serve", usage, 0, 0, opts};

/* A number option (absent: dflt) into *out; 64 after a usage error, else 0. */
static int num_opt(const char *name, const char *v, long lo, long hi, long dflt, long *out)
{
    *out = dflt;
    if (v && cairn__cli_parse_long(v, lo, hi, out))
        return bad_usage("bad --%s '%s' (%ld to %ld)", name, v, lo, hi);
    return 0;
}

static char *default_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    return strndup(base, n);
}

int cairn__cmd_serve_model(int argc, char **argv)
{
    options o = {0};
    int oi, rc = cairn__opt_parse(argc, argv, &cmd, cairn__opt_slot, &o, &oi);
    if (rc >= 0)
        return rc;
    long max_seqs, queue, threads, ctx, kv_blocks, grace, delay, chunks;
    if (!o.model)
        return bad_usage("--model is required");
    if (o.listen && o.socket)
        return bad_usage("give one of --listen and --socket");
    if ((rc = num_opt("max-seqs", o.max_seqs, 1, 256, 8, &max_seqs)) ||
        (rc = num_opt("queue", o.queue, 0, 1 << 16, 32, &queue)) ||
        (rc = num_opt("threads", o.threads, 0, 1024, 0, &threads)) ||
        (rc = num_opt("ctx", o.ctx, 0, 1 << 24, 0, &ctx)) ||
        (rc = num_opt("kv-blocks", o.kv_blocks, 0, 1 << 24, 0, &kv_blocks)) ||
        (rc = num_opt("prompt-chunks", o.chunks, 1, 256, 1, &chunks)) ||
        (rc = num_opt("grace", o.grace, 0, 86400, 30, &grace)) ||
        (rc = num_opt("step-delay-ms", o.delay, 0, 60000, 0, &delay)))
        return rc;
    const char *backend = o.backend ? o.backend : "auto";
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto"))
        return bad_usage("unknown --backend '%s' (cpu, cuda, auto)", backend);
    int fmt = -1;
    if (o.chat && strcmp(o.chat, "auto") && cairn__chat_format_parse(o.chat, &fmt))
        return bad_usage("unknown --chat format '%s' (auto, chatml, llama3, gemma, phi3, mistral, "
                         "raw)",
                         o.chat);
    char listen[4200];
    if (o.socket)
        snprintf(listen, sizeof listen, "unix:%s", o.socket);
    else
        snprintf(listen, sizeof listen, "%s", o.listen ? o.listen : "127.0.0.1:8080");
    if (!cairn__http_is_local(listen) && !o.key_file)
        return bad_usage("--listen %s is not loopback: --api-key-file F is required", listen);

    server sv = {
        .max_seqs = (int)max_seqs, .queue_max = (int)queue, .step_delay_ms = (unsigned)delay};
    char err[1024] = "";
    cairn__engine_opts eo = {.backend = backend, .n_ctx = (int)ctx, .n_threads = (int)threads};
    if ((rc = cairn__engine_open(o.model, &eo, &sv.e, err, sizeof err)))
        return cairn__model_open_failed("serve", o.model, rc, err);
    cairn__backend *be = cairn__engine_backend(sv.e);
    sv.n_ctx = cairn__backend_n_ctx(be);
    if (sv.max_seqs > cairn__backend_n_batch(be))
        sv.max_seqs = cairn__backend_n_batch(be);
    sv.chat_fmt =
        fmt >= 0 ? fmt : cairn__chat_format_detect(cairn__model_gguf(cairn__engine_model(sv.e)));
    char *name = o.name ? strdup(o.name) : default_name(o.model);
    sv.name = name;
    const int per_seq = (sv.n_ctx + CAIRN__KV_BLOCK - 1) / CAIRN__KV_BLOCK;
    cairn__batch_opts bo = {.max_seqs = sv.max_seqs,
                            .n_blocks = kv_blocks ? (int)kv_blocks : per_seq * sv.max_seqs,
                            .prompt_chunks = (int)chunks};
    int x = CAIRN__EX_SOFTWARE, stop_fd = -1, sched = 0;
    pthread_t th;
    cairn__http *http = NULL;
    pthread_mutex_init(&sv.mu, NULL);
    pthread_cond_init(&sv.work, NULL);
    sv.q_cap = sv.queue_max + sv.max_seqs;
    sv.queue = calloc((size_t)sv.q_cap, sizeof *sv.queue);
    sv.active = calloc((size_t)sv.max_seqs, sizeof *sv.active);
    if (!name || !sv.queue || !sv.active) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "error", NULL, NULL, "out of memory");
        goto out;
    }
    if ((rc = cairn__batch_new(sv.e, &bo, &sv.b, err, sizeof err))) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "batch", NULL, NULL, "%s", err);
        x = cairn__exit_code_engine(rc);
        goto out;
    }
    if ((stop_fd = cairn__cli_stops_catch()) < 0 || pthread_create(&th, NULL, scheduler, &sv)) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "error", NULL, NULL, "%s", strerror(errno));
        goto out;
    }
    sched = 1;
    cairn__http_conf hc = {.listen = listen,
                           .token_file = o.key_file,
                           .body_max = 16u << 20,
                           .per_connection = 1,
                           .routes = routes,
                           .n_routes = sizeof routes / sizeof *routes,
                           .user = &sv};
    if ((rc = cairn__http_start(&hc, &http, err, sizeof err))) {
        cairn__log(CAIRN__LOG_ERROR, "serve", "listen", NULL, NULL, "%s", err);
        x = cairn__http_start_exit(rc);
        goto out;
    }
    printf("listening %s\n", cairn__http_address(http));
    fflush(stdout);
    cairn__log(CAIRN__LOG_NOTE, "serve", "listening", NULL, NULL,
               "model %s (%s backend, context %d, %d sequences at once, %s batch), listening on %s",
               sv.name, cairn__backend_name(be), sv.n_ctx, sv.max_seqs,
               cairn__batch_paged(sv.b) ? "paged" : "solo", cairn__http_address(http));
    for (;;) {
        struct pollfd pf = {.fd = stop_fd, .events = POLLIN};
        if (poll(&pf, 1, -1) > 0)
            break;
    }
    /* the stop: no new requests, the running ones get --grace to finish, then are cancelled */
    pthread_mutex_lock(&sv.mu);
    sv.stopping = 1;
    int busy = sv.n_active + sv.q_len;
    pthread_mutex_unlock(&sv.mu);
    cairn__log(CAIRN__LOG_NOTE, "serve", "stopping", NULL, NULL,
               "stopping: %d request(s) in flight get %ld s to finish", busy, grace);
    for (double end = now_s() + (double)grace; busy && now_s() < end;) {
        usleep(20000);
        pthread_mutex_lock(&sv.mu);
        busy = sv.n_active + sv.q_len;
        pthread_mutex_unlock(&sv.mu);
    }
    x = CAIRN__EX_OK;
out:
    if (sched) {
        pthread_mutex_lock(&sv.mu);
        sv.stopping = sv.cancel_all = sv.quit = 1;
        pthread_cond_signal(&sv.work);
        pthread_mutex_unlock(&sv.mu);
        pthread_join(th, NULL);
    }
    cairn__http_stop(http, 10.0); /* every stream has its end now: it goes out whole */
    if (stop_fd >= 0) {
        cairn__cli_stops_default();
        cairn__cli_stops_close();
    }
    if (x == CAIRN__EX_OK)
        cairn__log(CAIRN__LOG_NOTE, "serve", "stopped", NULL, NULL, "stopped");
    cairn__batch_free(sv.b);
    cairn__engine_free(sv.e);
    pthread_mutex_destroy(&sv.mu);
    pthread_cond_destroy(&sv.work);
    free(sv.queue);
    free(sv.active);
    free(name);
    return x;
}
