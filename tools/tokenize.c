/* tools/tokenize.c - the `cairn tokenize` command.
 *
 * It reads only a GGUF file's tokenizer metadata, never the weights, so it answers in
 * milliseconds even for large models. Exit codes follow sysexits(3)
 * through the CLI's one table (cairn__exit_code), except that a model feature the engine does
 * not implement is 69 as in `cairn generate` (cairn__exit_code_engine): 64 usage, 65 malformed model file,
 * 66 missing or unreadable model or input, 69 unsupported, 70 internal error, 74 I/O error. The
 * functions take argv with argv[0] being the command's own name, as the dispatcher passes it.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

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
    "      --parse-special read special-token text such as <|im_end|> as that token\n"
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

int cairn__cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL, *val = NULL;
    int add_special = 0, parse_special = 0, lines = 0, i, rc, v, w, code = EX_OK;
    char err[512];
    cairn__gguf *g = NULL;
    cairn__tok *t = NULL;
    char *data = NULL;
    size_t len = 0, n_texts = 0, k;
    /* every --text in order ("one line per input"); there are fewer than argc of them */
    const char **texts = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *texts);

    if (!texts) {
        fprintf(stderr, "cairn tokenize: out of memory\n");
        return EX_SOFTWARE;
    }
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        w = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(tokenize_usage, stdout);
            goto done;
        } else if (strcmp(a, "--add-special") == 0) {
            add_special = 1;
        } else if (strcmp(a, "--parse-special") == 0) {
            parse_special = 1;
        } else if (strcmp(a, "--lines") == 0) {
            lines = 1;
        } else if ((v = cairn__cli_opt_value(argc, argv, &i, "--text", "-p", &text))) {
            if (v < 0)
                goto needs_value;
            texts[n_texts++] = text;
        } else if ((v = cairn__cli_opt_value(argc, argv, &i, "--model", "-m", &val)) ||
                   (w = cairn__cli_opt_value(argc, argv, &i, "--file", "-f", &val))) {
            const char **dst = v ? &model : &file;
            if (v < 0 || w < 0)
                goto needs_value;
            if (*dst) { /* one value each: a second would silently replace the first */
                fprintf(stderr, "cairn tokenize: %s given twice\n%s", v ? "--model" : "--file",
                        tokenize_usage);
                code = EX_USAGE;
                goto done;
            }
            *dst = val;
        } else {
            fprintf(stderr, "cairn tokenize: unknown argument '%s'\n%s", a, tokenize_usage);
            code = EX_USAGE;
            goto done;
        }
        continue;
    needs_value:
        fprintf(stderr, "cairn tokenize: option %s needs a value\n%s", a, tokenize_usage);
        code = EX_USAGE;
        goto done;
    }
    if (!model || (!text == !file) || (lines && !file)) {
        fprintf(stderr, "cairn tokenize: %s\n%s",
                !model           ? "--model is required"
                : (text && file) ? "give --text or --file, not both"
                : lines && !file ? "--lines needs --file"
                                 : "give --text or --file",
                tokenize_usage);
        code = EX_USAGE;
        goto done;
    }

    /* only the vocabulary is read: a tensor type the engine cannot run does not matter here */
    rc = cairn__gguf_open_ex(model, CAIRN__GGUF_ANY_TYPE, &g, err, sizeof err);
    if (rc) {
        /* the reader's message usually names the file already */
        if (err[0] && strstr(err, model))
            fprintf(stderr, "cairn tokenize: %s\n", err);
        else
            fprintf(stderr, "cairn tokenize: %s: %s\n", model, err[0] ? err : "cannot open");
        code = cairn__exit_code_engine(rc);
        goto done;
    }
    rc = cairn__tok_load(g, &t, err, sizeof err);
    cairn__gguf_close(g);
    if (rc) {
        fprintf(stderr, "cairn tokenize: %s: %s\n", model,
                err[0] ? err : "cannot load the tokenizer");
        code = cairn__exit_code_engine(rc);
        goto done;
    }

    if (file) {
        rc = cairn__read_input(file, &data, &len, err, sizeof err);
        if (rc) {
            fprintf(stderr, "cairn tokenize: %s\n", err);
            code = cairn__exit_code_engine(rc);
            goto done;
        }
    }

    rc = 0;
    if (n_texts) {
        for (k = 0; k < n_texts && !rc; k++)
            rc = print_ids(t, texts[k], strlen(texts[k]), add_special, parse_special);
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
        fprintf(stderr, "cairn tokenize: cannot write the output: %s\n",
                strerror(errno ? errno : EIO));
        code = EX_IOERR;
    } else if (rc) {
        fprintf(stderr, "cairn tokenize: tokenizing failed (%s)\n",
                rc == CAIRN_ENOMEM ? "out of memory" : "internal error");
        code = EX_SOFTWARE;
    }
done:
    free(data);
    free(texts);
    cairn__tok_free(t);
    return code;
}
