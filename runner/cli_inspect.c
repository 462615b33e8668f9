/* runner/cli_inspect.c - the read-only task commands: show, list, audit, stats and check.
 *
 * None of them creates a store or a runner: each opens a store that is already there, reads in one
 * read transaction (a consistent snapshot, whatever runs meanwhile) and prints either the --json
 * document or a table for people. The tables are rendered from the same JSON documents that --json
 * prints, so the two views can never disagree about what a task holds. A record that cannot be
 * read is never skipped silently: `list` names it and exits 74. They read the store only through
 * the public API (cairn_task_load, cairn_store_list, cairn_store_audit, cairn_store_stats,
 * cairn_store_check), as a
 * program embedding cairn would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner/cli.h"

/* cairn_store_set_map_max's documented default, for `stats` */
#define DEFAULT_MAP_MAX (64ull << 30)

/* ------------------------------------------------------------------ tables for people */

/* "12.5 MiB", "64.0 GiB": a byte count for people. */
static void fmt_bytes(unsigned long long n, char out[32])
{
    if (n >= (1ull << 30))
        snprintf(out, 32, "%.1f GiB", n / 1073741824.0);
    else if (n >= (1ull << 20))
        snprintf(out, 32, "%.1f MiB", n / 1048576.0);
    else if (n >= 1024)
        snprintf(out, 32, "%.1f KiB", n / 1024.0);
    else
        snprintf(out, 32, "%llu bytes", n);
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void when(const json_t *o, const char *k, char out[32])
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) {
        snprintf(out, 32, "-");
        return;
    }
    time_t t = (time_t)(json_integer_value(v) / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void print_task_table(const json_t *t)
{
    if (!t)
        return;
    char c[32], u[32], n[32];
    when(t, "created_ms", c);
    when(t, "updated_ms", u);
    when(t, "next_retry_at_ms", n);
    printf("task        %s\ngraph       %s\nstatus      %s%s\nattempt     %lld   generation %lld\n"
           "payload     %s\ncreated     %s   updated %s\n",
           str(t, "task"), str(t, "graph"), str(t, "status"),
           json_is_true(json_object_get(t, "tombstone")) ? " (tombstone: outputs dropped)" : "",
           (long long)json_integer_value(json_object_get(t, "attempt")),
           (long long)json_integer_value(json_object_get(t, "generation")), str(t, "payload_hash"),
           c, u);
    if (json_is_integer(json_object_get(t, "next_retry_at_ms")))
        printf("next retry  %s\n", n);
    if (*str(t, "error")) {
        /* the runner's messages often name the step already ("step 'work' failed ...") */
        char quoted[96];
        snprintf(quoted, sizeof quoted, "'%s'", str(t, "error_step"));
        int named = !*str(t, "error_step") || strstr(str(t, "error"), quoted);
        printf("error       %s%s%s\n", named ? "" : str(t, "error_step"), named ? "" : ": ",
               str(t, "error"));
    }
    printf("\n%-20s %-9s %4s  %s\n", "STEP", "STATUS", "INV", "OUTPUT");
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(t, "steps"), i, s)
    {
        char *out = json_dumps(json_object_get(s, "output"), JSON_COMPACT | JSON_ENCODE_ANY);
        const char *o = out ? out : "null";
        size_t shown = strlen(o) > 100 ? 100 : strlen(o);
        while (shown > 0 && shown < strlen(o) && ((unsigned char)o[shown] & 0xC0) == 0x80)
            shown--; /* never cut a UTF-8 character in half */
        printf("%-20s %-9s %4lld  %.*s%s\n", str(s, "name"), str(s, "status"),
               (long long)json_integer_value(json_object_get(s, "invocations")), (int)shown, o,
               shown < strlen(o) ? "..." : "");
        /* an operator's resolution is kept in the error field, but it is no error */
        if (*str(s, "error"))
            printf("%-20s %-9s %4s  %s: %s\n", "", "", "",
                   json_is_true(json_object_get(s, "resolved")) ? "note" : "error",
                   str(s, "error"));
        free(out);
    }
}

static void print_list_table(const json_t *rows)
{
    printf("%-40s %-12s %-10s %7s  %s\n", "TASK", "GRAPH", "STATUS", "ATTEMPT", "UPDATED");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char u[32];
        when(r, "updated_ms", u);
        printf("%-40s %-12s %-10s %7lld  %s\n", str(r, "task"), str(r, "graph"), str(r, "status"),
               (long long)json_integer_value(json_object_get(r, "attempt")), u);
    }
}

static void print_audit_table(const json_t *rows)
{
    printf("%-20s %-9s %-9s %3s %3s %-14s %s\n", "TIME", "FROM", "TO", "ATT", "GEN", "STEP",
           "REASON");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char t[32];
        when(r, "t_ms", t);
        printf("%-20s %-9s %-9s %3lld %3lld %-14s %s\n", t, str(r, "from"), str(r, "to"),
               (long long)json_integer_value(json_object_get(r, "attempt")),
               (long long)json_integer_value(json_object_get(r, "generation")), str(r, "step"),
               str(r, "reason"));
    }
}

/* ------------------------------------------------------------------ show */

static const char show_help[] =
    "usage: %P show ID [--json] [--store DIR]\n"
    "Shows a task: status, attempt, payload hash, and each step with its output.\n"
    "An ID that starts with '-' goes after \"--\": %P show -- -x\n";

static int show_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    (void)graphs;
    (void)n;
    int rc;
    cairn__cli_session s;
    if ((rc = cairn__cli_session_open(&s, "show", o, NULL, 0, 1, 0))) {
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    cairn_task *t = NULL;
    rc = cairn_task_load(s.store, o->id, &t);
    if (rc) {
        int x = cairn__cli_fail("show", rc, cairn_store_errmsg(s.store));
        cairn__cli_session_close(&s);
        return x;
    }
    json_t *j = cairn__task_to_json(t);
    if (!j) {
        cairn_task_free(t);
        cairn__cli_session_close(&s);
        return cairn__cli_fail("show", CAIRN_ENOMEM, NULL);
    }
    if (o->json) {
        char *js = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", js ? js : "null");
        free(js);
    } else
        print_task_table(j);
    json_decref(j);
    cairn_task_free(t);
    cairn__cli_session_close(&s);
    return 0;
}

static const int show_allowed[] = {CAIRN__O_JSON, 0};
const cairn__cli_task cairn__task_show = {"show", show_help, show_allowed, 1, 0, show_main};

/* ------------------------------------------------------------------ list */

/* cairn_store_list's rows as the JSON `list --json` prints: readable tasks in `rows`, the others
 * in `unreadable` */
typedef struct list_out {
    json_t *rows, *unreadable;
} list_out;

static int list_row(const cairn_task_row *r, void *arg)
{
    list_out *a = arg;
    if (r->err) {
        json_array_append_new(a->unreadable,
                              json_pack("{s:s, s:s, s:s}", "task", r->task_id, "error",
                                        cairn_errname(r->err), "message", r->message));
        return 0;
    }
    json_t *o = json_object();
    json_object_set_new(o, "task", json_string(r->task_id));
    json_object_set_new(o, "graph", json_string(r->graph));
    json_object_set_new(o, "status", json_string(cairn_state_name(r->state)));
    json_object_set_new(o, "attempt", json_integer(r->attempt));
    json_object_set_new(o, "updated_ms", json_integer(r->updated_ms));
    if (r->state == CAIRN_FAILED)
        json_object_set_new(o, "next_retry_at_ms", json_integer(r->next_retry_ms));
    if (r->tombstone)
        json_object_set_new(o, "tombstone", json_true());
    if (r->error[0])
        json_object_set_new(o, "error", json_string(r->error));
    json_array_append_new(a->rows, o);
    return 0;
}

static const char list_help[] =
    "usage: %P list [--status S] [--graph G] [--limit N] [--json] [--store DIR]\n"
    "Lists tasks, by status (pending, running, succeeded, failed, dead, in_doubt); --limit 0\n"
    "(the default) lists all. --json prints an array of tasks.\n"
    "A task record that cannot be read (corrupt, or written by a newer cairn) is named on\n"
    "stderr and makes the exit 74; --json then prints {\"tasks\": [...], \"unreadable\":\n"
    "[{task, error, message}]} instead of the array.\n";

static int list_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    (void)graphs;
    (void)n;
    int rc;
    cairn_state st;
    if (o->status && cairn_state_parse(o->status, &st))
        return cairn__cli_usage_error("list", list_help, "unknown status '%s'", o->status);
    cairn__cli_session s;
    if ((rc = cairn__cli_session_open(&s, "list", o, NULL, 0, 1, 0))) {
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    list_out a = {.rows = json_array(), .unreadable = json_array()};
    rc = cairn_store_list(s.store, o->status ? &st : NULL, o->graph, o->limit, list_row, &a);
    if (rc) {
        json_decref(a.rows);
        json_decref(a.unreadable);
        int x = cairn__cli_fail("list", rc, cairn_store_errmsg(s.store));
        cairn__cli_session_close(&s);
        return x;
    }
    size_t i, n_bad = json_array_size(a.unreadable);
    json_t *u;
    json_array_foreach(a.unreadable, i, u)
    {
        cairn__log(CAIRN__LOG_ERROR, "list", "record_error", NULL, NULL,
                   "task '%s' cannot be read: %s (%s)",
                   json_string_value(json_object_get(u, "task")),
                   json_string_value(json_object_get(u, "message")),
                   json_string_value(json_object_get(u, "error")));
    }
    if (o->json && n_bad)
        cairn__cli_print_json(json_pack("{s:o, s:o}", "tasks", a.rows, "unreadable", a.unreadable));
    else if (o->json) {
        cairn__cli_print_json(a.rows);
        json_decref(a.unreadable);
    } else {
        print_list_table(a.rows);
        json_decref(a.rows);
        json_decref(a.unreadable);
    }
    if (n_bad)
        cairn__log(CAIRN__LOG_ERROR, "list", "record_errors", NULL, NULL,
                   "%zu task record(s) could not be read; `%s show ID` says more", n_bad,
                   cairn__cli_prog);
    cairn__cli_session_close(&s);
    return n_bad ? CAIRN__EX_IOERR : 0;
}

static const int list_allowed[] = {CAIRN__O_STATUS, CAIRN__O_GRAPH, CAIRN__O_LIMIT, CAIRN__O_JSON,
                                   0};
const cairn__cli_task cairn__task_list = {"list", list_help, list_allowed, 0, 0, list_main};

/* ------------------------------------------------------------------ audit, stats */

static int audit_row(const cairn_audit_row *a, void *arg)
{
    json_t *o = json_object();
    json_object_set_new(o, "t_ms", json_integer(a->t_ms));
    json_object_set_new(o, "from", json_string(cairn_state_name(a->from)));
    json_object_set_new(o, "to", json_string(cairn_state_name(a->to)));
    json_object_set_new(o, "attempt", json_integer(a->attempt));
    json_object_set_new(o, "generation", json_integer(a->generation));
    json_object_set_new(o, "step", a->step[0] ? json_string(a->step) : json_null());
    json_object_set_new(o, "reason", json_string(a->reason));
    json_array_append_new(arg, o);
    return 0;
}

static const char audit_help[] = "usage: %P audit ID [--json] [--store DIR]\n"
                                 "Prints every transition of a task: time, from, to, attempt, "
                                 "step and reason.\n";

static int audit_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    (void)graphs;
    (void)n;
    int rc;
    cairn__cli_session s;
    if ((rc = cairn__cli_session_open(&s, "audit", o, NULL, 0, 1, 0))) {
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    json_t *rows = json_array();
    rc = cairn_store_audit(s.store, o->id, audit_row, rows);
    int x = 0;
    if (rc) {
        x = cairn__cli_fail("audit", rc, cairn_store_errmsg(s.store));
        json_decref(rows);
    } else if (o->json)
        cairn__cli_print_json(rows);
    else {
        print_audit_table(rows);
        json_decref(rows);
    }
    cairn__cli_session_close(&s);
    return x;
}

static const int audit_allowed[] = {CAIRN__O_JSON, 0};
const cairn__cli_task cairn__task_audit = {"audit", audit_help, audit_allowed, 1, 0, audit_main};

/* cairn_store_stats hands its one row to a callback; `stats` keeps a copy (a program built apart
 * from the library copies fields instead: the row may grow, but the CLI is part of the library) */
static int stats_copy(const cairn_stats *st, void *arg)
{
    *(cairn_stats *)arg = *st;
    return 0;
}

/* The metrics, as OpenMetrics text (which Prometheus and node_exporter's textfile collector
 * read): every figure is read from a record or an index's first keys (cairn_store_stats), so a
 * scrape costs the same at any store size. */
char *cairn__cli_metrics(cairn_store *s, uint64_t map_max, const char *extra, int *rc_out)
{
    cairn_stats st;
    int rc = cairn_store_stats(s, stats_copy, &st);
    *rc_out = rc;
    if (rc)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        *rc_out = CAIRN_ENOMEM;
        return NULL;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    if (!map_max)
        map_max = DEFAULT_MAP_MAX;
#define GAUGE(name, help) fprintf(f, "# TYPE " name " gauge\n# HELP " name " " help "\n")
    GAUGE("cairn_tasks", "Tasks in the store by state.");
    for (int i = 0; i < CAIRN_STATE_COUNT; i++)
        fprintf(f, "cairn_tasks{state=\"%s\"} %llu\n", cairn_state_name((cairn_state)i),
                (unsigned long long)st.by_state[i]);
    GAUGE("cairn_tombstones", "Garbage-collected tasks whose tombstone is kept.");
    fprintf(f, "cairn_tombstones %llu\n", (unsigned long long)st.tombstones);
    GAUGE("cairn_messages", "Consumed queue messages remembered for deduplication.");
    fprintf(f, "cairn_messages %llu\n", (unsigned long long)st.messages);
    GAUGE("cairn_retry_due", "Failed tasks due for retry now (counted up to 10000: that value "
                             "means at least).");
    fprintf(f, "cairn_retry_due %llu\n", (unsigned long long)st.retry_due);
    GAUGE("cairn_retry_overdue_seconds",
          "How long the earliest due retry has waited for `retry` to run it (0: none due).");
    double overdue =
        st.next_retry_ms && st.next_retry_ms / 1e3 < now ? now - st.next_retry_ms / 1e3 : 0;
    fprintf(f, "cairn_retry_overdue_seconds %.3f\n", overdue);
    GAUGE("cairn_in_doubt_oldest_age_seconds",
          "How long the task longest in doubt has waited for an operator (0: none in doubt).");
    double doubt = st.oldest_in_doubt_ms && st.oldest_in_doubt_ms / 1e3 < now
                       ? now - st.oldest_in_doubt_ms / 1e3
                       : 0;
    fprintf(f, "cairn_in_doubt_oldest_age_seconds %.3f\n", doubt);
    GAUGE("cairn_store_used_bytes", "Bytes of the store file in use.");
    fprintf(f, "cairn_store_used_bytes %llu\n", (unsigned long long)st.map_used);
    GAUGE("cairn_store_map_bytes", "The store's current memory map.");
    fprintf(f, "cairn_store_map_bytes %llu\n", (unsigned long long)st.map_size);
    GAUGE("cairn_store_map_max_bytes", "The most the map may grow to in this process.");
    fprintf(f, "cairn_store_map_max_bytes %llu\n", (unsigned long long)map_max);
    GAUGE("cairn_store_last_commit", "The store's last committed write transaction (its id "
                                     "grows by one a commit).");
    fprintf(f, "cairn_store_last_commit %llu\n", (unsigned long long)st.last_commit);
    if (st.durability == CAIRN_SYNC) {
        GAUGE("cairn_store_durable_lag_commits",
              "Commits after the last durable point: what a power loss would undo.");
        fprintf(f, "cairn_store_durable_lag_commits %llu\n",
                (unsigned long long)(st.durable_commit && st.last_commit > st.durable_commit
                                         ? st.last_commit - st.durable_commit
                                         : 0));
    }
    GAUGE("cairn_store_readers", "Other processes holding a read snapshot of the store.");
    fprintf(f, "cairn_store_readers %u\n", st.readers);
    GAUGE("cairn_store_oldest_reader_lag_commits",
          "Commits since the oldest snapshot another process holds (pages freed after it are "
          "not reused).");
    fprintf(f, "cairn_store_oldest_reader_lag_commits %llu\n",
            (unsigned long long)(st.readers && st.last_commit > st.oldest_reader_commit
                                     ? st.last_commit - st.oldest_reader_commit
                                     : 0));
#undef GAUGE
    if (extra)
        fputs(extra, f);
    fputs("# EOF\n", f);
    if (fclose(f) != 0) {
        free(buf);
        *rc_out = CAIRN_ENOMEM;
        return NULL;
    }
    return buf;
}

static const char stats_help[] =
    "usage: %P stats [--json | --prometheus] [--map-max BYTES] [--store DIR]\n"
    "Counts tasks by status and shows the store's size: the space used, the current map and the\n"
    "limit the map may grow to in a process (default 64 GiB; each process sets its own with\n"
    "--map-max, so pass the one your runs use to see their headroom). For a sync store, how far\n"
    "the last durable point lags the last commit (what a restart of the machine undoes); and the\n"
    "other processes reading the store, with the oldest snapshot one holds: pages freed after it\n"
    "are not reused while it does, so a process stopped for long makes the file grow.\n"
    "--prometheus prints the same as OpenMetrics text (cairn_tasks{state=...}, cairn_retry_due,\n"
    "cairn_retry_overdue_seconds, cairn_in_doubt_oldest_age_seconds, store bytes, the durable\n"
    "lag), for node_exporter's textfile collector: write it to a temporary file and rename it\n"
    "into the collector's directory. Its cost does not grow with the store.\n";

static int stats_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    (void)graphs;
    (void)n;
    int rc;
    if (o->json && o->prometheus)
        return cairn__cli_usage_error("stats", stats_help,
                                      "--json and --prometheus exclude each other");
    cairn__cli_session s;
    if ((rc = cairn__cli_session_open(&s, "stats", o, NULL, 0, 1, 0))) {
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    if (o->prometheus) {
        char *text =
            cairn__cli_metrics(s.store, o->map_max ? o->map_max : DEFAULT_MAP_MAX, NULL, &rc);
        int x = text ? 0 : cairn__cli_fail("stats", rc, cairn_store_errmsg(s.store));
        if (text)
            fputs(text, stdout);
        free(text);
        cairn__cli_session_close(&s);
        return x;
    }
    cairn_stats st;
    rc = cairn_store_stats(s.store, stats_copy, &st);
    if (rc) {
        int x = cairn__cli_fail("stats", rc, cairn_store_errmsg(s.store));
        cairn__cli_session_close(&s);
        return x;
    }
    json_t *j = json_object(), *by = json_object();
    uint64_t total = 0;
    for (int i = 0; i < CAIRN_STATE_COUNT; i++) {
        json_object_set_new(by, cairn_state_name((cairn_state)i),
                            json_integer((json_int_t)st.by_state[i]));
        total += st.by_state[i];
    }
    json_object_set_new(j, "tasks", json_integer((json_int_t)total));
    json_object_set_new(j, "by_status", by);
    json_object_set_new(j, "tombstones", json_integer((json_int_t)st.tombstones));
    json_object_set_new(j, "messages", json_integer((json_int_t)st.messages));
    json_object_set_new(j, "step_records", json_integer((json_int_t)st.step_records));
    json_object_set_new(j, "audit_records", json_integer((json_int_t)st.audit_records));
    json_object_set_new(j, "map_size", json_integer((json_int_t)st.map_size));
    json_object_set_new(j, "map_used", json_integer((json_int_t)st.map_used));
    uint64_t map_max = o->map_max ? o->map_max : DEFAULT_MAP_MAX;
    json_object_set_new(j, "map_max", json_integer((json_int_t)map_max));
    const char *dur = st.durability == CAIRN_NOSYNC ? "nosync" : "sync";
    json_object_set_new(j, "durability", json_string(dur));
    json_object_set_new(j, "last_commit", json_integer((json_int_t)st.last_commit));
    if (st.durability == CAIRN_SYNC) /* null: no durable point recorded yet */
        json_object_set_new(j, "durable_commit",
                            st.durable_commit ? json_integer((json_int_t)st.durable_commit)
                                              : json_null());
    json_object_set_new(j, "readers", json_integer((json_int_t)st.readers));
    if (st.readers)
        json_object_set_new(j, "oldest_reader",
                            json_pack("{s:I, s:I}", "pid", (json_int_t)st.oldest_reader_pid,
                                      "commit", (json_int_t)st.oldest_reader_commit));
    json_object_set_new(j, "retry_due", json_integer((json_int_t)st.retry_due));
    json_object_set_new(j, "next_retry_ms",
                        st.next_retry_ms ? json_integer(st.next_retry_ms) : json_null());
    json_object_set_new(j, "oldest_in_doubt_ms",
                        st.oldest_in_doubt_ms ? json_integer(st.oldest_in_doubt_ms) : json_null());
    if (o->json)
        cairn__cli_print_json(j);
    else {
        printf("tasks        %llu\n", (unsigned long long)total);
        for (int i = 0; i < CAIRN_STATE_COUNT; i++)
            printf("  %-10s %llu\n", cairn_state_name((cairn_state)i),
                   (unsigned long long)st.by_state[i]);
        char used[32], size[32], max[32];
        fmt_bytes(st.map_used, used);
        fmt_bytes(st.map_size, size);
        fmt_bytes(map_max, max);
        printf("tombstones   %llu\nmessages     %llu\nstep records %llu\naudit        %llu\n"
               "store        %s used; map %s now, grows to at most %s (%s)\n"
               "durability   %s (%s)\n",
               (unsigned long long)st.tombstones, (unsigned long long)st.messages,
               (unsigned long long)st.step_records, (unsigned long long)st.audit_records, used,
               size, max, o->map_max ? "--map-max" : "the default; runs may set --map-max", dur,
               st.durability == CAIRN_NOSYNC ? "survives process crashes" : "survives power loss");
        if (st.durability == CAIRN_SYNC && st.durable_commit)
            printf("durable      up to commit %llu of %llu (a restart of the machine undoes the "
                   "%llu after it)\n",
                   (unsigned long long)st.durable_commit, (unsigned long long)st.last_commit,
                   (unsigned long long)(st.last_commit > st.durable_commit
                                            ? st.last_commit - st.durable_commit
                                            : 0));
        else if (st.durability == CAIRN_SYNC)
            printf("durable      no durable point recorded yet (the store is as written)\n");
        if (st.readers)
            printf("readers      %u other process%s; the oldest, pid %d, holds commit %llu (%llu "
                   "behind: pages freed since are not reused while it does)\n",
                   st.readers, st.readers == 1 ? "" : "es", st.oldest_reader_pid,
                   (unsigned long long)st.oldest_reader_commit,
                   (unsigned long long)(st.last_commit - st.oldest_reader_commit));
        else
            printf("readers      none\n");
        int64_t now_ms = (int64_t)time(NULL) * 1000;
        if (st.retry_due)
            printf("retry due    %llu%s failed task(s), the earliest waiting %.0f s\n",
                   (unsigned long long)st.retry_due,
                   st.retry_due >= CAIRN_STATS_DUE_MAX ? " or more" : "",
                   (double)(now_ms - st.next_retry_ms) / 1e3);
        if (st.oldest_in_doubt_ms)
            printf("in doubt     the oldest since %.0f s ago (`%s resolve` settles it)\n",
                   (double)(now_ms - st.oldest_in_doubt_ms) / 1e3, cairn__cli_prog);
        json_decref(j);
    }
    cairn__cli_session_close(&s);
    return 0;
}

static const int stats_allowed[] = {CAIRN__O_JSON, CAIRN__O_PROMETHEUS, CAIRN__O_MAP_MAX, 0};
const cairn__cli_task cairn__task_stats = {"stats", stats_help, stats_allowed, 0, 0, stats_main};

/* ------------------------------------------------------------------ check */

static int check_row(const cairn_check_row *row, void *arg)
{
    json_array_append_new(arg, json_pack("{s:s, s:s, s:s}", "database", row->database, "task",
                                         row->task_id, "message", row->message));
    return 0;
}

static const char check_help[] =
    "usage: %P check [--json] [--store DIR]\n"
    "Reads and verifies every record of the store: each record's checksum, the order of the\n"
    "keys, that every task record decodes and has its index entries, that every index entry is\n"
    "its task's, and that no step, progress, input or audit record is left without its task.\n"
    "(Every command checks data.mdb against the meta pages and the sync marker when it opens\n"
    "the store.) Prints each problem, then a summary. Exit 0: the store is sound; 74: it is\n"
    "damaged (restore it from a backup, or copy out what `show` can still read).\n";

static int check_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    (void)graphs;
    (void)n;
    int rc;
    cairn__cli_session s;
    if ((rc = cairn__cli_session_open(&s, "check", o, NULL, 0, 1, 0))) {
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    json_t *rows = json_array();
    uint64_t records = 0;
    rc = cairn_store_check(s.store, check_row, rows, &records);
    size_t problems = json_array_size(rows);
    /* CAIRN_ECORRUPT with no problem listed: the scan itself was stopped (a fault on a damaged
     * page closes the handle), as any other error */
    if (rc && (rc != CAIRN_ECORRUPT || problems == 0)) {
        int x = cairn__cli_fail("check", rc, cairn_store_errmsg(s.store));
        json_decref(rows);
        cairn__cli_session_close(&s);
        return x;
    }
    if (o->json) {
        cairn__cli_print_json(json_pack("{s:b, s:I, s:o}", "ok", problems == 0, "records",
                                        (json_int_t)records, "problems", rows));
    } else {
        for (size_t i = 0; i < problems; i++) {
            json_t *r = json_array_get(rows, i);
            printf("%s: %s\n", str(r, "database"), str(r, "message"));
        }
        printf("%s: %llu records checked, %zu problem%s\n", o->store, (unsigned long long)records,
               problems, problems == 1 ? "" : "s");
        json_decref(rows);
    }
    cairn__cli_session_close(&s);
    return problems ? cairn__exit_code(CAIRN_ECORRUPT) : 0;
}

static const int check_allowed[] = {CAIRN__O_JSON, 0};
const cairn__cli_task cairn__task_check = {"check", check_help, check_allowed, 0, 0, check_main};
