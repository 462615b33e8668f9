/* tools/tools.h - the commands over the engine and the steps, for the composition root
 * (tools/main.c), which registers them in the CLI's extension table (runner/cli.h).
 *
 * Each command is one file and takes argv after the dispatcher, argv[0] being the command's own
 * name; it returns the exit status (runner/cli.h's one table). Nothing outside tools/ includes
 * this header.
 */
#ifndef CAIRN_TOOLS_H
#define CAIRN_TOOLS_H

int cairn__cmd_generate(int argc, char **argv);   /* tools/generate.c */
int cairn__cmd_tokenize(int argc, char **argv);   /* tools/tokenize.c */
int cairn__cmd_model_info(int argc, char **argv); /* tools/model_info.c */
int cairn__cmd_index(int argc, char **argv);      /* tools/index.c */
int cairn__cmd_search(int argc, char **argv);     /* tools/search.c */

/* The retrieval index's directory: `index` when given, else <store>/index, the store from
 * `store` or $CAIRN_STORE. malloc'd; NULL when neither is set (or out of memory). */
char *cairn__index_dir(const char *store, const char *index);

#endif
