/* bench/retrieve/bench_retrieve.c - cairn's BM25 index against Xapian and SQLite FTS5's bm25(),
 * measured in one process, on the same corpus and queries, in alternating passes.
 *
 * The corpus is synthetic but shaped like text (corpus.h: a 50k-word Zipf vocabulary, documents
 * of 20..200 words, a fixed seed; --docs N up to millions shows how each engine's cost grows),
 * or a JSONL file given with --corpus ({"id", "text"} a line, as `cairn index` reads). Queries
 * are 2..4 words OR-ed, generated from the same law (by default keeping the most common words:
 * --min-rank 0, the queries that hurt), or a JSONL file given with --queries ({"query": ...} or
 * {"text": ...} a line). Every engine gets the same tokens: cairn's tokenizer splits documents
 * and queries, and Xapian is fed its terms with their counts (add_term with wdf), so Xapian's
 * document length is cairn's dl. FTS5 tokenizes for itself (unicode61; on the synthetic corpus,
 * lower-case ASCII words, the same tokens); its queries are cairn's terms quoted and OR-ed.
 *
 * Engines, each answering the top 10 with id and text: cairn's pruned search (block-max
 * MaxScore, the default), cairn's exhaustive one (every posting scored; the pruned results are
 * checked against it, ids and score bits), Xapian (BM25Weight, searching its compacted database)
 * and FTS5. A pass runs every query on every engine in turn, engine after engine; the first pass
 * warms up, the next --passes are timed, in this thread's CPU time. Per-query times give p50/p99
 * and a table by bucket (how many postings the query's terms hold).
 *
 * The rankings are close, not identical. With BM25Weight(k1, 0, 1, b, 0) Xapian's term weight
 * is cairn's tf*(k1+1)/(tf + k1*(1-b+b*dl/avgdl)) times its idf, ln((N-n+0.5)/(n+0.5)) raised to
 * ln(1 + x/2) where x = (N-n+0.5)/(n+0.5) < 2; cairn uses Lucene's ln(1 + x). The two agree to
 * within ln(1+1/x) for rare terms and differ for common ones. FTS5 uses ln(x) clamped to 1e-6.
 * Top-10 agreement with cairn's exhaustive results is reported, not asserted.
 *
 * Not a test: it prints numbers and never fails on a time.
 */
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/retrieve/corpus.h"
#include "steps/bm25.h"
#ifdef HAVE_XAPIAN
#include "bench/retrieve/xapian_peer.h"
#endif

#define TOPK 10
#define MAX_QTERMS 64

enum { E_PRUNED, E_EXH, E_XAPIAN, E_FTS, NE };
static const char *const ename[NE] = {"cairn pruned", "cairn exhaustive", "Xapian", "FTS5"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Queries are timed in this thread's CPU time: every engine answers from memory in this one
 * thread, so what other processes on a shared machine do does not land on any of them. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    remove(p);
    return 0;
}

static double tree_bytes;
static int size_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)p, (void)f;
    if (flag == FTW_F)
        tree_bytes += (double)st->st_size;
    return 0;
}

/* Bytes under a file or directory, in MB. */
static double tree_mb(const char *path)
{
    tree_bytes = 0;
    nftw(path, size_one, 16, FTW_PHYS);
    return tree_bytes / 1048576.0;
}

static int usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--docs N | --corpus FILE.jsonl] [--queries Q | --queries FILE.jsonl]\n"
            "       [--min-rank R] [--passes P] [--dir DIR] [--keep] [--no-fts] [--no-xapian] "
            "[--json]\n"
            "  --docs N          generated corpus of N documents (default 100000; 1000000 and "
            "more work)\n"
            "  --corpus FILE     a JSONL corpus instead, {\"id\", \"text\"} a line\n"
            "  --queries Q       Q generated queries (default 1000), or, if not a number, a "
            "JSONL file\n"
            "                    of queries, {\"query\": ...} or {\"text\": ...} a line\n"
            "  --min-rank R      generated query words skip the R most frequent words (default "
            "0)\n"
            "  --passes P        timed passes after the warm-up (default 2)\n"
            "  --dir DIR         work directory (default: a fresh one under $TMPDIR or /tmp)\n"
            "  --keep            keep the indexes\n"
            "  --dump FILE       write the generated corpus as JSONL (for `cairn index`) and "
            "exit\n"
            "  --no-fts          skip FTS5;  --no-xapian  skip Xapian\n"
            "  --json            one JSON object instead of text\n",
            prog);
    return 64;
}

/* ------------------------------------------------------------------ input */

typedef struct doc {
    char *id, *text;
} doc;

/* Each non-blank line's object; field is the first of names it holds as a string. */
static int read_jsonl(const char *path, const char *const *names, size_t nn, char ***out_id,
                      char ***out_text, long *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "bench-retrieve: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0, have = 0;
    long lineno = 0;
    ssize_t len;
    *n = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t i = 0;
        while (i < (size_t)len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n'))
            i++;
        if (i == (size_t)len)
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)len, 0, &je);
        const char *text = NULL;
        for (size_t k = 0; o && !text && k < nn; k++)
            text = json_string_value(json_object_get(o, names[k]));
        if (!text) {
            fprintf(stderr, "bench-retrieve: %s:%ld: %s\n", path, lineno,
                    o ? "no text field" : je.text);
            json_decref(o);
            free(line);
            fclose(f);
            return -1;
        }
        if ((size_t)*n == have) {
            have = have ? have * 2 : 1024;
            *out_text = realloc(*out_text, have * sizeof **out_text);
            if (out_id)
                *out_id = realloc(*out_id, have * sizeof **out_id);
        }
        (*out_text)[*n] = strdup(text);
        if (out_id) {
            const char *id = json_string_value(json_object_get(o, "id"));
            char buf[32];
            if (!id) {
                snprintf(buf, sizeof buf, "line%ld", lineno);
                id = buf;
            }
            (*out_id)[*n] = strdup(id);
        }
        (*n)++;
        json_decref(o);
    }
    free(line);
    fclose(f);
    return 0;
}

/* A text's tokens (cairn's tokenizer), copied into one buffer. */
typedef struct toks {
    char *buf;
    size_t n, cap;
    size_t *off, *len;
    size_t nt, tcap;
} toks;

static void tok_cb(const char *tok, size_t len, void *arg)
{
    toks *t = arg;
    if (t->n + len > t->cap) {
        t->cap = (t->n + len) * 2 + 256;
        t->buf = realloc(t->buf, t->cap);
    }
    if (t->nt == t->tcap) {
        t->tcap = t->tcap ? t->tcap * 2 : 256;
        t->off = realloc(t->off, t->tcap * sizeof *t->off);
        t->len = realloc(t->len, t->tcap * sizeof *t->len);
    }
    memcpy(t->buf + t->n, tok, len);
    t->off[t->nt] = t->n, t->len[t->nt++] = len;
    t->n += len;
}

static int cmp_tok(const void *a, const void *b, void *arg)
{
    const toks *t = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    size_t lx = t->len[x], ly = t->len[y], l = lx < ly ? lx : ly;
    int c = memcmp(t->buf + t->off[x], t->buf + t->off[y], l);
    return c ? c : (lx > ly) - (lx < ly);
}

/* The unique terms of text with their counts: term[i] (len[i] bytes) into t's buffer. */
typedef struct terms {
    const char **term;
    size_t *len, *idx;
    uint32_t *cnt;
    size_t n, cap;
} terms;

static void unique_terms(toks *t, terms *u, const char *text, size_t tl)
{
    t->n = t->nt = 0;
    cairn__bm25_tokenize(text, tl, tok_cb, t);
    if (t->nt > u->cap) {
        u->cap = t->nt * 2;
        u->term = realloc(u->term, u->cap * sizeof *u->term);
        u->len = realloc(u->len, u->cap * sizeof *u->len);
        u->idx = realloc(u->idx, u->cap * sizeof *u->idx);
        u->cnt = realloc(u->cnt, u->cap * sizeof *u->cnt);
    }
    for (size_t i = 0; i < t->nt; i++)
        u->idx[i] = i;
    qsort_r(u->idx, t->nt, sizeof *u->idx, cmp_tok, t);
    u->n = 0;
    for (size_t i = 0; i < t->nt; i++) {
        size_t j = u->idx[i];
        if (u->n && cmp_tok(&u->idx[i - 1], &j, t) == 0) {
            u->cnt[u->n - 1]++;
            continue;
        }
        u->term[u->n] = t->buf + t->off[j], u->len[u->n] = t->len[j], u->cnt[u->n++] = 1;
    }
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of v[0..n) (sorts v). */
static double quantile(double *v, long n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    long i = (long)ceil(q * (double)n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    long n_docs = 100000, n_queries = 1000, min_rank = 0, passes = 2;
    int json = 0, keep = 0, no_fts = 0, no_xapian = 0;
    const char *dir_arg = NULL, *corpus_file = NULL, *queries_file = NULL, *dump = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--no-fts"))
            no_fts = 1;
        else if (!strcmp(argv[i], "--no-xapian"))
            no_xapian = 1;
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else if (!strcmp(argv[i], "--docs") && i + 1 < argc)
            n_docs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--corpus") && i + 1 < argc)
            corpus_file = argv[++i];
        else if (!strcmp(argv[i], "--queries") && i + 1 < argc) {
            const char *a = argv[++i];
            if (a[0] && strspn(a, "0123456789") == strlen(a))
                n_queries = atol(a);
            else
                queries_file = a;
        } else if (!strcmp(argv[i], "--min-rank") && i + 1 < argc)
            min_rank = atol(argv[++i]);
        else if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir_arg = argv[++i];
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc)
            dump = argv[++i];
        else
            return usage(argv[0]);
    }
    if (n_docs < 1 || n_queries < 1 || passes < 1 || min_rank < 0 || min_rank > CORPUS_VOCAB - 100)
        return usage(argv[0]);
#ifndef HAVE_XAPIAN
    if (!no_xapian && !json)
        printf("Xapian: not built (install libxapian-dev and reconfigure); measuring without it\n");
    no_xapian = 1;
#endif
    char dir[4096];
    if (dir_arg) {
        snprintf(dir, sizeof dir, "%s", dir_arg);
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "bench-retrieve: %s: %s\n", dir, strerror(errno));
            return 74;
        }
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/cairn-bench-retrieve-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "bench-retrieve: mkdtemp: %s\n", strerror(errno));
            return 74;
        }
    }

    /* ---- corpus and queries */
    corpus_vocab();
    char **ids = NULL, **texts = NULL, **queries = NULL;
    uint64_t total_words = 0;
    if (corpus_file) {
        static const char *const f[] = {"text"};
        if (read_jsonl(corpus_file, f, 1, &ids, &texts, &n_docs) || n_docs == 0)
            return 65;
        for (long d = 0; d < n_docs; d++)
            total_words += cairn__bm25_tokenize(texts[d], strlen(texts[d]), NULL, NULL);
    } else {
        ids = calloc((size_t)n_docs, sizeof *ids);
        texts = calloc((size_t)n_docs, sizeof *texts);
        for (long d = 0; d < n_docs; d++) {
            char *t = malloc(200 * 16 + 1), id[24];
            int len = corpus_doc(t);
            char *small = realloc(t, strlen(t) + 1); /* 1M documents must fit in memory */
            texts[d] = small ? small : t;
            snprintf(id, sizeof id, "doc%ld", d);
            ids[d] = strdup(id);
            total_words += (uint64_t)len;
        }
    }
    if (dump) { /* the generated words are [a-z] and spaces: no JSON escaping needed */
        FILE *f = fopen(dump, "w");
        for (long d = 0; f && d < n_docs; d++)
            fprintf(f, "{\"id\": \"%s\", \"text\": \"%s\"}\n", ids[d], texts[d]);
        if (!f || fclose(f) != 0) {
            fprintf(stderr, "bench-retrieve: %s: %s\n", dump, strerror(errno));
            return 74;
        }
        for (long d = 0; d < n_docs; d++)
            free(texts[d]), free(ids[d]);
        free(texts), free(ids);
        rmdir(dir);
        return 0;
    }
    if (queries_file) {
        static const char *const f[] = {"query", "text"};
        if (read_jsonl(queries_file, f, 2, NULL, &queries, &n_queries) || n_queries == 0)
            return 65;
    } else {
        queries = calloc((size_t)n_queries, sizeof *queries);
        for (long q = 0; q < n_queries; q++) {
            queries[q] = malloc(80);
            corpus_query(queries[q], (int)min_rank);
        }
    }
    if (!json) {
        if (corpus_file)
            printf("corpus: %s, %ld docs (avg %.1f tokens)\n", corpus_file, n_docs,
                   (double)total_words / (double)n_docs);
        else
            printf("corpus: %ld docs, %d-word Zipf vocabulary (s=1), 20-200 words each (avg "
                   "%.1f)\n",
                   n_docs, CORPUS_VOCAB, (double)total_words / (double)n_docs);
        if (queries_file)
            printf("queries: %s, %ld\n", queries_file, n_queries);
        else
            printf("queries: %ld of 2-4 words OR-ed, ranks >= %ld%s\n", n_queries, min_rank,
                   min_rank ? "" : " (common words kept)");
    }

    /* ---- cairn: index */
    char ixdir[4200], err[1024], path[4300];
    snprintf(ixdir, sizeof ixdir, "%s/index", dir);
    cairn__bm25 *ix = NULL;
    double t0 = now_s();
    int rc = cairn__bm25_open(ixdir, 1, &ix, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench-retrieve: %s\n", err);
        return 74;
    }
    rc = cairn__bm25_begin(ix);
    for (long d = 0; !rc && d < n_docs; d++)
        rc = cairn__bm25_add(ix, ids[d], texts[d], strlen(texts[d]), NULL, NULL);
    rc = rc ? rc : cairn__bm25_commit(ix);
    if (rc) {
        fprintf(stderr, "bench-retrieve: cairn index: %s\n", cairn__bm25_errmsg(ix));
        return 74;
    }
    cairn__bm25_close(ix);
    double build_s[NE] = {0}, size_mb[NE] = {0}, xapian_raw_mb = 0, xapian_compact_s = 0;
    build_s[E_PRUNED] = build_s[E_EXH] = now_s() - t0;
    size_mb[E_PRUNED] = size_mb[E_EXH] = tree_mb(ixdir);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_after_cairn_mb = (double)ru.ru_maxrss / 1024.0;

    /* ---- Xapian: index (cairn's tokens, as wdf), then a compacted copy to search */
    toks tk = {0};
    terms tu = {0};
    char xdir[4200], xcdir[4200];
    snprintf(xdir, sizeof xdir, "%s/xapian", dir);
    snprintf(xcdir, sizeof xcdir, "%s/xapian-compact", dir);
#ifdef HAVE_XAPIAN
    if (!no_xapian) {
        t0 = now_s();
        xpeer *xw = xpeer_create(xdir, err, sizeof err);
        if (!xw) {
            fprintf(stderr, "bench-retrieve: %s\n", err);
            return 74;
        }
        char *data = NULL;
        size_t data_cap = 0;
        for (long d = 0; d < n_docs; d++) {
            size_t il = strlen(ids[d]), tl = strlen(texts[d]);
            unique_terms(&tk, &tu, texts[d], tl);
            if (il + 1 + tl > data_cap) {
                data_cap = (il + 1 + tl) * 2;
                data = realloc(data, data_cap);
            }
            memcpy(data, ids[d], il + 1); /* id \0 text */
            memcpy(data + il + 1, texts[d], tl);
            if (xpeer_add(xw, tu.term, tu.len, tu.cnt, tu.n, data, il + 1 + tl, err, sizeof err)) {
                fprintf(stderr, "bench-retrieve: %s\n", err);
                return 74;
            }
        }
        free(data);
        if (xpeer_commit(xw, err, sizeof err)) {
            fprintf(stderr, "bench-retrieve: %s\n", err);
            return 74;
        }
        xpeer_free(xw);
        build_s[E_XAPIAN] = now_s() - t0;
        xapian_raw_mb = tree_mb(xdir);
        t0 = now_s();
        if (xpeer_compact(xdir, xcdir, err, sizeof err)) {
            fprintf(stderr, "bench-retrieve: %s\n", err);
            return 74;
        }
        xapian_compact_s = now_s() - t0;
        size_mb[E_XAPIAN] = tree_mb(xcdir);
    }
#endif

    /* ---- FTS5: index */
    sqlite3 *db = NULL;
    sqlite3_stmt *sel = NULL;
    if (!no_fts) {
        snprintf(path, sizeof path, "%s/fts.db", dir);
        unlink(path);
        t0 = now_s();
        if (sqlite3_open(path, &db) != SQLITE_OK ||
            sqlite3_exec(
                db,
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-262144;"
                "PRAGMA mmap_size=4294967296;"
                "CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, text);"
                "BEGIN;",
                NULL, NULL, NULL) != SQLITE_OK) {
            fprintf(stderr, "bench-retrieve: sqlite: %s (is FTS5 compiled in?)\n",
                    sqlite3_errmsg(db));
            return 74;
        }
        sqlite3_stmt *ins;
        sqlite3_prepare_v2(db, "INSERT INTO t(id, text) VALUES (?1, ?2)", -1, &ins, NULL);
        for (long d = 0; d < n_docs; d++) {
            sqlite3_bind_text(ins, 1, ids[d], -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 2, texts[d], -1, SQLITE_STATIC);
            if (sqlite3_step(ins) != SQLITE_DONE) {
                fprintf(stderr, "bench-retrieve: sqlite insert: %s\n", sqlite3_errmsg(db));
                return 74;
            }
            sqlite3_reset(ins);
        }
        sqlite3_finalize(ins);
        sqlite3_exec(db, "COMMIT; INSERT INTO t(t) VALUES('optimize');", NULL, NULL, NULL);
        build_s[E_FTS] = now_s() - t0;
        size_mb[E_FTS] = tree_mb(path);
        if (sqlite3_prepare_v2(db,
                               "SELECT id, text FROM t WHERE t MATCH ?1 ORDER BY bm25(t) LIMIT 10",
                               -1, &sel, NULL) != SQLITE_OK) {
            fprintf(stderr, "bench-retrieve: sqlite: %s\n", sqlite3_errmsg(db));
            return 74;
        }
    }

    /* ---- queries: passes alternate engines; results of the last kept for agreement */
    char *(*res)[NE][TOPK] = calloc((size_t)n_queries, sizeof *res);
    double(*score_exh)[TOPK] = calloc((size_t)n_queries, sizeof *score_exh);
    int(*cnt)[NE] = calloc((size_t)n_queries, sizeof *cnt);
    double(*tq)[NE] = calloc((size_t)n_queries, sizeof *tq), tsum[NE] = {0};
    uint64_t *post_all = calloc((size_t)n_queries, sizeof(uint64_t)),
             *post_read = calloc((size_t)n_queries, sizeof(uint64_t));
    long mismatches = 0;
    int on[NE] = {1, 1, !no_xapian, !no_fts};

    rc = cairn__bm25_open(ixdir, 0, &ix, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench-retrieve: %s\n", err);
        return 74;
    }
#ifdef HAVE_XAPIAN
    xpeer *xr = NULL;
    if (!no_xapian && !(xr = xpeer_open(xcdir, CAIRN__BM25_K1, CAIRN__BM25_B, err, sizeof err))) {
        fprintf(stderr, "bench-retrieve: %s\n", err);
        return 74;
    }
#endif
    size_t text_bytes = 0;
    for (long pass = 0; pass <= passes; pass++) {
        int last = pass == passes;
        /* the exhaustive path before the pruned one: its results are the reference */
        static const int order[NE] = {E_EXH, E_PRUNED, E_XAPIAN, E_FTS};
        for (int oi = 0; oi < NE; oi++) {
            int e = order[oi];
            if (!on[e])
                continue;
            double te = cpu_s();
            for (long q = 0; q < n_queries; q++) {
                double t1 = cpu_s();
                int n = 0;
                if (e == E_PRUNED || e == E_EXH) {
                    cairn__bm25_hit *h;
                    size_t nh;
                    int r = e == E_PRUNED
                                ? cairn__bm25_search(ix, queries[q], TOPK, &h, &nh)
                                : cairn__bm25_search_exhaustive(ix, queries[q], TOPK, &h, &nh);
                    if (r != 0) {
                        fprintf(stderr, "bench-retrieve: search: %s\n", cairn__bm25_errmsg(ix));
                        return 74;
                    }
                    n = (int)nh;
                    for (int i = 0; i < n; i++)
                        text_bytes += strlen(h[i].text);
                    if (last && e == E_EXH) {
                        post_all[q] = cairn__bm25_postings_read(ix);
                        for (int i = 0; i < n; i++)
                            score_exh[q][i] = h[i].score;
                    } else if (last) {
                        post_read[q] = cairn__bm25_postings_read(ix);
                        int same = n == cnt[q][E_EXH];
                        for (int i = 0; same && i < n; i++)
                            same = !strcmp(h[i].id, res[q][E_EXH][i]) &&
                                   !memcmp(&h[i].score, &score_exh[q][i], sizeof(double));
                        if (!same && mismatches++ == 0)
                            fprintf(stderr, "bench-retrieve: pruned != exhaustive for '%s'\n",
                                    queries[q]);
                    }
                    for (int i = 0; last && i < n; i++) {
                        res[q][e][i] = h[i].id;
                        h[i].id = NULL;
                    }
                    cairn__bm25_hits_free(h, nh);
                } else if (e == E_XAPIAN) {
#ifdef HAVE_XAPIAN
                    /* tokenized here, in the timed part, as cairn's search tokenizes */
                    unique_terms(&tk, &tu, queries[q], strlen(queries[q]));
                    xpeer_hit xh[TOPK];
                    size_t nh;
                    if (xpeer_search(xr, tu.term, tu.len, tu.n < MAX_QTERMS ? tu.n : MAX_QTERMS,
                                     TOPK, xh, &nh, err, sizeof err)) {
                        fprintf(stderr, "bench-retrieve: %s\n", err);
                        return 74;
                    }
                    n = (int)nh;
                    for (int i = 0; i < n; i++) {
                        size_t il = strnlen(xh[i].data, xh[i].dlen);
                        text_bytes += xh[i].dlen - il;
                        if (last)
                            res[q][e][i] = strndup(xh[i].data, il);
                    }
#endif
                } else {
                    unique_terms(&tk, &tu, queries[q], strlen(queries[q]));
                    char m[4096];
                    size_t ml = 0;
                    for (size_t i = 0; i < tu.n && ml + tu.len[i] * 2 + 8 < sizeof m; i++) {
                        if (i)
                            ml += (size_t)snprintf(m + ml, sizeof m - ml, " OR ");
                        m[ml++] = '"';
                        for (size_t c = 0; c < tu.len[i]; c++) {
                            if (tu.term[i][c] == '"')
                                m[ml++] = '"';
                            m[ml++] = tu.term[i][c];
                        }
                        m[ml++] = '"';
                    }
                    m[ml] = 0;
                    sqlite3_bind_text(sel, 1, m, -1, SQLITE_TRANSIENT);
                    int s;
                    while ((s = sqlite3_step(sel)) == SQLITE_ROW) {
                        text_bytes += (size_t)sqlite3_column_bytes(sel, 1);
                        if (last && n < TOPK)
                            res[q][e][n] = strdup((const char *)sqlite3_column_text(sel, 0));
                        n++;
                    }
                    if (s != SQLITE_DONE) {
                        fprintf(stderr, "bench-retrieve: sqlite query '%s': %s\n", m,
                                sqlite3_errmsg(db));
                        return 74;
                    }
                    sqlite3_reset(sel);
                }
                if (last)
                    cnt[q][e] = n;
                if (pass)
                    tq[q][e] += cpu_s() - t1;
            }
            if (pass)
                tsum[e] += cpu_s() - te;
        }
    }
    cairn__bm25_close(ix);
#ifdef HAVE_XAPIAN
    xpeer_free(xr);
#endif
    if (sel)
        sqlite3_finalize(sel);
    if (db)
        sqlite3_close(db);
    free(tk.buf), free(tk.off), free(tk.len);
    free(tu.term), free(tu.len), free(tu.idx), free(tu.cnt);

    /* ---- per engine: q/s, p50/p99 of a query's time, agreement with exhaustive cairn */
    double qps[NE] = {0}, p50[NE] = {0}, p99[NE] = {0}, overlap[NE] = {0}, ident[NE] = {0},
           same_order[NE] = {0};
    double *v = malloc((size_t)n_queries * sizeof *v);
    for (int e = 0; e < NE; e++) {
        if (!on[e])
            continue;
        qps[e] = (double)n_queries * (double)passes / tsum[e];
        for (long q = 0; q < n_queries; q++)
            v[q] = tq[q][e] / (double)passes;
        p50[e] = quantile(v, n_queries, 0.50);
        p99[e] = quantile(v, n_queries, 0.99);
        long compared = 0;
        for (long q = 0; q < n_queries; q++) {
            int a = cnt[q][E_EXH], b = cnt[q][e] < TOPK ? cnt[q][e] : TOPK, denom = a > b ? a : b,
                common = 0, ord = a == b;
            if (!denom)
                continue;
            for (int i = 0; i < a; i++) {
                for (int j = 0; j < b; j++)
                    if (!strcmp(res[q][E_EXH][i], res[q][e][j])) {
                        common++;
                        break;
                    }
                if (ord && strcmp(res[q][E_EXH][i], res[q][e][i]))
                    ord = 0;
            }
            overlap[e] += (double)common / denom;
            ident[e] += common == denom && a == b;
            same_order[e] += ord;
            compared++;
        }
        if (compared)
            overlap[e] /= (double)compared, ident[e] /= (double)compared,
                same_order[e] /= (double)compared;
    }
    free(v);

    /* buckets by the postings the query's terms hold (what exhaustive scoring reads) */
    enum { NB = 5 };
    static const char *const bname[NB] = {"postings <10k", "postings 10k-100k", "postings 100k-1M",
                                          "postings 1M-10M", "postings >=10M"};
    long bn[NB] = {0};
    double bt[NB][NE] = {{0}}, ball[NB] = {0}, bread[NB] = {0};
    uint64_t sum_all = 0, sum_read = 0;
    for (long q = 0; q < n_queries; q++) {
        uint64_t pa = post_all[q];
        int i = pa < 10000 ? 0 : pa < 100000 ? 1 : pa < 1000000 ? 2 : pa < 10000000 ? 3 : 4;
        bn[i]++, ball[i] += (double)pa, bread[i] += (double)post_read[q];
        for (int e = 0; e < NE; e++)
            bt[i][e] += tq[q][e];
        sum_all += pa, sum_read += post_read[q];
    }
    double r_x = on[E_XAPIAN] ? qps[E_PRUNED] / qps[E_XAPIAN] : 0,
           r_f = on[E_FTS] ? qps[E_PRUNED] / qps[E_FTS] : 0;

    if (json) {
        printf("{\"docs\":%ld,\"avg_tokens\":%.2f,\"queries\":%ld,\"min_rank\":%ld,\"passes\":%ld,"
               "\"corpus\":\"%s\",\"pruned_mismatches\":%ld,\"postings_per_query\":%.1f,"
               "\"postings_read_per_query\":%.1f,\"cairn_over_xapian\":%.3f,"
               "\"cairn_over_fts5\":%.3f,\"xapian_uncompacted_mb\":%.2f,"
               "\"xapian_compact_s\":%.3f,\"build_peak_rss_mb\":%.1f,\"engines\":[",
               n_docs, (double)total_words / (double)n_docs, n_queries, min_rank, passes,
               corpus_file ? "file" : "generated", mismatches, (double)sum_all / (double)n_queries,
               (double)sum_read / (double)n_queries, r_x, r_f, xapian_raw_mb, xapian_compact_s,
               rss_after_cairn_mb);
        int first = 1;
        for (int e = 0; e < NE; e++) {
            if (!on[e])
                continue;
            printf("%s{\"engine\":\"%s\",\"qps\":%.1f,\"p50_ms\":%.4f,\"p99_ms\":%.4f,"
                   "\"build_s\":%.3f,\"index_mb\":%.2f,\"overlap_vs_exhaustive\":%.4f,"
                   "\"identical_sets\":%.4f,\"identical_order\":%.4f}",
                   first ? "" : ",", ename[e], qps[e], p50[e] * 1e3, p99[e] * 1e3, build_s[e],
                   size_mb[e], overlap[e], ident[e], same_order[e]);
            first = 0;
        }
        printf("]}\n");
    } else {
        printf("%-17s %9s %9s %9s %9s %10s %8s %8s %8s\n", "engine", "q/s", "p50 ms", "p99 ms",
               "build s", "index MB", "top10 ov", "same set", "same ord");
        for (int e = 0; e < NE; e++)
            if (on[e])
                printf("%-17s %9.1f %9.3f %9.3f %9.2f %10.1f %8.3f %7.1f%% %7.1f%%\n", ename[e],
                       qps[e], p50[e] * 1e3, p99[e] * 1e3, build_s[e], size_mb[e], overlap[e],
                       100 * ident[e], 100 * same_order[e]);
        if (on[E_XAPIAN])
            printf("Xapian index:  %.1f MB as built, %.1f MB compacted (compaction %.2f s, not "
                   "in its build time); searched compacted\n",
                   xapian_raw_mb, size_mb[E_XAPIAN], xapian_compact_s);
        printf("ratios:        cairn pruned / exhaustive %.2fx", qps[E_PRUNED] / qps[E_EXH]);
        if (on[E_XAPIAN])
            printf("   / Xapian %.2fx (target >= 2x at 100k, 1.5x at 1M)", r_x);
        if (on[E_FTS])
            printf("   / FTS5 %.2fx", r_f);
        printf("\n");
        if (on[E_XAPIAN])
            printf("index size:    cairn / Xapian compacted %.2fx (target <= 1.5x)\n",
                   size_mb[E_PRUNED] / size_mb[E_XAPIAN]);
        printf("postings:      %.0f a query held, %.0f read by the pruned search (%.1f%%)\n",
               (double)sum_all / (double)n_queries, (double)sum_read / (double)n_queries,
               sum_all ? 100.0 * (double)sum_read / (double)sum_all : 0);
        printf("pruned top-10: %s (%ld of %ld queries differ from exhaustive in ids, order or "
               "score bits)\n",
               mismatches ? "MISMATCH" : "identical", mismatches, n_queries);
        printf("peak RSS after the cairn build: %.0f MB (the corpus in memory included)\n",
               rss_after_cairn_mb);
        printf("%-18s %7s %10s %10s %10s %10s %8s %10s %10s\n", "bucket", "queries", "pruned/s",
               "exhaust/s", "Xapian/s", "FTS5/s", "pr/Xap", "postings", "read");
        for (int i = 0; i < NB; i++)
            if (bn[i])
                printf("%-18s %7ld %10.1f %10.1f %10.1f %10.1f %7.2fx %10.0f %10.0f\n", bname[i],
                       bn[i], passes * bn[i] / bt[i][E_PRUNED], passes * bn[i] / bt[i][E_EXH],
                       on[E_XAPIAN] ? passes * bn[i] / bt[i][E_XAPIAN] : 0,
                       on[E_FTS] ? passes * bn[i] / bt[i][E_FTS] : 0,
                       on[E_XAPIAN] ? bt[i][E_XAPIAN] / bt[i][E_PRUNED] : 0, ball[i] / bn[i],
                       bread[i] / bn[i]);
        printf("note: rankings differ by idf (see the top of bench_retrieve.c): Xapian's BM25 "
               "idf is\n      ln((N-n+0.5)/(n+0.5)) (softened below 2), cairn's Lucene's "
               "ln(1 + ...), FTS5's clamped ln.\n");
    }
    (void)text_bytes;
    for (long q = 0; q < n_queries; q++) {
        for (int e = 0; e < NE; e++)
            for (int i = 0; i < TOPK; i++)
                free(res[q][e][i]);
        free(queries[q]);
    }
    free(res), free(score_exh), free(cnt), free(tq), free(post_all), free(post_read);
    free(queries);
    for (long d = 0; d < n_docs; d++)
        free(texts[d]), free(ids[d]);
    free(texts), free(ids);
    if (!keep)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    else if (!json)
        printf("kept: %s\n", dir);
    return 0;
}
