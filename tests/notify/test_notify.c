/* tests/notify/test_notify.c - the notify step end to end: real runner, real LMDB store in a
 * temp dir, a real HTTP receiver (receiver.py) and a real SMTP server (smtp_sink.py,
 * aiosmtpd), loopback only. Effects are counted on the receiving side.
 *
 * Usage: test_notify RECEIVER.py SMTP_SINK.py
 *
 * Each scenario builds a graph `source` (compute: {"text": input.text}) -> one or two notify
 * steps, runs it, and checks the task state, what the receiver got (how often, with which
 * webhook-id / Message-ID, whether the signature verifies), and that no secret reached the
 * store file, `cairn show --json` or an error message.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "steps/notify.h"
#include "tests/tap.h"

#define SECRET "whsec_Y2Fpcm4tdGVzdC1zZWNyZXQtZG8tbm90LWxlYWstMTIzNA=="
#define SECRET_B64 "Y2Fpcm4tdGVzdC1zZWNyZXQtZG8tbm90LWxlYWstMTIzNA"
#define SECRET_RAW "cairn-test-secret-do-not-leak-1234"
#define SMTP_USER "cairn-user"
#define SMTP_PASS "smtp-pass-do-not-leak-5678"

static char g_tmp[256];
static char g_wlog[300], g_slog[300];
static int g_wport, g_sport;
static pid_t g_wpid, g_spid;
static int g_refused_port;

/* ------------------------------------------------------------------ processes */

static int run_quiet(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1), dup2(fd, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Starts `python script log` and reads the port it prints. */
static pid_t spawn_server(const char *python, const char *script, const char *log, int *port)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]), close(p[1]);
        execlp(python, python, script, log, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[32] = "";
    size_t n = 0;
    struct pollfd pf = {p[0], POLLIN, 0};
    while (n < sizeof line - 1 && !strchr(line, '\n') && poll(&pf, 1, 15000) > 0) {
        ssize_t r = read(p[0], line + n, sizeof line - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        line[n] = 0;
    }
    close(p[0]);
    *port = atoi(line);
    if (*port <= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static void stop_server(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
}

/* ------------------------------------------------------------------ receiver logs */

/* Records in `log` whose `key` (a string field, or the first of an array) equals `want`. */
static json_t *records(const char *log, const char *key, const char *want)
{
    json_t *out = json_array();
    FILE *f = fopen(log, "r");
    if (!f)
        return out;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *r = json_loads(line, 0, NULL);
        json_t *v = r ? json_object_get(r, key) : NULL;
        if (json_is_array(v))
            v = json_array_get(v, 0);
        if (json_is_string(v) && strcmp(json_string_value(v), want) == 0)
            json_array_append(out, r);
        json_decref(r);
    }
    free(line);
    fclose(f);
    return out;
}

/* Waits (up to 3 s) until at least `n` records match, then returns them all. */
static json_t *wait_records(const char *log, const char *key, const char *want, size_t n)
{
    json_t *a = NULL;
    for (int i = 0; i < 150; i++) {
        json_decref(a);
        a = records(log, key, want);
        if (json_array_size(a) >= n)
            break;
        usleep(20000);
    }
    return a;
}

/* For "nothing more arrived" checks: a short grace period, then the records. The runner's
 * call is synchronous and both servers log a request before answering it, so anything sent
 * is normally logged already; the grace only covers scheduling delays. */
static json_t *settled_records(const char *log, const char *key, const char *want)
{
    usleep(300000);
    return records(log, key, want);
}

static const char *rec_str(json_t *recs, size_t i, const char *k1, const char *k2)
{
    json_t *v = json_object_get(json_array_get(recs, i), k1);
    if (k2)
        v = json_object_get(v, k2);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* ------------------------------------------------------------------ scenarios */

static cairn_step_result source_step(cairn_ctx *ctx, void *user)
{
    (void)user;
    const msgpack_object *in = cairn_ctx_input(ctx);
    const char *text = "";
    uint32_t tl = 0;
    for (uint32_t i = 0; in->type == MSGPACK_OBJECT_MAP && i < in->via.map.size; i++) {
        const msgpack_object_kv *kv = &in->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 4 &&
            memcmp(kv->key.via.str.ptr, "text", 4) == 0 && kv->val.type == MSGPACK_OBJECT_STR)
            text = kv->val.via.str.ptr, tl = kv->val.via.str.size;
    }
    msgpack_packer *pk = cairn_ctx_packer(ctx);
    msgpack_pack_map(pk, 2);
    msgpack_pack_str(pk, 4);
    msgpack_pack_str_body(pk, "text", 4);
    msgpack_pack_str(pk, tl);
    msgpack_pack_str_body(pk, text, tl);
    msgpack_pack_str(pk, 5);
    msgpack_pack_str_body(pk, "chars", 5);
    msgpack_pack_uint32(pk, tl);
    return CAIRN_STEP_OK;
}

typedef struct {
    char name[64], dir[320], task[160];
    cairn_store *st;
    cairn_runner *r;
    cairn_graph *g;
    cairn__notify_target *t[2];
    size_t nt;
} scen;

typedef struct {
    uint32_t max_inv, base_ms, inline_wait_ms;
} policy;

/* inline retries with tiny backoffs: a transient failure is retried within one run */
static const policy INLINE = {5, 10, 2000};
/* every transient failure ends the run as `failed` (the backoff is never short enough) */
static const policy LATER = {5, 600000, 0};
/* tiny backoffs, but nothing retried inside the run: a Retry-After alone sets the wait */
static const policy SHORT = {5, 10, 0};

static int scen_open(scen *s, const char *name, const policy *pol, const char *cfg1,
                     const char *cfg2)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->dir, sizeof s->dir, "%s/%s", g_tmp, name);
    const char *cfgs[2] = {cfg1, cfg2};
    s->g = cairn_graph_new(name, 1);
    if (!s->g || !cairn_graph_add_step(s->g, "source", source_step, NULL))
        return -1;
    for (size_t i = 0; i < 2 && cfgs[i]; i++) {
        char err[512], where[32];
        json_error_t je;
        json_t *cfg = json_loads(cfgs[i], 0, &je);
        snprintf(where, sizeof where, "notify[%zu]", i);
        int rc = cfg ? cairn__notify_target_parse(cfg, where, &s->t[i], err, sizeof err) : -1;
        json_decref(cfg);
        if (rc) {
            diag("%s: target %zu: %s", name, i, cfg ? err : je.text);
            return -1;
        }
        s->nt = i + 1;
        char step[80];
        snprintf(step, sizeof step, "notify.%s", cairn__notify_target_name(s->t[i]));
        cairn_step *st = cairn_graph_add_step(s->g, step, cairn__notify_step, "source");
        if (!st || cairn_step_set_delivery(st, cairn__notify_target_delivery(s->t[i])) ||
            cairn_step_set_user(st, s->t[i]) ||
            cairn_step_set_retry(st, pol->max_inv, pol->base_ms, pol->base_ms))
            return -1;
    }
    s->st = cairn_store_new();
    s->r = cairn_runner_new();
    if (!s->st || !s->r || cairn_store_set_durability(s->st, CAIRN_NOSYNC) ||
        cairn_store_open(s->st, s->dir) || cairn_runner_add_graph(s->r, s->g) ||
        cairn_runner_set_store(s->r, s->st) || cairn_runner_set_max_attempts(s->r, 20) ||
        cairn_runner_set_inline_wait_ms(s->r, pol->inline_wait_ms) || cairn_runner_open(s->r)) {
        diag("%s: setup failed: %s %s", name, s->st ? cairn_store_errmsg(s->st) : "",
             s->r ? cairn_runner_errmsg(s->r) : "");
        return -1;
    }
    return 0;
}

static int scen_run(scen *s, const char *text)
{
    json_t *in = json_pack("{s:s}", "text", text);
    char *js = json_dumps(in, JSON_COMPACT);
    json_decref(in);
    int rc =
        cairn_runner_run(s->r, s->name, NULL, NULL, js, strlen(js), NULL, s->task, sizeof s->task);
    free(js);
    if (rc)
        diag("%s: run -> %s: %s", s->name, cairn_errname(rc), cairn_runner_errmsg(s->r));
    return rc;
}

static int scen_resume(scen *s)
{
    int rc = cairn_runner_resume(s->r, s->task);
    if (rc)
        diag("%s: resume -> %s: %s", s->name, cairn_errname(rc), cairn_runner_errmsg(s->r));
    return rc;
}

/* The task snapshot as JSON (what `cairn show --json` prints), or NULL. */
static json_t *snapshot(scen *s)
{
    cairn_task *t = NULL;
    if (cairn_task_load(s->st, s->task, &t) != 0)
        return NULL;
    char *js = cairn_task_json(t);
    cairn_task_free(t);
    json_t *j = js ? json_loads(js, 0, NULL) : NULL;
    cairn_free(js);
    return j;
}

static const char *task_status(scen *s, char *buf, size_t n)
{
    json_t *j = snapshot(s);
    snprintf(buf, n, "%s", j ? json_string_value(json_object_get(j, "status")) : "?");
    json_decref(j);
    return buf;
}

/* Field `key` of step `step` in the snapshot, as a new reference (or NULL). */
static json_t *step_field(scen *s, const char *step, const char *key)
{
    json_t *j = snapshot(s), *out = NULL;
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(j, "steps"), i, st)
    {
        if (strcmp(json_string_value(json_object_get(st, "name")), step) == 0)
            out = json_incref(json_object_get(st, key));
    }
    json_decref(j);
    return out;
}

static char *step_error(scen *s, const char *step)
{
    json_t *e = step_field(s, step, "error");
    char *out = strdup(json_is_string(e) ? json_string_value(e) : "");
    json_decref(e);
    return out;
}

static int contains(const void *hay, size_t n, const char *needle)
{
    return memmem(hay, n, needle, strlen(needle)) != NULL;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p)
        p[n] = 0, *len = (size_t)n;
    fclose(f);
    return p;
}

static int leaks(const void *p, size_t n)
{
    return contains(p, n, SECRET_B64) || contains(p, n, SECRET_RAW) || contains(p, n, SMTP_PASS);
}

/* No secret in the raw store file, in `cairn show --json` (the real CLI binary), nor in the
 * runner's last message. */
static void check_no_secret(scen *s)
{
    char path[400], out[400];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/data.mdb", s->dir);
    char *db = slurp(path, &n);
    int store_ok = db && n > 0 && !leaks(db, n) && contains(db, n, s->task);
    free(db);
    int show_ok = 1;
    const char *bin = getenv("CAIRN_BIN");
    if (bin) {
        snprintf(out, sizeof out, "%s/%s.show.json", g_tmp, s->name);
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            dup2(fd, 1);
            execl(bin, bin, "show", s->task, "--json", "--store", s->dir, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        char *js = slurp(out, &n);
        show_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && js && contains(js, n, s->task) &&
                  !leaks(js, n);
        free(js);
    }
    const char *m = cairn_runner_errmsg(s->r);
    ok(store_ok && show_ok && !leaks(m, strlen(m)),
       "%s: no secret in data.mdb (%s), show --json (%s) or messages", s->name,
       store_ok ? "ok" : "LEAK/unreadable", show_ok ? "ok" : "LEAK/failed");
}

static void scen_close(scen *s)
{
    if (s->r)
        check_no_secret(s);
    cairn_runner_free(s->r);
    cairn_store_free(s->st);
    cairn_graph_free(s->g);
    for (size_t i = 0; i < s->nt; i++)
        cairn__notify_target_free(s->t[i]);
}

static void webhook_cfg(char *out, size_t n, const char *name, const char *path, const char *extra)
{
    snprintf(out, n,
             "{\"type\":\"webhook\",\"name\":\"%s\",\"url\":\"http://127.0.0.1:%d%s\","
             "\"secret_env\":\"CAIRN_WEBHOOK_SECRET\",\"source\":\"source\","
             "\"connect_timeout_ms\":2000,\"timeout_ms\":5000%s%s}",
             name, g_wport, path, extra ? "," : "", extra ? extra : "");
}

/* ------------------------------------------------------------------ webhook scenarios */

static void t_delivery(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w1/ok", NULL);
    if (scen_open(&s, "w_delivery", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_delivery: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "a gr\xc3\xbc\xc3\x9f \"quoted\" text");
    ok(rc == 0 && strcmp(task_status(&s, st, sizeof st), "succeeded") == 0,
       "webhook 200: task succeeded (%s)", cairn_errname(rc));
    json_t *recs = wait_records(g_wlog, "path", "/w1/ok", 1);
    ok(json_array_size(recs) == 1, "delivered exactly once (%zu)", json_array_size(recs));
    json_t *out = step_field(&s, "notify.shop", "output");
    const char *did = json_string_value(json_object_get(out, "delivery_id"));
    ok(did && strncmp(did, "dlv_", 4) == 0 &&
           json_integer_value(json_object_get(out, "status")) == 200 &&
           strcmp(json_string_value(json_object_get(out, "target")), "shop") == 0,
       "step output {status 200, target, delivery_id %s}", did ? did : "?");
    ok(json_is_true(json_object_get(json_array_get(recs, 0), "sig_valid")),
       "receiver verifies the Standard Webhooks signature (%s)",
       rec_str(recs, 0, "sig_reason", NULL));
    ok(did && strcmp(rec_str(recs, 0, "headers", "webhook-id"), did) == 0,
       "webhook-id is the delivery ID");
    json_t *body = json_loads(rec_str(recs, 0, "body", NULL), 0, NULL);
    ok(body &&
           strcmp(json_string_value(json_object_get(body, "type")), "cairn.task.completed") == 0 &&
           strcmp(json_string_value(json_object_get(body, "task")), s.task) == 0 && did &&
           strcmp(json_string_value(json_object_get(body, "delivery_id")), did) == 0,
       "body: type, task, delivery_id");
    json_t *res = json_object_get(body, "result");
    ok(strcmp(json_string_value(json_object_get(res, "text"))
                  ? json_string_value(json_object_get(res, "text"))
                  : "",
              "a gr\xc3\xbc\xc3\x9f \"quoted\" text") == 0 &&
           json_integer_value(json_object_get(res, "chars")) == 22,
       "body: result is the source output as JSON");
    ok(strcmp(rec_str(recs, 0, "headers", "content-type"), "application/json") == 0 &&
           strcmp(rec_str(recs, 0, "headers", "user-agent"), "cairn/0.1") == 0,
       "Content-Type and User-Agent");
    const char *ts = rec_str(recs, 0, "headers", "webhook-timestamp");
    long long tsv = atoll(ts);
    ok(tsv > 0 && llabs(tsv - (long long)time(NULL)) < 60, "webhook-timestamp is now (%s)", ts);
    json_decref(body), json_decref(out), json_decref(recs);
    rc = scen_run(&s, "a gr\xc3\xbc\xc3\x9f \"quoted\" text");
    recs = settled_records(g_wlog, "path", "/w1/ok");
    ok(rc == 0 && json_array_size(recs) == 1, "running the task again sends nothing");
    json_decref(recs);
    scen_close(&s);
}

static void t_500_then_ok(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w2/500,ok", NULL);
    if (scen_open(&s, "w_500", &LATER, cfg, NULL) != 0) {
        ok(0, "w_500: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.shop");
    ok(rc == CAIRN_ETRANSIENT && strcmp(task_status(&s, st, sizeof st), "failed") == 0,
       "500: transient, task failed (retry later): %s", cairn_errname(rc));
    ok(strstr(err, "HTTP 500") && strstr(err, "'shop'") && strstr(err, "/w2/500,ok"),
       "error names target, URL and status: %s", err);
    free(err);
    rc = scen_resume(&s);
    json_t *recs = wait_records(g_wlog, "path", "/w2/500,ok", 2);
    ok(rc == 0 && strcmp(task_status(&s, st, sizeof st), "succeeded") == 0,
       "a later invocation succeeds");
    ok(json_array_size(recs) == 2 &&
           strcmp(rec_str(recs, 0, "headers", "webhook-id"),
                  rec_str(recs, 1, "headers", "webhook-id")) == 0 &&
           json_is_true(json_object_get(json_array_get(recs, 1), "sig_valid")),
       "two requests with the SAME webhook-id, both signed (%zu)", json_array_size(recs));
    ok(strcmp(rec_str(recs, 0, "body", NULL), rec_str(recs, 1, "body", NULL)) == 0,
       "the resent body is byte-identical");
    json_t *inv = step_field(&s, "notify.shop", "invocations");
    ok(json_integer_value(inv) == 2, "step invocations: 2");
    json_decref(inv), json_decref(recs);
    scen_close(&s);
}

/* A receiver that quotes the secret back in its answer, whole or cut by the 160-byte snippet at
 * every interesting place: the stored error holds no piece of it. */
static size_t secret_piece(const char *msg, const char *secret)
{
    size_t sl = strlen(secret);
    for (size_t len = sl; len >= 6; len--)
        for (size_t at = 0; at + len <= sl; at++) {
            char piece[128];
            snprintf(piece, sizeof piece, "%.*s", (int)len, secret + at);
            if (strstr(msg, piece))
                return len;
        }
    return 0;
}

static void t_echo_secret(void)
{
    static const char *const plans[] = {"echo:20", "echo:150", "echo:157", "echob:130",
                                        "echob:159"};
    for (size_t i = 0; i < sizeof plans / sizeof *plans; i++) {
        scen s;
        char cfg[1024], path[64], name[32];
        snprintf(path, sizeof path, "/w_echo%zu/%s", i, plans[i]);
        snprintf(name, sizeof name, "w_echo%zu", i);
        webhook_cfg(cfg, sizeof cfg, "shop", path, NULL);
        if (scen_open(&s, name, &LATER, cfg, NULL) != 0) {
            ok(0, "%s: setup", name);
            scen_close(&s);
            continue;
        }
        int rc = scen_run(&s, "x");
        char *err = step_error(&s, "notify.shop");
        size_t p1 = secret_piece(err, SECRET), p2 = secret_piece(err, SECRET_B64);
        ok(rc == CAIRN_ETRANSIENT && strstr(err, "HTTP 500") && strchr(err, '*') && !p1 && !p2,
           "receiver quotes the secret (%s): starred in the stored error, no piece of 6+ bytes "
           "left (%zu, %zu): %s",
           plans[i], p1, p2, err);
        free(err);
        scen_close(&s);
    }
}

/* How long after its failure the task is due again (next_retry_at - updated), or -1. */
static long long retry_wait_ms(scen *s)
{
    json_t *snap = snapshot(s);
    json_t *due = snap ? json_object_get(snap, "next_retry_at_ms") : NULL;
    json_t *upd = snap ? json_object_get(snap, "updated_ms") : NULL;
    long long w = json_is_integer(due) && json_is_integer(upd)
                      ? json_integer_value(due) - json_integer_value(upd)
                      : -1;
    json_decref(snap);
    return w;
}

static void t_429(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w3/429:7", NULL);
    if (scen_open(&s, "w_429", &SHORT, cfg, NULL) != 0) {
        ok(0, "w_429: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.shop");
    ok(rc == CAIRN_ETRANSIENT && strcmp(task_status(&s, st, sizeof st), "failed") == 0,
       "429: transient (%s)", cairn_errname(rc));
    ok(strstr(err, "HTTP 429") && strstr(err, "7 s"), "Retry-After in the message: %s", err);
    free(err);
    long long wait_ms = retry_wait_ms(&s);
    ok(wait_ms >= 6900 && wait_ms <= 8000,
       "Retry-After honoured: next retry %lld ms after the failure (7 s; the backoff is <= 10 ms)",
       wait_ms);
    json_t *recs = wait_records(g_wlog, "path", "/w3/429:7", 1);
    ok(json_array_size(recs) == 1, "one request");
    json_decref(recs);
    scen_close(&s);
}

/* A Retry-After beyond a day is kept at a day, and the message says so (it said the wait asked
 * for, "retrying after 999999 s", while the task was due in a day). */
static void t_429_capped(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w3/429:999999", NULL);
    if (scen_open(&s, "w_429cap", &SHORT, cfg, NULL) != 0) {
        ok(0, "w_429cap: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.shop");
    long long wait_ms = retry_wait_ms(&s);
    ok(rc == CAIRN_ETRANSIENT && strcmp(task_status(&s, st, sizeof st), "failed") == 0 &&
           strstr(err, "retrying after 86400 s") && strstr(err, "asked for 999999 s") &&
           wait_ms >= 86400000 - 1000 && wait_ms <= 86400000 + 1000,
       "429 with Retry-After 999999: due in a day, and the message says 86400 s (%lld ms: %s)",
       wait_ms, err);
    free(err);
    scen_close(&s);
}

/* 304 Not Modified is an answer, not a redirect ("HTTP 304 redirect not followed"). */
static void t_304(void)
{
    scen s;
    char cfg[1024];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w3/304", NULL);
    if (scen_open(&s, "w_304", &SHORT, cfg, NULL) != 0) {
        ok(0, "w_304: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.shop");
    ok(rc == CAIRN_EDEAD && strstr(err, "HTTP 304") && !strstr(err, "redirect"),
       "304: permanent, and not called a redirect (%s: %s)", cairn_errname(rc), err);
    free(err);
    scen_close(&s);
}

static void t_410(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w4/410", NULL);
    if (scen_open(&s, "w_410", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_410: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.shop");
    ok(rc == CAIRN_EDEAD && strcmp(task_status(&s, st, sizeof st), "dead") == 0,
       "410: permanent, task dead (%s)", cairn_errname(rc));
    ok(strstr(err, "HTTP 410") != NULL, "message: %s", err);
    free(err);
    rc = scen_resume(&s);
    json_t *recs = settled_records(g_wlog, "path", "/w4/410");
    ok(rc == CAIRN_EDEAD && json_array_size(recs) == 1, "never retried (%zu request)",
       json_array_size(recs));
    json_decref(recs);
    scen_close(&s);
}

static void t_408_inline(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w5/408,503,ok", NULL);
    if (scen_open(&s, "w_408", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_408: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    json_t *recs = wait_records(g_wlog, "path", "/w5/408,503,ok", 3);
    ok(rc == 0 && strcmp(task_status(&s, st, sizeof st), "succeeded") == 0 &&
           json_array_size(recs) == 3,
       "408, 503 are transient: retried inline within one run (%zu requests)",
       json_array_size(recs));
    ok(strcmp(rec_str(recs, 0, "headers", "webhook-id"),
              rec_str(recs, 2, "headers", "webhook-id")) == 0,
       "same webhook-id on every attempt");
    json_decref(recs);
    scen_close(&s);
}

static void t_reset_at_most_once(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w6/reset,ok", NULL);
    if (scen_open(&s, "w_reset_amo", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_reset_amo: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.shop");
    ok(rc == CAIRN_EINDOUBT && strcmp(task_status(&s, st, sizeof st), "in_doubt") == 0,
       "reset after the request was read: unknown -> in_doubt (%s)", cairn_errname(rc));
    ok(strstr(err, "after the request was sent") != NULL, "message: %s", err);
    free(err);
    rc = scen_resume(&s);
    json_t *recs = settled_records(g_wlog, "path", "/w6/reset,ok");
    ok(rc == CAIRN_EINDOUBT && json_array_size(recs) == 1,
       "at most once: not sent again (%zu request)", json_array_size(recs));
    json_decref(recs);
    scen_close(&s);
}

static void t_reset_at_least_once(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w7/reset,ok", "\"delivery\":\"at_least_once\"");
    if (scen_open(&s, "w_reset_alo", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_reset_alo: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    json_t *recs = wait_records(g_wlog, "path", "/w7/reset,ok", 2);
    ok(rc == 0 && strcmp(task_status(&s, st, sizeof st), "succeeded") == 0,
       "at least once: unknown -> called again, succeeded (%s)", cairn_errname(rc));
    ok(json_array_size(recs) == 2 &&
           strcmp(rec_str(recs, 0, "headers", "webhook-id"),
                  rec_str(recs, 1, "headers", "webhook-id")) == 0 &&
           json_is_true(json_object_get(json_array_get(recs, 1), "sig_valid")),
       "a second delivery with the same webhook-id (%zu)", json_array_size(recs));
    json_decref(recs);
    scen_close(&s);
}

/* A reply that is not HTTP, after the whole request was sent: the receiver read it and may have
 * acted on it, so the outcome is unknown (in doubt), not a permanent failure (dead). */
static void t_not_http_reply(void)
{
    scen s;
    char cfg[1024], st[32];
    webhook_cfg(cfg, sizeof cfg, "shop", "/w6b/garbage,ok", NULL);
    if (scen_open(&s, "w_garbage", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_garbage: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.shop");
    ok(rc == CAIRN_EINDOUBT && strcmp(task_status(&s, st, sizeof st), "in_doubt") == 0,
       "a reply that is not HTTP after the request was read: unknown -> in_doubt (%s, %s)",
       cairn_errname(rc), st);
    ok(strstr(err, "after the request was sent") != NULL, "message: %s", err);
    free(err);
    rc = scen_resume(&s);
    json_t *recs = settled_records(g_wlog, "path", "/w6b/garbage,ok");
    ok(rc == CAIRN_EINDOUBT && json_array_size(recs) == 1,
       "at most once: not sent again (%zu request)", json_array_size(recs));
    json_decref(recs);
    scen_close(&s);
}

static void t_timeout(void)
{
    scen s;
    char cfg[1024], st[32];
    snprintf(
        cfg, sizeof cfg,
        "{\"type\":\"webhook\",\"name\":\"slow\",\"url\":\"http://127.0.0.1:%d/w8/delay:2500\","
        "\"secret_env\":\"CAIRN_WEBHOOK_SECRET\",\"source\":\"source\",\"timeout_ms\":500}",
        g_wport);
    if (scen_open(&s, "w_timeout", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_timeout: setup");
        scen_close(&s);
        return;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = scen_run(&s, "x");
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    char *err = step_error(&s, "notify.slow");
    ok(rc == CAIRN_EINDOUBT && strcmp(task_status(&s, st, sizeof st), "in_doubt") == 0 &&
           secs < 2.4,
       "answer slower than timeout_ms: unknown -> in_doubt after %.2f s (%s)", secs,
       cairn_errname(rc));
    ok(strstr(err, "after the request was sent") && strstr(err, "timed out"), "message: %s", err);
    free(err);
    json_t *recs = wait_records(g_wlog, "path", "/w8/delay:2500", 1);
    ok(json_array_size(recs) == 1, "the receiver did get it once");
    json_decref(recs);
    scen_close(&s);
}

static void t_refused(void)
{
    scen s;
    char cfg[1024], st[32];
    snprintf(cfg, sizeof cfg,
             "{\"type\":\"webhook\",\"name\":\"gone\",\"url\":\"http://127.0.0.1:%d/x?token=abc\","
             "\"secret_env\":\"CAIRN_WEBHOOK_SECRET\",\"source\":\"source\"}",
             g_refused_port);
    if (scen_open(&s, "w_refused", &LATER, cfg, NULL) != 0) {
        ok(0, "w_refused: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.gone");
    ok(rc == CAIRN_ETRANSIENT && strcmp(task_status(&s, st, sizeof st), "failed") == 0,
       "connection refused: transient (%s)", cairn_errname(rc));
    ok(strstr(err, "nothing was delivered") && strstr(err, "127.0.0.1") &&
           !strstr(err, "token=abc"),
       "message names the URL without its query: %s", err);
    free(err);
    scen_close(&s);
}

/* A listener whose accept queue is full drops new SYNs: a connect that never completes. */
static void t_connect_timeout(void)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), cs[4] = {-1, -1, -1, -1};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, 0) != 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) != 0) {
        ok(0, "w_connect_timeout: listener");
        return;
    }
    for (int i = 0; i < 4; i++) { /* fill the queue (backlog 0 holds one or two) */
        cs[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(cs[i], (struct sockaddr *)&sa, sizeof sa);
    }
    usleep(100000);
    scen s;
    char cfg[1024], st[32];
    snprintf(cfg, sizeof cfg,
             "{\"type\":\"webhook\",\"name\":\"full\",\"url\":\"http://127.0.0.1:%d/x\","
             "\"secret_env\":\"CAIRN_WEBHOOK_SECRET\",\"source\":\"source\","
             "\"connect_timeout_ms\":300}",
             ntohs(sa.sin_port));
    if (scen_open(&s, "w_connect_timeout", &LATER, cfg, NULL) == 0) {
        int rc = scen_run(&s, "x");
        char *err = step_error(&s, "notify.full");
        ok(rc == CAIRN_ETRANSIENT && strcmp(task_status(&s, st, sizeof st), "failed") == 0 &&
               strstr(err, "nothing was delivered"),
           "connect timeout: transient: %s", err);
        free(err);
    } else {
        ok(0, "w_connect_timeout: setup");
    }
    scen_close(&s);
    for (int i = 0; i < 4; i++)
        if (cs[i] >= 0)
            close(cs[i]);
    close(ls);
}

static void t_two_targets(void)
{
    scen s;
    char c1[1024], c2[1024];
    webhook_cfg(c1, sizeof c1, "a", "/w10a/ok", NULL);
    webhook_cfg(c2, sizeof c2, "b", "/w10b/500,ok", NULL);
    if (scen_open(&s, "w_two", &LATER, c1, c2) != 0) {
        ok(0, "w_two: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    json_t *ra = wait_records(g_wlog, "path", "/w10a/ok", 1);
    json_t *rb = wait_records(g_wlog, "path", "/w10b/500,ok", 1);
    ok(rc == CAIRN_ETRANSIENT && json_array_size(ra) == 1 && json_array_size(rb) == 1,
       "two targets: a delivered, b failed transiently (%s)", cairn_errname(rc));
    ok(strcmp(rec_str(ra, 0, "headers", "webhook-id"), rec_str(rb, 0, "headers", "webhook-id")) !=
           0,
       "each target has its own delivery ID");
    json_decref(ra), json_decref(rb);
    rc = scen_resume(&s);
    ra = settled_records(g_wlog, "path", "/w10a/ok");
    rb = wait_records(g_wlog, "path", "/w10b/500,ok", 2);
    ok(rc == 0 && json_array_size(ra) == 1 && json_array_size(rb) == 2,
       "retry: b delivered, a NOT resent (a %zu, b %zu)", json_array_size(ra), json_array_size(rb));
    json_decref(ra), json_decref(rb);
    scen_close(&s);
}

static void t_bad_source(void)
{
    scen s;
    char cfg[1024], st[32];
    snprintf(cfg, sizeof cfg,
             "{\"type\":\"webhook\",\"name\":\"x\",\"url\":\"http://127.0.0.1:%d/w11/ok\","
             "\"secret_env\":\"CAIRN_WEBHOOK_SECRET\"}",
             g_wport); /* source defaults to "postprocess", which this graph lacks */
    if (scen_open(&s, "w_source", &INLINE, cfg, NULL) != 0) {
        ok(0, "w_source: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.x");
    json_t *recs = records(g_wlog, "path", "/w11/ok");
    ok(rc == CAIRN_EDEAD && strcmp(task_status(&s, st, sizeof st), "dead") == 0 &&
           strstr(err, "'postprocess' is not a dependency") && json_array_size(recs) == 0,
       "a source that is not a dependency: permanent, nothing sent: %s", err);
    free(err);
    json_decref(recs);
    scen_close(&s);
}

/* ------------------------------------------------------------------ email scenarios */

static void email_cfg(char *out, size_t n, const char *name, int port, const char *to,
                      const char *extra)
{
    snprintf(out, n,
             "{\"type\":\"email\",\"name\":\"%s\",\"url\":\"smtp://127.0.0.1:%d\","
             "\"from\":\"cairn@example.com\",\"to\":[\"%s\"],"
             "\"subject\":\"Description ready: {{task}}\","
             "\"body\":\"{{result.text}}\\n-- {{delivery_id}} ({{result.chars}} chars)\","
             "\"username\":\"" SMTP_USER "\",\"password_env\":\"CAIRN_TEST_SMTP_PASSWORD\","
             "\"connect_timeout_ms\":2000,\"timeout_ms\":5000,\"source\":\"source\"%s%s}",
             name, port, to, extra ? "," : "", extra ? extra : "");
}

/* The value of header `name` in a raw message (first occurrence, unfolded), or "". */
static void header(const char *msg, const char *name, char *out, size_t n)
{
    out[0] = 0;
    size_t nl = strlen(name);
    for (const char *p = msg; p && *p; p = strstr(p, "\r\n") ? strstr(p, "\r\n") + 2 : NULL) {
        if (p[0] == '\r' && p[1] == '\n')
            return; /* end of headers */
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, "\r\n");
            snprintf(out, n, "%.*s", (int)k, v);
            return;
        }
    }
}

/* Decodes a base64 body (lines joined) into out. */
static size_t b64_body(const char *msg, char *out, size_t n)
{
    const char *b = strstr(msg, "\r\n\r\n");
    if (!b)
        return 0;
    char clean[8192];
    size_t k = 0;
    for (b += 4; *b && k < sizeof clean - 1; b++)
        if (*b != '\r' && *b != '\n')
            clean[k++] = *b;
    clean[k] = 0;
    if (k % 4 || k / 4 * 3 >= n)
        return 0;
    int got = EVP_DecodeBlock((unsigned char *)out, (unsigned char *)clean, (int)k);
    if (got < 0)
        return 0;
    size_t len = (size_t)got - (k && clean[k - 1] == '=') - (k > 1 && clean[k - 2] == '=');
    out[len] = 0;
    return len;
}

static void t_email_ok(void)
{
    scen s;
    char cfg[2048], st[32];
    email_cfg(cfg, sizeof cfg, "ops", g_sport, "ops@example.com", NULL);
    if (scen_open(&s, "e_ok", &INLINE, cfg, NULL) != 0) {
        ok(0, "e_ok: setup");
        scen_close(&s);
        return;
    }
    const char *text = "Gr\xc3\xbc\xc3\x9f"
                       "e \xe2\x9c\x93\nline two";
    int rc = scen_run(&s, text);
    ok(rc == 0 && strcmp(task_status(&s, st, sizeof st), "succeeded") == 0,
       "email: task succeeded (%s)", cairn_errname(rc));
    json_t *recs = wait_records(g_slog, "rcpt_tos", "ops@example.com", 1);
    ok(json_array_size(recs) == 1, "one message arrived (%zu)", json_array_size(recs));
    json_t *out = step_field(&s, "notify.ops", "output");
    const char *did = json_string_value(json_object_get(out, "delivery_id"));
    const char *msg = rec_str(recs, 0, "data", NULL);
    char h[512], want[512];
    snprintf(want, sizeof want, "<%s@cairn>", did ? did : "?");
    header(msg, "Message-ID", h, sizeof h);
    ok(did && strcmp(h, want) == 0, "Message-ID derived from the delivery ID: %s", h);
    ok(json_integer_value(json_object_get(out, "status")) == 250 &&
           strcmp(json_string_value(json_object_get(out, "message_id"))
                      ? json_string_value(json_object_get(out, "message_id"))
                      : "",
                  want) == 0,
       "step output {status 250, message_id}");
    header(msg, "Subject", h, sizeof h);
    snprintf(want, sizeof want, "Description ready: %s", s.task);
    ok(strcmp(h, want) == 0, "subject rendered: %s", h);
    header(msg, "From", h, sizeof h);
    ok(strcmp(h, "cairn@example.com") == 0, "From");
    header(msg, "To", h, sizeof h);
    ok(strcmp(h, "ops@example.com") == 0, "To");
    header(msg, "Date", h, sizeof h);
    ok(strlen(h) >= 29 && strstr(h, "+0000"), "Date: %s", h);
    header(msg, "Content-Type", h, sizeof h);
    ok(strcmp(h, "text/plain; charset=utf-8") == 0, "Content-Type: %s", h);
    header(msg, "MIME-Version", h, sizeof h);
    ok(strcmp(h, "1.0") == 0, "MIME-Version");
    header(msg, "Content-Transfer-Encoding", h, sizeof h);
    char body[4096];
    b64_body(msg, body, sizeof body);
    snprintf(want, sizeof want,
             "Gr\xc3\xbc\xc3\x9f"
             "e \xe2\x9c\x93\r\nline two\r\n-- %s (20 chars)\r\n",
             did ? did : "?");
    ok(strcmp(h, "base64") == 0 && strcmp(body, want) == 0, "UTF-8 body rendered (base64): %s",
       body);
    ok(strcmp(rec_str(recs, 0, "mail_from", NULL), "cairn@example.com") == 0 &&
           strcmp(rec_str(recs, 0, "auth_user", NULL), SMTP_USER) == 0,
       "envelope sender, and AUTH as the configured user");
    json_decref(out), json_decref(recs);
    scen_close(&s);
}

static void t_email_451(void)
{
    scen s;
    char cfg[2048], st[32];
    email_cfg(cfg, sizeof cfg, "ops", g_sport, "plan.451.ok@example.com", NULL);
    if (scen_open(&s, "e_451", &LATER, cfg, NULL) != 0) {
        ok(0, "e_451: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "plain ascii");
    char *err = step_error(&s, "notify.ops");
    ok(rc == CAIRN_ETRANSIENT && strcmp(task_status(&s, st, sizeof st), "failed") == 0 &&
           strstr(err, "SMTP 451"),
       "SMTP 451: transient: %s", err);
    free(err);
    rc = scen_resume(&s);
    json_t *recs = wait_records(g_slog, "rcpt_tos", "plan.451.ok@example.com", 2);
    char m1[256], m2[256], cte[64];
    header(rec_str(recs, 0, "data", NULL), "Message-ID", m1, sizeof m1);
    header(rec_str(recs, 1, "data", NULL), "Message-ID", m2, sizeof m2);
    header(rec_str(recs, 1, "data", NULL), "Content-Transfer-Encoding", cte, sizeof cte);
    ok(rc == 0 && json_array_size(recs) == 2 && m1[0] && strcmp(m1, m2) == 0,
       "retried later with the same Message-ID %s", m2);
    ok(strcmp(cte, "7bit") == 0 &&
           strstr(rec_str(recs, 1, "data", NULL), "\r\n\r\nplain ascii\r\n"),
       "an ASCII body goes as 7bit text");
    json_decref(recs);
    scen_close(&s);
}

static void t_email_550(void)
{
    scen s;
    char cfg[2048], st[32];
    email_cfg(cfg, sizeof cfg, "ops", g_sport, "plan.550@example.com", NULL);
    if (scen_open(&s, "e_550", &INLINE, cfg, NULL) != 0) {
        ok(0, "e_550: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.ops");
    json_t *recs = settled_records(g_slog, "rcpt_tos", "plan.550@example.com");
    ok(rc == CAIRN_EDEAD && strcmp(task_status(&s, st, sizeof st), "dead") == 0 &&
           strstr(err, "SMTP 550") && json_array_size(recs) == 1,
       "SMTP 550: permanent, dead, not retried: %s", err);
    free(err);
    json_decref(recs);
    scen_close(&s);
}

static void t_email_timeout(void)
{
    scen s;
    char cfg[2048], st[32];
    /* defaults for subject and body; no AUTH; a short timeout */
    snprintf(cfg, sizeof cfg,
             "{\"type\":\"email\",\"name\":\"ops\",\"url\":\"smtp://127.0.0.1:%d\","
             "\"from\":\"cairn@example.com\",\"to\":\"plan.slow3000@example.com\","
             "\"timeout_ms\":800,\"source\":\"source\"}",
             g_sport);
    if (scen_open(&s, "e_timeout", &INLINE, cfg, NULL) != 0) {
        ok(0, "e_timeout: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.ops");
    json_t *recs = wait_records(g_slog, "rcpt_tos", "plan.slow3000@example.com", 1);
    ok(rc == CAIRN_EINDOUBT && strcmp(task_status(&s, st, sizeof st), "in_doubt") == 0 &&
           json_array_size(recs) == 1,
       "no reply after DATA: unknown -> in_doubt (%s)", cairn_errname(rc));
    ok(strstr(err, "after the message was sent") != NULL, "message: %s", err);
    free(err);
    json_decref(recs);
    scen_close(&s);
}

static void t_email_injection(void)
{
    scen s;
    char cfg[2048], st[32];
    snprintf(cfg, sizeof cfg,
             "{\"type\":\"email\",\"name\":\"ops\",\"url\":\"smtp://127.0.0.1:%d\","
             "\"from\":\"cairn@example.com\",\"to\":\"inject@example.com\","
             "\"subject\":\"Re: {{result.text}}\",\"body\":\"{{result}}\",\"source\":\"source\"}",
             g_sport);
    if (scen_open(&s, "e_inject", &INLINE, cfg, NULL) != 0) {
        ok(0, "e_inject: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "gr\xc3\xbc\xc3\x9f\r\nBcc: evil@example.com");
    json_t *recs = wait_records(g_slog, "rcpt_tos", "inject@example.com", 1);
    const char *msg = rec_str(recs, 0, "data", NULL);
    const char *end = strstr(msg, "\r\n\r\n");
    size_t hlen = end ? (size_t)(end - msg) : strlen(msg);
    ok(rc == 0 && json_array_size(recs) == 1 && !contains(msg, hlen, "\r\nBcc:") &&
           json_array_size(json_object_get(json_array_get(recs, 0), "rcpt_tos")) == 1,
       "a CR/LF in a template value cannot inject a header or a recipient");
    char h[512], dec[256] = "";
    header(msg, "Subject", h, sizeof h);
    if (strncmp(h, "=?UTF-8?B?", 10) == 0 && strstr(h + 10, "?=")) {
        char b64[256];
        size_t n = (size_t)(strstr(h + 10, "?=") - (h + 10));
        snprintf(b64, sizeof b64, "%.*s", (int)n, h + 10);
        int got = EVP_DecodeBlock((unsigned char *)dec, (unsigned char *)b64, (int)n);
        if (got >= 0)
            dec[got - (n && b64[n - 1] == '=') - (n > 1 && b64[n - 2] == '=')] = 0;
    }
    ok(strcmp(dec, "Re: gr\xc3\xbc\xc3\x9f  Bcc: evil@example.com") == 0,
       "non-ASCII subject as an RFC 2047 encoded word: %s -> %s", h, dec);
    json_decref(recs);
    (void)st;
    scen_close(&s);
}

static void t_email_starttls_missing(void)
{
    scen s;
    char cfg[2048], st[32];
    snprintf(cfg, sizeof cfg,
             "{\"type\":\"email\",\"name\":\"ops\",\"url\":\"smtp://127.0.0.1:%d\","
             "\"starttls\":true,\"from\":\"cairn@example.com\",\"to\":\"tls@example.com\","
             "\"username\":\"" SMTP_USER "\",\"password_env\":\"CAIRN_TEST_SMTP_PASSWORD\","
             "\"source\":\"source\"}",
             g_sport);
    if (scen_open(&s, "e_starttls", &INLINE, cfg, NULL) != 0) {
        ok(0, "e_starttls: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.ops");
    json_t *recs = records(g_slog, "rcpt_tos", "tls@example.com");
    ok(rc == CAIRN_EDEAD && strcmp(task_status(&s, st, sizeof st), "dead") == 0 &&
           json_array_size(recs) == 0,
       "starttls required but not offered: permanent, nothing sent in clear: %s", err);
    free(err);
    json_decref(recs);
    scen_close(&s);
}

static void t_email_refused(void)
{
    scen s;
    char cfg[2048], st[32];
    email_cfg(cfg, sizeof cfg, "ops", g_refused_port, "ops@example.com", NULL);
    if (scen_open(&s, "e_refused", &LATER, cfg, NULL) != 0) {
        ok(0, "e_refused: setup");
        scen_close(&s);
        return;
    }
    int rc = scen_run(&s, "x");
    char *err = step_error(&s, "notify.ops");
    ok(rc == CAIRN_ETRANSIENT && strcmp(task_status(&s, st, sizeof st), "failed") == 0 &&
           strstr(err, "nothing was delivered"),
       "SMTP connection refused: transient: %s", err);
    free(err);
    scen_close(&s);
}

/* ------------------------------------------------------------------ main */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static const char *smtp_python(void)
{
    static const char *cands[3];
    cands[0] = getenv("CAIRN_PYTHON");
    cands[1] = "python3";
    cands[2] = "/usr/bin/python3";
    for (int i = 0; i < 3; i++) {
        if (!cands[i])
            continue;
        char *argv[] = {(char *)cands[i], "-c", "import aiosmtpd", NULL};
        if (run_quiet(argv) == 0)
            return cands[i];
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s receiver.py smtp_sink.py\n", argv[0]);
        return 64;
    }
    signal(SIGPIPE, SIG_IGN);
    char *py_check[] = {"python3", "-c", "import http.server", NULL};
    if (run_quiet(py_check) != 0)
        tap_skip_all("python3 not found");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/cairn-notify-XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    setenv("CAIRN_WEBHOOK_SECRET", SECRET, 1);
    setenv("CAIRN_TEST_SMTP_PASSWORD", SMTP_PASS, 1);
    setenv("SMTP_SINK_AUTH", SMTP_USER ":" SMTP_PASS, 1);
    snprintf(g_wlog, sizeof g_wlog, "%s/webhooks.jsonl", g_tmp);
    snprintf(g_slog, sizeof g_slog, "%s/mail.jsonl", g_tmp);

    /* a port that refuses connections: bound, never listening */
    int rs = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (rs < 0 || bind(rs, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(rs, (struct sockaddr *)&sa, &sl) != 0)
        return 1;
    g_refused_port = ntohs(sa.sin_port);

    g_wpid = spawn_server("python3", argv[1], g_wlog, &g_wport);
    ok(g_wpid > 0, "HTTP receiver started on port %d", g_wport);
    if (g_wpid > 0) {
        t_delivery();
        t_500_then_ok();
        t_429();
        t_429_capped();
        t_304();
        t_echo_secret();
        t_410();
        t_408_inline();
        t_reset_at_most_once();
        t_reset_at_least_once();
        t_not_http_reply();
        t_timeout();
        t_refused();
        t_connect_timeout();
        t_two_targets();
        t_bad_source();
    }
    stop_server(g_wpid);

    const char *spy = smtp_python();
    if (!spy) {
        skip("email tests: python3-aiosmtpd is not installed");
    } else {
        g_spid = spawn_server(spy, argv[2], g_slog, &g_sport);
        ok(g_spid > 0, "SMTP server (aiosmtpd, %s) started on port %d", spy, g_sport);
        if (g_spid > 0) {
            t_email_ok();
            t_email_451();
            t_email_550();
            t_email_timeout();
            t_email_refused();
            t_email_injection();
            t_email_starttls_missing();
        }
        stop_server(g_spid);
    }
    close(rs);
    if (!getenv("CAIRN_KEEP_TMP"))
        nftw(g_tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    else
        diag("kept %s", g_tmp);
    return tap_done();
}
