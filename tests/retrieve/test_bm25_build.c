/* test_bm25_build.c - how the BM25 index is written (format 3): the block codec at its edges,
 * scores through compact blocks at their edges (a large tf, a block of one posting, deletions
 * thinning blocks in the middle of a list, a term in every document), a build under a small
 * memory cap (run files, several transactions) against one under the default, and a build
 * killed with SIGKILL between its transactions: the index is then marked unfinished, readers
 * are refused, and `cairn index` rebuilds it into the index a clean build makes. */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lmdb.h>

#include "bench/retrieve/corpus.h"
#include "steps/bm25.h"
#include "steps/bm25_impl.h"
#include "tests/tap.h"
#include "tests/testutil.h"
#include "tools/tools.h"

/* ------------------------------------------------------------------ the codec */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Encodes and decodes one block; 1 if it comes back the same, by both decoders. */
static int roundtrip(const uint32_t *dn, const uint32_t *tf, uint32_t n, size_t *bytes)
{
    unsigned char enc[BLOCK_MAX_BYTES + 8];
    uint32_t d2[BLOCK_POSTINGS], t2[BLOCK_POSTINGS], d3[BLOCK_POSTINGS];
    size_t len = cairn__bm25_block_encode(dn, tf, n, enc);
    if (bytes)
        *bytes = len;
    block_view bv;
    if (len > BLOCK_MAX_BYTES || cairn__bm25_block_decode(enc, len, d2, t2) != n ||
        cairn__bm25_block_docnos(enc, len, d3, &bv) != n)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (d2[i] != dn[i] || t2[i] != tf[i] || d3[i] != dn[i] || block_tf(&bv, i) != tf[i])
            return 0;
    return 1;
}

static void codec(void)
{
    uint32_t dn[BLOCK_POSTINGS], tf[BLOCK_POSTINGS];
    size_t bytes = 0;
    dn[0] = 7, tf[0] = 1;
    int same = roundtrip(dn, tf, 1, &bytes);
    ok(same && bytes == 7, "a block of 1 posting: 7 bytes (%zu)", bytes);
    dn[0] = UINT32_MAX - 1, tf[0] = UINT32_MAX;
    ok(roundtrip(dn, tf, 1, NULL), "one posting at docno 2^32-2 with tf 2^32-1");
    for (uint32_t i = 0; i < BLOCK_POSTINGS; i++)
        dn[i] = i, tf[i] = 1;
    same = roundtrip(dn, tf, BLOCK_POSTINGS, &bytes);
    ok(same && bytes == 7, "128 consecutive docnos of tf 1: gaps and tfs take no bits (%zu bytes)",
       bytes);
    dn[0] = 0, dn[1] = (1u << 28) + 5, dn[2] = UINT32_MAX - 1, tf[0] = 3, tf[1] = 1u << 20,
    tf[2] = 2;
    ok(roundtrip(dn, tf, 3, NULL), "gaps >= 2^28 and up to 2^32-2, a tf of 2^20");
    dn[0] = 0, dn[1] = UINT32_MAX;
    tf[0] = tf[1] = UINT32_MAX;
    ok(roundtrip(dn, tf, 2, NULL), "a gap of 2^32-1 and tfs of 2^32-1: 32-bit lanes");
    int bad = 0;
    for (int r = 0; r < 2000; r++) {
        uint32_t n = 1 + rnd32() % BLOCK_POSTINGS, shift = rnd32() % 33, tshift = rnd32() % 33;
        uint64_t d = rnd32() % 1000;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t g = shift ? ((uint64_t)rnd32() << 16 ^ rnd32()) % ((uint64_t)1 << shift) : 0;
            d += 1 + g % (((uint64_t)UINT32_MAX - d) / (n - i + 1) + 1);
            dn[i] = (uint32_t)(d > UINT32_MAX ? UINT32_MAX : d);
            uint64_t t = tshift ? ((uint64_t)rnd32() << 16 ^ rnd32()) % ((uint64_t)1 << tshift) : 0;
            tf[i] = (uint32_t)(t == 0 ? 1 : t > UINT32_MAX ? UINT32_MAX : t);
        }
        int asc = 1;
        for (uint32_t i = 1; i < n; i++)
            asc &= dn[i] > dn[i - 1];
        bad += asc && !roundtrip(dn, tf, n, NULL);
    }
    ok(bad == 0, "2000 random blocks of 1..128 postings, widths 0..32: round trip (%d bad)", bad);
    unsigned char enc[BLOCK_MAX_BYTES + 8];
    for (uint32_t i = 0; i < 10; i++)
        dn[i] = i * 3, tf[i] = i + 1;
    size_t len = cairn__bm25_block_encode(dn, tf, 10, enc);
    uint32_t d2[BLOCK_POSTINGS], t2[BLOCK_POSTINGS];
    int rejected = cairn__bm25_block_decode(enc, len - 1, d2, t2) == 0 &&
                   cairn__bm25_block_decode(enc, len + 1, d2, t2) == 0 &&
                   cairn__bm25_block_decode(enc, 3, d2, t2) == 0;
    enc[1] = 33;
    rejected &= cairn__bm25_block_decode(enc, len, d2, t2) == 0;
    ok(rejected, "a truncated, padded or 33-bit block is refused");
}

/* ------------------------------------------------------------------ scores at the edges */

static double idf(double n, double df) { return log(1.0 + (n - df + 0.5) / (df + 0.5)); }
static double bm25(double tf, double dl, double avgdl, double n, double df)
{
    const double k1 = 1.2, b = 0.75;
    return idf(n, df) * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl));
}

typedef struct ref_doc {
    uint32_t tf_every, tf_thin, tf_big, dl;
} ref_doc;

/* The text of document i of the edge corpus: "every" tf_every times, "thin" tf_thin times,
 * "big" tf_big times, and filler words; its counts in *r. */
static char *edge_text(int i, int variant, ref_doc *r)
{
    r->tf_every = 1 + (uint32_t)(i % 4);
    r->tf_thin = variant ? 0 : 1 + (uint32_t)(i % 3);
    r->tf_big = i == 2 && !variant ? 70000 : 0;
    uint32_t filler = 3 + (uint32_t)(i * 7 % 11);
    size_t cap = 64 + 6 * (r->tf_every + r->tf_thin + filler) + 4 * r->tf_big;
    char *t = malloc(cap), *p = t;
    for (uint32_t k = 0; k < r->tf_every; k++)
        p += sprintf(p, "every ");
    for (uint32_t k = 0; k < r->tf_thin; k++)
        p += sprintf(p, "thin ");
    for (uint32_t k = 0; k < r->tf_big; k++)
        p += sprintf(p, "big ");
    for (uint32_t k = 0; k < filler; k++)
        p += sprintf(p, "f%u ", k);
    if (i == 5)
        p += sprintf(p, "single ");
    r->dl = r->tf_every + r->tf_thin + r->tf_big + filler + (i == 5);
    return t;
}

/* Runs query down both paths against the reference scores want[0..n): same hits (every
 * document with a positive score, best first, ties by docno), scores within 1e-9 of the
 * formula, and the two paths the same bits. */
static int check_query(cairn__bm25 *ix, const char *query, const double *want, int n)
{
    cairn__bm25_hit *hp = NULL, *he = NULL;
    size_t np = 0, ne = 0;
    int good = cairn__bm25_search(ix, query, (size_t)n + 5, &hp, &np) == 0 &&
               cairn__bm25_search_exhaustive(ix, query, (size_t)n + 5, &he, &ne) == 0 && np == ne;
    size_t matching = 0;
    for (int i = 0; i < n; i++)
        matching += want[i] > 0;
    good = good && np == matching;
    for (size_t k = 0; good && k < np; k++) {
        int i = atoi(hp[k].id + 1);
        good = !strcmp(hp[k].id, he[k].id) && !memcmp(&hp[k].score, &he[k].score, 8) &&
               fabs(hp[k].score - want[i]) < 1e-9 && (k == 0 || hp[k].score <= hp[k - 1].score);
    }
    if (!good)
        diag("query '%s': %zu pruned, %zu exhaustive, %zu expected", query, np, ne, matching);
    cairn__bm25_hits_free(hp, np);
    cairn__bm25_hits_free(he, ne);
    return good;
}

static void edges(const char *root)
{
    enum { NDOC = 1500 };
    char *dir = tu_fmt("%s/edges", root), err[512];
    cairn__bm25 *ix = NULL;
    if (cairn__bm25_open(dir, 1, &ix, err, sizeof err)) {
        ok(0, "open: %s", err);
        free(dir);
        return;
    }
    cairn__bm25_set_prune_min(ix, 0); /* every query down the pruned path too */
    static ref_doc ref[NDOC];
    int rc = cairn__bm25_begin(ix);
    for (int i = 0; i < NDOC && !rc; i++) {
        char id[16], *t = edge_text(i, 0, &ref[i]);
        snprintf(id, sizeof id, "d%d", i);
        rc = cairn__bm25_add(ix, id, t, strlen(t), NULL, NULL);
        free(t);
    }
    rc = rc ? rc : cairn__bm25_commit(ix);
    /* then single documents replaced without "thin", one batch each, in the middle of its
     * list: each rewrites one block of 127, thinner than its neighbours */
    static const int thinned[] = {300, 700, 701, 1100, 0, NDOC - 1};
    for (size_t j = 0; j < sizeof thinned / sizeof *thinned && !rc; j++) {
        int i = thinned[j];
        char id[16], *t = edge_text(i, 1, &ref[i]);
        snprintf(id, sizeof id, "d%d", i);
        rc = cairn__bm25_begin(ix);
        rc = rc ? rc : cairn__bm25_add(ix, id, t, strlen(t), NULL, NULL);
        rc = rc ? rc : cairn__bm25_commit(ix);
        free(t);
    }
    ok(rc == 0, "1500 documents, then 6 of them replaced one batch at a time (%s)",
       rc ? cairn__bm25_errmsg(ix) : "");
    double total = 0, df_thin = 0;
    for (int i = 0; i < NDOC; i++)
        total += ref[i].dl, df_thin += ref[i].tf_thin > 0;
    double avgdl = total / NDOC;
    static double want[NDOC];
    for (int i = 0; i < NDOC; i++)
        want[i] = bm25(ref[i].tf_every, ref[i].dl, avgdl, NDOC, NDOC);
    ok(check_query(ix, "every", want, NDOC), "a term in every document: the formula, both paths");
    for (int i = 0; i < NDOC; i++)
        want[i] = ref[i].tf_thin ? bm25(ref[i].tf_thin, ref[i].dl, avgdl, NDOC, df_thin) : 0;
    ok(check_query(ix, "thin", want, NDOC),
       "a list thinned by deletions in the middle: the formula, both paths");
    for (int i = 0; i < NDOC; i++)
        want[i] = ref[i].tf_big ? bm25(ref[i].tf_big, ref[i].dl, avgdl, NDOC, 1) : 0;
    ok(check_query(ix, "big", want, NDOC), "a tf of 70000 (17 bits) in a block of one posting");
    for (int i = 0; i < NDOC; i++)
        want[i] = (ref[i].tf_thin ? bm25(ref[i].tf_thin, ref[i].dl, avgdl, NDOC, df_thin) : 0) +
                  (i == 5 ? bm25(1, ref[i].dl, avgdl, NDOC, 1) : 0);
    ok(check_query(ix, "thin single", want, NDOC), "the thinned list and a one-document term");

    /* the thinned blocks are there: the bounds table of "thin" has blocks under 128 in it */
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi blocks, post;
    int thin_mid = 0;
    cairn__bm25_close(ix);
    ix = NULL;
    if (mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 8) == 0 &&
        mdb_env_open(env, dir, MDB_RDONLY | MDB_NOTLS, 0600) == 0 &&
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) == 0 &&
        mdb_dbi_open(txn, "blocks", 0, &blocks) == 0 && mdb_dbi_open(txn, "post", 0, &post) == 0) {
        MDB_val k = {4, "thin"}, v;
        if (mdb_get(txn, blocks, &k, &v) == 0) {
            uint32_t nb = get32((char *)v.mv_data + 8);
            const unsigned char *b = (const unsigned char *)v.mv_data + 12;
            for (uint32_t i = 0; i + 1 < nb; i++) {
                unsigned char key[9] = "thin";
                be32(get32(b + 12 * i), key + 5);
                MDB_val bk = {9, key}, bv;
                if (mdb_get(txn, post, &bk, &bv) == 0 &&
                    block_count(bv.mv_data, bv.mv_size) < BLOCK_POSTINGS)
                    thin_mid++;
            }
        }
    }
    if (txn)
        mdb_txn_abort(txn);
    mdb_env_close(env);
    ok(thin_mid > 0, "  and the list has %d blocks of fewer than 128 before its last", thin_mid);
    free(dir);
}

/* ------------------------------------------------------------------ memory cap, crash */

/* Writes the benchmark corpus's first n documents as JSONL. */
static char *write_corpus(const char *root, int n)
{
    char *path = tu_fmt("%s/corpus%d.jsonl", root, n);
    FILE *f = fopen(path, "w");
    static char text[200 * 16 + 32];
    corpus_rng = 0x9e3779b97f4a7c15ull;
    for (int d = 0; f && d < n; d++) {
        corpus_doc(text);
        fprintf(f, "{\"id\": \"doc%d\", \"text\": \"%s\"}\n", d, text);
    }
    if (f)
        fclose(f);
    return path;
}

static double file_mb(const char *dir)
{
    char *p = tu_fmt("%s/data.mdb", dir);
    struct stat st;
    double mb = stat(p, &st) == 0 ? (double)st.st_size / 1048576.0 : -1;
    free(p);
    return mb;
}

static void on_commit_kill(unsigned n)
{
    if (n == 2)
        raise(SIGKILL);
}

/* Runs `cairn index --index DIR --corpus FILE --memory MB` in a child process (stdout and
 * stderr into out_path), killing itself at its second transaction if kill_at_2. Returns the
 * wait status. */
static int index_child(const char *dir, const char *corpus, const char *mb, const char *out_path,
                       int kill_at_2)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *o = freopen(out_path, "w", stdout);
        (void)o;
        dup2(fileno(stdout), 2);
        if (kill_at_2)
            cairn__bm25_set_commit_hook(on_commit_kill);
        char *argv[] = {"index",        "--index",  (char *)dir, "--corpus",
                        (char *)corpus, "--memory", (char *)mb,  NULL};
        _exit(cairn__cmd_index(7, argv));
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

/* Whether two indexes answer the queries with the same ids and score bits. */
static long differ(const char *a, const char *b, int nq)
{
    cairn__bm25 *x = NULL, *y = NULL;
    char err[512];
    if (cairn__bm25_open(a, 0, &x, err, sizeof err) ||
        cairn__bm25_open(b, 0, &y, err, sizeof err)) {
        diag("open: %s", err);
        cairn__bm25_close(x);
        return -1;
    }
    long bad = 0;
    corpus_rng = 12345;
    for (int q = 0; q < nq; q++) {
        char query[80];
        corpus_query(query, q % 2 ? 0 : 10);
        cairn__bm25_hit *h[2];
        size_t n[2];
        int r0 = cairn__bm25_search(x, query, 10, &h[0], &n[0]),
            r1 = cairn__bm25_search(y, query, 10, &h[1], &n[1]);
        int same = r0 == 0 && r1 == 0 && n[0] == n[1];
        for (size_t i = 0; same && i < n[0]; i++)
            same = !strcmp(h[0][i].id, h[1][i].id) && !memcmp(&h[0][i].score, &h[1][i].score, 8);
        bad += !same;
        if (!r0)
            cairn__bm25_hits_free(h[0], n[0]);
        if (!r1)
            cairn__bm25_hits_free(h[1], n[1]);
    }
    cairn__bm25_close(x), cairn__bm25_close(y);
    return bad;
}

static void cap_and_crash(const char *root)
{
    enum { NDOC = 12000, NQ = 200 };
    corpus_vocab();
    char *corpus = write_corpus(root, NDOC), *log = tu_fmt("%s/index.log", root);
    char *clean = tu_fmt("%s/clean", root), *capped = tu_fmt("%s/capped", root),
         *crashed = tu_fmt("%s/crashed", root);
    int st = index_child(clean, corpus, "256", log, 0);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "12k documents indexed under the default cap");
    st = index_child(capped, corpus, "2", log, 0);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "and under --memory 2 (run files, several commits)");
    double mc = file_mb(clean), mp = file_mb(capped);
    diag("index file: %.2f MB under the default cap, %.2f MB under 2 MB", mc, mp);
    ok(mp > 0 && mp <= mc * 1.10,
       "  the capped build is as compact: %.2f MB vs %.2f MB (appended, no page splits)", mp, mc);
    ok(differ(clean, capped, NQ) == 0, "  and answers %d queries with the same bits", NQ);

    /* killed by SIGKILL after its second transaction committed */
    st = index_child(crashed, corpus, "2", log, 1);
    ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "a build under --memory 2 killed by SIGKILL");
    cairn__bm25 *ix = NULL;
    char err[512] = "";
    int rc = cairn__bm25_open(crashed, 0, &ix, err, sizeof err);
    ok(rc == CAIRN_ETRANSIENT && !ix && strstr(err, "interrupted") && strstr(err, "cairn index"),
       "  a reader is refused: unfinished, run `cairn index` (%s)", err);
    cairn__bm25_close(ix);
    ix = NULL;
    rc = cairn__bm25_open(crashed, 1, &ix, err, sizeof err);
    ok(rc == 0 && cairn__bm25_is_unfinished(ix), "  a writer opens it and sees it unfinished");
    cairn__bm25_close(ix);
    st = index_child(crashed, corpus, "2", log, 0);
    char *out = tu_read_file(log, NULL);
    ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && out && strstr(out, "rebuilding"),
       "  `cairn index` again rebuilds it and says so");
    free(out);
    ok(differ(clean, crashed, NQ) == 0, "  into the index a clean build makes (%d queries)", NQ);
    ok(file_mb(crashed) <= mc * 1.6, "  without growing past the clean one much (%.2f MB)",
       file_mb(crashed));
    free(corpus), free(log), free(clean), free(capped), free(crashed);
}

/* Replaces doc4000 through an open handle; 0 or the error. */
static int replace_one(cairn__bm25 *ix)
{
    const char *t = "every word here is new: lorem ipsum dolor sit amet";
    int rc = cairn__bm25_begin(ix);
    rc = rc ? rc : cairn__bm25_add(ix, "doc4000", t, strlen(t), NULL, NULL);
    rc = rc ? rc : cairn__bm25_commit(ix);
    if (rc)
        diag("replace: %s", cairn__bm25_errmsg(ix));
    return rc;
}

/* A writer handle kept open while another process commits: its next batch must start from
 * the lengths that process wrote, not the ones it read before. */
static void stale_writer(const char *root)
{
    corpus_vocab();
    char *small = write_corpus(root, 3000), *big = write_corpus(root, 6000);
    char *log = tu_fmt("%s/stale.log", root), *x = tu_fmt("%s/stale-x", root),
         *y = tu_fmt("%s/stale-y", root), err[512];
    int st = index_child(x, small, "256", log, 0);
    cairn__bm25 *a = NULL, *b = NULL;
    int rc =
        WIFEXITED(st) && WEXITSTATUS(st) == 0 ? cairn__bm25_open(x, 1, &a, err, sizeof err) : -1;
    cairn__bm25_hit *h = NULL;
    size_t n = 0;
    if (!rc && (rc = cairn__bm25_search(a, "every", 3, &h, &n)) == 0) /* reads the lengths */
        cairn__bm25_hits_free(h, n);
    st = rc ? 0 : index_child(x, big, "256", log, 0); /* another process adds 3000 more */
    rc = rc || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ? -1 : replace_one(a);
    cairn__bm25_close(a);
    st = rc ? 0 : index_child(y, big, "256", log, 0);
    rc = rc || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ? -1
                                                      : cairn__bm25_open(y, 1, &b, err, sizeof err);
    rc = rc ? rc : replace_one(b);
    cairn__bm25_close(b);
    ok(rc == 0, "an open writer, another process's commit, then the writer's batch");
    ok(rc == 0 && differ(x, y, 200) == 0,
       "  answers as if one process had written it all (200 queries, same bits)");
    free(small), free(big), free(log), free(x), free(y);
}

int main(void)
{
    char *root = tu_mkdtemp("bm25b");
    codec();
    edges(root);
    cap_and_crash(root);
    stale_writer(root);
    tu_rm_rf(root);
    free(root);
    return tap_done();
}
