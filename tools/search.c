/* tools/search.c - the `cairn search` command: the retrieval index queried by hand.
 *
 * The same BM25 scoring the retrieve step uses (steps/bm25.h), over the index `cairn index`
 * built. Exit codes come from the CLI's one table (cairn__exit_code): 64 usage, 66 no index, 74
 * index I/O. argv[0] is the command's own name, as the dispatcher passes it.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cairn.h"
#include "runner/cli.h"
#include "steps/bm25.h"
#include "tools/tools.h"

static const char search_usage[] =
    "usage: cairn search --store DIR --query TEXT [options]\n"
    "\n"
    "Prints the best-matching documents of the BM25 index in DIR/index (k1 1.2, b 0.75).\n"
    "\n"
    "  -s, --store DIR     the store directory (default: $CAIRN_STORE); the index is DIR/index\n"
    "      --index DIR     use this index directory instead of DIR/index\n"
    "  -q, --query TEXT    the query (free text)\n"
    "  -k, --top-k K       how many documents, 1..1000 (default 10)\n"
    "      --json          print {\"query\", \"docs\": [{\"id\", \"score\", \"text\", "
    "\"fields\"?}]}\n"
    "  -h, --help          show this help\n"
    "Exit codes: 0 ok, 64 usage, 66 no index, 74 index I/O error.\n";

/* Prints at most `max` characters of s on one line (newlines and tabs as spaces). */
static void print_snippet(const char *s, size_t max)
{
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p & 0xc0) != 0x80 && chars++ == max) {
            fputs("...", stdout);
            return;
        }
        putchar(*p < 0x20 ? ' ' : *p);
    }
}

static const cairn__opt search_opts[] = {
    {"query", 'q', 1, 0, 0, offsetof(cairn__index_args, need)},
    {"top-k", 'k', 1, 0, 0, offsetof(cairn__index_args, number)},
    CAIRN__INDEX_OPTS,
};
static const cairn__opt_cmd search_cmd = {"search", search_usage, 0, 0, search_opts};

int cairn__cmd_search(int argc, char **argv)
{
    cairn__index_args a;
    int rc = cairn__index_args_parse(argc, argv, &search_cmd, "--query TEXT is required", &a);
    if (rc >= 0)
        return rc;
    const char *query = a.need, *dir = a.dir;
    long k = 10;
    if (a.number && cairn__cli_parse_long(a.number, 1, 1000, &k)) {
        cairn__log(CAIRN__LOG_ERROR, "search", "usage", NULL, NULL,
                   "--top-k must be a number from 1 to 1000");
        free(a.dir);
        return CAIRN__EX_USAGE;
    }
    char err[1200];
    cairn__bm25 *ix = NULL;
    rc = cairn__bm25_open(dir, 0, &ix, err, sizeof err);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, "search", "error", NULL, NULL, "%s", err);
        free(a.dir);
        return cairn__exit_code(rc);
    }
    cairn__bm25_hit *hits = NULL;
    size_t n = 0;
    rc = cairn__bm25_search(ix, query, (size_t)k, &hits, &n);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, "search", "error", NULL, NULL, "%s", cairn__bm25_errmsg(ix));
        cairn__bm25_close(ix);
        free(a.dir);
        return cairn__exit_code(rc);
    }
    if (a.json) {
        json_t *docs = json_array();
        for (size_t i = 0; i < n; i++) {
            json_t *d = json_pack("{s:s, s:f, s:s}", "id", hits[i].id, "score", hits[i].score,
                                  "text", hits[i].text);
            json_t *extra = hits[i].extra ? json_loads(hits[i].extra, 0, NULL) : NULL;
            if (d && extra)
                json_object_set_new(d, "fields", extra);
            else
                json_decref(extra);
            json_array_append_new(docs, d);
        }
        json_t *o = json_pack("{s:s, s:o}", "query", query, "docs", docs);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        else
            rc = CAIRN_ENOMEM;
        free(s);
        json_decref(o);
    } else if (n == 0) {
        printf("no documents match\n");
    } else {
        for (size_t i = 0; i < n; i++) {
            printf("%2zu  %9.4f  %s  ", i + 1, hits[i].score, hits[i].id);
            print_snippet(hits[i].text, 80);
            putchar('\n');
        }
    }
    fflush(stdout);
    cairn__bm25_hits_free(hits, n);
    cairn__bm25_close(ix);
    free(a.dir);
    return cairn__exit_code(rc);
}
