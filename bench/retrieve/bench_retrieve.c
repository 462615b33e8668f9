/* bench/retrieve/bench_retrieve.c - cairn's BM25 index against SQLite FTS5's bm25(), measured in
 * the same run on the same corpus and queries.
 *
 * The corpus is synthetic but shaped like text: a 50k-word vocabulary drawn with a Zipf law
 * (p(rank r) ~ 1/r), documents of 20..200 words, a fixed seed so every run sees the same bytes.
 * Queries are 2..4 distinct words OR-ed together, drawn from the same law but skipping the most
 * frequent ranks (--min-rank, default 10), as a search box's stop-word list would. Three paths
 * return the top 10 with id and text, each run once to warm up and once timed: cairn's pruned
 * search (block-max MaxScore, the default), cairn's exhaustive one (every posting scored; the
 * pruned results are checked against it, ids and score bits), and FTS5, which scores every
 * match. Queries are also timed one by one, for a table by bucket: how many postings the
 * query's terms hold (what exhaustive scoring reads) and how many words it has, with the
 * postings the pruned search actually read.
 *
 * The two rankings are not meant to be identical: FTS5's bm25() uses idf = ln((N-n+0.5)/(n+0.5))
 * clamped to 1e-6 when it would be <= 0, cairn (like Lucene/Elasticsearch) ln(1+(N-n+0.5)/(n+0.5)).
 * For rare terms the two are close; for common ones FTS5's idf is much smaller, so rankings
 * differ mostly where a common term decides the order. The overlap is reported, not asserted.
 *
 * Not a test: it prints numbers and never fails on a time.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/retrieve/corpus.h"
#include "steps/bm25.h"

#define TOPK 10

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Queries are timed in this thread's CPU time: both engines answer from memory in this one
 * thread, so what other processes on a shared machine do does not land on either. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void rm_rf(const char *dir)
{
    static const char *const files[] = {"data.mdb", "lock.mdb", "fts.db", "fts.db-journal"};
    char p[4200];
    snprintf(p, sizeof p, "%s/index", dir);
    for (size_t i = 0; i < 2; i++) {
        char f[4300];
        snprintf(f, sizeof f, "%s/%s", p, files[i]);
        unlink(f);
    }
    rmdir(p);
    for (size_t i = 2; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

static double file_mb(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / 1048576.0 : 0;
}

static int usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--docs N] [--queries Q] [--min-rank R] [--dir DIR] [--keep] [--no-fts] "
            "[--json]\n"
            "  --docs N      corpus size (default 100000)\n"
            "  --queries Q   number of queries (default 1000)\n"
            "  --min-rank R  query words skip the R most frequent words (default 10)\n"
            "  --dir DIR     work directory (default: a fresh one under $TMPDIR or /tmp)\n"
            "  --keep        keep the indexes\n"
            "  --no-fts      skip FTS5 (large corpora: cairn's two paths only)\n"
            "  --json        one JSON object instead of text\n",
            prog);
    return 64;
}

int main(int argc, char **argv)
{
    long n_docs = 100000, n_queries = 1000, min_rank = 10;
    int json = 0, keep = 0, no_fts = 0;
    const char *dir_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--no-fts"))
            no_fts = 1;
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else if (!strcmp(argv[i], "--docs") && i + 1 < argc)
            n_docs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--queries") && i + 1 < argc)
            n_queries = atol(argv[++i]);
        else if (!strcmp(argv[i], "--min-rank") && i + 1 < argc)
            min_rank = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir_arg = argv[++i];
        else
            return usage(argv[0]);
    }
    if (n_docs < 1 || n_queries < 1 || min_rank < 0 || min_rank > CORPUS_VOCAB - 100)
        return usage(argv[0]);
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

    /* ---- corpus */
    corpus_vocab();
    char **texts = calloc((size_t)n_docs, sizeof *texts);
    uint64_t total_words = 0;
    for (long d = 0; d < n_docs; d++) {
        char *t = malloc(200 * 16 + 1);
        int len = corpus_doc(t);
        char *small = realloc(t, strlen(t) + 1); /* 1M documents must fit in memory */
        t = small ? small : t;
        texts[d] = t;
        total_words += (uint64_t)len;
    }
    char(*queries)[80] = calloc((size_t)n_queries, sizeof *queries);
    for (long q = 0; q < n_queries; q++)
        corpus_query(queries[q], (int)min_rank);
    if (!json)
        printf("corpus: %ld docs, %d-word Zipf vocabulary (s=1), 20-200 words each (avg %.1f); "
               "%ld queries of 2-4 words OR-ed, ranks >= %ld\n",
               n_docs, CORPUS_VOCAB, (double)total_words / (double)n_docs, n_queries, min_rank);

    /* ---- cairn: index */
    char ixdir[4200], err[1024];
    snprintf(ixdir, sizeof ixdir, "%s/index", dir);
    cairn__bm25 *ix = NULL;
    double t0 = now_s();
    int rc = cairn__bm25_open(ixdir, 1, &ix, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench-retrieve: %s\n", err);
        return 74;
    }
    rc = cairn__bm25_begin(ix);
    for (long d = 0; !rc && d < n_docs; d++) {
        char id[24];
        snprintf(id, sizeof id, "doc%ld", d);
        rc = cairn__bm25_add(ix, id, texts[d], strlen(texts[d]), NULL, NULL);
    }
    rc = rc ? rc : cairn__bm25_commit(ix);
    if (rc) {
        fprintf(stderr, "bench-retrieve: cairn index: %s\n", cairn__bm25_errmsg(ix));
        return 74;
    }
    cairn__bm25_close(ix);
    double cairn_index_s = now_s() - t0;
    char path[4300];
    snprintf(path, sizeof path, "%s/data.mdb", ixdir);
    double cairn_mb = file_mb(path);

    /* ---- FTS5: index */
    sqlite3 *db = NULL;
    double fts_index_s = 0, fts_mb = 0;
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
            char id[24];
            snprintf(id, sizeof id, "doc%ld", d);
            sqlite3_bind_text(ins, 1, id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(ins, 2, texts[d], -1, SQLITE_STATIC);
            if (sqlite3_step(ins) != SQLITE_DONE) {
                fprintf(stderr, "bench-retrieve: sqlite insert: %s\n", sqlite3_errmsg(db));
                return 74;
            }
            sqlite3_reset(ins);
        }
        sqlite3_finalize(ins);
        sqlite3_exec(db, "COMMIT; INSERT INTO t(t) VALUES('optimize');", NULL, NULL, NULL);
        fts_index_s = now_s() - t0;
        fts_mb = file_mb(path);
    }

    /* ---- queries: results kept for the overlap, times per query for the buckets */
    char *(*res_c)[TOPK] = calloc((size_t)n_queries, sizeof *res_c);
    char *(*res_f)[TOPK] = calloc((size_t)n_queries, sizeof *res_f);
    double(*score_c)[TOPK] = calloc((size_t)n_queries, sizeof *score_c);
    int *cnt_c = calloc((size_t)n_queries, sizeof *cnt_c),
        *cnt_f = calloc((size_t)n_queries, sizeof *cnt_f);
    double *t_pruned = calloc((size_t)n_queries, sizeof(double)),
           *t_exh = calloc((size_t)n_queries, sizeof(double)),
           *t_fts = calloc((size_t)n_queries, sizeof(double));
    uint64_t *post_all = calloc((size_t)n_queries, sizeof(uint64_t)),
             *post_read = calloc((size_t)n_queries, sizeof(uint64_t));
    long mismatches = 0;

    rc = cairn__bm25_open(ixdir, 0, &ix, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench-retrieve: %s\n", err);
        return 74;
    }
    /* exhaustive first (pass 0 warms up), then pruned, whose results must be the same */
    double exh_s = 0, cairn_s = 0;
    size_t text_bytes = 0;
    for (int path = 0; path < 2; path++)
        for (int pass = 0; pass < 2; pass++) {
            t0 = cpu_s();
            for (long q = 0; q < n_queries; q++) {
                cairn__bm25_hit *h;
                size_t n;
                double tq = cpu_s();
                int r = path ? cairn__bm25_search(ix, queries[q], TOPK, &h, &n)
                             : cairn__bm25_search_exhaustive(ix, queries[q], TOPK, &h, &n);
                tq = cpu_s() - tq;
                if (r != 0) {
                    fprintf(stderr, "bench-retrieve: search: %s\n", cairn__bm25_errmsg(ix));
                    return 74;
                }
                for (size_t i = 0; i < n; i++)
                    text_bytes += strlen(h[i].text);
                if (pass && !path) {
                    t_exh[q] = tq;
                    post_all[q] = cairn__bm25_postings_read(ix);
                    for (size_t i = 0; i < n; i++) {
                        res_c[q][i] = h[i].id;
                        h[i].id = NULL;
                        score_c[q][i] = h[i].score;
                    }
                    cnt_c[q] = (int)n;
                } else if (pass) {
                    t_pruned[q] = tq;
                    post_read[q] = cairn__bm25_postings_read(ix);
                    int same = (int)n == cnt_c[q];
                    for (size_t i = 0; same && i < n; i++)
                        same = !strcmp(h[i].id, res_c[q][i]) &&
                               !memcmp(&h[i].score, &score_c[q][i], sizeof(double));
                    if (!same && mismatches++ == 0)
                        fprintf(stderr, "bench-retrieve: pruned != exhaustive for '%s'\n",
                                queries[q]);
                }
                cairn__bm25_hits_free(h, n);
            }
            if (path)
                cairn_s = cpu_s() - t0;
            else
                exh_s = cpu_s() - t0;
        }
    cairn__bm25_close(ix);

    double fts_s = 0;
    if (!no_fts) {
        sqlite3_stmt *sel;
        if (sqlite3_prepare_v2(db,
                               "SELECT id, text FROM t WHERE t MATCH ?1 ORDER BY bm25(t) LIMIT 10",
                               -1, &sel, NULL) != SQLITE_OK) {
            fprintf(stderr, "bench-retrieve: sqlite: %s\n", sqlite3_errmsg(db));
            return 74;
        }
        for (int pass = 0; pass < 2; pass++) {
            t0 = cpu_s();
            for (long q = 0; q < n_queries; q++) {
                double tq = cpu_s();
                char m[120] = "";
                char copy[80];
                snprintf(copy, sizeof copy, "%s", queries[q]);
                char *save = NULL;
                for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
                    strcat(m, m[0] ? " OR " : "");
                    strcat(m, w);
                }
                sqlite3_bind_text(sel, 1, m, -1, SQLITE_TRANSIENT);
                int n = 0, s;
                while ((s = sqlite3_step(sel)) == SQLITE_ROW) {
                    const char *id = (const char *)sqlite3_column_text(sel, 0);
                    text_bytes += (size_t)sqlite3_column_bytes(sel, 1);
                    if (pass && n < TOPK)
                        res_f[q][n] = strdup(id);
                    n++;
                }
                if (s != SQLITE_DONE) {
                    fprintf(stderr, "bench-retrieve: sqlite query '%s': %s\n", m,
                            sqlite3_errmsg(db));
                    return 74;
                }
                sqlite3_reset(sel);
                if (pass) {
                    cnt_f[q] = n;
                    t_fts[q] = cpu_s() - tq;
                }
            }
            fts_s = cpu_s() - t0;
        }
        sqlite3_finalize(sel);
        sqlite3_close(db);
    }

    /* ---- overlap of the top-10 sets */
    double overlap_sum = 0;
    long compared = 0, identical = 0, same_order = 0;
    for (long q = 0; q < n_queries; q++) {
        int denom = cnt_c[q] > cnt_f[q] ? cnt_c[q] : cnt_f[q];
        if (!denom)
            continue;
        int common = 0, order = cnt_c[q] == cnt_f[q];
        for (int i = 0; i < cnt_c[q]; i++) {
            for (int j = 0; j < cnt_f[q]; j++)
                if (!strcmp(res_c[q][i], res_f[q][j])) {
                    common++;
                    break;
                }
            if (order && strcmp(res_c[q][i], res_f[q][i]))
                order = 0;
        }
        overlap_sum += (double)common / denom;
        identical += common == denom && cnt_c[q] == cnt_f[q];
        same_order += order;
        compared++;
    }
    double overlap = compared ? overlap_sum / (double)compared : 0;
    double qps_c = (double)n_queries / cairn_s, qps_e = (double)n_queries / exh_s,
           qps_f = fts_s > 0 ? (double)n_queries / fts_s : 0;
    double ratio = qps_f > 0 ? qps_c / qps_f : 0;

    /* buckets: by the postings the query's terms hold (what exhaustive scoring reads), then by
     * its number of words; q/s of a bucket = its queries / the time they took */
    enum { NB = 8 };
    static const char *const bname[NB] = {
        "postings <1k",    "postings 1k-10k", "postings 10k-50k", "postings 50k-100k",
        "postings >=100k", "2 words",         "3 words",          "4 words"};
    long bn[NB] = {0};
    double bp[NB] = {0}, be[NB] = {0}, bf[NB] = {0}, ball[NB] = {0}, bread[NB] = {0};
    uint64_t sum_all = 0, sum_read = 0;
    for (long q = 0; q < n_queries; q++) {
        uint64_t pa = post_all[q];
        int words = 1;
        for (const char *c = queries[q]; *c; c++)
            words += *c == ' ';
        int in[2] = {pa < 1000     ? 0
                     : pa < 10000  ? 1
                     : pa < 50000  ? 2
                     : pa < 100000 ? 3
                                   : 4,
                     4 +
                         (words < 2   ? 2
                          : words > 4 ? 4
                                      : words) -
                         1};
        for (int j = 0; j < 2; j++) {
            int i = in[j];
            bn[i]++, bp[i] += t_pruned[q], be[i] += t_exh[q], bf[i] += t_fts[q];
            ball[i] += (double)pa, bread[i] += (double)post_read[q];
        }
        sum_all += pa, sum_read += post_read[q];
    }

    if (json) {
        printf(
            "{\"docs\":%ld,\"vocabulary\":%d,\"avg_words\":%.2f,\"queries\":%ld,\"min_rank\":%ld,"
            "\"cairn_index_s\":%.3f,\"fts5_index_s\":%.3f,\"cairn_index_mb\":%.1f,"
            "\"fts5_index_mb\":%.1f,\"cairn_qps\":%.1f,\"cairn_exhaustive_qps\":%.1f,"
            "\"fts5_qps\":%.1f,\"ratio\":%.3f,\"pruned_vs_exhaustive\":%.3f,"
            "\"postings_per_query\":%.1f,\"postings_read_per_query\":%.1f,"
            "\"pruned_mismatches\":%ld,"
            "\"target_ratio\":3,\"overlap_mean\":%.4f,\"identical_sets\":%.4f,"
            "\"identical_order\":%.4f,\"compared\":%ld,\"buckets\":[",
            n_docs, CORPUS_VOCAB, (double)total_words / (double)n_docs, n_queries, min_rank,
            cairn_index_s, fts_index_s, cairn_mb, fts_mb, qps_c, qps_e, qps_f, ratio, qps_c / qps_e,
            (double)sum_all / (double)n_queries, (double)sum_read / (double)n_queries, mismatches,
            overlap, compared ? (double)identical / compared : 0,
            compared ? (double)same_order / compared : 0, compared);
        int first = 1;
        for (int i = 0; i < NB; i++) {
            if (!bn[i])
                continue;
            printf("%s{\"bucket\":\"%s\",\"queries\":%ld,\"pruned_qps\":%.1f,"
                   "\"exhaustive_qps\":%.1f,\"fts5_qps\":%.1f,\"postings\":%.1f,"
                   "\"postings_read\":%.1f}",
                   first ? "" : ",", bname[i], bn[i], bn[i] / bp[i], bn[i] / be[i],
                   bf[i] > 0 ? bn[i] / bf[i] : 0, ball[i] / bn[i], bread[i] / bn[i]);
            first = 0;
        }
        printf("]}\n");
    } else {
        if (no_fts) {
            printf("index build:   cairn %.2f s (%.0f MB)   FTS5 skipped (--no-fts)\n",
                   cairn_index_s, cairn_mb);
            printf("queries/s:     cairn pruned %.1f   cairn exhaustive %.1f\n", qps_c, qps_e);
            printf("ratio:         pruned/exhaustive %.2fx\n", qps_c / qps_e);
        } else {
            printf("index build:   cairn %.2f s (%.0f MB)   FTS5 %.2f s (%.0f MB, after "
                   "'optimize')\n",
                   cairn_index_s, cairn_mb, fts_index_s, fts_mb);
            printf("queries/s:     cairn pruned %.1f   cairn exhaustive %.1f   FTS5 bm25() %.1f\n",
                   qps_c, qps_e, qps_f);
            printf("ratio:         pruned/FTS5 %.2fx (target >= 3x)   pruned/exhaustive %.2fx\n",
                   ratio, qps_c / qps_e);
        }
        printf("postings:      %.0f a query held, %.0f read by the pruned search (%.1f%%)\n",
               (double)sum_all / (double)n_queries, (double)sum_read / (double)n_queries,
               sum_all ? 100.0 * (double)sum_read / (double)sum_all : 0);
        printf("pruned top-10: %s (%ld of %ld queries differ from exhaustive in ids, order or "
               "score bits)\n",
               mismatches ? "MISMATCH" : "identical", mismatches, n_queries);
        printf("%-18s %7s %10s %10s %10s %8s %8s %10s %10s\n", "bucket", "queries", "pruned/s",
               "exhaust/s", "FTS5/s", "pr/exh", "pr/FTS5", "postings", "read");
        for (int i = 0; i < NB; i++)
            if (bn[i])
                printf("%-18s %7ld %10.1f %10.1f %10.1f %7.2fx %7.2fx %10.0f %10.0f\n", bname[i],
                       bn[i], bn[i] / bp[i], bn[i] / be[i], bf[i] > 0 ? bn[i] / bf[i] : 0,
                       be[i] / bp[i], bf[i] / bp[i], ball[i] / bn[i], bread[i] / bn[i]);
        if (!no_fts) {
            printf(
                "top-10:        mean overlap %.3f, identical sets %.1f%%, identical order %.1f%% "
                "(%ld queries with results)\n",
                overlap, compared ? 100.0 * identical / compared : 0,
                compared ? 100.0 * same_order / compared : 0, compared);
            printf(
                "note: FTS5's bm25() uses idf = ln((N-n+0.5)/(n+0.5)), clamped to 1e-6 when <= 0;\n"
                "      cairn uses Lucene's ln(1 + (N-n+0.5)/(n+0.5)). The two agree for rare "
                "terms\n"
                "      and diverge for common ones, so the top 10 overlap highly but not fully.\n");
        }
    }
    (void)text_bytes;
    for (long q = 0; q < n_queries; q++)
        for (int i = 0; i < TOPK; i++)
            free(res_c[q][i]), free(res_f[q][i]);
    free(res_c), free(res_f), free(cnt_c), free(cnt_f), free(queries), free(score_c);
    free(t_pruned), free(t_exh), free(t_fts), free(post_all), free(post_read);
    for (long d = 0; d < n_docs; d++)
        free(texts[d]);
    free(texts);
    if (!keep)
        rm_rf(dir);
    else if (!json)
        printf("kept: %s\n", dir);
    return 0;
}
