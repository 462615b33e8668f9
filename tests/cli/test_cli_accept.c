/* test_cli_accept.c - what an acceptance review of the CLI found, pinned down end to end.
 *
 * Each scenario is one finding of the review (F1-F12), run with the real binaries on real stores:
 * a typo'd store path must not become a store, `retry` must say which tasks failed and why and
 * apply the tenant limit, `list` must not hide unreadable records, the built-in graph must say
 * that it needs a configuration, exit codes must match the README, and messages must name the
 * option and the program. Every check failed before its fix.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "cli_common.h"

static char *D;
static const char *CAIRN; /* the `cairn` executable, or NULL */

static int path_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* bin ARGS... --store store, with ARGS a NULL-terminated array. */
static int run_args(tu_result *r, const char *bin, const char *store, const char *const *args)
{
    const char *argv[48];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i] && n < 44; i++)
        argv[n++] = args[i];
    if (store) {
        argv[n++] = "--store";
        argv[n++] = store;
    }
    argv[n] = NULL;
    return tu_run(r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
}

/* ------------------------------------------------------------------ F2: no accidental stores */

static void test_no_store_created(void)
{
    char *trace = tu_fmt("%s/f2.trace", D), *ledger = tu_fmt("%s/f2.ledger", D);
    char *in = ledger_input("f2", 0, trace, ledger, NULL);
    char *f = write_input(D, "f2.json", in);
    static const char *const cmds[][7] = {{"show", "t1", NULL},
                                          {"list", NULL},
                                          {"stats", NULL},
                                          {"audit", "t1", NULL},
                                          {"retry", NULL},
                                          {"resolve", "t1", "--step", "append", "--done", NULL},
                                          {"invalidate", "t1", NULL},
                                          {"gc", NULL}};
    tu_result r;
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char *typo = tu_fmt("%s/typo-%zu", D, i);
        int rc = run_args(&r, LEDGER, typo, cmds[i]);
        ok(rc == 66 && tu_contains(r.err, typo) && tu_contains(r.err, "no store") &&
               !path_exists(typo),
           "%s on a missing store: 66 naming the path, nothing created (rc %d: %s)", cmds[i][0], rc,
           oneline(r.err));
        tu_result_free(&r);
        free(typo);
    }
    char *empty = tu_fmt("%s/empty-dir", D);
    mkdir(empty, 0700);
    char *data = tu_fmt("%s/data.mdb", empty);
    int rc = cli(&r, LEDGER, empty, "list", NULL);
    ok(rc == 66 && !path_exists(data), "list on an empty directory: 66, no data.mdb made (rc %d)",
       rc);
    tu_result_free(&r);

    /* `run` refusals that need no store create none */
    struct {
        const char *what;
        int code;
        const char *args[12];
    } refused[] = {
        {"--task-from a missing field", 65, {"--task-from", "nope", NULL}},
        {"unknown graph", 64, {"--task", "x", NULL}},
        {"empty --message-id", 64, {"--task", "x", "--message-id", "", NULL}},
        {"input without the tenant field",
         65,
         {"--tenant-field", "tenant", "--max-running-per-tenant", "1", NULL}},
        {"--max-running-per-tenant alone", 64, {"--max-running-per-tenant", "1", NULL}},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char *st = tu_fmt("%s/refused-%zu", D, i);
        const char *args[20] = {"run", "--graph", i == 1 ? "nosuch" : "ledger", "--input", f};
        int n = 5;
        for (int k = 0; refused[i].args[k]; k++)
            args[n++] = refused[i].args[k];
        args[n] = NULL;
        rc = run_args(&r, LEDGER, st, args);
        ok(rc == refused[i].code && !path_exists(st),
           "run, %s: %d and no store created (rc %d: %s)", refused[i].what, refused[i].code, rc,
           oneline(r.err));
        tu_result_free(&r);
        free(st);
    }
    char *st = tu_fmt("%s/created", D);
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, NULL) == 0 &&
           cli_code(LEDGER, st, "list", NULL) == 0,
       "run creates the store; list reads it");
    /* init: an empty store on purpose (tools that read the store before any task ran) */
    char *fresh = tu_fmt("%s/init-store", D);
    rc = cli(&r, LEDGER, fresh, "init", NULL);
    ok(rc == 0 && tu_contains(r.out, "created") && cli_code(LEDGER, fresh, "list", NULL) == 0,
       "init creates an empty store that list reads (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, fresh, "init", NULL);
    ok(rc == 0 && tu_contains(r.out, "exists"), "init of an existing store: 0, unchanged");
    tu_result_free(&r);
    free(fresh);
    free(st), free(empty), free(data), free(in), free(f), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ F1: --inline-wait-ms */

static void test_inline_wait(void)
{
    char *st = tu_fmt("%s/store-iw", D), *trace = tu_fmt("%s/iw.trace", D),
         *ledger = tu_fmt("%s/iw.ledger", D);
    tu_result r;
    ok(cli(&r, LEDGER, NULL, "run", "--help", NULL) == 0 &&
           tu_contains(r.out, "--inline-wait-ms") && tu_contains(r.out, "0 = never wait"),
       "run --help documents --inline-wait-ms");
    tu_result_free(&r);
    /* the step's backoff is a uniform draw from [0, 50] ms: a draw of exactly 0 fits in a wait
     * of 0 and is retried inline, so take the first of three tasks that was not */
    int rc = -1;
    char id[16] = "";
    for (int k = 0; k < 3 && rc != 75; k++) {
        snprintf(id, sizeof id, "iw%d", k);
        char *in = ledger_input(id, 0, trace, ledger, "transient:1");
        char *f = write_input(D, "iw.json", in);
        rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", id,
                 "--inline-wait-ms", "0", NULL);
        if (rc != 75)
            diag("%s: rc %d (%s)", id, rc, oneline(r.err));
        tu_result_free(&r);
        free(in), free(f);
    }
    ok(rc == 75, "transient:1 with --inline-wait-ms 0: exit 75 (rc %d)", rc);
    json_t *j = show_json(LEDGER, st, id, NULL);
    ok(j && strcmp(jstr(j, "status"), "failed") == 0 &&
           json_is_integer(json_object_get(j, "next_retry_at_ms")) &&
           jint(step_of(j, "work"), "invocations") == 1,
       "%s: failed with a next retry time after one invocation", id);
    json_decref(j);
    rc = cli(&r, LEDGER, st, "retry", "--now", NULL);
    ok(rc == 0, "retry --now: exit 0 (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    j = show_json(LEDGER, st, id, NULL);
    char *work = tu_fmt("work %s", id), *line = tu_fmt("%s ", id);
    ok(j && strcmp(jstr(j, "status"), "succeeded") == 0 && jint(j, "attempt") == 2 &&
           tu_count_exact(trace, work) == 2 && tu_count_lines(ledger, line) == 1,
       "%s: succeeded on attempt 2, work ran twice, one ledger line", id);
    json_decref(j);
    /* `run --task ID` without --input resumes a task the store has with its stored input */
    char *id2 = tu_fmt("%s-again", id);
    int rc2 = -1;
    for (int k = 0; k < 3 && rc2 != 75; k++) {
        free(id2);
        id2 = tu_fmt("iwa%d", k);
        char *in = ledger_input(id2, 0, trace, ledger, "transient:1");
        char *f = write_input(D, "iw.json", in);
        rc2 = cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", id2,
                       "--inline-wait-ms", "0", NULL);
        free(in), free(f);
    }
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", id2, NULL);
    j = show_json(LEDGER, st, id2, NULL);
    ok(rc2 == 75 && rc == 0 && j && strcmp(jstr(j, "status"), "succeeded") == 0,
       "run --task %s without --input (stdin empty): resumed with its stored input, succeeded "
       "(rc %d: %s)",
       id2, rc, oneline(r.err));
    tu_result_free(&r);
    json_decref(j);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--task", "never-seen", NULL);
    ok(rc == 65, "run --task of an unknown task without --input reads stdin: empty, 65 (rc %d)",
       rc);
    tu_result_free(&r);
    free(id2);
    free(work), free(line), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ F3: retry says why */

/* The entry of task `id` in a `retry --json` document, or NULL. */
static json_t *task_in(const json_t *retry_json, const char *id)
{
    return find_by(json_object_get(retry_json, "tasks"), "task", id);
}

static void test_retry_reports(void)
{
    if (!GRAPHS) {
        skip("retry reports: CAIRN_TEST_GRAPHS not set");
        return;
    }
    char *st = tu_fmt("%s/store-rr", D), *trace = tu_fmt("%s/rr.trace", D);
    const char *v1[] = {"CAIRN_TEST_GRAPH_VERSION=1", NULL},
               *v2[] = {"CAIRN_TEST_GRAPH_VERSION=2", NULL};
    char *in = tu_fmt("{\"fail_v1\": true, \"trace\": \"%s\"}", trace);
    char *f = write_input(D, "rr.json", in);
    tu_result r;
    int rc =
        cli_env(&r, v1, GRAPHS, st, "run", "--graph", "pipe", "--input", f, "--task", "p1", NULL);
    ok(rc == 75, "pipe v1: p1 failed, exit 75 (rc %d)", rc);
    tu_result_free(&r);
    rc = cli_env(&r, v2, GRAPHS, st, "retry", "--now", NULL);
    ok(rc == 69 && tu_contains(r.err, "retry: p1: ") &&
           tu_contains(r.err, "--allow-graph-change") &&
           tu_contains(r.err, "CAIRN_EGRAPHCHANGED") && tu_contains(r.err, "waiting will not help"),
       "retry under a changed graph: 69, names p1, the reason and the way out (rc %d: %s)", rc,
       oneline(r.err));
    tu_result_free(&r);
    rc = cli_env(&r, v2, GRAPHS, st, "retry", "--now", "--json", NULL);
    json_t *j = rc == 69 ? parse_out(&r) : NULL;
    json_t *t = task_in(j, "p1");
    ok(t && jint(t, "exit") == 65 && strcmp(jstr(t, "error"), "CAIRN_EGRAPHCHANGED") == 0 &&
           tu_contains(jstr(t, "message"), "allow-graph-change"),
       "retry --json: tasks[] has p1 with exit 65, error and message");
    json_decref(j);
    tu_result_free(&r);
    rc = cli_env(&r, v2, GRAPHS, st, "retry", "--now", "--allow-graph-change", NULL);
    ok(rc == 0 && status_is(GRAPHS, st, "p1", "succeeded"),
       "retry --allow-graph-change: exit 0, p1 succeeded (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);

    /* a transient failure: named, 75 */
    char *in2 = tu_fmt("{\"fail\": 5, \"trace\": \"%s\"}", trace);
    char *f2 = write_input(D, "rr2.json", in2);
    cli_code(GRAPHS, st, "run", "--graph", "flaky", "--input", f2, "--task", "fl", NULL);
    rc = cli(&r, GRAPHS, st, "retry", "--now", NULL);
    ok(rc == 75 && tu_contains(r.err, "retry: fl: ") && tu_contains(r.err, "CAIRN_ETRANSIENT"),
       "retry with a task failing again: 75, names it (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);

    /* a task of a graph this program does not define */
    rc = cli(&r, LEDGER, st, "retry", "--now", NULL);
    ok(rc == 69 && tu_contains(r.err, "retry: fl: ") && tu_contains(r.err, "'flaky'"),
       "retry by a program without the task's graph: 69, names task and graph (rc %d: %s)", rc,
       oneline(r.err));
    tu_result_free(&r);

    /* an operator's resolution is shown as a note, not as an error */
    char *marker = tu_fmt("%s/rr.marker", D);
    char *in3 = tu_fmt("{\"marker\": \"%s\", \"trace\": \"%s\"}", marker, trace);
    char *f3 = write_input(D, "rr3.json", in3);
    cli_code(GRAPHS, st, "run", "--graph", "doubt", "--input", f3, "--task", "db", NULL);
    cli_code(GRAPHS, st, "resolve", "db", "--step", "send", "--done", NULL);
    cli_code(GRAPHS, st, "run", "--graph", "doubt", "--input", f3, "--task", "db", NULL);
    rc = cli(&r, GRAPHS, st, "show", "db", NULL);
    ok(rc == 0 && tu_contains(r.out, "note: resolved") && !tu_contains(r.out, "error: resolved"),
       "show labels a resolution 'note', not 'error': %s", oneline(r.out));
    tu_result_free(&r);
    free(marker), free(in3), free(f3), free(in2), free(f2), free(in), free(f), free(st);
    free(trace);
}

static void test_retry_dead(void)
{
    char *st = tu_fmt("%s/store-rd", D), *trace = tu_fmt("%s/rd.trace", D),
         *ledger = tu_fmt("%s/rd.ledger", D);
    char *in = ledger_input("rd", 0, trace, ledger, "transient:5");
    char *f = write_input(D, "rd.json", in);
    tu_result r;
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "rd",
                 "--inline-wait-ms", "0", NULL);
    ok(rc == 75, "transient:5 with --inline-wait-ms 0: 75 (rc %d)", rc);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "retry", "--now", NULL);
    ok(rc == 69 && tu_contains(r.err, "retry: rd: ") && tu_contains(r.err, "dead"),
       "retry that makes a task dead: 69, names it and says dead (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "show", "rd", NULL);
    ok(rc == 0 && tu_contains(r.out, "step 'work' failed") && !tu_contains(r.out, "work: step"),
       "show does not repeat the step name in the error: %s", oneline(r.out));
    tu_result_free(&r);
    free(in), free(f), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ F4, F5: tenant limit */

static void test_retry_tenant(void)
{
    char *st = tu_fmt("%s/store-rt", D), *trace = tu_fmt("%s/rt.trace", D),
         *ledger = tu_fmt("%s/rt.ledger", D);
    char *ina = tu_fmt("{\"tenant\":\"A\",\"text\":\"a1\",\"work_ms\":3000,\"trace\":\"%s\","
                       "\"ledger\":\"%s\"}",
                       trace, ledger);
    char *ina2 = tu_fmt("{\"tenant\":\"A\",\"text\":\"a2\",\"trace\":\"%s\",\"ledger\":\"%s\"}",
                        trace, ledger);
    char *fa = write_input(D, "rt1.json", ina), *fa2 = write_input(D, "rt2.json", ina2);
    pid_t bg = spawn_tenant_run(st, fa, "a1", trace);
    tu_result r;
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fa2, "--task", "a2",
                 "--tenant-field", "tenant", "--max-running-per-tenant", "1", NULL);
    ok(rc == 75 && status_is(LEDGER, st, "a2", "pending"),
       "a2 over tenant A's limit: 75, pending (rc %d)", rc);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "retry", "--tenant-field", "tenant", "--max-running-per-tenant", "1",
             "--json", NULL);
    json_t *j = rc == 0 ? parse_out(&r) : NULL;
    json_t *t = task_in(j, "a2");
    ok(j && jint(j, "ran") == 0 && jint(j, "deferred") >= 1 && t &&
           strcmp(jstr(t, "error"), "CAIRN_ETENANT") == 0 && tu_count_exact(trace, "work a2") == 0,
       "retry with the tenant limit while a1 runs: a2 deferred, not run (rc %d: %s)", rc,
       oneline(r.out));
    json_decref(j);
    tu_result_free(&r);
    int bgrc = tu_wait(bg, 120000);
    if (bgrc == -2)
        tu_kill_wait(bg);
    ok(bgrc == 0, "a1 finished (rc %d)", bgrc);
    rc = cli(&r, LEDGER, st, "retry", "--tenant-field", "tenant", "--max-running-per-tenant", "1",
             NULL);
    ok(rc == 0 && tu_count_exact(trace, "work a2") == 1 && status_is(LEDGER, st, "a2", "succeeded"),
       "after a1, retry with the limit runs a2 (rc %d: %s)", rc, oneline(r.out));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "retry", "--max-running-per-tenant", "1", NULL);
    ok(rc == 64 && tu_contains(r.err, "--tenant-field"),
       "retry --max-running-per-tenant without --tenant-field: 64 saying so (rc %d)", rc);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fa2, "--max-running-per-tenant",
             "1", NULL);
    ok(rc == 64 && tu_contains(first_line(r.err), "--tenant-field"),
       "run --max-running-per-tenant without --tenant-field: 64, first line says so (%s)",
       first_line(r.err));
    tu_result_free(&r);
    free(ina), free(ina2), free(fa), free(fa2), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ F8: unreadable records */

static void test_list_unreadable(void)
{
    if (access("/usr/bin/mdb_dump", X_OK) != 0 || access("/usr/bin/mdb_load", X_OK) != 0) {
        skip("list of a corrupt record: mdb_dump/mdb_load not installed (lmdb-utils)");
        return;
    }
    char *st = tu_fmt("%s/store-corrupt", D), *trace = tu_fmt("%s/cr.trace", D),
         *ledger = tu_fmt("%s/cr.ledger", D);
    for (int k = 1; k <= 2; k++) {
        char *text = tu_fmt("c%d", k);
        char *in = ledger_input(text, 0, trace, ledger, NULL);
        char *f = write_input(D, "cr.json", in);
        cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", text, NULL);
        free(text), free(in), free(f);
    }
    /* cut task c1's record (key "c1" = 6331) to its first 9 bytes */
    char *sh = tu_fmt("mdb_dump -s tasks '%s' | awk 'prev==\" 6331\"{$0=substr($0,1,19)} "
                      "{print; prev=$0}' | mdb_load -s tasks '%s'",
                      st, st);
    const char *argv[] = {"/bin/sh", "-c", sh, NULL};
    tu_result r;
    int rc = tu_run(&r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
    tu_result_free(&r);
    int shown = cli_code(LEDGER, st, "show", "c1", NULL);
    ok(rc == 0 && shown == 74, "setup: c1's record is corrupt (show: %d)", shown);
    rc = cli(&r, LEDGER, st, "list", NULL);
    ok(rc == 74 && tu_contains(r.out, "c2") && !tu_contains(r.out, "c1 ") &&
           tu_contains(r.err, "'c1'") && tu_contains(r.err, "cannot be read"),
       "list: lists c2, warns about c1 by name, exit 74 (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "list", "--json", NULL);
    json_t *j = rc == 74 ? parse_out(&r) : NULL;
    json_t *u = json_array_get(json_object_get(j, "unreadable"), 0);
    ok(j && json_array_size(json_object_get(j, "tasks")) == 1 && u &&
           strcmp(jstr(u, "task"), "c1") == 0 && strcmp(jstr(u, "error"), "CAIRN_ECORRUPT") == 0 &&
           *jstr(u, "message"),
       "list --json: {tasks: [c2], unreadable: [{task c1, error, message}]}");
    json_decref(j);
    tu_result_free(&r);
    /* retry must not skip an unreadable due record either: c3 fails (due), then is cut */
    char *in = ledger_input("c3", 0, trace, ledger, "transient:1");
    char *f = write_input(D, "cr.json", in);
    int ran = cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "c3",
                       "--inline-wait-ms", "0", NULL);
    free(in), free(f), free(sh);
    sh = tu_fmt("mdb_dump -s tasks '%s' | awk 'prev==\" 6333\"{$0=substr($0,1,19)} "
                "{print; prev=$0}' | mdb_load -s tasks '%s'",
                st, st);
    const char *argv3[] = {"/bin/sh", "-c", sh, NULL};
    rc = tu_run(&r, argv3, NULL, NULL, 0, CMD_TIMEOUT_MS);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "retry", "--now", NULL);
    ok(ran == 75 && rc == 74 && tu_contains(r.err, "c3") && tu_contains(r.err, "corrupt"),
       "retry: a due task whose record cannot be read is reported by name, not skipped (rc %d: "
       "%s)",
       rc, oneline(r.err));
    tu_result_free(&r);
    free(sh), free(st), free(trace), free(ledger);
}

/* ------------------------------------------------------------------ F9: --config */

static void test_config_hint(void)
{
    if (!CAIRN || getenv("CAIRN_CONFIG")) {
        skip("built-in graph without a config: no cairn binary, or CAIRN_CONFIG is set");
        return;
    }
    tu_result r;
    ok(cli(&r, CAIRN, NULL, "run", "--help", NULL) == 0 && tu_contains(r.out, "--config FILE") &&
           tu_contains(r.out, "CAIRN_CONFIG"),
       "cairn run --help names --config FILE and CAIRN_CONFIG");
    tu_result_free(&r);
    ok(cli(&r, CAIRN, NULL, "retry", "--help", NULL) == 0 && tu_contains(r.out, "--config FILE"),
       "cairn retry --help names --config FILE");
    tu_result_free(&r);
    char *st = tu_fmt("%s/store-cfg", D);
    char *f = write_input(D, "cfg.json", "{\"title\": \"x\"}");
    int rc = cli(&r, CAIRN, st, "run", "--graph", "default", "--task", "c1", "--input", f, NULL);
    ok(rc == 64 &&
           tu_contains(r.err, "no pipeline config: pass --config FILE or set CAIRN_CONFIG") &&
           !path_exists(st),
       "cairn run --graph default without a config: 64 saying so, no store (rc %d: %s)", rc,
       oneline(r.err));
    tu_result_free(&r);
    char *ledger_store = tu_fmt("%s/created", D); /* made by test_no_store_created */
    rc = cli(&r, CAIRN, ledger_store, "retry", NULL);
    ok(rc == 64 && tu_contains(r.err, "no pipeline config"),
       "cairn retry without a config: 64 saying so, not 75 forever (rc %d: %s)", rc,
       oneline(r.err));
    tu_result_free(&r);
    rc = cli(&r, CAIRN, ledger_store, "list", "--config", f, NULL);
    ok(rc == 64 && tu_contains(r.err, "--config"),
       "cairn list --config: refused as an option list does not take (rc %d: %s)", rc,
       oneline(r.err));
    tu_result_free(&r);
    free(ledger_store), free(st), free(f);
}

/* ------------------------------------------------------------------ F10, F11, F12 */

static void test_codes_and_messages(void)
{
    char *st = tu_fmt("%s/store-msgs", D), *trace = tu_fmt("%s/m.trace", D),
         *ledger = tu_fmt("%s/m.ledger", D);
    char *in = ledger_input("m", 0, trace, ledger, NULL);
    char *f = write_input(D, "m.json", in);
    tu_result r;
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", f, "--task", "m1", NULL) == 0,
       "setup: a store with a task");

    /* F10 */
    int rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", D, NULL);
    ok(rc == 66 && tu_contains(r.err, "is a directory"),
       "a directory as --input: 66 (input), not 74 (store) (rc %d: %s)", rc, oneline(r.err));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "retry", "--graph", "nosuch", NULL);
    ok(rc == 64 && tu_contains(r.err, "'nosuch'"), "retry --graph nosuch: 64 naming it (rc %d)",
       rc);
    tu_result_free(&r);
    const char *src = getenv("CAIRN_SOURCE_ROOT");
    if (src) {
        /* CI counts the logs of several builds (build, build-asan, build-tsan) together */
        char *log = tu_fmt("%s/testlog.json", D), *log2 = tu_fmt("%s/testlog2.json", D);
        const char *lines = "{\"name\": \"a\", \"result\": \"OK\"}\n"
                            "{\"name\": \"b\", \"result\": \"SKIP\"}\n"
                            "{\"name\": \"c\", \"result\": \"FAIL\"}\n"
                            "{\"name\": \"d\", \"result\": \"OK\"}\n";
        const char *lines2 = "{\"name\": \"a\", \"result\": \"OK\"}\n"
                             "{\"name\": \"e\", \"result\": \"TIMEOUT\", "
                             "\"stdout\": \"1..9\\nok 1 - first\\nok 2 - where it stopped\\n\"}\n";
        tu_write_file(log, lines, strlen(lines));
        tu_write_file(log2, lines2, strlen(lines2));
        char *ci = tu_fmt("%s/.ci/run", src);
        const char *argv[] = {"/bin/bash", ci, "--count", log, log2, NULL};
        rc = tu_run(&r, argv, NULL, NULL, 0, CMD_TIMEOUT_MS);
        size_t n = strlen(r.out);
        while (n && r.out[n - 1] == '\n')
            r.out[--n] = 0;
        const char *last = strrchr(r.out, '\n');
        last = last ? last + 1 : r.out;
        ok(strcmp(last, "3 passed, 2 failed") == 0 && tu_contains(r.out, "1 skipped") && rc == 1,
           ".ci/run --count over two logs: the last line is exactly 'N passed, N failed' over "
           "both, skipped counted before (rc %d, last '%s')",
           rc, last);
        ok(tu_contains(r.out, "e (TIMEOUT)") && tu_contains(r.out, "ok 2 - where it stopped"),
           ".ci/run --count prints a failed test's last lines of output (a timeout's show nowhere "
           "else): %s",
           oneline(r.out));
        tu_result_free(&r);
        const char *one[] = {"/bin/bash", ci, "--count", log2, NULL};
        rc = tu_run(&r, one, NULL, NULL, 0, CMD_TIMEOUT_MS);
        ok(rc == 1 && tu_contains(r.out, "1 passed, 1 failed"),
           ".ci/run --count over one log counts that log alone (rc %d: %s)", rc, oneline(r.out));
        tu_result_free(&r);
        char *gone = tu_fmt("%s/no-testlog.json", D);
        const char *missing[] = {"/bin/bash", ci, "--count", log, gone, NULL};
        rc = tu_run(&r, missing, NULL, NULL, 0, CMD_TIMEOUT_MS);
        ok(rc == 64 && tu_contains(r.err, "no-testlog.json"),
           ".ci/run --count with a log that does not exist: 64 naming it (rc %d: %s)", rc,
           oneline(r.err));
        tu_result_free(&r);
        free(ci), free(log), free(log2), free(gone);
    } else {
        skip(".ci/run: CAIRN_SOURCE_ROOT not set");
    }

    /* F11: a consumed message whose task is dead */
    char *pin = ledger_input("mp", 0, trace, ledger, "permanent");
    char *fp = write_input(D, "mp.json", pin);
    ok(cli_code(LEDGER, st, "run", "--graph", "ledger", "--input", fp, "--message-id", "p0:18",
                NULL) == 69,
       "message p0:18: its task is dead (69)");
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fp, "--message-id", "p0:18",
             NULL);
    ok(rc == 0 && tu_contains(r.out, "already consumed") && tu_contains(r.out, "is dead"),
       "redelivered p0:18: exit 0, and says the task is dead (%s)", oneline(r.out));
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "run", "--graph", "ledger", "--input", fp, "--message-id", "p0:18",
             "--json", NULL);
    json_t *j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && strcmp(jstr(j, "status"), "dead") == 0 && tu_contains(jstr(j, "message"), "is dead"),
       "--json: status dead, message says so");
    json_decref(j);
    tu_result_free(&r);

    /* F12: option errors name the option */
    struct {
        const char *args[10];
        const char *want;
        int last; /* the option ends the command line (no --store after it) */
    } opt[] = {
        {{"retry", "--limit", "-1", NULL}, "invalid value '-1' for --limit", 0},
        {{"run", "--graph", "ledger", "--input", f, "--max-attempts", "0", NULL},
         "invalid value '0' for --max-attempts",
         0},
        {{"run", "--graph", "ledger", "--input", f, "--map-max", "1k", NULL},
         "invalid value '1k' for --map-max",
         0},
        {{"list", "--tenant-field", "x", NULL}, "--tenant-field", 0},
        {{"list", "--limit", NULL}, "--limit needs a value", 1},
    };
    for (size_t i = 0; i < sizeof opt / sizeof *opt; i++) {
        rc = run_args(&r, LEDGER, opt[i].last ? NULL : st, opt[i].args);
        ok(rc == 64 && tu_contains(r.err, opt[i].want), "%s %s: 64, '%s' (%s)", opt[i].args[0],
           opt[i].args[1], opt[i].want, oneline(r.err));
        tu_result_free(&r);
    }
    /* usage errors say what is wrong before the usage */
    struct {
        const char *args[10];
        const char *want;
    } use[] = {
        {{"gc", "--retention-days", "7", "--tombstone-days", "1", NULL}, "--tombstone-days"},
        {{"run", "--input", f, NULL}, "--graph"},
        {{"run", "--graph", "ledger", "--input", f, "--task", "a", "--task-from", "b", NULL},
         "--task-from"},
        {{"run", "--graph", "ledger", "--input", f, "--tenant-field", "t", NULL},
         "--max-running-per-tenant"},
        {{"show", NULL}, "task ID"},
    };
    for (size_t i = 0; i < sizeof use / sizeof *use; i++) {
        rc = run_args(&r, LEDGER, st, use[i].args);
        ok(rc == 64 && tu_contains(first_line(r.err), use[i].want) &&
               tu_contains(r.err, "usage: cairn-ledger"),
           "%s usage error: the first line says what is wrong ('%s'), then usage: %s",
           use[i].args[0], use[i].want, first_line(r.err));
        tu_result_free(&r);
    }
    /* the program's own name */
    rc = cli(&r, LEDGER, st, "run", "--graph", "nosuch", "--input", f, NULL);
    ok(rc == 64 && strncmp(r.err, "cairn-ledger run: ", 18) == 0,
       "cairn-ledger's errors start with its own name: %s", first_line(r.err));
    tu_result_free(&r);
    ok(cli(&r, LEDGER, NULL, "--help", NULL) == 0 && tu_contains(r.out, "usage: cairn-ledger "),
       "cairn-ledger --help: usage: cairn-ledger");
    tu_result_free(&r);
    /* --version */
    const char *version = getenv("CAIRN_VERSION");
    if (version) {
        char *want = tu_fmt("(cairn %s)\n", version);
        ok(cli(&r, LEDGER, NULL, "--version", NULL) == 0 && tu_contains(r.out, want),
           "cairn-ledger --version: %s", oneline(r.out));
        tu_result_free(&r);
        free(want);
        if (CAIRN) {
            want = tu_fmt("cairn %s\n", version);
            ok(cli(&r, CAIRN, NULL, "--version", NULL) == 0 && strcmp(r.out, want) == 0,
               "cairn --version: exactly 'cairn %s' (%s)", version, oneline(r.out));
            tu_result_free(&r);
            free(want);
        }
    } else {
        skip("--version: CAIRN_VERSION not set");
    }
    /* --limit 0 is no limit, and documented */
    rc = cli(&r, LEDGER, st, "list", "--limit", "0", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && json_array_size(j) == 2, "list --limit 0 lists all (2 tasks)");
    json_decref(j);
    tu_result_free(&r);
    ok(cli(&r, LEDGER, NULL, "list", "--help", NULL) == 0 && tu_contains(r.out, "--limit 0"),
       "list --help documents --limit 0 = all");
    tu_result_free(&r);
    ok(cli(&r, LEDGER, NULL, "retry", "--help", NULL) == 0 && tu_contains(r.out, "= no limit"),
       "retry --help documents --limit 0 = no limit");
    tu_result_free(&r);
    /* stats reports the map limit in effect */
    rc = cli(&r, LEDGER, st, "stats", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "map_max") == 68719476736LL, "stats --json: map_max is the default 64 GiB");
    json_decref(j);
    tu_result_free(&r);
    rc = cli(&r, LEDGER, st, "stats", "--map-max", "6000000", "--json", NULL);
    j = rc == 0 ? parse_out(&r) : NULL;
    ok(j && jint(j, "map_max") == 6000000 && jint(j, "map_size") <= 6000000,
       "stats --map-max 6000000: map_max 6000000 (rc %d: %s)", rc, oneline(r.err));
    json_decref(j);
    tu_result_free(&r);
    free(pin), free(fp), free(in), free(f), free(st), free(trace), free(ledger);
}

int main(void)
{
    cli_init();
    CAIRN = getenv("CAIRN_BIN");
    if (CAIRN && !*CAIRN)
        CAIRN = NULL;
    D = tu_mkdtemp("cliacc");
    diag("temp dir %s", D);
    test_no_store_created();
    test_inline_wait();
    test_retry_reports();
    test_retry_dead();
    test_retry_tenant();
    test_list_unreadable();
    test_config_hint();
    test_codes_and_messages();
    int rc = tap_done();
    if (rc == 0 && !getenv("CAIRN_TEST_KEEP"))
        tu_rm_rf(D);
    free(D);
    return rc;
}
