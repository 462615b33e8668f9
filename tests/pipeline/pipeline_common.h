/* pipeline_common.h - shared helpers of the built-in pipeline's end-to-end tests (static; include
 * once per program).
 *
 * The tests drive the real `cairn` binary with --config against real LMDB stores in a temp
 * folder, a generated model (cairn-mkmodel), the real webhook receiver (tests/notify/receiver.py,
 * which verifies the Standard Webhooks signature itself) and, where python3-aiosmtpd is
 * installed, the real SMTP sink (tests/notify/smtp_sink.py), all on loopback. Effects are counted
 * on the receiving side: the receiver's and the sink's JSONL logs and the outbox folder.
 *
 * Every scenario builds its configuration from pl_config() and edits the jansson object, so a
 * test says only what differs from the sample pipeline (examples/pipeline/config.json).
 *
 * Usage of a test program: PROG MKMODEL RECEIVER.py SMTP_SINK.py (meson passes them).
 */
#ifndef CAIRN_TEST_PIPELINE_COMMON_H
#define CAIRN_TEST_PIPELINE_COMMON_H

#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#define PL_SECRET "whsec_Y2Fpcm4tcGlwZWxpbmUtdGVzdC1zZWNyZXQtMTIzNDU2"
#define PL_CMD_MS 180000
#define PL_TASK "acme_mug-350"

static struct {
    const char *cairn, *mkmodel, *receiver_py, *smtp_py;
    char *tmp, *index, *task_json;
    char *rlog, *slog;
    int rport, sport;
    pid_t rpid, spid;
    const char *smtp_python; /* NULL: no aiosmtpd, email parts skipped */
} pl;

/* ------------------------------------------------------------------ processes */

/* The path of a program: as is when it contains '/', else the first match on $PATH (tu_run
 * and tu_spawn exec a path, not a name). malloc'd, or NULL. */
static inline char *pl_which(const char *name)
{
    if (strchr(name, '/'))
        return access(name, X_OK) == 0 ? strdup(name) : NULL;
    const char *path = tu_env("PATH", "/usr/local/bin:/usr/bin:/bin");
    while (*path) {
        size_t n = strcspn(path, ":");
        char *p = tu_fmt("%.*s/%s", (int)n, path, name);
        if (n && access(p, X_OK) == 0)
            return p;
        free(p);
        path += n + (path[n] == ':');
    }
    return NULL;
}

static inline int pl_run_quiet(const char *const *argv)
{
    tu_result r;
    int rc = tu_run(&r, argv, NULL, NULL, 0, 60000);
    tu_result_free(&r);
    return rc;
}

/* Starts `python script log` in its own process group; reads the port it prints. */
static inline pid_t pl_spawn_server(const char *python, const char *script, const char *log,
                                    const char *portfile, int *port)
{
    const char *argv[] = {python, script, log, NULL};
    pid_t pid = tu_spawn(argv, NULL, portfile, NULL);
    *port = 0;
    for (int64_t end = tu_now_ms() + 20000; pid > 0 && tu_now_ms() < end; tu_sleep_ms(20)) {
        char *s = tu_read_file(portfile, NULL);
        if (s && strchr(s, '\n'))
            *port = atoi(s);
        free(s);
        if (*port > 0 || tu_poll_exit(pid, NULL))
            break;
    }
    if (*port <= 0 && pid > 0) {
        tu_kill_wait(pid);
        return -1;
    }
    return pid;
}

static inline const char *pl_find_smtp_python(void)
{
    const char *cands[] = {getenv("CAIRN_PYTHON"), "python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        char *py = cands[i] && *cands[i] ? pl_which(cands[i]) : NULL;
        const char *argv[] = {py, "-c", "import aiosmtpd", NULL};
        if (py && pl_run_quiet(argv) == 0)
            return py; /* kept for the whole run */
        free(py);
    }
    return NULL;
}

/* cairn ARGS... (NULL-terminated) with the webhook secret in the environment. */
static inline int pl_cairn(tu_result *r, ...)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = pl.cairn;
    va_list ap;
    va_start(ap, r);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 62)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    const char *env[] = {"CAIRN_WEBHOOK_SECRET=" PL_SECRET, NULL};
    return tu_run(r, argv, env, NULL, 0, PL_CMD_MS);
}

/* `cairn run` of the sample task (ID from tenant,product_id) under a configuration, with up to
 * two more arguments (NULL for none). */
static inline int pl_run(tu_result *r, const char *store, const char *config, const char *x1,
                         const char *x2)
{
    return pl_cairn(r, "run", "--store", store, "--config", config, "--graph", "default",
                    "--task-from", "tenant,product_id", "--input", pl.task_json, "--max-attempts",
                    "100", x1, x2, (const char *)NULL);
}

/* `show ID --json` parsed, or NULL. */
static inline json_t *pl_show(const char *store, const char *id)
{
    tu_result r;
    int rc = pl_cairn(&r, "show", "--store", store, id, "--json", (const char *)NULL);
    json_t *j =
        rc == 0 ? json_loads(r.out, JSON_ALLOW_NUL, NULL) : NULL; /* raw tokens can be NUL */
    if (rc == 0 && !j)
        diag("show --json does not parse: %s", r.out);
    tu_result_free(&r);
    return j;
}

static inline json_t *pl_step(json_t *task, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(task, "steps"), i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "name")), name) == 0)
            return s;
    }
    return NULL;
}

static inline const char *pl_str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static inline const char *pl_step_status(json_t *task, const char *name)
{
    json_t *s = pl_step(task, name);
    return s ? pl_str(s, "status") : "-";
}

/* output.<field> of step `name` as a string ("" if absent). */
static inline const char *pl_out(json_t *task, const char *name, const char *field)
{
    json_t *s = pl_step(task, name);
    return s ? pl_str(json_object_get(s, "output"), field) : "";
}

static inline long long pl_out_int(json_t *task, const char *name, const char *field)
{
    json_t *s = pl_step(task, name);
    return s ? json_integer_value(json_object_get(json_object_get(s, "output"), field)) : -1;
}

static inline char *pl_oneline(const char *s)
{
    static char buf[4][600];
    static int k;
    char *b = buf[k++ & 3];
    snprintf(b, sizeof buf[0], "%s", s ? s : "");
    for (char *p = b; *p; p++)
        if (*p == '\n')
            *p = ' ';
    return b;
}

/* ------------------------------------------------------------------ configuration */

/* The sample pipeline: bm25 over the shared index, `model`, an outbox folder, one webhook
 * target "shop" at `hook_path` on the receiver. */
static inline json_t *pl_config(const char *model, const char *outbox, const char *hook_path)
{
    char *url = tu_fmt("http://127.0.0.1:%d%s", pl.rport, hook_path);
    json_t *c = json_pack(
        "{s:{s:s, s:s, s:[s,s], s:i}, s:{s:s, s:s, s:i, s:f, s:f, s:[s], s:i},"
        " s:{s:i, s:[s], s:s, s:s}, s:[{s:s, s:s, s:s, s:s, s:i}]}",
        "retrieve", "type", "bm25", "index", pl.index, "query_fields", "title", "keywords", "top_k",
        3, "generate", "model", model, "prompt",
        "Write a short product description for {{title}}.\nFacts:\n{{context}}\nDescription:",
        "max_tokens", 48, "temperature", 0.7, "top_p", 0.95, "stop", "\n\n", "progress_every", 8,
        "postprocess", "max_chars", 400, "banned", "guarantee", "banned_action", "redact", "outbox",
        outbox, "notify", "type", "webhook", "name", "shop", "url", url, "secret_env",
        "CAIRN_WEBHOOK_SECRET", "timeout_ms", 5000);
    free(url);
    return c;
}

static inline json_t *pl_section(json_t *cfg, const char *name)
{
    return json_object_get(cfg, name);
}

/* Adds a webhook target (name, path on the receiver, delivery, timeout). */
static inline void pl_add_hook(json_t *cfg, const char *name, const char *path,
                               const char *delivery, int timeout_ms)
{
    char *url = tu_fmt("http://127.0.0.1:%d%s", pl.rport, path);
    json_array_append_new(json_object_get(cfg, "notify"),
                          json_pack("{s:s, s:s, s:s, s:s, s:i, s:s}", "type", "webhook", "name",
                                    name, "url", url, "secret_env", "CAIRN_WEBHOOK_SECRET",
                                    "timeout_ms", timeout_ms, "delivery", delivery));
    free(url);
}

/* Adds an email target "ops" to `rcpt` on the SMTP sink. */
static inline void pl_add_email(json_t *cfg, const char *rcpt)
{
    char *url = tu_fmt("smtp://127.0.0.1:%d", pl.sport);
    json_array_append_new(json_object_get(cfg, "notify"),
                          json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "type", "email", "name",
                                    "ops", "url", url, "from", "cairn@example.com", "to", rcpt,
                                    "timeout_ms", 10000));
    free(url);
}

/* Writes the configuration to dir/name (returns the malloc'd path) and frees it. */
static inline char *pl_write_config(json_t *cfg, const char *dir, const char *name)
{
    char *p = tu_fmt("%s/%s", dir, name);
    if (json_dump_file(cfg, p, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
        diag("cannot write %s", p);
    json_decref(cfg);
    return p;
}

/* ------------------------------------------------------------------ receiving side */

/* The records of a JSONL log whose string field `key` (or the first element of an array field)
 * equals `want` (NULL: all records). */
static inline json_t *pl_log(const char *log, const char *key, const char *want)
{
    json_t *out = json_array();
    FILE *f = fopen(log, "r");
    if (!f)
        return out;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *r = json_loads(line, 0, NULL);
        if (!r)
            continue;
        json_t *v = json_object_get(r, key);
        if (json_is_array(v))
            v = json_array_get(v, 0);
        if (!want || (json_is_string(v) && strcmp(json_string_value(v), want) == 0))
            json_array_append(out, r);
        json_decref(r);
    }
    free(line);
    fclose(f);
    return out;
}

static inline size_t pl_hook_count(const char *path)
{
    json_t *a = pl_log(pl.rlog, "path", path);
    size_t n = json_array_size(a);
    json_decref(a);
    return n;
}

/* A header line's value from a raw message ("" if absent; static buffer). */
static inline const char *pl_mail_header(const char *data, const char *name)
{
    static char v[512];
    size_t n = strlen(name);
    v[0] = 0;
    for (const char *p = data; p && *p;) {
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            p += n + 1;
            while (*p == ' ')
                p++;
            size_t l = strcspn(p, "\r\n");
            snprintf(v, sizeof v, "%.*s", (int)l, p);
            return v;
        }
        if (*p == '\r' || *p == '\n')
            break; /* end of the header section */
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return v;
}

/* Checks the outbox folder: exactly one `<task>.json`, valid JSON whose task and text are as
 * expected. `allow_tmp`: a leftover `.<task>.json.tmp` of a killed publisher is
 * tolerated (the next publish of the task reuses it) (they are never read: a reader only opens
 * `<task>.json`, which rename() swaps in whole); anything else is an error. Returns the number of
 * problems (each reported). */
static inline int pl_check_outbox(const char *dir, const char *task, const char *text,
                                  int allow_tmp, const char *what)
{
    int bad = 0, finals = 0, tmps = 0;
    char *final = tu_fmt("%s.json", task), *tmp_prefix = tu_fmt(".%s.json.tmp", task);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!strcmp(e->d_name, final)) {
            finals++;
        } else if (!strcmp(e->d_name, tmp_prefix)) {
            tmps++;
        } else {
            diag("%s: unexpected file in the outbox: %s", what, e->d_name);
            bad++;
        }
    }
    if (d)
        closedir(d);
    if (tmps && !allow_tmp) {
        diag("%s: %d temporary file(s) left in the outbox", what, tmps);
        bad++;
    } else if (tmps) {
        diag("%s: %d temporary file(s) of a killed publisher left in the outbox (never read)", what,
             tmps);
    }
    if (finals != 1) {
        diag("%s: %d files named %s in the outbox", what, finals, final);
        bad++;
    } else {
        char *p = tu_fmt("%s/%s", dir, final);
        json_error_t je;
        json_t *j = json_load_file(p, 0, &je);
        if (!j) {
            diag("%s: %s is not valid JSON: %s at %d:%d", what, p, je.text, je.line, je.column);
            bad++;
        } else {
            if (strcmp(pl_str(j, "task"), task) != 0) {
                diag("%s: outbox task is '%s'", what, pl_str(j, "task"));
                bad++;
            }
            if (text && strcmp(pl_str(j, "text"), text) != 0) {
                diag("%s: outbox text differs from the postprocess output", what);
                bad++;
            }
        }
        json_decref(j);
        free(p);
    }
    free(final);
    free(tmp_prefix);
    return bad;
}

/* ------------------------------------------------------------------ setup */

/* Parses argv, starts the receiver (and the SMTP sink when aiosmtpd is there), builds the shared
 * index and the sample task. Skips the whole program when something essential is missing. */
static inline void pl_setup(int argc, char **argv, const char *tag)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 4) {
        fprintf(stderr, "usage: %s MKMODEL RECEIVER.py SMTP_SINK.py\n", argv[0]);
        exit(64);
    }
    pl.cairn = getenv("CAIRN_BIN");
    const char *root = getenv("CAIRN_SOURCE_ROOT");
    if (!pl.cairn || !*pl.cairn || !root)
        tap_skip_all("CAIRN_BIN / CAIRN_SOURCE_ROOT not set (run through meson test)");
    pl.mkmodel = argv[1];
    pl.receiver_py = argv[2];
    pl.smtp_py = argv[3];
    char *python = pl_which("python3");
    const char *py[] = {python, "-c", "import http.server", NULL};
    if (!python || pl_run_quiet(py) != 0)
        tap_skip_all("python3 not found");
    pl.tmp = tu_mkdtemp(tag);
    pl.rlog = tu_fmt("%s/webhooks.jsonl", pl.tmp);
    pl.slog = tu_fmt("%s/mail.jsonl", pl.tmp);
    setenv("CAIRN_WEBHOOK_SECRET", PL_SECRET, 1); /* the receiver verifies with it */
    char *pf = tu_fmt("%s/receiver.port", pl.tmp);
    pl.rpid = pl_spawn_server(python, pl.receiver_py, pl.rlog, pf, &pl.rport);
    free(pf);
    free(python);
    if (pl.rpid <= 0)
        tap_skip_all("the webhook receiver did not start");
    pl.smtp_python = pl_find_smtp_python();
    if (pl.smtp_python) {
        pf = tu_fmt("%s/smtp.port", pl.tmp);
        pl.spid = pl_spawn_server(pl.smtp_python, pl.smtp_py, pl.slog, pf, &pl.sport);
        free(pf);
        if (pl.spid <= 0) {
            diag("the SMTP sink did not start: email parts skipped");
            pl.smtp_python = NULL;
        }
    }
    /* one BM25 index for all stores: retrieve.index points at it */
    char *corpus = tu_fmt("%s/examples/pipeline/corpus.jsonl", root);
    char *idx_store = tu_fmt("%s/idx", pl.tmp);
    tu_result r;
    int rc = pl_cairn(&r, "index", "--store", idx_store, "--corpus", corpus, (const char *)NULL);
    if (rc != 0) {
        printf("Bail out! cairn index failed (%d): %s\n", rc, r.err);
        exit(1);
    }
    tu_result_free(&r);
    pl.index = tu_fmt("%s/index", idx_store);
    free(corpus);
    free(idx_store);
    pl.task_json = tu_fmt("%s/task.json", pl.tmp);
    const char *task = "{\"tenant\": \"acme\", \"product_id\": \"mug-350\", \"title\": \"Ceramic "
                       "mug 350 ml\", \"keywords\": [\"stoneware\", \"mug\", \"dishwasher\"]}";
    tu_write_file(pl.task_json, task, strlen(task));
}

/* Writes a model with cairn-mkmodel (extra arguments NULL-terminated); returns its path. */
static inline char *pl_model(const char *name, ...)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = pl.mkmodel;
    char *path = tu_fmt("%s/%s", pl.tmp, name);
    argv[n++] = path;
    va_list ap;
    va_start(ap, name);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 30)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    tu_result r;
    int rc = tu_run(&r, argv, NULL, NULL, 0, 120000);
    if (rc != 0) {
        printf("Bail out! cairn-mkmodel %s failed (%d): %s\n", name, rc, r.err);
        exit(1);
    }
    tu_result_free(&r);
    return path;
}

/* A fresh folder under the test's temp dir. */
static inline char *pl_dir(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline char *pl_dir(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *name = NULL;
    if (vasprintf(&name, fmt, ap) < 0)
        exit(2);
    va_end(ap);
    char *p = tu_fmt("%s/%s", pl.tmp, name);
    free(name);
    mkdir(p, 0755);
    return p;
}

static inline void pl_teardown(void)
{
    if (pl.rpid > 0)
        tu_kill_wait(pl.rpid);
    if (pl.spid > 0)
        tu_kill_wait(pl.spid);
    if (!getenv("CAIRN_KEEP_TMP"))
        tu_rm_rf(pl.tmp);
    else
        diag("kept %s", pl.tmp);
}

#endif
