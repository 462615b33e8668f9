/* tools/tools.h - the commands over the engine and the steps, for the composition root
 * (tools/main.c), which registers them in the CLI's extension table (runner/cli.h).
 *
 * Each command is one file and takes argv after the dispatcher, argv[0] being the command's own
 * name; it returns the exit status (runner/cli.h's one table). Nothing outside tools/ includes
 * this header.
 */
#ifndef CAIRN_TOOLS_H
#define CAIRN_TOOLS_H

#include <stddef.h>

#include "runner/cli.h"

int cairn__cmd_generate(int argc, char **argv);   /* tools/generate.c */
int cairn__cmd_tokenize(int argc, char **argv);   /* tools/tokenize.c */
int cairn__cmd_model_info(int argc, char **argv); /* tools/model_info.c */
int cairn__cmd_index(int argc, char **argv);      /* tools/index.c */
int cairn__cmd_search(int argc, char **argv);     /* tools/search.c */
/* `serve --model` (tools/serve_model.c); main.c routes `serve` here when --model is given */
int cairn__cmd_serve_model(int argc, char **argv);

/* The command lines of `index` and `search` (tools/index.c), which differ only in two options:
 * the one each requires (`need`: --corpus, --query) and a number (--batch, --top-k). Each
 * command's table lists those two and ends with CAIRN__INDEX_OPTS, the options they share; the
 * values are kept here (cairn__opt_slot). */
typedef struct cairn__index_args {
    const char *store, *index, *need, *number, *memory;
    int json;
    char *dir; /* the index directory: --index, else <store>/index (store: --store, $CAIRN_STORE) */
} cairn__index_args;

#define CAIRN__INDEX_OPTS                                                                          \
    {"store", 's', 1, 0, 0, offsetof(cairn__index_args, store)},                                   \
        {"index", 0, 1, 0, 0, offsetof(cairn__index_args, index)},                                 \
        {"json", 0, 0, 0, 0, offsetof(cairn__index_args, json)},                                   \
    {                                                                                              \
        NULL, 0, 0, 0, 0, 0                                                                        \
    }

/* Parses argv into *a and finds the index directory (a->dir, malloc'd); `need_msg` is the usage
 * error when the required option is missing. -1 to go on, else the exit code (as
 * cairn__opt_parse). */
int cairn__index_args_parse(int argc, char **argv, const cairn__opt_cmd *cmd, const char *need_msg,
                            cairn__index_args *a);

/* Reports a GGUF file that did not open ("cairn CMD: PATH: what", the path said once) on stderr
 * and returns the exit code for rc (tools/model_info.c). */
int cairn__model_open_failed(const char *cmd, const char *path, int rc, const char *err);

#endif
