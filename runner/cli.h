/* runner/cli.h - helpers shared by the CLI's command files (not public). */
#ifndef CAIRN_RUNNER_CLI_H
#define CAIRN_RUNNER_CLI_H

#include <jansson.h>
#include <stddef.h>

/* Matches "--name VALUE", "--name=VALUE" or (shrt not NULL) "-x VALUE" at argv[*i]: 1 with
 * *val set (borrowed from argv) and *i moved past a separate value, 0 if argv[*i] is another
 * option, -1 if the value is missing. */
int cairn__cli_opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt,
                         const char **val);
/* A whole decimal number from lo to hi into *out; -1 (and *out untouched) for anything else. */
int cairn__cli_parse_long(const char *s, long lo, long hi, long *out);
/* Maps a CAIRN_E* code to the documented sysexits exit code. */
int cairn__exit_code(int err);
/* Reads a whole file ("-" = stdin), at most CAIRN__MAX_INPUT bytes. CAIRN_ENOENT when the input
 * cannot be had at all (missing, a directory, not readable, a read error: the user's file, so
 * exit 66, never the store's 74), CAIRN_ETOOBIG, CAIRN_ENOMEM; err names the path. *buf is
 * malloc'd and NUL-terminated. */
int cairn__read_input(const char *path, char **buf, size_t *len, char *err, size_t errlen);
/* For commands that must not create a store (all but `run` and `init`): CAIRN_ENOENT with err
 * naming the path when nothing is there or the directory holds no store; 0 otherwise (including
 * paths that cairn_store_open will refuse with its own message, such as a regular file). */
int cairn__cli_store_exists(const char *dir, char *err, size_t errlen);
/* "12.5 MiB", "64.0 GiB": a byte count for people. */
void cairn__fmt_bytes(unsigned long long n, char out[32]);
/* A task snapshot as a JSON object (new reference; NULL on ENOMEM). */
struct cairn_task;
json_t *cairn__task_to_json(const struct cairn_task *t);
/* Tables for people. */
void cairn__print_task_table(const json_t *task);
void cairn__print_list_table(const json_t *rows);
void cairn__print_audit_table(const json_t *rows);

/* Commands beyond the task commands, registered by the executable before cairn_cli_main (the
 * `cairn` binary adds the engine's: generate, tokenize, model-info, index, search). The table is
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

/* Engine commands (runner/cmd_generate.c, runner/cmd_tokenize.c). */
int cairn__cmd_generate(int argc, char **argv);
int cairn__cmd_tokenize(int argc, char **argv);
int cairn__cmd_model_info(int argc, char **argv);
/* Retrieval index commands (runner/cmd_index.c). */
int cairn__cmd_index(int argc, char **argv);
int cairn__cmd_search(int argc, char **argv);

#endif
