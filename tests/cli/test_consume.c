/* test_consume.c - `consume` end to end: streams of tasks through cairn-ledger's real binary, real
 * stores, real worker processes, a pipe this test writes and watches, and a real SIGTERM.
 *
 * What ran is counted where it lands: the ledger example appends "work <task>" to its trace
 * each time its expensive step starts, and "<task> <digest>" to its ledger for each performed
 * effect, so "nothing ran twice" is a count of lines, not something consume says of itself.
 * Assertions are on exit codes, on the result lines (parsed with jansson), on `stats --json`
 * and on those files, never on timing.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_common.h"

static char *D; /* the temp dir of this program */

/* A ledger task input on one line (jansson's compact form). */
static char *task_line(const tu_scene *s, const char *text, int work_ms, const char *fail)
{
    return ledger_input(text, work_ms, s->trace, s->ledger, fail);
}

/* Appends a line to a growing stream text. */
static void add_line(char **stream, const char *line)
{
    char *n = tu_fmt("%s%s\n", *stream ? *stream : "", line);
    free(*stream);
    *stream = n;
}

/* The result lines of a consume run, as a JSON array (in the order printed). */
static json_t *results(const tu_result *r)
{
    json_t *a = json_array();
    const char *p = r->out;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_error_t e;
        json_t *j = json_loadb(p, n, 0, &e);
        if (j)
            json_array_append_new(a, j);
        else
            diag("a result line is not JSON (%s): %.*s", e.text, (int)n, p);
        p += n + (nl ? 1 : 0);
    }
    return a;
}

/* The result line for input line `line`, or NULL. */
static json_t *for_line(const json_t *res, long line)
{
    size_t i;
    json_t *e;
    json_array_foreach(res, i, e) if (jint(e, "line") == line) return e;
    return NULL;
}

/* How many result lines have exit code x. */
static size_t n_exit(const json_t *res, int x)
{
    size_t i, n = 0;
    json_t *e;
    json_array_foreach(res, i, e) n += jint(e, "exit") == x;
    return n;
}

/* Runs `cairn-ledger consume --graph ledger ARGS... --store S` with `in` on stdin. */
static int consume(tu_result *r, const tu_scene *s, const char *in, const char *a1, const char *a2,
                   const char *a3, const char *a4)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = LEDGER;
    argv[n++] = "consume";
    argv[n++] = "--graph";
    argv[n++] = "ledger";
    const char *extra[] = {a1, a2, a3, a4};
    for (int i = 0; i < 4 && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n++] = "--store";
    argv[n++] = s->store;
    argv[n] = NULL;
    return tu_run(r, argv, NULL, in, in ? strlen(in) : 0, CMD_TIMEOUT_MS);
}

/* The number of tasks the store holds (stats --json), -1 if it cannot say. */
static long long n_tasks(const tu_scene *s)
{
    tu_result r;
    long long n = -1;
    if (cli(&r, LEDGER, s->store, "stats", "--json", NULL) == 0) {
        json_t *j = parse_out(&r);
        n = j ? jint(j, "tasks") : -1;
        json_decref(j);
    }
    tu_result_free(&r);
    return n;
}

/* 1 if every line of the ledger names a different task (no effect happened twice). */
static int ledger_unique(const tu_scene *s)
{
    char *t = tu_read_file(s->ledger, NULL);
    if (!t)
        return 1;
    json_t *seen = json_object();
    int ok = 1;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        line[strcspn(line, " ")] = 0;
        if (json_object_get(seen, line))
            ok = 0;
        json_object_set_new(seen, line, json_true());
    }
    json_decref(seen);
    free(t);
    return ok;
}

/* ------------------------------------------------------------------ a stream, then again */

#define N_TASKS 12

static void test_stream_and_again(void)
{
    tu_scene s = tu_scene_new(D, "stream");
    char *stream = NULL;
    for (int i = 0; i < N_TASKS; i++) {
        char text[32];
        snprintf(text, sizeof text, "task %d", i);
        char *l = task_line(&s, text, 30, NULL);
        add_line(&stream, l);
        free(l);
    }
    char *file = write_input(s.dir, "in.jsonl", stream);
    tu_result r;
    int rc = consume(&r, &s, NULL, "--jobs", "4", file, NULL);
    json_t *res = results(&r);
    ok(rc == 0, "a stream of %d tasks, 4 at once: exit 0 (%d: %s)", N_TASKS, rc, oneline(r.err));
    ok(json_array_size(res) == N_TASKS && n_exit(res, 0) == N_TASKS,
       "one result line per task, every one exit 0 (%zu lines)", json_array_size(res));
    int all = 1;
    json_t *ids = json_object();
    for (long i = 1; i <= N_TASKS; i++) {
        json_t *e = for_line(res, i);
        all &= e && !strcmp(jstr(e, "status"), "succeeded") && *jstr(e, "task");
        if (e)
            json_object_set_new(ids, jstr(e, "task"), json_true());
    }
    ok(all && json_object_size(ids) == N_TASKS,
       "each input line has its result: succeeded, its own task ID");
    ok(n_tasks(&s) == N_TASKS, "the store holds %d tasks", N_TASKS);
    ok(tu_count_lines(s.trace, "work ") == N_TASKS && tu_count_lines(s.ledger, NULL) == N_TASKS,
       "each task's work ran once and its effect happened once");
    ok(tu_contains(r.err, "12 line(s): 12 succeeded"), "the summary on stderr counts them (%s)",
       oneline(r.err));
    json_decref(res);
    tu_result_free(&r);

    /* the same stream again, on stdin this time: every line reports the stored result */
    rc = consume(&r, &s, stream, "--jobs", "4", NULL, NULL);
    res = results(&r);
    size_t existing = 0, i;
    json_t *e;
    json_array_foreach(res, i, e) existing += jint(e, "exit") == 0 &&
                                              json_object_get(ids, jstr(e, "task")) &&
                                              tu_contains(jstr(e, "message"), "already succeeded");
    ok(rc == 0 && existing == N_TASKS,
       "the same stream again: exit 0, every line reports its task already succeeded (%zu)",
       existing);
    ok(tu_count_lines(s.trace, "work ") == N_TASKS && tu_count_lines(s.ledger, NULL) == N_TASKS &&
           n_tasks(&s) == N_TASKS,
       "and nothing ran again: no new work, no new effect, no new task");
    json_decref(res);
    json_decref(ids);
    tu_result_free(&r);
    free(file);
    free(stream);
    tu_scene_free(&s);
}

/* ------------------------------------------------------------------ kcat's lines */

static char *kcat_line(const char *topic, int part, int off, const char *payload)
{
    return tu_fmt("%s:%d:%d\t%s", topic, part, off, payload);
}

static void test_kcat(void)
{
    tu_scene s = tu_scene_new(D, "kcat");
    char *stream = NULL, *again = NULL;
    for (int off = 0; off < 5; off++) {
        char text[32];
        snprintf(text, sizeof text, "order %d", off);
        char *p = task_line(&s, text, 0, NULL);
        char *l = kcat_line("orders", 1, off, p);
        add_line(&stream, l);
        if (off >= 3) { /* redelivered after a consumer restart: same offsets, */
            free(p);    /* whatever the payload now says */
            snprintf(text, sizeof text, "order %d, redelivered", off);
            p = task_line(&s, text, 0, NULL);
            free(l);
            l = kcat_line("orders", 1, off, p);
            add_line(&again, l);
        }
        free(l);
        free(p);
    }
    char *p = task_line(&s, "order 5", 0, NULL);
    char *l = kcat_line("orders", 1, 5, p);
    add_line(&again, l);
    add_line(&again, "no tab here, so no key");
    free(l);
    free(p);

    tu_result r;
    int rc = consume(&r, &s, stream, "--format", "kcat", "--jobs", "2");
    json_t *res = results(&r);
    json_t *e3 = for_line(res, 4);
    ok(rc == 0 && json_array_size(res) == 5 && n_exit(res, 0) == 5,
       "kcat: five messages, five tasks succeeded (%d: %s)", rc, oneline(r.err));
    ok(e3 && !strcmp(jstr(e3, "message_id"), "orders:1:3"),
       "the message ID is topic:partition:offset (%s)", e3 ? jstr(e3, "message_id") : "-");
    json_decref(res);
    tu_result_free(&r);

    rc = consume(&r, &s, again, "--format", "kcat", "--jobs", "2");
    res = results(&r);
    json_t *d3 = for_line(res, 1), *d4 = for_line(res, 2), *n5 = for_line(res, 3),
           *bad = for_line(res, 4);
    ok(d3 && d4 && jint(d3, "exit") == 0 && jint(d4, "exit") == 0 &&
           tu_contains(jstr(d3, "message"), "orders:1:3") &&
           tu_contains(jstr(d4, "message"), "orders:1:4"),
       "redelivered offsets 3 and 4: exit 0, their messages reported already consumed (%s)",
       d3 ? jstr(d3, "message") : "-");
    ok(n5 && jint(n5, "exit") == 0 && !strcmp(jstr(n5, "status"), "succeeded"),
       "the new offset 5 runs");
    ok(bad && jint(bad, "exit") == 65 && tu_contains(jstr(bad, "message"), "line 4"),
       "a line without kcat's key: 65 naming line 4 (%s)", bad ? jstr(bad, "message") : "-");
    ok(tu_count_lines(s.ledger, NULL) == 6 && tu_count_lines(s.trace, "work ") == 6 &&
           n_tasks(&s) == 6,
       "six effects for six messages: the redeliveries ran nothing");
    ok(rc == 69, "a bad line makes the exit 69: the stream needs a change (%d)", rc);
    json_decref(res);
    tu_result_free(&r);
    free(stream);
    free(again);
    tu_scene_free(&s);
}

/* ------------------------------------------------------------------ bad lines, conflicts */

static void test_bad_lines(void)
{
    tu_scene s = tu_scene_new(D, "bad");
    char *stream = NULL, *l;
    l = task_line(&s, "first", 0, NULL);
    add_line(&stream, l); /* 1 */
    free(l);
    add_line(&stream, "{\"text\": \"cut"); /* 2: malformed JSON */
    add_line(&stream, "");                 /* blank: skipped, but counted as a line */
    l = task_line(&s, "second", 0, NULL);
    add_line(&stream, l); /* 4 */
    char *env = tu_fmt("{\"id\": \"no spaces allowed\", \"input\": %s}", l);
    add_line(&stream, env); /* 5: a bad task ID */
    free(env);
    add_line(&stream, "[1, 2]"); /* 6: not an object */
    env = tu_fmt("{\"id\": \"c1\", \"message_id\": \"m-c1\", \"input\": %s}", l);
    add_line(&stream, env); /* 7 */
    free(env);
    free(l);
    l = task_line(&s, "something else", 0, NULL);
    env = tu_fmt("{\"id\": \"c1\", \"input\": %s}", l);
    add_line(&stream, env); /* 8: same ID, another payload */
    free(env);
    free(l);
    l = task_line(&s, "last", 0, NULL);
    add_line(&stream, l); /* 9 */
    free(l);

    tu_result r; /* one job: lines 7 and 8 race for task c1 otherwise */
    int rc = consume(&r, &s, stream, "--jobs", "1", NULL, NULL);
    json_t *res = results(&r);
    json_t *b2 = for_line(res, 2), *b5 = for_line(res, 5), *b6 = for_line(res, 6);
    ok(b2 && jint(b2, "exit") == 65 && tu_contains(jstr(b2, "message"), "line 2"),
       "malformed JSON: its own result line, 65, naming line 2 (%s)",
       b2 ? jstr(b2, "message") : "-");
    ok(b5 && jint(b5, "exit") == 65 && !strcmp(jstr(b5, "error"), "CAIRN_ETASKID"),
       "a bad task ID: 65 on line 5 (%s)", b5 ? jstr(b5, "message") : "-");
    ok(b6 && jint(b6, "exit") == 65, "a line that is not an object: 65 on line 6");
    ok(!for_line(res, 3), "the blank line gets no result");
    json_t *g1 = for_line(res, 1), *g4 = for_line(res, 4), *g9 = for_line(res, 9),
           *c7 = for_line(res, 7), *c8 = for_line(res, 8);
    ok(g1 && g4 && g9 && jint(g1, "exit") == 0 && jint(g4, "exit") == 0 && jint(g9, "exit") == 0,
       "the good lines around them ran: the stream went on");
    ok(c7 && jint(c7, "exit") == 0 && !strcmp(jstr(c7, "task"), "c1") &&
           !strcmp(jstr(c7, "message_id"), "m-c1"),
       "an envelope {id, message_id, input}: task c1 under its message ID");
    ok(c8 && jint(c8, "exit") == 76 && !strcmp(jstr(c8, "error"), "CAIRN_ECONFLICT"),
       "the same ID with another payload: 76 on that line (%s)", c8 ? jstr(c8, "message") : "-");
    ok(json_array_size(res) == 8 && rc == 69,
       "eight result lines; exit 69: some lines need a change (%d: %s)", rc, oneline(r.err));
    ok(tu_contains(r.err, "line 2") && tu_contains(r.err, "3 bad line(s)"),
       "stderr names the bad lines and the summary counts them");
    ok(tu_count_lines(s.ledger, NULL) == 4, "four effects: lines 1, 4, 7 and 9");
    json_decref(res);
    tu_result_free(&r);
    free(stream);
    tu_scene_free(&s);
}

/* ------------------------------------------------------------------ exit codes */

static void test_exit_codes(void)
{
    tu_scene s = tu_scene_new(D, "exits");
    tu_result r;
    char *l = task_line(&s, "later", 0, "transient:5");
    char *stream = tu_fmt("%s\n", l);
    int rc = consume(&r, &s, stream, "--inline-wait-ms", "0", NULL, NULL);
    json_t *res = results(&r);
    json_t *e = for_line(res, 1);
    ok(rc == 75 && e && jint(e, "exit") == 75 && !strcmp(jstr(e, "status"), "failed"),
       "a transient failure: its line 75, the task failed for retry, exit 75 (%d)", rc);
    json_decref(res);
    tu_result_free(&r);
    free(stream);
    free(l);

    char *ok_l = task_line(&s, "fine", 0, NULL);
    l = task_line(&s, "broken", 0, "permanent");
    char *later = task_line(&s, "later 2", 0, "transient:5");
    stream = tu_fmt("%s\n%s\n%s\n", ok_l, l, later);
    rc = consume(&r, &s, stream, "--inline-wait-ms", "0", "--jobs", "2");
    res = results(&r);
    e = for_line(res, 2);
    ok(rc == 69 && e && jint(e, "exit") == 69 && !strcmp(jstr(e, "status"), "dead"),
       "a dead task among succeeded and transient ones: its line 69, exit 69 (%d)", rc);
    json_decref(res);
    tu_result_free(&r);
    free(stream);
    free(l);
    free(later);

    stream = tu_fmt("%s\n", ok_l);
    ok(consume(&r, &s, stream, NULL, NULL, NULL, NULL) == 0, "all succeeded: exit 0");
    tu_result_free(&r);
    free(stream);
    free(ok_l);
    tu_scene_free(&s);
}

/* ------------------------------------------------------------------ a pipe we hold */

/* Starts argv reading the pipe this test writes; *wfd is the write end. stdout and stderr go to
 * files. */
static pid_t spawn_argv(const char *const *argv, int *wfd, const char *out, const char *err)
{
    int p[2];
    if (pipe(p))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        dup2(p[0], STDIN_FILENO);
        close(p[0]);
        close(p[1]);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, STDOUT_FILENO);
        dup2(e, STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[0]);
    *wfd = p[1];
    return pid;
}

/* spawn_argv of `cairn-ledger consume --graph ledger --store S a1 a2`. */
static pid_t spawn_piped(const tu_scene *s, int *wfd, const char *out, const char *err,
                         const char *a1, const char *a2)
{
    const char *argv[] = {LEDGER,   "consume", "--graph", "ledger", "--store",
                          s->store, a1,        a2,        NULL};
    return spawn_argv(argv, wfd, out, err);
}

static int wait_lines(const char *path, const char *prefix, int n, pid_t pid)
{
    int64_t until = tu_now_ms() + 60000;
    while (tu_count_lines(path, prefix) < n && tu_now_ms() < until && !tu_poll_exit(pid, NULL))
        tu_sleep_ms(10);
    return tu_count_lines(path, prefix) >= n;
}

static int write_str(int fd, const char *s)
{
    size_t n = strlen(s);
    return write(fd, s, n) == (ssize_t)n ? 0 : -1;
}

/* K = 2 and six lines in the pipe at once: while the first two tasks run, the other four lines
 * are still in the pipe, byte for byte (FIONREAD on our end). */
static void test_read_ahead(void)
{
    tu_scene s = tu_scene_new(D, "ahead");
    char *out = tu_fmt("%s/out", s.dir), *err = tu_fmt("%s/err", s.dir);
    char *lines[6];
    size_t rest = 0;
    for (int i = 0; i < 6; i++) {
        char text[16];
        snprintf(text, sizeof text, "ahead %d", i);
        char *l = task_line(&s, text, i < 2 ? 2000 : 0, NULL);
        lines[i] = tu_fmt("%s\n", l);
        free(l);
        rest += i >= 2 ? strlen(lines[i]) : 0;
    }
    int wfd;
    pid_t pid = spawn_piped(&s, &wfd, out, err, "--jobs", "2");
    for (int i = 0; i < 6; i++)
        write_str(wfd, lines[i]);
    int started = wait_lines(s.trace, "work ", 2, pid);
    tu_sleep_ms(300); /* a reader that takes more than it runs has had the time to */
    int left = -1;
    ioctl(wfd, FIONREAD, &left);
    ok(started && left == (int)rest,
       "with 2 jobs running, the four lines after them are still in the pipe (%d of %zu bytes)",
       left, rest);
    ok(tu_count_lines(s.trace, "work ") == 2, "and only two tasks started");
    close(wfd);
    int rc = tu_wait(pid, CMD_TIMEOUT_MS);
    ok(rc == 0 && tu_count_lines(out, NULL) == 6 && tu_count_lines(s.ledger, NULL) == 6,
       "once the pipe is closed, all six ran: exit 0, six results (%d)", rc);
    for (int i = 0; i < 6; i++)
        free(lines[i]);
    free(out);
    free(err);
    tu_scene_free(&s);
}

/* SIGTERM while two tasks run: the reading stops, the summary is printed, exit 75; a restart
 * with the same stream finishes the rest, and no effect happens twice. */
static void test_sigterm(void)
{
    tu_scene s = tu_scene_new(D, "term");
    char *out = tu_fmt("%s/out", s.dir), *err = tu_fmt("%s/err", s.dir);
    char *stream = NULL;
    for (int i = 0; i < 8; i++) {
        char text[16];
        snprintf(text, sizeof text, "term %d", i);
        char *l = task_line(&s, text, 1500, NULL);
        add_line(&stream, l);
        free(l);
    }
    int wfd;
    pid_t pid = spawn_piped(&s, &wfd, out, err, "--jobs", "2");
    write_str(wfd, stream);
    int started = wait_lines(s.trace, "work ", 2, pid);
    kill(pid, SIGTERM); /* the consume process only: it passes the stop on */
    int rc = tu_wait(pid, CMD_TIMEOUT_MS);
    char *e = tu_read_file(err, NULL);
    ok(started && rc == 75, "SIGTERM mid-stream: exit 75 (%d)", rc);
    ok(tu_contains(e, "stopped before the end of the stream"), "the summary says so (%s)",
       oneline(e));
    int effects = tu_count_lines(s.ledger, NULL);
    ok(effects <= 2 && tu_count_lines(out, NULL) <= 2,
       "no task past the two running was started (%d effects)", effects);
    close(wfd);
    free(e);

    tu_result r;
    rc = consume(&r, &s, stream, "--jobs", "2", NULL, NULL);
    json_t *res = results(&r);
    ok(rc == 0 && json_array_size(res) == 8 && n_exit(res, 0) == 8,
       "a restart with the same stream: all eight lines end succeeded (%d: %s)", rc,
       oneline(r.err));
    ok(tu_count_lines(s.ledger, NULL) == 8 && ledger_unique(&s),
       "eight effects, one per task: none happened twice");
    json_decref(res);
    tu_result_free(&r);
    free(stream);
    free(out);
    free(err);
    tu_scene_free(&s);
}

/* A worker killed in the middle of its task: that line is reported (75, `retry` takes the task
 * up), a new worker takes its place, the stream goes on, and `retry` finishes the task, its
 * effect once. Two processes of one runner each (--processes 2), so the kill takes one task: a
 * worker of several threads takes all of its running lines with it, each reported so. */
static void test_worker_killed(void)
{
    tu_scene s = tu_scene_new(D, "killed");
    char *out = tu_fmt("%s/out", s.dir), *err = tu_fmt("%s/err", s.dir);
    char *stream = NULL;
    for (int i = 0; i < 5; i++) {
        char text[16];
        snprintf(text, sizeof text, "killed %d", i);
        char *l = task_line(&s, text, i < 2 ? 3000 : 500, NULL);
        add_line(&stream, l);
        free(l);
    }
    int wfd;
    const char *argv[] = {LEDGER,   "consume", "--graph",     "ledger", "--store", s.store,
                          "--jobs", "2",       "--processes", "2",      NULL};
    pid_t pid = spawn_argv(argv, &wfd, out, err);
    write_str(wfd, stream);
    close(wfd);
    int started = wait_lines(s.trace, "work ", 2, pid);
    char *kids_path = tu_fmt("/proc/%ld/task/%ld/children", (long)pid, (long)pid);
    char *kids = tu_read_file(kids_path, NULL);
    long victim = kids ? strtol(kids, NULL, 10) : 0;
    if (victim > 0)
        kill((pid_t)victim, SIGKILL);
    /* the pool is whole again: two workers, the victim not among them */
    int replaced = 0;
    for (int64_t until = tu_now_ms() + 20000; !replaced && tu_now_ms() < until;) {
        char *now = tu_read_file(kids_path, NULL);
        long a = 0, b = 0;
        char *end = NULL;
        if (now) {
            a = strtol(now, &end, 10);
            b = strtol(end, NULL, 10);
        }
        replaced = a > 0 && b > 0 && a != victim && b != victim;
        free(now);
        if (!replaced)
            tu_sleep_ms(20);
    }
    ok(replaced, "a new worker took the killed one's place");
    int rc = tu_wait(pid, CMD_TIMEOUT_MS);
    tu_result r = {.out = tu_read_file(out, NULL)};
    json_t *res = results(&r);
    size_t lost = 0, i;
    json_t *e;
    json_array_foreach(res, i, e) lost +=
        jint(e, "exit") == 75 && tu_contains(jstr(e, "message"), "ended");
    ok(started && victim > 0 && lost == 1 && n_exit(res, 0) == 4 && json_array_size(res) == 5,
       "a worker killed mid-task: its line 75, the four others succeeded (%zu lines, %s)",
       json_array_size(res), oneline(r.out));
    ok(rc == 75, "exit 75: that task is for `retry` (%d)", rc);
    json_decref(res);
    free(r.out);
    ok(cli_code(LEDGER, s.store, "retry", NULL) == 0 && n_tasks(&s) == 5 &&
           tu_count_lines(s.ledger, NULL) == 5 && ledger_unique(&s),
       "retry finishes it: five tasks, five effects, none twice");
    free(kids);
    free(kids_path);
    free(stream);
    free(out);
    free(err);
    tu_scene_free(&s);
}

/* --task-from: the task ID from the input's fields, as `run` derives it. */
static void test_task_from(void)
{
    tu_scene s = tu_scene_new(D, "from");
    char *stream = NULL;
    for (int i = 0; i < 3; i++) {
        char *l = task_line(&s, "same text", 0, NULL);
        l[strlen(l) - 1] = 0; /* the closing brace: add the order field */
        char *with = tu_fmt("%s,\"order\":%d}", l, 101 + i);
        add_line(&stream, with);
        free(with);
        free(l);
    }
    tu_result r;
    int rc = consume(&r, &s, stream, "--task-from", "order", "--jobs", "2");
    json_t *res = results(&r);
    json_t *a = for_line(res, 1), *c = for_line(res, 3);
    ok(rc == 0 && a && c && !strcmp(jstr(a, "task"), "101") && !strcmp(jstr(c, "task"), "103"),
       "--task-from order: tasks 101..103 (%d: %s)", rc, oneline(r.out));
    json_decref(res);
    tu_result_free(&r);
    free(stream);
    tu_scene_free(&s);
}

/* The built-in pipeline through `cairn consume --config`: one worker loads the model for its
 * first task and keeps it; once the model file is gone, the next tasks still generate (a reload
 * per task would fail for want of the file). */
static void test_model_kept(void)
{
    const char *cairn = getenv("CAIRN_BIN"), *mkmodel = getenv("CAIRN_MKMODEL");
    if (!cairn || !*cairn || !mkmodel || !*mkmodel) {
        skip("the built-in pipeline: CAIRN_BIN or CAIRN_MKMODEL is not set");
        return;
    }
    tu_scene s = tu_scene_new(D, "model");
    char *model = tu_fmt("%s/demo.gguf", s.dir), *cfg_path = tu_fmt("%s/pipeline.json", s.dir);
    char *out = tu_fmt("%s/out", s.dir), *err = tu_fmt("%s/err", s.dir);
    tu_result r;
    const char *mk[] = {mkmodel, model, NULL};
    tu_run(&r, mk, NULL, NULL, 0, CMD_TIMEOUT_MS);
    tu_result_free(&r);
    json_t *cfg = json_pack("{s:{s:s, s:s, s:i}}", "generate", "model", model, "prompt",
                            "Describe {{title}}.", "max_tokens", 8);
    json_dump_file(cfg, cfg_path, 0);
    json_decref(cfg);
    const char *argv[] = {cairn,     "consume", "--config", cfg_path, "--graph",
                          "default", "--store", s.store,    NULL};
    int wfd;
    pid_t pid = spawn_argv(argv, &wfd, out, err);
    write_str(wfd, "{\"title\": \"a lamp\"}\n");
    int first = wait_lines(out, "{", 1, pid);
    char *gone = tu_fmt("%s.gone", model);
    rename(model, gone);
    write_str(wfd, "{\"title\": \"a chair\"}\n{\"title\": \"a desk\"}\n");
    close(wfd);
    int rc = tu_wait(pid, CMD_TIMEOUT_MS);
    r = (tu_result){.out = tu_read_file(out, NULL)};
    json_t *res = results(&r);
    char *e = tu_read_file(err, NULL);
    ok(first && rc == 0 && json_array_size(res) == 3 && n_exit(res, 0) == 3,
       "cairn consume --config: three tasks of the built-in graph, the last two after the model "
       "file was gone: the worker kept its model (%d: %s)",
       rc, oneline(e));
    json_decref(res);
    free(r.out);
    /* the peer: a process of its own loads the model afresh, and fails without the file */
    const char *run[] = {cairn,     "run",     "--config", cfg_path, "--graph",
                         "default", "--store", s.store,    NULL};
    const char in[] = "{\"title\": \"a shelf\"}";
    int run_rc = tu_run(&r, run, NULL, in, strlen(in), CMD_TIMEOUT_MS);
    ok(run_rc != 0, "while `cairn run` of another task, loading the model anew, fails (%d: %s)",
       run_rc, oneline(r.err));
    tu_result_free(&r);
    free(e);
    free(gone);
    free(model), free(cfg_path), free(out), free(err);
    tu_scene_free(&s);
}

/* ------------------------------------------------------------------ usage */

static void test_usage(void)
{
    tu_scene s = tu_scene_new(D, "usage");
    tu_result r;
    ok(cli(&r, LEDGER, NULL, "consume", "--help", NULL) == 0 &&
           tu_contains(r.out, "usage: cairn-ledger consume"),
       "cairn-ledger consume --help: its usage, exit 0");
    tu_result_free(&r);
    ok(consume(&r, &s, "", "--format", "avro", NULL, NULL) == 64 && tu_contains(r.err, "--format"),
       "--format avro: 64 naming the option");
    tu_result_free(&r);
    ok(consume(&r, &s, "", "--jobs", "0", NULL, NULL) == 64, "--jobs 0: 64");
    tu_result_free(&r);
    ok(consume(&r, &s, "", "--jobs", "1", "-j", "2") == 64 &&
           tu_contains(r.err, "--jobs given twice"),
       "--jobs twice: 64 naming it (%s)", first_line(r.err));
    tu_result_free(&r);
    ok(consume(&r, &s, "", "--jobs", "257", NULL, NULL) == 64, "--jobs 257: 64");
    tu_result_free(&r);
    char *missing = tu_fmt("%s/missing.jsonl", s.dir);
    ok(consume(&r, &s, NULL, missing, NULL, NULL, NULL) == 66 && tu_contains(r.err, missing),
       "a missing FILE: 66 naming it");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, s.store, "consume", "--graph", "nosuch", NULL) == 64,
       "an unknown graph: 64");
    tu_result_free(&r);
    ok(consume(&r, &s, "", "a.jsonl", "b.jsonl", NULL, NULL) == 64, "two files: 64");
    tu_result_free(&r);
    ok(consume(&r, &s, "", "--task", "x", NULL, NULL) == 64 &&
           tu_contains(r.err, "not an option of this command"),
       "--task (run's) is refused by name");
    tu_result_free(&r);
    const char *cairn = getenv("CAIRN_BIN");
    if (cairn && *cairn) {
        ok(cli(&r, cairn, NULL, "consume", "--help", NULL) == 0 &&
               tu_contains(r.out, "--config FILE"),
           "cairn consume --help names --config (the built-in graph)");
        tu_result_free(&r);
    } else
        skip("cairn consume --help: CAIRN_BIN is not set");
    free(missing);
    tu_scene_free(&s);
}

int main(void)
{
    cli_init();
    D = tu_mkdtemp("consume");
    test_usage();
    test_stream_and_again();
    test_kcat();
    test_bad_lines();
    test_exit_codes();
    test_read_ahead();
    test_sigterm();
    test_worker_killed();
    test_task_from();
    test_model_kept();
    tu_rm_rf(D);
    free(D);
    return tap_done();
}
