/* test_cli.c - the CLI end to end: every command against real stores, through real processes.
 *
 * Each scenario uses its own store in a temp dir and the ledger example's trace/ledger files to
 * count what really ran: a `work` line per execution of the expensive step, a ledger line per
 * performed effect. The assertions are on exit codes, on --json documents (parsed with jansson)
 * and on those files, never on timing.
 */
#include <ctype.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_common.h"

static char *D; /* the temp dir of this program */

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return 0;
    return s[n] == 0;
}

/* ------------------------------------------------------------------ help & usage */

static void test_help(void)
{
    tu_result r;
    ok(cli(&r, LEDGER, NULL, "--help", NULL) == 0 && tu_contains(r.out, "usage:") &&
           tu_contains(r.out, "Exit codes"),
       "--help: exit 0 with usage and exit codes");
    tu_result_free(&r);
    static const char *cmds[] = {"run", "init",  "show",  "list",       "retry",  "resolve",
                                 "gc",  "audit", "stats", "invalidate", "consume"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        /* a program built on cairn_cli_main speaks under its own name */
        char *want = tu_fmt("usage: cairn-ledger %s", cmds[i]);
        int rc = cli(&r, LEDGER, NULL, cmds[i], "--help", NULL);
        ok(rc == 0 && tu_contains(r.out, want), "%s --help: exit 0, prints its usage", cmds[i]);
        tu_result_free(&r);
        free(want);
    }
    ok(cli(&r, LEDGER, NULL, NULL) == 64 && tu_contains(r.err, "usage:"),
       "no command: exit 64 with usage on stderr");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, NULL, "frobnicate", NULL) == 64 && tu_contains(r.err, "frobnicate"),
       "unknown command: exit 64 naming it");
    tu_result_free(&r);
    char *st = tu_fmt("%s/store-usage", D);
    ok(cli(&r, LEDGER, st, "list", "--bogus", NULL) == 64 && tu_contains(r.err, "--bogus"),
       "unknown option: exit 64 naming it");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "run", "--input", "/dev/null", NULL) == 64, "run without --graph: 64");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, NULL, "stats", NULL) == 64 && tu_contains(r.err, "no store"),
       "no --store and no CAIRN_STORE: 64");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "list", "--status", "bogus", NULL) == 64, "list --status bogus: 64");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "resolve", "x", "--step", "a", NULL) == 64,
       "resolve without --done/--not-done: 64");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "run", "--graph", "nosuch", "--input", "/dev/null", NULL) != 0,
       "run of an empty input file fails");
    tu_result_free(&r);
    free(st);
}

/* Every command of the `cairn` executable parses its options alike (runner/cli_opt.c): -h and
 * --help print its help and exit 0, an option given twice is refused naming it (only tokenize's
 * --text and generate's --stop may repeat), and so is an unknown option. Each command line would
 * otherwise do real work, so a refusal cannot pass for a success. */
static void test_every_command_options(void)
{
    const char *cairn = getenv("CAIRN_BIN");
    if (!cairn || !*cairn) {
        skip("every command's options: CAIRN_BIN is not set");
        return;
    }
    char *st = tu_fmt("%s/store-opts", D);
    static const struct {
        const char *cmd, *twice[6], *opt; /* opt: the option the refusal names */
    } c[] = {
        {"run", {"--graph", "a", "--graph", "b"}, "--graph"},
        {"retry", {"--limit", "1", "--limit", "2"}, "--limit"},
        {"consume", {"--graph", "a", "--jobs", "1", "--jobs", "2"}, "--jobs"},
        {"resolve", {"x", "--step", "a", "--step", "a"}, "--step"},
        {"invalidate", {"x", "--from", "a", "--from", "b"}, "--from"},
        {"gc", {"--retention-days", "1", "--retention-days", "1"}, "--retention-days"},
        {"init", {"--nosync", "--nosync"}, "--nosync"},
        {"show", {"x", "--json", "--json"}, "--json"},
        {"list", {"--status", "failed", "--status", "dead"}, "--status"},
        {"audit", {"x", "--json", "--json"}, "--json"},
        {"stats", {"--map-max", "1", "--map-max", "2"}, "--map-max"},
        {"generate", {"--model", "a", "--model", "a", "-p", "hi"}, "--model"},
        {"tokenize", {"-m", "a", "--model", "a", "-p", "hi"}, "--model"},
        {"model-info", {"--json", "--json", "m.gguf"}, "--json"},
        {"index", {"--corpus", "a", "-c", "b"}, "--corpus"},
        {"search", {"-q", "a", "--query", "b"}, "--query"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        tu_result r;
        char *want = tu_fmt("usage: cairn %s", c[i].cmd);
        static const char *const help[] = {"-h", "--help"};
        for (size_t h = 0; h < 2; h++) {
            int rc = cli(&r, cairn, NULL, c[i].cmd, help[h], NULL);
            ok(rc == 0 && tu_contains(r.out, want), "%s %s: exit 0, its usage on stdout (%d: %s)",
               c[i].cmd, help[h], rc, oneline(r.err));
            tu_result_free(&r);
        }
        const char *const *t = c[i].twice;
        int rc = cli(&r, cairn, st, c[i].cmd, t[0], t[1], t[2], t[3], t[4], t[5], NULL);
        char *twice = tu_fmt("%s given twice", c[i].opt);
        ok(rc == 64 && tu_contains(first_line(r.err), twice) && tu_contains(r.err, want),
           "%s: an option twice: 64, '%s', then the usage (%d: %s)", c[i].cmd, twice, rc,
           first_line(r.err));
        tu_result_free(&r);
        rc = cli(&r, cairn, st, c[i].cmd, "--no-such-option", NULL);
        ok(rc == 64 && tu_contains(first_line(r.err), "unknown argument '--no-such-option'"),
           "%s: an unknown option: 64 naming it (%d: %s)", c[i].cmd, rc, first_line(r.err));
        tu_result_free(&r);
        free(twice);
        free(want);
    }
    /* --config is taken out of argv before the CLI parses it (tools/main.c): refused twice too */
    static const char *const config_cmds[] = {"run", "retry", "invalidate", "consume"};
    for (size_t i = 0; i < 4; i++) {
        tu_result r;
        int rc = cli(&r, cairn, st, config_cmds[i], "--config", "a.json", "--config=b.json", NULL);
        ok(rc == 64 && tu_contains(first_line(r.err), "--config given twice"),
           "%s: --config twice: 64 naming it (%d: %s)", config_cmds[i], rc, first_line(r.err));
        tu_result_free(&r);
    }
    free(st);
}

/* ------------------------------------------------------------------ happy path, idempotency */

/* `run --task ID` without --input on a task the store has: input piped in is compared with the
 * stored one (76 when it differs), never silently ignored; no input (stdin empty or closed)
 * resumes with the stored input. */
static void test_piped_input_compared(void)
{
    char *st = tu_fmt("%s/store-piped", D), *trace = tu_fmt("%s/piped.trace", D),
         *ledger = tu_fmt("%s/piped.ledger", D);
    char *in = ledger_input("piped", 0, trace, ledger, NULL);
    char *f = write_input(D, "piped.json", in);
    tu_result r;
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", "p1", "--input", f, NULL);
    tu_result_free(&r);
    const char *argv[] = {LEDGER, "run", "--graph", "ledger", "--task", "p1", "--store", st, NULL};
    static const char other[] = "{\"other\":1}";
    int rc2 = tu_run(&r, argv, NULL, other, sizeof other - 1, CMD_TIMEOUT_MS);
    ok(rc == 0 && rc2 == 76 && tu_count_lines(ledger, NULL) == 1,
       "run --task EXISTING with another input piped in: 76, not served the old result (%d, %d: "
       "%s)",
       rc, rc2, oneline(r.err));
    tu_result_free(&r);
    rc2 = tu_run(&r, argv, NULL, in, strlen(in), CMD_TIMEOUT_MS);
    ok(rc2 == 0 && tu_count_lines(ledger, NULL) == 1,
       "the same input piped in: 0, nothing run again (%d: %s)", rc2, oneline(r.err));
    tu_result_free(&r);
    rc2 = tu_run(&r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
    ok(rc2 == 0 && tu_count_lines(ledger, NULL) == 1,
       "no input (stdin /dev/null): resumes with the stored input (%d: %s)", rc2, oneline(r.err));
    tu_result_free(&r);
    free(f), free(in), free(st), free(trace), free(ledger);
}

static void test_happy_and_ids(void)
{
    char *st = tu_fmt("%s/store-happy", D), *trace = tu_fmt("%s/happy.trace", D),
         *ledger = tu_fmt("%s/happy.ledger", D);
    char *in = ledger_input("hello", 0, trace, ledger, NULL);
    char *f = write_input(D, "happy.json", in);
    tu_result r;
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, NULL);
    ok(rc == 0 && tu_contains(r.out, ": succeeded"), "run: exit 0, prints succeeded (rc %d: %s)",
       rc, oneline(r.err));
    char id[64] = "";
    sscanf(r.out, "%63[^:]", id);
    tu_result_free(&r);
    ok(strncmp(id, "ledger_", 7) == 0 && is_hex(id + 7, 16),
       "derived ID has the form "
       "ledger_<16 hex>: %s",
       id);
    char *work_line = tu_fmt("work %s", id);
    ok(tu_count_exact(trace, work_line) == 1, "work ran once");
    ok(tu_count_lines(ledger, id) == 1, "ledger has one line for the task");

    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, NULL);
    ok(rc == 0 && tu_contains(r.out, "already succeeded"), "second run: exit 0, \"already "
                                                           "succeeded\"");
    tu_result_free(&r);
    ok(tu_count_exact(trace, work_line) == 1 && tu_count_lines(ledger, id) == 1,
       "second run executed nothing (1 trace line, 1 ledger line)");

    /* stdin input */
    const char *argv[] = {LEDGER, "run", "--graph", "ledger", "--input", "-", "--store", st, NULL};
    rc = tu_run(&r, argv, NULL, in, strlen(in), CMD_TIMEOUT_MS);
    ok(rc == 0 && tu_contains(r.out, id) && tu_contains(r.out, "already succeeded"),
       "--input - reads stdin: same task, already succeeded");
    tu_result_free(&r);

    /* RFC 8785: key order, whitespace, escapes and number spelling do not change the ID */
    char *perm = tu_fmt("  {\n \"ledger\" : \"%s\",\"work_ms\":0.0e0, \"trace\":\t\"%s\",\n"
                        "\"text\": \"\\u0068ello\" }\n",
                        ledger, trace);
    char *f2 = write_input(D, "happy-perm.json", perm);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f2, "--json", NULL);
    json_t *j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && strcmp(jstr(j, "task"), id) == 0 && jint(j, "exit") == 0 &&
           json_is_null(json_object_get(j, "error")) && strcmp(jstr(j, "status"), "succeeded") == 0,
       "permuted/reformatted input: same derived ID (--json: task, status, exit, error)");
    json_decref(j);
    tu_result_free(&r);
    ok(tu_count_exact(trace, work_line) == 1, "reformatted input did not run the task again");

    /* the hash form of the ID is the payload hash prefix */
    j = show_json(LEDGER, st, id, &rc);
    ok(j && strncmp(jstr(j, "payload_hash"), id + 7, 16) == 0 &&
           strlen(jstr(j, "payload_hash")) == 64,
       "ID = ledger_ + first 16 hex of the payload hash");
    ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 && jint(j, "attempt") == 1 &&
           jint(j, "generation") == 1 && json_array_size(json_object_get(j, "steps")) == 3,
       "show --json: succeeded, attempt 1, generation 1, 3 steps");
    ok(j && strlen(step_out(j, "work", "digest")) == 64 &&
           strlen(step_out(j, "work", "nonce")) == 16,
       "show --json: work output has digest and nonce");
    ok(j && strcmp(jstr(json_object_get(j, "input"), "text"), "hello") == 0,
       "show --json: input is shown");
    ok(j && !json_object_get(j, "lease"), "no lease after success");
    char *want_line = tu_fmt("%s %s", id, j ? step_out(j, "work", "digest") : "?");
    ok(tu_count_exact(ledger, want_line) == 1, "ledger line is '<task> <digest>'");
    free(want_line);
    json_decref(j);

    /* human-readable show, list, stats */
    ok(cli(&r, LEDGER, st, "show", id, NULL) == 0 && tu_contains(r.out, "succeeded") &&
           tu_contains(r.out, "work") && tu_contains(r.out, id),
       "show (table): names the task, status and steps");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "list", NULL) == 0 && tu_contains(r.out, id), "list (table) shows it");
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "list", "--status", "succeeded", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && json_array_size(j) == 1 && strcmp(jstr(json_array_get(j, 0), "task"), id) == 0,
       "list --status succeeded --json: one row, our task");
    json_decref(j);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "list", "--status", "failed", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && json_array_size(j) == 0, "list --status failed --json: empty array");
    json_decref(j);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "stats", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "tasks") == 1 && jint(json_object_get(j, "by_status"), "succeeded") == 1 &&
           jint(j, "map_used") > 0 && strcmp(jstr(j, "durability"), "sync") == 0,
       "stats --json: 1 task, 1 succeeded, a sync store");
    json_decref(j);
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "stats", NULL) == 0 && tu_contains(r.out, "succeeded"), "stats (table)");
    tu_result_free(&r);

    /* audit: every transition, in order */
    rc = cli(&r, LEDGER, st, "audit", id, "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    /* compute steps (parse, work) complete in their step records; the effect is audited */
    static const char *want[][4] = {{"pending", "pending", "", "created"},
                                    {"pending", "running", "", "run"},
                                    {"running", "running", "append", "effect intent dlv_"},
                                    {"running", "running", "append", "effect done"},
                                    {"running", "succeeded", "", "all steps done"}};
    int match = j && json_array_size(j) == 5;
    for (size_t i = 0; match && i < 5; i++) {
        json_t *a = json_array_get(j, i);
        const char *step = json_is_string(json_object_get(a, "step")) ? jstr(a, "step") : "";
        match = strcmp(jstr(a, "from"), want[i][0]) == 0 &&
                strcmp(jstr(a, "to"), want[i][1]) == 0 && strcmp(step, want[i][2]) == 0 &&
                strncmp(jstr(a, "reason"), want[i][3], strlen(want[i][3])) == 0;
        if (!match)
            diag("audit row %zu: %s -> %s step '%s' reason '%s'", i, jstr(a, "from"), jstr(a, "to"),
                 step, jstr(a, "reason"));
    }
    ok(match, "audit --json lists every transition: created, run, intent, effect done, succeeded");
    json_decref(j);
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "audit", id, NULL) == 0 && tu_contains(r.out, "all steps done"),
       "audit (table)");
    tu_result_free(&r);
    /* options after the operand, and the store from CAIRN_STORE */
    char *env_store = tu_fmt("CAIRN_STORE=%s", st);
    const char *env[] = {env_store, NULL};
    ok(cli_env(&r, env, LEDGER, NULL, "show", id, "--json", NULL) == 0 && tu_contains(r.out, id),
       "CAIRN_STORE is the default store; options may follow the ID");
    tu_result_free(&r);
    free(env_store);

    /* --task-from */
    char *in2 = tu_fmt("{\"order\":\"A-17\",\"line\":\"3\",\"text\":\"x\",\"trace\":\"%s\","
                       "\"ledger\":\"%s\"}",
                       trace, ledger);
    char *f3 = write_input(D, "happy-from.json", in2);
    ok(cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f3, "--task-from", "order,line",
           NULL) == 0 &&
           tu_contains(r.out, "A-17_3:"),
       "--task-from order,line: ID A-17_3");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f3, "--task-from", "order",
           NULL) == 0 &&
           tu_contains(r.out, "A-17:"),
       "--task-from order: ID A-17");
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f3, "--task-from", "nosuch",
             NULL);
    ok(rc == 65 && tu_contains(r.err, "nosuch"),
       "--task-from a missing field: 65 naming it "
       "(rc %d: %s)",
       rc, oneline(r.err));
    tu_result_free(&r);
    ok(cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f3, "--task", "explicit.id-1",
           NULL) == 0 &&
           tu_contains(r.out, "explicit.id-1:"),
       "--task sets the ID");
    tu_result_free(&r);
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f3, "--task", "a", "--task-from",
                "order", NULL) == 64,
       "--task with --task-from: 64");

    free(in2), free(f3), free(perm), free(f2), free(work_line), free(in), free(f), free(st);
    free(trace), free(ledger);
}

/* ------------------------------------------------------------------ messages */

static void test_message_dedupe(void)
{
    char *st = tu_fmt("%s/store-msg", D), *trace = tu_fmt("%s/msg.trace", D),
         *ledger = tu_fmt("%s/msg.ledger", D);
    char *a = ledger_input("m1", 0, trace, ledger, NULL),
         *b = ledger_input("m2", 0, trace, ledger, NULL);
    char *fa = write_input(D, "msg-a.json", a), *fb = write_input(D, "msg-b.json", b);
    tu_result r;
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fa, "--message-id", "p0:42",
                 NULL);
    ok(rc == 0, "message p0:42: first delivery runs (rc %d)", rc);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fb, "--message-id", "p0:42",
             NULL);
    ok(rc == 0 && tu_contains(r.out, "already consumed"),
       "redelivered p0:42: exit 0, says it was "
       "already consumed: %s",
       oneline(r.out));
    tu_result_free(&r);
    ok(tu_count_lines(trace, "work ") == 1 && tu_count_lines(ledger, NULL) == 1,
       "the redelivery ran nothing");
    rc = cli(&r, LEDGER, st, "stats", "--json", NULL);
    json_t *j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "tasks") == 1 && jint(j, "messages") == 1, "no new task; one message recorded");
    json_decref(j);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fb, "--message-id", "p0:43",
             "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "exit") == 0 && tu_count_lines(trace, "work ") == 2,
       "another message id runs its task");
    json_decref(j);
    tu_result_free(&r);
    free(a), free(b), free(fa), free(fb), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ failures */

static void test_failures(void)
{
    char *st = tu_fmt("%s/store-fail", D), *trace = tu_fmt("%s/fail.trace", D),
         *ledger = tu_fmt("%s/fail.ledger", D);
    tu_result r;
    /* transient:2 succeeds within the run on invocation 3 */
    char *in = ledger_input("t2", 0, trace, ledger, "transient:2");
    char *f = write_input(D, "t2.json", in);
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "t2", NULL);
    ok(rc == 0, "transient:2: exit 0 within one run (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    json_t *j = show_json(LEDGER, st, "t2", NULL);
    ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 &&
           jint(step_of(j, "work"), "invocations") == 3 && jint(j, "attempt") == 1,
       "transient:2: succeeded, work invocations 3, attempt 1");
    ok(tu_count_exact(trace, "work t2") == 3 && tu_count_lines(ledger, "t2 ") == 1,
       "transient:2: 3 work executions, 1 ledger line");
    json_decref(j);
    free(in), free(f);

    /* transient:5 is dead after the step's 3 invocations */
    in = ledger_input("t5", 0, trace, ledger, "transient:5");
    f = write_input(D, "t5.json", in);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "t5", NULL);
    ok(rc == 69 && tu_contains(r.err, "dead") && tu_contains(r.err, "CAIRN_EDEAD"),
       "transient:5: exit 69, dead (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    j = show_json(LEDGER, st, "t5", NULL);
    ok(j && strcmp(jstr(j, "status"), "dead") == 0 && jint(step_of(j, "work"), "invocations") == 3,
       "transient:5: dead after 3 invocations");
    ok(tu_count_exact(trace, "work t5") == 3 && tu_count_lines(ledger, "t5 ") == 0,
       "transient:5: 3 executions, no ledger line");
    json_decref(j);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "t5", NULL);
    ok(rc == 69 && tu_count_exact(trace, "work t5") == 3, "running a dead task again: 69, "
                                                          "nothing runs");
    tu_result_free(&r);
    free(in), free(f);

    /* permanent: dead at once, error stored and shown */
    in = ledger_input("perm", 0, trace, ledger, "permanent");
    f = write_input(D, "perm.json", in);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "perm", NULL);
    ok(rc == 69 && tu_contains(r.err, "asked to fail permanently"),
       "permanent: exit 69 with the step's error (rc %d)", rc);
    tu_result_free(&r);
    j = show_json(LEDGER, st, "perm", NULL);
    ok(j && strcmp(jstr(j, "status"), "dead") == 0 &&
           tu_contains(jstr(j, "error"), "asked to fail permanently") &&
           strcmp(jstr(j, "error_step"), "work") == 0 &&
           jint(step_of(j, "work"), "invocations") == 1 &&
           strcmp(jstr(step_of(j, "work"), "status"), "failed") == 0,
       "permanent: dead, error and error_step stored, 1 invocation");
    json_decref(j);
    ok(cli(&r, LEDGER, st, "show", "perm", NULL) == 0 &&
           tu_contains(r.out, "asked to fail permanently"),
       "show (table) prints the error");
    tu_result_free(&r);
    ok(tu_count_exact(trace, "work perm") == 1, "permanent: one execution");
    free(in), free(f);

    /* parse rejects a bad field: dead, with a message naming the field */
    f = write_input(D, "badfield.json", "{\"text\": 5, \"ledger\": \"/dev/null\"}");
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "bf", NULL);
    ok(rc == 69 && tu_contains(r.err, "'text'"), "a step's own validation error: 69 naming the "
                                                 "field");
    tu_result_free(&r);
    free(f);
    free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ exit codes */

static void test_exit_codes(void)
{
    char *st = tu_fmt("%s/store-codes", D), *trace = tu_fmt("%s/codes.trace", D),
         *ledger = tu_fmt("%s/codes.ledger", D);
    char *in = ledger_input("codes", 0, trace, ledger, NULL);
    char *f = write_input(D, "codes.json", in);
    tu_result r;
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "c1", NULL) == 0,
       "exit 0: ok");
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--limit", "3", NULL) == 64,
       "exit 64: an option the command does not take");
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--max-attempts", "0",
                NULL) == 64,
       "exit 64: --max-attempts 0");
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--lease-ms", "abc", NULL) ==
           64,
       "exit 64: --lease-ms abc");
    int rc = cli(&r, LEDGER, st, "run", "--graph", "nosuch", "--input", f, NULL);
    ok(rc == 64 && tu_contains(r.err, "nosuch"), "exit 64: unknown graph, named (rc %d)", rc);
    tu_result_free(&r);
    char *bad = write_input(D, "codes-bad.json", "{\"text\": }");
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", bad, NULL) == 65,
       "exit 65: malformed JSON");
    rc = cli(&r, LEDGER, st, "show", "nosuch-task", NULL);
    ok(rc == 66 && tu_contains(r.err, "nosuch-task"), "exit 66: show of an unknown task (rc %d)",
       rc);
    tu_result_free(&r);
    ok(cli_code(LEDGER, st, "audit", "nosuch-task", NULL) == 66, "exit 66: audit of an unknown "
                                                                 "task");
    ok(cli_code(LEDGER, st, "invalidate", "nosuch-task", NULL) == 66, "exit 66: invalidate of an "
                                                                      "unknown task");
    ok(cli_code(LEDGER, st, "resolve", "nosuch-task", "--step", "append", "--done", NULL) == 66,
       "exit 66: resolve of an unknown task");
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", "/nonexistent/in.json", NULL) ==
           66,
       "exit 66: missing input file");
    char *pin = ledger_input("codes-perm", 0, trace, ledger, "permanent");
    char *fp = write_input(D, "codes-perm.json", pin);
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", fp, NULL) == 69,
       "exit 69: dead");
    char *notdir = tu_fmt("%s/codes.file", D);
    tu_write_file(notdir, "x", 1);
    char *under = tu_fmt("%s/store", notdir);
    rc = cli(&r, LEDGER, under, "run", "--graph", "ledger", "--input", f, NULL);
    ok(rc == 74 && tu_contains(r.err, under),
       "exit 74: store under a regular file, path named "
       "(rc %d: %s)",
       rc, oneline(r.err));
    tu_result_free(&r);
    if (GRAPHS) {
        char *fl = write_input(D, "codes-flaky.json", "{\"fail\": 1}");
        rc = cli(&r, GRAPHS, st, "run", "--graph", "flaky", "--input", fl, "--task", "c-flaky",
                 NULL);
        ok(rc == 75 || rc == 0, "exit 75: transient failure, retry later (rc %d)", rc);
        tu_result_free(&r);
        free(fl);
    }
    char *other = ledger_input("different", 0, trace, ledger, NULL);
    char *fo = write_input(D, "codes-other.json", other);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fo, "--task", "c1", NULL);
    ok(rc == 76 && tu_contains(r.err, "CAIRN_ECONFLICT"), "exit 76: same ID, other payload");
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fo, "--task", "c1", "--json",
             NULL);
    json_t *j = rc == 76 ? parse_out(&r) : NULL;
    ok(j && jint(j, "exit") == 76 && strcmp(jstr(j, "error"), "CAIRN_ECONFLICT") == 0 &&
           strcmp(jstr(j, "task"), "c1") == 0 && tu_contains(jstr(j, "message"), "payload hash"),
       "run --json on a conflict: {task, exit 76, error CAIRN_ECONFLICT, message}");
    json_decref(j);
    tu_result_free(&r);
    free(other), free(fo), free(notdir), free(under), free(pin), free(fp), free(bad);
    free(in), free(f), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ retry */

static void test_retry(void)
{
    if (!GRAPHS) {
        skip("retry: CAIRN_TEST_GRAPHS not set");
        return;
    }
    char *st = tu_fmt("%s/store-retry", D), *trace = tu_fmt("%s/retry.trace", D);
    char *in = tu_fmt("{\"fail\": 1, \"trace\": \"%s\"}", trace);
    char *f = write_input(D, "retry.json", in);
    tu_result r;
    int rc = cli(&r, GRAPHS, st, "run", "--graph", "flaky", "--input", f, "--task", "fl1", NULL);
    if (rc == 0) {
        /* the one-hour full-jitter backoff drew < 2 s (p ~ 0.06%): retried inline; still right */
        ok(tu_count_lines(trace, "work fl1") == 2, "flaky: retried inline (short backoff drawn)");
        tu_result_free(&r);
        free(in), free(f), free(st), free(trace);
        return;
    }
    ok(rc == 75 && tu_contains(r.err, "next retry"),
       "flaky run: exit 75, failed with a retry "
       "time (rc %d: %s)",
       rc, oneline(r.err));
    tu_result_free(&r);
    json_t *j = show_json(GRAPHS, st, "fl1", NULL);
    ok(j && strcmp(jstr(j, "status"), "failed") == 0 &&
           json_is_integer(json_object_get(j, "next_retry_at_ms")) && !json_object_get(j, "lease"),
       "task is failed with next_retry_at_ms and no lease");
    json_decref(j);
    /* a second, due task: one that was interrupted is due at once; here a pending-free store
     * has only fl1, so plain retry must skip it */
    rc = cli(&r, GRAPHS, st, "retry", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "ran") == 0, "retry: a not-yet-due task is skipped (ran 0)");
    json_decref(j);
    tu_result_free(&r);
    ok(tu_count_lines(trace, "work fl1") == 1, "skipped task did not run");
    rc = cli(&r, GRAPHS, st, "retry", "--now", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "ran") == 1 && jint(j, "succeeded") == 1 && jint(j, "failed") == 0,
       "retry --now --json: ran 1, succeeded 1 (rc %d: %s)", rc, oneline(r.out));
    json_decref(j);
    tu_result_free(&r);
    j = show_json(GRAPHS, st, "fl1", NULL);
    ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 && jint(j, "attempt") == 2 &&
           jint(step_of(j, "work"), "invocations") == 2,
       "after retry --now: succeeded on attempt 2, invocation 2");
    json_decref(j);
    ok(tu_count_lines(trace, "work fl1") == 2, "work ran exactly twice");
    ok(cli(&r, GRAPHS, st, "retry", NULL) == 0 && tu_contains(r.out, "ran 0"),
       "retry with nothing due: exit 0, ran 0");
    tu_result_free(&r);
    /* a task that fails again under retry makes retry exit 75 */
    char *in2 = tu_fmt("{\"fail\": 5, \"trace\": \"%s\"}", trace);
    char *f2 = write_input(D, "retry2.json", in2);
    rc = cli_code(GRAPHS, st, "run", "--graph", "flaky", "--input", f2, "--task", "fl2", NULL);
    rc = cli(&r, GRAPHS, st, "retry", "--now", NULL);
    ok(rc == 75 && tu_contains(r.out, "not succeeded 1"),
       "retry --now with a task failing again: "
       "exit 75 (rc %d: %s)",
       rc, oneline(r.out));
    tu_result_free(&r);
    free(in2), free(f2), free(in), free(f), free(st), free(trace);
}

/* ------------------------------------------------------------------ resolve */

static void test_resolve(void)
{
    if (!GRAPHS) {
        skip("resolve: CAIRN_TEST_GRAPHS not set");
        return;
    }
    char *st = tu_fmt("%s/store-resolve", D), *trace = tu_fmt("%s/resolve.trace", D);
    tu_result r;
    for (int done = 1; done >= 0; done--) {
        const char *id = done ? "dbt-done" : "dbt-notdone";
        char *marker = tu_fmt("%s/%s.marker", D, id);
        char *in = tu_fmt("{\"marker\": \"%s\", \"trace\": \"%s\"}", marker, trace);
        char *f = write_input(D, done ? "dbt1.json" : "dbt2.json", in);
        char *send_line = tu_fmt("send %s", id);
        int rc = cli(&r, GRAPHS, st, "run", "--graph", "doubt", "--input", f, "--task", id, NULL);
        ok(rc == 69 && tu_contains(r.err, "in doubt") && tu_contains(r.err, "resolve"),
           "%s: effect outcome unknown: exit 69, in doubt, hint to resolve (rc %d: %s)", id, rc,
           oneline(r.err));
        tu_result_free(&r);
        json_t *j = show_json(GRAPHS, st, id, NULL);
        ok(j && strcmp(jstr(j, "status"), "in_doubt") == 0 &&
               strcmp(jstr(step_of(j, "send"), "status"), "in_doubt") == 0 &&
               strcmp(jstr(j, "error_step"), "send") == 0,
           "%s: task and step are in_doubt", id);
        json_decref(j);
        rc = cli_code(GRAPHS, st, "run", "--graph", "doubt", "--input", f, "--task", id, NULL);
        ok(rc == 69 && tu_count_lines(trace, send_line) == 1,
           "%s: running again: still 69, the effect is not called again", id);
        rc = cli(&r, GRAPHS, st, "resolve", id, "--step", "prep", done ? "--done" : "--not-done",
                 NULL);
        ok(rc == 65, "%s: resolving a step that is not in doubt: 65 (rc %d)", id, rc);
        tu_result_free(&r);
        rc = cli(&r, GRAPHS, st, "resolve", id, "--step", "send", done ? "--done" : "--not-done",
                 NULL);
        ok(rc == 0 && tu_contains(r.out, "pending"), "%s: resolve --%s: exit 0, task pending", id,
           done ? "done" : "not-done");
        tu_result_free(&r);
        ok(status_is(GRAPHS, st, id, "pending"), "%s: status is pending", id);
        rc = cli_code(GRAPHS, st, "run", "--graph", "doubt", "--input", f, "--task", id, NULL);
        ok(rc == 0, "%s: next run exits 0 (rc %d)", id, rc);
        j = show_json(GRAPHS, st, id, NULL);
        ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 &&
               strcmp(jstr(step_of(j, "send"), "status"), "done") == 0,
           "%s: succeeded, send done", id);
        if (done)
            ok(j && json_is_true(json_object_get(step_of(j, "send"), "resolved")),
               "resolved --done: step marked resolved");
        json_decref(j);
        ok(tu_count_lines(trace, send_line) == (done ? 1 : 2),
           "%s: the effect ran %d time(s) in total", id, done ? 1 : 2);
        ok(cli_code(GRAPHS, st, "resolve", id, "--step", "send", "--done", NULL) == 65,
           "%s: resolving a succeeded task: 65", id);
        rc = cli(&r, GRAPHS, st, "audit", id, "--json", NULL);
        j = rc == 0 ? parse_out(&r) : NULL;
        int saw_doubt = 0, saw_resolve = 0;
        size_t i;
        json_t *a;
        json_array_foreach(j, i, a)
        {
            saw_doubt |= strcmp(jstr(a, "to"), "in_doubt") == 0;
            saw_resolve |= strcmp(jstr(a, "from"), "in_doubt") == 0 &&
                           strcmp(jstr(a, "to"), "pending") == 0 &&
                           tu_contains(jstr(a, "reason"), "resolved by operator");
        }
        ok(saw_doubt && saw_resolve,
           "%s: audit shows running->in_doubt and the operator's "
           "in_doubt->pending",
           id);
        json_decref(j);
        tu_result_free(&r);
        free(marker), free(in), free(f), free(send_line);
    }
    free(st), free(trace);
}

/* ------------------------------------------------------------------ invalidate */

static void test_invalidate(void)
{
    char *st = tu_fmt("%s/store-inv", D), *trace = tu_fmt("%s/inv.trace", D),
         *ledger = tu_fmt("%s/inv.ledger", D);
    char *in = ledger_input("inv", 0, trace, ledger, NULL);
    char *f = write_input(D, "inv.json", in);
    tu_result r;
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "inv", NULL) == 0,
       "invalidate: first run ok");
    json_t *j = show_json(LEDGER, st, "inv", NULL);
    char *nonce1 = strdup(j ? step_out(j, "work", "nonce") : "");
    char *parse_ms = tu_fmt("%lld", j ? jint(step_of(j, "parse"), "updated_ms") : -1);
    json_decref(j);
    int rc = cli(&r, LEDGER, st, "invalidate", "inv", "--from", "work", NULL);
    ok(rc == 0 && tu_contains(r.out, "pending"), "invalidate --from work: exit 0 (rc %d: %s)", rc,
       oneline(r.err));
    tu_result_free(&r);
    j = show_json(LEDGER, st, "inv", NULL);
    ok(j && strcmp(jstr(j, "status"), "pending") == 0 && jint(j, "generation") == 2 &&
           strcmp(jstr(step_of(j, "work"), "status"), "pending") == 0 &&
           strcmp(jstr(step_of(j, "parse"), "status"), "done") == 0,
       "after invalidate: pending, generation 2, work pending, parse still done");
    json_decref(j);
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "inv", NULL) == 0,
       "run after invalidate: exit 0");
    ok(tu_count_exact(trace, "work inv") == 2, "work ran again (2 trace lines)");
    ok(tu_count_lines(ledger, "inv ") == 2, "append ran again (2 ledger lines)");
    j = show_json(LEDGER, st, "inv", NULL);
    ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 && jint(j, "generation") == 2 &&
           strcmp(step_out(j, "work", "nonce"), nonce1) != 0 &&
           jint(step_of(j, "work"), "generation") == 2,
       "generation 2 succeeded with a new work output");
    char pms[32];
    snprintf(pms, sizeof pms, "%lld", j ? jint(step_of(j, "parse"), "updated_ms") : -2);
    ok(j && strcmp(pms, parse_ms) == 0 && jint(step_of(j, "parse"), "generation") == 1,
       "parse was not re-run (its generation-1 record still applies)");
    int hist_work = 0, hist_append = 0;
    size_t i;
    json_t *h;
    json_array_foreach(j ? json_object_get(j, "history") : NULL, i, h)
    {
        if (jint(h, "generation") == 1 && strcmp(jstr(h, "name"), "work") == 0 &&
            strcmp(jstr(json_object_get(h, "output"), "nonce"), nonce1) == 0)
            hist_work = 1;
        if (jint(h, "generation") == 1 && strcmp(jstr(h, "name"), "append") == 0)
            hist_append = 1;
    }
    ok(hist_work && hist_append, "history keeps the generation-1 work (old nonce) and append");
    json_decref(j);
    /* a new delivery ID for the new generation */
    rc = cli(&r, LEDGER, st, "audit", "inv", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    char dlv[2][64] = {"", ""};
    int nd = 0;
    json_array_foreach(j, i, h)
    {
        const char *reason = jstr(h, "reason");
        if (strncmp(reason, "effect intent ", 14) == 0 && nd < 2)
            snprintf(dlv[nd++], sizeof dlv[0], "%s", reason + 14);
    }
    ok(nd == 2 && strcmp(dlv[0], dlv[1]) != 0,
       "the new generation's effect has a new delivery "
       "ID (%s vs %s)",
       dlv[0], dlv[1]);
    json_decref(j);
    tu_result_free(&r);
    ok(cli_code(LEDGER, st, "invalidate", "inv", "--from", "nosuch", NULL) == 66,
       "invalidate --from an unknown step: 66");
    ok(cli_code(LEDGER, st, "invalidate", "inv", NULL) == 0 &&
           cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "inv", NULL) ==
               0 &&
           tu_count_exact(trace, "work inv") == 3,
       "invalidate (from the first step) re-runs everything");
    free(nonce1), free(parse_ms), free(in), free(f), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ gc */

static void test_gc(void)
{
    char *st = tu_fmt("%s/store-gc", D), *trace = tu_fmt("%s/gc.trace", D),
         *ledger = tu_fmt("%s/gc.ledger", D);
    char *in = ledger_input("gc", 0, trace, ledger, NULL);
    char *f = write_input(D, "gc.json", in);
    tu_result r;
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "gc1", NULL) == 0,
       "gc: task ran");
    int rc = cli(&r, LEDGER, st, "gc", "--json", NULL);
    json_t *j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "pruned") == 0 && jint(j, "removed") == 0, "gc with default retention: "
                                                               "nothing to do");
    json_decref(j);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "gc", "--retention-days", "0", "--tombstone-days", "30", "--json",
             NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "pruned") == 1 && jint(j, "removed") == 0,
       "gc --retention-days 0: pruned 1 "
       "(rc %d: %s)",
       rc, oneline(r.out));
    json_decref(j);
    tu_result_free(&r);
    j = show_json(LEDGER, st, "gc1", NULL);
    int outputs = 0;
    size_t i;
    json_t *s;
    json_array_foreach(j ? json_object_get(j, "steps") : NULL, i, s) outputs +=
        !json_is_null(json_object_get(s, "output"));
    ok(j && json_is_true(json_object_get(j, "tombstone")) &&
           strcmp(jstr(j, "status"), "succeeded") == 0 && outputs == 0 &&
           json_is_null(json_object_get(j, "input")),
       "show: tombstone, still succeeded, outputs and input gone");
    json_decref(j);
    ok(cli(&r, LEDGER, st, "show", "gc1", NULL) == 0 && tu_contains(r.out, "tombstone"),
       "show (table) says tombstone");
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "gc1", NULL);
    ok(rc == 0 && tu_contains(r.out, "tombstone"), "re-run after gc: exit 0, tombstone noted");
    tu_result_free(&r);
    ok(tu_count_exact(trace, "work gc1") == 1 && tu_count_lines(ledger, "gc1 ") == 1,
       "re-run after gc executed nothing");
    char *other = ledger_input("gc-other", 0, trace, ledger, NULL);
    char *fo = write_input(D, "gc-other.json", other);
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", fo, "--task", "gc1", NULL) == 76,
       "a tombstone still detects a conflicting payload (76)");
    ok(cli_code(LEDGER, st, "invalidate", "gc1", NULL) == 65, "invalidate of a tombstone: 65");
    rc =
        cli(&r, LEDGER, st, "gc", "--retention-days", "0", "--tombstone-days", "0", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "removed") == 1, "gc with both 0: removed 1");
    json_decref(j);
    tu_result_free(&r);
    ok(cli_code(LEDGER, st, "show", "gc1", NULL) == 66, "removed task: show exits 66");
    rc = cli(&r, LEDGER, st, "stats", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "tasks") == 0 && jint(j, "tombstones") == 0, "stats: no tasks, no tombstones");
    json_decref(j);
    tu_result_free(&r);
    ok(cli_code(LEDGER, st, "gc", "--retention-days", "5", "--tombstone-days", "1", NULL) == 64,
       "gc with tombstone-days < retention-days: 64");
    free(other), free(fo), free(in), free(f), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ graph pinning */

static void test_graph_change(void)
{
    if (!GRAPHS) {
        skip("graph change: CAIRN_TEST_GRAPHS not set");
        return;
    }
    char *st = tu_fmt("%s/store-pin", D), *trace = tu_fmt("%s/pin.trace", D);
    char *in = tu_fmt("{\"fail_v1\": true, \"trace\": \"%s\"}", trace);
    char *f = write_input(D, "pin.json", in);
    const char *v1[] = {"CAIRN_TEST_GRAPH_VERSION=1", NULL},
               *v2[] = {"CAIRN_TEST_GRAPH_VERSION=2", NULL};
    tu_result r;
    int rc =
        cli_env(&r, v1, GRAPHS, st, "run", "--graph", "pipe", "--input", f, "--task", "p1", NULL);
    ok(rc == 75, "pipe v1 with failing work: exit 75, task failed (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    int work_v1 = tu_count_lines(trace, "work p1 g1");
    rc = cli_env(&r, v2, GRAPHS, st, "run", "--graph", "pipe", "--input", f, "--task", "p1", NULL);
    ok(rc == 65 && tu_contains(r.err, "CAIRN_EGRAPHCHANGED") && tu_contains(r.err, "'work'") &&
           tu_contains(r.err, "--allow-graph-change"),
       "graph v2: exit 65 EGRAPHCHANGED naming the first changed step (rc %d: %s)", rc,
       oneline(r.err));
    tu_result_free(&r);
    json_t *j = show_json(GRAPHS, st, "p1", NULL);
    ok(j && strcmp(jstr(j, "status"), "failed") == 0 && jint(j, "generation") == 1,
       "the refused run changed nothing (failed, generation 1)");
    json_decref(j);
    rc = cli_env(&r, v2, GRAPHS, st, "run", "--graph", "pipe", "--input", f, "--task", "p1",
                 "--allow-graph-change", NULL);
    ok(rc == 0, "--allow-graph-change: exit 0 (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    ok(tu_count_lines(trace, "prep p1") == 1, "prep (unchanged) did not run again");
    ok(tu_count_lines(trace, "work p1 g1") == work_v1 &&
           tu_count_exact(trace, "work p1 g2 i1") == 1,
       "work re-ran once in generation 2");
    ok(tu_count_lines(trace, "emit p1") == 1, "emit ran once");
    j = show_json(GRAPHS, st, "p1", NULL);
    ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 && jint(j, "generation") == 2 &&
           strcmp(step_out(j, "work", "version"), "2") == 0,
       "succeeded in generation 2 with work v2's output");
    json_decref(j);
    /* a finished task is not affected by a graph change */
    rc = cli_env(&r, v1, GRAPHS, st, "run", "--graph", "pipe", "--input", f, "--task", "p1", NULL);
    ok(rc == 0 && tu_contains(r.out, "already succeeded"),
       "succeeded task under another graph "
       "version: already succeeded (rc %d)",
       rc);
    tu_result_free(&r);
    free(in), free(f), free(st), free(trace);
}

/* ------------------------------------------------------------------ tenant limit */

static void test_tenant(void)
{
    char *st = tu_fmt("%s/store-tenant", D), *trace = tu_fmt("%s/tenant.trace", D),
         *ledger = tu_fmt("%s/tenant.ledger", D);
    char *ina = tu_fmt("{\"tenant\":\"A\",\"text\":\"a1\",\"work_ms\":3000,\"trace\":\"%s\","
                       "\"ledger\":\"%s\"}",
                       trace, ledger);
    char *ina2 = tu_fmt("{\"tenant\":\"A\",\"text\":\"a2\",\"trace\":\"%s\",\"ledger\":\"%s\"}",
                        trace, ledger);
    char *inb = tu_fmt("{\"tenant\":\"B\",\"text\":\"b1\",\"trace\":\"%s\",\"ledger\":\"%s\"}",
                       trace, ledger);
    char *fa = write_input(D, "ta1.json", ina), *fa2 = write_input(D, "ta2.json", ina2),
         *fb = write_input(D, "tb1.json", inb);
    pid_t bg = spawn_tenant_run(st, fa, "a1", trace);
    ok(tu_count_exact(trace, "work a1") == 1, "tenant A's long task is running");
    tu_result r;
    int rc0 = cli(&r, LEDGER, st, "invalidate", "a1", NULL);
    ok(rc0 == 75 && tu_contains(r.err, "running"),
       "invalidate of a running task: 75, says it "
       "runs (rc %d: %s)",
       rc0, oneline(r.err));
    tu_result_free(&r);
    ok(cli_code(LEDGER, st, "resolve", "a1", "--step", "append", "--done", NULL) == 65,
       "resolve of a running task: 65");
    rc0 = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fa, "--task", "a1", NULL);
    ok(rc0 == 75 && tu_contains(r.err, "CAIRN_EBUSY"),
       "running the same task meanwhile: 75 "
       "EBUSY (rc %d)",
       rc0);
    tu_result_free(&r);
    rc0 = cli(&r, LEDGER, st, "show", "a1", "--json", NULL);
    json_t *jl = rc0 == 0 ? parse_out(&r) : NULL;
    ok(jl && strcmp(jstr(jl, "status"), "running") == 0 &&
           json_is_object(json_object_get(jl, "lease")) &&
           jint(json_object_get(jl, "lease"), "pid") == (long long)bg,
       "show: running, lease held by the background process");
    json_decref(jl);
    tu_result_free(&r);
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fa2, "--task", "a2",
                 "--tenant-field", "tenant", "--max-running-per-tenant", "1", NULL);
    ok(rc == 75 && tu_contains(r.err, "tenant 'A'") && tu_contains(r.err, "CAIRN_ETENANT"),
       "second task of tenant A: exit 75 ETENANT (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    ok(tu_count_exact(trace, "work a2") == 0, "it did not run");
    json_t *j = show_json(LEDGER, st, "a2", NULL);
    ok(j && strcmp(jstr(j, "status"), "pending") == 0 && jint(j, "attempt") == 0,
       "it is recorded as pending, no attempt used");
    json_decref(j);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fb, "--task", "b1",
             "--tenant-field", "tenant", "--max-running-per-tenant", "1", NULL);
    ok(rc == 0, "tenant B runs meanwhile: exit 0 (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fa2, "--task", "a2", NULL);
    ok(rc == 0 || rc == 75, "without a tenant limit the same task may run (rc %d)", rc);
    tu_result_free(&r);
    int bgrc = tu_wait(bg, 120000);
    ok(bgrc == 0, "tenant A's long task finished: exit 0 (rc %d)", bgrc);
    if (bgrc == -2)
        tu_kill_wait(bg);
    rc = cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", fa2, "--task", "a2",
                  "--tenant-field", "tenant", "--max-running-per-tenant", "1", NULL);
    ok(rc == 0 && tu_count_exact(trace, "work a2") == 1, "after it, tenant A's second task "
                                                         "succeeds (work ran once)");
    char *nf = write_input(D, "tnone.json", "{\"text\":\"x\",\"ledger\":\"/dev/null\"}");
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", nf, "--tenant-field", "tenant",
             "--max-running-per-tenant", "1", NULL);
    ok(rc == 65 && tu_contains(r.err, "tenant"),
       "input without the tenant field: 65 naming it "
       "(rc %d)",
       rc);
    tu_result_free(&r);
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", nf, "--tenant-field", "tenant",
                NULL) == 64,
       "--tenant-field without --max-running-per-tenant: 64");
    free(nf), free(ina), free(ina2), free(inb), free(fa), free(fa2), free(fb);
    free(st), free(trace), free(ledger);
}

int main(void)
{
    cli_init();
    D = tu_mkdtemp("cli");
    diag("temp dir %s", D);
    test_help();
    test_every_command_options();
    test_happy_and_ids();
    test_piped_input_compared();
    test_message_dedupe();
    test_failures();
    test_exit_codes();
    test_retry();
    test_resolve();
    test_invalidate();
    test_gc();
    test_graph_change();
    test_tenant();
    int rc = tap_done();
    if (rc == 0 && !getenv("CAIRN_TEST_KEEP"))
        tu_rm_rf(D);
    free(D);
    return rc;
}
