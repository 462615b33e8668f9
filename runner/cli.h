/* runner/cli.h - what the CLI's files share (not public).
 *
 * Two audiences. Every command file, tools/'s included, uses the first part: option
 * values, input files, the one exit-code table (runner/cli_util.c). The task commands' own files
 * use the second: the option table and its parser, help and usage errors, the store session
 * (runner/cli.c), and the commands themselves (runner/cli_run.c changes tasks, runner/cli_inspect.c
 * only reads).
 */
#ifndef CAIRN_RUNNER_CLI_H
#define CAIRN_RUNNER_CLI_H

#include <jansson.h>
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

/* Matches "--name VALUE", "--name=VALUE" or (shrt not NULL) "-x VALUE" at argv[*i]: 1 with
 * *val set (borrowed from argv) and *i moved past a separate value, 0 if argv[*i] is another
 * option, -1 if the value is missing. */
int cairn__cli_opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt,
                         const char **val);
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

/* ------------------------------------------------------------------ the task commands' files */

/* argv[0]'s basename, for messages and usage (set by cairn_cli_main) */
extern const char *cairn__cli_prog;

/* Every option of the task commands; each command lists the ones it takes (cairn__cli_parse_opts).
 * Values start above any character so getopt_long's '?' and ':' cannot collide with them. */
enum {
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
    CAIRN__O_MAX_PER_TENANT,
    CAIRN__O_LIMIT,
    CAIRN__O_MAX_ATTEMPTS,
    CAIRN__O_LEASE_MS,
    CAIRN__O_INLINE_WAIT,
    CAIRN__O_MAP_MAX,
    CAIRN__O_RETENTION,
    CAIRN__O_TOMBSTONE,
    CAIRN__O_JSON,
    CAIRN__O_NOW,
    CAIRN__O_DONE,
    CAIRN__O_NOT_DONE,
    CAIRN__O_ALLOW_GRAPH_CHANGE,
    CAIRN__O_NOSYNC,
    CAIRN__O_HELP
};

/* The options' values after parsing: unset ones are 0/NULL, except the defaults noted. */
typedef struct cairn__cli_opts {
    const char *store, *graph, *task, *task_from, *input, *message_id, *status, *step, *from;
    const char *tenant_field;
    uint32_t max_per_tenant, limit, max_attempts, lease_ms, inline_wait_ms;
    uint64_t map_max;
    double retention_days, tombstone_days;
    int json, now, done, not_done, allow_graph_change, nosync, help, has_inline_wait;
} cairn__cli_opts;

/* Parses argv (after the command word). `allowed` lists the options this command takes (0-ended;
 * --store and --help are always taken); the store defaults to CAIRN_STORE, retention to 7 days and
 * tombstones to 30. Returns 0 with *optind_out at the first operand, or 64 after printing what is
 * wrong. */
int cairn__cli_parse_opts(int argc, char **argv, const char *cmd, const int *allowed,
                          cairn__cli_opts *o, int *optind_out);
/* Help texts name the program as "%P" (cairn, cairn-ledger, ...). */
void cairn__cli_put_help(FILE *f, const char *text);
/* The help, plus (needs_graphs, for the commands that run tasks) the --config lines of the `cairn`
 * executable. */
void cairn__cli_print_help(FILE *f, const char *help, int needs_graphs);
/* A usage error: says what is wrong, then prints the command's usage; returns 64. */
int cairn__cli_usage_error(const char *cmd, const char *help, const char *fmt, ...)
    CAIRN_PRINTF(3, 4);
/* Checks that `--graph NAME` is one of this program's graphs; else prints why (the built-in
 * graph without a configuration, or the graphs there are) into err and returns CAIRN_ENOGRAPH. */
int cairn__cli_check_graph(cairn_graph *const *graphs, size_t n, const char *name, char *err,
                           size_t errlen);
/* For the commands that work on stored tasks' graphs (retry, invalidate): 64, said on stderr, in
 * the `cairn` executable without a configuration (there are no graphs, and every task would fail
 * alike); 0 otherwise. */
int cairn__cli_need_config(const char *cmd, size_t n_graphs);
/* Whether the command `cmd` takes --config in the `cairn` executable: run, retry and invalidate,
 * the commands that run the built-in graph. The executable (tools/main.c) is to load the
 * configuration, and take --config out of argv, for these only, so that every other command
 * refuses --config as an unknown option instead of ignoring it. */
int cairn__cli_takes_config(const char *cmd);

/* An open store and, for the commands that run tasks, a runner on it. */
typedef struct cairn__cli_session {
    cairn_store *store;
    cairn_runner *runner;
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
/* Prints "PROG CMD: msg (CAIRN_EXXX)" (cairn_strerror when msg is empty) and returns the exit
 * code for rc. */
int cairn__cli_fail(const char *cmd, int rc, const char *msg);
/* Prints j as one compact line on stdout and releases it (steals the reference). */
void cairn__cli_print_json(json_t *j);

/* The task commands (argc, argv after the command word). cli_run.c: */
int cairn__cmd_run(int argc, char **argv, cairn_graph *const *graphs, size_t n);
int cairn__cmd_retry(int argc, char **argv, cairn_graph *const *graphs, size_t n);
int cairn__cmd_resolve(int argc, char **argv, cairn_graph *const *graphs, size_t n);
int cairn__cmd_invalidate(int argc, char **argv, cairn_graph *const *graphs, size_t n);
int cairn__cmd_gc(int argc, char **argv, cairn_graph *const *graphs, size_t n);
int cairn__cmd_init(int argc, char **argv);
/* cli_inspect.c (read-only): */
int cairn__cmd_show(int argc, char **argv);
int cairn__cmd_list(int argc, char **argv);
int cairn__cmd_audit(int argc, char **argv);
int cairn__cmd_stats(int argc, char **argv);

#endif
