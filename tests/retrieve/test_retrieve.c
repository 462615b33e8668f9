/* test_retrieve.c - the retrieve step: configuration errors, the query from input fields, the
 * step in a real runner and store over a BM25 index, and the HTTP retriever against a local
 * Elasticsearch look-alike (tests/retrieve/es_server.py on 127.0.0.1). */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/json.h"
#include "steps/retrieve.h"
#include "tests/tap.h"
#include "tests/testutil.h"

static const char *sv(const json_t *j) { return json_is_string(j) ? json_string_value(j) : ""; }

static cairn__retrieve_cfg *cfg(const char *json, const char *store)
{
    json_t *j = json_loads(json, 0, NULL);
    cairn__retrieve_cfg *c = NULL;
    char err[512] = "";
    if (cairn__retrieve_cfg_parse(j, store, &c, err, sizeof err))
        diag("config %s: %s", json, err);
    json_decref(j);
    return c;
}

static void config_errors(void)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"[]", "retrieve: must be an object"},
        {"{\"type\": \"solr\", \"query_fields\": [\"q\"]}", "retrieve.type"},
        {"{\"type\": 1, \"query_fields\": [\"q\"]}", "retrieve.type"},
        {"{\"index\": \"/x\"}", "retrieve.query_fields: required"},
        {"{\"query_fields\": []}", "retrieve.query_fields"},
        {"{\"query_fields\": \"title\"}", "retrieve.query_fields"},
        {"{\"query_fields\": [\"t\", \"\"]}", "retrieve.query_fields[1]"},
        {"{\"query_fields\": [\"t\"], \"top_k\": 0}", "retrieve.top_k"},
        {"{\"query_fields\": [\"t\"], \"top_k\": 1001}", "retrieve.top_k"},
        {"{\"query_fields\": [\"t\"], \"top_k\": \"5\"}", "retrieve.top_k"},
        {"{\"query_fields\": [\"t\"], \"index\": 5}", "retrieve.index"},
        {"{\"query_fields\": [\"t\"], \"url\": \"http://x\"}",
         "retrieve.url: only for \"type\": \"http\""},
        {"{\"query_fields\": [\"t\"], \"colour\": 1}", "retrieve.colour: unknown"},
        {"{\"type\": \"http\", \"query_fields\": [\"t\"]}", "retrieve.url: required"},
        {"{\"type\": \"http\", \"query_fields\": [\"t\"], \"url\": \"ftp://x\"}", "retrieve.url"},
        {"{\"type\": \"http\", \"query_fields\": [\"t\"], \"url\": "
         "\"http://elastic:pw@127.0.0.1:9/i/_search\"}",
         "retrieve.url: must not carry credentials"},
        {"{\"type\": \"http\", \"query_fields\": [\"t\"], \"url\": \"http://127.0.0.1:9/i\", "
         "\"auth_env\": \"CAIRN_TEST_UNSET_AUTH\"}",
         "retrieve.auth_env: environment variable CAIRN_TEST_UNSET_AUTH is not set"},
        {"{\"type\": \"http\", \"query_fields\": [\"t\"], \"url\": \"http://x\", \"index\": "
         "\"/i\"}",
         "retrieve.index: only for \"type\": \"bm25\""},
        {"{\"type\": \"http\", \"query_fields\": [\"t\"], \"url\": \"http://x\", \"timeout_ms\": "
         "0}",
         "retrieve.timeout_ms"},
        {"{\"type\": \"http\", \"query_fields\": [\"t\"], \"url\": \"http://x\", \"text_field\": "
         "\"\"}",
         "retrieve.text_field"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *j = json_loads(cases[i].json, JSON_DECODE_ANY, NULL);
        cairn__retrieve_cfg *c = NULL;
        char err[512] = "";
        int rc = cairn__retrieve_cfg_parse(j, "/store", &c, err, sizeof err);
        ok(rc == CAIRN_EJSON && c == NULL && strstr(err, cases[i].want),
           "config %s -> error naming '%s' (%s)", cases[i].json, cases[i].want, err);
        json_decref(j);
    }
    json_t *j = json_loads("{\"query_fields\": [\"t\"]}", 0, NULL);
    cairn__retrieve_cfg *c = NULL;
    char err[512] = "";
    int rc = cairn__retrieve_cfg_parse(j, NULL, &c, err, sizeof err);
    ok(rc == CAIRN_EJSON && strstr(err, "retrieve.index"), "no index and no store dir (%s)", err);
    json_decref(j);
    c = cfg("{\"query_fields\": [\"t\"]}", "/some/store");
    ok(c != NULL, "defaults: bm25 over <store>/index");
    cairn__retrieve_cfg_free(c);
    cairn__retrieve_cfg_free(NULL);
}

/* The task input as the runner hands it to a step: JSON -> msgpack -> unpacked object. */
typedef struct input {
    msgpack_sbuffer sb;
    msgpack_unpacked u;
} input;

static const msgpack_object *mk_input(input *in, const char *json)
{
    json_t *j = json_loads(json, 0, NULL);
    msgpack_sbuffer_init(&in->sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &in->sb, msgpack_sbuffer_write);
    cairn__json_to_msgpack(j, &pk);
    json_decref(j);
    msgpack_unpacked_init(&in->u);
    size_t off = 0;
    msgpack_unpack_next(&in->u, in->sb.data, in->sb.size, &off);
    return &in->u.data;
}

static void input_free(input *in)
{
    msgpack_unpacked_destroy(&in->u);
    msgpack_sbuffer_destroy(&in->sb);
}

static void queries(void)
{
    cairn__retrieve_cfg *c = cfg("{\"query_fields\": [\"title\", \"keywords\", \"absent\"]}", "/s");
    input in;
    char *q = NULL, err[512] = "";
    int rc = cairn__retrieve_query(
        c,
        mk_input(&in, "{\"title\": \"Mug 陶瓷杯\", \"keywords\": [\"ceramic\", null, \"350ml\"], "
                      "\"other\": 5}"),
        &q, err, sizeof err);
    ok(rc == 0 && q && !strcmp(q, "Mug 陶瓷杯 ceramic 350ml"),
       "query joins a string field and an array's strings, skips absent/nil: '%s'", q ? q : "");
    free(q);
    input_free(&in);
    rc = cairn__retrieve_query(c, mk_input(&in, "{\"title\": 42}"), &q, err, sizeof err);
    ok(rc == CAIRN_EPERMANENT && strstr(err, "'title'") && strstr(err, "integer"),
       "a number field is an error naming it (%s)", err);
    input_free(&in);
    rc = cairn__retrieve_query(c, mk_input(&in, "{\"keywords\": [\"a\", {\"b\": 1}]}"), &q, err,
                               sizeof err);
    ok(rc == CAIRN_EPERMANENT && strstr(err, "'keywords[1]'"), "a bad array element is named (%s)",
       err);
    input_free(&in);
    rc = cairn__retrieve_query(c, mk_input(&in, "{\"x\": 1}"), &q, err, sizeof err);
    ok(rc == 0 && q && !strcmp(q, ""), "no query fields present: empty query");
    cairn__bm25_hit *h = NULL;
    size_t n = 9;
    rc = cairn__retrieve_search(c, q, &h, &n, err, sizeof err);
    ok(rc == 0 && n == 0, "an empty query asks nobody (not even a missing index)");
    free(q);
    input_free(&in);
    cairn__retrieve_cfg_free(c);
}

/* ------------------------------------------------------------------ through the runner */

static cairn__retrieve_cfg *g_cfg;

static json_t *run_task(const char *store_dir, cairn__retrieve_cfg *c, const char *task,
                        const char *input_json, int *rc_out, char *task_err, size_t errlen)
{
    cairn_graph *g = cairn_graph_new("rag", 1);
    cairn_step *s = cairn_graph_add_step(g, "retrieve", cairn__retrieve_step, NULL);
    cairn_step_set_user(s, c);
    cairn_step_set_retry(s, 1, 10, 10);
    cairn_store *st = cairn_store_new();
    cairn_store_set_durability(st, CAIRN_NOSYNC);
    json_t *out = NULL;
    if (cairn_store_open(st, store_dir) != 0) {
        diag("store: %s", cairn_store_errmsg(st));
        *rc_out = -999;
    } else {
        cairn_runner *r = cairn_runner_new();
        cairn_runner_add_graph(r, g);
        cairn_runner_set_store(r, st);
        cairn_runner_set_max_attempts(r, 1);
        cairn_runner_open(r);
        *rc_out =
            cairn_runner_run(r, "rag", task, NULL, input_json, strlen(input_json), NULL, NULL, 0);
        cairn_task *t = NULL;
        if (cairn_task_load(st, task, &t) == 0) {
            snprintf(task_err, errlen, "%s", cairn_task_error(t));
            char *js = cairn_task_json(t);
            out = js ? json_loads(js, 0, NULL) : NULL;
            cairn_free(js);
            cairn_task_free(t);
        }
        cairn_runner_free(r);
    }
    cairn_store_free(st);
    cairn_graph_free(g);
    return out;
}

static json_t *step_output(json_t *task)
{
    json_t *steps = json_object_get(task, "steps");
    return json_object_get(json_array_get(steps, 0), "output");
}

static void bm25_step(const char *root)
{
    char *store = tu_fmt("%s/store", root), *index = tu_fmt("%s/index", store);
    char err[512];
    g_cfg = cfg("{\"type\": \"bm25\", \"query_fields\": [\"title\", \"keywords\"], \"top_k\": 2}",
                store);
    int rc;
    char terr[1024] = "";
    json_t *t = run_task(store, g_cfg, "t-missing", "{\"title\": \"mug\"}", &rc, terr, sizeof terr);
    ok(rc == CAIRN_EDEAD && strstr(terr, index) && strstr(terr, "cairn index"),
       "missing index: the task is dead, the error names %s and `cairn index` (%s)", index, terr);
    json_decref(t);

    cairn__bm25 *ix;
    rc = cairn__bm25_open(index, 1, &ix, err, sizeof err);
    static const char *const docs[][2] = {
        {"m1", "Red ceramic mug 350ml"},
        {"m2", "陶瓷杯 马克杯 350ml"},
        {"m3", "Steel bottle"},
        {"m4", "Ceramic plate"},
    };
    rc = rc ? rc : cairn__bm25_begin(ix);
    for (size_t i = 0; !rc && i < 4; i++)
        rc = cairn__bm25_add(ix, docs[i][0], docs[i][1], strlen(docs[i][1]), NULL, NULL);
    rc = rc ? rc : cairn__bm25_commit(ix);
    ok(rc == 0, "index built after the pipeline was configured");
    cairn__bm25_close(ix);

    t = run_task(store, g_cfg, "t-ok",
                 "{\"title\": \"Mug 陶瓷杯\", \"keywords\": [\"350ml\", \"ceramic\"]}", &rc, terr,
                 sizeof terr);
    json_t *o = step_output(t), *d = json_object_get(o, "docs");
    ok(rc == 0 && !strcmp(sv(json_object_get(o, "query")), "Mug 陶瓷杯 350ml ceramic"),
       "step output has the query (rc %d, %s)", rc, terr);
    ok(json_array_size(d) == 2, "top_k 2 documents (%zu)", json_array_size(d));
    const char *id0 = json_string_value(json_object_get(json_array_get(d, 0), "id"));
    const char *id1 = json_string_value(json_object_get(json_array_get(d, 1), "id"));
    double s0 = json_number_value(json_object_get(json_array_get(d, 0), "score"));
    double s1 = json_number_value(json_object_get(json_array_get(d, 1), "score"));
    ok(id0 && id1 &&
           ((!strcmp(id0, "m1") && !strcmp(id1, "m2")) ||
            (!strcmp(id0, "m2") && !strcmp(id1, "m1"))) &&
           s0 >= s1 && s1 > 0,
       "the two mugs, best first (%s %.3f, %s %.3f)", id0 ? id0 : "-", s0, id1 ? id1 : "-", s1);
    ok(json_is_string(json_object_get(json_array_get(d, 0), "text")), "docs carry their text");
    json_decref(t);

    t = run_task(store, g_cfg, "t-bad", "{\"title\": [\"ok\", 3]}", &rc, terr, sizeof terr);
    ok(rc == CAIRN_EDEAD && strstr(terr, "title[1]"), "a bad input field kills the task (%s)",
       terr);
    json_decref(t);
    cairn__retrieve_cfg_free(g_cfg);
    free(store), free(index);
}

/* ------------------------------------------------------------------ http */

static char *find_python(void)
{
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : "/usr/bin:/bin");
    char *save = NULL, *found = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char *p = tu_fmt("%s/python3", d);
        if (access(p, X_OK) == 0)
            found = p;
        else
            free(p);
    }
    free(copy);
    return found;
}

/* A loopback port nobody listens on: bind to port 0, note it, close. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static int http_query(int port, const char *mode, const char *extra, cairn__bm25_hit **h, size_t *n,
                      char *err, size_t errlen)
{
    char *json = tu_fmt("{\"type\": \"http\", \"url\": \"http://127.0.0.1:%d/%s/_search\", "
                        "\"query_fields\": [\"q\"]%s}",
                        port, mode, extra ? extra : "");
    cairn__retrieve_cfg *c = cfg(json, NULL);
    free(json);
    if (!c)
        return -999;
    err[0] = 0;
    int rc = cairn__retrieve_search(c, "blue mug", h, n, err, errlen);
    cairn__retrieve_cfg_free(c);
    return rc;
}

static void http(const char *root)
{
    char *py = find_python();
    const char *src = tu_env("CAIRN_SOURCE_ROOT", ".");
    char *script = tu_fmt("%s/tests/retrieve/es_server.py", src);
    char *portfile = tu_fmt("%s/port.txt", root);
    if (!py || access(script, R_OK) != 0) {
        skip("no python3 or no %s: HTTP retriever not tested", script);
        free(py), free(script), free(portfile);
        return;
    }
    const char *argv[] = {py, script, NULL};
    pid_t pid = tu_spawn(argv, NULL, portfile, NULL);
    int port = 0;
    for (int i = 0; i < 100 && !port; i++) {
        char *s = tu_read_file(portfile, NULL);
        if (s && !strncmp(s, "PORT ", 5))
            port = atoi(s + 5);
        free(s);
        if (!port)
            tu_sleep_ms(50);
    }
    ok(port > 0, "local ES look-alike listens on 127.0.0.1:%d", port);
    if (!port) {
        tu_kill_wait(pid);
        free(py), free(script), free(portfile);
        return;
    }
    cairn__bm25_hit *h = NULL;
    size_t n = 0;
    char err[1024];
    int rc =
        http_query(port, "ok", ", \"top_k\": 2, \"text_field\": \"body\"", &h, &n, err, sizeof err);
    ok(rc == 0 && n == 2, "ok: 2 hits (rc %d, %s)", rc, err);
    ok(n == 2 && !strcmp(h[0].id, "d1") && h[0].score == 3.5 &&
           !strcmp(h[0].text, "echo blue mug") && !strcmp(h[1].id, "d2") && h[1].score == 2.5,
       "hits.hits[]._id/_score/_source.body taken; the server saw size 2 and match.body");
    cairn__bm25_hits_free(h, n);
    rc = http_query(port, "many", ", \"top_k\": 2", &h, &n, err, sizeof err);
    ok(rc == 0 && n == 2, "a server returning more than size: cut to top_k (%zu)", n);
    cairn__bm25_hits_free(h, n);

    static const struct {
        const char *mode;
        int want;
        const char *msg;
    } cases[] = {
        {"500", CAIRN_ETRANSIENT, "HTTP 500"},
        {"503", CAIRN_ETRANSIENT, "HTTP 503"},
        {"429", CAIRN_ETRANSIENT, "HTTP 429"},
        {"400", CAIRN_EPERMANENT, "HTTP 400"},
        {"404", CAIRN_EPERMANENT, "HTTP 404"},
        {"garbage", CAIRN_EPERMANENT, "malformed response"},
        {"nohits", CAIRN_EPERMANENT, "hits.hits"},
        {"badhit", CAIRN_EPERMANENT, "hits.hits[1]._source.text is missing"},
        {"badscore", CAIRN_EPERMANENT, "hits.hits[0]._score is not a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        h = NULL, n = 0;
        rc = http_query(port, cases[i].mode, NULL, &h, &n, err, sizeof err);
        ok(rc == cases[i].want && n == 0 && strstr(err, cases[i].msg), "%s -> %s naming '%s' (%s)",
           cases[i].mode, cases[i].want == CAIRN_ETRANSIENT ? "transient" : "permanent",
           cases[i].msg, err);
        cairn__bm25_hits_free(h, n);
    }
    int64_t t0 = tu_now_ms();
    rc = http_query(port, "slow", ", \"timeout_ms\": 300", &h, &n, err, sizeof err);
    int64_t dt = tu_now_ms() - t0;
    ok(rc == CAIRN_ETRANSIENT && dt < 2500 && strstr(err, "imeout"),
       "a slow server times out after timeout_ms -> transient (%lld ms, %s)", (long long)dt, err);
    rc = http_query(closed_port(), "ok", NULL, &h, &n, err, sizeof err);
    ok(rc == CAIRN_ETRANSIENT && strstr(err, "127.0.0.1"), "connection refused -> transient (%s)",
       err);

    {
        char *json = tu_fmt("{\"type\": \"http\", \"url\": \"http://127.0.0.1:%d/ok/_search\", "
                            "\"query_fields\": [\"q\"]}",
                            port);
        cairn__retrieve_cfg *c = cfg(json, NULL);
        free(json);
        h = NULL, n = 0;
        rc = cairn__retrieve_search(c, "bad \xff query", &h, &n, err, sizeof err);
        ok(rc == CAIRN_EPERMANENT && strstr(err, "UTF-8"),
           "a query that is not UTF-8 -> permanent (%s)", err);
        cairn__retrieve_cfg_free(c);
    }

    /* through the runner: the step's output and a permanent error */
    char *store = tu_fmt("%s/hstore", root);
    char *json = tu_fmt("{\"type\": \"http\", \"url\": \"http://127.0.0.1:%d/ok/_search\", "
                        "\"query_fields\": [\"title\"], \"top_k\": 3}",
                        port);
    cairn__retrieve_cfg *c = cfg(json, store);
    free(json);
    char terr[1024] = "";
    json_t *t = run_task(store, c, "h-ok", "{\"title\": \"Blue mug\"}", &rc, terr, sizeof terr);
    json_t *o = step_output(t), *d = json_object_get(o, "docs");
    ok(rc == 0 && json_array_size(d) == 3 &&
           !strcmp(sv(json_object_get(json_array_get(d, 2), "id")), "d3") &&
           !strcmp(sv(json_object_get(json_array_get(d, 0), "text")), "echo Blue mug"),
       "http step output: 3 docs in the server's order (rc %d, %s)", rc, terr);
    json_decref(t);
    cairn__retrieve_cfg_free(c);
    json = tu_fmt("{\"type\": \"http\", \"url\": \"http://127.0.0.1:%d/400/_search\", "
                  "\"query_fields\": [\"title\"]}",
                  port);
    c = cfg(json, store);
    free(json);
    t = run_task(store, c, "h-400", "{\"title\": \"Blue mug\"}", &rc, terr, sizeof terr);
    ok(rc == CAIRN_EDEAD && strstr(terr, "HTTP 400"), "HTTP 400 makes the task dead (%s)", terr);
    json_decref(t);
    cairn__retrieve_cfg_free(c);
    free(store);

    tu_kill_wait(pid);
    free(py), free(script), free(portfile);
}

int main(void)
{
    /* loopback only: a proxy from the environment must not see the test's requests */
    setenv("NO_PROXY", "127.0.0.1,localhost", 1);
    setenv("no_proxy", "127.0.0.1,localhost", 1);
    char *root = tu_mkdtemp("retrieve");
    config_errors();
    queries();
    bm25_step(root);
    http(root);
    tu_rm_rf(root);
    free(root);
    return tap_done();
}
