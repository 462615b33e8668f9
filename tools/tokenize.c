/* tools/tokenize.c - the `cairn tokenize` command.
 *
 * It reads only a GGUF file's tokenizer metadata, never the weights, so it answers in
 * milliseconds even for large models. Exit codes follow sysexits(3)
 * through the CLI's one table (cairn__exit_code), except that a model feature the engine does
 * not implement is 69 as in `cairn generate` (cairn__exit_code_engine): 64 usage, 65 malformed
 * model file, 66 missing or unreadable model or input, 69 unsupported, 70 internal error, 74 I/O
 * error. The functions take argv with argv[0] being the command's own name, as the dispatcher
 * passes it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "gpu/gguf.h"
#include "gpu/tokenizer.h"
#include "runner/cli.h"
#include "tools/tools.h"

static const char tokenize_usage[] =
    "usage: cairn tokenize --model FILE.gguf (--text TEXT | --file PATH) [options]\n"
    "\n"
    "Prints the token ids of the input, separated by single spaces, one line per input.\n"
    "\n"
    "  -m, --model FILE    GGUF model (only its tokenizer metadata is read)\n"
    "  -p, --text TEXT     tokenize TEXT (may be repeated: one output line each)\n"
    "  -f, --file PATH     tokenize the contents of PATH ('-' for standard input)\n"
    "      --lines         with --file: tokenize each line separately, without its line\n"
    "                      end (\"\\n\" or \"\\r\\n\")\n"
    "      --add-special   add BOS/EOS as the model's vocabulary asks\n"
    "      --parse-special read control-token text such as <|im_end|> as that token\n"
    "                      (user-defined added tokens are matched always, as in llama.cpp)\n"
    "  -h, --help          show this help\n"
    "\n"
    "--text may be repeated; every other option may be given once.\n"
    "\n"
    "Exit status: 0 success; 64 bad usage; 65 bad model file; 66 model or input file missing\n"
    "or unreadable; 69 unsupported tokenizer (model or pre-tokenizer); 70 internal error;\n"
    "74 the output cannot be written.\n";

static int print_ids(const cairn__tok *t, const char *s, size_t len, int add_special,
                     int parse_special)
{
    int32_t *ids;
    size_t n, i;
    int rc = cairn__tok_encode(t, s, len, add_special, parse_special, &ids, &n);
    if (rc)
        return rc;
    for (i = 0; i < n; i++)
        printf(i ? " %" PRId32 : "%" PRId32, ids[i]);
    putchar('\n');
    free(ids);
    return 0;
}

typedef struct tok_args {
    const char *model, *file;
    const char **texts; /* every --text in order; there are fewer than argc of them */
    size_t n_texts;
    int lines, add_special, parse_special;
} tok_args;

enum { T_TEXT = 1 };
#define AT(f) offsetof(tok_args, f)
static const cairn__opt tokenize_opts[] = {
    {"model", 'm', 1, 0, 0, AT(model)},
    {"text", 'p', 1, 1, T_TEXT, 0}, /* "one line per input" */
    {"file", 'f', 1, 0, 0, AT(file)},
    {"lines", 0, 0, 0, 0, AT(lines)},
    {"add-special", 0, 0, 0, 0, AT(add_special)},
    {"parse-special", 0, 0, 0, 0, AT(parse_special)},
    {NULL, 0, 0, 0, 0, 0},
};
#undef AT
static const cairn__opt_cmd tokenize_cmd = {"tokenize", tokenize_usage, 0, 0, tokenize_opts};

static int tok_opt(void *user, const cairn__opt *opt, const char *val)
{
    tok_args *a = user;
    if (opt->id != T_TEXT)
        return cairn__opt_slot(a, opt, val);
    a->texts[a->n_texts++] = val;
    return 0;
}

int cairn__cmd_tokenize(int argc, char **argv)
{
    tok_args a = {.texts = malloc((size_t)(argc > 0 ? argc : 1) * sizeof(const char *))};
    const char *model, *file;
    int add_special, parse_special, lines, oi, rc, code = CAIRN__EX_OK;
    char err[512];
    cairn__gguf *g = NULL;
    cairn__tok *t = NULL;
    char *data = NULL;
    size_t len = 0, n_texts, k;

    if (!a.texts) {
        cairn__log(CAIRN__LOG_ERROR, "tokenize", "error", NULL, NULL, "out of memory");
        return CAIRN__EX_SOFTWARE;
    }
    if ((rc = cairn__opt_parse(argc, argv, &tokenize_cmd, tok_opt, &a, &oi)) >= 0) {
        code = rc;
        goto done;
    }
    model = a.model, file = a.file, n_texts = a.n_texts;
    add_special = a.add_special, parse_special = a.parse_special, lines = a.lines;
    if (!model || (!n_texts == !file) || (lines && !file)) {
        code = cairn__cli_usage_error("tokenize", tokenize_usage, "%s",
                                      !model              ? "--model is required"
                                      : (n_texts && file) ? "give --text or --file, not both"
                                      : lines && !file    ? "--lines needs --file"
                                                          : "give --text or --file");
        goto done;
    }

    /* only the vocabulary is read: a tensor type the engine cannot run does not matter here */
    rc = cairn__gguf_open_ex(model, CAIRN__GGUF_ANY_TYPE, &g, err, sizeof err);
    if (rc) {
        code = cairn__model_open_failed("tokenize", model, rc, err);
        goto done;
    }
    rc = cairn__tok_load(g, &t, err, sizeof err);
    cairn__gguf_close(g);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, "tokenize", "tokenizer", NULL, NULL, "%s: %s", model,
                   err[0] ? err : "cannot load the tokenizer");
        code = cairn__exit_code_engine(rc);
        goto done;
    }

    if (file) {
        rc = cairn__read_input(file, &data, &len, err, sizeof err);
        if (rc) {
            cairn__log(CAIRN__LOG_ERROR, "tokenize", "error", NULL, NULL, "%s", err);
            code = cairn__exit_code_engine(rc);
            goto done;
        }
    }

    rc = 0;
    if (n_texts) {
        for (k = 0; k < n_texts && !rc; k++)
            rc = print_ids(t, a.texts[k], strlen(a.texts[k]), add_special, parse_special);
    } else if (!lines) {
        rc = print_ids(t, data, len, add_special, parse_special);
    } else {
        /* one output line per input line; a last line without '\n' counts, a final '\n' does
         * not start another (empty) line. A CRLF line ends at its '\r' too: the line end is
         * not part of the line, whichever convention the file was written with. */
        size_t pos = 0;
        while (pos < len && !rc) {
            const char *nl = memchr(data + pos, '\n', len - pos);
            size_t end = nl ? (size_t)(nl - data) : len, stop = end;
            if (nl && stop > pos && data[stop - 1] == '\r')
                stop--;
            rc = print_ids(t, data + pos, stop - pos, add_special, parse_special);
            pos = end + 1;
        }
    }
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cairn__log(CAIRN__LOG_ERROR, "tokenize", "write", NULL, NULL, "cannot write the output: %s",
                   strerror(errno ? errno : EIO));
        code = CAIRN__EX_IOERR;
    } else if (rc) {
        cairn__log(CAIRN__LOG_ERROR, "tokenize", "error", NULL, NULL, "tokenizing failed (%s)",
                   rc == CAIRN_ENOMEM ? "out of memory" : "internal error");
        code = CAIRN__EX_SOFTWARE;
    }
done:
    free(data);
    free(a.texts);
    cairn__tok_free(t);
    return code;
}
