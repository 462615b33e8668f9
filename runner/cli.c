/* runner/cli.c - the `cairn` command line, for any set of graphs (cairn_cli_main): dispatch,
 * the options every task command shares, and the store session each one opens.
 *
 * The dispatcher parses a command's options and operand (runner/cli_opt.c does the parsing for
 * every command); the command (runner/cli_run.c: the ones that change tasks; runner/cli_inspect.c:
 * the read-only ones) then checks everything it can before touching the store (so a usage or
 * input error never leaves a new, empty store behind), opens the store and a runner, makes one
 * library call and maps the result to a sysexits exit code through one table (cairn__exit_code,
 * runner/cli_util.c). Only `run` (and `init`, which asks for nothing else) creates a store; every
 * other command on a path that holds none says so (66). Messages for people go to stderr, prefixed
 * with the program's own name (argv[0]: `cairn`, or `cairn-ledger` for a program built on
 * cairn_cli_main); --json output for scripts goes to stdout, one JSON document per call.
 *
 * One option table serves every task command: the parser knows all options, and each command
 * lists the ones it takes (cairn__cli_task), so an option that belongs to another command is
 * refused by name ("--limit is not an option of this command") rather than silently ignored.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/cli.h"

/* CAIRN__VERSION is meson's project version, passed by the build (meson.build). */

const char *cairn__cli_prog = "cairn";

/* The built-in graph that needs a configuration (cairn__cli_set_config_graph) */
static const char *g_config_graph;
static int g_configured;

void cairn__cli_set_config_graph(const char *graph, int configured)
{
    g_config_graph = graph;
    g_configured = configured;
}

static int (*g_preflight)(void *arg, char *err, size_t errlen);
static void *g_preflight_arg;

void cairn__cli_set_preflight(int (*check)(void *arg, char *err, size_t errlen), void *arg)
{
    g_preflight = check;
    g_preflight_arg = arg;
}

int cairn__cli_preflight(const char *graph, char *err, size_t errlen)
{
    if (!g_preflight || !g_configured || (graph && strcmp(graph, g_config_graph) != 0))
        return 0;
    return g_preflight(g_preflight_arg, err, errlen);
}

static const char no_config_msg[] = "no pipeline config: pass --config FILE or set CAIRN_CONFIG";

static const cairn__cli_task *const tasks[] = {
    &cairn__task_run,   &cairn__task_init,    &cairn__task_show,       &cairn__task_list,
    &cairn__task_retry, &cairn__task_resolve, &cairn__task_invalidate, &cairn__task_gc,
    &cairn__task_audit, &cairn__task_stats,   &cairn__task_check,      &cairn__task_consume,
    &cairn__task_serve,
};

static const cairn__cli_task *find_task(const char *cmd)
{
    for (size_t i = 0; i < sizeof tasks / sizeof *tasks; i++)
        if (!strcmp(cmd, tasks[i]->name))
            return tasks[i];
    return NULL;
}

int cairn__cli_takes_config(const char *cmd)
{
    const cairn__cli_task *t = find_task(cmd);
    return t && t->config;
}

/* ------------------------------------------------------------------ common options */

/* The options kept as given say where (cairn__opt_slot); parse_opt checks the numbers. */
#define AT(f) offsetof(cairn__cli_opts, f)
static const cairn__opt all_options[] = {
    {"store", 0, 1, 0, CAIRN__O_STORE, AT(store)},
    {"graph", 0, 1, 0, CAIRN__O_GRAPH, AT(graph)},
    {"task", 0, 1, 0, CAIRN__O_TASK, AT(task)},
    {"task-from", 0, 1, 0, CAIRN__O_TASK_FROM, AT(task_from)},
    {"input", 0, 1, 0, CAIRN__O_INPUT, AT(input)},
    {"message-id", 0, 1, 0, CAIRN__O_MESSAGE_ID, AT(message_id)},
    {"status", 0, 1, 0, CAIRN__O_STATUS, AT(status)},
    {"step", 0, 1, 0, CAIRN__O_STEP, AT(step)},
    {"from", 0, 1, 0, CAIRN__O_FROM, AT(from)},
    {"tenant-field", 0, 1, 0, CAIRN__O_TENANT_FIELD, AT(tenant_field)},
    {"max-running-per-tenant", 0, 1, 0, CAIRN__O_MAX_PER_TENANT, 0},
    {"limit", 0, 1, 0, CAIRN__O_LIMIT, 0},
    {"max-attempts", 0, 1, 0, CAIRN__O_MAX_ATTEMPTS, 0},
    {"lease-ms", 0, 1, 0, CAIRN__O_LEASE_MS, 0},
    {"inline-wait-ms", 0, 1, 0, CAIRN__O_INLINE_WAIT, 0},
    {"map-max", 0, 1, 0, CAIRN__O_MAP_MAX, 0},
    {"retention-days", 0, 1, 0, CAIRN__O_RETENTION, 0},
    {"tombstone-days", 0, 1, 0, CAIRN__O_TOMBSTONE, 0},
    {"json", 0, 0, 0, CAIRN__O_JSON, AT(json)},
    {"now", 0, 0, 0, CAIRN__O_NOW, AT(now)},
    {"done", 0, 0, 0, CAIRN__O_DONE, AT(done)},
    {"not-done", 0, 0, 0, CAIRN__O_NOT_DONE, AT(not_done)},
    {"allow-graph-change", 0, 0, 0, CAIRN__O_ALLOW_GRAPH_CHANGE, AT(allow_graph_change)},
    {"nosync", 0, 0, 0, CAIRN__O_NOSYNC, AT(nosync)},
    {"format", 0, 1, 0, CAIRN__O_FORMAT, AT(format)},
    {"jobs", 'j', 1, 0, CAIRN__O_JOBS, 0},
    {"processes", 0, 1, 0, CAIRN__O_PROCESSES, 0},
    {"tasks", 0, 0, 0, CAIRN__O_TASKS, AT(tasks)},
    {"listen", 0, 1, 0, CAIRN__O_LISTEN, AT(listen)},
    {"token-file", 0, 1, 0, CAIRN__O_TOKEN_FILE, AT(token_file)},
    {"prometheus", 0, 0, 0, CAIRN__O_PROMETHEUS, AT(prometheus)},
    {NULL, 0, 0, 0, 0, 0}};
#undef AT

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-')
        return -1;
    *out = v;
    return 0;
}

/* A number of days: finite, 0 to 36500 (100 years), the whole argument. */
static int parse_days(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0 && v <= 36500))
        return -1;
    *out = v;
    return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
    uint64_t v;
    if (parse_u64(s, &v) || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

void cairn__cli_put_help(FILE *f, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (p[0] == '%' && p[1] == 'P') {
            fputs(cairn__cli_prog, f);
            p++;
        } else
            fputc(*p, f);
    }
}

/* The lines a command that runs tasks adds to its help in the `cairn` executable. */
static void put_config_help(FILE *f)
{
    if (g_config_graph)
        fprintf(f,
                "--config FILE (or CAIRN_CONFIG): the pipeline configuration that defines graph\n"
                "'%s'; without one that graph does not exist.\n",
                g_config_graph);
}

void cairn__cli_print_help(FILE *f, const char *help, int needs_graphs)
{
    cairn__cli_put_help(f, help);
    if (needs_graphs)
        put_config_help(f);
    fputs(CAIRN__LOG_OPTIONS_HELP, f);
}

int cairn__cli_usage_error(const char *cmd, const char *help, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cairn__logv(CAIRN__LOG_ERROR, cmd, "usage", NULL, NULL, fmt, ap);
    va_end(ap);
    if (!cairn__log_json()) /* the usage is for a person; a JSON log gets the one line */
        cairn__cli_put_help(stderr, help);
    return CAIRN__EX_USAGE;
}

/* What parse_opt fills in, for which command */
typedef struct parse_state {
    cairn__cli_opts *o;
    const cairn__cli_task *t;
} parse_state;

/* One option of a task command (cairn__opt_fn): refused when it is another command's, else its
 * value checked and stored. */
static int parse_opt(void *user, const cairn__opt *opt, const char *val)
{
    parse_state *ps = user;
    cairn__cli_opts *o = ps->o;
    const int c = opt->id;
    int ok = c == CAIRN__O_STORE;
    for (const int *a = ps->t->allowed; *a && !ok; a++)
        ok = *a == c;
    if (!ok)
        return cairn__cli_usage_error(ps->t->name, ps->t->help,
                                      "--%s is not an option of this command", opt->name);
    const char *bad = NULL; /* what a valid value looks like */
    uint64_t u;
    switch (c) {
    case CAIRN__O_MAX_PER_TENANT:
        if (parse_u32(val, &o->max_per_tenant) || !o->max_per_tenant)
            bad = "a whole number of at least 1";
        break;
    case CAIRN__O_LIMIT:
        if (parse_u32(val, &o->limit))
            bad = "a whole number; 0 = no limit";
        break;
    case CAIRN__O_MAX_ATTEMPTS:
        if (parse_u32(val, &o->max_attempts) || !o->max_attempts)
            bad = "a whole number of at least 1";
        break;
    case CAIRN__O_LEASE_MS:
        if (parse_u32(val, &o->lease_ms) || o->lease_ms < 100)
            bad = "milliseconds, at least 100";
        break;
    case CAIRN__O_INLINE_WAIT:
        if (parse_u32(val, &o->inline_wait_ms))
            bad = "milliseconds; 0 = never wait inside the run";
        o->has_inline_wait = 1;
        break;
    case CAIRN__O_JOBS:
        if (parse_u32(val, &o->jobs) || o->jobs < 1 || o->jobs > CAIRN__JOBS_MAX)
            bad = "a whole number from 1 to 256";
        break;
    case CAIRN__O_PROCESSES:
        if (parse_u32(val, &o->processes) || o->processes < 1 || o->processes > CAIRN__JOBS_MAX)
            bad = "a whole number from 1 to 256";
        break;
    case CAIRN__O_MAP_MAX:
        if (parse_u64(val, &u))
            bad = "a whole number of bytes";
        o->map_max = u;
        break;
    case CAIRN__O_RETENTION:
    case CAIRN__O_TOMBSTONE:
        if (parse_days(val, c == CAIRN__O_RETENTION ? &o->retention_days : &o->tombstone_days))
            bad = "days, from 0 to 36500";
        break;
    default:
        return cairn__opt_slot(o, opt, val); /* kept as given */
    }
    if (bad)
        return cairn__cli_usage_error(ps->t->name, ps->t->help, "invalid value '%s' for --%s (%s)",
                                      val, opt->name, bad);
    return 0;
}

/* The task command's command line into *o; -1 to go on, else the exit code (as cairn__opt_parse).
 */
static int parse_task_args(int argc, char **argv, const cairn__cli_task *t, cairn__cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->store = getenv("CAIRN_STORE");
    o->retention_days = 7;
    o->tombstone_days = 30;
    const int file = t->takes_id == CAIRN__TAKES_FILE;
    const cairn__opt_cmd cmd = {t->name, t->help, t->config,
                                file          ? 1
                                : t->takes_id ? -1
                                              : 0,
                                all_options};
    parse_state ps = {o, t};
    int oi, rc = cairn__opt_parse(argc, argv, &cmd, parse_opt, &ps, &oi);
    if (rc >= 0)
        return rc;
    if (!o->store || !*o->store) {
        cairn__log(CAIRN__LOG_ERROR, t->name, "usage", NULL, NULL,
                   "no store: pass --store DIR or set CAIRN_STORE");
        return CAIRN__EX_USAGE;
    }
    if (t->takes_id == 1 && oi != argc - 1)
        return cairn__cli_usage_error(
            t->name, t->help, oi == argc ? "the task ID is missing" : "one task ID, please");
    o->id = t->takes_id == 1 ? argv[oi] : NULL;
    if (file && oi < argc)
        o->input = argv[oi];
    return -1;
}

static const cairn_graph *find_graph(cairn_graph *const *graphs, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(cairn_graph_name(graphs[i]), name) == 0)
            return graphs[i];
    return NULL;
}

int cairn__cli_check_graph(cairn_graph *const *graphs, size_t n, const char *name, char *err,
                           size_t errlen)
{
    if (find_graph(graphs, n, name))
        return 0;
    if (g_config_graph && !g_configured && strcmp(name, g_config_graph) == 0) {
        snprintf(err, errlen, "%s", no_config_msg);
        return CAIRN_ENOGRAPH;
    }
    size_t len = (size_t)snprintf(err, errlen, "no graph named '%s' (this program has:", name);
    for (size_t i = 0; i < n && len < errlen; i++)
        len += (size_t)snprintf(err + len, errlen - len, " %s", cairn_graph_name(graphs[i]));
    if (len < errlen)
        snprintf(err + len, errlen - len, "%s)", n ? "" : " none");
    return CAIRN_ENOGRAPH;
}

int cairn__cli_need_config(const char *cmd, size_t n_graphs)
{
    if (n_graphs || !g_config_graph || g_configured)
        return 0;
    cairn__log(CAIRN__LOG_ERROR, cmd, "usage", NULL, NULL, "%s", no_config_msg);
    return CAIRN__EX_USAGE;
}

/* ------------------------------------------------------------------ store & runner */

/* the session's runners, for the signal handler (consume's worker threads have one each) */
static cairn_runner *volatile g_runners[CAIRN__JOBS_MAX];
static volatile size_t g_n_runners;

/* -v: the runner's events, one line each (cmd is the command's name, static) */
static void log_event(const cairn_event *ev, void *user)
{
    const char *cmd = user, *e = ev->event, *t = ev->task_id, *st = ev->step;
    unsigned long long ms = (unsigned long long)ev->duration_ms;
    const char *m = ev->message;
    int lv = CAIRN__LOG_INFO;
    if (!strcmp(e, "task_started"))
        cairn__log(lv, cmd, e, t, st, "task %s: started (attempt %u)", t, ev->attempt);
    else if (!strcmp(e, "step_done"))
        cairn__log(lv, cmd, e, t, st, "task %s: step %s done in %llu ms (invocation %u)", t, st, ms,
                   ev->invocation);
    else if (!strcmp(e, "step_intent"))
        cairn__log(lv, cmd, e, t, st, "task %s: step %s: intent recorded, calling the effect", t,
                   st);
    else if (!strcmp(e, "step_failed"))
        cairn__log(CAIRN__LOG_WARN, cmd, e, t, st, "task %s: step %s failed after %llu ms: %s", t,
                   st, ms, m);
    else if (!strcmp(e, "step_reset"))
        cairn__log(lv, cmd, e, t, st, "task %s: step %s: the probe says the effect did not happen",
                   t, st);
    else if (!strcmp(e, "task_succeeded"))
        cairn__log(lv, cmd, e, t, st, "task %s succeeded", t);
    else
        cairn__log(CAIRN__LOG_WARN, cmd, e, t, st, "task %s: %s at step %s (%s): %s", t, e + 5, st,
                   cairn_state_name(ev->state), *m ? m : "no message");
}

static void on_signal(int sig)
{
    (void)sig;
    for (size_t i = 0; i < g_n_runners; i++)
        cairn_runner_stop(g_runners[i]);
}

void cairn__cli_session_close(cairn__cli_session *s)
{
    g_n_runners = 0;
    for (size_t i = 0; i < s->n_more; i++)
        cairn_runner_free(s->more[i]);
    free(s->more);
    cairn_runner_free(s->runner);
    cairn_store_free(s->store);
}

/* A runner on `store` for `graphs`, configured from the options; logged failures. */
static int runner_make(const char *cmd, const cairn__cli_opts *o, cairn_graph *const *graphs,
                       size_t n_graphs, cairn_store *store, cairn_retry_report_fn report,
                       void *report_user, cairn_runner **out)
{
    cairn_runner *r = *out = cairn_runner_new();
    if (!r)
        return CAIRN_ENOMEM;
    int rc;
    cairn_runner_set_store(r, store);
    for (size_t i = 0; i < n_graphs; i++) {
        if ((rc = cairn_runner_add_graph(r, graphs[i]))) {
            cairn__log(CAIRN__LOG_ERROR, cmd, "runner_open", NULL, NULL, "%s (%s)",
                       cairn_runner_errmsg(r), cairn_errname(rc));
            return rc;
        }
    }
    if (o->max_attempts)
        cairn_runner_set_max_attempts(r, o->max_attempts);
    if (o->lease_ms)
        cairn_runner_set_lease_ms(r, o->lease_ms);
    if (o->has_inline_wait)
        cairn_runner_set_inline_wait_ms(r, o->inline_wait_ms);
    if (o->tenant_field)
        cairn_runner_set_tenant_limit(r, o->tenant_field, o->max_per_tenant);
    cairn_runner_set_allow_graph_change(r, o->allow_graph_change);
    cairn_runner_set_retention(r, (uint64_t)(o->retention_days * 86400),
                               (uint64_t)(o->tombstone_days * 86400));
    if (report)
        cairn_runner_set_retry_report(r, report, report_user);
    if (cairn__log_enabled(CAIRN__LOG_INFO))
        cairn_runner_set_events(r, log_event, (void *)cmd);
    if ((rc = cairn_runner_open(r))) {
        cairn__log(CAIRN__LOG_ERROR, cmd, "runner_open", NULL, NULL, "%s (%s)",
                   cairn_runner_errmsg(r), cairn_errname(rc));
        return rc;
    }
    return 0;
}

int cairn__cli_session_more(cairn__cli_session *s, const char *cmd, const cairn__cli_opts *o,
                            cairn_graph *const *graphs, size_t n_graphs, size_t n)
{
    if (1 + s->n_more + n > CAIRN__JOBS_MAX)
        return CAIRN_EINVAL;
    cairn_runner **m = realloc(s->more, (s->n_more + n) * sizeof *m);
    if (!m)
        return CAIRN_ENOMEM;
    s->more = m;
    for (size_t i = 0; i < n; i++) {
        int rc = runner_make(cmd, o, graphs, n_graphs, s->store, NULL, NULL, &m[s->n_more]);
        if (m[s->n_more])
            s->n_more++;
        if (rc)
            return rc;
        g_runners[g_n_runners] = m[s->n_more - 1];
        g_n_runners++;
    }
    return 0;
}

size_t cairn__cli_workers(const cairn__cli_opts *o)
{
    size_t jobs = o->jobs ? o->jobs : 1, p = o->processes ? o->processes : 1;
    return p < jobs ? p : jobs;
}

size_t cairn__cli_worker_runners(const cairn__cli_opts *o, size_t i)
{
    size_t jobs = o->jobs ? o->jobs : 1, p = cairn__cli_workers(o);
    return jobs / p + (i < jobs % p);
}

/* The session, with the retry report its runner is opened with (NULL: none): a runner takes its
 * settings only before cairn_runner_open. */
static int session_open(cairn__cli_session *s, const char *cmd, const cairn__cli_opts *o,
                        cairn_graph *const *graphs, size_t n_graphs, int must_exist,
                        int need_runner, cairn_retry_report_fn report, void *report_user)
{
    memset(s, 0, sizeof *s);
    char err[4200];
    int rc;
    if (must_exist && (rc = cairn__cli_store_exists(o->store, err, sizeof err))) {
        cairn__log(CAIRN__LOG_ERROR, cmd, "store_open", NULL, NULL, "%s (%s)", err,
                   cairn_errname(rc));
        return rc;
    }
    s->store = cairn_store_new();
    if (!s->store)
        return CAIRN_ENOMEM;
    if (o->nosync)
        cairn_store_set_durability(s->store, CAIRN_NOSYNC);
    if (o->map_max)
        cairn_store_set_map_max(s->store, o->map_max);
    rc = cairn_store_open(s->store, o->store);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, cmd, "store_open", NULL, NULL, "%s (%s)",
                   cairn_store_errmsg(s->store), cairn_errname(rc));
        return rc;
    }
    if (!need_runner)
        return 0;
    if ((rc = runner_make(cmd, o, graphs, n_graphs, s->store, report, report_user, &s->runner)))
        return rc;
    g_runners[0] = s->runner;
    g_n_runners = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* a closed terminal or ssh session: a stop like SIGTERM */
    return 0;
}

int cairn__cli_session_open(cairn__cli_session *s, const char *cmd, const cairn__cli_opts *o,
                            cairn_graph *const *graphs, size_t n_graphs, int must_exist,
                            int need_runner)
{
    return session_open(s, cmd, o, graphs, n_graphs, must_exist, need_runner, NULL, NULL);
}

int cairn__cli_session_open_reporting(cairn__cli_session *s, const char *cmd,
                                      const cairn__cli_opts *o, cairn_graph *const *graphs,
                                      size_t n_graphs, cairn_retry_report_fn report, void *user)
{
    return session_open(s, cmd, o, graphs, n_graphs, 1, 1, report, user);
}

int cairn__cli_fail(const char *cmd, int rc, const char *msg)
{
    cairn__log(CAIRN__LOG_ERROR, cmd, "error", NULL, NULL, "%s (%s)",
               msg && *msg ? msg : cairn_strerror(rc), cairn_errname(rc));
    return cairn__exit_code(rc);
}

void cairn__cli_print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* ------------------------------------------------------------------ dispatch */

static const cairn__cli_cmd *extra_cmds;
static size_t n_extra_cmds;

void cairn__cli_set_extra(const cairn__cli_cmd *cmds, size_t n)
{
    extra_cmds = cmds;
    n_extra_cmds = n;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(
        f,
        "usage: %s <command> [options]   (--help after a command for its options)\n"
        "Task commands (--store DIR or CAIRN_STORE):\n"
        "  run        run one task, resuming after its last committed step\n"
        "  init       create an empty store (run does that on first use)\n"
        "  show ID    a task, its steps and outputs\n"
        "  list       tasks by status\n"
        "  retry      run due failed/pending/orphaned tasks (for cron)\n"
        "  resolve    settle an effect in doubt\n"
        "  invalidate start a new generation of a task\n"
        "  gc         drop old outputs, keep tombstones\n"
        "  audit ID   a task's transitions\n"
        "  stats      counts by status, store size\n"
        "  check      verify every record of the store\n"
        "  consume    run a stream of tasks (JSON lines, kcat's), K at once\n"
        "  serve      the HTTP task API (--tasks), with Idempotency-Key; in cairn, a model\n"
        "             as an OpenAI-compatible service (--model: serve --model M --help)\n"
        "  shard      which of N machines owns a task; filter a stream to one\n"
        "%s",
        prog,
        g_config_graph
            ? "run, retry, invalidate, consume and serve of graph 'default' need --config FILE or "
              "CAIRN_CONFIG.\n"
            : "");
    if (n_extra_cmds)
        fprintf(f, "Other commands:\n");
    for (size_t i = 0; i < n_extra_cmds; i++)
        fprintf(f, "  %-10s %s\n", extra_cmds[i].name, extra_cmds[i].summary);
    fprintf(f,
            "Exit codes: 0 ok, 64 usage, 65 invalid input, 66 not found, 69 needs an operator\n"
            "(dead or in doubt; for the model commands: unsupported, or no CUDA device),\n"
            "70 internal, 74 store error, 75 try later, 76 conflict.\n"
            "%s --version prints the version.\n",
            prog);
}

int cairn_cli_main(int argc, char **argv, cairn_graph *const *graphs, size_t n_graphs)
{
    const char *prog = argc > 0 ? argv[0] : "cairn";
    const char *slash = strrchr(prog, '/');
    prog = slash ? slash + 1 : prog;
    cairn__cli_prog = *prog ? prog : "cairn";
    cairn__log_reset();
    if (argc < 2) {
        usage(stderr, prog);
        return CAIRN__EX_USAGE;
    }
    const char *cmd = argv[1];
    int sub_argc = argc - 1;
    char **sub_argv = argv + 1;
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout, prog);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        if (!strcmp(prog, "cairn"))
            printf("cairn %s\n", CAIRN__VERSION);
        else
            printf("%s (cairn %s)\n", prog, CAIRN__VERSION);
        return 0;
    }
    if (!strcmp(cmd, "shard")) /* no store: a function of the ID */
        return cairn__cmd_shard(sub_argc, sub_argv);
    const cairn__cli_task *t = find_task(cmd);
    if (t) {
        cairn__cli_opts o;
        int rc = parse_task_args(sub_argc, sub_argv, t, &o);
        return rc >= 0 ? rc : t->fn(&o, graphs, n_graphs);
    }
    for (size_t i = 0; i < n_extra_cmds; i++)
        if (!strcmp(cmd, extra_cmds[i].name))
            return extra_cmds[i].fn(sub_argc, sub_argv);
    cairn__log(CAIRN__LOG_ERROR, NULL, "usage", NULL, NULL, "unknown command '%s'", cmd);
    usage(stderr, prog);
    return CAIRN__EX_USAGE;
}
