/* tools/index.c - the `cairn index` command: a JSONL corpus into the retrieval index.
 *
 * `index` reads a JSONL corpus ({"id", "text", ...} per line) into the BM25 index at
 * <store>/index (steps/bm25.h; the index is its own LMDB environment, never the checkpoint
 * store). The file is validated completely first, so a bad line (the error names the file, the
 * line and the field) aborts the run with nothing written. The whole file is then one batch by
 * default: readers see the old corpus or the new one, never a mix, as long as the batch fits in
 * one transaction under --memory; a larger one commits as it goes with the index marked
 * unfinished until it is done (readers are refused meanwhile), which bounds the build's memory
 * whatever the corpus size. A run cut short there (SIGKILL, a full disk) leaves the index
 * marked unfinished, and the next `cairn index` rebuilds it: it empties the index, says so, and
 * indexes its corpus. With --batch N the run commits every N documents, each batch complete;
 * an I/O error can then stop the run part way, and the output says how many were committed.
 *
 * What the build's peak RSS is made of: the batch buffers and LMDB's dirty pages (both under
 * --memory), the document lengths (4 bytes a document), and pages of mapped files. The corpus
 * is mapped; pages already parsed are given back as the run goes (MADV_DONTNEED: they are
 * clean, a private read-only map), as the index's map pages are after each commit.
 *
 * tools/ does not see LMDB: everything goes through steps/bm25.h. Exit codes come from the
 * CLI's one table (cairn__exit_code): 64 usage, 65 bad corpus, 66 missing corpus or index,
 * 74 index I/O. argv[0] is the command's own name, as the dispatcher passes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "runner/cli.h"
#include "steps/bm25.h"
#include "tools/tools.h"

static const char index_usage[] =
    "usage: cairn index --store DIR --corpus FILE.jsonl [options]\n"
    "\n"
    "Adds the documents of a JSONL file, one {\"id\": ..., \"text\": ..., ...} object per line,\n"
    "to the BM25 index in DIR/index. A document whose id is already indexed is replaced. Other\n"
    "fields are kept and shown by `cairn search --json`. A bad line aborts the run with\n"
    "nothing written. An index left unfinished by an interrupted run is rebuilt.\n"
    "\n"
    "  -s, --store DIR     the store directory (default: $CAIRN_STORE); the index is DIR/index\n"
    "      --index DIR     use this index directory instead of DIR/index\n"
    "  -c, --corpus FILE   the JSONL corpus\n"
    "      --batch N       commit every N documents instead of once for the whole file (the file\n"
    "                      is validated first; an I/O error can leave earlier batches written)\n"
    "      --memory MB     cap on the build's memory (default 256): past it a batch writes its\n"
    "                      postings to run files and commits as it goes (the index marked\n"
    "                      unfinished until done); the index is the same whatever the cap\n"
    "      --json          print one JSON object with the counts\n"
    "  -h, --help          show this help\n"
    "Exit codes: 0 ok, 64 usage, 65 bad corpus line, 66 corpus not found, 74 index I/O error.\n";

int cairn__index_args_parse(int argc, char **argv, const cairn__opt_cmd *cmd, const char *need_msg,
                            cairn__index_args *a)
{
    memset(a, 0, sizeof *a);
    int oi, rc = cairn__opt_parse(argc, argv, cmd, cairn__opt_slot, a, &oi);
    if (rc >= 0)
        return rc;
    const char *store = a->store ? a->store : getenv("CAIRN_STORE");
    if (!a->index && (!store || !*store))
        return cairn__cli_usage_error(cmd->name, cmd->help,
                                      "--store DIR (or CAIRN_STORE) is required");
    if (!a->need)
        return cairn__cli_usage_error(cmd->name, cmd->help, "%s", need_msg);
    if (a->index) {
        a->dir = strdup(a->index);
    } else if ((a->dir = malloc(strlen(store) + 7))) {
        size_t n = strlen(store);
        sprintf(a->dir, "%s%sindex", store, store[n - 1] == '/' ? "" : "/");
    }
    if (!a->dir) {
        cairn__log(CAIRN__LOG_ERROR, cmd->name, "error", NULL, NULL, "out of memory");
        return CAIRN__EX_SOFTWARE;
    }
    return -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ index */

typedef struct doc {
    const char *id;
    char idbuf[32]; /* an integer id in decimal */
    const char *text;
    size_t text_len;
    char *extra; /* malloc'd or NULL */
    json_t *root;
} doc;

static void doc_free(doc *d)
{
    free(d->extra);
    json_decref(d->root);
    memset(d, 0, sizeof *d);
}

/* Parses and checks one corpus line. 0, or CAIRN_EJSON with err naming line and field. */
static int parse_line(const char *file, size_t lineno, const char *p, size_t n, int want_extra,
                      doc *d, char *err, size_t errlen)
{
    json_error_t je;
    memset(d, 0, sizeof *d);
    d->root = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!d->root) {
        snprintf(err, errlen, "%s:%zu: invalid JSON at column %d: %s", file, lineno, je.column,
                 je.text);
        return CAIRN_EJSON;
    }
    if (!json_is_object(d->root)) {
        snprintf(err, errlen, "%s:%zu: must be a JSON object {\"id\": ..., \"text\": ...}", file,
                 lineno);
        goto bad;
    }
    json_t *id = json_object_get(d->root, "id"), *text = json_object_get(d->root, "text");
    if (!id) {
        snprintf(err, errlen, "%s:%zu: field 'id' is missing", file, lineno);
        goto bad;
    }
    if (json_is_integer(id)) {
        snprintf(d->idbuf, sizeof d->idbuf, "%lld", (long long)json_integer_value(id));
        d->id = d->idbuf;
    } else if (json_is_string(id)) {
        d->id = json_string_value(id);
        size_t l = json_string_length(id);
        if (l == 0 || l > CAIRN__BM25_MAX_ID || strlen(d->id) != l) {
            snprintf(err, errlen, "%s:%zu: field 'id' must be 1..%d bytes without NUL", file,
                     lineno, CAIRN__BM25_MAX_ID);
            goto bad;
        }
    } else {
        snprintf(err, errlen, "%s:%zu: field 'id' must be a string (or an integer)", file, lineno);
        goto bad;
    }
    if (!text) {
        snprintf(err, errlen, "%s:%zu: field 'text' is missing", file, lineno);
        goto bad;
    }
    if (!json_is_string(text)) {
        snprintf(err, errlen, "%s:%zu: field 'text' must be a string", file, lineno);
        goto bad;
    }
    d->text = json_string_value(text);
    d->text_len = json_string_length(text);
    if (want_extra && json_object_size(d->root) > 2) {
        json_t *rest = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(d->root, k, v)
        {
            if (strcmp(k, "id") && strcmp(k, "text"))
                json_object_set(rest, k, v);
        }
        d->extra = json_dumps(rest, JSON_COMPACT);
        json_decref(rest);
        if (!d->extra) {
            snprintf(err, errlen, "%s:%zu: out of memory", file, lineno);
            doc_free(d);
            return CAIRN_ENOMEM;
        }
    }
    return 0;
bad:
    doc_free(d);
    return CAIRN_EJSON;
}

typedef struct corpus {
    const char *name;
    char *data;
    size_t len;
    int mapped;
} corpus;

static int corpus_open(const char *path, corpus *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->name = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return e == ENOENT || e == ENOTDIR ? CAIRN_ENOENT : CAIRN_EIO;
    }
    struct stat st;
    int stat_ok = fstat(fd, &st) == 0;
    if (!stat_ok || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: %s", path,
                 !stat_ok              ? strerror(errno)
                 : S_ISDIR(st.st_mode) ? "is a directory"
                                       : "not a regular file");
        close(fd);
        return CAIRN_ENOENT;
    }
    c->len = (size_t)st.st_size;
    if (c->len) {
        c->data = mmap(NULL, c->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (c->data == MAP_FAILED) {
            snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
            close(fd);
            c->data = NULL;
            return CAIRN_EIO;
        }
        c->mapped = 1;
        madvise(c->data, c->len, MADV_SEQUENTIAL);
    }
    close(fd);
    return 0;
}

/* Gives back the pages of the corpus before pos (*done: how far that was done already), every
 * 16 MB: the map is private and read-only, so they are clean and read again if touched. */
static void corpus_drop(corpus *c, size_t pos, size_t *done)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t to = pos / (size_t)pg * (size_t)pg;
    if (!c->mapped || (to < *done + ((size_t)16 << 20) && pos < c->len))
        return;
    if (to > *done)
        madvise(c->data + *done, to - *done, MADV_DONTNEED);
    *done = to;
}

static void corpus_close(corpus *c)
{
    if (c->mapped)
        munmap(c->data, c->len);
    c->mapped = 0;
}

/* Walks the corpus's non-blank lines. *pos is the offset of the next line; returns 0 at the
 * end, else 1 with the line (without "\r\n") in *p / *n and its 1-based number in *lineno. */
static int next_line(const corpus *c, size_t *pos, size_t *lineno, const char **p, size_t *n)
{
    while (*pos < c->len) {
        const char *s = c->data + *pos;
        const char *nl = memchr(s, '\n', c->len - *pos);
        size_t l = nl ? (size_t)(nl - s) : c->len - *pos;
        *pos += l + (nl != NULL);
        ++*lineno;
        size_t e = l;
        while (e && (s[e - 1] == '\r' || s[e - 1] == ' ' || s[e - 1] == '\t'))
            e--;
        size_t b = 0;
        while (b < e && (s[b] == ' ' || s[b] == '\t'))
            b++;
        if (b == e)
            continue; /* blank lines are allowed (a trailing newline, a spacer) */
        *p = s + b;
        *n = e - b;
        return 1;
    }
    return 0;
}

static const cairn__opt index_opts[] = {
    {"corpus", 'c', 1, 0, 0, offsetof(cairn__index_args, need)},
    {"batch", 0, 1, 0, 0, offsetof(cairn__index_args, number)},
    {"memory", 0, 1, 0, 0, offsetof(cairn__index_args, memory)},
    CAIRN__INDEX_OPTS,
};
static const cairn__opt_cmd index_cmd = {"index", index_usage, 0, 0, index_opts};

int cairn__cmd_index(int argc, char **argv)
{
    cairn__index_args a;
    int rc = cairn__index_args_parse(argc, argv, &index_cmd, "--corpus FILE is required", &a);
    if (rc >= 0)
        return rc;
    const char *file = a.need, *dir = a.dir;
    int json = a.json;
    long batch = 0;
    if (a.number && cairn__cli_parse_long(a.number, 0, 100000000, &batch)) {
        cairn__log(CAIRN__LOG_ERROR, "index", "usage", NULL, NULL,
                   "--batch must be a number of documents (0 = whole file)");
        free(a.dir);
        return CAIRN__EX_USAGE;
    }

    long memory_mb = 256;
    if (a.memory && cairn__cli_parse_long(a.memory, 1, 1L << 20, &memory_mb)) {
        cairn__log(CAIRN__LOG_ERROR, "index", "usage", NULL, NULL,
                   "--memory must be a number of megabytes (1 or more)");
        free(a.dir);
        return CAIRN__EX_USAGE;
    }

    char err[1200];
    corpus c;
    rc = corpus_open(file, &c, err, sizeof err);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, "index", "error", NULL, NULL, "%s", err);
        free(a.dir);
        return cairn__exit_code(rc);
    }
    double t0 = now_s();
    size_t pos = 0, lineno = 0, n;
    const char *p;
    doc d;
    { /* a batch may commit as it goes: find a bad line before writing anything */
        size_t dropped = 0;
        while (!rc && next_line(&c, &pos, &lineno, &p, &n)) {
            rc = parse_line(file, lineno, p, n, 0, &d, err, sizeof err);
            if (!rc)
                doc_free(&d);
            corpus_drop(&c, pos, &dropped);
        }
        corpus_drop(&c, c.len, &dropped);
        if (rc) {
            cairn__log(CAIRN__LOG_ERROR, "index", "corpus", NULL, NULL, "%s (nothing was written)",
                       err);
            corpus_close(&c);
            free(a.dir);
            return cairn__exit_code(rc);
        }
    }

    cairn__bm25 *ix = NULL;
    rc = cairn__bm25_open(dir, 1, &ix, err, sizeof err);
    if (rc) {
        cairn__log(CAIRN__LOG_ERROR, "index", "error", NULL, NULL, "%s", err);
        corpus_close(&c);
        free(a.dir);
        return cairn__exit_code(rc);
    }
    cairn__bm25_set_memory(ix, (size_t)memory_mb << 20);
    if (cairn__bm25_is_unfinished(ix)) {
        cairn__log(CAIRN__LOG_WARN, "index", "unfinished", NULL, NULL,
                   "index %s was left unfinished by an interrupted build: rebuilding it from %s",
                   dir, file);
        if ((rc = cairn__bm25_clear(ix)) != 0) {
            cairn__log(CAIRN__LOG_ERROR, "index", "error", NULL, NULL, "%s",
                       cairn__bm25_errmsg(ix));
            cairn__bm25_close(ix);
            corpus_close(&c);
            free(a.dir);
            return cairn__exit_code(rc);
        }
    }
    size_t dropped = 0;
    uint64_t added = 0, replaced = 0, in_batch = 0, committed = 0;
    cairn__progress prog;
    cairn__progress_start(&prog, "index", "documents");
    prog.bytes_total = c.len;
    pos = lineno = 0;
    rc = cairn__bm25_begin(ix);
    if (rc)
        snprintf(err, sizeof err, "%s", cairn__bm25_errmsg(ix));
    while (!rc && next_line(&c, &pos, &lineno, &p, &n)) {
        rc = parse_line(file, lineno, p, n, 1, &d, err, sizeof err);
        if (rc)
            break;
        int rep = 0;
        rc = cairn__bm25_add(ix, d.id, d.text, d.text_len, d.extra, &rep);
        if (rc)
            snprintf(err, sizeof err, "%s:%zu: %s", file, lineno, cairn__bm25_errmsg(ix));
        doc_free(&d);
        if (rc)
            break;
        rep ? replaced++ : added++;
        corpus_drop(&c, pos, &dropped);
        prog.done = added + replaced;
        prog.bytes_done = pos;
        cairn__progress_tick(&prog, 0);
        if (batch > 0 && ++in_batch == (uint64_t)batch) {
            if ((rc = cairn__bm25_commit(ix)) != 0 || (rc = cairn__bm25_begin(ix)) != 0) {
                snprintf(err, sizeof err, "%s", cairn__bm25_errmsg(ix));
                break;
            }
            committed += in_batch;
            in_batch = 0;
        }
    }
    if (!rc) {
        rc = cairn__bm25_commit(ix);
        if (rc)
            snprintf(err, sizeof err, "%s", cairn__bm25_errmsg(ix));
        else
            committed += in_batch;
    } else {
        cairn__bm25_abort(ix);
    }
    cairn__progress_end(&prog);
    corpus_close(&c);
    if (rc) {
        if (committed)
            cairn__log(CAIRN__LOG_ERROR, "index", "partial", NULL, NULL,
                       "%s (the first %llu documents were committed in batches of %ld; the rest "
                       "was not written)",
                       err, (unsigned long long)committed, batch);
        else
            cairn__log(CAIRN__LOG_ERROR, "index", "error", NULL, NULL, "%s (nothing was written)",
                       err);
        cairn__bm25_close(ix);
        free(a.dir);
        return cairn__exit_code(rc);
    }
    cairn__bm25_info info;
    rc = cairn__bm25_info_get(ix, &info);
    if (rc)
        cairn__log(CAIRN__LOG_ERROR, "index", "error", NULL, NULL, "%s", cairn__bm25_errmsg(ix));
    size_t peak = cairn__bm25_batch_peak(ix);
    cairn__bm25_close(ix);
    double secs = now_s() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mb = (double)ru.ru_maxrss / 1024.0; /* kB on Linux */
    if (!rc && json) {
        json_t *o =
            json_pack("{s:s, s:s, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:I, s:f}", "corpus", file,
                      "index", dir, "added", (json_int_t)added, "replaced", (json_int_t)replaced,
                      "docs", (json_int_t)info.n_docs, "avgdl", info.avgdl, "terms",
                      (json_int_t)info.n_terms, "tokens", (json_int_t)info.total_len, "seconds",
                      secs, "buffer_peak_bytes", (json_int_t)peak, "peak_rss_mb", rss_mb);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(o);
    } else if (!rc) {
        printf("indexed %s: %llu added, %llu replaced (%.2f s)\n", file, (unsigned long long)added,
               (unsigned long long)replaced, secs);
        printf("index %s: %llu documents, avgdl %.2f tokens, %llu terms\n", dir,
               (unsigned long long)info.n_docs, info.avgdl, (unsigned long long)info.n_terms);
        printf("build buffers: peak %.1f MB (cap %ld MB); process peak RSS %.0f MB\n",
               (double)peak / 1048576.0, memory_mb, rss_mb);
    }
    fflush(stdout);
    free(a.dir);
    return cairn__exit_code(rc);
}
