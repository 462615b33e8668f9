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
/* Reads a whole file ("-" = stdin), at most CAIRN__MAX_INPUT bytes. CAIRN_ENOENT (missing),
 * CAIRN_ETOOBIG, CAIRN_EIO; err names the path. *buf is malloc'd and NUL-terminated. */
int cairn__read_input(const char *path, char **buf, size_t *len, char *err, size_t errlen);
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

/* Engine commands (runner/cmd_generate.c, runner/cmd_tokenize.c). */
int cairn__cmd_generate(int argc, char **argv);
int cairn__cmd_tokenize(int argc, char **argv);
int cairn__cmd_model_info(int argc, char **argv);
/* Retrieval index commands (runner/cmd_index.c). */
int cairn__cmd_index(int argc, char **argv);
int cairn__cmd_search(int argc, char **argv);

#endif
