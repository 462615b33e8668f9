/* bench/retrieve/bench_retrieve.c - cairn's BM25 index against SQLite FTS5's bm25(), measured in
 * the same run on the same corpus and queries.
 *
 * The corpus is synthetic but shaped like text: a 50k-word vocabulary drawn with a Zipf law
 * (p(rank r) ~ 1/r), documents of 20..200 words, a fixed seed so every run sees the same bytes.
 * Queries are 2..4 distinct words OR-ed together, drawn from the same law but skipping the most
 * frequent ranks (--min-rank, default 10), as a search box's stop-word list would. Both engines
 * score every matching document exhaustively (neither prunes), return the top 10 with id and
 * text, and run each query set once to warm up and once timed.
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

#include "steps/bm25.h"

#define VOCAB 50000
#define TOPK 10

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static char words[VOCAB][16];
static double cdf[VOCAB];

/* Word of rank r: its number spelled in consonant-vowel syllables (unique, pronounceable). */
static void make_vocab(void)
{
    static const char cons[] = "bcdfghjklmnprstvwxyz", vow[] = "aeiou";
    for (int r = 0; r < VOCAB; r++) {
        int v = r + 100; /* at least two syllables */
        char *p = words[r];
        while (v) {
            int s = v % 100;
            *p++ = cons[s / 5];
            *p++ = vow[s % 5];
            v /= 100;
        }
        *p = 0;
    }
    double sum = 0;
    for (int r = 0; r < VOCAB; r++)
        sum += 1.0 / (r + 1);
    double acc = 0;
    for (int r = 0; r < VOCAB; r++) {
        acc += 1.0 / (r + 1) / sum;
        cdf[r] = acc;
    }
}

static int zipf(int min_rank)
{
    for (;;) {
        double u = (double)(rnd() >> 11) / 9007199254740992.0;
        int lo = 0, hi = VOCAB - 1;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo >= min_rank)
            return lo;
    }
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
            "usage: %s [--docs N] [--queries Q] [--min-rank R] [--dir DIR] [--keep] [--json]\n"
            "  --docs N      corpus size (default 100000)\n"
            "  --queries Q   number of queries (default 1000)\n"
            "  --min-rank R  query words skip the R most frequent words (default 10)\n"
            "  --dir DIR     work directory (default: a fresh one under $TMPDIR or /tmp)\n"
            "  --keep        keep the indexes\n"
            "  --json        one JSON object instead of text\n",
            prog);
    return 64;
}

int main(int argc, char **argv)
{
    long n_docs = 100000, n_queries = 1000, min_rank = 10;
    int json = 0, keep = 0;
    const char *dir_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
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
    if (n_docs < 1 || n_queries < 1 || min_rank < 0 || min_rank > VOCAB - 100)
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
    make_vocab();
    char **texts = calloc((size_t)n_docs, sizeof *texts);
    uint64_t total_words = 0;
    for (long d = 0; d < n_docs; d++) {
        int len = 20 + (int)(rnd() % 181);
        char *t = malloc((size_t)len * 16 + 1), *p = t;
        for (int w = 0; w < len; w++) {
            const char *s = words[zipf(0)];
            size_t l = strlen(s);
            memcpy(p, s, l);
            p += l;
            *p++ = ' ';
        }
        p[-1] = 0;
        texts[d] = t;
        total_words += (uint64_t)len;
    }
    char(*queries)[80] = calloc((size_t)n_queries, sizeof *queries);
    for (long q = 0; q < n_queries; q++) {
        int nt = 2 + (int)(rnd() % 3), picked[4];
        for (int i = 0; i < nt; i++) {
            int r, dup;
            do {
                r = zipf((int)min_rank);
                dup = 0;
                for (int j = 0; j < i; j++)
                    dup |= picked[j] == r;
            } while (dup);
            picked[i] = r;
        }
        for (int i = 0; i < nt; i++) {
            strcat(queries[q], i ? " " : "");
            strcat(queries[q], words[picked[i]]);
        }
    }
    if (!json)
        printf("corpus: %ld docs, %d-word Zipf vocabulary (s=1), 20-200 words each (avg %.1f); "
               "%ld queries of 2-4 words OR-ed, ranks >= %ld\n",
               n_docs, VOCAB, (double)total_words / (double)n_docs, n_queries, min_rank);

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
    snprintf(path, sizeof path, "%s/fts.db", dir);
    unlink(path);
    sqlite3 *db = NULL;
    t0 = now_s();
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_exec(db,
                     "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-262144;"
                     "PRAGMA mmap_size=4294967296;"
                     "CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, text);"
                     "BEGIN;",
                     NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench-retrieve: sqlite: %s (is FTS5 compiled in?)\n", sqlite3_errmsg(db));
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
    double fts_index_s = now_s() - t0;
    double fts_mb = file_mb(path);

    /* ---- queries: results kept for the overlap */
    char *(*res_c)[TOPK] = calloc((size_t)n_queries, sizeof *res_c);
    char *(*res_f)[TOPK] = calloc((size_t)n_queries, sizeof *res_f);
    int *cnt_c = calloc((size_t)n_queries, sizeof *cnt_c),
        *cnt_f = calloc((size_t)n_queries, sizeof *cnt_f);

    rc = cairn__bm25_open(ixdir, 0, &ix, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench-retrieve: %s\n", err);
        return 74;
    }
    double cairn_s = 0;
    size_t text_bytes = 0;
    for (int pass = 0; pass < 2; pass++) {
        t0 = now_s();
        for (long q = 0; q < n_queries; q++) {
            cairn__bm25_hit *h;
            size_t n;
            if (cairn__bm25_search(ix, queries[q], TOPK, &h, &n) != 0) {
                fprintf(stderr, "bench-retrieve: search: %s\n", cairn__bm25_errmsg(ix));
                return 74;
            }
            for (size_t i = 0; i < n; i++) {
                text_bytes += strlen(h[i].text);
                if (pass) {
                    res_c[q][i] = h[i].id;
                    h[i].id = NULL;
                }
            }
            if (pass)
                cnt_c[q] = (int)n;
            cairn__bm25_hits_free(h, n);
        }
        cairn_s = now_s() - t0;
    }
    cairn__bm25_close(ix);

    sqlite3_stmt *sel;
    if (sqlite3_prepare_v2(db, "SELECT id, text FROM t WHERE t MATCH ?1 ORDER BY bm25(t) LIMIT 10",
                           -1, &sel, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench-retrieve: sqlite: %s\n", sqlite3_errmsg(db));
        return 74;
    }
    double fts_s = 0;
    for (int pass = 0; pass < 2; pass++) {
        t0 = now_s();
        for (long q = 0; q < n_queries; q++) {
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
                fprintf(stderr, "bench-retrieve: sqlite query '%s': %s\n", m, sqlite3_errmsg(db));
                return 74;
            }
            sqlite3_reset(sel);
            if (pass)
                cnt_f[q] = n;
        }
        fts_s = now_s() - t0;
    }
    sqlite3_finalize(sel);
    sqlite3_close(db);

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
    double qps_c = (double)n_queries / cairn_s, qps_f = (double)n_queries / fts_s;
    double ratio = qps_c / qps_f;

    if (json) {
        printf(
            "{\"docs\":%ld,\"vocabulary\":%d,\"avg_words\":%.2f,\"queries\":%ld,\"min_rank\":%ld,"
            "\"cairn_index_s\":%.3f,\"fts5_index_s\":%.3f,\"cairn_index_mb\":%.1f,"
            "\"fts5_index_mb\":%.1f,\"cairn_qps\":%.1f,\"fts5_qps\":%.1f,\"ratio\":%.3f,"
            "\"target_ratio\":3,\"overlap_mean\":%.4f,\"identical_sets\":%.4f,"
            "\"identical_order\":%.4f,\"compared\":%ld}\n",
            n_docs, VOCAB, (double)total_words / (double)n_docs, n_queries, min_rank, cairn_index_s,
            fts_index_s, cairn_mb, fts_mb, qps_c, qps_f, ratio, overlap,
            compared ? (double)identical / compared : 0,
            compared ? (double)same_order / compared : 0, compared);
    } else {
        printf("index build:   cairn %.2f s (%.0f MB)   FTS5 %.2f s (%.0f MB, after 'optimize')\n",
               cairn_index_s, cairn_mb, fts_index_s, fts_mb);
        printf("queries/s:     cairn bm25 %.1f   FTS5 bm25() %.1f\n", qps_c, qps_f);
        printf("ratio:         %.2fx (target >= 3x)\n", ratio);
        printf("top-10:        mean overlap %.3f, identical sets %.1f%%, identical order %.1f%% "
               "(%ld queries with results)\n",
               overlap, compared ? 100.0 * identical / compared : 0,
               compared ? 100.0 * same_order / compared : 0, compared);
        printf("note: FTS5's bm25() uses idf = ln((N-n+0.5)/(n+0.5)), clamped to 1e-6 when <= 0;\n"
               "      cairn uses Lucene's ln(1 + (N-n+0.5)/(n+0.5)). The two agree for rare terms\n"
               "      and diverge for common ones, so the top 10 overlap highly but not fully.\n");
    }
    (void)text_bytes;
    for (long q = 0; q < n_queries; q++)
        for (int i = 0; i < TOPK; i++)
            free(res_c[q][i]), free(res_f[q][i]);
    free(res_c), free(res_f), free(cnt_c), free(cnt_f), free(queries);
    for (long d = 0; d < n_docs; d++)
        free(texts[d]);
    free(texts);
    if (!keep)
        rm_rf(dir);
    else if (!json)
        printf("kept: %s\n", dir);
    return 0;
}
