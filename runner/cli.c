/* runner/cli.c - the `cairn` command line, for any set of graphs (cairn_cli_main).
 *
 * Each command parses its options, checks everything it can before touching the store (so a
 * usage or input error never leaves a new, empty store behind), opens the store and a runner,
 * makes one library call and maps the result to a sysexits exit code through one table
 * (cairn__exit_code below). Only `run` (and `init`, which asks for nothing else) creates a store;
 * every other command on a path that holds none says so (66). Messages for people go to stderr,
 * prefixed with the program's own name (argv[0]: `cairn`, or `cairn-ledger` for a program built on
 * cairn_cli_main); --json output for scripts goes to stdout, one JSON document per call.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner/canon.h"
#include "runner/cli.h"
#include "runner/internal.h"

/* CAIRN__VERSION is meson's project version, passed by the build (meson.build). */

/* cairn_store_set_map_max's documented default, for `stats` */
#define DEFAULT_MAP_MAX (64ull << 30)

static const char *g_prog = "cairn"; /* argv[0]'s basename, for messages and usage */

/* The built-in graph that needs a configuration (cairn__cli_set_config_graph) */
static const char *g_config_graph;
static int g_configured;

void cairn__cli_set_config_graph(const char *graph, int configured)
{
    g_config_graph = graph;
    g_configured = configured;
}

static const char no_config_msg[] = "no pipeline config: pass --config FILE or set CAIRN_CONFIG";

/* sysexits */
enum {
    EX_OK_ = 0,
    EX_USAGE_ = 64,
    EX_DATAERR_ = 65,
    EX_NOINPUT_ = 66,
    EX_UNAVAILABLE_ = 69,
    EX_SOFTWARE_ = 70,
    EX_IOERR_ = 74,
    EX_TEMPFAIL_ = 75,
    EX_CONFLICT_ = 76
};

int cairn__exit_code(int err)
{
    switch (err) {
    case 0:
        return EX_OK_;
    case CAIRN_EJSON:
    case CAIRN_ETASKID:
    case CAIRN_ETOOBIG:
    case CAIRN_EGRAPHCHANGED:
    case CAIRN_ESTATE:
    case CAIRN_EFORMAT:
    case CAIRN_EUNSUPPORTED:
    case CAIRN_ECONTEXT:
        return EX_DATAERR_;
    case CAIRN_ENOENT:
    case CAIRN_ENOTFOUND:
        return EX_NOINPUT_;
    case CAIRN_EDEAD:
    case CAIRN_EINDOUBT:
    case CAIRN_ENODEVICE:
        return EX_UNAVAILABLE_;
    case CAIRN_EIO:
    case CAIRN_EFULL:
    case CAIRN_ECORRUPT:
    case CAIRN_ESCHEMA:
        return EX_IOERR_;
    case CAIRN_ETRANSIENT:
    case CAIRN_EBUSY:
    case CAIRN_ETENANT:
    case CAIRN_EINTR:
    case CAIRN_ETIMEOUT:
        return EX_TEMPFAIL_;
    case CAIRN_ECONFLICT:
        return EX_CONFLICT_;
    case CAIRN_ENOGRAPH:
    case CAIRN_EINVAL:
        return EX_USAGE_;
    default:
        return EX_SOFTWARE_;
    }
}

/* ------------------------------------------------------------------ common options */

typedef struct opts {
    const char *store, *graph, *task, *task_from, *input, *message_id, *status, *step, *from;
    const char *tenant_field;
    uint32_t max_per_tenant, limit, max_attempts, lease_ms, inline_wait_ms;
    uint64_t map_max;
    double retention_days, tombstone_days;
    int json, now, done, not_done, allow_graph_change, nosync, help, has_inline_wait;
} opts;

enum {
    O_STORE = 256,
    O_GRAPH,
    O_TASK,
    O_TASK_FROM,
    O_INPUT,
    O_MESSAGE_ID,
    O_STATUS,
    O_STEP,
    O_FROM,
    O_TENANT_FIELD,
    O_MAX_PER_TENANT,
    O_LIMIT,
    O_MAX_ATTEMPTS,
    O_LEASE_MS,
    O_INLINE_WAIT,
    O_MAP_MAX,
    O_RETENTION,
    O_TOMBSTONE,
    O_JSON,
    O_NOW,
    O_DONE,
    O_NOT_DONE,
    O_ALLOW_GRAPH_CHANGE,
    O_NOSYNC,
    O_HELP
};

static const struct option all_options[] = {
    {"store", required_argument, 0, O_STORE},
    {"graph", required_argument, 0, O_GRAPH},
    {"task", required_argument, 0, O_TASK},
    {"task-from", required_argument, 0, O_TASK_FROM},
    {"input", required_argument, 0, O_INPUT},
    {"message-id", required_argument, 0, O_MESSAGE_ID},
    {"status", required_argument, 0, O_STATUS},
    {"step", required_argument, 0, O_STEP},
    {"from", required_argument, 0, O_FROM},
    {"tenant-field", required_argument, 0, O_TENANT_FIELD},
    {"max-running-per-tenant", required_argument, 0, O_MAX_PER_TENANT},
    {"limit", required_argument, 0, O_LIMIT},
    {"max-attempts", required_argument, 0, O_MAX_ATTEMPTS},
    {"lease-ms", required_argument, 0, O_LEASE_MS},
    {"inline-wait-ms", required_argument, 0, O_INLINE_WAIT},
    {"map-max", required_argument, 0, O_MAP_MAX},
    {"retention-days", required_argument, 0, O_RETENTION},
    {"tombstone-days", required_argument, 0, O_TOMBSTONE},
    {"json", no_argument, 0, O_JSON},
    {"now", no_argument, 0, O_NOW},
    {"done", no_argument, 0, O_DONE},
    {"not-done", no_argument, 0, O_NOT_DONE},
    {"allow-graph-change", no_argument, 0, O_ALLOW_GRAPH_CHANGE},
    {"nosync", no_argument, 0, O_NOSYNC},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

/* "--limit" for O_LIMIT: messages name the option the user typed, whichever form it had */
static const char *opt_name(int c)
{
    for (const struct option *o = all_options; o->name; o++)
        if (o->val == c)
            return o->name;
    return "?";
}

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

/* Help texts name the program as "%P" (cairn, cairn-ledger, ...). */
static void put_help(FILE *f, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (p[0] == '%' && p[1] == 'P') {
            fputs(g_prog, f);
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

static void print_help(FILE *f, const char *help, int needs_graphs)
{
    put_help(f, help);
    if (needs_graphs)
        put_config_help(f);
}

/* A usage error: says what is wrong, then prints the command's usage; exit 64. */
static int usage_error(const char *cmd, const char *help, const char *fmt, ...) CAIRN_PRINTF(3, 4);
static int usage_error(const char *cmd, const char *help, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", g_prog, cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    put_help(stderr, help);
    return EX_USAGE_;
}

/* Parses argv (after the command word). `allowed` lists the options this command takes.
 * Returns 0, or 64 after printing what is wrong. */
static int parse_opts(int argc, char **argv, const char *cmd, const int *allowed, opts *o,
                      int *optind_out)
{
    memset(o, 0, sizeof *o);
    o->store = getenv("CAIRN_STORE");
    o->retention_days = 7;
    o->tombstone_days = 30;
    optind = 0; /* 0, not 1: makes glibc re-initialize its permutation state */
    opterr = 0;
    int c;
    /* no "+": options may follow the operand (`show ID --json`, as the help texts show); an
     * operand that starts with '-' (a task ID may) goes after "--" */
    while ((c = getopt_long(argc, argv, "", all_options, NULL)) != -1) {
        if (c == '?' || c == ':') {
            if (optopt)
                fprintf(stderr, "%s %s: option --%s needs a value\n", g_prog, cmd,
                        opt_name(optopt));
            else
                fprintf(stderr, "%s %s: unknown option '%s' (see %s %s --help)\n", g_prog, cmd,
                        argv[optind - 1], g_prog, cmd);
            return EX_USAGE_;
        }
        int ok = c == O_HELP || c == O_STORE;
        for (const int *a = allowed; *a && !ok; a++)
            ok = *a == c;
        if (!ok) {
            fprintf(stderr, "%s %s: --%s is not an option of this command (see %s %s --help)\n",
                    g_prog, cmd, opt_name(c), g_prog, cmd);
            return EX_USAGE_;
        }
        const char *bad = NULL; /* what a valid value looks like */
        uint64_t u;
        switch (c) {
        case O_STORE:
            o->store = optarg;
            break;
        case O_GRAPH:
            o->graph = optarg;
            break;
        case O_TASK:
            o->task = optarg;
            break;
        case O_TASK_FROM:
            o->task_from = optarg;
            break;
        case O_INPUT:
            o->input = optarg;
            break;
        case O_MESSAGE_ID:
            o->message_id = optarg;
            break;
        case O_STATUS:
            o->status = optarg;
            break;
        case O_STEP:
            o->step = optarg;
            break;
        case O_FROM:
            o->from = optarg;
            break;
        case O_TENANT_FIELD:
            o->tenant_field = optarg;
            break;
        case O_MAX_PER_TENANT:
            if (parse_u32(optarg, &o->max_per_tenant) || !o->max_per_tenant)
                bad = "a whole number of at least 1";
            break;
        case O_LIMIT:
            if (parse_u32(optarg, &o->limit))
                bad = "a whole number; 0 = no limit";
            break;
        case O_MAX_ATTEMPTS:
            if (parse_u32(optarg, &o->max_attempts) || !o->max_attempts)
                bad = "a whole number of at least 1";
            break;
        case O_LEASE_MS:
            if (parse_u32(optarg, &o->lease_ms) || o->lease_ms < 100)
                bad = "milliseconds, at least 100";
            break;
        case O_INLINE_WAIT:
            if (parse_u32(optarg, &o->inline_wait_ms))
                bad = "milliseconds; 0 = never wait inside the run";
            o->has_inline_wait = 1;
            break;
        case O_MAP_MAX:
            if (parse_u64(optarg, &u))
                bad = "a whole number of bytes";
            o->map_max = u;
            break;
        case O_RETENTION:
        case O_TOMBSTONE:
            if (parse_days(optarg, c == O_RETENTION ? &o->retention_days : &o->tombstone_days))
                bad = "days, from 0 to 36500";
            break;
        case O_JSON:
            o->json = 1;
            break;
        case O_NOW:
            o->now = 1;
            break;
        case O_DONE:
            o->done = 1;
            break;
        case O_NOT_DONE:
            o->not_done = 1;
            break;
        case O_ALLOW_GRAPH_CHANGE:
            o->allow_graph_change = 1;
            break;
        case O_NOSYNC:
            o->nosync = 1;
            break;
        case O_HELP:
            o->help = 1;
            break;
        }
        if (bad) {
            fprintf(stderr, "%s %s: invalid value '%s' for --%s (%s)\n", g_prog, cmd, optarg,
                    opt_name(c), bad);
            return EX_USAGE_;
        }
    }
    *optind_out = optind;
    if (!o->help && (!o->store || !*o->store)) {
        fprintf(stderr, "%s %s: no store: pass --store DIR or set CAIRN_STORE\n", g_prog, cmd);
        return EX_USAGE_;
    }
    return 0;
}

/* The tenant limit takes both options or neither. */
static int tenant_usage(const char *cmd, const char *help, const opts *o)
{
    if (o->tenant_field && !o->max_per_tenant)
        return usage_error(cmd, help, "--tenant-field needs --max-running-per-tenant N");
    if (o->max_per_tenant && !o->tenant_field)
        return usage_error(cmd, help, "--max-running-per-tenant needs --tenant-field F");
    return 0;
}

static const cairn_graph *find_graph(cairn_graph *const *graphs, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(cairn_graph_name(graphs[i]), name) == 0)
            return graphs[i];
    return NULL;
}

/* Checks that `--graph NAME` is one of this program's graphs; else prints why (the built-in
 * graph without a configuration, or the graphs there are) into err and returns CAIRN_ENOGRAPH. */
static int check_graph(cairn_graph *const *graphs, size_t n, const char *name, char *err,
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

/* For the commands that work on stored tasks' graphs (retry, invalidate): in the `cairn`
 * executable without a configuration there are none, and every task would fail alike. */
static int need_config(const char *cmd, size_t n_graphs)
{
    if (n_graphs || !g_config_graph || g_configured)
        return 0;
    fprintf(stderr, "%s %s: %s\n", g_prog, cmd, no_config_msg);
    return EX_USAGE_;
}

/* ------------------------------------------------------------------ store & runner */

static cairn_runner *g_runner; /* for the signal handler */

static void on_signal(int sig)
{
    (void)sig;
    cairn_runner_stop(g_runner);
}

typedef struct session {
    cairn_store *store;
    cairn_runner *runner;
} session;

static void session_close(session *s)
{
    g_runner = NULL;
    cairn_runner_free(s->runner);
    cairn_store_free(s->store);
}

/* Opens the store (with `must_exist`, only one that is there: every command but `run`) and,
 * with `need_runner`, a runner for the graphs configured from the options. On failure the
 * reason has been printed. */
static int session_open(session *s, const char *cmd, const opts *o, cairn_graph *const *graphs,
                        size_t n_graphs, int must_exist, int need_runner)
{
    memset(s, 0, sizeof *s);
    char err[4200];
    int rc;
    if (must_exist && (rc = cairn__cli_store_exists(o->store, err, sizeof err))) {
        fprintf(stderr, "%s %s: %s (%s)\n", g_prog, cmd, err, cairn_errname(rc));
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
        fprintf(stderr, "%s %s: %s (%s)\n", g_prog, cmd, cairn_store_errmsg(s->store),
                cairn_errname(rc));
        return rc;
    }
    if (!need_runner)
        return 0;
    s->runner = cairn_runner_new();
    if (!s->runner)
        return CAIRN_ENOMEM;
    cairn_runner_set_store(s->runner, s->store);
    for (size_t i = 0; i < n_graphs; i++) {
        if ((rc = cairn_runner_add_graph(s->runner, graphs[i]))) {
            fprintf(stderr, "%s %s: %s (%s)\n", g_prog, cmd, cairn_runner_errmsg(s->runner),
                    cairn_errname(rc));
            return rc;
        }
    }
    if (o->max_attempts)
        cairn_runner_set_max_attempts(s->runner, o->max_attempts);
    if (o->lease_ms)
        cairn_runner_set_lease_ms(s->runner, o->lease_ms);
    if (o->has_inline_wait)
        cairn_runner_set_inline_wait_ms(s->runner, o->inline_wait_ms);
    if (o->tenant_field)
        cairn_runner_set_tenant_limit(s->runner, o->tenant_field, o->max_per_tenant);
    cairn_runner_set_allow_graph_change(s->runner, o->allow_graph_change);
    cairn_runner_set_retention(s->runner, (uint64_t)(o->retention_days * 86400),
                               (uint64_t)(o->tombstone_days * 86400));
    if ((rc = cairn_runner_open(s->runner))) {
        fprintf(stderr, "%s %s: %s (%s)\n", g_prog, cmd, cairn_runner_errmsg(s->runner),
                cairn_errname(rc));
        return rc;
    }
    g_runner = s->runner;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    return 0;
}

static int fail(const char *cmd, int rc, const char *msg)
{
    fprintf(stderr, "%s %s: %s (%s)\n", g_prog, cmd, msg && *msg ? msg : cairn_strerror(rc),
            cairn_errname(rc));
    return cairn__exit_code(rc);
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* ------------------------------------------------------------------ run */

static const char run_help[] =
    "usage: %P run --graph G [--task ID | --task-from F1,F2] [--input FILE|-]\n"
    "         [--message-id ID] [--json] [--store DIR]\n"
    "         [--tenant-field F --max-running-per-tenant N] [--allow-graph-change]\n"
    "         [--max-attempts N] [--lease-ms MS] [--inline-wait-ms MS]\n"
    "         [--nosync] [--map-max BYTES]\n"
    "Runs one task to completion, resuming after its last committed step. Without --input\n"
    "the input is read from standard input.\n"
    "Without --task the ID is derived: from the named input fields joined with '_', or\n"
    "<graph>_<first 16 hex of SHA-256 of the RFC 8785 canonical input>.\n"
    "--inline-wait-ms MS: a transient failure whose backoff is longer than MS (default 2000)\n"
    "ends the run with the task failed and a retry time, for `%P retry`; 0 = never wait\n"
    "inside the run.\n"
    "--tenant-field F --max-running-per-tenant N: at most N running tasks per value of input\n"
    "field F, across processes; a task over the limit is left pending for `%P retry` (75).\n"
    "--nosync creates a new store that survives process crashes only (faster); a store\n"
    "keeps the durability it was created with. Only `run` creates a store.\n"
    "Exit: 0 succeeded (now or earlier; also a message ID already consumed: the message then\n"
    "says the task's state), 64 usage or unknown graph, 65 invalid input, 66 input missing or\n"
    "unreadable (a directory too), 69 dead or in doubt, 74 store error, 75 try later,\n"
    "76 same ID with another payload.\n";

/* The one JSON document `run --json` prints, whatever happened: task, status and attempt (when
 * the task exists), exit code, error name and message. */
static void run_json(cairn_store *store, const char *id, int rc, const char *msg)
{
    json_t *j = json_object();
    json_object_set_new(j, "task", id[0] ? json_string(id) : json_null());
    cairn_task *t = NULL;
    if (store && id[0] && cairn_task_load(store, id, &t) == 0) {
        json_object_set_new(j, "status", json_string(cairn_state_name(cairn_task_state(t))));
        json_object_set_new(j, "attempt", json_integer(cairn_task_attempt(t)));
    }
    cairn_task_free(t);
    json_object_set_new(j, "exit", json_integer(cairn__exit_code(rc)));
    json_object_set_new(j, "error", rc ? json_string(cairn_errname(rc)) : json_null());
    json_object_set_new(j, "message", json_string(msg ? msg : ""));
    print_json(j);
}

/* Everything `run` can refuse without the store: the graph, the message ID, the input and the
 * task ID (checked again by the runner; checking here means a refused run creates no store).
 * Returns 0 or an error code with err set; *buf holds the input on success. */
static int run_precheck(const opts *o, cairn_graph *const *graphs, size_t n, char **buf,
                        size_t *len, char *err, size_t errlen)
{
    int rc = check_graph(graphs, n, o->graph, err, errlen);
    if (rc)
        return rc;
    if (o->message_id && (!*o->message_id || strlen(o->message_id) > CAIRN__ID_MAX)) {
        snprintf(err, errlen, "--message-id must be 1-%d bytes", CAIRN__ID_MAX);
        return CAIRN_EINVAL;
    }
    const char *path = o->input ? o->input : "-";
    if ((rc = cairn__read_input(path, buf, len, err, errlen)))
        return rc;
    json_t *j = NULL;
    rc = cairn__json_parse(*buf, *len, strcmp(path, "-") ? path : "<stdin>", &j, err, errlen);
    if (!rc && !json_is_object(j)) {
        snprintf(err, errlen, "%s: the task input must be a JSON object", path);
        rc = CAIRN_EJSON;
    }
    char id[CAIRN__ID_MAX + 1];
    if (!rc)
        rc = o->task ? cairn__task_id_check(o->task, err, errlen)
                     : cairn__task_id_derive(o->graph, j, o->task_from, id, sizeof id, err, errlen);
    if (!rc && o->tenant_field) {
        json_t *tv = json_object_get(j, o->tenant_field);
        if (!json_is_string(tv) || !json_string_length(tv) ||
            json_string_length(tv) > CAIRN__ID_MAX) {
            snprintf(err, errlen, "%s: field '%s' (the tenant) must be a string of 1-%d bytes",
                     path, o->tenant_field, CAIRN__ID_MAX);
            rc = CAIRN_EJSON;
        }
    }
    json_decref(j);
    if (rc) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

static int cmd_run(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_GRAPH,        O_TASK,           O_TASK_FROM,
                                  O_INPUT,        O_MESSAGE_ID,     O_JSON,
                                  O_TENANT_FIELD, O_MAX_PER_TENANT, O_ALLOW_GRAPH_CHANGE,
                                  O_MAX_ATTEMPTS, O_LEASE_MS,       O_INLINE_WAIT,
                                  O_NOSYNC,       O_MAP_MAX,        0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "run", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        print_help(stdout, run_help, 1);
        return 0;
    }
    if (!o.graph)
        return usage_error("run", run_help, "--graph G is required");
    if (oi != argc)
        return usage_error("run", run_help, "unexpected argument '%s'", argv[oi]);
    if (o.task && o.task_from)
        return usage_error("run", run_help, "--task and --task-from exclude each other");
    if ((rc = tenant_usage("run", run_help, &o)))
        return rc;
    char *buf = NULL;
    size_t len = 0;
    char err[1024];
    if ((rc = run_precheck(&o, graphs, n, &buf, &len, err, sizeof err))) {
        if (o.json)
            run_json(NULL, o.task ? o.task : "", rc, err);
        return fail("run", rc, err);
    }
    session s;
    rc = session_open(&s, "run", &o, graphs, n, 0, 1);
    if (rc) {
        free(buf);
        if (o.json)
            run_json(NULL, o.task ? o.task : "", rc,
                     s.runner ? cairn_runner_errmsg(s.runner) : cairn_store_errmsg(s.store));
        session_close(&s);
        return cairn__exit_code(rc);
    }
    char id[CAIRN__ID_MAX + 1] = "";
    rc = cairn_runner_run(s.runner, o.graph, o.task, o.task_from, buf, len, o.message_id, id);
    free(buf);
    char msg[1200];
    snprintf(msg, sizeof msg, "%s", cairn_runner_errmsg(s.runner));
    cairn_task *t = NULL;
    if (rc == 0 && id[0] && cairn_task_load(s.store, id, &t) == 0 &&
        cairn_task_state(t) != CAIRN_SUCCEEDED) {
        /* only a consumed message returns 0 for a task that did not succeed: exit 0 means "this
         * message needs nothing more", so say what became of its task */
        size_t l = strlen(msg);
        snprintf(msg + l, sizeof msg - l, "; that task is %s (see `%s show %s`)",
                 cairn_state_name(cairn_task_state(t)), g_prog, id);
    }
    cairn_task_free(t);
    if (o.json)
        run_json(s.store, id, rc, msg);
    if (rc) {
        fprintf(stderr, "%s run: %s (%s)\n", g_prog, msg, cairn_errname(rc));
    } else if (!o.json) {
        if (*msg)
            printf("%s: %s\n", id, msg);
        else
            printf("%s: succeeded\n", id);
    }
    session_close(&s);
    return cairn__exit_code(rc);
}

/* ------------------------------------------------------------------ show */

static const char show_help[] =
    "usage: %P show ID [--json] [--store DIR]\n"
    "Shows a task: status, attempt, payload hash, and each step with its output.\n"
    "An ID that starts with '-' goes after \"--\": %P show -- -x\n";

static int cmd_show(int argc, char **argv)
{
    static const int allowed[] = {O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "show", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        put_help(stdout, show_help);
        return 0;
    }
    if (oi != argc - 1)
        return usage_error("show", show_help,
                           oi == argc ? "the task ID is missing" : "one task ID, please");
    session s;
    if ((rc = session_open(&s, "show", &o, NULL, 0, 1, 0))) {
        session_close(&s);
        return cairn__exit_code(rc);
    }
    cairn_task *t = NULL;
    rc = cairn_task_load(s.store, argv[oi], &t);
    if (rc) {
        int x = fail("show", rc, cairn_store_errmsg(s.store));
        session_close(&s);
        return x;
    }
    json_t *j = cairn__task_to_json(t);
    if (!j) {
        cairn_task_free(t);
        session_close(&s);
        return fail("show", CAIRN_ENOMEM, NULL);
    }
    if (o.json) {
        char *js = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", js ? js : "null");
        free(js);
    } else
        cairn__print_task_table(j);
    json_decref(j);
    cairn_task_free(t);
    session_close(&s);
    return 0;
}

/* ------------------------------------------------------------------ list */

typedef struct list_arg {
    cairn__txn *t;
    const char *graph;
    uint32_t limit, n;
    json_t *rows, *unreadable;
} list_arg;

static int list_cb(const char *id, void *arg)
{
    list_arg *a = arg;
    cairn__task_rec r;
    if (a->limit && a->n >= a->limit)
        return 1;
    int rc = cairn__task_get(a->t, id, &r);
    if (rc == CAIRN_ENOMEM || rc == CAIRN_EIO)
        return rc; /* the store failed, not this record */
    if (rc) {
        /* a corrupt record, or one of a newer schema: never hidden, reported by name */
        const char *why = rc == CAIRN_ENOTFOUND ? "listed in the status index but has no record"
                                                : cairn_store_errmsg(cairn__txn_store(a->t));
        json_array_append_new(a->unreadable, json_pack("{s:s, s:s, s:s}", "task", id, "error",
                                                       cairn_errname(rc), "message", why));
        return 0;
    }
    if (a->graph && strcmp(a->graph, r.graph) != 0)
        return 0;
    json_t *o = json_object();
    json_object_set_new(o, "task", json_string(r.id));
    json_object_set_new(o, "graph", json_string(r.graph));
    json_object_set_new(o, "status", json_string(cairn_state_name((cairn_state)r.state)));
    json_object_set_new(o, "attempt", json_integer(r.attempt));
    json_object_set_new(o, "updated_ms", json_integer(r.updated_ms));
    if (r.state == CAIRN_FAILED)
        json_object_set_new(o, "next_retry_at_ms", json_integer(r.next_retry_ms));
    if (r.tombstone)
        json_object_set_new(o, "tombstone", json_true());
    if (r.error[0])
        json_object_set_new(o, "error", json_string(r.error));
    json_array_append_new(a->rows, o);
    a->n++;
    return 0;
}

static int list_txn(cairn__txn *t, void *arg)
{
    void **p = arg;
    list_arg *a = p[0];
    const cairn_state *only = p[1];
    a->t = t;
    /* the transaction may run again (a grown map): start over */
    json_array_clear(a->rows);
    json_array_clear(a->unreadable);
    a->n = 0;
    int rc = 0;
    for (int s = 0; s < CAIRN_STATE_COUNT && !rc; s++)
        if (!only || *only == (cairn_state)s)
            rc = cairn__due_each(t, (cairn_state)s, INT64_MAX, list_cb, a);
    return rc;
}

static const char list_help[] =
    "usage: %P list [--status S] [--graph G] [--limit N] [--json] [--store DIR]\n"
    "Lists tasks, by status (pending, running, succeeded, failed, dead, in_doubt); --limit 0\n"
    "(the default) lists all. --json prints an array of tasks.\n"
    "A task record that cannot be read (corrupt, or written by a newer cairn) is named on\n"
    "stderr and makes the exit 74; --json then prints {\"tasks\": [...], \"unreadable\":\n"
    "[{task, error, message}]} instead of the array.\n";

static int cmd_list(int argc, char **argv)
{
    static const int allowed[] = {O_STATUS, O_GRAPH, O_LIMIT, O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "list", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        put_help(stdout, list_help);
        return 0;
    }
    cairn_state st;
    if (oi != argc)
        return usage_error("list", list_help, "unexpected argument '%s'", argv[oi]);
    if (o.status && cairn_state_parse(o.status, &st))
        return usage_error("list", list_help, "unknown status '%s'", o.status);
    session s;
    if ((rc = session_open(&s, "list", &o, NULL, 0, 1, 0))) {
        session_close(&s);
        return cairn__exit_code(rc);
    }
    list_arg a = {
        .graph = o.graph, .limit = o.limit, .rows = json_array(), .unreadable = json_array()};
    void *p[2] = {&a, o.status ? &st : NULL};
    rc = cairn__store_read(s.store, list_txn, p);
    if (rc) {
        json_decref(a.rows);
        json_decref(a.unreadable);
        int x = fail("list", rc, cairn_store_errmsg(s.store));
        session_close(&s);
        return x;
    }
    size_t i, n_bad = json_array_size(a.unreadable);
    json_t *u;
    json_array_foreach(a.unreadable, i, u)
    {
        fprintf(stderr, "%s list: task '%s' cannot be read: %s (%s)\n", g_prog,
                json_string_value(json_object_get(u, "task")),
                json_string_value(json_object_get(u, "message")),
                json_string_value(json_object_get(u, "error")));
    }
    if (o.json && n_bad)
        print_json(json_pack("{s:o, s:o}", "tasks", a.rows, "unreadable", a.unreadable));
    else if (o.json) {
        print_json(a.rows);
        json_decref(a.unreadable);
    } else {
        cairn__print_list_table(a.rows);
        json_decref(a.rows);
        json_decref(a.unreadable);
    }
    if (n_bad)
        fprintf(stderr, "%s list: %zu task record(s) could not be read; `%s show ID` says more\n",
                g_prog, n_bad, g_prog);
    session_close(&s);
    return n_bad ? EX_IOERR_ : 0;
}

/* ------------------------------------------------------------------ retry */

static const char retry_help[] =
    "usage: %P retry [--graph G] [--limit N] [--now] [--json] [--store DIR]\n"
    "         [--tenant-field F --max-running-per-tenant N] [--allow-graph-change]\n"
    "         [--max-attempts N] [--lease-ms MS] [--inline-wait-ms MS]\n"
    "Runs the due tasks: failed ones whose retry time has come (all failed ones with --now),\n"
    "pending ones, and running ones whose process is gone; at most N with --limit N (0, the\n"
    "default, = no limit). Overlapping retries never run one task twice.\n"
    "Each task that does not succeed is named on stderr with the reason\n"
    "(\"%P: retry: TASK: message\"); --json prints {ran, succeeded, failed, deferred, tasks:\n"
    "[{task, exit, error, message}]} with exit as `run` would give it for that task.\n"
    "--tenant-field F --max-running-per-tenant N applies the tenant limit as `run` does (to\n"
    "tasks whose run recorded a tenant): a task over it is deferred, not run.\n"
    "Tasks running elsewhere or over the tenant limit are deferred; they do not count.\n"
    "Exit: 0 every task that ran succeeded (or none was due); 75 some failed transiently\n"
    "(they are due again by themselves) or the retry was interrupted; 69 some task needs an\n"
    "operator or a change: it is dead or in doubt, its graph changed (--allow-graph-change)\n"
    "or this program does not define its graph; 64 usage or unknown graph; 74 store error.\n";

/* What `retry` learns about each task it took up (cairn_runner_set_retry_report). */
typedef struct retry_seen {
    json_t *tasks;
    uint32_t deferred, later, operator_;
} retry_seen;

static void retry_report(const char *task_id, int rc, const char *message, void *user)
{
    retry_seen *r = user;
    json_array_append_new(r->tasks, json_pack("{s:s, s:i, s:o, s:s}", "task", task_id, "exit",
                                              cairn__exit_code(rc), "error",
                                              rc ? json_string(cairn_errname(rc)) : json_null(),
                                              "message", message ? message : ""));
    switch (rc) {
    case 0:
        return;
    case CAIRN_EBUSY:
    case CAIRN_ETENANT:
        r->deferred++; /* another process has it, or its tenant is at the limit: not a failure */
        return;
    case CAIRN_ETRANSIENT:
    case CAIRN_EINTR:
    case CAIRN_ETIMEOUT:
        r->later++;
        break;
    case CAIRN_EIO:
    case CAIRN_EFULL:
    case CAIRN_ECORRUPT:
    case CAIRN_ESCHEMA:
    case CAIRN_ENOMEM:
        break; /* retry stops and reports the store error itself */
    default:
        r->operator_++; /* dead, in doubt, graph changed, graph unknown: waiting will not help */
        break;
    }
    fprintf(stderr, "%s: retry: %s: %s (%s)\n", g_prog, task_id,
            message && *message ? message : cairn_strerror(rc), cairn_errname(rc));
}

static int cmd_retry(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {
        O_GRAPH,    O_LIMIT,       O_NOW,    O_JSON,    O_MAX_ATTEMPTS,       O_TENANT_FIELD,
        O_LEASE_MS, O_INLINE_WAIT, O_NOSYNC, O_MAP_MAX, O_ALLOW_GRAPH_CHANGE, O_MAX_PER_TENANT,
        0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "retry", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        print_help(stdout, retry_help, 1);
        return 0;
    }
    if (oi != argc)
        return usage_error("retry", retry_help, "unexpected argument '%s'", argv[oi]);
    if ((rc = tenant_usage("retry", retry_help, &o)) || (rc = need_config("retry", n)))
        return rc;
    char err[1024];
    if (o.graph && (rc = check_graph(graphs, n, o.graph, err, sizeof err)))
        return fail("retry", rc, err);
    session s;
    if ((rc = session_open(&s, "retry", &o, graphs, n, 1, 1))) {
        session_close(&s);
        return cairn__exit_code(rc);
    }
    retry_seen seen = {.tasks = json_array()};
    cairn_runner_set_retry_report(s.runner, retry_report, &seen);
    uint32_t ran = 0, ok = 0, bad = 0;
    rc = cairn_runner_retry(s.runner, o.graph, o.limit, o.now, &ran, &ok, &bad);
    if (o.json) {
        print_json(json_pack("{s:i, s:i, s:i, s:i, s:o}", "ran", (int)ran, "succeeded", (int)ok,
                             "failed", (int)bad, "deferred", (int)seen.deferred, "tasks",
                             seen.tasks));
    } else {
        printf("retry: ran %u, succeeded %u, not succeeded %u", ran, ok, bad);
        if (seen.deferred)
            printf(", deferred %u (running elsewhere or over the tenant limit)", seen.deferred);
        printf("\n");
        json_decref(seen.tasks);
    }
    int x = bad ? EX_TEMPFAIL_ : 0;
    if (rc)
        x = fail("retry", rc, cairn_runner_errmsg(s.runner)); /* 74, or 75 when interrupted */
    if ((!rc || rc == CAIRN_EINTR) && seen.operator_) {
        fprintf(stderr,
                "%s: retry: %u task(s) need an operator or a change (dead, in doubt, graph "
                "changed or not defined; see above): waiting will not help\n",
                g_prog, seen.operator_);
        x = EX_UNAVAILABLE_;
    }
    session_close(&s);
    return x;
}

/* ------------------------------------------------------------------ resolve, invalidate, gc */

static const char resolve_help[] =
    "usage: %P resolve ID --step S (--done | --not-done) [--store DIR]\n"
    "Settles an effect in doubt: --done records that it happened (the task continues after it),\n"
    "--not-done lets the next run perform it. The task becomes pending; run or retry it.\n";

static int cmd_resolve(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_STEP, O_DONE, O_NOT_DONE, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "resolve", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        put_help(stdout, resolve_help);
        return 0;
    }
    if (oi != argc - 1)
        return usage_error("resolve", resolve_help,
                           oi == argc ? "the task ID is missing" : "one task ID, please");
    if (!o.step)
        return usage_error("resolve", resolve_help, "--step S is required");
    if (o.done == o.not_done)
        return usage_error("resolve", resolve_help, "say either --done or --not-done");
    session s;
    if ((rc = session_open(&s, "resolve", &o, graphs, n, 1, 1)) == 0) {
        rc = cairn_runner_resolve(s.runner, argv[oi], o.step, o.done);
        if (rc)
            rc = fail("resolve", rc, cairn_runner_errmsg(s.runner));
        else
            printf("%s: step '%s' resolved as %s; task is pending\n", argv[oi], o.step,
                   o.done ? "done" : "not done");
    } else
        rc = cairn__exit_code(rc);
    session_close(&s);
    return rc;
}

static const char invalidate_help[] =
    "usage: %P invalidate ID [--from STEP] [--allow-graph-change] [--store DIR]\n"
    "Starts a new generation of the task from STEP (default: the first) onward; older outputs\n"
    "and the audit trail stay. Effects after that point will run again. A task started by\n"
    "another version of its graph is refused (65) unless --allow-graph-change.\n";

static int cmd_invalidate(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_FROM, O_ALLOW_GRAPH_CHANGE, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "invalidate", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        print_help(stdout, invalidate_help, 1);
        return 0;
    }
    if (oi != argc - 1)
        return usage_error("invalidate", invalidate_help,
                           oi == argc ? "the task ID is missing" : "one task ID, please");
    if ((rc = need_config("invalidate", n)))
        return rc;
    session s;
    if ((rc = session_open(&s, "invalidate", &o, graphs, n, 1, 1)) == 0) {
        rc = cairn_runner_invalidate(s.runner, argv[oi], o.from);
        if (rc)
            rc = fail("invalidate", rc, cairn_runner_errmsg(s.runner));
        else
            printf("%s: invalidated%s%s; task is pending\n", argv[oi], o.from ? " from " : "",
                   o.from ? o.from : "");
    } else
        rc = cairn__exit_code(rc);
    session_close(&s);
    return rc;
}

static const char gc_help[] =
    "usage: %P gc [--retention-days D] [--tombstone-days D] [--json] [--store DIR]\n"
    "Drops outputs of tasks finished more than D days ago (default 7), keeping a tombstone so\n"
    "a duplicate still does not run, and removes tombstones older than the dedupe window\n"
    "(default 30 days; never shorter than the retention).\n";

static int cmd_gc(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_RETENTION, O_TOMBSTONE, O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "gc", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        put_help(stdout, gc_help);
        return 0;
    }
    if (oi != argc)
        return usage_error("gc", gc_help, "unexpected argument '%s'", argv[oi]);
    if (o.tombstone_days < o.retention_days)
        return usage_error("gc", gc_help,
                           "--tombstone-days (%g) is shorter than --retention-days (%g): a "
                           "tombstone must outlive the outputs",
                           o.tombstone_days, o.retention_days);
    session s;
    uint32_t pruned = 0, removed = 0;
    if ((rc = session_open(&s, "gc", &o, graphs, n, 1, 1)) == 0) {
        rc = cairn_runner_gc(s.runner, &pruned, &removed);
        if (rc)
            rc = fail("gc", rc, cairn_runner_errmsg(s.runner));
        else if (o.json)
            print_json(json_pack("{s:i, s:i}", "pruned", (int)pruned, "removed", (int)removed));
        else
            printf("gc: %u task(s) pruned to tombstones, %u tombstone(s) removed\n", pruned,
                   removed);
    } else
        rc = cairn__exit_code(rc);
    session_close(&s);
    return rc;
}

/* ------------------------------------------------------------------ audit, stats */

static int audit_cb(const cairn__audit_rec *a, void *arg)
{
    json_t *o = json_object();
    json_object_set_new(o, "t_ms", json_integer(a->t_ms));
    json_object_set_new(o, "from", json_string(cairn_state_name((cairn_state)a->from)));
    json_object_set_new(o, "to", json_string(cairn_state_name((cairn_state)a->to)));
    json_object_set_new(o, "attempt", json_integer(a->attempt));
    json_object_set_new(o, "generation", json_integer(a->generation));
    json_object_set_new(o, "step", a->step[0] ? json_string(a->step) : json_null());
    json_object_set_new(o, "reason", json_string(a->reason));
    json_array_append_new(arg, o);
    return 0;
}

static int audit_txn(cairn__txn *t, void *arg)
{
    void **p = arg;
    cairn__task_rec r;
    int rc = cairn__task_get(t, p[0], &r);
    if (rc == CAIRN_ENOTFOUND)
        return cairn__store_fail(cairn__txn_store(t), rc, "no task '%s'", (char *)p[0]);
    return rc ? rc : cairn__audit_each(t, p[0], audit_cb, p[1]);
}

static const char audit_help[] = "usage: %P audit ID [--json] [--store DIR]\n"
                                 "Prints every transition of a task: time, from, to, attempt, "
                                 "step and reason.\n";

static int cmd_audit(int argc, char **argv)
{
    static const int allowed[] = {O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "audit", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        put_help(stdout, audit_help);
        return 0;
    }
    if (oi != argc - 1)
        return usage_error("audit", audit_help,
                           oi == argc ? "the task ID is missing" : "one task ID, please");
    session s;
    if ((rc = session_open(&s, "audit", &o, NULL, 0, 1, 0))) {
        session_close(&s);
        return cairn__exit_code(rc);
    }
    json_t *rows = json_array();
    void *p[2] = {argv[oi], rows};
    rc = cairn__store_read(s.store, audit_txn, p);
    int x = 0;
    if (rc) {
        x = fail("audit", rc, cairn_store_errmsg(s.store));
        json_decref(rows);
    } else if (o.json)
        print_json(rows);
    else {
        cairn__print_audit_table(rows);
        json_decref(rows);
    }
    session_close(&s);
    return x;
}

static int stats_txn(cairn__txn *t, void *arg) { return cairn__store_stats_get(t, arg); }

static const char stats_help[] =
    "usage: %P stats [--json] [--map-max BYTES] [--store DIR]\n"
    "Counts tasks by status and shows the store's size: the space used, the current map and the\n"
    "limit the map may grow to in a process (default 64 GiB; each process sets its own with\n"
    "--map-max, so pass the one your runs use to see their headroom).\n";

static int cmd_stats(int argc, char **argv)
{
    static const int allowed[] = {O_JSON, O_MAP_MAX, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "stats", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        put_help(stdout, stats_help);
        return 0;
    }
    if (oi != argc)
        return usage_error("stats", stats_help, "unexpected argument '%s'", argv[oi]);
    session s;
    if ((rc = session_open(&s, "stats", &o, NULL, 0, 1, 0))) {
        session_close(&s);
        return cairn__exit_code(rc);
    }
    cairn__store_stats st;
    rc = cairn__store_read(s.store, stats_txn, &st);
    if (rc) {
        int x = fail("stats", rc, cairn_store_errmsg(s.store));
        session_close(&s);
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
    uint64_t map_max = o.map_max ? o.map_max : DEFAULT_MAP_MAX;
    json_object_set_new(j, "map_max", json_integer((json_int_t)map_max));
    if (o.json)
        print_json(j);
    else {
        printf("tasks        %llu\n", (unsigned long long)total);
        for (int i = 0; i < CAIRN_STATE_COUNT; i++)
            printf("  %-10s %llu\n", cairn_state_name((cairn_state)i),
                   (unsigned long long)st.by_state[i]);
        char used[32], size[32], max[32];
        cairn__fmt_bytes(st.map_used, used);
        cairn__fmt_bytes(st.map_size, size);
        cairn__fmt_bytes(map_max, max);
        printf("tombstones   %llu\nmessages     %llu\nstep records %llu\naudit        %llu\n"
               "store        %s used; map %s now, grows to at most %s (%s)\n",
               (unsigned long long)st.tombstones, (unsigned long long)st.messages,
               (unsigned long long)st.step_records, (unsigned long long)st.audit_records, used,
               size, max, o.map_max ? "--map-max" : "the default; runs may set --map-max");
        json_decref(j);
    }
    session_close(&s);
    return 0;
}

/* ------------------------------------------------------------------ init */

static const char init_help[] =
    "usage: %P init [--nosync] [--store DIR]\n"
    "Creates an empty store (what `run` does on its first task), for tools that read the store\n"
    "before any task ran, or to fix a new store's durability ahead of the workers (--nosync:\n"
    "survives process crashes only). An existing store is left as it is.\n";

static int cmd_init(int argc, char **argv)
{
    static const int allowed[] = {O_NOSYNC, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "init", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        put_help(stdout, init_help);
        return 0;
    }
    if (oi != argc)
        return usage_error("init", init_help, "unexpected argument '%s'", argv[oi]);
    char err[4200];
    int existed = cairn__cli_store_exists(o.store, err, sizeof err) == 0;
    session s;
    rc = session_open(&s, "init", &o, NULL, 0, 0, 0);
    if (!rc)
        printf("%s: %s\n", o.store, existed ? "store exists (unchanged)" : "store created");
    session_close(&s);
    return cairn__exit_code(rc);
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
    fprintf(f,
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
            "%s",
            prog,
            g_config_graph ? "run, retry and invalidate of graph 'default' need --config FILE or "
                             "CAIRN_CONFIG.\n"
                           : "");
    if (n_extra_cmds)
        fprintf(f, "Other commands:\n");
    for (size_t i = 0; i < n_extra_cmds; i++)
        fprintf(f, "  %-10s %s\n", extra_cmds[i].name, extra_cmds[i].summary);
    fprintf(f,
            "Exit codes: 0 ok, 64 usage, 65 invalid input, 66 not found, 69 needs an operator\n"
            "(dead or in doubt), 70 internal, 74 store error, 75 try later, 76 conflict.\n"
            "%s --version prints the version.\n",
            prog);
}

int cairn_cli_main(int argc, char **argv, cairn_graph *const *graphs, size_t n_graphs)
{
    const char *prog = argc > 0 ? argv[0] : "cairn";
    const char *slash = strrchr(prog, '/');
    prog = slash ? slash + 1 : prog;
    g_prog = *prog ? prog : "cairn";
    if (argc < 2) {
        usage(stderr, prog);
        return EX_USAGE_;
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
    if (!strcmp(cmd, "run"))
        return cmd_run(sub_argc, sub_argv, graphs, n_graphs);
    if (!strcmp(cmd, "show"))
        return cmd_show(sub_argc, sub_argv);
    if (!strcmp(cmd, "init"))
        return cmd_init(sub_argc, sub_argv);
    if (!strcmp(cmd, "list"))
        return cmd_list(sub_argc, sub_argv);
    if (!strcmp(cmd, "retry"))
        return cmd_retry(sub_argc, sub_argv, graphs, n_graphs);
    if (!strcmp(cmd, "resolve"))
        return cmd_resolve(sub_argc, sub_argv, graphs, n_graphs);
    if (!strcmp(cmd, "invalidate"))
        return cmd_invalidate(sub_argc, sub_argv, graphs, n_graphs);
    if (!strcmp(cmd, "gc"))
        return cmd_gc(sub_argc, sub_argv, graphs, n_graphs);
    if (!strcmp(cmd, "audit"))
        return cmd_audit(sub_argc, sub_argv);
    if (!strcmp(cmd, "stats"))
        return cmd_stats(sub_argc, sub_argv);
    for (size_t i = 0; i < n_extra_cmds; i++)
        if (!strcmp(cmd, extra_cmds[i].name))
            return extra_cmds[i].fn(sub_argc, sub_argv);
    fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
    usage(stderr, prog);
    return EX_USAGE_;
}
