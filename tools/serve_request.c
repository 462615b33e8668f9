/* tools/serve_request.c - an OpenAI completions or chat request into a `serve --model` job.
 *
 * Every field that means something here is checked whole before the job is queued, and a bad
 * one is 400 with OpenAI's error naming it (param), so a client learns which value to fix; the
 * fields OpenAI has and this server does not use are ignored, as OpenAI clients expect. The
 * prompt is tokenized here, on the connection's thread, so the scheduler only ever sees jobs
 * that can run.
 *
 * The "cairn" extension ({"progress_every": N, "resume": {"tokens", "state"}}) is read here
 * too: a resume's tokens must be this model's and its sampler state whole, so that the batch
 * continues exactly the generation that was interrupted (cairn__batch_add_resume).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/evp.h>

#include "common/str.h"
#include "gpu/chat.h"
#include "tools/serve_model.h"

#define MAX_MESSAGES 256

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
    r->body = cairn__serve_error("invalid_request_error", param, param ? "invalid_value" : NULL,
                                 "%s", msg);
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
static int parse_fields(server *sv, json_t *b, job *j, cairn__http_resp *r)
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
    j->o.host_sampling = 1;
    return ext_field(sv, b, j, r) || prompt_field(sv, b, j, r) ? -1 : 0;
}

int cairn__serve_parse(server *sv, const char *body, size_t len, job *j, cairn__http_resp *r)
{
    json_error_t je;
    json_t *b = json_loadb(body, len, 0, &je);
    int rc = -1;
    if (!json_is_object(b)) {
        r->status = 400;
        r->body = b ? cairn__serve_error("invalid_request_error", NULL, "invalid_json",
                                         "the body must be a JSON object")
                    : cairn__serve_error("invalid_request_error", NULL, "invalid_json",
                                         "the body is not JSON: %s (line %d, column %d)", je.text,
                                         je.line, je.column);
    } else
        rc = parse_fields(sv, b, j, r);
    json_decref(b);
    return rc;
}
