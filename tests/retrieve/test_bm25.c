/* test_bm25.c - the BM25 index: tokenizer, scores against the formula, replacement, batches,
 * the pruned search against the exhaustive one (bit for bit), the format check, and the
 * `cairn index` / `cairn search` command functions. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h>

#include "bench/retrieve/corpus.h"
#include "runner/cli.h"
#include "tools/tools.h"
#include "steps/bm25.h"
#include "tests/tap.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------ helpers */

typedef struct toks {
    char s[4096];
    size_t n;
} toks;

static void join_tok(const char *t, size_t len, void *arg)
{
    toks *j = arg;
    if (j->n && j->n + 1 < sizeof j->s)
        j->s[j->n++] = ' ';
    if (j->n + len < sizeof j->s) {
        memcpy(j->s + j->n, t, len);
        j->n += len;
    }
    j->s[j->n] = 0;
}

static const char *tokens(const char *text, size_t *count)
{
    static toks j;
    j.n = 0;
    j.s[0] = 0;
    size_t c = cairn__bm25_tokenize(text, strlen(text), join_tok, &j);
    if (count)
        *count = c;
    return j.s;
}

/* s with control characters shown as '?' (TAP names must stay on one line); a static buffer
 * of four slots, so up to four can be used in one ok(). */
static const char *one_line(const char *s)
{
    static char buf[4][600];
    static int slot;
    char *b = buf[slot++ % 4];
    size_t i = 0;
    for (; s && s[i] && i + 1 < sizeof buf[0]; i++)
        b[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    b[i] = 0;
    return b;
}

static void check_tokens(const char *text, const char *want)
{
    const char *got = tokens(text, NULL);
    ok(strcmp(got, want) == 0, "tokens of '%s' = '%s' (got '%s')", one_line(text), want, got);
}

static double idf(double n_docs, double df) { return log(1.0 + (n_docs - df + 0.5) / (df + 0.5)); }

static double term_score(double tf, double dl, double avgdl, double n_docs, double df)
{
    const double k1 = 1.2, b = 0.75;
    return idf(n_docs, df) * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl));
}

static int add_docs(cairn__bm25 *ix, const char *const *docs, size_t n)
{
    int rc = cairn__bm25_begin(ix);
    for (size_t i = 0; !rc && i + 1 < n; i += 2)
        rc = cairn__bm25_add(ix, docs[i], docs[i + 1], strlen(docs[i + 1]), NULL, NULL);
    if (!rc)
        rc = cairn__bm25_commit(ix);
    else
        cairn__bm25_abort(ix);
    if (rc)
        diag("add_docs: %s", cairn__bm25_errmsg(ix));
    return rc;
}

/* Runs a command function with stdout and stderr captured into malloc'd strings. */
static int run_cmd(int (*fn)(int, char **), char **out, char **err, const char *dir, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, dir);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < 31)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    char *po = tu_fmt("%s/stdout.txt", dir), *pe = tu_fmt("%s/stderr.txt", dir);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0600),
        fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fo, 1), dup2(fe, 2);
    close(fo), close(fe);
    int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1), dup2(se, 2);
    close(so), close(se);
    *out = tu_read_file(po, NULL);
    *err = tu_read_file(pe, NULL);
    free(po), free(pe);
    return rc;
}

/* ------------------------------------------------------------------ tests */

static void tokenizer(void)
{
    check_tokens("我们喜欢陶瓷杯", "我们 们喜 喜欢 欢陶 陶瓷 瓷杯");
    check_tokens("Mug 陶瓷杯, 350ml!", "mug 陶瓷 瓷杯 350ml");
    check_tokens("杯", "杯");
    check_tokens("a杯b", "a 杯 b");
    check_tokens("陶瓷杯。马克杯、咖啡「好」", "陶瓷 瓷杯 马克 克杯 咖啡 好");
    check_tokens("ひらがなカタカナ", "ひら らが がな なカ カタ タカ カナ");
    check_tokens("한국어 사전", "한국 국어 사전");
    check_tokens("\xe3\x90\x80\xef\xa4\x80", "\xe3\x90\x80\xef\xa4\x80"); /* ext A + compat */
    check_tokens("ÀÉÎÕÜ Ça ÆØÅ Þorn ß", "àéîõü ça æøå þorn ß");
    check_tokens("ŁÓDŹ Čeština İstanbul ŒUVRE", "łódź čeština istanbul œuvre");
    check_tokens("ΑΘΗΝΑ Ελλάδα ΟΔΟΣ οδος Ώρα", "αθηνα ελλάδα οδοσ οδοσ ώρα");
    check_tokens("МОСКВА Ёлка ЇЖАК Ђак", "москва ёлка їжак ђак");
    check_tokens("ＡＢＣ１２３ ｘｙｚ", "abc123 xyz");
    check_tokens("Ｍｕｇ！陶瓷，ＯＫ？", "mug 陶瓷 ok");
    check_tokens("hello,world;foo-bar (baz) \"q\" — dash…end 3.5",
                 "hello world foo bar baz q dash end 3 5");
    check_tokens("tab\there\nnew\xc2\xa0nbsp\xe3\x80\x80ideo", "tab here new nbsp ideo");
    check_tokens("ab\xff"
                 "cd \xe9t\xc3",
                 "ab cd t");
    check_tokens("", "");
    check_tokens("  ,;!  ", "");
    size_t n;
    tokens("one two 三四五", &n);
    ok(n == 4, "token count returned (%zu)", n);
    char longw[400];
    memset(longw, 'x', 300);
    longw[300] = 0;
    const char *t = tokens(longw, &n);
    ok(n == 1 && strlen(t) == CAIRN__BM25_MAX_TOKEN, "a 300-byte word is cut to %d bytes (%zu)",
       CAIRN__BM25_MAX_TOKEN, strlen(t));
    /* 2-byte characters: the cut never splits one */
    char lw[700] = "";
    for (int i = 0; i < 100; i++)
        strcat(lw, "é");
    t = tokens(lw, &n);
    ok(n == 1 && strlen(t) == CAIRN__BM25_MAX_TOKEN, "cut at a character boundary (%zu bytes)",
       strlen(t));
}

static void scores(const char *root)
{
    char *dir = tu_fmt("%s/tiny", root);
    cairn__bm25 *ix = NULL;
    char err[512];
    int rc = cairn__bm25_open(dir, 1, &ix, err, sizeof err);
    ok(rc == 0, "open a new index (%s)", rc ? err : "");
    if (rc) {
        free(dir);
        return;
    }
    static const char *const docs[] = {
        "d1", "The quick brown fox",   "d2", "the lazy dog sleeps all day long",
        "d3", "quick quick fox jumps",
    };
    ok(add_docs(ix, docs, 6) == 0, "index 3 documents");
    uint64_t nd = 0;
    double avgdl = 0;
    rc = cairn__bm25_stats(ix, &nd, &avgdl);
    ok(rc == 0 && nd == 3 && fabs(avgdl - 5.0) < 1e-12, "N 3, avgdl (4+7+4)/3 = 5 (%llu, %g)",
       (unsigned long long)nd, avgdl);

    cairn__bm25_hit *h;
    size_t n;
    rc = cairn__bm25_search(ix, "quick fox", 10, &h, &n);
    /* quick: df 2 (d1 tf 1 dl 4, d3 tf 2 dl 4); fox: df 2 (d1 tf 1, d3 tf 1) */
    double e1 = term_score(1, 4, 5, 3, 2) + term_score(1, 4, 5, 3, 2);
    double e3 = term_score(2, 4, 5, 3, 2) + term_score(1, 4, 5, 3, 2);
    ok(rc == 0 && n == 2, "'quick fox' matches 2 documents (%zu)", n);
    if (n == 2) {
        ok(!strcmp(h[0].id, "d3") && !strcmp(h[1].id, "d1"), "d3 ranks first (%s, %s)", h[0].id,
           h[1].id);
        ok(fabs(h[0].score - e3) < 1e-9, "score d3 %.12f = %.12f", h[0].score, e3);
        ok(fabs(h[1].score - e1) < 1e-9, "score d1 %.12f = %.12f", h[1].score, e1);
        ok(!strcmp(h[0].text, "quick quick fox jumps") && h[0].extra == NULL, "hit text returned");
    }
    cairn__bm25_hits_free(h, n);

    rc = cairn__bm25_search(ix, "DOG dog, the", 10, &h, &n);
    /* dog: df 1 (d2 tf 1 dl 7); the: df 2 (d1 tf 1 dl 4, d2 tf 1 dl 7); duplicates count once */
    double e2 = term_score(1, 7, 5, 3, 1) + term_score(1, 7, 5, 3, 2);
    e1 = term_score(1, 4, 5, 3, 2);
    ok(rc == 0 && n == 2 && !strcmp(h[0].id, "d2") && fabs(h[0].score - e2) < 1e-9 &&
           !strcmp(h[1].id, "d1") && fabs(h[1].score - e1) < 1e-9,
       "'DOG dog, the': d2 %.12f (want %.12f), d1 %.12f (want %.12f)", n ? h[0].score : 0, e2,
       n > 1 ? h[1].score : 0, e1);
    cairn__bm25_hits_free(h, n);

    rc = cairn__bm25_search(ix, "quick fox", 1, &h, &n);
    ok(rc == 0 && n == 1 && !strcmp(h[0].id, "d3"), "top_k 1 keeps the best");
    cairn__bm25_hits_free(h, n);
    rc = cairn__bm25_search(ix, "zebra", 10, &h, &n);
    ok(rc == 0 && n == 0 && h == NULL, "unknown term: no hits");
    rc = cairn__bm25_search(ix, " ,. ", 10, &h, &n);
    ok(rc == 0 && n == 0, "query without tokens: no hits");

    /* idf never negative: a term in every document still scores above 0 */
    static const char *const more[] = {"d4", "the end"};
    ok(add_docs(ix, more, 2) == 0, "add a 4th document");
    rc = cairn__bm25_search(ix, "the", 10, &h, &n);
    ok(rc == 0 && n == 3 && h[2].score > 0, "a common term still scores > 0 (%zu hits)", n);
    /* ties: d1 and d4 both... d4 is shorter so ranks first; equal-score ties go to lower docno */
    cairn__bm25_hits_free(h, n);
    static const char *const twins[] = {"t2", "unique twin", "t1", "unique twin"};
    ok(add_docs(ix, twins, 4) == 0, "add two identical documents");
    rc = cairn__bm25_search(ix, "twin", 10, &h, &n);
    ok(rc == 0 && n == 2 && !strcmp(h[0].id, "t2") && h[0].score == h[1].score,
       "equal scores: the earlier indexed document first");
    cairn__bm25_hits_free(h, n);
    cairn__bm25_close(ix);

    /* reopen read-only: the same numbers */
    rc = cairn__bm25_open(dir, 0, &ix, err, sizeof err);
    ok(rc == 0, "reopen read-only");
    if (!rc) {
        ok(cairn__bm25_begin(ix) == CAIRN_EINVAL, "a read-only handle refuses a batch");
        rc = cairn__bm25_search(ix, "lazy", 10, &h, &n);
        /* N 6, total 4+7+4+2+2+2 = 21, lazy df 1 in d2 (dl 7) */
        double e = term_score(1, 7, 21.0 / 6.0, 6, 1);
        ok(rc == 0 && n == 1 && fabs(h[0].score - e) < 1e-9, "after reopen: lazy %.12f = %.12f",
           n ? h[0].score : 0, e);
        cairn__bm25_hits_free(h, n);
        cairn__bm25_close(ix);
    }
    free(dir);
}

static void replace(const char *root)
{
    char *dir = tu_fmt("%s/replace", root);
    cairn__bm25 *ix = NULL;
    char err[512];
    if (cairn__bm25_open(dir, 1, &ix, err, sizeof err)) {
        ok(0, "open: %s", err);
        free(dir);
        return;
    }
    static const char *const docs[] = {
        "a", "red ceramic mug", "b", "blue glass cup", "c", "green ceramic bowl with lid",
    };
    add_docs(ix, docs, 6);
    cairn__bm25_info before;
    cairn__bm25_info_get(ix, &before);

    int rep = 0, rc = cairn__bm25_begin(ix);
    rc = rc ? rc : cairn__bm25_add(ix, "a", "steel water bottle large", 24, "{\"price\":3}", &rep);
    rc = rc ? rc : cairn__bm25_commit(ix);
    ok(rc == 0 && rep == 1, "re-indexing id 'a' replaces it");
    cairn__bm25_info after;
    cairn__bm25_info_get(ix, &after);
    ok(after.n_docs == 3, "N unchanged (%llu)", (unsigned long long)after.n_docs);
    ok(fabs(after.avgdl - (4.0 + 3 + 5) / 3) < 1e-12 && after.total_len == 12,
       "avgdl updated: %g (was %g)", after.avgdl, before.avgdl);
    cairn__bm25_hit *h;
    size_t n;
    rc = cairn__bm25_search(ix, "red mug", 10, &h, &n);
    ok(rc == 0 && n == 0, "old terms no longer match (%zu hits)", n);
    cairn__bm25_hits_free(h, n);
    rc = cairn__bm25_search(ix, "ceramic", 10, &h, &n);
    double e = term_score(1, 5, 4, 3, 1); /* df of ceramic is 1 now: only c */
    ok(rc == 0 && n == 1 && !strcmp(h[0].id, "c") && fabs(h[0].score - e) < 1e-9,
       "df adjusted: ceramic scores with df 1 (%.12f vs %.12f)", n ? h[0].score : 0, e);
    cairn__bm25_hits_free(h, n);
    rc = cairn__bm25_search(ix, "bottle", 10, &h, &n);
    ok(rc == 0 && n == 1 && !strcmp(h[0].id, "a") && h[0].extra &&
           !strcmp(h[0].extra, "{\"price\":3}"),
       "new terms match, extra fields kept");
    cairn__bm25_hits_free(h, n);

    /* replaced twice in one batch (the second replace finds the first one's postings still
     * buffered), plus a new document in between */
    rc = cairn__bm25_begin(ix);
    rc = rc ? rc : cairn__bm25_add(ix, "b", "first version alpha", 19, NULL, &rep);
    rc = rc ? rc : cairn__bm25_add(ix, "d", "alpha omega", 11, NULL, NULL);
    rc = rc ? rc : cairn__bm25_add(ix, "b", "second version beta", 19, NULL, &rep);
    rc = rc ? rc : cairn__bm25_commit(ix);
    ok(rc == 0 && rep == 1, "replace twice within a batch (%s)", rc ? cairn__bm25_errmsg(ix) : "");
    rc = cairn__bm25_search(ix, "alpha", 10, &h, &n);
    ok(rc == 0 && n == 1 && !strcmp(h[0].id, "d"), "the intermediate version left nothing behind");
    double ea = term_score(1, 2, (4.0 + 3 + 5 + 2) / 4, 4, 1);
    ok(n == 1 && fabs(h[0].score - ea) < 1e-9, "alpha df 1, N 4: %.12f vs %.12f",
       n ? h[0].score : 0, ea);
    cairn__bm25_hits_free(h, n);
    cairn__bm25_info_get(ix, &after);
    ok(after.n_docs == 4 && after.total_len == 14, "N 4, total length 14 (%llu, %llu)",
       (unsigned long long)after.n_docs, (unsigned long long)after.total_len);

    /* an aborted batch leaves nothing */
    rc = cairn__bm25_begin(ix);
    rc = rc ? rc : cairn__bm25_add(ix, "e", "ephemeral", 9, NULL, NULL);
    rc = rc ? rc : cairn__bm25_add(ix, "c", "overwritten", 11, NULL, NULL);
    cairn__bm25_abort(ix);
    rc = cairn__bm25_search(ix, "ephemeral overwritten", 10, &h, &n);
    ok(rc == 0 && n == 0, "an aborted batch writes nothing");
    cairn__bm25_hits_free(h, n);
    cairn__bm25_info_get(ix, &before);
    ok(before.n_docs == 4 && before.total_len == 14, "counts unchanged after abort");
    ok(cairn__bm25_begin(ix) == 0 && cairn__bm25_add(ix, "", "x", 1, NULL, NULL) == CAIRN_EINVAL,
       "an empty id is refused (%s)", cairn__bm25_errmsg(ix));
    ok(cairn__bm25_commit(ix) == 0, "a refused add leaves the batch usable");
    cairn__bm25_info_get(ix, &after);
    ok(after.n_docs == 4, "  and adds nothing");
    cairn__bm25_close(ix);
    free(dir);
}

/* Random documents over a small vocabulary, some replaced, checked against a brute-force
 * scorer over the final versions. */
static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

typedef struct bf_ctx {
    char (*terms)[16];
    size_t n;
} bf_ctx;

static void bf_tok(const char *t, size_t len, void *arg)
{
    bf_ctx *c = arg;
    if (c->n < 64 && len < 16) {
        memcpy(c->terms[c->n], t, len);
        c->terms[c->n][len] = 0;
    }
    c->n++;
}

static void brute_force(const char *root, size_t flush_postings)
{
    enum { NDOC = 200, ROUNDS = 3, VOCAB = 40 };
    static char texts[NDOC][400];
    static const char *const words[VOCAB] = {
        "alpha",  "beta",  "gamma", "delta", "eps",     "zeta", "eta", "theta",  "iota", "kappa",
        "lambda", "mu",    "nu",    "xi",    "omicron", "pi",   "rho", "sigma",  "tau",  "upsilon",
        "phi",    "chi",   "psi",   "omega", "陶瓷",    "杯子", "mug", "cup",    "red",  "blue",
        "green",  "large", "small", "glass", "steel",   "wood", "lid", "handle", "set",  "gift"};
    char *dir = tu_fmt("%s/random%zu", root, flush_postings);
    cairn__bm25 *ix = NULL;
    char err[512];
    if (cairn__bm25_open(dir, 1, &ix, err, sizeof err)) {
        ok(0, "open: %s", err);
        free(dir);
        return;
    }
    cairn__bm25_set_flush_postings(ix, flush_postings);
    diag("random corpus, flushing every %zu postings",
         flush_postings ? flush_postings : (size_t)4 << 20);
    int rc = 0;
    for (int r = 0; r < ROUNDS && !rc; r++) {
        rc = cairn__bm25_begin(ix);
        for (int k = 0; k < NDOC && !rc; k++) {
            int i = r == 0 ? k : (int)(rnd() % NDOC);
            if (r > 0 && rnd() % 3)
                continue;
            int len = 1 + (int)(rnd() % 30);
            texts[i][0] = 0;
            for (int w = 0; w < len; w++) {
                /* skewed: low word numbers are common */
                uint32_t x = rnd() % VOCAB, y = rnd() % VOCAB;
                strcat(texts[i], words[x < y ? x : y]);
                strcat(texts[i], w % 7 == 6 ? ", " : " ");
            }
            char id[16];
            snprintf(id, sizeof id, "doc%03d", i);
            rc = cairn__bm25_add(ix, id, texts[i], strlen(texts[i]), NULL, NULL);
        }
        rc = rc ? rc : cairn__bm25_commit(ix);
    }
    ok(rc == 0, "random corpus indexed in 3 rounds with replacements (%s)",
       rc ? cairn__bm25_errmsg(ix) : "");

    /* brute force over the final texts */
    static char terms[NDOC][64][16];
    static size_t dl[NDOC];
    double total = 0;
    for (int i = 0; i < NDOC; i++) {
        bf_ctx c = {terms[i], 0};
        cairn__bm25_tokenize(texts[i], strlen(texts[i]), bf_tok, &c);
        dl[i] = c.n;
        total += (double)c.n;
    }
    double avgdl = total / NDOC;
    int bad = 0, checked = 0;
    for (int q = 0; q < 60; q++) {
        const char *qw[3] = {words[rnd() % VOCAB], words[rnd() % VOCAB], words[rnd() % VOCAB]};
        if (!strcmp(qw[1], qw[0]))
            qw[1] = "nothing";
        if (!strcmp(qw[2], qw[0]) || !strcmp(qw[2], qw[1]))
            qw[2] = "nothing";
        double want[NDOC];
        for (int i = 0; i < NDOC; i++)
            want[i] = 0;
        for (int t = 0; t < 3; t++) {
            double df = 0;
            for (int i = 0; i < NDOC; i++)
                for (size_t j = 0; j < dl[i] && j < 64; j++)
                    if (!strcmp(terms[i][j], qw[t])) {
                        df++;
                        break;
                    }
            for (int i = 0; i < NDOC; i++) {
                double tf = 0;
                for (size_t j = 0; j < dl[i] && j < 64; j++)
                    tf += !strcmp(terms[i][j], qw[t]);
                if (tf > 0)
                    want[i] += term_score(tf, (double)dl[i], avgdl, NDOC, df);
            }
        }
        char query[128];
        snprintf(query, sizeof query, "%s %s %s", qw[0], qw[1], qw[2]);
        cairn__bm25_hit *h;
        size_t n;
        if (cairn__bm25_search(ix, query, NDOC, &h, &n) != 0) {
            bad++;
            continue;
        }
        size_t matching = 0;
        for (int i = 0; i < NDOC; i++)
            matching += want[i] > 0;
        if (n != matching) {
            if (!bad)
                diag("query '%s': %zu hits, brute force %zu", query, n, matching);
            bad++;
        }
        for (size_t k = 0; k < n; k++) {
            int i = atoi(h[k].id + 3);
            checked++;
            if (fabs(h[k].score - want[i]) > 1e-9 || (k && h[k].score > h[k - 1].score)) {
                if (!bad)
                    diag("query '%s' %s: %.12f, brute force %.12f", query, h[k].id, h[k].score,
                         want[i]);
                bad++;
            }
        }
        cairn__bm25_hits_free(h, n);
    }
    ok(bad == 0 && checked > 100,
       "60 random queries match the brute-force scorer (%d scores, %d bad)", checked, bad);
    cairn__bm25_close(ix);
    free(dir);
}

/* ------------------------------------------------------------------ pruned == exhaustive */

typedef struct cmp_stats {
    long queries, bad;
    uint64_t read_pruned, read_all;
} cmp_stats;

/* Runs a query down both paths: same code, same hits, same ids in the same order, and the
 * same score bits (memcmp, not a tolerance). */
static void compare_paths(cairn__bm25 *ix, const char *query, size_t k, cmp_stats *st)
{
    cairn__bm25_hit *hp = NULL, *he = NULL;
    size_t np = 0, ne = 0;
    int rp = cairn__bm25_search(ix, query, k, &hp, &np);
    uint64_t read_p = cairn__bm25_postings_read(ix);
    int re = cairn__bm25_search_exhaustive(ix, query, k, &he, &ne);
    st->queries++;
    st->read_pruned += read_p;
    st->read_all += cairn__bm25_postings_read(ix);
    int same = rp == 0 && re == 0 && np == ne;
    size_t at = 0;
    for (; same && at < np; at++)
        same = !strcmp(hp[at].id, he[at].id) && !memcmp(&hp[at].score, &he[at].score, 8);
    if (!same && st->bad++ < 3)
        diag("query '%s' k %zu: pruned rc %d, %zu hits; exhaustive rc %d, %zu hits; first "
             "difference at %zu%s%s",
             one_line(query), k, rp, np, re, ne, at ? at - 1 : 0, rp ? ": " : "",
             rp ? cairn__bm25_errmsg(ix) : "");
    cairn__bm25_hits_free(hp, np);
    cairn__bm25_hits_free(he, ne);
}

/* The benchmark's corpus (bench/retrieve/corpus.h) at 20k documents, plus a word in every
 * document and one in a single document; built with small flushes and then 2% of it replaced,
 * so the bounds tables have been rebuilt over postings that came and went. */
static void pruned(const char *root)
{
    enum { NDOC = 20000, BENCH_Q = 1000, RANDOM_Q = 1200 };
    char *dir = tu_fmt("%s/pruned", root);
    cairn__bm25 *ix = NULL;
    char err[512];
    if (cairn__bm25_open(dir, 1, &ix, err, sizeof err)) {
        ok(0, "open: %s", err);
        free(dir);
        return;
    }
    cairn__bm25_set_flush_postings(ix, 300000);
    corpus_vocab();
    static char text[200 * 16 + 32];
    int rc = cairn__bm25_begin(ix);
    for (int d = 0; d < NDOC && !rc; d++) {
        corpus_doc(text);
        strcat(text, d == 777 ? " alltok unotok" : " alltok");
        char id[16];
        snprintf(id, sizeof id, "doc%d", d);
        rc = cairn__bm25_add(ix, id, text, strlen(text), NULL, NULL);
    }
    rc = rc ? rc : cairn__bm25_commit(ix);
    /* the benchmark's queries come next in its stream, as they do in bench-retrieve */
    static char bench_q[BENCH_Q][80];
    for (int q = 0; q < BENCH_Q; q++)
        corpus_query(bench_q[q], 10);
    rc = rc ? rc : cairn__bm25_begin(ix);
    for (int i = 0; i < NDOC / 50 && !rc; i++) {
        int d = (int)(corpus_rnd() % NDOC);
        if (d == 777)
            continue;
        corpus_doc(text);
        strcat(text, " alltok");
        char id[16];
        snprintf(id, sizeof id, "doc%d", d);
        rc = cairn__bm25_add(ix, id, text, strlen(text), NULL, NULL);
    }
    rc = rc ? rc : cairn__bm25_commit(ix);
    ok(rc == 0, "20k documents of the benchmark corpus indexed, 2%% replaced (%s)",
       rc ? cairn__bm25_errmsg(ix) : "");

    cmp_stats bench = {0}, dflt = {0};
    for (int q = 0; q < BENCH_Q; q++) /* small queries take the exhaustive path by default */
        compare_paths(ix, bench_q[q], 10, &dflt);
    ok(dflt.bad == 0, "the %ld benchmark queries, default path choice: == exhaustive (%ld differ)",
       dflt.queries, dflt.bad);
    cairn__bm25_set_prune_min(ix, 0); /* from here on every query is pruned */
    for (int q = 0; q < BENCH_Q; q++)
        compare_paths(ix, bench_q[q], 10, &bench);
    ok(bench.bad == 0,
       "the %ld benchmark queries: pruned top 10 == exhaustive, bit for bit (%ld "
       "differ)",
       bench.queries, bench.bad);
    ok(bench.read_pruned < bench.read_all * 3 / 4,
       "  and pruning skipped postings: %llu read of %llu", (unsigned long long)bench.read_pruned,
       (unsigned long long)bench.read_all);

    /* random queries: 1..6 words, common (Zipf from rank 0), rare (uniform over the
     * vocabulary, many absent), the everywhere and single-document words, repeats */
    static const size_t ks[] = {1, 3, 10, 100};
    cmp_stats rnd_st = {0};
    for (int q = 0; q < RANDOM_Q; q++) {
        char query[256] = "";
        int nw = 1 + (int)(corpus_rnd() % 6);
        for (int w = 0; w < nw; w++) {
            unsigned kind = (unsigned)(corpus_rnd() % 10);
            const char *word = kind < 5   ? corpus_words[corpus_zipf(0)]
                               : kind < 8 ? corpus_words[corpus_rnd() % CORPUS_VOCAB]
                               : kind < 9 ? (corpus_rnd() % 2 ? "alltok" : "unotok")
                                          : NULL;
            if (!word) { /* a repeat of an earlier word, or a word no document has */
                char *sp = strrchr(query, ' ');
                word = w ? (sp ? sp + 1 : query) : "nosuchword";
            }
            char copy[64];
            snprintf(copy, sizeof copy, "%s", word);
            strcat(query, w ? " " : "");
            strcat(query, copy);
        }
        compare_paths(ix, query, ks[q % 4], &rnd_st);
    }
    ok(rnd_st.bad == 0,
       "%ld random queries of 1-6 words, k 1/3/10/100: pruned == exhaustive, bit for bit (%ld "
       "differ; %llu of %llu postings read)",
       rnd_st.queries, rnd_st.bad, (unsigned long long)rnd_st.read_pruned,
       (unsigned long long)rnd_st.read_all);

    static const struct {
        const char *q;
        size_t k;
        const char *what;
    } edge[] = {{"alltok", 10, "a word in every document"},
                {"alltok", 100, "a word in every document, k 100"},
                {"unotok", 10, "a word in one document"},
                {"unotok", 100, "k larger than the matches"},
                {"unotok unotok alltok unotok", 3, "duplicate query words"},
                {"alltok unotok", 1, "every document and one document, k 1"},
                {"alltok", NDOC + 50, "k larger than the corpus"},
                {"nosuchword", 10, "no document holds the word"},
                {"", 10, "an empty query"},
                {" ,; ", 10, "a query without tokens"},
                {"alltok", 0, "k 0"}};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
        cmp_stats e = {0};
        compare_paths(ix, edge[i].q, edge[i].k, &e);
        ok(e.bad == 0, "edge: %s ('%s', k %zu): pruned == exhaustive", edge[i].what, edge[i].q,
           edge[i].k);
    }
    cairn__bm25_hit *h;
    size_t n;
    rc = cairn__bm25_search(ix, "alltok", NDOC + 50, &h, &n);
    int sorted = rc == 0 && n == NDOC;
    for (size_t i = 1; sorted && i < n; i++)
        sorted = h[i].score < h[i - 1].score ||
                 (h[i].score == h[i - 1].score && strcmp(h[i].id, h[i - 1].id) != 0);
    ok(sorted, "k beyond N returns every document once, best first (%zu)", n);
    cairn__bm25_hits_free(h, n);
    rc = cairn__bm25_search(ix, "unotok", 100, &h, &n);
    ok(rc == 0 && n == 1 && !strcmp(h[0].id, "doc777"), "the single-document word finds it");
    cairn__bm25_hits_free(h, n);
    cairn__bm25_close(ix);

    /* CAIRN_BM25_EXHAUSTIVE=1 at open sends the default search down the reference path */
    setenv("CAIRN_BM25_EXHAUSTIVE", "1", 1);
    rc = cairn__bm25_open(dir, 0, &ix, err, sizeof err);
    unsetenv("CAIRN_BM25_EXHAUSTIVE");
    if (rc == 0) {
        cairn__bm25_search(ix, bench_q[0], 10, &h, &n);
        uint64_t a = cairn__bm25_postings_read(ix);
        cairn__bm25_hits_free(h, n);
        cairn__bm25_search_exhaustive(ix, bench_q[0], 10, &h, &n);
        ok(a == cairn__bm25_postings_read(ix) && a > 0,
           "CAIRN_BM25_EXHAUSTIVE=1: search reads every posting (%llu)", (unsigned long long)a);
        cairn__bm25_hits_free(h, n);
        cairn__bm25_close(ix);
    } else {
        ok(0, "reopen: %s", err);
    }
    free(dir);
}

/* An index of an older format is refused at open with a message to rebuild, and a writable
 * open leaves it as it was: format 1 (no bounds tables), format 2 (raw blocks; its meta says
 * 2, the tables are there). */
static void old_format(const char *root, uint64_t fmt)
{
    char *store = tu_fmt("%s/format%llu", root, (unsigned long long)fmt),
         *dir = tu_fmt("%s/index", store);
    cairn__bm25 *ix = NULL;
    char err[512];
    static const char *const docs[] = {"a", "red mug", "b", "blue cup"};
    if (cairn__bm25_open(dir, 1, &ix, err, sizeof err) || add_docs(ix, docs, 4)) {
        ok(0, "build: %s", ix ? cairn__bm25_errmsg(ix) : err);
        cairn__bm25_close(ix);
        free(dir), free(store);
        return;
    }
    cairn__bm25_close(ix);
    /* what a cairn of that format wrote: its meta says so (format 1: and no blocks table) */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, blocks;
    MDB_val k = {6, "format"}, v = {8, &fmt};
    int rc = mdb_env_create(&env);
    mdb_env_set_maxdbs(env, 8);
    mdb_env_set_mapsize(env, (size_t)1 << 30); /* as small as steps/bm25.c's last resort */
    const char *what = "mdb_env_open";
    rc = rc ? rc : mdb_env_open(env, dir, MDB_NOTLS | MDB_NORDAHEAD, 0600);
    what = rc ? what : "the edit";
    rc = rc ? rc : mdb_txn_begin(env, NULL, 0, &txn);
    rc = rc ? rc : mdb_dbi_open(txn, "meta", 0, &meta);
    rc = rc ? rc : mdb_put(txn, meta, &k, &v, 0);
    rc = rc || fmt != 1 ? rc : mdb_dbi_open(txn, "blocks", 0, &blocks);
    rc = rc || fmt != 1 ? rc : mdb_drop(txn, blocks, 1);
    rc = rc ? rc : mdb_txn_commit(txn);
    mdb_env_close(env);
    char want[16];
    snprintf(want, sizeof want, "format %llu", (unsigned long long)fmt);
    ok(rc == 0, "index turned into %s (%s%s%s)", want, rc ? what : "", rc ? ": " : "",
       rc ? mdb_strerror(rc) : "");
    for (int writable = 0; writable < 2; writable++) {
        err[0] = 0;
        rc = cairn__bm25_open(dir, writable, &ix, err, sizeof err);
        ok(rc == CAIRN_ESCHEMA && ix == NULL && strstr(err, want) && strstr(err, "format 3") &&
               strstr(err, "cairn index") && strstr(err, dir),
           "%s open of a %s index: CAIRN_ESCHEMA, rebuild with `cairn index` (%s)",
           writable ? "writable" : "read-only", want, err);
    }
    char *out = NULL, *cerr = NULL;
    rc = run_cmd(cairn__cmd_search, &out, &cerr, root, "search", "--store", store, "--query", "red",
                 (char *)NULL);
    ok(rc == 74 && tu_contains(cerr, want) && tu_contains(cerr, "cairn index"),
       "cairn search on it exits 74 and says to rebuild (%s)", one_line(cerr));
    free(out), free(cerr);
    free(dir), free(store);
}

static void open_errors(const char *root)
{
    char *dir = tu_fmt("%s/absent/index", root);
    cairn__bm25 *ix = NULL;
    char err[512] = "";
    int rc = cairn__bm25_open(dir, 0, &ix, err, sizeof err);
    ok(rc == CAIRN_ENOENT && ix == NULL && strstr(err, dir) && strstr(err, "cairn index"),
       "missing index: ENOENT naming the path and `cairn index` (%s)", err);
    free(dir);
    dir = tu_fmt("%s/afile", root);
    tu_write_file(dir, "x", 1);
    char *sub = tu_fmt("%s/index", dir);
    rc = cairn__bm25_open(sub, 1, &ix, err, sizeof err);
    ok(rc == CAIRN_EIO && strstr(err, sub), "cannot create under a file: EIO naming it (%s)", err);
    free(sub);
    free(dir);
}

static json_t *parse_out(const char *s)
{
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    if (!j)
        diag("not JSON: %s", s ? s : "(null)");
    return j;
}

static void cli(const char *root)
{
    char *store = tu_fmt("%s/store", root), *corpus = tu_fmt("%s/corpus.jsonl", root);
    char *out, *err;
    const char *good =
        "{\"id\": \"p1\", \"text\": \"Red ceramic mug, 350ml\", \"title\": \"Mug\"}\n"
        "\n"
        "{\"id\": \"p2\", \"text\": \"陶瓷杯 白色 350ml\"}\r\n"
        "{\"id\": 3, \"text\": \"Steel travel bottle\"}\n"
        "{\"id\": \"p1\", \"text\": \"Red ceramic mug with lid, 350ml\", \"title\": \"Mug\"}";
    tu_write_file(corpus, good, strlen(good));
    int rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus",
                     corpus, "--json", (char *)NULL);
    ok(rc == 0, "cairn index exits 0 (%s)", one_line(err));
    json_t *j = parse_out(out);
    ok(j && json_integer_value(json_object_get(j, "added")) == 3 &&
           json_integer_value(json_object_get(j, "replaced")) == 1 &&
           json_integer_value(json_object_get(j, "docs")) == 3,
       "--json: 3 added, 1 replaced (same id twice in the file), 3 docs: %s", one_line(out));
    double avg = json_real_value(json_object_get(j, "avgdl"));
    /* p1 "red ceramic mug with lid 350ml" 6, p2 陶瓷 瓷杯 白色 350ml 4, 3 "steel travel bottle" 3
     */
    ok(fabs(avg - 13.0 / 3) < 1e-9, "avgdl %g = 13/3", avg);
    json_decref(j);
    free(out), free(err);

    rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus", corpus,
                 "--memory", "0", (char *)NULL);
    ok(rc == 64, "--memory 0 is a usage error (exit %d)", rc);
    free(out), free(err);
    rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus", corpus,
                 "--memory", "1", (char *)NULL);
    ok(rc == 0 && tu_contains(out, "cap 1 MB"), "--memory 1 builds and reports its cap: %s",
       one_line(out));
    free(out), free(err);

    rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus", corpus,
                 (char *)NULL);
    ok(rc == 0 && tu_contains(out, "0 added, 4 replaced") && tu_contains(out, "3 documents") &&
           tu_contains(out, "avgdl 4.33"),
       "re-indexing the same file replaces everything; text output: %s", one_line(out));
    free(out), free(err);

    rc = run_cmd(cairn__cmd_search, &out, &err, root, "search", "--store", store, "--query",
                 "陶瓷杯", "--json", (char *)NULL);
    j = parse_out(out);
    json_t *docs = json_object_get(j, "docs");
    ok(rc == 0 && json_array_size(docs) == 1 &&
           !strcmp(json_string_value(json_object_get(json_array_get(docs, 0), "id")), "p2"),
       "search --json finds the CJK document: %s", one_line(out));
    json_decref(j);
    free(out), free(err);

    rc = run_cmd(cairn__cmd_search, &out, &err, root, "search", "--store", store, "-q", "mug 350ml",
                 "--top-k", "1", "--json", (char *)NULL);
    j = parse_out(out);
    docs = json_object_get(j, "docs");
    json_t *d0 = json_array_get(docs, 0);
    ok(rc == 0 && json_array_size(docs) == 1 &&
           !strcmp(json_string_value(json_object_get(d0, "id")), "p1") &&
           !strcmp(json_string_value(json_object_get(json_object_get(d0, "fields"), "title")),
                   "Mug"),
       "--top-k 1 and the document's other fields: %s", one_line(out));
    json_decref(j);
    free(out), free(err);

    rc = run_cmd(cairn__cmd_search, &out, &err, root, "search", "--store", store, "--query",
                 "bottle", (char *)NULL);
    ok(rc == 0 && tu_contains(out, " 1 ") && tu_contains(out, "  3  Steel travel bottle"),
       "text output lists rank, score, id, text: %s", one_line(out));
    free(out), free(err);

    /* bad corpora: exit 65, the line and field named, nothing written */
    cairn__bm25 *ix;
    char e[512];
    cairn__bm25_info before, after;
    char *dir = tu_fmt("%s/index", store);
    if (cairn__bm25_open(dir, 0, &ix, e, sizeof e) != 0) {
        ok(0, "open %s: %s", dir, e);
        free(dir), free(store), free(corpus);
        return;
    }
    cairn__bm25_info_get(ix, &before);
    cairn__bm25_close(ix);
    static const struct {
        const char *line3, *want;
        const char *batch;
    } bad[] = {
        {"{\"id\": \"x3\", \"text\": 5}", ":3: field 'text' must be a string", NULL},
        {"{\"id\": \"x3\"}", ":3: field 'text' is missing", NULL},
        {"{\"text\": \"no id\"}", ":3: field 'id' is missing", NULL},
        {"{\"id\": [1], \"text\": \"t\"}", ":3: field 'id' must be a string", NULL},
        {"{\"id\": \"\", \"text\": \"t\"}", ":3: field 'id' must be 1..", NULL},
        {"[1, 2]", ":3: must be a JSON object", NULL},
        {"{\"id\": \"x3\", \"text\": \"unterminated}", ":3: invalid JSON", NULL},
        {"{\"id\": \"x3\", \"text\": \"a\", \"text\": \"b\"}", ":3: invalid JSON", NULL},
        {"{\"id\": \"x3\", \"text\": 5}", ":3: field 'text' must be a string", "1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *text = tu_fmt("{\"id\": \"x1\", \"text\": \"brandnew first\"}\n"
                            "{\"id\": \"p1\", \"text\": \"replaced text\"}\n%s\n"
                            "{\"id\": \"x4\", \"text\": \"brandnew fourth\"}\n",
                            bad[i].line3);
        tu_write_file(corpus, text, strlen(text));
        free(text);
        if (bad[i].batch)
            rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus",
                         corpus, "--batch", bad[i].batch, (char *)NULL);
        else
            rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus",
                         corpus, (char *)NULL);
        char *want = tu_fmt("corpus.jsonl%s", bad[i].want);
        ok(rc == 65 && tu_contains(err, want) && tu_contains(err, "nothing was written"),
           "bad line 3 (%s%s) -> 65 naming '%s': %s", bad[i].line3,
           bad[i].batch ? ", --batch 1" : "", want, one_line(err));
        free(want);
        free(out), free(err);
        if (cairn__bm25_open(dir, 0, &ix, e, sizeof e) != 0) {
            ok(0, "open %s: %s", dir, e);
            continue;
        }
        cairn__bm25_info_get(ix, &after);
        cairn__bm25_hit *h = NULL;
        size_t n = 0;
        cairn__bm25_search(ix, "brandnew replaced", 10, &h, &n);
        ok(after.n_docs == before.n_docs && after.total_len == before.total_len &&
               after.n_terms == before.n_terms && n == 0,
           "  nothing written: docs %llu, tokens %llu, terms %llu, %zu new hits",
           (unsigned long long)after.n_docs, (unsigned long long)after.total_len,
           (unsigned long long)after.n_terms, n);
        cairn__bm25_hits_free(h, n);
        cairn__bm25_close(ix);
    }

    /* --batch with a good file: several commits */
    const char *more = "{\"id\": \"m1\", \"text\": \"one\"}\n{\"id\": \"m2\", \"text\": \"two\"}\n"
                       "{\"id\": \"m3\", \"text\": \"three\"}\n";
    tu_write_file(corpus, more, strlen(more));
    rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus", corpus,
                 "--batch", "2", "--json", (char *)NULL);
    j = parse_out(out);
    ok(rc == 0 && json_integer_value(json_object_get(j, "docs")) == 6,
       "--batch 2 over 3 documents: 6 in the index: %s", one_line(out));
    json_decref(j);
    free(out), free(err);

    /* usage and missing things */
    char *missing = tu_fmt("%s/nope.jsonl", root);
    rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--store", store, "--corpus", missing,
                 (char *)NULL);
    ok(rc == 66 && tu_contains(err, missing), "missing corpus -> 66 (%s)", one_line(err));
    free(out), free(err);
    char *nostore = tu_fmt("%s/nostore", root);
    rc = run_cmd(cairn__cmd_search, &out, &err, root, "search", "--store", nostore, "--query", "x",
                 (char *)NULL);
    ok(rc == 66 && tu_contains(err, "cairn index"), "search without an index -> 66 (%s)",
       one_line(err));
    free(out), free(err);
    rc = run_cmd(cairn__cmd_search, &out, &err, root, "search", "--store", store, (char *)NULL);
    ok(rc == 64 && tu_contains(err, "--query"), "search without --query -> 64");
    free(out), free(err);
    rc = run_cmd(cairn__cmd_search, &out, &err, root, "search", "--store", store, "-q", "x", "-k",
                 "0", (char *)NULL);
    ok(rc == 64, "--top-k 0 -> 64");
    free(out), free(err);
    unsetenv("CAIRN_STORE");
    rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--corpus", corpus, (char *)NULL);
    ok(rc == 64 && tu_contains(err, "--store"), "index without a store -> 64");
    free(out), free(err);
    setenv("CAIRN_STORE", store, 1);
    rc = run_cmd(cairn__cmd_search, &out, &err, root, "search", "-q", "three", (char *)NULL);
    ok(rc == 0 && tu_contains(out, "m3"), "CAIRN_STORE is the default store");
    free(out), free(err);
    unsetenv("CAIRN_STORE");
    rc = run_cmd(cairn__cmd_index, &out, &err, root, "index", "--help", (char *)NULL);
    ok(rc == 0 && tu_contains(out, "usage: cairn index"), "index --help");
    free(out), free(err);
    free(missing), free(nostore), free(dir), free(store), free(corpus);
}

/* The same 5000 documents built under the default memory cap and under 1 MB (a flush every
 * ~12k postings): the batch buffers' peak stays near the small cap, and every benchmark query
 * returns the same ids and score bits from both indexes (exhaustive and pruned). */
static void memory_cap(const char *root)
{
    enum { NDOC = 5000, NQ = 200 };
    const size_t cap = (size_t)1 << 20;
    cairn__bm25 *ix[2] = {NULL, NULL};
    char err[512];
    int rc = 0;
    static char text[200 * 16 + 32];
    for (int v = 0; v < 2 && !rc; v++) {
        char *dir = tu_fmt("%s/memcap%d", root, v);
        rc = cairn__bm25_open(dir, 1, &ix[v], err, sizeof err);
        free(dir);
        if (rc) {
            ok(0, "open: %s", err);
            break;
        }
        if (v)
            cairn__bm25_set_memory(ix[v], cap);
        corpus_rng = 0x9e3779b97f4a7c15ull;
        rc = cairn__bm25_begin(ix[v]);
        for (int d = 0; d < NDOC && !rc; d++) {
            corpus_doc(text);
            char id[16];
            snprintf(id, sizeof id, "doc%d", d);
            rc = cairn__bm25_add(ix[v], id, text, strlen(text), NULL, NULL);
        }
        /* replacements too: their deletes are buffered under the cap as well */
        for (int d = 0; d < NDOC / 10 && !rc; d++) {
            corpus_doc(text);
            char id[16];
            snprintf(id, sizeof id, "doc%d", d * 7 % NDOC);
            rc = cairn__bm25_add(ix[v], id, text, strlen(text), NULL, NULL);
        }
        rc = rc ? rc : cairn__bm25_commit(ix[v]);
        if (rc)
            diag("build %d: %s", v, cairn__bm25_errmsg(ix[v]));
    }
    ok(rc == 0, "5000 documents and 500 replacements built under the default cap and under 1 MB");
    if (rc) {
        cairn__bm25_close(ix[0]), cairn__bm25_close(ix[1]);
        return;
    }
    size_t p0 = cairn__bm25_batch_peak(ix[0]), p1 = cairn__bm25_batch_peak(ix[1]);
    diag("batch buffers' peak: %zu bytes by default, %zu under a %zu-byte cap", p0, p1, cap);
    ok(p1 <= cap + cap / 4 && p1 < p0, "the 1 MB build's buffers peak at %zu bytes (<= 1.25 MB)",
       p1);
    long bad = 0;
    for (int q = 0; q < NQ; q++) {
        char query[80];
        corpus_query(query, q % 2 ? 0 : 10);
        for (int path = 0; path < 2; path++) {
            cairn__bm25_hit *h[2];
            size_t n[2];
            int r0 = path ? cairn__bm25_search(ix[0], query, 10, &h[0], &n[0])
                          : cairn__bm25_search_exhaustive(ix[0], query, 10, &h[0], &n[0]);
            int r1 = path ? cairn__bm25_search(ix[1], query, 10, &h[1], &n[1])
                          : cairn__bm25_search_exhaustive(ix[1], query, 10, &h[1], &n[1]);
            int same = r0 == 0 && r1 == 0 && n[0] == n[1];
            for (size_t i = 0; same && i < n[0]; i++)
                same =
                    !strcmp(h[0][i].id, h[1][i].id) && !memcmp(&h[0][i].score, &h[1][i].score, 8);
            bad += !same;
            if (!r0)
                cairn__bm25_hits_free(h[0], n[0]);
            if (!r1)
                cairn__bm25_hits_free(h[1], n[1]);
        }
    }
    ok(bad == 0, "%d queries, both paths: the capped build answers the same bits (%ld differ)", NQ,
       bad);
    cairn__bm25_close(ix[0]), cairn__bm25_close(ix[1]);
}

int main(void)
{
    char *root = tu_mkdtemp("bm25");
    tokenizer();
    scores(root);
    replace(root);
    brute_force(root, 0);
    rng = 88172645463325252ull;
    brute_force(root, 37); /* many flushes inside each batch, replacing buffered documents */
    pruned(root);
    memory_cap(root);
    old_format(root, 1);
    old_format(root, 2);
    open_errors(root);
    cli(root);
    tu_rm_rf(root);
    free(root);
    return tap_done();
}
