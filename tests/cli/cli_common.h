/* cli_common.h - helpers shared by the CLI and crash tests (static; include once per program).
 *
 * The tests drive `cairn-ledger` (examples/ledger) and `cairn-test-graphs` (tests/cli/graphs.c)
 * as real processes. These helpers run a command against a store, write task inputs, and read a
 * task back through `show --json`, so the tests assert on what the CLI prints, not on internals.
 */
#ifndef CAIRN_TEST_CLI_COMMON_H
#define CAIRN_TEST_CLI_COMMON_H

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define CMD_TIMEOUT_MS 120000

static const char *LEDGER; /* path of cairn-ledger */
static const char *GRAPHS; /* path of cairn-test-graphs */

static inline void cli_init(void)
{
    LEDGER = getenv("CAIRN_LEDGER");
    GRAPHS = getenv("CAIRN_TEST_GRAPHS");
    if (!LEDGER || !*LEDGER)
        tap_skip_all("CAIRN_LEDGER is not set (run through meson test)");
}

/* Runs `bin args... --store store` (store may be NULL: not added); extra env may be NULL.
 * The argument list ends with NULL. Returns the exit code. */
static inline int cli_v(tu_result *r, const char *const *env, const char *bin, const char *store,
                        va_list ap)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 60)
        argv[n++] = a;
    if (store) {
        argv[n++] = "--store";
        argv[n++] = store;
    }
    argv[n] = NULL;
    return tu_run(r, argv, env, NULL, 0, CMD_TIMEOUT_MS);
}

static inline int cli(tu_result *r, const char *bin, const char *store, ...)
{
    va_list ap;
    va_start(ap, store);
    int rc = cli_v(r, NULL, bin, store, ap);
    va_end(ap);
    return rc;
}

static inline int cli_env(tu_result *r, const char *const *env, const char *bin, const char *store,
                          ...)
{
    va_list ap;
    va_start(ap, store);
    int rc = cli_v(r, env, bin, store, ap);
    va_end(ap);
    return rc;
}

/* Same, discarding the output; prints stderr as a diagnostic when the code is unexpected. */
static inline int cli_code(const char *bin, const char *store, ...)
{
    tu_result r;
    va_list ap;
    va_start(ap, store);
    int rc = cli_v(&r, NULL, bin, store, ap);
    va_end(ap);
    tu_result_free(&r);
    return rc;
}

/* Writes `json` to dir/name; returns the malloc'd path. */
static inline char *write_input(const char *dir, const char *name, const char *json)
{
    char *p = tu_fmt("%s/%s", dir, name);
    if (tu_write_file(p, json, strlen(json)) != 0)
        diag("cannot write %s", p);
    return p;
}

/* `show ID --json` parsed, or NULL (then *code says why). */
static inline json_t *show_json(const char *bin, const char *store, const char *id, int *code)
{
    tu_result r;
    int rc = cli(&r, bin, store, "show", id, "--json", NULL);
    if (code)
        *code = rc;
    json_t *j = NULL;
    if (rc == 0) {
        json_error_t e;
        j = json_loads(r.out, 0, &e);
        if (!j)
            diag("show --json output does not parse: %s: %s", e.text, r.out);
    }
    tu_result_free(&r);
    return j;
}

/* s with newlines turned into spaces, for TAP test names (a rotating static buffer). */
static inline const char *oneline(const char *s)
{
    static char bufs[4][1024];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, sizeof bufs[0], "%s", s ? s : "");
    for (char *p = b; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return b;
}

/* The first line of s (a static buffer). */
static inline const char *first_line(const char *s)
{
    static char b[1024];
    snprintf(b, sizeof b, "%s", s ? s : "");
    b[strcspn(b, "\n")] = 0;
    return b;
}

/* Prints a multi-line text as TAP diagnostics, one "# " line each. */
static inline void diag_block(const char *title, const char *text)
{
    printf("# %s\n", title);
    const char *p = text ? text : "";
    while (*p) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        printf("#   %.*s\n", n, p);
        p += n + (nl ? 1 : 0);
    }
    fflush(stdout);
}

static inline const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static inline long long jint(const json_t *o, const char *k)
{
    return (long long)json_integer_value(json_object_get(o, k));
}

/* Element of a JSON array whose string member `key` is `val`, or NULL. */
static inline json_t *find_by(const json_t *arr, const char *key, const char *val)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        const char *s = json_string_value(json_object_get(e, key));
        if (s && strcmp(s, val) == 0)
            return e;
    }
    return NULL;
}

/* The current record of step `name` in a show --json document, or NULL. */
static inline json_t *step_of(const json_t *task, const char *name)
{
    return find_by(json_object_get(task, "steps"), "name", name);
}

/* A string field of a step's output object ("" if absent). */
static inline const char *step_out(const json_t *task, const char *step, const char *key)
{
    json_t *s = step_of(task, step);
    return s ? jstr(json_object_get(s, "output"), key) : "";
}

/* Status of a task ("" if it cannot be shown). */
static inline char *task_status(const char *bin, const char *store, const char *id)
{
    json_t *j = show_json(bin, store, id, NULL);
    char *s = strdup(j ? jstr(j, "status") : "");
    json_decref(j);
    return s;
}

/* 1 if the task's status is `want`. */
static inline int status_is(const char *bin, const char *store, const char *id, const char *want)
{
    char *s = task_status(bin, store, id);
    int eq = strcmp(s, want) == 0;
    free(s);
    return eq;
}

/* Parses a --json stdout document; NULL (with a diagnostic) if it does not parse. */
static inline json_t *parse_out(const tu_result *r)
{
    json_error_t e;
    json_t *j = json_loads(r->out, 0, &e);
    if (!j)
        diag("output is not JSON (%s): %s", e.text, r->out);
    return j;
}

/* Starts `cairn-ledger run` of task `id` (input file `input`) with the tenant limit
 * `--tenant-field tenant --max-running-per-tenant 1` in the background, and waits (up to a
 * minute) until its `work` step has started, as the trace shows. Returns the pid. */
static inline pid_t spawn_tenant_run(const char *store, const char *input, const char *id,
                                     const char *trace)
{
    const char *argv[] = {LEDGER,
                          "run",
                          "--graph",
                          "ledger",
                          "--input",
                          input,
                          "--task",
                          id,
                          "--tenant-field",
                          "tenant",
                          "--max-running-per-tenant",
                          "1",
                          "--store",
                          store,
                          NULL};
    pid_t bg = tu_spawn(argv, NULL, NULL, NULL);
    char *line = tu_fmt("work %s", id);
    int64_t until = tu_now_ms() + 60000;
    while (tu_count_exact(trace, line) == 0 && tu_now_ms() < until && !tu_poll_exit(bg, NULL))
        tu_sleep_ms(10);
    free(line);
    return bg;
}

/* Standard ledger input. fail may be NULL. */
static inline char *ledger_input(const char *text, int work_ms, const char *trace,
                                 const char *ledger, const char *fail)
{
    json_t *o = json_object();
    json_object_set_new(o, "text", json_string(text));
    json_object_set_new(o, "work_ms", json_integer(work_ms));
    json_object_set_new(o, "trace", json_string(trace));
    json_object_set_new(o, "ledger", json_string(ledger));
    if (fail)
        json_object_set_new(o, "fail", json_string(fail));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* Writes to `path` a consume stream of n ledger tasks {"id": "<prefix>NN", "input": ...}, the
 * one at index fail_at (-1: none) asked to fail permanently. 0, or -1. */
static inline int ledger_stream(const char *path, const char *prefix, int n, const char *trace,
                                const char *ledger, int work_ms, int fail_at)
{
    char *stream = NULL;
    for (int i = 0; i < n; i++) {
        char *in = ledger_input(prefix, work_ms, trace, ledger, i == fail_at ? "permanent" : NULL);
        char *line =
            tu_fmt("%s{\"id\": \"%s%02d\", \"input\": %s}\n", stream ? stream : "", prefix, i, in);
        free(stream);
        stream = line;
        free(in);
    }
    int rc = tu_write_file(path, stream ? stream : "", stream ? strlen(stream) : 0);
    free(stream);
    return rc;
}

#endif
