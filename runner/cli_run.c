/* runner/cli_run.c - the task commands that change the store: run, retry, resolve, invalidate,
 * gc and init.
 *
 * `run` checks all it can before the store exists (graph, message ID, input, task ID, tenant
 * field: run_precheck), so a refused run creates no store, and with --json prints one document
 * whatever happened. `retry` learns each retried task's outcome through the runner's retry report
 * and sorts the failures into "try later" (75) and "waiting will not help" (69), so a cron job can
 * tell an outage from a task that needs an operator. Options, help, the session and the exit-code
 * table are shared with the read-only commands (runner/cli.c, runner/cli_util.c).
 *
 * The runner's messages say what happened and nothing of the CLI (a program embedding the runner
 * has no `cairn resolve` to offer); the command that gets a task going again is added here, from
 * the error code (with_hint), wherever a runner's message is shown: run, retry, invalidate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "common/taskid.h"
#include "runner/cli.h"
#include "runner/internal.h"

int cairn__cli_tenant_usage(const char *cmd, const char *help, const cairn__cli_opts *o)
{
    if (o->tenant_field && !o->max_per_tenant)
        return cairn__cli_usage_error(cmd, help, "--tenant-field needs --max-running-per-tenant N");
    if (o->max_per_tenant && !o->tenant_field)
        return cairn__cli_usage_error(cmd, help, "--max-running-per-tenant needs --tenant-field F");
    return 0;
}

/* Appends to `msg` (a runner's message about task `id`, in a buffer of `size`) the command that
 * settles what error `rc` reports, as `cmd` printed it: an effect in doubt is settled with
 * `cairn resolve` (the step in doubt is read from the store), a graph change is accepted with
 * --allow-graph-change. Other codes have no command to add. */
static void with_hint(char *msg, size_t size, const char *cmd, int rc, cairn_store *store,
                      const char *id)
{
    size_t l = strlen(msg);
    if (l >= size - 1 || !id || !id[0])
        return;
    if (rc == CAIRN_EINDOUBT) {
        cairn_task *t = NULL;
        if (store && cairn_task_load(store, id, &t) == 0)
            snprintf(msg + l, size - l,
                     "; settle it with `cairn resolve %s --step %s --done|--not-done`", id,
                     cairn_task_error_step(t));
        cairn_task_free(t);
    } else if (rc == CAIRN_EGRAPHCHANGED) {
        snprintf(msg + l, size - l, "; rerun with --allow-graph-change to %s",
                 strcmp(cmd, "invalidate") ? "redo from it" : "accept that");
    }
}

/* ------------------------------------------------------------------ run */

static const char run_help[] =
    "usage: %P run --graph G [--task ID | --task-from F1,F2] [--input FILE|-]\n"
    "         [--message-id ID] [--json] [--store DIR]\n"
    "         [--tenant-field F --max-running-per-tenant N] [--allow-graph-change]\n"
    "         [--max-attempts N] [--lease-ms MS] [--inline-wait-ms MS]\n"
    "         [--nosync] [--map-max BYTES]\n"
    "Runs one task to completion, resuming after its last committed step. Without --input\n"
    "the input is read from standard input, except for a --task the store already has when\n"
    "standard input is a terminal, closed or empty: that one resumes with the input stored\n"
    "when it was created (input that is given is compared with it: 76 if it differs).\n"
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

json_t *cairn__cli_run_doc(json_t *j, cairn_store *store, const char *id, int rc, const char *msg)
{
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
    return j;
}

/* The one JSON document `run --json` prints, whatever happened. */
static void run_json(cairn_store *store, const char *id, int rc, const char *msg)
{
    cairn__cli_print_json(cairn__cli_run_doc(json_object(), store, id, rc, msg));
}

int cairn__cli_run_input(cairn__cli_session *s, const char *graph, const char *task,
                         const char *task_from, const char *buf, size_t len, const char *message_id,
                         char *id, size_t idlen, char *msg, size_t msglen)
{
    id[0] = 0;
    int rc = cairn_runner_run(s->runner, graph, task, task_from, buf, len, message_id, id, idlen);
    snprintf(msg, msglen, "%s", cairn_runner_errmsg(s->runner));
    with_hint(msg, msglen, "run", rc, s->store, id);
    cairn_task *t = NULL;
    if (rc == 0 && id[0] && cairn_task_load(s->store, id, &t) == 0 &&
        cairn_task_state(t) != CAIRN_SUCCEEDED) {
        /* only a consumed message returns 0 for a task that did not succeed: exit 0 means "this
         * message needs nothing more", so say what became of its task */
        size_t l = strlen(msg);
        snprintf(msg + l, msglen - l, "; that task is %s (see `%s show %s`)",
                 cairn_state_name(cairn_task_state(t)), cairn__cli_prog, id);
    }
    cairn_task_free(t);
    return rc;
}

/* Everything `run` can refuse without the store: the graph, the message ID, the input and the
 * task ID (checked again by the runner; checking here means a refused run creates no store).
 * Returns 0 or an error code with err set; *buf holds the input on success. */
static int run_precheck(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n, char **buf,
                        size_t *len, char *err, size_t errlen)
{
    int rc = cairn__cli_check_graph(graphs, n, o->graph, err, errlen);
    if (rc)
        return rc;
    if (o->message_id && (!*o->message_id || strlen(o->message_id) > CAIRN__ID_MAX)) {
        snprintf(err, errlen, "--message-id must be 1-%d bytes", CAIRN__ID_MAX);
        return CAIRN_EINVAL;
    }
    const char *path = o->input ? o->input : "-";
    if (!*buf && (rc = cairn__read_input(path, buf, len, err, errlen))) /* else read already */
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

/* Without --input, for a task the store has: whether standard input gives an input. A
 * terminal, a closed descriptor, or a stream that ends with nothing but JSON whitespace give
 * none (a cron line or `</dev/null`); anything else is an input given, read into *buf, which
 * the run compares with the stored one like a --input would (76 if they differ): input that is
 * given is never silently ignored. 1 if given, 0 if not, else an error code with err set. */
static int stdin_given(char **buf, size_t *len, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(STDIN_FILENO, &st) != 0 || isatty(STDIN_FILENO))
        return 0;
    int rc = cairn__read_input("-", buf, len, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < *len; i++)
        if (!strchr(" \t\r\n", (*buf)[i]) || !(*buf)[i])
            return 1;
    free(*buf);
    *buf = NULL;
    *len = 0;
    return 0;
}

/* `run --task ID` on a task the store has, without --input: its stored input is used. */
static int run_stored(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    cairn__cli_session s;
    int rc = cairn__cli_session_open(&s, "run", o, graphs, n, 1, 1);
    if (rc) {
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    char err[1024];
    cairn_task *t = NULL;
    if (cairn_task_load(s.store, o->task, &t) == 0 && strcmp(cairn_task_graph(t), o->graph) != 0) {
        snprintf(err, sizeof err, "task '%s' belongs to graph '%s', not '%s'", o->task,
                 cairn_task_graph(t), o->graph);
        rc = CAIRN_EINVAL;
    }
    cairn_task_free(t);
    if (!rc)
        rc = cairn_runner_resume(s.runner, o->task);
    char msg[1200];
    snprintf(msg, sizeof msg, "%s", rc == CAIRN_EINVAL ? err : cairn_runner_errmsg(s.runner));
    with_hint(msg, sizeof msg, "run", rc, s.store, o->task);
    if (o->json)
        run_json(s.store, o->task, rc, msg);
    if (rc)
        cairn__log(CAIRN__LOG_ERROR, "run", "task_error", o->task, NULL, "%s (%s)", msg,
                   cairn_errname(rc));
    else if (!o->json)
        printf("%s: %s\n", o->task, *msg ? msg : "succeeded");
    cairn__cli_session_close(&s);
    return cairn__exit_code(rc);
}

static int run_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    int rc;
    if (!o->graph)
        return cairn__cli_usage_error("run", run_help, "--graph G is required");
    if (o->task && o->task_from)
        return cairn__cli_usage_error("run", run_help, "--task and --task-from exclude each other");
    if ((rc = cairn__cli_tenant_usage("run", run_help, o)))
        return rc;
    char *buf = NULL;
    size_t len = 0;
    char err[1024];
    if ((rc = cairn__cli_preflight(o->graph, err, sizeof err))) { /* before any task is admitted */
        if (o->json)
            run_json(NULL, o->task ? o->task : "", rc, err);
        return cairn__cli_fail("run", rc, err);
    }
    if (!o->input && o->task && cairn__cli_store_exists(o->store, err, sizeof err) == 0) {
        /* `run --task ID` without --input, for a task the store already has: resume it with the
         * input stored at its creation (a cron line need not keep the input file around). */
        int known = 0;
        cairn__cli_session s;
        if ((rc = cairn__cli_session_open(&s, "run", o, graphs, n, 1, 0)) == 0) {
            cairn_task *t = NULL;
            known = cairn_task_load(s.store, o->task, &t) == 0;
            cairn_task_free(t);
        }
        cairn__cli_session_close(&s);
        if (known && (rc = stdin_given(&buf, &len, err, sizeof err)) < 0) {
            if (o->json)
                run_json(NULL, o->task, rc, err);
            return cairn__cli_fail("run", rc, err);
        }
        if (known && rc == 0)
            return run_stored(o, graphs, n);
    }
    if ((rc = run_precheck(o, graphs, n, &buf, &len, err, sizeof err))) {
        if (o->json)
            run_json(NULL, o->task ? o->task : "", rc, err);
        return cairn__cli_fail("run", rc, err);
    }
    cairn__cli_session s;
    rc = cairn__cli_session_open(&s, "run", o, graphs, n, 0, 1);
    if (rc) {
        free(buf);
        if (o->json)
            run_json(NULL, o->task ? o->task : "", rc,
                     s.runner ? cairn_runner_errmsg(s.runner) : cairn_store_errmsg(s.store));
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    char id[CAIRN_TASK_ID_MAX + 1], msg[1200];
    rc = cairn__cli_run_input(&s, o->graph, o->task, o->task_from, buf, len, o->message_id, id,
                              sizeof id, msg, sizeof msg);
    free(buf);
    if (o->json)
        run_json(s.store, id, rc, msg);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, "run", "task_error", id, NULL, "%s (%s)", msg,
                   cairn_errname(rc));
    } else if (!o->json) {
        if (*msg)
            printf("%s: %s\n", id, msg);
        else
            printf("%s: succeeded\n", id);
    }
    cairn__cli_session_close(&s);
    return cairn__exit_code(rc);
}

static const int run_allowed[] = {
    CAIRN__O_GRAPH,        CAIRN__O_TASK,           CAIRN__O_TASK_FROM,
    CAIRN__O_INPUT,        CAIRN__O_MESSAGE_ID,     CAIRN__O_JSON,
    CAIRN__O_TENANT_FIELD, CAIRN__O_MAX_PER_TENANT, CAIRN__O_ALLOW_GRAPH_CHANGE,
    CAIRN__O_MAX_ATTEMPTS, CAIRN__O_LEASE_MS,       CAIRN__O_INLINE_WAIT,
    CAIRN__O_NOSYNC,       CAIRN__O_MAP_MAX,        0};
const cairn__cli_task cairn__task_run = {"run", run_help, run_allowed, 0, 1, run_main};

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
    "or this program does not define its graph; 64 usage or unknown graph; 74 store error\n"
    "(also when a due task's record cannot be read).\n";

/* What `retry` learns about each task it took up (cairn_runner_set_retry_report). */
typedef struct retry_seen {
    json_t *tasks;
    uint32_t deferred, later, operator_, store;
    cairn_store *st; /* the session's, for with_hint */
    cairn__progress progress;
} retry_seen;

static void retry_report(const char *task_id, int rc, const char *message, void *user)
{
    retry_seen *r = user;
    char msg[1200];
    snprintf(msg, sizeof msg, "%s", message ? message : "");
    with_hint(msg, sizeof msg, "retry", rc, r->st, task_id);
    message = msg;
    json_array_append_new(r->tasks, json_pack("{s:s, s:i, s:o, s:s}", "task", task_id, "exit",
                                              cairn__exit_code(rc), "error",
                                              rc ? json_string(cairn_errname(rc)) : json_null(),
                                              "message", message));
    if (rc == 0)
        r->progress.done++;
    else if (rc == CAIRN_EINDOUBT)
        r->progress.in_doubt++;
    else if (rc != CAIRN_EBUSY && rc != CAIRN_ETENANT)
        r->progress.failed++;
    cairn__progress_tick(&r->progress, 0);
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
        r->store++; /* a record that cannot be read, or retry stops at a store error */
        break;
    default:
        r->operator_++; /* dead, in doubt, graph changed, graph unknown: waiting will not help */
        break;
    }
    cairn__log(CAIRN__LOG_ERROR, "retry", "task_error", task_id, NULL, "%s: %s (%s)", task_id,
               *message ? message : cairn_strerror(rc), cairn_errname(rc));
}

static int copy_stats(const cairn_stats *st, void *user)
{
    *(cairn_stats *)user = *st;
    return 0;
}

static int retry_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    int rc;
    if ((rc = cairn__cli_tenant_usage("retry", retry_help, o)) ||
        (rc = cairn__cli_need_config("retry", n)))
        return rc;
    char err[1024];
    if ((o->graph && (rc = cairn__cli_check_graph(graphs, n, o->graph, err, sizeof err))) ||
        (rc = cairn__cli_preflight(o->graph, err, sizeof err)))
        return cairn__cli_fail("retry", rc, err);
    cairn__cli_session s;
    retry_seen seen = {.tasks = json_array()};
    if ((rc = cairn__cli_session_open_reporting(&s, "retry", o, graphs, n, retry_report, &seen))) {
        json_decref(seen.tasks);
        cairn__cli_session_close(&s);
        return cairn__exit_code(rc);
    }
    seen.st = s.store;
    cairn__progress_start(&seen.progress, "retry", NULL);
    if (seen.progress.on) { /* the total, for the ETA: what is due now, about */
        cairn_stats st;
        if (cairn_store_stats(s.store, copy_stats, &st) == 0) {
            uint64_t due =
                st.by_state[CAIRN_PENDING] + (o->now ? st.by_state[CAIRN_FAILED] : st.retry_due);
            seen.progress.total = o->limit && o->limit < due ? o->limit : due;
        }
        cairn__progress_tick(&seen.progress, 1);
    }
    uint32_t ran = 0, ok = 0, bad = 0;
    rc = cairn_runner_retry(s.runner, o->graph, o->limit, o->now, &ran, &ok, &bad);
    cairn__progress_end(&seen.progress);
    if (o->json) {
        cairn__cli_print_json(json_pack("{s:i, s:i, s:i, s:i, s:o}", "ran", (int)ran, "succeeded",
                                        (int)ok, "failed", (int)bad, "deferred", (int)seen.deferred,
                                        "tasks", seen.tasks));
    } else {
        printf("retry: ran %u, succeeded %u, not succeeded %u", ran, ok, bad);
        if (seen.deferred)
            printf(", deferred %u (running elsewhere or over the tenant limit)", seen.deferred);
        printf("\n");
        json_decref(seen.tasks);
    }
    int x = bad ? CAIRN__EX_TEMPFAIL : 0;
    if (rc)
        x = cairn__cli_fail("retry", rc,
                            cairn_runner_errmsg(s.runner)); /* 74, or 75 when interrupted */
    if (!rc && seen.store)
        x = CAIRN__EX_IOERR; /* a due task's record cannot be read: a store problem */
    if ((!rc || rc == CAIRN_EINTR) && !seen.store && seen.operator_) {
        cairn__log(CAIRN__LOG_ERROR, "retry", "needs_operator", NULL, NULL,
                   "%u task(s) need an operator or a change (dead, in doubt, graph changed or "
                   "not defined; see above): waiting will not help",
                   seen.operator_);
        x = CAIRN__EX_UNAVAILABLE;
    }
    cairn__cli_session_close(&s);
    return x;
}

static const int retry_allowed[] = {CAIRN__O_GRAPH,
                                    CAIRN__O_LIMIT,
                                    CAIRN__O_NOW,
                                    CAIRN__O_JSON,
                                    CAIRN__O_MAX_ATTEMPTS,
                                    CAIRN__O_TENANT_FIELD,
                                    CAIRN__O_LEASE_MS,
                                    CAIRN__O_INLINE_WAIT,
                                    CAIRN__O_NOSYNC,
                                    CAIRN__O_MAP_MAX,
                                    CAIRN__O_ALLOW_GRAPH_CHANGE,
                                    CAIRN__O_MAX_PER_TENANT,
                                    0};
const cairn__cli_task cairn__task_retry = {"retry", retry_help, retry_allowed, 0, 1, retry_main};

/* ------------------------------------------------------------------ resolve, invalidate, gc */

static const char resolve_help[] =
    "usage: %P resolve ID --step S (--done | --not-done) [--store DIR]\n"
    "Settles an effect in doubt: --done records that it happened (the task continues after it),\n"
    "--not-done lets the next run perform it. The task becomes pending; run or retry it.\n";

static int resolve_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    int rc;
    if (!o->step)
        return cairn__cli_usage_error("resolve", resolve_help, "--step S is required");
    if (o->done == o->not_done)
        return cairn__cli_usage_error("resolve", resolve_help, "say either --done or --not-done");
    cairn__cli_session s;
    if ((rc = cairn__cli_session_open(&s, "resolve", o, graphs, n, 1, 1)) == 0) {
        rc = cairn_runner_resolve(s.runner, o->id, o->step, o->done);
        if (rc)
            rc = cairn__cli_fail("resolve", rc, cairn_runner_errmsg(s.runner));
        else
            printf("%s: step '%s' resolved as %s; task is pending\n", o->id, o->step,
                   o->done ? "done" : "not done");
    } else
        rc = cairn__exit_code(rc);
    cairn__cli_session_close(&s);
    return rc;
}

static const int resolve_allowed[] = {CAIRN__O_STEP, CAIRN__O_DONE, CAIRN__O_NOT_DONE, 0};
const cairn__cli_task cairn__task_resolve = {"resolve", resolve_help, resolve_allowed, 1,
                                             0,         resolve_main};

static const char invalidate_help[] =
    "usage: %P invalidate ID [--from STEP] [--allow-graph-change] [--store DIR]\n"
    "Starts a new generation of the task from STEP (default: the first) onward; older outputs\n"
    "and the audit trail stay. Effects after that point will run again. A task started by\n"
    "another version of its graph is refused (65) unless --allow-graph-change.\n";

static int invalidate_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    int rc;
    if ((rc = cairn__cli_need_config("invalidate", n)))
        return rc;
    cairn__cli_session s;
    if ((rc = cairn__cli_session_open(&s, "invalidate", o, graphs, n, 1, 1)) == 0) {
        rc = cairn_runner_invalidate(s.runner, o->id, o->from);
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", cairn_runner_errmsg(s.runner));
        with_hint(msg, sizeof msg, "invalidate", rc, s.store, o->id);
        if (rc)
            rc = cairn__cli_fail("invalidate", rc, msg);
        else
            printf("%s: invalidated%s%s; task is pending\n", o->id, o->from ? " from " : "",
                   o->from ? o->from : "");
    } else
        rc = cairn__exit_code(rc);
    cairn__cli_session_close(&s);
    return rc;
}

static const int invalidate_allowed[] = {CAIRN__O_FROM, CAIRN__O_ALLOW_GRAPH_CHANGE, 0};
const cairn__cli_task cairn__task_invalidate = {
    "invalidate", invalidate_help, invalidate_allowed, 1, 1, invalidate_main};

static const char gc_help[] =
    "usage: %P gc [--retention-days D] [--tombstone-days D] [--json] [--store DIR]\n"
    "Drops outputs of tasks finished more than D days ago (default 7), keeping a tombstone so\n"
    "a duplicate still does not run, and removes tombstones older than the dedupe window\n"
    "(default 30 days; never shorter than the retention).\n";

static int gc_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    int rc;
    if (o->tombstone_days < o->retention_days)
        return cairn__cli_usage_error(
            "gc", gc_help,
            "--tombstone-days (%g) is shorter than --retention-days (%g): a "
            "tombstone must outlive the outputs",
            o->tombstone_days, o->retention_days);
    cairn__cli_session s;
    uint32_t pruned = 0, removed = 0;
    if ((rc = cairn__cli_session_open(&s, "gc", o, graphs, n, 1, 1)) == 0) {
        rc = cairn_runner_gc(s.runner, &pruned, &removed);
        if (rc)
            rc = cairn__cli_fail("gc", rc, cairn_runner_errmsg(s.runner));
        else if (o->json)
            cairn__cli_print_json(
                json_pack("{s:i, s:i}", "pruned", (int)pruned, "removed", (int)removed));
        else
            printf("gc: %u task(s) pruned to tombstones, %u tombstone(s) removed\n", pruned,
                   removed);
    } else
        rc = cairn__exit_code(rc);
    cairn__cli_session_close(&s);
    return rc;
}

static const int gc_allowed[] = {CAIRN__O_RETENTION, CAIRN__O_TOMBSTONE, CAIRN__O_JSON, 0};
const cairn__cli_task cairn__task_gc = {"gc", gc_help, gc_allowed, 0, 0, gc_main};

/* ------------------------------------------------------------------ init */

static const char init_help[] =
    "usage: %P init [--nosync] [--store DIR]\n"
    "Creates an empty store (what `run` does on its first task), for tools that read the store\n"
    "before any task ran, or to fix a new store's durability ahead of the workers (--nosync:\n"
    "survives process crashes only). An existing store is left as it is.\n";

static int init_main(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n)
{
    (void)graphs;
    (void)n;
    int rc;
    char err[4200];
    int existed = cairn__cli_store_exists(o->store, err, sizeof err) == 0;
    cairn__cli_session s;
    rc = cairn__cli_session_open(&s, "init", o, NULL, 0, 0, 0);
    if (!rc)
        printf("%s: %s\n", o->store, existed ? "store exists (unchanged)" : "store created");
    cairn__cli_session_close(&s);
    return cairn__exit_code(rc);
}

static const int init_allowed[] = {CAIRN__O_NOSYNC, 0};
const cairn__cli_task cairn__task_init = {"init", init_help, init_allowed, 0, 0, init_main};
