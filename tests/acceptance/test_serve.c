/* test_serve.c - `serve --tasks` end to end: a real server process on 127.0.0.1 (and on a Unix
 * socket), a real store, libcurl as the client, the ledger's effects counted in its file.
 * Every status the API promises: 202 + Location, 200 with the result, 422 naming both hashes,
 * 400 (no key, bad key, bad JSON with line and column), 413, 404, 405, 401, the list filter.
 */
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve_common.h"

static char *D;

/* A POST whose body goes chunked (no Content-Length): the limit is then met while reading. */
static long post_chunked(const srv *s, const char *key, const char *body, size_t len)
{
    CURL *c = curl_easy_init();
    char url[256], h[200];
    snprintf(url, sizeof url, "http://%s/v1/tasks", s->addr);
    snprintf(h, sizeof h, "Idempotency-Key: %s", key);
    struct curl_slist *hs = curl_slist_append(NULL, h);
    hs = curl_slist_append(hs, "Transfer-Encoding: chunked");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    resp r = {0};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    long status = 0;
    curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    resp_free(&r);
    return status;
}

static void api(void)
{
    char *dir = tu_fmt("%s/api", D), *store = tu_fmt("%s/store", dir);
    mkdir(dir, 0755);
    srv s;
    if (srv_start(&s, dir, store, 2, NULL)) {
        ok(0, "the server starts");
        return;
    }
    char *body = ledger_body(dir, "hello", 0, NULL);
    resp r;
    post(&r, &s, "order-1", body);
    ok(r.status == 202, "a new key is 202 (got %ld: %s)", r.status, r.body);
    ok(!strcmp(r.location, "/v1/tasks/order-1"), "with Location /v1/tasks/order-1 (got '%s')",
       r.location);
    ok(!strcmp(jstr_at(r.json, "task"), "order-1"), "the task ID is the key");
    char hash[80];
    snprintf(hash, sizeof hash, "%s", jstr_at(r.json, "payload_hash"));
    resp_free(&r);

    char got[32];
    ok(wait_status(&s, "order-1", "succeeded", got, sizeof got),
       "GET /v1/tasks/order-1 reaches succeeded (last: %s)", got);
    http(&r, &s, "GET", "/v1/tasks/order-1", NULL, NULL, NULL, 0, 10000);
    ok(json_array_size(json_object_get(r.json, "steps")) == 3 &&
           !strcmp(jstr_at(r.json, "audit"), "/v1/tasks/order-1/audit"),
       "the task's document has its steps and audit link");
    char line[200];
    snprintf(line, sizeof line, "%s",
             jstr_at(json_object_get(r.json, "result"), "line")); /* the append's output */
    ok(tu_contains(line, "order-1 "), "and its result (the ledger line '%.40s')", line);
    resp_free(&r);

    post(&r, &s, "order-1", body);
    ok(r.status == 200 && !strcmp(jstr_at(r.json, "status"), "succeeded"),
       "the same key and payload again is 200, succeeded (got %ld)", r.status);
    ok(!strcmp(jstr_at(json_object_get(r.json, "result"), "line"), line),
       "with the same result, not a new one");
    resp_free(&r);

    char *other = ledger_body(dir, "changed", 0, NULL);
    post(&r, &s, "order-1", other);
    ok(r.status == 422 && !strcmp(err_of(&r, "type"), "idempotency_key_reused"),
       "the same key with another payload is 422 (got %ld)", r.status);
    ok(tu_contains(err_of(&r, "message"), hash) && strlen(err_of(&r, "message")) > 2 * 64,
       "naming both payload hashes: %s", err_of(&r, "message"));
    resp_free(&r);
    char *ledger = tu_fmt("%s/ledger", dir);
    ok(tu_count_lines(ledger, NULL) == 1, "one effect at the receiver");
    free(ledger);

    post(&r, &s, NULL, body);
    ok(r.status == 400 && !strcmp(err_of(&r, "field"), "Idempotency-Key"),
       "no Idempotency-Key is 400 naming the header (got %ld)", r.status);
    resp_free(&r);
    post(&r, &s, "bad key!", body);
    ok(r.status == 400 && tu_contains(err_of(&r, "message"), "allowed are"),
       "a key that is no task ID is 400 naming the rule: %s", err_of(&r, "message"));
    resp_free(&r);
    post(&r, &s, "order-2", "{\"text\": \"x\",\n  \"work_ms\": }");
    ok(r.status == 400 && !strcmp(err_of(&r, "type"), "invalid_json") &&
           tu_contains(err_of(&r, "message"), "body:2:"),
       "bad JSON is 400 naming line and column: %s", err_of(&r, "message"));
    resp_free(&r);
    post(&r, &s, "order-2", "[1, 2]");
    ok(r.status == 400, "a body that is not an object is 400 (got %ld)", r.status);
    resp_free(&r);

    size_t big_len = (16u << 20) + 100;
    char *big = malloc(big_len);
    memset(big, ' ', big_len);
    big[0] = '{', big[big_len - 1] = '}';
    http(&r, &s, "POST", "/v1/tasks", "order-3", NULL, big, big_len, 30000);
    ok(r.status == 413, "a body over 16 MiB is 413 (got %ld)", r.status);
    resp_free(&r);
    long st = post_chunked(&s, "order-3", big, big_len);
    ok(st == 413, "and sent chunked, without a length, 413 too (got %ld)", st);
    st = post_chunked(&s, "order-4", body, strlen(body));
    ok(st == 202, "a chunked body within the limit is admitted (got %ld)", st);
    char got4[32];
    ok(wait_status(&s, "order-4", "succeeded", got4, sizeof got4), "and succeeds (%s)", got4);
    free(big);

    http(&r, &s, "GET", "/v2/nothing", NULL, NULL, NULL, 0, 10000);
    ok(r.status == 404 && !strcmp(err_of(&r, "type"), "not_found"), "an unknown route is 404");
    resp_free(&r);
    http(&r, &s, "GET", "/v1/tasks/no-such-task", NULL, NULL, NULL, 0, 10000);
    ok(r.status == 404, "an unknown task is 404 (got %ld)", r.status);
    resp_free(&r);
    http(&r, &s, "DELETE", "/v1/tasks", NULL, NULL, NULL, 0, 10000);
    ok(r.status == 405, "a wrong method is 405 (got %ld)", r.status);
    resp_free(&r);

    char *bad = ledger_body(dir, "doomed", 0, "permanent");
    post(&r, &s, "order-dead", bad);
    ok(r.status == 202, "a task that will fail is accepted (got %ld)", r.status);
    resp_free(&r);
    ok(wait_status(&s, "order-dead", "dead", got, sizeof got), "and ends dead (last: %s)", got);
    http(&r, &s, "GET", "/v1/tasks?status=dead", NULL, NULL, NULL, 0, 10000);
    json_t *ts = json_object_get(r.json, "tasks");
    ok(json_array_size(ts) == 1 && !strcmp(jstr_at(json_array_get(ts, 0), "task"), "order-dead"),
       "GET /v1/tasks?status=dead lists it alone (%s)", r.body);
    resp_free(&r);
    http(&r, &s, "GET", "/v1/tasks?status=succeeded", NULL, NULL, NULL, 0, 10000);
    ts = json_object_get(r.json, "tasks");
    ok(json_array_size(ts) == 2 && !tu_contains(r.body, "order-dead") &&
           tu_contains(r.body, "\"order-1\"") && tu_contains(r.body, "\"order-4\""),
       "?status=succeeded lists order-1 and order-4 alone (%s)", r.body);
    resp_free(&r);
    http(&r, &s, "GET", "/v1/tasks?status=finished", NULL, NULL, NULL, 0, 10000);
    ok(r.status == 400 && !strcmp(err_of(&r, "field"), "status"), "an unknown status is 400");
    resp_free(&r);
    http(&r, &s, "GET", "/v1/tasks/order-1/audit", NULL, NULL, NULL, 0, 10000);
    ok(r.status == 200 && json_array_size(json_object_get(r.json, "audit")) >= 3,
       "the audit link gives the trail");
    resp_free(&r);

    /* the metrics: the store's figures (stats --prometheus) and the server's counters */
    http(&r, &s, "GET", "/metrics", NULL, NULL, NULL, 0, 10000);
    size_t bl = r.body ? strlen(r.body) : 0;
    ok(r.status == 200 && bl > 6 && !strcmp(r.body + bl - 6, "# EOF\n"),
       "GET /metrics is 200, OpenMetrics text ending '# EOF' (got %ld)", r.status);
    ok(r.body && tu_contains(r.body, "cairn_tasks{state=\"succeeded\"} 2\n") &&
           tu_contains(r.body, "cairn_tasks{state=\"dead\"} 1\n") &&
           tu_contains(r.body, "cairn_retry_due 0\n"),
       "with the tasks by state: 2 succeeded, 1 dead; nothing due");
    long created = -1, existing = -1;
    const char *c = r.body ? strstr(r.body, "cairn_serve_admitted{result=\"created\"} ") : NULL;
    const char *e = r.body ? strstr(r.body, "cairn_serve_admitted{result=\"existing\"} ") : NULL;
    if (c)
        created = strtol(strchr(c, ' ') + 1, NULL, 10);
    if (e)
        existing = strtol(strchr(e, ' ') + 1, NULL, 10);
    ok(created >= 3 && existing >= 1 && r.body && tu_contains(r.body, "cairn_serve_workers 2\n"),
       "and the server's own: %ld created, %ld existing, 2 workers", created, existing);
    resp_free(&r);
    http(&r, &s, "POST", "/metrics", NULL, NULL, "{}", 2, 10000);
    ok(r.status == 405, "POST /metrics is 405 (got %ld)", r.status);
    resp_free(&r);
    http(&r, &s, "GET", "/health", NULL, NULL, NULL, 0, 10000);
    ok(r.status == 200 && !strcmp(jstr_at(r.json, "status"), "ok"), "GET /health is 200 ok");
    resp_free(&r);

    ok(srv_stop(&s, 0) == 0, "SIGTERM stops the server with 0");
    free(body), free(other), free(bad), free(dir), free(store);
}

/* The children of pid (its workers), from /proc; n found. */
static int children(pid_t pid, pid_t *out, int max)
{
    char *path = tu_fmt("/proc/%ld/task/%ld/children", (long)pid, (long)pid);
    char *text = tu_read_file(path, NULL);
    free(path);
    int n = 0;
    for (char *p = text; p && *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        out[n++] = (pid_t)v;
        p = end;
    }
    free(text);
    return n;
}

/* Whether process pid has a descriptor open on `target` (a /proc fd link, "socket:[INODE]"). */
static int has_fd_on(pid_t pid, const char *target)
{
    char *dir = tu_fmt("/proc/%ld/fd", (long)pid);
    DIR *d = opendir(dir);
    int found = 0;
    struct dirent *e;
    while (d && !found && (e = readdir(d))) {
        char *link = tu_fmt("%s/%s", dir, e->d_name), t[256];
        ssize_t k = readlink(link, t, sizeof t - 1);
        found = k > 0 && (t[k] = 0, strcmp(t, target) == 0);
        free(link);
    }
    if (d)
        closedir(d);
    free(dir);
    return found;
}

/* How many of process pid's descriptors are sockets that process `of` has open too (the
 * server's listener and its clients' connections; not the worker's own, such as its step
 * host's socket pair), from /proc; -1 if it cannot be read. */
static int shared_socket_fds(pid_t pid, pid_t of)
{
    char *dir = tu_fmt("/proc/%ld/fd", (long)pid);
    DIR *d = opendir(dir);
    int n = d ? 0 : -1;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *link = tu_fmt("%s/%s", dir, e->d_name), target[256];
        ssize_t k = readlink(link, target, sizeof target - 1);
        if (k > 0) {
            target[k] = 0;
            n += !strncmp(target, "socket:", 7) && has_fd_on(of, target);
        }
        free(link);
    }
    if (d)
        closedir(d);
    free(dir);
    return n;
}

/* A worker killed mid-task (an OOM kill, a crashed step) is replaced; the new one finishes the
 * task, and its effect happens once. */
static void worker_replaced(void)
{
    tu_scene sc = tu_scene_new(D, "respawn");
    char *dir = sc.dir, *trace = sc.trace, *ledger = sc.ledger;
    srv s;
    if (srv_start(&s, dir, sc.store, 1, NULL)) {
        ok(0, "the server starts");
        return;
    }
    char *body = ledger_body(dir, "slow", 1500, NULL);
    resp r;
    post(&r, &s, "slow-1", body);
    ok(r.status == 202, "a slow task is admitted (got %ld)", r.status);
    resp_free(&r);
    int working = wait_lines(trace, "work slow-1", 1, 60000);
    pid_t w[4];
    int nw = children(s.pid, w, 4);
    ok(working && nw == 1, "its work step started in the one worker (pid %ld)",
       nw ? (long)w[0] : -1L);
    if (nw == 1)
        kill(w[0], SIGKILL);
    char got[32];
    ok(wait_status(&s, "slow-1", "succeeded", got, sizeof got),
       "after SIGKILL of the worker mid-step, the task still succeeds (last: %s)", got);
    pid_t w2[4];
    int nw2 = children(s.pid, w2, 4);
    ok(nw2 == 1 && nw == 1 && w2[0] != w[0], "a new worker took the dead one's place (pid %ld)",
       nw2 ? (long)w2[0] : -1L);
    int sockets = nw2 == 1 ? shared_socket_fds(w2[0], s.pid) : -1;
    ok(sockets == 0,
       "it holds none of the server's sockets (the listener, clients' connections): %d", sockets);
    ok(tu_count_lines(ledger, "slow-1 ") == 1, "the task's effect happened once");
    char *err = tu_read_file(s.err, NULL);
    ok(err && tu_contains(err, "started in place of the one that ended"),
       "the server said so on stderr");
    free(err);
    ok(srv_stop(&s, 0) == 0, "SIGTERM stops the server with 0");
    free(body);
    tu_scene_free(&sc);
}

static void token_and_unix(void)
{
    char *dir = tu_fmt("%s/token", D), *store = tu_fmt("%s/store", dir);
    char *tok = tu_fmt("%s/token", dir), *sock = tu_fmt("%s/sock", dir);
    mkdir(dir, 0755);
    tu_write_file(tok, "s3cret-token\n", 13);
    char *listen = tu_fmt("unix:%s", sock);
    const char *extra[] = {"--token-file", tok, "--listen", listen, NULL};
    srv s;
    if (srv_start(&s, dir, store, 1, extra)) {
        ok(0, "the server starts on a Unix socket");
        return;
    }
    ok(tu_contains(s.addr, "unix:"), "it listens on the Unix socket (%s)", s.addr);
    char *body = ledger_body(dir, "t", 0, NULL);
    resp r;
    http(&r, &s, "POST", "/v1/tasks", "tok-1", NULL, body, strlen(body), 10000);
    ok(r.status == 401 && !strcmp(err_of(&r, "type"), "unauthorized"),
       "no bearer token is 401 (got %ld)", r.status);
    resp_free(&r);
    http(&r, &s, "GET", "/v1/tasks", NULL, "wrong-token", NULL, 0, 10000);
    ok(r.status == 401, "a wrong token is 401 (got %ld)", r.status);
    resp_free(&r);
    http(&r, &s, "POST", "/v1/tasks", "tok-1", "s3cret-token", body, strlen(body), 10000);
    ok(r.status == 202, "the file's token is let in (got %ld)", r.status);
    resp_free(&r);
    char *ledger = tu_fmt("%s/ledger", dir), *none = tu_fmt("%s/none", dir);
    ok(tu_count_lines(ledger, NULL) <= 1, "the refused ones admitted nothing");
    ok(srv_stop(&s, 0) == 0, "it stops");
    struct stat sb;
    ok(stat(sock, &sb) != 0, "and removes its socket");

    tu_result tr;
    tu_runl(&tr, 30000, tu_env("CAIRN_LEDGER", "cairn-ledger"), "serve", "--tasks", "--graph",
            "ledger", "--store", store, "--listen", "0.0.0.0:0", NULL);
    ok(tr.code == 64 && tu_contains(tr.err, "--token-file"),
       "a non-loopback address without a token is 64 (%d)", tr.code);
    tu_result_free(&tr);
    tu_runl(&tr, 30000, tu_env("CAIRN_LEDGER", "cairn-ledger"), "serve", "--graph", "ledger",
            "--store", store, NULL);
    ok(tr.code == 64 && tu_contains(tr.err, "--tasks"), "serve without --tasks is 64 (%d)",
       tr.code);
    tu_result_free(&tr);
    tu_runl(&tr, 30000, tu_env("CAIRN_LEDGER", "cairn-ledger"), "serve", "--tasks", "--graph",
            "ledger", "--store", store, "--token-file", none, "--listen", "127.0.0.1:0", NULL);
    ok(tr.code == 66 && tu_contains(tr.err, "none"), "a missing token file is 66 (%d)", tr.code);
    tu_result_free(&tr);
    tu_runl(&tr, 30000, tu_env("CAIRN_LEDGER", "cairn-ledger"), "serve", "--tasks", "--graph",
            "ledger", "--store", store, "--token-file", tok, "--listen", "[::1:0", NULL);
    ok(tr.code == 64 && tu_contains(tr.err, "[ADDR]:PORT (IPv6)"),
       "a malformed IPv6 address is 64, with the forms named (%d)", tr.code);
    tu_result_free(&tr);

    /* IPv6 loopback, without a token (loopback), where the machine has ::1 */
    int fd6 = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int have6 = fd6 >= 0 && bind(fd6, (struct sockaddr *)&a6, sizeof a6) == 0;
    if (fd6 >= 0)
        close(fd6);
    const char *extra6[] = {"--listen", "[::1]:0", NULL};
    if (!have6) {
        skip("no IPv6 loopback here");
    } else if (srv_start(&s, dir, store, 1, extra6)) {
        ok(0, "the server starts on [::1]");
    } else {
        http(&r, &s, "POST", "/v1/tasks", "six-1", NULL, body, strlen(body), 10000);
        ok(!strncmp(s.addr, "[::1]:", 6) && r.status == 202,
           "--listen [::1]:0 serves on IPv6 loopback (%s, got %ld)", s.addr, r.status);
        resp_free(&r);
        ok(srv_stop(&s, 0) == 0, "and stops");
    }
    free(body), free(listen), free(tok), free(sock), free(dir), free(store), free(ledger),
        free(none);
}

/* K runners on threads of one worker process (the default), or spread over --processes P:
 * three slow tasks run at once either way, each effect once. */
static void runner_threads(void)
{
    for (int procs = 1; procs <= 3; procs += 2) {
        tu_scene sc = tu_scene_new(D, procs == 1 ? "threads" : "procs");
        srv s;
        const char *extra[] = {"--processes", procs == 1 ? "1" : "3", NULL};
        if (srv_start(&s, sc.dir, sc.store, 3, extra)) {
            ok(0, "the server starts with --jobs 3 --processes %d", procs);
            continue;
        }
        char *body[3];
        int posted = 0;
        for (int i = 0; i < 3; i++) {
            char *key = tu_fmt("th-%d-%d", procs, i), text[32];
            snprintf(text, sizeof text, "th%d", i);
            body[i] = ledger_body(sc.dir, text, 4000, NULL);
            resp r;
            post(&r, &s, key, body[i]);
            posted += r.status == 202;
            resp_free(&r);
            free(key);
        }
        /* all three work steps have begun while none has ended (each takes 4 s) */
        int at_once = wait_lines(sc.trace, "work th-", 3, 60000);
        pid_t w[8];
        int nw = children(s.pid, w, 8);
        int done = tu_count_lines(sc.ledger, "th-");
        ok(posted == 3 && at_once && done == 0 && nw == procs,
           "--jobs 3 --processes %d: three slow tasks run at once in %d worker process(es) "
           "(found %d, %d effects yet)",
           procs, procs, nw, done);
        char got[32];
        int all = 1;
        for (int i = 0; i < 3; i++) {
            char *key = tu_fmt("th-%d-%d", procs, i);
            all &= wait_status(&s, key, "succeeded", got, sizeof got);
            free(key);
            free(body[i]);
        }
        ok(all && tu_count_lines(sc.ledger, "th-") == 3, "and all three succeed, each effect once");
        if (procs == 1 && nw == 1) {
            /* a SIGTERM to the worker alone stops its runners, and the worker with them */
            kill(w[0], SIGTERM);
            pid_t w2[8];
            int n2 = 0, gone = 0;
            for (int64_t end = tu_now_ms() + 20000; tu_now_ms() < end && !gone; tu_sleep_ms(20)) {
                n2 = children(s.pid, w2, 8);
                gone = n2 == 1 && w2[0] != w[0];
            }
            ok(gone,
               "a SIGTERM to the worker alone ends it (its 3 runners stopped), and another "
               "takes its place (%d worker(s))",
               n2);
        }
        resp r;
        http(&r, &s, "GET", "/metrics", NULL, NULL, NULL, 0, 10000);
        char *want = tu_fmt("cairn_serve_worker_processes %d\n", procs);
        ok(r.status == 200 && r.body && tu_contains(r.body, "cairn_serve_workers 3\n") &&
               tu_contains(r.body, want),
           "/metrics: 3 runners in %d worker process(es)", procs);
        free(want);
        resp_free(&r);
        ok(srv_stop(&s, 0) == 0, "SIGTERM stops the server with 0");
        tu_scene_free(&sc);
    }
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    D = tu_mkdtemp("serve");
    api();
    token_and_unix();
    worker_replaced();
    runner_threads();
    tu_rm_rf(D);
    free(D);
    curl_global_cleanup();
    return tap_done();
}
