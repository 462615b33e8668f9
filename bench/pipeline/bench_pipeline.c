/* bench/pipeline/bench_pipeline.c - what the pipeline costs beyond its steps' own work.
 *
 * Runs N tasks through the built-in graph's steps (retrieve over a BM25 index, generate on a
 * tiny random model, postprocess with an outbox, a webhook to an HTTP server on 127.0.0.1
 * inside this process) with the real runner and store, and times each step function from the
 * inside. The overhead of cairn per task is the task's wall time minus the time spent in the
 * step functions: admission, leases, step commits with their flushes, the intent record and
 * the final commit. Printed for sync and nosync stores; --json for scripts. Not a test: it
 * never fails on a time.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "gpu/gguf.h"
#include "steps/bm25.h"
#include "steps/llm.h"
#include "steps/notify.h"
#include "steps/postprocess.h"
#include "steps/retrieve.h"
#include "tests/model/mkmodel.h"

#include "ok_server.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ timed steps */

enum { S_RETRIEVE, S_GENERATE, S_POST, S_NOTIFY, S_N };
static const char *const step_names[S_N] = {"retrieve", "generate", "postprocess", "notify"};
static double step_time[S_N];

typedef struct timed {
    int which;
    cairn_step_fn fn;
    void *cfg;
} timed;

static cairn_step_result timed_step(cairn_ctx *ctx, void *user)
{
    timed *t = user;
    double t0 = now_s();
    cairn_step_result r = t->fn(ctx, t->cfg);
    step_time[t->which] += now_s() - t0;
    return r;
}

/* ------------------------------------------------------------------ the run */

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench-pipeline: %s: %s\n", what, err);
    exit(1);
}

typedef struct result {
    double task_ms, steps_ms[S_N], overhead_ms;
} result;

static result run(const char *dir, cairn_durability d, int n_tasks, timed *steps)
{
    char store_dir[512];
    snprintf(store_dir, sizeof store_dir, "%s/store-%s", dir, d == CAIRN_SYNC ? "sync" : "nosync");
    cairn_graph *g = cairn_graph_new("bench", 1);
    cairn_step *s = cairn_graph_add_step(g, "retrieve", timed_step, NULL);
    cairn_step_set_user(s, &steps[S_RETRIEVE]);
    s = cairn_graph_add_step(g, "generate", timed_step, "retrieve");
    cairn_step_set_user(s, &steps[S_GENERATE]);
    cairn_step_set_expensive(s, 1);
    s = cairn_graph_add_step(g, "postprocess", timed_step, "generate");
    cairn_step_set_user(s, &steps[S_POST]);
    s = cairn_graph_add_step(g, "notify.shop", timed_step, "postprocess");
    cairn_step_set_user(s, &steps[S_NOTIFY]);
    cairn_step_set_delivery(s, CAIRN_EFFECT);
    cairn_store *st = cairn_store_new();
    cairn_store_set_durability(st, d);
    if (cairn_store_open(st, store_dir))
        die("store", cairn_store_errmsg(st));
    cairn_runner *r = cairn_runner_new();
    cairn_runner_set_store(r, st);
    cairn_runner_add_graph(r, g);
    cairn_runner_open(r);
    memset(step_time, 0, sizeof step_time);
    double t0 = now_s();
    for (int i = 0; i < n_tasks; i++) {
        char id[64], in[256];
        snprintf(id, sizeof id, "t%d", i);
        snprintf(in, sizeof in, "{\"title\": \"ceramic mug %d\", \"keywords\": [\"stoneware\"]}",
                 i);
        if (cairn_runner_run(r, "bench", id, NULL, in, strlen(in), NULL, NULL, 0))
            die("run", cairn_runner_errmsg(r));
    }
    double total = now_s() - t0;
    result res = {.task_ms = total * 1e3 / n_tasks};
    double in_steps = 0;
    for (int k = 0; k < S_N; k++) {
        res.steps_ms[k] = step_time[k] * 1e3 / n_tasks;
        in_steps += step_time[k];
    }
    res.overhead_ms = (total - in_steps) * 1e3 / n_tasks;
    cairn_runner_free(r);
    cairn_store_free(st);
    cairn_graph_free(g);
    return res;
}

int main(int argc, char **argv)
{
    int n_tasks = 200, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--tasks") && i + 1 < argc)
            n_tasks = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench-pipeline [--tasks N] [--json]\n");
            return 64;
        }
    }
    char dir[] = "/tmp/cairn-bench-pipeline-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", "failed");
    /* a tiny model, an index, a server */
    mk_spec spec;
    mk_spec_default(&spec);
    spec.tokenizer = 1;
    unsigned char *buf;
    size_t len;
    char model[600], index[600], err[1024];
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    if (mk_model(&spec, &buf, &len))
        die("model", "cannot build");
    FILE *f = fopen(model, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f))
        die("model", "cannot write");
    free(buf);
    snprintf(index, sizeof index, "%s/index", dir);
    cairn__bm25 *ix;
    if (cairn__bm25_open(index, 1, &ix, err, sizeof err) || cairn__bm25_begin(ix))
        die("index", err);
    for (int i = 0; i < 1000; i++) {
        char id[32], text[200];
        snprintf(id, sizeof id, "doc%d", i);
        snprintf(text, sizeof text, "ceramic stoneware mug number %d holds %d ml", i, 200 + i);
        if (cairn__bm25_add(ix, id, text, strlen(text), NULL, NULL))
            die("index add", cairn__bm25_errmsg(ix));
    }
    if (cairn__bm25_commit(ix))
        die("index commit", cairn__bm25_errmsg(ix));
    cairn__bm25_close(ix);
    int port = ok_server_start();
    if (port < 0)
        die("server", "cannot listen on 127.0.0.1");
    setenv("CAIRN_BENCH_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
    char cfgtext[2048];
    snprintf(cfgtext, sizeof cfgtext,
             "{\"retrieve\": {\"type\": \"bm25\", \"index\": \"%s\", \"query_fields\": [\"title\", "
             "\"keywords\"], \"top_k\": 3},"
             " \"generate\": {\"model\": \"%s\", \"prompt\": \"Describe {{title}}: {{context}}\","
             " \"max_tokens\": 8},"
             " \"postprocess\": {\"max_chars\": 200, \"outbox\": \"%s\"},"
             " \"notify\": {\"type\": \"webhook\", \"name\": \"shop\", \"url\": "
             "\"http://127.0.0.1:%d/hook\", \"secret_env\": \"CAIRN_BENCH_SECRET\"}}",
             index, model, dir, port);
    json_t *cfg = json_loads(cfgtext, 0, NULL);
    cairn__retrieve_cfg *rc;
    cairn__llm_cfg *lc;
    cairn__post_cfg *pc;
    cairn__notify_target *nt;
    if (cairn__retrieve_cfg_parse(json_object_get(cfg, "retrieve"), dir, &rc, err, sizeof err) ||
        cairn__llm_cfg_parse(json_object_get(cfg, "generate"), NULL, &lc, err, sizeof err) ||
        cairn__post_cfg_parse(json_object_get(cfg, "postprocess"), NULL, &pc, err, sizeof err) ||
        cairn__notify_target_parse(json_object_get(cfg, "notify"), "notify", &nt, err, sizeof err))
        die("config", err);
    timed steps[S_N] = {{S_RETRIEVE, cairn__retrieve_step, rc},
                        {S_GENERATE, cairn__llm_step, lc},
                        {S_POST, cairn__postprocess_step, pc},
                        {S_NOTIFY, cairn__notify_step, nt}};
    result sync = run(dir, CAIRN_SYNC, n_tasks, steps);
    result nosync = run(dir, CAIRN_NOSYNC, n_tasks, steps);
    if (json) {
        json_t *o = json_object();
        const result *rs[2] = {&sync, &nosync};
        const char *names[2] = {"sync", "nosync"};
        for (int i = 0; i < 2; i++) {
            json_t *x = json_object();
            json_object_set_new(x, "task_ms", json_real(rs[i]->task_ms));
            json_object_set_new(x, "overhead_ms", json_real(rs[i]->overhead_ms));
            for (int k = 0; k < S_N; k++)
                json_object_set_new(x, step_names[k], json_real(rs[i]->steps_ms[k]));
            json_object_set_new(o, names[i], x);
        }
        json_object_set_new(o, "tasks", json_integer(n_tasks));
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        printf("pipeline per task, %d tasks (ms; steps timed from inside)\n", n_tasks);
        printf("%-8s %9s %9s %9s %9s %9s %12s %9s\n", "store", "task", "retrieve", "generate",
               "postproc", "notify", "cairn (all)", "w/o gen");
        const result *rs[2] = {&sync, &nosync};
        for (int i = 0; i < 2; i++)
            printf("%-8s %9.3f %9.3f %9.3f %9.3f %9.3f %12.3f %9.3f\n", i ? "nosync" : "sync",
                   rs[i]->task_ms, rs[i]->steps_ms[0], rs[i]->steps_ms[1], rs[i]->steps_ms[2],
                   rs[i]->steps_ms[3], rs[i]->overhead_ms, rs[i]->task_ms - rs[i]->steps_ms[1]);
        printf("cairn (all) = task wall time - time inside the four step functions: admission\n"
               "and lease, one commit per step plus the effect's intent (sync: each commit one\n"
               "fdatasync; generate's, the intent's and the final one also flush the meta page).\n"
               "w/o gen = the whole task with the model step excluded.\n");
    }
    json_decref(cfg);
    cairn__retrieve_cfg_free(rc);
    cairn__llm_cfg_free(lc);
    cairn__post_cfg_free(pc);
    cairn__notify_target_free(nt);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench-pipeline: could not remove %s\n", dir);
    return 0;
}
