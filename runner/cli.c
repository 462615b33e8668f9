/* runner/cli.c - the `cairn` command line, for any set of graphs (cairn_cli_main).
 *
 * Each command parses its options, opens the store and a runner, makes one library call and
 * maps the result to a sysexits exit code through one table (exit_code below). Messages for
 * people go to stderr; --json output for scripts goes to stdout, one JSON document per call.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner/canon.h"
#include "runner/cli.h"
#include "runner/internal.h"

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
    uint32_t max_per_tenant, limit, max_attempts, lease_ms;
    uint64_t map_max;
    double retention_days, tombstone_days;
    int json, now, done, not_done, allow_graph_change, nosync, help;
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
    /* no "+": options may follow the operand (`show ID --json`, as the help texts show) */
    while ((c = getopt_long(argc, argv, "", all_options, NULL)) != -1) {
        int ok = c == O_HELP || c == O_STORE;
        for (const int *a = allowed; *a && !ok; a++)
            ok = *a == c;
        if (c == '?' || c == ':' || !ok) {
            fprintf(stderr, "cairn %s: unknown or misplaced option '%s' (see cairn %s --help)\n",
                    cmd, argv[optind - 1], cmd);
            return EX_USAGE_;
        }
        int bad = 0;
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
            bad = parse_u32(optarg, &o->max_per_tenant);
            break;
        case O_LIMIT:
            bad = parse_u32(optarg, &o->limit);
            break;
        case O_MAX_ATTEMPTS:
            bad = parse_u32(optarg, &o->max_attempts) || !o->max_attempts;
            break;
        case O_LEASE_MS:
            bad = parse_u32(optarg, &o->lease_ms) || o->lease_ms < 100;
            break;
        case O_MAP_MAX:
            bad = parse_u64(optarg, &u);
            o->map_max = u;
            break;
        case O_RETENTION:
            bad = parse_days(optarg, &o->retention_days);
            break;
        case O_TOMBSTONE:
            bad = parse_days(optarg, &o->tombstone_days);
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
            fprintf(stderr, "cairn %s: invalid value '%s' for %s\n", cmd, optarg, argv[optind - 1]);
            return EX_USAGE_;
        }
    }
    *optind_out = optind;
    if (!o->help && (!o->store || !*o->store)) {
        fprintf(stderr, "cairn %s: no store: pass --store DIR or set CAIRN_STORE\n", cmd);
        return EX_USAGE_;
    }
    return 0;
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

static int session_open(session *s, const opts *o, cairn_graph *const *graphs, size_t n_graphs,
                        int need_runner)
{
    memset(s, 0, sizeof *s);
    s->store = cairn_store_new();
    if (!s->store)
        return CAIRN_ENOMEM;
    if (o->nosync)
        cairn_store_set_durability(s->store, CAIRN_NOSYNC);
    if (o->map_max)
        cairn_store_set_map_max(s->store, o->map_max);
    int rc = cairn_store_open(s->store, o->store);
    if (rc) {
        fprintf(stderr, "cairn: %s\n", cairn_store_errmsg(s->store));
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
            fprintf(stderr, "cairn: %s\n", cairn_runner_errmsg(s->runner));
            return rc;
        }
    }
    if (o->max_attempts)
        cairn_runner_set_max_attempts(s->runner, o->max_attempts);
    if (o->lease_ms)
        cairn_runner_set_lease_ms(s->runner, o->lease_ms);
    if (o->tenant_field)
        cairn_runner_set_tenant_limit(s->runner, o->tenant_field, o->max_per_tenant);
    cairn_runner_set_allow_graph_change(s->runner, o->allow_graph_change);
    cairn_runner_set_retention(s->runner, (uint64_t)(o->retention_days * 86400),
                               (uint64_t)(o->tombstone_days * 86400));
    if ((rc = cairn_runner_open(s->runner)))
        return rc;
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
    fprintf(stderr, "cairn %s: %s (%s)\n", cmd, msg && *msg ? msg : cairn_strerror(rc),
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
    "usage: cairn run --graph G [--task ID | --task-from F1,F2] [--input FILE|-]\n"
    "                 [--message-id ID] [--json] [--store DIR]\n"
    "                 [--tenant-field F --max-running-per-tenant N] [--allow-graph-change]\n"
    "                 [--max-attempts N] [--lease-ms MS] [--nosync] [--map-max BYTES]\n"
    "Runs one task to completion, resuming after its last committed step.\n"
    "Without --task the ID is derived: from the named input fields joined with '_', or\n"
    "<graph>_<first 16 hex of SHA-256 of the RFC 8785 canonical input>.\n"
    "--nosync creates a new store that survives process crashes only (faster); a store\n"
    "keeps the durability it was created with.\n"
    "Exit: 0 succeeded (now or earlier), 64 usage, 65 invalid input, 66 input missing,\n"
    "69 dead or in doubt, 74 store error, 75 try later, 76 same ID with another payload.\n";

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

static int cmd_run(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_GRAPH,
                                  O_TASK,
                                  O_TASK_FROM,
                                  O_INPUT,
                                  O_MESSAGE_ID,
                                  O_JSON,
                                  O_TENANT_FIELD,
                                  O_MAX_PER_TENANT,
                                  O_ALLOW_GRAPH_CHANGE,
                                  O_MAX_ATTEMPTS,
                                  O_LEASE_MS,
                                  O_NOSYNC,
                                  O_MAP_MAX,
                                  0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "run", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        fputs(run_help, stdout);
        return 0;
    }
    if (!o.graph || oi != argc || (o.task && o.task_from) ||
        (o.tenant_field && !o.max_per_tenant)) {
        fputs(run_help, stderr);
        return EX_USAGE_;
    }
    const char *path = o.input ? o.input : "-";
    char *buf = NULL;
    size_t len = 0;
    char err[1024];
    rc = cairn__read_input(path, &buf, &len, err, sizeof err);
    if (!rc) {
        /* validate here to name the file in errors (line and column) */
        json_t *j = NULL;
        rc = cairn__json_parse(buf, len, strcmp(path, "-") ? path : "<stdin>", &j, err, sizeof err);
        if (!rc && !json_is_object(j)) {
            snprintf(err, sizeof err, "%s: the task input must be a JSON object", path);
            rc = CAIRN_EJSON;
        }
        json_decref(j);
    }
    if (!rc && o.task && (rc = cairn__task_id_check(o.task, err, sizeof err)) == 0)
        err[0] = 0;
    if (rc) {
        free(buf);
        if (o.json)
            run_json(NULL, o.task ? o.task : "", rc, err);
        return fail("run", rc, err);
    }
    session s;
    rc = session_open(&s, &o, graphs, n, 1);
    if (rc) {
        free(buf);
        if (o.json)
            run_json(NULL, o.task ? o.task : "", rc, cairn_store_errmsg(s.store));
        session_close(&s);
        return cairn__exit_code(rc);
    }
    char id[CAIRN__ID_MAX + 1] = "";
    rc = cairn_runner_run(s.runner, o.graph, o.task, o.task_from, buf, len, o.message_id, id);
    free(buf);
    const char *msg = cairn_runner_errmsg(s.runner);
    if (o.json)
        run_json(s.store, id, rc, msg);
    if (rc) {
        fprintf(stderr, "cairn run: %s (%s)\n", msg, cairn_errname(rc));
    } else if (!o.json) {
        if (msg && *msg)
            printf("%s: %s\n", id, msg);
        else
            printf("%s: succeeded\n", id);
    }
    session_close(&s);
    return cairn__exit_code(rc);
}

/* ------------------------------------------------------------------ show */

static const char show_help[] =
    "usage: cairn show ID [--json] [--store DIR]\n"
    "Shows a task: status, attempt, payload hash, and each step with its output.\n";

static int cmd_show(int argc, char **argv)
{
    static const int allowed[] = {O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "show", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        fputs(show_help, stdout);
        return 0;
    }
    if (oi != argc - 1) {
        fputs(show_help, stderr);
        return EX_USAGE_;
    }
    session s;
    if ((rc = session_open(&s, &o, NULL, 0, 0))) {
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
    json_t *rows;
} list_arg;

static int list_cb(const char *id, void *arg)
{
    list_arg *a = arg;
    cairn__task_rec r;
    if (a->limit && a->n >= a->limit)
        return 1;
    if (cairn__task_get(a->t, id, &r) != 0)
        return 0;
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
    int rc = 0;
    for (int s = 0; s < CAIRN_STATE_COUNT && !rc; s++)
        if (!only || *only == (cairn_state)s)
            rc = cairn__due_each(t, (cairn_state)s, INT64_MAX, list_cb, a);
    return rc;
}

static const char list_help[] =
    "usage: cairn list [--status S] [--graph G] [--limit N] [--json] [--store DIR]\n"
    "Lists tasks, by status (pending, running, succeeded, failed, dead, in_doubt).\n";

static int cmd_list(int argc, char **argv)
{
    static const int allowed[] = {O_STATUS, O_GRAPH, O_LIMIT, O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "list", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        fputs(list_help, stdout);
        return 0;
    }
    cairn_state st;
    if (oi != argc || (o.status && cairn_state_parse(o.status, &st))) {
        if (o.status)
            fprintf(stderr, "cairn list: unknown status '%s'\n", o.status);
        fputs(list_help, stderr);
        return EX_USAGE_;
    }
    session s;
    if ((rc = session_open(&s, &o, NULL, 0, 0))) {
        session_close(&s);
        return cairn__exit_code(rc);
    }
    list_arg a = {.graph = o.graph, .limit = o.limit, .rows = json_array()};
    void *p[2] = {&a, o.status ? &st : NULL};
    rc = cairn__store_read(s.store, list_txn, p);
    if (rc) {
        json_decref(a.rows);
        int x = fail("list", rc, cairn_store_errmsg(s.store));
        session_close(&s);
        return x;
    }
    if (o.json)
        print_json(a.rows);
    else {
        cairn__print_list_table(a.rows);
        json_decref(a.rows);
    }
    session_close(&s);
    return 0;
}

/* ------------------------------------------------------------------ retry */

static const char retry_help[] =
    "usage: cairn retry [--graph G] [--limit N] [--now] [--json] [--store DIR]\n"
    "                   [--max-attempts N] [--lease-ms MS]\n"
    "Runs the due tasks: failed ones whose retry time has come (all failed ones with --now),\n"
    "pending ones, and running ones whose process is gone. Overlapping retries never run one\n"
    "task twice. Exit: 0 all ran tasks succeeded, 75 some did not, 74 store error.\n";

static int cmd_retry(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_GRAPH,    O_LIMIT,  O_NOW,     O_JSON, O_MAX_ATTEMPTS,
                                  O_LEASE_MS, O_NOSYNC, O_MAP_MAX, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "retry", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        fputs(retry_help, stdout);
        return 0;
    }
    if (oi != argc) {
        fputs(retry_help, stderr);
        return EX_USAGE_;
    }
    session s;
    if ((rc = session_open(&s, &o, graphs, n, 1))) {
        session_close(&s);
        return cairn__exit_code(rc);
    }
    uint32_t ran = 0, ok = 0, bad = 0;
    rc = cairn_runner_retry(s.runner, o.graph, o.limit, o.now, &ran, &ok, &bad);
    if (o.json) {
        json_t *j =
            json_pack("{s:i, s:i, s:i}", "ran", (int)ran, "succeeded", (int)ok, "failed", (int)bad);
        print_json(j);
    } else
        printf("retry: ran %u, succeeded %u, not succeeded %u\n", ran, ok, bad);
    int x = rc ? fail("retry", rc, cairn_runner_errmsg(s.runner)) : bad ? EX_TEMPFAIL_ : 0;
    session_close(&s);
    return x;
}

/* ------------------------------------------------------------------ resolve, invalidate, gc */

static const char resolve_help[] =
    "usage: cairn resolve ID --step S (--done | --not-done) [--store DIR]\n"
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
        fputs(resolve_help, stdout);
        return 0;
    }
    if (oi != argc - 1 || !o.step || o.done == o.not_done) {
        fputs(resolve_help, stderr);
        return EX_USAGE_;
    }
    session s;
    if ((rc = session_open(&s, &o, graphs, n, 1)) == 0)
        rc = cairn_runner_resolve(s.runner, argv[oi], o.step, o.done);
    int x = rc ? fail("resolve", rc, s.runner ? cairn_runner_errmsg(s.runner) : NULL) : 0;
    if (!rc)
        printf("%s: step '%s' resolved as %s; task is pending\n", argv[oi], o.step,
               o.done ? "done" : "not done");
    session_close(&s);
    return x;
}

static const char invalidate_help[] =
    "usage: cairn invalidate ID [--from STEP] [--store DIR]\n"
    "Starts a new generation of the task from STEP (default: the first) onward; older outputs\n"
    "and the audit trail stay. Effects after that point will run again.\n";

static int cmd_invalidate(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_FROM, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "invalidate", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        fputs(invalidate_help, stdout);
        return 0;
    }
    if (oi != argc - 1) {
        fputs(invalidate_help, stderr);
        return EX_USAGE_;
    }
    session s;
    if ((rc = session_open(&s, &o, graphs, n, 1)) == 0)
        rc = cairn_runner_invalidate(s.runner, argv[oi], o.from);
    int x = rc ? fail("invalidate", rc, s.runner ? cairn_runner_errmsg(s.runner) : NULL) : 0;
    if (!rc)
        printf("%s: invalidated%s%s; task is pending\n", argv[oi], o.from ? " from " : "",
               o.from ? o.from : "");
    session_close(&s);
    return x;
}

static const char gc_help[] =
    "usage: cairn gc [--retention-days D] [--tombstone-days D] [--json] [--store DIR]\n"
    "Drops outputs of tasks finished more than D days ago (default 7), keeping a tombstone so\n"
    "a duplicate still does not run, and removes tombstones older than the dedupe window\n"
    "(default 30 days).\n";

static int cmd_gc(int argc, char **argv, cairn_graph *const *graphs, size_t n)
{
    static const int allowed[] = {O_RETENTION, O_TOMBSTONE, O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "gc", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        fputs(gc_help, stdout);
        return 0;
    }
    if (oi != argc || o.tombstone_days < o.retention_days) {
        fputs(gc_help, stderr);
        return EX_USAGE_;
    }
    session s;
    uint32_t pruned = 0, removed = 0;
    if ((rc = session_open(&s, &o, graphs, n, 1)) == 0)
        rc = cairn_runner_gc(s.runner, &pruned, &removed);
    int x = rc ? fail("gc", rc, s.runner ? cairn_runner_errmsg(s.runner) : NULL) : 0;
    if (!rc && o.json)
        print_json(json_pack("{s:i, s:i}", "pruned", (int)pruned, "removed", (int)removed));
    else if (!rc)
        printf("gc: %u task(s) pruned to tombstones, %u tombstone(s) removed\n", pruned, removed);
    session_close(&s);
    return x;
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

static const char audit_help[] = "usage: cairn audit ID [--json] [--store DIR]\n"
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
        fputs(audit_help, stdout);
        return 0;
    }
    if (oi != argc - 1) {
        fputs(audit_help, stderr);
        return EX_USAGE_;
    }
    session s;
    if ((rc = session_open(&s, &o, NULL, 0, 0))) {
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

static const char stats_help[] = "usage: cairn stats [--json] [--store DIR]\n"
                                 "Counts tasks by status and shows the store's size.\n";

static int cmd_stats(int argc, char **argv)
{
    static const int allowed[] = {O_JSON, 0};
    opts o;
    int oi, rc = parse_opts(argc, argv, "stats", allowed, &o, &oi);
    if (rc)
        return rc;
    if (o.help) {
        fputs(stats_help, stdout);
        return 0;
    }
    if (oi != argc) {
        fputs(stats_help, stderr);
        return EX_USAGE_;
    }
    session s;
    if ((rc = session_open(&s, &o, NULL, 0, 0))) {
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
    if (o.json)
        print_json(j);
    else {
        printf("tasks        %llu\n", (unsigned long long)total);
        for (int i = 0; i < CAIRN_STATE_COUNT; i++)
            printf("  %-10s %llu\n", cairn_state_name((cairn_state)i),
                   (unsigned long long)st.by_state[i]);
        printf("tombstones   %llu\nmessages     %llu\nstep records %llu\naudit        %llu\n"
               "store        %.1f MiB used of a %.1f MiB map\n",
               (unsigned long long)st.tombstones, (unsigned long long)st.messages,
               (unsigned long long)st.step_records, (unsigned long long)st.audit_records,
               st.map_used / 1048576.0, st.map_size / 1048576.0);
        json_decref(j);
    }
    session_close(&s);
    return 0;
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
            "  show ID    a task, its steps and outputs\n"
            "  list       tasks by status\n"
            "  retry      run due failed/pending/orphaned tasks (for cron)\n"
            "  resolve    settle an effect in doubt\n"
            "  invalidate start a new generation of a task\n"
            "  gc         drop old outputs, keep tombstones\n"
            "  audit ID   a task's transitions\n"
            "  stats      counts by status, store size\n",
            prog);
    if (n_extra_cmds)
        fprintf(f, "Other commands:\n");
    for (size_t i = 0; i < n_extra_cmds; i++)
        fprintf(f, "  %-10s %s\n", extra_cmds[i].name, extra_cmds[i].summary);
    fprintf(f, "Exit codes: 0 ok, 64 usage, 65 invalid input, 66 not found, 69 needs an operator\n"
               "(dead or in doubt), 70 internal, 74 store error, 75 try later, 76 conflict.\n");
}

int cairn_cli_main(int argc, char **argv, cairn_graph *const *graphs, size_t n_graphs)
{
    const char *prog = argc > 0 ? argv[0] : "cairn";
    const char *slash = strrchr(prog, '/');
    prog = slash ? slash + 1 : prog;
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
    if (!strcmp(cmd, "run"))
        return cmd_run(sub_argc, sub_argv, graphs, n_graphs);
    if (!strcmp(cmd, "show"))
        return cmd_show(sub_argc, sub_argv);
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
