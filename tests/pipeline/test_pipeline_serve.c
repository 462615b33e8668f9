/* tests/pipeline/test_pipeline_serve.c - `cairn serve --model` (tools/serve_model.c) as a real
 * process on loopback, with a cairn-mkmodel model, and the default pipeline generating through
 * it with the "openai" backend (suite integration).
 *
 * What is checked: the API (health, models, metrics, completions and chat, streamed and not; a
 * completion's text is `cairn generate`'s with the same settings); bad requests (400 naming the
 * field, OpenAI's error shape, which the server's own refusals - 401, 404, 405, 413 - have
 * too); the pipeline through the server gives the in-process pipeline's
 * text; `cairn run` SIGKILLed mid-stream resumes exactly through the cairn extension, on the
 * completions and the chat endpoint (the text is an uninterrupted run's, and tokens were
 * resumed, not drawn again); the server SIGKILLed
 * mid-generation makes the step fail transiently and, after a restart on its port, finish with
 * the same text; 16 concurrent `cairn run` processes on one server each get the text of the same
 * task run alone (batch invariance end to end); a client that disconnects frees its sequence, a
 * full queue is 429 with Retry-After; SIGTERM lets the request in flight finish and exits 0, or
 * past --grace cancels it with an error event; a Unix socket with a bearer token.
 * Slowness where a test needs a stream in flight comes from the server's --step-delay-ms, and
 * every wait is for an event (a metric, a line), never a pass/fail on a time.
 *
 * Usage: PROG MKMODEL RECEIVER.py SMTP_SINK.py (meson passes them).
 */
#include <curl/curl.h>
#include <pthread.h>

#include "pipeline_common.h"

static struct {
    char *model;
    const char *endpoint; /* the openai backend's "endpoint" (NULL: its default, completions) */
} sm;

typedef struct server_proc {
    pid_t pid;
    int port;
    char addr[64], *out, *err;
    const char *sock, *key; /* a Unix socket to reach it by; a bearer token to send */
} server_proc;

/* Starts `cairn serve --model` with extra arguments (NULL-ended) on port (0: any); waits for its
 * `listening` line. */
static int srv_start(server_proc *s, const char *tag, int port, ...)
{
    const char *argv[32];
    int n = 0;
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    argv[n++] = pl.cairn, argv[n++] = "serve", argv[n++] = "--model", argv[n++] = sm.model;
    argv[n++] = "--threads", argv[n++] = "1";
    if (!s->sock)
        argv[n++] = "--listen", argv[n++] = listen;
    va_list ap;
    va_start(ap, port);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 30)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    free(s->out), free(s->err);
    s->out = tu_fmt("%s/%s.out", pl.tmp, tag);
    s->err = tu_fmt("%s/%s.err", pl.tmp, tag);
    unlink(s->out);
    s->pid = tu_spawn(argv, NULL, s->out, s->err);
    s->port = 0;
    for (int64_t end = tu_now_ms() + 60000; s->pid > 0 && tu_now_ms() < end; tu_sleep_ms(20)) {
        char *o = tu_read_file(s->out, NULL);
        const char *l = o ? strstr(o, "listening ") : NULL;
        if (l && strchr(l, '\n')) {
            sscanf(l, "listening %63s", s->addr);
            const char *c = strrchr(s->addr, ':');
            s->port = s->sock ? 1 : c ? atoi(c + 1) : 0;
            if (s->sock)
                snprintf(s->addr, sizeof s->addr, "localhost");
        }
        free(o);
        if (s->port > 0 || tu_poll_exit(s->pid, NULL))
            break;
    }
    if (s->port <= 0) {
        char *e = tu_read_file(s->err, NULL);
        diag("cairn serve did not start: %s", e ? e : "");
        free(e);
    }
    return s->port > 0 ? 0 : -1;
}

static void srv_free(server_proc *s)
{
    if (s->pid > 0)
        tu_kill_wait(s->pid);
    s->pid = 0;
    free(s->out), free(s->err);
    s->out = s->err = NULL;
}

/* ------------------------------------------------------------------ HTTP */

typedef struct http_res {
    long status;
    struct {
        char *p;
        size_t n;
    } body;
    long retry_after;
    const char *header;    /* an extra request header ("Transfer-Encoding: chunked") */
    volatile int *give_up; /* set: the client closes the connection (a plain request) */
    /* a stream's abort: after the first text event, wait for *release then cut */
    volatile int *got, *release;
} http_res;

static size_t on_data(char *p, size_t sz, size_t nm, void *u)
{
    http_res *r = u;
    size_t n = sz * nm;
    char *q = realloc(r->body.p, r->body.n + n + 1);
    if (!q)
        return 0;
    memcpy(q + r->body.n, p, n);
    r->body.p = q;
    r->body.n += n;
    q[r->body.n] = 0;
    if (r->got && strstr(r->body.p, "data: ")) {
        *r->got = 1;
        while (!*r->release)
            tu_sleep_ms(10);
        return 0; /* the client goes away mid-stream */
    }
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u)
{
    http_res *r = u;
    if (!strncasecmp(p, "Retry-After:", 12))
        r->retry_after = atol(p + 12);
    return sz * nm;
}

static int on_progress(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    return *((http_res *)u)->give_up; /* nonzero: curl aborts and closes */
}

/* method GET when body is NULL; returns the status (0: no answer) */
static long http(const server_proc *s, const char *path, const char *body, http_res *r)
{
    CURL *h = curl_easy_init();
    char *url = tu_fmt("http://%s%s", s->addr, path);
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    char *auth = s->key ? tu_fmt("Authorization: Bearer %s", s->key) : NULL;
    if (auth)
        hl = curl_slist_append(hl, auth);
    if (r->header)
        hl = curl_slist_append(hl, r->header);
    if (s->sock)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, s->sock);
    r->status = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
    if (r->give_up) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, r);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(h) == CURLE_OK || r->got)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    free(url), free(auth);
    return r->status;
}

static void res_free(http_res *r)
{
    free(r->body.p);
    memset(r, 0, sizeof *r);
}

static json_t *http_json(const server_proc *s, const char *path, const char *body, long *status)
{
    http_res r = {0};
    *status = http(s, path, body, &r);
    json_t *j = r.body.p ? json_loads(r.body.p, 0, NULL) : NULL;
    res_free(&r);
    return j;
}

/* Whether a body is OpenAI's error {"error": {"message", "type", "param", "code"}} with this
 * type and code, and not the task API's shape (which has "field" and no "param"). */
static int openai_error(const char *body, const char *type, const char *code)
{
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    int good = json_is_string(json_object_get(e, "message")) && !strcmp(pl_str(e, "type"), type) &&
               json_object_get(e, "param") && !strcmp(pl_str(e, "code"), code) &&
               !json_object_get(e, "field");
    if (!good)
        diag("not an OpenAI error (%s, %s): %s", type, code, body ? body : "(none)");
    json_decref(j);
    return good;
}

/* The text of an SSE stream (completions or chat), and whether it ended with [DONE]. */
static char *sse_text(const char *body, int *done)
{
    struct {
        char *p;
        size_t n;
    } t = {strdup(""), 0};
    *done = 0;
    for (const char *l = body; l && *l;) {
        const char *e = strstr(l, "\n\n");
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n > 6 && !strncmp(l, "data: ", 6)) {
            if (n == 12 && !strncmp(l + 6, "[DONE]", 6))
                *done = 1;
            json_t *j = json_loadb(l + 6, n - 6, 0, NULL);
            json_t *c = json_array_get(json_object_get(j, "choices"), 0);
            json_t *x = json_object_get(c, "text");
            if (!x)
                x = json_object_get(json_object_get(c, "delta"), "content");
            if (json_is_string(x)) {
                t.p = realloc(t.p, t.n + json_string_length(x) + 1);
                memcpy(t.p + t.n, json_string_value(x), json_string_length(x));
                t.n += json_string_length(x);
                t.p[t.n] = 0;
            }
            json_decref(j);
        }
        l = e ? e + 2 : NULL;
    }
    return t.p;
}

/* A metric's value from /metrics (-1: none). */
static double metric(const server_proc *s, const char *name)
{
    http_res r = {0};
    double v = -1;
    if (http(s, "/metrics", NULL, &r) == 200 && r.body.p) {
        for (const char *l = r.body.p; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
            if (!strncmp(l, name, strlen(name)) && l[strlen(name)] == ' ')
                v = atof(l + strlen(name) + 1);
    }
    res_free(&r);
    return v;
}

/* Waits until a metric reaches at_least; -1 if pid (when > 0) ends first. */
static int wait_metric(const server_proc *s, const char *name, double at_least, pid_t pid)
{
    for (int64_t end = tu_now_ms() + 120000; tu_now_ms() < end; tu_sleep_ms(20)) {
        if (metric(s, name) >= at_least)
            return 0;
        if (pid > 0 && tu_poll_exit(pid, NULL))
            return -1;
    }
    return -1;
}

/* The server's text rule: invalid UTF-8 bytes as U+FFFD (each byte that cannot begin a
 * character), so raw model output compares with what JSON can carry. */
static char *sanitize(const char *s, size_t n)
{
    char *o = malloc(3 * n + 1);
    size_t j = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80                   ? 1
                     : u[i] >= 0xC2 && u[i] < 0xE0 ? 2
                     : u[i] >= 0xE0 && u[i] < 0xF0 ? 3
                     : u[i] >= 0xF0 && u[i] < 0xF5 ? 4
                                                   : 0;
        int good = len && i + len <= n;
        for (size_t k = 1; good && k < len; k++)
            good = (u[i + k] & 0xC0) == 0x80;
        if (good && len == 3) /* overlong and surrogates */
            good = !(u[i] == 0xE0 && u[i + 1] < 0xA0) && !(u[i] == 0xED && u[i + 1] >= 0xA0);
        if (good && len == 4)
            good = !(u[i] == 0xF0 && u[i + 1] < 0x90) && !(u[i] == 0xF4 && u[i + 1] >= 0x90);
        if (good) {
            memcpy(o + j, s + i, len);
            j += len, i += len;
        } else {
            memcpy(o + j, "\xEF\xBF\xBD", 3);
            j += 3, i++;
        }
    }
    o[j] = 0;
    return o;
}

/* ------------------------------------------------------------------ the API */

#define PROMPT "Write a short product description for a ceramic mug."

static void t_api(server_proc *s)
{
    long st;
    json_t *j = http_json(s, "/health", NULL, &st);
    ok(st == 200 && !strcmp(pl_str(j, "status"), "ok"), "api: GET /health is 200 ok");
    json_decref(j);
    j = http_json(s, "/v1/models", NULL, &st);
    ok(st == 200 && !strcmp(pl_str(json_array_get(json_object_get(j, "data"), 0), "id"), "m"),
       "api: GET /v1/models lists the model by its file's name");
    json_decref(j);
    const char *req = "{\"model\": \"m\", \"prompt\": \"" PROMPT "\", \"max_tokens\": 16, "
                      "\"temperature\": 0.7, \"top_p\": 0.95, \"top_k\": 40, \"seed\": 7, "
                      "\"frequency_penalty\": 0, \"user\": \"ignored\"}";
    j = http_json(s, "/v1/completions", req, &st);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = pl_str(c, "text");
    json_t *u = json_object_get(j, "usage");
    ok(st == 200 && !strcmp(pl_str(j, "object"), "text_completion") &&
           !strcmp(pl_str(c, "finish_reason"), "length") &&
           json_integer_value(json_object_get(u, "completion_tokens")) == 16 &&
           json_integer_value(json_object_get(u, "prompt_tokens")) > 0,
       "api: POST /v1/completions: 200, 16 tokens, finish length, usage (unknown fields "
       "ignored)");
    tu_result g;
    int rc = pl_cairn(&g, "generate", "--model", sm.model, "--prompt", PROMPT, "-n", "16",
                      "--temperature", "0.7", "--top-p", "0.95", "--top-k", "40", "--seed", "7",
                      "--threads", "1", (const char *)NULL);
    char *local = rc == 0 ? sanitize(g.out, g.out_len) : strdup("?");
    ok(rc == 0 && !strcmp(local, text),
       "api: the completion is `cairn generate`'s text with the same settings");
    free(local);
    tu_result_free(&g);
    char *sreq = tu_fmt("%.*s, \"stream\": true}", (int)strlen(req) - 1, req);
    http_res r = {0};
    int done = 0;
    st = http(s, "/v1/completions", sreq, &r);
    char *streamed = r.body.p ? sse_text(r.body.p, &done) : strdup("");
    ok(st == 200 && done && !strcmp(streamed, text),
       "api: streamed (SSE), the same text in chunks, ending with data: [DONE]");
    free(streamed), free(sreq);
    res_free(&r);
    json_decref(j);
    const char *chat = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                       "{\"role\": \"user\", \"content\": \"Describe a mug.\"}], \"max_tokens\": "
                       "8, \"seed\": 3}";
    j = http_json(s, "/v1/chat/completions", chat, &st);
    c = json_array_get(json_object_get(j, "choices"), 0);
    ok(st == 200 && !strcmp(pl_str(j, "object"), "chat.completion") &&
           !strcmp(pl_str(json_object_get(c, "message"), "role"), "assistant") &&
           json_is_string(json_object_get(json_object_get(c, "message"), "content")),
       "api: POST /v1/chat/completions: 200, an assistant message");
    char *text1 = strdup(pl_str(json_object_get(c, "message"), "content"));
    json_decref(j);
    char *schat = tu_fmt("%.*s, \"stream\": true}", (int)strlen(chat) - 1, chat);
    st = http(s, "/v1/chat/completions", schat, &r);
    streamed = r.body.p ? sse_text(r.body.p, &done) : strdup("");
    ok(st == 200 && done && !strcmp(streamed, text1) && tu_contains(r.body.p, "\"role\""),
       "api: chat streamed: the role first, the same content, [DONE]");
    free(streamed), free(schat), free(text1);
    res_free(&r);
    ok(metric(s, "cairn_serve_tokens_out_total") >= 48 &&
           metric(s, "cairn_serve_requests_total{endpoint=\"chat\"}") == 2 &&
           metric(s, "cairn_serve_time_to_first_token_seconds_count") >= 4 &&
           metric(s, "cairn_serve_sequences_active") == 0,
       "api: /metrics counts requests, tokens, time to first token; nothing active now");
}

static void t_bad(server_proc *s)
{
    static const struct {
        const char *path, *body, *param;
    } cases[] = {
        {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": -1}", "temperature"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"many\"}", "max_tokens"},
        {"/v1/completions", "{\"prompt\": \"x\", \"top_p\": 0}", "top_p"},
        {"/v1/completions", "{\"prompt\": \"x\", \"top_k\": -2}", "top_k"},
        {"/v1/completions", "{\"prompt\": \"x\", \"seed\": -1}", "seed"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stop\": [\"\"]}", "stop"},
        {"/v1/completions", "{\"prompt\": \"x\", \"repetition_penalty\": 0}", "repetition_penalty"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stream\": \"yes\"}", "stream"},
        {"/v1/completions", "{\"prompt\": \"x\", \"n\": 2}", "n"},
        {"/v1/completions", "{\"max_tokens\": 4}", "prompt"},
        {"/v1/chat/completions", "{\"messages\": []}", "messages"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}",
         "messages"},
        {"/v1/completions",
         "{\"prompt\": \"x\", \"cairn\": {\"resume\": {\"tokens\": [1], \"state\": \"AAAA\"}}}",
         "cairn.resume.state"},
        {"/v1/completions", "{\"prompt\": \"x\", \"cairn\": {\"progress_every\": -1}}",
         "progress_every"},
    };
    int good = 1;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        long st;
        json_t *j = http_json(s, cases[i].path, cases[i].body, &st);
        json_t *e = json_object_get(j, "error");
        int one = st == 400 && !strcmp(pl_str(e, "param"), cases[i].param) &&
                  !strcmp(pl_str(e, "type"), "invalid_request_error") &&
                  json_is_string(json_object_get(e, "message")) && json_object_get(e, "code");
        if (!one)
            diag("%s %s: %ld %s", cases[i].path, cases[i].body, st, pl_str(e, "param"));
        good &= one;
        json_decref(j);
    }
    ok(good, "bad requests: each of %zu bad values is 400 with an OpenAI error naming the field",
       sizeof cases / sizeof *cases);
    long st;
    json_t *j = http_json(s, "/v1/completions", "{\"prompt\": ", &st);
    ok(st == 400 && !strcmp(pl_str(json_object_get(j, "error"), "code"), "invalid_json"),
       "bad requests: a body that is not JSON is 400 invalid_json");
    json_decref(j);
    /* what runner/http.c refuses before any route runs is in OpenAI's shape too */
    http_res r = {0};
    st = http(s, "/v1/completions", NULL, &r);
    ok(st == 405 && openai_error(r.body.p, "invalid_request_error", "method_not_allowed"),
       "bad requests: GET on /v1/completions is 405, an OpenAI error (%ld)", st);
    res_free(&r);
    st = http(s, "/v1/nothing", NULL, &r);
    ok(st == 404 && openai_error(r.body.p, "invalid_request_error", "unknown_url"),
       "bad requests: an unknown path is 404, an OpenAI error (%ld)", st);
    res_free(&r);
    size_t big_len = (16u << 20) + 100; /* the server's limit is 16 MiB */
    char *big = malloc(big_len + 1);
    memset(big, ' ', big_len);
    big[big_len] = 0;
    st = http(s, "/v1/completions", big, &r);
    ok(st == 413 && openai_error(r.body.p, "invalid_request_error", "request_too_large"),
       "bad requests: a body over 16 MiB is 413, an OpenAI error (%ld)", st);
    res_free(&r);
    r.header = "Transfer-Encoding: chunked"; /* no length: refused once the limit is read */
    st = http(s, "/v1/completions", big, &r);
    ok(st == 413 && openai_error(r.body.p, "invalid_request_error", "request_too_large"),
       "bad requests: and sent chunked, 413 too, an OpenAI error (%ld)", st);
    res_free(&r);
    free(big);
    ok(metric(s, "cairn_serve_rejected_total{reason=\"invalid\"}") >= 15,
       "bad requests: counted as rejected, invalid");
}

/* ------------------------------------------------------------------ the pipeline */

/* The sample pipeline generating through the server (or in process: url NULL). */
static char *config_for(const char *dir, const char *url, const char *tag)
{
    char *ob = tu_fmt("%s/outbox", dir), *hook = tu_fmt("/serve-%s/hook", tag);
    mkdir(ob, 0755);
    json_t *c = pl_config(sm.model, ob, hook);
    json_t *g = pl_section(c, "generate");
    json_object_set_new(g, "top_k", json_integer(40));
    json_object_set_new(g, "progress_every", json_integer(4));
    if (url) {
        json_object_set_new(g, "backend", json_string("openai"));
        json_object_set_new(g, "url", json_string(url));
        json_object_set_new(g, "model", json_string("m"));
        if (sm.endpoint)
            json_object_set_new(g, "endpoint", json_string(sm.endpoint));
        json_object_set_new(
            g, "retry",
            json_pack("{s:i, s:i, s:i}", "base_ms", 100, "max_ms", 300, "max_elapsed_s", 300));
    } else
        json_object_set_new(g, "threads", json_integer(1));
    char *p = pl_write_config(c, dir, "config.json");
    free(ob), free(hook);
    return p;
}

typedef struct task_run {
    char *dir, *store, *config, *input;
} task_run;

static task_run task_for(const char *tag, const char *url, int k)
{
    task_run t;
    t.dir = pl_dir("%s", tag);
    t.store = tu_fmt("%s/store", t.dir);
    t.config = config_for(t.dir, url, tag);
    t.input = tu_fmt("%s/task.json", t.dir);
    char *in = tu_fmt("{\"tenant\": \"acme\", \"product_id\": \"mug-%d\", \"title\": \"Ceramic "
                      "mug %d ml\", \"keywords\": [\"stoneware\", \"mug\"]}",
                      k, 100 + 10 * k);
    tu_write_file(t.input, in, strlen(in));
    free(in);
    return t;
}

static void task_free(task_run *t)
{
    free(t->dir), free(t->store), free(t->config), free(t->input);
}

static void argv_run(const task_run *t, const char **argv)
{
    const char *a[] = {pl.cairn,  "run",     "--store",        t->store,      "--config",
                       t->config, "--graph", "default",        "--task-from", "tenant,product_id",
                       "--input", t->input,  "--max-attempts", "100",         NULL};
    memcpy(argv, a, sizeof a);
}

static int run_task(const task_run *t, tu_result *r)
{
    const char *argv[16];
    argv_run(t, argv);
    const char *env[] = {"CAIRN_WEBHOOK_SECRET=" PL_SECRET, NULL};
    return tu_run(r, argv, env, NULL, 0, PL_CMD_MS);
}

static pid_t spawn_task(const task_run *t)
{
    const char *argv[16];
    argv_run(t, argv);
    const char *env[] = {"CAIRN_WEBHOOK_SECRET=" PL_SECRET, NULL};
    char *out = tu_fmt("%s/run.out", t->dir), *err = tu_fmt("%s/run.err", t->dir);
    pid_t pid = tu_spawn(argv, env, out, err);
    free(out), free(err);
    return pid;
}

static char *task_id(int k) { return tu_fmt("acme_mug-%d", k); }

/* The generate step's text of task k in t's store (malloc'd; "" when absent). */
static char *gen_text(const task_run *t, int k, long long *resumed)
{
    char *id = task_id(k);
    json_t *j = pl_show(t->store, id);
    char *s =
        strdup(j && !strcmp(pl_str(j, "status"), "succeeded") ? pl_out(j, "generate", "text") : "");
    if (resumed)
        *resumed = pl_out_int(j, "generate", "resumed_tokens");
    json_decref(j);
    free(id);
    return s;
}

static void t_pipeline(server_proc *s, char *url)
{
    task_run a = task_for("pipe-served", url, 1), b = task_for("pipe-local", NULL, 1);
    tu_result r;
    int rc = run_task(&a, &r);
    ok(rc == 0, "pipeline: the default pipeline generating through cairn serve exits 0 (%s)",
       pl_oneline(r.err));
    tu_result_free(&r);
    rc = run_task(&b, &r);
    tu_result_free(&r);
    char *ta = gen_text(&a, 1, NULL), *tb = gen_text(&b, 1, NULL);
    /* the in-process step keeps raw bytes; the server sends whole characters */
    char *sb = sanitize(tb, strlen(tb));
    ok(rc == 0 && ta[0] && !strcmp(ta, sb),
       "pipeline: its text is the in-process pipeline's with the same settings (%zu bytes)",
       strlen(ta));
    free(ta), free(tb), free(sb);
    task_free(&a), task_free(&b);
    (void)s;
}

/* The reference: task k run alone through the server, uninterrupted. */
static char *reference(const char *url, int k, const char *tag)
{
    task_run t = task_for(tag, url, k);
    tu_result r;
    run_task(&t, &r);
    tu_result_free(&r);
    char *s = gen_text(&t, k, NULL);
    task_free(&t);
    return s;
}

/* on the chat endpoint too: another server could not continue a turn, cairn serve resumes it */
static void t_kill_run(const char *url, server_proc *s, const char *endpoint, int k)
{
    sm.endpoint = endpoint;
    char *tag = tu_fmt("kill-run-%s", endpoint), *rtag = tu_fmt("kill-run-%s-ref", endpoint);
    task_run t = task_for(tag, url, k);
    double before = metric(s, "cairn_serve_tokens_out_total");
    pid_t pid = spawn_task(&t);
    int got = wait_metric(s, "cairn_serve_tokens_out_total", before + 14, pid) == 0;
    tu_kill_group(pid, SIGKILL);
    tu_wait(pid, 20000);
    ok(got, "kill run (%s): `cairn run` SIGKILLed mid-stream (after 14 tokens)", endpoint);
    tu_result r;
    int rc = run_task(&t, &r);
    tu_result_free(&r);
    long long resumed = 0;
    char *text = gen_text(&t, k, &resumed), *ref = reference(url, k, rtag);
    ok(rc == 0 && text[0] && !strcmp(text, ref) && resumed >= 4,
       "kill run (%s): resumed through the extension (%lld tokens kept), the text is an "
       "uninterrupted run's",
       endpoint, resumed);
    free(text), free(ref), free(tag), free(rtag);
    task_free(&t);
    sm.endpoint = NULL;
}

static void t_kill_server(const char *url, server_proc *s)
{
    task_run t = task_for("kill-srv", url, 3);
    double before = metric(s, "cairn_serve_tokens_out_total");
    pid_t pid = spawn_task(&t);
    int got = wait_metric(s, "cairn_serve_tokens_out_total", before + 10, pid) == 0;
    int port = s->port;
    tu_kill_wait(s->pid);
    s->pid = 0;
    ok(got, "kill server: the server SIGKILLed mid-generation (after 10 tokens)");
    char *err = tu_fmt("%s/run.err", t.dir);
    tu_sleep_ms(300); /* the run meets the dead server meanwhile, or right after the restart */
    ok(srv_start(s, "serve-restarted", port, "--step-delay-ms", "20", (const char *)NULL) == 0,
       "kill server: restarted on its port %d", port);
    int code = tu_wait(pid, PL_CMD_MS);
    long long resumed = 0;
    char *text = gen_text(&t, 3, &resumed), *ref = reference(url, 3, "kill-srv-ref");
    char *e = tu_read_file(err, NULL), *id = task_id(3);
    json_t *j = pl_show(t.store, id);
    long long attempt = json_integer_value(json_object_get(pl_step(j, "generate"), "invocations"));
    json_decref(j);
    free(id);
    ok(code == 0 && text[0] && !strcmp(text, ref) && attempt >= 2,
       "kill server: the step failed transiently (%lld invocations) and the same run finished with "
       "an uninterrupted run's text (%lld tokens resumed)",
       attempt, resumed);
    if (code != 0)
        diag("run: %d %s", code, pl_oneline(e));
    free(e), free(err), free(text), free(ref);
    task_free(&t);
}

#define N_CONC 16

static void t_concurrent(const char *url, server_proc *s)
{
    task_run t[N_CONC];
    pid_t pids[N_CONC];
    for (int k = 0; k < N_CONC; k++) {
        char *tag = tu_fmt("conc-%d", k);
        t[k] = task_for(tag, url, 10 + k);
        free(tag);
    }
    for (int k = 0; k < N_CONC; k++)
        pids[k] = spawn_task(&t[k]);
    int all = 1;
    for (int k = 0; k < N_CONC; k++)
        all &= tu_wait(pids[k], PL_CMD_MS) == 0;
    ok(all, "concurrent: %d `cairn run` processes on one server all exit 0", N_CONC);
    int same = 1;
    for (int k = 0; k < N_CONC; k++) {
        char *tag = tu_fmt("conc-alone-%d", k);
        char *text = gen_text(&t[k], 10 + k, NULL), *ref = reference(url, 10 + k, tag);
        if (!text[0] || strcmp(text, ref)) {
            same = 0;
            diag("task %d: batched '%s' alone '%s'", k, pl_oneline(text), pl_oneline(ref));
        }
        free(text), free(ref), free(tag);
        task_free(&t[k]);
    }
    ok(same, "concurrent: each task's text is the same task's run alone (batch invariance)");
    (void)s;
}

/* ------------------------------------------------------------------ admission */

typedef struct streamer {
    const server_proc *s;
    const char *body;
    int cut; /* go away after the first event */
    http_res r;
    volatile int got, release;
} streamer;

static void *stream_thread(void *arg)
{
    streamer *st = arg;
    if (st->cut) {
        st->r.got = &st->got;
        st->r.release = &st->release;
    }
    http(st->s, "/v1/completions", st->body, &st->r);
    st->got = 1; /* ended before any text: let the waiter go on */
    return NULL;
}

static void t_admission(void)
{
    server_proc s = {0};
    if (!ok(srv_start(&s, "serve-small", 0, "--max-seqs", "1", "--queue", "0", "--step-delay-ms",
                      "30", (const char *)NULL) == 0,
            "admission: a server of one sequence and no queue"))
        return;
    streamer a = {.s = &s,
                  .cut = 1,
                  .body = "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 2000, \"seed\": 1, "
                          "\"stream\": true, \"ignore\": 1}"};
    pthread_t th;
    pthread_create(&th, NULL, stream_thread, &a);
    while (!a.got)
        tu_sleep_ms(10);
    http_res r = {0};
    long st = http(&s, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}", &r);
    json_t *j = r.body.p ? json_loads(r.body.p, 0, NULL) : NULL;
    ok(st == 429 && r.retry_after >= 1 &&
           !strcmp(pl_str(json_object_get(j, "error"), "type"), "rate_limit_error"),
       "admission: with the one slot taken and no queue, 429 with Retry-After %ld", r.retry_after);
    json_decref(j);
    res_free(&r);
    a.release = 1; /* the streaming client goes away */
    pthread_join(th, NULL);
    int freed = 0;
    for (int64_t end = tu_now_ms() + 60000; !freed && tu_now_ms() < end; tu_sleep_ms(20))
        freed = metric(&s, "cairn_serve_cancelled_total") >= 1 &&
                metric(&s, "cairn_serve_sequences_active") == 0;
    double out = metric(&s, "cairn_serve_tokens_out_total");
    ok(freed && out < 2000,
       "admission: the client that went away freed its slot (%.0f of 2000 "
       "tokens made)",
       out);
    res_free(&a.r);
    st = http(&s, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}", &r);
    ok(st == 200, "admission: the next request gets the slot (%ld)", st);
    res_free(&r);
    /* a plain (not streamed) request whose client gives up once it runs: seen on its socket */
    volatile int give_up = 0;
    streamer c = {.s = &s, .body = "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 2000}"};
    c.r.give_up = &give_up;
    pthread_create(&th, NULL, stream_thread, &c);
    while (metric(&s, "cairn_serve_sequences_active") < 1 && !c.got)
        tu_sleep_ms(10);
    give_up = 1;
    pthread_join(th, NULL);
    res_free(&c.r);
    freed = 0;
    for (int64_t end = tu_now_ms() + 60000; !freed && tu_now_ms() < end; tu_sleep_ms(20))
        freed = metric(&s, "cairn_serve_cancelled_total") >= 2 &&
                metric(&s, "cairn_serve_sequences_active") == 0;
    st = http(&s, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2}", &r);
    ok(freed && st == 200,
       "admission: a plain request's client that gave up is cancelled too; the slot is free "
       "(%ld)",
       st);
    res_free(&r);

    /* SIGTERM: the request in flight finishes, then the server exits 0 */
    streamer b = {.s = &s,
                  .body = "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 24, \"seed\": 2, "
                          "\"stream\": true}",
                  .release = 0};
    pthread_create(&th, NULL, stream_thread, &b);
    while (metric(&s, "cairn_serve_sequences_active") < 1 && !b.got)
        tu_sleep_ms(10);
    kill(s.pid, SIGTERM);
    int code = tu_wait(s.pid, 120000);
    s.pid = 0;
    b.release = 1;
    pthread_join(th, NULL);
    int done = 0;
    char *text = b.r.body.p ? sse_text(b.r.body.p, &done) : NULL;
    ok(code == 0 && done,
       "sigterm: the stream in flight finished ([DONE]) and the server exited 0 "
       "(%d)",
       code);
    free(text);
    res_free(&b.r);
    srv_free(&s);
}

/* A Unix socket, a bearer token, and a stop whose grace is over: the stream in flight ends
 * with an error event (503, which the openai backend takes as transient), the server exits 0. */
static void t_socket_stop(void)
{
    server_proc s = {0};
    char *sock = tu_fmt("%s/serve.sock", pl.tmp), *kf = tu_fmt("%s/api-key", pl.tmp);
    tu_write_file(kf, "sk-test-123\n", 12);
    s.sock = sock;
    if (!ok(srv_start(&s, "serve-sock", 0, "--socket", sock, "--api-key-file", kf, "--grace", "0",
                      "--step-delay-ms", "30", (const char *)NULL) == 0,
            "socket: a server on a Unix socket with --api-key-file")) {
        free(sock), free(kf);
        return;
    }
    http_res r = {0};
    long st = http(&s, "/health", NULL, &r);
    char *body401 = r.body.p ? strdup(r.body.p) : NULL;
    res_free(&r);
    s.key = "sk-test-123";
    long st2 = http(&s, "/health", NULL, &r);
    res_free(&r);
    int shaped = openai_error(body401, "invalid_request_error", "invalid_api_key");
    free(body401);
    ok(st == 401 && shaped && st2 == 200,
       "socket: without the key 401 (%ld), an OpenAI error; with it 200 (%ld)", st, st2);
    streamer a = {.s = &s,
                  .body = "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 2000, \"seed\": 4, "
                          "\"stream\": true}"};
    pthread_t th;
    pthread_create(&th, NULL, stream_thread, &a);
    while (metric(&s, "cairn_serve_tokens_out_total") < 2 && !a.got)
        tu_sleep_ms(10);
    kill(s.pid, SIGTERM);
    int code = tu_wait(s.pid, 120000);
    s.pid = 0;
    pthread_join(th, NULL);
    const char *b = a.r.body.p ? a.r.body.p : "";
    ok(code == 0 && tu_contains(b, "\"code\":503") && !tu_contains(b, "[DONE]"),
       "sigterm, --grace 0: the stream in flight ends with a 503 error event, the server exits 0 "
       "(%d)",
       code);
    res_free(&a.r);
    srv_free(&s);
    free(sock), free(kf);
}

int main(int argc, char **argv)
{
    pl_setup(argc, argv, "pipeline-serve");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    sm.model = pl_model("m.gguf", (const char *)NULL);
    server_proc s = {0};
    if (srv_start(&s, "serve", 0, "--max-seqs", "8", "--queue", "16", "--step-delay-ms", "20",
                  (const char *)NULL)) {
        printf("Bail out! cairn serve --model did not start\n");
        return 1;
    }
    char *url = tu_fmt("http://127.0.0.1:%d/v1", s.port);
    t_api(&s);
    t_bad(&s);
    t_pipeline(&s, url);
    t_kill_run(url, &s, "completions", 2);
    t_kill_run(url, &s, "chat", 4);
    t_kill_server(url, &s);
    t_concurrent(url, &s);
    srv_free(&s);
    t_admission();
    t_socket_stop();
    free(url);
    free(sm.model);
    curl_global_cleanup();
    pl_teardown();
    return tap_done();
}
