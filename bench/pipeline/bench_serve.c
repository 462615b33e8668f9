/* bench/pipeline/bench_serve.c - the default pipeline generating through `cairn serve --model`
 * against generating in process, end to end, with real `cairn run` processes.
 *
 * Three numbers, each a ratio against a peer measured in the same run:
 *   1. end to end: N tasks (64) of the default pipeline run by P concurrent workers (8), each
 *      worker running its share one `cairn run` process after another, once with the generate
 *      step in process (every process loads the model, and the P processes share the cores)
 *      and once through one `cairn serve` (the model loaded once, the P sequences batched: each
 *      weight read once per step for all of them). The wall-time ratio; the server's time to
 *      first token (its /metrics).
 *   2. the server's overhead per token at concurrency 1: one streamed request's tokens per
 *      second of its wall time (prompt included, as a client sees it) against the engine's own
 *      (cairn__engine_generate, same model, prompt and threads, in this process), and against
 *      one sequence in a batch in this process (the server's own path, without the serving).
 * Targets (issue 17): overhead <= 5 %; end to end >= 3x on the CPU. A miss is printed as MISS;
 * it never fails. The model is a cairn-mkmodel random model big enough for decoding to be
 * bound by reading the weights (as a real model is): --dim, --layers, --tokens to change it.
 *
 * Usage: bench-serve [--tasks N] [--procs P] [--tokens T] [--dim D] [--layers L] [--threads K]
 *                    [--prompt-chunks C] (the server's) [--type F32|Q8_0|Q4_K|...] (every matrix's;
 *                    F32 by default)
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/llm/bench_util.h" /* now_s, parse_type */
#include "gpu/batch.h"
#include "gpu/engine.h"
#include "tests/model/mkmodel.h"
#include "testutil.h"

#include "ok_server.h"

/* ------------------------------------------------------------------ the runs */

static struct {
    const char *cairn;
    char *tmp, *model, *index;
    int tasks, procs, tokens, threads, hook_port, chunks;
} B;

static char *config(const char *tag, const char *url)
{
    char *dir = tu_fmt("%s/%s", B.tmp, tag), *ob = tu_fmt("%s/outbox", dir);
    mkdir(dir, 0755);
    mkdir(ob, 0755);
    char *hook = tu_fmt("http://127.0.0.1:%d/hook", B.hook_port);
    json_t *g =
        json_pack("{s:s, s:s, s:i, s:f, s:f, s:i, s:i}", "model", url ? "m" : B.model, "prompt",
                  "Write a short product description for {{title}}.\nFacts:\n"
                  "{{context}}\nDescription:",
                  "max_tokens", B.tokens, "temperature", 0.7, "top_p", 0.95, "top_k", 40,
                  "progress_every", 8);
    if (url) {
        json_object_set_new(g, "backend", json_string("openai"));
        json_object_set_new(g, "url", json_string(url));
    } else
        json_object_set_new(g, "threads", json_integer(1)); /* P processes share the cores */
    json_t *c =
        json_pack("{s:{s:s, s:s, s:[s,s], s:i}, s:o, s:{s:i, s:s}, s:[{s:s, s:s, s:s, s:s, s:i}]}",
                  "retrieve", "type", "bm25", "index", B.index, "query_fields", "title", "keywords",
                  "top_k", 3, "generate", g, "postprocess", "max_chars", 400, "outbox", ob,
                  "notify", "type", "webhook", "name", "shop", "url", hook, "secret_env",
                  "CAIRN_WEBHOOK_SECRET", "timeout_ms", 5000);
    char *path = tu_fmt("%s/config.json", dir);
    json_dump_file(c, path, JSON_INDENT(2));
    json_decref(c);
    free(dir), free(ob), free(hook);
    return path;
}

typedef struct worker {
    const char *store, *config;
    int first, n, failed;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (int k = w->first; k < w->first + w->n; k++) {
        char *in = tu_fmt("%s/task-%d.json", B.tmp, k);
        const char *argv[] = {
            B.cairn,   "run",     "--store",        w->store,      "--config",
            w->config, "--graph", "default",        "--task-from", "tenant,product_id",
            "--input", in,        "--max-attempts", "20",          NULL};
        const char *env[] = {"CAIRN_WEBHOOK_SECRET=whsec_YmVuY2gtc2VydmUtc2VjcmV0LTEyMzQ1Njc4",
                             NULL};
        tu_result r;
        if (tu_run(&r, argv, env, NULL, 0, 3600 * 1000) != 0) {
            if (!w->failed)
                fprintf(stderr, "bench-serve: a run failed (%d): %s\n", r.code, r.err);
            w->failed++;
        }
        tu_result_free(&r);
        free(in);
    }
    return NULL;
}

/* B.tasks tasks by B.procs workers; the wall time, or -1 when a run failed */
static double run_all(const char *tag, const char *url)
{
    char *cfg = config(tag, url), *store = tu_fmt("%s/%s/store", B.tmp, tag);
    worker *w = calloc((size_t)B.procs, sizeof *w);
    pthread_t *th = calloc((size_t)B.procs, sizeof *th);
    double t0 = now_s();
    int failed = 0;
    for (int i = 0, k = 0; i < B.procs; i++) {
        w[i] = (worker){store, cfg, k, B.tasks / B.procs + (i < B.tasks % B.procs), 0};
        k += w[i].n;
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < B.procs; i++) {
        pthread_join(th[i], NULL);
        failed += w[i].failed;
    }
    double dt = now_s() - t0;
    free(w), free(th), free(cfg), free(store);
    return failed ? -1 : dt;
}

/* ------------------------------------------------------------------ the server */

typedef struct {
    char *p;
    size_t n;
    double t_first, t_last;
} body;

static size_t on_body(char *p, size_t sz, size_t nm, void *u)
{
    body *b = u;
    size_t n = sz * nm;
    b->p = realloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    double t = now_s();
    if (!b->t_first && strstr(b->p, "\"text\":\"") &&
        strstr(b->p, "\"text\":\"\"") != strstr(b->p, "\"text\":\""))
        b->t_first = t;
    b->t_last = t;
    return n;
}

static int http(const char *url, const char *post, body *b)
{
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    if (post)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, post);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    return rc == CURLE_OK ? 0 : -1;
}

static double metric(const char *addr, const char *name)
{
    char *url = tu_fmt("http://%s/metrics", addr);
    body b = {0};
    double v = -1;
    if (http(url, NULL, &b) == 0)
        for (char *l = b.p; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
            if (!strncmp(l, name, strlen(name)) && l[strlen(name)] == ' ')
                v = atof(l + strlen(name) + 1);
    free(b.p), free(url);
    return v;
}

static pid_t serve_start(char *addr, size_t addrlen)
{
    char *out = tu_fmt("%s/serve.out", B.tmp), *seqs = tu_fmt("%d", B.procs),
         *th = tu_fmt("%d", B.threads), *ch = tu_fmt("%d", B.chunks);
    const char *argv[] = {B.cairn,           "serve",      "--model", B.model,     "--listen",
                          "127.0.0.1:0",     "--max-seqs", seqs,      "--threads", th,
                          "--prompt-chunks", ch,           NULL};
    pid_t pid = tu_spawn(argv, NULL, out, NULL);
    addr[0] = 0;
    for (int i = 0; i < 3000 && !addr[0]; i++) {
        tu_sleep_ms(20);
        char *o = tu_read_file(out, NULL);
        if (o && strstr(o, "listening ") && strchr(o, '\n'))
            sscanf(strstr(o, "listening "), "listening %63s", addr);
        free(o);
        (void)addrlen;
    }
    free(out), free(seqs), free(th), free(ch);
    return addr[0] ? pid : -1;
}

/* ------------------------------------------------------------------ the batch of one */

typedef struct {
    double t_first, t_last;
    int n;
} clock_tok;

static int on_tok(void *u, int32_t t, const char *b, size_t n)
{
    (void)t, (void)b, (void)n;
    clock_tok *c = u;
    c->t_last = now_s();
    if (c->n++ == 0)
        c->t_first = c->t_last;
    return 0;
}

/* The decode rate of one sequence in a batch (the server's own path, without the server). */
static double batch_of_one(cairn__engine *e, const cairn__gen_opts *o0)
{
    cairn__batch *b = NULL;
    char err[256];
    cairn__batch_opts bo = {.max_seqs = 1};
    int32_t *ids = NULL;
    size_t n = 0;
    const char *p = "Write a short product description.";
    if (cairn__batch_new(e, &bo, &b, err, sizeof err) ||
        cairn__tok_encode(cairn__engine_tok(e), p, strlen(p), 1, 1, &ids, &n)) {
        cairn__batch_free(b);
        return 0;
    }
    clock_tok c = {0};
    cairn__gen_opts o = *o0;
    o.on_token = on_tok;
    o.user = &c;
    int id;
    const double t0 = now_s();
    if (cairn__batch_add(b, ids, n, &o, &id) == 0)
        while (cairn__batch_step(b) > 0)
            ;
    const double dt = now_s() - t0;
    free(ids);
    cairn__batch_free(b);
    return c.n > 0 && dt > 0 ? c.n / dt : 0;
}

/* ------------------------------------------------------------------ main */

static int arg_int(int argc, char **argv, const char *name, int dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return atoi(argv[i + 1]);
    return dflt;
}

static const char *arg_str(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return dflt;
}

int main(int argc, char **argv)
{
    B.cairn = CAIRN_BIN;
    B.tasks = arg_int(argc, argv, "--tasks", 64);
    B.procs = arg_int(argc, argv, "--procs", 8);
    B.tokens = arg_int(argc, argv, "--tokens", 32);
    B.threads = arg_int(argc, argv, "--threads", (int)sysconf(_SC_NPROCESSORS_ONLN));
    B.chunks = arg_int(argc, argv, "--prompt-chunks", 1);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    B.tmp = tu_mkdtemp("bench-serve");
    /* the model: weights read per token dominate, as with a real one */
    mk_spec s;
    mk_spec_default(&s);
    s.tokenizer = 1;
    s.vocab = 2048;
    s.dim = arg_int(argc, argv, "--dim", 512);
    s.n_layers = arg_int(argc, argv, "--layers", 8);
    s.n_heads = 8;
    s.n_kv_heads = 4;
    s.ff = s.dim * 3;
    s.ctx = 1024;
    const char *type = arg_str(argc, argv, "--type", "F32");
    if (parse_type(type, &s.wtype) != 0) {
        fprintf(stderr, "bench-serve: --type %s: not a weight type (F32, F16, Q8_0, Q4_K, ...)\n",
                type);
        return 64;
    }
    unsigned char *buf = NULL;
    size_t len = 0;
    B.model = tu_fmt("%s/m.gguf", B.tmp);
    if (mk_model(&s, &buf, &len) || tu_write_file(B.model, buf, len)) {
        fprintf(stderr, "bench-serve: cannot write the model\n");
        return 1;
    }
    free(buf);
    char *corpus = tu_fmt("%s/examples/pipeline/corpus.jsonl", SOURCE_ROOT),
         *idx = tu_fmt("%s/idx", B.tmp);
    tu_result r;
    if (tu_runl(&r, 600000, B.cairn, "index", "--store", idx, "--corpus", corpus, NULL)) {
        fprintf(stderr, "bench-serve: cairn index failed: %s\n", r.err);
        return 1;
    }
    tu_result_free(&r);
    B.index = tu_fmt("%s/index", idx);
    for (int k = 0; k < B.tasks; k++) {
        char *p = tu_fmt("%s/task-%d.json", B.tmp, k);
        char *in = tu_fmt("{\"tenant\": \"acme\", \"product_id\": \"mug-%d\", \"title\": "
                          "\"Ceramic mug %d ml\", \"keywords\": [\"stoneware\", \"mug\"]}",
                          k, 100 + k);
        tu_write_file(p, in, strlen(in));
        free(p), free(in);
    }
    B.hook_port = ok_server_start();
    printf("bench-serve: model dim %d, %d layers, ff %d, vocab %d (%s, %.0f MB); %d tasks of %d "
           "tokens by %d workers; server threads %d\n",
           s.dim, s.n_layers, s.ff, s.vocab, type, (double)len / 1e6, B.tasks, B.tokens, B.procs,
           B.threads);

    /* 2. overhead per token at concurrency 1: the engine here and one streamed request to the
     * server (idle meanwhile), taken in turns so that a busy machine slows both alike; the best
     * of five of each */
    char addr[64];
    pid_t srv = serve_start(addr, sizeof addr);
    if (srv < 0) {
        fprintf(stderr, "bench-serve: cairn serve did not start\n");
        return 1;
    }
    cairn__engine *e = NULL;
    char err[512];
    cairn__engine_opts eo = {.backend = "cpu", .n_threads = B.threads};
    double tps_engine = 0, tps_serve = 0, tps_batch = 0;
    const int n1 = 64;
    char *url = tu_fmt("http://%s/v1/completions", addr);
    char *req = tu_fmt("{\"prompt\": \"Write a short product description.\", \"max_tokens\": %d, "
                       "\"seed\": 1, \"ignore_eos\": true, \"stream\": true}",
                       n1);
    int have_engine = cairn__engine_open(B.model, &eo, &e, err, sizeof err) == 0;
    for (int rep = 0; rep < 5; rep++) {
        cairn__gen_opts o;
        cairn__gen_opts_default(&o);
        o.max_tokens = n1;
        o.ignore_eos = 1;
        o.host_sampling = 1;
        o.sampling.seed = 1;
        cairn__gen_result g;
        double t0 = now_s();
        if (have_engine &&
            cairn__engine_generate(e, "Write a short product description.", 34, &o, &g) == 0) {
            const double t = (double)g.n_tokens / (now_s() - t0);
            tps_engine = t > tps_engine ? t : tps_engine;
            cairn__gen_result_free(&g);
        }
        const double tb = have_engine ? batch_of_one(e, &o) : 0;
        tps_batch = tb > tps_batch ? tb : tps_batch;
        body b = {0};
        t0 = now_s();
        if (http(url, req, &b) == 0 && strstr(b.p, "[DONE]")) {
            const double t = (double)n1 / (now_s() - t0);
            tps_serve = t > tps_serve ? t : tps_serve;
        }
        free(b.p);
    }
    cairn__engine_free(e);
    const double overhead = tps_engine > 0 ? 1 - tps_serve / tps_engine : 1,
                 overhead_b = tps_batch > 0 ? 1 - tps_serve / tps_batch : 1;
    printf("concurrency 1: engine %.1f tok/s, through cairn serve %.1f tok/s: overhead %.1f %% "
           "(target <= 5 %%: %s)\n",
           tps_engine, tps_serve, 100 * overhead, overhead <= 0.05 ? "ok" : "MISS");
    printf("concurrency 1: the batch path in process (one sequence) %.1f tok/s: the serving "
           "overhead alone %.1f %%\n",
           tps_batch, 100 * overhead_b);

    /* 1. end to end */
    char *base = tu_fmt("http://%s/v1", addr);
    const double t_serve = run_all("served", base);
    const double ttft_sum = metric(addr, "cairn_serve_time_to_first_token_seconds_sum"),
                 ttft_n = metric(addr, "cairn_serve_time_to_first_token_seconds_count"),
                 batch_tps = metric(addr, "cairn_serve_tokens_per_second"),
                 tok_in = metric(addr, "cairn_serve_tokens_in_total"),
                 tok_out = metric(addr, "cairn_serve_tokens_out_total");
    tu_kill_wait(srv);
    const double t_local = run_all("local", NULL);
    if (t_serve < 0 || t_local < 0) {
        printf("end to end: a run failed (served %.1f s, in process %.1f s)\n", t_serve, t_local);
        return 0;
    }
    const double ratio = t_local / t_serve;
    printf("end to end: %d tasks by %d workers: in process %.1f s, through cairn serve %.1f s: "
           "%.2fx (target >= 3x: %s)\n",
           B.tasks, B.procs, t_local, t_serve, ratio, ratio >= 3 ? "ok" : "MISS");
    printf("cairn serve: time to first token %.1f ms (mean of %.0f), %.1f tok/s over its batch "
           "steps; per request %.0f prompt tokens in, %.0f out\n",
           ttft_n > 0 ? 1000 * ttft_sum / ttft_n : 0, ttft_n, batch_tps,
           ttft_n > 0 ? tok_in / ttft_n : 0, ttft_n > 0 ? tok_out / ttft_n : 0);
    if (!getenv("CAIRN_KEEP_TMP"))
        tu_rm_rf(B.tmp);
    free(url), free(req), free(base), free(corpus), free(idx);
    curl_global_cleanup();
    return 0;
}
