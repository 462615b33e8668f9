/* steps/bm25.c - the BM25 index behind the `retrieve` step: LMDB layout, batched writes, and
 * the query loop. The text tokenizer it indexes and queries with is in textsplit.c.
 *
 * Layout (one LMDB environment, five named databases):
 *   post  term \0 be32(docno) -> {u32 tf, u32 dl}   one posting; dl rides along so scoring a
 *                                                    posting needs no second lookup
 *   df    term -> u32 number of documents holding it
 *   docs  be32(docno) -> {u32 dl, u32 id_len, u32 text_len, u32 extra_len, id, text, extra}
 *   ids   doc id -> u32 docno
 *   meta  "format", "tokenizer", "n_docs", "total_len", "next_docno"
 * Terms never contain a NUL byte, so the postings of one term are exactly the keys starting
 * with "term\0": a query walks them with one cursor, in docno order, and accumulates scores into
 * a dense array indexed by docno (touched entries are tracked by a stamp, so nothing is cleared
 * between queries); a k-sized heap then picks the top k.
 *
 * Writing: adding documents one at a time would insert postings at random places in the
 * B-tree (each document touches ~100 terms). Instead a batch buffers postings and
 * document-frequency deltas in memory, then writes them sorted by key, so consecutive puts land
 * on the same, hot pages. A replaced document's old postings are found by re-tokenizing its
 * stored text (the tokenizer version is recorded in meta, so this stays exact); if they are
 * still in the buffer, the buffer is flushed first.
 */
#include "steps/bm25.h"

#include <errno.h>
#include <lmdb.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT_VERSION 1u
/* Postings buffered before a batch writes them out (16 bytes each). */
#define FLUSH_POSTINGS (4u << 20)

typedef struct term_ent {
    uint32_t off, len; /* in the pool */
    uint32_t hash;
    int32_t delta;     /* df change in this batch */
    uint32_t doc_mark; /* the document being tokenized when doc_tf was last reset */
    uint32_t doc_tf;
} term_ent;

typedef struct posting {
    uint32_t term, docno, tf, dl;
} posting;

struct cairn__bm25 {
    MDB_env *env;
    MDB_dbi meta, post, df, docs, ids;
    int writable;
    char dir[4096];
    char err[1024];

    /* searching */
    MDB_txn *rtxn; /* reset between searches, renewed for the next one */
    double *score;
    uint32_t *stamp, cur_stamp, *touched;
    size_t score_cap, n_touched;

    /* writing */
    MDB_txn *wtxn;
    int poisoned;
    uint64_t n_docs, total_len;
    uint32_t next_docno;
    char *pool;
    size_t pool_n, pool_cap;
    term_ent *terms;
    size_t n_terms, terms_cap;
    uint32_t *slots; /* open addressing: term index + 1, 0 = empty */
    size_t slot_cap;
    posting *posts;
    size_t n_posts, posts_cap;
    uint8_t *pending; /* bit per docno: has postings in the buffer */
    size_t pending_cap;
    uint32_t *doc_terms; /* terms of the document being added */
    size_t n_doc_terms, doc_terms_cap;
    uint32_t doc_mark;
    size_t flush_at; /* postings buffered before a flush */
};

/* ------------------------------------------------------------------ helpers */

static int fail(cairn__bm25 *ix, int code, const char *fmt, ...) CAIRN_PRINTF(3, 4);
static int fail(cairn__bm25 *ix, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ix->err, sizeof ix->err, fmt, ap);
    va_end(ap);
    return code;
}

/* Translates an LMDB code at the boundary, keeping LMDB's text in the message. */
static int mdb_fail(cairn__bm25 *ix, int rc, const char *what)
{
    int code = rc == MDB_MAP_FULL || rc == ENOSPC ? CAIRN_EFULL
               : rc == ENOMEM                     ? CAIRN_ENOMEM
               : rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_BAD_VALSIZE
                   ? CAIRN_ECORRUPT
                   : CAIRN_EIO;
    return fail(ix, code, "index %s: %s: %s", ix->dir, what, mdb_strerror(rc));
}

static void be32(uint32_t v, unsigned char *o)
{
    o[0] = (unsigned char)(v >> 24), o[1] = (unsigned char)(v >> 16);
    o[2] = (unsigned char)(v >> 8), o[3] = (unsigned char)v;
}

static uint32_t get32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static int mkdir_p(const char *dir)
{
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return -1;
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static int meta_get(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t *v)
{
    MDB_val k = {strlen(key), (void *)key}, d;
    int rc = mdb_get(txn, dbi, &k, &d);
    if (rc)
        return rc;
    if (d.mv_size != 8)
        return MDB_CORRUPTED;
    memcpy(v, d.mv_data, 8);
    return 0;
}

static int meta_put(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t v)
{
    MDB_val k = {strlen(key), (void *)key}, d = {8, &v};
    return mdb_put(txn, dbi, &k, &d, 0);
}

/* ------------------------------------------------------------------ open / close */

int cairn__bm25_open(const char *dir, int writable, cairn__bm25 **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!dir || !*dir) {
        snprintf(err, errlen, "index: empty directory name");
        return CAIRN_EINVAL;
    }
    cairn__bm25 *ix = calloc(1, sizeof *ix);
    if (!ix) {
        snprintf(err, errlen, "index %s: out of memory", dir);
        return CAIRN_ENOMEM;
    }
    snprintf(ix->dir, sizeof ix->dir, "%s", dir);
    ix->writable = writable;
    ix->flush_at = FLUSH_POSTINGS;
    int rc;
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    if (writable) {
        if (mkdir_p(dir) != 0) {
            snprintf(err, errlen, "index %s: cannot create the directory: %s", dir,
                     strerror(errno));
            free(ix);
            return CAIRN_EIO;
        }
    } else if (access(data, F_OK) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            snprintf(err, errlen,
                     "no retrieval index at %s: build it with `cairn index --store DIR --corpus "
                     "FILE.jsonl` (the index lives in DIR/index)",
                     dir);
        else
            snprintf(err, errlen, "index %s: %s", data, strerror(e));
        free(ix);
        return e == ENOENT || e == ENOTDIR ? CAIRN_ENOENT : CAIRN_EIO;
    }
    MDB_txn *txn = NULL;
    const char *what = "mdb_env_open";
    /* The map is only reserved address space; the file grows as pages are written. 64 GiB
     * holds corpora far beyond what one machine would index with this engine; where the
     * address space is limited (ulimit -v, valgrind, 32-bit) smaller maps are tried. LMDB
     * raises a map below the data already written to fit it. */
    static const unsigned map_gib[] = {64, 16, 4, 1};
    for (size_t i = 0; i < sizeof map_gib / sizeof *map_gib; i++) {
        if (sizeof(size_t) < 8 && map_gib[i] > 1)
            continue;
        if ((rc = mdb_env_create(&ix->env)) != 0) {
            what = "mdb_env_create";
            goto lmdb_fail;
        }
        mdb_env_set_maxdbs(ix->env, 8);
        mdb_env_set_mapsize(ix->env, (size_t)map_gib[i] << 30);
        rc = mdb_env_open(ix->env, dir, MDB_NOTLS | MDB_NORDAHEAD | (writable ? 0 : MDB_RDONLY),
                          0600);
        if (rc == 0)
            break;
        mdb_env_close(ix->env); /* a failed open leaves the handle unusable */
        ix->env = NULL;
        if (rc != ENOMEM && rc != EINVAL)
            break;
    }
    if (rc)
        goto lmdb_fail;
    what = "mdb_txn_begin";
    if ((rc = mdb_txn_begin(ix->env, NULL, writable ? 0 : MDB_RDONLY, &txn)) != 0)
        goto lmdb_fail;
    struct {
        const char *name;
        MDB_dbi *dbi;
    } dbs[] = {{"meta", &ix->meta},
               {"post", &ix->post},
               {"df", &ix->df},
               {"docs", &ix->docs},
               {"ids", &ix->ids}};
    what = "mdb_dbi_open";
    for (size_t i = 0; i < sizeof dbs / sizeof *dbs; i++) {
        rc = mdb_dbi_open(txn, dbs[i].name, writable ? MDB_CREATE : 0, dbs[i].dbi);
        if (rc == MDB_NOTFOUND) {
            mdb_txn_abort(txn);
            mdb_env_close(ix->env);
            snprintf(err, errlen,
                     "index %s: not a retrieval index (no '%s' table); rebuild it with `cairn "
                     "index`",
                     dir, dbs[i].name);
            free(ix);
            return CAIRN_ESCHEMA;
        }
        if (rc)
            goto lmdb_fail;
    }
    uint64_t fmt = 0, tok = 0;
    rc = meta_get(txn, ix->meta, "format", &fmt);
    if (rc == MDB_NOTFOUND && writable) {
        what = "writing the format";
        if ((rc = meta_put(txn, ix->meta, "format", FORMAT_VERSION)) != 0 ||
            (rc = meta_put(txn, ix->meta, "tokenizer", CAIRN__BM25_TOKENIZER_VERSION)) != 0 ||
            (rc = meta_put(txn, ix->meta, "n_docs", 0)) != 0 ||
            (rc = meta_put(txn, ix->meta, "total_len", 0)) != 0 ||
            (rc = meta_put(txn, ix->meta, "next_docno", 0)) != 0)
            goto lmdb_fail;
        fmt = FORMAT_VERSION, tok = CAIRN__BM25_TOKENIZER_VERSION;
    } else if (rc == 0) {
        rc = meta_get(txn, ix->meta, "tokenizer", &tok);
    }
    if (rc && rc != MDB_NOTFOUND) {
        what = "reading the format";
        goto lmdb_fail;
    }
    if (fmt != FORMAT_VERSION || tok != CAIRN__BM25_TOKENIZER_VERSION) {
        mdb_txn_abort(txn);
        mdb_env_close(ix->env);
        snprintf(err, errlen,
                 "index %s: written in format %llu with tokenizer %llu; this cairn reads format "
                 "%u with tokenizer %u: rebuild it with `cairn index` into an empty directory",
                 dir, (unsigned long long)fmt, (unsigned long long)tok, FORMAT_VERSION,
                 CAIRN__BM25_TOKENIZER_VERSION);
        free(ix);
        return CAIRN_ESCHEMA;
    }
    what = "mdb_txn_commit";
    rc = mdb_txn_commit(txn); /* also read-only: an aborted txn would close the dbi handles */
    txn = NULL;
    if (rc)
        goto lmdb_fail;
    *out = ix;
    return 0;

lmdb_fail:
    if (txn)
        mdb_txn_abort(txn);
    if (ix->env)
        mdb_env_close(ix->env);
    snprintf(err, errlen, "index %s: %s: %s", dir, what, mdb_strerror(rc));
    free(ix);
    return rc == ENOMEM                                      ? CAIRN_ENOMEM
           : rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH ? CAIRN_ESCHEMA
                                                             : CAIRN_EIO;
}

static void batch_reset(cairn__bm25 *ix)
{
    ix->pool_n = ix->n_terms = ix->n_posts = ix->n_doc_terms = 0;
    if (ix->slots)
        memset(ix->slots, 0, ix->slot_cap * sizeof *ix->slots);
    if (ix->pending)
        memset(ix->pending, 0, ix->pending_cap);
}

void cairn__bm25_close(cairn__bm25 *ix)
{
    if (!ix)
        return;
    cairn__bm25_abort(ix);
    if (ix->rtxn)
        mdb_txn_abort(ix->rtxn);
    mdb_env_close(ix->env);
    free(ix->score), free(ix->stamp), free(ix->touched);
    free(ix->pool), free(ix->terms), free(ix->slots), free(ix->posts), free(ix->pending);
    free(ix->doc_terms);
    free(ix);
}

const char *cairn__bm25_errmsg(const cairn__bm25 *ix) { return ix ? ix->err : ""; }

void cairn__bm25_set_flush_postings(cairn__bm25 *ix, size_t n)
{
    ix->flush_at = n ? n : FLUSH_POSTINGS;
}

/* ------------------------------------------------------------------ the write batch */

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int rehash(cairn__bm25 *ix, size_t cap)
{
    uint32_t *s = calloc(cap, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < ix->n_terms; i++) {
        size_t j = ix->terms[i].hash & (cap - 1);
        while (s[j])
            j = (j + 1) & (cap - 1);
        s[j] = (uint32_t)i + 1;
    }
    free(ix->slots);
    ix->slots = s;
    ix->slot_cap = cap;
    return 0;
}

/* The batch's entry for a term, created if new; -1 on ENOMEM. */
static long intern(cairn__bm25 *ix, const char *tok, size_t len)
{
    if ((ix->n_terms + 1) * 2 > ix->slot_cap && rehash(ix, ix->slot_cap ? ix->slot_cap * 2 : 4096))
        return -1;
    uint32_t h = hash_bytes(tok, len);
    size_t j = h & (ix->slot_cap - 1);
    while (ix->slots[j]) {
        term_ent *e = &ix->terms[ix->slots[j] - 1];
        if (e->hash == h && e->len == len && !memcmp(ix->pool + e->off, tok, len))
            return (long)ix->slots[j] - 1;
        j = (j + 1) & (ix->slot_cap - 1);
    }
    if (grow((void **)&ix->pool, &ix->pool_cap, ix->pool_n + len, 1) ||
        grow((void **)&ix->terms, &ix->terms_cap, ix->n_terms + 1, sizeof *ix->terms))
        return -1;
    memcpy(ix->pool + ix->pool_n, tok, len);
    ix->terms[ix->n_terms] =
        (term_ent){.off = (uint32_t)ix->pool_n, .len = (uint32_t)len, .hash = h};
    ix->pool_n += len;
    ix->slots[j] = (uint32_t)ix->n_terms + 1;
    return (long)ix->n_terms++;
}

/* Grows the bitset of documents with buffered postings to hold `docno` (new bytes zeroed). */
static int grow_pending(cairn__bm25 *ix, uint32_t docno)
{
    size_t old = ix->pending_cap;
    if (grow((void **)&ix->pending, &ix->pending_cap, (size_t)docno / 8 + 1, 1))
        return -1;
    memset(ix->pending + old, 0, ix->pending_cap - old);
    return 0;
}

typedef struct collect {
    cairn__bm25 *ix;
    int oom;
} collect;

/* Token callback: counts tf per term of the current document. */
static void collect_tok(const char *tok, size_t len, void *arg)
{
    collect *c = arg;
    cairn__bm25 *ix = c->ix;
    if (c->oom)
        return;
    long t = intern(ix, tok, len);
    if (t < 0 || grow((void **)&ix->doc_terms, &ix->doc_terms_cap, ix->n_doc_terms + 1,
                      sizeof *ix->doc_terms)) {
        c->oom = 1;
        return;
    }
    term_ent *e = &ix->terms[t];
    if (e->doc_mark != ix->doc_mark) {
        e->doc_mark = ix->doc_mark;
        e->doc_tf = 0;
        ix->doc_terms[ix->n_doc_terms++] = (uint32_t)t;
    }
    e->doc_tf++;
}

/* Tokenizes a document into ix->doc_terms (unique terms, tf in the entries); returns the
 * token count, or -1 on ENOMEM. */
static int64_t doc_terms(cairn__bm25 *ix, const char *text, size_t len)
{
    collect c = {ix, 0};
    ix->n_doc_terms = 0;
    if (++ix->doc_mark == 0) { /* wrapped: marks of old entries could collide */
        for (size_t i = 0; i < ix->n_terms; i++)
            ix->terms[i].doc_mark = 0;
        ix->doc_mark = 1;
    }
    size_t n = cairn__bm25_tokenize(text, len, collect_tok, &c);
    return c.oom ? -1 : (int64_t)n;
}

/* Term order = LMDB's key order for term\0...: bytes, then the shorter first. */
static int cmp_term(const void *a, const void *b, void *arg)
{
    const cairn__bm25 *ix = arg;
    const term_ent *x = &ix->terms[*(const uint32_t *)a], *y = &ix->terms[*(const uint32_t *)b];
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(ix->pool + x->off, ix->pool + y->off, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int cmp_docno(const void *a, const void *b)
{
    uint32_t x = ((const posting *)a)->docno, y = ((const posting *)b)->docno;
    return (x > y) - (x < y);
}

/* Writes the buffered postings and df deltas in key order, then empties the buffer. */
static int flush(cairn__bm25 *ix)
{
    int rc = 0;
    size_t nt = ix->n_terms;
    uint32_t *order = malloc((nt + 1) * sizeof *order), *start = calloc(nt + 1, sizeof *start);
    posting *sorted = malloc((ix->n_posts + 1) * sizeof *sorted);
    if (!order || !start || !sorted) {
        free(order), free(start), free(sorted);
        return fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    }
    for (size_t i = 0; i < nt; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, nt, sizeof *order, cmp_term, ix);
    /* counting sort of the postings by term rank; within a term they keep insertion order,
     * which is docno order unless a replaced (older) document came in between */
    uint32_t *rank = malloc((nt + 1) * sizeof *rank);
    if (!rank) {
        free(order), free(start), free(sorted);
        return fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    }
    for (size_t i = 0; i < nt; i++)
        rank[order[i]] = (uint32_t)i;
    for (size_t i = 0; i < ix->n_posts; i++)
        start[rank[ix->posts[i].term]]++;
    uint32_t sum = 0;
    for (size_t r = 0; r < nt; r++) {
        uint32_t c = start[r];
        start[r] = sum;
        sum += c;
    }
    start[nt] = sum;
    {
        uint32_t *fill = malloc((nt + 1) * sizeof *fill);
        if (!fill) {
            free(order), free(start), free(sorted), free(rank);
            return fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
        }
        memcpy(fill, start, (nt + 1) * sizeof *fill);
        for (size_t i = 0; i < ix->n_posts; i++)
            sorted[fill[rank[ix->posts[i].term]]++] = ix->posts[i];
        free(fill);
    }
    free(rank);

    MDB_cursor *cur = NULL;
    if ((rc = mdb_cursor_open(ix->wtxn, ix->post, &cur)) != 0) {
        rc = mdb_fail(ix, rc, "mdb_cursor_open");
        goto out;
    }
    /* Keys beyond the largest one already stored are appended (MDB_APPEND): LMDB then fills
     * pages completely instead of splitting them in half, which makes a first build about
     * half the size and faster to query. The sorted batch crosses that point at most once. */
    unsigned char last[CAIRN__BM25_MAX_TOKEN + 5];
    size_t last_len = 0;
    int appending = 0;
    {
        MDB_val lk, ld;
        int m = mdb_cursor_get(cur, &lk, &ld, MDB_LAST);
        if (m == MDB_NOTFOUND)
            appending = 1;
        else if (m == 0 && lk.mv_size <= sizeof last) {
            memcpy(last, lk.mv_data, lk.mv_size);
            last_len = lk.mv_size;
        } else {
            rc = m ? mdb_fail(ix, m, "reading the last posting")
                   : fail(ix, CAIRN_ECORRUPT, "index %s: oversized posting key", ix->dir);
            mdb_cursor_close(cur);
            goto out;
        }
    }
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    for (size_t r = 0; r < nt && !rc; r++) {
        const term_ent *e = &ix->terms[order[r]];
        posting *p = sorted + start[r];
        size_t np = start[r + 1] - start[r];
        for (size_t i = 1; i < np; i++)
            if (p[i].docno < p[i - 1].docno) {
                qsort(p, np, sizeof *p, cmp_docno);
                break;
            }
        memcpy(key, ix->pool + e->off, e->len);
        key[e->len] = 0;
        for (size_t i = 0; i < np; i++) {
            be32(p[i].docno, key + e->len + 1);
            uint32_t v[2] = {p[i].tf, p[i].dl};
            MDB_val k = {e->len + 5, key}, d = {sizeof v, v};
            if (!appending) {
                size_t kl = e->len + 5, n = kl < last_len ? kl : last_len;
                int c = memcmp(key, last, n);
                appending = c > 0 || (c == 0 && kl > last_len);
            }
            int m = mdb_cursor_put(cur, &k, &d, appending ? MDB_APPEND : 0);
            if (m) {
                rc = mdb_fail(ix, m, "writing a posting");
                break;
            }
        }
        if (rc || !e->delta)
            continue;
        MDB_val k = {e->len, key}, d;
        int m = mdb_get(ix->wtxn, ix->df, &k, &d);
        int64_t df = 0;
        if (m == 0 && d.mv_size == 4)
            df = get32(d.mv_data);
        else if (m == 0 || m != MDB_NOTFOUND) {
            rc = m ? mdb_fail(ix, m, "reading a document frequency")
                   : fail(ix, CAIRN_ECORRUPT, "index %s: bad document frequency record", ix->dir);
            break;
        }
        df += e->delta;
        if (df < 0) {
            rc = fail(ix, CAIRN_ECORRUPT, "index %s: document frequency of '%.*s' below zero",
                      ix->dir, (int)e->len, (const char *)key);
            break;
        }
        if (df == 0) {
            m = mdb_del(ix->wtxn, ix->df, &k, NULL);
            if (m == MDB_NOTFOUND)
                m = 0;
        } else {
            uint32_t v = (uint32_t)df;
            d = (MDB_val){4, &v};
            m = mdb_put(ix->wtxn, ix->df, &k, &d, 0);
        }
        if (m)
            rc = mdb_fail(ix, m, "writing a document frequency");
    }
    mdb_cursor_close(cur);
out:
    free(order), free(start), free(sorted);
    if (!rc)
        batch_reset(ix);
    return rc;
}

int cairn__bm25_begin(cairn__bm25 *ix)
{
    if (!ix->writable || ix->wtxn)
        return fail(ix, CAIRN_EINVAL, "index %s: %s", ix->dir,
                    ix->wtxn ? "a batch is already open" : "opened read-only");
    /* slots of reader processes that died (a killed step) would keep old pages from being
     * reused, and the index growing with every rebuild */
    int dead = 0;
    mdb_reader_check(ix->env, &dead);
    int rc = mdb_txn_begin(ix->env, NULL, 0, &ix->wtxn);
    if (rc) {
        ix->wtxn = NULL;
        return mdb_fail(ix, rc, "mdb_txn_begin");
    }
    uint64_t next = 0;
    if ((rc = meta_get(ix->wtxn, ix->meta, "n_docs", &ix->n_docs)) ||
        (rc = meta_get(ix->wtxn, ix->meta, "total_len", &ix->total_len)) ||
        (rc = meta_get(ix->wtxn, ix->meta, "next_docno", &next))) {
        mdb_txn_abort(ix->wtxn);
        ix->wtxn = NULL;
        return mdb_fail(ix, rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc, "reading the counts");
    }
    ix->next_docno = (uint32_t)next;
    ix->poisoned = 0;
    batch_reset(ix);
    ix->err[0] = 0;
    return 0;
}

void cairn__bm25_abort(cairn__bm25 *ix)
{
    if (!ix || !ix->wtxn)
        return;
    mdb_txn_abort(ix->wtxn);
    ix->wtxn = NULL;
    batch_reset(ix);
}

/* Removes a stored document's postings (re-tokenizing its text) and its length. */
static int unindex_old(cairn__bm25 *ix, uint32_t docno, const MDB_val *rec)
{
    if (rec->mv_size < 16)
        return fail(ix, CAIRN_ECORRUPT, "index %s: document record %u is truncated", ix->dir,
                    docno);
    const char *r = rec->mv_data;
    uint32_t dl = get32(r), il = get32(r + 4), tl = get32(r + 8), el = get32(r + 12);
    if ((uint64_t)16 + il + tl + el != rec->mv_size)
        return fail(ix, CAIRN_ECORRUPT, "index %s: document record %u has bad lengths", ix->dir,
                    docno);
    /* rec points into the map: copy the text before any write can move pages */
    char *text = malloc(tl + 1);
    if (!text)
        return fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    memcpy(text, r + 16 + il, tl);
    if (docno / 8 < ix->pending_cap && (ix->pending[docno / 8] >> (docno % 8) & 1)) {
        int rc = flush(ix); /* its postings are still in the buffer: write them, then delete */
        if (rc) {
            free(text);
            return rc;
        }
    }
    int64_t n = doc_terms(ix, text, tl);
    free(text);
    if (n < 0)
        return fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    for (size_t i = 0; i < ix->n_doc_terms; i++) {
        term_ent *e = &ix->terms[ix->doc_terms[i]];
        memcpy(key, ix->pool + e->off, e->len);
        key[e->len] = 0;
        be32(docno, key + e->len + 1);
        MDB_val k = {e->len + 5, key};
        int m = mdb_del(ix->wtxn, ix->post, &k, NULL);
        if (m == MDB_NOTFOUND)
            return fail(ix, CAIRN_ECORRUPT,
                        "index %s: posting of '%.*s' for document %u is missing (was the index "
                        "written by another tokenizer?)",
                        ix->dir, (int)e->len, (const char *)key, docno);
        if (m)
            return mdb_fail(ix, m, "deleting a posting");
        e->delta--;
    }
    ix->total_len -= dl;
    return 0;
}

int cairn__bm25_add(cairn__bm25 *ix, const char *id, const char *text, size_t text_len,
                    const char *extra_json, int *replaced)
{
    if (replaced)
        *replaced = 0;
    if (!ix->wtxn)
        return fail(ix, CAIRN_EINVAL, "index %s: no open batch (call begin first)", ix->dir);
    if (ix->poisoned)
        return fail(ix, CAIRN_EINVAL, "index %s: an earlier error spoiled this batch", ix->dir);
    size_t il = id ? strlen(id) : 0, el = extra_json ? strlen(extra_json) : 0;
    if (il == 0 || il > CAIRN__BM25_MAX_ID)
        return fail(ix, CAIRN_EINVAL, "document id must be 1..%d bytes, not %zu",
                    CAIRN__BM25_MAX_ID, il);
    if (text_len > UINT32_MAX / 2 || el > UINT32_MAX / 2)
        return fail(ix, CAIRN_ETOOBIG, "document '%s' is too large", id);
    int rc, is_replace = 0;
    uint32_t docno;
    unsigned char dk[4];
    MDB_val k = {il, (void *)id}, d;
    int m = mdb_get(ix->wtxn, ix->ids, &k, &d);
    if (m == 0) {
        if (d.mv_size != 4) {
            rc = fail(ix, CAIRN_ECORRUPT, "index %s: id record of '%s' is malformed", ix->dir, id);
            goto poison;
        }
        docno = get32(d.mv_data);
        be32(docno, dk);
        MDB_val rk = {4, dk}, rec;
        m = mdb_get(ix->wtxn, ix->docs, &rk, &rec);
        if (m) {
            rc = m == MDB_NOTFOUND
                     ? fail(ix, CAIRN_ECORRUPT, "index %s: document %u ('%s') has no record",
                            ix->dir, docno, id)
                     : mdb_fail(ix, m, "reading a document");
            goto poison;
        }
        if ((rc = unindex_old(ix, docno, &rec)) != 0)
            goto poison;
        is_replace = 1;
        if (replaced)
            *replaced = 1;
    } else if (m == MDB_NOTFOUND) {
        if (ix->next_docno == UINT32_MAX) {
            rc = fail(ix, CAIRN_EFULL, "index %s: 2^32-1 documents is the limit", ix->dir);
            goto poison;
        }
        docno = ix->next_docno++;
        uint32_t v = docno;
        d = (MDB_val){4, &v};
        if ((m = mdb_put(ix->wtxn, ix->ids, &k, &d, 0)) != 0) {
            rc = mdb_fail(ix, m, "writing an id");
            goto poison;
        }
        ix->n_docs++;
        be32(docno, dk);
    } else {
        rc = mdb_fail(ix, m, "looking up an id");
        goto poison;
    }

    int64_t dl = doc_terms(ix, text, text_len);
    if (dl < 0 || dl > UINT32_MAX) {
        rc = dl < 0 ? fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir)
                    : fail(ix, CAIRN_ETOOBIG, "document '%s' has too many tokens", id);
        goto poison;
    }
    if (grow((void **)&ix->posts, &ix->posts_cap, ix->n_posts + ix->n_doc_terms,
             sizeof *ix->posts) ||
        grow_pending(ix, docno)) {
        rc = fail(ix, CAIRN_ENOMEM, "index %s: out of memory", ix->dir);
        goto poison;
    }
    for (size_t i = 0; i < ix->n_doc_terms; i++) {
        term_ent *e = &ix->terms[ix->doc_terms[i]];
        ix->posts[ix->n_posts++] = (posting){ix->doc_terms[i], docno, e->doc_tf, (uint32_t)dl};
        e->delta++;
    }
    if (ix->n_doc_terms)
        ix->pending[docno / 8] |= (uint8_t)(1u << (docno % 8));
    ix->total_len += (uint64_t)dl;

    /* the record: {dl, id_len, text_len, extra_len} id text extra */
    MDB_val rk = {4, dk}, rec = {16 + il + text_len + el, NULL};
    /* a new document has the largest number yet: append (full pages, no search) */
    m = mdb_put(ix->wtxn, ix->docs, &rk, &rec, MDB_RESERVE | (is_replace ? 0 : MDB_APPEND));
    if (m) {
        rc = mdb_fail(ix, m, "writing a document");
        goto poison;
    }
    uint32_t hdr[4] = {(uint32_t)dl, (uint32_t)il, (uint32_t)text_len, (uint32_t)el};
    char *w = rec.mv_data;
    memcpy(w, hdr, 16);
    memcpy(w + 16, id, il);
    if (text_len)
        memcpy(w + 16 + il, text, text_len);
    if (el)
        memcpy(w + 16 + il + text_len, extra_json, el);

    if (ix->n_posts >= ix->flush_at && (rc = flush(ix)) != 0)
        goto poison;
    return 0;
poison:
    ix->poisoned = 1;
    return rc;
}

int cairn__bm25_commit(cairn__bm25 *ix)
{
    if (!ix->wtxn)
        return fail(ix, CAIRN_EINVAL, "index %s: no open batch", ix->dir);
    if (ix->poisoned) {
        cairn__bm25_abort(ix);
        return fail(ix, CAIRN_EINVAL, "index %s: an earlier error spoiled this batch", ix->dir);
    }
    int rc = flush(ix), m;
    if (!rc && ((m = meta_put(ix->wtxn, ix->meta, "n_docs", ix->n_docs)) != 0 ||
                (m = meta_put(ix->wtxn, ix->meta, "total_len", ix->total_len)) != 0 ||
                (m = meta_put(ix->wtxn, ix->meta, "next_docno", ix->next_docno)) != 0))
        rc = mdb_fail(ix, m, "writing the counts");
    if (rc) {
        cairn__bm25_abort(ix);
        return rc;
    }
    m = mdb_txn_commit(ix->wtxn);
    ix->wtxn = NULL;
    batch_reset(ix);
    return m ? mdb_fail(ix, m, "mdb_txn_commit") : 0;
}

/* ------------------------------------------------------------------ reading */

/* A read transaction for one query: the handle's own, renewed (cheaper than a new one), or,
 * while this handle has a write batch open, that batch's transaction. */
static int read_txn(cairn__bm25 *ix, MDB_txn **txn)
{
    if (ix->wtxn) {
        *txn = ix->wtxn;
        return 0;
    }
    int rc =
        ix->rtxn ? mdb_txn_renew(ix->rtxn) : mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &ix->rtxn);
    if (rc == MDB_MAP_RESIZED) { /* a writer grew the map beyond ours: adopt its size */
        if (ix->rtxn)
            mdb_txn_abort(ix->rtxn);
        ix->rtxn = NULL;
        rc = mdb_env_set_mapsize(ix->env, 0);
        if (!rc)
            rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &ix->rtxn);
    }
    if (rc) {
        if (ix->rtxn)
            mdb_txn_abort(ix->rtxn);
        ix->rtxn = NULL;
        return mdb_fail(ix, rc, "starting a read transaction");
    }
    *txn = ix->rtxn;
    return 0;
}

static void read_done(cairn__bm25 *ix, MDB_txn *txn)
{
    if (txn == ix->rtxn)
        mdb_txn_reset(ix->rtxn);
}

static int read_counts(cairn__bm25 *ix, MDB_txn *txn, uint64_t *n, uint64_t *total, uint64_t *next)
{
    if (ix->wtxn) {
        *n = ix->n_docs, *total = ix->total_len, *next = ix->next_docno;
        return 0;
    }
    int rc;
    if ((rc = meta_get(txn, ix->meta, "n_docs", n)) ||
        (rc = meta_get(txn, ix->meta, "total_len", total)) ||
        (rc = meta_get(txn, ix->meta, "next_docno", next)))
        return mdb_fail(ix, rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc, "reading the counts");
    return 0;
}

int cairn__bm25_info_get(cairn__bm25 *ix, cairn__bm25_info *info)
{
    memset(info, 0, sizeof *info);
    MDB_txn *txn;
    int rc = read_txn(ix, &txn);
    if (rc)
        return rc;
    uint64_t next;
    rc = read_counts(ix, txn, &info->n_docs, &info->total_len, &next);
    MDB_stat st;
    int m;
    if (!rc && (m = mdb_stat(txn, ix->df, &st)) != 0)
        rc = mdb_fail(ix, m, "mdb_stat");
    else if (!rc)
        info->n_terms = st.ms_entries;
    if (ix->wtxn) /* the batch's df deltas are not written yet: count terms new to the index */
        for (size_t i = 0; !rc && i < ix->n_terms; i++) {
            MDB_val k = {ix->terms[i].len, ix->pool + ix->terms[i].off}, d;
            int present = mdb_get(txn, ix->df, &k, &d) == 0;
            info->n_terms += !present && ix->terms[i].delta > 0;
            info->n_terms -=
                present && d.mv_size == 4 && (int64_t)get32(d.mv_data) + ix->terms[i].delta == 0;
        }
    read_done(ix, txn);
    info->avgdl = info->n_docs ? (double)info->total_len / (double)info->n_docs : 0.0;
    return rc;
}

int cairn__bm25_stats(cairn__bm25 *ix, uint64_t *n_docs, double *avgdl)
{
    cairn__bm25_info info;
    int rc = cairn__bm25_info_get(ix, &info);
    if (n_docs)
        *n_docs = info.n_docs;
    if (avgdl)
        *avgdl = info.avgdl;
    return rc;
}

typedef struct qterm {
    size_t off, len;
} qterm;

typedef struct qterms {
    char *buf;
    size_t n, cap;
    qterm *t;
    size_t nt, tcap;
    int oom;
} qterms;

/* Token callback for queries: keeps the unique tokens in order of first appearance (queries
 * are short: a linear scan beats a hash here). */
static void query_tok(const char *tok, size_t len, void *arg)
{
    qterms *q = arg;
    for (size_t i = 0; i < q->nt; i++)
        if (q->t[i].len == len && !memcmp(q->buf + q->t[i].off, tok, len))
            return;
    if (grow((void **)&q->buf, &q->cap, q->n + len, 1) ||
        grow((void **)&q->t, &q->tcap, q->nt + 1, sizeof *q->t)) {
        q->oom = 1;
        return;
    }
    memcpy(q->buf + q->n, tok, len);
    q->t[q->nt++] = (qterm){q->n, len};
    q->n += len;
}

typedef struct heap_ent {
    double score;
    uint32_t docno;
} heap_ent;

/* a ranks below b: lower score, or equal score and later document */
static int worse(heap_ent a, heap_ent b)
{
    return a.score < b.score || (a.score == b.score && a.docno > b.docno);
}

static void sift_down(heap_ent *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && worse(h[l], h[m]))
            m = l;
        if (l + 1 < n && worse(h[l + 1], h[m]))
            m = l + 1;
        if (m == i)
            return;
        heap_ent t = h[i];
        h[i] = h[m], h[m] = t;
        i = m;
    }
}

static void sift_up(heap_ent *h, size_t i)
{
    while (i && worse(h[i], h[(i - 1) / 2])) {
        heap_ent t = h[i];
        h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Scores every posting of every unique query term into ix->score; fills ix->touched. */
static int accumulate(cairn__bm25 *ix, MDB_txn *txn, const qterms *q, uint64_t n_docs,
                      uint64_t total_len)
{
    const double k1 = CAIRN__BM25_K1, b = CAIRN__BM25_B;
    const double avgdl = n_docs ? (double)total_len / (double)n_docs : 0.0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, ix->post, &cur);
    if (rc)
        return mdb_fail(ix, rc, "mdb_cursor_open");
    unsigned char key[CAIRN__BM25_MAX_TOKEN + 5];
    for (size_t t = 0; t < q->nt && !rc; t++) {
        size_t tl = q->t[t].len;
        memcpy(key, q->buf + q->t[t].off, tl);
        MDB_val k = {tl, key}, d;
        int m = mdb_get(txn, ix->df, &k, &d);
        if (m == MDB_NOTFOUND)
            continue;
        if (m || d.mv_size != 4) {
            rc = m ? mdb_fail(ix, m, "reading a document frequency")
                   : fail(ix, CAIRN_ECORRUPT, "index %s: bad document frequency record", ix->dir);
            break;
        }
        double nt = get32(d.mv_data);
        double idf = log(1.0 + ((double)n_docs - nt + 0.5) / (nt + 0.5));
        /* tf*(k1+1) / (tf + k1*(1-b) + k1*b*dl/avgdl): the two constants hoisted */
        const double c0 = k1 * (1.0 - b), c1 = avgdl > 0 ? k1 * b / avgdl : 0.0;
        key[tl] = 0;
        k = (MDB_val){tl + 1, key};
        m = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
        while (m == 0) {
            if (k.mv_size != tl + 5 || memcmp(k.mv_data, key, tl + 1))
                break;
            if (d.mv_size != 8) {
                m = MDB_CORRUPTED;
                break;
            }
            const unsigned char *kp = (const unsigned char *)k.mv_data + tl + 1;
            uint32_t docno =
                (uint32_t)kp[0] << 24 | (uint32_t)kp[1] << 16 | (uint32_t)kp[2] << 8 | kp[3];
            uint32_t v[2];
            memcpy(v, d.mv_data, 8);
            if (docno >= ix->score_cap) {
                m = MDB_CORRUPTED;
                break;
            }
            double tf = v[0];
            double s = idf * tf * (k1 + 1.0) / (tf + c0 + c1 * (double)v[1]);
            if (ix->stamp[docno] != ix->cur_stamp) {
                ix->stamp[docno] = ix->cur_stamp;
                ix->score[docno] = s;
                ix->touched[ix->n_touched++] = docno;
            } else {
                ix->score[docno] += s;
            }
            m = mdb_cursor_get(cur, &k, &d, MDB_NEXT);
        }
        if (m && m != MDB_NOTFOUND)
            rc = mdb_fail(ix, m, "reading postings");
    }
    mdb_cursor_close(cur);
    return rc;
}

int cairn__bm25_search(cairn__bm25 *ix, const char *query, size_t k, cairn__bm25_hit **hits,
                       size_t *n)
{
    *hits = NULL;
    *n = 0;
    qterms q = {0};
    cairn__bm25_tokenize(query, strlen(query), query_tok, &q);
    if (q.oom) {
        free(q.buf), free(q.t);
        return fail(ix, CAIRN_ENOMEM, "out of memory");
    }
    if (q.nt == 0 || k == 0) {
        free(q.buf), free(q.t);
        return 0;
    }
    MDB_txn *txn;
    int rc = read_txn(ix, &txn);
    if (rc) {
        free(q.buf), free(q.t);
        return rc;
    }
    uint64_t n_docs, total_len, next;
    heap_ent *heap = NULL;
    cairn__bm25_hit *out = NULL;
    size_t nh = 0;
    if ((rc = read_counts(ix, txn, &n_docs, &total_len, &next)) != 0)
        goto done;
    if (next > ix->score_cap) {
        size_t cap = (size_t)next + next / 4 + 64;
        double *s = realloc(ix->score, cap * sizeof *s);
        if (s)
            ix->score = s;
        uint32_t *st = realloc(ix->stamp, cap * sizeof *st);
        if (st)
            ix->stamp = st;
        uint32_t *tc = realloc(ix->touched, cap * sizeof *tc);
        if (tc)
            ix->touched = tc;
        if (!s || !st || !tc) {
            rc = fail(ix, CAIRN_ENOMEM, "out of memory");
            goto done;
        }
        memset(ix->stamp + ix->score_cap, 0, (cap - ix->score_cap) * sizeof *st);
        ix->score_cap = cap;
    }
    if (++ix->cur_stamp == 0) {
        memset(ix->stamp, 0, ix->score_cap * sizeof *ix->stamp);
        ix->cur_stamp = 1;
    }
    ix->n_touched = 0;
    if ((rc = accumulate(ix, txn, &q, n_docs, total_len)) != 0)
        goto done;

    /* top k: a min-heap whose root is the worst of the best k so far */
    size_t cap = k < ix->n_touched ? k : ix->n_touched;
    heap = malloc((cap + 1) * sizeof *heap);
    if (!heap) {
        rc = fail(ix, CAIRN_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < ix->n_touched; i++) {
        heap_ent e = {ix->score[ix->touched[i]], ix->touched[i]};
        if (nh < cap) {
            heap[nh] = e;
            sift_up(heap, nh++);
        } else if (worse(heap[0], e)) {
            heap[0] = e;
            sift_down(heap, nh, 0);
        }
    }
    out = calloc(nh + 1, sizeof *out);
    if (!out) {
        rc = fail(ix, CAIRN_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = nh; i-- > 0;) { /* pop worst first into the back */
        heap_ent e = heap[0];
        heap[0] = heap[i];
        sift_down(heap, i, 0);
        unsigned char dk[4];
        be32(e.docno, dk);
        MDB_val kk = {4, dk}, rec;
        int m = mdb_get(txn, ix->docs, &kk, &rec);
        if (m) {
            rc = m == MDB_NOTFOUND ? fail(ix, CAIRN_ECORRUPT,
                                          "index %s: document %u has postings "
                                          "but no record",
                                          ix->dir, e.docno)
                                   : mdb_fail(ix, m, "reading a document");
            goto done;
        }
        const char *r = rec.mv_data;
        uint32_t il = rec.mv_size >= 16 ? get32(r + 4) : 0,
                 tl = rec.mv_size >= 16 ? get32(r + 8) : 0,
                 el = rec.mv_size >= 16 ? get32(r + 12) : 0;
        if (rec.mv_size < 16 || (uint64_t)16 + il + tl + el != rec.mv_size) {
            rc = fail(ix, CAIRN_ECORRUPT, "index %s: document record %u is malformed", ix->dir,
                      e.docno);
            goto done;
        }
        out[i].score = e.score;
        out[i].id = dup_n(r + 16, il);
        out[i].text = dup_n(r + 16 + il, tl);
        out[i].extra = el ? dup_n(r + 16 + il + tl, el) : NULL;
        if (!out[i].id || !out[i].text || (el && !out[i].extra)) {
            rc = fail(ix, CAIRN_ENOMEM, "out of memory");
            goto done;
        }
    }
done:
    read_done(ix, txn);
    free(q.buf), free(q.t);
    free(heap);
    if (rc) {
        cairn__bm25_hits_free(out, nh);
        return rc;
    }
    if (nh == 0) {
        free(out);
        out = NULL;
    }
    *hits = out;
    *n = nh;
    return 0;
}

void cairn__bm25_hits_free(cairn__bm25_hit *hits, size_t n)
{
    if (!hits)
        return;
    for (size_t i = 0; i < n; i++) {
        free(hits[i].id);
        free(hits[i].text);
        free(hits[i].extra);
    }
    free(hits);
}
