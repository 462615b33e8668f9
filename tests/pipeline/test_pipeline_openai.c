/* tests/pipeline/test_pipeline_openai.c - the generate step's "openai" backend (steps/llm_openai.c)
 * through the built-in pipeline and the real `cairn run` (suite integration).
 *
 * Against openai_server.py, a real streaming server on loopback whose URL path says how to fail
 * (429 with Retry-After, 500, 401/404/400, a slow answer, a stream cut mid-way, a malformed
 * line, an error event), and whose "model" continues a prompt that already ends with some of its
 * tokens, so a continuation gives the same text and the test can see it was one. What is
 * counted is on the receiving side: the requests the server logged (their bodies, paths and
 * Authorization headers) and the webhook deliveries. Then the crashes: `cairn run` SIGKILLed
 * mid-stream resumes from the saved text (the server sees prompt + text so far), the server
 * SIGKILLed mid-stream and restarted on its port lets the same run finish. Last, llama.cpp's own
 * llama-server (from ../shared/peers, skipped when absent) with a cairn-mkmodel model: two
 * tasks with the same prompt and seed at temperature 0 get the same text.
 *
 * Usage: PROG MKMODEL RECEIVER.py SMTP_SINK.py OPENAI_SERVER.py (meson passes them).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "pipeline_common.h"

#define KEY "sk-cairn-test-key"
#define EXPECT " z0 z1 z2 z3 z4 z5 z6 z7 z8 z9 z10 z11 z12 z13 z14 z15 z16 z17 z18 z19"

static struct {
    const char *script;
    char *python, *log, *portfile;
    int port;
    pid_t pid;
} oa;

/* Starts the server (port 0: any; else that port, to restart it where it was). */
static int oa_start(int port)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    unlink(oa.portfile);
    const char *argv[] = {oa.python, oa.script, oa.log, ps, NULL};
    oa.pid = tu_spawn(argv, NULL, oa.portfile, NULL);
    oa.port = 0;
    for (int64_t end = tu_now_ms() + 20000; oa.pid > 0 && tu_now_ms() < end; tu_sleep_ms(20)) {
        char *s = tu_read_file(oa.portfile, NULL);
        if (s && strchr(s, '\n'))
            oa.port = atoi(s);
        free(s);
        if (oa.port > 0 || tu_poll_exit(oa.pid, NULL))
            break;
    }
    return oa.port > 0 ? 0 : -1;
}

/* The sample pipeline with generate through the server; `opts` go into the URL's path. */
static json_t *oa_config(const char *tag, const char *opts, const char *outbox)
{
    char *hook = tu_fmt("/oa-%s/hook", tag);
    json_t *c = pl_config("fake-model", outbox, hook);
    json_t *g = pl_section(c, "generate");
    char *url = tu_fmt("http://127.0.0.1:%d/%s/%s/v1", oa.port, tag, opts);
    json_object_set_new(g, "backend", json_string("openai"));
    json_object_set_new(g, "url", json_string(url));
    json_object_set_new(g, "api_key_env", json_string("CAIRN_TEST_OPENAI_KEY"));
    json_object_set_new(
        g, "retry",
        json_pack("{s:i, s:i, s:i}", "base_ms", 100, "max_ms", 400, "max_elapsed_s", 120));
    free(url), free(hook);
    return c;
}

/* The requests the server logged for a tag (records with a body). */
static json_t *oa_requests(const char *tag)
{
    json_t *all = pl_log(oa.log, "tag", tag), *out = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(all, i, r)
    {
        if (json_object_get(r, "path"))
            json_array_append(out, r);
    }
    json_decref(all);
    return out;
}

static size_t oa_sent(const char *tag)
{
    json_t *all = pl_log(oa.log, "tag", tag);
    size_t n = 0, i;
    json_t *r;
    json_array_foreach(all, i, r) n += json_object_get(r, "sent") != NULL;
    json_decref(all);
    return n;
}

static json_t *req_body(json_t *reqs, size_t i)
{
    return json_object_get(json_array_get(reqs, i), "body");
}

/* The z-tokens a completions prompt ends with (its continuation part), as text. */
static const char *tail_tokens(const char *prompt)
{
    const char *p = prompt + strlen(prompt);
    for (;;) {
        const char *q = p;
        while (q > prompt && q[-1] >= '0' && q[-1] <= '9')
            q--;
        if (q == p || q - prompt < 2 || q[-1] != 'z' || q[-2] != ' ')
            return p;
        p = q - 2;
    }
}

/* The first k tokens of EXPECT. */
static char *expect_prefix(long long k)
{
    char *s = strdup("");
    for (long long i = 0; i < k; i++) {
        char *n = tu_fmt("%s z%lld", s, i);
        free(s);
        s = n;
    }
    return s;
}

typedef struct run_env {
    char *dir, *store, *outbox, *config, *hook;
} run_env;

static run_env env_for(const char *tag, json_t *cfg)
{
    run_env e;
    e.dir = pl_dir("%s", tag);
    e.store = tu_fmt("%s/store", e.dir);
    e.outbox = pl_dir("%s/outbox", tag);
    e.hook = tu_fmt("/oa-%s/hook", tag);
    e.config = pl_write_config(cfg, e.dir, "config.json");
    return e;
}

static void env_free(run_env *e)
{
    free(e->dir), free(e->store), free(e->outbox), free(e->config), free(e->hook);
}

/* ------------------------------------------------------------------ a whole stream */

static void t_stream(void)
{
    char *ob = pl_dir("ok-outbox");
    run_env e = env_for("ok", oa_config("ok", "delay=0", ob));
    tu_result r;
    int rc = pl_run(&r, e.store, e.config, NULL, NULL);
    ok(rc == 0, "stream: run exits 0 (%d: %s)", rc, pl_oneline(r.err));
    tu_result_free(&r);
    json_t *t = pl_show(e.store, PL_TASK);
    ok(t && !strcmp(pl_str(t, "status"), "succeeded"), "stream: task succeeded");
    ok(!strcmp(pl_out(t, "generate", "text"), EXPECT),
       "stream: the text is the chunks in order: %s", pl_out(t, "generate", "text"));
    ok(!strcmp(pl_out(t, "generate", "finish_reason"), "stop") &&
           pl_out_int(t, "generate", "completion_tokens") == 20 &&
           pl_out_int(t, "generate", "resumed_tokens") == 0 &&
           pl_out_int(t, "generate", "prompt_tokens") == 11 &&
           !strcmp(pl_out(t, "generate", "backend"), "openai") &&
           !strcmp(pl_out(t, "generate", "model"), "fake-model"),
       "stream: finish stop, 20 tokens (usage), none resumed, backend openai, the model's name");
    json_t *reqs = oa_requests("ok");
    json_t *b = req_body(reqs, 0);
    const char *prompt = pl_str(b, "prompt");
    ok(json_array_size(reqs) == 1 &&
           !strcmp(pl_str(json_array_get(reqs, 0), "path"), "/ok/delay=0/v1/completions"),
       "stream: one POST to <url>/completions (%zu)", json_array_size(reqs));
    ok(!strcmp(pl_str(json_array_get(reqs, 0), "auth"), "Bearer " KEY),
       "stream: the API key from api_key_env as a Bearer token");
    ok(json_is_true(json_object_get(b, "stream")) && !strcmp(pl_str(b, "model"), "fake-model") &&
           json_integer_value(json_object_get(b, "max_tokens")) == 48 &&
           json_real_value(json_object_get(b, "temperature")) == 0.7 &&
           json_is_integer(json_object_get(b, "seed")) &&
           !strcmp(json_string_value(json_array_get(json_object_get(b, "stop"), 0)), "\n\n") &&
           !json_object_get(b, "top_k"),
       "stream: stream, model, max_tokens, temperature 0.7, seed and stop sent; no top_k");
    ok(tu_contains(prompt, "Ceramic mug 350 ml") && tu_contains(prompt, "Facts:\n- "),
       "stream: the prompt is the rendered template with the retrieved documents");
    ok(pl_hook_count(e.hook) == 1 &&
           !strcmp(pl_out(t, "postprocess", "text"), EXPECT + 1 /* trimmed */),
       "stream: postprocess and one webhook delivery follow");
    rc = pl_run(&r, e.store, e.config, NULL, NULL);
    tu_result_free(&r);
    json_t *again = oa_requests("ok");
    ok(rc == 0 && json_array_size(again) == 1 && pl_hook_count(e.hook) == 1,
       "stream: a second run asks the server nothing and sends nothing");
    json_decref(again), json_decref(reqs), json_decref(t);
    env_free(&e);
    free(ob);
}

/* ------------------------------------------------------------------ transient failures */

/* A failure the retry cures: the run succeeds after `want` requests with the whole text. Returns
 * the requests (for more checks). */
static json_t *transient(const char *tag, const char *opts, size_t want, json_t *extra)
{
    char *ob = pl_dir("%s-outbox", tag);
    json_t *cfg = oa_config(tag, opts, ob);
    if (extra)
        json_object_update(pl_section(cfg, "generate"), extra);
    json_decref(extra);
    run_env e = env_for(tag, cfg);
    tu_result r;
    int rc = pl_run(&r, e.store, e.config, NULL, NULL);
    json_t *t = pl_show(e.store, PL_TASK);
    json_t *reqs = oa_requests(tag);
    ok(rc == 0 && t && !strcmp(pl_str(t, "status"), "succeeded") &&
           !strcmp(pl_out(t, "generate", "text"), EXPECT),
       "%s: transient, retried in the run, the whole text (rc %d: %s)", tag, rc, pl_oneline(r.err));
    ok(json_array_size(reqs) == want, "%s: %zu requests (want %zu)", tag, json_array_size(reqs),
       want);
    ok(pl_hook_count(e.hook) == 1, "%s: one webhook delivery", tag);
    tu_result_free(&r);
    json_decref(t);
    env_free(&e);
    free(ob);
    return reqs;
}

static void t_transient(void)
{
    json_t *q = transient("r429", "fail=429:1", 2, NULL);
    double gap = json_real_value(json_object_get(json_array_get(q, 1), "t")) -
                 json_real_value(json_object_get(json_array_get(q, 0), "t"));
    ok(gap >= 0.95, "r429: the retry waited for Retry-After: 1 (%.2f s)", gap);
    json_decref(q);
    json_decref(transient("r500", "fail=500:2", 3, NULL));
    json_decref(transient("r503", "fail=503:1", 2, NULL));
    q = transient("slow", "slow=6", 2, json_pack("{s:i}", "request_timeout_s", 1));
    gap = json_real_value(json_object_get(json_array_get(q, 1), "t")) -
          json_real_value(json_object_get(json_array_get(q, 0), "t"));
    ok(gap < 5, "slow: request_timeout_s 1 ended the first request (%.2f s before the next)", gap);
    json_decref(q);

    /* a stream cut after 5 chunks: the retry continues from them */
    q = transient("cut", "cut=5", 2, NULL);
    json_t *b = req_body(q, 1);
    ok(!strcmp(tail_tokens(pl_str(b, "prompt")), " z0 z1 z2 z3 z4") &&
           json_integer_value(json_object_get(b, "max_tokens")) == 43 &&
           !strncmp(pl_str(b, "prompt"), pl_str(req_body(q, 0), "prompt"),
                    strlen(pl_str(req_body(q, 0), "prompt"))),
       "cut: the retry sends the prompt + the 5 tokens received, max_tokens 48 - 5 (%s)",
       tail_tokens(pl_str(b, "prompt")));
    json_decref(q);
    q = transient("errevent", "errevent=3", 2, NULL);
    ok(!strcmp(tail_tokens(pl_str(req_body(q, 1), "prompt")), " z0 z1 z2"),
       "errevent: a 5xx error event mid-stream is transient; the retry continues after 3 tokens");
    json_decref(q);
}

/* ------------------------------------------------------------------ permanent failures */

static void permanent(const char *tag, const char *opts, const char *n1, const char *n2)
{
    char *ob = pl_dir("%s-outbox", tag);
    run_env e = env_for(tag, oa_config(tag, opts, ob));
    tu_result r;
    int rc = pl_run(&r, e.store, e.config, NULL, NULL);
    json_t *t = pl_show(e.store, PL_TASK);
    json_t *reqs = oa_requests(tag);
    ok(rc == 69 && t && !strcmp(pl_str(t, "status"), "dead") && json_array_size(reqs) == 1,
       "%s: permanent: exit 69, dead after one request (rc %d, %zu requests)", tag, rc,
       json_array_size(reqs));
    ok(tu_contains(r.err, n1) && tu_contains(r.err, n2) && tu_contains(r.err, "generate"),
       "%s: the message says '%s' and '%s': %s", tag, n1, n2, pl_oneline(r.err));
    ok(pl_hook_count(e.hook) == 0 && strcmp(pl_step_status(t, "postprocess"), "done") != 0,
       "%s: nothing after generate ran", tag);
    tu_result_free(&r);
    json_decref(reqs), json_decref(t);
    env_free(&e);
    free(ob);
}

static void t_permanent(void)
{
    permanent("p401", "fail=401", "HTTP 401", "Incorrect API key provided");
    permanent("p404", "fail=404", "HTTP 404", "model 'x' not found");
    permanent("p400", "fail=400", "HTTP 400", "bad request");
    permanent("bad", "bad=3", "malformed stream", "line 9 (byte ");
}

/* ------------------------------------------------------------------ crashes */

static pid_t spawn_run(const run_env *e, const char *tag)
{
    char *out = tu_fmt("%s/%s.out", e->dir, tag), *err = tu_fmt("%s/%s.err", e->dir, tag);
    const char *argv[] = {
        pl.cairn,  "run",        "--store",        e->store,      "--config",
        e->config, "--graph",    "default",        "--task-from", "tenant,product_id",
        "--input", pl.task_json, "--max-attempts", "100",         NULL};
    pid_t pid = tu_spawn(argv, NULL, out, err);
    free(out), free(err);
    return pid;
}

static int wait_sent(const char *tag, size_t n)
{
    for (int64_t end = tu_now_ms() + 60000; tu_now_ms() < end; tu_sleep_ms(20))
        if (oa_sent(tag) >= n)
            return 0;
    return -1;
}

static void t_kill_run(void)
{
    char *ob = pl_dir("killrun-outbox");
    run_env e = env_for("killrun", oa_config("killrun", "delay=150", ob));
    pid_t pid = spawn_run(&e, "first");
    ok(wait_sent("killrun", 12) == 0, "kill run: the server streamed 12 chunks");
    tu_kill_group(pid, SIGKILL);
    tu_wait(pid, 10000);
    tu_result r;
    int rc = pl_run(&r, e.store, e.config, NULL, NULL);
    json_t *t = pl_show(e.store, PL_TASK);
    json_t *q = oa_requests("killrun");
    long long k = pl_out_int(t, "generate", "resumed_tokens");
    char *pre = expect_prefix(k);
    json_t *b = req_body(q, 1);
    ok(rc == 0 && !strcmp(pl_out(t, "generate", "text"), EXPECT),
       "kill run: the second run finishes the same text (rc %d: %s)", rc, pl_oneline(r.err));
    ok(json_array_size(q) == 2 && k >= 8 && k % 8 == 0 && k < 20 &&
           !strcmp(tail_tokens(pl_str(b, "prompt")), pre) &&
           json_integer_value(json_object_get(b, "max_tokens")) == 48 - k,
       "kill run: the server saw the continuation: prompt + the %lld saved tokens, max_tokens %lld",
       k, 48 - k);
    ok(pl_out_int(t, "generate", "completion_tokens") == 20 && pl_hook_count(e.hook) == 1,
       "kill run: 20 tokens in all, and the notification was sent once");
    tu_result_free(&r);
    free(pre);
    json_decref(q), json_decref(t);
    env_free(&e);
    free(ob);
}

static void t_kill_server(void)
{
    char *ob = pl_dir("killsrv-outbox");
    run_env e = env_for("killsrv", oa_config("killsrv", "delay=150", ob));
    pid_t pid = spawn_run(&e, "run");
    ok(wait_sent("killsrv", 10) == 0, "kill server: the server streamed 10 chunks");
    int port = oa.port;
    tu_kill_wait(oa.pid);
    tu_sleep_ms(1500); /* the run meets refused connections meanwhile */
    ok(oa_start(port) == 0, "kill server: restarted on port %d", port);
    int rc = tu_wait(pid, 120000);
    json_t *t = pl_show(e.store, PL_TASK);
    json_t *q = oa_requests("killsrv");
    json_t *last = req_body(q, json_array_size(q) - 1);
    long long k = pl_out_int(t, "generate", "resumed_tokens");
    char *pre = expect_prefix(k);
    ok(rc == 0 && t && !strcmp(pl_str(t, "status"), "succeeded") &&
           !strcmp(pl_out(t, "generate", "text"), EXPECT),
       "kill server: the same run finishes the text after the restart (rc %d)", rc);
    ok(k >= 8 && !strcmp(tail_tokens(pl_str(last, "prompt")), pre),
       "kill server: the restarted server got the continuation (%lld tokens kept)", k);
    ok(pl_hook_count(e.hook) == 1, "kill server: one webhook delivery");
    free(pre);
    json_decref(q), json_decref(t);
    env_free(&e);
    free(ob);
}

/* ------------------------------------------------------------------ the chat endpoint */

static void t_chat(void)
{
    char *ob = pl_dir("chat-outbox");
    json_t *cfg = oa_config("chat", "cut=4", ob);
    json_t *g = pl_section(cfg, "generate");
    char *kf = tu_fmt("%s/api-key", pl.tmp);
    tu_write_file(kf, "sk-from-file\n", 13);
    json_object_del(g, "api_key_env");
    json_object_set_new(g, "api_key_file", json_string(kf));
    json_object_set_new(g, "endpoint", json_string("chat"));
    json_object_set_new(g, "system", json_string("You write product copy."));
    json_object_set_new(g, "top_k", json_integer(20));
    run_env e = env_for("chat", cfg);
    tu_result r;
    int rc = pl_run(&r, e.store, e.config, NULL, NULL);
    json_t *t = pl_show(e.store, PL_TASK);
    json_t *q = oa_requests("chat");
    json_t *m0 = json_object_get(req_body(q, 0), "messages");
    ok(rc == 0 && !strcmp(pl_out(t, "generate", "text"), EXPECT) &&
           !strcmp(pl_out(t, "generate", "endpoint"), "chat"),
       "chat: the deltas assembled into the text (rc %d: %s)", rc, pl_oneline(r.err));
    ok(json_array_size(q) == 2 &&
           !strcmp(pl_str(json_array_get(q, 0), "path"), "/chat/cut=4/v1/chat/completions") &&
           !strcmp(pl_str(json_array_get(m0, 0), "role"), "system") &&
           !strcmp(pl_str(json_array_get(m0, 1), "role"), "user") &&
           tu_contains(pl_str(json_array_get(m0, 1), "content"), "Ceramic mug") &&
           json_integer_value(json_object_get(req_body(q, 0), "top_k")) == 20,
       "chat: POST <url>/chat/completions with system and user messages, top_k sent");
    ok(json_equal(m0, json_object_get(req_body(q, 1), "messages")) &&
           json_integer_value(json_object_get(req_body(q, 1), "max_tokens")) == 48 &&
           pl_out_int(t, "generate", "resumed_tokens") == 0,
       "chat: a cut stream is asked again from the start (same messages, max_tokens 48)");
    ok(!strcmp(pl_str(json_array_get(q, 0), "auth"), "Bearer sk-from-file"),
       "chat: the API key from api_key_file (its first line)");
    tu_result_free(&r);
    json_decref(q), json_decref(t);
    env_free(&e);
    free(kf), free(ob);
}

/* ------------------------------------------------------------------ configuration errors */

static void config_error(const char *what, json_t *cfg, int want, const char *needle)
{
    static int n;
    char *dir = pl_dir("cfg-%d", ++n), *store = tu_fmt("%s/store", dir);
    char *config = pl_write_config(cfg, dir, "config.json");
    tu_result r;
    int rc = pl_run(&r, store, config, NULL, NULL);
    struct stat st;
    ok(rc == want && tu_contains(r.err, needle) && stat(store, &st) != 0,
       "config (%s): exit %d (want %d), names '%s', no store: %s", what, rc, want, needle,
       pl_oneline(r.err));
    tu_result_free(&r);
    free(dir), free(store), free(config);
}

static void t_config(void)
{
    char *ob = pl_dir("cfg-outbox");
    json_t *c = oa_config("cfg", "x", ob);
    json_object_del(pl_section(c, "generate"), "url");
    config_error("no url", c, 65, "generate.url: required");
    c = oa_config("cfg", "x", ob);
    json_object_set_new(pl_section(c, "generate"), "url", json_string("http://h:1/v1?k=sk-1"));
    config_error("url with a query", c, 65, "generate.url");
    c = oa_config("cfg", "x", ob);
    json_object_set_new(pl_section(c, "generate"), "url", json_string("http://u:pw@h:1/v1"));
    config_error("url with credentials", c, 65, "must not carry credentials");
    c = oa_config("cfg", "x", ob);
    json_object_set_new(pl_section(c, "generate"), "api_key_env", json_string("CAIRN_NO_SUCH"));
    config_error("unset key variable", c, 64, "generate.api_key_env");
    c = oa_config("cfg", "x", ob);
    json_object_set_new(pl_section(c, "generate"), "endpoint", json_string("embeddings"));
    config_error("endpoint", c, 65, "generate.endpoint: must be \"completions\" or \"chat\"");
    c = oa_config("cfg", "x", ob);
    json_object_set_new(pl_section(c, "generate"), "cache_type", json_string("f16"));
    config_error("an engine setting", c, 65, "generate.cache_type: unknown field");
    c = oa_config("cfg", "x", ob);
    json_object_set_new(pl_section(c, "generate"), "backend", json_string("vllm"));
    config_error("backend", c, 65, "\"openai\"");
    free(ob);
}

/* ------------------------------------------------------------------ llama.cpp's server */

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

/* 1 once GET /health answers 200. */
static int healthy(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char buf[64] = "";
    int good = 0;
    if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
        const char *req = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if (write(s, req, strlen(req)) == (ssize_t)strlen(req) && read(s, buf, sizeof buf - 1) > 0)
            good = strncmp(buf + 8, " 200", 4) == 0;
    }
    if (s >= 0)
        close(s);
    return good;
}

static void t_llama_server(void)
{
    const char *root = getenv("CAIRN_SOURCE_ROOT");
    char *bin = getenv("CAIRN_LLAMA_SERVER")
                    ? strdup(getenv("CAIRN_LLAMA_SERVER"))
                    : tu_fmt("%s/../shared/peers/llama.cpp/llama-server", root);
    const char *probe[] = {bin, "--version", NULL};
    if (access(bin, X_OK) != 0 || pl_run_quiet(probe) != 0) {
        skip("llama-server: %s is absent or does not run", bin);
        free(bin);
        return;
    }
    char *model = pl_model("llama.gguf", (const char *)NULL);
    int port = free_port();
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    char *lg = tu_fmt("%s/llama-server.log", pl.tmp);
    const char *argv[] = {bin,  "-m", model, "--host", "127.0.0.1", "--port", ps,
                          "-t", "1",  "-np", "1",      "-c",        "1024",   NULL};
    pid_t pid = tu_spawn(argv, NULL, lg, lg);
    int up = 0;
    for (int64_t end = tu_now_ms() + 60000; !up && tu_now_ms() < end; tu_sleep_ms(100))
        up = healthy(port) || (tu_poll_exit(pid, NULL) && (pid = -1, 0));
    if (!up) {
        skip("llama-server: did not become healthy (see %s)", lg);
        if (pid > 0)
            tu_kill_wait(pid);
        free(bin), free(model), free(lg);
        return;
    }
    char *texts[2] = {NULL, NULL};
    const char *ids[2] = {"mug-350", "mug-351"};
    char *ob = pl_dir("llama-outbox");
    run_env e = env_for("llama", oa_config("llama", "x", ob));
    json_t *cfg = json_load_file(e.config, 0, NULL);
    json_t *g = pl_section(cfg, "generate");
    char *url = tu_fmt("http://127.0.0.1:%d/v1", port);
    json_object_set_new(g, "url", json_string(url));
    json_object_set_new(g, "temperature", json_real(0));
    json_object_set_new(g, "seed", json_integer(7));
    json_object_set_new(g, "max_tokens", json_integer(16));
    json_object_del(g, "stop");
    free(e.config);
    e.config = pl_write_config(cfg, e.dir, "config.json");
    for (int i = 0; i < 2; i++) {
        char *in = tu_fmt("%s/llama-%d.json", pl.tmp, i);
        char *task = tu_fmt("{\"tenant\": \"acme\", \"product_id\": \"%s\", \"title\": \"Ceramic "
                            "mug 350 ml\", \"keywords\": [\"stoneware\", \"mug\"]}",
                            ids[i]);
        tu_write_file(in, task, strlen(task));
        tu_result r;
        int rc = pl_cairn(&r, "run", "--store", e.store, "--config", e.config, "--graph", "default",
                          "--task-from", "tenant,product_id", "--input", in, (const char *)NULL);
        char *id = tu_fmt("acme_%s", ids[i]);
        json_t *t = pl_show(e.store, id);
        ok(rc == 0 && t && pl_out_int(t, "generate", "completion_tokens") > 0,
           "llama-server: task %s generated %lld tokens (rc %d: %s)", id,
           t ? pl_out_int(t, "generate", "completion_tokens") : -1, rc, pl_oneline(r.err));
        json_t *s = json_object_get(json_object_get(pl_step(t, "generate"), "output"), "text");
        texts[i] = s ? strndup(json_string_value(s), json_string_length(s)) : NULL;
        tu_result_free(&r);
        json_decref(t);
        free(in), free(task), free(id);
    }
    ok(texts[0] && texts[1] && !strcmp(texts[0], texts[1]),
       "llama-server: two tasks, same prompt and seed at temperature 0: the same text");
    tu_kill_wait(pid);
    free(texts[0]), free(texts[1]);
    env_free(&e);
    free(url), free(bin), free(model), free(lg), free(ob);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s MKMODEL RECEIVER.py SMTP_SINK.py OPENAI_SERVER.py\n", argv[0]);
        return 64;
    }
    pl_setup(argc, argv, "pipeline-openai");
    setenv("CAIRN_TEST_OPENAI_KEY", KEY, 1);
    oa.script = argv[4];
    oa.python = pl_which("python3");
    oa.log = tu_fmt("%s/openai.jsonl", pl.tmp);
    oa.portfile = tu_fmt("%s/openai.port", pl.tmp);
    if (oa_start(0) != 0) {
        printf("Bail out! openai_server.py did not start\n");
        return 1;
    }
    t_stream();
    t_transient();
    t_permanent();
    t_chat();
    t_config();
    t_kill_run();
    t_kill_server();
    t_llama_server();
    tu_kill_wait(oa.pid);
    free(oa.python), free(oa.log), free(oa.portfile);
    pl_teardown();
    return tap_done();
}
