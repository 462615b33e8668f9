/* serve_common.h - what the serve tests share: a real `cairn-ledger serve --tasks` process on
 * 127.0.0.1 (an ephemeral port it prints), a libcurl client, and the ledger's effect counted at
 * the receiver (the ledger file: one line per append that happened).
 */
#ifndef CAIRN_TEST_SERVE_COMMON_H
#define CAIRN_TEST_SERVE_COMMON_H

#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tap.h"
#include "testutil.h"

typedef struct srv {
    pid_t pid;
    char addr[128]; /* "127.0.0.1:PORT" or "unix:PATH" */
    char *out, *err;
} srv;

/* Starts the server on `store` with `extra` arguments (NULL-ended, may be NULL); waits (up to
 * 30 s on a loaded machine) for its `listening ADDRESS` line. 0, or -1 with a diagnostic. */
static inline int srv_start(srv *s, const char *dir, const char *store, int jobs,
                            const char *const *extra)
{
    static int n;
    memset(s, 0, sizeof *s);
    s->out = tu_fmt("%s/serve%d.out", dir, n);
    s->err = tu_fmt("%s/serve%d.err", dir, n++);
    char jobs_s[16];
    snprintf(jobs_s, sizeof jobs_s, "%d", jobs);
    const char *argv[32] = {tu_env("CAIRN_LEDGER", "cairn-ledger"),
                            "serve",
                            "--tasks",
                            "--graph",
                            "ledger",
                            "--store",
                            store,
                            "--jobs",
                            jobs_s};
    size_t k = 9;
    int has_listen = 0;
    for (size_t i = 0; extra && extra[i] && k < 30; i++) {
        has_listen |= !strcmp(extra[i], "--listen");
        argv[k++] = extra[i];
    }
    if (!has_listen) {
        argv[k++] = "--listen";
        argv[k++] = "127.0.0.1:0";
    }
    argv[k] = NULL;
    s->pid = tu_spawn(argv, NULL, s->out, s->err);
    for (int64_t end = tu_now_ms() + 30000; tu_now_ms() < end;) {
        char *o = tu_read_file(s->out, NULL);
        const char *l = o ? strstr(o, "listening ") : NULL;
        if (l && strchr(l, '\n')) {
            sscanf(l + 10, "%127s", s->addr);
            free(o);
            return 0;
        }
        free(o);
        int code;
        if (tu_poll_exit(s->pid, &code)) {
            char *e = tu_read_file(s->err, NULL);
            diag("serve exited with %d: %s", code, e ? e : "");
            free(e);
            s->pid = 0;
            free(s->out), free(s->err), s->out = s->err = NULL;
            return -1;
        }
        tu_sleep_ms(20);
    }
    diag("serve did not print its address in 30 s");
    free(s->out), free(s->err), s->out = s->err = NULL;
    return -1;
}

/* SIGTERM and the exit code (a stop is 0), or SIGKILL with `kill9` (137). */
static inline int srv_stop(srv *s, int kill9)
{
    int code = -1;
    if (s->pid > 0) {
        if (kill9) {
            tu_kill_group(s->pid, SIGKILL);
            code = tu_wait(s->pid, 30000);
        } else {
            kill(s->pid, SIGTERM);
            code = tu_wait(s->pid, 30000);
            if (code == -2)
                tu_kill_wait(s->pid);
        }
        if (code != (kill9 ? 137 : 0)) { /* what the server said, for the failure's report */
            size_t n = 0;
            char *e = s->err ? tu_read_file(s->err, &n) : NULL;
            diag("serve ended with %d after %s; its stderr ends: %s", code,
                 kill9 ? "SIGKILL" : "SIGTERM", e ? e + (n > 2000 ? n - 2000 : 0) : "(none)");
            free(e);
        }
    }
    s->pid = 0;
    free(s->out), free(s->err);
    s->out = s->err = NULL;
    return code;
}

typedef struct resp {
    long status;
    CURLcode curl;
    char *body;
    json_t *json;
    char location[256];
    size_t body_len;
} resp;

static inline void resp_free(resp *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
    resp *r = arg;
    char *b = realloc(r->body, r->body_len + sz * n + 1);
    if (!b)
        return 0;
    memcpy(b + r->body_len, p, sz * n);
    r->body = b;
    r->body_len += sz * n;
    b[r->body_len] = 0;
    return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *arg)
{
    resp *r = arg;
    if (sz * n > 10 && !strncasecmp(p, "Location: ", 10))
        snprintf(r->location, sizeof r->location, "%.*s", (int)strcspn(p + 10, "\r\n"), p + 10);
    return sz * n;
}

/* One request: `key` (NULL: no Idempotency-Key header), `token` (NULL: no Authorization),
 * `body` (NULL: none); timeout_ms bounds it. Returns the status (0 when no response came). */
static inline long http(resp *r, const srv *s, const char *method, const char *path,
                        const char *key, const char *token, const char *body, size_t body_len,
                        long timeout_ms)
{
    memset(r, 0, sizeof *r);
    CURL *c = curl_easy_init();
    char url[512], h1[300], h2[600];
    struct curl_slist *hs = curl_slist_append(NULL, "Content-Type: application/json");
    if (!strncmp(s->addr, "unix:", 5)) {
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, s->addr + 5);
        snprintf(url, sizeof url, "http://localhost%s", path);
    } else
        snprintf(url, sizeof url, "http://%s%s", s->addr, path);
    if (key) {
        snprintf(h1, sizeof h1, "Idempotency-Key: %s", key);
        hs = curl_slist_append(hs, h1);
    }
    if (token) {
        snprintf(h2, sizeof h2, "Authorization: Bearer %s", token);
        hs = curl_slist_append(hs, h2);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    r->curl = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    if (r->body)
        r->json = json_loads(r->body, 0, NULL);
    return r->status;
}

static inline long post(resp *r, const srv *s, const char *key, const char *body)
{
    return http(r, s, "POST", "/v1/tasks", key, NULL, body, strlen(body), 30000);
}

static inline const char *jstr_at(const json_t *j, const char *k)
{
    const char *v = json_string_value(json_object_get(j, k));
    return v ? v : "";
}

/* The error's member k ("type", "message", "field"), or "". */
static inline const char *err_of(const resp *r, const char *k)
{
    return jstr_at(json_object_get(r->json, "error"), k);
}

/* Polls GET /v1/tasks/ID until its status is `want` (30 s). 1 when it is; the last document's
 * status is left in got. */
static inline int wait_status(const srv *s, const char *id, const char *want, char *got,
                              size_t gotlen)
{
    char path[200];
    snprintf(path, sizeof path, "/v1/tasks/%s", id);
    got[0] = 0;
    for (int64_t end = tu_now_ms() + 30000; tu_now_ms() < end; tu_sleep_ms(25)) {
        resp r;
        http(&r, s, "GET", path, NULL, NULL, NULL, 0, 10000);
        snprintf(got, gotlen, "%s", jstr_at(r.json, "status"));
        resp_free(&r);
        if (!strcmp(got, want))
            return 1;
    }
    return 0;
}

/* Waits (up to timeout_ms) until the file at path has `n` lines starting with prefix, e.g. the
 * ledger's trace saying "work <task>": the task's expensive step has begun. 1, or 0 at the
 * timeout. */
static inline int wait_lines(const char *path, const char *prefix, int n, int timeout_ms)
{
    for (int64_t end = tu_now_ms() + timeout_ms; tu_now_ms() < end; tu_sleep_ms(10))
        if (tu_count_lines(path, prefix) == n)
            return 1;
    return 0;
}

/* A ledger input: text, work_ms, the trace and ledger files. */
static inline char *ledger_body(const char *dir, const char *text, int work_ms, const char *fail)
{
    char *trace = tu_fmt("%s/trace", dir), *ledger = tu_fmt("%s/ledger", dir);
    json_t *o = json_pack("{s:s, s:i, s:s, s:s}", "text", text, "work_ms", work_ms, "trace", trace,
                          "ledger", ledger);
    free(trace), free(ledger);
    if (fail)
        json_object_set_new(o, "fail", json_string(fail));
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

#endif
