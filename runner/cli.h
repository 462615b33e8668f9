/* runner/cli.h - what the CLI's files share (not public).
 *
 * Two audiences. Every command file, tools/'s included, uses the first part: option
 * parser, help and usage errors (runner/cli_opt.c), input files, the one exit-code table
 * (runner/cli_util.c). The task commands' own files use the second: their option table, the store
 * session (runner/cli.c), and the commands themselves (runner/cli_run.c changes tasks,
 * runner/cli_inspect.c only reads, runner/cli_consume.c runs a stream of tasks).
 */
#ifndef CAIRN_RUNNER_CLI_H
#define CAIRN_RUNNER_CLI_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cairn.h"

/* ------------------------------------------------------------------ all command files */

/* sysexits(3), as cairn__exit_code maps CAIRN_E* codes onto them (76 is cairn's own: conflict) */
enum {
    CAIRN__EX_OK = 0,
    CAIRN__EX_USAGE = 64,
    CAIRN__EX_DATAERR = 65,
    CAIRN__EX_NOINPUT = 66,
    CAIRN__EX_UNAVAILABLE = 69,
    CAIRN__EX_SOFTWARE = 70,
    CAIRN__EX_IOERR = 74,
    CAIRN__EX_TEMPFAIL = 75,
    CAIRN__EX_CONFLICT = 76
};

/* argv[0]'s basename, for messages and usage (set by cairn_cli_main) */
extern const char *cairn__cli_prog;

/* One option of a command (cairn__opt_parse, runner/cli_opt.c). A table of them ends with an
 * entry whose name is NULL; -h and --help are never listed: every command takes them. */
typedef struct cairn__opt {
    const char *name; /* the long name, without "--" */
    int shrt;         /* the short option's character, or 0 */
    int has_arg;      /* 1: takes a value */
    int repeatable;   /* 1: may be given more than once; any other option is refused the second
                         time, rather than the first value lost without a word */
    int id;           /* the command's own name for it */
    size_t at;        /* for cairn__opt_slot: where in the user's struct (offsetof) the value goes:
                         a `const char *`, or for an option without a value an `int` set to 1 */
} cairn__opt;

/* A command as its option parser sees it. */
typedef struct cairn__opt_cmd {
    const char *name;       /* "show": messages start "PROG show: " */
    const char *help;       /* the help (-h) and the usage after an error; "%P" = the program */
    int config_help;        /* the help adds the --config lines (cairn__cli_print_help) */
    int max_operands;       /* operands beyond these are refused; -1: the command checks them */
    const cairn__opt *opts; /* the options, NULL-name-ended */
} cairn__opt_cmd;

/* Called for each option in command-line order: val is its value (borrowed from argv), NULL for
 * an option without one. Returns 0, or the exit code after saying what is wrong. */
typedef int (*cairn__opt_fn)(void *user, const cairn__opt *opt, const char *val);

/* Parses argv (argv[0] being the command word) with getopt_long, options and operands in any
 * order, "--" ending the options. Returns -1 when the command is to go on (*optind_out at the
 * first operand), else the exit code for it to return: 0 after printing the help on stdout (-h,
 * --help), 64 after a usage error (unknown option, missing value, an option given twice, an
 * operand too many) said on stderr with the usage, or what fn returned. */
int cairn__opt_parse(int argc, char **argv, const cairn__opt_cmd *cmd, cairn__opt_fn fn, void *user,
                     int *optind_out);
/* A ready cairn__opt_fn for the options that need no check: user is a struct, and each option's
 * value goes where opt->at says. */
int cairn__opt_slot(void *user, const cairn__opt *opt, const char *val);
/* Help texts name the program as "%P" (cairn, cairn-ledger, ...). */
void cairn__cli_put_help(FILE *f, const char *text);
/* The help, plus (needs_graphs, for the commands that run tasks) the --config lines of the `cairn`
 * executable. */
void cairn__cli_print_help(FILE *f, const char *help, int needs_graphs);
/* A usage error: "PROG CMD: " and what is wrong on stderr, then the command's usage; returns 64. */
int cairn__cli_usage_error(const char *cmd, const char *help, const char *fmt, ...)
    CAIRN_PRINTF(3, 4);

/* Messages on stderr (runner/cli_log.c). Levels, from the most to the least important: -q shows
 * errors only, the default adds warnings and notes (what a command says it did), -v the info
 * events (steps committed, tasks finished), -vv debug. */
enum {
    CAIRN__LOG_ERROR = 0,
    CAIRN__LOG_WARN = 1,
    CAIRN__LOG_NOTE = 2,
    CAIRN__LOG_INFO = 3,
    CAIRN__LOG_DEBUG = 4
};
/* Every command's logging options, taken by cairn__opt_parse for every command without being
 * listed in its table: --log-format text|json, -q/--quiet, -v/--verbose (twice: debug),
 * --no-progress. (A command whose table has -q or -v of its own keeps it; the long forms stay.) */
#define CAIRN__LOG_OPTIONS_HELP                                                                    \
    "Every command: --log-format text|json (or CAIRN_LOG_FORMAT), -q errors only, -v more\n"       \
    "(-vv debug), --no-progress (no progress line on a terminal).\n"
/* Back to the defaults: text (json when CAIRN_LOG_FORMAT=json), notes shown, progress on. */
void cairn__log_reset(void);
/* Applies the logging option `name` (without "--"): 0, -1 with err for a bad value, 1 when
 * name is not one of them. */
int cairn__log_option(const char *name, const char *val, char *err, size_t errlen);
int cairn__log_enabled(int level);
int cairn__log_json(void);
/* Logs one message: text "PROG CMD: message", or one JSON line with time, level, prog, cmd,
 * event, task and step (NULL or "": absent) and message. cmd may be NULL ("PROG: message"). */
void cairn__log(int level, const char *cmd, const char *event, const char *task, const char *step,
                const char *fmt, ...) CAIRN_PRINTF(6, 7);
void cairn__logv(int level, const char *cmd, const char *event, const char *task, const char *step,
                 const char *fmt, va_list ap) CAIRN_PRINTF(6, 0);

/* A progress line on stderr for a person at a terminal: on only when stderr is a TTY and the
 * log is text without -q or --no-progress. The caller counts; tick redraws (at most 5 times a
 * second unless forced); end erases it. unit NULL: tasks (done, failed, in doubt); else the
 * unit of `done` ("documents", "tokens"). total 0: unknown; bytes_done/bytes_total (0: unknown)
 * give the ETA when the total is not known. */
typedef struct cairn__progress {
    const char *what, *unit;
    uint64_t done, failed, in_doubt, total;
    uint64_t bytes_done, bytes_total;
    double t0, last;
    int on;
} cairn__progress;
void cairn__progress_start(cairn__progress *p, const char *what, const char *unit);
void cairn__progress_tick(cairn__progress *p, int force);
void cairn__progress_end(cairn__progress *p);
/* The line's text at time now (monotonic seconds), for tests and tick. */
void cairn__progress_line(const cairn__progress *p, double now, char *buf, size_t n);

/* A whole decimal number from lo to hi into *out; -1 (and *out untouched) for anything else. */
int cairn__cli_parse_long(const char *s, long lo, long hi, long *out);
/* Maps a CAIRN_E* code to the documented sysexits exit code. */
int cairn__exit_code(int err);
/* The same table for the commands over the inference engine (tools/: generate, tokenize,
 * model-info): a model feature the engine does not implement (CAIRN_EUNSUPPORTED) or a CUDA
 * failure is 69, unavailable, and CAIRN_EINVAL from the engine is 70, internal. */
int cairn__exit_code_engine(int err);
/* Reads a whole file ("-" = stdin), at most CAIRN__MAX_INPUT bytes. CAIRN_ENOENT when the input
 * cannot be had at all (missing, a directory, not readable, a read error: the user's file, so
 * exit 66, never the store's 74), CAIRN_ETOOBIG, CAIRN_ENOMEM; err names the path. *buf is
 * malloc'd and NUL-terminated. */
int cairn__read_input(const char *path, char **buf, size_t *len, char *err, size_t errlen);
/* For commands that must not create a store (all but `run` and `init`): CAIRN_ENOENT with err
 * naming the path when nothing is there or the directory holds no store; 0 otherwise (including
 * paths that cairn_store_open will refuse with its own message, such as a regular file). */
int cairn__cli_store_exists(const char *dir, char *err, size_t errlen);
/* A task snapshot as a JSON object (new reference; NULL on ENOMEM). */
json_t *cairn__task_to_json(const cairn_task *t);

/* Commands beyond the task commands, registered by the executable before cairn_cli_main (the
 * `cairn` binary adds tools/'s: generate, tokenize, model-info, index, search). The table is
 * borrowed and must outlive the call. */
typedef struct cairn__cli_cmd {
    const char *name, *summary;
    int (*fn)(int argc, char **argv);
} cairn__cli_cmd;
void cairn__cli_set_extra(const cairn__cli_cmd *cmds, size_t n);

/* The `cairn` executable's built-in graph, which exists only when a configuration is given
 * (--config FILE or CAIRN_CONFIG): `graph` is its name, `configured` whether one was given. The
 * help of the commands that run tasks then names the option, and asking for that graph without
 * a configuration says so instead of "no graph named ...". `graph` is borrowed (static). */
void cairn__cli_set_config_graph(const char *graph, int configured);
/* What the executable checks before `run` or `retry` lets a task of that built-in graph start:
 * the files and the device its configuration names (check returns 0, or a CAIRN_E* code with a
 * message in err). NULL: nothing. `arg` is borrowed. */
void cairn__cli_set_preflight(int (*check)(void *arg, char *err, size_t errlen), void *arg);
/* Runs that check when `graph` is the built-in one or NULL (every graph: retry without
 * --graph), after the command's options are checked and before the store is opened, so a
 * refusal leaves the store as it was. 0, or the check's code. */
int cairn__cli_preflight(const char *graph, char *err, size_t errlen);

/* ------------------------------------------------------------------ the task commands' files */

/* Every option of the task commands; each command lists the ones it takes (cairn__cli_task). */
enum {
    /* kept as given */
    CAIRN__O_STORE = 256,
    CAIRN__O_GRAPH,
    CAIRN__O_TASK,
    CAIRN__O_TASK_FROM,
    CAIRN__O_INPUT,
    CAIRN__O_MESSAGE_ID,
    CAIRN__O_STATUS,
    CAIRN__O_STEP,
    CAIRN__O_FROM,
    CAIRN__O_TENANT_FIELD,
    CAIRN__O_JSON,
    CAIRN__O_NOW,
    CAIRN__O_DONE,
    CAIRN__O_NOT_DONE,
    CAIRN__O_ALLOW_GRAPH_CHANGE,
    CAIRN__O_NOSYNC,
    CAIRN__O_FORMAT,
    CAIRN__O_TASKS,
    CAIRN__O_LISTEN,
    CAIRN__O_TOKEN_FILE,
    CAIRN__O_PROMETHEUS,
    /* checked: numbers */
    CAIRN__O_MAX_PER_TENANT,
    CAIRN__O_LIMIT,
    CAIRN__O_MAX_ATTEMPTS,
    CAIRN__O_LEASE_MS,
    CAIRN__O_INLINE_WAIT,
    CAIRN__O_MAP_MAX,
    CAIRN__O_RETENTION,
    CAIRN__O_TOMBSTONE,
    CAIRN__O_JOBS,
    CAIRN__O_PROCESSES
};

/* The options of the commands that run tasks in workers of their own (consume, serve): how
 * their runners run them, as `run`'s do. */
#define CAIRN__O_WORKER_RUNNER                                                                     \
    CAIRN__O_TENANT_FIELD, CAIRN__O_MAX_PER_TENANT, CAIRN__O_MAX_ATTEMPTS, CAIRN__O_LEASE_MS,      \
        CAIRN__O_INLINE_WAIT, CAIRN__O_NOSYNC, CAIRN__O_MAP_MAX, CAIRN__O_ALLOW_GRAPH_CHANGE

/* consume --jobs: at most this many tasks at once (its help and its check say 256); also the
 * most worker processes (--processes) and runners a process has */
#define CAIRN__JOBS_MAX 256

/* The options' values after parsing: unset ones are 0/NULL, except the defaults noted. */
typedef struct cairn__cli_opts {
    const char *store, *graph, *task, *task_from, *input, *message_id, *status, *step, *from;
    const char *tenant_field, *format, *listen, *token_file;
    const char *id; /* the operand of the commands that take a task ID */
    uint32_t max_per_tenant, limit, max_attempts, lease_ms, inline_wait_ms, jobs, processes;
    uint64_t map_max;
    double retention_days, tombstone_days;
    int json, now, done, not_done, allow_graph_change, nosync, has_inline_wait, tasks, prometheus;
} cairn__cli_opts;

#define CAIRN__TAKES_FILE 2

/* A task command, for the dispatcher (cairn_cli_main), which parses its options and operand into
 * a cairn__cli_opts (the store defaulting to CAIRN_STORE, retention to 7 days, tombstones to 30)
 * before the body runs. An option of another task command is refused by name. */
typedef struct cairn__cli_task {
    const char *name, *help;
    const int *allowed; /* the CAIRN__O_* it takes, 0-ended; --store always */
    int takes_id;       /* 1: exactly one operand, the task ID (o->id); CAIRN__TAKES_FILE: at
                           most one, an input file (o->input; "-" = standard input); 0: none */
    int config;         /* runs the built-in graph: help names --config (cairn__cli_takes_config) */
    int (*fn)(const cairn__cli_opts *o, cairn_graph *const *graphs, size_t n);
} cairn__cli_task;

/* Checks that `--graph NAME` is one of this program's graphs; else prints why (the built-in
 * graph without a configuration, or the graphs there are) into err and returns CAIRN_ENOGRAPH. */
int cairn__cli_check_graph(cairn_graph *const *graphs, size_t n, const char *name, char *err,
                           size_t errlen);
/* For the commands that work on stored tasks' graphs (retry, invalidate): 64, said on stderr, in
 * the `cairn` executable without a configuration (there are no graphs, and every task would fail
 * alike); 0 otherwise. */
int cairn__cli_need_config(const char *cmd, size_t n_graphs);
/* Whether the command `cmd` takes --config in the `cairn` executable: run, retry and invalidate,
 * the commands that run the built-in graph (cairn__cli_task.config). The executable (tools/main.c)
 * is to load the configuration, and take --config out of argv, for these only, so that every other
 * command refuses --config as an unknown option instead of ignoring it. */
int cairn__cli_takes_config(const char *cmd);

/* An open store and, for the commands that run tasks, a runner on it. */
typedef struct cairn__cli_session {
    cairn_store *store;
    cairn_runner *runner;
    cairn_runner **more; /* cairn__cli_session_more's */
    size_t n_more;
} cairn__cli_session;

/* Opens the store (with `must_exist`, only one that is there: every command but `run` and `init`)
 * and, with `need_runner`, a runner for `graphs` configured from the options; SIGTERM and SIGINT
 * then stop that runner. Returns 0 or a CAIRN_E* code, the reason printed. Close the session
 * either way. */
int cairn__cli_session_open(cairn__cli_session *s, const char *cmd, const cairn__cli_opts *o,
                            cairn_graph *const *graphs, size_t n_graphs, int must_exist,
                            int need_runner);
/* For `retry`: a session on an existing store whose runner is opened with `report` as its retry
 * report (cairn_runner_set_retry_report, which an open runner refuses). */
int cairn__cli_session_open_reporting(cairn__cli_session *s, const char *cmd,
                                      const cairn__cli_opts *o, cairn_graph *const *graphs,
                                      size_t n_graphs, cairn_retry_report_fn report, void *user);
void cairn__cli_session_close(cairn__cli_session *s);
/* n more runners on the session's store, configured as its first and stopped with it by the
 * signals (consume's worker threads: one runner each): s->more[s->n_more - n ...]. 0 or a
 * CAIRN_E* code, the reason printed. */
int cairn__cli_session_more(cairn__cli_session *s, const char *cmd, const cairn__cli_opts *o,
                            cairn_graph *const *graphs, size_t n_graphs, size_t n);
/* --jobs K runners on threads of --processes P worker processes (consume, serve --tasks; each
 * default 1): the worker processes (P, at most K), and the runners worker i has (the K spread
 * evenly). */
size_t cairn__cli_workers(const cairn__cli_opts *o);
size_t cairn__cli_worker_runners(const cairn__cli_opts *o, size_t i);
/* The tenant limit takes both options or neither (run, retry, consume): 0, or 64 said on stderr. */
int cairn__cli_tenant_usage(const char *cmd, const char *help, const cairn__cli_opts *o);
/* Runs one task of `graph` as `run` does, on the session's runner: `task` (NULL: derived, from
 * the fields `task_from` or the input's hash), the input text buf/len (copied), `message_id`
 * (may be NULL). The task ID goes to `id` ("" when it is not known; idlen >= CAIRN_TASK_ID_MAX +
 * 1) and `run`'s message, with the command that settles the error and, for a consumed message,
 * what became of its task, to `msg`. Returns what cairn_runner_run returned. */
int cairn__cli_run_input(cairn__cli_session *s, const char *graph, const char *task,
                         const char *task_from, const char *buf, size_t len, const char *message_id,
                         char *id, size_t idlen, char *msg, size_t msglen);
/* Adds to the object j (returned, the caller's reference) what `run --json` prints for task `id`
 * ("" = unknown) after rc/msg: task, status and attempt when the store (may be NULL) has it,
 * exit, error, message. */
json_t *cairn__cli_run_doc(json_t *j, cairn_store *store, const char *id, int rc, const char *msg);
/* Prints "PROG CMD: msg (CAIRN_EXXX)" (cairn_strerror when msg is empty) and returns the exit
 * code for rc. */
int cairn__cli_fail(const char *cmd, int rc, const char *msg);
/* The store's metrics as OpenMetrics text (`stats --prometheus`, serve's /metrics), extra (NULL:
 * none) added before the closing "# EOF": malloc'd, or NULL with *rc set (the store's message
 * in cairn_store_errmsg). map_max: the map limit to report. */
char *cairn__cli_metrics(cairn_store *s, uint64_t map_max, const char *extra, int *rc);
/* Prints j as one compact line on stdout and releases it (steals the reference). */
void cairn__cli_print_json(json_t *j);

/* The stops of the commands that wait in poll() for several things (consume, serve): a stop
 * (SIGTERM, SIGINT, SIGHUP) writes a byte to a self-pipe, so the loop wakes whatever it waits
 * for, and SIGPIPE is ignored (a peer gone is seen where it is written to). catch makes the
 * pipe (once; close-on-exec, the write end non-blocking) and sets the handlers, again after a
 * session set its own; it returns the end to poll and read, or -1 (errno). default gives the
 * four signals their default actions back; close closes the pipe (in a forked child too, which
 * then calls default as well). */
int cairn__cli_stops_catch(void);
void cairn__cli_stops_default(void);
void cairn__cli_stops_close(void);
/* Waits on fd (cairn__cli_stops_catch's) for a stop: 0 then. tick (NULL: none) is called
 * every tick_ms meanwhile, for what a server looks after while it waits; its nonzero return
 * ends the wait and is returned. */
int cairn__cli_stops_wait(int fd, int tick_ms, int (*tick)(void *arg), void *arg);

/* `shard` (cli_shard.c): needs no store, so it is not a task command */
int cairn__cmd_shard(int argc, char **argv);

/* The task commands. cli_run.c: */
extern const cairn__cli_task cairn__task_run, cairn__task_retry, cairn__task_resolve,
    cairn__task_invalidate, cairn__task_gc, cairn__task_init;
/* cli_consume.c: */
extern const cairn__cli_task cairn__task_consume;
/* cli_serve.c (the HTTP task API): */
extern const cairn__cli_task cairn__task_serve;
/* cli_inspect.c (read-only): */
extern const cairn__cli_task cairn__task_show, cairn__task_list, cairn__task_audit,
    cairn__task_stats, cairn__task_check;

#endif
