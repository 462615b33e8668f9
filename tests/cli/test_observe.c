/* test_observe.c - what an operator sees (issue 19 §4): the log formats, -q and -v, the runner's
 * events, the progress line on a real terminal, and `stats --prometheus`.
 *
 * Everything runs cairn-ledger and cairn-test-graphs as real processes on real stores. JSON logs
 * are checked for shape by parsing every stderr line with jansson (a line that does not parse,
 * for instance two workers' lines run into one, fails); the progress line by running the command
 * with its stderr on a pseudo-terminal (openpty) and reading what it drew; the metrics by
 * parsing the OpenMetrics text and comparing its figures with `stats --json` and with the
 * tasks this test made. Nothing is judged on timing.
 */
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_common.h"

static char *D;

/* Every line of text parsed as a JSON object into an array; NULL (with a diagnostic) when one
 * does not parse or is not an object. */
static json_t *json_lines(const char *text)
{
    json_t *a = json_array();
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_error_t e;
        json_t *j = json_loadb(p, n, 0, &e);
        if (!json_is_object(j)) {
            diag("not a JSON object line: %.*s (%s)", (int)n, p, e.text);
            json_decref(j);
            json_decref(a);
            return NULL;
        }
        json_array_append_new(a, j);
        p += n + (nl ? 1 : 0);
    }
    return a;
}

/* "2026-12-02T17:09:05.123Z" */
static int iso_time_ok(const char *s)
{
    int y, mo, d, h, mi, sec, ms;
    char z;
    return s && strlen(s) == 24 &&
           sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d, &h, &mi, &sec, &ms, &z) == 8 &&
           z == 'Z' && y >= 2020 && mo >= 1 && mo <= 12;
}

/* A log line's required fields: time, level (one of the five), prog, event, message. */
static int log_shape_ok(const json_t *j)
{
    static const char *const levels[] = {"error", "warn", "note", "info", "debug"};
    const char *lv = jstr(j, "level");
    int level_ok = 0;
    for (size_t i = 0; lv && i < 5; i++)
        level_ok |= !strcmp(lv, levels[i]);
    return iso_time_ok(jstr(j, "time")) && level_ok && jstr(j, "prog") && jstr(j, "event") &&
           jstr(j, "message");
}

static char *write_line_file(const tu_scene *s, const char *name, const char *text, int work_ms,
                             const char *fail)
{
    char *in = ledger_input(text, work_ms, s->trace, s->ledger, fail);
    char *p = write_input(s->dir, name, in);
    free(in);
    return p;
}

/* ------------------------------------------------------------------ the log formats */

static void t_json_errors(void)
{
    tu_scene s = tu_scene_new(D, "json-errors");
    tu_result r;
    char *missing = tu_fmt("%s/no-such-input.json", s.dir);
    int rc = cli(&r, LEDGER, s.store, "run", "--graph", "ledger", "--task", "t1", "--input",
                 missing, "--log-format", "json", NULL);
    json_t *lines = json_lines(r.err);
    json_t *j = json_array_get(lines, 0);
    ok(rc == 66 && json_array_size(lines) == 1 && log_shape_ok(j),
       "run with a missing input, --log-format json: exit 66 and one JSON line (%s)",
       oneline(r.err));
    ok(j && !strcmp(jstr(j, "level"), "error") && !strcmp(jstr(j, "prog"), "cairn-ledger") &&
           jstr(j, "cmd") && !strcmp(jstr(j, "cmd"), "run") &&
           tu_contains(jstr(j, "message"), "no-such-input.json"),
       "the line says level error, prog cairn-ledger, cmd run, and names the file");
    json_decref(lines);
    tu_result_free(&r);

    const char *env[] = {"CAIRN_LOG_FORMAT=json", NULL};
    rc = cli_env(&r, env, LEDGER, s.store, "run", "--graph", "ledger", "--task", "t1", "--input",
                 missing, NULL);
    lines = json_lines(r.err);
    ok(rc == 66 && json_array_size(lines) == 1 && log_shape_ok(json_array_get(lines, 0)),
       "CAIRN_LOG_FORMAT=json gives the same JSON line");
    json_decref(lines);
    tu_result_free(&r);

    rc = cli_env(&r, env, LEDGER, s.store, "run", "--graph", "ledger", "--task", "t1", "--input",
                 missing, "--log-format", "text", NULL);
    ok(rc == 66 && !strncmp(r.err, "cairn-ledger run: ", 18) && !strchr(r.err, '{'),
       "--log-format text overrides the environment: the text format (%s)", first_line(r.err));
    tu_result_free(&r);

    rc = cli(&r, LEDGER, s.store, "run", "--graph", "ledger", "--task", "t1", "--input", missing,
             NULL);
    ok(rc == 66 && !strncmp(r.err, "cairn-ledger run: ", 18) &&
           tu_contains(r.err, "(CAIRN_ENOENT)"),
       "the default is the text format as before: 'cairn-ledger run: ... (CAIRN_ENOENT)'");
    tu_result_free(&r);

    rc = cli(&r, LEDGER, s.store, "stats", "--log-format", "yaml", NULL);
    ok(rc == 64 && tu_contains(r.err, "--log-format must be text or json"),
       "--log-format yaml: usage error 64 (%s)", first_line(r.err));
    tu_result_free(&r);

    rc = cli(&r, LEDGER, s.store, "list", "--bogus", "--log-format", "json", NULL);
    lines = json_lines(r.err);
    j = json_array_get(lines, 0);
    ok(rc == 64 && json_array_size(lines) == 1 && j && !strcmp(jstr(j, "event"), "usage"),
       "a usage error in JSON: one line, event usage, no usage text (%s)", oneline(r.err));
    json_decref(lines);
    tu_result_free(&r);

    rc = cli(&r, LEDGER, NULL, "frobnicate", NULL);
    ok(rc == 64 && tu_contains(r.err, "unknown command 'frobnicate'"),
       "an unknown command still says so (64)");
    tu_result_free(&r);
    free(missing);
    tu_scene_free(&s);
}

/* -v: the runner's events, in order, each with its task and step; -q: errors only. */
static void t_verbose_events(void)
{
    tu_scene s = tu_scene_new(D, "verbose");
    char *in = write_line_file(&s, "in.json", "a mug", 0, NULL);
    tu_result r;
    int rc = cli(&r, LEDGER, s.store, "run", "--graph", "ledger", "--task", "v1", "--input", in,
                 "-v", "--log-format", "json", NULL);
    json_t *lines = json_lines(r.err);
    size_t n = json_array_size(lines);
    const char *want[][2] = {{"task_started", ""},    {"step_done", "parse"},
                             {"step_done", "work"},   {"step_intent", "append"},
                             {"step_done", "append"}, {"task_succeeded", ""}};
    int order = lines && n == 6;
    int shape = lines != NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *j = json_array_get(lines, i);
        shape &= log_shape_ok(j) && !strcmp(jstr(j, "level"), "info") && jstr(j, "task") &&
                 !strcmp(jstr(j, "task"), "v1");
        const char *step = jstr(j, "step");
        if (order && i < 6)
            order &= !strcmp(jstr(j, "event"), want[i][0]) && !strcmp(step ? step : "", want[i][1]);
    }
    ok(rc == 0 && order,
       "run -v --log-format json: started, parse, work, intent, append, "
       "succeeded, in order (%zu lines)",
       n);
    ok(shape, "every event line has time, level info, prog, event, task v1, message");
    json_decref(lines);
    tu_result_free(&r);

    rc = cli(&r, LEDGER, s.store, "run", "--graph", "ledger", "--task", "v2", "--input", in, "-v",
             NULL);
    ok(rc == 0 && tu_contains(r.err, "cairn-ledger run: task v2: step work done in ") &&
           tu_contains(r.err, "cairn-ledger run: task v2 succeeded"),
       "run -v in text: a line a step (%s)", oneline(r.err));
    tu_result_free(&r);

    rc = cli(&r, LEDGER, s.store, "run", "--graph", "ledger", "--task", "v3", "--input", in, NULL);
    ok(rc == 0 && r.err[0] == 0, "run without -v says nothing on stderr");
    tu_result_free(&r);

    /* a transient failure that outlasts the inline wait: task_failed, at warn */
    char *flaky = write_line_file(&s, "flaky.json", "flaky", 0, "transient:1");
    rc = cli(&r, LEDGER, s.store, "run", "--graph", "ledger", "--task", "v4", "--input", flaky,
             "--inline-wait-ms", "0", "-v", "--log-format", "json", NULL);
    lines = json_lines(r.err);
    json_t *last = NULL;
    for (size_t i = 0; i < json_array_size(lines); i++)
        if (!strcmp(jstr(json_array_get(lines, i), "event"), "task_failed"))
            last = json_array_get(lines, i);
    ok(rc == 75 && last && !strcmp(jstr(last, "level"), "warn") &&
           !strcmp(jstr(last, "step"), "work") &&
           tu_contains(jstr(last, "message"), "asked to fail transiently"),
       "a transient failure: a task_failed line at warn naming step work (rc %d)", rc);
    json_decref(lines);
    tu_result_free(&r);

    /* -q: the consume summary (a note) is gone, a bad line's error stays */
    char *stream = tu_fmt("%s/stream.jsonl", s.dir);
    char *good = ledger_input("q1", 0, s.trace, s.ledger, NULL);
    char *text = tu_fmt("{\"id\": \"q1\", \"input\": %s}\n{not json\n", good);
    tu_write_file(stream, text, strlen(text));
    rc = cli(&r, LEDGER, s.store, "consume", "--graph", "ledger", stream, NULL);
    ok(rc == 69 && tu_contains(r.err, "line(s): 1 succeeded"),
       "consume: the summary is on stderr by default (%s)", oneline(r.err));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, s.store, "consume", "--graph", "ledger", stream, "-q", NULL);
    ok(rc == 69 && !tu_contains(r.err, "line(s):") && tu_contains(r.err, "line 2"),
       "consume -q: no summary, the bad line's error stays (%s)", oneline(r.err));
    tu_result_free(&r);
    free(stream), free(good), free(text), free(flaky), free(in);
    tu_scene_free(&s);
}

/* Four workers, each logging every step of its tasks in JSON: every line must parse. */
static void t_json_workers(void)
{
    tu_scene s = tu_scene_new(D, "workers");
    char *path = tu_fmt("%s/stream.jsonl", s.dir);
    ledger_stream(path, "w", 24, s.trace, s.ledger, 0, -1);
    tu_result r;
    int rc = cli(&r, LEDGER, s.store, "consume", "--graph", "ledger", "--jobs", "4", path, "-v",
                 "--log-format", "json", NULL);
    json_t *lines = json_lines(r.err);
    size_t started = 0, succeeded = 0, summary = 0;
    for (size_t i = 0; i < json_array_size(lines); i++) {
        const char *e = jstr(json_array_get(lines, i), "event");
        started += !strcmp(e, "task_started");
        succeeded += !strcmp(e, "task_succeeded");
        summary += !strcmp(e, "summary");
    }
    ok(rc == 0 && lines && started == 24 && succeeded == 24 && summary == 1,
       "consume --jobs 4 -v --log-format json: every stderr line is one JSON object; 24 started, "
       "24 succeeded, one summary (%zu lines)",
       json_array_size(lines));
    json_decref(lines);
    tu_result_free(&r);
    free(path);
    tu_scene_free(&s);
}

/* ------------------------------------------------------------------ the progress line */

/* Runs argv with stderr on a new pseudo-terminal (stdout and stdin: /dev/null) and returns
 * what was drawn on it (malloc'd), the exit code in *code. */
static char *run_on_pty(const char *const *argv, int *code)
{
    int master, slave;
    if (openpty(&master, &slave, NULL, NULL, NULL) != 0) {
        *code = -1;
        return NULL;
    }
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0), dup2(nul, 1), dup2(slave, 2);
        close(master), close(slave), close(nul);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(slave);
    char *buf = NULL;
    size_t len = 0;
    for (;;) {
        char b[4096];
        struct pollfd pf = {.fd = master, .events = POLLIN};
        if (poll(&pf, 1, CMD_TIMEOUT_MS) <= 0)
            break;
        ssize_t n = read(master, b, sizeof b);
        if (n <= 0) /* EIO: the last holder of the terminal's other end is gone */
            break;
        char *nb = realloc(buf, len + (size_t)n + 1);
        if (!nb)
            break;
        buf = nb;
        memcpy(buf + len, b, (size_t)n);
        len += (size_t)n;
        buf[len] = 0;
    }
    close(master);
    int st;
    waitpid(pid, &st, 0);
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (!buf)
        buf = calloc(1, 1);
    return buf;
}

static void t_progress(void)
{
    tu_scene s = tu_scene_new(D, "progress");
    char *path = tu_fmt("%s/stream.jsonl", s.dir);
    ledger_stream(path, "p", 12, s.trace, s.ledger, 60, 5);
    const char *argv[] = {LEDGER, "consume", "--graph", "ledger", "--store", s.store, path, NULL};
    int code;
    char *tty = run_on_pty(argv, &code);
    ok(code == 69 && tty && tu_contains(tty, "\rconsume: ") && tu_contains(tty, " done, ") &&
           tu_contains(tty, " failed, ") && tu_contains(tty, " in doubt") && tu_contains(tty, "/s"),
       "consume on a terminal draws 'consume: N done, N failed, N in doubt, R/s' with \\r "
       "(exit %d)",
       code);
    ok(tty && tu_contains(tty, " done, 1 failed, 0 in doubt"),
       "the permanent failure is counted: ' done, 1 failed, 0 in doubt'");
    ok(tty && tu_contains(tty, "\r\033[K") && tu_contains(tty, "line(s): 11 succeeded"),
       "the line is erased before the summary, which is printed whole");
    free(tty);

    const char *argv_np[] = {LEDGER,  "consume",       "--graph", "ledger", "--store",
                             s.store, "--no-progress", path,      NULL};
    tty = run_on_pty(argv_np, &code);
    ok(tty && !tu_contains(tty, "\rconsume") && tu_contains(tty, "12 line(s): 11 succeeded"),
       "--no-progress: no progress line on the terminal, the summary stays (the terminal "
       "turns newlines into \\r\\n: the line is told by its \\r before 'consume')");
    free(tty);
    const char *argv_json[] = {LEDGER,  "consume",      "--graph", "ledger", "--store",
                               s.store, "--log-format", "json",    path,     NULL};
    tty = run_on_pty(argv_json, &code);
    ok(tty && !tu_contains(tty, "\rconsume"), "--log-format json: no progress line either");
    free(tty);

    /* not a terminal: the ordinary tests' case; stderr holds no \r */
    tu_result r;
    int rc = cli(&r, LEDGER, s.store, "consume", "--graph", "ledger", path, NULL);
    ok(rc == 69 && !strchr(r.err, '\r'), "stderr on a pipe: no progress line");
    tu_result_free(&r);

    /* retry on a terminal: the failed task again (permanent: dead, so 69) */
    char *flaky = write_line_file(&s, "flaky.json", "f", 0, "transient:1");
    rc = cli(&r, LEDGER, s.store, "run", "--graph", "ledger", "--task", "r1", "--input", flaky,
             "--inline-wait-ms", "0", NULL);
    tu_result_free(&r);
    const char *argv_retry[] = {LEDGER, "retry", "--now", "--store", s.store, NULL};
    tty = run_on_pty(argv_retry, &code);
    ok(code == 0 && tty && tu_contains(tty, "\rretry: ") &&
           tu_contains(tty, "\rretry: 0 of 1 done, 0 failed, 0 in doubt, "),
       "retry --now on a terminal: 'retry: 0 of 1 done, ...' (the due count) (exit %d: %s)", code,
       oneline(tty));
    free(tty), free(flaky);
    free(path);
    tu_scene_free(&s);
}

/* ------------------------------------------------------------------ stats --prometheus */

/* The value of the sample `name` (the whole name with labels, e.g. cairn_tasks{state="dead"}),
 * or -1 when absent. */
static double sample(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, name, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return -1;
}

/* Every sample line's family has a TYPE line, every line is a comment or "name value", and the
 * text ends with "# EOF". */
static int openmetrics_ok(const char *text)
{
    size_t len = strlen(text);
    if (len < 6 || strcmp(text + len - 6, "# EOF\n") != 0)
        return 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (p[0] != '#') {
            size_t name = strcspn(p, "{ ");
            char fam[128];
            snprintf(fam, sizeof fam, "# TYPE %.*s ", (int)name, p);
            const char *sp = memchr(p, ' ', n);
            char *end;
            if (!tu_contains(text, fam) || !sp || (strtod(sp + 1, &end), end != p + n))
                return 0;
        }
        p += n + (nl ? 1 : 0);
    }
    return 1;
}

static void t_prometheus(void)
{
    tu_scene s = tu_scene_new(D, "metrics");
    char *in = write_line_file(&s, "in.json", "m", 0, NULL);
    char *bad = write_line_file(&s, "bad.json", "m", 0, "permanent");
    char *flaky = write_line_file(&s, "flaky.json", "m", 0, "transient:1");
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "ok%d", i);
        cli_code(LEDGER, s.store, "run", "--graph", "ledger", "--task", id, "--input", in, NULL);
    }
    cli_code(LEDGER, s.store, "run", "--graph", "ledger", "--task", "dead1", "--input", bad, NULL);
    int frc = cli_code(LEDGER, s.store, "run", "--graph", "ledger", "--task", "fail1", "--input",
                       flaky, "--inline-wait-ms", "0", NULL);
    tu_sleep_ms(300); /* the work step's backoff is 50-100 ms: then fail1 is due */
    tu_result r;
    int rc = cli(&r, LEDGER, s.store, "stats", "--prometheus", NULL);
    ok(rc == 0 && openmetrics_ok(r.out),
       "stats --prometheus: OpenMetrics text, a TYPE line for every family, ending '# EOF'");
    ok(sample(r.out, "cairn_tasks{state=\"succeeded\"}") == 3 &&
           sample(r.out, "cairn_tasks{state=\"dead\"}") == 1 &&
           sample(r.out, "cairn_tasks{state=\"failed\"}") == 1 &&
           sample(r.out, "cairn_tasks{state=\"in_doubt\"}") == 0,
       "tasks by state: 3 succeeded, 1 dead, 1 failed, 0 in doubt (run rc %d)", frc);
    ok(sample(r.out, "cairn_retry_due") == 1 && sample(r.out, "cairn_retry_overdue_seconds") > 0,
       "the failed task is due: cairn_retry_due 1, overdue %.3f s > 0",
       sample(r.out, "cairn_retry_overdue_seconds"));
    ok(sample(r.out, "cairn_store_used_bytes") > 0 &&
           sample(r.out, "cairn_store_durable_lag_commits") >= 0 &&
           sample(r.out, "cairn_in_doubt_oldest_age_seconds") == 0,
       "store bytes, the durable lag (sync store), no in-doubt age");
    char *before = tu_read_file(s.ledger, NULL);
    tu_result j;
    cli(&j, LEDGER, s.store, "stats", "--json", NULL);
    json_t *doc = json_loads(j.out, 0, NULL);
    ok(doc && jint(doc, "retry_due") == 1 && jint(doc, "next_retry_ms") > 0 &&
           json_is_null(json_object_get(doc, "oldest_in_doubt_ms")),
       "stats --json has retry_due 1, next_retry_ms, oldest_in_doubt_ms null");
    ok(doc && (double)jint(doc, "map_used") == sample(r.out, "cairn_store_used_bytes"),
       "the same figures as stats --json (map_used)");
    json_decref(doc);
    tu_result_free(&j);
    tu_result_free(&r);

    rc = cli(&r, LEDGER, s.store, "stats", "--prometheus", "--json", NULL);
    ok(rc == 64, "--prometheus with --json: usage error 64");
    tu_result_free(&r);
    char *missing = tu_fmt("%s/none", s.dir);
    rc = cli(&r, LEDGER, missing, "stats", "--prometheus", NULL);
    ok(rc == 66 && r.out[0] == 0, "no store there: 66 and nothing on stdout");
    tu_result_free(&r);

    /* an in-doubt task (cairn-test-graphs' doubt graph) */
    if (GRAPHS && *GRAPHS) {
        char *marker = tu_fmt("%s/marker", s.dir);
        char *din = tu_fmt("{\"marker\": \"%s\"}", marker);
        char *dpath = write_input(s.dir, "doubt.json", din);
        char *gstore = tu_fmt("%s/gstore", s.dir);
        int drc = cli_code(GRAPHS, gstore, "run", "--graph", "doubt", "--task", "d1", "--input",
                           dpath, NULL);
        tu_sleep_ms(50);
        rc = cli(&r, GRAPHS, gstore, "stats", "--prometheus", NULL);
        ok(drc == 69 && rc == 0 && sample(r.out, "cairn_tasks{state=\"in_doubt\"}") == 1 &&
               sample(r.out, "cairn_in_doubt_oldest_age_seconds") > 0,
           "an in-doubt task: cairn_tasks{in_doubt} 1, oldest age %.3f s > 0 (run %d)",
           sample(r.out, "cairn_in_doubt_oldest_age_seconds"), drc);
        tu_result_free(&r);
        free(marker), free(din), free(dpath), free(gstore);
    } else {
        skip("CAIRN_TEST_GRAPHS is not set");
    }
    char *after = tu_read_file(s.ledger, NULL);
    ok(before && after && !strcmp(before, after), "reading metrics performed no effect");
    free(before), free(after), free(missing);
    free(in), free(bad), free(flaky);
    tu_scene_free(&s);
}

int main(void)
{
    cli_init();
    D = tu_mkdtemp("observe");
    t_json_errors();
    t_verbose_events();
    t_json_workers();
    t_progress();
    t_prometheus();
    tu_rm_rf(D);
    free(D);
    return tap_done();
}
