/* tools/main.c - the `cairn` executable, the one composition root: parses nothing itself.
 *
 * It is the only file that wires steps/ and tools/ into the CLI library (runner/): it registers
 * tools/'s commands, and the built-in graph `default` when a configuration is
 * given (--config FILE or CAIRN_CONFIG), and hands argv to the CLI. A C developer's own program
 * does the same with its own graphs (see examples/ledger).
 */
#include <stdio.h>
#include <string.h>

#include "cairn.h"
#include "runner/cli.h"
#include "steps/pipeline.h"
#include "tools/tools.h"

static int preflight(void *p, char *err, size_t errlen)
{
    return cairn__pipeline_check(p, err, errlen);
}

int main(int argc, char **argv)
{
    cairn__pipeline *p = NULL;
    char err[1024];
    /* only the commands that run tasks take --config and need the graph (and the secrets its
     * config names); the others get argv as it is, so they refuse --config as unknown */
    const char *cmd = argc > 1 ? argv[1] : "";
    /* `serve --model` is the model service (tools/serve_model.c), `serve --tasks` the CLI
     * library's task API: the model's is wired here, where the engine may be */
    if (!strcmp(cmd, "serve"))
        for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
            if (!strcmp(argv[i], "--model") || !strncmp(argv[i], "--model=", 8) ||
                !strcmp(argv[i], "-m"))
                return cairn__cmd_serve_model(argc - 1, argv + 1);
    int rc = cairn__cli_takes_config(cmd)
                 ? cairn__pipeline_from_args(&argc, argv, 1, &p, err, sizeof err)
                 : 0;
    if (rc) {
        cairn__log_reset(); /* CAIRN_LOG_FORMAT; the command line is not parsed yet */
        cairn__log(CAIRN__LOG_ERROR, NULL, "config", NULL, NULL, "%s", err);
        return cairn__exit_code(rc);
    }
    static const cairn__cli_cmd engine_cmds[] = {
        {"generate", "generate text with a GGUF model", cairn__cmd_generate},
        {"tokenize", "print the token ids of a text", cairn__cmd_tokenize},
        {"model-info", "describe a GGUF model file", cairn__cmd_model_info},
        {"index", "build or update the BM25 retrieval index from a JSONL corpus", cairn__cmd_index},
        {"search", "query the BM25 retrieval index", cairn__cmd_search},
    };
    cairn__cli_set_extra(engine_cmds, sizeof engine_cmds / sizeof *engine_cmds);
    cairn_graph *g = cairn__pipeline_graph(p);
    /* help names --config, and `default` without one says what is missing */
    cairn__cli_set_config_graph("default", g != NULL);
    cairn__cli_set_preflight(preflight, p); /* the model, the index, the device: before a task */
    int x = cairn_cli_main(argc, argv, g ? &g : NULL, g ? 1 : 0);
    cairn__pipeline_free(p);
    return x;
}
